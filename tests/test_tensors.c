/*
 * Named tensors (safetensors): round trips of every dtype, chunked multi-threaded
 * writes, CRCs, selection and renaming, copies, the real files in
 * ../shared/testdata/safetensors, hostile headers, a writer killed at many
 * points, and allocation failures.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/tensors.h>
#include "core/internal.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHARED_ST FERRY_SHARED_DIR "/testdata/safetensors/"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static int count_dir(const char *d)
{
    int n = 0;
    DIR *dp = opendir(d);
    CHECK(dp != NULL);
    struct dirent *e;
    while ((e = readdir(dp)))
        n += e->d_name[0] != '.';
    closedir(dp);
    return n;
}

static uint64_t header_len(const char *path)
{
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    CHECK(n >= 8);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | b[i];
    free(b);
    return h;
}

/* Every dtype, odd shapes, a scalar, an empty tensor, metadata. */
TEST(round_trip_every_dtype)
{
    test_make_dir("tensors_rt");
    char path[512];
    test_path("all.safetensors", path);
    enum { N = FERRY_ST_DTYPE_COUNT - 1 };
    ferry_tensor_src src[N + 2];
    int64_t shapes[N + 2][3];
    uint8_t *bufs[N + 2];
    char names[N + 2][32];
    for (int i = 0; i < N; i++) {
        ferry_st_dtype dt = (ferry_st_dtype)(i + 1);
        /* 4 x 3 x 2 = 24 elements: whole bytes for F4 and F6 too */
        shapes[i][0] = 4;
        shapes[i][1] = 3;
        shapes[i][2] = 2;
        size_t nb = 24 * ferry_st_dtype_bits(dt) / 8;
        bufs[i] = malloc(nb);
        fill(bufs[i], nb, (uint32_t)i);
        snprintf(names[i], sizeof names[i], "layer.%s", ferry_st_dtype_name(dt));
        src[i] = (ferry_tensor_src){names[i], dt, 3, shapes[i], bufs[i]};
    }
    double scalar = 2.5;
    src[N] = (ferry_tensor_src){"scalar", FERRY_ST_F64, 0, NULL, &scalar};
    shapes[N + 1][0] = 0;
    shapes[N + 1][1] = 7;
    src[N + 1] = (ferry_tensor_src){"empty \"quoted\"\n", FERRY_ST_F32, 2, shapes[N + 1], NULL};
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "caf\xc3\xa9 \"x\""};
    ferry_tensors_save_opts so = {.meta_keys = keys, .meta_values = vals, .nmeta = 2};
    CHECK_OK(ferry_tensors_save(path, src, N + 2, &so));
    CHECK_EQ((8 + header_len(path)) % 8, 0);

    ferry_tensors *t;
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    CHECK_EQ(ferry_tensors_count(t), N + 2);
    CHECK_EQ(ferry_tensors_metadata_count(t), 2);
    const char *k;
    CHECK(!strcmp(ferry_tensors_metadata_at(t, 1, &k), vals[1]));
    CHECK(!strcmp(k, "note"));
    CHECK(!strcmp(ferry_tensors_metadata_get(t, "format"), "pt"));
    CHECK(ferry_tensors_metadata_get(t, "missing") == NULL);
    for (int i = 0; i < N + 2; i++) {
        const ferry_tensor_info *ti = ferry_tensors_find(t, src[i].name);
        CHECK(ti != NULL);
        CHECK_EQ(ti->dtype, src[i].dtype);
        CHECK_EQ(ti->ndim, src[i].ndim);
        for (int d = 0; d < ti->ndim; d++)
            CHECK_EQ(ti->shape[d], src[i].shape[d]);
        CHECK(ti->has_crc);
        if (i < N) {
            size_t nb = 24 * ferry_st_dtype_bits(src[i].dtype) / 8;
            CHECK_EQ(ti->nbytes, nb);
            CHECK(memcmp(ti->data, bufs[i], nb) == 0);
            unsigned bits = ferry_st_dtype_bits(src[i].dtype);
            CHECK_EQ(ti->offset % (bits >= 8 ? bits / 8 : 1), 0); /* aligned to its element */
            CHECK_EQ(ti->crc, ferry_crc32c(0, bufs[i], nb));
            CHECK_OK(ferry_tensors_verify(t, (size_t)(ti - ferry_tensors_at(t, 0))));
        }
    }
    const ferry_tensor_info *s = ferry_tensors_find(t, "scalar");
    CHECK_EQ(s->ndim, 0);
    CHECK_EQ(s->numel, 1);
    CHECK(memcmp(s->data, &scalar, 8) == 0);
    const ferry_tensor_info *e = ferry_tensors_find(t, "empty \"quoted\"\n");
    CHECK_EQ(e->nbytes, 0);
    CHECK(e->data == NULL);
    CHECK(ferry_tensors_find(t, "nope") == NULL);
    /* file order is offset order */
    for (size_t i = 1; i < ferry_tensors_count(t); i++)
        CHECK(ferry_tensors_at(t, i)->offset >= ferry_tensors_at(t, i - 1)->offset);
    ferry_tensors_free(t);
    for (int i = 0; i < N; i++)
        free(bufs[i]);
    CHECK_EQ(count_dir(test_dir), 1); /* no temporary left */
    test_remove_dir();
}

TEST(dtype_names)
{
    for (int i = 1; i < FERRY_ST_DTYPE_COUNT; i++)
        CHECK_EQ(ferry_st_dtype_from_name(ferry_st_dtype_name((ferry_st_dtype)i)), i);
    CHECK_EQ(ferry_st_dtype_from_name("f32"), FERRY_ST_INVALID);
    CHECK_EQ(ferry_st_dtype_bits(FERRY_ST_F8_E4M3), 8);
    CHECK_EQ(ferry_st_dtype_bits(FERRY_ST_F4), 4);
    CHECK_EQ(ferry_st_dtype_core(FERRY_ST_BF16), FERRY_BF16);
    CHECK_EQ(ferry_st_dtype_core(FERRY_ST_F8_E5M2), FERRY_DTYPE_INVALID);
}

