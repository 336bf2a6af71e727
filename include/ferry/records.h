/*
 * ferry/records.h - ferry's own record shards: pack once, read many times.
 *
 * A shard file (NAME-1f2e3d4c-00003-of-00016.ferry) holds records, each a sample whose
 * fields follow the shard's schema (the same ferry_field list datasets use), with
 * a length and a CRC-32C, optionally zstd-compressed, and a footer index that
 * makes record i one lookup in the mapped file. A file whose footer is missing (its
 * writer died) is still read by a scan, which recovers every whole record.
 * docs/record-format.md specifies the bytes.
 *
 * Writing is a transaction: records go to temporary files; commit syncs them,
 * renames them into place with their final names and writes the manifest
 * (NAME.manifest) last. An abort, or a writer killed at any point, leaves no file
 * a reader would take for a whole shard.
 *
 * Replacing a set needs no flag and loses nothing. Each write is a generation:
 * a random set id, whose first 8 hex digits are in its shards' names and which
 * each shard carries in its header with its index in the set. The new
 * generation's shards never overwrite the old one's; renaming the new manifest
 * over NAME.manifest is the one switch from the old set to the new, and the old
 * generation's shards are removed only after it. So a write that fails or is
 * killed at any moment leaves the whole old set or the whole new one, and a reader
 * checks every shard's identity against its manifest, so it never takes a mix.
 * What killed writers leave (temporaries, a generation no manifest names) is
 * removed when the set is next written, and readers and ferry_records_verify
 * ignore it. One writer per directory and name at a time.
 */
#ifndef FERRY_RECORDS_H
#define FERRY_RECORDS_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */
typedef struct ferry_stream ferry_stream;

/* ---- Writing ---- */
typedef struct ferry_record_writer ferry_record_writer;

typedef struct ferry_writer_opts {
    const char *dir;           /* created if missing */
    const char *name;          /* shard name prefix; NULL = "data" */
    const ferry_field *fields; /* the schema (copied) */
    int nfields;
    uint64_t shard_bytes;   /* start a new shard past this size; 0 = 1 GiB */
    uint64_t shard_records; /* ... or past this many records; 0 = no limit */
    int zstd_level;         /* 0 = store records as they are; 1..19 = compress each */
} ferry_writer_opts;

FERRY_API int ferry_writer_open(ferry_record_writer **out, const ferry_writer_opts *o);
/* Appends a sample laid out as the loader lays it out: data[f] holds field f
 * (variable fields: length[f] rows of it). The writer copies what it needs. */
FERRY_API int ferry_writer_append(ferry_record_writer *w, const ferry_sample *s);
/* Finishes every shard (footer, fsync), renames them to
 * NAME-GGGGGGGG-%05d-of-%05d.ferry (GGGGGGGG: this generation), fsyncs the
 * directory, and writes NAME.manifest (set id, shards, record counts, sizes, file
 * CRCs) atomically: the switch to the new set. Then removes the set's previous
 * generation. Frees the writer, whatever the result. On a failure before the
 * switch the new shards are removed and the previous set is left whole; a failed
 * directory fsync after it is FERRY_EIO saying that the new set is in place but
 * may not survive a crash (the previous generation's files are then left for the
 * next write to remove). */
FERRY_API int ferry_writer_commit(ferry_record_writer *w);
/* Removes what was written and frees the writer. NULL is fine. */
FERRY_API void ferry_writer_abort(ferry_record_writer *w);
FERRY_API uint64_t ferry_writer_records(const ferry_record_writer *w);

/* ---- Reading one shard ---- */
typedef struct ferry_record_file ferry_record_file;

enum {
    FERRY_RECORD_RECOVER = 1 /* no valid footer: scan for whole records instead of failing */
};

/* Maps a shard and checks its header and footer. A path that is not a regular file
 * (a FIFO, a device, a directory) is refused at once with FERRY_EIO, without
 * blocking. Errors name the file and say why (FERRY_ECORRUPT); with FERRY_RECORD_RECOVER a missing
 * or damaged footer is replaced by a scan that keeps every whole record before the first bad one.
 */
