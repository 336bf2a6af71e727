/*
 * LevelDB through its C API (Debian's libleveldb): a database read as of a
 * snapshot taken at open, entry i in key order through an index of the keys
 * built by one pass at open, and written through a write batch.
 * What it shares with the other LSM store is written once, in lsm_env.h.
 *
 * LevelDB maps its table files itself, so a table cut short while it is read
 * raises SIGBUS inside the library. The pass at open and every read run under
 * a guard of their own (core/guard.h): a fault there is an error naming the
 * table file, not the end of the process. The jump leaves LevelDB's frames
 * mid-read (no lock of LevelDB's is held while it reads a mapping, but its
 * iterator and the references it took are left as they were), and LevelDB
 * cannot be closed with those outstanding: the database is abandoned. Its
 * later reads fail at once, and closing it frees ferry's part only, leaving
 * LevelDB's handle (its memory, and its LOCK until the process ends).
 *
 * Reads in place. A lookup costs more than the copy of a 4 KB value: LevelDB
 * searches the table's index block and parses the data block each time. But a
 * value in a block stored uncompressed, in a table file LevelDB has mapped
 * (Debian's maps up to 1000 table files a process), lies in that mapping, where
 * the pass at open meets it. Its place is kept, checked against the process's
 * mappings (/proc/self/maps: a table file of this database), and a read copies
 * from there, under the guard, with no lookup; the others (a compressed block,
 * inflated into the library's memory; a table read with pread) are looked up.
 * What keeps the places valid until close: the pass's iterator, kept, holds
 * the version it read, so LevelDB deletes none of its tables (and unmaps a
 * table only when it deletes it, or its table cache drops it: the cache is
 * made to hold every table, see TABLE_CACHE_FILES); the table files are never
 * written again (LevelDB writes new ones), and the database's LOCK keeps other
 * processes out. A table cut short under a read in place is the same error as
 * one met inside the library. in_place=0 looks up every read.
 */
#include "kv.h"
#include "lmdb_env.h"
#include "../core/guard.h"

#include <dirent.h>
#include <leveldb/c.h>
#include <limits.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL 64
/* Reads in place for a database of at most this many table files: LevelDB maps
 * up to 1000 a process (its mmap limit), and reads the rest with pread. */
#define IN_PLACE_TABLES 1000
/* max_open_files when reading in place: LevelDB's table cache then holds
 * 49,990 tables, 3,125 in each of its 16 shards, so that it drops (and unmaps)
 * none of a database of IN_PLACE_TABLES, nor of the tables a compaction adds,
 * however they hash. */
#define TABLE_CACHE_FILES 50000

/* One slot of the pool, alone in its cache line: threads that each keep to a
 * slot of their own do not share a line. */
typedef struct iter_slot {
    _Atomic(leveldb_iterator_t *) it;
    char pad[64 - sizeof(leveldb_iterator_t *)];
} iter_slot;

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
     * taken and given back by one atomic exchange, with no lock. A thread
     * looks first in a slot of its own (home_slot), so that an iterator, and
     * the blocks and keys it holds, stay in the caches of the core that uses
     * it rather than passing from thread to thread. */
    iter_slot idle[POOL];
    atomic_bool abandoned; /* a read was cut short inside the library */
    /* Reads in place (above): entry i's value at place[i] (place_len[i] bytes),
     * or NULL where it is looked up; nplaced of them set. pin and pin_ro: the
     * pass's iterator and read options, kept while places are. */
    bool in_place; /* asked for, and the database has few enough tables */
    const uint8_t **place;
    uint32_t *place_len;
    uint64_t place_cap, nplaced;
    leveldb_iterator_t *pin;
    leveldb_readoptions_t *pin_ro;
} lsm;

static int note_place(lsm *d, leveldb_iterator_t *it);
static bool keep_pass(lsm *d, leveldb_iterator_t *it, leveldb_readoptions_t *pass);
static uint64_t lsm_in_place(const ferry__kv *kv);

