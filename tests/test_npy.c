/*
 * NumPy .npy / .npz: every real file under testdata/npy read with the contents
 * its source lists; format versions 2 and 3; several arrays as fields; .npz
 * members stored and deflated, and the inflate bound; NumPy itself writing
 * every dtype in both byte orders and both memory orders; bad headers, lying
 * zip members and refused dtypes, each with a message naming file and offset;
 * allocation failures.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/npy.h>
#include "core/internal.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#define NPY_DIR FERRY_SHARED_DIR "/testdata/npy"
#define PY "/usr/bin/python3"

static ferry_dataset *open_spec(const char *spec)
{
    ferry_dataset *ds = NULL;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    return ds;
}

static double elem(ferry_dtype dt, const uint8_t *p)
{
    switch (dt) {
    case FERRY_U8:
    case FERRY_BOOL:
        return *p;
    case FERRY_I8:
        return (int8_t)*p;
#define AS(T)                                                                                      \
    do {                                                                                           \
        T v;                                                                                       \
        memcpy(&v, p, sizeof v);                                                                   \
        return (double)v;                                                                          \
    } while (0)
    case FERRY_U16:
        AS(uint16_t);
    case FERRY_I16:
        AS(int16_t);
    case FERRY_U32:
        AS(uint32_t);
    case FERRY_I32:
        AS(int32_t);
    case FERRY_U64:
        AS(uint64_t);
    case FERRY_I64:
        AS(int64_t);
    case FERRY_F32:
        AS(float);
    case FERRY_F64:
        AS(double);
#undef AS
    default:
        test_fail(__FILE__, __LINE__, "unexpected dtype %d", (int)dt);
    }
}

/* Every element of field f over all samples, as doubles, in order. */
static double *read_all(ferry_dataset *ds, int f, size_t *count)
{
    const ferry_field *fd = ferry_dataset_field(ds, f);
    size_t nb = ferry_field_nbytes(fd), item = ferry_dtype_size(fd->dtype), per = nb / item;
    uint64_t n = ferry_dataset_len(ds);
    int nf = ferry_dataset_nfields(ds);
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    for (int k = 0; k < nf; k++)
        data[k] = calloc(1, ferry_field_nbytes(ferry_dataset_field(ds, k)) + 1);
    ferry_sample s = {nf, data, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    double *out = calloc(n * per + 1, sizeof *out);
    for (uint64_t i = 0; i < n; i++) {
        CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
        for (size_t e = 0; e < per; e++)
            out[i * per + e] = elem(fd->dtype, (uint8_t *)data[f] + e * item);
    }
    ferry_ctx_free(ctx);
    for (int k = 0; k < nf; k++)
        free(data[k]);
    *count = n * per;
    return out;
}

static void check_values(ferry_dataset *ds, int f, const double *want, size_t nwant)
{
    size_t n;
    double *got = read_all(ds, f, &n);
    CHECK_U64(n, nwant);
    for (size_t i = 0; i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))))
            test_fail(__FILE__, __LINE__, "field %d element %zu: %g, wanted %g", f, i, got[i],
                      want[i]);
    free(got);
}

static void check_file(const char *rel, uint64_t len, ferry_dtype dt, int ndim,
                       const int64_t *shape, const double *want, size_t nwant)
{
    char spec[1024];
    snprintf(spec, sizeof spec, "npy:%s/%s", NPY_DIR, rel);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), len);
    CHECK_EQ(ferry_dataset_nfields(ds), 1);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(!strcmp(f->name, "data"));
    CHECK_EQ(f->dtype, dt);
    CHECK_EQ(f->ndim, ndim);
    for (int k = 0; k < ndim; k++)
        CHECK_EQ(f->shape[k], shape[k]);
    check_values(ds, 0, want, nwant);
    ferry_dataset_free(ds);
}

static const double SEQ24[24] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};

TEST(ndarray_npy_examples)
{
    test_need_shared(NPY_DIR "/ndarray-npy/example_bool_standard.npy");
    int64_t s34[2] = {3, 4}, s342[3] = {3, 4, 2};
    double b[24], c[48];
    for (int i = 0; i < 24; i++) {
        b[i] = (i % 5) % 2 == 0;
        c[2 * i] = i;
        c[2 * i + 1] = -i;
    }
    check_file("ndarray-npy/example_bool_standard.npy", 2, FERRY_BOOL, 2, s34, b, 24);
    check_file("ndarray-npy/example_c64_big_endian_standard.npy", 2, FERRY_F64, 3, s342, c, 48);
    check_file("ndarray-npy/example_c64_little_endian_fortran.npy", 2, FERRY_F64, 3, s342, c, 48);
    check_file("ndarray-npy/example_f64_big_endian_fortran.npy", 2, FERRY_F64, 2, s34, SEQ24, 24);
    check_file("ndarray-npy/example_f64_big_endian_standard.npy", 2, FERRY_F64, 2, s34, SEQ24, 24);
    check_file("ndarray-npy/example_f64_little_endian_standard.npy", 2, FERRY_F64, 2, s34, SEQ24,
               24);
}

