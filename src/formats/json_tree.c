/*
 * A bounded, non-recursive JSON reader (RFC 8259). See json.h.
 */
#include "json_tree.h"

#include <math.h>
#include <string.h>

typedef struct parser {
    const char *name, *t;
    size_t n, pos;
    ferry__jtree *doc;
    uint32_t cap, max_nodes;
} parser;

static int perr(const parser *p, const char *why)
{
    return ferry__err(FERRY_ECORRUPT, "%s: offset %zu: %s", p->name, p->pos, why);
}

static void skip_ws(parser *p)
{
    while (p->pos < p->n) {
        char c = p->t[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int add_node(parser *p, uint32_t *idx)
{
    ferry__jtree *d = p->doc;
    if (d->count == p->max_nodes)
        return ferry__err(FERRY_EOVERFLOW, "%s: offset %zu: more than %u JSON values", p->name,
                          p->pos, p->max_nodes);
    if (d->count == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        if (cap > p->max_nodes || cap < p->cap)
            cap = p->max_nodes;
        ferry__jtree_node *nodes = ferry__realloc(d->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return ferry__err(FERRY_ENOMEM, "%s: out of memory for %u JSON values", p->name, cap);
        d->nodes = nodes;
        p->cap = cap;
    }
    *idx = d->count++;
    memset(&d->nodes[*idx], 0, sizeof d->nodes[*idx]);
    d->nodes[*idx].offset = (uint32_t)p->pos;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* At an opening quote: checks the string and leaves pos after its closing quote. */
static int scan_string(parser *p, const char **s, uint32_t *len)
{
    size_t start = ++p->pos;
    while (p->pos < p->n) {
        unsigned char c = (unsigned char)p->t[p->pos];
        if (c == '"') {
            *s = p->t + start;
            *len = (uint32_t)(p->pos - start);
            p->pos++;
            return 0;
        }
        if (c < 0x20)
            return perr(p, "control character in a string");
        if (c == '\\') {
            if (p->pos + 1 >= p->n)
                break;
            char e = p->t[p->pos + 1];
            if (e == 'u') {
                if (p->pos + 6 > p->n)
                    break;
                for (int k = 2; k < 6; k++)
                    if (hexval(p->t[p->pos + k]) < 0)
                        return perr(p, "bad \\u escape");
                p->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0)
                return perr(p, "bad escape in a string");
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    return perr(p, "string not closed before the end");
}

static int scan_number(parser *p, ferry__jtree_node *node)
{
    size_t i = p->pos;
    bool neg = false, integral = true;
    if (i < p->n && p->t[i] == '-') {
        neg = true;
        i++;
    }
    if (i >= p->n || p->t[i] < '0' || p->t[i] > '9')
        return perr(p, "bad number");
    uint64_t mant = 0;
    int digits = 0, exp10 = 0;
    bool overflow = false;
    if (p->t[i] == '0') {
        i++;
    } else {
        while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(p->t[i] - '0');
                digits++;
            } else {
                exp10++;
                overflow = true;
            }
            i++;
        }
    }
    if (i < p->n && p->t[i] == '.') {
        integral = false;
        i++;
        if (i >= p->n || p->t[i] < '0' || p->t[i] > '9')
            return perr(p, "bad number: no digit after '.'");
        while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(p->t[i] - '0');
                digits += mant != 0;
                exp10--;
            }
            i++;
        }
    }
    if (i < p->n && (p->t[i] == 'e' || p->t[i] == 'E')) {
        integral = false;
        i++;
        int esign = 1, e = 0;
        if (i < p->n && (p->t[i] == '+' || p->t[i] == '-'))
            esign = p->t[i++] == '-' ? -1 : 1;
        if (i >= p->n || p->t[i] < '0' || p->t[i] > '9')
            return perr(p, "bad number: no digit in the exponent");
        while (i < p->n && p->t[i] >= '0' && p->t[i] <= '9') {
            if (e < 100000)
                e = e * 10 + (p->t[i] - '0');
            i++;
        }
        exp10 += esign * e;
    }
    node->type = FERRY__JTREE_NUMBER;
    /* to an ulp or so: metadata numbers are counts and sizes, not measurements */
    double v = (double)mant;
    if (exp10 > 400)
        v = mant ? INFINITY : 0;
    else if (exp10 < -400)
        v = 0;
    else if (exp10)
        v *= pow(10.0, exp10);
    node->num = neg ? -v : v;
    if (integral && !overflow &&
        (mant <= (uint64_t)INT64_MAX || (neg && mant == (uint64_t)1 << 63))) {
        node->is_int = true;
        node->i = neg ? (int64_t)(0 - mant) : (int64_t)mant;
    }
    p->pos = i;
    return 0;
}

int ferry__jtree_parse(ferry__jtree *doc, const char *name, const char *text, size_t n,
                       uint32_t max_nodes, int max_depth)
{
    memset(doc, 0, sizeof *doc);
    parser p = {
        .name = name ? name : "json", .t = text, .n = n, .doc = doc, .max_nodes = max_nodes};
    uint32_t stack[FERRY__JTREE_MAX_DEPTH], last[FERRY__JTREE_MAX_DEPTH];
    int depth = 0, rc = 0;
    if (max_depth < 1 || max_depth > FERRY__JTREE_MAX_DEPTH)
        max_depth = FERRY__JTREE_MAX_DEPTH;
    if (n > UINT32_MAX)
        FERRY_FAIL(FERRY_EOVERFLOW, "%s: %zu bytes of JSON, over 4 GiB", p.name, n);
    if (max_nodes == 0)
        FERRY_FAIL(FERRY_EINVAL, "%s: max_nodes is 0", p.name);
    skip_ws(&p);
    for (;;) {
        /* a value is next (after its key, inside an object) */
        const char *key = NULL;
        uint32_t key_len = 0;
        if (depth > 0 && doc->nodes[stack[depth - 1]].type == FERRY__JTREE_OBJECT) {
            if (p.pos >= p.n || p.t[p.pos] != '"')
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected a key string", p.name, p.pos);
            FERRY_TRY(scan_string(&p, &key, &key_len));
            skip_ws(&p);
            if (p.pos >= p.n || p.t[p.pos] != ':')
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected ':' after a key", p.name,
                           p.pos);
            p.pos++;
            skip_ws(&p);
        }
        if (p.pos >= p.n)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: the text ends where a value should be",
                       p.name, p.pos);
        uint32_t idx = 0;
        FERRY_TRY(add_node(&p, &idx));
        ferry__jtree_node *nd = &doc->nodes[idx];
        nd->key = key;
        nd->key_len = key_len;
        if (depth > 0) {
            ferry__jtree_node *parent = &doc->nodes[stack[depth - 1]];
            if (last[depth - 1])
                doc->nodes[last[depth - 1]].next = idx;
            else
                parent->first = idx;
            last[depth - 1] = idx;
            parent->count++;
        }
        char c = p.t[p.pos];
        bool opened = false;
        if (c == '{' || c == '[') {
            nd->type = c == '{' ? FERRY__JTREE_OBJECT : FERRY__JTREE_ARRAY;
            p.pos++;
            skip_ws(&p);
            if (p.pos < p.n && p.t[p.pos] == (c == '{' ? '}' : ']')) {
                p.pos++;
            } else {
                if (depth == max_depth)
                    FERRY_FAIL(FERRY_EOVERFLOW, "%s: offset %zu: nested deeper than %d", p.name,
                               p.pos, max_depth);
                stack[depth] = idx;
                last[depth] = 0;
                depth++;
                opened = true;
            }
        } else if (c == '"') {
            nd->type = FERRY__JTREE_STRING;
            FERRY_TRY(scan_string(&p, &nd->str, &nd->str_len));
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            FERRY_TRY(scan_number(&p, nd));
        } else {
            static const struct {
                const char *word;
                uint8_t type;
            } lits[] = {{"true", FERRY__JTREE_TRUE},
                        {"false", FERRY__JTREE_FALSE},
                        {"null", FERRY__JTREE_NULL}};
            size_t k = 0;
            for (; k < 3; k++) {
                size_t len = strlen(lits[k].word);
                if (p.n - p.pos >= len && !memcmp(p.t + p.pos, lits[k].word, len)) {
                    nd->type = lits[k].type;
                    p.pos += len;
                    break;
                }
            }
            if (k == 3)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: unexpected character 0x%02x", p.name,
                           p.pos, (unsigned char)c);
        }
        if (opened)
            continue;
        /* after a value: a comma, closers, or the end */
        for (;;) {
            skip_ws(&p);
            if (depth == 0) {
                if (p.pos != p.n)
                    FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: text after the JSON value", p.name,
                               p.pos);
                return 0;
            }
            if (p.pos >= p.n)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: the text ends inside %s", p.name, p.pos,
                           doc->nodes[stack[depth - 1]].type == FERRY__JTREE_OBJECT ? "an object"
                                                                                    : "an array");
            char d = p.t[p.pos];
            char closer = doc->nodes[stack[depth - 1]].type == FERRY__JTREE_OBJECT ? '}' : ']';
            if (d == ',') {
                p.pos++;
                skip_ws(&p);
                break;
            }
            if (d != closer)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected ',' or '%c'", p.name, p.pos,
                           closer);
            p.pos++;
            depth--;
        }
    }
