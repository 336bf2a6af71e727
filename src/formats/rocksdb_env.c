/*
 * RocksDB through its C API (Debian's librocksdb, where the build found it):
 * a database opened read-only (nothing is written beside it) and read as of a
 * snapshot taken at open, entry i in key order through an index of the keys
 * built by one pass at open, values lent without a copy (pinned); written
 * through a write batch. Without the library, every call says so.
 */
#include "kv.h"
#include "lmdb_env.h"

#include <stdio.h>
#include <string.h>

#ifdef FERRY_HAVE_ROCKSDB
#include <rocksdb/c.h>

#define BATCH_MAX ((size_t)256 << 20) /* a write batch held in memory before a part commits */
#define CACHE_BYTES ((size_t)64 << 20)

typedef struct rdb {
    ferry__kv_base base;
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_cache_t *cache;
    rocksdb_block_based_table_options_t *table;
    rocksdb_readoptions_t *ro;
    const rocksdb_snapshot_t *snap;
    ferry__kv_keys keys;
} rdb;

typedef struct ferry__kv_iter {
    rdb *db;
    rocksdb_iterator_t *it;
    uint64_t at; /* the entry the iterator is on */
    bool fresh;  /* not yet given */
} rdb_iter;

typedef struct ferry__kv_writer {
    char path[512];
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_writeoptions_t *wo;
    rocksdb_writebatch_t *batch;
    size_t held;
} rdb_writer;

static int lib_err(const char *path, const char *what, char *err)
{
    int rc = ferry__kv_lib_err(path, "rocksdb", what, err);
    rocksdb_free(err);
    return rc;
}

static void rdb_close(ferry__kv *kv)
{
    rdb *d = (rdb *)kv;
    if (!d)
        return;
    if (d->snap)
        rocksdb_release_snapshot(d->db, d->snap);
    if (d->ro)
        rocksdb_readoptions_destroy(d->ro);
    if (d->db)
        rocksdb_close(d->db);
    if (d->opts)
        rocksdb_options_destroy(d->opts);
    if (d->table)
        rocksdb_block_based_options_destroy(d->table);
    if (d->cache)
        rocksdb_cache_destroy(d->cache);
    ferry__kv_keys_free(&d->keys);
    ferry__free(d);
}

/* One pass over the snapshot in key order: the key index. */
static int index_keys(rdb *d)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro);
    int rc = 0;
    for (rocksdb_iter_seek_to_first(it); rc == 0 && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl;
        const char *k = rocksdb_iter_key(it, &kl);
        rc = ferry__kv_keys_add(&d->keys, d->base.path, k, kl);
    }
    char *err = NULL;
    rocksdb_iter_get_error(it, &err);
    rocksdb_iter_destroy(it);
    if (rc == 0 && err)
        return lib_err(d->base.path, "reading the keys", err);
    rocksdb_free(err);
    return rc;
}

static int rdb_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    rdb *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "rocksdb: out of memory");
    d->base.ops = &ferry__rocksdb_ops;
    snprintf(d->base.path, sizeof d->base.path, "%s", path);
    d->keys.max = o ? o->index_max : 0;
    int rc = 0;
    char *err = NULL;
    d->opts = rocksdb_options_create();
    d->cache = rocksdb_cache_create_lru(CACHE_BYTES);
    d->table = rocksdb_block_based_options_create();
    d->ro = rocksdb_readoptions_create();
    if (!d->opts || !d->cache || !d->table || !d->ro) {
        rc = ferry__err(FERRY_ENOMEM, "%s: rocksdb: out of memory", path);
        goto fail;
    }
    rocksdb_options_set_create_if_missing(d->opts, 0);
    rocksdb_options_set_paranoid_checks(d->opts, 1);
    rocksdb_block_based_options_set_block_cache(d->table, d->cache);
    rocksdb_options_set_block_based_table_factory(d->opts, d->table);
    d->db = rocksdb_open_for_read_only(d->opts, path, 0, &err);
    if (!d->db) {
        rc = lib_err(path, NULL, err);
        goto fail;
    }
    d->snap = rocksdb_create_snapshot(d->db);
    rocksdb_readoptions_set_snapshot(d->ro, d->snap);
    rocksdb_readoptions_set_verify_checksums(d->ro, o && !o->verify ? 0 : 1);
    if ((rc = index_keys(d)) < 0)
        goto fail;
    *out = (ferry__kv *)d;
    return 0;