FERRY_API int ferry_record_file_open(ferry_record_file **out, const char *path, int flags);
FERRY_API void ferry_record_file_free(ferry_record_file *f);
FERRY_API uint64_t ferry_record_file_count(const ferry_record_file *f);
/* The shard's size in bytes (its file's; for a remote one, the object's). */
FERRY_API uint64_t ferry_record_file_bytes(const ferry_record_file *f);
FERRY_API int ferry_record_file_nfields(const ferry_record_file *f);
FERRY_API const ferry_field *ferry_record_file_field(const ferry_record_file *f, int i);
/* 1 when the footer was missing or damaged and the records were found by a scan. */
FERRY_API int ferry_record_file_recovered(const ferry_record_file *f);

/* Record i's stored bytes (compressed if the shard is), zero-copy from the mapping:
 * valid until ferry_record_file_free. The CRC is checked (FERRY_ECORRUPT naming
 * the file, record and offset on a mismatch). The bytes are the file's pages: if
 * another process cuts the file short, reading them faults (SIGBUS) in the
 * caller; ferry_record_file_read copies under a guard instead. */
FERRY_API int ferry_record_file_raw(const ferry_record_file *f, uint64_t i, const void **data,
                                    size_t *size, uint64_t *offset);
/* Decodes record i into a sample (data[f] sized as ferry_field_nbytes): checks
 * the CRC, decompresses into ctx's scratch memory when needed, checks every field's
 * size against the schema. A shard cut short by another process while it is
 * read is FERRY_EIO naming the file and the record ("... the file was cut short
 * while it was read"), not a SIGBUS: the mapped readers install a process-wide
 * SIGBUS handler once (it passes other faults on to the previous handler). A
 * shard replaced by a rename, or grown, is read as it was at open. See
 * docs/changing-files.md. */
FERRY_API int ferry_record_file_read(const ferry_record_file *f, uint64_t i, ferry_sample *out,
                                     ferry_ctx *ctx);

/* ---- Checking ---- */

/* Receives one problem found by ferry_records_verify: a message naming the file,
 * record and offset, and what is wrong. */
typedef void (*ferry_report_fn)(const char *message, void *arg);

/* Checks a shard file, or a directory's shard set by its manifest: the manifest's
 * sizes, record counts and file CRCs against the files, each shard's set identity,
 * shards it does not name, every footer, and every record's CRC. Each problem goes
 * to report (may be NULL) and the check goes on. *problems counts them, *records
 * the records that passed. Shard files of the set that its manifest does not name
 * (left by an earlier or unfinished write, removed by the next) are no damage:
 * they go to report as messages starting "note: " and are not counted. Returns 0
 * when the check ran, whatever it found; an error when it could not (no such
 * path, or one that is neither a regular file nor a directory). */
FERRY_API int ferry_records_verify(const char *path, ferry_report_fn report, void *arg,
                                   uint64_t *problems, uint64_t *records);

/* ---- A set of shards, as a dataset ---- */

/* Map-style over every record of every shard in DIR (named by its manifest, else
 * every *.ferry file in name order), through one global index, so any sampler works.
 * Only the shards with (position % num_shards == shard_id) are taken: Caffe2's
 * DBReader sharding; (0, 1) takes all. The manifest's record counts and sizes, and
 * each shard's set identity, are checked against the files; a shard it names that
 * is missing is an error (after reading the manifest again, in case the set was
 * just replaced). Without a manifest, a shard that carries a set identity is an
 * error (its set's manifest is missing). dir may name the manifest itself
 * (DIR/NAME.manifest): the set is then read without listing DIR, as an HTTP
 * location needs; a remote DIR (s3://, http(s)://) is read through the node cache
 * (ferry/remote.h). */
FERRY_API int ferry_dataset_records(ferry_dataset **out, const char *dir, uint64_t shard_id,
                                    uint64_t num_shards);

/* The shard files of DIR as a reader takes them: those its manifest names, in its
 * order, else every *.ferry file in name order. *paths ("DIR/FILE" each) and its
 * strings are the caller's, freed with ferry_records_shards_free. FERRY_ENOENT when
 * DIR has no manifest and no shard. */
FERRY_API int ferry_records_shards(const char *dir, char ***paths, size_t *n);
FERRY_API void ferry_records_shards_free(char **paths, size_t n);

/* A stream over the shards of DIR: each epoch shuffles the shard order (seeded by
 * seed and epoch), stream shard k of n reads every n-th shard of that order, and
 * each shard is read front to back. */
FERRY_API int ferry_stream_records(ferry_stream **out, const char *dir, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_RECORDS_H */
