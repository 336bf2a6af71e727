/*
 * A loader's life: create and free; starting and cancelling an epoch.
 */
#include "loader_internal.h"

#include <string.h>

/* How long ferry_loader_free waits for a worker stuck in a dataset callback (or
 * timeout_ms, when that is longer). */
#define FREE_GRACE_MS 5000

/* The trace's pid: the rank, from the options or else the environment. */
static int64_t trace_rank(const ferry_loader_opts *o)
{
    int64_t r = o->rank, w;
    if (r < 0 && ferry_dist_from_env(&r, &w) < 0) {
        ferry__err_clear();
        r = 0;
    }
    return r < 0 ? 0 : r;
}

/* A map-style loader with a world size takes its rank's share of the sampler's
 * order: the sampler is split in place (ferry_sampler_split; the loader sets the
 * epoch of the caller's sampler too), unless it is split already (a distributed
 * sampler), whose rank and world size it then keeps in l->o. */
static int split_for_ranks(ferry_loader *l)
{
    int64_t sr, sw;
    ferry_sampler_world(l->sampler, &sr, &sw);
    if (l->o.world_size < 0) {
        l->o.rank = sr;
        l->o.world_size = sw;
        return 0;
    }
    if (l->o.rank < 0) {
        int64_t w;
        int rc = ferry_dist_from_env(&l->o.rank, &w);
        if (rc < 0)
            return rc;
    }
    if (l->o.world_size < 1 || l->o.world_size > ((int64_t)1 << 31) || l->o.rank >= l->o.world_size)
        return ferry__err(FERRY_EINVAL,
                          "loader: rank %lld is outside [0, world_size %lld), or world_size is "
                          "outside [1, 2^31]",
                          (long long)l->o.rank, (long long)l->o.world_size);
    if (sw > 1) {
        if (sr != l->o.rank || sw != l->o.world_size)
            return ferry__err(FERRY_EINVAL,
                              "loader: the %s sampler is split for rank %lld of %lld already, but "
                              "rank and world_size are %lld of %lld: set them in one place "
                              "(leave the loader's at -1)",
                              ferry_sampler_kind(l->sampler), (long long)sr, (long long)sw,
                              (long long)l->o.rank, (long long)l->o.world_size);
        return 0;
    }
    return ferry_sampler_split(l->sampler, l->o.rank, l->o.world_size, l->o.drop_last);
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
    FERRY_TRY(ferry__loader_check_opts(&o));
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
        FERRY_TRY(split_for_ranks(l));
    } else {
        l->nshards = o.stream_shards;
        l->shards = ferry__calloc(l->nshards, sizeof *l->shards);
        if (!l->shards)
            FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
    }
    FERRY_TRY(ferry__loader_check_budget(l));
    FERRY_TRY(ferry__loader_open_device(l));
    FERRY_TRY(ferry__loader_alloc_buffers(l, l->o.prefetch));
    FERRY_TRY(ferry__loader_open_ring(l));
    FERRY_TRY(ferry__trace_open(&l->trace, o.trace, o.num_workers, trace_rank(&o)));
    l->o.trace = NULL; /* the caller's string is not kept */
    l->inline_worker.tb = ferry__trace_buf(l->trace, -1);
    ferry__ctx_init(&l->inline_worker.ctx, 0, o.seed, 0);
    bool hints = ds && ds->vt->hint, visits = ds && ds->in_order;
    if ((hints && !(l->inline_worker.hint = ferry__malloc(o.batch_size * sizeof(uint64_t)))) ||
        (visits && !(l->inline_worker.visit = ferry__malloc(o.batch_size * sizeof(uint32_t)))))
        FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
    /* Start epoch 0 now, before the workers exist: each finds work on its first
     * look instead of sleeping until the first ferry_loader_next wakes it. */
    pthread_mutex_lock(&l->m);
    rc = ferry__loader_start_locked(l, 0, 0);
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
            l->workers[i].tb = ferry__trace_buf(l->trace, (int)i);
            ferry__ctx_init(&l->workers[i].ctx, i, o.seed, 0);
            worker *w = &l->workers[i];
            if ((hints && !(w->hint = ferry__malloc(o.batch_size * sizeof(uint64_t)))) ||
                (visits && !(w->visit = ferry__malloc(o.batch_size * sizeof(uint32_t)))))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        }
        l->nworkers = o.num_workers;
        FERRY_TRY(ferry__pool_create(&l->pool, o.num_workers, o.num_workers));
        for (uint32_t i = 0; i < o.num_workers; i++)
            FERRY_TRY(ferry__pool_add(l->pool, ferry__loader_worker_job, &l->workers[i]));
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
    ferry__loader_stop_epoch(l);
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
    ferry__loader_close_shards(l);
    /* a worker still stuck writes no event past those already counted */
    int trc = ferry__trace_write(l->trace);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->m);
    if (last)
        ferry__loader_destroy(l);
    if (trc < 0 && !stuck)
        return trc;
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
        rc = ferry__loader_start_locked(l, epoch, first_batch);
    pthread_mutex_unlock(&l->m);
    return ferry__loader_set_errmsg(l, rc);
}

/* A map-style epoch's batches. With drop_last over a share of an order, no more
 * than the global order's whole global batches: a share padded to a multiple of
 * the world size (a distributed sampler without its own drop_last) could make
 * one more batch on some world sizes, of padding partly, where PyTorch would
 * hand it out; the global steps are then the same on every world size. */
uint64_t ferry__loader_epoch_batches(const ferry_loader *l)
{
    uint64_t nb = ferry_batch_count(ferry_sampler_len(l->sampler), l->o.batch_size, l->o.drop_last);
    if (l->o.drop_last && l->o.world_size > 1) {
        uint64_t whole = ferry_sampler_global_len(l->sampler) /
                         ((uint64_t)l->o.batch_size * (uint64_t)l->o.world_size);
        nb = whole < nb ? whole : nb;
    }
    return nb;
}

uint64_t ferry_loader_len(const ferry_loader *l)
{
    if (l->st)
        return UINT64_MAX;
    if (l->started)
        return l->nbatches;
    return ferry__loader_epoch_batches(l);
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
    ferry__loader_stop_epoch(l);
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->m);
}
