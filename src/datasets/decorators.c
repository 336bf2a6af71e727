/*
 * Stream decorators: shuffle buffer, shard, repeat, take and skip, and what all of
 * them share (decorators_internal.h); group-batch is decorator_group.c.
 *
 * A decorator's own struct (its settings) is read-only after construction and
 * starts with the inner stream it owns; everything that changes while reading
 * lives in the iterator that open() makes, so shards of one stream can be read on
 * several threads at once. Buffers are allocated in open(), never per sample.
 */
#include "decorators_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Common ---- */

void ferry__dec_destroy(void *self)
{
    ferry_stream_free(((ferry__decorator *)self)->inner);
    ferry__free(self);
}

__attribute__((format(printf, 3, 4))) int ferry__dec_reject(ferry_stream *inner, int rc,
                                                            const char *fmt, ...)
{
    char msg[FERRY_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ferry_stream_free(inner);
    return ferry__err(rc, "%s", msg);
}

int ferry__dec_reject_kept(ferry_stream *inner, int rc)
{
    char msg[FERRY_ERRMSG_MAX];
    ferry__err_copy(msg);
    ferry_stream_free(inner);
    return ferry__err(rc, "%s", msg);
}

int ferry__dec_wrap(ferry_stream **out, const ferry_stream_vtable *vt, void *self,
                    ferry_stream *inner, size_t bytes)
{
    uint64_t below = inner->iter_bytes;
    int rc = ferry_stream_create(out, vt, self, inner->fields, inner->nfields);
    if (rc == 0) {
        (*out)->iter_bytes = below + bytes < below ? UINT64_MAX : below + bytes;
        (*out)->resumable = (*out)->resumable && inner->resumable;
        (*out)->fetch_anywhere = inner->fetch_anywhere;
    }
    return rc;
}

int ferry__dec_check_sample(const char *who, const ferry_sample *out, int nfields)
{
    if (out->nfields != nfields)
        return ferry__err(FERRY_EINVAL, "%s: the sample has %d fields, the stream %d", who,
                          out->nfields, nfields);
    return 0;
}

/* ---- Saved positions (the layout: decorators_internal.h) ---- */

static const char *const kind_name[] = {"?",      "shuffle", "group_batch", "shard",
                                        "repeat", "take",    "skip"};

void ferry__dec_put_kind(ferry_state *w, int kind, uint64_t a, uint64_t b)
{
    ferry_state_put_u64(w, (uint64_t)kind);
    ferry_state_put_u64(w, a);
    ferry_state_put_u64(w, b);
}

int ferry__dec_get_kind(ferry_state *r, int kind, uint64_t a, uint64_t b, const char *sa,
                        const char *sb)
{
    uint64_t k, x, y;
    int rc;
    if ((rc = ferry_state_get_u64(r, &k)) < 0 || (rc = ferry_state_get_u64(r, &x)) < 0 ||
        (rc = ferry_state_get_u64(r, &y)) < 0)
        return rc;
    if (k != (uint64_t)kind)
        return ferry__err(FERRY_EINVAL, "stream state: saved by %s where this chain has %s",
                          k < sizeof kind_name / sizeof *kind_name ? kind_name[k]
                                                                   : "another stream",
                          kind_name[kind]);
    if (x != a)
        return ferry__err(FERRY_EINVAL, "%s: the state was saved with %s %llu, this one has %llu",
                          kind_name[kind], sa, (unsigned long long)x, (unsigned long long)a);
    if (y != b)
        return ferry__err(FERRY_EINVAL, "%s: the state was saved with %s %llu, this one has %llu",
                          kind_name[kind], sb, (unsigned long long)y, (unsigned long long)b);
    return 0;
}

/* pos[idx[0]], pos[idx[1]], ... pos[idx[n-1]], in chunks (a shuffle buffer of
 * many samples is saved often). */
static void put_pos_gather(ferry_state *w, const ferry_pos *pos, const uint32_t *idx, size_t n)
{
    ferry_pos chunk[64];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 64 && i < n; k++, i++)
            chunk[k] = pos[idx[i]];
        ferry__state_put_pos(w, chunk, k);
    }
}

