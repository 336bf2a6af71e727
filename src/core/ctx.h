/*
 * The per-call context of a worker (ferry_ctx in ferry/sample.h): who calls,
 * scratch memory, stage times. Below the formats, the image pipeline and the
 * datasets, which all take scratch from it (core/sample.c).
 */
#ifndef FERRY_CORE_CTX_H
#define FERRY_CORE_CTX_H

#include "ferry/sample.h"
#include "internal.h"

#define FERRY__CTX_SLOTS 4

struct ferry_ctx {
    uint32_t worker;
    uint64_t seed, epoch;
    /* slot 0 is ferry_ctx_scratch; decorators that call an inner dataset use the
     * others (ferry__ctx_scratch), so the two never share a buffer */
    void *scratch[FERRY__CTX_SLOTS];
    size_t scratch_cap[FERRY__CTX_SLOTS];
    uint64_t stage_ns[FERRY_STAGE_COUNT]; /* claimed by the dataset during a call */
    uint64_t truncated; /* samples cut to fit (ferry_ctx_count_truncated), not yet counted */
    /* the loader's work generation and the one this call's work belongs to: when
     * they differ the work was dropped, and a long call (a shuffle buffer being
     * filled) may stop early with FERRY_ECANCELED */
    const atomic_ullong *gen_now;
    uint64_t gen;
};

/* True when the work this call does was dropped (the loader started again). */
static inline bool ferry__ctx_dropped(const ferry_ctx *c)
{
    return c && c->gen_now && atomic_load_explicit(c->gen_now, memory_order_relaxed) != c->gen;
}

void ferry__ctx_init(ferry_ctx *c, uint32_t worker, uint64_t seed, uint64_t epoch);
void ferry__ctx_release(ferry_ctx *c);
/* Scratch slot `slot` (0 .. FERRY__CTX_SLOTS-1) of at least n bytes, as
 * ferry_ctx_scratch (which is slot 0). */
void *ferry__ctx_scratch(ferry_ctx *c, int slot, size_t n);

#endif
