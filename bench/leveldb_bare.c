/*
 * leveldb_bare: the floor of a shuffled read of a LevelDB through its C API,
 * with no format, no decoder and no loader. The keys are listed in key order
 * (one iterator pass, as a reader's key index is built), shuffled with a fixed
 * seed, and split between THREADS threads; each thread reads its keys and
 * copies every value into a batch buffer of 256 slots, the least a loader must
 * do. Modes:
 *   get     leveldb_get (the value copied by the library into a malloc'd buffer,
 *           then into the slot, then freed: what plyvel's db.get does below Python)
 *   seek    one iterator per thread, leveldb_iter_seek, the value copied from the
 *           library's block into the slot
 *   sorted  as seek, each batch's keys visited in key order (the values still
 *           land in the shuffled order's slots)
 *   nocopy  as seek, the value's first and last byte touched, not copied
 *   ahead   as sorted, with AHEAD iterators in a ring: the seek of the key
 *           AHEAD - 1 places on is made, and its value's lines prefetched, before
 *           a value is copied, so that the misses of both overlap
 * --verify sets verify_checksums on the reads.
 *
 * Usage: leveldb_bare [--mode get|seek|sorted|nocopy|ahead] [--threads N] [--verify]
 *                     [--epochs N] [--seed N] DIR
 * Prints one line of JSON: mode, reads, threads, seconds, reads_per_s,
 * cpu_us_per_read (the threads' CPU time over the reads, without the listing).
 */
#define _GNU_SOURCE
#include <leveldb/c.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 256
#define SLOT 8192
#define AHEAD 4

typedef struct key {
    char *k;
    size_t len;
} key;

static leveldb_t *db;
static leveldb_readoptions_t *ro;
static key *keys;
static size_t nkeys;
static const char *mode = "seek";
static int epochs = 1;

