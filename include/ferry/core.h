/*
 * ferry/core.h - status codes, error messages, tensors, counter-based random numbers,
 * clocks, checksums and progress callbacks.
 *
 * Conventions used by every ferry header:
 *  - Functions that can fail return int: 0 on success, a negative FERRY_E* code on
 *    error. A few return a positive, non-error status (FERRY_END).
 *  - On error, a message that says where and why is kept for the calling thread
 *    (ferry_last_errmsg) and, for calls on a handle, beside the handle too
 *    (for instance ferry_loader_errmsg).
 *  - Constructors are `int ferry_x_create(ferry_x **out, ...)`; `ferry_x_free(NULL)`
 *    is a no-op.
 *  - The library never exits, aborts or prints.
 */
#ifndef FERRY_CORE_H
#define FERRY_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FERRY_BUILDING) && defined(__GNUC__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0
#define FERRY_VERSION_NUMBER                                                                       \
    (FERRY_VERSION_MAJOR * 10000 + FERRY_VERSION_MINOR * 100 + FERRY_VERSION_PATCH)
#define FERRY_VERSION_STRING "0.1.0"

/* The version of the library actually linked, as FERRY_VERSION_NUMBER / _STRING. */
FERRY_API unsigned ferry_version_number(void);
FERRY_API const char *ferry_version_string(void);

/* ---- Status codes. Values are only ever appended. ---- */
#define FERRY_OK 0
#define FERRY_END 1   /* not an error: no more batches (or samples) in this epoch */
#define FERRY_BREAK 2 /* not an error: a stream ends the current batch here (group-batch) */

#define FERRY_EINVAL (-1)     /* an argument or setting is out of its range */
#define FERRY_ENOMEM (-2)     /* an allocation failed */
#define FERRY_EIO (-3)        /* a system call on a file failed */
#define FERRY_ECORRUPT (-4)   /* data is malformed */
#define FERRY_ETIMEDOUT (-5)  /* waited longer than the configured timeout */
#define FERRY_ECANCELED (-6)  /* the operation was cancelled */
#define FERRY_ERANGE (-7)     /* an index or size is out of range */
#define FERRY_ENOTSUP (-8)    /* not supported (by this build, source or format) */
#define FERRY_ENOENT (-9)     /* no such file, field or key */
#define FERRY_EBUDGET (-10)   /* more bad samples than the skip budget allows */
#define FERRY_ESTATE (-11)    /* the call is not allowed in the handle's current state */
#define FERRY_ECALLBACK (-12) /* a user callback reported failure */
#define FERRY_EOVERFLOW (-13) /* a value does not fit (a sample longer than its field) */
#define FERRY_ESTALE (-14)    /* an index no longer matches its source */
#define FERRY_ERROR_MIN (-14) /* the most negative code this version returns */

/* A static, constant description of a status code ("invalid argument", ...). */
FERRY_API const char *ferry_strerror(int rc);
/* The code's symbolic name ("FERRY_EINVAL"), or "FERRY_UNKNOWN". */
FERRY_API const char *ferry_errname(int rc);

/* The message of the last failure on the calling thread: it says where and why
 * ("synthetic: sample 17: injected failure"). Owned by the library; valid until the
 * next ferry call on this thread. Never NULL; "" when there is none. */
FERRY_API const char *ferry_last_errmsg(void);

/* Sets the calling thread's message and returns rc, for use in dataset and
 * transform callbacks: `return ferry_error(FERRY_ECORRUPT, "%s: line %llu: ...", ...)`.
 * Messages longer than 511 bytes are cut. */
