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

/* ferry_pixels_finish; simd = false keeps to the SSE / plain C kernels */
int ferry__pixels_finish_impl(const uint8_t *src, uint32_t w, uint32_t h, size_t stride, int ch,
                              const ferry_pixel_opts *o, void *dst, bool simd);

#endif
