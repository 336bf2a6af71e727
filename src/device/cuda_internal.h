/*
 * The CUDA driver as the device layer's files share it: the entry points
 * resolved by name (cuda.c) and the device handle. Not installed.
 *
 * The types and prototypes are declared from the driver API's documentation, so
 * that building ferry needs no CUDA headers.
 */
#ifndef FERRY_CUDA_INTERNAL_H
#define FERRY_CUDA_INTERNAL_H

#include "ferry/device.h"

#include <stddef.h>

/* ---- The driver API's types, as documented ---- */
typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
#define CU_MEMHOSTREGISTER_PORTABLE 0x01u
#define CU_STREAM_NON_BLOCKING 0x01u
#define CU_EVENT_DEFAULT 0x00u
#define CU_EVENT_DISABLE_TIMING 0x02u
#define CUDA_ERROR_NOT_READY 600

typedef struct driver {
    void *lib;
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*cuCtxPushCurrent)(CUcontext ctx);
    CUresult (*cuCtxPopCurrent)(CUcontext *ctx);
    CUresult (*cuMemHostRegister)(void *p, size_t n, unsigned flags);
    CUresult (*cuMemHostUnregister)(void *p);
    CUresult (*cuGetErrorName)(CUresult err, const char **name);
    /* Copies to device memory (ring.c): NULL where the driver lacks them, and
     * then a loader's `device` is FERRY_ENOTSUP, naming the missing one. */
    CUresult (*cuStreamCreate)(CUstream *s, unsigned flags);
    CUresult (*cuStreamDestroy)(CUstream s);
    CUresult (*cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
    CUresult (*cuEventCreate)(CUevent *e, unsigned flags);
    CUresult (*cuEventDestroy)(CUevent e);
    CUresult (*cuEventRecord)(CUevent e, CUstream s);
    CUresult (*cuEventQuery)(CUevent e);
    CUresult (*cuEventSynchronize)(CUevent e);
    CUresult (*cuMemAlloc)(CUdeviceptr *p, size_t n);
    CUresult (*cuMemFree)(CUdeviceptr p);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
    CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*cuStreamSynchronize)(CUstream s);
} driver;

struct ferry_device {
    driver drv;
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
};

/* The driver's name for an error ("CUDA_ERROR_NO_DEVICE"), or its number in buf. */
const char *ferry__cuda_err_name(const driver *d, CUresult r, char *buf, size_t cap);

/* Makes the device's primary context current on this thread, for one call;
 * ferry__cuda_pop undoes it. */
CUresult ferry__cuda_push(const ferry_device *dv);
void ferry__cuda_pop(const ferry_device *dv);

#endif /* FERRY_CUDA_INTERNAL_H */
