/*
 * Guarded reads of mapped files. A file mapped by a reader can be cut short by
 * another process while it is read; touching a page past its new end raises
 * SIGBUS, which by default kills the process. A reader that copies out of a
 * mapping does so inside a guarded region instead:
 *
 *     ferry__guard g;
 *     ferry__guard_push(&g);
 *     if (sigsetjmp(g.jb, 0))
 *         return ferry__err(FERRY_EIO, "%s: ... cut short under the reader", name);
 *     rc = read_from_the_map(...);
 *     ferry__guard_pop(&g);
 *
 * A fault inside the region returns to the sigsetjmp with 1 and g.addr set to
 * the faulting address (the guard is already popped then). sigsetjmp must be
 * called in the function that owns g, as the whole controlling expression of the
 * if (C11 7.13.1.1), and the region must not hold locks or allocations that the
 * fault path would leak, nor change non-volatile locals that the fault path reads.
 *
 * The cost on the hot path is a sigsetjmp without the signal mask (no system
 * call: registers saved to g.jb) and two stores to a thread-local pointer.
 *
 * The handler is process-wide, installed once by ferry__guard_install (the
 * mapped readers call it when they open). A SIGBUS that is not a fault inside a
 * guarded region of the faulting thread goes on to the handler that was installed
 * before (or, when that was the default, kills the process as it would have).
 */
#ifndef FERRY_GUARD_H
#define FERRY_GUARD_H

#include "internal.h"

#include <setjmp.h>
#include <stdint.h>

typedef struct ferry__guard {
    sigjmp_buf jb;
    struct ferry__guard *prev; /* the enclosing region on this thread */
    uintptr_t addr;            /* where the fault was, after one */
} ferry__guard;

/* Installs the SIGBUS handler (once per process; later calls return at once).
 * FERRY_EIO when sigaction fails. */
int ferry__guard_install(void);
/* Enters / leaves a guarded region on this thread (regions nest). */
void ferry__guard_push(ferry__guard *g);
void ferry__guard_pop(ferry__guard *g);

/* The error for a fault at g->addr in the mapping at base (NULL: not known) of
 * the file at path: FERRY_EIO "PATH: WHAT: the file was cut short while it was
 * read (offset X is past its end: N bytes now)". */
int ferry__guard_err(const ferry__guard *g, const char *path, const void *base, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

#endif
