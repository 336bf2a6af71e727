/*
 * Samplers as property tests over several sizes and seeds: permutations are
 * bijections, orders are functions of (settings, seed, epoch), weighted draws follow
 * the weights, and the distributed sampler matches PyTorch's DistributedSampler.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "core/internal.h"

#include <math.h>
#include <stdint.h>

static const uint64_t sizes[] = {0, 1, 2, 7, 1000, 65537};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static const uint64_t seeds[] = {0, 1, 0xdeadbeefull, UINT64_MAX};
#define NSEEDS (sizeof seeds / sizeof seeds[0])

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        test_fail(__FILE__, __LINE__, "out of memory in the test");
    return p;
}

/* The whole epoch, read through ferry_sampler_fill, checked against _at. */
static uint64_t *read_all(const ferry_sampler *s)
{
    uint64_t len = ferry_sampler_len(s);
    uint64_t *v = xcalloc((size_t)len, sizeof *v);
    CHECK_OK(ferry_sampler_fill(s, 0, len, v));
    for (uint64_t i = 0; i < len; i += 1 + len / 64)
        CHECK_U64(ferry_sampler_at(s, i), v[i]);
    return v;
}

/* v[0..len) is a permutation of [0, n). */
static void check_permutation(const uint64_t *v, uint64_t len, uint64_t n)
{
    CHECK_U64(len, n);
    unsigned char *seen = xcalloc((size_t)n, 1);
    for (uint64_t i = 0; i < len; i++) {
        if (v[i] >= n)
            test_fail(__FILE__, __LINE__, "position %llu: index %llu is not below n = %llu",
                      (unsigned long long)i, (unsigned long long)v[i], (unsigned long long)n);
        if (seen[v[i]])
            test_fail(__FILE__, __LINE__, "position %llu: index %llu appears twice (n = %llu)",
                      (unsigned long long)i, (unsigned long long)v[i], (unsigned long long)n);
        seen[v[i]] = 1;
    }
    free(seen);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int same_order(const uint64_t *a, const uint64_t *b, uint64_t len)
{
    return len == 0 || !memcmp(a, b, (size_t)len * sizeof *a);
}

/* ---- sequential ---- */

TEST(sequential_is_identity)
{
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t n = sizes[i];
        ferry_sampler *s = NULL;
        CHECK_OK(ferry_sampler_sequential(&s, n));
        CHECK(!strcmp(ferry_sampler_kind(s), "sequential"));
        CHECK_U64(ferry_sampler_len(s), n);
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            CHECK_OK(ferry_sampler_set_epoch(s, epoch));
            CHECK_U64(ferry_sampler_epoch(s), epoch);
            uint64_t *v = read_all(s);
            for (uint64_t p = 0; p < n; p++)
                CHECK_U64(v[p], p);
            free(v);
        }
        CHECK_U64(ferry_sampler_at(s, n), UINT64_MAX);
        ferry_sampler_free(s);
    }
    ferry_sampler_free(NULL);
}

/* ---- random, without replacement ---- */

TEST(random_is_permutation_each_epoch)
{
    for (size_t i = 0; i < NSIZES; i++) {
        for (size_t j = 0; j < NSEEDS; j++) {
            ferry_sampler *s = NULL;
            CHECK_OK(ferry_sampler_random(&s, sizes[i], seeds[j], 0, 0));
            CHECK(!strcmp(ferry_sampler_kind(s), "random"));
            CHECK_U64(ferry_sampler_epoch(s), 0);
            for (uint64_t epoch = 0; epoch < 3; epoch++) {
                CHECK_OK(ferry_sampler_set_epoch(s, epoch));
                uint64_t *v = read_all(s);
                check_permutation(v, ferry_sampler_len(s), sizes[i]);
                free(v);
            }
            CHECK_U64(ferry_sampler_at(s, sizes[i]), UINT64_MAX);
            ferry_sampler_free(s);
        }
    }
    /* num_samples = n is the same as 0. */
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_random(&s, 10, 3, 0, 10));
    CHECK_U64(ferry_sampler_len(s), 10);
    ferry_sampler_free(s);
}

TEST(random_same_seed_and_epoch_same_order)
{
    for (size_t i = 0; i < NSIZES; i++) {
        for (size_t j = 0; j < NSEEDS; j++) {
            ferry_sampler *a, *b;
            CHECK_OK(ferry_sampler_random(&a, sizes[i], seeds[j], 0, 0));
            CHECK_OK(ferry_sampler_random(&b, sizes[i], seeds[j], 0, 0));
            /* b gets to epoch 2 by another route: the order depends on the epoch only. */
            CHECK_OK(ferry_sampler_set_epoch(a, 2));
            CHECK_OK(ferry_sampler_set_epoch(b, 7));
            CHECK_OK(ferry_sampler_set_epoch(b, 2));
            uint64_t *va = read_all(a), *vb = read_all(b);
            CHECK(same_order(va, vb, sizes[i]));
            /* Seeking to any position gives the same as reading from the start. */
            uint64_t n = sizes[i];
            if (n > 3) {
                uint64_t tail[3];
                CHECK_OK(ferry_sampler_fill(a, n - 3, 3, tail));
                CHECK(!memcmp(tail, va + n - 3, sizeof tail));
            }
            free(va);
            free(vb);
            ferry_sampler_free(a);
            ferry_sampler_free(b);
        }
    }
}

