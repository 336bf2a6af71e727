/*
 * tar archives (POSIX ustar, GNU and pax long names), read in order from a file as
 * it is or compressed (gzip, zstd): the reader under WebDataset shards.
 *
 * Only regular files come out; directory entries are passed over, long-name and
 * pax headers are applied to the member they precede (pax "path" and "size"),
 * pax global headers and GNU long link names are passed over. Links, devices and
 * sparse files are an error naming the member (a WebDataset shard holds none).
 * Every header's checksum is checked; sizes are octal or GNU base-256; a size
 * that runs past the end of the file, a long name over FERRY__TAR_MAX_NAME bytes
 * or a pax header over FERRY__TAR_MAX_PAX bytes is an error naming the file, the
 * member and its offset.
 */
#ifndef FERRY_TAR_H
#define FERRY_TAR_H

#include "../io/seqread.h"

#define FERRY__TAR_MAX_NAME 4096
#define FERRY__TAR_MAX_PAX ((size_t)1 << 20)

typedef struct ferry__tar_member {
    const char *name; /* NUL-terminated, valid until the next ferry__tar_next */
    size_t name_len;
    uint64_t size;
    uint64_t header_off;  /* offset of its (first) header in the (decompressed) stream */
    uint64_t data_off;    /* offset of its data */
    uint64_t index;       /* position among the archive's headers, for messages */
    uint64_t first_index; /* the same for its first header (at header_off) */
} ferry__tar_member;

typedef struct ferry__tar {
    ferry__seqread r;
    uint64_t headers;  /* headers read */
    uint64_t pending;  /* bytes of the current member (and padding) not yet consumed */
    uint64_t max_data; /* longest member ferry__tar_data reads */
    char name[FERRY__TAR_MAX_NAME + 1];
    char longname[FERRY__TAR_MAX_NAME + 1];
    bool have_long;
    uint64_t pax_size;
    bool have_pax_size;
    ferry__tar_member cur;
} ferry__tar;

/* window: bytes of the read window (0: 1 MiB); a reader that seeks from sample to
 * sample wants a small one. */
int ferry__tar_open(ferry__tar *t, const char *path, const char *name, int compression,
                    uint64_t max_data, size_t window);
void ferry__tar_close(ferry__tar *t);
/* The next regular file member; FERRY_END after the last (two zero blocks, or the
 * end of the file on a block boundary). */
int ferry__tar_next(ferry__tar *t, ferry__tar_member *m);
/* The current member's bytes (m->size of them), valid until the next call.
 * A member over max_data is FERRY_EOVERFLOW naming it. */
int ferry__tar_data(ferry__tar *t, const uint8_t **p);

/* Parses one 512-byte header block: 1 for a member header (its fields in the
 * out-parameters), 0 for a zero block, FERRY_ECORRUPT for a bad checksum or a
 * bad number (the message says which, without the file: the caller adds it). */
int ferry__tar_header(const uint8_t *h, char *type, uint64_t *size, char *name, size_t *name_len);

/* The check of a fetched copy (io/remote.h, ferry__remote_check_fn): every header of
 * the plain archive at path read in order as ferry__tar_next reads them (checksums,
 * sizes within the file, long names and pax headers), the members' data passed
 * over; messages name url, the header and its offset. A compressed archive (its
 * first bytes say gzip or zstd) is passed: its own checksums are checked as it is
 * read. */
int ferry__tar_check_copy(const char *path, const char *url);

#endif
