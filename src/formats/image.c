/*
 * JPEG (libjpeg API) and PNG (libspng) decoding to 8-bit interleaved pixels.
 *
 * libjpeg reports errors by calling error_exit, which by default prints and exits:
 * ours formats the message and longjmps back to jpeg_run. Everything that must
 * survive the longjmp lives in struct jctx, which is not a local of the function
 * that calls setjmp, so its values are well defined after the jump.
 *
 * A whole-image decode is a region decode whose crop is the whole image at full
 * scale: both go through make_plan and one body per format.
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

/* -------------------------------------------------------------- regions ---- */

/* What a decode will produce. The crop maps to the num/8-scaled image's continuous
 * coordinates by u -> u * num / 8 (scaled pixel j covers full-resolution
 * [j * 8 / num, (j + 1) * 8 / num), as one 8x8 DCT block becomes num x num pixels),
 * so it touches the scaled columns [l, r) and rows [t, b). A decoder writes exactly
 * the rows [t, b) and at most bw columns per row, a run of columns that holds [l, r). */
typedef struct plan {
    uint32_t num;    /* scale_num; the denominator is 8 */
    uint32_t sw, sh; /* the scaled image, ceil(W * num / 8) x ceil(H * num / 8) */
    uint32_t l, r, t, b;
    uint32_t bw;  /* the widest row a decoder may write, in pixels */
    ferry_rect c; /* the crop in full-resolution pixels */
    int whole;    /* the crop is the whole image at full scale */
    int ch;       /* channels written */
    size_t need;  /* bw * (b - t) * ch */
} plan;

static uint32_t scale_down(uint64_t v, uint32_t num)
{
    return (uint32_t)(v * num / 8);
}

static uint32_t scale_up(uint64_t v, uint32_t num)
{
    return (uint32_t)((v * num + 7) / 8);
}

/* JPEG columns beyond the crop: libjpeg's fancy upsampling treats the first and
 * last decoded columns as the image's edges, so one more column is decoded on each
 * side of the crop (where the image has one) and at least JPEG_MIN_COLS in all, so
 * that no subsampled component is cut to fewer than 2 samples (which would make
 * libjpeg switch to plain upsampling). jpeg_crop_scanline then moves the left edge
 * down to an iMCU boundary, up to JPEG_MAX_ALIGN(num) - 1 columns further left:
 * the iMCU is max_h_samp_factor (at most 4) times the scaled DCT size (num). */
#define JPEG_MIN_COLS 8u
#define JPEG_MAX_ALIGN(num) (4u * (num))

static void jpeg_columns(const plan *p, uint32_t *left, uint32_t *right)
{
    uint32_t lo = p->l > 0 ? p->l - 1 : 0, hi = p->r < p->sw ? p->r + 1 : p->sw;
    if (hi - lo < JPEG_MIN_COLS) {
        lo = hi > JPEG_MIN_COLS ? hi - JPEG_MIN_COLS : 0;
        hi = p->sw - lo > JPEG_MIN_COLS ? lo + JPEG_MIN_COLS : p->sw; /* min(sw, lo + 8) */
    }
    *left = lo;
    *right = hi;
}