TEST(random_epoch_and_seed_change_order)
{
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t n = sizes[i];
        if (n < 7)
            continue;
        uint64_t *orders[NSEEDS][3];
        for (size_t j = 0; j < NSEEDS; j++) {
            ferry_sampler *s;
            CHECK_OK(ferry_sampler_random(&s, n, seeds[j], 0, 0));
            for (uint64_t e = 0; e < 3; e++) {
                CHECK_OK(ferry_sampler_set_epoch(s, e));
                orders[j][e] = read_all(s);
            }
            ferry_sampler_free(s);
        }
        for (size_t j = 0; j < NSEEDS; j++) {
            for (int e = 0; e < 3; e++) {
                for (size_t j2 = 0; j2 < NSEEDS; j2++) {
                    for (int e2 = 0; e2 < 3; e2++) {
                        if (j == j2 && e == e2)
                            continue;
                        if (same_order(orders[j][e], orders[j2][e2], n))
                            test_fail(__FILE__, __LINE__,
                                      "n %llu: seed %llu epoch %d and seed %llu epoch %d give "
                                      "the same order",
                                      (unsigned long long)n, (unsigned long long)seeds[j], e,
                                      (unsigned long long)seeds[j2], e2);
                    }
                }
            }
        }
        /* Not the identity, nor close to it: a random permutation fixes about 1 point. */
        if (n >= 1000) {
            uint64_t fixed = 0;
            for (uint64_t p = 0; p < n; p++)
                fixed += orders[1][0][p] == p;
            CHECK(fixed < 20);
        }
        for (size_t j = 0; j < NSEEDS; j++)
            for (int e = 0; e < 3; e++)
                free(orders[j][e]);
    }
}

TEST(random_invalid_arguments)
{
    ferry_sampler *s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_random(&s, 10, 1, 0, 5), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "num_samples");
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_random(&s, 10, 1, 0, 11), FERRY_EINVAL);
    CHECK(s == NULL);
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_random(&s, 0, 1, 1, 5), FERRY_EINVAL);
    CHECK(s == NULL);
    /* Nothing to draw, nothing asked: an empty epoch. */
    CHECK_OK(ferry_sampler_random(&s, 0, 1, 1, 0));
    CHECK_U64(ferry_sampler_len(s), 0);
    ferry_sampler_free(s);
}

/* ---- the keyed bijection ---- */

TEST(permutation_is_bijection)
{
    static const uint64_t ns[] = {1,    2,    3,     4,     5,     7,      8,      9,
                                  15,   16,   17,    255,   256,   257,    1000,   4095,
                                  4096, 4097, 65536, 65537, 99991, 100000, 1 << 17};
    static const uint64_t pseeds[] = {0, 0xdeadbeef};
    unsigned char *seen = xcalloc(1 << 17, 1);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        uint64_t n = ns[i];
        for (size_t j = 0; j < 2; j++) {
            for (uint64_t epoch = 0; epoch < 10; epoch += 5) {
                ferry_permutation p;
                ferry_permutation_init(&p, n, pseeds[j], epoch);
                memset(seen, 0, (size_t)n);
                for (uint64_t x = 0; x < n; x++) {
                    uint64_t y = ferry_permutation_at(&p, x);
                    if (y >= n || seen[y])
                        test_fail(__FILE__, __LINE__,
                                  "n %llu seed %llu epoch %llu: x %llu -> %llu (%s)",
                                  (unsigned long long)n, (unsigned long long)pseeds[j],
                                  (unsigned long long)epoch, (unsigned long long)x,
                                  (unsigned long long)y, y >= n ? "out of range" : "repeated");
                    seen[y] = 1;
                }
            }
        }
    }
    free(seen);
    /* n = 0 is allowed (nothing to map), n = 1 maps 0 to 0. */
    ferry_permutation p;
    ferry_permutation_init(&p, 0, 1, 2);
    ferry_permutation_init(&p, 1, 1, 2);
    CHECK_U64(ferry_permutation_at(&p, 0), 0);
}

TEST(permutation_huge_n_constant_memory)
{
    /* Plain data of a few words, whatever n is. */
    CHECK(sizeof(ferry_permutation) <= 64);
    static const uint64_t ns[] = {(uint64_t)1 << 40, ((uint64_t)1 << 40) + 1,
                                  ((uint64_t)1 << 63) + 1, UINT64_MAX};
    enum { K = 1000 };
    uint64_t *v = xcalloc(K, sizeof *v);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (uint64_t seed = 0; seed < 2; seed++) {
            ferry_permutation p;
            ferry_permutation_init(&p, ns[i], seed, 3);
            ferry_permutation copy = p;
            int fixed = 0;
            for (uint64_t x = 0; x < K; x++) {
                v[x] = ferry_permutation_at(&p, x);
                CHECK(v[x] < ns[i]);
                CHECK_U64(ferry_permutation_at(&copy, x), v[x]);
                fixed += v[x] == x;
            }
            CHECK(fixed == 0);
            /* The images spread over the range rather than staying near the start. */
            uint64_t high = 0;
            for (uint64_t x = 0; x < K; x++)
                high += v[x] >= ns[i] / 2;
            CHECK(high > K / 4 && high < 3 * K / 4);
            qsort(v, K, sizeof *v, cmp_u64);
            for (uint64_t x = 1; x < K; x++)
                CHECK(v[x - 1] != v[x]);
            /* And the last positions map inside [0, n) too. */
            CHECK(ferry_permutation_at(&p, ns[i] - 1) < ns[i]);
        }
    }
    free(v);
    /* The random sampler itself on a huge index space, with no memory per index. */
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_random(&s, (uint64_t)1 << 40, 5, 0, 0));
    CHECK_U64(ferry_sampler_len(s), (uint64_t)1 << 40);
    CHECK(ferry_sampler_at(s, ((uint64_t)1 << 40) - 1) < ((uint64_t)1 << 40));
    ferry_sampler_free(s);
}

/* ---- random, with replacement ---- */

