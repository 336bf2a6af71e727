/*
 * The loader engine.
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
#include "ferry/loader.h"
#include "../datasets/dataset_internal.h"
#include "ferry/records.h" /* ferry_crc32c, for the state blob */
#include "../core/guard.h"
#include "ferry/device.h" /* pin_memory: page-locked blocks */

#include <sched.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#define MAX_BATCH ((uint32_t)1 << 24)
#define MAX_WORKERS 1024u
#define MAX_PREFETCH 65536u
#define MAX_SHARDS 65536u
#define TIMEOUT_LIST 8 /* outstanding samples named in a timeout message */
/* A grain (slots one worker claims at once) aims at this much work: enough to
 * outweigh a lock round trip and a wake-up, small enough that the workers share
 * a batch of costly samples and the first batch comes soon. */
#define GRAIN_NS 50000u
/* When batches take less than POLL_BATCH_NS of work, a thread with nothing to do
 * polls for up to POLL_NS before it sleeps: a sleep and wake-up through a
 * condition variable costs tens of microseconds (about 45 us one way on a
 * virtual machine whose idle cores halt), longer than the wait it replaces.
 * Polling yields the core, so a worker that has work gets it. */
#define POLL_BATCH_NS 200000u
#define DEFAULT_BUDGET_DIVISOR 4 /* memory_budget 0: a quarter of physical memory */
#define POLL_NS 100000u
/* How long ferry_loader_free waits for a worker stuck in a dataset callback (or
 * timeout_ms, when that is longer). */
#define FREE_GRACE_MS 5000

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

enum { SLOT_PENDING = 0, SLOT_OK = 1, SLOT_FAILED = 2 };

/* The memory of one batch: see "Memory" above. */
typedef struct block {
    atomic_uint refs; /* the batch it is attached to, and each exported tensor */
    ferry_loader *l;
    void *mem_base; /* the allocation; mem is it aligned to 64 bytes */
    uint8_t *mem;
    /* variable fields: dirty[v * batch_size + i] bytes at the start of slot i of the
     * v-th variable field may be nonzero; past them it is all zeros */
    size_t *dirty;
    struct block *next_spare;
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
    uint64_t *hint; /* batch_size indices, for datasets that take read-ahead hints */
    uint64_t busy_ns, idle_ns, stage_ns[FERRY_STAGE_COUNT]; /* under l->m */
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
    uint64_t pinned_bytes;
    int pin_rc;
    char pin_msg[FERRY_ERRMSG_MAX];
};

static int set_errmsg(ferry_loader *l, int rc)
{
    if (rc < 0)
        ferry__err_copy(l->errmsg);
    return rc;
}

/* ---- Buffers ---- */

static void block_free(block *k)
{
    if (k) {
        if (k->l->dev && k->mem_base) {
            ferry_device_host_free(k->l->dev, k->mem_base, k->l->blk_bytes + 64);
            k->l->pinned_bytes -= k->l->blk_bytes + 64;
        } else
            ferry__free(k->mem_base);
        ferry__free(k->dirty);
        ferry__free(k);
    }
}

/* A new block, or NULL. Zeroed memory, which for a large buffer is fresh pages the
 * kernel maps on first touch: a deep pool costs no page faults before the first
 * batch, and a variable field's padding needs zeroing only where an earlier sample
 * in the slot wrote (dirty). */
static block *block_new(ferry_loader *l)
{
    block *k = ferry__calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->l = l;
    atomic_init(&k->refs, 1);
    if (!l->dev) {
        k->mem_base = ferry__calloc(1, l->blk_bytes + 64);
    } else {
        int rc = ferry_device_host_alloc(l->dev, l->blk_bytes + 64, &k->mem_base);
        if (rc < 0) { /* the driver's refusal, for the caller's message */
            l->pin_rc = rc;
            ferry__err_copy(l->pin_msg);
            block_free(k);
            return NULL;
        }
        l->pinned_bytes += l->blk_bytes + 64;
    }
    if (l->nvar && k->mem_base)
        k->dirty = ferry__calloc((size_t)l->nvar * l->o.batch_size, sizeof *k->dirty);
    if (!k->mem_base || (l->nvar && !k->dirty)) {
        block_free(k);
        return NULL;
    }
    k->mem = (uint8_t *)ferry__align64((size_t)(uintptr_t)k->mem_base);
    return k;
}

/* Gives b the block k (whose one reference is now b's). */
static void attach(ferry_loader *l, ferry_batch *b, block *k)
{
    b->blk = k;
    b->dirty = k->dirty;
    b->indices = (uint64_t *)(k->mem + l->idx_off);
    b->state = (_Atomic uint8_t *)(k->mem + l->state_off);
    for (int f = 0; f < l->nfields; f++) {
        b->field[f] = k->mem + l->field_off[f];
        b->lengths[f] = l->fields[f].variable ? (int64_t *)(k->mem + l->len_off[f]) : NULL;
    }
}

static int alloc_buffers(ferry_loader *l, uint32_t nbufs)
{
    uint32_t B = l->o.batch_size;
    size_t off = 0, n;
    size_t *field_off = l->field_off, *len_off = l->len_off;
    l->idx_off = off;
    off = ferry__align64((size_t)B * sizeof(uint64_t));
    l->state_off = off;
    off += ferry__align64(B);
    for (int f = 0; f < l->nfields; f++) {
        field_off[f] = off;
        if (!ferry__mul_size(l->field_stride[f], B, &n) || !ferry__add_size(off, n, &off))
            return ferry__err(FERRY_EOVERFLOW, "loader: a batch of field \"%s\" overflows memory",
                              l->fields[f].name);
        off = ferry__align64(off);
        len_off[f] = off;
        if (l->fields[f].variable)
            off += ferry__align64((size_t)B * sizeof(int64_t));
    }
    /* l->nbufs stays 0 until the arrays exist, so a failed create frees cleanly */
    l->bufs = ferry__calloc(nbufs, sizeof *l->bufs);
    l->by_number = ferry__calloc(nbufs, sizeof *l->by_number);
    l->open = ferry__calloc(nbufs, sizeof *l->open);
    l->ready_q = ferry__calloc(nbufs, sizeof *l->ready_q);
    if (!l->bufs || !l->by_number || !l->open || !l->ready_q)
        return ferry__err(FERRY_ENOMEM, "loader: out of memory");
    l->nbufs = nbufs;
    l->blk_bytes = off;
    for (uint32_t i = 0; i < l->nbufs; i++) {
        ferry_batch *b = &l->bufs[i];
        b->l = l;
        b->id = i;
        if (l->st && l->st->resumable && !(b->pos = ferry__malloc((size_t)B * sizeof *b->pos)))
            return ferry__err(FERRY_ENOMEM, "loader: out of memory");
        block *k = block_new(l);
        if (!k && l->pin_rc)
            return ferry__err(l->pin_rc, "pin_memory: batch buffer %u: %s", i, l->pin_msg);
        if (!k)
            return ferry__err(FERRY_ENOMEM,
                              "loader: cannot allocate batch buffer %u of %zu bytes (prefetch %u)",
                              i, off, l->nbufs);
        attach(l, b, k);
        b->next_free = l->free_list;
        l->free_list = b;
    }
    l->nfree = l->nbufs;
    l->wake_free = l->nbufs / 2 ? l->nbufs / 2 : 1;
    return 0;
}

static void free_replay(ferry_loader *l)
{
    for (uint32_t i = 0; i < l->nreplay; i++)
        ferry__free(l->replay[i].pos);
    ferry__free(l->replay);
    l->replay = NULL;
    l->nreplay = l->replay_head = 0;
}

/* Frees everything; called when the last reference goes. */
static void destroy(ferry_loader *l)
{
    if (l->bufs)
        for (uint32_t i = 0; i < l->nbufs; i++)
            block_free(l->bufs[i].blk);
    while (l->spare) {
        block *k = l->spare;
        l->spare = k->next_spare;
        block_free(k);
    }
    ferry_device_free(l->dev);
    for (uint32_t i = 0; l->bufs && i < l->nbufs; i++)
        ferry__free(l->bufs[i].pos);
    free_replay(l);
    ferry__free(l->bufs);
    ferry__free(l->by_number);
    ferry__free(l->open);
    ferry__free(l->ready_q);
    if (l->workers)
        for (uint32_t i = 0; i < l->o.num_workers; i++) {
            ferry__ctx_release(&l->workers[i].ctx);
            ferry__free(l->workers[i].hint);
        }
    ferry__free(l->inline_worker.hint);
    ferry__free(l->workers);
    ferry__ctx_release(&l->inline_worker.ctx);
    ferry__free(l->shards);
    ferry_sampler_free(l->own_sampler);
    pthread_mutex_destroy(&l->m);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    ferry__free(l);
}

/* Keeps a block no one uses as a spare, or frees it. Under m. */
static void block_retire(ferry_loader *l, block *k)
{
    /* as many spares as the pool has buffers (as the budget allows): a steady
     * loop then never frees and allocates again, and memory stays within twice
     * the pool plus what the caller's tensors hold */
    if (l->nspare < l->max_spare) {
        atomic_store(&k->refs, 1);
        k->next_spare = l->spare;
        l->spare = k;
        l->nspare++;
    } else {
        block_free(k);
    }
}

/* Puts a buffer back in the pool. Under m. */
static void recycle(ferry_loader *l, ferry_batch *b)
{
    block *k = b->blk;
    if (k && atomic_load(&k->refs) > 1) {
        /* tensors still view it: they keep the block (and, through it, the
         * loader's memory); the batch takes another when next scheduled */
        b->blk = NULL;
        if (atomic_fetch_sub(&k->refs, 1) == 1)
            block_retire(l, k); /* the last tensor went meanwhile */
        else
            l->refs++;
    }
    b->ready = false;
    b->held = false;
    b->next_free = l->free_list;
    l->free_list = b;
    l->nfree++;
    atomic_fetch_add_explicit(&l->released, 1, memory_order_relaxed);
    /* Waking a worker per buffer costs a wake-up per batch; wait until half the
     * pool is free, so a worker wakes once for several batches. (ferry_loader_next
     * wakes them anyway before the consumer waits, so nothing stalls.) */
    if (l->idle_workers && l->nfree >= l->wake_free)
        pthread_cond_broadcast(&l->work_cv);
}

/* True when batches are cheap enough that polling beats sleeping. Under m. */
static bool cheap_batches(const ferry_loader *l)
{
    return l->ns_per_sample && l->ns_per_sample * l->o.batch_size < POLL_BATCH_NS;
}

/* Polls *counter (with m released) until it moves from `seen`, the loader is
 * cancelled or stopped, or POLL_NS pass. Returns under m. */
static void poll_unlocked(ferry_loader *l, atomic_ullong *counter, uint64_t seen)
{
    uint64_t gen = atomic_load(&l->gen), t0 = ferry_now_ns();
    pthread_mutex_unlock(&l->m);
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if (atomic_load_explicit(counter, memory_order_relaxed) != seen ||
            atomic_load_explicit(&l->gen, memory_order_relaxed) != gen)
            break;
        if ((i & 31) == 0) {
            if (ferry_now_ns() - t0 > POLL_NS)
                break;
            sched_yield();
        }
    }
    pthread_mutex_lock(&l->m);
}

/* ---- Epochs ---- */

static void close_shards(ferry_loader *l)
{
    for (uint32_t i = 0; i < l->nshards; i++) {
        ferry_stream_close(l->shards[i].it);
        l->shards[i] = (shard){0};
    }
    l->live = 0;
}

