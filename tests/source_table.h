/*
 * Tests: every sample of a source (map-style, or one shard of a stream) read into
 * memory, field by field.
 */
#ifndef FERRY_TEST_SOURCE_TABLE_H
#define FERRY_TEST_SOURCE_TABLE_H

#include "harness.h"

#include <ferry/ferry.h>

#define MAXS 5000

/* One read sample: each field's bytes and length. */
typedef struct row {
    uint8_t *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
} row;

typedef struct table {
    int nf;
    ferry_field f[FERRY_MAX_FIELDS];
    size_t n;
    row *rows;
    int rc; /* what ended the read: FERRY_END or an error */
    char msg[512];
} table;

static inline void table_free(table *t)
{
    for (size_t i = 0; i < t->n; i++)
        for (int k = 0; k < t->nf; k++)
            free(t->rows[i].data[k]);
    free(t->rows);
}

static inline int col(const table *t, const char *name)
{
    for (int k = 0; k < t->nf; k++)
        if (!strcmp(t->f[k].name, name))
            return k;
    test_fail(__FILE__, __LINE__, "no field %s", name);
}

/* Reads every sample of a source (map-style, or the stream's shard of nshards). */
static inline table read_source(const char *spec, uint64_t shard, uint64_t nshards, uint64_t epoch)
{
    table t = {0};
    ferry_dataset *ds;
    ferry_stream *st;
    CHECK_OK(ferry_source_open(spec, &ds, &st));
    t.nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    for (int k = 0; k < t.nf; k++)
        t.f[k] = *(ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k));
    t.rows = calloc(MAXS, sizeof *t.rows);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, epoch));
    ferry_stream_iter *it = NULL;
    if (st)
        CHECK_OK(ferry_stream_open(st, shard, nshards, epoch, &it));
    for (;;) {
        CHECK(t.n < MAXS);
        row *r = &t.rows[t.n];
        for (int k = 0; k < t.nf; k++)
            r->data[k] = calloc(1, ferry_field_nbytes(&t.f[k]) + 1);
        ferry_sample s = {t.nf, (void *const *)r->data, r->len};
        int rc;
        if (ds)
            rc = t.n < ferry_dataset_len(ds) ? ferry_dataset_get(ds, t.n, &s, ctx) : FERRY_END;
        else
            rc = ferry_stream_next(it, &s, ctx);
        if (rc != 0) {
            for (int k = 0; k < t.nf; k++)
                free(r->data[k]);
            t.rc = rc;
            snprintf(t.msg, sizeof t.msg, "%s", ferry_last_errmsg());
            break;
        }
        t.n++;
    }
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    ferry_stream_free(st);
    return t;
}

#endif
