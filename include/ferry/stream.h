/*
 * ferry/stream.h - stream decorators: shuffle buffer, group-batch, shard, repeat,
 * take and skip.
 *
 * A decorator is a ferry_stream built over another ("inner") stream. It has the
 * inner's schema, and decorators stack in any order:
 *
 *     ferry_stream *st;
 *     int rc = ferry_stream_from_dataset(&st, ds);          (ds is borrowed)
 *     if (!rc) rc = ferry_stream_shuffle(&st, st, 4096, seed);
 *     if (!rc) rc = ferry_stream_repeat(&st, st, 0);        (endless, for training)
 *     if (rc) return rc;                                    (nothing to clean up)
 *     ... ferry_loader_create_stream(&l, st, &opts) ...
 *     ferry_loader_free(l);
 *     ferry_stream_free(st);                                (frees the whole chain)
 *
 * Ownership: every constructor here TAKES OWNERSHIP of `inner`. The inner stream
 * is freed when the decorator is freed (ferry_stream_free), and also when the
 * constructor fails, so a chain needs no cleanup code: on failure *out is NULL and
 * the thread's message (ferry_last_errmsg) says why. After the call, whether it
 * succeeded or not, the caller must not use or free `inner` and must not hand it
 * to a second decorator. A NULL `inner` is FERRY_EINVAL (so a failed step does not
 * go unnoticed, but it overwrites the message: chain with `if (!rc)` as above).
 * What the chain borrows (the map-style dataset under ferry_stream_from_dataset,
 * a key_arg) must outlive it.
 *
 * Shards and iterators: a stream is read by opening shard s of m for an epoch
 * (ferry_stream_open; the loader opens world_size * stream_shards of them). Every
 * decorator keeps its state per opened iterator, so "per shard" below means per
 * ferry_stream_open. The loader reads each shard in order, one worker at a time,
 * so what a decorator yields is a function of (its settings, epoch, shard) and the
 * inner's samples, never of the number of workers.
 *
 * Errors and breaks: an error from the inner's next passes through unchanged (its
 * code and message); the decorator stays usable, so a loader with a skip policy
 * goes on reading after it. FERRY_BREAK from the inner passes through too.
 *
 * A one-pass, finite evaluation stream needs no decorator: a stream without
 * ferry_stream_repeat ends each shard once, and the loader ends the epoch cleanly
 * (ferry_loader_next returns FERRY_END) when every shard has ended. A training
 * stream counted in steps is ferry_stream_repeat(&st, st, 0), read for as many
 * batches as wanted (or bounded with ferry_stream_take).
 *
 * Thread rules: a decorator's settings are read-only after construction, so
 * different shards of one stream may be read on different threads at once; one
 * iterator is used by one thread at a time. Callbacks (key_fn) are therefore
 * called concurrently for different shards and must be thread-safe.
 *
 * Memory: buffers are allocated once per opened iterator (in open) and freed by
 * close; reading a sample never allocates.
 *
 * Saving a position (ferry_stream_save, and the loader's state): each decorator
 * is resumable when its inner is. Its part of the state is 24 bytes of its kind
 * and settings (a state saved by a chain with other settings is refused, naming
 * the setting) and: shuffle 60 bytes (the generator, whether the inner ended, the
 * count) plus 32 per buffered sample (its ferry_pos, not its bytes); group-batch
 * 32 bytes plus 32 per buffered sample (those left to emit too) and 24 per group;
 * repeat 16; take and skip 8; shard nothing. A restore reads each buffered sample again from its
 * pos (ferry_stream_fetch, in the order of their places, so a compressed file is decoded once), and
 * checks a group-batch sample's key against the saved one.
 */
#ifndef FERRY_STREAM_H
#define FERRY_STREAM_H

#include "core.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits on the settings: FERRY_EINVAL outside them, naming the setting; a buffer
 * over FERRY_STREAM_MAX_BUFFER_BYTES is FERRY_EOVERFLOW, naming the setting too. */
#define FERRY_STREAM_MAX_BUFFER ((size_t)1 << 24)         /* shuffle buffer_size, max_buffered */
#define FERRY_STREAM_MAX_BATCH ((size_t)1 << 20)          /* group batch_size */
#define FERRY_STREAM_MAX_BUFFER_BYTES ((uint64_t)1 << 40) /* one iterator's buffer */

/* ---- Shuffle buffer ----
 * Each opened shard keeps a buffer of buffer_size samples (1 .. 2^24): it is
 * filled from the inner iterator, then every next() hands out a uniformly chosen
 * buffered sample and refills its slot from the inner; when the inner ends, the
 * rest is drained in random order. The order is a function of (seed, epoch,
 * shard): the random draws come from ferry_rng keyed by them, so the same loader
 * settings give the same batches for any number of workers, and a new epoch (or a
 * new pass of ferry_stream_repeat) gives a new order. buffer_size 1 keeps the
 * inner's order. The seed is the decorator's own: the loader's seed does not
 * change it. A sample can move at most buffer_size - 1 places earlier; use a
 * buffer much larger than any run of similar samples in the inner's order.
 *
 * Memory: per opened shard, buffer_size times one sample's bytes (every field at
 * its full size, variable fields at their bound) plus 8 bytes per field, 36 bytes
 * per sample (its place, for a saved position) and a
 * little alignment. A buffer over FERRY_STREAM_MAX_BUFFER_BYTES, or one whose size
 * does not fit in size_t, is FERRY_EOVERFLOW naming buffer_size. The first
 * next() reads buffer_size samples before it returns. */
