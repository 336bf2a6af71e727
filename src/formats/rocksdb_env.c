/*
 * RocksDB through its C API (Debian's librocksdb, where the build found it):
 * a database opened read-only (nothing is written beside it) and read as of a
 * snapshot taken at open, entry i in key order through an index of the keys
 * built by one pass at open, values lent without a copy (pinned); written
 * through a write batch. Without the library, every call says so.
 * What it shares with the other LSM store is written once, in lsm_env.h.
 */
#include "kv.h"
#include "lmdb_env.h"

#include <stdio.h>
#include <string.h>

#ifdef FERRY_HAVE_ROCKSDB
#include <rocksdb/c.h>

typedef struct lsm {
    ferry__kv_base base;
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_cache_t *cache;
    rocksdb_block_based_table_options_t *table;
    rocksdb_readoptions_t *ro;
    const rocksdb_snapshot_t *snap;
    ferry__kv_keys keys;
} lsm;

#define LSM(name) rocksdb_##name
#define LSM_NAME "rocksdb"
#define LSM_OPS ferry__rocksdb_ops
#define LSM_ABANDONED(d) ((void)(d), false)
#define LSM_PASS_ENTRY(d, it) 0
#define LSM_PASS_END(d) ((void)(d))
#define LSM_IN_PLACE NULL
#include "lsm_env.h"

static void lsm_close(ferry__kv *kv)
{
    lsm *d = (lsm *)kv;
    if (!d)
        return;
    close_db(d);
    if (d->table)
        rocksdb_block_based_options_destroy(d->table);
    if (d->cache)
        rocksdb_cache_destroy(d->cache);
    ferry__kv_keys_free(&d->keys);
    ferry__free(d);
}

static int lsm_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    lsm *d = new_db(path, o);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "rocksdb: out of memory");
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
    if ((rc = index_keys(d, o)) < 0)
        goto fail;
    *out = (ferry__kv *)d;
    return 0;
fail:
    lsm_close((ferry__kv *)d);
    return rc;
}

static int lsm_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    const lsm *d = (const lsm *)kv;
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
#endif
