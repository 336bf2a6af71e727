/*
 * The sequential reader: every file the library reads front to back (TFRecord and
 * tar shards, CSV part files) goes through it. A file as it is, gzip (any number
 * of members in a row) or zstd (any number of frames), found by its magic bytes
 * (or asked for), seen through a window of its (decoded) bytes that the caller
 * advances: take bytes in place (need), copy them out (read), pass over them
 * (skip), or go to an offset (seek).
 *
 * gzip is inflated with ISA-L's igzip where the build found it (FERRY_HAVE_ISAL:
 * about 2.5 times zlib's rate on x86-64), else with zlib; both check every
 * member's CRC-32 and length. zstd frames may need a window of up to 128 MiB
 * (zstd's own default limit; larger ones are FERRY_ECORRUPT).
 *
 * Memory is the window: it starts at the size asked for (on the first need: a
 * caller that only reads large pieces never has one) and grows only as far as the
 * caller asks (a record larger than the window), so the caller's limits bound it;
 * a compressed file adds a 64 KiB input buffer and the decoder's state.
 *
 * Errors say where: "NAME: the gzip stream ends early, at file offset N
 * (truncated?)", "NAME: bad zstd data near file offset N: why". A damaged
 * compressed stream gives every byte the decoder makes before the damage: the
 * error comes when the caller asks for more than that.
 *
 * The bytes come from a byte source (ferry__seqsrc): a file read at offsets
 * (pread) here; another source (an object store, say) supplies the same two
 * calls and the decoders are unchanged.
 *
 * Thread rules: one thread at a time uses a reader.
 */
#ifndef FERRY_IO_SEQREAD_H
#define FERRY_IO_SEQREAD_H

#include "io.h"

/* What a caller asks for: the magic bytes decide (AUTO), or the file is taken as it
 * is, or as gzip, or as zstd whatever its first bytes. The values of AUTO, NONE and
 * GZIP are those of FERRY_TFRECORD_*, which tfrecord passes on as they are. */
enum { FERRY__COMP_AUTO = 0, FERRY__COMP_NONE = 1, FERRY__COMP_GZIP = 2, FERRY__COMP_ZSTD = 3 };

struct ferry__seqread;

/* A byte source. read_at reads up to n bytes at offset off, retrying short reads;
 * *got < n only at the end of the source; errors (FERRY_EIO) name the source.
 * close releases what open took; the reader calls it once. */
typedef struct ferry__seqsrc {
    int (*read_at)(struct ferry__seqread *r, void *buf, size_t n, uint64_t off, size_t *got);
    void (*close)(struct ferry__seqread *r);
} ferry__seqsrc;

typedef struct ferry__seqread {
    const ferry__seqsrc *src;
    ferry__file f;          /* the file behind the file source */
    void *src_ctx;          /* another source's own state */
    uint64_t size;          /* the source's bytes (compressed, for a compressed file) */
    const char *name;       /* for messages: borrowed, must outlive the reader */
    const char *compressed; /* "gzip", "zstd", or NULL for a file read as it is */
    int codec;
    void *dec;   /* the decoder: a z_stream, an igzip inflate_state or a ZSTD_DStream */
    uint8_t *in; /* compressed input */
    size_t in_pos, in_len;
    uint64_t file_off; /* next source offset to read */
    uint8_t *buf;      /* the window: buf[pos..end) are the bytes at stream offset off */
    size_t cap, pos, end;
    uint64_t off;      /* stream (decoded) offset of buf[pos] */
    bool eof;          /* nothing more after buf[end] */
    bool dec_eof;      /* the decoder's end (the decoder's thread's, when decoding ahead) */
    bool ahead_wanted; /* decode ahead once `decoded` is far enough */
    uint64_t decoded;  /* bytes decoded on the caller's thread */
    struct ferry__seqread_ahead *ahead; /* decoding ahead on a thread, or NULL */
    bool member_end;                    /* gzip: the decoder finished a member; zstd: a frame */
    int err; /* the decoder's error, returned once the bytes before it are used */
    char err_msg[FERRY_ERRMSG_MAX];
} ferry__seqread;

/* Opens path (name: how messages call it) with a window of `window` bytes (at
 * least 4 KiB; 64 KiB for a compressed file). A small window suits a reader that
 * takes large pieces with ferry__seqread_read, straight from the file.
 * compression: FERRY__COMP_*. A file whose first bytes say xz, bzip2, lz4 or zip is
 * FERRY_ENOTSUP naming it and what to do. FERRY_ENOENT, FERRY_EIO, FERRY_ENOMEM. */
int ferry__seqread_open(ferry__seqread *r, const char *path, const char *name, int compression,
                        size_t window);
/* The same over another byte source: r->src, r->src_ctx and r->size set by the
 * caller (the rest of r zeroed); closes the source when it fails. */
int ferry__seqread_open_src(ferry__seqread *r, const char *name, int compression, size_t window);
/* For a compressed file: once 1 MiB has been decoded on the caller's thread,
 * decodes on a thread of its own, ahead of the caller (up to 4 MiB: sixteen blocks
 * of 256 KiB), so that a caller that parses what it reads (CSV) parses while the next
 * bytes are inflated, on another core; a reader that stops early (a resume, the
 * first rows) never starts the thread. Nothing for a plain file. Where the memory
 * or the thread cannot be had, the reader decodes on the caller's thread as
 * without. The bytes, and the errors after them, are those of a reader without.
 * The thread rules stay: one thread at a time calls the reader. */
void ferry__seqread_decode_ahead(ferry__seqread *r);
/* Closes the source and frees; safe on a zeroed or closed reader. */
void ferry__seqread_close(ferry__seqread *r);
/* Makes n bytes available at r->buf + r->pos, growing the window when n is larger.
 * *avail is what is there: n, or less at the end of the stream (0 at its very end).
 * Errors: FERRY_EIO, FERRY_ENOMEM, FERRY_ECORRUPT (damaged compressed data), named,
 * only when fewer than n bytes are there. */
int ferry__seqread_need(ferry__seqread *r, size_t n, size_t *avail);
/* Copies the next n bytes to dst and moves past them: for a file read as it is,
 * what the window does not hold is read from the file straight into dst. *got < n
 * at the end of the stream, or before an error, which the next call returns. */
int ferry__seqread_read(ferry__seqread *r, void *dst, size_t n, size_t *got);
/* Moves past n bytes. For a file read as it is, bytes past the window are not read at
 * all (a seek). *skipped < n only at the end of the stream. */
int ferry__seqread_skip(ferry__seqread *r, uint64_t n, uint64_t *skipped);
/* Moves to stream offset off, forward or back, as if off bytes had been read from
 * the start: for a file read as it is, a seek (no bytes read where the window does
 * not hold them); for a compressed file, forward by decoding up to off, back (or
 * after an error) by decoding again from the file's start (no seeking in a
 * compressed stream). *at < off only when the stream is shorter (it is then at its
 * end). Errors as ferry__seqread_need. */
int ferry__seqread_seek(ferry__seqread *r, uint64_t off, uint64_t *at);

/* The compression a file's first bytes announce: "gzip", "zstd", "xz", "bzip2",
 * "lz4" or "zip"; NULL for none of these. n is how many bytes head holds. */
const char *ferry__compression_of(const void *head, size_t n);

/* Checks the first bytes of the file at path: FERRY_ENOTSUP naming the file and
 * its compression when it has one, with what to do (`what` names the reader: it
 * "needs the plain text"), else 0. An unreadable file is left to the caller's own
 * open (0). For readers that need offsets in the file itself (line indexes). */
int ferry__refuse_compressed(const char *path, const char *what);

#endif
