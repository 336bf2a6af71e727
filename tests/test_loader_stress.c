/*
 * Randomized, seeded stress tests of the loader engine. Each episode draws a
 * configuration (map-style or stream over 1-3 shards, 0-4 workers, prefetch 1-6,
 * batch size, drop_last, shuffle, sampler or completion order, fail or skip with a
 * random budget, a synthetic dataset with failing and sleeping samples) and drives
 * a loader through a random sequence: a consumer that holds up to prefetch-1
 * batches and drops its references (batch, retains, exported tensors) in random
 * order, restarts epochs at random batches, is cancelled from a second thread at
 * random times, and frees the loader mid-epoch with batches still held.
 *
 * Every batch is checked against a reference computed on the caller's thread
 * (num_workers 0): its bytes, its number (consecutive in sampler order), how the
 * epoch ends (FERRY_END only after the whole epoch; the error and message of the
 * first bad batch), and that a held batch never changes. Loaders wait at most
 * HANG_MS for a batch, so a hang fails as FERRY_ETIMEDOUT instead of sticking.
 *
 * Each test runs episodes for about FERRY_STRESS_MS (default 2000) ms.
 * FERRY_STRESS_SEED sets the base seed and FERRY_STRESS_EPISODE replays one
 * episode; a failure prints both, the configuration and the last actions.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define NE 3          /* epochs with a reference */
#define MAX_HELD 8    /* > the deepest prefetch drawn (6) */
#define MAX_EXPORTS 3 /* exported tensors per held batch */
#define HANG_MS 5000
#define MSG_MAX 1024
#define FNV_BASIS 0xcbf29ce484222325ull

/* ---- Random numbers (splitmix64) ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnd(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(rng *r, uint64_t n)
{
    return n ? rnd(r) % n : 0;
}

static uint64_t range(rng *r, uint64_t lo, uint64_t hi)
{
    return lo + below(r, hi - lo + 1);
}

static bool chance(rng *r, unsigned pct)
{
    return below(r, 100) < pct;
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- Failure reports: the episode, its configuration and the last actions ---- */

static char g_episode[128];
static char g_cfg[512];
#define TRACE_N 24
static char g_trace[TRACE_N][128];
static unsigned g_ntrace;

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_trace[g_ntrace % TRACE_N], sizeof g_trace[0], fmt, ap);
    va_end(ap);
    g_ntrace++;
}

static void failf(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void failf(int line, const char *fmt, ...)
{
    char what[MSG_MAX], recent[TRACE_N * 130];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t used = 0;
    recent[0] = 0;
    unsigned from = g_ntrace > TRACE_N ? g_ntrace - TRACE_N : 0;
    for (unsigned i = from; i < g_ntrace && used < sizeof recent; i++)
        used +=
            (size_t)snprintf(recent + used, sizeof recent - used, "\n    %s", g_trace[i % TRACE_N]);
    test_fail(__FILE__, line, "%s\n  %s\n  config: %s\n  last actions:%s", what, g_episode, g_cfg,
              recent);
}

#define EXPECT(c)                                                                                  \
    do {                                                                                           \
        if (!(c))                                                                                  \
            failf(__LINE__, "EXPECT(%s)", #c);                                                     \
    } while (0)

#define EXPECT_OK(expr)                                                                            \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0)                                                                              \
            failf(__LINE__, "%s returned %d (%s): %s", #expr, rc_, ferry_errname(rc_),             \
                  ferry_last_errmsg());                                                            \
    } while (0)

/* What the episodes of a test went through, printed at its end. */
static struct {
    uint64_t batches, ends, errors, cancels, timeouts, restarts, frees_held, exports;
} g_seen;

/* ---- Configurations ---- */

enum {
    F_FAIL = 1 << 0,    /* failing samples, under both policies */
    F_SLEEP = 1 << 1,   /* samples that sleep, so that work is in flight */
    F_STREAM = 1 << 2,  /* stream loaders only */
    F_MIXED = 1 << 3,   /* map-style or stream at random (else map-style only) */
    F_HOLD = 1 << 4,    /* hold up to prefetch-1 batches; retain and export them */
    F_RESTART = 1 << 5, /* ferry_loader_start at random points */
    F_CANCEL = 1 << 6,  /* ferry_loader_cancel from a second thread */
    F_FREE = 1 << 7,    /* ferry_loader_free mid-epoch with batches held */
    F_TIMEOUT = 1 << 8, /* short timeouts: FERRY_ETIMEDOUT is expected and retried */
};

typedef struct cfg {
    bool stream;
    uint64_t n, bytes, var, fail_every, sleep_us, seed;
    uint32_t batch, workers, prefetch, shards;
    int drop_last, shuffle, order, on_error;
    uint64_t budget;
    int64_t rank, world, timeout_ms;
} cfg;

static cfg random_cfg(rng *r, unsigned fl)
{
    cfg c;
    memset(&c, 0, sizeof c);
    c.stream = (fl & F_STREAM) || ((fl & F_MIXED) && chance(r, 40));
    c.sleep_us = (fl & F_SLEEP) && chance(r, 50) ? range(r, 5, 60) : 0;
    if (c.sleep_us)
        c.n = range(r, 1, 80);
    else
        c.n = chance(r, 3) ? 0 : range(r, 1, 700);
    c.bytes = chance(r, 5) ? 0 : range(r, 1, 48);
    c.var = chance(r, 50) ? range(r, 1, 24) : 0;
    c.fail_every = (fl & F_FAIL) && chance(r, 75) ? range(r, 2, 60) : 0;
    c.seed = below(r, 1000);
    c.batch = chance(r, 15)   ? 1
              : chance(r, 10) ? (uint32_t)range(r, 41, 300)
                              : (uint32_t)range(r, 1, 40);
    c.workers = (uint32_t)range(r, 0, 4);
    c.prefetch = (uint32_t)range(r, 1, 6);
    c.shards = (uint32_t)range(r, 1, 3);
    c.drop_last = chance(r, 30);
    c.shuffle = chance(r, 60);
    c.on_error = chance(r, 50) ? FERRY_ON_ERROR_SKIP : FERRY_ON_ERROR_FAIL;
    c.budget = chance(r, 30) ? UINT64_MAX : below(r, 12);
    c.world = (int64_t)range(r, 1, 2);
    c.rank = (int64_t)below(r, (uint64_t)c.world);
    /* a stream that fails ends its epoch at a batch that depends on timing in
     * completion order; only sampler order has one right answer there */
    c.order = c.stream && c.fail_every ? FERRY_ORDER_SAMPLER
              : chance(r, 35)          ? FERRY_ORDER_COMPLETION
                                       : FERRY_ORDER_SAMPLER;
    c.timeout_ms = HANG_MS;
    if (fl & F_TIMEOUT) {
        c.sleep_us = range(r, 300, 1500);
        c.n = range(r, 4, 24);
        c.batch = (uint32_t)range(r, 1, 4);
        c.workers = (uint32_t)range(r, 1, 4); /* num_workers 0 does the work itself */
        c.timeout_ms = (int64_t)range(r, 1, 4);
    }
    return c;
}

static void describe(const cfg *c)
{
    snprintf(g_cfg, sizeof g_cfg,
             "%s synthetic:%llu,bytes=%llu,var=%llu,fail_every=%llu,sleep_us=%llu,seed=%llu "
             "batch=%u drop_last=%d shuffle=%d workers=%u prefetch=%u order=%s on_error=%s "
             "budget=%llu shards=%u rank=%lld/%lld timeout_ms=%lld",
             c->stream ? "stream" : "map", (unsigned long long)c->n, (unsigned long long)c->bytes,
             (unsigned long long)c->var, (unsigned long long)c->fail_every,
             (unsigned long long)c->sleep_us, (unsigned long long)c->seed, c->batch, c->drop_last,
             c->shuffle, c->workers, c->prefetch,
             c->order == FERRY_ORDER_SAMPLER ? "sampler" : "completion",
             c->on_error == FERRY_ON_ERROR_SKIP ? "skip" : "fail", (unsigned long long)c->budget,
             c->shards, (long long)c->rank, (long long)c->world, (long long)c->timeout_ms);
}

static ferry_loader_opts make_opts(const cfg *c)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = c->batch;
    o.drop_last = c->drop_last;
    o.num_workers = c->workers;
    o.prefetch = c->prefetch;
    o.shuffle = c->shuffle;
    o.seed = c->seed;
    o.order = c->order;
    o.timeout_ms = c->timeout_ms;
    o.on_error = c->on_error;
    o.skip_budget = c->budget;
    o.stream_shards = c->shards;
    if (c->stream) { /* a map-style loader's share is ferry_sampler_split's (test_samplers) */
        o.rank = c->rank;
        o.world_size = c->world;
    }
    return o;
}

