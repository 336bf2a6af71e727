/*
 * A thin layer over LMDB: a read-only environment whose entries are located once
 * (for the lmdb dataset), and a writer that commits every N puts. LMDB's errors
 * keep LMDB's words, beside the path.
 */
#include "lmdb_env.h"
#include "../core/guard.h"

#include <lmdb.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define READER_MAXDBS 128
#define DEFAULT_MAP_SIZE ((uint64_t)1 << 30)
#define MIN_MAP_SIZE ((uint64_t)1 << 20)
#define MAX_MAP_SIZE ((uint64_t)1 << 46)
#define DEFAULT_COMMIT_EVERY 1000u
#define MAX_COMMIT_EVERY ((uint32_t)1 << 24)

/* A sub-database record's value is LMDB's MDB_db: pad, flags, depth, then five
 * pgno_t / mdb_size_t (size_t in LMDB 0.9). */
#define SUBDB_RECORD_SIZE (8 + 5 * sizeof(size_t))
#define SUBDB_KNOWN_FLAGS 0x7e /* REVERSEKEY DUPSORT INTEGERKEY DUPFIXED INTEGERDUP REVERSEDUP */

static int lmdb_code(int rc)
{
    switch (rc) {
    case ENOENT:
    case MDB_NOTFOUND:
        return FERRY_ENOENT;
    case ENOMEM:
        return FERRY_ENOMEM;
    case MDB_INVALID:
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
    case MDB_PANIC:
        return FERRY_ECORRUPT;
    case MDB_MAP_FULL:
    case MDB_DBS_FULL:
    case MDB_READERS_FULL:
    case MDB_TLS_FULL:
    case MDB_TXN_FULL:
    case MDB_CURSOR_FULL:
    case MDB_PAGE_FULL:
        return FERRY_EOVERFLOW;
    case MDB_MAP_RESIZED:
        return FERRY_ESTALE;
    case MDB_KEYEXIST:
    case MDB_BAD_VALSIZE:
    case EINVAL:
        return FERRY_EINVAL;
    default:
        return FERRY_EIO;
    }
}

/* "PATH: MDB_INVALID: File is not an LMDB file" (what: an optional middle part). */
static int lmdb_err(int rc, const char *path, const char *what)
{
    return ferry__err(lmdb_code(rc), "%s: %s%s%s", path, what ? what : "", what ? ": " : "",
                      mdb_strerror(rc));
}

/* ---- Reading ---- */

/* Is main-DB entry (k, v) a named sub-database record? A cheap look at the
 * record's shape first, then LMDB's own answer. */
static bool is_subdb(MDB_txn *txn, const MDB_val *k, const MDB_val *v, size_t last_pgno)
{
    if (v->mv_size != SUBDB_RECORD_SIZE || k->mv_size == 0 || k->mv_size > 511 ||
        memchr(k->mv_data, 0, k->mv_size))
        return false;
    uint16_t flags, depth;
    size_t root;
    memcpy(&flags, (const uint8_t *)v->mv_data + 4, 2);
    memcpy(&depth, (const uint8_t *)v->mv_data + 6, 2);
    memcpy(&root, (const uint8_t *)v->mv_data + 8 + 4 * sizeof(size_t), sizeof root);
    if ((flags & ~SUBDB_KNOWN_FLAGS) || depth > 64 ||
        (depth == 0 ? root != (size_t)-1 : root > last_pgno))
        return false;
    char name[512];
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = 0;
    MDB_dbi sub;
    if (mdb_dbi_open(txn, name, 0, &sub) != 0)
        return false;
    mdb_dbi_close(mdb_txn_env(txn), sub);
    return true;
}

/* The names of the main DB's sub-databases, comma-separated (cut to fit). */
static int list_subdbs(MDB_txn *txn, size_t last_pgno, char *buf, size_t cap)
{
    MDB_dbi main_dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    int count = 0;
    size_t o = 0;
    buf[0] = 0;
    if (mdb_dbi_open(txn, NULL, 0, &main_dbi) != 0 || mdb_cursor_open(txn, main_dbi, &cur) != 0)
        return 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!is_subdb(txn, &k, &v, last_pgno))
            continue;
        char name[80];
        ferry__lmdb_key_repr(name, sizeof name, k.mv_data, k.mv_size);
        int w = snprintf(buf + o, cap - o, "%s%s", count ? ", " : "", name);
        if (w < 0 || (size_t)w >= cap - o) {
            if (cap - o > 0)
                snprintf(buf + o, cap - o, "%s", count ? ", ..." : "...");
            count++;
            break;
        }
        o += (size_t)w;
        count++;
    }
    mdb_cursor_close(cur);
    return count;
}

