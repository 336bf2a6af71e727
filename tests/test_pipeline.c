/*
 * The image pipeline against its definition: eval = resize the whole decoded image,
 * then centre-crop; train = crop, then resize, then flip. Those references are
 * built here from a full ferry_image_decode and ferry_resize (which tests against
 * Pillow in test_transform), so a difference means region decoding, the box
 * arithmetic or the plan went wrong. Then the images source over a folder, images
 * in record shards, determinism across worker counts, stage times and bad files.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "core/internal.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JPEG_DIR FERRY_SHARED_DIR "/testdata/jpeg"
#define PNG_DIR FERRY_SHARED_DIR "/testdata/png"

typedef struct image {
    unsigned char *px;
    uint32_t w, h;
    int ch;
} image;

static image decode_all(const unsigned char *buf, size_t n)
{
    ferry_image_info info;
    size_t need;
    CHECK_OK(ferry_image_info_get(buf, n, &info));
    CHECK_OK(ferry_image_out_size(&info, NULL, &need));
    image im = {malloc(need), info.width, info.height, 3};
    CHECK(im.px != NULL);
    CHECK_OK(ferry_image_decode(buf, n, NULL, im.px, need, NULL));
    return im;
}

/* ferry_resize of the box of src (sw x sh at src) to dw x dh; malloc'd. */
static unsigned char *resize(const unsigned char *src, uint32_t sw, uint32_t sh, size_t stride,
                             int ch, double x0, double y0, double x1, double y1, ferry_filter f,
                             uint32_t dw, uint32_t dh)
{
    size_t tn = ferry_resize_tmp_size(sw, sh, ch, x0, y0, x1, y1, dw, dh, f);
    CHECK(tn > 0);
    void *tmp = malloc(tn);
    unsigned char *out = malloc((size_t)dw * dh * (size_t)ch);
    CHECK(tmp && out);
    CHECK_OK(ferry_resize(src, sw, sh, stride, ch, x0, y0, x1, y1, f, out, dw, dh,
                          (size_t)dw * (size_t)ch, tmp, tn));
    free(tmp);
    return out;
}

/* uint8 HWC output, no normalisation: the pixels themselves. */
static void plain(ferry_image_pipeline *p, ferry_pipeline_mode mode, uint32_t size,
                  uint32_t resize_to)
{
    ferry_image_pipeline_default(p, mode);
    p->width = p->height = size;
    p->resize = resize_to;
    p->dtype = FERRY_U8;
    p->normalize = 0;
    p->layout = FERRY_LAYOUT_HWC;
}

static unsigned char *run(const ferry_image_pipeline *p, const unsigned char *buf, size_t n,
                          uint64_t index, ferry_ctx *ctx)
{
    unsigned char *out = malloc((size_t)p->width * p->height * 3);
    CHECK(out != NULL);
    ferry_rng rng;
    ferry_ctx_rng(ctx, index, &rng);
    int rc = ferry_image_pipeline_run(p, buf, n, &rng, out, ctx);
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "pipeline: %s", ferry_last_errmsg());
    return out;
}

typedef struct diff {
    int max, p99; /* the largest difference, and the one 99% of samples are within */
    double mean;
} diff;

static diff compare(const unsigned char *a, const unsigned char *b, size_t n)
{
    diff d = {0, 0, 0};
    size_t hist[256] = {0};
    for (size_t i = 0; i < n; i++) {
        int x = abs((int)a[i] - (int)b[i]);
        d.max = x > d.max ? x : d.max;
        d.mean += x;
        hist[x]++;
    }
    d.mean /= (double)n;
    size_t below = 0;
    while (d.p99 < 255 && (below += hist[d.p99]) < n - n / 100)
        d.p99++;
    return d;
}

static const char *const photos[] = {JPEG_DIR "/valid/ljt_testorig.jpg",
                                     JPEG_DIR "/valid/pillow_hopper.jpg",
                                     JPEG_DIR "/valid/pillow_pil_sample_rgb.jpg",
                                     JPEG_DIR "/valid/jd_jpg-progressive.jpg",
                                     JPEG_DIR "/valid/pillow_pil_sample_cmyk.jpg",
                                     PNG_DIR "/valid/basn2c08.png",
                                     PNG_DIR "/valid/basi6a08.png"};

TEST(settings_checked)
{
    ferry_image_pipeline p;
    int64_t shape[3];
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_TRAIN);
    CHECK_OK(ferry_image_pipeline_shape(&p, shape));
    CHECK(shape[0] == 3 && shape[1] == 224 && shape[2] == 224);
    p.scale_min = 0;
    CHECK_RC(ferry_image_pipeline_check(&p), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "scale");
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_EVAL);
    p.resize = 200;
    CHECK_RC(ferry_image_pipeline_check(&p), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "resize");
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_EVAL);
    p.dtype = FERRY_U8; /* normalize still on */
    CHECK_RC(ferry_image_pipeline_check(&p), FERRY_EINVAL);
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_EVAL);
    p.std[1] = 0;
    CHECK_RC(ferry_image_pipeline_check(&p), FERRY_EINVAL);
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_EVAL);
    p.layout = FERRY_LAYOUT_HWC;
    p.grey = 1;
    CHECK_OK(ferry_image_pipeline_shape(&p, shape));
    CHECK(shape[0] == 224 && shape[1] == 224 && shape[2] == 1);
}

