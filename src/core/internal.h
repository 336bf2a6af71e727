/*
 * Internal helpers shared across the library's files (ferry__ names). Not installed.
 */
#ifndef FERRY_INTERNAL_H
#define FERRY_INTERNAL_H

#include "ferry/core.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FERRY_ERRMSG_MAX 512

/* ---- Allocation: every allocation goes through here, so tests can make the n-th
 * one fail (see ferry__test_fail_alloc). ---- */
void *ferry__malloc(size_t n);
void *ferry__calloc(size_t count, size_t size);
void *ferry__realloc(void *p, size_t n);
void ferry__free(void *p);
/* 64-byte aligned; free with ferry__aligned_free. */
void *ferry__aligned_alloc(size_t n);
void ferry__aligned_free(void *p);
char *ferry__strdup(const char *s);

/* Test hook: on this thread, make the allocation after `n` more succeed fail
 * (n = 0: the next one). A negative n turns failure injection off. Returns how many
 * allocations were attempted since the last call. */
long ferry__test_fail_alloc(long n);

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool ferry__mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool ferry__add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline size_t ferry__align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* ---- Errors ---- */
/* Sets the thread's message (printf-style) and returns rc. */
int ferry__err(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ferry__verr(int rc, const char *fmt, va_list ap);
/* Prefixes the thread's current message with "prefix: " (keeps rc). */
int ferry__err_prefix(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies the thread's message into buf (FERRY_ERRMSG_MAX bytes). */
void ferry__err_copy(char *buf);
void ferry__err_clear(void);

/* Fail or forward an error and jump to the function's one cleanup label. */
#define FERRY_TRY(expr)                                                                            \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0)                                                                                \
            goto cleanup;                                                                          \
    } while (0)
#define FERRY_FAIL(code, ...)                                                                      \
    do {                                                                                           \
        rc = ferry__err((code), __VA_ARGS__);                                                      \
        goto cleanup;                                                                              \
    } while (0)

/* ---- Threads: a thin OS layer ---- */
typedef struct ferry__thread {
    pthread_t t;
} ferry__thread;
int ferry__thread_start(ferry__thread *t, void *(*fn)(void *), void *arg);
void ferry__thread_join(ferry__thread *t);

/* Waits on cv until signalled or `deadline_ns` (ferry_now_ns clock, 0 = forever).
 * Returns false on timeout. */
bool ferry__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline_ns);
/* A condition variable on the monotonic clock. */
int ferry__cond_init(pthread_cond_t *cv);

/* ---- The process's mappings (Linux's /proc/self/maps), one line at a time ----
 *
 *     ferry__maps m;
 *     ferry__mapping x;
 *     if (ferry__maps_open(&m)) {
 *         while (ferry__maps_next(&m, &x))
 *             ...x.from, x.to, x.off, x.ino, x.path...
 *         ferry__maps_close(&m);
 *     }
 */
typedef struct ferry__mapping {
    uintptr_t from, to; /* [from, to) */
    uint64_t off;       /* the file's offset at from */
    uint64_t ino;
    const char *path; /* "" for an anonymous mapping; valid until the next call */
} ferry__mapping;
typedef struct ferry__maps {
    void *f; /* FILE * */
    char line[4096 + 200];
} ferry__maps;
/* False when the mappings cannot be read (then there is nothing to close). */
bool ferry__maps_open(ferry__maps *m);
bool ferry__maps_next(ferry__maps *m, ferry__mapping *out);
void ferry__maps_close(ferry__maps *m);

/* ---- A bounded thread pool (one mutex, two condition variables) ---- */
typedef struct ferry__pool ferry__pool;
typedef void (*ferry__job_fn)(void *arg);
/* `threads` workers, a queue of at most `queue_size` jobs waiting. */
int ferry__pool_create(ferry__pool **out, unsigned threads, size_t queue_size);
/* Queues a job, blocking while the queue is full. FERRY_ECANCELED after shutdown. */
int ferry__pool_add(ferry__pool *p, ferry__job_fn fn, void *arg);
/* Waits until every queued job has finished. */
void ferry__pool_wait(ferry__pool *p);
/* Finishes the queued jobs, joins the threads, frees. NULL is fine. */
void ferry__pool_free(ferry__pool *p);
/* Stops taking jobs (queued ones still run) and waits until deadline_ns
 * (ferry_now_ns clock; 0 = forever) for the threads to end. Returns 0 when all
 * ended (the pool is freed), or how many are still in a job: they are detached
 * and the last to finish frees the pool; whatever their jobs touch must outlive
 * them. NULL is fine. */
