/*
 * The structure check in front of liblmdb: damaged environments are errors that
 * name the file and the page, never a fault. Small environments are written with
 * ferry's writer (liblmdb itself) and then damaged by hand at the bytes the check
 * reads; the Caffe environments of ../shared/testdata take 1,000 random page
 * mutations, each opened and read whole: each gives its data or an error naming
 * the file, and none crashes.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/lmdb.h>

#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#define LMDB_DIR FERRY_SHARED_DIR "/testdata/lmdb"
#define DB380 LMDB_DIR "/caffe_imageset_32x32_n380/data.mdb"
#define DB256 LMDB_DIR "/caffe_imageset_256x256_n8/data.mdb"
#define DBNAMED LMDB_DIR "/lmdbgo_named_db/data.mdb"
#define PSIZE 4096u

static uint16_t get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static void put16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}
static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* A data file of `n` entries (keys "key-%05d", values of vlen bytes), written
 * by liblmdb through ferry's writer as a single file (no_subdir). */
static void write_db(const char *path, int n, size_t vlen, const char *db)
{
    ferry_lmdb_writer_opts o;
    ferry_lmdb_writer_opts_default(&o);
    o.path = path;
    o.no_subdir = 1;
    o.db = db;
    ferry_lmdb_writer *w;
    CHECK_OK(ferry_lmdb_writer_open(&w, &o));
    uint8_t *v = malloc(vlen + 1);
    CHECK(v != NULL);
    for (int i = 0; i < n; i++) {
        char k[32];
        int kl = snprintf(k, sizeof k, "key-%05d", i);
        memset(v, 'a' + i % 26, vlen);
        CHECK_OK(ferry_lmdb_writer_put(w, k, (size_t)kl, v, vlen));
    }
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    free(v);
    char lock[600];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(lock);
}

/* Opens (plain keys and values) and reads every entry; returns the first error. */
static int open_read(const char *path, const char *db, int datum)
{
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    o.path = path;
    o.db = db;
    o.datum = datum;
    ferry_dataset *ds = NULL;
    int rc = ferry_dataset_lmdb(&ds, &o);
    if (rc < 0)
        return rc;
    int nf = ferry_dataset_nfields(ds);
    void *bufs[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s = {.data = bufs, .length = len, .nfields = nf};
    for (int f = 0; f < nf; f++)
        CHECK((bufs[f] = malloc(ferry_field_nbytes(ferry_dataset_field(ds, f)) + 1)) != NULL);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    for (uint64_t i = 0; i < ferry_dataset_len(ds) && rc == 0; i++)
        rc = ferry_dataset_get(ds, i, &s, ctx);
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++)
        free(bufs[f]);
    ferry_dataset_free(ds);
    return rc;
}

/* The first page (from 2) whose flags have `flag`, or 0. */
static size_t find_page(const uint8_t *file, size_t n, unsigned flag)
{
    for (size_t pg = 2; (pg + 1) * PSIZE <= n; pg++)
        if (get16(file + pg * PSIZE + 10) & flag)
            return pg;
    return 0;
}

/* Rewrites path with one change made by fn, and expects an error containing want. */
typedef void (*damage_fn)(uint8_t *file, size_t n);
static void expect_damage(const char *path, damage_fn fn, int code, const char *want)
{
    size_t n;
    uint8_t *file = test_read_file(path, &n);
    uint8_t *copy = malloc(n);
    CHECK(copy != NULL);
    memcpy(copy, file, n);
    fn(copy, n);
    test_write_file(path, copy, n);
    int rc = open_read(path, NULL, FERRY_LMDB_DATUM_OFF);
    if (rc != code)
        test_fail(__FILE__, __LINE__, "want %s (%s), got %d: %s", ferry_errname(code), want, rc,
                  ferry_last_errmsg());
    CHECK_CONTAINS(ferry_last_errmsg(), path);
    CHECK_CONTAINS(ferry_last_errmsg(), want);
    test_write_file(path, file, n);
    CHECK_OK(open_read(path, NULL, FERRY_LMDB_DATUM_OFF));
    free(copy);
    free(file);
}

