/*
 * LMDB and Caffe Datum: the Datum decoder on hand-built protobuf bytes (every
 * error path with its message), the lmdb dataset over real Caffe LMDBs (checked
 * against mdb_dump and a Python reader), named sub-databases, damaged and
 * truncated files, allocation failures, the loader over it, and the writer (read
 * back by ferry and by python3-lmdb).
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/lmdb.h>
#include "core/internal.h"
#include "datasets/spec.h"

#include <ctype.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LMDB_DIR FERRY_SHARED_DIR "/testdata/lmdb"
#define DIR380 LMDB_DIR "/caffe_imageset_32x32_n380"
#define DB380 DIR380 "/data.mdb"
#define DB256 LMDB_DIR "/caffe_imageset_256x256_n8/data.mdb"
#define DBNAMED LMDB_DIR "/lmdbgo_named_db/data.mdb"
#define PY "/usr/bin/python3"
#define FNV0 0xcbf29ce484222325ull

static void need_shared(void)
{
    test_need_shared(DB380);
    test_need_shared(DB256);
    test_need_shared(DBNAMED);
}

static int have_python_lmdb(void)
{
    return access(PY, X_OK) == 0 && system(PY " -c 'import lmdb' >/dev/null 2>&1") == 0;
}

static ferry_dataset *open_lmdb(const char *path, const char *db, int datum, uint64_t max_len)
{
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    o.path = path;
    o.db = db;
    o.datum = datum;
    if (max_len)
        o.max_len = max_len;
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_lmdb(&ds, &o));
    return ds;
}

static int try_open(const char *path, const char *db, int datum)
{
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    o.path = path;
    o.db = db;
    o.datum = datum;
    ferry_dataset *ds = NULL;
    int rc = ferry_dataset_lmdb(&ds, &o);
    CHECK(rc != 0 || ds != NULL);
    ferry_dataset_free(ds);
    return rc;
}

static int open_spec(ferry_dataset **ds, const char *text)
{
    ferry__spec s;
    int rc = ferry__spec_parse(&s, text);
    if (rc < 0)
        return rc;
    return ferry__lmdb_open_spec(ds, NULL, &s);
}

/* One sample's buffers for calling ferry_dataset_get by hand. */
typedef struct sbuf {
    void *p[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s;
    ferry_ctx *ctx;
} sbuf;

static void sbuf_init(sbuf *b, const ferry_dataset *ds)
{
    memset(b, 0, sizeof *b);
    b->s.nfields = ferry_dataset_nfields(ds);
    for (int f = 0; f < b->s.nfields; f++) {
        b->p[f] = calloc(1, ferry_field_nbytes(ferry_dataset_field(ds, f)) + 8);
        CHECK(b->p[f] != NULL);
    }
    b->s.data = b->p;
    b->s.length = b->len;
    CHECK_OK(ferry_ctx_create(&b->ctx, 0, 0));
}

static int sbuf_get(sbuf *b, ferry_dataset *ds, uint64_t i)
{
    for (int f = 0; f < FERRY_MAX_FIELDS; f++)
        b->len[f] = -1;
    return ferry_dataset_get(ds, i, &b->s, b->ctx);
}

static int64_t sbuf_i64(const sbuf *b, int f)
{
    int64_t v;
    memcpy(&v, b->p[f], sizeof v);
    return v;
}

static void sbuf_free(sbuf *b)
{
    for (int f = 0; f < b->s.nfields; f++)
        free(b->p[f]);
    ferry_ctx_free(b->ctx);
}

static void check_key(const ferry_dataset *ds, uint64_t i, const char *want)
{
    const void *k;
    size_t kl;
    CHECK_OK(ferry_lmdb_entry(ds, i, &k, &kl, NULL, NULL));
    if (kl != strlen(want) || memcmp(k, want, kl))
        test_fail(__FILE__, __LINE__, "entry %llu: key \"%.*s\", want \"%s\"",
                  (unsigned long long)i, (int)kl, (const char *)k, want);
}

/* ---- protobuf bytes by hand ---- */
typedef struct pb {
    uint8_t b[8192];
    size_t n;
} pb;

static void pb_byte(pb *p, uint8_t x)
{
    CHECK(p->n < sizeof p->b);
    p->b[p->n++] = x;
}
static void pb_varint(pb *p, uint64_t v)
{
    while (v >= 0x80) {
        pb_byte(p, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(p, (uint8_t)v);
}
static void pb_tag(pb *p, unsigned field, unsigned wt)
{
    pb_varint(p, (uint64_t)field << 3 | wt);
}
static void pb_int(pb *p, unsigned field, int64_t v)
{
    pb_tag(p, field, 0);
    pb_varint(p, (uint64_t)v);
}
static void pb_bytes(pb *p, unsigned field, const void *d, size_t n)
{
    pb_tag(p, field, 2);
    pb_varint(p, n);
    CHECK(p->n + n <= sizeof p->b);
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void pb_le32(pb *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int k = 0; k < 4; k++)
        pb_byte(p, (uint8_t)(u >> (8 * k)));
}
static void pb_f32(pb *p, unsigned field, float f)
{
    pb_tag(p, field, 5);
    pb_le32(p, f);
}
static void pb_packed(pb *p, unsigned field, const float *f, size_t n)
{
    pb_tag(p, field, 2);
    pb_varint(p, 4 * n);
    for (size_t i = 0; i < n; i++)
        pb_le32(p, f[i]);
}
static void pb_dims(pb *p, int64_t c, int64_t h, int64_t w)
{
    pb_int(p, 1, c);
    pb_int(p, 2, h);
    pb_int(p, 3, w);
}

#define EXPECT_CORRUPT(p, want)                                                                    \
    do {                                                                                           \
        ferry_datum d_;                                                                            \
        CHECK_RC(ferry_datum_decode((p)->b, (p)->n, &d_), FERRY_ECORRUPT);                         \
        CHECK_CONTAINS(ferry_last_errmsg(), (want));                                               \
    } while (0)

/* ---- the Datum decoder ---- */

TEST(datum_decodes_raw_encoded_and_float_records)
{
    static const uint8_t px[6] = {1, 2, 3, 4, 5, 6};
    pb p = {.n = 0};
    pb_dims(&p, 2, 1, 3);
    pb_bytes(&p, 4, px, 6);
    pb_int(&p, 5, -1); /* sign-extended: 10 bytes */
    pb_int(&p, 7, 0);
    ferry_datum d;
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.channels, 2);
    CHECK_EQ(d.height, 1);
    CHECK_EQ(d.width, 3);
    CHECK_EQ(d.label, -1);
    CHECK_EQ(d.encoded, 0);
    CHECK_EQ(d.data_size, 6);
    CHECK(d.data > p.b && d.data + 6 <= p.b + p.n && !memcmp(d.data, px, 6));
    CHECK_EQ(d.float_count, 0);
    CHECK(d.float_bytes == NULL);

    /* encoded: any bytes, no dimensions needed; a 32-bit negative label */
    static const uint8_t png[10] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
    p.n = 0;
    pb_bytes(&p, 4, png, sizeof png);
    pb_tag(&p, 5, 0);
    pb_varint(&p, 0xFFFFFFFFu);
    pb_int(&p, 7, 1);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.encoded, 1);
    CHECK_EQ(d.label, -1);
    CHECK_EQ(d.data_size, sizeof png);
    CHECK(!memcmp(d.data, png, sizeof png));

    /* floats packed: one run, zero-copy */
    static const float fl[3] = {1.5f, -2.0f, 3.25f};
    p.n = 0;
    pb_dims(&p, 1, 1, 3);
    pb_packed(&p, 6, fl, 3);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.float_count, 3);
    CHECK(d.float_bytes != NULL);
    CHECK_EQ(d.data_size, 0);
    float got[4] = {0, 0, 0, 0};
    CHECK_EQ(ferry_datum_floats(&d, got, 4), 3);
    CHECK(!memcmp(got, fl, sizeof fl));
    CHECK_EQ(ferry_datum_floats(&d, got, 2), 2);

    /* unpacked (as Caffe's protobuf writes them) and mixed with a packed run */
    p.n = 0;
    pb_dims(&p, 1, 1, 4);
    pb_f32(&p, 6, 1.5f);
    pb_int(&p, 5, 9);
    pb_packed(&p, 6, fl + 1, 2);
    pb_f32(&p, 6, 7.0f);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.float_count, 4);
    CHECK(d.float_bytes == NULL);
    CHECK_EQ(d.label, 9);
    memset(got, 0, sizeof got);
    CHECK_EQ(ferry_datum_floats(&d, got, 4), 4);
    CHECK(got[0] == 1.5f && got[1] == -2.0f && got[2] == 3.25f && got[3] == 7.0f);
    memset(got, 0, sizeof got);
    CHECK_EQ(ferry_datum_floats(&d, got, 3), 3);
    CHECK(got[2] == 3.25f && got[3] == 0.0f);
    /* data and floats together: the data decides the size check */
    pb_bytes(&p, 4, px, 4);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.data_size, 4);

    /* unknown fields of every wire type are skipped; the last value of a field wins */
    p.n = 0;
    pb_int(&p, 1, 5);
    pb_int(&p, 9, 123456789);
    pb_tag(&p, 10, 1);
    for (int k = 0; k < 8; k++)
        pb_byte(&p, 0xff);
    pb_bytes(&p, 11, "skip me", 7);
    pb_tag(&p, 12, 5);
    for (int k = 0; k < 4; k++)
        pb_byte(&p, 0xee);
    pb_int(&p, 536870911, 1); /* the largest field number */
    pb_int(&p, 1, 2);
    pb_int(&p, 2, 1);
    pb_int(&p, 3, 2);
    pb_bytes(&p, 4, "zz", 2);
    pb_bytes(&p, 4, px, 4);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.channels, 2);
    CHECK_EQ(d.data_size, 4);
    CHECK(!memcmp(d.data, px, 4));

    /* empty: every field at its default */
    CHECK_OK(ferry_datum_decode(NULL, 0, &d));
    CHECK_EQ(d.channels + d.height + d.width + d.label + d.encoded, 0);
    CHECK(d.data == NULL && d.data_size == 0 && d.float_count == 0);

    /* exactly at the 2^31 element cap (encoded, so no data of that size) */
    p.n = 0;
    pb_dims(&p, 2, 1024, 1048576);
    pb_int(&p, 7, 1);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    CHECK_EQ(d.width, 1048576);
    CHECK_RC(ferry_datum_decode(p.b, p.n, NULL), FERRY_EINVAL);
}

