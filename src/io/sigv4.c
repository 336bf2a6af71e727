/*
 * AWS Signature Version 4, written here rather than through libcurl's
 * CURLOPT_AWS_SIGV4: curl 7.88 (Debian 12's) does not sort or encode the query
 * string the way S3 checks it, which breaks ListObjectsV2 with a continuation
 * token, and it signs no Range header. This signer is checked against AWS's
 * published test vectors and against botocore's.
 */
#include "remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct out_buf {
    char *p;
    size_t n, cap;
    bool over;
} out_buf;

static void put(out_buf *o, const char *s, size_t n)
{
    if (o->over || n >= o->cap - o->n) {
        o->over = true;
        return;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = 0;
}

static void puts_(out_buf *o, const char *s)
{
    put(o, s, strlen(s));
}

typedef struct pair {
    const char *a, *b; /* a name and its value, not NUL-terminated */
    size_t an, bn;
} pair;

static int cmp_pair(const void *x, const void *y)
{
    const pair *p = x, *q = y;
    size_t m = p->an < q->an ? p->an : q->an;
    int c = memcmp(p->a, q->a, m);
    if (c || p->an != q->an)
        return c ? c : (p->an < q->an ? -1 : 1);
    m = p->bn < q->bn ? p->bn : q->bn;
    c = memcmp(p->b, q->b, m);
    return c ? c : (p->bn < q->bn ? -1 : p->bn > q->bn);
}

#define MAX_QUERY_PAIRS 64

/* The pairs sorted by name, then value; a name without '=' has an empty value. */
static int canon_query(out_buf *o, const char *q)
{
    pair pr[MAX_QUERY_PAIRS];
    int n = 0;
    while (q && *q) {
        const char *end = strchr(q, '&');
        size_t len = end ? (size_t)(end - q) : strlen(q);
        if (len) {
            if (n == MAX_QUERY_PAIRS)
                return ferry__err(FERRY_EINVAL, "sigv4: more than %d query parameters",
                                  MAX_QUERY_PAIRS);
            const char *eq = memchr(q, '=', len);
            pr[n].a = q;
            pr[n].an = eq ? (size_t)(eq - q) : len;
            pr[n].b = eq ? eq + 1 : "";
            pr[n].bn = eq ? len - pr[n].an - 1 : 0;
            n++;
        }
        q = end ? end + 1 : NULL;
    }
    qsort(pr, (size_t)n, sizeof *pr, cmp_pair);
    for (int i = 0; i < n; i++) {
        if (i)
            put(o, "&", 1);
        put(o, pr[i].a, pr[i].an);
        put(o, "=", 1);
        put(o, pr[i].b, pr[i].bn);
    }
    return 0;
}

typedef struct header {
    char name[64];
    const char *value;
} header;

static int cmp_header(const void *x, const void *y)
{
    return strcmp(((const header *)x)->name, ((const header *)y)->name);
}

/* A value trimmed, inner runs of spaces made one. */
static void put_value(out_buf *o, const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++) {
        if ((v[i] == ' ' || v[i] == '\t') && i && (v[i - 1] == ' ' || v[i - 1] == '\t'))
            continue;
        put(o, v[i] == '\t' ? " " : v + i, 1);
    }
}

static void hmac(const uint8_t *key, size_t klen, const char *msg, uint8_t out[32])
{
    ferry__hmac_sha256(key, klen, msg, strlen(msg), out);
}

