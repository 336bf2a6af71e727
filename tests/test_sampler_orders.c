/*
 * The orders a caller or a shard layout decides: the shard-window sampler (the
 * shards in a random order, samples shuffled within windows of W shards), the
 * fixed order, the rank split of any sampler, and the shards a dataset declares.
 * Checked by properties against an independent walk of the order, and through a
 * loader for any number of workers and ranks.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "core/internal.h"

#include <stdint.h>

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        test_fail(__FILE__, __LINE__, "out of memory in the test");
    return p;
}

static uint64_t *read_all(const ferry_sampler *s)
{
    uint64_t len = ferry_sampler_len(s);
    uint64_t *v = xcalloc((size_t)len, sizeof *v);
    CHECK_OK(ferry_sampler_fill(s, 0, len, v));
    for (uint64_t i = 0; i < len; i += 1 + len / 50)
        CHECK_U64(ferry_sampler_at(s, i), v[i]);
    CHECK_U64(ferry_sampler_at(s, len), UINT64_MAX);
    return v;
}

/* The shard of index i: the last k with bounds[k] <= i among nonempty shards. */
static uint64_t shard_of(const uint64_t *bounds, uint64_t nshards, uint64_t i)
{
    for (uint64_t k = 0; k < nshards; k++)
        if (i >= bounds[k] && i < bounds[k + 1])
            return k;
    test_fail(__FILE__, __LINE__, "index %llu is in no shard", (unsigned long long)i);
}

static void check_once(const uint64_t *v, uint64_t len, uint64_t n)
{
    CHECK_U64(len, n);
    unsigned char *seen = xcalloc((size_t)n, 1);
    for (uint64_t i = 0; i < len; i++) {
        if (v[i] >= n || seen[v[i]])
            test_fail(__FILE__, __LINE__, "position %llu: index %llu is %s", (unsigned long long)i,
                      (unsigned long long)v[i], v[i] >= n ? "out of range" : "there twice");
        seen[v[i]] = 1;
    }
    free(seen);
}

/* Walks the order as a reader would: a window holds at most W shards, and a shard
 * outside it may come only once every shard of the window was read whole (no
 * empty shards in the layout, so every window's shards show up). Returns the
 * number of windows seen, and the number of times consecutive positions changed
 * shard (a measure of the shuffle within windows). */
static uint64_t check_windows(const uint64_t *v, uint64_t len, const uint64_t *bounds,
                              uint64_t nshards, uint64_t W, uint64_t *switches)
{
    uint64_t *left = xcalloc((size_t)nshards, sizeof *left); /* samples not yet read */
    unsigned char *in = xcalloc((size_t)nshards, 1);
    uint64_t *open = xcalloc((size_t)(W < nshards ? W : nshards) + 1, sizeof *open);
    uint64_t nopen = 0, windows = 0, last = UINT64_MAX;
    *switches = 0;
    for (uint64_t k = 0; k < nshards; k++)
        left[k] = bounds[k + 1] - bounds[k];
    for (uint64_t p = 0; p < len; p++) {
        uint64_t k = shard_of(bounds, nshards, v[p]);
        *switches += last != UINT64_MAX && k != last;
        last = k;
        if (!in[k]) {
            if (nopen == W || nopen == nshards || windows == 0) {
                for (uint64_t j = 0; j < nopen; j++)
                    if (left[open[j]])
                        test_fail(__FILE__, __LINE__,
                                  "position %llu: shard %llu starts while shard %llu of the "
                                  "window has %llu samples left (W %llu)",
                                  (unsigned long long)p, (unsigned long long)k,
                                  (unsigned long long)open[j], (unsigned long long)left[open[j]],
                                  (unsigned long long)W);
                nopen = 0;
                windows++;
            }
            in[k] = 1;
            open[nopen++] = k;
        }
        left[k]--;
    }
    free(left);
    free(in);
    free(open);
    return windows;
}

/* Shards of uneven sizes, 10 to 46 samples. */
static uint64_t *layout(uint64_t nshards, uint64_t seed)
{
    uint64_t *b = xcalloc((size_t)nshards + 1, sizeof *b);
    for (uint64_t k = 0; k < nshards; k++)
        b[k + 1] = b[k] + 10 + (ferry_hash64(seed, k) % 37);
    return b;
}

