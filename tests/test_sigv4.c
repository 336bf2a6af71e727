/*
 * The SigV4 signer against independent references: AWS's published test suite
 * (tests/data/sigv4/aws-sig-v4-test-suite, the cases whose rules S3 shares) and
 * botocore's S3 signer on the requests ferry sends (tests/data/sigv4/s3_cases.json,
 * made by tests/servers/sigv4_reference.py). The request is built as ferry builds
 * it: the path and query decoded and URI-encoded by ferry__uri_encode, the Host as
 * ferry__host_header gives it, then signed; every step is compared.
 */
#include "harness.h"
#include "io/remote.h"
#include "formats/json_tree.h"

#include <dirent.h>
#include <libgen.h>
#include <strings.h>
#include <unistd.h>

static const char *data_dir(char *buf, size_t cap)
{
    char file[1024];
    snprintf(file, sizeof file, "%s", __FILE__);
    snprintf(buf, cap, "%s/data/sigv4", dirname(file));
    return buf;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* s[0..n) with %XX decoded, into out. */
static size_t pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
            out[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = 0;
    return o;
}

/* A query as sent ("a=b&c"), each name and value decoded and encoded again by
 * ferry's encoder, appended to out. */
static void encode_query(const char *q, char *out, size_t cap)
{
    char raw[2048], enc[6144];
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', len);
        size_t nl = eq ? (size_t)(eq - q) : len;
        if (out[0])
            snprintf(out + strlen(out), cap - strlen(out), "&");
        size_t rn = pct_decode(q, nl, raw);
        CHECK(ferry__uri_encode(raw, rn, false, enc, sizeof enc));
        snprintf(out + strlen(out), cap - strlen(out), "%s=", enc);
        if (eq) {
            rn = pct_decode(eq + 1, len - nl - 1, raw);
            CHECK(ferry__uri_encode(raw, rn, false, enc, sizeof enc));
            snprintf(out + strlen(out), cap - strlen(out), "%s", enc);
        }
        q = amp ? amp + 1 : NULL;
    }
}

static void check_text(const char *what, const char *name, const char *got, const char *want)
{
    if (strcmp(got, want))
        test_fail(__FILE__, __LINE__, "%s: %s differs:\n--- ferry\n%s\n--- reference\n%s", name,
                  what, got, want);
}

static char *read_text(const char *dir, const char *name, const char *ext)
{
    char path[1200];
    size_t n;
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    char *t = (char *)test_read_file(path, &n);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r'))
        t[--n] = 0;
    return t;
}

/* One case of AWS's suite: 1 compared, 0 passed over (the generic rules' path
 * normalisation and double encoding, which S3 does not do). */
static int suite_case(const char *dir, const char *name)
{
    char *req = read_text(dir, name, ".req"), *creq = read_text(dir, name, ".creq");
    char *sts = read_text(dir, name, ".sts"), *authz = read_text(dir, name, ".authz");
    /* the request line: METHOD TARGET HTTP/1.1 */
    char method[16], target[2048];
    CHECK(sscanf(req, "%15s %2047s", method, target) == 2);
    char *line_end = strchr(req, '\n');
    CHECK(line_end);
    /* headers up to a blank line, then the body */
    static char names[16][64], values[16][2048];
    ferry__hdr h[FERRY__SIGV4_MAX_HEADERS];
    int nh = 0;
    char *p = line_end + 1, *body = "";
    while (*p) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len == 0) {
            body = nl ? nl + 1 : p + len;
            break;
        }
        char *colon = memchr(p, ':', len);
        CHECK(colon && nh < 15);
        snprintf(names[nh], sizeof names[nh], "%.*s", (int)(colon - p), p);
        snprintf(values[nh], sizeof values[nh], "%.*s", (int)(len - (size_t)(colon - p) - 1),
                 colon + 1);
        h[nh] = (ferry__hdr){names[nh], values[nh]};
        nh++;
        p = nl ? nl + 1 : p + len;
    }
    /* a session token the suite leaves out of .req: the .creq's */
    const char *tok = strstr(creq, "\nx-amz-security-token:");
    bool has_tok = false;
    for (int i = 0; i < nh; i++)
        has_tok |= !strcasecmp(names[i], "x-amz-security-token");
    if (tok && !has_tok) {
        tok += strlen("\nx-amz-security-token:");
        snprintf(values[nh], sizeof values[nh], "%.*s", (int)strcspn(tok, "\n"), tok);
        h[nh] = (ferry__hdr){"X-Amz-Security-Token", values[nh]};
        nh++;
    }
    char *q = strchr(target, '?');
    if (q)
        *q++ = 0;
    char raw[2048], path[6144], query[6144] = "";
    size_t rn = pct_decode(target, strlen(target), raw);
    CHECK(ferry__uri_encode(raw, rn, true, path, sizeof path));
    encode_query(q, query, sizeof query);
    char canon_path[2048];
    const char *c2 = strchr(creq, '\n') + 1;
    snprintf(canon_path, sizeof canon_path, "%.*s", (int)strcspn(c2, "\n"), c2);
    int compared = !strcmp(canon_path, path);
    if (compared) {
        char hash[65], c[8192], s[1024], a[1024];
        ferry__sha256_hex(body, strlen(body), hash);
        ferry__sigv4_req r = {.method = method,
                              .path = path,
                              .query = query,
                              .headers = h,
                              .nheaders = nh,
                              .payload_hash = hash,
                              .region = "us-east-1",
                              .service = "service",
                              .key_id = "AKIDEXAMPLE",
                              .secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
        CHECK_OK(ferry__sigv4_sign(&r, c, s, a, sizeof a));
        check_text("the canonical request", name, c, creq);
        check_text("the string to sign", name, s, sts);
        check_text("the Authorization header", name, a, authz);
    }
    free(req);
    free(creq);
    free(sts);
    free(authz);
    return compared;
}

