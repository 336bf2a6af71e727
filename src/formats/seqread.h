/*
 * A sequential reader of one file, as it is or gzip-compressed (several members in
 * a row allowed): a window of the file's (decompressed) bytes that the caller
 * advances through. The TFRecord and tar readers sit on it.
 *
 * Inflating is streaming, with ISA-L's igzip where the build found it
 * (FERRY_HAVE_ISAL: about 2.5 times zlib's rate on x86-64), else with zlib. Both
 * check the gzip trailer's CRC-32 and length.
 *
 * Memory is the window: it starts at the size asked for and grows only as far as
 * the caller asks (a record larger than the window), so the caller's limits bound it.
 */
#ifndef FERRY_SEQREAD_H
#define FERRY_SEQREAD_H

#include "../io/io.h"

#include <zlib.h>
#ifdef FERRY_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

enum { FERRY__GZ_AUTO = 0, FERRY__GZ_NONE = 1, FERRY__GZ_GZIP = 2 };

typedef struct ferry__seqread {
    ferry__file f;
    const char *name; /* for messages: borrowed, must outlive the reader */
    int gzip;         /* the file is gzip (detected by its magic bytes, or asked) */
    z_stream z;
    bool z_live;
#ifdef FERRY_HAVE_ISAL
    struct inflate_state *isal;
#endif
    uint8_t *in; /* compressed input (gzip only) */
    size_t in_cap;
    uint64_t file_off; /* next file offset to read */
    uint8_t *buf;      /* the window: buf[pos..end) are the bytes at stream offset off */
    size_t cap, pos, end;
    uint64_t off;    /* stream (decompressed) offset of buf[pos] */
    bool eof;        /* nothing more after buf[end] */
    bool member_end; /* gzip: the inflater finished a member */
} ferry__seqread;

/* Opens path (name: how messages call it) with a window of `window` bytes (at
 * least 4 KiB; 256 KiB for a gzip file). A small window suits a reader that
 * takes large pieces with ferry__seqread_read, straight from the file.
 * compression: FERRY__GZ_AUTO looks at the first two bytes (1f 8b). */
int ferry__seqread_open(ferry__seqread *r, const char *path, const char *name, int compression,
                        size_t window);
void ferry__seqread_close(ferry__seqread *r);
/* Makes n bytes available at r->buf + r->pos, growing the window when n is larger.
 * *avail is what is there: n, or less at the end of the stream (0 at its very end).
 * Errors: FERRY_EIO, FERRY_ENOMEM, FERRY_ECORRUPT (bad gzip data), named. */
int ferry__seqread_need(ferry__seqread *r, size_t n, size_t *avail);
/* Copies the next n bytes to dst and moves past them: for a file read as it is,
 * what the window does not hold is read from the file straight into dst. *got < n
 * only at the end of the stream. */
int ferry__seqread_read(ferry__seqread *r, void *dst, size_t n, size_t *got);
/* Moves past n bytes. For a file read as it is, bytes past the window are not read at
 * all (a seek). *skipped < n only at the end of the stream. */
int ferry__seqread_skip(ferry__seqread *r, uint64_t n, uint64_t *skipped);
/* Moves to stream offset off, forward or back, as if off bytes had been read from
 * the start: for a file read as it is, a seek (no bytes read where the window does
 * not hold them); for a gzip file, forward by decoding up to off, back by decoding
 * again from the file's start (gzip cannot seek). *at < off only when the stream
 * is shorter (it is then at its end). Errors as ferry__seqread_need. */
int ferry__seqread_seek(ferry__seqread *r, uint64_t off, uint64_t *at);

#endif
