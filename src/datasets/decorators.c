/*
 * Stream decorators: shuffle buffer, group-batch, shard, repeat, take and skip.
 *
 * A decorator's own struct (its settings) is read-only after construction and
 * starts with the inner stream it owns; everything that changes while reading
 * lives in the iterator that open() makes, so shards of one stream can be read on
 * several threads at once. Buffers are allocated in open(), never per sample.
 */
#include "ferry/stream.h"
#include "dataset_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Common ---- */

/* Every decorator's struct starts with this, so that one destroy frees them all. */
typedef struct decorator {
    ferry_stream *inner; /* owned */
} decorator;

static void dec_destroy(void *self)
{
    ferry_stream_free(((decorator *)self)->inner);
    ferry__free(self);
}

/* Fails a constructor before its struct exists: frees the inner stream (which the
 * constructor owns) and sets the message. The message is formatted first, as its
 * arguments may point into inner, and set last, so that nothing run by the free
 * replaces it. */
__attribute__((format(printf, 3, 4))) static int reject(ferry_stream *inner, int rc,
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

/* The same, keeping the message a check already set. */
static int reject_kept(ferry_stream *inner, int rc)
{
    char msg[FERRY_ERRMSG_MAX];
    ferry__err_copy(msg);
    ferry_stream_free(inner);
    return ferry__err(rc, "%s", msg);
}

/* Wraps self (a decorator over inner) as a stream with the inner's schema. If this
 * fails, ferry_stream_create calls destroy(self), which frees inner too. */
/* bytes: what each iterator of the new stream holds besides its inner's, which a
 * loader counts against its memory budget (once per stream shard it opens). */
static int wrap(ferry_stream **out, const ferry_stream_vtable *vt, void *self, ferry_stream *inner,
                size_t bytes)
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

static int check_sample(const char *who, const ferry_sample *out, int nfields)
{
    if (out->nfields != nfields)
        return ferry__err(FERRY_EINVAL, "%s: the sample has %d fields, the stream %d", who,
                          out->nfields, nfields);
    return 0;
}

/* ---- Saved positions (ferry_stream_save) ----
 * Each decorator's state starts with its kind and settings, so a state saved by
 * another chain is refused, not misread; a sample is saved as its ferry_pos. */

enum { KIND_SHUFFLE = 1, KIND_GROUP, KIND_SHARD, KIND_REPEAT, KIND_TAKE, KIND_SKIP };
static const char *const kind_name[] = {"?",      "shuffle", "group_batch", "shard",
                                        "repeat", "take",    "skip"};

static void put_kind(ferry_state *w, int kind, uint64_t a, uint64_t b)
{
    ferry_state_put_u64(w, (uint64_t)kind);
    ferry_state_put_u64(w, a);
    ferry_state_put_u64(w, b);
}

/* Reads a kind and two settings and checks them against this decorator's. */
static int get_kind(ferry_state *r, int kind, uint64_t a, uint64_t b, const char *sa,
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

static int get_count(ferry_state *r, uint64_t max, const char *what, uint64_t *n)
{
    int rc = ferry_state_get_u64(r, n);
    if (rc < 0)
        return rc;
    if (*n > max)
        return ferry__err(FERRY_ECORRUPT, "stream state: %llu %s, over the %llu there is room for",
                          (unsigned long long)*n, what, (unsigned long long)max);
    return 0;
}

/* A decorator's fetch: the sample comes from the inner, whatever this level. */
static int pass_fetch(ferry_stream_iter *inner, const ferry_pos *pos, ferry_sample *out,
                      ferry_ctx *ctx)
{
    return ferry_stream_fetch(inner, pos, out, ctx);
}

/* ---- Sample slots: where the buffering decorators keep copies of samples ----
 * A slot holds int64_t lengths[nfields], then each field at its full size. Every
 * part is 16-byte aligned (the buffer is 64-byte aligned and the slot stride a
 * multiple of 16), so a dataset writing into a slot finds each field at least as
 * aligned as its dtype, as it would in a batch buffer. */

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

typedef struct layout {
    int nfields;
    size_t stride;                      /* bytes per slot */
    size_t off[FERRY_MAX_FIELDS];       /* field f within a slot (lengths are at 0) */
    size_t nbytes[FERRY_MAX_FIELDS];    /* field f at full size */
    size_t row_bytes[FERRY_MAX_FIELDS]; /* variable fields: bytes per row; 0 for fixed */
    int64_t bound[FERRY_MAX_FIELDS];    /* variable fields: the most rows */
} layout;

/* Lays out slots for inner's schema and checks that `capacity` of them fit in one
 * buffer (*total bytes); `setting` names what sets the capacity. */
static int layout_init(layout *L, const ferry_stream *inner, size_t capacity, const char *who,
                       const char *setting, size_t setting_value, size_t *total)
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

/* A view of a slot as a sample (data has room for L->nfields pointers). */
static ferry_sample slot_view(const layout *L, uint8_t *slot, void **data)
{
    for (int f = 0; f < L->nfields; f++)
        data[f] = slot + L->off[f];
    return (ferry_sample){L->nfields, data, slot_lengths(slot), {0}};
}

/* Reads the inner's next sample into a slot, and its position into *pos (or,
 * with fetch set, the sample at *pos again). Lengths are checked here, because
 * they decide how many bytes are later copied out. */
static int read_slot(const layout *L, const ferry_stream *inner, uint8_t *slot,
                     ferry_stream_iter *it, ferry_ctx *ctx, const char *who, ferry_pos *pos,
                     bool fetch)
{
    void *data[FERRY_MAX_FIELDS];
    ferry_sample s = slot_view(L, slot, data);
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

/* Copies a slot's sample out: fixed fields whole, variable ones up to their
 * length (the loader zeroes the rest). */
static void copy_slot(const layout *L, uint8_t *slot, const ferry_pos *pos, ferry_sample *out)
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

/* A restore: reads the samples of slots [0, n) again from pos[0..n), in the
 * order of their pos (file, then offset), so that a source that can only skip
 * forward (a compressed file) passes over each file once. */
static int refill(const layout *L, const ferry_stream *inner, uint8_t *buf, ferry_pos *pos,
                  size_t n, ferry_stream_iter *it, ferry_ctx *ctx, const char *who)
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
        rc = read_slot(L, inner, buf + (size_t)i * L->stride, it, ctx, who, &pos[i], true);
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
    decorator base;
    size_t cap;
    uint64_t seed;
    layout L;
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
    int rc = check_sample("shuffle", out, sh->L.nfields);
    if (rc < 0)
        return rc;
    /* Fill the buffer: all of it on the first call, then the slot the last call
     * emitted. An error or a break leaves the buffer as it is for the next call. */
    while (!it->ended && it->count < sh->cap) {
        if (ferry__ctx_dropped(ctx))
            return ferry__err(FERRY_ECANCELED, "shuffle: the loader dropped this work");
        uint32_t k = it->perm[it->count];
        rc = read_slot(&sh->L, sh->base.inner, it->buf + (size_t)k * sh->L.stride, it->it, ctx,
                       "shuffle", &it->pos[k], false);
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
        copy_slot(&sh->L, it->buf + (size_t)s * sh->L.stride, &it->pos[s], out);
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
    put_kind(w, KIND_SHUFFLE, it->sh->cap, it->sh->seed);
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
    int rc = get_kind(r, KIND_SHUFFLE, sh->cap, sh->seed, "buffer_size", "seed");
    for (int i = 0; rc == 0 && i < 11; i++)
        rc = ferry__state_get_u32(r, &words[i]);
    if (rc == 0)
        rc = ferry_state_get_u64(r, &ended);
    if (rc == 0)
        rc = get_count(r, sh->cap, "buffered samples", &count);
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
    } else if ((rc = refill(&sh->L, sh->base.inner, it->buf, it->pos, count, it->it, ctx,
                            "shuffle")) < 0) {
        return rc;
    }
    it->count = count;
    return 0;
}

static int shuf_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return pass_fetch(((shuffle_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable shuffle_vtable = {shuf_open, shuf_next,    shuf_close, dec_destroy,
                                                   shuf_save, shuf_restore, shuf_fetch};

int ferry_stream_shuffle(ferry_stream **out, ferry_stream *inner, size_t buffer_size, uint64_t seed)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "shuffle: the inner stream is NULL");
    if (buffer_size < 1 || buffer_size > FERRY_STREAM_MAX_BUFFER)
        return reject(inner, FERRY_EINVAL, "shuffle: buffer_size %zu is outside [1, %zu]",
                      buffer_size, FERRY_STREAM_MAX_BUFFER);
    layout L;
    size_t bytes;
    int rc = layout_init(&L, inner, buffer_size, "shuffle", "buffer_size", buffer_size, &bytes);
    if (rc < 0)
        return reject_kept(inner, rc);
    shuffle *sh = ferry__calloc(1, sizeof *sh);
    if (!sh)
        return reject(inner, FERRY_ENOMEM, "shuffle: out of memory");
    sh->base.inner = inner;
    sh->cap = buffer_size;
    sh->seed = seed;
    sh->L = L;
    sh->bytes = bytes;
    return wrap(out, &shuffle_vtable, sh, inner,
                bytes + buffer_size * (sizeof(uint32_t) + sizeof(ferry_pos) + 1));
}

/* ---- Group-batch ---- */

typedef struct grouper {
    decorator base;
    ferry_group_key_fn key_fn;
    void *key_arg;
    size_t batch, max_buffered;
    size_t cap;   /* slots and group records per iterator: max_buffered + 1 */
    size_t nhash; /* hash buckets, a power of two >= cap */
    layout L;
    size_t bytes; /* of one iterator's slots */
    /* group_by_length's key */
    int length_field;
    uint64_t width;
} grouper;

/* A group with samples waiting. Indices are int32_t, -1 for none: the limits keep
 * the counts of slots and groups under 2^31. */
typedef struct group {
    int64_t key;
    uint64_t serial; /* its number in the order of first arrival */
    uint32_t count;
    int32_t head, tail;   /* its slots, in arrival order, linked by slot_next */
    int32_t hnext;        /* hash chain; the free list for unused records */
    int32_t aprev, anext; /* groups in the order of their first arrival */
    int32_t bprev, bnext; /* groups of the same count, in the order they reached it */
} group;

typedef struct group_iter {
    const grouper *g;
    ferry_stream_iter *it;
    uint8_t *slots;
    ferry_pos *pos;         /* [cap]: where the sample in each slot came from */
    void *index_mem;        /* one allocation for the arrays below */
    group *groups;          /* [cap] */
    int32_t *slot_next;     /* [cap]: the next slot of the same group or of the free list */
    int32_t *hash;          /* [nhash] */
    int32_t *bhead, *btail; /* [batch]: groups by count, 1 .. batch-1 */
    int32_t free_slot, free_group;
    int32_t ahead, atail;
    uint32_t maxcount; /* the buckets above it are empty */
    size_t buffered;   /* samples in groups (not those being emitted) */
    uint64_t serial;   /* the next group's number */
    int32_t emit;      /* the next slot to emit, or -1 */
    bool emit_break, ended;
} group_iter;

static size_t key_bucket(const group_iter *it, int64_t key)
{
    return (size_t)(ferry_hash64((uint64_t)key, 0x67726f7570ull) & (it->g->nhash - 1));
}

static void bucket_unlink(group_iter *it, int32_t gi)
{
    group *gr = &it->groups[gi];
    if (gr->bprev >= 0)
        it->groups[gr->bprev].bnext = gr->bnext;
    else
        it->bhead[gr->count] = gr->bnext;
    if (gr->bnext >= 0)
        it->groups[gr->bnext].bprev = gr->bprev;
    else
        it->btail[gr->count] = gr->bprev;
}

static void bucket_append(group_iter *it, int32_t gi)
{
    group *gr = &it->groups[gi];
    gr->bnext = -1;
    gr->bprev = it->btail[gr->count];
    if (gr->bprev >= 0)
        it->groups[gr->bprev].bnext = gi;
    else
        it->bhead[gr->count] = gi;
    it->btail[gr->count] = gi;
    if (gr->count > it->maxcount)
        it->maxcount = gr->count;
}

/* Takes group gi out of every index and makes its slots the ones to emit, after a
 * break. Its record goes back to the free list. */
static void start_emit(group_iter *it, int32_t gi)
{
    group *gr = &it->groups[gi];
    if (gr->count < it->g->batch)
        bucket_unlink(it, gi);
    if (gr->aprev >= 0)
        it->groups[gr->aprev].anext = gr->anext;
    else
        it->ahead = gr->anext;
    if (gr->anext >= 0)
        it->groups[gr->anext].aprev = gr->aprev;
    else
        it->atail = gr->aprev;
    int32_t *p = &it->hash[key_bucket(it, gr->key)];
    while (*p != gi)
        p = &it->groups[*p].hnext;
    *p = gr->hnext;
    it->buffered -= gr->count;
    it->emit = gr->head;
    it->emit_break = true;
    gr->hnext = it->free_group;
    it->free_group = gi;
}

/* Files the sample in slot s under its group; starts emitting a group that is
 * full, or the fullest when too much is buffered. */
static void add_sample(group_iter *it, int32_t s)
{
    const grouper *g = it->g;
    void *data[FERRY_MAX_FIELDS];
    ferry_sample view = slot_view(&g->L, it->slots + (size_t)s * g->L.stride, data);
    int64_t key = g->key_fn(&view, g->base.inner->fields, g->key_arg);
    size_t b = key_bucket(it, key);
    int32_t gi = it->hash[b];
    while (gi >= 0 && it->groups[gi].key != key)
        gi = it->groups[gi].hnext;
    if (gi < 0) {
        /* a free record exists: groups in the index hold at least one of the
         * cap - 1 samples at most buffered before this one */
        gi = it->free_group;
        assert(gi >= 0);
        group *gr = &it->groups[gi];
        it->free_group = gr->hnext;
        gr->key = key;
        gr->serial = it->serial++;
        gr->count = 0;
        gr->head = gr->tail = -1;
        gr->hnext = it->hash[b];
        it->hash[b] = gi;
        gr->anext = -1;
        gr->aprev = it->atail;
        if (it->atail >= 0)
            it->groups[it->atail].anext = gi;
        else
            it->ahead = gi;
        it->atail = gi;
    }
    group *gr = &it->groups[gi];
    if (gr->count)
        bucket_unlink(it, gi);
    it->slot_next[s] = -1;
    if (gr->tail >= 0)
        it->slot_next[gr->tail] = s;
    else
        gr->head = s;
    gr->tail = s;
    gr->count++;
    it->buffered++;
    if (gr->count == g->batch) {
        start_emit(it, gi);
        return;
    }
    bucket_append(it, gi);
    if (it->buffered > g->max_buffered) {
        while (it->bhead[it->maxcount] < 0)
            it->maxcount--;
        start_emit(it, it->bhead[it->maxcount]);
    }
}

static void grp_close(void *iter)
{
    group_iter *it = iter;
    if (!it)
        return;
    ferry_stream_close(it->it);
    ferry__aligned_free(it->slots);
    ferry__free(it->index_mem);
    ferry__free(it->pos);
    ferry__free(it);
}

static int grp_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    int rc = 0;
    const grouper *g = self;
    group_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "group_batch: out of memory");
    it->g = g;
    /* groups first (8-byte aligned), then the int32_t arrays; sizes are bounded by
     * the limits on max_buffered and batch_size */
    size_t n32 = g->cap + g->nhash + 2 * g->batch;
    size_t index_bytes = g->cap * sizeof(group) + n32 * sizeof(int32_t);
    it->slots = ferry__aligned_alloc(g->bytes);
    it->index_mem = ferry__malloc(index_bytes);
    it->pos = ferry__malloc(g->cap * sizeof *it->pos);
    if (!it->slots || !it->index_mem || !it->pos)
        FERRY_FAIL(FERRY_ENOMEM, "group_batch: cannot allocate buffers for %zu samples (%zu bytes)",
                   g->cap, g->bytes + index_bytes);
    it->groups = it->index_mem;
    it->slot_next = (int32_t *)(void *)(it->groups + g->cap);
    it->hash = it->slot_next + g->cap;
    it->bhead = it->hash + g->nhash;
    it->btail = it->bhead + g->batch;
    for (size_t i = 0; i < g->cap; i++) {
        it->slot_next[i] = i + 1 < g->cap ? (int32_t)(i + 1) : -1;
        it->groups[i].hnext = i + 1 < g->cap ? (int32_t)(i + 1) : -1;
    }
    memset(it->hash, 0xff, (g->nhash + 2 * g->batch) * sizeof(int32_t)); /* all -1 */
    it->free_slot = it->free_group = 0;
    it->ahead = it->atail = it->emit = -1;
    FERRY_TRY(ferry_stream_open(g->base.inner, shard, nshards, epoch, &it->it));
    *iter = it;
    return 0;
cleanup:
    grp_close(it);
    return rc;
}

static int grp_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    group_iter *it = iter;
    const grouper *g = it->g;
    int rc = check_sample("group_batch", out, g->L.nfields);
    if (rc < 0)
        return rc;
    for (;;) {
        if (it->emit_break) {
            it->emit_break = false;
            return FERRY_BREAK;
        }
        if (it->emit >= 0) {
            int32_t s = it->emit;
            copy_slot(&g->L, it->slots + (size_t)s * g->L.stride, &it->pos[s], out);
            it->emit = it->slot_next[s];
            it->slot_next[s] = it->free_slot;
            it->free_slot = s;
            return 0;
        }
        if (it->ended) {
            if (it->ahead < 0)
                return FERRY_END;
            start_emit(it, it->ahead); /* the partial groups, by first arrival */
            continue;
        }
        if (ferry__ctx_dropped(ctx))
            return ferry__err(FERRY_ECANCELED, "group_batch: the loader dropped this work");
        /* at most max_buffered samples are buffered here, and there are one more
         * slots than that */
        int32_t s = it->free_slot;
        assert(s >= 0);
        rc = read_slot(&g->L, g->base.inner, it->slots + (size_t)s * g->L.stride, it->it, ctx,
                       "group_batch", &it->pos[s], false);
        if (rc == FERRY_END) {
            it->ended = true;
            continue;
        }
        if (rc != 0)
            return rc; /* an error or the inner's break; the slot stays free */
        it->free_slot = it->slot_next[s];
        add_sample(it, s);
    }
}

