/*
 * The CUDA driver, loaded at run time.
 *
 * ferry never links CUDA: ferry_device_open dlopens the driver library
 * (libcuda.so.1, the name every driver install provides) and resolves the entry
 * points it uses by name. The types and prototypes are declared in
 * cuda_internal.h, from the driver API's documentation, so that building ferry
 * needs no CUDA headers. The
 * versioned names (cuMemHostRegister_v2, ...) are the ones cuda.h maps the plain
 * names to since CUDA 4/11; they are what a program compiled against cuda.h calls.
 *
 * Each handle loads the library itself (dlopen counts references) with
 * RTLD_NODELETE, so there is no process-wide state here and the driver is never
 * unloaded under the threads it starts.
 *
 * Page-locking: memory comes from mmap (page-aligned, zeroed, never sharing a
 * page with another allocation, so two registrations never overlap) and is
 * registered with cuMemHostRegister(CU_MEMHOSTREGISTER_PORTABLE) under the
 * device's primary context, pushed on the calling thread for the call: the
 * loader allocates on worker threads that have no current context.
 */
#include "cuda_internal.h"
#include "../core/internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DRIVER_LIBRARY "libcuda.so.1"
#define MAX_ORDINAL 1023

/* The driver's name for an error ("CUDA_ERROR_NO_DEVICE"), or its number. */
const char *ferry__cuda_err_name(const driver *d, CUresult r, char *buf, size_t cap)
{
    const char *name = NULL;
    if (d->cuGetErrorName && d->cuGetErrorName(r, &name) == 0 && name)
        return name;
    snprintf(buf, cap, "CUresult %d", r);
    return buf;
}

static int driver_err(const driver *d, int rc, const char *call, CUresult r)
{
    char buf[32];
    return ferry__err(rc, "%s: %s", call, ferry__cuda_err_name(d, r, buf, sizeof buf));
}

#define RESOLVE(field, symbol, required)                                                           \
    do {                                                                                           \
        *(void **)&d->field = dlsym(d->lib, symbol);                                               \
        if ((required) && !d->field)                                                               \
            return ferry__err(FERRY_ENOTSUP, "no usable CUDA device: %s has no %s", path, symbol); \
    } while (0)

static int driver_load(driver *d)
{
    const char *path = getenv("FERRY_CUDA_LIBRARY");
    if (!path || !*path)
        path = DRIVER_LIBRARY;
    struct stat st; /* a FIFO or a device given by path would block dlopen's read */
    if (strchr(path, '/') && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ferry__err(FERRY_ENOTSUP, "no usable CUDA device: %s is not a regular file", path);
    dlerror();
    d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!d->lib) {
        const char *why = dlerror();
        return ferry__err(FERRY_ENOTSUP, "no usable CUDA device: %s",
                          why ? why : "cannot load the driver library");
    }
    RESOLVE(cuGetErrorName, "cuGetErrorName", false);
    RESOLVE(cuInit, "cuInit", true);
    RESOLVE(cuDriverGetVersion, "cuDriverGetVersion", false);
    RESOLVE(cuDeviceGetCount, "cuDeviceGetCount", true);
    RESOLVE(cuDeviceGet, "cuDeviceGet", true);
    RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", true);
    RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", true);
    RESOLVE(cuCtxPushCurrent, "cuCtxPushCurrent_v2", true);
    RESOLVE(cuCtxPopCurrent, "cuCtxPopCurrent_v2", true);
    RESOLVE(cuMemHostRegister, "cuMemHostRegister_v2", true);
    RESOLVE(cuMemHostUnregister, "cuMemHostUnregister", true);
    RESOLVE(cuStreamCreate, "cuStreamCreate", false);
    RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2", false);
    RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent", false);
    RESOLVE(cuEventCreate, "cuEventCreate", false);
    RESOLVE(cuEventDestroy, "cuEventDestroy_v2", false);
    RESOLVE(cuEventRecord, "cuEventRecord", false);
    RESOLVE(cuEventQuery, "cuEventQuery", false);
    RESOLVE(cuEventSynchronize, "cuEventSynchronize", false);
    RESOLVE(cuMemAlloc, "cuMemAlloc_v2", false);
    RESOLVE(cuMemFree, "cuMemFree_v2", false);
    RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", false);
    RESOLVE(cuEventElapsedTime, "cuEventElapsedTime", false);
    RESOLVE(cuStreamSynchronize, "cuStreamSynchronize", false);
    return 0;
}

int ferry_device_parse(const char *name, int *kind, int *ordinal)
{
    if (!name)
        return ferry__err(FERRY_EINVAL, "device: no name (\"cpu\", \"cuda\" or \"cuda:N\")");
    if (strcmp(name, "cpu") == 0) {
        *kind = FERRY_DEVICE_CPU;
        *ordinal = 0;
        return 0;
    }
    if (strcmp(name, "cuda") == 0) {
        *kind = FERRY_DEVICE_CUDA;
        *ordinal = 0;
        return 0;
    }
    int64_t n;
    if (strncmp(name, "cuda:", 5) == 0 && name[5] >= '0' && name[5] <= '9' &&
        ferry__parse_i64(name + 5, 0, MAX_ORDINAL, &n)) {
        *kind = FERRY_DEVICE_CUDA;
        *ordinal = (int)n;
        return 0;
    }
    return ferry__err(FERRY_EINVAL,
                      "device \"%.64s\": not \"cpu\", \"cuda\" or \"cuda:N\" (N in 0 .. %d)", name,
                      MAX_ORDINAL);
}

