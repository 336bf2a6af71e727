/*
 * Dataset internals shared with the loader.
 */
#ifndef FERRY_DATASET_INTERNAL_H
#define FERRY_DATASET_INTERNAL_H

#include "ferry/dataset.h"
#include "../core/internal.h"
#include "../core/ctx.h"
#include "../core/state.h"

struct ferry_dataset {
    const ferry_dataset_vtable *vt;
    void *self;
    uint64_t len;
    bool near_hints_only; /* hint with soon = 0 does nothing: the loader skips it */
    /* entries near in index lie near in its store (a key order, a file), so reads
     * cost less taken in index order: the loader reads a grain's samples sorted by
     * index, each into its own slot (the batch is the same) */
    bool in_order;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    /* a folder's classes and what its walk left out (files:, and datasets over one
     * such as images:), or NULL; owned by the folder dataset (ferry/folder.h) */
    const struct ferry__folder *folder;
    /* "KIND:LOCATION" when opened from source text (ferry_source_open), else "":
     * for messages that have no file of their own (the loader's memory budget) */
    char source[256];
    /* it reads remote objects (s3://, http(s)://): a loader counts the fetch
     * buffers (ferry__remote_buffer_bytes) in its memory budget */
    bool remote;
    /* its shards (ferry_dataset_shards): bounds[nshards + 1], owned, or NULL for
     * one shard (whole = {0, len}) */
    uint64_t *shard_bounds, nshards;
    uint64_t whole[2];
};

struct ferry_stream {
    const ferry_stream_vtable *vt;
    void *self;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    /* memory each open iterator holds in buffers (a shuffle buffer, a group-batch's
     * slots), summed down the chain: for a loader's memory budget */
    uint64_t iter_bytes;
    bool resumable; /* save, restore and fetch down the whole chain */
    /* fetch reads any place about as fast as next() reads the next one (memory,
     * a mapped file): a restored shuffle buffer then reads its samples again
     * only as it hands them out. Otherwise (a file read in order, a compressed
     * one) a restore reads them all at once, in the order of their places. */
    bool fetch_anywhere;
    char source[256]; /* as a dataset's */
    bool remote;      /* as a dataset's */
};

struct ferry_stream_iter {
    ferry_stream *st;
    void *iter;
    bool used; /* next() was called: too late to restore */
};

/* A sample's place in a saved state: its ferry_pos as four little-endian u64s
 * (the state codec is core/state.h). */
_Static_assert(sizeof(ferry_pos) == 4 * sizeof(uint64_t), "ferry_pos is four u64s");
static inline void ferry__state_put_pos(ferry_state *w, const ferry_pos *pos, size_t n)
{
    ferry__state_put_u64s(w, pos, 4 * n);
}
static inline int ferry__state_get_pos(ferry_state *r, ferry_pos *pos, size_t n)
{
    return ferry__state_get_u64s(r, pos, n > SIZE_MAX / 4 ? SIZE_MAX / 4 : 4 * n);
}

/* Declares *ds's shards (ferry_dataset_set_shards) from their first indices, each
 * `stride` bytes after the one before (a field of an array of structs); the last
 * shard ends at the length. Given the rc of the ferry_dataset_create that made
 * *ds: a failure of either frees *ds and is returned. */
int ferry__dataset_shards_at(ferry_dataset **ds, int rc, const void *first, size_t stride,
                             uint64_t nshards);

/* The whole chain's position into w (a growing buffer reused from snapshot to
 * snapshot): 0, FERRY_ENOMEM, FERRY_ENOTSUP or the stream's error. And back:
 * restores a freshly opened iterator from buf[0..n) as ferry_stream_restore. */
int ferry__stream_snapshot(ferry_stream_iter *it, ferry_state *w);
int ferry__stream_resume(ferry_stream_iter *it, const uint8_t *buf, size_t n, ferry_ctx *ctx);

/* images' fields (ferry_dataset_images, ferry_stream_images): the n fields in,
 * field f the decoded "image" (p's dtype and [H, W, C]; mode none: the bytes as
 * they are) into out. who ("dataset", "stream") names the source when another
 * field is named "image" already. */
struct ferry_image_pipeline;
int ferry__images_fields(ferry_field *out, const ferry_field *in, int n, int f,
                         const struct ferry_image_pipeline *p, const char *who);

/* Record i of a records dataset as stored (zero-copy, CRC checked), and whether
 * its shard is compressed. */
int ferry__records_raw(const ferry_dataset *ds, uint64_t i, const void **payload, size_t *n,
                       int *compressed);

#endif