TEST(window_every_index_once_and_windows_respected)
{
    static const uint64_t shard_counts[] = {1, 2, 5, 17, 64};
    static const uint64_t widths[] = {1, 2, 3, 8, 100};
    for (size_t a = 0; a < sizeof shard_counts / sizeof *shard_counts; a++) {
        uint64_t ns = shard_counts[a], *b = layout(ns, ns);
        for (size_t c = 0; c < sizeof widths / sizeof *widths; c++) {
            uint64_t W = widths[c];
            ferry_sampler *s;
            CHECK_OK(ferry_sampler_window(&s, b, ns, W, 42));
            CHECK(!strcmp(ferry_sampler_kind(s), "window"));
            CHECK_U64(ferry_sampler_len(s), b[ns]);
            for (uint64_t e = 0; e < 3; e++) {
                CHECK_OK(ferry_sampler_set_epoch(s, e));
                uint64_t *v = read_all(s), sw;
                check_once(v, ferry_sampler_len(s), b[ns]);
                uint64_t w = W < ns ? W : ns;
                CHECK_U64(check_windows(v, b[ns], b, ns, w, &sw), (ns + w - 1) / w);
                /* within a window of two shards or more the samples interleave:
                 * read whole, shard by shard, there would be ns - 1 switches */
                CHECK(w >= 2 ? sw > ns : sw == ns - 1);
                free(v);
            }
            ferry_sampler_free(s);
        }
        free(b);
    }
}

TEST(window_order_is_a_function_of_seed_and_epoch)
{
    uint64_t ns = 12, *b = layout(ns, 3), n = b[ns];
    ferry_sampler *s1, *s2, *s3;
    CHECK_OK(ferry_sampler_window(&s1, b, ns, 3, 7));
    CHECK_OK(ferry_sampler_window(&s2, b, ns, 3, 7));
    CHECK_OK(ferry_sampler_window(&s3, b, ns, 3, 8));
    uint64_t *e0 = read_all(s1), *same = read_all(s2), *other_seed = read_all(s3);
    CHECK(!memcmp(e0, same, n * sizeof *e0));
    CHECK(memcmp(e0, other_seed, n * sizeof *e0));
    CHECK_OK(ferry_sampler_set_epoch(s1, 1));
    uint64_t *e1 = read_all(s1);
    CHECK(memcmp(e0, e1, n * sizeof *e0));
    /* the shards' order changes with the epoch too, not only the samples' */
    CHECK(shard_of(b, ns, e0[0]) != shard_of(b, ns, e1[0]) ||
          shard_of(b, ns, e0[n - 1]) != shard_of(b, ns, e1[n - 1]));
    /* back to epoch 0: the same order again (a resume seeks into it) */
    CHECK_OK(ferry_sampler_set_epoch(s1, 0));
    uint64_t *again = read_all(s1);
    CHECK(!memcmp(e0, again, n * sizeof *e0));
    free(e0), free(same), free(other_seed), free(e1), free(again), free(b);
    ferry_sampler_free(s1), ferry_sampler_free(s2), ferry_sampler_free(s3);
}

TEST(window_empty_shards_and_empty_data)
{
    uint64_t b[] = {0, 0, 5, 5, 5, 9, 9, 20, 20};
    uint64_t ns = 8;
    for (uint64_t W = 1; W <= 9; W++) {
        ferry_sampler *s;
        CHECK_OK(ferry_sampler_window(&s, b, ns, W, W));
        for (uint64_t e = 0; e < 4; e++) {
            CHECK_OK(ferry_sampler_set_epoch(s, e));
            uint64_t *v = read_all(s);
            check_once(v, ferry_sampler_len(s), 20);
            free(v);
        }
        ferry_sampler_free(s);
    }
    uint64_t none[] = {0, 0, 0};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_window(&s, none, 2, 1, 0));
    CHECK_U64(ferry_sampler_len(s), 0);
    CHECK_U64(ferry_sampler_at(s, 0), UINT64_MAX);
    ferry_sampler_free(s);
}

