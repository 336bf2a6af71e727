/*
 * Fuzz target: TFRecord framing and the datasets over it. The input is a file's
 * bytes. It is read as a stream and map-style, raw and decoded (schema inferred
 * from it), and again with every frame's CRCs made right, so the fuzzer gets past
 * the CRCs to the lengths and the Example parser. What comes out is held to the
 * input: a raw record must be within the file's bytes, lengths within bounds.
 * Each input also goes through the check a fetched copy passes before it enters
 * the remote cache.
 */
#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/tfrecord.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "formats/tfrecord_internal.h"
#include "read_all.h"
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

typedef struct input {
    const uint8_t *data;
    size_t size;
} input;

/* raw: a record is never longer than the file (a gzip file inflates to more) */
static void check_raw(const ferry_sample *s, void *arg)
{
    const input *in = arg;
    if ((size_t)s->length[0] > in->size && in->data[0] != 0x1f)
        abort();
}

static void run(const uint8_t *data, size_t size, ferry_ctx *ctx)
{
    if (fuzz_write(data, size) != 0)
        return;
    /* the check a fetched copy passes before it enters the remote cache: an error
     * names the object's URL, never the file it was given */
    int rc = ferry__tfr_check_copy(fuzz_path, "s3://bucket/key");
    if (rc < 0 && !strstr(ferry_last_errmsg(), "s3://bucket/key"))
        abort();
    input in = {data, size};
    for (int raw = 0; raw <= 1; raw++) {
        ferry_tfrecord_opts o = {.raw = raw, .infer = 50, .max_record = 1 << 20};
        ferry_dataset *ds;
        ferry_stream *st;
        if (ferry_dataset_tfrecord(&ds, fuzz_path, &o) == 0) {
            fuzz_read_all(ds, NULL, ctx, MAX_READS, MAX_SAMPLE_BYTES, raw ? check_raw : NULL, &in);
            ferry_dataset_free(ds);
        }
        if (ferry_stream_tfrecord(&st, fuzz_path, &o, 1) == 0) {
            fuzz_read_all(NULL, st, ctx, MAX_READS, MAX_SAMPLE_BYTES, raw ? check_raw : NULL, &in);
            ferry_stream_free(st);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-tfrecord", "in.tfrecord");
    return fuzz_as_is_and_fixed(data, size, run, fix_crcs);
}
