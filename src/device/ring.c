/*
 * Batches in device memory: fences and the ring of device buffers (ring.h says
 * what each promises). Every function makes the device's primary context current
 * around its driver calls (a push and a pop: cheap, and correct on any thread).
 */
#include "ring.h"
#include "cuda_internal.h"
#include "../core/internal.h"

#include <pthread.h>
#include <string.h>

/* ---- Fences ---- */

static int grow_events(ferry_device *dv, ferry__fence *f, uint32_t want)
{
    const driver *d = &dv->drv;
    if (want > f->cap) {
        void **ev = ferry__realloc(f->events, want * sizeof *ev);
        if (!ev)
            return ferry__err(FERRY_ENOMEM, "device: out of memory");
        f->events = ev;
        for (; f->cap < want; f->cap++) {
            CUresult r = d->cuEventCreate((CUevent *)&f->events[f->cap], CU_EVENT_DISABLE_TIMING);
            if (r != 0) {
                char buf[32];
                return ferry__err(FERRY_EIO, "cuda:%d: cuEventCreate: %s", dv->ordinal,
                                  ferry__cuda_err_name(d, r, buf, sizeof buf));
            }
        }
    }
    return 0;
}

int ferry__fence_record(ferry_device *dv, ferry__fence *f, void *const *streams, uint32_t n)
{
    const driver *d = &dv->drv;
    uint32_t want = n ? n : 1;
    int rc = 0;
    f->n = 0;
    if (ferry__cuda_push(dv) != 0)
        return ferry__err(FERRY_EIO, "cuda:%d: cannot make the device's context current",
                          dv->ordinal);
    if ((rc = grow_events(dv, f, want)) == 0)
        for (uint32_t i = 0; i < want; i++) {
            CUresult r = d->cuEventRecord(f->events[i], n ? (CUstream)streams[i] : NULL);
            if (r != 0) {
                char buf[32];
                rc = ferry__err(FERRY_EIO, "cuda:%d: cuEventRecord: %s", dv->ordinal,
                                ferry__cuda_err_name(d, r, buf, sizeof buf));
                break;
            }
            f->n = i + 1;
        }
    ferry__cuda_pop(dv);
    return rc;
}

bool ferry__fence_done(ferry_device *dv, ferry__fence *f)
{
    if (f->n == 0)
        return true;
    bool done = true;
    ferry__cuda_push(dv);
    for (uint32_t i = 0; i < f->n && done; i++)
        done = dv->drv.cuEventQuery(f->events[i]) != CUDA_ERROR_NOT_READY;
    ferry__cuda_pop(dv);
    if (done)
        f->n = 0;
    return done;
}

int ferry__fence_wait(ferry_device *dv, ferry__fence *f)
{
    int rc = 0;
    ferry__cuda_push(dv);
    for (uint32_t i = 0; i < f->n; i++) {
        CUresult r = dv->drv.cuEventSynchronize(f->events[i]);
        if (r != 0 && rc == 0) {
            char buf[32];
            rc = ferry__err(FERRY_EIO, "cuda:%d: cuEventSynchronize: %s", dv->ordinal,
                            ferry__cuda_err_name(&dv->drv, r, buf, sizeof buf));
        }
    }
    ferry__cuda_pop(dv);
    f->n = 0;
    return rc;
}

void ferry__fence_clear(ferry_device *dv, ferry__fence *f)
{
    if (f->cap) {
        ferry__cuda_push(dv);
        for (uint32_t i = 0; i < f->cap; i++)
            dv->drv.cuEventDestroy(f->events[i]);
        ferry__cuda_pop(dv);
    }
    ferry__free(f->events);
    memset(f, 0, sizeof *f);
}

/* ---- The ring ---- */

struct ferry__dbuf {
    ferry__dring *r;
    CUdeviceptr ptr;
    unsigned refs; /* under r->m */
    CUevent start, copied, handed;
    bool timing; /* a copy whose figures are not read back yet */
    size_t n;    /* its bytes */
    bool handed_set;
    ferry__fence fence; /* its last users' work, waited for before the next copy */
    void **streams;     /* the streams that used it while held */
    uint32_t nstreams, capstreams;
    ferry__dbuf *next_free;
};