TEST(window_invalid_arguments)
{
    ferry_sampler *s = (ferry_sampler *)1;
    uint64_t b[] = {0, 4, 3, 9};
    CHECK_RC(ferry_sampler_window(&s, b, 3, 2, 0), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard 1 ends at 3");
    uint64_t c[] = {1, 4};
    CHECK_RC(ferry_sampler_window(&s, c, 1, 2, 0), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "starts at 1");
    uint64_t d[] = {0, 4};
    CHECK_RC(ferry_sampler_window(&s, d, 1, 0, 0), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "window 0");
    CHECK_RC(ferry_sampler_window(&s, d, 0, 1, 0), FERRY_EINVAL);
    CHECK_RC(ferry_sampler_window(&s, NULL, 2, 1, 0), FERRY_EINVAL);
}

TEST(fixed_order_as_given_every_epoch)
{
    uint64_t idx[] = {9, 3, 3, 0, 7, 1};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_fixed(&s, idx, 6));
    CHECK(!strcmp(ferry_sampler_kind(s), "fixed"));
    idx[0] = 100; /* copied */
    for (uint64_t e = 0; e < 3; e++) {
        CHECK_OK(ferry_sampler_set_epoch(s, e));
        uint64_t *v = read_all(s);
        CHECK_U64(ferry_sampler_len(s), 6);
        CHECK_U64(v[0], 9);
        CHECK_U64(v[1], 3);
        CHECK_U64(v[2], 3);
        CHECK_U64(v[5], 1);
        free(v);
    }
    ferry_sampler_free(s);
    CHECK_OK(ferry_sampler_fixed(&s, NULL, 0));
    CHECK_U64(ferry_sampler_len(s), 0);
    ferry_sampler_free(s);
    CHECK_RC(ferry_sampler_fixed(&s, NULL, 3), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "fixed sampler");
}

/* The union of the ranks' t-th batches of batch G / world each is the same set for
 * every world size, and each rank's part is what DistributedSampler's rule gives. */
static void check_split(ferry_sampler *(*make)(void), uint64_t G)
{
    ferry_sampler *whole = make();
    uint64_t n = ferry_sampler_len(whole), *all = read_all(whole);
    static const int64_t worlds[] = {1, 2, 3, 6};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        int64_t W = worlds[w];
        uint64_t B = G / (uint64_t)W;
        uint64_t *got = xcalloc((size_t)n + (size_t)W, sizeof *got);
        for (int64_t r = 0; r < W; r++) {
            ferry_sampler *s = make();
            CHECK_OK(ferry_sampler_split(s, r, W, 0));
            uint64_t len = ferry_sampler_len(s), *v = read_all(s);
            CHECK_U64(len, (n + (uint64_t)W - 1) / (uint64_t)W);
            for (uint64_t p = 0; p < len; p++) {
                uint64_t g = (uint64_t)r + p * (uint64_t)W; /* its place in the whole order */
                CHECK_U64(v[p], all[g % n]);
                /* batch t = p / B of rank r is part of global batch t */
                uint64_t t = p / B;
                CHECK(g / G == t || g >= n);
                got[g < n ? g : n + (uint64_t)r] = v[p];
            }
            free(v);
            ferry_sampler_free(s);
        }
        CHECK(!memcmp(got, all, n * sizeof *all));
        free(got);
    }
    ferry_sampler *s = make();
    CHECK_RC(ferry_sampler_split(s, 3, 3, 0), FERRY_EINVAL);
    CHECK_RC(ferry_sampler_split(s, 0, 0, 0), FERRY_EINVAL);
    CHECK_OK(ferry_sampler_split(s, 1, 4, 1));
    CHECK_U64(ferry_sampler_len(s), n / 4);
    ferry_sampler_free(s);
    free(all);
    ferry_sampler_free(whole);
}

static uint64_t split_bounds[] = {0, 10, 11, 40, 41, 66, 90, 120};
static ferry_sampler *make_window(void)
{
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_window(&s, split_bounds, 7, 2, 5));
    CHECK_OK(ferry_sampler_set_epoch(s, 3));
    return s;
}
static ferry_sampler *make_fixed(void)
{
    uint64_t idx[120];
    for (int i = 0; i < 120; i++)
        idx[i] = (uint64_t)(119 - i) * 7 % 120;
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_fixed(&s, idx, 120));
    return s;
}
static ferry_sampler *make_weighted(void)
{
    double w[50];
    for (int i = 0; i < 50; i++)
        w[i] = 1 + i % 5;
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_weighted(&s, w, 50, 120, 0 + 1, 9));
    return s;
}

TEST(split_same_global_batches_for_any_world_size)
{
    check_split(make_window, 6);
    check_split(make_fixed, 6);
    check_split(make_weighted, 6);
}