/* Tensors larger than a chunk are written in pieces by several threads; their
 * CRCs are joined from the pieces'. Small ones are gathered into one write. */
TEST(chunked_threads)
{
    test_make_dir("tensors_chunk");
    char path[512];
    test_path("big.safetensors", path);
    enum { N = 40 };
    size_t sizes[N];
    uint8_t *bufs[N];
    int64_t shapes[N];
    char names[N][16];
    ferry_tensor_src src[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = i % 10 == 0 ? (size_t)(1 << 20) + 4 * (size_t)i + 4 : (size_t)(i * 1000 + 4);
        bufs[i] = malloc(sizes[i]);
        fill(bufs[i], sizes[i], (uint32_t)i + 7);
        shapes[i] = (int64_t)sizes[i] / 4;
        snprintf(names[i], sizeof names[i], "t%02d", i);
        src[i] = (ferry_tensor_src){names[i], FERRY_ST_F32, 1, &shapes[i], bufs[i]};
    }
    for (unsigned threads = 1; threads <= 4; threads += 3) {
        ferry_tensors_save_opts so = {.threads = threads, .chunk_bytes = 64 << 10};
        CHECK_OK(ferry_tensors_save(path, src, N, &so));
        ferry_tensors_opts lo = {.threads = threads};
        ferry_tensors *t;
        CHECK_OK(ferry_tensors_open(&t, path, &lo));
        for (int i = 0; i < N; i++) {
            const ferry_tensor_info *ti = ferry_tensors_find(t, names[i]);
            CHECK(ti && ti->nbytes == sizes[i]);
            CHECK(memcmp(ti->data, bufs[i], sizes[i]) == 0);
            CHECK_EQ(ti->crc, ferry_crc32c(0, bufs[i], sizes[i]));
        }
        ferry_tensors_free(t);
    }
    for (int i = 0; i < N; i++)
        free(bufs[i]);
    test_remove_dir();
}

/* Tensors of several chunks, and many small ones: saved in parts at their final
 * offsets by several threads, checked in parts and in runs at open. */
TEST(large_tensors_in_parts)
{
    test_make_dir("tensors_parts");
    char path[512];
    test_path("parts.safetensors", path);
    enum { N = 52 };
    size_t sizes[N];
    uint8_t *bufs[N];
    int64_t shapes[N];
    char names[N][16];
    ferry_tensor_src src[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = i == 0   ? ((size_t)37 << 20) + 12
                   : i == 1 ? (size_t)5 << 20
                            : (size_t)i * 999 * 4;
        bufs[i] = malloc(sizes[i]);
        fill(bufs[i], sizes[i], (uint32_t)i + 3);
        shapes[i] = (int64_t)sizes[i] / 4;
        snprintf(names[i], sizeof names[i], "t%02d", i);
        src[i] = (ferry_tensor_src){names[i], FERRY_ST_F32, 1, &shapes[i], bufs[i]};
    }
    ferry_tensors_save_opts so = {.threads = 3};
    CHECK_OK(ferry_tensors_save(path, src, N, &so));
    for (int copy = 0; copy < 2; copy++) {
        ferry_tensors_opts lo = {.threads = 3, .flags = copy ? FERRY_TENSORS_COPY : 0};
        ferry_tensors *t;
        CHECK_OK(ferry_tensors_open(&t, path, &lo));
        for (int i = 0; i < N; i++) {
            const ferry_tensor_info *ti = ferry_tensors_find(t, names[i]);
            CHECK(ti && ti->nbytes == sizes[i]);
            CHECK(memcmp(ti->data, bufs[i], sizes[i]) == 0);
            CHECK_EQ(ti->crc, ferry_crc32c(0, bufs[i], sizes[i]));
        }
        ferry_tensors_free(t);
    }
    /* one byte changed in the middle of the large tensor, then in a small one
     * among many: the message names the tensor */
    ferry_tensors *t;
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    uint64_t at_big = ferry_tensors_find(t, "t00")->offset + ((uint64_t)20 << 20) + 5;
    uint64_t at_small = ferry_tensors_find(t, "t27")->offset + 100;
    ferry_tensors_free(t);
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    static const char *const bad[] = {"tensor \"t00\"", "tensor \"t27\""};
    for (int k = 0; k < 2; k++) {
        uint64_t at = k ? at_small : at_big;
        b[at] ^= 1;
        test_write_file(path, b, n);
        ferry_tensors_opts lo = {.threads = 2};
        CHECK_RC(ferry_tensors_open(&t, path, &lo), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), bad[k]);
        CHECK_CONTAINS(ferry_last_errmsg(), "CRC mismatch");
        lo.flags = FERRY_TENSORS_COPY;
        CHECK_RC(ferry_tensors_open(&t, path, &lo), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), bad[k]);
        b[at] ^= 1;
    }
    free(b);
    for (int i = 0; i < N; i++)
        free(bufs[i]);
    test_remove_dir();
}

static void save_abc(const char *path)
{
    static float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[3] = {7, 8, 9};
    static int64_t sa = 4, sb = 2, sc = 3;
    ferry_tensor_src src[] = {{"model.a", FERRY_ST_F32, 1, &sa, a},
                              {"model.b", FERRY_ST_F32, 1, &sb, b},
                              {"opt.c", FERRY_ST_F32, 1, &sc, c}};
    CHECK_OK(ferry_tensors_save(path, src, 3, NULL));
}

TEST(a_killed_saves_temporary_goes_at_the_next_save)
{
    test_make_dir("tensors_stale");
    char path[512], stale[600], live[600];
    int fd;
    test_path("abc.safetensors", path);
    test_leave_temps(path, stale, live, &fd);
    save_abc(path);
    test_check_temps(stale, live, fd);
    test_remove_dir();
}

