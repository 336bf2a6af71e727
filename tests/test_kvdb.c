/*
 * Caffe2's minidb, LevelDB and RocksDB as datasets and ferry_db backends, read
 * from stores the real libraries and serialisers wrote (kv_fixtures.py: plyvel,
 * protoc's Python code from caffe.proto and caffe2.proto; RocksDB's own C API
 * here), and from damaged ones.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/caffe2.h>
#include "core/internal.h"
#include "formats/kv.h"
#include "formats/places.h"
#include "io/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef FERRY_HAVE_ROCKSDB
#include <rocksdb/c.h>
#endif
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#define PY "/usr/bin/python3"

/* Writes a store with kv_fixtures.py (SKIPs when a module is missing). */
static void fixture(const char *store, const char *path, const char *kind, int n)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, PY " %s/kv_fixtures.py %s '%s' %s %d", FERRY_TESTS_DIR, store, path,
             kind, n);
    int st = system(cmd);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        SKIP("kv_fixtures.py needs python3-plyvel, python3-protobuf, protoc and Pillow");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A sample with room for every field of ds. */
typedef struct slot {
    ferry_sample s;
    void *data[FERRY_MAX_FIELDS];
    int64_t length[FERRY_MAX_FIELDS];
} slot;

static slot *sample_for(const ferry_dataset *ds)
{
    slot *x = calloc(1, sizeof *x);
    int nf = ferry_dataset_nfields(ds);
    for (int f = 0; f < nf; f++) {
        const ferry_field *fi = ferry_dataset_field(ds, f);
        size_t bytes = ferry_dtype_size(fi->dtype);
        for (int d = 0; d < fi->ndim; d++)
            bytes *= (size_t)fi->shape[d];
        x->data[f] = calloc(1, bytes + 1);
    }
    ferry_sample s = {nf, x->data, x->length, {0}};
    memcpy(&x->s, &s, sizeof s);
    return x;
}

static void sample_free(slot *x)
{
    for (int f = 0; f < FERRY_MAX_FIELDS; f++)
        free(x->data[f]);
    free(x);
}

static void check_datum_sample(const ferry_sample *s, int i)
{
    const uint8_t *d = s->data[0];
    for (int j = 0; j < 60; j++)
        CHECK_EQ(d[j], (7 * i + j) % 256);
    int64_t label;
    memcpy(&label, s->data[1], 8);
    CHECK_EQ(label, (i % 10) - 3);
}

static void check_protos_sample(const ferry_sample *s, int i)
{
    const uint8_t *d = s->data[0];
    for (int j = 0; j < 60; j++)
        CHECK_EQ(d[j], (3 * i + j) % 251);
    int64_t label;
    memcpy(&label, s->data[1], 8);
    CHECK_EQ(label, 11 * i - 7);
    float box[2];
    memcpy(box, s->data[2], 8);
    CHECK(box[0] == (float)i / 2 && box[1] == (float)-i);
}

/* Every sample of a source, checked by `check`. */
static void read_all(const char *spec, int n, void (*check)(const ferry_sample *, int))
{
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), (uint64_t)n);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *s = sample_for(ds);
    for (int i = 0; i < n; i++) {
        CHECK_OK(ferry_dataset_get(ds, (uint64_t)i, &s->s, ctx));
        check(&s->s, i);
    }
    sample_free(s);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
}

static void check_fields_protos(const ferry_dataset *ds)
{
    CHECK_EQ(ferry_dataset_nfields(ds), 3);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(!strcmp(f->name, "data") && f->dtype == FERRY_U8 && f->ndim == 3 && f->shape[0] == 4 &&
          f->shape[1] == 5 && f->shape[2] == 3 && !f->variable);
    f = ferry_dataset_field(ds, 1);
    CHECK(!strcmp(f->name, "label") && f->dtype == FERRY_I64 && f->ndim == 0);
    f = ferry_dataset_field(ds, 2);
    CHECK(!strcmp(f->name, "box") && f->dtype == FERRY_F32 && f->ndim == 1 && f->shape[0] == 2);
}

TEST(minidb_written_as_caffe2_writes_it)
{
    test_make_dir("kvdb");
    char path[512], spec[600];
    test_path("train.minidb", path);
    fixture("minidb", path, "tensorprotos", 50);
    snprintf(spec, sizeof spec, "minidb:%s", path);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    check_fields_protos(ds);
    ferry_dataset_free(ds);
    read_all(spec, 50, check_protos_sample);
    /* every 3rd entry from 1, as Caffe2's DBReader shards */
    snprintf(spec, sizeof spec, "minidb:%s,shard=1,of=3", path);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), 17);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(leveldb_datum_and_tensorprotos_from_plyvel)
{
    test_make_dir("kvdb");
    char path[512], spec[600];
    test_path("datum", path);
    fixture("leveldb", path, "datum", 300);
    snprintf(spec, sizeof spec, "leveldb:%s", path);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    const ferry_field *f = ferry_dataset_field(ds, 0);
    CHECK(!strcmp(f->name, "data") && f->ndim == 3 && f->shape[0] == 3 && f->shape[1] == 4 &&
          f->shape[2] == 5);
    ferry_dataset_free(ds);
    read_all(spec, 300, check_datum_sample);
    snprintf(spec, sizeof spec, "leveldb:%s,value=raw", path);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK(!strcmp(ferry_dataset_field(ds, 0)->name, "key"));
    ferry_dataset_free(ds);
    snprintf(spec, sizeof spec, "leveldb:%s,value=tensorprotos", path);
    CHECK(ferry_dataset_open(&ds, spec) == FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "entry 0 (key \"00000000\"): the first value is not a "
                                        "Caffe2 TensorProtos");

    test_path("protos", path);
    fixture("leveldb", path, "tensorprotos", 120);
    snprintf(spec, sizeof spec, "leveldb:%s", path);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    check_fields_protos(ds);
    ferry_dataset_free(ds);
    read_all(spec, 120, check_protos_sample);
    test_remove_dir();
}

/* The ferry_db calls on a LevelDB plyvel wrote: entries, sharded cursors. */
TEST(leveldb_through_the_db_interface)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("raw", path);
    fixture("leveldb", path, "raw", 1000);
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "leveldb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), 1000);
    const void *k, *v;
    size_t kl, vl;
    for (int i = 0; i < 1000; i += 37) {
        char key[16];
        snprintf(key, sizeof key, "%08d", i);
        CHECK_OK(ferry_db_entry(db, (uint64_t)i, &k, &kl, &v, &vl));
        CHECK(kl == 8 && !memcmp(k, key, 8));
        CHECK_EQ(vl, (size_t)(i % 300));
        for (size_t j = 0; j < vl; j++)
            CHECK_EQ(((const uint8_t *)v)[j], i % 256);
    }
    int seen = 0;
    for (uint64_t s = 0; s < 4; s++) {
        ferry_db_cursor *c;
        CHECK_OK(ferry_db_cursor_open(db, s, 4, &c));
        int rc, i = (int)s;
        while ((rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) == 0) {
            char key[16];
            snprintf(key, sizeof key, "%08d", i);
            CHECK(kl == 8 && !memcmp(k, key, 8));
            CHECK_EQ(vl, (size_t)(i % 300));
            i += 4;
            seen++;
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_OK(ferry_db_cursor_seek(c, 100)); /* entry s + 400 */
        CHECK_OK(ferry_db_cursor_next(c, &k, &kl, &v, &vl));
        char key[16];
        snprintf(key, sizeof key, "%08d", (int)s + 400);
        CHECK(!memcmp(k, key, 8));
        ferry_db_cursor_close(c);
    }
    CHECK_EQ(seen, 1000);
    ferry_db_close(db);
    test_remove_dir();
}

