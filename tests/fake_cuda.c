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

API int cuCtxPushCurrent_v2(void *ctx)
{
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
