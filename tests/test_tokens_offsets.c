/*
 * Token windows beyond llm.c's cut: a stride (windows every S tokens, down to
 * every token, the contexts nanoGPT's get_batch samples) and random offsets per
 * epoch. Shards hold token t = base + position, so every window names where it
 * starts: each must be exactly the tokens at its offset, the offset a function of
 * (seed, epoch, shard) alone (the same for any workers and ranks), and a new one
 * each epoch.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/tokens.h>

#define SEQ 8
#define STRIDE_BASE 1000000u

static const uint64_t counts[] = {500, 333, 17};

static void write_shards(void)
{
    test_make_dir("tokens-offsets");
    for (int k = 0; k < 3; k++) {
        char path[512], name[32];
        snprintf(name, sizeof name, "s%d.bin", k);
        ferry_tokens_writer *w;
        CHECK_OK(ferry_tokens_writer_open(&w, test_path(name, path), FERRY_U32));
        for (uint64_t i = 0; i < counts[k]; i++) {
            uint32_t v = (uint32_t)(k * STRIDE_BASE + i);
            CHECK_OK(ferry_tokens_writer_append(w, &v, 1));
        }
        CHECK_OK(ferry_tokens_writer_commit(w));
    }
}

static ferry_dataset *open_with(const char *opts)
{
    char spec[700];
    snprintf(spec, sizeof spec, "tokens:%s/s*.bin,seq=%d%s", test_dir, SEQ, opts);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    return ds;
}

/* Checks one window (input and target, uint32) against the tokens at its place;
 * returns its shard and sets *start. */
static int check_window(const uint32_t *in, const uint32_t *tg, uint64_t *start)
{
    int k = (int)(in[0] / STRIDE_BASE);
    *start = in[0] % STRIDE_BASE;
    CHECK(k < 3);
    CHECK(*start + SEQ + 1 <= counts[k]);
    for (int j = 0; j < SEQ; j++) {
        CHECK_U64(in[j], in[0] + (uint32_t)j);
        CHECK_U64(tg[j], in[0] + (uint32_t)j + 1);
    }
    return k;
}

/* The start of every sample of an epoch read through a loader (by index), with
 * every window checked; epoch's batches from first_batch on. */
static void epoch_starts(ferry_dataset *ds, ferry_sampler *s, uint32_t workers, uint64_t epoch,
                         uint64_t seed, uint64_t *start_of, uint64_t *hash)
{
    ferry_loader_opts o = test_loader_opts(7, workers);
    o.sampler = s;
    o.shuffle = s == NULL;
    o.seed = seed;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_start(l, epoch, 0));
    ferry_batch *b;
    int rc;
    *hash = 0xcbf29ce484222325ull;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor in, tg;
        CHECK_OK(ferry_batch_field(b, 0, &in));
        CHECK_OK(ferry_batch_field(b, 1, &tg));
        *hash = test_hash(*hash, in.data, ferry_tensor_nbytes(&in));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            uint64_t st;
            check_window((const uint32_t *)in.data + i * SEQ, (const uint32_t *)tg.data + i * SEQ,
                         &st);
            start_of[ferry_batch_indices(b)[i]] = st;
        }
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    ferry_loader_free(l);
}