/* Ends the current epoch: no more scheduling, queued batches recycled, work in
 * flight dropped at the next sample. Under m. */
static void stop_epoch(ferry_loader *l)
{
    atomic_store(&l->gen, atomic_load(&l->gen) + 1);
    l->over = true;
    for (uint32_t k = 0; k < l->open_count; k++) {
        ferry_batch *b = l->open[(l->open_head + k) % l->nbufs];
        uint32_t rest = b->size - b->claimed;
        b->claimed = b->size;
        if (atomic_fetch_add(&b->done, rest) + rest == b->size)
            recycle(l, b);
    }
    l->open_count = 0;
    for (uint32_t i = 0; i < l->nbufs; i++) {
        ferry_batch *b = &l->bufs[i];
        if (b->ready && !b->held)
            recycle(l, b);
    }
    l->ready_count = 0;
    l->undelivered = 0;
    pthread_cond_broadcast(&l->ready_cv);
}

/* Under m. Waits until no worker is inside a grain, so that the sampler and stream
 * shards can be changed safely. */
static void wait_workers_idle(ferry_loader *l)
{
    while (l->busy_workers)
        pthread_cond_wait(&l->ready_cv, &l->m);
}

static int restore_shards(ferry_loader *l, uint64_t epoch);
static void note_done(ferry_loader *l, ferry_batch *b);

static int start_locked(ferry_loader *l, uint64_t epoch, uint64_t first_batch)
{
    int rc = 0;
    stop_epoch(l);
    wait_workers_idle(l);
    close_shards(l);
    free_replay(l);
    atomic_store(&l->cancelled, false);
    l->epoch = epoch;
    l->epoch_skipped = 0;
    l->open_head = l->open_count = 0;
    l->ready_head = l->ready_count = 0;
    l->undelivered = 0;
    if (l->ds) {
        FERRY_TRY(ferry_sampler_set_epoch(l->sampler, epoch));
        l->nbatches =
            ferry_batch_count(ferry_sampler_len(l->sampler), l->o.batch_size, l->o.drop_last);
        if (first_batch > l->nbatches)
            FERRY_FAIL(FERRY_ERANGE, "loader: first_batch %llu is past the epoch's %llu batches",
                       (unsigned long long)first_batch, (unsigned long long)l->nbatches);
    } else {
        if (first_batch && !l->resuming)
            FERRY_FAIL(FERRY_ENOTSUP,
                       "loader: a stream cannot start at batch %llu; only at 0 (or from a "
                       "state: ferry_loader_state_resume)",
                       (unsigned long long)first_batch);
        uint64_t total = (uint64_t)l->o.world_size * l->nshards;
        for (uint32_t s = 0; s < l->nshards; s++) {
            uint64_t id = (uint64_t)l->o.rank * l->nshards + s;
            rc = ferry_stream_open(l->st, id, total, epoch, &l->shards[s].it);
            if (rc < 0) {
                close_shards(l);
                rc = ferry__err_prefix(rc, "loader: opening stream shard %llu of %llu",
                                       (unsigned long long)id, (unsigned long long)total);
                goto cleanup;
            }
            l->live++;
        }
        l->cursor = 0;
        l->nbatches = UINT64_MAX;
        if (l->resuming) {
            FERRY_TRY(restore_shards(l, epoch));
        } else {
            for (uint32_t s = 0; s < l->nshards; s++) {
                l->shards[s].calls_done = 0;
                l->shards[s].ended_done = false;
            }
            l->done_cursor = 0;
            l->done_live = l->nshards;
        }
    }
    l->done_next = first_batch;
    l->next_sched = l->next_deliver = l->first_batch = first_batch;
    l->delivered = 0;
    l->started = true;
    l->over = false;
    if (!l->t_start)
        l->t_start = ferry_now_ns();
    pthread_cond_broadcast(&l->work_cv);
    return 0;
cleanup:
    l->started = true;
    l->over = true;
    return rc;
}

/* True when nothing more will be scheduled this epoch. Under m. */
static bool sched_done(const ferry_loader *l)
{
    return l->ds ? l->next_sched >= l->nbatches : l->live == 0 && l->replay_head >= l->nreplay;
}

/* ---- Scheduling ---- */

/* Opens the next batch in a free buffer, if any; under m. For streams, only when
 * the shard whose turn it is is not being read. */
static ferry_batch *schedule(ferry_loader *l)
{
    if (l->over || sched_done(l) || !l->free_list)
        return NULL;
    int sh = -1;
    uint32_t size;
    uint64_t first = 0;
    const pending *replay = NULL;
    if (l->ds) {
        uint64_t count;
        ferry_batch_positions(ferry_sampler_len(l->sampler), l->o.batch_size, l->o.drop_last,
                              l->next_sched, &first, &count);
        size = (uint32_t)count;
    } else if (l->pausing) {
        return NULL; /* a state is being saved: the shards stay where they are */
    } else if (l->replay_head < l->nreplay) {
        /* a resumed state's batches first, each from its shard; the rotation was
         * saved as it stood after them */
        const pending *e = &l->replay[l->replay_head];
        if (l->shards[e->shard].busy)
            return NULL;
        sh = (int)e->shard;
        l->shards[sh].busy = true;
        l->replay_head++;
        replay = e;
        size = l->o.batch_size;
    } else {
        /* the live shards in rotation order: find the cursor-th live one */
        uint32_t k = 0;
        for (uint32_t s = 0; s < l->nshards; s++) {
            if (l->shards[s].ended)
                continue;
            if (k++ == l->cursor) {
                sh = (int)s;
                break;
            }
        }
        if (sh < 0 || l->shards[sh].busy)
            return NULL;
        l->shards[sh].busy = true;
        l->cursor = (l->cursor + 1) % l->live;
        size = l->o.batch_size;
    }
    ferry_batch *b = l->free_list;
    if (!b->blk) {
        block *k = l->spare;
        if (k) {
            l->spare = k->next_spare;
            l->nspare--;
        } else if (!(k = block_new(l))) {
            l->blk_rc = l->pin_rc ? l->pin_rc : FERRY_ENOMEM;
            pthread_cond_broadcast(&l->ready_cv);
            return NULL;
        }
        attach(l, b, k);
    }
    l->free_list = b->next_free;
    l->nfree--;
    b->epoch = l->epoch;
    b->number = l->next_sched++;
    b->gen = atomic_load(&l->gen);
    b->first_pos = first;
    b->size = size;
    b->claimed = 0;
    atomic_store(&b->done, 0);
    b->ready = b->held = false;
    b->skipped = 0;
    b->shard = sh;
    b->shard_ended = false;
    b->calls = 0;
    b->replay = replay;
    b->fail_slot = UINT32_MAX;
    b->fail_rc = 0;
    memset((void *)b->state, SLOT_PENDING, size);
    l->by_number[b->number % l->nbufs] = b;
    l->open[(l->open_head + l->open_count) % l->nbufs] = b;
    l->open_count++;
    l->undelivered++;
    return b;
}

/* Claims up to a grain of slots; under m. */
static ferry_batch *claim(ferry_loader *l, uint32_t *first, uint32_t *count)
{
    if (l->open_count == 0 && !schedule(l))
        return NULL;
    ferry_batch *b = l->open[l->open_head];
    uint32_t grain = b->size;
    if (l->ds && l->nworkers > 1) {
        if (l->ns_per_sample == 0) /* unknown yet: share the first batches evenly */
            grain = (b->size + l->nworkers - 1) / l->nworkers;
        else if ((uint64_t)b->size * l->ns_per_sample > GRAIN_NS)
            grain = (uint32_t)(GRAIN_NS / l->ns_per_sample) + 1;
    }
    *first = b->claimed;
    *count = b->size - b->claimed < grain ? b->size - b->claimed : grain;
    b->claimed += *count;
    if (b->claimed == b->size) {
        l->open_head = (l->open_head + 1) % l->nbufs;
        l->open_count--;
    }
    return b;
}

/* Records a failed slot; under m. Keeps the lowest slot's message so that the
 * error reported does not depend on which worker got there first. */
static void record_failure(ferry_loader *l, ferry_batch *b, uint32_t slot, uint64_t index, int rc)
{
    b->skipped++;
    if (l->o.on_error == FERRY_ON_ERROR_SKIP) {
        /* keep the first by (epoch, index), in order, whichever worker met them first */
        uint32_t k = l->nkept;
        while (k > 0 && (l->kept[k - 1].epoch > b->epoch ||
                         (l->kept[k - 1].epoch == b->epoch && l->kept[k - 1].index > index)))
            k--;
        if (k < FERRY_SKIPPED_KEPT) {
            uint32_t last = l->nkept < FERRY_SKIPPED_KEPT ? l->nkept : FERRY_SKIPPED_KEPT - 1;
            memmove(&l->kept[k + 1], &l->kept[k], (last - k) * sizeof l->kept[0]);
            l->kept[k].epoch = b->epoch;
            l->kept[k].index = index;
            snprintf(l->kept[k].msg, sizeof l->kept[k].msg, "%s", ferry_last_errmsg());
            if (l->nkept < FERRY_SKIPPED_KEPT)
                l->nkept++;
        }
    }
    if (slot >= b->fail_slot)
        return;
    b->fail_slot = slot;
    b->fail_rc = rc;
    if (index == UINT64_MAX)
        snprintf(b->fail_msg, sizeof b->fail_msg, "epoch %llu, batch %llu, stream shard %d: %s",
                 (unsigned long long)b->epoch, (unsigned long long)b->number, b->shard,
                 ferry_last_errmsg());
    else
        snprintf(b->fail_msg, sizeof b->fail_msg, "epoch %llu, batch %llu, sample %llu: %s",
                 (unsigned long long)b->epoch, (unsigned long long)b->number,
                 (unsigned long long)index, ferry_last_errmsg());
    (void)l;
}

/* Writes one sample into slot i. Returns 0 or the dataset's error. */
static int fill_slot(ferry_loader *l, ferry_batch *b, uint32_t i, uint64_t index, ferry_ctx *ctx,
                     bool stream_next, shard *sh, const ferry_pos *at)
{
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    for (int f = 0; f < l->nfields; f++) {
        data[f] = b->field[f] + (size_t)i * l->field_stride[f];
        len[f] = 0;
    }
    ferry_sample s = {l->nfields, data, len, {0}};
    int rc;
    if (at)
        rc = ferry_stream_fetch(sh->it, at, &s, ctx);
    else if (stream_next)
        rc = ferry_stream_next(sh->it, &s, ctx);
    else if (index >= l->ds->len)
        rc = ferry__err(FERRY_ERANGE, "the sampler gave index %llu, past the dataset's %llu",
                        (unsigned long long)index, (unsigned long long)l->ds->len);
    else
        rc = l->ds->vt->get(l->ds->self, index, &s, ctx);
    if (rc > 0 && (!stream_next || (rc != FERRY_END && rc != FERRY_BREAK)))
        /* not a sample: the slot holds nothing written for it */
        rc = ferry__err(FERRY_ECALLBACK,
                        "the dataset's %s returned %d, which is not a status it "
                        "may return",
                        stream_next ? "next" : "get", rc);
    if (rc == 0 && b->pos)
        b->pos[i] = s.pos;
    if (!l->any_variable)
        return rc;
    size_t B = l->o.batch_size;
    if (rc != 0) {
        /* what a failed call wrote is unknown: the whole slot may be dirty */
        for (int f = 0; f < l->nfields; f++)
            if (l->fields[f].variable)
                b->dirty[(size_t)l->var_of[f] * B + i] = l->field_stride[f];
        return rc;
    }
    for (int f = 0; f < l->nfields; f++) {
        if (!l->fields[f].variable)
            continue;
        size_t *dirty = &b->dirty[(size_t)l->var_of[f] * B + i];
        int64_t bound = l->fields[f].shape[0];
        if (len[f] < 0 || len[f] > bound) {
            *dirty = l->field_stride[f];
            return ferry__err(FERRY_EOVERFLOW, "field \"%s\": length %lld is outside [0, %lld]",
                              l->fields[f].name, (long long)len[f], (long long)bound);
        }
        /* the dataset wrote the first len rows; past them, zeros up to what an
         * earlier sample in this slot wrote, no further (the rest is zero still) */
        size_t used = (size_t)len[f] * l->row_bytes[f];
        if (*dirty > used)
            memset((uint8_t *)data[f] + used, 0, *dirty - used);
        *dirty = used;
        b->lengths[f][i] = len[f];
    }
    return 0;
}

