/*
 * Places (places.h): values a library lends from its mappings of a directory's
 * files, located in those files while lent, read later from ferry's own
 * mappings of the same files.
 */
#include "places.h"
#include "../core/guard.h"

#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define NONE UINT32_MAX
/* /proc/self/maps is read again when a value lies in no mapping known yet: at
 * most this many times, and no more once this many reads in a row found no new
 * mapping (values in the library's memory, not in a file: a compressed table) */
#define REREADS_MAX 4096
#define FRUITLESS_MAX 64
/* bytes an entry takes while noting: its offset (then its place), length, file
 * and check (the file's index is dropped after) */
#define NOTE_BYTES (sizeof(void *) + 4 + 4 + 8)

typedef struct file { /* a file a value was found in */
    char *path;
    unsigned long major, minor;
    uint64_t ino;
    const uint8_t *ours; /* ferry's mapping, after finish; NULL if not mapped */
    size_t size;
} file;

typedef struct span { /* a mapping of one of the files, as maps said when last read */
    uintptr_t from, to;
    uint64_t off; /* the file's offset at from */
    uint32_t file;
} span;

typedef struct impl {
    ferry__places pub; /* first: a ferry__places * is an impl * */
    char dir[PATH_MAX];
    size_t dirlen;
    bool (*file_ok)(const char *name);
    bool gave_up;
    /* while noting: at[i] holds the value's offset in its file */
    uint32_t *file_of;
    uint64_t *check;
    uint64_t cap;
    file *files;
    uint32_t nfiles, cap_files;
    span *spans;
    size_t nspans;
    unsigned rereads, fruitless;
} impl;

ferry__places *ferry__places_new(const char *dir, bool (*file_ok)(const char *name))
{
    if (ferry__guard_install() < 0) {
        ferry__err_clear();
        return NULL;
    }
    impl *m = ferry__calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (!realpath(dir, m->dir)) {
        ferry__free(m);
        return NULL;
    }
    m->dirlen = strlen(m->dir);
    m->file_ok = file_ok;
    return &m->pub;
}

static void free_notes(impl *m)
{
    ferry__free(m->file_of);
    ferry__free(m->spans);
    m->file_of = NULL;
    m->spans = NULL;
    m->nspans = 0;
}

static void unmap_files(impl *m)
{
    for (uint32_t f = 0; f < m->nfiles; f++) {
        if (m->files[f].ours)
            munmap((void *)m->files[f].ours, m->files[f].size);
        ferry__free(m->files[f].path);
    }
    ferry__free(m->files);
    m->files = NULL;
    m->nfiles = m->cap_files = 0;
}

/* Nothing has a place from here on. */
static void give_up(impl *m)
{
    m->gave_up = true;
    free_notes(m);
    ferry__free(m->check);
    m->check = NULL;
    unmap_files(m);
    ferry__free(m->pub.at);
    ferry__free(m->pub.len);
    m->pub.at = NULL;
    m->pub.len = NULL;
}

void ferry__places_free(ferry__places *p)
{
    if (!p)
        return;
    give_up((impl *)p);
    ferry__free(p);
}

/* A check of the bytes around a value: the 8 before it (in a LevelDB block, the
 * end of the entry's key: its sequence number) and its first and last 8. */
static uint64_t check_of(const uint8_t *v, size_t len)
{
    uint8_t b[24] = {0};
    size_t k = len < 8 ? len : 8;
    memcpy(b, v - 8, 8);
    memcpy(b + 8, v, k);
    memcpy(b + 16, v + len - k, k);
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    for (int j = 0; j < 24; j++)
        h = (h ^ b[j]) * 0x100000001b3ull;
    return h;
}