FERRY_API int ferry_stream_shuffle(ferry_stream **out, ferry_stream *inner, size_t buffer_size,
                                   uint64_t seed);

/* ---- Group-batch ----
 * The group key of a sample, for ferry_stream_group_batch. `s` holds the sample
 * (s->data[f], and s->length[f] for variable fields) and `fields` the schema
 * (s->nfields of them). Both are valid only during the call. Called from worker
 * threads, concurrently for different shards; must not fail. */
typedef int64_t (*ferry_group_key_fn)(const ferry_sample *s, const ferry_field *fields, void *arg);

/* Samples with the same key go into the same batch. Each opened shard buffers
 * samples per group; when a group reaches batch_size samples (1 .. 2^20), its
 * samples are emitted consecutively, in arrival order, preceded by a FERRY_BREAK.
 * When the inner ends, the partial groups left are emitted in the order of their
 * first arrival, each preceded by a FERRY_BREAK, and then FERRY_END. To bound
 * memory, when more than max_buffered samples (batch_size .. 2^24) are buffered
 * across groups, the fullest group (the one that reached that size first, among
 * equals) is emitted early, as a partial group preceded by a FERRY_BREAK.
 *
 * With the loader: FERRY_BREAK ends the loader's current batch (a break at the
 * start of a batch is ignored), so each batch holds samples of one group only.
 * Set the loader's batch_size EQUAL to this batch_size: full groups then fill
 * whole batches. (A smaller loader batch_size splits a group over several
 * batches; a larger one still gives one group per batch, but batches of at most
 * this batch_size in larger buffers.) Partial groups give short batches, which
 * the loader's drop_last drops. Read directly with
 * ferry_stream_next, the FERRY_BREAKs appear between groups (nothing written): treat one as "a
 * group starts here" and call next again.
 *
 * key_arg is borrowed and passed to key_fn; it must outlive the stream. Memory per
 * opened shard: max_buffered + 1 samples' bytes (as for the shuffle buffer; over
 * the limit is FERRY_EOVERFLOW naming max_buffered) plus about 56 bytes per
 * buffered sample and 8 bytes per batch_size. */
FERRY_API int ferry_stream_group_batch(ferry_stream **out, ferry_stream *inner,
                                       ferry_group_key_fn key_fn, void *key_arg, size_t batch_size,
                                       size_t max_buffered);

/* Group-batch keyed by length: the key of a sample is
 * length[field_index] / bucket_width, so samples of similar lengths share batches
 * (less padding). field_index must name a variable field of the schema, and
 * bucket_width be >= 1 (FERRY_EINVAL otherwise, naming the setting). The other
 * settings and the loader's batch_size rule are those of ferry_stream_group_batch. */
FERRY_API int ferry_stream_group_by_length(ferry_stream **out, ferry_stream *inner, int field_index,
                                           uint64_t bucket_width, size_t batch_size,
                                           size_t max_buffered);

/* ---- Shard ----
 * Part k of n (k < n, n >= 1; FERRY_EINVAL otherwise) of the inner stream: opening
 * shard s of m of the decorator opens shard k*m + s of n*m of the inner (a
 * FERRY_EOVERFLOW from open if n*m does not fit in 64 bits). The n parts are
 * disjoint and cover the inner once. With the loader at world_size 1, a stream
 * sharded by (rank, world size) and then read with stream_shards workers' shards
 * gives each sample to exactly one shard of one rank; shards compose (a part of a
 * part is a part). Adds no buffering and no copy. */
FERRY_API int ferry_stream_shard(ferry_stream **out, ferry_stream *inner, uint64_t k, uint64_t n);

/* ---- Repeat ----
 * `times` passes over the inner stream per opened shard; 0 = endless (a training
 * stream counted in steps: bound it with the number of batches read, or with
 * ferry_stream_take). Pass p of epoch e opens the inner with epoch
 * ferry_hash64(e, p), and the inner's next sees that epoch in ferry_ctx_epoch, so
 * shuffle decorators and per-sample randomness below give a new order and new
 * draws each pass. A pass that yields no sample (only errors, breaks or nothing)
 * ends the shard, so an empty stream ends instead of spinning. An error opening a
 * later pass is returned by next(), which retries the open on the next call. */
FERRY_API int ferry_stream_repeat(ferry_stream **out, ferry_stream *inner, uint64_t times);

/* ---- Take and skip ----
 * Per opened shard: take yields at most the first n samples of the inner (so with
 * S shards a take yields up to S*n samples in all), then FERRY_END without reading
 * further; skip drops the first n samples and yields the rest. Errors and breaks
 * pass through and are not counted as samples. n = 0 is allowed (take: nothing;
 * skip: everything). */
FERRY_API int ferry_stream_take(ferry_stream **out, ferry_stream *inner, uint64_t n);
FERRY_API int ferry_stream_skip(ferry_stream **out, ferry_stream *inner, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_STREAM_H */