/* torchvision's RandomResizedCrop.get_params: the box is inside the image, its
 * area and ratio in range (up to rounding), and the fallback is a centre crop. */
TEST(plan_train_boxes)
{
    ferry_image_pipeline p;
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_TRAIN);
    ferry_image_plan plan;
    int flips = 0;
    for (uint64_t i = 0; i < 4000; i++) {
        ferry_rng rng;
        ferry_rng_init(&rng, 7, 0, i);
        CHECK_OK(ferry_image_pipeline_plan(&p, 500, 375, &rng, &plan));
        CHECK(plan.crop == 1);
        CHECK(plan.x0 >= 0 && plan.y0 >= 0 && plan.x1 <= 500 && plan.y1 <= 375);
        double w = plan.x1 - plan.x0, h = plan.y1 - plan.y0;
        CHECK(w >= 1 && h >= 1);
        CHECK(plan.decode.x == plan.x0 && plan.decode.w == w);
        double area = w * h / (500.0 * 375.0), ratio = w / h;
        CHECK(area > 0.07 && area <= 1.0);
        CHECK(ratio > 0.74 && ratio < 1.35);
        flips += plan.flip;
        CHECK(plan.brightness == 1 && plan.contrast == 1 && plan.saturation == 1);
    }
    CHECK(flips > 1800 && flips < 2200);
    /* no box of area 0.99..1 with ratio 3..4 fits a square: centre crop, ratio 3 */
    p.scale_min = 0.99;
    p.ratio_min = 3;
    p.ratio_max = 4;
    ferry_rng rng;
    ferry_rng_init(&rng, 1, 0, 0);
    CHECK_OK(ferry_image_pipeline_plan(&p, 300, 300, &rng, &plan));
    CHECK(plan.x0 == 0 && plan.x1 == 300 && plan.y0 == 100 && plan.y1 == 200);
    /* jitter draws factors in range and a permutation */
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_TRAIN);
    p.brightness = p.contrast = p.saturation = 0.4f;
    for (uint64_t i = 0; i < 100; i++) {
        ferry_rng_init(&rng, 3, 0, i);
        CHECK_OK(ferry_image_pipeline_plan(&p, 64, 64, &rng, &plan));
        CHECK(plan.brightness >= 0.6f && plan.brightness <= 1.4f);
        CHECK(plan.saturation >= 0.6f && plan.saturation <= 1.4f);
        CHECK(plan.jitter_order[0] + plan.jitter_order[1] + plan.jitter_order[2] == 3);
        CHECK(plan.jitter_order[0] != plan.jitter_order[1]);
    }
}

/* Eval: the box of the original image that Resize then CenterCrop keep. */
TEST(plan_eval_box)
{
    ferry_image_pipeline p;
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_EVAL);
    ferry_image_plan plan;
    CHECK_OK(ferry_image_pipeline_plan(&p, 500, 375, NULL, &plan));
    /* resized to 341 x 256 (int(256 * 500 / 375)); crop at left round(58.5) = 58,
     * top 16 */
    double sx = 500.0 / 341, sy = 375.0 / 256;
    CHECK(fabs(plan.x0 - 58 * sx) < 1e-9 && fabs(plan.x1 - 282 * sx) < 1e-9);
    CHECK(fabs(plan.y0 - 16 * sy) < 1e-9 && fabs(plan.y1 - 240 * sy) < 1e-9);
    CHECK(plan.crop == 0 && plan.flip == 0);
    CHECK(plan.decode.x < plan.x0 && plan.decode.x + plan.decode.w > plan.x1);
}

static void check_eval_opts(const char *path, uint32_t size, uint32_t resize_to, ferry_filter f,
                            int fast, int p99_allowed, double mean_allowed)
{
    size_t n;
    unsigned char *buf = test_read_file(path, &n);
    image im = decode_all(buf, n);
    ferry_image_pipeline p;
    plain(&p, FERRY_PIPELINE_EVAL, size, resize_to);
    p.filter = f;
    p.fast = fast;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    unsigned char *got = run(&p, buf, n, 0, ctx);
    /* the reference: resize all of it (shorter side to resize_to), crop the centre */
    uint32_t nw, nh;
    if (im.w <= im.h) {
        nw = resize_to;
        nh = (uint32_t)((double)resize_to * im.h / im.w);
    } else {
        nh = resize_to;
        nw = (uint32_t)((double)resize_to * im.w / im.h);
    }
    unsigned char *all =
        resize(im.px, im.w, im.h, (size_t)im.w * 3, 3, 0, 0, im.w, im.h, f, nw, nh);
    uint32_t left = (uint32_t)nearbyint((nw - size) / 2.0);
    uint32_t top = (uint32_t)nearbyint((nh - size) / 2.0);
    unsigned char *want = malloc((size_t)size * size * 3);
    for (uint32_t y = 0; y < size; y++)
        memcpy(want + (size_t)y * size * 3, all + ((size_t)(top + y) * nw + left) * 3,
               (size_t)size * 3);
    diff d = compare(got, want, (size_t)size * size * 3);
    if (d.p99 > p99_allowed || d.mean > mean_allowed || (p99_allowed == 0 && d.max > 0))
        test_fail(__FILE__, __LINE__, "%s eval %u/%u: max diff %d, 99%% within %d, mean %.3f", path,
                  size, resize_to, d.max, d.p99, d.mean);
    printf("%s eval %u/%u: max diff %d, 99%% within %d, mean %.3f\n", path, size, resize_to, d.max,
           d.p99, d.mean);
    free(want);
    free(all);
    free(got);
    free(im.px);
    free(buf);
    ferry_ctx_free(ctx);
}

