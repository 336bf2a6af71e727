/*
 * Core: status codes and messages, version, dtypes and tensors, Philox and the
 * per-sample generator, the thread pool, the bounded queue, and allocation failure.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "core/internal.h"
#include "io/io.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- Philox4x32-10: Random123's kat_vectors ---- */

TEST(philox_known_answers)
{
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4] = {0};
        ferry_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            CHECK_U64(out[j], kat[i].want[j]);
    }
}

TEST(philox_every_input_word_matters)
{
    const uint32_t ctr[4] = {1, 2, 3, 4}, key[2] = {5, 6};
    uint32_t a[4], b[4];
    ferry_philox4x32_10(ctr, key, a);
    ferry_philox4x32_10(ctr, key, b);
    CHECK(!memcmp(a, b, sizeof a));
    /* A one-bit change in any counter or key word changes every output word. */
    for (int w = 0; w < 6; w++) {
        uint32_t c2[4] = {1, 2, 3, 4}, k2[2] = {5, 6};
        if (w < 4)
            c2[w] ^= 1u << (w * 7);
        else
            k2[w - 4] ^= 1u << 31;
        ferry_philox4x32_10(c2, k2, b);
        for (int j = 0; j < 4; j++)
            CHECK(a[j] != b[j]);
    }
}

/* ---- The per-sample generator ---- */

/* The stream is Philox blocks at ctr = (block, epoch, index lo, index hi), key = seed. */
TEST(rng_is_philox_at_documented_counter)
{
    const uint64_t seed = 0x0123456789abcdefull, epoch = 7, index = 0x1122334455667788ull;
    ferry_rng r;
    ferry_rng_init(&r, seed, epoch, index);
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (uint32_t block = 0; block < 3; block++) {
        const uint32_t ctr[4] = {block, (uint32_t)epoch, (uint32_t)index, (uint32_t)(index >> 32)};
        uint32_t want[4];
        ferry_philox4x32_10(ctr, key, want);
        for (int j = 0; j < 4; j++)
            CHECK_U64(ferry_rng_u32(&r), want[j]);
    }
}

static int count_equal_words(uint64_t s1, uint64_t e1, uint64_t i1, uint64_t s2, uint64_t e2,
                             uint64_t i2, int words)
{
    ferry_rng a, b;
    ferry_rng_init(&a, s1, e1, i1);
    ferry_rng_init(&b, s2, e2, i2);
    int same = 0;
    for (int k = 0; k < words; k++)
        same += ferry_rng_u32(&a) == ferry_rng_u32(&b);
    return same;
}

TEST(rng_same_inputs_same_stream)
{
    const uint64_t seeds[] = {0, 1, 42, UINT64_MAX};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        for (uint64_t e = 0; e < 3; e++) {
            for (uint64_t i = 0; i < 5; i++) {
                CHECK_EQ(count_equal_words(seeds[s], e, i, seeds[s], e, i, 64), 64);
                ferry_rng a, b;
                ferry_rng_init(&a, seeds[s], e, i);
                ferry_rng_init(&b, seeds[s], e, i);
                for (int k = 0; k < 20; k++) {
                    CHECK_U64(ferry_rng_u64(&a), ferry_rng_u64(&b));
                    CHECK_U64(ferry_rng_below(&a, 1000 + (uint64_t)k),
                              ferry_rng_below(&b, 1000 + (uint64_t)k));
                    CHECK(ferry_rng_uniform(&a) == ferry_rng_uniform(&b));
                }
            }
        }
    }
    /* A copy carries on exactly where the original is. */
    ferry_rng a;
    ferry_rng_init(&a, 9, 9, 9);
    (void)ferry_rng_u32(&a);
    ferry_rng b = a;
    for (int k = 0; k < 10; k++)
        CHECK_U64(ferry_rng_u32(&a), ferry_rng_u32(&b));
}

TEST(rng_different_inputs_differ)
{
    /* 64 random words agree by chance on about 64 / 2^32 positions: allow 1. */
    CHECK(count_equal_words(1, 0, 0, 1, 1, 0, 64) <= 1);                /* epoch */
    CHECK(count_equal_words(1, 0, 0, 1, 0, 1, 64) <= 1);                /* index */
    CHECK(count_equal_words(1, 0, 0, 2, 0, 0, 64) <= 1);                /* seed */
    CHECK(count_equal_words(1, 0, 1, 1, 0, 1ull << 32, 64) <= 1);       /* index high word */
    CHECK(count_equal_words(1, 0, 0, (1ull << 32) | 1, 0, 0, 64) <= 1); /* seed high word */
    CHECK(count_equal_words(0, 5, 3, 0, 3, 5, 64) <= 1);                /* epoch/index swapped */
    /* Consecutive draws of one stream differ from each other too. */
    ferry_rng r;
    ferry_rng_init(&r, 3, 0, 0);
    uint32_t prev = ferry_rng_u32(&r);
    int repeats = 0;
    for (int k = 0; k < 1000; k++) {
        uint32_t x = ferry_rng_u32(&r);
        repeats += x == prev;
        prev = x;
    }
    CHECK(repeats <= 1);
}

TEST(rng_epoch_is_modulo_2_32)
{
    /* Documented: epochs are taken modulo 2^32. */
    CHECK_EQ(count_equal_words(5, 3, 8, 5, 3 + (1ull << 32), 8, 16), 16);
}

TEST(rng_below_in_range)
{
    const uint64_t ns[] = {1,
                           2,
                           3,
                           7,
                           10,
                           1000,
                           1ull << 32,
                           (1ull << 32) + 1,
                           (1ull << 63) + 1,
                           UINT64_MAX - 1,
                           UINT64_MAX};
    ferry_rng r;
    ferry_rng_init(&r, 77, 0, 0);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int k = 0; k < 2000; k++)
            CHECK(ferry_rng_below(&r, ns[i]) < ns[i]);
    for (int k = 0; k < 100; k++) {
        CHECK_U64(ferry_rng_below(&r, 1), 0);
        CHECK_U64(ferry_rng_below(&r, 0), 0);
    }
    /* n = 3 * 2^62, where 2^64 / n = 4/3 exactly. Without rejection, "x % n" puts half
     * the results below n / 3 and Lemire's multiply puts half on multiples of 3; unbiased,
     * each is a third. */
    const uint64_t big = (uint64_t)3 << 62;
    int low = 0, mult3 = 0;
    for (int k = 0; k < 30000; k++) {
        uint64_t x = ferry_rng_below(&r, big);
        low += x < big / 3;
        mult3 += x % 3 == 0;
    }
    CHECK(low > 9400 && low < 10600);
    CHECK(mult3 > 9400 && mult3 < 10600);
}