/* The file (path, device, inode) as one of m's, added if new; NONE without memory. */
static uint32_t file_index(impl *m, const char *path, unsigned long major, unsigned long minor,
                           uint64_t ino)
{
    for (uint32_t f = 0; f < m->nfiles; f++)
        if (m->files[f].ino == ino && m->files[f].major == major && m->files[f].minor == minor)
            return f;
    if (m->nfiles == m->cap_files) {
        uint32_t c = m->cap_files ? 2 * m->cap_files : 16;
        file *g = ferry__realloc(m->files, c * sizeof *g);
        if (!g)
            return NONE;
        m->files = g;
        m->cap_files = c;
    }
    char *copy = ferry__malloc(strlen(path) + 1);
    if (!copy)
        return NONE;
    strcpy(copy, path);
    m->files[m->nfiles] = (file){copy, major, minor, ino, NULL, 0};
    return m->nfiles++;
}

/* Whether a span from..to is in the old list (sorted by from). */
static bool known(const span *old, size_t n, uintptr_t from, uintptr_t to)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (old[mid].from < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && old[lo].from == from && old[lo].to == to;
}

/* Reads /proc/self/maps again: the mappings of the directory's files. Returns
 * whether it found one it did not know. */
static bool reread(impl *m)
{
    if (m->rereads >= REREADS_MAX || m->fruitless >= FRUITLESS_MAX)
        return false;
    m->rereads++;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    span *spans = NULL;
    size_t n = 0, cap = 0, fresh = 0;
    char line[PATH_MAX + 200];
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        unsigned long a, b, major, minor;
        unsigned long long off, ino;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %llx %lx:%lx %llu %n", &a, &b, &off, &major, &minor, &ino,
                   &at) < 6 ||
            !at)
            continue;
        char *name = line + at;
        name[strcspn(name, "\n")] = 0;
        if (strncmp(name, m->dir, m->dirlen) || name[m->dirlen] != '/' ||
            strchr(name + m->dirlen + 1, '/') || !m->file_ok(name + m->dirlen + 1))
            continue;
        uint32_t fi = file_index(m, name, major, minor, ino);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            span *g = ferry__realloc(spans, cap * sizeof *g);
            if (!g) {
                ok = false;
                break;
            }
            spans = g;
        }
        if (fi == NONE) {
            ok = false;
            break;
        }
        fresh += !known(m->spans, m->nspans, a, b);
        spans[n++] = (span){a, b, off, fi};
    }
    fclose(f);
    if (!ok) {
        ferry__free(spans);
        return false;
    }
    ferry__free(m->spans);
    m->spans = spans;
    m->nspans = n;
    m->fruitless = fresh ? 0 : m->fruitless + 1;
    return fresh > 0;
}

/* The known mapping that holds [v - 8, v + len), or NULL. */
static const span *find(const impl *m, const uint8_t *v, size_t len)
{
    uintptr_t a = (uintptr_t)v;
    size_t lo = 0, hi = m->nspans;
    while (lo < hi) { /* the first mapping that ends past a */
        size_t mid = lo + (hi - lo) / 2;
        if (m->spans[mid].to <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == m->nspans)
        return NULL;
    const span *s = &m->spans[lo];
    return s->from <= a && a - s->from >= 8 && len <= s->to - a ? s : NULL;
}

void ferry__places_note(ferry__places *p, const void *v, size_t len, uint64_t room)
{
    impl *m = (impl *)p;
    if (!m || m->gave_up)
        return;
    uint64_t i = p->n;
    if (i == m->cap) {
        uint64_t c = m->cap ? 2 * m->cap : 1024;
        if (c * NOTE_BYTES > room) {
            give_up(m);
            return;
        }
        const uint8_t **at = ferry__realloc(p->at, c * sizeof *at);
        if (at)
            p->at = at;
        uint32_t *l = at ? ferry__realloc(p->len, c * sizeof *l) : NULL;
        if (l)
            p->len = l;
        uint32_t *fo = l ? ferry__realloc(m->file_of, c * sizeof *fo) : NULL;
        if (fo)
            m->file_of = fo;
        uint64_t *ck = fo ? ferry__realloc(m->check, c * sizeof *ck) : NULL;
        if (!ck) {
            give_up(m);
            return;
        }
        m->check = ck;
        m->cap = c;
    }
    p->n++;
    p->at[i] = NULL;
    m->file_of[i] = NONE;
    if (!len || len > UINT32_MAX)
        return;
    const span *s = find(m, v, len);
    if (!s && reread(m))
        s = find(m, v, len);
    if (!s)
        return;
    p->at[i] = (const uint8_t *)(uintptr_t)(s->off + ((uintptr_t)v - s->from));
    p->len[i] = (uint32_t)len;
    m->file_of[i] = s->file;
    m->check[i] = check_of(v, len);
}

/* Maps file f as ferry's own, if it is still the file the library mapped. */
static void map_file(file *f)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_ino == f->ino &&
        major(st.st_dev) == f->major && minor(st.st_dev) == f->minor && st.st_size > 0) {
        void *q = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (q != MAP_FAILED) {
            f->ours = q;
            f->size = (size_t)st.st_size;
        }
    }
    close(fd);
}

