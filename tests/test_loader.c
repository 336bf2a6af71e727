/*
 * The loader engine: determinism across worker counts and prefetch depths, order,
 * errors with their sample index, the skip budget, timeouts, cancel and free at any
 * point, held batches, worker init, settings, resume, streams and allocation
 * failures.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static ferry_dataset *synthetic(uint64_t count, uint64_t bytes, uint64_t var, uint64_t fail_every,
                                uint64_t sleep_us)
{
    ferry_synthetic_opts o = {.count = count,
                              .bytes = bytes,
                              .var_max = var,
                              .fail_every = fail_every,
                              .sleep_us = sleep_us,
                              .seed = 7};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_synthetic(&ds, &o));
    return ds;
}

static ferry_loader_opts opts(uint32_t batch, uint32_t workers, uint32_t prefetch, int shuffle)
{
    ferry_loader_opts o = test_loader_opts(batch, workers);
    o.prefetch = prefetch;
    o.shuffle = shuffle;
    o.seed = 1234;
    return o;
}

static uint64_t hash_batch(uint64_t h, const ferry_batch *b)
{
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, f, &t));
        CHECK(ferry_tensor_is_contiguous(&t));
        CHECK_EQ(t.shape[0], ferry_batch_size(b));
        h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        if (ferry_batch_field_info(b, f)->variable) {
            CHECK_OK(ferry_batch_lengths(b, f, &t));
            h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        }
    }
    return h;
}

/* Runs one epoch and returns the hash of every batch in delivery order. */
static uint64_t run_epoch(ferry_loader *l, uint64_t epoch, uint64_t *nsamples)
{
    uint64_t h = 0xcbf29ce484222325ull, n = 0;
    ferry_batch *b;
    int rc;
    CHECK_OK(ferry_loader_start(l, epoch, 0));
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        h = hash_batch(h, b);
        n += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    if (nsamples)
        *nsamples = n;
    return h;
}

TEST(same_bytes_for_any_workers_and_prefetch)
{
    ferry_dataset *ds = synthetic(3001, 24, 37, 0, 0);
    uint64_t want[2] = {0, 0};
    uint32_t workers[] = {0, 1, 2, 3, 5};
    uint32_t prefetch[] = {1, 2, 7};
    for (size_t w = 0; w < sizeof workers / sizeof *workers; w++) {
        for (size_t p = 0; p < sizeof prefetch / sizeof *prefetch; p++) {
            ferry_loader_opts o = opts(64, workers[w], prefetch[p], 1);
            ferry_loader *l;
            CHECK_OK(ferry_loader_create(&l, ds, &o));
            for (uint64_t e = 0; e < 2; e++) {
                uint64_t n, h = run_epoch(l, e, &n);
                CHECK_U64(n, 3001);
                if (!want[e])
                    want[e] = h;
                if (h != want[e])
                    test_fail(__FILE__, __LINE__,
                              "workers %u prefetch %u epoch %llu: digest differs", workers[w],
                              prefetch[p], (unsigned long long)e);
            }
            ferry_loader_free(l);
        }
    }
    CHECK(want[0] != want[1]); /* a new epoch, a new order */
    ferry_dataset_free(ds);
}

TEST(batches_hold_the_samples_the_sampler_names)
{
    ferry_dataset *ds = synthetic(1000, 8, 5, 0, 0);
    ferry_loader_opts o = opts(33, 2, 3, 1);
    ferry_loader *l;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_U64(ferry_loader_len(l), 31); /* ceil(1000 / 33) */
    uint8_t seen[1000] = {0};
    ferry_batch *b;
    uint64_t k = 0;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        CHECK_U64(ferry_batch_number(b), k);
        CHECK_EQ(ferry_batch_size(b), k == 30 ? 1000 - 30 * 33 : 33);
        ferry_tensor data, label, text, len;
        CHECK_OK(ferry_batch_field(b, 0, &data));
        CHECK_OK(ferry_batch_field(b, 1, &label));
        CHECK_OK(ferry_batch_field(b, 2, &text));
        CHECK_OK(ferry_batch_lengths(b, 2, &len));
        CHECK_RC(ferry_batch_lengths(b, 0, &len), FERRY_EINVAL);
        CHECK_OK(ferry_batch_lengths(b, 2, &len));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            uint64_t idx = ferry_batch_indices(b)[i];
            CHECK(idx < 1000);
            CHECK(!seen[idx]);
            seen[idx] = 1;
            /* the slot equals a direct read of the sample */
            uint8_t d[8], t[5] = {0};
            int64_t lab, lens[3] = {0, 0, 0};
            void *ptrs[3] = {d, &lab, t};
            ferry_sample s = {3, ptrs, lens, {0}};
            CHECK_OK(ferry_dataset_get(ds, idx, &s, ctx));
            CHECK(!memcmp((uint8_t *)data.data + i * 8, d, 8));
            CHECK_EQ(((int64_t *)label.data)[i], lab);
            CHECK_EQ(((int64_t *)len.data)[i], lens[2]);
            const uint8_t *row = (uint8_t *)text.data + i * 5;
            CHECK(!memcmp(row, t, (size_t)lens[2]));
            for (int64_t j = lens[2]; j < 5; j++)
                CHECK_EQ(row[j], 0); /* padded with zeros */
        }
        ferry_batch_release(b);
        k++;
    }
    CHECK_RC(rc, FERRY_END);
    CHECK_RC(ferry_loader_next(l, &b), FERRY_END); /* stays over until the next start */
    for (int i = 0; i < 1000; i++)
        CHECK(seen[i]);
    ferry_loader_free(l);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
}