/* Moves the good samples of a batch with skipped ones to the front. Called by the
 * worker that finished the batch, before it is published. */
static void compact(ferry_loader *l, ferry_batch *b, uint32_t nslots)
{
    uint32_t out = 0;
    for (uint32_t i = 0; i < nslots; i++) {
        if (atomic_load_explicit(&b->state[i], memory_order_relaxed) != SLOT_OK)
            continue;
        if (out != i) {
            b->indices[out] = b->indices[i];
            for (int f = 0; f < l->nfields; f++) {
                uint8_t *to = b->field[f] + (size_t)out * l->field_stride[f];
                const uint8_t *from = b->field[f] + (size_t)i * l->field_stride[f];
                if (!l->fields[f].variable) {
                    memmove(to, from, l->field_stride[f]);
                    continue;
                }
                /* the rows, then zeros as far as the slot was dirty */
                size_t used = (size_t)b->lengths[f][i] * l->row_bytes[f];
                size_t *dirty = &b->dirty[(size_t)l->var_of[f] * l->o.batch_size + out];
                memmove(to, from, used);
                if (*dirty > used)
                    memset(to + used, 0, *dirty - used);
                *dirty = used;
                b->lengths[f][out] = b->lengths[f][i];
            }
        }
        out++;
    }
    b->out_size = out;
}

/* Processes slots [first, first+count) of b. Returns the number of slots it
 * accounted for (all of them, done or dropped). Outside m. */
/* Adds a grain's time (dt) to w's counters: busy, and each stage the dataset
 * claimed, the rest as READ. Under m. */
static void account(worker *w, uint64_t dt)
{
    uint64_t claimed = 0;
    w->busy_ns += dt;
    for (int s = 1; s < FERRY_STAGE_COUNT; s++) {
        w->stage_ns[s] += w->ctx.stage_ns[s];
        claimed += w->ctx.stage_ns[s];
    }
    w->stage_ns[FERRY_STAGE_READ] +=
        w->ctx.stage_ns[FERRY_STAGE_READ] + (dt > claimed ? dt - claimed : 0);
}

/* A batch a saved state holds as its samples' places: fetched again from its
 * shard, with what the first run met (the shard's end, failures) as it was. */
static void replay_batch(ferry_loader *l, ferry_batch *b, ferry_ctx *ctx, uint32_t *nfilled)
{
    const pending *e = b->replay;
    shard *sh = &l->shards[b->shard];
    uint32_t n = e->n - e->last_failed, i = 0;
    for (; i < n; i++) {
        b->indices[i] = UINT64_MAX;
        if (atomic_load_explicit(&l->gen, memory_order_relaxed) != b->gen)
            break;
        int rc = fill_slot(l, b, i, UINT64_MAX, ctx, true, sh, &e->pos[i]);
        if (rc < 0) {
            rc = ferry__err_prefix(rc, "reading again a sample of a saved state");
            pthread_mutex_lock(&l->m);
            record_failure(l, b, i, UINT64_MAX, rc);
            pthread_mutex_unlock(&l->m);
            atomic_store_explicit(&b->state[i], SLOT_FAILED, memory_order_relaxed);
            i++;
            break;
        }
        atomic_store_explicit(&b->state[i], SLOT_OK, memory_order_relaxed);
    }
    if (i == n && e->last_failed) {
        b->indices[i] = UINT64_MAX;
        atomic_store_explicit(&b->state[i], SLOT_FAILED, memory_order_relaxed);
        i++;
    }
    pthread_mutex_lock(&l->m);
    b->skipped += e->skipped;
    if (e->skipped && e->fail_slot < b->fail_slot) {
        b->fail_slot = e->fail_slot;
        b->fail_rc = e->fail_rc;
        snprintf(b->fail_msg, sizeof b->fail_msg, "%s", e->fail_msg);
    }
    pthread_mutex_unlock(&l->m);
    b->shard_ended = e->shard_ended;
    b->calls = e->calls;
    *nfilled = i;
}

__attribute__((noinline)) static void work(ferry_loader *l, ferry_batch *b, uint32_t first,
                                           uint32_t count, ferry_ctx *ctx, uint32_t *nfilled,
                                           volatile uint32_t *cur)
{
    ctx->epoch = b->epoch;
    ctx->gen_now = &l->gen;
    ctx->gen = b->gen;
    if (b->replay) {
        replay_batch(l, b, ctx, nfilled);
        return;
    }
    shard *sh = b->shard >= 0 ? &l->shards[b->shard] : NULL;
    uint32_t filled = first;
    if (!sh) {
        /* the grain's indices first, so the dataset can fetch them all at once */
        for (uint32_t i = first; i < first + count; i++)
            b->indices[i] = ferry_sampler_at(l->sampler, b->first_pos + i);
        if (l->ds->vt->hint)
            l->ds->vt->hint(l->ds->self, b->indices + first, count, 1);
    }
    for (uint32_t i = first; i < first + count; i++) {
        if (atomic_load_explicit(&l->gen, memory_order_relaxed) != b->gen)
            break; /* stale: drop the rest */
        if (cur)
            *cur = i;
        uint64_t index = UINT64_MAX;
        int rc;
        bool recorded = false;
        if (sh) {
            for (;;) {
                if (atomic_load_explicit(&l->gen, memory_order_relaxed) != b->gen) {
                    rc = FERRY_ECANCELED; /* stale: the epoch was stopped while retrying */
                    break;
                }
                rc = fill_slot(l, b, i, UINT64_MAX, ctx, true, sh, NULL);
                b->calls++;
                if (rc == FERRY_BREAK && i == first)
                    continue; /* a break before any sample: nothing to end */
                if (rc < 0 && l->o.on_error == FERRY_ON_ERROR_SKIP) {
                    /* a stream has no hole to leave: count it and read the next one,
                     * unless the budget is gone (a stream stuck on one bad sample) */
                    if (l->o.on_skip)
                        l->o.on_skip(b->epoch, UINT64_MAX, rc, ferry_last_errmsg(),
                                     l->o.on_skip_arg);
                    pthread_mutex_lock(&l->m);
                    record_failure(l, b, i, UINT64_MAX, rc);
                    bool over_budget = b->skipped > l->o.skip_budget;
                    pthread_mutex_unlock(&l->m);
                    if (!over_budget)
                        continue;
                    recorded = true; /* counted already: the batch ends here */
                }
                break;
            }
            if (rc == FERRY_END) {
                b->shard_ended = true;
                break;
            }
            if (rc == FERRY_BREAK)
                break; /* the stream ends this batch early (a group is complete) */
            if (rc == FERRY_ECANCELED && atomic_load(&l->gen) != b->gen)
                break; /* dropped with the rest of the stale grain */
        } else {
            index = b->indices[i];
            rc = fill_slot(l, b, i, index, ctx, false, NULL, NULL);
            if (rc < 0 && l->o.on_error == FERRY_ON_ERROR_SKIP && l->o.on_skip)
                l->o.on_skip(b->epoch, index, rc, ferry_last_errmsg(), l->o.on_skip_arg);
        }
        b->indices[i] = index;
        if (rc < 0) {
            if (!recorded) {
                pthread_mutex_lock(&l->m);
                record_failure(l, b, i, index, rc);
                pthread_mutex_unlock(&l->m);
            }
            atomic_store_explicit(&b->state[i], SLOT_FAILED, memory_order_relaxed);
            filled = i + 1;
            if (sh)
                break; /* fail policy: the stream batch ends at the failure */
            continue;
        }
        atomic_store_explicit(&b->state[i], SLOT_OK, memory_order_relaxed);
        filled = i + 1;
    }
    *nfilled = filled;
}

/* work() under a passive region (src/core/guard.h): a mapped dataset that the
 * worker calls directly reads under it instead of setting a region of its own
 * for every sample (a sigsetjmp each). A file cut short under the reader fails
 * the sample in hand, with the dataset's message naming the file, and the grain
 * goes on with the next sample. */
static void work_guarded(ferry_loader *l, ferry_batch *b, uint32_t first, uint32_t count,
                         ferry_ctx *ctx, uint32_t *nfilled)
{
    if (b->shard >= 0) {
        work(l, b, first, count, ctx, nfilled, NULL);
        return;
    }
    volatile uint32_t cur = first, from = first;
    ferry__guard g;
    for (;;) {
        ferry__guard_push(&g);
        g.passive = true;
        g.direct = l->ds->self;
        if (sigsetjmp(g.jb, 0)) {
            uint32_t i = cur;
            int rc = g.at_fault.fault(&g.at_fault, g.addr);
            pthread_mutex_lock(&l->m);
            record_failure(l, b, i, b->indices[i], rc);
            pthread_mutex_unlock(&l->m);
            atomic_store_explicit(&b->state[i], SLOT_FAILED, memory_order_relaxed);
            from = i + 1;
            *nfilled = from;
            if (from >= first + count)
                return;
            continue;
        }
        cur = from; /* a fault in the grain's hint fails its first sample */
        work(l, b, from, first + count - from, ctx, nfilled, &cur);
        ferry__guard_pop(&g);
        return;
    }
}

/* Called by the worker (or the inline consumer) whose grain completed batch b:
 * finish it and publish it. Under m. */
static void publish(ferry_loader *l, ferry_batch *b, uint32_t nslots)
{
    if (b->shard >= 0) {
        shard *sh = &l->shards[b->shard];
        sh->busy = false;
        if (l->pausing)
            pthread_cond_broadcast(&l->ready_cv);
        if (b->shard_ended && !sh->ended && !b->replay) {
            /* drop it from the rotation; the cursor keeps pointing at the same successor */
            uint32_t pos = 0;
            for (int s = 0; s < b->shard; s++)
                pos += !l->shards[s].ended;
            sh->ended = true;
            l->live--;
            if (pos < l->cursor)
                l->cursor--;
            if (l->live)
                l->cursor %= l->live;
            else
                l->cursor = 0;
        }
        if (l->idle_workers)
            pthread_cond_broadcast(&l->work_cv);
    }
    if (b->gen != atomic_load(&l->gen)) {
        recycle(l, b);
        return;
    }
    b->ready = true;
    atomic_fetch_add(&l->published, 1);
    if (l->o.order == FERRY_ORDER_COMPLETION) {
        l->ready_q[(l->ready_head + l->ready_count) % l->nbufs] = b;
        l->ready_count++;
    }
    (void)nslots;
    if (l->consumer_waiting)
        pthread_cond_signal(&l->ready_cv);
}