/* Checks the options' limits and the crop and fills *p. Sets info->out_channels. */
static int make_plan(ferry_image_info *info, const ferry_decode_opts *o, const ferry_rect *crop,
                     uint32_t min_w, uint32_t min_h, plan *p)
{
    size_t whole;
    int rc = ferry_image_out_size(info, o, &whole); /* zero sizes, max_pixels, channels */
    if (rc < 0)
        return rc;
    memset(p, 0, sizeof *p);
    p->c = crop ? *crop : (ferry_rect){0, 0, info->width, info->height};
    const ferry_rect *c = &p->c;
    if (c->w == 0 || c->h == 0 || (uint64_t)c->x + c->w > info->width ||
        (uint64_t)c->y + c->h > info->height)
        return ferry__err(FERRY_EINVAL,
                          "image %" PRIu32 "x%" PRIu32 ": crop %" PRIu32 "x%" PRIu32 "+%" PRIu32
                          "+%" PRIu32 " is empty or not inside the image",
                          info->width, info->height, c->w, c->h, c->x, c->y);
    p->num = 8;
    /* CMYK and YCCK (4 components) are converted to RGB by a product after the
     * IDCT, and the product of block averages is not the average of products:
     * reduced, they are 2 to 4 levels off a box filter on average, so they are not. */
    if (info->format == FERRY_IMAGE_JPEG && info->channels != 4 && min_w > 0 && min_h > 0) {
        for (uint32_t num = 1; num < 8; num *= 2) {
            if ((uint64_t)c->w * num >= (uint64_t)min_w * 8 &&
                (uint64_t)c->h * num >= (uint64_t)min_h * 8) {
                p->num = num;
                break;
            }
        }
    }
    p->sw = scale_up(info->width, p->num);
    p->sh = scale_up(info->height, p->num);
    p->l = scale_down(c->x, p->num);
    p->r = scale_up((uint64_t)c->x + c->w, p->num);
    p->t = scale_down(c->y, p->num);
    p->b = scale_up((uint64_t)c->y + c->h, p->num);
    p->whole = p->num == 8 && c->w == info->width && c->h == info->height;
    if (info->format == FERRY_IMAGE_JPEG) {
        uint32_t lo, hi;
        jpeg_columns(p, &lo, &hi);
        uint64_t bw = (uint64_t)(hi - lo) + JPEG_MAX_ALIGN(p->num) - 1;
        p->bw = p->whole ? p->sw : (uint32_t)(bw < p->sw ? bw : p->sw);
    } else {
        p->bw = p->r - p->l;
    }
    p->ch = info->out_channels;
    /* bw <= W and b - t <= H, so this is at most the whole image, which fit */
    p->need = (size_t)p->bw * (p->b - p->t) * (size_t)p->ch;
    return 0;
}

/* The EOVERFLOW message: the whole image's as before, or the crop's. */
static int need_msg(char *buf, size_t len, const ferry_image_info *info, const plan *p,
                    size_t dst_size)
{
    if (p->whole)
        return snprintf(buf, len, "%" PRIu32 "x%" PRIu32 "x%d needs %zu bytes, dst has %zu",
                        info->width, info->height, p->ch, p->need, dst_size);
    return snprintf(buf, len,
                    "crop %" PRIu32 "x%" PRIu32 "+%" PRIu32 "+%" PRIu32 " at scale %" PRIu32
                    "/8 needs %zu bytes (ferry_image_region_size), dst has %zu",
                    p->c.w, p->c.h, p->c.x, p->c.y, p->num, p->need, dst_size);
}

