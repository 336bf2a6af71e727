/*
 * Philox4x32-10 and the per-sample generator built on it.
 */
#include "internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void ferry_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

void ferry_rng_init(ferry_rng *r, uint64_t seed, uint64_t epoch, uint64_t index)
{
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = (uint32_t)epoch;
    r->ctr[2] = (uint32_t)index;
    r->ctr[3] = (uint32_t)(index >> 32);
    r->used = 4;
}

uint32_t ferry_rng_u32(ferry_rng *r)
{
    if (r->used >= 4) {
        ferry_philox4x32_10(r->ctr, r->key, r->buf);
        r->ctr[0]++;
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t ferry_rng_u64(ferry_rng *r)
{
    uint64_t hi = ferry_rng_u32(r);
    return (hi << 32) | ferry_rng_u32(r);
}

double ferry_rng_uniform(ferry_rng *r)
{
    return (double)(ferry_rng_u64(r) >> 11) * 0x1.0p-53;
}

float ferry_rng_uniformf(ferry_rng *r)
{
    return (float)(ferry_rng_u32(r) >> 8) * 0x1.0p-24f;
}

uint64_t ferry_rng_below(ferry_rng *r, uint64_t n)
{
    if (n == 0)
        return 0;
    /* Lemire's multiply-and-reject: unbiased, usually one draw. */
    unsigned __int128 m = (unsigned __int128)ferry_rng_u64(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            m = (unsigned __int128)ferry_rng_u64(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

uint64_t ferry_hash64(uint64_t a, uint64_t b)
{
    /* Two rounds of the splitmix64 finaliser over a combination of both words. */
    uint64_t x = a ^ (b * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    for (int i = 0; i < 2; i++) {
        x ^= x >> 30;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 27;
        x *= 0x94D049BB133111EBull;
        x ^= x >> 31;
        x += b;
    }
    return x;
}
