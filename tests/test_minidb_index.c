/*
 * The saved index of a minidb's entries (FILE.fidx, docs/databases.md): its
 * bytes, computed here independently; a stale, foreign or damaged index refused
 * or rebuilt, never read outside the file; the writers (ferry_minidb_index_build
 * and the minidb transaction) at every fault point.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include "core/internal.h"
#include "io/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* A minidb of n entries as Caffe2 frames them: key "k%05d" (6 bytes), value of
 * (i * 37) % 300 bytes, byte j of it (i + j) % 256. Returns its size; the entries'
 * offsets in off (n + 1, the last the size) when given. */
static size_t write_minidb(const char *path, int n, uint64_t *off)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        char key[16];
        uint8_t h[8], v[300];
        int kl = snprintf(key, sizeof key, "k%05d", i), vl = (i * 37) % 300;
        for (int j = 0; j < vl; j++)
            v[j] = (uint8_t)(i + j);
        put_u32(h, (uint32_t)kl);
        put_u32(h + 4, (uint32_t)vl);
        if (off)
            off[i] = at;
        CHECK(fwrite(h, 1, 8, f) == 8 && fwrite(key, 1, (size_t)kl, f) == (size_t)kl &&
              fwrite(v, 1, (size_t)vl, f) == (size_t)vl);
        at += 8 + (size_t)kl + (size_t)vl;
    }
    if (off)
        off[n] = at;
    CHECK(fclose(f) == 0);
    return at;
}

/* Every sample of spec (value=raw) against write_minidb's entries. */
static void read_raw(const char *spec, int n)
{
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), (uint64_t)n);
    CHECK_EQ(ferry_dataset_nfields(ds), 2);
    uint8_t key[64], val[400];
    int64_t len[2];
    void *data[2] = {key, val};
    ferry_sample s = {2, data, len, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    for (int i = 0; i < n; i++) {
        CHECK_OK(ferry_dataset_get(ds, (uint64_t)i, &s, ctx));
        char want[16];
        snprintf(want, sizeof want, "k%05d", i);
        CHECK_EQ(len[0], 6);
        CHECK(!memcmp(key, want, 6));
        CHECK_EQ(len[1], (i * 37) % 300);
        for (int j = 0; j < len[1]; j++)
            CHECK_EQ(val[j], (uint8_t)(i + j));
    }
    ferry_ctx_free(ctx);
    ferry_dataset_free(ds);
}

static void spec_of(char *spec, size_t n, const char *path, const char *more)
{
    snprintf(spec, n, "minidb:%s,value=raw%s", path, more);
}

static void no_temporaries(void)
{
    DIR *d = opendir(test_dir);
    struct dirent *e;
    while ((e = readdir(d)))
        CHECK(!strstr(e->d_name, ".tmp."));
    closedir(d);
}

