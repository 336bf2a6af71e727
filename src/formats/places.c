/*
 * Places (places.h): values a library lends from its mappings of a directory's
 * files, located in those files while lent, read later from ferry's own
 * mappings of the same files.
 */
#include "places.h"
#include "../core/guard.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NONE UINT32_MAX
/* /proc/self/maps is read again when a value lies in no known mapping of a file
 * (or not where ferry's mapping has its bytes): at most this many times. A
 * value in the library's memory (an inflated block) would ask every time: the
 * 64 KiB regions that a read showed in no file are remembered, the last
 * NEGATIVE of them, and not asked about again. */
#define REREADS_MAX 4096
#define NEGATIVE 64
#define REGION(a) ((uintptr_t)(a) >> 16)
/* a value's end to the first non-zero byte after it: at most this far */
#define TAIL_MAX 255
/* bytes an entry takes: its place, length and tail */
#define ENTRY_BYTES (sizeof(void *) + 4 + 1)

typedef struct file { /* a file a mapping of the directory's showed */
    char *path;
    uint64_t ino;
    const uint8_t *ours; /* ferry's mapping, or NULL when it could not map it */
    size_t size;
    uint64_t placed; /* values placed in it */
} file;

typedef struct span { /* a mapping of one of the files, as maps said when last read */
    uintptr_t from, to;
    uint64_t off; /* the file's offset at from */
    uint32_t file;
} span;

typedef struct impl {
    ferry__places pub; /* first: a ferry__places * is an impl * */
    uint8_t *tail;     /* each place's distance to a non-zero byte after the value */
    uint64_t cap;
    char dir[PATH_MAX];
    size_t dirlen;
    bool (*file_ok)(const char *name);
    bool gave_up;
    file *files;
    uint32_t nfiles, cap_files;
    span *spans;
    size_t nspans;
    uintptr_t negative[NEGATIVE];
    unsigned nneg, rereads;
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

static void unmap_file(file *f)
{
    if (f->ours)
        munmap((void *)f->ours, f->size);
    f->ours = NULL;
}

/* Nothing has a place from here on. */
static void give_up(impl *m)
{
    m->gave_up = true;
    for (uint32_t f = 0; f < m->nfiles; f++) {
        unmap_file(&m->files[f]);
        ferry__free(m->files[f].path);
    }
    ferry__free(m->files);
    ferry__free(m->spans);
    ferry__free(m->pub.at);
    ferry__free(m->pub.len);
    ferry__free(m->tail);
    m->files = NULL;
    m->spans = NULL;
    m->pub.at = NULL;
    m->pub.len = NULL;
    m->tail = NULL;
    m->nfiles = m->cap_files = 0;
    m->nspans = 0;
    m->pub.n = m->cap = 0;
}

void ferry__places_free(ferry__places *p)
{
    if (!p)
        return;
    give_up((impl *)p);
    ferry__free(p);
}

/* The file at path with inode ino, as one of m's: found, or added and mapped
 * by ferry (if it still is that inode); NONE without memory. */
static uint32_t file_index(impl *m, const char *path, uint64_t ino)
{
    for (uint32_t f = 0; f < m->nfiles; f++)
        if (m->files[f].ino == ino && !strcmp(m->files[f].path, path))
            return f;
    if (m->nfiles == m->cap_files) {
        uint32_t c = m->cap_files ? 2 * m->cap_files : 16;
        file *g = ferry__realloc(m->files, c * sizeof *g);
        if (!g)
            return NONE;
        m->files = g;
        m->cap_files = c;
    }
    char *copy = ferry__strdup(path);
    if (!copy)
        return NONE;
    file *f = &m->files[m->nfiles];
    *f = (file){copy, ino, NULL, 0, 0};
    /* the device in maps may not be stat's (btrfs, overlayfs): the inode decides */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_ino == ino &&
        st.st_size > 0) {
        void *q = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (q != MAP_FAILED) {
            f->ours = q;
            f->size = (size_t)st.st_size;
        }
    }
    if (fd >= 0)
        close(fd);
    return m->nfiles++;
}

/* The old span from..to (the list is sorted by from), or NULL. */
static const span *known(const span *old, size_t n, uintptr_t from, uintptr_t to)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (old[mid].from < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && old[lo].from == from && old[lo].to == to ? &old[lo] : NULL;
}

