/*
 * TFRecord: the real files in ../shared/testdata/tfrecord read with the contents
 * SOURCES.md lists (map-style and stream, plain and gzip), schemas inferred and
 * given, missing values, raw records, SequenceExample context and feature lists, the
 * stream's split of files across shards, and every bad input with its message.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/tfrecord.h>
#include "source_table.h"

#include <math.h>
#include <zlib.h>
#include <unistd.h>

#define TF FERRY_SHARED_DIR "/testdata/tfrecord"
static float f32(const table *t, size_t i, const char *name, int j)
{
    float v;
    memcpy(&v, t->rows[i].data[col(t, name)] + 4 * j, 4);
    return v;
}

static int64_t i64(const table *t, size_t i, const char *name, int j)
{
    int64_t v;
    memcpy(&v, t->rows[i].data[col(t, name)] + 8 * j, 8);
    return v;
}

static int64_t len(const table *t, size_t i, const char *name)
{
    return t->rows[i].len[col(t, name)];
}

/* Row j of a bytes field, as a string. */
static const char *str(const table *t, size_t i, const char *name, int j)
{
    int k = col(t, name);
    size_t w = t->f[k].ndim == 2 ? (size_t)t->f[k].shape[1] : (size_t)t->f[k].shape[0];
    static char buf[4096];
    size_t n = t->f[k].ndim == 2 ? strnlen((char *)t->rows[i].data[k] + j * w, w)
                                 : (size_t)t->rows[i].len[k];
    memcpy(buf, t->rows[i].data[k] + j * w, n);
    buf[n] = 0;
    return buf;
}

/* The ydf toy set: SOURCES.md's listing of its four records. */
static void check_toy(const table *t, size_t first, size_t count)
{
    static const char *cat1[] = {"A", "B", "A", "C"};
    static const char *set1[4][3] = {{"x"}, {"x", "y"}, {"y", "x", "z"}, {"x", "y", "z"}};
    static const int nset1[] = {1, 2, 3, 3};
    static const int nset2[] = {0, 1, 2, 3};
    static const char *set2[4][3] = {{0}, {"x"}, {"x", "y"}, {"z", "x", "y"}};
    static const int has_num2[] = {0, 1, 0, 1};
    static const int64_t bool1[] = {0, 1, 0, 1};
    static const int has_bool2[] = {1, 0, 1, 0};
    static const int64_t bool2[] = {0, 0, 1, 0};
    static const float cat3[] = {1, 2, 1, 3};
    CHECK_EQ(t->n, count);
    CHECK_EQ(t->nf, 9);
    CHECK_EQ(t->f[col(t, "Num_1")].ndim, 0);
    CHECK_EQ(t->f[col(t, "Num_1")].dtype, FERRY_F32);
    CHECK_EQ(t->f[col(t, "Bool_1")].dtype, FERRY_I64);
    for (size_t i = 0; i < count; i++) {
        size_t r = first + i;
        CHECK(f32(t, i, "Num_1", 0) == (float)(r + 1));
        CHECK_EQ(len(t, i, "Num_2"), has_num2[r]);
        if (has_num2[r])
            CHECK(f32(t, i, "Num_2", 0) == (float)(r + 1));
        CHECK(!strcmp(str(t, i, "Cat_1", 0), cat1[r]));
        CHECK_EQ(len(t, i, "Cat_set_1"), nset1[r]);
        for (int j = 0; j < nset1[r]; j++)
            CHECK(!strcmp(str(t, i, "Cat_set_1", j), set1[r][j]));
        CHECK_EQ(len(t, i, "Cat_set_2"), nset2[r]);
        for (int j = 0; j < nset2[r]; j++)
            CHECK(!strcmp(str(t, i, "Cat_set_2", j), set2[r][j]));
        CHECK_EQ(i64(t, i, "Bool_1", 0), bool1[r]);
        CHECK_EQ(len(t, i, "Bool_2"), has_bool2[r]);
        if (has_bool2[r])
            CHECK_EQ(i64(t, i, "Bool_2", 0), bool2[r]);
        CHECK(f32(t, i, "Cat_3", 0) == cat3[r]);
    }
}

