/*
 * Samplers: orders of indices as functions of (settings, seed, epoch).
 *
 * Random orders come from a keyed bijection on [0, n): a four-round Feistel
 * network on the smallest number of bits that covers n, walked in cycles until the
 * image falls inside [0, n). The domain is under 2n, so a walk takes fewer than two
 * steps on average, and nothing is stored per index.
 */
#include "ferry/sampler.h"
#include "../core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Salts that keep the random streams of different uses apart. */
#define SALT_PERM 0x7065726du   /* "perm" */
#define SALT_DRAW 0x64726177u   /* "draw" */
#define SALT_WEIGHT 0x77676874u /* "wght" */
#define SALT_SHARDS 0x73686473u /* "shds" */
#define SALT_WINDOW 0x77696e64u /* "wind" */

/* ---- The keyed bijection ---- */

void ferry_permutation_init(ferry_permutation *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    unsigned bits = 0;
    while (bits < 64 && (n - 1) >> bits)
        bits++;
    p->bits = bits < 2 ? 2 : bits; /* both halves at least one bit wide */
    uint64_t k = ferry_hash64(ferry_hash64(seed, SALT_PERM), epoch);
    for (int r = 0; r < 4; r++)
        p->keys[r] = ferry_hash64(k, (uint64_t)r + 1);
}

static inline uint64_t low_mask(unsigned w)
{
    return w >= 64 ? ~0ull : (1ull << w) - 1;
}

/* One multiply-xorshift round: enough mixing for an order, a few cycles. */
static inline uint64_t round_fn(uint64_t x, uint64_t k)
{
    x ^= k;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 29);
}

/* An unbalanced Feistel network on exactly `bits` bits: the halves are
 * ceil(bits/2) and floor(bits/2) wide and trade places each round, so after the
 * four rounds the widths are back where they started. The domain is under 2n, so a
 * cycle walk takes fewer than two steps on average. */
static inline uint64_t feistel(const ferry_permutation *p, uint64_t x)
{
    unsigned wl = (p->bits + 1) / 2, wr = p->bits / 2;
    uint64_t left = x >> wr, right = x & low_mask(wr);
    for (int r = 0; r < 4; r++) {
        uint64_t t = left ^ (round_fn(right, p->keys[r]) & low_mask(wl));
        left = right;
        right = t;
        unsigned w = wl;
        wl = wr;
        wr = w;
    }
    return (left << wr) | right;
}

uint64_t ferry_permutation_at(const ferry_permutation *p, uint64_t x)
{
    if (p->n <= 1)
        return x;
    uint64_t y = feistel(p, x);
    while (y >= p->n)
        y = feistel(p, y);
    return y;
}

/* ---- Samplers ---- */

typedef enum {
    K_SEQ,
    K_RANDOM,
    K_RANDOM_REPL,
    K_SUBSET,
    K_WEIGHTED,
    K_WEIGHTED_NOREPL,
    K_FIXED,
    K_WINDOW
} kind;

struct ferry_sampler {
    kind kind;
    uint64_t n;    /* size of the index space */
    uint64_t base; /* positions of the whole order, before a rank split */
    uint64_t len;  /* positions per epoch: base, or this rank's part of it */
    uint64_t seed, epoch;
    ferry_permutation perm;
    uint64_t *subset; /* K_SUBSET, K_FIXED: the indices */
    double *prob;     /* K_WEIGHTED: alias table */
    uint64_t *alias;
    double *weights; /* K_WEIGHTED_NOREPL */
    uint64_t *order; /* K_WEIGHTED_NOREPL: this epoch's order */
    /* K_WINDOW: the shards' bounds [nshards + 1], the window's width, and this
     * epoch's shards in order (worder) with the positions before each (wcum,
     * [nshards + 1]), and each window's order of its positions (wperm, one a
     * window) */
    uint64_t *bounds, *worder, *wcum;
    ferry_permutation *wperm;
    uint64_t nshards, window;
    /* the rank split (ferry_sampler_split): this rank takes positions rank,
     * rank + world, ... of the order; world 1 = none */
    int64_t rank, world;
    bool distributed; /* made by ferry_sampler_distributed: its kind's name */
    uint64_t content; /* a hash of the indices, the weights or the shards' bounds */
};