fail:
    rdb_close((ferry__kv *)d);
    return rc;
}

static uint64_t rdb_count(const ferry__kv *kv)
{
    return ((const rdb *)kv)->keys.n;
}

static size_t rdb_longest_key(const ferry__kv *kv)
{
    return ((const rdb *)kv)->keys.longest;
}

static void rdb_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen)
{
    ferry__kv_keys_get(&((const rdb *)kv)->keys, i, k, klen);
}

static int entry_err(const rdb *d, uint64_t i, char *err)
{
    const uint8_t *k;
    size_t kl;
    char key[96], what[160];
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    snprintf(what, sizeof what, "entry %llu (key \"%s\")", (unsigned long long)i,
             ferry__lmdb_key_repr(key, sizeof key, k, kl));
    if (!err)
        return ferry__err(FERRY_ECORRUPT, "%s: %s: rocksdb: the key is gone from the snapshot",
                          d->base.path, what);
    return lib_err(d->base.path, what, err);
}

static int rdb_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    const rdb *d = (const rdb *)kv;
    const uint8_t *k;
    size_t kl, vl = 0;
    char *err = NULL;
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    rocksdb_pinnableslice_t *ps = rocksdb_get_pinned(d->db, d->ro, (const char *)k, kl, &err);
    if (err || !ps) {
        rocksdb_pinnableslice_destroy(ps);
        return entry_err(d, i, err);
    }
    const char *v = rocksdb_pinnableslice_value(ps, &vl);
    int rc = fn(arg, (const uint8_t *)v, vl);
    rocksdb_pinnableslice_destroy(ps);
    return rc;
}

static int rdb_iter_open(ferry__kv *kv, uint64_t first, ferry__kv_iter **out)
{
    rdb *d = (rdb *)kv;
    rdb_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "rocksdb: out of memory");
    it->db = d;
    it->it = rocksdb_create_iterator(d->db, d->ro);
    it->at = first;
    it->fresh = true;
    if (first < d->keys.n) {
        const uint8_t *k;
        size_t kl;
        ferry__kv_keys_get(&d->keys, first, &k, &kl);
        rocksdb_iter_seek(it->it, (const char *)k, kl);
    }
    *out = it;
    return 0;
}

static int rdb_iter_next(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                         const void **v, size_t *vlen)
{
    uint64_t n = it->db->keys.n;
    uint64_t steps = (it->fresh ? 0 : 1) + skip;
    if (it->at >= n || steps >= n - it->at) {
        it->at = n;
        return FERRY_END;
    }
    for (uint64_t s = 0; s < steps && rocksdb_iter_valid(it->it); s++)
        rocksdb_iter_next(it->it);
    it->at += steps;
    it->fresh = false;
    if (it->at >= n || !rocksdb_iter_valid(it->it)) {
        char *err = NULL;
        rocksdb_iter_get_error(it->it, &err);
        if (err)
            return lib_err(it->db->base.path, "reading in key order", err);
        if (it->at < n)
            return ferry__err(FERRY_ECORRUPT, "%s: rocksdb: entry %llu is gone from the snapshot",
                              it->db->base.path, (unsigned long long)it->at);
        return FERRY_END;
    }
    *k = rocksdb_iter_key(it->it, klen);
    *v = rocksdb_iter_value(it->it, vlen);
    return 0;
}

static void rdb_iter_close(ferry__kv_iter *it)
{
    if (!it)
        return;
    rocksdb_iter_destroy(it->it);
    ferry__free(it);
}

/* ---- writing ---- */

