/*
 * ferry/dataset.h - where samples come from.
 *
 * A sample is a fixed list of named fields (its schema), written in place into
 * its slot of a batch buffer: the vocabulary (ferry_field, ferry_sample,
 * ferry_pos, ferry_ctx) is in ferry/sample.h, included here.
 *
 * Two kinds of dataset:
 *  - map-style (ferry_dataset): a length and "write sample i". Any sampler can order
 *    it, and workers read samples in parallel.
 *  - stream (ferry_stream): "open shard k of n for epoch e, then next, next, ...".
 *    For sources that can only be read in order.
 */
#ifndef FERRY_DATASET_H
#define FERRY_DATASET_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Map-style datasets ---- */
typedef struct ferry_dataset ferry_dataset;

typedef struct ferry_dataset_vtable {
    /* Number of samples. Constant for the dataset's life. */
    uint64_t (*len)(void *self);
    /* Writes sample `index` (< len) into *out. Returns 0, or a negative code with
     * the thread's message set by ferry_error(): say where (file, record, offset)
     * and why. Called from several worker threads at once. */
    int (*get)(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx);
    /* Frees self. May be NULL. */
    void (*destroy)(void *self);
    /* Optional (may be NULL): indices the loader will read. soon = 0: a later
     * batch (ask the kernel to read ahead); soon = 1: the next calls to get, in
     * this order (prefetch into the CPU's caches: several misses then overlap
     * instead of stalling one after another). Called from worker threads, outside
     * any lock; must not block for long. */
    void (*hint)(void *self, const uint64_t *indices, size_t n, int soon);
} ferry_dataset_vtable;

/* Wraps a user dataset. The schema is copied; vt must stay valid for the dataset's
 * life; self is owned by the dataset (destroy is called on free, also when this
 * call fails). */
FERRY_API int ferry_dataset_create(ferry_dataset **out, const ferry_dataset_vtable *vt, void *self,
                                   const ferry_field *fields, int nfields);
FERRY_API void ferry_dataset_free(ferry_dataset *ds);
FERRY_API uint64_t ferry_dataset_len(const ferry_dataset *ds);
FERRY_API int ferry_dataset_nfields(const ferry_dataset *ds);
/* The schema of field i; NULL when out of range. Valid for the dataset's life. */
FERRY_API const ferry_field *ferry_dataset_field(const ferry_dataset *ds, int i);
/* The index of the field of that name, or -1. */
FERRY_API int ferry_dataset_find_field(const ferry_dataset *ds, const char *name);
/* The dataset's shards: the units its samples are stored in (files: record
 * shards, TFRecord files, WebDataset tars, MDS shards, token shards), in index
 * order. Returns their number and sets *bounds to nshards + 1 nondecreasing
 * indices: shard k holds [bounds[k], bounds[k + 1]), bounds[0] = 0, and
 * bounds[nshards] = the length (a shard may be empty). A dataset that does not
 * say (one file, an LMDB environment, a folder, a user's vtable that did not
 * call ferry_dataset_set_shards) is one shard. What ferry_sampler_window groups
 * by. Borrowed, valid for the dataset's life. */
FERRY_API uint64_t ferry_dataset_shards(const ferry_dataset *ds, const uint64_t **bounds);
/* Declares the dataset's shards (bounds as above, copied): for a dataset made with
 * ferry_dataset_create over sharded data, and for one that wraps another (it
 * passes the inner's on). FERRY_EINVAL for bounds that do not go from 0 up to the
 * length, naming the shard; FERRY_ENOMEM. */
FERRY_API int ferry_dataset_set_shards(ferry_dataset *ds, const uint64_t *bounds, uint64_t nshards);
/* Reads one sample (bounds-checked: FERRY_ERANGE past the end). */
FERRY_API int ferry_dataset_get(ferry_dataset *ds, uint64_t index, ferry_sample *out,
                                ferry_ctx *ctx);

/* ---- Streams ---- */
typedef struct ferry_stream ferry_stream;

/* A stream iterator's position, written by save and read back by restore (below). */
typedef struct ferry_state ferry_state;

