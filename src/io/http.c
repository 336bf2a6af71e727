/*
 * The transport: HTTP(S) through libcurl, for S3 (signed with sigv4.c, or unsigned
 * when no credentials are set) and plain URLs. Easy handles are kept in a small
 * pool so that their connections are reused (keep-alive); TLS offers HTTP/2 where
 * the server takes it, and checks certificates against the system's store or the
 * bundle AWS_CA_BUNDLE or SSL_CERT_FILE names. At most FERRY_REMOTE_CONNECTIONS
 * transfers run at once in the process (a transfer waits for a free one), so that
 * their receive buffers are bounded whatever the number of threads that fetch.
 *
 * Retries: 429, 500, 502, 503, 504, a reset or refused connection, a body cut
 * short and a stall (no byte for FERRY_REMOTE_STALL seconds) are tried again, on a
 * fresh connection, after a wait drawn at random below a bound that doubles from
 * FERRY_REMOTE_BACKOFF_MS (capped at 10 s: "full jitter"), up to
 * FERRY_REMOTE_ATTEMPTS tries and FERRY_REMOTE_DEADLINE seconds; a cut-short body
 * goes on from where it stopped. 403, 404 and the other answers are not retried.
 */
#include "remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

ferry__remote_counters ferry__remote_stats;

static ferry__http_cfg cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static unsigned env_uint(const char *name, unsigned dflt, unsigned lo, unsigned hi)
{
    const char *v = getenv(name);
    int64_t x;
    return v && ferry__parse_i64(v, lo, hi, &x) ? (unsigned)x : dflt;
}

static void cfg_init(void)
{
    cfg.attempts = env_uint("FERRY_REMOTE_ATTEMPTS", 8, 1, 100);
    cfg.stall_s = env_uint("FERRY_REMOTE_STALL", 30, 1, 3600);
    cfg.connect_s = env_uint("FERRY_REMOTE_CONNECT_TIMEOUT", 10, 1, 600);
    cfg.deadline_s = env_uint("FERRY_REMOTE_DEADLINE", 600, 1, 86400);
    cfg.backoff_ms = env_uint("FERRY_REMOTE_BACKOFF_MS", 100, 1, 60000);
    cfg.parts = env_uint("FERRY_REMOTE_PARTS", 4, 1, 64);
    cfg.part_size = (uint64_t)env_uint("FERRY_REMOTE_PART_SIZE", 16 << 20, 1 << 20, 1u << 30);
    cfg.list_page = env_uint("FERRY_REMOTE_LIST_PAGE", 0, 1, 1000);
    cfg.connections = env_uint("FERRY_REMOTE_CONNECTIONS", 16, 1, 256);
}

uint64_t ferry__remote_buffer_bytes(void)
{
    return (uint64_t)ferry__http_config()->connections *
           (FERRY__FETCH_BUFFER + FERRY__WRITE_BUFFER);
}

const ferry__http_cfg *ferry__http_config(void)
{
    pthread_once(&cfg_once, cfg_init);
    return &cfg;
}

#ifndef FERRY_HAVE_CURL

static int no_curl(const char *url)
{
    return ferry__err(FERRY_ENOTSUP,
                      "%s: this build of ferry has no libcurl, which remote locations (s3://, "
                      "http://, https://) need: install libcurl4-openssl-dev and build again",
                      url);
}

bool ferry__http_available(void)
{
    return false;
}

int ferry__http_init(void)
{
    return no_curl("s3://, http://, https://");
}

int ferry__http_head(const char *url, ferry__obj *o)
{
    (void)o;
    return no_curl(url);
}

int ferry__http_get_range(const ferry__obj *o, int fd, uint64_t off, uint64_t len)
{
    (void)fd, (void)off, (void)len;
    return no_curl(o->url);
}

int ferry__http_get_range_mem(const ferry__obj *o, void *buf, uint64_t off, size_t len)
{
    (void)buf, (void)off, (void)len;
    return no_curl(o->url);
}

int ferry__http_get_first(const char *url, ferry__obj *o, void *buf, size_t cap, size_t *got)
{
    (void)o, (void)buf, (void)cap, (void)got;
    return no_curl(url);
}

int ferry__http_list_page(const char *bucket, const char *prefix, const char *delimiter,
                          const char *token, ferry__s3_page *page)
{
    (void)prefix, (void)delimiter, (void)token, (void)page;
    char url[300];
    snprintf(url, sizeof url, "s3://%s", bucket);
    return no_curl(url);
}