static void writer_free(rdb_writer *w)
{
    if (w->batch)
        rocksdb_writebatch_destroy(w->batch);
    if (w->wo)
        rocksdb_writeoptions_destroy(w->wo);
    if (w->db)
        rocksdb_close(w->db);
    if (w->opts)
        rocksdb_options_destroy(w->opts);
    ferry__free(w);
}

static int rdb_writer_open(ferry__kv_writer **out, const char *path)
{
    *out = NULL;
    rdb_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, "rocksdb: out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    char *err = NULL;
    w->opts = rocksdb_options_create();
    w->wo = rocksdb_writeoptions_create();
    w->batch = rocksdb_writebatch_create();
    if (!w->opts || !w->wo || !w->batch) {
        writer_free(w);
        return ferry__err(FERRY_ENOMEM, "%s: rocksdb: out of memory", path);
    }
    rocksdb_options_set_create_if_missing(w->opts, 1);
    rocksdb_options_set_compression(w->opts, rocksdb_snappy_compression);
    rocksdb_writeoptions_set_sync(w->wo, 1);
    w->db = rocksdb_open(w->opts, path, &err);
    if (!w->db) {
        writer_free(w);
        return lib_err(path, NULL, err);
    }
    *out = w;
    return 0;
}

static int flush(rdb_writer *w)
{
    char *err = NULL;
    rocksdb_write(w->db, w->wo, w->batch, &err);
    rocksdb_writebatch_clear(w->batch);
    w->held = 0;
    return err ? lib_err(w->path, "writing", err) : 0;
}

static int rdb_put(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    rocksdb_writebatch_put(w->batch, k, klen, v, vlen);
    w->held += klen + vlen + 16;
    return w->held >= BATCH_MAX ? flush(w) : 0;
}

static int rdb_commit(ferry__kv_writer *w)
{
    int rc = flush(w);
    writer_free(w);
    return rc;
}

static void rdb_abort(ferry__kv_writer *w)
{
    if (w)
        writer_free(w);
}

#else /* no librocksdb in this build */

static int missing(const char *path)
{
    return ferry__err(FERRY_ENOTSUP,
                      "%s: rocksdb: this build of ferry has no RocksDB (librocksdb and "
                      "rocksdb/c.h were not found when it was built; install librocksdb-dev "
                      "and rebuild)",
                      path);
}

static int rdb_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    return missing(path);
}

static int rdb_writer_open(ferry__kv_writer **out, const char *path)
{
    *out = NULL;
    return missing(path);
}

/* never called: nothing opens */
static void rdb_close(ferry__kv *kv) {}
static uint64_t rdb_count(const ferry__kv *kv)
{
    return 0;
}
static size_t rdb_longest_key(const ferry__kv *kv)
{
    return 0;
}
static void rdb_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen) {}
static int rdb_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    return FERRY_ENOTSUP;
}
static int rdb_iter_open(ferry__kv *kv, uint64_t first, ferry__kv_iter **out)
{
    return FERRY_ENOTSUP;
}
static int rdb_iter_next(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                         const void **v, size_t *vlen)
{
    return FERRY_ENOTSUP;
}
static void rdb_iter_close(ferry__kv_iter *it) {}
static int rdb_put(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    return FERRY_ENOTSUP;
}
static int rdb_commit(ferry__kv_writer *w)
{
    return FERRY_ENOTSUP;
}
static void rdb_abort(ferry__kv_writer *w) {}
#endif

const ferry__kv_ops ferry__rocksdb_ops = {
    .name = "rocksdb",
    .open = rdb_open,
    .close = rdb_close,
    .count = rdb_count,
    .longest_key = rdb_longest_key,
    .key = rdb_key,
    .get = rdb_get,
    .iter_open = rdb_iter_open,
    .iter_next = rdb_iter_next,
    .iter_close = rdb_iter_close,
    .writer_open = rdb_writer_open,
    .put = rdb_put,
    .commit = rdb_commit,
    .discard = rdb_abort,
};