TEST(rng_below_uniform_chi_square)
{
    enum { N = 10, DRAWS = 100000 };
    long counts[N] = {0};
    ferry_rng r;
    ferry_rng_init(&r, 2024, 1, 5);
    for (int k = 0; k < DRAWS; k++) {
        uint64_t x = ferry_rng_below(&r, N);
        CHECK(x < N);
        counts[x]++;
    }
    double expect = (double)DRAWS / N, chi2 = 0;
    for (int i = 0; i < N; i++)
        chi2 += (counts[i] - expect) * (counts[i] - expect) / expect;
    /* 9 degrees of freedom: P(chi2 > 40) is about 1e-5. */
    if (!(chi2 < 40))
        test_fail(__FILE__, __LINE__, "chi-square %.2f over 9 degrees of freedom", chi2);

    /* The same over many streams (one draw each), as the samplers use it. */
    long c2[N] = {0};
    for (uint64_t i = 0; i < DRAWS; i++) {
        ferry_rng s;
        ferry_rng_init(&s, 99, 0, i);
        c2[ferry_rng_below(&s, N)]++;
    }
    chi2 = 0;
    for (int i = 0; i < N; i++)
        chi2 += (c2[i] - expect) * (c2[i] - expect) / expect;
    if (!(chi2 < 40))
        test_fail(__FILE__, __LINE__, "per-index chi-square %.2f over 9 degrees of freedom", chi2);
}

TEST(rng_uniform_in_unit_interval)
{
    enum { DRAWS = 100000 };
    ferry_rng r;
    ferry_rng_init(&r, 5, 6, 7);
    double sum = 0, lo = 1, hi = 0;
    float sumf = 0, lof = 1, hif = 0;
    for (int k = 0; k < DRAWS; k++) {
        double u = ferry_rng_uniform(&r);
        CHECK(u >= 0.0 && u < 1.0);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        float f = ferry_rng_uniformf(&r);
        CHECK(f >= 0.0f && f < 1.0f);
        sumf += f;
        lof = f < lof ? f : lof;
        hif = f > hif ? f : hif;
    }
    /* The mean of 100k uniforms has a standard deviation of about 0.0009. */
    CHECK(fabs(sum / DRAWS - 0.5) < 0.01);
    CHECK(fabs(sumf / DRAWS - 0.5) < 0.01);
    CHECK(lo < 0.001 && hi > 0.999);
    CHECK(lof < 0.001f && hif > 0.999f);
}

TEST(hash64_mixes)
{
    CHECK_U64(ferry_hash64(1, 2), ferry_hash64(1, 2));
    CHECK(ferry_hash64(1, 2) != ferry_hash64(2, 1));
    CHECK(ferry_hash64(0, 0) != ferry_hash64(0, 1));
    CHECK(ferry_hash64(0, 0) != ferry_hash64(1, 0));
    /* Flipping one input bit flips about half the output bits. */
    int total = 0;
    for (int b = 0; b < 64; b++)
        total +=
            __builtin_popcountll(ferry_hash64(12345, 678) ^ ferry_hash64(12345 ^ (1ull << b), 678));
    CHECK(total > 64 * 24 && total < 64 * 40);
}

TEST(now_ns_is_monotonic)
{
    uint64_t a = ferry_now_ns();
    sleep_ms(2);
    uint64_t b = ferry_now_ns();
    CHECK(b >= a + 1000000);
    for (int i = 0; i < 1000; i++) {
        uint64_t c = ferry_now_ns();
        CHECK(c >= b);
        b = c;
    }
}

/* ---- Status codes, messages, version ---- */

TEST(strerror_and_errname_for_every_code)
{
    CHECK(FERRY_ERROR_MIN <= FERRY_EINVAL);
    for (int rc = FERRY_EINVAL; rc >= FERRY_ERROR_MIN; rc--) {
        const char *text = ferry_strerror(rc), *name = ferry_errname(rc);
        CHECK(text && *text);
        CHECK(name && *name);
        if (strstr(text, "unknown") || !strcmp(name, "FERRY_UNKNOWN"))
            test_fail(__FILE__, __LINE__, "code %d: \"%s\" / \"%s\"", rc, text, name);
        CHECK(!strncmp(name, "FERRY_E", 7));
        for (int other = FERRY_EINVAL; other > rc; other--) {
            if (!strcmp(text, ferry_strerror(other)) || !strcmp(name, ferry_errname(other)))
                test_fail(__FILE__, __LINE__, "codes %d and %d share \"%s\" / \"%s\"", rc, other,
                          text, name);
        }
    }
    CHECK(!strcmp(ferry_errname(FERRY_EINVAL), "FERRY_EINVAL"));
    CHECK(!strcmp(ferry_errname(FERRY_EOVERFLOW), "FERRY_EOVERFLOW"));
    CHECK(!strcmp(ferry_errname(FERRY_OK), "FERRY_OK"));
    CHECK(!strcmp(ferry_errname(FERRY_END), "FERRY_END"));
    CHECK(strcmp(ferry_strerror(FERRY_OK), ferry_strerror(FERRY_EINVAL)) != 0);
    CHECK(!strcmp(ferry_errname(FERRY_ERROR_MIN - 1), "FERRY_UNKNOWN"));
    CHECK(!strcmp(ferry_errname(-1000), "FERRY_UNKNOWN"));
    CHECK(!strcmp(ferry_errname(FERRY_BREAK), "FERRY_BREAK"));
    CHECK(!strcmp(ferry_errname(3), "FERRY_UNKNOWN"));
    CHECK(ferry_strerror(FERRY_ERROR_MIN - 1) != NULL);
}