TEST(datum_errors_say_what_and_at_which_byte)
{
    pb p = {.n = 0};
    /* the message of the brief, to the letter */
    pb_dims(&p, 3, 32, 32);
    pb_int(&p, 5, 1);
    pb_int(&p, 7, 0);
    pb_int(&p, 9, 5);
    CHECK_EQ(p.n, 12);
    pb_tag(&p, 4, 2);
    pb_varint(&p, 9000);
    while (p.n < 30)
        pb_byte(&p, 7);
    ferry_datum d;
    CHECK_RC(ferry_datum_decode(p.b, p.n, &d), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(),
                  "datum: byte 12: field 4 length 9000 runs past the end (30 bytes)"));

    p.n = 0; /* a varint cut short */
    pb_byte(&p, 0x08);
    pb_byte(&p, 0x80);
    EXPECT_CORRUPT(&p, "datum: byte 1: varint runs past the end (2 bytes)");
    p.n = 0; /* a tag cut short */
    pb_byte(&p, 0x88);
    EXPECT_CORRUPT(&p, "datum: byte 0: varint runs past the end (1 bytes)");
    p.n = 0; /* 11 bytes */
    pb_byte(&p, 0x08);
    for (int k = 0; k < 10; k++)
        pb_byte(&p, 0x80);
    pb_byte(&p, 0x00);
    EXPECT_CORRUPT(&p, "datum: byte 1: varint longer than 10 bytes");
    p.n = 0; /* 10 bytes, but past 64 bits */
    pb_byte(&p, 0x08);
    for (int k = 0; k < 9; k++)
        pb_byte(&p, 0xff);
    pb_byte(&p, 0x02);
    EXPECT_CORRUPT(&p, "datum: byte 1: varint overflows 64 bits");
    p.n = 0; /* a length varint past the end */
    pb_tag(&p, 11, 2);
    pb_byte(&p, 0xff);
    EXPECT_CORRUPT(&p, "datum: byte 1: varint runs past the end");
    p.n = 0; /* an unknown field's length past the end */
    pb_tag(&p, 11, 2);
    pb_varint(&p, 5);
    pb_byte(&p, 1);
    EXPECT_CORRUPT(&p, "datum: byte 0: field 11 length 5 runs past the end (3 bytes)");
    p.n = 0; /* a huge length must not wrap */
    pb_tag(&p, 4, 2);
    pb_varint(&p, UINT64_MAX);
    EXPECT_CORRUPT(&p, "field 4 length 18446744073709551615 runs past the end");
    p.n = 0;
    pb_tag(&p, 10, 1);
    pb_byte(&p, 1);
    pb_byte(&p, 2);
    EXPECT_CORRUPT(&p, "datum: byte 0: field 10's 8 bytes run past the end (3 bytes)");
    p.n = 0;
    pb_int(&p, 1, 1);
    pb_tag(&p, 6, 5);
    pb_byte(&p, 1);
    EXPECT_CORRUPT(&p, "datum: byte 2: field 6's 4 bytes run past the end (4 bytes)");

    /* wire types */
    p.n = 0;
    pb_int(&p, 4, 1);
    EXPECT_CORRUPT(&p, "datum: byte 0: field 4 (data) has wire type 0, expected 2");
    p.n = 0;
    pb_bytes(&p, 1, "x", 1);
    EXPECT_CORRUPT(&p, "datum: byte 0: field 1 (channels) has wire type 2, expected 0");
    p.n = 0;
    pb_int(&p, 6, 1);
    EXPECT_CORRUPT(&p, "field 6 (float_data) has wire type 0, expected 5 or 2 (packed)");
    p.n = 0;
    pb_f32(&p, 7, 1.0f);
    EXPECT_CORRUPT(&p, "field 7 (encoded) has wire type 5, expected 0");
    for (unsigned wt = 3; wt <= 4; wt++) {
        p.n = 0;
        pb_int(&p, 1, 1);
        pb_tag(&p, 9, wt);
        EXPECT_CORRUPT(&p, wt == 3 ? "datum: byte 2: field 9 has group wire type 3"
                                   : "datum: byte 2: field 9 has group wire type 4");
    }
    for (unsigned wt = 6; wt <= 7; wt++) {
        p.n = 0;
        pb_tag(&p, 9, wt);
        pb_byte(&p, 0);
        EXPECT_CORRUPT(&p, wt == 6 ? "field 9 has invalid wire type 6"
                                   : "field 9 has invalid wire type 7");
    }
    p.n = 0;
    pb_byte(&p, 0x00);
    pb_byte(&p, 0x00);
    EXPECT_CORRUPT(&p, "datum: byte 0: field number 0 is invalid");
    p.n = 0;
    pb_varint(&p, (uint64_t)1 << 35);
    EXPECT_CORRUPT(&p, "datum: byte 0: tag 34359738368 is out of range");

    /* values */
    p.n = 0;
    pb_int(&p, 1, 3);
    pb_int(&p, 2, -32);
    EXPECT_CORRUPT(&p, "datum: byte 2: height -32 is negative");
    p.n = 0;
    pb_int(&p, 5, (int64_t)1 << 40);
    EXPECT_CORRUPT(&p, "datum: byte 0: field 5 (label) value 1099511627776 does not fit in int32");
    p.n = 0;
    pb_dims(&p, 2, 1024, 1048577);
    pb_int(&p, 7, 1);
    EXPECT_CORRUPT(&p, "datum: byte 5: channels*height*width = 2*1024*1048577 is over the 2^31 "
                       "limit");
    p.n = 0; /* overflows 64 bits on the way */
    pb_dims(&p, INT32_MAX, INT32_MAX, INT32_MAX);
    pb_int(&p, 7, 1);
    EXPECT_CORRUPT(&p, "is over the 2^31 limit");
    p.n = 0;
    pb_dims(&p, 3, 2, 2);
    pb_bytes(&p, 4, "abcde", 5);
    EXPECT_CORRUPT(&p, "datum: byte 6: data is 5 bytes, but channels*height*width = 3*2*2 = 12");
    p.n = 0;
    pb_dims(&p, 3, 2, 2);
    EXPECT_CORRUPT(&p, "datum: byte 6: data is 0 bytes, but channels*height*width = 3*2*2 = 12");
    p.n = 0;
    pb_bytes(&p, 4, "abcde", 5);
    EXPECT_CORRUPT(&p, "data is 5 bytes, but channels*height*width = 0*0*0 = 0");
    static const float fl[2] = {1, 2};
    p.n = 0;
    pb_dims(&p, 1, 1, 3);
    pb_packed(&p, 6, fl, 2);
    EXPECT_CORRUPT(&p, "datum: byte 16: float_data has 2 values, but channels*height*width = "
                       "1*1*3 = 3");
    p.n = 0;
    pb_bytes(&p, 6, "abc", 3);
    EXPECT_CORRUPT(&p,
                   "datum: byte 0: field 6 (float_data) packed length 3 is not a multiple of 4");
}

