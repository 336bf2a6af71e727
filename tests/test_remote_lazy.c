/*
 * Map-style sources over remote shards, against the loopback servers (run under
 * tests/servers/with_servers.py): the shards are fetched when first read, not at
 * open; a sample of a shard nobody asked for whole is read by a ranged GET; the
 * fetch buffers count in a loader's memory budget.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/remote.h>

#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARDS 12
#define TOKENS 20000 /* a shard's tokens: 40 KiB of them */

static const char *need(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        SKIP("not run under tests/servers/with_servers.py (no FERRY_TEST_* variables)");
    return v;
}

#define ROWS 600

/* A .npy file: version major, header dict text, then data. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    unsigned char *buf = calloc(1, total + n + 1);
    CHECK(buf != NULL);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    for (int k = 0; k < (major == 1 ? 2 : 4); k++)
        buf[8 + k] = (unsigned char)(hlen >> (8 * k));
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, n);
    test_write_file(path, buf, total + n);
    free(buf);
}

/* SHARDS llm.c token shards (uint16) under test_dir/data/tok and three .npy files
 * under test_dir/data/npy, served by nginx and uploaded under "PREFIX/"; the AWS
 * variables set for the S3 endpoint. */
static void setup(const char *tag, const char *prefix)
{
    char cmd[2048], path[512];
    test_make_dir(tag);
    snprintf(path, sizeof path, "%s/data", test_dir);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s/data/tok", test_dir);
    CHECK(mkdir(path, 0755) == 0);
    static uint8_t buf[1024 + 2 * TOKENS];
    for (int s = 0; s < SHARDS; s++) {
        int32_t hdr[256] = {20240520, 1, TOKENS};
        memcpy(buf, hdr, sizeof hdr);
        for (int k = 0; k < TOKENS; k++) {
            uint16_t t = (uint16_t)(s * 7919 + k * 31 + (k >> 5));
            memcpy(buf + 1024 + 2 * k, &t, 2);
        }
        char file[600];
        snprintf(file, sizeof file, "%s/train_%06d.bin", path, s);
        test_write_file(file, buf, sizeof buf);
    }
    /* x: float32 rows of 16 (C order), y: int64, f: int32 3x2 rows in Fortran order
     * (its rows are not contiguous: it is read whole) */
    snprintf(path, sizeof path, "%s/data/npy", test_dir);
    CHECK(mkdir(path, 0755) == 0);
    static float x[ROWS][16];
    static int64_t y[ROWS];
    static int32_t f[3 * ROWS];
    for (int i = 0; i < ROWS; i++) {
        for (int j = 0; j < 16; j++)
            x[i][j] = (float)i + (float)j / 16.0f;
        y[i] = (int64_t)i * 1000003;
    }
    for (int k = 0; k < 3 * ROWS; k++)
        f[k] = k * 7;
    char file[600], dict[160];
    snprintf(file, sizeof file, "%s/x.npy", path);
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 16), }",
             ROWS);
    write_npy(file, 1, dict, x, sizeof x);
    snprintf(file, sizeof file, "%s/y.npy", path);
    snprintf(dict, sizeof dict, "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }", ROWS);
    write_npy(file, 2, dict, y, sizeof y);
    snprintf(file, sizeof file, "%s/f.npy", path);
    snprintf(dict, sizeof dict, "{'descr': '<i4', 'fortran_order': True, 'shape': (%d, 3), }",
             ROWS);
    write_npy(file, 1, dict, f, sizeof f);
    /* nginx serves FERRY_TEST_FILES: the files go there under PREFIX/ too */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s' && cp -r '%s/data/tok' '%s/data/npy' '%s/%s/'",
             need("FERRY_TEST_FILES"), prefix, test_dir, test_dir, need("FERRY_TEST_FILES"),
             prefix);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "'%s' '%s/servers.py' upload '%s/data' '%s/' >/dev/null",
             need("FERRY_TEST_SERVERS_PYTHON"), need("FERRY_TEST_SERVERS"), test_dir, prefix);
    CHECK(system(cmd) == 0);
    setenv("AWS_ACCESS_KEY_ID", need("FERRY_TEST_S3_ACCESS_KEY"), 1);
    setenv("AWS_SECRET_ACCESS_KEY", need("FERRY_TEST_S3_SECRET_KEY"), 1);
    setenv("AWS_REGION", need("FERRY_TEST_S3_REGION"), 1);
    setenv("AWS_ENDPOINT_URL", need("FERRY_TEST_S3_ENDPOINT"), 1);
    setenv("FERRY_REMOTE_BACKOFF_MS", "1", 1);
    snprintf(path, sizeof path, "%s/cache", test_dir);
    setenv("FERRY_CACHE", path, 1);
}

