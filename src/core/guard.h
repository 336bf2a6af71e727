/*
 * Guarded reads of mapped files. A file mapped by a reader can be cut short by
 * another process while it is read; touching a page past its new end raises
 * SIGBUS, which by default kills the process. Readers copy out of their mappings
 * inside a guarded region instead, and a fault there becomes an error naming the
 * file.
 *
 * A region is a sigsetjmp point on the thread's stack of regions:
 *
 *     ferry__guard g;
 *     ferry__guard_push(&g);
 *     if (sigsetjmp(g.jb, 0))
 *         return ferry__guard_err(g.addr, path, base, "record %llu", i);
 *     rc = read_from_the_map(...);
 *     ferry__guard_pop(&g);
 *
 * A fault inside the region returns to the sigsetjmp with 1 and g.addr set to
 * the faulting address (the guard is already popped then). sigsetjmp must be
 * called in the function that owns g, as the whole controlling expression of the
 * if (C11 7.13.1.1); the region must not hold locks or allocations that the
 * fault path would leak, nor change non-volatile locals that the fault path reads.
 *
 * A sigsetjmp costs some 10 to 20 ns, too much for every sample of a fast
 * reader. So the loader's workers set one region per grain of samples (a
 * "passive" region naming the dataset they call directly, `direct`), and a mapped
 * dataset called directly by such a region only says what it reads (a
 * ferry__reading, a few stores) instead of setting its own; a fault then returns
 * to the worker, which asks the reading for the error and goes on with the next
 * sample. Called any other way (by a user's code, another dataset, the CLI), a
 * dataset sets its own region: jumping over frames that are not ferry's could
 * leave their locks held. ferry__guard_direct tells which applies.
 *
 * The handler is process-wide, installed once by ferry__guard_install (the
 * mapped readers call it when they open). A SIGBUS that is not a fault inside an
 * armed region of the faulting thread (a region of its own, or a passive one
 * while a reading is set) goes on to the handler that was installed before (or,
 * when that was the default, ends the process as it would have).
 */
#ifndef FERRY_GUARD_H
#define FERRY_GUARD_H

#include "internal.h"

#include <setjmp.h>
#include <stdint.h>

/* What a mapped reader is reading under a passive region. `fault` builds the
 * error (returns its code) after a fault at addr; it runs after the reader's
 * frames are gone, on a copy of this struct taken at the fault, so it may use
 * only arg, item and res. res is a resource the reader holds while it reads
 * (freed by fault), or NULL. */
typedef struct ferry__reading {
    int (*fault)(const struct ferry__reading *r, uintptr_t addr);
    const void *arg;
    uint64_t item;
    void *volatile res;
} ferry__reading;

typedef struct ferry__guard {
    sigjmp_buf jb;
    struct ferry__guard *prev;     /* the enclosing region on this thread */
    uintptr_t addr;                /* where the fault was, after one */
    bool passive;                  /* armed only while `reading` is set */
    const void *direct;            /* passive: the dataset (self) called directly */
    const ferry__reading *reading; /* passive: set by that dataset while it reads */
    ferry__reading at_fault;       /* the handler's copy of *reading */
} ferry__guard;

/* The thread's innermost region, or NULL. */
extern __thread ferry__guard *ferry__guard_top __attribute__((tls_model("initial-exec")));

/* Installs the SIGBUS handler (once per process; later calls return at once).
 * FERRY_EIO when sigaction fails. */
int ferry__guard_install(void);
/* Enters / leaves a region on this thread (regions nest). push clears g's
 * passive fields. */
void ferry__guard_push(ferry__guard *g);
void ferry__guard_pop(ferry__guard *g);

/* The error for a fault at addr in the mapping at base (NULL: not known) of the
 * file at path: FERRY_EIO "PATH: WHAT: the file was cut short while it was read
 * (offset X is past its end: N bytes now)". */