#define LSM(name) leveldb_##name
#define LSM_NAME "leveldb"
#define LSM_OPS ferry__leveldb_ops
#define LSM_ABANDONED(d) atomic_load(&(d)->abandoned)
#define LSM_PASS_ENTRY(d, it) note_place(d, it)
#define LSM_PASS_KEEP(d, it, pass) keep_pass(d, it, pass)
#define LSM_IN_PLACE lsm_in_place
#include "lsm_env.h"

static void drop_places(lsm *d)
{
    ferry__free(d->place);
    ferry__free(d->place_len);
    d->place = NULL;
    d->place_len = NULL;
    d->place_cap = d->nplaced = 0;
    d->in_place = false;
}

static void lsm_close(ferry__kv *kv)
{
    lsm *d = (lsm *)kv;
    if (!d)
        return;
    if (atomic_load(&d->abandoned)) {
        drop_places(d);
        ferry__kv_keys_free(&d->keys);
        ferry__free(d);
        return;
    }
    for (int k = 0; k < POOL; k++) {
        leveldb_iterator_t *it = atomic_load(&d->idle[k].it);
        if (it)
            leveldb_iter_destroy(it);
    }
    drop_places(d);
    if (d->pin)
        leveldb_iter_destroy(d->pin);
    if (d->pin_ro)
        leveldb_readoptions_destroy(d->pin_ro);
    close_db(d);
    if (d->cache)
        leveldb_cache_destroy(d->cache);
    ferry__kv_keys_free(&d->keys);
    ferry__free(d);
}

/* The mapped file that holds addr (Linux's /proc/self/maps): its path and
 * where it starts in memory; false when it cannot be told. */
static bool mapped_file(uintptr_t addr, char *path, size_t cap, uintptr_t *base)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[1200];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long a, b, off;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %lx %*x:%*x %*u %n", &a, &b, &off, &at) < 3 || !at ||
            addr < a || addr >= b || line[at] != '/' || off > a)
            continue;
        line[strcspn(line, "\n")] = 0;
        snprintf(path, cap, "%s", line + at);
        *base = (uintptr_t)(a - off);
        found = true;
    }
    fclose(f);
    return found;
}

/* The error of a read cut short at addr, naming the table file (else the
 * database) and `what` ("entry 7 (key ...)", "reading the keys"); the
 * database is abandoned. */
static int cut_short(lsm *d, uintptr_t addr, const char *what)
{
    atomic_store(&d->abandoned, true);
    char file[600], msg[FERRY_ERRMSG_MAX];
    uintptr_t base = 0;
    int rc = mapped_file(addr, file, sizeof file, &base)
                 ? ferry__guard_err(addr, file, (const void *)base, "%s: leveldb", what)
                 : ferry__guard_err(addr, d->base.path, NULL, "%s: leveldb: a table file", what);
    ferry__err_copy(msg);
    return ferry__err(rc,
                      "%s; the database is abandoned: LevelDB's memory and its LOCK are held "
                      "until this process ends",
                      msg);
}

static int entry_cut_short(lsm *d, uint64_t i, uintptr_t addr)
{
    const uint8_t *k;
    size_t kl;
    char key[96], what[160];
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    snprintf(what, sizeof what, "entry %llu (key \"%s\")", (unsigned long long)i,
             ferry__lmdb_key_repr(key, sizeof key, k, kl));
    return cut_short(d, addr, what);
}

static bool table_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && (!strcmp(name + n - 4, ".ldb") || !strcmp(name + n - 4, ".sst"));
}

/* Whether the database at path has at most IN_PLACE_TABLES table files. */
static bool few_tables(const char *path)
{
    DIR *dir = opendir(path);
    if (!dir)
        return false;
    unsigned n = 0;
    struct dirent *e;
    while (n <= IN_PLACE_TABLES && (e = readdir(dir)))
        n += table_name(e->d_name);
    closedir(dir);
    return n <= IN_PLACE_TABLES;
}

/* The pass at open, on entry keys.n - 1: where its value lies, in room that
 * grows with the entries within index_max (with the key index); past that, or
 * without memory, there are no reads in place. */
