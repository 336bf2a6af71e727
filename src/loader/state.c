/*
 * The loader state: the codec of the blob that saves an epoch's place, and the
 * resume that puts a loader back there.
 */
#include "loader_internal.h"
#include "../core/bytes.h"

#include <stdio.h>
#include <string.h>

/* ---- Loader state ----
 * The blob (little-endian): "ferry-ls" (8 bytes), version u32, kind u32 (1 map, 2
 * stream), source u64 (a hash of the schema, and the length of a map-style
 * dataset), batch_size u64 (per rank), seed u64, drop_last u32, nshards u32,
 * world_size i64, rank i64 (a stream's; -1 for a map-style loader, whose state
 * is the same on every rank), epoch u64, next batch u64 (the global step: batch
 * k of every rank is global batch k), skipped this epoch u64, cursor u32, live
 * u32 (the rotation as of the batches handed out), sampler u64 (ferry_sampler_id
 * of the order; 0 for a stream), global batch u64 (batch_size x world_size); then
 * per shard: next() calls u64 and ended u64 (as of the batches
 * handed out), ended u64 and the position's size u64 and bytes (as of the
 * batches read: a resumable stream's ferry_stream_save, size 0 when none); then
 * the rotation as of the batches read: cursor u32, live u32; the batches read
 * but not handed out: count u32, and each one's shard u32, samples u32, skipped
 * u32, flags u32 (1: it ended its shard, 2: its last sample failed), next()
 * calls u64, the first failure's code i32, slot u32, message length u32 and
 * bytes, and its samples' places (32 bytes each); then the CRC-32C of all that
 * (u32). Version 2 had no sampler and global batch (a 96-byte head) and kept the
 * rank of a map-style loader; version 1 had only the calls and the ended flag
 * per shard. Both are read: their map-style states resume on the same batch_size
 * (their sampler is not checked: they did not record it). */

#define STATE_MAGIC "ferry-ls"
#define STATE_VERSION 3u
#define STATE_HEAD 112u
#define STATE_HEAD_V2 96u

static size_t head_size(uint32_t version)
{
    return version >= 3 ? STATE_HEAD : STATE_HEAD_V2;
}

/* Under m: the batches are taken in order; follow the rotation as schedule() and
 * publish() did for them. */
void ferry__loader_note_done(ferry_loader *l, ferry_batch *b)
{
    l->done_next = b->number + 1;
    if (b->shard < 0)
        return;
    shard *sh = &l->shards[b->shard];
    sh->calls_done += b->calls;
    if (l->done_live)
        l->done_cursor = (l->done_cursor + 1) % l->done_live;
    if (b->shard_ended && !sh->ended_done) {
        uint32_t pos = 0;
        for (int s = 0; s < b->shard; s++)
            pos += !l->shards[s].ended_done;
        sh->ended_done = true;
        l->done_live--;
        if (pos < l->done_cursor)
            l->done_cursor--;
        l->done_cursor = l->done_live ? l->done_cursor % l->done_live : 0;
    }
}

/* Under m, from start_locked with the shards just opened: puts each shard where
 * the state (l->resuming, checked whole) says. A resumable stream restores each
 * shard's saved position (a shuffle buffer's samples are read again from their
 * places) and queues the batches that were read but not handed out, to be made
 * again from their samples' places; any other stream has no position to seek
 * to, so every sample its shards gave since the epoch began is read again. On
 * the caller's thread: that is a resume's cost. */