struct ferry__dring {
    pthread_mutex_t m;
    ferry_device *dv;
    CUstream stream;
    size_t bytes;
    uint32_t max, n, live;
    bool owned; /* the owner has not called ferry__dring_free */
    ferry__dbuf **bufs;
    ferry__dbuf *free;
    ferry__dring_stats st;
};

#define NEED(field)                                                                                \
    do {                                                                                           \
        if (!dv->drv.field)                                                                        \
            return ferry__err(FERRY_ENOTSUP, "cuda:%d: the driver has no %s", dv->ordinal,         \
                              #field);                                                             \
    } while (0)

static int cu_fail(const ferry__dring *r, const char *call, CUresult res)
{
    char buf[32];
    return ferry__err(FERRY_EIO, "cuda:%d: %s: %s", r->dv->ordinal, call,
                      ferry__cuda_err_name(&r->dv->drv, res, buf, sizeof buf));
}

/* Frees a buffer and what it made (a partly made one too). Context current. */
static void dbuf_free(ferry__dring *r, ferry__dbuf *b)
{
    const driver *d = &r->dv->drv;
    if (b->ptr)
        d->cuMemFree(b->ptr);
    if (b->start)
        d->cuEventDestroy(b->start);
    if (b->copied)
        d->cuEventDestroy(b->copied);
    if (b->handed)
        d->cuEventDestroy(b->handed);
    ferry__fence_clear(r->dv, &b->fence);
    ferry__free(b->streams);
    ferry__free(b);
}

static void destroy(ferry__dring *r)
{
    const driver *d = &r->dv->drv;
    ferry__cuda_push(r->dv);
    if (r->stream)
        d->cuStreamSynchronize(r->stream);
    for (uint32_t i = 0; i < r->n; i++)
        dbuf_free(r, r->bufs[i]);
    if (r->stream)
        d->cuStreamDestroy(r->stream);
    ferry__cuda_pop(r->dv);
    ferry_device_free(r->dv);
    ferry__free(r->bufs);
    pthread_mutex_destroy(&r->m);
    ferry__free(r);
}

int ferry__dring_create(ferry__dring **out, ferry_device *dv, size_t bytes, uint32_t max)
{
    *out = NULL;
    NEED(cuStreamCreate);
    NEED(cuStreamDestroy);
    NEED(cuStreamWaitEvent);
    NEED(cuStreamSynchronize);
    NEED(cuEventCreate);
    NEED(cuEventDestroy);
    NEED(cuEventRecord);
    NEED(cuEventQuery);
    NEED(cuEventSynchronize);
    NEED(cuEventElapsedTime);
    NEED(cuMemAlloc);
    NEED(cuMemFree);
    NEED(cuMemcpyHtoDAsync);
    if (max == 0 || bytes == 0)
        return ferry__err(FERRY_EINVAL, "device: a ring of %u buffers of %zu bytes", max, bytes);
    ferry__dring *r = ferry__calloc(1, sizeof *r);
    if (!r || !(r->bufs = ferry__calloc(max, sizeof *r->bufs))) {
        ferry__free(r);
        return ferry__err(FERRY_ENOMEM, "device: out of memory");
    }
    pthread_mutex_init(&r->m, NULL);
    r->dv = dv;
    r->bytes = bytes;
    r->max = max;
    r->owned = true;
    int rc = 0;
    CUresult res;
    if (ferry__cuda_push(dv) != 0)
        rc =
            ferry__err(FERRY_EIO, "cuda:%d: cannot make the device's context current", dv->ordinal);
    else {
        if ((res = dv->drv.cuStreamCreate(&r->stream, CU_STREAM_NON_BLOCKING)) != 0)
            rc = cu_fail(r, "cuStreamCreate", res);
        ferry__cuda_pop(dv);
    }
    if (rc < 0) {
        r->dv = NULL; /* the caller keeps dv on failure */
        pthread_mutex_destroy(&r->m);
        ferry__free(r->bufs);
        ferry__free(r);
        return rc;
    }
    *out = r;
    return 0;
}

ferry_device *ferry__dring_device(const ferry__dring *r)
{
    return r->dv;
}

void *ferry__dring_stream(const ferry__dring *r)
{
    return r->stream;
}

void ferry__dring_free(ferry__dring *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->m);
    r->owned = false;
    bool last = r->live == 0;
    pthread_mutex_unlock(&r->m);
    if (last)
        destroy(r);
}