#define BRANCH(f, n) (f + find_page(f, n, 0x01) * PSIZE)
#define LEAF(f, n) (f + find_page(f, n, 0x02) * PSIZE)

static void one_key_branch(uint8_t *f, size_t n)
{
    put16(BRANCH(f, n) + 12, 16 + 2); /* lower: one node */
}
static void node_past_page(uint8_t *f, size_t n)
{
    put16(LEAF(f, n) + 16, PSIZE - 4);
}
static void key_past_page(uint8_t *f, size_t n)
{
    uint8_t *leaf = LEAF(f, n);
    put16(leaf + get16(leaf + 16) + 6, 60000);
}
static void value_past_page(uint8_t *f, size_t n)
{
    uint8_t *leaf = LEAF(f, n);
    put16(leaf + get16(leaf + 16) + 2, 3); /* + 3 << 16 bytes */
}
static void child_past_file(uint8_t *f, size_t n)
{
    uint8_t *br = BRANCH(f, n);
    put16(br + get16(br + 18) + 2, 0x7fff); /* node 1's page number, high half */
}
static void child_is_parent(uint8_t *f, size_t n)
{
    size_t pg = find_page(f, n, 0x01);
    uint8_t *br = f + pg * PSIZE, *node = br + get16(br + 18);
    put16(node, (uint16_t)pg);
    put16(node + 2, 0);
    put16(node + 4, 0);
}
static void leaf_as_branch(uint8_t *f, size_t n)
{
    uint8_t *leaf = LEAF(f, n);
    put16(leaf + 10, 0x01);
}
static void wrong_page_number(uint8_t *f, size_t n)
{
    put64(LEAF(f, n), 99);
}
static void bad_page_size(uint8_t *f, size_t n)
{
    put16(f + 16 + 24, 1000);
}
static void meta_depth(uint8_t *f, size_t n)
{
    /* both meta pages: the main database's depth (record at 16 + 72, depth at 6) */
    put16(f + 16 + 72 + 6, 40);
    put16(f + PSIZE + 16 + 72 + 6, 40);
}
static void meta_root_meta(uint8_t *f, size_t n)
{
    put64(f + 16 + 72 + 40, 1);
    put64(f + PSIZE + 16 + 72 + 40, 1);
}
static void last_page_wraps(uint8_t *f, size_t n)
{
    /* both meta pages: the last page number (at 120), 2^64 - 1: one more wraps */
    put64(f + 16 + 120, UINT64_MAX);
    put64(f + PSIZE + 16 + 120, UINT64_MAX);
}
static void dupsort(uint8_t *f, size_t n)
{
    put16(f + 16 + 72 + 4, 0x04);
    put16(f + PSIZE + 16 + 72 + 4, 0x04);
}
static void dupdata_node(uint8_t *f, size_t n)
{
    uint8_t *leaf = LEAF(f, n);
    put16(leaf + get16(leaf + 16) + 4, 0x04);
}
static void overflow_past_file(uint8_t *f, size_t n)
{
    uint8_t *leaf = LEAF(f, n);
    for (unsigned i = 0; i < (get16(leaf + 12) - 16u) / 2; i++) {
        uint8_t *node = leaf + get16(leaf + 16 + 2 * i);
        if (get16(node + 4) & 1) {
            put64(node + 8 + get16(node + 6), n / PSIZE - 1); /* the run ends past the file */
            return;
        }
    }
    CHECK(!"no overflow node");
}