#else

#include <curl/curl.h>

/* ---- The process's state: curl, the AWS settings, a pool of handles ---- */

#define POOL_MAX 256 /* FERRY_REMOTE_CONNECTIONS bounds it lower */

static struct {
    pthread_once_t once;
    int init_rc;
    char init_msg[FERRY_ERRMSG_MAX];
    ferry__aws aws;
    const char *ca; /* AWS_CA_BUNDLE or SSL_CERT_FILE, or NULL */
    pthread_mutex_t mu;
    CURL *pool[POOL_MAX];
    int npool;
    /* transfers under way (at most cfg.connections), and the handles that exist
     * (pooled or in use: never more than cfg.connections, each with its buffer) */
    unsigned busy;
    pthread_cond_t free_slot;
    unsigned handles;
    unsigned wbufs; /* transfers' write buffers (request.wbuf) that exist */
} g = {.once = PTHREAD_ONCE_INIT,
       .mu = PTHREAD_MUTEX_INITIALIZER,
       .free_slot = PTHREAD_COND_INITIALIZER};

static void g_init(void)
{
    ferry__http_config();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        g.init_rc = ferry__err(FERRY_EIO, "libcurl could not be initialised");
    } else {
        g.init_rc = ferry__aws_load(&g.aws, NULL);
    }
    if (g.init_rc < 0)
        ferry__err_copy(g.init_msg);
    const char *ca = getenv("AWS_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("SSL_CERT_FILE");
    g.ca = ca && *ca ? ca : NULL;
}

static int g_ready(void)
{
    pthread_once(&g.once, g_init);
    if (g.init_rc < 0)
        return ferry__err(g.init_rc, "%s", g.init_msg);
    return 0;
}

bool ferry__http_available(void)
{
    return true;
}

int ferry__http_init(void)
{
    return g_ready();
}

/* The memory fetch buffers hold now (under g.mu): the handles that exist, each
 * with its receive buffer, and the write buffers of the transfers under way; and
 * the most they held. */
static void count_buffers(int handles, int wbufs)
{
    g.handles += (unsigned)handles;
    g.wbufs += (unsigned)wbufs;
    uint64_t now =
        (uint64_t)g.handles * FERRY__FETCH_BUFFER + (uint64_t)g.wbufs * FERRY__WRITE_BUFFER;
    atomic_store_explicit(&ferry__remote_stats.buffer_bytes, now, memory_order_relaxed);
    if (now > atomic_load_explicit(&ferry__remote_stats.buffer_peak, memory_order_relaxed))
        atomic_store_explicit(&ferry__remote_stats.buffer_peak, now, memory_order_relaxed);
}

/* A handle for one transfer, once fewer than FERRY_REMOTE_CONNECTIONS are under
 * way: the transfers' buffers are bounded whatever the number of threads that
 * fetch. */
static CURL *handle_get(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&g.mu);
    while (g.busy >= cfg.connections)
        pthread_cond_wait(&g.free_slot, &g.mu);
    g.busy++;
    if (g.npool)
        h = g.pool[--g.npool];
    else if ((h = curl_easy_init()) != NULL)
        count_buffers(1, 0);
    if (!h && --g.busy < cfg.connections)
        pthread_cond_signal(&g.free_slot);
    pthread_mutex_unlock(&g.mu);
    if (h)
        curl_easy_reset(h); /* keeps its live connections */
    return h;
}

/* Ends a transfer: its handle is pooled (keep = its connection is sound) or
 * cleaned up. */
static void handle_put(CURL *h, bool keep)
{
    pthread_mutex_lock(&g.mu);
    if (keep && g.npool < POOL_MAX && (unsigned)g.npool < cfg.connections) {
        g.pool[g.npool++] = h;
        h = NULL;
    } else {
        count_buffers(-1, 0);
    }
    g.busy--;
    pthread_cond_signal(&g.free_slot);
    pthread_mutex_unlock(&g.mu);
    if (h)
        curl_easy_cleanup(h);
}

/* ---- One request ---- */

