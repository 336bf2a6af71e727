/*
 * Fuzz target: a CSV part file as the stream reads it, plain or compressed. The
 * input is written as part-00000 of a fresh directory; the stream (three int64
 * columns, the column count fixed so that opening never reads the file) then
 * reads every row it can: gzip and zstd decoding, damaged and truncated
 * compressed data, long lines passed over, bad rows. With the first byte odd the
 * rest is first wrapped in a gzip member, so that the fuzzer reaches the rows
 * behind the decoder as well as the decoder itself. Then the position: a state
 * saved after k calls (k taken from the input) and restored into a fresh iterator
 * must give the rest of the calls unchanged, and every row read again by its pos
 * must be the row. A difference aborts.
 */
#include <ferry/ferry.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "scratch.h"

static void write_part(const uint8_t *data, size_t size)
{
    FILE *f = fopen(fuzz_path, "wb");
    if (!f)
        abort();
    if (size && (data[0] & 1)) {
        uLong cap = compressBound((uLong)size) + 64;
        uint8_t *gz = malloc(cap);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (!gz || deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            abort();
        zs.next_in = (Bytef *)data + 1;
        zs.avail_in = (uInt)(size - 1);
        zs.next_out = gz;
        zs.avail_out = (uInt)cap;
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
            abort();
        fwrite(gz, 1, cap - zs.avail_out, f);
        deflateEnd(&zs);
        free(gz);
    } else if (size) {
        fwrite(data + 1, 1, size - 1, f);
    }
    fclose(f);
}

#define MAX_CALLS 2000

typedef struct {
    int rc;
    int64_t row[3];
    ferry_pos pos;
} call;

static int next_call(ferry_stream_iter *it, ferry_ctx *ctx, call *c)
{
    memset(c, 0, sizeof *c);
    int64_t row[3] = {0}, len[1];
    void *p[1] = {row};
    ferry_sample s = {1, p, len, {0}};
    c->rc = ferry_stream_next(it, &s, ctx);
    if (c->rc == 0) {
        memcpy(c->row, row, sizeof row);
        c->pos = s.pos;
    }
    return c->rc;
}

static call calls[MAX_CALLS];

static bool same_call(const call *a, const call *b)
{
    return a->rc == b->rc && !memcmp(a->row, b->row, sizeof a->row) &&
           !memcmp(&a->pos, &b->pos, sizeof a->pos);
}

/* Resumes after k of the n calls, and fetches every row again. */
static void check_positions(ferry_stream *st, ferry_ctx *ctx, size_t n, size_t k)
{
    ferry_stream_iter *it;
    call c;
    uint8_t state[256];
    size_t len;
    if (ferry_stream_open(st, 0, 1, 0, &it) != 0)
        abort();
    for (size_t i = 0; i < k; i++)
        next_call(it, ctx, &c);
    if (ferry_stream_save(it, state, sizeof state, &len) != 0)
        abort();
    ferry_stream_close(it);
    if (ferry_stream_open(st, 0, 1, 0, &it) != 0 || ferry_stream_restore(it, state, len, ctx) != 0)
        abort();
    for (size_t i = k; i < n; i++)
        if (next_call(it, ctx, &c) != calls[i].rc || !same_call(&c, &calls[i]))
            abort();
    for (size_t i = 0; i < n; i++) {
        if (calls[i].rc != 0)
            continue;
        int64_t row[3], lens[1];
        void *p[1] = {row};
        ferry_sample s = {1, p, lens, {0}};
        if (ferry_stream_fetch(it, &calls[i].pos, &s, ctx) != 0 ||
            memcmp(row, calls[i].row, sizeof row))
            abort();
    }
    ferry_stream_close(it);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz", "part-00000");
    write_part(data, size);
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = fuzz_dir;
    o.cols = 3;
    o.dtype = FERRY_I64;
    o.missing = "0";
    ferry_stream *st;
    if (ferry_stream_csv(&st, &o) != 0)
        return 0;
    ferry_stream_iter *it;
    ferry_ctx *ctx;
    if (ferry_ctx_create(&ctx, 0, 0) != 0 || ferry_stream_open(st, 0, 1, 0, &it) != 0)
        abort();
    size_t n = 0;
    for (int i = 0; i < 100000; i++) { /* every call either reads or ends */
        call c;
        int rc = next_call(it, ctx, &c);
        if (n < MAX_CALLS)
            calls[n++] = c;
        if (rc == FERRY_END)
            break;
    }
    ferry_stream_close(it);
    if (n < MAX_CALLS) {
        check_positions(st, ctx, n, size % (n + 1));
        check_positions(st, ctx, n, n / 2);
    }
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    return 0;
}
