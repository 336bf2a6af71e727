/*
 * Packing a source into record shards: every sample read through a loader (in
 * order, workers doing the source's work) and appended to a record writer.
 * One implementation for the `ferry pack` command and the Python module.
 */
#include "ferry/loader.h"
#include "ferry/records.h"

#include <string.h>

/* Bytes of sample data in a field: the rows written for a variable field. */
static uint64_t data_bytes(const ferry_field *f, int64_t len)
{
    if (!f->variable)
        return ferry_field_nbytes(f);
    return (uint64_t)len * ferry_field_row_elems(f) * ferry_dtype_size(f->dtype);
}

/* Appends every sample of b; 0 or the writer's error. */
static int append_batch(ferry_record_writer *wr, ferry_batch *b, const ferry_field *fields, int nf,
                        uint64_t *bytes)
{
    ferry_tensor t[FERRY_MAX_FIELDS], lens[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++) {
        ferry_batch_field(b, f, &t[f]);
        if (fields[f].variable)
            ferry_batch_lengths(b, f, &lens[f]);
    }
    for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
        void *data[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        for (int f = 0; f < nf; f++) {
            data[f] = (uint8_t *)t[f].data + (size_t)i * (size_t)t[f].strides[0];
            len[f] = fields[f].variable ? ((int64_t *)lens[f].data)[i] : 0;
            *bytes += data_bytes(&fields[f], len[f]);
        }
        ferry_sample s = {nf, data, len, {0}};
        int rc = ferry_writer_append(wr, &s);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ferry_pack(ferry_dataset *ds, ferry_stream *st, const ferry_pack_opts *o,
               ferry_pack_result *out)
{
    memset(out, 0, sizeof *out);
    if ((ds == NULL) == (st == NULL) || !o || !o->writer)
        return ferry_error(FERRY_EINVAL, "pack: give a dataset or a stream, and writer options");
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    ferry_field fields[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++)
        fields[f] = *(ds ? ferry_dataset_field(ds, f) : ferry_stream_field(st, f));
    ferry_writer_opts w = *o->writer;
    w.fields = fields;
    w.nfields = nf;
    ferry_loader_opts lo;
    ferry_loader_opts_default(&lo);
    lo.batch_size = 64;
    lo.num_workers = o->num_workers;
    lo.rank = 0;
    lo.world_size = 1;
    lo.on_error = o->on_error;
    lo.skip_budget = o->skip_budget;
    lo.on_skip = o->on_skip;
    lo.on_skip_arg = o->on_skip_arg;
    ferry_loader *l = NULL;
    ferry_record_writer *wr = NULL;
    int rc = ds ? ferry_loader_create(&l, ds, &lo) : ferry_loader_create_stream(&l, st, &lo);
    if (rc == 0)
        rc = ferry_writer_open(&wr, &w);
    if (rc < 0)
        goto done;
    ferry_batch *b;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        rc = append_batch(wr, b, fields, nf, &out->bytes);
        ferry_batch_release(b);
        if (rc < 0)
            goto done;
        if (o->progress)
            o->progress(ferry_writer_records(wr), o->progress_arg);
    }
    if (rc != FERRY_END) {
        /* the loader's message says which sample; keep it as the thread's */
        rc = ferry_error(rc, "%s",
                         ferry_loader_errmsg(l)[0] ? ferry_loader_errmsg(l) : ferry_last_errmsg());
        goto done;
    }
    out->records = ferry_writer_records(wr);
    rc = ferry_writer_commit(wr);
    wr = NULL;
    ferry_loader_stats ls;
    ferry_loader_stats_get(l, &ls);
    out->skipped = ls.skipped;
    out->truncated = ls.truncated;
done:
    ferry_writer_abort(wr);
    ferry_loader_free(l);
    return rc < 0 ? rc : 0;
}
