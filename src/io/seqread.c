/*
 * The sequential reader: a byte source, a decoder (none, gzip or zstd) and a
 * window. The decoders write wherever they are told: into the window, or straight
 * into a caller's buffer when a read wants more than the window holds.
 */
#include "seqread.h"

#include <fcntl.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#ifdef FERRY_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#define IN_BYTES ((size_t)64 << 10)
#define MIN_WINDOW ((size_t)4 << 10)
#define MIN_WINDOW_DECODED ((size_t)64 << 10) /* each decoder call fills what it can */
#define ZSTD_WINDOW_LOG_MAX 27                /* 128 MiB, zstd's own default limit */

enum { PLAIN = 0, GZIP, ZSTD };

/* ---- The file source ---- */

static int file_read_at(ferry__seqread *r, void *buf, size_t n, uint64_t off, size_t *got)
{
    return ferry__file_pread(&r->f, r->name, buf, n, off, got);
}

static void file_close(ferry__seqread *r)
{
    ferry__file_close(&r->f);
}

static const ferry__seqsrc file_source = {file_read_at, file_close};

/* ---- Compression by magic bytes ---- */

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

/* What to run to get the plain file back, for messages. */
static const char *decompress_command(const char *c)
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
                      path, c, what, decompress_command(c), path);
}

/* ---- The decoders: start, restart, free, and one call ---- */

static void decoder_reset(ferry__seqread *r);

static int decoder_start(ferry__seqread *r)
{
    if (r->codec == ZSTD) {
        ZSTD_DStream *z = ZSTD_createDStream();
        r->dec = z;
        if (!z || ZSTD_isError(ZSTD_DCtx_setParameter(z, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX)))
            return ferry__err(FERRY_ENOMEM, "%s: cannot set up a zstd decoder", r->name);
        return 0;
    }
#ifdef FERRY_HAVE_ISAL
    if (!(r->dec = ferry__malloc(sizeof(struct inflate_state))))
        return ferry__err(FERRY_ENOMEM, "%s: out of memory for a gzip decoder", r->name);
    decoder_reset(r);
#else
    z_stream *z = ferry__calloc(1, sizeof *z);
    if (!(r->dec = z))
        return ferry__err(FERRY_ENOMEM, "%s: out of memory for a gzip decoder", r->name);
    /* 15 + 16: gzip wrapper only, so a plain zlib stream is refused */
    if (inflateInit2(z, 15 + 16) != Z_OK) {
        ferry__free(z);
        r->dec = NULL;
        return ferry__err(FERRY_ENOMEM, "%s: zlib could not start an inflater", r->name);
    }
#endif
    return 0;
}

/* For the next gzip member, or for the stream's start again. */
static void decoder_reset(ferry__seqread *r)
{
    if (r->codec == ZSTD) {
        ZSTD_DCtx_reset(r->dec, ZSTD_reset_session_only);
        return;
    }
#ifdef FERRY_HAVE_ISAL
    /* Zeroed first: on a back-reference before the member's start, igzip hands out
     * bytes of its own buffer (87 KB with the state) before the error, so what
     * damaged data decodes to must not depend on what an earlier member or file
     * left there (a position resumed in a fresh decoder reads the same lines). */
    struct inflate_state *st = r->dec;
    memset(st, 0, sizeof *st);
    isal_inflate_init(st);
    st->crc_flag = ISAL_GZIP; /* the gzip header parsed, the trailer checked */
#else
    inflateReset(r->dec);
#endif
}

static void decoder_free(ferry__seqread *r)
{
    if (!r->dec)
        return;
    if (r->codec == ZSTD) {
        ZSTD_freeDStream(r->dec);
    } else {
#ifndef FERRY_HAVE_ISAL
        inflateEnd(r->dec);
#endif
        ferry__free(r->dec);
    }
    r->dec = NULL;
}

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
#endif

static int bad_data(const ferry__seqread *r, const char *why)
{
    return ferry__err(FERRY_ECORRUPT, "%s: bad %s data near file offset %llu: %s", r->name,
                      r->compressed, (unsigned long long)(r->file_off - (r->in_len - r->in_pos)),
                      why);
}

/* One decoder call: input from r->in[in_pos..in_len), output into out (room
 * bytes, at most 4 GiB), *made what it wrote. Sets member_end at the end of a gzip
 * member or a zstd frame. */
