/*
 * The consumer's side: waiting for the next batch (running the work itself when
 * there are no workers), handing it out, the timeout's message, the stats.
 */
#include "loader_internal.h"

#include <stdio.h>
#include <string.h>

#define TIMEOUT_LIST 8 /* outstanding samples named in a timeout message */

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
/* The batch take_ready would hand out next, or NULL. Under m. */
static ferry_batch *peek_ready(const ferry_loader *l)
{
    if (l->o.order == FERRY_ORDER_COMPLETION)
        return l->ready_count ? l->ready_q[l->ready_head] : NULL;
    if (l->next_deliver >= l->next_sched)
        return NULL;
    ferry_batch *b = l->by_number[l->next_deliver % l->nbufs];
    if (!b->ready || b->gen != atomic_load(&l->gen) || b->number != l->next_deliver)
        return NULL;
    return b;
}

static ferry_batch *take_ready(ferry_loader *l)
{
    ferry_batch *b = peek_ready(l);
    if (!b)
        return NULL;
    if (l->o.order == FERRY_ORDER_COMPLETION) {
        l->ready_head = (l->ready_head + 1) % l->nbufs;
        l->ready_count--;
    } else {
        l->next_deliver++;
    }
    return b;
}

/* Device: copies the next ready batch while the consumer works on the one just
 * handed out, if a device buffer is free. A failure is left for its delivery to
 * report. Under m. */
static void copy_ahead(ferry_loader *l)
{
    ferry_batch *b = peek_ready(l);
    if (b && !b->dbuf && b->out_size && !ferry__dring_full(l->ring) &&
        ferry__dring_copy(l->ring, b->blk->mem, l->blk_bytes, &b->dbuf) < 0) {
        b->dbuf = NULL;
        ferry__err_clear();
    }
}

/* Runs one grain on the caller's thread (num_workers == 0). Under m, returns under m.
 * Returns false when there was nothing to do. */
static bool work_inline(ferry_loader *l)
{
    uint32_t first, count;
    ferry_batch *b = ferry__loader_claim(l, &first, &count);
    if (b)
        ferry__loader_run_grain(l, &l->inline_worker, b, first, count);
    return b != NULL;
}

/* The consumer waited from t0 until now, for batch `number` (UINT64_MAX: none
 * came). Under m. */
static void waited(ferry_loader *l, uint64_t t0, uint64_t number)
{
    uint64_t now = ferry_now_ns();
    l->consumer_wait_ns += now - t0;
    if (l->trace)
        ferry__trace_add(l->inline_worker.tb, FERRY__EV_WAIT, FERRY__PH_SLICE, t0, now - t0,
                         UINT64_MAX, number, -1, 0);
}

/* Hands a ready batch out, or turns it into the epoch's error. Under m. */
static int deliver(ferry_loader *l, ferry_batch *b, ferry_batch **out)
{
    l->undelivered--;
    l->nready--;
    if (l->trace)
        ferry__loader_trace_queue(l, l->inline_worker.tb);
    ferry__loader_note_done(l, b);
    if (b->skipped) {
        if (l->o.on_error == FERRY_ON_ERROR_FAIL) {
            int rc = ferry__err(b->fail_rc, "%s", b->fail_msg);
            ferry__loader_recycle(l, b);
            ferry__loader_stop_epoch(l);
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
            ferry__loader_recycle(l, b);
            ferry__loader_stop_epoch(l);
            return rc;
        }
    }
    /* nothing in it (or, with drop_last, a short stream batch): the caller loops on */
    if (b->out_size == 0 || (l->st && l->o.drop_last && b->out_size < l->o.batch_size)) {
        ferry__loader_recycle(l, b);
        return FERRY_END;
    }
    if (l->ring && !b->dbuf) {
        /* the copy runs on ferry's stream; the consumer's stream waits for it
         * (ferry_batch_record_stream), the host does not */
        int rc = ferry__dring_copy(l->ring, b->blk->mem, l->blk_bytes, &b->dbuf);
        if (rc < 0) {
            b->dbuf = NULL;
            rc = ferry__err_prefix(rc, "device \"%s\"", l->device_name);
            ferry__loader_recycle(l, b);
            ferry__loader_stop_epoch(l);
            return rc;
        }
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
    if (!l->started && (rc = ferry__loader_start_locked(l, 0, 0)) < 0)
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
            ferry__loader_stop_epoch(l);
            break;
        }
        if (l->ring && ferry__dring_full(l->ring) && peek_ready(l) && !peek_ready(l)->dbuf) {
            ferry__dring_stats ds;
            ferry__dring_stats_get(l->ring, &ds);
            rc = ferry__err(FERRY_ESTATE,
                            "loader: all %llu device buffers hold batches or tensors not yet "
                            "released; release one (and drop its tensors) before asking for the "
                            "next, or raise device_buffers",
                            (unsigned long long)(ds.device_bytes / l->blk_bytes));
            break;
        }
        ferry_batch *b = take_ready(l);
        if (b) {
            rc = deliver(l, b, out);
            if (rc == 0 && l->ring)
                copy_ahead(l);
            if (rc == FERRY_END && !l->over) {
                /* an empty batch (every sample skipped) is progress: the timeout is for
                 * the wait on one batch, not on a run of empty ones */
                if (t0)
                    waited(l, t0, b->number);
                t0 = deadline = 0;
                continue;
            }
            break;
        }
        if (ferry__loader_sched_done(l) && l->undelivered == 0) {
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
        bool poll = !t0 && l->nworkers && ferry__loader_cheap_batches(l);
        if (!t0) {
            t0 = ferry_now_ns();
            /* a timeout too long to add to the clock is no timeout */
            if (l->o.timeout_ms && (uint64_t)l->o.timeout_ms < (UINT64_MAX - t0) / 1000000u)
                deadline = t0 + (uint64_t)l->o.timeout_ms * 1000000u;
        }
        if (poll) {
            ferry__loader_poll_unlocked(l, &l->published, atomic_load(&l->published));
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
                    waited(l, t0, b->number);
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
        waited(l, t0, *out ? (*out)->number : UINT64_MAX);
done:
    if (rc < 0 && l->trace)
        ferry__trace_add(l->inline_worker.tb, FERRY__EV_ERROR, FERRY__PH_INSTANT, ferry_now_ns(), 0,
                         UINT64_MAX, UINT64_MAX, -1, rc);
    pthread_mutex_unlock(&l->m);
    return ferry__loader_set_errmsg(l, rc);
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
    ferry_remote_stats r;
    ferry_remote_stats_get(&r);
    s->downloaded_bytes = r.downloaded_bytes;
    s->cache_hits = r.cache_hits;
    s->cache_misses = r.cache_misses;
    s->retries = r.retries;
    s->fetch_wait_ns = r.fetch_wait_ns;
    s->ranged_reads = r.ranged_reads;
    s->fetch_buffer_bytes = r.fetch_buffer_bytes;
    s->fetch_buffer_peak = r.fetch_buffer_peak;
    if (l->ring) {
        ferry__dring_stats ds;
        ferry__dring_stats_get(l->ring, &ds);
        s->copies = ds.copies;
        s->copy_bytes = ds.bytes;
        s->device_bytes = ds.device_bytes;
        s->copies_timed = ds.timed;
        s->copy_bytes_timed = ds.timed_bytes;
        s->copy_ns = ds.copy_ns;
        s->copy_exposed_ns = ds.exposed_ns;
    }
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