static void check_eval(const char *path, uint32_t size, uint32_t resize_to, ferry_filter f,
                       int p99_allowed, double mean_allowed)
{
    check_eval_opts(path, size, resize_to, f, 0, p99_allowed, mean_allowed);
}

/* By default eval is the window of the whole image's resize: equal, byte for
 * byte, for boxes of any size (the region decoded includes the filter's reach,
 * so even the crop's border pixels agree). */
TEST(eval_equals_resize_then_crop)
{
    test_need_shared(JPEG_DIR);
    for (size_t i = 0; i < sizeof photos / sizeof *photos; i++) {
        size_t n;
        unsigned char *buf = test_read_file(photos[i], &n);
        ferry_image_info info;
        CHECK_OK(ferry_image_info_get(buf, n, &info));
        free(buf);
        /* the box is (shorter side) * size / resize: under twice the size when
         * resize is over half the shorter side */
        uint32_t shorter = info.width < info.height ? info.width : info.height;
        uint32_t r = shorter / 2 + 1 > 28 ? shorter / 2 + 1 : 28;
        check_eval(photos[i], r * 6 / 7, r, FERRY_FILTER_BILINEAR, 0, 0);
        check_eval(photos[i], r * 6 / 7, r, FERRY_FILTER_BICUBIC, 0, 0);
        check_eval(photos[i], r, r, FERRY_FILTER_BILINEAR, 0, 0);
        check_eval(photos[i], 200, 230, FERRY_FILTER_BILINEAR, 0, 0); /* enlarging */
        /* boxes far over twice the output: still exact without fast */
        check_eval(photos[i], 16, 18, FERRY_FILTER_BILINEAR, 0, 0);
        check_eval(photos[i], 30, 40, FERRY_FILTER_BICUBIC, 0, 0);
    }
}

/* With fast, a box at least twice the output is reduced in the DCT domain: close,
 * not equal. */
TEST(eval_dct_reduced_within_tolerance)
{
    test_need_shared(JPEG_DIR);
    /* 227x149 to 32: the box is about 133 pixels, 4x the output: 1/4 */
    check_eval_opts(JPEG_DIR "/valid/ljt_testorig.jpg", 32, 36, FERRY_FILTER_BILINEAR, 1, 24, 3.0);
    check_eval_opts(JPEG_DIR "/valid/pillow_hopper.jpg", 16, 18, FERRY_FILTER_BILINEAR, 1, 24, 3.0);
    check_eval_opts(JPEG_DIR "/valid/pillow_pil_sample_rgb.jpg", 40, 44, FERRY_FILTER_BILINEAR, 1,
                    24, 3.0);
}

/* Train: crop, resize the crop alone, flip. */
static diff train_vs_reference_opts(const char *path, uint32_t size, uint64_t index, int fast)
{
    size_t n;
    unsigned char *buf = test_read_file(path, &n);
    image im = decode_all(buf, n);
    ferry_image_pipeline p;
    plain(&p, FERRY_PIPELINE_TRAIN, size, size);
    p.fast = fast;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 11, 2));
    unsigned char *got = run(&p, buf, n, index, ctx);
    ferry_rng rng;
    ferry_ctx_rng(ctx, index, &rng);
    ferry_image_plan plan;
    CHECK_OK(ferry_image_pipeline_plan(&p, im.w, im.h, &rng, &plan));
    uint32_t cx = (uint32_t)plan.x0, cy = (uint32_t)plan.y0;
    uint32_t cw = (uint32_t)(plan.x1 - plan.x0), chh = (uint32_t)(plan.y1 - plan.y0);
    unsigned char *want = resize(im.px + ((size_t)cy * im.w + cx) * 3, cw, chh, (size_t)im.w * 3, 3,
                                 0, 0, cw, chh, p.filter, size, size);
    if (plan.flip)
        for (uint32_t y = 0; y < size; y++)
            for (uint32_t x = 0; x < size / 2; x++)
                for (int c = 0; c < 3; c++) {
                    unsigned char *a = want + ((size_t)y * size + x) * 3 + c;
                    unsigned char *b = want + ((size_t)y * size + size - 1 - x) * 3 + c;
                    unsigned char t = *a;
                    *a = *b;
                    *b = t;
                }
    diff d = compare(got, want, (size_t)size * size * 3);
    free(want);
    free(got);
    free(im.px);
    free(buf);
    ferry_ctx_free(ctx);
    return d;
}

