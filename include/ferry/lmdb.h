/*
 * ferry/lmdb.h - LMDB databases (read and write) and Caffe's Datum records.
 *
 * LMDB (Lightning Memory-Mapped Database) is a B-tree in one memory-mapped file.
 * Caffe's convert_imageset, Caffe2's DBs and many training pipelines store one
 * sample per key in it, most often as a serialised caffe.Datum protobuf:
 *
 *     message Datum {
 *       optional int32 channels = 1;  optional int32 height = 2;
 *       optional int32 width = 3;     optional bytes data = 4;   (C x H x W bytes,
 *       optional int32 label = 5;                                 Caffe: CHW, BGR)
 *       repeated float float_data = 6; optional bool encoded = 7; (data is a JPEG/PNG)
 *     }
 *
 * Three parts:
 *  - ferry_datum_decode / ferry_datum_encode: Datum records, read without a copy.
 *  - ferry_lmdb_writer: create or extend a database, committing every N puts.
 *  - ferry_dataset_lmdb: a map-style dataset over a database, sample i being entry
 *    i in LMDB's key order, with Datum values split into "data", "label" and
 *    "float_data" fields.
 *
 * Databases may come from anywhere, so their contents are checked: a malformed
 * Datum, an entry whose shape differs from the first one, a value longer than its
 * field, or a file shorter than its own header says is an error (FERRY_ECORRUPT or
 * FERRY_EOVERFLOW) whose message names the file, the entry's index and its key,
 * never a crash. LMDB's own failures keep LMDB's words beside the path:
 * "caffe_lmdb/data.mdb: MDB_INVALID: File is not an LMDB file".
 *
 * Limits of what can be checked: LMDB maps the file and trusts its B-tree pages;
 * ferry checks the file's length against the meta page and (on Linux, where the
 * mapping can be found) every entry's key and value against the file, but a
 * deliberately crafted page can still mislead LMDB itself. As with any mapped
 * reader, truncating a file while a dataset reads it raises SIGBUS.
 */
#ifndef FERRY_LMDB_H
#define FERRY_LMDB_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */

/* ---- Caffe Datum ---- */

/* A decoded Datum. Pointers lead into the buffer given to ferry_datum_decode
 * (nothing is copied or allocated): valid as long as that buffer. Absent fields
 * read as protobuf's defaults (0, NULL). */
typedef struct ferry_datum {
    int32_t channels, height, width; /* >= 0; channels*height*width <= 2^31 */
    int32_t label;
    int encoded; /* 1: data holds an image file (JPEG, PNG, ...), not pixels */
    const uint8_t *data;
    size_t data_size;
    /* float_data: float_count float32 values. When they lie in one packed run,
     * float_bytes points at them: 4*float_count little-endian bytes with no
     * alignment. When they are spread over several fields (unpacked, as Caffe's
     * own protobuf writes them), float_bytes is NULL. Either way
     * ferry_datum_floats copies them out. */
    const uint8_t *float_bytes;
    size_t float_count;
    /* private: the message, for ferry_datum_floats */
    const uint8_t *msg_;
    size_t msg_size_;
} ferry_datum;

/* Decodes a serialised Datum of n bytes at buf into *out. Follows protobuf's wire
 * format: fields in any order, the last of a repeated optional field wins,
 * float_data packed or not (or both), unknown fields skipped by their wire type.
 * Checks everything and never reads outside [buf, buf + n): varints of more than
 * 10 bytes or past 64 bits, lengths past the end, field number 0, groups (wire
 * types 3 and 4) and wire types 6 and 7, known fields with the wrong wire type,
 * int32 values that do not fit, negative dimensions, channels*height*width over
 * 2^31, a packed float_data whose length is not a multiple of 4, and, when not
 * encoded, data whose size is not channels*height*width (a Datum without data
 * bytes may instead carry channels*height*width floats). Any of these is
 * FERRY_ECORRUPT with a message that says what and at which byte:
 * "datum: byte 12: field 4 length 9000 runs past the end (30 bytes)". Integers
 * that protobuf sign-extends to 64 bits are taken back to int32; values outside
 * int32 are an error rather than silently cut. Thread-safe. */
FERRY_API int ferry_datum_decode(const void *buf, size_t n, ferry_datum *out);

/* Copies up to n of a decoded Datum's floats, as native floats, to dst (room for
 * n floats; no alignment needed) and returns how many it copied:
 * min(n, float_count). The buffer the Datum was decoded from must still be
 * valid. */
FERRY_API size_t ferry_datum_floats(const ferry_datum *d, void *dst, size_t n);