int ferry__loader_restore_shards(ferry_loader *l, uint64_t epoch)
{
    int rc = 0;
    uint32_t version = ferry__load_le32(l->resuming + 8);
    size_t hs = head_size(version);
    ferry_state r = {.in = l->resuming + hs, .n = l->resuming_len - hs - 4};
    ferry_ctx *ctx = &l->inline_worker.ctx;
    ctx->epoch = epoch;
    uint8_t *mem = NULL;
    bool resumable = version >= 2 && l->st->resumable;
    for (uint32_t s = 0; s < l->nshards; s++) {
        shard *sh = &l->shards[s];
        uint64_t calls, ended_done, ended = 0, plen = 0;
        FERRY_TRY(ferry_state_get_u64(&r, &calls));
        FERRY_TRY(ferry_state_get_u64(&r, &ended_done));
        if (version >= 2) {
            FERRY_TRY(ferry_state_get_u64(&r, &ended));
            FERRY_TRY(ferry_state_get_u64(&r, &plen));
        }
        sh->calls_done = calls;
        sh->ended_done = ended_done != 0;
        sh->ended = resumable ? ended != 0 : ended_done != 0;
        if (plen) {
            if (plen > r.n - r.off)
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: shard %u: cut short", s);
            rc = ferry__stream_resume(sh->it, r.in + r.off, (size_t)plen, ctx);
            if (rc < 0)
                FERRY_FAIL(rc, "loader state: stream shard %u: %s", s, ferry_last_errmsg());
            r.off += (size_t)plen;
            continue;
        }
        if (resumable || calls == 0)
            continue; /* a resumable shard without a position was not read yet */
        /* no position: read its samples again */
        if (!mem) {
            size_t total = 0;
            for (int f = 0; f < l->nfields; f++)
                total += ferry__align64(l->field_stride[f]);
            if (!(mem = ferry__aligned_alloc(total ? total : 64)))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        }
        void *data[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        for (int f = 0, off = 0; f < l->nfields;
             off += (int)ferry__align64(l->field_stride[f]), f++)
            data[f] = mem + off;
        ferry_sample smp = {l->nfields, data, len, {0}};
        for (uint64_t c = 0; c < calls; c++) {
            memset(len, 0, sizeof len);
            rc = ferry_stream_next(sh->it, &smp, ctx);
            if (rc == FERRY_END && c + 1 < calls)
                FERRY_FAIL(FERRY_EINVAL,
                           "loader state: stream shard %u ended after %llu reads, but the state "
                           "says %llu: it was saved from another source",
                           s, (unsigned long long)(c + 1), (unsigned long long)calls);
        }
        rc = 0;
    }
    l->live = l->done_live;
    l->cursor = l->done_cursor;
    if (version >= 2) {
        uint32_t cursor, live, npend;
        FERRY_TRY(ferry__state_get_u32(&r, &cursor));
        FERRY_TRY(ferry__state_get_u32(&r, &live));
        FERRY_TRY(ferry__state_get_u32(&r, &npend));
        if (resumable) {
            l->live = live;
            l->cursor = cursor;
        }
        if (npend && !resumable)
            FERRY_FAIL(FERRY_EINVAL, "loader state: it holds batches as their samples' places, "
                                     "but this stream is not resumable: it was saved from "
                                     "another source");
        /* each entry takes at least 36 bytes: a count past that is damage */
        if (npend > (r.n - r.off) / 36)
            FERRY_FAIL(FERRY_ECORRUPT, "loader state: %u batches do not fit in it", npend);
        if (npend && !(l->replay = ferry__calloc(npend, sizeof *l->replay)))
            FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
        for (uint32_t k = 0; k < npend; k++) {
            pending *e = &l->replay[k];
            l->nreplay = k + 1;
            uint32_t flags, rc32, mlen;
            FERRY_TRY(ferry__state_get_u32(&r, &e->shard));
            FERRY_TRY(ferry__state_get_u32(&r, &e->n));
            FERRY_TRY(ferry__state_get_u32(&r, &e->skipped));
            FERRY_TRY(ferry__state_get_u32(&r, &flags));
            FERRY_TRY(ferry_state_get_u64(&r, &e->calls));
            FERRY_TRY(ferry__state_get_u32(&r, &rc32));
            FERRY_TRY(ferry__state_get_u32(&r, &e->fail_slot));
            FERRY_TRY(ferry__state_get_u32(&r, &mlen));
            if (e->shard >= l->nshards || e->n > l->o.batch_size || flags > 3 ||
                mlen >= sizeof e->fail_msg || ((flags & 2) && e->n == 0))
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: batch %u of those read is damaged", k);
            FERRY_TRY(ferry_state_get(&r, e->fail_msg, mlen));
            e->fail_msg[mlen] = 0;
            e->fail_rc = (int)rc32;
            e->shard_ended = flags & 1;
            e->last_failed = flags & 2;
            if (e->n > (r.n - r.off) / sizeof(ferry_pos))
                FERRY_FAIL(FERRY_ECORRUPT, "loader state: batch %u of those read is cut short", k);
            if (e->n && !(e->pos = ferry__malloc(e->n * sizeof *e->pos)))
                FERRY_FAIL(FERRY_ENOMEM, "loader: out of memory");
            FERRY_TRY(ferry__state_get_pos(&r, e->pos, e->n));
        }
    }
    if (r.off != r.n)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes left over", r.n - r.off);
    uint32_t ended = 0;
    for (uint32_t s = 0; s < l->nshards; s++)
        ended += l->shards[s].ended;
    if (l->live != l->nshards - ended || (l->live ? l->cursor >= l->live : l->cursor != 0))
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: rotation cursor %u of %u live shards (%u ended)",
                   l->cursor, l->live, ended);
cleanup:
    if (rc < 0)
        ferry__loader_free_replay(l);
    ferry__aligned_free(mem);
    return rc;
}