TEST(datum_encode_matches_caffe_and_round_trips)
{
    need_shared();
    ferry_dataset *ds = open_lmdb(DB380, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    const void *v;
    size_t vl;
    CHECK_OK(ferry_lmdb_entry(ds, 0, NULL, NULL, &v, &vl));
    CHECK_EQ(vl, 3085);
    ferry_datum d;
    CHECK_OK(ferry_datum_decode(v, vl, &d));
    size_t need = 0;
    CHECK_RC(ferry_datum_encode(&d, NULL, 0, &need), FERRY_EOVERFLOW);
    CHECK_EQ(need, vl);
    uint8_t *buf = malloc(need);
    size_t size = 0;
    CHECK_OK(ferry_datum_encode(&d, buf, need, &size));
    CHECK_EQ(size, vl);
    CHECK(!memcmp(buf, v, vl)); /* byte for byte what Caffe wrote */
    free(buf);
    ferry_dataset_free(ds);

    /* floats spread over unpacked fields re-encode packed, and read back the same */
    pb p = {.n = 0};
    pb_dims(&p, 1, 2, 2);
    pb_int(&p, 5, -7);
    for (int i = 0; i < 4; i++)
        pb_f32(&p, 6, (float)i * 0.5f - 1.0f);
    CHECK_OK(ferry_datum_decode(p.b, p.n, &d));
    uint8_t out[256];
    CHECK_OK(ferry_datum_encode(&d, out, sizeof out, &size));
    ferry_datum e;
    CHECK_OK(ferry_datum_decode(out, size, &e));
    CHECK(e.float_bytes != NULL);
    CHECK_EQ(e.float_count, 4);
    CHECK_EQ(e.label, -7);
    float a[4], b[4];
    CHECK_EQ(ferry_datum_floats(&d, a, 4), 4);
    CHECK_EQ(ferry_datum_floats(&e, b, 4), 4);
    CHECK(!memcmp(a, b, sizeof a));

    /* what would not decode is refused */
    memset(&d, 0, sizeof d);
    d.channels = -1;
    CHECK_RC(ferry_datum_encode(&d, out, sizeof out, &size), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "channels -1 is negative");
    d.channels = 2;
    d.height = d.width = 2;
    d.data = (const uint8_t *)"abc";
    d.data_size = 3;
    CHECK_RC(ferry_datum_encode(&d, out, sizeof out, &size), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "data is 3 bytes, but channels*height*width = 2*2*2 = 8");
    d.data = NULL;
    CHECK_RC(ferry_datum_encode(&d, out, sizeof out, &size), FERRY_EINVAL);
    d.encoded = 1;
    d.data = (const uint8_t *)"abc";
    CHECK_OK(ferry_datum_encode(&d, out, sizeof out, &size));
    CHECK_OK(ferry_datum_decode(out, size, &e));
    CHECK(e.encoded && e.data_size == 3 && e.channels == 2);
}

/* ---- the real Caffe LMDBs ---- */

TEST(caffe_380_fields_labels_and_keys)
{
    need_shared();
    ferry_dataset *ds = open_lmdb(DB380, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_U64(ferry_dataset_len(ds), 380);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(!strcmp(f->name, "data"));
    CHECK_EQ(f->dtype, FERRY_U8);
    CHECK_EQ(f->ndim, 3);
    CHECK_EQ(f->shape[0], 3);
    CHECK_EQ(f->shape[1], 32);
    CHECK_EQ(f->shape[2], 32);
    CHECK_EQ(f->variable, 0);
    f = ferry_dataset_field(ds, 1);
    CHECK(!strcmp(f->name, "label"));
    CHECK_EQ(f->dtype, FERRY_I64);
    CHECK_EQ(f->ndim, 0);
    CHECK_EQ(ferry_dataset_find_field(ds, "float_data"), -1);
    sbuf b;
    sbuf_init(&b, ds);
    int count[2] = {0, 0};
    for (uint64_t i = 0; i < 380; i++) {
        CHECK_OK(sbuf_get(&b, ds, i));
        int64_t label = sbuf_i64(&b, 1);
        CHECK(label == 0 || label == 1);
        count[label]++;
        const void *k, *pk;
        size_t kl, pkl;
        CHECK_OK(ferry_lmdb_entry(ds, i, &k, &kl, NULL, NULL));
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%08llu_", (unsigned long long)i);
        CHECK(kl > 9 && !memcmp(k, prefix, 9));
        if (i) { /* LMDB's order: increasing keys */
            CHECK_OK(ferry_lmdb_entry(ds, i - 1, &pk, &pkl, NULL, NULL));
            int c = memcmp(pk, k, pkl < kl ? pkl : kl);
            CHECK(c < 0 || (c == 0 && pkl < kl));
        }
    }
    CHECK_EQ(count[1], 325);
    CHECK_EQ(count[0], 55);
    check_key(ds, 0, "00000000_N1806522622_1.png");
    check_key(ds, 379, "00000379_N1806262773_1.png");
    CHECK_RC(ferry_lmdb_entry(ds, 380, NULL, NULL, NULL, NULL), FERRY_ERANGE);
    CHECK_RC(sbuf_get(&b, ds, 380), FERRY_ERANGE);
    sbuf_free(&b);
    ferry_dataset_free(ds);
    ferry_synthetic_opts so = {.count = 3, .bytes = 4};
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    CHECK_RC(ferry_lmdb_entry(ds, 0, NULL, NULL, NULL, NULL), FERRY_EINVAL);
    ferry_dataset_free(ds);
}

TEST(caffe_380_directory_and_spec_write_nothing_beside_it)
{
    need_shared();
    ferry_dataset *ds = NULL;
    CHECK_OK(open_spec(&ds, "lmdb:" DIR380));
    CHECK_U64(ferry_dataset_len(ds), 380);
    check_key(ds, 0, "00000000_N1806522622_1.png");
    ferry_dataset_free(ds);
    CHECK(access(DIR380 "/lock.mdb", F_OK) != 0);
    CHECK(access(DB380 "-lock", F_OK) != 0);
    CHECK_OK(open_spec(&ds, "lmdb:" DB380 ",datum=0,max=4000"));
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "key"));
    CHECK_EQ(ferry_dataset_field(ds, 0)->shape[0], 26); /* the longest key */
    CHECK_EQ(ferry_dataset_field(ds, 1)->shape[0], 4000);
    sbuf b;
    sbuf_init(&b, ds);
    CHECK_OK(sbuf_get(&b, ds, 0));
    CHECK_EQ(b.len[0], 26);
    CHECK_EQ(b.len[1], 3085);
    CHECK(!memcmp(b.p[0], "00000000_N1806522622_1.png", 26));
    sbuf_free(&b);
    ferry_dataset_free(ds);
    CHECK_OK(open_spec(&ds, "lmdb:" DB380 ",datum=0,max=3000"));
    sbuf_init(&b, ds);
    CHECK_RC(sbuf_get(&b, ds, 5), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "data.mdb: entry 5 (key \"00000005_");
    CHECK_CONTAINS(ferry_last_errmsg(), "the value is 3085 bytes, over max 3000");
    sbuf_free(&b);
    ferry_dataset_free(ds);
    CHECK_OK(open_spec(&ds, "lmdb:" DB380 ",datum=1,lock=0"));
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    ferry_dataset_free(ds);
    CHECK_RC(open_spec(&ds, "lmdb:" DB380 ",datum=maybe"), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "datum=\"maybe\" is not auto, 1 or 0");
    CHECK_RC(open_spec(&ds, "lmdb:" DB380 ",colour=red"), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "unknown option \"colour\"");
    CHECK_RC(open_spec(&ds, "lmdb:" DB380 ",max=0"), FERRY_EINVAL);
    CHECK_RC(open_spec(&ds, "lmdb:" DB380 ",max=2000000000"), FERRY_EINVAL);
    CHECK_RC(open_spec(&ds, "lmdb:" DB380 ",db="), FERRY_EINVAL);
    CHECK_RC(open_spec(&ds, "lmdb:"), FERRY_EINVAL);
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    CHECK_RC(ferry_dataset_lmdb(&ds, &o), FERRY_EINVAL);
    o.path = DB380;
    o.datum = 7;
    CHECK_RC(ferry_dataset_lmdb(&ds, &o), FERRY_EINVAL);
    o.datum = 0;
    o.max_len = ((uint64_t)1 << 30) + 1;
    CHECK_RC(ferry_dataset_lmdb(&ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "max_len");
}

/* Decodes mdb_dump's print format (-p): "\xx" (two hex digits) is a byte, anything
 * else stands for itself. LMDB 0.9.24's mdb_dump prints a backslash as is (later
 * ones as "\5c"), so a backslash without two hex digits after it is literal; the
 * test data has no backslash followed by two hex digits, so this is unambiguous. */
static size_t unprint(const char *s, uint8_t *out)
{
    size_t n = 0;
    for (; *s && *s != '\n'; s++) {
        unsigned x;
        if (*s == '\\' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2]) &&
            sscanf(s + 1, "%2x", &x) == 1) {
            out[n++] = (uint8_t)x;
            s += 2;
        } else {
            out[n++] = (uint8_t)*s;
        }
    }
    return n;
}

