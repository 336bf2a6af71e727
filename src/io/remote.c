/*
 * Remote objects as the file layer sees them: open (the cached copy, fetched when
 * missing), stat and list. What is known of an object (size, ETag) is kept for the
 * process, from a listing or a HEAD, so that opening a listed object costs no
 * extra request.
 */
#include "remote.h"
#include "ferry/remote.h"

#include <fnmatch.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- What is known of objects: a table by URL ---- */

#define KNOWN_SLOTS 65536

typedef struct known {
    char *url;
    uint64_t size;
    char etag[128], modified[64];
} known;

static struct {
    pthread_mutex_t mu;
    known *slot; /* KNOWN_SLOTS of them, by hash; a collision replaces */
} kn = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)(h % KNOWN_SLOTS);
}

static void remember(const ferry__obj *o)
{
    pthread_mutex_lock(&kn.mu);
    if (!kn.slot)
        kn.slot = ferry__calloc(KNOWN_SLOTS, sizeof *kn.slot);
    if (kn.slot) {
        known *k = &kn.slot[hash(o->url)];
        char *u = k->url && !strcmp(k->url, o->url) ? k->url : ferry__strdup(o->url);
        if (u) {
            if (u != k->url)
                ferry__free(k->url);
            k->url = u;
            k->size = o->size;
            snprintf(k->etag, sizeof k->etag, "%s", o->etag);
            snprintf(k->modified, sizeof k->modified, "%s", o->modified);
        }
    }
    pthread_mutex_unlock(&kn.mu);
}

static void forget(const char *url)
{
    pthread_mutex_lock(&kn.mu);
    if (kn.slot) {
        known *k = &kn.slot[hash(url)];
        if (k->url && !strcmp(k->url, url)) {
            ferry__free(k->url);
            k->url = NULL;
        }
    }
    pthread_mutex_unlock(&kn.mu);
}

static bool recall(const char *url, ferry__obj *o)
{
    bool found = false;
    pthread_mutex_lock(&kn.mu);
    if (kn.slot) {
        known *k = &kn.slot[hash(url)];
        if (k->url && !strcmp(k->url, url)) {
            o->url = url;
            o->size = k->size;
            snprintf(o->etag, sizeof o->etag, "%s", k->etag);
            snprintf(o->modified, sizeof o->modified, "%s", k->modified);
            found = true;
        }
    }
    pthread_mutex_unlock(&kn.mu);
    return found;
}

static int describe(const char *url, ferry__obj *o)
{
    memset(o, 0, sizeof *o);
    if (recall(url, o))
        return 0;
    int rc = ferry__http_head(url, o);
    if (rc == 0)
        remember(o);
    return rc;
}

/* ---- Fetching: one GET, or ranged parts on several threads ---- */

typedef struct parts {
    const ferry__obj *o;
    int fd;
    uint64_t part;
} parts;

static int fetch_part(void *arg, size_t i, unsigned worker)
{
    parts *p = arg;
    (void)worker;
    uint64_t off = (uint64_t)i * p->part;
    uint64_t len = p->o->size - off < p->part ? p->o->size - off : p->part;
    return ferry__http_get_range(p->o, p->fd, off, len);
}

static int fetch(void *arg, const ferry__obj *o, int fd, const char *name)
{
    const ferry__http_cfg *cfg = ferry__http_config();
    (void)arg, (void)name;
    if (o->size == 0)
        return 0;
    parts p = {o, fd, cfg->part_size};
    size_t n = (size_t)((o->size + p.part - 1) / p.part);
    if (n == 1 || cfg->parts == 1)
        return ferry__http_get_range(o, fd, 0, o->size);
    return ferry__parallel_for(n, cfg->parts < n ? cfg->parts : (unsigned)n, fetch_part, &p);
}

static int64_t parse_http_date(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = s[0] ? strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm) : NULL;
    return end ? (int64_t)timegm(&tm) * 1000000000 : 0;
}

int ferry__remote_open(ferry__file *f, const char *url)
{
    f->fd = -1;
    for (int tries = 0;; tries++) {
        ferry__obj o;
        bool hit;
        int fd, rc = describe(url, &o);
        if (rc < 0)
            return rc;
        uint64_t t0 = ferry_now_ns();
        rc = ferry__cache_open(&o, fetch, NULL, &fd, &hit);
        if (!hit)
            atomic_fetch_add_explicit(&ferry__remote_stats.wait_ns, ferry_now_ns() - t0,
                                      memory_order_relaxed);
        if (rc == FERRY_ESTALE && tries < 3) { /* it changed: learn its new version */
            forget(url);
            atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
            continue;
        }
        if (rc < 0)
            return rc;
        f->fd = fd;
        f->size = o.size;
        f->mtime_ns = parse_http_date(o.modified);
        return 0;
    }
}

int ferry__remote_stat(const char *url, uint64_t *size, int64_t *mtime_ns)
{
    ferry__obj o;
    int rc = describe(url, &o);
    if (rc == 0) {
        *size = o.size;
        *mtime_ns = parse_http_date(o.modified);
    }
    return rc;
}