static void specs(const char *prefix, char *local, char *s3, char *http, size_t cap)
{
    snprintf(local, cap, "tokens:%s/data/tok/train_*.bin,seq=64", test_dir);
    snprintf(s3, cap, "tokens:s3://%s/%s/tok/train_*.bin,seq=64", need("FERRY_TEST_S3_BUCKET"),
             prefix);
    snprintf(http, cap, "tokens:%s/%s/tok/train_{000000..%06d}.bin,seq=64",
             need("FERRY_TEST_HTTP_URL"), prefix, SHARDS - 1);
}

static void npy_specs(const char *prefix, char *local, char *s3, char *http, size_t cap)
{
    snprintf(local, cap, "npy:x=%s/data/npy/x.npy;y=%s/data/npy/y.npy;f=%s/data/npy/f.npy",
             test_dir, test_dir, test_dir);
    const char *b = need("FERRY_TEST_S3_BUCKET"), *h = need("FERRY_TEST_HTTP_URL");
    snprintf(s3, cap, "npy:x=s3://%s/%s/npy/x.npy;y=s3://%s/%s/npy/y.npy;f=s3://%s/%s/npy/f.npy", b,
             prefix, b, prefix, b, prefix);
    snprintf(http, cap, "npy:x=%s/%s/npy/x.npy;y=%s/%s/npy/y.npy;f=%s/%s/npy/f.npy", h, prefix, h,
             prefix, h, prefix);
}

/* Every batch of an epoch, hashed. */
static uint64_t digest(const char *spec, uint32_t workers, bool shuffle, uint64_t budget,
                       ferry_loader_stats *st)
{
    ferry_dataset *ds = NULL;
    ferry_loader *l = NULL;
    ferry_batch *b;
    uint64_t h = 0xcbf29ce484222325ull;
    int rc;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    ferry_loader_opts o = test_loader_opts(16, workers);
    o.shuffle = shuffle;
    o.seed = 5;
    o.memory_budget = budget;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_start(l, 0, 0));
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        for (int f = 0; f < ferry_batch_nfields(b); f++) {
            ferry_tensor t;
            CHECK_OK(ferry_batch_field(b, f, &t));
            h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        }
        ferry_batch_release(b);
    }
    if (rc != FERRY_END)
        test_fail(__FILE__, __LINE__, "%s: %s", spec, ferry_loader_errmsg(l));
    if (st)
        CHECK_OK(ferry_loader_stats_get(l, st));
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    return h;
}

/* The open reads sizes and headers only; the loader's epochs give the local bytes
 * for 0, 1 and 2 workers, in file order and shuffled. */