TEST(random_with_replacement)
{
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t n = sizes[i];
        if (n == 0)
            continue;
        const uint64_t counts[] = {0, 5, n < 10000 ? 3 * n : 20000};
        for (size_t c = 0; c < 3; c++) {
            ferry_sampler *a, *b;
            CHECK_OK(ferry_sampler_random(&a, n, 42, 1, counts[c]));
            CHECK_OK(ferry_sampler_random(&b, n, 42, 1, counts[c]));
            CHECK(!strcmp(ferry_sampler_kind(a), "random"));
            uint64_t len = counts[c] ? counts[c] : n;
            CHECK_U64(ferry_sampler_len(a), len);
            CHECK_OK(ferry_sampler_set_epoch(a, 1));
            CHECK_OK(ferry_sampler_set_epoch(b, 1));
            uint64_t *va = read_all(a), *vb = read_all(b);
            for (uint64_t p = 0; p < len; p++)
                CHECK(va[p] < n);
            CHECK(same_order(va, vb, len));
            if (n >= 7 && len >= 20) {
                CHECK_OK(ferry_sampler_set_epoch(b, 2));
                uint64_t *vc = read_all(b);
                CHECK(!same_order(va, vc, len));
                free(vc);
            }
            /* With replacement, n draws from n >= 1000 repeat some index. */
            if (n >= 1000 && len >= n) {
                qsort(va, (size_t)len, sizeof *va, cmp_u64);
                int dup = 0;
                for (uint64_t p = 1; p < len; p++)
                    dup |= va[p] == va[p - 1];
                CHECK(dup);
            }
            free(va);
            free(vb);
            ferry_sampler_free(a);
            ferry_sampler_free(b);
        }
    }
    /* Uniform over [0, 7). */
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_random(&s, 7, 9, 1, 70000));
    long hist[7] = {0};
    for (uint64_t p = 0; p < 70000; p++)
        hist[ferry_sampler_at(s, p)]++;
    double chi2 = 0;
    for (int k = 0; k < 7; k++)
        chi2 += (hist[k] - 10000.0) * (hist[k] - 10000.0) / 10000.0;
    CHECK(chi2 < 40); /* 6 degrees of freedom */
    ferry_sampler_free(s);
    /* A different seed gives different draws. */
    ferry_sampler *a, *b;
    CHECK_OK(ferry_sampler_random(&a, 1000, 1, 1, 0));
    CHECK_OK(ferry_sampler_random(&b, 1000, 2, 1, 0));
    uint64_t *va = read_all(a), *vb = read_all(b);
    CHECK(!same_order(va, vb, 1000));
    free(va);
    free(vb);
    ferry_sampler_free(a);
    ferry_sampler_free(b);
}

/* ---- subset ---- */

TEST(subset_random_is_permutation_of_subset)
{
    for (size_t i = 0; i < NSIZES; i++) {
        uint64_t count = sizes[i];
        uint64_t *idx = xcalloc((size_t)count, sizeof *idx);
        for (uint64_t k = 0; k < count; k++)
            idx[k] = k * 7919 + 3 + (k % 3) * 1000000007ull;
        uint64_t *sorted = xcalloc((size_t)count, sizeof *sorted);
        memcpy(sorted, idx, (size_t)count * sizeof *idx);
        qsort(sorted, (size_t)count, sizeof *sorted, cmp_u64);
        for (size_t j = 0; j < NSEEDS; j++) {
            ferry_sampler *s, *t;
            CHECK_OK(ferry_sampler_subset_random(&s, idx, count, seeds[j]));
            CHECK_OK(ferry_sampler_subset_random(&t, idx, count, seeds[j]));
            CHECK(!strcmp(ferry_sampler_kind(s), "subset"));
            CHECK_U64(ferry_sampler_len(s), count);
            uint64_t *first = NULL;
            for (uint64_t e = 0; e < 2; e++) {
                CHECK_OK(ferry_sampler_set_epoch(s, e));
                CHECK_OK(ferry_sampler_set_epoch(t, e));
                uint64_t *v = read_all(s), *w = read_all(t);
                CHECK(same_order(v, w, count));
                free(w);
                if (e == 0) {
                    first = xcalloc((size_t)count, sizeof *first);
                    memcpy(first, v, (size_t)count * sizeof *v);
                } else if (count >= 7) {
                    CHECK(!same_order(first, v, count));
                }
                qsort(v, (size_t)count, sizeof *v, cmp_u64);
                CHECK(same_order(v, sorted, count));
                free(v);
            }
            free(first);
            ferry_sampler_free(s);
            ferry_sampler_free(t);
        }
        /* The sampler keeps its own copy. */
        if (count) {
            ferry_sampler *s;
            CHECK_OK(ferry_sampler_subset_random(&s, idx, count, 5));
            uint64_t *before = read_all(s);
            memset(idx, 0xff, (size_t)count * sizeof *idx);
            uint64_t *after = read_all(s);
            CHECK(same_order(before, after, count));
            free(before);
            free(after);
            ferry_sampler_free(s);
        }
        free(idx);
        free(sorted);
    }
    /* Repeated indices stay repeated. */
    const uint64_t dup[5] = {4, 4, 9, 4, 2};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_subset_random(&s, dup, 5, 11));
    uint64_t *v = read_all(s);
    qsort(v, 5, sizeof *v, cmp_u64);
    CHECK_U64(v[0], 2);
    CHECK_U64(v[1], 4);
    CHECK_U64(v[2], 4);
    CHECK_U64(v[3], 4);
    CHECK_U64(v[4], 9);
    free(v);
    ferry_sampler_free(s);
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_subset_random(&s, NULL, 3, 0), FERRY_EINVAL);
    CHECK(s == NULL);
}

/* ---- weighted ---- */

static void check_frequencies(const ferry_sampler *s, const double *w, uint64_t n, int line)
{
    uint64_t len = ferry_sampler_len(s);
    long *hist = xcalloc((size_t)n, sizeof *hist);
    for (uint64_t p = 0; p < len; p++) {
        uint64_t x = ferry_sampler_at(s, p);
        if (x >= n)
            test_fail(__FILE__, line, "position %llu: index %llu out of range",
                      (unsigned long long)p, (unsigned long long)x);
        hist[x]++;
    }
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += w[i];
    for (uint64_t i = 0; i < n; i++) {
        double expect = (w[i] / sum) * (double)len;
        if (w[i] == 0 && hist[i] != 0)
            test_fail(__FILE__, line, "index %llu has weight 0 but was drawn %ld times",
                      (unsigned long long)i, hist[i]);
        /* Six standard deviations, and a little. */
        if (fabs((double)hist[i] - expect) > 6 * sqrt(expect) + 10)
            test_fail(__FILE__, line, "index %llu (weight %g): drawn %ld times, expected %.0f",
                      (unsigned long long)i, w[i], hist[i], expect);
    }
    free(hist);
}

