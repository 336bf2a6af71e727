/*
 * Image decoding: the JPEG and PNG conformance files under ../shared/testdata
 * against their reference decodes (SOURCES.md), the corrupt files, limits, dst
 * size and header-only info. Region decoding: crops against the full decode (exact),
 * DCT-scaled crops against the whole image decoded at the same scale (exact) and
 * against a box filter of the full decode (within a tolerance), JPEGs written here
 * with every sampling layout, bad crops, corrupt files and allocation failures.
 */
#include "harness.h"

#include <ferry/image.h>
#include "core/internal.h"

#include <dirent.h>
#include <jpeglib.h>
#include <math.h>

#define JPEG_DIR FERRY_SHARED_DIR "/testdata/jpeg"
#define PNG_DIR FERRY_SHARED_DIR "/testdata/png"

/* The files in a directory whose names contain ext, in readdir order: each
 * dir_next sets name and path (and, when read is set, the file's bytes b and n,
 * freed by the next call); at the end it closes the directory and returns 0. */
typedef struct dir_iter {
    DIR *d;
    const char *dir, *ext, *name;
    char path[600];
    int read;
    unsigned char *b;
    size_t n;
} dir_iter;

static dir_iter dir_files(const char *dir, const char *ext, int read)
{
    dir_iter it = {.d = opendir(dir), .dir = dir, .ext = ext, .read = read};
    CHECK(it.d != NULL);
    return it;
}

static int dir_next(dir_iter *it)
{
    free(it->b);
    it->b = NULL;
    struct dirent *e;
    while ((e = readdir(it->d))) {
        if (!strstr(e->d_name, it->ext))
            continue;
        it->name = e->d_name;
        snprintf(it->path, sizeof it->path, "%s/%s", it->dir, e->d_name);
        if (it->read)
            it->b = test_read_file(it->path, &it->n);
        return 1;
    }
    closedir(it->d);
    it->d = NULL;
    return 0;
}

/* The 227x149 baseline JPEG that several tests take apart (skips without it). */
#define TESTORIG JPEG_DIR "/valid/ljt_testorig.jpg"
static unsigned char *read_testorig(size_t *n)
{
    test_need_shared(JPEG_DIR);
    return test_read_file(TESTORIG, n);
}

/* Decodes an encoded image whole; returns the pixels (malloc'd, *need bytes) or NULL
 * with *rc set. */
static unsigned char *decode_bytes(const unsigned char *b, size_t n, const ferry_decode_opts *o,
                                   ferry_image_info *info, size_t *need, int *rc)
{
    ferry_image_info hi;
    *rc = ferry_image_info_get(b, n, &hi);
    if (*rc < 0)
        return NULL;
    *rc = ferry_image_out_size(&hi, o, need);
    if (*rc < 0)
        return NULL;
    unsigned char *px = malloc(*need);
    CHECK(px != NULL);
    *rc = ferry_image_decode(b, n, o, px, *need, info);
    if (*rc < 0) {
        free(px);
        return NULL;
    }
    CHECK_EQ(info->out_channels, hi.out_channels);
    CHECK_EQ(info->width, hi.width);
    CHECK_EQ(info->height, hi.height);
    return px;
}

/* Decodes a file; returns the pixels (malloc'd) or NULL with *rc set. */
static unsigned char *decode_file(const char *path, const ferry_decode_opts *o,
                                  ferry_image_info *info, int *rc)
{
    size_t n, need;
    unsigned char *b = test_read_file(path, &n);
    unsigned char *px = decode_bytes(b, n, o, info, &need, rc);
    free(b);
    return px;
}