static void fill_region(ferry_image_region *reg, const plan *p, uint32_t width, uint32_t xoff)
{
    double s = p->num / 8.0;
    reg->width = width;
    reg->height = p->b - p->t;
    reg->channels = p->ch;
    reg->stride = (size_t)width * (size_t)p->ch;
    reg->scale_num = p->num;
    reg->x0 = p->c.x * s - xoff;
    reg->y0 = p->c.y * s - p->t;
    reg->x1 = ((double)p->c.x + p->c.w) * s - xoff;
    reg->y1 = ((double)p->c.y + p->c.h) * s - p->t;
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
    const ferry_rect *crop; /* NULL: the whole image */
    uint32_t min_w, min_h;
    unsigned char *dst;
    size_t dst_size;
    int info_only;
    /* outputs */
    ferry_image_info info;
    ferry_image_region region;
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

/* jpeg_crop_scanline in libjpeg-turbo before 3.0 sets a component's downsampled
 * width from its sampling factors alone; with DCT scaling a subsampled component
 * may be scaled less than the others (4x2 and 2x4 factors), and then its upsampler
 * fills only part of the row. Recomputed as 3.0 does; a no-op where it is right. */
static void jpeg_fix_crop_widths(j_decompress_ptr d)
{
#if JPEG_LIB_VERSION >= 70
    uint64_t den = (uint64_t)d->max_h_samp_factor * (uint64_t)d->min_DCT_h_scaled_size;
#else
    uint64_t den = (uint64_t)d->max_h_samp_factor * (uint64_t)d->min_DCT_scaled_size;
#endif
    for (int ci = 0; ci < d->num_components; ci++) {
        jpeg_component_info *c = &d->comp_info[ci];
#if JPEG_LIB_VERSION >= 70
        uint64_t size = (uint64_t)c->DCT_h_scaled_size;
#else
        uint64_t size = (uint64_t)c->DCT_scaled_size;
#endif
        uint64_t w =
            ((uint64_t)d->output_width * (uint64_t)c->h_samp_factor * size + den - 1) / den;
        if (w > c->downsampled_width)
            c->downsampled_width = (JDIMENSION)w;
    }
}

/* Whether libjpeg may smooth blocks in this output pass: a progressive file
 * whose coefficients are not all known (missing or unfinished scans). A superset
 * of libjpeg's smoothing_ok: DC and the first 9 AC coefficients, every component. */
static int jpeg_may_smooth(j_decompress_ptr d)
{
    if (!d->progressive_mode || !d->do_block_smoothing || !d->coef_bits)
        return 0;
    for (int ci = 0; ci < d->num_components; ci++)
        for (int k = 0; k < 10; k++)
            if (d->coef_bits[ci][k] != 0)
                return 1;
    return 0;
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

    plan p;
    int rc = make_plan(&j->info, j->o, j->crop, j->min_w, j->min_h, &p);
    if (rc < 0) {
        ferry__err_copy(j->msg);
        return rc;
    }
    if (p.need > j->dst_size) {
        need_msg(j->msg, sizeof j->msg, &j->info, &p, j->dst_size);
        return FERRY_EOVERFLOW;
    }
    d->scale_num = p.num;
    d->scale_denom = 8;
    jpeg_start_decompress(d);
    size_t ch = (size_t)p.ch;
    if (d->output_width != p.sw || d->output_height != p.sh ||
        (!cmyk && (size_t)d->output_components != ch) || (cmyk && d->output_components != 4)) {
        snprintf(j->msg, sizeof j->msg, "unexpected output geometry %ux%ux%d", d->output_width,
                 d->output_height, d->output_components);
        return FERRY_ECORRUPT;
    }
    /* xoff: the first column libjpeg decodes; x: the first one dst gets */
    JDIMENSION xoff = 0, x = 0;
    uint32_t lo, hi;
    jpeg_columns(&p, &lo, &hi);
    if (!p.whole) {
#if JPEG_LIB_VERSION >= 70
        JDIMENSION align = (JDIMENSION)d->min_DCT_h_scaled_size;
#else
        JDIMENSION align = (JDIMENSION)d->min_DCT_scaled_size;
#endif
        if (d->comps_in_scan != 1 || d->num_components != 1)
            align *= (JDIMENSION)d->max_h_samp_factor;
        /* Block smoothing reads the DC values of the two blocks on either side,
         * and takes the first cropped block column for the image's left edge: two
         * more iMCU columns are decoded on the left, and dropped. */
        JDIMENSION extra = jpeg_may_smooth(d) ? 2 * align : 0;
        xoff = lo > extra ? lo - extra : 0;
        if (xoff > 0 || hi < p.sw) {
            JDIMENSION cw = hi - xoff;
            jpeg_crop_scanline(d, &xoff, &cw);
            jpeg_fix_crop_widths(d);
        }
        x = extra ? lo / align * align : xoff; /* where jpeg_crop_scanline would start */
        if (x < xoff)
            x = xoff;
    }
    size_t w = xoff + d->output_width - x, skip = x - xoff;
    if (x > p.l || x + w < p.r || w > p.bw) {
        snprintf(j->msg, sizeof j->msg,
                 "unexpected crop: columns %u..%zu for %" PRIu32 "..%" PRIu32, x, x + w, p.l, p.r);
        return FERRY_ECORRUPT;
    }
    /* CMYK rows are converted into dst, and rows with dropped columns copied */
    JSAMPROW row = NULL;
    if (cmyk || skip)
        row = (*d->mem->alloc_large)((j_common_ptr)d, JPOOL_IMAGE,
                                     (size_t)d->output_width * (size_t)d->output_components);
    if (p.t > 0 && jpeg_skip_scanlines(d, p.t) != p.t) {
        snprintf(j->msg, sizeof j->msg, "cannot skip %" PRIu32 " rows", p.t);
        return FERRY_ECORRUPT;
    }
    size_t stride = w * ch;
    while (d->output_scanline < p.b) {
        /* several rows per call: libjpeg hands out up to a row group at a time */
        JSAMPROW rows[16];
        JDIMENSION nrows = row ? 1 : p.b - d->output_scanline;
        if (nrows > 16)
            nrows = 16;
        unsigned char *out = j->dst + (size_t)(d->output_scanline - p.t) * stride;
        for (JDIMENSION k = 0; k < nrows; k++)
            rows[k] = row ? row : out + k * stride;
        if (jpeg_read_scanlines(d, rows, nrows) == 0) {
            snprintf(j->msg, sizeof j->msg, "no progress at row %u", d->output_scanline);
            return FERRY_ECORRUPT;
        }
        if (cmyk)
            cmyk_row(row + skip * 4, out, w, d->saw_Adobe_marker, grey);
        else if (row)
            memcpy(out, row + skip * ch, stride);
    }
    /* Reading to the end checks the rest of the file; a crop that stops earlier leaves
     * it unread, and jpeg_destroy_decompress cleans up. */
    if (p.b == d->output_height)
        jpeg_finish_decompress(d);
    fill_region(&j->region, &p, (uint32_t)w, x);
    return 0;
}

static int jpeg_do(const void *buf, size_t n, const ferry_decode_opts *o, const ferry_rect *crop,
                   uint32_t min_w, uint32_t min_h, void *dst, size_t dst_size, int info_only,
                   ferry_image_info *out, ferry_image_region *reg)
{
    struct jctx j; /* on the stack: no allocation here beyond libjpeg's own */
    memset(&j, 0, sizeof j);
    j.buf = buf;
    j.n = n;
    j.o = o;
    j.crop = crop;
    j.min_w = min_w;
    j.min_h = min_h;
    j.dst = dst;
    j.dst_size = dst_size;
    j.info_only = info_only;
    int rc = jpeg_run(&j);
    if (rc < 0) {
        if (j.info.width)
            rc = ferry__err(rc, "jpeg %" PRIu32 "x%" PRIu32 ": %s", j.info.width, j.info.height,
                            j.msg);
        else
            rc = ferry__err(rc, "jpeg: %s", j.msg);
    } else {
        if (out)
            *out = j.info;
        if (reg)
            *reg = j.region;
    }
    if (j.created)
        jpeg_destroy_decompress(&j.cinfo);
    return rc;
}

/* ----------------------------------------------------------------- PNG ---- */

/* Set when one of libspng's allocations fails during this thread's decode: zlib's
 * go through them too, and libspng reports a failed inflate as a damaged stream. */
static _Thread_local int png_alloc_failed;

static int png_rc(int e)
{
    return e == SPNG_EMEM || e == SPNG_EZLIB_INIT || png_alloc_failed ? FERRY_ENOMEM
                                                                      : FERRY_ECORRUPT;
}

static void *png_failed(void *p)
{
    if (!p)
        png_alloc_failed = 1;
    return p;
}

static void *png_malloc(size_t n)
{
    return png_failed(ferry__malloc(n));
}
static void *png_realloc(void *p, size_t n)
{
    return png_failed(ferry__realloc(p, n));
}
static void *png_calloc(size_t a, size_t b)
{
    return png_failed(ferry__calloc(a, b));
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

/* One row of RGBA8 pixels to the output channels. */
static void png_row(const unsigned char *s, unsigned char *d, size_t w, int grey, int src_grey,
                    int alpha)
{
    for (size_t i = 0; i < w; i++, s += 4) {
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
}

static int png_do(const void *buf, size_t n, const ferry_decode_opts *o, const ferry_rect *crop,
                  void *dst, size_t dst_size, int info_only, ferry_image_info *out,
                  ferry_image_region *reg)
{
    if (!info_only && n >= 8) {
        int crc_rc = png_check_chunks(buf, n);
        if (crc_rc < 0)
            return crc_rc;
    }
    struct spng_alloc alloc = {png_malloc, png_realloc, png_calloc, png_free};
    png_alloc_failed = 0;
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

    plan p;
    FERRY_TRY(make_plan(&info, o, crop, 0, 0, &p));
    if (p.need > dst_size) {
        char msg[FERRY_ERRMSG_MAX];
        need_msg(msg, sizeof msg, &info, &p, dst_size);
        FERRY_FAIL(FERRY_EOVERFLOW, "png %" PRIu32 "x%" PRIu32 ": %s", info.width, info.height,
                   msg);
    }
    /* RGBA8 covers every colour type and depth; the pixel count is bounded by
     * max_pixels above, so this cannot overflow where need did not. */
    size_t img_size, row_size = (size_t)info.width * 4, w = p.r - p.l;
    if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &img_size)) != 0)
        FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": %s", info.width, info.height,
                   spng_strerror(e));
    int grey = o && o->grey, alpha = p.ch == 2 || p.ch == 4, src_grey = info.channels <= 2;
    unsigned char *d = dst;
    size_t stride = w * (size_t)p.ch;
    if (ih.interlace_method) {
        /* Adam7 spreads every row over seven passes: decode it all, keep the crop */
        tmp = ferry__malloc(img_size);
        if (!tmp)
            FERRY_FAIL(FERRY_ENOMEM, "png %" PRIu32 "x%" PRIu32 ": out of memory for %zu bytes",
                       info.width, info.height, img_size);
        if ((e = spng_decode_image(ctx, tmp, img_size, SPNG_FMT_RGBA8, SPNG_DECODE_TRNS)) != 0)
            FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": image data: %s", info.width,
                       info.height, spng_strerror(e));
        for (uint32_t y = p.t; y < p.b; y++)
            png_row(tmp + y * row_size + (size_t)p.l * 4, d + (y - p.t) * stride, w, grey, src_grey,
                    alpha);
    } else {
        /* row by row, stopping after the crop's last row */
        tmp = ferry__malloc(row_size);
        if (!tmp)
            FERRY_FAIL(FERRY_ENOMEM, "png %" PRIu32 "x%" PRIu32 ": out of memory for %zu bytes",
                       info.width, info.height, row_size);
        if ((e = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGBA8,
                                   SPNG_DECODE_TRNS | SPNG_DECODE_PROGRESSIVE)) != 0)
            FERRY_FAIL(png_rc(e), "png %" PRIu32 "x%" PRIu32 ": image data: %s", info.width,
                       info.height, spng_strerror(e));
        for (uint32_t y = 0; y < p.b; y++) {
            /* SPNG_EOI comes with the last row */
            e = spng_decode_row(ctx, tmp, row_size);
            if (e != 0 && !(e == SPNG_EOI && y + 1 == info.height))
                FERRY_FAIL(png_rc(e),
                           "png %" PRIu32 "x%" PRIu32 ": image data, row %" PRIu32 ": %s",
                           info.width, info.height, y, spng_strerror(e));
            if (y >= p.t)
                png_row(tmp + (size_t)p.l * 4, d + (y - p.t) * stride, w, grey, src_grey, alpha);
        }
    }
    if (reg)
        fill_region(reg, &p, (uint32_t)w, p.l);
