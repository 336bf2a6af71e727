/*
 * MosaicML MDS: the real mosaic-mix dataset (raw shards, and the same shards
 * read from their zstd files alone); shards written here with every column
 * encoding ferry reads, a JPEG column through the image pipeline; refused
 * encodings; an index that disagrees with its shards, named with file and
 * offset; allocation failures.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/mds.h>
#include <ferry/pipeline.h>
#include "core/internal.h"

#include <dirent.h>
#include <zstd.h>
#include <sys/wait.h>
#include <unistd.h>

#define MDS_DIR FERRY_SHARED_DIR "/testdata/mds/mosaic_mix_zstd"
#define JPEG FERRY_SHARED_DIR "/testdata/jpeg/valid/jd_jpg-gray.jpg"

static ferry_dataset *open_spec(const char *spec)
{
    ferry_dataset *ds = NULL;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    return ds;
}

typedef struct sample_buf {
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s;
    ferry_ctx *ctx;
} sample_buf;

static void sb_init(sample_buf *b, ferry_dataset *ds)
{
    int nf = ferry_dataset_nfields(ds);
    for (int k = 0; k < nf; k++)
        b->data[k] = calloc(1, ferry_field_nbytes(ferry_dataset_field(ds, k)) + 1);
    b->s.nfields = nf;
    b->s.data = b->data;
    b->s.length = b->len;
    CHECK_OK(ferry_ctx_create(&b->ctx, 0, 0));
}

static void sb_free(sample_buf *b)
{
    for (int k = 0; k < b->s.nfields; k++)
        free(b->data[k]);
    ferry_ctx_free(b->ctx);
}

static void check_mosaic_mix(ferry_dataset *ds)
{
    CHECK_U64(ferry_dataset_len(ds), 9999);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    const ferry_field *t = ferry_dataset_field(ds, 0), *id = ferry_dataset_field(ds, 1);
    CHECK(!strcmp(t->name, "dummy_text"));
    CHECK(t->variable && t->dtype == FERRY_U8);
    CHECK_EQ(t->shape[0], (int64_t)strlen("Dummy text 9999"));
    CHECK(!strcmp(id->name, "id"));
    CHECK(id->dtype == FERRY_I64 && id->ndim == 0);
    sample_buf b;
    sb_init(&b, ds);
    for (uint64_t i = 0; i < 9999; i++) {
        CHECK_OK(ferry_dataset_get(ds, i, &b.s, b.ctx));
        int64_t v;
        memcpy(&v, b.data[1], 8);
        CHECK_EQ(v, (int64_t)i + 1);
        char want[32];
        int n = snprintf(want, sizeof want, "Dummy text %llu", (unsigned long long)i + 1);
        CHECK_EQ(b.len[0], n);
        CHECK(!memcmp(b.data[0], want, (size_t)n));
    }
    sb_free(&b);
}

TEST(mosaic_mix_raw_shards)
{
    test_need_shared(MDS_DIR "/index.json");
    ferry_dataset *ds = open_spec("mds:" MDS_DIR);
    check_mosaic_mix(ds);
    ferry_dataset_free(ds);
}

TEST(loader_with_two_shuffling_workers_delivers_every_sample_once)
{
    test_need_shared(MDS_DIR "/index.json");
    ferry_dataset *ds = open_spec("mds:" MDS_DIR);
    ferry_loader_opts lo;
    ferry_loader_opts_default(&lo);
    lo.batch_size = 100;
    lo.num_workers = 2;
    lo.shuffle = 1;
    lo.seed = 3;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &lo));
    unsigned char *seen = calloc(10000, 1);
    ferry_batch *b;
    int rc;
    uint64_t n = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, 1, &t));
        for (int64_t r = 0; r < t.shape[0]; r++) {
            int64_t id = ((int64_t *)t.data)[r];
            CHECK(id >= 1 && id <= 9999 && !seen[id]);
            seen[id] = 1;
            n++;
        }
        ferry_batch_release(b);
    }
    CHECK_EQ(rc, FERRY_END);
    CHECK_U64(n, 9999);
    free(seen);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

TEST(mosaic_mix_from_zstd_files_alone)
{
    test_need_shared(MDS_DIR "/index.json");
    /* a folder with the index and only the .zstd shards (links to the real files) */
    test_make_dir("mds-zstd");
    DIR *dir = opendir(MDS_DIR);
    struct dirent *e;
    int links = 0;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (strcmp(e->d_name, "index.json") && (n < 5 || strcmp(e->d_name + n - 5, ".zstd")))
            continue;
        char from[1024], to[512];
        snprintf(from, sizeof from, "%s/%s", MDS_DIR, e->d_name);
        CHECK(symlink(from, test_path(e->d_name, to)) == 0);
        links++;
    }
    closedir(dir);
    CHECK_EQ(links, 65);
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = open_spec(spec);
    check_mosaic_mix(ds);
    ferry_dataset_free(ds);
    /* past the bound on decompressed shards: refused, naming the shard */
    snprintf(spec, sizeof spec, "mds:%s,zstd_max=20000", test_dir);
    ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), ".mds.zstd: decompresses to ");
    CHECK_CONTAINS(ferry_last_errmsg(), "zstd_max=");
    /* with a cache directory: decompressed onto disk, whatever zstd_max says,
     * byte for byte the raw shards; a second open maps them as they are */
    char cache[600], one[700];
    snprintf(cache, sizeof cache, "%s/cache", test_dir);
    snprintf(spec, sizeof spec, "mds:%s,zstd_max=20000,cache=%s", test_dir, cache);
    for (int pass = 0; pass < 2; pass++) {
        ds = open_spec(spec);
        check_mosaic_mix(ds);
        ferry_dataset_free(ds);
        size_t a, b;
        snprintf(one, sizeof one, "%s/shard.00042.mds", cache);
        unsigned char *got = test_read_file(one, &a),
                      *want = test_read_file(MDS_DIR "/shard.00042.mds", &b);
        CHECK_U64(a, b);
        CHECK(!memcmp(got, want, a));
        free(got);
        free(want);
    }
    char cmd[800];
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 64 && rm -r %s", cache, cache);
    CHECK_EQ(system(cmd), 0);
    test_remove_dir();
}

