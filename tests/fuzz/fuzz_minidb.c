/*
 * Fuzz target: Caffe2's minidb framing. The input is a whole minidb file. It is
 * opened through ferry_db, as a dataset and as a stream (values decoded as Datum,
 * TensorProtos or raw, as the first entry says); every entry it admits is read.
 * Every error must name the file, every entry handed out must lie inside the
 * input, and the stream must hand out what the mapped reader does.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "scratch.h"

#define MAX_READS 4096

static void read_dataset(void)
{
    char spec[400];
    snprintf(spec, sizeof spec, "minidb:%s,max=65536", fuzz_path);
    ferry_dataset *ds;
    if (ferry_dataset_open(&ds, spec) < 0) {
        if (!strstr(ferry_last_errmsg(), fuzz_path))
            abort();
        return;
    }
    int nf = ferry_dataset_nfields(ds);
    void *bufs[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s = {.data = bufs, .length = len, .nfields = nf};
    ferry_ctx *ctx = NULL;
    for (int f = 0; f < nf; f++) {
        size_t n = ferry_field_nbytes(ferry_dataset_field(ds, f));
        if (n > ((size_t)64 << 20) || !(bufs[f] = malloc(n ? n : 1)))
            goto out;
    }
    if (ferry_ctx_create(&ctx, 0, 0) < 0)
        goto out;
    for (uint64_t i = 0; i < ferry_dataset_len(ds) && i < MAX_READS; i++)
        if (ferry_dataset_get(ds, i, &s, ctx) < 0 && !strstr(ferry_last_errmsg(), fuzz_path))
            abort();
out:
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++)
        free(bufs[f]);
    ferry_dataset_free(ds);
}

/* The stream reads the entries the mapped reader found, then ends (or fails
 * where the mapped reader's scan failed). */
static void read_stream(uint64_t entries, int mapped_ok)
{
    char spec[400];
    snprintf(spec, sizeof spec, "minidb:%s,stream=1,max=65536,max_entry=1048576", fuzz_path);
    ferry_dataset *none;
    ferry_stream *st;
    if (ferry_source_open(spec, &none, &st) < 0) {
        if (!strstr(ferry_last_errmsg(), fuzz_path))
            abort();
        return;
    }
    int nf = ferry_stream_nfields(st);
    void *bufs[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s = {.data = bufs, .length = len, .nfields = nf};
    ferry_ctx *ctx = NULL;
    ferry_stream_iter *it = NULL;
    for (int f = 0; f < nf; f++) {
        size_t n = ferry_field_nbytes(ferry_stream_field(st, f));
        if (n > ((size_t)64 << 20) || !(bufs[f] = malloc(n ? n : 1)))
            goto out;
    }
    if (ferry_ctx_create(&ctx, 0, 0) < 0 || ferry_stream_open(st, 0, 1, 0, &it) < 0)
        goto out;
    uint64_t seen = 0;
    int rc;
    while (seen < MAX_READS && (rc = ferry_stream_next(it, &s, ctx)) != FERRY_END) {
        if (rc < 0 && !strstr(ferry_last_errmsg(), fuzz_path))
            abort();
        if (rc == 0 && s.pos.c != seen)
            abort();
        seen++;
        if (rc < 0 && rc != FERRY_ECORRUPT && rc != FERRY_EOVERFLOW)
            break;
    }
    /* a whole file: the stream sees every entry the mapped reader did */
    if (mapped_ok && seen < MAX_READS && seen != entries)
        abort();
out:
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++)
        free(bufs[f]);
    ferry_stream_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-minidb", "data.minidb");
    if (fuzz_write(data, size) < 0)
        return 0;
    ferry_db *db;
    if (ferry_db_open(&db, "minidb", fuzz_path, FERRY_DB_READ) < 0) {
        if (!strstr(ferry_last_errmsg(), fuzz_path))
            abort();
        read_stream(0, 0);
        return 0;
    }
    ferry_db_cursor *c;
    const void *k, *v;
    size_t kl, vl, total = 0;
    if (ferry_db_cursor_open(db, 0, 1, &c) == 0) {
        while (ferry_db_cursor_next(c, &k, &kl, &v, &vl) == 0) {
            total += 8 + kl + vl;
            if (kl == 0 || total > size)
                abort();
        }
        if (total != size) /* the entries cover the file exactly */
            abort();
        ferry_db_cursor_close(c);
    }
    uint64_t entries = ferry_db_count(db);
    ferry_db_close(db);
    read_dataset();
    read_stream(entries, 1);
    return 0;
}
