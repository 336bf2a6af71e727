/*
 * ferry/device.h - the GPU, loaded at run time: page-locked (pinned) host memory.
 *
 * ferry never links CUDA. The first call that needs a device loads the NVIDIA
 * driver library, libcuda.so.1, with dlopen and resolves the few entry points it
 * uses; a machine without CUDA builds, installs and runs ferry, and only the
 * calls below fail there (FERRY_ENOTSUP, with the cause: the loader's message,
 * such as "libcuda.so.1: cannot open shared object file: No such file or
 * directory", or the driver's error name, such as "cuInit: CUDA_ERROR_NO_DEVICE").
 *
 * What this version does: page-locks host memory for a CUDA device (the
 * loader's pin_memory option uses it for every batch buffer). Page-locked memory
 * is what lets a copy to the device run asynchronously and at the full speed of
 * the host link. Pinning is slow (it touches and locks every page), so the
 * loader pins each buffer once, when it is allocated, and keeps it pinned while
 * it lives.
 *
 * What it does not do yet: copy batches to device memory. The loader's `device`
 * option is parsed and checked, and refused with FERRY_ENOTSUP.
 *
 * Memory is registered with CU_MEMHOSTREGISTER_PORTABLE through the primary
 * context of the device (the context the CUDA runtime, and so PyTorch, uses), so
 * it counts as pinned for every context of the process.
 *
 * Environment: FERRY_CUDA_LIBRARY, when set, names the driver library to load
 * instead of libcuda.so.1 (a test double, or a driver outside the loader's path).
 *
 * Thread rules: a ferry_device is used from any thread; ferry_device_host_alloc
 * and ferry_device_host_free may run on many threads at once.
 */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_device ferry_device;

enum { FERRY_DEVICE_CPU = 0, FERRY_DEVICE_CUDA = 1 };

/* Parses a device name: "cpu", "cuda" (device 0) or "cuda:N" (N in 0 .. 1023).
 * Sets *kind (FERRY_DEVICE_*) and *ordinal (0 for cpu). FERRY_EINVAL, naming the
 * text, for anything else. Touches no driver. */
FERRY_API int ferry_device_parse(const char *name, int *kind, int *ordinal);

/* Opens a CUDA device by name ("cuda", "cuda:1"; NULL or "" = "cuda"): loads the
 * driver, initialises it, checks that the device exists and takes its primary
 * context. FERRY_EINVAL for a name that is not a CUDA device; FERRY_ENOTSUP where
 * no usable device exists, with a message that says why (the driver library
 * cannot be loaded, lacks an entry point, cuInit fails, no device, an ordinal past
 * the devices there are). Free with ferry_device_free. */
FERRY_API int ferry_device_open(ferry_device **out, const char *name);

/* Gives back the primary context. The driver library stays loaded (a driver is
 * never unloaded from a process). NULL is a no-op. Memory from
 * ferry_device_host_alloc must have been freed first. */
FERRY_API void ferry_device_free(ferry_device *d);

/* The device's ordinal. */
FERRY_API int ferry_device_ordinal(const ferry_device *d);

/* Whether a CUDA device of that name can be opened: 0, or the error (and message)
 * ferry_device_open would give. */
FERRY_API int ferry_device_probe(const char *name);

/* n bytes (n > 0) of zeroed, page-aligned, page-locked host memory, in *out.
 * FERRY_ENOMEM when the memory cannot be mapped; FERRY_EIO, with the driver's
 * error name, when the driver refuses to page-lock it (typically
 * CUDA_ERROR_OUT_OF_MEMORY: the locked-memory limit, ulimit -l, or the machine's
 * memory). Free with ferry_device_host_free, with the same n. */
FERRY_API int ferry_device_host_alloc(ferry_device *d, size_t n, void **out);

/* Unlocks and frees memory from ferry_device_host_alloc. NULL is a no-op. */
FERRY_API void ferry_device_host_free(ferry_device *d, void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_DEVICE_H */
