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
 * (Debian's LevelDB maps up to 1000 table files a process), is lent from that
 * mapping, where the pass at open meets it. The pass notes its place in the
 * table file (places.h: ferry maps the table files itself, and keeps a place
 * where its mapping holds the same bytes), and a read copies the value from
 * ferry's own mapping, under the guard, with no lookup. Nothing of LevelDB's
 * need outlive the pass for that: table files are never rewritten (LevelDB
 * writes new ones, and a file it deletes stays readable through a mapping), and
 * the LOCK keeps other processes out. The others (a compressed block, inflated
 * into the library's memory; a table read with pread) are looked up. A table
 * cut short under a read in place is an error naming the file, also where its
 * last page reads as zeros past the new end; LevelDB was not reading, so the
 * database is not abandoned. in_place=0 looks up every read.
 */
#include "kv.h"
#include "lmdb_env.h"
#include "places.h"
#include "../core/guard.h"

#include <leveldb/c.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define POOL 64

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
    /* Reads in place (above): the places of nplaced values, or NULL */
    ferry__places *places;
    uint64_t nplaced;
} lsm;

static int note_place(lsm *d, leveldb_iterator_t *it);
static void pass_end(lsm *d);
static uint64_t lsm_in_place(const ferry__kv *kv);

#define LSM(name) leveldb_##name
#define LSM_NAME "leveldb"
#define LSM_OPS ferry__leveldb_ops
#define LSM_ABANDONED(d) atomic_load(&(d)->abandoned)
#define LSM_PASS_ENTRY(d, it) note_place(d, it)
#define LSM_PASS_END(d) pass_end(d)
#define LSM_IN_PLACE lsm_in_place
#include "lsm_env.h"

static void lsm_close(ferry__kv *kv)
{
    lsm *d = (lsm *)kv;
    if (!d)
        return;
    ferry__places_free(d->places);
    if (atomic_load(&d->abandoned)) {
        ferry__kv_keys_free(&d->keys);
        ferry__free(d);
        return;
    }
    for (int k = 0; k < POOL; k++) {
        leveldb_iterator_t *it = atomic_load(&d->idle[k].it);
        if (it)
            leveldb_iter_destroy(it);
    }
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
    ferry__maps m;
    ferry__mapping x;
    bool found = false;
    if (!ferry__maps_open(&m))
        return false;
    while (!found && ferry__maps_next(&m, &x))
        if (addr >= x.from && addr < x.to && x.path[0] == '/' && x.off <= x.from) {
            snprintf(path, cap, "%s", x.path);
            *base = (uintptr_t)(x.from - x.off);
            found = true;
        }
    ferry__maps_close(&m);
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
    char what[160];
    return cut_short(d, addr, entry_what(d, i, what));
}

static bool table_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && (!strcmp(name + n - 4, ".ldb") || !strcmp(name + n - 4, ".sst"));
}

/* The pass at open, on entry keys.n - 1: its value's place, in room left of
 * index_max by the key index. */
static int note_place(lsm *d, leveldb_iterator_t *it)
{
    if (!d->places)
        return 0;
    uint64_t max = d->keys.max ? d->keys.max : FERRY__KV_INDEX_MAX;
    uint64_t keys = (uint64_t)d->keys.used + 8 * (d->keys.n + 2);
    size_t vl = 0;
    const char *v = leveldb_iter_value(it, &vl);
    ferry__places_note(d->places, v, vl, max > keys ? max - keys : 0);
    return 0;
}

/* After a pass that read every entry: the places that check are kept. */
static void pass_end(lsm *d)
{
    if (d->places && d->places->n == d->keys.n)
        d->nplaced = ferry__places_finish(d->places);
    if (!d->nplaced) {
        ferry__places_free(d->places);
        d->places = NULL;
    }
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
    if (o && o->in_place)
        d->places = ferry__places_new(path, table_name); /* NULL: every read a lookup */
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

/* A read in place cut short at addr: the error names the table file (LevelDB
 * was not reading: the database stays open). */
static int in_place_cut_short(const lsm *d, uint64_t i, uintptr_t addr)
{
    char what[160];
    const void *base = NULL;
    const char *file = ferry__places_file(d->places, addr, &base);
    return ferry__guard_err(addr, file ? file : d->base.path, base, "%s: leveldb",
                            entry_what(d, i, what));
}

/* Entry i's value (v, vl) from ferry's mapping of its table, given to fn (which
 * copies it out) under a guard; then whether the file still holds it all (past
 * a new end, its last page reads as zeros): if not, the cut is the error, not
 * what was read nor what fn made of it. */
__attribute__((noinline)) static int read_in_place(const lsm *d, uint64_t i, const uint8_t *v,
                                                   size_t vl, ferry__kv_fn *fn, void *arg)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return in_place_cut_short(d, i, g.addr);
    int rc = fn(arg, v, vl);
    bool whole = ferry__places_intact(d->places, i);
    ferry__guard_pop(&g);
    return whole ? rc : in_place_cut_short(d, i, (uintptr_t)(v + vl));
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
    size_t vl;
    const uint8_t *v = ferry__places_get(d->places, i, &vl);
    if (v)
        return read_in_place(d, i, v, vl, fn, arg);
    leveldb_iterator_t *it = take_iter(d);
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return entry_cut_short(d, i, g.addr); /* it is left to LevelDB, as it was */
    int rc = lookup(d, it, i, fn, arg);
    ferry__guard_pop(&g);
    return rc;
}