/* A file's header. */
static ferry_image_info file_info(const char *path)
{
    size_t n;
    unsigned char *b = test_read_file(path, &n);
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(b, n, &info));
    free(b);
    return info;
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
    test_need_shared(JPEG_DIR);
    /* The CRCs are read from SOURCES.md itself so that no number is copied here. */
    size_t n;
    char *md = (char *)test_read_file(FERRY_SHARED_DIR "/testdata/SOURCES.md", &n);
    dir_iter it = dir_files(PNG_DIR "/valid", ".png", 0);
    int count = 0;
    while (dir_next(&it)) {
        const char *path = it.path;
        char key[300];
        snprintf(key, sizeof key, "`png/valid/%s`", it.name);
        const char *row = strstr(md, key);
        if (!row)
            test_fail(__FILE__, __LINE__, "%s not in SOURCES.md", it.name);
        const char *nl = strchr(row, '\n');
        const char *norm = strstr(row, "16-bit->high byte) = ");
        CHECK(norm && (!nl || norm < nl));
        uint32_t want = (uint32_t)strtoul(norm + strlen("16-bit->high byte) = "), NULL, 10);
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        o.keep_alpha = 1;
        ferry_image_info info;
        o.grey = file_info(path).channels <= 2; /* the normalized form keeps grey as grey */
        int rc;
        unsigned char *px = decode_file(path, &o, &info, &rc);
        if (!px)
            test_fail(__FILE__, __LINE__, "%s: %s: %s", it.name, ferry_errname(rc),
                      ferry_last_errmsg());
        size_t sz = (size_t)info.width * info.height * (size_t)info.out_channels;
        uint32_t got = crc32(px, sz);
        if (got != want)
            test_fail(__FILE__, __LINE__, "%s: crc %u, want %u (%ux%u ch %d)", it.name, got, want,
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
    o.grey = file_info(ref).channels <= 2;
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
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(JPEG_DIR "/valid", ".jpg", 0);
    int count = 0, refs = 0;
    while (dir_next(&it)) {
        const char *path = it.path;
        char ref[600];
        snprintf(ref, sizeof ref, "%s/reference_png/%.*s.png", JPEG_DIR, (int)(strlen(it.name) - 4),
                 it.name);
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
        if (strcmp(it.name, "ljt_monkey12.jpg") == 0) {
            /* 12-bit: this 8-bit build must refuse it cleanly */
            CHECK(px == NULL);
            CHECK_EQ(rc, FERRY_ENOTSUP);
            CHECK_CONTAINS(ferry_last_errmsg(), "precision");
            count++;
            continue;
        }
        if (!px)
            test_fail(__FILE__, __LINE__, "%s: %s", it.name, ferry_last_errmsg());
        CHECK_EQ(info.out_channels, 3);
        free(px);
        o.grey = 1;
        px = decode_file(path, &o, &info, &rc);
        CHECK(px != NULL);
        CHECK_EQ(info.out_channels, 1);
        free(px);
        count++;
    }
    CHECK_EQ(count, 16);
    CHECK_EQ(refs, 9);
}

/* The arithmetic-coded file is a lossless recoding of testimgint: same pixels. */
TEST(jpeg_arithmetic_equals_huffman)
{
    test_need_shared(JPEG_DIR);
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
    test_need_shared(JPEG_DIR);
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
    test_need_shared(JPEG_DIR);
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
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(PNG_DIR "/corrupt", ".png", 0);
    int count = 0;
    while (dir_next(&it)) {
        ferry_image_info info;
        int rc = decodes(it.path, 0, &info);
        /* "reject or decode" for these two (SOURCES.md); every other must fail, the
         * bad IDAT CRCs of x_interlaced_chck and xcsn0g01 included */
        if (strcmp(it.name, "imagepng_x_consecutive_idat.png") == 0 ||
            strcmp(it.name, "pillow_truncated_end_chunk.png") == 0) {
            if (rc == 0)
                CHECK(info.width == 32 || info.width == 128);
        } else if (rc == 0) {
            test_fail(__FILE__, __LINE__, "%s decoded", it.name);
        }
        count++;
    }
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
    size_t n;
    unsigned char *b = read_testorig(&n);
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
    b = test_read_file(JPEG_DIR "/corrupt/jd_crash_max_size.jpg", &n);
    CHECK(ferry_image_decode(b, n, NULL, px, need, &info) < 0);
    free(b);
    free(px);
}

/* ---- Region decoding ---- */

static uint64_t rnd_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Crops of a w x h image: the whole image, 1x1 corners, edge rows and columns, odd
 * offsets, and `random` more drawn from seed. Returns how many. */
static int crops_for(uint32_t w, uint32_t h, ferry_rect *out, int random, uint64_t seed)
{
    int n = 0;
    out[n++] = (ferry_rect){0, 0, w, h};
    out[n++] = (ferry_rect){0, 0, 1, 1};
    out[n++] = (ferry_rect){w - 1, h - 1, 1, 1};
    out[n++] = (ferry_rect){w - 1, 0, 1, h};
    out[n++] = (ferry_rect){0, h - 1, w, 1};
    out[n++] = (ferry_rect){w / 2, h / 2, w - w / 2, h - h / 2};
    out[n++] = (ferry_rect){w - (w + 3) / 4, 0, (w + 3) / 4, (h + 1) / 2};
    out[n++] = (ferry_rect){0, h - (h + 2) / 3, (w + 2) / 3, (h + 2) / 3};
    if (w > 2 && h > 2)
        out[n++] = (ferry_rect){1, 1, w - 2, h - 2};
    if (w > 6 && h > 6)
        out[n++] = (ferry_rect){(w / 3) | 1, (h / 3) | 1, w / 3, h / 3};
    if (w > 17 && h > 17)
        out[n++] = (ferry_rect){15, 17, w - 16 > 20 ? 20 : w - 16, h - 18 > 9 ? 9 : h - 18};
    for (int i = 0; i < random; i++) {
        uint32_t x = (uint32_t)(rnd_next(&seed) % w), y = (uint32_t)(rnd_next(&seed) % h);
        uint32_t cw = 1 + (uint32_t)(rnd_next(&seed) % (w - x));
        uint32_t ch = 1 + (uint32_t)(rnd_next(&seed) % (h - y));
        out[n++] = (ferry_rect){x, y, cw, ch};
    }
    return n;
}

/* Checks what ferry_image_decode_region says against the crop and against the
 * bound that ferry_image_region_size gave. */
static void check_box(const ferry_image_info *info, const ferry_rect *c, size_t bound,
                      const ferry_image_region *r)
{
    uint32_t num = r->scale_num;
    CHECK(num == 8 || (info->format == FERRY_IMAGE_JPEG && (num == 4 || num == 2 || num == 1)));
    double s = num / 8.0;
    CHECK_EQ(r->stride, (size_t)r->width * (size_t)r->channels);
    CHECK(r->width > 0 && r->height > 0);
    /* the box is the crop, scaled, at an integer offset */
    CHECK(r->x1 - r->x0 == c->w * s && r->y1 - r->y0 == c->h * s);
    double ox = c->x * s - r->x0, oy = c->y * s - r->y0;
    CHECK(ox == floor(ox) && oy == floor(oy) && ox >= 0 && oy >= 0);
    CHECK(r->x0 >= 0 && r->y0 >= 0 && r->x1 <= r->width && r->y1 <= r->height);
    /* rows: exactly those the crop touches */
    CHECK(r->y0 < 1 && r->height == (uint32_t)ceil(r->y1));
    /* columns: the crop plus libjpeg's context and iMCU alignment, within the bound */
    size_t used = (size_t)r->height * r->stride;
    CHECK(used <= bound);
    size_t bw = bound / ((size_t)r->height * (size_t)r->channels);
    uint32_t cw = (uint32_t)(ceil(r->x1) - floor(r->x0));
    if (info->format == FERRY_IMAGE_PNG) {
        CHECK(r->x0 == 0 && r->y0 == 0 && r->width == c->w && r->height == c->h);
        CHECK_EQ(bound, used);
    } else {
        CHECK(bw <= (cw + 2 > 8 ? cw + 2 : 8) + 4 * num - 1);
    }
}

/* Decodes a region into a buffer of exactly ferry_image_region_size bytes. */
static unsigned char *region_of(const unsigned char *b, size_t n, const ferry_decode_opts *o,
                                const ferry_rect *c, uint32_t min_w, uint32_t min_h,
                                ferry_image_region *r, int *rc)
{
    ferry_image_info info;
    *rc = ferry_image_info_get(b, n, &info);
    if (*rc < 0)
        return NULL;
    size_t bound;
    *rc = ferry_image_region_size(&info, o, c, min_w, min_h, &bound);
    if (*rc < 0)
        return NULL;
    unsigned char *px = malloc(bound);
    CHECK(px != NULL);
    *rc = ferry_image_decode_region(b, n, o, c, min_w, min_h, px, bound, r);
    if (*rc < 0) {
        free(px);
        return NULL;
    }
    check_box(&info, c ? c : &(ferry_rect){0, 0, info.width, info.height}, bound, r);
    return px;
}

/* A region decode asked to reduce that must stay at full scale. */
static void check_full_scale(const unsigned char *b, size_t n, const ferry_decode_opts *o,
                             const ferry_rect *c, uint32_t min_w, uint32_t min_h)
{
    ferry_image_region r;
    int rc;
    unsigned char *px = region_of(b, n, o, c, min_w, min_h, &r, &rc);
    CHECK(px != NULL);
    CHECK_EQ(r.scale_num, 8);
    free(px);
}

/* Only the rc of a region decode at full scale (of damaged data, say). */
static int region_rc(const unsigned char *b, size_t n, const ferry_decode_opts *o,
                     const ferry_rect *c)
{
    ferry_image_region r;
    int rc;
    free(region_of(b, n, o, c, 0, 0, &r, &rc));
    return rc;
}

/* Compares the crop's pixels in a region decode with ref, an rw-wide image at the
 * region's scale (the full decode, or the whole image decoded at the same scale).
 * Returns the largest difference. */
static int region_diff(const unsigned char *ref, uint32_t rw, const unsigned char *px,
                       const ferry_image_region *r, const ferry_rect *c)
{
    double s = r->scale_num / 8.0;
    uint32_t ox = (uint32_t)(c->x * s - r->x0), oy = (uint32_t)(c->y * s - r->y0);
    uint32_t i0 = (uint32_t)floor(r->x0), i1 = (uint32_t)ceil(r->x1);
    uint32_t j0 = (uint32_t)floor(r->y0), j1 = (uint32_t)ceil(r->y1);
    size_t ch = (size_t)r->channels;
    int maxd = 0;
    for (uint32_t j = j0; j < j1; j++) {
        const unsigned char *a = px + j * r->stride + i0 * ch;
        const unsigned char *e = ref + ((size_t)(oy + j) * rw + ox + i0) * ch;
        for (size_t k = 0; k < (i1 - i0) * ch; k++) {
            int d = abs((int)a[k] - (int)e[k]);
            if (d > maxd)
                maxd = d;
        }
    }
    return maxd;
}

/* Every crop of one encoded image at full scale equals the full decode there. */
static void check_crops_exact(const char *name, const unsigned char *b, size_t n,
                              const ferry_decode_opts *o, int random, uint64_t seed)
{
    ferry_image_info info;
    size_t need;
    int rc;
    unsigned char *full = decode_bytes(b, n, o, &info, &need, &rc);
    CHECK_OK(rc);
    ferry_rect crops[64];
    int nc = crops_for(info.width, info.height, crops, random, seed);
    for (int i = 0; i < nc; i++) {
        ferry_image_region r;
        unsigned char *px = region_of(b, n, o, &crops[i], 0, 0, &r, &rc);
        if (!px)
            test_fail(__FILE__, __LINE__, "%s crop %ux%u+%u+%u: %s", name, crops[i].w, crops[i].h,
                      crops[i].x, crops[i].y, ferry_last_errmsg());
        CHECK_EQ(r.scale_num, 8);
        CHECK_EQ(r.channels, info.out_channels);
        int d = region_diff(full, info.width, px, &r, &crops[i]);
        if (d != 0)
            test_fail(__FILE__, __LINE__, "%s grey %d crop %ux%u+%u+%u: differs by %d", name,
                      o->grey, crops[i].w, crops[i].h, crops[i].x, crops[i].y, d);
        free(px);
    }
    /* NULL is the whole image */
    ferry_image_region r;
    unsigned char *px = region_of(b, n, o, NULL, 0, 0, &r, &rc);
    CHECK(px != NULL);
    CHECK(r.width == info.width && r.height == info.height && r.x0 == 0 && r.y0 == 0);
    CHECK(memcmp(px, full, need) == 0);
    free(px);
    free(full);
}

/* Decodes the whole image at scale num/8 through the region path (no cropping). */
static unsigned char *whole_scaled(const unsigned char *b, size_t n, const ferry_decode_opts *o,
                                   const ferry_image_info *info, uint32_t num,
                                   ferry_image_region *r)
{
    int rc;
    uint32_t min_w = (uint32_t)((uint64_t)info->width * num / 8);
    uint32_t min_h = (uint32_t)((uint64_t)info->height * num / 8);
    unsigned char *px = region_of(b, n, o, NULL, min_w, min_h, r, &rc);
    if (!px)
        test_fail(__FILE__, __LINE__, "whole image at %u/8: %s", num, ferry_last_errmsg());
    CHECK_EQ(r->scale_num, num);
    CHECK(r->x0 == 0 && r->y0 == 0);
    CHECK_EQ(r->width, (info->width * num + 7) / 8);
    CHECK_EQ(r->height, (info->height * num + 7) / 8);
    return px;
}

/* Every crop at scales 1/2, 1/4 and 1/8 equals the whole image decoded at the same
 * scale: the DCT scaling chosen is the one asked for, and cropping changes nothing. */
static void check_scaled_crops_exact(const char *name, const unsigned char *b, size_t n,
                                     const ferry_decode_opts *o, int random, uint64_t seed)
{
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(b, n, &info));
    if (info.channels == 4) { /* CMYK: never reduced */
        check_full_scale(b, n, o, NULL, 1, 1);
        return;
    }
    for (uint32_t num = 4; num >= 1; num /= 2) {
        if (info.width * num < 8 || info.height * num < 8)
            continue;
        ferry_image_region wr;
        unsigned char *whole = whole_scaled(b, n, o, &info, num, &wr);
        ferry_rect crops[64];
        int nc = crops_for(info.width, info.height, crops, random, seed + num);
        for (int i = 0; i < nc; i++) {
            ferry_rect *c = &crops[i];
            if (c->w * num < 8 || c->h * num < 8)
                continue; /* too small to be reduced */
            uint32_t min_w = c->w * num / 8, min_h = c->h * num / 8;
            ferry_image_region r;
            int rc;
            unsigned char *px = region_of(b, n, o, c, min_w, min_h, &r, &rc);
            if (!px)
                test_fail(__FILE__, __LINE__, "%s crop %ux%u+%u+%u at %u/8: %s", name, c->w, c->h,
                          c->x, c->y, num, ferry_last_errmsg());
            CHECK_EQ(r.scale_num, num);
            int d = region_diff(whole, wr.width, px, &r, c);
            if (d != 0)
                test_fail(__FILE__, __LINE__, "%s crop %ux%u+%u+%u at %u/8: differs by %d", name,
                          c->w, c->h, c->x, c->y, num, d);
            free(px);
        }
        free(whole);
    }
}

