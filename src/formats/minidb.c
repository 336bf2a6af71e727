/*
 * Caffe2's minidb: entries (int32 key length, int32 value length, key, value),
 * little-endian, appended one after the other in one file. Read from a mapping
 * through the offsets of its entries: a saved index beside the file (FILE.fidx,
 * a sidecar index of magic "FERRYMDX", docs/databases.md), else one scan at open.
 * Written through a temporary file beside the target, synced and renamed over it.
 */
#include "kv.h"
#include "sidecar.h"
#include "ferry/db.h"
#include "../core/bytes.h"
#include "../core/guard.h"
#include "../io/io.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define POPULATE_MAX ((size_t)1 << 30)

/* The saved index: extra words [longest key, largest value]. */
static const ferry__sidecar_kind KIND = {"FERRYMDX", 1, "minidb index",
                                         "entries",  2, "ferry index minidb:"};

typedef struct minidb {
    ferry__kv_base base;
    ferry__file f;
    ferry__map map;
    uint64_t *off;      /* the scan's offsets, n + 1 of them (owned) */
    const uint64_t *at; /* entry i spans [at[i], at[i + 1]): off or the saved index's */
    ferry__sidecar sc;  /* the saved index, when one is used */
    uint64_t n;
    uint64_t largest; /* the longest value */
    size_t longest_key;
} minidb;

typedef struct ferry__kv_iter {
    minidb *db;
    uint64_t next;
} minidb_iter;

typedef struct ferry__kv_writer {
    ferry__atomic_file f;
    bool indexed; /* the file had a saved index: written again on commit */
} minidb_writer;

int ferry__minidb_frame(const char *path, const uint8_t *h, uint64_t avail, uint64_t i, uint64_t at,
                        uint32_t *klen, uint32_t *vlen)
{
    if (avail < 8)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: entry %llu at offset %llu: the file ends %llu bytes into its "
                          "8-byte header (cut short?)",
                          path, (unsigned long long)i, (unsigned long long)at,
                          (unsigned long long)avail);
    uint32_t k = ferry__load_le32(h), v = ferry__load_le32(h + 4);
    if (k == 0 || k > FERRY__MINIDB_KEY_MAX)
        return ferry__err(
            FERRY_ECORRUPT, "%s: entry %llu at offset %llu: key length %d is outside [1, %u]", path,
            (unsigned long long)i, (unsigned long long)at, (int32_t)k, FERRY__MINIDB_KEY_MAX);
    if (v > INT32_MAX)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: entry %llu at offset %llu: value length %d is negative", path,
                          (unsigned long long)i, (unsigned long long)at, (int32_t)v);
    if ((uint64_t)k + v > avail - 8)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: entry %llu at offset %llu: key and value lengths %u + %u run past "
                          "the end of the file (%llu bytes)",
                          path, (unsigned long long)i, (unsigned long long)at, k, v,
                          (unsigned long long)(at + avail));
    *klen = k;
    *vlen = v;
    return 0;
}

/* Locates every entry (called under scan's guard). */
__attribute__((noinline)) static int walk(minidb *db, uint64_t index_max)
{
    const uint8_t *p = db->map.data;
    uint64_t size = db->map.size, at = 0, cap = 0;
    int rc;
    while (at < size) {
        uint32_t k = 0, v = 0;
        if ((rc = ferry__minidb_frame(db->base.path, p + at, size - at, db->n, at, &k, &v)) < 0)
            return rc;
        if (db->n == cap) {
            cap = cap ? 2 * cap : 1024;
            if (cap * 8 > index_max)
                return ferry__err(FERRY_EOVERFLOW,
                                  "%s: the entry index passes index_max=%llu bytes at entry %llu "
                                  "(raise index_max)",
                                  db->base.path, (unsigned long long)index_max,
                                  (unsigned long long)db->n);
            uint64_t *o = ferry__realloc(db->off, (size_t)cap * sizeof *o);
            if (!o)
                return ferry__err(FERRY_ENOMEM, "%s: out of memory for the entry index",
                                  db->base.path);
            db->off = o;
        }
        db->off[db->n++] = at;
        db->largest = v > db->largest ? v : db->largest;
        db->longest_key = k > db->longest_key ? k : db->longest_key;
        at += 8 + (uint64_t)k + v;
    }
    /* and the end of the last, in the room for one more */
    uint64_t *o = ferry__realloc(db->off, (size_t)(db->n + 1) * sizeof *o);
    if (!o)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory for the entry index", db->base.path);
    db->off = o;
    db->off[db->n] = size;
    db->at = db->off;
    return 0;
}

