/*
 * What S3 answers in XML: a ListObjectsV2 page and an error document. A small
 * scanner of elements (no DTDs, no namespaces beyond ignoring attributes): each
 * element's text, entities decoded, is handed over with its path when the element
 * closes. Limits: 16 levels, 4 KiB of text per element, 100000 entries a page.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 16
#define MAX_TEXT 4096
#define MAX_ENTRIES 100000

typedef int (*leaf_fn)(void *arg, const char *path, const char *text, size_t n);

typedef struct scan {
    char path[MAX_DEPTH * 64];
    size_t plen[MAX_DEPTH + 1];
    int depth;
    char text[MAX_TEXT + 8];
    size_t tn;
    const char *name;
} scan;

/* Appends the entity at s (after '&') to the text: how many bytes it took, or 0. */
static size_t entity(scan *sc, const char *s, size_t n)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        size_t l = strlen(named[i].name);
        if (n >= l && !memcmp(s, named[i].name, l)) {
            sc->text[sc->tn++] = named[i].c;
            return l;
        }
    }
    if (n < 3 || s[0] != '#')
        return 0;
    bool hexa = s[1] == 'x';
    size_t i = hexa ? 2 : 1;
    uint32_t cp = 0;
    for (; i < n && i < 10 && s[i] != ';'; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'           ? c - '0'
                : hexa && c >= 'a' && c <= 'f' ? c - 'a' + 10
                : hexa && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
        if (d < 0)
            return 0;
        cp = cp * (hexa ? 16 : 10) + (uint32_t)d;
    }
    if (i >= n || s[i] != ';' || i == (hexa ? 2u : 1u) || cp == 0 || cp > 0x10ffff ||
        (cp >= 0xd800 && cp < 0xe000))
        return 0;
    char *o = sc->text + sc->tn;
    if (cp < 0x80) {
        o[0] = (char)cp;
        sc->tn += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        sc->tn += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        sc->tn += 3;
    } else {
        o[0] = (char)(0xf0 | cp >> 18);
        o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63));
        o[3] = (char)(0x80 | (cp & 63));
        sc->tn += 4;
    }
    return i + 1;
}

