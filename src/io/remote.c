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

static uint64_t hash64(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t hash(const char *s)
{
    return (size_t)(hash64(s) % KNOWN_SLOTS);
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

/* HEADs under way, so that a thread that wants an object another thread is asking
 * about waits for that answer instead of asking again (a reader catching up with
 * the revalidation ahead of it). Past INFLIGHT_SLOTS at once, threads just ask. */
#define INFLIGHT_SLOTS 64

static struct {
    pthread_mutex_t mu;
    pthread_cond_t done;
    uint64_t hash[INFLIGHT_SLOTS]; /* 0: free */
} fl = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}};

/* Waits for a HEAD (or a first read) of url under way in another thread. True when
 * o is then known; else this thread asks, in *slot (-1 past INFLIGHT_SLOTS). */
static bool claim(const char *url, ferry__obj *o, int *slot)
{
    uint64_t h = hash64(url) | 1;
    *slot = -1;
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&fl.mu);
    for (;;) {
        if (recall(url, o)) {
            pthread_mutex_unlock(&fl.mu);
            return true;
        }
        int busy = -1, free_slot = -1;
        for (int i = 0; i < INFLIGHT_SLOTS && busy < 0; i++) {
            if (fl.hash[i] == h)
                busy = i;
            else if (!fl.hash[i] && free_slot < 0)
                free_slot = i;
        }
        if (busy < 0) {
            if ((*slot = free_slot) >= 0)
                fl.hash[*slot] = h;
            break;
        }
        /* then the answer is known; or it failed, and this thread asks to have the error */
        pthread_cond_wait(&fl.done, &fl.mu);
    }
    pthread_mutex_unlock(&fl.mu);
    return false;
}

static void release(int slot)
{
    if (slot >= 0) {
        pthread_mutex_lock(&fl.mu);
        fl.hash[slot] = 0;
        pthread_cond_broadcast(&fl.done);
        pthread_mutex_unlock(&fl.mu);
    }
}

static int describe(const char *url, ferry__obj *o)
{
    int slot;
    if (claim(url, o, &slot))
        return 0;
    int rc = ferry__http_head(url, o);
    if (rc == 0)
        remember(o);
    release(slot);
    return rc;
}

/* ---- Checks of fetched copies: a table by URL ---- */

typedef struct check_entry {
    char *url;
    ferry__remote_check_fn check;
    char *rejected;      /* the message of a version whose copies failed CHECK_FETCHES times */
    char etag[128 + 64]; /* the version that failed: ETag, else size and Last-Modified */
    unsigned failures;   /* its copies that failed */
} check_entry;

#define CHECKS_MAX ((size_t)1 << 25)

static struct {
    pthread_mutex_t mu;
    check_entry *v; /* open addressing, linear probing; cap a power of two */
    size_t n, cap;
} chk = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The entry of url, or the free slot where it goes (under chk.mu; chk.cap > 0). */
static check_entry *check_slot(const char *url)
{
    size_t i = (size_t)hash64(url) & (chk.cap - 1);
    while (chk.v[i].url && strcmp(chk.v[i].url, url))
        i = (i + 1) & (chk.cap - 1);
    return &chk.v[i];
}

static bool check_grow(void)
{
    size_t cap = chk.cap ? chk.cap * 2 : 1024;
    check_entry *old = chk.v, *v = cap <= 2 * CHECKS_MAX ? ferry__calloc(cap, sizeof *v) : NULL;
    if (!v)
        return false;
    size_t oldcap = chk.cap;
    chk.v = v;
    chk.cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].url)
            *check_slot(old[i].url) = old[i];
    ferry__free(old);
    return true;
}

void ferry__remote_check_set(const char *url, ferry__remote_check_fn check)
{
    pthread_mutex_lock(&chk.mu);
    if ((chk.n + 1) * 2 <= chk.cap || check_grow()) {
        check_entry *e = check_slot(url);
        if (e->url) {
            e->check = check;
        } else if ((e->url = ferry__strdup(url))) {
            e->check = check;
            chk.n++;
        }
    }
    pthread_mutex_unlock(&chk.mu);
    ferry__err_clear();
}