/* ---- Batch digests ---- */

static uint64_t batch_digest(const ferry_batch *b)
{
    uint64_t h = FNV_BASIS;
    uint32_t n = ferry_batch_size(b);
    h = test_hash(h, &n, sizeof n);
    h = test_hash(h, ferry_batch_indices(b), (size_t)n * sizeof(uint64_t));
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        EXPECT_OK(ferry_batch_field(b, f, &t));
        EXPECT(t.shape[0] == (int64_t)n);
        h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        if (ferry_batch_field_info(b, f)->variable) {
            EXPECT_OK(ferry_batch_lengths(b, f, &t));
            h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        }
    }
    return h;
}

static uint64_t tensor_digest(const ferry_tensor *t)
{
    return test_hash(FNV_BASIS, t->data, ferry_tensor_nbytes(t));
}

/* ---- The world of an episode: dataset, stream, references ---- */

typedef struct eref {
    /* map-style: by batch number */
    uint64_t nb;
    uint64_t *hash;
    uint32_t *size;    /* delivered under skip (0: every sample failed) */
    uint32_t *planned; /* slots */
    /* streams: the batches in delivery order, and how the epoch ended */
    uint64_t *num;
    size_t count;
    int end_rc;
    char msg[MSG_MAX];
} eref;

typedef struct world {
    cfg c;
    ferry_dataset *ds;
    ferry_stream *st;
    ferry_sampler *mirror; /* the loader's own sampler, rebuilt: names failing samples */
    eref ref[NE];
} world;

static ferry_loader *new_loader(world *w, const ferry_loader_opts *o)
{
    ferry_loader *l;
    if (w->c.stream)
        EXPECT_OK(ferry_loader_create_stream(&l, w->st, o));
    else
        EXPECT_OK(ferry_loader_create(&l, w->ds, o));
    return l;
}

/* References on the caller's thread, prefetch 1, sampler order. Map-style ones run
 * under skip with no budget, so that every batch's bytes and bad-sample count are
 * known and any policy's outcome follows from them; streams run under the
 * episode's own policy (a bad sample changes what a stream batch holds). */