TEST(weighted_with_replacement_follows_weights)
{
    const double w[7] = {0, 1, 2, 0, 4, 1, 0.5};
    ferry_sampler *s, *t;
    CHECK_OK(ferry_sampler_weighted(&s, w, 7, 85000, 1, 3));
    CHECK(!strcmp(ferry_sampler_kind(s), "weighted"));
    CHECK_U64(ferry_sampler_len(s), 85000);
    check_frequencies(s, w, 7, __LINE__);
    CHECK_OK(ferry_sampler_set_epoch(s, 4));
    check_frequencies(s, w, 7, __LINE__);
    /* Deterministic, and the epoch matters. */
    CHECK_OK(ferry_sampler_weighted(&t, w, 7, 85000, 1, 3));
    CHECK_OK(ferry_sampler_set_epoch(t, 4));
    uint64_t *a = read_all(s), *b = read_all(t);
    CHECK(same_order(a, b, 85000));
    CHECK_OK(ferry_sampler_set_epoch(t, 5));
    free(b);
    b = read_all(t);
    CHECK(!same_order(a, b, 85000));
    free(a);
    free(b);
    ferry_sampler_free(s);
    ferry_sampler_free(t);

    /* num_samples 0 means n; one positive weight takes every draw. */
    const double one[5] = {0, 0, 0, 2.5, 0};
    CHECK_OK(ferry_sampler_weighted(&s, one, 5, 0, 1, 1));
    CHECK_U64(ferry_sampler_len(s), 5);
    for (uint64_t p = 0; p < 5; p++)
        CHECK_U64(ferry_sampler_at(s, p), 3);
    ferry_sampler_free(s);

    /* Many weights of very different sizes. */
    enum { N = 1000 };
    double *many = xcalloc(N, sizeof *many);
    for (int i = 0; i < N; i++)
        many[i] = i % 10 == 0 ? 0 : (double)(i % 7 + 1) * (i < 500 ? 1e-3 : 1e3);
    CHECK_OK(ferry_sampler_weighted(&s, many, N, 200000, 1, 99));
    check_frequencies(s, many, N, __LINE__);
    ferry_sampler_free(s);
    free(many);
}

/* Weights near DBL_MAX: finite, though their products with n (or their sum) are not. */
TEST(weighted_large_weights)
{
    const double w[3] = {8e307, 8e307, 1e307};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_weighted(&s, w, 3, 30000, 1, 1));
    check_frequencies(s, w, 3, __LINE__);
    ferry_sampler_free(s);
    /* Each weight finite, their sum not: still a valid distribution (1/2, 1/2). */
    const double w2[3] = {1.5e308, 0, 1.5e308};
    CHECK_OK(ferry_sampler_weighted(&s, w2, 3, 20000, 1, 2));
    check_frequencies(s, (const double[3]){1, 0, 1}, 3, __LINE__);
    ferry_sampler_free(s);
    CHECK_OK(ferry_sampler_weighted(&s, w2, 3, 0, 0, 2));
    CHECK_U64(ferry_sampler_len(s), 2);
    uint64_t a = ferry_sampler_at(s, 0), b = ferry_sampler_at(s, 1);
    CHECK((a == 0 && b == 2) || (a == 2 && b == 0));
    ferry_sampler_free(s);
}

TEST(weighted_without_replacement)
{
    const double w[10] = {1, 0, 3, 0.25, 0, 8, 2, 2, 0, 5};
    const uint64_t positive = 7;
    for (uint64_t k = 0; k <= positive; k++) {
        ferry_sampler *s, *t;
        CHECK_OK(ferry_sampler_weighted(&s, w, 10, k, 0, 17));
        CHECK_OK(ferry_sampler_weighted(&t, w, 10, k, 0, 17));
        CHECK(!strcmp(ferry_sampler_kind(s), "weighted"));
        uint64_t len = k ? k : positive; /* 0: every positive weight */
        CHECK_U64(ferry_sampler_len(s), len);
        for (uint64_t e = 0; e < 4; e++) {
            CHECK_OK(ferry_sampler_set_epoch(s, e));
            CHECK_OK(ferry_sampler_set_epoch(t, e));
            CHECK_U64(ferry_sampler_epoch(s), e);
            uint64_t *v = read_all(s), *u = read_all(t);
            CHECK(same_order(v, u, len));
            unsigned char seen[10] = {0};
            for (uint64_t p = 0; p < len; p++) {
                CHECK(v[p] < 10);
                CHECK(w[v[p]] > 0);
                CHECK(!seen[v[p]]);
                seen[v[p]] = 1;
            }
            free(v);
            free(u);
        }
        ferry_sampler_free(s);
        ferry_sampler_free(t);
    }
    /* Orders change with the epoch. */
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_weighted(&s, w, 10, 0, 0, 17));
    uint64_t *e0 = read_all(s);
    int changed = 0;
    for (uint64_t e = 1; e < 6; e++) {
        CHECK_OK(ferry_sampler_set_epoch(s, e));
        uint64_t *v = read_all(s);
        changed += !same_order(e0, v, positive);
        free(v);
    }
    CHECK(changed >= 4);
    /* Back to epoch 0: the same order as before. */
    CHECK_OK(ferry_sampler_set_epoch(s, 0));
    uint64_t *again = read_all(s);
    CHECK(same_order(e0, again, positive));
    free(again);
    free(e0);
    ferry_sampler_free(s);
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_weighted(&s, w, 10, positive + 1, 0, 17), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "positive weights");
}

/* The first draw of a weighted sample without replacement picks i with probability
 * w_i / sum (as torch.multinomial does): count it over many epochs. */
TEST(weighted_without_replacement_first_draw_follows_weights)
{
    const double w[3] = {1, 2, 7};
    enum { EPOCHS = 5000 };
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_weighted(&s, w, 3, 1, 0, 123));
    long hist[3] = {0};
    for (uint64_t e = 0; e < EPOCHS; e++) {
        CHECK_OK(ferry_sampler_set_epoch(s, e));
        hist[ferry_sampler_at(s, 0)]++;
    }
    for (int i = 0; i < 3; i++) {
        double expect = w[i] / 10 * EPOCHS;
        if (fabs(hist[i] - expect) > 6 * sqrt(expect) + 10)
            test_fail(__FILE__, __LINE__, "index %d: first %ld times of %d, expected %.0f", i,
                      hist[i], EPOCHS, expect);
    }
    ferry_sampler_free(s);
}

