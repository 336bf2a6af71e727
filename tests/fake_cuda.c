/*
 * A stand-in for the CUDA driver library (built as libcuda.so.1 in the test tree
 * and loaded through FERRY_CUDA_LIBRARY): the entry points the device layer
 * resolves, with the driver's documented contracts checked and every call
 * counted, so that the tests see what ferry asks of a driver on a machine with
 * no GPU. It checks what a real driver would refuse: registering with no current
 * context, a range that overlaps one already registered, unregistering what was
 * not registered, a context popped that was not pushed, memory that is not
 * readable and writable. Any such misuse is counted in `errors`.
 *
 * The tests steer it through fake_cuda_reset and read it through fake_cuda_get.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

enum {
    SUCCESS = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_NOT_INITIALIZED = 3,
    ERR_NO_DEVICE = 100,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_CONTEXT = 201,
    ERR_ALREADY_REGISTERED = 712,
    ERR_NOT_REGISTERED = 713,
};

typedef struct fake_cuda_state {
    int devices;        /* what cuDeviceGetCount reports */
    int init_result;    /* what cuInit returns */
    long fail_register; /* the n-th cuMemHostRegister from now (1-based) fails; 0 = none */
    /* counters */
    long inits, registers, unregisters, live, errors, ctx_refs, max_live;
    uint64_t live_bytes;
} fake_cuda_state;

#define MAX_RANGES 4096
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static fake_cuda_state st = {.devices = 1};
static struct {
    uintptr_t p;
    size_t n;
} ranges[MAX_RANGES];
static int nranges;
static int initialised;
static char ctx_token;              /* the primary context's handle */
static _Thread_local int ctx_depth; /* contexts pushed on this thread */

API void fake_cuda_reset(int devices, int init_result, long fail_register)
{
    pthread_mutex_lock(&m);
    long live = st.live;
    uint64_t bytes = st.live_bytes;
    long refs = st.ctx_refs;
    memset(&st, 0, sizeof st);
    st.devices = devices;
    st.init_result = init_result;
    st.fail_register = fail_register;
    st.live = live; /* what is registered stays registered */
    st.live_bytes = bytes;
    st.ctx_refs = refs;
    pthread_mutex_unlock(&m);
}

API void fake_cuda_get(fake_cuda_state *out)
{
    pthread_mutex_lock(&m);
    *out = st;
    pthread_mutex_unlock(&m);
}

/* Whether [p, p+n) lies inside one registered range. */
API int fake_cuda_is_registered(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    int found = 0;
    pthread_mutex_lock(&m);
    for (int i = 0; i < nranges && !found; i++)
        found = a >= ranges[i].p && a + n <= ranges[i].p + ranges[i].n;
    pthread_mutex_unlock(&m);
    return found;
}

static int misuse(int result)
{
    st.errors++;
    return result;
}

API int cuGetErrorName(int err, const char **name)
{
    switch (err) {
    case SUCCESS:
        *name = "CUDA_SUCCESS";
        return SUCCESS;
    case ERR_INVALID_VALUE:
        *name = "CUDA_ERROR_INVALID_VALUE";
        return SUCCESS;
    case ERR_OUT_OF_MEMORY:
        *name = "CUDA_ERROR_OUT_OF_MEMORY";
        return SUCCESS;
    case ERR_NOT_INITIALIZED:
        *name = "CUDA_ERROR_NOT_INITIALIZED";
        return SUCCESS;
    case ERR_NO_DEVICE:
        *name = "CUDA_ERROR_NO_DEVICE";
        return SUCCESS;
    case ERR_INVALID_DEVICE:
        *name = "CUDA_ERROR_INVALID_DEVICE";
        return SUCCESS;
    case ERR_INVALID_CONTEXT:
        *name = "CUDA_ERROR_INVALID_CONTEXT";
        return SUCCESS;
    case ERR_ALREADY_REGISTERED:
        *name = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
        return SUCCESS;
    case ERR_NOT_REGISTERED:
        *name = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
        return SUCCESS;
    }
    *name = NULL;
    return ERR_INVALID_VALUE;
}

API int cuInit(unsigned flags)
{
    pthread_mutex_lock(&m);
    st.inits++;
    int r = flags != 0 ? misuse(ERR_INVALID_VALUE) : st.init_result;
    if (r == SUCCESS)
        initialised = 1;
    pthread_mutex_unlock(&m);
    return r;
}