static int decode(ferry__seqread *r, uint8_t *out, size_t room, size_t *made)
{
    if (room > UINT32_MAX)
        room = UINT32_MAX;
    if (r->codec == ZSTD) {
        ZSTD_inBuffer in = {r->in, r->in_len, r->in_pos};
        ZSTD_outBuffer o = {out, room, 0};
        size_t z = ZSTD_decompressStream(r->dec, &o, &in);
        *made = o.pos;
        if (ZSTD_isError(z))
            return bad_data(r, ZSTD_getErrorName(z));
        r->in_pos = in.pos;
        r->member_end = z == 0;
        return 0;
    }
#ifdef FERRY_HAVE_ISAL
    struct inflate_state *st = r->dec;
    st->next_in = r->in + r->in_pos;
    st->avail_in = (uint32_t)(r->in_len - r->in_pos);
    st->next_out = out;
    st->avail_out = (uint32_t)room;
    int code = isal_inflate(st);
    *made = room - st->avail_out;
    r->in_pos = r->in_len - st->avail_in;
    if (code < 0)
        return bad_data(r, isal_why(code));
    r->member_end = st->block_state == ISAL_BLOCK_FINISH;
#else
    z_stream *z = r->dec;
    z->next_in = r->in + r->in_pos;
    z->avail_in = (uInt)(r->in_len - r->in_pos);
    z->next_out = out;
    z->avail_out = (uInt)room;
    int zr = inflate(z, Z_NO_FLUSH);
    *made = room - z->avail_out;
    r->in_pos = r->in_len - z->avail_in;
    if (zr == Z_MEM_ERROR)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory decoding gzip", r->name);
    if (zr != Z_OK && zr != Z_BUF_ERROR && zr != Z_STREAM_END)
        return bad_data(r, z->msg ? z->msg : "inflate failed");
    r->member_end = zr == Z_STREAM_END;
#endif
    return 0;
}

/* More compressed input, when what there is has been used. */
static int more_input(ferry__seqread *r)
{
    if (r->in_pos < r->in_len || r->file_off >= r->size)
        return 0;
    size_t got;
    int rc = r->src->read_at(r, r->in, IN_BYTES, r->file_off, &got);
    if (rc < 0)
        return rc;
    if (got == 0)
        return ferry__err(FERRY_EIO, "%s: the file shrank while it was read", r->name);
    r->file_off += got;
    r->in_pos = 0;
    r->in_len = got;
    return 0;
}

/* Decodes into out (room bytes) until at least `want` are there (each decoder call
 * fills what the input at hand gives), the stream ends (eof) or an error. *made:
 * the bytes written, also on an error. */
static int decode_into(ferry__seqread *r, uint8_t *out, size_t room, size_t want, size_t *made)
{
    int rc;
    *made = 0;
    while (*made < want && !r->dec_eof) {
        if ((rc = more_input(r)) < 0)
            return rc;
        /* No input left: the end after a whole member; else the decoder may still
         * hold output (a match cut short by a full buffer), and once it has none
         * the stream was cut short. The check runs when more output is wanted, not
         * when the member ends, so the output before bad trailing bytes goes out
         * first. */
        bool drain = r->in_pos == r->in_len;
        if (r->member_end) {
            if (drain) {
                r->dec_eof = true;
                break;
            }
            if (r->codec == GZIP) { /* gzip files concatenate */
                if (r->in[r->in_pos] != 0x1f)
                    return ferry__err(FERRY_ECORRUPT,
                                      "%s: bytes that are not gzip after the gzip stream, at "
                                      "file offset %llu",
                                      r->name,
                                      (unsigned long long)(r->file_off - (r->in_len - r->in_pos)));
                decoder_reset(r);
            }
            r->member_end = false;
        }
        size_t n;
        rc = decode(r, out + *made, room - *made, &n);
        *made += n;
        if (rc < 0)
            return rc;
        if (drain && n == 0 && !r->member_end)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: the %s stream ends early, at file offset %llu (truncated?)",
                              r->name, r->compressed, (unsigned long long)r->file_off);
    }
    return 0;
}

/* ---- Decoding ahead on a thread of its own ---- */

#define AHEAD_BLOCK ((size_t)256 << 10)
#define AHEAD_BLOCKS 16
/* the decoder, once the ring is full, waits until this many blocks are free: it
 * then decodes several in a row, and each side wakes the other once per several
 * blocks, not once per block */
#define AHEAD_REFILL (AHEAD_BLOCKS / 2)
/* decoded bytes read on the caller's thread first: a reader that stops early (a
 * resume, a file's first rows) costs no thread and no decoding it will not use */
#define AHEAD_AFTER ((uint64_t)1 << 20)