/* ---- shards written here ---- */

typedef struct cell {
    const void *p;
    size_t n;
} cell;

/* A shard of n samples over ncols columns (var[c]: a per-sample size). */
static size_t write_shard(const char *path, int ncols, const int *var, int n, const cell *cells)
{
    size_t cap = 1 << 20, o = 0;
    unsigned char *buf = calloc(1, cap);
    uint32_t u = (uint32_t)n;
    memcpy(buf, &u, 4);
    const char *config = "{\"format\": \"mds\"}";
    size_t table = 4 + 4 * ((size_t)n + 1);
    o = table;
    memcpy(buf + o, config, strlen(config));
    o += strlen(config);
    for (int j = 0; j < n; j++) {
        u = (uint32_t)o;
        memcpy(buf + 4 + 4 * (size_t)j, &u, 4);
        for (int c = 0; c < ncols; c++)
            if (var[c]) {
                u = (uint32_t)cells[j * ncols + c].n;
                memcpy(buf + o, &u, 4);
                o += 4;
            }
        for (int c = 0; c < ncols; c++) {
            memcpy(buf + o, cells[j * ncols + c].p, cells[j * ncols + c].n);
            o += cells[j * ncols + c].n;
        }
    }
    u = (uint32_t)o;
    memcpy(buf + 4 + 4 * (size_t)n, &u, 4);
    test_write_file(path, buf, o);
    free(buf);
    return o;
}