/* The state: 24 bytes of kind and settings; the flags (8); the samples left to
 * emit of the group being emitted: their count (8) and pos (32 each); the groups,
 * by first arrival: their count (8) and the next arrival number (8), then each
 * group's key, arrival number and number of samples (24) and the samples' pos
 * (32 each); then, size by size, the arrival numbers of the groups of that size
 * in the order they reached it (8 each); then the inner's. About 32 bytes per
 * buffered sample and 32 per group. */
static int grp_save(void *iter, ferry_state *w)
{
    group_iter *it = iter;
    const grouper *g = it->g;
    put_kind(w, KIND_GROUP, g->batch, g->max_buffered);
    ferry_state_put_u64(w, (uint64_t)it->ended | (uint64_t)it->emit_break << 1);
    uint64_t n = 0;
    for (int32_t s = it->emit; s >= 0; s = it->slot_next[s])
        n++;
    ferry_state_put_u64(w, n);
    for (int32_t s = it->emit; s >= 0; s = it->slot_next[s])
        ferry__state_put_pos(w, &it->pos[s], 1);
    n = 0;
    for (int32_t gi = it->ahead; gi >= 0; gi = it->groups[gi].anext)
        n++;
    ferry_state_put_u64(w, n);
    ferry_state_put_u64(w, it->serial);
    for (int32_t gi = it->ahead; gi >= 0; gi = it->groups[gi].anext) {
        const group *gr = &it->groups[gi];
        ferry_state_put_u64(w, (uint64_t)gr->key);
        ferry_state_put_u64(w, gr->serial);
        ferry_state_put_u64(w, gr->count);
        for (int32_t s = gr->head; s >= 0; s = it->slot_next[s])
            ferry__state_put_pos(w, &it->pos[s], 1);
    }
    for (uint32_t c = 1; c < g->batch && c <= it->maxcount; c++)
        for (int32_t gi = it->bhead[c]; gi >= 0; gi = it->groups[gi].bnext)
            ferry_state_put_u64(w, it->groups[gi].serial);
    return ferry_stream_save_to(it->it, w);
}