typedef struct request {
    /* what to send */
    char url[FERRY__URL_MAX + 512];
    const char *shown; /* the URL for messages (s3://...) */
    bool s3, head, fresh;
    char host[300], path[FERRY__URL_MAX + 64], query[3000];
    char range[64], if_match[160];
    /* the answer */
    long status;
    char etag[128], modified[64];
    uint64_t length; /* Content-Length, when given */
    bool has_length;
    uint64_t cr_start, cr_total; /* Content-Range */
    bool has_range;
    /* where the body goes: fd at pos, or mem (up to cap), or (an object's range
     * into memory) the part of it in [rmem_off, rmem_off + rmem_len) into rmem */
    int fd;
    uint64_t pos, got; /* got: bytes of the body so far, those in wbuf included */
    bool buffered;     /* a large range into a file: through wbuf */
    uint8_t *wbuf;     /* NULL, or WRITE_BUF bytes: what came, written out in large pieces
                        * (held by a transfer under way only: perform makes and frees it) */
    size_t held;       /* bytes in wbuf: they belong at pos + got - held */
    char *mem;
    size_t mem_n, mem_cap;
    uint8_t *rmem;
    uint64_t rmem_off, rmem_len;
    bool enough; /* a 200 to a range into memory stopped once the range came */
    char err_body[16384];
    size_t err_n;
    int sink_err; /* a write failed: its errno */
} request;

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    request *q = arg;
    size_t len = size * n;
    char line[512];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, l);
    line[l] = 0;
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n'))
        line[--l] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new answer (after a redirect or a 100) */
        q->etag[0] = q->modified[0] = 0;
        q->has_length = q->has_range = false;
        const char *sp = strchr(line, ' ');
        q->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return len;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        return len;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcasecmp(line, "etag"))
        snprintf(q->etag, sizeof q->etag, "%s", v);
    else if (!strcasecmp(line, "last-modified"))
        snprintf(q->modified, sizeof q->modified, "%s", v);
    else if (!strcasecmp(line, "content-length"))
        q->has_length = ferry__parse_u64(v, &q->length);
    else if (!strcasecmp(line, "content-range")) {
        unsigned long long a, b, t;
        if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            q->cr_start = a;
            q->cr_total = t;
            q->has_range = true;
        }
    }
    return len;
}

/* Bodies go to the cache's file in pieces of this size rather than as curl hands
 * them (16 KiB at a time over plain HTTP): the page cache then holds the copy in
 * large folios, and a reader's mapping of it faults a fraction of the times. */
#define WRITE_BUF ((size_t)FERRY__WRITE_BUFFER)

/* Writes what wbuf holds; false with q->sink_err set when the write fails. */
static bool flush_body(request *q)
{
    size_t done = 0;
    uint64_t at = q->pos + q->got - q->held;
    while (done < q->held) {
        ssize_t w = pwrite(q->fd, q->wbuf + done, q->held - done, (off_t)(at + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            q->sink_err = w < 0 ? errno : ENOSPC;
            q->held = 0;
            return false;
        }
        done += (size_t)w;
    }
    q->held = 0;
    return true;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    request *q = arg;
    size_t len = size * n;
    if (q->status < 200 || q->status > 299) {
        size_t take = sizeof q->err_body - 1 - q->err_n;
        take = take < len ? take : len;
        memcpy(q->err_body + q->err_n, p, take);
        q->err_n += take;
        q->err_body[q->err_n] = 0;
        return len;
    }
    if (q->mem) {
        if (len > q->mem_cap - q->mem_n) {
            q->sink_err = EFBIG;
            return 0;
        }
        memcpy(q->mem + q->mem_n, p, len);
        q->mem_n += len;
        q->got += len;
        return len;
    }
    if (q->fd >= 0 || q->rmem) {
        if (q->got == 0 && q->status == 200 && q->pos && !q->has_range)
            q->pos = 0; /* a whole object where a range was asked: it starts at 0 */
        atomic_fetch_add_explicit(&ferry__remote_stats.downloaded_bytes, len, memory_order_relaxed);
        if (q->rmem) { /* a range into memory: the part of the body inside it */
            uint64_t at = q->pos + q->got, end = q->rmem_off + q->rmem_len;
            uint64_t lo = at > q->rmem_off ? at : q->rmem_off, hi = at + len < end ? at + len : end;
            if (lo < hi)
                memcpy(q->rmem + (lo - q->rmem_off), p + (lo - at), (size_t)(hi - lo));
            q->got += len;
            if (q->status == 200 && !q->has_range && at + len >= end) {
                /* a server that ignores Range sends the whole object: what was
                 * asked has come, the rest is not downloaded */
                q->enough = true;
                return 0;
            }
            return len;
        }
        for (size_t done = 0; q->wbuf && done < len;) {
            size_t take = WRITE_BUF - q->held < len - done ? WRITE_BUF - q->held : len - done;
            memcpy(q->wbuf + q->held, p + done, take);
            q->held += take;
            q->got += take;
            done += take;
            if (q->held == WRITE_BUF && !flush_body(q))
                return 0;
        }
        if (q->wbuf)
            return len;
        size_t done = 0;
        while (done < len) {
            ssize_t w = pwrite(q->fd, p + done, len - done, (off_t)(q->pos + q->got + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                q->sink_err = w < 0 ? errno : ENOSPC;
                return 0;
            }
            done += (size_t)w;
        }
        q->got += len;
    }
    return len;
}

/* Ends a transfer when the process is exiting (ferry__remote_stopping). */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)arg, (void)dt, (void)dn, (void)ut, (void)un;
    return ferry__remote_stopping();
}

