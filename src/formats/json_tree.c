/*
 * A bounded, non-recursive JSON tree over the one lexer (json.h). See json_tree.h.
 */
#include "json_tree.h"

#include "json.h"

#include <string.h>

typedef struct parser {
    const char *name;
    ferry__json j; /* the lexer */
    ferry__jtree *doc;
    uint32_t cap, max_nodes;
} parser;

static size_t pos(const parser *p)
{
    return ferry__json_offset(&p->j);
}

/* The lexer's failure, where it stopped. */
static int lex_err(const parser *p)
{
    return ferry__err(FERRY_ECORRUPT, "%s: offset %zu: %s", p->name, pos(p),
                      p->j.err ? p->j.err : "bad JSON");
}

static int add_node(parser *p, uint32_t *idx)
{
    ferry__jtree *d = p->doc;
    if (d->count == p->max_nodes)
        return ferry__err(FERRY_EOVERFLOW, "%s: offset %zu: more than %u JSON values", p->name,
                          pos(p), p->max_nodes);
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
    d->nodes[*idx].offset = (uint32_t)pos(p);
    return 0;
}

/* At an opening quote: checks the string (the lexer's rules) and leaves the reader
 * after its closing quote; *s and *len are what lies between the quotes. */
static int scan_string(parser *p, const char **s, uint32_t *len)
{
    const char *open = p->j.p;
    if (!ferry__json_string(&p->j, NULL, 0, NULL))
        return lex_err(p);
    *s = open + 1;
    *len = (uint32_t)(p->j.p - open - 2);
    return 0;
}

int ferry__jtree_parse(ferry__jtree *doc, const char *name, const char *text, size_t n,
                       uint32_t max_nodes, int max_depth)
{
    memset(doc, 0, sizeof *doc);
    parser p = {.name = name ? name : "json", .doc = doc, .max_nodes = max_nodes};
    ferry__json *j = &p.j;
    uint32_t stack[FERRY__JTREE_MAX_DEPTH], last[FERRY__JTREE_MAX_DEPTH];
    int depth = 0, rc = 0;
    ferry__json_init(j, text, n, 0); /* no skipping: the depth is counted here */
    if (max_depth < 1 || max_depth > FERRY__JTREE_MAX_DEPTH)
        max_depth = FERRY__JTREE_MAX_DEPTH;
    if (n > UINT32_MAX)
        FERRY_FAIL(FERRY_EOVERFLOW, "%s: %zu bytes of JSON, over 4 GiB", p.name, n);
    if (max_nodes == 0)
        FERRY_FAIL(FERRY_EINVAL, "%s: max_nodes is 0", p.name);
    ferry__json_ws(j);
    for (;;) {
        /* a value is next (after its key, inside an object) */
        const char *key = NULL;
        uint32_t key_len = 0;
        if (depth > 0 && doc->nodes[stack[depth - 1]].type == FERRY__JTREE_OBJECT) {
            if (j->p >= j->end || *j->p != '"')
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected a key string", p.name,
                           pos(&p));
            FERRY_TRY(scan_string(&p, &key, &key_len));
            if (!ferry__json_eat(j, ':'))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected ':' after a key", p.name,
                           pos(&p));
            ferry__json_ws(j);
        }
        if (j->p >= j->end)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: the text ends where a value should be",
                       p.name, pos(&p));
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
        char c = *j->p;
        bool opened = false, ok = true;
        if (c == '{' || c == '[') {
            nd->type = c == '{' ? FERRY__JTREE_OBJECT : FERRY__JTREE_ARRAY;
            j->p++;
            if (!ferry__json_eat(j, c == '{' ? '}' : ']')) {
                if (depth == max_depth)
                    FERRY_FAIL(FERRY_EOVERFLOW, "%s: offset %zu: nested deeper than %d", p.name,
                               pos(&p), max_depth);
                stack[depth] = idx;
                last[depth] = 0;
                depth++;
                opened = true;
            }
        } else if (c == '"') {
            nd->type = FERRY__JTREE_STRING;
            FERRY_TRY(scan_string(&p, &nd->str, &nd->str_len));
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            nd->type = FERRY__JTREE_NUMBER;
            ok = ferry__json_number(j, &nd->num, &nd->i, &nd->is_int);
        } else if (c == 't' || c == 'f' || c == 'n') {
            nd->type = c == 't'   ? FERRY__JTREE_TRUE
                       : c == 'f' ? FERRY__JTREE_FALSE
                                  : FERRY__JTREE_NULL;
            ok = ferry__json_literal(j, c == 't' ? "true" : c == 'f' ? "false" : "null");
        } else {
            FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: unexpected character 0x%02x", p.name,
                       pos(&p), (unsigned char)c);
        }
        if (!ok)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: %s", p.name, pos(&p), j->err);
        if (opened)
            continue;
        /* after a value: a comma, closers, or the end */
        for (;;) {
            ferry__json_ws(j);
            if (depth == 0) {
                if (j->p != j->end)
                    FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: text after the JSON value", p.name,
                               pos(&p));
                return 0;
            }
            bool obj = doc->nodes[stack[depth - 1]].type == FERRY__JTREE_OBJECT;
            if (j->p >= j->end)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: the text ends inside %s", p.name,
                           pos(&p), obj ? "an object" : "an array");
            if (ferry__json_eat(j, ',')) {
                ferry__json_ws(j);
                break;
            }
            if (!ferry__json_eat(j, obj ? '}' : ']'))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: offset %zu: expected ',' or '%c'", p.name, pos(&p),
                           obj ? '}' : ']');
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

/* Unescapes the string between the quotes at s[-1] and s[n] into buf (cap bytes
 * with its NUL): false when it does not fit. The parse checked it: the lexer only
 * unescapes here. */
static bool unescape(const char *s, size_t n, char *buf, size_t cap, size_t *len)
{
    ferry__json j;
    ferry__json_init(&j, s - 1, n + 2, 0);
    return cap > 0 && ferry__json_string(&j, buf, cap, len);
}

int ferry__jtree_str(const ferry__jtree_node *n, char *buf, size_t cap, size_t *len)
{
    if (!n || n->type != FERRY__JTREE_STRING)
        return ferry__err(FERRY_EINVAL, "json: not a string");
    size_t got;
    if (!unescape(n->str, n->str_len, buf, cap, &got))
        return ferry__err(FERRY_EOVERFLOW, "json: a string of %u bytes is longer than %zu",
                          n->str_len, cap ? cap - 1 : 0);
    if (len)
        *len = got;
    return 0;
}

static bool key_eq(const char *k, size_t n, const char *s)
{
    if (!memchr(k, '\\', n))
        return strlen(s) == n && !memcmp(k, s, n);
    char buf[256];
    size_t got;
    return unescape(k, n, buf, sizeof buf, &got) && !strcmp(buf, s);
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