API int cuDriverGetVersion(int *v)
{
    *v = 13000;
    return SUCCESS;
}

API int cuDeviceGetCount(int *count)
{
    pthread_mutex_lock(&m);
    int r = initialised ? SUCCESS : misuse(ERR_NOT_INITIALIZED);
    *count = st.devices;
    pthread_mutex_unlock(&m);
    return r;
}

API int cuDeviceGet(int *dev, int ordinal)
{
    pthread_mutex_lock(&m);
    int r = !initialised                           ? misuse(ERR_NOT_INITIALIZED)
            : ordinal < 0 || ordinal >= st.devices ? misuse(ERR_INVALID_DEVICE)
                                                   : SUCCESS;
    *dev = ordinal;
    pthread_mutex_unlock(&m);
    return r;
}

API int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    pthread_mutex_lock(&m);
    int r = dev < 0 || dev >= st.devices ? misuse(ERR_INVALID_DEVICE) : SUCCESS;
    if (r == SUCCESS) {
        st.ctx_refs++;
        *ctx = &ctx_token;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuDevicePrimaryCtxRelease_v2(int dev)
{
    pthread_mutex_lock(&m);
    int r =
        dev < 0 || dev >= st.devices || st.ctx_refs <= 0 ? misuse(ERR_INVALID_CONTEXT) : SUCCESS;
    if (r == SUCCESS)
        st.ctx_refs--;
    pthread_mutex_unlock(&m);
    return r;
}

static long push_fail_at, pushes; /* the push_fail_at-th push from now fails */

API void fake_cuda_fail_push(long n)
{
    pthread_mutex_lock(&m);
    push_fail_at = n;
    pushes = 0;
    pthread_mutex_unlock(&m);
}

API int cuCtxPushCurrent_v2(void *ctx)
{
    pthread_mutex_lock(&m);
    int fail = push_fail_at && ++pushes == push_fail_at;
    pthread_mutex_unlock(&m);
    if (fail)
        return ERR_INVALID_CONTEXT; /* the driver's refusal, not a misuse */
    if (ctx != &ctx_token) {
        pthread_mutex_lock(&m);
        int r = misuse(ERR_INVALID_CONTEXT);
        pthread_mutex_unlock(&m);
        return r;
    }
    ctx_depth++;
    return SUCCESS;
}

API int cuCtxPopCurrent_v2(void **ctx)
{
    if (ctx_depth <= 0) {
        pthread_mutex_lock(&m);
        int r = misuse(ERR_INVALID_CONTEXT);
        pthread_mutex_unlock(&m);
        return r;
    }
    ctx_depth--;
    if (ctx)
        *ctx = &ctx_token;
    return SUCCESS;
}

API int cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
    if (ctx_depth <= 0 || !p || n == 0 || (flags & ~0x0fu)) {
        pthread_mutex_lock(&m);
        int r = misuse(ctx_depth <= 0 ? ERR_INVALID_CONTEXT : ERR_INVALID_VALUE);
        pthread_mutex_unlock(&m);
        return r;
    }
    /* the memory must be there: a driver touches and locks every page */
    volatile uint8_t *b = p;
    b[0] = b[0];
    b[n - 1] = b[n - 1];
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&m);
    st.registers++;
    int r = SUCCESS;
    if (st.fail_register && st.registers == st.fail_register)
        r = ERR_OUT_OF_MEMORY; /* the locked-memory limit, say */
    for (int i = 0; i < nranges && r == SUCCESS; i++)
        if (a < ranges[i].p + ranges[i].n && ranges[i].p < a + n)
            r = misuse(ERR_ALREADY_REGISTERED);
    if (r == SUCCESS && nranges == MAX_RANGES)
        r = misuse(ERR_OUT_OF_MEMORY);
    if (r == SUCCESS) {
        ranges[nranges].p = a;
        ranges[nranges++].n = n;
        st.live++;
        st.live_bytes += n;
        if (st.live > st.max_live)
            st.max_live = st.live;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuMemHostUnregister(void *p)
{
    pthread_mutex_lock(&m);
    int r = ctx_depth <= 0 ? misuse(ERR_INVALID_CONTEXT) : misuse(ERR_NOT_REGISTERED);
    if (ctx_depth > 0)
        for (int i = 0; i < nranges; i++)
            if (ranges[i].p == (uintptr_t)p) {
                st.errors--; /* not a misuse after all */
                st.unregisters++;
                st.live--;
                st.live_bytes -= ranges[i].n;
                ranges[i] = ranges[--nranges];
                r = SUCCESS;
                break;
            }
    pthread_mutex_unlock(&m);
    return r;
}

/* ---- Streams, events, device memory and copies ----
 * A deterministic model of the GPU's queues. Each stream (the legacy default
 * stream, NULL, included) is a FIFO of operations: a copy from host to device, an
 * event recorded, a wait for an event, and a stand-in kernel that reads device
 * memory (fake_cuda_read, for the tests). Nothing runs when it is queued: the
 * queues advance only when the tests call fake_cuda_progress, or a call must see
 * work done (cuEventSynchronize, cuStreamSynchronize; cuEventQuery advances the
 * queues by `query_steps` operations first, 0 = not at all). So a stand-in kernel
 * runs long after it was queued, and anything that reuses memory too early is
 * caught:
 *   - a copy checks, when it runs, that its host source still holds the bytes it
 *     held when the copy was queued (else `host_overwritten`: the host buffer was
 *     refilled before the copy read it);
 *   - a stand-in kernel hashes the device memory when it runs, and the test
 *     compares that with the batch it was given (a buffer copied into again before
 *     the kernel ran shows other bytes).
 * Time is a counter: a copy of n bytes takes n/1000 + 1 "ns", other operations 1,
 * so event timings come out positive and in order. */

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_READ };
#define ERR_NOT_READY 600
#define MAX_OPS 65536
#define MAX_STREAMS 64
#define MAX_EVENTS 4096
#define MAX_ALLOCS 1024