done:
    if (out)
        *out = info;
cleanup:
    ferry__free(tmp);
    spng_ctx_free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- API ---- */

static int check_args(const char *fn, const void *buf, size_t n, const ferry_decode_opts *o,
                      const void *dst, size_t dst_size)
{
    if ((!buf && n) || (!dst && dst_size))
        return ferry__err(FERRY_EINVAL, "%s: NULL buffer with a non-zero size", fn);
    if (o && (o->grey < 0 || o->grey > 1 || o->keep_alpha < 0 || o->keep_alpha > 1 ||
              o->lenient < 0 || o->lenient > 1))
        return ferry__err(FERRY_EINVAL, "%s: grey, keep_alpha and lenient must be 0 or 1", fn);
    return 0;
}

int ferry_image_info_get(const void *buf, size_t n, ferry_image_info *out)
{
    if ((!buf && n) || !out)
        return ferry__err(FERRY_EINVAL, "ferry_image_info_get: buf and out must not be NULL");
    memset(out, 0, sizeof *out);
    switch (sniff(buf, n)) {
    case FERRY_IMAGE_JPEG:
        return jpeg_do(buf, n, NULL, NULL, 0, 0, NULL, 0, 1, out, NULL);
    case FERRY_IMAGE_PNG:
        return png_do(buf, n, NULL, NULL, NULL, 0, 1, out, NULL);
    default:
        return unknown_format(buf, n);
    }
}