/* Reads /proc/self/maps again: the mappings of the directory's files. */
static void reread(impl *m)
{
    m->rereads++;
    ferry__maps maps;
    ferry__mapping x;
    if (!ferry__maps_open(&maps))
        return;
    span *spans = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    while (ok && ferry__maps_next(&maps, &x)) {
        const char *name = x.path;
        if (strncmp(name, m->dir, m->dirlen) || name[m->dirlen] != '/' ||
            strchr(name + m->dirlen + 1, '/') || !m->file_ok(name + m->dirlen + 1))
            continue;
        const span *old = known(m->spans, m->nspans, x.from, x.to);
        uint32_t fi =
            old && m->files[old->file].ino == x.ino ? old->file : file_index(m, name, x.ino);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            span *g = ferry__realloc(spans, cap * sizeof *g);
            if (!g)
                ok = false;
            else
                spans = g;
        }
        if (fi == NONE)
            ok = false;
        if (ok)
            spans[n++] = (span){x.from, x.to, x.off, fi};
    }
    ferry__maps_close(&maps);
    if (!ok) {
        ferry__free(spans);
        return;
    }
    ferry__free(m->spans);
    m->spans = spans;
    m->nspans = n;
}

/* The known mapping that holds [v, v + len), or NULL. */
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
    return s->from <= a && len <= s->to - a ? s : NULL;
}

/* Where ferry's mapping holds v's bytes if s is (still) the mapping v lies in:
 * the same bytes at the same offset, compared whole, and a non-zero byte
 * within TAIL_MAX after them (its distance in *tail); else NULL. */
static const uint8_t *in_span(impl *m, const span *s, const uint8_t *v, size_t len, uint8_t *tail)
{
    file *f = &m->files[s->file];
    uint64_t off = s->off + ((uintptr_t)v - s->from);
    if (!f->ours || off > f->size || len > f->size - off || memcmp(f->ours + off, v, len))
        return NULL;
    const uint8_t *end = f->ours + off + len;
    size_t room = f->size - off - len;
    for (size_t k = 0; k < room && k <= TAIL_MAX; k++)
        if (end[k]) {
            *tail = (uint8_t)k;
            f->placed++;
            return f->ours + off;
        }
    return NULL;
}

/* v's place: in the mapping that holds it as maps last said, else as it says
 * now (a mapping made since, or one that replaced another at that address). */
static const uint8_t *place_of(impl *m, const uint8_t *v, size_t len, uint8_t *tail)
{
    const span *s = find(m, v, len);
    const uint8_t *q = s ? in_span(m, s, v, len, tail) : NULL;
    if (q || (s && !m->files[s->file].ours))
        return q; /* placed, or in a file ferry could not map */
    uintptr_t r = REGION(v);
    for (unsigned k = 0; k < m->nneg && k < NEGATIVE; k++)
        if (m->negative[k] == r)
            return NULL;
    if (m->rereads >= REREADS_MAX)
        return NULL;
    reread(m);
    s = find(m, v, len);
    q = s ? in_span(m, s, v, len, tail) : NULL;
    if (!q)
        m->negative[m->nneg++ % NEGATIVE] = r;
    return q;
}

void ferry__places_note(ferry__places *p, const void *v, size_t len, uint64_t room)
{
    impl *m = (impl *)p;
    if (!m || m->gave_up)
        return;
    uint64_t i = p->n;
    uint64_t c = i < m->cap ? m->cap : m->cap ? 2 * m->cap : 1024;
    if (c * ENTRY_BYTES > room) {
        give_up(m);
        return;
    }
    if (c > m->cap) {
        const uint8_t **at = ferry__realloc(p->at, c * sizeof *at);
        if (at)
            p->at = at;
        uint32_t *l = at ? ferry__realloc(p->len, c * sizeof *l) : NULL;
        if (l)
            p->len = l;
        uint8_t *t = l ? ferry__realloc(m->tail, c) : NULL;
        if (!t) {
            give_up(m);
            return;
        }
        m->tail = t;
        m->cap = c;
    }
    p->n++;
    p->at[i] = NULL;
    if (len && len <= UINT32_MAX && (p->at[i] = place_of(m, v, len, &m->tail[i])))
        p->len[i] = (uint32_t)len;
}

uint64_t ferry__places_finish(ferry__places *p)
{
    impl *m = (impl *)p;
    if (!m || m->gave_up || !p->n)
        return 0;
    uint64_t placed = 0;
    for (uint32_t f = 0; f < m->nfiles; f++) {
        placed += m->files[f].placed;
        if (!m->files[f].placed)
            unmap_file(&m->files[f]);
    }
    ferry__free(m->spans);
    m->spans = NULL;
    m->nspans = 0;
    if (!placed) {
        give_up(m);
        return 0;
    }
    const uint8_t **at = ferry__realloc(p->at, p->n * sizeof *at);
    if (at)
        p->at = at;
    uint32_t *l = ferry__realloc(p->len, p->n * sizeof *l);
    if (l)
        p->len = l;
    uint8_t *t = ferry__realloc(m->tail, p->n);
    if (t)
        m->tail = t;
    m->cap = p->n;
    return placed;
}

bool ferry__places_intact(const ferry__places *p, uint64_t i)
{
    const impl *m = (const impl *)p;
    const volatile uint8_t *after = p->at[i] + p->len[i] + m->tail[i];
    return *after != 0;
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