/* The mapping is read under a guard: a file cut short meanwhile is an error, not
 * a SIGBUS. */
static int scan(minidb *db, uint64_t index_max)
{
    int rc = ferry__guard_install();
    if (rc < 0)
        return rc;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, db->base.path, db->map.data, "entry %llu",
                                (unsigned long long)db->n);
    rc = walk(db, index_max);
    ferry__guard_pop(&g);
    return rc;
}

static void mdb_close(ferry__kv *kv)
{
    minidb *db = (minidb *)kv;
    if (!db)
        return;
    ferry__unmap(&db->map);
    ferry__file_close(&db->f);
    ferry__sidecar_close(&db->sc);
    ferry__free(db->off);
    ferry__free(db);
}

/* Locates the entries by reading the whole file once. */
static int scan_file(minidb *db, const ferry__kv_opts *o)
{
    /* the scan touches every page of a file of small entries: mapping them in one
     * call (Linux 5.14's MADV_POPULATE_READ) costs less than a fault each. A
     * larger file is left to faults, as it is read. */
    if (db->map.size && db->map.size <= POPULATE_MAX)
        madvise(db->map.data, db->map.size, 22 /* MADV_POPULATE_READ */);
    return scan(db, o && o->index_max ? o->index_max : (uint64_t)1 << 30);
}

/* Writes the scan's offsets as the saved index at index_path. */
static int write_index(const minidb *db, const char *index_path)
{
    ferry__atomic_file w = {.fd = -1};
    ferry__sidecar_header h, zero = {0};
    uint64_t extra[2] = {db->longest_key, db->largest};
    int rc = ferry__sidecar_header_init(&h, &KIND, &db->f, db->base.path);
    if (rc < 0)
        return rc;
    h.count = db->n;
    ferry__sidecar_seal(&h, &KIND, extra);
    ferry__atomic_remove_stale(index_path);
    FERRY_TRY(ferry__atomic_open(&w, index_path));
    FERRY_TRY(ferry__atomic_write(&w, &zero, sizeof zero));
    FERRY_TRY(ferry__atomic_write(&w, extra, sizeof extra));
    for (uint64_t i = 0; i <= db->n; i += (uint64_t)1 << 17) {
        uint64_t m = db->n + 1 - i < ((uint64_t)1 << 17) ? db->n + 1 - i : (uint64_t)1 << 17;
        FERRY_TRY(ferry__atomic_write(&w, db->off + i, (size_t)m * sizeof *db->off));
    }
    /* a file that changed while it was read would get an index of neither version */
    FERRY_TRY(ferry__sidecar_unchanged(&db->f, db->base.path));
    FERRY_TRY(ferry__atomic_pwrite(&w, &h, sizeof h, 0));
    rc = ferry__atomic_commit(&w);
    return rc;
cleanup:
    ferry__atomic_abort(&w);
    return rc;
}

/* The saved index at index_path, checked against the file as mapped. */
static int use_index(minidb *db, const char *index_path)
{
    int rc = ferry__sidecar_open(&db->sc, &KIND, db->base.path, index_path);
    if (rc < 0)
        return rc;
    const ferry__sidecar_header *h = &db->sc.h;
    uint64_t key = db->sc.extra[0], largest = db->sc.extra[1];
    if (h->size != db->map.size || h->mtime_ns != db->f.mtime_ns)
        return ferry__err(FERRY_ESTALE, "%s: %s changed while it was opened", index_path,
                          db->base.path);
    if (key > FERRY__MINIDB_KEY_MAX || largest > INT32_MAX || (h->count && !key) ||
        h->count > h->size / 9)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: damaged: %llu entries, the longest key %llu bytes and the largest "
                          "value %llu cannot be in %s (%llu bytes)",
                          index_path, (unsigned long long)h->count, (unsigned long long)key,
                          (unsigned long long)largest, db->base.path, (unsigned long long)h->size);
    db->at = db->sc.off;
    db->n = h->count;
    db->longest_key = (size_t)key;
    db->largest = largest;
    return 0;
}

