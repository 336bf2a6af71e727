/*
 * The OS layer: clocks, threads, condition variables, the process's mappings,
 * strict number parsing.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t ferry_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ferry__thread_start(ferry__thread *t, void *(*fn)(void *), void *arg)
{
    int e = pthread_create(&t->t, NULL, fn, arg);
    if (e)
        return ferry__err(e == EAGAIN ? FERRY_ENOMEM : FERRY_EINVAL,
                          "cannot start a thread (error %d)", e);
    return 0;
}

void ferry__thread_join(ferry__thread *t)
{
    pthread_join(t->t, NULL);
}

int ferry__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return FERRY_ENOMEM;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int e = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return e ? FERRY_ENOMEM : 0;
}

bool ferry__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline_ns)
{
    if (deadline_ns == 0) {
        pthread_cond_wait(cv, m);
        return true;
    }
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    return pthread_cond_timedwait(cv, m, &ts) != ETIMEDOUT;
}

/* Decimal, or hexadecimal with an explicit 0x: a leading zero is not octal
 * ("010" from a launcher means ten). */
bool ferry__maps_open(ferry__maps *m)
{
    m->f = fopen("/proc/self/maps", "re");
    return m->f != NULL;
}

/* A line: "from-to perms offset major:minor inode [path]" (hex but the inode). */
bool ferry__maps_next(ferry__maps *m, ferry__mapping *out)
{
    while (fgets(m->line, sizeof m->line, m->f)) {
        unsigned long a, b;
        unsigned long long off, ino;
        int at = 0;
        if (sscanf(m->line, "%lx-%lx %*s %llx %*x:%*x %llu %n", &a, &b, &off, &ino, &at) < 4 || !at)
            continue;
        m->line[strcspn(m->line, "\n")] = 0;
        *out = (ferry__mapping){a, b, off, ino, m->line + at};
        return true;
    }
    return false;
}

void ferry__maps_close(ferry__maps *m)
{
    fclose(m->f);
    m->f = NULL;
}

static int number_base(const char **s)
{
    const char *p = *s;
    if (*p == '-' || *p == '+')
        p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return 16;
    return 10;
}

bool ferry__parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, number_base(&s));
    if (errno || *end || end == s || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool ferry__parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, number_base(&s));
    if (errno || *end || end == s)
        return false;
    *out = v;
    return true;
}
