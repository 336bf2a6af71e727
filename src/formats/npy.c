/*
 * The .npy header: magic, version, a length, and a Python dict literal
 * {'descr': ..., 'fortran_order': ..., 'shape': (...)} read by a small tokenizer
 * (no recursion: the only nesting allowed is a structured dtype's list of member
 * tuples, each with an optional shape tuple).
 * https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
 */
#include "ferry/npy.h"
#include "../core/internal.h"
#include "../core/bytes.h"

#include <stdio.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy: byte-order conversion assumes a little-endian host"
#endif

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

enum { T_END, T_STR, T_INT, T_TRUE, T_FALSE, T_PUNCT };

typedef struct lex {
    const char *name;
    const char *t;
    size_t n, pos, base; /* base: the text's offset in the file */
    /* the current token */
    int kind;
    char punct;
    const char *s;
    size_t slen;
    int64_t i;
    size_t at; /* its offset in the text */
} lex;

static int lerr(const lex *l, int rc, const char *why)
{
    return ferry__err(rc, "%s: offset %zu: %s", l->name, l->base + l->at, why);
}

static int next(lex *l)
{
    while (l->pos < l->n && (l->t[l->pos] == ' ' || l->t[l->pos] == '\n' || l->t[l->pos] == '\t' ||
                             l->t[l->pos] == '\r'))
        l->pos++;
    l->at = l->pos;
    if (l->pos >= l->n) {
        l->kind = T_END;
        return 0;
    }
    char c = l->t[l->pos];
    if (c == '\'' || c == '"') {
        size_t start = ++l->pos;
        while (l->pos < l->n && l->t[l->pos] != c) {
            if (l->t[l->pos] == '\\')
                return lerr(l, FERRY_ECORRUPT, "escapes in header strings are not supported");
            l->pos++;
        }
        if (l->pos >= l->n)
            return lerr(l, FERRY_ECORRUPT, "string not closed in the header");
        l->kind = T_STR;
        l->s = l->t + start;
        l->slen = l->pos - start;
        l->pos++;
        return 0;
    }
    if (c >= '0' && c <= '9') {
        uint64_t v = 0;
        while (l->pos < l->n && l->t[l->pos] >= '0' && l->t[l->pos] <= '9') {
            if (v > ((uint64_t)INT64_MAX - 9) / 10)
                return lerr(l, FERRY_EOVERFLOW, "a number in the header is too large");
            v = v * 10 + (uint64_t)(l->t[l->pos++] - '0');
        }
        if (l->pos < l->n && (l->t[l->pos] == 'L' || l->t[l->pos] == 'l'))
            l->pos++; /* Python 2's long literal: "(2L,)" */
        l->kind = T_INT;
        l->i = (int64_t)v;
        return 0;
    }
    if (l->n - l->pos >= 4 && !memcmp(l->t + l->pos, "True", 4)) {
        l->kind = T_TRUE;
        l->pos += 4;
        return 0;
    }
    if (l->n - l->pos >= 5 && !memcmp(l->t + l->pos, "False", 5)) {
        l->kind = T_FALSE;
        l->pos += 5;
        return 0;
    }
    if (strchr("{}()[],:", c)) {
        l->kind = T_PUNCT;
        l->punct = c;
        l->pos++;
        return 0;
    }
    char why[64];
    snprintf(why, sizeof why, "unexpected character 0x%02x in the header", (unsigned char)c);
    return lerr(l, FERRY_ECORRUPT, why);
}

static bool is_punct(const lex *l, char c)
{
    return l->kind == T_PUNCT && l->punct == c;
}

static int expect(lex *l, char c)
{
    if (!is_punct(l, c)) {
        char why[48];
        snprintf(why, sizeof why, "expected '%c' in the header", c);
        return lerr(l, FERRY_ECORRUPT, why);
    }
    return next(l);
}

/* A shape tuple at the current '(' token: dims into shape, count into *ndim. */
static int parse_shape(lex *l, int64_t *shape, int *ndim, int max)
{
    int rc;
    if ((rc = expect(l, '(')) < 0)
        return rc;
    *ndim = 0;
    while (!is_punct(l, ')')) {
        if (l->kind != T_INT)
            return lerr(l, FERRY_ECORRUPT, "a shape holds non-negative integers");
        if (*ndim == max) {
            char why[64];
            snprintf(why, sizeof why, "more than %d dimensions", max);
            return lerr(l, FERRY_EOVERFLOW, why);
        }
        shape[(*ndim)++] = l->i;
        if ((rc = next(l)) < 0)
            return rc;
        if (is_punct(l, ','))
            rc = next(l);
        else if (!is_punct(l, ')'))
            return lerr(l, FERRY_ECORRUPT, "expected ',' or ')' in a shape");
        if (rc < 0)
            return rc;
    }
    return next(l);
}

