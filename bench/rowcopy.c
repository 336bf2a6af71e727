/*
 * rowcopy: the bare rate of the arrays benchmark's work, with no format and no
 * loader. It maps FILE fresh and copies pieces of it into batch buffers in the
 * order ferry's loader visits them (the same permutation: ferry_sampler_random
 * with the same seed, epoch 0), THREADS threads taking whole batches in turn.
 *   rows:    piece i is ROW bytes at OFFSET + i * ROW (a .npy's rows);
 *   windows: piece i is two copies of ROW bytes, at OFFSET + i * STEP and one
 *            token (TOKEN bytes) later (an llm.c shard's input and target).
 * Only the permutation comes from libferry; the orders are made before the clock
 * starts. With --epochs E it makes E passes, pass e in the order of epoch e (as
 * `ferry bench --shuffle --epochs E`).
 *
 * Usage: rowcopy --count N --row BYTES --offset BYTES [--step BYTES --token BYTES]
 *                [--batch N] [--threads N] [--seed N] [--epochs E] FILE
 * Prints one line of JSON: rows, threads, seconds, rows_per_s.
 */
#define _GNU_SOURCE
#include <ferry/ferry.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const uint8_t *base;
static uint64_t *orders, *order, count, batch = 256, nthreads = 1;
static size_t row, step, token;
static uint64_t offset;

typedef struct job {
    unsigned id;
    uint64_t sum;
} job;

static void *run(void *arg)
{
    job *j = arg;
    size_t piece = token ? 2 * row : row;
    uint8_t *buf = aligned_alloc(64, (batch * piece + 63) / 64 * 64);
    uint64_t nb = (count + batch - 1) / batch, sum = 0;
    for (uint64_t b = j->id; b < nb; b += nthreads) {
        uint64_t first = b * batch, n = count - first < batch ? count - first : batch;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = order[first + k];
            uint8_t *dst = buf + k * piece;
            if (token) {
                const uint8_t *p = base + offset + i * step;
                memcpy(dst, p, row);
                memcpy(dst + row, p + token, row);
            } else {
                memcpy(dst, base + offset + i * row, row);
            }
        }
        sum += buf[(n - 1) * piece]; /* keep the copies */
    }
    j->sum = sum;
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    uint64_t seed = 0, epochs = 1;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 < argc && !strcmp(a, "--count"))
            count = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--row"))
            row = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--offset"))
            offset = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--step"))
            step = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--token"))
            token = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--batch"))
            batch = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--threads"))
            nthreads = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--seed"))
            seed = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && !strcmp(a, "--epochs"))
            epochs = strtoull(argv[++i], NULL, 10);
        else
            path = a;
    }
    if (!path || !count || !row || !batch || !nthreads || nthreads > 64 || (token && !step) ||
        !epochs || epochs > 1000) {
        fprintf(stderr, "usage: rowcopy --count N --row BYTES --offset BYTES [--step BYTES "
                        "--token BYTES] [--batch N] [--threads N] [--seed N] [--epochs E] "
                        "FILE\n");
        return 2;
    }
    ferry_sampler *s;
    orders = malloc(epochs * count * sizeof *orders);
    if (!orders || ferry_sampler_random(&s, count, seed, 0, 0) != 0) {
        fprintf(stderr, "rowcopy: %s\n", orders ? ferry_last_errmsg() : "out of memory");
        return 1;
    }
    for (uint64_t e = 0; e < epochs; e++)
        if (ferry_sampler_set_epoch(s, e) != 0 ||
            ferry_sampler_fill(s, 0, count, orders + e * count) != 0) {
            fprintf(stderr, "rowcopy: %s\n", ferry_last_errmsg());
            return 1;
        }
    ferry_sampler_free(s);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(path);
        return 1;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    base = m;
    pthread_t th[64];
    job jobs[64];
    uint64_t sum = 0;
    for (uint64_t e = 0; e < epochs; e++) {
        order = orders + e * count;
        for (unsigned t = 0; t < nthreads; t++) {
            jobs[t].id = t;
            pthread_create(&th[t], NULL, run, &jobs[t]);
        }
        for (unsigned t = 0; t < nthreads; t++) {
            pthread_join(th[t], NULL);
            sum += jobs[t].sum;
        }
    }
    munmap(m, (size_t)st.st_size);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"rows\": %llu, \"threads\": %llu, \"seconds\": %.6f, \"rows_per_s\": %.1f, "
           "\"check\": %llu}\n",
           (unsigned long long)(count * epochs), (unsigned long long)nthreads, secs,
           (double)(count * epochs) / secs, (unsigned long long)sum);
    free(orders);
    return 0;
}