/* A hash of n 64-bit words (indices, or doubles' bits), for ferry_sampler_id. */
static uint64_t hash_words(const void *v, uint64_t n)
{
    uint64_t h = ferry_hash64(n, 0x636f6e74u); /* "cont" */
    for (uint64_t i = 0; i < n; i++) {
        uint64_t x;
        memcpy(&x, (const uint8_t *)v + 8 * i, 8);
        h = ferry_hash64(h, x);
    }
    return h;
}

static int new_sampler(ferry_sampler **out, kind k, uint64_t n, uint64_t len, uint64_t seed)
{
    ferry_sampler *s = ferry__calloc(1, sizeof *s);
    *out = s;
    if (!s)
        return ferry__err(FERRY_ENOMEM, "sampler: out of memory");
    s->kind = k;
    s->n = n;
    s->base = len;
    s->len = len;
    s->seed = seed;
    s->world = 1;
    ferry_permutation_init(&s->perm, n, seed, 0);
    return 0;
}

int ferry_sampler_sequential(ferry_sampler **out, uint64_t n)
{
    return new_sampler(out, K_SEQ, n, n, 0);
}

int ferry_sampler_random(ferry_sampler **out, uint64_t n, uint64_t seed, int replacement,
                         uint64_t num_samples)
{
    *out = NULL;
    if (!replacement && num_samples != 0 && num_samples != n)
        return ferry__err(FERRY_EINVAL,
                          "random sampler: num_samples %llu without replacement must be 0 or n "
                          "(%llu)",
                          (unsigned long long)num_samples, (unsigned long long)n);
    if (replacement && n == 0 && num_samples != 0)
        return ferry__err(FERRY_EINVAL, "random sampler: cannot draw from 0 indices");
    return new_sampler(out, replacement ? K_RANDOM_REPL : K_RANDOM, n,
                       num_samples ? num_samples : n, seed);
}

/* A sampler of kind k over a copy of the given indices. */
static int with_indices(ferry_sampler **out, kind k, const uint64_t *indices, uint64_t count,
                        uint64_t seed)
{
    *out = NULL;
    size_t bytes;
    const char *who = k == K_FIXED ? "fixed" : "subset";
    if (count && !indices)
        return ferry__err(FERRY_EINVAL, "%s sampler: indices is NULL", who);
    if (count > SIZE_MAX || !ferry__mul_size((size_t)count, sizeof(uint64_t), &bytes))
        return ferry__err(FERRY_EOVERFLOW, "%s sampler: %llu indices overflow memory", who,
                          (unsigned long long)count);
    ferry_sampler *s;
    int rc = new_sampler(&s, k, count, count, seed);
    if (rc < 0)
        return rc;
    s->subset = ferry__malloc(bytes);
    if (!s->subset) {
        ferry_sampler_free(s);
        return ferry__err(FERRY_ENOMEM, "%s sampler: out of memory", who);
    }
    if (count)
        memcpy(s->subset, indices, bytes);
    s->content = hash_words(indices, count);
    *out = s;
    return 0;
}

int ferry_sampler_subset_random(ferry_sampler **out, const uint64_t *indices, uint64_t count,
                                uint64_t seed)
{
    return with_indices(out, K_SUBSET, indices, count, seed);
}

int ferry_sampler_fixed(ferry_sampler **out, const uint64_t *indices, uint64_t count)
{
    return with_indices(out, K_FIXED, indices, count, 0);
}

/* Vose's alias method: O(n) build, two draws per sample. Weights are scaled by
 * their maximum first, so that neither the sum nor w * n can overflow. */
