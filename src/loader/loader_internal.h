/*
 * Private to src/loader: the loader's structures and the ferry__loader_ functions
 * its files share. By concern:
 *   engine.c    batch buffers and their blocks, epochs, scheduling, the workers
 *   options.c   the options' checks, the default prefetch, the memory budget, the
 *               device
 *   loader.c    create and free; start, cancel
 *   delivery.c  the consumer: waiting for a batch, handing it out, the stats
 *   batch.c     a batch's accessors, references and exported tensors
 *   state.c     the loader state: saving an epoch's place and resuming from it
 *   trace.c     the trace's event buffers and file (trace.h)
 *
 * One mutex guards the scheduling state; the per-sample work runs outside it.
 * A worker takes the lock once per grain (a run of slots of one batch): it claims
 * slots of the oldest batch that still has unclaimed ones, or opens the next
 * batch in a free buffer, and writes the samples with the lock released. Whoever
 * finishes the last slot of a batch marks it ready. The consumer takes batches in
 * sampler order (a ring indexed by batch number: at most `prefetch` are scheduled
 * and undelivered, and they are consecutive) or in completion order (a FIFO).
 *
 * A generation number tells stale work from current: stopping an epoch
 * (cancel, restart, an error, free) bumps it, recycles what is queued, and lets
 * workers drop the rest of a stale grain at the next sample.
 *
 * Teardown: the loader's memory lives while the handle or any batch holds a
 * reference, so batches handed to Python can outlive ferry_loader_free.
 *
 * Memory: a batch's bytes live in a block. The batch holds one reference to its
 * block and each exported tensor another, so a tensor keeps the bytes, not the
 * batch. A batch given back while tensors still view its block leaves the block
 * to them and takes another when it is next scheduled: a spare (a block whose
 * last tensor went; at most `prefetch` are kept) or a new one. Tensors kept for long (a list of
 * labels, say) thus never starve the pool, and in a steady loop the same few blocks take turns
 * without allocating.
 */
#ifndef FERRY_LOADER_INTERNAL_H
#define FERRY_LOADER_INTERNAL_H

#include "ferry/loader.h"
#include "../datasets/dataset_internal.h"
#include "ferry/device.h"   /* pin_memory: page-locked blocks */
#include "ferry/remote.h"   /* remote locations' counters */
#include "../device/ring.h" /* device: the ring of device buffers */
#include "trace.h"          /* opts.trace, FERRY_TRACE */

enum { SLOT_PENDING = 0, SLOT_OK = 1, SLOT_FAILED = 2 };

/* The memory of one batch: see "Memory" above. */
/* The streams a pinned block can record (ferry_batch_record_stream) */
#define FERRY_BATCH_STREAMS 8

typedef struct block {
    atomic_uint refs; /* the batch it is attached to, and each exported tensor */
    ferry_loader *l;
    void *mem_base; /* the allocation; mem is it aligned to 64 bytes */
    uint8_t *mem;
    /* variable fields: dirty[v * batch_size + i] bytes at the start of slot i of the
     * v-th variable field may be nonzero; past them it is all zeros */
    size_t *dirty;
    struct block *next_spare;
    /* pin_memory: the streams the caller recorded as using it (an asynchronous
     * copy from it), and, once its last reference went, the fence of the work
     * they had queued by then: it is refilled only after that */
    void *streams[FERRY_BATCH_STREAMS];
    uint32_t nstreams;
    ferry__fence fence;
} block;

typedef struct shard {
    ferry_stream_iter *it;
    bool busy, ended;
    /* for the loader state: next() calls made by the batches handed out (in
     * order), and whether one of them ended the shard */
    uint64_t calls_done;
    bool ended_done;
} shard;

/* A stream batch that a saved state holds as its samples' places (it was read,
 * but not handed out, when the state was saved): a resume makes it again by
 * fetching them, before the shards go on. */
typedef struct pending {
    uint32_t shard, n, skipped;
    bool shard_ended, last_failed; /* last_failed: slot n-1 failed (fail policy) */
    uint64_t calls;
    int fail_rc;
    uint32_t fail_slot;
    char fail_msg[FERRY_ERRMSG_MAX];
    ferry_pos *pos; /* [n] */
} pending;