/* The group of arrival number `serial` among groups[0..n), which are in arrival
 * order; -1 if none. */
static int32_t find_serial(const group_iter *it, int32_t n, uint64_t serial)
{
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (it->groups[mid].serial < serial)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && it->groups[lo].serial == serial ? lo : -1;
}

static int grp_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    group_iter *it = iter;
    const grouper *g = it->g;
    uint64_t flags, nemit, ngroups;
    int rc = get_kind(r, KIND_GROUP, g->batch, g->max_buffered, "batch_size", "max_buffered");
    if (rc == 0)
        rc = ferry_state_get_u64(r, &flags);
    if (rc == 0)
        rc = get_count(r, g->batch, "samples left to emit", &nemit);
    if (rc < 0)
        return rc;
    if (flags > 3)
        return ferry__err(FERRY_ECORRUPT, "group_batch: the state is damaged (flags %llu)",
                          (unsigned long long)flags);
    /* slots are taken in order: the ones to emit, then each group's */
    int32_t used = 0;
    for (uint64_t i = 0; i < nemit; i++, used++)
        if ((rc = ferry__state_get_pos(r, &it->pos[used], 1)) < 0)
            return rc;
    if ((rc = get_count(r, g->cap - nemit, "groups", &ngroups)) < 0 ||
        (rc = ferry_state_get_u64(r, &it->serial)) < 0)
        return rc;
    for (int32_t gi = 0; gi < (int32_t)ngroups; gi++) {
        group *gr = &it->groups[gi];
        uint64_t key, serial, count;
        if ((rc = ferry_state_get_u64(r, &key)) < 0 || (rc = ferry_state_get_u64(r, &serial)) < 0 ||
            (rc = ferry_state_get_u64(r, &count)) < 0)
            return rc;
        if (count < 1 || count >= g->batch || count > g->max_buffered - it->buffered ||
            count > g->cap - (size_t)used || serial >= it->serial ||
            (gi > 0 && serial <= it->groups[gi - 1].serial))
            return ferry__err(FERRY_ECORRUPT,
                              "group_batch: the state is damaged (group %d: %llu samples, "
                              "number %llu)",
                              (int)gi, (unsigned long long)count, (unsigned long long)serial);
        gr->key = (int64_t)key;
        gr->serial = serial;
        gr->count = (uint32_t)count;
        gr->head = used;
        for (uint64_t i = 0; i < count; i++, used++) {
            if ((rc = ferry__state_get_pos(r, &it->pos[used], 1)) < 0)
                return rc;
            it->slot_next[used] = i + 1 < count ? used + 1 : -1;
        }
        gr->tail = used - 1;
        gr->bnext = -2; /* not in a size bucket yet */
        gr->aprev = gi - 1;
        gr->anext = gi + 1 < (int32_t)ngroups ? gi + 1 : -1;
        size_t b = key_bucket(it, gr->key);
        gr->hnext = it->hash[b];
        it->hash[b] = gi;
        it->buffered += count;
    }
    /* the size buckets, in the order saved: each group once, by its size */
    for (uint64_t k = 0; k < ngroups; k++) {
        uint64_t serial;
        if ((rc = ferry_state_get_u64(r, &serial)) < 0)
            return rc;
        int32_t gi = find_serial(it, (int32_t)ngroups, serial);
        if (gi < 0 || it->groups[gi].bnext != -2)
            return ferry__err(FERRY_ECORRUPT,
                              "group_batch: the state is damaged (group number %llu in the sizes)",
                              (unsigned long long)serial);
        bucket_append(it, gi);
    }
    /* and the rest of the records and slots free */
    it->ahead = ngroups ? 0 : -1;
    it->atail = (int32_t)ngroups - 1;
    it->free_group = ngroups < g->cap ? (int32_t)ngroups : -1;
    it->free_slot = used < (int32_t)g->cap ? used : -1;
    for (size_t i = (size_t)used; i < g->cap; i++)
        it->slot_next[i] = i + 1 < g->cap ? (int32_t)(i + 1) : -1;
    for (size_t i = ngroups; i < g->cap; i++)
        it->groups[i].hnext = i + 1 < g->cap ? (int32_t)(i + 1) : -1;
    for (int32_t i = 0; i + 1 < (int32_t)nemit; i++)
        it->slot_next[i] = i + 1;
    if (nemit)
        it->slot_next[nemit - 1] = -1;
    it->emit = nemit ? 0 : -1;
    it->ended = flags & 1;
    it->emit_break = flags & 2;
    if ((rc = ferry_stream_restore_from(it->it, r, ctx)) < 0)
        return rc;
    if ((rc = refill(&g->L, g->base.inner, it->slots, it->pos, (size_t)used, it->it, ctx,
                     "group_batch")) < 0)
        return rc;
    /* a group's key comes from its samples: a source that changed since the save
     * shows here */
    for (int32_t gi = 0; gi < (int32_t)ngroups; gi++) {
        const group *gr = &it->groups[gi];
        for (int32_t s = gr->head; s >= 0; s = it->slot_next[s]) {
            void *data[FERRY_MAX_FIELDS];
            ferry_sample view = slot_view(&g->L, it->slots + (size_t)s * g->L.stride, data);
            int64_t key = g->key_fn(&view, g->base.inner->fields, g->key_arg);
            if (key != gr->key)
                return ferry__err(FERRY_ECORRUPT,
                                  "group_batch: a buffered sample read again has the key %lld, "
                                  "the state says %lld (did the source change?)",
                                  (long long)key, (long long)gr->key);
        }
    }
    return 0;
}