int ferry__sigv4_sign(const ferry__sigv4_req *r, char *canon, char *sts, char *auth, size_t cap)
{
    header h[FERRY__SIGV4_MAX_HEADERS];
    const char *amz_date = NULL;
    int nh = r->nheaders;
    if (nh > FERRY__SIGV4_MAX_HEADERS || nh < 0)
        return ferry__err(FERRY_EINVAL, "sigv4: more than %d headers", FERRY__SIGV4_MAX_HEADERS);
    for (int i = 0; i < nh; i++) {
        size_t len = strlen(r->headers[i].name);
        if (len >= sizeof h[i].name)
            return ferry__err(FERRY_EINVAL, "sigv4: header name too long");
        for (size_t k = 0; k <= len; k++) {
            char c = r->headers[i].name[k];
            h[i].name[k] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        h[i].value = r->headers[i].value;
        if (!strcmp(h[i].name, "x-amz-date"))
            amz_date = h[i].value;
    }
    if (!amz_date || strlen(amz_date) != 16)
        return ferry__err(FERRY_EINVAL, "sigv4: no x-amz-date header of the form YYYYMMDDTHHMMSSZ");
    /* a stable sort keeps a repeated header's values in the order given */
    for (int i = 1; i < nh; i++)
        for (int j = i; j > 0 && cmp_header(&h[j - 1], &h[j]) > 0; j--) {
            header t = h[j];
            h[j] = h[j - 1];
            h[j - 1] = t;
        }

    char cbuf[16384], signed_h[1024] = "";
    out_buf c = {cbuf, 0, sizeof cbuf, false}, sh = {signed_h, 0, sizeof signed_h, false};
    cbuf[0] = 0;
    puts_(&c, r->method);
    put(&c, "\n", 1);
    puts_(&c, r->path && *r->path ? r->path : "/");
    put(&c, "\n", 1);
    int rc = canon_query(&c, r->query);
    if (rc < 0)
        return rc;
    put(&c, "\n", 1);
    for (int i = 0; i < nh; i++) {
        if (i && !strcmp(h[i].name, h[i - 1].name)) {
            put(&c, ",", 1);
        } else {
            if (i) {
                put(&c, "\n", 1);
                put(&sh, ";", 1);
            }
            puts_(&c, h[i].name);
            put(&c, ":", 1);
            puts_(&sh, h[i].name);
        }
        put_value(&c, h[i].value);
    }
    put(&c, "\n\n", 2);
    puts_(&c, signed_h);
    put(&c, "\n", 1);
    puts_(&c, r->payload_hash);
    if (c.over || sh.over)
        return ferry__err(FERRY_ERANGE, "sigv4: the canonical request is too long");

    char date[9], scope[256], chash[65], sbuf[1024];
    memcpy(date, amz_date, 8);
    date[8] = 0;
    snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, r->region, r->service);
    ferry__sha256_hex(cbuf, c.n, chash);
    int sn = snprintf(sbuf, sizeof sbuf, "AWS4-HMAC-SHA256\n%s\n%s\n%s", amz_date, scope, chash);
    if (sn < 0 || (size_t)sn >= sizeof sbuf)
        return ferry__err(FERRY_ERANGE, "sigv4: the string to sign is too long");

    uint8_t k[32], k2[32];
    char secret[300], sig[65];
    int kn = snprintf(secret, sizeof secret, "AWS4%s", r->secret);
    if (kn < 0 || (size_t)kn >= sizeof secret)
        return ferry__err(FERRY_ERANGE, "sigv4: the secret key is too long");
    hmac((const uint8_t *)secret, (size_t)kn, date, k);
    hmac(k, 32, r->region, k2);
    hmac(k2, 32, r->service, k);
    hmac(k, 32, "aws4_request", k2);
    ferry__hmac_sha256(k2, 32, sbuf, (size_t)sn, k);
    ferry__hex(k, 32, sig);
    explicit_bzero(secret, sizeof secret);
    explicit_bzero(k2, sizeof k2);

    if (canon && (c.n >= cap || !memcpy(canon, cbuf, c.n + 1)))
        return ferry__err(FERRY_ERANGE, "sigv4: the canonical request is too long");
    if (sts && ((size_t)sn >= cap || !memcpy(sts, sbuf, (size_t)sn + 1)))
        return ferry__err(FERRY_ERANGE, "sigv4: the string to sign is too long");
    int an =
        snprintf(auth, cap, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                 r->key_id, scope, signed_h, sig);
    if (an < 0 || (size_t)an >= cap)
        return ferry__err(FERRY_ERANGE, "sigv4: the Authorization header is too long");
    return 0;
}