TEST(drop_last_and_batch_counts)
{
    ferry_dataset *ds = synthetic(100, 4, 0, 0, 0);
    ferry_loader_opts o = opts(30, 2, 0, 0);
    o.drop_last = 1;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_U64(ferry_loader_len(l), 3);
    uint64_t n;
    run_epoch(l, 0, &n);
    CHECK_U64(n, 90);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

TEST(completion_order_delivers_the_same_batches)
{
    ferry_dataset *ds = synthetic(2000, 16, 0, 0, 0);
    uint64_t hs[2][64];
    for (int mode = 0; mode < 2; mode++) {
        ferry_loader_opts o = opts(32, 3, 6, 1);
        o.order = mode ? FERRY_ORDER_COMPLETION : FERRY_ORDER_SAMPLER;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        int n = 0, rc;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            CHECK(n < 63);
            hs[mode][n++] = hash_batch(ferry_batch_number(b), b);
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_EQ(n, 63);
        qsort(hs[mode], 63, sizeof(uint64_t), cmp_u64);
        ferry_loader_free(l);
    }
    CHECK(!memcmp(hs[0], hs[1], 63 * sizeof(uint64_t)));
    ferry_dataset_free(ds);
}

TEST(error_names_the_sample_whatever_the_workers)
{
    ferry_dataset *ds = synthetic(1000, 8, 0, 250, 0); /* samples 249, 499, ... fail */
    for (uint32_t w = 0; w <= 4; w++) {
        ferry_loader_opts o = opts(100, w, 3, 0);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        int rc, good = 0;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            good++;
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_ECORRUPT);
        CHECK_EQ(good, 2); /* batches 0 and 1 come out; batch 2 holds sample 249 */
        CHECK_CONTAINS(ferry_loader_errmsg(l), "batch 2, sample 249");
        CHECK_CONTAINS(ferry_loader_errmsg(l), "injected failure");
        CHECK_RC(ferry_loader_next(l, &b), FERRY_END); /* the epoch is over */
        /* a new epoch starts cleanly */
        CHECK_OK(ferry_loader_start(l, 1, 0));
        CHECK_OK(ferry_loader_next(l, &b));
        ferry_batch_release(b);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
}

TEST(skip_policy_drops_bad_samples_within_budget)
{
    ferry_dataset *ds = synthetic(1000, 8, 3, 100, 0); /* 10 bad samples */
    uint64_t want = 0;
    for (uint32_t w = 0; w <= 3; w++) {
        ferry_loader_opts o = opts(64, w, 4, 1);
        o.on_error = FERRY_ON_ERROR_SKIP;
        o.skip_budget = 10;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        int rc;
        uint64_t n = 0, h = 1;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            for (uint32_t i = 0; i < ferry_batch_size(b); i++)
                CHECK(ferry_batch_indices(b)[i] % 100 != 99);
            n += ferry_batch_size(b);
            h = hash_batch(h, b);
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_U64(n, 990);
        if (!want)
            want = h;
        CHECK_U64(h, want);
        ferry_loader_stats st;
        CHECK_OK(ferry_loader_stats_get(l, &st));
        CHECK_U64(st.skipped, 10);
        CHECK_U64(st.samples, 990);
        ferry_loader_free(l);
    }
    /* one over the budget */
    ferry_loader_opts o = opts(64, 2, 4, 0);
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = 9;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0)
        ferry_batch_release(b);
    CHECK_RC(rc, FERRY_EBUDGET);
    CHECK_CONTAINS(ferry_loader_errmsg(l), "skip budget of 9");
    CHECK_CONTAINS(ferry_loader_errmsg(l), "sample 999");
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(timeout_names_the_batch_and_outstanding_samples)
{
    ferry_dataset *ds = synthetic(64, 8, 0, 0, 300000); /* 0.3 s a sample */
    ferry_loader_opts o = opts(4, 2, 2, 0);
    o.timeout_ms = 30;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    uint64_t t0 = ferry_now_ns();
    CHECK_RC(ferry_loader_next(l, &b), FERRY_ETIMEDOUT);
    CHECK(ferry_now_ns() - t0 < 250000000u);
    CHECK_CONTAINS(ferry_loader_errmsg(l), "timed out after 30 ms");
    CHECK_CONTAINS(ferry_loader_errmsg(l), "batch 0");
    CHECK_CONTAINS(ferry_loader_errmsg(l), "samples outstanding");
    /* a timeout does not end the epoch: with patience the batch arrives */
    ferry_loader_free(l);
    o.timeout_ms = 5000;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_next(l, &b));
    CHECK_EQ(ferry_batch_size(b), 4);
    ferry_batch_release(b);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

typedef struct {
    ferry_loader *l;
    unsigned delay_us;
} cancel_arg;

static void *cancel_later(void *p)
{
    cancel_arg *a = p;
    usleep(a->delay_us);
    ferry_loader_cancel(a->l);
    return NULL;
}

TEST(cancel_from_another_thread_mid_epoch)
{
    ferry_dataset *ds = synthetic(100000, 8, 0, 0, 200);
    for (uint32_t w = 0; w <= 2; w += 2) {
        ferry_loader_opts o = opts(16, w, 4, 1);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        cancel_arg a = {l, 30000};
        pthread_t t;
        pthread_create(&t, NULL, cancel_later, &a);
        ferry_batch *b;
        int rc, n = 0;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            n++;
            ferry_batch_release(b);
        }
        pthread_join(t, NULL);
        CHECK_RC(rc, FERRY_ECANCELED);
        CHECK(n < 100000 / 16);
        CHECK_RC(ferry_loader_next(l, &b), FERRY_ECANCELED); /* until the next start */
        CHECK_OK(ferry_loader_start(l, 1, 0));
        CHECK_OK(ferry_loader_next(l, &b));
        ferry_batch_release(b);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
}

TEST(free_at_any_point_with_batches_held)
{
    ferry_dataset *ds = synthetic(5000, 32, 9, 0, 0);
    for (int stop = 0; stop < 6; stop++) {
        ferry_loader_opts o = opts(16, 3, 6, 1);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *held[3] = {0};
        int nheld = 0;
        for (int i = 0; i < stop; i++) {
            ferry_batch *b;
            CHECK_OK(ferry_loader_next(l, &b));
            if (i % 2 == 0 && nheld < 3)
                held[nheld++] = b;
            else
                ferry_batch_release(b);
        }
        ferry_loader_free(l); /* workers mid-epoch, batches still out */
        for (int i = 0; i < nheld; i++) {
            ferry_tensor t;
            CHECK_OK(ferry_batch_field(held[i], 0, &t));
            CHECK_EQ(t.shape[0], 16);
            CHECK(test_hash(1, t.data, ferry_tensor_nbytes(&t)) != 0);
            ferry_batch_release(held[i]); /* the last one frees the loader's memory */
        }
    }
    ferry_dataset_free(ds);
}

TEST(consumer_holds_batches_and_releases_in_any_order)
{
    ferry_dataset *ds = synthetic(1000, 8, 0, 0, 0);
    ferry_loader_opts o = opts(10, 2, 5, 0);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b[5], *extra;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ferry_loader_next(l, &b[i]));
        CHECK_U64(ferry_batch_number(b[i]), i);
    }
    CHECK_RC(ferry_loader_next(l, &extra), FERRY_ESTATE); /* every buffer is out */
    CHECK_CONTAINS(ferry_loader_errmsg(l), "held by the caller");
    int order[5] = {3, 0, 4, 1, 2};
    for (int i = 0; i < 5; i++)
        ferry_batch_release(b[order[i]]);
    /* the epoch goes on where it was */
    CHECK_OK(ferry_loader_next(l, &extra));
    CHECK_U64(ferry_batch_number(extra), 5);
    CHECK_U64(ferry_batch_indices(extra)[0], 50);
    ferry_batch_release(extra);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

