/*
 * ferry/mds.h - MosaicML Streaming's MDS shards as a dataset.
 *
 * A dataset directory holds index.json ({"shards": [...], "version": 2}) and
 * shard files. Each shard entry names its columns (column_names,
 * column_encodings, column_sizes), its sample count, its raw file (raw_data:
 * basename, bytes) and, when compressed, its compressed file (zip_data). A raw
 * shard is: uint32 sample count n, uint32 offsets[n + 1] (absolute, the last
 * one the file's size), the shard's JSON config, then the samples: for each,
 * a uint32 size for every variable-size column, then the columns' bytes in
 * column order.
 *
 * Columns become fields, by encoding:
 *  - int (int64), int8 .. int64, uint8 .. uint64, float16, float32, float64:
 *    scalars of that dtype;
 *  - ndarray:DTYPE:D1,D2,..: a fixed array of that dtype and shape;
 *    ndarray:DTYPE (its shape stored per sample): the values flattened into a
 *    variable field (up to the largest sample's count), and NAME.shape
 *    (int64 [8], zeros past its rank);
 *  - str, bytes, json, str_int, str_float, str_decimal, jpeg, png, pil: their
 *    bytes in a variable uint8 field, bounded by the largest sample's. jpeg and
 *    png columns go through the image pipeline with the source's pipeline= and
 *    image_field=NAME options ("mds:DIR,pipeline=train,image_field=jpg").
 * Refused, with a message naming the column: pkl (Python pickles: code in data),
 * ndarray without a fixed dtype, encodings ferry does not know.
 *
 * Shards are mapped. A shard whose raw file is absent is read from its zstd
 * file (zip_data, compression "zstd"): decompressed once, at open, into memory
 * within a bound (zstd_max; past it the shard is refused, naming it), or onto
 * disk in a cache directory (cache) and mapped from there. Other compressions
 * are refused. The index's hashes are not checked.
 *
 * At open every shard is checked against the index: its size, its sample count,
 * its offsets, and every sample's column sizes (which also gives the variable
 * fields their bounds). A disagreement is FERRY_ECORRUPT naming the shard, the
 * sample and the offset. That check reads the start of every sample once, so
 * opening costs a pass over the shards' pages (from the page cache, a fraction
 * of a second per GB). index.json may hold at most FERRY_MDS_MAX_INDEX bytes and
 * 4M JSON values (about 120,000 shards).
 *
 * Samples are numbered across shards in index order (a global index), so any
 * sampler works. Thread rules: a dataset may be read from any number of threads.
 */
#ifndef FERRY_MDS_H
#define FERRY_MDS_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */

#define FERRY_MDS_MAX_INDEX ((uint64_t)256 << 20) /* index.json larger than this is refused */

typedef struct ferry_mds_opts {
    const char *dir;
    /* bytes of decompressed shards held in memory in all, or with cache the bytes
     * of any one shard written there; 0 = 1 GiB */
    uint64_t zstd_max;
    /* NULL, or a directory (created with its parents if missing) where shards
     * present only as zstd files are decompressed (each written whole or not at
     * all, then mapped), as Streaming's local cache does. One already there is
     * mapped as it is while the record beside it (.NAME.src: the zstd file's and
     * the copy's size, mtime and inode) still matches; an edit of either
     * decompresses it again. Errors name the copy and its zstd file. */
    const char *cache;
} ferry_mds_opts;

FERRY_API int ferry_dataset_mds(ferry_dataset **out, const ferry_mds_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_MDS_H */