/* Both of the above, each with its own random crops. */
static void check_all_crops(const char *name, const unsigned char *b, size_t n,
                            const ferry_decode_opts *o, int random, uint64_t seed,
                            int scaled_random, uint64_t scaled_seed)
{
    check_crops_exact(name, b, n, o, random, seed);
    check_scaled_crops_exact(name, b, n, o, scaled_random, scaled_seed);
}

TEST(region_jpeg_valid_exact)
{
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(JPEG_DIR "/valid", ".jpg", 1);
    int count = 0;
    while (dir_next(&it)) {
        if (strcmp(it.name, "ljt_monkey12.jpg") == 0)
            continue;
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        for (o.grey = 0; o.grey <= 1; o.grey++) {
            check_all_crops(it.name, it.b, it.n, &o, 40, 7 + (uint64_t)count, 20,
                            11 + (uint64_t)count);
        }
        count++;
    }
    CHECK_EQ(count, 15);
}

TEST(region_png_valid_exact)
{
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(PNG_DIR "/valid", ".png", 1);
    int count = 0;
    while (dir_next(&it)) {
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        for (int mode = 0; mode < 3; mode++) {
            o.grey = mode == 1;
            o.keep_alpha = mode == 2;
            check_crops_exact(it.name, it.b, it.n, &o, 30, 5 + (uint64_t)count);
        }
        check_full_scale(it.b, it.n, &o, NULL, 1, 1); /* min_w/min_h never scale a PNG */
        count++;
    }
    CHECK(count >= 30);
}