TEST(split_pads_like_distributed)
{
    /* a random sampler split is the distributed sampler, position for position */
    for (int64_t W = 1; W <= 5; W++)
        for (int64_t r = 0; r < W; r++)
            for (int drop = 0; drop < 2; drop++) {
                ferry_sampler *a, *b;
                CHECK_OK(ferry_sampler_random(&a, 23, 4, 0, 0));
                CHECK_OK(ferry_sampler_split(a, r, W, drop));
                ferry_distributed_opts o = {23, r, W, 1, 4, drop};
                CHECK_OK(ferry_sampler_distributed(&b, &o));
                CHECK_OK(ferry_sampler_set_epoch(a, 2));
                CHECK_OK(ferry_sampler_set_epoch(b, 2));
                CHECK_U64(ferry_sampler_len(a), ferry_sampler_len(b));
                for (uint64_t p = 0; p < ferry_sampler_len(a); p++)
                    CHECK_U64(ferry_sampler_at(a, p), ferry_sampler_at(b, p));
                CHECK(!strcmp(ferry_sampler_kind(b), "distributed"));
                ferry_sampler_free(a);
                ferry_sampler_free(b);
            }
}

/* ---- Through a loader: workers, ranks, resume ---- */

/* The indices of every batch of an epoch, in delivery order; *nb batches. */
static uint64_t *loader_epoch(ferry_dataset *ds, ferry_sampler *s, uint32_t batch, uint32_t workers,
                              uint64_t epoch, uint64_t first, uint64_t *count)
{
    ferry_loader_opts o = test_loader_opts(batch, workers);
    o.sampler = s;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_start(l, epoch, first));
    uint64_t cap = ferry_sampler_len(s) + 1, n = 0;
    uint64_t *out = xcalloc((size_t)cap, sizeof *out);
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        const uint64_t *ix = ferry_batch_indices(b);
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, 1, &t)); /* synthetic's label: i % classes */
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            CHECK(n < cap);
            CHECK_U64(((const int64_t *)t.data)[i], ix[i] % 1000000);
            out[n++] = ix[i];
        }
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    ferry_loader_free(l);
    *count = n;
    return out;
}

static ferry_dataset *sharded_synthetic(void)
{
    ferry_synthetic_opts so = {.count = 300, .bytes = 8, .seed = 1, .classes = 1000000};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    uint64_t b[] = {0, 40, 41, 100, 101, 170, 230, 300};
    CHECK_OK(ferry_dataset_set_shards(ds, b, 7));
    return ds;
}

TEST(window_through_loader_any_workers_and_ranks)
{
    ferry_dataset *ds = sharded_synthetic();
    const uint64_t *b;
    uint64_t ns = ferry_dataset_shards(ds, &b);
    CHECK_U64(ns, 7);
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_window(&s, b, ns, 2, 11));
    uint64_t n0, *ref = loader_epoch(ds, s, 12, 0, 1, 0, &n0), sw;
    check_once(ref, n0, 300);
    CHECK_U64(check_windows(ref, n0, b, ns, 2, &sw), 4);
    for (uint32_t w = 1; w <= 3; w++) {
        uint64_t n, *v = loader_epoch(ds, s, 12, w, 1, 0, &n);
        CHECK_U64(n, n0);
        CHECK(!memcmp(v, ref, n * sizeof *v));
        free(v);
    }
    /* a resume at batch 7 hands out the rest of the same order */
    uint64_t nr, *rest = loader_epoch(ds, s, 12, 2, 1, 7, &nr);
    CHECK_U64(nr, n0 - 7 * 12);
    CHECK(!memcmp(rest, ref + 7 * 12, nr * sizeof *rest));
    free(rest);
    /* another epoch, another order */
    uint64_t n2, *e2 = loader_epoch(ds, s, 12, 2, 2, 0, &n2);
    CHECK(memcmp(e2, ref, n0 * sizeof *e2));
    free(e2);
    ferry_sampler_free(s);
    /* ranks: 2 and 3 with a global batch of 12 (6 or 4 each): rank r's t-th batch
     * is its positions [tB, (t+1)B), places r + pW of the whole order, so the
     * union of the ranks' t-th batches is the one rank's t-th batch */
    for (int64_t W = 2; W <= 3; W++) {
        uint64_t B = 12 / (uint64_t)W, total = 0;
        uint64_t *got = xcalloc(300, sizeof *got);
        for (int64_t r = 0; r < W; r++) {
            CHECK_OK(ferry_sampler_window(&s, b, ns, 2, 11));
            CHECK_OK(ferry_sampler_split(s, r, W, 0));
            uint64_t n, *v = loader_epoch(ds, s, (uint32_t)B, (uint32_t)r, 1, 0, &n);
            CHECK_U64(n, 300 / (uint64_t)W);
            for (uint64_t p = 0; p < n; p++)
                got[(uint64_t)r + p * (uint64_t)W] = v[p];
            total += n;
            free(v);
            ferry_sampler_free(s);
        }
        CHECK_U64(total, 300);
        for (uint64_t t = 0; t < 25; t++)
            CHECK(!memcmp(got + t * 12, ref + t * 12, 12 * sizeof *got));
        free(got);
    }
    free(ref);
    ferry_dataset_free(ds);
}