TEST(weighted_invalid_weights)
{
    static const struct {
        double w[4];
        uint64_t n;
        const char *mention;
    } bad[] = {
        {{1, 2, -1, 3}, 4, "2"},        {{1, NAN, 1, 1}, 4, "1"},    {{1, 1, 1, INFINITY}, 4, "3"},
        {{-INFINITY, 1, 1, 1}, 4, "0"}, {{0, 0, 0, 0}, 4, "weight"}, {{0, -0.0, 0, 0}, 4, "weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int repl = 0; repl < 2; repl++) {
            ferry_sampler *s = (ferry_sampler *)&s;
            ferry__err_clear();
            int rc = ferry_sampler_weighted(&s, bad[i].w, bad[i].n, 0, repl, 1);
            if (rc != FERRY_EINVAL)
                test_fail(__FILE__, __LINE__,
                          "case %zu (replacement %d): rc %d (%s), wanted "
                          "FERRY_EINVAL",
                          i, repl, rc, ferry_errname(rc));
            CHECK(s == NULL);
            CHECK_CONTAINS(ferry_last_errmsg(), "weight");
            CHECK_CONTAINS(ferry_last_errmsg(), bad[i].mention);
        }
    }
    const double ok[2] = {1, 1};
    ferry_sampler *s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_weighted(&s, ok, 0, 0, 1, 1), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "weight");
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_weighted(&s, NULL, 2, 0, 1, 1), FERRY_EINVAL);
    CHECK(s == NULL);
}

/* ---- distributed ---- */

/* PyTorch DistributedSampler.__iter__, index arithmetic transcribed literally:
 *   indices = order (shuffled by the sampler's permutation, or 0..n-1)
 *   if not drop_last: pad by indices[:pad] (or the list repeated, if pad > n)
 *   else: indices = indices[:total]
 *   indices = indices[rank:total:world] */
static uint64_t *pytorch_dist(uint64_t n, uint64_t world, uint64_t rank, int shuffle, uint64_t seed,
                              uint64_t epoch, int drop_last, uint64_t *num)
{
    uint64_t num_samples;
    if (drop_last && n % world != 0) {
        /* math.ceil((len(dataset) - num_replicas) / num_replicas) */
        int64_t a = (int64_t)n - (int64_t)world;
        num_samples = a <= 0 ? 0 : (uint64_t)((a + (int64_t)world - 1) / (int64_t)world);
    } else {
        num_samples = (n + world - 1) / world; /* math.ceil(len / num_replicas) */
    }
    uint64_t total = num_samples * world;
    uint64_t *indices = xcalloc((size_t)(total > n ? total : n), sizeof *indices);
    ferry_permutation p;
    ferry_permutation_init(&p, n, seed, epoch);
    for (uint64_t i = 0; i < n; i++)
        indices[i] = shuffle ? ferry_permutation_at(&p, i) : i;
    uint64_t len = n;
    if (!drop_last) {
        uint64_t pad = total - n;
        if (pad <= n) {
            for (uint64_t j = 0; j < pad; j++)
                indices[len++] = indices[j];
        } else {
            uint64_t reps = (pad + n - 1) / n;
            for (uint64_t r = 0; r < reps; r++)
                for (uint64_t j = 0; j < n && len < total; j++)
                    indices[len++] = indices[j];
        }
    } else {
        len = total;
    }
    CHECK_U64(len, total);
    uint64_t *out = xcalloc((size_t)num_samples, sizeof *out);
    uint64_t k = 0;
    for (uint64_t i = rank; i < total; i += world)
        out[k++] = indices[i];
    CHECK_U64(k, num_samples);
    free(indices);
    *num = num_samples;
    return out;
}

TEST(distributed_matches_pytorch)
{
    static const uint64_t ns[] = {0, 1, 7, 10, 1000};
    static const uint64_t dseeds[] = {0, 12345};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        uint64_t n = ns[ni];
        for (int64_t world = 1; world <= 5; world++) {
            for (int shuffle = 0; shuffle < 2; shuffle++) {
                for (int drop_last = 0; drop_last < 2; drop_last++) {
                    for (size_t si = 0; si < 2; si++) {
                        for (uint64_t epoch = 0; epoch < 4; epoch += 3) {
                            uint64_t w = (uint64_t)world;
                            uint64_t want_len = drop_last ? n / w : (n + w - 1) / w;
                            long *hist = xcalloc((size_t)n, sizeof *hist);
                            for (int64_t rank = 0; rank < world; rank++) {
                                ferry_distributed_opts o = {.n = n,
                                                            .rank = rank,
                                                            .world_size = world,
                                                            .shuffle = shuffle,
                                                            .seed = dseeds[si],
                                                            .drop_last = drop_last};
                                ferry_sampler *s = NULL;
                                CHECK_OK(ferry_sampler_distributed(&s, &o));
                                CHECK(!strcmp(ferry_sampler_kind(s), "distributed"));
                                CHECK_OK(ferry_sampler_set_epoch(s, epoch));
                                CHECK_U64(ferry_sampler_len(s), want_len);
                                uint64_t num;
                                uint64_t *ref = pytorch_dist(n, w, (uint64_t)rank, shuffle,
                                                             dseeds[si], epoch, drop_last, &num);
                                CHECK_U64(num, want_len);
                                uint64_t *v = read_all(s);
                                for (uint64_t p = 0; p < want_len; p++) {
                                    if (v[p] != ref[p])
                                        test_fail(__FILE__, __LINE__,
                                                  "n %llu world %lld rank %lld shuffle %d "
                                                  "drop_last %d seed %llu epoch %llu: position "
                                                  "%llu is %llu, PyTorch has %llu",
                                                  (unsigned long long)n, (long long)world,
                                                  (long long)rank, shuffle, drop_last,
                                                  (unsigned long long)dseeds[si],
                                                  (unsigned long long)epoch, (unsigned long long)p,
                                                  (unsigned long long)v[p],
                                                  (unsigned long long)ref[p]);
                                    CHECK(v[p] < n);
                                    hist[v[p]]++;
                                }
                                free(v);
                                free(ref);
                                ferry_sampler_free(s);
                            }
                            /* Over all ranks: every index, padding repeating the first
                             * (total - n) of the order once; with drop_last, disjoint. */
                            uint64_t total = want_len * w, covered = 0, drawn = 0;
                            for (uint64_t i = 0; i < n; i++) {
                                covered += hist[i] > 0;
                                drawn += (uint64_t)hist[i];
                                if (drop_last)
                                    CHECK(hist[i] <= 1);
                                else
                                    CHECK(hist[i] >= 1);
                            }
                            CHECK_U64(drawn, total);
                            if (drop_last)
                                CHECK_U64(covered, total);
                            else
                                CHECK_U64(covered, n);
                            free(hist);
                        }
                    }
                }
            }
        }
    }
}

