/*
 * LevelDB through its C API (Debian's libleveldb): a database read as of a
 * snapshot taken at open, entry i in key order through an index of the keys
 * built by one pass at open, and written through a write batch.
 * What it shares with the other LSM store is written once, in lsm_env.h.
 */
#include "kv.h"
#include "lmdb_env.h"

#include <leveldb/c.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define POOL 64

typedef struct lsm {
    ferry__kv_base base;
    leveldb_t *db;
    leveldb_options_t *opts;
    leveldb_cache_t *cache;
    leveldb_readoptions_t *ro;
    const leveldb_snapshot_t *snap;
    ferry__kv_keys keys;
    /* Iterators lent to get, one a thread at a time: a seek lends the value in
     * the library's block, where leveldb_get would copy it twice. A slot is
     * taken and given back by one atomic exchange, with no lock. */
    _Atomic(leveldb_iterator_t *) idle[POOL];
} lsm;

#define LSM(name) leveldb_##name
#define LSM_NAME "leveldb"
#define LSM_OPS ferry__leveldb_ops
#include "lsm_env.h"

static void lsm_close(ferry__kv *kv)
{
    lsm *d = (lsm *)kv;
    if (!d)
        return;
    for (int k = 0; k < POOL; k++) {
        leveldb_iterator_t *it = atomic_load(&d->idle[k]);
        if (it)
            leveldb_iter_destroy(it);
    }
    close_db(d);
    if (d->cache)
        leveldb_cache_destroy(d->cache);
    ferry__kv_keys_free(&d->keys);
    ferry__free(d);
}

static int lsm_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    lsm *d = new_db(path, o);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "leveldb: out of memory");
    int rc = 0;
    char *err = NULL;
    d->opts = leveldb_options_create();
    d->cache = leveldb_cache_create_lru(CACHE_BYTES);
    d->ro = leveldb_readoptions_create();
    if (!d->opts || !d->cache || !d->ro) {
        rc = ferry__err(FERRY_ENOMEM, "%s: leveldb: out of memory", path);
        goto fail;
    }
    leveldb_options_set_create_if_missing(d->opts, 0);
    leveldb_options_set_paranoid_checks(d->opts, 1);
    leveldb_options_set_cache(d->opts, d->cache);
    d->db = leveldb_open(d->opts, path, &err);
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

static leveldb_iterator_t *take_iter(lsm *d)
{
    for (int k = 0; k < POOL; k++) {
        if (!atomic_load_explicit(&d->idle[k], memory_order_relaxed))
            continue;
        leveldb_iterator_t *it = atomic_exchange_explicit(&d->idle[k], NULL, memory_order_acquire);
        if (it)
            return it;
    }
    return leveldb_create_iterator(d->db, d->ro);
}

static void give_iter(lsm *d, leveldb_iterator_t *it)
{
    for (int k = 0; k < POOL; k++) {
        leveldb_iterator_t *none = NULL;
        if (!atomic_load_explicit(&d->idle[k], memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&d->idle[k], &none, it, memory_order_release,
                                                    memory_order_relaxed))
            return;
    }
    leveldb_iter_destroy(it);
}

static int lsm_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    lsm *d = (lsm *)kv; /* only the iterator pool changes, slot by slot */
    const uint8_t *k;
    size_t kl, vl = 0;
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    leveldb_iterator_t *it = take_iter(d);
    leveldb_iter_seek(it, (const char *)k, kl);
    int rc;
    size_t got = 0;
    const char *key = leveldb_iter_valid(it) ? leveldb_iter_key(it, &got) : NULL;
    if (key && got == kl && !memcmp(key, k, kl)) {
        const char *v = leveldb_iter_value(it, &vl);
        rc = fn(arg, (const uint8_t *)v, vl);
    } else {
        char *err = NULL;
        leveldb_iter_get_error(it, &err);
        rc = entry_err(d, i, err);
        /* an iterator that met an error keeps it: not lent again */
        leveldb_iter_destroy(it);
        return rc;
    }
    give_iter(d, it);
    return rc;
}
