/*
 * llm.c token shards: the real tiny Shakespeare shard read window by window as
 * llm.c's loader cuts it; shards written by ferry's writer (uint16 and uint32),
 * several shards behind a glob, llm.c's own order, ranks of a distributed sampler
 * getting disjoint windows; wrong magic, version and count named with file and
 * offset; the writer's temporary and replace.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/tokens.h>
#include "core/internal.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHARD FERRY_SHARED_DIR "/testdata/llmc/tiny_shakespeare_val.bin"

static ferry_dataset *open_spec(const char *spec)
{
    ferry_dataset *ds = NULL;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    return ds;
}

/* Sample i's input and target (as uint32) into in/tg (seq each). */
static void get_window(ferry_dataset *ds, uint64_t i, uint32_t *in, uint32_t *tg)
{
    const ferry_field *f = ferry_dataset_field(ds, 0);
    size_t seq = (size_t)f->shape[0], item = ferry_dtype_size(f->dtype);
    unsigned char *a = malloc(seq * item), *b = malloc(seq * item);
    void *data[2] = {a, b};
    int64_t len[2];
    ferry_sample s = {2, data, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
    for (size_t k = 0; k < seq; k++) {
        if (item == 2) {
            uint16_t x, y;
            memcpy(&x, a + 2 * k, 2);
            memcpy(&y, b + 2 * k, 2);
            in[k] = x;
            tg[k] = y;
        } else {
            memcpy(&in[k], a + 4 * k, 4);
            memcpy(&tg[k], b + 4 * k, 4);
        }
    }
    ferry_ctx_free(ctx);
    free(a);
    free(b);
}

TEST(tiny_shakespeare_windows_as_llmc_cuts_them)
{
    test_need_shared(SHARD);
    ferry_dataset *ds = open_spec("tokens:" SHARD);
    /* 32768 tokens, T = 1024: (32768 - 1) / 1024 = 31 windows, 1023 tokens in none */
    CHECK_U64(ferry_dataset_len(ds), 31);
    CHECK_U64(ferry_tokens_dropped(ds), 1023);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "input"));
    CHECK(!strcmp(ferry_dataset_field(ds, 1)->name, "target"));
    CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_U16);
    CHECK_EQ(ferry_dataset_field(ds, 0)->shape[0], 1024);
    static const uint32_t first[20] = {50256, 5962, 22307, 25,   198, 8421, 356,   5120, 597, 2252,
                                       11,    3285, 502,   2740, 13,  628,  50256, 3237, 25,  198};
    uint32_t in[1024], tg[1024];
    get_window(ds, 0, in, tg);
    for (int k = 0; k < 20; k++) {
        CHECK_EQ(in[k], first[k]);
        if (k < 19)
            CHECK_EQ(tg[k], first[k + 1]);
    }
    /* every window against the file's own bytes: window w is tokens [wT, wT + T] */
    size_t n;
    unsigned char *raw = test_read_file(SHARD, &n);
    CHECK_U64(n, 66560);
    uint32_t maxtok = 0;
    for (uint64_t w = 0; w < 31; w++) {
        get_window(ds, w, in, tg);
        for (int k = 0; k < 1024; k++) {
            uint16_t a, b;
            memcpy(&a, raw + 1024 + 2 * (w * 1024 + k), 2);
            memcpy(&b, raw + 1024 + 2 * (w * 1024 + k + 1), 2);
            CHECK_EQ(in[k], a);
            CHECK_EQ(tg[k], b);
            maxtok = in[k] > maxtok ? in[k] : maxtok;
        }
    }
    CHECK_EQ(maxtok, 50256);
    free(raw);
    ferry_dataset_free(ds);
    ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, "tokens:" SHARD ",dtype=u32"), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "tiny_shakespeare_val.bin: offset 4: version 1 holds uint16");
    ds = open_spec("tokens:" SHARD ",seq=64,dtype=u16");
    CHECK_U64(ferry_dataset_len(ds), 511);
    ferry_dataset_free(ds);
}

static void write_shard(const char *path, ferry_dtype dt, uint32_t first, size_t count)
{
    ferry_tokens_writer *w;
    CHECK_OK(ferry_tokens_writer_open(&w, path, dt));
    for (size_t k = 0; k < count;) {
        uint32_t v32[100];
        uint16_t v16[100];
        size_t m = count - k < 100 ? count - k : 100;
        for (size_t j = 0; j < m; j++) {
            v32[j] = first + (uint32_t)(k + j);
            v16[j] = (uint16_t)v32[j];
        }
        CHECK_OK(ferry_tokens_writer_append(w, dt == FERRY_U16 ? (void *)v16 : (void *)v32, m));
        k += m;
    }
    CHECK_OK(ferry_tokens_writer_commit(w));
}

