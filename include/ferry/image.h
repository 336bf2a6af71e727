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

/* ---- Decoding only what a crop keeps ----
 *
 * A crop box in full-resolution pixels. */
typedef struct ferry_rect {
    uint32_t x, y, w, h;
} ferry_rect;

/* The result of ferry_image_decode_region: the decoded pixels cover at least the
 * crop, possibly at a reduced scale, and the crop's exact place in them is given
 * as a box in the decoded buffer's pixel coordinates (fractional when scaled).
 *
 * Coordinates: at scale s = scale_num / 8, decoded pixel j covers the
 * full-resolution pixels [j / s, (j + 1) / s) (one 8x8 DCT block becomes
 * scale_num x scale_num pixels), so a full-resolution coordinate u is u * s, and
 * the image decodes to ceil(W * s) x ceil(H * s) pixels. The buffer starts at
 * decoded column xoff and row yoff of that scaled image, so the crop x..x+w,
 * y..y+h is the box x0 = x * s - xoff, x1 = (x + w) * s - xoff (and y0, y1 alike),
 * with 0 <= y0 < 1 and height = ceil(y1): the rows are exactly those the crop
 * touches. Columns may extend beyond the box on either side (JPEG: see below). */
typedef struct ferry_image_region {
    uint32_t width, height; /* decoded pixels */
    int channels;           /* as ferry_image_decode would write (opts->grey, keep_alpha) */
    size_t stride;          /* bytes from one decoded row to the next (width * channels) */
    uint32_t scale_num;     /* the decode scale: scale_num / 8 (JPEG DCT scaling), 8 = none */
    double x0, y0, x1, y1;  /* the crop box within the decoded pixels */
} ferry_image_region;

/* Bytes that ferry_image_decode_region needs in dst for this image (info from
 * ferry_image_info_get), crop (NULL = the whole image) and min_w x min_h (see
 * below), with the same options. It is an upper bound for JPEG, which only the
 * decode can make exact: the crop's columns at the chosen scale, plus 2, at least
 * 8, plus one iMCU column (4 * scale_num, the widest that sampling factors allow)
 * less one, never more than the scaled image's width, times the rows the crop
 * touches; for a whole image at full scale it is ferry_image_out_size's. For PNG it
 * is exact: w * h * channels. Applies max_pixels to the whole image, like
 * ferry_image_out_size. FERRY_EINVAL for a bad crop or an info->format that is
 * neither JPEG nor PNG. */
FERRY_API int ferry_image_region_size(const ferry_image_info *info, const ferry_decode_opts *o,
                                      const ferry_rect *crop, uint32_t min_w, uint32_t min_h,
                                      size_t *size);

/* Decodes the part of buf that the crop (NULL = the whole image) covers into dst
 * (dst_size bytes, caller-owned, at least ferry_image_region_size's), and
 * describes it in *out (may be NULL). At full scale the crop's pixels are exactly
 * those ferry_image_decode gives at the same place, for every file and option.
 *  - JPEG: rows above the crop are skipped (jpeg_skip_scanlines: entropy-decoded,
 *    not transformed), columns are limited with jpeg_crop_scanline (to the iMCU
 *    columns that cover the crop), and decoding stops after the crop's last row.
 *    libjpeg's fancy upsampling treats the first and last decoded columns as image
 *    edges, so one more column is decoded on each side of the crop (and at least 8
 *    in all): the crop's own pixels stay exact. jpeg_crop_scanline moves the first
 *    decoded column down to an iMCU boundary, so up to 4 * scale_num columns more
 *    may come before the box. (Progressive files with scans missing are smoothed
 *    across blocks, two blocks each way: for them two more iMCU columns are
 *    decoded on the left and dropped, which changes nothing in dst.)
 *    With min_w and min_h > 0 (the output size the crop will be resized to), a
 *    crop at least twice that size in both directions is reduced in the DCT domain
 *    by 1/2, 1/4 or 1/8 (scale_num 4, 2, 1: libjpeg's SIMD-accelerated reduced
 *    IDCTs), the strongest reduction that leaves the crop at least min_w x min_h
 *    decoded pixels (w * scale_num / 8 >= min_w, and h alike), so the resampler
 *    that follows still downscales (or keeps the size) and never enlarges. The
 *    reduced IDCT keeps each block's lowest frequencies, close to a box filter of
 *    2x2, 4x4 or 8x8 pixels: on the test images the mean difference from a box
 *    filter of the full decode is under 1 level, with up to 36 (1/2), 17 (1/4) and
 *    5 (1/8) at sharp edges. The crop's pixels are exactly those of the whole image
 *    decoded at the same scale. CMYK and YCCK files are never reduced: their
 *    conversion to RGB is a product, which does not commute with averaging.
 *    Since decoding stops after the crop's last row, damage below it goes
 *    unnoticed: a truncated file can succeed, strict or not, for a crop that ends
 *    above the cut (progressive files excepted: libjpeg reads all their scans
 *    first). A crop that reaches the last row checks the rest as
 *    ferry_image_decode does.
 *  - PNG: rows are decoded one by one (non-interlaced) and decoding stops after
 *    the crop's last row; interlaced images are decoded whole. Only the crop's
 *    columns are kept: the buffer is exactly the crop (x0 = y0 = 0). No scaling.
 *    Every chunk's CRC is still checked first, as ferry_image_decode does.
 * The crop must lie inside the image and not be empty (FERRY_EINVAL otherwise).
 * Other errors as ferry_image_decode; dst may have been partly written. */
FERRY_API int ferry_image_decode_region(const void *buf, size_t n, const ferry_decode_opts *o,
                                        const ferry_rect *crop, uint32_t min_w, uint32_t min_h,
                                        void *dst, size_t dst_size, ferry_image_region *out);

/* ---- Encoding (what `ferry pack --max-side` stores) ----
 *
 * Bytes that ferry_image_encode_jpeg can write for a width x height image with
 * channels 1 or 3, at any quality: an upper bound (libjpeg-turbo's tjBufSize for
 * 4:4:4). 0 when it does not fit size_t. */
FERRY_API size_t ferry_image_jpeg_bound(uint32_t width, uint32_t height, int channels);

/* Encodes the 8-bit image px (width x height, channels 1 = grey or 3 = RGB,
 * stride bytes per row) as a baseline JFIF JPEG into dst[0..dst_size) with
 * libjpeg-turbo: quality 1..100 (libjpeg's scaling of the standard tables),
 * 4:2:0 chroma subsampling for colour, the islow DCT, standard Huffman tables
 * (cjpeg's defaults). *written receives the length. Nothing is allocated beyond
 * libjpeg's own working memory (a few rows); dst is never reallocated: a dst
 * under ferry_image_jpeg_bound that fills up is FERRY_EOVERFLOW. FERRY_EINVAL
 * for bad arguments (sides over 65500 included). Reentrant. */
FERRY_API int ferry_image_encode_jpeg(const uint8_t *px, uint32_t width, uint32_t height,
                                      size_t stride, int channels, int quality, void *dst,
                                      size_t dst_size, size_t *written);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_IMAGE_H */
