/*
 * The key/value stores ferry reads and writes through a library or a framing of
 * its own: Caffe2's minidb (minidb.c), LevelDB (leveldb_env.c) and RocksDB
 * (rocksdb_env.c; what it shares with LevelDB, whose C API it mirrors, is
 * written once in lsm_env.h), behind one table of operations, so that the DB
 * interface (datasets/db.c) and the dataset over them (datasets/kv_dataset.c)
 * treat them alike. Shared with the datasets layer, as lmdb_env.h is.
 *
 * A store opened for reading has a fixed number of entries, in its order (minidb:
 * the file's; LevelDB and RocksDB: key order, as of a snapshot taken at open),
 * located once at open: entry i is one lookup. Reads (key, get) are safe from any
 * number of threads; an iterator belongs to one thread.
 */
#ifndef FERRY_KV_H
#define FERRY_KV_H

#include "../core/internal.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ferry__kv ferry__kv;
typedef struct ferry__kv_iter ferry__kv_iter;
typedef struct ferry__kv_writer ferry__kv_writer;

#define FERRY__KV_INDEX_MAX ((uint64_t)1 << 30) /* index_max's default */

typedef struct ferry__kv_opts {
    uint64_t index_max; /* bytes the entry index may take (keys, offsets); 0 = 1 GiB */
    int verify;         /* LevelDB/RocksDB: check every block's checksum in the pass at
                         * open that indexes the keys (reads then trust it) */
    /* minidb: the saved index of entry offsets (NULL: FILE.fidx when there is one;
     * without one the file is scanned at open), and whether to write a missing or
     * stale one at open */
    const char *index;
    int build_index;
    /* LevelDB: 1 reads a value that LevelDB lent from its mapping of a table file
     * in place, from ferry's own mapping of that file where the pass at open
     * found it, with no lookup; 0: every read a lookup */
    int in_place;
} ferry__kv_opts;

/* An entry's value, lent to fn for the time of the call. */
typedef int ferry__kv_fn(void *arg, const uint8_t *v, size_t vlen);

typedef struct ferry__kv_ops {
    const char *name;
    /* 1: values are read from a mapping of the file (get's pointer is into it),
     * so a reader copies them out under a guard (core/guard.h) */
    int mapped;
    /* Opens `path` read-only and locates every entry. Errors name the path and,
     * from a library, keep its words ("leveldb: Corruption: ..."). */
    int (*open)(ferry__kv **out, const char *path, const ferry__kv_opts *o);
    void (*close)(ferry__kv *kv);
    uint64_t (*count)(const ferry__kv *kv);
    /* How many entries get reads in place (their values read where the library
     * mapped them, located at open), the others being looked up; NULL: none. */
    uint64_t (*in_place)(const ferry__kv *kv);
    /* The largest value's length when the store knows it without reading the
     * values (minidb), else 0. */
    uint64_t (*largest)(const ferry__kv *kv);
    /* The longest key's length. */
    size_t (*longest_key)(const ferry__kv *kv);
    /* Entry i's key (i < count), valid until close. */
    void (*key)(const ferry__kv *kv, uint64_t i, const uint8_t **k, size_t *klen);
    /* Calls fn with entry i's value; returns fn's result or the read's error
     * (FERRY_ECORRUPT, FERRY_EIO naming the path, the entry and its key). */
    int (*get)(const ferry__kv *kv, uint64_t i, ferry__kv_fn *fn, void *arg);
    /* The entries from `first` on, in order: next skips `skip` entries, then gives
     * one (pointers valid until the next call), or FERRY_END. */
    int (*iter_open)(ferry__kv *kv, uint64_t first, ferry__kv_iter **out);
    int (*iter_next)(ferry__kv_iter *it, uint64_t skip, const void **k, size_t *klen,
                     const void **v, size_t *vlen);
    void (*iter_close)(ferry__kv_iter *it);
    /* Writing: a transaction made visible by commit (durable when it returns 0);
     * commit and discard (which drops what was put) free the writer. */
    int (*writer_open)(ferry__kv_writer **out, const char *path);
    int (*put)(ferry__kv_writer *w, const void *k, size_t klen, const void *v, size_t vlen);
    int (*commit)(ferry__kv_writer *w);
    void (*discard)(ferry__kv_writer *w);
} ferry__kv_ops;

extern const ferry__kv_ops ferry__minidb_ops, ferry__leveldb_ops, ferry__rocksdb_ops;

/* The operations of a backend by name ("minidb", "leveldb", "rocksdb"), or NULL. */
const ferry__kv_ops *ferry__kv_find(const char *name);

/* The path a store was opened with, for messages (every backend's struct starts
 * with a ferry__kv_base). */
typedef struct ferry__kv_base {
    const ferry__kv_ops *ops;
    char path[512];
} ferry__kv_base;
const char *ferry__kv_path(const ferry__kv *kv);

/* A library's error string as ferry's error: "PATH: LIB: its words", the code
 * from the words' start (Corruption: FERRY_ECORRUPT; NotFound, or "does not
 * exist": FERRY_ENOENT; else FERRY_EIO). `what` is NULL or says what was read
 * ("entry 7 (key \"k\")"). */
int ferry__kv_lib_err(const char *path, const char *lib, const char *what, const char *err);

/* ---- minidb's framing, for the mapped reader and the stream ----
 * Checks the entry header h of entry i at offset `at`, with `avail` bytes of the
 * file from h on (fewer than 8: cut short): a key of 1 .. FERRY__MINIDB_KEY_MAX
 * bytes, a value length that is not negative, both inside avail. FERRY_ECORRUPT
 * naming path, the entry and its offset. */
#define FERRY__MINIDB_KEY_MAX ((uint32_t)1 << 20) /* far above any key Caffe2 writes */
int ferry__minidb_frame(const char *path, const uint8_t *h, uint64_t avail, uint64_t i, uint64_t at,
                        uint32_t *klen, uint32_t *vlen);

/* minidb: the span of the mapping holding entries [i, last] (last < count), for
 * read-ahead hints; the mapping's base and size. */
void ferry__minidb_span(const ferry__kv *kv, uint64_t i, uint64_t last, const uint8_t **p,
                        size_t *n);
void ferry__minidb_mapping(const ferry__kv *kv, const void **base, size_t *size);
/* Whether a file listed in a directory of minidb files is one: not hidden, and
 * not a saved index (*.fidx). */
bool ferry__minidb_listed(const char *name);
/* Whether the entries were located by a saved index (no scan at open: their pages
 * are read only as the entries are). */
bool ferry__minidb_indexed(const ferry__kv *kv);

/* Keys in messages: ferry__lmdb_key_repr (lmdb_env.h). */

/* ---- The key index of the library-backed stores ----
 * Every key once, in order, in one growing arena, with its offset: the index of
 * positions that makes entry i one lookup. Bounded by index_max. */
typedef struct ferry__kv_keys {
    uint8_t *arena;
    uint64_t *off; /* n + 1 offsets into arena */
    uint64_t n, cap_n;
    size_t used, cap, longest;
    uint64_t max;
} ferry__kv_keys;

/* Appends a key; FERRY_EOVERFLOW naming path and index_max when the index would
 * pass it, FERRY_ENOMEM. */
int ferry__kv_keys_add(ferry__kv_keys *ks, const char *path, const void *k, size_t klen);
void ferry__kv_keys_get(const ferry__kv_keys *ks, uint64_t i, const uint8_t **k, size_t *klen);
void ferry__kv_keys_free(ferry__kv_keys *ks);

#endif