/* The decoder's thread fills blocks of a ring in order; the reader's thread copies
 * them out. The decoder's fields of the reader (dec, in, in_pos, in_len, file_off,
 * member_end, dec_eof) belong to the thread while it runs. The ring is deep (4 MiB,
 * some milliseconds of parsing) so that the decoder, descheduled for a time slice
 * on a busy machine, does not leave the parser waiting. */
struct ferry__seqread_ahead {
    ferry__thread th;
    pthread_mutex_t m;
    pthread_cond_t cv;
    uint8_t *blk[AHEAD_BLOCKS];
    size_t len[AHEAD_BLOCKS];
    unsigned head, count; /* blocks ready: head .. head + count - 1 (mod AHEAD_BLOCKS) */
    size_t used;          /* bytes of blk[head] copied out */
    bool stop, done;      /* done: the stream's end or an error (rc, msg) after the blocks */
    bool decoder_waits;   /* for AHEAD_REFILL free blocks */
    bool reader_waits;    /* for a block */
    int rc;
    char msg[FERRY_ERRMSG_MAX];
};

static void *ahead_main(void *arg)
{
    ferry__seqread *r = arg;
    struct ferry__seqread_ahead *a = r->ahead;
    for (;;) {
        pthread_mutex_lock(&a->m);
        if (a->count == AHEAD_BLOCKS) {
            a->decoder_waits = true;
            while (a->count > AHEAD_BLOCKS - AHEAD_REFILL && !a->stop)
                pthread_cond_wait(&a->cv, &a->m);
            a->decoder_waits = false;
        }
        if (a->stop) {
            pthread_mutex_unlock(&a->m);
            return NULL;
        }
        unsigned slot = (a->head + a->count) % AHEAD_BLOCKS;
        pthread_mutex_unlock(&a->m);
        size_t made;
        int rc = decode_into(r, a->blk[slot], AHEAD_BLOCK, AHEAD_BLOCK, &made);
        pthread_mutex_lock(&a->m);
        a->len[slot] = made;
        if (made)
            a->count++;
        if (rc < 0 || r->dec_eof) {
            a->done = true;
            a->rc = rc;
            if (rc < 0)
                ferry__err_copy(a->msg); /* the message lives in this thread: carry it over */
        }
        bool done = a->done;
        if (a->reader_waits || done)
            pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->m);
        if (done)
            return NULL;
    }
}

static void ahead_stop(ferry__seqread *r)
{
    struct ferry__seqread_ahead *a = r->ahead;
    if (!a)
        return;
    pthread_mutex_lock(&a->m);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->m);
    ferry__thread_join(&a->th);
    a->stop = a->done = false;
    a->decoder_waits = a->reader_waits = false;
    a->head = a->count = 0;
    a->used = 0;
    a->rc = 0;
}

static int ahead_start(ferry__seqread *r)
{
    return ferry__thread_start(&r->ahead->th, ahead_main, r);
}

static void ahead_free(ferry__seqread *r)
{
    struct ferry__seqread_ahead *a = r->ahead;
    if (!a)
        return;
    ahead_stop(r);
    pthread_mutex_destroy(&a->m);
    pthread_cond_destroy(&a->cv);
    ferry__aligned_free(a->blk[0]);
    ferry__free(a);
    r->ahead = NULL;
}

/* produce() from the ring: copies until `want` bytes are out, the end, or the
 * decoder's error (after the bytes before it). */
static int take_ahead(ferry__seqread *r, uint8_t *out, size_t room, size_t want, size_t *made)
{
    struct ferry__seqread_ahead *a = r->ahead;
    while (*made < want) {
        pthread_mutex_lock(&a->m);
        while (a->count == 0 && !a->done) {
            a->reader_waits = true;
            pthread_cond_wait(&a->cv, &a->m);
            a->reader_waits = false;
        }
        if (a->count == 0) {
            int rc = a->rc;
            pthread_mutex_unlock(&a->m);
            if (rc < 0)
                return ferry__err(rc, "%s", a->msg);
            r->eof = true;
            return 0;
        }
        unsigned h = a->head;
        pthread_mutex_unlock(&a->m);
        size_t k = a->len[h] - a->used;
        if (k > room - *made)
            k = room - *made;
        memcpy(out + *made, a->blk[h] + a->used, k);
        *made += k;
        a->used += k;
        if (a->used == a->len[h]) {
            pthread_mutex_lock(&a->m);
            a->head = (h + 1) % AHEAD_BLOCKS;
            a->count--;
            a->used = 0;
            if (a->decoder_waits && a->count <= AHEAD_BLOCKS - AHEAD_REFILL)
                pthread_cond_broadcast(&a->cv);
            pthread_mutex_unlock(&a->m);
        }
        if (*made == room)
            break;
    }
    return 0;
}

