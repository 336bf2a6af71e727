/*
 * The loader engine: the batch buffers and the blocks that hold their bytes,
 * epochs, scheduling, and the workers that fill the batches. The design is in
 * loader_internal.h.
 */
#include "loader_internal.h"
#include "../core/guard.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define POLL_NS 100000u

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* ---- Buffers ---- */

static void block_free(block *k)
{
    if (k) {
        if (k->l->dev) {
            /* memory a queued copy may still read is not unmapped under it */
            if (k->fence.n && ferry__fence_wait(k->l->dev, &k->fence) < 0)
                ferry__err_clear();
            ferry__fence_clear(k->l->dev, &k->fence);
        }
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

int ferry__loader_alloc_buffers(ferry_loader *l, uint32_t nbufs)
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

void ferry__loader_free_replay(ferry_loader *l)
{
    for (uint32_t i = 0; i < l->nreplay; i++)
        ferry__free(l->replay[i].pos);
    ferry__free(l->replay);
    l->replay = NULL;
    l->nreplay = l->replay_head = 0;
}

/* Frees everything; called when the last reference goes. */
void ferry__loader_destroy(ferry_loader *l)
{
    if (l->bufs)
        for (uint32_t i = 0; i < l->nbufs; i++) {
            ferry_batch *b = &l->bufs[i];
            /* a batch copied ahead but never handed out: its block is not freed
             * under the copy (block_free waits for the fence) */
            if (b->dbuf && b->blk) {
                void *stream = ferry__dring_stream(l->ring);
                if (ferry__fence_record(l->dev, &b->blk->fence, &stream, 1) < 0 ||
                    ferry__fence_wait(l->dev, &b->blk->fence) < 0)
                    ferry__err_clear();
            }
            if (b->dbuf)
                ferry__dbuf_unref(b->dbuf);
            block_free(b->blk);
        }
    while (l->spare) {
        block *k = l->spare;
        l->spare = k->next_spare;
        block_free(k);
    }
    ferry_device_free(l->dev);
    ferry__dring_free(l->ring); /* device tensors still alive keep it */
    for (uint32_t i = 0; l->bufs && i < l->nbufs; i++)
        ferry__free(l->bufs[i].pos);
    ferry__loader_free_replay(l);
    ferry__free(l->bufs);
    ferry__free(l->by_number);
    ferry__free(l->open);
    ferry__free(l->ready_q);
    if (l->workers)
        for (uint32_t i = 0; i < l->o.num_workers; i++) {
            ferry__ctx_release(&l->workers[i].ctx);
            ferry__free(l->workers[i].hint);
            ferry__free(l->workers[i].visit);
        }
    ferry__free(l->inline_worker.hint);
    ferry__free(l->inline_worker.visit);
    ferry__free(l->workers);
    ferry__ctx_release(&l->inline_worker.ctx);
    ferry__free(l->shards);
    ferry_sampler_free(l->own_sampler);
    ferry__trace_free(l->trace);
    pthread_mutex_destroy(&l->m);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    ferry__free(l);
}

/* Keeps a block no one uses as a spare, or frees it. Under m. */
/* pin_memory: the block's last reference has gone. The caller may have queued
 * an asynchronous copy from it: it is refilled only after the work on the
 * streams it recorded (or, where none, the legacy default stream) queued by now. */
static void fence_block(ferry_loader *l, block *k)
{
    if (l->dev && !l->ring && ferry__fence_record(l->dev, &k->fence, k->streams, k->nstreams) < 0)
        ferry__err_clear();
    k->nstreams = 0;
}

void ferry__block_retire(ferry_loader *l, block *k)
{
    fence_block(l, k);
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
void ferry__loader_recycle(ferry_loader *l, ferry_batch *b)
{
    block *k = b->blk;
    if (b->dbuf) {
        /* the block may be refilled only once the copy has read it: a fence on
         * ferry's stream, which the refill waits for (the host waits only if the
         * copy is still running then; Python gives a batch back as soon as its
         * tensors are made, before its copy has run) */
        void *stream = ferry__dring_stream(l->ring);
        if (k && ferry__fence_record(l->dev, &k->fence, &stream, 1) < 0) {
            ferry__err_clear();
            if (ferry__dbuf_wait_copied(b->dbuf) < 0)
                ferry__err_clear();
        }
        ferry__dbuf_unref(b->dbuf); /* its tensors keep the device buffer */
        b->dbuf = NULL;
    } else if (k && b->held && atomic_load(&k->refs) == 1) {
        fence_block(l, k); /* it stays with the batch: its last reference */
    }
    if (k && atomic_load(&k->refs) > 1) {
        /* tensors still view it: they keep the block (and, through it, the
         * loader's memory); the batch takes another when next scheduled */
        b->blk = NULL;
        if (atomic_fetch_sub(&k->refs, 1) == 1)
            ferry__block_retire(l, k); /* the last tensor went meanwhile */
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
bool ferry__loader_cheap_batches(const ferry_loader *l)
{
    return l->ns_per_sample && l->ns_per_sample * l->o.batch_size < POLL_BATCH_NS;
}

/* Polls *counter (with m released) until it moves from `seen`, the loader is
 * cancelled or stopped, or POLL_NS pass. Returns under m. */
void ferry__loader_poll_unlocked(ferry_loader *l, atomic_ullong *counter, uint64_t seen)
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

void ferry__loader_close_shards(ferry_loader *l)
{
    for (uint32_t i = 0; i < l->nshards; i++) {
        ferry_stream_close(l->shards[i].it);
        l->shards[i] = (shard){0};
    }
    l->live = 0;
}

/* Ends the current epoch: no more scheduling, queued batches recycled, work in
 * flight dropped at the next sample. Under m. */
void ferry__loader_stop_epoch(ferry_loader *l)
{
    atomic_store(&l->gen, atomic_load(&l->gen) + 1);
    l->over = true;
    for (uint32_t k = 0; k < l->open_count; k++) {
        ferry_batch *b = l->open[(l->open_head + k) % l->nbufs];
        uint32_t rest = b->size - b->claimed;
        b->claimed = b->size;
        if (atomic_fetch_add(&b->done, rest) + rest == b->size)
            ferry__loader_recycle(l, b);
    }
    l->open_count = 0;
    for (uint32_t i = 0; i < l->nbufs; i++) {
        ferry_batch *b = &l->bufs[i];
        if (b->ready && !b->held)
            ferry__loader_recycle(l, b);
    }
    l->ready_count = 0;
    l->undelivered = 0;
    l->nready = 0;
    pthread_cond_broadcast(&l->ready_cv);
}

/* Under m. Waits until no worker is inside a grain, so that the sampler and stream
 * shards can be changed safely. */
static void wait_workers_idle(ferry_loader *l)
{
    while (l->busy_workers)
        pthread_cond_wait(&l->ready_cv, &l->m);
}

/* Starts epoch at first_batch (where l->resuming says, when set). Under m. */
int ferry__loader_start_locked(ferry_loader *l, uint64_t epoch, uint64_t first_batch)
{
    int rc = 0;
    ferry__loader_stop_epoch(l);
    wait_workers_idle(l);
    ferry__loader_close_shards(l);
    ferry__loader_free_replay(l);
    atomic_store(&l->cancelled, false);
    l->epoch = epoch;
    l->epoch_skipped = 0;
    l->open_head = l->open_count = 0;
    l->ready_head = l->ready_count = 0;
    l->undelivered = 0;
    if (l->ds) {
        FERRY_TRY(ferry_sampler_set_epoch(l->sampler, epoch));
        l->nbatches = ferry__loader_epoch_batches(l);
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
                ferry__loader_close_shards(l);
                rc = ferry__err_prefix(rc, "loader: opening stream shard %llu of %llu",
                                       (unsigned long long)id, (unsigned long long)total);
                goto cleanup;
            }
            l->live++;
        }
        l->cursor = 0;
        l->nbatches = UINT64_MAX;
        if (l->resuming) {
            FERRY_TRY(ferry__loader_restore_shards(l, epoch));
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
bool ferry__loader_sched_done(const ferry_loader *l)
{
    return l->ds ? l->next_sched >= l->nbatches : l->live == 0 && l->replay_head >= l->nreplay;
}

/* ---- Scheduling ---- */

/* Opens the next batch in a free buffer, if any; under m. For streams, only when
 * the shard whose turn it is is not being read. */
static ferry_batch *schedule(ferry_loader *l)
{
    if (l->over || ferry__loader_sched_done(l) || !l->free_list)
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
    if (l->dev && b->blk->fence.n && !ferry__fence_done(l->dev, &b->blk->fence) &&
        ferry__fence_wait(l->dev, &b->blk->fence) < 0)
        ferry__err_clear(); /* a driver that fails here has nothing left to wait for */
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
ferry_batch *ferry__loader_claim(ferry_loader *l, uint32_t *first, uint32_t *count)
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
static void record_failure(ferry_loader *l, ferry_batch *b, uint32_t slot, uint64_t index, int rc,
                           ferry__tbuf *tb)
{
    b->skipped++;
    if (tb)
        ferry__trace_add(tb,
                         l->o.on_error == FERRY_ON_ERROR_SKIP ? FERRY__EV_SKIP : FERRY__EV_ERROR,
                         FERRY__PH_INSTANT, ferry_now_ns(), 0, index, b->number, (int32_t)slot, rc);
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
static void replay_batch(ferry_loader *l, ferry_batch *b, ferry_ctx *ctx, uint32_t *nfilled,
                         ferry__tbuf *tb)
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
            record_failure(l, b, i, UINT64_MAX, rc, tb);
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

/* Whether a grain of b is read in index order (w->visit) rather than slot order. */
static bool visits(const ferry_loader *l, const worker *w, const ferry_batch *b)
{
    return b->shard < 0 && w->visit && l->ds->in_order;
}

static int cmp_slot_index(const void *a, const void *b, void *indices)
{
    const uint64_t *ix = indices;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ix[x] != ix[y])
        return ix[x] < ix[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* The visiting order of a grain's slots [first, first + count) into v: sorted
 * by index, equal indices in slot order. An insertion sort for a grain's few
 * (tens), a qsort past that (a whole batch, one worker). */
static void visit_order(const ferry_batch *b, uint32_t first, uint32_t count, uint32_t *v)
{
    const uint64_t *ix = b->indices;
    if (count > 64) {
        for (uint32_t k = 0; k < count; k++)
            v[k] = first + k;
        qsort_r(v, count, sizeof *v, cmp_slot_index, (void *)ix);
        return;
    }
    for (uint32_t k = 0; k < count; k++) {
        uint32_t s = first + k, j = k;
        for (; j > 0 && ix[v[j - 1]] > ix[s]; j--)
            v[j] = v[j - 1];
        v[j] = s;
    }
}

/* Reads the slots of a grain, from its position `from` on: position k is slot
 * first + k, or w->visit[k] when the grain is read in index order. *nfilled: one
 * past the last slot read, which only a stream's batch (read in slot order)
 * uses. */
__attribute__((noinline)) static void work(ferry_loader *l, ferry_batch *b, uint32_t first,
                                           uint32_t count, uint32_t from, ferry_ctx *ctx,
                                           uint32_t *nfilled, volatile uint32_t *cur, worker *w)
{
    ferry__tbuf *tb = w->tb; /* errors and skips */
    ctx->epoch = b->epoch;
    ctx->gen_now = &l->gen;
    ctx->gen = b->gen;
    if (b->replay) {
        replay_batch(l, b, ctx, nfilled, tb);
        return;
    }
    shard *sh = b->shard >= 0 ? &l->shards[b->shard] : NULL;
    const uint32_t *visit = visits(l, w, b) ? w->visit : NULL;
    uint32_t filled = first + from;
    if (!sh && from == 0) {
        /* the grain's indices first, so the dataset can fetch them all at once */
        for (uint32_t i = first; i < first + count; i++)
            b->indices[i] = ferry_sampler_at(l->sampler, b->first_pos + i);
        if (visit)
            visit_order(b, first, count, w->visit);
        if (l->ds->vt->hint)
            l->ds->vt->hint(l->ds->self, b->indices + first, count, 1);
    }
    uint64_t claimed[FERRY_STAGE_COUNT];
    ferry__tbuf *ts = w->trace_samples ? w->tb : NULL; /* each sample's slices */
    if (ts && ferry__trace_full(ts)) {
        ts->dropped += count - 1; /* full: the grain's samples are dropped, and counted */
        ts = NULL;
    }
    if (ts)
        ferry__trace_span(ts, FERRY__EV_HINTS, ferry_now_ns(), b->number);
    for (uint32_t k = from; k < count; k++) {
        uint32_t i = visit ? visit[k] : first + k;
        if (atomic_load_explicit(&l->gen, memory_order_relaxed) != b->gen)
            break; /* stale: drop the rest */
        if (ts)
            memcpy(claimed, ctx->stage_ns, sizeof claimed);
        if (cur)
            *cur = k;
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
                    record_failure(l, b, i, UINT64_MAX, rc, tb);
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
        if (ts) {
            for (int s = 0; s < FERRY_STAGE_COUNT; s++)
                claimed[s] = ctx->stage_ns[s] - claimed[s];
            ferry__trace_sample(ts, ferry_now_ns(), claimed, index, b->number, (int32_t)i);
        }
        b->indices[i] = index;
        if (rc < 0) {
            if (!recorded) {
                pthread_mutex_lock(&l->m);
                record_failure(l, b, i, index, rc, tb);
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
static void work_guarded(ferry_loader *l, ferry_batch *b, uint32_t first, uint32_t count, worker *w,
                         uint32_t *nfilled)
{
    ferry_ctx *ctx = &w->ctx;
    if (b->shard >= 0) {
        work(l, b, first, count, 0, ctx, nfilled, NULL, w);
        return;
    }
    volatile uint32_t cur = 0, from = 0; /* positions in the grain */
    ferry__guard g;
    for (;;) {
        ferry__guard_push(&g);
        g.passive = true;
        g.direct = l->ds->self;
        if (sigsetjmp(g.jb, 0)) {
            uint32_t k = cur, i = visits(l, w, b) ? w->visit[k] : first + k;
            int rc = g.at_fault.fault(&g.at_fault, g.addr);
            pthread_mutex_lock(&l->m);
            record_failure(l, b, i, b->indices[i], rc, w->tb);
            pthread_mutex_unlock(&l->m);
            atomic_store_explicit(&b->state[i], SLOT_FAILED, memory_order_relaxed);
            from = k + 1;
            *nfilled = first + from;
            if (from >= count)
                return;
            continue;
        }
        cur = from; /* a fault in the grain's hint fails its first sample */
        work(l, b, first, count, from, ctx, nfilled, &cur, w);
        ferry__guard_pop(&g);
        return;
    }
}

/* Called by the worker (or the inline consumer) whose grain completed batch b:
 * finish it and publish it. Under m. */
static void publish(ferry_loader *l, ferry_batch *b, uint32_t nslots, ferry__tbuf *tb)
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
        ferry__loader_recycle(l, b);
        return;
    }
    b->ready = true;
    l->nready++;
    if (tb)
        ferry__loader_trace_queue(l, tb);
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
static void finish_grain(ferry_loader *l, ferry_batch *b, uint32_t count, uint32_t nfilled,
                         ferry__tbuf *tb)
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
        publish(l, b, nfilled, tb);
}

/* The batches ready and in flight, as a counter event of tb's. Under m. */
void ferry__loader_trace_queue(ferry_loader *l, ferry__tbuf *tb)
{
    uint64_t ready = l->nready, flight = l->undelivered > ready ? l->undelivered - ready : 0;
    ferry__trace_add(tb, FERRY__EV_QUEUE, FERRY__PH_COUNTER, ferry_now_ns(), 0, ready, flight, -1,
                     0);
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

/* Runs a grain claimed under m: the samples outside m, then, under m again, the
 * batch counted (and published when it was its last) and the time in w's
 * counters. Returns under m, with the grain's time in ns. */
uint64_t ferry__loader_run_grain(ferry_loader *l, worker *w, ferry_batch *b, uint32_t first,
                                 uint32_t count)
{
    l->busy_workers++;
    pthread_mutex_unlock(&l->m);
    /* samples cheaper than FERRY_TRACE_SAMPLE_NS are traced a grain at a time */
    w->trace_samples = !w->trace_ns || w->trace_ns >= FERRY_TRACE_SAMPLE_NS;
    uint64_t t0 = ferry_now_ns();
    memset(w->ctx.stage_ns, 0, sizeof w->ctx.stage_ns);
    if (w->tb)
        w->tb->mark = t0;
    hint_ahead(l, w, b, first);
    uint32_t nfilled;
    work_guarded(l, b, first, count, w, &nfilled);
    uint64_t dt = ferry_now_ns() - t0;
    if (w->tb && w->trace_samples) /* what no sample's slice holds (a replay, a fault) */
        ferry__trace_span(w->tb, FERRY__EV_READ, t0 + dt, b->number);
    else if (w->tb)
        ferry__trace_grain(w->tb, t0 + dt, w->ctx.stage_ns, b->number, first, count);
    if (w->tb) {
        uint64_t per = dt / (count ? count : 1);
        w->trace_ns = w->trace_ns ? (7 * w->trace_ns + per) / 8 : per + 1;
    }
    finish_grain(l, b, count, nfilled, w->tb);
    account(w, dt);
    l->truncated += w->ctx.truncated;
    w->ctx.truncated = 0;
    l->busy_workers--;
    return dt;
}

/* A worker's loop: a job of the pool, one per worker. */
void ferry__loader_worker_job(void *arg)
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
        ferry_batch *b = l->started && !atomic_load(&l->cancelled)
                             ? ferry__loader_claim(l, &first, &count)
                             : NULL;
        if (!b) {
            uint64_t t0 = ferry_now_ns();
            if (!polled && l->started && !atomic_load(&l->cancelled) &&
                ferry__loader_cheap_batches(l)) {
                polled = true;
                ferry__loader_poll_unlocked(l, &l->released, atomic_load(&l->released));
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
        uint64_t per = ferry__loader_run_grain(l, w, b, first, count) / (count ? count : 1);
        l->ns_per_sample = l->ns_per_sample ? (7 * l->ns_per_sample + per) / 8 : per + 1;
        if (l->busy_workers == 0)
            pthread_cond_broadcast(&l->ready_cv);
    }
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        ferry__loader_destroy(l); /* free returned without this worker, and no batch is held */
}