TEST(select_and_rename)
{
    test_make_dir("tensors_sel");
    char path[512];
    test_path("abc.safetensors", path);
    save_abc(path);
    ferry_tensors *t;
    const char *names[] = {"model.b", "opt.c"};
    ferry_tensors_opts o = {.names = names, .nnames = 2};
    CHECK_OK(ferry_tensors_open(&t, path, &o));
    CHECK_EQ(ferry_tensors_count(t), 2);
    CHECK_EQ(ferry_tensors_file_count(t), 3);
    CHECK(ferry_tensors_find(t, "model.a") == NULL);
    CHECK_EQ(((const float *)ferry_tensors_find(t, "opt.c")->data)[2], 9);
    ferry_tensors_free(t);

    ferry_tensors_opts p = {.prefix = "model.", .strip_prefix = "model.", .add_prefix = "net/"};
    CHECK_OK(ferry_tensors_open(&t, path, &p));
    CHECK_EQ(ferry_tensors_count(t), 2);
    const ferry_tensor_info *ti = ferry_tensors_find(t, "net/b");
    CHECK(ti != NULL);
    CHECK(!strcmp(ti->file_name, "model.b"));
    CHECK_EQ(((const float *)ti->data)[1], 6);
    ferry_tensors_free(t);

    const char *missing[] = {"model.a", "model.z"};
    ferry_tensors_opts m = {.names = missing, .nnames = 2};
    CHECK_RC(ferry_tensors_open(&t, path, &m), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "no tensor named \"model.z\"");
    CHECK(t == NULL);
    m.flags = FERRY_TENSORS_ALLOW_MISSING;
    CHECK_OK(ferry_tensors_open(&t, path, &m));
    CHECK_EQ(ferry_tensors_count(t), 1);
    ferry_tensors_free(t);

    /* names and prefix together: both must pass */
    ferry_tensors_opts both = {.names = names, .nnames = 2, .prefix = "opt."};
    CHECK_OK(ferry_tensors_open(&t, path, &both));
    CHECK_EQ(ferry_tensors_count(t), 1);
    ferry_tensors_free(t);

    /* stripping "model." from model.a gives "a", which collides with nothing; strip
     * everything up to the dot of each and they do */
    ferry_tensors_opts clash = {.strip_prefix = "model.", .add_prefix = "x"};
    CHECK_OK(ferry_tensors_open(&t, path, &clash));
    CHECK(ferry_tensors_find(t, "xa") && ferry_tensors_find(t, "xopt.c"));
    ferry_tensors_free(t);
    float d[1] = {0};
    int64_t sd = 1;
    ferry_tensor_src src2[] = {{"a", FERRY_ST_F32, 1, &sd, d}, {"p.a", FERRY_ST_F32, 1, &sd, d}};
    CHECK_OK(ferry_tensors_save(path, src2, 2, NULL));
    ferry_tensors_opts clash2 = {.strip_prefix = "p."};
    CHECK_RC(ferry_tensors_open(&t, path, &clash2), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "after renaming");
    test_remove_dir();
}

TEST(copy_outlives_file)
{
    test_make_dir("tensors_copy");
    char path[512];
    test_path("abc.safetensors", path);
    save_abc(path);
    ferry_tensors *t;
    ferry_tensors_opts o = {.flags = FERRY_TENSORS_COPY};
    CHECK_OK(ferry_tensors_open(&t, path, &o));
    CHECK_EQ(unlink(path), 0);
    const ferry_tensor_info *ti = ferry_tensors_find(t, "model.a");
    CHECK(((uintptr_t)ti->data & 63) == 0);
    CHECK_EQ(((const float *)ti->data)[3], 4);
    CHECK_EQ(((const float *)ferry_tensors_find(t, "opt.c")->data)[0], 7);
    CHECK_OK(ferry_tensors_verify(t, 0));
    ferry_tensors_free(t);
    test_remove_dir();
}

/* A file cut short while it is open: verify (a read of the mapping) is an error
 * naming it, not a SIGBUS. */
TEST(a_file_cut_short_under_verify_is_an_error)
{
    test_make_dir("tensors_cut");
    char path[512];
    test_path("big.safetensors", path);
    static float big[1 << 18];
    int64_t shape = 1 << 18;
    ferry_tensor_src src[] = {{"w", FERRY_ST_F32, 1, &shape, big}};
    CHECK_OK(ferry_tensors_save(path, src, 1, NULL));
    ferry_tensors *t;
    ferry_tensors_opts o = {.flags = FERRY_TENSORS_NO_VERIFY};
    CHECK_OK(ferry_tensors_open(&t, path, &o));
    CHECK_EQ(truncate(path, 4096), 0);
    CHECK_RC(ferry_tensors_verify(t, 0), FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), "tensor \"w\": the file was cut short while it was read");
    ferry_tensors_free(t);
    test_remove_dir();
}

