/*
 * Fuzz target: TFRecord framing and the datasets over it. The input is a file's
 * bytes. It is read as a stream and map-style, raw and decoded (schema inferred
 * from it), and again with every frame's CRCs made right, so the fuzzer gets past
 * the CRCs to the lengths and the Example parser. What comes out is held to the
 * input: a raw record must be within the file's bytes, lengths within bounds.
 */
#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/tfrecord.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "scratch.h"
#include "fixed_sums.h"

#define MAX_READS 2000
#define MAX_SAMPLE_BYTES ((size_t)4 << 20)

static uint32_t mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void fix_crcs(uint8_t *b, size_t n)
{
    size_t at = 0;
    while (n - at >= 16) {
        uint64_t len;
        memcpy(&len, b + at, 8);
        uint32_t c = mask(ferry_crc32c(0, b + at, 8));
        memcpy(b + at + 8, &c, 4);
        if (len > n - at - 16)
            break;
        c = mask(ferry_crc32c(0, b + at + 12, (size_t)len));
        memcpy(b + at + 12 + len, &c, 4);
        at += 16 + (size_t)len;
    }
}

static void read_all(ferry_dataset *ds, ferry_stream *st, const uint8_t *data, size_t size, int raw,
                     ferry_ctx *ctx)
{
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    void *ptr[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    const ferry_field *f[FERRY_MAX_FIELDS];
    for (int k = 0; k < nf; k++) {
        f[k] = ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k);
        total += ferry_field_nbytes(f[k]);
    }
    if (total > MAX_SAMPLE_BYTES)
        return;
    for (int k = 0; k < nf; k++)
        if (!(ptr[k] = malloc(ferry_field_nbytes(f[k]) + 1)))
            goto done;
    ferry_sample s = {nf, ptr, len, {0}};
    ferry_stream_iter *it = NULL;
    if (st && ferry_stream_open(st, 0, 1, 0, &it) != 0)
        goto done;
    uint64_t n = ds ? ferry_dataset_len(ds) : MAX_READS;
    for (uint64_t i = 0; i < n && i < MAX_READS; i++) {
        for (int k = 0; k < nf; k++)
            len[k] = -1;
        int rc = ds ? ferry_dataset_get(ds, i, &s, ctx) : ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END)
            break;
        if (rc != 0)
            continue;
        for (int k = 0; k < nf; k++)
            if (f[k]->variable && (len[k] < 0 || len[k] > f[k]->shape[0]))
                abort();
        if (raw && (size_t)len[0] > size) /* a record is never longer than the file */
            if (data[0] != 0x1f)          /* (a gzip file inflates to more) */
                abort();
    }
    ferry_stream_close(it);
done:
    for (int k = 0; k < nf; k++)
        free(ptr[k]);
}

static void run(const uint8_t *data, size_t size, ferry_ctx *ctx)
{
    FILE *fp = fopen(fuzz_path, "wb");
    if (!fp)
        return;
    size_t wrote = fwrite(data, 1, size, fp);
    if (fclose(fp) != 0 || wrote != size)
        return;
    for (int raw = 0; raw <= 1; raw++) {
        ferry_tfrecord_opts o = {.raw = raw, .infer = 50, .max_record = 1 << 20};
        ferry_dataset *ds;
        ferry_stream *st;
        if (ferry_dataset_tfrecord(&ds, fuzz_path, &o) == 0) {
            read_all(ds, NULL, data, size, raw, ctx);
            ferry_dataset_free(ds);
        }
        if (ferry_stream_tfrecord(&st, fuzz_path, &o, 1) == 0) {
            read_all(NULL, st, data, size, raw, ctx);
            ferry_stream_free(st);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-tfrecord", "in.tfrecord");
    return fuzz_as_is_and_fixed(data, size, run, fix_crcs);
}
