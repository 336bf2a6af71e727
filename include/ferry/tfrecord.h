/*
 * ferry/tfrecord.h - TFRecord files (TensorFlow, TFX, TFDS), read without TensorFlow.
 *
 * A TFRecord file is a run of records, each framed by its length and two masked
 * CRC-32Cs (of the length, and of the data); both are checked on every read. A
 * file may be gzip-compressed as a whole (TensorFlow's compression_type "GZIP") or
 * zstd-compressed (`zstd file.tfrecord`): with compression AUTO, files whose first
 * bytes are gzip's or zstd's magic are decoded (gzip with ISA-L's igzip where the
 * build has it, else zlib; streaming: memory stays at the read window however
 * large the file).
 *
 * Records are tf.train.Example messages, decoded into named fields:
 *   float_list -> float32, int64_list -> int64, bytes_list -> uint8 bytes.
 * A list that holds one value in every record is a scalar; a fixed count k > 1 a
 * fixed field [k]; a count that varies a variable field up to the largest count.
 * A bytes feature with at most one value is a variable uint8 field up to its
 * longest value; one with several values is a variable field [values, longest
 * value] whose rows are zero-padded (the values' own lengths are not kept: use
 * raw=1 and parse the records yourself where they matter).
 * The schema is inferred from the first `infer` records (in file name order), or
 * given as text: "name:dtype[:shape];..." with dtype f32, i64 or bytes and shape
 *   (none)  a scalar (f32, i64)
 *   N       a fixed field of N values (f32, i64); up to N bytes (bytes)
 *   ~N      a variable field of up to N values (f32, i64)
 *   KxN     up to K values of up to N bytes each (bytes)
 * Only the named features are decoded; the others are passed over.
 * A value longer than its field (an inferred bound is the largest seen while
 * inferring) is FERRY_EOVERFLOW naming the file, record, offset and feature.
 *
 * Missing values: a key absent from a record, or present as a Feature with no
 * kind set (how several writers store a missing value), gives a variable field
 * length 0. For a fixed field it is FERRY_ENOENT naming the feature, or, with
 * missing FILL, every value set to `fill`.
 *
 * tf.train.SequenceExample records: the context's features are fields as above;
 * each feature list is a variable field whose dim 0 is its steps (up to the most
 * steps seen while inferring): float/int64 steps of one value give [steps], of k
 * values [steps, k] (every step must hold k); bytes steps of one value give
 * [steps, longest] with rows zero-padded (steps of several bytes values are
 * FERRY_ENOTSUP: read those with raw = 1). A name used by both the context and a
 * list is FERRY_ENOTSUP. features= names context (or Example) features only.
 *
 * raw = 1: one field "data", the record's bytes (uint8, variable).
 *
 * Errors name the file, the record number and its offset (in the decompressed
 * stream for a compressed file) and say why: a CRC mismatch, a truncated record, a
 * length over max_record, malformed protobuf bytes (with the byte in the record).
 * The protobuf parser is bounded: no recursion, every length checked against its
 * enclosing message, varints at most 10 bytes.
 *
 * Thread rules: a dataset's get is called from many threads at once; a stream's
 * iterators are each used by one thread at a time.
 */
#ifndef FERRY_TFRECORD_H
#define FERRY_TFRECORD_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */
typedef struct ferry_stream ferry_stream;

enum { FERRY_TFRECORD_AUTO = 0, FERRY_TFRECORD_NONE = 1, FERRY_TFRECORD_GZIP = 2 };
enum { FERRY_TFRECORD_MISSING_ERROR = 0, FERRY_TFRECORD_MISSING_FILL = 1 };

typedef struct ferry_tfrecord_opts {
    int compression;      /* FERRY_TFRECORD_AUTO (gzip or zstd by magic bytes), _NONE
                           * or _GZIP */
    int raw;              /* 1: one field "data" with each record's bytes */
    const char *features; /* the schema as text (above); NULL: inferred */
    uint64_t infer;       /* records read to infer the schema or raw bound; 0 = 1000 */
    int missing;          /* FERRY_TFRECORD_MISSING_ERROR or FERRY_TFRECORD_MISSING_FILL */
    double fill;          /* the value of a missing fixed field with FILL */
    uint64_t max_record;  /* longer records are an error; 0 = 256 MiB */
    uint64_t max;         /* raw: the bound of "data"; 0 = the longest record (map-style)
                           * or the longest of the inferred ones (stream) */
} ferry_tfrecord_opts;

/* Map-style over every record of the files at location (a file, a directory's
 * files whose names contain "tfrecord" or "tfrec", or a glob pattern; in name
 * order), through an offset index built at open by reading each record's header
 * (the data is not read). The files must be uncompressed (gzip and zstd have no
 * random access: FERRY_ENOTSUP saying so). o may be NULL for the defaults. */
FERRY_API int ferry_dataset_tfrecord(ferry_dataset **out, const char *location,
                                     const ferry_tfrecord_opts *o);

/* A stream over the same files, compressed or not: each epoch shuffles the file
 * order (seeded by seed and epoch), stream shard k of n reads every n-th file of
 * that order (so a loader's ranks and workers split the files, as
 * ferry_stream_records does), and each file is read front to back. A broken frame
 * (a bad length CRC, a truncated record) ends its file with an error that says
 * the rest of the file is not read; a bad data CRC or a record that does not
 * decode is an error for that record only.
 *
 * The stream is resumable (ferry_stream_save/restore/fetch, ferry/dataset.h). A
 * sample's pos: a = its file (index among the files in name order), b = its
 * record's offset in the file (in the decompressed bytes of a compressed file), c = its
 * record number in the file. An iterator's state is 48 bytes: the place in the
 * epoch's file order and the file there, the open file's size (a file that changed
 * since is refused), the reader's offset and record number. A plain file resumes
 * and fetches by seeking; gzip and zstd cannot seek, so resuming a compressed shard decodes it
 * from its start up to the position, and fetch decodes forward from the sample it
 * fetched last (from the file's start when pos is before it): fetches in ascending
 * (file, offset) order cost one pass over each file, and each fetch of an earlier
 * place than the last one's decodes the file again from its start. */
FERRY_API int ferry_stream_tfrecord(ferry_stream **out, const char *location,
                                    const ferry_tfrecord_opts *o, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TFRECORD_H */