TEST(crc_mismatch)
{
    test_make_dir("tensors_crc");
    char path[512];
    test_path("abc.safetensors", path);
    save_abc(path);
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    b[n - 1] ^= 0x40; /* the last byte of the last tensor */
    test_write_file(path, b, n);
    free(b);
    ferry_tensors *t;
    CHECK_RC(ferry_tensors_open(&t, path, NULL), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "abc.safetensors: tensor \"opt.c\" at offset");
    CHECK_CONTAINS(ferry_last_errmsg(), "CRC mismatch");
    ferry_tensors_opts o = {.flags = FERRY_TENSORS_COPY};
    CHECK_RC(ferry_tensors_open(&t, path, &o), FERRY_ECORRUPT);
    /* asked not to check: it opens, and verify finds it */
    o.flags = FERRY_TENSORS_NO_VERIFY;
    CHECK_OK(ferry_tensors_open(&t, path, &o));
    CHECK_OK(ferry_tensors_verify(t, 0));
    CHECK_RC(ferry_tensors_verify(t, 2), FERRY_ECORRUPT);
    CHECK_RC(ferry_tensors_verify(t, 3), FERRY_ERANGE);
    ferry_tensors_free(t);
    /* a selection that leaves the damaged tensor out opens */
    o.flags = 0;
    o.prefix = "model.";
    CHECK_OK(ferry_tensors_open(&t, path, &o));
    ferry_tensors_free(t);
    /* without CRCs nothing is checked, and verify says there is nothing */
    float a[1] = {1};
    int64_t sa = 1;
    ferry_tensor_src src[] = {{"a", FERRY_ST_F32, 1, &sa, a}};
    ferry_tensors_save_opts so = {.no_crc = 1};
    CHECK_OK(ferry_tensors_save(path, src, 1, &so));
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    CHECK(!ferry_tensors_at(t, 0)->has_crc);
    CHECK_RC(ferry_tensors_verify(t, 0), FERRY_ENOENT);
    CHECK_EQ(ferry_tensors_metadata_count(t), 0);
    ferry_tensors_free(t);
    test_remove_dir();
}

/* ---- ../shared/testdata/safetensors: what SOURCES.md says of each file ---- */

static ferry_tensors *open_shared(const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, SHARED_ST "%s", file);
    test_need_shared(path);
    ferry_tensors *t;
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    return t;
}

static const ferry_tensor_info *one(ferry_tensors *t, const char *name, ferry_st_dtype dt,
                                    int64_t dim0)
{
    const ferry_tensor_info *ti = ferry_tensors_find(t, name);
    CHECK(ti != NULL);
    CHECK_EQ(ti->dtype, dt);
    CHECK_EQ(ti->ndim, 1);
    CHECK_EQ(ti->shape[0], dim0);
    CHECK(!ti->has_crc);
    return ti;
}

/* range(-3, 3) in each dtype, little-endian */
static void check_kolanich(const ferry_tensor_info *ti)
{
    const uint8_t *p = ti->data;
    for (int i = 0; i < 6; i++) {
        int v = i - 3;
        switch (ti->dtype) {
        case FERRY_ST_I8:
        case FERRY_ST_U8:
            CHECK_EQ((int8_t)p[i], v);
            break;
        case FERRY_ST_I16:
        case FERRY_ST_U16: {
            int16_t x;
            memcpy(&x, p + 2 * i, 2);
            CHECK_EQ(x, v);
            break;
        }
        case FERRY_ST_I32:
        case FERRY_ST_U32: {
            int32_t x;
            memcpy(&x, p + 4 * i, 4);
            CHECK_EQ(x, v);
            break;
        }
        case FERRY_ST_F16: {
            static const uint16_t want[6] = {0xc200, 0xc000, 0xbc00, 0, 0x3c00, 0x4000};
            uint16_t x;
            memcpy(&x, p + 2 * i, 2);
            CHECK_EQ(x, want[i]);
            break;
        }
        case FERRY_ST_F32: {
            float x;
            memcpy(&x, p + 4 * i, 4);
            CHECK(x == (float)v);
            break;
        }
        case FERRY_ST_F64: {
            double x;
            memcpy(&x, p + 8 * i, 8);
            CHECK(x == (double)v);
            break;
        }
        default:
            CHECK(0);
        }
    }
}

TEST(shared_kolanich_single)
{
    static const struct {
        const char *file, *name;
        ferry_st_dtype dt;
    } files[] = {
        {"kolanich_sample_F16.safetensors", "e", FERRY_ST_F16},
        {"kolanich_sample_F32.safetensors", "f", FERRY_ST_F32},
        {"kolanich_sample_F64.safetensors", "d", FERRY_ST_F64},
        {"kolanich_sample_I16.safetensors", "h", FERRY_ST_I16},
        {"kolanich_sample_I32.safetensors", "i", FERRY_ST_I32},
        {"kolanich_sample_I8.safetensors", "b", FERRY_ST_I8},
        {"kolanich_sample_U16.safetensors", "H", FERRY_ST_U16},
        {"kolanich_sample_U32.safetensors", "I", FERRY_ST_U32},
        {"kolanich_sample_U8.safetensors", "B", FERRY_ST_U8},
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        ferry_tensors *t = open_shared(files[f].file);
        CHECK_EQ(ferry_tensors_count(t), 1);
        check_kolanich(one(t, files[f].name, files[f].dt, 6));
        CHECK(!strcmp(ferry_tensors_metadata_get(t, "test"), "a"));
        ferry_tensors_free(t);
    }
}

TEST(shared_kolanich_overall)
{
    ferry_tensors *t = open_shared("kolanich_sample_overall.safetensors");
    static const struct {
        const char *name;
        ferry_st_dtype dt;
        uint64_t begin, end;
    } want[] = {{"B", FERRY_ST_U8, 0, 6},      {"H", FERRY_ST_U16, 6, 18},
                {"I", FERRY_ST_U32, 18, 42},   {"b", FERRY_ST_I8, 42, 48},
                {"d", FERRY_ST_F64, 48, 96},   {"e", FERRY_ST_F16, 96, 108},
                {"f", FERRY_ST_F32, 108, 132}, {"h", FERRY_ST_I16, 132, 144},
                {"i", FERRY_ST_I32, 144, 168}};
    CHECK_EQ(ferry_tensors_count(t), 9);
    CHECK_EQ(ferry_tensors_metadata_count(t), 1);
    for (size_t i = 0; i < 9; i++) {
        const ferry_tensor_info *ti = one(t, want[i].name, want[i].dt, 6);
        CHECK_EQ(ti->offset, 8 + 526 + want[i].begin);
        CHECK_EQ(ti->nbytes, want[i].end - want[i].begin);
        CHECK(ferry_tensors_at(t, i) == ti); /* file order */
        check_kolanich(ti);
    }
    ferry_tensors_free(t);
}

