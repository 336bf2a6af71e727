/*
 * Caffe's Datum: a hand-written reader and writer of its protobuf wire format
 * (protowire.h). No protobuf library: the message is small, and a reader written
 * for it can check every length against the buffer and say where it went wrong.
 */
#include "ferry/lmdb.h"
#include "protowire.h"

#include <string.h>

#define DIM_LIMIT ((uint64_t)1 << 31)

static const char *const field_names[8] = {NULL,   "channels", "height",     "width",
                                           "data", "label",    "float_data", "encoded"};

/* Walks the message. With fdst, also copies the floats' raw little-endian bytes
 * there (at most fcap floats) in order. */
static int walk(const uint8_t *p, size_t n, ferry_datum *d, uint8_t *fdst, size_t fcap)
{
    memset(d, 0, sizeof *d);
    d->msg_ = p;
    d->msg_size_ = n;
    size_t pos = 0, runs = 0, dim_at = 0, data_at = n, copied = 0;
    while (pos < n) {
        size_t at = pos, len = 0;
        unsigned field, wt;
        uint64_t v = 0;
        const uint8_t *body = NULL;
        int rc = ferry__pb_tag("datum", p, n, &pos, &field, &wt);
        if (rc < 0)
            return rc;
        bool known = field <= 7;
        unsigned want = field == 4 ? FERRY__WT_LEN : field == 6 ? FERRY__WT_I32 : FERRY__WT_VARINT;
        if (known && wt != want && !(field == 6 && wt == FERRY__WT_LEN))
            return ferry__err(
                FERRY_ECORRUPT, "datum: byte %zu: field %u (%s) has wire type %u, expected %u%s",
                at, field, field_names[field], wt, want, field == 6 ? " or 2 (packed)" : "");
        if ((rc = ferry__pb_payload("datum", p, n, &pos, at, field, wt, &v, &body, &len)) < 0)
            return rc;
        if (!known)
            continue;
        if (wt == FERRY__WT_VARINT && field == 7) {
            d->encoded = v != 0;
        } else if (wt == FERRY__WT_VARINT) {
            int32_t x = 0;
            if ((rc = ferry__pb_int32("datum", v, at, field, field_names[field], &x)) < 0)
                return rc;
            if (field == 5) {
                d->label = x;
            } else {
                if (x < 0)
                    return ferry__err(FERRY_ECORRUPT, "datum: byte %zu: %s %d is negative", at,
                                      field_names[field], x);
                *(field == 1 ? &d->channels : field == 2 ? &d->height : &d->width) = x;
                dim_at = at > dim_at ? at : dim_at;
            }
        } else if (wt == FERRY__WT_I32) { /* float_data, one value */
            if (fdst && copied < fcap)
                memcpy(fdst + 4 * copied++, body, 4);
            if (d->float_count++ == 0)
                d->float_bytes = body;
            runs++;
        } else if (field == 4) {
            d->data = body;
            d->data_size = len;
            data_at = at;
        } else { /* float_data, packed */
            if (len % 4)
                return ferry__err(FERRY_ECORRUPT,
                                  "datum: byte %zu: field 6 (float_data) packed length %zu "
                                  "is not a multiple of 4",
                                  at, len);
            size_t k = len / 4;
            if (fdst && copied < fcap) {
                size_t m = k < fcap - copied ? k : fcap - copied;
                memcpy(fdst + 4 * copied, body, 4 * m);
                copied += m;
            }
            if (k) {
                if (d->float_count == 0)
                    d->float_bytes = body;
                d->float_count += k;
                runs++;
            }
        }
    }
    if (runs > 1)
        d->float_bytes = NULL;
    uint64_t chw, c = (uint64_t)d->channels, h = (uint64_t)d->height, w = (uint64_t)d->width;
    if (__builtin_mul_overflow(c, h, &chw) || __builtin_mul_overflow(chw, w, &chw) ||
        chw > DIM_LIMIT)
        return ferry__err(FERRY_ECORRUPT,
                          "datum: byte %zu: channels*height*width = %llu*%llu*%llu is over the "
                          "2^31 limit",
                          dim_at, (unsigned long long)c, (unsigned long long)h,
                          (unsigned long long)w);
    if (d->encoded)
        return 0;
    if (d->data_size == 0 && d->float_count > 0) {
        if (d->float_count != chw)
            return ferry__err(FERRY_ECORRUPT,
                              "datum: byte %zu: float_data has %zu values, but "
                              "channels*height*width = %llu*%llu*%llu = %llu",
                              n, d->float_count, (unsigned long long)c, (unsigned long long)h,
                              (unsigned long long)w, (unsigned long long)chw);
    } else if (d->data_size != chw) {
        return ferry__err(FERRY_ECORRUPT,
                          "datum: byte %zu: data is %zu bytes, but channels*height*width = "
                          "%llu*%llu*%llu = %llu",
                          data_at, d->data_size, (unsigned long long)c, (unsigned long long)h,
                          (unsigned long long)w, (unsigned long long)chw);
    }
    return 0;
}

