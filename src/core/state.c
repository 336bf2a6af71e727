/*
 * The byte codec of saved states (state.h): the stream positions and the loader
 * state are written and read with it.
 */
#include "state.h"
#include "bytes.h"

#include <string.h>

void ferry_state_put(ferry_state *w, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (w->len + n > w->cap && w->grow && !w->nomem) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *b = ferry__realloc(w->buf, cap);
        if (b) {
            w->buf = b;
            w->cap = cap;
        } else {
            w->nomem = true;
        }
    }
    if (w->len + n <= w->cap)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

void ferry_state_put_u64(ferry_state *w, uint64_t v)
{
    ferry__state_put_u64s(w, &v, 1);
}

void ferry__state_put_u32(ferry_state *w, uint32_t v)
{
    uint8_t b[4];
    ferry__store_le32(b, v);
    ferry_state_put(w, b, 4);
}

void ferry__state_put_u64s(ferry_state *w, const void *v, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    ferry_state_put(w, v, n * 8);
#else
    for (size_t i = 0; i < n; i++) {
        uint64_t x;
        uint8_t b[8];
        memcpy(&x, (const uint8_t *)v + 8 * i, 8);
        ferry__store_le64(b, x);
        ferry_state_put(w, b, 8);
    }
#endif
}

int ferry_state_get(ferry_state *r, void *p, size_t n)
{
    if (n > r->n - r->off)
        return ferry__err(FERRY_ECORRUPT,
                          "stream state: cut short (%zu bytes wanted at offset %zu of %zu)", n,
                          r->off, r->n);
    if (n)
        memcpy(p, r->in + r->off, n);
    r->off += n;
    return 0;
}

int ferry_state_get_u64(ferry_state *r, uint64_t *v)
{
    return ferry__state_get_u64s(r, v, 1);
}

int ferry__state_get_u32(ferry_state *r, uint32_t *v)
{
    uint8_t b[4];
    int rc = ferry_state_get(r, b, 4);
    *v = rc < 0 ? 0 : ferry__load_le32(b);
    return rc;
}

int ferry__state_get_u64s(ferry_state *r, void *v, size_t n)
{
    int rc = ferry_state_get(r, v, n > SIZE_MAX / 8 ? SIZE_MAX : n * 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint64_t x = ferry__load_le64((uint8_t *)v + 8 * i);
        memcpy((uint8_t *)v + 8 * i, &x, 8);
    }
#endif
    return rc;
}