#ifdef FERRY_HAVE_ROCKSDB
/* A RocksDB written through librocksdb's C API with the Datum values that
 * protoc's code serialised (read back from the minidb kv_fixtures.py wrote). */
static void write_rocksdb(const char *path, const char *minidb)
{
    ferry_db *src;
    CHECK_OK(ferry_db_open(&src, "minidb", minidb, FERRY_DB_READ));
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    char *err = NULL;
    rocksdb_t *db = rocksdb_open(o, path, &err);
    CHECK(db && !err);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    for (uint64_t i = 0; i < ferry_db_count(src); i++) {
        const void *k, *v;
        size_t kl, vl;
        CHECK_OK(ferry_db_entry(src, i, &k, &kl, &v, &vl));
        rocksdb_put(db, wo, k, kl, v, vl, &err);
        CHECK(!err);
    }
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    rocksdb_flush(db, fo, &err);
    CHECK(!err);
    rocksdb_flushoptions_destroy(fo);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
    ferry_db_close(src);
}
#endif

TEST(rocksdb_written_by_its_c_api)
{
#ifndef FERRY_HAVE_ROCKSDB
    SKIP("this build has no RocksDB");
#else
    test_make_dir("kvdb");
    char path[512], mdb[512], spec[600];
    test_path("datum.minidb", mdb);
    test_path("rocks", path);
    fixture("minidb", mdb, "datum", 200);
    write_rocksdb(path, mdb);
    snprintf(spec, sizeof spec, "rocksdb:%s", path);
    read_all(spec, 200, check_datum_sample);
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "rocksdb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), 200);
    ferry_db_cursor *c;
    CHECK_OK(ferry_db_cursor_open(db, 2, 5, &c));
    const void *k, *v;
    size_t kl, vl;
    int n = 0;
    while (ferry_db_cursor_next(c, &k, &kl, &v, &vl) == 0) {
        ferry_datum d;
        CHECK_OK(ferry_datum_decode(v, vl, &d));
        CHECK_EQ(d.label, ((2 + 5 * n) % 10) - 3);
        n++;
    }
    CHECK_EQ(n, 40);
    ferry_db_cursor_close(c);
    ferry_db_close(db);
    test_remove_dir();
#endif
}

/* Write through each new backend's transaction, read back, add, abort. */
TEST(transactions_on_the_new_backends)
{
    static const char *const backends[] = {"minidb", "leveldb", "rocksdb"};
    test_make_dir("kvdb");
    for (int b = 0; b < 3; b++) {
#ifndef FERRY_HAVE_ROCKSDB
        if (b == 2)
            break;
#endif
        char path[512];
        test_path(backends[b], path);
        for (int round = 0; round < 2; round++) { /* created, then added to */
            ferry_db *db;
            ferry_db_txn *t;
            CHECK_OK(ferry_db_open(&db, backends[b], path, FERRY_DB_WRITE));
            CHECK_OK(ferry_db_begin(db, &t));
            for (int i = round * 100; i < round * 100 + 100; i++) {
                char key[16], val[64];
                snprintf(key, sizeof key, "%08d", i);
                memset(val, 'a' + i % 26, sizeof val);
                CHECK_OK(ferry_db_put(t, key, 8, val, (size_t)(i % 64)));
            }
            CHECK_OK(ferry_db_commit(t));
            CHECK_OK(ferry_db_begin(db, &t));
            CHECK_OK(ferry_db_put(t, "zzzzzzzz", 8, "x", 1));
            ferry_db_abort(t);
            ferry_db_close(db);
        }
        ferry_db *db;
        CHECK_OK(ferry_db_open(&db, backends[b], path, FERRY_DB_READ));
        CHECK_U64(ferry_db_count(db), 200);
        for (int i = 0; i < 200; i++) {
            const void *k, *v;
            size_t kl, vl;
            char key[16];
            snprintf(key, sizeof key, "%08d", i);
            CHECK_OK(ferry_db_entry(db, (uint64_t)i, &k, &kl, &v, &vl));
            CHECK(kl == 8 && !memcmp(k, key, 8));
            CHECK_EQ(vl, (size_t)(i % 64));
            for (size_t j = 0; j < vl; j++)
                CHECK_EQ(((const char *)v)[j], 'a' + i % 26);
        }
        ferry_db_close(db);
    }
    test_remove_dir();
}

/* A LevelDB transaction is one write batch, so a commit is all or nothing: a put
 * that would take it past 256 MiB is refused, the puts before it kept. */
TEST(leveldb_transaction_is_one_batch)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("big", path);
    size_t n = (size_t)130 << 20;
    char *val = malloc(n);
    CHECK(val != NULL);
    memset(val, 'v', n);
    ferry_db *db;
    ferry_db_txn *t;
    CHECK_OK(ferry_db_open(&db, "leveldb", path, FERRY_DB_WRITE));
    CHECK_OK(ferry_db_begin(db, &t));
    CHECK_OK(ferry_db_put(t, "a", 1, val, n));
    CHECK_RC(ferry_db_put(t, "b", 1, val, n), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "commit it and begin another");
    CHECK_OK(ferry_db_put(t, "c", 1, "small", 5));
    CHECK_OK(ferry_db_commit(t));
    ferry_db_close(db);
    free(val);
    CHECK_OK(ferry_db_open(&db, "leveldb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), 2);
    const void *k, *v;
    size_t kl, vl;
    CHECK_OK(ferry_db_entry(db, 0, &k, &kl, &v, &vl));
    CHECK(kl == 1 && !memcmp(k, "a", 1) && vl == n && ((const char *)v)[n - 1] == 'v');
    CHECK_OK(ferry_db_entry(db, 1, &k, &kl, &v, &vl));
    CHECK(kl == 1 && !memcmp(k, "c", 1) && vl == 5);
    ferry_db_close(db);
    test_remove_dir();
}

/* minidb's framing from a file: the framing Caffe2 writes, then damage. */
static void put_entry(FILE *f, int32_t kl, int32_t vl, const char *k, const char *v)
{
    uint8_t h[8];
    for (int b = 0; b < 4; b++) {
        h[b] = (uint8_t)((uint32_t)kl >> (8 * b));
        h[4 + b] = (uint8_t)((uint32_t)vl >> (8 * b));
    }
    fwrite(h, 1, 8, f);
    if (k)
        fwrite(k, 1, strlen(k), f);
    if (v)
        fwrite(v, 1, strlen(v), f);
}

static void expect_damage(const char *path, const char *want)
{
    ferry_db *db;
    CHECK_RC(ferry_db_open(&db, "minidb", path, FERRY_DB_READ), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), want);
}