/* A test JPEG: w x h, ncomp components (1 grey, 3 YCbCr, 4 CMYK) with component 0
 * sampled h0 x v0 and the others 1x1 (or as given in samp), noisy gradients so that
 * neighbouring chroma samples differ. Returns the file (free()) and its size. */
static unsigned char *make_jpeg(uint32_t w, uint32_t h, int ncomp, const int samp[4][2],
                                int progressive, int restart_rows, size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long out_size = 0;
    jpeg_mem_dest(&c, &out, &out_size);
    c.image_width = w;
    c.image_height = h;
    c.input_components = ncomp;
    c.in_color_space = ncomp == 1 ? JCS_GRAYSCALE : ncomp == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 85, TRUE);
    for (int i = 0; i < ncomp; i++) {
        c.comp_info[i].h_samp_factor = samp[i][0];
        c.comp_info[i].v_samp_factor = samp[i][1];
    }
    if (progressive)
        jpeg_simple_progression(&c);
    c.restart_in_rows = restart_rows;
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * (size_t)ncomp);
    CHECK(row != NULL);
    uint64_t seed = 12345;
    while (c.next_scanline < h) {
        uint32_t y = c.next_scanline;
        for (uint32_t x = 0; x < w; x++) {
            for (int k = 0; k < ncomp; k++) {
                int v = (int)((x * 255 / w + y * 97 / h + (uint32_t)k * 60) % 256);
                v += (int)(rnd_next(&seed) % 61) - 30;
                if ((x / 5 + y / 7 + (uint32_t)k) % 3 == 0)
                    v = 255 - v;
                row[(size_t)x * (size_t)ncomp + (size_t)k] = (unsigned char)(v < 0     ? 0
                                                                             : v > 255 ? 255
                                                                                       : v);
            }
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    *size = out_size;
    return out;
}

/* Every sampling layout libjpeg can write (up to 10 blocks per MCU), baseline and
 * progressive, with sizes that are not multiples of the iMCU: crops at full scale
 * equal the full decode, crops at 1/2, 1/4, 1/8 equal the whole scaled decode.
 * The 4x2 and 2x4 layouts are the ones where libjpeg-turbo 2.1's
 * jpeg_crop_scanline leaves part of a scaled row unset. */
TEST(region_jpeg_sampling_layouts)
{
    static const struct {
        int ncomp;
        int samp[4][2];
    } layouts[] = {
        {3, {{1, 1}, {1, 1}, {1, 1}}},
        {3, {{2, 1}, {1, 1}, {1, 1}}},
        {3, {{1, 2}, {1, 1}, {1, 1}}},
        {3, {{2, 2}, {1, 1}, {1, 1}}},
        {3, {{4, 1}, {1, 1}, {1, 1}}},
        {3, {{1, 4}, {1, 1}, {1, 1}}},
        {3, {{4, 2}, {1, 1}, {1, 1}}},
        {3, {{2, 4}, {1, 1}, {1, 1}}},
        {3, {{3, 1}, {1, 1}, {1, 1}}},
        {3, {{2, 2}, {1, 1}, {2, 1}}},
        {3, {{2, 2}, {1, 2}, {2, 1}}},
        {1, {{1, 1}}},
        {1, {{2, 2}}},
        {4, {{1, 1}, {1, 1}, {1, 1}, {1, 1}}},
        {4, {{2, 2}, {1, 1}, {1, 1}, {2, 2}}},
    };
    static const uint32_t sizes[][2] = {{83, 61}, {130, 37}};
    int k = 0;
    for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++) {
        for (int prog = 0; prog <= 1; prog++) {
            for (size_t si = 0; si < 2; si++, k++) {
                size_t n;
                unsigned char *b = make_jpeg(sizes[si][0], sizes[si][1], layouts[li].ncomp,
                                             layouts[li].samp, prog, (int)(si * 2), &n);
                char name[96];
                snprintf(name, sizeof name, "layout %zu (%dx%d) %s %ux%u", li,
                         layouts[li].samp[0][0], layouts[li].samp[0][1],
                         prog ? "progressive" : "baseline", sizes[si][0], sizes[si][1]);
                ferry_decode_opts o;
                ferry_decode_opts_default(&o);
                o.grey = k % 3 == 2;
                check_all_crops(name, b, n, &o, 30, 100 + (uint64_t)k, 20, 200 + (uint64_t)k);
                free(b);
            }
        }
    }
}

