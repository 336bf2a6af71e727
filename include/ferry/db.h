/*
 * ferry/db.h - one key/value interface over ferry's storage backends, after
 * Caffe2's DB / Cursor / Transaction:
 *  - "records": a directory of ferry record shards whose schema is a "key" and
 *    a "value" byte field;
 *  - "lmdb": an LMDB environment (ferry/lmdb.h);
 *  - "minidb": Caffe2's minidb file (ferry/caffe2.h), entries in file order;
 *  - "leveldb": a LevelDB directory (Caffe's convert_imageset --backend=leveldb,
 *    Caffe2's leveldb DB), through Debian's libleveldb, in key order;
 *  - "rocksdb": a RocksDB directory through librocksdb, in key order, where the
 *    build found the library (otherwise FERRY_ENOTSUP saying so).
 * Read entries by position or with a cursor that takes every num_shards-th entry
 * (Caffe2's DBReader sharding); write through a transaction. The same stores
 * open as datasets: "minidb:FILE", "leveldb:DIR", "rocksdb:DIR" (docs/cli.md),
 * or ferry_dataset_db below, with Caffe Datum and Caffe2 TensorProtos values
 * decoded into fields.
 *
 * Opening a LevelDB or RocksDB store for reading takes a snapshot and walks its
 * keys once: entry i is then one lookup by key (the keys are held in memory,
 * bounded by index_max), and writers in other processes (RocksDB) or later
 * commits are not seen. LevelDB opens a database for writing even to read it
 * (it takes the LOCK file and may compact its log), so one process at a time
 * opens it, and its directory must be writable; RocksDB is opened read-only.
 * Every block of the snapshot is checked against its checksum once, by the
 * walk at open (verify=0 leaves it out), and not again by the reads after it:
 * a damaged block fails the open with the library's error beside the path
 * ("caffe_leveldb: reading the keys: leveldb: Corruption: block checksum
 * mismatch: ..."); a read that meets a malformed block is the library's error
 * beside the entry and its key. A LevelDB table cut short while it is read is
 * FERRY_EIO naming the table file, and abandons the database: later reads fail,
 * and LevelDB's memory and LOCK are held until the process ends
 * (docs/changing-files.md).
 *
 * Thread rules: a ferry_db opened for reading may be read (ferry_db_entry) from
 * several threads at once; a cursor or a transaction belongs to one thread.
 */
#ifndef FERRY_DB_H
#define FERRY_DB_H

#include "core.h"

typedef struct ferry_dataset ferry_dataset; /* ferry/dataset.h */
typedef struct ferry_stream ferry_stream;   /* ferry/dataset.h */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_db ferry_db;
typedef struct ferry_db_cursor ferry_db_cursor;
typedef struct ferry_db_txn ferry_db_txn;

enum { FERRY_DB_READ = 0, FERRY_DB_WRITE = 1 };

/* backend "records", "lmdb", "minidb", "leveldb" or "rocksdb"; path a directory
 * (minidb: a file). READ opens what is there; WRITE creates (records: a new shard
 * set replacing the directory's on commit; lmdb, leveldb, rocksdb: the database,
 * created or added to; minidb: the file, created or added to, rewritten whole
 * through a temporary file renamed over it on commit). */
FERRY_API int ferry_db_open(ferry_db **out, const char *backend, const char *path, int mode);
FERRY_API void ferry_db_close(ferry_db *db);

/* Entries, in the backend's order: records and minidb in write order, LMDB,
 * LevelDB and RocksDB in key order. */
FERRY_API uint64_t ferry_db_count(const ferry_db *db);
/* Entry i's key and value, zero-copy from the backend's mapping: valid until
 * ferry_db_close. The records backend reads uncompressed shards this way (the
 * transaction writes them so); a compressed set is FERRY_ENOTSUP. LevelDB and
 * RocksDB have no mapping: the key is valid until ferry_db_close, the value is a
 * copy held for the calling thread, valid until its next ferry_db_entry call on
 * any db (or the thread's end). */
FERRY_API int ferry_db_entry(const ferry_db *db, uint64_t i, const void **key, size_t *klen,
                             const void **value, size_t *vlen);

/* A cursor over entries shard_id, shard_id + num_shards, ... */
FERRY_API int ferry_db_cursor_open(ferry_db *db, uint64_t shard_id, uint64_t num_shards,
                                   ferry_db_cursor **out);
/* The next entry (as ferry_db_entry), or FERRY_END. LevelDB and RocksDB: read in
 * key order with the library's iterator; key and value valid until the next call
 * on the cursor. */
FERRY_API int ferry_db_cursor_next(ferry_db_cursor *c, const void **key, size_t *klen,
                                   const void **value, size_t *vlen);
/* Moves to the cursor's k-th entry (entry shard_id + k * num_shards). */
FERRY_API int ferry_db_cursor_seek(ferry_db_cursor *c, uint64_t k);
FERRY_API void ferry_db_cursor_close(ferry_db_cursor *c);

/* A write transaction on a db opened with WRITE (one at a time). Keys are 1 .. 511
 * bytes (LMDB's limit, kept for all), values up to 1 GiB. Nothing is visible to
 * readers until commit (LMDB: up to 2^24 puts a transaction, LevelDB and RocksDB:
 * one write batch of up to 256 MiB held in memory, or one larger entry: a put past
 * it is FERRY_ERANGE, the puts before it kept); abort (or
 * a crash) leaves the previous state. */
