/*
 * What LevelDB and RocksDB share, written once: RocksDB's C API mirrors
 * LevelDB's (rocksdb_X for leveldb_X), so this body is included by each
 * backend with LSM(name) naming that library's call and LSM_NAME its name in
 * messages. No include guard: each backend includes it once, after defining
 *
 *   LSM(name)  leveldb_##name or rocksdb_##name
 *   LSM_NAME   "leveldb" or "rocksdb"
 *   LSM_OPS    the backend's table, ferry__leveldb_ops or ferry__rocksdb_ops
 *   LSM_ABANDONED(d)  true when the database d may not be read any more (a
 *              read was cut short inside the library), else false
 *   LSM_PASS_ENTRY(d, it)  what the backend notes of each entry of the pass at
 *              open, the iterator on it (after its key is indexed): 0 or an error
 *   LSM_PASS_END(d)  what the backend does after a pass that met no error
 *   LSM_IN_PLACE  the table's in_place (kv.h), or NULL
 *   lsm        its database: a struct with at least base (ferry__kv_base),
 *              db, opts, ro (read options), snap and keys (ferry__kv_keys)
 *
 * It gives making and unmaking the database (new_db, close_db), the snapshot
 * and the key index (index_keys, lsm_count, lsm_longest_key, lsm_key), the
 * error of entry i (entry_err), reading in key order (lsm_iter_*), the writer
 * (lsm_writer_open, lsm_put, lsm_commit, lsm_abort) and the table LSM_OPS. What differs stays in
 * the backend, defined after it: lsm_open (options, read-only or not), lsm_close and lsm_get.
 */

#define BATCH_MAX ((size_t)256 << 20) /* the most a transaction's write batch holds */
#define CACHE_BYTES ((size_t)64 << 20)

/* the library's types, under one name */
typedef LSM(t) lsm_lib_t;
typedef LSM(options_t) lsm_options_t;
typedef LSM(writeoptions_t) lsm_writeoptions_t;
typedef LSM(writebatch_t) lsm_writebatch_t;
typedef LSM(iterator_t) lsm_iterator_t;

static int lsm_open(ferry__kv **out, const char *path, const ferry__kv_opts *o);
static void lsm_close(ferry__kv *kv);
static int lsm_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg);

typedef struct ferry__kv_iter {
    lsm *db;
    lsm_iterator_t *it;
    uint64_t at; /* the entry the iterator is on */
    bool fresh;  /* not yet given */
} lsm_iter;

typedef struct ferry__kv_writer {
    char path[512];
    lsm_lib_t *db;
    lsm_options_t *opts;
    lsm_writeoptions_t *wo;
    lsm_writebatch_t *batch;
    size_t held;
} lsm_writer;

static int lib_err(const char *path, const char *what, char *err)
{
    int rc = ferry__kv_lib_err(path, LSM_NAME, what, err);
    LSM(free)(err);
    return rc;
}

/* A database for path, zeroed but for what open needs first; NULL without memory. */
static lsm *new_db(const char *path, const ferry__kv_opts *o)
{
    lsm *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->base.ops = &LSM_OPS;
    snprintf(d->base.path, sizeof d->base.path, "%s", path);
    d->keys.max = o ? o->index_max : 0;
    return d;
}

/* What open made of the database and its options, in the order to undo it;
 * the backend then frees its own (cache, table) and d. */
static void close_db(lsm *d)
{
    if (d->snap)
        LSM(release_snapshot)(d->db, d->snap);
    if (d->ro)
        LSM(readoptions_destroy)(d->ro);
    if (d->db)
        LSM(close)(d->db);
    if (d->opts)
        LSM(options_destroy)(d->opts);
}

/* The snapshot the reads see, taken now, and one pass over it in key order:
 * the key index. With verify, the pass checks every block of the snapshot
 * against its checksum (a mismatch fails the open), so the reads after it
 * (d->ro) do not check again: each block is paid for once. The pass keeps its
 * blocks out of the cache, which is left to the reads. */