TEST(ferry_error_sets_message)
{
    CHECK(ferry_last_errmsg() != NULL);
    int rc = ferry_error(FERRY_ECORRUPT, "%s: line %d: bad", "data.csv", 17);
    CHECK_EQ(rc, FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(), "data.csv: line 17: bad"));
    CHECK_EQ(ferry_error(FERRY_EIO, "second"), FERRY_EIO);
    CHECK(!strcmp(ferry_last_errmsg(), "second"));
    /* The current message may be one of the arguments. */
    CHECK_EQ(ferry_error(FERRY_EIO, "outer: %s", ferry_last_errmsg()), FERRY_EIO);
    CHECK(!strcmp(ferry_last_errmsg(), "outer: second"));
    /* Long messages are cut to 511 bytes. */
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_EQ(ferry_error(FERRY_EINVAL, "%s", big), FERRY_EINVAL);
    CHECK_EQ(strlen(ferry_last_errmsg()), 511);
}

static void *errmsg_thread(void *arg)
{
    ferry_error(FERRY_EIO, "from the other thread");
    *(int *)arg = !strcmp(ferry_last_errmsg(), "from the other thread");
    return NULL;
}

TEST(errmsg_is_per_thread)
{
    ferry_error(FERRY_EINVAL, "main thread");
    pthread_t t;
    int ok = 0;
    CHECK_EQ(pthread_create(&t, NULL, errmsg_thread, &ok), 0);
    pthread_join(t, NULL);
    CHECK(ok);
    CHECK(!strcmp(ferry_last_errmsg(), "main thread"));
}

TEST(version_matches_macros)
{
    CHECK_EQ(ferry_version_number(), FERRY_VERSION_NUMBER);
    CHECK(!strcmp(ferry_version_string(), FERRY_VERSION_STRING));
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
             FERRY_VERSION_PATCH);
    CHECK(!strcmp(ferry_version_string(), buf));
    CHECK_EQ(ferry_version_number(),
             FERRY_VERSION_MAJOR * 10000 + FERRY_VERSION_MINOR * 100 + FERRY_VERSION_PATCH);
}

/* ---- dtypes ---- */

TEST(dtype_round_trip)
{
    static const struct {
        ferry_dtype dt;
        size_t size;
        const char *name, *short_name;
    } want[] = {
        {FERRY_U8, 1, "uint8", "u8"},     {FERRY_I8, 1, "int8", "i8"},
        {FERRY_U16, 2, "uint16", "u16"},  {FERRY_I16, 2, "int16", "i16"},
        {FERRY_U32, 4, "uint32", "u32"},  {FERRY_I32, 4, "int32", "i32"},
        {FERRY_U64, 8, "uint64", "u64"},  {FERRY_I64, 8, "int64", "i64"},
        {FERRY_F16, 2, "float16", "f16"}, {FERRY_BF16, 2, "bfloat16", "bf16"},
        {FERRY_F32, 4, "float32", "f32"}, {FERRY_F64, 8, "float64", "f64"},
        {FERRY_BOOL, 1, "bool", "bool"},
    };
    CHECK_EQ(sizeof want / sizeof want[0], FERRY_DTYPE_COUNT - 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ferry_dtype dt = want[i].dt;
        CHECK_EQ(ferry_dtype_size(dt), want[i].size);
        CHECK(!strcmp(ferry_dtype_name(dt), want[i].name));
        CHECK_EQ(ferry_dtype_from_name(ferry_dtype_name(dt)), dt);
        CHECK_EQ(ferry_dtype_from_name(want[i].short_name), dt);
    }
    /* Every valid dtype has a distinct name. */
    for (int a = 1; a < FERRY_DTYPE_COUNT; a++)
        for (int b = 1; b < a; b++)
            CHECK(strcmp(ferry_dtype_name((ferry_dtype)a), ferry_dtype_name((ferry_dtype)b)));
    CHECK_EQ(ferry_dtype_size(FERRY_DTYPE_INVALID), 0);
    CHECK_EQ(ferry_dtype_size(FERRY_DTYPE_COUNT), 0);
    CHECK_EQ(ferry_dtype_size((ferry_dtype)-1), 0);
    CHECK(!strcmp(ferry_dtype_name(FERRY_DTYPE_INVALID), "invalid"));
    CHECK(!strcmp(ferry_dtype_name(FERRY_DTYPE_COUNT), "invalid"));
    CHECK(!strcmp(ferry_dtype_name((ferry_dtype)-3), "invalid"));
    CHECK_EQ(ferry_dtype_from_name("invalid"), FERRY_DTYPE_INVALID);
    CHECK_EQ(ferry_dtype_from_name("float"), FERRY_DTYPE_INVALID);
    CHECK_EQ(ferry_dtype_from_name("Float32"), FERRY_DTYPE_INVALID);
    CHECK_EQ(ferry_dtype_from_name(""), FERRY_DTYPE_INVALID);
    CHECK_EQ(ferry_dtype_from_name(NULL), FERRY_DTYPE_INVALID);
}

/* ---- tensors ---- */

