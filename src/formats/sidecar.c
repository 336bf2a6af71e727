/*
 * Sidecar offset indexes: the header, its check, and what opening one checks
 * against its source (sidecar.h; the layout in docs/line-index.md).
 */
#include "sidecar.h"
#include "../core/guard.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define EDGE 4096u /* bytes hashed at each end of the source */

_Static_assert(sizeof(ferry__sidecar_header) == FERRY__SIDECAR_HEADER, "header layout");

/* The kinds, for naming another kind's index found where one was expected. */
static const char *const KNOWN[][2] = {{"FERRYLIX", "a line index"},
                                       {"FERRYMDX", "a minidb index"}};

static uint64_t fnv_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv(const void *p, size_t n)
{
    return fnv_more(0xcbf29ce484222325ull, p, n);
}

static uint64_t header_check(const ferry__sidecar_header *h, const uint64_t *extra, unsigned nextra)
{
    return fnv_more(fnv(h, offsetof(ferry__sidecar_header, check)), extra, 8 * (size_t)nextra);
}

char *ferry__sidecar_path(const char *path)
{
    size_t n = strlen(path);
    char *p = ferry__malloc(n + 6);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, ".fidx", 6);
    }
    return p;
}

/* Hashes of the first and last EDGE bytes: they tell another file of the same
 * size and time apart. */
static int edge_hashes(const ferry__file *f, const char *path, uint64_t *head, uint64_t *tail)
{
    unsigned char buf[EDGE];
    size_t got;
    size_t n = f->size < EDGE ? (size_t)f->size : EDGE;
    int rc = ferry__file_pread(f, path, buf, n, 0, &got);
    if (rc < 0)
        return rc;
    *head = fnv(buf, got);
    rc = ferry__file_pread(f, path, buf, n, f->size - n, &got);
    if (rc < 0)
        return rc;
    *tail = fnv(buf, got);
    return 0;
}

int ferry__sidecar_header_init(ferry__sidecar_header *h, const ferry__sidecar_kind *k,
                               const ferry__file *f, const char *path)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, k->magic, 8);
    h->version = k->version;
    h->size = f->size;
    h->mtime_ns = f->mtime_ns;
    return edge_hashes(f, path, &h->head_hash, &h->tail_hash);
}

void ferry__sidecar_seal(ferry__sidecar_header *h, const ferry__sidecar_kind *k,
                         const uint64_t *extra)
{
    h->check = header_check(h, extra, k->nextra);
}

int ferry__sidecar_unchanged(const ferry__file *f, const char *path)
{
    uint64_t size;
    int64_t mtime;
    int rc = ferry__stat(path, &size, &mtime);
    if (rc < 0)
        return rc;
    if (size != f->size || mtime != f->mtime_ns)
        return ferry__err(FERRY_ESTALE, "%s: changed while being indexed", path);
    return 0;
}

static int check(ferry__sidecar *s, const ferry__sidecar_kind *k, const char *path,
                 const char *name)
{
    ferry__sidecar_header *h = &s->h;
    size_t head = FERRY__SIDECAR_HEADER + 8 * (size_t)k->nextra;
    if (s->map.size < FERRY__SIDECAR_HEADER)
        return ferry__err(FERRY_ECORRUPT, "%s: %zu bytes is too short for a %s", name, s->map.size,
                          k->what);
    memcpy(h, s->map.data, sizeof *h);
    if (memcmp(h->magic, k->magic, 8) != 0) {
        for (size_t i = 0; i < sizeof KNOWN / sizeof *KNOWN; i++)
            if (!memcmp(h->magic, KNOWN[i][0], 8))
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: %s, not a %s of %s (bad magic): `%s%s` writes one", name,
                                  KNOWN[i][1], k->what, path, k->build, path);
        return ferry__err(FERRY_ECORRUPT, "%s: not a ferry %s (bad magic)", name, k->what);
    }
    if (h->version != k->version)
        return ferry__err(FERRY_ECORRUPT, "%s: %s version %u; this ferry reads %u", name, k->what,
                          h->version, k->version);
    if (s->map.size < head)
        return ferry__err(FERRY_ECORRUPT, "%s: %zu bytes is too short for a %s", name, s->map.size,
                          k->what);
    memcpy(s->extra, (const char *)s->map.data + FERRY__SIDECAR_HEADER, 8 * (size_t)k->nextra);
    if (h->check != header_check(h, s->extra, k->nextra))
        return ferry__err(FERRY_ECORRUPT, "%s: damaged header (checksum mismatch)", name);
    uint64_t entries = (s->map.size - head) / 8;
    if ((s->map.size - head) % 8 != 0 || h->count == UINT64_MAX || entries != h->count + 1)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: truncated or padded: %zu bytes hold %llu offsets, the header says "
                          "%llu %s",
                          name, s->map.size, (unsigned long long)entries,
                          (unsigned long long)h->count, k->units);
    ferry__file f;
    int rc = ferry__file_open(&f, path);
    if (rc < 0)
        return rc;
    uint64_t hh = 0, th = 0;
    if (f.size == h->size && f.mtime_ns == h->mtime_ns)
        rc = edge_hashes(&f, path, &hh, &th);
    ferry__file_close(&f);
    if (rc < 0)
        return rc;
    if (f.size != h->size || f.mtime_ns != h->mtime_ns)
        return ferry__err(
            FERRY_ESTALE,
            "%s is stale: %s changed since it was indexed (%llu bytes then, %llu now%s): `%s%s` "
            "writes it again",
            name, path, (unsigned long long)h->size, (unsigned long long)f.size,
            f.size == h->size ? ", modified since" : "", k->build, path);
    if (hh != h->head_hash || th != h->tail_hash)
        return ferry__err(FERRY_ESTALE,
                          "%s is the index of another file than %s (contents differ): `%s%s` "
                          "writes %s's",
                          name, path, k->build, path, path);
    s->off = (const uint64_t *)((const char *)s->map.data + head);
    if (s->off[0] != 0 || s->off[h->count] != h->size)
        return ferry__err(FERRY_ECORRUPT, "%s: offsets do not span %s (first %llu, last %llu)",
                          name, path, (unsigned long long)s->off[0],
                          (unsigned long long)s->off[h->count]);
    return 0;
}

/* The header and the offsets' ends are read from the mapping: under a guard, as
 * the index may be cut short while it is opened. */
int ferry__sidecar_open(ferry__sidecar *s, const ferry__sidecar_kind *k, const char *path,
                        const char *index_path)
{
    memset(s, 0, sizeof *s);
    int rc = ferry__guard_install();
    if (rc == 0)
        rc = ferry__map_file(&s->map, index_path);
    if (rc < 0)
        return rc;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, index_path, s->map.data, "opening");
    rc = check(s, k, path, index_path);
    ferry__guard_pop(&g);
    return rc;
}

void ferry__sidecar_close(ferry__sidecar *s)
{
    ferry__unmap(&s->map);
    s->off = NULL;
}
