/*
 * ferry/pipeline.h - the image pipeline: encoded image in, finished tensor out.
 *
 * One call takes a JPEG or PNG and writes the sample's image tensor straight into
 * batch memory:
 *   train: RandomResizedCrop(size, scale, ratio), horizontal flip with probability
 *          flip, colour jitter, normalise (torchvision's standard training
 *          transforms)
 *   eval:  Resize(resize: the shorter side), CenterCrop(size), normalise
 *   none:  no decoding at all (the images source then passes the encoded bytes
 *          through: what `ferry pack` stores)
 * The crop box is chosen from the image header alone, and only what it keeps is
 * decoded (ferry_image_decode_region: rows above it skipped, columns outside it
 * not transformed, decoding stopped after its last row; with fast set, DCT-domain
 * reduction when it is at least twice the output size). The box is then resampled
 * to the output
 * size with ferry_resize (Pillow's algorithm), and ferry_pixels_finish flips,
 * jitters, normalises and writes the tensor.
 *
 * Randomness: every draw comes from the per-sample generator (ferry_ctx_rng:
 * seed, epoch, index), so a sample's tensor does not depend on the worker count.
 * RandomResizedCrop follows torchvision's algorithm: up to 10 tries of an area
 * fraction uniform in [scale_min, scale_max] and an aspect ratio log-uniform in
 * [ratio_min, ratio_max], width = round(sqrt(area * ratio)), height =
 * round(sqrt(area / ratio)), accepted when it fits, at a uniform position; else a
 * centre crop of the whole image clamped to the ratio range.
 *
 * Agreement with torchvision (Pillow backend) for the same crop box, by default
 * (fast = 0): train's uint8 image before normalisation is equal (the same libjpeg
 * decode, the same resampling of the cut-out box). Eval computes only the output
 * window of a resize of the whole image (the horizontal pass on the rows and
 * columns the window needs, with the whole resize's filter taps), from the
 * decoded region the filter reaches: with bilinear and bicubic it is equal to
 * Resize then CenterCrop, byte for byte; with nearest, within a pixel's
 * position. With fast set (DCT reduction): within the tolerance given in
 * docs/images.md.
 */
#ifndef FERRY_PIPELINE_H
#define FERRY_PIPELINE_H

#include "ferry/sample.h"
#include "ferry/image.h"
#include "ferry/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */
typedef struct ferry_stream ferry_stream;

typedef enum ferry_pipeline_mode {
    FERRY_PIPELINE_EVAL = 0,
    FERRY_PIPELINE_TRAIN = 1,
    FERRY_PIPELINE_NONE = 2
} ferry_pipeline_mode;

typedef struct ferry_image_pipeline {
    ferry_pipeline_mode mode;
    uint32_t height, width;                 /* output size (train: the crop's; eval: CenterCrop) */
    uint32_t resize;                        /* eval: the shorter side before the centre crop */
    double scale_min, scale_max;            /* train: area fraction of the crop */
    double ratio_min, ratio_max;            /* train: aspect ratio (width / height) of the crop */
    double flip;                            /* train: probability of a horizontal flip */
    float brightness, contrast, saturation; /* train: jitter strength j: factor uniform in
                                             * [max(0, 1 - j), 1 + j], 0 = off; the three
                                             * steps run in a random order */
    int grey;                               /* 1: one grey channel instead of RGB */
    ferry_filter filter;                    /* resampling filter (default bilinear) */
    int normalize;                          /* subtract mean, divide by std (0..1 scale) */
    float mean[3], std[3];
    ferry_dtype dtype;   /* FERRY_F32 (default), FERRY_F16 or FERRY_U8 */
    int layout;          /* FERRY_LAYOUT_CHW (default) or FERRY_LAYOUT_HWC */
    int lenient;         /* decode truncated JPEGs as far as they go */
    uint64_t max_pixels; /* refuse larger images; 0 = the decoder's default */
    int fast;            /* 0 (default): decode every JPEG box at full resolution, so the
                          * pixels are torchvision's (Pillow decodes at full size; eval is
                          * computed as Resize then CenterCrop of the whole image, equal to
                          * it for bilinear and bicubic). 1: decode a box at least twice
                          * the output in both directions at 1/2, 1/4 or 1/8 scale with
                          * libjpeg's reduced IDCT (docs/images.md: the PSNR against the
                          * exact path; much faster for large images). Source key fast=1
                          * (dct_reduce=1 is the same). */
    uint32_t max_side;   /* mode none: re-encode images whose longer side is over this
                          * (ferry_image_shrink; `ferry pack --max-side`); 0 = keep all
                          * as they are. Source key max_side=N. */
    int quality;         /* with max_side: the JPEG quality, 1..100 (0 = 90). Source key
                          * quality=Q. */
} ferry_image_pipeline;

/* The standard settings of a mode: 224 x 224 output, eval resize 256, train scale
 * 0.08..1 and ratio 3/4..4/3, flip 0.5, no jitter, bilinear, ImageNet mean
 * (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225), float32, CHW. */
