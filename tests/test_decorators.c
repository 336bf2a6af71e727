/*
 * Stream decorators: the shuffle buffer (a permutation per shard, a function of
 * seed, epoch and shard, the same batches for any worker count), group-batch (one
 * group per batch, flush order, the memory bound), shard (disjoint, covering,
 * composing), repeat (passes, endless, empty), take/skip, errors and breaks passing
 * through, ownership on every allocation failure, and settings.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/stream.h>
#include "core/internal.h"

/* ---- Helpers ---- */

/* A scripted stream: samples v = shard, shard + nshards, ... < n, with a
 * FERRY_BREAK before each v that is a multiple of break_every (when nonzero), and
 * FERRY_ECORRUPT instead of each v with v % fail_every == fail_every - 1. Fields:
 * "v" (int64), "open_epoch" (uint64: the epoch it was opened with), "ctx_epoch"
 * (uint64: ferry_ctx_epoch during next). Plain malloc: not part of the
 * allocation-failure walks. */
typedef struct script {
    uint64_t n, break_every, fail_every;
    int *destroyed;
} script;

typedef struct script_iter {
    const script *s;
    uint64_t next, step, epoch;
    int broke;
} script_iter;

static int script_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    script_iter *it = calloc(1, sizeof *it);
    CHECK(it);
    it->s = self;
    it->next = shard;
    it->step = nshards;
    it->epoch = epoch;
    *iter = it;
    return 0;
}

static int script_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    script_iter *it = iter;
    const script *s = it->s;
    if (it->next >= s->n)
        return FERRY_END;
    uint64_t v = it->next;
    if (s->break_every && v % s->break_every == 0 && !it->broke) {
        it->broke = 1;
        return FERRY_BREAK;
    }
    it->broke = 0;
    it->next += it->step;
    if (s->fail_every && v % s->fail_every == s->fail_every - 1)
        return ferry_error(FERRY_ECORRUPT, "script: value %llu: scripted failure",
                           (unsigned long long)v);
    int64_t vv = (int64_t)v;
    uint64_t ce = ctx ? ferry_ctx_epoch(ctx) : 0;
    memcpy(out->data[0], &vv, 8);
    memcpy(out->data[1], &it->epoch, 8);
    memcpy(out->data[2], &ce, 8);
    return 0;
}

static void script_close(void *iter)
{
    free(iter);
}

static void script_destroy(void *self)
{
    script *s = self;
    if (s->destroyed)
        (*s->destroyed)++;
    free(s);
}

static const ferry_stream_vtable script_vt = {
    script_open, script_next, script_close, script_destroy, NULL, NULL, NULL};

static ferry_stream *scripted(uint64_t n, uint64_t break_every, uint64_t fail_every, int *destroyed)
{
    script *s = calloc(1, sizeof *s);
    CHECK(s);
    s->n = n;
    s->break_every = break_every;
    s->fail_every = fail_every;
    s->destroyed = destroyed;
    ferry_field f[3];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "v");
    f[0].dtype = FERRY_I64;
    strcpy(f[1].name, "open_epoch");
    f[1].dtype = FERRY_U64;
    strcpy(f[2].name, "ctx_epoch");
    f[2].dtype = FERRY_U64;
    ferry_stream *st;
    CHECK_OK(ferry_stream_create(&st, &script_vt, s, f, 3));
    return st;
}

/* What reading one shard directly gave: events in order (a sample's value >= 0,
 * TR_BREAK, TR_ERROR). */
enum { TR_BREAK = -1, TR_ERROR = -2 };
typedef struct trace {
    int64_t *ev;
    size_t n, cap;
    uint64_t samples, breaks, errors;
    int64_t *len; /* the variable field's length per event (-1 if none) */
} trace;

static void trace_push(trace *t, int64_t v, int64_t len)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->ev = realloc(t->ev, t->cap * sizeof *t->ev);
        t->len = realloc(t->len, t->cap * sizeof *t->len);
        CHECK(t->ev && t->len);
    }
    t->len[t->n] = len;
    t->ev[t->n++] = v;
}

static void trace_free(trace *t)
{
    free(t->ev);
    free(t->len);
    memset(t, 0, sizeof *t);
}

/* The sample values only, in order. */
static size_t trace_values(const trace *t, int64_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i] >= 0)
            out[k++] = t->ev[i];
    return k;
}

static int find_field(const ferry_stream *st, const char *name)
{
    for (int f = 0; f < ferry_stream_nfields(st); f++)
        if (!strcmp(ferry_stream_field(st, f)->name, name))
            return f;
    return -1;
}

/* Reads shard `shard` of `nshards` to its end. Errors must be want_err with a
 * message containing want_msg (neither set: no errors). With ds, each sample's
 * bytes must equal a direct read of sample `label` of ds. */