static int note_place(lsm *d, leveldb_iterator_t *it)
{
    if (!d->in_place)
        return 0;
    uint64_t i = d->keys.n - 1;
    if (i >= d->place_cap) {
        uint64_t c = d->place_cap ? 2 * d->place_cap : 1024;
        uint64_t max = d->keys.max ? d->keys.max : FERRY__KV_INDEX_MAX;
        uint64_t need = (uint64_t)d->keys.used + 8 * (d->keys.n + 2) +
                        c * (sizeof *d->place + sizeof *d->place_len);
        const uint8_t **p = need <= max ? ferry__realloc(d->place, c * sizeof *p) : NULL;
        if (p)
            d->place = p;
        uint32_t *len = p ? ferry__realloc(d->place_len, c * sizeof *len) : NULL;
        if (!len) {
            drop_places(d);
            return 0;
        }
        d->place_len = len;
        d->place_cap = c;
    }
    size_t vl = 0;
    const char *v = leveldb_iter_value(it, &vl);
    d->place[i] = vl <= UINT32_MAX ? (const uint8_t *)v : NULL;
    d->place_len[i] = (uint32_t)vl;
    return 0;
}

typedef struct span {
    uintptr_t from, to;
} span;

/* The mappings of this database's table files (Linux's /proc/self/maps, in
 * address order) into *out (freed by the caller); how many, 0 when none or
 * when they cannot be told. */
static size_t table_mappings(const char *path, span **out)
{
    *out = NULL;
    char dir[PATH_MAX], line[PATH_MAX + 200];
    if (!realpath(path, dir))
        return 0;
    size_t dl = strlen(dir), n = 0, cap = 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*x %*x:%*x %*u %n", &a, &b, &at) < 2 || !at)
            continue;
        char *name = line + at;
        name[strcspn(name, "\n")] = 0;
        if (strncmp(name, dir, dl) || name[dl] != '/' || strchr(name + dl + 1, '/') ||
            !table_name(name + dl + 1))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            span *g = ferry__realloc(*out, cap * sizeof *g);
            if (!g) {
                n = 0;
                break;
            }
            *out = g;
        }
        (*out)[n++] = (span){a, b};
    }
    fclose(f);
    return n;
}

/* Whether [p, p + len) lies inside one of the n mappings m (in address order). */
static bool mapped_in(const span *m, size_t n, const uint8_t *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first mapping that ends past a */
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].to <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && m[lo].from <= a && len <= m[lo].to - a;
}

/* After the pass: the places inside a mapping of a table file of this database
 * are kept, the others cleared (looked up). With any kept, the database keeps
 * the pass's iterator and read options; with none, no places. */
static bool keep_pass(lsm *d, leveldb_iterator_t *it, leveldb_readoptions_t *pass)
{
    if (!d->in_place)
        return false;
    span *m;
    size_t nm = table_mappings(d->base.path, &m);
    d->nplaced = 0;
    for (uint64_t i = 0; i < d->keys.n; i++) {
        if (d->place[i] && !mapped_in(m, nm, d->place[i], d->place_len[i]))
            d->place[i] = NULL;
        d->nplaced += d->place[i] != NULL;
    }
    ferry__free(m);
    if (!d->nplaced) {
        drop_places(d);
        return false;
    }
    d->pin = it;
    d->pin_ro = pass;
    return true;
}

static uint64_t lsm_in_place(const ferry__kv *kv)
{
    return ((const lsm *)kv)->nplaced;
}

/* index_keys under a guard of its own. */
static int index_guarded(lsm *d, const ferry__kv_opts *o)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return cut_short(d, g.addr, "reading the keys");
    int rc = index_keys(d, o);
    ferry__guard_pop(&g);
    return rc;
}

