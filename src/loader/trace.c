/*
 * The loader's trace: the threads' event buffers and the Chrome trace-event JSON
 * they become. The design is in trace.h.
 */
#include "trace.h"
#include "../core/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ferry__trace {
    FILE *f;
    char *path;
    uint64_t t0;     /* ferry_now_ns at the start */
    int64_t wall_us; /* the wall clock then, µs since the epoch */
    int64_t rank;    /* the pid */
    uint32_t nbufs;  /* the consumer's, then one per worker */
    uint64_t cap;
    bool written, at_exit;
    ferry__trace *next_live; /* FERRY_TRACE traces not yet written, for exit */
    ferry__tev *mem;
    ferry__tbuf bufs[];
};

static const char *const names[FERRY__EV_NAMES] = {"read",  "decode", "transform", "write", "wait",
                                                   "queue", "error",  "skip",      "read"};

/* ---- FERRY_TRACE: traces still alive when the process exits ---- */

static pthread_mutex_t live_m = PTHREAD_MUTEX_INITIALIZER;
static ferry__trace *live;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static atomic_uint env_loaders;

static int write_file(ferry__trace *t);

static void write_live_at_exit(void)
{
    pthread_mutex_lock(&live_m);
    for (ferry__trace *t = live; t; t = t->next_live)
        if (write_file(t) < 0)
            ferry__err_clear();
    live = NULL;
    pthread_mutex_unlock(&live_m);
}

static void register_exit(void)
{
    atexit(write_live_at_exit);
}

/* Under live_m. */
static void unlink_live(ferry__trace *t)
{
    for (ferry__trace **p = &live; *p; p = &(*p)->next_live)
        if (*p == t) {
            *p = t->next_live;
            break;
        }
}

/* ---- Buffers ---- */