static int build_alias(ferry_sampler *s, const double *w, uint64_t n)
{
    double max = 0, sum = 0;
    for (uint64_t i = 0; i < n; i++)
        max = w[i] > max ? w[i] : max;
    for (uint64_t i = 0; i < n; i++)
        sum += w[i] / max;
    int rc = 0;
    uint64_t *small = NULL, *large = NULL;
    s->prob = ferry__malloc(n * sizeof *s->prob);
    s->alias = ferry__malloc(n * sizeof *s->alias);
    small = ferry__malloc(n * sizeof *small);
    large = ferry__malloc(n * sizeof *large);
    if (!s->prob || !s->alias || !small || !large)
        FERRY_FAIL(FERRY_ENOMEM, "weighted sampler: out of memory for %llu weights",
                   (unsigned long long)n);
    uint64_t ns = 0, nl = 0;
    for (uint64_t i = 0; i < n; i++) {
        s->prob[i] = w[i] / max / sum * (double)n;
        s->alias[i] = i;
        if (s->prob[i] < 1.0)
            small[ns++] = i;
        else
            large[nl++] = i;
    }
    while (ns && nl) {
        uint64_t a = small[--ns], b = large[nl - 1];
        s->alias[a] = b;
        s->prob[b] -= 1.0 - s->prob[a];
        if (s->prob[b] < 1.0) {
            nl--;
            small[ns++] = b;
        }
    }
    while (nl)
        s->prob[large[--nl]] = 1.0;
    while (ns)
        s->prob[small[--ns]] = 1.0; /* rounding leftovers */
cleanup:
    ferry__free(small);
    ferry__free(large);
    return rc;
}

int ferry_sampler_weighted(ferry_sampler **out, const double *weights, uint64_t n,
                           uint64_t num_samples, int replacement, uint64_t seed)
{
    int rc = 0;
    ferry_sampler *s = NULL;
    *out = NULL;
    if (n == 0 || !weights)
        return ferry__err(FERRY_EINVAL, "weighted sampler: needs at least one weight");
    if (n > ((uint64_t)1 << 40))
        return ferry__err(FERRY_EINVAL, "weighted sampler: %llu weights is over 2^40",
                          (unsigned long long)n);
    uint64_t positive = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(weights[i]) || weights[i] < 0)
            return ferry__err(FERRY_EINVAL,
                              "weighted sampler: weight %llu is %g; weights must "
                              "be finite and >= 0",
                              (unsigned long long)i, weights[i]);
        positive += weights[i] > 0;
    }
    if (positive == 0)
        return ferry__err(FERRY_EINVAL, "weighted sampler: every weight is 0; at least one must "
                                        "be positive");
    if (num_samples == 0)
        num_samples = replacement ? n : positive;
    if (!replacement && num_samples > positive)
        return ferry__err(FERRY_EINVAL,
                          "weighted sampler: num_samples %llu without replacement exceeds the %llu "
                          "positive weights",
                          (unsigned long long)num_samples, (unsigned long long)positive);
    FERRY_TRY(new_sampler(&s, replacement ? K_WEIGHTED : K_WEIGHTED_NOREPL, n, num_samples, seed));
    s->content = hash_words(weights, n);
    if (replacement) {
        FERRY_TRY(build_alias(s, weights, n));
    } else {
        s->weights = ferry__malloc(n * sizeof *s->weights);
        if (!s->weights)
            FERRY_FAIL(FERRY_ENOMEM, "weighted sampler: out of memory");
        memcpy(s->weights, weights, n * sizeof *weights);
        FERRY_TRY(ferry_sampler_set_epoch(s, 0));
    }
    *out = s;
    return 0;
cleanup:
    ferry_sampler_free(s);
    return rc;
}

int ferry_sampler_split(ferry_sampler *s, int64_t rank, int64_t world_size, int drop_last)
{
    if (rank < 0 || world_size < 0) {
        int64_t er, ew;
        int rc = ferry_dist_from_env(&er, &ew);
        if (rc < 0)
            return rc;
        if (world_size < 0)
            world_size = ew;
        if (rank < 0)
            rank = er;
    }
    if (world_size < 1 || world_size > ((int64_t)1 << 31))
        return ferry__err(FERRY_EINVAL, "%s sampler: world_size %lld is outside [1, 2^31]",
                          ferry_sampler_kind(s), (long long)world_size);
    if (rank >= world_size)
        return ferry__err(FERRY_EINVAL, "%s sampler: rank %lld is outside [0, %lld]",
                          ferry_sampler_kind(s), (long long)rank, (long long)(world_size - 1));
    uint64_t n = s->base, w = (uint64_t)world_size;
    s->rank = rank;
    s->world = world_size;
    s->len = drop_last ? n / w : n / w + (n % w != 0);
    return 0;
}

