/*
 * The key/value DB interface, the same calls on both backends: write in a
 * transaction, read by position and with sharded cursors, abort, bad input.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include "core/internal.h"

static const char *backends[] = {"records", "lmdb"};

/* Keys "%08d" in increasing order (LMDB's order is the key order), values of
 * i % 300 bytes of i. */
static void write_entries(const char *backend, const char *path, int n)
{
    ferry_db *db;
    ferry_db_txn *t;
    CHECK_OK(ferry_db_open(&db, backend, path, FERRY_DB_WRITE));
    CHECK_OK(ferry_db_begin(db, &t));
    ferry_db_txn *t2;
    CHECK_RC(ferry_db_begin(db, &t2), FERRY_ESTATE); /* one at a time */
    for (int i = 0; i < n; i++) {
        char key[16];
        uint8_t value[300];
        snprintf(key, sizeof key, "%08d", i);
        memset(value, i & 0xff, sizeof value);
        CHECK_OK(ferry_db_put(t, key, 8, value, (size_t)(i % 300)));
    }
    CHECK_OK(ferry_db_commit(t));
    ferry_db_close(db);
}

static void check_entry(const void *k, size_t kl, const void *v, size_t vl, int i)
{
    char key[16];
    snprintf(key, sizeof key, "%08d", i);
    CHECK_EQ(kl, 8);
    CHECK(!memcmp(k, key, 8));
    CHECK_EQ(vl, i % 300);
    for (size_t j = 0; j < vl; j++)
        CHECK_EQ(((const uint8_t *)v)[j], i & 0xff);
}

TEST(the_same_calls_on_both_backends)
{
    test_make_dir("db");
    for (int b = 0; b < 2; b++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", test_dir, backends[b]);
        write_entries(backends[b], path, 1000);
        ferry_db *db;
        CHECK_OK(ferry_db_open(&db, backends[b], path, FERRY_DB_READ));
        CHECK_U64(ferry_db_count(db), 1000);
        const void *k, *v;
        size_t kl, vl;
        for (int i = 0; i < 1000; i += 7) {
            CHECK_OK(ferry_db_entry(db, (uint64_t)i, &k, &kl, &v, &vl));
            check_entry(k, kl, v, vl, i);
        }
        CHECK_RC(ferry_db_entry(db, 1000, &k, &kl, &v, &vl), FERRY_ERANGE);
        /* sharded cursors cover every entry once */
        int seen = 0;
        for (uint64_t s = 0; s < 3; s++) {
            ferry_db_cursor *c;
            CHECK_OK(ferry_db_cursor_open(db, s, 3, &c));
            int rc, i = (int)s;
            while ((rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) == 0) {
                check_entry(k, kl, v, vl, i);
                i += 3;
                seen++;
            }
            CHECK_RC(rc, FERRY_END);
            CHECK_OK(ferry_db_cursor_seek(c, 10)); /* entry s + 30 */
            CHECK_OK(ferry_db_cursor_next(c, &k, &kl, &v, &vl));
            check_entry(k, kl, v, vl, (int)s + 30);
            ferry_db_cursor_close(c);
        }
        CHECK_EQ(seen, 1000);
        ferry_db_cursor *c;
        CHECK_RC(ferry_db_cursor_open(db, 3, 3, &c), FERRY_EINVAL);
        ferry_db_txn *t;
        CHECK_RC(ferry_db_begin(db, &t), FERRY_ESTATE); /* opened for reading */
        ferry_db_close(db);
    }
    test_remove_dir();
}

TEST(abort_leaves_the_previous_state)
{
    test_make_dir("db");
    for (int b = 0; b < 2; b++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", test_dir, backends[b]);
        write_entries(backends[b], path, 10);
        ferry_db *db;
        ferry_db_txn *t;
        CHECK_OK(ferry_db_open(&db, backends[b], path, FERRY_DB_WRITE));
        CHECK_OK(ferry_db_begin(db, &t));
        CHECK_OK(ferry_db_put(t, "zzzzzzzz", 8, "x", 1));
        ferry_db_abort(t);
        ferry_db_close(db);
        CHECK_OK(ferry_db_open(&db, backends[b], path, FERRY_DB_READ));
        CHECK_U64(ferry_db_count(db), 10);
        ferry_db_close(db);
    }
    test_remove_dir();
}

TEST(bad_arguments_and_missing_databases)
{
    test_make_dir("db");
    ferry_db *db;
    CHECK_RC(ferry_db_open(&db, "zmqdb", test_dir, FERRY_DB_READ), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "unknown backend \"zmqdb\" (records, lmdb, minidb, leveldb, "
                   "rocksdb)");
    CHECK_RC(ferry_db_open(&db, "records", test_dir, 7), FERRY_EINVAL);
    char path[512];
    snprintf(path, sizeof path, "%s/none", test_dir);
    CHECK(ferry_db_open(&db, "records", path, FERRY_DB_READ) < 0);
    CHECK(db == NULL);
    snprintf(path, sizeof path, "%s/w", test_dir);
    CHECK_OK(ferry_db_open(&db, "records", path, FERRY_DB_WRITE));
    ferry_db_txn *t;
    CHECK_OK(ferry_db_begin(db, &t));
    char big[600];
    memset(big, 'k', sizeof big);
    CHECK_RC(ferry_db_put(t, big, 512, "v", 1), FERRY_EINVAL);
    CHECK_RC(ferry_db_put(t, big, 0, "v", 1), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "key of 0 bytes");
    ferry_db_abort(t);
    const void *k, *v;
    size_t kl, vl;
    CHECK_RC(ferry_db_entry(db, 0, &k, &kl, &v, &vl), FERRY_ESTATE);
    ferry_db_close(db);
    test_remove_dir();
}
