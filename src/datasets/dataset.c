/*
 * Datasets and streams: schema checks and the wrappers that hold a user's vtable.
 * (The worker context is in src/core/ctx.c.)
 */
#include "dataset_internal.h"

#include <string.h>

size_t ferry_field_row_elems(const ferry_field *f)
{
    size_t n = 1;
    for (int i = 1; i < f->ndim; i++)
        n *= (size_t)f->shape[i];
    return n;
}

size_t ferry_field_nbytes(const ferry_field *f)
{
    size_t n = ferry_dtype_size(f->dtype);
    for (int i = 0; i < f->ndim; i++)
        n *= (size_t)f->shape[i];
    return n;
}

/* ---- Map-style ---- */

int ferry_dataset_create(ferry_dataset **out, const ferry_dataset_vtable *vt, void *self,
                         const ferry_field *fields, int nfields)
{
    int rc = 0;
    ferry_dataset *ds = NULL;
    *out = NULL;
    if (!vt || !vt->len || !vt->get)
        FERRY_FAIL(FERRY_EINVAL, "dataset: the vtable needs len and get");
    FERRY_TRY(ferry__check_fields(fields, nfields));
    ds = ferry__calloc(1, sizeof *ds);
    if (!ds)
        FERRY_FAIL(FERRY_ENOMEM, "dataset: out of memory");
    ds->vt = vt;
    ds->self = self;
    ds->len = vt->len(self);
    ds->nfields = nfields;
    memcpy(ds->fields, fields, (size_t)nfields * sizeof *fields);
    *out = ds;
    return 0;
cleanup:
    if (vt && vt->destroy)
        vt->destroy(self);
    return rc;
}

void ferry_dataset_free(ferry_dataset *ds)
{
    if (!ds)
        return;
    if (ds->vt->destroy)
        ds->vt->destroy(ds->self);
    ferry__free(ds);
}

uint64_t ferry_dataset_len(const ferry_dataset *ds)
{
    return ds->len;
}

int ferry_dataset_nfields(const ferry_dataset *ds)
{
    return ds->nfields;
}

const ferry_field *ferry_dataset_field(const ferry_dataset *ds, int i)
{
    return i >= 0 && i < ds->nfields ? &ds->fields[i] : NULL;
}

int ferry_dataset_find_field(const ferry_dataset *ds, const char *name)
{
    for (int i = 0; i < ds->nfields; i++)
        if (!strcmp(ds->fields[i].name, name))
            return i;
    return -1;
}

int ferry_dataset_get(ferry_dataset *ds, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    if (index >= ds->len)
        return ferry__err(FERRY_ERANGE, "dataset: index %llu is past its length %llu",
                          (unsigned long long)index, (unsigned long long)ds->len);
    if (out->nfields != ds->nfields)
        return ferry__err(FERRY_EINVAL, "dataset: sample has %d fields, the dataset %d",
                          out->nfields, ds->nfields);
    return ds->vt->get(ds->self, index, out, ctx);
}

/* ---- Streams ---- */

int ferry_stream_create(ferry_stream **out, const ferry_stream_vtable *vt, void *self,
                        const ferry_field *fields, int nfields)
{
    int rc = 0;
    ferry_stream *st = NULL;
    *out = NULL;
    if (!vt || !vt->open || !vt->next || !vt->close)
        FERRY_FAIL(FERRY_EINVAL, "stream: the vtable needs open, next and close");
    FERRY_TRY(ferry__check_fields(fields, nfields));
    st = ferry__calloc(1, sizeof *st);
    if (!st)
        FERRY_FAIL(FERRY_ENOMEM, "stream: out of memory");
    st->vt = vt;
    st->self = self;
    st->nfields = nfields;
    memcpy(st->fields, fields, (size_t)nfields * sizeof *fields);
    *out = st;
    return 0;
cleanup:
    if (vt && vt->destroy)
        vt->destroy(self);
    return rc;
}

void ferry_stream_free(ferry_stream *st)
{
    if (!st)
        return;
    if (st->vt->destroy)
        st->vt->destroy(st->self);
    ferry__free(st);
}

int ferry_stream_nfields(const ferry_stream *st)
{
    return st->nfields;
}

const ferry_field *ferry_stream_field(const ferry_stream *st, int i)
{
    return i >= 0 && i < st->nfields ? &st->fields[i] : NULL;
}

int ferry_stream_open(ferry_stream *st, uint64_t shard, uint64_t nshards, uint64_t epoch,
                      ferry_stream_iter **out)
{
    *out = NULL;
    if (nshards == 0 || shard >= nshards)
        return ferry__err(FERRY_EINVAL, "stream: shard %llu is outside [0, %llu)",
                          (unsigned long long)shard, (unsigned long long)nshards);
    ferry_stream_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "stream: out of memory");
    it->st = st;
    int rc = st->vt->open(st->self, shard, nshards, epoch, &it->iter);
    if (rc < 0) {
        ferry__free(it);
        return rc;
    }
    *out = it;
    return 0;
}

int ferry_stream_next(ferry_stream_iter *it, ferry_sample *out, ferry_ctx *ctx)
{
    return it->st->vt->next(it->iter, out, ctx);
}

void ferry_stream_close(ferry_stream_iter *it)
{
    if (!it)
        return;
    it->st->vt->close(it->iter);
    ferry__free(it);
}

/* ---- A map-style dataset read in order ---- */

typedef struct {
    ferry_dataset *ds;
    uint64_t next, step;
} seq_iter;

static int seq_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    (void)epoch;
    seq_iter *it = ferry__malloc(sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "stream: out of memory");
    it->ds = self;
    it->next = shard;
    it->step = nshards;
    *iter = it;
    return 0;
}

static int seq_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    seq_iter *it = iter;
    if (it->next >= it->ds->len)
        return FERRY_END;
    int rc = it->ds->vt->get(it->ds->self, it->next, out, ctx);
    /* Advance past a bad sample too, so that a skip policy can go on. */
    it->next = it->next + it->step < it->next ? UINT64_MAX : it->next + it->step;
    return rc;
}

static void seq_close(void *iter)
{
    ferry__free(iter);
}

static const ferry_stream_vtable seq_vtable = {seq_open, seq_next, seq_close, NULL};

int ferry_stream_from_dataset(ferry_stream **out, ferry_dataset *ds)
{
    return ferry_stream_create(out, &seq_vtable, ds, ds->fields, ds->nfields);
}
