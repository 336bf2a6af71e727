/*
 * Resampling, bit for bit as Pillow's ImagingResample (Pillow 7 to 11,
 * src/libImaging/Resample.c) and, for NEAREST, ImagingScaleAffine (Geometry.c).
 *
 * What has to match exactly, and why each detail is here:
 *  - the box is rounded to float first: Pillow parses it with "(ffff)";
 *  - scale = (double)(x1 - x0) / out with the subtraction in float;
 *  - each output's taps start at (int)(centre - support + 0.5) and end at
 *    (int)(centre + support + 0.5), clamped to the image; weights are the filter at
 *    (x - centre + 0.5) / filterscale in double, divided by their sum, then turned
 *    into int32 with 22 fractional bits, rounding half away from zero;
 *  - sums start at 1 << 21 and the result is (sum >> 22) clamped to 0..255;
 *  - the horizontal pass runs first, on the source rows the vertical pass reads,
 *    and rounds to 8 bits before the vertical pass;
 *  - a pass is skipped when Pillow skips it, and an integer box of the output's
 *    size is a plain crop (Pillow's _resize), so those cases are copies.
 * Sums are kept in uint32_t (Pillow's are int): the same bits, and arithmetic
 * that stays defined even for absurd downscales where an int sum could overflow.
 *
 * Speed: the coefficient tables go into the caller's scratch, once per call, and
 * every output of the horizontal pass gets the same number of taps (windows
 * moved back from the edge, padded with zero weights), so that inner loops are
 * predicted and need no bounds checks. On x86-64 with AVX2 (chosen at run time):
 * the vertical pass multiplies 32 bytes of a row at a time; the horizontal pass
 * widens a pixel to 4 lanes (RGB rows spread to RGBX first) and does two taps
 * per 8-lane multiply, four output pixels sharing the rounding and packing,
 * or, for one channel, 8 taps per multiply. Elsewhere plain C. Same integer
 * arithmetic everywhere, so the same bytes; the tests check both paths.
 */
#include "ferry/transform.h"
#include "image_internal.h"
#include "../core/internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <pthread.h>
#define HAVE_AVX2_KERNELS 1
#define AVX2 __attribute__((target("avx2")))
#else
#define HAVE_AVX2_KERNELS 0
#endif

/* Coordinates go through float (as in Pillow), exact for integers up to 2^24. */
#define MAX_DIM (1u << 24)
#define PREC 22 /* PRECISION_BITS = 32 - 8 - 2 */
#define HALF (1u << (PREC - 1))

/* The filters, written as Pillow writes them so that the doubles agree. The
 * compiler must not fuse a multiply and an add here (FMA would round once where
 * Pillow's build rounds twice). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define NO_CONTRACT
#elif defined(__GNUC__)
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NO_CONTRACT
#endif

static double filter_support(ferry_filter f)
{
    return f == FERRY_FILTER_BICUBIC ? 2.0 : 1.0;
}

NO_CONTRACT static inline double filter_eval(ferry_filter f, double x)
{
    if (x < 0.0)
        x = -x;
    if (f == FERRY_FILTER_BILINEAR)
        return x < 1.0 ? 1.0 - x : 0.0;
#define a -0.5
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
#undef a
}

/* One axis of the resampling: in0..in1 of in_size source pixels onto out_size.
 * A window (ferry__resize_window) computes outputs out0 .. out0 + out_size of a
 * resize of a whole image of full pixels, from a source buffer that starts at
 * pixel src0 of it: taps are placed and clamped in the whole image's coordinates,
 * then moved into the buffer's. Otherwise full = in_size, src0 = out0 = 0. */
typedef struct axis {
    int in_size, out_size;
    int full, src0, out0;
    float in0, in1;
    double scale, filterscale, support;
    int ksize; /* coefficients stored per output */
} axis;

NO_CONTRACT static void axis_init(axis *ax, int in_size, float in0, float in1, int out_size,
                                  ferry_filter f)
{
    ax->in_size = in_size;
    ax->out_size = out_size;
    ax->full = in_size;
    ax->src0 = ax->out0 = 0;
    ax->in0 = in0;
    ax->in1 = in1;
    float d = in1 - in0;
    ax->filterscale = ax->scale = (double)d / out_size;
    if (ax->filterscale < 1.0)
        ax->filterscale = 1.0;
    ax->support = filter_support(f) * ax->filterscale;
    ax->ksize = (int)ceil(ax->support) * 2 + 1;
}

NO_CONTRACT static inline double axis_center(const axis *ax, int xx)
{
    return ax->in0 + (xx + ax->out0 + 0.5) * ax->scale;
}

/* The first source pixel (in the whole image's coordinates: subtract src0 for the
 * buffer's) and the number of taps of output xx. */
NO_CONTRACT static void axis_bounds(const axis *ax, int xx, int *first, int *count)
{
    double center = axis_center(ax, xx);
    int xmin = (int)(center - ax->support + 0.5);
    if (xmin < 0)
        xmin = 0;
    int xmax = (int)(center + ax->support + 0.5);
    if (xmax > ax->full)
        xmax = ax->full;
    *first = xmin;
    *count = xmax - xmin > 0 ? xmax - xmin : 0;
}

/* Pillow's precompute_coeffs then normalize_coeffs_8bpc: bounds[2 * xx] = first
 * tap, bounds[2 * xx + 1] = taps; kk[xx * ksize + t] (zero past the taps). w is
 * scratch for ksize doubles. */
