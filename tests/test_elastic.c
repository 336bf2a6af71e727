/*
 * Elastic loading: the global batches (every rank's batch k together) are the
 * same samples for any world size that divides the global batch, with every
 * order; a state saved on one world size resumes on another with the same global
 * steps; bad resumes and damaged states are clear errors.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include <stdint.h>

#define G 12 /* the global batch: divided by 1, 2, 3, 4 and 6 */
#define MAXN 200
#define MAXSTEPS (MAXN / 1 + 2)
static const int worlds[] = {1, 2, 3, 4, 6};
#define NWORLDS (sizeof worlds / sizeof worlds[0])

/* S_DIST_PADDED: a distributed sampler without drop_last under a loader with it */
enum {
    S_SEQ,
    S_RANDOM,
    S_RANDOM_REPL,
    S_SUBSET,
    S_WEIGHTED,
    S_WEIGHTED_NOREPL,
    S_FIXED,
    S_WINDOW,
    S_DIST,
    S_DIST_PADDED,
    S_KINDS
};
static const char *kind_name[] = {
    "sequential",      "random", "random_repl", "subset",      "weighted",
    "weighted_norepl", "fixed",  "window",      "distributed", "distributed_padded"};

/* The global order of kind k over n samples (seed 5); for S_DIST the share of
 * (rank, world), which is what a user passes then. */
static ferry_sampler *make_sampler(int k, uint64_t n, int64_t rank, int64_t world, int drop_last)
{
    ferry_sampler *s = NULL;
    static uint64_t idx[MAXN];
    static double w[MAXN];
    for (uint64_t i = 0; i < n; i++) {
        idx[i] = (i * 7) % n;
        w[i] = 1.0 + (double)(i % 5);
    }
    switch (k) {
    case S_SEQ:
        CHECK_OK(ferry_sampler_sequential(&s, n));
        break;
    case S_RANDOM:
        CHECK_OK(ferry_sampler_random(&s, n, 5, 0, 0));
        break;
    case S_RANDOM_REPL:
        CHECK_OK(ferry_sampler_random(&s, n, 5, 1, n + 3));
        break;
    case S_SUBSET:
        CHECK_OK(ferry_sampler_subset_random(&s, idx, n > 3 ? n - 3 : n, 5));
        break;
    case S_WEIGHTED:
        CHECK_OK(ferry_sampler_weighted(&s, w, n, n + 1, 1, 5));
        break;
    case S_WEIGHTED_NOREPL:
        CHECK_OK(ferry_sampler_weighted(&s, w, n, n - 1, 0, 5));
        break;
    case S_FIXED: /* a curriculum: every index, some twice */
        CHECK_OK(ferry_sampler_fixed(&s, idx, n));
        break;
    case S_WINDOW: { /* shards of 7 samples, two at a time */
        static uint64_t bounds[MAXN / 7 + 2];
        uint64_t nshards = 0;
        for (uint64_t b = 0; b < n; b += 7)
            bounds[nshards++] = b;
        bounds[nshards] = n;
        CHECK_OK(ferry_sampler_window(&s, bounds, nshards, 2, 5));
        break;
    }
    default: {
        ferry_distributed_opts o = {n, rank, world, 1, 5, k == S_DIST ? drop_last : 0};
        CHECK_OK(ferry_sampler_distributed(&s, &o));
    }
    }
    return s;
}

/* One rank's epoch: steps[t] = the indices of its batch t (count in cnt[t]),
 * from batch `first`; returns the batches read. */
typedef struct {
    uint64_t idx[MAXSTEPS][G];
    uint32_t cnt[MAXSTEPS];
    size_t nsteps;
} epoch_t;

static void read_rest(ferry_loader *l, epoch_t *e, size_t first)
{
    ferry_batch *b;
    size_t t = first;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        CHECK_U64(ferry_batch_number(b), t);
        CHECK(t < MAXSTEPS);
        e->cnt[t] = ferry_batch_size(b);
        memcpy(e->idx[t], ferry_batch_indices(b), e->cnt[t] * sizeof(uint64_t));
        ferry_batch_release(b);
        t++;
    }
    CHECK_RC(rc, FERRY_END);
    e->nsteps = t;
}

typedef struct {
    ferry_dataset *ds;
    ferry_sampler *s;
    ferry_loader *l;
} rank_loader;

