/*
 * The body of the JPEG and PNG fuzz targets: the same calls serve both formats
 * (ferry_image_decode picks the decoder by the magic bytes); each target keeps its
 * own corpus.
 */
#ifndef FERRY_FUZZ_IMAGE_TARGET_H
#define FERRY_FUZZ_IMAGE_TARGET_H

#include <ferry/image.h>

#include <stdlib.h>

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
    if (ferry_image_decode(data, size, &o, dst, need, &out) == 0 &&
        (out.width != info.width || out.height != info.height))
        abort();
    free(dst);
    return 0;
}

#endif
