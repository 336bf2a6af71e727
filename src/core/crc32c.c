/*
 * CRC-32C (Castagnoli): carry-less multiply folding on CPUs with AVX-512 and
 * VPCLMULQDQ (buffers of 256 bytes and more: crc_clmul below), else the SSE4.2
 * instruction where the CPU has it, else slicing-by-8 tables; chosen at run time.
 *
 * The instruction has a latency of three cycles and a throughput of one, so one
 * dependent chain runs at a third of its speed. Large buffers are cut into three
 * blocks (8 KiB each, then 1 KiB, then 256 bytes, while they fit) whose CRCs run
 * side by side and are then joined: the CRC register is
 * linear, so crc(A || B) = shift(crc(A), |B|) ^ crc0(B), where crc0 starts from a
 * zero register and shift appends |B| zero bytes, a multiplication by x^(8|B|)
 * modulo the polynomial done with four table lookups (after Mark Adler's crc32c.c).
 */
#include "bytes.h"
#include "internal.h"

#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the table code below loads little-endian words; this host is not"
#endif

#define POLY 0x82f63b78u /* 0x1EDC6F41 reflected */
#define LONG_BLOCK 8192u /* bytes per stream in the three-way loop */
/* A 4 KB record read from memory: three streams of 1 KiB are about 15% faster than
 * four rounds of three 256-byte blocks (the hardware prefetcher follows longer
 * streams). */
#define MID_BLOCK 1024u
#define SHORT_BLOCK 256u
#define FUSE_PIECE 16384u /* bytes checked, then copied, while in L1/L2 */

/* Filled once (pthread_once) and read-only afterwards. */
static uint32_t slice[8][256];
static uint32_t shift_long[4][256], shift_mid[4][256], shift_short[4][256];
static bool have_hw, have_clmul;
/* Folding constants of the carry-less multiply version (see crc_clmul). */
static uint64_t fold_256[2], fold_64[2], fold_48[2], fold_32[2], fold_16[2];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* a * b modulo the polynomial, in the reflected representation (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(8n) modulo the polynomial: the operator that appends n zero bytes. */
static uint32_t x8nmodp(uint64_t n)
{
    uint32_t p = 1u << 31;  /* x^0 */
    uint32_t sq = 1u << 23; /* x^8 */
    while (n) {
        if (n & 1)
            p = multmodp(sq, p);
        sq = multmodp(sq, sq);
        n >>= 1;
    }
    return p;
}

/* x^e modulo the polynomial. */
static uint32_t xnmodp(uint64_t e)
{
    uint32_t p = 1u << 31;  /* x^0 */
    uint32_t sq = 1u << 30; /* x^1 */
    while (e) {
        if (e & 1)
            p = multmodp(sq, p);
        sq = multmodp(sq, sq);
        e >>= 1;
    }
    return p;
}

/* The pair that moves 16 bytes `bytes` further on (see crc_clmul). */
static void init_fold(uint64_t k[2], uint64_t bytes)
{
    k[0] = (uint64_t)xnmodp(8 * bytes + 63) << 32;
    k[1] = (uint64_t)xnmodp(8 * bytes - 1) << 32;
}

static void init_shift(uint32_t t[4][256], size_t len)
{
    uint32_t op = x8nmodp(len);
    for (unsigned k = 0; k < 4; k++)
        for (uint32_t n = 0; n < 256; n++)
            t[k][n] = multmodp(op, n << (8 * k));
}

#if defined(__x86_64__)
/* AVX-512 with the 512-bit carry-less multiply (VPCLMULQDQ), and an operating
 * system that saves the registers. */
static bool cpu_has_vpclmul512(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_PCLMUL))
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0xe6) != 0xe6) /* SSE, AVX, opmask and both halves of the ZMM state */
        return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    return (b & (1u << 16)) && (c & (1u << 10)); /* AVX512F, VPCLMULQDQ */
}
#endif

static void init_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        slice[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            slice[k][n] = (slice[k - 1][n] >> 8) ^ slice[0][slice[k - 1][n] & 0xff];
    init_shift(shift_long, LONG_BLOCK);
    init_shift(shift_mid, MID_BLOCK);
    init_shift(shift_short, SHORT_BLOCK);
    init_fold(fold_256, 256);
    init_fold(fold_64, 64);
    init_fold(fold_48, 48);
    init_fold(fold_32, 32);
    init_fold(fold_16, 16);
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
    have_clmul = have_hw && cpu_has_vpclmul512();
#endif
}

static inline void tables(void)
{
    pthread_once(&tables_once, init_tables);
}

