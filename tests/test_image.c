/*
 * Image decoding: the JPEG and PNG conformance files under ../shared/testdata
 * against their reference decodes (SOURCES.md), the corrupt files, limits, dst
 * size and header-only info.
 */
#include "harness.h"

#include <ferry/image.h>

#include <dirent.h>

#define JPEG_DIR FERRY_SHARED_DIR "/testdata/jpeg"
#define PNG_DIR FERRY_SHARED_DIR "/testdata/png"

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        test_fail(__FILE__, __LINE__, "cannot open %s", path);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    CHECK(len >= 0);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    CHECK(b != NULL);
    CHECK(fread(b, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void need_shared(void)
{
    DIR *d = opendir(FERRY_SHARED_DIR "/testdata/jpeg");
    if (!d)
        SKIP("../shared/testdata is absent");
    closedir(d);
}

/* Decodes a file; returns the pixels (malloc'd) or NULL with *rc set. */
static unsigned char *decode_file(const char *path, const ferry_decode_opts *o,
                                  ferry_image_info *info, int *rc)
{
    size_t n;
    unsigned char *b = slurp(path, &n);
    ferry_image_info hi;
    *rc = ferry_image_info_get(b, n, &hi);
    if (*rc < 0) {
        free(b);
        return NULL;
    }
    size_t need;
    *rc = ferry_image_out_size(&hi, o, &need);
    if (*rc < 0) {
        free(b);
        return NULL;
    }
    unsigned char *px = malloc(need);
    CHECK(px != NULL);
    *rc = ferry_image_decode(b, n, o, px, need, info);
    free(b);
    if (*rc < 0) {
        free(px);
        return NULL;
    }
    CHECK_EQ(info->out_channels, hi.out_channels);
    CHECK_EQ(info->width, hi.width);
    CHECK_EQ(info->height, hi.height);
    return px;
}

static uint32_t crc32(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

TEST(png_valid_match_reference_crc)
{
    need_shared();
    /* The CRCs are read from SOURCES.md itself so that no number is copied here. */
    size_t n;
    char *md = (char *)slurp(FERRY_SHARED_DIR "/testdata/SOURCES.md", &n);
    md[n] = 0;
    DIR *d = opendir(PNG_DIR "/valid");
    CHECK(d != NULL);
    struct dirent *e;
    int count = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".png"))
            continue;
        char key[300], path[600];
        snprintf(key, sizeof key, "`png/valid/%s`", e->d_name);
        const char *row = strstr(md, key);
        if (!row)
            test_fail(__FILE__, __LINE__, "%s not in SOURCES.md", e->d_name);
        const char *nl = strchr(row, '\n');
        const char *norm = strstr(row, "16-bit->high byte) = ");
        CHECK(norm && (!nl || norm < nl));
        uint32_t want = (uint32_t)strtoul(norm + strlen("16-bit->high byte) = "), NULL, 10);
        snprintf(path, sizeof path, "%s/valid/%s", PNG_DIR, e->d_name);
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        o.keep_alpha = 1;
        ferry_image_info hi, info;
        size_t bn;
        unsigned char *b = slurp(path, &bn);
        CHECK_OK(ferry_image_info_get(b, bn, &hi));
        free(b);
        o.grey = hi.channels <= 2; /* the normalized form keeps grey as grey */
        int rc;
        unsigned char *px = decode_file(path, &o, &info, &rc);
        if (!px)
            test_fail(__FILE__, __LINE__, "%s: %s: %s", e->d_name, ferry_errname(rc),
                      ferry_last_errmsg());
        size_t sz = (size_t)info.width * info.height * (size_t)info.out_channels;
        uint32_t got = crc32(px, sz);
        if (got != want)
            test_fail(__FILE__, __LINE__, "%s: crc %u, want %u (%ux%u ch %d)", e->d_name, got, want,
                      info.width, info.height, info.out_channels);
        /* RGB without alpha decodes too, with the same colour samples */
        ferry_decode_opts_default(&o);
        unsigned char *rgb = decode_file(path, &o, &info, &rc);
        CHECK(rgb != NULL);
        CHECK_EQ(info.out_channels, 3);
        free(rgb);
        free(px);
        count++;
    }
    closedir(d);
    free(md);
    CHECK(count >= 30);
}