TEST(ydf_toy_uncompressed)
{
    test_need_shared(TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord");
    /* shard 0 alone, map-style (an offset index) */
    table t = read_source("tfrecord:" TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    check_toy(&t, 0, 3);
    table_free(&t);
    /* both shards through a glob; the schema is inferred across them */
    t = read_source("tfrecord:" TF "/ydf_toy_uncompressed-0000*", 0, 1, 0);
    check_toy(&t, 0, 4);
    table_free(&t);
    /* record lengths as listed */
    t = read_source("tfrecord:" TF "/ydf_toy_uncompressed-0000*,raw=1", 0, 1, 0);
    CHECK_EQ(t.n, 4);
    CHECK_EQ(t.rows[0].len[0], 153);
    CHECK_EQ(t.rows[1].len[0], 159);
    CHECK_EQ(t.rows[2].len[0], 167);
    CHECK_EQ(t.rows[3].len[0], 168);
    CHECK_EQ(t.f[0].shape[0], 168); /* the longest record: the bound of a map-style raw field */
    table_free(&t);
}

TEST(ydf_toy_gzip)
{
    test_need_shared(TF "/ydf_toy_gzip-00000-of-00002.tfrecord.gz");
    /* gzip files are a stream; read in name order with one shard and seed 0 the
     * order is a permutation: take each file alone */
    table t = read_source("tfrecord:" TF "/ydf_toy_gzip-00000-of-00002.tfrecord.gz", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    check_toy(&t, 0, 3);
    table_free(&t);
    t = read_source("tfrecord:" TF "/ydf_toy_gzip-00001-of-00002.tfrecord.gz,"
                    "features=Num_1:f32;Cat_set_1:bytes:3x1",
                    0, 1, 0);
    CHECK_EQ(t.n, 1);
    CHECK(f32(&t, 0, "Num_1", 0) == 4.0f);
    CHECK(!strcmp(str(&t, 0, "Cat_set_1", 2), "z"));
    table_free(&t);
    /* the payloads after gunzip are byte-identical to the uncompressed shard's */
    table a = read_source("tfrecord:" TF "/ydf_toy_gzip-00000-of-00002.tfrecord.gz,raw=1", 0, 1, 0);
    table b =
        read_source("tfrecord:" TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord,raw=1", 0, 1, 0);
    CHECK_EQ(a.n, 3);
    CHECK_EQ(b.n, 3);
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ(a.rows[i].len[0], b.rows[i].len[0]);
        CHECK(!memcmp(a.rows[i].data[0], b.rows[i].data[0], (size_t)a.rows[i].len[0]));
    }
    table_free(&a);
    table_free(&b);
}

TEST(penguin)
{
    test_need_shared(TF "/tfx_penguin_eval-00000-of-00001.tfrecord.gz");
    table t = read_source("tfrecord:" TF "/tfx_penguin_eval-00000-of-00001.tfrecord.gz", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 100);
    CHECK_EQ(t.nf, 5);
    CHECK(f32(&t, 0, "body_mass_g", 0) == 0.2569444477558136f);
    CHECK(f32(&t, 0, "culmen_depth_mm", 0) == 0.5595238208770752f);
    CHECK(f32(&t, 0, "culmen_length_mm", 0) == 0.24727272987365723f);
    CHECK(f32(&t, 0, "flipper_length_mm", 0) == 0.1525423675775528f);
    CHECK_EQ(i64(&t, 0, "species", 0), 0);
    for (size_t i = 0; i < t.n; i++) {
        CHECK(i64(&t, i, "species", 0) >= 0 && i64(&t, i, "species", 0) <= 2);
        float v = f32(&t, i, "body_mass_g", 0);
        CHECK(v >= 0 && v <= 1);
    }
    table_free(&t);
    t = read_source("tfrecord:" TF "/tfx_penguin_train-00000-of-00001.tfrecord.gz,raw=1", 0, 1, 0);
    CHECK_EQ(t.n, 234);
    for (size_t i = 0; i < t.n; i++)
        CHECK_EQ(t.rows[i].len[0], 136);
    table_free(&t);
    /* the inferred schema is the one TFX wrote beside the data (schema.pbtxt):
     * the same names, FLOAT as float32 and INT as int64, each of shape [1]
     * (one value: a scalar here) */
    test_need_shared(TF "/tfx_penguin_schema.pbtxt");
    t = read_source("tfrecord:" TF "/tfx_penguin_train-00000-of-00001.tfrecord.gz", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 234);
    size_t n;
    char *pb = (char *)test_read_file(TF "/tfx_penguin_schema.pbtxt", &n);
    pb[n] = 0;
    int features = 0;
    for (char *at = strstr(pb, "name: \""); at; at = strstr(at + 1, "name: \"")) {
        char name[64], type[16];
        CHECK(sscanf(at, "name: \"%63[^\"]\" type: %15s", name, type) == 2);
        int k = col(&t, name);
        CHECK_EQ(t.f[k].dtype, !strcmp(type, "FLOAT") ? FERRY_F32 : FERRY_I64);
        CHECK(!strcmp(type, "FLOAT") || !strcmp(type, "INT"));
        CHECK_EQ(t.f[k].ndim, 0);
        features++;
    }
    CHECK_EQ(features, 5);
    CHECK_EQ(t.nf, 5);
    free(pb);
    table_free(&t);
    /* both splits as one stream, split over 2 shards: disjoint, 334 in all */
    table s0 = read_source("tfrecord:" TF "/tfx_penguin_*.tfrecord.gz", 0, 2, 3);
    table s1 = read_source("tfrecord:" TF "/tfx_penguin_*.tfrecord.gz", 1, 2, 3);
    CHECK_EQ(s0.n + s1.n, 334);
    CHECK(s0.n == 100 || s0.n == 234);
    table_free(&s0);
    table_free(&s1);
}

TEST(sequence_example)
{
    test_need_shared(TF "/tfx_sequence_example_eval.tfrecord.gz");
    table t = read_source("tfrecord:" TF "/tfx_sequence_example_eval.tfrecord.gz,raw=1", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 4500);
    for (size_t i = 0; i < t.n; i++)
        CHECK_EQ(t.rows[i].len[0], i % 10 == 0 ? 47 : 61); /* ids % 10 == 0: empty context */
    /* record 1 (id 10501): feature_lists "s" holds "10501" and "10502" */
    CHECK(memmem(t.rows[1].data[0], 61, "10501", 5) && memmem(t.rows[1].data[0], 61, "10502", 5));
    table_free(&t);
    /* decoded: context "i" (int64) and "f" (float), feature list "s" (2 steps) */
    t = read_source("tfrecord:" TF "/tfx_sequence_example_eval.tfrecord.gz", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 4500);
    CHECK_EQ(t.nf, 3);
    int s = col(&t, "s");
    CHECK_EQ(t.f[s].ndim, 2);
    CHECK_EQ(t.f[s].shape[0], 2);
    CHECK_EQ(t.f[s].shape[1], 5);
    for (size_t k = 0; k < t.n; k++) {
        int64_t id = 10500 + (int64_t)k;
        /* ids % 10 == 0: the context features are present with no kind */
        CHECK_EQ(len(&t, k, "i"), id % 10 ? 1 : 0);
        CHECK_EQ(len(&t, k, "f"), id % 10 ? 1 : 0);
        if (id % 10) {
            CHECK_EQ(i64(&t, k, "i", 0), id);
            CHECK(f32(&t, k, "f", 0) == (float)id);
        }
        CHECK_EQ(len(&t, k, "s"), 2);
        char want[16];
        snprintf(want, sizeof want, "%lld", (long long)id);
        CHECK(!strcmp(str(&t, k, "s", 0), want));
        snprintf(want, sizeof want, "%lld", (long long)id + 1);
        CHECK(!strcmp(str(&t, k, "s", 1), want));
    }
    table_free(&t);
    /* a given schema that takes the list for a feature: an error naming it */
    t = read_source("tfrecord:" TF "/tfx_sequence_example_eval.tfrecord.gz,features=s:bytes:16", 0,
                    1, 0);
    CHECK_EQ(t.n, 0);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "tfx_sequence_example_eval.tfrecord.gz: record 0 at offset 0: \"s\" is "
                          "a feature list, the schema has a feature");
    table_free(&t);
}

TEST(sentences)
{
    test_need_shared(TF "/ydf_sentences_gzip.tfrecord.gz");
    table t = read_source("tfrecord:" TF "/ydf_sentences_gzip.tfrecord.gz", 0, 1, 0);
    CHECK_EQ(t.n, 2);
    CHECK_EQ(t.nf, 1);
    CHECK(!strcmp(str(&t, 0, "f1", 0), "Hello world"));
    CHECK(!strcmp(str(&t, 1, "f1", 0), "Bonjour le monde"));
    table_free(&t);
    t = read_source("tfrecord:" TF "/ydf_sentences_gzip.tfrecord.gz,raw=1", 0, 1, 0);
    CHECK_EQ(t.rows[0].len[0], 25);
    CHECK_EQ(t.rows[1].len[0], 30);
    table_free(&t);
}

/* ---- Files written here ---- */

/* An Example with float feature "x" = [v] and bytes feature "s" = [text]. */
static size_t example(uint8_t *out, float v, const char *text)
{
    uint8_t *p = out;
    size_t tl = strlen(text);
    *p++ = 0x0a, *p++ = (uint8_t)(15 + 2 + 9 + tl); /* Example.features */
    /* entry "x": Feature{float_list{packed [v]}} */
    *p++ = 0x0a, *p++ = 13, *p++ = 0x0a, *p++ = 1, *p++ = 'x', *p++ = 0x12, *p++ = 8;
    *p++ = 0x12, *p++ = 6, *p++ = 0x0a, *p++ = 4;
    memcpy(p, &v, 4), p += 4;
    /* entry "s": Feature{bytes_list{[text]}} */
    *p++ = 0x0a, *p++ = (uint8_t)(9 + tl), *p++ = 0x0a, *p++ = 1, *p++ = 's', *p++ = 0x12;
    *p++ = (uint8_t)(4 + tl), *p++ = 0x0a, *p++ = (uint8_t)(2 + tl), *p++ = 0x0a,
    *p++ = (uint8_t)tl;
    memcpy(p, text, tl), p += tl;
    return (size_t)(p - out);
}

static void write_set(const char *name, int count)
{
    static uint8_t file[1 << 16];
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        uint8_t ex[256];
        char text[32];
        snprintf(text, sizeof text, "s%d", i);
        size_t n = example(ex, (float)i, text);
        at += test_tfrecord_frame(file + at, ex, n);
    }
    char path[512];
    test_write_file(test_path(name, path), file, at);
}

TEST(written_examples)
{
    test_make_dir("tfrecord-written");
    write_set("a.tfrecord", 5);
    char spec[600], path[512];
    snprintf(spec, sizeof spec, "tfrecord:%s", test_path("a.tfrecord", path));
    table t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 5);
    CHECK_EQ(t.nf, 2);
    for (size_t i = 0; i < 5; i++) {
        char want[8];
        snprintf(want, sizeof want, "s%zu", i);
        CHECK(f32(&t, i, "x", 0) == (float)i);
        CHECK(!strcmp(str(&t, i, "s", 0), want));
    }
    table_free(&t);
    /* a given schema: "y" is in no record: an error naming it, or filled */
    snprintf(spec, sizeof spec, "tfrecord:%s,features=x:f32;y:i64:2", path);
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 0);
    CHECK_EQ(t.rc, FERRY_ENOENT);
    CHECK_CONTAINS(t.msg, "a.tfrecord: record 0 at offset 0: feature \"y\" is missing");
    table_free(&t);
    snprintf(spec, sizeof spec, "tfrecord:%s,features=x:f32;y:i64:2,missing=fill,fill=-1", path);
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 5);
    CHECK_EQ(i64(&t, 4, "y", 1), -1);
    table_free(&t);
    /* a bound too small for a value */
    snprintf(spec, sizeof spec, "tfrecord:%s,features=s:bytes:1", path);
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_EOVERFLOW);
    CHECK_CONTAINS(t.msg, "record 0 at offset 0: feature \"s\" has a 2-byte value");
    table_free(&t);
    /* stream: many files, split over shards, shuffled per epoch */
    for (int k = 0; k < 8; k++) {
        char name[64];
        snprintf(name, sizeof name, "part-%d.tfrecord", k);
        write_set(name, k + 1);
    }
    snprintf(spec, sizeof spec, "tfrecord:%s/part-*.tfrecord,stream=1,seed=7", test_dir);
    size_t total = 0;
    for (uint64_t s = 0; s < 3; s++) {
        table p = read_source(spec, s, 3, 0);
        CHECK_EQ(p.rc, FERRY_END);
        total += p.n;
        table_free(&p);
    }
    CHECK_EQ(total, 36);
    table e0 = read_source(spec, 0, 1, 0), e1 = read_source(spec, 0, 1, 1);
    CHECK_EQ(e0.n, 36);
    int differ = 0;
    for (size_t i = 0; i < 36; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s", str(&e0, i, "s", 0));
        differ |= strcmp(a, str(&e1, i, "s", 0)) != 0;
    }
    CHECK(differ); /* a new file order each epoch */
    table_free(&e0);
    table_free(&e1);
    test_remove_dir();
}