/* index.json with one shard entry per (basename, bytes, samples). */
static void write_index(const char *names, const char *encs, const char *sizes, int nshards,
                        const char *const *base, const size_t *bytes, const int *samples)
{
    char text[16384], p[512];
    size_t o = (size_t)snprintf(text, sizeof text, "{\"shards\": [");
    for (int s = 0; s < nshards; s++)
        o += (size_t)snprintf(text + o, sizeof text - o,
                              "%s{\"column_encodings\": [%s], \"column_names\": [%s], "
                              "\"column_sizes\": [%s], \"compression\": null, \"format\": "
                              "\"mds\", \"hashes\": [], \"raw_data\": {\"basename\": \"%s\", "
                              "\"bytes\": %zu, \"hashes\": {}}, \"samples\": %d, \"size_limit\": "
                              "67108864, \"version\": 2, \"zip_data\": null}",
                              s ? ", " : "", encs, names, sizes, base[s], bytes[s], samples[s]);
    snprintf(text + o, sizeof text - o, "], \"version\": 2}");
    test_write_file(test_path("index.json", p), text, strlen(text));
}

TEST(every_column_encoding)
{
    test_make_dir("mds-encodings");
    char p[512];
    enum { NC = 9 };
    const int var[NC] = {0, 0, 0, 0, 1, 1, 1, 0, 1};
    cell cells[3 * NC];
    int8_t i8[3];
    uint16_t u16[3];
    double f64[3];
    uint64_t u64[3];
    float fixed[3][2][3];
    unsigned char dyn[3][64];
    size_t dynn[3];
    const char *strs[3] = {"", "zwei", "drei!"};
    const char *jsons[3] = {"{\"a\": 1}", "[]", "null"};
    uint8_t raw[3][5] = {{0, 1, 2, 3, 4}, {255}, {9, 9}};
    const size_t rawn[3] = {5, 1, 2};
    uint16_t hf[3] = {0x3c00, 0xc000, 0x0000}; /* 1.0, -2.0, 0.0 in IEEE half */
    for (int j = 0; j < 3; j++) {
        i8[j] = (int8_t)(-j - 1);
        u16[j] = (uint16_t)(60000 + j);
        f64[j] = j * 0.25;
        u64[j] = ((uint64_t)1 << 63) + (uint64_t)j;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                fixed[j][a][b] = (float)(j * 100 + a * 10 + b);
        /* ndarray:int32 with a per-sample shape: (j + 1, 2), uint8 shape dims */
        int nd = 2;
        dyn[j][0] = (unsigned char)(nd << 2 | 0);
        dyn[j][1] = (unsigned char)(j + 1);
        dyn[j][2] = 2;
        for (int k = 0; k < (j + 1) * 2; k++) {
            int32_t v = j * 1000 + k;
            memcpy(dyn[j] + 3 + 4 * k, &v, 4);
        }
        dynn[j] = 3 + 4 * (size_t)(j + 1) * 2;
        cell *c = &cells[j * NC];
        c[0] = (cell){&i8[j], 1};
        c[1] = (cell){&u16[j], 2};
        c[2] = (cell){&f64[j], 8};
        c[3] = (cell){&u64[j], 8};
        c[4] = (cell){strs[j], strlen(strs[j])};
        c[5] = (cell){raw[j], rawn[j]};
        c[6] = (cell){jsons[j], strlen(jsons[j])};
        c[7] = (cell){fixed[j], sizeof fixed[j]};
        c[8] = (cell){dyn[j], dynn[j]};
    }
    /* two shards: samples 0..1, then 2 */
    size_t bytes[2];
    bytes[0] = write_shard(test_path("shard.00000.mds", p), NC, var, 2, cells);
    bytes[1] = write_shard(test_path("shard.00001.mds", p), NC, var, 1, cells + 2 * NC);
    const char *base[2] = {"shard.00000.mds", "shard.00001.mds"};
    const int samples[2] = {2, 1};
    write_index("\"i8\", \"u16\", \"f64\", \"u64\", \"s\", \"b\", \"j\", \"fixed\", \"dyn\"",
                "\"int8\", \"uint16\", \"float64\", \"uint64\", \"str\", \"bytes\", \"json\", "
                "\"ndarray:float32:2,3\", \"ndarray:int32\"",
                "1, 2, 8, 8, null, null, null, 24, null", 2, base, bytes, samples);
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 3);
    CHECK_EQ(ferry_dataset_nfields(ds), NC + 1);
    static const ferry_dtype dts[NC + 1] = {FERRY_I8, FERRY_U16, FERRY_F64, FERRY_U64, FERRY_U8,
                                            FERRY_U8, FERRY_U8,  FERRY_F32, FERRY_I32, FERRY_I64};
    for (int f = 0; f <= NC; f++)
        CHECK_EQ(ferry_dataset_field(ds, f)->dtype, dts[f]);
    CHECK(!strcmp(ferry_dataset_field(ds, 9)->name, "dyn.shape"));
    CHECK_EQ(ferry_dataset_field(ds, 4)->shape[0], 5); /* the longest str */
    CHECK_EQ(ferry_dataset_field(ds, 7)->ndim, 2);
    CHECK_EQ(ferry_dataset_field(ds, 8)->shape[0], 6); /* the most ndarray values */
    sample_buf b;
    sb_init(&b, ds);
    for (int j = 0; j < 3; j++) {
        CHECK_OK(ferry_dataset_get(ds, (uint64_t)j, &b.s, b.ctx));
        CHECK(!memcmp(b.data[0], &i8[j], 1));
        CHECK(!memcmp(b.data[1], &u16[j], 2));
        CHECK(!memcmp(b.data[2], &f64[j], 8));
        CHECK(!memcmp(b.data[3], &u64[j], 8));
        CHECK_EQ(b.len[4], strlen(strs[j]));
        CHECK(!memcmp(b.data[4], strs[j], strlen(strs[j])));
        CHECK_EQ(b.len[5], rawn[j]);
        CHECK(!memcmp(b.data[5], raw[j], rawn[j]));
        CHECK_EQ(b.len[6], strlen(jsons[j]));
        CHECK(!memcmp(b.data[6], jsons[j], strlen(jsons[j])));
        CHECK(!memcmp(b.data[7], fixed[j], sizeof fixed[j]));
        CHECK_EQ(b.len[8], (j + 1) * 2);
        CHECK(!memcmp(b.data[8], dyn[j] + 3, (size_t)(j + 1) * 8));
        int64_t shape[8];
        memcpy(shape, b.data[9], sizeof shape);
        CHECK_EQ(shape[0], j + 1);
        CHECK_EQ(shape[1], 2);
        CHECK_EQ(shape[2], 0);
    }
    sb_free(&b);
    ferry_dataset_free(ds);
    /* float16 scalars */
    int hv[1] = {0};
    cell hc[3] = {{&hf[0], 2}, {&hf[1], 2}, {&hf[2], 2}};
    size_t hb[1];
    hb[0] = write_shard(test_path("shard.00000.mds", p), 1, hv, 3, hc);
    const char *hbase[1] = {"shard.00000.mds"};
    const int hs[1] = {3};
    write_index("\"h\"", "\"float16\"", "2", 1, hbase, hb, hs);
    ds = open_spec(spec);
    CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_F16);
    sb_init(&b, ds);
    CHECK_OK(ferry_dataset_get(ds, 1, &b.s, b.ctx));
    CHECK(!memcmp(b.data[0], &hf[1], 2));
    sb_free(&b);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(jpeg_column_through_the_image_pipeline)
{
    test_need_shared(JPEG);
    test_make_dir("mds-jpeg");
    char p[512];
    size_t jn;
    unsigned char *jpg = test_read_file(JPEG, &jn);
    int64_t label = 7;
    const int var[2] = {1, 0};
    cell cells[2] = {{jpg, jn}, {&label, 8}};
    size_t bytes[1];
    bytes[0] = write_shard(test_path("shard.00000.mds", p), 2, var, 1, cells);
    const char *base[1] = {"shard.00000.mds"};
    const int samples[1] = {1};
    write_index("\"jpg\", \"label\"", "\"jpeg\", \"int\"", "null, 8", 1, base, bytes, samples);
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s,pipeline=eval,size=16,image_field=jpg", test_dir);
    ferry_dataset *ds = open_spec(spec);
    int fi = ferry_dataset_find_field(ds, "image"), fl = ferry_dataset_find_field(ds, "label");
    CHECK(fi >= 0 && fl >= 0);
    sample_buf b;
    sb_init(&b, ds);
    CHECK_OK(ferry_dataset_get(ds, 0, &b.s, b.ctx));
    int64_t got;
    memcpy(&got, b.data[fl], 8);
    CHECK_EQ(got, 7);
    /* the same pipeline over the file's bytes gives the same tensor */
    ferry_image_pipeline ip;
    ferry_image_pipeline_default(&ip, FERRY_PIPELINE_EVAL);
    ip.width = ip.height = 16;
    size_t nb = ferry_field_nbytes(ferry_dataset_field(ds, fi));
    void *want = calloc(1, nb);
    ferry_rng rng;
    ferry_rng_init(&rng, 0, 0, 0);
    CHECK_OK(ferry_image_pipeline_run(&ip, jpg, jn, &rng, want, b.ctx));
    CHECK(!memcmp(want, b.data[fi], nb));
    free(want);
    sb_free(&b);
    ferry_dataset_free(ds);
    free(jpg);
    test_remove_dir();
}