static uint64_t source_id(const ferry_loader *l)
{
    uint64_t h = ferry_hash64(l->ds ? 1 : 2, l->ds ? l->ds->len : 0);
    for (int f = 0; f < l->nfields; f++) {
        const ferry_field *fi = &l->fields[f];
        for (const char *c = fi->name; *c; c++)
            h = ferry_hash64(h, (unsigned char)*c);
        h = ferry_hash64(h, (uint64_t)fi->dtype << 8 | (uint64_t)fi->ndim << 1 | !!fi->variable);
        for (int d = 0; d < fi->ndim; d++)
            h = ferry_hash64(h, (uint64_t)fi->shape[d]);
    }
    return h;
}

/* The samples of one global step: batch_size on each of world_size ranks. */
static uint64_t global_batch(const ferry_loader *l)
{
    return (uint64_t)l->o.batch_size * (uint64_t)l->o.world_size;
}

/* Under m: the state into w (a growing buffer). A resumable stream loader waits
 * until no shard is being read (holding off new batches meanwhile), then saves
 * each shard's position and the batches read but not handed out as their
 * samples' places. */
static int state_build(ferry_loader *l, ferry_state *w)
{
    int rc = 0;
    bool resumable = l->st && l->st->resumable;
    if (resumable && l->over && l->next_sched > l->done_next)
        return ferry__err(FERRY_ESTATE,
                          "loader state: epoch %llu was stopped at batch %llu (an error or a "
                          "cancel ended it) and the batches its stream shards had read ahead are "
                          "gone, so there is no position to save; start an epoch first",
                          (unsigned long long)l->epoch, (unsigned long long)l->done_next);
    if (resumable) {
        l->pausing++;
        for (;;) {
            bool busy = false;
            for (uint32_t s = 0; s < l->nshards; s++)
                busy |= l->shards[s].busy;
            if (!busy)
                break;
            pthread_cond_wait(&l->ready_cv, &l->m);
        }
    }
    uint8_t head[STATE_HEAD];
    memcpy(head, STATE_MAGIC, 8);
    ferry__store_le32(head + 8, STATE_VERSION);
    ferry__store_le32(head + 12, l->st ? 2 : 1);
    ferry__store_le64(head + 16, source_id(l));
    ferry__store_le64(head + 24, l->o.batch_size);
    ferry__store_le64(head + 32, l->o.seed);
    ferry__store_le32(head + 40, l->o.drop_last ? 1 : 0);
    ferry__store_le32(head + 44, l->st ? l->nshards : 0);
    ferry__store_le64(head + 48, (uint64_t)l->o.world_size);
    ferry__store_le64(head + 56, l->st ? (uint64_t)l->o.rank : UINT64_MAX);
    ferry__store_le64(head + 64, l->epoch);
    ferry__store_le64(head + 72, l->done_next);
    ferry__store_le64(head + 80, l->epoch_skipped);
    ferry__store_le32(head + 88, l->st ? l->done_cursor : 0);
    ferry__store_le32(head + 92, l->st ? l->done_live : 0);
    ferry__store_le64(head + 96, l->st ? 0 : ferry_sampler_id(l->sampler));
    ferry__store_le64(head + 104, global_batch(l));
    ferry_state_put(w, head, sizeof head);
    ferry_state pw = {.grow = true};
    for (uint32_t s = 0; l->st && s < l->nshards; s++) {
        const shard *sh = &l->shards[s];
        ferry_state_put_u64(w, sh->calls_done);
        ferry_state_put_u64(w, sh->ended_done);
        ferry_state_put_u64(w, sh->ended);
        pw.len = 0;
        if (resumable && sh->it && !sh->ended && sh->it->used)
            FERRY_TRY(ferry__stream_snapshot(sh->it, &pw));
        ferry_state_put_u64(w, pw.len);
        ferry_state_put(w, pw.buf, pw.len);
    }
    if (l->st) {
        ferry__state_put_u32(w, l->st ? l->cursor : 0);
        ferry__state_put_u32(w, l->st ? l->live : 0);
        uint64_t inflight = resumable ? l->next_sched - l->done_next : 0;
        uint32_t queued = resumable ? l->nreplay - l->replay_head : 0;
        ferry__state_put_u32(w, (uint32_t)(inflight + queued));
        for (uint64_t k = 0; k < inflight + queued; k++) {
            const ferry_batch *b = NULL;
            const pending *e = NULL;
            if (k < inflight) {
                b = l->by_number[(l->done_next + k) % l->nbufs];
                if (!b->ready || b->number != l->done_next + k)
                    FERRY_FAIL(FERRY_ESTATE, "loader state: batch %llu is not ready",
                               (unsigned long long)(l->done_next + k));
            } else {
                e = &l->replay[l->replay_head + (k - inflight)];
            }
            uint32_t n = b ? b->out_size : e->n;
            bool last_failed =
                b ? b->skipped && l->o.on_error == FERRY_ON_ERROR_FAIL && n && b->fail_slot == n - 1
                  : e->last_failed;
            const char *msg = b ? b->fail_msg : e->fail_msg;
            size_t mlen = (b ? b->skipped : e->skipped) ? strlen(msg) : 0;
            ferry__state_put_u32(w, b ? (uint32_t)b->shard : e->shard);
            ferry__state_put_u32(w, n);
            ferry__state_put_u32(w, b ? b->skipped : e->skipped);
            ferry__state_put_u32(w, (uint32_t)(b ? b->shard_ended : e->shard_ended) |
                                        (uint32_t)last_failed << 1);
            ferry_state_put_u64(w, b ? b->calls : e->calls);
            ferry__state_put_u32(w, (uint32_t)(b ? b->fail_rc : e->fail_rc));
            ferry__state_put_u32(w, b ? b->fail_slot : e->fail_slot);
            ferry__state_put_u32(w, (uint32_t)mlen);
            ferry_state_put(w, msg, mlen);
            ferry__state_put_pos(w, b ? b->pos : e->pos, n);
        }
    }
    if (w->nomem || pw.nomem)
        FERRY_FAIL(FERRY_ENOMEM, "loader state: out of memory");
cleanup:
    ferry__free(pw.buf);
    if (resumable && --l->pausing == 0)
        pthread_cond_broadcast(&l->work_cv);
    return rc;
}

