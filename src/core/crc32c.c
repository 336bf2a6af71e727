/*
 * CRC-32C (Castagnoli): the SSE4.2 instruction where the CPU has it, else
 * slicing-by-8 tables.
 *
 * The instruction has a latency of three cycles and a throughput of one, so one
 * dependent chain runs at a third of its speed. Large buffers are cut into three
 * blocks (8 KiB each, then 1 KiB, then 256 bytes, while they fit) whose CRCs run
 * side by side and are then joined: the CRC register is
 * linear, so crc(A || B) = shift(crc(A), |B|) ^ crc0(B), where crc0 starts from a
 * zero register and shift appends |B| zero bytes, a multiplication by x^(8|B|)
 * modulo the polynomial done with four table lookups (after Mark Adler's crc32c.c).
 */
#include "internal.h"
#include "ferry/records.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
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

/* Filled once (pthread_once) and read-only afterwards. */
static uint32_t slice[8][256];
static uint32_t shift_long[4][256], shift_mid[4][256], shift_short[4][256];
static bool have_hw;
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
static uint32_t x8nmodp(size_t n)
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

static void init_shift(uint32_t t[4][256], size_t len)
{
    uint32_t op = x8nmodp(len);
    for (unsigned k = 0; k < 4; k++)
        for (uint32_t n = 0; n < 256; n++)
            t[k][n] = multmodp(op, n << (8 * k));
}

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
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
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

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Three streams of `block` bytes each, side by side, as long as they fit. */
#define THREE_WAY(block, table)                                                                    \
    while (n >= 3 * (size_t)(block)) {                                                             \
        uint64_t c1 = 0, c2 = 0;                                                                   \
        const unsigned char *end = p + (block);                                                    \
        do {                                                                                       \
            c0 = _mm_crc32_u64(c0, load64(p));                                                     \
            c1 = _mm_crc32_u64(c1, load64(p + (block)));                                           \
            c2 = _mm_crc32_u64(c2, load64(p + 2 * (size_t)(block)));                               \
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
        c0 = _mm_crc32_u64(c0, load64(p));
        p += 8;
        n -= 8;
    }
    while (n--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#endif

int ferry__crc32c_hw_available(void)
{
    tables();
    return have_hw;
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
    if (have_hw)
        return crc_hw(crc, data, n);
#endif
    return ferry__crc32c_sw(crc, data, n);
}