static trace read_shard(ferry_stream *st, uint64_t shard, uint64_t nshards, uint64_t epoch,
                        ferry_dataset *ds, int want_err, const char *want_msg)
{
    trace t = {0};
    int nf = ferry_stream_nfields(st);
    int vf = find_field(st, "label") >= 0 ? find_field(st, "label") : find_field(st, "v");
    CHECK(vf >= 0);
    void *data[FERRY_MAX_FIELDS], *want[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS], wlen[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++) {
        data[f] = calloc(1, ferry_field_nbytes(ferry_stream_field(st, f)) + 1);
        want[f] = calloc(1, ferry_field_nbytes(ferry_stream_field(st, f)) + 1);
        CHECK(data[f] && want[f]);
    }
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, epoch));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, shard, nshards, epoch, &it));
    int rc;
    for (;;) {
        CHECK(t.n < 10000000); /* no endless stream here */
        for (int f = 0; f < nf; f++)
            len[f] = 0;
        ferry_sample s = {nf, data, len, {0}};
        rc = ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END)
            break;
        if (rc == FERRY_BREAK) {
            t.breaks++;
            trace_push(&t, TR_BREAK, -1);
            continue;
        }
        if (rc < 0) {
            if (!want_msg)
                test_fail(__FILE__, __LINE__, "unexpected error %s: %s", ferry_errname(rc),
                          ferry_last_errmsg());
            CHECK_RC(rc, want_err);
            CHECK_CONTAINS(ferry_last_errmsg(), want_msg);
            t.errors++;
            trace_push(&t, TR_ERROR, -1);
            continue;
        }
        CHECK_RC(rc, 0);
        int64_t v;
        memcpy(&v, data[vf], 8);
        CHECK(v >= 0);
        int64_t l = -1;
        for (int f = 0; f < nf; f++)
            if (ferry_stream_field(st, f)->variable)
                l = len[f];
        t.samples++;
        trace_push(&t, v, l);
        if (ds) {
            for (int f = 0; f < nf; f++)
                wlen[f] = 0;
            ferry_sample w = {nf, want, wlen, {0}};
            CHECK_OK(ferry_dataset_get(ds, (uint64_t)v, &w, ctx));
            for (int f = 0; f < nf; f++) {
                const ferry_field *fd = ferry_stream_field(st, f);
                size_t n = ferry_field_nbytes(fd);
                if (fd->variable) {
                    CHECK_EQ(len[f], wlen[f]);
                    n = (size_t)len[f] * ferry_field_row_elems(fd) * ferry_dtype_size(fd->dtype);
                }
                CHECK(!memcmp(data[f], want[f], n));
            }
        }
    }
    CHECK_RC(ferry_stream_next(it, &(ferry_sample){nf, data, len, {0}}, ctx),
             FERRY_END); /* stays */
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++) {
        free(data[f]);
        free(want[f]);
    }
    return t;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static ferry_loader_opts stream_opts(uint32_t batch, uint32_t workers, uint32_t shards)
{
    ferry_loader_opts o = test_stream_opts(batch, workers, shards);
    o.seed = 99;
    return o;
}

static uint64_t hash_batch(uint64_t h, const ferry_batch *b)
{
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, f, &t));
        h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        if (ferry_batch_field_info(b, f)->variable) {
            CHECK_OK(ferry_batch_lengths(b, f, &t));
            h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        }
    }
    return h;
}

typedef void (*batch_fn)(const ferry_batch *b, void *arg);

/* Runs one epoch of a loader over st; returns the digest of the batches in order
 * and the sample count; calls fn on each batch. */
static uint64_t loader_epoch(ferry_stream *st, const ferry_loader_opts *o, uint64_t epoch,
                             uint64_t *nsamples, batch_fn fn, void *arg)
{
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, o));
    CHECK_OK(ferry_loader_start(l, epoch, 0));
    uint64_t h = 0xcbf29ce484222325ull, n = 0;
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        h = hash_batch(h, b);
        n += ferry_batch_size(b);
        if (fn)
            fn(b, arg);
        ferry_batch_release(b);
    }
    if (rc != FERRY_END)
        test_fail(__FILE__, __LINE__, "loader: %s: %s", ferry_errname(rc), ferry_loader_errmsg(l));
    ferry_loader_free(l);
    *nsamples = n;
    return h;
}

/* ---- Shuffle ---- */

TEST(shuffle_is_a_permutation_of_each_shard)
{
    ferry_dataset *ds = test_synthetic(900, 12, 0);
    const size_t buffer = 64;
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), buffer, 5));
    CHECK_EQ(ferry_stream_nfields(st), 3);
    CHECK(!strcmp(ferry_stream_field(st, 2)->name, "text"));
    CHECK(ferry_stream_field(st, 2)->variable);
    static int64_t got[900];
    for (uint64_t m = 1; m <= 3; m += 2) {
        for (uint64_t s = 0; s < m; s++) {
            trace t = read_shard(st, s, m, 0, ds, 0, NULL); /* bytes equal the source's */
            size_t n = trace_values(&t, got);
            CHECK_U64(n, (900 - s + m - 1) / m);
            CHECK_U64(t.breaks, 0);
            int moved = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t v = (uint64_t)got[i];
                CHECK_U64(v % m, s);
                /* a sample leaves the buffer at most buffer - 1 places ahead of
                 * where it came in */
                CHECK(v / m <= i + buffer - 1);
                moved += v / m != i;
            }
            CHECK(moved > (int)n / 2);
            qsort(got, n, sizeof *got, cmp_i64);
            for (size_t i = 0; i < n; i++)
                CHECK_EQ(got[i], (int64_t)(s + i * m));
            trace_free(&t);
        }
    }
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

static uint64_t order_digest(ferry_dataset *ds, size_t buffer, uint64_t seed, uint64_t epoch,
                             uint64_t shard, uint64_t nshards)
{
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), buffer, seed));
    trace t = read_shard(st, shard, nshards, epoch, NULL, 0, NULL);
    uint64_t h = test_hash(0xcbf29ce484222325ull, t.ev, t.n * sizeof *t.ev);
    trace_free(&t);
    ferry_stream_free(st);
    return h;
}