TEST(tokens_fetch_lazily_and_match_the_local_files)
{
    char local[600], s3[600], http[600];
    setup("lz1", "lz1");
    specs("lz1", local, s3, http, sizeof local);
    ferry_dataset *ds;
    ferry_remote_stats r0, r;
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_open(&ds, s3));
    ferry_remote_stats_get(&r);
    CHECK_U64(r.cache_misses - r0.cache_misses, 0); /* no shard fetched at open */
    CHECK(r.downloaded_bytes - r0.downloaded_bytes <= SHARDS * 1024);
    ferry_dataset_free(ds);
    /* the loader's statistics carry the process's ranged reads: the headers read
     * by the open inside digest() count */
    ferry_loader_stats st;
    ferry_remote_stats_get(&r0);
    digest(http, 0, false, 0, &st);
    ferry_remote_stats_get(&r);
    CHECK(st.ranged_reads > r0.ranged_reads);
    CHECK_U64(st.ranged_reads, r.ranged_reads);
    CHECK_U64(st.downloaded_bytes, r.downloaded_bytes);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        uint64_t want = digest(local, 0, shuffle, 0, NULL);
        for (uint32_t w = 0; w < 3; w++) {
            CHECK_U64(digest(s3, w, shuffle, 0, NULL), want);
            CHECK_U64(digest(http, w, shuffle, 0, NULL), want);
        }
    }
    /* npy: the same, its three files fetched when first read */
    npy_specs("lz1", local, s3, http, sizeof local);
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_open(&ds, s3));
    CHECK_U64(ferry_dataset_len(ds), ROWS);
    ferry_remote_stats_get(&r);
    CHECK_U64(r.cache_misses - r0.cache_misses, 0);
    CHECK(r.downloaded_bytes - r0.downloaded_bytes <= 3 * 4096);
    ferry_dataset_free(ds);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        uint64_t want = digest(local, 0, shuffle, 0, NULL);
        for (uint32_t w = 0; w < 3; w++) {
            CHECK_U64(digest(s3, w, shuffle, 0, NULL), want);
            CHECK_U64(digest(http, w, shuffle, 0, NULL), want);
        }
    }
    ferry_remote_stats_get(&r);
    CHECK_U64(r.retries, 0);
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* Sample i's input and target (seq=64 uint16 each) into out. */
static void sample_bytes(ferry_dataset *ds, uint64_t i, uint8_t *out)
{
    void *data[2] = {out, out + 128};
    int64_t len[2];
    ferry_sample s = {2, data, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
    ferry_ctx_free(ctx);
}

/* Without a loader, a sample of a shard not in the cache is one ranged GET of its
 * window; a shard read FERRY_REMOTE_RANGED times is then fetched whole. */
TEST(a_sample_of_an_uncached_shard_is_a_ranged_read)
{
    char local[600], s3[600], http[600];
    setup("lz2", "lz2");
    specs("lz2", local, s3, http, sizeof local);
    setenv("FERRY_REMOTE_AHEAD", "0", 1);
    ferry_dataset *lds, *rds;
    CHECK_OK(ferry_dataset_open(&lds, local));
    CHECK_OK(ferry_dataset_open(&rds, http));
    CHECK_U64(ferry_dataset_len(rds), ferry_dataset_len(lds));
    uint64_t n = ferry_dataset_len(lds), per = n / SHARDS;
    uint8_t a[256], b[256];
    ferry_remote_stats r0, r;
    ferry_remote_stats_get(&r0);
    /* one sample of each of three shards, the last one's last window included */
    uint64_t picks[] = {per * 3 + 17, per * 7, n - 1};
    for (size_t k = 0; k < 3; k++) {
        sample_bytes(lds, picks[k], a);
        sample_bytes(rds, picks[k], b);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    ferry_remote_stats_get(&r);
    CHECK_U64(r.ranged_reads - r0.ranged_reads, 3);
    CHECK_U64(r.cache_misses - r0.cache_misses, 0);
    CHECK_U64(r.downloaded_bytes - r0.downloaded_bytes, 3 * 65 * 2); /* the windows only */
    /* read often: the shard is then fetched whole, and read from the cache */
    for (uint64_t i = per * 5; i < per * 5 + 40; i++) {
        sample_bytes(lds, i, a);
        sample_bytes(rds, i, b);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    ferry_remote_stats_get(&r);
    CHECK_U64(r.cache_misses - r0.cache_misses, 1);
    CHECK(r.ranged_reads - r0.ranged_reads <= 3 + 8 + 4);
    ferry_dataset_free(rds);
    ferry_dataset_free(lds);
    unsetenv("FERRY_REMOTE_AHEAD");
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* A row of a remote .npy array is a ranged GET of its bytes; a Fortran-ordered
 * array's row is not contiguous: the file is fetched whole. */
TEST(a_row_of_a_remote_array_is_a_ranged_read)
{
    char local[600], s3[600], http[600];
    setup("lz4", "lz4");
    npy_specs("lz4", local, s3, http, sizeof local);
    setenv("FERRY_REMOTE_AHEAD", "0", 1);
    ferry_dataset *lds, *rds;
    CHECK_OK(ferry_dataset_open(&lds, local));
    CHECK_OK(ferry_dataset_open(&rds, s3));
    CHECK_U64(ferry_dataset_nfields(rds), 3);
    static uint8_t a[3][64], b[3][64];
    void *da[3] = {a[0], a[1], a[2]}, *db[3] = {b[0], b[1], b[2]};
    int64_t len[3];
    ferry_sample sa = {3, da, len, {0}}, sb = {3, db, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    ferry_remote_stats r0, r;
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_get(lds, 457, &sa, ctx));
    CHECK_OK(ferry_dataset_get(rds, 457, &sb, ctx));
    CHECK(memcmp(a, b, sizeof a) == 0);
    float want = 457.0f + 3.0f / 16.0f;
    CHECK(memcmp(&b[0][12], &want, 4) == 0);
    ferry_remote_stats_get(&r);
    CHECK_U64(r.ranged_reads - r0.ranged_reads, 2); /* x's and y's rows */
    CHECK_U64(r.cache_misses - r0.cache_misses, 1); /* f.npy, whole */
    uint64_t f_bytes = 128 + 3 * ROWS * 4;
    CHECK_U64(r.downloaded_bytes - r0.downloaded_bytes, 16 * 4 + 8 + f_bytes);
    ferry_ctx_free(ctx);
    ferry_dataset_free(rds);
    ferry_dataset_free(lds);
    unsetenv("FERRY_REMOTE_AHEAD");
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* A map-style source keeps the files it read open: a cache whose limit cannot hold
 * them all is refused at open, with the numbers, not when a shuffled epoch
 * reaches the file that does not fit. */
TEST(a_cache_too_small_for_the_set_is_said_at_open)
{
    char local[600], s3[600], http[600];
    setup("lz5", "lz5");
    specs("lz5", local, s3, http, sizeof local);
    setenv("FERRY_CACHE_LIMIT", "200K", 1);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_open(&ds, s3), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "its 12 remote files hold 492288 bytes");
    CHECK_CONTAINS(ferry_last_errmsg(), "(its limit is 204800 bytes)");
    CHECK_CONTAINS(ferry_last_errmsg(), "raise cache_limit= or FERRY_CACHE_LIMIT");
    npy_specs("lz5", local, s3, http, sizeof local);
    CHECK_OK(ferry_dataset_open(&ds, s3)); /* 50 KiB of arrays fit */
    ferry_dataset_free(ds);
    unsetenv("FERRY_CACHE_LIMIT");
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* The fetch buffers (FERRY_REMOTE_CONNECTIONS of 1.5 MiB) count in the budget: a
 * budget that cannot hold them is refused with the numbers; under one that can,
 * fetching shards in ranged parts on several threads holds no more than that. */
TEST(fetch_buffers_count_in_the_memory_budget)
{
    char local[600], s3[600], http[600];
    setup("lz3", "lz3");
    specs("lz3", local, s3, http, sizeof local);
    setenv("FERRY_REMOTE_CONNECTIONS", "4", 1);
    setenv("FERRY_REMOTE_PART_SIZE", "1048576", 1);
    ferry_dataset *ds;
    ferry_loader *l = NULL;
    CHECK_OK(ferry_dataset_open(&ds, s3));
    ferry_loader_opts o = test_loader_opts(16, 2);
    o.memory_budget = (uint64_t)1 << 20;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    const char *msg = ferry_last_errmsg();
    CHECK_CONTAINS(msg, "fetch buffers");
    CHECK_CONTAINS(msg, "4 connections");
    CHECK_CONTAINS(msg, "of 1.5 MiB each");
    CHECK_CONTAINS(msg, "need 6.0 MiB");
    CHECK_CONTAINS(msg, "budget of 1.0 MiB");
    /* a batch and the fetch buffers that fit alone, but not together */
    o.memory_budget = ((uint64_t)6 << 20) + 4096;
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "fetch buffers of a remote source (6.0 MiB");
    ferry_dataset_free(ds);
    ferry_loader_stats st;
    CHECK_U64(digest(s3, 2, true, (uint64_t)8 << 20, &st), digest(local, 2, true, 0, NULL));
    CHECK(st.cache_misses > 0);
    ferry_remote_stats r;
    ferry_remote_stats_get(&r);
    CHECK(r.fetch_buffer_peak > 0);
    CHECK(r.fetch_buffer_peak <= (uint64_t)4 * (512 + 1024) * 1024);
    /* the loader's statistics carry the same: the peak is the process's, so far */
    CHECK(st.fetch_buffer_peak > 0 && st.fetch_buffer_peak <= r.fetch_buffer_peak);
    CHECK(st.fetch_buffer_bytes <= st.fetch_buffer_peak);
    unsetenv("FERRY_REMOTE_CONNECTIONS");
    unsetenv("FERRY_REMOTE_PART_SIZE");
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* An open of a remote set sends one request per file, a ranged GET of its header
 * whose answer gives the size and the version too (Content-Range, ETag): no HEAD.
 * A server that ignores Range answers 200 with the whole object: its
 * Content-Length gives the size, and the transfer stops once the header came. */
TEST(a_lazy_open_sends_one_request_per_file)
{
    char local[600], s3[600], http[600], path[600];
    setup("lz4", "lz4");
    specs("lz4", local, s3, http, sizeof local);
    ferry_dataset *ds;
    ferry_remote_stats r0, r;
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_open(&ds, http));
    ferry_remote_stats_get(&r);
    CHECK_U64(r.requests - r0.requests, SHARDS);
    CHECK_U64(r.downloaded_bytes - r0.downloaded_bytes, SHARDS * 1024);
    ferry_dataset_free(ds);
    /* the version learned so is the one the fetches use: the same bytes */
    CHECK_U64(digest(http, 1, true, 0, NULL), digest(local, 0, true, 0, NULL));
    npy_specs("lz4", local, s3, http, sizeof local);
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_open(&ds, http));
    CHECK_U64(ferry_dataset_len(ds), ROWS);
    ferry_remote_stats_get(&r);
    CHECK_U64(r.requests - r0.requests, 3);
    ferry_dataset_free(ds);
    CHECK_U64(digest(http, 1, true, 0, NULL), digest(local, 0, true, 0, NULL));
    /* a 16 MiB shard from a server that ignores Range */
    enum { BIG = 8 << 20 };
    uint8_t *buf = malloc(1024 + 2 * (size_t)BIG);
    CHECK(buf != NULL);
    int32_t hdr[256] = {20240520, 1, BIG};
    memcpy(buf, hdr, sizeof hdr);
    for (size_t k = 0; k < 2 * (size_t)BIG; k++)
        buf[1024 + k] = (uint8_t)(k * 131 + (k >> 12));
    snprintf(path, sizeof path, "%s/lz4/big.bin", need("FERRY_TEST_FILES"));
    test_write_file(path, buf, 1024 + 2 * (size_t)BIG);
    free(buf);
    snprintf(local, sizeof local, "tokens:%s,seq=64", path);
    snprintf(http, sizeof http, "tokens:%s/norange/lz4/big.bin,seq=64",
             need("FERRY_TEST_HTTP_URL"));
    ferry_remote_stats_get(&r0);
    CHECK_OK(ferry_dataset_open(&ds, http));
    ferry_remote_stats_get(&r);
    CHECK_U64(r.requests - r0.requests, 1);
    CHECK(r.downloaded_bytes - r0.downloaded_bytes >= 1024);
    CHECK(r.downloaded_bytes - r0.downloaded_bytes < (uint64_t)BIG); /* not the whole object */
    ferry_dataset_free(ds);
    CHECK_U64(digest(http, 0, false, 0, NULL), digest(local, 0, false, 0, NULL));
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}