/* A dtype string ("<f8", "|b1", ">c16", "S5", "<U8") into m. */
static int parse_typestr(lex *l, const char *s, size_t n, ferry_npy_member *m)
{
    char ts[32];
    if (n == 0 || n >= sizeof ts)
        return lerr(l, FERRY_ECORRUPT, "empty or overlong dtype string");
    memcpy(ts, s, n);
    ts[n] = 0;
    char order = '|';
    const char *p = ts;
    if (strchr("<>|=", *p))
        order = *p++;
    char kind = *p++;
    uint64_t size = 0;
    char why[128];
    if (kind == 'O') {
        snprintf(why, sizeof why,
                 "dtype \"%s\" is an object array (Python pickles: code in data); refused", ts);
        return lerr(l, FERRY_ENOTSUP, why);
    }
    if (kind == 'M' || kind == 'm') {
        snprintf(why, sizeof why, "dtype \"%s\" (datetime) is not supported", ts);
        return lerr(l, FERRY_ENOTSUP, why);
    }
    if (!*p && (kind == 'S' || kind == 'U' || kind == 'V' || kind == 'a'))
        size = 0;
    else if (!ferry__parse_u64(p, &size) || size > ((uint64_t)1 << 30)) {
        snprintf(why, sizeof why, "unknown dtype \"%s\"", ts);
        return lerr(l, FERRY_ECORRUPT, why);
    }
    bool big = order == '>';
    memset(m->shape, 0, sizeof m->shape);
    m->ndim = 0;
    m->swap = 0;
    m->nbytes = (size_t)size;
    switch (kind) {
    case 'b':
        if (size != 1)
            goto unknown;
        m->dtype = FERRY_BOOL;
        return 0;
    case 'i':
    case 'u': {
        static const ferry_dtype si[] = {FERRY_I8, FERRY_I16, FERRY_I32, FERRY_I64},
                                 un[] = {FERRY_U8, FERRY_U16, FERRY_U32, FERRY_U64};
        int k = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
        if (k < 0)
            goto unknown;
        m->dtype = kind == 'i' ? si[k] : un[k];
        m->swap = big && size > 1 ? (unsigned)size : 0;
        return 0;
    }
    case 'f':
        if (size == 2)
            m->dtype = FERRY_F16;
        else if (size == 4)
            m->dtype = FERRY_F32;
        else if (size == 8)
            m->dtype = FERRY_F64;
        else if (size == 12 || size == 16)
            goto refused_longdouble;
        else
            goto unknown;
        m->swap = big ? (unsigned)size : 0;
        return 0;
    case 'c':
        if (size == 8)
            m->dtype = FERRY_F32;
        else if (size == 16)
            m->dtype = FERRY_F64;
        else if (size == 24 || size == 32)
            goto refused_longdouble;
        else
            goto unknown;
        m->ndim = 1;
        m->shape[0] = 2;
        m->swap = big ? (unsigned)size / 2 : 0;
        return 0;
    case 'S':
    case 'a':
    case 'V':
        if (size == 0)
            goto unknown;
        m->dtype = FERRY_U8;
        m->ndim = 1;
        m->shape[0] = (int64_t)size;
        return 0;
    case 'U':
        if (size == 0)
            goto unknown;
        m->dtype = FERRY_U32;
        m->ndim = 1;
        m->shape[0] = (int64_t)size;
        m->nbytes = (size_t)size * 4;
        m->swap = big ? 4 : 0;
        return 0;
    default:
        goto unknown;
    }
refused_longdouble:
    snprintf(why, sizeof why, "dtype \"%s\" (long double) is not supported", ts);
    return lerr(l, FERRY_ENOTSUP, why);
unknown:
    snprintf(why, sizeof why, "unknown dtype \"%s\"", ts);
    return lerr(l, FERRY_ECORRUPT, why);
}

/* A field name into out as UTF-8: NumPy writes version 1 and 2 headers in latin-1
 * (each byte one code point) and version 3 in UTF-8. */