NO_CONTRACT static void axis_coeffs(const axis *ax, ferry_filter f, int32_t *bounds, int32_t *kk,
                                    double *w)
{
    double ss = 1.0 / ax->filterscale;
    for (int xx = 0; xx < ax->out_size; xx++) {
        double center = axis_center(ax, xx);
        int xmin, n;
        axis_bounds(ax, xx, &xmin, &n);
        double ww = 0.0;
        for (int x = 0; x < n; x++) {
            w[x] = filter_eval(f, (x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = kk + (size_t)xx * (size_t)ax->ksize;
        for (int x = 0; x < n; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PREC)) : (int32_t)(0.5 + v * (1 << PREC));
        }
        for (int x = n; x < ax->ksize; x++)
            k[x] = 0;
        bounds[2 * xx] = xmin - ax->src0;
        bounds[2 * xx + 1] = n;
    }
}

/* The most taps any output has, rounded up to a multiple of mult. */
static int axis_max_taps(const axis *ax, const int32_t *bounds, int mult)
{
    int nmax = 0;
    for (int xx = 0; xx < ax->out_size; xx++)
        nmax = bounds[2 * xx + 1] > nmax ? bounds[2 * xx + 1] : nmax;
    return (nmax + mult - 1) / mult * mult;
}

/* Gives every output the same number of taps (the most any output has) by
 * moving the windows that would run past the end back and padding with zero
 * weights, which leaves every sum as it was. With a constant tap count the inner
 * loop is predicted perfectly. */
static void axis_fixed_taps(const axis *ax, int32_t *bounds, int32_t *kk)
{
    int nmax = axis_max_taps(ax, bounds, 1), hi = ax->in_size;
    for (int xx = 0; xx < ax->out_size; xx++) {
        int first = bounds[2 * xx], n = bounds[2 * xx + 1];
        int32_t *k = kk + (size_t)xx * (size_t)ax->ksize;
        int shift = first + nmax > hi ? first + nmax - hi : 0;
        if (shift > 0) {
            /* n + shift <= nmax <= ksize; past n the weights are already zero */
            memmove(k + shift, k, (size_t)n * sizeof *k);
            memset(k, 0, (size_t)shift * sizeof *k);
        }
        bounds[2 * xx] = first - shift;
        bounds[2 * xx + 1] = nmax;
    }
}

static inline uint8_t clip8(uint32_t acc)
{
    /* Pillow: clip8_lookups[(int)acc >> 22] */
    int32_t v = (int32_t)acc >> PREC;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* ---- the horizontal pass ---- */

static inline __attribute__((always_inline)) void horiz_row_c(const uint8_t *s, uint8_t *d, int dw,
                                                              const int32_t *bounds,
                                                              const int32_t *kk, int ksize,
                                                              const int ch)
{
    for (int xx = 0; xx < dw; xx++) {
        const uint8_t *p = s + (size_t)bounds[2 * xx] * (size_t)ch;
        int n = bounds[2 * xx + 1];
        const int32_t *k = kk + (size_t)xx * (size_t)ksize;
        uint32_t a0 = HALF, a1 = HALF, a2 = HALF, a3 = HALF;
        for (int t = 0; t < n; t++) {
            uint32_t kt = (uint32_t)k[t];
            a0 += p[0] * kt;
            if (ch > 1)
                a1 += p[1] * kt;
            if (ch > 2)
                a2 += p[2] * kt;
            if (ch > 3)
                a3 += p[3] * kt;
            p += ch;
        }
        d[0] = clip8(a0);
        if (ch > 1)
            d[1] = clip8(a1);
        if (ch > 2)
            d[2] = clip8(a2);
        if (ch > 3)
            d[3] = clip8(a3);
        d += ch;
    }
}

static void horiz_c(const uint8_t *src, size_t sstride, int rows, int ch, uint8_t *dst,
                    size_t dstride, int dw, const int32_t *bounds, const int32_t *kk, int ksize)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *s = src + (size_t)y * sstride;
        uint8_t *d = dst + (size_t)y * dstride;
        switch (ch) {
        case 1:
            horiz_row_c(s, d, dw, bounds, kk, ksize, 1);
            break;
        case 2:
            horiz_row_c(s, d, dw, bounds, kk, ksize, 2);
            break;
        case 3:
            horiz_row_c(s, d, dw, bounds, kk, ksize, 3);
            break;
        default:
            horiz_row_c(s, d, dw, bounds, kk, ksize, 4);
            break;
        }
    }
}

/* ---- the vertical pass: out row yy = sum over taps of whole source rows ---- */

#define VCHUNK 256

static void vert_c(const uint8_t *src, size_t sstride, size_t rowbytes, uint8_t *dst,
                   size_t dstride, int dh, const int32_t *bounds, const int32_t *kk, int ksize)
{
    uint32_t acc[VCHUNK];
    for (int yy = 0; yy < dh; yy++) {
        const uint8_t *s0 = src + (size_t)bounds[2 * yy] * sstride;
        int n = bounds[2 * yy + 1];
        const int32_t *k = kk + (size_t)yy * (size_t)ksize;
        uint8_t *d = dst + (size_t)yy * dstride;
        for (size_t i0 = 0; i0 < rowbytes; i0 += VCHUNK) {
            size_t m = rowbytes - i0 < VCHUNK ? rowbytes - i0 : VCHUNK;
            for (size_t i = 0; i < m; i++)
                acc[i] = HALF;
            for (int t = 0; t < n; t++) {
                const uint8_t *s = s0 + (size_t)t * sstride + i0;
                uint32_t kt = (uint32_t)k[t];
                for (size_t i = 0; i < m; i++)
                    acc[i] += s[i] * kt;
            }
            for (size_t i = 0; i < m; i++)
                d[i0 + i] = clip8(acc[i]);
        }
    }
}

