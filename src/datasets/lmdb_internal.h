/*
 * LMDB internals: the read side of the environment wrapper (src/formats/lmdb_env.c)
 * and the source-description entry point of the lmdb dataset.
 */
#ifndef FERRY_LMDB_INTERNAL_H
#define FERRY_LMDB_INTERNAL_H

#include "ferry/lmdb.h"
#include "dataset_internal.h"

struct MDB_env;
struct MDB_txn;

/* Where one entry's key and value lie in the map: 32 bytes on 64-bit systems. */
typedef struct ferry__lmdb_entry {
    const uint8_t *key, *val;
    size_t klen, vlen;
} ferry__lmdb_entry;

/* A database opened read-only, with one read transaction held for its life and
 * every entry's key and value located once. The entries (and the bytes they point
 * at) are read-only and valid until ferry__lmdb_reader_free: any number of
 * threads may read them at once, without LMDB calls. */
typedef struct ferry__lmdb_reader {
    struct MDB_env *env;
    struct MDB_txn *txn;
    ferry__lmdb_entry *e;
    uint64_t n;
    size_t max_klen;
    char path[512];
} ferry__lmdb_reader;

/* Opens `path` (an environment directory, or the data file itself) read-only,
 * the named sub-database `db` or the main DB, and walks it once. lock = 0 opens
 * with MDB_NOLOCK (nothing written beside the database). Errors name the path. */
int ferry__lmdb_reader_open(ferry__lmdb_reader **out, const char *path, const char *db, int lock);
void ferry__lmdb_reader_free(ferry__lmdb_reader *r);

/* Writes a key for a message: printable ASCII as is, other bytes as \xNN, cut to
 * fit cap (with "..."). Returns buf. */
const char *ferry__lmdb_key_repr(char *buf, size_t cap, const void *key, size_t n);

/* "lmdb:PATH[,db=NAME][,datum=auto|1|0][,max=N][,lock=0|1]" */
int ferry__lmdb_open_spec(ferry_dataset **out, ferry__spec *s);

#endif