typedef struct ferry_stream_vtable {
    /* Opens shard `shard` of `nshards` for `epoch` (a disjoint part; together the
     * shards cover the stream once). *iter is the cursor. */
    int (*open)(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter);
    /* Writes the next sample. 0, FERRY_END when the shard is done, or an error.
     * FERRY_BREAK (nothing written) asks the loader to end the current batch here,
     * so that the samples before it form a batch of their own (group-batch). A
     * resumable stream sets out->pos.a, .b and .c (.epoch is set for it). */
    int (*next)(void *iter, ferry_sample *out, ferry_ctx *ctx);
    void (*close)(void *iter);
    void (*destroy)(void *self); /* may be NULL */
    /* Optional, all three or none; with them the stream is resumable: a loader's
     * state (ferry/loader.h) holds the iterators' positions instead of a count of
     * samples to read again.
     *  - save: writes the iterator's position with ferry_state_put* (no sample
     *    bytes: a few numbers, and a buffering decorator's samples as their pos).
     *  - restore: given an iterator just opened with the same shard, nshards and
     *    epoch, reads that position back with ferry_state_get* and continues from
     *    it: next() then yields what the saved iterator would have yielded.
     *    FERRY_ECORRUPT (or what ferry_state_get returned) for a state that is not
     *    one this stream saved.
     *  - fetch: writes again the sample that next() returned with *pos, wherever
     *    the iterator is, without moving it (pos may come from another shard or an
     *    earlier pass of the same stream). Per-sample randomness must then come from
     *    pos alone (e.g. ferry_ctx_rng keyed by a hash of pos.a, pos.b and pos.c, under
     *    the epoch pos.epoch that ferry_stream_fetch sets in ctx).
     * A stream that wraps another is resumable only if the other is. */
    int (*save)(void *iter, ferry_state *w);
    int (*restore)(void *iter, ferry_state *r, ferry_ctx *ctx);
    int (*fetch)(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx);
} ferry_stream_vtable;

FERRY_API int ferry_stream_create(ferry_stream **out, const ferry_stream_vtable *vt, void *self,
                                  const ferry_field *fields, int nfields);
/* A map-style dataset read in order: shard k of n holds indices k, k+n, k+2n, ...
 * ds is borrowed and must outlive the stream. */
FERRY_API int ferry_stream_from_dataset(ferry_stream **out, ferry_dataset *ds);
FERRY_API void ferry_stream_free(ferry_stream *st);
FERRY_API int ferry_stream_nfields(const ferry_stream *st);
FERRY_API const ferry_field *ferry_stream_field(const ferry_stream *st, int i);

/* A cursor over one shard of a stream. */
typedef struct ferry_stream_iter ferry_stream_iter;
FERRY_API int ferry_stream_open(ferry_stream *st, uint64_t shard, uint64_t nshards, uint64_t epoch,
                                ferry_stream_iter **out);
FERRY_API int ferry_stream_next(ferry_stream_iter *it, ferry_sample *out, ferry_ctx *ctx);
FERRY_API void ferry_stream_close(ferry_stream_iter *it);

/* ---- Stream positions: saving an iterator and resuming it ----
 * 1 when every stream of the chain has save, restore and fetch (the built-in file
 * streams do: records, TFRecord, WebDataset and CSV; a compressed file is resumed
 * by decoding it from its start up to the position, as it cannot seek; the
 * decorators do when their inner does).
 * A stream that is not resumable is resumed by the loader by reading its samples
 * again from the start of the epoch (ferry/loader.h). */
FERRY_API int ferry_stream_resumable(const ferry_stream *st);

/* Writes the iterator's position (the whole chain's) into buf: 0 and *len bytes;
 * FERRY_EOVERFLOW when cap is too small (*len then says how much is needed);
 * FERRY_ENOTSUP when the stream is not resumable. The size: 16 bytes, plus each
 * level's, listed in ferry/stream.h and with each stream. */
FERRY_API int ferry_stream_save(ferry_stream_iter *it, void *buf, size_t cap, size_t *len);
/* Continues a freshly opened iterator (same stream settings, shard, nshards and
 * epoch as the saved one; nothing read from it yet: FERRY_ESTATE otherwise) from
 * a saved position. Buffering decorators read their samples again (fetch): that
 * is a restore's cost. FERRY_ECORRUPT for a damaged state, FERRY_EINVAL naming the
 * setting for one saved by a stream with other settings; the iterator is then
 * unusable (close it). ctx may be NULL where the streams accept NULL in next(). */
FERRY_API int ferry_stream_restore(ferry_stream_iter *it, const void *buf, size_t len,
                                   ferry_ctx *ctx);
/* Reads again the sample next() returned with *pos (see the vtable's fetch); sets
 * ctx's epoch to pos->epoch for the call. FERRY_ENOTSUP when not resumable. */
FERRY_API int ferry_stream_fetch(ferry_stream_iter *it, const ferry_pos *pos, ferry_sample *out,
                                 ferry_ctx *ctx);

/* For a stream's own save and restore: put appends n bytes (never fails: a state
 * too large for its buffer is reported by ferry_stream_save); get reads the next
 * n bytes, FERRY_ECORRUPT ("stream state: cut short") when fewer are left. The
 * _u64 forms store little-endian. A stream over another saves and restores the
 * inner's position with ferry_stream_save_to / ferry_stream_restore_from (at any
 * point of its own, the same in both). */
FERRY_API void ferry_state_put(ferry_state *w, const void *p, size_t n);
FERRY_API void ferry_state_put_u64(ferry_state *w, uint64_t v);
FERRY_API int ferry_state_get(ferry_state *r, void *p, size_t n);
FERRY_API int ferry_state_get_u64(ferry_state *r, uint64_t *v);
FERRY_API int ferry_stream_save_to(ferry_stream_iter *it, ferry_state *w);
FERRY_API int ferry_stream_restore_from(ferry_stream_iter *it, ferry_state *r, ferry_ctx *ctx);

