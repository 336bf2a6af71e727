/*
 * The driver of elastic_vs.py: a map-style loader state saved on 2 ranks,
 * resumed on 2 ranks (the same world size) and on 3 (another), in turns, best
 * of R rounds each; and the state's size for several dataset sizes.
 *
 *   elastic_bench SAMPLES BYTES GLOBAL_BATCH WORKERS REPEATS
 *
 * Each round, for each world size W in turn: every rank r of W (one after
 * another in this process, W loaders) is created with batch_size G / W,
 * resumes the state (saved by rank 0 of 2 at 40% of the epoch) and reads to
 * the epoch's end. Timed, the mean over the ranks: ferry_loader_state_resume
 * alone, and up to the first batch; summed over the ranks: the rest of the
 * epoch. Every
 * remaining sample must come exactly once over the ranks (else exit 1: SAMPLES
 * is to be a multiple of GLOBAL_BATCH, so that no padding repeats a sample).
 * Prints one JSON line.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", what, ferry_strerror(rc), ferry_last_errmsg());
    exit(1);
}

static ferry_loader *open_rank(ferry_dataset *ds, int rank, int world, uint32_t G, uint32_t workers)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = G / (uint32_t)world;
    o.num_workers = workers;
    o.shuffle = 1;
    o.seed = 7;
    o.rank = rank;
    o.world_size = world;
    ferry_loader *l;
    int rc = ferry_loader_create(&l, ds, &o);
    if (rc)
        die("ferry_loader_create", rc);
    return l;
}

typedef struct {
    double resume, first, rest;
} timing;

/* Every rank of `world` resumes `state` and reads the rest of the epoch. */
static timing resume_on(ferry_dataset *ds, uint64_t n, int world, uint32_t G, uint32_t workers,
                        const uint8_t *state, size_t len, uint64_t skipped_before, uint8_t *seen)
{
    timing t = {0, 0, 0};
    memset(seen, 0, n);
    uint64_t count = skipped_before;
    for (int r = 0; r < world; r++) {
        ferry_loader *l = open_rank(ds, r, world, G, workers);
        double t0 = now();
        int rc = ferry_loader_state_resume(l, state, len);
        if (rc)
            die("ferry_loader_state_resume", rc);
        double t1 = now();
        ferry_batch *b;
        int first = 1;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            if (first) {
                double t2 = now();
                t.resume += (t1 - t0) / world;
                t.first += (t2 - t0) / world;
                first = 0;
            }
            const uint64_t *idx = ferry_batch_indices(b);
            for (uint32_t i = 0; i < ferry_batch_size(b); i++)
                seen[idx[i]]++;
            ferry_batch_release(b);
        }
        if (rc != FERRY_END)
            die("ferry_loader_next", rc);
        t.rest += now() - t0;
        ferry_loader_free(l);
    }
    for (uint64_t i = 0; i < n; i++) {
        count += seen[i];
        if (seen[i] > 1) {
            fprintf(stderr, "world %d: sample %llu came %u times\n", world, (unsigned long long)i,
                    seen[i]);
            exit(1);
        }
    }
    if (count != n) {
        fprintf(stderr, "world %d: %llu of %llu samples came\n", world, (unsigned long long)count,
                (unsigned long long)n);
        exit(1);
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: elastic_bench SAMPLES BYTES GLOBAL_BATCH WORKERS REPEATS\n");
        return 2;
    }
    uint64_t n = strtoull(argv[1], NULL, 10), bytes = strtoull(argv[2], NULL, 10);
    uint32_t G = (uint32_t)atoi(argv[3]), workers = (uint32_t)atoi(argv[4]);
    int repeats = atoi(argv[5]);
    char spec[128];
    snprintf(spec, sizeof spec, "synthetic:%llu,bytes=%llu", (unsigned long long)n,
             (unsigned long long)bytes);
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    int rc = ferry_source_open(spec, &ds, &none);
    if (rc)
        die(spec, rc);

    /* the state: rank 0 of 2, 40% into the epoch; the samples handed out before */
    ferry_loader *l = open_rank(ds, 0, 2, G, workers);
    uint64_t k = ferry_loader_len(l) * 2 / 5;
    uint8_t state[256];
    size_t len;
    ferry_batch *b;
    for (uint64_t i = 0; i < k; i++) {
        if ((rc = ferry_loader_next(l, &b)))
            die("ferry_loader_next", rc);
        ferry_batch_release(b);
    }
    if ((rc = ferry_loader_state_save(l, state, sizeof state, &len)))
        die("ferry_loader_state_save", rc);
    ferry_loader_free(l);

    uint8_t *seen = malloc(n);
    if (!seen)
        return 1;
    timing best[2] = {{1e9, 1e9, 1e9}, {1e9, 1e9, 1e9}};
    for (int round = 0; round < repeats; round++)
        for (int w = 0; w < 2; w++) {
            timing t = resume_on(ds, n, w ? 3 : 2, G, workers, state, len, k * G, seen);
            best[w].resume = t.resume < best[w].resume ? t.resume : best[w].resume;
            best[w].first = t.first < best[w].first ? t.first : best[w].first;
            best[w].rest = t.rest < best[w].rest ? t.rest : best[w].rest;
        }
    free(seen);

    /* the state's size for other dataset sizes: map-style, so the same */
    static const uint64_t sizes[] = {1000, 1000000, 1000000000, 1000000000000ull};
    size_t sizes_len[4];
    for (int i = 0; i < 4; i++) {
        ferry_dataset *d;
        snprintf(spec, sizeof spec, "synthetic:%llu,bytes=8", (unsigned long long)sizes[i]);
        if ((rc = ferry_source_open(spec, &d, &none)))
            die(spec, rc);
        ferry_loader *m = open_rank(d, 1, 4, G, 0);
        sizes_len[i] = ferry_loader_state_size(m);
        ferry_loader_free(m);
        ferry_dataset_free(d);
    }
    ferry_dataset_free(ds);
    printf("{\"state_bytes\": %zu, \"steps_before\": %llu, \"epoch_steps\": %llu,"
           " \"same\": {\"resume_s\": %.9f, \"first_s\": %.9f, \"rest_s\": %.9f},"
           " \"other\": {\"resume_s\": %.9f, \"first_s\": %.9f, \"rest_s\": %.9f},"
           " \"state_bytes_by_samples\": {\"1000\": %zu, \"1000000\": %zu, \"1000000000\": %zu,"
           " \"1000000000000\": %zu}}\n",
           len, (unsigned long long)k, (unsigned long long)(n / G + (n % G != 0)), best[0].resume,
           best[0].first, best[0].rest, best[1].resume, best[1].first, best[1].rest, sizes_len[0],
           sizes_len[1], sizes_len[2], sizes_len[3]);
    return 0;
}