static int xml_walk(const char *x, size_t n, const char *name, leaf_fn fn, void *arg)
{
    scan *sc = ferry__calloc(1, sizeof *sc);
    int rc = 0;
    size_t i = 0;
    if (!sc)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", name);
    sc->name = name;
    while (i < n) {
        if (x[i] != '<') {
            if (sc->tn >= MAX_TEXT)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: an element's text at offset %zu is longer than %d",
                           name, i, MAX_TEXT);
            if (x[i] == '&') {
                size_t took = entity(sc, x + i + 1, n - i - 1);
                if (!took)
                    FERRY_FAIL(FERRY_ECORRUPT, "%s: a bad entity at offset %zu", name, i);
                i += took + 1;
            } else {
                if (x[i] == 0)
                    FERRY_FAIL(FERRY_ECORRUPT, "%s: a NUL byte at offset %zu", name, i);
                sc->text[sc->tn++] = x[i++];
            }
            continue;
        }
        if (n - i >= 4 && !memcmp(x + i, "<!--", 4)) {
            const char *end = memmem(x + i + 4, n - i - 4, "-->", 3);
            if (!end)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: a comment at offset %zu does not end", name, i);
            i = (size_t)(end - x) + 3;
            continue;
        }
        if (n - i >= 9 && !memcmp(x + i, "<![CDATA[", 9)) {
            const char *end = memmem(x + i + 9, n - i - 9, "]]>", 3);
            if (!end)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: CDATA at offset %zu does not end", name, i);
            size_t len = (size_t)(end - x) - i - 9;
            if (sc->tn + len > MAX_TEXT)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: an element's text at offset %zu is longer than %d",
                           name, i, MAX_TEXT);
            memcpy(sc->text + sc->tn, x + i + 9, len);
            sc->tn += len;
            i = (size_t)(end - x) + 3;
            continue;
        }
        const char *gt = memchr(x + i, '>', n - i);
        if (!gt)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: a tag at offset %zu does not end", name, i);
        size_t tag_end = (size_t)(gt - x);
        if (x[i + 1] == '?' || x[i + 1] == '!') { /* a declaration */
            i = tag_end + 1;
            continue;
        }
        bool closing = x[i + 1] == '/';
        bool empty = !closing && x[tag_end - 1] == '/';
        size_t ns = i + 1 + closing, ne = ns;
        while (ne < tag_end && x[ne] != ' ' && x[ne] != '\t' && x[ne] != '\r' && x[ne] != '\n' &&
               x[ne] != '/')
            ne++;
        size_t nl = ne - ns;
        if (nl == 0 || nl > 60)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: a bad tag at offset %zu", name, i);
        if (closing) {
            size_t at = sc->depth ? sc->plen[sc->depth - 1] : 0;
            size_t top = sc->plen[sc->depth] - at - (sc->depth > 1);
            if (sc->depth == 0 || top != nl ||
                memcmp(sc->path + sc->plen[sc->depth] - nl, x + ns, nl))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: the closing tag at offset %zu matches no open one",
                           name, i);
            sc->text[sc->tn] = 0;
            FERRY_TRY(fn(arg, sc->path, sc->text, sc->tn));
            sc->depth--;
            sc->path[sc->plen[sc->depth]] = 0;
        } else {
            if (sc->depth == MAX_DEPTH)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: deeper than %d elements at offset %zu", name,
                           MAX_DEPTH, i);
            size_t at = sc->plen[sc->depth];
            if (sc->depth)
                sc->path[at++] = '/';
            memcpy(sc->path + at, x + ns, nl);
            sc->path[at + nl] = 0;
            sc->plen[++sc->depth] = at + nl;
            if (empty) {
                sc->text[0] = 0;
                FERRY_TRY(fn(arg, sc->path, "", 0));
                sc->depth--;
                sc->path[sc->plen[sc->depth]] = 0;
            }
        }
        sc->tn = 0;
        i = tag_end + 1;
    }
    if (sc->depth)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: ends inside <%s>", name, sc->path);
cleanup:
    ferry__free(sc);
    return rc;
}

static const char *leaf_name(const char *path, int *depth)
{
    const char *last = strrchr(path, '/');
    *depth = 0;
    for (const char *p = path; *p; p++)
        *depth += *p == '/';
    return last ? last + 1 : path;
}

typedef struct list_ctx {
    ferry__s3_page *p;
    size_t cap, pcap;
    const char *name;
    ferry__s3_object cur;
    bool have_size;
} list_ctx;

