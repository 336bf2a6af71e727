/*
 * membus: what the memory bus allows a reader of page-cached files, the
 * ceiling the readers' targets are measured under. For THREADS threads, each
 * taking an equal part of FILE:
 *   read   pread into a reused 1 MiB buffer (what dd does: one copy, by the
 *          kernel, out of the page cache)
 *   copy   pread as above, then memcpy of every byte into an 8 MiB ring of its
 *          own (the least a loader must do: the byte crosses the bus into the
 *          batch's slot as well)
 *   scan   read the file's pages through a mapping (each 8-byte word loaded
 *          once, no copy: what a scan of a mapping pays)
 * Each is run REPEATS times (default 3) and the best is kept.
 *
 * Usage: membus [--threads N] [--repeats N] FILE
 * Prints one line of JSON: threads, bytes, and GB/s of read, copy and scan.
 */
#define _GNU_SOURCE
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

#define CHUNK (1u << 20)
#define RING (8u << 20)

enum mode { READ, COPY, SCAN };

typedef struct part {
    int fd;
    const unsigned char *map;
    off_t off, len;
    enum mode mode;
    unsigned char *buf, *ring;
    uint64_t sink;
} part;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *run(void *arg)
{
    part *p = arg;
    size_t at = 0;
    if (p->mode == SCAN) {
        const uint64_t *w = (const uint64_t *)(p->map + p->off);
        uint64_t x = 0;
        for (off_t i = 0; i < p->len / 8; i++)
            x ^= w[i];
        p->sink = x;
        return NULL;
    }
    for (off_t o = 0; o < p->len;) {
        size_t want = p->len - o < CHUNK ? (size_t)(p->len - o) : CHUNK;
        ssize_t n = pread(p->fd, p->buf, want, p->off + o);
        if (n <= 0)
            break;
        if (p->mode == COPY) {
            if (at + (size_t)n > RING)
                at = 0;
            memcpy(p->ring + at, p->buf, (size_t)n);
            at += (size_t)n;
        }
        o += n;
    }
    p->sink = p->mode == COPY ? p->ring[at ? at - 1 : 0] : p->buf[0];
    return NULL;
}

static double best_of(part *parts, int threads, int repeats, enum mode mode, off_t size)
{
    double best = 0;
    for (int r = 0; r < repeats; r++) {
        pthread_t t[64];
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            parts[i].mode = mode;
            pthread_create(&t[i], NULL, run, &parts[i]);
        }
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
        double gbs = size / (now() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

int main(int argc, char **argv)
{
    int threads = 1, repeats = 3;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else
            path = argv[i];
    }
    if (!path || threads < 1 || threads > 64 || repeats < 1) {
        fprintf(stderr, "usage: membus [--threads N] [--repeats N] FILE\n");
        return 2;
    }
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 8 * threads) {
        perror(path);
        return 1;
    }
    const unsigned char *map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    part parts[64];
    off_t each = st.st_size / threads / 8 * 8;
    for (int i = 0; i < threads; i++) {
        parts[i] = (part){.fd = fd, .map = map, .off = each * i};
        parts[i].len = i == threads - 1 ? st.st_size - parts[i].off : each;
        parts[i].buf = aligned_alloc(4096, CHUNK);
        parts[i].ring = aligned_alloc(4096, RING);
        if (!parts[i].buf || !parts[i].ring)
            return 1;
        memset(parts[i].ring, 0, RING);
    }
    double rd = best_of(parts, threads, repeats, READ, st.st_size);
    double cp = best_of(parts, threads, repeats, COPY, st.st_size);
    double sc = best_of(parts, threads, repeats, SCAN, st.st_size);
    printf("{\"threads\": %d, \"bytes\": %lld, \"read_gb_per_s\": %.2f, "
           "\"copy_gb_per_s\": %.2f, \"scan_gb_per_s\": %.2f}\n",
           threads, (long long)st.st_size, rd, cp, sc);
    return 0;
}
