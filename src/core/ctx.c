/*
 * The worker context: who calls, scratch memory that grows and is kept, and the
 * time a dataset claims per stage.
 */
#include "ctx.h"

#include <string.h>

void ferry__ctx_init(ferry_ctx *c, uint32_t worker, uint64_t seed, uint64_t epoch)
{
    memset(c, 0, sizeof *c);
    c->worker = worker;
    c->seed = seed;
    c->epoch = epoch;
}

void ferry__ctx_release(ferry_ctx *c)
{
    for (int i = 0; i < FERRY__CTX_SLOTS; i++) {
        ferry__aligned_free(c->scratch[i]);
        c->scratch[i] = NULL;
        c->scratch_cap[i] = 0;
    }
}

uint32_t ferry_ctx_worker(const ferry_ctx *c)
{
    return c->worker;
}

uint64_t ferry_ctx_seed(const ferry_ctx *c)
{
    return c->seed;
}

uint64_t ferry_ctx_epoch(const ferry_ctx *c)
{
    return c->epoch;
}

void ferry_ctx_rng(const ferry_ctx *c, uint64_t index, ferry_rng *out)
{
    ferry_rng_init(out, c->seed, c->epoch, index);
}

void *ferry__ctx_scratch(ferry_ctx *c, int slot, size_t n)
{
    if (n <= c->scratch_cap[slot])
        return c->scratch[slot];
    size_t cap = c->scratch_cap[slot] ? c->scratch_cap[slot] : 4096;
    while (cap < n) {
        if (!ferry__mul_size(cap, 2, &cap)) {
            ferry__err(FERRY_ENOMEM, "scratch: %zu bytes is too large", n);
            return NULL;
        }
    }
    void *p = ferry__aligned_alloc(cap);
    if (!p) {
        ferry__err(FERRY_ENOMEM, "scratch: cannot allocate %zu bytes", cap);
        return NULL;
    }
    ferry__aligned_free(c->scratch[slot]);
    c->scratch[slot] = p;
    c->scratch_cap[slot] = cap;
    return p;
}

void *ferry_ctx_scratch(ferry_ctx *c, size_t n)
{
    return ferry__ctx_scratch(c, 0, n);
}

void ferry_ctx_stage_add(ferry_ctx *c, ferry_stage stage, uint64_t ns)
{
    if ((unsigned)stage < FERRY_STAGE_COUNT)
        c->stage_ns[stage] += ns;
}

void ferry_ctx_count_truncated(ferry_ctx *c, uint64_t n)
{
    c->truncated += n;
}

uint64_t ferry_ctx_truncated(const ferry_ctx *c)
{
    return c->truncated;
}

int ferry_ctx_create(ferry_ctx **out, uint64_t seed, uint64_t epoch)
{
    *out = ferry__calloc(1, sizeof **out);
    if (!*out)
        return ferry__err(FERRY_ENOMEM, "context: out of memory");
    ferry__ctx_init(*out, 0, seed, epoch);
    return 0;
}

void ferry_ctx_free(ferry_ctx *c)
{
    if (!c)
        return;
    ferry__ctx_release(c);
    ferry__free(c);
}
