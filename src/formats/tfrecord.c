/*
 * TFRecord files: the framing, both CRCs checked.
 */
#include "../core/bytes.h"
#include "../core/guard.h"
#include "../io/io.h"
#include "tfrecord_internal.h"

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

int ferry__tfr_header(const char *name, uint64_t record, uint64_t off, const uint8_t *h,
                      uint64_t max, uint64_t *len)
{
    uint32_t want = ferry__tfr_mask(crc32c(h, 8)), got = ferry__load_le32(h + 8);
    *len = ferry__load_le64(h);
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
    return ferry__tfr_data_crc(name, record, off, crc32c(d, (size_t)len), len, crc);
}

int ferry__tfr_data_crc(const char *name, uint64_t record, uint64_t off, uint32_t computed,
                        uint64_t len, const uint8_t *crc)
{
    uint32_t want = ferry__tfr_mask(computed), got = ferry__load_le32(crc);
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
                    uint64_t max, size_t window)
{
    memset(t, 0, sizeof *t);
    t->max = max;
    return ferry__seqread_open(&t->r, path, name, compression, window ? window : WINDOW);
}

void ferry__tfr_close(ferry__tfr_reader *t)
{
    ferry__seqread_close(&t->r);
}

/* Framing errors: nothing after them can be trusted. */
static int broken(ferry__tfr_reader *t, int rc)
{
    t->broken = true;
    return rc;
}

/* The next record's header, checked: 0 with *len, FERRY_END, or an error. */
static int header(ferry__tfr_reader *t, uint64_t *off, uint64_t *len)
{
    ferry__seqread *r = &t->r;
    size_t got;
    int rc;
    *off = r->off;
    if (t->broken)
        return ferry__err(FERRY_ECORRUPT, "%s: the file cannot be read past record %llu", r->name,
                          (unsigned long long)t->record);
    if ((rc = ferry__seqread_need(r, FERRY__TFR_HEADER, &got)) < 0)
        return broken(t, rc);
    if (got == 0)
        return FERRY_END;
    if (got < FERRY__TFR_HEADER)
        return broken(t,
                      ferry__err(FERRY_ECORRUPT,
                                 "%s: record %llu at offset %llu%s: truncated header (%zu of "
                                 "12 bytes)",
                                 r->name, (unsigned long long)t->record, (unsigned long long)*off,
                                 r->compressed ? " (decompressed)" : "", got));
    if ((rc = ferry__tfr_header(r->name, t->record, *off, r->buf + r->pos, t->max, len)) < 0)
        return broken(t, rc);
    return 0;
}

static int truncated(ferry__tfr_reader *t, uint64_t off, uint64_t len, uint64_t there)
{
    return broken(t, ferry__err(FERRY_ECORRUPT,
                                "%s: record %llu at offset %llu%s: truncated: %llu data bytes and "
                                "a CRC announced, %llu there",
                                t->r.name, (unsigned long long)t->record, (unsigned long long)off,
                                t->r.compressed ? " (decompressed)" : "", (unsigned long long)len,
                                (unsigned long long)there));
}

int ferry__tfr_next(ferry__tfr_reader *t, const uint8_t **data, size_t *n, uint64_t *off,
                    int check_data)
{
    ferry__seqread *r = &t->r;
    size_t got;
    uint64_t len = 0, skipped;
    int rc = header(t, off, &len);
    if (rc != 0)
        return rc;
    if (!check_data && !r->compressed) {
        /* an index scan of a plain file: the data need not be read */
        if ((rc = ferry__seqread_skip(r, FERRY__TFR_OVERHEAD + len, &skipped)) < 0)
            return broken(t, rc);
        if (skipped < FERRY__TFR_OVERHEAD + len || r->off > r->f.size)
            return truncated(t, *off, len,
                             skipped > FERRY__TFR_OVERHEAD ? skipped - FERRY__TFR_OVERHEAD : 0);
        *data = NULL;
        *n = (size_t)len;
        t->record++;
        return 0;
    }
    if ((rc = ferry__seqread_need(r, FERRY__TFR_OVERHEAD + (size_t)len, &got)) < 0)
        return broken(t, rc);
    if (got < FERRY__TFR_OVERHEAD + len)
        return truncated(t, *off, len, got > FERRY__TFR_HEADER ? got - FERRY__TFR_HEADER : 0);
    const uint8_t *d = r->buf + r->pos + FERRY__TFR_HEADER;
    int crc = ferry__tfr_data(r->name, t->record, *off, d, len);
    *data = d;
    *n = (size_t)len;
    t->record++;
    /* a bad data CRC spoils this record only: the framing goes on after it */
    if ((rc = ferry__seqread_skip(r, FERRY__TFR_OVERHEAD + len, &skipped)) < 0)
        return broken(t, rc);
    return crc;
}