int ferry__remote_read(const char *url, void *buf, uint64_t off, size_t len)
{
    for (int tries = 0;; tries++) {
        ferry__obj o;
        int rc = describe(url, &o);
        if (rc < 0)
            return rc;
        if (off > o.size || len > o.size - off)
            return ferry__err(FERRY_ECORRUPT, "%s: bytes %llu-%llu are past its end (%llu bytes)",
                              url, (unsigned long long)off, (unsigned long long)(off + len),
                              (unsigned long long)o.size);
        rc = ferry__http_get_range_mem(&o, buf, off, len);
        if (rc == FERRY_ESTALE && tries < 3) { /* it changed: learn its new version */
            forget(url);
            atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
            continue;
        }
        if (rc == 0)
            atomic_fetch_add_explicit(&ferry__remote_stats.ranged_reads, 1, memory_order_relaxed);
        return rc;
    }
}

int ferry__remote_peek(const char *url, void *buf, uint64_t off, size_t len)
{
    if (!ferry__remote_cached(url))
        return ferry__remote_read(url, buf, off, len);
    ferry__file f;
    size_t got;
    int rc = ferry__file_open(&f, url);
    if (rc < 0)
        return rc;
    rc = ferry__file_pread(&f, url, buf, len, off, &got);
    ferry__file_close(&f);
    if (rc == 0 && got != len)
        rc = ferry__err(FERRY_EIO, "%s: shrank while read", url);
    return rc;
}

int ferry__remote_fits(const char *what, size_t nfiles, uint64_t total)
{
    char dir[1024];
    uint64_t limit;
    int rc = ferry__cache_settings(dir, sizeof dir, &limit);
    if (rc < 0 || total <= limit)
        return rc;
    return ferry__err(FERRY_ERANGE,
                      "%s: its %zu remote file%s hold %llu bytes, more than cache %s may hold "
                      "(its limit is %llu bytes): a map-style source keeps every file it reads "
                      "open, so all of them must fit; raise cache_limit= or FERRY_CACHE_LIMIT",
                      what, nfiles, nfiles == 1 ? "" : "s", (unsigned long long)total, dir,
                      (unsigned long long)limit);
}

bool ferry__remote_cached(const char *url)
{
    ferry__obj o;
    memset(&o, 0, sizeof o);
    return recall(url, &o) && ferry__cache_holds(&o);
}

/* ---- Listing ---- */

typedef struct url_list {
    char **v;
    size_t n, cap;
} url_list;

static int push(url_list *l, const char *bucket, const char *key)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **g = cap <= 10000000 ? ferry__realloc(l->v, cap * sizeof *g) : NULL;
        if (!g)
            return ferry__err(FERRY_ENOMEM, "s3://%s: out of memory listing", bucket);
        l->v = g;
        l->cap = cap;
    }
    size_t len = strlen(bucket) + strlen(key) + 7;
    if (!(l->v[l->n] = ferry__malloc(len)))
        return ferry__err(FERRY_ENOMEM, "s3://%s: out of memory listing", bucket);
    snprintf(l->v[l->n++], len, "s3://%s/%s", bucket, key);
    return 0;
}

int ferry__remote_list(const char *location, char ***urls, size_t *n)
{
    ferry__url u;
    url_list l = {0};
    ferry__s3_page page;
    char prefix[FERRY__URL_MAX + 2], token[1024] = "";
    int rc = 0;
    *urls = NULL;
    *n = 0;
    FERRY_TRY(ferry__url_parse(&u, location));
    if (u.scheme != FERRY__URL_S3)
        FERRY_FAIL(FERRY_ENOTSUP,
                   "%s: an http(s) location cannot be listed: name the files, or give a brace "
                   "range (train-{000000..000099}.tar)",
                   location);
    const char *glob = strpbrk(u.path, "*?[");
    const char *delim = "/";
    if (glob) {
        snprintf(prefix, sizeof prefix, "%.*s", (int)(glob - u.path), u.path);
        if (strchr(glob, '/'))
            delim = NULL;
    } else {
        size_t kl = strlen(u.path);
        snprintf(prefix, sizeof prefix, "%s%s", u.path, kl && u.path[kl - 1] != '/' ? "/" : "");
    }
    do {
        FERRY_TRY(ferry__http_list_page(u.host, prefix, delim, token, &page));
        for (size_t i = 0; rc == 0 && i < page.n; i++) {
            const char *key = page.obj[i].key;
            size_t kl = strlen(key);
            if (kl && key[kl - 1] == '/')
                continue; /* a "folder" marker */
            if (glob ? fnmatch(u.path, key, FNM_PATHNAME) != 0
                     : strncmp(key, prefix, strlen(prefix)) || strchr(key + strlen(prefix), '/'))
                continue;
            rc = push(&l, u.host, key);
            if (rc == 0) {
                ferry__obj o = {.url = l.v[l.n - 1], .size = page.obj[i].size};
                snprintf(o.etag, sizeof o.etag, "%s", page.obj[i].etag);
                remember(&o);
            }
        }
        snprintf(token, sizeof token, "%s", page.truncated ? page.next_token : "");
        ferry__s3_page_free(&page);
        if (rc < 0)
            goto cleanup;
    } while (token[0]);
    /* S3 lists in key order (bytes), as strcmp sorts */
    *urls = l.v;
    *n = l.n;
    l.v = NULL;
    l.n = 0;
cleanup:
    for (size_t i = 0; i < l.n; i++)
        ferry__free(l.v[i]);
    ferry__free(l.v);
    return rc;
}

