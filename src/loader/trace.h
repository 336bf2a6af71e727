/*
 * Private to src/loader: the loader's trace (ferry_loader_opts.trace, FERRY_TRACE).
 *
 * Recording: every thread that works for a loader (each worker, and the consumer,
 * which also runs the work itself when num_workers is 0) owns one fixed-size
 * buffer of events and appends to it with no lock: the index is published with a
 * release store, so a reader sees whole events. A full buffer drops what comes
 * next and counts it. The loader holds a NULL trace when tracing is off, so the
 * cost then is one branch at each place that would record.
 *
 * Times are nanoseconds of one monotonic clock (ferry_now_ns) from the trace's
 * start; the wall-clock time of that start goes in the file's metadata.
 *
 * Writing: Chrome trace-event JSON (Perfetto, chrome://tracing, ferry report):
 * one pid per rank, one tid per thread ("consumer" is tid 0, worker k is tid
 * k + 1), complete slices ("ph":"X") named after the stats' stages (a sample's,
 * or a grain's where samples are cheaper than FERRY_TRACE_SAMPLE_NS), counters
 * ("ph":"C") of the batches ready and in flight, instants ("ph":"i") for
 * errors and skipped samples.
 */
#ifndef FERRY_LOADER_TRACE_H
#define FERRY_LOADER_TRACE_H

#include "ferry/dataset.h" /* ferry_stage */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Events per trace when nothing else is said (40 bytes each, shared among the
 * threads' buffers; pages never written are never touched). A million events
 * is a few seconds of a fast loader sample by sample, and a report of them is
 * still quick. */
#define FERRY_TRACE_CAP_DEFAULT (1u << 20)
/* Events per thread at the least, however many threads share the cap. */
#define FERRY_TRACE_CAP_MIN 4096u
/* Samples that take less than this (the loader's moving average) are traced a
 * grain at a time: a sample's slices cost a clock read and a few stores, 5% of
 * a 2 µs sample but as much as a 50 ns one. */
#define FERRY_TRACE_SAMPLE_NS 2000u

/* The events' names: the stages first, in ferry_stage's order. */
enum {
    FERRY__EV_READ = 0,
    FERRY__EV_DECODE,
    FERRY__EV_TRANSFORM,
    FERRY__EV_WRITE,
    FERRY__EV_WAIT,  /* the consumer waiting in ferry_loader_next */
    FERRY__EV_QUEUE, /* counter: batches ready and in flight */
    FERRY__EV_ERROR, /* instant: a failed sample, or next() returning an error */
    FERRY__EV_SKIP,  /* instant: a bad sample skipped */
    FERRY__EV_HINTS, /* read: a grain's sampler positions and read-ahead hints */
    FERRY__EV_NAMES
};
/* PH_GRAIN: a slice of a grain's samples (index = how many, slot = the first). */
enum { FERRY__PH_SLICE = 0, FERRY__PH_COUNTER, FERRY__PH_INSTANT, FERRY__PH_GRAIN };

/* One event. Slices: index, batch and slot of the sample (slot -1: not a
 * sample's); counters: index = ready, batch = in flight; instants: the
 * sample's index, batch and slot, and rc the status. */
typedef struct ferry__tev {
    uint64_t ts, dur;
    uint64_t index, batch;
    int32_t slot;
    int16_t rc;
    uint8_t name, ph;
} ferry__tev;

typedef struct ferry__tbuf {
    ferry__tev *ev;
    _Atomic uint32_t n;
    uint32_t cap;
    uint64_t dropped; /* written by the owner only; read once it has stopped */
    uint64_t mark;    /* a worker's: where its slices of the grain in hand end */
} ferry__tbuf;

typedef struct ferry__trace ferry__trace;

/* A trace to be written to path, with a buffer for the consumer and one per
 * worker; cap events in all (0: the default; a test's small cap shows the
 * drops). 0 or FERRY_ENOMEM / FERRY_EIO (the file cannot be created). */
int ferry__trace_create(ferry__trace **out, const char *path, uint32_t nworkers, uint64_t cap,
                        int64_t rank);
/* The buffer of the consumer (-1) or of worker w. */
ferry__tbuf *ferry__trace_buf(ferry__trace *t, int w);
/* Writes the file, once: later calls do nothing. 0, or FERRY_EIO with the
 * thread's message naming the file. */
int ferry__trace_write(ferry__trace *t);
/* Frees it (unwritten events are lost). NULL: no-op. */
void ferry__trace_free(ferry__trace *t);

/* The trace ferry_loader_create makes: to opts_path when it is set and not "",
 * else to FERRY_TRACE's file when that is set (the n-th loader of the process
 * writing FILE.n.json for FILE.json, n from 1, and, if it is still alive then,
 * when the process exits), else none (*out NULL). The file is created now, so a
 * path that cannot be written fails the loader's creation: FERRY_EIO naming it. */
int ferry__trace_open(ferry__trace **out, const char *opts_path, uint32_t nworkers, int64_t rank);

/* Appends one event; the thread that owns b only. */
static inline void ferry__trace_add(ferry__tbuf *b, uint8_t name, uint8_t ph, uint64_t ts,
                                    uint64_t dur, uint64_t index, uint64_t batch, int32_t slot,
                                    int rc)
{
    uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    if (n >= b->cap) {
        b->dropped++;
        return;
    }
    b->ev[n] = (ferry__tev){ts, dur, index, batch, slot, (int16_t)rc, name, ph};
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

/* True when b has no room left: a sample is then counted as dropped with no
 * clock read. */
static inline bool ferry__trace_full(ferry__tbuf *b)
{
    if (atomic_load_explicit(&b->n, memory_order_relaxed) < b->cap)
        return false;
    b->dropped++;
    return true;
}

/* A sample that ran from b->mark to `end`, the dataset having claimed claimed[s]
 * of it for each stage: its slices, the unclaimed time as READ first, then the
 * other stages in order. Moves the mark to end. */
void ferry__trace_sample(ferry__tbuf *b, uint64_t end, const uint64_t *claimed, uint64_t index,
                         uint64_t batch, int32_t slot);
/* A grain of cheap samples that ran from b->mark to end, claimed[s] of it for
 * each stage: its slices as ferry__trace_sample's, for the grain's count samples
 * from slot first. */
void ferry__trace_grain(ferry__tbuf *b, uint64_t end, const uint64_t *claimed, uint64_t batch,
                        uint32_t first, uint32_t count);
/* The rest of a grain, from the mark to end, as a slice of the given name (not
 * a sample's); nothing when it is empty. Moves the mark to end. */
void ferry__trace_span(ferry__tbuf *b, uint8_t name, uint64_t end, uint64_t batch);

#endif