static void open_rank(rank_loader *r, int k, uint64_t n, int rank, int world, int drop_last,
                      uint32_t workers)
{
    char spec[64];
    snprintf(spec, sizeof spec, "synthetic:%llu,bytes=8", (unsigned long long)n);
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open(spec, &r->ds, &none));
    r->s = make_sampler(k, n, rank, world, drop_last);
    ferry_loader_opts o = test_loader_opts((uint32_t)(G / world), workers);
    o.sampler = r->s;
    o.drop_last = drop_last;
    o.seed = 5;
    if (k < S_DIST) { /* a distributed sampler is a share already */
        o.rank = rank;
        o.world_size = world;
    }
    CHECK_OK(ferry_loader_create(&r->l, r->ds, &o));
}

static void close_rank(rank_loader *r)
{
    ferry_loader_free(r->l);
    ferry_sampler_free(r->s);
    ferry_dataset_free(r->ds);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The union of the ranks' batch t (sorted) into out; returns its size. */
static size_t union_at(epoch_t *ranks, int world, size_t t, uint64_t *out)
{
    size_t m = 0;
    for (int r = 0; r < world; r++) {
        memcpy(out + m, ranks[r].idx[t], ranks[r].cnt[t] * sizeof *out);
        m += ranks[r].cnt[t];
    }
    qsort(out, m, sizeof *out, cmp_u64);
    return m;
}

static epoch_t ep[6];
static epoch_t one;

/* Global step t of `world` ranks against the 1-rank run's: the same samples,
 * and with drop_last 0 a last, partial step has PyTorch's padding besides: the
 * order's first ceil(m / W) * W - m positions again. */
static void check_step(const char *what, int world, int drop, size_t t)
{
    uint64_t u1[G], uw[G * 2], want[G * 2], order[G];
    size_t m1 = union_at(&one, 1, t, u1), mw = union_at(ep, world, t, uw);
    size_t pad = (m1 < G && !drop && m1 % world) ? world - m1 % world : 0;
    if (mw != m1 + pad)
        test_fail(__FILE__, __LINE__, "%s: global step %zu has %zu samples on %d ranks, %zu on 1",
                  what, t, mw, world, m1);
    /* the order's first positions: its first batch (or, for a short order, all of it) */
    size_t L = one.nsteps == 1 ? one.cnt[0] : G;
    memcpy(order, one.idx[0], one.cnt[0] * sizeof *order);
    memcpy(want, u1, m1 * sizeof *want);
    for (size_t i = 0; i < pad; i++)
        want[m1 + i] = order[i % L];
    qsort(want, mw, sizeof *want, cmp_u64);
    for (size_t i = 0; i < mw; i++)
        if (want[i] != uw[i])
            test_fail(__FILE__, __LINE__, "%s: global step %zu on %d ranks differs from 1 rank's",
                      what, t, world);
}

/* Every order, several sizes, both drop_last: the union of the ranks' t-th
 * batches is the 1-rank run's batch t for full batches; a last, partial batch
 * (drop_last 0) holds the same samples plus PyTorch's padding, the first
 * ceil(m / W) * W - m of the epoch's order again. Every rank has as many batches. */
TEST(global_batches_are_the_same_on_any_world_size)
{
    static const uint64_t sizes[] = {5, 12, 13, 22, 50, 97, 120, 130};
    for (int k = 0; k < S_KINDS; k++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int drop = 0; drop <= 1; drop++) {
                uint64_t n = sizes[si];
                rank_loader r1;
                open_rank(&r1, k, n, 0, 1, drop, 0);
                read_rest(r1.l, &one, 0);
                close_rank(&r1);
                for (size_t wi = 1; wi < NWORLDS; wi++) {
                    int W = worlds[wi];
                    for (int r = 0; r < W; r++) {
                        rank_loader rl;
                        open_rank(&rl, k, n, r, W, drop, (uint32_t)(r % 3));
                        read_rest(rl.l, &ep[r], 0);
                        close_rank(&rl);
                        if (ep[r].nsteps != one.nsteps)
                            test_fail(__FILE__, __LINE__,
                                      "%s n=%llu drop_last=%d: rank %d of %d has %zu batches, "
                                      "1 rank has %zu",
                                      kind_name[k], (unsigned long long)n, drop, r, W, ep[r].nsteps,
                                      one.nsteps);
                    }
                    char what[96];
                    snprintf(what, sizeof what, "%s n=%llu drop_last=%d", kind_name[k],
                             (unsigned long long)n, drop);
                    for (size_t t = 0; t < one.nsteps; t++)
                        check_step(what, W, drop, t);
                }
            }
}

/* The state saved on `from` ranks after k steps, then resumed on `to` ranks:
 * every global step after k is the uninterrupted 1-rank run's, and every sample
 * of the epoch comes exactly once (padding aside). Workers differ by rank. */
static void elastic_case(int kind, uint64_t n, int drop, int from, int to, size_t k)
{
    rank_loader r1;
    open_rank(&r1, kind, n, 0, 1, drop, 2);
    CHECK_OK(ferry_loader_start(r1.l, 3, 0));
    read_rest(r1.l, &one, 0);
    close_rank(&r1);

    uint8_t state[6][256];
    size_t len[6];
    for (int r = 0; r < from; r++) {
        rank_loader rl;
        open_rank(&rl, kind, n, r, from, drop, (uint32_t)(r % 3));
        CHECK_OK(ferry_loader_start(rl.l, 3, 0));
        for (size_t t = 0; t < k; t++) {
            ferry_batch *b;
            CHECK_OK(ferry_loader_next(rl.l, &b));
            ferry_batch_release(b);
        }
        CHECK_OK(ferry_loader_state_save(rl.l, state[r], sizeof state[r], &len[r]));
        CHECK_EQ(len[r], 116); /* under 1 KB whatever the dataset's size */
        /* the same on every rank */
        CHECK_EQ(len[r], len[0]);
        CHECK(memcmp(state[r], state[0], len[0]) == 0);
        close_rank(&rl);
    }
    for (int r = 0; r < to; r++) {
        rank_loader rl;
        open_rank(&rl, kind, n, r, to, drop, (uint32_t)((r + 1) % 3));
        uint64_t epoch, first;
        CHECK_OK(ferry_loader_state_check(rl.l, state[0], len[0], &epoch, &first));
        CHECK_U64(epoch, 3);
        CHECK_U64(first, k);
        CHECK_OK(ferry_loader_state_resume(rl.l, state[0], len[0]));
        read_rest(rl.l, &ep[r], k);
        CHECK_EQ(ep[r].nsteps, one.nsteps);
        close_rank(&rl);
    }
    char what[96];
    snprintf(what, sizeof what, "%s n=%llu drop_last=%d, %d ranks then %d", kind_name[kind],
             (unsigned long long)n, drop, from, to);
    for (size_t t = k; t < one.nsteps; t++)
        check_step(what, to, drop, t);
    if (kind != S_RANDOM && kind < S_DIST && kind != S_SEQ)
        return;
    /* a permutation: before the state and after it, every sample exactly once */
    static uint32_t seen[MAXN];
    memset(seen, 0, sizeof seen);
    for (size_t t = 0; t < one.nsteps; t++)
        for (uint32_t i = 0; i < one.cnt[t]; i++)
            seen[one.idx[t][i]]++;
    uint64_t once = 0;
    for (uint64_t i = 0; i < n; i++) {
        CHECK(seen[i] <= 1);
        once += seen[i];
    }
    CHECK_U64(once, drop ? n / G * G : n);
}

TEST(resume_on_another_world_size_continues_the_global_steps)
{
    static const int pairs[][2] = {{2, 3}, {2, 1}, {2, 6}, {3, 2}, {1, 4}, {4, 4}};
    for (int kind = 0; kind < S_KINDS; kind++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
            for (int drop = 0; drop <= 1; drop++) {
                elastic_case(kind, 97, drop, pairs[p][0], pairs[p][1], 3);
                elastic_case(kind, 100, drop, pairs[p][0], pairs[p][1], 8);
            }
}

/* A state at the epoch's end resumes to nothing left, on any world size. */
TEST(resume_at_the_end_of_an_epoch)
{
    elastic_case(S_RANDOM, 96, 0, 2, 3, 8);
    elastic_case(S_RANDOM, 100, 1, 4, 6, 8);
}

static void save_on(int world, uint32_t batch, uint8_t *state, size_t *len)
{
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    ferry_loader_opts o = test_loader_opts(batch, 0);
    o.shuffle = 1;
    o.seed = 5;
    o.rank = 0;
    o.world_size = world;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    CHECK_OK(ferry_loader_state_save(l, state, 256, len));
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

static int resume_on(int world, uint32_t batch, uint64_t seed, const uint8_t *state, size_t len)
{
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    ferry_loader_opts o = test_loader_opts(batch, 1);
    o.shuffle = 1;
    o.seed = seed;
    o.rank = world - 1;
    o.world_size = world;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    int rc = ferry_loader_state_resume(l, state, len);
    if (rc < 0)
        CHECK_CONTAINS(ferry_loader_errmsg(l), "loader state");
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    return rc;
}

TEST(bad_resumes_are_clear_errors)
{
    uint8_t state[256];
    size_t len;
    save_on(2, 12, state, &len); /* a global batch of 24 */
    CHECK_OK(resume_on(3, 8, 5, state, len));
    CHECK_OK(resume_on(4, 6, 5, state, len));
    CHECK_OK(resume_on(1, 24, 5, state, len));
    /* the global batch changed: the batch size that keeps it is named */
    CHECK_RC(resume_on(3, 12, 5, state, len), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "saved with a global batch of 24 (batch_size 12 x world_size 2); this "
                   "loader's is 36 (batch_size 12 x world_size 3). The global batch must stay "
                   "the same: on world_size 3 use batch_size 8");
    /* a world size that does not divide it: those that do */
    CHECK_RC(resume_on(5, 5, 5, state, len), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "world_size 5 does not divide it");
    CHECK_CONTAINS(ferry_last_errmsg(), "world_size 1 (batch_size 24), 2 (12), 3 (8), 4 (6), "
                                        "6 (4), 8 (3), 12 (2), 24 (1)");
    /* another order */
    CHECK_RC(resume_on(2, 12, 6, state, len), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved with another order: this loader's random sampler");
}

/* A stream's state is per rank: another world size is refused, naming why. */
TEST(stream_on_another_world_size_is_refused)
{
    ferry_dataset *ds;
    ferry_stream *none = NULL, *st;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    CHECK_OK(ferry_stream_from_dataset(&st, ds));
    ferry_loader_opts o = test_loader_opts(4, 0);
    o.rank = 0;
    o.world_size = 2;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    uint8_t state[512];
    size_t len;
    CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &len));
    ferry_loader_free(l);
    o.world_size = 3;
    o.batch_size = 4;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    CHECK_RC(ferry_loader_state_resume(l, state, len), FERRY_ESTATE);
    CHECK_CONTAINS(ferry_last_errmsg(), "cannot deal its shards again to world_size 3: resume a "
                                        "stream on 2 ranks");
    ferry_loader_free(l);
    o.world_size = 2;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    CHECK_OK(ferry_loader_state_resume(l, state, len));
    ferry_loader_free(l);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* A version-2 map-style state (a 96-byte head, no order recorded) still resumes
 * on the same batch size. */
TEST(version_2_map_states_still_resume)
{
    uint8_t v3[256], v2[128];
    size_t len;
    save_on(1, 10, v3, &len);
    CHECK_EQ(len, 116);
    memcpy(v2, v3, 96);
    v2[8] = 2;                              /* version */
    memset(v2 + 56, 0xff, 8);               /* rank -1, as a map-style loader kept it */
    uint32_t crc = ferry_crc32c(0, v2, 96); /* little-endian, as the blob's */
    for (int i = 0; i < 4; i++)
        v2[96 + i] = (uint8_t)(crc >> (8 * i));
    CHECK_OK(resume_on(1, 10, 5, v2, 100));
    CHECK_RC(resume_on(1, 5, 5, v2, 100), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved with batch_size 10, this loader has 5");
}

/* Every bit flipped and every cut: a clear error, never a resume elsewhere. */
TEST(damaged_map_states_are_refused)
{
    uint8_t state[256], bad[256];
    size_t len;
    save_on(2, 6, state, &len);
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    ferry_loader_opts o = test_loader_opts(4, 0);
    o.shuffle = 1;
    o.seed = 5;
    o.rank = 1;
    o.world_size = 3;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    for (size_t i = 0; i < len * 8; i++) {
        memcpy(bad, state, len);
        bad[i / 8] ^= (uint8_t)(1u << (i % 8));
        int rc = ferry_loader_state_resume(l, bad, len);
        if (rc != FERRY_ECORRUPT && rc != FERRY_ENOTSUP)
            test_fail(__FILE__, __LINE__, "bit %zu flipped: %d (%s)", i, rc, ferry_last_errmsg());
        CHECK_CONTAINS(ferry_last_errmsg(), "loader state");
    }
    for (size_t cut = 0; cut < len; cut++)
        CHECK(ferry_loader_state_resume(l, state, cut) < 0);
    CHECK_OK(ferry_loader_state_resume(l, state, len));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    CHECK_U64(ferry_batch_number(b), 1);
    ferry_batch_release(b);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* rank and world_size on the loader and a distributed sampler: one place only. */
TEST(split_twice_is_refused)
{
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    ferry_sampler *s = make_sampler(S_DIST, 100, 1, 2, 0);
    ferry_loader_opts o = test_loader_opts(4, 0);
    o.sampler = s;
    o.rank = 0;
    o.world_size = 2;
    ferry_loader *l;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "the distributed sampler is split for rank 1 of 2 "
                                        "already, but rank and world_size are 0 of 2");
    o.rank = 1;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_loader_free(l);
    ferry_sampler_free(s);
    ferry_dataset_free(ds);
}