struct ferry_batch {
    ferry_loader *l;
    uint32_t id;
    uint64_t epoch, number, gen, first_pos;
    uint32_t size;    /* slots planned */
    uint32_t claimed; /* under l->m */
    atomic_uint done;
    uint32_t out_size; /* samples delivered, after skips are compacted away */
    uint32_t skipped;
    bool ready, held;
    atomic_uint users;     /* while held: the caller's references */
    int shard;             /* stream batches: which shard fills it */
    bool shard_ended;      /* set by the worker filling it; applied under m in publish */
    uint64_t calls;        /* stream batches: next() calls made filling it */
    ferry_pos *pos;        /* resumable streams: [batch_size], where each sample came from */
    const pending *replay; /* a batch a resume makes again from a state, or NULL */
    /* the first failure, by slot, under l->m */
    uint32_t fail_slot;
    int fail_rc;
    char fail_msg[FERRY_ERRMSG_MAX];
    /* device: the device buffer its block was copied into (NULL until it was) */
    ferry__dbuf *dbuf;
    /* memory: the block's bytes; NULL blk until the batch is next scheduled */
    block *blk;
    size_t *dirty; /* the block's */
    uint64_t *indices;
    _Atomic uint8_t *state;
    uint8_t *field[FERRY_MAX_FIELDS];
    int64_t *lengths[FERRY_MAX_FIELDS];
    ferry_batch *next_free;
};

typedef struct worker {
    ferry_loader *l;
    uint32_t id;
    ferry_ctx ctx;
    uint64_t *hint;  /* batch_size indices, for datasets that take read-ahead hints */
    uint32_t *visit; /* batch_size slots: a grain's order of reading (in_order datasets) */
    uint64_t busy_ns, idle_ns, stage_ns[FERRY_STAGE_COUNT]; /* under l->m */
    ferry__tbuf *tb;    /* its events, or NULL without a trace */
    bool trace_samples; /* this grain's samples each have slices (else the grain has) */
    uint64_t trace_ns;  /* its samples' cost, a moving average; 0 = unknown */
} worker;

struct ferry_loader {
    ferry_loader_opts o;
    ferry_dataset *ds;
    ferry_stream *st;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    size_t field_stride[FERRY_MAX_FIELDS]; /* bytes per sample */
    size_t row_bytes[FERRY_MAX_FIELDS];    /* variable fields: bytes per row */
    bool any_variable;
    int var_of[FERRY_MAX_FIELDS]; /* variable fields: their number among the variable ones */
    int nvar;
    /* the order: the caller's sampler or own_sampler (split in place for this
     * rank with ferry_loader_opts.world_size) */
    ferry_sampler *sampler, *own_sampler;

    pthread_mutex_t m;
    pthread_cond_t work_cv;  /* workers: work or shutdown */
    pthread_cond_t ready_cv; /* consumer: a batch is ready; start(): workers idle */
    ferry__pool *pool;
    worker *workers;
    uint32_t nworkers, idle_workers, busy_workers, inited;
    int init_rc;
    char init_msg[FERRY_ERRMSG_MAX];
    bool shutdown;
    atomic_bool cancelled;
    atomic_ullong gen;       /* written under m */
    atomic_ullong published; /* batches made ready; the consumer polls it */
    atomic_ullong released;  /* buffers returned to the pool; idle workers poll it */
    uint64_t ns_per_sample;  /* moving average of a sample's cost, under m; 0 = unknown */
    int refs;                /* under m: the handle + held batches */

    ferry_batch *bufs;
    uint32_t nbufs;
    /* a block's layout, and the spare blocks (under m) */
    size_t blk_bytes, idx_off, state_off, field_off[FERRY_MAX_FIELDS], len_off[FERRY_MAX_FIELDS];
    block *spare;
    uint32_t nspare, max_spare; /* spares kept: the pool's size, within the budget */
    int blk_rc;                 /* a failure to allocate a block, for ferry_loader_next */
    ferry_batch *free_list;
    uint32_t nfree, wake_free; /* wake idle workers once this many buffers are free */
    ferry_batch **by_number;   /* sampler order: ring by batch number */
    ferry_batch **open;        /* FIFO of batches with unclaimed slots */
    uint32_t open_head, open_count;
    ferry_batch **ready_q; /* completion order: FIFO of ready batches */
    uint32_t ready_head, ready_count;