/* Serialises *d as Caffe does (fields 1, 2, 3, 4, 5, 6, 7 in order; dimensions,
 * label and encoded always written, data when data_size > 0, floats as one packed
 * run when float_count > 0). Floats come from float_bytes (little-endian) or, when
 * that is NULL, from the message d was decoded from. Writes *size bytes to buf
 * when they fit in cap; otherwise returns FERRY_EOVERFLOW with *size set to the
 * size needed (buf may be NULL with cap 0 to ask). A Datum that would not decode
 * (negative dimensions, data size not channels*height*width, ...) is FERRY_EINVAL
 * saying why. buf must not overlap the Datum's own bytes. A decoded Caffe record
 * re-encodes to the same bytes. */
FERRY_API int ferry_datum_encode(const ferry_datum *d, void *buf, size_t cap, size_t *size);

/* ---- Writing a database ----
 * A writer puts key/value pairs into one write transaction and commits it every
 * commit_every puts (and on ferry_lmdb_writer_commit). LMDB's guarantee holds
 * across crashes: a reader, and the database after a crash or an abort, sees the
 * state of the last commit, whole, and nothing of the puts after it. Create it,
 * put, commit, free. One thread at a time: LMDB ties a write transaction to the
 * thread that began it, so a writer must stay on one thread between commits.
 * Another process may read the database while it is written if its readers take
 * the lock (ferry_lmdb_opts.lock = 1, or LMDB's default elsewhere). Within one
 * process, LMDB wants one environment per database at a time: do not keep a writer
 * and a dataset open on the same database at once. */
typedef struct ferry_lmdb_writer ferry_lmdb_writer;

typedef struct ferry_lmdb_writer_opts {
    const char *path;      /* a directory (made if missing) holding data.mdb and lock.mdb,
                            * or with no_subdir the data file itself (PATH-lock beside it) */
    int no_subdir;         /* 1: path is the data file (LMDB's MDB_NOSUBDIR) */
    const char *db;        /* a named sub-database, created if missing; NULL = main DB */
    uint64_t map_size;     /* the most the database may grow to, in bytes, 1 MiB .. 2^46,
                            * rounded up to 64 KiB; 0 = 1 GiB. Only address space until
                            * used. A put that does not fit is FERRY_EOVERFLOW. An existing
                            * database keeps the larger of this and its own. */
    uint32_t commit_every; /* puts per transaction, 1 .. 2^24; 0 = 1000 */
    int append;            /* 1: keys come in increasing order (LMDB's MDB_APPEND: faster,
                            * fuller pages); a key not after the last is FERRY_EINVAL */
} ferry_lmdb_writer_opts;

/* Defaults: map_size 1 GiB, commit_every 1000, main DB, no append. */
FERRY_API void ferry_lmdb_writer_opts_default(ferry_lmdb_writer_opts *o);

/* Opens or creates the environment (and the named database) for writing. */
FERRY_API int ferry_lmdb_writer_open(ferry_lmdb_writer **out, const ferry_lmdb_writer_opts *o);

/* Puts one pair (copied into the database; the caller keeps its buffers). A key
 * is 1 .. 511 bytes (LMDB's limit; FERRY_EINVAL otherwise); an existing key's
 * value is replaced. Commits when commit_every puts are pending. On a failure of
 * the transaction itself (FERRY_EOVERFLOW when the map is full, FERRY_EIO) the
 * pending puts since the last commit are dropped, as the message says; the
 * writer stays usable and the database keeps its last committed state. */
FERRY_API int ferry_lmdb_writer_put(ferry_lmdb_writer *w, const void *key, size_t klen,
                                    const void *val, size_t vlen);

/* Commits the pending puts (durable when it returns 0: LMDB syncs the file). A
 * commit with nothing pending does nothing. */
FERRY_API int ferry_lmdb_writer_commit(ferry_lmdb_writer *w);

/* Drops the pending puts; the database stays as of the last commit. */
FERRY_API void ferry_lmdb_writer_abort(ferry_lmdb_writer *w);

/* Puts committed so far by this writer, and puts pending (not yet committed). */
FERRY_API uint64_t ferry_lmdb_writer_committed(const ferry_lmdb_writer *w);
FERRY_API uint64_t ferry_lmdb_writer_pending(const ferry_lmdb_writer *w);

/* Drops what is pending (call ferry_lmdb_writer_commit first to keep it), closes
 * the environment and frees. NULL is fine. */
FERRY_API void ferry_lmdb_writer_free(ferry_lmdb_writer *w);