TEST(distributed_shuffle_changes_with_epoch)
{
    ferry_distributed_opts o = {.n = 1000, .rank = 1, .world_size = 3, .shuffle = 1, .seed = 8};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    uint64_t len = ferry_sampler_len(s);
    CHECK_U64(len, 334);
    uint64_t *a = read_all(s);
    CHECK_OK(ferry_sampler_set_epoch(s, 1));
    uint64_t *b = read_all(s);
    CHECK(!same_order(a, b, len));
    free(a);
    free(b);
    ferry_sampler_free(s);
    /* Unshuffled: the same every epoch, rank + k * world. */
    o.shuffle = 0;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    CHECK_OK(ferry_sampler_set_epoch(s, 9));
    for (uint64_t p = 0; p < 333; p++)
        CHECK_U64(ferry_sampler_at(s, p), 1 + 3 * p);
    CHECK_U64(ferry_sampler_at(s, 333), (1 + 3 * 333) % 1000);
    ferry_sampler_free(s);
}

TEST(distributed_invalid_rank_and_world)
{
    ferry_distributed_opts o = {.n = 10, .rank = 3, .world_size = 3};
    ferry_sampler *s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "rank");
    o.rank = 100;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    o.rank = 0;
    o.world_size = 0;
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "world_size");
    o.world_size = ((int64_t)1 << 31) + 1;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    o.world_size = (int64_t)1 << 31;
    o.rank = ((int64_t)1 << 31) - 1;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    CHECK_U64(ferry_sampler_len(s), 1);
    CHECK_U64(ferry_sampler_at(s, 0), (((uint64_t)1 << 31) - 1) % 10);
    ferry_sampler_free(s);
}

/* ---- the environment ---- */

static void clear_dist_env(void)
{
    static const char *vars[] = {
        "RANK",         "WORLD_SIZE",  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "SLURM_PROCID", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

TEST(dist_env_none_set)
{
    clear_dist_env();
    int64_t rank = 99, world = 99;
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 0);
    CHECK_EQ(world, 1);
}

TEST(dist_env_each_launcher_and_precedence)
{
    clear_dist_env();
    int64_t rank, world;
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 5);
    CHECK_EQ(world, 8);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 2);
    CHECK_EQ(world, 4);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 0);
    CHECK_EQ(world, 2);
    /* torchrun alone; Open MPI alone. */
    clear_dist_env();
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "7", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 3);
    CHECK_EQ(world, 7);
    clear_dist_env();
    setenv("OMPI_COMM_WORLD_RANK", "6", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "7", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 6);
    CHECK_EQ(world, 7);
    /* The extremes of the range. */
    clear_dist_env();
    setenv("RANK", "2147483647", 1);
    setenv("WORLD_SIZE", "2147483648", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 2147483647);
    CHECK_EQ(world, 2147483648);
}

static void expect_env_error(const char *rank_var, const char *rank_val, const char *world_var,
                             const char *world_val, const char *named, int line)
{
    clear_dist_env();
    if (rank_val)
        setenv(rank_var, rank_val, 1);
    if (world_val)
        setenv(world_var, world_val, 1);
    ferry__err_clear();
    int64_t rank = 0, world = 0;
    int rc = ferry_dist_from_env(&rank, &world);
    if (rc != FERRY_EINVAL)
        test_fail(__FILE__, line, "%s=%s%s%s %s=%s%s%s: rc %d (%s), wanted FERRY_EINVAL", rank_var,
                  rank_val ? "\"" : "", rank_val ? rank_val : "(unset)", rank_val ? "\"" : "",
                  world_var, world_val ? "\"" : "", world_val ? world_val : "(unset)",
                  world_val ? "\"" : "", rc, ferry_errname(rc));
    if (!strstr(ferry_last_errmsg(), named))
        test_fail(__FILE__, line, "message \"%s\" does not name %s", ferry_last_errmsg(), named);
}

