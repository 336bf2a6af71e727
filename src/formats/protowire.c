/*
 * protobuf's wire format: varints, tags and payloads, each checked against the
 * buffer (see protowire.h).
 */
#include "protowire.h"

int ferry__pb_varint(const char *what, const uint8_t *p, size_t n, size_t *pos, uint64_t *out)
{
    size_t at = *pos;
    uint64_t v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (at + i >= n)
            return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: varint runs past the end (%zu bytes)",
                              what, *pos, n);
        uint8_t b = p[at + i];
        if (i == 9 && (b & 0x80))
            return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: varint longer than 10 bytes", what,
                              *pos);
        if (i == 9 && b > 1)
            return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: varint overflows 64 bits", what, *pos);
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pos = at + i + 1;
            *out = v;
            return 0;
        }
    }
    return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: varint longer than 10 bytes", what, *pos);
}

int ferry__pb_tag(const char *what, const uint8_t *p, size_t n, size_t *pos, unsigned *field,
                  unsigned *wt)
{
    size_t at = *pos;
    uint64_t tag;
    int rc = ferry__pb_varint(what, p, n, pos, &tag);
    if (rc < 0)
        return rc;
    if (tag > UINT32_MAX)
        return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: tag %llu is out of range", what, at,
                          (unsigned long long)tag);
    *field = (unsigned)(tag >> 3);
    *wt = (unsigned)(tag & 7);
    if (*field == 0)
        return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: field number 0 is invalid", what, at);
    if (*wt == FERRY__WT_SGROUP || *wt == FERRY__WT_EGROUP)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: byte %zu: field %u has group wire type %u (not supported)", what, at,
                          *field, *wt);
    if (*wt > FERRY__WT_I32)
        return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: field %u has invalid wire type %u", what,
                          at, *field, *wt);
    return 0;
}

int ferry__pb_payload(const char *what, const uint8_t *p, size_t n, size_t *pos, size_t at,
                      unsigned field, unsigned wt, uint64_t *v, const uint8_t **body, size_t *len)
{
    int rc;
    size_t k;
    switch (wt) {
    case FERRY__WT_VARINT:
        return ferry__pb_varint(what, p, n, pos, v);
    case FERRY__WT_I64:
    case FERRY__WT_I32:
        k = wt == FERRY__WT_I64 ? 8 : 4;
        if (n - *pos < k)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: byte %zu: field %u's %zu bytes run past the end (%zu bytes)",
                              what, at, field, k, n);
        *body = p + *pos;
        *len = k;
        *pos += k;
        return 0;
    case FERRY__WT_LEN:
        if ((rc = ferry__pb_varint(what, p, n, pos, v)) < 0)
            return rc;
        if (*v > n - *pos)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: byte %zu: field %u length %llu runs past the end (%zu bytes)",
                              what, at, field, (unsigned long long)*v, n);
        *body = p + *pos;
        *len = (size_t)*v;
        *pos += (size_t)*v;
        return 0;
    }
    return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: field %u has invalid wire type %u", what, at,
                      field, wt);
}

int ferry__pb_int32(const char *what, uint64_t v, size_t at, unsigned field, const char *name,
                    int32_t *out)
{
    if (v <= UINT32_MAX) {
        *out = (int32_t)(uint32_t)v;
        return 0;
    }
    if (v >= (uint64_t)0xFFFFFFFF80000000ull) {
        *out = (int32_t)(int64_t)v;
        return 0;
    }
    return ferry__err(FERRY_ECORRUPT,
                      "%s: byte %zu: field %u (%s) value %llu does not fit in int32", what, at,
                      field, name, (unsigned long long)v);
}

size_t ferry__pb_varint_size(uint64_t v)
{
    size_t k = 1;
    while (v >= 0x80) {
        v >>= 7;
        k++;
    }
    return k;
}

uint8_t *ferry__pb_put_varint(uint8_t *o, uint64_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}