int ferry_datum_decode(const void *buf, size_t n, ferry_datum *out)
{
    if (!out)
        return ferry__err(FERRY_EINVAL, "datum: out is NULL");
    if (!buf && n)
        return ferry__err(FERRY_EINVAL, "datum: buf is NULL");
    return walk(buf, n, out, NULL, 0);
}

static bool host_is_little_endian(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void le_to_native(uint8_t *p, size_t count)
{
    if (host_is_little_endian())
        return;
    for (size_t i = 0; i < count; i++, p += 4) {
        uint8_t t = p[0];
        p[0] = p[3];
        p[3] = t;
        t = p[1];
        p[1] = p[2];
        p[2] = t;
    }
}

/* Raw little-endian bytes of up to n floats. */
static size_t copy_floats_le(const ferry_datum *d, uint8_t *dst, size_t n)
{
    size_t m = n < d->float_count ? n : d->float_count;
    if (m == 0)
        return 0;
    if (d->float_bytes) {
        memcpy(dst, d->float_bytes, 4 * m);
        return m;
    }
    if (!d->msg_)
        return 0;
    ferry_datum again;
    char saved[FERRY_ERRMSG_MAX];
    ferry__err_copy(saved);
    int rc = walk(d->msg_, d->msg_size_, &again, dst, m);
    if (rc < 0) {
        ferry__err(0, "%s", saved); /* a damaged struct: keep the caller's message */
        return 0;
    }
    return m < again.float_count ? m : again.float_count;
}

size_t ferry_datum_floats(const ferry_datum *d, void *dst, size_t n)
{
    if (!d || !dst)
        return 0;
    size_t m = copy_floats_le(d, dst, n);
    le_to_native(dst, m);
    return m;
}

static uint64_t int32_wire(int32_t x)
{
    return (uint64_t)(int64_t)x; /* sign-extended, as protobuf writes int32 */
}

int ferry_datum_encode(const ferry_datum *d, void *buf, size_t cap, size_t *size)
{
    if (!d || !size)
        return ferry__err(FERRY_EINVAL, "datum encode: d or size is NULL");
    if (d->data_size && !d->data)
        return ferry__err(FERRY_EINVAL, "datum encode: data is NULL with data_size %zu",
                          d->data_size);
    if (d->float_count && !d->float_bytes && !d->msg_)
        return ferry__err(FERRY_EINVAL, "datum encode: float_bytes is NULL with float_count %zu",
                          d->float_count);
    size_t fbytes, need = 0, part;
    if (!ferry__mul_size(d->float_count, 4, &fbytes))
        return ferry__err(FERRY_EINVAL, "datum encode: float_count %zu is too large",
                          d->float_count);
    need += 1 + ferry__pb_varint_size(int32_wire(d->channels));
    need += 1 + ferry__pb_varint_size(int32_wire(d->height));
    need += 1 + ferry__pb_varint_size(int32_wire(d->width));
    if (d->data_size) {
        part = 1 + ferry__pb_varint_size(d->data_size);
        if (!ferry__add_size(need, part, &need) || !ferry__add_size(need, d->data_size, &need))
            return ferry__err(FERRY_EINVAL, "datum encode: the record would overflow size_t");
    }
    need += 1 + ferry__pb_varint_size(int32_wire(d->label));
    if (d->float_count) {
        part = 1 + ferry__pb_varint_size(fbytes);
        if (!ferry__add_size(need, part, &need) || !ferry__add_size(need, fbytes, &need))
            return ferry__err(FERRY_EINVAL, "datum encode: the record would overflow size_t");
    }
    need += 2;
    *size = need;
    if (cap < need || !buf)
        return ferry__err(FERRY_EOVERFLOW, "datum encode: the record needs %zu bytes, room for %zu",
                          need, cap);
    uint8_t *o = buf;
    *o++ = 1 << 3;
    o = ferry__pb_put_varint(o, int32_wire(d->channels));
    *o++ = 2 << 3;
    o = ferry__pb_put_varint(o, int32_wire(d->height));
    *o++ = 3 << 3;
    o = ferry__pb_put_varint(o, int32_wire(d->width));
    if (d->data_size) {
        *o++ = 4 << 3 | FERRY__WT_LEN;
        o = ferry__pb_put_varint(o, d->data_size);
        memcpy(o, d->data, d->data_size);
        o += d->data_size;
    }
    *o++ = 5 << 3;
    o = ferry__pb_put_varint(o, int32_wire(d->label));
    if (d->float_count) {
        *o++ = 6 << 3 | FERRY__WT_LEN;
        o = ferry__pb_put_varint(o, fbytes);
        if (copy_floats_le(d, o, d->float_count) != d->float_count)
            return ferry__err(FERRY_EINVAL, "datum encode: the floats could not be read back");
        o += fbytes;
    }
    *o++ = 7 << 3;
    *o++ = d->encoded ? 1 : 0;
    /* The same rules as the reader: what is written always decodes. */
    ferry_datum check;
    int rc = walk(buf, need, &check, NULL, 0);
    if (rc < 0)
        return ferry__err_prefix(FERRY_EINVAL, "datum encode: the record would not decode");
    return 0;
}