size_t ferry_loader_state_size(const ferry_loader *l)
{
    ferry_loader *m = (ferry_loader *)l; /* the lock only */
    ferry_state w = {.grow = true};
    pthread_mutex_lock(&m->m);
    int rc = state_build(m, &w);
    pthread_mutex_unlock(&m->m);
    ferry__free(w.buf);
    return rc < 0 ? 0 : w.len + 4;
}

int ferry_loader_state_save(ferry_loader *l, void *buf, size_t cap, size_t *len)
{
    ferry__err_clear();
    if (len)
        *len = 0;
    if (l->o.order == FERRY_ORDER_COMPLETION)
        return ferry__loader_set_errmsg(
            l, ferry__err(FERRY_ENOTSUP, "loader state: batches handed out in completion order "
                                         "have no position to resume from"));
    ferry_state w = {.grow = true};
    pthread_mutex_lock(&l->m);
    int rc = state_build(l, &w);
    pthread_mutex_unlock(&l->m);
    size_t need = w.len + 4;
    if (rc == 0 && len)
        *len = need;
    if (rc == 0 && (!buf || cap < need))
        rc = ferry__err(FERRY_EOVERFLOW, "loader state: %zu bytes needed, %zu given", need, cap);
    if (rc == 0) {
        memcpy(buf, w.buf, w.len);
        ferry__store_le32((uint8_t *)buf + w.len, ferry_crc32c(0, buf, w.len));
    }
    ferry__free(w.buf);
    return ferry__loader_set_errmsg(l, rc);
}