TEST(a_killed_writers_temporary_goes_at_the_next_write)
{
    test_make_dir("tokens-stale");
    char path[512], stale[600], live[600];
    int fd;
    test_path("train_000.bin", path);
    test_leave_temps(path, stale, live, &fd);
    write_shard(path, FERRY_U16, 0, 100);
    test_check_temps(stale, live, fd);
    test_remove_dir();
}

TEST(written_shards_behind_a_glob)
{
    test_make_dir("tokens-glob");
    char p[512], spec[700];
    /* shard 0: tokens 0..100 (101 tokens, 10 windows of 10), shard 1: 1000..1054
     * (55: 5 windows, 4 tokens in none) */
    write_shard(test_path("s_000.bin", p), FERRY_U32, 0, 101);
    write_shard(test_path("s_001.bin", p), FERRY_U32, 1000, 55);
    test_write_file(test_path("other.txt", p), "x", 1);
    struct stat st;
    CHECK(stat(test_path("s_000.bin", p), &st) == 0);
    CHECK_U64(st.st_size, 1024 + 4 * 101);
    snprintf(spec, sizeof spec, "tokens:%s/s_*.bin,seq=10", test_dir);
    ferry_dataset *ds = open_spec(spec);
    CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_U32);
    CHECK_U64(ferry_dataset_len(ds), 15);
    CHECK_U64(ferry_tokens_dropped(ds), 4);
    uint32_t in[10], tg[10];
    for (uint64_t i = 0; i < 15; i++) {
        get_window(ds, i, in, tg);
        uint32_t start = i < 10 ? (uint32_t)i * 10 : 1000 + (uint32_t)(i - 10) * 10;
        for (int k = 0; k < 10; k++) {
            CHECK_EQ(in[k], start + (uint32_t)k);
            CHECK_EQ(tg[k], start + (uint32_t)k + 1);
        }
    }
    ferry_dataset_free(ds);
    /* ranks of a distributed sampler take disjoint windows that cover them all */
    ds = open_spec(spec);
    int seen[15] = {0};
    for (int rank = 0; rank < 3; rank++) {
        ferry_distributed_opts d = {
            .n = 15, .rank = rank, .world_size = 3, .shuffle = 1, .seed = 5, .drop_last = 1};
        ferry_sampler *s;
        CHECK_OK(ferry_sampler_distributed(&s, &d));
        ferry_loader_opts lo = test_loader_opts(2, 2);
        lo.sampler = s;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &lo));
        ferry_batch *b;
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            ferry_tensor t;
            CHECK_OK(ferry_batch_field(b, 0, &t));
            for (int64_t r = 0; r < t.shape[0]; r++) {
                uint32_t v = ((uint32_t *)t.data)[r * 10];
                seen[v < 1000 ? v / 10 : 10 + (v - 1000) / 10]++;
            }
            ferry_batch_release(b);
        }
        CHECK_EQ(rc, FERRY_END);
        ferry_loader_free(l);
        ferry_sampler_free(s);
    }
    for (int i = 0; i < 15; i++)
        CHECK_EQ(seen[i], 1);
    ferry_dataset_free(ds);
    /* llm.c's order: B = 2, 2 ranks: per shard chunks of 4 windows, rank 1 takes
     * windows 2, 3 of each; shard 0 has 2 chunks (windows 0..7), shard 1 one */
    snprintf(spec, sizeof spec, "tokens:%s/s_*.bin,seq=10,order=llmc,batch=2,rank=1,world=2",
             test_dir);
    ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 6);
    const uint32_t want[6] = {20, 30, 60, 70, 1020, 1030};
    for (uint64_t i = 0; i < 6; i++) {
        get_window(ds, i, in, tg);
        CHECK_EQ(in[0], want[i]);
    }
    /* tokens no rank reads: shard 0's 81..100 and shard 1's 1041..1054 */
    CHECK_U64(ferry_tokens_dropped(ds), 20 + 14);
    ferry_dataset_free(ds);
    CHECK_RC(ferry_dataset_open(&ds, "tokens:/nonexistent/x_*.bin"), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "no file matches");
    snprintf(spec, sizeof spec, "tokens:%s/s_*.bin,order=llmc", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "needs batch=B");
    test_remove_dir();
}