TEST(stride_every_token_and_between)
{
    write_shards();
    ferry_dataset *ds = open_with(",stride=1");
    /* windows at every token: N - SEQ of them a shard */
    CHECK_U64(ferry_dataset_len(ds), (500 - SEQ) + (333 - SEQ) + (17 - SEQ));
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 3);
    uint64_t *start_of = calloc(ferry_dataset_len(ds), sizeof *start_of), h;
    epoch_starts(ds, NULL, 2, 0, 3, start_of, &h);
    for (uint64_t i = 0; i < ferry_dataset_len(ds); i++) {
        int k = i >= b[2] ? 2 : i >= b[1];
        CHECK_U64(start_of[i], i - b[k]);
    }
    free(start_of);
    ferry_dataset_free(ds);
    ds = open_with(",stride=3");
    CHECK_U64(ferry_dataset_len(ds), (500 - 9) / 3 + 1 + (333 - 9) / 3 + 1 + (17 - 9) / 3 + 1);
    uint32_t in[SEQ], tg[SEQ];
    void *data[2] = {in, tg};
    int64_t len[2];
    ferry_sample smp = {2, data, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 9, 4));
    CHECK_OK(ferry_dataset_get(ds, 5, &smp, ctx));
    uint64_t st;
    CHECK_EQ(check_window(in, tg, &st), 0);
    CHECK_U64(st, 15);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    /* stride = seq is the default: llm.c's windows */
    ds = open_with(",stride=8");
    CHECK_U64(ferry_dataset_len(ds), 499 / 8 + 332 / 8 + 16 / 8);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(random_offsets_exact_per_epoch_and_for_any_workers)
{
    write_shards();
    ferry_dataset *ds = open_with(",offset=random");
    /* as many windows as fit at any offset in [0, 8) */
    uint64_t n = ferry_dataset_len(ds);
    CHECK_U64(n, (500 - 16) / 8 + 1 + (333 - 16) / 8 + 1 + (17 - 16) / 8 + 1);
    const uint64_t *b;
    CHECK_U64(ferry_dataset_shards(ds, &b), 3);
    uint64_t *ref = calloc(n, sizeof *ref), *got = calloc(n, sizeof *got);
    unsigned phases_seen[3] = {0, 0, 0};
    uint64_t first_phase[3];
    for (uint64_t e = 0; e < 8; e++) {
        uint64_t h0, h;
        epoch_starts(ds, NULL, 0, e, 77, ref, &h0);
        uint64_t phase[3];
        for (uint64_t i = 0; i < n; i++) {
            int k = i >= b[2] ? 2 : i >= b[1];
            uint64_t w = i - b[k];
            if (w == 0)
                phase[k] = ref[i];
            /* window w of shard k starts at its shard's offset + 8w */
            CHECK(phase[k] < 8);
            CHECK_U64(ref[i], phase[k] + 8 * w);
        }
        for (int k = 0; k < 3; k++) {
            phases_seen[k] |= 1u << phase[k];
            if (e == 0)
                first_phase[k] = phase[k];
        }
        for (uint32_t w = 1; w <= 2; w++) {
            epoch_starts(ds, NULL, w, e, 77, got, &h);
            CHECK_U64(h, h0);
            CHECK(!memcmp(got, ref, n * sizeof *got));
        }
    }
    /* a new offset each epoch: over 8 epochs, not always the same */
    for (int k = 0; k < 3; k++)
        CHECK(phases_seen[k] != 1u << first_phase[k]);
    /* another seed, other offsets */
    uint64_t h1, h2;
    epoch_starts(ds, NULL, 1, 0, 77, ref, &h1);
    epoch_starts(ds, NULL, 1, 0, 78, got, &h2);
    CHECK(h1 != h2);
    free(ref);
    free(got);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(random_offsets_the_same_on_every_rank)
{
    write_shards();
    ferry_dataset *ds = open_with(",offset=random,stride=5");
    uint64_t n = ferry_dataset_len(ds), h;
    uint64_t *whole = calloc(n, sizeof *whole), *ranks = calloc(n, sizeof *ranks);
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_random(&s, n, 21, 0, 0));
    epoch_starts(ds, s, 1, 3, 21, whole, &h);
    ferry_sampler_free(s);
    for (int64_t r = 0; r < 3; r++) {
        ferry_distributed_opts o = {n, r, 3, 1, 21, 0};
        CHECK_OK(ferry_sampler_distributed(&s, &o));
        epoch_starts(ds, s, (uint32_t)r, 3, 21, ranks, &h);
        ferry_sampler_free(s);
    }
    CHECK(!memcmp(whole, ranks, n * sizeof *whole));
    free(whole);
    free(ranks);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(stride_and_offset_refusals)
{
    write_shards();
    char spec[700];
    ferry_dataset *ds;
    snprintf(spec, sizeof spec, "tokens:%s/s*.bin,seq=8,offset=half", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "offset=\"half\"");
    snprintf(spec, sizeof spec, "tokens:%s/s*.bin,seq=8,stride=0", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    snprintf(spec, sizeof spec, "tokens:%s/s*.bin,seq=8,order=llmc,batch=2,offset=random",
             test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "llm.c order");
    test_remove_dir();
}