static int grp_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return pass_fetch(((group_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable group_vtable = {grp_open, grp_next,    grp_close, dec_destroy,
                                                 grp_save, grp_restore, grp_fetch};

static int64_t length_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    (void)fields;
    const grouper *g = arg;
    return (int64_t)((uint64_t)s->length[g->length_field] / g->width);
}

/* Both group constructors: key_fn, or (when NULL) the length of length_field. */
static int group_create(ferry_stream **out, ferry_stream *inner, ferry_group_key_fn key_fn,
                        void *key_arg, size_t batch_size, size_t max_buffered, int length_field,
                        uint64_t width, const char *who)
{
    if (batch_size < 1 || batch_size > FERRY_STREAM_MAX_BATCH)
        return reject(inner, FERRY_EINVAL, "%s: batch_size %zu is outside [1, %zu]", who,
                      batch_size, FERRY_STREAM_MAX_BATCH);
    if (max_buffered < batch_size || max_buffered > FERRY_STREAM_MAX_BUFFER)
        return reject(inner, FERRY_EINVAL,
                      "%s: max_buffered %zu is outside [batch_size = %zu, %zu]", who, max_buffered,
                      batch_size, FERRY_STREAM_MAX_BUFFER);
    layout L;
    size_t bytes;
    int rc = layout_init(&L, inner, max_buffered + 1, who, "max_buffered", max_buffered, &bytes);
    if (rc < 0)
        return reject_kept(inner, rc);
    grouper *g = ferry__calloc(1, sizeof *g);
    if (!g)
        return reject(inner, FERRY_ENOMEM, "%s: out of memory", who);
    g->base.inner = inner;
    g->key_fn = key_fn;
    g->key_arg = key_arg;
    if (!key_fn) {
        g->key_fn = length_key;
        g->key_arg = g;
        g->length_field = length_field;
        g->width = width;
    }
    g->batch = batch_size;
    g->max_buffered = max_buffered;
    g->cap = max_buffered + 1;
    g->nhash = 16;
    while (g->nhash < g->cap)
        g->nhash *= 2;
    g->L = L;
    g->bytes = bytes;
    return wrap(out, &group_vtable, g, inner,
                bytes + g->cap * (4 * sizeof(int32_t) + sizeof(ferry_pos)));
}

int ferry_stream_group_batch(ferry_stream **out, ferry_stream *inner, ferry_group_key_fn key_fn,
                             void *key_arg, size_t batch_size, size_t max_buffered)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "group_batch: the inner stream is NULL");
    if (!key_fn)
        return reject(inner, FERRY_EINVAL, "group_batch: key_fn is NULL");
    return group_create(out, inner, key_fn, key_arg, batch_size, max_buffered, -1, 0,
                        "group_batch");
}