/* Finishes a grain: counts it and, if it was the batch's last, prepares and
 * publishes the batch. Takes m. */
static void finish_grain(ferry_loader *l, ferry_batch *b, uint32_t count, uint32_t nfilled)
{
    /* Read the size while this grain still pins the batch: once the count is in,
     * another worker may finish, publish and reschedule the buffer. */
    uint32_t size = b->size;
    bool last = atomic_fetch_add(&b->done, count) + count == size;
    if (last && b->gen == atomic_load(&l->gen)) {
        uint32_t nslots = b->shard >= 0 ? nfilled : b->size;
        if (b->skipped && l->o.on_error == FERRY_ON_ERROR_SKIP && b->shard < 0)
            compact(l, b, nslots);
        else
            b->out_size = nslots;
    }
    pthread_mutex_lock(&l->m);
    if (last)
        publish(l, b, nfilled);
}

/* A worker that opens batch k tells the dataset which samples batch k + prefetch
 * will read: that batch comes next in this buffer, so its reads can be under way
 * while the pool drains. Outside m. */
static void hint_ahead(ferry_loader *l, worker *w, const ferry_batch *b, uint32_t first)
{
    if (first != 0 || !w->hint || b->shard >= 0 || l->ds->near_hints_only)
        return;
    uint64_t pos, count, k = b->number + l->nbufs;
    if (k >= l->nbatches || ferry_batch_positions(ferry_sampler_len(l->sampler), l->o.batch_size,
                                                  l->o.drop_last, k, &pos, &count) < 0)
        return;
    for (uint64_t i = 0; i < count; i++)
        w->hint[i] = ferry_sampler_at(l->sampler, pos + i);
    l->ds->vt->hint(l->ds->self, w->hint, (size_t)count, 0);
}

static void *worker_main_thread(void *arg);

static void worker_job(void *arg)
{
    worker_main_thread(arg);
}

static void *worker_main_thread(void *arg)
{
    worker *w = arg;
    ferry_loader *l = w->l;
    int irc = 0;
    if (l->o.worker_init) {
        ferry__err_clear();
        irc = l->o.worker_init(w->id, l->nworkers, l->o.seed, l->o.worker_init_arg);
    }
    pthread_mutex_lock(&l->m);
    if (irc != 0 && l->init_rc == 0) {
        l->init_rc = FERRY_ECALLBACK;
        snprintf(l->init_msg, sizeof l->init_msg,
                 "worker_init failed on worker %u (returned %d)%s%s", w->id, irc,
                 ferry_last_errmsg()[0] ? ": " : "", ferry_last_errmsg());
    }
    l->inited++;
    l->refs++; /* the loader's memory outlives a worker that free stopped waiting for */
    pthread_cond_broadcast(&l->ready_cv);
    bool polled = false;
    for (;;) {
        if (l->shutdown)
            break;
        uint32_t first, count;
        ferry_batch *b =
            l->started && !atomic_load(&l->cancelled) ? claim(l, &first, &count) : NULL;
        if (!b) {
            uint64_t t0 = ferry_now_ns();
            if (!polled && l->started && !atomic_load(&l->cancelled) && cheap_batches(l)) {
                polled = true;
                poll_unlocked(l, &l->released, atomic_load(&l->released));
            } else {
                l->idle_workers++;
                pthread_cond_wait(&l->work_cv, &l->m);
                l->idle_workers--;
                polled = false;
            }
            w->idle_ns += ferry_now_ns() - t0;
            continue;
        }
        polled = false;
        /* another batch may be open for claiming: wake a peer */
        if (l->open_count && l->idle_workers)
            pthread_cond_signal(&l->work_cv);
        l->busy_workers++;
        pthread_mutex_unlock(&l->m);

        uint64_t t0 = ferry_now_ns();
        memset(w->ctx.stage_ns, 0, sizeof w->ctx.stage_ns);
        hint_ahead(l, w, b, first);
        uint32_t nfilled;
        work_guarded(l, b, first, count, &w->ctx, &nfilled);
        uint64_t dt = ferry_now_ns() - t0;

        finish_grain(l, b, count, nfilled);
        uint64_t per = dt / (count ? count : 1);
        l->ns_per_sample = l->ns_per_sample ? (7 * l->ns_per_sample + per) / 8 : per + 1;
        account(w, dt);
        l->truncated += w->ctx.truncated;
        w->ctx.truncated = 0;
        l->busy_workers--;
        if (l->busy_workers == 0)
            pthread_cond_broadcast(&l->ready_cv);
    }
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        destroy(l); /* free returned without this worker, and no batch is held */
    return NULL;
}

/* ---- Creation ---- */

void ferry_loader_opts_default(ferry_loader_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 1;
    o->rank = -1;
    o->world_size = -1;
    o->skip_budget = FERRY_SKIP_BUDGET_DEFAULT;
}

static int check_opts(ferry_loader_opts *o)
{
    if (o->batch_size < 1 || o->batch_size > MAX_BATCH)
        return ferry__err(FERRY_EINVAL, "loader: batch_size %u is outside [1, %u]", o->batch_size,
                          MAX_BATCH);
    if (o->num_workers > MAX_WORKERS)
        return ferry__err(FERRY_EINVAL, "loader: num_workers %u is outside [0, %u]", o->num_workers,
                          MAX_WORKERS);
    if (o->prefetch > MAX_PREFETCH)
        return ferry__err(FERRY_EINVAL, "loader: prefetch %u is outside [1, %u] (0 = default)",
                          o->prefetch, MAX_PREFETCH);
    if (o->timeout_ms < 0)
        return ferry__err(FERRY_EINVAL, "loader: timeout_ms %lld is negative (0 = no timeout)",
                          (long long)o->timeout_ms);
    if (o->order != FERRY_ORDER_SAMPLER && o->order != FERRY_ORDER_COMPLETION)
        return ferry__err(FERRY_EINVAL,
                          "loader: order %d is not FERRY_ORDER_SAMPLER (0) or "
                          "FERRY_ORDER_COMPLETION (1)",
                          o->order);
    if (o->on_error != FERRY_ON_ERROR_FAIL && o->on_error != FERRY_ON_ERROR_SKIP)
        return ferry__err(FERRY_EINVAL,
                          "loader: on_error %d is not FERRY_ON_ERROR_FAIL (0) or "
                          "FERRY_ON_ERROR_SKIP (1)",
                          o->on_error);
    if (o->stream_shards > MAX_SHARDS)
        return ferry__err(FERRY_EINVAL, "loader: stream_shards %u is outside [1, %u] (0 = 1)",
                          o->stream_shards, MAX_SHARDS);
    if (o->stream_shards == 0)
        o->stream_shards = 1;
    return 0;
}

/* The default depth: 2 buffers per worker (at least 2), and more when batches are
 * small, up to AUTO_PREFETCH_BYTES of buffers or AUTO_PREFETCH_MAX of them. Deep
 * pools of small batches let workers run on while the consumer wakes up. */
#define AUTO_PREFETCH_BYTES ((size_t)32 << 20)
#define AUTO_PREFETCH_MAX 64u
static uint32_t auto_prefetch(const ferry_loader *l)
{
    uint32_t n = l->o.num_workers > 1 ? 2 * l->o.num_workers : 2;
    size_t batch = 1;
    for (int f = 0; f < l->nfields; f++)
        batch += l->field_stride[f] * l->o.batch_size;
    size_t by_bytes = AUTO_PREFETCH_BYTES / batch;
    if (by_bytes > n)
        n = by_bytes > AUTO_PREFETCH_MAX ? (n > AUTO_PREFETCH_MAX ? n : AUTO_PREFETCH_MAX)
                                         : (uint32_t)by_bytes;
    return n > MAX_PREFETCH ? MAX_PREFETCH : n;
}

static uint64_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (uint64_t)4 << 30;
    return (uint64_t)pages * (uint64_t)page / DEFAULT_BUDGET_DIVISOR;
}