/* The indices an epoch hands out, with field "id" checked to be index + 1 (MDS's
 * samples carry it). */
static uint64_t *loader_epoch_ids(ferry_dataset *ds, ferry_sampler *s, uint32_t batch,
                                  uint32_t workers, uint64_t *count)
{
    ferry_loader_opts o = test_loader_opts(batch, workers);
    o.sampler = s;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    int id = ferry_dataset_find_field(ds, "id");
    CHECK(id >= 0);
    uint64_t n = 0, *out = xcalloc((size_t)ferry_sampler_len(s), sizeof *out);
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, id, &t));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            CHECK_U64(((const int64_t *)t.data)[i], ferry_batch_indices(b)[i] + 1);
            out[n++] = ferry_batch_indices(b)[i];
        }
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    ferry_loader_free(l);
    *count = n;
    return out;
}

/* ---- The shards datasets declare ---- */

TEST(dataset_shards_default_and_set)
{
    ferry_dataset *ds = test_synthetic(50, 0, 0);
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 1);
    CHECK_U64(b[0], 0);
    CHECK_U64(b[1], 50);
    uint64_t bad1[] = {0, 20, 10, 50}, bad2[] = {0, 20, 49}, bad3[] = {1, 50}, ok[] = {0, 0, 50};
    CHECK_RC(ferry_dataset_set_shards(ds, bad1, 3), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard 1 ends at 10");
    CHECK_RC(ferry_dataset_set_shards(ds, bad2, 2), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "[0, 50)");
    CHECK_RC(ferry_dataset_set_shards(ds, bad3, 1), FERRY_EINVAL);
    CHECK_RC(ferry_dataset_set_shards(ds, ok, 0), FERRY_EINVAL);
    CHECK_U64(ferry_dataset_shards(ds, &b), 1); /* unchanged by the refusals */
    CHECK_OK(ferry_dataset_set_shards(ds, ok, 2));
    ok[1] = 7; /* copied */
    CHECK_U64(ferry_dataset_shards(ds, &b), 2);
    CHECK_U64(b[1], 0);
    CHECK_U64(b[2], 50);
    ferry_dataset_free(ds);
}

/* Record shards of 7 records each (the last shorter): the dataset's shards are the
 * files, and a window sampler over them reads the records each names. */
TEST(dataset_shards_records_and_window_over_them)
{
    test_make_dir("orders-records");
    ferry_field f[1];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "x");
    f[0].dtype = FERRY_U64;
    ferry_writer_opts wo = {test_dir, NULL, f, 1, 0, 7, 0};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &wo));
    for (uint64_t i = 0; i < 60; i++) {
        void *data[1] = {&i};
        int64_t len[1] = {0};
        ferry_sample s = {1, data, len, {0}};
        CHECK_OK(ferry_writer_append(w, &s));
    }
    CHECK_OK(ferry_writer_commit(w));
    char spec[600];
    snprintf(spec, sizeof spec, "records:%s", test_dir);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    const uint64_t *b;
    uint64_t ns = ferry_dataset_shards(ds, &b);
    CHECK_U64(ns, 9);
    for (uint64_t k = 0; k <= ns; k++)
        CHECK_U64(b[k], k < ns ? 7 * k : 60);
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_window(&s, b, ns, 3, 1));
    ferry_loader_opts o = test_loader_opts(5, 2);
    o.sampler = s;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t order[60], n = 0, sw;
    ferry_batch *bt;
    int rc;
    while ((rc = ferry_loader_next(l, &bt)) == 0) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(bt, 0, &t));
        for (uint32_t i = 0; i < ferry_batch_size(bt); i++) {
            /* the record's bytes are its index: the sampler's index was read */
            CHECK_U64(((const uint64_t *)t.data)[i], ferry_batch_indices(bt)[i]);
            order[n++] = ferry_batch_indices(bt)[i];
        }
        ferry_batch_release(bt);
    }
    CHECK_RC(rc, FERRY_END);
    check_once(order, n, 60);
    CHECK_U64(check_windows(order, n, b, ns, 3, &sw), 3);
    ferry_loader_free(l);
    ferry_sampler_free(s);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* Token shards: one a file; windows of T tokens in each. */