/* Writes bytes as a file and reads it as spec + path: the error at the end. */
static table read_bytes(const char *name, const void *b, size_t n, const char *opts)
{
    char path[512], spec[700];
    test_write_file(test_path(name, path), b, n);
    snprintf(spec, sizeof spec, "tfrecord:%s%s", path, opts);
    ferry_dataset *ds;
    ferry_stream *st;
    int rc = ferry_source_open(spec, &ds, &st);
    if (rc < 0) {
        table t = {0};
        t.rc = rc;
        snprintf(t.msg, sizeof t.msg, "%s", ferry_last_errmsg());
        return t;
    }
    ferry_dataset_free(ds);
    ferry_stream_free(st);
    return read_source(spec, 0, 1, 0);
}

/* Field `field` (length-delimited): its tag, its length as a varint, the bytes. */
static size_t pb(uint8_t *out, int field, const void *data, size_t n)
{
    size_t o = 0;
    out[o++] = (uint8_t)(field << 3 | 2);
    for (uint64_t v = n;;) {
        out[o++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        if (!(v >>= 7))
            break;
    }
    memcpy(out + o, data, n);
    return o + n;
}

/* An Example whose bytes feature "x" holds count values of len bytes. */
static size_t bytes_example(uint8_t *out, int count, size_t len)
{
    static uint8_t a[1 << 17], b[1 << 17], v[1 << 16];
    memset(v, 'v', len);
    size_t n = 0;
    for (int i = 0; i < count; i++)
        n += pb(a + n, 1, v, len); /* BytesList.value */
    n = pb(b, 1, a, n);            /* Feature.bytes_list */
    size_t m = pb(a, 1, "x", 1);   /* the map entry's key */
    m += pb(a + m, 2, b, n);       /* and value */
    n = pb(b, 1, a, m);            /* Features.feature */
    return pb(out, 1, b, n);       /* Example.features */
}

/* The most values (one record) times the longest value (another) would pad every
 * sample of an 80 KB file to 400 MB: refused, naming the file and the feature. */
TEST(padding_from_two_records_is_bounded)
{
    test_make_dir("tfrecord-pad");
    static uint8_t file[1 << 18], ex[1 << 17];
    size_t at = test_tfrecord_frame(file, ex, bytes_example(ex, 20000, 1));
    at += test_tfrecord_frame(file + at, ex, bytes_example(ex, 1, 20000));
    CHECK(at < 100000);
    table t = read_bytes("pad.tfrecord", file, at, "");
    CHECK_EQ(t.rc, FERRY_EOVERFLOW);
    CHECK_CONTAINS(t.msg, "pad.tfrecord: feature \"x\": 20000 values (record 0) of up to 20000 "
                          "bytes (in record 1)");
    CHECK_CONTAINS(t.msg, "far over the 20000 of its fullest record");
    table_free(&t);
    /* small padding: read as before */
    at = test_tfrecord_frame(file, ex, bytes_example(ex, 30, 10));
    at += test_tfrecord_frame(file + at, ex, bytes_example(ex, 1, 40));
    t = read_bytes("small.tfrecord", file, at, "");
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 2);
    table_free(&t);
    test_remove_dir();
}