/* "1.5 GiB" */
static const char *human(uint64_t n, char *buf, size_t cap)
{
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

/* The memory the settings ask for, against the budget, before anything is
 * allocated: the batch buffers (prefetch of them) and, per worker, scratch of up to
 * one sample (what a decoder such as a compressed shard's needs). With the default
 * prefetch, the pool is made as deep as the budget allows, down to one buffer. */
static int check_budget(ferry_loader *l)
{
    uint64_t budget = l->o.memory_budget ? l->o.memory_budget : default_budget();
    uint64_t B = l->o.batch_size, sample = 0, batch = 64 + 2 * B, big = 0;
    int widest = 0;
    for (int f = 0; f < l->nfields; f++) {
        uint64_t bytes = l->field_stride[f], field;
        if (__builtin_mul_overflow(bytes, B, &field))
            field = UINT64_MAX;
        if (field > big) {
            big = field;
            widest = f;
        }
        sample = sample + bytes < sample ? UINT64_MAX : sample + bytes;
        uint64_t extra = field + 64 + (l->fields[f].variable ? 16 * B : 0);
        batch = batch + extra < batch ? UINT64_MAX : batch + extra;
    }
    uint64_t workers = l->o.num_workers ? l->o.num_workers : 1, scratch, streams = 0;
    if (__builtin_mul_overflow(sample, workers, &scratch))
        scratch = UINT64_MAX;
    char b1[32], b2[32], b3[32];
    /* a stream's buffering decorators hold their buffers in each shard's iterator */
    if (l->st && __builtin_mul_overflow(l->st->iter_bytes, (uint64_t)l->o.stream_shards, &streams))
        streams = UINT64_MAX;
    if (streams > budget)
        return ferry__err(FERRY_EINVAL,
                          "loader: the stream's buffers (shuffle or group-batch) of %s each, "
                          "times stream_shards %u, need %s, over the memory budget of %s "
                          "(memory_budget; 0 = 1/%d of physical memory)",
                          human(l->st->iter_bytes, b1, sizeof b1), l->o.stream_shards,
                          human(streams, b2, sizeof b2), human(budget, b3, sizeof b3),
                          DEFAULT_BUDGET_DIVISOR);
    scratch = scratch + streams < scratch ? UINT64_MAX : scratch + streams;
    const ferry_field *f = &l->fields[widest];
    if (batch > budget || scratch > budget - batch) {
        if (f->variable)
            return ferry__err(FERRY_EINVAL,
                              "loader: field \"%s\" (variable, bound %lld rows: %s a sample) "
                              "times batch_size %llu needs %s, over the memory budget of %s "
                              "(memory_budget; 0 = 1/%d of physical memory)",
                              f->name, (long long)f->shape[0],
                              human(l->field_stride[widest], b1, sizeof b1), (unsigned long long)B,
                              human(batch, b2, sizeof b2), human(budget, b3, sizeof b3),
                              DEFAULT_BUDGET_DIVISOR);
        return ferry__err(FERRY_EINVAL,
                          "loader: field \"%s\" (%s a sample) times batch_size %llu needs %s, "
                          "over the memory budget of %s (memory_budget; 0 = 1/%d of physical "
                          "memory)",
                          f->name, human(l->field_stride[widest], b1, sizeof b1),
                          (unsigned long long)B, human(batch, b2, sizeof b2),
                          human(budget, b3, sizeof b3), DEFAULT_BUDGET_DIVISOR);
    }
    uint64_t fits = (budget - scratch) / batch;
    if (l->o.prefetch == 0) {
        l->o.prefetch = auto_prefetch(l);
        if (l->o.prefetch > fits)
            l->o.prefetch = (uint32_t)fits;
    }
    /* spare buffers (exported tensors' memory coming back) count too */
    if (l->o.prefetch <= fits)
        l->max_spare =
            (uint32_t)(fits - l->o.prefetch < l->o.prefetch ? fits - l->o.prefetch : l->o.prefetch);
    if (l->o.prefetch > fits)
        return ferry__err(FERRY_EINVAL,
                          "loader: prefetch %u buffers of %s (batch_size %llu) are over the "
                          "memory budget of %s: at most %llu fit (memory_budget; 0 = 1/%d of "
                          "physical memory)",
                          l->o.prefetch, human(batch, b1, sizeof b1), (unsigned long long)B,
                          human(budget, b2, sizeof b2), (unsigned long long)fits,
                          DEFAULT_BUDGET_DIVISOR);
    return 0;
}

/* The device options: a device name is checked (and refused: delivery on the
 * device is not in this version); pin_memory opens the device its blocks are
 * page-locked for. */
static int open_device(ferry_loader *l)
{
    const char *name = l->o.device && *l->o.device ? l->o.device : NULL;
    l->o.device = NULL; /* borrowed for the call only */
    if (name) {
        int kind, ordinal, rc;
        if ((rc = ferry_device_parse(name, &kind, &ordinal)) < 0)
            return ferry__err_prefix(rc, "loader");
        if (kind == FERRY_DEVICE_CPU)
            name = NULL;
        else if ((rc = ferry_device_probe(name)) < 0)
            return ferry__err_prefix(rc, "device \"%s\"", name);
        else
            return ferry__err(FERRY_ENOTSUP,
                              "device \"%s\": batches delivered in device memory are not in this "
                              "version; use pin_memory and copy each batch",
                              name);
    }
    int rc = l->o.pin_memory ? ferry_device_open(&l->dev, name) : 0;
    return rc < 0 ? ferry__err_prefix(rc, "pin_memory") : 0;
}

static int create(ferry_loader **out, ferry_dataset *ds, ferry_stream *st,
                  const ferry_loader_opts *opts)
{
    int rc = 0;
    ferry_loader *l = NULL;
    *out = NULL;
    ferry__err_clear();
    if (!opts || (!ds && !st))
        return ferry__err(FERRY_EINVAL, "loader: a dataset and options are required");
    ferry_loader_opts o = *opts;
    FERRY_TRY(check_opts(&o));
    if (st) {
        if (o.rank < 0 || o.world_size < 0) {
            int64_t r, w;
            FERRY_TRY(ferry_dist_from_env(&r, &w));
            if (o.rank < 0)
                o.rank = r;
            if (o.world_size < 0)
                o.world_size = w;
        }
        if (o.world_size < 1 || o.world_size > ((int64_t)1 << 31) || o.rank >= o.world_size)
            FERRY_FAIL(FERRY_EINVAL,
                       "loader: rank %lld is outside [0, world_size %lld), or world_size is "
                       "outside [1, 2^31]",
                       (long long)o.rank, (long long)o.world_size);
    }
    l = ferry__calloc(1, sizeof *l);
    if (!l)
        FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
    pthread_mutex_init(&l->m, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    ferry__cond_init(&l->ready_cv);
    l->refs = 1;
    l->o = o;
    l->ds = ds;
    l->st = st;
    l->nfields = ds ? ds->nfields : st->nfields;
    memcpy(l->fields, ds ? ds->fields : st->fields, (size_t)l->nfields * sizeof l->fields[0]);
    for (int f = 0; f < l->nfields; f++) {
        l->field_stride[f] = ferry_field_nbytes(&l->fields[f]);
        l->row_bytes[f] =
            ferry_field_row_elems(&l->fields[f]) * ferry_dtype_size(l->fields[f].dtype);
        l->any_variable |= l->fields[f].variable != 0;
        if (l->fields[f].variable)
            l->var_of[f] = l->nvar++;
    }
    if (ds) {
        l->sampler = o.sampler;
        if (!l->sampler) {
            FERRY_TRY(o.shuffle ? ferry_sampler_random(&l->own_sampler, ds->len, o.seed, 0, 0)
                                : ferry_sampler_sequential(&l->own_sampler, ds->len));
            l->sampler = l->own_sampler;
        }
    } else {
        l->nshards = o.stream_shards;
        l->shards = ferry__calloc(l->nshards, sizeof *l->shards);
        if (!l->shards)
            FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
    }
    FERRY_TRY(check_budget(l));
    FERRY_TRY(open_device(l));
    FERRY_TRY(alloc_buffers(l, l->o.prefetch));
    ferry__ctx_init(&l->inline_worker.ctx, 0, o.seed, 0);
    bool hints = ds && ds->vt->hint;
    if (hints && !(l->inline_worker.hint = ferry__malloc(o.batch_size * sizeof(uint64_t))))
        FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
    /* Start epoch 0 now, before the workers exist: each finds work on its first
     * look instead of sleeping until the first ferry_loader_next wakes it. */
    pthread_mutex_lock(&l->m);
    rc = start_locked(l, 0, 0);
    pthread_mutex_unlock(&l->m);
    if (rc < 0)
        goto cleanup;
    if (o.num_workers) {
        l->workers = ferry__calloc(o.num_workers, sizeof *l->workers);
        if (!l->workers)
            FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        for (uint32_t i = 0; i < o.num_workers; i++) {
            l->workers[i].l = l;
            l->workers[i].id = i;
            ferry__ctx_init(&l->workers[i].ctx, i, o.seed, 0);
            if (hints && !(l->workers[i].hint = ferry__malloc(o.batch_size * sizeof(uint64_t))))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        }
        l->nworkers = o.num_workers;
        FERRY_TRY(ferry__pool_create(&l->pool, o.num_workers, o.num_workers));
        for (uint32_t i = 0; i < o.num_workers; i++)
            FERRY_TRY(ferry__pool_add(l->pool, worker_job, &l->workers[i]));
        pthread_mutex_lock(&l->m);
        while (l->inited < l->nworkers)
            pthread_cond_wait(&l->ready_cv, &l->m);
        rc = l->init_rc;
        pthread_mutex_unlock(&l->m);
        if (rc < 0) {
            ferry__err(rc, "loader: %s", l->init_msg);
            goto cleanup;
        }
    } else if (o.worker_init) {
        ferry__err_clear();
        int irc = o.worker_init(0, 0, o.seed, o.worker_init_arg);
        if (irc != 0)
            FERRY_FAIL(FERRY_ECALLBACK,
                       "loader: worker_init failed on the caller's thread "
                       "(returned %d)",
                       irc);
    }
    *out = l;
    return 0;
cleanup:
    ferry_loader_free(l);
    return rc;
}

int ferry_loader_create(ferry_loader **out, ferry_dataset *ds, const ferry_loader_opts *o)
{
    if (!ds)
        return ferry__err(FERRY_EINVAL, "loader: dataset is NULL");
    return create(out, ds, NULL, o);
}

int ferry_loader_create_stream(ferry_loader **out, ferry_stream *st, const ferry_loader_opts *o)
{
    if (!st)
        return ferry__err(FERRY_EINVAL, "loader: stream is NULL");
    return create(out, NULL, st, o);
}

int ferry_loader_free_within(ferry_loader *l, int64_t grace_ms)
{
    if (!l)
        return 0;
    grace_ms = grace_ms < 0 ? 0 : grace_ms > ((int64_t)1 << 40) ? ((int64_t)1 << 40) : grace_ms;
    pthread_mutex_lock(&l->m);
    l->shutdown = true;
    atomic_store(&l->cancelled, true);
    stop_epoch(l);
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->m);
    /* Workers drop stale work at the next sample; one stuck in a dataset callback
     * is waited for, then left to finish on its own: it holds a reference to the
     * loader's memory, and calls nothing of the dataset's once its callback
     * returns. */
    uint64_t deadline = ferry_now_ns() + (uint64_t)grace_ms * 1000000u;
    unsigned stuck = l->pool ? ferry__pool_free_within(l->pool, deadline) : 0;
    l->pool = NULL;
    pthread_mutex_lock(&l->m);
    if (stuck) {
        /* a stream iterator a stuck worker is reading stays open (its memory is
         * lost): closing it would call into it under the worker's feet */
        for (uint32_t i = 0; i < l->nshards; i++)
            if (l->shards[i].busy)
                l->shards[i].it = NULL;
    }
    close_shards(l);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        destroy(l);
    if (stuck)
        return ferry__err(FERRY_ETIMEDOUT,
                          "loader: %u worker%s still in a dataset callback after %lld ms; left "
                          "to finish on %s own",
                          stuck, stuck == 1 ? "" : "s", (long long)grace_ms,
                          stuck == 1 ? "its" : "their");
    return 0;
}

void ferry_loader_free(ferry_loader *l)
{
    if (l)
        ferry_loader_free_within(l,
                                 l->o.timeout_ms > FREE_GRACE_MS ? l->o.timeout_ms : FREE_GRACE_MS);
}

/* ---- The consumer ---- */

int ferry_loader_start(ferry_loader *l, uint64_t epoch, uint64_t first_batch)
{
    ferry__err_clear();
    pthread_mutex_lock(&l->m);
    int rc = 0;
    /* Asking for the epoch that is already under way, untouched, keeps the work
     * prefetched for it (the one started at creation, typically). */
    bool same = l->started && !l->over && !atomic_load(&l->cancelled) && l->epoch == epoch &&
                l->first_batch == first_batch && l->delivered == 0;
    if (!same)
        rc = start_locked(l, epoch, first_batch);
    pthread_mutex_unlock(&l->m);
    return set_errmsg(l, rc);
}

uint64_t ferry_loader_len(const ferry_loader *l)
{
    if (l->st)
        return UINT64_MAX;
    if (l->started)
        return l->nbatches;
    return ferry_batch_count(ferry_sampler_len(l->sampler), l->o.batch_size, l->o.drop_last);
}

const char *ferry_loader_errmsg(const ferry_loader *l)
{
    return l->errmsg;
}

void ferry_loader_cancel(ferry_loader *l)
{
    /* flag and stop together, so that a start racing with this either comes
     * before (and its epoch is cancelled) or after (and runs whole) */
    pthread_mutex_lock(&l->m);
    atomic_store(&l->cancelled, true);
    stop_epoch(l);
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->m);
}

/* Builds the timeout message for the batch the consumer waits for. Under m. */
static int timeout_error(ferry_loader *l)
{
    ferry_batch *b = NULL;
    if (l->o.order == FERRY_ORDER_SAMPLER && l->next_deliver < l->next_sched)
        b = l->by_number[l->next_deliver % l->nbufs];
    else
        for (uint32_t i = 0; i < l->nbufs; i++)
            if (!l->bufs[i].ready && !l->bufs[i].held && l->bufs[i].size &&
                l->bufs[i].gen == atomic_load(&l->gen) &&
                atomic_load(&l->bufs[i].done) < l->bufs[i].size &&
                (!b || l->bufs[i].number < b->number))
                b = &l->bufs[i];
    if (!b || b->gen != atomic_load(&l->gen)) {
        uint32_t held = 0;
        for (uint32_t i = 0; i < l->nbufs; i++)
            held += l->bufs[i].held;
        return ferry__err(FERRY_ETIMEDOUT,
                          "loader: timed out after %lld ms waiting for batch %llu of epoch %llu, "
                          "not yet started (%u of %u batch buffers are held by the caller)",
                          (long long)l->o.timeout_ms, (unsigned long long)l->next_deliver,
                          (unsigned long long)l->epoch, held, l->nbufs);
    }
    char list[256];
    size_t used = 0;
    uint32_t outstanding = 0;
    list[0] = 0;
    for (uint32_t i = 0; i < b->size; i++) {
        if (atomic_load_explicit(&b->state[i], memory_order_relaxed) != SLOT_PENDING)
            continue;
        if (outstanding++ < TIMEOUT_LIST && l->ds && used < sizeof list) {
            uint64_t idx = ferry_sampler_at(l->sampler, b->first_pos + i);
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%llu", used ? ", " : "",
                                     (unsigned long long)idx);
        }
    }
    return ferry__err(FERRY_ETIMEDOUT,
                      "loader: timed out after %lld ms waiting for batch %llu of epoch %llu: %u of "
                      "%u samples outstanding%s%s%s",
                      (long long)l->o.timeout_ms, (unsigned long long)b->number,
                      (unsigned long long)b->epoch, outstanding, b->size, used ? " (indices " : "",
                      list, used ? (outstanding > TIMEOUT_LIST ? ", ...)" : ")") : "");
}