TEST(shuffle_order_is_a_function_of_seed_epoch_and_shard)
{
    ferry_dataset *ds = test_synthetic(500, 0, 0);
    uint64_t base = order_digest(ds, 100, 1, 0, 0, 1);
    CHECK_U64(order_digest(ds, 100, 1, 0, 0, 1), base);               /* reproducible */
    CHECK(order_digest(ds, 100, 2, 0, 0, 1) != base);                 /* seed */
    CHECK(order_digest(ds, 100, 1, 1, 0, 1) != base);                 /* epoch */
    CHECK(order_digest(ds, 100, 1, (uint64_t)1 << 32, 0, 1) != base); /* all 64 bits */
    /* the shard: shards 0 and 1 of 2 hold 2i and 2i+1; the same key would move
     * them alike */
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 100, 1));
    trace t0 = read_shard(st, 0, 2, 0, NULL, 0, NULL), t1 = read_shard(st, 1, 2, 0, NULL, 0, NULL);
    CHECK(t0.n == 250 && t1.n == 250);
    int same = 1;
    for (size_t i = 0; i < 250; i++)
        same &= t0.ev[i] / 2 == t1.ev[i] / 2;
    CHECK(!same);
    trace_free(&t0);
    trace_free(&t1);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(shuffle_buffer_one_keeps_the_order)
{
    ferry_dataset *ds = test_synthetic(300, 5, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 1, 77));
    for (uint64_t s = 0; s < 2; s++) {
        trace t = read_shard(st, s, 2, 3, ds, 0, NULL);
        CHECK_U64(t.samples, 150);
        for (size_t i = 0; i < t.n; i++)
            CHECK_EQ(t.ev[i], (int64_t)(s + 2 * i));
        trace_free(&t);
    }
    ferry_stream_free(st);
    /* a buffer larger than the shard: the whole shard shuffled, nothing lost */
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 1000, 77));
    trace t = read_shard(st, 0, 1, 0, ds, 0, NULL);
    CHECK_U64(t.samples, 300);
    trace_free(&t);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(shuffle_gives_the_same_batches_for_any_workers)
{
    ferry_dataset *ds = test_synthetic(997, 12, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 37, 11));
    uint32_t workers[] = {0, 1, 2, 4};
    uint64_t want[2] = {0, 0};
    for (size_t w = 0; w < sizeof workers / sizeof *workers; w++) {
        ferry_loader_opts o = stream_opts(16, workers[w], 3);
        for (uint64_t e = 0; e < 2; e++) {
            uint64_t n, h = loader_epoch(st, &o, e, &n, NULL, NULL);
            CHECK_U64(n, 997);
            if (!want[e])
                want[e] = h;
            if (h != want[e])
                test_fail(__FILE__, __LINE__, "workers %u epoch %llu: digest differs", workers[w],
                          (unsigned long long)e);
        }
    }
    CHECK(want[0] != want[1]);
    /* and the shuffle did something */
    ferry_stream *plain = test_stream_of(ds);
    ferry_loader_opts o = stream_opts(16, 2, 3);
    uint64_t n;
    CHECK(loader_epoch(plain, &o, 0, &n, NULL, NULL) != want[0]);
    ferry_stream_free(plain);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* ---- Group-batch ---- */

typedef struct bucket_check {
    uint64_t width;
    uint8_t seen[1000];
    uint64_t batches, short_batches;
} bucket_check;

static void check_one_bucket(const ferry_batch *b, void *arg)
{
    bucket_check *c = arg;
    ferry_tensor label, len;
    CHECK_OK(ferry_batch_field(b, 1, &label));
    CHECK_OK(ferry_batch_lengths(b, 2, &len));
    const int64_t *lab = label.data, *ln = len.data;
    uint32_t n = ferry_batch_size(b);
    CHECK(n >= 1 && n <= 8);
    for (uint32_t i = 0; i < n; i++) {
        CHECK_EQ(ln[i] / (int64_t)c->width, ln[0] / (int64_t)c->width);
        CHECK(lab[i] >= 0 && lab[i] < 1000);
        CHECK(!c->seen[lab[i]]);
        c->seen[lab[i]] = 1;
    }
    c->batches++;
    c->short_batches += n < 8;
}

TEST(group_by_length_batches_hold_one_bucket)
{
    const uint64_t count = 997, var = 40, width = 5;
    ferry_dataset *ds = test_synthetic(count, var, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_group_by_length(&st, test_stream_of(ds), 2, width, 8, 1000));
    uint64_t want = 0;
    uint32_t workers[] = {0, 1, 2, 4};
    for (size_t w = 0; w < sizeof workers / sizeof *workers; w++) {
        bucket_check c = {.width = width};
        ferry_loader_opts o = stream_opts(8, workers[w], 2);
        uint64_t n, h = loader_epoch(st, &o, 0, &n, check_one_bucket, &c);
        CHECK_U64(n, count);
        for (uint64_t i = 0; i < count; i++)
            CHECK(c.seen[i]);
        /* max_buffered is never reached: only the partial groups left at the end
         * of each shard are short (9 buckets, 2 shards) */
        CHECK(c.short_batches <= 2 * (var / width + 1));
        CHECK(c.batches - c.short_batches >= (count - 2 * 9 * 7) / 8);
        if (!want)
            want = h;
        CHECK_U64(h, want);
    }
    /* a small memory bound still gives one bucket per batch, each sample once */
    ferry_stream_free(st);
    CHECK_OK(ferry_stream_group_by_length(&st, test_stream_of(ds), 2, width, 8, 8));
    bucket_check c = {.width = width};
    ferry_loader_opts o = stream_opts(8, 2, 3);
    uint64_t n;
    loader_epoch(st, &o, 0, &n, check_one_bucket, &c);
    CHECK_U64(n, count);
    CHECK(c.short_batches > 2 * (var / width + 1)); /* the bound flushed partial groups */
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

static int64_t mod_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    CHECK(!strcmp(fields[0].name, "v"));
    int64_t v;
    memcpy(&v, s->data[0], 8);
    return v % *(int64_t *)arg;
}

static int64_t even_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    (void)fields;
    (void)arg;
    int64_t v;
    memcpy(&v, s->data[0], 8);
    return v % 2 == 0 ? -5 : v;
}