TEST(minidb_damage_is_named)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("bad.minidb", path);
    FILE *f = fopen(path, "wb");
    put_entry(f, 3, 5, "abc", "hello");
    put_entry(f, 2, 1000, "de", "short");
    fclose(f);
    expect_damage(path, "entry 1 at offset 16: key and value lengths 2 + 1000 run past the end of "
                        "the file (31 bytes)");
    f = fopen(path, "wb");
    put_entry(f, 3, 5, "abc", "hello");
    put_entry(f, -4, 1, "x", "y");
    fclose(f);
    expect_damage(path, "entry 1 at offset 16: key length -4 is outside [1, 1048576]");
    f = fopen(path, "wb");
    put_entry(f, 0, 1, "", "y");
    fclose(f);
    expect_damage(path, "entry 0 at offset 0: key length 0");
    f = fopen(path, "wb");
    put_entry(f, 1, -1, "k", "");
    fclose(f);
    expect_damage(path, "value length -1 is negative");
    f = fopen(path, "wb");
    put_entry(f, 3, 5, "abc", "hello");
    fwrite("\1\0\0", 1, 3, f);
    fclose(f);
    expect_damage(path, "entry 1 at offset 16: the file ends 3 bytes into its 8-byte header");
    /* an empty file is an empty db */
    f = fopen(path, "wb");
    fclose(f);
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), 0);
    ferry_db_close(db);
    /* a value that is no TensorProtos, with value=tensorprotos: named */
    f = fopen(path, "wb");
    put_entry(f, 3, 5, "abc", "hello");
    fclose(f);
    char spec[600];
    snprintf(spec, sizeof spec, "minidb:%s,value=tensorprotos", path);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "entry 0 (key \"abc\"): the first value is not a Caffe2 "
                   "TensorProtos: tensorprotos: byte 2: field 13 has group wire type 4");
    test_remove_dir();
}

/* The minidb writer at every fault point: a failed write leaves the previous
 * file as it was, or (a failure after the rename: the directory's fsync) the
 * whole new one; never a temporary. */
TEST(minidb_writer_faults_leave_the_old_file)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("w.minidb", path);
    ferry_db *db;
    ferry_db_txn *t;
    CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_WRITE));
    CHECK_OK(ferry_db_begin(db, &t));
    CHECK_OK(ferry_db_put(t, "old", 3, "value", 5));
    CHECK_OK(ferry_db_commit(t));
    size_t n0;
    unsigned char *before = test_read_file(path, &n0);
    int failed = 0;
    uint64_t expect = 1;
    for (long point = 1; point < 200; point++) {
        ferry__fault_arm(FERRY__FAULT_FAIL, point);
        int rc = ferry_db_begin(db, &t);
        for (int i = 0; rc == 0 && i < 3000; i++)
            rc = ferry_db_put(t, "new-key", 7, "0123456789abcdef0123456789abcdef", 32);
        if (rc == 0)
            rc = ferry_db_commit(t);
        else
            ferry_db_abort(t);
        long counted = ferry__fault_arm(FERRY__FAULT_OFF, 0);
        if (rc == 0) {
            CHECK(counted < point); /* every point failed once before this */
            expect += 3000;
            break;
        }
        failed++;
        size_t n;
        unsigned char *now = test_read_file(path, &n);
        if (n != n0 || memcmp(now, before, n)) { /* renamed into place, whole */
            ferry_db *r;
            CHECK_OK(ferry_db_open(&r, "minidb", path, FERRY_DB_READ));
            CHECK_U64(ferry_db_count(r), expect + 3000);
            ferry_db_close(r);
            expect += 3000;
            free(before);
            before = now;
            n0 = n;
        } else {
            free(now);
        }
        DIR *d = opendir(test_dir);
        struct dirent *e;
        while ((e = readdir(d)))
            CHECK(!strstr(e->d_name, ".tmp."));
        closedir(d);
    }
    CHECK(failed >= 3);
    free(before);
    ferry_db_close(db);
    CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), expect);
    ferry_db_close(db);
    test_remove_dir();
}

/* Bytes flipped in every table and log file of a LevelDB or RocksDB: opening and
 * reading every sample ends in success or in the library's error beside the path,
 * never a crash. */
static int flip_files(const char *dir, const char *ext1, const char *ext2, unsigned seed, int count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int flipped = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        bool ok = (l > 4 && !strcmp(e->d_name + l - 4, ext1)) ||
                  (l > 4 && !strcmp(e->d_name + l - 4, ext2));
        if (!ok)
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        size_t n;
        unsigned char *b = test_read_file(p, &n);
        for (int k = 0; k < count && n; k++) {
            seed = seed * 1103515245u + 12345u;
            b[(seed >> 8) % n] ^= (unsigned char)(1u << (seed % 8));
        }
        test_write_file(p, b, n);
        free(b);
        flipped++;
    }
    closedir(d);
    return flipped;
}

static void read_damaged(const char *kind, const char *path, int *errors)
{
    char spec[700];
    snprintf(spec, sizeof spec, "%s:%s,value=raw", kind, path);
    ferry_dataset *ds;
    int rc = ferry_dataset_open(&ds, spec);
    if (rc < 0) {
        CHECK_CONTAINS(ferry_last_errmsg(), path);
        CHECK_CONTAINS(ferry_last_errmsg(), kind);
        (*errors)++;
        return;
    }
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *s = sample_for(ds);
    for (uint64_t i = 0; i < ferry_dataset_len(ds); i++) {
        if ((rc = ferry_dataset_get(ds, i, &s->s, ctx)) < 0) {
            CHECK_CONTAINS(ferry_last_errmsg(), path);
            CHECK_CONTAINS(ferry_last_errmsg(), kind);
            (*errors)++;
        }
    }
    sample_free(s);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
}

TEST(leveldb_and_rocksdb_damage_ends_in_the_library_error)
{
    test_make_dir("kvdb");
    int errors = 0, damaged = 0;
    for (unsigned seed = 1; seed <= 12; seed++) {
        char path[512];
        snprintf(path, sizeof path, "%s/l%u", test_dir, seed);
        ferry_db *db;
        ferry_db_txn *t;
        for (int b = 0; b < 2; b++) {
#ifndef FERRY_HAVE_ROCKSDB
            if (b == 1)
                break;
#endif
            const char *kind = b ? "rocksdb" : "leveldb";
            snprintf(path, sizeof path, "%s/%c%u", test_dir, kind[0], seed);
            CHECK_OK(ferry_db_open(&db, kind, path, FERRY_DB_WRITE));
            CHECK_OK(ferry_db_begin(db, &t));
            for (int i = 0; i < 400; i++) {
                char key[16], val[700];
                snprintf(key, sizeof key, "%08d", i);
                memset(val, i & 0xff, sizeof val);
                CHECK_OK(ferry_db_put(t, key, 8, val, sizeof val));
            }
            CHECK_OK(ferry_db_commit(t));
            ferry_db_close(db);
            /* seeds 1..6: the log alone (not yet compacted); then compacted tables */
            if (seed > 6) {
                ferry_dataset *ds;
                char spec[700];
                snprintf(spec, sizeof spec, "%s:%s", kind, path);
                if (b == 0 && ferry_dataset_open(&ds, spec) == 0) /* LevelDB compacts its log */
                    ferry_dataset_free(ds);
            }
            damaged += flip_files(path, b ? ".sst" : ".ldb", ".log", seed, 1 + (int)seed % 4);
            read_damaged(kind, path, &errors);
        }
    }
    CHECK(damaged > 0);
    CHECK(errors > 0); /* some of the damage was found, and named */
    printf("%d files damaged, %d errors named\n", damaged, errors);
    test_remove_dir();
}

