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
    K_DIST,
    K_SPLIT
} kind;

struct ferry_sampler {
    kind kind;
    uint64_t n;   /* size of the index space */
    uint64_t len; /* positions per epoch */
    uint64_t seed, epoch;
    ferry_permutation perm;
    uint64_t *subset; /* K_SUBSET: the indices */
    double *prob;     /* K_WEIGHTED: alias table */
    uint64_t *alias;
    double *weights;     /* K_WEIGHTED_NOREPL */
    uint64_t *order;     /* K_WEIGHTED_NOREPL: this epoch's order */
    int64_t rank, world; /* K_DIST, K_SPLIT */
    int shuffle, drop_last;
    ferry_sampler *inner; /* K_SPLIT: borrowed */
    uint64_t content;     /* a hash of the subset's indices or the weights */
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
    s->len = len;
    s->seed = seed;
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

int ferry_sampler_subset_random(ferry_sampler **out, const uint64_t *indices, uint64_t count,
                                uint64_t seed)
{
    *out = NULL;
    size_t bytes;
    if (count && !indices)
        return ferry__err(FERRY_EINVAL, "subset sampler: indices is NULL");
    if (count > SIZE_MAX || !ferry__mul_size((size_t)count, sizeof(uint64_t), &bytes))
        return ferry__err(FERRY_EOVERFLOW, "subset sampler: %llu indices overflow memory",
                          (unsigned long long)count);
    ferry_sampler *s;
    int rc = new_sampler(&s, K_SUBSET, count, count, seed);
    if (rc < 0)
        return rc;
    s->subset = ferry__malloc(bytes);
    if (!s->subset) {
        ferry_sampler_free(s);
        return ferry__err(FERRY_ENOMEM, "subset sampler: out of memory");
    }
    if (count)
        memcpy(s->subset, indices, bytes);
    s->content = hash_words(indices, count);
    *out = s;
    return 0;
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

int ferry_sampler_distributed(ferry_sampler **out, const ferry_distributed_opts *o)
{
    *out = NULL;
    int64_t rank = o->rank, world = o->world_size;
    if (rank < 0 || world < 0) {
        int64_t er, ew;
        int rc = ferry_dist_from_env(&er, &ew);
        if (rc < 0)
            return rc;
        if (world < 0)
            world = ew;
        if (rank < 0)
            rank = er;
    }
    if (world < 1 || world > ((int64_t)1 << 31))
        return ferry__err(FERRY_EINVAL, "distributed sampler: world_size %lld is outside [1, 2^31]",
                          (long long)world);
    if (rank >= world)
        return ferry__err(FERRY_EINVAL, "distributed sampler: rank %lld is outside [0, %lld]",
                          (long long)rank, (long long)(world - 1));
    uint64_t n = o->n, w = (uint64_t)world;
    uint64_t per_rank = o->drop_last ? n / w : n / w + (n % w != 0);
    ferry_sampler *s;
    int rc = new_sampler(&s, K_DIST, n, per_rank, o->seed);
    if (rc < 0)
        return rc;
    s->rank = rank;
    s->world = world;
    s->shuffle = o->shuffle;
    s->drop_last = o->drop_last;
    *out = s;
    return 0;
}

int ferry_sampler_split(ferry_sampler **out, ferry_sampler *inner, int64_t rank, int64_t world_size,
                        int drop_last)
{
    *out = NULL;
    if (!inner)
        return ferry__err(FERRY_EINVAL, "split sampler: no sampler to split");
    if (world_size < 1 || world_size > ((int64_t)1 << 31))
        return ferry__err(FERRY_EINVAL, "split sampler: world_size %lld is outside [1, 2^31]",
                          (long long)world_size);
    if (rank < 0 || rank >= world_size)
        return ferry__err(FERRY_EINVAL, "split sampler: rank %lld is outside [0, %lld]",
                          (long long)rank, (long long)(world_size - 1));
    if (inner->kind == K_DIST || inner->kind == K_SPLIT)
        return ferry__err(FERRY_EINVAL,
                          "split sampler: the %s sampler is one rank's share already (rank %lld "
                          "of %lld); split the order it shares out instead",
                          ferry_sampler_kind(inner), (long long)inner->rank,
                          (long long)inner->world);
    uint64_t n = inner->len, w = (uint64_t)world_size;
    ferry_sampler *s;
    int rc = new_sampler(&s, K_SPLIT, n, drop_last ? n / w : n / w + (n % w != 0), 0);
    if (rc < 0)
        return rc;
    s->inner = inner;
    s->rank = rank;
    s->world = world_size;
    s->drop_last = drop_last != 0;
    s->epoch = inner->epoch;
    *out = s;
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
    case K_SUBSET:   /* content: its indices */
    case K_WEIGHTED: /* content: its weights */
    case K_WEIGHTED_NOREPL:
    case K_DIST:
        break;
    case K_SPLIT:
        return ferry_hash64(ferry_hash64(h, ferry_sampler_id(s->inner)), (uint64_t)s->drop_last);
    }
    h = ferry_hash64(h, s->n);
    /* a share's length follows from n, drop_last and the world size */
    h = ferry_hash64(h, s->kind == K_DIST ? 0 : s->len);
    h = ferry_hash64(h, s->kind == K_SEQ || (s->kind == K_DIST && !s->shuffle) ? 0 : s->seed);
    h = ferry_hash64(h, (uint64_t)s->shuffle << 1 | (uint64_t)s->drop_last);
    return ferry_hash64(h, s->content);
}

uint64_t ferry_sampler_global_len(const ferry_sampler *s)
{
    return s->kind == K_DIST || s->kind == K_SPLIT ? s->n : s->len;
}

void ferry_sampler_world(const ferry_sampler *s, int64_t *rank, int64_t *world_size)
{
    bool shared = s->kind == K_DIST || s->kind == K_SPLIT;
    *rank = shared ? s->rank : 0;
    *world_size = shared ? s->world : 1;
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
    uint64_t *order = ferry__malloc(s->len * sizeof *order);
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
    for (uint64_t i = 0; i < s->len; i++)
        order[i] = k[i].index;
    ferry__free(k);
    ferry__free(s->order);
    s->order = order;
    return 0;
}

int ferry_sampler_set_epoch(ferry_sampler *s, uint64_t epoch)
{
    if (s->kind == K_SPLIT) {
        int rc = ferry_sampler_set_epoch(s->inner, epoch);
        if (rc < 0)
            return rc;
    }
    if (s->kind == K_WEIGHTED_NOREPL && (s->epoch != epoch || !s->order)) {
        int rc = build_weighted_order(s, epoch);
        if (rc < 0)
            return rc;
    }
    s->epoch = epoch;
    ferry_permutation_init(&s->perm, s->n, s->seed, epoch);
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

uint64_t ferry_sampler_at(const ferry_sampler *s, uint64_t pos)
{
    if (pos >= s->len)
        return UINT64_MAX;
    switch (s->kind) {
    case K_SEQ:
        return pos;
    case K_RANDOM:
        return ferry_permutation_at(&s->perm, pos);
    case K_RANDOM_REPL: {
        ferry_rng r;
        ferry_rng_init(&r, ferry_hash64(s->seed, SALT_DRAW), s->epoch, pos);
        return ferry_rng_below(&r, s->n);
    }
    case K_SUBSET:
        return s->subset[ferry_permutation_at(&s->perm, pos)];
    case K_WEIGHTED: {
        ferry_rng r;
        ferry_rng_init(&r, ferry_hash64(s->seed, SALT_DRAW), s->epoch, pos);
        uint64_t i = ferry_rng_below(&r, s->n);
        return ferry_rng_uniform(&r) < s->prob[i] ? i : s->alias[i];
    }
    case K_WEIGHTED_NOREPL:
        return s->order[pos];
    case K_DIST: {
        uint64_t g = (uint64_t)s->rank + pos * (uint64_t)s->world;
        if (g >= s->n)
            g %= s->n; /* padding wraps around the order, as PyTorch's does */
        return s->shuffle ? ferry_permutation_at(&s->perm, g) : g;
    }
    case K_SPLIT: {
        uint64_t g = (uint64_t)s->rank + pos * (uint64_t)s->world;
        if (g >= s->n)
            g %= s->n; /* padding: the start of the order again */
        return ferry_sampler_at(s->inner, g);
    }
    }
    return UINT64_MAX;
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
    case K_DIST:
        return "distributed";
    case K_SPLIT:
        return "split";
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
