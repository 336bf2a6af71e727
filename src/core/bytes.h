/*
 * Little-endian byte access, written once (as zstd's lib/common/mem.h): loads and
 * stores of 16, 32 and 64 bits at any alignment, for the file formats and the
 * saved states. memcpy compiles to one move; the swap, chosen at compile time,
 * only on a big-endian host.
 */
#ifndef FERRY_BYTES_H
#define FERRY_BYTES_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FERRY__LE(bits, v) __builtin_bswap##bits(v)
#else
#define FERRY__LE(bits, v) (v)
#endif

static inline uint16_t ferry__load_le16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return FERRY__LE(16, v);
}

static inline uint32_t ferry__load_le32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return FERRY__LE(32, v);
}

static inline uint64_t ferry__load_le64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return FERRY__LE(64, v);
}

static inline void ferry__store_le16(void *p, uint16_t v)
{
    v = FERRY__LE(16, v);
    memcpy(p, &v, sizeof v);
}

static inline void ferry__store_le32(void *p, uint32_t v)
{
    v = FERRY__LE(32, v);
    memcpy(p, &v, sizeof v);
}

static inline void ferry__store_le64(void *p, uint64_t v)
{
    v = FERRY__LE(64, v);
    memcpy(p, &v, sizeof v);
}

#endif