/* Compares a JPEG's decode with reference_png/<same name>.png within |diff| <= 3. */
static void check_against_reference(const char *jpg, const char *ref, int lenient)
{
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    ferry_image_info ri, ji;
    int rc;
    size_t bn;
    unsigned char *b = slurp(ref, &bn);
    CHECK_OK(ferry_image_info_get(b, bn, &ri));
    free(b);
    o.grey = ri.channels <= 2;
    unsigned char *want = decode_file(ref, &o, &ri, &rc);
    if (!want)
        test_fail(__FILE__, __LINE__, "%s: %s", ref, ferry_last_errmsg());
    o.lenient = lenient;
    unsigned char *got = decode_file(jpg, &o, &ji, &rc);
    if (!got)
        test_fail(__FILE__, __LINE__, "%s: %s", jpg, ferry_last_errmsg());
    CHECK_EQ(ji.format, FERRY_IMAGE_JPEG);
    CHECK_EQ(ji.width, ri.width);
    CHECK_EQ(ji.height, ri.height);
    CHECK_EQ(ji.out_channels, ri.out_channels);
    size_t sz = (size_t)ji.width * ji.height * (size_t)ji.out_channels;
    int maxd = 0;
    for (size_t i = 0; i < sz; i++) {
        int dd = abs((int)got[i] - (int)want[i]);
        if (dd > maxd)
            maxd = dd;
    }
    if (maxd > 3)
        test_fail(__FILE__, __LINE__, "%s: max diff %d > 3", jpg, maxd);
    free(got);
    free(want);
}

TEST(jpeg_valid_match_reference)
{
    need_shared();
    DIR *d = opendir(JPEG_DIR "/valid");
    CHECK(d != NULL);
    struct dirent *e;
    int count = 0, refs = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".jpg"))
            continue;
        char path[600], ref[600];
        snprintf(path, sizeof path, "%s/valid/%s", JPEG_DIR, e->d_name);
        snprintf(ref, sizeof ref, "%s/reference_png/%.*s.png", JPEG_DIR,
                 (int)(strlen(e->d_name) - 4), e->d_name);
        FILE *f = fopen(ref, "rb");
        if (f) {
            fclose(f);
            check_against_reference(path, ref, 0);
            refs++;
        }
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        ferry_image_info info;
        int rc;
        unsigned char *px = decode_file(path, &o, &info, &rc);
        if (strcmp(e->d_name, "ljt_monkey12.jpg") == 0) {
            /* 12-bit: this 8-bit build must refuse it cleanly */
            CHECK(px == NULL);
            CHECK_EQ(rc, FERRY_ENOTSUP);
            CHECK_CONTAINS(ferry_last_errmsg(), "precision");
            count++;
            continue;
        }
        if (!px)
            test_fail(__FILE__, __LINE__, "%s: %s", e->d_name, ferry_last_errmsg());
        CHECK_EQ(info.out_channels, 3);
        free(px);
        o.grey = 1;
        px = decode_file(path, &o, &info, &rc);
        CHECK(px != NULL);
        CHECK_EQ(info.out_channels, 1);
        free(px);
        count++;
    }
    closedir(d);
    CHECK_EQ(count, 16);
    CHECK_EQ(refs, 9);
}

/* The arithmetic-coded file is a lossless recoding of testimgint: same pixels. */
TEST(jpeg_arithmetic_equals_huffman)
{
    need_shared();
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    ferry_image_info a, h;
    int rc;
    unsigned char *pa = decode_file(JPEG_DIR "/valid/ljt_testimgari.jpg", &o, &a, &rc);
    if (!pa) {
        CHECK_EQ(rc, FERRY_ENOTSUP);
        return;
    }
    unsigned char *ph = decode_file(JPEG_DIR "/valid/ljt_testimgint.jpg", &o, &h, &rc);
    CHECK(ph != NULL);
    CHECK_EQ(a.width, 227);
    CHECK_EQ(a.height, 149);
    CHECK(memcmp(pa, ph, 227 * 149 * 3) == 0);
    free(pa);
    free(ph);
}

/* Pillow's CMYK sample (Adobe, YCCK): top-left is red, bottom-right black. */
TEST(jpeg_cmyk_adobe)
{
    need_shared();
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    ferry_image_info info;
    int rc;
    unsigned char *p = decode_file(JPEG_DIR "/valid/pillow_pil_sample_cmyk.jpg", &o, &info, &rc);
    if (!p)
        test_fail(__FILE__, __LINE__, "%s", ferry_last_errmsg());
    CHECK_EQ(info.channels, 4);
    CHECK(p[0] > 200 && p[1] < 60 && p[2] < 60);
    const unsigned char *br = p + ((size_t)100 * 100 - 1) * 3;
    CHECK(br[0] < 30 && br[1] < 30 && br[2] < 30);
    free(p);
}