TEST(tensor_alloc_zeroed_aligned_contiguous)
{
    const int64_t shape[3] = {3, 5, 7};
    ferry_tensor t;
    memset(&t, 0xab, sizeof t);
    CHECK_OK(ferry_tensor_alloc(&t, FERRY_F32, 3, shape));
    CHECK(t.data != NULL);
    CHECK_U64((uintptr_t)t.data % 64, 0);
    CHECK_EQ(t.dtype, FERRY_F32);
    CHECK_EQ(t.ndim, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(t.shape[i], shape[i]);
    CHECK_EQ(t.strides[0], 5 * 7 * 4);
    CHECK_EQ(t.strides[1], 7 * 4);
    CHECK_EQ(t.strides[2], 4);
    CHECK_EQ(ferry_tensor_numel(&t), 105);
    CHECK_EQ(ferry_tensor_nbytes(&t), 420);
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 1);
    CHECK(t.release != NULL);
    const unsigned char *b = t.data;
    for (size_t i = 0; i < 420; i++)
        CHECK_EQ(b[i], 0);
    memset(t.data, 0xff, 420); /* the whole span is writable (ASan checks bounds) */
    ferry_tensor_release(&t);
    /* Memory handed back dirty and likely reused: zeroed again. */
    for (int round = 0; round < 4; round++) {
        CHECK_OK(ferry_tensor_alloc(&t, FERRY_F32, 3, shape));
        b = t.data;
        for (size_t i = 0; i < 420; i++)
            CHECK_EQ(b[i], 0);
        memset(t.data, 0xff, 420);
        ferry_tensor_release(&t);
    }
    CHECK(t.data == NULL);
    CHECK(t.release == NULL);
    CHECK(t.owner == NULL);
    CHECK_EQ(t.ndim, 0);
    CHECK_EQ(t.dtype, FERRY_DTYPE_INVALID);
    ferry_tensor_release(&t); /* cleared tensors are fine */
    ferry_tensor_release(NULL);

    /* Every dtype, and a scalar (ndim 0). */
    for (int dt = 1; dt < FERRY_DTYPE_COUNT; dt++) {
        const int64_t s2[2] = {4, 9};
        CHECK_OK(ferry_tensor_alloc(&t, (ferry_dtype)dt, 2, s2));
        CHECK_U64((uintptr_t)t.data % 64, 0);
        CHECK_EQ(t.strides[1], (int64_t)ferry_dtype_size((ferry_dtype)dt));
        CHECK_EQ(ferry_tensor_nbytes(&t), 36 * ferry_dtype_size((ferry_dtype)dt));
        ferry_tensor_release(&t);
    }
    CHECK_OK(ferry_tensor_alloc(&t, FERRY_F64, 0, NULL));
    CHECK_EQ(ferry_tensor_numel(&t), 1);
    CHECK_EQ(ferry_tensor_nbytes(&t), 8);
    CHECK_EQ(*(double *)t.data, 0.0);
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 1);
    ferry_tensor_release(&t);
}

/* A tensor with no elements is contiguous (NumPy and PyTorch say so, and
 * ferry_tensor_alloc promises a contiguous tensor), wherever the zero is. */
TEST(tensor_alloc_zero_size_is_contiguous)
{
    const int64_t shapes[][3] = {{0, 3, 2}, {3, 0, 2}, {3, 2, 0}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ferry_tensor t;
        CHECK_OK(ferry_tensor_alloc(&t, FERRY_I32, 3, shapes[i]));
        CHECK_EQ(ferry_tensor_numel(&t), 0);
        CHECK_EQ(ferry_tensor_nbytes(&t), 0);
        int contiguous = ferry_tensor_is_contiguous(&t);
        ferry_tensor_release(&t);
        if (contiguous != 1)
            test_fail(__FILE__, __LINE__,
                      "alloc'd shape {%lld, %lld, %lld}: ferry_tensor_is_contiguous = %d",
                      (long long)shapes[i][0], (long long)shapes[i][1], (long long)shapes[i][2],
                      contiguous);
    }
}

static int release_calls;
static void *release_owner;
static void count_release(void *owner)
{
    release_calls++;
    release_owner = owner;
}

TEST(tensor_wrap_strides_and_ownership)
{
    float buf[12];
    for (int i = 0; i < 12; i++)
        buf[i] = (float)i;
    const int64_t shape[2] = {3, 4};
    ferry_tensor t;
    CHECK_OK(ferry_tensor_wrap(&t, buf, FERRY_F32, 2, shape, NULL));
    CHECK(t.data == buf);
    CHECK_EQ(t.strides[0], 16);
    CHECK_EQ(t.strides[1], 4);
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 1);
    CHECK(t.release == NULL && t.owner == NULL);
    ferry_tensor_release(&t); /* borrowed: must not free the stack buffer */
    CHECK(t.data == NULL);
    CHECK_EQ(buf[11], 11.0f);

    /* A transposed view of a 4x3 array. */
    const int64_t tshape[2] = {3, 4}, tstrides[2] = {4, 12};
    CHECK_OK(ferry_tensor_wrap(&t, buf, FERRY_F32, 2, tshape, tstrides));
    CHECK_EQ(t.strides[0], 4);
    CHECK_EQ(t.strides[1], 12);
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 0);
    CHECK_EQ(ferry_tensor_numel(&t), 12);
    ferry_tensor_release(&t);

    /* Every other row: not contiguous. */
    const int64_t sshape[2] = {2, 4}, sstrides[2] = {32, 4};
    CHECK_OK(ferry_tensor_wrap(&t, buf, FERRY_F32, 2, sshape, sstrides));
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 0);
    ferry_tensor_release(&t);

    /* The stride of a dimension of size 1 does not matter. */
    const int64_t oshape[2] = {1, 4}, ostrides[2] = {999, 4};
    CHECK_OK(ferry_tensor_wrap(&t, buf, FERRY_F32, 2, oshape, ostrides));
    CHECK_EQ(ferry_tensor_is_contiguous(&t), 1);

    /* A release hook set by the caller runs once, with its owner. */
    int owner_token;
    t.owner = &owner_token;
    t.release = count_release;
    ferry_tensor_release(&t);
    CHECK_EQ(release_calls, 1);
    CHECK(release_owner == &owner_token);
    ferry_tensor_release(&t);
    CHECK_EQ(release_calls, 1);
}

TEST(tensor_invalid_arguments)
{
    ferry_tensor t;
    float buf[4];
    const int64_t neg[2] = {3, -1};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_F32, 2, neg), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shape[1]");
    CHECK_RC(ferry_tensor_wrap(&t, buf, FERRY_F32, 2, neg, NULL), FERRY_EINVAL);
    const int64_t ok[2] = {2, 2};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_DTYPE_INVALID, 2, ok), FERRY_EINVAL);
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_DTYPE_COUNT, 2, ok), FERRY_EINVAL);
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_F32, -1, ok), FERRY_EINVAL);
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_F32, FERRY_MAX_DIMS + 1, ok), FERRY_EINVAL);
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_F32, 2, NULL), FERRY_EINVAL);
    CHECK_RC(ferry_tensor_wrap(&t, buf, FERRY_F32, FERRY_MAX_DIMS + 1, ok, NULL), FERRY_EINVAL);

    /* Byte sizes that do not fit in size_t. */
    const int64_t big[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_U8, 2, big), FERRY_EOVERFLOW);
    CHECK_RC(ferry_tensor_wrap(&t, buf, FERRY_U8, 2, big, NULL), FERRY_EOVERFLOW);
    const int64_t big2[2] = {INT64_MAX, 3};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_U8, 2, big2), FERRY_EOVERFLOW);
    const int64_t big3[1] = {(int64_t)1 << 62};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_F32, 1, big3), FERRY_EOVERFLOW);
    const int64_t big4[8] = {256, 256, 256, 256, 256, 256, 256, 256};
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_U8, 8, big4), FERRY_EOVERFLOW);
}