TEST(npyio_every_dtype_and_order)
{
    test_need_shared(NPY_DIR "/npyio/data_int8_2x3_corder.npy");
    static const struct {
        const char *name;
        ferry_dtype dt;
    } types[] = {{"float32", FERRY_F32}, {"float64", FERRY_F64}, {"int8", FERRY_I8},
                 {"int16", FERRY_I16},   {"int32", FERRY_I32},   {"int64", FERRY_I64},
                 {"uint8", FERRY_U8},    {"uint16", FERRY_U16},  {"uint32", FERRY_U32},
                 {"uint64", FERRY_U64}};
    int64_t s3[1] = {3};
    const double corder[6] = {0, 1, 2, 3, 4, 5}, forder[6] = {0, 2, 4, 1, 3, 5}, v42[1] = {42};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char rel[128];
        snprintf(rel, sizeof rel, "npyio/data_%s_2x3_corder.npy", types[t].name);
        check_file(rel, 2, types[t].dt, 1, s3, corder, 6);
        snprintf(rel, sizeof rel, "npyio/data_%s_2x3_forder.npy", types[t].name);
        check_file(rel, 2, types[t].dt, 1, s3, forder, 6);
        snprintf(rel, sizeof rel, "npyio/data_%s_scalar_corder.npy", types[t].name);
        check_file(rel, 1, types[t].dt, 0, NULL, v42, 1); /* a 0-d array: one sample */
    }
    int64_t s1[1] = {1}, s34[2] = {3, 4};
    check_file("npyio/data_float64_1x1_forder.npy", 1, FERRY_F64, 1, s1, v42, 1);
    check_file("npyio/data_float64_2x3x4_corder.npy", 2, FERRY_F64, 2, s34, SEQ24, 24);
    check_file("npyio/data_float64_6x1_forder.npy", 6, FERRY_F64, 1, s1, corder, 6);
    const double nans[4] = {NAN, -INFINITY, 0, INFINITY};
    check_file("npyio/nans_inf.npy", 4, FERRY_F64, 0, NULL, nans, 4);
}

TEST(npyz_and_numpy_files)
{
    test_need_shared(NPY_DIR "/npyz/c-order.npy");
    int64_t s34[2] = {3, 4}, s8[1] = {8}, s34u[2] = {3, 4};
    double c[24];
    for (int i = 0; i < 24; i++)
        c[i] = 1 + i / 4;
    check_file("npyz/c-order.npy", 2, FERRY_I64, 2, s34, c, 24);
    check_file("npyz/f-order.npy", 2, FERRY_I64, 2, s34, c, 24);
    const double plain[4] = {1.0, 3.5, -6.0, 2.3};
    check_file("npyz/plain.npy", 4, FERRY_F64, 0, NULL, plain, 4);
    const double uni[8] = {0x3b1, 0x3b2, 'o', 'u', 't', 0, 0, 0};
    check_file("npyz/unicode_U8_ok.npy", 1, FERRY_U32, 1, s8, uni, 8);
    const double ones[24] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_file("numpy/python3.npy", 2, FERRY_F64, 0, NULL, ones, 2);
    check_file("numpy/win64python2.npy", 2, FERRY_F64, 0, NULL, ones, 2); /* "(2L,)" */
    check_file("numpy/u1_2x3x4_ones.npy", 2, FERRY_U8, 2, s34u, ones, 24);
}

TEST(structured_dtype_members_are_fields)
{
    test_need_shared(NPY_DIR "/npyz/structured.npy");
    ferry_dataset *ds = open_spec("npy:" NPY_DIR "/npyz/structured.npy");
    CHECK_U64(ferry_dataset_len(ds), 2);
    CHECK_EQ(ferry_dataset_nfields(ds), 3);
    CHECK_EQ(ferry_dataset_find_field(ds, "a"), 0);
    CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_I32);
    CHECK_EQ(ferry_dataset_field(ds, 1)->dtype, FERRY_F32);
    CHECK_EQ(ferry_dataset_field(ds, 2)->dtype, FERRY_I64);
    const double a[2] = {1, 2}, b[2] = {2.5, (double)3.1f}, c[2] = {4, 5};
    check_values(ds, 0, a, 2);
    check_values(ds, 1, b, 2);
    check_values(ds, 2, c, 2);
    ferry_dataset_free(ds);
    /* named: the members become NAME.MEMBER */
    ds = open_spec("npy:s=" NPY_DIR "/npyz/structured.npy");
    CHECK_EQ(ferry_dataset_find_field(ds, "s.b"), 1);
    ferry_dataset_free(ds);
}