/* The entries from the saved index (o->index, else FILE.fidx when it is there),
 * or a scan, which writes the index with o->build_index. */
static int locate(minidb *db, const ferry__kv_opts *o)
{
    const char *given = o ? o->index : NULL;
    bool build = o && o->build_index;
    char *own = given ? NULL : ferry__sidecar_path(db->base.path);
    const char *ip = given ? given : own;
    if (!ip)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    int rc = use_index(db, ip);
    if (rc == FERRY_ENOENT && !given && !build)
        rc = scan_file(db, o); /* no saved index: the scan is the index */
    else if ((rc == FERRY_ENOENT || rc == FERRY_ESTALE) && build) {
        ferry__sidecar_close(&db->sc);
        db->at = NULL;
        if ((rc = scan_file(db, o)) == 0)
            rc = write_index(db, ip);
    } else if (rc == FERRY_ENOENT) {
        rc = ferry__err(FERRY_ENOENT,
                        "%s: no minidb index %s: `ferry index minidb:%s -o %s` writes it, or add "
                        "build=1 to write it when opening",
                        db->base.path, ip, db->base.path, ip);
    }
    ferry__free(own);
    return rc;
}

static int open_as(ferry__kv **out, const char *path, const ferry__kv_opts *o, bool saved)
{
    *out = NULL;
    minidb *db = ferry__calloc(1, sizeof *db);
    if (!db)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    db->base.ops = &ferry__minidb_ops;
    db->f.fd = -1;
    snprintf(db->base.path, sizeof db->base.path, "%s", path);
    int rc = ferry__guard_install();
    if (rc == 0)
        rc = ferry__file_open(&db->f, path);
    if (rc == 0)
        rc = ferry__map_open(&db->map, &db->f, path);
    if (rc == 0)
        rc = saved ? locate(db, o) : scan_file(db, o);
    if (rc < 0) {
        mdb_close((ferry__kv *)db);
        return rc;
    }
    *out = (ferry__kv *)db;
    return 0;
}

static int mdb_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    return open_as(out, path, o, true);
}

int ferry_minidb_index_build(const char *path, const char *index_path, uint64_t *entries)
{
    if (!path)
        return ferry__err(FERRY_EINVAL, "minidb index: path is NULL");
    ferry__kv *kv;
    ferry__kv_opts o = {0};
    char *own = index_path ? NULL : ferry__sidecar_path(path);
    if (!index_path && !own)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    int rc = open_as(&kv, path, &o, false);
    if (rc == 0) {
        rc = write_index((const minidb *)kv, index_path ? index_path : own);
        if (rc == 0 && entries)
            *entries = ((const minidb *)kv)->n;
        mdb_close(kv);
    }
    ferry__free(own);
    return rc;
}

bool ferry__minidb_listed(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && !(n > 5 && !strcmp(name + n - 5, ".fidx"));
}

bool ferry__minidb_indexed(const ferry__kv *kv)
{
    return ((const minidb *)kv)->sc.off != NULL;
}

void ferry__minidb_mapping(const ferry__kv *kv, const void **base, size_t *size)
{
    const minidb *db = (const minidb *)kv;
    *base = db->map.data;
    *size = db->map.size;
}

/* Clamped to the mapping: the offsets of a saved index are checked as each entry
 * is read, not here. */
void ferry__minidb_span(const ferry__kv *kv, uint64_t i, uint64_t last, const uint8_t **p,
                        size_t *n)
{
    const minidb *db = (const minidb *)kv;
    uint64_t a = db->at[i], e = db->at[last + 1];
    a = a < db->map.size ? a : db->map.size;
    e = e < db->map.size ? e : db->map.size;
    *p = (const uint8_t *)db->map.data + a;
    *n = e > a ? (size_t)(e - a) : 0;
}