static diff train_vs_reference(const char *path, uint32_t size, uint64_t index)
{
    return train_vs_reference_opts(path, size, index, 1);
}

TEST(train_equals_crop_then_resize)
{
    test_need_shared(JPEG_DIR);
    for (size_t i = 0; i < sizeof photos / sizeof *photos; i++) {
        for (uint64_t k = 0; k < 12; k++) {
            /* output as large as the image: no box is twice it, nothing is reduced */
            diff d = train_vs_reference(photos[i], 100, k);
            if (d.max != 0)
                test_fail(__FILE__, __LINE__, "%s sample %llu: max diff %d", photos[i],
                          (unsigned long long)k, d.max);
        }
    }
}

TEST(train_dct_reduced_within_tolerance)
{
    test_need_shared(JPEG_DIR);
    double worst = 0;
    for (uint64_t k = 0; k < 40; k++) {
        diff d = train_vs_reference(JPEG_DIR "/valid/ljt_testorig.jpg", 16, k);
        worst = d.mean > worst ? d.mean : worst;
        if (d.p99 > 24 || d.mean > 3.5)
            test_fail(__FILE__, __LINE__, "sample %llu: max diff %d, 99%% within %d, mean %.3f",
                      (unsigned long long)k, d.max, d.p99, d.mean);
    }
    printf("worst mean difference with DCT reduction: %.3f\n", worst);
}

TEST(float_output_normalised)
{
    test_need_shared(JPEG_DIR);
    size_t n;
    unsigned char *buf = test_read_file(JPEG_DIR "/valid/pillow_hopper.jpg", &n);
    ferry_image_pipeline p, q;
    plain(&p, FERRY_PIPELINE_EVAL, 32, 36);
    ferry_image_pipeline_default(&q, FERRY_PIPELINE_EVAL);
    q.width = q.height = 32;
    q.resize = 36;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    unsigned char *u8 = run(&p, buf, n, 0, ctx);
    float *f = malloc(sizeof(float) * 3 * 32 * 32);
    CHECK_OK(ferry_image_pipeline_run(&q, buf, n, NULL, f, ctx));
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 32 * 32; i++) {
            float want = (u8[i * 3 + c] / 255.0f - q.mean[c]) / q.std[c];
            CHECK(fabsf(f[c * 32 * 32 + i] - want) < 1e-5f);
        }
    free(f);
    free(u8);
    free(buf);
    ferry_ctx_free(ctx);
}

TEST(bad_images_name_the_file)
{
    test_need_shared(JPEG_DIR);
    ferry_image_pipeline p;
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_TRAIN);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    float *out = malloc(sizeof(float) * 3 * 224 * 224);
    ferry_rng rng;
    ferry_rng_init(&rng, 0, 0, 0);
    CHECK_RC(ferry_image_pipeline_run(&p, "not an image", 12, &rng, out, ctx), FERRY_ENOTSUP);
    size_t n;
    unsigned char *buf = test_read_file(JPEG_DIR "/corrupt/jd_crash_max_size.jpg", &n);
    p.max_pixels = 1 << 20;
    CHECK(ferry_image_pipeline_run(&p, buf, n, &rng, out, ctx) < 0);
    free(buf);
    /* every corrupt file: an error or (where libjpeg recovers) an image, no crash */
    DIR *d = opendir(JPEG_DIR "/corrupt");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/corrupt/%s", JPEG_DIR, e->d_name);
        buf = test_read_file(path, &n);
        for (uint64_t k = 0; k < 4; k++) {
            ferry_rng_init(&rng, 0, 0, k);
            int rc = ferry_image_pipeline_run(&p, buf, n, &rng, out, ctx);
            CHECK(rc == 0 || rc == FERRY_ECORRUPT || rc == FERRY_ERANGE || rc == FERRY_ENOTSUP);
        }
        free(buf);
    }
    closedir(d);
    free(out);
    ferry_ctx_free(ctx);
}

/* An image folder: DIR/<class>/<file>, links to the shared files (skips without
 * them). */
static void make_folder(int with_bad)
{
    test_need_shared(JPEG_DIR);
    char p[512];
    test_make_dir("pipeline");
    CHECK(mkdir(test_path("cat", p), 0755) == 0);
    CHECK(mkdir(test_path("dog", p), 0755) == 0);
    CHECK(symlink(JPEG_DIR "/valid/ljt_testorig.jpg", test_path("cat/a.jpg", p)) == 0);
    CHECK(symlink(JPEG_DIR "/valid/pillow_hopper.jpg", test_path("cat/b.JPG", p)) == 0);
    CHECK(symlink(PNG_DIR "/valid/basn2c08.png", test_path("dog/c.png", p)) == 0);
    CHECK(symlink(JPEG_DIR "/valid/pillow_pil_sample_rgb.jpg", test_path("dog/d.jpeg", p)) == 0);
    test_write_file(test_path("dog/notes.txt", p), "not an image", 12);
    if (with_bad)
        test_write_file(test_path("dog/e.jpg", p), "text, not a JPEG", 16);
}