static int index_keys(lsm *d, const ferry__kv_opts *o)
{
    d->snap = LSM(create_snapshot)(d->db);
    LSM(readoptions_set_snapshot)(d->ro, d->snap);
    LSM(readoptions_set_verify_checksums)(d->ro, 0);
    LSM(readoptions_t) *pass = LSM(readoptions_create)();
    if (!pass)
        return ferry__err(FERRY_ENOMEM, "%s: " LSM_NAME ": out of memory", d->base.path);
    LSM(readoptions_set_snapshot)(pass, d->snap);
    LSM(readoptions_set_verify_checksums)(pass, o && !o->verify ? 0 : 1);
    LSM(readoptions_set_fill_cache)(pass, 0);
    lsm_iterator_t *it = LSM(create_iterator)(d->db, pass);
    int rc = 0;
    for (LSM(iter_seek_to_first)(it); rc == 0 && LSM(iter_valid)(it); LSM(iter_next)(it)) {
        size_t kl;
        const char *k = LSM(iter_key)(it, &kl);
        if ((rc = ferry__kv_keys_add(&d->keys, d->base.path, k, kl)) == 0)
            rc = LSM_PASS_ENTRY(d, it);
    }
    char *err = NULL;
    LSM(iter_get_error)(it, &err);
    LSM(iter_destroy)(it);
    LSM(readoptions_destroy)(pass);
    if (rc == 0 && !err)
        LSM_PASS_END(d);
    if (rc == 0 && err)
        return lib_err(d->base.path, "reading the keys", err);
    LSM(free)(err);
    return rc;
}

static uint64_t lsm_count(const ferry__kv *kv)
{
    return ((const lsm *)kv)->keys.n;
}

static size_t lsm_longest_key(const ferry__kv *kv)
{
    return ((const lsm *)kv)->keys.longest;
}

static void lsm_key(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen)
{
    ferry__kv_keys_get(&((const lsm *)kv)->keys, i, k, klen);
}

/* "entry 7 (key \"00000007\")", for messages, into what[160]. */
static const char *entry_what(const lsm *d, uint64_t i, char *what)
{
    const uint8_t *k;
    size_t kl;
    char key[96];
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    snprintf(what, 160, "entry %llu (key \"%s\")", (unsigned long long)i,
             ferry__lmdb_key_repr(key, sizeof key, k, kl));
    return what;
}

static int entry_err(const lsm *d, uint64_t i, char *err)
{
    char what[160];
    entry_what(d, i, what);
    if (!err)
        return ferry__err(FERRY_ECORRUPT, "%s: %s: " LSM_NAME ": the key is gone from the snapshot",
                          d->base.path, what);
    return lib_err(d->base.path, what, err);
}

static int lsm_iter_open(ferry__kv *kv, uint64_t first, ferry__kv_iter **out)
{
    lsm *d = (lsm *)kv;
    if (LSM_ABANDONED(d))
        return ferry__err(FERRY_EIO,
                          "%s: " LSM_NAME ": not read in key order: a table file was cut short "
                          "while the database was read, and it is abandoned",
                          d->base.path);
    lsm_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, LSM_NAME ": out of memory");
    it->db = d;
    it->it = LSM(create_iterator)(d->db, d->ro);
    it->at = first;
    it->fresh = true;
    if (first < d->keys.n) {
        const uint8_t *k;
        size_t kl;
        ferry__kv_keys_get(&d->keys, first, &k, &kl);
        LSM(iter_seek)(it->it, (const char *)k, kl);
    }
    *out = it;
    return 0;
}