typedef struct job {
    size_t from, to;
    double cpu;
    unsigned long long bytes;
} job;

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_key(const void *a, const void *b)
{
    const key *x = *(const key *const *)a, *y = *(const key *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->k, y->k, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void die(const char *what, char *err)
{
    fprintf(stderr, "leveldb_bare: %s: %s\n", what, err ? err : "failed");
    exit(1);
}

static void *run(void *arg)
{
    job *j = arg;
    static __thread unsigned char slots[BATCH][SLOT];
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    bool sorted = !strcmp(mode, "sorted"), get = !strcmp(mode, "get");
    bool copy = strcmp(mode, "nocopy") != 0, ahead = !strcmp(mode, "ahead");
    sorted = sorted || ahead;
    leveldb_iterator_t *ring[AHEAD];
    const char *val[AHEAD];
    size_t vlen[AHEAD];
    for (int r = 0; r < AHEAD; r++)
        ring[r] = leveldb_create_iterator(db, ro);
    const key *order[BATCH];
    size_t slot_of[BATCH];
    unsigned long long sum = 0;
    double c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (int e = 0; e < epochs; e++)
        for (size_t b = j->from; b < j->to; b += BATCH) {
            size_t n = j->to - b < BATCH ? j->to - b : BATCH;
            for (size_t i = 0; i < n; i++)
                order[i] = &keys[b + i];
            if (sorted)
                qsort(order, n, sizeof *order, by_key);
            for (size_t i = 0; i < n; i++)
                slot_of[i] = (size_t)(order[i] - &keys[b]);
            if (ahead) {
                for (size_t i = 0; i < n + AHEAD - 1; i++) {
                    if (i < n) {
                        int r = (int)(i % AHEAD);
                        leveldb_iter_seek(ring[r], order[i]->k, order[i]->len);
                        if (!leveldb_iter_valid(ring[r]))
                            die("seek", NULL);
                        val[r] = leveldb_iter_value(ring[r], &vlen[r]);
                        for (size_t o = 0; o < vlen[r]; o += 64)
                            __builtin_prefetch(val[r] + o);
                    }
                    if (i >= AHEAD - 1) {
                        size_t at = i - (AHEAD - 1);
                        int r = (int)(at % AHEAD);
                        memcpy(slots[slot_of[at]], val[r], vlen[r] < SLOT ? vlen[r] : SLOT);
                        j->bytes += vlen[r];
                    }
                }
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                const key *k = order[i];
                size_t vl = 0;
                if (get) {
                    char *err = NULL;
                    char *v = leveldb_get(db, ro, k->k, k->len, &vl, &err);
                    if (err || !v)
                        die("get", err);
                    memcpy(slots[slot_of[i]], v, vl < SLOT ? vl : SLOT);
                    leveldb_free(v);
                } else {
                    leveldb_iter_seek(it, k->k, k->len);
                    if (!leveldb_iter_valid(it))
                        die("seek", NULL);
                    const char *v = leveldb_iter_value(it, &vl);
                    if (copy)
                        memcpy(slots[slot_of[i]], v, vl < SLOT ? vl : SLOT);
                    else
                        sum += (unsigned char)v[0] + (unsigned char)v[vl - 1];
                }
                j->bytes += vl;
            }
        }
    j->cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    j->bytes += sum & 1;
    leveldb_iter_destroy(it);
    for (int r = 0; r < AHEAD; r++)
        leveldb_iter_destroy(ring[r]);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 1, verify = 0;
    unsigned long long seed = 1;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            mode = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
            epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--verify"))
            verify = 1;
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr,
                    "usage: leveldb_bare [--mode get|seek|sorted|nocopy|ahead] [--threads N] "
                    "[--verify] [--epochs N] [--seed N] DIR\n");
            return 2;
        }
    }
    if (!dir || threads < 1 || threads > 64 || epochs < 1)
        return 2;
    char *err = NULL;
    leveldb_options_t *opts = leveldb_options_create();
    db = leveldb_open(opts, dir, &err);
    if (!db)
        die(dir, err);
    ro = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(ro, (unsigned char)verify);
    size_t cap = 1024;
    keys = malloc(cap * sizeof *keys);
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t kl;
        const char *k = leveldb_iter_key(it, &kl);
        if (nkeys == cap)
            keys = realloc(keys, (cap *= 2) * sizeof *keys);
        keys[nkeys].k = malloc(kl ? kl : 1);
        memcpy(keys[nkeys].k, k, kl);
        keys[nkeys++].len = kl;
    }
    leveldb_iter_destroy(it);
    for (size_t i = nkeys; i > 1; i--) { /* Fisher-Yates, splitmix64 */
        seed += 0x9e3779b97f4a7c15ull;
        unsigned long long z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        size_t r = (size_t)(z % i);
        key t = keys[i - 1];
        keys[i - 1] = keys[r];
        keys[r] = t;
    }
    pthread_t th[64];
    job jobs[64];
    /* whole batches to each thread, as a loader's workers take them */
    size_t nb = (nkeys + BATCH - 1) / BATCH;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){nb * t / threads * BATCH, nb * (t + 1) / threads * BATCH, 0, 0};
        if (jobs[t].to > nkeys)
            jobs[t].to = nkeys;
    }
    double t0 = now(CLOCK_MONOTONIC);
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, run, &jobs[t]);
    double cpu = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        cpu += jobs[t].cpu;
    }
    double secs = now(CLOCK_MONOTONIC) - t0;
    size_t reads = nkeys * (size_t)epochs;
    printf("{\"mode\": \"%s\", \"verify\": %d, \"reads\": %zu, \"threads\": %d, \"seconds\": %.6f, "
           "\"reads_per_s\": %.1f, \"cpu_us_per_read\": %.3f}\n",
           mode, verify, reads, threads, secs, reads / secs, cpu / reads * 1e6);
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i].k);
    free(keys);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
    leveldb_options_destroy(opts);
    return 0;
}