static void check_trace(const trace *t, const int64_t *want, size_t n)
{
    if (t->n != n)
        test_fail(__FILE__, __LINE__, "trace has %zu events, wanted %zu", t->n, n);
    for (size_t i = 0; i < n; i++)
        if (t->ev[i] != want[i])
            test_fail(__FILE__, __LINE__, "event %zu is %lld, wanted %lld", i, (long long)t->ev[i],
                      (long long)want[i]);
}

TEST(group_batch_emits_full_groups_then_partial_ones_by_first_arrival)
{
    const int64_t B = TR_BREAK;
    int64_t three = 3;
    ferry_stream *st;
    CHECK_OK(ferry_stream_group_batch(&st, scripted(20, 0, 0, NULL), mod_key, &three, 4, 100));
    trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    int64_t want[] = {B, 0,  3, 6,  9,  B,  1, 4,  7,  10, B, 2,  5,
                      8, 11, B, 12, 15, 18, B, 13, 16, 19, B, 14, 17};
    check_trace(&t, want, sizeof want / sizeof *want);
    trace_free(&t);
    ferry_stream_free(st);

    /* batch_size 1: every sample alone */
    CHECK_OK(ferry_stream_group_batch(&st, scripted(3, 0, 0, NULL), mod_key, &three, 1, 1));
    t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    int64_t want1[] = {B, 0, B, 1, B, 2};
    check_trace(&t, want1, sizeof want1 / sizeof *want1);
    trace_free(&t);
    ferry_stream_free(st);
}

TEST(group_batch_bounds_memory_by_flushing_the_fullest_group)
{
    const int64_t B = TR_BREAK;
    /* five keys, max_buffered 4: each new sample pushes out the oldest single */
    int64_t five = 5;
    ferry_stream *st;
    CHECK_OK(ferry_stream_group_batch(&st, scripted(8, 0, 0, NULL), mod_key, &five, 4, 4));
    trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    int64_t want[] = {B, 0, B, 1, B, 2, B, 3, B, 4, B, 5, B, 6, B, 7};
    check_trace(&t, want, sizeof want / sizeof *want);
    trace_free(&t);
    ferry_stream_free(st);

    /* evens share a group, odds are alone: the evens' group is the fullest */
    CHECK_OK(ferry_stream_group_batch(&st, scripted(8, 0, 0, NULL), even_key, NULL, 4, 4));
    t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    /* read 0 1 2 3 4: 5 buffered, flush {0 2 4}; read 5 6 7: 5 buffered (1 3 5 6 7),
     * all singles: flush the first to reach one, 1; the end flushes by arrival */
    int64_t want2[] = {B, 0, 2, 4, B, 1, B, 3, B, 5, B, 6, B, 7};
    check_trace(&t, want2, sizeof want2 / sizeof *want2);
    trace_free(&t);
    ferry_stream_free(st);

    /* a long run with many keys: every run between breaks has one key and at most
     * batch_size samples; every sample once */
    int64_t many = 37;
    CHECK_OK(ferry_stream_group_batch(&st, scripted(5000, 0, 0, NULL), mod_key, &many, 6, 50));
    t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    static uint8_t seen[5000];
    int64_t key = -1;
    int run = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (t.ev[i] == B) {
            run = 0;
            continue;
        }
        CHECK(i > 0); /* a break comes first */
        if (run == 0)
            key = t.ev[i] % 37;
        CHECK_EQ(t.ev[i] % 37, key);
        CHECK(++run <= 6);
        CHECK(!seen[t.ev[i]]);
        seen[t.ev[i]] = 1;
    }
    CHECK_U64(t.samples, 5000);
    trace_free(&t);
    ferry_stream_free(st);
}

/* ---- Shard ---- */

TEST(shard_parts_are_disjoint_covering_and_compose)
{
    const uint64_t count = 503;
    ferry_dataset *ds = test_synthetic(count, 0, 0);
    static uint16_t hits[503];
    for (uint64_t n = 1; n <= 4; n++) {
        for (uint64_t m = 1; m <= 3; m++) {
            memset(hits, 0, sizeof hits);
            for (uint64_t k = 0; k < n; k++) {
                ferry_stream *st;
                CHECK_OK(ferry_stream_shard(&st, test_stream_of(ds), k, n));
                for (uint64_t s = 0; s < m; s++) {
                    trace t = read_shard(st, s, m, 0, ds, 0, NULL);
                    /* the same as the inner's shard k*m + s of n*m */
                    for (size_t i = 0; i < t.n; i++) {
                        CHECK_EQ(t.ev[i], (int64_t)(k * m + s + i * n * m));
                        hits[t.ev[i]]++;
                    }
                    trace_free(&t);
                }
                ferry_stream_free(st);
            }
            for (uint64_t i = 0; i < count; i++)
                CHECK_EQ(hits[i], 1);
        }
    }
    /* a part of a part, read by a loader: every sample once over all parts */
    memset(hits, 0, sizeof hits);
    for (uint64_t k1 = 0; k1 < 2; k1++) {
        for (uint64_t k2 = 0; k2 < 3; k2++) {
            ferry_stream *st;
            CHECK_OK(ferry_stream_shard(&st, test_stream_of(ds), k1, 2));
            CHECK_OK(ferry_stream_shard(&st, st, k2, 3));
            for (uint64_t s = 0; s < 2; s++) {
                trace t = read_shard(st, s, 2, 0, NULL, 0, NULL);
                for (size_t i = 0; i < t.n; i++)
                    hits[t.ev[i]]++;
                trace_free(&t);
            }
            ferry_stream_free(st);
        }
    }
    for (uint64_t i = 0; i < count; i++)
        CHECK_EQ(hits[i], 1);
    /* rank-then-worker sharding through the loader */
    uint64_t total = 0;
    for (uint64_t rank = 0; rank < 3; rank++) {
        ferry_stream *st;
        CHECK_OK(ferry_stream_shard(&st, test_stream_of(ds), rank, 3));
        ferry_loader_opts o = stream_opts(10, 2, 4);
        uint64_t n;
        loader_epoch(st, &o, 0, &n, NULL, NULL);
        total += n;
        ferry_stream_free(st);
    }
    CHECK_U64(total, count);
    ferry_dataset_free(ds);
}