/* Compares a saved setting with the loader's: a clear error naming it. */
#define STATE_SAME(what, saved, now)                                                               \
    do {                                                                                           \
        if ((uint64_t)(saved) != (uint64_t)(now))                                                  \
            FERRY_FAIL(FERRY_EINVAL, "loader state: saved with %s %llu, this loader has %llu",     \
                       what, (unsigned long long)(saved), (unsigned long long)(now));              \
    } while (0)

/* The batch sizes that keep a global batch of G on other world sizes, for a
 * message: "world_size 1 (batch_size 24), 2 (12), 3 (8), ..." (the first 12). */
static void ways_to_split(uint64_t G, char *buf, size_t cap)
{
    size_t len = 0;
    int shown = 0;
    buf[0] = 0;
    for (uint64_t w = 1; w <= G && shown < 12 && len < cap; w++) {
        if (G % w)
            continue;
        int k = snprintf(buf + len, cap - len,
                         shown ? ", %llu (%llu)" : "world_size %llu (batch_size %llu)",
                         (unsigned long long)w, (unsigned long long)(G / w));
        if (k < 0)
            break;
        len += (size_t)k;
        shown++;
    }
    if (shown == 12 && len < cap)
        snprintf(buf + len, cap - len, ", ...");
}

/* A map-style state's order and global batch against the loader's: the global
 * batch G = batch_size x world_size must be the same (the global steps are then
 * the same); the world size may differ, the batch size with it. */
static int check_global_batch(const ferry_loader *l, const uint8_t *p)
{
    uint64_t sB = ferry__load_le64(p + 24), sW = ferry__load_le64(p + 48),
             sG = ferry__load_le64(p + 104), B = l->o.batch_size, W = (uint64_t)l->o.world_size,
             G = global_batch(l);
    if (sW < 1 || sW > ((uint64_t)1 << 31) || sB < 1 || sB > ((uint64_t)1 << 24) || sB * sW != sG)
        return ferry__err(FERRY_ECORRUPT,
                          "loader state: batch_size %llu x world_size %llu is not its global "
                          "batch %llu: the state is damaged",
                          (unsigned long long)sB, (unsigned long long)sW, (unsigned long long)sG);
    if (sG == G)
        return 0;
    char ways[320];
    ways_to_split(sG, ways, sizeof ways);
    if (sG % W == 0)
        return ferry__err(FERRY_EINVAL,
                          "loader state: saved with a global batch of %llu (batch_size %llu x "
                          "world_size %llu); this loader's is %llu (batch_size %llu x world_size "
                          "%llu). The global batch must stay the same: on world_size %llu use "
                          "batch_size %llu",
                          (unsigned long long)sG, (unsigned long long)sB, (unsigned long long)sW,
                          (unsigned long long)G, (unsigned long long)B, (unsigned long long)W,
                          (unsigned long long)W, (unsigned long long)(sG / W));
    return ferry__err(FERRY_EINVAL,
                      "loader state: saved with a global batch of %llu (batch_size %llu x "
                      "world_size %llu); world_size %llu does not divide it, so no batch_size "
                      "continues its global steps here. Those that do: %s",
                      (unsigned long long)sG, (unsigned long long)sB, (unsigned long long)sW,
                      (unsigned long long)W, ways);
}

