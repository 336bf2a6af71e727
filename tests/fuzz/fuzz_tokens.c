/*
 * Fuzz target: llm.c token shards. The input is a whole shard file. What the
 * header check accepts must agree with the size; a shard that opens as a dataset
 * (windows of 5 tokens, in the shard's dtype and widened to int32 and int64) reads
 * every window: only a token over int32's range may fail, and only widened to it.
 */
#include <ferry/ferry.h>

#include "formats/tokens_internal.h"
#include "scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void read_windows(const char *out)
{
    char spec[400];
    snprintf(spec, sizeof spec, "tokens:%s,seq=4%s", fuzz_path, out);
    ferry_dataset *ds = NULL;
    if (ferry_dataset_open(&ds, spec) != 0)
        return;
    ferry_ctx *ctx;
    if (ferry_ctx_create(&ctx, 0, 0) != 0)
        abort();
    void *bufs[2] = {malloc(64), malloc(64)};
    int64_t len[2];
    if (!bufs[0] || !bufs[1] || ferry_dataset_nfields(ds) != 2 ||
        ferry_field_nbytes(ferry_dataset_field(ds, 0)) > 64)
        abort();
    ferry_sample s = {2, bufs, len, {0}};
    uint64_t n = ferry_dataset_len(ds);
    for (uint64_t i = 0; i < n && i < 4096; i++) {
        int rc = ferry_dataset_get(ds, i, &s, ctx);
        if (rc != 0 && !(rc == FERRY_EOVERFLOW && !strcmp(out, ",out=i32")))
            abort(); /* a shard that opened reads whole */
    }
    free(bufs[0]);
    free(bufs[1]);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    unsigned tsize = 0;
    uint64_t count = 0;
    if (ferry__tokens_header(buf, size, size, "fuzz.bin", &tsize, &count) == 0 &&
        ((tsize != 2 && tsize != 4) || size < 1024 || count > (size - 1024) / tsize))
        abort();
    fuzz_scratch("ferry-fuzz-tokens", "train_000.bin");
    if (fuzz_write(buf, size) != 0)
        abort();
    read_windows("");
    read_windows(",out=i32");
    read_windows(",out=i64");
    unlink(fuzz_path);
    free(buf);
    return 0;
}
