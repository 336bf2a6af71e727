/*
 * A bounded thread pool: one mutex, two condition variables (work queued, room in
 * the queue), after zstd's lib/common/pool.c; and a parallel loop on it.
 */
#include "internal.h"

typedef struct {
    ferry__job_fn fn;
    void *arg;
} job;

struct ferry__pool {
    pthread_mutex_t m;
    pthread_cond_t has_job;  /* a job was queued, or shutdown */
    pthread_cond_t has_room; /* a job was taken, or one finished */
    pthread_cond_t exited;   /* a thread left (monotonic clock, for timed frees) */
    job *ring;
    size_t cap, head, count;
    unsigned threads, started, running;
    unsigned live; /* threads started and not yet out of pool_main */
    bool shutdown;
    bool orphaned; /* freed while threads were still in jobs: the last one out frees */
    ferry__thread *tids;
};

static void release(ferry__pool *p)
{
    pthread_mutex_destroy(&p->m);
    pthread_cond_destroy(&p->has_job);
    pthread_cond_destroy(&p->has_room);
    pthread_cond_destroy(&p->exited);
    ferry__free(p->ring);
    ferry__free(p->tids);
    ferry__free(p);
}

static void *pool_main(void *arg)
{
    ferry__pool *p = arg;
    pthread_mutex_lock(&p->m);
    for (;;) {
        while (p->count == 0 && !p->shutdown)
            pthread_cond_wait(&p->has_job, &p->m);
        if (p->count == 0 && p->shutdown)
            break;
        job j = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        p->running++;
        pthread_cond_broadcast(&p->has_room);
        pthread_mutex_unlock(&p->m);
        j.fn(j.arg);
        pthread_mutex_lock(&p->m);
        p->running--;
        pthread_cond_broadcast(&p->has_room);
    }
    bool last = --p->live == 0 && p->orphaned;
    pthread_cond_broadcast(&p->exited);
    pthread_mutex_unlock(&p->m);
    if (last)
        release(p); /* nobody else holds p: the pool was freed without this thread */
    return NULL;
}

int ferry__pool_create(ferry__pool **out, unsigned threads, size_t queue_size)
{
    int rc = 0;
    *out = NULL;
    if (threads == 0 || threads > 4096 || queue_size == 0 || queue_size > (1u << 24))
        return ferry__err(FERRY_EINVAL,
                          "pool: threads %u must be in [1, 4096] and queue %zu in "
                          "[1, 16777216]",
                          threads, queue_size);
    ferry__pool *p = ferry__calloc(1, sizeof *p);
    if (!p)
        return ferry__err(FERRY_ENOMEM, "pool: out of memory");
    pthread_mutex_init(&p->m, NULL);
    pthread_cond_init(&p->has_job, NULL);
    pthread_cond_init(&p->has_room, NULL);
    ferry__cond_init(&p->exited);
    p->cap = queue_size;
    p->ring = ferry__calloc(queue_size, sizeof *p->ring);
    p->tids = ferry__calloc(threads, sizeof *p->tids);
    if (!p->ring || !p->tids)
        FERRY_FAIL(FERRY_ENOMEM, "pool: out of memory");
    for (p->started = 0; p->started < threads; p->started++) {
        pthread_mutex_lock(&p->m);
        p->live++;
        pthread_mutex_unlock(&p->m);
        rc = ferry__thread_start(&p->tids[p->started], pool_main, p);
        if (rc < 0) {
            pthread_mutex_lock(&p->m);
            p->live--;
            pthread_mutex_unlock(&p->m);
            goto cleanup;
        }
    }
    p->threads = threads;
    *out = p;
    return 0;
cleanup:
    ferry__pool_free(p);
    return rc;
}

int ferry__pool_add(ferry__pool *p, ferry__job_fn fn, void *arg)
{
    pthread_mutex_lock(&p->m);
    while (p->count == p->cap && !p->shutdown)
        pthread_cond_wait(&p->has_room, &p->m);
    if (p->shutdown) {
        pthread_mutex_unlock(&p->m);
        return ferry__err(FERRY_ECANCELED, "pool: shut down");
    }
    p->ring[(p->head + p->count) % p->cap] = (job){fn, arg};
    p->count++;
    pthread_cond_signal(&p->has_job);
    pthread_mutex_unlock(&p->m);
    return 0;
}

void ferry__pool_wait(ferry__pool *p)
{
    pthread_mutex_lock(&p->m);
    while (p->count || p->running)
        pthread_cond_wait(&p->has_room, &p->m);
    pthread_mutex_unlock(&p->m);
}

unsigned ferry__pool_threads(const ferry__pool *p)
{
    return p->threads;
}

void ferry__pool_free(ferry__pool *p)
{
    ferry__pool_free_within(p, 0);
}

unsigned ferry__pool_free_within(ferry__pool *p, uint64_t deadline_ns)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->m);
    p->shutdown = true;
    pthread_cond_broadcast(&p->has_job);
    pthread_cond_broadcast(&p->has_room);
    while (p->live && deadline_ns) {
        if (!ferry__cond_wait_until(&p->exited, &p->m, deadline_ns))
            break;
    }
    unsigned left = deadline_ns ? p->live : 0;
    if (left) {
        /* Threads still in a job: let them go. Each was started joinable;
         * detached, its resources go when it ends (or now, for those that have). */
        for (unsigned i = 0; i < p->started; i++)
            pthread_detach(p->tids[i].t);
        p->orphaned = true;
        pthread_mutex_unlock(&p->m);
        return left;
    }
    pthread_mutex_unlock(&p->m);
    for (unsigned i = 0; i < p->started; i++)
        ferry__thread_join(&p->tids[i]);
    release(p);
    return 0;
}

/* ---- A parallel loop ---- */

typedef struct loop {
    size_t n;
    atomic_size_t next;  /* the next i to take */
    atomic_uint workers; /* worker numbers handed out */
    atomic_bool failed;  /* the first to set it keeps its code and message */
    int rc;
    char msg[FERRY_ERRMSG_MAX];
    ferry__for_fn fn;
    void *arg;
} loop;

static void loop_main(void *arg)
{
    loop *l = arg;
    unsigned worker = atomic_fetch_add(&l->workers, 1);
    while (!atomic_load_explicit(&l->failed, memory_order_relaxed)) {
        size_t i = atomic_fetch_add(&l->next, 1);
        if (i >= l->n)
            break;
        int rc = l->fn(l->arg, i, worker);
        if (rc < 0 && !atomic_exchange(&l->failed, true)) {
            l->rc = rc;
            ferry__err_copy(l->msg);
        }
    }
}

int ferry__parallel_for(size_t n, unsigned threads, ferry__for_fn fn, void *arg)
{
    loop l = {.n = n, .fn = fn, .arg = arg};
    if ((size_t)threads > n)
        threads = (unsigned)n;
    ferry__pool *p = NULL;
    if (threads > 1 && ferry__pool_create(&p, threads - 1, threads - 1) == 0)
        for (unsigned t = 1; t < threads; t++)
            ferry__pool_add(p, loop_main, &l); /* the queue holds them all: never blocks */
    loop_main(&l);
    ferry__pool_free(p); /* runs what is queued, then joins: l.rc and l.msg are final */
    return l.rc < 0 ? ferry__err(l.rc, "%s", l.msg) : 0;
}