/* A new buffer: device memory and its events. Under m, context current. */
static int dbuf_new(ferry__dring *r, ferry__dbuf **out)
{
    const driver *d = &r->dv->drv;
    ferry__dbuf *b = ferry__calloc(1, sizeof *b);
    if (!b)
        return ferry__err(FERRY_ENOMEM, "device: out of memory");
    b->r = r;
    CUresult res;
    int rc = 0;
    if ((res = d->cuMemAlloc(&b->ptr, r->bytes)) != 0) {
        b->ptr = 0;
        rc = cu_fail(r, "cuMemAlloc", res);
        rc = ferry__err_prefix(rc, "a device buffer of %zu bytes (%u of at most %u)", r->bytes,
                               r->n + 1, r->max);
    } else if ((res = d->cuEventCreate(&b->start, CU_EVENT_DEFAULT)) != 0 ||
               (res = d->cuEventCreate(&b->copied, CU_EVENT_DEFAULT)) != 0 ||
               (res = d->cuEventCreate(&b->handed, CU_EVENT_DEFAULT)) != 0)
        rc = cu_fail(r, "cuEventCreate", res);
    if (rc < 0) {
        dbuf_free(r, b);
        return rc;
    }
    r->bufs[r->n++] = b;
    r->st.device_bytes += r->bytes;
    *out = b;
    return 0;
}

/* Reads a finished copy's events back into the figures. Under m, context current. */
static void harvest(ferry__dring *r, ferry__dbuf *b)
{
    const driver *d = &r->dv->drv;
    if (!b->timing || d->cuEventQuery(b->copied) == CUDA_ERROR_NOT_READY ||
        (b->handed_set && d->cuEventQuery(b->handed) == CUDA_ERROR_NOT_READY))
        return;
    float ms = 0, late = 0;
    if (d->cuEventElapsedTime(&ms, b->start, b->copied) == 0 && ms > 0) {
        r->st.copy_ns += (uint64_t)((double)ms * 1e6);
        if (b->handed_set && d->cuEventElapsedTime(&late, b->handed, b->copied) == 0 && late > 0)
            r->st.exposed_ns += (uint64_t)((double)(late < ms ? late : ms) * 1e6);
    }
    r->st.timed++;
    r->st.timed_bytes += b->n;
    b->timing = false;
}

int ferry__dring_copy(ferry__dring *r, const void *src, size_t n, ferry__dbuf **out)
{
    *out = NULL;
    if (n > r->bytes)
        return ferry__err(FERRY_EINVAL, "device: a copy of %zu bytes into buffers of %zu", n,
                          r->bytes);
    const driver *d = &r->dv->drv;
    int rc = 0;
    CUresult res;
    pthread_mutex_lock(&r->m);
    if (ferry__cuda_push(r->dv) != 0) {
        pthread_mutex_unlock(&r->m);
        return ferry__err(FERRY_EIO, "cuda:%d: cannot make the device's context current",
                          r->dv->ordinal);
    }
    ferry__dbuf *b = r->free;
    if (b)
        r->free = b->next_free;
    else if (r->n < r->max)
        rc = dbuf_new(r, &b);
    else
        rc = ferry__err(FERRY_ESTATE,
                        "cuda:%d: all %u device buffers hold batches or tensors still in use: "
                        "release batches (and drop their tensors) before asking for more, or "
                        "raise device_buffers",
                        r->dv->ordinal, r->max);
    if (rc == 0) {
        harvest(r, b);
        b->timing = false;
        /* the copy runs after the work its last users queued on it */
        for (uint32_t i = 0; i < b->fence.n && rc == 0; i++)
            if ((res = d->cuStreamWaitEvent(r->stream, b->fence.events[i], 0)) != 0)
                rc = cu_fail(r, "cuStreamWaitEvent", res);
        if (rc == 0 && (res = d->cuEventRecord(b->start, r->stream)) != 0)
            rc = cu_fail(r, "cuEventRecord", res);
        if (rc == 0 && (res = d->cuMemcpyHtoDAsync(b->ptr, src, n, r->stream)) != 0)
            rc = cu_fail(r, "cuMemcpyHtoDAsync", res);
        if (rc == 0 && (res = d->cuEventRecord(b->copied, r->stream)) != 0)
            rc = cu_fail(r, "cuEventRecord", res);
        if (rc < 0) {
            /* back to the ring as it was: its fence still holds */
            b->next_free = r->free;
            r->free = b;
        } else {
            b->fence.n = 0;
            b->refs = 1;
            b->nstreams = 0;
            b->handed_set = false;
            b->timing = true;
            b->n = n;
            r->live++;
            r->st.copies++;
            r->st.bytes += n;
            *out = b;
        }
    }
    ferry__cuda_pop(r->dv);
    pthread_mutex_unlock(&r->m);
    return rc;
}