int ferry__dec_get_count(ferry_state *r, uint64_t max, const char *what, uint64_t *n)
{
    int rc = ferry_state_get_u64(r, n);
    if (rc < 0)
        return rc;
    if (*n > max)
        return ferry__err(FERRY_ECORRUPT, "stream state: %llu %s, over the %llu there is room for",
                          (unsigned long long)*n, what, (unsigned long long)max);
    return 0;
}

int ferry__dec_pass_fetch(ferry_stream_iter *inner, const ferry_pos *pos, ferry_sample *out,
                          ferry_ctx *ctx)
{
    return ferry_stream_fetch(inner, pos, out, ctx);
}

/* ---- Sample slots (the layout: decorators_internal.h) ---- */

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

int ferry__slot_layout_init(ferry__slot_layout *L, const ferry_stream *inner, size_t capacity,
                            const char *who, const char *setting, size_t setting_value,
                            size_t *total)
{
    memset(L, 0, sizeof *L);
    L->nfields = inner->nfields;
    size_t off = ALIGN16((size_t)inner->nfields * sizeof(int64_t));
    bool ok = true;
    for (int f = 0; f < inner->nfields; f++) {
        const ferry_field *fd = &inner->fields[f];
        L->off[f] = off;
        L->nbytes[f] = ferry_field_nbytes(fd);
        if (fd->variable) {
            L->row_bytes[f] = ferry_field_row_elems(fd) * ferry_dtype_size(fd->dtype);
            L->bound[f] = fd->shape[0];
        }
        size_t padded = L->nbytes[f];
        ok = ok && ferry__add_size(padded, 15, &padded);
        ok = ok && ferry__add_size(off, padded & ~(size_t)15, &off);
    }
    L->stride = off;
    size_t bytes = 0;
    ok = ok && ferry__mul_size(L->stride, capacity, &bytes);
    if (!ok || (uint64_t)bytes > FERRY_STREAM_MAX_BUFFER_BYTES)
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: %s %zu makes a buffer of %zu samples of %zu bytes, over the "
                          "2^40-byte limit",
                          who, setting, setting_value, capacity, L->stride);
    *total = bytes;
    return 0;
}

static inline int64_t *slot_lengths(uint8_t *slot)
{
    return (int64_t *)(void *)slot;
}

ferry_sample ferry__slot_view(const ferry__slot_layout *L, uint8_t *slot, void **data)
{
    for (int f = 0; f < L->nfields; f++)
        data[f] = slot + L->off[f];
    return (ferry_sample){L->nfields, data, slot_lengths(slot), {0}};
}

int ferry__slot_read(const ferry__slot_layout *L, const ferry_stream *inner, uint8_t *slot,
                     ferry_stream_iter *it, ferry_ctx *ctx, const char *who, ferry_pos *pos,
                     bool fetch)
{
    void *data[FERRY_MAX_FIELDS];
    ferry_sample s = ferry__slot_view(L, slot, data);
    memset(s.length, 0, (size_t)L->nfields * sizeof(int64_t));
    int rc = fetch ? ferry_stream_fetch(it, pos, &s, ctx) : ferry_stream_next(it, &s, ctx);
    if (rc != 0)
        return rc;
    *pos = s.pos;
    for (int f = 0; f < L->nfields; f++) {
        if (L->row_bytes[f] && (s.length[f] < 0 || s.length[f] > L->bound[f]))
            return ferry__err(FERRY_EOVERFLOW, "%s: field \"%s\": length %lld is outside [0, %lld]",
                              who, inner->fields[f].name, (long long)s.length[f],
                              (long long)L->bound[f]);
    }
    return 0;
}

void ferry__slot_copy(const ferry__slot_layout *L, uint8_t *slot, const ferry_pos *pos,
                      ferry_sample *out)
{
    const int64_t *len = slot_lengths(slot);
    out->pos = *pos;
    for (int f = 0; f < L->nfields; f++) {
        size_t n = L->nbytes[f];
        if (L->row_bytes[f]) {
            n = (size_t)len[f] * L->row_bytes[f];
            out->length[f] = len[f];
        }
        memcpy(out->data[f], slot + L->off[f], n);
    }
}

static int cmp_pos(const void *x, const void *y, void *arg)
{
    const ferry_pos *pos = arg, *p = &pos[*(const uint32_t *)x], *q = &pos[*(const uint32_t *)y];
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    return (p->c > q->c) - (p->c < q->c);
}