/* Entry i's value in the checksum test: bytes that do not compress, so that they
 * lie in the table as written. */
static void noise(unsigned char *v, size_t n, unsigned i)
{
    uint32_t x = 2463534242u ^ (i * 2654435761u);
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v[k] = (unsigned char)x;
    }
}

/* Entry i's value in the LevelDB tests: noise (stored as written), or, below
 * `compressible`, i's low byte repeated (stored compressed); with zero_tail,
 * noise ending in 100 zero bytes; with half_zeros, noise then zeros (stored
 * compressed). */
typedef struct valspec {
    size_t len;
    unsigned compressible;
    bool zero_tail, half_zeros;
} valspec;

static void value_of(const valspec *vs, unsigned i, unsigned char *v)
{
    if (i < vs->compressible) {
        memset(v, (int)(i & 0xff), vs->len);
        return;
    }
    noise(v, vs->len, i);
    size_t zeros = vs->half_zeros ? vs->len / 2 : vs->zero_tail && vs->len > 100 ? 100 : 0;
    for (size_t k = vs->len - zeros; k < vs->len; k++)
        v[k] = 0;
}

/* How many table files the LevelDB at path has; the path of one in table. */
static int tables_in(const char *path, char *table, size_t cap)
{
    int tables = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strlen(e->d_name) > 4 && !strcmp(e->d_name + strlen(e->d_name) - 4, ".ldb")) {
            if (table)
                snprintf(table, cap, "%s/%s", path, e->d_name);
            tables++;
        }
    closedir(d);
    return tables;
}

/* Writes `commits` transactions of `per` entries to a LevelDB at path; returns
 * how many table files it has. */
static int write_tables(const char *path, unsigned commits, unsigned per, const valspec *vs)
{
    ferry_db *db;
    ferry_db_txn *t;
    unsigned char *val = malloc(vs->len);
    CHECK(val != NULL);
    CHECK_OK(ferry_db_open(&db, "leveldb", path, FERRY_DB_WRITE));
    for (unsigned c = 0; c < commits; c++) {
        CHECK_OK(ferry_db_begin(db, &t));
        for (unsigned i = c * per; i < (c + 1) * per; i++) {
            char key[16];
            snprintf(key, sizeof key, "%08u", i);
            value_of(vs, i, val);
            CHECK_OK(ferry_db_put(t, key, 8, val, vs->len));
        }
        CHECK_OK(ferry_db_commit(t));
    }
    ferry_db_close(db);
    free(val);
    const ferry__kv_ops *ops = ferry__kv_find("leveldb");
    ferry__kv *kv;
    ferry__kv_opts ko = {0, 1, NULL, 0, 0};
    CHECK_OK(ops->open(&kv, path, &ko)); /* LevelDB writes its log into a table */
    ops->close(kv);
    return tables_in(path, NULL, 0);
}

/* verify=1 checks every block in the pass at open: a flipped byte in a value
 * fails the open with LevelDB's checksum error, naming the path; with verify=0
 * the same table opens and the entry reads with the flipped byte (nothing
 * checked it), the others intact. */
TEST(leveldb_checksums_are_checked_once_at_open)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("db", path);
    unsigned char val[700], want[700];
    valspec vs = {sizeof val, 0, false, false};
    write_tables(path, 1, 400, &vs);
    char spec[700];
    ferry_dataset *ds;
    snprintf(spec, sizeof spec, "leveldb:%s,value=raw", path);

    /* entry 200's value, found in the table, one bit flipped */
    noise(want, sizeof want, 200);
    DIR *d = opendir(path);
    struct dirent *e;
    int hits = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".ldb"))
            continue;
        char p[1024];
        size_t n;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        unsigned char *b = test_read_file(p, &n);
        unsigned char *at = NULL;
        for (size_t o = 0; !at && n >= sizeof want && o <= n - sizeof want; o++)
            if (b[o] == want[0] && !memcmp(b + o, want, sizeof want))
                at = b + o;
        if (at) {
            at[300] ^= 0x10;
            test_write_file(p, b, n);
            hits++;
        }
        free(b);
    }
    closedir(d);
    CHECK(hits == 1);

    CHECK(ferry_dataset_open(&ds, spec) == FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), "reading the keys: leveldb: Corruption: block checksum");

    snprintf(spec, sizeof spec, "leveldb:%s,value=raw,verify=0", path);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK(ferry_dataset_len(ds) == 400);
    int fv = ferry_dataset_find_field(ds, "value");
    CHECK(fv >= 0);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *s = sample_for(ds);
    for (unsigned i = 0; i < 400; i++) {
        CHECK_OK(ferry_dataset_get(ds, i, &s->s, ctx));
        CHECK(s->length[fv] == (int64_t)sizeof val);
        noise(val, sizeof val, i);
        if (i == 200)
            val[300] ^= 0x10;
        CHECK(memcmp(s->data[fv], val, sizeof val) == 0);
    }
    sample_free(s);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* A LevelDB at path of 400 entries of noise, compacted into one table (its
 * path in table, its size in *size): for cutting short while read. */
static void one_table_of(const char *path, char *table, size_t cap, off_t *size, int half_zeros)
{
    valspec vs = {700, 0, false, half_zeros != 0};
    write_tables(path, 1, 400, &vs);
    table[0] = 0;
    tables_in(path, table, cap);
    CHECK(table[0]);
    struct stat st;
    CHECK(stat(table, &st) == 0 && st.st_size > (half_zeros ? 100000 : 200000));
    *size = st.st_size;
}

static void one_table(const char *path, char *table, size_t cap, off_t *size)
{
    one_table_of(path, table, cap, size, 0);
}

typedef struct expect {
    unsigned i;
    const valspec *vs;
    int bad;
} expect;

static int check_value(void *arg, const uint8_t *v, size_t vlen)
{
    expect *x = arg;
    unsigned char want[4096];
    value_of(x->vs, x->i, want);
    x->bad += vlen != x->vs->len || memcmp(v, want, vlen) != 0;
    return 0;
}

/* Reads every entry of the LevelDB at path, in a scattered order, through the
 * backend with in_place and index_max as given, each value checked; returns
 * how many entries were read in place. */
static uint64_t read_checked(const char *path, unsigned n, const valspec *vs, int in_place,
                             uint64_t index_max)
{
    const ferry__kv_ops *ops = ferry__kv_find("leveldb");
    ferry__kv *kv;
    ferry__kv_opts ko = {index_max, 1, NULL, 0, in_place};
    CHECK_OK(ops->open(&kv, path, &ko));
    CHECK_EQ(ops->count(kv), n);
    expect x = {0, vs, 0};
    for (unsigned k = 0; k < n; k++) {
        x.i = (unsigned)(((uint64_t)k * 7919) % n);
        CHECK_OK(ops->get(kv, x.i, check_value, &x));
    }
    CHECK_EQ(x.bad, 0);
    uint64_t placed = ops->in_place(kv);
    ops->close(kv);
    return placed;
}

