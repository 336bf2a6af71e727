/*
 * images_cpu - CPU time per image, by stage, of the train pipeline's exact path
 * beside a full TurboJPEG decode, on one thread, the images in memory.
 *
 * Usage: images_cpu [--passes P] DIR
 *
 * Reads every *.jpg under DIR (sorted) into memory, then, P times (default 2),
 * for each image in turn and side by side (so that a noisy machine slows them
 * alike), measures the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) of the
 * following, each started as after a read of the file (its bytes copied into
 * one buffer first, untimed, so that each finds them in the cache alike):
 *   tj        tjDecompress2 of the whole image to RGB (the decode anchor)
 *   decode    ferry_image_info_get, the train plan (RandomResizedCrop(224) from
 *             the sample's generator) and ferry_image_decode_region of its box
 *   resample  ferry_resize of the decoded box to 224x224 (bilinear)
 *   f32       ferry_pixels_finish to normalised float32 CHW, mirrored as drawn
 *   u8        ferry_pixels_finish to uint8 CHW, mirrored as drawn
 *   pipeline  ferry_image_pipeline_run, float32 and dtype=uint8 (what a
 *             worker runs per image: the three stages above in one call)
 * The finishes and the pipelines write into a ring of 256 slots, the size of
 * a batch, touched beforehand, so that their writes go to memory as a batch's
 * do. Prints one JSON object: microseconds per image for each, and the ratios
 * tj / pipeline (float32) and pipeline float32 / uint8.
 *
 * Build (from the repository root, after a Release build):
 *   cc -O2 bench/images_cpu.c -o images_cpu -Iinclude -Lbuild -lferry
 *      -lturbojpeg -Wl,-rpath,$PWD/build
 */
#define _GNU_SOURCE
#include "ferry/ferry.h"
#include "ferry/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#define SLOTS 256
#define SIDE 224

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "images_cpu: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

enum { TJ, DECODE, RESAMPLE, F32, U8, PIPE_F32, PIPE_U8, NSTAGES };
static const char *const names[NSTAGES] = {"tj",        "decode",       "resample",   "finish_f32",
                                           "finish_u8", "pipeline_f32", "pipeline_u8"};