TEST(npz_archives_stored_and_deflated)
{
    test_need_shared(NPY_DIR "/npyz/compressed.npz");
    const double ints[4] = {1, 2, 3, 4}, floats[2] = {1, 2}, seq6[6] = {0, 1, 2, 3, 4, 5},
                 f23[6] = {0, 2, 4, 1, 3, 5}, am[3] = {1, 2, 3}, bar[3] = {'b', 'a', 'r'};
    const char *arch[] = {"npyz/compressed.npz", "npyz/uncompressed.npz"};
    for (int k = 0; k < 2; k++) {
        char spec[1024];
        snprintf(spec, sizeof spec, "npy:%s/%s/ints", NPY_DIR, arch[k]);
        ferry_dataset *ds = open_spec(spec);
        CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "ints"));
        CHECK_EQ(ferry_dataset_field(ds, 0)->dtype, FERRY_I64);
        check_values(ds, 0, ints, 4);
        ferry_dataset_free(ds);
        snprintf(spec, sizeof spec, "npy:%s/%s/floats.npy", NPY_DIR, arch[k]);
        ds = open_spec(spec);
        check_values(ds, 0, floats, 2);
        ferry_dataset_free(ds);
        /* the whole archive: its members' first dimensions (4 and 2) disagree */
        snprintf(spec, sizeof spec, "npy:%s/%s", NPY_DIR, arch[k]);
        ds = NULL;
        CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "rows along its first axis");
    }
    ferry_dataset *ds = open_spec("npy:" NPY_DIR "/npyio/data_float64_corder.npz/arr0");
    CHECK_U64(ferry_dataset_len(ds), 2);
    check_values(ds, 0, seq6, 6);
    ferry_dataset_free(ds);
    ds = open_spec("npy:" NPY_DIR "/npyio/data_float64_corder.npz/arr1");
    CHECK_U64(ferry_dataset_len(ds), 6);
    check_values(ds, 0, seq6, 6);
    ferry_dataset_free(ds);
    ds = open_spec("npy:" NPY_DIR "/npyio/data_float64_forder.npz/arr0");
    check_values(ds, 0, f23, 6);
    ferry_dataset_free(ds);
    ds = open_spec("npy:" NPY_DIR "/npyio/data_float64_forder.npz/arr1");
    CHECK_U64(ferry_dataset_len(ds), 6);
    check_values(ds, 0, seq6, 6);
    ferry_dataset_free(ds);
    ds = open_spec("npy:" NPY_DIR "/numpy/am.npz"); /* one member: its name is the field */
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "arr_0"));
    check_values(ds, 0, am, 3);
    ferry_dataset_free(ds);
    const char *savez[] = {"numpy/py3-arr-savez.npz", "numpy/py3-arr-savez-compressed.npz"};
    for (int k = 0; k < 2; k++) {
        char spec[1024];
        snprintf(spec, sizeof spec, "npy:%s/%s/x", NPY_DIR, savez[k]);
        ds = open_spec(spec);
        CHECK_U64(ferry_dataset_len(ds), 4);
        double x[12];
        for (int i = 0; i < 12; i++)
            x[i] = i;
        check_values(ds, 0, x, 12);
        ferry_dataset_free(ds);
        snprintf(spec, sizeof spec, "npy:%s/%s/foo", NPY_DIR, savez[k]);
        ds = open_spec(spec);
        CHECK_U64(ferry_dataset_len(ds), 1);
        check_values(ds, 0, bar, 3);
        ferry_dataset_free(ds);
    }
    /* deflated members past the inflate bound are refused, naming the member */
    ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, "npy:" NPY_DIR "/npyz/compressed.npz/ints,inflate_max=16"),
             FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "compressed.npz: member \"ints.npy\" is deflated");
    /* ... while stored ones are mapped whatever the bound */
    ds = open_spec("npy:" NPY_DIR "/npyz/uncompressed.npz/ints,inflate_max=16");
    ferry_dataset_free(ds);
    CHECK_RC(ferry_dataset_open(&ds, "npy:" NPY_DIR "/npyz/uncompressed.npz/nope"), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "no member \"nope.npy\"");
}

TEST(refused_real_files)
{
    test_need_shared(NPY_DIR "/numpy/py3-objarr.npy");
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, "npy:" NPY_DIR "/numpy/py3-objarr.npy"), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "py3-objarr.npy: offset ");
    CHECK_CONTAINS(ferry_last_errmsg(), "object array");
    CHECK_RC(ferry_dataset_open(&ds, "npy:" NPY_DIR "/numpy/am_truncated_header_only.npy"),
             FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "am_truncated_header_only.npy: offset 128: the header's "
                                        "shape and dtype make 12 data bytes, but the file has 0");
}

/* ---- files made here ---- */

