/*
 * Transforms: ferry_resize against Pillow (when Python has PIL and NumPy), against
 * a plain transcription of Pillow's algorithm, and on cases with known answers;
 * ferry_pixels_finish against a double-precision reference; the float16 rounding.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "core/internal.h"
#include "image/image_internal.h"

#include <math.h>
#include <stdint.h>

/* A small deterministic generator for test data. */
static uint64_t rs = 88172645463325252ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
static uint32_t rnd_below(uint32_t n)
{
    return rnd() % n;
}
static double rnd_unit(void)
{
    return rnd() / 4294967296.0;
}

static uint8_t *random_image(uint32_t w, uint32_t h, int ch, size_t stride)
{
    uint8_t *p = malloc(stride * h + 1);
    CHECK(p != NULL);
    for (size_t i = 0; i < stride * h + 1; i++)
        p[i] = (uint8_t)rnd();
    return p;
}

/* ---- Pillow's Resample.c and ImagingScaleAffine, transcribed as plainly as
 * possible (one pixel at a time, malloc'd buffers), to check the fast code where
 * Pillow itself is not installed. ---- */

static double ref_filter(int f, double x)
{
    if (x < 0.0)
        x = -x;
    if (f == FERRY_FILTER_BILINEAR)
        return x < 1.0 ? 1.0 - x : 0.0;
    if (x < 1.0)
        return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * -0.5;
    return 0.0;
}