TEST(bad_framing)
{
    test_make_dir("tfrecord-bad");
    uint8_t f[1024], ex[256];
    size_t n = example(ex, 1, "ab"), a = test_tfrecord_frame(f, ex, n),
           b = a + test_tfrecord_frame(f + a, ex, n);
    /* a data CRC mismatch in record 1: map-style and stream both say where */
    f[a + 20] ^= 1;
    table t = read_bytes("crc.tfrecord", f, b, ",raw=1");
    CHECK_EQ(t.n, 1);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    char want[128];
    snprintf(want, sizeof want, "crc.tfrecord: record 1 at offset %zu: data CRC mismatch", a);
    CHECK_CONTAINS(t.msg, want);
    table_free(&t);
    t = read_bytes("crc2.tfrecord", f, b, ",raw=1,stream=1,max=64");
    CHECK_EQ(t.n, 1);
    CHECK_CONTAINS(t.msg, "record 1 at offset");
    CHECK_CONTAINS(t.msg, "data CRC mismatch");
    table_free(&t);
    f[a + 20] ^= 1;
    /* a length CRC mismatch: found when the index is built */
    f[a + 9] ^= 1;
    t = read_bytes("lcrc.tfrecord", f, b, ",raw=1");
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    snprintf(want, sizeof want, "lcrc.tfrecord: record 1 at offset %zu: length CRC mismatch", a);
    CHECK_CONTAINS(t.msg, want);
    f[a + 9] ^= 1;
    /* truncated: in the data, and in the header */
    t = read_bytes("trunc.tfrecord", f, b - 5, ",raw=1");
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "record 1 at offset");
    CHECK_CONTAINS(t.msg, "truncated");
    t = read_bytes("trunc2.tfrecord", f, b - 5, ",raw=1,stream=1,max=64");
    CHECK_EQ(t.n, 1);
    CHECK_CONTAINS(t.msg, "truncated");
    CHECK_CONTAINS(t.msg, "the rest of the file is not read");
    table_free(&t);
    t = read_bytes("trunc3.tfrecord", f, a + 7, ",raw=1,stream=1,max=64");
    CHECK_CONTAINS(t.msg, "truncated header (7 of 12 bytes)");
    table_free(&t);
    /* a length near 2^64 with a valid length CRC */
    uint8_t h[16];
    uint64_t huge = UINT64_MAX - 3;
    memcpy(h, &huge, 8);
    uint32_t c = test_tfrecord_mask(ferry_crc32c(0, h, 8));
    memcpy(h + 8, &c, 4);
    memcpy(f + a, h, 12);
    t = read_bytes("huge.tfrecord", f, b, ",raw=1");
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "record 1 at offset");
    CHECK_CONTAINS(t.msg, "length 18446744073709551612 is over the limit");
    t = read_bytes("huge2.tfrecord", f, b, ",raw=1,stream=1,max=64");
    CHECK_EQ(t.n, 1);
    CHECK_CONTAINS(t.msg, "is over the limit");
    table_free(&t);
    /* a gzip file cut short */
    test_remove_dir();
}

