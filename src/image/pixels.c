/*
 * The last pass of an image pipeline: flip, colour jitter, conversion to the
 * output dtype and layout (ferry_pixels_finish).
 *
 * Without jitter every output element depends on one byte and its channel only,
 * so the whole pass is a table lookup: per channel 256 precomputed outputs
 * (floats, halves or bytes), written in one sweep. The float formula is
 * torchvision's ToTensor + Normalize in float32, (b / 255.0f - mean) / std, so
 * the table holds exactly the values torchvision computes.
 *
 * With jitter, pixels go through in blocks of BLOCK along a row, one float array
 * per channel, each step one vector loop over the block (AVX2 where the CPU has
 * it, else SSE or plain C: the same operations in the same order, so the same
 * floats). Contrast needs the mean luma of the image as it is when contrast runs.
 * When at most brightness comes before it, that mean follows from per-channel
 * byte histograms (luma is linear and brightness maps each value alone);
 * otherwise a first sweep applies the earlier steps and sums the luma. Either
 * way no scratch memory is needed.
 */
#include "ferry/transform.h"
#include "image_internal.h"
#include "../core/internal.h"

#include <math.h>
#include <string.h>

#define BLOCK 64

/* float to IEEE half, rounding to nearest even; also used by the tests. */
uint16_t ferry__f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x47800000u) /* |f| >= 65536 (where rounding cannot help), inf, NaN */
        return (uint16_t)(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x < 0x38800000u) { /* below 2^-14: a subnormal half or zero */
        /* Adding 0.5f puts the half's last place (2^-24) at the float's last
         * place, so the FPU's own round-to-nearest-even does the rounding. */
        float a, half = 0.5f;
        memcpy(&a, &x, sizeof a);
        a += half;
        uint32_t u;
        memcpy(&u, &a, sizeof u);
        return (uint16_t)(sign | (u - 0x3f000000u));
    }
    /* normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to
     * nearest even; a carry out of the mantissa bumps the exponent, up to inf
     * for 65520 <= |f| < 65536 */
    uint32_t odd = (x >> 13) & 1u;
    x += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (x >> 13));
}

static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* The options, checked and resolved. */
typedef struct finish {
    int ch, ncolor; /* ncolor: channels jitter touches (1 or 3); the rest is alpha */
    int flip, normalize, chw;
    ferry_dtype dtype;
    int steps[3], nsteps; /* jitter steps with a factor other than 1, in order */
    float factor[3];
    float mean[4], std[4];
    bool avx2; /* AVX2 and F16C kernels for the jitter path */
} finish;

static int opts_check(finish *f, uint32_t w, uint32_t h, size_t stride, int ch,
                      const ferry_pixel_opts *o)
{
    memset(f, 0, sizeof *f);
    if (!o)
        return ferry__err(FERRY_EINVAL, "pixels: opts is NULL");
    if (ch < 1 || ch > 4)
        return ferry__err(FERRY_EINVAL, "pixels: ch %d is outside [1, 4]", ch);
    if (w < 1 || h < 1)
        return ferry__err(FERRY_EINVAL, "pixels: size %ux%u is empty", w, h);
    if (stride < (size_t)w * (size_t)ch)
        return ferry__err(FERRY_EINVAL, "pixels: stride %zu is less than %u pixels x %d channels",
                          stride, w, ch);
    if (o->dtype != FERRY_U8 && o->dtype != FERRY_F32 && o->dtype != FERRY_F16)
        return ferry__err(FERRY_EINVAL, "pixels: dtype %s is not uint8, float32 or float16",
                          ferry_dtype_name(o->dtype));
    if (o->layout != FERRY_LAYOUT_HWC && o->layout != FERRY_LAYOUT_CHW)
        return ferry__err(FERRY_EINVAL, "pixels: layout %d is not HWC (0) or CHW (1)", o->layout);
    if (o->normalize && o->dtype == FERRY_U8)
        return ferry__err(FERRY_EINVAL, "pixels: normalize needs dtype float32 or float16");
    f->ch = ch;
    f->ncolor = ch >= 3 ? 3 : 1;
    f->flip = o->flip != 0;
    f->normalize = o->normalize != 0;
    f->chw = o->layout == FERRY_LAYOUT_CHW && ch > 1;
    f->dtype = o->dtype;

    static const char *names[3] = {"brightness", "contrast", "saturation"};
    float fac[3] = {o->brightness, o->contrast, o->saturation};
    for (int i = 0; i < 3; i++) {
        if (!(fac[i] >= 0.0f) || isinf(fac[i]))
            return ferry__err(FERRY_EINVAL, "pixels: %s %g is not a finite factor >= 0", names[i],
                              (double)fac[i]);
        if (fac[i] == 0.0f)
            fac[i] = 1.0f;
    }
    if (fac[2] != 1.0f && ch < 3)
        return ferry__err(FERRY_EINVAL, "pixels: saturation %g needs 3 or 4 channels, not %d",
                          (double)o->saturation, ch);
    int order[3] = {0, 1, 2};
    if (o->jitter_order[0] || o->jitter_order[1] || o->jitter_order[2]) {
        int seen = 0;
        for (int i = 0; i < 3; i++) {
            int s = o->jitter_order[i];
            if (s < 0 || s > 2 || (seen & (1 << s)))
                return ferry__err(FERRY_EINVAL,
                                  "pixels: jitter_order %d,%d,%d is not a permutation of 0,1,2",
                                  o->jitter_order[0], o->jitter_order[1], o->jitter_order[2]);
            seen |= 1 << s;
            order[i] = s;
        }
    }
    for (int i = 0; i < 3; i++) {
        f->factor[i] = fac[i];
        if (fac[order[i]] != 1.0f)
            f->steps[f->nsteps++] = order[i];
    }
    for (int c = 0; c < 4; c++) {
        f->mean[c] = 0.0f;
        f->std[c] = 1.0f;
    }
    if (f->normalize) {
        for (int c = 0; c < ch; c++) {
            if (!isfinite(o->mean[c]))
                return ferry__err(FERRY_EINVAL, "pixels: mean[%d] %g is not finite", c,
                                  (double)o->mean[c]);
            if (!(o->std[c] > 0.0f) || isinf(o->std[c]))
                return ferry__err(FERRY_EINVAL, "pixels: std[%d] %g is not finite and > 0", c,
                                  (double)o->std[c]);
            f->mean[c] = o->mean[c];
            f->std[c] = o->std[c];
        }
    }
    return 0;
}

