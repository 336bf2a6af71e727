/*
 * TFRecord framing: each record is
 *     uint64 length (little-endian)
 *     uint32 masked CRC-32C of the 8 length bytes
 *     byte   data[length]
 *     uint32 masked CRC-32C of the data
 * where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. A file may be
 * compressed as a whole: gzip (TensorFlow's compression_type="GZIP") or zstd.
 */
#ifndef FERRY_TFRECORD_INTERNAL_H
#define FERRY_TFRECORD_INTERNAL_H

#include "../io/seqread.h"

#define FERRY__TFR_HEADER 12
#define FERRY__TFR_OVERHEAD 16

static inline uint32_t ferry__tfr_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* Checks a record header (12 bytes): its length CRC, and the length against max.
 * Messages name file, record and offset. */
int ferry__tfr_header(const char *name, uint64_t record, uint64_t off, const uint8_t *h,
                      uint64_t max, uint64_t *len);
/* Checks the data CRC of a record whose data and CRC are at d (len + 4 bytes). */
int ferry__tfr_data(const char *name, uint64_t record, uint64_t off, const uint8_t *d,
                    uint64_t len);
/* The same with the stored CRC elsewhere (4 bytes at crc). */
int ferry__tfr_data_at(const char *name, uint64_t record, uint64_t off, const uint8_t *d,
                       uint64_t len, const uint8_t *crc);
/* The same with the data's CRC-32C computed already (unmasked; ferry__crc32c_copy
 * computes it while copying the data out). */
int ferry__tfr_data_crc(const char *name, uint64_t record, uint64_t off, uint32_t computed,
                        uint64_t len, const uint8_t *crc);

/* Reads the records of one file in order. */
typedef struct ferry__tfr_reader {
    ferry__seqread r;
    uint64_t record; /* number of the next record */
    uint64_t max;    /* longest record accepted */
    bool broken;     /* the framing is lost: every later call fails */
} ferry__tfr_reader;

/* window: bytes of the read window (0: 1 MiB); an index scan wants a small one,
 * so that the data between headers is not read. */
int ferry__tfr_open(ferry__tfr_reader *t, const char *path, const char *name, int compression,
                    uint64_t max, size_t window);
void ferry__tfr_close(ferry__tfr_reader *t);
/* The next record, CRCs checked: *data (valid until the next call), *n, *off (its
 * offset in the file, or in the decompressed stream of a gzip file). FERRY_END at
 * the end of the file; FERRY_ECORRUPT naming file, record and offset. After a
 * data CRC mismatch (*data and *n set, the record passed) the next call reads the
 * next record; after any other error (t->broken) the file cannot be read on.
 * With check_data = 0 the data is not read at all where the file allows it (an
 * index scan): *data is then NULL. */
int ferry__tfr_next(ferry__tfr_reader *t, const uint8_t **data, size_t *n, uint64_t *off,
                    int check_data);
/* The next record's data copied into dst (cap bytes): a record of up to a quarter
 * of the window from the window, its CRC computed in the same pass as the copy;
 * a larger one, for a plain file, read from the file straight into dst where the
 * window does not hold it. Errors as
 * ferry__tfr_next; a record over cap is FERRY_EOVERFLOW (passed over, not read). */
int ferry__tfr_next_into(ferry__tfr_reader *t, uint8_t *dst, size_t cap, size_t *n, uint64_t *off);

/* The check of a fetched copy (io/remote.h, ferry__remote_check_fn): the framing of
 * the plain file at path, both CRCs of every record, read through a mapping in one
 * pass; messages name url, the record and its offset. A compressed file (its first
 * bytes say gzip or zstd) is passed: its own checksums are checked as it is read. */
int ferry__tfr_check_copy(const char *path, const char *url);

#endif