/* A .npy file: version major, header dict text, then data. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    unsigned char *buf = calloc(1, total + n + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (unsigned char)hlen;
        buf[9] = (unsigned char)(hlen >> 8);
    } else {
        for (int k = 0; k < 4; k++)
            buf[8 + k] = (unsigned char)(hlen >> (8 * k));
    }
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[total - 1] = '\n';
    if (n)
        memcpy(buf + total, data, n);
    test_write_file(path, buf, total + n);
    free(buf);
}

TEST(versions_2_and_3_and_subarray_members)
{
    test_make_dir("npy-versions");
    char p[512];
    int32_t v[6] = {1, -2, 3, -4, 5, -6};
    for (int major = 1; major <= 3; major++) {
        write_npy(test_path("v.npy", p), major,
                  "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", v, sizeof v);
        ferry_dataset *ds;
        char spec[600];
        snprintf(spec, sizeof spec, "npy:%s", p);
        ds = open_spec(spec);
        const double want[6] = {1, -2, 3, -4, 5, -6};
        check_values(ds, 0, want, 6);
        ferry_dataset_free(ds);
    }
    /* version 3 is UTF-8: a member named in Greek; a sub-array member; padding */
    const char *dict = "{'descr': [('\xce\xb1', '<u2'), ('', '|V2'), ('m', '>i2', (2,))], "
                       "'fortran_order': False, 'shape': (2,), }";
    uint8_t rec[16] = {1, 0, 9, 9, 0, 2, 0xff, 0xfd, /* row 1 */ 7, 0, 9, 9, 0, 3, 0, 4};
    write_npy(test_path("s.npy", p), 3, dict, rec, sizeof rec);
    char spec[600];
    snprintf(spec, sizeof spec, "npy:%s", p);
    ferry_dataset *ds = open_spec(spec);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "\xce\xb1"));
    CHECK_EQ(ferry_dataset_field(ds, 1)->ndim, 1);
    const double a[2] = {1, 7}, m[4] = {2, -3, 3, 4};
    check_values(ds, 0, a, 2);
    check_values(ds, 1, m, 4);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(several_arrays_are_the_fields_of_one_sample)
{
    test_make_dir("npy-fields");
    char a[512], b[512], c[512], spec[2048];
    float x[6] = {0, 1, 2, 3, 4, 5};
    int64_t y[3] = {10, 11, 12};
    write_npy(test_path("x.npy", a), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}",
              x, sizeof x);
    write_npy(test_path("y.npy", b), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,)}",
              y, sizeof y);
    write_npy(test_path("z.npy", c), 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,)}",
              y, 16);
    snprintf(spec, sizeof spec, "npy:feat=%s;label=%s", a, b);
    ferry_dataset *ds = open_spec(spec);
    CHECK_U64(ferry_dataset_len(ds), 3);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "feat"));
    CHECK(!strcmp(ferry_dataset_field(ds, 1)->name, "label"));
    const double wx[6] = {0, 1, 2, 3, 4, 5}, wy[3] = {10, 11, 12};
    check_values(ds, 0, wx, 6);
    check_values(ds, 1, wy, 3);
    ferry_dataset_free(ds);
    /* unnamed: each field is its file's stem */
    snprintf(spec, sizeof spec, "npy:%s;%s", a, b);
    ds = open_spec(spec);
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "x"));
    CHECK(!strcmp(ferry_dataset_field(ds, 1)->name, "y"));
    ferry_dataset_free(ds);
    ds = NULL;
    snprintf(spec, sizeof spec, "npy:x=%s;z=%s", a, c);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "z.npy has 2 rows along its first axis, but");
    snprintf(spec, sizeof spec, "npy:x=%s;%s", a, c);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "name every array");
    /* through the loader, shuffled, two workers: every row once */
    snprintf(spec, sizeof spec, "npy:feat=%s;label=%s", a, b);
    ds = open_spec(spec);
    ferry_loader_opts lo;
    ferry_loader_opts_default(&lo);
    lo.batch_size = 2;
    lo.num_workers = 2;
    lo.shuffle = 1;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &lo));
    int seen[3] = {0};
    ferry_batch *bt;
    int rc;
    while ((rc = ferry_loader_next(l, &bt)) == 0) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(bt, 1, &t));
        for (int64_t i = 0; i < t.shape[0]; i++)
            seen[((int64_t *)t.data)[i] - 10]++;
        ferry_batch_release(bt);
    }
    CHECK_EQ(rc, FERRY_END);
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    test_remove_dir();
}

static void expect_bad(const char *path, int want, const char *msg)
{
    char spec[700];
    snprintf(spec, sizeof spec, "npy:%s", path);
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_open(&ds, spec), want);
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), msg);
}