int ferry_device_open(ferry_device **out, const char *name)
{
    *out = NULL;
    int rc, kind, ordinal;
    if (!name || !*name)
        name = "cuda";
    if ((rc = ferry_device_parse(name, &kind, &ordinal)) < 0)
        return rc;
    if (kind != FERRY_DEVICE_CUDA)
        return ferry__err(FERRY_EINVAL, "device \"%s\": not a CUDA device", name);
    ferry_device *dv = ferry__calloc(1, sizeof *dv);
    if (!dv)
        return ferry__err(FERRY_ENOMEM, "device: out of memory");
    driver *d = &dv->drv;
    dv->ordinal = ordinal;
    CUresult r;
    int count = 0;
    FERRY_TRY(driver_load(d));
    if ((r = d->cuInit(0)) != 0) {
        /* CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INSUFFICIENT_DRIVER, ...: no device to use */
        rc = driver_err(d, FERRY_ENOTSUP, "no usable CUDA device: cuInit", r);
        goto cleanup;
    }
    if ((r = d->cuDeviceGetCount(&count)) != 0) {
        rc = driver_err(d, FERRY_ENOTSUP, "no usable CUDA device: cuDeviceGetCount", r);
        goto cleanup;
    }
    if (count <= 0)
        FERRY_FAIL(FERRY_ENOTSUP, "no usable CUDA device: the driver sees no device");
    if (ordinal >= count)
        FERRY_FAIL(FERRY_ENOTSUP,
                   "no usable CUDA device: \"%s\" asked, and the driver sees %d "
                   "device%s (cuda:0 .. cuda:%d)",
                   name, count, count == 1 ? "" : "s", count - 1);
    if ((r = d->cuDeviceGet(&dv->dev, ordinal)) != 0) {
        rc = driver_err(d, FERRY_ENOTSUP, "no usable CUDA device: cuDeviceGet", r);
        goto cleanup;
    }
    if ((r = d->cuDevicePrimaryCtxRetain(&dv->ctx, dv->dev)) != 0) {
        rc = driver_err(d, FERRY_ENOTSUP, "no usable CUDA device: cuDevicePrimaryCtxRetain", r);
        goto cleanup;
    }
    *out = dv;
    return 0;
cleanup:
    ferry_device_free(dv);
    return rc;
}

void ferry_device_free(ferry_device *dv)
{
    if (!dv)
        return;
    if (dv->ctx)
        dv->drv.cuDevicePrimaryCtxRelease(dv->dev);
    if (dv->drv.lib)
        dlclose(dv->drv.lib); /* RTLD_NODELETE: drops a reference, unloads nothing */
    ferry__free(dv);
}

int ferry_device_ordinal(const ferry_device *dv)
{
    return dv->ordinal;
}

int ferry_device_probe(const char *name)
{
    ferry_device *dv;
    int rc = ferry_device_open(&dv, name);
    ferry_device_free(dv);
    return rc;
}

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return n > SIZE_MAX - page ? 0 : (n + page - 1) / page * page;
}

int ferry_device_host_alloc(ferry_device *dv, size_t n, void **out)
{
    *out = NULL;
    const driver *d = &dv->drv;
    size_t len = page_round(n);
    if (n == 0 || len == 0)
        return ferry__err(FERRY_EINVAL, "device: cannot page-lock %zu bytes", n);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ferry__err(FERRY_ENOMEM, "device: cannot map %zu bytes", len);
    CUcontext prev;
    const char *call = "cuCtxPushCurrent";
    CUresult r = d->cuCtxPushCurrent(dv->ctx);
    if (r == 0) {
        call = "cuMemHostRegister";
        r = d->cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE);
        d->cuCtxPopCurrent(&prev);
    }
    if (r != 0) {
        munmap(p, len);
        char buf[32];
        return ferry__err(FERRY_EIO, "cuda:%d: cannot page-lock %zu bytes: %s: %s", dv->ordinal,
                          len, call, ferry__cuda_err_name(d, r, buf, sizeof buf));
    }
    *out = p;
    return 0;
}

void ferry_device_host_free(ferry_device *dv, void *p, size_t n)
{
    if (!p)
        return;
    const driver *d = &dv->drv;
    CUcontext prev;
    /* Memory the driver may still hold registered is never unmapped: a later
     * mapping at the same address would meet a stale registration (the next
     * cuMemHostRegister there fails). So where the context cannot be made current
     * the pages stay mapped (and locked) until the process ends. */
    if (d->cuCtxPushCurrent(dv->ctx) != 0)
        return;
    CUresult r = d->cuMemHostUnregister(p);
    d->cuCtxPopCurrent(&prev);
    if (r == 0)
        munmap(p, page_round(n));
}

CUresult ferry__cuda_push(const ferry_device *dv)
{
    return dv->drv.cuCtxPushCurrent(dv->ctx);
}

void ferry__cuda_pop(const ferry_device *dv)
{
    CUcontext prev;
    dv->drv.cuCtxPopCurrent(&prev);
}
