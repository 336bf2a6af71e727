/*
 * Fuzz target: the record shard reader. The input is a shard file's bytes. It is
 * opened as it is and with FERRY_RECORD_RECOVER, and every record it admits (up to
 * a few thousand) is read zero-copy and decoded. What the reader hands out is held
 * to the input: raw bytes must be the file's bytes at the offset it names, and
 * decoded lengths must be within their fields' bounds.
 *
 * Random changes almost never survive the CRCs, so each input is also tried with
 * its CRCs made right (header, every record that fits, index and trailer): the
 * fuzzer then reaches the schema, the sizes, zstd and the field parser. Each input
 * also goes through the check a fetched copy passes before it enters the remote
 * cache.
 */
#include <ferry/ferry.h>
#include <ferry/records.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "formats/records_internal.h"
#include "scratch.h"
#include "fixed_sums.h"

#define MAX_READS 4096
#define MAX_SAMPLE_BYTES ((size_t)16 << 20) /* skip decoding schemas larger than this */

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void fix_crcs(uint8_t *b, size_t n)
{
    if (n < 24)
        return;
    /* flag bit 1: a 16-byte set identity between the header and the schema */
    size_t id = get32(b + 12) & 2 ? 16 : 0;
    uint32_t s = get32(b + 16);
    if (s > n - 24 || id > n - 24 - s)
        return;
    put32(b + 20, ferry_crc32c(ferry_crc32c(0, b, 20), b + 24, id + s));
    size_t pos = (24 + id + (size_t)s + 7) & ~(size_t)7, end = n;
    if (n >= 32 && pos <= n - 32 && !memcmp(b + n - 8, "FERRYEND", 8)) {
        uint8_t *t = b + n - 32;
        uint64_t count = get64(t), ix = get64(t + 8);
        end = n - 32;
        if (ix >= pos && ix <= end && count <= (end - ix) / 8) {
            put32(t + 16, ferry_crc32c(0, b + ix, (size_t)(8 * count)));
            end = (size_t)ix;
        }
        put32(t + 20, ferry_crc32c(0, t, 20));
    }
    while (pos <= end && end - pos >= 16) {
        uint32_t stored = get32(b + pos);
        if (stored > end - pos - 16)
            break;
        put32(b + pos + 8, ferry_crc32c(0, b + pos + 16, stored));
        put32(b + pos + 12, ferry_crc32c(0, b + pos, 12));
        pos = (pos + 16 + stored + 7) & ~(size_t)7;
    }
}

static void read_all(ferry_record_file *f, const uint8_t *data, size_t size, ferry_ctx *ctx)
{
    uint64_t n = ferry_record_file_count(f);
    int nf = ferry_record_file_nfields(f);
    void *ptr[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    for (int k = 0; k < nf; k++)
        total += ferry_field_nbytes(ferry_record_file_field(f, k));
    int decode = total <= MAX_SAMPLE_BYTES;
    for (int k = 0; decode && k < nf; k++)
        if (!(ptr[k] = malloc(ferry_field_nbytes(ferry_record_file_field(f, k)) + 1)))
            decode = 0;
    ferry_sample s = {nf, ptr, len, {0}};
    for (uint64_t i = 0; i < n && i < MAX_READS; i++) {
        const void *p;
        size_t sz;
        uint64_t off;
        if (ferry_record_file_raw(f, i, &p, &sz, &off) == 0) {
            /* the payload follows its 16-byte header, inside the file */
            if (off > size || size - off < 16 || sz > size - off - 16 ||
                memcmp(p, data + off + 16, sz) != 0)
                abort();
        }
        if (!decode)
            continue;
        for (int k = 0; k < nf; k++)
            len[k] = -1;
        if (ferry_record_file_read(f, i, &s, ctx) == 0)
            for (int k = 0; k < nf; k++) {
                const ferry_field *fl = ferry_record_file_field(f, k);
                if (fl->variable && (len[k] < 0 || len[k] > fl->shape[0]))
                    abort();
            }
    }
    const void *p;
    size_t sz;
    if (ferry_record_file_raw(f, n, &p, &sz, NULL) != FERRY_ERANGE)
        abort();
    for (int k = 0; k < nf; k++)
        free(ptr[k]);
}

static void run(const uint8_t *data, size_t size, ferry_ctx *ctx)
{
    if (fuzz_write(data, size) != 0)
        return;
    /* the check a fetched copy passes before it enters the remote cache: an error
     * names the file (the cache puts the object's URL in its place) */
    int rc = ferry__records_check_copy(fuzz_path, "s3://bucket/key");
    if (rc < 0 && !strstr(ferry_last_errmsg(), fuzz_path))
        abort();
    for (int flags = 0; flags <= FERRY_RECORD_RECOVER; flags++) {
        ferry_record_file *f;
        if (ferry_record_file_open(&f, fuzz_path, flags) != 0)
            continue;
        read_all(f, data, size, ctx);
        ferry_record_file_free(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-records", "in.ferry");
    return fuzz_as_is_and_fixed(data, size, run, fix_crcs);
}