static void build_world(world *w, const cfg *c)
{
    memset(w, 0, sizeof *w);
    w->c = *c;
    char spec[256];
    snprintf(spec, sizeof spec,
             "synthetic:%llu,bytes=%llu,var=%llu,fail_every=%llu,sleep_us=%llu,seed=%llu",
             (unsigned long long)c->n, (unsigned long long)c->bytes, (unsigned long long)c->var,
             (unsigned long long)c->fail_every, (unsigned long long)c->sleep_us,
             (unsigned long long)c->seed);
    EXPECT_OK(ferry_dataset_open(&w->ds, spec));
    if (c->stream)
        EXPECT_OK(ferry_stream_from_dataset(&w->st, w->ds));
    else if (c->shuffle)
        EXPECT_OK(ferry_sampler_random(&w->mirror, c->n, c->seed, 0, 0));
    else
        EXPECT_OK(ferry_sampler_sequential(&w->mirror, c->n));

    ferry_loader_opts o = make_opts(c);
    o.num_workers = 0;
    o.prefetch = 1;
    o.order = FERRY_ORDER_SAMPLER;
    o.timeout_ms = 0;
    if (!c->stream) {
        o.on_error = FERRY_ON_ERROR_SKIP;
        o.skip_budget = UINT64_MAX;
    }
    ferry_loader *l = new_loader(w, &o);
    for (uint64_t e = 0; e < NE; e++) {
        eref *R = &w->ref[e];
        EXPECT_OK(ferry_loader_start(l, e, 0));
        if (!c->stream) {
            R->nb = ferry_loader_len(l);
            EXPECT(R->nb == ferry_batch_count(c->n, c->batch, c->drop_last));
            R->hash = calloc(R->nb + 1, sizeof *R->hash);
            R->size = calloc(R->nb + 1, sizeof *R->size);
            R->planned = calloc(R->nb + 1, sizeof *R->planned);
            EXPECT(R->hash && R->size && R->planned);
            for (uint64_t k = 0; k < R->nb; k++) {
                uint64_t first, count;
                EXPECT_OK(ferry_batch_positions(c->n, c->batch, c->drop_last, k, &first, &count));
                R->planned[k] = (uint32_t)count;
            }
        }
        size_t cap = 0;
        ferry_batch *b;
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            uint64_t k = ferry_batch_number(b), h = batch_digest(b);
            EXPECT(ferry_batch_epoch(b) == e);
            if (!c->stream) {
                EXPECT(k < R->nb && R->size[k] == 0);
                EXPECT(ferry_batch_size(b) <= R->planned[k]);
                R->hash[k] = h;
                R->size[k] = ferry_batch_size(b);
            } else {
                if (R->count == cap) {
                    cap = cap ? 2 * cap : 16;
                    R->num = realloc(R->num, cap * sizeof *R->num);
                    R->hash = realloc(R->hash, cap * sizeof *R->hash);
                    EXPECT(R->num && R->hash);
                }
                EXPECT(R->count == 0 || k > R->num[R->count - 1]);
                R->num[R->count] = k;
                R->hash[R->count++] = h;
            }
            ferry_batch_release(b);
        }
        if (!c->stream)
            EXPECT(rc == FERRY_END);
        EXPECT(rc == FERRY_END || rc < 0);
        R->end_rc = rc;
        snprintf(R->msg, sizeof R->msg, "%s", rc < 0 ? ferry_loader_errmsg(l) : "");
    }
    ferry_loader_free(l);
}

static void free_world(world *w)
{
    for (int e = 0; e < NE; e++) {
        free(w->ref[e].hash);
        free(w->ref[e].size);
        free(w->ref[e].planned);
        free(w->ref[e].num);
    }
    ferry_sampler_free(w->mirror);
    ferry_stream_free(w->st);
    ferry_dataset_free(w->ds);
}

/* ---- Checking an epoch as it is delivered ---- */

typedef struct checker {
    world *w;
    const eref *R;
    uint64_t epoch, first;
    uint64_t cursor; /* sampler order: next batch number (map) or script position (stream) */
    uint64_t cum;    /* map-style: bad samples in batches passed so far */
    uint8_t *seen;   /* completion order: by batch number (map) or script position */
    size_t seen_len;
    uint64_t delivered;
    bool over;
} checker;

static void check_begin(checker *ck, uint64_t epoch, uint64_t first)
{
    world *w = ck->w;
    ck->R = &w->ref[epoch];
    ck->epoch = epoch;
    ck->first = first;
    ck->cursor = w->c.stream ? 0 : first;
    ck->cum = 0;
    ck->delivered = 0;
    ck->over = false;
    size_t len = w->c.stream ? ck->R->count : ck->R->nb;
    free(ck->seen);
    ck->seen = calloc(len + 1, 1);
    ck->seen_len = len;
    EXPECT(ck->seen);
}

static uint32_t bad_in(const eref *R, uint64_t k)
{
    return R->planned[k] - R->size[k];
}

/* Map-style, sampler order: passes over batches that deliver nothing and returns 0
 * (batch *k comes next), the error the loader must return at batch *k, or
 * FERRY_END. */
static int map_expect(checker *ck, uint64_t *k)
{
    const cfg *c = &ck->w->c;
    const eref *R = ck->R;
    for (; ck->cursor < R->nb; ck->cursor++) {
        uint64_t j = ck->cursor;
        uint32_t bad = bad_in(R, j);
        *k = j;
        if (bad && c->on_error == FERRY_ON_ERROR_FAIL)
            return FERRY_ECORRUPT;
        if (bad && ck->cum + bad > c->budget)
            return FERRY_EBUDGET;
        if (R->size[j])
            return 0;
        ck->cum += bad;
    }
    return FERRY_END;
}

/* The message of batch k's first bad sample (the lowest slot), as the loader words
 * it. */
static void fail_msg(checker *ck, uint64_t k, char *out, size_t n)
{
    const cfg *c = &ck->w->c;
    EXPECT_OK(ferry_sampler_set_epoch(ck->w->mirror, ck->epoch));
    uint64_t first, count, idx = UINT64_MAX;
    EXPECT_OK(ferry_batch_positions(c->n, c->batch, c->drop_last, k, &first, &count));
    for (uint64_t i = 0; i < count; i++) {
        uint64_t x = ferry_sampler_at(ck->w->mirror, first + i);
        if (x % c->fail_every == c->fail_every - 1) {
            idx = x;
            break;
        }
    }
    EXPECT(idx != UINT64_MAX);
    snprintf(out, n,
             "epoch %llu, batch %llu, sample %llu: synthetic: sample %llu: injected failure "
             "(fail_every=%llu)",
             (unsigned long long)ck->epoch, (unsigned long long)k, (unsigned long long)idx,
             (unsigned long long)idx, (unsigned long long)c->fail_every);
}