static int suite_dir(const char *dir, int *seen)
{
    int compared = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    CHECK(d);
    while ((e = readdir(d))) {
        char sub[1200], probe[1400];
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "LICENSE") || !strcmp(e->d_name, "NOTICE"))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        snprintf(probe, sizeof probe, "%s/%s.req", sub, e->d_name);
        if (access(probe, R_OK) == 0) {
            (*seen)++;
            compared += suite_case(sub, e->d_name);
        } else if (strstr(e->d_name, ".") == NULL) {
            compared += suite_dir(sub, seen);
        }
    }
    closedir(d);
    return compared;
}

TEST(aws_test_suite)
{
    char dir[1100], suite[1200];
    snprintf(suite, sizeof suite, "%s/aws-sig-v4-test-suite", data_dir(dir, sizeof dir));
    if (access(suite, R_OK) != 0)
        SKIP("tests/data/sigv4/aws-sig-v4-test-suite is missing");
    int seen = 0, compared = suite_dir(suite, &seen);
    printf("%d of %d cases compared (the rest normalise the path, which S3 does not)\n", compared,
           seen);
    CHECK(seen >= 25);
    CHECK(compared >= 20);
}

static const char *jstr(const ferry__jtree *doc, const ferry__jtree_node *obj, const char *key,
                        char *buf, size_t cap)
{
    const ferry__jtree_node *n = ferry__jtree_get(doc, obj, key);
    if (!n || n->type != FERRY__JTREE_STRING)
        return NULL;
    CHECK_OK(ferry__jtree_str(n, buf, cap, NULL));
    return buf;
}

