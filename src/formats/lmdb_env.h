/*
 * The read side of the LMDB environment wrapper (lmdb_env.c), and the structure
 * check (lmdb_check.c) that runs before liblmdb is let near a file. The wrapper
 * calls the check, never the other way. Shared with the lmdb dataset.
 */
#ifndef FERRY_LMDB_ENV_H
#define FERRY_LMDB_ENV_H

#include "../core/internal.h"
#include "ferry/lmdb.h"

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
    char file[528]; /* the data file: path, or path/data.mdb */
} ferry__lmdb_reader;

/* Opens `path` (an environment directory, or the data file itself) read-only,
 * the named sub-database `db` or the main DB, and walks it once. lock = 0 opens
 * with MDB_NOLOCK (nothing written beside the database). The environment's
 * structure is checked first (ferry__lmdb_check): a damaged file is an error,
 * never a fault in liblmdb. Errors name the path. */
int ferry__lmdb_reader_open(ferry__lmdb_reader **out, const char *path, const char *db, int lock);
void ferry__lmdb_reader_free(ferry__lmdb_reader *r);

/* Writes a key for a message: printable ASCII as is, other bytes as \xNN, cut to
 * fit cap (with "..."). Returns buf. (lmdb_check.c, whose messages name keys too.) */
const char *ferry__lmdb_key_repr(char *buf, size_t cap, const void *key, size_t n);

/* What ferry__lmdb_check found: the snapshot it checked. */
typedef struct ferry__lmdb_checked {
    uint64_t txnid;   /* the transaction of the meta page checked */
    uint64_t last_pg; /* its last page */
    uint32_t psize;   /* the page size */
} ferry__lmdb_checked;

#define FERRY__LMDB_NEWEST UINT64_MAX

/* Checks the structure of the LMDB data file `file` (named `name` in messages)
 * as liblmdb will walk it to read the main database, or the named sub-database
 * `db`: both meta pages, the page size and last page against the file's length,
 * then every branch and leaf page of the tree(s) read from the meta page of
 * transaction `txnid` (FERRY__LMDB_NEWEST: the newer one, as liblmdb picks):
 * page headers and numbers, node offsets and sizes inside their page, child and
 * overflow page numbers inside the file, one depth for every leaf, no page
 * reached twice (no cycles). Overflow pages themselves are not read (a large
 * database's values stay on disk). Reads with pread, so a file that shrinks
 * meanwhile is an error too. FERRY_ECORRUPT "NAME: page N: why",
 * FERRY_EINVAL for a database that ferry does not read (duplicate keys),
 * FERRY_ENOENT/FERRY_EIO for the file itself. */
int ferry__lmdb_check(const char *file, const char *name, const char *db, uint64_t txnid,
                      ferry__lmdb_checked *out);

#endif