cleanup:
    ferry__jtree_free(doc);
    return rc;
}

void ferry__jtree_free(ferry__jtree *doc)
{
    ferry__free(doc->nodes);
    doc->nodes = NULL;
    doc->count = 0;
}

const ferry__jtree_node *ferry__jtree_next(const ferry__jtree *doc, const ferry__jtree_node *n)
{
    return n && n->next ? &doc->nodes[n->next] : NULL;
}

const ferry__jtree_node *ferry__jtree_item(const ferry__jtree *doc, const ferry__jtree_node *arr,
                                           uint32_t i)
{
    if (!arr || (arr->type != FERRY__JTREE_ARRAY && arr->type != FERRY__JTREE_OBJECT) ||
        i >= arr->count)
        return NULL;
    const ferry__jtree_node *c = &doc->nodes[arr->first];
    while (i-- && c)
        c = ferry__jtree_next(doc, c);
    return c;
}

/* Unescapes s[0..n) into buf; returns the length, or -1 when it does not fit. */
static long unescape(const char *s, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (s[i] != '\\') {
            if (o + 1 >= cap)
                return -1;
            buf[o++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *f = strchr(from, e);
            if (o + 1 >= cap)
                return -1;
            buf[o++] = f ? to[f - from] : e;
            i += 2;
            continue;
        }
        cp = 0;
        for (int k = 2; k < 6; k++)
            cp = cp << 4 | (uint32_t)hexval(s[i + k]);
        i += 6;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
            uint32_t lo = 0;
            for (int k = 2; k < 6; k++)
                lo = lo << 4 | (uint32_t)hexval(s[i + k]);
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
        }
        if (cp >= 0xD800 && cp < 0xE000)
            cp = 0xFFFD; /* a lone surrogate */
        unsigned char u[4];
        int len;
        if (cp < 0x80) {
            u[0] = (unsigned char)cp;
            len = 1;
        } else if (cp < 0x800) {
            u[0] = (unsigned char)(0xC0 | cp >> 6);
            u[1] = (unsigned char)(0x80 | (cp & 0x3F));
            len = 2;
        } else if (cp < 0x10000) {
            u[0] = (unsigned char)(0xE0 | cp >> 12);
            u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            u[2] = (unsigned char)(0x80 | (cp & 0x3F));
            len = 3;
        } else {
            u[0] = (unsigned char)(0xF0 | cp >> 18);
            u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
            u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
            u[3] = (unsigned char)(0x80 | (cp & 0x3F));
            len = 4;
        }
        if (o + (size_t)len >= cap)
            return -1;
        memcpy(buf + o, u, (size_t)len);
        o += (size_t)len;
    }
    if (cap == 0)
        return -1;
    buf[o] = 0;
    return (long)o;
}