TEST(shared_candle_i64)
{
    ferry_tensors *t = open_shared("candle_encodec_jfk_codes_I64.safetensors");
    CHECK_EQ(ferry_tensors_count(t), 1);
    const ferry_tensor_info *ti = ferry_tensors_find(t, "codes");
    CHECK(ti && ti->dtype == FERRY_ST_I64 && ti->ndim == 3);
    CHECK(ti->shape[0] == 1 && ti->shape[1] == 2 && ti->shape[2] == 828);
    CHECK_EQ(ti->offset, 8 + 72);
    CHECK_EQ(ti->nbytes, 13248);
    static const int64_t first[10] = {865, 62, 408, 408, 475, 1022, 432, 325, 491, 879};
    const uint8_t *p = ti->data;
    for (int i = 0; i < 1656; i++) {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        CHECK(v >= 0 && v <= 1023);
        if (i < 10)
            CHECK_EQ(v, first[i]);
    }
    ferry_tensors_free(t);
}

TEST(shared_syoyo_f64)
{
    ferry_tensors *t = open_shared("syoyo_model_f64_random.safetensors");
    CHECK_EQ(ferry_tensors_count(t), 2);
    const ferry_tensor_info *w1 = ferry_tensors_find(t, "weight1"),
                            *w2 = ferry_tensors_find(t, "weight2");
    CHECK(w1 && w2);
    CHECK(w1->ndim == 2 && w1->shape[0] == 8 && w1->shape[1] == 8);
    CHECK(w2->ndim == 2 && w2->shape[0] == 16 && w2->shape[1] == 16);
    CHECK_EQ(w1->offset, 8 + 136);
    CHECK_EQ(w2->offset, 8 + 136 + 512);
    static const double first[4] = {0.08001627472781947, 0.7158429049744487, 0.37342849283549107,
                                    0.22132515212450743};
    for (int i = 0; i < 4; i++) {
        double v;
        memcpy(&v, (const uint8_t *)w1->data + 8 * i, 8);
        CHECK(v == first[i]);
    }
    for (int i = 0; i < 256; i++) {
        double v;
        memcpy(&v, (const uint8_t *)w2->data + 8 * i, 8);
        CHECK(v >= 0 && v < 1);
    }
    ferry_tensors_free(t);
}

TEST(shared_syoyo_abuse)
{
    const char *path = SHARED_ST "syoyo_abuse_attempt_1_header_len_exceeds_file.safetensors";
    test_need_shared(path);
    ferry_tensors *t;
    CHECK_RC(ferry_tensors_open(&t, path, NULL), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "syoyo_abuse_attempt_1_header_len_exceeds_file");
    CHECK_CONTAINS(ferry_last_errmsg(), "header length 1000 runs past the end of the file (88");
    CHECK(t == NULL);
}

/* Every file of the directory is covered by a test above. */
TEST(shared_all_files_known)
{
    test_need_shared(SHARED_ST "kolanich_sample_F16.safetensors");
    DIR *d = opendir(SHARED_ST);
    CHECK(d != NULL);
    struct dirent *e;
    int n = 0, bad = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, SHARED_ST "%s", e->d_name);
        ferry_tensors *t;
        int rc = ferry_tensors_open(&t, path, NULL);
        bool hostile = strstr(e->d_name, "abuse") != NULL;
        if (hostile ? rc != FERRY_ECORRUPT : rc != 0) {
            printf("%s: %d %s\n", e->d_name, rc, ferry_last_errmsg());
            bad++;
        }
        ferry_tensors_free(t);
        n++;
    }
    closedir(d);
    CHECK_EQ(n, 13);
    CHECK_EQ(bad, 0);
}

/* ---- hostile headers ---- */

static int open_header(const char *json, const void *data, size_t ndata, ferry_tensors **t)
{
    size_t hn = strlen(json);
    uint8_t *b = malloc(8 + hn + ndata + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, json, hn);
    if (ndata)
        memcpy(b + 8 + hn, data, ndata);
    /* the handle borrows b; it is not used after the call */
    int rc = ferry_tensors_open_memory(t, b, 8 + hn + ndata, "h.safetensors", NULL);
    if (rc == 0)
        ferry_tensors_free(*t);
    free(b);
    return rc;
}

