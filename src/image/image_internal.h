/*
 * Image internals shared by the resampler, the per-pixel pass and their tests.
 */
#ifndef FERRY_IMAGE_INTERNAL_H
#define FERRY_IMAGE_INTERNAL_H

#include "ferry/transform.h"

#include <stdbool.h>

/* float to IEEE half, rounding to nearest even (NaN stays NaN, overflow is inf) */
uint16_t ferry__f32_to_f16(float f);

/* ferry_resize; simd = false keeps to the plain C kernels (for the tests, which
 * require both paths to give the same bytes) */
int ferry__resize_impl(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                       double x0, double y0, double x1, double y1, ferry_filter filter,
                       uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride, void *tmp,
                       size_t tmp_size, bool simd);

/* A window of a whole-image resize, computed from part of the image: outputs
 * left .. left + dw, top .. top + dh of resizing the full_w x full_h image to
 * out_w x out_h, from a source buffer that holds its pixels from (src_x, src_y).
 * The bytes are those of Pillow's Image.resize((out_w, out_h)) of the whole image,
 * then cropped (torchvision's Resize then CenterCrop), as long as the buffer holds
 * every pixel the filter reaches (FERRY_EINVAL otherwise). BILINEAR and BICUBIC. */
typedef struct ferry__resize_win {
    uint32_t full_w, full_h; /* the whole image */
    uint32_t src_x, src_y;   /* where the source buffer starts in it */
    uint32_t out_w, out_h;   /* the whole resized image */
    uint32_t left, top;      /* where the window starts in it */
} ferry__resize_win;

size_t ferry__resize_window_tmp_size(uint32_t sw, uint32_t sh, int ch, const ferry__resize_win *win,
                                     uint32_t dw, uint32_t dh, ferry_filter filter);
int ferry__resize_window(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride, int ch,
                         const ferry__resize_win *win, ferry_filter filter, uint8_t *dst,
                         uint32_t dw, uint32_t dh, size_t dstride, void *tmp, size_t tmp_size,
                         bool simd);

/* ferry_pixels_finish; simd = false keeps to the SSE / plain C kernels */
int ferry__pixels_finish_impl(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                              const ferry_pixel_opts *o, void *dst, bool simd);

#endif