TEST(caffe_380_matches_mdb_dump)
{
    need_shared();
    if (system("command -v mdb_dump >/dev/null 2>&1") != 0)
        SKIP("mdb_dump (lmdb-utils) is not installed");
    /* on a copy: mdb_dump takes LMDB's lock file (DB-lock) beside what it reads */
    test_make_dir("lmdb");
    char copy[512], cmd[1200];
    size_t n;
    uint8_t *bytes = test_read_file(DB380, &n);
    test_write_file(test_path("data.mdb", copy), bytes, n);
    free(bytes);
    snprintf(cmd, sizeof cmd, "mdb_dump -n -p '%s'", copy);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    ferry_dataset *ds = open_lmdb(DB380, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    sbuf b;
    sbuf_init(&b, ds);
    char *line = NULL;
    size_t cap = 0;
    int in_data = 0;
    uint64_t i = 0;
    uint8_t *key = malloc(1 << 16), *val = malloc(1 << 16);
    while (getline(&line, &cap, f) > 0) {
        if (!in_data) {
            in_data = !strcmp(line, "HEADER=END\n");
            continue;
        }
        if (!strcmp(line, "DATA=END\n"))
            break;
        CHECK(line[0] == ' ');
        size_t kl = unprint(line + 1, key);
        CHECK(getline(&line, &cap, f) > 0 && line[0] == ' ');
        size_t vl = unprint(line + 1, val);
        const void *k, *v;
        size_t fkl, fvl;
        CHECK_OK(ferry_lmdb_entry(ds, i, &k, &fkl, &v, &fvl));
        CHECK(fkl == kl && !memcmp(k, key, kl));
        CHECK(fvl == vl && !memcmp(v, val, vl));
        /* what mdb_dump shows, decoded independently of the dataset's copy */
        ferry_datum d;
        CHECK_OK(ferry_datum_decode(val, vl, &d));
        CHECK_OK(sbuf_get(&b, ds, i));
        CHECK_EQ(d.data_size, 3072);
        CHECK(!memcmp(b.p[0], d.data, 3072));
        CHECK_EQ(sbuf_i64(&b, 1), d.label);
        if (i == 0) { /* Caffe's layout: 08 03 10 20 18 20 22 80 18 <3072> 28 L 38 00 */
            static const uint8_t head[9] = {0x08, 0x03, 0x10, 0x20, 0x18, 0x20, 0x22, 0x80, 0x18};
            CHECK(!memcmp(val, head, 9));
            CHECK(!memcmp(b.p[0], val + 9, 3072));
        }
        i++;
    }
    free(line);
    free(key);
    free(val);
    CHECK(pclose(f) == 0);
    CHECK_U64(i, 380);
    sbuf_free(&b);
    ferry_dataset_free(ds);
    test_remove_dir();
}

static const char py_datum[] =
    "import sys, lmdb\n"
    "def varint(b, i):\n"
    "    v = s = 0\n"
    "    while True:\n"
    "        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7\n"
    "        if not c & 0x80: return v, i\n"
    "def datum(b):\n"
    "    i, f = 0, {}\n"
    "    while i < len(b):\n"
    "        t, i = varint(b, i)\n"
    "        if t & 7 == 0: f[t >> 3], i = varint(b, i)\n"
    "        elif t & 7 == 2:\n"
    "            n, i = varint(b, i); f[t >> 3] = b[i:i + n]; i += n\n"
    "        elif t & 7 == 5: i += 4\n"
    "        elif t & 7 == 1: i += 8\n"
    "    return f\n"
    "def fnv(b):\n"
    "    h = 0xcbf29ce484222325\n"
    "    for c in b: h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff\n"
    "    return h\n"
    "env = lmdb.open(sys.argv[1], subdir=False, readonly=True, lock=False)\n"
    "with env.begin() as t:\n"
    "    for k, v in t.cursor():\n"
    "        f = datum(v)\n"
    "        print(k.decode(), f.get(5, 0), f.get(1, 0), f.get(2, 0), f.get(3, 0),\n"
    "              fnv(f.get(4, b'')))\n";

TEST(caffe_380_matches_a_python_reader)
{
    need_shared();
    if (!have_python_lmdb())
        SKIP("python3 with the lmdb module is not available");
    test_make_dir("lmdb");
    char script[512], cmd[1200];
    test_write_file(test_path("datum.py", script), py_datum, sizeof py_datum - 1);
    snprintf(cmd, sizeof cmd, PY " '%s' '%s'", script, DB380);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    ferry_dataset *ds = open_lmdb(DB380, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    sbuf b;
    sbuf_init(&b, ds);
    char line[512], key[256];
    long long label, c, h, w;
    unsigned long long hash;
    uint64_t i = 0;
    while (fgets(line, sizeof line, f)) {
        CHECK(sscanf(line, "%255s %lld %lld %lld %lld %llu", key, &label, &c, &h, &w, &hash) == 6);
        CHECK(c == 3 && h == 32 && w == 32);
        check_key(ds, i, key);
        CHECK_OK(sbuf_get(&b, ds, i));
        CHECK_EQ(sbuf_i64(&b, 1), label);
        CHECK_U64(test_hash(FNV0, b.p[0], 3072), hash);
        i++;
    }
    CHECK(pclose(f) == 0);
    CHECK_U64(i, 380);
    sbuf_free(&b);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(caffe_256_labels_follow_the_file_names)
{
    need_shared();
    ferry_dataset *ds = open_lmdb(DB256, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_U64(ferry_dataset_len(ds), 8);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(f->ndim == 3 && f->shape[0] == 3 && f->shape[1] == 256 && f->shape[2] == 256);
    CHECK_U64(ferry_field_nbytes(f), 196608);
    static const char *keys[8] = {"00000000_c7.jpg",   "00000001_c8.jpeg", "00000002_c9.jpeg",
                                  "00000003_c10.jpeg", "00000004_cr7.png", "00000005_cr8.jpeg",
                                  "00000006_cr9.jpeg", "00000007_cr10.png"};
    sbuf b;
    sbuf_init(&b, ds);
    uint64_t hashes[8];
    for (uint64_t i = 0; i < 8; i++) {
        check_key(ds, i, keys[i]);
        CHECK_OK(sbuf_get(&b, ds, i));
        CHECK_EQ(sbuf_i64(&b, 1), strstr(keys[i], "_cr") ? 1 : 0);
        const void *v;
        size_t vl;
        CHECK_OK(ferry_lmdb_entry(ds, i, NULL, NULL, &v, &vl));
        CHECK_EQ(vl, 196624);
        CHECK(!memcmp(b.p[0], (const uint8_t *)v + 12, 196608)); /* after 08 03 10 80 02 ... */
        hashes[i] = test_hash(FNV0, b.p[0], 196608);
        for (uint64_t j = 0; j < i; j++)
            CHECK(hashes[j] != hashes[i]); /* eight different images */
    }
    sbuf_free(&b);
    ferry_dataset_free(ds);
}

TEST(named_sub_databases)
{
    need_shared();
    ferry_dataset *ds = NULL;
    for (int datum = 0; datum <= 2; datum++) {
        CHECK_RC(try_open(DBNAMED, NULL, datum), FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "lmdbgo_named_db/data.mdb: the main database holds 1 "
                                            "named sub-database (dbnew), not values: open one "
                                            "with db=NAME");
    }
    ds = open_lmdb(DBNAMED, "dbnew", FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_U64(ferry_dataset_len(ds), 1);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "key"));
    CHECK(!strcmp(ferry_dataset_field(ds, 1)->name, "value"));
    CHECK_EQ(ferry_dataset_field(ds, 0)->shape[0], 5);
    sbuf b;
    sbuf_init(&b, ds);
    CHECK_OK(sbuf_get(&b, ds, 0));
    CHECK(b.len[0] == 5 && !memcmp(b.p[0], "hello", 5));
    CHECK(b.len[1] == 6 && !memcmp(b.p[1], "world!", 6));
    sbuf_free(&b);
    ferry_dataset_free(ds);
    CHECK_RC(try_open(DBNAMED, "dbnew", FERRY_LMDB_DATUM_ON), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "lmdbgo_named_db/data.mdb: entry 0 (key \"hello\") is not a Caffe Datum: datum: "
                   "byte 0:");
    CHECK_RC(try_open(DBNAMED, "nosuch", FERRY_LMDB_DATUM_AUTO), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "no sub-database \"nosuch\" (sub-databases: dbnew)");
    CHECK_RC(try_open(DB380, "dbnew", FERRY_LMDB_DATUM_AUTO), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "(sub-databases: none)");
    CHECK_OK(open_spec(&ds, "lmdb:" DBNAMED ",db=dbnew,datum=0"));
    CHECK_U64(ferry_dataset_len(ds), 1);
    ferry_dataset_free(ds);
}

TEST(not_an_lmdb_missing_and_empty_files)
{
    need_shared();
    test_make_dir("lmdb");
    char p[512], text[3 * 4096 + 1];
    for (size_t i = 0; i < sizeof text - 1; i++)
        text[i] = (char)('a' + i % 26);
    CHECK(mkdir(test_path("caffe_lmdb", p), 0755) == 0);
    test_write_file(test_path("caffe_lmdb/data.mdb", p), text, sizeof text - 1);
    CHECK_RC(try_open(p, NULL, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "caffe_lmdb/data.mdb: MDB_INVALID: File is not an LMDB file");
    CHECK_RC(try_open(test_path("caffe_lmdb", p), NULL, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "caffe_lmdb: MDB_INVALID");
    CHECK(access(test_path("caffe_lmdb/lock.mdb", p), F_OK) != 0);
    test_write_file(test_path("tiny", p), "xyz", 3);
    CHECK(try_open(p, NULL, 0) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "tiny: ");
    test_write_file(test_path("empty", p), "", 0);
    CHECK(try_open(p, NULL, 0) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "empty: ");
    CHECK_RC(try_open(test_path("nothing-here", p), NULL, 0), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "nothing-here: No such file or directory");
    CHECK(mkdir(test_path("emptydir", p), 0755) == 0);
    CHECK(try_open(p, NULL, 0) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "emptydir: ");
    CHECK_RC(try_open("/dev/null", NULL, 0), FERRY_EINVAL);
    test_remove_dir();
}

TEST(truncated_copies_fail_or_read_cleanly)
{
    need_shared();
    test_make_dir("lmdb");
    size_t n;
    uint8_t *all = test_read_file(DB380, &n);
    CHECK_EQ(n, 2097152);
    const size_t used = 388 * 4096; /* last page 387 */
    static const size_t cuts[] = {0,           1,       100,     4095,    4096,    8191,
                                  8192,        12288,   65536,   99999,   1000000, 1589248 - 4096,
                                  1589248 - 1, 1589248, 1589249, 2097151, 2097152};
    char p[512];
    test_path("cut.mdb", p);
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        test_write_file(p, all, cuts[c]);
        ferry_lmdb_opts o;
        ferry_lmdb_opts_default(&o);
        o.path = p;
        ferry_dataset *ds = NULL;
        int rc = ferry_dataset_lmdb(&ds, &o);
        if (cuts[c] < used) {
            if (rc == 0)
                test_fail(__FILE__, __LINE__, "a copy cut at %zu opened", cuts[c]);
            CHECK_CONTAINS(ferry_last_errmsg(), "cut.mdb: ");
            if (cuts[c] >= 8192)
                CHECK_CONTAINS(ferry_last_errmsg(), "holds 388 pages of 4096 bytes (truncated?)");
            continue;
        }
        CHECK_OK(rc);
        CHECK_U64(ferry_dataset_len(ds), 380);
        sbuf b;
        sbuf_init(&b, ds);
        for (uint64_t i = 0; i < 380; i++)
            CHECK_OK(sbuf_get(&b, ds, i));
        sbuf_free(&b);
        ferry_dataset_free(ds);
    }
    /* both meta pages wiped: not an LMDB any more */
    memset(all, 0, 8192);
    test_write_file(p, all, n);
    CHECK_RC(try_open(p, NULL, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "MDB_INVALID");
    free(all);
    test_remove_dir();
}

TEST(allocation_failures_are_reported)
{
    need_shared();
    const char *paths[3] = {DB380, DB256, DBNAMED};
    for (int k = 0; k < 3; k++) {
        int done = 0;
        for (long n = 0; n < 200 && !done; n++) {
            ferry_lmdb_opts o;
            ferry_lmdb_opts_default(&o);
            o.path = paths[k];
            ferry_dataset *ds = NULL;
            ferry__test_fail_alloc(n);
            int rc = ferry_dataset_lmdb(&ds, &o);
            ferry__test_fail_alloc(-1);
            if (rc == FERRY_ENOMEM)
                continue;
            if (k == 2) {
                CHECK_RC(rc, FERRY_EINVAL); /* the sub-database refusal, once memory allows */
                done = 1;
                continue;
            }
            CHECK_OK(rc);
            CHECK_U64(ferry_dataset_len(ds), k == 0 ? 380 : 8);
            ferry_dataset_free(ds);
            done = 1;
        }
        CHECK(done);
    }
}

TEST(loader_with_two_shuffling_workers_delivers_every_entry_once)
{
    need_shared();
    ferry_dataset *ds = open_lmdb(DB380, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    uint64_t want[380];
    sbuf b;
    sbuf_init(&b, ds);
    for (uint64_t i = 0; i < 380; i++) {
        CHECK_OK(sbuf_get(&b, ds, i));
        want[i] = test_hash(FNV0, b.p[0], 3072) ^ (uint64_t)sbuf_i64(&b, 1);
    }
    sbuf_free(&b);
    ferry_loader_opts o = test_loader_opts(32, 2);
    o.shuffle = 1;
    o.seed = 11;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    int seen[380];
    memset(seen, 0, sizeof seen);
    uint64_t total = 0, ones = 0, in_order = 0;
    ferry_batch *batch;
    int rc;
    while ((rc = ferry_loader_next(l, &batch)) == 0) {
        ferry_tensor data, label;
        CHECK_OK(ferry_batch_field(batch, 0, &data));
        CHECK_OK(ferry_batch_field(batch, 1, &label));
        const uint64_t *idx = ferry_batch_indices(batch);
        for (uint32_t s = 0; s < ferry_batch_size(batch); s++) {
            CHECK(idx[s] < 380);
            seen[idx[s]]++;
            int64_t lab = ((const int64_t *)label.data)[s];
            ones += lab == 1;
            CHECK_U64(test_hash(FNV0, (const uint8_t *)data.data + (size_t)s * 3072, 3072) ^
                          (uint64_t)lab,
                      want[idx[s]]);
            in_order += idx[s] == total;
            total++;
        }
        ferry_batch_release(batch);
    }
    CHECK_RC(rc, FERRY_END);
    CHECK_U64(total, 380);
    CHECK_U64(ones, 325);
    CHECK(in_order < 380); /* shuffled */
    for (int i = 0; i < 380; i++)
        CHECK_EQ(seen[i], 1);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* ---- the writer ---- */

static uint64_t fnv_all(ferry_dataset *ds)
{
    uint64_t h = FNV0;
    for (uint64_t i = 0; i < ferry_dataset_len(ds); i++) {
        const void *k, *v;
        size_t kl, vl;
        CHECK_OK(ferry_lmdb_entry(ds, i, &k, &kl, &v, &vl));
        h = test_hash(test_hash(h, k, kl), v, vl);
    }
    return h;
}

static void value_of(uint64_t i, uint8_t *v, size_t *n)
{
    *n = (size_t)(i * 7 % 301);
    for (size_t j = 0; j < *n; j++)
        v[j] = (uint8_t)(i * 31 + j * 17);
}

static ferry_lmdb_writer *writer_at(const char *path, uint32_t every, uint64_t map_size, int append,
                                    const char *db)
{
    ferry_lmdb_writer_opts o;
    ferry_lmdb_writer_opts_default(&o);
    o.path = path;
    o.commit_every = every;
    o.map_size = map_size;
    o.append = append;
    o.db = db;
    ferry_lmdb_writer *w;
    CHECK_OK(ferry_lmdb_writer_open(&w, &o));
    return w;
}

static const char py_fnv[] =
    "import sys, lmdb\n"
    "h, n = 0xcbf29ce484222325, 0\n"
    "env = lmdb.open(sys.argv[1], readonly=True, lock=False)\n"
    "with env.begin() as t:\n"
    "    for k, v in t.cursor():\n"
    "        for c in bytes(k) + bytes(v): h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff\n"
    "        n += 1\n"
    "print(n, h)\n";

TEST(writer_round_trip_abort_crash_and_python)
{
    test_make_dir("lmdb");
    char p[512], key[32];
    uint8_t v[512];
    size_t vl;
    test_path("db", p);
    ferry_lmdb_writer *w = writer_at(p, 500, 0, 0, NULL);
    const uint64_t N = 3000;
    uint64_t h = FNV0;
    for (uint64_t i = 0; i < N; i++) {
        /* written out of order: LMDB sorts */
        uint64_t j = (i * 1237) % N;
        snprintf(key, sizeof key, "k%06llu", (unsigned long long)j);
        value_of(j, v, &vl);
        CHECK_OK(ferry_lmdb_writer_put(w, key, strlen(key), v, vl));
    }
    CHECK_U64(ferry_lmdb_writer_committed(w), N);
    CHECK_U64(ferry_lmdb_writer_pending(w), 0);
    CHECK_OK(ferry_lmdb_writer_commit(w)); /* nothing pending: nothing to do */
    CHECK_RC(ferry_lmdb_writer_put(w, "", 0, "x", 1), FERRY_EINVAL);
    char big[600];
    memset(big, 'k', sizeof big);
    CHECK_RC(ferry_lmdb_writer_put(w, big, 512, "x", 1), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "a key of 512 bytes is outside LMDB's [1, 511]");
    CHECK_OK(ferry_lmdb_writer_put(w, big, 511, "x", 1)); /* pending */
    ferry_lmdb_writer_abort(w);
    for (int i = 0; i < 5; i++) { /* pending at free: dropped too */
        snprintf(key, sizeof key, "z%d", i);
        CHECK_OK(ferry_lmdb_writer_put(w, key, strlen(key), "y", 1));
    }
    CHECK_U64(ferry_lmdb_writer_pending(w), 5);
    ferry_lmdb_writer_free(w);
    ferry_lmdb_writer_free(NULL);
    for (uint64_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k%06llu", (unsigned long long)i);
        value_of(i, v, &vl);
        h = test_hash(test_hash(h, key, strlen(key)), v, vl);
    }
    ferry_dataset *ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 512);
    CHECK_U64(ferry_dataset_len(ds), N);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "key")); /* values are not Datums */
    CHECK_U64(fnv_all(ds), h);
    sbuf b;
    sbuf_init(&b, ds);
    for (uint64_t i = 0; i < N; i += 97) {
        CHECK_OK(sbuf_get(&b, ds, i));
        snprintf(key, sizeof key, "k%06llu", (unsigned long long)i);
        value_of(i, v, &vl);
        CHECK(b.len[0] == 7 && !memcmp(b.p[0], key, 7));
        CHECK(b.len[1] == (int64_t)vl && !memcmp(b.p[1], v, vl));
    }
    sbuf_free(&b);
    ferry_dataset_free(ds);

    if (have_python_lmdb()) {
        char script[512], cmd[1200], line[128];
        test_write_file(test_path("fnv.py", script), py_fnv, sizeof py_fnv - 1);
        snprintf(cmd, sizeof cmd, PY " '%s' '%s'", script, p);
        FILE *f = popen(cmd, "r");
        CHECK(f != NULL);
        CHECK(fgets(line, sizeof line, f) != NULL);
        CHECK(pclose(f) == 0);
        unsigned long long n, ph;
        CHECK(sscanf(line, "%llu %llu", &n, &ph) == 2);
        CHECK_U64(n, N);
        CHECK_U64(ph, h);
    } else {
        printf("python3-lmdb is not available: skipping the cross-check\n");
    }

    /* a writer that dies between commits leaves the last committed state */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        ferry_lmdb_writer_opts o;
        ferry_lmdb_writer_opts_default(&o);
        o.path = p;
        o.commit_every = 1000;
        ferry_lmdb_writer *cw;
        if (ferry_lmdb_writer_open(&cw, &o) != 0)
            _exit(1);
        for (int i = 0; i < 150; i++) {
            snprintf(key, sizeof key, "c%04d", i);
            if (ferry_lmdb_writer_put(cw, key, strlen(key), key, strlen(key)) != 0)
                _exit(2);
            if (i == 99 && ferry_lmdb_writer_commit(cw) != 0)
                _exit(3);
        }
        _exit(0); /* 50 puts never committed, the environment never closed */
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_OFF, 512);
    CHECK_U64(ferry_dataset_len(ds), N + 100);
    check_key(ds, 0, "c0000");
    check_key(ds, 99, "c0099");
    check_key(ds, 100, "k000000");
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(writer_append_named_db_and_full_map)
{
    test_make_dir("lmdb");
    char p[512];
    ferry_lmdb_writer *w = writer_at(test_path("app", p), 2, 0, 1, NULL);
    CHECK_OK(ferry_lmdb_writer_put(w, "b", 1, "1", 1));
    CHECK_RC(ferry_lmdb_writer_put(w, "a", 1, "2", 1), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "key \"a\" is not after the previous key (append)");
    CHECK_RC(ferry_lmdb_writer_put(w, "b", 1, "2", 1), FERRY_EINVAL);
    CHECK_OK(ferry_lmdb_writer_put(w, "c", 1, "3", 1)); /* the transaction went on */
    CHECK_U64(ferry_lmdb_writer_committed(w), 2);
    CHECK_OK(ferry_lmdb_writer_put(w, "d\x01", 2, "4", 1));
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    ferry_dataset *ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_OFF, 16);
    CHECK_U64(ferry_dataset_len(ds), 3);
    check_key(ds, 0, "b");
    check_key(ds, 1, "c");
    ferry_dataset_free(ds);

    /* a named database: the main DB then refuses to be read as values */
    w = writer_at(test_path("named", p), 0, 0, 0, "imgs");
    CHECK_OK(ferry_lmdb_writer_put(w, "x", 1, "y", 1));
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    ds = open_lmdb(p, "imgs", FERRY_LMDB_DATUM_OFF, 16);
    CHECK_U64(ferry_dataset_len(ds), 1);
    ferry_dataset_free(ds);
    CHECK_RC(try_open(p, NULL, 0), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "sub-database (imgs)");

    /* the map fills: the pending puts are dropped, what was committed stays */
    w = writer_at(test_path("full", p), 4, 1 << 20, 0, NULL);
    static uint8_t chunk[60000];
    int rc = 0, i;
    char key[16];
    for (i = 0; i < 100 && rc == 0; i++) {
        snprintf(key, sizeof key, "%04d", i);
        rc = ferry_lmdb_writer_put(w, key, 4, chunk, sizeof chunk);
    }
    CHECK_RC(rc, FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "MDB_MAP_FULL");
    CHECK_CONTAINS(ferry_last_errmsg(), "since the last commit were dropped");
    uint64_t committed = ferry_lmdb_writer_committed(w);
    CHECK(committed > 0 && committed % 4 == 0);
    CHECK_U64(ferry_lmdb_writer_pending(w), 0);
    ferry_lmdb_writer_free(w);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_OFF, sizeof chunk);
    CHECK_U64(ferry_dataset_len(ds), committed);
    ferry_dataset_free(ds);
    /* reopened with a larger map, it takes more */
    w = writer_at(p, 4, 4 << 20, 0, NULL);
    for (i = 0; i < 8; i++) {
        snprintf(key, sizeof key, "m%03d", i);
        CHECK_OK(ferry_lmdb_writer_put(w, key, 4, chunk, sizeof chunk));
    }
    ferry_lmdb_writer_free(w);

    ferry_lmdb_writer_opts o;
    ferry_lmdb_writer_opts_default(&o);
    CHECK_RC(ferry_lmdb_writer_open(&w, &o), FERRY_EINVAL);
    o.path = p;
    o.map_size = 1000;
    CHECK_RC(ferry_lmdb_writer_open(&w, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "map_size 1000 is outside");
    o.map_size = 0;
    o.commit_every = (1u << 24) + 1;
    CHECK_RC(ferry_lmdb_writer_open(&w, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "commit_every");
    test_remove_dir();
}

/* Writes records (already serialised) under keys d0, d1, ... */
static void write_records(const char *path, pb *recs, int n)
{
    ferry_lmdb_writer *w = writer_at(path, 0, 0, 0, NULL);
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "d%d", i);
        CHECK_OK(ferry_lmdb_writer_put(w, key, strlen(key), recs[i].b, recs[i].n));
    }
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
}

TEST(datum_datasets_check_every_entry_against_the_first)
{
    test_make_dir("lmdb");
    char p[512];
    static pb recs[6];
    uint8_t px[60];
    for (int i = 0; i < 60; i++)
        px[i] = (uint8_t)(i * 3);
    /* raw 3x4x5, entry 3 is 3x5x4, entry 4 is encoded, entry 5 is not a Datum */
    for (int i = 0; i < 6; i++) {
        recs[i].n = 0;
        if (i == 5) {
            pb_byte(&recs[i], 0x7f);
            continue;
        }
        pb_dims(&recs[i], 3, i == 3 ? 5 : 4, i == 3 ? 4 : 5);
        pb_bytes(&recs[i], 4, px, 60);
        pb_int(&recs[i], 5, 10 + i);
        pb_int(&recs[i], 7, i == 4);
    }
    write_records(test_path("raw", p), recs, 6);
    ferry_dataset *ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(f->ndim == 3 && f->shape[0] == 3 && f->shape[1] == 4 && f->shape[2] == 5);
    sbuf b;
    sbuf_init(&b, ds);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(sbuf_get(&b, ds, (uint64_t)i));
        CHECK(!memcmp(b.p[0], px, 60));
        CHECK_EQ(sbuf_i64(&b, 1), 10 + i);
    }
    CHECK_RC(sbuf_get(&b, ds, 3), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "raw: entry 3 (key \"d3\"): shape [3, 5, 4] (60 data "
                                        "bytes), but the first entry's is [3, 4, 5]");
    CHECK_RC(sbuf_get(&b, ds, 4), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 4 (key \"d4\"): encoded, shape [3, 4, 5]");
    CHECK_RC(sbuf_get(&b, ds, 5), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "raw: entry 5 (key \"d5\"): datum: byte 0: field 15 has "
                                        "invalid wire type 7");
    sbuf_free(&b);
    ferry_dataset_free(ds);

    /* encoded images of varying size; a raw one among them; one over max */
    for (int i = 0; i < 4; i++) {
        recs[i].n = 0;
        pb_bytes(&recs[i], 4, px, (size_t)(10 + 15 * i));
        pb_int(&recs[i], 5, i);
        pb_int(&recs[i], 7, i != 2);
    }
    recs[2].n = 0;
    pb_dims(&recs[2], 1, 2, 5);
    pb_bytes(&recs[2], 4, px, 10);
    recs[4].n = 0; /* encoded, without any data */
    pb_int(&recs[4], 5, 4);
    pb_int(&recs[4], 7, 1);
    write_records(test_path("enc", p), recs, 5);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 50);
    f = ferry_dataset_field(ds, 0);
    CHECK(f->ndim == 1 && f->variable && f->shape[0] == 50);
    sbuf_init(&b, ds);
    CHECK_OK(sbuf_get(&b, ds, 0));
    CHECK_EQ(b.len[0], 10);
    CHECK_OK(sbuf_get(&b, ds, 1));
    CHECK_EQ(b.len[0], 25);
    CHECK(!memcmp(b.p[0], px, 25));
    CHECK_EQ(sbuf_i64(&b, 1), 1);
    CHECK_RC(sbuf_get(&b, ds, 2), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 2 (key \"d2\"): raw 1x2x5 pixels, but the first "
                                        "entry is encoded");
    CHECK_RC(sbuf_get(&b, ds, 3), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 3 (key \"d3\"): the encoded image is 55 bytes, "
                                        "over max 50");
    CHECK_OK(sbuf_get(&b, ds, 4));
    CHECK_EQ(b.len[0], 0);
    CHECK_EQ(sbuf_i64(&b, 1), 4);
    sbuf_free(&b);
    ferry_dataset_free(ds);

    /* floats: with data, and float-only Datums */
    static const float fl[4] = {0.25f, -1.0f, 2.5f, 8.0f};
    for (int i = 0; i < 3; i++) {
        recs[i].n = 0;
        pb_dims(&recs[i], 1, 1, 4);
        pb_bytes(&recs[i], 4, px, 4);
        pb_int(&recs[i], 5, i);
        if (i == 1) {
            for (int k = 0; k < 2; k++)
                pb_f32(&recs[i], 6, fl[k]);
        } else {
            pb_packed(&recs[i], 6, fl, i == 2 ? 3 : 2);
        }
    }
    write_records(test_path("fl", p), recs, 3);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_EQ(ferry_dataset_nfields(ds), 3);
    int ff = ferry_dataset_find_field(ds, "float_data");
    CHECK_EQ(ff, 2);
    CHECK_EQ(ferry_dataset_field(ds, ff)->shape[0], 2);
    CHECK_EQ(ferry_dataset_field(ds, ff)->dtype, FERRY_F32);
    sbuf_init(&b, ds);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(sbuf_get(&b, ds, (uint64_t)i));
        CHECK(!memcmp(b.p[ff], fl, 2 * sizeof(float)));
        CHECK(!memcmp(b.p[0], px, 4));
    }
    CHECK_RC(sbuf_get(&b, ds, 2), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 2 (key \"d2\"): 3 float_data values, but the first "
                                        "entry has 2");
    sbuf_free(&b);
    ferry_dataset_free(ds);
    for (int i = 0; i < 2; i++) {
        recs[i].n = 0;
        pb_dims(&recs[i], 4, 1, 1);
        pb_packed(&recs[i], 6, fl, 4);
        pb_int(&recs[i], 5, 7 * i);
    }
    write_records(test_path("fonly", p), recs, 2);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "label"));
    CHECK(!strcmp(ferry_dataset_field(ds, 1)->name, "float_data"));
    sbuf_init(&b, ds);
    CHECK_OK(sbuf_get(&b, ds, 1));
    CHECK_EQ(sbuf_i64(&b, 0), 7);
    CHECK(!memcmp(b.p[1], fl, sizeof fl));
    sbuf_free(&b);
    ferry_dataset_free(ds);

    /* an empty database: raw fields under auto, refused under datum=1 */
    write_records(test_path("empty", p), recs, 0);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_AUTO, 0);
    CHECK_U64(ferry_dataset_len(ds), 0);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "key"));
    ferry_dataset_free(ds);
    CHECK_RC(try_open(p, NULL, FERRY_LMDB_DATUM_ON), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "datum=1, but the database is empty");
    /* binary keys are shown escaped */
    ferry_lmdb_writer *w = writer_at(test_path("bin", p), 0, 0, 0, NULL);
    CHECK_OK(ferry_lmdb_writer_put(w, "\x01k\"\xff", 4, "\x08", 1)); /* a cut Datum */
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    CHECK_RC(try_open(p, NULL, FERRY_LMDB_DATUM_ON), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 0 (key \"\\x01k\\x22\\xff\") is not a Caffe Datum");
    test_remove_dir();
}