/* Checks a state against the loader (its settings and source) without touching
 * what the workers use: the rotation it holds in *cursor, *live. */
static int check_state(const ferry_loader *l, const uint8_t *p, size_t n, uint32_t *cursor,
                       uint32_t *live)
{
    int rc = 0;
    if (!p || n < STATE_HEAD_V2 + 4 || memcmp(p, STATE_MAGIC, 8) != 0)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes that are not a ferry loader state", n);
    uint32_t version = ferry__load_le32(p + 8), nsh = ferry__load_le32(p + 44);
    if (version > STATE_VERSION || version < 1)
        FERRY_FAIL(FERRY_ENOTSUP, "loader state: version %u, this library reads versions 1 to %u",
                   version, STATE_VERSION);
    size_t hs = head_size(version);
    if (n < hs + 4)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes, cut short of its %zu-byte head", n,
                   hs + 4);
    uint32_t crc = ferry_crc32c(0, p, n - 4);
    if (crc != ferry__load_le32(p + n - 4))
        FERRY_FAIL(FERRY_ECORRUPT,
                   "loader state: CRC mismatch (stored %08x, computed %08x): "
                   "the state is damaged",
                   ferry__load_le32(p + n - 4), crc);
    if (ferry__load_le32(p + 12) != (l->st ? 2u : 1u))
        FERRY_FAIL(FERRY_EINVAL, "loader state: saved from a %s loader, this one is %s",
                   ferry__load_le32(p + 12) == 2 ? "stream" : "map-style",
                   l->st ? "a stream" : "map-style");
    if (ferry__load_le64(p + 16) != source_id(l))
        FERRY_FAIL(FERRY_EINVAL, "loader state: saved from another source (its schema%s differ)",
                   l->ds ? " or length" : "");
    if (!l->st && version >= 3) {
        if (ferry__load_le64(p + 96) != ferry_sampler_id(l->sampler))
            FERRY_FAIL(FERRY_EINVAL,
                       "loader state: saved with another order: this loader's %s sampler (or "
                       "its seed, length, shuffle, drop_last, indices or weights) differs",
                       ferry_sampler_kind(l->sampler));
        FERRY_TRY(check_global_batch(l, p));
    } else {
        STATE_SAME("batch_size", ferry__load_le64(p + 24), l->o.batch_size);
    }
    STATE_SAME("seed", ferry__load_le64(p + 32), l->o.seed);
    STATE_SAME("drop_last", ferry__load_le32(p + 40), l->o.drop_last ? 1 : 0);
    if (l->st && (int64_t)ferry__load_le64(p + 48) != l->o.world_size)
        FERRY_FAIL(FERRY_ESTATE,
                   "loader state: a stream's state is its rank's place in its own shards "
                   "(saved on rank %lld of world_size %lld), and a stream cannot deal its "
                   "shards again to world_size %lld: resume a stream on %lld ranks, or "
                   "start its epoch again",
                   (long long)ferry__load_le64(p + 56), (long long)ferry__load_le64(p + 48),
                   (long long)l->o.world_size, (long long)ferry__load_le64(p + 48));
    if (l->st && (int64_t)ferry__load_le64(p + 56) != l->o.rank)
        FERRY_FAIL(FERRY_EINVAL,
                   "loader state: saved with rank %lld of world_size %lld, this loader has "
                   "rank %lld of %lld",
                   (long long)ferry__load_le64(p + 56), (long long)ferry__load_le64(p + 48),
                   (long long)l->o.rank, (long long)l->o.world_size);
    STATE_SAME("stream_shards", nsh, l->st ? l->nshards : 0);
    if (!l->st && n != hs + 4)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes, a map-style state has %zu", n, hs + 4);
    if (!l->st && ferry__load_le64(p + 72) > ferry__loader_epoch_batches(l))
        FERRY_FAIL(FERRY_EINVAL,
                   "loader state: it is at batch %llu, past the %llu batches of this loader's "
                   "epochs: it was saved from another source or order",
                   (unsigned long long)ferry__load_le64(p + 72),
                   (unsigned long long)ferry__loader_epoch_batches(l));
    /* the rotation as of the batches handed out; the rest is read by the restore */
    uint32_t ended = 0;
    *cursor = ferry__load_le32(p + 88);
    *live = ferry__load_le32(p + 92);
    ferry_state r = {.in = p + hs, .n = n - hs - 4};
    for (uint32_t s = 0; s < nsh; s++) {
        uint64_t calls, e, e2 = 0, plen = 0;
        if (ferry_state_get_u64(&r, &calls) < 0 || ferry_state_get_u64(&r, &e) < 0 ||
            (version >= 2 &&
             (ferry_state_get_u64(&r, &e2) < 0 || ferry_state_get_u64(&r, &plen) < 0)))
            FERRY_FAIL(FERRY_ECORRUPT,
                       "loader state: %zu bytes, which do not hold the %u stream "
                       "shards it names",
                       n, nsh);
        if (e > 1 || e2 > 1 || plen > r.n - r.off)
            FERRY_FAIL(FERRY_ECORRUPT, "loader state: shard %u is damaged", s);
        if (plen && !l->st->resumable)
            FERRY_FAIL(FERRY_EINVAL,
                       "loader state: shard %u holds a saved position, but this "
                       "stream is not resumable: it was saved from another source",
                       s);
        r.off += (size_t)plen;
        ended += (uint32_t)e;
    }
    if (version < 2 && r.off != r.n)
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: %zu bytes left over", r.n - r.off);
    if (l->st && (*live != nsh - ended || (*live ? *cursor >= *live : *cursor != 0)))
        FERRY_FAIL(FERRY_ECORRUPT, "loader state: rotation cursor %u of %u live shards (%u ended)",
                   *cursor, *live, ended);