static int lsm_open(ferry__kv **out, const char *path, const ferry__kv_opts *o)
{
    *out = NULL;
    lsm *d = new_db(path, o);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "leveldb: out of memory");
    int rc = ferry__guard_install();
    char *err = NULL;
    if (rc < 0)
        goto fail;
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
    if (o && o->in_place && few_tables(path)) {
        d->in_place = true;
        leveldb_options_set_max_open_files(d->opts, TABLE_CACHE_FILES);
    }
    d->db = leveldb_open(d->opts, path, &err);
    if (!d->db) {
        rc = lib_err(path, NULL, err);
        goto fail;
    }
    if ((rc = index_guarded(d, o)) < 0)
        goto fail;
    *out = (ferry__kv *)d;
    return 0;
fail:
    lsm_close((ferry__kv *)d);
    return rc;
}

/* The calling thread's first slot of every pool: threads take slots in turn. */
static unsigned home_slot(void)
{
    static atomic_uint next;
    static _Thread_local unsigned home = POOL; /* POOL: not chosen yet */
    if (home == POOL)
        home = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % POOL;
    return home;
}

static leveldb_iterator_t *take_iter(lsm *d)
{
    unsigned h = home_slot();
    for (unsigned j = 0; j < POOL; j++) {
        _Atomic(leveldb_iterator_t *) *slot = &d->idle[(h + j) % POOL].it;
        if (!atomic_load_explicit(slot, memory_order_relaxed))
            continue;
        leveldb_iterator_t *it = atomic_exchange_explicit(slot, NULL, memory_order_acquire);
        if (it)
            return it;
    }
    return leveldb_create_iterator(d->db, d->ro);
}

static void give_iter(lsm *d, leveldb_iterator_t *it)
{
    unsigned h = home_slot();
    for (unsigned j = 0; j < POOL; j++) {
        _Atomic(leveldb_iterator_t *) *slot = &d->idle[(h + j) % POOL].it;
        leveldb_iterator_t *none = NULL;
        if (!atomic_load_explicit(slot, memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(slot, &none, it, memory_order_release,
                                                    memory_order_relaxed))
            return;
    }
    leveldb_iter_destroy(it);
}

/* Entry i's value from a lent iterator, given back after (or dropped, with
 * the error it met). */
__attribute__((noinline)) static int lookup(lsm *d, leveldb_iterator_t *it, uint64_t i,
                                            ferry__kv_fn *fn, void *arg)
{
    const uint8_t *k;
    size_t kl, vl = 0, got = 0;
    ferry__kv_keys_get(&d->keys, i, &k, &kl);
    leveldb_iter_seek(it, (const char *)k, kl);
    const char *key = leveldb_iter_valid(it) ? leveldb_iter_key(it, &got) : NULL;
    if (!key || got != kl || memcmp(key, k, kl)) {
        char *err = NULL;
        leveldb_iter_get_error(it, &err);
        int rc = entry_err(d, i, err);
        /* an iterator that met an error keeps it: not lent again */
        leveldb_iter_destroy(it);
        return rc;
    }
    const char *v = leveldb_iter_value(it, &vl);
    int rc = fn(arg, (const uint8_t *)v, vl);
    give_iter(d, it);
    return rc;
}

/* Entry i's value where the pass found it, given to fn (which copies it out)
 * under a guard: a table cut short under it is cut_short's error. */
__attribute__((noinline)) static int read_in_place(lsm *d, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return entry_cut_short(d, i, g.addr);
    int rc = fn(arg, d->place[i], d->place_len[i]);
    ferry__guard_pop(&g);
    return rc;
}

static int lsm_get(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg)
{
    lsm *d = (lsm *)kv; /* only the iterator pool changes, slot by slot, and abandoned */
    if (atomic_load_explicit(&d->abandoned, memory_order_relaxed))
        return ferry__err(FERRY_EIO,
                          "%s: entry %llu: leveldb: not read: a table file was cut short "
                          "while the database was read, and it is abandoned (its LOCK is "
                          "held until this process ends: another process can open it)",
                          d->base.path, (unsigned long long)i);
    if (d->place && d->place[i])
        return read_in_place(d, i, fn, arg);
    leveldb_iterator_t *it = take_iter(d);
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return entry_cut_short(d, i, g.addr); /* it is left to LevelDB, as it was */
    int rc = lookup(d, it, i, fn, arg);
    ferry__guard_pop(&g);
    return rc;
}
