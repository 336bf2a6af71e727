/*
 * ferry/image.h - JPEG and PNG decoding to 8-bit interleaved pixels.
 *
 * Both functions take a whole encoded image in memory and never keep a pointer to
 * it. The format is chosen by the magic bytes (JPEG: FF D8 FF; PNG: the 8-byte
 * signature), never by a file name.
 *
 * Output is 8 bits per sample, interleaved, row-major (HWC), rows packed with no
 * padding: RGB by default, grey when opts->grey is set.
 *  - JPEG (libjpeg-turbo): baseline, extended, progressive, arithmetic, any
 *    subsampling; 8-bit precision only (12-bit files: FERRY_ENOTSUP). Grey,
 *    YCbCr and RGB files go through libjpeg's own conversions (islow DCT, fancy
 *    upsampling, so the output matches djpeg's). CMYK and YCCK files are
 *    converted to RGB by R = (255 - C) * (255 - K) / 255 (rounded; G from M,
 *    B from Y), with the samples first inverted when the file carries an Adobe
 *    APP14 marker (Adobe writes CMYK inverted; libjpeg hands them back as stored).
 *    Grey output from colour is the luma 0.299 R + 0.587 G + 0.114 B (for YCbCr
 *    files libjpeg returns Y directly).
 *  - PNG (libspng): every colour type and bit depth, palette, tRNS, Adam7.
 *    Samples below 8 bits are scaled to 0..255 (v * 255 / (2^d - 1)); 16-bit
 *    samples keep their high byte. ALPHA IS DROPPED, NOT COMPOSITED: an alpha
 *    channel or a tRNS transparency is discarded and the colour samples are
 *    returned as stored, unless opts->keep_alpha asks for it as an extra channel.
 *
 * Limits: images with more than opts->max_pixels pixels (default 2^28) are refused
 * with FERRY_ERANGE after reading the header and before any allocation sized by
 * the image. Progressive JPEGs with more than FERRY_IMAGE_MAX_SCANS scans are
 * refused (a small file could otherwise take minutes).
 *
 * Errors: FERRY_EINVAL (NULL or bad arguments), FERRY_ENOTSUP (not JPEG/PNG, or a
 * JPEG variant this build cannot decode), FERRY_ECORRUPT (malformed or truncated
 * data; the message quotes libjpeg or libspng), FERRY_ERANGE (over max_pixels),
 * FERRY_EOVERFLOW (dst too small; the message names the size needed),
 * FERRY_ENOMEM. Messages start with "jpeg: " or "png: ". Nothing is printed.
 *
 * Truncated and damaged JPEGs: libjpeg reports lost data as warnings and goes on,
 * filling what is missing. By default ferry turns those warnings (premature end of
 * file or of a data segment, bad Huffman code, lost sync) into FERRY_ECORRUPT;
 * with opts->lenient set it returns libjpeg's partial image instead. Harmless
 * warnings (extraneous bytes between markers, an unknown APP14) never fail.
 *
 * Threads: both functions are reentrant; they keep no state between calls.
 */
#ifndef FERRY_IMAGE_H
#define FERRY_IMAGE_H

#include "ferry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ferry_image_format {
    FERRY_IMAGE_UNKNOWN = 0,
    FERRY_IMAGE_JPEG = 1,
    FERRY_IMAGE_PNG = 2
} ferry_image_format;

#define FERRY_IMAGE_DEFAULT_MAX_PIXELS ((uint64_t)1 << 28)
#define FERRY_IMAGE_MAX_SCANS 500

/* What the file holds. */
typedef struct ferry_image_info {
    ferry_image_format format;
    uint32_t width, height;
    /* Channels stored in the file: JPEG 1 (grey), 3 (YCbCr/RGB), 4 (CMYK/YCCK);
     * PNG 1 (grey), 2 (grey+alpha), 3 (RGB or palette), 4 (RGBA). */
    int channels;
    int bit_depth; /* bits per stored sample (PNG 1..16, JPEG 8 or 12) */
    int has_alpha; /* PNG: an alpha channel or a tRNS chunk */
    /* ferry_image_decode: the channels written to dst (1, 2, 3 or 4).
     * ferry_image_info: what a decode with default options would write (3). */
    int out_channels;
} ferry_image_info;

typedef struct ferry_decode_opts {
    int grey;            /* 1: one grey channel instead of RGB */
    int keep_alpha;      /* 1: PNGs with alpha/tRNS get it as a last channel (GA, RGBA) */
    int lenient;         /* 1: return libjpeg's partial image for truncated JPEGs */
    uint64_t max_pixels; /* 0 = FERRY_IMAGE_DEFAULT_MAX_PIXELS */
} ferry_decode_opts;

/* Zeroes *o: RGB, alpha dropped, strict, default max_pixels. */
FERRY_API void ferry_decode_opts_default(ferry_decode_opts *o);

/* (Named _get because a C function cannot share the ferry_image_info typedef's
 * name.) Reads only the header (and, for PNG, the chunks before the image data) and fills
 * *out. Does not apply max_pixels. */
FERRY_API int ferry_image_info_get(const void *buf, size_t n, ferry_image_info *out);

/* Bytes ferry_image_decode will write for this image and these options (o may be
 * NULL): width * height * channels. FERRY_ERANGE over max_pixels, FERRY_EOVERFLOW
 * if it does not fit size_t. Also sets info->out_channels. */
FERRY_API int ferry_image_out_size(ferry_image_info *info, const ferry_decode_opts *o,
                                   size_t *size);

/* Decodes buf[0..n) into dst (dst_size bytes, caller-owned) as described above.
 * o may be NULL (defaults). out (may be NULL) receives the info, with
 * out_channels set to what was written. On error dst may have been partly
 * written. */
FERRY_API int ferry_image_decode(const void *buf, size_t n, const ferry_decode_opts *o, void *dst,
                                 size_t dst_size, ferry_image_info *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_IMAGE_H */
