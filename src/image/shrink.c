/*
 * Images made smaller for storage (`ferry pack --max-side`): decode, resize the
 * whole image so that its longer side is max_side, encode as a JPEG.
 *
 * Scratch (per worker, kept between samples): slot 2 holds the decoded image,
 * slot 3 the resized one followed by the resampler's work area, as in the
 * pipeline (a dataset in mode none runs no pipeline).
 */
#include "ferry/pipeline.h"
#include "ferry/image.h"
#include "../core/ctx.h"

#include <math.h>

#define SLOT_DECODED 2
#define SLOT_RESIZED 3
#define DEFAULT_QUALITY 90

size_t ferry_image_shrink_bound(const ferry_image_pipeline *p)
{
    return p && p->max_side ? ferry_image_jpeg_bound(p->max_side, p->max_side, 3) : 0;
}

int ferry_image_shrink(const ferry_image_pipeline *p, const void *buf, size_t n, void *dst,
                       size_t dst_size, size_t *written, ferry_ctx *ctx)
{
    int rc = ferry_image_pipeline_check(p);
    if (rc < 0)
        return rc;
    if (p->mode != FERRY_PIPELINE_NONE || !p->max_side)
        return ferry__err(FERRY_EINVAL, "image shrink: needs mode none and max_side");
    if (!buf || !dst || !written || !ctx)
        return ferry__err(FERRY_EINVAL, "image shrink: buf, dst, written and ctx must not be NULL");
    *written = 0;
    uint64_t t0 = ferry_now_ns();
    ferry_image_info info;
    if ((rc = ferry_image_info_get(buf, n, &info)) < 0)
        return rc;
    uint32_t W = info.width, H = info.height, longer = W > H ? W : H;
    if (longer <= p->max_side)
        return 0;
    uint32_t tw = p->max_side, th = p->max_side;
    if (W >= H)
        th = (uint32_t)floor((double)H * p->max_side / W + 0.5);
    else
        tw = (uint32_t)floor((double)W * p->max_side / H + 0.5);
    tw = tw < 1 ? 1 : tw;
    th = th < 1 ? 1 : th;

    ferry_decode_opts dopt;
    ferry_decode_opts_default(&dopt);
    /* grey files stay grey (a third of the bytes); alpha is dropped */
    dopt.grey = p->grey || info.channels <= 2;
    dopt.lenient = p->lenient;
    dopt.max_pixels = p->max_pixels;
    uint32_t min_w = p->fast ? tw : 0, min_h = p->fast ? th : 0;
    size_t region_size;
    if ((rc = ferry_image_region_size(&info, &dopt, NULL, min_w, min_h, &region_size)) < 0)
        return rc;
    uint8_t *px = ferry__ctx_scratch(ctx, SLOT_DECODED, region_size);
    if (!px)
        return FERRY_ENOMEM;
    ferry_image_region r;
    if ((rc = ferry_image_decode_region(buf, n, &dopt, NULL, min_w, min_h, px, region_size, &r)) <
        0)
        return rc;
    uint64_t t1 = ferry_now_ns();
    int ch = r.channels;
    size_t out_bytes = (size_t)tw * th * (size_t)ch, out_pad = (out_bytes + 63) & ~(size_t)63;
    double x1 = r.x1 > r.width ? r.width : r.x1, y1 = r.y1 > r.height ? r.height : r.y1;
    size_t tmp_size =
        ferry_resize_tmp_size(r.width, r.height, ch, r.x0, r.y0, x1, y1, tw, th, p->filter);
    if (tmp_size == 0)
        return FERRY_EINVAL; /* the message says why */
    uint8_t *small = ferry__ctx_scratch(ctx, SLOT_RESIZED, out_pad + tmp_size);
    if (!small)
        return FERRY_ENOMEM;
    if ((rc = ferry_resize(px, r.width, r.height, r.stride, ch, r.x0, r.y0, x1, y1, p->filter,
                           small, tw, th, (size_t)tw * (size_t)ch, small + out_pad, tmp_size)) < 0)
        return rc;
    uint64_t t2 = ferry_now_ns();
    rc = ferry_image_encode_jpeg(small, tw, th, (size_t)tw * (size_t)ch, ch,
                                 p->quality ? p->quality : DEFAULT_QUALITY, dst, dst_size, written);
    uint64_t t3 = ferry_now_ns();
    ferry_ctx_stage_add(ctx, FERRY_STAGE_DECODE, t1 - t0);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_TRANSFORM, t2 - t1);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_WRITE, t3 - t2);
    return rc;
}