static int ref_coeffs(int in_size, float in0, float in1, int out_size, int f, int **boundsp,
                      int32_t **kkp)
{
    double support, scale, filterscale;
    filterscale = scale = (double)(in1 - in0) / out_size;
    if (filterscale < 1.0)
        filterscale = 1.0;
    support = (f == FERRY_FILTER_BICUBIC ? 2.0 : 1.0) * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *kk = calloc((size_t)out_size * ksize, sizeof(double));
    int *bounds = calloc((size_t)out_size * 2, sizeof(int));
    int32_t *ik = calloc((size_t)out_size * ksize, sizeof(int32_t));
    CHECK(kk && bounds && ik);
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double *k = &kk[xx * ksize];
        for (int x = 0; x < xmax; x++) {
            double w = ref_filter(f, (x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (int x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    for (int i = 0; i < out_size * ksize; i++)
        ik[i] = kk[i] < 0 ? (int)(-0.5 + kk[i] * (1 << 22)) : (int)(0.5 + kk[i] * (1 << 22));
    free(kk);
    *boundsp = bounds;
    *kkp = ik;
    return ksize;
}

static uint8_t ref_clip(int64_t s)
{
    s >>= 22;
    return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

static void ref_resize(const uint8_t *src, int sw, int sh, size_t sstride, int ch, double dx0,
                       double dy0, double dx1, double dy1, int f, uint8_t *dst, int dw, int dh,
                       size_t dstride)
{
    float box[4] = {(float)dx0, (float)dy0, (float)dx1, (float)dy1};
    if (box[0] - (int)box[0] == 0 && box[2] - box[0] == dw && box[1] - (int)box[1] == 0 &&
        box[3] - box[1] == dh) {
        for (int y = 0; y < dh; y++)
            memcpy(dst + y * dstride, src + ((int)box[1] + y) * sstride + (int)box[0] * ch,
                   (size_t)dw * ch);
        return;
    }
    if (f == FERRY_FILTER_NEAREST) {
        double a0 = (double)(box[2] - box[0]) / dw, a4 = (double)(box[3] - box[1]) / dh;
        double yo = box[1] + a4 * 0.5;
        for (int y = 0; y < dh; y++, yo += a4) {
            double xo = box[0] + a0 * 0.5;
            int yi = yo < 0 ? -1 : (int)yo;
            for (int x = 0; x < dw; x++, xo += a0) {
                int xi = xo < 0 ? -1 : (int)xo;
                for (int c = 0; c < ch; c++)
                    dst[y * dstride + x * ch + c] = yi >= 0 && yi < sh && xi >= 0 && xi < sw
                                                        ? src[yi * sstride + xi * ch + c]
                                                        : 0;
            }
        }
        return;
    }
    int need_h = dw != sw || box[0] != 0 || box[2] != dw;
    int need_v = dh != sh || box[1] != 0 || box[3] != dh;
    int *bv, *bh;
    int32_t *kv, *kh;
    int ksv = ref_coeffs(sh, box[1], box[3], dh, f, &bv, &kv);
    int yfirst = bv[0], ylast = bv[dh * 2 - 2] + bv[dh * 2 - 1];
    const uint8_t *in = src;
    size_t instride = sstride;
    uint8_t *tmp = NULL;
    if (need_h) {
        int ksh = ref_coeffs(sw, box[0], box[2], dw, f, &bh, &kh);
        for (int i = 0; i < dh; i++)
            bv[i * 2] -= yfirst;
        tmp = malloc((size_t)dw * ch * (ylast - yfirst));
        CHECK(tmp != NULL);
        for (int yy = 0; yy < ylast - yfirst; yy++)
            for (int xx = 0; xx < dw; xx++)
                for (int c = 0; c < ch; c++) {
                    int64_t ss = 1 << 21;
                    for (int x = 0; x < bh[xx * 2 + 1]; x++)
                        ss += (int64_t)src[(yy + yfirst) * sstride + (x + bh[xx * 2]) * ch + c] *
                              kh[xx * ksh + x];
                    tmp[(yy * dw + xx) * ch + c] = ref_clip(ss);
                }
        free(bh);
        free(kh);
        in = tmp;
        instride = (size_t)dw * ch;
    }
    if (need_v) {
        for (int yy = 0; yy < dh; yy++)
            for (int i = 0; i < dw * ch; i++) {
                int64_t ss = 1 << 21;
                for (int y = 0; y < bv[yy * 2 + 1]; y++)
                    ss += (int64_t)in[(y + bv[yy * 2]) * instride + i] * kv[yy * ksv + y];
                dst[yy * dstride + i] = ref_clip(ss);
            }
    } else {
        for (int y = 0; y < dh; y++)
            memcpy(dst + y * dstride, in + y * instride, (size_t)dw * ch);
    }
    free(tmp);
    free(bv);
    free(kv);
}

/* ferry_resize (simd) or its plain C kernels, with scratch from malloc, packed
 * dst; returns the dst (malloc'd). */
static uint8_t *resize_with(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                            double x0, double y0, double x1, double y1, ferry_filter f, uint32_t dw,
                            uint32_t dh, bool simd)
{
    size_t ts = ferry_resize_tmp_size(sw, sh, ch, x0, y0, x1, y1, dw, dh, f);
    CHECK(ts > 0);
    void *tmp = malloc(ts);
    uint8_t *dst = malloc((size_t)dw * dh * ch);
    CHECK(tmp && dst);
    CHECK_OK(ferry__resize_impl(src, sw, sh, sstride, ch, x0, y0, x1, y1, f, dst, dw, dh,
                                (size_t)dw * ch, tmp, ts, simd));
    free(tmp);
    return dst;
}

static uint8_t *do_resize(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                          double x0, double y0, double x1, double y1, ferry_filter f, uint32_t dw,
                          uint32_t dh)
{
    return resize_with(src, sw, sh, sstride, ch, x0, y0, x1, y1, f, dw, dh, true);
}

/* Both kernels (the SIMD one where this machine has it) against the
 * transcription, byte for byte. */
static void check_same_as_ref(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                              double x0, double y0, double x1, double y1, ferry_filter f,
                              uint32_t dw, uint32_t dh)
{
    uint8_t *want = malloc((size_t)dw * dh * ch);
    CHECK(want != NULL);
    ref_resize(src, (int)sw, (int)sh, sstride, ch, x0, y0, x1, y1, f, want, (int)dw, (int)dh,
               (size_t)dw * ch);
    for (int simd = 0; simd < 2; simd++) {
        uint8_t *got = resize_with(src, sw, sh, sstride, ch, x0, y0, x1, y1, f, dw, dh, simd);
        for (size_t i = 0; i < (size_t)dw * dh * ch; i++)
            if (got[i] != want[i])
                test_fail(__FILE__, __LINE__,
                          "%s: %ux%u ch %d box %.9g,%.9g-%.9g,%.9g filter %d -> %ux%u: byte %zu "
                          "(x %zu, y %zu) is %u, the transcription gives %u",
                          simd ? "simd" : "plain C", sw, sh, ch, x0, y0, x1, y1, (int)f, dw, dh, i,
                          i / ch % dw, i / ch / dw, got[i], want[i]);
        free(got);
    }
    free(want);
}

static const ferry_filter filters[3] = {FERRY_FILTER_BILINEAR, FERRY_FILTER_NEAREST,
                                        FERRY_FILTER_BICUBIC};

/* ---- resize: known answers ---- */

TEST(resize_identity_is_a_copy)
{
    for (int ch = 1; ch <= 4; ch++)
        for (int fi = 0; fi < 3; fi++) {
            uint32_t w = 37, h = 23;
            size_t stride = (size_t)w * ch + 5;
            uint8_t *src = random_image(w, h, ch, stride);
            uint8_t *out = do_resize(src, w, h, stride, ch, 0, 0, w, h, filters[fi], w, h);
            for (uint32_t y = 0; y < h; y++)
                CHECK(!memcmp(out + (size_t)y * w * ch, src + y * stride, (size_t)w * ch));
            free(out);
            /* an integer box the size of the output is a crop */
            out = do_resize(src, w, h, stride, ch, 3, 4, 3 + 20, 4 + 11, filters[fi], 20, 11);
            for (uint32_t y = 0; y < 11; y++)
                CHECK(!memcmp(out + (size_t)y * 20 * ch, src + (y + 4) * stride + 3 * ch,
                              (size_t)20 * ch));
            free(out);
            free(src);
        }
}

TEST(resize_constant_stays_constant)
{
    static const double boxes[][4] = {
        {0, 0, 40, 30}, {0.5, 0.25, 39.75, 29.5}, {10.3, 7.9, 12.1, 8.2}, {0, 0, 1.5, 30}};
    static const uint32_t sizes[][2] = {{40, 30}, {7, 5}, {224, 224}, {1, 1}, {81, 3}};
    for (int ch = 1; ch <= 4; ch++)
        for (int fi = 0; fi < 3; fi++)
            for (size_t b = 0; b < sizeof boxes / sizeof *boxes; b++)
                for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
                    uint8_t px[4] = {0, 255, 77, 200};
                    size_t stride = 40 * (size_t)ch;
                    uint8_t *src = malloc(stride * 30);
                    CHECK(src != NULL);
                    for (size_t i = 0; i < stride * 30; i++)
                        src[i] = px[i % ch];
                    uint32_t dw = sizes[s][0], dh = sizes[s][1];
                    uint8_t *out = do_resize(src, 40, 30, stride, ch, boxes[b][0], boxes[b][1],
                                             boxes[b][2], boxes[b][3], filters[fi], dw, dh);
                    for (size_t i = 0; i < (size_t)dw * dh * ch; i++)
                        if (out[i] != px[i % ch])
                            test_fail(__FILE__, __LINE__,
                                      "ch %d filter %d box %zu -> %ux%u: byte %zu is %u, not %u",
                                      ch, fi, b, dw, dh, i, out[i], px[i % ch]);
                    free(out);
                    free(src);
                }
}

TEST(resize_downscale_2x)
{
    /* bilinear at scale 2: support 2, taps 1/8 3/8 3/8 1/8 around each pair */
    uint32_t w = 16, h = 4;
    uint8_t src[16 * 4], ramp[16 * 4];
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            src[y * w + x] = x % 2 ? 255 : 0;
            ramp[y * w + x] = (uint8_t)(10 * x);
        }
    uint8_t *out = do_resize(src, w, h, w, 1, 0, 0, w, h, FERRY_FILTER_BILINEAR, 8, 4);
    for (int y = 0; y < 4; y++) {
        /* edge: taps 0,1,2 weigh 3/7 3/7 1/7 -> 255 * 3 / 7 = 109.3 */
        CHECK_EQ(out[y * 8], 109);
        /* 255 / 2 rounds half up */
        for (int x = 1; x < 7; x++)
            CHECK_EQ(out[y * 8 + x], 128);
    }
    free(out);
    /* a linear ramp is kept: the value at each output centre (20 x + 5) */
    for (int fi = 0; fi < 3; fi += 2) {
        out = do_resize(ramp, w, h, w, 1, 0, 0, w, h, filters[fi], 8, 4);
        for (int x = 2; x < 6; x++)
            CHECK_EQ(out[x], 20 * x + 5);
        free(out);
    }
    /* NEAREST takes the pixel under each output centre: 1, 3, 5, ... */
    out = do_resize(ramp, w, h, w, 1, 0, 0, w, h, FERRY_FILTER_NEAREST, 8, 2);
    for (int x = 0; x < 8; x++)
        CHECK_EQ(out[x], 10 * (2 * x + 1));
    free(out);
}

TEST(resize_fractional_boxes)
{
    rs = 12345;
    for (int i = 0; i < 300; i++) {
        int ch = 1 + (int)rnd_below(4);
        uint32_t sw = 1 + rnd_below(60), sh = 1 + rnd_below(60);
        uint32_t dw = 1 + rnd_below(70), dh = 1 + rnd_below(70);
        double x0 = rnd_unit() * sw * 0.7, y0 = rnd_unit() * sh * 0.7;
        double x1 = x0 + (sw - x0) * (0.05 + 0.95 * rnd_unit());
        double y1 = y0 + (sh - y0) * (0.05 + 0.95 * rnd_unit());
        if ((float)x0 >= (float)x1 || (float)y0 >= (float)y1)
            continue;
        size_t stride = (size_t)sw * ch + rnd_below(8);
        uint8_t *src = random_image(sw, sh, ch, stride);
        check_same_as_ref(src, sw, sh, stride, ch, x0, y0, x1, y1, filters[i % 3], dw, dh);
        free(src);
    }
    /* a ramp keeps its slope inside a fractional box, away from the edges */
    uint8_t ramp[64 * 2];
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 64; x++)
            ramp[y * 64 + x] = (uint8_t)(3 * x);
    uint8_t *out = do_resize(ramp, 64, 2, 64, 1, 10.25, 0, 50.25, 2, FERRY_FILTER_BILINEAR, 20, 2);
    for (int x = 3; x < 17; x++) {
        double want = 3 * (10.25 + 2 * (x + 0.5) - 0.5);
        CHECK(fabs(out[x] - want) <= 1.0);
    }
    free(out);
}

TEST(resize_typical_crops)
{
    /* the pipeline's sizes: a crop of a photo to 224 x 224, both ways */
    rs = 777;
    for (int i = 0; i < 12; i++) {
        int ch = i % 4 == 3 ? 1 : 3;
        uint32_t sw = 150 + rnd_below(300), sh = 150 + rnd_below(300);
        size_t stride = (size_t)sw * ch;
        uint8_t *src = random_image(sw, sh, ch, stride);
        double x0 = rnd_unit() * sw / 3, y0 = rnd_unit() * sh / 3;
        double x1 = sw - rnd_unit() * sw / 3, y1 = sh - rnd_unit() * sh / 3;
        check_same_as_ref(src, sw, sh, stride, ch, x0, y0, x1, y1, filters[i % 3], 224, 224);
        check_same_as_ref(src, sw, sh, stride, ch, 0, 0, sw, sh, filters[i % 3], 224, 224);
        free(src);
    }
}

TEST(resize_one_pixel)
{
    for (int ch = 1; ch <= 4; ch++)
        for (int fi = 0; fi < 3; fi++) {
            uint8_t px[4] = {9, 250, 128, 31};
            uint8_t *out = do_resize(px, 1, 1, (size_t)ch, ch, 0, 0, 1, 1, filters[fi], 5, 7);
            for (int i = 0; i < 5 * 7 * ch; i++)
                CHECK_EQ(out[i], px[i % ch]);
            free(out);
            out = do_resize(px, 1, 1, (size_t)ch, ch, 0.25, 0.5, 0.75, 0.625, filters[fi], 3, 1);
            for (int i = 0; i < 3 * ch; i++)
                CHECK_EQ(out[i], px[i % ch]);
            free(out);
            /* down to one pixel, and one row and one column */
            rs = 99 + (uint64_t)ch;
            uint8_t *src = random_image(13, 9, ch, 13 * (size_t)ch);
            check_same_as_ref(src, 13, 9, 13 * (size_t)ch, ch, 0, 0, 13, 9, filters[fi], 1, 1);
            check_same_as_ref(src, 13, 9, 13 * (size_t)ch, ch, 0, 0, 13, 9, filters[fi], 1, 9);
            check_same_as_ref(src, 13, 9, 13 * (size_t)ch, ch, 0, 0, 13, 9, filters[fi], 13, 1);
            check_same_as_ref(src, 13, 9, 13 * (size_t)ch, ch, 2.5, 0, 7.25, 9, filters[fi], 13, 1);
            check_same_as_ref(src, 13, 1, 13 * (size_t)ch, ch, 0, 0, 13, 1, filters[fi], 20, 3);
            check_same_as_ref(src, 1, 9, 13 * (size_t)ch, ch, 0, 0, 1, 9, filters[fi], 4, 4);
            free(src);
        }
}

TEST(resize_channels_are_independent)
{
    rs = 4242;
    for (int ch = 2; ch <= 4; ch++)
        for (int fi = 0; fi < 3; fi++) {
            uint32_t sw = 53, sh = 41, dw = 30, dh = 67;
            uint8_t *src = random_image(sw, sh, ch, (size_t)sw * ch);
            uint8_t *all = do_resize(src, sw, sh, (size_t)sw * ch, ch, 1.5, 2.25, 50.5, 40,
                                     filters[fi], dw, dh);
            uint8_t *plane = malloc((size_t)sw * sh);
            CHECK(plane != NULL);
            for (int c = 0; c < ch; c++) {
                for (size_t i = 0; i < (size_t)sw * sh; i++)
                    plane[i] = src[i * ch + c];
                uint8_t *one =
                    do_resize(plane, sw, sh, sw, 1, 1.5, 2.25, 50.5, 40, filters[fi], dw, dh);
                for (size_t i = 0; i < (size_t)dw * dh; i++)
                    CHECK_EQ(all[i * ch + c], one[i]);
                free(one);
            }
            free(plane);
            free(all);
            free(src);
        }
}

TEST(resize_strides_and_unaligned_scratch)
{
    rs = 31337;
    for (int ch = 1; ch <= 4; ch++)
        for (int fi = 0; fi < 3; fi++) {
            uint32_t sw = 45, sh = 33, dw = 29, dh = 50;
            size_t sstride = (size_t)sw * ch + 13, dstride = (size_t)dw * ch + 7;
            uint8_t *src = random_image(sw, sh, ch, sstride);
            uint8_t *want =
                do_resize(src, sw, sh, sstride, ch, 0.5, 0.5, 44, 32, filters[fi], dw, dh);
            size_t ts = ferry_resize_tmp_size(sw, sh, ch, 0.5, 0.5, 44, 32, dw, dh, filters[fi]);
            uint8_t *tmp = malloc(ts + 3);
            uint8_t *dst = malloc(dstride * dh);
            CHECK(tmp && dst);
            memset(dst, 0xAB, dstride * dh);
            CHECK_OK(ferry_resize(src, sw, sh, sstride, ch, 0.5, 0.5, 44, 32, filters[fi], dst, dw,
                                  dh, dstride, tmp + 3, ts));
            for (uint32_t y = 0; y < dh; y++) {
                CHECK(!memcmp(dst + y * dstride, want + (size_t)y * dw * ch, (size_t)dw * ch));
                for (size_t i = (size_t)dw * ch; i < dstride; i++)
                    CHECK_EQ(dst[y * dstride + i], 0xAB);
            }
            free(tmp);
            free(dst);
            free(want);
            free(src);
        }
}

TEST(resize_rejects_bad_arguments)
{
    uint8_t src[10 * 10 * 3] = {0}, dst[8 * 8 * 3];
    size_t ts = ferry_resize_tmp_size(10, 10, 3, 0, 0, 10, 10, 8, 8, FERRY_FILTER_BILINEAR);
    CHECK(ts > 0);
    uint8_t *tmp = malloc(ts);
    CHECK(tmp != NULL);
#define RS(sw, sh, ss, ch, x0, y0, x1, y1, f, dw, dh, ds, t, tsz)                                  \
    ferry_resize(src, sw, sh, ss, ch, x0, y0, x1, y1, f, dst, dw, dh, ds, t, tsz)
    CHECK_OK(RS(10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts));
    CHECK_RC(RS(10, 10, 30, 0, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "ch 0");
    CHECK_RC(RS(10, 10, 30, 5, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_RC(RS(0, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "source size");
    CHECK_RC(RS(10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 0, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "output size");
    CHECK_RC(RS(10, 10, 30, 3, 0, 0, 10, 10, (ferry_filter)7, 8, 8, 24, tmp, ts), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "filter 7");
    static const double bad[][4] = {{-1, 0, 10, 10},  {0, 0, 10.5, 10},    {5, 0, 5, 10},
                                    {6, 0, 5, 10},    {0, 0, 10, 11},      {0, 3, 10, 2},
                                    {NAN, 0, 10, 10}, {0, 0, 10, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_RC(RS(10, 10, 30, 3, bad[i][0], bad[i][1], bad[i][2], bad[i][3],
                    FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
                 FERRY_EINVAL);
        CHECK_CONTAINS(ferry_last_errmsg(), "box");
        CHECK_EQ(ferry_resize_tmp_size(10, 10, 3, bad[i][0], bad[i][1], bad[i][2], bad[i][3], 8, 8,
                                       FERRY_FILTER_BILINEAR),
                 0);
    }
    /* distinct doubles that are one float */
    CHECK_RC(RS(10, 10, 30, 3, 5, 0, 5.0000000001, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_RC(RS(10, 10, 29, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "sstride");
    CHECK_RC(RS(10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 23, tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "dstride");
    CHECK_RC(ferry_resize(NULL, 10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, dst, 8, 8, 24,
                          tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "src");
    CHECK_RC(ferry_resize(src, 10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, NULL, 8, 8, 24,
                          tmp, ts),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "dst");
    /* scratch too small, or missing */
    CHECK_RC(RS(10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, tmp, ts - 1),
             FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "tmp");
    CHECK_RC(RS(10, 10, 30, 3, 0, 0, 10, 10, FERRY_FILTER_BILINEAR, 8, 8, 24, NULL, ts),
             FERRY_EOVERFLOW);
    for (int fi = 0; fi < 3; fi++) {
        size_t t2 = ferry_resize_tmp_size(10, 10, 3, 0.5, 0, 9, 10, 8, 8, filters[fi]);
        CHECK(t2 > 0 && t2 <= ts + 4096);
        CHECK_RC(RS(10, 10, 30, 3, 0.5, 0, 9, 10, filters[fi], 8, 8, 24, tmp, t2 - 1),
                 FERRY_EOVERFLOW);
    }
#undef RS
    free(tmp);
}

/* ---- resize: Pillow itself ---- */

/* The first Python that has PIL and NumPy: $FERRY_TEST_PYTHON, python3 on the
 * PATH, the system's python3. NULL if none. */
static const char *python(void)
{
    static const char *found;
    if (found)
        return found;
    const char *cands[] = {getenv("FERRY_TEST_PYTHON"), "python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        if (!cands[i] || !*cands[i])
            continue;
        char cmd[512];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import PIL, numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0)
            return found = cands[i];
    }
    return NULL;
}

static void need_pillow(void)
{
    if (!python())
        SKIP("no python3 with PIL and numpy ($FERRY_TEST_PYTHON, python3, /usr/bin/python3)");
}

/* tests/pil_resize.py, found beside this file */
static void script_path(char *buf, size_t n)
{
    snprintf(buf, n, "%s", __FILE__);
    char *slash = strrchr(buf, '/');
    size_t at = slash ? (size_t)(slash - buf) + 1 : 0;
    snprintf(buf + at, n - at, "pil_resize.py");
}

static uint8_t *read_all(const char *path, size_t want)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        test_fail(__FILE__, __LINE__, "cannot open %s", path);
    uint8_t *b = malloc(want + 1);
    CHECK(b != NULL);
    size_t n = fread(b, 1, want + 1, f);
    fclose(f);
    if (n != want)
        test_fail(__FILE__, __LINE__, "%s holds %zu bytes, not %zu", path, n, want);
    return b;
}

TEST(resize_matches_pillow)
{
    need_pillow();
    test_make_dir("pil");
    char script[512], cmd[2048], path[512];
    script_path(script, sizeof script);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s' 600 20240607", python(), script, test_dir);
    if (system(cmd) != 0)
        test_fail(__FILE__, __LINE__, "%s failed", cmd);
    FILE *list = fopen(test_path("cases.txt", path), "r");
    CHECK(list != NULL);
    int ncases = 0, nbad = 0, maxdiff = 0, per_filter[3] = {0};
    char line[512];
    while (fgets(line, sizeof line, list)) {
        int id, ch, f;
        unsigned sw, sh, dw, dh;
        double b[4];
        CHECK(sscanf(line, "%d %d %u %u %lf %lf %lf %lf %u %u %d", &id, &ch, &sw, &sh, &b[0], &b[1],
                     &b[2], &b[3], &dw, &dh, &f) == 11);
        char name[64];
        snprintf(name, sizeof name, "in_%d.raw", id);
        uint8_t *src = read_all(test_path(name, path), (size_t)sw * sh * ch);
        snprintf(name, sizeof name, "out_%d.raw", id);
        uint8_t *want = read_all(test_path(name, path), (size_t)dw * dh * ch);
        for (int simd = 0; simd < 2; simd++) {
            uint8_t *got = resize_with(src, sw, sh, (size_t)sw * ch, ch, b[0], b[1], b[2], b[3],
                                       (ferry_filter)f, dw, dh, simd);
            int bad = 0, md = 0;
            for (size_t i = 0; i < (size_t)dw * dh * ch; i++) {
                int d = abs((int)got[i] - (int)want[i]);
                if (d) {
                    bad++;
                    md = d > md ? d : md;
                }
            }
            if (bad) {
                fprintf(stderr,
                        "case %d (%s): %ux%u ch %d box %.17g,%.17g,%.17g,%.17g -> %ux%u filter "
                        "%d: %d bytes differ, max %d\n",
                        id, simd ? "simd" : "plain C", sw, sh, ch, b[0], b[1], b[2], b[3], dw, dh,
                        f, bad, md);
                nbad++;
                maxdiff = md > maxdiff ? md : maxdiff;
            }
            free(got);
        }
        ncases++;
        per_filter[f]++;
        free(src);
        free(want);
    }
    fclose(list);
    printf("%d cases (bilinear %d, nearest %d, bicubic %d), each with the SIMD and the plain C "
           "kernels: %d results differ, max diff %d\n",
           ncases, per_filter[0], per_filter[1], per_filter[2], nbad, maxdiff);
    CHECK(ncases == 600);
    CHECK_EQ(nbad, 0);
    test_remove_dir();
}

/* ---- float16 ---- */

/* An independent conversion: scale to the half's unit in double, rint. */
static uint16_t ref_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f))
        return sign | 0x7e00;
    double a = fabs((double)f);
    if (a >= 65520.0)
        return sign | 0x7c00;
    double unit = 0x1p-24;
    if (a >= 0x1p-14) {
        int e;
        frexp(a, &e); /* 2^(e-1) <= a < 2^e */
        unit = ldexp(1.0, e - 1 - 10);
    }
    double r = nearbyint(a / unit) * unit; /* round half to even */
    if (r < 0x1p-14)
        return sign | (uint16_t)(r / 0x1p-24);
    int e;
    double m = frexp(r, &e) * 2.0; /* r = m 2^(e-1), 1 <= m < 2 */
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m - 1.0) * 1024.0);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

TEST(f16_rounding)
{
    /* edges */
    static const struct {
        float f;
        uint16_t h;
    } known[] = {{0.0f, 0x0000},
                 {-0.0f, 0x8000},
                 {1.0f, 0x3c00},
                 {-2.0f, 0xc000},
                 {65504.0f, 0x7bff},
                 {65519.99f, 0x7bff},
                 {65520.0f, 0x7c00},
                 {1e9f, 0x7c00},
                 {-1e9f, 0xfc00},
                 {INFINITY, 0x7c00},
                 {-INFINITY, 0xfc00},
                 {0x1p-14f, 0x0400},
                 {0x1p-24f, 0x0001},
                 {0x1p-25f, 0x0000},
                 {0x1.8p-25f, 0x0001},
                 {0x1.8p-24f, 0x0002},
                 {0x1.4p-24f, 0x0001},
                 {0x1.ff8p-15f, 0x03ff},
                 {0x1.ffep-15f, 0x0400},
                 {1.0f + 0x1p-11f, 0x3c00},
                 {1.0f + 0x1.8p-10f, 0x3c02},
                 {0.1f, 0x2e66},
                 {1e-10f, 0x0000}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        uint16_t got = ferry__f32_to_f16(known[i].f);
        if (got != known[i].h || ref_f16(known[i].f) != known[i].h)
            test_fail(__FILE__, __LINE__, "%a: 0x%04x (reference 0x%04x), wanted 0x%04x",
                      (double)known[i].f, got, ref_f16(known[i].f), known[i].h);
    }
    CHECK((ferry__f32_to_f16(NAN) & 0x7fff) > 0x7c00);
    /* every exponent that matters, every half mantissa, with the dropped bits at and
     * around the rounding points */
    static const uint32_t low[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
    long n = 0;
    for (uint32_t e = 90; e <= 145; e++)
        for (uint32_t m = 0; m < 1024; m++)
            for (size_t l = 0; l < sizeof low / sizeof *low; l++)
                for (uint32_t s = 0; s < 2; s++) {
                    uint32_t u = s << 31 | e << 23 | m << 13 | low[l];
                    float f = bits_f32(u);
                    if (ferry__f32_to_f16(f) != ref_f16(f))
                        test_fail(__FILE__, __LINE__, "%a (0x%08x): 0x%04x, wanted 0x%04x",
                                  (double)f, u, ferry__f32_to_f16(f), ref_f16(f));
                    n++;
                }
    /* and random bit patterns */
    rs = 5;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rnd() ^ (rnd() << 16);
        float f = bits_f32(u);
        if (isnan(f))
            continue;
        if (ferry__f32_to_f16(f) != ref_f16(f))
            test_fail(__FILE__, __LINE__, "%a (0x%08x): 0x%04x, wanted 0x%04x", (double)f, u,
                      ferry__f32_to_f16(f), ref_f16(f));
    }
    CHECK(n > 0);
}

TEST(f16_matches_numpy)
{
    need_pillow();
    test_make_dir("f16");
    char cmd[1024], path[512];
    /* every float whose top 16 bits are any value and low bits one of a few
     * patterns, converted by numpy */
    snprintf(cmd, sizeof cmd,
             "%s -c \"import numpy as np; hi = np.arange(65536, dtype=np.uint32) << 16; "
             "u = np.concatenate([hi | lo for lo in (0, 1, 0x0fff, 0x1000, 0x1001, 0x2000, "
             "0x7fff, 0x8000, 0xffff)]); f = u.view(np.float32); "
             "h = np.where(np.isnan(f), 0, f.astype(np.float16).view(np.uint16)); "
             "u.tofile('%s/f32.raw'); h.astype(np.uint16).tofile('%s/f16.raw')\" 2>/dev/null",
             python(), test_dir, test_dir);
    if (system(cmd) != 0)
        test_fail(__FILE__, __LINE__, "%s failed", cmd);
    size_t n = 65536 * 9;
    uint8_t *fb = read_all(test_path("f32.raw", path), n * 4);
    uint8_t *hb = read_all(test_path("f16.raw", path), n * 2);
    long checked = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        uint16_t want;
        memcpy(&u, fb + 4 * i, 4);
        memcpy(&want, hb + 2 * i, 2);
        float f = bits_f32(u);
        if (isnan(f))
            continue;
        uint16_t got = ferry__f32_to_f16(f);
        if (got != want)
            test_fail(__FILE__, __LINE__, "%a (0x%08x): 0x%04x, numpy 0x%04x", (double)f, u, got,
                      want);
        checked++;
    }
    printf("%ld floats agree with numpy's float16\n", checked);
    free(fb);
    free(hb);
    test_remove_dir();
}

/* ---- pixels_finish ---- */

/* The header's recipe in double. out has w*h*ch doubles in HWC order: values
 * before the dtype conversion (for uint8: v * 255 before rounding). */
static void ref_finish(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                       const ferry_pixel_opts *o, double *out)
{
    size_t n = (size_t)w * h;
    double *v = malloc(n * ch * sizeof(double));
    CHECK(v != NULL);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < ch; c++)
                v[((size_t)y * w + x) * ch + c] =
                    src[y * stride + (size_t)(o->flip ? w - 1 - x : x) * ch + c] / 255.0;
    int ncol = ch >= 3 ? 3 : 1;
    int order[3] = {0, 1, 2};
    if (o->jitter_order[0] || o->jitter_order[1] || o->jitter_order[2])
        memcpy(order, o->jitter_order, sizeof order);
    double fac[3] = {o->brightness, o->contrast, o->saturation};
    for (int s = 0; s < 3; s++) {
        int step = order[s];
        double k = fac[step];
        if (k == 0 || k == 1)
            continue;
        double mean = 0;
        if (step == 1) {
            for (size_t i = 0; i < n; i++)
                mean += ncol == 3
                            ? 0.299 * v[i * ch] + 0.587 * v[i * ch + 1] + 0.114 * v[i * ch + 2]
                            : v[i * ch];
            mean /= (double)n;
        }
        for (size_t i = 0; i < n; i++) {
            double grey = ncol == 3
                              ? 0.299 * v[i * ch] + 0.587 * v[i * ch + 1] + 0.114 * v[i * ch + 2]
                              : v[i * ch];
            for (int c = 0; c < ncol; c++) {
                double *p = &v[i * ch + c];
                double r = step == 0   ? *p * k
                           : step == 1 ? mean + k * (*p - mean)
                                       : grey + k * (*p - grey);
                *p = r < 0 ? 0 : r > 1 ? 1 : r;
            }
        }
    }
    for (size_t i = 0; i < n * ch; i++) {
        int c = (int)(i % ch);
        out[i] = o->dtype == FERRY_U8 ? v[i] * 255.0
                 : o->normalize       ? (v[i] - o->mean[c]) / o->std[c]
                                      : v[i];
    }
    free(v);
}

static double got_value(const void *dst, const ferry_pixel_opts *o, uint32_t w, uint32_t h, int ch,
                        size_t hwc_index)
{
    size_t pix = hwc_index / ch, c = hwc_index % ch;
    size_t i = o->layout == FERRY_LAYOUT_CHW ? c * w * h + pix : hwc_index;
    switch (o->dtype) {
    case FERRY_U8:
        return ((const uint8_t *)dst)[i];
    case FERRY_F16:
        return half_to_double(((const uint16_t *)dst)[i]);
    default:
        return ((const float *)dst)[i];
    }
}

static void check_finish(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                         const ferry_pixel_opts *o, const char *what)
{
    size_t n = (size_t)w * h * ch;
    void *dst = malloc(n * 4 + 1);
    double *want = malloc(n * sizeof(double));
    CHECK(dst && want);
    CHECK_OK(ferry_pixels_finish(src, w, h, stride, ch, o, dst));
    /* the vectorised kernels and the plain ones give the same bits */
    void *plain = malloc(n * 4 + 1);
    CHECK(plain != NULL);
    CHECK_OK(ferry__pixels_finish_impl(src, w, h, stride, ch, o, plain, false));
    CHECK(!memcmp(dst, plain, n * ferry_dtype_size(o->dtype)));
    free(plain);
    ref_finish(src, w, h, stride, ch, o, want);
    int jitter = (o->brightness != 0 && o->brightness != 1) ||
                 (o->contrast != 0 && o->contrast != 1) ||
                 (o->saturation != 0 && o->saturation != 1);
    for (size_t i = 0; i < n; i++) {
        double got = got_value(dst, o, w, h, ch, i), ref = want[i], tol;
        int c = (int)(i % ch);
        double scale = o->normalize ? 1.0 / o->std[c] : 1.0;
        if (o->dtype == FERRY_U8) {
            /* float and double jitter can land either side of a .5 */
            tol = jitter ? 0.5 + 1e-3 : 0.5;
            if (!jitter && got != floor(ref + 0.5))
                tol = -1;
        } else {
            tol = (jitter ? 2e-6 : 3e-7) * scale + 1e-6 * fabs(ref);
            if (o->dtype == FERRY_F16)
                tol += fabs(ref) * 0x1p-11 + 0x1p-25;
        }
        if (!(fabs(got - ref) <= tol))
            test_fail(__FILE__, __LINE__,
                      "%s: ch %d dtype %s layout %d flip %d norm %d b %g c %g s %g order %d%d%d: "
                      "element %zu (pixel %zu channel %d) is %.9g, reference %.9g",
                      what, ch, ferry_dtype_name(o->dtype), o->layout, o->flip, o->normalize,
                      (double)o->brightness, (double)o->contrast, (double)o->saturation,
                      o->jitter_order[0], o->jitter_order[1], o->jitter_order[2], i, i / ch, c, got,
                      ref);
    }
    free(dst);
    free(want);
}

TEST(pixels_opts_default)
{
    ferry_pixel_opts o;
    memset(&o, 0x5a, sizeof o);
    ferry_pixel_opts_default(&o);
    CHECK_EQ(o.dtype, FERRY_F32);
    CHECK_EQ(o.layout, FERRY_LAYOUT_CHW);
    CHECK(o.brightness == 1 && o.contrast == 1 && o.saturation == 1);
    CHECK_EQ(o.flip, 0);
    CHECK_EQ(o.normalize, 0);
    for (int c = 0; c < 4; c++)
        CHECK(o.std[c] == 1 && o.mean[c] == 0);
    /* the defaults give v = byte / 255, planar */
    uint8_t src[2 * 3] = {0, 51, 255, 102, 153, 204};
    float out[6];
    CHECK_OK(ferry_pixels_finish(src, 2, 1, 6, 3, &o, out));
    static const float want[6] = {0, 102 / 255.0f, 51 / 255.0f, 153 / 255.0f, 1, 204 / 255.0f};
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == want[i]);
}

TEST(pixels_simd_equals_plain_for_every_width)
{
    /* the shuffle kernels without jitter (float32 planes, 8 pixels a step; uint8
     * planes and mirrored grey rows, 16 a step) and their tails, against the
     * plain table pass: every width up to 3 steps and a tail, both layouts,
     * mirrored or not, normalised or not, with means and stds that are not
     * ImageNet's */
    rs = 1618;
    static const ferry_dtype dtypes[3] = {FERRY_F32, FERRY_U8, FERRY_F16};
    for (int ch = 1; ch <= 4; ch++)
        for (uint32_t w = 1; w <= 52; w++) {
            uint32_t h = 1 + w % 3;
            size_t stride = (size_t)w * ch + w % 5;
            uint8_t *src = random_image(w, h, ch, stride);
            size_t n = (size_t)w * h * ch;
            float *a = malloc(n * 4), *b = malloc(n * 4);
            CHECK(a && b);
            for (int k = 0; k < 24; k++) {
                ferry_pixel_opts o;
                ferry_pixel_opts_default(&o);
                o.layout = k & 1;
                o.flip = (k >> 1) & 1;
                o.dtype = dtypes[k >> 3];
                o.normalize = o.dtype != FERRY_U8 && (k >> 2) & 1;
                for (int c = 0; c < 4; c++) {
                    o.mean[c] = (float)(rnd() % 1000) / 997.0f;
                    o.std[c] = 0.05f + (float)(rnd() % 1000) / 331.0f;
                }
                memset(a, 0x11, n * 4);
                memset(b, 0x22, n * 4);
                CHECK_OK(ferry_pixels_finish(src, w, h, stride, ch, &o, a));
                CHECK_OK(ferry__pixels_finish_impl(src, w, h, stride, ch, &o, b, false));
                if (memcmp(a, b, n * ferry_dtype_size(o.dtype)) != 0)
                    test_fail(__FILE__, __LINE__,
                              "ch %d w %u dtype %s layout %d flip %d norm %d "
                              "differ",
                              ch, w, ferry_dtype_name(o.dtype), o.layout, o.flip, o.normalize);
            }
            free(a);
            free(b);
            free(src);
        }
}

TEST(pixels_u8_planes_simd_equals_plain_at_wide_rows)
{
    /* uint8 CHW planes of RGB rows, 32 pixels a step in both 128-bit lanes (the
     * mirrored ones taking the block's halves in the other order), then 16 a
     * step and a tail: every width up to three 32-steps, a 16-step and a tail,
     * and widths around the pipeline's 224, against the plain table pass */
    rs = 3141;
    for (uint32_t i = 1; i <= 105; i++) {
        uint32_t w = i <= 100 ? i : 221 + i - 100; /* 1..100, then 222..226 */
        uint32_t h = 1 + w % 4;
        size_t stride = (size_t)w * 3 + w % 7;
        uint8_t *src = random_image(w, h, 3, stride);
        size_t n = (size_t)w * h * 3;
        uint8_t *a = malloc(n), *b = malloc(n);
        CHECK(a && b);
        for (int flip = 0; flip < 2; flip++) {
            ferry_pixel_opts o;
            ferry_pixel_opts_default(&o);
            o.dtype = FERRY_U8;
            o.layout = FERRY_LAYOUT_CHW;
            o.flip = flip;
            memset(a, 0x11, n);
            memset(b, 0x22, n);
            CHECK_OK(ferry_pixels_finish(src, w, h, stride, 3, &o, a));
            CHECK_OK(ferry__pixels_finish_impl(src, w, h, stride, 3, &o, b, false));
            if (memcmp(a, b, n) != 0)
                test_fail(__FILE__, __LINE__, "w %u h %u flip %d differ", w, h, flip);
            /* and each plane holds its channel where it belongs */
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                    for (int c = 0; c < 3; c++)
                        CHECK_EQ(a[(size_t)c * w * h + (size_t)y * w + x],
                                 src[y * stride + (size_t)(flip ? w - 1 - x : x) * 3 + c]);
        }
        free(a);
        free(b);
        free(src);
    }
}

TEST(pixels_without_jitter_are_exact)
{
    /* torchvision's ToTensor + Normalize in float32, element for element */
    rs = 2718;
    uint32_t w = 37, h = 11;
    for (int ch = 1; ch <= 4; ch++) {
        size_t stride = (size_t)w * ch + 3;
        uint8_t *src = random_image(w, h, ch, stride);
        for (int layout = 0; layout < 2; layout++)
            for (int flip = 0; flip < 2; flip++) {
                ferry_pixel_opts o;
                ferry_pixel_opts_default(&o);
                o.layout = layout;
                o.flip = flip;
                o.normalize = 1;
                const float mean[4] = {0.485f, 0.456f, 0.406f, 0.5f};
                const float std[4] = {0.229f, 0.224f, 0.225f, 0.25f};
                memcpy(o.mean, mean, sizeof mean);
                memcpy(o.std, std, sizeof std);
                float *f32 = malloc((size_t)w * h * ch * 4);
                uint16_t *f16 = malloc((size_t)w * h * ch * 2);
                uint8_t *u8 = malloc((size_t)w * h * ch);
                CHECK(f32 && f16 && u8);
                CHECK_OK(ferry_pixels_finish(src, w, h, stride, ch, &o, f32));
                o.dtype = FERRY_F16;
                CHECK_OK(ferry_pixels_finish(src, w, h, stride, ch, &o, f16));
                o.dtype = FERRY_U8;
                o.normalize = 0;
                CHECK_OK(ferry_pixels_finish(src, w, h, stride, ch, &o, u8));
                for (uint32_t y = 0; y < h; y++)
                    for (uint32_t x = 0; x < w; x++)
                        for (int c = 0; c < ch; c++) {
                            uint8_t b = src[y * stride + (size_t)(flip ? w - 1 - x : x) * ch + c];
                            float want = ((float)b / 255.0f - mean[c]) / std[c];
                            size_t i = layout == FERRY_LAYOUT_CHW
                                           ? (size_t)c * w * h + (size_t)y * w + x
                                           : ((size_t)y * w + x) * ch + c;
                            CHECK(f32[i] == want);
                            CHECK_EQ(f16[i], ref_f16(want));
                            CHECK_EQ(u8[i], b);
                        }
                free(f32);
                free(f16);
                free(u8);
            }
        free(src);
    }
}

TEST(pixels_match_the_reference)
{
    rs = 1618;
    static const float jit[][3] = {
        {1, 1, 1},    {0, 0, 0},    {1.4f, 1, 1}, {0.6f, 1, 1},       {1, 1.5f, 1},
        {1, 0.3f, 1}, {1, 1, 1.7f}, {1, 1, 0.2f}, {1.3f, 0.7f, 1.6f}, {0.5f, 1.8f, 0.4f}};
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                     {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static const ferry_dtype dts[3] = {FERRY_U8, FERRY_F32, FERRY_F16};
    uint32_t w = 70, h = 9; /* a row longer than a block, with a tail */
    for (int ch = 1; ch <= 4; ch++) {
        size_t stride = (size_t)w * ch + 1;
        uint8_t *src = random_image(w, h, ch, stride);
        for (size_t j = 0; j < sizeof jit / sizeof *jit; j++)
            for (int oi = 0; oi < 6; oi++)
                for (int d = 0; d < 3; d++)
                    for (int layout = 0; layout < 2; layout++)
                        for (int flip = 0; flip < 2; flip++)
                            for (int norm = 0; norm < 2; norm++) {
                                if (ch < 3 && jit[j][2] != 1 && jit[j][2] != 0)
                                    continue;
                                if (dts[d] == FERRY_U8 && norm)
                                    continue;
                                if (oi > 0 && (j < 2 || (flip | layout | norm)))
                                    continue; /* orders matter with several steps */
                                ferry_pixel_opts o;
                                ferry_pixel_opts_default(&o);
                                o.brightness = jit[j][0];
                                o.contrast = jit[j][1];
                                o.saturation = jit[j][2];
                                memcpy(o.jitter_order, orders[oi], sizeof o.jitter_order);
                                o.dtype = dts[d];
                                o.layout = layout;
                                o.flip = flip;
                                o.normalize = norm;
                                for (int c = 0; c < 4; c++) {
                                    o.mean[c] = 0.3f + 0.1f * c;
                                    o.std[c] = 0.2f + 0.05f * c;
                                }
                                check_finish(src, w, h, stride, ch, &o, "jitter");
                            }
        free(src);
    }
}

TEST(pixels_f16_every_byte)
{
    /* all 256 bytes through normalisations that reach small, subnormal and huge
     * halves, compared with an independent rounding of the same float */
    static const float ms[][2] = {{0.0f, 1.0f}, {0.5f, 0.5f},  {0.485f, 0.229f}, {0.0f, 3000.0f},
                                  {0.0f, 1e5f}, {0.2f, 1e-5f}, {0.9f, 1e-4f},    {0.0f, 0x1p-24f}};
    uint8_t src[256];
    for (int i = 0; i < 256; i++)
        src[i] = (uint8_t)i;
    for (size_t k = 0; k < sizeof ms / sizeof *ms; k++) {
        ferry_pixel_opts o;
        ferry_pixel_opts_default(&o);
        o.dtype = FERRY_F16;
        o.normalize = 1;
        o.mean[0] = ms[k][0];
        o.std[0] = ms[k][1];
        uint16_t out[256];
        CHECK_OK(ferry_pixels_finish(src, 256, 1, 256, 1, &o, out));
        for (int i = 0; i < 256; i++) {
            float v = ((float)i / 255.0f - ms[k][0]) / ms[k][1];
            if (out[i] != ref_f16(v))
                test_fail(__FILE__, __LINE__, "mean %g std %g byte %d: %a -> 0x%04x, wanted 0x%04x",
                          (double)ms[k][0], (double)ms[k][1], i, (double)v, out[i], ref_f16(v));
        }
        /* the jitter path converts the same way */
        o.brightness = 0.999f;
        CHECK_OK(ferry_pixels_finish(src, 256, 1, 256, 1, &o, out));
        for (int i = 0; i < 256; i++) {
            float b = (float)i / 255.0f * 0.999f;
            float v = ((b < 0 ? 0 : b > 1 ? 1 : b) - ms[k][0]) / ms[k][1];
            CHECK_EQ(out[i], ref_f16(v));
        }
    }
}

TEST(pixels_contrast_uses_the_current_mean)
{
    /* brightness 0.5 then contrast 2 on a grey ramp: the mean is taken after the
     * brightness step */
    uint8_t src[4] = {0, 100, 200, 255};
    ferry_pixel_opts o;
    ferry_pixel_opts_default(&o);
    o.dtype = FERRY_F32;
    o.brightness = 0.5f;
    o.contrast = 2.0f;
    float out[4];
    CHECK_OK(ferry_pixels_finish(src, 4, 1, 4, 1, &o, out));
    double m = (0 + 100 + 200 + 255) / 255.0 * 0.5 / 4;
    for (int i = 0; i < 4; i++) {
        double v = m + 2 * (src[i] / 255.0 * 0.5 - m);
        v = v < 0 ? 0 : v > 1 ? 1 : v;
        CHECK(fabs(out[i] - v) < 1e-6);
    }
    /* contrast first: the mean of the original */
    o.jitter_order[0] = 1;
    o.jitter_order[1] = 0;
    o.jitter_order[2] = 2;
    CHECK_OK(ferry_pixels_finish(src, 4, 1, 4, 1, &o, out));
    m = (0 + 100 + 200 + 255) / 255.0 / 4;
    for (int i = 0; i < 4; i++) {
        double v = m + 2 * (src[i] / 255.0 - m);
        v = (v < 0 ? 0 : v > 1 ? 1 : v) * 0.5;
        CHECK(fabs(out[i] - v) < 1e-6);
    }
    /* alpha (the 4th channel) is left alone */
    uint8_t rgba[8] = {10, 20, 30, 40, 200, 100, 50, 250};
    ferry_pixel_opts_default(&o);
    o.dtype = FERRY_U8;
    o.layout = FERRY_LAYOUT_HWC;
    o.brightness = 0.5f;
    o.saturation = 0.5f;
    uint8_t u8[8];
    CHECK_OK(ferry_pixels_finish(rgba, 2, 1, 8, 4, &o, u8));
    CHECK_EQ(u8[3], 40);
    CHECK_EQ(u8[7], 250);
    CHECK_EQ(u8[0], 7); /* 10/2 = 5 pulled half way to its grey 9.075: 7.04 */
}

TEST(pixels_reject_bad_arguments)
{
    uint8_t src[4 * 4 * 3] = {0};
    float dst[4 * 4 * 3];
    ferry_pixel_opts o;
    ferry_pixel_opts_default(&o);
    CHECK_OK(ferry_pixels_finish(src, 4, 4, 12, 3, &o, dst));
    CHECK_RC(ferry_pixels_finish(src, 4, 4, 12, 3, NULL, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "opts");
    CHECK_RC(ferry_pixels_finish(NULL, 4, 4, 12, 3, &o, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "src");
    CHECK_RC(ferry_pixels_finish(src, 4, 4, 12, 3, &o, NULL), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "dst");
    CHECK_RC(ferry_pixels_finish(src, 4, 4, 12, 5, &o, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "ch 5");
    CHECK_RC(ferry_pixels_finish(src, 0, 4, 12, 3, &o, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "size");
    CHECK_RC(ferry_pixels_finish(src, 4, 4, 11, 3, &o, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "stride");

#define BAD(field_stmt, needle)                                                                    \
    do {                                                                                           \
        ferry_pixel_opts_default(&o);                                                              \
        field_stmt;                                                                                \
        CHECK_RC(ferry_pixels_finish(src, 4, 4, 12, 3, &o, dst), FERRY_EINVAL);                    \
        CHECK_CONTAINS(ferry_last_errmsg(), needle);                                               \
    } while (0)
    BAD(o.dtype = FERRY_I32, "dtype int32");
    BAD(o.dtype = FERRY_DTYPE_INVALID, "dtype");
    BAD(o.layout = 2, "layout 2");
    BAD((o.dtype = FERRY_U8, o.normalize = 1), "normalize");
    BAD(o.brightness = -1, "brightness");
    BAD(o.contrast = NAN, "contrast");
    BAD(o.saturation = INFINITY, "saturation");
    BAD((o.jitter_order[0] = 1, o.jitter_order[1] = 1), "jitter_order");
    BAD((o.jitter_order[0] = 3, o.jitter_order[1] = 1), "jitter_order");
    BAD((o.normalize = 1, o.std[1] = 0), "std[1]");
    BAD((o.normalize = 1, o.std[2] = NAN), "std[2]");
    BAD((o.normalize = 1, o.mean[0] = INFINITY), "mean[0]");
#undef BAD
    /* saturation needs colour */
    ferry_pixel_opts_default(&o);
    o.saturation = 1.5f;
    CHECK_RC(ferry_pixels_finish(src, 4, 4, 4, 1, &o, dst), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saturation");
    CHECK_RC(ferry_pixels_finish(src, 2, 4, 4, 2, &o, dst), FERRY_EINVAL);
    /* std of channels the image lacks is not looked at */
    ferry_pixel_opts_default(&o);
    o.normalize = 1;
    o.std[3] = 0;
    CHECK_OK(ferry_pixels_finish(src, 4, 4, 12, 3, &o, dst));
}