static atomic_uint init_calls, init_mask;

static int count_init(uint32_t worker, uint32_t n, uint64_t seed, void *arg)
{
    CHECK_U64(seed, 1234);
    CHECK(arg == &init_calls);
    CHECK(worker < n);
    atomic_fetch_add(&init_calls, 1);
    atomic_fetch_or(&init_mask, 1u << worker);
    return 0;
}

static int failing_init(uint32_t worker, uint32_t n, uint64_t seed, void *arg)
{
    return worker == 1 ? ferry_error(-1, "no GPU for worker %u", worker) : 0;
}

TEST(worker_init_runs_once_per_worker)
{
    ferry_dataset *ds = synthetic(100, 8, 0, 0, 0);
    ferry_loader_opts o = opts(10, 4, 0, 0);
    o.worker_init = count_init;
    o.worker_init_arg = &init_calls;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_EQ(atomic_load(&init_calls), 4);
    CHECK_EQ(atomic_load(&init_mask), 0xf);
    uint64_t n;
    run_epoch(l, 0, &n);
    run_epoch(l, 1, &n); /* workers persist: no new init */
    CHECK_EQ(atomic_load(&init_calls), 4);
    ferry_loader_free(l);

    o.worker_init = failing_init;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ECALLBACK);
    CHECK(l == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "worker 1");
    CHECK_CONTAINS(ferry_last_errmsg(), "no GPU for worker 1");
    ferry_dataset_free(ds);
}

