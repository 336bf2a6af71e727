/*
 * The node cache: one folder that every process of the node shares, with no shared
 * memory and no daemon. Under DIR/v1:
 *   objects/XX/KEY  the cached copies, KEY the hex SHA-256 of the object's URL and
 *                   version (ETag, else size and Last-Modified), never its name
 *   tmp/KEY.*       fetches under way, each locked (flock) by its fetcher
 *   locks/NNN       4096 lock files: a key's fetch holds its slot exclusively, so
 *                   one process of the node fetches it while the others wait
 *   evict.lock      held while the cache is measured and trimmed
 * A reader holds a shared lock on its copy; eviction takes an exclusive one without
 * waiting, so a copy being read is never removed. A copy's modification time is
 * its last use: eviction removes the least recently used first. A temporary that
 * no live process holds locked is what a killed fetch left: it is removed, never
 * renamed into place, so nothing but a whole, checked copy is read.
 */
#include "remote.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define LOCK_SLOTS 4096
#define MAX_ENTRIES 10000000u

static struct {
    pthread_mutex_t mu;
    bool resolved, used;
    char dir[1024]; /* set by configure (or resolved from the environment) */
    char limit_text[64];
    uint64_t limit;
    bool cleaned; /* leftovers of killed fetches removed once per process */
} c = {.mu = PTHREAD_MUTEX_INITIALIZER};

bool ferry__parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return false;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return false;
    uint64_t mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = (uint64_t)1 << 10, end++;
        break;
    case 'm':
    case 'M':
        mul = (uint64_t)1 << 20, end++;
        break;
    case 'g':
    case 'G':
        mul = (uint64_t)1 << 30, end++;
        break;
    case 't':
    case 'T':
        mul = (uint64_t)1 << 40, end++;
        break;
    default:
        break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return false;
    if (v * (double)mul >= 1.8e19)
        return false;
    *out = (uint64_t)(v * (double)mul);
    return true;
}

int ferry__cache_configure(const char *dir, const char *limit_text)
{
    int rc = 0;
    uint64_t limit;
    if (limit_text && !ferry__parse_size(limit_text, &limit))
        return ferry__err(FERRY_EINVAL,
                          "cache_limit=%s: not a size (bytes, or a number with K, M, G or T)",
                          limit_text);
    if (dir && (!*dir || strlen(dir) >= sizeof c.dir - 64))
        return ferry__err(FERRY_EINVAL, "cache=%s: an empty or too long folder name", dir);
    pthread_mutex_lock(&c.mu);
    if (dir && c.used && strcmp(dir, c.dir)) {
        rc = ferry__err(FERRY_EINVAL,
                        "cache=%s: this process already caches remote objects in %s (one cache "
                        "per process)",
                        dir, c.dir);
    } else {
        if (dir) {
            snprintf(c.dir, sizeof c.dir, "%s", dir);
            c.resolved = false;
        }
        if (limit_text) {
            snprintf(c.limit_text, sizeof c.limit_text, "%s", limit_text);
            c.limit = limit;
        }
    }
    pthread_mutex_unlock(&c.mu);
    return rc;
}