void ferry_pixel_opts_default(ferry_pixel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->brightness = o->contrast = o->saturation = 1.0f;
    for (int c = 0; c < 4; c++)
        o->std[c] = 1.0f;
    o->dtype = FERRY_F32;
    o->layout = FERRY_LAYOUT_CHW;
}

/* v (0..1) of channel c to the output value, before any dtype conversion. */
static inline float out_value(const finish *f, int c, float v)
{
    return f->normalize ? (v - f->mean[c]) / f->std[c] : v;
}

/* ---- without jitter: tables ---- */

/* One output element type per instance: T is uint8_t, uint16_t (half) or float;
 * tab[c][byte] is the output. The channel count is a constant in each copy. */
#define DEFINE_LUT_PASS(NAME, T)                                                                   \
    static inline __attribute__((always_inline)) void NAME##_ch(                                   \
        const uint8_t *src, uint32_t w, uint32_t h, size_t stride, const int ch, int flip,         \
        int chw, const T(*tab)[256], T *dst)                                                       \
    {                                                                                              \
        size_t plane = (size_t)w * h;                                                              \
        for (uint32_t y = 0; y < h; y++) {                                                         \
            const uint8_t *s = src + (size_t)y * stride;                                           \
            ptrdiff_t step = ch;                                                                   \
            if (flip) {                                                                            \
                s += (size_t)(w - 1) * (size_t)ch;                                                 \
                step = -ch;                                                                        \
            }                                                                                      \
            if (chw) {                                                                             \
                /* 8 output bytes per store: narrow stores are what limits this loop */            \
                enum { G = 8 / sizeof(T) };                                                        \
                T *d0 = dst + (size_t)y * w, *d1 = d0 + plane, *d2 = d1 + plane, *d3 = d2 + plane; \
                T *end = d0 + w / G * G;                                                           \
                for (; d0 < end; d0 += G, d1 += G, d2 += G, d3 += G) {                             \
                    uint64_t v0 = 0, v1 = 0, v2 = 0, v3 = 0;                                       \
                    for (int i = 0; i < G; i++, s += step) {                                       \
                        int sh = i * 8 * (int)sizeof(T);                                           \
                        v0 |= (uint64_t)NAME##_bits(tab[0][s[0]]) << sh;                           \
                        if (ch > 1)                                                                \
                            v1 |= (uint64_t)NAME##_bits(tab[1][s[1]]) << sh;                       \
                        if (ch > 2)                                                                \
                            v2 |= (uint64_t)NAME##_bits(tab[2][s[2]]) << sh;                       \
                        if (ch > 3)                                                                \
                            v3 |= (uint64_t)NAME##_bits(tab[3][s[3]]) << sh;                       \
                    }                                                                              \
                    memcpy(d0, &v0, 8);                                                            \
                    if (ch > 1)                                                                    \
                        memcpy(d1, &v1, 8);                                                        \
                    if (ch > 2)                                                                    \
                        memcpy(d2, &v2, 8);                                                        \
                    if (ch > 3)                                                                    \
                        memcpy(d3, &v3, 8);                                                        \
                }                                                                                  \
                for (; d0 < end + w % G; d0++, d1++, d2++, d3++, s += step) {                      \
                    *d0 = tab[0][s[0]];                                                            \
                    if (ch > 1)                                                                    \
                        *d1 = tab[1][s[1]];                                                        \
                    if (ch > 2)                                                                    \
                        *d2 = tab[2][s[2]];                                                        \
                    if (ch > 3)                                                                    \
                        *d3 = tab[3][s[3]];                                                        \
                }                                                                                  \
            } else {                                                                               \
                T *d = dst + (size_t)y * w * (size_t)ch;                                           \
                for (uint32_t x = 0; x < w; x++, s += step, d += ch) {                             \
                    d[0] = tab[0][s[0]];                                                           \
                    if (ch > 1)                                                                    \
                        d[1] = tab[1][s[1]];                                                       \
                    if (ch > 2)                                                                    \
                        d[2] = tab[2][s[2]];                                                       \
                    if (ch > 3)                                                                    \
                        d[3] = tab[3][s[3]];                                                       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    __attribute__((noinline)) static void NAME(const uint8_t *src, uint32_t w, uint32_t h,         \
                                               size_t stride, int ch, int flip, int chw,           \
                                               const T(*tab)[256], T *dst)                         \
    {                                                                                              \
        switch (ch) {                                                                              \
        case 1:                                                                                    \
            NAME##_ch(src, w, h, stride, 1, flip, 0, tab, dst);                                    \
            break;                                                                                 \
        case 2:                                                                                    \
            NAME##_ch(src, w, h, stride, 2, flip, chw, tab, dst);                                  \
            break;                                                                                 \
        case 3:                                                                                    \
            NAME##_ch(src, w, h, stride, 3, flip, chw, tab, dst);                                  \
            break;                                                                                 \
        default:                                                                                   \
            NAME##_ch(src, w, h, stride, 4, flip, chw, tab, dst);                                  \
            break;                                                                                 \
        }                                                                                          \
    }

/* an element's bits, to be packed into a 64-bit store */
static inline uint32_t lut_f32_bits(uint32_t u)
{
    return u;
}
static inline uint16_t lut_f16_bits(uint16_t h)
{
    return h;
}
static inline uint8_t lut_u8_bits(uint8_t b)
{
    return b;
}

DEFINE_LUT_PASS(lut_f32, uint32_t) /* float32 as its bits */
DEFINE_LUT_PASS(lut_f16, uint16_t)
DEFINE_LUT_PASS(lut_u8, uint8_t)

/* uint8 without jitter: a copy when nothing moves, else an identity table. */
static void bytes_pass(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch, int flip,
                       int chw, uint8_t *dst)
{
    size_t row = (size_t)w * (size_t)ch;
    if (!flip && !chw) {
        for (uint32_t y = 0; y < h; y++)
            memcpy(dst + y * row, src + (size_t)y * stride, row);
        return;
    }
    uint8_t tab[4][256];
    for (int c = 0; c < ch; c++)
        for (int b = 0; b < 256; b++)
            tab[c][b] = (uint8_t)b;
    lut_u8(src, w, h, stride, ch, flip, chw, (const uint8_t(*)[256])tab, dst);
}

/* ---- with jitter: blocks of floats ---- */

typedef struct block {
    float v[4][BLOCK];
} block;

/* n pixels of a row (mirrored when step < 0) to floats 0..1 */
static inline __attribute__((always_inline)) void
block_load_ch(const float *lut, const uint8_t *s, ptrdiff_t step, int n, block *b, const int ch)
{
    for (int i = 0; i < n; i++, s += step) {
        b->v[0][i] = lut[s[0]];
        if (ch > 1)
            b->v[1][i] = lut[s[1]];
        if (ch > 2)
            b->v[2][i] = lut[s[2]];
        if (ch > 3)
            b->v[3][i] = lut[s[3]];
    }
}

/* The block kernels, in plain C (SSE on x86-64, where the clamp is written with
 * intrinsics: the compiler keeps NaN and -0 semantics we do not need and will
 * not turn it into maxps / minps by itself) and in AVX2. Same operations in the
 * same order, so the same floats. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#define X86 1
#define AVX2 __attribute__((target("avx2,f16c")))

AVX2 static void luma3_avx2(const float *r, const float *g, const float *bl, float *y)
{
    const __m256 wr = _mm256_set1_ps(0.299f), wg = _mm256_set1_ps(0.587f),
                 wb = _mm256_set1_ps(0.114f);
    for (int i = 0; i < BLOCK; i += 8) {
        __m256 t = _mm256_add_ps(_mm256_mul_ps(wr, _mm256_loadu_ps(r + i)),
                                 _mm256_mul_ps(wg, _mm256_loadu_ps(g + i)));
        _mm256_storeu_ps(y + i, _mm256_add_ps(t, _mm256_mul_ps(wb, _mm256_loadu_ps(bl + i))));
    }
}

AVX2 static void axpb_clamp_avx2(float *v, float a, float bc, const float *bv)
{
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), va = _mm256_set1_ps(a);
    const __m256 vb = _mm256_set1_ps(bc);
    for (int i = 0; i < BLOCK; i += 8) {
        __m256 x = _mm256_mul_ps(va, _mm256_loadu_ps(v + i));
        x = _mm256_add_ps(x, bv ? _mm256_loadu_ps(bv + i) : vb);
        _mm256_storeu_ps(v + i, _mm256_min_ps(_mm256_max_ps(x, zero), one));
    }
}

AVX2 static void norm_block_avx2(const float *v, float m, float sd, float *o)
{
    const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(sd);
    for (int i = 0; i < BLOCK; i += 8)
        _mm256_storeu_ps(o + i, _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(v + i), vm), vs));
}

/* F16C rounds to nearest even, as ferry__f32_to_f16 does */
AVX2 static void halves_avx2(const float *in, uint16_t *out)
{
    for (int i = 0; i < BLOCK; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
}

/* A full block of 1- or 3-channel pixels: bytes split into channels with
 * shuffles, then (float)b / 255.0f, the division the table holds. */
AVX2 static void block_load_avx2(const uint8_t *row, uint32_t w, uint32_t x0, int ch, int flip,
                                 block *b)
{
    uint8_t m[3][2][16]; /* [channel][first 16 bytes, next 8][lane] */
    for (int c = 0; c < ch; c++)
        for (int i = 0; i < 16; i++) {
            int at = i < 8 ? ch * (flip ? 7 - i : i) + c : 99;
            m[c][0][i] = (uint8_t)(at < 16 ? at : 0x80);
            m[c][1][i] = (uint8_t)(at >= 16 && at < 24 ? at - 16 : 0x80);
        }
    const __m256 k255 = _mm256_set1_ps(255.0f);
    for (int g = 0; g < BLOCK; g += 8) {
        uint32_t first = flip ? w - x0 - (uint32_t)g - 8 : x0 + (uint32_t)g;
        const uint8_t *p = row + (size_t)first * (size_t)ch;
        __m128i lo, hi = _mm_setzero_si128();
        if (ch == 3) {
            lo = _mm_loadu_si128((const __m128i *)p);
            hi = _mm_loadl_epi64((const __m128i *)(p + 16));
        } else {
            lo = _mm_loadl_epi64((const __m128i *)p);
        }
        for (int c = 0; c < ch; c++) {
            __m128i v = _mm_shuffle_epi8(lo, _mm_loadu_si128((const __m128i *)m[c][0]));
            if (ch == 3)
                v = _mm_or_si128(v,
                                 _mm_shuffle_epi8(hi, _mm_loadu_si128((const __m128i *)m[c][1])));
            __m256 fv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            _mm256_storeu_ps(b->v[c] + g, _mm256_div_ps(fv, k255));
        }
    }
}

/* Without jitter, float32 planes of 1- or 3-channel pixels: 8 pixels at a
 * time split into channels with shuffles, then (b / 255.0f - mean) / std, the
 * same two divisions that fill the table (out_value), so the same floats; two
 * divisions per 8 elements cost less than a table lookup and a narrow store per
 * element. The last w % 8 pixels of a row come from the table. false (nothing
 * written) where the divisions would not give the table's values, which IEEE
 * arithmetic rules out but the check costs 256 divisions a channel. */
AVX2 static bool planes_f32_avx2(const finish *f, const uint8_t *src, uint32_t w, uint32_t h,
                                 size_t stride, const float (*tab)[256], float *dst)
{
    int ch = f->ch;
    const __m256 k255 = _mm256_set1_ps(255.0f);
    __m256 vm[3], vs[3];
    for (int c = 0; c < ch; c++) {
        vm[c] = _mm256_set1_ps(f->normalize ? f->mean[c] : 0.0f);
        vs[c] = _mm256_set1_ps(f->normalize ? f->std[c] : 1.0f);
        for (int b = 0; b < 256; b += 8) {
            __m256 v =
                _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(
                                  _mm256_set1_epi32(b), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))),
                              k255);
            if (f->normalize)
                v = _mm256_div_ps(_mm256_sub_ps(v, vm[c]), vs[c]);
            float got[8];
            _mm256_storeu_ps(got, v);
            if (memcmp(got, tab[c] + b, sizeof got) != 0)
                return false;
        }
    }
    uint8_t m[3][2][16]; /* [channel][first 16 bytes, next 8][lane], as block_load_avx2 */
    for (int c = 0; c < ch; c++)
        for (int i = 0; i < 16; i++) {
            int at = i < 8 ? ch * (f->flip ? 7 - i : i) + c : 99;
            m[c][0][i] = (uint8_t)(at < 16 ? at : 0x80);
            m[c][1][i] = (uint8_t)(at >= 16 && at < 24 ? at - 16 : 0x80);
        }
    __m128i m0[3], m1[3];
    for (int c = 0; c < ch; c++) {
        m0[c] = _mm_loadu_si128((const __m128i *)m[c][0]);
        m1[c] = _mm_loadu_si128((const __m128i *)m[c][1]);
    }
    size_t plane = (size_t)w * h;
    uint32_t wv = w / 8 * 8;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        float *d = dst + (size_t)y * w;
        for (uint32_t x = 0; x < wv; x += 8) {
            uint32_t first = f->flip ? w - x - 8 : x;
            const uint8_t *p = row + (size_t)first * (size_t)ch;
            __m128i lo, hi = _mm_setzero_si128();
            if (ch == 3) {
                lo = _mm_loadu_si128((const __m128i *)p);
                hi = _mm_loadl_epi64((const __m128i *)(p + 16));
            } else {
                lo = _mm_loadl_epi64((const __m128i *)p);
            }
            for (int c = 0; c < ch; c++) {
                __m128i b = _mm_shuffle_epi8(lo, m0[c]);
                if (ch == 3)
                    b = _mm_or_si128(b, _mm_shuffle_epi8(hi, m1[c]));
                __m256 v = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), k255);
                if (f->normalize)
                    v = _mm256_div_ps(_mm256_sub_ps(v, vm[c]), vs[c]);
                _mm256_storeu_ps(d + (size_t)c * plane + x, v);
            }
        }
        for (uint32_t x = wv; x < w; x++) {
            const uint8_t *p = row + (size_t)(f->flip ? w - 1 - x : x) * (size_t)ch;
            for (int c = 0; c < ch; c++)
                d[(size_t)c * plane + x] = tab[c][p[c]];
        }
    }
    return true;
}