TEST(bad_headers_name_file_and_offset)
{
    test_make_dir("npy-bad");
    char p[512];
    double d[4] = {1, 2, 3, 4};
    const char *f8 = "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }";
    /* shape and dtype disagree with the file's size, both ways */
    write_npy(test_path("short.npy", p), 1, f8, d, 24);
    expect_bad(p, FERRY_ECORRUPT,
               ": offset 128: the header's shape and dtype make 32 data bytes, "
               "but the file has 24");
    write_npy(test_path("long.npy", p), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (3,)}", d, 32);
    expect_bad(p, FERRY_ECORRUPT, "make 24 data bytes, but the file has 32");
    /* a header length past the end */
    unsigned char past[32] = "\x93NUMPY\x01\x00\xe8\x03{'descr': '<f8', ";
    test_write_file(test_path("past.npy", p), past, sizeof past);
    expect_bad(p, FERRY_ECORRUPT, ": offset 8: header length 1000 runs past the end");
    /* an unknown dtype string, and others */
    write_npy(test_path("dtype.npy", p), 1,
              "{'descr': '<x4', 'fortran_order': False, 'shape': (1,)}", d, 4);
    expect_bad(p, FERRY_ECORRUPT, ": offset 20: unknown dtype \"<x4\"");
    write_npy(test_path("f16.npy", p), 1,
              "{'descr': '<f16', 'fortran_order': False, 'shape': (1,)}", d, 16);
    expect_bad(p, FERRY_ENOTSUP, "long double");
    write_npy(test_path("obj.npy", p), 1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,)}",
              d, 8);
    expect_bad(p, FERRY_ENOTSUP, "object array (Python pickles: code in data); refused");
    write_npy(test_path("nested.npy", p), 1,
              "{'descr': [('a', [('b', '<i4')])], 'fortran_order': False, 'shape': (1,)}", d, 4);
    expect_bad(p, FERRY_ENOTSUP, "nested structured dtypes");
    write_npy(test_path("key.npy", p), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), 'extra': 1}", d, 32);
    expect_bad(p, FERRY_ECORRUPT, "unknown or repeated key \"extra\"");
    write_npy(test_path("nokey.npy", p), 1, "{'descr': '<f8', 'shape': (4,)}", d, 32);
    expect_bad(p, FERRY_ECORRUPT, "lacks 'fortran_order'");
    write_npy(test_path("huge.npy", p), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (9999999999, 9999999999)}", d, 8);
    expect_bad(p, FERRY_EOVERFLOW, "overflows");
    write_npy(test_path("ver.npy", p), 4, f8, d, 32);
    expect_bad(p, FERRY_ENOTSUP, ": offset 6: format version 4.0");
    test_write_file(test_path("magic.npy", p), "NUMPY....", 9);
    expect_bad(p, FERRY_ECORRUPT, ": offset 0: not a .npy file");
    test_remove_dir();
}

/* A zip archive of one member, stored or deflated, with its central directory's
 * sizes optionally replaced. */