static int mkdirs(const char *path)
{
    char p[1100];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return ferry__err(FERRY_EIO, "cache %s: cannot make %s: %s", path, p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return ferry__err(FERRY_EIO, "cache: cannot make %s: %s", p, strerror(errno));
    return 0;
}

/* Bytes held by copies and temporaries (tmp counts its files' full sizes: a fetch
 * sets its temporary's size first). */
static uint64_t used_bytes(const char *root);

/* Resolves the folder and the limit (under c.mu). */
static int resolve(void)
{
    if (c.resolved)
        return 0;
    if (!c.dir[0]) {
        const char *v = getenv("FERRY_CACHE");
        const char *home = getenv("HOME");
        if (v && *v)
            snprintf(c.dir, sizeof c.dir, "%s", v);
        else if (home && *home)
            snprintf(c.dir, sizeof c.dir, "%s/.cache/ferry", home);
        else
            return ferry__err(FERRY_EINVAL,
                              "remote objects need a cache folder: give cache=DIR, FERRY_CACHE "
                              "or HOME");
    }
    if (strlen(c.dir) >= sizeof c.dir - 64)
        return ferry__err(FERRY_EINVAL, "cache %s: the folder's name is too long", c.dir);
    char sub[1100];
    static const char *subs[] = {"v1/objects", "v1/tmp", "v1/locks"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", c.dir, subs[i]);
        int rc = mkdirs(sub);
        if (rc < 0)
            return rc;
    }
    if (!c.limit_text[0]) {
        const char *v = getenv("FERRY_CACHE_LIMIT");
        if (v && *v) {
            if (!ferry__parse_size(v, &c.limit))
                return ferry__err(FERRY_EINVAL, "FERRY_CACHE_LIMIT=%s: not a size", v);
            snprintf(c.limit_text, sizeof c.limit_text, "%s", v);
        } else {
            struct statvfs vf;
            snprintf(sub, sizeof sub, "%s/v1", c.dir);
            if (statvfs(sub, &vf) != 0)
                return ferry__err(FERRY_EIO, "cache %s: %s", c.dir, strerror(errno));
            uint64_t free_b = (uint64_t)vf.f_bavail * vf.f_frsize;
            c.limit = (free_b + used_bytes(sub)) / 10 * 8;
        }
    }
    c.resolved = true;
    return 0;
}

int ferry__cache_settings(char *dir, size_t cap, uint64_t *limit)
{
    pthread_mutex_lock(&c.mu);
    int rc = resolve();
    if (rc == 0) {
        snprintf(dir, cap, "%s", c.dir);
        *limit = c.limit;
    }
    pthread_mutex_unlock(&c.mu);
    return rc;
}

void ferry__cache_key(const ferry__obj *o, char out[65])
{
    char text[FERRY__URL_MAX + 300];
    int n;
    if (o->etag[0])
        n = snprintf(text, sizeof text, "%s\netag %s", o->url, o->etag);
    else
        n = snprintf(text, sizeof text, "%s\nsize %llu modified %s", o->url,
                     (unsigned long long)o->size, o->modified);
    ferry__sha256_hex(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1, out);
}

bool ferry__cache_holds(const ferry__obj *o)
{
    char dir[1024], key[65], path[1300];
    uint64_t limit;
    struct stat st;
    if (ferry__cache_settings(dir, sizeof dir, &limit) < 0) {
        ferry__err_clear();
        return false;
    }
    ferry__cache_key(o, key);
    snprintf(path, sizeof path, "%s/v1/objects/%.2s/%s", dir, key, key);
    return stat(path, &st) == 0 && (uint64_t)st.st_size == o->size;
}

/* ---- Measuring and trimming ---- */

typedef struct entry {
    char name[72]; /* XX/KEY */
    uint64_t size;
    int64_t used;
} entry;

static int cmp_used(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

/* Removes temporaries no live fetcher holds. */
static void clean_tmp(const char *root)
{
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/tmp", root);
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlink(path); /* its fetcher is gone */
        close(fd);
    }
    closedir(d);
}

/* The copies, with sizes and last uses, into *out (NULL when there are none);
 * *tmp_bytes: what fetches under way have reserved. */
static int scan(const char *root, entry **out, size_t *n, uint64_t *tmp_bytes)
{
    char dir[1100], path[1300];
    size_t cap = 0;
    struct stat st;
    *out = NULL;
    *n = 0;
    *tmp_bytes = 0;
    snprintf(dir, sizeof dir, "%s/tmp", root);
    DIR *d = opendir(dir);
    struct dirent *e;
    if (d) {
        while ((e = readdir(d))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode))
                *tmp_bytes += (uint64_t)st.st_size;
        }
        closedir(d);
    }
    snprintf(dir, sizeof dir, "%s/objects", root);
    DIR *top = opendir(dir);
    if (!top)
        return ferry__err(FERRY_EIO, "cache %s: %s", dir, strerror(errno));
    struct dirent *t;
    while ((t = readdir(top))) {
        if (strlen(t->d_name) != 2)
            continue;
        char sub[1200];
        snprintf(sub, sizeof sub, "%s/%s", dir, t->d_name);
        DIR *s = opendir(sub);
        if (!s)
            continue;
        while ((e = readdir(s))) {
            if (strlen(e->d_name) != 64)
                continue;
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
            if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (*n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                entry *g = nc <= MAX_ENTRIES ? ferry__realloc(*out, nc * sizeof *g) : NULL;
                if (!g) {
                    closedir(s);
                    closedir(top);
                    return ferry__err(FERRY_ENOMEM, "cache %s: out of memory listing it", root);
                }
                *out = g;
                cap = nc;
            }
            entry *en = &(*out)[(*n)++];
            snprintf(en->name, sizeof en->name, "%s/%s", t->d_name, e->d_name);
            en->size = (uint64_t)st.st_size;
            en->used = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        }
        closedir(s);
    }
    closedir(top);
    return 0;
}