TEST(index_bytes_are_the_entries_offsets)
{
    test_make_dir("mdbidx");
    char path[512], ip[512], spec[1200];
    uint64_t off[101];
    size_t size = write_minidb(test_path("a.minidb", path), 100, off);
    snprintf(ip, sizeof ip, "%s.fidx", path);
    uint64_t entries = 0;
    CHECK_OK(ferry_minidb_index_build(path, NULL, &entries));
    CHECK_U64(entries, 100);
    size_t n;
    uint8_t *ix = test_read_file(ip, &n);
    CHECK_EQ(n, 64 + 16 + 8 * 101);
    size_t fn;
    uint8_t *file = test_read_file(path, &fn);
    CHECK_EQ(fn, size);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    uint8_t want[64 + 16];
    memset(want, 0, sizeof want);
    memcpy(want, "FERRYMDX", 8);
    put_u32(want + 8, 1);
    put_u32(want + 12, 0);
    put_u64(want + 16, 100);
    put_u64(want + 24, size);
    put_u64(want + 32, (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec);
    size_t edge = size < 4096 ? size : 4096;
    put_u64(want + 40, fnv1a(FNV0, file, edge));
    put_u64(want + 48, fnv1a(FNV0, file + size - edge, edge));
    put_u64(want + 64, 6);   /* the longest key */
    put_u64(want + 72, 297); /* the largest value: entry 81's (81 * 37 % 300) */
    uint64_t check = fnv1a(fnv1a(FNV0, want, 56), want + 64, 16);
    put_u64(want + 56, check);
    CHECK(!memcmp(ix, want, sizeof want));
    for (int i = 0; i <= 100; i++)
        CHECK_U64(get_u64(ix + 80 + 8 * (size_t)i), off[i]);
    free(ix);
    free(file);
    /* read through it, and with index= elsewhere: the same samples as the scan */
    spec_of(spec, sizeof spec, path, "");
    read_raw(spec, 100);
    char other[512], more[600];
    CHECK_OK(ferry_minidb_index_build(path, test_path("other.idx", other), NULL));
    unlink(ip);
    read_raw(spec, 100); /* no index: the scan */
    snprintf(more, sizeof more, ",index=%s", other);
    spec_of(spec, sizeof spec, path, more);
    read_raw(spec, 100);
    /* the CLI writes the same bytes */
#ifdef FERRY_CLI
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s index minidb:%s >/dev/null", FERRY_CLI, path);
    CHECK(system(cmd) == 0);
    size_t n2;
    uint8_t *again = test_read_file(ip, &n2), *first = test_read_file(other, &n);
    CHECK(n2 == n && !memcmp(again, first, n));
    free(again);
    free(first);
#endif
    /* an empty minidb: no entries, the one offset 0 */
    char empty[512];
    test_write_file(test_path("e.minidb", empty), "", 0);
    CHECK_OK(ferry_minidb_index_build(empty, NULL, &entries));
    CHECK_U64(entries, 0);
    spec_of(spec, sizeof spec, empty, "");
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), 0);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* Read by a loader with two workers, in order and shuffled: the hints read the
 * mapping ahead, and every sample is the entry's. */
TEST(an_indexed_minidb_through_the_loader)
{
    test_make_dir("mdbidx");
    char path[512], spec[1200];
    int n = 3000;
    write_minidb(test_path("l.minidb", path), n, NULL);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    spec_of(spec, sizeof spec, path, "");
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        ferry_loader_opts o;
        ferry_loader_opts_default(&o);
        o.batch_size = 64;
        o.num_workers = 2;
        o.shuffle = shuffle;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        int seen = 0;
        while (ferry_loader_next(l, &b) == 0) {
            ferry_tensor val, lens;
            CHECK_OK(ferry_batch_field(b, 1, &val));
            CHECK_OK(ferry_batch_lengths(b, 1, &lens));
            const uint64_t *idx = ferry_batch_indices(b);
            for (uint32_t k = 0; k < ferry_batch_size(b); k++) {
                int i = (int)idx[k];
                const uint8_t *v = (const uint8_t *)val.data + (size_t)k * (size_t)val.strides[0];
                CHECK_EQ(((const int64_t *)lens.data)[k], (i * 37) % 300);
                for (int j = 0; j < (i * 37) % 300; j++)
                    CHECK_EQ(v[j], (uint8_t)(i + j));
            }
            seen += (int)ferry_batch_size(b);
            ferry_batch_release(b);
        }
        CHECK_EQ(seen, n);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(a_stale_index_is_refused_or_rebuilt)
{
    test_make_dir("mdbidx");
    char path[512], spec[1200];
    write_minidb(test_path("s.minidb", path), 50, NULL);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    write_minidb(path, 60, NULL); /* changed since */
    spec_of(spec, sizeof spec, path, "");
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "s.minidb.fidx is stale");
    CHECK_CONTAINS(ferry_last_errmsg(), "ferry index minidb:");
    ferry_db *db;
    CHECK_RC(ferry_db_open(&db, "minidb", path, FERRY_DB_READ), FERRY_ESTALE);
    spec_of(spec, sizeof spec, path, ",build=1");
    read_raw(spec, 60); /* written again, then read */
    spec_of(spec, sizeof spec, path, "");
    read_raw(spec, 60);
    /* the same size, touched: also stale */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "modified since");
    /* the index of another file of the same size and time */
    char b[512], ib[512], more[700];
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    write_minidb(test_path("b.minidb", b), 60, NULL);
    FILE *f = fopen(b, "r+b");
    CHECK(f && fseek(f, 9, SEEK_SET) == 0 && fputc('X', f) != EOF && fclose(f) == 0);
    struct timespec same[2] = {{7, 0}, {7, 0}};
    CHECK(utimensat(AT_FDCWD, path, same, 0) == 0 && utimensat(AT_FDCWD, b, same, 0) == 0);
    CHECK_OK(ferry_minidb_index_build(path, test_path("a.idx", ib), NULL));
    snprintf(more, sizeof more, ",index=%s", ib);
    spec_of(spec, sizeof spec, b, more);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "index of another file");
    /* a named index that is missing */
    snprintf(more, sizeof more, ",index=%s/none.idx", test_dir);
    spec_of(spec, sizeof spec, path, more);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "none.idx");
    CHECK_CONTAINS(ferry_last_errmsg(), "build=1");
    snprintf(more, sizeof more, ",index=%s/none.idx,build=1", test_dir);
    spec_of(spec, sizeof spec, path, more);
    read_raw(spec, 60);
    /* a stream takes no index */
    snprintf(spec, sizeof spec, "minidb:%s,stream=1,build=1", path);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    test_remove_dir();
}