static void write_zip(const char *path, const char *name, const void *data, size_t n, int deflated,
                      long fake_csize, long fake_usize, long fake_crc)
{
    uLong bound = compressBound((uLong)n) + 16;
    unsigned char *body = malloc(bound), *out = malloc(bound + 512);
    size_t blen = n;
    if (deflated) {
        z_stream z;
        memset(&z, 0, sizeof z);
        CHECK(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
        z.next_in = (Bytef *)data;
        z.avail_in = (uInt)n;
        z.next_out = body;
        z.avail_out = (uInt)bound;
        CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
        blen = z.total_out;
        deflateEnd(&z);
    } else {
        memcpy(body, data, n);
    }
    uint32_t crc = (uint32_t)crc32(0, data, (uInt)n);
    size_t nl = strlen(name), o = 0;
#define P16(v) (out[o++] = (unsigned char)(v), out[o++] = (unsigned char)((v) >> 8))
#define P32(v) (P16((v)&0xffff), P16(((uint32_t)(v)) >> 16))
    P32(0x04034b50u);
    P16(20);
    P16(0);
    P16(deflated ? 8 : 0);
    P32(0);
    P32(crc);
    P32(blen);
    P32(n);
    P16(nl);
    P16(0);
    memcpy(out + o, name, nl);
    o += nl;
    memcpy(out + o, body, blen);
    o += blen;
    size_t cd = o;
    P32(0x02014b50u);
    P16(20);
    P16(20);
    P16(0);
    P16(deflated ? 8 : 0);
    P32(0);
    P32(fake_crc >= 0 ? (uint32_t)fake_crc : crc);
    P32(fake_csize >= 0 ? (uint32_t)fake_csize : blen);
    P32(fake_usize >= 0 ? (uint32_t)fake_usize : n);
    P16(nl);
    P16(0);
    P16(0);
    P16(0);
    P16(0);
    P32(0);
    P32(0); /* local header at 0 */
    memcpy(out + o, name, nl);
    o += nl;
    size_t cdlen = o - cd;
    P32(0x06054b50u);
    P16(0);
    P16(0);
    P16(1);
    P16(1);
    P32(cdlen);
    P32(cd);
    P16(0);
#undef P16
#undef P32
    test_write_file(path, out, o);
    free(body);
    free(out);
}

TEST(zip_members_whose_sizes_lie)
{
    test_make_dir("npy-zip");
    char npy[512], z[512];
    int16_t v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (int16_t)(i * 3);
    write_npy(test_path("a.npy", npy), 1,
              "{'descr': '<i2', 'fortran_order': False, 'shape': (8, 8), }", v, sizeof v);
    size_t n;
    unsigned char *bytes = test_read_file(npy, &n);
    /* good archives, both methods */
    for (int deflate = 0; deflate < 2; deflate++) {
        write_zip(test_path("ok.npz", z), "a.npy", bytes, n, deflate, -1, -1, -1);
        char spec[600];
        snprintf(spec, sizeof spec, "npy:%s", z);
        ferry_dataset *ds = open_spec(spec);
        CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "a"));
        double want[64];
        for (int i = 0; i < 64; i++)
            want[i] = i * 3;
        check_values(ds, 0, want, 64);
        ferry_dataset_free(ds);
    }
    write_zip(test_path("stored.npz", z), "a.npy", bytes, n, 0, -1, (long)n + 8, -1);
    expect_bad(z, FERRY_ECORRUPT, ": offset ");
    CHECK_CONTAINS(ferry_last_errmsg(), "member \"a.npy\" is stored, but its sizes disagree");
    write_zip(test_path("past.npz", z), "a.npy", bytes, n, 0, (long)n + 100, (long)n + 100, -1);
    expect_bad(z, FERRY_ECORRUPT, "member \"a.npy\": its ");
    CHECK_CONTAINS(ferry_last_errmsg(), "run past the start of the directory");
    write_zip(test_path("more.npz", z), "a.npy", bytes, n, 1, -1, (long)n - 10, -1);
    expect_bad(z, FERRY_ECORRUPT, "inflates to more than the");
    write_zip(test_path("less.npz", z), "a.npy", bytes, n, 1, -1, (long)n + 10, -1);
    expect_bad(z, FERRY_ECORRUPT, "the directory says");
    write_zip(test_path("crc.npz", z), "a.npy", bytes, n, 1, -1, -1, 12345);
    expect_bad(z, FERRY_ECORRUPT, "CRC-32");
    /* cut short: no end record */
    size_t zn;
    write_zip(test_path("cut.npz", z), "a.npy", bytes, n, 0, -1, -1, -1);
    unsigned char *zb = test_read_file(z, &zn);
    test_write_file(z, zb, zn - 30);
    expect_bad(z, FERRY_ECORRUPT, "no zip end-of-central-directory record");
    free(zb);
    free(bytes);
    test_remove_dir();
}

/* NumPy writes every dtype in both byte orders and both memory orders, in each
 * format version; ferry's rows must equal NumPy's rows (as C-order little-endian
 * bytes). */
TEST(numpy_writes_every_dtype_ferry_reads_it)
{
    if (access(PY, X_OK) != 0 || system(PY " -c 'import numpy' >/dev/null 2>&1") != 0)
        SKIP("python3 with numpy is absent");
    test_make_dir("npy-numpy");
    char script[4096];
    snprintf(script, sizeof script,
             PY
             " - <<'EOF'\n"
             "import numpy as np, os\n"
             "d = '%s'\n"
             "rng = np.random.default_rng(7)\n"
             "cases = []\n"
             "for t in ['?', 'i1', 'u1', 'i2', 'u2', 'i4', 'u4', 'i8', 'u8', 'f2', 'f4', "
             "'f8', 'c8', 'c16']:\n"
             "  for bo in '<>':\n"
             "    for order in 'CF':\n"
             "      for ver in [(1, 0), (2, 0), (3, 0)]:\n"
             "        a = (rng.standard_normal((5, 3, 4)) * 100).astype(np.dtype(t))\n"
             "        if t[0] == 'c': a = a + 1j * a[::-1]\n"
             "        a = a.astype(np.dtype(t).newbyteorder(bo))\n"
             "        a = np.asfortranarray(a) if order == 'F' else a\n"
             "        name = '%%s_%%s_%%s_%%d' %% (t, 'le' if bo == '<' else 'be', order, ver[0])\n"
             "        with open(os.path.join(d, name + '.npy'), 'wb') as f:\n"
             "          np.lib.format.write_array(f, a, version=ver)\n"
             "        e = np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<'))\n"
             "        open(os.path.join(d, name + '.bin'), 'wb').write(e.tobytes())\n"
             "        cases.append(name)\n"
             "open(os.path.join(d, 'cases.txt'), 'w').write('\\n'.join(cases) + '\\n')\n"
             "EOF\n",
             test_dir);
    CHECK_EQ(system(script), 0);
    char path[512];
    size_t n;
    char *list = (char *)test_read_file(test_path("cases.txt", path), &n);
    list[n] = 0;
    int cases = 0;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char npyp[600], binp[600], spec[700];
        snprintf(npyp, sizeof npyp, "%s/%s.npy", test_dir, line);
        snprintf(binp, sizeof binp, "%s/%s.bin", test_dir, line);
        size_t bn;
        unsigned char *want = test_read_file(binp, &bn);
        snprintf(spec, sizeof spec, "npy:%s", npyp);
        ferry_dataset *ds = open_spec(spec);
        CHECK_U64(ferry_dataset_len(ds), 5);
        size_t row = ferry_field_nbytes(ferry_dataset_field(ds, 0));
        CHECK_U64(row * 5, bn);
        unsigned char *buf = malloc(row);
        void *data[1] = {buf};
        int64_t len[1];
        ferry_sample s = {1, data, len, {0}};
        for (uint64_t i = 0; i < 5; i++) {
            CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
            if (memcmp(buf, want + i * row, row) != 0)
                test_fail(__FILE__, __LINE__, "%s: row %llu differs from NumPy's", line,
                          (unsigned long long)i);
        }
        free(buf);
        free(want);
        ferry_dataset_free(ds);
        cases++;
    }
    ferry_ctx_free(ctx);
    CHECK_EQ(cases, 14 * 2 * 2 * 3);
    free(list);
    test_remove_dir();
}