static void amz_now(char out[17])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Sends q once: the curl code, the answer in q. */
static CURLcode perform(request *q, char *curl_err)
{
    CURL *h = handle_get();
    struct curl_slist *hdr = NULL;
    char amz_date[17], auth[1024], line[2300];
    CURLcode cc;
    if (!h)
        return CURLE_OUT_OF_MEMORY;
    if (q->buffered && (q->wbuf = ferry__malloc(WRITE_BUF)) != NULL) { /* NULL: unbuffered */
        pthread_mutex_lock(&g.mu);
        count_buffers(0, 1);
        pthread_mutex_unlock(&g.mu);
    }
    q->held = 0;
    q->status = 0;
    q->got = 0;
    q->err_n = 0;
    q->etag[0] = q->modified[0] = 0;
    q->has_length = q->has_range = false;
    q->mem_n = 0;
    q->enough = false;
    curl_err[0] = 0;
    curl_easy_setopt(h, CURLOPT_URL, q->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)cfg.connect_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)cfg.stall_s);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, (long)FERRY__FETCH_BUFFER);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ferry/" FERRY_VERSION_STRING);
    if (g.ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, g.ca);
    if (q->fresh)
        curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    if (q->head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (!q->s3) {
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    }
    if (q->range[0]) {
        snprintf(line, sizeof line, "Range: %s", q->range);
        hdr = curl_slist_append(hdr, line);
    }
    if (q->if_match[0]) {
        snprintf(line, sizeof line, "If-Match: %s", q->if_match);
        hdr = curl_slist_append(hdr, line);
    }
    if (q->s3 && g.aws.key_id[0]) {
        /* signed: what SigV4 needs, and Range; If-Match is left unsigned, as the
         * AWS SDKs leave it (a proxy may rewrite it) */
        ferry__hdr hs[6];
        int nh = 0;
        amz_now(amz_date);
        hs[nh++] = (ferry__hdr){"host", q->host};
        hs[nh++] = (ferry__hdr){"x-amz-content-sha256", EMPTY_SHA256};
        hs[nh++] = (ferry__hdr){"x-amz-date", amz_date};
        if (q->range[0])
            hs[nh++] = (ferry__hdr){"range", q->range};
        if (g.aws.token[0])
            hs[nh++] = (ferry__hdr){"x-amz-security-token", g.aws.token};
        ferry__sigv4_req r = {.method = q->head ? "HEAD" : "GET",
                              .path = q->path,
                              .query = q->query,
                              .headers = hs,
                              .nheaders = nh,
                              .payload_hash = EMPTY_SHA256,
                              .region = g.aws.region,
                              .service = "s3",
                              .key_id = g.aws.key_id,
                              .secret = g.aws.secret};
        if (ferry__sigv4_sign(&r, NULL, NULL, auth, sizeof auth) == 0) {
            snprintf(line, sizeof line, "Authorization: %s", auth);
            hdr = curl_slist_append(hdr, line);
            snprintf(line, sizeof line, "x-amz-date: %s", amz_date);
            hdr = curl_slist_append(hdr, line);
            hdr = curl_slist_append(hdr, "x-amz-content-sha256: " EMPTY_SHA256);
            if (g.aws.token[0]) {
                snprintf(line, sizeof line, "x-amz-security-token: %s", g.aws.token);
                hdr = curl_slist_append(hdr, line);
            }
        }
    }
    /* curl would send "Expect:" and "Accept: * / *"; neither matters, both unsigned */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    atomic_fetch_add_explicit(&ferry__remote_stats.requests, 1, memory_order_relaxed);
    cc = curl_easy_perform(h);
    if (q->status == 0) {
        long st = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        q->status = st;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdr);
    if (q->wbuf) { /* written out before the transfer gives its connection back */
        if (q->held)
            flush_body(q);
        ferry__free(q->wbuf);
        q->wbuf = NULL;
        pthread_mutex_lock(&g.mu);
        count_buffers(0, -1);
        pthread_mutex_unlock(&g.mu);
    }
    /* a handle whose transfer failed may hold a broken connection: not pooled */
    handle_put(h, cc == CURLE_OK);
    return cc;
}

