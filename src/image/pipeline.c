/*
 * The image pipeline: choose the crop box from the header, decode only that box,
 * resample it to the output size, then flip, jitter, normalise and write the
 * tensor into batch memory in one pass.
 *
 * Scratch (per worker, kept between samples): slot 2 holds the decoded region,
 * slot 3 the resampled 8-bit image followed by the resampler's work area. Slot 1
 * belongs to the images dataset (the encoded bytes); slot 0 to the dataset below.
 */
#include "ferry/pipeline.h"
#include "ferry/image.h"
#include "image_internal.h"
#include "../core/ctx.h"

#include <math.h>
#include <string.h>

#define SLOT_REGION 2
#define SLOT_RESIZED 3
#define MAX_SIDE 16384

void ferry_image_pipeline_default(ferry_image_pipeline *p, ferry_pipeline_mode mode)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->height = p->width = 224;
    p->resize = 256;
    p->scale_min = 0.08;
    p->scale_max = 1.0;
    p->ratio_min = 3.0 / 4.0;
    p->ratio_max = 4.0 / 3.0;
    p->flip = mode == FERRY_PIPELINE_TRAIN ? 0.5 : 0.0;
    p->filter = FERRY_FILTER_BILINEAR;
    p->normalize = 1;
    memcpy(p->mean, mean, sizeof mean);
    memcpy(p->std, std, sizeof std);
    p->dtype = FERRY_F32;
    p->layout = FERRY_LAYOUT_CHW;
}

static int bad(const char *what)
{
    return ferry__err(FERRY_EINVAL, "image pipeline: %s", what);
}

int ferry_image_pipeline_check(const ferry_image_pipeline *p)
{
    if (!p)
        return bad("settings are NULL");
    if (p->mode != FERRY_PIPELINE_EVAL && p->mode != FERRY_PIPELINE_TRAIN &&
        p->mode != FERRY_PIPELINE_NONE)
        return bad("mode must be eval, train or none");
    if (p->quality < 0 || p->quality > 100)
        return bad("quality must be in 1..100 (0: 90)");
    if (p->max_side > MAX_SIDE)
        return ferry__err(FERRY_EINVAL, "image pipeline: max_side %u is over %d", p->max_side,
                          MAX_SIDE);
    if (p->mode == FERRY_PIPELINE_NONE && p->max_side &&
        ((p->filter != FERRY_FILTER_BILINEAR && p->filter != FERRY_FILTER_NEAREST &&
          p->filter != FERRY_FILTER_BICUBIC) ||
         (p->lenient != 0 && p->lenient != 1) || (p->fast != 0 && p->fast != 1) ||
         (p->grey != 0 && p->grey != 1)))
        return bad("filter, lenient, fast or grey is out of range");
    if (p->mode == FERRY_PIPELINE_NONE)
        return 0;
    if (p->max_side)
        return bad("max_side re-encodes the stored images: it needs mode none");
    if (p->height < 1 || p->width < 1 || p->height > MAX_SIDE || p->width > MAX_SIDE)
        return ferry__err(FERRY_EINVAL, "image pipeline: size %ux%u is outside 1..%d", p->width,
                          p->height, MAX_SIDE);
    if (p->mode == FERRY_PIPELINE_EVAL &&
        (p->resize < (p->height > p->width ? p->height : p->width) || p->resize > MAX_SIDE))
        return ferry__err(FERRY_EINVAL,
                          "image pipeline: resize=%u must be at least the crop size (%ux%u) "
                          "and at most %d",
                          p->resize, p->width, p->height, MAX_SIDE);
    if (!(p->scale_min > 0 && p->scale_min <= p->scale_max && p->scale_max <= 1))
        return bad("scale must satisfy 0 < min <= max <= 1");
    if (!(p->ratio_min > 0 && p->ratio_min <= p->ratio_max && p->ratio_max < 1e6))
        return bad("ratio must satisfy 0 < min <= max");
    if (!(p->flip >= 0 && p->flip <= 1))
        return bad("flip is a probability in [0, 1]");
    if (!(p->brightness >= 0 && p->contrast >= 0 && p->saturation >= 0) || p->brightness > 100 ||
        p->contrast > 100 || p->saturation > 100)
        return bad("jitter strengths must be in [0, 100]");
    if (p->grey != 0 && p->grey != 1)
        return bad("grey must be 0 or 1");
    if (p->grey && p->saturation > 0)
        return bad("saturation jitter needs colour (grey is set)");
    if (p->filter != FERRY_FILTER_BILINEAR && p->filter != FERRY_FILTER_NEAREST &&
        p->filter != FERRY_FILTER_BICUBIC)
        return bad("filter must be bilinear, bicubic or nearest");
    if (p->dtype != FERRY_F32 && p->dtype != FERRY_F16 && p->dtype != FERRY_U8)
        return bad("dtype must be float32, float16 or uint8");
    if (p->dtype == FERRY_U8 && p->normalize)
        return bad("uint8 output cannot be normalised (set normalize to 0)");
    if (p->layout != FERRY_LAYOUT_CHW && p->layout != FERRY_LAYOUT_HWC)
        return bad("layout must be CHW or HWC");
    for (int c = 0; c < 3 && p->normalize; c++)
        if (!(p->std[c] > 0) || !isfinite(p->mean[c]) || !isfinite(p->std[c]))
            return bad("std must be > 0 and mean finite");
    if (p->lenient != 0 && p->lenient != 1)
        return bad("lenient must be 0 or 1");
    if (p->fast != 0 && p->fast != 1)
        return bad("fast must be 0 or 1");
    return 0;
}

