/*
 * ferry/transform.h - resampling and the per-pixel steps of an image pipeline.
 *
 * Images here are 8-bit interleaved (HWC) with 1 to 4 channels and a row stride in
 * bytes, as ferry_image_decode and ferry_image_decode_region write them. Nothing
 * allocates: callers pass scratch memory, sized by the matching *_tmp_size call.
 * All functions are reentrant.
 */
#ifndef FERRY_TRANSFORM_H
#define FERRY_TRANSFORM_H

#include "ferry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ferry_filter {
    FERRY_FILTER_BILINEAR = 0, /* triangle, support 1 (PIL's BILINEAR) */
    FERRY_FILTER_NEAREST = 1,
    FERRY_FILTER_BICUBIC = 2 /* Keys cubic, a = -0.5, support 2 (PIL's BICUBIC) */
} ferry_filter;

/* Scratch bytes ferry_resize needs for these arguments (0 when they are invalid;
 * ferry_last_errmsg says why). Depends only on the arguments: coefficient tables
 * that grow with dw, dh and the downscale factor, a row of 4 * sw bytes, and the
 * intermediate image, dw * ch bytes per source row the vertical pass reads (about
 * y1 - y0 plus the filter's reach). For 300x250 -> 224x224 RGB, about 210 KB. */
FERRY_API size_t ferry_resize_tmp_size(uint32_t sw, uint32_t sh, int ch, double x0, double y0,
                                       double x1, double y1, uint32_t dw, uint32_t dh,
                                       ferry_filter filter);

/* Resizes the box (x0, y0)-(x1, y1) of src (sw x sh pixels, ch channels, sstride
 * bytes per row) to dw x dh pixels in dst (dstride bytes per row; the bytes past
 * dw * ch in each row are left alone).
 *
 * The output is byte for byte Pillow's Image.resize((dw, dh), filter, box)
 * (ImagingResample, or ImagingScaleAffine for NEAREST, as in Pillow 9.4) for
 * modes L (ch 1), RGB (3) and RGBX (4); each channel is resampled on its own, so
 * 2 and 4 channels give what Pillow gives each band (Pillow itself
 * premultiplies LA and RGBA by alpha first; ferry does not). The tests compare
 * with the installed Pillow over hundreds of random sizes, boxes and filters.
 * What that means:
 *  - the box is rounded to float first, as Pillow parses it;
 *  - BILINEAR and BICUBIC: separable convolution, horizontal pass then vertical,
 *    each rounded to 8 bits. When downscaling, the filter's support is widened
 *    by the scale factor (antialiasing). Weights are computed in double,
 *    normalised, and applied in fixed point with 22 fractional bits, rounding
 *    half up and clamping to 0..255. The filter reads source pixels around the
 *    box too (up to its support outside it), not only inside it;
 *  - NEAREST: output pixel i takes the source pixel under x0 + (i + 0.5) *
 *    (x1 - x0) / dw (positions accumulated in double, as Pillow does), likewise
 *    for rows;
 *  - an integer box the size of the output is a plain copy of the box.
 * To reproduce crop-then-resize (torchvision's resized_crop on a PIL image),
 * which reads nothing outside the crop, pass the crop as the source:
 * src + top * sstride + left * ch, sw = width, sh = height, box (0, 0, width,
 * height).
 *
 * The box must satisfy 0 <= x0 < x1 <= sw, 0 <= y0 < y1 <= sh, still with
 * x0 < x1 and y0 < y1 once rounded to float; sw, sh, dw, dh in [1, 2^24];
 * ch in [1, 4]; strides at least a row's bytes (FERRY_EINVAL otherwise, the
 * message naming the argument). tmp (any alignment) must hold
 * ferry_resize_tmp_size bytes (FERRY_EOVERFLOW otherwise); src and dst must not
 * overlap. On x86-64 with AVX2 the work is vectorised (chosen at run time, same
 * bytes). Reentrant: no state is kept between calls. */
FERRY_API int ferry_resize(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                           double x0, double y0, double x1, double y1, ferry_filter filter,
                           uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride, void *tmp,
                           size_t tmp_size);

/* Layouts of a finished image. */
enum { FERRY_LAYOUT_HWC = 0, FERRY_LAYOUT_CHW = 1 };

/* The last pass of a pipeline: from 8-bit HWC pixels to the sample's tensor.
 * Per pixel, in this order:
 *  1. flip: the row is read right to left (horizontal mirror);
 *  2. colour jitter, on values v in 0..1 (v = byte / 255.0f), each step
 *     torchvision's blend, factor * v + (1 - factor) * other, clamped to 0..1,
 *     the steps applied in the order given by jitter_order (torchvision's
 *     ColorJitter draws a random order; so can the caller):
 *       brightness b:  other = 0 (black), so v * b
 *       contrast c:    other = the mean grey (luma 0.299 R + 0.587 G + 0.114 B)
 *                      of the whole image as it is when this step runs
 *       saturation s:  other = that pixel's luma
 *     Jitter changes the colour channels only: with 2 or 4 channels the last one
 *     (alpha) passes through, and with 1 or 2 channels the grey is channel 0.
 *     A factor of 1 skips its step (no rounding, no clamping);
 *  3. output: uint8 round(v * 255) (half up; no normalisation allowed);
 *     float32 or float16 (v - mean[c]) / std[c] in float32 with mean/std on the
 *     0..1 scale, which is torchvision's ToTensor then Normalize to the bit
 *     without jitter, or v itself when normalize is 0. float16 rounds the
 *     float32 to nearest even (overflow to inf, subnormals kept), as NumPy's
 *     astype(float16) does. Normalisation applies to every channel, alpha too.
 * Jitter is computed in float without rounding between steps, where torchvision
 * on PIL images rounds to 8 bits after each step: the two agree within 1/255 per
 * step. Saturation needs 3 or 4 channels (FERRY_EINVAL otherwise). */
typedef struct ferry_pixel_opts {
    int flip;
    float brightness, contrast, saturation; /* finite, >= 0; 1 (or 0, read as 1) =
                                             * unchanged */
    int jitter_order[3];                    /* a permutation of 0 (brightness), 1
                                             * (contrast), 2 (saturation); all zero =
                                             * 0, 1, 2 */
    int normalize;
    float mean[4], std[4]; /* per channel, 0..1 scale; mean finite, std finite > 0
                            * (only the first ch are read, and only with
                            * normalize) */
    ferry_dtype dtype;     /* FERRY_U8, FERRY_F32 or FERRY_F16 */
    int layout;            /* FERRY_LAYOUT_HWC or FERRY_LAYOUT_CHW */
} ferry_pixel_opts;

/* Zeroes *o and sets dtype FERRY_F32, layout CHW, factors 1, std 1. */
FERRY_API void ferry_pixel_opts_default(ferry_pixel_opts *o);

/* Writes the w x h image src (ch channels in [1, 4], stride bytes per row) to dst
 * as described above: w * h * ch elements of o->dtype, packed, in o->layout (CHW:
 * ch planes of h rows of w). w, h >= 1. Bad options give FERRY_EINVAL with a
 * message naming the field. Needs no scratch memory; reentrant. Without jitter
 * it is one pass of table lookups; with AVX2, float32 planes of 1 or 3 channels,
 * uint8 RGB planes and mirrored grey rows are shuffles (and float divisions
 * that give the table's values) instead. */
FERRY_API int ferry_pixels_finish(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                                  const ferry_pixel_opts *o, void *dst);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TRANSFORM_H */