TEST(dataset_shards_tokens)
{
    test_make_dir("orders-tokens");
    char path[512];
    uint64_t tokens[] = {101, 33, 64}; /* 100, 32 and 63 windows of 1 */
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/t%d.bin", test_dir, k);
        ferry_tokens_writer *w;
        CHECK_OK(ferry_tokens_writer_open(&w, path, FERRY_U16));
        for (uint64_t i = 0; i < tokens[k]; i++) {
            uint16_t v = (uint16_t)i;
            CHECK_OK(ferry_tokens_writer_append(w, &v, 1));
        }
        CHECK_OK(ferry_tokens_writer_commit(w));
    }
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:%s/t*.bin,seq=4", test_dir);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 3);
    CHECK_U64(b[1], 25);
    CHECK_U64(b[2], 33);
    CHECK_U64(b[3], 48);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* TFRecord files (real ones, written by TensorFlow's tools), and an image
 * decorator over a sharded source passes its shards on. */
TEST(dataset_shards_tfrecord)
{
    char spec[512];
    test_need_shared(FERRY_SHARED_DIR
                     "/testdata/tfrecord/ydf_toy_uncompressed-00000-of-00002.tfrecord");
    snprintf(spec, sizeof spec, "tfrecord:%s/testdata/tfrecord/ydf_toy_uncompressed-*",
             FERRY_SHARED_DIR);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 2);
    CHECK_U64(b[1], 3);
    CHECK_U64(b[2], 4);
    ferry_dataset_free(ds);
}

/* WebDataset tars written here: 3, 0 and 2 samples. */
TEST(dataset_shards_wds)
{
    test_make_dir("orders-wds");
    static const int counts[] = {3, 0, 2};
    for (int k = 0; k < 3; k++) {
        uint8_t tar[512 * 16];
        size_t n = 0;
        memset(tar, 0, sizeof tar);
        for (int i = 0; i < counts[k]; i++) {
            char name[64];
            snprintf(name, sizeof name, "s%d_%d.cls", k, i);
            test_tar_header(tar + n, name, '0', 1, 0);
            tar[n + 512] = (uint8_t)('0' + i);
            n += 1024;
        }
        n += 1024; /* the end: two zero blocks */
        char path[512], file[32];
        snprintf(file, sizeof file, "p%d.tar", k);
        test_write_file(test_path(file, path), tar, n);
    }
    char spec[600];
    snprintf(spec, sizeof spec, "wds:%s", test_dir);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 3);
    CHECK_U64(b[0], 0);
    CHECK_U64(b[1], 3);
    CHECK_U64(b[2], 3);
    CHECK_U64(b[3], 5);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* ---- The command: ferry bench --shuffle --window-shards W ---- */

static void bench_digest(const char *src, const char *opts, char *digest)
{
    char args[1024], out[8192];
    snprintf(args, sizeof args, "bench '%s' --batch 8 --epochs 2 --json --digest %s", src, opts);
    int st = test_ferry_cli(args, out, sizeof out);
    if (st != 0)
        test_fail(__FILE__, __LINE__, "ferry %s: status %d: %s", args, st, out);
    CHECK(test_json_field(out, "digest", digest, 32) != NULL);
}