TEST(damaged_pages_are_errors_that_name_the_page)
{
    test_make_dir("lmdbcheck");
    char p[512], q[512];
    test_path("two-levels.mdb", p);
    write_db(p, 600, 40, NULL); /* a branch page over several leaves */
    CHECK_OK(open_read(p, NULL, FERRY_LMDB_DATUM_OFF));
    expect_damage(p, one_key_branch, FERRY_ECORRUPT, "a branch page with 1 node");
    expect_damage(p, node_past_page, FERRY_ECORRUPT, "node 0 at offset 4092 lies outside");
    expect_damage(p, key_past_page, FERRY_ECORRUPT, "its key of 60000 bytes runs past the page");
    expect_damage(p, value_past_page, FERRY_ECORRUPT, "runs past the page");
    expect_damage(p, child_past_file, FERRY_ECORRUPT, "a child page number outside the file's");
    expect_damage(p, child_is_parent, FERRY_ECORRUPT, "reached twice");
    expect_damage(p, leaf_as_branch, FERRY_ECORRUPT, "not a leaf page");
    expect_damage(p, wrong_page_number, FERRY_ECORRUPT, "the header says page 99");
    expect_damage(p, bad_page_size, FERRY_ECORRUPT, "a page size of 1000 bytes");
    expect_damage(p, meta_depth, FERRY_ECORRUPT, "a tree of depth 40");
    expect_damage(p, meta_root_meta, FERRY_ECORRUPT, "a root page number outside");
    expect_damage(p, last_page_wraps, FERRY_ECORRUPT, "holds 18446744073709551616 pages");
    expect_damage(p, dupsort, FERRY_EINVAL, "keeps duplicate keys (MDB_DUPSORT)");
    expect_damage(p, dupdata_node, FERRY_ECORRUPT, "holding duplicates");
    test_path("big.mdb", q);
    write_db(q, 3, 20000, NULL); /* values on overflow pages */
    CHECK_OK(open_read(q, NULL, FERRY_LMDB_DATUM_OFF));
    expect_damage(q, overflow_past_file, FERRY_ECORRUPT, "lies outside the file's");
    test_remove_dir();
}

TEST(a_named_database_is_checked_too)
{
    test_make_dir("lmdbcheck");
    char p[512];
    test_path("named.mdb", p);
    write_db(p, 300, 40, "images");
    CHECK_OK(open_read(p, "images", FERRY_LMDB_DATUM_OFF));
    size_t n;
    uint8_t *file = test_read_file(p, &n);
    /* break every leaf but the main database's (one leaf page holding the
     * record, its root in the newer meta page) */
    int broken = 0;
    uint64_t t0, t1, main_root;
    memcpy(&t0, file + 16 + 128, 8);
    memcpy(&t1, file + PSIZE + 16 + 128, 8);
    memcpy(&main_root, file + (t1 > t0 ? PSIZE : 0) + 16 + 72 + 40, 8);
    for (size_t pg = 2; (pg + 1) * PSIZE <= n; pg++) {
        uint8_t *pp = file + pg * PSIZE;
        if (pg != main_root && (get16(pp + 10) & 0x02) && ++broken)
            put16(pp + 16, PSIZE - 2);
    }
    CHECK(broken > 0);
    test_write_file(p, file, n);
    CHECK_RC(open_read(p, "images", FERRY_LMDB_DATUM_OFF), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "named.mdb: sub-database \"images\": page ");
    free(file);
    test_remove_dir();
}