TEST(invalid_settings_name_the_setting_and_range)
{
    ferry_dataset *ds = synthetic(10, 8, 0, 0, 0);
    ferry_loader *l = NULL;
    ferry_loader_opts o;

    o = opts(0, 1, 0, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "batch_size 0 is outside [1, ");
    o = opts(1 << 25, 1, 0, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "batch_size");
    o = opts(4, 5000, 0, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "num_workers 5000 is outside [0, 1024]");
    o = opts(4, 1, 100000, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "prefetch 100000");
    o = opts(4, 1, 0, 0);
    o.timeout_ms = -1;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "timeout_ms -1 is negative");
    o = opts(4, 1, 0, 0);
    o.order = 7;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "order 7");
    o = opts(4, 1, 0, 0);
    o.on_error = 3;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "on_error 3");
    CHECK(l == NULL);
    ferry_dataset_free(ds);
}

TEST(resume_mid_epoch_gives_the_same_batches)
{
    ferry_dataset *ds = synthetic(999, 12, 0, 0, 0);
    ferry_loader_opts o = opts(50, 2, 3, 1);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t full[20];
    int n = 0, rc;
    ferry_batch *b;
    CHECK_OK(ferry_loader_start(l, 3, 0));
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        full[n++] = hash_batch(0, b);
        ferry_batch_release(b);
    }
    CHECK_EQ(n, 20);
    /* stop in the middle of an epoch (batches in flight), then resume at batch 7 */
    CHECK_OK(ferry_loader_start(l, 3, 0));
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    CHECK_OK(ferry_loader_start(l, 3, 7));
    for (int k = 7; k < 20; k++) {
        CHECK_OK(ferry_loader_next(l, &b));
        CHECK_U64(ferry_batch_number(b), k);
        CHECK_U64(hash_batch(0, b), full[k]);
        ferry_batch_release(b);
    }
    CHECK_RC(ferry_loader_next(l, &b), FERRY_END);
    CHECK_RC(ferry_loader_start(l, 3, 21), FERRY_ERANGE);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(borrowed_distributed_sampler_sets_the_indices)
{
    ferry_dataset *ds = synthetic(100, 4, 0, 0, 0);
    uint8_t seen[100] = {0};
    for (int64_t r = 0; r < 3; r++) {
        ferry_distributed_opts d = {100, r, 3, 1, 5, 0};
        ferry_sampler *s;
        CHECK_OK(ferry_sampler_distributed(&s, &d));
        ferry_loader_opts o = opts(8, 2, 0, 0);
        o.sampler = s;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        CHECK_U64(ferry_loader_len(l), 5); /* 34 samples a rank */
        ferry_batch *b;
        int rc;
        uint64_t pos = 0;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            for (uint32_t i = 0; i < ferry_batch_size(b); i++, pos++) {
                CHECK_U64(ferry_batch_indices(b)[i], ferry_sampler_at(s, pos));
                seen[ferry_batch_indices(b)[i]] = 1;
            }
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_U64(pos, 34);
        ferry_loader_free(l);
        ferry_sampler_free(s);
    }
    for (int i = 0; i < 100; i++)
        CHECK(seen[i]);
    ferry_dataset_free(ds);
}