void ferry__remote_check_paths(char *const *paths, size_t n, ferry__remote_check_fn check)
{
    for (size_t i = 0; i < n; i++)
        if (ferry__is_remote(paths[i]))
            ferry__remote_check_set(paths[i], check);
}

static void version_of(const ferry__obj *o, char *out, size_t cap)
{
    if (o->etag[0])
        snprintf(out, cap, "%s", o->etag);
    else
        snprintf(out, cap, "%llu %s", (unsigned long long)o->size, o->modified);
}

/* url's check, and (in *why, FERRY_ERRMSG_MAX bytes) the message of this version of
 * the object when it was rejected before; why[0] is 0 otherwise. */
static ferry__remote_check_fn check_of(const ferry__obj *o, char *why)
{
    ferry__remote_check_fn fn = NULL;
    char ver[sizeof chk.v->etag];
    why[0] = 0;
    version_of(o, ver, sizeof ver);
    pthread_mutex_lock(&chk.mu);
    if (chk.cap) {
        check_entry *e = check_slot(o->url);
        if (e->url) {
            fn = e->check;
            if (e->rejected && !strcmp(e->etag, ver))
                snprintf(why, FERRY_ERRMSG_MAX, "%s", e->rejected);
        }
    }
    pthread_mutex_unlock(&chk.mu);
    return fn;
}

/* Fetches of one version of an object whose copies fail their check, at most: a
 * second fetch cures a copy a transfer damaged; an object stored damaged stays so. */
#define CHECK_FETCHES 2

/* Counts a failed copy of o; true when o may be fetched again. Else its version
 * is rejected with why, for every later open. */