int ferry__jtree_str(const ferry__jtree_node *n, char *buf, size_t cap, size_t *len)
{
    if (!n || n->type != FERRY__JTREE_STRING)
        return ferry__err(FERRY_EINVAL, "json: not a string");
    long got = unescape(n->str, n->str_len, buf, cap);
    if (got < 0)
        return ferry__err(FERRY_EOVERFLOW, "json: a string of %u bytes is longer than %zu",
                          n->str_len, cap ? cap - 1 : 0);
    if (len)
        *len = (size_t)got;
    return 0;
}

static bool key_eq(const char *k, size_t n, const char *s)
{
    if (!memchr(k, '\\', n))
        return strlen(s) == n && !memcmp(k, s, n);
    char buf[256];
    long got = unescape(k, n, buf, sizeof buf);
    return got >= 0 && !strcmp(buf, s);
}

bool ferry__jtree_str_eq(const ferry__jtree_node *n, const char *s)
{
    return n && n->type == FERRY__JTREE_STRING && key_eq(n->str, n->str_len, s);
}

const ferry__jtree_node *ferry__jtree_get(const ferry__jtree *doc, const ferry__jtree_node *obj,
                                          const char *key)
{
    if (!obj || obj->type != FERRY__JTREE_OBJECT || !obj->count)
        return NULL;
    for (const ferry__jtree_node *c = &doc->nodes[obj->first]; c; c = ferry__jtree_next(doc, c))
        if (key_eq(c->key, c->key_len, key))
            return c;
    return NULL;
}