/* The damaged JPEGs through the region path: whole-image crops fail exactly where
 * ferry_image_decode fails; the files that do decode (strict or lenient) give the
 * same pixels as the full decode in every crop, block smoothing of the progressive
 * files with missing scans included. Crops that end above the damage may succeed
 * where the whole image fails, since decoding stops after the crop's last row:
 * that is the point of it; they must then match the intact rows. */
TEST(region_jpeg_corrupt)
{
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(JPEG_DIR "/corrupt", ".jpg", 1);
    int count = 0;
    while (dir_next(&it)) {
        const unsigned char *b = it.b;
        size_t n = it.n;
        for (int lenient = 0; lenient <= 1; lenient++) {
            ferry_decode_opts o;
            ferry_decode_opts_default(&o);
            o.lenient = lenient;
            ferry_image_info info;
            int rc = ferry_image_info_get(b, n, &info), whole_rc = rc;
            size_t need = 0;
            if (rc == 0)
                rc = whole_rc = ferry_image_out_size(&info, &o, &need);
            unsigned char *full = NULL;
            if (rc == 0) {
                full = malloc(need);
                CHECK(full != NULL);
                whole_rc = ferry_image_decode(b, n, &o, full, need, &info);
            }
            rc = region_rc(b, n, &o, NULL);
            if ((rc == 0) != (whole_rc == 0))
                test_fail(__FILE__, __LINE__, "%s lenient %d: region rc %d, whole rc %d", it.name,
                          lenient, rc, whole_rc);
            if (rc < 0)
                CHECK(ferry_last_errmsg()[0] != 0);
            if (whole_rc == 0) {
                check_all_crops(it.name, b, n, &o, 20, 3, 10, 4);
            } else if (full) {
                /* a crop may succeed above the damage: no crash, a message on error */
                ferry_rect top = {0, 0, info.width, info.height < 8 ? info.height : 8};
                if (region_rc(b, n, &o, &top) < 0)
                    CHECK(ferry_last_errmsg()[0] != 0);
                ferry_rect corner = {info.width - 1, info.height - 1, 1, 1};
                CHECK(region_rc(b, n, &o, &corner) < 0 || lenient);
            }
            free(full);
        }
        count++;
    }
    CHECK_EQ(count, 14);
}

/* Cuts of a baseline JPEG: the whole image fails strictly at every cut, as
 * ferry_image_decode does; a crop in the top rows succeeds once its rows are in the
 * file, and then equals the intact file's decode. */
TEST(region_jpeg_truncated)
{
    size_t n;
    unsigned char *b = read_testorig(&n);
    ferry_image_info info;
    size_t need;
    int rc;
    unsigned char *full = decode_bytes(b, n, NULL, &info, &need, &rc);
    CHECK_OK(rc);
    ferry_rect top = {40, 3, 100, 20};
    int early = 0;
    for (size_t cut = 0; cut < n; cut += 37) {
        ferry_image_region r;
        unsigned char *px = region_of(b, cut, NULL, NULL, 0, 0, &r, &rc);
        CHECK(px == NULL && rc < 0);
        px = region_of(b, cut, NULL, &top, 0, 0, &r, &rc);
        if (px) {
            CHECK_EQ(region_diff(full, info.width, px, &r, &top), 0);
            early++;
            free(px);
        } else {
            CHECK(rc < 0 && ferry_last_errmsg()[0] != 0);
        }
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        o.lenient = 1;
        px = region_of(b, cut, &o, &top, 4, 2, &r, &rc);
        free(px);
    }
    CHECK(early > 0 && early < (int)(n / 37));
    free(full);
    free(b);
}

