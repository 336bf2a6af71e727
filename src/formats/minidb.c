/*
 * Caffe2's minidb: entries (int32 key length, int32 value length, key, value),
 * little-endian, appended one after the other in one file. Read from a mapping
 * through an index of entry offsets built by one scan at open; written through a
 * temporary file beside the target, synced and renamed over it.
 */
#include "kv.h"
#include "../core/bytes.h"
#include "../core/guard.h"
#include "../io/io.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define POPULATE_MAX ((size_t)1 << 30)

typedef struct minidb {
    ferry__kv_base base;
    ferry__map map;
    uint64_t *off; /* where entry i's header lies */
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
    ferry__free(db->off);
    ferry__free(db);
}

static int mdb_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    minidb *db = ferry__calloc(1, sizeof *db);
    if (!db)
        return ferry__err(FERRY_ENOMEM, "minidb: out of memory");
    db->base.ops = &ferry__minidb_ops;
    snprintf(db->base.path, sizeof db->base.path, "%s", path);
    int rc = ferry__map_file(&db->map, path);
    /* the scan touches every page of a file of small entries: mapping them in one
     * call (Linux 5.14's MADV_POPULATE_READ) costs less than a fault each. A
     * larger file is left to faults, as it is read. */
    if (rc == 0 && db->map.size && db->map.size <= POPULATE_MAX)
        madvise(db->map.data, db->map.size, 22 /* MADV_POPULATE_READ */);
    if (rc == 0)
        rc = scan(db, o && o->index_max ? o->index_max : (uint64_t)1 << 30);
    if (rc < 0) {
        mdb_close((ferry__kv *)db);
        return rc;
    }
    *out = (ferry__kv *)db;
    return 0;
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

static void mdb_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen)
{
    const minidb *db = (const minidb *)kv;
    const uint8_t *h = (const uint8_t *)db->map.data + db->off[i];
    *k = h + 8;
    *klen = ferry__load_le32(h);
}

static void entry(const minidb *db, uint64_t i, const void **k, size_t *klen, const void **v,
                  size_t *vlen)
{
    const uint8_t *h = (const uint8_t *)db->map.data + db->off[i];
    size_t kl = ferry__load_le32(h);
    *k = h + 8;
    *klen = kl;
    *v = h + 8 + kl;
    *vlen = ferry__load_le32(h + 4);
}

static int mdb_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    const void *k, *v;
    size_t kl, vl;
    entry((const minidb *)kv, i, &k, &kl, &v, &vl);
    return fn(arg, v, vl);
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
    entry(it->db, it->next++, k, klen, v, vlen);
    return 0;
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
    ferry__kv_opts o = {0, 0};
    int rc = mdb_open(&kv, path, &o);
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

static int mdb_commit(ferry__kv_writer *w)
{
    int rc = ferry__atomic_commit(&w->f);
    ferry__free(w);
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
