/*
 * MDS (MosaicML Streaming) index.json, parsed and checked; shared by the mds
 * dataset and its fuzz target. See ferry/mds.h for the format.
 */
#ifndef FERRY_MDS_INTERNAL_H
#define FERRY_MDS_INTERNAL_H

#include "ferry/mds.h"
#include "../core/internal.h"

#define FERRY__MDS_MAX_SHARDS ((size_t)1 << 20)
#define FERRY__MDS_MAX_BASENAME 255

enum {
    FERRY__MDS_SCALAR = 0, /* a fixed-size number */
    FERRY__MDS_BYTES,      /* str, bytes, json, images...: variable uint8 */
    FERRY__MDS_ARRAY,      /* ndarray:DTYPE:SHAPE, fixed */
    FERRY__MDS_ARRAY_DYN   /* ndarray:DTYPE, its shape in each sample */
};

typedef struct ferry__mds_column {
    char name[FERRY_MAX_NAME];
    char encoding[64];
    int kind;
    ferry_dtype dtype;
    size_t size; /* bytes in a sample for a fixed column; 0 for a variable one */
    int ndim;
    int64_t shape[FERRY_MAX_DIMS];
} ferry__mds_column;

typedef struct ferry__mds_shard {
    char raw[FERRY__MDS_MAX_BASENAME + 1]; /* raw_data.basename */
    char zip[FERRY__MDS_MAX_BASENAME + 1]; /* zip_data.basename, "" when none */
    uint64_t raw_bytes, zip_bytes, samples;
    uint32_t offset; /* where its entry starts in index.json */
} ferry__mds_shard;

typedef struct ferry__mds_index {
    int ncols;
    ferry__mds_column cols[FERRY_MAX_FIELDS];
    int nvar; /* columns with a per-sample size */
    size_t nshards;
    ferry__mds_shard *shards;
    uint64_t samples;
} ferry__mds_index;

/* Parses index.json text[0..n) (name: its path, for messages). Every shard must be
 * format "mds" with the same columns; pkl and unknown encodings are refused
 * (FERRY_ENOTSUP naming the column); basenames must be plain file names. */
int ferry__mds_index_parse(ferry__mds_index *ix, const char *name, const char *text, size_t n);
void ferry__mds_index_free(ferry__mds_index *ix);

#endif