TEST(allocation_failures_in_open)
{
    test_make_dir("npy-oom");
    char a[512], z[512], spec[1200];
    int32_t v[4] = {1, 2, 3, 4};
    write_npy(test_path("a.npy", a), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,)}",
              v, sizeof v);
    size_t n;
    unsigned char *bytes = test_read_file(a, &n);
    write_zip(test_path("b.npz", z), "b.npy", bytes, n, 1, -1, -1, -1);
    free(bytes);
    snprintf(spec, sizeof spec, "npy:x=%s;y=%s/b", a, z);
    int done = 0;
    for (long k = 0; k < 64 && !done; k++) {
        ferry_dataset *ds = NULL;
        ferry__test_fail_alloc(k);
        int rc = ferry_dataset_open(&ds, spec);
        ferry__test_fail_alloc(-1);
        if (rc == FERRY_ENOMEM)
            continue;
        CHECK_OK(rc);
        CHECK_EQ(ferry_dataset_nfields(ds), 2);
        ferry_dataset_free(ds);
        done = 1;
    }
    CHECK(done);
    test_remove_dir();
}

/* np.savez and np.savez_compressed archives (zip64 local headers, as NumPy
 * writes them) with several members, read member by member and whole. */
TEST(numpy_savez_archives)
{
    if (access(PY, X_OK) != 0 || system(PY " -c 'import numpy' >/dev/null 2>&1") != 0)
        SKIP("python3 with numpy is absent");
    test_make_dir("npy-savez");
    char script[2048];
    snprintf(script, sizeof script,
             PY " - <<'EOF'\n"
                "import numpy as np, os\n"
                "d = '%s'\n"
                "x = np.arange(60, dtype='>i4').reshape(20, 3)\n"
                "y = np.linspace(0, 1, 20).astype('<f8')\n"
                "np.savez(os.path.join(d, 'plain.npz'), x=x, y=y)\n"
                "np.savez_compressed(os.path.join(d, 'packed.npz'), x=x, y=y)\n"
                "open(os.path.join(d, 'x.bin'), 'wb').write(x.astype('<i4').tobytes())\n"
                "open(os.path.join(d, 'y.bin'), 'wb').write(y.tobytes())\n"
                "EOF\n",
             test_dir);
    CHECK_EQ(system(script), 0);
    char p[512];
    size_t xn, yn;
    unsigned char *xb = test_read_file(test_path("x.bin", p), &xn);
    unsigned char *yb = test_read_file(test_path("y.bin", p), &yn);
    const char *names[2] = {"plain.npz", "packed.npz"};
    for (int k = 0; k < 2; k++) {
        char spec[700];
        snprintf(spec, sizeof spec, "npy:%s/%s", test_dir, names[k]);
        ferry_dataset *ds = open_spec(spec);
        CHECK_U64(ferry_dataset_len(ds), 20);
        int fx = ferry_dataset_find_field(ds, "x"), fy = ferry_dataset_find_field(ds, "y");
        CHECK(fx >= 0 && fy >= 0);
        CHECK_EQ(ferry_dataset_field(ds, fx)->dtype, FERRY_I32);
        void *data[2];
        int64_t len[2];
        data[fx] = malloc(12);
        data[fy] = malloc(8);
        ferry_sample s = {2, data, len, {0}};
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        for (uint64_t i = 0; i < 20; i++) {
            CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
            CHECK(!memcmp(data[fx], xb + 12 * i, 12));
            CHECK(!memcmp(data[fy], yb + 8 * i, 8));
        }
        ferry_ctx_free(ctx);
        free(data[0]);
        free(data[1]);
        ferry_dataset_free(ds);
    }
    free(xb);
    free(yb);
    test_remove_dir();
}