TEST(shard_open_overflow_is_an_error)
{
    ferry_stream *st;
    CHECK_OK(ferry_stream_shard(&st, scripted(10, 0, 0, NULL), 1, (uint64_t)1 << 40));
    ferry_stream_iter *it = (ferry_stream_iter *)1;
    CHECK_RC(ferry_stream_open(st, 0, (uint64_t)1 << 30, 0, &it), FERRY_EOVERFLOW);
    CHECK(it == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard");
    ferry_stream_free(st);
}

/* ---- Repeat ---- */

TEST(repeat_makes_passes_with_a_new_order_each)
{
    ferry_dataset *ds = test_synthetic(200, 6, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 50, 3));
    CHECK_OK(ferry_stream_repeat(&st, st, 3));
    trace t = read_shard(st, 0, 1, 4, ds, 0, NULL);
    CHECK_U64(t.samples, 600);
    static int64_t pass[3][200];
    for (int p = 0; p < 3; p++) {
        memcpy(pass[p], t.ev + 200 * p, sizeof pass[p]);
        int64_t sorted[200];
        memcpy(sorted, pass[p], sizeof sorted);
        qsort(sorted, 200, sizeof *sorted, cmp_i64);
        for (int i = 0; i < 200; i++)
            CHECK_EQ(sorted[i], i);
    }
    CHECK(memcmp(pass[0], pass[1], sizeof pass[0]) != 0);
    CHECK(memcmp(pass[1], pass[2], sizeof pass[0]) != 0);
    CHECK(memcmp(pass[0], pass[2], sizeof pass[0]) != 0);
    trace_free(&t);
    /* the same again: the passes are a function of the epoch */
    trace t2 = read_shard(st, 0, 1, 4, NULL, 0, NULL);
    CHECK(t2.n == 600 && !memcmp(t2.ev, pass[0], sizeof pass[0]));
    trace_free(&t2);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(repeat_opens_each_pass_with_a_hashed_epoch)
{
    ferry_stream *st;
    CHECK_OK(ferry_stream_repeat(&st, scripted(4, 0, 0, NULL), 2));
    void *data[3];
    int64_t v;
    uint64_t open_epoch, ctx_epoch;
    data[0] = &v;
    data[1] = &open_epoch;
    data[2] = &ctx_epoch;
    int64_t len[3];
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 9));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 9, &it));
    for (uint64_t p = 0; p < 2; p++) {
        for (int i = 0; i < 4; i++) {
            CHECK_OK(ferry_stream_next(it, &(ferry_sample){3, data, len, {0}}, ctx));
            CHECK_EQ(v, i);
            CHECK_U64(open_epoch, ferry_hash64(9, p));
            CHECK_U64(ctx_epoch, ferry_hash64(9, p));
            CHECK_U64(ferry_ctx_epoch(ctx), 9); /* given back */
        }
    }
    CHECK_RC(ferry_stream_next(it, &(ferry_sample){3, data, len, {0}}, ctx), FERRY_END);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
}