/* Reads in place: values stored as written, over several table files, are read
 * from where the pass at open found them, every one (none looked up), and equal
 * what lookups read (in_place=0: none in place). Compressed values are inflated
 * into the library's memory, never a mapping of the table: all looked up, and
 * right; in a database of both, the values stored as written are read in place
 * (all but those sharing a block with compressed ones). Past index_max, the
 * places give up: every read a lookup, and right. */
TEST(leveldb_reads_in_place_what_a_lookup_reads)
{
    test_make_dir("kvdb");
    char path[512];
    unsigned n = 3 * 2500;
    valspec noisy = {3000, 0, false, false}, squashy = {3000, UINT32_MAX, false, false};
    test_path("db", path);
    int tables = write_tables(path, 3, 2500, &noisy);
    printf("%u entries of noise in %d table files\n", n, tables);
    CHECK(tables > 1);
    CHECK_EQ(read_checked(path, n, &noisy, 1, 0), n);
    CHECK_EQ(read_checked(path, n, &noisy, 0, 0), 0);
    test_path("z", path);
    tables = write_tables(path, 2, 1000, &squashy);
    CHECK(tables >= 1);
    CHECK_EQ(read_checked(path, 2000, &squashy, 1, 0), 0);
    CHECK_EQ(read_checked(path, 2000, &squashy, 0, 0), 0);
    test_path("mixed", path);
    valspec mixed = {3000, 300, false, false};
    tables = write_tables(path, 4, 2000, &mixed);
    uint64_t placed = read_checked(path, 8000, &mixed, 1, 0);
    printf("%llu of 7700 values stored as written read in place, in %d tables\n",
           (unsigned long long)placed, tables);
    CHECK(placed >= 7700 - 2 && placed <= 7700);
    test_path("small", path);
    valspec small = {100, 0, false, false};
    write_tables(path, 1, 60000, &small);
    CHECK_EQ(read_checked(path, 60000, &small, 1, (uint64_t)1 << 20), 0);
    CHECK_EQ(read_checked(path, 60000, &small, 1, (uint64_t)4 << 20), 60000);

    /* the same through a loader, shuffled, each grain read in key order: 2
     * workers (grains of tens, sorted in place), then 1 (a grain is a whole
     * batch of 200, sorted by qsort): every slot holds its entry */
    test_path("db", path);
    char spec[700];
    snprintf(spec, sizeof spec, "leveldb:%s,value=raw", path);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    int fv = ferry_dataset_find_field(ds, "value");
    for (int workers = 2; workers >= 1; workers--) {
        ferry_loader_opts o = test_loader_opts(workers == 2 ? 64 : 200, (uint32_t)workers);
        o.shuffle = 1;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        unsigned seen = 0;
        while (ferry_loader_next(l, &b) == 0) {
            ferry_tensor val;
            CHECK_OK(ferry_batch_field(b, fv, &val));
            const uint64_t *idx = ferry_batch_indices(b);
            for (uint32_t k = 0; k < ferry_batch_size(b); k++) {
                expect x = {(unsigned)idx[k], &noisy, 0};
                check_value(&x, (const uint8_t *)val.data + (size_t)k * (size_t)val.strides[0],
                            3000);
                CHECK_EQ(x.bad, 0);
            }
            seen += ferry_batch_size(b);
            ferry_batch_release(b);
        }
        CHECK_EQ(seen, n);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* A value whose last bytes are zeros, in a table cut short inside it, on its
 * last page: past the new end the page reads as zeros, as the value's tail
 * did. The read in place is still the error naming the table, never those
 * bytes (the first non-zero byte after the value reads as zero now). */
TEST(leveldb_cut_inside_a_value_ending_in_zeros_is_an_error)
{
    test_make_dir("kvdb");
    char path[512], table[1024] = "", spec[700];
    valspec zt = {3000, 0, true, false};
    test_path("db", path);
    CHECK_EQ(write_tables(path, 1, 400, &zt), 1);
    tables_in(path, table, sizeof table);
    size_t n;
    unsigned char *b = test_read_file(table, &n), want[3000];
    /* an entry whose value crosses a page, and where its last page starts */
    unsigned entry = 0;
    size_t start = 0, last_page = 0;
    for (unsigned i = 100; i < 400 && !entry; i++) {
        value_of(&zt, i, want);
        for (size_t o = 0; o + sizeof want <= n; o++)
            if (b[o] == want[0] && !memcmp(b + o, want, 64)) {
                start = o;
                break;
            }
        last_page = (start + sizeof want - 1) & ~(size_t)4095;
        if (start && last_page > start + 64 && last_page + 16 < start + sizeof want - 100)
            entry = i;
    }
    free(b);
    CHECK(entry != 0);
    snprintf(spec, sizeof spec, "leveldb:%s,value=raw", path);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *s = sample_for(ds);
    int fv = ferry_dataset_find_field(ds, "value");
    CHECK(truncate(table, (off_t)(last_page + 16)) == 0);
    CHECK_OK(ferry_dataset_get(ds, 50, &s->s, ctx)); /* before the cut */
    value_of(&zt, 50, want);
    CHECK(memcmp(s->data[fv], want, sizeof want) == 0);
    CHECK_RC(ferry_dataset_get(ds, entry, &s->s, ctx), FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), table);
    CHECK_CONTAINS(ferry_last_errmsg(), "leveldb: the file was cut short while it was read");
    printf("entry %u at offset %zu, cut at %zu: %s\n", entry, start, last_page + 16,
           ferry_last_errmsg());
    sample_free(s);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
    test_remove_dir();
}

static bool ldb_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".ldb");
}

/* A library may unmap a file and map another at the same address while the
 * places are noted (LevelDB's table cache drops a table, or two threads opened
 * it at once): a value lent from there is placed in the file that holds it now,
 * with its bytes, never in the file that was there before. */
