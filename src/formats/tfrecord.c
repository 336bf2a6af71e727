/*
 * TFRecord files: the framing, both CRCs checked.
 */
#include "tfrecord_internal.h"
#include "ferry/records.h"

#include <limits.h>
#include <string.h>
#ifdef FERRY_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#define WINDOW ((size_t)1 << 20)

/* CRC-32C of a record: ISA-L's folding implementation, where the build has it,
 * runs about twice the rate of the crc32 instruction loop (ferry_crc32c). */
static uint32_t crc32c(const void *p, size_t n)
{
#ifdef FERRY_HAVE_ISAL
    uint32_t c = 0xffffffffu;
    const unsigned char *b = p;
    while (n > 0) {
        int k = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        c = crc32_iscsi((unsigned char *)b, k, c);
        b += k;
        n -= (size_t)k;
    }
    return c ^ 0xffffffffu;
#else
    return ferry_crc32c(0, p, n);
#endif
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

int ferry__tfr_header(const char *name, uint64_t record, uint64_t off, const uint8_t *h,
                      uint64_t max, uint64_t *len)
{
    uint32_t want = ferry__tfr_mask(crc32c(h, 8)), got = get32(h + 8);
    *len = get64(h);
    if (want != got)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: length CRC mismatch (stored %08x, "
                          "computed %08x)",
                          name, (unsigned long long)record, (unsigned long long)off, got, want);
    if (*len > max)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: length %llu is over the limit of %llu "
                          "bytes (max_record=)",
                          name, (unsigned long long)record, (unsigned long long)off,
                          (unsigned long long)*len, (unsigned long long)max);
    return 0;
}

int ferry__tfr_data_at(const char *name, uint64_t record, uint64_t off, const uint8_t *d,
                       uint64_t len, const uint8_t *crc)
{
    uint32_t want = ferry__tfr_mask(crc32c(d, (size_t)len)), got = get32(crc);
    if (want != got)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: data CRC mismatch (stored %08x, "
                          "computed %08x over %llu bytes)",
                          name, (unsigned long long)record, (unsigned long long)off, got, want,
                          (unsigned long long)len);
    return 0;
}

int ferry__tfr_data(const char *name, uint64_t record, uint64_t off, const uint8_t *d, uint64_t len)
{
    return ferry__tfr_data_at(name, record, off, d, len, d + len);
}

int ferry__tfr_open(ferry__tfr_reader *t, const char *path, const char *name, int compression,
                    uint64_t max)
{
    memset(t, 0, sizeof *t);
    t->max = max;
    return ferry__seqread_open(&t->r, path, name, compression, WINDOW);
}

void ferry__tfr_close(ferry__tfr_reader *t)
{
    ferry__seqread_close(&t->r);
}

int ferry__tfr_next(ferry__tfr_reader *t, const uint8_t **data, size_t *n, uint64_t *off,
                    int check_data)
{
    ferry__seqread *r = &t->r;
    size_t got;
    uint64_t len, skipped;
    int rc;
    const char *where = r->gzip ? " (decompressed)" : "";
    *off = r->off;
    if ((rc = ferry__seqread_need(r, FERRY__TFR_HEADER, &got)) < 0)
        return rc;
    if (got == 0)
        return FERRY_END;
    if (got < FERRY__TFR_HEADER)
        return ferry__err(
            FERRY_ECORRUPT, "%s: record %llu at offset %llu%s: truncated header (%zu of 12 bytes)",
            r->name, (unsigned long long)t->record, (unsigned long long)*off, where, got);
    if ((rc = ferry__tfr_header(r->name, t->record, *off, r->buf + r->pos, t->max, &len)) < 0)
        return rc;
    if (!check_data && !r->gzip) {
        /* an index scan of a plain file: the data need not be read */
        if ((rc = ferry__seqread_skip(r, FERRY__TFR_OVERHEAD + len, &skipped)) < 0)
            return rc;
        if (skipped < FERRY__TFR_OVERHEAD + len || r->off > r->f.size)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: truncated: %llu data bytes and "
                              "a CRC do not fit in the file's %llu bytes",
                              r->name, (unsigned long long)t->record, (unsigned long long)*off,
                              (unsigned long long)len, (unsigned long long)r->f.size);
        *data = NULL;
        *n = (size_t)len;
        t->record++;
        return 0;
    }
    if ((rc = ferry__seqread_need(r, FERRY__TFR_OVERHEAD + (size_t)len, &got)) < 0)
        return rc;
    if (got < FERRY__TFR_OVERHEAD + len)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu%s: truncated: %llu data bytes and a CRC "
                          "announced, %zu there",
                          r->name, (unsigned long long)t->record, (unsigned long long)*off, where,
                          (unsigned long long)len,
                          got > FERRY__TFR_HEADER ? got - FERRY__TFR_HEADER : 0);
    const uint8_t *d = r->buf + r->pos + FERRY__TFR_HEADER;
    if ((rc = ferry__tfr_data(r->name, t->record, *off, d, len)) < 0)
        return rc;
    *data = d;
    *n = (size_t)len;
    t->record++;
    return ferry__seqread_skip(r, FERRY__TFR_OVERHEAD + len, &skipped);
}
