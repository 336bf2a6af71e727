/*
 * Loader state: a stream loader (shards of different lengths, a shuffle buffer,
 * group-batch, repeat, take and skip) stopped after k batches and resumed from its
 * state, with another number of workers, hands out exactly the batches of an
 * uninterrupted run; map-style loaders too; and states from another source, batch
 * size, seed or a damaged blob are clear errors.
 */
#include "harness.h"

#include <ferry/ferry.h>

#define MAXB 1024

static uint64_t batch_hash(const ferry_batch *b)
{
    uint64_t h = test_hash(1469598103934665603ull, &(uint32_t){ferry_batch_size(b)}, 4);
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field((ferry_batch *)b, f, &t));
        h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        if (ferry_batch_field_info(b, f)->variable) {
            ferry_tensor len;
            CHECK_OK(ferry_batch_lengths((ferry_batch *)b, f, &len));
            h = test_hash(h, len.data, ferry_tensor_nbytes(&len));
        }
    }
    return h;
}

static int64_t key_by_label(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    (void)fields;
    (void)arg;
    int64_t v;
    memcpy(&v, s->data[1], 8);
    return v % 3;
}

typedef struct chain {
    ferry_dataset *ds;
    ferry_stream *st;
} chain;

/* synthetic samples through skip, shuffle, group-batch, repeat and take */
static void make_chain(chain *c, const char *spec, uint32_t batch)
{
    ferry_stream *unused = NULL;
    CHECK_OK(ferry_source_open(spec, &c->ds, &unused));
    CHECK(c->ds != NULL);
    ferry_stream *st;
    int rc = ferry_stream_from_dataset(&st, c->ds);
    if (!rc)
        rc = ferry_stream_skip(&st, st, 3);
    if (!rc)
        rc = ferry_stream_shuffle(&st, st, 37, 11);
    if (!rc)
        rc = ferry_stream_group_batch(&st, st, key_by_label, NULL, batch, 4 * batch);
    if (!rc)
        rc = ferry_stream_repeat(&st, st, 2);
    if (!rc)
        rc = ferry_stream_take(&st, st, 400);
    CHECK_OK(rc);
    c->st = st;
}

static void free_chain(chain *c)
{
    ferry_stream_free(c->st);
    ferry_dataset_free(c->ds);
}

static void opts_for(ferry_loader_opts *o, uint32_t workers, uint32_t batch)
{
    ferry_loader_opts_default(o);
    o->batch_size = batch;
    o->num_workers = workers;
    o->stream_shards = 3;
    o->rank = 0;
    o->world_size = 1;
    o->seed = 5;
}

/* Reads until the end (or `max` batches); returns how many, hashes in h. */
static size_t read_batches(ferry_loader *l, uint64_t *h, size_t max)
{
    size_t n = 0;
    for (; n < max; n++) {
        ferry_batch *b;
        int rc = ferry_loader_next(l, &b);
        if (rc == FERRY_END)
            break;
        CHECK_OK(rc);
        CHECK(n < MAXB);
        h[n] = batch_hash(b);
        ferry_batch_release(b);
    }
    return n;
}

static const char *SPEC = "synthetic:1000,bytes=24,var=20,classes=7";