int ferry_image_pipeline_shape(const ferry_image_pipeline *p, int64_t shape[3])
{
    int rc = ferry_image_pipeline_check(p);
    if (rc < 0)
        return rc;
    if (p->mode == FERRY_PIPELINE_NONE)
        return bad("mode none has no fixed shape");
    int64_t ch = p->grey ? 1 : 3;
    if (p->layout == FERRY_LAYOUT_CHW) {
        shape[0] = ch;
        shape[1] = p->height;
        shape[2] = p->width;
    } else {
        shape[0] = p->height;
        shape[1] = p->width;
        shape[2] = ch;
    }
    return 0;
}

/* Python's round(): half to even. */
static int64_t round_even(double v)
{
    double r = nearbyint(v); /* the default rounding mode is to nearest, ties to even */
    return (int64_t)r;
}

/* torchvision's RandomResizedCrop.get_params, drawing from rng. */
static void train_box(const ferry_image_pipeline *p, uint32_t W, uint32_t H, ferry_rng *rng,
                      ferry_rect *box)
{
    double area = (double)W * H, lr0 = log(p->ratio_min), lr1 = log(p->ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target =
            area * (p->scale_min + (p->scale_max - p->scale_min) * ferry_rng_uniform(rng));
        double ratio = exp(lr0 + (lr1 - lr0) * ferry_rng_uniform(rng));
        int64_t w = round_even(sqrt(target * ratio)), h = round_even(sqrt(target / ratio));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            box->y = (uint32_t)ferry_rng_below(rng, H - (uint64_t)h + 1);
            box->x = (uint32_t)ferry_rng_below(rng, W - (uint64_t)w + 1);
            box->w = (uint32_t)w;
            box->h = (uint32_t)h;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int64_t w = W, h = H;
    if (in_ratio < p->ratio_min)
        h = round_even(w / p->ratio_min);
    else if (in_ratio > p->ratio_max)
        w = round_even(h * p->ratio_max);
    w = w < 1 ? 1 : w > W ? W : w;
    h = h < 1 ? 1 : h > H ? H : h;
    box->w = (uint32_t)w;
    box->h = (uint32_t)h;
    box->x = (uint32_t)((W - w) / 2);
    box->y = (uint32_t)((H - h) / 2);
}

/* torchvision's CenterCrop offset: int(round((have - want) / 2.0)). */
static uint32_t centre(uint64_t have, uint64_t want)
{
    return (uint32_t)round_even(((double)have - (double)want) / 2.0);
}

/* Eval: the box of the original image that Resize(resize) then CenterCrop(h, w)
 * keep, in continuous coordinates (*fx0 ..), and the whole pixels the resampling
 * filter reaches around it (*need). */
/* Eval: the size of the resized image (torchvision's Resize(resize): shorter side
 * = resize, the longer truncated) and where CenterCrop starts in it. */
static void eval_resized(const ferry_image_pipeline *p, uint32_t W, uint32_t H, uint32_t *nw,
                         uint32_t *nh, uint32_t *left, uint32_t *top)
{
    if (W <= H) {
        *nw = p->resize;
        *nh = (uint32_t)((double)p->resize * H / W);
    } else {
        *nh = p->resize;
        *nw = (uint32_t)((double)p->resize * W / H);
    }
    *left = centre(*nw, p->width);
    *top = centre(*nh, p->height);
}

static void eval_box(const ferry_image_pipeline *p, uint32_t W, uint32_t H, double *fx0,
                     double *fy0, double *fx1, double *fy1, ferry_rect *need)
{
    uint32_t nw, nh, left, top;
    eval_resized(p, W, H, &nw, &nh, &left, &top);
    double sx = (double)W / nw, sy = (double)H / nh;
    *fx0 = left * sx;
    *fx1 = (left + p->width) * sx;
    *fy0 = top * sy;
    *fy1 = (top + p->height) * sy;
    /* filter support in source pixels, plus a pixel either side for rounding */
    double support = p->filter == FERRY_FILTER_BICUBIC ? 2.0 : 1.0;
    double mx = support * (sx > 1 ? sx : 1) + 2, my = support * (sy > 1 ? sy : 1) + 2;
    double x0 = floor(*fx0 - mx), y0 = floor(*fy0 - my);
    double x1 = ceil(*fx1 + mx), y1 = ceil(*fy1 + my);
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > W ? W : x1;
    y1 = y1 > H ? H : y1;
    need->x = (uint32_t)x0;
    need->y = (uint32_t)y0;
    need->w = (uint32_t)(x1 - x0);
    need->h = (uint32_t)(y1 - y0);
}

static void jitter(const ferry_image_pipeline *p, ferry_rng *rng, ferry_pixel_opts *po)
{
    const float s[3] = {p->brightness, p->contrast, p->saturation};
    float *f[3] = {&po->brightness, &po->contrast, &po->saturation};
    for (int i = 0; i < 3; i++) {
        po->jitter_order[i] = i;
        *f[i] = 1.0f;
    }
    if (s[0] == 0 && s[1] == 0 && s[2] == 0)
        return;
    for (int i = 2; i > 0; i--) { /* Fisher-Yates */
        int j = (int)ferry_rng_below(rng, (uint64_t)i + 1), t = po->jitter_order[i];
        po->jitter_order[i] = po->jitter_order[j];
        po->jitter_order[j] = t;
    }
    for (int i = 0; i < 3; i++) {
        if (s[i] > 0) {
            float lo = 1 - s[i] > 0 ? 1 - s[i] : 0, hi = 1 + s[i];
            *f[i] = lo + (hi - lo) * ferry_rng_uniformf(rng);
        }
    }
}

/* ferry_image_pipeline_plan for settings already checked (run checks them once
 * per sample, not twice). */
static int plan_checked(const ferry_image_pipeline *p, uint32_t width, uint32_t height,
                        ferry_rng *rng, ferry_image_plan *out)
{
    if (p->mode == FERRY_PIPELINE_NONE)
        return bad("mode none does not decode");
    if (!out || (p->mode == FERRY_PIPELINE_TRAIN && !rng))
        return bad("out (and rng for train) must not be NULL");
    if (width == 0 || height == 0)
        return ferry__err(FERRY_ECORRUPT, "image: zero dimension %ux%u", width, height);
    memset(out, 0, sizeof *out);
    ferry_pixel_opts po;
    ferry_pixel_opts_default(&po);
    if (p->mode == FERRY_PIPELINE_TRAIN) {
        train_box(p, width, height, rng, &out->decode);
        out->x0 = out->decode.x;
        out->y0 = out->decode.y;
        out->x1 = (double)out->decode.x + out->decode.w;
        out->y1 = (double)out->decode.y + out->decode.h;
        out->crop = 1;
        out->flip = p->flip > 0 && ferry_rng_uniform(rng) < p->flip;
        jitter(p, rng, &po);
    } else {
        eval_box(p, width, height, &out->x0, &out->y0, &out->x1, &out->y1, &out->decode);
        for (int i = 0; i < 3; i++)
            po.jitter_order[i] = i;
        po.brightness = po.contrast = po.saturation = 1;
    }
    out->brightness = po.brightness;
    out->contrast = po.contrast;
    out->saturation = po.saturation;
    memcpy(out->jitter_order, po.jitter_order, sizeof po.jitter_order);
    return 0;
}

int ferry_image_pipeline_plan(const ferry_image_pipeline *p, uint32_t width, uint32_t height,
                              ferry_rng *rng, ferry_image_plan *out)
{
    int rc = ferry_image_pipeline_check(p);
    return rc < 0 ? rc : plan_checked(p, width, height, rng, out);
}

int ferry_image_pipeline_run(const ferry_image_pipeline *p, const void *buf, size_t n,
                             ferry_rng *rng, void *dst, ferry_ctx *ctx)
{
    int rc = ferry_image_pipeline_check(p);
    if (rc < 0)
        return rc;
    if (!buf || !dst || !ctx)
        return bad("buf, dst and ctx must not be NULL");
    uint64_t t0 = ferry_now_ns();
    ferry_image_info info;
    ferry_image_plan plan;
    if ((rc = ferry_image_info_get(buf, n, &info)) < 0 ||
        (rc = plan_checked(p, info.width, info.height, rng, &plan)) < 0)
        return rc;

    ferry_decode_opts dopt;
    ferry_decode_opts_default(&dopt);
    dopt.grey = p->grey;
    dopt.lenient = p->lenient;
    dopt.max_pixels = p->max_pixels;
    ferry_rect need = plan.decode;
    double bx0 = plan.x0, by0 = plan.y0, bx1 = plan.x1, by1 = plan.y1;
    int exact_crop = plan.crop;
    ferry_pixel_opts po;
    ferry_pixel_opts_default(&po);
    po.flip = plan.flip;
    po.brightness = plan.brightness;
    po.contrast = plan.contrast;
    po.saturation = plan.saturation;
    memcpy(po.jitter_order, plan.jitter_order, sizeof po.jitter_order);
    po.normalize = p->normalize;
    for (int c = 0; c < 3; c++) {
        po.mean[c] = p->mean[c];
        po.std[c] = p->std[c];
    }
    po.dtype = p->dtype;
    po.layout = p->layout;

    /* fast: DCT reduction only where the box is at least twice the output; the
     * eval margin is part of what is decoded, so judge by the box itself */
    uint32_t min_w = 0, min_h = 0;
    if (p->fast && bx1 - bx0 >= 2.0 * p->width && by1 - by0 >= 2.0 * p->height) {
        /* scaled so that the box, not just the margin around it, stays >= output */
        min_w = (uint32_t)ceil(p->width * (double)need.w / (bx1 - bx0));
        min_h = (uint32_t)ceil(p->height * (double)need.h / (by1 - by0));
    }
    size_t region_size;
    if ((rc = ferry_image_region_size(&info, &dopt, &need, min_w, min_h, &region_size)) < 0)
        return rc;
    uint8_t *region = ferry__ctx_scratch(ctx, SLOT_REGION, region_size);
    if (!region)
        return FERRY_ENOMEM;
    ferry_image_region r;
    if ((rc = ferry_image_decode_region(buf, n, &dopt, &need, min_w, min_h, region, region_size,
                                        &r)) < 0)
        return rc;
    uint64_t t1 = ferry_now_ns();

    /* the resampler's source: for an exact crop, just the crop's pixels (in
     * decoded coordinates: the box r gives, widened to whole pixels); otherwise the
     * whole decoded region, margin included */
    double x0 = r.x0, y0 = r.y0, x1 = r.x1, y1 = r.y1;
    if (!exact_crop) {
        double s = r.scale_num / 8.0;
        x0 = r.x0 + (bx0 - need.x) * s;
        y0 = r.y0 + (by0 - need.y) * s;
        x1 = r.x0 + (bx1 - need.x) * s;
        y1 = r.y0 + (by1 - need.y) * s;
    }
    uint32_t sx = 0, sy = 0, sw = r.width, sh = r.height;
    if (exact_crop) {
        double fx = floor(x0 + 1e-9), fy = floor(y0 + 1e-9);
        double cx = ceil(x1 - 1e-9), cy = ceil(y1 - 1e-9);
        sx = fx < 0 ? 0 : (uint32_t)fx;
        sy = fy < 0 ? 0 : (uint32_t)fy;
        sw = (cx > r.width ? r.width : (uint32_t)cx) - sx;
        sh = (cy > r.height ? r.height : (uint32_t)cy) - sy;
        x0 -= sx;
        x1 -= sx;
        y0 -= sy;
        y1 -= sy;
    }
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > sw ? sw : x1;
    y1 = y1 > sh ? sh : y1;
    const uint8_t *src = region + (size_t)sy * r.stride + (size_t)sx * (size_t)r.channels;
    int ch = r.channels;
    size_t out_bytes = (size_t)p->width * p->height * (size_t)ch;
    /* eval at full scale: the window of the whole image's resize, so the bytes are
     * Resize then CenterCrop's (the box alone would round its ends to float and
     * place the taps slightly differently) */
    ferry__resize_win win;
    int windowed = !exact_crop && r.scale_num == 8 && p->filter != FERRY_FILTER_NEAREST;
    if (windowed) {
        eval_resized(p, info.width, info.height, &win.out_w, &win.out_h, &win.left, &win.top);
        win.full_w = info.width;
        win.full_h = info.height;
        win.src_x = need.x - (uint32_t)r.x0; /* full scale: whole pixels */
        win.src_y = need.y - (uint32_t)r.y0;
    }
    size_t tmp_size =
        windowed
            ? ferry__resize_window_tmp_size(sw, sh, ch, &win, p->width, p->height, p->filter)
            : ferry_resize_tmp_size(sw, sh, ch, x0, y0, x1, y1, p->width, p->height, p->filter);
    if (tmp_size == 0)
        return ferry__err(FERRY_ECORRUPT, "image %ux%u: crop box %.2f,%.2f-%.2f,%.2f: %s",
                          info.width, info.height, x0, y0, x1, y1, ferry_last_errmsg());
    size_t out_pad = (out_bytes + 63) & ~(size_t)63;
    /* uint8 HWC with nothing to mirror or jitter is the resampler's own output: it
     * writes the batch slot directly (ferry_pixels_finish would copy it) */
    int direct = p->dtype == FERRY_U8 && p->layout == FERRY_LAYOUT_HWC && !po.flip &&
                 (po.brightness == 1 || po.brightness == 0) &&
                 (po.contrast == 1 || po.contrast == 0) &&
                 (po.saturation == 1 || po.saturation == 0);
    if (direct)
        out_pad = 0;
    uint8_t *resized = ferry__ctx_scratch(ctx, SLOT_RESIZED, out_pad + tmp_size);
    if (!resized)
        return FERRY_ENOMEM;
    uint8_t *out = direct ? dst : resized;
    rc = windowed
             ? ferry__resize_window(src, sw, sh, r.stride, ch, &win, p->filter, out, p->width,
                                    p->height, (size_t)p->width * (size_t)ch, resized + out_pad,
                                    tmp_size, true)
             : ferry_resize(src, sw, sh, r.stride, ch, x0, y0, x1, y1, p->filter, out, p->width,
                            p->height, (size_t)p->width * (size_t)ch, resized + out_pad, tmp_size);
    if (rc < 0)
        return rc;
    uint64_t t2 = ferry_now_ns();
    if (!direct)
        rc = ferry_pixels_finish(resized, p->width, p->height, (size_t)p->width * (size_t)ch, ch,
                                 &po, dst);
    uint64_t t3 = ferry_now_ns();
    ferry_ctx_stage_add(ctx, FERRY_STAGE_DECODE, t1 - t0);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_TRANSFORM, t2 - t1);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_WRITE, t3 - t2);
    return rc;
}