/* ---- Fetching ahead ---- */

static struct {
    pthread_mutex_t mu;
    ferry__pool *pool;
    unsigned queued;
} bg = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define AHEAD_THREADS 4
#define AHEAD_QUEUE 64

static pthread_cond_t bg_idle; /* on the monotonic clock: made with the pool */

static void prefetch_job(void *arg)
{
    char *url = arg;
    ferry__file f;
    if (!ferry__remote_stopping() && ferry__remote_open(&f, url) == 0)
        ferry__file_close(&f);
    ferry__err_clear();
    ferry__free(url);
    pthread_mutex_lock(&bg.mu);
    if (--bg.queued == 0)
        pthread_cond_broadcast(&bg_idle);
    pthread_mutex_unlock(&bg.mu);
}

/* At the process's exit, fetches ahead still under way would run into the TLS
 * library's own exit cleanup: they are told to stop (the transfers end at their
 * next progress call) and waited for, up to 5 s. Registered with atexit when the
 * background threads start, after libcurl's TLS library registered its own, so
 * that it runs first. */
static atomic_bool stopping;

bool ferry__remote_stopping(void)
{
    return atomic_load_explicit(&stopping, memory_order_relaxed);
}

static void quiesce(void)
{
    atomic_store(&stopping, true);
    pthread_mutex_lock(&bg.mu);
    uint64_t deadline = ferry_now_ns() + 5000000000ull;
    while (bg.queued && ferry__cond_wait_until(&bg_idle, &bg.mu, deadline))
        ;
    pthread_mutex_unlock(&bg.mu);
}

void ferry__remote_prefetch(const char *url)
{
    /* the last hints, by hash: a URL hinted again soon after is not queued twice */
    static _Atomic uint64_t recent[256];
    uint64_t h = 1469598103934665603ull;
    for (const char *c = url; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    if (atomic_exchange_explicit(&recent[h % 256], h, memory_order_relaxed) == h)
        return;
    char *copy = ferry__strdup(url);
    if (!copy)
        return;
    pthread_mutex_lock(&bg.mu);
    if (!bg.pool) {
        if (ferry__cond_init(&bg_idle) < 0 ||
            ferry__pool_create(&bg.pool, AHEAD_THREADS, AHEAD_QUEUE) < 0)
            bg.pool = NULL;
        else
            atexit(quiesce);
    }
    bool ok = bg.pool && bg.queued < AHEAD_QUEUE;
    if (ok)
        bg.queued++;
    pthread_mutex_unlock(&bg.mu);
    if (!ok || ferry__pool_add(bg.pool, prefetch_job, copy) < 0) {
        ferry__free(copy);
        if (ok) {
            pthread_mutex_lock(&bg.mu);
            bg.queued--;
            pthread_mutex_unlock(&bg.mu);
        }
    }
    ferry__err_clear();
}

size_t ferry__remote_ahead(void)
{
    const char *v = getenv("FERRY_REMOTE_AHEAD");
    int64_t x;
    return v && ferry__parse_i64(v, 0, 1024, &x) ? (size_t)x : 4;
}

void ferry__prefetch_ahead(char *const *paths, size_t n, size_t at, size_t ahead)
{
    if (!ahead)
        ahead = ferry__remote_ahead();
    for (size_t i = at; i < n && i - at < ahead; i++)
        if (ferry__is_remote(paths[i]))
            ferry__remote_prefetch(paths[i]);
}

void ferry_remote_stats_get(ferry_remote_stats *out)
{
    ferry__remote_counters *c = &ferry__remote_stats;
    out->downloaded_bytes = atomic_load_explicit(&c->downloaded_bytes, memory_order_relaxed);
    out->cache_hits = atomic_load_explicit(&c->cache_hits, memory_order_relaxed);
    out->cache_misses = atomic_load_explicit(&c->cache_misses, memory_order_relaxed);
    out->retries = atomic_load_explicit(&c->retries, memory_order_relaxed);
    out->fetch_wait_ns = atomic_load_explicit(&c->wait_ns, memory_order_relaxed);
    out->requests = atomic_load_explicit(&c->requests, memory_order_relaxed);
    out->ranged_reads = atomic_load_explicit(&c->ranged_reads, memory_order_relaxed);
    out->fetch_buffer_bytes = atomic_load_explicit(&c->buffer_bytes, memory_order_relaxed);
    out->fetch_buffer_peak = atomic_load_explicit(&c->buffer_peak, memory_order_relaxed);
}

int ferry_remote_available(void)
{
    return ferry__http_available();
}
