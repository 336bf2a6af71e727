/*
 * Datasets and streams: the wrappers that hold a user's vtable. (Fields, schema
 * checks and the worker context are in src/core/sample.c.)
 */
#include "../core/bytes.h"
#include "dataset_internal.h"

#include <string.h>

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
    ds->whole[1] = ds->len;
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
    ferry__free(ds->shard_bounds);
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

uint64_t ferry_dataset_shards(const ferry_dataset *ds, const uint64_t **bounds)
{
    if (ds->shard_bounds) {
        *bounds = ds->shard_bounds;
        return ds->nshards;
    }
    *bounds = ds->whole; /* {0, len}: one shard */
    return 1;
}

int ferry_dataset_set_shards(ferry_dataset *ds, const uint64_t *bounds, uint64_t nshards)
{
    size_t bytes;
    if (nshards == 0 || !bounds)
        return ferry__err(FERRY_EINVAL, "dataset: at least one shard");
    if (bounds[0] != 0 || bounds[nshards] != ds->len)
        return ferry__err(FERRY_EINVAL,
                          "dataset: shards cover [%llu, %llu), not the dataset's [0, %llu)",
                          (unsigned long long)bounds[0], (unsigned long long)bounds[nshards],
                          (unsigned long long)ds->len);
    for (uint64_t k = 0; k < nshards; k++)
        if (bounds[k + 1] < bounds[k])
            return ferry__err(FERRY_EINVAL,
                              "dataset: shard %llu ends at %llu, before it starts (%llu)",
                              (unsigned long long)k, (unsigned long long)bounds[k + 1],
                              (unsigned long long)bounds[k]);
    if (nshards >= SIZE_MAX / sizeof *bounds ||
        !ferry__mul_size((size_t)nshards + 1, sizeof *bounds, &bytes))
        return ferry__err(FERRY_EOVERFLOW, "dataset: %llu shards overflow memory",
                          (unsigned long long)nshards);
    uint64_t *b = ferry__malloc(bytes);
    if (!b)
        return ferry__err(FERRY_ENOMEM, "dataset: out of memory for %llu shards",
                          (unsigned long long)nshards);
    memcpy(b, bounds, bytes);
    ferry__free(ds->shard_bounds);
    ds->shard_bounds = b;
    ds->nshards = nshards;
    return 0;
}

int ferry__dataset_shards_at(ferry_dataset **ds, int rc, const void *first, size_t stride,
                             uint64_t nshards)
{
    uint64_t *b = NULL;
    if (rc < 0 || nshards <= 1)
        return rc;
    if (nshards >= SIZE_MAX / sizeof *b || !(b = ferry__malloc((size_t)(nshards + 1) * sizeof *b)))
        rc = ferry__err(FERRY_ENOMEM, "dataset: out of memory for %llu shards",
                        (unsigned long long)nshards);
    for (uint64_t k = 0; rc == 0 && k < nshards; k++)
        memcpy(&b[k], (const char *)first + k * stride, sizeof *b);
    if (rc == 0) {
        b[nshards] = (*ds)->len;
        rc = ferry_dataset_set_shards(*ds, b, nshards);
    }
    ferry__free(b);
    if (rc < 0) {
        ferry_dataset_free(*ds);
        *ds = NULL;
    }
    return rc;
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
    st->resumable = vt->save && vt->restore && vt->fetch;
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
    it->used = true;
    out->pos.epoch = ctx ? ctx->epoch : 0;
    return it->st->vt->next(it->iter, out, ctx);
}

void ferry_stream_close(ferry_stream_iter *it)
{
    if (!it)
        return;
    it->st->vt->close(it->iter);
    ferry__free(it);
}

/* ---- Stream positions ---- */

int ferry_stream_resumable(const ferry_stream *st)
{
    return st && st->resumable;
}

int ferry_stream_save_to(ferry_stream_iter *it, ferry_state *w)
{
    if (!it->st->resumable)
        return ferry__err(FERRY_ENOTSUP,
                          "stream: not resumable (a stream of the chain cannot save its position)");
    return it->st->vt->save(it->iter, w);
}

int ferry_stream_restore_from(ferry_stream_iter *it, ferry_state *r, ferry_ctx *ctx)
{
    if (!it->st->resumable)
        return ferry__err(FERRY_ENOTSUP,
                          "stream: not resumable (a stream of the chain cannot save its position)");
    if (it->used)
        return ferry__err(FERRY_ESTATE, "stream: restore needs an iterator nothing was read from");
    return it->st->vt->restore(it->iter, r, ctx);
}

int ferry_stream_fetch(ferry_stream_iter *it, const ferry_pos *pos, ferry_sample *out,
                       ferry_ctx *ctx)
{
    if (!it->st->resumable)
        return ferry__err(FERRY_ENOTSUP, "stream: not resumable, so it cannot fetch a sample");
    uint64_t saved = 0;
    if (ctx) {
        saved = ctx->epoch;
        ctx->epoch = pos->epoch;
    }
    out->pos = *pos;
    int rc = it->st->vt->fetch(it->iter, pos, out, ctx);
    if (ctx)
        ctx->epoch = saved;
    return rc;
}

/* A saved position: magic, version, CRC-32C of the rest, its length; then the
 * chain's own bytes. */
#define STATE_MAGIC 0x50545346u /* "FSTP" */
#define STATE_VERSION 1u
#define STATE_HEAD 16u

