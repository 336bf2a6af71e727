/*
 * Stream positions: ferry_stream_save / ferry_stream_restore / ferry_stream_fetch
 * over the decorators and the built-in resumable streams. The check everywhere:
 * stop a shard after k of its events (samples, breaks, errors), for EVERY k,
 * save, restore into a fresh iterator, and the rest is what an uninterrupted read
 * gives, event for event and byte for byte.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/stream.h>

/* ---- Helpers ---- */

/* One event of a read: what next() returned and, for a sample, a hash of its
 * bytes (variable fields up to their length) and of its pos. */
typedef struct event {
    int rc;
    uint64_t bytes, pos;
} event;

typedef struct reader {
    ferry_stream *st;
    int nf;
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    ferry_ctx *ctx;
} reader;

static void reader_init(reader *r, ferry_stream *st, uint64_t epoch)
{
    r->st = st;
    r->nf = ferry_stream_nfields(st);
    for (int f = 0; f < r->nf; f++)
        CHECK(r->data[f] = calloc(1, ferry_field_nbytes(ferry_stream_field(st, f)) + 1));
    CHECK_OK(ferry_ctx_create(&r->ctx, 11, epoch));
}

static void reader_free(reader *r)
{
    for (int f = 0; f < r->nf; f++)
        free(r->data[f]);
    ferry_ctx_free(r->ctx);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t sample_hash(const reader *r)
{
    uint64_t h = 1469598103934665603ull;
    for (int f = 0; f < r->nf; f++) {
        const ferry_field *fd = ferry_stream_field(r->st, f);
        size_t n = ferry_field_nbytes(fd);
        if (fd->variable) {
            n = (size_t)r->len[f] * ferry_field_row_elems(fd) * ferry_dtype_size(fd->dtype);
            h = fnv(h, &r->len[f], sizeof r->len[f]);
        }
        h = fnv(h, r->data[f], n);
    }
    return h;
}

static uint64_t pos_hash(const ferry_pos *p)
{
    return fnv(1469598103934665603ull, p, sizeof *p);
}

/* The next event, or rc FERRY_END. */
static event step(reader *r, ferry_stream_iter *it)
{
    memset(r->len, 0, sizeof r->len);
    ferry_sample s = {r->nf, r->data, r->len, {0}};
    event e = {ferry_stream_next(it, &s, r->ctx), 0, 0};
    if (e.rc == 0) {
        e.bytes = sample_hash(r);
        e.pos = pos_hash(&s.pos);
        /* and the sample read again from its pos is the same */
        ferry_pos p = s.pos;
        memset(r->len, 0, sizeof r->len);
        for (int f = 0; f < r->nf; f++)
            memset(r->data[f], 0xa5, ferry_field_nbytes(ferry_stream_field(r->st, f)));
        ferry_sample again = {r->nf, r->data, r->len, {0}};
        CHECK_OK(ferry_stream_fetch(it, &p, &again, r->ctx));
        CHECK_U64(sample_hash(r), e.bytes);
    }
    return e;
}

#define MAX_EVENTS 4000

/* Reads the shard to its end (at most MAX_EVENTS events). */
static size_t read_all(ferry_stream *st, uint64_t shard, uint64_t nshards, uint64_t epoch,
                       event *ev)
{
    reader r;
    reader_init(&r, st, epoch);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, shard, nshards, epoch, &it));
    size_t n = 0;
    for (;;) {
        CHECK(n < MAX_EVENTS);
        ev[n] = step(&r, it);
        if (ev[n].rc == FERRY_END)
            break;
        n++;
    }
    ferry_stream_close(it);
    reader_free(&r);
    return n;
}

/* For every k: k events, save, a fresh iterator restored, the rest. Returns the
 * largest state seen. */