static int lsm_iter_next(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                         const void **v, size_t *vlen)
{
    uint64_t n = it->db->keys.n;
    uint64_t steps = (it->fresh ? 0 : 1) + skip;
    if (it->at >= n || steps >= n - it->at) {
        it->at = n;
        return FERRY_END;
    }
    for (uint64_t s = 0; s < steps && LSM(iter_valid)(it->it); s++)
        LSM(iter_next)(it->it);
    it->at += steps;
    it->fresh = false;
    if (it->at >= n || !LSM(iter_valid)(it->it)) {
        char *err = NULL;
        LSM(iter_get_error)(it->it, &err);
        if (err)
            return lib_err(it->db->base.path, "reading in key order", err);
        if (it->at < n)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: " LSM_NAME ": entry %llu is gone from the snapshot",
                              it->db->base.path, (unsigned long long)it->at);
        return FERRY_END;
    }
    *k = LSM(iter_key)(it->it, klen);
    *v = LSM(iter_value)(it->it, vlen);
    return 0;
}

static void lsm_iter_close(ferry__kv_iter *it)
{
    if (!it)
        return;
    LSM(iter_destroy)(it->it);
    ferry__free(it);
}

/* ---- writing ---- */

static void writer_free(lsm_writer *w)
{
    if (w->batch)
        LSM(writebatch_destroy)(w->batch);
    if (w->wo)
        LSM(writeoptions_destroy)(w->wo);
    if (w->db)
        LSM(close)(w->db);
    if (w->opts)
        LSM(options_destroy)(w->opts);
    ferry__free(w);
}

static int lsm_writer_open(ferry__kv_writer **out, const char *path)
{
    *out = NULL;
    lsm_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, LSM_NAME ": out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    char *err = NULL;
    w->opts = LSM(options_create)();
    w->wo = LSM(writeoptions_create)();
    w->batch = LSM(writebatch_create)();
    if (!w->opts || !w->wo || !w->batch) {
        writer_free(w);
        return ferry__err(FERRY_ENOMEM, "%s: " LSM_NAME ": out of memory", path);
    }
    LSM(options_set_create_if_missing)(w->opts, 1);
    LSM(options_set_compression)(w->opts, LSM(snappy_compression));
    LSM(writeoptions_set_sync)(w->wo, 1);
    w->db = LSM(open)(w->opts, path, &err);
    if (!w->db) {
        writer_free(w);
        return lib_err(path, NULL, err);
    }
    *out = w;
    return 0;
}

static int flush(lsm_writer *w)
{
    char *err = NULL;
    LSM(write)(w->db, w->wo, w->batch, &err);
    LSM(writebatch_clear)(w->batch);
    w->held = 0;
    return err ? lib_err(w->path, "writing", err) : 0;
}

/* A transaction is one write batch, so that a commit is all or nothing: it holds
 * up to BATCH_MAX bytes (or one larger entry), and a put past that is refused,
 * the puts before it kept, for the caller to commit and begin another. */
static int lsm_put(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen)
{
    size_t need = klen + vlen + 16;
    if (w->held && need > BATCH_MAX - w->held)
        return ferry__err(FERRY_ERANGE,
                          "%s: " LSM_NAME ": a transaction holds up to %zu MiB in one write "
                          "batch (%zu bytes held, this entry %zu): commit it and begin another",
                          w->path, BATCH_MAX >> 20, w->held, need);
    LSM(writebatch_put)(w->batch, k, klen, v, vlen);
    w->held += need;
    return 0;
}

static int lsm_commit(ferry__kv_writer *w)
{
    int rc = flush(w);
    writer_free(w);
    return rc;
}

static void lsm_abort(ferry__kv_writer *w)
{
    if (w)
        writer_free(w);
}

const ferry__kv_ops LSM_OPS = {
    .name = LSM_NAME,
    .open = lsm_open,
    .close = lsm_close,
    .count = lsm_count,
    .longest_key = lsm_longest_key,
    .key = lsm_key,
    .get = lsm_get,
    .in_place = LSM_IN_PLACE,
    .iter_open = lsm_iter_open,
    .iter_next = lsm_iter_next,
    .iter_close = lsm_iter_close,
    .writer_open = lsm_writer_open,
    .put = lsm_put,
    .commit = lsm_commit,
    .discard = lsm_abort,
};
