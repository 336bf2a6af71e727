/*
 * Fuzz target: tar archives as WebDataset shards. The input is a tar's bytes
 * (or a gzipped tar's). It is read map-style (uncompressed) and as a stream, all
 * fields inferred, and again with every header block's checksum made right, so
 * the fuzzer reaches sizes, long names, pax records and the grouping into samples.
 * Each input also goes through the check a fetched copy passes before it enters
 * the remote cache.
 */
#include <ferry/ferry.h>
#include <ferry/wds.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "formats/tar.h"
#include "read_all.h"
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

static void run(const uint8_t *data, size_t size, ferry_ctx *ctx)
{
    if (fuzz_write(data, size) != 0)
        return;
    /* the check a fetched copy passes before it enters the remote cache: an error
     * names the object's URL, never the file it was given */
    int rc = ferry__tar_check_copy(fuzz_path, "s3://bucket/key");
    if (rc < 0 && !strstr(ferry_last_errmsg(), "s3://bucket/key"))
        abort();
    for (int skip = 0; skip <= 1; skip++) {
        ferry_wds_opts o = {.missing = skip, .max_member = 1 << 20, .infer = 20};
        ferry_dataset *ds;
        ferry_stream *st;
        if (ferry_dataset_wds(&ds, fuzz_path, &o) == 0) {
            fuzz_read_all(ds, NULL, ctx, MAX_READS, MAX_SAMPLE_BYTES, NULL, NULL);
            ferry_dataset_free(ds);
        }
        if (ferry_stream_wds(&st, fuzz_path, &o, 1) == 0) {
            fuzz_read_all(NULL, st, ctx, MAX_READS, MAX_SAMPLE_BYTES, NULL, NULL);
            ferry_stream_free(st);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-tar", "in.tar");
    return fuzz_as_is_and_fixed(data, size, run, fix_sums);
}