static size_t check_every_stop(ferry_stream *st, uint64_t shard, uint64_t nshards, uint64_t epoch)
{
    CHECK(ferry_stream_resumable(st));
    event *want = calloc(MAX_EVENTS + 1, sizeof *want);
    CHECK(want);
    size_t n = read_all(st, shard, nshards, epoch, want), most = 0;
    CHECK(n > 0);
    for (size_t k = 0; k <= n; k++) {
        reader r;
        reader_init(&r, st, epoch);
        ferry_stream_iter *a, *b;
        CHECK_OK(ferry_stream_open(st, shard, nshards, epoch, &a));
        for (size_t i = 0; i < k; i++) {
            event e = step(&r, a);
            CHECK_EQ(e.rc, want[i].rc);
        }
        size_t len;
        CHECK_RC(ferry_stream_save(a, NULL, 0, &len), FERRY_EOVERFLOW);
        unsigned char *buf = malloc(len);
        CHECK(buf);
        size_t len2;
        CHECK_OK(ferry_stream_save(a, buf, len, &len2));
        CHECK_EQ(len2, len);
        most = len > most ? len : most;
        ferry_stream_close(a);
        CHECK_OK(ferry_stream_open(st, shard, nshards, epoch, &b));
        CHECK_OK(ferry_stream_restore(b, buf, len, r.ctx));
        for (size_t i = k; i <= n; i++) {
            event e = step(&r, b);
            if (e.rc != want[i].rc || e.bytes != want[i].bytes || e.pos != want[i].pos)
                test_fail(__FILE__, __LINE__,
                          "stopped after %zu of %zu events: event %zu differs (rc %d, want %d)", k,
                          n, i, e.rc, want[i].rc);
        }
        ferry_stream_close(b);
        free(buf);
        reader_free(&r);
    }
    free(want);
    return most;
}

/* ---- Tests ---- */

TEST(dataset_in_order)
{
    ferry_dataset *ds = test_synthetic(50, 6, 0);
    ferry_stream *st = test_stream_of(ds);
    for (uint64_t s = 0; s < 3; s++)
        check_every_stop(st, s, 3, 0);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(shuffle)
{
    ferry_dataset *ds = test_synthetic(80, 6, 0);
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 9, 3));
    size_t most = check_every_stop(st, 1, 2, 4);
    /* the buffer as positions: 32 bytes a sample, not the samples' bytes */
    CHECK(most <= 16 + 24 + 44 + 16 + 9 * 32 + 8);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(shuffle_with_errors)
{
    /* errors pass through and the decorator goes on: a stop right after one too */
    ferry_dataset *ds = test_synthetic(60, 0, 7);
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 5, 1));
    check_every_stop(st, 0, 1, 0);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(group_by_length)
{
    ferry_dataset *ds = test_synthetic(120, 9, 0);
    ferry_stream *st = test_stream_of(ds);
    int text = -1;
    for (int f = 0; f < ferry_stream_nfields(st); f++)
        if (ferry_stream_field(st, f)->variable)
            text = f;
    CHECK(text >= 0);
    CHECK_OK(ferry_stream_shuffle(&st, st, 6, 2));
    /* max_buffered small enough that partial groups are pushed out early too */
    CHECK_OK(ferry_stream_group_by_length(&st, st, text, 2, 4, 7));
    check_every_stop(st, 0, 2, 1);
    check_every_stop(st, 1, 2, 1);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

static int64_t mod_key(const ferry_sample *s, const ferry_field *fields, void *arg)
{
    (void)fields;
    uint64_t v;
    memcpy(&v, s->data[0], 8);
    return (int64_t)(v % *(uint64_t *)arg);
}

TEST(group_many_keys)
{
    ferry_dataset *ds = test_synthetic(200, 0, 0);
    ferry_stream *st = test_stream_of(ds);
    uint64_t groups = 13;
    CHECK_OK(ferry_stream_group_batch(&st, st, mod_key, &groups, 5, 20));
    check_every_stop(st, 0, 1, 0);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(repeat_take_skip_shard)
{
    ferry_dataset *ds = test_synthetic(40, 3, 0);
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shard(&st, st, 1, 2));
    CHECK_OK(ferry_stream_shuffle(&st, st, 4, 5));
    CHECK_OK(ferry_stream_repeat(&st, st, 3));
    CHECK_OK(ferry_stream_skip(&st, st, 4));
    CHECK_OK(ferry_stream_take(&st, st, 25));
    check_every_stop(st, 0, 2, 3);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(shuffle_over_repeat_over_shuffle)
{
    /* the outer buffer holds samples of several passes: each is read again under
     * its own pass's epoch */
    ferry_dataset *ds = test_synthetic(30, 5, 0);
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 4, 2));
    CHECK_OK(ferry_stream_repeat(&st, st, 3));
    CHECK_OK(ferry_stream_shuffle(&st, st, 11, 5));
    check_every_stop(st, 0, 1, 6);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(bad_states)
{
    ferry_dataset *ds = test_synthetic(50, 0, 0);
    ferry_stream *st = test_stream_of(ds), *other = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 8, 1));
    CHECK_OK(ferry_stream_shuffle(&other, other, 9, 1));
    reader r;
    reader_init(&r, st, 0);
    ferry_stream_iter *a, *b;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &a));
    for (int i = 0; i < 5; i++)
        CHECK_OK(step(&r, a).rc);
    unsigned char buf[4096], bad[4096];
    size_t len;
    CHECK_OK(ferry_stream_save(a, buf, sizeof buf, &len));
    /* every single-byte change and every cut is refused: never a wrong resume */
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, buf, len);
        bad[i] ^= 0x10;
        CHECK_OK(ferry_stream_open(st, 0, 1, 0, &b));
        int rc = ferry_stream_restore(b, bad, len, r.ctx);
        CHECK(rc == FERRY_ECORRUPT || rc == FERRY_ENOTSUP);
        ferry_stream_close(b);
    }
    for (size_t n = 0; n < len; n++) {
        CHECK_OK(ferry_stream_open(st, 0, 1, 0, &b));
        CHECK_RC(ferry_stream_restore(b, buf, n, r.ctx), FERRY_ECORRUPT);
        ferry_stream_close(b);
    }
    /* another chain's settings: named */
    CHECK_OK(ferry_stream_open(other, 0, 1, 0, &b));
    CHECK_RC(ferry_stream_restore(b, buf, len, r.ctx), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "buffer_size 8, this one has 9");
    ferry_stream_close(b);
    /* an iterator already read from */
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &b));
    CHECK_OK(step(&r, b).rc);
    CHECK_RC(ferry_stream_restore(b, buf, len, r.ctx), FERRY_ESTATE);
    ferry_stream_close(b);
    ferry_stream_close(a);
    reader_free(&r);
    ferry_stream_free(st);
    ferry_stream_free(other);
    ferry_dataset_free(ds);
}