/* A ready batch to hand out, or NULL. Under m. */
static ferry_batch *take_ready(ferry_loader *l)
{
    if (l->o.order == FERRY_ORDER_COMPLETION) {
        if (!l->ready_count)
            return NULL;
        ferry_batch *b = l->ready_q[l->ready_head];
        l->ready_head = (l->ready_head + 1) % l->nbufs;
        l->ready_count--;
        return b;
    }
    if (l->next_deliver >= l->next_sched)
        return NULL;
    ferry_batch *b = l->by_number[l->next_deliver % l->nbufs];
    if (!b->ready || b->gen != atomic_load(&l->gen) || b->number != l->next_deliver)
        return NULL;
    l->next_deliver++;
    return b;
}

/* Runs one grain on the caller's thread (num_workers == 0). Under m, returns under m.
 * Returns false when there was nothing to do. */
static bool work_inline(ferry_loader *l)
{
    uint32_t first, count, nfilled;
    ferry_batch *b = claim(l, &first, &count);
    if (!b)
        return false;
    l->busy_workers++;
    pthread_mutex_unlock(&l->m);
    uint64_t t0 = ferry_now_ns();
    memset(l->inline_worker.ctx.stage_ns, 0, sizeof l->inline_worker.ctx.stage_ns);
    hint_ahead(l, &l->inline_worker, b, first);
    work_guarded(l, b, first, count, &l->inline_worker.ctx, &nfilled);
    uint64_t dt = ferry_now_ns() - t0;
    finish_grain(l, b, count, nfilled);
    account(&l->inline_worker, dt);
    l->truncated += l->inline_worker.ctx.truncated;
    l->inline_worker.ctx.truncated = 0;
    l->busy_workers--;
    return true;
}

/* Hands a ready batch out, or turns it into the epoch's error. Under m. */
static int deliver(ferry_loader *l, ferry_batch *b, ferry_batch **out)
{
    l->undelivered--;
    note_done(l, b);
    if (b->skipped) {
        if (l->o.on_error == FERRY_ON_ERROR_FAIL) {
            int rc = ferry__err(b->fail_rc, "%s", b->fail_msg);
            recycle(l, b);
            stop_epoch(l);
            return rc;
        }
        l->epoch_skipped += b->skipped;
        l->skipped += b->skipped;
        if (l->epoch_skipped > l->o.skip_budget) {
            int rc = ferry__err(FERRY_EBUDGET,
                                "loader: %llu bad samples in epoch %llu exceed the skip budget of "
                                "%llu; the first in this batch: %s",
                                (unsigned long long)l->epoch_skipped, (unsigned long long)l->epoch,
                                (unsigned long long)l->o.skip_budget, b->fail_msg);
            recycle(l, b);
            stop_epoch(l);
            return rc;
        }
    }
    /* nothing in it (or, with drop_last, a short stream batch): the caller loops on */
    if (b->out_size == 0 || (l->st && l->o.drop_last && b->out_size < l->o.batch_size)) {
        recycle(l, b);
        return FERRY_END;
    }
    b->held = true;
    atomic_store(&b->users, 1);
    l->delivered++;
    l->refs++;
    l->samples += b->out_size;
    l->batches++;
    for (int f = 0; f < l->nfields; f++) {
        l->bytes += (uint64_t)b->out_size * l->field_stride[f];
        if (!l->fields[f].variable) {
            l->data_bytes += (uint64_t)b->out_size * l->field_stride[f];
            continue;
        }
        uint64_t rows = 0; /* a variable field's data is its rows, not its padding */
        for (uint32_t i = 0; i < b->out_size; i++)
            rows += (uint64_t)b->lengths[f][i];
        l->data_bytes += rows * l->row_bytes[f];
    }
    if (!l->t_first)
        l->t_first = ferry_now_ns();
    *out = b;
    return 0;
}

int ferry_loader_next(ferry_loader *l, ferry_batch **out)
{
    int rc = 0;
    *out = NULL;
    ferry__err_clear();
    pthread_mutex_lock(&l->m);
    if (!l->started && (rc = start_locked(l, 0, 0)) < 0)
        goto done;
    uint64_t t0 = 0, deadline = 0;
    for (;;) {
        if (atomic_load(&l->cancelled)) {
            rc = ferry__err(FERRY_ECANCELED, "loader: cancelled");
            break;
        }
        if (l->over) {
            rc = FERRY_END;
            break;
        }
        if (l->blk_rc) {
            rc = l->pin_rc
                     ? ferry__err(l->blk_rc, "pin_memory: a new batch buffer: %s", l->pin_msg)
                     : ferry__err(l->blk_rc, "loader: cannot allocate a batch buffer of %zu bytes",
                                  l->blk_bytes);
            l->pin_rc = 0;
            l->blk_rc = 0;
            stop_epoch(l);
            break;
        }
        ferry_batch *b = take_ready(l);
        if (b) {
            rc = deliver(l, b, out);
            if (rc == FERRY_END && !l->over) {
                /* an empty batch (every sample skipped) is progress: the timeout is for
                 * the wait on one batch, not on a run of empty ones */
                if (t0)
                    l->consumer_wait_ns += ferry_now_ns() - t0;
                t0 = deadline = 0;
                continue;
            }
            break;
        }
        if (sched_done(l) && l->undelivered == 0) {
            l->over = true;
            rc = FERRY_END;
            break;
        }
        if (!l->free_list && l->undelivered == 0) {
            rc = ferry__err(FERRY_ESTATE,
                            "loader: all %u batch buffers are held by the caller; release one "
                            "before asking for the next, or raise prefetch",
                            l->nbufs);
            break;
        }
        if (l->nworkers == 0) {
            /* a block that could not be allocated is reported at the top */
            if (work_inline(l) || l->blk_rc)
                continue;
        }
        if (l->idle_workers && l->free_list)
            pthread_cond_broadcast(&l->work_cv);
        /* Poll a little before sleeping when batches come quickly: the next is then
         * a few microseconds away and a wake-up costs more. When samples are costly,
         * polling would only take a core from the workers. */
        bool poll = !t0 && l->nworkers && cheap_batches(l);
        if (!t0) {
            t0 = ferry_now_ns();
            /* a timeout too long to add to the clock is no timeout */
            if (l->o.timeout_ms && (uint64_t)l->o.timeout_ms < (UINT64_MAX - t0) / 1000000u)
                deadline = t0 + (uint64_t)l->o.timeout_ms * 1000000u;
        }
        if (poll) {
            poll_unlocked(l, &l->published, atomic_load(&l->published));
            continue;
        }
        l->consumer_waiting = true;
        bool woke = ferry__cond_wait_until(&l->ready_cv, &l->m, deadline);
        l->consumer_waiting = false;
        if (!woke && deadline && ferry_now_ns() >= deadline) {
            b = take_ready(l);
            if (b) {
                rc = deliver(l, b, out);
                if (rc == FERRY_END && !l->over) {
                    l->consumer_wait_ns += ferry_now_ns() - t0;
                    t0 = deadline = 0;
                    continue;
                }
                break;
            }
            rc = timeout_error(l);
            break;
        }
    }
    if (t0)
        l->consumer_wait_ns += ferry_now_ns() - t0;
done:
    pthread_mutex_unlock(&l->m);
    return set_errmsg(l, rc);
}

int ferry_loader_skipped_sample(ferry_loader *l, uint64_t k, uint64_t *epoch, uint64_t *index,
                                const char **msg)
{
    pthread_mutex_lock(&l->m);
    bool ok = k < l->nkept;
    if (ok) {
        *epoch = l->kept[k].epoch;
        *index = l->kept[k].index;
        memcpy(l->kept_out, l->kept[k].msg, sizeof l->kept_out);
        *msg = l->kept_out;
    }
    pthread_mutex_unlock(&l->m);
    if (!ok)
        return ferry__err(FERRY_ERANGE, "loader: no skipped sample %llu (%u kept)",
                          (unsigned long long)k, FERRY_SKIPPED_KEPT);
    return 0;
}

int ferry_loader_stats_get(ferry_loader *l, ferry_loader_stats *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&l->m);
    s->samples = l->samples;
    s->batches = l->batches;
    s->bytes = l->bytes;
    s->skipped = l->skipped;
    s->truncated = l->truncated;
    s->data_bytes = l->data_bytes;
    s->elapsed_ns = l->t_start ? ferry_now_ns() - l->t_start : 0;
    s->first_batch_ns = l->t_first ? l->t_first - l->t_start : 0;
    s->consumer_wait_ns = l->consumer_wait_ns;
    s->num_workers = l->nworkers;
    s->prefetch = l->nbufs;
    s->pinned_bytes = l->pinned_bytes;
    for (uint32_t i = 0; i <= l->nworkers; i++) {
        /* with no workers, the consumer's thread did the work */
        const worker *w = i < l->nworkers ? &l->workers[i] : &l->inline_worker;
        s->worker_busy_ns += w->busy_ns;
        s->worker_idle_ns += w->idle_ns;
        for (int k = 0; k < FERRY_STAGE_COUNT; k++)
            s->stage_ns[k] += w->stage_ns[k];
    }
    pthread_mutex_unlock(&l->m);
    return 0;
}

/* ---- Batches ---- */

uint64_t ferry_batch_number(const ferry_batch *b)
{
    return b->number;
}

uint64_t ferry_batch_epoch(const ferry_batch *b)
{
    return b->epoch;
}

uint32_t ferry_batch_size(const ferry_batch *b)
{
    return b->out_size;
}

const uint64_t *ferry_batch_indices(const ferry_batch *b)
{
    return b->indices;
}

int ferry_batch_nfields(const ferry_batch *b)
{
    return b->l->nfields;
}

const ferry_field *ferry_batch_field_info(const ferry_batch *b, int f)
{
    return f >= 0 && f < b->l->nfields ? &b->l->fields[f] : NULL;
}

int ferry_batch_field(const ferry_batch *b, int f, ferry_tensor *out)
{
    const ferry_loader *l = b->l;
    if (f < 0 || f >= l->nfields)
        return ferry__err(FERRY_EINVAL, "batch: field %d is outside [0, %d)", f, l->nfields);
    const ferry_field *fi = &l->fields[f];
    int64_t shape[FERRY_MAX_DIMS];
    shape[0] = b->out_size;
    for (int d = 0; d < fi->ndim; d++)
        shape[d + 1] = fi->shape[d];
    return ferry_tensor_wrap(out, b->field[f], fi->dtype, fi->ndim + 1, shape, NULL);
}