TEST(an_empty_data_file_says_so)
{
    test_make_dir("lmdbcheck");
    char p[512];
    CHECK(mkdir(test_path("env", p), 0755) == 0);
    test_write_file(test_path("env/data.mdb", p), "", 0);
    CHECK_RC(open_read(test_path("env", p), NULL, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "env: the file is empty (not an LMDB file)");
    CHECK(strstr(ferry_last_errmsg(), "Bad file descriptor") == NULL);
    test_write_file(test_path("empty.mdb", p), "", 0);
    CHECK_RC(open_read(p, NULL, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "empty.mdb: the file is empty (not an LMDB file)");
    test_remove_dir();
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Damages one page of `file`: a few random bytes or 16-bit words, mostly in the
 * page's header and node offsets, sometimes anywhere, sometimes the whole page. */
static void mutate_page(uint8_t *file, size_t n, uint64_t *rng)
{
    size_t pages = n / PSIZE, structural[512], ns = 0;
    for (size_t pg = 0; pg < pages && ns < 512; pg++)
        if (get16(file + pg * PSIZE + 10) & (0x01 | 0x02 | 0x08))
            structural[ns++] = pg;
    size_t pg = (splitmix(rng) % 4 && ns) ? structural[splitmix(rng) % ns]
                                          : (size_t)(splitmix(rng) % pages);
    uint8_t *p = file + pg * PSIZE;
    unsigned kind = (unsigned)(splitmix(rng) % 8), count = 1 + (unsigned)(splitmix(rng) % 4);
    if (kind == 0) {
        for (size_t i = 0; i < PSIZE; i++)
            p[i] = (uint8_t)splitmix(rng);
        return;
    }
    for (unsigned c = 0; c < count; c++) {
        size_t at = kind < 4 ? splitmix(rng) % 64 : splitmix(rng) % (PSIZE - 1);
        uint64_t r = splitmix(rng);
        if (kind % 2)
            p[at] ^= (uint8_t)(1u << (r % 8));
        else if (kind == 2 || kind == 6)
            put16(p + at, (uint16_t)r);
        else
            p[at] = (uint8_t)r;
    }
}

/* Which mutation is being read, for a crash's last words. */
static volatile sig_atomic_t mutation_now = -1;

static void last_words(int sig)
{
    char msg[64];
    int n = snprintf(msg, sizeof msg, "died of signal %d on mutation %d\n", sig, (int)mutation_now);
    if (n > 0 && write(2, msg, (size_t)n) < 0)
        n = 0;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* 1,000 random page mutations of the Caffe environments (and the named one):
 * each opened as Datum and as plain keys and values and read whole, in this
 * process (a fork per mutation is slow under the sanitizers): a crash ends the
 * test, naming the mutation. Each must give the data or an error naming the
 * file. */
TEST(random_page_mutations_never_crash)
{
    test_need_shared(DB380);
    test_need_shared(DB256);
    test_need_shared(DBNAMED);
    test_make_dir("lmdbcheck");
    const char *srcs[3] = {DB380, DB256, DBNAMED};
    uint8_t *orig[3], *work = NULL;
    size_t sizes[3], cap = 0;
    for (int k = 0; k < 3; k++) {
        orig[k] = test_read_file(srcs[k], &sizes[k]);
        cap = sizes[k] > cap ? sizes[k] : cap;
    }
    CHECK((work = malloc(cap)) != NULL);
    signal(SIGSEGV, last_words);
    signal(SIGBUS, last_words);
    signal(SIGABRT, last_words);
    char p[512];
    test_path("mutated.mdb", p);
    uint64_t rng = 0x5eed1234;
    int errors = 0, clean = 0;
    for (int k = 0; k < 1000; k++) {
        int which = k % 5 < 2 ? 0 : k % 5 < 4 ? 1 : 2;
        memcpy(work, orig[which], sizes[which]);
        int rounds = 1 + (int)(splitmix(&rng) % 3);
        for (int r = 0; r < rounds; r++)
            mutate_page(work, sizes[which], &rng);
        test_write_file(p, work, sizes[which]);
        mutation_now = k;
        int bad = 0;
        for (int datum = 0; datum <= 2; datum += 2) {
            const char *db = which == 2 && datum ? "dbnew" : NULL;
            int rc = open_read(p, db, datum);
            if (rc < 0 && !strstr(ferry_last_errmsg(), "mutated.mdb"))
                test_fail(__FILE__, __LINE__,
                          "mutation %d of %s: an error that does not name "
                          "the file: %s",
                          k, srcs[which], ferry_last_errmsg());
            bad |= rc < 0;
        }
        if (bad)
            errors++;
        else
            clean++;
    }
    mutation_now = -1;
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    printf("1000 mutations: %d read whole, %d reported an error\n", clean, errors);
    CHECK(errors > 100 && clean > 0); /* the mutations did reach the structure */
    for (int k = 0; k < 3; k++)
        free(orig[k]);
    free(work);
    test_remove_dir();
}
