/*
 * ferry/wds.h - WebDataset shards: tar files whose members are grouped into samples.
 *
 * A member's name is KEY.EXT: KEY is the path up to the first dot of the base
 * name ("train/n0153/img_17" for "train/n0153/img_17.jpg"), EXT the rest ("jpg",
 * "seg.png", "txt.gz"). Consecutive members with the same KEY form one sample, and
 * each EXT becomes a field of that name. Fields:
 *   "__key__"  the sample's key (uint8, variable)
 *   "cls"      an int64 label, parsed from the member's ASCII decimal text
 *   any other  the member's bytes (uint8, variable)
 * Archives: POSIX ustar, GNU and pax (long names, pax sizes), as .tar, gzipped
 * (.tar.gz, .tgz) or zstd-compressed (.tar.zst): found by their magic bytes and
 * decoded as a stream (gzip with igzip where built, else zlib).
 * Directory entries are passed over; links, devices and sparse files, names
 * without an extension, a sample holding an extension twice and a header with a
 * bad checksum are errors naming the file, the member and its offset.
 *
 * The fields: with fields = "jpg;cls", only those extensions are read (other
 * members are passed over); else every extension found. A sample missing one of
 * the fields is an error naming it (missing FERRY_WDS_MISSING_ERROR), or is left out
 * (FERRY_WDS_MISSING_SKIP: the map-style index leaves it out at open, the stream
 * passes over it).
 *
 * The bound of a bytes field (and of "__key__"): max when given, else, map-style,
 * the largest member of that extension in the archives (known from the index),
 * and, for a stream, the largest in the first `infer` samples: a later, larger
 * member is FERRY_EOVERFLOW naming it and asking for max=.
 *
 * To decode images through the image pipeline, wrap the dataset with
 * ferry_dataset_images, or the stream with ferry_stream_images (ferry/pipeline.h;
 * the default field of both is "jpg", "jpeg" or "png"), or give pipeline= in a
 * source description ("wds:DIR,pipeline=train").
 *
 * Thread rules as for every dataset: get from many threads at once; a stream
 * iterator by one thread at a time.
 */
#ifndef FERRY_WDS_H
#define FERRY_WDS_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */
typedef struct ferry_stream ferry_stream;

enum { FERRY_WDS_MISSING_ERROR = 0, FERRY_WDS_MISSING_SKIP = 1 };

typedef struct ferry_wds_opts {
    const char *fields;  /* "ext;ext;..." or NULL: every extension */
    int missing;         /* FERRY_WDS_MISSING_ERROR or FERRY_WDS_MISSING_SKIP */
    uint64_t max;        /* bound of every bytes field; 0: found (above) */
    uint64_t infer;      /* stream: samples read at open for the schema; 0 = 100 */
    uint64_t max_member; /* a longer member is an error; 0 = 256 MiB */
} ferry_wds_opts;

/* Map-style over the samples of every tar at location (a file, a directory's
 * .tar/.tar.gz/.tgz/.tar.zst files, or a glob; in name order), through a member
 * index built at open from the headers (the data is not read). The tars must be
 * uncompressed (FERRY_ENOTSUP naming a compressed one). o may be NULL. */
FERRY_API int ferry_dataset_wds(ferry_dataset **out, const char *location, const ferry_wds_opts *o);

/* A stream over the same tars, compressed or not: the shard order is shuffled each
 * epoch (seed, epoch), stream shard k of n reads every n-th tar of that order,
 * each front to back. A broken archive (a bad header, data past its end) ends its
 * tar with an error that says the rest is not read.
 *
 * The stream is resumable (ferry_stream_save/restore/fetch, ferry/dataset.h). A
 * sample's pos: a = its tar (index among the tars in name order), b = the offset
 * of its first member's first header in the tar (in the decompressed bytes of a
 * gzipped tar), c = that header's number in the tar. An iterator's state is 64
 * bytes (the place in the epoch's tar order and the tar there, the open tar's size:
 * a tar that changed since is refused, the reader's offset, bytes still to pass
 * and header count), plus the key whose members are being passed over after an
 * error, if any. A plain tar resumes and fetches by seeking; gzip cannot seek, so
 * resuming a gzip shard decodes it from its start up to the position, and fetch
 * decodes forward from the sample it fetched last (from the tar's start when pos is
 * before it): fetches in ascending (tar, offset) order cost one pass over each
 * tar, and each fetch of an earlier place than the last one's decodes the tar again
 * from its start. */
FERRY_API int ferry_stream_wds(ferry_stream **out, const char *location, const ferry_wds_opts *o,
                               uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_WDS_H */