unsigned ferry__pool_free_within(ferry__pool *p, uint64_t deadline_ns);
unsigned ferry__pool_threads(const ferry__pool *p);

/* A parallel loop: runs fn(arg, i, worker) for every i in [0, n) on `threads`
 * threads (at most n), the caller's and those of a pool made for the call. Each
 * thread takes the next i when it is done with one; worker (0 .. threads-1) says
 * which thread runs it, for per-thread scratch. fn returns 0 or a negative code
 * with the thread's message set: no i starts after the first failure, which is
 * returned with its message. When the pool cannot be made, the caller's thread
 * does all the work. */
typedef int (*ferry__for_fn)(void *arg, size_t i, unsigned worker);
int ferry__parallel_for(size_t n, unsigned threads, ferry__for_fn fn, void *arg);

/* ---- A bounded blocking queue of pointers (multi-producer, multi-consumer) ---- */
typedef struct ferry__queue ferry__queue;
int ferry__queue_create(ferry__queue **out, size_t capacity);
void ferry__queue_free(ferry__queue *q);
/* Blocks while full. deadline_ns as above. 0, FERRY_ETIMEDOUT, or FERRY_ECANCELED
 * once closed. */
int ferry__queue_push(ferry__queue *q, void *item, uint64_t deadline_ns);
/* Blocks while empty. 0, FERRY_ETIMEDOUT, or FERRY_END once closed and drained. */
int ferry__queue_pop(ferry__queue *q, void **item, uint64_t deadline_ns);
/* Wakes everyone; later pushes fail, pops drain what is left. */
void ferry__queue_close(ferry__queue *q);
size_t ferry__queue_size(ferry__queue *q);

/* ---- Strict number parsing (for settings and the environment) ---- */
/* Whole string is a decimal (or 0x hex) integer in [lo, hi]. */
bool ferry__parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool ferry__parse_u64(const char *s, uint64_t *out);

/* Checks a schema: names (UTF-8), dtypes, shapes and byte sizes in range (core/sample.c). */
struct ferry_field;
int ferry__check_fields(const struct ferry_field *fields, int nfields);
/* true when the n bytes at p are valid UTF-8 (no surrogates, no overlong forms;
 * formats/json.c). */
bool ferry__utf8_valid(const void *p, size_t n);
/* A name for a message: the n bytes at p with quotes, backslashes and bytes outside
 * printable ASCII as \xNN, cut to fit cap (core/sample.c). Returns out. */
const char *ferry__escape(char *out, size_t cap, const void *p, size_t n);

/* CRC-32C, each implementation on its own (for the tests; core/crc32c.c). */
uint32_t ferry__crc32c_sw(uint32_t crc, const void *data, size_t n);
/* 1 when the CPU has the CRC-32C instruction (SSE4.2) and this build uses it. */
int ferry__crc32c_hw_available(void);
/* The instruction's version; falls back to the tables without it. */
uint32_t ferry__crc32c_hw(uint32_t crc, const void *data, size_t n);
/* 1 when the CPU has AVX-512 with the carry-less multiply (VPCLMULQDQ). */
int ferry__crc32c_clmul_available(void);
/* The carry-less multiply version (from 256 bytes; the instruction's below);
 * falls back to the instruction's, then the tables, without it. */
uint32_t ferry__crc32c_clmul(uint32_t crc, const void *data, size_t n);
/* crc(A || B) from crc(A), crc(B) and the length of B (after zlib's crc32_combine):
 * the CRC of a buffer checked in pieces on several threads. */
uint32_t ferry__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* Copies n bytes from src to dst (which must not overlap) and returns the CRC-32C
 * of them, continuing crc: one pass over the data where the CPU has the
 * carry-less multiply, else a check and a copy of pieces that stay in the cache. */
uint32_t ferry__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);

#endif /* FERRY_INTERNAL_H */