TEST(hostile_headers)
{
    static const struct {
        const char *json;
        size_t ndata;
        const char *want; /* NULL: accepted */
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
        {"{}", 0, NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  \n ", 8, NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[{\"y\":null}]}}", 8,
         NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
         "cover 8 bytes of data, the file holds 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
         "past the end of the data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
         "hold 8 bytes, but F32 of 3 elements takes 12"},
        {"{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "tensor \"a\": unknown dtype \"F31\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "tensor \"a\" appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "leave a gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before"},
        {"{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8"},
        {"{\"\xc0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "invalid UTF-8"},
        {"{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "lone high surrogate"},
        {"{\"a\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\\u0000"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "bad dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,4]}}", 4,
         "integer too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "element count overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
         "',' or '}' expected"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}x", 4,
         "bytes after the header"},
        {"[]", 0, "not a JSON object"},
        {"", 0, "not a JSON object"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor \"a\": no dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "no shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "no data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "dtype given twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
         "not [BEGIN, END]"},
        {"{\"a\":7}", 0, "is not an object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of \"k\" is not a string"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ appears twice"},
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "key \"k\" appears twice"},
        {"{\"__metadata__\":{\"ferry.crc32c\":\"0000000g\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "is not 8 hex digits and a comma"},
        {"{\"__metadata__\":{\"ferry.crc32c\":\"00000000,00000000\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "not 8 hex digits for each of the 1 tensors"},
        {"{\"__metadata__\":{\"ferry.crc32c\":\"00000000;00000000\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "tensor \"a\": its stored CRC (number 0"},
        {"{\"__metadata__\":{\"ferry.crc32c\":\"\",\"ferry.crc32c\":\"\"}}", 0,
         "key \"ferry.crc32c\" appears twice"},
        {"{\"__metadata__\":{\"ferry.crc32c\":\"00000001\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "CRC mismatch"},
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1,
         "do not fill whole bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "bad tensor name"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"u\":tru}}", 4,
         "bad value"},
        /* keys and dtypes written with escapes or spaces read as the plain ones */
        {"{\"a\":{\"d\\u0074ype\":\"F\\u00332\",\"sh\\u0061pe\":[2],\"data_\\u006fffsets\":[0,8]}}",
         8, NULL},
        {"{ \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] } }",
         8, NULL},
        {"{\"a\":{\"dtype\":\"F\\u00331\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "unknown dtype \"F31\""},
        {"{\"a\":{\"dtype\":\"F3\xc3\xa9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "unknown dtype \"F3\xc3\xa9\""},
        {"{\"a\":{\"dtype\":\"F32F32F32F32F32F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "unknown dtype \"F32F32F32F32F32F32\""},
        {"{\"a\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"\""},
        {"{\"a\":{\"dtypes\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "no dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[9000000000000000000],\"data_offsets\":[0,4]}}", 4,
         "9000000000000000000 elements of U8 overflow a 64-bit byte count"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[12345678901234567890],\"data_offsets\":[0,4]}}", 4,
         "dimension 12345678901234567890 too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t data[16] = {0};
        ferry_tensors *t;
        int rc = open_header(cases[i].json, data, cases[i].ndata, &t);
        if (!cases[i].want) {
            if (rc != 0)
                printf("case %zu: %s\n", i, ferry_last_errmsg());
            CHECK_OK(rc);
            continue;
        }
        if (rc != FERRY_ECORRUPT)
            printf("case %zu: rc %d %s\n", i, rc, ferry_last_errmsg());
        CHECK_RC(rc, FERRY_ECORRUPT);
        CHECK(t == NULL);
        CHECK_CONTAINS(ferry_last_errmsg(), "h.safetensors");
        if (!strstr(ferry_last_errmsg(), cases[i].want))
            printf("case %zu\n", i);
        CHECK_CONTAINS(ferry_last_errmsg(), cases[i].want);
    }
}

TEST(hostile_depth_and_sizes)
{
    /* deep nesting inside an unknown key: refused at the depth limit, no recursion
     * beyond it */
    size_t depth = 100000;
    char *j = malloc(2 * depth + 128);
    size_t k = (size_t)sprintf(j, "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],"
                                  "\"x\":");
    for (size_t i = 0; i < depth; i++)
        j[k++] = '[';
    for (size_t i = 0; i < depth; i++)
        j[k++] = ']';
    strcpy(j + k, "}}");
    ferry_tensors *t;
    uint8_t data[4] = {0};
    CHECK_RC(open_header(j, data, 4, &t), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "nested too deeply");
    free(j);
    /* shapes of more than FERRY_TENSORS_MAX_DIMS dimensions */
    char s[1024];
    k = (size_t)sprintf(s, "{\"a\":{\"dtype\":\"U8\",\"shape\":[");
    for (int i = 0; i < 65; i++)
        k += (size_t)sprintf(s + k, "%s1", i ? "," : "");
    sprintf(s + k, "],\"data_offsets\":[0,1]}}");
    CHECK_RC(open_header(s, data, 1, &t), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "more than 64 dimensions");
    /* header length over the limit, and under 8 bytes of file */
    uint8_t big[16] = {0};
    big[4] = 1; /* 2^32 */
    CHECK_RC(ferry_tensors_open_memory(&t, big, 16, "big", NULL), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "big: header length 4294967296 is over the limit");
    ferry_tensors_opts o = {.max_header = 4};
    CHECK_RC(open_header("{}  ", NULL, 0, &t), 0);
    CHECK_RC(
        ferry_tensors_open_memory(&t, (const uint8_t *)"\x06\0\0\0\0\0\0\0{}    ", 14, "lim", &o),
        FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "over the limit of 4 bytes");
    CHECK_RC(ferry_tensors_open_memory(&t, big, 7, "short", NULL), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "short: 7 bytes, shorter than");
}

TEST(truncated_files)
{
    /* every cut of a valid file is refused, none crashes */
    test_make_dir("tensors_cut");
    char path[512];
    test_path("abc.safetensors", path);
    save_abc(path);
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    for (size_t cut = 0; cut < n; cut++) {
        ferry_tensors *t;
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, b, cut);
        CHECK_RC(ferry_tensors_open_memory(&t, c, cut, "cut", NULL), FERRY_ECORRUPT);
        free(c);
    }
    free(b);
    test_remove_dir();
}

TEST(save_refuses_bad_input)
{
    test_make_dir("tensors_bad");
    char path[512];
    test_path("x.safetensors", path);
    float a[2] = {1, 2};
    int64_t s2 = 2, sneg = -1;
    ferry_tensor_src dup[] = {{"a", FERRY_ST_F32, 1, &s2, a}, {"a", FERRY_ST_F32, 1, &s2, a}};
    CHECK_RC(ferry_tensors_save(path, dup, 2, NULL), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "two tensors are named \"a\"");
    ferry_tensor_src meta[] = {{"__metadata__", FERRY_ST_F32, 1, &s2, a}};
    CHECK_RC(ferry_tensors_save(path, meta, 1, NULL), FERRY_EINVAL);
    ferry_tensor_src badname[] = {{"\xff", FERRY_ST_F32, 1, &s2, a}};
    CHECK_RC(ferry_tensors_save(path, badname, 1, NULL), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "not valid UTF-8");
    ferry_tensor_src baddt[] = {{"a", (ferry_st_dtype)99, 1, &s2, a}};
    CHECK_RC(ferry_tensors_save(path, baddt, 1, NULL), FERRY_EINVAL);
    ferry_tensor_src neg[] = {{"a", FERRY_ST_F32, 1, &sneg, a}};
    CHECK_RC(ferry_tensors_save(path, neg, 1, NULL), FERRY_EINVAL);
    int64_t s3 = 3;
    ferry_tensor_src f4[] = {{"a", FERRY_ST_F4, 1, &s3, a}};
    CHECK_RC(ferry_tensors_save(path, f4, 1, NULL), FERRY_EINVAL);
    ferry_tensor_src nodata[] = {{"a", FERRY_ST_F32, 1, &s2, NULL}};
    CHECK_RC(ferry_tensors_save(path, nodata, 1, NULL), FERRY_EINVAL);
    ferry_tensor_src ok[] = {{"a", FERRY_ST_F32, 1, &s2, a}};
    const char *k[] = {"ferry.crc32c"}, *v[] = {"x"};
    ferry_tensors_save_opts so = {.meta_keys = k, .meta_values = v, .nmeta = 1};
    CHECK_RC(ferry_tensors_save(path, ok, 1, &so), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "is ferry's own");
    ferry_tensors_save_opts sc = {.chunk_bytes = 100};
    CHECK_RC(ferry_tensors_save(path, ok, 1, &sc), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "chunk_bytes");
    /* a directory that does not exist */
    CHECK_RC(ferry_tensors_save("/nonexistent-dir/x.safetensors", ok, 1, NULL), FERRY_ENOENT);
    CHECK_EQ(count_dir(test_dir), 0);
    test_remove_dir();
}

TEST(many_tensors)
{
    test_make_dir("tensors_many");
    char path[512];
    test_path("many.safetensors", path);
    enum { N = 10000 };
    ferry_tensor_src *src = calloc(N, sizeof *src);
    char(*names)[32] = malloc(N * sizeof *names);
    int64_t shape = 3;
    uint16_t vals[N][3];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], 32, "blocks.%d.weight", i);
        for (int k = 0; k < 3; k++)
            vals[i][k] = (uint16_t)(i + k);
        src[i] = (ferry_tensor_src){names[i], FERRY_ST_BF16, 1, &shape, vals[i]};
    }
    CHECK_OK(ferry_tensors_save(path, src, N, NULL));
    ferry_tensors *t;
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    CHECK_EQ(ferry_tensors_count(t), N);
    for (int i = 0; i < N; i += 97) {
        const ferry_tensor_info *ti = ferry_tensors_find(t, names[i]);
        CHECK(ti != NULL);
        CHECK(memcmp(ti->data, vals[i], 6) == 0);
    }
    ferry_tensors_free(t);
    free(src);
    free(names);
    test_remove_dir();
}

/* ---- a writer killed at any moment leaves the old file or the whole new one ---- */

static uint64_t hash_file_tensors(const char *path, int *ok)
{
    ferry_tensors *t;
    *ok = ferry_tensors_open(&t, path, NULL) == 0;
    if (!*ok)
        return 0;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < ferry_tensors_count(t); i++)
        h = test_hash(h, ferry_tensors_at(t, i)->data, ferry_tensors_at(t, i)->nbytes);
    ferry_tensors_free(t);
    return h;
}