TEST(ferry_head_pack_and_bench_read_npy)
{
    test_make_dir("npy-cli");
    char a[512], b[512], args[2048], out[8192];
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t y[4] = {9, 8, 7, 6};
    for (int i = 0; i < 8; i++) /* stored big-endian */
        x[i] = (int32_t)__builtin_bswap32((uint32_t)x[i]);
    write_npy(test_path("x.npy", a), 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (4, 2)}",
              x, sizeof x);
    write_npy(test_path("y.npy", b), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,)}",
              y, sizeof y);
    snprintf(args, sizeof args, "head 'npy:x=%s;y=%s' -n 2", a, b);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "{\"x\": [1, 2], \"y\": 9}\n{\"x\": [3, 4], \"y\": 8}");
    snprintf(args, sizeof args, "pack 'npy:x=%s;y=%s' %s/rec && %s head records:%s/rec -n 4", a, b,
             test_dir, TEST_FERRY_CLI, test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "{\"x\": [7, 8], \"y\": 6}");
    snprintf(args, sizeof args, "bench 'npy:x=%s;y=%s' --shuffle --batch 3 --json", a, b);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"samples\": 4,");
    snprintf(args, sizeof args, "head npy:%s/nothing.npy", test_dir);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "nothing.npy");
    test_remove_dir();
}

TEST(parse_header_reports_members_and_layout)
{
    const char hdr[] =
        "\x93NUMPY\x01\x00\x75\x00{'descr': [('a', '<i4'), ('', '|V4'), ('b', '>f8', "
        "(2, 3)), ('c', '<c8')], 'fortran_order': True, 'shape': (5, 7), }\n";
    ferry_npy_header h;
    CHECK_OK(ferry_npy_parse_header(hdr, sizeof hdr - 1, "h.npy", &h));
    CHECK_EQ(h.major, 1);
    CHECK_EQ(h.fortran, 1);
    CHECK_EQ(h.ndim, 2);
    CHECK_EQ(h.shape[1], 7);
    CHECK_EQ(h.structured, 1);
    CHECK_EQ(h.nmembers, 3); /* the padding member is left out */
    CHECK_U64(h.itemsize, 4 + 4 + 48 + 8);
    CHECK_U64(h.members[1].offset, 8);
    CHECK_EQ(h.members[1].ndim, 2);
    CHECK_EQ(h.members[1].swap, 8);
    CHECK_EQ(h.members[2].dtype, FERRY_F32); /* complex64: a float32 pair */
    CHECK_EQ(h.members[2].ndim, 1);
    CHECK_EQ(h.members[2].shape[0], 2);
    CHECK_U64(h.data_bytes, 35 * 64);
    CHECK_U64(h.data_offset, sizeof hdr - 1);
    /* the header's length may not run past what is there */
    CHECK_RC(ferry_npy_parse_header(hdr, 40, "h.npy", &h), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "h.npy: offset 8: header length 117 runs past the end");
}

TEST(field_names_are_latin1_in_v1_and_v2_utf8_in_v3)
{
    test_make_dir("npy-names");
    char p[512], spec[600];
    int32_t v[2] = {1, 2};
    /* what NumPy writes for a field named "\u00e9": latin-1 up to version 2 */
    const char *latin = "{'descr': [('\xe9', '<i4')], 'fortran_order': False, 'shape': (2,), }";
    const char *utf8 = "{'descr': [('\xe6\x97\xa5', '<i4')], 'fortran_order': False, 'shape': "
                       "(2,), }";
    for (int major = 1; major <= 3; major++) {
        write_npy(test_path("n.npy", p), major, major < 3 ? latin : utf8, v, sizeof v);
        snprintf(spec, sizeof spec, "npy:%s", p);
        ferry_dataset *ds = open_spec(spec);
        CHECK_EQ(ferry_dataset_find_field(ds, major < 3 ? "\xc3\xa9" : "\xe6\x97\xa5"), 0);
        ferry_dataset_free(ds);
    }
    /* version 3 is UTF-8: a stray byte is refused, naming the file and the name */
    write_npy(test_path("bad.npy", p), 3, latin, v, sizeof v);
    expect_bad(p, FERRY_ECORRUPT, "a structured field's name \"\\xe9\" is not UTF-8");
    /* a schema error names the file */
    write_npy(test_path("big.npy", p), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 100000, 100000), }", NULL, 0);
    expect_bad(p, FERRY_EINVAL, "makes a sample larger than 2^34 bytes");
    test_remove_dir();
}
