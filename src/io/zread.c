/*
 * Sequential, possibly compressed reads. Reading is pread at a tracked offset
 * (the file layer's rule); decoding runs straight into the caller's buffer.
 */
#include "zread.h"

#include <fcntl.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define IN_CAP ((size_t)64 << 10)
#define ZSTD_WINDOW_LOG_MAX 27 /* 128 MiB, zstd's own default limit */

enum { PLAIN = 0, GZIP, ZSTD };

const char *ferry__compression_of(const void *head, size_t n)
{
    const unsigned char *b = head;
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        return "gzip";
    if (n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd)
        return "zstd";
    if (n >= 6 && !memcmp(b,
                          "\xfd"
                          "7zXZ\0",
                          6))
        return "xz";
    if (n >= 4 && b[0] == 'B' && b[1] == 'Z' && b[2] == 'h' && b[3] >= '1' && b[3] <= '9')
        return "bzip2";
    if (n >= 4 && b[0] == 0x04 && b[1] == 0x22 && b[2] == 0x4d && b[3] == 0x18)
        return "lz4";
    if (n >= 4 && !memcmp(b, "PK\x03\x04", 4))
        return "zip";
    return NULL;
}

const char *ferry__decompress_command(const char *c)
{
    if (!strcmp(c, "gzip"))
        return "gunzip -k";
    if (!strcmp(c, "zstd"))
        return "unzstd";
    if (!strcmp(c, "xz"))
        return "unxz -k";
    if (!strcmp(c, "bzip2"))
        return "bunzip2 -k";
    if (!strcmp(c, "lz4"))
        return "unlz4";
    return "unzip";
}

int ferry__refuse_compressed(const char *path, const char *what)
{
    ferry__file f = {.fd = -1};
    unsigned char head[8];
    size_t got = 0;
    if (ferry__file_open(&f, path) < 0) {
        ferry__err_clear();
        return 0;
    }
    int rc = ferry__file_pread(&f, path, head, sizeof head, 0, &got);
    ferry__file_close(&f);
    if (rc < 0) {
        ferry__err_clear();
        return 0;
    }
    const char *c = ferry__compression_of(head, got);
    if (!c)
        return 0;
    return ferry__err(FERRY_ENOTSUP,
                      "%s: the file is %s-compressed, and %s needs the plain text: decompress it "
                      "first (%s %s) and use that file",
                      path, c, what, ferry__decompress_command(c), path);
}

void ferry__zread_close(ferry__zread *r)
{
    if (r->open)
        ferry__file_close(&r->f);
    r->open = false;
}

void ferry__zread_free(ferry__zread *r)
{
    ferry__zread_close(r);
    if (r->zs) {
        inflateEnd(r->zs);
        ferry__free(r->zs);
    }
    ZSTD_freeDStream(r->zd);
    ferry__free(r->in);
    memset(r, 0, sizeof *r);
}