TEST(kill_sweep)
{
    test_make_dir("tensors_kill");
    char path[512];
    test_path("ckpt.safetensors", path);
    enum { N = 6 };
    size_t size = 3 << 20;
    uint8_t *bufs[2][N];
    int64_t shape[N];
    char names[N][8];
    ferry_tensor_src src[2][N];
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < N; i++) {
            size_t nb = i < 2 ? size : 4096 * (size_t)(i + 1);
            bufs[v][i] = malloc(nb);
            fill(bufs[v][i], nb, (uint32_t)(v * 100 + i));
            shape[i] = (int64_t)nb;
            snprintf(names[i], sizeof names[i], "w%d", i);
            src[v][i] = (ferry_tensor_src){names[i], FERRY_ST_U8, 1, &shape[i], bufs[v][i]};
        }
    ferry_tensors_save_opts so = {.threads = 3, .chunk_bytes = 256 << 10};
    CHECK_OK(ferry_tensors_save(path, src[1], N, &so));
    int ok;
    uint64_t want[2];
    want[1] = hash_file_tensors(path, &ok);
    CHECK(ok);
    CHECK_OK(ferry_tensors_save(path, src[0], N, &so));
    want[0] = hash_file_tensors(path, &ok);
    CHECK(ok && want[0] != want[1]);
    /* how long one save takes, to spread the kills over it */
    uint64_t t0 = ferry_now_ns();
    CHECK_OK(ferry_tensors_save(path, src[0], N, &so));
    uint64_t dur = ferry_now_ns() - t0;
    int seen[2] = {0, 0};
    for (int k = 0; k < 40; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* alternate between the two versions until killed */
            for (int r = 1;; r ^= 1)
                if (ferry_tensors_save(path, src[r], N, &so) != 0)
                    _exit(3);
        }
        struct timespec ts = {0, (long)(dur * (uint64_t)(k % 20 + 1) / 7 % 1000000000u)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st));
        uint64_t h = hash_file_tensors(path, &ok);
        if (!ok)
            printf("after kill %d: %s\n", k, ferry_last_errmsg());
        CHECK(ok);
        CHECK(h == want[0] || h == want[1]);
        seen[h == want[1]]++;
    }
    printf("kills: %d left version 0, %d version 1\n", seen[0], seen[1]);
    /* temporaries of killed writers may stay (never taken for the file); nothing
     * else is there */
    DIR *d = opendir(test_dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strcmp(e->d_name, "ckpt.safetensors"))
            CHECK(strstr(e->d_name, "ckpt.safetensors.tmp.") == e->d_name);
    closedir(d);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < N; i++)
            free(bufs[v][i]);
    test_remove_dir();
}