uint32_t ferry__crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    tables();
    const unsigned char *p = data;
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = slice[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = slice[7][w & 0xff] ^ slice[6][(w >> 8) & 0xff] ^ slice[5][(w >> 16) & 0xff] ^
              slice[4][(w >> 24) & 0xff] ^ slice[3][(w >> 32) & 0xff] ^ slice[2][(w >> 40) & 0xff] ^
              slice[1][(w >> 48) & 0xff] ^ slice[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = slice[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
static inline uint32_t shift(const uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

/* Three streams of `block` bytes each, side by side, as long as they fit. */
#define THREE_WAY(block, table)                                                                    \
    while (n >= 3 * (size_t)(block)) {                                                             \
        uint64_t c1 = 0, c2 = 0;                                                                   \
        const unsigned char *end = p + (block);                                                    \
        do {                                                                                       \
            c0 = _mm_crc32_u64(c0, ferry__load_le64(p));                                           \
            c1 = _mm_crc32_u64(c1, ferry__load_le64(p + (block)));                                 \
            c2 = _mm_crc32_u64(c2, ferry__load_le64(p + 2 * (size_t)(block)));                     \
            p += 8;                                                                                \
        } while (p < end);                                                                         \
        c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c1;                                            \
        c0 = shift(table, (uint32_t)c0) ^ (uint32_t)c2;                                            \
        p += 2 * (size_t)(block);                                                                  \
        n -= 3 * (size_t)(block);                                                                  \
    }

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t c0 = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    THREE_WAY(LONG_BLOCK, shift_long)
    THREE_WAY(MID_BLOCK, shift_mid)
    THREE_WAY(SHORT_BLOCK, shift_short)
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, ferry__load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}

#define CLMUL_TARGET __attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))
#define CLMUL_MIN 256 /* bytes: shorter buffers go to crc_hw */

/* a * k folded onto x: each 16-byte lane of a, moved on by the distance k stands
 * for, XORed into x. */
CLMUL_TARGET static inline __m512i fold512(__m512i a, __m512i k, __m512i x)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
                                     _mm512_clmulepi64_epi128(a, k, 0x11), x, 0x96);
}

CLMUL_TARGET static inline __m128i fold128(__m128i a, __m128i k, __m128i x)
{
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11)), x);
}

CLMUL_TARGET static inline __m512i k512(const uint64_t k[2])
{
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[1], (long long)k[0]));
}

CLMUL_TARGET static inline __m128i k128(const uint64_t k[2])
{
    return _mm_set_epi64x((long long)k[1], (long long)k[0]);
}

/* The end of both folds: a0 (four lanes) folded down to 128 bits, then the last
 * n < 64 bytes at p, 16 and 8 at a time. */
