/*
 * LevelDB through its C API (Debian's libleveldb): a database read as of a
 * snapshot taken at open, entry i in key order through an index of the keys
 * built by one pass at open, and written through a write batch.
 */
#include "kv.h"
#include "lmdb_env.h"

#include <leveldb/c.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define BATCH_MAX ((size_t)256 << 20) /* a write batch held in memory before a part commits */
#define CACHE_BYTES ((size_t)64 << 20)
#define POOL 64

typedef struct ldb {
    ferry__kv_base base;
    leveldb_t *db;
    leveldb_options_t *opts;
    leveldb_cache_t *cache;
    leveldb_readoptions_t *ro;
    const leveldb_snapshot_t *snap;
    ferry__kv_keys keys;
    /* Iterators lent to get, one a thread at a time: a seek lends the value in
     * the library's block, where leveldb_get would copy it twice. */
    pthread_mutex_t lock;
    leveldb_iterator_t *idle[POOL];
    int nidle;
} ldb;

typedef struct ferry__kv_iter {
    ldb *db;
    leveldb_iterator_t *it;
    uint64_t at; /* the entry the iterator is on */
    bool fresh;  /* not yet given */
} ldb_iter;

typedef struct ferry__kv_writer {
    char path[512];
    leveldb_t *db;
    leveldb_options_t *opts;
    leveldb_writeoptions_t *wo;
    leveldb_writebatch_t *batch;
    size_t held;
} ldb_writer;

static int lib_err(const char *path, const char *what, char *err)
{
    int rc = ferry__kv_lib_err(path, "leveldb", what, err);
    leveldb_free(err);
    return rc;
}

static void ldb_close(ferry__kv *kv)
{
    ldb *d = (ldb *)kv;
    if (!d)
        return;
    for (int k = 0; k < d->nidle; k++)
        leveldb_iter_destroy(d->idle[k]);
    pthread_mutex_destroy(&d->lock);
    if (d->snap)
        leveldb_release_snapshot(d->db, d->snap);
    if (d->ro)
        leveldb_readoptions_destroy(d->ro);
    if (d->db)
        leveldb_close(d->db);
    if (d->opts)
        leveldb_options_destroy(d->opts);
    if (d->cache)
        leveldb_cache_destroy(d->cache);
    ferry__kv_keys_free(&d->keys);
    ferry__free(d);
}

/* One pass over the snapshot in key order: the key index. */
static int index_keys(ldb *d)
{
    leveldb_iterator_t *it = leveldb_create_iterator(d->db, d->ro);
    int rc = 0;
    for (leveldb_iter_seek_to_first(it); rc == 0 && leveldb_iter_valid(it); leveldb_iter_next(it)) {
        size_t kl;
        const char *k = leveldb_iter_key(it, &kl);
        rc = ferry__kv_keys_add(&d->keys, d->base.path, k, kl);
    }
    char *err = NULL;
    leveldb_iter_get_error(it, &err);
    leveldb_iter_destroy(it);
    if (rc == 0 && err)
        return lib_err(d->base.path, "reading the keys", err);
    leveldb_free(err);
    return rc;
}

static int ldb_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    ldb *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "leveldb: out of memory");
    d->base.ops = &ferry__leveldb_ops;
    snprintf(d->base.path, sizeof d->base.path, "%s", path);
    pthread_mutex_init(&d->lock, NULL);
    d->keys.max = o ? o->index_max : 0;
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
    d->snap = leveldb_create_snapshot(d->db);
    leveldb_readoptions_set_snapshot(d->ro, d->snap);
    leveldb_readoptions_set_verify_checksums(d->ro, o && !o->verify ? 0 : 1);
    if ((rc = index_keys(d)) < 0)
        goto fail;
    *out = (ferry__kv *)d;
    return 0;
fail:
    ldb_close((ferry__kv *)d);
    return rc;
}

static uint64_t ldb_count(const ferry__kv *kv)
{
    return ((const ldb *)kv)->keys.n;
}

static size_t ldb_longest_key(const ferry__kv *kv)
{
    return ((const ldb *)kv)->keys.longest;
}

static void ldb_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen)
{
    ferry__kv_keys_get(&((const ldb *)kv)->keys, i, k, klen);
}

static int entry_err(const ldb *d, uint64_t i, char *err)
{
    const uint8_t *k;
    size_t kl;
    char key[96], what[160];
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    snprintf(what, sizeof what, "entry %llu (key \"%s\")", (unsigned long long)i,
             ferry__lmdb_key_repr(key, sizeof key, k, kl));
    if (!err)
        return ferry__err(FERRY_ECORRUPT, "%s: %s: leveldb: the key is gone from the snapshot",
                          d->base.path, what);
    return lib_err(d->base.path, what, err);
}

