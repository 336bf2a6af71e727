/*
 * Fuzz target: source descriptions ("kind:location,key=value,...") as the CLI and
 * the Python module take them. Whatever opens must also read a few samples.
 */
#include <ferry/ferry.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Options of the synthetic source that make each sample cost time on purpose
 * (cost= loops, sleep_us= sleeps): over these caps the harness reads no sample, so
 * that an input cannot burn seconds of the fuzzer's time. Every occurrence of the
 * key counts, whatever the source does with repeats. */
#define MAX_COST 10000u
static bool too_slow(const char *spec)
{
    static const struct {
        const char *key;
        unsigned long long cap;
    } caps[] = {{"cost=", MAX_COST}, {"sleep_us=", 0}};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        size_t n = strlen(caps[k].key);
        for (const char *p = spec; (p = strstr(p, caps[k].key)); p += n) {
            if (p != spec && p[-1] != ',' && p[-1] != ':')
                continue;
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p + n, &end, 0);
            if (errno || v > caps[k].cap || (*end && *end != ','))
                return true;
        }
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = malloc(size + 1);
    if (!spec)
        return 0;
    memcpy(spec, data, size);
    spec[size] = 0;
    ferry_dataset *ds = NULL;
    /* remote locations (s3://, http(s)://) would go to the network and the cache:
     * their parsers have targets of their own (fuzz_remote_url, fuzz_s3_xml) */
    if (strstr(spec, "://") || strstr(spec, "cache")) {
        free(spec);
        return 0;
    }
    if (ferry_dataset_open(&ds, spec) == 0) {
        /* read up to 3 samples when they are small enough for a fuzzer's memory */
        int nf = ferry_dataset_nfields(ds);
        size_t total = 0;
        for (int f = 0; f < nf; f++)
            total += ferry_field_nbytes(ferry_dataset_field(ds, f));
        if (total <= (1u << 20) && !too_slow(spec)) {
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
                ferry_sample s = {nf, ptrs, lens, {0}};
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