TEST(region_png_corrupt)
{
    test_need_shared(JPEG_DIR);
    dir_iter it = dir_files(PNG_DIR "/corrupt", ".png", 1);
    int count = 0;
    while (dir_next(&it)) {
        const unsigned char *b = it.b;
        size_t n = it.n;
        ferry_image_info info;
        int whole_rc = decodes(it.path, 0, &info);
        int rc = region_rc(b, n, NULL, NULL);
        if ((rc == 0) != (whole_rc == 0))
            test_fail(__FILE__, __LINE__, "%s: region rc %d, whole rc %d", it.name, rc, whole_rc);
        /* every chunk's CRC and the IEND are checked before decoding, so most
         * damage fails even for a crop of the first row */
        if (ferry_image_info_get(b, n, &info) == 0 && info.width && info.height &&
            region_rc(b, n, NULL, &(ferry_rect){0, 0, info.width, 1}) < 0)
            CHECK(ferry_last_errmsg()[0] != 0);
        count++;
    }
    CHECK_EQ(count, 23);
}

TEST(region_bad_arguments)
{
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(tiny_png, sizeof tiny_png, &info));
    unsigned char px[64];
    ferry_image_region r;
    size_t size;
    static const ferry_rect bad[] = {
        {0, 0, 0, 1},          {0, 0, 1, 0},          {2, 0, 1, 1},
        {0, 1, 1, 1},          {1, 0, 2, 1},          {0, 0, 3, 1},
        {UINT32_MAX, 0, 2, 1}, {0, UINT32_MAX, 1, 2}, {1, 0, UINT32_MAX, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(ferry_image_region_size(&info, NULL, &bad[i], 0, 0, &size), FERRY_EINVAL);
        CHECK_RC(ferry_image_decode_region(tiny_png, sizeof tiny_png, NULL, &bad[i], 0, 0, px,
                                           sizeof px, &r),
                 FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "crop");
    }
    ferry_rect c = {1, 0, 1, 1};
    CHECK_OK(ferry_image_region_size(&info, NULL, &c, 0, 0, &size));
    CHECK_EQ(size, 3);
    CHECK_OK(ferry_image_decode_region(tiny_png, sizeof tiny_png, NULL, &c, 0, 0, px, 3, &r));
    CHECK(px[0] == 0 && px[1] == 255 && px[2] == 0);
    CHECK(r.width == 1 && r.height == 1 && r.x0 == 0 && r.x1 == 1 && r.scale_num == 8);
    CHECK_RC(ferry_image_decode_region(tiny_png, sizeof tiny_png, NULL, &c, 0, 0, px, 2, &r),
             FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "3 bytes");
    /* NULLs, options, formats, limits */
    CHECK_RC(ferry_image_region_size(NULL, NULL, &c, 0, 0, &size), FERRY_EINVAL);
    CHECK_RC(ferry_image_region_size(&info, NULL, &c, 0, 0, NULL), FERRY_EINVAL);
    ferry_image_info unknown = info;
    unknown.format = FERRY_IMAGE_UNKNOWN;
    CHECK_RC(ferry_image_region_size(&unknown, NULL, &c, 0, 0, &size), FERRY_EINVAL);
    CHECK_RC(ferry_image_decode_region(NULL, 5, NULL, &c, 0, 0, px, 3, &r), FERRY_EINVAL);
    CHECK_RC(ferry_image_decode_region(tiny_png, sizeof tiny_png, NULL, &c, 0, 0, NULL, 3, &r),
             FERRY_EINVAL);
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.keep_alpha = 2;
    CHECK_RC(ferry_image_decode_region(tiny_png, sizeof tiny_png, &o, &c, 0, 0, px, 3, &r),
             FERRY_EINVAL);
    ferry_decode_opts_default(&o);
    o.max_pixels = 1; /* applies to the whole image, not the crop */
    CHECK_RC(ferry_image_region_size(&info, &o, &c, 0, 0, &size), FERRY_ERANGE);
    CHECK_RC(ferry_image_decode_region(tiny_png, sizeof tiny_png, &o, &c, 0, 0, px, 3, &r),
             FERRY_ERANGE);
    CHECK_RC(ferry_image_decode_region("GIF89a..", 8, NULL, &c, 0, 0, px, 3, &r), FERRY_ENOTSUP);
    CHECK_RC(ferry_image_decode_region("", 0, NULL, &c, 0, 0, px, 3, &r), FERRY_ECORRUPT);
    /* no crash on r == NULL */
    CHECK_OK(ferry_image_decode_region(tiny_png, sizeof tiny_png, NULL, &c, 0, 0, px, 3, NULL));
}

TEST(region_jpeg_bad_arguments)
{
    size_t n;
    unsigned char *b = read_testorig(&n);
    ferry_image_info info;
    CHECK_OK(ferry_image_info_get(b, n, &info));
    unsigned char *px = malloc((size_t)227 * 149 * 3);
    ferry_image_region r;
    ferry_rect outside = {200, 100, 28, 10};
    CHECK_RC(ferry_image_decode_region(b, n, NULL, &outside, 0, 0, px, 227 * 149 * 3, &r),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "227x149");
    ferry_rect c = {100, 50, 100, 60};
    size_t size;
    CHECK_OK(ferry_image_region_size(&info, NULL, &c, 25, 15, &size));
    CHECK_RC(ferry_image_decode_region(b, n, NULL, &c, 25, 15, px, size - 1, &r), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "scale 2/8");
    CHECK_OK(ferry_image_decode_region(b, n, NULL, &c, 25, 15, px, size, &r));
    CHECK_EQ(r.scale_num, 2);
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.max_pixels = 227 * 149 - 1;
    CHECK_RC(ferry_image_region_size(&info, &o, &c, 0, 0, &size), FERRY_ERANGE);
    CHECK_RC(ferry_image_decode_region(b, n, &o, &c, 0, 0, px, 227 * 149 * 3, &r), FERRY_ERANGE);
    /* the whole image's size and message are ferry_image_decode's */
    CHECK_OK(ferry_image_region_size(&info, NULL, NULL, 0, 0, &size));
    CHECK_EQ(size, (size_t)227 * 149 * 3);
    CHECK_RC(ferry_image_decode_region(b, n, NULL, NULL, 0, 0, px, size - 1, &r), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "101469 bytes");
    free(px);
    free(b);
}