static bool retry_status(long s)
{
    return s == 429 || s == 500 || s == 502 || s == 503 || s == 504 || s == 408;
}

static bool retry_curl(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
        return true;
    default:
        return false;
    }
}

/* The wait before try `attempt` (2, 3, ...): uniform below a bound that doubles. */
static void backoff(unsigned attempt, uint64_t deadline)
{
    static _Atomic uint64_t seq;
    uint64_t bound = (uint64_t)cfg.backoff_ms * 1000000u << (attempt - 2 < 16 ? attempt - 2 : 16);
    if (bound > 10000000000ull)
        bound = 10000000000ull;
    ferry_rng r;
    ferry_rng_init(&r, ferry_now_ns(), (uint64_t)getpid(),
                   atomic_fetch_add_explicit(&seq, 1, memory_order_relaxed));
    uint64_t wait = ferry_rng_below(&r, bound + 1);
    uint64_t now = ferry_now_ns();
    if (now + wait > deadline)
        wait = deadline > now ? deadline - now : 0;
    /* in slices, so that a process exiting (ferry__remote_stopping) is not kept
     * waiting for a try it will not make */
    for (uint64_t end = now + wait; !ferry__remote_stopping() && (now = ferry_now_ns()) < end;) {
        uint64_t left = end - now < 100000000u ? end - now : 100000000u;
        struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

/* What a refused request's message tells the user to check, into out. */
static const char *what_to_check(const request *q, long status, char *out, size_t cap)
{
    if (!q->s3)
        return status == 404 ? "check the URL" : "check that the server lets this host read it";
    if (status == 404)
        return "check the bucket and the key, and the endpoint (AWS_ENDPOINT_URL) and region "
               "(AWS_REGION)";
    if (!g.aws.key_id[0]) {
        snprintf(out, cap,
                 "the request was unsigned because no credentials were found (%s); a private "
                 "bucket needs them",
                 g.aws.where);
        return out;
    }
    return "check the credentials, the region (AWS_REGION) and the endpoint "
           "(AWS_ENDPOINT_URL)";
}

/* Sends q until it succeeds (0) or fails for good. Into a file, a body cut short
 * after some bytes came returns 1: the caller asks for the rest. */
static int send_retrying(request *q)
{
    char curl_err[CURL_ERROR_SIZE];
    uint64_t t0 = ferry_now_ns(), deadline = t0 + (uint64_t)cfg.deadline_s * 1000000000u;
    unsigned attempt = 0;
    char last[400] = "";
    for (;;) {
        attempt++;
        if (attempt > 1) {
            atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
            backoff(attempt, deadline);
            if (ferry__remote_stopping())
                return ferry__err(FERRY_EIO, "%s: %s (not retried: the process is exiting)",
                                  q->shown, last);
            q->fresh = true;
        }
        CURLcode cc = perform(q, curl_err);
        if (cc == CURLE_WRITE_ERROR && q->enough)
            cc = CURLE_OK; /* stopped on purpose: what was asked came */
        if (q->held)
            flush_body(q); /* before anything looks at what came */
        if (q->sink_err)
            return ferry__err(FERRY_EIO, "%s: writing what was fetched: %s", q->shown,
                              strerror(q->sink_err));
        bool again;
        if (cc != CURLE_OK && (q->fd >= 0 || q->rmem) && q->status >= 200 && q->status <= 299 &&
            q->got > 0 && retry_curl(cc))
            return 1; /* part of the body came: the caller goes on from there */
        if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && q->status >= 300)) {
            snprintf(last, sizeof last, "%s", curl_err[0] ? curl_err : curl_easy_strerror(cc));
            again = retry_curl(cc);
            if (!again)
                return ferry__err(FERRY_EIO, "%s: %s (%s)", q->shown, last,
                                  cc == CURLE_PEER_FAILED_VERIFICATION ||
                                          cc == CURLE_SSL_CACERT_BADFILE
                                      ? "check the CA bundle: AWS_CA_BUNDLE or SSL_CERT_FILE"
                                      : "not retried");
        } else if (q->status >= 200 && q->status <= 299) {
            return 0;
        } else {
            char code[64], msg[256], hint[700];
            if (q->s3 &&
                ferry__s3_parse_error(q->err_body, q->err_n, code, sizeof code, msg, sizeof msg))
                snprintf(last, sizeof last, "HTTP %ld %s: %s", q->status, code, msg);
            else
                snprintf(last, sizeof last, "HTTP %ld", q->status);
            again = retry_status(q->status);
            if (!again) {
                int rc = q->status == 404   ? FERRY_ENOENT
                         : q->status == 412 ? FERRY_ESTALE
                                            : FERRY_EIO;
                if (q->status == 412)
                    return ferry__err(rc, "%s: %s: the object changed while it was read", q->shown,
                                      last);
                return ferry__err(rc, "%s: %s after %u attempt%s (%s)", q->shown, last, attempt,
                                  attempt == 1 ? "" : "s",
                                  what_to_check(q, q->status, hint, sizeof hint));
            }
        }
        if (attempt >= cfg.attempts || ferry_now_ns() >= deadline)
            return ferry__err(FERRY_EIO, "%s: %s, after %u attempts in %.1f s (retries exhausted)",
                              q->shown, last, attempt, (double)(ferry_now_ns() - t0) / 1e9);
    }
}