TEST(dist_env_rejects_bad_values)
{
    static const char *const pairs[][2] = {
        {"RANK", "WORLD_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
    };
    static const char *const junk[] = {"abc", "3x", "", "1.5", "--1", "1 2", "0x"};
    for (size_t i = 0; i < 3; i++) {
        const char *rv = pairs[i][0], *wv = pairs[i][1];
        for (size_t j = 0; j < sizeof junk / sizeof junk[0]; j++) {
            expect_env_error(rv, "0", wv, junk[j], wv, __LINE__);
            expect_env_error(rv, junk[j], wv, "4", rv, __LINE__);
        }
        /* Out of range. */
        expect_env_error(rv, "0", wv, "0", wv, __LINE__);
        expect_env_error(rv, "0", wv, "-2", wv, __LINE__);
        expect_env_error(rv, "0", wv, "2147483649", wv, __LINE__);
        expect_env_error(rv, "0", wv, "99999999999999999999999", wv, __LINE__);
        expect_env_error(rv, "4", wv, "4", rv, __LINE__);
        expect_env_error(rv, "-1", wv, "4", rv, __LINE__);
        expect_env_error(rv, "99999999999999999999999", wv, "4", rv, __LINE__);
        /* Only one of the pair: the message names the missing one. */
        expect_env_error(rv, "1", wv, NULL, wv, __LINE__);
        expect_env_error(rv, NULL, wv, "4", rv, __LINE__);
    }
    /* A half-set preferred pair is an error even when a later pair is complete. */
    clear_dist_env();
    setenv("RANK", "1", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    int64_t rank, world;
    CHECK_RC(ferry_dist_from_env(&rank, &world), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "WORLD_SIZE");
}

/* Leading whitespace is not part of a number: not a space, nor a tab or a newline. */
TEST(dist_env_rejects_leading_whitespace)
{
    static const char *const spaced[] = {" 1", "\t1", "\n1", "\v1", "\r1"};
    for (size_t j = 0; j < sizeof spaced / sizeof spaced[0]; j++) {
        expect_env_error("RANK", spaced[j], "WORLD_SIZE", "4", "RANK", __LINE__);
        expect_env_error("RANK", "0", "WORLD_SIZE", spaced[j], "WORLD_SIZE", __LINE__);
    }
}

/* Launchers write decimal; a leading zero must not switch to octal ("010" is ten). */
TEST(dist_env_leading_zero_is_decimal)
{
    clear_dist_env();
    int64_t rank = -1, world = -1;
    setenv("RANK", "010", 1);
    setenv("WORLD_SIZE", "16", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 10);
    CHECK_EQ(world, 16);
    setenv("RANK", "09", 1);
    CHECK_OK(ferry_dist_from_env(&rank, &world));
    CHECK_EQ(rank, 9);
}

TEST(distributed_reads_environment)
{
    clear_dist_env();
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "3", 1);
    ferry_distributed_opts o = {.n = 10, .rank = -1, .world_size = -1};
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    CHECK_U64(ferry_sampler_len(s), 4);
    const uint64_t want[4] = {2, 5, 8, 1}; /* 11 wraps to 1 */
    for (uint64_t p = 0; p < 4; p++)
        CHECK_U64(ferry_sampler_at(s, p), want[p]);
    ferry_sampler_free(s);
    /* An explicit world size with the rank from the environment, and the reverse. */
    o.world_size = 4;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    CHECK_U64(ferry_sampler_len(s), 3);
    CHECK_U64(ferry_sampler_at(s, 0), 2);
    CHECK_U64(ferry_sampler_at(s, 1), 6);
    ferry_sampler_free(s);
    o.rank = 1;
    o.world_size = -1;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    CHECK_U64(ferry_sampler_len(s), 4);
    CHECK_U64(ferry_sampler_at(s, 0), 1);
    CHECK_U64(ferry_sampler_at(s, 1), 4);
    ferry_sampler_free(s);
    /* The environment's rank need not fit an explicit, smaller world. */
    o.rank = -1;
    o.world_size = 2;
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    CHECK(s == NULL);
    /* A bad environment fails the constructor, naming the variable. */
    setenv("WORLD_SIZE", "three", 1);
    o.world_size = -1;
    s = (ferry_sampler *)&s;
    CHECK_RC(ferry_sampler_distributed(&s, &o), FERRY_EINVAL);
    CHECK(s == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "WORLD_SIZE");
    /* Nothing set: rank 0 of 1, the whole order. */
    clear_dist_env();
    o.shuffle = 1;
    o.seed = 4;
    CHECK_OK(ferry_sampler_distributed(&s, &o));
    uint64_t *v = read_all(s);
    check_permutation(v, ferry_sampler_len(s), 10);
    free(v);
    ferry_sampler_free(s);
}

/* ---- batches and ranges ---- */

TEST(batch_count_and_positions)
{
    CHECK_U64(ferry_batch_count(10, 3, 0), 4);
    CHECK_U64(ferry_batch_count(10, 3, 1), 3);
    CHECK_U64(ferry_batch_count(9, 3, 0), 3);
    CHECK_U64(ferry_batch_count(9, 3, 1), 3);
    CHECK_U64(ferry_batch_count(2, 3, 0), 1);
    CHECK_U64(ferry_batch_count(2, 3, 1), 0);
    CHECK_U64(ferry_batch_count(0, 3, 0), 0);
    CHECK_U64(ferry_batch_count(10, 0, 0), 0);
    CHECK_U64(ferry_batch_count(UINT64_MAX, 1, 0), UINT64_MAX);
    CHECK_U64(ferry_batch_count(UINT64_MAX, 2, 0), ((uint64_t)1 << 63));
    CHECK_U64(ferry_batch_count(UINT64_MAX, 2, 1), ((uint64_t)1 << 63) - 1);

    uint64_t first = 77, count = 77;
    CHECK_OK(ferry_batch_positions(10, 3, 0, 3, &first, &count));
    CHECK_U64(first, 9);
    CHECK_U64(count, 1);
    CHECK_RC(ferry_batch_positions(10, 3, 1, 3, &first, &count), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "batch 3");
    CHECK_RC(ferry_batch_positions(10, 3, 0, 4, &first, &count), FERRY_ERANGE);
    CHECK_RC(ferry_batch_positions(0, 3, 0, 0, &first, &count), FERRY_ERANGE);
    CHECK_RC(ferry_batch_positions(10, 0, 0, 0, &first, &count), FERRY_ERANGE);
    CHECK_RC(ferry_batch_positions(10, 3, 0, UINT64_MAX, &first, &count), FERRY_ERANGE);

    /* Batches tile the epoch in order: consecutive, full but for the last. */
    for (uint64_t len = 0; len <= 40; len++) {
        for (uint64_t bs = 1; bs <= 12; bs++) {
            for (int drop = 0; drop < 2; drop++) {
                uint64_t nb = ferry_batch_count(len, bs, drop), next = 0;
                for (uint64_t k = 0; k < nb; k++) {
                    CHECK_OK(ferry_batch_positions(len, bs, drop, k, &first, &count));
                    CHECK_U64(first, next);
                    CHECK(count >= 1 && count <= bs);
                    if (drop || k + 1 < nb)
                        CHECK_U64(count, bs);
                    next = first + count;
                }
                CHECK_U64(next, drop ? len / bs * bs : len);
                CHECK_RC(ferry_batch_positions(len, bs, drop, nb, &first, &count), FERRY_ERANGE);
            }
        }
    }
}

TEST(sampler_fill_range_error)
{
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_sequential(&s, 10));
    uint64_t out[16];
    for (int i = 0; i < 16; i++)
        out[i] = 12345;
    CHECK_RC(ferry_sampler_fill(s, 8, 3, out), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "sequential");
    CHECK_RC(ferry_sampler_fill(s, 11, 0, out), FERRY_ERANGE);
    CHECK_RC(ferry_sampler_fill(s, 0, 11, out), FERRY_ERANGE);
    CHECK_RC(ferry_sampler_fill(s, 5, UINT64_MAX, out), FERRY_ERANGE);
    CHECK_RC(ferry_sampler_fill(s, UINT64_MAX, 2, out), FERRY_ERANGE);
    CHECK_OK(ferry_sampler_fill(s, 10, 0, out));
    CHECK_OK(ferry_sampler_fill(s, 7, 3, out));
    CHECK_U64(out[0], 7);
    CHECK_U64(out[2], 9);
    CHECK_U64(out[3], 12345); /* nothing past count is written */
    CHECK_U64(ferry_sampler_at(s, 10), UINT64_MAX);
    CHECK_U64(ferry_sampler_at(s, UINT64_MAX), UINT64_MAX);
    ferry_sampler_free(s);

    /* Every kind checks the same way. */
    const double w[3] = {1, 2, 3};
    const uint64_t idx[3] = {4, 5, 6};
    ferry_distributed_opts o = {.n = 10, .rank = 0, .world_size = 2};
    ferry_sampler *all[5];
    CHECK_OK(ferry_sampler_random(&all[0], 10, 1, 0, 0));
    CHECK_OK(ferry_sampler_random(&all[1], 10, 1, 1, 4));
    CHECK_OK(ferry_sampler_subset_random(&all[2], idx, 3, 1));
    CHECK_OK(ferry_sampler_weighted(&all[3], w, 3, 2, 0, 1));
    CHECK_OK(ferry_sampler_distributed(&all[4], &o));
    for (int i = 0; i < 5; i++) {
        uint64_t len = ferry_sampler_len(all[i]);
        CHECK_RC(ferry_sampler_fill(all[i], len, 1, out), FERRY_ERANGE);
        CHECK_CONTAINS(ferry_last_errmsg(), ferry_sampler_kind(all[i]));
        CHECK_RC(ferry_sampler_fill(all[i], 1, len, out), FERRY_ERANGE);
        CHECK_OK(ferry_sampler_fill(all[i], 1, len - 1, out));
        CHECK_U64(ferry_sampler_at(all[i], len), UINT64_MAX);
        ferry_sampler_free(all[i]);
    }
}