int ferry__tfr_next_into(ferry__tfr_reader *t, uint8_t *dst, size_t cap, size_t *n, uint64_t *off)
{
    ferry__seqread *r = &t->r;
    uint64_t len = 0, skipped;
    size_t got;
    int rc = header(t, off, &len);
    if (rc != 0)
        return rc;
    uint64_t rec = t->record;
    if ((rc = ferry__seqread_skip(r, FERRY__TFR_HEADER, &skipped)) < 0)
        return broken(t, rc);
    if (len > cap) {
        int over = ferry__err(FERRY_EOVERFLOW,
                              "%s: record %llu at offset %llu: %llu bytes, over the bound of "
                              "\"data\" (%zu; give max=)",
                              r->name, (unsigned long long)rec, (unsigned long long)*off,
                              (unsigned long long)len, cap);
        if ((rc = ferry__seqread_skip(r, len + 4, &skipped)) < 0)
            return broken(t, rc);
        if (skipped < len + 4)
            return truncated(t, *off, len, skipped);
        t->record++;
        return over;
    }
    if (len + 4 <= r->cap / 4) {
        /* small: the data and its CRC in the window, checked while copied out */
        if ((rc = ferry__seqread_need(r, (size_t)len + 4, &got)) < 0)
            return broken(t, rc);
        if (got < len + 4)
            return truncated(t, *off, len, got < len ? got : len);
        const uint8_t *d = r->buf + r->pos;
        int crc = ferry__tfr_data_crc(r->name, rec, *off,
                                      ferry__crc32c_copy(0, dst, d, (size_t)len), len, d + len);
        if ((rc = ferry__seqread_skip(r, len + 4, &skipped)) < 0)
            return broken(t, rc);
        *n = (size_t)len;
        t->record++;
        return crc;
    }
    if ((rc = ferry__seqread_read(r, dst, (size_t)len, &got)) < 0)
        return broken(t, rc);
    if (got < len)
        return truncated(t, *off, len, got);
    if ((rc = ferry__seqread_need(r, 4, &got)) < 0)
        return broken(t, rc);
    if (got < 4)
        return truncated(t, *off, len, len);
    int crc = ferry__tfr_data_at(r->name, rec, *off, dst, len, r->buf + r->pos);
    if ((rc = ferry__seqread_skip(r, 4, &skipped)) < 0)
        return broken(t, rc);
    *n = (size_t)len;
    t->record++;
    return crc;
}

/* Walks the frames of the mapping m (of size n); a function of its own, so that
 * the guarded caller keeps nothing it changes in registers. */
static int check_frames(const uint8_t *m, uint64_t n, const char *url)
{
    uint64_t off = 0, record = 0, len;
    int rc;
    while (off < n) {
        if (n - off < FERRY__TFR_HEADER)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: truncated header (%llu of 12 bytes)",
                              url, (unsigned long long)record, (unsigned long long)off,
                              (unsigned long long)(n - off));
        if ((rc = ferry__tfr_header(url, record, off, m + off, UINT64_MAX, &len)) < 0)
            return rc;
        if (len > n - off - FERRY__TFR_HEADER || n - off - FERRY__TFR_HEADER - len < 4)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: truncated: %llu data bytes and a "
                              "CRC announced, %llu there",
                              url, (unsigned long long)record, (unsigned long long)off,
                              (unsigned long long)len,
                              (unsigned long long)(n - off - FERRY__TFR_HEADER));
        if ((rc = ferry__tfr_data(url, record, off, m + off + FERRY__TFR_HEADER, len)) < 0)
            return rc;
        off += FERRY__TFR_OVERHEAD + len;
        record++;
    }
    return 0;
}

int ferry__tfr_check_copy(const char *path, const char *url)
{
    ferry__map m;
    int rc;
    if ((rc = ferry__guard_install()) < 0 || (rc = ferry__map_file(&m, path)) < 0)
        return rc;
    if (ferry__compression_of(m.data, m.size < 8 ? m.size : 8)) {
        ferry__unmap(&m);
        return 0;
    }
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0)) {
        rc = ferry__guard_err(g.addr, url, m.data, "checking its records");
        ferry__unmap(&m);
        return rc;
    }
    rc = check_frames(m.data, m.size, url);
    ferry__guard_pop(&g);
    ferry__unmap(&m);
    return rc;
}
