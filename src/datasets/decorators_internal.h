/*
 * What the stream decorators share (decorators.c, decorator_group.c): the common
 * struct and constructor helpers, the saved positions' kinds, and the sample slots
 * where the buffering decorators keep copies of samples.
 */
#ifndef FERRY_DECORATORS_INTERNAL_H
#define FERRY_DECORATORS_INTERNAL_H

#include "ferry/stream.h"
#include "dataset_internal.h"

/* ---- Common ---- */

/* Every decorator's struct starts with this, so that one destroy frees them all. */
typedef struct ferry__decorator {
    ferry_stream *inner; /* owned */
} ferry__decorator;

void ferry__dec_destroy(void *self);

/* Fails a constructor before its struct exists: frees the inner stream (which the
 * constructor owns) and sets the message. The message is formatted first, as its
 * arguments may point into inner, and set last, so that nothing run by the free
 * replaces it. */
__attribute__((format(printf, 3, 4))) int ferry__dec_reject(ferry_stream *inner, int rc,
                                                            const char *fmt, ...);
/* The same, keeping the message a check already set. */
int ferry__dec_reject_kept(ferry_stream *inner, int rc);

/* Wraps self (a decorator over inner) as a stream with the inner's schema. If this
 * fails, ferry_stream_create calls destroy(self), which frees inner too. */
/* bytes: what each iterator of the new stream holds besides its inner's, which a
 * loader counts against its memory budget (once per stream shard it opens). */
int ferry__dec_wrap(ferry_stream **out, const ferry_stream_vtable *vt, void *self,
                    ferry_stream *inner, size_t bytes);

int ferry__dec_check_sample(const char *who, const ferry_sample *out, int nfields);

/* ---- Saved positions (ferry_stream_save) ----
 * Each decorator's state starts with its kind and settings, so a state saved by
 * another chain is refused, not misread; a sample is saved as its ferry_pos. */

enum {
    FERRY__DEC_SHUFFLE = 1,
    FERRY__DEC_GROUP,
    FERRY__DEC_SHARD,
    FERRY__DEC_REPEAT,
    FERRY__DEC_TAKE,
    FERRY__DEC_SKIP
};

void ferry__dec_put_kind(ferry_state *w, int kind, uint64_t a, uint64_t b);
/* Reads a kind and two settings and checks them against this decorator's. */
int ferry__dec_get_kind(ferry_state *r, int kind, uint64_t a, uint64_t b, const char *sa,
                        const char *sb);
int ferry__dec_get_count(ferry_state *r, uint64_t max, const char *what, uint64_t *n);
/* A decorator's fetch: the sample comes from the inner, whatever this level. */
int ferry__dec_pass_fetch(ferry_stream_iter *inner, const ferry_pos *pos, ferry_sample *out,
                          ferry_ctx *ctx);

/* ---- Sample slots: where the buffering decorators keep copies of samples ----
 * A slot holds int64_t lengths[nfields], then each field at its full size. Every
 * part is 16-byte aligned (the buffer is 64-byte aligned and the slot stride a
 * multiple of 16), so a dataset writing into a slot finds each field at least as
 * aligned as its dtype, as it would in a batch buffer. */

typedef struct ferry__slot_layout {
    int nfields;
    size_t stride;                      /* bytes per slot */
    size_t off[FERRY_MAX_FIELDS];       /* field f within a slot (lengths are at 0) */
    size_t nbytes[FERRY_MAX_FIELDS];    /* field f at full size */
    size_t row_bytes[FERRY_MAX_FIELDS]; /* variable fields: bytes per row; 0 for fixed */
    int64_t bound[FERRY_MAX_FIELDS];    /* variable fields: the most rows */
} ferry__slot_layout;

/* Lays out slots for inner's schema and checks that `capacity` of them fit in one
 * buffer (*total bytes); `setting` names what sets the capacity. */
int ferry__slot_layout_init(ferry__slot_layout *L, const ferry_stream *inner, size_t capacity,
                            const char *who, const char *setting, size_t setting_value,
                            size_t *total);
/* A view of a slot as a sample (data has room for L->nfields pointers). */
ferry_sample ferry__slot_view(const ferry__slot_layout *L, uint8_t *slot, void **data);
/* Reads the inner's next sample into a slot, and its position into *pos (or,
 * with fetch set, the sample at *pos again). Lengths are checked here, because
 * they decide how many bytes are later copied out. */
int ferry__slot_read(const ferry__slot_layout *L, const ferry_stream *inner, uint8_t *slot,
                     ferry_stream_iter *it, ferry_ctx *ctx, const char *who, ferry_pos *pos,
                     bool fetch);
/* Copies a slot's sample out: fixed fields whole, variable ones up to their
 * length (the loader zeroes the rest). */
void ferry__slot_copy(const ferry__slot_layout *L, uint8_t *slot, const ferry_pos *pos,
                      ferry_sample *out);
/* A restore: reads the samples of slots [0, n) again from pos[0..n), in the
 * order of their pos (file, then offset), so that a source that can only skip
 * forward (a compressed file) passes over each file once. */
int ferry__slot_refill(const ferry__slot_layout *L, const ferry_stream *inner, uint8_t *buf,
                       ferry_pos *pos, size_t n, ferry_stream_iter *it, ferry_ctx *ctx,
                       const char *who);

#endif