#if HAVE_AVX2_KERNELS
/* ---- AVX2 (x86-64, chosen at run time): the same integer arithmetic, so the
 * same bytes. SIMD adds wrap like the uint32_t sums above. ---- */

/* As axis_fixed_taps, for the AVX2 kernels: the tap count rounded up to mult,
 * the shifted weights written to kx, each repeated `rep` times. 0 (nothing
 * changed) when the source is narrower than that count. */
AVX2 static int horiz_avx2_weights(const axis *ax, int32_t *bounds, const int32_t *kk, int32_t *kx,
                                   int mult, int rep)
{
    int nmax = axis_max_taps(ax, bounds, mult);
    if (nmax > ax->in_size)
        return 0;
    for (int xx = 0; xx < ax->out_size; xx++) {
        int first = bounds[2 * xx], n = bounds[2 * xx + 1];
        int shift = first + nmax > ax->in_size ? first + nmax - ax->in_size : 0;
        const int32_t *k = kk + (size_t)xx * (size_t)ax->ksize;
        for (int t = 0; t < nmax; t++) {
            int32_t v = t >= shift && t - shift < n ? k[t - shift] : 0;
            for (int c = 0; c < rep; c++)
                kx[((size_t)xx * nmax + t) * rep + c] = v;
        }
        bounds[2 * xx] = first - shift;
        bounds[2 * xx + 1] = nmax;
    }
    return nmax;
}

/* 2 to 4 channels, a pixel as 4 bytes (2- and 3-channel rows are first spread
 * to 4 bytes a pixel in a scratch row, which also keeps every load inside memory
 * we own): two taps per 256-bit multiply, the two pixels' 8 bytes widened to
 * 8 x int32 against the weights [k[t] x 4, k[t+1] x 4].
 *
 * The sum of output pixel xx's taps: 8 x int32, the pixel's 4 channels twice. */
AVX2 static inline __attribute__((always_inline)) __m256i
horiz_taps_avx2(const uint8_t *s, const int32_t *bounds, const int32_t *kx, int xx, const int ntaps)
{
    const uint8_t *p = s + (size_t)bounds[2 * xx] * 4;
    const __m256i *k = (const __m256i *)(kx + (size_t)xx * ntaps * 4);
    __m256i acc = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p)),
                                     _mm256_loadu_si256(k));
    for (int j = 1; j < ntaps / 2; j++) {
        __m256i px = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(p + 8 * j)));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, _mm256_loadu_si256(k + j)));
    }
    return acc;
}

/* One row, 4 output pixels per step so that the reductions, rounding and
 * packing are shared. ntaps is a constant where the caller can make it one. */
AVX2 static inline __attribute__((always_inline)) void horiz_row_avx2(const uint8_t *s, uint8_t *d,
                                                                      int dw, const int32_t *bounds,
                                                                      const int32_t *kx,
                                                                      const int ntaps, const int ch)
{
    const __m256i half = _mm256_set1_epi32((int)HALF);
    /* bytes 0-3 of each pixel from [A C A C | B D B D]: A B C D */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
    const __m128i rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __m128i ga = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    int xx = 0;
    for (; xx + 4 <= dw; xx += 4) {
        __m256i a = horiz_taps_avx2(s, bounds, kx, xx, ntaps);
        __m256i b = horiz_taps_avx2(s, bounds, kx, xx + 1, ntaps);
        __m256i c = horiz_taps_avx2(s, bounds, kx, xx + 2, ntaps);
        __m256i e = horiz_taps_avx2(s, bounds, kx, xx + 3, ntaps);
        /* [a.lo + a.hi | b.lo + b.hi], [c | e] */
        __m256i ab = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                                      _mm256_permute2x128_si256(a, b, 0x31));
        __m256i ce = _mm256_add_epi32(_mm256_permute2x128_si256(c, e, 0x20),
                                      _mm256_permute2x128_si256(c, e, 0x31));
        ab = _mm256_srai_epi32(_mm256_add_epi32(ab, half), PREC);
        ce = _mm256_srai_epi32(_mm256_add_epi32(ce, half), PREC);
        __m256i v = _mm256_packs_epi32(ab, ce); /* [a c | b e] as int16 */
        v = _mm256_packus_epi16(v, v);          /* [a c a c | b e b e] as bytes */
        __m128i px = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(v, order));
        if (ch == 4) {
            _mm_storeu_si128((__m128i *)(d + (size_t)xx * 4), px);
        } else if (ch == 2) {
            _mm_storel_epi64((__m128i *)(d + (size_t)xx * 2), _mm_shuffle_epi8(px, ga));
        } else {
            px = _mm_shuffle_epi8(px, rgb);
            uint8_t *o = d + (size_t)xx * 3;
            _mm_storel_epi64((__m128i *)o, px);
            uint32_t tail = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(px, 8));
            memcpy(o + 8, &tail, 4);
        }
    }
    for (; xx < dw; xx++) {
        __m256i a = horiz_taps_avx2(s, bounds, kx, xx, ntaps);
        __m128i v = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        v = _mm_srai_epi32(_mm_add_epi32(v, _mm256_castsi256_si128(half)), PREC);
        v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
        uint32_t out = (uint32_t)_mm_cvtsi128_si32(v);
        memcpy(d + (size_t)xx * ch, &out, ch);
    }
}