/* The part of the map backed by the file: [*lo, *hi). LMDB does not say where its
 * map is, so look up the mapping that holds a pointer LMDB returned (Linux's
 * /proc/self/maps). False when it cannot be told; then only the file-length check
 * guards the entries. */
static bool map_range(const void *inside, const struct stat *st, uint64_t mapsize, uintptr_t *lo,
                      uintptr_t *hi)
{
    ferry__maps m;
    ferry__mapping x;
    bool found = false;
    uintptr_t p = (uintptr_t)inside;
    if (!ferry__maps_open(&m))
        return false;
    while (ferry__maps_next(&m, &x)) {
        if (p < x.from || p >= x.to || x.ino != (uint64_t)st->st_ino || x.off > x.from)
            continue;
        uint64_t backed = (uint64_t)st->st_size < mapsize ? (uint64_t)st->st_size : mapsize;
        *lo = (uintptr_t)(x.from - x.off);
        *hi = *lo + (uintptr_t)backed;
        found = *hi > *lo;
        break;
    }
    ferry__maps_close(&m);
    return found;
}

static bool within(const void *p, size_t n, uintptr_t lo, uintptr_t hi)
{
    uintptr_t a = (uintptr_t)p;
    return a >= lo && a <= hi && n <= hi - a;
}

void ferry__lmdb_reader_free(ferry__lmdb_reader *r)
{
    if (!r)
        return;
    if (r->txn)
        mdb_txn_abort(r->txn);
    if (r->env)
        mdb_env_close(r->env);
    ferry__free(r->e);
    ferry__free(r);
}

/* Everything that reads liblmdb's map of the file: the snapshot, the sub-database
 * and the entries. *curp is the open cursor, for the caller to close. */