FERRY_API int ferry_db_begin(ferry_db *db, ferry_db_txn **out);
FERRY_API int ferry_db_put(ferry_db_txn *t, const void *key, size_t klen, const void *value,
                           size_t vlen);
/* Makes the puts durable and visible; frees the transaction whatever the result. */
FERRY_API int ferry_db_commit(ferry_db_txn *t);
FERRY_API void ferry_db_abort(ferry_db_txn *t);

/* ---- A store as a dataset ----
 * Sample i is entry i (or, with num_shards > 1, entry shard_id + i * num_shards).
 * Its fields come from the first entry's value:
 *  - a Caffe Datum (ferry/lmdb.h): "data" (uint8 [C, H, W], or the encoded
 *    image's bytes, variable up to max_len), "label" (int64), "float_data"
 *    (float32 [N]), as the lmdb dataset gives them;
 *  - a Caffe2 TensorProtos (ferry/caffe2.h): one field a proto, named by the
 *    proto's name, else "data" (the first), "label" (the second), "tensorK":
 *    STRING as its first string's bytes (variable up to max_len: an encoded image
 *    for the image pipeline), BYTE and numbers in their dtype (caffe2.h) with the
 *    proto's dims as shape (HxWxC for Caffe2's raw images; no dims: [count], or a
 *    scalar for one value), INT32 scalars (labels) as int64;
 *  - anything else (or value RAW): "key" and "value" as bytes, the value variable
 *    up to max_len.
 * An entry that does not fit the first one's fields (another shape, a value that
 * does not decode, a longer variable value) is an error naming the store, the
 * entry and its key. get copies into the batch slot, once: minidb from its
 * mapping, LevelDB from the block a seek of a pooled iterator lends, RocksDB
 * from its pinned value. */
enum {
    FERRY_DB_VALUE_AUTO = 0, /* Datum when the first value is one with data or floats,
                              * else TensorProtos when it is one with a proto, else raw */
    FERRY_DB_VALUE_DATUM = 1,
    FERRY_DB_VALUE_TENSORPROTOS = 2,
    FERRY_DB_VALUE_RAW = 3
};

typedef struct ferry_db_dataset_opts {
    const char *backend; /* "minidb", "leveldb" or "rocksdb" */
    const char *path;    /* the file (minidb) or directory */
    int value;           /* FERRY_DB_VALUE_*, default AUTO */
    uint64_t max_len;    /* bound of variable fields, 1 .. 2^30; 0 = 1 MiB (minidb
                          * raw values: the largest value) */
    uint64_t index_max;  /* memory for the entry index (keys, offsets); 0 = 1 GiB */
    int verify;          /* LevelDB/RocksDB: check every block's checksum, once, in
                          * the pass over the snapshot at open (a mismatch fails
                          * the open); default 1 */
    uint64_t shard_id;   /* with num_shards: every num_shards-th entry from shard_id */
    uint64_t num_shards; /* 0 or 1: every entry */
    /* minidb: the saved index of entry offsets (ferry_minidb_index_build); NULL:
     * FILE.fidx when there is one, else the file is scanned at open. A stale or
     * damaged index is an error naming it, never used. */
    const char *index_path;
    int build_index; /* minidb: write a missing or stale index at open, then use it */
    int in_place;    /* LevelDB: read a value stored uncompressed in a table file
                      * where the pass at open found it, from ferry's own mapping of
                      * the file, with no lookup (docs/databases.md); 0: every read
                      * a lookup; default 1 */
} ferry_db_dataset_opts;

FERRY_API void ferry_db_dataset_opts_default(ferry_db_dataset_opts *o);

/* Opens a store as a map-style dataset (free with ferry_dataset_free). As a
 * described source: "minidb:FILE", "leveldb:DIR", "rocksdb:DIR", each taking
 * [,value=auto|datum|tensorprotos|raw][,max=N][,index_max=BYTES][,verify=0|1]
 * [,shard=K,of=N]; minidb also [,index=PATH][,build=1], leveldb [,in_place=0|1]. */
FERRY_API int ferry_dataset_db(ferry_dataset **out, const ferry_db_dataset_opts *o);

/* Writes the saved index of the minidb file `path` to index_path (NULL: path +
 * ".fidx"): every entry's offset after one scan that checks the file, with its
 * size, time and a hash of its ends, so that an index of another version of the
 * file is stale (docs/databases.md). Atomic: a reader sees the old index or the
 * whole new one. *entries (may be NULL): how many entries. Opening the file
 * map-style then reads the index instead of scanning. */
FERRY_API int ferry_minidb_index_build(const char *path, const char *index_path, uint64_t *entries);

/* minidb files as a stream (free with ferry_stream_free): location a file, a
 * directory (its files, in name order) or a glob, each file plain, gzip or zstd
 * (found by its first bytes), read front to back with no index, one file a stream
 * shard, the files in a shuffled order each epoch (from seed). An entry's key and
 * value are read into memory whole: max_entry bounds them (0 = 64 MiB; a longer
 * entry is FERRY_EOVERFLOW naming it, and the stream goes on). Fields and values
 * as above, decided by the first file's first entry (value RAW: "key" up to 1024
 * bytes). o->backend is NULL or "minidb"; index_max, verify and the shard fields
 * do not apply (the loader shards streams). As a described source:
 * "minidb:PATH|DIR|GLOB,stream=1[,seed=S][,max_entry=N]", which a compressed
 * file, a directory or a glob makes of itself. */
FERRY_API int ferry_stream_db(ferry_stream **out, const char *location,
                              const ferry_db_dataset_opts *o, uint64_t max_entry, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_DB_H */