int ferry__slot_refill(const ferry__slot_layout *L, const ferry_stream *inner, uint8_t *buf,
                       ferry_pos *pos, size_t n, ferry_stream_iter *it, ferry_ctx *ctx,
                       const char *who)
{
    if (n == 0)
        return 0;
    uint32_t *order = ferry__malloc(n * sizeof *order);
    if (!order)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory restoring %zu samples", who, n);
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n, sizeof *order, cmp_pos, pos);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        uint32_t i = order[k];
        ferry_pos p = pos[i];
        rc = ferry__slot_read(L, inner, buf + (size_t)i * L->stride, it, ctx, who, &pos[i], true);
        pos[i] = p;
        if (rc > 0)
            rc = ferry__err(FERRY_ECORRUPT, "the stream gave no sample");
        if (rc < 0)
            rc = ferry__err_prefix(rc, "%s: reading again buffered sample %zu of %zu", who, k, n);
    }
    ferry__free(order);
    return rc;
}

/* ---- Shuffle buffer ---- */

/* Keys the shuffle's draws apart from other uses of the same seed. */
#define SHUFFLE_PURPOSE 0x73687566666c65ull /* "shuffle" */

typedef struct shuffle {
    ferry__decorator base;
    size_t cap;
    uint64_t seed;
    ferry__slot_layout L;
    size_t bytes; /* of one iterator's buffer */
} shuffle;

typedef struct shuffle_iter {
    const shuffle *sh;
    ferry_stream_iter *it;
    uint8_t *buf;
    ferry_pos *pos; /* [cap]: where the sample in each slot came from */
    uint8_t *lazy;  /* [cap]: restored, not read yet: read from pos when drawn */
    size_t nlazy;
    uint32_t *perm; /* perm[0..count) are the slots holding samples, the rest free */
    size_t count;
    bool ended;
    ferry_rng rng;
} shuffle_iter;

static void shuf_close(void *iter)
{
    shuffle_iter *it = iter;
    if (!it)
        return;
    ferry_stream_close(it->it);
    ferry__aligned_free(it->buf);
    ferry__free(it->perm);
    ferry__free(it->pos);
    ferry__free(it->lazy);
    ferry__free(it);
}

static int shuf_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    int rc = 0;
    const shuffle *sh = self;
    shuffle_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "shuffle: out of memory");
    it->sh = sh;
    it->buf = ferry__aligned_alloc(sh->bytes);
    it->perm = ferry__malloc(sh->cap * sizeof *it->perm);
    it->pos = ferry__malloc(sh->cap * sizeof *it->pos);
    it->lazy = ferry__calloc(sh->cap, 1);
    if (!it->buf || !it->perm || !it->pos || !it->lazy)
        FERRY_FAIL(FERRY_ENOMEM, "shuffle: cannot allocate a buffer of %zu samples (%zu bytes)",
                   sh->cap, sh->bytes);
    for (size_t i = 0; i < sh->cap; i++)
        it->perm[i] = (uint32_t)i;
    FERRY_TRY(ferry_stream_open(sh->base.inner, shard, nshards, epoch, &it->it));
    /* The key takes all 64 bits of the epoch (ferry_rng counts only 32 of them):
     * ferry_stream_repeat hands 64-bit epochs down. */
    ferry_rng_init(&it->rng, ferry_hash64(ferry_hash64(sh->seed, SHUFFLE_PURPOSE), epoch), epoch,
                   shard);
    *iter = it;
    return 0;
cleanup:
    shuf_close(it);
    return rc;
}