/* uint8 planes (or a mirrored grey row) of 1- or 3-channel pixels without
 * jitter: split into channels (and mirrored) by shuffles, RGB 32 pixels at a
 * time in 256-bit registers, then 16 at a time, then one by one. */
AVX2 static void planes_u8_avx2(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                                int flip, uint8_t *dst)
{
    uint8_t m[3][3][16]; /* [channel][which 16 source bytes][lane] */
    for (int c = 0; c < ch; c++)
        for (int k = 0; k < ch; k++)
            for (int i = 0; i < 16; i++) {
                int at = ch * (flip ? 15 - i : i) + c;
                m[c][k][i] = (uint8_t)(at / 16 == k ? at % 16 : 0x80);
            }
    __m128i mk[3][3];
    for (int c = 0; c < ch; c++)
        for (int k = 0; k < ch; k++)
            mk[c][k] = _mm_loadu_si128((const __m128i *)m[c][k]);
    __m256i mk2[3][3];
    for (int c = 0; c < ch; c++)
        for (int k = 0; k < ch; k++)
            mk2[c][k] = _mm256_broadcastsi128_si256(mk[c][k]);
    size_t plane = (size_t)w * h;
    uint32_t wv = w / 16 * 16, w2 = ch == 3 ? w / 32 * 32 : 0;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        uint8_t *d = dst + (size_t)y * w;
        uint32_t x = 0;
        /* 32 RGB pixels: each 128-bit lane holds 16 of them (48 bytes in three
         * registers), the first 16 outputs in the low lanes (the last 16 source
         * pixels when mirrored), so that the 16-pixel shuffles serve both lanes */
        for (; x < w2; x += 32) {
            const uint8_t *p = row + (size_t)(flip ? w - x - 32 : x) * 3;
            const uint8_t *p0 = flip ? p + 48 : p, *p1 = flip ? p : p + 48;
            __m256i l[3];
            for (int k = 0; k < 3; k++)
                l[k] = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + 16 * k))),
                    _mm_loadu_si128((const __m128i *)(p1 + 16 * k)), 1);
            for (int c = 0; c < 3; c++) {
                __m256i v = _mm256_or_si256(_mm256_or_si256(_mm256_shuffle_epi8(l[0], mk2[c][0]),
                                                            _mm256_shuffle_epi8(l[1], mk2[c][1])),
                                            _mm256_shuffle_epi8(l[2], mk2[c][2]));
                _mm256_storeu_si256((__m256i *)(d + (size_t)c * plane + x), v);
            }
        }
        for (; x < wv; x += 16) {
            const uint8_t *p = row + (size_t)(flip ? w - x - 16 : x) * (size_t)ch;
            __m128i l[3];
            for (int k = 0; k < ch; k++)
                l[k] = _mm_loadu_si128((const __m128i *)(p + 16 * k));
            for (int c = 0; c < ch; c++) {
                __m128i v = _mm_shuffle_epi8(l[0], mk[c][0]);
                for (int k = 1; k < ch; k++)
                    v = _mm_or_si128(v, _mm_shuffle_epi8(l[k], mk[c][k]));
                _mm_storeu_si128((__m128i *)(d + (size_t)c * plane + x), v);
            }
        }
        for (; x < w; x++) {
            const uint8_t *p = row + (size_t)(flip ? w - 1 - x : x) * (size_t)ch;
            for (int c = 0; c < ch; c++)
                d[(size_t)c * plane + x] = p[c];
        }
    }
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static bool cpu_avx2;
static void cpu_probe(void)
{
    __builtin_cpu_init();
    unsigned a, b, c, d; /* F16C: CPUID leaf 1, ECX bit 29 */
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    cpu_avx2 = __builtin_cpu_supports("avx2") && f16c;
}
static bool have_avx2(void)
{
    pthread_once(&cpu_once, cpu_probe);
    return cpu_avx2;
}
#else
#define X86 0
static bool have_avx2(void)
{
    return false;
}
#endif

