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
        ferry_sample s = {t.nf, (void *const *)r->data, r->len, {0}};
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

/* Runs a loader (workers threads, batches of batch) over a source, one epoch; the
 * samples delivered, and the sum of the int64 scalar field `sum_field` over them. */
static inline uint64_t loader_sum(const char *spec, uint32_t workers, uint32_t batch,
                                  const char *sum_field, int64_t *sum)
{
    ferry_dataset *ds;
    ferry_stream *st;
    CHECK_OK(ferry_source_open(spec, &ds, &st));
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.num_workers = workers;
    o.batch_size = batch;
    o.shuffle = ds != NULL;
    o.stream_shards = 3;
    o.rank = 0;
    o.world_size = 1;
    ferry_loader *l;
    CHECK_OK(ds ? ferry_loader_create(&l, ds, &o) : ferry_loader_create_stream(&l, st, &o));
    ferry_batch *b;
    int rc;
    uint64_t n = 0;
    *sum = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        int f = -1;
        for (int k = 0; k < ferry_batch_nfields(b); k++)
            if (!strcmp(ferry_batch_field_info(b, k)->name, sum_field))
                f = k;
        CHECK(f >= 0);
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, f, &t));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++)
            *sum += ((const int64_t *)t.data)[i];
        n += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    ferry_stream_free(st);
    return n;
}

#endif