int ferry__trace_create(ferry__trace **out, const char *path, uint32_t nworkers, uint64_t cap,
                        int64_t rank)
{
    *out = NULL;
    uint32_t nbufs = nworkers + 1;
    ferry__trace *t = ferry__calloc(1, sizeof *t + (size_t)nbufs * sizeof t->bufs[0]);
    if (!t)
        return ferry__err(FERRY_ENOMEM, "trace: out of memory");
    t->nbufs = nbufs;
    t->rank = rank;
    t->cap = cap ? cap : FERRY_TRACE_CAP_DEFAULT;
    /* the consumer records a few events a batch, the workers a few a sample:
     * with workers, it takes a sixteenth */
    uint64_t first = nworkers ? t->cap / 16 : t->cap;
    uint64_t per = nworkers ? (t->cap - first) / nworkers : 0;
    if (!cap) {
        first = first < FERRY_TRACE_CAP_MIN ? FERRY_TRACE_CAP_MIN : first;
        per = nworkers && per < FERRY_TRACE_CAP_MIN ? FERRY_TRACE_CAP_MIN : per;
    }
    first = first > UINT32_MAX ? UINT32_MAX : first;
    per = per > UINT32_MAX ? UINT32_MAX : per;
    size_t n = strlen(path);
    t->path = ferry__malloc(n + 1);
    /* zeroed pages are mapped on first touch: a buffer costs what it holds */
    uint64_t all = first + per * nworkers;
    t->mem = all ? ferry__calloc((size_t)all, sizeof *t->mem) : NULL;
    if (!t->path || (all && !t->mem)) {
        ferry__trace_free(t);
        return ferry__err(FERRY_ENOMEM, "trace: out of memory for %" PRIu64 " events", all);
    }
    memcpy(t->path, path, n + 1);
    for (uint32_t i = 0; i < nbufs; i++) {
        t->bufs[i].ev = t->mem + (i ? first + (size_t)per * (i - 1) : 0);
        t->bufs[i].cap = (uint32_t)(i ? per : first);
    }
    t->f = fopen(path, "w");
    if (!t->f) {
        int e = errno;
        ferry__trace_free(t);
        return ferry__err(FERRY_EIO, "trace: cannot create %s: %s", path, strerror(e));
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    t->wall_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    t->t0 = ferry_now_ns();
    *out = t;
    return 0;
}

int ferry__trace_open(ferry__trace **out, const char *opts_path, uint32_t nworkers, int64_t rank)
{
    *out = NULL;
    if (opts_path && opts_path[0])
        return ferry__trace_create(out, opts_path, nworkers, 0, rank);
    const char *env = getenv("FERRY_TRACE");
    if (!env || !env[0])
        return 0;
    unsigned k = atomic_fetch_add(&env_loaders, 1);
    char path[4096];
    const char *dot = strrchr(env, '.'), *slash = strrchr(env, '/');
    if (k == 0)
        snprintf(path, sizeof path, "%s", env);
    else if (dot && (!slash || dot > slash) && dot != env)
        snprintf(path, sizeof path, "%.*s.%u%s", (int)(dot - env), env, k, dot);
    else
        snprintf(path, sizeof path, "%s.%u", env, k);
    int rc = ferry__trace_create(out, path, nworkers, 0, rank);
    if (rc < 0)
        return ferry__err_prefix(rc, "FERRY_TRACE");
    pthread_once(&exit_once, register_exit);
    pthread_mutex_lock(&live_m);
    (*out)->at_exit = true;
    (*out)->next_live = live;
    live = *out;
    pthread_mutex_unlock(&live_m);
    return 0;
}

ferry__tbuf *ferry__trace_buf(ferry__trace *t, int w)
{
    return t ? &t->bufs[w + 1] : NULL;
}

void ferry__trace_free(ferry__trace *t)
{
    if (!t)
        return;
    if (t->at_exit) {
        pthread_mutex_lock(&live_m);
        unlink_live(t);
        pthread_mutex_unlock(&live_m);
    }
    if (t->f)
        fclose(t->f);
    ferry__free(t->mem);
    ferry__free(t->path);
    ferry__free(t);
}

/* The slices of [b->mark, end): the unclaimed time as reading (as the stats
 * count it), then the stages the dataset claimed, in their order, so that they
 * add up to the time. */
static void stages(ferry__tbuf *b, uint8_t ph, uint64_t end, const uint64_t *claimed,
                   uint64_t index, uint64_t batch, int32_t slot)
{
    uint64_t at = b->mark, total = end > at ? end - at : 0, other = 0;
    for (int s = 1; s < FERRY_STAGE_COUNT; s++)
        other += claimed[s];
    uint64_t read = total > other ? total - other : 0;
    if (read || !other)
        ferry__trace_add(b, FERRY__EV_READ, ph, at, read, index, batch, slot, 0);
    at += read;
    for (int s = 1; s < FERRY_STAGE_COUNT; s++) {
        if (!claimed[s])
            continue;
        uint64_t d = claimed[s] < end - at ? claimed[s] : end - at;
        ferry__trace_add(b, (uint8_t)s, ph, at, d, index, batch, slot, 0);
        at += d;
    }
    b->mark = end;
}

void ferry__trace_sample(ferry__tbuf *b, uint64_t end, const uint64_t *claimed, uint64_t index,
                         uint64_t batch, int32_t slot)
{
    stages(b, FERRY__PH_SLICE, end, claimed, index, batch, slot);
}

void ferry__trace_grain(ferry__tbuf *b, uint64_t end, const uint64_t *claimed, uint64_t batch,
                        uint32_t first, uint32_t count)
{
    stages(b, FERRY__PH_GRAIN, end, claimed, count, batch, (int32_t)first);
}

void ferry__trace_span(ferry__tbuf *b, uint8_t name, uint64_t end, uint64_t batch)
{
    if (end > b->mark)
        ferry__trace_add(b, name, FERRY__PH_SLICE, b->mark, end - b->mark, UINT64_MAX, batch, -1,
                         0);
    b->mark = end;
}

/* ---- The file ---- */

/* µs from the start, to the ns */
static void put_us(FILE *f, const char *key, uint64_t ns)
{
    fprintf(f, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000, (unsigned)(ns % 1000));
}

static void put_event(FILE *f, const ferry__trace *t, uint32_t tid, const ferry__tev *e)
{
    uint64_t ts = e->ts > t->t0 ? e->ts - t->t0 : 0;
    bool slice = e->ph == FERRY__PH_SLICE || e->ph == FERRY__PH_GRAIN;
    const char *ph = slice ? "X" : e->ph == FERRY__PH_COUNTER ? "C" : "i";
    fprintf(f, ",\n{\"name\":\"%s\",\"ph\":\"%s\",\"pid\":%" PRId64, names[e->name], ph, t->rank);
    if (e->ph != FERRY__PH_COUNTER)
        fprintf(f, ",\"tid\":%u", tid);
    put_us(f, "ts", ts);
    if (slice)
        put_us(f, "dur", e->dur);
    if (e->ph == FERRY__PH_INSTANT)
        fputs(",\"s\":\"t\"", f);
    if (e->ph == FERRY__PH_COUNTER) {
        fprintf(f, ",\"args\":{\"ready\":%" PRIu64 ",\"in flight\":%" PRIu64 "}}", e->index,
                e->batch);
        return;
    }
    fputs(",\"args\":{", f);
    if (e->ph == FERRY__PH_GRAIN) {
        fprintf(f, "\"batch\":%" PRIu64 ",\"first\":%d,\"samples\":%" PRIu64 "}}", e->batch,
                e->slot, e->index);
        return;
    }
    const char *sep = "";
    if (e->batch != UINT64_MAX) {
        fprintf(f, "\"batch\":%" PRIu64, e->batch);
        sep = ",";
    }
    if (e->slot >= 0)
        fprintf(f, "%s\"slot\":%d", sep, e->slot), sep = ",";
    if (e->index != UINT64_MAX)
        fprintf(f, "%s\"index\":%" PRIu64, sep, e->index), sep = ",";
    if (e->name == FERRY__EV_HINTS)
        fprintf(f, "%s\"what\":\"hints\"", sep), sep = ",";
    if (e->ph == FERRY__PH_INSTANT)
        fprintf(f, "%s\"rc\":%d,\"error\":\"%s\"", sep, e->rc, ferry_strerror(e->rc));
    fputs("}}", f);
}

static int write_file(ferry__trace *t)
{
    if (t->written)
        return 0;
    t->written = true;
    FILE *f = t->f;
    uint64_t dropped = 0, events = 0;
    for (uint32_t i = 0; i < t->nbufs; i++) {
        dropped += t->bufs[i].dropped;
        events += atomic_load(&t->bufs[i].n);
    }
    fprintf(f,
            "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"ferry %s\","
            "\"clock\":\"monotonic\",\"wall_start_us\":%" PRId64 ",\"rank\":%" PRId64
            ",\"workers\":%u,\"events\":%" PRIu64 ",\"cap\":%" PRIu64 ",\"dropped\":%" PRIu64
            "},\n\"traceEvents\":[\n",
            ferry_version_string(), t->wall_us, t->rank, t->nbufs - 1, events, t->cap, dropped);
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%" PRId64
            ",\"args\":{\"name\":\"ferry rank %" PRId64 "\"}}",
            t->rank, t->rank);
    for (uint32_t i = 0; i < t->nbufs; i++) {
        fprintf(f,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%" PRId64
                ",\"tid\":%u,\"args\":{\"name\":\"",
                t->rank, i);
        if (i == 0)
            fputs("consumer\"}}", f);
        else
            fprintf(f, "worker %u\"}}", i - 1);
        fprintf(f,
                ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%" PRId64
                ",\"tid\":%u,\"args\":{\"sort_index\":%u}}",
                t->rank, i, i);
    }
    for (uint32_t i = 0; i < t->nbufs; i++) {
        const ferry__tbuf *b = &t->bufs[i];
        uint32_t n = atomic_load_explicit(&b->n, memory_order_acquire);
        for (uint32_t k = 0; k < n; k++)
            put_event(f, t, i, &b->ev[k]);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    int rc = fclose(f);
    t->f = NULL;
    if (bad || rc != 0)
        return ferry__err(FERRY_EIO, "trace: writing %s failed", t->path);
    return 0;
}

int ferry__trace_write(ferry__trace *t)
{
    if (!t)
        return 0;
    if (!t->at_exit)
        return write_file(t);
    /* the exit handler may be writing it on another thread */
    pthread_mutex_lock(&live_m);
    unlink_live(t);
    int rc = write_file(t);
    pthread_mutex_unlock(&live_m);
    return rc;
}