TEST(stream_resume_matches_an_uninterrupted_run)
{
    static uint64_t ref[MAXB], got[MAXB];
    chain c;
    make_chain(&c, SPEC, 8);
    ferry_loader_opts o;
    opts_for(&o, 2, 8);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, c.st, &o));
    size_t total = read_batches(l, ref, MAXB);
    ferry_loader_free(l);
    CHECK(total > 50);
    /* group-batch gives short batches: the run has some */
    static const size_t cuts[] = {0, 1, 2, 5, 17, 60, 0 /* total - 1 */, 0 /* total */};
    static const uint32_t workers_before[] = {2, 0, 3, 1, 2, 0, 2, 1};
    static const uint32_t workers_after[] = {0, 2, 1, 3, 0, 2, 1, 0};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        size_t cut = k == 6 ? total - 1 : k == 7 ? total : cuts[k];
        chain a, b;
        make_chain(&a, SPEC, 8);
        make_chain(&b, SPEC, 8);
        ferry_loader_opts oa, ob;
        opts_for(&oa, workers_before[k], 8);
        opts_for(&ob, workers_after[k], 8);
        ferry_loader *la, *lb;
        CHECK_OK(ferry_loader_create_stream(&la, a.st, &oa));
        CHECK_EQ(read_batches(la, got, cut), cut);
        for (size_t i = 0; i < cut; i++)
            CHECK_U64(got[i], ref[i]);
        static uint8_t state[1 << 16];
        size_t len;
        CHECK_OK(ferry_loader_state_save(la, state, sizeof state, &len));
        /* 112 bytes, per shard 32 and its position (the shuffle buffer's 37 and
         * group-batch's at most 33 samples at 32 bytes each, and a few hundred
         * bytes of counters and settings), and the batches read but not handed
         * out (at most the loader's buffers, 64) at 36 bytes and 32 per
         * sample */
        CHECK(len >= 112 + 32 * 3 && len <= 112 + 3 * (32 + 70 * 32 + 512) + 64 * (36 + 8 * 32));
        CHECK(ferry_loader_state_size(la) >= 112); /* it grows as workers read ahead */
        ferry_loader_free(la);
        CHECK_OK(ferry_loader_create_stream(&lb, b.st, &ob));
        CHECK_OK(ferry_loader_state_resume(lb, state, len));
        size_t rest = read_batches(lb, got, MAXB);
        CHECK_EQ(cut + rest, total);
        for (size_t i = 0; i < rest; i++)
            if (got[i] != ref[cut + i]) {
                printf("cut %zu: batch %zu differs\n", cut, cut + i);
                CHECK(0);
            }
        ferry_loader_free(lb);
        free_chain(&a);
        free_chain(&b);
    }
    free_chain(&c);
}

/* a later epoch, saved twice in a row: both resume at the same batch */
TEST(stream_resume_in_a_later_epoch)
{
    static uint64_t ref[MAXB], got[MAXB];
    chain c, d;
    make_chain(&c, SPEC, 8);
    make_chain(&d, SPEC, 8);
    ferry_loader_opts o;
    opts_for(&o, 1, 8);
    ferry_loader *l, *m;
    CHECK_OK(ferry_loader_create_stream(&l, c.st, &o));
    CHECK_OK(ferry_loader_start(l, 3, 0));
    size_t total = read_batches(l, ref, MAXB);
    CHECK_OK(ferry_loader_start(l, 3, 0));
    CHECK_EQ(read_batches(l, got, 9), 9);
    static uint8_t s1[1 << 16], s2[1 << 16];
    size_t n1, n2;
    CHECK_OK(ferry_loader_state_save(l, s1, sizeof s1, &n1));
    CHECK_OK(ferry_loader_state_save(l, s2, sizeof s2, &n2));
    /* the two may differ in the batches read ahead meanwhile, not in where they
     * resume */
    opts_for(&o, 2, 8);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(ferry_loader_create_stream(&m, d.st, &o));
        CHECK_OK(ferry_loader_state_resume(m, k ? s2 : s1, k ? n2 : n1));
        size_t rest = read_batches(m, got, MAXB);
        CHECK_EQ(rest + 9, total);
        for (size_t i = 0; i < rest; i++)
            CHECK_U64(got[i], ref[9 + i]);
        ferry_loader_free(m);
    }
    ferry_loader_free(l);
    free_chain(&c);
    free_chain(&d);
}

