/*
 * JPEG encoding with libjpeg-turbo, into a caller's buffer.
 *
 * The destination manager writes into dst and fails (never reallocates) when it
 * is full, so memory is what the caller gave. libjpeg's error_exit longjmps back
 * here, as in the decoder; everything that must survive the jump lives in struct
 * ectx, not in locals of the function that calls setjmp.
 */
#include "ferry/image.h"
#include "../core/internal.h"

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

struct ectx {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_destination_mgr dest;
    jmp_buf jump;
    int created;
    int full; /* the destination ran out of room */
    char msg[FERRY_ERRMSG_MAX];
};

static void enc_fail(j_common_ptr c)
{
    struct ectx *e = (struct ectx *)c->client_data;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static void enc_message(j_common_ptr c, int level)
{
    (void)c;
    (void)level; /* the encoder's warnings lose nothing: say nothing */
}

static void dest_init(j_compress_ptr c)
{
    (void)c;
}

static boolean dest_empty(j_compress_ptr c)
{
    struct ectx *e = (struct ectx *)c->client_data;
    e->full = 1;
    snprintf(e->msg, sizeof e->msg, "output buffer full");
    longjmp(e->jump, 1);
    return FALSE;
}

static void dest_term(j_compress_ptr c)
{
    (void)c;
}

size_t ferry_image_jpeg_bound(uint32_t width, uint32_t height, int channels)
{
    /* libjpeg-turbo's tjBufSize for 4:4:4 (the largest): 16x16 MCUs, at most 6
     * bytes a pixel for three components (a coefficient of 16 bits, Huffman coded,
     * cannot take more), plus the headers; grey is a third of that */
    uint64_t w = ((uint64_t)width + 15) & ~(uint64_t)15,
             h = ((uint64_t)height + 15) & ~(uint64_t)15;
    uint64_t per = channels == 1 ? 2 : 6, n = w * h * per + 2048;
    return n > SIZE_MAX ? 0 : (size_t)n;
}

static int encode_run(struct ectx *e, const uint8_t *px, uint32_t w, uint32_t h, size_t stride,
                      int ch, int quality, void *dst, size_t dst_size, size_t *written)
{
    j_compress_ptr c = &e->cinfo;
    if (setjmp(e->jump))
        return e->full ? FERRY_EOVERFLOW : FERRY_ENOMEM;
    c->err = jpeg_std_error(&e->jerr);
    e->jerr.error_exit = enc_fail;
    e->jerr.emit_message = enc_message;
    c->client_data = e;
    jpeg_create_compress(c);
    c->client_data = e;
    e->created = 1;
    e->dest.init_destination = dest_init;
    e->dest.empty_output_buffer = dest_empty;
    e->dest.term_destination = dest_term;
    e->dest.next_output_byte = dst;
    e->dest.free_in_buffer = dst_size;
    c->dest = &e->dest;
    c->image_width = w;
    c->image_height = h;
    c->input_components = ch;
    c->in_color_space = ch == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(c); /* 4:2:0 for colour, islow DCT, standard Huffman tables */
    jpeg_set_quality(c, quality, TRUE);
    jpeg_start_compress(c, TRUE);
    while (c->next_scanline < c->image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c->next_scanline * stride);
        jpeg_write_scanlines(c, &row, 1);
    }
    jpeg_finish_compress(c);
    *written = dst_size - e->dest.free_in_buffer;
    return 0;
}

int ferry_image_encode_jpeg(const uint8_t *px, uint32_t width, uint32_t height, size_t stride,
                            int channels, int quality, void *dst, size_t dst_size, size_t *written)
{
    if (!px || !dst || !written)
        return ferry__err(FERRY_EINVAL, "jpeg encode: px, dst and written must not be NULL");
    if (channels != 1 && channels != 3)
        return ferry__err(FERRY_EINVAL, "jpeg encode: channels must be 1 or 3, not %d", channels);
    if (width < 1 || height < 1 || width > 65500 || height > 65500)
        return ferry__err(FERRY_EINVAL, "jpeg encode: %ux%u is outside 1..65500", width, height);
    if (stride < (size_t)width * (size_t)channels)
        return ferry__err(FERRY_EINVAL, "jpeg encode: stride %zu is less than a row", stride);
    if (quality < 1 || quality > 100)
        return ferry__err(FERRY_EINVAL, "jpeg encode: quality %d is outside 1..100", quality);
    *written = 0;
    struct ectx *e = ferry__calloc(1, sizeof *e);
    if (!e)
        return ferry__err(FERRY_ENOMEM, "jpeg encode: out of memory");
    int rc = encode_run(e, px, width, height, stride, channels, quality, dst, dst_size, written);
    if (e->created)
        jpeg_destroy_compress(&e->cinfo);
    if (rc < 0)
        rc = ferry__err(rc, "jpeg: encoding %ux%u: %s%s", width, height, e->msg,
                        rc == FERRY_EOVERFLOW ? " (dst is smaller than ferry_image_jpeg_bound)"
                                              : "");
    ferry__free(e);
    return rc;
}