static int shuf_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    shuffle_iter *it = iter;
    const shuffle *sh = it->sh;
    int rc = ferry__dec_check_sample("shuffle", out, sh->L.nfields);
    if (rc < 0)
        return rc;
    /* Fill the buffer: all of it on the first call, then the slot the last call
     * emitted. An error or a break leaves the buffer as it is for the next call. */
    while (!it->ended && it->count < sh->cap) {
        if (ferry__ctx_dropped(ctx))
            return ferry__err(FERRY_ECANCELED, "shuffle: the loader dropped this work");
        uint32_t k = it->perm[it->count];
        rc = ferry__slot_read(&sh->L, sh->base.inner, it->buf + (size_t)k * sh->L.stride, it->it,
                              ctx, "shuffle", &it->pos[k], false);
        if (rc == FERRY_END)
            it->ended = true;
        else if (rc != 0)
            return rc;
        else
            it->count++;
    }
    if (it->count == 0)
        return FERRY_END;
    size_t p = (size_t)ferry_rng_below(&it->rng, it->count);
    uint32_t s = it->perm[p];
    rc = 0;
    if (it->nlazy && it->lazy[s]) {
        /* restored from a saved position and not read yet: read it from its place
         * now, straight into out (a failure is this sample's, as a read's) */
        it->lazy[s] = 0;
        it->nlazy--;
        rc = ferry_stream_fetch(it->it, &it->pos[s], out, ctx);
        if (rc > 0)
            rc = ferry__err(FERRY_ECORRUPT, "shuffle: the stream gave no sample at a saved place");
        for (int f = 0; rc == 0 && f < sh->L.nfields; f++)
            if (sh->L.row_bytes[f] && (out->length[f] < 0 || out->length[f] > sh->L.bound[f]))
                rc = ferry__err(FERRY_EOVERFLOW,
                                "shuffle: field \"%s\": length %lld is outside "
                                "[0, %lld]",
                                sh->base.inner->fields[f].name, (long long)out->length[f],
                                (long long)sh->L.bound[f]);
    } else {
        ferry__slot_copy(&sh->L, it->buf + (size_t)s * sh->L.stride, &it->pos[s], out);
    }
    it->perm[p] = it->perm[it->count - 1];
    it->perm[it->count - 1] = s;
    it->count--;
    return rc;
}

/* The state: 24 bytes of kind and settings, the generator (44), whether the
 * inner ended (8), the count of buffered samples (8) and each one's pos (32), in
 * draw order; then the inner's. */
static int shuf_save(void *iter, ferry_state *w)
{
    shuffle_iter *it = iter;
    ferry__dec_put_kind(w, FERRY__DEC_SHUFFLE, it->sh->cap, it->sh->seed);
    const ferry_rng *g = &it->rng;
    uint32_t words[11] = {g->key[0], g->key[1], g->ctr[0], g->ctr[1], g->ctr[2], g->ctr[3],
                          g->buf[0], g->buf[1], g->buf[2], g->buf[3], g->used};
    for (int i = 0; i < 11; i++)
        ferry__state_put_u32(w, words[i]);
    ferry_state_put_u64(w, it->ended);
    ferry_state_put_u64(w, it->count);
    put_pos_gather(w, it->pos, it->perm, it->count);
    return ferry_stream_save_to(it->it, w);
}

static int shuf_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    shuffle_iter *it = iter;
    const shuffle *sh = it->sh;
    uint64_t ended, count;
    uint32_t words[11];
    int rc = ferry__dec_get_kind(r, FERRY__DEC_SHUFFLE, sh->cap, sh->seed, "buffer_size", "seed");
    for (int i = 0; rc == 0 && i < 11; i++)
        rc = ferry__state_get_u32(r, &words[i]);
    if (rc == 0)
        rc = ferry_state_get_u64(r, &ended);
    if (rc == 0)
        rc = ferry__dec_get_count(r, sh->cap, "buffered samples", &count);
    if (rc < 0)
        return rc;
    if (ended > 1 || words[10] > 4)
        return ferry__err(FERRY_ECORRUPT, "shuffle: the state is damaged");
    ferry_rng *g = &it->rng;
    g->key[0] = words[0], g->key[1] = words[1];
    memcpy(g->ctr, words + 2, sizeof g->ctr);
    memcpy(g->buf, words + 6, sizeof g->buf);
    g->used = words[10];
    it->ended = ended;
    /* slot i holds the i-th buffered sample */
    if ((rc = ferry__state_get_pos(r, it->pos, count)) < 0)
        return rc;
    if ((rc = ferry_stream_restore_from(it->it, r, ctx)) < 0)
        return rc;
    if (sh->base.inner->fetch_anywhere) {
        /* each is read from its place when drawn: a resume reads nothing now */
        memset(it->lazy, 1, count);
        it->nlazy = count;
    } else if ((rc = ferry__slot_refill(&sh->L, sh->base.inner, it->buf, it->pos, count, it->it,
                                        ctx, "shuffle")) < 0) {
        return rc;
    }
    it->count = count;
    return 0;
}