static void luma3(const finish *f, const float *restrict r, const float *restrict g,
                  const float *restrict bl, float *restrict y)
{
#if X86
    if (f->avx2) {
        luma3_avx2(r, g, bl, y);
        return;
    }
#endif
    for (int i = 0; i < BLOCK; i++)
        y[i] = 0.299f * r[i] + 0.587f * g[i] + 0.114f * bl[i];
}

static void luma(const finish *f, const block *b, float *y)
{
    if (f->ncolor == 1)
        memcpy(y, b->v[0], sizeof b->v[0]);
    else
        luma3(f, b->v[0], b->v[1], b->v[2], y);
}

/* v = clamp01(a * v + b) over a block, with b[i] per element when bv is set */
static void axpb_clamp(const finish *f, float *v, float a, float bc, const float *bv)
{
#if X86
    if (f->avx2) {
        axpb_clamp_avx2(v, a, bc, bv);
        return;
    }
    const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f), va = _mm_set1_ps(a);
    const __m128 vb = _mm_set1_ps(bc);
    for (int i = 0; i < BLOCK; i += 4) {
        __m128 x = _mm_mul_ps(va, _mm_loadu_ps(v + i));
        x = _mm_add_ps(x, bv ? _mm_loadu_ps(bv + i) : vb);
        _mm_storeu_ps(v + i, _mm_min_ps(_mm_max_ps(x, zero), one));
    }