__attribute__((noinline)) static int walk(ferry__lmdb_reader *r, const char *db,
                                          ferry__lmdb_checked *ckp, MDB_cursor *volatile *curp)
{
    int rc = 0, mrc;
    const char *path = r->path, *file = r->file;
    ferry__lmdb_checked ck = *ckp;
    MDB_cursor *cur = NULL;
    int fd;
    MDB_envinfo info;
    MDB_stat ms;
    struct stat fst;
    if ((mrc = mdb_env_get_fd(r->env, &fd)) != 0 || (mrc = mdb_env_info(r->env, &info)) != 0) {
        rc = lmdb_err(mrc, path, NULL);
        goto cleanup;
    }
    if (fstat(fd, &fst) != 0)
        FERRY_FAIL(FERRY_EIO, "%s: %s", path, strerror(errno));
    if ((mrc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &r->txn)) != 0) {
        r->txn = NULL;
        rc = lmdb_err(mrc, path, NULL);
        goto cleanup;
    }
    /* A writer (beside a reader with the lock) may have committed since the check:
     * check the snapshot this transaction took, which its reader slot keeps. */
    for (int tries = 0; (uint64_t)mdb_txn_id(r->txn) != ck.txnid; tries++) {
        rc = ferry__lmdb_check(file, path, db, (uint64_t)mdb_txn_id(r->txn), &ck);
        if (rc == FERRY_ESTALE && tries < 3) {
            mdb_txn_reset(r->txn);
            if ((mrc = mdb_txn_renew(r->txn)) != 0) {
                rc = lmdb_err(mrc, path, NULL);
                goto cleanup;
            }
            continue;
        }
        if (rc < 0)
            goto cleanup;
    }
    info.me_last_pgno = ck.last_pg;
    char names[256];
    MDB_dbi dbi;
    if ((mrc = mdb_dbi_open(r->txn, db, 0, &dbi)) != 0) {
        if (db && (mrc == MDB_NOTFOUND || mrc == MDB_INCOMPATIBLE)) {
            int k = list_subdbs(r->txn, info.me_last_pgno, names, sizeof names);
            FERRY_FAIL(mrc == MDB_NOTFOUND ? FERRY_ENOENT : FERRY_EINVAL,
                       "%s: %s \"%.64s\" (sub-databases: %s)", path,
                       mrc == MDB_NOTFOUND ? "no sub-database" : "not a sub-database: the key", db,
                       k ? names : "none");
        }
        rc = lmdb_err(mrc, path, db ? db : NULL);
        goto cleanup;
    }
    if ((mrc = mdb_stat(r->txn, dbi, &ms)) == 0 && (mrc = mdb_cursor_open(r->txn, dbi, &cur)) == 0)
        *curp = cur;
    if (mrc != 0) {
        rc = lmdb_err(mrc, path, NULL);
        goto cleanup;
    }
    /* The entry count sizes the array, within what the file could hold (a node
     * is at least 8 bytes), so that a damaged count cannot ask for the moon. */
    uint64_t cap = ms.ms_entries, limit = (uint64_t)fst.st_size / 8 + 1;
    cap = cap < limit ? cap : limit;
    cap = cap ? cap : 1;
    if (cap > SIZE_MAX / sizeof *r->e || !(r->e = ferry__malloc((size_t)cap * sizeof *r->e)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for %llu entries", path,
                   (unsigned long long)cap);
    uint64_t subdbs = 0;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (r->n == cap) {
            ferry__lmdb_entry *grown = NULL;
            if (cap <= SIZE_MAX / 2 / sizeof *r->e)
                grown = ferry__realloc(r->e, (size_t)cap * 2 * sizeof *r->e);
            if (!grown)
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for %llu entries", path,
                           (unsigned long long)cap * 2);
            r->e = grown;
            cap *= 2;
        }
        r->e[r->n] = (ferry__lmdb_entry){k.mv_data, v.mv_data, k.mv_size, v.mv_size};
        if (k.mv_size > r->max_klen)
            r->max_klen = k.mv_size;
        if (!db && v.mv_size == SUBDB_RECORD_SIZE)
            subdbs++; /* a candidate: checked once the walk is over */
        r->n++;
    }
    if (mrc != MDB_NOTFOUND) {
        char what[64];
        snprintf(what, sizeof what, "entry %llu", (unsigned long long)r->n);
        rc = lmdb_err(mrc, path, what);
        goto cleanup;
    }
    *curp = NULL;
    mdb_cursor_close(cur);
    cur = NULL;
    if (subdbs) {
        int found = list_subdbs(r->txn, info.me_last_pgno, names, sizeof names);
        if (found)
            FERRY_FAIL(FERRY_EINVAL,
                       "%s: the main database holds %d named sub-database%s (%s), not values: "
                       "open one with db=NAME",
                       path, found, found == 1 ? "" : "s", names);
    }
    uintptr_t lo, hi;
    if (r->n && map_range(r->e[0].key, &fst, info.me_mapsize, &lo, &hi)) {
        for (uint64_t i = 0; i < r->n; i++) {
            const ferry__lmdb_entry *e = &r->e[i];
            if (!within(e->key, e->klen, lo, hi) || !within(e->val, e->vlen, lo, hi)) {
                char key[80];
                ferry__lmdb_key_repr(key, sizeof key, e->key,
                                     within(e->key, e->klen, lo, hi) ? e->klen : 0);
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: entry %llu (key \"%s\"): its %s of %zu bytes lies outside the "
                           "file's %llu bytes",
                           path, (unsigned long long)i, key,
                           within(e->key, e->klen, lo, hi) ? "value" : "key",
                           within(e->key, e->klen, lo, hi) ? e->vlen : e->klen,
                           (unsigned long long)fst.st_size);
            }
        }
    }
    *ckp = ck;
    return 0;
cleanup:
    *ckp = ck;
    return rc;
}

/* The walk, guarded: liblmdb reads the map, which a file cut short under the
 * reader would turn into a SIGBUS. */
static int walk_guarded(ferry__lmdb_reader *r, const char *db, ferry__lmdb_checked *ck)
{
    MDB_cursor *volatile cur = NULL;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0)) {
        if (cur)
            mdb_cursor_close(cur);
        return ferry__guard_err(g.addr, r->file, NULL, "reading the database's pages");
    }
    int rc = walk(r, db, ck, &cur);
    ferry__guard_pop(&g);
    if (cur)
        mdb_cursor_close(cur);
    return rc;
}