static int plain_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    (void)shard, (void)nshards, (void)epoch;
    *iter = self;
    return 0;
}

static int plain_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    (void)iter, (void)out, (void)ctx;
    return FERRY_END;
}

static void plain_close(void *iter)
{
    (void)iter;
}

TEST(not_resumable)
{
    static const ferry_stream_vtable vt = {plain_open, plain_next, plain_close, NULL,
                                           NULL,       NULL,       NULL};
    ferry_field f = {.name = "x", .dtype = FERRY_U8, .ndim = 0};
    ferry_stream *st;
    CHECK_OK(ferry_stream_create(&st, &vt, NULL, &f, 1));
    CHECK_OK(ferry_stream_shuffle(&st, st, 4, 0));
    CHECK(!ferry_stream_resumable(st));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    size_t len;
    CHECK_RC(ferry_stream_save(it, NULL, 0, &len), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "not resumable");
    ferry_stream_close(it);
    ferry_stream_free(st);
}

/* A resumable stream of our own: sample v = shard + k * nshards (k < n), field
 * "v" (int64) and "sq" (int64 v*v); its state is k, its pos.a is v. Made with
 * ferry_stream_create, so its fetch is taken to be costly out of order: a
 * shuffle buffer over it reads its samples again all at once on restore, in the
 * order of their places. fetches counts the fetches. */
typedef struct counter {
    uint64_t n, fetches, last_fetched;
    int out_of_order;
} counter;

typedef struct counter_iter {
    counter *c;
    uint64_t shard, nshards, k;
} counter_iter;

static int counter_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    (void)epoch;
    counter_iter *it = calloc(1, sizeof *it);
    CHECK(it);
    *it = (counter_iter){self, shard, nshards, 0};
    *iter = it;
    return 0;
}

static void counter_write(uint64_t v, ferry_sample *out)
{
    int64_t x = (int64_t)v, sq = x * x;
    memcpy(out->data[0], &x, 8);
    memcpy(out->data[1], &sq, 8);
}