int main(int argc, char **argv)
{
    int passes = 2;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoi(argv[++i]);
        else
            dir = argv[i];
    }
    if (!dir || passes < 1)
        die("usage: images_cpu [--passes P] DIR", NULL);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "find '%s' -type f -iname '*.jpg' | sort", dir);
    FILE *list = popen(cmd, "r");
    if (!list)
        die("cannot list", dir);
    char **buf = NULL;
    size_t *len = NULL, n = 0, cap = 0, biggest = 0;
    char line[4096];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\n")] = 0;
        FILE *f = fopen(line, "rb");
        if (!f || fseek(f, 0, SEEK_END) != 0)
            die("cannot read", line);
        long sz = ftell(f);
        rewind(f);
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            buf = realloc(buf, cap * sizeof *buf);
            len = realloc(len, cap * sizeof *len);
            if (!buf || !len)
                die("out of memory", NULL);
        }
        if (sz <= 0 || !(buf[n] = malloc((size_t)sz)) ||
            fread(buf[n], 1, (size_t)sz, f) != (size_t)sz)
            die("cannot read", line);
        fclose(f);
        biggest = (size_t)sz > biggest ? (size_t)sz : biggest;
        len[n++] = (size_t)sz;
    }
    pclose(list);
    if (n == 0)
        die("no *.jpg files under", dir);

    ferry_image_pipeline pf, pu;
    ferry_image_pipeline_default(&pf, FERRY_PIPELINE_TRAIN);
    pu = pf;
    pu.dtype = FERRY_U8;
    pu.normalize = 0;
    size_t slot = (size_t)SIDE * SIDE * 3 * sizeof(float);
    uint8_t *ring = aligned_alloc(64, slot * SLOTS);
    uint8_t *full = NULL, *region = NULL, *resized = malloc((size_t)SIDE * SIDE * 3), *tmp = NULL;
    uint8_t *file = malloc(biggest); /* where a read would put the file */
    size_t full_cap = 0, region_cap = 0, tmp_cap = 0;
    if (!ring || !resized || !file)
        die("out of memory", NULL);
    memset(ring, 1, slot * SLOTS);
    tjhandle tj = tjInitDecompress();
    ferry_ctx *ctx;
    if (!tj || ferry_ctx_create(&ctx, 1, 0) < 0)
        die("cannot start the decoders", NULL);
    double t[NSTAGES] = {0};
    unsigned long long k = 0;
    for (int pass = 0; pass < passes; pass++) {
        for (size_t i = 0; i < n; i++, k++) {
            uint8_t *out = ring + (k % SLOTS) * slot;
            memcpy(file, buf[i], len[i]); /* each run starts as after reading the file */
            double a = cpu_s();
            int w, h, ss, cs;
            if (tjDecompressHeader3(tj, (unsigned char *)file, (unsigned long)len[i], &w, &h, &ss,
                                    &cs) != 0)
                die("tjDecompressHeader3", tjGetErrorStr2(tj));
            if ((size_t)w * h * 3 > full_cap) {
                full_cap = (size_t)w * h * 3;
                if (!(full = realloc(full, full_cap)))
                    die("out of memory", NULL);
            }
            if (tjDecompress2(tj, (unsigned char *)file, (unsigned long)len[i], full, w, 0, h,
                              TJPF_RGB, 0) != 0)
                die("tjDecompress2", tjGetErrorStr2(tj));
            double b = cpu_s();
            t[TJ] += b - a;

            /* the exact path, stage by stage, as ferry_image_pipeline_run takes it */
            memcpy(file, buf[i], len[i]);
            b = cpu_s();
            ferry_rng rng;
            ferry_ctx_rng(ctx, i, &rng);
            ferry_image_info info;
            ferry_image_plan plan;
            size_t need;
            ferry_image_region r;
            if (ferry_image_info_get(file, len[i], &info) < 0 ||
                ferry_image_pipeline_plan(&pf, info.width, info.height, &rng, &plan) < 0 ||
                ferry_image_region_size(&info, NULL, &plan.decode, 0, 0, &need) < 0)
                die("plan", ferry_last_errmsg());
            if (need > region_cap) {
                region_cap = need;
                if (!(region = realloc(region, region_cap)))
                    die("out of memory", NULL);
            }
            if (ferry_image_decode_region(file, len[i], NULL, &plan.decode, 0, 0, region, need,
                                          &r) < 0)
                die("decode", ferry_last_errmsg());
            double c = cpu_s();
            t[DECODE] += c - b;
            /* the box in whole decoded pixels, as the pipeline cuts it out */
            double fx = floor(r.x0 + 1e-9), fy = floor(r.y0 + 1e-9);
            double cx = ceil(r.x1 - 1e-9), cy = ceil(r.y1 - 1e-9);
            uint32_t sx = (uint32_t)fx, sy = (uint32_t)fy;
            uint32_t sw = (cx > r.width ? r.width : (uint32_t)cx) - sx;
            uint32_t sh = (cy > r.height ? r.height : (uint32_t)cy) - sy;
            double x0 = r.x0 - sx, y0 = r.y0 - sy, x1 = r.x1 - sx, y1 = r.y1 - sy;
            x0 = x0 < 0 ? 0 : x0;
            y0 = y0 < 0 ? 0 : y0;
            x1 = x1 > sw ? sw : x1;
            y1 = y1 > sh ? sh : y1;
            size_t ts =
                ferry_resize_tmp_size(sw, sh, 3, x0, y0, x1, y1, SIDE, SIDE, FERRY_FILTER_BILINEAR);
            if (ts > tmp_cap) {
                tmp_cap = ts;
                if (!(tmp = realloc(tmp, tmp_cap)))
                    die("out of memory", NULL);
            }
            if (ts == 0 || ferry_resize(region + (size_t)sy * r.stride + (size_t)sx * 3, sw, sh,
                                        r.stride, 3, x0, y0, x1, y1, FERRY_FILTER_BILINEAR, resized,
                                        SIDE, SIDE, SIDE * 3, tmp, tmp_cap) < 0)
                die("resize", ferry_last_errmsg());
            double d = cpu_s();
            t[RESAMPLE] += d - c;
            ferry_pixel_opts po;
            ferry_pixel_opts_default(&po);
            po.flip = plan.flip;
            po.normalize = 1;
            memcpy(po.mean, pf.mean, sizeof pf.mean);
            memcpy(po.std, pf.std, sizeof pf.std);
            if (ferry_pixels_finish(resized, SIDE, SIDE, SIDE * 3, 3, &po, out) < 0)
                die("finish", ferry_last_errmsg());
            double e = cpu_s();
            t[F32] += e - d;
            po.normalize = 0;
            po.dtype = FERRY_U8;
            if (ferry_pixels_finish(resized, SIDE, SIDE, SIDE * 3, 3, &po,
                                    ring + ((k + SLOTS / 2) % SLOTS) * slot) < 0)
                die("finish", ferry_last_errmsg());
            double f = cpu_s();
            t[U8] += f - e;

            memcpy(file, buf[i], len[i]);
            f = cpu_s();
            ferry_ctx_rng(ctx, i, &rng);
            if (ferry_image_pipeline_run(&pf, file, len[i], &rng, out, ctx) < 0)
                die("pipeline", ferry_last_errmsg());
            double g = cpu_s();
            t[PIPE_F32] += g - f;
            memcpy(file, buf[i], len[i]);
            g = cpu_s();
            ferry_ctx_rng(ctx, i, &rng);
            if (ferry_image_pipeline_run(&pu, file, len[i], &rng,
                                         ring + ((k + SLOTS / 2) % SLOTS) * slot, ctx) < 0)
                die("pipeline", ferry_last_errmsg());
            t[PIPE_U8] += cpu_s() - g;
        }
    }
    printf("{\"images\": %llu, \"us_per_image\": {", k);
    for (int s = 0; s < NSTAGES; s++)
        printf("%s\"%s\": %.1f", s ? ", " : "", names[s], t[s] * 1e6 / (double)k);
    printf("}, \"tj_over_pipeline_f32\": %.3f, \"pipeline_f32_over_u8\": %.3f}\n",
           t[TJ] / t[PIPE_F32], t[PIPE_F32] / t[PIPE_U8]);
    ferry_ctx_free(ctx);
    tjDestroy(tj);
    return 0;
}