/* ---- The lmdb dataset ----
 * Opening reads the database's index once: one long read transaction stays open
 * for the dataset's life, and for every entry the dataset keeps where its key and
 * value lie in the map (32 bytes an entry; values are not read). Sample i is
 * entry i in LMDB's key order (byte order of the keys unless the database says
 * otherwise); get is a copy out of the map, from any number of threads at once,
 * with no further LMDB calls. Nothing is allocated per sample.
 *
 * Fields, with datum (a Caffe Datum in every value):
 *  - "data": uint8 [C, H, W] when the first entry is raw pixels (every entry
 *    must then have that shape and be raw, else an error naming the entry's
 *    index and key), or uint8 variable up to max_len when the first entry is
 *    encoded (the image file's bytes; a longer one is FERRY_EOVERFLOW naming the
 *    key). Absent when the first entry has neither data nor encoded (a float
 *    Datum).
 *  - "label": int64.
 *  - "float_data": float32 [N], only when the first entry has N > 0 floats
 *    (every entry must then have N).
 * Without datum:
 *  - "key": uint8 variable up to the longest key.
 *  - "value": uint8 variable up to max_len, by default the largest value in the
 *    database (with a smaller max_len, a longer value is FERRY_EOVERFLOW naming
 *    its key).
 * With datum AUTO, a first value that is no Datum but a Caffe2 TensorProtos (as
 * Caffe2's make_image_db writes LMDBs) gives one field a proto, as ferry/db.h's
 * ferry_dataset_db describes; every value must then be one.
 * A value that does not decode as a Datum is FERRY_ECORRUPT naming the entry:
 * "data.mdb: entry 7 (key \"00000007_x.png\"): datum: byte 12: ...".
 *
 * A main database that holds named sub-databases is refused with their names
 * (their records are LMDB's bookkeeping, not values): pick one with db.
 *
 * liblmdb trusts its file, so before it maps one, ferry reads and checks the
 * structure it will walk: both meta pages, the page size and last page against
 * the file's length, and every branch and leaf page of the database read (page
 * numbers and types, node offsets and sizes inside their page, child pages and
 * overflow runs inside the file, one depth for all leaves, no page reached
 * twice). A damaged environment is FERRY_ECORRUPT naming the file and the page:
 * "data.mdb: page 7 (offset 28672): node 3 at offset 4092 lies outside the
 * page's nodes [1024, 4096)". This reads each branch and leaf page once more at
 * open (the walk that locates the entries reads them anyway), never the values'
 * overflow pages. Databases with duplicate keys (MDB_DUPSORT) are refused
 * (FERRY_EINVAL): ferry reads one value a key.
 *
 * A data file cut short while the dataset reads it is FERRY_EIO naming the file
 * and the entry ("... the file was cut short while it was read"), never a
 * SIGBUS; a file replaced by a rename is read as it was at open. Pointers from
 * ferry_lmdb_entry are into the map: reading them is outside that guard. See
 * docs/changing-files.md. */
enum { FERRY_LMDB_DATUM_AUTO = 0, FERRY_LMDB_DATUM_ON = 1, FERRY_LMDB_DATUM_OFF = 2 };

typedef struct ferry_lmdb_opts {
    const char *path; /* an environment directory (PATH/data.mdb) or the data file */
    const char *db;   /* a named sub-database; NULL = the main DB */
    int datum;        /* AUTO: datum when the first value decodes as a Datum that
                       * carries data or floats (an empty database: off); ON: the
                       * first value must decode; OFF: key and value as bytes */
    uint64_t max_len; /* bound of the variable fields, 1 .. 2^30; 0 = the largest
                       * value (key/value), or 1 MiB (encoded Datum data) */
    int lock;         /* 0 (default): read without LMDB's lock file (MDB_NOLOCK), so
                       * nothing is written beside the database and read-only
                       * directories work; a writer in another process must then not
                       * run while the dataset is open (it could reuse pages the
                       * dataset still reads). 1: take a reader slot in the lock
                       * file, as LMDB readers normally do, so that a live writer is
                       * safe (the dataset keeps seeing the state as of its open, and the
                       * writer cannot reuse that state's pages until the dataset is
                       * freed: the file may grow meanwhile). */
} ferry_lmdb_opts;

/* Defaults: datum AUTO, max_len 0 (see above), main DB, no lock. */
FERRY_API void ferry_lmdb_opts_default(ferry_lmdb_opts *o);

/* Opens an lmdb dataset (free with ferry_dataset_free). As a described source:
 * "lmdb:PATH[,db=NAME][,datum=auto|1|0][,max=N][,lock=0|1]". Errors name the
 * path: FERRY_ENOENT (no such file, no sub-database of that name: the message
 * lists those there are), FERRY_ECORRUPT (not an LMDB file, truncated, first
 * value not a Datum with datum ON), FERRY_EINVAL (bad options; sub-databases in
 * the main DB). */
FERRY_API int ferry_dataset_lmdb(ferry_dataset **out, const ferry_lmdb_opts *o);

/* Entry i of an lmdb dataset: its key and value inside the map, valid for the
 * dataset's life (read-only). FERRY_EINVAL when ds is not an lmdb dataset,
 * FERRY_ERANGE past the end. Any of the out pointers may be NULL. */
FERRY_API int ferry_lmdb_entry(const ferry_dataset *ds, uint64_t i, const void **key, size_t *klen,
                               const void **val, size_t *vlen);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_LMDB_H */