static void check_batch(checker *ck, const ferry_batch *b, uint64_t h)
{
    const cfg *c = &ck->w->c;
    const eref *R = ck->R;
    uint64_t k = ferry_batch_number(b);
    trace("batch %llu (epoch %llu, %u samples)", (unsigned long long)k,
          (unsigned long long)ferry_batch_epoch(b), ferry_batch_size(b));
    EXPECT(!ck->over);
    EXPECT(ferry_batch_epoch(b) == ck->epoch);
    EXPECT(ferry_batch_size(b) > 0);
    if (!c->stream) {
        EXPECT(k >= ck->first && k < R->nb);
        if (c->order == FERRY_ORDER_SAMPLER) {
            uint64_t want = 0;
            int rc = map_expect(ck, &want);
            if (rc != 0 || k != want)
                failf(__LINE__, "got batch %llu; expected %s at batch %llu", (unsigned long long)k,
                      rc ? ferry_errname(rc) : "delivery", (unsigned long long)want);
            ck->cum += bad_in(R, k);
            ck->cursor++;
        } else {
            EXPECT(!ck->seen[k]);
            EXPECT(R->size[k] > 0);
            EXPECT(c->on_error == FERRY_ON_ERROR_SKIP || bad_in(R, k) == 0);
            ck->seen[k] = 1;
        }
        if (h != R->hash[k])
            failf(__LINE__, "batch %llu of epoch %llu: digest differs from num_workers 0",
                  (unsigned long long)k, (unsigned long long)ck->epoch);
    } else {
        size_t pos = ck->cursor;
        if (c->order == FERRY_ORDER_SAMPLER) {
            if (pos >= R->count || R->num[pos] != k)
                failf(__LINE__, "stream: got batch %llu; expected %s %llu", (unsigned long long)k,
                      pos < R->count ? "batch" : "the end after",
                      (unsigned long long)(pos < R->count ? R->num[pos] : R->count));
            ck->cursor++;
        } else {
            for (pos = 0; pos < R->count && R->num[pos] != k; pos++)
                ;
            EXPECT(pos < R->count);
            EXPECT(!ck->seen[pos]);
            ck->seen[pos] = 1;
        }
        if (h != R->hash[pos])
            failf(__LINE__, "stream batch %llu of epoch %llu: digest differs from num_workers 0",
                  (unsigned long long)k, (unsigned long long)ck->epoch);
    }
    ck->delivered++;
}

/* A terminal result of ferry_loader_next: FERRY_END or an error that ends the epoch
 * (not FERRY_ECANCELED, which the caller checks). */
static void check_end(checker *ck, int rc, const char *msg)
{
    const cfg *c = &ck->w->c;
    const eref *R = ck->R;
    trace("end: %s", ferry_errname(rc));
    EXPECT(!ck->over);
    ck->over = true;
    char want[MSG_MAX], fm[MSG_MAX];
    if (c->stream) {
        if (c->order == FERRY_ORDER_SAMPLER && ck->cursor < R->count)
            failf(__LINE__, "stream epoch %llu ended (%s: %s) after %llu of its %zu batches",
                  (unsigned long long)ck->epoch, ferry_errname(rc), msg,
                  (unsigned long long)ck->cursor, R->count);
        if (c->order == FERRY_ORDER_COMPLETION)
            for (size_t p = 0; p < R->count; p++)
                if (!ck->seen[p])
                    failf(__LINE__, "stream epoch %llu ended (%s) without batch %llu",
                          (unsigned long long)ck->epoch, ferry_errname(rc),
                          (unsigned long long)R->num[p]);
        if (rc != R->end_rc)
            failf(__LINE__, "stream epoch %llu ended with %s (%s); num_workers 0 ended with %s",
                  (unsigned long long)ck->epoch, ferry_errname(rc), msg, ferry_errname(R->end_rc));
        if (rc < 0 && strcmp(msg, R->msg))
            failf(__LINE__, "stream error message \"%s\"; num_workers 0 said \"%s\"", msg, R->msg);
        return;
    }
    if (c->order == FERRY_ORDER_SAMPLER) {
        uint64_t k = 0;
        int exp = map_expect(ck, &k);
        if (rc != exp)
            failf(__LINE__,
                  "epoch %llu from batch %llu: got %s (%s) after %llu batches; expected %s at "
                  "batch %llu of %llu",
                  (unsigned long long)ck->epoch, (unsigned long long)ck->first, ferry_errname(rc),
                  msg, (unsigned long long)ck->delivered, ferry_errname(exp), (unsigned long long)k,
                  (unsigned long long)R->nb);
        if (rc == FERRY_ECORRUPT) {
            fail_msg(ck, k, want, sizeof want);
            if (strcmp(msg, want))
                failf(__LINE__, "error message \"%s\"; expected \"%s\"", msg, want);
        } else if (rc == FERRY_EBUDGET) {
            fail_msg(ck, k, fm, sizeof fm);
            snprintf(want, sizeof want,
                     "loader: %llu bad samples in epoch %llu exceed the skip budget of %llu; "
                     "the first in this batch: %s",
                     (unsigned long long)(ck->cum + bad_in(R, k)), (unsigned long long)ck->epoch,
                     (unsigned long long)c->budget, fm);
            if (strcmp(msg, want))
                failf(__LINE__, "error message \"%s\"; expected \"%s\"", msg, want);
        }
        return;
    }
    /* completion order: which bad batch comes first depends on timing */
    uint64_t total_bad = 0;
    bool any_bad = false;
    for (uint64_t k = ck->first; k < R->nb; k++) {
        total_bad += bad_in(R, k);
        any_bad |= bad_in(R, k) != 0;
    }
    bool fails = c->on_error == FERRY_ON_ERROR_FAIL ? any_bad : total_bad > c->budget;
    if (!fails) {
        if (rc != FERRY_END)
            failf(__LINE__, "epoch %llu from batch %llu: got %s (%s); expected the end",
                  (unsigned long long)ck->epoch, (unsigned long long)ck->first, ferry_errname(rc),
                  msg);
        for (uint64_t k = ck->first; k < R->nb; k++)
            if (R->size[k] && !ck->seen[k])
                failf(__LINE__, "epoch %llu from batch %llu ended without batch %llu",
                      (unsigned long long)ck->epoch, (unsigned long long)ck->first,
                      (unsigned long long)k);
    } else {
        int exp = c->on_error == FERRY_ON_ERROR_FAIL ? FERRY_ECORRUPT : FERRY_EBUDGET;
        if (rc != exp)
            failf(__LINE__, "epoch %llu from batch %llu: got %s (%s); expected %s",
                  (unsigned long long)ck->epoch, (unsigned long long)ck->first, ferry_errname(rc),
                  msg, ferry_errname(exp));
        EXPECT(strstr(msg, "injected failure"));
    }
}