int ferry_stream_group_by_length(ferry_stream **out, ferry_stream *inner, int field_index,
                                 uint64_t bucket_width, size_t batch_size, size_t max_buffered)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "group_by_length: the inner stream is NULL");
    if (field_index < 0 || field_index >= inner->nfields)
        return reject(inner, FERRY_EINVAL, "group_by_length: field_index %d is outside [0, %d)",
                      field_index, inner->nfields);
    if (!inner->fields[field_index].variable)
        return reject(inner, FERRY_EINVAL,
                      "group_by_length: field_index %d (\"%s\") is not a variable field",
                      field_index, inner->fields[field_index].name);
    if (bucket_width < 1)
        return reject(inner, FERRY_EINVAL, "group_by_length: bucket_width 0 is outside [1, 2^64)");
    return group_create(out, inner, NULL, NULL, batch_size, max_buffered, field_index, bucket_width,
                        "group_by_length");
}

/* ---- Shard ---- */

typedef struct shard_dec {
    decorator base;
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
    put_kind(w, KIND_SHARD, it->sd->k, it->sd->n);
    return ferry_stream_save_to(it->it, w);
}

static int shard_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    shard_iter *it = iter;
    int rc = get_kind(r, KIND_SHARD, it->sd->k, it->sd->n, "k", "n");
    return rc < 0 ? rc : ferry_stream_restore_from(it->it, r, ctx);
}