/* Each place turned into a pointer into ferry's mapping where the bytes there
 * check, else NULL; under a guard (a file cut short since: nothing has a place).
 * Returns how many have one, or UINT64_MAX after a fault. */
__attribute__((noinline)) static uint64_t resolve(impl *m)
{
    ferry__places *p = &m->pub;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return UINT64_MAX;
    uint64_t placed = 0;
    for (uint64_t i = 0; i < p->n; i++) {
        uint32_t fi = m->file_of[i];
        const file *f = fi == NONE ? NULL : &m->files[fi];
        uint64_t off = (uint64_t)(uintptr_t)p->at[i];
        p->at[i] = NULL;
        if (!f || !f->ours || off < 8 || off > f->size || p->len[i] > f->size - off ||
            check_of(f->ours + off, p->len[i]) != m->check[i])
            continue;
        p->at[i] = f->ours + off;
        placed++;
    }
    ferry__guard_pop(&g);
    return placed;
}

uint64_t ferry__places_finish(ferry__places *p)
{
    impl *m = (impl *)p;
    if (!m || m->gave_up || !m->nfiles || !p->n)
        return 0;
    for (uint32_t f = 0; f < m->nfiles; f++)
        map_file(&m->files[f]);
    uint64_t placed = resolve(m);
    if (placed == UINT64_MAX || placed == 0) {
        give_up(m);
        return 0;
    }
    free_notes(m);
    const uint8_t **at = ferry__realloc(p->at, p->n * sizeof *at);
    if (at)
        p->at = at;
    uint32_t *l = ferry__realloc(p->len, p->n * sizeof *l);
    if (l)
        p->len = l;
    uint64_t *ck = ferry__realloc(m->check, p->n * sizeof *ck);
    if (ck)
        m->check = ck;
    m->cap = p->n;
    return placed;
}

bool ferry__places_intact(const ferry__places *p, uint64_t i)
{
    const impl *m = (const impl *)p;
    return check_of(p->at[i], p->len[i]) == m->check[i];
}

const char *ferry__places_where(const ferry__places *p, uint64_t i, uint64_t *off,
                                const void **base)
{
    const char *path = ferry__places_file(p, (uintptr_t)p->at[i], base);
    *off = path ? (uint64_t)(p->at[i] - (const uint8_t *)*base) : 0;
    return path;
}

const char *ferry__places_file(const ferry__places *p, uintptr_t addr, const void **base)
{
    const impl *m = (const impl *)p;
    for (uint32_t f = 0; m && f < m->nfiles; f++) {
        const file *x = &m->files[f];
        if (x->ours && addr >= (uintptr_t)x->ours && addr - (uintptr_t)x->ours < x->size) {
            *base = x->ours;
            return x->path;
        }
    }
    return NULL;
}