static void expect_bad(int want, const char *msg)
{
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, spec), want);
    CHECK_CONTAINS(ferry_last_errmsg(), test_dir);
    CHECK_CONTAINS(ferry_last_errmsg(), msg);
}

TEST(refused_encodings)
{
    test_make_dir("mds-refused");
    char p[512];
    const int var[1] = {1};
    cell c[1] = {{"\x80\x04N.", 4}};
    size_t bytes[1];
    bytes[0] = write_shard(test_path("shard.00000.mds", p), 1, var, 1, c);
    const char *base[1] = {"shard.00000.mds"};
    const int samples[1] = {1};
    write_index("\"obj\"", "\"pkl\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ENOTSUP, "column \"obj\": encoding pkl (Python pickles: code in data) is "
                              "refused");
    CHECK_CONTAINS(ferry_last_errmsg(), "index.json: offset ");
    write_index("\"a\"", "\"ndarray\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ENOTSUP, "ndarray without a fixed dtype");
    write_index("\"a\"", "\"mystery\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ENOTSUP, "unknown encoding \"mystery\"");
    write_index("\"a\"", "\"int\"", "4", 1, base, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "column \"a\" (int) is 8 bytes a sample, but column_sizes says");
    const char *evil[1] = {"../x.mds"};
    write_index("\"a\"", "\"str\"", "null", 1, evil, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "basename \"../x.mds\" is not a plain file name");
    test_write_file(test_path("index.json", p), "{\"shards\": [", 12);
    expect_bad(FERRY_ECORRUPT, "index.json: offset 12: the text ends");
    test_remove_dir();
}

TEST(index_strings_follow_the_json_rules)
{
    /* a column name with a lone surrogate, with \u0000 (which would cut it short),
     * or with bytes that are not UTF-8: the index is refused, at the string */
    test_make_dir("mds-json-rules");
    char p[512];
    const int var[1] = {1};
    cell c[1] = {{"ab", 2}};
    size_t bytes[1];
    bytes[0] = write_shard(test_path("shard.00000.mds", p), 1, var, 1, c);
    const char *base[1] = {"shard.00000.mds"};
    const int samples[1] = {1};
    write_index("\"a\\ud800\"", "\"str\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "lone high surrogate in a \\u escape");
    CHECK_CONTAINS(ferry_last_errmsg(), "index.json: offset ");
    write_index("\"a\\u0000b\"", "\"str\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "\\u0000 in a string");
    write_index("\"a\xff\"", "\"str\"", "null", 1, base, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "invalid UTF-8 in a string");
    /* the same column names, well formed, are taken */
    write_index("\"a\\u00e9\"", "\"str\"", "null", 1, base, bytes, samples);
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = NULL;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(index_that_disagrees_with_its_shards)
{
    test_make_dir("mds-bad");
    char p[512];
    const int var[2] = {1, 0};
    int64_t ids[3] = {1, 2, 3};
    cell c[6] = {{"a", 1}, {&ids[0], 8}, {"bb", 2}, {&ids[1], 8}, {"ccc", 3}, {&ids[2], 8}};
    size_t bytes[1];
    bytes[0] = write_shard(test_path("shard.00000.mds", p), 2, var, 3, c);
    const char *base[1] = {"shard.00000.mds"};
    int samples[1] = {3};
    const char *names = "\"t\", \"id\"", *encs = "\"str\", \"int\"", *sizes = "null, 8";
    write_index(names, encs, sizes, 1, base, bytes, samples);
    char spec[700];
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 3);
    ferry_dataset_free(ds);
    /* the index's byte count */
    size_t wrong[1] = {bytes[0] + 1};
    write_index(names, encs, sizes, 1, base, wrong, samples);
    expect_bad(FERRY_ECORRUPT, "shard.00000.mds: offset 0: the index says ");
    /* the sample count */
    samples[0] = 4;
    write_index(names, encs, sizes, 1, base, bytes, samples);
    expect_bad(FERRY_ECORRUPT, "shard.00000.mds: offset 0: 3 samples, but the index says 4");
    samples[0] = 3;
    write_index(names, encs, sizes, 1, base, bytes, samples);
    size_t n;
    unsigned char *good = test_read_file(test_path("shard.00000.mds", p), &n);
    unsigned char *bad = malloc(n);
    /* a sample's column size that runs past its end */
    memcpy(bad, good, n);
    uint32_t first;
    memcpy(&first, bad + 4, 4);
    bad[first] = 200;
    test_write_file(p, bad, n);
    expect_bad(FERRY_ECORRUPT, "shard.00000.mds: sample 0 at offset ");
    CHECK_CONTAINS(ferry_last_errmsg(), "column \"t\" (200 bytes) runs past the sample's end");
    /* offsets out of order */
    memcpy(bad, good, n);
    uint32_t big = (uint32_t)n + 5;
    memcpy(bad + 8, &big, 4);
    test_write_file(p, bad, n);
    expect_bad(FERRY_ECORRUPT, "shard.00000.mds: offset 8: sample 0's end");
    /* a shard file that is not there */
    unlink(p);
    expect_bad(FERRY_ENOENT, "shard.00000.mds");
    /* columns that differ between shards */
    test_write_file(p, good, n);
    const char *base2[2] = {"shard.00000.mds", "shard.00000.mds"};
    size_t bytes2[2] = {n, n};
    int samples2[2] = {3, 3};
    char text[4096];
    snprintf(
        text, sizeof text,
        "{\"shards\": [{\"column_encodings\": [\"str\", \"int\"], \"column_names\": [\"t\", "
        "\"id\"], \"column_sizes\": [null, 8], \"format\": \"mds\", \"raw_data\": "
        "{\"basename\": \"%s\", \"bytes\": %zu}, \"samples\": 3}, {\"column_encodings\": "
        "[\"bytes\", \"int\"], \"column_names\": [\"t\", \"id\"], \"column_sizes\": [null, 8], "
        "\"format\": \"mds\", \"raw_data\": {\"basename\": \"%s\", \"bytes\": %zu}, "
        "\"samples\": 3}], \"version\": 2}",
        base2[0], bytes2[0], base2[1], bytes2[1]);
    (void)samples2;
    test_write_file(test_path("index.json", p), text, strlen(text));
    expect_bad(FERRY_ECORRUPT, "shard 1's columns differ from shard 0's");
    free(bad);
    free(good);
    test_remove_dir();
}

TEST(allocation_failures_in_open)
{
    test_need_shared(MDS_DIR "/index.json");
    int done = 0;
    for (long k = 0; k < 400 && !done; k++) {
        ferry_dataset *ds = NULL;
        ferry__test_fail_alloc(k);
        int rc = ferry_dataset_open(&ds, "mds:" MDS_DIR);
        ferry__test_fail_alloc(-1);
        if (rc == FERRY_ENOMEM)
            continue;
        CHECK_OK(rc);
        CHECK_U64(ferry_dataset_len(ds), 9999);
        ferry_dataset_free(ds);
        done = 1;
    }
    CHECK(done);
}

TEST(zstd_shards_that_lie)
{
    test_make_dir("mds-zstd-bad");
    char p[512], z[512], spec[1200];
    const int var[1] = {1};
    char texts[40][16];
    cell c[40];
    for (int j = 0; j < 40; j++) {
        snprintf(texts[j], sizeof texts[j], "sample %d", j);
        c[j] = (cell){texts[j], strlen(texts[j])};
    }
    size_t raw = write_shard(test_path("shard.00000.mds", p), 1, var, 40, c);
    size_t n;
    unsigned char *rb = test_read_file(p, &n);
    size_t cap = ZSTD_compressBound(n);
    unsigned char *zb = malloc(cap);
    size_t zn = ZSTD_compress(zb, cap, rb, n, 3);
    CHECK(!ZSTD_isError(zn));
    unlink(p);
    test_write_file(test_path("shard.00000.mds.zstd", z), zb, zn);
    char text[2048];
    snprintf(text, sizeof text,
             "{\"shards\": [{\"column_encodings\": [\"str\"], \"column_names\": [\"t\"], "
             "\"column_sizes\": [null], \"compression\": \"zstd:3\", \"format\": \"mds\", "
             "\"raw_data\": {\"basename\": \"shard.00000.mds\", \"bytes\": %zu}, \"samples\": 40, "
             "\"zip_data\": {\"basename\": \"shard.00000.mds.zstd\", \"bytes\": %zu}}], "
             "\"version\": 2}",
             raw, zn);
    test_write_file(test_path("index.json", p), text, strlen(text));
    snprintf(spec, sizeof spec, "mds:%s", test_dir);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 40);
    ferry_dataset_free(ds);
    /* a damaged frame of the same size: in memory and through the cache */
    zb[zn / 2] ^= 0x55;
    zb[zn / 2 + 1] ^= 0x55;
    test_write_file(z, zb, zn);
    for (int cached = 0; cached < 2; cached++) {
        if (cached)
            snprintf(spec, sizeof spec, "mds:%s,cache=%s/c", test_dir, test_dir);
        else
            snprintf(spec, sizeof spec, "mds:%s", test_dir);
        ds = NULL;
        CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "shard.00000.mds.zstd");
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test ! -e %s/c/shard.00000.mds && rm -rf %s/c", test_dir, test_dir);
    CHECK_EQ(system(cmd), 0); /* nothing half-written left in the cache */
    /* a frame cut short: its size no longer what the index says */
    test_write_file(z, zb, zn - 5);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard.00000.mds.zstd: offset 0: the index says");
    free(zb);
    free(rb);
    test_remove_dir();
}

TEST(ferry_head_pack_and_bench_read_mds)
{
    test_need_shared(MDS_DIR "/index.json");
    test_make_dir("mds-cli");
    char args[2048], out[8192];
    snprintf(args, sizeof args, "head mds:%s -n 2", MDS_DIR);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "{\"dummy_text\": \"Dummy text 1\", \"id\": 1}\n"
                        "{\"dummy_text\": \"Dummy text 2\", \"id\": 2}");
    snprintf(args, sizeof args, "pack mds:%s %s/rec && %s stat %s/rec", MDS_DIR, test_dir,
             TEST_FERRY_CLI, test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "9999");
    snprintf(args, sizeof args, "bench mds:%s --shuffle --batch 100 --json", MDS_DIR);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"samples\": 9999,");
    test_remove_dir();
}

