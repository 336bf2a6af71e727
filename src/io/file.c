/*
 * The file layer (POSIX).
 */
#include "io.h"
#include "remote.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int errno_code(int e)
{
    return e == ENOENT || e == ENOTDIR ? FERRY_ENOENT : e == ENOMEM ? FERRY_ENOMEM : FERRY_EIO;
}

int ferry__stat(const char *path, uint64_t *size, int64_t *mtime_ns)
{
    struct stat st;
    if (ferry__is_remote(path))
        return ferry__remote_stat(path, size, mtime_ns);
    if (stat(path, &st) != 0)
        return ferry__err(errno_code(errno), "%s: %s", path, strerror(errno));
    *size = (uint64_t)st.st_size;
    *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

int ferry__file_open(ferry__file *f, const char *path)
{
    struct stat st;
    if (ferry__is_remote(path))
        return ferry__remote_open(f, path);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; a
     * regular file's reads ignore it */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0)
        return ferry__err(errno_code(errno), "%s: %s", path, strerror(errno));
    if (fstat(f->fd, &st) != 0) {
        int e = errno;
        close(f->fd);
        f->fd = -1;
        return ferry__err(FERRY_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f->fd);
        f->fd = -1;
        return ferry__err(FERRY_EIO, "%s: is %s, not a regular file", path, file_kind(st.st_mode));
    }
    f->size = (uint64_t)st.st_size;
    f->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

void ferry__file_close(ferry__file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

int ferry__file_pread(const ferry__file *f, const char *name, void *buf, size_t n, uint64_t off,
                      size_t *got)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ferry__err(FERRY_EIO, "%s: read of %zu bytes at offset %llu: %s", name, n,
                              (unsigned long long)off, strerror(errno));
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

/* The names in dir (a folder, or a remote prefix: its objects), owned by the caller.
 * FERRY_ENOENT when it cannot be read or (remote) holds nothing. */
int ferry__list_dir(const char *dir, char ***ents, size_t *n)
{
    int rc = 0;
    size_t cap = 0;
    DIR *d = NULL;
    *ents = NULL;
    *n = 0;
    if (ferry__is_remote(dir)) {
        FERRY_TRY(ferry__remote_list(dir, ents, n));
        if (*n == 0)
            return ferry__err(FERRY_ENOENT, "%s: no objects under this prefix", dir);
        for (size_t i = 0; i < *n; i++) /* URLs to names */
            memmove((*ents)[i], strrchr((*ents)[i], '/') + 1,
                    strlen(strrchr((*ents)[i], '/') + 1) + 1);
        return 0;
    }
    d = opendir(dir);
    if (!d)
        return ferry__err(FERRY_ENOENT, "%s: cannot open the directory", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (*n == cap) {
            size_t c = cap ? cap * 2 : 64;
            char **g = c <= (size_t)1 << 26 ? ferry__realloc(*ents, c * sizeof *g) : NULL;
            if (!g)
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", dir);
            *ents = g;
            cap = c;
        }
        if (!((*ents)[*n] = ferry__strdup(e->d_name)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", dir);
        (*n)++;
    }
cleanup:
    if (d)
        closedir(d);
    if (rc < 0) {
        for (size_t i = 0; i < *n; i++)
            ferry__free((*ents)[i]);
        ferry__free(*ents);
        *ents = NULL;
        *n = 0;
    }
    return rc;
}

int ferry__map_open(ferry__map *m, const ferry__file *f, const char *path)
{
    m->data = NULL;
    m->size = 0;
    if (f->size > SIZE_MAX)
        return ferry__err(FERRY_EOVERFLOW, "%s: too large to map", path);
    if (f->size) {
        void *p = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            return ferry__err(errno_code(e), "%s: cannot map: %s", path, strerror(e));
        }
        m->data = p;
        m->size = (size_t)f->size;
    }
    return 0;
}

int ferry__map_file(ferry__map *m, const char *path)
{
    ferry__file f = {-1, 0, 0};
    m->data = NULL;
    m->size = 0;
    int rc = ferry__file_open(&f, path);
    if (rc < 0)
        return rc;
    rc = ferry__map_open(m, &f, path);
    ferry__file_close(&f);
    return rc;
}

_Atomic uint64_t *ferry__ahead_bits(uint64_t size)
{
    return ferry__calloc((size_t)(size / FERRY__AHEAD_UNIT / 64) + 1, sizeof(uint64_t));
}

void ferry__read_ahead(_Atomic uint64_t *bits, const void *base, uintptr_t a, uintptr_t e,
                       bool map_cached)
{
    uint64_t lo = (a - (uintptr_t)base) / FERRY__AHEAD_UNIT;
    uint64_t hi = (e - 1 - (uintptr_t)base) / FERRY__AHEAD_UNIT;
    bool asked = true;
    for (uint64_t u = lo; u <= hi; u++) {
        uint64_t bit = (uint64_t)1 << (u % 64);
        if (!(atomic_fetch_or_explicit(&bits[u / 64], bit, memory_order_relaxed) & bit))
            asked = false;
    }
    if (asked)
        return;
    uintptr_t page = 4096, start = a & ~(page - 1), last = (e - 1) & ~(page - 1);
    unsigned char in_first = 0, in_last = 0;
    if (mincore((void *)start, page, &in_first) == 0 &&
        mincore((void *)last, page, &in_last) == 0 && (in_first & 1) && (in_last & 1)) {
        if (map_cached)
            madvise((void *)start, e - start, 22 /* MADV_POPULATE_READ */);
        return;
    }
    madvise((void *)start, e - start, MADV_WILLNEED);
}

void ferry__unmap(ferry__map *m)
{
    if (m->data)
        munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

/* ---- Fault injection ---- */

static _Thread_local int fault_mode;
static _Thread_local long fault_at, fault_seen;

long ferry__fault_arm(int mode, long n)
{
    long seen = fault_seen;
    fault_seen = 0;
    fault_at = n;
    fault_mode = mode == FERRY__FAULT_FAIL || mode == FERRY__FAULT_KILL ? mode : FERRY__FAULT_OFF;
    return seen;
}

/* Counts a fault point: true when it is the one to fail. In KILL mode the process
 * dies here, unless the caller does part of its work first (then fault_kill). */
static bool fault(bool kill_later)
{
    if (__builtin_expect(fault_mode == FERRY__FAULT_OFF, 1))
        return false;
    if (++fault_seen != fault_at)
        return false;
    if (fault_mode == FERRY__FAULT_KILL && !kill_later)
        raise(SIGKILL);
    return true;
}

static void fault_kill(void)
{
    if (fault_mode == FERRY__FAULT_KILL)
        raise(SIGKILL);
}

/* The system calls of the writers, each a fault point. */
static int f_fsync(int fd)
{
    if (fault(false)) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static int f_close(int fd)
{
    if (fault(false)) {
        close(fd);
        errno = EIO;
        return -1;
    }
    return close(fd);
}

static int f_rename(const char *from, const char *to)
{
    if (fault(false)) {
        errno = EIO;
        return -1;
    }
    return rename(from, to);
}

static int f_unlink(const char *path)
{
    if (fault(false)) {
        errno = EIO;
        return -1;
    }
    return unlink(path);
}

int ferry__unlink(const char *path)
{
    if (f_unlink(path) != 0 && errno != ENOENT)
        return ferry__err(FERRY_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

int ferry__sync_dir(const char *path)
{
    int rc = 0;
    char dir[4096]; /* no allocation: this runs where failing would cost a whole set */
    if (strlen(path) >= sizeof dir)
        return ferry__err(FERRY_EIO, "%s: path too long", path);
    strcpy(dir, path);
    const char *d = dirname(dir);
    int dfd = fault(false) ? (errno = EIO, -1) : open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        rc = ferry__err(FERRY_EIO, "%s: cannot open the directory to sync it: %s", d,
                        strerror(errno));
    else if (f_fsync(dfd) != 0)
        rc = ferry__err(FERRY_EIO, "%s: fsync of the directory: %s", d, strerror(errno));
    if (dfd >= 0)
        close(dfd);
    return rc;
}

int ferry__atomic_open(ferry__atomic_file *w, const char *path)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    size_t n = strlen(path);
    w->path = ferry__strdup(path);
    w->tmp = ferry__malloc(n + 16);
    w->buf = ferry__malloc(FERRY__ATOMIC_BUF);
    if (!w->path || !w->tmp || !w->buf) {
        ferry__atomic_abort(w);
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", path);
    }
    /* A dot-prefixed name would be nicer, but the temporary must be in the same
     * directory (same filesystem) for rename to be atomic; keep the path's form. */
    snprintf(w->tmp, n + 16, "%s.tmp.XXXXXX", path);
    w->fd = fault(false) ? (errno = EIO, -1) : mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) {
        int e = errno;
        ferry__free(w->tmp);
        w->tmp = NULL;
        ferry__atomic_abort(w);
        return ferry__err(errno_code(e), "%s: cannot create a temporary file: %s", path,
                          strerror(e));
    }
    fchmod(w->fd, 0644);
    (void)flock(w->fd, LOCK_EX | LOCK_NB); /* "a live writer's": see remove_stale */
    return 0;
}

void ferry__atomic_remove_stale(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char dir[4096] = ".";
    if (slash && (size_t)(slash - path) + 2 > sizeof dir)
        return;
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    size_t n = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, base, n) != 0 || strncmp(e->d_name + n, ".tmp.", 5) != 0 ||
            strlen(e->d_name + n + 5) != 6)
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
}

static int write_at(ferry__atomic_file *w, const void *p, size_t n, uint64_t off)
{
    const char *c = p;
    while (n) {
        ssize_t r;
        if (fault(true)) { /* the disk fills, or the process dies, part way */
            if (n / 2)
                (void)!pwrite(w->fd, c, n / 2, (off_t)off);
            fault_kill();
            errno = ENOSPC;
            r = -1;
        } else {
            r = pwrite(w->fd, c, n, (off_t)off);
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ferry__err(FERRY_EIO, "%s: write at offset %llu: %s", w->tmp,
                              (unsigned long long)off, strerror(errno));
        }
        c += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Writes out what ferry__atomic_write holds back: the bytes just before off. */
static int flush(ferry__atomic_file *w)
{
    size_t n = w->held;
    w->held = 0;
    return n ? write_at(w, w->buf, n, w->off - n) : 0;
}

int ferry__atomic_pwrite_mt(const ferry__atomic_file *w, const void *p, size_t n, uint64_t off)
{
    return write_at((ferry__atomic_file *)w, p, n, off);
}

int ferry__atomic_reserve(ferry__atomic_file *w, uint64_t size)
{
    int rc = flush(w);
    if (rc < 0)
        return rc;
    if (size > (uint64_t)INT64_MAX)
        return ferry__err(FERRY_EOVERFLOW, "%s: %llu bytes is too large a file", w->tmp,
                          (unsigned long long)size);
    if (ftruncate(w->fd, (off_t)size) != 0)
        return ferry__err(FERRY_EIO, "%s: cannot set the size to %llu bytes: %s", w->tmp,
                          (unsigned long long)size, strerror(errno));
    return 0;
}

void ferry__atomic_writeback(const ferry__atomic_file *w, uint64_t off, uint64_t n)
{
#ifdef SYNC_FILE_RANGE_WRITE
    if (w->fd >= 0)
        (void)sync_file_range(w->fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
#else
    (void)w;
    (void)off;
    (void)n;
#endif
}

int ferry__atomic_pwrite(ferry__atomic_file *w, const void *p, size_t n, uint64_t off)
{
    int rc = flush(w);
    return rc < 0 ? rc : write_at(w, p, n, off);
}

/* Appends go through a buffer written out when the file offset reaches a multiple
 * of its size: one system call per 256 KiB instead of one per record, and the
 * page cache then holds the file in large folios, which a reader's mapping faults
 * in several pages at a time. Larger writes gained readers little more and made
 * the kernel stall assembling contiguous memory (1 and 2 MiB were slower to pack). */
int ferry__atomic_write(ferry__atomic_file *w, const void *p, size_t n)
{
    if (!w->buf)
        return ferry__err(FERRY_ESTATE, "%s: appended to after it was closed", w->tmp);
    const char *c = p;
    while (n) {
        size_t room = FERRY__ATOMIC_BUF - (size_t)(w->off % FERRY__ATOMIC_BUF);
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->held, c, k);
        w->held += k;
        w->off += k;
        c += k;
        n -= k;
        if (k == room) {
            int rc = flush(w);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int ferry__atomic_close(ferry__atomic_file *w)
{
    int rc = flush(w);
    ferry__free(w->buf);
    w->buf = NULL;
    if (f_close(w->fd) != 0 && rc == 0)
        rc = ferry__err(FERRY_EIO, "%s: close: %s", w->tmp, strerror(errno));
    w->fd = -1;
    return rc;
}

int ferry__atomic_rename(ferry__atomic_file *w)
{
    int rc = 0;
    FERRY_TRY(flush(w));
    if (f_fsync(w->fd) != 0)
        FERRY_FAIL(FERRY_EIO, "%s: fsync: %s", w->tmp, strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (f_close(fd) != 0)
        FERRY_FAIL(FERRY_EIO, "%s: close: %s", w->tmp, strerror(errno));
    if (f_rename(w->tmp, w->path) != 0)
        FERRY_FAIL(FERRY_EIO, "%s: rename into place: %s", w->path, strerror(errno));
    ferry__free(w->tmp);
    w->tmp = NULL;
cleanup:
    ferry__atomic_abort(w);
    return rc;
}

int ferry__atomic_commit(ferry__atomic_file *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", w->path ? w->path : "");
    int rc = ferry__atomic_rename(w);
    /* make the rename itself durable */
    if (rc == 0)
        rc = ferry__sync_dir(path);
    return rc;
}

void ferry__atomic_abort(ferry__atomic_file *w)
{
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp)
        f_unlink(w->tmp);
    ferry__free(w->tmp);
    ferry__free(w->path);
    ferry__free(w->buf);
    w->fd = -1;
    w->tmp = w->path = NULL;
    w->buf = NULL;
    w->held = 0;
}
