/*
 * Caffe2's TensorProtos: a hand-written reader of its protobuf wire format
 * (protowire.h, shared with datum.c), in place, checking every length and count.
 */
#include "ferry/caffe2.h"
#include "protowire.h"
#include "../core/bytes.h"

#include <stdio.h>
#include <string.h>

/* The fields of a TensorProto ferry reads, and their wire types (packed is LEN). */
enum {
    F_DIMS = 1,
    F_TYPE = 2,
    F_FLOAT = 3,
    F_INT32 = 4,
    F_BYTES = 5,
    F_STRING = 6,
    F_NAME = 7,
    F_DOUBLE = 9,
    F_INT64 = 10
};

static const char *field_name(unsigned f)
{
    static const char *const names[11] = {NULL,         "dims",        "data_type",   "float_data",
                                          "int32_data", "byte_data",   "string_data", "name",
                                          NULL,         "double_data", "int64_data"};
    return f < 11 && names[f] ? names[f] : "unknown";
}

/* Which field holds the values of a data type. */
static unsigned values_field(int32_t type)
{
    switch (type) {
    case FERRY_C2_FLOAT:
        return F_FLOAT;
    case FERRY_C2_INT32:
    case FERRY_C2_BOOL:
    case FERRY_C2_UINT8:
    case FERRY_C2_INT8:
    case FERRY_C2_UINT16:
    case FERRY_C2_INT16:
    case FERRY_C2_FLOAT16:
        return F_INT32;
    case FERRY_C2_BYTE:
        return F_BYTES;
    case FERRY_C2_STRING:
        return F_STRING;
    case FERRY_C2_DOUBLE:
        return F_DOUBLE;
    case FERRY_C2_INT64:
        return F_INT64;
    }
    return 0;
}

/* Where values go on the second walk (ferry_tensor_proto_values). */
typedef struct sink {
    ferry_dtype dt;
    uint8_t *dst;
    uint64_t cap, got;
} sink;

static void put_value(sink *s, int64_t iv, double fv, bool is_float)
{
    if (s->got >= s->cap)
        return;
    uint8_t *o = s->dst + s->got * ferry_dtype_size(s->dt);
    s->got++;
    switch (s->dt) {
    case FERRY_F32: {
        float f = is_float ? (float)fv : (float)iv;
        memcpy(o, &f, 4);
        break;
    }
    case FERRY_F64: {
        double d = is_float ? fv : (double)iv;
        memcpy(o, &d, 8);
        break;
    }
    case FERRY_I64:
        memcpy(o, &iv, 8);
        break;
    case FERRY_I32: {
        int32_t x = (int32_t)iv;
        memcpy(o, &x, 4);
        break;
    }
    case FERRY_U16:
    case FERRY_I16:
    case FERRY_F16: {
        uint16_t x = (uint16_t)iv;
        memcpy(o, &x, 2);
        break;
    }
    default: /* U8, I8, BOOL */
        *o = (uint8_t)iv;
        break;
    }
}