/* ---- Batches the consumer holds: its reference, retains, exported tensors ---- */

typedef struct held {
    ferry_batch *b;
    uint64_t hash;
    bool own;    /* the reference ferry_loader_next gave */
    int retains; /* ferry_batch_retain calls not yet released */
    int nt;      /* exported tensors not yet released */
    ferry_tensor t[MAX_EXPORTS];
    uint64_t th[MAX_EXPORTS];
} held;

typedef struct holdset {
    held h[MAX_HELD];
    int n;
} holdset;

static void held_verify(const held *e)
{
    if (e->own || e->retains)
        if (batch_digest(e->b) != e->hash)
            failf(__LINE__, "held batch %llu changed while held",
                  (unsigned long long)ferry_batch_number(e->b));
    for (int i = 0; i < e->nt; i++)
        if (tensor_digest(&e->t[i]) != e->th[i])
            failf(__LINE__, "an exported tensor of a held batch changed");
}

static void hold_add(holdset *hs, ferry_batch *b, uint64_t h, rng *r, bool extras)
{
    EXPECT(hs->n < MAX_HELD);
    held *e = &hs->h[hs->n++];
    memset(e, 0, sizeof *e);
    e->b = b;
    e->hash = h;
    e->own = true;
    if (!extras)
        return;
    int nf = ferry_batch_nfields(b);
    while (e->nt < MAX_EXPORTS && chance(r, 35)) {
        int f = (int)below(r, (uint64_t)nf);
        int lengths = ferry_batch_field_info(b, f)->variable && chance(r, 50);
        ferry_tensor *t = &e->t[e->nt];
        EXPECT_OK(ferry_batch_export(b, f, lengths, t));
        EXPECT(t->owner && t->release);
        EXPECT(t->shape[0] == (int64_t)ferry_batch_size(b));
        e->th[e->nt++] = tensor_digest(t);
        g_seen.exports++;
    }
    while (e->retains < 2 && chance(r, 15)) {
        ferry_batch_retain(b);
        e->retains++;
    }
}

/* Drops one reference of entry i (after checking that nothing changed); the entry
 * goes when its last reference does. */
static void held_drop(holdset *hs, int i, rng *r)
{
    held *e = &hs->h[i];
    held_verify(e);
    uint64_t pick = below(r, (uint64_t)(e->own + e->retains + e->nt));
    if (pick < (uint64_t)e->own) {
        e->own = false;
        ferry_batch_release(e->b);
    } else if (pick < (uint64_t)(e->own + e->retains)) {
        e->retains--;
        ferry_batch_release(e->b);
    } else {
        int t = (int)(pick - (uint64_t)(e->own + e->retains));
        ferry_tensor_release(&e->t[t]);
        e->t[t] = e->t[e->nt - 1];
        e->th[t] = e->th[e->nt - 1];
        e->nt--;
    }
    if (!e->own && !e->retains && !e->nt)
        hs->h[i] = hs->h[--hs->n];
}

static void hold_trim(holdset *hs, int keep, rng *r)
{
    while (hs->n > keep)
        held_drop(hs, (int)below(r, (uint64_t)hs->n), r);
}

typedef struct releaser {
    holdset hs;
    uint64_t seed;
} releaser;

static void *release_main(void *arg)
{
    releaser *rl = arg;
    rng r = {rl->seed};
    hold_trim(&rl->hs, 0, &r);
    return NULL;
}

/* Drops every reference in random order, part of them from a second thread. */
static void hold_release_all(holdset *hs, rng *r)
{
    releaser rl;
    memset(&rl, 0, sizeof rl);
    rl.seed = rnd(r);
    for (int i = 0; i < hs->n;)
        if (chance(r, 40)) {
            rl.hs.h[rl.hs.n++] = hs->h[i];
            hs->h[i] = hs->h[--hs->n];
        } else {
            i++;
        }
    pthread_t t;
    bool threaded = rl.hs.n && pthread_create(&t, NULL, release_main, &rl) == 0;
    if (!threaded)
        hold_trim(&rl.hs, 0, r);
    hold_trim(hs, 0, r);
    if (threaded)
        pthread_join(t, NULL);
}

/* ---- A second thread that cancels at random times ---- */

typedef struct canceller {
    ferry_loader *l;
    atomic_int stop;
    atomic_ullong issued, completed;
    uint64_t seed, max_us;
    pthread_t t;
} canceller;

static void *cancel_main(void *arg)
{
    canceller *cn = arg;
    rng r = {cn->seed};
    while (!atomic_load(&cn->stop)) {
        sleep_us(below(&r, cn->max_us + 1));
        if (atomic_load(&cn->stop))
            break;
        atomic_fetch_add(&cn->issued, 1);
        ferry_loader_cancel(cn->l);
        if (chance(&r, 20))
            ferry_loader_cancel(cn->l); /* any number of times */
        atomic_fetch_add(&cn->completed, 1);
    }
    return NULL;
}