TEST(places_follow_a_mapping_replaced_at_the_same_address)
{
    test_make_dir("places");
    char dir[512], a[600], b[600];
    test_path("db", dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(a, sizeof a, "%s/000001.ldb", dir);
    snprintf(b, sizeof b, "%s/000002.ldb", dir);
    static unsigned char fa[65536], fb[65536];
    noise(fa, sizeof fa, 1);
    memcpy(fb, fa, sizeof fb);
    noise(fb + 2000, 100, 2); /* b differs from a in [2000, 2100) only */
    test_write_file(a, fa, sizeof fa);
    test_write_file(b, fb, sizeof fb);
    int fd = open(a, O_RDONLY);
    uint8_t *x = mmap(NULL, sizeof fa, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(x != MAP_FAILED);
    ferry__places *p = ferry__places_new(dir, ldb_name);
    CHECK(p != NULL);
    ferry__places_note(p, x + 1000, 100, UINT64_MAX); /* a's, as the library maps a */
    fd = open(b, O_RDONLY);
    CHECK(mmap(x, sizeof fb, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == x);
    close(fd);
    ferry__places_note(p, x + 2000, 100, UINT64_MAX); /* now b's, at the same address */
    ferry__places_note(p, x + 3000, 100, UINT64_MAX);
    CHECK_EQ(ferry__places_finish(p), 3);
    size_t len;
    const void *base;
    const uint8_t *v = ferry__places_get(p, 0, &len);
    CHECK(v && len == 100 && !memcmp(v, fa + 1000, 100));
    CHECK_EQ(strcmp(ferry__places_file(p, (uintptr_t)v, &base), a), 0);
    v = ferry__places_get(p, 1, &len);
    CHECK(v && len == 100 && !memcmp(v, fb + 2000, 100));
    CHECK_EQ(strcmp(ferry__places_file(p, (uintptr_t)v, &base), b), 0);
    v = ferry__places_get(p, 2, &len);
    CHECK(v && !memcmp(v, fb + 3000, 100));
    ferry__places_free(p);
    munmap(x, sizeof fb);
    test_remove_dir();
}

/* LevelDB maps its tables: one cut short under an open dataset is an error
 * naming the table file at the first read that meets the cut. Read in place
 * (from ferry's own mapping of the table), each read past the cut is that
 * error, and the database stays open; looked up (in_place=0), the fault is
 * inside the library (a SIGBUS caught by ferry's guard), and every later read
 * says the database was abandoned. Freeing it does not crash either way. */
static void cut_while_read(int in_place)
{
#ifdef __SANITIZE_ADDRESS__
    __lsan_disable(); /* the abandoned database's handle is left to the process, by design */
#endif
    test_make_dir("kvdb");
    char path[512], spec[700], table[1024];
    unsigned char val[700];
    off_t size;
    test_path("db", path);
    one_table(path, table, sizeof table, &size);
    snprintf(spec, sizeof spec, "leveldb:%s,value=raw,in_place=%d", path, in_place);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *s = sample_for(ds);
    int fv = ferry_dataset_find_field(ds, "value");
    CHECK_OK(ferry_dataset_get(ds, 3, &s->s, ctx)); /* read before the cut */
    noise(val, sizeof val, 3);
    CHECK(memcmp(s->data[fv], val, sizeof val) == 0);
    CHECK(truncate(table, size / 2) == 0);
    int cut = 0, abandoned = 0, ok = 0;
    for (uint64_t i = 0; i < 400; i++) {
        uint64_t e = (i * 7) % 400;
        int rc = ferry_dataset_get(ds, e, &s->s, ctx);
        if (rc == 0) {
            /* never the zeros that a value past the new end but inside its
             * last page reads as: a read in place checks its bytes after */
            noise(val, sizeof val, (unsigned)e);
            CHECK(memcmp(s->data[fv], val, sizeof val) == 0);
            ok++;
            continue;
        }
        CHECK_EQ(rc, FERRY_EIO);
        if (in_place || (cut == 0 && abandoned == 0)) {
            CHECK_CONTAINS(ferry_last_errmsg(), table);
            CHECK_CONTAINS(ferry_last_errmsg(),
                           "leveldb: the file was cut short while it was read");
            CHECK_CONTAINS(ferry_last_errmsg(), "bytes now");
            if (in_place)
                CHECK(strstr(ferry_last_errmsg(), "abandoned") == NULL);
            else
                CHECK_CONTAINS(ferry_last_errmsg(),
                               "the database is abandoned: LevelDB's memory and its LOCK are "
                               "held until this process ends");
            cut++;
        } else {
            CHECK_CONTAINS(ferry_last_errmsg(), path);
            CHECK_CONTAINS(ferry_last_errmsg(), "not read: a table file was cut short");
            CHECK_CONTAINS(ferry_last_errmsg(), "held until this process ends");
            abandoned++;
        }
    }
    printf("in_place=%d: %d read, %d errors naming the table, %d abandoned\n", in_place, ok, cut,
           abandoned);
    CHECK_EQ(ok + cut + abandoned, 400);
    if (in_place) {
        CHECK(cut > 1 && abandoned == 0);
        CHECK(ok > 100); /* what lies before the cut still reads */
    } else {
        CHECK_EQ(cut, 1);
        CHECK(abandoned > 0);
    }
    sample_free(s);
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);

    /* the same through the DB interface, which reads in place where it can: to
     * look up, a table of compressed blocks (inflated by the library from its
     * mapping); then a cursor's first read fails at once instead of reading
     * through the abandoned database */
    test_path("db2", path);
    one_table_of(path, table, sizeof table, &size, !in_place);
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "leveldb", path, FERRY_DB_READ));
    const void *k, *v;
    size_t kl, vl;
    CHECK_OK(ferry_db_entry(db, 3, &k, &kl, &v, &vl));
    CHECK(truncate(table, size / 2) == 0);
    int rc = 0;
    for (uint64_t i = 0; i < 400 && rc == 0; i++)
        rc = ferry_db_entry(db, (i * 7) % 400, &k, &kl, &v, &vl);
    CHECK_EQ(rc, FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), table);
    if (!in_place) {
        CHECK_CONTAINS(ferry_last_errmsg(), "the database is abandoned");
        ferry_db_cursor *c;
        CHECK_OK(ferry_db_cursor_open(db, 0, 1, &c));
        CHECK_EQ(ferry_db_cursor_next(c, &k, &kl, &v, &vl), FERRY_EIO);
        CHECK_CONTAINS(ferry_last_errmsg(), "leveldb: not read in key order");
        CHECK_CONTAINS(ferry_last_errmsg(), "abandoned");
        ferry_db_cursor_close(c);
    }
    ferry_db_close(db);
    test_remove_dir();
#ifdef __SANITIZE_ADDRESS__
    __lsan_enable();
#endif
}

TEST(leveldb_table_cut_short_while_read_is_an_error)
{
    cut_while_read(1);
    cut_while_read(0);
}

/* ferry's commands on a LevelDB: head, stat, ls, verify, and pack to shards. */
TEST(cli_reads_the_new_stores)
{
    test_make_dir("kvdb");
    char path[512], out[8192], args[1400];
    test_path("db", path);
    fixture("leveldb", path, "datum", 40);
    snprintf(args, sizeof args, "head leveldb:%s -n 2", path);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    CHECK_CONTAINS(out, "\"label\": -3");
    CHECK_CONTAINS(out, "\"label\": -2");
    snprintf(args, sizeof args, "stat leveldb:%s --json", path);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    CHECK_CONTAINS(out, "\"entries\": 40");
    snprintf(args, sizeof args, "verify leveldb:%s", path);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    CHECK_CONTAINS(out, "40 entries");
    snprintf(args, sizeof args, "ls leveldb:%s", path);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    CHECK_CONTAINS(out, "00000039");
    snprintf(args, sizeof args,
             "bench leveldb:%s --batch 8 --workers 2 --shuffle --json --no-progress", path);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    char v[64];
    CHECK(test_json_field(out, "samples", v, sizeof v) && !strcmp(v, "40"));
    CHECK(test_json_field(out, "errors", v, sizeof v) && !strcmp(v, "0"));
    char shards[512];
    test_path("shards", shards);
    snprintf(args, sizeof args, "pack leveldb:%s %s", path, shards);
    CHECK_OK(test_ferry_cli(args, out, sizeof out));
    char spec[600];
    snprintf(spec, sizeof spec, "records:%s", shards);
    read_all(spec, 40, check_datum_sample);
    test_remove_dir();
}

