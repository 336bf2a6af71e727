/*
 * A bounded blocking queue of pointers: a ring under one mutex, with "not empty"
 * and "not full" condition variables on the monotonic clock (for deadlines).
 *
 * A waiter polls for up to POLL_NS before it sleeps, and the other side signals
 * only when someone sleeps: a sleep and wake-up costs tens of microseconds (more
 * on virtual machines whose idle cores halt), longer than a producer and a
 * consumer running at similar rates usually make each other wait.
 */
#include "internal.h"

#include <sched.h>

#define POLL_NS 50000u

struct ferry__queue {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    void **ring;
    size_t cap, head, count;
    atomic_size_t seen_count; /* count, for polling without the lock */
    unsigned sleeping_pop, sleeping_push;
    bool closed;
};

/* Polls (without the lock) until the count differs from `from`, the queue closes
 * or POLL_NS pass. Called and returns with the lock held. */
static void poll(ferry__queue *q, size_t from)
{
    uint64_t t0 = ferry_now_ns();
    pthread_mutex_unlock(&q->m);
    for (unsigned i = 1; atomic_load_explicit(&q->seen_count, memory_order_relaxed) == from; i++) {
        if ((i & 63) == 0) {
            if (ferry_now_ns() - t0 > POLL_NS)
                break;
            sched_yield();
        }
    }
    pthread_mutex_lock(&q->m);
}

int ferry__queue_create(ferry__queue **out, size_t capacity)
{
    *out = NULL;
    if (capacity == 0 || capacity > ((size_t)1 << 30))
        return ferry__err(FERRY_EINVAL, "queue: capacity %zu is outside [1, 2^30]", capacity);
    ferry__queue *q = ferry__calloc(1, sizeof *q);
    if (!q)
        return ferry__err(FERRY_ENOMEM, "queue: out of memory");
    q->ring = ferry__calloc(capacity, sizeof *q->ring);
    if (!q->ring) {
        ferry__free(q);
        return ferry__err(FERRY_ENOMEM, "queue: out of memory");
    }
    q->cap = capacity;
    pthread_mutex_init(&q->m, NULL);
    ferry__cond_init(&q->not_empty);
    ferry__cond_init(&q->not_full);
    *out = q;
    return 0;
}

void ferry__queue_free(ferry__queue *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->m);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    ferry__free(q->ring);
    ferry__free(q);
}

int ferry__queue_push(ferry__queue *q, void *item, uint64_t deadline_ns)
{
    int rc = 0;
    bool polled = false;
    pthread_mutex_lock(&q->m);
    while (q->count == q->cap && !q->closed) {
        if (!polled) {
            polled = true;
            poll(q, q->count);
            continue;
        }
        q->sleeping_push++;
        bool woke = ferry__cond_wait_until(&q->not_full, &q->m, deadline_ns);
        q->sleeping_push--;
        if (!woke && q->count == q->cap && !q->closed) {
            rc = ferry__err(FERRY_ETIMEDOUT, "queue: push timed out");
            goto done;
        }
    }
    if (q->closed) {
        rc = ferry__err(FERRY_ECANCELED, "queue: closed");
        goto done;
    }
    q->ring[(q->head + q->count) % q->cap] = item;
    q->count++;
    atomic_store_explicit(&q->seen_count, q->count, memory_order_relaxed);
    if (q->sleeping_pop)
        pthread_cond_signal(&q->not_empty);
done:
    pthread_mutex_unlock(&q->m);
    return rc;
}

int ferry__queue_pop(ferry__queue *q, void **item, uint64_t deadline_ns)
{
    int rc = 0;
    bool polled = false;
    pthread_mutex_lock(&q->m);
    while (q->count == 0 && !q->closed) {
        if (!polled) {
            polled = true;
            poll(q, 0);
            continue;
        }
        q->sleeping_pop++;
        bool woke = ferry__cond_wait_until(&q->not_empty, &q->m, deadline_ns);
        q->sleeping_pop--;
        if (!woke && q->count == 0 && !q->closed) {
            rc = ferry__err(FERRY_ETIMEDOUT, "queue: pop timed out");
            goto done;
        }
    }
    if (q->count == 0) {
        rc = FERRY_END;
        goto done;
    }
    *item = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    atomic_store_explicit(&q->seen_count, q->count, memory_order_relaxed);
    if (q->sleeping_push)
        pthread_cond_signal(&q->not_full);
done:
    pthread_mutex_unlock(&q->m);
    return rc;
}

void ferry__queue_close(ferry__queue *q)
{
    pthread_mutex_lock(&q->m);
    q->closed = true;
    atomic_store(&q->seen_count, SIZE_MAX); /* ends any poll */
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->m);
}

size_t ferry__queue_size(ferry__queue *q)
{
    pthread_mutex_lock(&q->m);
    size_t n = q->count;
    pthread_mutex_unlock(&q->m);
    return n;
}