static leveldb_iterator_t *take_iter(ldb *d)
{
    leveldb_iterator_t *it = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->nidle)
        it = d->idle[--d->nidle];
    pthread_mutex_unlock(&d->lock);
    return it ? it : leveldb_create_iterator(d->db, d->ro);
}

static void give_iter(ldb *d, leveldb_iterator_t *it)
{
    pthread_mutex_lock(&d->lock);
    if (d->nidle < POOL) {
        d->idle[d->nidle++] = it;
        it = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    if (it)
        leveldb_iter_destroy(it);
}

static int ldb_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    ldb *d = (ldb *)kv; /* only the iterator pool changes, under its lock */
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

static int ldb_iter_open(ferry__kv *kv, uint64_t first, ferry__kv_iter **out)
{
    ldb *d = (ldb *)kv;
    ldb_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "leveldb: out of memory");
    it->db = d;
    it->it = leveldb_create_iterator(d->db, d->ro);
    it->at = first;
    it->fresh = true;
    if (first < d->keys.n) {
        const uint8_t *k;
        size_t kl;
        ferry__kv_keys_get(&d->keys, first, &k, &kl);
        leveldb_iter_seek(it->it, (const char *)k, kl);
    }
    *out = it;
    return 0;
}

static int ldb_iter_next(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                         const void **v, size_t *vlen)
{
    uint64_t n = it->db->keys.n;
    uint64_t steps = (it->fresh ? 0 : 1) + skip;
    if (it->at >= n || steps >= n - it->at) {
        it->at = n;
        return FERRY_END;
    }
    for (uint64_t s = 0; s < steps && leveldb_iter_valid(it->it); s++)
        leveldb_iter_next(it->it);
    it->at += steps;
    it->fresh = false;
    if (it->at >= n || !leveldb_iter_valid(it->it)) {
        char *err = NULL;
        leveldb_iter_get_error(it->it, &err);
        if (err)
            return lib_err(it->db->base.path, "reading in key order", err);
        if (it->at < n)
            return ferry__err(FERRY_ECORRUPT, "%s: leveldb: entry %llu is gone from the snapshot",
                              it->db->base.path, (unsigned long long)it->at);
        return FERRY_END;
    }
    *k = leveldb_iter_key(it->it, klen);
    *v = leveldb_iter_value(it->it, vlen);
    return 0;
}

static void ldb_iter_close(ferry__kv_iter *it)
{
    if (!it)
        return;
    leveldb_iter_destroy(it->it);
    ferry__free(it);
}

/* ---- writing ---- */

static void writer_free(ldb_writer *w)
{
    if (w->batch)
        leveldb_writebatch_destroy(w->batch);
    if (w->wo)
        leveldb_writeoptions_destroy(w->wo);
    if (w->db)
        leveldb_close(w->db);
    if (w->opts)
        leveldb_options_destroy(w->opts);
    ferry__free(w);
}

static int ldb_writer_open(ferry__kv_writer **out, const char *path)
{
    *out = NULL;
    ldb_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, "leveldb: out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    char *err = NULL;
    w->opts = leveldb_options_create();
    w->wo = leveldb_writeoptions_create();
    w->batch = leveldb_writebatch_create();
    if (!w->opts || !w->wo || !w->batch) {
        writer_free(w);
        return ferry__err(FERRY_ENOMEM, "%s: leveldb: out of memory", path);
    }
    leveldb_options_set_create_if_missing(w->opts, 1);
    leveldb_options_set_compression(w->opts, leveldb_snappy_compression);
    leveldb_writeoptions_set_sync(w->wo, 1);
    w->db = leveldb_open(w->opts, path, &err);
    if (!w->db) {
        writer_free(w);
        return lib_err(path, NULL, err);
    }
    *out = w;
    return 0;
}

static int flush(ldb_writer *w)
{
    char *err = NULL;
    leveldb_write(w->db, w->wo, w->batch, &err);
    leveldb_writebatch_clear(w->batch);
    w->held = 0;
    return err ? lib_err(w->path, "writing", err) : 0;
}

static int ldb_put(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    leveldb_writebatch_put(w->batch, k, klen, v, vlen);
    w->held += klen + vlen + 16;
    return w->held >= BATCH_MAX ? flush(w) : 0;
}

static int ldb_commit(ferry__kv_writer *w)
{
    int rc = flush(w);
    writer_free(w);
    return rc;
}

static void ldb_abort(ferry__kv_writer *w)
{
    if (w)
        writer_free(w);
}

const ferry__kv_ops ferry__leveldb_ops = {
    .name = "leveldb",
    .open = ldb_open,
    .close = ldb_close,
    .count = ldb_count,
    .longest_key = ldb_longest_key,
    .key = ldb_key,
    .get = ldb_get,
    .iter_open = ldb_iter_open,
    .iter_next = ldb_iter_next,
    .iter_close = ldb_iter_close,
    .writer_open = ldb_writer_open,
    .put = ldb_put,
    .commit = ldb_commit,
    .discard = ldb_abort,
};
