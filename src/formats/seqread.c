/*
 * Sequential reading of a file as it is or through zlib's gzip inflate.
 */
#include "seqread.h"

#include <string.h>

#define GZ_IN_BYTES ((size_t)256 << 10)

int ferry__seqread_open(ferry__seqread *r, const char *path, const char *name, int compression,
                        size_t window)
{
    int rc = 0;
    memset(r, 0, sizeof *r);
    r->f.fd = -1;
    r->name = name;
    if (window < 4096)
        window = 4096;
    FERRY_TRY(ferry__file_open(&r->f, path));
    r->gzip = compression == FERRY__GZ_GZIP;
    if (compression == FERRY__GZ_AUTO) {
        uint8_t magic[2];
        size_t got;
        FERRY_TRY(ferry__file_pread(&r->f, name, magic, 2, 0, &got));
        r->gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    }
    if (r->gzip && window < ((size_t)256 << 10))
        window = (size_t)256 << 10; /* each inflate call fills what it can of it */
    if (!(r->buf = ferry__malloc(window)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a %zu-byte read window", name, window);
    r->cap = window;
    if (r->gzip) {
        if (!(r->in = ferry__malloc(GZ_IN_BYTES)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", name);
        r->in_cap = GZ_IN_BYTES;
#ifdef FERRY_HAVE_ISAL
        if (!(r->isal = ferry__malloc(sizeof *r->isal)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", name);
        isal_inflate_init(r->isal);
        r->isal->crc_flag = ISAL_GZIP; /* the gzip header parsed, the trailer checked */
#else
        /* 15 + 16: gzip wrapper only, so a plain zlib stream is refused */
        if (inflateInit2(&r->z, 15 + 16) != Z_OK)
            FERRY_FAIL(FERRY_ENOMEM, "%s: zlib could not start an inflater", name);
        r->z_live = true;
#endif
    }
    return 0;
cleanup:
    ferry__seqread_close(r);
    return rc;
}

void ferry__seqread_close(ferry__seqread *r)
{
    if (r->z_live)
        inflateEnd(&r->z);
    r->z_live = false;
#ifdef FERRY_HAVE_ISAL
    ferry__free(r->isal);
    r->isal = NULL;
#endif
    ferry__file_close(&r->f);
    ferry__free(r->buf);
    ferry__free(r->in);
    r->buf = r->in = NULL;
}

/* Input for the inflater: more of the file when what it has is used up. At the
 * end of the file, *got is 0. */
static int more_input(ferry__seqread *r, uint8_t **next_in, size_t *avail_in, size_t *got)
{
    *got = *avail_in;
    if (*avail_in > 0 || r->file_off >= r->f.size)
        return 0;
    int rc = ferry__file_pread(&r->f, r->name, r->in, r->in_cap, r->file_off, got);
    if (rc < 0)
        return rc;
    if (*got == 0)
        return ferry__err(FERRY_EIO, "%s: the file shrank while it was read", r->name);
    r->file_off += *got;
    *next_in = r->in;
    *avail_in = *got;
    return 0;
}

/* After a gzip member: 1 when another member follows (concatenated gzip
 * files), 0 at the end of the file (eof set), or an error for other bytes. It
 * runs when more output is wanted, not when the member ends, so the output
 * before bad trailing bytes is handed out first. */
static int next_member(ferry__seqread *r, uint8_t **next_in, size_t *avail_in)
{
    size_t got;
    int rc = more_input(r, next_in, avail_in, &got);
    if (rc < 0)
        return rc;
    if (got == 0) {
        r->eof = true;
        return 0;
    }
    if ((*next_in)[0] != 0x1f)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: bytes that are not gzip after the gzip stream, at file offset %llu",
                          r->name, (unsigned long long)(r->file_off - *avail_in));
    return 1;
}

static int ends_early(const ferry__seqread *r)
{
    return ferry__err(FERRY_ECORRUPT,
                      "%s: the gzip stream ends early, at file offset %llu (truncated?)", r->name,
                      (unsigned long long)r->file_off);
}

#ifndef FERRY_HAVE_ISAL
/* Inflates into buf[end..cap) until at least `want` bytes are there (each call
 * fills what the input at hand gives); sets eof after the last member. */
static int gz_fill(ferry__seqread *r, size_t want)
{
    int rc;
    while (r->end < want && !r->eof) {
        uint8_t *next_in = r->z.next_in;
        size_t avail_in = r->z.avail_in, got;
        if (r->member_end) {
            if ((rc = next_member(r, &next_in, &avail_in)) <= 0)
                return rc;
            inflateReset(&r->z);
            r->member_end = false;
        } else if ((rc = more_input(r, &next_in, &avail_in, &got)) < 0) {
            return rc;
        } else if (got == 0) {
            return ends_early(r);
        }
        r->z.next_in = next_in;
        r->z.avail_in = (uInt)avail_in;
        r->z.next_out = r->buf + r->end;
        r->z.avail_out = (uInt)(r->cap - r->end);
        int zr = inflate(&r->z, Z_NO_FLUSH);
        r->end = r->cap - r->z.avail_out;
        if (zr == Z_STREAM_END)
            r->member_end = true;
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            return ferry__err(FERRY_ECORRUPT, "%s: bad gzip data near file offset %llu: %s",
                              r->name, (unsigned long long)(r->file_off - r->z.avail_in),
                              r->z.msg ? r->z.msg : "inflate failed");
    }
    return 0;
}
#endif

#ifdef FERRY_HAVE_ISAL
static const char *isal_why(int code)
{
    switch (code) {
    case ISAL_INVALID_BLOCK:
        return "invalid deflate block";
    case ISAL_INVALID_SYMBOL:
        return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK:
        return "invalid back-reference distance";
    case ISAL_INVALID_WRAPPER:
        return "invalid gzip header";
    case ISAL_UNSUPPORTED_METHOD:
        return "unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM:
        return "incorrect data check (the gzip CRC-32 or length)";
    default:
        return "inflate failed";
    }
}

/* As gz_fill, with igzip. */
static int isal_fill(ferry__seqread *r, size_t want)
{
    struct inflate_state *st = r->isal;
    int rc;
    while (r->end < want && !r->eof) {
        uint8_t *next_in = st->next_in;
        size_t avail_in = st->avail_in, got;
        if (r->member_end) {
            if ((rc = next_member(r, &next_in, &avail_in)) <= 0)
                return rc;
            isal_inflate_reset(st);
            st->crc_flag = ISAL_GZIP;
            r->member_end = false;
        } else if ((rc = more_input(r, &next_in, &avail_in, &got)) < 0) {
            return rc;
        } else if (got == 0) {
            return ends_early(r);
        }
        st->next_in = next_in;
        st->avail_in = (uint32_t)avail_in;
        st->next_out = r->buf + r->end;
        st->avail_out = (uint32_t)(r->cap - r->end);
        int code = isal_inflate(st);
        r->end = r->cap - st->avail_out;
        if (code < 0)
            return ferry__err(FERRY_ECORRUPT, "%s: bad gzip data near file offset %llu: %s",
                              r->name, (unsigned long long)(r->file_off - st->avail_in),
                              isal_why(code));
        if (st->block_state == ISAL_BLOCK_FINISH)
            r->member_end = true;
    }
    return 0;
}
#endif

int ferry__seqread_need(ferry__seqread *r, size_t n, size_t *avail)
{
    int rc;
    if (r->end - r->pos >= n || r->eof) {
        *avail = r->end - r->pos < n ? r->end - r->pos : n;
        return 0;
    }
    if (n > r->cap) {
        uint8_t *grown = ferry__malloc(n);
        if (!grown)
            return ferry__err(FERRY_ENOMEM, "%s: out of memory for a %zu-byte record", r->name, n);
        memcpy(grown, r->buf + r->pos, r->end - r->pos);
        ferry__free(r->buf);
        r->buf = grown;
        r->cap = n;
        r->end -= r->pos;
        r->pos = 0;
    } else if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
    }
    if (r->gzip) {
#ifdef FERRY_HAVE_ISAL
        if ((rc = isal_fill(r, n)) < 0)
            return rc;
#else
        if ((rc = gz_fill(r, n)) < 0)
            return rc;
#endif
    } else {
        while (r->end < n && !r->eof) {
            size_t got;
            if ((rc = ferry__file_pread(&r->f, r->name, r->buf + r->end, r->cap - r->end,
                                        r->file_off, &got)) < 0)
                return rc;
            r->file_off += got;
            r->end += got;
            if (got == 0 || r->file_off >= r->f.size)
                r->eof = true;
        }
    }
    *avail = r->end - r->pos < n ? r->end - r->pos : n;
    return 0;
}

int ferry__seqread_skip(ferry__seqread *r, uint64_t n, uint64_t *skipped)
{
    uint64_t done = 0;
    size_t have = r->end - r->pos;
    if (n <= have) {
        r->pos += (size_t)n;
        r->off += n;
        *skipped = n;
        return 0;
    }
    done = have;
    r->pos = r->end = 0;
    if (!r->gzip) {
        /* past the window: move the file offset instead of reading */
        uint64_t left = r->f.size > r->file_off ? r->f.size - r->file_off : 0;
        uint64_t step = n - done < left ? n - done : left;
        r->file_off += step;
        done += step;
        if (r->file_off >= r->f.size)
            r->eof = true;
    } else {
        while (done < n) {
            size_t want = n - done < r->cap ? (size_t)(n - done) : r->cap, got;
            int rc = ferry__seqread_need(r, want, &got);
            if (rc < 0)
                return rc;
            if (got == 0)
                break;
            r->pos += got;
            done += got;
        }
    }
    r->off += done;
    *skipped = done;
    return 0;
}

int ferry__seqread_read(ferry__seqread *r, void *dst, size_t n, size_t *got)
{
    uint8_t *d = dst;
    size_t done = 0, have;
    int rc;
    *got = 0;
    if (!r->gzip && n - (r->end - r->pos < n ? r->end - r->pos : n) >= (r->cap >> 2)) {
        /* much more than the window holds: the rest straight from the file */
        have = r->end - r->pos < n ? r->end - r->pos : n;
        memcpy(d, r->buf + r->pos, have);
        r->pos += have;
        r->off += have;
        done = have;
        if (r->pos == r->end) {
            size_t k;
            if ((rc = ferry__file_pread(&r->f, r->name, d + done, n - done, r->file_off, &k)) < 0)
                return rc;
            r->file_off += k;
            r->off += k;
            done += k;
            r->pos = r->end = 0;
            if (r->file_off >= r->f.size)
                r->eof = true;
        }
        *got = done;
        return 0;
    }
    while (done < n) {
        size_t want = n - done < r->cap ? n - done : r->cap;
        if ((rc = ferry__seqread_need(r, want, &have)) < 0)
            return rc;
        if (have == 0)
            break;
        memcpy(d + done, r->buf + r->pos, have);
        r->pos += have;
        r->off += have;
        done += have;
    }
    *got = done;
    return 0;
}

int ferry__seqread_seek(ferry__seqread *r, uint64_t off, uint64_t *at)
{
    uint64_t skipped;
    int rc;
    if (off < r->off) {
        uint64_t back = r->off - off;
        if (back <= r->pos) {
            /* still in the window */
            r->pos -= (size_t)back;
            r->off = off;
            *at = off;
            return 0;
        }
        r->pos = r->end = 0;
        if (!r->gzip) {
            r->file_off = r->off = off;
            r->eof = off >= r->f.size;
            *at = off;
            return 0;
        }
        /* gzip: decode again from the start */
        r->file_off = r->off = 0;
        r->eof = r->member_end = false;
#ifdef FERRY_HAVE_ISAL
        isal_inflate_reset(r->isal);
        r->isal->crc_flag = ISAL_GZIP;
        r->isal->avail_in = 0;
#else
        inflateReset(&r->z);
        r->z.avail_in = 0;
#endif
    }
    if ((rc = ferry__seqread_skip(r, off - r->off, &skipped)) < 0)
        return rc;
    *at = r->off;
    return 0;
}