TEST(botocore_s3_cases)
{
    char dir[1100], path[1200];
    snprintf(path, sizeof path, "%s/s3_cases.json", data_dir(dir, sizeof dir));
    if (access(path, R_OK) != 0)
        SKIP("tests/data/sigv4/s3_cases.json is missing");
    size_t n;
    char *text = (char *)test_read_file(path, &n);
    ferry__jtree doc;
    CHECK_OK(ferry__jtree_parse(&doc, path, text, n, 100000, 16));
    const ferry__jtree_node *root = ferry__jtree_node_at(&doc, 0);
    CHECK(root->type == FERRY__JTREE_ARRAY && root->count >= 10);
    int done = 0;
    for (uint32_t k = 0; k < root->count; k++) {
        const ferry__jtree_node *c = ferry__jtree_item(&doc, root, k);
        const ferry__jtree_node *rq = ferry__jtree_get(&doc, c, "request");
        const ferry__jtree_node *ex = ferry__jtree_get(&doc, c, "expected");
        static char name[128], method[16], url[4096], time_[32], region[64], service[32], ak[128],
            sk[128], tok[2048], hash[80], body[4096], want_c[8192], want_s[1024], want_a[1024];
        static char hn[16][64], hv[16][512];
        CHECK(jstr(&doc, c, "name", name, sizeof name) && rq && ex);
        CHECK(jstr(&doc, rq, "method", method, sizeof method));
        CHECK(jstr(&doc, rq, "url", url, sizeof url));
        CHECK(jstr(&doc, rq, "time", time_, sizeof time_));
        CHECK(jstr(&doc, rq, "region", region, sizeof region));
        CHECK(jstr(&doc, rq, "service", service, sizeof service));
        CHECK(jstr(&doc, rq, "access_key", ak, sizeof ak));
        CHECK(jstr(&doc, rq, "secret_key", sk, sizeof sk));
        CHECK(jstr(&doc, ex, "canonical_request", want_c, sizeof want_c));
        CHECK(jstr(&doc, ex, "string_to_sign", want_s, sizeof want_s));
        CHECK(jstr(&doc, ex, "authorization", want_a, sizeof want_a));
        bool has_tok = jstr(&doc, rq, "session_token", tok, sizeof tok) != NULL;
        if (!jstr(&doc, rq, "body", body, sizeof body))
            body[0] = 0;
        if (!jstr(&doc, rq, "payload_hash", hash, sizeof hash))
            ferry__sha256_hex(body, strlen(body), hash);

        /* the path and query from the URL, then the params, encoded by ferry */
        char host[300], raw[4096], enc_path[12288], query[12288] = "";
        CHECK(ferry__host_header(url, host, sizeof host));
        const char *target = strchr(strstr(url, "://") + 3, '/');
        target = target ? target : "/";
        char tpath[4096];
        snprintf(tpath, sizeof tpath, "%.*s", (int)strcspn(target, "?"), target);
        size_t rn = pct_decode(tpath, strlen(tpath), raw);
        CHECK(ferry__uri_encode(raw, rn, true, enc_path, sizeof enc_path));
        const char *qm = strchr(target, '?');
        encode_query(qm ? qm + 1 : NULL, query, sizeof query);
        const ferry__jtree_node *params = ferry__jtree_get(&doc, rq, "params");
        for (uint32_t i = 0; params && i < params->count; i++) {
            const ferry__jtree_node *pr = ferry__jtree_item(&doc, params, i);
            char pn[1024], pv[1024], e1[3072], e2[3072];
            CHECK_OK(ferry__jtree_str(ferry__jtree_item(&doc, pr, 0), pn, sizeof pn, NULL));
            CHECK_OK(ferry__jtree_str(ferry__jtree_item(&doc, pr, 1), pv, sizeof pv, NULL));
            CHECK(ferry__uri_encode(pn, strlen(pn), false, e1, sizeof e1));
            CHECK(ferry__uri_encode(pv, strlen(pv), false, e2, sizeof e2));
            snprintf(query + strlen(query), sizeof query - strlen(query), "%s%s=%s",
                     query[0] ? "&" : "", e1, e2);
        }
        /* the headers: the request's, then what the signer adds */
        ferry__hdr h[FERRY__SIGV4_MAX_HEADERS];
        int nh = 0;
        h[nh++] = (ferry__hdr){"host", host};
        const ferry__jtree_node *hs = ferry__jtree_get(&doc, rq, "headers");
        for (uint32_t i = 0; hs && i < hs->count && nh < 12; i++) {
            const ferry__jtree_node *pr = ferry__jtree_item(&doc, hs, i);
            const ferry__jtree_node *a =
                pr->type == FERRY__JTREE_ARRAY ? ferry__jtree_item(&doc, pr, 0) : NULL;
            const ferry__jtree_node *b = a ? ferry__jtree_item(&doc, pr, 1) : pr;
            if (a)
                CHECK_OK(ferry__jtree_str(a, hn[nh], sizeof hn[nh], NULL));
            else
                snprintf(hn[nh], sizeof hn[nh], "%.*s", (int)pr->key_len, pr->key);
            CHECK_OK(ferry__jtree_str(b, hv[nh], sizeof hv[nh], NULL));
            /* headers that are never signed (botocore's list; ferry sends curl's
             * User-Agent unsigned) */
            if (!strcasecmp(hn[nh], "user-agent") || !strcasecmp(hn[nh], "expect") ||
                !strcasecmp(hn[nh], "x-amzn-trace-id"))
                continue;
            h[nh] = (ferry__hdr){hn[nh], hv[nh]};
            nh++;
        }
        h[nh++] = (ferry__hdr){"x-amz-date", time_};
        h[nh++] = (ferry__hdr){"x-amz-content-sha256", hash};
        if (has_tok)
            h[nh++] = (ferry__hdr){"x-amz-security-token", tok};
        char got_c[8192], got_s[1024], got_a[1024];
        ferry__sigv4_req r = {.method = method,
                              .path = enc_path,
                              .query = query,
                              .headers = h,
                              .nheaders = nh,
                              .payload_hash = hash,
                              .region = region,
                              .service = service,
                              .key_id = ak,
                              .secret = sk};
        CHECK_OK(ferry__sigv4_sign(&r, got_c, got_s, got_a, sizeof got_a));
        check_text("the canonical request", name, got_c, want_c);
        check_text("the string to sign", name, got_s, want_s);
        check_text("the Authorization header", name, got_a, want_a);
        done++;
    }
    printf("%d cases match botocore\n", done);
    ferry__jtree_free(&doc);
    free(text);
}
