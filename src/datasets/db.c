/*
 * The key/value DB interface over record shards, LMDB, and the stores of
 * formats/kv.h (minidb, LevelDB, RocksDB).
 */
#include "ferry/db.h"
#include "ferry/lmdb.h"
#include "ferry/records.h"
#include "dataset_internal.h"
#include "../formats/kv.h"
#include "../core/bytes.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define KEY_MAX 511u
#define VALUE_MAX ((uint64_t)1 << 30)

enum { B_RECORDS, B_LMDB, B_KV };

struct ferry_db {
    int backend, mode;
    char *path;
    ferry_dataset *ds;        /* reading */
    const ferry__kv_ops *ops; /* B_KV */
    ferry__kv *kv;            /* B_KV, reading */
    bool txn_open;
};

struct ferry_db_cursor {
    ferry_db *db;
    uint64_t next, step;
    ferry__kv_iter *it; /* B_KV: the store's iterator, from entry next */
};

struct ferry_db_txn {
    ferry_db *db;
    ferry_record_writer *rw;
    ferry_lmdb_writer *lw;
    ferry__kv_writer *kw;
};

int ferry_db_open(ferry_db **out, const char *backend, const char *path, int mode)
{
    int rc = 0;
    *out = NULL;
    if (!backend || !path)
        return ferry__err(FERRY_EINVAL, "db: backend and path are required");
    const ferry__kv_ops *ops = ferry__kv_find(backend);
    int b = !strcmp(backend, "records") ? B_RECORDS
            : !strcmp(backend, "lmdb")  ? B_LMDB
            : ops                       ? B_KV
                                        : -1;
    if (b < 0)
        return ferry__err(FERRY_EINVAL,
                          "db: unknown backend \"%.32s\" (records, lmdb, minidb, leveldb, rocksdb)",
                          backend);
    if (mode != FERRY_DB_READ && mode != FERRY_DB_WRITE)
        return ferry__err(FERRY_EINVAL, "db: mode %d is not READ (0) or WRITE (1)", mode);
    ferry_db *db = ferry__calloc(1, sizeof *db);
    if (!db || !(db->path = ferry__strdup(path))) {
        ferry__free(db);
        return ferry__err(FERRY_ENOMEM, "db: out of memory");
    }
    db->backend = b;
    db->mode = mode;
    db->ops = ops;
    if (mode == FERRY_DB_READ) {
        if (b == B_KV) {
            ferry__kv_opts ko = {0, 1, NULL, 0, 1};
            FERRY_TRY(ops->open(&db->kv, path, &ko));
        } else if (b == B_RECORDS) {
            FERRY_TRY(ferry_dataset_records(&db->ds, path, 0, 1));
        } else {
            ferry_lmdb_opts o;
            ferry_lmdb_opts_default(&o);
            o.path = path;
            o.datum = FERRY_LMDB_DATUM_OFF;
            FERRY_TRY(ferry_dataset_lmdb(&db->ds, &o));
        }
    }
    *out = db;
    return 0;
cleanup:
    ferry_db_close(db);
    return rc;
}

void ferry_db_close(ferry_db *db)
{
    if (!db)
        return;
    ferry_dataset_free(db->ds);
    if (db->kv)
        db->ops->close(db->kv);
    ferry__free(db->path);
    ferry__free(db);
}

uint64_t ferry_db_count(const ferry_db *db)
{
    if (db->kv)
        return db->ops->count(db->kv);
    return db->ds ? ferry_dataset_len(db->ds) : 0;
}

/* LevelDB's and RocksDB's values, copied for the calling thread (db.h): one
 * buffer a thread, freed when the thread ends. */
typedef struct held {
    uint8_t *p;
    size_t cap;
    const uint8_t *v; /* what the entry lends: p, or the mapping (minidb) */
    size_t n;
    bool copy;
} held;

static pthread_key_t held_key;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;
static int held_ok;

static void held_free(void *h)
{
    ferry__free(((held *)h)->p);
    ferry__free(h);
}

static void held_init(void)
{
    held_ok = pthread_key_create(&held_key, held_free) == 0;
}

static int hold(void *arg, const uint8_t *v, size_t n)
{
    held *h = arg;
    h->n = n;
    if (!h->copy) {
        h->v = v;
        return 0;
    }
    if (n > h->cap) {
        uint8_t *p = ferry__realloc(h->p, n);
        if (!p)
            return ferry__err(FERRY_ENOMEM, "db: out of memory for a value of %zu bytes", n);
        h->p = p;
        h->cap = n;
    }
    if (n)
        memcpy(h->p, v, n);
    h->v = h->p;
    return 0;
}

