/*
 * The byte codec of saved states: a buffer written piece by piece (grown, or
 * counted past its end) and read back with every read bounds-checked, numbers
 * little-endian. Stream positions (ferry_stream_save, and each stream's save and
 * restore through ferry_state_put and ferry_state_get, ferry/dataset.h) and the
 * loader state (src/loader/state.c) are both written with it. Private to the
 * library.
 */
#ifndef FERRY_CORE_STATE_H
#define FERRY_CORE_STATE_H

#include "internal.h"

/* A state being written (into buf: grown with ferry__realloc when grow is set,
 * otherwise counted past cap) or read (in[0..n), at off). */
typedef struct ferry_state ferry_state;
struct ferry_state {
    uint8_t *buf;
    size_t cap, len;
    bool grow, nomem;
    const uint8_t *in;
    size_t n, off;
};

/* The public half (declared for streams in ferry/dataset.h): put appends n bytes
 * (never fails: nomem, or len past cap, tells); get reads the next n,
 * FERRY_ECORRUPT ("stream state: cut short") when fewer are left. */
FERRY_API void ferry_state_put(ferry_state *w, const void *p, size_t n);
FERRY_API void ferry_state_put_u64(ferry_state *w, uint64_t v);
FERRY_API int ferry_state_get(ferry_state *r, void *p, size_t n);
FERRY_API int ferry_state_get_u64(ferry_state *r, uint64_t *v);

void ferry__state_put_u32(ferry_state *w, uint32_t v);
/* *v is 0 when the state is cut short. */
int ferry__state_get_u32(ferry_state *r, uint32_t *v);
/* n u64s at v (any alignment; an array of ferry_pos, say) as n little-endian
 * u64s: on a little-endian host, their bytes as they are. */
void ferry__state_put_u64s(ferry_state *w, const void *v, size_t n);
int ferry__state_get_u64s(ferry_state *r, void *v, size_t n);

#endif