int ferry__stream_snapshot(ferry_stream_iter *it, ferry_state *w)
{
    static const uint8_t zero[STATE_HEAD];
    w->len = 0;
    w->nomem = false;
    ferry_state_put(w, zero, STATE_HEAD);
    int rc = ferry_stream_save_to(it, w);
    if (rc < 0)
        return rc;
    if (w->nomem)
        return ferry__err(FERRY_ENOMEM, "stream state: out of memory for %zu bytes", w->len);
    if (w->len > w->cap || w->len - STATE_HEAD > UINT32_MAX)
        return ferry__err(FERRY_EOVERFLOW, "stream state: %zu bytes, over the buffer's %zu", w->len,
                          w->cap);
    ferry__store_le32(w->buf, STATE_MAGIC);
    ferry__store_le32(w->buf + 4, STATE_VERSION);
    ferry__store_le32(w->buf + 8, ferry_crc32c(0, w->buf + STATE_HEAD, w->len - STATE_HEAD));
    ferry__store_le32(w->buf + 12, (uint32_t)(w->len - STATE_HEAD));
    return 0;
}

int ferry_stream_save(ferry_stream_iter *it, void *buf, size_t cap, size_t *len)
{
    ferry_state w = {.buf = buf, .cap = cap};
    *len = 0;
    int rc = ferry__stream_snapshot(it, &w);
    if (rc == FERRY_EOVERFLOW)
        rc = ferry__err(FERRY_EOVERFLOW, "stream state: needs %zu bytes, the buffer has %zu", w.len,
                        cap);
    if (rc == 0 || rc == FERRY_EOVERFLOW)
        *len = w.len;
    return rc;
}

int ferry__stream_resume(ferry_stream_iter *it, const uint8_t *buf, size_t n, ferry_ctx *ctx)
{
    if (n < STATE_HEAD || ferry__load_le32(buf) != STATE_MAGIC)
        return ferry__err(FERRY_ECORRUPT, "stream state: not a saved stream position (%zu bytes)",
                          n);
    if (ferry__load_le32(buf + 4) != STATE_VERSION)
        return ferry__err(FERRY_ENOTSUP, "stream state: version %u, this library reads %u",
                          ferry__load_le32(buf + 4), STATE_VERSION);
    if ((size_t)ferry__load_le32(buf + 12) != n - STATE_HEAD)
        return ferry__err(FERRY_ECORRUPT, "stream state: %zu bytes, but it says %zu", n,
                          (size_t)ferry__load_le32(buf + 12) + STATE_HEAD);
    if (ferry__load_le32(buf + 8) != ferry_crc32c(0, buf + STATE_HEAD, n - STATE_HEAD))
        return ferry__err(FERRY_ECORRUPT, "stream state: checksum mismatch (damaged)");
    ferry_state r = {.in = buf + STATE_HEAD, .n = n - STATE_HEAD};
    int rc = ferry_stream_restore_from(it, &r, ctx);
    if (rc < 0)
        return rc;
    if (r.off != r.n)
        return ferry__err(FERRY_ECORRUPT,
                          "stream state: %zu bytes left over (saved by another "
                          "stream?)",
                          r.n - r.off);
    it->used = true; /* it is somewhere now: no second restore */
    return 0;
}

int ferry_stream_restore(ferry_stream_iter *it, const void *buf, size_t len, ferry_ctx *ctx)
{
    if (!buf)
        return ferry__err(FERRY_EINVAL, "stream state: buf is NULL");
    return ferry__stream_resume(it, buf, len, ctx);
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
    out->pos.a = it->next;
    int rc = it->ds->vt->get(it->ds->self, it->next, out, ctx);
    /* Advance past a bad sample too, so that a skip policy can go on. */
    it->next = it->next + it->step < it->next ? UINT64_MAX : it->next + it->step;
    return rc;
}

static void seq_close(void *iter)
{
    ferry__free(iter);
}

/* The state: the next index (8 bytes); a sample's pos.a is its index. */
static int seq_save(void *iter, ferry_state *w)
{
    ferry_state_put_u64(w, ((seq_iter *)iter)->next);
    return 0;
}

static int seq_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    (void)ctx;
    seq_iter *it = iter;
    uint64_t next;
    int rc = ferry_state_get_u64(r, &next);
    if (rc < 0)
        return rc;
    if (next % it->step != it->next % it->step)
        return ferry__err(FERRY_ECORRUPT,
                          "stream state: index %llu is not in this shard (every %llu-th from %llu)",
                          (unsigned long long)next, (unsigned long long)it->step,
                          (unsigned long long)it->next);
    it->next = next;
    return 0;
}

static int seq_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    seq_iter *it = iter;
    if (pos->a >= it->ds->len)
        return ferry__err(FERRY_ERANGE, "stream: sample %llu is past the dataset's %llu",
                          (unsigned long long)pos->a, (unsigned long long)it->ds->len);
    return it->ds->vt->get(it->ds->self, pos->a, out, ctx);
}

static const ferry_stream_vtable seq_vtable = {seq_open, seq_next,    seq_close, NULL,
                                               seq_save, seq_restore, seq_fetch};

int ferry_stream_from_dataset(ferry_stream **out, ferry_dataset *ds)
{
    int rc = ferry_stream_create(out, &seq_vtable, ds, ds->fields, ds->nfields);
    if (rc == 0)
        (*out)->fetch_anywhere = true;
    return rc;
}