static int kv_entry(const ferry_db *db, uint64_t i, const void **key, size_t *klen,
                    const void **value, size_t *vlen)
{
    if (i >= db->ops->count(db->kv))
        return ferry__err(FERRY_ERANGE, "%s: entry %llu is past the end (%llu entries)", db->path,
                          (unsigned long long)i, (unsigned long long)db->ops->count(db->kv));
    held local = {0}, *h = &local;
    if (!db->ops->mapped) {
        pthread_once(&held_once, held_init);
        h = held_ok ? pthread_getspecific(held_key) : NULL;
        if (!h && (!held_ok || !(h = ferry__calloc(1, sizeof *h)) ||
                   pthread_setspecific(held_key, h) != 0)) {
            ferry__free(h);
            return ferry__err(FERRY_ENOMEM, "db: out of memory");
        }
        h->copy = true;
    }
    int rc = db->ops->get(db->kv, i, hold, h);
    if (rc < 0)
        return rc;
    const uint8_t *k;
    db->ops->key(db->kv, i, &k, klen);
    *key = k;
    *value = h->v;
    *vlen = h->n;
    return 0;
}

int ferry_db_entry(const ferry_db *db, uint64_t i, const void **key, size_t *klen,
                   const void **value, size_t *vlen)
{
    if (!db->ds && !db->kv)
        return ferry__err(FERRY_ESTATE, "db %s: opened for writing", db->path);
    if (db->kv)
        return kv_entry(db, i, key, klen, value, vlen);
    if (db->backend == B_LMDB)
        return ferry_lmdb_entry(db->ds, i, key, klen, value, vlen);
    /* a record of the schema key:u8[<=511], value:u8[<=2^30], stored as is:
     * u32 rows, key bytes, u32 rows, value bytes */
    const void *raw;
    size_t n;
    int compressed;
    int rc = ferry__records_raw(db->ds, i, &raw, &n, &compressed);
    if (rc < 0)
        return rc;
    if (compressed)
        return ferry__err(FERRY_ENOTSUP,
                          "db %s: record %llu is compressed; the db interface "
                          "reads uncompressed shards (read it as a dataset)",
                          db->path, (unsigned long long)i);
    const uint8_t *p = raw;
    uint32_t k = n >= 4 ? ferry__load_le32(p) : UINT32_MAX;
    if (k > KEY_MAX || n < 8 + (size_t)k || ferry__load_le32(p + 4 + k) != n - 8 - k)
        return ferry__err(FERRY_ECORRUPT, "db %s: record %llu is not a key and a value", db->path,
                          (unsigned long long)i);
    *key = p + 4;
    *klen = k;
    *value = p + 8 + k;
    *vlen = n - 8 - k;
    return 0;
}

int ferry_db_cursor_open(ferry_db *db, uint64_t shard_id, uint64_t num_shards,
                         ferry_db_cursor **out)
{
    *out = NULL;
    if (num_shards == 0 || shard_id >= num_shards)
        return ferry__err(FERRY_EINVAL, "db: shard_id %llu is outside [0, num_shards %llu)",
                          (unsigned long long)shard_id, (unsigned long long)num_shards);
    if (!db->ds && !db->kv)
        return ferry__err(FERRY_ESTATE, "db %s: opened for writing", db->path);
    ferry_db_cursor *c = ferry__calloc(1, sizeof *c);
    if (!c)
        return ferry__err(FERRY_ENOMEM, "db: out of memory");
    c->db = db;
    c->next = shard_id;
    c->step = num_shards;
    *out = c;
    return 0;
}

/* The store's own iterator, opened at the cursor's next entry: one step of the
 * library's iterator an entry, not a lookup by key. */
static int kv_cursor_next(ferry_db_cursor *c, const void **key, size_t *klen, const void **value,
                          size_t *vlen)
{
    int rc;
    uint64_t skip = c->step - 1;
    if (!c->it) {
        if ((rc = c->db->ops->iter_open(c->db->kv, c->next, &c->it)) < 0)
            return rc;
        skip = 0;
    }
    rc = c->db->ops->iter_next(c->it, skip, key, klen, value, vlen);
    if (rc == 0)
        c->next += c->step;
    return rc;
}