/* A value's size is a field of its B-tree node that LMDB does not check against
 * the file: one bumped past the end must be refused at open, not read (SIGBUS). */
TEST(a_value_running_past_the_file_is_refused)
{
    test_make_dir("lmdb");
    char p[512], f[512];
    static uint8_t big[10000];
    memset(big, 0xab, sizeof big);
    ferry_lmdb_writer *w = writer_at(test_path("db", p), 0, 0, 0, NULL);
    CHECK_OK(ferry_lmdb_writer_put(w, "bigvalue", 8, big, sizeof big)); /* overflow pages */
    CHECK_OK(ferry_lmdb_writer_put(w, "small", 5, "v", 1));
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    ferry_dataset *ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_OFF, sizeof big);
    CHECK_U64(ferry_dataset_len(ds), 2);
    ferry_dataset_free(ds);
    size_t n;
    uint8_t *file = test_read_file(test_path("db/data.mdb", f), &n);
    uint8_t *k = memmem(file, n, "bigvalue", 8);
    CHECK(k != NULL && k - file >= 8);
    /* the node: size (lo, hi: 2 + 2 bytes), flags (F_BIGDATA = 1), key size, key */
    CHECK(k[-2] == 8 && k[-1] == 0 && (k[-4] & 1));
    CHECK(k[-8] == (10000 & 0xff) && k[-7] == (10000 >> 8) && k[-6] == 0 && k[-5] == 0);
    k[-6] = 0xff; /* 10000 + 0xff0000 bytes */
    test_write_file(f, file, n);
    free(file);
    CHECK_RC(try_open(p, NULL, FERRY_LMDB_DATUM_OFF), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "db: entry 0 (key \"bigvalue\"): its value of 16721680 "
                                        "bytes lies outside the file's");
    test_remove_dir();
}