static int shuf_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return ferry__dec_pass_fetch(((shuffle_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable shuffle_vtable = {
    shuf_open, shuf_next, shuf_close, ferry__dec_destroy, shuf_save, shuf_restore, shuf_fetch};

int ferry_stream_shuffle(ferry_stream **out, ferry_stream *inner, size_t buffer_size, uint64_t seed)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "shuffle: the inner stream is NULL");
    if (buffer_size < 1 || buffer_size > FERRY_STREAM_MAX_BUFFER)
        return ferry__dec_reject(inner, FERRY_EINVAL,
                                 "shuffle: buffer_size %zu is outside [1, %zu]", buffer_size,
                                 FERRY_STREAM_MAX_BUFFER);
    ferry__slot_layout L;
    size_t bytes;
    int rc = ferry__slot_layout_init(&L, inner, buffer_size, "shuffle", "buffer_size", buffer_size,
                                     &bytes);
    if (rc < 0)
        return ferry__dec_reject_kept(inner, rc);
    shuffle *sh = ferry__calloc(1, sizeof *sh);
    if (!sh)
        return ferry__dec_reject(inner, FERRY_ENOMEM, "shuffle: out of memory");
    sh->base.inner = inner;
    sh->cap = buffer_size;
    sh->seed = seed;
    sh->L = L;
    sh->bytes = bytes;
    return ferry__dec_wrap(out, &shuffle_vtable, sh, inner,
                           bytes + buffer_size * (sizeof(uint32_t) + sizeof(ferry_pos) + 1));
}

/* ---- Shard ---- */

typedef struct shard_dec {
    ferry__decorator base;
    uint64_t k, n;
} shard_dec;

typedef struct shard_iter {
    const shard_dec *sd;
    ferry_stream_iter *it;
} shard_iter;

static int shard_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    const shard_dec *sd = self;
    uint64_t total;
    if (__builtin_mul_overflow(sd->n, nshards, &total))
        return ferry__err(FERRY_EOVERFLOW, "shard: %llu parts of %llu shards each overflow 2^64",
                          (unsigned long long)sd->n, (unsigned long long)nshards);
    shard_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "shard: out of memory");
    it->sd = sd;
    /* k < n and shard < nshards, so this is < n * nshards */
    int rc = ferry_stream_open(sd->base.inner, sd->k * nshards + shard, total, epoch, &it->it);
    if (rc < 0) {
        ferry__free(it);
        return rc;
    }
    *iter = it;
    return 0;
}

static int shard_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    return ferry_stream_next(((shard_iter *)iter)->it, out, ctx);
}

static void shard_close(void *iter)
{
    shard_iter *it = iter;
    if (!it)
        return;
    ferry_stream_close(it->it);
    ferry__free(it);
}

/* The state: 24 bytes of kind and settings, then the inner's. */
static int shard_save(void *iter, ferry_state *w)
{
    shard_iter *it = iter;
    ferry__dec_put_kind(w, FERRY__DEC_SHARD, it->sd->k, it->sd->n);
    return ferry_stream_save_to(it->it, w);
}

static int shard_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    shard_iter *it = iter;
    int rc = ferry__dec_get_kind(r, FERRY__DEC_SHARD, it->sd->k, it->sd->n, "k", "n");
    return rc < 0 ? rc : ferry_stream_restore_from(it->it, r, ctx);
}

static int shard_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return ferry__dec_pass_fetch(((shard_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable shard_vtable = {shard_open,         shard_next, shard_close,
                                                 ferry__dec_destroy, shard_save, shard_restore,
                                                 shard_fetch};

int ferry_stream_shard(ferry_stream **out, ferry_stream *inner, uint64_t k, uint64_t n)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "shard: the inner stream is NULL");
    if (n == 0 || k >= n)
        return ferry__dec_reject(inner, FERRY_EINVAL, "shard: k %llu is outside [0, n = %llu)",
                                 (unsigned long long)k, (unsigned long long)n);
    shard_dec *sd = ferry__calloc(1, sizeof *sd);
    if (!sd)
        return ferry__dec_reject(inner, FERRY_ENOMEM, "shard: out of memory");
    sd->base.inner = inner;
    sd->k = k;
    sd->n = n;
    return ferry__dec_wrap(out, &shard_vtable, sd, inner, 0);
}

/* ---- Repeat ---- */

typedef struct repeat {
    ferry__decorator base;
    uint64_t times; /* 0 = endless */
} repeat;

typedef struct repeat_iter {
    const repeat *r;
    ferry_stream_iter *it;       /* NULL between passes, or when opening a pass failed */
    ferry_stream_iter *fetch_it; /* for fetch when it is NULL; opened on demand */
    uint64_t shard, nshards, epoch, pass;
    bool got, ended; /* got: the current pass yielded a sample */
} repeat_iter;

static uint64_t pass_epoch(const repeat_iter *it)
{
    return ferry_hash64(it->epoch, it->pass);
}

static void rep_close(void *iter)
{
    repeat_iter *it = iter;
    if (!it)
        return;
    ferry_stream_close(it->it);
    ferry_stream_close(it->fetch_it);
    ferry__free(it);
}

static int rep_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    const repeat *r = self;
    repeat_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "repeat: out of memory");
    it->r = r;
    it->shard = shard;
    it->nshards = nshards;
    it->epoch = epoch;
    int rc = ferry_stream_open(r->base.inner, shard, nshards, pass_epoch(it), &it->it);
    if (rc < 0) {
        rep_close(it);
        return rc;
    }
    *iter = it;
    return 0;
}