int ferry__zread_open(ferry__zread *r, const char *path)
{
    int rc = 0;
    ferry__zread_close(r);
    r->path = path;
    r->codec = PLAIN;
    r->off = 0;
    r->pos = 0;
    r->broken = r->done = false;
    r->err_rc = 0;
    r->err_msg[0] = 0;
    r->in_pos = r->in_len = 0;
    r->in_eof = false;
    r->member_end = false;
    r->zret = 0;
    r->f.fd = -1;
    FERRY_TRY(ferry__file_open(&r->f, path));
    r->open = true;
    (void)posix_fadvise(r->f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    unsigned char head[8];
    size_t got;
    FERRY_TRY(ferry__file_pread(&r->f, path, head, sizeof head, 0, &got));
    const char *c = ferry__compression_of(head, got);
    if (!c)
        return 0;
    if (strcmp(c, "gzip") && strcmp(c, "zstd"))
        FERRY_FAIL(FERRY_ENOTSUP,
                   "%s: the file is %s-compressed, which ferry does not decode: decompress it "
                   "(%s %s), or compress it with gzip or zstd",
                   path, c, ferry__decompress_command(c), path);
    if (!r->in && !(r->in = ferry__malloc(IN_CAP)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a %s input buffer", path, c);
    if (!strcmp(c, "gzip")) {
        if (!r->zs) {
            r->zs = ferry__calloc(1, sizeof *r->zs);
            if (!r->zs)
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a gzip decoder", path);
            /* 15 + 16: a gzip header and trailer, the largest window */
            if (inflateInit2(r->zs, 15 + 16) != Z_OK) {
                ferry__free(r->zs);
                r->zs = NULL;
                FERRY_FAIL(FERRY_ENOMEM, "%s: cannot set up a gzip decoder", path);
            }
        } else if (inflateReset(r->zs) != Z_OK) {
            FERRY_FAIL(FERRY_ENOMEM, "%s: cannot reset the gzip decoder", path);
        }
        r->codec = GZIP;
    } else {
        if (!r->zd) {
            r->zd = ZSTD_createDStream();
            if (!r->zd || ZSTD_isError(ZSTD_DCtx_setParameter(r->zd, ZSTD_d_windowLogMax,
                                                              ZSTD_WINDOW_LOG_MAX)))
                FERRY_FAIL(FERRY_ENOMEM, "%s: cannot set up a zstd decoder", path);
        } else {
            ZSTD_DCtx_reset(r->zd, ZSTD_reset_session_only);
        }
        r->codec = ZSTD;
    }
    return 0;
cleanup:
    ferry__zread_close(r);
    return rc;
}

const char *ferry__zread_compression(const ferry__zread *r)
{
    return r->codec == GZIP ? "gzip" : r->codec == ZSTD ? "zstd" : NULL;
}

/* More compressed input, when what there is has been used. */
static int refill(ferry__zread *r)
{
    if (r->in_pos < r->in_len || r->in_eof)
        return 0;
    size_t got;
    int rc = ferry__file_pread(&r->f, r->path, r->in, IN_CAP, r->off, &got);
    if (rc < 0)
        return rc;
    r->off += got;
    r->in_pos = 0;
    r->in_len = got;
    r->in_eof = got < IN_CAP;
    return 0;
}

static int read_gzip(ferry__zread *r, uint8_t *dst, size_t want, size_t *got)
{
    size_t n = 0;
    while (n < want) {
        *got = n; /* what an error leaves decoded */
        int rc = refill(r);
        if (rc < 0)
            return rc;
        /* No more input: the end after a whole member; else the decoder may still
         * hold output (a match cut short by a full buffer), and once it has none
         * the stream was cut short. */
        bool drain = r->in_pos == r->in_len;
        if (drain && r->member_end) {
            r->done = true;
            break;
        }
        if (r->member_end) { /* another member follows: gzip files concatenate */
            if (inflateReset(r->zs) != Z_OK)
                return ferry__err(FERRY_ECORRUPT, "%s: cannot restart the gzip decoder", r->path);
            r->member_end = false;
        }
        r->zs->next_in = r->in + r->in_pos;
        r->zs->avail_in = (uInt)(r->in_len - r->in_pos);
        r->zs->next_out = dst + n;
        size_t room = want - n > UINT32_MAX ? UINT32_MAX : want - n;
        r->zs->avail_out = (uInt)room;
        int z = inflate(r->zs, Z_NO_FLUSH);
        uint64_t at = r->off - (r->in_len - r->in_pos);
        r->in_pos = r->in_len - r->zs->avail_in;
        n += room - r->zs->avail_out;
        *got = n;
        if (drain && room == r->zs->avail_out && z != Z_STREAM_END)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: the gzip stream ends early (truncated at offset %llu)", r->path,
                              (unsigned long long)r->off);
        if (z == Z_STREAM_END)
            r->member_end = true;
        else if (z == Z_MEM_ERROR)
            return ferry__err(FERRY_ENOMEM, "%s: out of memory decoding gzip", r->path);
        else if (z != Z_OK && z != Z_BUF_ERROR)
            return ferry__err(FERRY_ECORRUPT, "%s: damaged gzip data near offset %llu: %s", r->path,
                              (unsigned long long)at, r->zs->msg ? r->zs->msg : "inflate failed");
    }
    *got = n;
    return 0;
}

static int read_zstd(ferry__zread *r, uint8_t *dst, size_t want, size_t *got)
{
    size_t n = 0;
    while (n < want) {
        *got = n; /* what an error leaves decoded */
        int rc = refill(r);
        if (rc < 0)
            return rc;
        if (r->in_pos == r->in_len && r->zret == 0 && r->in_eof) {
            r->done = true;
            break;
        }
        ZSTD_inBuffer in = {r->in, r->in_len, r->in_pos};
        ZSTD_outBuffer o = {dst + n, want - n, 0};
        uint64_t at = r->off - (r->in_len - r->in_pos);
        size_t z = ZSTD_decompressStream(r->zd, &o, &in);
        if (ZSTD_isError(z))
            return ferry__err(FERRY_ECORRUPT, "%s: damaged zstd data near offset %llu: %s", r->path,
                              (unsigned long long)at, ZSTD_getErrorName(z));
        r->zret = z;
        r->in_pos = in.pos;
        n += o.pos;
        *got = n;
        if (o.pos == 0 && in.pos == in.size && r->in_eof && z != 0)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: the zstd stream ends early (truncated at offset %llu)", r->path,
                              (unsigned long long)r->off);
    }
    *got = n;
    return 0;
}

int ferry__zread_read(ferry__zread *r, void *dst, size_t want, size_t *got)
{
    *got = 0;
    if (r->broken)
        return ferry__err(r->err_rc ? r->err_rc : FERRY_EIO, "%s",
                          r->err_msg[0] ? r->err_msg : "read after an error");
    if (r->done || want == 0)
        return 0;
    int rc;
    if (r->codec == PLAIN) {
        rc = ferry__file_pread(&r->f, r->path, dst, want, r->off, got);
        if (rc == 0) {
            r->off += *got;
            r->done = *got < want;
        }
    } else if (r->codec == GZIP) {
        rc = read_gzip(r, dst, want, got);
    } else {
        rc = read_zstd(r, dst, want, got);
    }
    if (rc < 0) {
        /* the bytes decoded before the error go out first; the error comes next */
        r->broken = true;
        r->err_rc = rc;
        ferry__err_copy(r->err_msg);
        r->pos += *got;
        if (*got > 0)
            return 0;
        return rc;
    }
    r->pos += *got;
    return rc;
}

int ferry__zread_seek(ferry__zread *r, uint64_t off)
{
    int rc;
    if (r->broken || (r->codec != PLAIN && off < r->pos)) {
        /* path is the caller's, borrowed until the reading ends: open keeps it */
        if ((rc = ferry__zread_open(r, r->path)) < 0)
            return rc;
    }
    if (r->codec == PLAIN) {
        r->off = r->pos = off;
        r->done = false;
        return 0;
    }
    uint8_t drop[16384];
    while (r->pos < off && !r->done) {
        uint64_t left = off - r->pos;
        size_t got;
        if ((rc = ferry__zread_read(r, drop, left < sizeof drop ? (size_t)left : sizeof drop,
                                    &got)) < 0)
            return rc;
        if (got == 0 && !r->broken)
            break;
    }
    return 0;
}