typedef struct fevent {
    int used;
    unsigned flags;
    unsigned long recorded, completed; /* generations: complete when equal */
    uint64_t time;
} fevent;

typedef struct fop {
    int kind;
    int stream;
    uintptr_t dst;
    const void *src;
    size_t n;
    uint64_t sum;
    int event;
    unsigned long gen;
    uint64_t *out;
} fop;

typedef struct fake_cuda_sim {
    long query_steps;
    long fail_alloc; /* the n-th cuMemAlloc from now (1-based) fails; 0 = none */
    long allocs, streams_live, events_live, allocs_live, copies, copies_unpinned, host_overwritten,
        reads, waits, sim_errors, max_allocs;
    uint64_t alloc_bytes;
} fake_cuda_sim;

static fake_cuda_sim sim;
static fevent events[MAX_EVENTS];
static int stream_used[MAX_STREAMS]; /* index 0: the legacy default stream */
static fop ops[MAX_OPS];
static int nops;
static uint64_t clock_ns;
static struct {
    uintptr_t p;
    size_t n;
} allocs[MAX_ALLOCS];

static uint64_t hash(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

API void fake_cuda_sim_fail_alloc(long n)
{
    pthread_mutex_lock(&m);
    sim.fail_alloc = n;
    sim.allocs = 0;
    pthread_mutex_unlock(&m);
}

API void fake_cuda_sim_reset(long query_steps)
{
    pthread_mutex_lock(&m);
    long s = sim.streams_live, e = sim.events_live, a = sim.allocs_live;
    uint64_t ab = sim.alloc_bytes;
    memset(&sim, 0, sizeof sim);
    sim.query_steps = query_steps;
    sim.streams_live = s;
    sim.events_live = e;
    sim.allocs_live = a;
    sim.alloc_bytes = ab;
    pthread_mutex_unlock(&m);
}

API void fake_cuda_sim_get(fake_cuda_sim *out)
{
    pthread_mutex_lock(&m);
    *out = sim;
    pthread_mutex_unlock(&m);
}

static int sim_misuse(int r)
{
    sim.sim_errors++;
    return r;
}

static int stream_index(void *s)
{
    if (!s)
        return 0;
    uintptr_t i = (uintptr_t)s - (uintptr_t)stream_used;
    if ((uintptr_t)s < (uintptr_t)stream_used || i % sizeof stream_used[0] ||
        i / sizeof stream_used[0] >= MAX_STREAMS || !stream_used[i / sizeof stream_used[0]])
        return -1;
    return (int)(i / sizeof stream_used[0]);
}

static int event_index(void *e)
{
    uintptr_t i = (uintptr_t)e - (uintptr_t)events;
    if ((uintptr_t)e < (uintptr_t)events || i % sizeof events[0] ||
        i / sizeof events[0] >= MAX_EVENTS || !events[i / sizeof events[0]].used)
        return -1;
    return (int)(i / sizeof events[0]);
}

static int find_alloc(uintptr_t p, size_t n)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && p >= allocs[i].p && p + n <= allocs[i].p + allocs[i].n)
            return i;
    return -1;
}