/* Starts decoding ahead, from where the decoder is; stays on the caller's thread
 * where the memory or the thread cannot be had. */
static void ahead_begin(ferry__seqread *r)
{
    struct ferry__seqread_ahead *a = ferry__calloc(1, sizeof *a);
    uint8_t *mem = ferry__aligned_alloc(AHEAD_BLOCK * AHEAD_BLOCKS);
    r->ahead_wanted = false;
    if (!a || !mem) {
        ferry__free(a);
        ferry__aligned_free(mem);
        return;
    }
    for (int i = 0; i < AHEAD_BLOCKS; i++)
        a->blk[i] = mem + (size_t)i * AHEAD_BLOCK;
    pthread_mutex_init(&a->m, NULL);
    pthread_cond_init(&a->cv, NULL);
    r->ahead = a;
    if (ahead_start(r) < 0) {
        pthread_mutex_destroy(&a->m);
        pthread_cond_destroy(&a->cv);
        ferry__aligned_free(mem);
        ferry__free(a);
        r->ahead = NULL;
        ferry__err_clear();
    }
}

void ferry__seqread_decode_ahead(ferry__seqread *r)
{
    r->ahead_wanted = r->codec != PLAIN;
}

/* Reads or decodes into out until at least `want` bytes are there, or the end, or
 * an error, which is kept (r->err) and returned from here on: the bytes before it
 * stay the caller's. */
static int produce(ferry__seqread *r, uint8_t *out, size_t room, size_t want, size_t *made)
{
    int rc = 0;
    *made = 0;
    if (r->err)
        return ferry__err(r->err, "%s", r->err_msg);
    if (r->ahead_wanted && r->decoded >= AHEAD_AFTER)
        ahead_begin(r);
    if (r->ahead) {
        rc = take_ahead(r, out, room, want, made);
    } else if (r->codec != PLAIN) {
        rc = decode_into(r, out, room, want, made);
        r->eof = r->dec_eof;
        r->decoded += *made;
    } else {
        while (*made < want && !r->eof) {
            size_t got;
            if ((rc = r->src->read_at(r, out + *made, room - *made, r->file_off, &got)) < 0)
                break;
            r->file_off += got;
            *made += got;
            if (got == 0 || r->file_off >= r->size)
                r->eof = true;
        }
    }
    if (rc < 0) {
        r->err = rc;
        ferry__err_copy(r->err_msg);
    }
    return rc;
}

/* ---- Open and close ---- */