/* strides and numel are int64_t: a shape they cannot describe is FERRY_EOVERFLOW, even
 * when its byte size fits in size_t or is 0 because of a zero dimension. */
TEST(tensor_shapes_beyond_int64)
{
    ferry_tensor t;
    /* 2^63 + 2^32 bytes: fits in size_t, not in int64_t. */
    const int64_t wide[2] = {(int64_t)1 << 32, ((int64_t)1 << 31) + 1};
    CHECK_RC(ferry_tensor_wrap(&t, NULL, FERRY_U8, 2, wide, NULL), FERRY_EOVERFLOW);
    /* Empty, but the stride of dimension 0 would be 2^80. */
    const int64_t empty[4] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, 0};
    CHECK_RC(ferry_tensor_wrap(&t, NULL, FERRY_U8, 4, empty, NULL), FERRY_EOVERFLOW);
    CHECK_RC(ferry_tensor_alloc(&t, FERRY_U8, 4, empty), FERRY_EOVERFLOW);
    /* Empty, strides 2^40 (representable): either refused or described exactly. */
    const int64_t empty2[3] = {(int64_t)1 << 40, 0, (int64_t)1 << 40};
    int rc = ferry_tensor_wrap(&t, NULL, FERRY_U8, 3, empty2, NULL);
    if (rc != FERRY_EOVERFLOW) {
        CHECK_OK(rc);
        CHECK_EQ(ferry_tensor_numel(&t), 0);
        CHECK_EQ(t.strides[2], 1);
        CHECK_EQ(t.strides[0], (int64_t)1 << 40);
    }
}

/* ---- Thread pool ---- */

static void add_job(void *arg)
{
    atomic_fetch_add((atomic_long *)arg, 1);
}

TEST(pool_runs_every_job)
{
    ferry__pool *p = NULL;
    CHECK_OK(ferry__pool_create(&p, 4, 2));
    CHECK(p != NULL);
    CHECK_EQ(ferry__pool_threads(p), 4);
    atomic_long counter = 0;
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < 5000; i++)
            CHECK_OK(ferry__pool_add(p, add_job, &counter));
        ferry__pool_wait(p);
        CHECK_EQ(atomic_load(&counter), 5000L * round);
    }
    ferry__pool_free(p);
    ferry__pool_free(NULL);
}

typedef struct {
    atomic_int gate;
    atomic_int ran;
    atomic_int added;
    ferry__pool *pool;
    int total;
} gate_state;

static void gated_job(void *arg)
{
    gate_state *g = arg;
    while (!atomic_load(&g->gate))
        sleep_ms(1);
    atomic_fetch_add(&g->ran, 1);
}

static void *gate_adder(void *arg)
{
    gate_state *g = arg;
    for (int i = 0; i < g->total; i++) {
        if (ferry__pool_add(g->pool, gated_job, g) != 0)
            break;
        atomic_fetch_add(&g->added, 1);
    }
    return NULL;
}

/* One worker, a queue of two: with every job held at a gate, the adder can place at
 * most three (one running, two waiting) and must block on the fourth. */
TEST(pool_add_blocks_when_queue_full)
{
    gate_state g = {.total = 20};
    CHECK_OK(ferry__pool_create(&g.pool, 1, 2));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, gate_adder, &g), 0);
    uint64_t deadline = ferry_now_ns() + 5000000000ull;
    while (atomic_load(&g.added) < 2 && ferry_now_ns() < deadline)
        sleep_ms(1);
    CHECK(atomic_load(&g.added) >= 2);
    sleep_ms(50);
    int added = atomic_load(&g.added);
    CHECK(added >= 2 && added <= 3);
    CHECK_EQ(atomic_load(&g.ran), 0);
    atomic_store(&g.gate, 1);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&g.added), 20);
    ferry__pool_wait(g.pool);
    CHECK_EQ(atomic_load(&g.ran), 20);
    ferry__pool_free(g.pool);
}

static atomic_int free_gate;

static void gated_add_job(void *arg)
{
    while (!atomic_load(&free_gate))
        sleep_ms(1);
    atomic_fetch_add((atomic_long *)arg, 1);
}

TEST(pool_free_finishes_queued_jobs)
{
    ferry__pool *p;
    CHECK_OK(ferry__pool_create(&p, 1, 64));
    atomic_long counter = 0;
    /* The first job holds the only worker while the rest wait in the queue. */
    CHECK_OK(ferry__pool_add(p, gated_add_job, &counter));
    for (int i = 0; i < 40; i++)
        CHECK_OK(ferry__pool_add(p, add_job, &counter));
    sleep_ms(10);
    CHECK_EQ(atomic_load(&counter), 0);
    atomic_store(&free_gate, 1);
    ferry__pool_free(p);
    CHECK_EQ(atomic_load(&counter), 41);

    /* Several workers, no wait before free. */
    CHECK_OK(ferry__pool_create(&p, 4, 8));
    counter = 0;
    for (int i = 0; i < 1000; i++)
        CHECK_OK(ferry__pool_add(p, add_job, &counter));
    ferry__pool_free(p);
    CHECK_EQ(atomic_load(&counter), 1000);
}