TEST(stream_shards_cover_the_data_once_for_any_workers)
{
    ferry_dataset *ds = synthetic(1003, 8, 0, 0, 0);
    ferry_stream *st = test_stream_of(ds);
    uint64_t want = 0;
    for (uint32_t w = 0; w <= 4; w++) {
        ferry_loader_opts o = opts(16, w, 0, 0);
        o.stream_shards = 3;
        o.rank = 0;
        o.world_size = 1;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        for (uint64_t e = 0; e < 2; e++) {
            CHECK_OK(ferry_loader_start(l, e, 0));
            ferry_batch *b;
            int rc;
            uint64_t h = 1, n = 0;
            while ((rc = ferry_loader_next(l, &b)) == 0) {
                ferry_tensor t;
                CHECK_OK(ferry_batch_field(b, 1, &t)); /* label = index % 1000 */
                for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
                    CHECK_U64(ferry_batch_indices(b)[i], UINT64_MAX);
                    n++;
                }
                h = hash_batch(h, b);
                ferry_batch_release(b);
            }
            CHECK_RC(rc, FERRY_END);
            CHECK_U64(n, 1003);
            if (!want)
                want = h;
            CHECK_U64(h, want);
        }
        CHECK_RC(ferry_loader_start(l, 0, 3), FERRY_ENOTSUP);
        ferry_loader_free(l);
    }
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(stream_ranks_split_the_shards)
{
    ferry_dataset *ds = synthetic(500, 8, 0, 0, 0);
    ferry_stream *st = test_stream_of(ds);
    uint64_t total = 0;
    for (int64_t r = 0; r < 2; r++) {
        ferry_loader_opts o = opts(7, 2, 0, 0);
        o.stream_shards = 2;
        o.rank = r;
        o.world_size = 2;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        uint64_t n;
        run_epoch(l, 0, &n);
        CHECK_U64(n, 125 * 2); /* shards r*2, r*2+1 of 4 hold 125 each */
        total += n;
        ferry_loader_free(l);
    }
    CHECK_U64(total, 500);
    ferry_loader_opts o = opts(7, 2, 0, 0);
    o.rank = 2;
    o.world_size = 2;
    ferry_loader *l;
    CHECK_RC(ferry_loader_create_stream(&l, st, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "rank 2");
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(stats_count_what_was_delivered)
{
    ferry_dataset *ds = synthetic(640, 16, 0, 0, 0);
    ferry_loader_opts o = opts(64, 2, 0, 0);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t n;
    run_epoch(l, 0, &n);
    run_epoch(l, 1, &n);
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    CHECK_U64(st.samples, 1280);
    CHECK_U64(st.batches, 20);
    CHECK_U64(st.bytes, 1280 * (16 + 8));
    CHECK_EQ(st.num_workers, 2);
    CHECK(st.elapsed_ns > 0);
    CHECK(st.first_batch_ns > 0 && st.first_batch_ns <= st.elapsed_ns);
    CHECK(st.consumer_wait_ns <= st.elapsed_ns);
    CHECK(st.worker_busy_ns > 0);
    CHECK_U64(st.stage_ns[FERRY_STAGE_READ], st.worker_busy_ns);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(create_survives_every_allocation_failure)
{
    ferry_dataset *ds = synthetic(100, 8, 4, 0, 0);
    for (uint32_t w = 0; w <= 2; w += 2) {
        int done = 0;
        for (long n = 0; n < 1000 && !done; n++) {
            ferry_loader_opts o = opts(8, w, 3, 1);
            ferry_loader *l = (ferry_loader *)1;
            ferry__test_fail_alloc(n);
            int rc = ferry_loader_create(&l, ds, &o);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                uint64_t k;
                run_epoch(l, 0, &k);
                CHECK_U64(k, 100);
                ferry_loader_free(l);
                done = 1;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
                CHECK(l == NULL);
            }
        }
        CHECK(done);
    }
    ferry_dataset_free(ds);
}

TEST(many_epochs_reuse_the_workers)
{
    ferry_dataset *ds = synthetic(300, 8, 0, 0, 0);
    ferry_loader_opts o = opts(32, 2, 0, 1);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t prev = 0;
    for (uint64_t e = 0; e < 50; e++) {
        uint64_t n, h = run_epoch(l, e, &n);
        CHECK_U64(n, 300);
        CHECK(h != prev);
        prev = h;
    }
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(a_sampler_past_the_dataset_is_an_error)
{
    ferry_dataset *ds = synthetic(10, 8, 0, 0, 0);
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_sequential(&s, 20));
    ferry_loader_opts o = opts(5, 1, 0, 0);
    o.sampler = s;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    CHECK_RC(ferry_loader_next(l, &b), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_loader_errmsg(l), "sample 10");
    CHECK_CONTAINS(ferry_loader_errmsg(l), "past the dataset");
    ferry_loader_free(l);
    ferry_sampler_free(s);
    ferry_dataset_free(ds);
}

TEST(exported_tensors_keep_the_batch_alive)
{
    ferry_dataset *ds = synthetic(64, 16, 6, 0, 0);
    ferry_loader_opts o = opts(8, 2, 2, 0);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b, *c;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_tensor data, lens;
    CHECK_OK(ferry_batch_export(b, 0, 0, &data));
    CHECK_OK(ferry_batch_export(b, 2, 1, &lens));
    CHECK(data.release != NULL && data.owner != NULL);
    ferry_tensor none;
    CHECK_RC(ferry_batch_export(b, 0, 1, &none), FERRY_EINVAL); /* a fixed field has no lengths */
    uint64_t h = test_hash(1, data.data, ferry_tensor_nbytes(&data));
    void *held = data.data;
    ferry_batch_release(b); /* the tensors keep its memory; the batch goes back */
    for (int i = 1; i < 8; i++) {
        CHECK_OK(ferry_loader_next(l, &c)); /* a pool of 2: both cycle, with other memory */
        CHECK(ferry_batch_number(c) == (uint64_t)i);
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(c, 0, &t));
        CHECK(t.data != held);
        ferry_batch_release(c);
    }
    ferry_loader_free(l); /* and they outlive the loader */
    CHECK_U64(test_hash(1, data.data, ferry_tensor_nbytes(&data)), h);
    CHECK_EQ(lens.shape[0], 8);
    ferry_tensor_release(&data);
    ferry_tensor_release(&lens); /* the last reference frees the loader's memory */
    CHECK(data.data == NULL);
    ferry_dataset_free(ds);
}

TEST(kept_exports_never_starve_the_pool)
{
    ferry_dataset *ds = synthetic(400, 16, 0, 0, 0);
    for (uint32_t workers = 0; workers < 3; workers++) {
        ferry_loader_opts o = opts(8, workers, 2, 0);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_tensor kept[50], idx[50];
        ferry_batch *b;
        for (int i = 0; i < 50; i++) {
            CHECK_OK(ferry_loader_next(l, &b));
            CHECK_OK(ferry_batch_export(b, 0, 0, &kept[i]));
            CHECK_OK(ferry_batch_export_indices(b, &idx[i]));
            ferry_batch_release(b); /* a pool of 2 and 50 batches kept by their tensors */
        }
        CHECK_RC(ferry_loader_next(l, &b), FERRY_END);
        if (workers == 1)
            ferry_loader_free(l); /* the tensors outlive the loader too */
        for (int i = 0; i < 50; i++) {
            CHECK(idx[i].dtype == FERRY_U64 && idx[i].shape[0] == 8);
            for (int k = 0; k < 8; k++)
                CHECK_U64(((uint64_t *)idx[i].data)[k], (uint64_t)(i * 8 + k));
            /* synthetic data is Philox keyed by the index: compare with a fresh read */
            ferry_ctx *ctx;
            CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
            uint8_t want[16];
            int64_t label, len[2] = {0};
            void *data[2] = {want, &label};
            ferry_sample s = {2, data, len, {0}};
            CHECK_OK(ferry_dataset_get(ds, (uint64_t)i * 8 + 3, &s, ctx));
            CHECK(memcmp((uint8_t *)kept[i].data + 3 * 16, want, 16) == 0);
            ferry_ctx_free(ctx);
            ferry_tensor_release(&kept[i]);
            ferry_tensor_release(&idx[i]);
        }
        if (workers != 1)
            ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
}

TEST(drop_last_drops_short_stream_batches)
{
    ferry_dataset *ds = synthetic(100, 4, 0, 0, 0);
    ferry_stream *st = test_stream_of(ds);
    for (int drop = 0; drop < 2; drop++) {
        ferry_loader_opts o = opts(15, 2, 0, 0);
        o.stream_shards = 2; /* 50 samples a shard: 3 full batches and one of 5 */
        o.rank = 0;
        o.world_size = 1;
        o.drop_last = drop;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create_stream(&l, st, &o));
        uint64_t n;
        run_epoch(l, 0, &n);
        CHECK_U64(n, drop ? 90 : 100);
        ferry_loader_free(l);
    }
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* ---- Memory: the budget, and padding zeroed only where it was written ---- */

typedef struct {
    uint64_t n, bound;
} wide_ds;

static uint64_t wide_len(void *self)
{
    return ((wide_ds *)self)->n;
}

/* Sample i: len (i * 37) % 101 rows of 0xab (at most the bound); every 13th fails
 * after scribbling 0xcd over its whole slot. */
static int wide_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    (void)ctx;
    wide_ds *d = self;
    if (i % 13 == 12) {
        memset(out->data[0], 0xcd, (size_t)d->bound);
        return ferry_error(FERRY_ECORRUPT, "sample %llu is bad", (unsigned long long)i);
    }
    uint64_t len = (i * 37) % 101;
    if (len > d->bound)
        len = d->bound;
    memset(out->data[0], 0xab, (size_t)len);
    out->length[0] = (int64_t)len;
    return 0;
}

static ferry_dataset *wide(uint64_t n, uint64_t bound, wide_ds *d)
{
    static const ferry_dataset_vtable vt = {.len = wide_len, .get = wide_get};
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "text");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = (int64_t)bound;
    f.variable = 1;
    d->n = n;
    d->bound = bound;
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_create(&ds, &vt, d, &f, 1));
    return ds;
}

