/*
 * Fuzz target: source descriptions ("kind:location,key=value,...") as the CLI and
 * the Python module take them. Whatever opens must also read a few samples.
 */
#include <ferry/ferry.h>

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = malloc(size + 1);
    if (!spec)
        return 0;
    memcpy(spec, data, size);
    spec[size] = 0;
    ferry_dataset *ds = NULL;
    if (ferry_dataset_open(&ds, spec) == 0) {
        /* read up to 3 samples when they are small enough for a fuzzer's memory */
        int nf = ferry_dataset_nfields(ds);
        size_t total = 0;
        for (int f = 0; f < nf; f++)
            total += ferry_field_nbytes(ferry_dataset_field(ds, f));
        /* samples that sleep (sleep_us) would only slow the fuzzer down */
        if (total <= (1u << 20) && !strstr(spec, "sleep_us")) {
            ferry_ctx *ctx = NULL;
            uint8_t *buf = malloc(total ? total : 1);
            if (buf && ferry_ctx_create(&ctx, 1, 0) == 0) {
                void *ptrs[FERRY_MAX_FIELDS];
                int64_t lens[FERRY_MAX_FIELDS] = {0};
                size_t off = 0;
                for (int f = 0; f < nf; f++) {
                    ptrs[f] = buf + off;
                    off += ferry_field_nbytes(ferry_dataset_field(ds, f));
                }
                ferry_sample s = {nf, ptrs, lens};
                uint64_t n = ferry_dataset_len(ds);
                for (uint64_t i = 0; i < n && i < 3; i++)
                    if (ferry_dataset_get(ds, i, &s, ctx) == 0)
                        for (int f = 0; f < nf; f++)
                            if (ferry_dataset_field(ds, f)->variable &&
                                (lens[f] < 0 || lens[f] > ferry_dataset_field(ds, f)->shape[0]))
                                abort(); /* a dataset broke its own schema */
            }
            ferry_ctx_free(ctx);
            free(buf);
        }
        ferry_dataset_free(ds);
    }
    free(spec);
    return 0;
}