static int rep_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    repeat_iter *it = iter;
    for (;;) {
        if (it->ended)
            return FERRY_END;
        if (!it->it) {
            int rc = ferry_stream_open(it->r->base.inner, it->shard, it->nshards, pass_epoch(it),
                                       &it->it);
            if (rc < 0)
                return ferry__err_prefix(rc, "repeat: pass %llu", (unsigned long long)it->pass);
        }
        /* the inner sees the pass's epoch, as it was opened with */
        uint64_t saved = 0;
        if (ctx) {
            saved = ctx->epoch;
            ctx->epoch = pass_epoch(it);
        }
        int rc = ferry_stream_next(it->it, out, ctx);
        if (ctx)
            ctx->epoch = saved;
        if (rc == 0)
            it->got = true;
        if (rc != FERRY_END)
            return rc;
        ferry_stream_close(it->it);
        it->it = NULL;
        it->pass++;
        if (!it->got || (it->r->times && it->pass >= it->r->times)) {
            it->ended = true;
            return FERRY_END;
        }
        it->got = false;
    }
}

/* The state: 24 bytes of kind and settings, the pass (8), the flags (8), then
 * the inner's (when a pass is open). */
static int rep_save(void *iter, ferry_state *w)
{
    repeat_iter *it = iter;
    ferry__dec_put_kind(w, FERRY__DEC_REPEAT, it->r->times, 0);
    ferry_state_put_u64(w, it->pass);
    ferry_state_put_u64(w, (uint64_t)it->got | (uint64_t)it->ended << 1 | (uint64_t) !!it->it << 2);
    return it->it ? ferry_stream_save_to(it->it, w) : 0;
}

static int rep_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    repeat_iter *it = iter;
    uint64_t pass, flags;
    int rc = ferry__dec_get_kind(r, FERRY__DEC_REPEAT, it->r->times, 0, "times", "-");
    if (rc == 0)
        rc = ferry_state_get_u64(r, &pass);
    if (rc == 0)
        rc = ferry_state_get_u64(r, &flags);
    if (rc < 0)
        return rc;
    if (flags > 7 || (it->r->times && pass > it->r->times))
        return ferry__err(FERRY_ECORRUPT, "repeat: the state is damaged (pass %llu, flags %llu)",
                          (unsigned long long)pass, (unsigned long long)flags);
    it->got = flags & 1;
    it->ended = flags & 2;
    if (pass != it->pass || !(flags & 4)) {
        ferry_stream_close(it->it);
        it->it = NULL;
        it->pass = pass;
        if (flags & 4) {
            rc = ferry_stream_open(it->r->base.inner, it->shard, it->nshards, pass_epoch(it),
                                   &it->it);
            if (rc < 0)
                return ferry__err_prefix(rc, "repeat: pass %llu", (unsigned long long)pass);
        }
    }
    return it->it ? ferry_stream_restore_from(it->it, r, ctx) : 0;
}

static int rep_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    repeat_iter *it = iter;
    if (it->it)
        return ferry__dec_pass_fetch(it->it, pos, out, ctx);
    if (!it->fetch_it) {
        int rc = ferry_stream_open(it->r->base.inner, it->shard, it->nshards, pass_epoch(it),
                                   &it->fetch_it);
        if (rc < 0)
            return ferry__err_prefix(rc, "repeat: opening the stream to fetch a sample");
    }
    return ferry__dec_pass_fetch(it->fetch_it, pos, out, ctx);
}