TEST(alloc_failures)
{
    test_make_dir("tensors_oom");
    char path[512], other[512];
    test_path("abc.safetensors", path);
    test_path("new.safetensors", other);
    save_abc(path);
    static float a[4] = {1, 2, 3, 4};
    static int64_t sa = 4;
    const char *k[] = {"m"}, *v[] = {"v"};
    ferry_tensor_src src[] = {{"x", FERRY_ST_F32, 1, &sa, a}, {"y", FERRY_ST_F32, 1, &sa, a}};
    ferry_tensors_save_opts so = {.meta_keys = k, .meta_values = v, .nmeta = 1, .threads = 1};
    bool open_done = false, save_done = false;
    for (long n = 0; n < 200 && !(open_done && save_done); n++) {
        ferry_tensors *t;
        ferry_tensors_opts o = {
            .flags = n % 2 ? FERRY_TENSORS_COPY : 0, .strip_prefix = "model.", .threads = 1};
        ferry__test_fail_alloc(n);
        int rc = ferry_tensors_open(&t, path, &o);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            open_done = true;
            CHECK_EQ(((const float *)ferry_tensors_find(t, "a")->data)[0], 1);
            ferry_tensors_free(t);
        } else {
            CHECK_RC(rc, FERRY_ENOMEM);
            CHECK(t == NULL);
        }
        ferry__test_fail_alloc(n);
        rc = ferry_tensors_save(other, src, 2, &so);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            save_done = true;
            CHECK_EQ(unlink(other), 0);
        } else {
            CHECK_RC(rc, FERRY_ENOMEM);
        }
        CHECK_EQ(count_dir(test_dir), 1);
    }
    CHECK(open_done && save_done);
    test_remove_dir();
}

/* ---- the command: ls, verify and cat on .safetensors ---- */

#ifdef FERRY_CLI
TEST(cli_ls_verify_cat)
{
    test_make_dir("tensors_cli");
    char path[512], args[1024], out[8192];
    test_path("abc.safetensors", path);
    save_abc(path);
    snprintf(args, sizeof args, "ls %s", path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "3 tensors  36 bytes of data  3 CRCs");
    CHECK_CONTAINS(out, "\"model.b\"  F32 [2]  8 bytes at");
    CHECK_CONTAINS(out, "crc32c ");
    snprintf(args, sizeof args, "verify %s", path);
    test_ferry_cli_says(args, 0, "3 CRCs checked, 0 without a CRC (not checked), 0 problems");
    snprintf(args, sizeof args, "cat %s opt.c model.a -n 2", path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "{\"name\":\"model.a\",\"dtype\":\"F32\",\"shape\":[4],\"crc32c\":\"");
    CHECK_CONTAINS(out, "\"numel\":4,\"shown\":2,\"values\":[1,2]}");
    CHECK_CONTAINS(out, "\"values\":[7,8]}");
    snprintf(args, sizeof args, "cat %s nope", path);
    test_ferry_cli_says(args, 1, "no tensor named \"nope\"");
    /* damage: verify names the tensor, cat refuses, ls still lists */
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    b[n - 1] ^= 1;
    test_write_file(path, b, n);
    free(b);
    snprintf(args, sizeof args, "verify %s", path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 1);
    CHECK_CONTAINS(out, "damaged: ");
    CHECK_CONTAINS(out, "tensor \"opt.c\" at offset");
    CHECK_CONTAINS(out, "1 problem\n");
    snprintf(args, sizeof args, "cat %s", path);
    test_ferry_cli_says(args, 1, "CRC mismatch");
    snprintf(args, sizeof args, "ls %s", path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    /* a hostile file: a clear error naming it */
    const char *abuse = SHARED_ST "syoyo_abuse_attempt_1_header_len_exceeds_file.safetensors";
    if (access(abuse, R_OK) == 0) {
        snprintf(args, sizeof args, "verify %s", abuse);
        test_ferry_cli_says(args, 1, "header length 1000 runs past the end of the file");
    }
    test_remove_dir();
}
#endif

/* No tensors at all; and a file replaced while a handle maps it: the handle keeps
 * the old bytes (rename, not rewrite). */
TEST(empty_and_replaced_under_a_reader)
{
    test_make_dir("tensors_empty");
    char path[512];
    test_path("e.safetensors", path);
    CHECK_OK(ferry_tensors_save(path, NULL, 0, NULL));
    ferry_tensors *t;
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    CHECK_EQ(ferry_tensors_count(t), 0);
    CHECK_EQ(ferry_tensors_metadata_count(t), 0);
    ferry_tensors_free(t);
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    CHECK_EQ(n, 16); /* the length, "{}" and 6 spaces of padding */
    CHECK(memcmp(b + 8, "{}      ", 8) == 0);
    free(b);

    save_abc(path);
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    const ferry_tensor_info *a = ferry_tensors_find(t, "model.a");
    float z[4] = {0, 0, 0, 0};
    int64_t s4 = 4;
    ferry_tensor_src src[] = {{"model.a", FERRY_ST_F32, 1, &s4, z}};
    CHECK_OK(ferry_tensors_save(path, src, 1, NULL));
    CHECK_EQ(((const float *)a->data)[3], 4); /* still the old file's bytes */
    CHECK_OK(ferry_tensors_verify(t, 0));
    ferry_tensors_free(t);
    CHECK_OK(ferry_tensors_open(&t, path, NULL));
    CHECK_EQ(((const float *)ferry_tensors_find(t, "model.a")->data)[3], 0);
    ferry_tensors_free(t);
    test_remove_dir();
}