CLMUL_TARGET static inline uint32_t clmul_finish(__m512i a0, const unsigned char *p, size_t n)
{
    __m128i x = _mm512_extracti32x4_epi32(a0, 3);
    x = fold128(_mm512_extracti32x4_epi32(a0, 0), k128(fold_48), x);
    x = fold128(_mm512_extracti32x4_epi32(a0, 1), k128(fold_32), x);
    x = fold128(_mm512_extracti32x4_epi32(a0, 2), k128(fold_16), x);
    const __m128i k16 = k128(fold_16);
    while (n >= 16) {
        x = fold128(x, k16, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
    while (n >= 8) {
        c = _mm_crc32_u64(c, ferry__load_le64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

/*
 * Folding with the carry-less multiply (the Intel white paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ"), 256 bytes a round in four
 * 64-byte registers. In the reflected order a 16-byte piece X of the message is
 * H * x^64 + L, H its first 8 bytes; what it adds to the CRC does not change when
 * it is replaced, d bits further on, by H * (x^(d+64) mod P) + L * (x^d mod P): two
 * 64 x 32-bit products, which fit in the 16 bytes found there and are XORed into
 * them. (The constants are x^(d+63) and x^(d-1): a reflected product comes out one
 * bit short.) The message shrinks to its last 16 bytes, which the CRC instruction
 * then finishes with the tail. The starting CRC is XORed into the first 4 bytes.
 * n >= CLMUL_MIN.
 */
CLMUL_TARGET static uint32_t crc_clmul(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    __m512i a0 = _mm512_loadu_si512((const void *)p);
    __m512i a1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i a2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i a3 = _mm512_loadu_si512((const void *)(p + 192));
    a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    p += 256;
    n -= 256;
    const __m512i k256 = k512(fold_256), k64 = k512(fold_64);
    while (n >= 256) {
        a0 = fold512(a0, k256, _mm512_loadu_si512((const void *)p));
        a1 = fold512(a1, k256, _mm512_loadu_si512((const void *)(p + 64)));
        a2 = fold512(a2, k256, _mm512_loadu_si512((const void *)(p + 128)));
        a3 = fold512(a3, k256, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    a0 = fold512(a0, k64, a1);
    a0 = fold512(a0, k64, a2);
    a0 = fold512(a0, k64, a3);
    while (n >= 64) {
        a0 = fold512(a0, k64, _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    return clmul_finish(a0, p, n);
}

/*
 * crc_clmul that also copies: each 64-byte piece is stored to dst as it is folded,
 * so the data crosses the memory bus once, into the cache, and leaves it once,
 * where a check and then a copy would read it twice. n >= CLMUL_MIN.
 */
CLMUL_TARGET static uint32_t crc_clmul_copy(uint32_t crc, void *dst, const void *data, size_t n)
{
    const unsigned char *p = data;
    unsigned char *d = dst;
    __m512i a0 = _mm512_loadu_si512((const void *)p);
    __m512i a1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i a2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i a3 = _mm512_loadu_si512((const void *)(p + 192));
    _mm512_storeu_si512((void *)d, a0);
    _mm512_storeu_si512((void *)(d + 64), a1);
    _mm512_storeu_si512((void *)(d + 128), a2);
    _mm512_storeu_si512((void *)(d + 192), a3);
    a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    p += 256;
    d += 256;
    n -= 256;
    const __m512i k256 = k512(fold_256), k64 = k512(fold_64);
    while (n >= 256) {
        __m512i b0 = _mm512_loadu_si512((const void *)p);
        __m512i b1 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i b2 = _mm512_loadu_si512((const void *)(p + 128));
        __m512i b3 = _mm512_loadu_si512((const void *)(p + 192));
        _mm512_storeu_si512((void *)d, b0);
        _mm512_storeu_si512((void *)(d + 64), b1);
        _mm512_storeu_si512((void *)(d + 128), b2);
        _mm512_storeu_si512((void *)(d + 192), b3);
        a0 = fold512(a0, k256, b0);
        a1 = fold512(a1, k256, b1);
        a2 = fold512(a2, k256, b2);
        a3 = fold512(a3, k256, b3);
        p += 256;
        d += 256;
        n -= 256;
    }
    a0 = fold512(a0, k64, a1);
    a0 = fold512(a0, k64, a2);
    a0 = fold512(a0, k64, a3);
    while (n >= 64) {
        __m512i b = _mm512_loadu_si512((const void *)p);
        _mm512_storeu_si512((void *)d, b);
        a0 = fold512(a0, k64, b);
        p += 64;
        d += 64;
        n -= 64;
    }
    memcpy(d, p, n); /* the tail, under 64 bytes */
    return clmul_finish(a0, p, n);
}
#endif

int ferry__crc32c_hw_available(void)
{
    tables();
    return have_hw;
}

int ferry__crc32c_clmul_available(void)
{
    tables();
    return have_clmul;
}

uint32_t ferry__crc32c_clmul(uint32_t crc, const void *data, size_t n)
{
    tables();
#if defined(__x86_64__)
    if (have_clmul && n >= CLMUL_MIN)
        return crc_clmul(crc, data, n);
#endif
    return ferry__crc32c_hw(crc, data, n);
}

uint32_t ferry__crc32c_hw(uint32_t crc, const void *data, size_t n)
{
    tables();
#if defined(__x86_64__)
    if (have_hw)
        return crc_hw(crc, data, n);
#endif
    return ferry__crc32c_sw(crc, data, n);
}

uint32_t ferry_crc32c(uint32_t crc, const void *data, size_t n)
{
    tables();
#if defined(__x86_64__)
    if (have_clmul && n >= CLMUL_MIN)
        return crc_clmul(crc, data, n);
    if (have_hw)
        return crc_hw(crc, data, n);
#endif
    return ferry__crc32c_sw(crc, data, n);
}

uint32_t ferry__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    return multmodp(x8nmodp(len_b), crc_a) ^ crc_b;
}

uint32_t ferry__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n)
{
    tables();
#if defined(__x86_64__)
    if (have_clmul && n >= CLMUL_MIN)
        return crc_clmul_copy(crc, dst, src, n);
#endif
    /* without the fused loop: the check first, so that the copy reads from the cache
     * in pieces the cache holds */
    const unsigned char *p = src;
    unsigned char *d = dst;
    while (n) {
        size_t k = n < FUSE_PIECE ? n : FUSE_PIECE;
        crc = ferry_crc32c(crc, p, k);
        memcpy(d, p, k);
        p += k;
        d += k;
        n -= k;
    }
    return crc;
}
