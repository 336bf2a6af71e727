/*
 * The group-batch decorator (ferry/stream.h gives the rules): samples wait in
 * slots, grouped by key, until their group holds a batch, which then goes out
 * whole after a FERRY_BREAK. What all decorators share is decorators.c.
 */
#include "decorators_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---- Group-batch ---- */

typedef struct grouper {
    ferry__decorator base;
    ferry_group_key_fn key_fn;
    void *key_arg;
    size_t batch, max_buffered;
    size_t cap;   /* slots and group records per iterator: max_buffered + 1 */
    size_t nhash; /* hash buckets, a power of two >= cap */
    ferry__slot_layout L;
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
    ferry_sample view = ferry__slot_view(&g->L, it->slots + (size_t)s * g->L.stride, data);
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
    int rc = ferry__dec_check_sample("group_batch", out, g->L.nfields);
    if (rc < 0)
        return rc;
    for (;;) {
        if (it->emit_break) {
            it->emit_break = false;
            return FERRY_BREAK;
        }
        if (it->emit >= 0) {
            int32_t s = it->emit;
            ferry__slot_copy(&g->L, it->slots + (size_t)s * g->L.stride, &it->pos[s], out);
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
        rc = ferry__slot_read(&g->L, g->base.inner, it->slots + (size_t)s * g->L.stride, it->it,
                              ctx, "group_batch", &it->pos[s], false);
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
    ferry__dec_put_kind(w, FERRY__DEC_GROUP, g->batch, g->max_buffered);
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
    int rc = ferry__dec_get_kind(r, FERRY__DEC_GROUP, g->batch, g->max_buffered, "batch_size",
                                 "max_buffered");
    if (rc == 0)
        rc = ferry_state_get_u64(r, &flags);
    if (rc == 0)
        rc = ferry__dec_get_count(r, g->batch, "samples left to emit", &nemit);
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
    if ((rc = ferry__dec_get_count(r, g->cap - nemit, "groups", &ngroups)) < 0 ||
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
    if ((rc = ferry__slot_refill(&g->L, g->base.inner, it->slots, it->pos, (size_t)used, it->it,
                                 ctx, "group_batch")) < 0)
        return rc;
    /* a group's key comes from its samples: a source that changed since the save
     * shows here */
    for (int32_t gi = 0; gi < (int32_t)ngroups; gi++) {
        const group *gr = &it->groups[gi];
        for (int32_t s = gr->head; s >= 0; s = it->slot_next[s]) {
            void *data[FERRY_MAX_FIELDS];
            ferry_sample view = ferry__slot_view(&g->L, it->slots + (size_t)s * g->L.stride, data);
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
    return ferry__dec_pass_fetch(((group_iter *)iter)->it, pos, out, ctx);
}

static const ferry_stream_vtable group_vtable = {
    grp_open, grp_next, grp_close, ferry__dec_destroy, grp_save, grp_restore, grp_fetch};

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
        return ferry__dec_reject(inner, FERRY_EINVAL, "%s: batch_size %zu is outside [1, %zu]", who,
                                 batch_size, FERRY_STREAM_MAX_BATCH);
    if (max_buffered < batch_size || max_buffered > FERRY_STREAM_MAX_BUFFER)
        return ferry__dec_reject(inner, FERRY_EINVAL,
                                 "%s: max_buffered %zu is outside [batch_size = %zu, %zu]", who,
                                 max_buffered, batch_size, FERRY_STREAM_MAX_BUFFER);
    ferry__slot_layout L;
    size_t bytes;
    int rc = ferry__slot_layout_init(&L, inner, max_buffered + 1, who, "max_buffered", max_buffered,
                                     &bytes);
    if (rc < 0)
        return ferry__dec_reject_kept(inner, rc);
    grouper *g = ferry__calloc(1, sizeof *g);
    if (!g)
        return ferry__dec_reject(inner, FERRY_ENOMEM, "%s: out of memory", who);
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
    return ferry__dec_wrap(out, &group_vtable, g, inner,
                           bytes + g->cap * (4 * sizeof(int32_t) + sizeof(ferry_pos)));
}

int ferry_stream_group_batch(ferry_stream **out, ferry_stream *inner, ferry_group_key_fn key_fn,
                             void *key_arg, size_t batch_size, size_t max_buffered)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "group_batch: the inner stream is NULL");
    if (!key_fn)
        return ferry__dec_reject(inner, FERRY_EINVAL, "group_batch: key_fn is NULL");
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
        return ferry__dec_reject(inner, FERRY_EINVAL,
                                 "group_by_length: field_index %d is outside [0, %d)", field_index,
                                 inner->nfields);
    if (!inner->fields[field_index].variable)
        return ferry__dec_reject(inner, FERRY_EINVAL,
                                 "group_by_length: field_index %d (\"%s\") is not a variable field",
                                 field_index, inner->fields[field_index].name);
    if (bucket_width < 1)
        return ferry__dec_reject(inner, FERRY_EINVAL,
                                 "group_by_length: bucket_width 0 is outside [1, 2^64)");
    return group_create(out, inner, NULL, NULL, batch_size, max_buffered, field_index, bucket_width,
                        "group_by_length");
}
