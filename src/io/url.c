/*
 * Remote locations as text: s3://BUCKET/KEY and http(s)://HOST/PATH, SigV4's URI
 * encoding, and WebDataset's brace ranges.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ferry__is_remote(const char *path)
{
    return path && (!strncmp(path, "s3://", 5) || !strncmp(path, "http://", 7) ||
                    !strncmp(path, "https://", 8));
}

int ferry__url_parse(ferry__url *u, const char *text)
{
    const char *rest;
    memset(u, 0, sizeof *u);
    if (!text)
        return ferry__err(FERRY_EINVAL, "remote location: NULL");
    if (!strncmp(text, "s3://", 5)) {
        u->scheme = FERRY__URL_S3;
        rest = text + 5;
    } else if (!strncmp(text, "http://", 7)) {
        u->scheme = FERRY__URL_HTTP;
        rest = text + 7;
    } else if (!strncmp(text, "https://", 8)) {
        u->scheme = FERRY__URL_HTTPS;
        rest = text + 8;
    } else {
        return ferry__err(FERRY_EINVAL, "%.200s: not an s3://, http:// or https:// location", text);
    }
    if (strlen(text) >= FERRY__URL_MAX)
        return ferry__err(FERRY_EINVAL, "%.200s...: longer than %d bytes", text,
                          FERRY__URL_MAX - 1);
    for (const char *c = text; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return ferry__err(FERRY_EINVAL,
                              "%.200s: a space or control byte at offset %zu (write it as %%XX)",
                              text, (size_t)(c - text));
    const char *slash = strchr(rest, '/');
    size_t hl = slash ? (size_t)(slash - rest) : strlen(rest);
    if (hl == 0)
        return ferry__err(FERRY_EINVAL, "%.200s: no %s", text,
                          u->scheme == FERRY__URL_S3 ? "bucket" : "host");
    if (hl >= sizeof u->host)
        return ferry__err(FERRY_EINVAL, "%.200s: the %s is longer than 255 bytes", text,
                          u->scheme == FERRY__URL_S3 ? "bucket" : "host");
    if (memchr(rest, '@', hl))
        return ferry__err(FERRY_EINVAL,
                          "%.200s: credentials in the URL are not taken (use the environment)",
                          text);
    memcpy(u->host, rest, hl);
    if (u->scheme == FERRY__URL_S3) {
        for (size_t i = 0; i < hl; i++) {
            char c = u->host[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                  c == '_' || (c >= 'A' && c <= 'Z')))
                return ferry__err(FERRY_EINVAL, "%.200s: \"%s\" is not a bucket name", text,
                                  u->host);
        }
        if (slash)
            snprintf(u->path, sizeof u->path, "%s", slash + 1);
    } else {
        snprintf(u->path, sizeof u->path, "%s", slash ? slash : "/");
        if (strchr(u->path, '#'))
            *strchr(u->path, '#') = 0;
    }
    return 0;
}

bool ferry__host_header(const char *url, char *out, size_t cap)
{
    const char *h = strstr(url, "://");
    if (!h)
        return false;
    bool https = !strncmp(url, "https://", 8);
    h += 3;
    size_t n = strcspn(h, "/?#");
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, h, n);
    out[n] = 0;
    const char *dflt = https ? ":443" : ":80";
    size_t dl = strlen(dflt);
    if (n > dl && !strcmp(out + n - dl, dflt))
        out[n - dl] = 0;
    return true;
}

bool ferry__uri_encode(const char *s, size_t n, bool keep_slash, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (o + (plain ? 1 : 3) >= cap)
            return false;
        if (plain) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= cap)
        return false;
    out[o] = 0;
    return true;
}

/* ---- Brace ranges ---- */

#define MAX_BRACES 8

typedef struct brace {
    size_t start, end; /* the braces' offsets in the pattern, '{' and '}' */
    bool range;
    uint64_t lo, hi;
    int width;
    size_t nalts; /* a list: how many alternatives */
} brace;

typedef struct expand {
    const char *pat;
    brace b[MAX_BRACES];
    int nb;
    size_t count, max;
    char buf[FERRY__URL_MAX];
    int (*add)(void *, const char *);
    void *arg;
} expand;

static bool parse_num(const char *s, size_t n, uint64_t *v)
{
    if (n == 0 || n > 18)
        return false;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        *v = *v * 10 + (uint64_t)(s[i] - '0');
    }
    return true;
}

