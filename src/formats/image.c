/*
 * JPEG (libjpeg API) and PNG (libspng) decoding to 8-bit interleaved pixels.
 *
 * libjpeg reports errors by calling error_exit, which by default prints and exits:
 * ours formats the message and longjmps back to jpeg_run. Everything that must
 * survive the longjmp lives in struct jctx, which is not a local of the function
 * that calls setjmp, so its values are well defined after the jump.
 */
#include "ferry/image.h"
#include "../core/internal.h"

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>
#include <spng.h>

_Static_assert(FERRY_ERRMSG_MAX >= JMSG_LENGTH_MAX, "libjpeg messages fit");

void ferry_decode_opts_default(ferry_decode_opts *o)
{
    if (o)
        memset(o, 0, sizeof *o);
}

static ferry_image_format sniff(const unsigned char *b, size_t n)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return FERRY_IMAGE_JPEG;
    if (n >= 8 && memcmp(b, png_sig, 8) == 0)
        return FERRY_IMAGE_PNG;
    return FERRY_IMAGE_UNKNOWN;
}

static int unknown_format(const unsigned char *b, size_t n)
{
    if (n == 0)
        return ferry__err(FERRY_ECORRUPT, "image: empty input (0 bytes)");
    if (n < 8 && ((n >= 1 && b[0] == 0xFF) || (n >= 1 && b[0] == 0x89)))
        return ferry__err(FERRY_ECORRUPT, "image: %zu bytes is too short for a JPEG or PNG header",
                          n);
    return ferry__err(FERRY_ENOTSUP,
                      "image: unknown format (first bytes %02x %02x %02x %02x): only JPEG "
                      "(ff d8 ff) and PNG (89 50 4e 47) are supported",
                      b[0], n > 1 ? b[1] : 0, n > 2 ? b[2] : 0, n > 3 ? b[3] : 0);
}

static uint64_t max_pixels_of(const ferry_decode_opts *o)
{
    return o && o->max_pixels ? o->max_pixels : FERRY_IMAGE_DEFAULT_MAX_PIXELS;
}

int ferry_image_out_size(ferry_image_info *info, const ferry_decode_opts *o, size_t *size)
{
    if (!info || !size)
        return ferry__err(FERRY_EINVAL, "ferry_image_out_size: info and size must not be NULL");
    if (info->width == 0 || info->height == 0)
        return ferry__err(FERRY_ECORRUPT, "image: zero dimension %" PRIu32 "x%" PRIu32, info->width,
                          info->height);
    uint64_t px = (uint64_t)info->width * info->height, maxp = max_pixels_of(o);
    if (px > maxp)
        return ferry__err(FERRY_ERANGE,
                          "image: %" PRIu32 "x%" PRIu32 " = %" PRIu64
                          " pixels is over max_pixels %" PRIu64,
                          info->width, info->height, px, maxp);
    int ch = o && o->grey ? 1 : 3;
    if (o && o->keep_alpha && info->has_alpha)
        ch++;
    info->out_channels = ch;
    if (px > SIZE_MAX / (size_t)ch)
        return ferry__err(FERRY_EOVERFLOW, "image: %" PRIu64 " pixels x %d channels overflows", px,
                          ch);
    *size = (size_t)px * (size_t)ch;
    return 0;
}

/* ---------------------------------------------------------------- JPEG ---- */

struct jctx {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    int created;
    int rc;                     /* the ferry code an error_exit maps to */
    char msg[FERRY_ERRMSG_MAX]; /* >= JMSG_LENGTH_MAX; ferry__err_copy fills all */
    /* inputs */
    const unsigned char *buf;
    size_t n;
    const ferry_decode_opts *o;
    unsigned char *dst;
    size_t dst_size;
    int info_only;
    ferry_image_info info;
    unsigned char *row; /* CMYK scanline, ferry__malloc'd */
};

static int jpeg_code_rc(int code)
{
    switch (code) {
    case JERR_BAD_PRECISION:
    case JERR_NOT_COMPILED:
    case JERR_ARITH_NOTIMPL:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOTIMPL:
        return FERRY_ENOTSUP;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
        return FERRY_ENOMEM;
    default:
        return FERRY_ECORRUPT;
    }
}

static void jpeg_fail(j_common_ptr c)
{
    struct jctx *j = (struct jctx *)c->client_data;
    c->err->format_message(c, j->msg);
    j->rc = jpeg_code_rc(c->err->msg_code);
    longjmp(j->jump, 1);
}