    /* the epoch */
    bool started, over;
    uint64_t epoch, nbatches, next_sched, next_deliver, undelivered;
    uint64_t first_batch, delivered; /* where this epoch started; batches handed out */
    uint64_t epoch_skipped;
    shard *shards;
    uint32_t nshards, cursor, live;
    /* the loader state: the rotation and the next batch as of the batches taken by
     * deliver(), in order; `resuming` while start_locked replays a saved state */
    uint32_t done_cursor, done_live;
    uint64_t done_next;
    const uint8_t *resuming; /* the state blob, while resuming from it */
    size_t resuming_len;
    /* a resumed stream's batches to make again first, from a saved state */
    pending *replay;
    uint32_t nreplay, replay_head;
    uint32_t pausing; /* ferry_loader_state_save waits for the shards: no new batches */
    ferry_worker_init_fn init_fn;

    /* stats, under m */
    uint64_t t_start, t_first, consumer_wait_ns, samples, batches, bytes, skipped;
    uint64_t truncated, data_bytes;
    /* the first bad samples skipped, under m */
    uint32_t nkept;
    struct {
        uint64_t epoch, index;
        char msg[FERRY_ERRMSG_MAX];
    } kept[FERRY_SKIPPED_KEPT];
    char kept_out[FERRY_ERRMSG_MAX];
    bool consumer_waiting;

    worker inline_worker; /* the caller's thread, when num_workers is 0 */
    char errmsg[FERRY_ERRMSG_MAX];
    /* pin_memory: blocks are page-locked through dev; a block it failed to lock
     * (under m) */
    ferry_device *dev;
    /* device: the ring that batches are copied into, and the device's ordinal
     * (-1: batches stay in host memory) */
    ferry__dring *ring;
    int device;
    char device_name[16];
    uint64_t pinned_bytes;
    int pin_rc;
    char pin_msg[FERRY_ERRMSG_MAX];
    /* the trace, or NULL; the batches ready for the consumer (under m) */
    ferry__trace *trace;
    uint32_t nready;
};

static inline int ferry__loader_set_errmsg(ferry_loader *l, int rc)
{
    if (rc < 0)
        ferry__err_copy(l->errmsg);
    return rc;
}

/* Shared by the files; each function's comment is at its definition. */
/* engine.c */
int ferry__loader_alloc_buffers(ferry_loader *l, uint32_t nbufs);
void ferry__loader_destroy(ferry_loader *l);
void ferry__block_retire(ferry_loader *l, block *k);
void ferry__loader_recycle(ferry_loader *l, ferry_batch *b);
bool ferry__loader_cheap_batches(const ferry_loader *l);
void ferry__loader_poll_unlocked(ferry_loader *l, atomic_ullong *counter, uint64_t seen);
void ferry__loader_close_shards(ferry_loader *l);
void ferry__loader_free_replay(ferry_loader *l);
void ferry__loader_stop_epoch(ferry_loader *l);
uint64_t ferry__loader_epoch_batches(const ferry_loader *l);
int ferry__loader_start_locked(ferry_loader *l, uint64_t epoch, uint64_t first_batch);
bool ferry__loader_sched_done(const ferry_loader *l);
ferry_batch *ferry__loader_claim(ferry_loader *l, uint32_t *first, uint32_t *count);
uint64_t ferry__loader_run_grain(ferry_loader *l, worker *w, ferry_batch *b, uint32_t first,
                                 uint32_t count);
void ferry__loader_trace_queue(ferry_loader *l, ferry__tbuf *tb);
void ferry__loader_worker_job(void *arg);
/* options.c */
int ferry__loader_check_opts(ferry_loader_opts *o);
int ferry__loader_check_budget(ferry_loader *l);
int ferry__loader_open_device(ferry_loader *l);
int ferry__loader_open_ring(ferry_loader *l);
/* state.c */
void ferry__loader_note_done(ferry_loader *l, ferry_batch *b);
int ferry__loader_restore_shards(ferry_loader *l, uint64_t epoch);

#endif