TEST(pool_invalid_arguments)
{
    ferry__pool *p = (ferry__pool *)&p;
    CHECK_RC(ferry__pool_create(&p, 0, 4), FERRY_EINVAL);
    CHECK(p == NULL);
    p = (ferry__pool *)&p;
    CHECK_RC(ferry__pool_create(&p, 2, 0), FERRY_EINVAL);
    CHECK(p == NULL);
    CHECK_RC(ferry__pool_create(&p, 4097, 4), FERRY_EINVAL);
    CHECK_RC(ferry__pool_create(&p, 2, ((size_t)1 << 24) + 1), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "pool");
}

/* ---- Bounded queue ---- */

#define P(i) ((void *)(uintptr_t)(i))

TEST(queue_fifo_order)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 5));
    /* Several times round the ring, with the fill level varying. */
    uintptr_t next_in = 1, next_out = 1;
    for (int round = 0; round < 50; round++) {
        int fill = 1 + round % 5;
        for (int i = 0; i < fill; i++)
            CHECK_OK(ferry__queue_push(q, P(next_in++), 0));
        CHECK_EQ(ferry__queue_size(q), fill);
        int drain = fill - (round % 2);
        for (int i = 0; i < drain; i++) {
            void *item = NULL;
            CHECK_OK(ferry__queue_pop(q, &item, 0));
            CHECK_U64((uintptr_t)item, next_out++);
        }
        while (ferry__queue_size(q)) {
            void *item = NULL;
            CHECK_OK(ferry__queue_pop(q, &item, 0));
            CHECK_U64((uintptr_t)item, next_out++);
        }
    }
    CHECK_U64(next_in, next_out);
    ferry__queue_free(q);
    ferry__queue_free(NULL);
}

TEST(queue_timeouts)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 2));
    void *item = P(99);
    uint64_t deadline = ferry_now_ns() + 20000000ull;
    CHECK_RC(ferry__queue_pop(q, &item, deadline), FERRY_ETIMEDOUT);
    CHECK(ferry_now_ns() >= deadline);
    CHECK(item == P(99));
    CHECK_OK(ferry__queue_push(q, P(1), 0));
    CHECK_OK(ferry__queue_push(q, P(2), 0));
    deadline = ferry_now_ns() + 20000000ull;
    CHECK_RC(ferry__queue_push(q, P(3), deadline), FERRY_ETIMEDOUT);
    CHECK(ferry_now_ns() >= deadline);
    CHECK_EQ(ferry__queue_size(q), 2);
    /* A deadline already past does not block. */
    CHECK_RC(ferry__queue_push(q, P(3), 1), FERRY_ETIMEDOUT);
    /* With room or items, deadlines do not matter. */
    CHECK_OK(ferry__queue_pop(q, &item, 1));
    CHECK(item == P(1));
    CHECK_OK(ferry__queue_push(q, P(3), 1));
    CHECK_OK(ferry__queue_pop(q, &item, 0));
    CHECK(item == P(2));
    CHECK_OK(ferry__queue_pop(q, &item, 0));
    CHECK(item == P(3));
    ferry__queue_free(q);
}

typedef struct {
    ferry__queue *q;
    atomic_int done;
    int rc;
    void *item;
} q_waiter;

static void *blocked_pusher(void *arg)
{
    q_waiter *w = arg;
    w->rc = ferry__queue_push(w->q, w->item, 0);
    atomic_store(&w->done, 1);
    return NULL;
}

static void *blocked_popper(void *arg)
{
    q_waiter *w = arg;
    w->rc = ferry__queue_pop(w->q, &w->item, 0);
    atomic_store(&w->done, 1);
    return NULL;
}

TEST(queue_push_blocks_until_room)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 1));
    CHECK_OK(ferry__queue_push(q, P(1), 0));
    q_waiter w = {.q = q, .item = P(2)};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, blocked_pusher, &w), 0);
    sleep_ms(30);
    CHECK_EQ(atomic_load(&w.done), 0);
    void *item = NULL;
    CHECK_OK(ferry__queue_pop(q, &item, 0));
    CHECK(item == P(1));
    pthread_join(t, NULL);
    CHECK_EQ(w.rc, 0);
    CHECK_OK(ferry__queue_pop(q, &item, 0));
    CHECK(item == P(2));
    ferry__queue_free(q);
}

TEST(queue_close_drains_then_ends)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 4));
    CHECK_OK(ferry__queue_push(q, P(1), 0));
    CHECK_OK(ferry__queue_push(q, P(2), 0));
    CHECK_OK(ferry__queue_push(q, P(3), 0));
    ferry__queue_close(q);
    CHECK_RC(ferry__queue_push(q, P(4), 0), FERRY_ECANCELED);
    CHECK_EQ(ferry__queue_size(q), 3);
    void *item = NULL;
    for (uintptr_t i = 1; i <= 3; i++) {
        CHECK_OK(ferry__queue_pop(q, &item, 0));
        CHECK(item == P(i));
    }
    item = P(77);
    CHECK_RC(ferry__queue_pop(q, &item, 0), FERRY_END);
    CHECK_RC(ferry__queue_pop(q, &item, ferry_now_ns() + 1000000), FERRY_END);
    CHECK(item == P(77));
    CHECK_RC(ferry__queue_push(q, P(5), ferry_now_ns() + 1000000), FERRY_ECANCELED);
    ferry__queue_free(q);
}

TEST(queue_close_wakes_blocked_callers)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 1));
    q_waiter popper = {.q = q};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, blocked_popper, &popper), 0);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&popper.done), 0);
    ferry__queue_close(q);
    pthread_join(t, NULL);
    CHECK_RC(popper.rc, FERRY_END);
    ferry__queue_free(q);

    CHECK_OK(ferry__queue_create(&q, 1));
    CHECK_OK(ferry__queue_push(q, P(1), 0));
    q_waiter pusher = {.q = q, .item = P(2)};
    CHECK_EQ(pthread_create(&t, NULL, blocked_pusher, &pusher), 0);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&pusher.done), 0);
    ferry__queue_close(q);
    pthread_join(t, NULL);
    CHECK_RC(pusher.rc, FERRY_ECANCELED);
    void *item = NULL;
    CHECK_OK(ferry__queue_pop(q, &item, 0));
    CHECK(item == P(1));
    CHECK_RC(ferry__queue_pop(q, &item, 0), FERRY_END);
    ferry__queue_free(q);
}