static uint64_t mdb_count(const ferry__kv *kv)
{
    return ((const minidb *)kv)->n;
}

static uint64_t mdb_largest(const ferry__kv *kv)
{
    return ((const minidb *)kv)->largest;
}

static size_t mdb_longest_key(const ferry__kv *kv)
{
    return ((const minidb *)kv)->longest_key;
}

/* Entry i's header, key and value, checked against its span in the index (a saved
 * index is not trusted: each entry must fill its span exactly, within the bounds
 * the index gave at open). False when it does not. */
static bool entry_ok(const minidb *db, uint64_t i, const uint8_t **h, uint32_t *k, uint32_t *v)
{
    uint64_t a = db->at[i], b = db->at[i + 1];
    if (a >= b || b > db->map.size || b - a < 8)
        return false;
    *h = (const uint8_t *)db->map.data + a;
    *k = ferry__load_le32(*h);
    *v = ferry__load_le32(*h + 4);
    return *k && *k <= db->longest_key && *v <= db->largest && 8 + (uint64_t)*k + *v == b - a;
}

static int bad_entry(const minidb *db, uint64_t i)
{
    uint64_t a = db->at[i], b = db->at[i + 1];
    if (a >= b || b > db->map.size || b - a < 8)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: entry %llu: offsets %llu..%llu in the index are out of order or "
                          "past the file (%zu bytes)",
                          db->base.path, (unsigned long long)i, (unsigned long long)a,
                          (unsigned long long)b, db->map.size);
    const uint8_t *h = (const uint8_t *)db->map.data + a;
    return ferry__err(FERRY_ECORRUPT,
                      "%s: entry %llu at offset %llu: key and value lengths %d + %d do not fill "
                      "its %llu bytes in the index (or pass its longest key %zu, largest value "
                      "%llu)",
                      db->base.path, (unsigned long long)i, (unsigned long long)a,
                      (int32_t)ferry__load_le32(h), (int32_t)ferry__load_le32(h + 4),
                      (unsigned long long)(b - a), db->longest_key,
                      (unsigned long long)db->largest);
}

/* For messages: an entry the index does not hold whole has no key. */
static void mdb_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen)
{
    const minidb *db = (const minidb *)kv;
    const uint8_t *h;
    uint32_t kl, vl;
    if (!entry_ok(db, i, &h, &kl, &vl)) {
        *k = (const uint8_t *)"";
        *klen = 0;
        return;
    }
    *k = h + 8;
    *klen = kl;
}

static int entry(const minidb *db, uint64_t i, const void **k, size_t *klen, const void **v,
                 size_t *vlen)
{
    const uint8_t *h;
    uint32_t kl, vl;
    if (!entry_ok(db, i, &h, &kl, &vl))
        return bad_entry(db, i);
    *k = h + 8;
    *klen = kl;
    *v = h + 8 + kl;
    *vlen = vl;
    return 0;
}

static int mdb_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    const void *k = NULL, *v = NULL;
    size_t kl = 0, vl = 0;
    int rc = entry((const minidb *)kv, i, &k, &kl, &v, &vl);
    return rc < 0 ? rc : fn(arg, v, vl);
}

static int mdb_iter_open(ferry__kv *kv, uint64_t first, ferry__kv_iter **out)
{
    minidb_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    it->db = (minidb *)kv;
    it->next = first;
    *out = it;
    return 0;
}

static int mdb_iter_next(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                         const void **v, size_t *vlen)
{
    if (skip > it->db->n || it->next >= it->db->n - skip) {
        it->next = it->db->n;
        return FERRY_END;
    }
    it->next += skip;
    return entry(it->db, it->next++, k, klen, v, vlen);
}

static void mdb_iter_close(ferry__kv_iter *it)
{
    ferry__free(it);
}

/* ---- writing ---- */

/* The entries already in the file are copied into the temporary first (Caffe2's
 * WRITE mode appends), after checking that the file is a whole minidb. */