/* ---- Built-in: synthetic samples, for tests and benchmarks ----
 * Sample i has a field "data" (uint8[bytes]) filled from Philox keyed by
 * (seed, i), and "label" (int64, i % classes). With var_max > 0 a third field
 * "text" (uint8, variable up to var_max) has i-dependent length and bytes. cost
 * burns CPU: that many extra Philox blocks per sample, folded into the data, so
 * a sample's cost scales with it (about 5-10 ns a round). With fail_every > 0,
 * samples whose index % fail_every == fail_every - 1 fail with FERRY_ECORRUPT. */
typedef struct ferry_synthetic_opts {
    uint64_t count;
    uint64_t bytes;
    uint64_t cost;
    uint64_t seed;
    uint64_t classes; /* 0 means 1000 */
    uint64_t var_max; /* 0: no "text" field */
    uint64_t fail_every;
    uint64_t sleep_us; /* sleeps this long per sample (for timeout tests) */
    uint64_t pool;     /* > 0: precompute this many samples' data in memory and copy
                        * sample i's from i % pool (an in-memory dataset: no
                        * generation cost per sample) */
} ferry_synthetic_opts;

FERRY_API int ferry_dataset_synthetic(ferry_dataset **out, const ferry_synthetic_opts *o);

/* ---- Sources described as text ----
 * "kind:location[,key=value...]", the form the CLI and the Python module take.
 * Built in: "synthetic:COUNT[,bytes=N][,cost=N][,seed=N][,classes=N][,var=N]
 * [,fail_every=N][,sleep_us=N][,pool=N]" and "lines:FILE[,max=N][,index=PATH][,build=1]
 * [,error_long=1][,readahead=auto|on|off][,io=mmap|pread]" (ferry/lines.h), and the stream
 * "csv:DIR[,prefix=part-][,digits=5][,suffix=][,delim=,][,header=N][,dtype=f32]
 * [,fields=x:0-3;y:4:i64][,cols=N]" (ferry/csv.h), and "files:DIR[,ext=jpg;png][,max=BYTES]
 * [,folder=imagefolder|flat]": every file under DIR's class directories, in the order
 * and with the labels torchvision's ImageFolder gives them (ferry/folder.h: files
 * directly in DIR are left out and counted, an empty class is an error), is a
 * sample with "data" (its bytes, variable up to the largest file or max), "path"
 * (relative, up to 1023 bytes) and "label" (int64, the class); folder=flat reads
 * every file under DIR by path, label -1, and
 * "lmdb:PATH[,db=NAME][,datum=auto|1|0][,max=N][,lock=0|1]" (ferry/lmdb.h: Caffe
 * Datum values decode to "data", "label" and "float_data"), and
 * "tfrecord:PATH|DIR|GLOB[,raw=1][,features=...][,stream=1]" (ferry/tfrecord.h: TFRecord
 * files, tf.train.Example fields) and "wds:PATH|DIR|GLOB[,fields=jpg;cls][,stream=1]"
 * (ferry/wds.h: WebDataset tar shards), map-style over uncompressed files and streams
 * over gzipped ones. Also "npy:PATH" / "npy:x=a.npy;y=b.npz/m[,inflate_max=N]"
 * (ferry/npy.h), "tokens:GLOB[,seq=T][,stride=S][,offset=0|random][,dtype=u16|u32][,raw=1]
 * [,out=i32|i64][,order=llmc,batch=B[,rank=R,world=W]]" (ferry/tokens.h) and
 * "mds:DIR[,zstd_max=N][,cache=DIR]" (ferry/mds.h). Unknown kinds and keys are FERRY_EINVAL naming
 * them. */
FERRY_API int ferry_dataset_open(ferry_dataset **out, const char *spec);

/* Opens any described source: a map-style kind sets *ds, a stream kind (csv) sets
 * *st; the other is set to NULL. Free with ferry_dataset_free / ferry_stream_free. */
FERRY_API int ferry_source_open(const char *spec, ferry_dataset **ds, ferry_stream **st);

/* How ferry_source_open_flags opens a source. */
enum {
    /* an image kind (images:) keeps each image's encoded file as its bytes, checked
     * to be an image, unless the text names a pipeline=: what ferry pack and
     * Python's ferry.pack store, so the shards stay small and the train pipeline
     * reads them */
    FERRY_SOURCE_ENCODED = 1u << 0
};
/* ferry_source_open, with flags (FERRY_SOURCE_*, or 0). */
FERRY_API int ferry_source_open_flags(const char *spec, unsigned flags, ferry_dataset **ds,
                                      ferry_stream **st);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_DATASET_H */