static float le_float(const uint8_t *b)
{
    uint32_t u = ferry__load_le32(b);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double le_double(const uint8_t *b)
{
    uint64_t u = ferry__load_le64(b);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Walks one TensorProto, p[start, end) (positions are the whole buffer's). With
 * a sink, emits the values of field vf instead of checking. */
static int walk_proto(const char *what, const uint8_t *p, size_t start, size_t end,
                      ferry_tensor_proto *t, sink *s, unsigned vf)
{
    uint64_t counts[11] = {0};
    size_t pos = start, strings = 0, nbytes = 0, first_len = 0;
    const uint8_t *bytes = NULL, *first = NULL; /* byte_data; the first string */
    int rc;
    if (!s) {
        memset(t, 0, sizeof *t);
        t->data_type = FERRY_C2_FLOAT;
        t->msg_ = p + start;
        t->msg_size_ = end - start;
    }
    while (pos < end) {
        size_t at = pos, len = 0;
        unsigned f, wt;
        uint64_t v = 0;
        const uint8_t *body = NULL;
        if ((rc = ferry__pb_tag(what, p, end, &pos, &f, &wt)) < 0)
            return rc;
        unsigned want = FERRY__WT_VARINT;
        bool packable =
            f == F_DIMS || f == F_FLOAT || f == F_INT32 || f == F_DOUBLE || f == F_INT64;
        if (f == F_FLOAT)
            want = FERRY__WT_I32;
        else if (f == F_DOUBLE)
            want = FERRY__WT_I64;
        else if (f == F_BYTES || f == F_STRING || f == F_NAME)
            want = FERRY__WT_LEN;
        bool known = f <= F_INT64 && f != 8;
        if (known && wt != want && !(packable && wt == FERRY__WT_LEN))
            return ferry__err(FERRY_ECORRUPT,
                              "%s: byte %zu: field %u (%s) has wire type %u, expected %u%s", what,
                              at, f, field_name(f), wt, want, packable ? " or 2 (packed)" : "");
        if ((rc = ferry__pb_payload(what, p, end, &pos, at, f, wt, &v, &body, &len)) < 0)
            return rc;
        if (!known || (s && f != vf))
            continue;
        if (f == F_TYPE) {
            int32_t x;
            if ((rc = ferry__pb_int32(what, v, at, f, "data_type", &x)) < 0)
                return rc;
            t->data_type = x;
        } else if (f == F_NAME) {
            t->name = (const char *)body;
            t->name_len = len;
        } else if (f == F_BYTES) {
            bytes = body; /* the last one wins, as in protobuf */
            nbytes = len;
            if (s) { /* only the last: the sink starts over */
                s->got = 0;
                for (size_t k = 0; k < len; k++)
                    put_value(s, body[k], 0, false);
            }
        } else if (f == F_STRING) {
            if (strings++ == 0) {
                first = body;
                first_len = len;
            }
        } else if (f == F_FLOAT || f == F_DOUBLE) {
            size_t w = f == F_FLOAT ? 4 : 8;
            if (len % w)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: byte %zu: field %u (%s) packed length %zu is not a "
                                  "multiple of %zu",
                                  what, at, f, field_name(f), len, w);
            counts[f] += len / w;
            for (size_t k = 0; s && k < len; k += w)
                put_value(s, 0, w == 4 ? le_float(body + k) : le_double(body + k), true);
        } else { /* dims, int32_data, int64_data: one varint, or a packed run of them */
            size_t vp = 0, vn = len;
            bool one = wt == FERRY__WT_VARINT;
            while (one || vp < vn) {
                size_t vat = one ? at : (size_t)(body - p) + vp;
                uint64_t x = v;
                if (!one) {
                    /* positions inside the run, shifted to the buffer's for messages */
                    size_t q = (size_t)(body - p) + vp;
                    if ((rc = ferry__pb_varint(what, p, (size_t)(body - p) + vn, &q, &x)) < 0)
                        return rc;
                    vp = q - (size_t)(body - p);
                }
                int64_t iv = (int64_t)x;
                if (f == F_INT32) {
                    int32_t y;
                    if ((rc = ferry__pb_int32(what, x, vat, f, "int32_data", &y)) < 0)
                        return rc;
                    iv = y;
                } else if (f == F_DIMS && !s) {
                    if (iv < 0)
                        return ferry__err(FERRY_ECORRUPT,
                                          "%s: byte %zu: dims value %lld is negative", what, vat,
                                          (long long)iv);
                    if (t->ndim == FERRY_MAX_DIMS)
                        return ferry__err(FERRY_ECORRUPT, "%s: byte %zu: more than %d dims", what,
                                          vat, FERRY_MAX_DIMS);
                    t->dims[t->ndim++] = iv;
                }
                counts[f]++;
                if (s)
                    put_value(s, iv, 0, false);
                if (one)
                    break;
            }
        }
    }
    if (s)
        return 0;
    unsigned which = values_field(t->data_type);
    t->bytes = which == F_BYTES ? bytes : which == F_STRING ? first : NULL;
    t->nbytes = which == F_BYTES ? nbytes : which == F_STRING ? first_len : 0;
    if (which == F_STRING)
        t->count = strings;
    else if (which == F_BYTES)
        t->count = nbytes;
    else if (which)
        t->count = counts[which];
    else
        t->count = 0;
    if (t->ndim > 0) {
        uint64_t prod = 1;
        bool over = false;
        for (int k = 0; k < t->ndim; k++)
            over |= __builtin_mul_overflow(prod, (uint64_t)t->dims[k], &prod);
        if (over || prod != t->count)
            return ferry__err(
                FERRY_ECORRUPT, "%s: dims hold %s%llu values, but data_type %d stores %llu in %s",
                what, over ? "over " : "", (unsigned long long)(over ? UINT64_MAX : prod),
                t->data_type, (unsigned long long)t->count, which ? field_name(which) : "no field");
    }
    return 0;
}

int ferry_tensorprotos_decode(const void *buf, size_t n, ferry_tensor_proto *out, size_t cap,
                              size_t *count)
{
    if (!count || (cap && !out))
        return ferry__err(FERRY_EINVAL, "tensorprotos: count or out is NULL");
    if (!buf && n)
        return ferry__err(FERRY_EINVAL, "tensorprotos: buf is NULL");
    const uint8_t *p = buf;
    size_t pos = 0, k = 0;
    *count = 0;
    while (pos < n) {
        size_t at = pos, len = 0;
        unsigned f, wt;
        uint64_t v = 0;
        const uint8_t *body = NULL;
        int rc = ferry__pb_tag("tensorprotos", p, n, &pos, &f, &wt);
        if (rc < 0)
            return rc;
        if (f == 1 && wt != FERRY__WT_LEN)
            return ferry__err(FERRY_ECORRUPT,
                              "tensorprotos: byte %zu: field 1 (protos) has wire type %u, "
                              "expected 2",
                              at, wt);
        if ((rc = ferry__pb_payload("tensorprotos", p, n, &pos, at, f, wt, &v, &body, &len)) < 0)
            return rc;
        if (f != 1)
            continue;
        char what[48];
        snprintf(what, sizeof what, "tensorprotos: proto %zu", k);
        ferry_tensor_proto scratch;
        size_t b = (size_t)(body - p);
        if ((rc = walk_proto(what, p, b, b + len, k < cap ? &out[k] : &scratch, NULL, 0)) < 0)
            return rc;
        k++;
    }
    *count = k;
    return 0;
}

ferry_dtype ferry_tensor_proto_dtype(const ferry_tensor_proto *t)
{
    switch (t ? t->data_type : -1) {
    case FERRY_C2_FLOAT:
        return FERRY_F32;
    case FERRY_C2_DOUBLE:
        return FERRY_F64;
    case FERRY_C2_INT32:
        return FERRY_I32;
    case FERRY_C2_INT64:
        return FERRY_I64;
    case FERRY_C2_BOOL:
        return FERRY_BOOL;
    case FERRY_C2_UINT8:
    case FERRY_C2_BYTE:
        return FERRY_U8;
    case FERRY_C2_INT8:
        return FERRY_I8;
    case FERRY_C2_UINT16:
        return FERRY_U16;
    case FERRY_C2_INT16:
        return FERRY_I16;
    case FERRY_C2_FLOAT16:
        return FERRY_F16;
    }
    return FERRY_DTYPE_INVALID;
}

uint64_t ferry_tensor_proto_values(const ferry_tensor_proto *t, ferry_dtype dt, void *dst,
                                   uint64_t n)
{
    ferry_dtype own = ferry_tensor_proto_dtype(t);
    if (!dst || own == FERRY_DTYPE_INVALID || !t->msg_)
        return 0;
    bool is_float = own == FERRY_F32 || own == FERRY_F64 || own == FERRY_F16;
    if (dt != own && dt != FERRY_F32 && dt != FERRY_F64 && !(dt == FERRY_I64 && !is_float))
        return 0;
    if (own == FERRY_F16 && dt != own)
        return 0; /* half floats are stored as their bits */
    uint64_t m = n < t->count ? n : t->count;
    if (m == 0)
        return 0;
    if (t->data_type == FERRY_C2_BYTE && dt == FERRY_U8) {
        memcpy(dst, t->bytes, m);
        return m;
    }
    sink s = {dt, dst, m, 0};
    ferry_tensor_proto again = *t;
    char saved[FERRY_ERRMSG_MAX];
    ferry__err_copy(saved);
    int rc = walk_proto("tensorprotos", t->msg_, 0, t->msg_size_, &again, &s,
                        values_field(t->data_type));
    if (rc < 0) {
        ferry__err(0, "%s", saved); /* a damaged struct: keep the caller's message */
        return 0;
    }
    return s.got < m ? s.got : m;
}

int ferry_tensor_proto_string(const ferry_tensor_proto *t, uint64_t k, const uint8_t **s,
                              size_t *len)
{
    if (!t || !s || !len)
        return ferry__err(FERRY_EINVAL, "tensorprotos: t, s or len is NULL");
    if (t->data_type != FERRY_C2_STRING || k >= t->count || !t->msg_)
        return ferry__err(FERRY_ERANGE, "tensorprotos: string %llu of %llu", (unsigned long long)k,
                          (unsigned long long)(t->data_type == FERRY_C2_STRING ? t->count : 0));
    size_t pos = 0, n = t->msg_size_;
    uint64_t seen = 0;
    while (pos < n) {
        size_t at = pos, blen = 0;
        unsigned f, wt;
        uint64_t v;
        const uint8_t *body = NULL;
        int rc = ferry__pb_tag("tensorprotos", t->msg_, n, &pos, &f, &wt);
        if (rc == 0)
            rc = ferry__pb_payload("tensorprotos", t->msg_, n, &pos, at, f, wt, &v, &body, &blen);
        if (rc < 0)
            return rc;
        if (f == F_STRING && wt == FERRY__WT_LEN && seen++ == k) {
            *s = body;
            *len = blen;
            return 0;
        }
    }
    return ferry__err(FERRY_ERANGE, "tensorprotos: string %llu of %llu", (unsigned long long)k,
                      (unsigned long long)seen);
}