#else
    for (int i = 0; i < BLOCK; i++)
        v[i] = clamp01(a * v[i] + (bv ? bv[i] : bc));
#endif
}

static void norm_block(const finish *f, const float *restrict v, float m, float sd,
                       float *restrict o)
{
#if X86
    if (f->avx2) {
        norm_block_avx2(v, m, sd, o);
        return;
    }
#endif
    for (int i = 0; i < BLOCK; i++)
        o[i] = (v[i] - m) / sd;
}

static void halves(const finish *f, const float *in, uint16_t *out)
{
#if X86
    if (f->avx2) {
        halves_avx2(in, out);
        return;
    }
#endif
    for (int i = 0; i < BLOCK; i++)
        out[i] = ferry__f32_to_f16(in[i]);
}

static void block_load(const finish *f, const float *lut, const uint8_t *row, uint32_t w,
                       uint32_t x0, int n, block *b)
{
    int ch = f->ch;
#if X86
    if (f->avx2 && n == BLOCK && (ch == 1 || ch == 3)) {
        block_load_avx2(row, w, x0, ch, f->flip, b);
        return;
    }
#endif
    ptrdiff_t step = ch;
    const uint8_t *s = row + (size_t)x0 * (size_t)ch;
    if (f->flip) {
        s = row + (size_t)(w - 1 - x0) * (size_t)ch;
        step = -ch;
    }
    switch (ch) {
    case 1:
        block_load_ch(lut, s, step, n, b, 1);
        break;
    case 2:
        block_load_ch(lut, s, step, n, b, 2);
        break;
    case 3:
        block_load_ch(lut, s, step, n, b, 3);
        break;
    default:
        block_load_ch(lut, s, step, n, b, 4);
        break;
    }
}