/* A header whose check is made right again after a change, so that the checks
 * after it are reached. */
static void reseal(uint8_t *ix)
{
    put_u64(ix + 56, fnv1a(fnv1a(FNV0, ix, 56), ix + 64, 16));
}

TEST(a_damaged_index_is_named_and_never_read_outside_the_file)
{
    test_make_dir("mdbidx");
    char path[512], ip[512], spec[1200];
    write_minidb(test_path("d.minidb", path), 20, NULL);
    snprintf(ip, sizeof ip, "%s.fidx", path);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    size_t n;
    uint8_t *good = test_read_file(ip, &n), *bad = malloc(n);
    spec_of(spec, sizeof spec, path, "");
    ferry_dataset *ds;
    static const struct {
        size_t at;
        int cut;
        uint8_t value;
        int reseal;
        const char *says;
    } cases[] = {
        {0, 0, 'X', 0, "not a ferry minidb index (bad magic)"},
        {8, 0, 7, 0, "minidb index version 7"},
        {20, 0, 0x55, 0, "damaged header"},
        {72, 0, 0x55, 0, "damaged header"}, /* the extra words are under the check */
        {0, 8, 'F', 0, "truncated or padded"},
        {0, -70, 'F', 0, "too short"},     /* 70 bytes: no room for the extra words */
        {66, 0, 0x7f, 1, "longest key"},   /* a longest key past 1 MiB */
        {78, 0, 0x01, 1, "largest value"}, /* past 2^31 - 1 */
        {16, 0, 0xff, 1, "truncated or padded"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(bad, good, n);
        bad[cases[i].at] = cases[i].value;
        if (cases[i].reseal)
            reseal(bad);
        test_write_file(ip, bad,
                        cases[i].cut < 0 ? (size_t)-cases[i].cut : n - (size_t)cases[i].cut);
        CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "d.minidb.fidx");
        CHECK_CONTAINS(ferry_last_errmsg(), cases[i].says);
        /* build=1 does not overwrite a damaged index: it says so */
        char b[1300];
        snprintf(b, sizeof b, "%s,build=1", spec);
        CHECK_RC(ferry_dataset_open(&ds, b), FERRY_ECORRUPT);
    }
    /* a line index where the minidb's belongs */
    char txt[512];
    test_write_file(test_path("t.txt", txt), "a\nb\n", 4);
    CHECK_OK(ferry_line_index_build(txt, ip, NULL, NULL, NULL));
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "a line index, not a minidb index");
    CHECK_CONTAINS(ferry_last_errmsg(), "ferry index minidb:");
    /* offsets the header cannot catch: each entry is checked as it is read */
    uint64_t off[21];
    write_minidb(path, 20, off);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    free(good);
    good = test_read_file(ip, &n);
    static const struct {
        int entry;
        uint64_t value;
        const char *says;
    } offs[] = {
        {5, 1, "do not fill"}, /* inside entry 0 */
        {5, (uint64_t)1 << 40, "out of order or past the file"},
        {6, 0, "out of order"}, /* entry 5 ends before it starts */
    };
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
        memcpy(bad, good, n);
        put_u64(bad + 80 + 8 * (size_t)offs[i].entry, offs[i].value);
        test_write_file(ip, bad, n);
        CHECK_OK(ferry_dataset_open(&ds, spec));
        uint8_t key[64], val[400];
        int64_t len[2];
        void *data[2] = {key, val};
        ferry_sample s = {2, data, len, {0}};
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        int errors = 0, said = 0;
        for (uint64_t e = 0; e < 20; e++) {
            int rc = ferry_dataset_get(ds, e, &s, ctx);
            if (rc < 0) {
                CHECK_EQ(rc, FERRY_ECORRUPT);
                CHECK_CONTAINS(ferry_last_errmsg(), "d.minidb: entry");
                said += strstr(ferry_last_errmsg(), offs[i].says) != NULL;
                errors++;
            } else {
                CHECK_EQ(len[1], (int)((e * 37) % 300));
            }
        }
        CHECK(errors >= 1 && errors <= 2 && said >= 1); /* the entries either side of it */
        ferry_ctx_free(ctx);
        ferry_dataset_free(ds);
        /* the DB interface's cursor says the same */
        ferry_db *db;
        ferry_db_cursor *c;
        CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
        CHECK_OK(ferry_db_cursor_open(db, 0, 1, &c));
        int rc;
        const void *k, *v;
        size_t kl, vl;
        while ((rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) == 0)
            ;
        CHECK_RC(rc, FERRY_ECORRUPT);
        ferry_db_cursor_close(c);
        ferry_db_close(db);
    }
    free(good);
    free(bad);
    test_remove_dir();
}