TEST(a_batch_over_the_memory_budget_is_an_error_naming_the_field)
{
    wide_ds d;
    ferry_dataset *ds = wide(100, (uint64_t)256 << 20, &d); /* a 256 MiB bound */
    ferry_loader_opts o = opts(64, 2, 0, 0);
    ferry_loader *l;
    o.memory_budget = (uint64_t)1 << 30;
    uint64_t t0 = ferry_now_ns();
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK(ferry_now_ns() - t0 < 100000000u); /* refused before allocating anything */
    const char *msg = ferry_last_errmsg();
    CHECK_CONTAINS(msg, "field \"text\"");
    CHECK_CONTAINS(msg, "bound 268435456 rows");
    CHECK_CONTAINS(msg, "batch_size 64");
    CHECK_CONTAINS(msg, "memory budget of 1.0 GiB");
    /* the default budget is a fraction of this machine's memory: 16 GiB of batch is
     * over it on any machine this suite runs on (under 64 GiB) */
    if (sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) < ((long)64 << 30)) {
        o.memory_budget = 0;
        CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "memory_budget; 0 = 1/4 of physical memory");
    }
    /* a batch that fits: the default prefetch is lowered to fit the budget */
    o.batch_size = 2;
    o.memory_budget = (uint64_t)1300 << 20; /* two buffers of 512 MiB, two workers' scratch: no */
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    CHECK_EQ(st.prefetch, 1);
    ferry_loader_free(l);
    /* an explicit prefetch over it is an error */
    o.prefetch = 3;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "prefetch 3 buffers");
    CHECK_CONTAINS(ferry_last_errmsg(), "at most 1 fit");
    ferry_dataset_free(ds);
}