#define CAFFE_LMDB FERRY_SHARED_DIR "/testdata/lmdb/caffe_imageset_32x32_n380"

/* Copies the LMDB's entries into a store through ferry_db. */
static void copy_into(const char *backend, const char *path)
{
    ferry_db *src, *dst;
    ferry_db_txn *t;
    CHECK_OK(ferry_db_open(&src, "lmdb", CAFFE_LMDB, FERRY_DB_READ));
    CHECK_OK(ferry_db_open(&dst, backend, path, FERRY_DB_WRITE));
    CHECK_OK(ferry_db_begin(dst, &t));
    for (uint64_t i = 0; i < ferry_db_count(src); i++) {
        const void *k, *v;
        size_t kl, vl;
        CHECK_OK(ferry_db_entry(src, i, &k, &kl, &v, &vl));
        CHECK_OK(ferry_db_put(t, k, kl, v, vl));
    }
    CHECK_OK(ferry_db_commit(t));
    ferry_db_close(dst);
    ferry_db_close(src);
}

/* Datum values Caffe's convert_imageset wrote (the shared LMDB), moved into each
 * store: the same samples as the lmdb dataset gives, read one by one and by a
 * loader with four shuffling workers. */
TEST(caffe_datum_values_read_alike_in_every_backend)
{
    test_need_shared(CAFFE_LMDB "/data.mdb");
    static const char *const backends[] = {"minidb", "leveldb", "rocksdb"};
    ferry_dataset *ref;
    CHECK_OK(ferry_dataset_open(&ref, "lmdb:" CAFFE_LMDB));
    CHECK_U64(ferry_dataset_len(ref), 380);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    slot *r = sample_for(ref);
    uint64_t want[380];
    for (uint64_t i = 0; i < 380; i++) {
        CHECK_OK(ferry_dataset_get(ref, i, &r->s, ctx));
        int64_t lab;
        memcpy(&lab, r->data[1], 8);
        want[i] = test_hash(0xcbf29ce484222325ull, r->data[0], 3072) ^ (uint64_t)lab;
    }
    sample_free(r);
    test_make_dir("kvdb");
    for (int b = 0; b < 3; b++) {
#ifndef FERRY_HAVE_ROCKSDB
        if (b == 2)
            break;
#endif
        char path[512], spec[600];
        test_path(backends[b], path);
        copy_into(backends[b], path);
        snprintf(spec, sizeof spec, "%s:%s", backends[b], path);
        ferry_dataset *ds;
        CHECK_OK(ferry_dataset_open(&ds, spec));
        CHECK_EQ(ferry_dataset_nfields(ds), 2);
        CHECK(ferry_dataset_field(ds, 0)->shape[0] == 3 &&
              ferry_dataset_field(ds, 0)->shape[1] == 32);
        ferry_loader_opts o = test_loader_opts(32, 4);
        o.shuffle = 1;
        o.seed = 5;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        int seen[380] = {0};
        uint64_t total = 0, in_order = 0;
        ferry_batch *batch;
        int rc;
        while ((rc = ferry_loader_next(l, &batch)) == 0) {
            ferry_tensor data, label;
            CHECK_OK(ferry_batch_field(batch, 0, &data));
            CHECK_OK(ferry_batch_field(batch, 1, &label));
            const uint64_t *idx = ferry_batch_indices(batch);
            for (uint32_t s = 0; s < ferry_batch_size(batch); s++) {
                CHECK(idx[s] < 380);
                seen[idx[s]]++;
                int64_t lab = ((const int64_t *)label.data)[s];
                CHECK_U64(test_hash(0xcbf29ce484222325ull,
                                    (const uint8_t *)data.data + (size_t)s * 3072, 3072) ^
                              (uint64_t)lab,
                          want[idx[s]]);
                in_order += idx[s] == total;
                total++;
            }
            ferry_batch_release(batch);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_U64(total, 380);
        CHECK(in_order < 380);
        for (int i = 0; i < 380; i++)
            CHECK_EQ(seen[i], 1);
        ferry_loader_free(l);
        ferry_dataset_free(ds);
    }
    ferry_ctx_free(ctx);
    ferry_dataset_free(ref);
    test_remove_dir();
}

/* An LMDB of TensorProtos values, as Caffe2's make_image_db writes them: the
 * lmdb source decodes them as the other stores do. */
TEST(lmdb_of_tensorprotos_values)
{
    test_make_dir("kvdb");
    char mdb[512], env[512], spec[600];
    test_path("protos.minidb", mdb);
    test_path("env", env);
    fixture("minidb", mdb, "tensorprotos", 64);
    /* a small map: the sanitizers' builds cannot reserve ferry_db's 1 TiB */
    ferry_db *src;
    ferry_lmdb_writer *w;
    ferry_lmdb_writer_opts wo;
    ferry_lmdb_writer_opts_default(&wo);
    wo.path = env;
    wo.map_size = (uint64_t)64 << 20;
    CHECK_OK(ferry_db_open(&src, "minidb", mdb, FERRY_DB_READ));
    CHECK_OK(ferry_lmdb_writer_open(&w, &wo));
    for (uint64_t i = 0; i < ferry_db_count(src); i++) {
        const void *k, *v;
        size_t kl, vl;
        CHECK_OK(ferry_db_entry(src, i, &k, &kl, &v, &vl));
        CHECK_OK(ferry_lmdb_writer_put(w, k, kl, v, vl));
    }
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    ferry_db_close(src);
    snprintf(spec, sizeof spec, "lmdb:%s", env);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    check_fields_protos(ds);
    ferry_dataset_free(ds);
    read_all(spec, 64, check_protos_sample);
    test_remove_dir();
}

/* A stream's samples, checked by `check` with the entry number (pos.c). The
 * state saved after `save_at` samples resumes in a second iterator to the same
 * rest. */
static uint64_t read_stream(const char *spec, void (*check)(const ferry_sample *, int),
                            uint64_t save_at)
{
    ferry_dataset *none;
    ferry_stream *st;
    CHECK_OK(ferry_source_open(spec, &none, &st));
    CHECK(none == NULL && st != NULL);
    ferry_ctx *c;
    CHECK_OK(ferry_ctx_create(&c, 0, 0));
    slot x = {0};
    int nf = ferry_stream_nfields(st);
    for (int f = 0; f < nf; f++)
        x.data[f] = calloc(1, ferry_field_nbytes(ferry_stream_field(st, f)) + 1);
    ferry_sample s = {nf, x.data, x.length, {0}};
    ferry_stream_iter *it, *again;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    uint64_t n = 0, a[4096], b[4096], nb = 0;
    uint8_t state[4096];
    size_t len = 0;
    int rc;
    while ((rc = ferry_stream_next(it, &s, c)) == 0) {
        check(&s, (int)s.pos.c);
        a[n % 4096] = s.pos.a * 1000000 + s.pos.c;
        if (++n == save_at)
            CHECK_OK(ferry_stream_save(it, state, sizeof state, &len));
    }
    CHECK_RC(rc, FERRY_END);
    ferry_stream_close(it);
    if (save_at && save_at < n) {
        CHECK_OK(ferry_stream_open(st, 0, 1, 0, &again));
        CHECK_OK(ferry_stream_restore(again, state, len, c));
        while ((rc = ferry_stream_next(again, &s, c)) == 0) {
            check(&s, (int)s.pos.c);
            b[nb++ % 4096] = s.pos.a * 1000000 + s.pos.c;
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_U64(nb, n - save_at);
        for (uint64_t i = 0; i < nb && i < 4096; i++)
            CHECK_U64(b[i], a[save_at + i]);
        ferry_stream_close(again);
    }
    for (int f = 0; f < nf; f++)
        free(x.data[f]);
    ferry_ctx_free(c);
    ferry_stream_free(st);
    return n;
}

/* minidb files read front to back: gzip and zstd files (streams of themselves),
 * a directory of them, resumed from a saved state. */
TEST(minidb_streams_plain_gzip_and_zstd_files)
{
    test_make_dir("kvdb");
    char dir[512], path[600], spec[700], cmd[1400];
    test_path("parts", dir);
    CHECK_EQ(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/part-0", dir);
    fixture("minidb", path, "tensorprotos", 40);
    snprintf(cmd, sizeof cmd,
             "cp '%s' '%s/part-1' && cp '%s' '%s/part-2' && gzip '%s/part-1' && "
             "zstd -q --rm '%s/part-2'",
             path, dir, path, dir, dir, dir);
    if (system(cmd) != 0)
        SKIP("gzip and zstd are needed");
    snprintf(spec, sizeof spec, "minidb:%s/part-1.gz", dir);
    CHECK_U64(read_stream(spec, check_protos_sample, 17), 40);
    snprintf(spec, sizeof spec, "minidb:%s/part-2.zst", dir);
    CHECK_U64(read_stream(spec, check_protos_sample, 0), 40);
    snprintf(spec, sizeof spec, "minidb:%s,seed=4", dir);
    CHECK_U64(read_stream(spec, check_protos_sample, 55), 120);
    snprintf(spec, sizeof spec, "minidb:%s,stream=1", path);
    CHECK_U64(read_stream(spec, check_protos_sample, 3), 40);
    /* a map-style open of a stream is refused, saying why */
    ferry_dataset *ds;
    snprintf(spec, sizeof spec, "minidb:%s/part-1.gz", dir);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "stream");
    /* a cut-short compressed file: the entries before the cut, then an error naming it */
    snprintf(cmd, sizeof cmd, "zcat '%s/part-1.gz' | head -c 3000 | gzip > '%s/cut.gz'", dir,
             test_dir);
    CHECK_EQ(system(cmd), 0);
    snprintf(spec, sizeof spec, "minidb:%s/cut.gz", test_dir);
    ferry_dataset *none;
    ferry_stream *st;
    CHECK_OK(ferry_source_open(spec, &none, &st));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    ferry_ctx *c;
    CHECK_OK(ferry_ctx_create(&c, 0, 0));
    slot x = {0};
    for (int f = 0; f < ferry_stream_nfields(st); f++)
        x.data[f] = calloc(1, ferry_field_nbytes(ferry_stream_field(st, f)) + 1);
    ferry_sample s = {ferry_stream_nfields(st), x.data, x.length, {0}};
    int rc, good = 0;
    while ((rc = ferry_stream_next(it, &s, c)) == 0)
        check_protos_sample(&s, good++);
    CHECK(rc < 0 && good > 0 && good < 40);
    CHECK_CONTAINS(ferry_last_errmsg(), "cut.gz: entry");
    CHECK_CONTAINS(ferry_last_errmsg(), "run past the end of the file");
    for (int f = 0; f < FERRY_MAX_FIELDS; f++)
        free(x.data[f]);
    ferry_ctx_free(c);
    ferry_stream_close(it);
    ferry_stream_free(st);
    test_remove_dir();
}

/* One write of the minidb writer: 3000 entries added to what is there. */
static int add_entries(const char *path)
{
    ferry_db *db;
    ferry_db_txn *t;
    int rc = ferry_db_open(&db, "minidb", path, FERRY_DB_WRITE);
    if (rc < 0)
        return rc;
    if ((rc = ferry_db_begin(db, &t)) == 0) {
        for (int i = 0; rc == 0 && i < 3000; i++)
            rc = ferry_db_put(t, "new-key", 7, "0123456789abcdef0123456789abcdef", 32);
        if (rc == 0)
            rc = ferry_db_commit(t);
        else
            ferry_db_abort(t);
    }
    ferry_db_close(db);
    return rc;
}

static uint64_t entries_in(const char *path)
{
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
    uint64_t n = ferry_db_count(db);
    ferry_db_close(db);
    return n;
}

/* The minidb writer killed at every fault point (in a forked child): the file is
 * the old one or the whole new one, and the next write removes what the killed
 * one left. */
TEST(minidb_writer_killed_at_every_point)
{
    test_make_dir("kvdb");
    char path[512];
    test_path("k.minidb", path);
    ferry__fault_arm(FERRY__FAULT_FAIL, 0);
    CHECK_OK(add_entries(path));
    long points = ferry__fault_arm(FERRY__FAULT_OFF, 0);
    CHECK(points >= 4);
    int olds = 0, news = 0;
    for (long at = 1; at <= points; at++) {
        unlink(path);
        CHECK_OK(add_entries(path)); /* the old file: 3000 entries */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            ferry__fault_arm(FERRY__FAULT_KILL, at);
            add_entries(path);
            _exit(3);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        uint64_t n = entries_in(path);
        CHECK(n == 3000 || n == 6000);
        olds += n == 3000;
        news += n == 6000;
        CHECK_OK(add_entries(path));
        CHECK_U64(entries_in(path), n + 3000);
        DIR *d = opendir(test_dir);
        struct dirent *e;
        while ((e = readdir(d)))
            CHECK(!strstr(e->d_name, ".tmp."));
        closedir(d);
    }
    CHECK(olds > 0 && news > 0);
    test_remove_dir();
}

/* A build without librocksdb says so, for the source and the backend. */
TEST(rocksdb_without_the_library_says_so)
{
#ifdef FERRY_HAVE_ROCKSDB
    SKIP("this build has RocksDB");
#else
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_open(&ds, "rocksdb:/nonexistent/db"), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "this build of ferry has no RocksDB");
    ferry_db *db;
    CHECK_RC(ferry_db_open(&db, "rocksdb", "/nonexistent/db", FERRY_DB_READ), FERRY_ENOTSUP);
    CHECK_OK(ferry_db_open(&db, "rocksdb", "/nonexistent/db", FERRY_DB_WRITE));
    ferry_db_txn *t;
    CHECK_RC(ferry_db_begin(db, &t), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "install librocksdb-dev and rebuild");
    ferry_db_close(db);
#endif
}