/* ferry_minidb_index_build failing at every fault point: the index is the old
 * one, whole, or the new one; never a temporary. */
TEST(index_writer_faults_leave_the_old_index)
{
    test_make_dir("mdbidx");
    char path[512], ip[512];
    write_minidb(test_path("f.minidb", path), 40, NULL);
    snprintf(ip, sizeof ip, "%s.fidx", path);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    size_t n0;
    uint8_t *old = test_read_file(ip, &n0);
    write_minidb(path, 70, NULL);
    int failed = 0;
    for (long point = 1; point < 100; point++) {
        ferry__fault_arm(FERRY__FAULT_FAIL, point);
        int rc = ferry_minidb_index_build(path, NULL, NULL);
        long counted = ferry__fault_arm(FERRY__FAULT_OFF, 0);
        size_t n;
        uint8_t *now = test_read_file(ip, &n);
        if (rc == 0) {
            CHECK(counted < point);
            CHECK(failed >= 3); /* create, writes, fsync, rename, the directory's fsync */
            free(now);
            break;
        }
        failed++;
        ferry_db *db;
        if (n == n0 && !memcmp(now, old, n)) {
            CHECK_RC(ferry_db_open(&db, "minidb", path, FERRY_DB_READ), FERRY_ESTALE);
        } else { /* renamed into place: only the directory's fsync failed */
            CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
            CHECK_U64(ferry_db_count(db), 70);
            ferry_db_close(db);
        }
        free(now);
        no_temporaries();
    }
    free(old);
    char spec[1200];
    spec_of(spec, sizeof spec, path, "");
    read_raw(spec, 70);
    test_remove_dir();
}

/* The index writer killed at every point: the index is the old one or the new
 * one, and the next build removes what the killed one left. */