TEST(variable_fields_are_zero_padded_whatever_the_slot_held_before)
{
    for (uint32_t w = 0; w <= 2; w += 2) {
        wide_ds d;
        ferry_dataset *ds = wide(2000, 100, &d);
        ferry_loader_opts o = opts(16, w, 1, 1);
        o.on_error = FERRY_ON_ERROR_SKIP;
        o.skip_budget = 1000;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        for (int epoch = 0; epoch < 2; epoch++) {
            CHECK_OK(ferry_loader_start(l, (uint64_t)epoch, 0));
            ferry_batch *b;
            int rc;
            uint64_t n = 0;
            while ((rc = ferry_loader_next(l, &b)) == 0) {
                ferry_tensor t, len;
                CHECK_OK(ferry_batch_field(b, 0, &t));
                CHECK_OK(ferry_batch_lengths(b, 0, &len));
                for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
                    const uint8_t *row = (const uint8_t *)t.data + 100 * i;
                    int64_t k = ((const int64_t *)len.data)[i];
                    CHECK_EQ(k, (int64_t)((ferry_batch_indices(b)[i] * 37) % 101 > 100
                                              ? 100
                                              : (ferry_batch_indices(b)[i] * 37) % 101));
                    for (int64_t j = 0; j < 100; j++)
                        if (row[j] != (j < k ? 0xab : 0))
                            test_fail(__FILE__, __LINE__, "sample %llu byte %lld: 0x%02x",
                                      (unsigned long long)ferry_batch_indices(b)[i], (long long)j,
                                      row[j]);
                }
                n += ferry_batch_size(b);
                ferry_batch_release(b);
            }
            CHECK_RC(rc, FERRY_END);
            CHECK_U64(n, 2000 - 2000 / 13);
        }
        ferry_loader_free(l);
        ferry_dataset_free(ds);
    }
}

static uint64_t run_len(void *self)
{
    (void)self;
    return 640;
}

/* Samples 0..599 fail, each after 2 ms; the rest are good. */
static int run_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    (void)self;
    (void)ctx;
    if (i < 600) {
        usleep(2000);
        return ferry_error(FERRY_ECORRUPT, "sample %llu is bad", (unsigned long long)i);
    }
    int64_t v = (int64_t)i;
    memcpy(out->data[0], &v, sizeof v);
    return 0;
}

/* Under the skip policy a long run of bad samples makes empty batches, which are
 * progress: the timeout is for the wait on one batch, so it does not fire. */
TEST(a_long_run_of_skipped_samples_is_no_timeout)
{
    static const ferry_dataset_vtable vt = {.len = run_len, .get = run_get};
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "v");
    f.dtype = FERRY_I64;
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_create(&ds, &vt, NULL, &f, 1));
    ferry_loader_opts o = opts(8, 2, 4, 0);
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = 1000;
    o.timeout_ms = 250; /* the run of bad samples takes about 600 ms; a batch, 8 ms */
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    int rc;
    uint64_t n = 0;
    uint64_t t0 = ferry_now_ns();
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        n += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    if (rc != FERRY_END)
        test_fail(__FILE__, __LINE__, "rc %d: %s", rc, ferry_loader_errmsg(l));
    CHECK(ferry_now_ns() - t0 > 250000000u); /* the run did take longer than the timeout */
    CHECK_U64(n, 40);
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    CHECK_U64(st.skipped, 600);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* A stream's shuffle buffer counts against the budget, once per stream shard. */
TEST(a_stream_shuffle_buffer_over_the_memory_budget_is_an_error)
{
    ferry_dataset *ds = synthetic(100, 1 << 20, 0, 0, 0); /* 1 MiB samples */
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 1000, 1)); /* about 1 GiB a shard */
    ferry_loader_opts o = opts(4, 2, 0, 0);
    o.rank = 0;
    o.world_size = 1;
    o.stream_shards = 4;
    o.memory_budget = (uint64_t)3 << 30;
    ferry_loader *l;
    CHECK_RC(ferry_loader_create_stream(&l, st, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "the stream's buffers");
    CHECK_CONTAINS(ferry_last_errmsg(), "stream_shards 4");
    /* two shards fit */
    o.stream_shards = 2;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    ferry_loader_free(l);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

typedef struct {
    pthread_mutex_t m;
    uint64_t n, sum;
} skip_log;

static void log_skip(uint64_t epoch, uint64_t index, int rc, const char *msg, void *arg)
{
    skip_log *s = arg;
    CHECK_EQ(rc, FERRY_ECORRUPT);
    CHECK(strstr(msg, "injected failure") != NULL);
    pthread_mutex_lock(&s->m);
    s->n++;
    s->sum += index + epoch;
    pthread_mutex_unlock(&s->m);
}

TEST(skip_has_a_default_budget_and_names_every_skipped_sample)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    CHECK_U64(o.skip_budget, FERRY_SKIP_BUDGET_DEFAULT);
    ferry_dataset *ds = synthetic(5000, 8, 0, 100, 0); /* 50 bad samples: 99, 199, ... */
    for (uint32_t w = 0; w <= 3; w += 3) {
        o = opts(64, w, 4, 1);
        o.on_error = FERRY_ON_ERROR_SKIP; /* the budget left at its default */
        skip_log log = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
        o.on_skip = log_skip;
        o.on_skip_arg = &log;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        uint64_t n;
        run_epoch(l, 0, &n);
        CHECK_U64(n, 4950);
        CHECK_U64(log.n, 50); /* every one, named */
        CHECK_U64(log.sum, 50 * 99 + 100 * (49 * 50 / 2));
        /* the first kept, in index order whatever the workers did */
        for (uint64_t k = 0; k < FERRY_SKIPPED_KEPT; k++) {
            uint64_t ep, ix;
            const char *msg;
            CHECK_OK(ferry_loader_skipped_sample(l, k, &ep, &ix, &msg));
            CHECK_U64(ep, 0);
            CHECK_U64(ix, 99 + 100 * k);
            char want[64];
            snprintf(want, sizeof want, "sample %llu", (unsigned long long)ix);
            CHECK_CONTAINS(msg, want);
        }
        uint64_t ep, ix;
        const char *msg;
        CHECK_RC(ferry_loader_skipped_sample(l, FERRY_SKIPPED_KEPT, &ep, &ix, &msg), FERRY_ERANGE);
        ferry_loader_stats st;
        CHECK_OK(ferry_loader_stats_get(l, &st));
        CHECK_U64(st.skipped, 50);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
}

TEST(data_bytes_count_lengths_not_padding)
{
    ferry_dataset *ds = synthetic(1000, 8, 300, 0, 0); /* data [8], label, text up to 300 */
    ferry_loader_opts o = opts(64, 2, 4, 0);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    int rc;
    uint64_t want = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor len;
        CHECK_OK(ferry_batch_lengths(b, 2, &len));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++)
            want += 8 + 8 + (uint64_t)((int64_t *)len.data)[i];
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    CHECK_U64(st.data_bytes, want);
    CHECK_U64(st.bytes, 1000 * (8 + 8 + 300));
    CHECK(st.data_bytes < st.bytes);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* A dataset whose get of one index blocks until the test lets it go. The callback
 * touches only these globals once it is let go, so that the dataset itself may be
 * freed while it waits. */
static atomic_int stuck_release, stuck_entered, stuck_returned;

static uint64_t stuck_len(void *self)
{
    return 64;
}

static int stuck_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    if (i == 20) {
        atomic_store(&stuck_entered, 1);
        while (!atomic_load(&stuck_release))
            usleep(1000);
        memset(out->data[0], 0xee, 8);
        atomic_store(&stuck_returned, 1);
        return 0;
    }
    memset(out->data[0], (int)i, 8);
    return 0;
}

