/*
 * Allocation. One place for every allocation, so that the tests can make any one of
 * them fail (the out-of-memory tests walk a constructor through each in turn).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Per thread, so that tests that inject failures do not disturb other threads. */
static _Thread_local long fail_countdown = -1;
static _Thread_local long alloc_count;

long ferry__test_fail_alloc(long n)
{
    long seen = alloc_count;
    alloc_count = 0;
    fail_countdown = n < 0 ? -1 : n;
    return seen;
}

static bool inject_failure(void)
{
    alloc_count++;
    if (fail_countdown < 0)
        return false;
    if (fail_countdown == 0) {
        fail_countdown = -1;
        return true;
    }
    fail_countdown--;
    return false;
}

void *ferry__malloc(size_t n)
{
    if (inject_failure())
        return NULL;
    return malloc(n ? n : 1);
}

void *ferry__calloc(size_t count, size_t size)
{
    if (inject_failure())
        return NULL;
    if (count == 0 || size == 0)
        count = size = 1;
    return calloc(count, size);
}

void *ferry__realloc(void *p, size_t n)
{
    if (inject_failure())
        return NULL;
    return realloc(p, n ? n : 1);
}

void ferry__free(void *p)
{
    free(p);
}

void *ferry__aligned_alloc(size_t n)
{
    if (inject_failure())
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, ferry__align64(n ? n : 1)) != 0)
        return NULL;
    return p;
}

void ferry__aligned_free(void *p)
{
    free(p);
}

char *ferry__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ferry__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