/* The request for an object: URL, host and path (signed) from url. */
static int object_request(request *q, const char *url)
{
    ferry__url u;
    int rc = ferry__url_parse(&u, url);
    if (rc < 0)
        return rc;
    q->shown = url;
    q->fd = -1;
    if (u.scheme != FERRY__URL_S3) {
        snprintf(q->url, sizeof q->url, "%s", url);
        return 0;
    }
    q->s3 = true;
    char key[FERRY__URL_MAX * 3];
    if (!ferry__uri_encode(u.path, strlen(u.path), true, key, sizeof key))
        return ferry__err(FERRY_EINVAL, "%s: the key is too long", url);
    const char *ep = g.aws.endpoint;
    if (ep[0] || strchr(u.host, '.')) { /* path-style */
        char base[600];
        if (ep[0])
            snprintf(base, sizeof base, "%s", ep);
        else
            snprintf(base, sizeof base, "https://s3.%s.amazonaws.com", g.aws.region);
        const char *h = strstr(base, "://") + 3;
        if (strchr(h, '/'))
            return ferry__err(FERRY_EINVAL, "S3 endpoint %s: has a path; give scheme://host[:port]",
                              ep);
        if (!ferry__host_header(base, q->host, sizeof q->host))
            return ferry__err(FERRY_EINVAL, "S3 endpoint %s: no host", ep);
        snprintf(q->path, sizeof q->path, "/%s/%s", u.host, key);
        snprintf(q->url, sizeof q->url, "%s%s", base, q->path);
    } else {
        snprintf(q->host, sizeof q->host, "%s.s3.%s.amazonaws.com", u.host, g.aws.region);
        snprintf(q->path, sizeof q->path, "/%s", key);
        snprintf(q->url, sizeof q->url, "https://%s%s", q->host, q->path);
    }
    return 0;
}

int ferry__http_head(const char *url, ferry__obj *o)
{
    request *q = ferry__calloc(1, sizeof *q);
    int rc = 0;
    if (!q)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", url);
    FERRY_TRY(g_ready());
    FERRY_TRY(object_request(q, url));
    q->head = true;
    rc = send_retrying(q);
    if (rc < 0 && q->status >= 400 && q->status < 500) {
        /* a HEAD's answer has no body to say why: a GET of one byte gets S3's
         * error document for the message */
        q->head = false;
        snprintf(q->range, sizeof q->range, "bytes=0-0");
        q->mem_cap = 1;
        q->mem = (char[1]){0};
        int rc2 = send_retrying(q);
        q->mem = NULL;
        if (rc2 == 0) /* it answers a GET: the HEAD's error stands */
            rc = ferry__err(rc, "%s: HTTP %ld to a HEAD, yet a GET is answered", url, q->status);
        else
            rc = rc2;
    }
    if (rc < 0)
        goto cleanup;
    if (!q->has_length)
        FERRY_FAIL(FERRY_EIO, "%s: the server gives no Content-Length", url);
    o->url = url;
    o->size = q->length;
    snprintf(o->etag, sizeof o->etag, "%s", q->etag);
    snprintf(o->modified, sizeof o->modified, "%s", q->modified);
cleanup:
    ferry__free(q);
    return rc;
}

