/*
 * Batches in device memory: fences and a ring of device buffers. Not installed;
 * the loader's delivery on a device (ferry_loader_opts.device) is built on it.
 *
 * A fence is a set of events, one per stream that used some memory, recorded on
 * those streams when the memory was given back: the memory may be written again
 * once the work queued on them before that moment is done. Waiting on a fence is
 * either a stream's wait (cuStreamWaitEvent: the host goes on) or the host's wait
 * on those events alone; never a device-wide synchronise.
 *
 * The ring: at most `max` device buffers of `bytes` each, made when first
 * needed, and one stream ferry owns (non-blocking, so that its copies never wait
 * for the legacy default stream PyTorch computes on). ferry__dring_copy copies a
 * page-locked host buffer into a free device buffer on that stream, after the work
 * its previous users queued (their fence), and records an event after the copy:
 * the host buffer may be refilled once that event has completed
 * (ferry__dbuf_copied, ferry__dbuf_wait_copied). A consumer makes its stream
 * wait for the copy with ferry__dbuf_use (the stream is remembered); when the
 * buffer's last reference goes (the batch and every tensor viewing it), an event
 * is recorded on each stream that used it (on the legacy default stream when
 * none did) and the buffer goes back to the ring with that fence.
 *
 * Lifetimes: each buffer in use holds a reference on its ring, so tensors that
 * outlive the loader keep their device memory; the ring (its memory, its stream,
 * its device handle) is freed when the owner has called ferry__dring_free and the
 * last buffer has been given back.
 *
 * Thread rules: every call may run on any thread (a Python tensor's deleter runs
 * on whichever thread drops it); the ring has one mutex. Each call makes the
 * device's primary context current for its driver calls and restores the
 * caller's.
 */
#ifndef FERRY_DEVICE_RING_H
#define FERRY_DEVICE_RING_H

#include "ferry/device.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ferry__fence {
    void **events; /* CUevent, reused from one recording to the next */
    uint32_t n, cap;
} ferry__fence;

/* Records an event on each of the n streams (CUstream; n == 0: the legacy
 * default stream) and keeps them as the fence, replacing what it held. */
int ferry__fence_record(ferry_device *dv, ferry__fence *f, void *const *streams, uint32_t n);
/* Whether every event of the fence has completed (an empty fence has). */
bool ferry__fence_done(ferry_device *dv, ferry__fence *f);
/* The host waits for the fence's events; then the fence is empty. */
int ferry__fence_wait(ferry_device *dv, ferry__fence *f);
/* Destroys the fence's events. */
void ferry__fence_clear(ferry_device *dv, ferry__fence *f);

typedef struct ferry__dring ferry__dring;
typedef struct ferry__dbuf ferry__dbuf;

/* A ring of at most max (>= 1) device buffers of `bytes` each on dv, which it
 * takes over (freed with the ring). FERRY_ENOTSUP, naming the entry point, where
 * the driver lacks one the ring needs; FERRY_EIO with the driver's error where it
 * cannot make the stream. */
int ferry__dring_create(ferry__dring **out, ferry_device *dv, size_t bytes, uint32_t max);
/* The owner's release: buffers in use stay valid until given back. NULL: no-op. */
void ferry__dring_free(ferry__dring *r);
ferry_device *ferry__dring_device(const ferry__dring *r);
/* The ring's stream (a CUstream): a fence recorded on it is done once the
 * copies queued so far are. */
void *ferry__dring_stream(const ferry__dring *r);

/* Copies n (<= bytes) bytes from src into a free device buffer, *out (one
 * reference, the caller's). FERRY_ESTATE when all max buffers are in use (the
 * message says how many and what frees them); FERRY_EIO with the driver's error
 * (cuMemAlloc, cuMemcpyHtoDAsync, ...). */
int ferry__dring_copy(ferry__dring *r, const void *src, size_t n, ferry__dbuf **out);

/* Whether every buffer is in use (a copy now would be FERRY_ESTATE). */
bool ferry__dring_full(ferry__dring *r);

/* The buffer's device address and the event recorded after its copy. */
uint64_t ferry__dbuf_ptr(const ferry__dbuf *b);
void *ferry__dbuf_event(const ferry__dbuf *b);
/* Whether the copy has completed (the host memory it read may be written). */
bool ferry__dbuf_copied(ferry__dbuf *b);
/* The host waits for the copy's event. */
int ferry__dbuf_wait_copied(ferry__dbuf *b);
/* Work queued on `stream` (CUstream; NULL = the legacy default stream) from now
 * on runs after the copy, and the buffer is not reused before the work queued on
 * it until the buffer's release is done. */
int ferry__dbuf_use(ferry__dbuf *b, void *stream);
void ferry__dbuf_ref(ferry__dbuf *b);
/* Drops a reference; the last records the fence and returns the buffer. */
void ferry__dbuf_unref(ferry__dbuf *b);
/* ferry_tensor's release hook: owner is a ferry__dbuf. */
void ferry__dbuf_release(void *owner);

typedef struct ferry__dring_stats {
    uint64_t copies, bytes;
    uint64_t timed;        /* copies whose events have been read back */
    uint64_t timed_bytes;  /* their bytes */
    uint64_t copy_ns;      /* their time on the copy engine */
    uint64_t exposed_ns;   /* the part of it after the consumer's stream reached the batch */
    uint64_t device_bytes; /* device memory the ring holds now */
} ferry__dring_stats;

/* Reads the events of finished copies back into the figures, then copies them out. */
void ferry__dring_stats_get(ferry__dring *r, ferry__dring_stats *out);

#endif /* FERRY_DEVICE_RING_H */