/* make_folder's folder opened as "images:<folder>,<opts>". */
static ferry_dataset *open_folder(int with_bad, const char *opts)
{
    make_folder(with_bad);
    char spec[1024];
    snprintf(spec, sizeof spec, "images:%s,%s", test_dir, opts);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    return ds;
}

TEST(images_source_folder)
{
    ferry_dataset *ds = open_folder(0, "size=32,resize=36,dtype=u8,layout=hwc");
    CHECK_U64(ferry_dataset_len(ds), 4); /* notes.txt is not an image extension */
    int fi = ferry_dataset_find_field(ds, "image"), fl = ferry_dataset_find_field(ds, "label");
    CHECK(fi >= 0 && fl >= 0 && ferry_dataset_find_field(ds, "path") >= 0);
    const ferry_field *f = ferry_dataset_field(ds, fi);
    CHECK(f->dtype == FERRY_U8 && f->ndim == 3 && f->shape[0] == 32 && f->shape[2] == 3);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    unsigned char img[32 * 32 * 3], path[1024];
    int64_t label, len[3];
    void *data[3];
    data[fi] = img;
    data[fl] = &label;
    data[ferry_dataset_find_field(ds, "path")] = path;
    ferry_sample s = {3, data, len, {0}};
    const int64_t want_label[4] = {0, 0, 1, 1};
    for (uint64_t i = 0; i < 4; i++) {
        CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
        CHECK(label == want_label[i]);
    }
    /* sample 0 is cat/a.jpg: the same pixels as the pipeline on its bytes */
    CHECK_OK(ferry_dataset_get(ds, 0, &s, ctx));
    size_t n;
    unsigned char *buf = test_read_file(JPEG_DIR "/valid/ljt_testorig.jpg", &n);
    ferry_image_pipeline p;
    plain(&p, FERRY_PIPELINE_EVAL, 32, 36);
    unsigned char *want = run(&p, buf, n, 0, ctx);
    CHECK(memcmp(want, img, sizeof img) == 0);
    free(want);
    free(buf);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);

    /* options are checked */
    char spec[1024];
    snprintf(spec, sizeof spec, "images:%s,pipeline=sideways", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "pipeline");
    snprintf(spec, sizeof spec, "images:%s,scale=0.5", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    snprintf(spec, sizeof spec, "images:%s,bogus=1", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "bogus");
    test_remove_dir();
}

TEST(bad_file_in_folder_is_named)
{
    ferry_dataset *ds = open_folder(1, "size=16,pipeline=train");
    CHECK_U64(ferry_dataset_len(ds), 5);
    ferry_loader_opts o = test_loader_opts(2, 2);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0)
        ferry_batch_release(b);
    CHECK(rc == FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_loader_errmsg(l), "dog/e.jpg");
    ferry_loader_free(l);
    /* skipped under the skip policy */
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = 1;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t samples = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        samples += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    CHECK(rc == FERRY_END);
    CHECK_U64(samples, 4);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    test_remove_dir();
}

static uint64_t epoch_digest(ferry_dataset *ds, uint32_t workers, ferry_loader_stats *st)
{
    ferry_loader_opts o = test_loader_opts(3, workers);
    o.shuffle = 1;
    o.seed = 5;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    uint64_t h = 1469598103934665603ull;
    ferry_batch *b;
    for (int epoch = 0; epoch < 2; epoch++) {
        CHECK_OK(ferry_loader_start(l, (uint64_t)epoch, 0));
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            for (int f = 0; f < ferry_batch_nfields(b); f++) {
                ferry_tensor t;
                CHECK_OK(ferry_batch_field(b, f, &t));
                h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
            }
            ferry_batch_release(b);
        }
        CHECK(rc == FERRY_END);
    }
    CHECK_OK(ferry_loader_stats_get(l, st));
    ferry_loader_free(l);
    return h;
}