FERRY_API int ferry_error(int rc, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- Element types and tensors ---- */
typedef enum ferry_dtype {
    FERRY_DTYPE_INVALID = 0,
    FERRY_U8,
    FERRY_I8,
    FERRY_U16,
    FERRY_I16,
    FERRY_U32,
    FERRY_I32,
    FERRY_U64,
    FERRY_I64,
    FERRY_F16,
    FERRY_BF16,
    FERRY_F32,
    FERRY_F64,
    FERRY_BOOL,
    FERRY_DTYPE_COUNT
} ferry_dtype;

/* Bytes per element; 0 for an invalid dtype. */
FERRY_API size_t ferry_dtype_size(ferry_dtype dt);
/* "uint8", "float32", ... (NumPy's names); "invalid" for an invalid dtype. */
FERRY_API const char *ferry_dtype_name(ferry_dtype dt);
/* The dtype named by NumPy's name ("float32") or its short form ("f32"), else
 * FERRY_DTYPE_INVALID. */
FERRY_API ferry_dtype ferry_dtype_from_name(const char *name);

#define FERRY_MAX_DIMS 8

/* An n-dimensional array: what a zero-copy export (NumPy's array interface,
 * DLPack) needs. Strides are in bytes. `owner`/`release` say who owns `data`:
 * release(owner) is called by ferry_tensor_release; NULL release means the
 * memory is borrowed and lives as long as whatever handed the tensor out says. */
typedef struct ferry_tensor {
    void *data;
    ferry_dtype dtype;
    int ndim;
    int64_t shape[FERRY_MAX_DIMS];
    int64_t strides[FERRY_MAX_DIMS];
    void *owner;
    void (*release)(void *owner);
} ferry_tensor;

/* Fills *t with a contiguous tensor of fresh, zeroed, 64-byte-aligned memory owned
 * by the tensor (freed by ferry_tensor_release). Shape values must be >= 0
 * (FERRY_EINVAL) and the byte size of the non-zero dimensions must fit in int64_t
 * and size_t (FERRY_EOVERFLOW), so that strides and element counts cannot
 * overflow. */
FERRY_API int ferry_tensor_alloc(ferry_tensor *t, ferry_dtype dt, int ndim, const int64_t *shape);
/* Describes borrowed memory. strides may be NULL for C-contiguous. No ownership. */
FERRY_API int ferry_tensor_wrap(ferry_tensor *t, void *data, ferry_dtype dt, int ndim,
                                const int64_t *shape, const int64_t *strides);
/* Calls the release hook if any, then clears *t. NULL and cleared tensors are fine. */
FERRY_API void ferry_tensor_release(ferry_tensor *t);
/* Number of elements (product of the shape). */
FERRY_API int64_t ferry_tensor_numel(const ferry_tensor *t);
/* Bytes spanned by the elements when contiguous: numel * dtype size. */
FERRY_API size_t ferry_tensor_nbytes(const ferry_tensor *t);
/* 1 if the strides are C-contiguous, else 0. */
FERRY_API int ferry_tensor_is_contiguous(const ferry_tensor *t);

/* ---- Counter-based random numbers ----
 * Philox4x32-10 (Salmon et al., SC'11): out = F(counter, key), no hidden state, so
 * a draw depends only on what the counter and key encode. ferry keys it by the
 * seed and counts (epoch, sample index, draw number): every random choice made for
 * a sample is the same whichever worker makes it, and on every run. */
FERRY_API void ferry_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A small cursor over the Philox stream of one (seed, epoch, index). Plain data:
 * put it on the stack, copy it freely. Not shared between threads. */
typedef struct ferry_rng {
    uint32_t key[2];
    uint32_t ctr[4]; /* ctr[0] = block number, ctr[1] = epoch, ctr[2..3] = index */
    uint32_t buf[4];
    unsigned used; /* words of buf already handed out (4 = empty) */
} ferry_rng;

/* Positions the generator at draw 0 of (seed, epoch, index). Epochs are taken
 * modulo 2^32. */
FERRY_API void ferry_rng_init(ferry_rng *r, uint64_t seed, uint64_t epoch, uint64_t index);
FERRY_API uint32_t ferry_rng_u32(ferry_rng *r);
FERRY_API uint64_t ferry_rng_u64(ferry_rng *r);
/* Uniform on [0, 1) with 53 (double) or 24 (float) random bits. */
FERRY_API double ferry_rng_uniform(ferry_rng *r);
FERRY_API float ferry_rng_uniformf(ferry_rng *r);
/* Uniform integer on [0, n) without modulo bias; n > 0 (0 returns 0). */
FERRY_API uint64_t ferry_rng_below(ferry_rng *r, uint64_t n);

/* A 64-bit mix of two words (a keyed finaliser, not a cryptographic hash), used to
 * derive independent keys from (seed, purpose). */
FERRY_API uint64_t ferry_hash64(uint64_t a, uint64_t b);

/* ---- Clocks ---- */
/* Monotonic nanoseconds since an arbitrary origin. */
FERRY_API uint64_t ferry_now_ns(void);

/* ---- Checksums and progress ---- */
/* CRC-32C (Castagnoli), with the SSE4.2 instruction where the CPU has it: the
 * checksum of record shards, TFRecord framing and safetensors' tensors.
 * Start with crc = 0; chain calls to cover several buffers. */
FERRY_API uint32_t ferry_crc32c(uint32_t crc, const void *data, size_t n);

/* Called now and then by a long job (ferry_line_index_build): done of total so
 * far (bytes scanned, for an index). */
typedef void (*ferry_progress_fn)(uint64_t done, uint64_t total, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_CORE_H */