/* A record holding these protobuf bytes, decoded with schema x:f32. */
static void bad_proto(const char *name, const uint8_t *pb, size_t n, const char *want)
{
    uint8_t f[512];
    size_t at = test_tfrecord_frame(f, pb, n);
    table t = read_bytes(name, f, at, ",features=x:f32");
    CHECK_EQ(t.n, 0);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "record 0 at offset 0: ");
    CHECK_CONTAINS(t.msg, "protobuf: ");
    CHECK_CONTAINS(t.msg, want);
    table_free(&t);
}

TEST(bad_protobuf)
{
    test_make_dir("tfrecord-proto");
    /* a varint over 10 bytes */
    static const uint8_t v[] = {0x0a, 0x0c, 0x0a, 0x0a, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    bad_proto("varint.tfrecord", v, sizeof v, "bad varint");
    /* a varint that runs off the end */
    static const uint8_t v2[] = {0x0a, 0x02, 0x0a, 0x80};
    bad_proto("varint2.tfrecord", v2, sizeof v2, "varint runs past its message");
    /* wire type 7 */
    static const uint8_t w[] = {0x0f};
    bad_proto("wire.tfrecord", w, sizeof w, "wire type 7 (bad)");
    /* a group (wire type 3) */
    static const uint8_t g[] = {0x0b};
    bad_proto("group.tfrecord", g, sizeof g, "wire type 3 (groups");
    /* a nested length past its enclosing message: Features says 5, entry says 100 */
    static const uint8_t l[] = {0x0a, 0x05, 0x0a, 0x64, 0x0a, 0x01, 'x'};
    bad_proto("len.tfrecord", l, sizeof l, "length 100 at byte 3 runs past its message");
    /* packed floats of 3 bytes */
    static const uint8_t p[] = {0x0a, 0x0e, 0x0a, 0x0c, 0x0a, 0x01, 'x', 0x12,
                                0x07, 0x12, 0x05, 0x0a, 0x03, 1,    2,   3};
    bad_proto("packed.tfrecord", p, sizeof p, "packed floats of 3 bytes");
    test_remove_dir();
}

TEST(bad_gzip)
{
    test_need_shared(TF "/tfx_penguin_eval-00000-of-00001.tfrecord.gz");
    test_make_dir("tfrecord-gz");
    size_t n;
    unsigned char *b = test_read_file(TF "/tfx_penguin_eval-00000-of-00001.tfrecord.gz", &n);
    table t = read_bytes("cut.tfrecord.gz", b, n / 2, "");
    CHECK(t.n < 100);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "cut.tfrecord.gz: the gzip stream ends early");
    table_free(&t);
    b[n / 2] ^= 0x55;
    t = read_bytes("flip.tfrecord.gz", b, n, ",raw=1");
    CHECK(t.n < 100);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "flip.tfrecord.gz");
    table_free(&t);
    free(b);
    test_remove_dir();
}