int ferry__seqread_open_src(ferry__seqread *r, const char *name, int compression, size_t window)
{
    int rc = 0;
    unsigned char head[8];
    size_t got = 0;
    r->name = name;
    if (compression == FERRY__COMP_AUTO) {
        FERRY_TRY(r->src->read_at(r, head, sizeof head, 0, &got));
        const char *c = ferry__compression_of(head, got);
        if (c && strcmp(c, "gzip") && strcmp(c, "zstd"))
            FERRY_FAIL(FERRY_ENOTSUP,
                       "%s: the file is %s-compressed, which ferry does not decode: decompress "
                       "it (%s %s), or compress it with gzip or zstd",
                       name, c, decompress_command(c), name);
        r->codec = !c ? PLAIN : !strcmp(c, "gzip") ? GZIP : ZSTD;
    } else {
        r->codec = compression == FERRY__COMP_GZIP   ? GZIP
                   : compression == FERRY__COMP_ZSTD ? ZSTD
                                                     : PLAIN;
    }
    r->compressed = r->codec == GZIP ? "gzip" : r->codec == ZSTD ? "zstd" : NULL;
    if (window < MIN_WINDOW)
        window = MIN_WINDOW;
    if (r->codec != PLAIN && window < MIN_WINDOW_DECODED)
        window = MIN_WINDOW_DECODED;
    r->cap = window; /* made on the first need: reads straight into the caller's need none */
    if (r->codec != PLAIN) {
        if (!(r->in = ferry__malloc(IN_BYTES)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a %s input buffer", name,
                       r->compressed);
        FERRY_TRY(decoder_start(r));
    }
    return 0;
cleanup:
    ferry__seqread_close(r);
    return rc;
}

int ferry__seqread_open(ferry__seqread *r, const char *path, const char *name, int compression,
                        size_t window)
{
    int rc;
    memset(r, 0, sizeof *r);
    r->f.fd = -1;
    if ((rc = ferry__file_open(&r->f, path)) < 0)
        return rc;
    (void)posix_fadvise(r->f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    r->src = &file_source;
    r->size = r->f.size;
    return ferry__seqread_open_src(r, name, compression, window);
}

void ferry__seqread_close(ferry__seqread *r)
{
    ahead_free(r);
    decoder_free(r);
    if (r->src && r->src->close)
        r->src->close(r);
    ferry__free(r->buf);
    ferry__free(r->in);
    memset(r, 0, sizeof *r);
    r->f.fd = -1;
}

/* ---- The window ---- */

int ferry__seqread_need(ferry__seqread *r, size_t n, size_t *avail)
{
    int rc = 0;
    *avail = 0;
    if (r->end - r->pos < n && !r->eof) {
        if (n > r->cap || !r->buf) {
            size_t cap = n > r->cap ? n : r->cap;
            uint8_t *grown = ferry__malloc(cap);
            if (!grown)
                return ferry__err(FERRY_ENOMEM, "%s: out of memory for a %zu-byte %s", r->name, cap,
                                  r->buf ? "record" : "read window");
            if (r->buf)
                memcpy(grown, r->buf + r->pos, r->end - r->pos);
            ferry__free(r->buf);
            r->buf = grown;
            r->cap = cap;
            r->end -= r->pos;
            r->pos = 0;
        } else if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->end - r->pos);
            r->end -= r->pos;
            r->pos = 0;
        }
        size_t made;
        rc = produce(r, r->buf + r->end, r->cap - r->end, n - r->end, &made);
        r->end += made;
    }
    *avail = r->end - r->pos < n ? r->end - r->pos : n;
    return *avail < n ? rc : 0;
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
    if (r->codec == PLAIN && !r->err) {
        /* past the window: move the file offset instead of reading */
        uint64_t left = r->size > r->file_off ? r->size - r->file_off : 0;
        uint64_t step = n - done < left ? n - done : left;
        r->file_off += step;
        done += step;
        if (r->file_off >= r->size)
            r->eof = true;
    } else {
        while (done < n) {
            size_t want = n - done < r->cap ? (size_t)(n - done) : r->cap, got;
            int rc = ferry__seqread_need(r, want, &got);
            r->pos += got;
            done += got;
            if (rc < 0) {
                r->off += done;
                return rc;
            }
            if (got < want)
                break;
        }
    }
    r->off += done;
    *skipped = done;
    return 0;
}

int ferry__seqread_read(ferry__seqread *r, void *dst, size_t n, size_t *got)
{
    uint8_t *d = dst;
    size_t have = r->end - r->pos < n ? r->end - r->pos : n, made;
    int rc = 0;
    *got = 0;
    if (n - have >= (r->cap >> 2)) {
        /* much more than the window holds: the rest read or decoded straight into dst */
        if (have)
            memcpy(d, r->buf + r->pos, have);
        r->pos += have;
        r->off += have;
        *got = have;
        r->pos = r->end = 0;
        rc = produce(r, d + have, n - have, n - have, &made);
        r->off += made;
        *got += made;
        return *got > 0 ? 0 : rc; /* an error after bytes comes with the next call */
    }
    while (*got < n) {
        size_t want = n - *got < r->cap ? n - *got : r->cap;
        rc = ferry__seqread_need(r, want, &have);
        if (have)
            memcpy(d + *got, r->buf + r->pos, have);
        r->pos += have;
        r->off += have;
        *got += have;
        if (rc < 0)
            return *got > 0 ? 0 : rc;
        if (have < want)
            break;
    }
    return 0;
}

int ferry__seqread_seek(ferry__seqread *r, uint64_t off, uint64_t *at)
{
    uint64_t skipped;
    int rc;
    if (off < r->off && r->off - off <= r->pos && !r->err) {
        /* still in the window */
        r->pos -= (size_t)(r->off - off);
        r->off = off;
        *at = off;
        return 0;
    }
    if (r->codec == PLAIN && (off < r->off || r->err)) {
        r->pos = r->end = 0;
        r->err = 0;
        r->file_off = r->off = off < r->size ? off : r->size;
        r->eof = off >= r->size;
        *at = r->off;
        return 0;
    }
    if (off < r->off || r->err) {
        /* decode again from the start (ahead again once as far in as the first time) */
        if (r->ahead) {
            ahead_free(r);
            r->ahead_wanted = true;
        }
        r->pos = r->end = r->in_pos = r->in_len = 0;
        r->file_off = r->off = r->decoded = 0;
        r->eof = r->dec_eof = r->member_end = false;
        r->err = 0;
        decoder_reset(r);
    }
    rc = ferry__seqread_skip(r, off - r->off, &skipped);
    *at = r->off;
    return rc;
}
