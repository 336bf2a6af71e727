/*
 * The central directory of a zip archive (PKWARE APPNOTE 6.3), with zip64, for
 * reading .npz files in place: where each member's bytes are, and whether they
 * are stored or deflated. Not a public API.
 */
#ifndef FERRY_ZIP_H
#define FERRY_ZIP_H

#include "../core/internal.h"

#define FERRY__ZIP_MAX_MEMBERS 65536
#define FERRY__ZIP_MAX_NAME 255

enum { FERRY__ZIP_STORED = 0, FERRY__ZIP_DEFLATED = 8 };

typedef struct ferry__zip_member {
    char name[FERRY__ZIP_MAX_NAME + 1];
    uint16_t method;
    uint32_t crc;
    uint64_t csize, usize; /* compressed and uncompressed sizes */
    uint64_t header_off;   /* the local header */
    uint64_t data_off;     /* the member's bytes: [data_off, data_off + csize) */
} ferry__zip_member;

/* Reads the directory of the archive p[0..n) (the whole file, mapped). Every
 * member's local header is checked against the directory and its bytes must lie
 * inside the file before the directory; a stored member's two sizes must agree.
 * *out is allocated (ferry__free), *count members, at most max_members.
 * FERRY_ECORRUPT "NAME: offset N: why" when the archive is malformed or lies. */
int ferry__zip_read(const uint8_t *p, size_t n, const char *name, size_t max_members,
                    ferry__zip_member **out, size_t *count);

/* Inflates a deflated member into dst (m->usize bytes) and checks that it makes
 * exactly that many bytes with the directory's CRC-32. */
int ferry__zip_inflate(const uint8_t *p, size_t n, const char *name, const ferry__zip_member *m,
                       void *dst);

/* CRC-32 (zlib's) of a stored member's bytes against the directory. */
int ferry__zip_check_crc(const uint8_t *p, const char *name, const ferry__zip_member *m);

#endif