/* The scale: the strongest of 1/8, 1/4, 1/2 that leaves the crop at least
 * min_w x min_h, and only when both are given. */
TEST(region_scale_choice)
{
    size_t n;
    unsigned char *b = read_testorig(&n);
    static const struct {
        ferry_rect c;
        uint32_t min_w, min_h, num;
    } cases[] = {
        {{0, 0, 227, 149}, 0, 0, 8},    {{0, 0, 227, 149}, 100, 0, 8},
        {{0, 0, 227, 149}, 0, 50, 8},   {{0, 0, 227, 149}, 114, 10, 8},
        {{0, 0, 227, 149}, 113, 10, 4}, {{0, 0, 227, 149}, 113, 74, 4},
        {{0, 0, 227, 149}, 113, 75, 8}, {{0, 0, 227, 149}, 56, 37, 2},
        {{0, 0, 227, 149}, 28, 18, 1},  {{0, 0, 227, 149}, 1, 1, 1},
        {{10, 20, 160, 96}, 40, 24, 2}, {{10, 20, 160, 96}, 40, 25, 4},
        {{10, 20, 160, 96}, 20, 12, 1}, {{10, 20, 160, 96}, 21, 12, 2},
        {{3, 5, 17, 16}, 2, 2, 1},      {{3, 5, 17, 16}, 3, 2, 2},
        {{3, 5, 17, 16}, 9, 8, 8},      {{226, 148, 1, 1}, 1, 1, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ferry_image_region r;
        int rc;
        unsigned char *px =
            region_of(b, n, NULL, &cases[i].c, cases[i].min_w, cases[i].min_h, &r, &rc);
        CHECK(px != NULL);
        if (r.scale_num != cases[i].num)
            test_fail(__FILE__, __LINE__, "case %zu: scale %u, want %u", i, r.scale_num,
                      cases[i].num);
        /* never reduced below the minimum */
        if (cases[i].min_w && cases[i].min_h)
            CHECK(r.x1 - r.x0 >= cases[i].min_w && r.y1 - r.y0 >= cases[i].min_h);
        free(px);
    }
    free(b);
    /* CMYK and YCCK files are never reduced */
    b = test_read_file(JPEG_DIR "/valid/pillow_pil_sample_cmyk.jpg", &n);
    check_full_scale(b, n, NULL, &(ferry_rect){0, 0, 100, 100}, 12, 12);
    free(b);
}

/* The reduced IDCTs against a box filter of the full decode: each decoded pixel j
 * at scale s covers full-resolution [j / s, (j + 1) / s) in each direction. */
static void box_stats(const unsigned char *full, uint32_t w, uint32_t h, const unsigned char *px,
                      const ferry_image_region *r, const ferry_rect *c, double *sum, size_t *count,
                      size_t *over8, int *maxd)
{
    uint32_t f = 8 / r->scale_num;
    double s = r->scale_num / 8.0;
    uint32_t ox = (uint32_t)(c->x * s - r->x0), oy = (uint32_t)(c->y * s - r->y0);
    size_t ch = (size_t)r->channels;
    /* the pixels wholly inside the crop */
    uint32_t i0 = (uint32_t)ceil(r->x0), i1 = (uint32_t)floor(r->x1);
    uint32_t j0 = (uint32_t)ceil(r->y0), j1 = (uint32_t)floor(r->y1);
    for (uint32_t j = j0; j < j1; j++) {
        for (uint32_t i = i0; i < i1; i++) {
            uint32_t fx0 = (ox + i) * f, fy0 = (oy + j) * f;
            uint32_t fx1 = fx0 + f > w ? w : fx0 + f, fy1 = fy0 + f > h ? h : fy0 + f;
            for (size_t k = 0; k < ch; k++) {
                double acc = 0;
                for (uint32_t y = fy0; y < fy1; y++)
                    for (uint32_t x = fx0; x < fx1; x++)
                        acc += full[((size_t)y * w + x) * ch + k];
                acc /= (double)(fx1 - fx0) * (fy1 - fy0);
                double dd = fabs(px[j * r->stride + i * ch + k] - acc);
                *sum += dd;
                (*count)++;
                *over8 += dd > 8;
                if ((int)(dd + 0.5) > *maxd)
                    *maxd = (int)(dd + 0.5);
            }
        }
    }
}

/* Measured on these files (mean |diff|, share over 8, max): 0.89, 0.7% and 36 at
 * 1/2, 0.79, 0.1% and 17 at 1/4, 0.6, <0.1% and 5 at 1/8, the largest at sharp
 * edges, where truncating the DCT rings and a box does not. (CMYK files are not
 * reduced: see region_scale_choice.) */
TEST(region_scaled_close_to_box_filter)
{
    test_need_shared(JPEG_DIR);
    static const char *files[] = {"ljt_testorig.jpg",          "ljt_testimgint.jpg",
                                  "pillow_hopper.jpg",         "pillow_pil_sample_rgb.jpg",
                                  "jd_jpg-progressive.jpg",    "jd_jpg-gray.jpg",
                                  "jd_non-interleaved-mcu.jpg"};
    for (uint32_t num = 4; num >= 1; num /= 2) {
        double sum = 0;
        size_t count = 0, over8 = 0;
        int maxd = 0;
        for (size_t fi = 0; fi < sizeof files / sizeof files[0]; fi++) {
            char path[600];
            snprintf(path, sizeof path, "%s/valid/%s", JPEG_DIR, files[fi]);
            size_t n;
            unsigned char *b = test_read_file(path, &n);
            ferry_decode_opts o;
            ferry_decode_opts_default(&o);
            o.grey = fi == 1; /* luma straight from the file */
            ferry_image_info info;
            int rc;
            unsigned char *full = decode_file(path, &o, &info, &rc);
            CHECK(full != NULL);
            ferry_rect crops[64];
            int nc = crops_for(info.width, info.height, crops, 20, 77 + fi);
            for (int i = 0; i < nc; i++) {
                ferry_rect *c = &crops[i];
                if (c->w * num < 16 || c->h * num < 16)
                    continue;
                ferry_image_region r;
                unsigned char *px = region_of(b, n, &o, c, c->w * num / 8, c->h * num / 8, &r, &rc);
                CHECK(px != NULL);
                CHECK_EQ(r.scale_num, num);
                box_stats(full, info.width, info.height, px, &r, c, &sum, &count, &over8, &maxd);
                free(px);
            }
            free(full);
            free(b);
        }
        CHECK(count > 1000);
        double mean = sum / (double)count;
        printf("scale %u/8: %zu samples, mean |diff| %.3f, over 8: %.3f%%, max %d\n", num, count,
               mean, 100.0 * (double)over8 / (double)count, maxd);
        CHECK(mean < 1.25);
        CHECK((double)over8 < 0.01 * (double)count);
        CHECK(maxd <= (num == 4 ? 40 : num == 2 ? 20 : 8));
    }
}

/* Every allocation the region path makes fails cleanly: libspng's and the row
 * buffer for PNG (row by row and interlaced); the JPEG path makes none of its own. */
TEST(region_alloc_failures)
{
    test_need_shared(JPEG_DIR);
    static const char *pngs[] = {PNG_DIR "/valid/basn2c08.png", PNG_DIR "/valid/basi6a08.png"};
    for (size_t i = 0; i < 2; i++) {
        size_t n;
        unsigned char *b = test_read_file(pngs[i], &n);
        ferry_rect c = {3, 5, 20, 9};
        unsigned char px[20 * 9 * 4];
        ferry_decode_opts o;
        ferry_decode_opts_default(&o);
        o.keep_alpha = 1;
        int done = 0;
        for (long k = 0; k < 1000 && !done; k++) {
            ferry_image_region r;
            ferry__test_fail_alloc(k);
            int rc = ferry_image_decode_region(b, n, &o, &c, 0, 0, px, sizeof px, &r);
            ferry__test_fail_alloc(-1);
            if (rc == 0)
                done = 1;
            else
                CHECK_RC(rc, FERRY_ENOMEM);
        }
        CHECK(done);
        free(b);
    }
    static const char *jpegs[] = {TESTORIG, JPEG_DIR "/valid/pillow_pil_sample_cmyk.jpg"};
    for (size_t i = 0; i < 2; i++) {
        size_t n;
        unsigned char *b = test_read_file(jpegs[i], &n);
        ferry_rect c = {3, 5, 60, 40};
        unsigned char *px = malloc(227 * 149 * 3);
        ferry_image_region r;
        ferry__test_fail_alloc(-1);
        CHECK_OK(ferry_image_decode_region(b, n, NULL, &c, 0, 0, px, 227 * 149 * 3, &r));
        CHECK_OK(ferry_image_decode_region(b, n, NULL, &c, 10, 10, px, 227 * 149 * 3, &r));
        CHECK_EQ(ferry__test_fail_alloc(-1), 0);
        free(px);
        free(b);
    }
}

/* A progressive file cut after `keep` scans, ended with EOI: valid, its later
 * coefficients unknown, so libjpeg smooths blocks with their neighbours' DC values. */
static unsigned char *cut_scans(const unsigned char *b, size_t n, int keep, size_t *m)
{
    int seen = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        /* entropy-coded data stuffs every 0xFF, so FF DA is always a marker */
        if (b[i] == 0xFF && b[i + 1] == 0xDA && seen++ == keep) {
            unsigned char *c = malloc(i + 2);
            CHECK(c != NULL);
            memcpy(c, b, i);
            c[i] = 0xFF;
            c[i + 1] = 0xD9;
            *m = i + 2;
            return c;
        }
    }
    return NULL;
}

/* Block smoothing takes the first column jpeg_crop_scanline keeps for the image's
 * edge: crops of progressive files with scans missing still equal the whole decode. */
TEST(region_jpeg_incomplete_progressive)
{
    static const int samp[3][4][2] = {
        {{2, 2}, {1, 1}, {1, 1}}, {{1, 1}, {1, 1}, {1, 1}}, {{4, 2}, {1, 1}, {1, 1}}};
    int tried = 0;
    for (int li = 0; li < 3; li++) {
        size_t n;
        unsigned char *b = make_jpeg(150, 70, 3, samp[li], 1, 0, &n);
        for (int keep = 1; keep < 10; keep++) {
            size_t m;
            unsigned char *c = cut_scans(b, n, keep, &m);
            if (!c)
                break;
            char name[64];
            snprintf(name, sizeof name, "layout %d, %d scans", li, keep);
            ferry_decode_opts o;
            ferry_decode_opts_default(&o);
            o.grey = keep % 2;
            check_all_crops(name, c, m, &o, 30, (uint64_t)(li * 10 + keep), 15,
                            (uint64_t)(li * 10 + keep));
            free(c);
            tried++;
        }
        free(b);
    }
    CHECK(tried >= 15);
}