static int shard_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return pass_fetch(((shard_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable shard_vtable = {
    shard_open, shard_next, shard_close, dec_destroy, shard_save, shard_restore, shard_fetch};

int ferry_stream_shard(ferry_stream **out, ferry_stream *inner, uint64_t k, uint64_t n)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "shard: the inner stream is NULL");
    if (n == 0 || k >= n)
        return reject(inner, FERRY_EINVAL, "shard: k %llu is outside [0, n = %llu)",
                      (unsigned long long)k, (unsigned long long)n);
    shard_dec *sd = ferry__calloc(1, sizeof *sd);
    if (!sd)
        return reject(inner, FERRY_ENOMEM, "shard: out of memory");
    sd->base.inner = inner;
    sd->k = k;
    sd->n = n;
    return wrap(out, &shard_vtable, sd, inner, 0);
}

/* ---- Repeat ---- */

typedef struct repeat {
    decorator base;
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
    put_kind(w, KIND_REPEAT, it->r->times, 0);
    ferry_state_put_u64(w, it->pass);
    ferry_state_put_u64(w, (uint64_t)it->got | (uint64_t)it->ended << 1 | (uint64_t) !!it->it << 2);
    return it->it ? ferry_stream_save_to(it->it, w) : 0;
}

static int rep_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    repeat_iter *it = iter;
    uint64_t pass, flags;
    int rc = get_kind(r, KIND_REPEAT, it->r->times, 0, "times", "-");
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
        return pass_fetch(it->it, pos, out, ctx);
    if (!it->fetch_it) {
        int rc = ferry_stream_open(it->r->base.inner, it->shard, it->nshards, pass_epoch(it),
                                   &it->fetch_it);
        if (rc < 0)
            return ferry__err_prefix(rc, "repeat: opening the stream to fetch a sample");
    }
    return pass_fetch(it->fetch_it, pos, out, ctx);
}