static void cancel_start(canceller *cn, ferry_loader *l, uint64_t seed, uint64_t max_us)
{
    cn->l = l;
    atomic_init(&cn->stop, 0);
    atomic_init(&cn->issued, 0);
    atomic_init(&cn->completed, 0);
    cn->seed = seed;
    cn->max_us = max_us;
    EXPECT(pthread_create(&cn->t, NULL, cancel_main, cn) == 0);
}

static void cancel_stop(canceller *cn)
{
    atomic_store(&cn->stop, 1);
    pthread_join(cn->t, NULL);
}

/* ---- Episodes ---- */

typedef struct run {
    world *w;
    ferry_loader *l;
    checker ck;
    canceller *cn;
    uint64_t cancels_before_start; /* cancels completed when the epoch was started */
} run;

static void start_epoch(run *ru, rng *r, uint64_t epoch, uint64_t first)
{
    ru->cancels_before_start = ru->cn ? atomic_load(&ru->cn->completed) : 0;
    trace("start(%llu, %llu)", (unsigned long long)epoch, (unsigned long long)first);
    g_seen.restarts++;
    EXPECT_OK(ferry_loader_start(ru->l, epoch, first));
    check_begin(&ru->ck, epoch, first);
    if (!ru->w->c.stream)
        EXPECT(ferry_loader_len(ru->l) == ru->w->ref[epoch].nb);
}

static void start_random(run *ru, rng *r)
{
    uint64_t e = below(r, NE), k = 0;
    if (!ru->w->c.stream) {
        k = chance(r, 40) ? 0 : below(r, ru->w->ref[e].nb + 1);
    } else if (chance(r, 10)) {
        uint64_t bad = range(r, 1, 3);
        trace("start(%llu, %llu) on a stream", (unsigned long long)e, (unsigned long long)bad);
        int rc = ferry_loader_start(ru->l, e, bad);
        EXPECT(rc == FERRY_ENOTSUP);
    }
    start_epoch(ru, r, e, k);
}