bool ferry__dring_full(ferry__dring *r)
{
    pthread_mutex_lock(&r->m);
    bool full = !r->free && r->n == r->max;
    pthread_mutex_unlock(&r->m);
    return full;
}

uint64_t ferry__dbuf_ptr(const ferry__dbuf *b)
{
    return b->ptr;
}

void *ferry__dbuf_event(const ferry__dbuf *b)
{
    return b->copied;
}

bool ferry__dbuf_copied(ferry__dbuf *b)
{
    ferry_device *dv = b->r->dv;
    ferry__cuda_push(dv);
    bool done = dv->drv.cuEventQuery(b->copied) != CUDA_ERROR_NOT_READY;
    ferry__cuda_pop(dv);
    return done;
}

int ferry__dbuf_wait_copied(ferry__dbuf *b)
{
    ferry__dring *r = b->r;
    ferry__cuda_push(r->dv);
    CUresult res = r->dv->drv.cuEventSynchronize(b->copied);
    ferry__cuda_pop(r->dv);
    return res ? cu_fail(r, "cuEventSynchronize", res) : 0;
}

int ferry__dbuf_use(ferry__dbuf *b, void *stream)
{
    ferry__dring *r = b->r;
    const driver *d = &r->dv->drv;
    int rc = 0;
    CUresult res;
    pthread_mutex_lock(&r->m);
    uint32_t i = 0;
    while (i < b->nstreams && b->streams[i] != stream)
        i++;
    if (i == b->nstreams && b->nstreams == b->capstreams) {
        uint32_t cap = b->capstreams ? 2 * b->capstreams : 4;
        void **s = ferry__realloc(b->streams, cap * sizeof *s);
        if (!s)
            rc = ferry__err(FERRY_ENOMEM, "device: out of memory");
        else {
            b->streams = s;
            b->capstreams = cap;
        }
    }
    if (rc == 0) {
        ferry__cuda_push(r->dv);
        if (!b->handed_set) {
            /* where the consumer's stream stands when it first takes the batch: a copy
             * that ends after this point is copy time the consumer may wait for */
            b->handed_set = d->cuEventRecord(b->handed, (CUstream)stream) == 0;
        }
        if ((res = d->cuStreamWaitEvent((CUstream)stream, b->copied, 0)) != 0)
            rc = cu_fail(r, "cuStreamWaitEvent", res);
        else if (i == b->nstreams)
            b->streams[b->nstreams++] = stream;
        ferry__cuda_pop(r->dv);
    }
    pthread_mutex_unlock(&r->m);
    return rc;
}

void ferry__dbuf_ref(ferry__dbuf *b)
{
    pthread_mutex_lock(&b->r->m);
    b->refs++;
    pthread_mutex_unlock(&b->r->m);
}

void ferry__dbuf_unref(ferry__dbuf *b)
{
    ferry__dring *r = b->r;
    bool last = false;
    pthread_mutex_lock(&r->m);
    if (--b->refs == 0) {
        /* the buffer is reused only after what its users queued on it; if the
         * driver cannot record that, it is never reused (freed with the ring) */
        if (ferry__fence_record(r->dv, &b->fence, b->streams, b->nstreams) == 0) {
            b->next_free = r->free;
            r->free = b;
        } else
            ferry__err_clear();
        b->nstreams = 0;
        r->live--;
        last = !r->owned && r->live == 0;
    }
    pthread_mutex_unlock(&r->m);
    if (last)
        destroy(r);
}

void ferry__dbuf_release(void *owner)
{
    ferry__dbuf_unref(owner);
}

void ferry__dring_stats_get(ferry__dring *r, ferry__dring_stats *out)
{
    pthread_mutex_lock(&r->m);
    ferry__cuda_push(r->dv);
    for (uint32_t i = 0; i < r->n; i++)
        harvest(r, r->bufs[i]);
    ferry__cuda_pop(r->dv);
    *out = r->st;
    pthread_mutex_unlock(&r->m);
}