TEST(train_same_bytes_any_workers_and_stage_times)
{
    ferry_dataset *ds =
        open_folder(0, "size=48,pipeline=train,brightness=0.4,contrast=0.4,saturation=0.4");
    ferry_loader_stats st0, st2, st1;
    uint64_t h0 = epoch_digest(ds, 0, &st0), h1 = epoch_digest(ds, 1, &st1),
             h2 = epoch_digest(ds, 2, &st2);
    CHECK(h0 == h1 && h0 == h2);
    CHECK(st2.stage_ns[FERRY_STAGE_READ] > 0 && st2.stage_ns[FERRY_STAGE_DECODE] > 0 &&
          st2.stage_ns[FERRY_STAGE_TRANSFORM] > 0 && st2.stage_ns[FERRY_STAGE_WRITE] > 0);
    CHECK(st0.stage_ns[FERRY_STAGE_DECODE] > 0);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* Images in record shards, with two labels each: the same tensors as the folder. */
TEST(records_of_images)
{
    make_folder(0);
    char folder[512], shards[512], spec[1200];
    snprintf(folder, sizeof folder, "%s", test_dir);
    test_path("shards", shards);
    /* the folder as listed before the shards go into it (a directory without
     * images would be a class without a file, an error) */
    ferry_dataset *fs;
    snprintf(spec, sizeof spec, "images:%s,pipeline=eval,size=32,dtype=u8", folder);
    CHECK_OK(ferry_dataset_open(&fs, spec));
    const char *files[3] = {"cat/a.jpg", "cat/b.JPG", "dog/c.png"};
    ferry_field f[2];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "image");
    f[0].dtype = FERRY_U8;
    f[0].ndim = 1;
    f[0].shape[0] = 1 << 20;
    f[0].variable = 1;
    strcpy(f[1].name, "labels");
    f[1].dtype = FERRY_I64;
    f[1].ndim = 1;
    f[1].shape[0] = 2;
    ferry_writer_opts wo = {.dir = shards, .fields = f, .nfields = 2};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &wo));
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", folder, files[i]);
        size_t n;
        unsigned char *buf = test_read_file(p, &n);
        int64_t labels[2] = {i, 10 + i}, len[2] = {(int64_t)n, 2};
        void *data[2] = {buf, labels};
        ferry_sample s = {2, data, len, {0}};
        CHECK_OK(ferry_writer_append(w, &s));
        free(buf);
    }
    CHECK_OK(ferry_writer_commit(w));

    snprintf(spec, sizeof spec, "records:%s,pipeline=eval,size=32,dtype=u8", shards);
    ferry_dataset *rs;
    CHECK_OK(ferry_dataset_open(&rs, spec));
    CHECK_U64(ferry_dataset_len(rs), 3);
    int ri = ferry_dataset_find_field(rs, "image"), rl = ferry_dataset_find_field(rs, "labels");
    CHECK(ri >= 0 && rl >= 0);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    static unsigned char a[3 * 32 * 32], b[3 * 32 * 32], pathbuf[1024];
    int64_t labels[2], lab, len[3];
    void *rd[2], *fd[3];
    rd[ri] = a;
    rd[rl] = labels;
    fd[ferry_dataset_find_field(fs, "image")] = b;
    fd[ferry_dataset_find_field(fs, "label")] = &lab;
    fd[ferry_dataset_find_field(fs, "path")] = pathbuf;
    ferry_sample s1 = {2, rd, len, {0}}, s2 = {3, fd, len, {0}};
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_OK(ferry_dataset_get(rs, i, &s1, ctx));
        CHECK(labels[0] == (int64_t)i && labels[1] == 10 + (int64_t)i);
        CHECK_OK(ferry_dataset_get(fs, i, &s2, ctx));
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    ferry_ctx_free(ctx);
    ferry_dataset_free(rs);
    ferry_dataset_free(fs);
    test_remove_dir();
}

/* Out of memory at every allocation of opening an images source and of running
 * the pipeline on a sample: FERRY_ENOMEM, nothing leaked (ASan), never a crash. */
TEST(out_of_memory_everywhere)
{
    make_folder(0);
    char spec[1024];
    snprintf(spec, sizeof spec, "images:%s,size=32,pipeline=train", test_dir);
    ferry_dataset *ds = NULL;
    long n;
    for (n = 0; n < 1000; n++) {
        ferry__test_fail_alloc(n);
        int rc = ferry_dataset_open(&ds, spec);
        ferry__test_fail_alloc(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, FERRY_ENOMEM);
    }
    CHECK(n > 0 && n < 1000);
    int fi = ferry_dataset_find_field(ds, "image");
    float img[3 * 32 * 32];
    unsigned char path[1024];
    int64_t label, len[3];
    void *data[3];
    data[fi] = img;
    data[ferry_dataset_find_field(ds, "label")] = &label;
    data[ferry_dataset_find_field(ds, "path")] = path;
    ferry_sample s = {3, data, len, {0}};
    for (uint64_t i = 0; i < ferry_dataset_len(ds); i++) {
        for (n = 0; n < 1000; n++) {
            ferry_ctx *ctx; /* a fresh context: its scratch is allocated again */
            CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
            ferry__test_fail_alloc(n);
            int rc = ferry_dataset_get(ds, i, &s, ctx);
            ferry__test_fail_alloc(-1);
            ferry_ctx_free(ctx);
            if (rc == 0)
                break;
            CHECK_RC(rc, FERRY_ENOMEM);
        }
        CHECK(n > 0 && n < 1000);
    }
    ferry_dataset_free(ds);
    test_remove_dir();
}