/* Alternative k of a list brace: its text and length. */
static const char *alt(const char *pat, const brace *b, size_t k, size_t *len)
{
    const char *p = pat + b->start + 1, *end = pat + b->end;
    for (; k; k--)
        p = memchr(p, ',', (size_t)(end - p)) + 1;
    const char *comma = memchr(p, ',', (size_t)(end - p));
    *len = (size_t)((comma ? comma : end) - p);
    return p;
}

static int walk(expand *e, int i, size_t from, size_t at)
{
    size_t lit_end = i < e->nb ? e->b[i].start : strlen(e->pat);
    size_t lit = lit_end - from;
    if (at + lit >= sizeof e->buf)
        return ferry__err(FERRY_EINVAL, "%.200s: an expansion is longer than %d bytes", e->pat,
                          FERRY__URL_MAX - 1);
    memcpy(e->buf + at, e->pat + from, lit);
    at += lit;
    if (i == e->nb) {
        e->buf[at] = 0;
        if (++e->count > e->max)
            return ferry__err(FERRY_ERANGE, "%.200s: expands to more than %zu names", e->pat,
                              e->max);
        return e->add(e->arg, e->buf);
    }
    const brace *b = &e->b[i];
    size_t n = b->range ? (size_t)(b->hi - b->lo + 1) : b->nalts;
    for (size_t k = 0; k < n; k++) {
        char piece[64];
        const char *p;
        size_t len;
        if (b->range) {
            len = (size_t)snprintf(piece, sizeof piece, "%0*llu", b->width,
                                   (unsigned long long)(b->lo + k));
            p = piece;
        } else {
            p = alt(e->pat, b, k, &len);
        }
        if (at + len >= sizeof e->buf)
            return ferry__err(FERRY_EINVAL, "%.200s: an expansion is longer than %d bytes", e->pat,
                              FERRY__URL_MAX - 1);
        memcpy(e->buf + at, p, len);
        int rc = walk(e, i + 1, b->end + 1, at + len);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ferry__brace_expand(const char *pattern, size_t max, int (*add)(void *arg, const char *text),
                        void *arg)
{
    expand *e = ferry__calloc(1, sizeof *e);
    int rc = 0;
    if (!e)
        return ferry__err(FERRY_ENOMEM, "brace expansion: out of memory");
    e->pat = pattern;
    e->max = max;
    e->add = add;
    e->arg = arg;
    for (size_t i = 0; pattern[i]; i++) {
        if (pattern[i] == '}')
            FERRY_FAIL(FERRY_EINVAL, "%.200s: a '}' at offset %zu closes no brace", pattern, i);
        if (pattern[i] != '{')
            continue;
        const char *close = strchr(pattern + i, '}');
        const char *open2 = strchr(pattern + i + 1, '{');
        if (!close)
            FERRY_FAIL(FERRY_EINVAL, "%.200s: the brace at offset %zu is not closed", pattern, i);
        if (open2 && open2 < close)
            FERRY_FAIL(FERRY_EINVAL, "%.200s: nested braces at offset %zu", pattern,
                       (size_t)(open2 - pattern));
        if (e->nb == MAX_BRACES)
            FERRY_FAIL(FERRY_EINVAL, "%.200s: more than %d braces", pattern, MAX_BRACES);
        brace *b = &e->b[e->nb++];
        b->start = i;
        b->end = (size_t)(close - pattern);
        const char *in = pattern + i + 1;
        size_t len = b->end - i - 1;
        const char *dots = NULL;
        for (size_t k = 0; k + 1 < len; k++)
            if (in[k] == '.' && in[k + 1] == '.') {
                dots = in + k;
                break;
            }
        if (dots) {
            size_t l1 = (size_t)(dots - in), l2 = len - l1 - 2;
            if (!parse_num(in, l1, &b->lo) || !parse_num(dots + 2, l2, &b->hi))
                FERRY_FAIL(FERRY_EINVAL,
                           "%.200s: the range at offset %zu is not {FIRST..LAST} in decimal",
                           pattern, i);
            if (b->hi < b->lo)
                FERRY_FAIL(FERRY_EINVAL, "%.200s: the range at offset %zu runs backwards", pattern,
                           i);
            b->range = true;
            b->width = in[0] == '0' || l1 == l2 ? (int)l1 : 1;
        } else {
            b->nalts = 1;
            for (size_t k = 0; k < len; k++)
                b->nalts += in[k] == ',';
        }
        i = b->end;
    }
    rc = walk(e, 0, 0, 0);
cleanup:
    ferry__free(e);
    return rc;
}