TEST(map_resume)
{
    static uint64_t ref[MAXB], got[MAXB];
    ferry_dataset *ds;
    ferry_stream *st = NULL;
    CHECK_OK(ferry_source_open("synthetic:500,bytes=8", &ds, &st));
    ferry_loader_opts o = test_loader_opts(16, 2);
    o.shuffle = 1;
    o.seed = 9;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_start(l, 2, 0));
    size_t total = read_batches(l, ref, MAXB);
    CHECK_OK(ferry_loader_start(l, 2, 0));
    CHECK_EQ(read_batches(l, got, 11), 11);
    uint8_t state[256];
    size_t n;
    CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &n));
    CHECK_EQ(n, 116);
    ferry_loader_free(l);
    o.num_workers = 0;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_state_resume(l, state, n));
    size_t rest = read_batches(l, got, MAXB);
    CHECK_EQ(rest + 11, total);
    for (size_t i = 0; i < rest; i++)
        CHECK_U64(got[i], ref[11 + i]);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(bad_states_are_clear_errors)
{
    chain c;
    make_chain(&c, SPEC, 8);
    ferry_loader_opts o;
    opts_for(&o, 0, 8);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, c.st, &o));
    uint64_t h[8];
    CHECK_EQ(read_batches(l, h, 4), 4);
    static uint8_t state[1 << 16], bad[1 << 16];
    size_t n;
    CHECK_RC(ferry_loader_state_save(l, state, 10, &n), FERRY_EOVERFLOW);
    CHECK_EQ(n, ferry_loader_state_size(l));
    CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &n));
    ferry_loader_free(l);
    free_chain(&c);

    /* another batch size */
    chain d;
    make_chain(&d, SPEC, 4);
    opts_for(&o, 0, 4);
    CHECK_OK(ferry_loader_create_stream(&l, d.st, &o));
    CHECK_RC(ferry_loader_state_resume(l, state, n), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved with batch_size 8, this loader has 4");
    CHECK_CONTAINS(ferry_loader_errmsg(l), "batch_size");
    ferry_loader_free(l);
    free_chain(&d);

    /* another source: another schema */
    chain e;
    make_chain(&e, "synthetic:1000,bytes=32,var=20,classes=7", 8);
    opts_for(&o, 0, 8);
    CHECK_OK(ferry_loader_create_stream(&l, e.st, &o));
    CHECK_RC(ferry_loader_state_resume(l, state, n), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved from another source");
    /* a seed, a shard count */
    ferry_loader_free(l);
    free_chain(&e);
    chain f;
    make_chain(&f, SPEC, 8);
    opts_for(&o, 0, 8);
    o.seed = 6;
    CHECK_OK(ferry_loader_create_stream(&l, f.st, &o));
    CHECK_RC(ferry_loader_state_resume(l, state, n), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "seed 5, this loader has 6");
    ferry_loader_free(l);
    o.seed = 5;
    o.stream_shards = 2;
    CHECK_OK(ferry_loader_create_stream(&l, f.st, &o));
    CHECK_RC(ferry_loader_state_resume(l, state, n), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "stream_shards 3, this loader has 2");
    ferry_loader_free(l);

    /* damaged: every single bit flip, and every cut, is refused */
    o.stream_shards = 3;
    CHECK_OK(ferry_loader_create_stream(&l, f.st, &o));
    for (size_t i = 0; i < n * 8; i++) {
        memcpy(bad, state, n);
        bad[i / 8] ^= (uint8_t)(1u << (i % 8));
        int rc = ferry_loader_state_resume(l, bad, n);
        CHECK(rc == FERRY_ECORRUPT || rc == FERRY_ENOTSUP);
    }
    CHECK_CONTAINS(ferry_last_errmsg(), "loader state");
    for (size_t cut = 0; cut < n; cut++)
        CHECK(ferry_loader_state_resume(l, state, cut) < 0);
    /* a map-style state on a stream loader */
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    CHECK_OK(ferry_source_open("synthetic:100,bytes=8", &ds, &none));
    ferry_loader_opts mo;
    ferry_loader_opts_default(&mo);
    mo.batch_size = 8;
    ferry_loader *ml;
    CHECK_OK(ferry_loader_create(&ml, ds, &mo));
    uint8_t ms[256];
    size_t mn;
    CHECK_OK(ferry_loader_state_save(ml, ms, sizeof ms, &mn));
    CHECK_RC(ferry_loader_state_resume(l, ms, mn), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved from a map-style loader");
    /* the loader is still usable after the failures: the good state resumes */
    CHECK_OK(ferry_loader_state_resume(l, state, n));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    ferry_loader_free(ml);
    ferry_dataset_free(ds);
    ferry_loader_free(l);
    free_chain(&f);

    /* completion order has no position */
    chain g;
    make_chain(&g, SPEC, 8);
    opts_for(&o, 1, 8);
    o.order = FERRY_ORDER_COMPLETION;
    CHECK_OK(ferry_loader_create_stream(&l, g.st, &o));
    CHECK_RC(ferry_loader_state_save(l, state, sizeof state, &n), FERRY_ENOTSUP);
    ferry_loader_free(l);
    free_chain(&g);
}

/* A large shuffle buffer is not saved after every batch: a resume restores the
 * last saved position and reads again the few samples since. Stops between two
 * saves, and at them. */
TEST(stream_resume_between_snapshots)
{
    static uint64_t ref[MAXB], got[MAXB];
    static const char *spec = "synthetic:3000,bytes=16,classes=5";
    ferry_dataset *ds;
    ferry_stream *none = NULL, *st;
    CHECK_OK(ferry_source_open(spec, &ds, &none));
    CHECK_OK(ferry_stream_from_dataset(&st, ds));
    CHECK_OK(ferry_stream_shuffle(&st, st, 600, 4));
    ferry_loader_opts o;
    opts_for(&o, 2, 4);
    o.stream_shards = 2;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    size_t total = read_batches(l, ref, MAXB);
    ferry_loader_free(l);
    CHECK_EQ(total, 750);
    size_t smallest = SIZE_MAX, largest = 0;
    for (size_t cut = 1; cut < 200; cut += 7) {
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        CHECK_EQ(read_batches(l, got, cut), cut);
        static uint8_t state[1 << 16];
        size_t len;
        CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &len));
        smallest = len < smallest ? len : smallest;
        largest = len > largest ? len : largest;
        ferry_loader_free(l);
        o.num_workers = (uint32_t)(cut % 3);
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        CHECK_OK(ferry_loader_state_resume(l, state, len));
        size_t rest = read_batches(l, got, MAXB);
        CHECK_EQ(cut + rest, total);
        for (size_t i = 0; i < rest; i++)
            CHECK_U64(got[i], ref[cut + i]);
        ferry_loader_free(l);
    }
    /* two shards of 600 buffered samples at 32 bytes each: positions, not bytes
     * (and the few batches read ahead, as places too) */
    CHECK(largest <= 112 + 2 * (32 + 600 * 32 + 256) + 64 * (36 + 4 * 32));
    CHECK(largest >= 100 + 2 * (24 + 590 * 32));
    CHECK(smallest < largest); /* a shard not read yet has no position */
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* Reads until the end, an error or `max` batches: hashes in h, the error (or
 * FERRY_END) in *end. */
static size_t read_until(ferry_loader *l, uint64_t *h, size_t max, int *end)
{
    size_t n = 0;
    *end = 0;
    for (; n < max; n++) {
        ferry_batch *b;
        int rc = ferry_loader_next(l, &b);
        if (rc != 0) {
            *end = rc;
            break;
        }
        CHECK(n < MAXB);
        h[n] = batch_hash(b);
        ferry_batch_release(b);
    }
    return n;
}

/* Bad samples skipped, and one that fails the epoch, in the batches read ahead
 * of a save: the resumed run meets them as the first did (the same batches, the
 * same skip count, the same error), and a state saved right after a resume
 * resumes too. */
TEST(stream_resume_with_bad_samples_and_chained)
{
    static uint64_t ref[MAXB], got[MAXB];
    static uint8_t state[1 << 16];
    for (int policy = 0; policy < 2; policy++) {
        const char *spec = policy ? "synthetic:700,bytes=12,var=6,fail_every=300"
                                  : "synthetic:700,bytes=12,var=6,fail_every=23";
        ferry_dataset *ds;
        ferry_stream *none = NULL, *st;
        CHECK_OK(ferry_source_open(spec, &ds, &none));
        CHECK_OK(ferry_stream_from_dataset(&st, ds));
        CHECK_OK(ferry_stream_shuffle(&st, st, 50, 3));
        ferry_loader_opts o;
        opts_for(&o, 2, 5);
        o.stream_shards = 2;
        o.on_error = policy ? FERRY_ON_ERROR_FAIL : FERRY_ON_ERROR_SKIP;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        int ref_end;
        size_t total = read_until(l, ref, MAXB, &ref_end);
        ferry_loader_free(l);
        CHECK(policy ? ref_end < 0 : ref_end == FERRY_END);
        CHECK(total > (policy ? 1u : 100u));
        for (size_t cut = 0; cut <= total; cut += policy ? 1 : 9) {
            o.num_workers = 2;
            CHECK_OK(ferry_loader_create_stream(&l, st, &o));
            int end;
            CHECK_EQ(read_until(l, got, cut, &end), cut);
            size_t len;
            CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &len));
            ferry_loader_free(l);
            /* resumed, then saved again at once, then resumed from that */
            o.num_workers = (uint32_t)(cut % 3);
            CHECK_OK(ferry_loader_create_stream(&l, st, &o));
            CHECK_OK(ferry_loader_state_resume(l, state, len));
            CHECK_OK(ferry_loader_state_save(l, state, sizeof state, &len));
            ferry_loader_free(l);
            CHECK_OK(ferry_loader_create_stream(&l, st, &o));
            CHECK_OK(ferry_loader_state_resume(l, state, len));
            size_t rest = read_until(l, got, MAXB, &end);
            CHECK_EQ(end, ref_end);
            CHECK_EQ(cut + rest, total);
            for (size_t i = 0; i < rest; i++)
                CHECK_U64(got[i], ref[cut + i]);
            ferry_loader_free(l);
        }
        ferry_stream_free(st);
        ferry_dataset_free(ds);
    }
}