int ferry__lmdb_reader_open(ferry__lmdb_reader **out, const char *path, const char *db, int lock)
{
    int rc = 0, mrc;
    *out = NULL;
    if (!path)
        return ferry__err(FERRY_EINVAL, "lmdb: path is NULL");
    ferry__lmdb_reader *r = ferry__calloc(1, sizeof *r);
    if (!r)
        return ferry__err(FERRY_ENOMEM, "lmdb: out of memory");
    snprintf(r->path, sizeof r->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        FERRY_FAIL(errno == ENOENT ? FERRY_ENOENT : FERRY_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        FERRY_FAIL(FERRY_EINVAL, "%s: not a file or a directory", path);
    /* Reads never write: no lock file unless asked, no per-thread reader slot. */
    unsigned flags =
        MDB_RDONLY | MDB_NOTLS | (lock ? 0 : MDB_NOLOCK) | (S_ISREG(st.st_mode) ? MDB_NOSUBDIR : 0);
    /* liblmdb trusts its file: check what it will walk before it maps it. */
    snprintf(r->file, sizeof r->file, "%s%s", path, S_ISREG(st.st_mode) ? "" : "/data.mdb");
    ferry__lmdb_checked ck;
    FERRY_TRY(ferry__guard_install());
    FERRY_TRY(ferry__lmdb_check(r->file, path, db, FERRY__LMDB_NEWEST, &ck));
    if ((mrc = mdb_env_create(&r->env)) != 0) {
        r->env = NULL;
        FERRY_FAIL(lmdb_code(mrc), "%s: %s", path, mdb_strerror(mrc));
    }
    if ((mrc = mdb_env_set_maxdbs(r->env, READER_MAXDBS)) != 0 ||
        (mrc = mdb_env_open(r->env, path, flags, 0644)) != 0) {
        rc = lmdb_err(mrc, path, NULL);
        goto cleanup;
    }
    FERRY_TRY(walk_guarded(r, db, &ck));
    *out = r;
    return 0;
cleanup:
    ferry__lmdb_reader_free(r);
    return rc;
}

/* ---- Writing ---- */

struct ferry_lmdb_writer {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned put_flags;
    uint32_t every;
    int maxkey;
    uint64_t pending, committed;
    char path[512];
};

void ferry_lmdb_writer_opts_default(ferry_lmdb_writer_opts *o)
{
    memset(o, 0, sizeof *o);
    o->map_size = DEFAULT_MAP_SIZE;
    o->commit_every = DEFAULT_COMMIT_EVERY;
}

void ferry_lmdb_writer_abort(ferry_lmdb_writer *w)
{
    if (!w)
        return;
    if (w->txn)
        mdb_txn_abort(w->txn);
    w->txn = NULL;
    w->pending = 0;
}

void ferry_lmdb_writer_free(ferry_lmdb_writer *w)
{
    if (!w)
        return;
    ferry_lmdb_writer_abort(w);
    if (w->env)
        mdb_env_close(w->env);
    ferry__free(w);
}

int ferry_lmdb_writer_open(ferry_lmdb_writer **out, const ferry_lmdb_writer_opts *o)
{
    int rc = 0, mrc;
    *out = NULL;
    if (!o || !o->path)
        return ferry__err(FERRY_EINVAL, "lmdb writer: path is NULL");
    uint64_t map_size = o->map_size ? o->map_size : DEFAULT_MAP_SIZE;
    if (map_size < MIN_MAP_SIZE || map_size > MAX_MAP_SIZE)
        return ferry__err(FERRY_EINVAL, "lmdb writer: map_size %llu is outside [%llu, %llu]",
                          (unsigned long long)map_size, (unsigned long long)MIN_MAP_SIZE,
                          (unsigned long long)MAX_MAP_SIZE);
    map_size = (map_size + 0xffff) & ~(uint64_t)0xffff;
    uint32_t every = o->commit_every ? o->commit_every : DEFAULT_COMMIT_EVERY;
    if (every > MAX_COMMIT_EVERY)
        return ferry__err(FERRY_EINVAL, "lmdb writer: commit_every %u is outside [1, %u]", every,
                          MAX_COMMIT_EVERY);
    ferry_lmdb_writer *w = ferry__calloc(1, sizeof *w);
    if (!w)
        return ferry__err(FERRY_ENOMEM, "lmdb writer: out of memory");
    snprintf(w->path, sizeof w->path, "%s", o->path);
    w->every = every;
    w->put_flags = o->append ? MDB_APPEND : 0;
    if (!o->no_subdir && mkdir(o->path, 0775) != 0 && errno != EEXIST)
        FERRY_FAIL(FERRY_EIO, "%s: cannot make the directory: %s", o->path, strerror(errno));
    if ((mrc = mdb_env_create(&w->env)) != 0) {
        w->env = NULL;
        FERRY_FAIL(lmdb_code(mrc), "%s: %s", o->path, mdb_strerror(mrc));
    }
    if ((mrc = mdb_env_set_maxdbs(w->env, o->db ? 16 : 0)) != 0 ||
        (mrc = mdb_env_open(w->env, o->path, o->no_subdir ? MDB_NOSUBDIR : 0, 0664)) != 0) {
        rc = lmdb_err(mrc, o->path, NULL);
        goto cleanup;
    }
    /* Opened with the database's own map size (or LMDB's default for a new one):
     * grow it to what was asked, never shrink it. */
    MDB_envinfo info;
    if ((mrc = mdb_env_info(w->env, &info)) != 0 ||
        (info.me_mapsize < map_size && (mrc = mdb_env_set_mapsize(w->env, map_size)) != 0)) {
        rc = lmdb_err(mrc, o->path, "map size");
        goto cleanup;
    }
    w->maxkey = mdb_env_get_maxkeysize(w->env);
    /* Open the database in a transaction of its own, so that the handle outlives
     * any later abort. */
    if ((mrc = mdb_txn_begin(w->env, NULL, 0, &w->txn)) != 0) {
        w->txn = NULL;
        rc = lmdb_err(mrc, o->path, NULL);
        goto cleanup;
    }
    if ((mrc = mdb_dbi_open(w->txn, o->db, o->db ? MDB_CREATE : 0, &w->dbi)) != 0) {
        rc = lmdb_err(mrc, o->path, o->db);
        goto cleanup;
    }
    mrc = mdb_txn_commit(w->txn);
    w->txn = NULL;
    if (mrc != 0) {
        rc = lmdb_err(mrc, o->path, NULL);
        goto cleanup;
    }
    *out = w;
    return 0;
cleanup:
    ferry_lmdb_writer_free(w);
    return rc;
}

int ferry_lmdb_writer_commit(ferry_lmdb_writer *w)
{
    if (!w)
        return ferry__err(FERRY_EINVAL, "lmdb writer: w is NULL");
    if (!w->txn)
        return 0;
    int mrc = mdb_txn_commit(w->txn);
    uint64_t n = w->pending;
    w->txn = NULL; /* freed by LMDB whether the commit worked or not */
    w->pending = 0;
    if (mrc != 0) {
        char what[96];
        snprintf(what, sizeof what, "commit of %llu puts (dropped)", (unsigned long long)n);
        return lmdb_err(mrc, w->path, what);
    }
    w->committed += n;
    return 0;
}

int ferry_lmdb_writer_put(ferry_lmdb_writer *w, const void *key, size_t klen, const void *val,
                          size_t vlen)
{
    if (!w || (!key && klen) || (!val && vlen))
        return ferry__err(FERRY_EINVAL, "lmdb writer: NULL writer, key or value");
    if (klen == 0 || klen > (size_t)w->maxkey)
        return ferry__err(FERRY_EINVAL, "%s: a key of %zu bytes is outside LMDB's [1, %d]", w->path,
                          klen, w->maxkey);
    int mrc;
    if (!w->txn && (mrc = mdb_txn_begin(w->env, NULL, 0, &w->txn)) != 0) {
        w->txn = NULL;
        return lmdb_err(mrc, w->path, NULL);
    }
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    mrc = mdb_put(w->txn, w->dbi, &k, &v, w->put_flags);
    if (mrc == MDB_KEYEXIST) { /* only with MDB_APPEND; the transaction is intact */
        char repr[80];
        return ferry__err(FERRY_EINVAL, "%s: key \"%s\" is not after the previous key (append)",
                          w->path, ferry__lmdb_key_repr(repr, sizeof repr, key, klen));
    }
    if (mrc != 0) {
        char what[128];
        snprintf(what, sizeof what,
                 "put %llu (%zu bytes; the %llu puts since the last commit "
                 "were dropped)",
                 (unsigned long long)(w->committed + w->pending), vlen,
                 (unsigned long long)w->pending);
        ferry_lmdb_writer_abort(w);
        return lmdb_err(mrc, w->path, what);
    }
    if (++w->pending >= w->every)
        return ferry_lmdb_writer_commit(w);
    return 0;
}

uint64_t ferry_lmdb_writer_committed(const ferry_lmdb_writer *w)
{
    return w ? w->committed : 0;
}

uint64_t ferry_lmdb_writer_pending(const ferry_lmdb_writer *w)
{
    return w ? w->pending : 0;
}