static int copy_existing(minidb_writer *w, const char *path)
{
    uint64_t size;
    int64_t mtime;
    if (ferry__stat(path, &size, &mtime) < 0)
        return 0; /* a new file */
    ferry__kv *kv;
    ferry__kv_opts o = {0};
    int rc = open_as(&kv, path, &o, false);
    if (rc < 0)
        return ferry__err_prefix(rc, "minidb: %s is not a whole minidb to add to", path);
    minidb *db = (minidb *)kv;
    const uint8_t *p = db->map.data;
    for (size_t at = 0; rc == 0 && at < db->map.size; at += (size_t)1 << 20) {
        size_t m = db->map.size - at < ((size_t)1 << 20) ? db->map.size - at : (size_t)1 << 20;
        rc = ferry__atomic_write(&w->f, p + at, m);
    }
    mdb_close(kv);
    return rc;
}

static int mdb_writer_open(ferry__kv_writer **out, const char *path)
{
    *out = NULL;
    minidb_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    ferry__atomic_remove_stale(path);
    int rc = ferry__atomic_open(&w->f, path);
    if (rc == 0)
        rc = copy_existing(w, path);
    char *ip = ferry__sidecar_path(path);
    uint64_t size;
    int64_t mtime;
    if (!ip && rc == 0)
        rc = ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    w->indexed = ip && ferry__stat(ip, &size, &mtime) == 0;
    ferry__free(ip);
    if (rc < 0) {
        ferry__atomic_abort(&w->f);
        ferry__free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static int mdb_put(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    if (klen == 0 || klen > FERRY__MINIDB_KEY_MAX || vlen > INT32_MAX)
        return ferry__err(FERRY_EINVAL,
                          "minidb %s: a key of %zu bytes (1..%u) or a value of %zu "
                          "bytes (up to 2^31 - 1)",
                          w->f.path, klen, FERRY__MINIDB_KEY_MAX, vlen);
    uint8_t h[8];
    ferry__store_le32(h, (uint32_t)klen);
    ferry__store_le32(h + 4, (uint32_t)vlen);
    int rc = ferry__atomic_write(&w->f, h, 8);
    if (rc == 0)
        rc = ferry__atomic_write(&w->f, k, klen);
    if (rc == 0 && vlen)
        rc = ferry__atomic_write(&w->f, v, vlen);
    return rc;
}

/* A saved index beside the file is removed before the new file takes its place
 * and written again after, so that no reader finds it stale (in between, a
 * reader scans). A commit that fails before its rename writes it again for the
 * old file. */
static int mdb_commit(ferry__kv_writer *w)
{
    char *path = ferry__strdup(w->f.path), *ip = path ? ferry__sidecar_path(path) : NULL;
    bool indexed = w->indexed;
    int rc = 0;
    if (!ip)
        rc = ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    if (rc == 0 && indexed)
        rc = ferry__unlink(ip);
    if (rc == 0)
        rc = ferry__atomic_commit(&w->f);
    else
        ferry__atomic_abort(&w->f);
    ferry__free(w);
    if (indexed && ip) {
        char msg[FERRY_ERRMSG_MAX];
        ferry__err_copy(msg);
        int ri = ferry_minidb_index_build(path, ip, NULL);
        if (rc < 0)
            rc = ferry__err(rc, "%s", msg); /* the commit's error, not the index's */
        else if (ri < 0)
            rc = ferry__err_prefix(ri, "minidb: %s is committed, its index %s is not", path, ip);
    }
    ferry__free(ip);
    ferry__free(path);
    return rc;
}

static void mdb_abort(ferry__kv_writer *w)
{
    if (!w)
        return;
    ferry__atomic_abort(&w->f);
    ferry__free(w);
}

const ferry__kv_ops ferry__minidb_ops = {
    .name = "minidb",
    .mapped = 1,
    .open = mdb_open,
    .close = mdb_close,
    .count = mdb_count,
    .largest = mdb_largest,
    .longest_key = mdb_longest_key,
    .key = mdb_key,
    .get = mdb_get,
    .iter_open = mdb_iter_open,
    .iter_next = mdb_iter_next,
    .iter_close = mdb_iter_close,
    .writer_open = mdb_writer_open,
    .put = mdb_put,
    .commit = mdb_commit,
    .discard = mdb_abort,
};