AVX2 static void horiz_row_avx2_ch(const uint8_t *s, uint8_t *d, int dw, const int32_t *bounds,
                                   const int32_t *kx, int ntaps, const int ch)
{
    switch (ntaps) {
    case 2:
        horiz_row_avx2(s, d, dw, bounds, kx, 2, ch);
        break;
    case 4:
        horiz_row_avx2(s, d, dw, bounds, kx, 4, ch);
        break;
    case 6:
        horiz_row_avx2(s, d, dw, bounds, kx, 6, ch);
        break;
    case 8:
        horiz_row_avx2(s, d, dw, bounds, kx, 8, ch);
        break;
    default:
        horiz_row_avx2(s, d, dw, bounds, kx, ntaps, ch);
        break;
    }
}

/* RGB to RGBX; row has room for w * 4 bytes */
AVX2 static void spread3(const uint8_t *s, int w, uint8_t *row)
{
    const __m128i shuf = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    int x = 0;
    for (; x + 6 <= w; x += 4) /* reads 16 of the 18 bytes of 6 pixels */
        _mm_storeu_si128((__m128i *)(row + 4 * x),
                         _mm_shuffle_epi8(_mm_loadu_si128((const void *)(s + 3 * x)), shuf));
    for (; x < w; x++) {
        row[4 * x] = s[3 * x];
        row[4 * x + 1] = s[3 * x + 1];
        row[4 * x + 2] = s[3 * x + 2];
        row[4 * x + 3] = 0;
    }
}

/* grey+alpha to 4 bytes a pixel */
AVX2 static void spread2(const uint8_t *s, int w, uint8_t *row)
{
    const __m128i shuf = _mm_setr_epi8(0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1);
    int x = 0;
    for (; x + 8 <= w; x += 4)
        _mm_storeu_si128((__m128i *)(row + 4 * x),
                         _mm_shuffle_epi8(_mm_loadu_si128((const void *)(s + 2 * x)), shuf));
    for (; x < w; x++) {
        row[4 * x] = s[2 * x];
        row[4 * x + 1] = s[2 * x + 1];
        row[4 * x + 2] = row[4 * x + 3] = 0;
    }
}

/* One channel: 8 taps of one output pixel per 256-bit multiply (ntaps is a
 * multiple of 8), 8 output pixels per step sharing the horizontal sums. */
AVX2 static inline __attribute__((always_inline)) __m256i
grey_taps_avx2(const uint8_t *s, const int32_t *bounds, const int32_t *kx, int xx, int ntaps)
{
    const uint8_t *p = s + bounds[2 * xx];
    const int32_t *k = kx + (size_t)xx * ntaps;
    __m256i acc = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)p)),
                                     _mm256_loadu_si256((const __m256i *)k));
    for (int j = 8; j < ntaps; j += 8)
        acc = _mm256_add_epi32(
            acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(p + j))),
                                    _mm256_loadu_si256((const __m256i *)(k + j))));
    return acc;
}

AVX2 static inline __attribute__((always_inline)) void
horiz_grey_avx2_n(const uint8_t *s, uint8_t *d, int dw, const int32_t *bounds, const int32_t *kx,
                  const int ntaps)
{
    const __m256i half = _mm256_set1_epi32((int)HALF);
    int xx = 0;
    for (; xx + 8 <= dw; xx += 8) {
        __m256i a[8];
        for (int i = 0; i < 8; i++)
            a[i] = grey_taps_avx2(s, bounds, kx, xx + i, ntaps);
        /* hadd within lanes: [p0 p1 p2 p3 | p0 p1 p2 p3] from taps 0-3 and 4-7 */
        __m256i h0 =
            _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
        __m256i h1 =
            _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
        __m256i v = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                     _mm256_permute2x128_si256(h0, h1, 0x31));
        v = _mm256_srai_epi32(_mm256_add_epi32(v, half), PREC); /* p0 .. p7 */
        v = _mm256_packs_epi32(v, v);
        v = _mm256_packus_epi16(v, v); /* [p0-3 x 4 | p4-7 x 4] */
        v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
        _mm_storel_epi64((__m128i *)(d + xx), _mm256_castsi256_si128(v));
    }
    for (; xx < dw; xx++) {
        __m256i a = grey_taps_avx2(s, bounds, kx, xx, ntaps);
        __m128i v = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        v = _mm_hadd_epi32(v, v);
        v = _mm_hadd_epi32(v, v);
        v = _mm_srai_epi32(_mm_add_epi32(v, _mm256_castsi256_si128(half)), PREC);
        v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
        d[xx] = (uint8_t)_mm_cvtsi128_si32(v);
    }
}

AVX2 static void horiz_grey_avx2(const uint8_t *s, uint8_t *d, int dw, const int32_t *bounds,
                                 const int32_t *kx, int ntaps)
{
    if (ntaps == 8)
        horiz_grey_avx2_n(s, d, dw, bounds, kx, 8);
    else if (ntaps == 16)
        horiz_grey_avx2_n(s, d, dw, bounds, kx, 16);
    else
        horiz_grey_avx2_n(s, d, dw, bounds, kx, ntaps);
}

