/*
 * What the stand-in CUDA driver (fake_cuda.c) counts, as the tests read it
 * through fake_cuda_get and fake_cuda_sim_get.
 */
#ifndef FERRY_TEST_FAKE_CUDA_H
#define FERRY_TEST_FAKE_CUDA_H

#include <stdint.h>

typedef struct fake_cuda_state {
    int devices;        /* what cuDeviceGetCount reports */
    int init_result;    /* what cuInit returns */
    long fail_register; /* the n-th cuMemHostRegister from now (1-based) fails; 0 = none */
    /* counters */
    long inits, registers, unregisters, live, errors, ctx_refs, max_live;
    uint64_t live_bytes;
} fake_cuda_state;

typedef struct fake_cuda_sim {
    long query_steps;
    long fail_alloc; /* the n-th cuMemAlloc from now (1-based) fails; 0 = none */
    long allocs, streams_live, events_live, allocs_live, copies, copies_unpinned, host_overwritten,
        reads, waits, sim_errors, max_allocs;
    uint64_t alloc_bytes;
} fake_cuda_sim;

#endif