TEST(endless_repeat_with_take_terminates)
{
    ferry_dataset *ds = test_synthetic(50, 0, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_shuffle(&st, test_stream_of(ds), 10, 1));
    CHECK_OK(ferry_stream_repeat(&st, st, 0));
    CHECK_OK(ferry_stream_take(&st, st, 1234));
    trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    CHECK_U64(t.samples, 1234);
    trace_free(&t);
    /* through the loader: each of 2 shards takes 1234 */
    ferry_loader_opts o = stream_opts(100, 2, 2);
    uint64_t n;
    loader_epoch(st, &o, 0, &n, NULL, NULL);
    CHECK_U64(n, 2 * 1234);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(repeat_over_an_empty_stream_ends)
{
    ferry_dataset *ds = test_synthetic(0, 0, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_repeat(&st, test_stream_of(ds), 0));
    trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    CHECK_U64(t.n, 0);
    trace_free(&t);
    ferry_loader_opts o = stream_opts(4, 2, 3);
    uint64_t n;
    loader_epoch(st, &o, 0, &n, NULL, NULL);
    CHECK_U64(n, 0);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    /* a shard that is empty while others are not (3 samples, 4 shards) */
    ds = test_synthetic(3, 0, 0);
    CHECK_OK(ferry_stream_repeat(&st, test_stream_of(ds), 0));
    t = read_shard(st, 3, 4, 0, NULL, 0, NULL);
    CHECK_U64(t.n, 0);
    trace_free(&t);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    /* a stream of nothing but failures: each pass yields errors, no sample: ends */
    ds = test_synthetic(5, 0, 1);
    CHECK_OK(ferry_stream_repeat(&st, test_stream_of(ds), 0));
    t = read_shard(st, 0, 1, 0, NULL, FERRY_ECORRUPT, "injected failure");
    CHECK_U64(t.samples, 0);
    CHECK_U64(t.errors, 5);
    trace_free(&t);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(repeat_retries_a_pass_whose_open_failed)
{
    ferry_dataset *ds = test_synthetic(5, 0, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_repeat(&st, test_stream_of(ds), 2));
    uint8_t d[8];
    int64_t lab, len[2];
    void *data[2] = {d, &lab};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    for (int i = 0; i < 5; i++)
        CHECK_OK(ferry_stream_next(it, &(ferry_sample){2, data, len, {0}}, ctx));
    ferry__test_fail_alloc(0);
    int rc = ferry_stream_next(it, &(ferry_sample){2, data, len, {0}}, ctx);
    ferry__test_fail_alloc(-1);
    CHECK_RC(rc, FERRY_ENOMEM);
    CHECK_CONTAINS(ferry_last_errmsg(), "repeat: pass 1");
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ferry_stream_next(it, &(ferry_sample){2, data, len, {0}}, ctx));
        CHECK_EQ(lab, i);
    }
    CHECK_RC(ferry_stream_next(it, &(ferry_sample){2, data, len, {0}}, ctx), FERRY_END);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* ---- Take and skip ---- */

TEST(take_and_skip_count_per_shard)
{
    ferry_dataset *ds = test_synthetic(100, 3, 0);
    struct {
        int take;
        uint64_t n, want_per_shard[3];
    } cases[] = {
        {1, 10, {10, 10, 10}}, {1, 0, {0, 0, 0}},    {1, 1000, {34, 33, 33}},
        {0, 10, {24, 23, 23}}, {0, 0, {34, 33, 33}}, {0, 40, {0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ferry_stream *st;
        if (cases[c].take)
            CHECK_OK(ferry_stream_take(&st, test_stream_of(ds), cases[c].n));
        else
            CHECK_OK(ferry_stream_skip(&st, test_stream_of(ds), cases[c].n));
        uint64_t total = 0;
        for (uint64_t s = 0; s < 3; s++) {
            trace t = read_shard(st, s, 3, 0, ds, 0, NULL);
            CHECK_U64(t.samples, cases[c].want_per_shard[s]);
            /* take keeps the first, skip the rest, in order */
            uint64_t first = cases[c].take ? 0 : cases[c].n;
            for (size_t i = 0; i < t.n; i++)
                CHECK_EQ(t.ev[i], (int64_t)(s + 3 * (first + i)));
            total += t.samples;
            trace_free(&t);
        }
        ferry_loader_opts o = stream_opts(7, 2, 3);
        uint64_t n;
        loader_epoch(st, &o, 0, &n, NULL, NULL);
        CHECK_U64(n, total);
        ferry_stream_free(st);
    }
    ferry_dataset_free(ds);
}

/* ---- Errors and breaks pass through ---- */

typedef int (*wrap_fn)(ferry_stream **out, ferry_stream *inner);
static int w_shuffle(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_shuffle(o, i, 8, 1);
}
static int w_group(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_group_by_length(o, i, 2, 4, 3, 16);
}
static int w_shard(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_shard(o, i, 0, 1);
}
static int w_repeat(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_repeat(o, i, 2);
}
static int w_take(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_take(o, i, 1000);
}
static int w_skip(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_skip(o, i, 3);
}

static const struct {
    const char *name;
    wrap_fn fn;
} wrappers[] = {{"shuffle", w_shuffle}, {"group_by_length", w_group},
                {"shard", w_shard},     {"repeat", w_repeat},
                {"take", w_take},       {"skip", w_skip}};
#define NWRAPPERS (sizeof wrappers / sizeof *wrappers)

TEST(errors_pass_through_with_their_message)
{
    /* samples 6, 13, 20, ... of 50 fail: 7 errors, 43 good */
    ferry_dataset *ds = test_synthetic(50, 10, 7);
    for (size_t w = 0; w < NWRAPPERS; w++) {
        ferry_stream *st;
        CHECK_OK(wrappers[w].fn(&st, test_stream_of(ds)));
        trace t = read_shard(st, 0, 1, 0, ds, FERRY_ECORRUPT, "synthetic: sample");
        uint64_t passes = wrappers[w].fn == w_repeat ? 2 : 1;
        uint64_t skipped = wrappers[w].fn == w_skip ? 3 : 0;
        if (t.errors != 7 * passes || t.samples != 43 * passes - skipped)
            test_fail(__FILE__, __LINE__, "%s: %llu errors, %llu samples", wrappers[w].name,
                      (unsigned long long)t.errors, (unsigned long long)t.samples);
        for (size_t i = 0; i < t.n; i++)
            CHECK(t.ev[i] < 0 || t.ev[i] % 7 != 6);
        trace_free(&t);
        /* the loader stops at the first and names it */
        ferry_loader *l;
        ferry_loader_opts o = stream_opts(4, 2, 1);
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        ferry_batch *b;
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0)
            ferry_batch_release(b);
        CHECK_RC(rc, FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_loader_errmsg(l), "injected failure (fail_every=7)");
        ferry_loader_free(l);
        ferry_stream_free(st);
    }
    ferry_dataset_free(ds);
}

TEST(breaks_pass_through)
{
    /* 40 values, a break before each multiple of 5: 8 breaks */
    for (size_t w = 0; w < NWRAPPERS; w++) {
        if (wrappers[w].fn == w_group)
            continue; /* makes its own breaks; the script has no variable field */
        ferry_stream *st;
        CHECK_OK(wrappers[w].fn(&st, scripted(40, 5, 0, NULL)));
        trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
        uint64_t passes = wrappers[w].fn == w_repeat ? 2 : 1;
        if (t.breaks != 8 * passes)
            test_fail(__FILE__, __LINE__, "%s: %llu breaks", wrappers[w].name,
                      (unsigned long long)t.breaks);
        CHECK_U64(t.samples, passes * 40 - (wrappers[w].fn == w_skip ? 3 : 0));
        trace_free(&t);
        ferry_stream_free(st);
    }
    /* group-batch passes the inner's breaks on too (here before 0 and 5) */
    int64_t two = 2;
    ferry_stream *st;
    CHECK_OK(ferry_stream_group_batch(&st, scripted(6, 5, 0, NULL), mod_key, &two, 8, 8));
    trace t = read_shard(st, 0, 1, 0, NULL, 0, NULL);
    int64_t want[] = {TR_BREAK, TR_BREAK, TR_BREAK, 0, 2, 4, TR_BREAK, 1, 3, 5};
    check_trace(&t, want, sizeof want / sizeof *want);
    trace_free(&t);
    ferry_stream_free(st);
}

/* ---- Ownership and allocation failures ---- */

typedef int (*ctor_fn)(ferry_stream **out, ferry_stream *inner);
static int c_shuffle(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_shuffle(o, i, 16, 2);
}
static int c_group(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_group_by_length(o, i, 2, 3, 4, 9);
}
static int64_t label_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    (void)fields;
    (void)arg;
    int64_t v;
    memcpy(&v, s->data[1], 8);
    return v % 4;
}
static int c_group_fn(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_group_batch(o, i, label_key, NULL, 3, 5);
}
static int c_shard(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_shard(o, i, 1, 2);
}
static int c_take(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_take(o, i, 5);
}
static int c_skip(ferry_stream **o, ferry_stream *i)
{
    return ferry_stream_skip(o, i, 5);
}
/* a whole chain, built without cleanup code */
static int c_chain(ferry_stream **o, ferry_stream *i)
{
    ferry_stream *st = i;
    int rc = ferry_stream_shard(&st, st, 0, 1);
    if (!rc)
        rc = ferry_stream_shuffle(&st, st, 8, 3);
    if (!rc)
        rc = ferry_stream_group_by_length(&st, st, 2, 4, 2, 6);
    if (!rc)
        rc = ferry_stream_repeat(&st, st, 2);
    if (!rc)
        rc = ferry_stream_take(&st, st, 1000);
    if (!rc)
        rc = ferry_stream_skip(&st, st, 1);
    *o = st;
    return rc;
}

static const ctor_fn ctors[] = {c_shuffle, c_group, c_group_fn, c_shard,
                                w_repeat,  c_take,  c_skip,     c_chain};

TEST(constructors_free_the_inner_on_every_allocation_failure)
{
    ferry_dataset *ds = test_synthetic(40, 9, 0);
    for (size_t c = 0; c < sizeof ctors / sizeof *ctors; c++) {
        int done = 0, failures = 0;
        for (long n = 0; n < 200 && !done; n++) {
            ferry_stream *inner = test_stream_of(ds), *st = (ferry_stream *)1;
            ferry__test_fail_alloc(n);
            int rc = ctors[c](&st, inner);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                CHECK(st != NULL);
                trace t = read_shard(st, 0, 1, 0, ds, 0, NULL);
                CHECK(t.samples > 0);
                trace_free(&t);
                ferry_stream_free(st);
                done = 1;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
                CHECK(st == NULL); /* and inner is freed: ASan would see a leak */
                failures++;
            }
        }
        CHECK(done);
        CHECK(failures > 0);
    }
    /* the inner's destroy runs exactly once on failure */
    int destroyed = 0;
    ferry_stream *st;
    ferry_stream *inner = scripted(5, 0, 0, &destroyed);
    ferry__test_fail_alloc(0);
    CHECK_RC(ferry_stream_repeat(&st, inner, 1), FERRY_ENOMEM);
    ferry__test_fail_alloc(-1);
    CHECK_EQ(destroyed, 1);
    /* and when the decorator is freed */
    destroyed = 0;
    CHECK_OK(ferry_stream_take(&st, scripted(5, 0, 0, &destroyed), 1));
    CHECK_OK(ferry_stream_skip(&st, st, 1));
    CHECK_EQ(destroyed, 0);
    ferry_stream_free(st);
    CHECK_EQ(destroyed, 1);
    ferry_dataset_free(ds);
}