TEST(zstd_files)
{
    test_need_shared(TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord");
    /* a file compressed with the zstd command: a stream with the records of the plain
     * file; cut short, an error saying so after the records before the cut */
    test_make_dir("tfrecord-zst");
    char path[512], cmd[1400], spec[700];
    test_path("toy.tfrecord.zst", path);
    snprintf(cmd, sizeof cmd, "zstd -q -f -c '%s' > '%s'",
             TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord", path);
    if (system(cmd) != 0)
        SKIP("no zstd command");
    snprintf(spec, sizeof spec, "tfrecord:%s", path);
    table t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    check_toy(&t, 0, 3);
    table_free(&t);
    snprintf(spec, sizeof spec, "tfrecord:%s,raw=1", path);
    table a = read_source(spec, 0, 1, 0);
    table b =
        read_source("tfrecord:" TF "/ydf_toy_uncompressed-00000-of-00002.tfrecord,raw=1", 0, 1, 0);
    CHECK_EQ(a.n, 3);
    CHECK_EQ(b.n, 3);
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ(a.rows[i].len[0], b.rows[i].len[0]);
        CHECK(!memcmp(a.rows[i].data[0], b.rows[i].data[0], (size_t)a.rows[i].len[0]));
    }
    table_free(&a);
    table_free(&b);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_tfrecord(&ds, path, NULL), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "toy.tfrecord.zst: zstd-compressed");
    size_t n;
    unsigned char *z = test_read_file(path, &n);
    t = read_bytes("cut.tfrecord.zst", z, n - 6, ",raw=1");
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "cut.tfrecord.zst: the zstd stream ends early");
    table_free(&t);
    free(z);
    test_remove_dir();
}