/* Both decode entry points: the whole image (crop NULL, no scaling) or a region. */
static int decode_any(const char *fn, const void *buf, size_t n, const ferry_decode_opts *o,
                      const ferry_rect *crop, uint32_t min_w, uint32_t min_h, void *dst,
                      size_t dst_size, ferry_image_info *info, ferry_image_region *region)
{
    int rc = check_args(fn, buf, n, o, dst, dst_size);
    if (rc < 0)
        return rc;
    if (info)
        memset(info, 0, sizeof *info);
    if (region)
        memset(region, 0, sizeof *region);
    switch (sniff(buf, n)) {
    case FERRY_IMAGE_JPEG:
        return jpeg_do(buf, n, o, crop, min_w, min_h, dst, dst_size, 0, info, region);
    case FERRY_IMAGE_PNG:
        return png_do(buf, n, o, crop, dst, dst_size, 0, info, region);
    default:
        return unknown_format(buf, n);
    }
}

int ferry_image_decode(const void *buf, size_t n, const ferry_decode_opts *o, void *dst,
                       size_t dst_size, ferry_image_info *out)
{
    return decode_any("ferry_image_decode", buf, n, o, NULL, 0, 0, dst, dst_size, out, NULL);
}

int ferry_image_region_size(const ferry_image_info *info, const ferry_decode_opts *o,
                            const ferry_rect *crop, uint32_t min_w, uint32_t min_h, size_t *size)
{
    if (!info || !size)
        return ferry__err(FERRY_EINVAL, "ferry_image_region_size: info and size must not be NULL");
    if (info->format != FERRY_IMAGE_JPEG && info->format != FERRY_IMAGE_PNG)
        return ferry__err(FERRY_EINVAL,
                          "ferry_image_region_size: info->format %d is not JPEG or PNG",
                          (int)info->format);
    ferry_image_info i = *info;
    plan p;
    int rc = make_plan(&i, o, crop, min_w, min_h, &p);
    if (rc < 0)
        return rc;
    *size = p.need;
    return 0;
}

int ferry_image_decode_region(const void *buf, size_t n, const ferry_decode_opts *o,
                              const ferry_rect *crop, uint32_t min_w, uint32_t min_h, void *dst,
                              size_t dst_size, ferry_image_region *out)
{
    return decode_any("ferry_image_decode_region", buf, n, o, crop, min_w, min_h, dst, dst_size,
                      NULL, out);
}