static int decodes(const char *path, int lenient, ferry_image_info *info)
{
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.lenient = lenient;
    int rc;
    unsigned char *p = decode_file(path, &o, info, &rc);
    if (!p) {
        CHECK(rc < 0);
        CHECK(ferry_last_errmsg()[0] != 0);
        return rc;
    }
    free(p);
    return 0;
}

TEST(jpeg_corrupt)
{
    need_shared();
    static const struct {
        const char *name;
        int strict_ok, lenient_ok;
        const char *msg; /* part of the strict error, or NULL */
    } cases[] = {
        {"jd_crash_dc-predictor-overflow.jpg", 0, 1, "premature end"},
        {"jd_crash_derive-huffman-codes-overflow.jpg", 0, 0, "Huffman"},
        {"jd_crash_empty.jpg", 0, 0, "empty"},
        {"jd_crash_invalid-dimensions.jpg", 0, 0, "Empty JPEG image"},
        {"jd_crash_max_size.jpg", 0, 0, NULL},
        {"jd_crash_missing-frame-image-1410.jpg", 0, 0, NULL},
        {"jd_crash_missing-sof.jpg", 0, 0, NULL},
        {"jd_crash_missing-sos.jpg", 0, 0, NULL},
        {"jd_crash_null_height.jpg", 0, 0, NULL},
        {"jd_extraneous-data.jpg", 1, 1, NULL},
        {"jd_partial_progressive.jpg", 0, 1, "premature end"},
        {"jd_progressive-missing-ac.jpg", 1, 1, NULL},
        {"pillow_truncated_app14.jpg", 1, 1, NULL},
        {"pillow_truncated_jpeg.jpg", 0, 1, "Premature end"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/corrupt/%s", JPEG_DIR, cases[i].name);
        ferry_image_info info;
        int rc = decodes(path, 0, &info);
        if ((rc == 0) != cases[i].strict_ok)
            test_fail(__FILE__, __LINE__, "%s strict: rc %d: %s", cases[i].name, rc,
                      ferry_last_errmsg());
        if (rc < 0 && cases[i].msg)
            CHECK_CONTAINS(ferry_last_errmsg(), cases[i].msg);
        rc = decodes(path, 1, &info);
        if ((rc == 0) != cases[i].lenient_ok)
            test_fail(__FILE__, __LINE__, "%s lenient: rc %d: %s", cases[i].name, rc,
                      ferry_last_errmsg());
    }
    check_against_reference(JPEG_DIR "/corrupt/jd_extraneous-data.jpg",
                            JPEG_DIR "/reference_png/jd_extraneous-data.png", 0);
    check_against_reference(JPEG_DIR "/corrupt/jd_progressive-missing-ac.jpg",
                            JPEG_DIR "/reference_png/jd_progressive-missing-ac.png", 0);
    check_against_reference(JPEG_DIR "/corrupt/jd_partial_progressive.jpg",
                            JPEG_DIR "/reference_png/jd_partial_progressive.png", 1);
}

TEST(png_corrupt)
{
    need_shared();
    DIR *d = opendir(PNG_DIR "/corrupt");
    CHECK(d != NULL);
    struct dirent *e;
    int count = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".png"))
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/corrupt/%s", PNG_DIR, e->d_name);
        ferry_image_info info;
        int rc = decodes(path, 0, &info);
        /* "reject or decode" for these two (SOURCES.md); every other must fail, the
         * bad IDAT CRCs of x_interlaced_chck and xcsn0g01 included */
        if (strcmp(e->d_name, "imagepng_x_consecutive_idat.png") == 0 ||
            strcmp(e->d_name, "pillow_truncated_end_chunk.png") == 0) {
            if (rc == 0)
                CHECK(info.width == 32 || info.width == 128);
        } else if (rc == 0) {
            test_fail(__FILE__, __LINE__, "%s decoded", e->d_name);
        }
        count++;
    }
    closedir(d);
    CHECK_EQ(count, 23);
}

