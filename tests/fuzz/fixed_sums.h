/*
 * For fuzz targets of formats with checksums: each input runs as it is, then again
 * with its checksums made right, so that the fuzzer also reaches what lies behind
 * the checks instead of stopping at the first CRC.
 */
#ifndef FERRY_FUZZ_FIXED_SUMS_H
#define FERRY_FUZZ_FIXED_SUMS_H

#include <ferry/dataset.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fuzz_as_is_and_fixed(const uint8_t *data, size_t size,
                                void (*run)(const uint8_t *, size_t, ferry_ctx *),
                                void (*fix)(uint8_t *, size_t))
{
    ferry_ctx *ctx;
    if (ferry_ctx_create(&ctx, 0, 0) != 0)
        return 0;
    run(data, size, ctx);
    uint8_t *fixed = malloc(size + 1);
    if (fixed) {
        memcpy(fixed, data, size);
        fix(fixed, size);
        if (memcmp(fixed, data, size) != 0)
            run(fixed, size, ctx);
        free(fixed);
    }
    ferry_ctx_free(ctx);
    return 0;
}

#endif