/* Applies steps[from..to) to the block; mean is the contrast step's image mean.
 * Each is torchvision's blend, ratio * img + (1 - ratio) * other, clamped. */
static void block_jitter(const finish *f, block *b, int from, int to, float mean)
{
    for (int s = from; s < to; s++) {
        int step = f->steps[s];
        float k = f->factor[step];
        if (step == 0) { /* other = black */
            for (int c = 0; c < f->ncolor; c++)
                axpb_clamp(f, b->v[c], k, 0.0f, NULL);
        } else if (step == 1) { /* other = the mean grey */
            float km = (1.0f - k) * mean;
            for (int c = 0; c < f->ncolor; c++)
                axpb_clamp(f, b->v[c], k, km, NULL);
        } else { /* other = the pixel's grey */
            float y[BLOCK];
            luma(f, b, y);
            float k1 = 1.0f - k;
            for (int i = 0; i < BLOCK; i++)
                y[i] *= k1;
            for (int c = 0; c < 3; c++)
                axpb_clamp(f, b->v[c], k, 0.0f, y);
        }
    }
}

/* n pixels of the block to dst at pixel index `at`, in the output dtype and
 * layout. */
static void block_store(const finish *f, const block *b, size_t plane, size_t at, int n, void *dst)
{
    int ch = f->ch;
    for (int c = 0; c < ch; c++) {
        const float *v = b->v[c];
        float o[BLOCK];
        union {
            uint8_t u8[BLOCK];
            uint16_t f16[BLOCK];
        } t;
        const void *vals;
        size_t esz;
        if (f->dtype == FERRY_U8) {
            for (int i = 0; i < BLOCK; i++)
                t.u8[i] = (uint8_t)(int)(v[i] * 255.0f + 0.5f);
            vals = t.u8;
            esz = 1;
        } else {
            if (f->dtype == FERRY_F32 && f->chw && n == BLOCK) {
                /* straight into the plane */
                float *d = (float *)dst + (size_t)c * plane + at;
                if (f->normalize)
                    norm_block(f, v, f->mean[c], f->std[c], d);
                else
                    memcpy(d, v, sizeof o);
                continue;
            }
            if (f->normalize) {
                norm_block(f, v, f->mean[c], f->std[c], o);
                v = o;
            }
            if (f->dtype == FERRY_F16) {
                halves(f, v, t.f16);
                vals = t.f16;
                esz = 2;
            } else {
                vals = v;
                esz = 4;
            }
        }
        if (f->chw) {
            memcpy((uint8_t *)dst + ((size_t)c * plane + at) * esz, vals, (size_t)n * esz);
        } else {
            uint8_t *d = (uint8_t *)dst + (at * (size_t)ch + (size_t)c) * esz;
            const uint8_t *p = vals;
            for (int i = 0; i < n; i++, p += esz, d += (size_t)ch * esz)
                memcpy(d, p, esz);
        }
    }
}