static int on_list(void *arg, const char *path, const char *text, size_t n)
{
    list_ctx *c = arg;
    ferry__s3_page *p = c->p;
    int depth;
    const char *leaf = leaf_name(path, &depth);
    if (depth == 0 && strcmp(leaf, "ListBucketResult"))
        return ferry__err(FERRY_ECORRUPT, "%s: <%s>, not a ListObjectsV2 answer", c->name, leaf);
    if (depth == 1 && !strcmp(leaf, "IsTruncated")) {
        p->truncated = !strcmp(text, "true");
    } else if (depth == 1 && !strcmp(leaf, "NextContinuationToken")) {
        if (n >= sizeof p->next_token)
            return ferry__err(FERRY_ECORRUPT, "%s: a continuation token longer than %zu bytes",
                              c->name, sizeof p->next_token - 1);
        memcpy(p->next_token, text, n + 1);
    } else if (depth == 2 && strstr(path, "/Contents/")) {
        if (!strcmp(leaf, "Key")) {
            if (n == 0 || n > 1024 || memchr(text, 0, n))
                return ferry__err(FERRY_ECORRUPT, "%s: a key of %zu bytes", c->name, n);
            ferry__free(c->cur.key);
            if (!(c->cur.key = ferry__strdup(text)))
                return ferry__err(FERRY_ENOMEM, "%s: out of memory", c->name);
        } else if (!strcmp(leaf, "Size")) {
            if (!ferry__parse_u64(text, &c->cur.size) || (text[0] == '0' && text[1] == 'x'))
                return ferry__err(FERRY_ECORRUPT, "%s: a size \"%.40s\" that is not a number",
                                  c->name, text);
            c->have_size = true;
        } else if (!strcmp(leaf, "ETag")) {
            snprintf(c->cur.etag, sizeof c->cur.etag, "%s", text);
        }
    } else if (depth == 1 && !strcmp(leaf, "Contents")) {
        if (!c->cur.key || !c->have_size)
            return ferry__err(FERRY_ECORRUPT, "%s: an entry without a key or a size", c->name);
        if (p->n == MAX_ENTRIES)
            return ferry__err(FERRY_ECORRUPT, "%s: more than %d entries in a page", c->name,
                              MAX_ENTRIES);
        if (p->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 64;
            ferry__s3_object *g = ferry__realloc(p->obj, cap * sizeof *g);
            if (!g)
                return ferry__err(FERRY_ENOMEM, "%s: out of memory", c->name);
            p->obj = g;
            c->cap = cap;
        }
        p->obj[p->n++] = c->cur;
        memset(&c->cur, 0, sizeof c->cur);
        c->have_size = false;
    } else if (depth == 2 && !strcmp(leaf, "Prefix") && strstr(path, "/CommonPrefixes/")) {
        if (p->nprefixes == MAX_ENTRIES)
            return ferry__err(FERRY_ECORRUPT, "%s: more than %d prefixes in a page", c->name,
                              MAX_ENTRIES);
        if (p->nprefixes == c->pcap) {
            size_t cap = c->pcap ? c->pcap * 2 : 16;
            char **g = ferry__realloc(p->prefixes, cap * sizeof *g);
            if (!g)
                return ferry__err(FERRY_ENOMEM, "%s: out of memory", c->name);
            p->prefixes = g;
            c->pcap = cap;
        }
        if (!(p->prefixes[p->nprefixes] = ferry__strdup(text)))
            return ferry__err(FERRY_ENOMEM, "%s: out of memory", c->name);
        p->nprefixes++;
    }
    return 0;
}

int ferry__s3_parse_list(ferry__s3_page *p, const char *xml, size_t n, const char *name)
{
    list_ctx c = {.p = p, .name = name};
    memset(p, 0, sizeof *p);
    int rc = xml_walk(xml, n, name, on_list, &c);
    ferry__free(c.cur.key);
    if (rc == 0 && p->truncated && !p->next_token[0])
        rc = ferry__err(FERRY_ECORRUPT, "%s: truncated but no NextContinuationToken", name);
    if (rc < 0)
        ferry__s3_page_free(p);
    return rc;
}

void ferry__s3_page_free(ferry__s3_page *p)
{
    for (size_t i = 0; i < p->n; i++)
        ferry__free(p->obj[i].key);
    for (size_t i = 0; i < p->nprefixes; i++)
        ferry__free(p->prefixes[i]);
    ferry__free(p->obj);
    ferry__free(p->prefixes);
    memset(p, 0, sizeof *p);
}

typedef struct err_ctx {
    char *code, *msg;
    size_t code_cap, msg_cap;
    bool is_error;
} err_ctx;

static int on_error(void *arg, const char *path, const char *text, size_t n)
{
    err_ctx *c = arg;
    (void)n;
    if (!strcmp(path, "Error"))
        c->is_error = true;
    else if (!strcmp(path, "Error/Code"))
        snprintf(c->code, c->code_cap, "%s", text);
    else if (!strcmp(path, "Error/Message"))
        snprintf(c->msg, c->msg_cap, "%s", text);
    return 0;
}

bool ferry__s3_parse_error(const char *xml, size_t n, char *code, size_t code_cap, char *msg,
                           size_t msg_cap)
{
    err_ctx c = {code, msg, code_cap, msg_cap, false};
    code[0] = msg[0] = 0;
    char keep[FERRY_ERRMSG_MAX];
    ferry__err_copy(keep); /* a body that is no XML must not replace the caller's message */
    bool ok = xml_walk(xml, n, "S3 error", on_error, &c) == 0 && c.is_error;
    ferry__err(0, "%s", keep);
    if (!ok)
        code[0] = msg[0] = 0;
    return ok;
}