uint64_t ferry_sampler_id(const ferry_sampler *s)
{
    uint64_t h = ferry_hash64(0x73616d70u, (uint64_t)s->kind); /* "samp" */
    /* every kind named, no default: a kind added later fails to build here until
     * what decides its order is part of its identity (a loader state relies on it) */
    switch (s->kind) {
    case K_SEQ:
    case K_RANDOM:
    case K_RANDOM_REPL:
    case K_SUBSET: /* content: its indices */
    case K_FIXED:
    case K_WEIGHTED: /* content: its weights */
    case K_WEIGHTED_NOREPL:
        break;
    case K_WINDOW: /* content: the shards' bounds; and the window */
        h = ferry_hash64(h, s->window);
        break;
    }
    /* the whole order's: not the rank, the world size, nor the share's length and
     * tail (drop_last) that follow from them; the loader checks its drop_last */
    h = ferry_hash64(h, s->n);
    h = ferry_hash64(h, s->base);
    h = ferry_hash64(h, s->kind == K_SEQ || s->kind == K_FIXED ? 0 : s->seed);
    return ferry_hash64(h, s->content);
}

uint64_t ferry_sampler_global_len(const ferry_sampler *s)
{
    return s->base;
}

void ferry_sampler_world(const ferry_sampler *s, int64_t *rank, int64_t *world_size)
{
    *rank = s->rank;
    *world_size = s->world;
}

