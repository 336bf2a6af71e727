/*
 * Fuzz target: the saved positions of a decorator chain and of a stream loader,
 * which a resume reads as untrusted input (the file streams' own positions have
 * fuzz_stream_state.c). The first byte picks the reader:
 *   0: a stream iterator's state (ferry_stream_restore), the rest being its body;
 *      the target puts the header (magic, version, checksum, length) in front.
 *   1: a stream loader's state (ferry_loader_state_resume), the rest being the
 *      blob without its CRC, which the target appends.
 * So the checksums do not hide the parsers from the fuzzer. The chain is the
 * same in both: synthetic samples (a variable field), shard, shuffle, group by
 * length, repeat, skip and take. What is accepted is then read: every event must
 * come back without a crash, and never more than the chain can give.
 */
#include <ferry/ferry.h>
#include <ferry/stream.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ferry_dataset *ds;

static ferry_stream *chain(void)
{
    if (!ds) {
        ferry_stream *none = NULL;
        if (ferry_source_open("synthetic:300,bytes=8,var=12,classes=5", &ds, &none) != 0)
            abort();
    }
    ferry_stream *st;
    int rc = ferry_stream_from_dataset(&st, ds);
    if (!rc)
        rc = ferry_stream_shard(&st, st, 0, 1);
    if (!rc)
        rc = ferry_stream_shuffle(&st, st, 9, 4);
    if (!rc)
        rc = ferry_stream_group_by_length(&st, st, 2, 3, 4, 10);
    if (!rc)
        rc = ferry_stream_repeat(&st, st, 2);
    if (!rc)
        rc = ferry_stream_skip(&st, st, 3);
    if (!rc)
        rc = ferry_stream_take(&st, st, 500);
    if (rc)
        abort();
    return st;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void stream_state(const uint8_t *body, size_t n)
{
    uint8_t *buf = malloc(n + 16);
    if (!buf)
        abort();
    put32(buf, 0x50545346u); /* "FSTP" */
    put32(buf + 4, 1);
    put32(buf + 8, ferry_crc32c(0, body, n));
    put32(buf + 12, (uint32_t)n);
    if (n)
        memcpy(buf + 16, body, n);
    ferry_stream *st = chain();
    ferry_ctx *ctx;
    ferry_stream_iter *it;
    if (ferry_ctx_create(&ctx, 0, 0) || ferry_stream_open(st, 0, 2, 0, &it))
        abort();
    if (ferry_stream_restore(it, buf, n + 16, ctx) == 0) {
        int nf = ferry_stream_nfields(st);
        void *data[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        for (int f = 0; f < nf; f++)
            if (!(data[f] = malloc(ferry_field_nbytes(ferry_stream_field(st, f)) + 1)))
                abort();
        int samples = 0;
        for (int k = 0; k < 2000; k++) {
            memset(len, 0, sizeof len);
            ferry_sample s = {nf, data, len, {0}};
            int rc = ferry_stream_next(it, &s, ctx);
            if (rc == FERRY_END)
                break;
            samples += rc == 0;
        }
        if (samples > 500) /* take 500 */
            abort();
        for (int f = 0; f < nf; f++)
            free(data[f]);
    }
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    free(buf);
}

static void loader_state(const uint8_t *body, size_t n)
{
    uint8_t *buf = malloc(n + 4);
    if (!buf)
        abort();
    if (n)
        memcpy(buf, body, n);
    put32(buf + n, ferry_crc32c(0, body, n));
    ferry_stream *st = chain();
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = 4;
    o.num_workers = 0;
    o.stream_shards = 2;
    o.rank = 0;
    o.world_size = 1;
    o.seed = 1;
    ferry_loader *l;
    if (ferry_loader_create_stream(&l, st, &o))
        abort();
    /* the check made when a state is loaded (Python's load_state_dict) never
     * refuses what the resume accepts */
    uint64_t epoch, first;
    int checked = ferry_loader_state_check(l, buf, n + 4, &epoch, &first);
    int resumed = ferry_loader_state_resume(l, buf, n + 4);
    if (resumed == 0 && checked != 0)
        abort();
    if (resumed == 0) {
        for (int k = 0; k < 600; k++) {
            ferry_batch *b;
            int rc = ferry_loader_next(l, &b);
            if (rc != 0)
                break;
            ferry_batch_release(b);
        }
    }
    ferry_loader_free(l);
    ferry_stream_free(st);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 0)
        stream_state(data + 1, size - 1);
    else if (data[0] == 1)
        loader_state(data + 1, size - 1);
    return 0;
}