int ferry__guard_err(uintptr_t addr, const char *path, const void *base, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The passive region of the caller when it calls dataset `self` directly, or
 * NULL: then the dataset reads under a region of its own. Keep the two paths in
 * separate functions: a function that calls sigsetjmp saves every register it
 * uses and keeps its locals in memory, a cost the direct path should not pay. */
static inline ferry__guard *ferry__guard_direct(const void *self)
{
    ferry__guard *g = ferry__guard_top;
    return g && self && g->passive && g->direct == self ? g : NULL;
}

/* rc = call, under a region of its own; after a fault rc = rd->fault(rd, addr). */
#define FERRY__GUARDED(rc, rd, call)                                                               \
    do {                                                                                           \
        ferry__guard g_;                                                                           \
        ferry__guard_push(&g_);                                                                    \
        if (sigsetjmp(g_.jb, 0)) {                                                                 \
            rc = (rd)->fault((rd), g_.addr);                                                       \
        } else {                                                                                   \
            rc = (call);                                                                           \
            ferry__guard_pop(&g_);                                                                 \
        }                                                                                          \
    } while (0)

/* rc = call under the direct region g (see ferry__guard_direct), saying what is
 * read. */
#define FERRY__DIRECT_READ(rc, g, rd, call)                                                        \
    do {                                                                                           \
        (g)->reading = (rd);                                                                       \
        rc = (call);                                                                               \
        (g)->reading = NULL;                                                                       \
    } while (0)

/* Defines a dataset's get, `name`, that runs read(self, i, out, ctx) under the
 * caller's direct region or, called any other way, a region of its own; a fault
 * returns fault(&reading, addr) with the reading's arg = self, item = i. read must
 * not allocate (a fault would leak it). */
#define FERRY__GUARDED_GET(name, read, fault)                                                      \
    __attribute__((noinline)) static int name##_own(void *self, uint64_t i, ferry_sample *out,     \
                                                    ferry_ctx *ctx)                                \
    {                                                                                              \
        ferry__reading rd = {fault, self, i, NULL};                                                \
        int rc;                                                                                    \
        FERRY__GUARDED(rc, &rd, read(self, i, out, ctx));                                          \
        return rc;                                                                                 \
    }                                                                                              \
    static int name(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)                     \
    {                                                                                              \
        ferry__guard *g = ferry__guard_direct(self);                                               \
        if (!g)                                                                                    \
            return name##_own(self, i, out, ctx);                                                  \
        ferry__reading rd = {fault, self, i, NULL};                                                \
        int rc;                                                                                    \
        FERRY__DIRECT_READ(rc, g, &rd, read(self, i, out, ctx));                                   \
        return rc;                                                                                 \
    }

/* The same for a hint, `name`, over hint(self, indices, count, soon): under a
 * direct region a fault fails the sample in hand (item UINT64_MAX: "reading
 * ahead"); under its own it only ends the hint (the reads report the file). */
#define FERRY__GUARDED_HINT(name, hint, fault)                                                     \
    static int name##_quiet(const ferry__reading *rd_, uintptr_t addr_)                            \
    {                                                                                              \
        (void)rd_;                                                                                 \
        (void)addr_;                                                                               \
        return 0;                                                                                  \
    }                                                                                              \
    __attribute__((noinline)) static void name##_own(void *self, const uint64_t *indices,          \
                                                     size_t count, int soon)                       \
    {                                                                                              \
        ferry__reading rd = {name##_quiet, self, UINT64_MAX, NULL};                                \
        int rc;                                                                                    \
        FERRY__GUARDED(rc, &rd, (hint(self, indices, count, soon), 0));                            \
        (void)rc;                                                                                  \
    }                                                                                              \
    static void name(void *self, const uint64_t *indices, size_t count, int soon)                  \
    {                                                                                              \
        ferry__guard *g = ferry__guard_direct(self);                                               \
        if (!g) {                                                                                  \
            name##_own(self, indices, count, soon);                                                \
            return;                                                                                \
        }                                                                                          \
        ferry__reading rd = {fault, self, UINT64_MAX, NULL};                                       \
        int rc;                                                                                    \
        FERRY__DIRECT_READ(rc, g, &rd, (hint(self, indices, count, soon), 0));                     \
        (void)rc;                                                                                  \
    }

/* The error for a fault at addr inside the mapping m of the file at path, or 1
 * when addr is not inside m. */
static inline int ferry__guard_map_err(uintptr_t addr, const void *data, size_t size,
                                       const char *path, uint64_t item)
{
    if (!data || addr < (uintptr_t)data || addr - (uintptr_t)data >= size)
        return 1;
    if (item == UINT64_MAX)
        return ferry__guard_err(addr, path, data, "reading ahead");
    return ferry__guard_err(addr, path, data, "sample %llu", (unsigned long long)item);
}

#endif