/* Warnings that mean image data was lost or made up. */
static int jpeg_data_lost(int code)
{
    return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
           code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL ||
           code == JWRN_BOGUS_PROGRESSION;
}

static void jpeg_message(j_common_ptr c, int level)
{
    struct jctx *j = (struct jctx *)c->client_data;
    if (level >= 0)
        return; /* trace messages */
    c->err->num_warnings++;
    if (!(j->o && j->o->lenient) && jpeg_data_lost(c->err->msg_code)) {
        c->err->format_message(c, j->msg);
        j->rc = FERRY_ECORRUPT;
        longjmp(j->jump, 1);
    }
}

static void jpeg_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    struct jctx *j = (struct jctx *)c->client_data;
    if (d->is_decompressor && d->input_scan_number > FERRY_IMAGE_MAX_SCANS) {
        snprintf(j->msg, sizeof j->msg, "more than %d progressive scans", FERRY_IMAGE_MAX_SCANS);
        j->rc = FERRY_ECORRUPT;
        longjmp(j->jump, 1);
    }
}

static inline unsigned char mul255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (unsigned char)((t + (t >> 8)) >> 8);
}

static inline unsigned char luma(unsigned r, unsigned g, unsigned b)
{
    return (unsigned char)((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}

static void cmyk_row(const unsigned char *in, unsigned char *out, size_t w, int inverted, int grey)
{
    for (size_t x = 0; x < w; x++, in += 4) {
        unsigned c = in[0], m = in[1], y = in[2], k = in[3];
        if (!inverted) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        /* now 255 = no ink */
        unsigned char r = mul255(c, k), g = mul255(m, k), b = mul255(y, k);
        if (grey) {
            *out++ = luma(r, g, b);
        } else {
            *out++ = r;
            *out++ = g;
            *out++ = b;
        }
    }
}

/* Returns 0 or a ferry code; j->msg holds libjpeg's words on failure. */
static int jpeg_run(struct jctx *j)
{
    j_decompress_ptr d = &j->cinfo;
    if (setjmp(j->jump))
        return j->rc ? j->rc : FERRY_ECORRUPT;
    d->err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = jpeg_fail;
    j->jerr.emit_message = jpeg_message;
    d->client_data = j;
    jpeg_create_decompress(d);
    d->client_data = j; /* jpeg_create_decompress clears the struct but keeps err */
    j->created = 1;
    j->progress.progress_monitor = jpeg_progress;
    d->progress = &j->progress;
    jpeg_mem_src(d, j->buf, (unsigned long)j->n);
    if (jpeg_read_header(d, TRUE) != JPEG_HEADER_OK) {
        snprintf(j->msg, sizeof j->msg, "no image, only tables");
        return FERRY_ECORRUPT;
    }
    j->info.format = FERRY_IMAGE_JPEG;
    j->info.width = d->image_width;
    j->info.height = d->image_height;
    j->info.channels = d->num_components;
    j->info.bit_depth = d->data_precision;
    j->info.has_alpha = 0;
    j->info.out_channels = 3;
    if (j->info_only)
        return 0;

    int grey = j->o && j->o->grey;
    int cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
    if (cmyk)
        d->out_color_space = JCS_CMYK;
    else
        d->out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
    d->dct_method = JDCT_ISLOW;

    size_t need;
    int rc = ferry_image_out_size(&j->info, j->o, &need);
    if (rc < 0) {
        ferry__err_copy(j->msg);
        return rc;
    }
    if (need > j->dst_size) {
        snprintf(j->msg, sizeof j->msg, "%" PRIu32 "x%" PRIu32 "x%d needs %zu bytes, dst has %zu",
                 j->info.width, j->info.height, j->info.out_channels, need, j->dst_size);
        return FERRY_EOVERFLOW;
    }
    jpeg_start_decompress(d);
    size_t w = d->output_width, ch = (size_t)j->info.out_channels;
    if (d->output_width != j->info.width || d->output_height != j->info.height ||
        (!cmyk && (size_t)d->output_components != ch) || (cmyk && d->output_components != 4)) {
        snprintf(j->msg, sizeof j->msg, "unexpected output geometry %ux%ux%d", d->output_width,
                 d->output_height, d->output_components);
        return FERRY_ECORRUPT;
    }
    if (cmyk) {
        j->row = ferry__malloc(w * 4);
        if (!j->row) {
            snprintf(j->msg, sizeof j->msg, "out of memory for a %zu-byte row", w * 4);
            return FERRY_ENOMEM;
        }
    }
    while (d->output_scanline < d->output_height) {
        unsigned char *out = j->dst + (size_t)d->output_scanline * w * ch;
        JSAMPROW rows[1] = {cmyk ? j->row : out};
        if (jpeg_read_scanlines(d, rows, 1) != 1) {
            snprintf(j->msg, sizeof j->msg, "no progress at row %u", d->output_scanline);
            return FERRY_ECORRUPT;
        }
        if (cmyk)
            cmyk_row(j->row, out, w, d->saw_Adobe_marker, grey);
    }
    jpeg_finish_decompress(d);
    return 0;
}

static int jpeg_do(const void *buf, size_t n, const ferry_decode_opts *o, void *dst,
                   size_t dst_size, int info_only, ferry_image_info *out)
{
    struct jctx *j = ferry__calloc(1, sizeof *j);
    if (!j)
        return ferry__err(FERRY_ENOMEM, "jpeg: out of memory for the decoder");
    j->buf = buf;
    j->n = n;
    j->o = o;
    j->dst = dst;
    j->dst_size = dst_size;
    j->info_only = info_only;
    int rc = jpeg_run(j);
    if (rc < 0) {
        if (j->info.width)
            rc = ferry__err(rc, "jpeg %" PRIu32 "x%" PRIu32 ": %s", j->info.width, j->info.height,
                            j->msg);
        else
            rc = ferry__err(rc, "jpeg: %s", j->msg);
    } else if (out) {
        *out = j->info;
    }
    if (j->created)
        jpeg_destroy_decompress(&j->cinfo);
    ferry__free(j->row);
    ferry__free(j);
    return rc;
}

/* ----------------------------------------------------------------- PNG ---- */

static int png_rc(int e)
{
    return e == SPNG_EMEM ? FERRY_ENOMEM : FERRY_ECORRUPT;
}

static void *png_malloc(size_t n)
{
    return ferry__malloc(n);
}
static void *png_realloc(void *p, size_t n)
{
    return ferry__realloc(p, n);
}
static void *png_calloc(size_t a, size_t b)
{
    return ferry__calloc(a, b);
}
static void png_free(void *p)
{
    ferry__free(p);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Every chunk's CRC, and an IEND at the end. libspng 0.7.3 checks neither the CRC
 * of the last IDAT once the image data has ended nor that IEND is there, so a
 * damaged or truncated file would decode as if whole. */
static int png_check_chunks(const uint8_t *p, size_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    size_t at = 8;
    while (at + 12 <= n) {
        uint32_t len = be32(p + at);
        if (len > 0x7fffffffu || len > n - at - 12)
            return ferry__err(FERRY_ECORRUPT,
                              "png: chunk at byte %zu: length %u runs past the end "
                              "(%zu bytes)",
                              at, len, n);
        uint32_t c = 0xffffffffu;
        for (size_t i = at + 4; i < at + 8 + len; i++)
            c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
        if ((c ^ 0xffffffffu) != be32(p + at + 8 + len))
            return ferry__err(FERRY_ECORRUPT, "png: chunk at byte %zu: crc mismatch", at);
        if (!memcmp(p + at + 4, "IEND", 4))
            return 0;
        at += 12 + (size_t)len;
    }
    return ferry__err(FERRY_ECORRUPT, "png: no IEND chunk: the file ends at byte %zu (truncated?)",
                      n);
}

static int png_do(const void *buf, size_t n, const ferry_decode_opts *o, void *dst, size_t dst_size,
                  int info_only, ferry_image_info *out)
{
    if (!info_only && n >= 8) {
        int crc_rc = png_check_chunks(buf, n);
        if (crc_rc < 0)
            return crc_rc;
    }
    struct spng_alloc alloc = {png_malloc, png_realloc, png_calloc, png_free};
    unsigned char *tmp = NULL;
    int rc = 0, e;
    ferry_image_info info = {0};
    spng_ctx *ctx = spng_ctx_new2(&alloc, 0);
    if (!ctx)
        return ferry__err(FERRY_ENOMEM, "png: out of memory for the decoder");
    /* Decompressed ancillary chunks (iCCP, zTXt) are capped: a zip bomb in metadata
     * must not cost more than this. */
    spng_set_chunk_limits(ctx, (size_t)1 << 30, (size_t)16 << 20);
    if ((e = spng_set_png_buffer(ctx, buf, n)) != 0)
        FERRY_FAIL(png_rc(e), "png: %s", spng_strerror(e));
    struct spng_ihdr ih;
    if ((e = spng_get_ihdr(ctx, &ih)) != 0)
        FERRY_FAIL(png_rc(e), "png: header: %s", spng_strerror(e));
    info.format = FERRY_IMAGE_PNG;
    info.width = ih.width;
    info.height = ih.height;
    info.bit_depth = ih.bit_depth;
    switch (ih.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
        info.channels = 1;
        break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
        info.channels = 2;
        break;
    case SPNG_COLOR_TYPE_TRUECOLOR:
    case SPNG_COLOR_TYPE_INDEXED:
        info.channels = 3;
        break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
        info.channels = 4;
        break;
    default:
        FERRY_FAIL(FERRY_ECORRUPT, "png: colour type %d", (int)ih.color_type);
    }
    info.has_alpha = info.channels == 2 || info.channels == 4;
    struct spng_trns trns;
    e = spng_get_trns(ctx, &trns);
    if (e == 0)
        info.has_alpha = 1;
    else if (e != SPNG_ECHUNKAVAIL)
        FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": before the image data: %s", info.width,
                   info.height, spng_strerror(e));
    info.out_channels = 3;
    if (info_only)
        goto done;

    size_t need, tmp_size;
    FERRY_TRY(ferry_image_out_size(&info, o, &need));
    if (need > dst_size)
        FERRY_FAIL(FERRY_EOVERFLOW,
                   "png %" PRIu32 "x%" PRIu32 ": %d channels need %zu bytes, dst has %zu",
                   info.width, info.height, info.out_channels, need, dst_size);
    /* RGBA8 covers every colour type and depth; the pixel count is bounded by
     * max_pixels above, so this cannot overflow where need did not. */
    if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &tmp_size)) != 0)
        FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": %s", info.width, info.height,
                   spng_strerror(e));
    tmp = ferry__malloc(tmp_size);
    if (!tmp)
        FERRY_FAIL(FERRY_ENOMEM, "png %" PRIu32 "x%" PRIu32 ": out of memory for %zu bytes",
                   info.width, info.height, tmp_size);
    if ((e = spng_decode_image(ctx, tmp, tmp_size, SPNG_FMT_RGBA8, SPNG_DECODE_TRNS)) != 0)
        FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": image data: %s", info.width,
                   info.height, spng_strerror(e));
    size_t px = (size_t)info.width * info.height;
    int grey = o && o->grey, alpha = info.out_channels == 2 || info.out_channels == 4;
    int src_grey = info.channels <= 2;
    unsigned char *d = dst;
    const unsigned char *s = tmp;
    for (size_t i = 0; i < px; i++, s += 4) {
        if (grey)
            *d++ = src_grey ? s[0] : luma(s[0], s[1], s[2]);
        else {
            *d++ = s[0];
            *d++ = s[1];
            *d++ = s[2];
        }
        if (alpha)
            *d++ = s[3];
    }