static void episode(rng *r, unsigned fl)
{
    cfg c = random_cfg(r, fl);
    describe(&c);
    g_ntrace = 0;
    world w;
    build_world(&w, &c);
    run ru;
    memset(&ru, 0, sizeof ru);
    ru.w = &w;
    ru.ck.w = &w;
    ferry_loader_opts o = make_opts(&c);
    ru.l = new_loader(&w, &o);
    check_begin(&ru.ck, 0, 0); /* creation starts epoch 0 at batch 0 */
    if (chance(r, 30))
        start_epoch(&ru, r, 0, 0); /* the same epoch, untouched: keeps the work */
    else if ((fl & F_RESTART) && chance(r, 30))
        start_random(&ru, r);

    canceller cn;
    if ((fl & F_CANCEL) && chance(r, 85)) {
        cancel_start(&cn, ru.l, rnd(r), range(r, 50, 4000));
        ru.cn = &cn;
    }

    holdset hs;
    memset(&hs, 0, sizeof hs);
    int keep = 0;
    bool freed_mid_epoch = false;
    uint64_t steps = range(r, 10, 250);
    for (uint64_t s = 0; s < steps; s++) {
        if ((fl & F_HOLD) && chance(r, 15))
            keep = (int)below(r, c.prefetch); /* 0 .. prefetch-1 */
        if ((fl & F_RESTART) && chance(r, 3)) {
            start_random(&ru, r);
            continue;
        }
        if ((fl & F_FREE) && chance(r, 2)) {
            freed_mid_epoch = true;
            break;
        }
        if (!(fl & F_HOLD))
            keep = 0;
        hold_trim(&hs, keep, r);
        ferry_batch *b = NULL;
        int rc = ferry_loader_next(ru.l, &b);
        if (rc == 0) {
            uint64_t h = batch_digest(b);
            check_batch(&ru.ck, b, h);
            g_seen.batches++;
            hold_add(&hs, b, h, r, (fl & F_HOLD) != 0);
            hold_trim(&hs, keep, r);
            continue;
        }
        EXPECT(b == NULL);
        const char *msg = ferry_loader_errmsg(ru.l);
        if (rc == FERRY_ETIMEDOUT) {
            trace("timed out: %.100s", msg);
            g_seen.timeouts++;
            if (!(fl & F_TIMEOUT))
                failf(__LINE__, "no batch within %d ms (a hang?): %s", HANG_MS, msg);
            EXPECT(strstr(msg, "timed out after"));
            continue; /* a timeout does not end the epoch */
        }
        if (rc == FERRY_ECANCELED) {
            trace("cancelled");
            g_seen.cancels++;
            if (!ru.cn || atomic_load(&ru.cn->issued) <= ru.cancels_before_start)
                failf(__LINE__, "FERRY_ECANCELED with no cancel since the epoch started");
            if (chance(r, 30)) /* until the next start */
                EXPECT(ferry_loader_next(ru.l, &b) == FERRY_ECANCELED);
        } else {
            check_end(&ru.ck, rc, rc < 0 ? msg : "");
            if (rc < 0)
                g_seen.errors++;
            else
                g_seen.ends++;
            if (chance(r, 30)) {
                rc = ferry_loader_next(ru.l, &b); /* the epoch is over */
                EXPECT(rc == FERRY_END || (ru.cn && rc == FERRY_ECANCELED));
            }
        }
        if ((fl & F_RESTART) && chance(r, 50))
            start_random(&ru, r);
        else
            start_epoch(&ru, r, (ru.ck.epoch + 1) % NE, 0);
    }
    if (ru.cn)
        cancel_stop(ru.cn);
    trace("%s with %d batches held", freed_mid_epoch ? "free mid-epoch" : "free", hs.n);
    g_seen.frees_held += hs.n > 0;
    if (!freed_mid_epoch && chance(r, 50))
        hold_release_all(&hs, r);
    else if (chance(r, 30))
        hold_trim(&hs, hs.n / 2, r);
    ferry_loader_free(ru.l);
    /* what is still held stays valid after the loader is gone */
    for (int i = 0; i < hs.n; i++)
        held_verify(&hs.h[i]);
    hold_release_all(&hs, r);
    free(ru.ck.seen);
    free_world(&w);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void stress(const char *name, unsigned fl)
{
    uint64_t base = env_u64("FERRY_STRESS_SEED", test_hash(FNV_BASIS, name, strlen(name)));
    uint64_t budget_ns = env_u64("FERRY_STRESS_MS", 2000) * 1000000u;
    const char *one = getenv("FERRY_STRESS_EPISODE");
    uint64_t t0 = ferry_now_ns(), i = one && *one ? strtoull(one, NULL, 0) : 0, n = 0;
    do {
        snprintf(g_episode, sizeof g_episode,
                 "replay: FERRY_STRESS_SEED=%llu FERRY_STRESS_EPISODE=%llu",
                 (unsigned long long)base, (unsigned long long)i);
        rng r = {base ^ (i * 0xd1b54a32d192ed03ull)};
        episode(&r, fl);
        i++;
        n++;
    } while (!(one && *one) && (n < 3 || ferry_now_ns() - t0 < budget_ns));
    printf("%s: %llu episodes from seed %llu: %llu batches, %llu ends, %llu errors, %llu "
           "cancels, %llu timeouts, %llu starts, %llu frees with batches held, %llu exports\n",
           name, (unsigned long long)n, (unsigned long long)base,
           (unsigned long long)g_seen.batches, (unsigned long long)g_seen.ends,
           (unsigned long long)g_seen.errors, (unsigned long long)g_seen.cancels,
           (unsigned long long)g_seen.timeouts, (unsigned long long)g_seen.restarts,
           (unsigned long long)g_seen.frees_held, (unsigned long long)g_seen.exports);
}

/* ---- The stress tests ---- */

TEST(stress_map_epochs_match_the_inline_reference)
{
    stress("stress_map_epochs_match_the_inline_reference", F_SLEEP | F_HOLD);
}

TEST(stress_map_errors_under_fail_and_skip)
{
    stress("stress_map_errors_under_fail_and_skip", F_FAIL | F_SLEEP | F_HOLD | F_RESTART);
}

TEST(stress_map_restarts_mid_epoch_with_batches_held)
{
    stress("stress_map_restarts_mid_epoch_with_batches_held", F_SLEEP | F_HOLD | F_RESTART);
}

TEST(stress_cancel_from_another_thread)
{
    stress("stress_cancel_from_another_thread",
           F_MIXED | F_FAIL | F_SLEEP | F_HOLD | F_RESTART | F_CANCEL);
}

TEST(stress_free_mid_epoch_with_batches_held)
{
    stress("stress_free_mid_epoch_with_batches_held",
           F_MIXED | F_FAIL | F_SLEEP | F_HOLD | F_RESTART | F_FREE);
}

TEST(stress_streams_match_the_inline_reference)
{
    stress("stress_streams_match_the_inline_reference",
           F_STREAM | F_FAIL | F_SLEEP | F_HOLD | F_RESTART);
}

TEST(stress_streams_cancel_and_free)
{
    stress("stress_streams_cancel_and_free",
           F_STREAM | F_FAIL | F_SLEEP | F_HOLD | F_RESTART | F_CANCEL | F_FREE);
}

TEST(stress_timeouts_do_not_end_the_epoch)
{
    stress("stress_timeouts_do_not_end_the_epoch", F_MIXED | F_TIMEOUT | F_HOLD | F_RESTART);
}

TEST(stress_everything_at_once)
{
    stress("stress_everything_at_once",
           F_MIXED | F_FAIL | F_SLEEP | F_HOLD | F_RESTART | F_CANCEL | F_FREE);
}

/* ---- Focused cases for what the stress runs found ---- */

/* A cancel that set the cancelled flag before taking the lock let a start run in
 * the gap: the start cleared the flag, then the cancel's stop_epoch ended the fresh
 * epoch, and ferry_loader_next returned FERRY_END (an early, silent end) instead of
 * FERRY_ECANCELED. A cancel racing a start must leave either a cancelled epoch or
 * a whole one. */
TEST(cancel_racing_start_never_ends_an_epoch_early)
{
    g_cfg[0] = 0;
    snprintf(g_episode, sizeof g_episode, "cancel racing start");
    ferry_dataset *ds;
    EXPECT_OK(ferry_dataset_open(&ds, "synthetic:64,bytes=8"));
    ferry_loader_opts o = test_loader_opts(4, 2);
    o.prefetch = 3;
    o.timeout_ms = HANG_MS;
    ferry_loader *l;
    EXPECT_OK(ferry_loader_create(&l, ds, &o));
    canceller cn;
    cancel_start(&cn, l, 99, 60);
    uint64_t t0 = ferry_now_ns(), ends = 0, cancels = 0;
    for (uint64_t round = 0; ferry_now_ns() - t0 < 2000000000u; round++) {
        uint64_t before = atomic_load(&cn.completed);
        EXPECT_OK(ferry_loader_start(l, round % 2, 0));
        uint64_t got = 0;
        ferry_batch *b;
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            got++;
            ferry_batch_release(b);
        }
        if (rc == FERRY_ECANCELED) {
            EXPECT(atomic_load(&cn.issued) > before);
            cancels++;
            continue;
        }
        if (rc != FERRY_END || got != 16)
            failf(__LINE__,
                  "round %llu: ferry_loader_next returned %s after %llu of 16 batches (%llu full "
                  "epochs and %llu cancels before)",
                  (unsigned long long)round, ferry_errname(rc), (unsigned long long)got,
                  (unsigned long long)ends, (unsigned long long)cancels);
        ends++;
    }
    cancel_stop(&cn);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* The deadline is now + timeout_ms * 1000000 ns in 64 bits: unchecked, INT64_MAX
 * ms wraps to a deadline 1 ms in the past, and every wait times out at once. */
TEST(a_huge_timeout_is_not_an_immediate_timeout)
{
    g_cfg[0] = 0;
    snprintf(g_episode, sizeof g_episode, "timeout_ms = INT64_MAX");
    ferry_dataset *ds;
    EXPECT_OK(ferry_dataset_open(&ds, "synthetic:2,bytes=8,sleep_us=20000"));
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.num_workers = 1;
    o.prefetch = 1;
    o.timeout_ms = INT64_MAX;
    ferry_loader *l;
    int rc = ferry_loader_create(&l, ds, &o);
    if (rc == FERRY_EINVAL) { /* rejecting it as out of range is fine too */
        ferry_dataset_free(ds);
        return;
    }
    EXPECT_OK(rc);
    ferry_batch *b;
    rc = ferry_loader_next(l, &b);
    if (rc != 0)
        failf(__LINE__, "ferry_loader_next returned %s: %s", ferry_errname(rc),
              ferry_loader_errmsg(l));
    ferry_batch_release(b);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
}

/* A stream under skip that runs over the budget must count its last bad sample
 * once: recorded both in the retry loop and after it, the message and
 * stats.skipped named one bad sample more than were read. */
TEST(stream_skip_budget_counts_each_bad_sample_once)
{
    g_cfg[0] = 0;
    snprintf(g_episode, sizeof g_episode, "stream skip budget");
    ferry_dataset *ds;
    ferry_stream *st;
    EXPECT_OK(ferry_dataset_open(&ds, "synthetic:40,bytes=4,fail_every=2"));
    EXPECT_OK(ferry_stream_from_dataset(&st, ds));
    for (uint64_t budget = 0; budget < 3; budget++) {
        ferry_loader_opts o;
        ferry_loader_opts_default(&o);
        o.batch_size = 8;
        o.rank = 0;
        o.world_size = 1;
        o.on_error = FERRY_ON_ERROR_SKIP;
        o.skip_budget = budget;
        ferry_loader *l;
        EXPECT_OK(ferry_loader_create_stream(&l, st, &o));
        ferry_batch *b;
        int rc = ferry_loader_next(l, &b);
        EXPECT(rc == FERRY_EBUDGET);
        /* samples 1, 3, 5, ... fail: the batch reads budget+1 bad ones, then stops */
        char want[64];
        snprintf(want, sizeof want, "loader: %llu bad samples", (unsigned long long)(budget + 1));
        ferry_loader_stats s;
        EXPECT_OK(ferry_loader_stats_get(l, &s));
        if (!strstr(ferry_loader_errmsg(l), want) || s.skipped != budget + 1)
            failf(__LINE__, "budget %llu: stats.skipped %llu, message \"%s\"; expected \"%s\"",
                  (unsigned long long)budget, (unsigned long long)s.skipped, ferry_loader_errmsg(l),
                  want);
        ferry_loader_free(l);
    }
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

/* A dataset whose get answers a positive status (here FERRY_END, say forwarded from
 * an inner reader) for sample 5 and writes nothing. The loader tests rc < 0 only,
 * so the slot counts as good and the batch carries whatever the buffer held before
 * (another sample's bytes, a stale length). Whatever the policy, a delivered
 * sample must be the one get wrote. */
typedef struct positive_ds {
    atomic_int bad;
} positive_ds;

static uint64_t positive_len(void *self)
{
    (void)self;
    return 8;
}

static int positive_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    positive_ds *p = self;
    if (atomic_load(&p->bad) && i == 5)
        return FERRY_END;
    memset(out->data[0], (int)(0x10 + i), 4);
    memset(out->data[1], 'a', (size_t)(i % 3));
    out->length[1] = (int64_t)(i % 3);
    return 0;
}

TEST(a_positive_status_from_get_is_not_a_sample)
{
    g_cfg[0] = 0;
    snprintf(g_episode, sizeof g_episode, "get returns FERRY_END for sample 5");
    static const ferry_dataset_vtable vt = {positive_len, positive_get, NULL, NULL};
    static positive_ds self;
    ferry_field f[2];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "x");
    f[0].dtype = FERRY_U8;
    f[0].ndim = 1;
    f[0].shape[0] = 4;
    strcpy(f[1].name, "text");
    f[1].dtype = FERRY_U8;
    f[1].ndim = 1;
    f[1].shape[0] = 16;
    f[1].variable = 1;
    ferry_dataset *ds;
    EXPECT_OK(ferry_dataset_create(&ds, &vt, &self, f, 2));
    for (uint32_t workers = 0; workers < 3; workers += 2) {
        ferry_loader_opts o = test_loader_opts(4, workers);
        o.prefetch = 1;
        o.timeout_ms = HANG_MS;
        ferry_loader *l;
        EXPECT_OK(ferry_loader_create(&l, ds, &o));
        /* epoch 0 fills the buffer with good samples; in epoch 1 sample 5 fails */
        for (uint64_t e = 0; e < 2; e++) {
            atomic_store(&self.bad, (int)e);
            EXPECT_OK(ferry_loader_start(l, e, 0));
            ferry_batch *b;
            int rc;
            while ((rc = ferry_loader_next(l, &b)) == 0) {
                ferry_tensor x, len;
                EXPECT_OK(ferry_batch_field(b, 0, &x));
                EXPECT_OK(ferry_batch_lengths(b, 1, &len));
                for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
                    uint64_t idx = ferry_batch_indices(b)[i];
                    uint8_t got = ((uint8_t *)x.data)[i * 4];
                    int64_t n = ((int64_t *)len.data)[i];
                    if (got != 0x10 + idx || n != (int64_t)(idx % 3))
                        failf(__LINE__,
                              "workers %u epoch %llu: sample %llu delivered with byte 0x%02x "
                              "and length %lld (get wrote 0x%02x and %lld, or nothing)",
                              workers, (unsigned long long)e, (unsigned long long)idx, got,
                              (long long)n, (unsigned)(0x10 + idx), (long long)(idx % 3));
                }
                ferry_batch_release(b);
            }
            EXPECT(rc == FERRY_END || rc < 0);
        }
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
}