static int counter_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    (void)ctx;
    counter_iter *it = iter;
    uint64_t v = it->shard + it->k * it->nshards;
    if (v >= it->c->n)
        return FERRY_END;
    it->k++;
    out->pos.a = v;
    counter_write(v, out);
    return 0;
}

static void counter_close(void *iter)
{
    free(iter);
}

static int counter_save(void *iter, ferry_state *w)
{
    ferry_state_put_u64(w, ((counter_iter *)iter)->k);
    return 0;
}

static int counter_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    (void)ctx;
    return ferry_state_get_u64(r, &((counter_iter *)iter)->k);
}

static int counter_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    (void)ctx;
    counter *c = ((counter_iter *)iter)->c;
    if (pos->a < c->last_fetched)
        c->out_of_order++;
    c->last_fetched = pos->a;
    c->fetches++;
    counter_write(pos->a, out);
    return 0;
}

static const ferry_stream_vtable counter_vt = {counter_open, counter_next,    counter_close, NULL,
                                               counter_save, counter_restore, counter_fetch};

static ferry_stream *counted(counter *c)
{
    ferry_field f[2] = {{.name = "v", .dtype = FERRY_I64}, {.name = "sq", .dtype = FERRY_I64}};
    ferry_stream *st;
    CHECK_OK(ferry_stream_create(&st, &counter_vt, c, f, 2));
    CHECK(ferry_stream_resumable(st));
    return st;
}

TEST(own_stream_refilled_in_order)
{
    counter c = {.n = 300};
    ferry_stream *st = counted(&c);
    CHECK_OK(ferry_stream_shuffle(&st, st, 16, 9));
    check_every_stop(st, 1, 3, 2);
    /* a restore after the buffer filled reads its samples again, in order */
    reader r;
    reader_init(&r, st, 0);
    ferry_stream_iter *a, *b;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &a));
    for (int i = 0; i < 40; i++)
        CHECK_OK(step(&r, a).rc);
    unsigned char buf[4096];
    size_t len;
    CHECK_OK(ferry_stream_save(a, buf, sizeof buf, &len));
    c.fetches = c.last_fetched = 0;
    c.out_of_order = 0;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &b));
    CHECK_OK(ferry_stream_restore(b, buf, len, r.ctx));
    CHECK_U64(c.fetches, 15); /* between calls one slot waits for its refill */
    CHECK_EQ(c.out_of_order, 0);
    ferry_stream_close(a);
    ferry_stream_close(b);
    reader_free(&r);
    ferry_stream_free(st);
}

/* Resumed, read a little, saved, resumed again, ...: still the uninterrupted
 * read (a buffer restored but not yet read again is saved as it is). */
TEST(resume_chains)
{
    ferry_dataset *ds = test_synthetic(200, 4, 0);
    ferry_stream *st = test_stream_of(ds);
    CHECK_OK(ferry_stream_shuffle(&st, st, 12, 8));
    CHECK_OK(ferry_stream_repeat(&st, st, 2));
    CHECK_OK(ferry_stream_shuffle(&st, st, 5, 1));
    event *want = calloc(MAX_EVENTS + 1, sizeof *want);
    CHECK(want);
    size_t n = read_all(st, 0, 1, 3, want), at = 0;
    reader r;
    reader_init(&r, st, 3);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 3, &it));
    static unsigned char buf[1 << 16];
    for (size_t hop = 1; at < n; hop = hop % 7 + 1) {
        for (size_t i = 0; i < hop && at < n; i++, at++) {
            event e = step(&r, it);
            CHECK(e.rc == want[at].rc && e.bytes == want[at].bytes && e.pos == want[at].pos);
        }
        size_t len;
        CHECK_OK(ferry_stream_save(it, buf, sizeof buf, &len));
        ferry_stream_close(it);
        CHECK_OK(ferry_stream_open(st, 0, 1, 3, &it));
        CHECK_OK(ferry_stream_restore(it, buf, len, r.ctx));
    }
    CHECK_RC(step(&r, it).rc, FERRY_END);
    ferry_stream_close(it);
    reader_free(&r);
    free(want);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}
