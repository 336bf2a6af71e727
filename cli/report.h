/*
 * `ferry report`: a loader's trace (Chrome trace-event JSON, as
 * ferry_loader_opts.trace writes it) read into tracks of slices, and what the
 * report makes of it. report.c reads the file and prints the text summary;
 * report_html.c writes the page.
 */
#ifndef FERRY_CLI_REPORT_H
#define FERRY_CLI_REPORT_H

#include <stdint.h>
#include <stdio.h>

/* Slice kinds: the stats' stages, the consumer's wait, anything else. */
enum { RK_READ, RK_DECODE, RK_TRANSFORM, RK_WRITE, RK_WAIT, RK_OTHER, RK_COUNT };
/* Stage names, indexed by kind. */
extern const char *const report_kind_names[RK_COUNT];

typedef struct rslice {
    double ts, dur;        /* µs from the trace's first event */
    uint64_t index, batch; /* UINT64_MAX: none */
    int32_t slot;          /* -1: not a sample's; a grain's first */
    uint32_t track, kind;
    uint32_t grain; /* a grain's samples (too cheap to be traced one by one); 0: one */
} rslice;

typedef struct rtrack {
    int64_t pid, tid;
    char name[64];
    double total[RK_COUNT]; /* µs of each kind */
    uint64_t samples;
    uint32_t first, count; /* its slices, sorted by start, in the trace's array */
} rtrack;

typedef struct rcounter {
    double ts;
    int64_t pid;
    double ready, flight;
} rcounter;

typedef struct rinstant {
    double ts;
    uint32_t track;
    int error; /* 1 error, 0 skip */
    uint64_t index, batch;
} rinstant;

/* A sample: the slices of one (batch, slot) on one track, back to back. */
typedef struct rsample {
    double ts, dur, stage[RK_COUNT];
    uint64_t index, batch;
    int32_t slot;
    uint32_t track, grain;
} rsample;

#define REPORT_SLOWEST 20
#define REPORT_WAITS 10

typedef struct rtrace {
    const char *path;
    rslice *slices;
    size_t nslices, cap_slices;
    rtrack *tracks;
    uint32_t ntracks;
    rcounter *counters;
    size_t ncounters, cap_counters;
    rinstant *instants;
    size_t ninstants, cap_instants;
    uint64_t events, dropped; /* dropped: otherData's, when the trace says */
    double wall_start_us;     /* 0: not said */
    double span;              /* µs from the first event to the last end */
    /* what report.c works out */
    rsample slowest[REPORT_SLOWEST];
    uint32_t nslowest;
    rslice waits[REPORT_WAITS]; /* the longest, longest first */
    uint32_t nwaits_kept;
    uint64_t nwaits, nerrors, nskips;
    double wait_total, first_wait, first_wait_end; /* the earliest wait's length and end */
    double ready_mean, ready_max, empty_frac;      /* the queue, time-weighted */
} rtrace;

/* Writes the page. 0, or nonzero after printing why. */
int report_write_html(const rtrace *t, FILE *f);

#endif