static bool check_failed(const ferry__obj *o, const char *why)
{
    char ver[sizeof chk.v->etag];
    bool again = false;
    version_of(o, ver, sizeof ver);
    pthread_mutex_lock(&chk.mu);
    if (chk.cap) {
        check_entry *e = check_slot(o->url);
        if (e->url) {
            if (strcmp(e->etag, ver)) {
                snprintf(e->etag, sizeof e->etag, "%s", ver);
                ferry__free(e->rejected);
                e->rejected = NULL;
                e->failures = 0;
            }
            again = ++e->failures < CHECK_FETCHES;
            if (!again && !e->rejected)
                e->rejected = ferry__strdup(why);
        }
    }
    pthread_mutex_unlock(&chk.mu);
    return again;
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

/* FERRY_REMOTE_CHECK=0 turns the checks before the rename off (copies are then
 * checked only as they are read), for measuring what they cost. */
static bool checks_on(void)
{
    static atomic_int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("FERRY_REMOTE_CHECK");
        v = !(e && !strcmp(e, "0"));
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

typedef struct fetch_arg {
    ferry__remote_check_fn check; /* NULL: none */
    bool rejected;                /* the copy came whole and failed the check */
    bool again;                   /* and may be fetched once more */
} fetch_arg;

/* msg with every `from` in it made `to`, into out (cap bytes). */
static void replace_all(const char *msg, const char *from, const char *to, char *out, size_t cap)
{
    size_t len = strlen(from), k = 0;
    while (*msg && k + 1 < cap) {
        if (len && !strncmp(msg, from, len)) {
            k += (size_t)snprintf(out + k, cap - k, "%s", to);
            msg += len;
        } else {
            out[k++] = *msg++;
        }
        if (k >= cap)
            k = cap - 1;
    }
    out[k] = 0;
}

static int fetch(void *arg, const ferry__obj *o, int fd, const char *name)
{
    const ferry__http_cfg *cfg = ferry__http_config();
    fetch_arg *fa = arg;
    parts p = {o, fd, cfg->part_size};
    size_t n = (size_t)((o->size + p.part - 1) / p.part);
    char why[FERRY_ERRMSG_MAX];
    int rc = 0;
    /* rejected while this thread waited for the fetch's lock: not fetched again */
    if (fa->check && (check_of(o, why), why[0]))
        return ferry__err(FERRY_ECORRUPT, "%s", why);
    if (o->size == 0)
        rc = 0;
    else if (n == 1 || cfg->parts == 1)
        rc = ferry__http_get_range(o, fd, 0, o->size);
    else
        rc = ferry__parallel_for(n, cfg->parts < n ? cfg->parts : (unsigned)n, fetch_part, &p);
    if (rc < 0 || !fa->check || !checks_on())
        return rc;
    /* the format's checks, on the file just written (in the page cache), before the
     * cache renames it into place: its messages name the object, not the temporary */
    if ((rc = fa->check(name, o->url)) < 0) {
        char msg[FERRY_ERRMSG_MAX], out[FERRY_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", ferry_last_errmsg());
        replace_all(msg, name, o->url, out, sizeof out);
        if (rc != FERRY_ECORRUPT)
            return ferry__err(rc, "%s", out);
        /* counted here, under the fetch's lock, so that a thread waiting for it sees
         * the verdict */
        fa->rejected = true;
        snprintf(msg, sizeof msg, "%s (fetched %d times, failing its check each time: not cached)",
                 out, CHECK_FETCHES);
        fa->again = check_failed(o, msg);
        return ferry__err(rc, "%s", fa->again ? out : msg);
    }
    return 0;
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
        char why[FERRY_ERRMSG_MAX];
        int fd, rc = describe(url, &o);
        if (rc < 0)
            return rc;
        fetch_arg fa = {check_of(&o, why), false, false};
        if (why[0])
            return ferry__err(FERRY_ECORRUPT, "%s", why);
        uint64_t t0 = ferry_now_ns();
        rc = ferry__cache_open(&o, fetch, &fa, &fd, &hit);
        if (!hit)
            atomic_fetch_add_explicit(&ferry__remote_stats.wait_ns, ferry_now_ns() - t0,
                                      memory_order_relaxed);
        if (rc == FERRY_ESTALE && tries < 3) { /* it changed: learn its new version */
            forget(url);
            atomic_fetch_add_explicit(&ferry__remote_stats.retries, 1, memory_order_relaxed);
            continue;
        }
        if (fa.rejected && fa.again) {
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

int ferry__remote_peek_first(const char *url, void *buf, size_t cap, size_t *got, uint64_t *size)
{
    ferry__obj o;
    int slot, rc;
    if (!claim(url, &o, &slot)) {
        /* not known: the read's answer says what a HEAD would */
        rc = ferry__http_get_first(url, &o, buf, cap, got);
        if (rc == 0) {
            remember(&o);
            atomic_fetch_add_explicit(&ferry__remote_stats.ranged_reads, 1, memory_order_relaxed);
        }
        release(slot);
        if (rc <= 0) {
            if (rc == 0)
                *size = o.size;
            return rc;
        }
    }
    int64_t mtime;
    if ((rc = ferry__remote_stat(url, size, &mtime)) < 0)
        return rc;
    *got = *size < cap ? (size_t)*size : cap;
    return ferry__remote_peek(url, buf, 0, *got);
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

/* Two pools: fetches ahead (AHEAD_THREADS, each a whole object) and revalidations
 * ahead (REVALIDATE_THREADS, each one HEAD), so that learning an object's version
 * never waits behind a download. */
static struct {
    pthread_mutex_t mu;
    ferry__pool *fetch, *head;
    bool made;
    unsigned queued; /* jobs of both, not yet finished */
} bg = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define AHEAD_THREADS 4
#define AHEAD_QUEUE 64
#define REVALIDATE_THREADS 8
#define REVALIDATE_QUEUE 256

static pthread_cond_t bg_idle; /* on the monotonic clock: made with the pools */

static void job_done(char *url)
{
    ferry__err_clear();
    ferry__free(url);
    pthread_mutex_lock(&bg.mu);
    if (--bg.queued == 0)
        pthread_cond_broadcast(&bg_idle);
    pthread_mutex_unlock(&bg.mu);
}

static void prefetch_job(void *arg)
{
    ferry__file f;
    if (!ferry__remote_stopping() && ferry__remote_open(&f, arg) == 0)
        ferry__file_close(&f);
    job_done(arg);
}

static void revalidate_job(void *arg)
{
    ferry__obj o;
    if (!ferry__remote_stopping())
        describe(arg, &o);
    job_done(arg);
}

/* At the process's exit, fetches ahead still under way would run into the TLS
 * library's own exit cleanup: they are told to stop (the transfers end at their
 * next progress call) and waited for, up to 5 s. Registered with atexit when the
 * background threads start, after libcurl's TLS library registered its own (the
 * transport is initialised first, ferry__http_init), so that it runs first: a
 * source whose files are named (a brace range) queues work before its first
 * request, and the TLS library, cleaned up under transfers, would crash them. */
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

/* Queues job(url) on the fetch pool or the HEAD pool (a hint: nothing when the
 * queue is full or the pools cannot be made). */
static void submit(bool head, const char *url)
{
    char *copy = ferry__strdup(url);
    if (!copy)
        return;
    pthread_mutex_lock(&bg.mu);
    if (!bg.made) {
        bg.made = true;
        if (ferry__http_init() < 0 || ferry__cond_init(&bg_idle) < 0 ||
            ferry__pool_create(&bg.fetch, AHEAD_THREADS, AHEAD_QUEUE) < 0 ||
            ferry__pool_create(&bg.head, REVALIDATE_THREADS, REVALIDATE_QUEUE) < 0)
            bg.head = NULL;
        else
            atexit(quiesce);
    }
    ferry__pool *pool = head ? bg.head : bg.fetch;
    bool ok = bg.fetch && bg.head && bg.queued < AHEAD_QUEUE + REVALIDATE_QUEUE;
    if (ok)
        bg.queued++;
    pthread_mutex_unlock(&bg.mu);
    if (!ok || ferry__pool_add(pool, head ? revalidate_job : prefetch_job, copy) < 0) {
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

void ferry__remote_prefetch(const char *url)
{
    /* the last hints, by hash: a URL hinted again soon after is not queued twice */
    static _Atomic uint64_t recent[256];
    uint64_t h = hash64(url);
    if (atomic_exchange_explicit(&recent[h % 256], h, memory_order_relaxed) == h)
        return;
    submit(false, url);
}

void ferry__remote_revalidate(char *const *paths, size_t n, size_t max)
{
    if (!max) {
        const char *v = getenv("FERRY_REMOTE_REVALIDATE_AHEAD");
        int64_t x;
        max = v && ferry__parse_i64(v, 0, 1 << 20, &x) ? (size_t)x : 64;
    }
    for (size_t i = 0, queued = 0; i < n && queued < max; i++) {
        ferry__obj o;
        if (!paths[i] || !ferry__is_remote(paths[i]) || recall(paths[i], &o))
            continue;
        submit(true, paths[i]);
        queued++;
    }
}

void ferry__prefetch_ahead(char *const *paths, size_t n, size_t at, size_t ahead)
{
    if (!ahead)
        ahead = ferry__remote_ahead();
    if (at < n)
        ferry__remote_revalidate(paths + at, n - at, 0);
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

int ferry_remote_wait(double timeout_s)
{
    if (!(timeout_s >= 0))
        return ferry__err(FERRY_EINVAL, "ferry_remote_wait: timeout %g s", timeout_s);
    uint64_t deadline = ferry_now_ns() + (uint64_t)(timeout_s > 1e9 ? 1e18 : timeout_s * 1e9);
    pthread_mutex_lock(&bg.mu);
    while (bg.queued && bg.made && ferry__cond_wait_until(&bg_idle, &bg.mu, deadline))
        ;
    unsigned left = bg.queued;
    pthread_mutex_unlock(&bg.mu);
    if (left)
        return ferry__err(FERRY_ETIMEDOUT,
                          "ferry_remote_wait: %u fetches ahead or revalidations still under "
                          "way after %g s",
                          left, timeout_s);
    return 0;
}

int ferry_remote_available(void)
{
    return ferry__http_available();
}