int ferry_batch_lengths(const ferry_batch *b, int f, ferry_tensor *out)
{
    const ferry_loader *l = b->l;
    if (f < 0 || f >= l->nfields || !l->fields[f].variable)
        return ferry__err(FERRY_EINVAL, "batch: field %d is not a variable field", f);
    int64_t shape[1] = {b->out_size};
    return ferry_tensor_wrap(out, b->lengths[f], FERRY_I64, 1, shape, NULL);
}

void ferry_batch_retain(ferry_batch *b)
{
    atomic_fetch_add(&b->users, 1);
}

void ferry_batch_release(ferry_batch *b)
{
    if (!b || atomic_fetch_sub(&b->users, 1) != 1)
        return;
    ferry_loader *l = b->l;
    pthread_mutex_lock(&l->m);
    recycle(l, b);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        destroy(l);
}

/* A tensor's reference to a block goes; any thread. */
static void block_release(void *owner)
{
    block *k = owner;
    if (atomic_fetch_sub(&k->refs, 1) != 1)
        return;
    /* the last reference, and a tensor's: the block was left by its batch */
    ferry_loader *l = k->l;
    pthread_mutex_lock(&l->m);
    block_retire(l, k);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        destroy(l);
}

static int export_ref(ferry_batch *b, ferry_tensor *out)
{
    atomic_fetch_add(&b->blk->refs, 1);
    out->owner = b->blk;
    out->release = block_release;
    return 0;
}

int ferry_batch_export(ferry_batch *b, int f, int lengths, ferry_tensor *out)
{
    int rc = lengths ? ferry_batch_lengths(b, f, out) : ferry_batch_field(b, f, out);
    return rc < 0 ? rc : export_ref(b, out);
}

int ferry_batch_export_indices(ferry_batch *b, ferry_tensor *out)
{
    int64_t shape[1] = {b->out_size};
    ferry_tensor_wrap(out, b->indices, FERRY_U64, 1, shape, NULL);
    return export_ref(b, out);
}

/* ---- Loader state ----
 * The blob (little-endian): "ferry-ls" (8 bytes), version u32, kind u32 (1 map, 2
 * stream), source u64 (a hash of the schema, and the length of a map-style
 * dataset), batch_size u64, seed u64, drop_last u32, nshards u32, world_size
 * i64, rank i64 (as set: -1 = from the environment), epoch u64, next batch u64,
 * skipped this epoch u64, cursor u32, live u32 (the rotation as of the batches
 * handed out); then per shard: next() calls u64 and ended u64 (as of the batches
 * handed out), ended u64 and the position's size u64 and bytes (as of the
 * batches read: a resumable stream's ferry_stream_save, size 0 when none); then
 * the rotation as of the batches read: cursor u32, live u32; the batches read
 * but not handed out: count u32, and each one's shard u32, samples u32, skipped
 * u32, flags u32 (1: it ended its shard, 2: its last sample failed), next()
 * calls u64, the first failure's code i32, slot u32, message length u32 and
 * bytes, and its samples' places (32 bytes each); then the CRC-32C of all that
 * (u32). Version 1 had only the calls and the ended flag per shard. */

#define STATE_MAGIC "ferry-ls"
#define STATE_VERSION 2u
#define STATE_HEAD 96u

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Under m: the batches are taken in order; follow the rotation as schedule() and
 * publish() did for them. */
static void note_done(ferry_loader *l, ferry_batch *b)
{
    l->done_next = b->number + 1;
    if (b->shard < 0)
        return;
    shard *sh = &l->shards[b->shard];
    sh->calls_done += b->calls;
    if (l->done_live)
        l->done_cursor = (l->done_cursor + 1) % l->done_live;
    if (b->shard_ended && !sh->ended_done) {
        uint32_t pos = 0;
        for (int s = 0; s < b->shard; s++)
            pos += !l->shards[s].ended_done;
        sh->ended_done = true;
        l->done_live--;
        if (pos < l->done_cursor)
            l->done_cursor--;
        l->done_cursor = l->done_live ? l->done_cursor % l->done_live : 0;
    }
}

static int get_u32(ferry_state *r, uint32_t *v)
{
    uint8_t b[4];
    int rc = ferry_state_get(r, b, 4);
    *v = rc < 0 ? 0 : get32(b);
    return rc;
}

static void put_u32(ferry_state *w, uint32_t v)
{
    uint8_t b[4];
    put32(b, v);
    ferry_state_put(w, b, 4);
}

/* Samples' places: four little-endian u64 each (on a little-endian machine, the
 * bytes of ferry_pos). */
#define POS_LE (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && sizeof(ferry_pos) == 32)

static void put_places(ferry_state *w, const ferry_pos *pos, uint32_t n)
{
    if (POS_LE) {
        ferry_state_put(w, pos, (size_t)n * sizeof *pos);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        ferry_state_put_u64(w, pos[i].epoch);
        ferry_state_put_u64(w, pos[i].a);
        ferry_state_put_u64(w, pos[i].b);
        ferry_state_put_u64(w, pos[i].c);
    }
}

static int get_places(ferry_state *r, ferry_pos *pos, uint32_t n)
{
    if (POS_LE)
        return ferry_state_get(r, pos, (size_t)n * sizeof *pos);
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++)
        if ((rc = ferry_state_get_u64(r, &pos[i].epoch)) == 0 &&
            (rc = ferry_state_get_u64(r, &pos[i].a)) == 0 &&
            (rc = ferry_state_get_u64(r, &pos[i].b)) == 0)
            rc = ferry_state_get_u64(r, &pos[i].c);
    return rc;
}

/* Under m, from start_locked with the shards just opened: puts each shard where
 * the state (l->resuming, checked whole) says. A resumable stream restores each
 * shard's saved position (a shuffle buffer's samples are read again from their
 * places) and queues the batches that were read but not handed out, to be made
 * again from their samples' places; any other stream has no position to seek
 * to, so every sample its shards gave since the epoch began is read again. On
 * the caller's thread: that is a resume's cost. */
static int restore_shards(ferry_loader *l, uint64_t epoch)
{
    int rc = 0;
    ferry_state r = {.in = l->resuming + STATE_HEAD, .n = l->resuming_len - STATE_HEAD - 4};
    uint32_t version = get32(l->resuming + 8);
    ferry_ctx *ctx = &l->inline_worker.ctx;
    ctx->epoch = epoch;
    uint8_t *mem = NULL;
    bool resumable = version >= 2 && l->st->resumable;
    for (uint32_t s = 0; s < l->nshards; s++) {
        shard *sh = &l->shards[s];
        uint64_t calls, ended_done, ended = 0, plen = 0;
        FERRY_TRY(ferry_state_get_u64(&r, &calls));
        FERRY_TRY(ferry_state_get_u64(&r, &ended_done));
        if (version >= 2) {
            FERRY_TRY(ferry_state_get_u64(&r, &ended));
            FERRY_TRY(ferry_state_get_u64(&r, &plen));
        }
        sh->calls_done = calls;
        sh->ended_done = ended_done != 0;
        sh->ended = resumable ? ended != 0 : ended_done != 0;
        if (plen) {
            if (plen > r.n - r.off)
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: shard %u: cut short", s);
            rc = ferry__stream_resume(sh->it, r.in + r.off, (size_t)plen, ctx);
            if (rc < 0)
                FERRY_FAIL(rc, "loader state: stream shard %u: %s", s, ferry_last_errmsg());
            r.off += (size_t)plen;
            continue;
        }
        if (resumable || calls == 0)
            continue; /* a resumable shard without a position was not read yet */
        /* no position: read its samples again */
        if (!mem) {
            size_t total = 0;
            for (int f = 0; f < l->nfields; f++)
                total += ferry__align64(l->field_stride[f]);
            if (!(mem = ferry__aligned_alloc(total ? total : 64)))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        }
        void *data[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        for (int f = 0, off = 0; f < l->nfields;
             off += (int)ferry__align64(l->field_stride[f]), f++)
            data[f] = mem + off;
        ferry_sample smp = {l->nfields, data, len, {0}};
        for (uint64_t c = 0; c < calls; c++) {
            memset(len, 0, sizeof len);
            rc = ferry_stream_next(sh->it, &smp, ctx);
            if (rc == FERRY_END && c + 1 < calls)
                FERRY_FAIL(FERRY_EINVAL,
                           "loader state: stream shard %u ended after %llu reads, but the state "
                           "says %llu: it was saved from another source",
                           s, (unsigned long long)(c + 1), (unsigned long long)calls);
        }
        rc = 0;
    }
    l->live = l->done_live;
    l->cursor = l->done_cursor;
    if (version >= 2) {
        uint32_t cursor, live, npend;
        FERRY_TRY(get_u32(&r, &cursor));
        FERRY_TRY(get_u32(&r, &live));
        FERRY_TRY(get_u32(&r, &npend));
        if (resumable) {
            l->live = live;
            l->cursor = cursor;
        }
        if (npend && !resumable)
            FERRY_FAIL(FERRY_EINVAL, "loader state: it holds batches as their samples' places, "
                                     "but this stream is not resumable: it was saved from "
                                     "another source");
        /* each entry takes at least 36 bytes: a count past that is damage */
        if (npend > (r.n - r.off) / 36)
            FERRY_FAIL(FERRY_ECORRUPT, "loader state: %u batches do not fit in it", npend);
        if (npend && !(l->replay = ferry__calloc(npend, sizeof *l->replay)))
            FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        for (uint32_t k = 0; k < npend; k++) {
            pending *e = &l->replay[k];
            l->nreplay = k + 1;
            uint32_t flags, rc32, mlen;
            FERRY_TRY(get_u32(&r, &e->shard));
            FERRY_TRY(get_u32(&r, &e->n));
            FERRY_TRY(get_u32(&r, &e->skipped));
            FERRY_TRY(get_u32(&r, &flags));
            FERRY_TRY(ferry_state_get_u64(&r, &e->calls));
            FERRY_TRY(get_u32(&r, &rc32));
            FERRY_TRY(get_u32(&r, &e->fail_slot));
            FERRY_TRY(get_u32(&r, &mlen));
            if (e->shard >= l->nshards || e->n > l->o.batch_size || flags > 3 ||
                mlen >= sizeof e->fail_msg || ((flags & 2) && e->n == 0))
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: batch %u of those read is damaged", k);
            FERRY_TRY(ferry_state_get(&r, e->fail_msg, mlen));
            e->fail_msg[mlen] = 0;
            e->fail_rc = (int)rc32;
            e->shard_ended = flags & 1;
            e->last_failed = flags & 2;
            if (e->n > (r.n - r.off) / sizeof(ferry_pos))
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: batch %u of those read is cut short", k);
            if (e->n && !(e->pos = ferry__malloc(e->n * sizeof *e->pos)))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
            FERRY_TRY(get_places(&r, e->pos, e->n));
        }
    }
    if (r.off != r.n)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes left over", r.n - r.off);
    uint32_t ended = 0;
    for (uint32_t s = 0; s < l->nshards; s++)
        ended += l->shards[s].ended;
    if (l->live != l->nshards - ended || (l->live ? l->cursor >= l->live : l->cursor != 0))
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: rotation cursor %u of %u live shards (%u ended)",
                   l->cursor, l->live, ended);
cleanup:
    if (rc < 0)
        free_replay(l);
    ferry__aligned_free(mem);
    return rc;
}