TEST(open_survives_every_allocation_failure)
{
    ferry_dataset *ds = test_synthetic(40, 9, 0);
    for (size_t c = 0; c < sizeof ctors / sizeof *ctors; c++) {
        ferry_stream *st;
        CHECK_OK(ctors[c](&st, test_stream_of(ds)));
        int done = 0;
        for (long n = 0; n < 200 && !done; n++) {
            ferry_stream_iter *it = (ferry_stream_iter *)1;
            ferry__test_fail_alloc(n);
            int rc = ferry_stream_open(st, 0, 1, 0, &it);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                ferry_stream_close(it);
                done = 1;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
                CHECK(it == NULL);
            }
        }
        CHECK(done);
        /* still whole after the failures */
        trace t = read_shard(st, 0, 1, 0, ds, 0, NULL);
        CHECK(t.samples > 0);
        trace_free(&t);
        ferry_stream_free(st);
    }
    ferry_dataset_free(ds);
}

/* ---- Settings ---- */

/* A stream that is never opened, with a schema of the given field size. */
static int never_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    return FERRY_ENOTSUP;
}
static int never_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    return FERRY_ENOTSUP;
}
static void never_close(void *iter) {}
static const ferry_stream_vtable never_vt = {never_open, never_next, never_close, NULL,
                                             NULL,       NULL,       NULL};

static ferry_stream *big_schema(int64_t bytes)
{
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "big");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = bytes;
    f.variable = 1;
    ferry_stream *st;
    CHECK_OK(ferry_stream_create(&st, &never_vt, NULL, &f, 1));
    return st;
}