/* Whether op k can run now: it heads its stream's queue and, for a wait, the
 * event's generation it waits for has completed. Under m. */
static int runnable(int k)
{
    for (int j = 0; j < k; j++)
        if (ops[j].stream == ops[k].stream)
            return 0;
    if (ops[k].kind == OP_WAIT)
        return events[ops[k].event].completed >= ops[k].gen;
    return 1;
}

static void run_op(fop *o)
{
    switch (o->kind) {
    case OP_COPY:
        if (hash(o->src, o->n) != o->sum)
            sim.host_overwritten++;
        memcpy((void *)o->dst, o->src, o->n);
        clock_ns += o->n / 1000 + 1;
        break;
    case OP_RECORD:
        clock_ns++;
        if (events[o->event].completed < o->gen) {
            events[o->event].completed = o->gen;
            events[o->event].time = clock_ns;
        }
        break;
    case OP_WAIT:
        break;
    case OP_READ:
        *o->out = hash((const void *)o->dst, o->n);
        sim.reads++;
        clock_ns++;
        break;
    }
}

/* Runs up to n operations (the oldest runnable first); returns how many ran. Under m. */
static long progress_locked(long n)
{
    long ran = 0;
    while (ran < n) {
        int k = 0;
        while (k < nops && !runnable(k))
            k++;
        if (k == nops)
            break;
        fop o = ops[k];
        memmove(&ops[k], &ops[k + 1], (size_t)(nops - k - 1) * sizeof *ops);
        nops--;
        run_op(&o);
        ran++;
    }
    return ran;
}

/* Runs the head of stream si, first running what it waits for (only that: a sync
 * runs no unrelated work, as a real device may not have yet). Returns whether
 * anything ran. Under m. */
static int advance_stream(int si, int depth)
{
    int k = 0;
    while (k < nops && ops[k].stream != si)
        k++;
    if (k == nops || depth > MAX_STREAMS)
        return 0;
    if (ops[k].kind == OP_WAIT && events[ops[k].event].completed < ops[k].gen) {
        for (int j = 0; j < nops; j++)
            if (ops[j].kind == OP_RECORD && ops[j].event == ops[k].event &&
                ops[j].gen <= ops[k].gen)
                return advance_stream(ops[j].stream, depth + 1);
        return 0;
    }
    fop o = ops[k];
    memmove(&ops[k], &ops[k + 1], (size_t)(nops - k - 1) * sizeof *ops);
    nops--;
    run_op(&o);
    return 1;
}

/* The stream whose queue holds event ei's latest record, or -1. Under m. */
static int record_stream(int ei)
{
    for (int j = 0; j < nops; j++)
        if (ops[j].kind == OP_RECORD && ops[j].event == ei && ops[j].gen == events[ei].recorded)
            return ops[j].stream;
    return -1;
}

API long fake_cuda_progress(long n)
{
    pthread_mutex_lock(&m);
    long r = progress_locked(n);
    pthread_mutex_unlock(&m);
    return r;
}

static int enqueue(fop o)
{
    if (nops == MAX_OPS)
        return sim_misuse(ERR_OUT_OF_MEMORY);
    ops[nops++] = o;
    return SUCCESS;
}

/* A stand-in kernel on stream s that hashes n bytes of device memory at p into
 * *out when it runs. */