#ifdef FERRY_CLI
/* ferry pack images:DIR stores the encoded files; bench decodes them. */
TEST(cli_pack_and_bench_images)
{
    make_folder(0);
    char cmd[2048], out[512];
    test_path("packed", out);
    snprintf(cmd, sizeof cmd, "%s pack images:%s %s --no-progress >/dev/null 2>&1", FERRY_CLI,
             test_dir, out);
    CHECK(system(cmd) == 0);
    char spec[1024];
    snprintf(spec, sizeof spec, "records:%s", out);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), 4);
    int fi = ferry_dataset_find_field(ds, "image");
    CHECK(fi >= 0 && ferry_dataset_field(ds, fi)->dtype == FERRY_U8 &&
          ferry_dataset_field(ds, fi)->variable);
    ferry_dataset_free(ds);
    snprintf(cmd, sizeof cmd,
             "%s bench records:%s,size=32 --pipeline train --batch 2 --json --no-progress "
             ">/dev/null 2>&1",
             FERRY_CLI, out);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             "%s bench images:%s,size=32 --pipeline sideways --no-progress >/dev/null 2>&1",
             FERRY_CLI, test_dir);
    CHECK(system(cmd) != 0);
    test_remove_dir();
}

/* ferry pack --max-side: images over N on their longer side are stored as a JPEG
 * of the whole image resized to N (the resize tested equal to Pillow's), the
 * others as they are; labels and paths kept. */
TEST(cli_pack_max_side)
{
    make_folder(0);
    char cmd[2048], out[512], spec[1024];
    ferry_dataset *ds, *folder; /* listed before the shards' directory is made in it */
    snprintf(spec, sizeof spec, "images:%s,pipeline=none", test_dir);
    CHECK_OK(ferry_dataset_open(&folder, spec));
    ferry_dataset *tiny;
    snprintf(spec, sizeof spec, "images:%s,pipeline=none,max_side=64", test_dir);
    CHECK_OK(ferry_dataset_open(&tiny, spec));
    test_path("packed", out);
    snprintf(cmd, sizeof cmd,
             "%s pack images:%s %s --max-side 100 --quality 95 --no-progress >/dev/null 2>&1",
             FERRY_CLI, test_dir, out);
    CHECK(system(cmd) == 0);
    snprintf(spec, sizeof spec, "records:%s", out);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), 4);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    int fi = ferry_dataset_find_field(ds, "image"), fp = ferry_dataset_find_field(ds, "path");
    int fl = ferry_dataset_find_field(ds, "label");
    CHECK(fi >= 0 && fp >= 0 && fl >= 0);
    size_t bound = (size_t)ferry_dataset_field(ds, fi)->shape[0];
    int gi = ferry_dataset_find_field(folder, "image"),
        gp = ferry_dataset_find_field(folder, "path");
    int gl = ferry_dataset_find_field(folder, "label");
    unsigned char *img = malloc(bound), *orig = malloc(1 << 20);
    static unsigned char path[1024], opath[1024];
    int64_t label, olabel, len[3], olen[3];
    void *data[3], *odata[3];
    data[fi] = img;
    data[fp] = path;
    data[fl] = &label;
    odata[gi] = orig;
    odata[gp] = opath;
    odata[gl] = &olabel;
    ferry_sample s = {3, data, len, {0}}, o = {3, odata, olen, {0}};
    int shrunk = 0;
    for (uint64_t i = 0; i < 4; i++) {
        CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
        CHECK_OK(ferry_dataset_get(folder, i, &o, ctx));
        CHECK(label == olabel && len[fp] == olen[gp] && memcmp(path, opath, (size_t)len[fp]) == 0);
        ferry_image_info info, got;
        CHECK_OK(ferry_image_info_get(orig, (size_t)olen[gi], &info));
        uint32_t longer = info.width > info.height ? info.width : info.height;
        if (longer <= 100) { /* stored as it is */
            CHECK(len[fi] == olen[gi] && memcmp(img, orig, (size_t)len[fi]) == 0);
            continue;
        }
        shrunk++;
        CHECK_OK(ferry_image_info_get(img, (size_t)len[fi], &got));
        uint32_t tw = info.width >= info.height
                          ? 100
                          : (uint32_t)floor(info.width * 100.0 / info.height + 0.5);
        uint32_t th = info.width >= info.height
                          ? (uint32_t)floor(info.height * 100.0 / info.width + 0.5)
                          : 100;
        CHECK(got.format == FERRY_IMAGE_JPEG && got.width == tw && got.height == th);
        /* the pixels: the full decode resized (Pillow's result), within JPEG's loss */
        image full = decode_all(orig, (size_t)olen[gi]), small = decode_all(img, (size_t)len[fi]);
        unsigned char *want = resize(full.px, full.w, full.h, (size_t)full.w * 3, 3, 0, 0, full.w,
                                     full.h, FERRY_FILTER_BILINEAR, tw, th);
        double se = 0;
        for (size_t k = 0; k < (size_t)tw * th * 3; k++)
            se += ((double)want[k] - small.px[k]) * ((double)want[k] - small.px[k]);
        double psnr = 10 * log10(255.0 * 255.0 / (se / ((double)tw * th * 3)));
        printf("%.*s: %ux%u -> %ux%u, %lld bytes (was %lld), PSNR %.1f dB\n", (int)len[fp], path,
               info.width, info.height, tw, th, (long long)len[fi], (long long)olen[gi], psnr);
        CHECK(psnr > 32);
        free(want);
        free(full.px);
        free(small.px);
    }
    CHECK(shrunk == 2); /* a.jpg 227x149 and b.JPG 128x128 */
    /* out of memory at every allocation of re-encoding one: FERRY_ENOMEM, no leak */
    long k;
    for (k = 0; k < 1000; k++) {
        ferry_ctx *fresh;
        CHECK_OK(ferry_ctx_create(&fresh, 0, 0));
        ferry__test_fail_alloc(k);
        int rc = ferry_dataset_get(tiny, 0, &s, fresh);
        ferry__test_fail_alloc(-1);
        ferry_ctx_free(fresh);
        if (rc == 0)
            break;
        CHECK_RC(rc, FERRY_ENOMEM);
    }
    CHECK(k > 1 && k < 1000);
    ferry_dataset_free(tiny);
    free(img);
    free(orig);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    ferry_dataset_free(folder);
    /* what is refused, and said why */
    snprintf(cmd, sizeof cmd, "pack images:%s %s --quality 80 --no-progress", test_dir, out);
    test_ferry_cli_says(cmd, 2, "--quality applies only with --max-side");
    snprintf(cmd, sizeof cmd, "pack images:%s,pipeline=eval %s --max-side 64 --no-progress",
             test_dir, out);
    test_ferry_cli_says(cmd, 2, "--max-side applies to images packed as encoded files");
    snprintf(spec, sizeof spec, "images:%s,pipeline=train,max_side=64", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "max_side re-encodes the stored images: it needs mode none");
    snprintf(spec, sizeof spec, "images:%s,pipeline=none,quality=50", test_dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "quality= applies only with max_side=");
    test_remove_dir();
}
#endif