int ferry_db_cursor_next(ferry_db_cursor *c, const void **key, size_t *klen, const void **value,
                         size_t *vlen)
{
    if (c->next >= ferry_db_count(c->db))
        return FERRY_END;
    if (c->db->kv)
        return kv_cursor_next(c, key, klen, value, vlen);
    int rc = ferry_db_entry(c->db, c->next, key, klen, value, vlen);
    c->next += c->step;
    return rc;
}

int ferry_db_cursor_seek(ferry_db_cursor *c, uint64_t k)
{
    uint64_t first = c->next % c->step;
    if (k > (UINT64_MAX - first) / c->step)
        return ferry__err(FERRY_ERANGE, "db: cursor position %llu is out of range",
                          (unsigned long long)k);
    c->next = first + k * c->step;
    if (c->it) { /* reopened at the new place by the next call */
        c->db->ops->iter_close(c->it);
        c->it = NULL;
    }
    return 0;
}

void ferry_db_cursor_close(ferry_db_cursor *c)
{
    if (c && c->it)
        c->db->ops->iter_close(c->it);
    ferry__free(c);
}

int ferry_db_begin(ferry_db *db, ferry_db_txn **out)
{
    int rc = 0;
    *out = NULL;
    if (db->mode != FERRY_DB_WRITE)
        return ferry__err(FERRY_ESTATE, "db %s: opened for reading", db->path);
    if (db->txn_open)
        return ferry__err(FERRY_ESTATE, "db %s: a transaction is already open", db->path);
    ferry_db_txn *t = ferry__calloc(1, sizeof *t);
    if (!t)
        return ferry__err(FERRY_ENOMEM, "db: out of memory");
    t->db = db;
    if (db->backend == B_KV) {
        FERRY_TRY(db->ops->writer_open(&t->kw, db->path));
    } else if (db->backend == B_RECORDS) {
        ferry_field f[2];
        memset(f, 0, sizeof f);
        strcpy(f[0].name, "key");
        strcpy(f[1].name, "value");
        f[0].dtype = f[1].dtype = FERRY_U8;
        f[0].ndim = f[1].ndim = 1;
        f[0].variable = f[1].variable = 1;
        f[0].shape[0] = KEY_MAX;
        f[1].shape[0] = (int64_t)VALUE_MAX;
        ferry_writer_opts o = {.dir = db->path, .name = "db", .fields = f, .nfields = 2};
        FERRY_TRY(ferry_writer_open(&t->rw, &o));
    } else {
        ferry_lmdb_writer_opts o;
        ferry_lmdb_writer_opts_default(&o);
        o.path = db->path;
        o.map_size = (uint64_t)1 << 40;
        o.commit_every = 1u << 24; /* one LMDB transaction until ferry_db_commit */
        FERRY_TRY(ferry_lmdb_writer_open(&t->lw, &o));
    }
    db->txn_open = true;
    *out = t;
    return 0;
cleanup:
    ferry__free(t);
    return rc;
}

int ferry_db_put(ferry_db_txn *t, const void *key, size_t klen, const void *value, size_t vlen)
{
    if (klen == 0 || klen > KEY_MAX || vlen > VALUE_MAX)
        return ferry__err(FERRY_EINVAL,
                          "db %s: key of %zu bytes (1..%u) or value of %zu bytes "
                          "(up to 2^30)",
                          t->db->path, klen, KEY_MAX, vlen);
    if (t->lw)
        return ferry_lmdb_writer_put(t->lw, key, klen, value, vlen);
    if (t->kw)
        return t->db->ops->put(t->kw, key, klen, value, vlen);
    void *data[2] = {(void *)key, (void *)value};
    int64_t len[2] = {(int64_t)klen, (int64_t)vlen};
    ferry_sample s = {2, data, len, {0}};
    return ferry_writer_append(t->rw, &s);
}

int ferry_db_commit(ferry_db_txn *t)
{
    int rc;
    if (t->lw) {
        rc = ferry_lmdb_writer_commit(t->lw);
        ferry_lmdb_writer_free(t->lw);
    } else if (t->kw) {
        rc = t->db->ops->commit(t->kw);
    } else {
        rc = ferry_writer_commit(t->rw);
    }
    t->db->txn_open = false;
    ferry__free(t);
    return rc;
}

void ferry_db_abort(ferry_db_txn *t)
{
    if (!t)
        return;
    if (t->lw) {
        ferry_lmdb_writer_abort(t->lw);
        ferry_lmdb_writer_free(t->lw);
    } else if (t->kw) {
        t->db->ops->discard(t->kw);
    } else {
        ferry_writer_abort(t->rw);
    }
    t->db->txn_open = false;
    ferry__free(t);
}