enum { MP_PRODUCERS = 4, MP_CONSUMERS = 4, MP_ITEMS = 10000 };

typedef struct {
    ferry__queue *q;
    int id;
    int rc;
    uint64_t sum, count, xor_all;
} mp_arg;

static void *mp_producer(void *arg)
{
    mp_arg *a = arg;
    for (uint64_t i = 0; i < MP_ITEMS; i++) {
        uint64_t v = (uint64_t)a->id * MP_ITEMS + i + 1; /* never 0 */
        int rc = ferry__queue_push(a->q, P(v), 0);
        if (rc) {
            a->rc = rc;
            break;
        }
        a->sum += v;
        a->count++;
    }
    return NULL;
}

static void *mp_consumer(void *arg)
{
    mp_arg *a = arg;
    for (;;) {
        void *item = NULL;
        int rc = ferry__queue_pop(a->q, &item, 0);
        if (rc == FERRY_END)
            break;
        if (rc) {
            a->rc = rc;
            break;
        }
        a->sum += (uintptr_t)item;
        a->xor_all ^= (uintptr_t)item * 0x9E3779B97F4A7C15ull;
        a->count++;
    }
    return NULL;
}

TEST(queue_mpmc_sum)
{
    ferry__queue *q;
    CHECK_OK(ferry__queue_create(&q, 8));
    pthread_t pt[MP_PRODUCERS], ct[MP_CONSUMERS];
    mp_arg pa[MP_PRODUCERS], ca[MP_CONSUMERS];
    memset(pa, 0, sizeof pa);
    memset(ca, 0, sizeof ca);
    for (int i = 0; i < MP_CONSUMERS; i++) {
        ca[i].q = q;
        CHECK_EQ(pthread_create(&ct[i], NULL, mp_consumer, &ca[i]), 0);
    }
    for (int i = 0; i < MP_PRODUCERS; i++) {
        pa[i].q = q;
        pa[i].id = i;
        CHECK_EQ(pthread_create(&pt[i], NULL, mp_producer, &pa[i]), 0);
    }
    uint64_t pushed = 0, pushed_n = 0, want_xor = 0;
    for (int i = 0; i < MP_PRODUCERS; i++) {
        pthread_join(pt[i], NULL);
        CHECK_EQ(pa[i].rc, 0);
        pushed += pa[i].sum;
        pushed_n += pa[i].count;
    }
    ferry__queue_close(q);
    uint64_t popped = 0, popped_n = 0, got_xor = 0;
    for (int i = 0; i < MP_CONSUMERS; i++) {
        pthread_join(ct[i], NULL);
        CHECK_EQ(ca[i].rc, 0);
        popped += ca[i].sum;
        popped_n += ca[i].count;
        got_xor ^= ca[i].xor_all;
    }
    for (uint64_t v = 1; v <= (uint64_t)MP_PRODUCERS * MP_ITEMS; v++)
        want_xor ^= v * 0x9E3779B97F4A7C15ull;
    uint64_t total = (uint64_t)MP_PRODUCERS * MP_ITEMS;
    CHECK_U64(pushed_n, total);
    CHECK_U64(pushed, total * (total + 1) / 2);
    CHECK_U64(popped_n, total);
    CHECK_U64(popped, pushed);
    CHECK_U64(got_xor, want_xor);
    CHECK_EQ(ferry__queue_size(q), 0);
    ferry__queue_free(q);
}

TEST(queue_invalid_capacity)
{
    ferry__queue *q = (ferry__queue *)&q;
    CHECK_RC(ferry__queue_create(&q, 0), FERRY_EINVAL);
    CHECK(q == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "capacity");
    q = (ferry__queue *)&q;
    CHECK_RC(ferry__queue_create(&q, ((size_t)1 << 30) + 1), FERRY_EINVAL);
    CHECK(q == NULL);
}

/* ---- Allocation failure: make the k-th allocation fail, for k = 0, 1, ... until the
 * constructor no longer reaches a failing one. ASan reports any leak. ---- */

TEST(oom_alloc_hook)
{
    ferry__test_fail_alloc(-1);
    void *a = ferry__malloc(8);
    CHECK(a != NULL);
    ferry__free(a);
    CHECK_EQ(ferry__test_fail_alloc(1), 1); /* one attempted since the last call */
    a = ferry__malloc(8);
    CHECK(a != NULL);
    void *b = ferry__calloc(2, 8);
    CHECK(b == NULL);
    void *c = ferry__malloc(8); /* only the one fails */
    CHECK(c != NULL);
    CHECK_EQ(ferry__test_fail_alloc(-1), 3);
    ferry__free(a);
    ferry__free(c);
    ferry__test_fail_alloc(0);
    CHECK(ferry__aligned_alloc(64) == NULL);
    ferry__test_fail_alloc(0);
    CHECK(ferry__strdup("x") == NULL);
    ferry__test_fail_alloc(0);
    CHECK(ferry__realloc(NULL, 16) == NULL);
    ferry__test_fail_alloc(-1);
    char *d = ferry__strdup("hello");
    CHECK(d && !strcmp(d, "hello"));
    ferry__free(d);
}

TEST(oom_pool_create)
{
    long k;
    for (k = 0;; k++) {
        ferry__pool *p = (ferry__pool *)&p;
        ferry__test_fail_alloc(k);
        int rc = ferry__pool_create(&p, 3, 4);
        long seen = ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK(p != NULL);
            CHECK(seen <= k); /* it got past every injected failure */
            atomic_long counter = 0;
            CHECK_OK(ferry__pool_add(p, add_job, &counter));
            ferry__pool_wait(p);
            CHECK_EQ(atomic_load(&counter), 1);
            ferry__pool_free(p);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(p == NULL);
        CHECK(k < 100);
    }
    CHECK(k >= 1); /* at least one allocation was made to fail */
}