TEST(invalid_settings_name_the_setting)
{
    ferry_dataset *ds = test_synthetic(10, 4, 0);
    ferry_stream *out = (ferry_stream *)1;
    /* each rejected call frees its inner (ASan checks) */
    CHECK_RC(ferry_stream_shuffle(&out, test_stream_of(ds), 0, 1), FERRY_EINVAL);
    CHECK(out == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "buffer_size 0 is outside [1, 16777216]");
    CHECK_RC(ferry_stream_shuffle(&out, test_stream_of(ds), ((size_t)1 << 24) + 1, 1),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "buffer_size 16777217");
    CHECK_RC(ferry_stream_shuffle(&out, big_schema((int64_t)1 << 34), 128, 1), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "shuffle: buffer_size 128");
    CHECK_OK(ferry_stream_shuffle(&out, big_schema((int64_t)1 << 20), 1024, 1)); /* 1 GiB: ok */
    ferry_stream_free(out);

    CHECK_RC(ferry_stream_group_batch(&out, test_stream_of(ds), label_key, NULL, 0, 10),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "batch_size 0 is outside [1, 1048576]");
    CHECK_RC(
        ferry_stream_group_batch(&out, test_stream_of(ds), label_key, NULL, (1 << 20) + 1, 1 << 21),
        FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "batch_size 1048577");
    CHECK_RC(ferry_stream_group_batch(&out, test_stream_of(ds), label_key, NULL, 8, 7),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "max_buffered 7 is outside [batch_size = 8, 16777216]");
    CHECK_RC(ferry_stream_group_batch(&out, test_stream_of(ds), label_key, NULL, 8,
                                      ((size_t)1 << 24) + 1),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "max_buffered 16777217");
    CHECK_RC(ferry_stream_group_batch(&out, test_stream_of(ds), NULL, NULL, 8, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "key_fn");
    CHECK_RC(ferry_stream_group_batch(&out, big_schema((int64_t)1 << 34), label_key, NULL, 8, 100),
             FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "group_batch: max_buffered 100");

    CHECK_RC(ferry_stream_group_by_length(&out, test_stream_of(ds), 1, 4, 8, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "field_index 1 (\"label\") is not a variable field");
    CHECK_RC(ferry_stream_group_by_length(&out, test_stream_of(ds), 3, 4, 8, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "field_index 3 is outside [0, 3)");
    CHECK_RC(ferry_stream_group_by_length(&out, test_stream_of(ds), -1, 4, 8, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "field_index -1");
    CHECK_RC(ferry_stream_group_by_length(&out, test_stream_of(ds), 2, 0, 8, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "bucket_width 0");
    CHECK_RC(ferry_stream_group_by_length(&out, test_stream_of(ds), 2, 1, 0, 8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "group_by_length: batch_size 0");

    CHECK_RC(ferry_stream_shard(&out, test_stream_of(ds), 2, 2), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard: k 2 is outside [0, n = 2)");
    CHECK_RC(ferry_stream_shard(&out, test_stream_of(ds), 0, 0), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "n = 0");

    /* a NULL inner (a failed earlier step) is an error, not a crash */
    CHECK_RC(ferry_stream_shuffle(&out, NULL, 4, 1), FERRY_EINVAL);
    CHECK_RC(ferry_stream_group_batch(&out, NULL, label_key, NULL, 4, 4), FERRY_EINVAL);
    CHECK_RC(ferry_stream_group_by_length(&out, NULL, 2, 1, 4, 4), FERRY_EINVAL);
    CHECK_RC(ferry_stream_shard(&out, NULL, 0, 1), FERRY_EINVAL);
    CHECK_RC(ferry_stream_repeat(&out, NULL, 1), FERRY_EINVAL);
    CHECK_RC(ferry_stream_take(&out, NULL, 1), FERRY_EINVAL);
    CHECK_RC(ferry_stream_skip(&out, NULL, 1), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "skip: the inner stream is NULL");
    CHECK(out == NULL);
    ferry_dataset_free(ds);
}

/* A stream whose one sample claims more rows than its variable field holds. */
static int liar_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    int *left = calloc(1, sizeof *left);
    CHECK(left);
    *left = 1;
    *iter = left;
    return 0;
}
static int liar_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    int *left = iter;
    if (!*left)
        return FERRY_END;
    (*left)--;
    memset(out->data[0], 'x', 4);
    out->length[0] = 5;
    return 0;
}
static const ferry_stream_vtable liar_vt = {liar_open, liar_next, script_close, NULL,
                                            NULL,      NULL,      NULL};

static int64_t zero_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    return 0;
}

TEST(a_length_past_its_bound_is_caught_before_copying)
{
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "t");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = 4;
    f.variable = 1;
    for (int g = 0; g < 2; g++) {
        ferry_stream *st;
        CHECK_OK(ferry_stream_create(&st, &liar_vt, NULL, &f, 1));
        if (g)
            CHECK_OK(ferry_stream_group_batch(&st, st, zero_key, NULL, 2, 2));
        else
            CHECK_OK(ferry_stream_shuffle(&st, st, 4, 1));
        uint8_t buf[4];
        int64_t len[1];
        void *data[1] = {buf};
        ferry_stream_iter *it;
        CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
        CHECK_RC(ferry_stream_next(it, &(ferry_sample){1, data, len, {0}}, NULL), FERRY_EOVERFLOW);
        CHECK_CONTAINS(ferry_last_errmsg(), "field \"t\": length 5 is outside [0, 4]");
        CHECK_RC(ferry_stream_next(it, &(ferry_sample){1, data, len, {0}}, NULL), FERRY_END);
        /* a sample with the wrong field count is refused */
        CHECK_RC(ferry_stream_next(it, &(ferry_sample){2, data, len, {0}}, NULL), FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "the sample has 2 fields, the stream 1");
        ferry_stream_close(it);
        ferry_stream_free(st);
    }
}