static const unsigned char tiny_png[] = {
    /* 2x1 RGB 8-bit: red, green */
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x7b,
    0x40, 0xe8, 0xdd, 0x00, 0x00, 0x00, 0x0f, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
    0xcf, 0xc0, 0xc0, 0xf0, 0x9f, 0x01, 0x00, 0x07, 0xff, 0x01, 0xff, 0x01, 0x7f, 0x89, 0xa7,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

TEST(limits_and_dst)
{
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(tiny_png, sizeof tiny_png, &info));
    CHECK_EQ(info.format, FERRY_IMAGE_PNG);
    CHECK_EQ(info.width, 2);
    CHECK_EQ(info.height, 1);
    CHECK_EQ(info.channels, 3);
    CHECK_EQ(info.bit_depth, 8);
    unsigned char px[6];
    CHECK_OK(ferry_image_decode(tiny_png, sizeof tiny_png, NULL, px, sizeof px, &info));
    static const unsigned char want[6] = {255, 0, 0, 0, 255, 0};
    CHECK(memcmp(px, want, 6) == 0);
    /* dst too small names the need */
    CHECK_RC(ferry_image_decode(tiny_png, sizeof tiny_png, NULL, px, 5, &info), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "6 bytes");
    /* max_pixels */
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.max_pixels = 1;
    CHECK_RC(ferry_image_decode(tiny_png, sizeof tiny_png, &o, px, sizeof px, &info), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "max_pixels");
    o.max_pixels = 2;
    CHECK_OK(ferry_image_decode(tiny_png, sizeof tiny_png, &o, px, sizeof px, &info));
    o.grey = 1;
    CHECK_OK(ferry_image_decode(tiny_png, sizeof tiny_png, &o, px, sizeof px, &info));
    CHECK_EQ(info.out_channels, 1);
    CHECK_EQ(px[0], 76);  /* 0.299 * 255 */
    CHECK_EQ(px[1], 150); /* 0.587 * 255 */
    /* bad options, unknown formats, truncation */
    o.grey = 7;
    CHECK_RC(ferry_image_decode(tiny_png, sizeof tiny_png, &o, px, sizeof px, &info), FERRY_EINVAL);
    CHECK_RC(ferry_image_decode("GIF89a..", 8, NULL, px, sizeof px, &info), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "unknown format");
    CHECK_RC(ferry_image_decode("", 0, NULL, px, sizeof px, &info), FERRY_ECORRUPT);
    CHECK_RC(ferry_image_info_get(NULL, 0, NULL), FERRY_EINVAL);
    /* libspng does not insist on IEND or check the last IDAT's CRC once the zlib
     * stream has ended, so cut only inside the headers and the stream */
    for (size_t cut = 0; cut < sizeof tiny_png - 20; cut++)
        CHECK(ferry_image_decode(tiny_png, cut, NULL, px, sizeof px, &info) < 0);
}

TEST(jpeg_limits)
{
    need_shared();
    size_t n;
    unsigned char *b = slurp(JPEG_DIR "/valid/ljt_testorig.jpg", &n);
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(b, n, &info));
    CHECK_EQ(info.format, FERRY_IMAGE_JPEG);
    CHECK_EQ(info.width, 227);
    CHECK_EQ(info.height, 149);
    CHECK_EQ(info.channels, 3);
    size_t need = (size_t)227 * 149 * 3;
    unsigned char *px = malloc(need);
    CHECK_RC(ferry_image_decode(b, n, NULL, px, need - 1, &info), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "101469 bytes");
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.max_pixels = 227 * 149 - 1;
    CHECK_RC(ferry_image_decode(b, n, &o, px, need, &info), FERRY_ERANGE);
    o.max_pixels = 227 * 149;
    CHECK_OK(ferry_image_decode(b, n, &o, px, need, &info));
    /* every truncation fails cleanly (strict) or decodes (lenient) */
    for (size_t cut = 0; cut < n; cut += 97) {
        o.lenient = 0;
        CHECK(ferry_image_decode(b, cut, &o, px, need, &info) < 0);
        o.lenient = 1;
        ferry_image_decode(b, cut, &o, px, need, &info);
    }
    /* the 65535x65535 file is refused before any big allocation */
    free(b);
    b = slurp(JPEG_DIR "/corrupt/jd_crash_max_size.jpg", &n);
    CHECK(ferry_image_decode(b, n, NULL, px, need, &info) < 0);
    free(b);
    free(px);
}