/* lock = 1: a reader slot in the lock file, so that a writer in another process
 * may go on while the dataset reads the state as of its open. */
TEST(with_the_lock_a_dataset_reads_its_snapshot_while_a_writer_goes_on)
{
    test_make_dir("lmdb");
    char p[512], key[16];
    ferry_lmdb_writer *w = writer_at(test_path("db", p), 0, 0, 0, NULL);
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "a%02d", i);
        CHECK_OK(ferry_lmdb_writer_put(w, key, 3, key, 3));
    }
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    o.path = p;
    o.lock = 1;
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_lmdb(&ds, &o));
    CHECK_U64(ferry_dataset_len(ds), 10);
    pid_t pid = fork(); /* one LMDB environment per file and process */
    CHECK(pid >= 0);
    if (pid == 0) {
        ferry_lmdb_writer_opts wo;
        ferry_lmdb_writer_opts_default(&wo);
        wo.path = p;
        ferry_lmdb_writer *cw;
        if (ferry_lmdb_writer_open(&cw, &wo) != 0)
            _exit(1);
        for (int round = 0; round < 5; round++) { /* rewrite: old pages would be reused */
            for (int i = 0; i < 10; i++) {
                char k[16], v[16];
                snprintf(k, sizeof k, "a%02d", i);
                snprintf(v, sizeof v, "new%d", round);
                if (ferry_lmdb_writer_put(cw, k, 3, v, strlen(v)) != 0)
                    _exit(2);
            }
            if (ferry_lmdb_writer_put(cw, "b", 1, "x", 1) != 0 || ferry_lmdb_writer_commit(cw) != 0)
                _exit(3);
        }
        ferry_lmdb_writer_free(cw);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sbuf b;
    sbuf_init(&b, ds);
    for (uint64_t i = 0; i < 10; i++) {
        CHECK_OK(sbuf_get(&b, ds, i));
        snprintf(key, sizeof key, "a%02d", (int)i);
        CHECK(b.len[1] == 3 && !memcmp(b.p[1], key, 3)); /* the old values, intact */
    }
    sbuf_free(&b);
    ferry_dataset_free(ds);
    ds = open_lmdb(p, NULL, FERRY_LMDB_DATUM_OFF, 0);
    CHECK_U64(ferry_dataset_len(ds), 11);
    sbuf_init(&b, ds);
    CHECK_OK(sbuf_get(&b, ds, 0));
    CHECK(b.len[1] == 4 && !memcmp(b.p[1], "new4", 4));
    sbuf_free(&b);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* The same walk over a database written here (needs no ../shared), and over the
 * writer's constructor. */
TEST(allocation_failures_are_reported_for_written_databases)
{
    test_make_dir("lmdb");
    char p[512];
    static pb recs[3];
    for (int i = 0; i < 3; i++) {
        recs[i].n = 0;
        pb_dims(&recs[i], 1, 2, 2);
        pb_bytes(&recs[i], 4, "abcd", 4);
        pb_int(&recs[i], 5, i);
    }
    write_records(test_path("d", p), recs, 3);
    int done = 0;
    for (long n = 0; n < 200 && !done; n++) {
        ferry_lmdb_opts o;
        ferry_lmdb_opts_default(&o);
        o.path = p;
        ferry_dataset *ds = NULL;
        ferry__test_fail_alloc(n);
        int rc = ferry_dataset_lmdb(&ds, &o);
        ferry__test_fail_alloc(-1);
        if (rc == FERRY_ENOMEM)
            continue;
        CHECK_OK(rc);
        CHECK_U64(ferry_dataset_len(ds), 3);
        CHECK_EQ(ferry_dataset_nfields(ds), 2);
        ferry_dataset_free(ds);
        done = 1;
    }
    CHECK(done);
    done = 0;
    for (long n = 0; n < 200 && !done; n++) {
        ferry_lmdb_writer_opts o;
        ferry_lmdb_writer_opts_default(&o);
        o.path = test_path("w", p);
        ferry_lmdb_writer *w = NULL;
        ferry__test_fail_alloc(n);
        int rc = ferry_lmdb_writer_open(&w, &o);
        ferry__test_fail_alloc(-1);
        if (rc == FERRY_ENOMEM)
            continue;
        CHECK_OK(rc);
        ferry_lmdb_writer_free(w);
        done = 1;
    }
    CHECK(done);
    test_remove_dir();
}
