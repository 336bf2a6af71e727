/*
 * randread: the bare rate of the random-access benchmark's work, with no format
 * and no loader. The files are cut into slots of SIZE + 16 bytes (a record and
 * its header); every slot, in a shuffled order, has its SIZE bytes CRC-32C
 * checked (the SSE4.2 instruction, three streams side by side) and copied into a
 * batch buffer. THREADS threads split the order. The files are mapped fresh, as a
 * new loader process maps its shards, so the page faults of a first pass count.
 *
 * Usage: randread --size N [--threads N] [--seed N] FILE...
 * Prints one line of JSON: records, threads, seconds, records_per_s.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <nmmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 256
#define MAX_FILES 64

typedef struct file {
    const uint8_t *p;
    size_t size;
} file;

static file files[MAX_FILES];
static int nfiles;
static size_t piece;
static uint64_t *order; /* file << 48 | offset, shuffled */
static size_t nslots;
static uint64_t seed = 1;

typedef struct job {
    size_t begin, end; /* its part of order */
    uint32_t sum;
} job;

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

__attribute__((target("sse4.2"))) static uint32_t crc3(const uint8_t *p, size_t n)
{
    size_t third = n / 24 * 8;
    uint64_t a = ~0u, b = 0, c = 0, w;
    for (size_t i = 0; i < third; i += 8) {
        memcpy(&w, p + i, 8);
        a = _mm_crc32_u64(a, w);
        memcpy(&w, p + third + i, 8);
        b = _mm_crc32_u64(b, w);
        memcpy(&w, p + 2 * third + i, 8);
        c = _mm_crc32_u64(c, w);
    }
    for (size_t i = 3 * third; i < n; i++)
        a = _mm_crc32_u8((uint32_t)a, p[i]);
    /* the streams are not joined (a join is a few table lookups): the rate is what
     * is measured, not the value */
    return (uint32_t)(a ^ b ^ c);
}

static void *run(void *arg)
{
    job *j = arg;
    uint8_t *batch = malloc(BATCH * piece);
    if (!batch)
        return NULL;
    memset(batch, 0, BATCH * piece);
    uint32_t sum = 0; /* a local: the jobs share a cache line */
    for (size_t i = j->begin; i < j->end; i++) {
        const uint8_t *p = files[order[i] >> 48].p + (order[i] & (((uint64_t)1 << 48) - 1));
        sum += crc3(p, piece);
        memcpy(batch + (i % BATCH) * piece, p, piece);
    }
    j->sum = sum + batch[0];
    free(batch);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 1;
    int i = 1;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (!strcmp(argv[i], "--size"))
            piece = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else
            break;
    }
    if (!piece || threads < 1 || threads > 64 || i >= argc) {
        fprintf(stderr, "usage: randread --size N [--threads N] [--seed N] FILE...\n");
        return 2;
    }
    if (argc - i > MAX_FILES) {
        fprintf(stderr, "randread: at most %d files\n", MAX_FILES);
        return 2;
    }
    for (; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < piece) {
            fprintf(stderr, "randread: %s: cannot open, or smaller than a piece\n", argv[i]);
            return 1;
        }
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            fprintf(stderr, "randread: %s: cannot map\n", argv[i]);
            return 1;
        }
        files[nfiles].p = p;
        files[nfiles++].size = (size_t)st.st_size;
    }
    size_t stride = piece + 16;
    for (int k = 0; k < nfiles; k++)
        nslots += files[k].size / stride;
    order = malloc(nslots * sizeof *order);
    if (!order) {
        fprintf(stderr, "randread: out of memory\n");
        return 1;
    }
    size_t n = 0;
    for (int k = 0; k < nfiles; k++)
        for (size_t off = 16; off + piece <= files[k].size; off += stride)
            order[n++] = (uint64_t)k << 48 | off;
    nslots = n;
    uint64_t state = seed;
    for (size_t k = nslots; k > 1; k--) {
        size_t r = (size_t)(next(&state) % k);
        uint64_t t = order[k - 1];
        order[k - 1] = order[r];
        order[r] = t;
    }
    pthread_t tid[64];
    job jobs[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int t = 0; t < threads; t++) {
        jobs[t].begin = nslots * (size_t)t / (size_t)threads;
        jobs[t].end = nslots * (size_t)(t + 1) / (size_t)threads;
        jobs[t].sum = 0;
        if (pthread_create(&tid[t], NULL, run, &jobs[t]) != 0) {
            fprintf(stderr, "randread: cannot start a thread\n");
            return 1;
        }
    }
    uint32_t sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        sum += jobs[t].sum;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"records\": %zu, \"threads\": %d, \"seconds\": %.6f, \"records_per_s\": %.1f, "
           "\"checksum\": %u}\n",
           nslots, threads, s, (double)nslots / s, sum);
    return 0;
}
