/*
 * Sequential reads of a file that may be compressed: gzip (any number of
 * members) and zstd (any number of frames) are found by their magic bytes and
 * decoded on the fly; anything else is read as it is. For streams that read a
 * file from its start (CSV part files), and go forward in it (ferry__zread_seek).
 */
#ifndef FERRY_IO_ZREAD_H
#define FERRY_IO_ZREAD_H

#include "io.h"

/* The compression a file's first bytes announce: "gzip", "zstd", "xz", "bzip2",
 * "lz4" or "zip"; NULL for none of these. n is how many bytes head holds. */
const char *ferry__compression_of(const void *head, size_t n);

/* What to run to get the plain file back, for messages: "gunzip -k", ... */
const char *ferry__decompress_command(const char *compression);

/* Checks the first bytes of the file at path: FERRY_ENOTSUP naming the file and
 * its compression when it has one, with what to do (`what` names the reader and
 * `todo` is the advice after "decompress it first"), else 0. An unreadable file
 * is left to the caller's own open (0). */
int ferry__refuse_compressed(const char *path, const char *what);

/* A reader; zero it (or let ferry__zread_close do so) before the first open. */
typedef struct ferry__zread {
    ferry__file f;
    const char *path; /* borrowed from the caller of open */
    int codec;
    uint64_t off; /* file offset of the next raw read */
    uint64_t pos; /* decoded offset of the next byte read: what reads have given */
    bool broken, done, open;
    uint8_t *in; /* compressed input; kept across opens */
    size_t in_pos, in_len;
    bool in_eof;
    struct z_stream_s *zs;
    bool member_end;
    struct ZSTD_DCtx_s *zd;
    size_t zret; /* ZSTD_decompressStream's last hint: 0 at the end of a frame */
    int err_rc;  /* the error that broke the reader, returned after the bytes before it */
    char err_msg[FERRY_ERRMSG_MAX];
} ferry__zread;

/* Opens path (borrowed: it must outlive the reading) for reading from its start.
 * gzip and zstd are decoded; xz, bzip2, lz4 and zip are FERRY_ENOTSUP naming the
 * file and what to do. A plain file allocates nothing; a compressed one a 64 KiB
 * input buffer and the decoder's state, kept for the next open until
 * ferry__zread_free (zstd windows up to 128 MiB are accepted, larger ones are
 * FERRY_ECORRUPT). FERRY_ENOENT, FERRY_EIO, FERRY_ENOMEM. */
int ferry__zread_open(ferry__zread *r, const char *path);
/* Reads up to want decoded bytes: *got < want at the end of the data, or when an
 * error follows the bytes given: the next call returns it. FERRY_EIO on a failed
 * read, FERRY_ECORRUPT on a damaged or truncated compressed stream (naming the
 * file and the offset in it); after an error the reader gives nothing more. */
int ferry__zread_read(ferry__zread *r, void *dst, size_t want, size_t *got);
/* Goes to decoded offset off: the next read starts with the byte there. A plain
 * file only sets the offset (no read: past the end, reads give nothing). A
 * compressed one cannot seek: off at or past r->pos decodes and drops the bytes
 * up to it; off behind r->pos reopens the file and decodes it from its start up
 * to off (the cost of going back). 0 with r->pos == off; 0 with r->pos < off
 * when the decoded data ends before off (the reader is at its end); or the error
 * of a read before off (the reader is then broken). A broken reader is reopened
 * first. */
int ferry__zread_seek(ferry__zread *r, uint64_t off);
/* "gzip", "zstd" or NULL (plain). */
const char *ferry__zread_compression(const ferry__zread *r);
/* Closes the file; the buffers stay for the next open. */
void ferry__zread_close(ferry__zread *r);
/* Closes and frees the buffers and decoders. */
void ferry__zread_free(ferry__zread *r);

#endif