TEST(loader_workers)
{
    test_need_shared(TF "/tfx_penguin_eval-00000-of-00001.tfrecord.gz");
    /* the same samples whatever the workers: a stream over both gzip splits */
    int64_t sum0, sum2;
    const char *spec = "tfrecord:" TF "/tfx_penguin_*.tfrecord.gz";
    CHECK_U64(loader_sum(spec, 0, 7, "species", &sum0), 334);
    CHECK_U64(loader_sum(spec, 2, 7, "species", &sum2), 334);
    CHECK_EQ(sum0, sum2);
    table t = read_source(spec, 0, 1, 0);
    int64_t want = 0;
    for (size_t i = 0; i < t.n; i++)
        want += i64(&t, i, "species", 0);
    CHECK_EQ(sum0, want);
    table_free(&t);
    /* map-style over the uncompressed toy shards, shuffled, 2 workers */
    CHECK_U64(loader_sum("tfrecord:" TF "/ydf_toy_uncompressed-0000*", 2, 3, "Bool_1", &sum2), 4);
    CHECK_EQ(sum2, 2);
}

TEST(gzip_members)
{
    /* two gzip members one after the other (cat a.gz b.gz) are one stream */
    test_make_dir("tfrecord-members");
    uint8_t f[1024], ex[256];
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        char text[8];
        snprintf(text, sizeof text, "m%d", i);
        at += test_tfrecord_frame(f + at, ex, example(ex, (float)i, text));
    }
    char a[512], b[512], both[512];
    test_path("a.gz", a);
    test_path("b.gz", b);
    gzFile g = gzopen(a, "wb");
    CHECK(g && gzwrite(g, f, (unsigned)at) == (int)at && gzclose(g) == Z_OK);
    g = gzopen(b, "wb");
    CHECK(g && gzwrite(g, f, (unsigned)at) == (int)at && gzclose(g) == Z_OK);
    size_t na, nb;
    unsigned char *pa = test_read_file(a, &na), *pb = test_read_file(b, &nb);
    unsigned char *cat = malloc(na + nb + 8);
    memcpy(cat, pa, na);
    memcpy(cat + na, pb, nb);
    test_write_file(test_path("both.tfrecord.gz", both), cat, na + nb);
    char spec[600];
    snprintf(spec, sizeof spec, "tfrecord:%s", both);
    table t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 6);
    CHECK(!strcmp(str(&t, 5, "s", 0), "m2"));
    table_free(&t);
    /* bytes that are not gzip after the last member */
    memcpy(cat + na + nb, "garbage!", 8);
    test_write_file(both, cat, na + nb + 8);
    snprintf(spec, sizeof spec, "tfrecord:%s,raw=1,max=64", both); /* no inference at open */
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 6);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "bytes that are not gzip after the gzip stream");
    table_free(&t);
    free(pa);
    free(pb);
    free(cat);
    test_remove_dir();
}