TEST(uint16_shards_and_mixed_token_sizes)
{
    test_make_dir("tokens-u16");
    char p[512], spec[700];
    write_shard(test_path("a.bin", p), FERRY_U16, 65000, 300);
    snprintf(spec, sizeof spec, "tokens:%s,seq=7", p);
    ferry_dataset *ds = open_spec(spec);
    CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_U16);
    CHECK_U64(ferry_dataset_len(ds), 299 / 7);
    uint32_t in[7], tg[7];
    get_window(ds, 3, in, tg);
    CHECK_EQ(in[0], 65021);
    CHECK_EQ(tg[6], (uint16_t)(65000 + 28));
    ferry_dataset_free(ds);
    write_shard(test_path("b.bin", p), FERRY_U32, 0, 30);
    snprintf(spec, sizeof spec, "tokens:%s/*.bin", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "b.bin: offset 4: 4-byte tokens, but");
    test_remove_dir();
}

static void expect_bad(const char *path, const char *msg)
{
    char spec[700];
    snprintf(spec, sizeof spec, "tokens:%s", path);
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), msg);
}

TEST(bad_magic_version_and_count)
{
    test_make_dir("tokens-bad");
    char p[512];
    write_shard(test_path("good.bin", p), FERRY_U16, 1, 50);
    size_t n;
    unsigned char *good = test_read_file(p, &n);
    unsigned char *b = malloc(n + 8);
    memcpy(b, good, n);
    b[0] ^= 1;
    test_write_file(test_path("magic.bin", p), b, n);
    expect_bad(p, ": offset 0: magic 20240521 is not 20240520");
    memcpy(b, good, n);
    b[4] = 7;
    test_write_file(test_path("version.bin", p), b, n);
    expect_bad(p, ": offset 4: version 7 is not 1 (uint16 tokens) or 2");
    memcpy(b, good, n);
    b[8] = 51;
    test_write_file(test_path("count.bin", p), b, n);
    expect_bad(p, ": offset 8: the header counts 51 tokens (1126 bytes with the header), but the "
                  "file has 1124 bytes");
    memcpy(b, good, n);
    test_write_file(test_path("cut.bin", p), b, n - 1);
    expect_bad(p, "but the file has 1123 bytes");
    b[11] = 0x80;
    test_write_file(test_path("neg.bin", p), b, n);
    expect_bad(p, ": offset 8: token count");
    test_write_file(test_path("short.bin", p), b, 100);
    expect_bad(p, ": offset 0: 100 bytes is shorter than the 1024-byte");
    free(b);
    free(good);
    test_remove_dir();
}

/* The real GPT-2 shard's tokens as llm.c writes them for Llama 3 (magic 20240801,
 * version 7, uint32) and bare, as nanoGPT's prepare.py writes train.bin (np.uint16,
 * no header): each gives the same windows as the shard. */