int ferry__http_get_first(const char *url, ferry__obj *o, void *buf, size_t cap, size_t *got)
{
    request *q = ferry__calloc(1, sizeof *q);
    int rc = 0;
    if (!q)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", url);
    if (!cap) {
        rc = 1;
        goto cleanup;
    }
    FERRY_TRY(g_ready());
    FERRY_TRY(object_request(q, url));
    q->rmem = buf;
    q->rmem_len = cap;
    snprintf(q->range, sizeof q->range, "bytes=0-%llu", (unsigned long long)cap - 1);
    for (unsigned tries = 1;; tries++) {
        rc = send_retrying(q);
        if (rc < 0 && q->status == 416) { /* no byte 0: an empty object, a HEAD says */
            ferry__err_clear();
            rc = 1;
            goto cleanup;
        }
        if (rc < 0)
            goto cleanup;
        uint64_t size = q->has_range ? q->cr_total : q->length;
        if (q->status == 206 && !q->has_range)
            FERRY_FAIL(FERRY_EIO, "%s: HTTP 206 without a Content-Range", url);
        if (q->has_range && q->cr_start != 0)
            FERRY_FAIL(FERRY_EIO, "%s: asked for bytes from 0, the answer starts at %llu", url,
                       (unsigned long long)q->cr_start);
        if (!q->has_range && !q->has_length)
            FERRY_FAIL(FERRY_EIO, "%s: the server gives no Content-Length", url);
        uint64_t want = size < cap ? size : cap;
        if (rc == 0 && q->got >= want) {
            o->url = url;
            o->size = size;
            snprintf(o->etag, sizeof o->etag, "%s", q->etag);
            snprintf(o->modified, sizeof o->modified, "%s", q->modified);
            *got = (size_t)want;
            break;
        }
        /* a body cut short: asked again, on a fresh connection */
        atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
        if (tries >= cfg.attempts)
            FERRY_FAIL(FERRY_EIO,
                       "%s: bytes 0-%llu: the body was cut short %u times (retries "
                       "exhausted)",
                       url, (unsigned long long)want - 1, tries);
        q->fresh = true;
    }
    rc = 0;
cleanup:
    ferry__free(q);
    return rc;
}

static int get_range(const ferry__obj *o, int fd, void *mem, uint64_t off, uint64_t len)
{
    request *q = ferry__calloc(1, sizeof *q);
    int rc = 0;
    uint64_t done = 0;
    unsigned short_tries = 0;
    if (!q)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", o->url);
    FERRY_TRY(g_ready());
    FERRY_TRY(object_request(q, o->url));
    q->fd = fd;
    q->rmem = mem;
    q->rmem_off = off;
    q->rmem_len = mem ? len : 0;
    q->buffered = fd >= 0 && len > 64 * 1024; /* else written as it comes */
    if (o->etag[0])
        snprintf(q->if_match, sizeof q->if_match, "%s", o->etag);
    while (done < len) {
        uint64_t a = off + done, b = off + len - 1;
        snprintf(q->range, sizeof q->range, "bytes=%llu-%llu", (unsigned long long)a,
                 (unsigned long long)b);
        q->pos = a;
        FERRY_TRY(send_retrying(q));
        bool partial = rc == 1;
        rc = 0;
        if (o->etag[0] && q->etag[0] && strcmp(q->etag, o->etag))
            FERRY_FAIL(FERRY_ESTALE, "%s: ETag %s, was %s: the object changed while it was read",
                       o->url, q->etag, o->etag);
        if (q->status == 200 && !q->has_range) {
            /* the whole object: it must be the size we know */
            if (partial || (q->got != o->size && q->got < a + (b - a + 1)))
                goto short_body;
            if (q->got > o->size || (q->has_length && q->length != o->size))
                FERRY_FAIL(FERRY_ESTALE, "%s: %llu bytes, was %llu: the object changed", o->url,
                           (unsigned long long)q->got, (unsigned long long)o->size);
            done = len;
            break;
        }
        if (q->has_range && q->cr_total != o->size)
            FERRY_FAIL(FERRY_ESTALE, "%s: %llu bytes, was %llu: the object changed", o->url,
                       (unsigned long long)q->cr_total, (unsigned long long)o->size);
        if (q->has_range && q->cr_start != a)
            FERRY_FAIL(FERRY_EIO, "%s: asked for bytes from %llu, the answer starts at %llu",
                       o->url, (unsigned long long)a, (unsigned long long)q->cr_start);
        done += q->got;
        if (done >= len && !partial)
            break;
    short_body:
        /* a body cut short without an error from curl (a proxy that closes early) */
        atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
        if (++short_tries >= cfg.attempts)
            FERRY_FAIL(FERRY_EIO,
                       "%s: bytes %llu-%llu: the body was cut short %u times (retries exhausted)",
                       o->url, (unsigned long long)off, (unsigned long long)(off + len - 1),
                       short_tries);
        q->fresh = true;
    }
cleanup:
    ferry__free(q->wbuf);
    ferry__free(q);
    return rc;
}