AVX2 static void horiz_avx2(const uint8_t *src, size_t sstride, int rows, int sw, int ch,
                            uint8_t *row, uint8_t *dst, size_t dstride, int dw,
                            const int32_t *bounds, const int32_t *kx, int ntaps)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *s = src + (size_t)y * sstride;
        uint8_t *d = dst + (size_t)y * dstride;
        switch (ch) {
        case 1:
            horiz_grey_avx2(s, d, dw, bounds, kx, ntaps);
            break;
        case 2:
            spread2(s, sw, row);
            horiz_row_avx2_ch(row, d, dw, bounds, kx, ntaps, 2);
            break;
        case 3:
            spread3(s, sw, row);
            horiz_row_avx2_ch(row, d, dw, bounds, kx, ntaps, 3);
            break;
        default:
            horiz_row_avx2_ch(s, d, dw, bounds, kx, ntaps, 4);
            break;
        }
    }
}

/* 32 bytes of the output row at a time, the taps' rows streamed through
 * 8 x int32 accumulators. */
AVX2 static inline __m256i vert_avx2_chunk(const uint8_t *s, size_t sstride, int n,
                                           const int32_t *k)
{
    __m256i a0 = _mm256_set1_epi32((int)HALF), a1 = a0, a2 = a0, a3 = a0;
    for (int t = 0; t < n; t++) {
        const uint8_t *r = s + (size_t)t * sstride;
        __m256i kt = _mm256_set1_epi32(k[t]);
        a0 = _mm256_add_epi32(
            a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)r)), kt));
        a1 = _mm256_add_epi32(
            a1,
            _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(r + 8))), kt));
        a2 = _mm256_add_epi32(
            a2,
            _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(r + 16))), kt));
        a3 = _mm256_add_epi32(
            a3,
            _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(r + 24))), kt));
    }
    a0 = _mm256_srai_epi32(a0, PREC);
    a1 = _mm256_srai_epi32(a1, PREC);
    a2 = _mm256_srai_epi32(a2, PREC);
    a3 = _mm256_srai_epi32(a3, PREC);
    /* the packs work within 128-bit lanes: 4-byte groups come out in the order
     * 0 2 4 6 1 3 5 7 */
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AVX2 static void vert_avx2(const uint8_t *src, size_t sstride, size_t rowbytes, uint8_t *dst,
                           size_t dstride, int dh, const int32_t *bounds, const int32_t *kk,
                           int ksize)
{
    for (int yy = 0; yy < dh; yy++) {
        const uint8_t *s0 = src + (size_t)bounds[2 * yy] * sstride;
        int n = bounds[2 * yy + 1];
        const int32_t *k = kk + (size_t)yy * (size_t)ksize;
        uint8_t *d = dst + (size_t)yy * dstride;
        size_t i = 0;
        for (; i + 32 <= rowbytes; i += 32)
            _mm256_storeu_si256((__m256i *)(d + i), vert_avx2_chunk(s0 + i, sstride, n, k));
        if (i < rowbytes) /* the last 32 bytes again, overlapping */
            _mm256_storeu_si256((__m256i *)(d + rowbytes - 32),
                                vert_avx2_chunk(s0 + rowbytes - 32, sstride, n, k));
    }
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static bool cpu_avx2;
static void cpu_probe(void)
{
    __builtin_cpu_init();
    cpu_avx2 = __builtin_cpu_supports("avx2");
}
static bool have_avx2(void)
{
    pthread_once(&cpu_once, cpu_probe);
    return cpu_avx2;
}
#else
static bool have_avx2(void)
{
    return false;
}
#endif

/* ---- scratch layout ---- */

typedef struct plan {
    int sw, sh, ch, dw, dh;
    float box[4];
    ferry_filter filter;
    int crop; /* an integer box of the output's size: a copy */
    int need_h, need_v;
    axis ax, ay;
    int ybox_first, ybox_last; /* source rows the vertical pass reads */
    size_t tmp_pitch;          /* bytes per row of the intermediate image */
    /* offsets into the (64-aligned) scratch */
    size_t off_hb, off_hk, off_kx, off_vb, off_vk, off_w, off_img, off_row, total;
} plan;

static size_t carve(size_t *at, size_t n, bool *ok)
{
    size_t o = *at;
    size_t end;
    if (!ferry__add_size(o, n, &end) || !ferry__add_size(end, 63, &end))
        *ok = false;
    *at = end & ~(size_t)63;
    return o;
}

/* Checks the arguments and lays out the scratch. Returns 0 or FERRY_EINVAL /
 * FERRY_EOVERFLOW with the thread's message set. */
static int plan_make(plan *p, uint32_t sw, uint32_t sh, int ch, double x0, double y0, double x1,
                     double y1, uint32_t dw, uint32_t dh, ferry_filter filter,
                     const ferry__resize_win *win)
{
    memset(p, 0, sizeof *p);
    if (ch < 1 || ch > 4)
        return ferry__err(FERRY_EINVAL, "resize: ch %d is outside [1, 4]", ch);
    if (sw < 1 || sw > MAX_DIM || sh < 1 || sh > MAX_DIM)
        return ferry__err(FERRY_EINVAL, "resize: source size %ux%u is outside [1, %u]", sw, sh,
                          MAX_DIM);
    if (dw < 1 || dw > MAX_DIM || dh < 1 || dh > MAX_DIM)
        return ferry__err(FERRY_EINVAL, "resize: output size %ux%u is outside [1, %u]", dw, dh,
                          MAX_DIM);
    if (filter != FERRY_FILTER_BILINEAR && filter != FERRY_FILTER_NEAREST &&
        filter != FERRY_FILTER_BICUBIC)
        return ferry__err(FERRY_EINVAL, "resize: filter %d is not BILINEAR, NEAREST or BICUBIC",
                          (int)filter);
    if (win) {
        if (filter == FERRY_FILTER_NEAREST)
            return ferry__err(FERRY_EINVAL, "resize: a window needs BILINEAR or BICUBIC");
        if (win->full_w < 1 || win->full_w > MAX_DIM || win->full_h < 1 || win->full_h > MAX_DIM ||
            win->out_w < 1 || win->out_w > MAX_DIM || win->out_h < 1 || win->out_h > MAX_DIM ||
            (uint64_t)win->left + dw > win->out_w || (uint64_t)win->top + dh > win->out_h ||
            (uint64_t)win->src_x + sw > win->full_w || (uint64_t)win->src_y + sh > win->full_h)
            return ferry__err(FERRY_EINVAL,
                              "resize: window %ux%u at %u,%u of %ux%u (from %ux%u, source %ux%u "
                              "at %u,%u) does not fit",
                              dw, dh, win->left, win->top, win->out_w, win->out_h, win->full_w,
                              win->full_h, sw, sh, win->src_x, win->src_y);
        x0 = 0;
        y0 = 0;
        x1 = win->full_w;
        y1 = win->full_h;
    } else if (!(x0 >= 0 && x0 < x1 && x1 <= sw && y0 >= 0 && y0 < y1 && y1 <= sh))
        return ferry__err(FERRY_EINVAL,
                          "resize: box %g,%g-%g,%g is not inside the %ux%u source with x0 < x1 "
                          "and y0 < y1",
                          x0, y0, x1, y1, sw, sh);
    float b[4] = {(float)x0, (float)y0, (float)x1, (float)y1};
    if (!(b[0] < b[2] && b[1] < b[3]))
        return ferry__err(FERRY_EINVAL, "resize: box %g,%g-%g,%g is empty at float precision", x0,
                          y0, x1, y1);
    p->sw = (int)sw;
    p->sh = (int)sh;
    p->ch = ch;
    p->dw = (int)dw;
    p->dh = (int)dh;
    p->filter = filter;
    memcpy(p->box, b, sizeof b);

    bool ok = true;
    size_t at = 0;
    /* Pillow's _resize: an integer box the size of the output is a crop */
    p->crop = !win && b[0] - (int)b[0] == 0 && b[2] - b[0] == (float)p->dw &&
              b[1] - (int)b[1] == 0 && b[3] - b[1] == (float)p->dh;
    if (p->crop) {
        p->total = 64;
    } else if (filter == FERRY_FILTER_NEAREST) {
        p->off_hb = carve(&at, (size_t)dw * sizeof(int32_t), &ok);
        p->total = at;
    } else {
        p->need_h = p->dw != p->sw || b[0] != 0 || b[2] != (float)p->dw;
        p->need_v = p->dh != p->sh || b[1] != 0 || b[3] != (float)p->dh;
        if (win) {
            /* the passes of the whole resize, both always run: a pass Pillow skips
             * (scale 1) is the identity here */
            p->need_h = p->need_v = 1;
            axis_init(&p->ax, (int)win->full_w, b[0], b[2], (int)win->out_w, filter);
            axis_init(&p->ay, (int)win->full_h, b[1], b[3], (int)win->out_h, filter);
            p->ax.in_size = p->sw;
            p->ax.src0 = (int)win->src_x;
            p->ax.out0 = (int)win->left;
            p->ax.out_size = p->dw;
            p->ay.in_size = p->sh;
            p->ay.src0 = (int)win->src_y;
            p->ay.out0 = (int)win->top;
            p->ay.out_size = p->dh;
            const axis *axes[2] = {&p->ax, &p->ay};
            for (int a = 0; a < 2; a++) { /* every tap must be in the source buffer */
                int f0, n0, f1, n1;
                axis_bounds(axes[a], 0, &f0, &n0);
                axis_bounds(axes[a], axes[a]->out_size - 1, &f1, &n1);
                if (f0 < axes[a]->src0 || f1 + n1 > axes[a]->src0 + axes[a]->in_size)
                    return ferry__err(FERRY_EINVAL,
                                      "resize: the window reads %s %d..%d, outside the source's "
                                      "%d..%d",
                                      a ? "rows" : "columns", f0, f1 + n1, axes[a]->src0,
                                      axes[a]->src0 + axes[a]->in_size);
            }
        } else {
            axis_init(&p->ax, p->sw, b[0], b[2], p->dw, filter);
            axis_init(&p->ay, p->sh, b[1], b[3], p->dh, filter);
        }
        int first, n, last_first;
        axis_bounds(&p->ay, 0, &first, &n);
        p->ybox_first = first - p->ay.src0;
        axis_bounds(&p->ay, p->dh - 1, &last_first, &n);
        p->ybox_last = last_first + n - p->ay.src0;
        if (p->ybox_last <= p->ybox_first)
            return ferry__err(FERRY_EINVAL, "resize: box %g,%g-%g,%g reads no source rows", x0, y0,
                              x1, y1);
        size_t kh = (size_t)p->ax.ksize, kv = (size_t)p->ay.ksize, sz;
        if (!ferry__mul_size((size_t)dw, kh, &sz) || !ferry__mul_size(sz, 4, &sz))
            ok = false;
        p->off_hb = carve(&at, (size_t)dw * 8, &ok);
        p->off_hk = carve(&at, sz, &ok);
        if (!ferry__mul_size((size_t)dh, kv, &sz) || !ferry__mul_size(sz, 4, &sz))
            ok = false;
        p->off_vb = carve(&at, (size_t)dh * 8, &ok);
        p->off_vk = carve(&at, sz, &ok);
        if (!ferry__mul_size(kh > kv ? kh : kv, sizeof(double), &sz))
            ok = false;
        p->off_w = carve(&at, sz, &ok);
        if (p->need_h && p->need_v) {
            p->tmp_pitch = ((size_t)dw * (size_t)ch + 63) & ~(size_t)63;
            if (!ferry__mul_size(p->tmp_pitch, (size_t)(p->ybox_last - p->ybox_first), &sz))
                ok = false;
            p->off_img = carve(&at, sz, &ok);
        }
        /* for the AVX2 kernel: its weights, and a source row at 4 bytes a pixel */
        if (!ferry__mul_size((size_t)dw, kh + 1, &sz) || !ferry__mul_size(sz, 16, &sz))
            ok = false;
        p->off_kx = carve(&at, sz, &ok);
        p->off_row = carve(&at, (size_t)sw * 4, &ok);
        p->total = at;
    }
    /* the caller's pointer need not be aligned */
    if (!ok || !ferry__add_size(p->total, 64, &p->total))
        return ferry__err(FERRY_EOVERFLOW, "resize: scratch for %ux%u -> %ux%u does not fit size_t",
                          sw, sh, dw, dh);
    return 0;
}

size_t ferry_resize_tmp_size(uint32_t sw, uint32_t sh, int ch, double x0, double y0, double x1,
                             double y1, uint32_t dw, uint32_t dh, ferry_filter filter)
{
    plan p;
    if (plan_make(&p, sw, sh, ch, x0, y0, x1, y1, dw, dh, filter, NULL) < 0)
        return 0;
    return p.total;
}

size_t ferry__resize_window_tmp_size(uint32_t sw, uint32_t sh, int ch, const ferry__resize_win *win,
                                     uint32_t dw, uint32_t dh, ferry_filter filter)
{
    plan p;
    if (plan_make(&p, sw, sh, ch, 0, 0, 0, 0, dw, dh, filter, win) < 0)
        return 0;
    return p.total;
}

/* ---- NEAREST: Pillow's ImagingScaleAffine ---- */

/* xtab[x]: the byte offset of output x's source pixel in a row, for x in
 * [xlo, xhi); outside that, Pillow writes zeros (only rounding can get there). */
static inline __attribute__((always_inline)) void
nearest_rows(const plan *p, const uint8_t *src, size_t sstride, uint8_t *dst, size_t dstride,
             const int32_t *xtab, int xlo, int xhi, double yo, double a4, const int ch)
{
    size_t row = (size_t)p->dw * (size_t)ch;
    for (int y = 0; y < p->dh; y++, yo += a4) {
        int yi = yo < 0.0 ? -1 : (int)yo;
        uint8_t *d = dst + (size_t)y * dstride;
        if (yi < 0 || yi >= p->sh || xlo >= xhi) {
            memset(d, 0, row);
            continue;
        }
        const uint8_t *s = src + (size_t)yi * sstride;
        memset(d, 0, (size_t)xlo * (size_t)ch);
        for (int x = xlo; x < xhi; x++)
            memcpy(d + (size_t)x * ch, s + xtab[x], (size_t)ch);
        memset(d + (size_t)xhi * (size_t)ch, 0, (size_t)(p->dw - xhi) * (size_t)ch);
    }
}

static void resize_nearest(const plan *p, const uint8_t *src, size_t sstride, uint8_t *dst,
                           size_t dstride, int32_t *xtab)
{
    const float *b = p->box;
    float fw = b[2] - b[0], fh = b[3] - b[1];
    double a0 = (double)fw / p->dw, a4 = (double)fh / p->dh;
    /* the positions are accumulated, not multiplied, as Pillow does */
    double xo = b[0] + a0 * 0.5, yo = b[1] + a4 * 0.5;
    int xlo = p->dw, xhi = 0;
    for (int x = 0; x < p->dw; x++, xo += a0) {
        int xin = xo < 0.0 ? -1 : (int)xo;
        xtab[x] = 0;
        if (xin >= 0 && xin < p->sw) {
            xtab[x] = xin * p->ch;
            xlo = x < xlo ? x : xlo;
            xhi = x + 1;
        }
    }
    switch (p->ch) {
    case 1:
        nearest_rows(p, src, sstride, dst, dstride, xtab, xlo, xhi, yo, a4, 1);
        break;
    case 2:
        nearest_rows(p, src, sstride, dst, dstride, xtab, xlo, xhi, yo, a4, 2);
        break;
    case 3:
        nearest_rows(p, src, sstride, dst, dstride, xtab, xlo, xhi, yo, a4, 3);
        break;
    default:
        nearest_rows(p, src, sstride, dst, dstride, xtab, xlo, xhi, yo, a4, 4);
        break;
    }
}

/* ferry_resize; simd = false keeps to the plain C kernels (for the tests). */
static int resize_run(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                      double x0, double y0, double x1, double y1, ferry_filter filter,
                      const ferry__resize_win *win, uint8_t *dst, uint32_t dw, uint32_t dh,
                      size_t dstride, void *tmp, size_t tmp_size, bool simd)
{
    plan p;
    int rc = plan_make(&p, sw, sh, ch, x0, y0, x1, y1, dw, dh, filter, win);
    if (rc < 0)
        return rc;
    if (!src || !dst)
        return ferry__err(FERRY_EINVAL, "resize: %s is NULL", !src ? "src" : "dst");
    if (sstride < (size_t)sw * (size_t)ch)
        return ferry__err(FERRY_EINVAL, "resize: sstride %zu is less than %u pixels x %d channels",
                          sstride, sw, ch);
    if (dstride < (size_t)dw * (size_t)ch)
        return ferry__err(FERRY_EINVAL, "resize: dstride %zu is less than %u pixels x %d channels",
                          dstride, dw, ch);
    if (!tmp || tmp_size < p.total)
        return ferry__err(FERRY_EOVERFLOW, "resize: tmp holds %zu bytes, %zu needed",
                          tmp ? tmp_size : 0, p.total);
    uint8_t *t = (uint8_t *)(((uintptr_t)tmp + 63) & ~(uintptr_t)63);
    size_t cb = (size_t)ch;
    simd = simd && have_avx2();

    if (p.crop) {
        size_t bx = (size_t)p.box[0], by = (size_t)p.box[1];
        for (int y = 0; y < p.dh; y++)
            memcpy(dst + (size_t)y * dstride, src + (by + (size_t)y) * sstride + bx * cb,
                   (size_t)p.dw * cb);
        return 0;
    }
    if (filter == FERRY_FILTER_NEAREST) {
        resize_nearest(&p, src, sstride, dst, dstride, (int32_t *)(t + p.off_hb));
        return 0;
    }

    int32_t *vb = (int32_t *)(t + p.off_vb), *vk = (int32_t *)(t + p.off_vk);
    double *w = (double *)(t + p.off_w);
    axis_coeffs(&p.ay, filter, vb, vk, w);
    const uint8_t *vsrc = src;
    size_t vstride = sstride;
    if (p.need_h) {
        int32_t *hb = (int32_t *)(t + p.off_hb), *hk = (int32_t *)(t + p.off_hk);
        axis_coeffs(&p.ax, filter, hb, hk, w);
        int rows = p.ybox_last - p.ybox_first;
        const uint8_t *hsrc = src + (size_t)p.ybox_first * sstride;
        uint8_t *hdst = dst;
        size_t hstride = dstride;
        if (p.need_v) {
            hdst = t + p.off_img;
            hstride = p.tmp_pitch;
            for (int i = 0; i < p.dh; i++)
                vb[2 * i] -= p.ybox_first;
            vsrc = hdst;
            vstride = hstride;
        }
        int ntaps = 0;
#if HAVE_AVX2_KERNELS
        int32_t *kx = (int32_t *)(t + p.off_kx);
        if (simd)
            ntaps = horiz_avx2_weights(&p.ax, hb, hk, kx, ch == 1 ? 8 : 2, ch == 1 ? 1 : 4);
        if (ntaps > 0)
            horiz_avx2(hsrc, sstride, rows, p.sw, ch, t + p.off_row, hdst, hstride, p.dw, hb, kx,
                       ntaps);
#endif
        if (ntaps == 0) {
            axis_fixed_taps(&p.ax, hb, hk);
            horiz_c(hsrc, sstride, rows, ch, hdst, hstride, p.dw, hb, hk, p.ax.ksize);
        }
    }
    if (p.need_v) {
        size_t rowbytes = (size_t)p.dw * cb;
#if HAVE_AVX2_KERNELS
        if (simd && rowbytes >= 32)
            vert_avx2(vsrc, vstride, rowbytes, dst, dstride, p.dh, vb, vk, p.ay.ksize);
        else
#endif
            vert_c(vsrc, vstride, rowbytes, dst, dstride, p.dh, vb, vk, p.ay.ksize);
    }
    return 0;
}

int ferry__resize_impl(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                       double x0, double y0, double x1, double y1, ferry_filter filter,
                       uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride, void *tmp,
                       size_t tmp_size, bool simd)
{
    return resize_run(src, sw, sh, sstride, ch, x0, y0, x1, y1, filter, NULL, dst, dw, dh, dstride,
                      tmp, tmp_size, simd);
}

int ferry__resize_window(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                         const ferry__resize_win *win, ferry_filter filter, uint8_t *dst,
                         uint32_t dw, uint32_t dh, size_t dstride, void *tmp, size_t tmp_size,
                         bool simd)
{
    if (!win)
        return ferry__err(FERRY_EINVAL, "resize: window is NULL");
    return resize_run(src, sw, sh, sstride, ch, 0, 0, 0, 0, filter, win, dst, dw, dh, dstride, tmp,
                      tmp_size, simd);
}

int ferry_resize(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch, double x0,
                 double y0, double x1, double y1, ferry_filter filter, uint8_t *dst, uint32_t dw,
                 uint32_t dh, size_t dstride, void *tmp, size_t tmp_size)
{
    return ferry__resize_impl(src, sw, sh, sstride, ch, x0, y0, x1, y1, filter, dst, dw, dh,
                              dstride, tmp, tmp_size, true);
}