TEST(oom_queue_create)
{
    long k;
    for (k = 0;; k++) {
        ferry__queue *q = (ferry__queue *)&q;
        ferry__test_fail_alloc(k);
        int rc = ferry__queue_create(&q, 16);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK(q != NULL);
            CHECK_OK(ferry__queue_push(q, P(5), 0));
            void *item = NULL;
            CHECK_OK(ferry__queue_pop(q, &item, 0));
            CHECK(item == P(5));
            ferry__queue_free(q);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(q == NULL);
        CHECK(k < 100);
    }
    CHECK(k >= 1);
}

TEST(oom_tensor_alloc)
{
    const int64_t shape[2] = {10, 10};
    long k;
    for (k = 0;; k++) {
        ferry_tensor t;
        memset(&t, 0, sizeof t);
        ferry__test_fail_alloc(k);
        int rc = ferry_tensor_alloc(&t, FERRY_F32, 2, shape);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK(t.data != NULL);
            CHECK_EQ(ferry_tensor_nbytes(&t), 400);
            ferry_tensor_release(&t);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(t.data == NULL);
        CHECK(t.release == NULL);
        CHECK(k < 100);
    }
    CHECK(k >= 1);
}

/* ---- Atomic files: buffered appends, patches, commit and abort ---- */

static size_t count_entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

TEST(atomic_file_appends_and_patches)
{
    test_make_dir("atomic");
    char path[512];
    test_path("out.bin", path);
    size_t total = 3u << 20;
    unsigned char *want = malloc(total);
    uint64_t x = 12345;
    for (size_t i = 0; i < total; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        want[i] = (unsigned char)(x >> 56);
    }
    ferry__atomic_file w;
    CHECK_OK(ferry__atomic_open(&w, path));
    /* pieces around the buffer's size and its boundaries, and a large one */
    static const size_t sizes[] = {1, 7, 4096, 262143, 262144, 262145, 700001, 3, 65536};
    size_t done = 0, k = 0;
    bool patched_held = false, patched_flushed = false;
    while (done < total) {
        size_t n = sizes[k++ % (sizeof sizes / sizeof sizes[0])];
        if (n > total - done)
            n = total - done;
        CHECK_OK(ferry__atomic_write(&w, want + done, n));
        done += n;
        if (!patched_flushed && done > (1u << 20)) {
            /* bytes long written out, then bytes still held in the buffer */
            CHECK_OK(ferry__atomic_pwrite(&w, "PATCH", 5, 10));
            memcpy(want + 10, "PATCH", 5);
            patched_flushed = true;
        } else if (patched_flushed && !patched_held && done > (2u << 20) && n >= 8) {
            CHECK_OK(ferry__atomic_pwrite(&w, "held", 4, done - 6));
            memcpy(want + done - 6, "held", 4);
            patched_held = true;
        }
    }
    CHECK(patched_held && patched_flushed);
    CHECK_EQ(access(path, F_OK), -1); /* nothing at the target before the commit */
    CHECK_OK(ferry__atomic_commit(&w));
    size_t n = 0;
    unsigned char *got = test_read_file(path, &n);
    CHECK(got != NULL);
    CHECK_U64(n, total);
    CHECK(memcmp(got, want, total) == 0);
    CHECK_EQ(count_entries(test_dir), 1); /* the temporary is gone */
    free(got);

    /* an abort, with bytes written out and bytes held, leaves the old file */
    CHECK_OK(ferry__atomic_open(&w, path));
    CHECK_OK(ferry__atomic_write(&w, want, 600000));
    CHECK_EQ(count_entries(test_dir), 2);
    ferry__atomic_abort(&w);
    CHECK_EQ(count_entries(test_dir), 1);
    got = test_read_file(path, &n);
    CHECK(got != NULL && n == total && memcmp(got, want, total) == 0);
    free(got);
    free(want);
    test_remove_dir();
}

TEST(oom_atomic_open)
{
    test_make_dir("atomic-oom");
    char path[512];
    test_path("out.bin", path);
    long k;
    for (k = 0;; k++) {
        ferry__atomic_file w;
        ferry__test_fail_alloc(k);
        int rc = ferry__atomic_open(&w, path);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK_OK(ferry__atomic_write(&w, "x", 1));
            CHECK_OK(ferry__atomic_commit(&w));
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK_EQ(count_entries(test_dir), 0); /* no temporary left behind */
        CHECK(k < 100);
    }
    CHECK(k >= 3); /* the path, the temporary's name and the buffer */
    test_remove_dir();
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* The check fused with the copy: the CRC of the table version and the bytes of
 * memcpy, for every length around the 256-, 64- and 16-byte steps, any alignment
 * of either side, and continued from a starting CRC; nothing written past n. */
TEST(crc32c_copy_matches_table_and_memcpy)
{
    size_t cap = 70001 + 128;
    uint8_t *src = malloc(cap), *dst = malloc(cap + 64);
    fill_bytes(src, cap, 13);
    static const size_t big[] = {4095, 4096, 4097, 4111,  4112,  4159,
                                 4160, 4351, 4352, 65535, 65536, 70001};
    size_t nbig = sizeof big / sizeof big[0];
    for (size_t k = 0; k < 700 + nbig; k++) {
        size_t len = k < 700 ? k : big[k - 700];
        for (size_t a = 0; a < 64; a += k < 300 ? 7 : 21)
            for (size_t b = 0; b < 64; b += 33) {
                memset(dst, 0xa5, cap + 64);
                uint32_t c = ferry__crc32c_copy(0xdeadbeefu, dst + b, src + a, len);
                CHECK_U64(c, ferry__crc32c_sw(0xdeadbeefu, src + a, len));
                CHECK(memcmp(dst + b, src + a, len) == 0);
                for (size_t i = 0; i < b; i++)
                    CHECK(dst[i] == 0xa5);
                CHECK(dst[b + len] == 0xa5);
            }
    }
    /* chained: the CRC of pieces copied one after another is the whole one's */
    uint32_t c = 0;
    for (size_t at = 0; at < 70001; at += 4099) {
        size_t n = 70001 - at < 4099 ? 70001 - at : 4099;
        c = ferry__crc32c_copy(c, dst + at, src + at, n);
    }
    CHECK_U64(c, ferry__crc32c_sw(0, src, 70001));
    CHECK(memcmp(dst, src, 70001) == 0);
    free(src);
    free(dst);
}