TEST(llama3_shards_and_bare_token_files)
{
    test_need_shared(SHARD);
    test_make_dir("tokens-kinds");
    size_t n;
    unsigned char *shard = test_read_file(SHARD, &n);
    size_t count = (n - 1024) / 2;
    unsigned char *l3 = calloc(1, 1024 + 4 * count);
    int32_t hdr[3] = {20240801, 7, (int32_t)count};
    memcpy(l3, hdr, sizeof hdr);
    for (size_t k = 0; k < count; k++) {
        uint16_t t;
        memcpy(&t, shard + 1024 + 2 * k, 2);
        uint32_t w = t;
        memcpy(l3 + 1024 + 4 * k, &w, 4);
    }
    char p3[512], praw[512], pbad[512], spec[600];
    test_write_file(test_path("llama3.bin", p3), l3, 1024 + 4 * count);
    test_write_file(test_path("train.bin", praw), shard + 1024, 2 * count);
    ferry_dataset *ref = open_spec("tokens:" SHARD);
    snprintf(spec, sizeof spec, "tokens:%s", p3);
    ferry_dataset *a = open_spec(spec);
    snprintf(spec, sizeof spec, "tokens:%s,raw=1", praw);
    ferry_dataset *b = open_spec(spec);
    CHECK_EQ(ferry_dataset_len(a), ferry_dataset_len(ref));
    CHECK_EQ(ferry_dataset_len(b), ferry_dataset_len(ref));
    CHECK_EQ(ferry_dataset_field(a, 0)->dtype, FERRY_U32);
    CHECK_EQ(ferry_dataset_field(b, 0)->dtype, FERRY_U16);
    uint32_t in0[1024], tg0[1024], in1[1024], tg1[1024];
    for (uint64_t i = 0; i < ferry_dataset_len(ref); i += 7) {
        get_window(ref, i, in0, tg0);
        get_window(a, i, in1, tg1);
        CHECK(!memcmp(in0, in1, sizeof in0) && !memcmp(tg0, tg1, sizeof tg0));
        get_window(b, i, in1, tg1);
        CHECK(!memcmp(in0, in1, sizeof in0) && !memcmp(tg0, tg1, sizeof tg0));
    }
    CHECK_EQ(in0[0] != 0, 1);
    ferry_dataset_free(a);
    ferry_dataset_free(b);
    /* the bare file without raw=1 says how to open it; an odd size is named */
    snprintf(spec, sizeof spec, "tokens:%s", praw);
    CHECK_RC(ferry_dataset_open(&a, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "not an llm.c token shard; a file of bare token ids "
                                        "(nanoGPT's train.bin) opens with raw=1");
    test_write_file(test_path("odd.bin", pbad), shard + 1024, 2 * count - 1);
    snprintf(spec, sizeof spec, "tokens:%s,raw=1", pbad);
    CHECK_RC(ferry_dataset_open(&a, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "bytes is not a whole number of 2-byte tokens (raw=1)");
    /* a Llama 3 header with another version is named */
    hdr[1] = 2;
    memcpy(l3, hdr, sizeof hdr);
    test_write_file(p3, l3, 1024 + 4 * count);
    snprintf(spec, sizeof spec, "tokens:%s", p3);
    CHECK_RC(ferry_dataset_open(&a, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "offset 4: version 2 of a Llama 3 shard");
    ferry_dataset_free(ref);
    free(l3);
    free(shard);
    test_remove_dir();
}

TEST(writer_replaces_whole_or_not_at_all)
{
    test_make_dir("tokens-writer");
    char p[512];
    write_shard(test_path("t.bin", p), FERRY_U16, 5, 10);
    /* an aborted writer leaves the old shard and no temporary */
    ferry_tokens_writer *w;
    CHECK_OK(ferry_tokens_writer_open(&w, p, FERRY_U16));
    uint16_t v[3] = {1, 2, 3};
    CHECK_OK(ferry_tokens_writer_append(w, v, 3));
    ferry_tokens_writer_abort(w);
    size_t n;
    unsigned char *got = test_read_file(p, &n);
    CHECK_U64(n, 1024 + 20);
    free(got);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", test_dir);
    CHECK_EQ(system(cmd), 0);
    /* a committed one replaces it */
    write_shard(p, FERRY_U32, 9, 4);
    got = test_read_file(p, &n);
    CHECK_U64(n, 1024 + 16);
    int32_t hdr[3];
    memcpy(hdr, got, sizeof hdr);
    CHECK_EQ(hdr[0], 20240520);
    CHECK_EQ(hdr[1], 2);
    CHECK_EQ(hdr[2], 4);
    free(got);
    CHECK_RC(ferry_tokens_writer_open(&w, p, FERRY_F32), FERRY_EINVAL);
    ferry_tokens_writer_abort(NULL);
    test_remove_dir();
}

TEST(ferry_head_pack_and_bench_read_tokens)
{
    test_make_dir("tokens-cli");
    char p[512], args[2048];
    write_shard(test_path("t.bin", p), FERRY_U16, 100, 41);
    snprintf(args, sizeof args, "head tokens:%s,seq=4 -n 1", p);
    test_ferry_cli_says(args, 0,
                        "{\"input\": [100, 101, 102, 103], \"target\": [101, 102, 103, 104]}");
    snprintf(args, sizeof args, "pack tokens:%s,seq=4 %s/rec && %s head records:%s/rec -n 10", p,
             test_dir, TEST_FERRY_CLI, test_dir);
    test_ferry_cli_says(args, 0,
                        "{\"input\": [136, 137, 138, 139], \"target\": [137, 138, 139, 140]}");
    snprintf(args, sizeof args, "bench tokens:%s,seq=4 --shuffle --batch 3 --json", p);
    test_ferry_cli_says(args, 0, "\"samples\": 10,");
    /* 41 tokens, T = 4: 10 windows cover 41; with T = 6, 6 windows cover 37, 4 are in none */
    snprintf(args, sizeof args, "bench tokens:%s,seq=6", p);
    test_ferry_cli_says(args, 0, "note        4 tokens are in no window");
    snprintf(args, sizeof args, "pack tokens:%s,seq=6 %s/rec6", p, test_dir);
    test_ferry_cli_says(args, 0, "note: 4 tokens are in no window");
    test_remove_dir();
}

TEST(widened_to_int32_and_int64)
{
    test_make_dir("tokens-out");
    char p[512], spec[700];
    write_shard(test_path("a.bin", p), FERRY_U16, 65530, 21);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    for (int w = 0; w < 2; w++) {
        snprintf(spec, sizeof spec, "tokens:%s,seq=5,out=%s", p, w ? "i64" : "i32");
        ferry_dataset *ds = open_spec(spec);
        CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, w ? FERRY_I64 : FERRY_I32);
        CHECK_EQ(ferry_dataset_field(ds, 1)->dtype, w ? FERRY_I64 : FERRY_I32);
        int64_t in[5], tg[5];
        void *data[2] = {in, tg};
        int64_t len[2];
        ferry_sample s = {2, data, len, {0}};
        for (uint64_t i = 0; i < 4; i++) {
            CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
            for (int k = 0; k < 5; k++) {
                int64_t a = w ? in[k] : ((int32_t *)in)[k], b = w ? tg[k] : ((int32_t *)tg)[k];
                uint16_t want = (uint16_t)(65530 + i * 5 + (uint64_t)k);
                CHECK_EQ(a, want);
                CHECK_EQ(b, (uint16_t)(want + 1));
            }
        }
        ferry_dataset_free(ds);
    }
    /* a uint32 token past INT32_MAX does not fit int32: an error, not a wrap */
    write_shard(test_path("b.bin", p), FERRY_U32, 0x7ffffffe, 8);
    snprintf(spec, sizeof spec, "tokens:%s,seq=3,out=i32", p);
    ferry_dataset *ds = open_spec(spec);
    int32_t in[3], tg[3];
    void *data[2] = {in, tg};
    int64_t len[2];
    ferry_sample s = {2, data, len, {0}};
    CHECK_RC(ferry_dataset_get(ds, 0, &s, ctx), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "b.bin: offset 1032: token 2147483648 does not fit int32");
    ferry_dataset_free(ds);
    snprintf(spec, sizeof spec, "tokens:%s,out=u8", p);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    ferry_ctx_free(ctx);
    test_remove_dir();
}

/* A 1-D '<i8' .npy of n ids. */
static void write_ids(const char *path, const int64_t *ids, size_t n)
{
    char dict[128];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '<i8', 'fortran_order': False, 'shape': (%zu,), }", n);
    size_t total = (10 + (size_t)dl + 1 + 63) / 64 * 64, hlen = total - 10;
    unsigned char *buf = calloc(1, total + 8 * n);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hlen;
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', hlen - (size_t)dl - 1);
    buf[total - 1] = '\n';
    memcpy(buf + total, ids, 8 * n);
    test_write_file(path, buf, total + 8 * n);
    free(buf);
}

TEST(ferry_tokens_writes_a_shard_from_any_source)
{
    test_make_dir("tokens-write-cli");
    char ids_path[512], out_path[512], args[2048];
    int64_t ids[300];
    for (int i = 0; i < 300; i++)
        ids[i] = i * 200;
    write_ids(test_path("ids.npy", ids_path), ids, 300);
    test_path("out.bin", out_path);
    snprintf(args, sizeof args, "tokens npy:%s %s", ids_path, out_path);
    test_ferry_cli_says(args, 0, "out.bin: 300 tokens (uint16, version 1)");
    char spec[700];
    snprintf(spec, sizeof spec, "tokens:%s,seq=299", out_path);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 1);
    uint32_t in[299], tg[299];
    get_window(ds, 0, in, tg);
    CHECK_EQ(in[0], 0);
    CHECK_EQ(in[298], 298 * 200);
    CHECK_EQ(tg[298], 299 * 200);
    ferry_dataset_free(ds);
    /* 299 * 300 does not fit uint16: refused, the old shard left as it was */
    ids[299] = 70000;
    write_ids(ids_path, ids, 300);
    test_ferry_cli_says(args, 1,
                        "sample 299, element 0: 70000 does not fit uint16; try --dtype u32");
    size_t n;
    unsigned char *old = test_read_file(out_path, &n);
    CHECK_U64(n, 1024 + 600);
    free(old);
    snprintf(args, sizeof args, "tokens npy:%s %s --dtype u32", ids_path, out_path);
    test_ferry_cli_says(args, 0, "300 tokens (uint32, version 2)");
    ds = open_spec(spec);
    get_window(ds, 0, in, tg);
    CHECK_EQ(tg[298], 70000);
    ferry_dataset_free(ds);
    ids[5] = -1;
    write_ids(ids_path, ids, 300);
    test_ferry_cli_says(args, 1, "sample 5, element 0: -1 does not fit uint32");
    test_remove_dir();
}
