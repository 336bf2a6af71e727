/*
 * tf.train.Example from protobuf wire bytes, without a protobuf library:
 * example.proto and feature.proto define six small messages and the parser walks
 * them with a fixed nesting, so its depth is bounded by construction.
 */
#include "example.h"

#include <string.h>

#define WIRE_VARINT 0
#define WIRE_I64 1
#define WIRE_LEN 2
#define WIRE_I32 5

/* A cursor over one message: [p, end) with base = offset of p in the record. */
typedef struct cur {
    const uint8_t *start, *p, *end;
    size_t base;
} cur;

static size_t at(const cur *c)
{
    return c->base + (size_t)(c->p - c->start);
}

static int varint(cur *c, uint64_t *v)
{
    uint64_t x = 0;
    size_t pos = at(c);
    for (int i = 0; i < 10; i++) {
        if (c->p >= c->end)
            return ferry__err(FERRY_ECORRUPT, "protobuf: varint runs past its message at byte %zu",
                              pos);
        uint8_t b = *c->p++;
        if (i == 9 && b > 1)
            return ferry__err(FERRY_ECORRUPT, "protobuf: bad varint (over 64 bits) at byte %zu",
                              pos);
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return ferry__err(FERRY_ECORRUPT, "protobuf: bad varint (over 10 bytes) at byte %zu", pos);
}

/* The next field's tag; 1 when there is one, 0 at the message's end. */
static int tag(cur *c, uint32_t *field, int *wire)
{
    if (c->p >= c->end)
        return 0;
    size_t pos = at(c);
    uint64_t t;
    int rc = varint(c, &t);
    if (rc < 0)
        return rc;
    *wire = (int)(t & 7);
    if ((t >> 3) == 0 || (t >> 3) > 0x1fffffff)
        return ferry__err(FERRY_ECORRUPT, "protobuf: bad field number %llu at byte %zu",
                          (unsigned long long)(t >> 3), pos);
    *field = (uint32_t)(t >> 3);
    if (*wire != WIRE_VARINT && *wire != WIRE_I64 && *wire != WIRE_LEN && *wire != WIRE_I32)
        return ferry__err(
            FERRY_ECORRUPT, "protobuf: field %u has wire type %d%s at byte %zu", *field, *wire,
            *wire == 3 || *wire == 4 ? " (groups, not used by tf.train)" : " (bad)", pos);
    return 1;
}

/* A length-delimited payload as a sub-cursor. */
static int sub(cur *c, cur *out)
{
    size_t pos = at(c);
    uint64_t len;
    int rc = varint(c, &len);
    if (rc < 0)
        return rc;
    if (len > (uint64_t)(c->end - c->p))
        return ferry__err(FERRY_ECORRUPT,
                          "protobuf: length %llu at byte %zu runs past its message (%zu bytes "
                          "left)",
                          (unsigned long long)len, pos, (size_t)(c->end - c->p));
    out->start = out->p = c->p;
    out->end = c->p + len;
    out->base = at(c);
    c->p += len;
    return 0;
}

static int skip(cur *c, int wire)
{
    uint64_t v;
    cur s = {0};
    size_t need = wire == WIRE_I64 ? 8 : 4;
    switch (wire) {
    case WIRE_VARINT:
        return varint(c, &v);
    case WIRE_LEN:
        return sub(c, &s);
    default:
        if ((size_t)(c->end - c->p) < need)
            return ferry__err(FERRY_ECORRUPT,
                              "protobuf: fixed field runs past its message at "
                              "byte %zu",
                              at(c));
        c->p += need;
        return 0;
    }
}

static int parse_feature(cur *c, ferry__feature *f)
{
    uint32_t field = 0;
    int wire = 0, rc;
    f->kind = FERRY__FEAT_NONE;
    f->list = NULL;
    f->list_len = 0;
    f->base = c->base;
    while ((rc = tag(c, &field, &wire)) == 1) {
        if (field >= 1 && field <= 3 && wire == WIRE_LEN) {
            cur l = {0};
            if ((rc = sub(c, &l)) < 0)
                return rc;
            f->kind = (int)field; /* oneof: the last one set wins */
            f->list = l.start;
            f->list_len = (size_t)(l.end - l.start);
            f->base = l.base;
        } else if ((rc = skip(c, wire)) < 0) {
            return rc;
        }
    }
    return rc;
}

/* A map entry: key = 1, value = 2 (a Feature, or with seq a FeatureList). */
static int parse_entry(cur *c, int seq, int (*fn)(void *, const ferry__feature *), void *arg)
{
    ferry__feature f = {.key = (const uint8_t *)"", .key_len = 0, .base = c->base, .seq = seq};
    uint32_t field = 0;
    int wire = 0, rc;
    while ((rc = tag(c, &field, &wire)) == 1) {
        cur s = {0};
        if (field == 1 && wire == WIRE_LEN) {
            if ((rc = sub(c, &s)) < 0)
                return rc;
            f.key = s.start;
            f.key_len = (size_t)(s.end - s.start);
        } else if (field == 2 && wire == WIRE_LEN) {
            if ((rc = sub(c, &s)) < 0)
                return rc;
            if (seq) {
                f.list = s.start;
                f.list_len = (size_t)(s.end - s.start);
                f.base = s.base;
            } else if ((rc = parse_feature(&s, &f)) < 0) {
                return rc;
            }
        } else if ((rc = skip(c, wire)) < 0) {
            return rc;
        }
    }
    if (rc < 0)
        return rc;
    if (seq) {
        if (!f.list)
            f.list = (const uint8_t *)"";
        /* the kind of a feature list: that of its first step with one */
        size_t pos = 0;
        ferry__feature step;
        f.kind = FERRY__FEAT_NONE;
        while (f.kind == FERRY__FEAT_NONE && (rc = ferry__feature_step(&f, &pos, &step)) == 1)
            f.kind = step.kind;
        if (rc < 0)
            return rc;
    }
    return fn(arg, &f);
}

int ferry__feature_step(const ferry__feature *fl, size_t *pos, ferry__feature *step)
{
    cur c = {fl->list, fl->list + *pos, fl->list + fl->list_len, fl->base};
    uint32_t field = 0;
    int wire = 0, rc;
    while ((rc = tag(&c, &field, &wire)) == 1) {
        if (field == 1 && wire == WIRE_LEN) {
            cur s = {0};
            if ((rc = sub(&c, &s)) < 0 || (rc = parse_feature(&s, step)) < 0)
                return rc;
            step->key = fl->key;
            step->key_len = fl->key_len;
            step->seq = 0;
            *pos = (size_t)(c.p - c.start);
            return 1;
        }
        if ((rc = skip(&c, wire)) < 0)
            return rc;
    }
    *pos = fl->list_len;
    return rc;
}

int ferry__example_walk(const uint8_t *p, size_t n, int (*fn)(void *arg, const ferry__feature *f),
                        void *arg)
{
    cur c = {p, p, p + n, 0};
    uint32_t field = 0;
    int wire = 0, rc;
    /* Example.features = 1; SequenceExample.context = 1 (the same Features message)
     * and SequenceExample.feature_lists = 2 (FeatureLists: a map of FeatureList) */
    while ((rc = tag(&c, &field, &wire)) == 1) {
        if ((field != 1 && field != 2) || wire != WIRE_LEN) {
            if ((rc = skip(&c, wire)) < 0)
                return rc;
            continue;
        }
        int seq = field == 2;
        cur feats = {0};
        if ((rc = sub(&c, &feats)) < 0)
            return rc;
        while ((rc = tag(&feats, &field, &wire)) == 1) {
            if (field != 1 || wire != WIRE_LEN) {
                if ((rc = skip(&feats, wire)) < 0)
                    return rc;
                continue;
            }
            cur entry = {0};
            if ((rc = sub(&feats, &entry)) < 0 || (rc = parse_entry(&entry, seq, fn, arg)) != 0)
                return rc;
        }
        if (rc < 0)
            return rc;
    }
    return rc;
}

/* Walks the list's field-1 values. */
typedef struct list_it {
    cur c;      /* the list message */
    cur packed; /* inside a packed run */
    bool in_packed;
} list_it;

static void list_start(list_it *it, const ferry__feature *f)
{
    it->c.start = it->c.p = f->list;
    it->c.end = f->list + f->list_len;
    it->c.base = f->base;
    it->in_packed = false;
}

/* Next numeric value: 1 with *v (the varint or the 4 raw bytes), 0 at the end. */
static int list_next(list_it *it, int kind, uint64_t *v)
{
    for (;;) {
        if (it->in_packed) {
            if (it->packed.p < it->packed.end) {
                if (kind == FERRY__FEAT_INT64)
                    return varint(&it->packed, v) < 0 ? FERRY_ECORRUPT : 1;
                uint32_t x;
                memcpy(&x, it->packed.p, 4);
                it->packed.p += 4;
                *v = x;
                return 1;
            }
            it->in_packed = false;
        }
        uint32_t field = 0;
        int wire = 0;
        int rc = tag(&it->c, &field, &wire);
        if (rc <= 0)
            return rc;
        if (field != 1) {
            if ((rc = skip(&it->c, wire)) < 0)
                return rc;
            continue;
        }
        if (wire == WIRE_LEN) {
            if ((rc = sub(&it->c, &it->packed)) < 0)
                return rc;
            if (kind == FERRY__FEAT_FLOAT && (it->packed.end - it->packed.p) % 4)
                return ferry__err(FERRY_ECORRUPT,
                                  "protobuf: packed floats of %zu bytes (not a multiple of 4) at "
                                  "byte %zu",
                                  (size_t)(it->packed.end - it->packed.p), it->packed.base);
            it->in_packed = true;
            continue;
        }
        if (kind == FERRY__FEAT_INT64 && wire == WIRE_VARINT)
            return varint(&it->c, v) < 0 ? FERRY_ECORRUPT : 1;
        if (kind == FERRY__FEAT_FLOAT && wire == WIRE_I32) {
            if (it->c.end - it->c.p < 4)
                return ferry__err(FERRY_ECORRUPT, "protobuf: float runs past its list at byte %zu",
                                  at(&it->c));
            uint32_t x;
            memcpy(&x, it->c.p, 4);
            it->c.p += 4;
            *v = x;
            return 1;
        }
        return ferry__err(FERRY_ECORRUPT, "protobuf: a %s list value has wire type %d at byte %zu",
                          kind == FERRY__FEAT_INT64 ? "int64" : "float", wire, at(&it->c));
    }
}

int ferry__feature_bytes_next(const ferry__feature *f, size_t *pos, const uint8_t **v, size_t *len)
{
    cur c = {f->list, f->list + *pos, f->list + f->list_len, f->base};
    uint32_t field = 0;
    int wire = 0, rc;
    while ((rc = tag(&c, &field, &wire)) == 1) {
        if (field == 1 && wire == WIRE_LEN) {
            cur s = {0};
            if ((rc = sub(&c, &s)) < 0)
                return rc;
            *v = s.start;
            *len = (size_t)(s.end - s.start);
            *pos = (size_t)(c.p - c.start);
            return 1;
        }
        if (field == 1)
            return ferry__err(FERRY_ECORRUPT,
                              "protobuf: a bytes value has wire type %d at byte %zu", wire, at(&c));
        if ((rc = skip(&c, wire)) < 0)
            return rc;
    }
    *pos = f->list_len;
    return rc;
}

int ferry__feature_count(const ferry__feature *f, uint64_t *count, uint64_t *max_len)
{
    *count = 0;
    *max_len = 0;
    int rc;
    if (f->kind == FERRY__FEAT_NONE)
        return 0;
    if (f->kind == FERRY__FEAT_BYTES) {
        size_t pos = 0, len;
        const uint8_t *v;
        while ((rc = ferry__feature_bytes_next(f, &pos, &v, &len)) == 1) {
            (*count)++;
            if (len > *max_len)
                *max_len = len;
        }
        return rc;
    }
    list_it it;
    uint64_t v;
    list_start(&it, f);
    while ((rc = list_next(&it, f->kind, &v)) == 1)
        (*count)++;
    return rc;
}

int ferry__feature_floats(const ferry__feature *f, float *dst, uint64_t cap, uint64_t *count)
{
    list_it it;
    uint64_t v, k = 0;
    int rc;
    list_start(&it, f);
    if (f->kind == FERRY__FEAT_FLOAT) {
        /* a single packed run (what TensorFlow writes): one copy */
        cur c = it.c;
        uint32_t field = 0;
        int wire = 0;
        if (tag(&c, &field, &wire) == 1 && field == 1 && wire == WIRE_LEN) {
            cur s = {0};
            if (sub(&c, &s) == 0 && c.p == c.end && (s.end - s.p) % 4 == 0) {
                k = (uint64_t)(s.end - s.p) / 4;
                memcpy(dst, s.p, (size_t)(k < cap ? k : cap) * 4);
                *count = k;
                return 0;
            }
        }
    }
    while ((rc = list_next(&it, f->kind, &v)) == 1) {
        if (k < cap) {
            uint32_t x = (uint32_t)v;
            memcpy(&dst[k], &x, 4);
        }
        k++;
    }
    *count = k;
    return rc;
}

int ferry__feature_int64s(const ferry__feature *f, int64_t *dst, uint64_t cap, uint64_t *count)
{
    list_it it;
    uint64_t v, k = 0;
    int rc;
    list_start(&it, f);
    while ((rc = list_next(&it, f->kind, &v)) == 1) {
        if (k < cap)
            dst[k] = (int64_t)v;
        k++;
    }
    *count = k;
    return rc;
}