int ferry__http_get_range(const ferry__obj *o, int fd, uint64_t off, uint64_t len)
{
    return get_range(o, fd, NULL, off, len);
}

int ferry__http_get_range_mem(const ferry__obj *o, void *buf, uint64_t off, size_t len)
{
    return len ? get_range(o, -1, buf, off, len) : 0;
}

int ferry__http_list_page(const char *bucket, const char *prefix, const char *delimiter,
                          const char *token, ferry__s3_page *page)
{
    request *q = ferry__calloc(1, sizeof *q);
    char shown[FERRY__URL_MAX + 16], enc[FERRY__URL_MAX * 3], obj[FERRY__URL_MAX + 16];
    int rc = 0;
    memset(page, 0, sizeof *page);
    if (!q)
        return ferry__err(FERRY_ENOMEM, "s3://%s: out of memory", bucket);
    FERRY_TRY(g_ready());
    snprintf(obj, sizeof obj, "s3://%s/", bucket);
    FERRY_TRY(object_request(q, obj));
    snprintf(shown, sizeof shown, "s3://%s/%s (listing)", bucket, prefix);
    q->shown = shown;
    /* the bucket itself: path-style "/bucket", virtual-hosted "/" */
    size_t pl = strlen(q->path);
    if (pl > 1 && q->path[pl - 1] == '/')
        q->path[pl - 1] = 0;
    size_t n = 0;
    n += (size_t)snprintf(q->query + n, sizeof q->query - n, "list-type=2");
    if (token[0]) {
        if (!ferry__uri_encode(token, strlen(token), false, enc, sizeof enc))
            FERRY_FAIL(FERRY_EINVAL, "%s: continuation token too long", shown);
        n += (size_t)snprintf(q->query + n, sizeof q->query - n, "&continuation-token=%s", enc);
    }
    if (delimiter)
        n += (size_t)snprintf(q->query + n, sizeof q->query - n, "&delimiter=%%2F");
    if (cfg.list_page)
        n += (size_t)snprintf(q->query + n, sizeof q->query - n, "&max-keys=%u", cfg.list_page);
    if (!ferry__uri_encode(prefix, strlen(prefix), false, enc, sizeof enc))
        FERRY_FAIL(FERRY_EINVAL, "%s: prefix too long", shown);
    n += (size_t)snprintf(q->query + n, sizeof q->query - n, "&prefix=%s", enc);
    if (n >= sizeof q->query)
        FERRY_FAIL(FERRY_EINVAL, "%s: the list request is too long", shown);
    char *base = strstr(q->url, "://");
    char *path_at = base ? strchr(base + 3, '/') : NULL;
    if (path_at)
        snprintf(path_at, sizeof q->url - (size_t)(path_at - q->url), "%s?%s",
                 q->path[0] ? q->path : "/", q->query);
    q->mem_cap = (size_t)64 << 20;
    q->mem = ferry__malloc(q->mem_cap);
    if (!q->mem)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", shown);
    FERRY_TRY(send_retrying(q));
    FERRY_TRY(ferry__s3_parse_list(page, q->mem, q->mem_n, shown));
cleanup:
    if (q)
        ferry__free(q->mem);
    ferry__free(q);
    return rc;
}

#endif