static int member_name(const lex *l, int major, const char *name, size_t nlen, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < nlen; i++) {
        unsigned char c = (unsigned char)name[i];
        if (o + (major < 3 && c >= 0x80 ? 2 : 1) >= FERRY_MAX_NAME)
            return lerr(l, FERRY_EOVERFLOW, "a structured field's name is too long");
        if (major < 3 && c >= 0x80) {
            out[o++] = (char)(0xc0 | c >> 6);
            out[o++] = (char)(0x80 | (c & 0x3f));
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
    if (!ferry__utf8_valid(out, o)) {
        char esc[4 * FERRY_MAX_NAME + 1], why[4 * FERRY_MAX_NAME + 64];
        snprintf(why, sizeof why, "a structured field's name \"%s\" is not UTF-8",
                 ferry__escape(esc, sizeof esc, out, o));
        return lerr(l, FERRY_ECORRUPT, why);
    }
    return 0;
}

/* A structured dtype: [('name', 'typestr'[, shape]), ...] at the current '['. */
static int parse_struct(lex *l, ferry_npy_header *h)
{
    int rc;
    size_t off = 0;
    h->structured = 1;
    if ((rc = next(l)) < 0)
        return rc;
    while (!is_punct(l, ']')) {
        ferry_npy_member m;
        memset(&m, 0, sizeof m);
        if ((rc = expect(l, '(')) < 0)
            return rc;
        const char *name = NULL;
        size_t nlen = 0;
        if (is_punct(l, '('))
            return lerr(l, FERRY_ENOTSUP, "titled structured fields are not supported");
        if (l->kind != T_STR)
            return lerr(l, FERRY_ECORRUPT, "a structured field's name must be a string");
        name = l->s;
        nlen = l->slen;
        if ((rc = next(l)) < 0 || (rc = expect(l, ',')) < 0)
            return rc;
        if (is_punct(l, '['))
            return lerr(l, FERRY_ENOTSUP, "nested structured dtypes are not supported");
        if (l->kind != T_STR)
            return lerr(l, FERRY_ECORRUPT, "a structured field's dtype must be a string");
        if ((rc = parse_typestr(l, l->s, l->slen, &m)) < 0 || (rc = next(l)) < 0)
            return rc;
        int64_t sub[FERRY_MAX_DIMS];
        int nsub = 0;
        if (is_punct(l, ',')) {
            if ((rc = next(l)) < 0)
                return rc;
            if (is_punct(l, '(')) {
                if ((rc = parse_shape(l, sub, &nsub, FERRY_MAX_DIMS)) < 0)
                    return rc;
            } else if (l->kind == T_INT) { /* a shape written as a bare integer */
                sub[nsub++] = l->i;
                if ((rc = next(l)) < 0)
                    return rc;
            }
        }
        if ((rc = expect(l, ')')) < 0)
            return rc;
        if (nsub + m.ndim > FERRY_MAX_DIMS)
            return lerr(l, FERRY_EOVERFLOW, "a structured field has too many dimensions");
        size_t count = 1;
        for (int k = 0; k < nsub; k++)
            if (!ferry__mul_size(count, (size_t)sub[k], &count) || count > ((size_t)1 << 30))
                return lerr(l, FERRY_EOVERFLOW, "a structured field's shape is too large");
        if (nsub) {
            memmove(m.shape + nsub, m.shape, (size_t)m.ndim * sizeof m.shape[0]);
            memcpy(m.shape, sub, (size_t)nsub * sizeof sub[0]);
            m.ndim += nsub;
        }
        size_t bytes;
        if (!ferry__mul_size(m.nbytes, count, &bytes) || bytes > ((size_t)1 << 30))
            return lerr(l, FERRY_EOVERFLOW, "a structured field is too large");
        m.nbytes = bytes;
        m.offset = off;
        off += bytes;
        if (nlen > 0) { /* unnamed members are numpy's padding */
            if (h->nmembers == FERRY_MAX_FIELDS) {
                char why[64];
                snprintf(why, sizeof why, "more than %d structured fields", FERRY_MAX_FIELDS);
                return lerr(l, FERRY_EOVERFLOW, why);
            }
            if ((rc = member_name(l, h->major, name, nlen, m.name)) < 0)
                return rc;
            h->members[h->nmembers++] = m;
        }
        if (is_punct(l, ','))
            rc = next(l);
        else if (!is_punct(l, ']'))
            return lerr(l, FERRY_ECORRUPT, "expected ',' or ']' in a structured dtype");
        if (rc < 0)
            return rc;
    }
    if (h->nmembers == 0)
        return lerr(l, FERRY_ECORRUPT, "a structured dtype with no named fields");
    h->itemsize = off;
    return next(l);
}

int ferry_npy_parse_header(const void *buf, size_t n, const char *name, ferry_npy_header *h)
{
    const uint8_t *p = buf;
    memset(h, 0, sizeof *h);
    if (!name)
        name = "npy";
    if (n < 10 || memcmp(p, MAGIC, 6) != 0)
        return ferry__err(FERRY_ECORRUPT, "%s: offset 0: not a .npy file (no \\x93NUMPY magic)",
                          name);
    h->major = p[6];
    h->minor = p[7];
    size_t hlen, start;
    if (h->major == 1) {
        hlen = ferry__load_le16(p + 8);
        start = 10;
    } else if (h->major == 2 || h->major == 3) {
        if (n < 12)
            return ferry__err(FERRY_ECORRUPT, "%s: offset 8: the header length is cut off", name);
        hlen = ferry__load_le32(p + 8);
        start = 12;
    } else {
        return ferry__err(FERRY_ENOTSUP,
                          "%s: offset 6: format version %d.%d is not 1.0, 2.0 or 3.0", name,
                          h->major, h->minor);
    }
    if (hlen > FERRY_NPY_MAX_HEADER)
        return ferry__err(FERRY_EOVERFLOW, "%s: offset 8: header length %zu is over the %zu limit",
                          name, hlen, FERRY_NPY_MAX_HEADER);
    if (hlen > n - start)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 8: header length %zu runs past the end (%zu bytes after "
                          "offset %zu)",
                          name, hlen, n - start, start);
    h->data_offset = start + hlen;
    lex l = {.name = name, .t = (const char *)p + start, .n = hlen, .base = start};
    int rc;
    bool have_descr = false, have_order = false, have_shape = false;
    if ((rc = next(&l)) < 0 || (rc = expect(&l, '{')) < 0)
        return rc;
    while (!is_punct(&l, '}')) {
        if (l.kind != T_STR)
            return lerr(&l, FERRY_ECORRUPT, "expected a key string in the header dict");
        const char *key = l.s;
        size_t klen = l.slen;
        if ((rc = next(&l)) < 0 || (rc = expect(&l, ':')) < 0)
            return rc;
        if (klen == 5 && !memcmp(key, "descr", 5) && !have_descr) {
            have_descr = true;
            if (is_punct(&l, '[')) {
                if ((rc = parse_struct(&l, h)) < 0)
                    return rc;
            } else if (l.kind == T_STR) {
                ferry_npy_member m;
                memset(&m, 0, sizeof m);
                if ((rc = parse_typestr(&l, l.s, l.slen, &m)) < 0 || (rc = next(&l)) < 0)
                    return rc;
                h->itemsize = m.nbytes;
                h->nmembers = 1;
                h->members[0] = m;
            } else {
                return lerr(&l, FERRY_ECORRUPT, "'descr' is neither a string nor a list");
            }
        } else if (klen == 13 && !memcmp(key, "fortran_order", 13) && !have_order) {
            have_order = true;
            if (l.kind != T_TRUE && l.kind != T_FALSE)
                return lerr(&l, FERRY_ECORRUPT, "'fortran_order' is not True or False");
            h->fortran = l.kind == T_TRUE;
            if ((rc = next(&l)) < 0)
                return rc;
        } else if (klen == 5 && !memcmp(key, "shape", 5) && !have_shape) {
            have_shape = true;
            if ((rc = parse_shape(&l, h->shape, &h->ndim, FERRY_MAX_DIMS)) < 0)
                return rc;
        } else {
            char why[96];
            snprintf(why, sizeof why, "unknown or repeated key \"%.*s\" in the header",
                     (int)(klen > 40 ? 40 : klen), key);
            return lerr(&l, FERRY_ECORRUPT, why);
        }
        if (is_punct(&l, ','))
            rc = next(&l);
        else if (!is_punct(&l, '}'))
            return lerr(&l, FERRY_ECORRUPT, "expected ',' or '}' in the header dict");
        if (rc < 0)
            return rc;
    }
    if ((rc = next(&l)) < 0)
        return rc;
    if (l.kind != T_END)
        return lerr(&l, FERRY_ECORRUPT, "text after the header dict");
    if (!have_descr || !have_order || !have_shape)
        return ferry__err(FERRY_ECORRUPT, "%s: offset %zu: the header lacks '%s'", name, start,
                          !have_descr   ? "descr"
                          : !have_order ? "fortran_order"
                                        : "shape");
    if (h->itemsize == 0)
        return ferry__err(FERRY_ECORRUPT, "%s: offset %zu: a zero-byte dtype", name, start);
    uint64_t total = h->itemsize;
    for (int k = 0; k < h->ndim; k++)
        if (__builtin_mul_overflow(total, (uint64_t)h->shape[k], &total) ||
            total > (uint64_t)INT64_MAX)
            return ferry__err(FERRY_EOVERFLOW, "%s: offset %zu: the shape's byte size overflows",
                              name, start);
    h->data_bytes = total;
    return 0;
}