/* ---- allocation failure in the constructors ---- */

typedef int (*make_fn)(ferry_sampler **out);

static const double oom_w[6] = {1, 0, 2, 3, 0.5, 4};
static const uint64_t oom_idx[4] = {10, 20, 30, 40};

static int make_sequential(ferry_sampler **out)
{
    return ferry_sampler_sequential(out, 100);
}
static int make_random(ferry_sampler **out)
{
    return ferry_sampler_random(out, 100, 1, 0, 0);
}
static int make_random_repl(ferry_sampler **out)
{
    return ferry_sampler_random(out, 100, 1, 1, 50);
}
static int make_subset(ferry_sampler **out)
{
    return ferry_sampler_subset_random(out, oom_idx, 4, 1);
}
static int make_weighted_repl(ferry_sampler **out)
{
    return ferry_sampler_weighted(out, oom_w, 6, 100, 1, 1);
}
static int make_weighted_norepl(ferry_sampler **out)
{
    return ferry_sampler_weighted(out, oom_w, 6, 3, 0, 1);
}
static int make_distributed(ferry_sampler **out)
{
    ferry_distributed_opts o = {.n = 100, .rank = 1, .world_size = 3, .shuffle = 1};
    return ferry_sampler_distributed(out, &o);
}

static long walk_oom(make_fn make, const char *what)
{
    long k;
    for (k = 0;; k++) {
        ferry_sampler *s = (ferry_sampler *)&s;
        ferry__test_fail_alloc(k);
        int rc = make(&s);
        long seen = ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK(s != NULL);
            CHECK(seen <= k);
            uint64_t len = ferry_sampler_len(s);
            CHECK(len > 0);
            CHECK(ferry_sampler_at(s, len - 1) != UINT64_MAX);
            ferry_sampler_free(s);
            break;
        }
        if (rc != FERRY_ENOMEM || s != NULL)
            test_fail(__FILE__, __LINE__, "%s, allocation %ld failing: rc %d (%s), out %p", what, k,
                      rc, ferry_errname(rc), (void *)s);
        CHECK(k < 100);
    }
    return k;
}

TEST(oom_sampler_constructors)
{
    CHECK(walk_oom(make_sequential, "sequential") >= 1);
    CHECK(walk_oom(make_random, "random") >= 1);
    CHECK(walk_oom(make_random_repl, "random with replacement") >= 1);
    CHECK(walk_oom(make_subset, "subset") >= 2);
    CHECK(walk_oom(make_weighted_repl, "weighted with replacement") >= 2);
    CHECK(walk_oom(make_weighted_norepl, "weighted without replacement") >= 2);
    CHECK(walk_oom(make_distributed, "distributed") >= 1);
}

/* Weighted without replacement builds each epoch's order in set_epoch: a failure
 * there leaves the sampler on its previous epoch, still usable. */
TEST(oom_weighted_set_epoch)
{
    ferry_sampler *s;
    CHECK_OK(ferry_sampler_weighted(&s, oom_w, 6, 0, 0, 1));
    uint64_t *e0 = read_all(s);
    uint64_t len = ferry_sampler_len(s);
    for (long k = 0; k < 2; k++) {
        ferry__test_fail_alloc(k);
        int rc = ferry_sampler_set_epoch(s, 1);
        ferry__test_fail_alloc(-1);
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK_U64(ferry_sampler_epoch(s), 0);
        uint64_t *v = read_all(s);
        CHECK(same_order(e0, v, len));
        free(v);
    }
    CHECK_OK(ferry_sampler_set_epoch(s, 1));
    CHECK_U64(ferry_sampler_epoch(s), 1);
    free(e0);
    ferry_sampler_free(s);
}