/* Exact by default, DCT reduction only with fast=1 (dct_reduce=1 is its older
 * name). */
TEST(fast_is_opt_in)
{
    test_need_shared(JPEG_DIR);
    /* boxes far over twice the output: exact by default, reduced with fast */
    int reduced_differs = 0;
    for (uint64_t k = 0; k < 20; k++) {
        diff exact = train_vs_reference_opts(JPEG_DIR "/valid/ljt_testorig.jpg", 16, k, 0);
        if (exact.max != 0)
            test_fail(__FILE__, __LINE__, "sample %llu without fast: max diff %d",
                      (unsigned long long)k, exact.max);
        reduced_differs +=
            train_vs_reference_opts(JPEG_DIR "/valid/ljt_testorig.jpg", 16, k, 1).max > 0;
    }
    CHECK(reduced_differs > 0); /* the setting is what made the difference */
    /* the source keys */
    const char *good[] = {"fast=0", "fast=1", "dct_reduce=0", "dct_reduce=1",
                          "fast=1,dct_reduce=1"};
    char spec[600];
    ferry_dataset *ds;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        snprintf(spec, sizeof spec, "images:%s,%s", JPEG_DIR, good[i]);
        CHECK_OK(ferry_dataset_open(&ds, spec));
        ferry_dataset_free(ds);
    }
    snprintf(spec, sizeof spec, "images:%s,fast=maybe", JPEG_DIR);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "fast=\"maybe\" is not 0 or 1");
    snprintf(spec, sizeof spec, "images:%s,fast=1,dct_reduce=0", JPEG_DIR);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "disagree");
    ferry_image_pipeline p;
    ferry_image_pipeline_default(&p, FERRY_PIPELINE_TRAIN);
    CHECK(p.fast == 0);
    p.fast = 2;
    CHECK_RC(ferry_image_pipeline_check(&p), FERRY_EINVAL);
}

/* The encoder: a round trip close to the input, and a dst too small is an error,
 * never a write past it. */
TEST(jpeg_encode_bounded)
{
    enum { W = 40, H = 24 };
    static unsigned char px[W * H * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                px[(y * W + x) * 3 + c] = (unsigned char)(x * 3 + y * 2 + c * 40);
    size_t bound = ferry_image_jpeg_bound(W, H, 3), n;
    CHECK(bound > 2048);
    unsigned char *dst = malloc(bound + 16);
    memset(dst + bound, 0xAB, 16);
    CHECK_OK(ferry_image_encode_jpeg(px, W, H, W * 3, 3, 95, dst, bound, &n));
    CHECK(n > 100 && n <= bound && dst[bound] == 0xAB);
    image im = decode_all(dst, n);
    CHECK(im.w == W && im.h == H);
    diff d = compare(im.px, px, sizeof px);
    CHECK(d.mean < 3);
    free(im.px);
    memset(dst, 0, bound + 16);
    CHECK_RC(ferry_image_encode_jpeg(px, W, H, W * 3, 3, 95, dst, 300, &n), FERRY_EOVERFLOW);
    CHECK(dst[300] == 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "output buffer full");
    CHECK_RC(ferry_image_encode_jpeg(px, W, H, W * 3, 2, 95, dst, bound, &n), FERRY_EINVAL);
    CHECK_RC(ferry_image_encode_jpeg(px, W, H, W * 3, 3, 0, dst, bound, &n), FERRY_EINVAL);
    CHECK_RC(ferry_image_encode_jpeg(px, W, H, W * 2, 3, 90, dst, bound, &n), FERRY_EINVAL);
    free(dst);
}
