/*
 * The body of the JPEG and PNG fuzz targets: the same calls serve both formats
 * (ferry_image_decode picks the decoder by the magic bytes); each target keeps its
 * own corpus.
 *
 * After the whole-image decode, the same bytes go through ferry_image_decode_region
 * with a crop and a reduction drawn from a hash of the input, into a buffer of
 * exactly ferry_image_region_size bytes. The box it reports must lie in the
 * decoded pixels, and at full scale, when both decodes succeed strictly, the crop's
 * pixels must equal the whole decode's.
 */
#ifndef FERRY_FUZZ_IMAGE_TARGET_H
#define FERRY_FUZZ_IMAGE_TARGET_H

#include <ferry/image.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t image_target_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static void image_target_region(const uint8_t *data, size_t size, const ferry_decode_opts *o,
                                const ferry_image_info *info, const unsigned char *whole)
{
    uint64_t h = image_target_hash(data, size);
    uint32_t w = info->width, ht = info->height;
    ferry_rect c;
    c.x = (uint32_t)(h % w);
    c.y = (uint32_t)((h >> 16) % ht);
    c.w = 1 + (uint32_t)((h >> 32) % (w - c.x));
    c.h = 1 + (uint32_t)((h >> 44) % (ht - c.y));
    /* none, or a minimum of the crop over 2, 4, 8 or 16: every reduction */
    unsigned k = (unsigned)(h >> 58) % 5;
    uint32_t min_w = k ? (c.w >> k) + 1 : 0, min_h = k ? (c.h >> k) + 1 : 0;
    size_t need;
    if (ferry_image_region_size(info, o, &c, min_w, min_h, &need) != 0)
        abort(); /* the whole image decoded, so its limits pass */
    unsigned char *dst = malloc(need ? need : 1);
    if (!dst)
        return;
    ferry_image_region r;
    if (ferry_image_decode_region(data, size, o, &c, min_w, min_h, dst, need, &r) == 0) {
        double s = r.scale_num / 8.0;
        if (r.width == 0 || r.height == 0 || r.stride != (size_t)r.width * (size_t)r.channels ||
            (size_t)r.height * r.stride > need || r.x0 < 0 || r.y0 < 0 || r.x1 > r.width ||
            r.y1 > r.height || r.x1 - r.x0 != c.w * s || r.y1 - r.y0 != c.h * s)
            abort();
        if (whole && r.scale_num == 8) {
            size_t ch = (size_t)r.channels, x0 = (size_t)r.x0, y0 = (size_t)r.y0;
            for (uint32_t j = 0; j < c.h; j++)
                if (memcmp(dst + (y0 + j) * r.stride + x0 * ch,
                           whole + ((size_t)(c.y + j) * w + c.x) * ch, c.w * ch) != 0)
                    abort();
        }
    }
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_image_info info;
    if (ferry_image_info_get(data, size, &info) != 0)
        return 0;
    ferry_decode_opts o;
    ferry_decode_opts_default(&o);
    o.max_pixels = (uint64_t)1 << 22;
    unsigned mode = size ? data[size - 1] : 0;
    o.grey = mode & 1;
    o.keep_alpha = (mode >> 1) & 1;
    o.lenient = (mode >> 2) & 1;
    size_t need;
    if (ferry_image_out_size(&info, &o, &need) != 0)
        return 0;
    unsigned char *dst = malloc(need);
    if (!dst)
        return 0;
    ferry_image_info out;
    int rc = ferry_image_decode(data, size, &o, dst, need, &out);
    if (rc == 0 && (out.width != info.width || out.height != info.height))
        abort();
    /* lenient decodes may fill in differently where data is missing */
    image_target_region(data, size, &o, &info, rc == 0 && !o.lenient ? dst : NULL);
    free(dst);
    return 0;
}

#endif