/* The mean luma of the image after brightness b (1: none), from per-channel
 * histograms: luma is linear in the channels and brightness maps each value
 * alone. */
static inline __attribute__((always_inline)) void hist_ch(const uint8_t *src, uint32_t w,
                                                          uint32_t h, size_t stride,
                                                          uint32_t (*hist)[256], const int ch,
                                                          const int ncolor)
{
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *s = src + (size_t)y * stride;
        uint32_t x = 0;
        /* two histograms a channel, so that runs of one value do not wait on
         * their own increments */
        for (; x + 2 <= w; x += 2, s += 2 * ch)
            for (int c = 0; c < ncolor; c++) {
                hist[c][s[c]]++;
                hist[4 + c][s[ch + c]]++;
            }
        for (; x < w; x++, s += ch)
            for (int c = 0; c < ncolor; c++)
                hist[c][s[c]]++;
    }
}

static double hist_mean(const finish *f, const uint8_t *src, uint32_t w, uint32_t h, size_t stride,
                        const float *lut, float bright)
{
    uint32_t hist[8][256];
    memset(hist, 0, sizeof hist);
    switch (f->ch) {
    case 1:
        hist_ch(src, w, h, stride, hist, 1, 1);
        break;
    case 2:
        hist_ch(src, w, h, stride, hist, 2, 1);
        break;
    case 3:
        hist_ch(src, w, h, stride, hist, 3, 3);
        break;
    default:
        hist_ch(src, w, h, stride, hist, 4, 3);
        break;
    }
    static const double wts[3] = {0.299, 0.587, 0.114};
    double sum = 0.0;
    for (int c = 0; c < f->ncolor; c++) {
        double cs = 0.0;
        for (int k = 0; k < 256; k++) {
            float v = lut[k];
            if (bright != 1.0f)
                v = clamp01(v * bright);
            cs += (double)(hist[c][k] + hist[4 + c][k]) * v;
        }
        sum += (f->ncolor == 1 ? 1.0 : wts[c]) * cs;
    }
    return sum / ((double)w * (double)h);
}