static const ferry_stream_vtable repeat_vtable = {rep_open, rep_next,    rep_close, dec_destroy,
                                                  rep_save, rep_restore, rep_fetch};

int ferry_stream_repeat(ferry_stream **out, ferry_stream *inner, uint64_t times)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "repeat: the inner stream is NULL");
    repeat *r = ferry__calloc(1, sizeof *r);
    if (!r)
        return reject(inner, FERRY_ENOMEM, "repeat: out of memory");
    r->base.inner = inner;
    r->times = times;
    return wrap(out, &repeat_vtable, r, inner, 0);
}

/* ---- Take and skip ---- */

typedef struct counted {
    decorator base;
    uint64_t n;
    int kind; /* KIND_TAKE or KIND_SKIP */
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
    put_kind(w, it->c->kind, it->c->n, 0);
    ferry_state_put_u64(w, it->seen);
    return ferry_stream_save_to(it->it, w);
}

static int cnt_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    counted_iter *it = iter;
    int rc = get_kind(r, it->c->kind, it->c->n, 0, "n", "-");
    if (rc == 0)
        rc = get_count(r, it->c->n, "samples counted", &it->seen);
    return rc < 0 ? rc : ferry_stream_restore_from(it->it, r, ctx);
}

static int cnt_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return pass_fetch(((counted_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable take_vtable = {cnt_open, take_next,   cnt_close, dec_destroy,
                                                cnt_save, cnt_restore, cnt_fetch};
static const ferry_stream_vtable skip_vtable = {cnt_open, skip_next,   cnt_close, dec_destroy,
                                                cnt_save, cnt_restore, cnt_fetch};

static int counted_create(ferry_stream **out, ferry_stream *inner, uint64_t n,
                          const ferry_stream_vtable *vt, const char *who)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "%s: the inner stream is NULL", who);
    counted *c = ferry__calloc(1, sizeof *c);
    if (!c)
        return reject(inner, FERRY_ENOMEM, "%s: out of memory", who);
    c->base.inner = inner;
    c->n = n;
    c->kind = vt == &take_vtable ? KIND_TAKE : KIND_SKIP;
    return wrap(out, vt, c, inner, 0);
}

int ferry_stream_take(ferry_stream **out, ferry_stream *inner, uint64_t n)
{
    return counted_create(out, inner, n, &take_vtable, "take");
}

int ferry_stream_skip(ferry_stream **out, ferry_stream *inner, uint64_t n)
{
    return counted_create(out, inner, n, &skip_vtable, "skip");
}