static void stuck_destroy(void *self)
{
    free(self);
}

static ferry_dataset *stuck_dataset(void)
{
    static const ferry_dataset_vtable vt = {
        .len = stuck_len, .get = stuck_get, .destroy = stuck_destroy};
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "x");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = 8;
    ferry_dataset *ds;
    void *self = malloc(64);
    CHECK(self != NULL);
    CHECK_OK(ferry_dataset_create(&ds, &vt, self, &f, 1));
    atomic_store(&stuck_release, 0);
    atomic_store(&stuck_entered, 0);
    atomic_store(&stuck_returned, 0);
    return ds;
}

/* With a callback stuck in get, next times out, and free returns after its grace
 * period; the dataset is freed at once, then the callback is let go: the worker
 * finishes on its own without touching freed memory (ASan, TSan). */
static void free_with_a_stuck_callback(int use_plain_free)
{
    ferry_dataset *ds = stuck_dataset();
    ferry_loader_opts o = opts(4, 2, 4, 0);
    o.timeout_ms = 200;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    int rc, batches = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        batches++;
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_ETIMEDOUT);
    CHECK_EQ(batches, 5); /* 0..4; batch 5 holds sample 20 */
    CHECK(atomic_load(&stuck_entered));
    uint64_t t0 = ferry_now_ns();
    if (use_plain_free) {
        ferry_loader_free(l); /* waits the default grace, 5 s */
        uint64_t dt = ferry_now_ns() - t0;
        CHECK(dt >= 4500000000u && dt < 20000000000u);
    } else {
        CHECK_RC(ferry_loader_free_within(l, 100), FERRY_ETIMEDOUT);
        CHECK_CONTAINS(ferry_last_errmsg(), "1 worker still in a dataset callback after 100 ms");
        CHECK(ferry_now_ns() - t0 < 5000000000u);
    }
    CHECK(!atomic_load(&stuck_returned));
    ferry_dataset_free(ds); /* allowed: the callback touches nothing of it */
    atomic_store(&stuck_release, 1);
    while (!atomic_load(&stuck_returned))
        usleep(1000);
    usleep(200000); /* the worker ends and frees the loader's memory */
}

TEST(free_returns_with_a_callback_stuck_in_get)
{
    free_with_a_stuck_callback(0);
}

TEST(plain_free_waits_its_grace_period_then_returns)
{
    free_with_a_stuck_callback(1);
}

TEST(free_within_waits_for_workers_that_finish)
{
    ferry_dataset *ds = synthetic(256, 64, 0, 0, 2000);
    ferry_loader *l;
    ferry_loader_opts o = opts(8, 2, 4, 1);
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    CHECK_OK(ferry_loader_free_within(l, 5000)); /* a sample takes 2 ms: all stop */
    ferry_dataset_free(ds);
}