FERRY_API void ferry_image_pipeline_default(ferry_image_pipeline *p, ferry_pipeline_mode mode);

/* Checks the settings: FERRY_EINVAL naming the first bad one. */
FERRY_API int ferry_image_pipeline_check(const ferry_image_pipeline *p);

/* Shape of the output tensor (3 dims, in the layout) and its dtype. */
FERRY_API int ferry_image_pipeline_shape(const ferry_image_pipeline *p, int64_t shape[3]);

/* What the pipeline does to one image of width x height pixels, drawn from rng
 * exactly as ferry_image_pipeline_run draws it (run = info, plan, decode, resize,
 * finish). For checking results against another implementation. */
typedef struct ferry_image_plan {
    double x0, y0, x1, y1; /* the box resampled to the output, in source pixels */
    int crop;              /* 1 (train): the box is cut out first, so the filter does
                            * not reach past it (torchvision's crop, then resize);
                            * 0 (eval): the filter reads pixels around it, as when the
                            * whole image is resized and then cropped */
    ferry_rect decode;     /* the source pixels that are decoded: the box, plus the
                            * filter's reach when crop is 0 */
    int flip;
    float brightness, contrast, saturation; /* factors, 1 = unchanged */
    int jitter_order[3];
} ferry_image_plan;

FERRY_API int ferry_image_pipeline_plan(const ferry_image_pipeline *p, uint32_t width,
                                        uint32_t height, ferry_rng *rng, ferry_image_plan *out);

/* Runs the pipeline on one encoded image buf[0..n) into dst (the output tensor,
 * ferry_image_pipeline_shape elements of p->dtype). rng supplies the random draws
 * (train); ctx supplies scratch memory and takes the decode / transform / write
 * times. Errors as ferry_image_decode_region, with the thread's message set. */
FERRY_API int ferry_image_pipeline_run(const ferry_image_pipeline *p, const void *buf, size_t n,
                                       ferry_rng *rng, void *dst, ferry_ctx *ctx);

/* Mode none with max_side set: what `ferry pack --max-side` stores for the encoded
 * image buf[0..n). An image whose longer side is at most max_side is kept as it
 * is: *written = 0, and the caller keeps buf's bytes. A larger one is decoded whole
 * (grey files to grey, anything else to RGB, alpha dropped as the pipelines drop
 * it; lenient and max_pixels apply), resized with p->filter (Pillow's
 * Image.resize of the whole image: antialiased when shrinking) so that its longer
 * side is max_side and the other side * max_side / longer rounded half up (at least 1), and
 * encoded as a JPEG (ferry_image_encode_jpeg, quality p->quality or 90) into
 * dst[0..dst_size), *written its length. With fast set, a JPEG at least twice
 * that size is decoded at a reduced scale first (as the pipelines do). ctx gives
 * scratch memory (the decoded image and the resized one) and takes the decode /
 * transform / write times. Errors as ferry_image_pipeline_run; FERRY_EINVAL when
 * the mode is not none or max_side is 0. */
FERRY_API int ferry_image_shrink(const ferry_image_pipeline *p, const void *buf, size_t n,
                                 void *dst, size_t dst_size, size_t *written, ferry_ctx *ctx);

/* The dst size ferry_image_shrink needs: ferry_image_jpeg_bound of a max_side
 * square in colour (0 when p has no max_side). */
FERRY_API size_t ferry_image_shrink_bound(const ferry_image_pipeline *p);

/* A dataset of images over another one whose field `field` holds encoded images
 * (NULL: "image" if there is one, else "data", else WebDataset's "jpg", "jpeg" or
 * "png"): that field becomes "image", the
 * pipeline's output tensor; every other field passes through unchanged (labels,
 * several of them, paths). A failing image is an error naming the file (from a
 * "path" field when there is one) or the sample. With own_inner, inner is freed
 * with the dataset (also when this call fails). */
FERRY_API int ferry_dataset_images(ferry_dataset **out, ferry_dataset *inner, const char *field,
                                   const ferry_image_pipeline *p, int own_inner);

/* The same over a stream (a gzipped WebDataset shard, a TFRecord stream): field
 * `field` (NULL: "image", "data", "jpg", "jpeg" or "png", the first there) holds
 * variable uint8 encoded images and becomes "image"; the other fields pass through.
 * The per-sample draws are keyed by (seed, epoch, hash of the stream shard and the
 * sample's position in it), so they do not depend on the worker count. Takes
 * ownership of inner, also when it fails (as the stream decorators do). Memory:
 * one encoded image at the field's bound per opened shard. Mode none is
 * FERRY_EINVAL (a stream passes its bytes through as they are). */
FERRY_API int ferry_stream_images(ferry_stream **out, ferry_stream *inner, const char *field,
                                  const ferry_image_pipeline *p);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_PIPELINE_H */
