/*
 * ferry/db.h - one key/value interface over ferry's storage backends, after
 * Caffe2's DB / Cursor / Transaction: "records" (a directory of ferry record
 * shards whose schema is a "key" and a "value" byte field) and "lmdb" (an LMDB
 * environment). Read entries by position or with a cursor that takes every
 * num_shards-th entry (Caffe2's DBReader sharding); write through a transaction.
 *
 * Thread rules: a ferry_db opened for reading may be read (ferry_db_entry) from
 * several threads at once; a cursor or a transaction belongs to one thread.
 */
#ifndef FERRY_DB_H
#define FERRY_DB_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_db ferry_db;
typedef struct ferry_db_cursor ferry_db_cursor;
typedef struct ferry_db_txn ferry_db_txn;

enum { FERRY_DB_READ = 0, FERRY_DB_WRITE = 1 };

/* backend "records" or "lmdb"; path a directory. READ opens what is there;
 * WRITE creates (records: a new shard set replacing the directory's on commit;
 * lmdb: the environment, created or added to). */
FERRY_API int ferry_db_open(ferry_db **out, const char *backend, const char *path, int mode);
FERRY_API void ferry_db_close(ferry_db *db);

/* Entries, in the backend's order: records in write order, LMDB in key order. */
FERRY_API uint64_t ferry_db_count(const ferry_db *db);
/* Entry i's key and value, zero-copy from the backend's mapping: valid until
 * ferry_db_close. The records backend reads uncompressed shards this way (the
 * transaction writes them so); a compressed set is FERRY_ENOTSUP. */
FERRY_API int ferry_db_entry(const ferry_db *db, uint64_t i, const void **key, size_t *klen,
                             const void **value, size_t *vlen);

/* A cursor over entries shard_id, shard_id + num_shards, ... */
FERRY_API int ferry_db_cursor_open(ferry_db *db, uint64_t shard_id, uint64_t num_shards,
                                   ferry_db_cursor **out);
/* The next entry (as ferry_db_entry), or FERRY_END. */
FERRY_API int ferry_db_cursor_next(ferry_db_cursor *c, const void **key, size_t *klen,
                                   const void **value, size_t *vlen);
/* Moves to the cursor's k-th entry (entry shard_id + k * num_shards). */
FERRY_API int ferry_db_cursor_seek(ferry_db_cursor *c, uint64_t k);
FERRY_API void ferry_db_cursor_close(ferry_db_cursor *c);

/* A write transaction on a db opened with WRITE (one at a time). Keys are 1 .. 511
 * bytes (LMDB's limit, kept for both), values up to 1 GiB. Nothing is visible to
 * readers until commit (LMDB: up to 2^24 puts a transaction; more commit in parts);
 * abort (or a crash) leaves the previous state. */
FERRY_API int ferry_db_begin(ferry_db *db, ferry_db_txn **out);
FERRY_API int ferry_db_put(ferry_db_txn *t, const void *key, size_t klen, const void *value,
                           size_t vlen);
/* Makes the puts durable and visible; frees the transaction whatever the result. */
FERRY_API int ferry_db_commit(ferry_db_txn *t);
FERRY_API void ferry_db_abort(ferry_db_txn *t);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_DB_H */