TEST(index_writer_killed_at_every_point)
{
    test_make_dir("mdbidx");
    char path[512], ip[512];
    test_path("k.minidb", path);
    snprintf(ip, sizeof ip, "%s.fidx", path);
    write_minidb(path, 30, NULL);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    write_minidb(path, 45, NULL);
    ferry__fault_arm(FERRY__FAULT_FAIL, 0);
    char scratch[512];
    CHECK_OK(ferry_minidb_index_build(path, test_path("scratch.idx", scratch), NULL));
    long points = ferry__fault_arm(FERRY__FAULT_OFF, 0);
    CHECK(points >= 4);
    int olds = 0, news = 0;
    for (long at = 1; at <= points; at++) {
        write_minidb(path, 30, NULL);
        CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
        write_minidb(path, 45, NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            ferry__fault_arm(FERRY__FAULT_KILL, at);
            ferry_minidb_index_build(path, NULL, NULL);
            _exit(3);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        ferry_db *db;
        int rc = ferry_db_open(&db, "minidb", path, FERRY_DB_READ);
        CHECK(rc == 0 || rc == FERRY_ESTALE); /* the new index, or the old one: stale */
        if (rc == 0) {
            CHECK_U64(ferry_db_count(db), 45);
            ferry_db_close(db);
        }
        news += rc == 0;
        olds += rc == FERRY_ESTALE;
        CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
        no_temporaries();
    }
    CHECK(olds > 0 && news > 0);
    test_remove_dir();
}

/* One transaction of the minidb writer: `count` entries added. */
static int add(const char *path, int count)
{
    ferry_db *db;
    ferry_db_txn *t;
    int rc = ferry_db_open(&db, "minidb", path, FERRY_DB_WRITE);
    if (rc < 0)
        return rc;
    if ((rc = ferry_db_begin(db, &t)) == 0) {
        for (int i = 0; rc == 0 && i < count; i++)
            rc = ferry_db_put(t, "key", 3, "a value", 7);
        rc = rc == 0 ? ferry_db_commit(t) : (ferry_db_abort(t), rc);
    }
    ferry_db_close(db);
    return rc;
}

/* A transaction on an indexed minidb writes its index again: at every fault
 * point the file is the old or the new one, and the index beside it is either
 * missing or that file's; never a stale one. Without an index, none is made. */
TEST(the_minidb_writer_keeps_its_index_true)
{
    test_make_dir("mdbidx");
    char path[512], ip[512];
    test_path("w.minidb", path);
    snprintf(ip, sizeof ip, "%s.fidx", path);
    CHECK_OK(add(path, 10));
    CHECK(access(ip, F_OK) != 0);
    CHECK_OK(ferry_minidb_index_build(path, NULL, NULL));
    CHECK_OK(add(path, 10));
    ferry_db *db;
    CHECK_OK(ferry_db_open(&db, "minidb", path, FERRY_DB_READ));
    CHECK_U64(ferry_db_count(db), 20);
    ferry_db_close(db);
    CHECK(access(ip, F_OK) == 0);
    uint64_t expect = 20;
    for (long point = 1; point < 200; point++) {
        bool indexed = access(ip, F_OK) == 0;
        ferry__fault_arm(FERRY__FAULT_FAIL, point);
        int rc = add(path, 10);
        long counted = ferry__fault_arm(FERRY__FAULT_OFF, 0);
        ferry_db *r;
        CHECK_OK(ferry_db_open(&r, "minidb", path, FERRY_DB_READ)); /* never stale */
        uint64_t got = ferry_db_count(r);
        ferry_db_close(r);
        CHECK(got == expect || got == expect + 10);
        expect = got;
        no_temporaries();
        if (rc == 0) {
            CHECK(counted < point);
            CHECK(access(ip, F_OK) == 0 || !indexed);
            break;
        }
        /* a failed rewrite of the index says so (the entries may be in) */
        if (indexed && access(ip, F_OK) != 0)
            CHECK(strstr(ferry_last_errmsg(), "w.minidb") != NULL);
    }
    test_remove_dir();
}

/* A directory of minidb files is a stream over them: their saved indexes beside
 * them are not among its files. */
TEST(a_directory_stream_passes_over_saved_indexes)
{
    test_make_dir("mdbidx");
    char a[512], spec[700];
    write_minidb(test_path("a.minidb", a), 25, NULL);
    CHECK_OK(ferry_minidb_index_build(a, NULL, NULL));
    snprintf(spec, sizeof spec, "minidb:%s,value=raw", test_dir);
    ferry_dataset *ds;
    ferry_stream *st;
    CHECK_OK(ferry_source_open(spec, &ds, &st));
    CHECK(st != NULL);
    ferry_stream_iter *it;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    uint8_t key[1100], val[400];
    int64_t len[2];
    void *data[2] = {key, val};
    ferry_sample s = {2, data, len, {0}};
    int n = 0, rc;
    while ((rc = ferry_stream_next(it, &s, ctx)) == 0)
        n++;
    CHECK_RC(rc, FERRY_END);
    CHECK_EQ(n, 25);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    test_remove_dir();
}
