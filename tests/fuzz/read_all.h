/*
 * For fuzz targets of datasets and streams: every sample read into buffers of
 * its fields' sizes, each variable field's length held to its bound.
 */
#ifndef FERRY_FUZZ_READ_ALL_H
#define FERRY_FUZZ_READ_ALL_H

#include <ferry/ferry.h>

#include <stdlib.h>

/* Reads ds (its samples) or else st (shard 0 of 1), at most max_reads samples;
 * nothing when a sample is over max_bytes in all. check (or NULL) sees each
 * sample read, with arg. */
static inline void fuzz_read_all(ferry_dataset *ds, ferry_stream *st, ferry_ctx *ctx,
                                 uint64_t max_reads, size_t max_bytes,
                                 void (*check)(const ferry_sample *s, void *arg), void *arg)
{
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    void *ptr[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    const ferry_field *f[FERRY_MAX_FIELDS];
    size_t total = 0;
    for (int k = 0; k < nf; k++) {
        f[k] = ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k);
        total += ferry_field_nbytes(f[k]);
    }
    if (total > max_bytes)
        return;
    for (int k = 0; k < nf; k++)
        if (!(ptr[k] = malloc(ferry_field_nbytes(f[k]) + 1)))
            goto done;
    ferry_sample s = {nf, ptr, len, {0}};
    ferry_stream_iter *it = NULL;
    if (st && ferry_stream_open(st, 0, 1, 0, &it) != 0)
        goto done;
    uint64_t n = ds ? ferry_dataset_len(ds) : max_reads;
    for (uint64_t i = 0; i < n && i < max_reads; i++) {
        for (int k = 0; k < nf; k++)
            len[k] = -1;
        int rc = ds ? ferry_dataset_get(ds, i, &s, ctx) : ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END)
            break;
        if (rc != 0)
            continue;
        for (int k = 0; k < nf; k++)
            if (f[k]->variable && (len[k] < 0 || len[k] > f[k]->shape[0]))
                abort();
        if (check)
            check(&s, arg);
    }
    ferry_stream_close(it);
done:
    for (int k = 0; k < nf; k++)
        free(ptr[k]);
}

#endif