API int fake_cuda_read(void *s, unsigned long long p, size_t n, uint64_t *out)
{
    pthread_mutex_lock(&m);
    int si = stream_index(s), r;
    if (si < 0 || find_alloc((uintptr_t)p, n) < 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else
        r = enqueue((fop){.kind = OP_READ, .stream = si, .dst = (uintptr_t)p, .n = n, .out = out});
    pthread_mutex_unlock(&m);
    return r;
}

/* A stream of the tests' own, like a consumer's. */
API int cuStreamCreate(void **s, unsigned flags)
{
    pthread_mutex_lock(&m);
    int r = ERR_OUT_OF_MEMORY;
    if (ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_CONTEXT);
    else
        for (int i = 1; i < MAX_STREAMS; i++)
            if (!stream_used[i]) {
                stream_used[i] = 1;
                *s = &stream_used[i];
                sim.streams_live++;
                r = SUCCESS;
                break;
            }
    (void)flags;
    pthread_mutex_unlock(&m);
    return r;
}

API int cuStreamDestroy_v2(void *s)
{
    pthread_mutex_lock(&m);
    int si = stream_index(s), r = SUCCESS;
    if (si <= 0 || ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        /* the driver lets queued work finish: run this stream's queue */
        while (1) {
            int pending = 0;
            for (int k = 0; k < nops; k++)
                pending |= ops[k].stream == si;
            if (!pending || progress_locked(1) == 0)
                break;
        }
        stream_used[si] = 0;
        sim.streams_live--;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuStreamSynchronize(void *s)
{
    pthread_mutex_lock(&m);
    int si = stream_index(s), r = SUCCESS;
    if (si < 0 || ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else
        while (1) {
            int pending = 0;
            for (int k = 0; k < nops; k++)
                pending |= ops[k].stream == si;
            if (!pending)
                break;
            if (!advance_stream(si, 0)) {
                r = sim_misuse(ERR_INVALID_VALUE); /* waits that can never be met */
                break;
            }
        }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventCreate(void **e, unsigned flags)
{
    pthread_mutex_lock(&m);
    int r = ERR_OUT_OF_MEMORY;
    if (ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_CONTEXT);
    else
        for (int i = 0; i < MAX_EVENTS; i++)
            if (!events[i].used) {
                events[i] = (fevent){.used = 1, .flags = flags};
                *e = &events[i];
                sim.events_live++;
                r = SUCCESS;
                break;
            }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventDestroy_v2(void *e)
{
    pthread_mutex_lock(&m);
    int ei = event_index(e), r = SUCCESS;
    if (ei < 0 || ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        /* queued records and waits of it still happen (the driver keeps the event
         * until then): finish them */
        for (int k = 0; k < nops; k++)
            if (ops[k].event == ei && (ops[k].kind == OP_RECORD || ops[k].kind == OP_WAIT))
                while (events[ei].completed < ops[k].gen && progress_locked(1))
                    ;
        events[ei].used = 0;
        sim.events_live--;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventRecord(void *e, void *s)
{
    pthread_mutex_lock(&m);
    int ei = event_index(e), si = stream_index(s), r;
    if (ei < 0 || si < 0 || ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else
        r = enqueue(
            (fop){.kind = OP_RECORD, .stream = si, .event = ei, .gen = ++events[ei].recorded});
    pthread_mutex_unlock(&m);
    return r;
}

API int cuStreamWaitEvent(void *s, void *e, unsigned flags)
{
    pthread_mutex_lock(&m);
    int ei = event_index(e), si = stream_index(s), r;
    if (ei < 0 || si < 0 || ctx_depth <= 0 || flags)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        sim.waits++;
        /* the wait is for the event's most recent record at the time of the call */
        r = enqueue((fop){.kind = OP_WAIT, .stream = si, .event = ei, .gen = events[ei].recorded});
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventQuery(void *e)
{
    pthread_mutex_lock(&m);
    int ei = event_index(e), r;
    if (ei < 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        progress_locked(sim.query_steps);
        r = events[ei].completed >= events[ei].recorded ? SUCCESS : ERR_NOT_READY;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventSynchronize(void *e)
{
    pthread_mutex_lock(&m);
    int ei = event_index(e), r = SUCCESS;
    if (ei < 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else
        while (events[ei].completed < events[ei].recorded)
            if (record_stream(ei) < 0 || !advance_stream(record_stream(ei), 0)) {
                r = sim_misuse(ERR_INVALID_VALUE); /* it can never complete */
                break;
            }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuEventElapsedTime(float *ms, void *a, void *b)
{
    pthread_mutex_lock(&m);
    int ai = event_index(a), bi = event_index(b), r = SUCCESS;
    if (ai < 0 || bi < 0 || (events[ai].flags | events[bi].flags) & 0x02u)
        r = sim_misuse(ERR_INVALID_VALUE);
    else if (events[ai].completed < events[ai].recorded ||
             events[bi].completed < events[bi].recorded)
        r = ERR_NOT_READY;
    else if (!events[ai].recorded || !events[bi].recorded)
        r = sim_misuse(ERR_INVALID_VALUE);
    else
        *ms = (float)((double)events[bi].time - (double)events[ai].time) / 1e6f;
    pthread_mutex_unlock(&m);
    return r;
}

API int cuMemAlloc_v2(unsigned long long *p, size_t n)
{
    pthread_mutex_lock(&m);
    int r = ERR_OUT_OF_MEMORY;
    if (ctx_depth <= 0 || n == 0)
        r = sim_misuse(ctx_depth <= 0 ? ERR_INVALID_CONTEXT : ERR_INVALID_VALUE);
    else if (++sim.allocs == sim.fail_alloc)
        r = ERR_OUT_OF_MEMORY;
    else
        for (int i = 0; i < MAX_ALLOCS; i++)
            if (!allocs[i].p) {
                void *mem = malloc(n);
                if (!mem)
                    break;
                memset(mem, 0xA5, n); /* device memory is not zeroed */
                allocs[i].p = (uintptr_t)mem;
                allocs[i].n = n;
                *p = (uintptr_t)mem;
                sim.allocs_live++;
                sim.alloc_bytes += n;
                if (sim.allocs_live > sim.max_allocs)
                    sim.max_allocs = sim.allocs_live;
                r = SUCCESS;
                break;
            }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuMemFree_v2(unsigned long long p)
{
    pthread_mutex_lock(&m);
    int r = SUCCESS, i = -1;
    for (int j = 0; j < MAX_ALLOCS; j++)
        if (allocs[j].p && allocs[j].p == (uintptr_t)p)
            i = j;
    if (i < 0 || ctx_depth <= 0)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        /* cuMemFree waits for the work queued on the memory: run every queue */
        while (progress_locked(1))
            ;
        for (int k = 0; k < nops; k++)
            if (ops[k].dst >= allocs[i].p && ops[k].dst < allocs[i].p + allocs[i].n)
                sim_misuse(0); /* work on it that can never run */
        free((void *)allocs[i].p);
        sim.allocs_live--;
        sim.alloc_bytes -= allocs[i].n;
        allocs[i].p = 0;
    }
    pthread_mutex_unlock(&m);
    return r;
}

API int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s)
{
    pthread_mutex_lock(&m);
    int si = stream_index(s), r;
    if (si < 0 || ctx_depth <= 0 || find_alloc((uintptr_t)dst, n) < 0 || !src)
        r = sim_misuse(ERR_INVALID_VALUE);
    else {
        int pinned = 0;
        for (int i = 0; i < nranges && !pinned; i++)
            pinned =
                (uintptr_t)src >= ranges[i].p && (uintptr_t)src + n <= ranges[i].p + ranges[i].n;
        if (!pinned)
            sim.copies_unpinned++;
        sim.copies++;
        r = enqueue((fop){.kind = OP_COPY,
                          .stream = si,
                          .dst = (uintptr_t)dst,
                          .src = src,
                          .n = n,
                          .sum = hash(src, n)});
    }
    pthread_mutex_unlock(&m);
    return r;
}

/* A consumer's stream, made by a test (no context needed). */
API void *fake_cuda_stream_new(void)
{
    pthread_mutex_lock(&m);
    void *s = NULL;
    for (int i = 1; i < MAX_STREAMS && !s; i++)
        if (!stream_used[i]) {
            stream_used[i] = 1;
            s = &stream_used[i];
            sim.streams_live++;
        }
    pthread_mutex_unlock(&m);
    return s;
}

/* Device memory and a copy queued on a stream by a test, as a consumer's own
 * code would (no context needed). */
API unsigned long long fake_cuda_alloc(size_t n)
{
    ctx_depth++;
    unsigned long long p = 0;
    if (cuMemAlloc_v2(&p, n) != SUCCESS)
        p = 0;
    ctx_depth--;
    return p;
}

API int fake_cuda_copy(void *s, unsigned long long dst, const void *src, size_t n)
{
    ctx_depth++;
    int r = cuMemcpyHtoDAsync_v2(dst, src, n, s);
    ctx_depth--;
    return r;
}