/* A shard in two zstd frames, read through a cache whose parents are missing: every
 * frame is decoded, an edited copy is decompressed again, zstd_max bounds what is
 * written, and errors name the copy and its zstd file. */
TEST(cache_is_checked_and_bounded)
{
    test_make_dir("mds-cache");
    char p[512], z[512], spec[1200], cpath[700], text[2048];
    const int var[1] = {1};
    char texts[40][16];
    cell c[40];
    for (int j = 0; j < 40; j++) {
        snprintf(texts[j], sizeof texts[j], "sample %d", j);
        c[j] = (cell){texts[j], strlen(texts[j])};
    }
    size_t raw = write_shard(test_path("shard.00000.mds", p), 1, var, 40, c), n;
    unsigned char *rb = test_read_file(p, &n);
    unsigned char *zb = malloc(2 * ZSTD_compressBound(n));
    size_t z1 = ZSTD_compress(zb, ZSTD_compressBound(n), rb, n / 2, 3);
    size_t z2 = ZSTD_compress(zb + z1, ZSTD_compressBound(n), rb + n / 2, n - n / 2, 3);
    CHECK(!ZSTD_isError(z1) && !ZSTD_isError(z2));
    unlink(p);
    test_write_file(test_path("shard.00000.mds.zstd", z), zb, z1 + z2);
    for (int lie = 0; lie < 2; lie++) {
        snprintf(text, sizeof text,
                 "{\"shards\": [{\"column_encodings\": [\"str\"], \"column_names\": [\"t\"], "
                 "\"column_sizes\": [null], \"compression\": \"zstd:3\", \"format\": \"mds\", "
                 "\"raw_data\": {\"basename\": \"shard.00000.mds\", \"bytes\": %zu}, "
                 "\"samples\": %d, \"zip_data\": {\"basename\": \"shard.00000.mds.zstd\", "
                 "\"bytes\": %zu}}], \"version\": 2}",
                 raw, lie ? 41 : 40, z1 + z2);
        test_write_file(test_path("index.json", p), text, strlen(text));
        if (!lie) {
            snprintf(spec, sizeof spec, "mds:%s", test_dir);
            ferry_dataset *ds = open_spec(spec);
            CHECK_U64(ferry_dataset_len(ds), 40);
            ferry_dataset_free(ds);
        }
    }
    /* the index disagrees with the copy: the message names both */
    snprintf(spec, sizeof spec, "mds:%s,cache=%s/a/b", test_dir, test_dir);
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    snprintf(cpath, sizeof cpath, "%s/a/b/shard.00000.mds (cached from %s/shard.00000.mds.zstd)",
             test_dir, test_dir);
    CHECK_CONTAINS(ferry_last_errmsg(), cpath);
    CHECK_CONTAINS(ferry_last_errmsg(), "40 samples, but the index says 41");
    size_t in; /* the index back to 40 samples */
    unsigned char *idx = test_read_file(p, &in);
    char *at = strstr((char *)idx, "\"samples\": 41");
    at[12] = '0';
    test_write_file(p, idx, in);
    free(idx);
    snprintf(cpath, sizeof cpath, "%s/a/b/shard.00000.mds", test_dir);
    for (int pass = 0; pass < 3; pass++) {
        ds = open_spec(spec);
        CHECK_U64(ferry_dataset_len(ds), 40);
        ferry_dataset_free(ds);
        size_t cn;
        unsigned char *got = test_read_file(cpath, &cn);
        CHECK_U64(cn, n);
        CHECK(!memcmp(got, rb, n)); /* both frames, byte for byte */
        if (pass == 1) {            /* edited in place, same size: decompressed again */
            got[n - 3] ^= 1;
            test_write_file(cpath, got, cn);
        }
        free(got);
    }
    /* zstd_max bounds a shard written to the cache; nothing is left there */
    snprintf(spec, sizeof spec, "mds:%s,cache=%s/small,zstd_max=100", test_dir, test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "shard.00000.mds.zstd: decompresses to ");
    snprintf(cpath, sizeof cpath, "%s/small/shard.00000.mds", test_dir);
    CHECK(access(cpath, F_OK) != 0);
    free(zb);
    free(rb);
    test_remove_dir();
}