static uint64_t used_bytes(const char *root)
{
    entry *e;
    size_t n;
    uint64_t tmp, sum = 0;
    if (scan(root, &e, &n, &tmp) < 0) {
        ferry__err_clear();
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        sum += e[i].size;
    ferry__free(e);
    return sum + tmp;
}

/* Makes room for `need` more bytes within the limit, removing the least recently
 * used copies that no one reads; FERRY_ERANGE naming the numbers when the copies
 * in use and the fetches under way leave too little. */
static int make_room(const char *root, const char *dir, uint64_t limit, uint64_t need,
                     const char *url, uint64_t *fetching)
{
    char path[1300];
    entry *e = NULL;
    size_t n = 0;
    uint64_t tmp, total = 0, busy = 0;
    int rc = 0;
    snprintf(path, sizeof path, "%s/evict.lock", root);
    int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lk < 0)
        return ferry__err(FERRY_EIO, "cache %s: %s: %s", dir, path, strerror(errno));
    while (flock(lk, LOCK_EX) != 0 && errno == EINTR)
        ;
    clean_tmp(root);
    FERRY_TRY(scan(root, &e, &n, &tmp));
    *fetching = tmp;
    for (size_t i = 0; i < n; i++)
        total += e[i].size;
    total += tmp;
    if (total + need <= limit)
        goto cleanup;
    qsort(e, n, sizeof *e, cmp_used);
    for (size_t i = 0; i < n && total + need > limit; i++) {
        snprintf(path, sizeof path, "%s/objects/%s", root, e[i].name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (unlink(path) == 0)
                total -= e[i].size;
        } else {
            busy += e[i].size;
        }
        close(fd);
    }
    if (total + need > limit)
        FERRY_FAIL(FERRY_ERANGE,
                   "%s: cache %s cannot hold its %llu bytes: the limit is %llu bytes and %llu are "
                   "in use (%llu by copies being read, %llu by fetches under way); raise "
                   "cache_limit= or FERRY_CACHE_LIMIT",
                   url, dir, (unsigned long long)need, (unsigned long long)limit,
                   (unsigned long long)total, (unsigned long long)busy, (unsigned long long)tmp);
cleanup:
    ferry__free(e);
    flock(lk, LOCK_UN);
    close(lk);
    return rc;
}

/* ---- Opening ---- */

