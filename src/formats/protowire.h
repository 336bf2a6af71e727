/*
 * protobuf's wire format, read and written by hand: the one set of helpers that
 * the message parsers of this folder (Caffe's Datum, Caffe2's TensorProtos) share.
 * Every read is checked against the buffer; an error says which message, at which
 * byte, and why: "datum: byte 12: field 4 length 9000 runs past the end (30 bytes)".
 */
#ifndef FERRY_PROTOWIRE_H
#define FERRY_PROTOWIRE_H

#include "../core/internal.h"

#include <stddef.h>
#include <stdint.h>

enum {
    FERRY__WT_VARINT = 0,
    FERRY__WT_I64 = 1,
    FERRY__WT_LEN = 2,
    FERRY__WT_SGROUP = 3,
    FERRY__WT_EGROUP = 4,
    FERRY__WT_I32 = 5
};

/* Reads a varint at *pos (at most 10 bytes, at most 64 bits) and moves *pos past
 * it. `what` names the message in errors (FERRY_ECORRUPT). */
int ferry__pb_varint(const char *what, const uint8_t *p, size_t n, size_t *pos, uint64_t *out);

/* Reads a field's tag at *pos: a field number above 0, a wire type of 0, 1, 2 or 5
 * (groups are refused). */
int ferry__pb_tag(const char *what, const uint8_t *p, size_t n, size_t *pos, unsigned *field,
                  unsigned *wt);

/* Reads the payload of a field of wire type wt whose tag was at byte `at`:
 * VARINT sets *v; I64 and I32 set *body to the 8 or 4 raw bytes; LEN sets *body and
 * *len to the bytes it delimits, checked against n. Moves *pos past the payload. */
int ferry__pb_payload(const char *what, const uint8_t *p, size_t n, size_t *pos, size_t at,
                      unsigned field, unsigned wt, uint64_t *v, const uint8_t **body, size_t *len);

/* An int32 field's varint taken back to int32: protobuf writes a negative one
 * sign-extended to 64 bits, some writers its 32-bit pattern; anything else does not
 * fit (FERRY_ECORRUPT naming the field). */
int ferry__pb_int32(const char *what, uint64_t v, size_t at, unsigned field, const char *name,
                    int32_t *out);

/* Writing: the size of a varint, and the varint itself (returns the byte after). */
size_t ferry__pb_varint_size(uint64_t v);
uint8_t *ferry__pb_put_varint(uint8_t *o, uint64_t v);

#endif