done:
    if (out)
        *out = info;
cleanup:
    ferry__free(tmp);
    spng_ctx_free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- API ---- */

int ferry_image_info_get(const void *buf, size_t n, ferry_image_info *out)
{
    if ((!buf && n) || !out)
        return ferry__err(FERRY_EINVAL, "ferry_image_info_get: buf and out must not be NULL");
    memset(out, 0, sizeof *out);
    switch (sniff(buf, n)) {
    case FERRY_IMAGE_JPEG:
        return jpeg_do(buf, n, NULL, NULL, 0, 1, out);
    case FERRY_IMAGE_PNG:
        return png_do(buf, n, NULL, NULL, 0, 1, out);
    default:
        return unknown_format(buf, n);
    }
}

int ferry_image_decode(const void *buf, size_t n, const ferry_decode_opts *o, void *dst,
                       size_t dst_size, ferry_image_info *out)
{
    if ((!buf && n) || (!dst && dst_size))
        return ferry__err(FERRY_EINVAL, "ferry_image_decode: NULL buffer with a non-zero size");
    if (o && (o->grey < 0 || o->grey > 1 || o->keep_alpha < 0 || o->keep_alpha > 1 ||
              o->lenient < 0 || o->lenient > 1))
        return ferry__err(FERRY_EINVAL,
                          "ferry_image_decode: grey, keep_alpha and lenient must be 0 or 1");
    if (out)
        memset(out, 0, sizeof *out);
    switch (sniff(buf, n)) {
    case FERRY_IMAGE_JPEG:
        return jpeg_do(buf, n, o, dst, dst_size, 0, out);
    case FERRY_IMAGE_PNG:
        return png_do(buf, n, o, dst, dst_size, 0, out);
    default:
        return unknown_format(buf, n);
    }
}