static void jitter_pass(const finish *f, const uint8_t *src, uint32_t w, uint32_t h, size_t stride,
                        void *dst)
{
    float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = (float)i / 255.0f;
    block b;
    memset(&b, 0, sizeof b); /* the tail of a short block is computed, never stored */
    size_t plane = (size_t)w * h;

    /* where contrast runs, and the mean luma it needs */
    int cpos = -1;
    for (int s = 0; s < f->nsteps; s++)
        if (f->steps[s] == 1)
            cpos = s;
    float mean = 0.0f;
    if (cpos >= 0 && (cpos == 0 || (cpos == 1 && f->steps[0] == 0))) {
        /* before contrast at most brightness, which works on each channel
         * alone: the mean luma follows from the channels' histograms */
        mean = (float)hist_mean(f, src, w, h, stride, lut, cpos == 1 ? f->factor[0] : 1.0f);
    } else if (cpos >= 0) {
        double sum = 0.0;
        for (uint32_t y = 0; y < h; y++) {
            const uint8_t *row = src + (size_t)y * stride;
            for (uint32_t x0 = 0; x0 < w; x0 += BLOCK) {
                int n = w - x0 < BLOCK ? (int)(w - x0) : BLOCK;
                block_load(f, lut, row, w, x0, n, &b);
                block_jitter(f, &b, 0, cpos, 0.0f);
                float yl[BLOCK], part[8] = {0};
                luma(f, &b, yl);
                for (int i = n; i < BLOCK; i++)
                    yl[i] = 0.0f;
                for (int i = 0; i < BLOCK; i += 8)
                    for (int l = 0; l < 8; l++)
                        part[l] += yl[i + l];
                for (int l = 0; l < 8; l++)
                    sum += part[l];
            }
        }
        mean = (float)(sum / (double)plane);
    }
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        for (uint32_t x0 = 0; x0 < w; x0 += BLOCK) {
            int n = w - x0 < BLOCK ? (int)(w - x0) : BLOCK;
            block_load(f, lut, row, w, x0, n, &b);
            block_jitter(f, &b, 0, f->nsteps, mean);
            block_store(f, &b, plane, (size_t)y * w + x0, n, dst);
        }
    }
}

/* ferry_pixels_finish; simd = false keeps to the SSE / plain C kernels (for the
 * tests). */
int ferry__pixels_finish_impl(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                              const ferry_pixel_opts *o, void *dst, bool simd)
{
    finish f;
    int rc = opts_check(&f, w, h, stride, ch, o);
    if (rc < 0)
        return rc;
    if (!src || !dst)
        return ferry__err(FERRY_EINVAL, "pixels: %s is NULL", !src ? "src" : "dst");
    size_t n;
    if (!ferry__mul_size((size_t)w, (size_t)h, &n) || !ferry__mul_size(n, (size_t)ch, &n))
        return ferry__err(FERRY_EOVERFLOW, "pixels: %ux%ux%d does not fit size_t", w, h, ch);

    if (f.nsteps > 0) {
        f.avx2 = simd && have_avx2();
        jitter_pass(&f, src, w, h, stride, dst);
        return 0;
    }
    if (f.dtype == FERRY_U8) {
#if X86
        if ((ch == 3 && f.chw) || (ch == 1 && f.flip)) {
            if (simd && have_avx2()) {
                planes_u8_avx2(src, w, h, stride, ch, f.flip, dst);
                return 0;
            }
        }
#endif
        bytes_pass(src, w, h, stride, ch, f.flip, f.chw, dst);
        return 0;
    }
    float tab[4][256];
    for (int c = 0; c < ch; c++)
        for (int b = 0; b < 256; b++)
            tab[c][b] = out_value(&f, c, (float)b / 255.0f);
#if X86
    if (f.dtype == FERRY_F32 && (f.chw || ch == 1) && (ch == 1 || ch == 3) && simd && have_avx2() &&
        planes_f32_avx2(&f, src, w, h, stride, (const float(*)[256])tab, dst))
        return 0;
#endif
    if (f.dtype == FERRY_F32) {
        uint32_t bits[4][256];
        memcpy(bits, tab, sizeof bits);
        lut_f32(src, w, h, stride, ch, f.flip, f.chw, (const uint32_t(*)[256])bits, dst);
    } else {
        uint16_t tab16[4][256];
        for (int c = 0; c < ch; c++)
            for (int b = 0; b < 256; b++)
                tab16[c][b] = ferry__f32_to_f16(tab[c][b]);
        lut_f16(src, w, h, stride, ch, f.flip, f.chw, (const uint16_t(*)[256])tab16, dst);
    }
    return 0;
}

int ferry_pixels_finish(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                        const ferry_pixel_opts *o, void *dst)
{
    return ferry__pixels_finish_impl(src, w, h, stride, ch, o, dst, true);
}
