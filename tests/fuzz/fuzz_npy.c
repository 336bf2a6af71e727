/*
 * Fuzz target: the .npy header parser and the npy dataset. The input is a whole
 * .npy file. What the parser accepts must hold together (members inside the
 * element, the data offset inside the header it read); a file whose size agrees
 * with its header is then opened as a dataset and every row read, which walks
 * the byte-swapping, structured and Fortran-order copies.
 */
#include <ferry/ferry.h>
#include <ferry/npy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "scratch.h"

static void read_rows(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz", "a.npy");
    FILE *f = fopen(fuzz_path, "wb");
    if (!f)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    char spec[400];
    snprintf(spec, sizeof spec, "npy:%s", fuzz_path);
    ferry_dataset *ds = NULL;
    if (ferry_dataset_open(&ds, spec) == 0) {
        ferry_ctx *ctx;
        if (ferry_ctx_create(&ctx, 0, 0) != 0)
            abort();
        int nf = ferry_dataset_nfields(ds);
        void *bufs[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        uint64_t row = 0;
        for (int k = 0; k < nf; k++)
            row += ferry_field_nbytes(ferry_dataset_field(ds, k));
        if (row > ((uint64_t)64 << 20)) { /* a small file may claim huge rows: not read here */
            ferry_ctx_free(ctx);
            ferry_dataset_free(ds);
            unlink(fuzz_path);
            return;
        }
        for (int k = 0; k < nf; k++) {
            bufs[k] = malloc(ferry_field_nbytes(ferry_dataset_field(ds, k)) + 1);
            if (!bufs[k])
                abort();
        }
        ferry_sample s = {nf, bufs, len, {0}};
        uint64_t n = ferry_dataset_len(ds);
        for (uint64_t i = 0; i < n && i < 4096; i++)
            if (ferry_dataset_get(ds, i, &s, ctx) != 0)
                abort(); /* a file that opened reads whole */
        for (int k = 0; k < nf; k++)
            free(bufs[k]);
        ferry_ctx_free(ctx);
        ferry_dataset_free(ds);
    }
    unlink(fuzz_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry_npy_header h;
    int rc = ferry_npy_parse_header(buf, size, "fuzz.npy", &h);
    if (rc == 0) {
        if (h.data_offset > size || h.nmembers < 1 || h.nmembers > FERRY_MAX_FIELDS || h.ndim < 0 ||
            h.ndim > FERRY_MAX_DIMS || h.itemsize == 0)
            abort();
        for (int m = 0; m < h.nmembers; m++)
            if (h.members[m].offset + h.members[m].nbytes > h.itemsize)
                abort();
        if (h.data_bytes <= ((uint64_t)1 << 20) && h.data_offset + h.data_bytes == size)
            read_rows(buf, size);
    } else if (rc != FERRY_ECORRUPT && rc != FERRY_ENOTSUP && rc != FERRY_EOVERFLOW) {
        abort();
    }
    free(buf);
    return 0;
}
