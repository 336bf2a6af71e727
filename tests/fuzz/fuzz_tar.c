/*
 * Fuzz target: tar archives as WebDataset shards. The input is a tar's bytes
 * (or a gzipped tar's). It is read map-style (uncompressed) and as a stream, all
 * fields inferred, and again with every header block's checksum made right, so
 * the fuzzer reaches sizes, long names, pax records and the grouping into samples.
 */
#include <ferry/ferry.h>
#include <ferry/wds.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "scratch.h"
#include "fixed_sums.h"

#define MAX_READS 2000
#define MAX_SAMPLE_BYTES ((size_t)4 << 20)

static void fix_sums(uint8_t *b, size_t n)
{
    for (size_t at = 0; at + 512 <= n; at += 512) {
        uint8_t *h = b + at;
        if (memcmp(h + 257, "ustar", 5))
            continue;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += h[i];
        snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
        h[155] = ' ';
    }
}

static void read_all(ferry_dataset *ds, ferry_stream *st, ferry_ctx *ctx)
{
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    void *ptr[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    const ferry_field *f[FERRY_MAX_FIELDS];
    size_t total = 0;
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
    for (int skip = 0; skip <= 1; skip++) {
        ferry_wds_opts o = {.missing = skip, .max_member = 1 << 20, .infer = 20};
        ferry_dataset *ds;
        ferry_stream *st;
        if (ferry_dataset_wds(&ds, fuzz_path, &o) == 0) {
            read_all(ds, NULL, ctx);
            ferry_dataset_free(ds);
        }
        if (ferry_stream_wds(&st, fuzz_path, &o, 1) == 0) {
            read_all(NULL, st, ctx);
            ferry_stream_free(st);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-tar", "in.tar");
    return fuzz_as_is_and_fixed(data, size, run, fix_sums);
}