/* The copy at path, locked shared, if it is there, whole and still in place. */
static int open_copy(const char *path, uint64_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_SH) != 0) {
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    }
    struct stat a, b;
    /* eviction may have removed it between the open and the lock */
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(fd);
        return -1;
    }
    if ((uint64_t)a.st_size != size) {
        /* not what a finished fetch leaves (a crash of the machine mid-write): away */
        close(fd);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlink(path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    futimens(fd, NULL); /* its last use, for eviction: needs no write access */
    return fd;
}

/* A new temporary for key, locked by this descriptor. A cleaner (clean_tmp) may
 * take it for a dead fetch's between its creation and the lock: then it is gone
 * once the lock is had, and another is made. */
static int make_temp(const char *root, const char *dir, const char *key, char *tmp, size_t cap,
                     int *fd)
{
    for (int tries = 0; tries < 16; tries++) {
        struct stat st;
        snprintf(tmp, cap, "%s/tmp/%s.XXXXXX", root, key);
        *fd = mkostemp(tmp, O_CLOEXEC);
        if (*fd < 0)
            return ferry__err(FERRY_EIO, "cache %s: cannot make a temporary: %s", dir,
                              strerror(errno));
        while (flock(*fd, LOCK_EX) != 0 && errno == EINTR)
            ;
        if (fstat(*fd, &st) == 0 && st.st_nlink > 0)
            return 0;
        close(*fd);
        *fd = -1;
    }
    return ferry__err(FERRY_EIO, "cache %s: temporaries keep disappearing", dir);
}

int ferry__cache_open(const ferry__obj *o, ferry__cache_fetch_fn fetch, void *arg, int *fd,
                      bool *hit)
{
    char dir[1024], root[1100], key[65], path[1300], tmp[1400], lockp[1200];
    uint64_t limit = 0;
    int rc = 0, lk = -1, tfd = -1;
    *fd = -1;
    *hit = false;
    pthread_mutex_lock(&c.mu);
    rc = resolve();
    if (rc == 0) {
        c.used = true;
        snprintf(dir, sizeof dir, "%s", c.dir);
        limit = c.limit;
    }
    bool clean = rc == 0 && !c.cleaned;
    c.cleaned = true;
    pthread_mutex_unlock(&c.mu);
    if (rc < 0)
        return rc;
    snprintf(root, sizeof root, "%s/v1", dir);
    if (clean)
        clean_tmp(root);
    ferry__cache_key(o, key);
    snprintf(path, sizeof path, "%s/objects/%.2s/%s", root, key, key);
    unsigned slot = (unsigned)strtoul((char[4]){key[0], key[1], key[2], 0}, NULL, 16);
    snprintf(lockp, sizeof lockp, "%s/locks/%03x", root, slot % LOCK_SLOTS);
    if (o->size > limit)
        return ferry__err(FERRY_ERANGE,
                          "%s: %llu bytes, more than cache %s may hold (%llu bytes): raise "
                          "cache_limit= or FERRY_CACHE_LIMIT",
                          o->url, (unsigned long long)o->size, dir, (unsigned long long)limit);
    for (int round = 0; round < 4; round++) {
        if ((*fd = open_copy(path, o->size)) >= 0) {
            *hit = round == 0;
            goto cleanup;
        }
        if (lk < 0) {
            lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (lk < 0)
                FERRY_FAIL(FERRY_EIO, "cache %s: %s: %s", dir, lockp, strerror(errno));
        }
        uint64_t t0 = ferry_now_ns();
        while (flock(lk, LOCK_EX) != 0)
            if (errno != EINTR)
                FERRY_FAIL(FERRY_EIO, "cache %s: locking %s: %s", dir, lockp, strerror(errno));
        if ((*fd = open_copy(path, o->size)) >= 0) { /* another process fetched it */
            atomic_fetch_add_explicit(&ferry__remote_stats.wait_ns, ferry_now_ns() - t0,
                                      memory_order_relaxed);
            *hit = true;
            goto cleanup;
        }
        /* fetches under way (ahead of readers, or by other processes) free their room
         * once their copies are read or left: wait for them, up to 30 s */
        uint64_t fetching = 0;
        for (int w = 0;; w++) {
            rc = make_room(root, dir, limit, o->size, o->url, &fetching);
            if (rc != FERRY_ERANGE || fetching == 0 || w == 1500)
                break;
            usleep(20000);
        }
        if (rc < 0)
            goto cleanup;
        snprintf(tmp, sizeof tmp, "%s/objects/%.2s", root, key);
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            FERRY_FAIL(FERRY_EIO, "cache %s: cannot make %s: %s", dir, tmp, strerror(errno));
        FERRY_TRY(make_temp(root, dir, key, tmp, sizeof tmp, &tfd));
        if (ftruncate(tfd, (off_t)o->size) != 0) {
            int e = errno;
            unlink(tmp);
            FERRY_FAIL(FERRY_EIO, "cache %s: %s: %s", dir, tmp, strerror(e));
        }
        atomic_fetch_add_explicit(&ferry__remote_stats.cache_misses, 1, memory_order_relaxed);
        if ((rc = fetch(arg, o, tfd, tmp)) < 0) {
            unlink(tmp);
            goto cleanup;
        }
        struct stat st;
        if (fstat(tfd, &st) != 0 || (uint64_t)st.st_size != o->size) {
            unlink(tmp);
            FERRY_FAIL(FERRY_EIO, "%s: the fetched copy has %lld bytes, not %llu", o->url,
                       (long long)st.st_size, (unsigned long long)o->size);
        }
        if (rename(tmp, path) != 0) {
            int e = errno;
            unlink(tmp);
            FERRY_FAIL(FERRY_EIO, "cache %s: renaming %s: %s", dir, tmp, strerror(e));
        }
        close(tfd);
        tfd = -1;
        /* open it as a reader in the next round, before letting the others in */
    }
    FERRY_FAIL(FERRY_EIO, "%s: the cached copy %s keeps disappearing (cache %s too small?)", o->url,
               path, dir);
cleanup:
    if (*fd >= 0 && *hit)
        atomic_fetch_add_explicit(&ferry__remote_stats.cache_hits, 1, memory_order_relaxed);
    if (tfd >= 0)
        close(tfd);
    if (lk >= 0)
        close(lk);
    return rc;
}
