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

/* Scratch bytes ferry_resize needs for these arguments (0 when they are invalid). */
FERRY_API size_t ferry_resize_tmp_size(uint32_t sw, uint32_t sh, int ch, double x0, double y0,
                                       double x1, double y1, uint32_t dw, uint32_t dh,
                                       ferry_filter filter);

/* Resizes the box (x0, y0)-(x1, y1) of src (sw x sh pixels, ch channels, sstride
 * bytes per row) to dw x dh pixels in dst (dstride bytes per row).
 *
 * The algorithm is PIL's Image.resize(size, filter, box) (Pillow's
 * ImagingResample): separable convolution, horizontal pass then vertical; when
 * downscaling, the filter's support is widened by the scale factor
 * (antialiasing); weights are computed in double, normalised, and applied in
 * fixed point with 22 fractional bits, rounding half up and clamping to 0..255.
 * So the output equals PIL's for the same box, filter and size (tests compare
 * with Pillow where it is installed). NEAREST samples the pixel whose centre is
 * nearest, as PIL does.
 *
 * The box must satisfy 0 <= x0 < x1 <= sw, 0 <= y0 < y1 <= sh (FERRY_EINVAL
 * otherwise); dw, dh >= 1. tmp must hold ferry_resize_tmp_size bytes
 * (FERRY_EOVERFLOW otherwise). */
FERRY_API int ferry_resize(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                           double x0, double y0, double x1, double y1, ferry_filter filter,
                           uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride, void *tmp,
                           size_t tmp_size);

/* Layouts of a finished image. */
enum { FERRY_LAYOUT_HWC = 0, FERRY_LAYOUT_CHW = 1 };

/* The last pass of a pipeline: from 8-bit HWC pixels to the sample's tensor.
 * Per pixel, in this order:
 *  1. flip: the row is read right to left (horizontal mirror);
 *  2. colour jitter, on values v in 0..1 (v = byte / 255), each step clamped to
 *     0..1, steps applied in the order given by jitter_order (torchvision's
 *     ColorJitter draws a random order; so can the caller):
 *       brightness b:  v * b
 *       contrast c:    mean + c * (v - mean), mean = the average grey (luma
 *                      0.299 R + 0.587 G + 0.114 B) of the whole image as it is
 *                      when this step runs
 *       saturation s:  grey + s * (v - grey), grey = that pixel's luma
 *     A factor of 1 skips its step (no rounding, no clamping);
 *  3. output: uint8 round(v * 255) (no normalisation allowed); float32 or float16
 *     (v - mean[c]) / std[c] with mean/std on the 0..1 scale (torchvision's
 *     ToTensor then Normalize), or v itself when normalize is 0. float16 rounds
 *     to nearest even.
 * Jitter is computed in float without rounding between steps, where torchvision
 * on PIL images rounds to 8 bits after each step: the two agree within 1/255 per
 * step. Saturation needs 3 channels (FERRY_EINVAL on grey). */
typedef struct ferry_pixel_opts {
    int flip;
    float brightness, contrast, saturation; /* 1 (or 0, read as 1) = unchanged */
    int jitter_order[3];                    /* a permutation of 0 (brightness), 1
                                             * (contrast), 2 (saturation); all zero =
                                             * 0, 1, 2 */
    int normalize;
    float mean[4], std[4]; /* per channel, 0..1 scale; std > 0 */
    ferry_dtype dtype;     /* FERRY_U8, FERRY_F32 or FERRY_F16 */
    int layout;            /* FERRY_LAYOUT_HWC or FERRY_LAYOUT_CHW */
} ferry_pixel_opts;

/* Zeroes *o and sets dtype FERRY_F32, layout CHW, factors 1, std 1. */
FERRY_API void ferry_pixel_opts_default(ferry_pixel_opts *o);

/* Writes the w x h image src (ch channels, stride bytes per row) to dst as
 * described above: w * h * ch elements of o->dtype, packed, in o->layout. */
FERRY_API int ferry_pixels_finish(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                                  const ferry_pixel_opts *o, void *dst);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TRANSFORM_H */