TEST(cli_bench_window_shards)
{
    test_make_dir("orders-cli");
    char args[1024], src[600], out[8192];
    snprintf(args, sizeof args, "pack synthetic:200 '%s' --shard-records 25", test_dir);
    int st = test_ferry_cli(args, out, sizeof out);
    if (st != 0)
        test_fail(__FILE__, __LINE__, "ferry %s: status %d: %s", args, st, out);
    snprintf(src, sizeof src, "records:%s", test_dir);
    char d0[32], d2[32], full[32], seed[32];
    bench_digest(src, "--shuffle --window-shards 2 --workers 0", d0);
    bench_digest(src, "--shuffle --window-shards 2 --workers 3", d2);
    bench_digest(src, "--shuffle --workers 2", full);
    bench_digest(src, "--shuffle --window-shards 2 --seed 9", seed);
    CHECK(!strcmp(d0, d2));
    CHECK(strcmp(d0, full) != 0);
    CHECK(strcmp(d0, seed) != 0);
    snprintf(args, sizeof args, "bench '%s' --shuffle --window-shards 3 --no-progress", src);
    test_ferry_cli_says(args, 0, "shuffled in windows of 3 of 8 shards");
    snprintf(args, sizeof args, "bench '%s' --shuffle --window-shards 3 --json", src);
    test_ferry_cli_says(args, 0,
                        "\"order\": \"shard_window\", \"shuffle_buffer\": 0, "
                        "\"window_shards\": 3, \"shards\": 8");
    snprintf(args, sizeof args, "bench '%s' --window-shards 3", src);
    test_ferry_cli_says(args, 2, "--window-shards needs --shuffle");
    snprintf(args, sizeof args, "bench '%s,stream=1' --shuffle --window-shards 3", src);
    test_ferry_cli_says(args, 2, "a stream reads its files in a new random order each epoch");
    test_remove_dir();
}

/* MosaicML's MDS shards (written by streaming.MDSWriter): 64 shards, 9999
 * samples, sample i has id i + 1; shard 0 holds 167 and shard 1 164. A window
 * sampler over them reads each window's shards whole before the next. */
TEST(dataset_shards_mds)
{
    char spec[512];
    test_need_shared(FERRY_SHARED_DIR "/testdata/mds/mosaic_mix_zstd/index.json");
    snprintf(spec, sizeof spec, "mds:%s/testdata/mds/mosaic_mix_zstd", FERRY_SHARED_DIR);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    const uint64_t *b;
    uint64_t ns = ferry_dataset_shards(ds, &b);
    CHECK_U64(ns, 64);
    CHECK_U64(b[1], 167);
    CHECK_U64(b[2], 167 + 164);
    CHECK_U64(b[64], 9999);
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_window(&s, b, ns, 4, 3));
    uint64_t n, sw, *v = loader_epoch_ids(ds, s, 64, 2, &n);
    check_once(v, n, 9999);
    CHECK_U64(check_windows(v, n, b, ns, 4, &sw), 16);
    free(v);
    ferry_sampler_free(s);
    ferry_dataset_free(ds);
}

/* ---- Out of memory: every allocation of the constructors failing in turn ---- */

static int make_oom(int which, ferry_sampler **out)
{
    static const uint64_t b[] = {0, 3, 3, 9}, idx[] = {4, 1, 1};
    return which == 0 ? ferry_sampler_window(out, b, 3, 2, 1) : ferry_sampler_fixed(out, idx, 3);
}

TEST(oom_window_fixed_and_dataset_shards)
{
    for (int which = 0; which < 2; which++) {
        long k;
        for (k = 0;; k++) {
            ferry_sampler *s = (ferry_sampler *)&s;
            ferry__test_fail_alloc(k);
            int rc = make_oom(which, &s);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                CHECK(ferry_sampler_at(s, ferry_sampler_len(s) - 1) != UINT64_MAX);
                ferry_sampler_free(s);
                break;
            }
            CHECK_RC(rc, FERRY_ENOMEM);
            CHECK(s == NULL);
            CHECK(k < 10);
        }
        CHECK(k >= 2);
    }
    ferry_dataset *ds = test_synthetic(9, 0, 0);
    uint64_t b[] = {0, 4, 9};
    ferry__test_fail_alloc(0);
    int rc = ferry_dataset_set_shards(ds, b, 2);
    ferry__test_fail_alloc(-1);
    CHECK_RC(rc, FERRY_ENOMEM);
    const uint64_t *got;
    CHECK_U64(ferry_dataset_shards(ds, &got), 1); /* as it was */
    CHECK_OK(ferry_dataset_set_shards(ds, b, 2));
    CHECK_U64(ferry_dataset_shards(ds, &got), 2);
    ferry_dataset_free(ds);
}