static const ferry_stream_vtable repeat_vtable = {
    rep_open, rep_next, rep_close, ferry__dec_destroy, rep_save, rep_restore, rep_fetch};

int ferry_stream_repeat(ferry_stream **out, ferry_stream *inner, uint64_t times)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "repeat: the inner stream is NULL");
    repeat *r = ferry__calloc(1, sizeof *r);
    if (!r)
        return ferry__dec_reject(inner, FERRY_ENOMEM, "repeat: out of memory");
    r->base.inner = inner;
    r->times = times;
    return ferry__dec_wrap(out, &repeat_vtable, r, inner, 0);
}

/* ---- Take and skip ---- */

typedef struct counted {
    ferry__decorator base;
    uint64_t n;
    int kind; /* FERRY__DEC_TAKE or FERRY__DEC_SKIP */
} counted;

typedef struct counted_iter {
    const counted *c;
    ferry_stream_iter *it;
    uint64_t seen; /* samples taken or dropped so far */
} counted_iter;

static void cnt_close(void *iter)
{
    counted_iter *it = iter;
    if (!it)
        return;
    ferry_stream_close(it->it);
    ferry__free(it);
}

static int cnt_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    const counted *c = self;
    counted_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "take/skip: out of memory");
    it->c = c;
    int rc = ferry_stream_open(c->base.inner, shard, nshards, epoch, &it->it);
    if (rc < 0) {
        cnt_close(it);
        return rc;
    }
    *iter = it;
    return 0;
}

static int take_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    counted_iter *it = iter;
    if (it->seen >= it->c->n)
        return FERRY_END;
    int rc = ferry_stream_next(it->it, out, ctx);
    if (rc == 0)
        it->seen++;
    return rc;
}

static int skip_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    counted_iter *it = iter;
    for (;;) {
        int rc = ferry_stream_next(it->it, out, ctx);
        if (rc != 0 || it->seen >= it->c->n)
            return rc;
        it->seen++;
        /* the dropped sample was written into out: give the next a clean start */
        if (out->length)
            memset(out->length, 0, (size_t)out->nfields * sizeof *out->length);
    }
}

/* The state: 24 bytes of kind and settings, the count (8), then the inner's. */
static int cnt_save(void *iter, ferry_state *w)
{
    counted_iter *it = iter;
    ferry__dec_put_kind(w, it->c->kind, it->c->n, 0);
    ferry_state_put_u64(w, it->seen);
    return ferry_stream_save_to(it->it, w);
}

static int cnt_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    counted_iter *it = iter;
    int rc = ferry__dec_get_kind(r, it->c->kind, it->c->n, 0, "n", "-");
    if (rc == 0)
        rc = ferry__dec_get_count(r, it->c->n, "samples counted", &it->seen);
    return rc < 0 ? rc : ferry_stream_restore_from(it->it, r, ctx);
}

static int cnt_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return ferry__dec_pass_fetch(((counted_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable take_vtable = {
    cnt_open, take_next, cnt_close, ferry__dec_destroy, cnt_save, cnt_restore, cnt_fetch};
static const ferry_stream_vtable skip_vtable = {
    cnt_open, skip_next, cnt_close, ferry__dec_destroy, cnt_save, cnt_restore, cnt_fetch};

static int counted_create(ferry_stream **out, ferry_stream *inner, uint64_t n,
                          const ferry_stream_vtable *vt, const char *who)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "%s: the inner stream is NULL", who);
    counted *c = ferry__calloc(1, sizeof *c);
    if (!c)
        return ferry__dec_reject(inner, FERRY_ENOMEM, "%s: out of memory", who);
    c->base.inner = inner;
    c->n = n;
    c->kind = vt == &take_vtable ? FERRY__DEC_TAKE : FERRY__DEC_SKIP;
    return ferry__dec_wrap(out, vt, c, inner, 0);
}

int ferry_stream_take(ferry_stream **out, ferry_stream *inner, uint64_t n)
{
    return counted_create(out, inner, n, &take_vtable, "take");
}

int ferry_stream_skip(ferry_stream **out, ferry_stream *inner, uint64_t n)
{
    return counted_create(out, inner, n, &skip_vtable, "skip");
}