TEST(large_raw_records)
{
    /* records of 16 KiB and more go straight into the sample: the same checks */
    test_make_dir("tfrecord-large");
    size_t rec = 20000, at = 0;
    uint8_t *f = malloc(3 * (rec + 16)), *d = malloc(rec);
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < rec; i++)
            d[i] = (uint8_t)(i * 31 + (size_t)r);
        at += test_tfrecord_frame(f + at, d, rec);
    }
    char path[512], spec[600];
    test_write_file(test_path("big.tfrecord", path), f, at);
    snprintf(spec, sizeof spec, "tfrecord:%s,raw=1", path);
    table t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 3);
    for (int r = 0; r < 3; r++) {
        CHECK_EQ(t.rows[r].len[0], (int64_t)rec);
        CHECK_EQ(t.rows[r].data[0][rec - 1], (uint8_t)((rec - 1) * 31 + (size_t)r));
    }
    table_free(&t);
    /* a flipped data byte in record 2 */
    f[2 * (rec + 16) + 12 + 777] ^= 4;
    test_write_file(path, f, at);
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 2);
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    char want[128];
    snprintf(want, sizeof want, "big.tfrecord: record 2 at offset %zu: data CRC mismatch",
             2 * (rec + 16));
    CHECK_CONTAINS(t.msg, want);
    table_free(&t);
    /* a stream reads them straight from the file too; a bad data CRC spoils its
     * record only, and the stream goes on after it */
    snprintf(spec, sizeof spec, "tfrecord:%s,raw=1,stream=1,max=%zu", path, rec);
    {
        ferry_dataset *none;
        ferry_stream *st;
        CHECK_OK(ferry_source_open(spec, &none, &st));
        ferry_stream_iter *it;
        CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
        ferry_ctx *c;
        CHECK_OK(ferry_ctx_create(&c, 0, 0));
        uint8_t *b = malloc(rec);
        void *pp[1] = {b};
        int64_t ll[1];
        ferry_sample smp = {1, pp, ll, {0}};
        CHECK_OK(ferry_stream_next(it, &smp, c));
        CHECK_EQ(ll[0], (int64_t)rec);
        CHECK_EQ(b[rec - 1], (uint8_t)((rec - 1) * 31));
        CHECK_OK(ferry_stream_next(it, &smp, c));
        CHECK_EQ(b[5], (uint8_t)(5 * 31 + 1));
        CHECK_RC(ferry_stream_next(it, &smp, c), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), want);
        CHECK_RC(ferry_stream_next(it, &smp, c), FERRY_END);
        free(b);
        ferry_ctx_free(c);
        ferry_stream_close(it);
        ferry_stream_free(st);
    }
    snprintf(spec, sizeof spec, "tfrecord:%s,raw=1", path);
    /* the file cut after it was indexed */
    f[2 * (rec + 16) + 12 + 777] ^= 4;
    test_write_file(path, f, at);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK(truncate(path, (off_t)(at - 100)) == 0);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    uint8_t *buf = malloc(rec);
    void *ptr[1] = {buf};
    int64_t len[1];
    ferry_sample s = {1, ptr, len, {0}};
    CHECK_OK(ferry_dataset_get(ds, 1, &s, ctx));
    CHECK_RC(ferry_dataset_get(ds, 2, &s, ctx), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "record 2 at offset");
    CHECK_CONTAINS(ferry_last_errmsg(), "shorter than when it was indexed");
    free(buf);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    free(f);
    free(d);
    test_remove_dir();
}

/* A feature key that is not UTF-8 cannot be a field's name: refused, naming the
 * file and the key. */
TEST(feature_names_that_are_not_utf8)
{
    test_make_dir("tfrecord-names");
    static uint8_t file[4096], ex[1024], a[512], b[512];
    size_t n = pb(a, 1, "v", 1);     /* BytesList.value */
    n = pb(b, 1, a, n);              /* Feature.bytes_list */
    size_t m = pb(a, 1, "k\xe9", 2); /* the map entry's key, latin-1 */
    m += pb(a + m, 2, b, n);
    n = pb(b, 1, a, m);
    size_t at = test_tfrecord_frame(file, ex, pb(ex, 1, b, n));
    table t = read_bytes("latin.tfrecord", file, at, "");
    CHECK_EQ(t.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(t.msg, "latin.tfrecord: record 0 at offset 0: feature name \"k\\xe9\" is not "
                          "UTF-8");
    table_free(&t);
    test_remove_dir();
}

/* A declared bound far over memory: the loader's budget refusal and ferry head's
 * failed allocation name the source and the feature. */
TEST(memory_refusals_name_the_file_and_feature)
{
    test_make_dir("tfrecord-oom");
    static uint8_t file[4096], ex[1024];
    char path[512], args[1200], out[4096];
    size_t at = test_tfrecord_frame(file, ex, bytes_example(ex, 2, 3));
    test_write_file(test_path("big.tfrecord", path), file, at);
    snprintf(args, sizeof args, "bench 'tfrecord:%s,features=x:bytes:100000x1000' --batch 1000",
             path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "big.tfrecord: loader: field \"x\"");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* 9.3 GiB a sample under a 2 GiB address space */
    snprintf(args, sizeof args,
             "--version >/dev/null && ulimit -v 2000000 && " TEST_FERRY_CLI
             " head 'tfrecord:%s,features=x:bytes:100000x100000'",
             path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 1);
    CHECK_CONTAINS(out, "big.tfrecord,features=x:bytes:100000x100000: out of memory for a "
                        "sample of 10000000000 bytes (field \"x\": 10000000000)");
#endif
    test_remove_dir();
}