static uint64_t source_id(const ferry_loader *l)
{
    uint64_t h = ferry_hash64(l->ds ? 1 : 2, l->ds ? l->ds->len : 0);
    for (int f = 0; f < l->nfields; f++) {
        const ferry_field *fi = &l->fields[f];
        for (const char *c = fi->name; *c; c++)
            h = ferry_hash64(h, (unsigned char)*c);
        h = ferry_hash64(h, (uint64_t)fi->dtype << 8 | (uint64_t)fi->ndim << 1 | !!fi->variable);
        for (int d = 0; d < fi->ndim; d++)
            h = ferry_hash64(h, (uint64_t)fi->shape[d]);
    }
    return h;
}

/* Under m: the state into w (a growing buffer). A resumable stream loader waits
 * until no shard is being read (holding off new batches meanwhile), then saves
 * each shard's position and the batches read but not handed out as their
 * samples' places. */
static int state_build(ferry_loader *l, ferry_state *w)
{
    int rc = 0;
    bool resumable = l->st && l->st->resumable;
    if (resumable && l->over && l->next_sched > l->done_next)
        return ferry__err(FERRY_ESTATE,
                          "loader state: epoch %llu was stopped at batch %llu (an error or a "
                          "cancel ended it) and the batches its stream shards had read ahead are "
                          "gone, so there is no position to save; start an epoch first",
                          (unsigned long long)l->epoch, (unsigned long long)l->done_next);
    if (resumable) {
        l->pausing++;
        for (;;) {
            bool busy = false;
            for (uint32_t s = 0; s < l->nshards; s++)
                busy |= l->shards[s].busy;
            if (!busy)
                break;
            pthread_cond_wait(&l->ready_cv, &l->m);
        }
    }
    uint8_t head[STATE_HEAD];
    memcpy(head, STATE_MAGIC, 8);
    put32(head + 8, STATE_VERSION);
    put32(head + 12, l->st ? 2 : 1);
    put64(head + 16, source_id(l));
    put64(head + 24, l->o.batch_size);
    put64(head + 32, l->o.seed);
    put32(head + 40, l->o.drop_last ? 1 : 0);
    put32(head + 44, l->st ? l->nshards : 0);
    put64(head + 48, (uint64_t)l->o.world_size);
    put64(head + 56, (uint64_t)l->o.rank);
    put64(head + 64, l->epoch);
    put64(head + 72, l->done_next);
    put64(head + 80, l->epoch_skipped);
    put32(head + 88, l->st ? l->done_cursor : 0);
    put32(head + 92, l->st ? l->done_live : 0);
    ferry_state_put(w, head, sizeof head);
    ferry_state pw = {.grow = true};
    for (uint32_t s = 0; l->st && s < l->nshards; s++) {
        const shard *sh = &l->shards[s];
        ferry_state_put_u64(w, sh->calls_done);
        ferry_state_put_u64(w, sh->ended_done);
        ferry_state_put_u64(w, sh->ended);
        pw.len = 0;
        if (resumable && sh->it && !sh->ended && sh->it->used)
            FERRY_TRY(ferry__stream_snapshot(sh->it, &pw));
        ferry_state_put_u64(w, pw.len);
        ferry_state_put(w, pw.buf, pw.len);
    }
    if (l->st) {
        put_u32(w, l->st ? l->cursor : 0);
        put_u32(w, l->st ? l->live : 0);
        uint64_t inflight = resumable ? l->next_sched - l->done_next : 0;
        uint32_t queued = resumable ? l->nreplay - l->replay_head : 0;
        put_u32(w, (uint32_t)(inflight + queued));
        for (uint64_t k = 0; k < inflight + queued; k++) {
            const ferry_batch *b = NULL;
            const pending *e = NULL;
            if (k < inflight) {
                b = l->by_number[(l->done_next + k) % l->nbufs];
                if (!b->ready || b->number != l->done_next + k)
                    FERRY_FAIL(FERRY_ESTATE, "loader state: batch %llu is not ready",
                               (unsigned long long)(l->done_next + k));
            } else {
                e = &l->replay[l->replay_head + (k - inflight)];
            }
            uint32_t n = b ? b->out_size : e->n;
            bool last_failed =
                b ? b->skipped && l->o.on_error == FERRY_ON_ERROR_FAIL && n && b->fail_slot == n - 1
                  : e->last_failed;
            const char *msg = b ? b->fail_msg : e->fail_msg;
            size_t mlen = (b ? b->skipped : e->skipped) ? strlen(msg) : 0;
            put_u32(w, b ? (uint32_t)b->shard : e->shard);
            put_u32(w, n);
            put_u32(w, b ? b->skipped : e->skipped);
            put_u32(w,
                    (uint32_t)(b ? b->shard_ended : e->shard_ended) | (uint32_t)last_failed << 1);
            ferry_state_put_u64(w, b ? b->calls : e->calls);
            put_u32(w, (uint32_t)(b ? b->fail_rc : e->fail_rc));
            put_u32(w, b ? b->fail_slot : e->fail_slot);
            put_u32(w, (uint32_t)mlen);
            ferry_state_put(w, msg, mlen);
            put_places(w, b ? b->pos : e->pos, n);
        }
    }
    if (w->nomem || pw.nomem)
        FERRY_FAIL(FERRY_ENOMEM, "loader state: out of memory");
cleanup:
    ferry__free(pw.buf);
    if (resumable && --l->pausing == 0)
        pthread_cond_broadcast(&l->work_cv);
    return rc;
}

size_t ferry_loader_state_size(const ferry_loader *l)
{
    ferry_loader *m = (ferry_loader *)l; /* the lock only */
    ferry_state w = {.grow = true};
    pthread_mutex_lock(&m->m);
    int rc = state_build(m, &w);
    pthread_mutex_unlock(&m->m);
    ferry__free(w.buf);
    return rc < 0 ? 0 : w.len + 4;
}

int ferry_loader_state_save(ferry_loader *l, void *buf, size_t cap, size_t *len)
{
    ferry__err_clear();
    if (len)
        *len = 0;
    if (l->o.order == FERRY_ORDER_COMPLETION)
        return set_errmsg(l, ferry__err(FERRY_ENOTSUP,
                                        "loader state: batches handed out in completion order "
                                        "have no position to resume from"));
    ferry_state w = {.grow = true};
    pthread_mutex_lock(&l->m);
    int rc = state_build(l, &w);
    pthread_mutex_unlock(&l->m);
    size_t need = w.len + 4;
    if (rc == 0 && len)
        *len = need;
    if (rc == 0 && (!buf || cap < need))
        rc = ferry__err(FERRY_EOVERFLOW, "loader state: %zu bytes needed, %zu given", need, cap);
    if (rc == 0) {
        memcpy(buf, w.buf, w.len);
        put32((uint8_t *)buf + w.len, ferry_crc32c(0, buf, w.len));
    }
    ferry__free(w.buf);
    return set_errmsg(l, rc);
}

/* Compares a saved setting with the loader's: a clear error naming it. */
#define STATE_SAME(what, saved, now)                                                               \
    do {                                                                                           \
        if ((uint64_t)(saved) != (uint64_t)(now))                                                  \
            FERRY_FAIL(FERRY_EINVAL, "loader state: saved with %s %llu, this loader has %llu",     \
                       what, (unsigned long long)(saved), (unsigned long long)(now));              \
    } while (0)

int ferry_loader_state_resume(ferry_loader *l, const void *buf, size_t n)
{
    int rc = 0;
    const uint8_t *p = buf;
    bool locked = false;
    ferry__err_clear();
    if (!buf || n < STATE_HEAD + 4 || memcmp(p, STATE_MAGIC, 8) != 0)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes that are not a ferry loader state", n);
    uint32_t version = get32(p + 8), nsh = get32(p + 44);
    if (version != STATE_VERSION && version != 1)
        FERRY_FAIL(FERRY_ENOTSUP, "loader state: version %u, this library reads versions 1 to %u",
                   version, STATE_VERSION);
    uint32_t crc = ferry_crc32c(0, p, n - 4);
    if (crc != get32(p + n - 4))
        FERRY_FAIL(FERRY_ECORRUPT,
                   "loader state: CRC mismatch (stored %08x, computed %08x): "
                   "the state is damaged",
                   get32(p + n - 4), crc);
    if (get32(p + 12) != (l->st ? 2u : 1u))
        FERRY_FAIL(FERRY_EINVAL, "loader state: saved from a %s loader, this one is %s",
                   get32(p + 12) == 2 ? "stream" : "map-style", l->st ? "a stream" : "map-style");
    if (get64(p + 16) != source_id(l))
        FERRY_FAIL(FERRY_EINVAL, "loader state: saved from another source (its schema%s differ)",
                   l->ds ? " or length" : "");
    STATE_SAME("batch_size", get64(p + 24), l->o.batch_size);
    STATE_SAME("seed", get64(p + 32), l->o.seed);
    STATE_SAME("drop_last", get32(p + 40), l->o.drop_last ? 1 : 0);
    if ((int64_t)get64(p + 48) != l->o.world_size || (int64_t)get64(p + 56) != l->o.rank)
        FERRY_FAIL(FERRY_EINVAL,
                   "loader state: saved with rank %lld of world_size %lld, this loader has "
                   "rank %lld of %lld",
                   (long long)get64(p + 56), (long long)get64(p + 48), (long long)l->o.rank,
                   (long long)l->o.world_size);
    STATE_SAME("stream_shards", nsh, l->st ? l->nshards : 0);
    if (!l->st && n != STATE_HEAD + 4)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes, a map-style state has %u", n,
                   STATE_HEAD + 4);
    /* the rotation as of the batches handed out; the rest is read by the restore */
    uint32_t cursor = get32(p + 88), live = get32(p + 92), ended = 0;
    ferry_state r = {.in = p + STATE_HEAD, .n = n - STATE_HEAD - 4};
    for (uint32_t s = 0; s < nsh; s++) {
        uint64_t calls, e, e2 = 0, plen = 0;
        if (ferry_state_get_u64(&r, &calls) < 0 || ferry_state_get_u64(&r, &e) < 0 ||
            (version >= 2 &&
             (ferry_state_get_u64(&r, &e2) < 0 || ferry_state_get_u64(&r, &plen) < 0)))
            FERRY_FAIL(FERRY_ECORRUPT,
                       "loader state: %zu bytes, which do not hold the %u stream "
                       "shards it names",
                       n, nsh);
        if (e > 1 || e2 > 1 || plen > r.n - r.off)
            FERRY_FAIL(FERRY_ECORRUPT, "loader state: shard %u is damaged", s);
        if (plen && !l->st->resumable)
            FERRY_FAIL(FERRY_EINVAL,
                       "loader state: shard %u holds a saved position, but this "
                       "stream is not resumable: it was saved from another source",
                       s);
        r.off += (size_t)plen;
        ended += (uint32_t)e;
    }
    if (version < 2 && r.off != r.n)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes left over", r.n - r.off);
    if (l->st && (live != nsh - ended || (live ? cursor >= live : cursor != 0)))
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: rotation cursor %u of %u live shards (%u ended)",
                   cursor, live, ended);
    pthread_mutex_lock(&l->m);
    locked = true;
    l->done_cursor = cursor;
    l->done_live = live;
    l->resuming = p;
    l->resuming_len = n;
    rc = start_locked(l, get64(p + 64), get64(p + 72));
    l->resuming = NULL;
    if (rc == 0)
        l->epoch_skipped = get64(p + 80);
cleanup:
    if (locked)
        pthread_mutex_unlock(&l->m);
    return set_errmsg(l, rc);
}