int ferry_sampler_distributed(ferry_sampler **out, const ferry_distributed_opts *o)
{
    ferry_sampler *s;
    *out = NULL;
    int rc = o->shuffle ? ferry_sampler_random(&s, o->n, o->seed, 0, 0)
                        : ferry_sampler_sequential(&s, o->n);
    if (rc < 0)
        return rc;
    s->seed = o->seed;
    s->distributed = true;
    if ((rc = ferry_sampler_split(s, o->rank, o->world_size, o->drop_last)) < 0) {
        ferry_sampler_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- Shard windows ---- */

int ferry_sampler_window(ferry_sampler **out, const uint64_t *bounds, uint64_t nshards,
                         uint64_t window, uint64_t seed)
{
    int rc = 0;
    ferry_sampler *s = NULL;
    size_t bytes;
    *out = NULL;
    if (nshards == 0 || !bounds)
        return ferry__err(FERRY_EINVAL, "window sampler: needs at least one shard");
    if (window == 0)
        return ferry__err(FERRY_EINVAL, "window sampler: window 0 is outside [1, %llu] shards",
                          (unsigned long long)nshards);
    if (bounds[0] != 0)
        return ferry__err(FERRY_EINVAL, "window sampler: the first shard starts at %llu, not 0",
                          (unsigned long long)bounds[0]);
    for (uint64_t k = 0; k < nshards; k++)
        if (bounds[k + 1] < bounds[k])
            return ferry__err(FERRY_EINVAL,
                              "window sampler: shard %llu ends at %llu, before it starts (%llu)",
                              (unsigned long long)k, (unsigned long long)bounds[k + 1],
                              (unsigned long long)bounds[k]);
    size_t pbytes;
    if (nshards >= SIZE_MAX / 3 ||
        !ferry__mul_size((size_t)nshards + 1, 3 * sizeof(uint64_t), &bytes) ||
        !ferry__mul_size((size_t)nshards, sizeof(ferry_permutation), &pbytes))
        return ferry__err(FERRY_EOVERFLOW, "window sampler: %llu shards overflow memory",
                          (unsigned long long)nshards);
    uint64_t n = bounds[nshards];
    FERRY_TRY(new_sampler(&s, K_WINDOW, n, n, seed));
    /* one allocation: bounds, then this epoch's order and its sums */
    if (!(s->bounds = ferry__malloc(bytes)) || !(s->wperm = ferry__malloc(pbytes)))
        FERRY_FAIL(FERRY_ENOMEM, "window sampler: out of memory for %llu shards",
                   (unsigned long long)nshards);
    memcpy(s->bounds, bounds, (size_t)(nshards + 1) * sizeof *bounds);
    s->content = hash_words(bounds, nshards + 1);
    s->worder = s->bounds + nshards + 1;
    s->wcum = s->worder + nshards + 1;
    s->nshards = nshards;
    s->window = window < nshards ? window : nshards;
    FERRY_TRY(ferry_sampler_set_epoch(s, 0));
    *out = s;
    return 0;
cleanup:
    ferry_sampler_free(s);
    return rc;
}

/* The epoch's order of shards, the positions before each, and each window's
 * order of its positions (keyed by seed, window and epoch). */
static void window_epoch(ferry_sampler *s, uint64_t epoch)
{
    ferry_permutation p;
    ferry_permutation_init(&p, s->nshards, ferry_hash64(s->seed, SALT_SHARDS), epoch);
    s->wcum[0] = 0;
    for (uint64_t k = 0; k < s->nshards; k++) {
        uint64_t sh = ferry_permutation_at(&p, k);
        s->worder[k] = sh;
        s->wcum[k + 1] = s->wcum[k] + (s->bounds[sh + 1] - s->bounds[sh]);
    }
    uint64_t W = s->window, key = ferry_hash64(s->seed, SALT_WINDOW);
    for (uint64_t j = 0, lo = 0; lo < s->nshards; j++, lo += W) {
        uint64_t hi = lo + W < s->nshards ? lo + W : s->nshards;
        ferry_permutation_init(&s->wperm[j], s->wcum[hi] - s->wcum[lo], ferry_hash64(key, j),
                               epoch);
    }
}

/* The last k in [lo, hi) with v[k * step] <= x (v nondecreasing, v[lo * step] <= x). */
static uint64_t last_at_most(const uint64_t *v, uint64_t lo, uint64_t hi, uint64_t step, uint64_t x)
{
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (v[mid * step] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Position g of the epoch: its window (the last whose first position is <= g: an
 * empty window starts where the next does), its place in the window's own random
 * order, and the shard of that place. */
static uint64_t window_at(const ferry_sampler *s, uint64_t g)
{
    uint64_t W = s->window, nwin = (s->nshards + W - 1) / W;
    uint64_t j = last_at_most(s->wcum, 0, nwin, W, g);
    uint64_t lo = j * W, hi = lo + W < s->nshards ? lo + W : s->nshards;
    uint64_t start = s->wcum[lo];
    uint64_t at = start + ferry_permutation_at(&s->wperm[j], g - start);
    uint64_t k = last_at_most(s->wcum, lo, hi, 1, at);
    return s->bounds[s->worder[k]] + (at - s->wcum[k]);
}

void ferry_sampler_free(ferry_sampler *s)
{
    if (!s)
        return;
    ferry__free(s->subset);
    ferry__free(s->prob);
    ferry__free(s->alias);
    ferry__free(s->weights);
    ferry__free(s->order);
    ferry__free(s->bounds);
    ferry__free(s->wperm);
    ferry__free(s);
}

typedef struct {
    double key;
    uint64_t index;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key < y->key)
        return -1;
    if (x->key > y->key)
        return 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Efraimidis-Spirakis: sort by E_i / w_i with E_i exponential; the first k are a
 * weighted sample without replacement, in draw order. */
static int build_weighted_order(ferry_sampler *s, uint64_t epoch)
{
    uint64_t m = 0;
    for (uint64_t i = 0; i < s->n; i++)
        m += s->weights[i] > 0;
    keyed *k = ferry__malloc(m * sizeof *k);
    uint64_t *order = ferry__malloc(s->base * sizeof *order);
    if (!k || !order) {
        ferry__free(k);
        ferry__free(order);
        return ferry__err(FERRY_ENOMEM, "weighted sampler: out of memory for epoch %llu",
                          (unsigned long long)epoch);
    }
    uint64_t key = ferry_hash64(s->seed, SALT_WEIGHT);
    for (uint64_t i = 0, j = 0; i < s->n; i++) {
        if (!(s->weights[i] > 0))
            continue;
        ferry_rng r;
        ferry_rng_init(&r, key, epoch, i);
        double u = ferry_rng_uniform(&r);
        k[j].key = -log1p(-u) / s->weights[i];
        k[j].index = i;
        j++;
    }
    qsort(k, m, sizeof *k, cmp_keyed);
    for (uint64_t i = 0; i < s->base; i++)
        order[i] = k[i].index;
    ferry__free(k);
    ferry__free(s->order);
    s->order = order;
    return 0;
}

int ferry_sampler_set_epoch(ferry_sampler *s, uint64_t epoch)
{
    if (s->kind == K_WEIGHTED_NOREPL && (s->epoch != epoch || !s->order)) {
        int rc = build_weighted_order(s, epoch);
        if (rc < 0)
            return rc;
    }
    s->epoch = epoch;
    ferry_permutation_init(&s->perm, s->n, s->seed, epoch);
    if (s->kind == K_WINDOW)
        window_epoch(s, epoch);
    return 0;
}

uint64_t ferry_sampler_epoch(const ferry_sampler *s)
{
    return s->epoch;
}

uint64_t ferry_sampler_len(const ferry_sampler *s)
{
    return s->len;
}

/* Position g of the whole order (before a rank split). */
static uint64_t base_at(const ferry_sampler *s, uint64_t g)
{
    switch (s->kind) {
    case K_SEQ:
        return g;
    case K_RANDOM:
        return ferry_permutation_at(&s->perm, g);
    case K_RANDOM_REPL: {
        ferry_rng r;
        ferry_rng_init(&r, ferry_hash64(s->seed, SALT_DRAW), s->epoch, g);
        return ferry_rng_below(&r, s->n);
    }
    case K_SUBSET:
        return s->subset[ferry_permutation_at(&s->perm, g)];
    case K_WEIGHTED: {
        ferry_rng r;
        ferry_rng_init(&r, ferry_hash64(s->seed, SALT_DRAW), s->epoch, g);
        uint64_t i = ferry_rng_below(&r, s->n);
        return ferry_rng_uniform(&r) < s->prob[i] ? i : s->alias[i];
    }
    case K_WEIGHTED_NOREPL:
        return s->order[g];
    case K_FIXED:
        return s->subset[g];
    case K_WINDOW:
        return window_at(s, g);
    }
    return UINT64_MAX;
}

uint64_t ferry_sampler_at(const ferry_sampler *s, uint64_t pos)
{
    if (pos >= s->len)
        return UINT64_MAX;
    if (s->world == 1)
        return base_at(s, pos);
    uint64_t g = (uint64_t)s->rank + pos * (uint64_t)s->world;
    if (g >= s->base)
        g %= s->base; /* padding wraps around the order, as PyTorch's does */
    return base_at(s, g);
}

int ferry_sampler_fill(const ferry_sampler *s, uint64_t pos, uint64_t count, uint64_t *out)
{
    if (pos > s->len || count > s->len - pos)
        return ferry__err(FERRY_ERANGE,
                          "%s sampler: positions [%llu, %llu) are past its length "
                          "%llu",
                          ferry_sampler_kind(s), (unsigned long long)pos,
                          (unsigned long long)(pos + count), (unsigned long long)s->len);
    for (uint64_t i = 0; i < count; i++)
        out[i] = ferry_sampler_at(s, pos + i);
    return 0;
}

const char *ferry_sampler_kind(const ferry_sampler *s)
{
    if (s->distributed)
        return "distributed";
    switch (s->kind) {
    case K_SEQ:
        return "sequential";
    case K_RANDOM:
    case K_RANDOM_REPL:
        return "random";
    case K_SUBSET:
        return "subset";
    case K_WEIGHTED:
    case K_WEIGHTED_NOREPL:
        return "weighted";
    case K_FIXED:
        return "fixed";
    case K_WINDOW:
        return "window";
    }
    return "?";
}

uint64_t ferry_batch_count(uint64_t len, uint64_t batch_size, int drop_last)
{
    if (batch_size == 0)
        return 0;
    return drop_last ? len / batch_size : len / batch_size + (len % batch_size != 0);
}

int ferry_batch_positions(uint64_t len, uint64_t batch_size, int drop_last, uint64_t k,
                          uint64_t *first, uint64_t *count)
{
    uint64_t nb = ferry_batch_count(len, batch_size, drop_last);
    if (k >= nb)
        return ferry__err(FERRY_ERANGE, "batch %llu is past the last (%llu batches)",
                          (unsigned long long)k, (unsigned long long)nb);
    *first = k * batch_size;
    *count = len - *first < batch_size ? len - *first : batch_size;
    return 0;
}