cleanup:
    return rc;
}

int ferry_loader_state_check(const ferry_loader *l, const void *buf, size_t n, uint64_t *epoch,
                             uint64_t *first)
{
    uint32_t cursor, live;
    ferry__err_clear();
    int rc = check_state(l, buf, n, &cursor, &live);
    if (rc == 0) {
        *epoch = ferry__load_le64((const uint8_t *)buf + 64);
        *first = ferry__load_le64((const uint8_t *)buf + 72);
    }
    return rc;
}

int ferry_loader_state_resume(ferry_loader *l, const void *buf, size_t n)
{
    int rc = 0;
    const uint8_t *p = buf;
    bool locked = false;
    uint32_t cursor, live;
    ferry__err_clear();
    FERRY_TRY(check_state(l, p, n, &cursor, &live));
    pthread_mutex_lock(&l->m);
    locked = true;
    l->done_cursor = cursor;
    l->done_live = live;
    l->resuming = p;
    l->resuming_len = n;
    rc = ferry__loader_start_locked(l, ferry__load_le64(p + 64), ferry__load_le64(p + 72));
    l->resuming = NULL;
    if (rc == 0)
        l->epoch_skipped = ferry__load_le64(p + 80);
cleanup:
    if (locked)
        pthread_mutex_unlock(&l->m);
    return ferry__loader_set_errmsg(l, rc);
}
