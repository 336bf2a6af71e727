/*
 * Sets of record shards: the map-style dataset (global index, shard_id/num_shards),
 * the shuffled stream, manifests that disagree with the files, ferry pack / verify
 * / ls / stat from the command line, and a pack killed at any moment.
 */
#include "harness.h"

#include <ferry/ferry.h>

#include "formats/records_internal.h"
#include "io/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Packs N synthetic samples (label = index) into test_dir/out with ~K records a shard. */
static void pack(const char *out, int n, int per_shard, const char *extra)
{
    CHECK_EQ(sh("%s pack synthetic:%d,bytes=24,var=9,classes=1000000 '%s/%s' --shard-records %d "
                "--no-progress %s > /dev/null",
                FERRY_CLI, n, test_dir, out, per_shard, extra),
             0);
}

/* The path of shard k of n of set "data" in dir (its name carries the set's
 * generation), or "" when there is none. */
static const char *shard_path(const char *dir, int k, int n)
{
    static char out[2][600];
    static int next;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/data-*-%05d-of-%05d.ferry", dir, k, n);
    char *o = out[next++ % 2];
    o[0] = '\0';
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0) {
        CHECK_U64(g.gl_pathc, 1);
        snprintf(o, 600, "%s", g.gl_pathv[0]);
    }
    globfree(&g);
    return o;
}

/* The label (field 0) of record i of a set of any schema that starts with it. */
static int64_t label_of_any(ferry_dataset *ds, uint64_t i)
{
    uint8_t buf[4][256];
    int64_t lens[4] = {0};
    void *p[4] = {buf[0], buf[1], buf[2], buf[3]};
    int nf = ferry_dataset_nfields(ds);
    CHECK(nf <= 4);
    for (int f = 0; f < nf; f++)
        CHECK(ferry_field_nbytes(ferry_dataset_field(ds, f)) <= 256);
    ferry_sample s = {nf, p, lens, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
    ferry_ctx_free(ctx);
    int64_t label;
    memcpy(&label, buf[0], sizeof label);
    return label;
}

static int64_t label_of(ferry_dataset *ds, uint64_t i)
{
    uint8_t data[24], text[9];
    int64_t label, lens[3];
    void *p[3] = {data, &label, text};
    ferry_sample s = {3, p, lens, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
    ferry_ctx_free(ctx);
    return label;
}

TEST(pack_then_read_the_set_through_one_global_index)
{
    test_make_dir("sets");
    pack("set", 1000, 300, "--zstd 3");
    char path[512];
    snprintf(path, sizeof path, "%s/set/data.manifest", test_dir);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    snprintf(path, sizeof path, "%s/set", test_dir);
    CHECK(stat(shard_path(path, 3, 4), &st) == 0);
    snprintf(path, sizeof path, "%s/set", test_dir);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_records(&ds, path, 0, 1));
    CHECK_U64(ferry_dataset_len(ds), 1000);
    CHECK_EQ(ferry_dataset_nfields(ds), 3);
    CHECK(ferry_dataset_field(ds, 2)->variable);
    for (uint64_t i = 0; i < 1000; i += 37)
        CHECK_EQ(label_of(ds, i), (int64_t)i);
    CHECK_EQ(label_of(ds, 999), 999);
    ferry_dataset_free(ds);
    /* Caffe2's DBReader sharding: shard k of n takes shards k, k+n, ... */
    uint64_t total = 0;
    for (uint64_t k = 0; k < 3; k++) {
        CHECK_OK(ferry_dataset_records(&ds, path, k, 3));
        total += ferry_dataset_len(ds);
        if (k == 0)
            CHECK_EQ(label_of(ds, 300), 900); /* shards 0 and 3 */
        ferry_dataset_free(ds);
    }
    CHECK_U64(total, 1000);
    CHECK_RC(ferry_dataset_records(&ds, path, 4, 5), FERRY_EINVAL); /* 4 shards: none for 4 */
    CHECK_RC(ferry_dataset_records(&ds, path, 3, 3), FERRY_EINVAL);
    test_remove_dir();
}

TEST(the_loader_and_bench_read_a_packed_set_like_its_source)
{
    test_make_dir("sets");
    pack("set", 2000, 700, "");
    char out[4096], cmd[1024];
    FILE *p;
    /* the same bytes, in the same order, as the source itself */
    snprintf(
        cmd, sizeof cmd,
        "%s bench records:%s/set --batch 100 --workers 2 --digest --no-progress | grep digest; "
        "%s bench synthetic:2000,bytes=24,var=9,classes=1000000 --batch 100 --workers 0 "
        "--digest --no-progress | grep digest",
        FERRY_CLI, test_dir, FERRY_CLI);
    p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    char *second = strchr(out, '\n');
    CHECK(second != NULL);
    CHECK(!strncmp(out, second + 1, (size_t)(second - out)));
    /* as a stream: every record once, shard order shuffled per epoch */
    char path[512];
    snprintf(path, sizeof path, "%s/set", test_dir);
    ferry_stream *st;
    CHECK_OK(ferry_stream_records(&st, path, 7));
    ferry_loader_opts o = test_stream_opts(64, 2, 2);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    uint8_t seen[2000] = {0};
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, 1, &t));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            int64_t label = ((int64_t *)t.data)[i];
            CHECK(label >= 0 && label < 2000 && !seen[label]);
            seen[label] = 1;
        }
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    for (int i = 0; i < 2000; i++)
        CHECK(seen[i]);
    ferry_loader_free(l);
    ferry_stream_free(st);
    test_remove_dir();
}

TEST(manifest_disagreements_are_errors)
{
    test_make_dir("sets");
    pack("set", 600, 200, "");
    char path[512], shard[600];
    snprintf(path, sizeof path, "%s/set", test_dir);
    ferry_dataset *ds;
    /* a shard the manifest names is missing */
    snprintf(shard, sizeof shard, "%s", shard_path(path, 1, 3));
    CHECK_EQ(sh("mv '%s' '%s.away'", shard, shard), 0);
    CHECK_RC(ferry_dataset_records(&ds, path, 0, 1), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), strrchr(shard, '/') + 1);
    CHECK_CONTAINS(ferry_last_errmsg(), ", which is missing");
    /* a shard of another size */
    CHECK_EQ(sh("mv '%s.away' '%s' && printf x >> '%s'", shard, shard, shard), 0);
    CHECK_RC(ferry_dataset_records(&ds, path, 0, 1), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "the manifest says");
    test_remove_dir();
}

TEST(verify_reports_file_record_and_offset)
{
    test_make_dir("sets");
    pack("set", 500, 250, "");
    char out[8192], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s verify '%s/set'", FERRY_CLI, test_dir);
    CHECK_EQ(sh("%s > /dev/null", cmd), 0);
    /* flip one byte in the middle of a shard's records */
    char shard[600];
    snprintf(out, sizeof out, "%s/set", test_dir);
    snprintf(shard, sizeof shard, "%s", shard_path(out, 0, 2));
    FILE *f = fopen(shard, "r+b");
    CHECK(f != NULL);
    fseek(f, 4000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 4000, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    CHECK_EQ(WEXITSTATUS(st), 1);
    CHECK_CONTAINS(out, "-00000-of-00002.ferry: record ");
    CHECK_CONTAINS(out, "at offset ");
    CHECK_CONTAINS(out, "file CRC-32C"); /* the manifest's CRC disagrees too */
    /* ls and stat describe the set */
    snprintf(cmd, sizeof cmd, "%s stat '%s/set'", FERRY_CLI, test_dir);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    CHECK_CONTAINS(out, "2 shards, 500 records");
    CHECK_CONTAINS(out, "field text");
    test_remove_dir();
}

/* A writer killed at any moment leaves either no shard set or a whole one. */
TEST(a_pack_killed_at_any_moment_leaves_no_set_or_a_whole_one)
{
    test_make_dir("sets");
    /* time a pack that runs to the end, then kill others across that span */
    uint64_t t0 = ferry_now_ns();
    CHECK_EQ(sh("%s pack synthetic:60000,bytes=200 '%s/full' --shard-records 7000 --no-progress "
                "> /dev/null",
                FERRY_CLI, test_dir),
             0);
    uint64_t span_us = (ferry_now_ns() - t0) / 1000;
    int whole = 0, none = 0;
    for (int k = 0; k < 14; k++) {
        char out[512];
        snprintf(out, sizeof out, "%s/kill%d", test_dir, k);
        pid_t pid = fork();
        if (pid == 0) {
            freopen("/dev/null", "w", stdout);
            execl(FERRY_CLI, FERRY_CLI, "pack", "synthetic:60000,bytes=200", out, "--shard-records",
                  "7000", "--no-progress", (char *)NULL);
            _exit(127);
        }
        usleep((useconds_t)(span_us * (uint64_t)k / 5)); /* from the start to well past the end */
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        char manifest[600];
        snprintf(manifest, sizeof manifest, "%s/data.manifest", out);
        struct stat sb;
        ferry_dataset *ds;
        if (stat(manifest, &sb) == 0) {
            CHECK_OK(ferry_dataset_records(&ds, out, 0, 1)); /* a whole set */
            CHECK_U64(ferry_dataset_len(ds), 60000);
            ferry_dataset_free(ds);
            CHECK_EQ(sh("%s verify '%s' > /dev/null", FERRY_CLI, out), 0);
            whole++;
        } else {
            /* no manifest: no reader may take what is there for a whole set */
            int rc = ferry_dataset_records(&ds, out, 0, 1);
            if (rc == 0) {
                /* only possible if every shard was renamed: then all are whole */
                CHECK_U64(ferry_dataset_len(ds), 60000);
                ferry_dataset_free(ds);
            }
            none++;
        }
    }
    CHECK(none > 0);  /* the early kills */
    CHECK(whole > 0); /* the late ones */
    printf("killed packs: %d whole sets, %d without a manifest\n", whole, none);
    test_remove_dir();
}

/* ---- Replacing a set: the fault points of the file layer, one by one ---- */

static const ferry_field replace_fields[2] = {
    {"label", FERRY_I64, 0, {0}, 0},
    {"text", FERRY_U8, 1, {16}, 1},
};

/* Writes n records (label base + i, text of i % 17 bytes) into dir, per_shard a
 * shard. Returns the commit's status (or the first failure). */
static int write_labels(const char *dir, int64_t base, int n, int per_shard, int level)
{
    ferry_writer_opts o = {dir, NULL, replace_fields, 2, 0, (uint64_t)per_shard, level};
    ferry_record_writer *w;
    int rc = ferry_writer_open(&w, &o);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        int64_t label = base + i, len[2] = {0, i % 17 < 16 ? i % 17 : 16};
        uint8_t text[16];
        memset(text, (int)(label & 0x7f), sizeof text);
        void *p[2] = {&label, text};
        ferry_sample s = {2, p, len, {0}};
        if ((rc = ferry_writer_append(w, &s)) < 0) {
            ferry_writer_abort(w);
            return rc;
        }
    }
    return ferry_writer_commit(w);
}

/* The set in dir is whole: either the old one (1000 + i, old_n records) or the new
 * one (2000 + i, new_n); returns 0 for the old, 1 for the new. Reading it through
 * the dataset, and `verify` finding nothing wrong. */
static int whole_set(const char *dir, int old_n, int new_n)
{
    ferry_dataset *ds;
    int rc = ferry_dataset_records(&ds, dir, 0, 1);
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "the set does not open: %s", ferry_last_errmsg());
    uint64_t n = ferry_dataset_len(ds);
    int64_t first = label_of_any(ds, 0);
    int which = first == 2000;
    CHECK(first == 1000 || first == 2000);
    CHECK_U64(n, (uint64_t)(which ? new_n : old_n));
    for (uint64_t i = 0; i < n; i++)
        if (label_of_any(ds, i) != first + (int64_t)i)
            test_fail(__FILE__, __LINE__, "record %llu: label %lld in a set starting at %lld",
                      (unsigned long long)i, (long long)label_of_any(ds, i), (long long)first);
    ferry_dataset_free(ds);
    uint64_t problems = 1, records = 0;
    CHECK_OK(ferry_records_verify(dir, NULL, NULL, &problems, &records));
    CHECK_U64(problems, 0);
    CHECK_U64(records, n);
    return which;
}

/* Files in dir. */
static int files_in(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A set as writers wrote it before set identities (docs/record-format.md): shards
 * NAME-%05d-of-%05d.ferry without flag bit 1, one field "label" (i64), and a
 * version 1 manifest. Labels base + i. */
static void put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void write_legacy_set(const char *dir, int64_t base, int n, int per_shard)
{
    CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST);
    int nshards = (n + per_shard - 1) / per_shard;
    char manifest[8192];
    int len =
        snprintf(manifest, sizeof manifest, "ferry-records 1\nshards %d records %d\n", nshards, n);
    for (int k = 0; k < nshards; k++) {
        int first = k * per_shard, count = n - first < per_shard ? n - first : per_shard;
        uint8_t file[8192];
        size_t size = 0;
        /* header and schema: one field "label", i64, a scalar */
        static const uint8_t schema[11] = {1, 0, 5, 'l', 'a', 'b', 'e', 'l', FERRY_I64, 0, 0};
        memcpy(file, "FERRYREC", 8);
        put_u32(file + 8, 1);
        put_u32(file + 12, 0);
        put_u32(file + 16, sizeof schema);
        memcpy(file + 24, schema, sizeof schema);
        put_u32(file + 20, ferry_crc32c(ferry_crc32c(0, file, 20), schema, sizeof schema));
        memset(file + 35, 0, 5);
        size = 40;
        uint64_t offsets[64];
        CHECK(count <= 64);
        for (int i = 0; i < count; i++) {
            int64_t label = base + first + i;
            uint8_t *r = file + size;
            offsets[i] = size;
            put_u32(r, 8);
            put_u32(r + 4, 8);
            memcpy(r + 16, &label, 8);
            put_u32(r + 8, ferry_crc32c(0, r + 16, 8));
            put_u32(r + 12, ferry_crc32c(0, r, 12));
            size += 24;
        }
        uint64_t ix = size;
        memcpy(file + size, offsets, 8 * (size_t)count);
        size += 8 * (size_t)count;
        uint8_t *t = file + size;
        put_u64(t, (uint64_t)count);
        put_u64(t + 8, ix);
        put_u32(t + 16, ferry_crc32c(0, offsets, 8 * (size_t)count));
        put_u32(t + 20, ferry_crc32c(0, t, 20));
        memcpy(t + 24, "FERRYEND", 8);
        size += 32;
        char name[64], path[700];
        snprintf(name, sizeof name, "data-%05d-of-%05d.ferry", k, nshards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        test_write_file(path, file, size);
        len += snprintf(manifest + len, sizeof manifest - (size_t)len, "%s %d %zu %08x\n", name,
                        count, size, ferry_crc32c(0, file, size));
    }
    char path[700];
    snprintf(path, sizeof path, "%s/data.manifest", dir);
    test_write_file(path, manifest, (size_t)len);
}

/* One sweep: an old set of old_n records (none when old_n is 0; of the format
 * before set identities with legacy) replaced by a new one of new_n, failing
 * (FERRY__FAULT_FAIL) or killed (FERRY__FAULT_KILL, in a forked child) at each
 * fault point of the replacement in turn. Returns the number of points. */
static long sweep_over(int mode, bool legacy, int old_n, int old_per, int new_n, int new_per,
                       int level)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sweep", test_dir);
#define OLD_SET()                                                                                  \
    do {                                                                                           \
        if (legacy)                                                                                \
            write_legacy_set(dir, 1000, old_n, old_per);                                           \
        else if (old_n)                                                                            \
            CHECK_OK(write_labels(dir, 1000, old_n, old_per, level));                              \
    } while (0)
    CHECK_EQ(sh("rm -rf '%s'", dir), 0);
    OLD_SET();
    ferry__fault_arm(FERRY__FAULT_FAIL, 0);
    CHECK_OK(write_labels(dir, 2000, new_n, new_per, level));
    long points = ferry__fault_arm(FERRY__FAULT_OFF, 0);
    int new_files = 1 + (new_n + new_per - 1) / new_per;
    int olds = 0, news = 0;
    for (long at = 1; at <= points; at++) {
        CHECK_EQ(sh("rm -rf '%s'", dir), 0);
        OLD_SET();
        int rc = 0;
        if (mode == FERRY__FAULT_FAIL) {
            ferry__fault_arm(FERRY__FAULT_FAIL, at);
            rc = write_labels(dir, 2000, new_n, new_per, level);
            ferry__fault_arm(FERRY__FAULT_OFF, 0);
        } else {
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                ferry__fault_arm(FERRY__FAULT_KILL, at);
                write_labels(dir, 2000, new_n, new_per, level);
                _exit(3); /* not killed: a point that was not reached */
            }
            int st;
            CHECK(waitpid(pid, &st, 0) == pid);
            if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
                test_fail(__FILE__, __LINE__, "point %ld: the writer was not killed", at);
        }
        struct stat sb;
        char manifest[700];
        snprintf(manifest, sizeof manifest, "%s/data.manifest", dir);
        if (!old_n && stat(manifest, &sb) != 0) {
            /* no set before, none now: nothing a reader takes for one */
            ferry_dataset *ds;
            CHECK(ferry_dataset_records(&ds, dir, 0, 1) < 0);
            olds++;
        } else {
            int which = whole_set(dir, old_n, new_n);
            if (mode == FERRY__FAULT_FAIL && rc == 0)
                CHECK_EQ(which, 1);
            if (mode == FERRY__FAULT_FAIL && rc < 0 && which == 1)
                /* only a failed sync of the directory after the switch */
                CHECK_CONTAINS(ferry_last_errmsg(), "the new set is in place");
            olds += which == 0;
            news += which == 1;
        }
        /* the next write removes whatever this one left */
        CHECK_OK(write_labels(dir, 2000, new_n, new_per, level));
        CHECK_EQ(whole_set(dir, old_n, new_n), 1);
        CHECK_EQ(files_in(dir), new_files);
    }
    CHECK(olds > 0 && news > 0);
    return points;
#undef OLD_SET
}

static long sweep(int mode, int old_n, int old_per, int new_n, int new_per, int level)
{
    return sweep_over(mode, false, old_n, old_per, new_n, new_per, level);
}

/* Every fault point of a replacement, in five settings; the four tests below make
 * 320 points in all, each with the invariant checked, then a clean rewrite. */
static long sweep_all(int mode, bool first_half)
{
    test_make_dir("sets");
    long total = 0;
    if (first_half) {
        total += sweep(mode, 40, 7, 25, 10, 0); /* fewer shards than before */
        total += sweep(mode, 12, 6, 30, 6, 3);  /* more, compressed */
        total += sweep(mode, 0, 1, 20, 8, 0);   /* no set before */
    } else {
        total += sweep_over(mode, true, 30, 4, 20, 10, 0); /* a set of the format before */
        total += sweep(mode, 25, 5, 9, 100, 1);            /* one shard for five */
    }
    printf("fault points swept: %ld\n", total);
    test_remove_dir();
    return total;
}

TEST(replacing_a_set_failing_at_each_fault_point_leaves_one_whole_set)
{
    CHECK(sweep_all(FERRY__FAULT_FAIL, true) >= 100);
}

TEST(replacing_a_set_killed_at_each_fault_point_leaves_one_whole_set)
{
    CHECK(sweep_all(FERRY__FAULT_KILL, true) >= 100);
}

TEST(replacing_an_older_or_larger_set_failing_at_each_fault_point)
{
    CHECK(sweep_all(FERRY__FAULT_FAIL, false) >= 50);
}

TEST(replacing_an_older_or_larger_set_killed_at_each_fault_point)
{
    CHECK(sweep_all(FERRY__FAULT_KILL, false) >= 50);
}

/* A 2 KB shard whose variable field claims a 256 MiB bound: bench refuses it at
 * once, naming the field, its bound, the batch size and the budget, instead of
 * allocating and zeroing 64 samples at the bound for every buffer. */
TEST(bench_refuses_a_schema_over_the_memory_budget_at_once)
{
    test_make_dir("sets");
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "text");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = (int64_t)256 << 20;
    f.variable = 1;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/wide", test_dir);
    ferry_writer_opts o = {dir, NULL, &f, 1, 0, 0, 0};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &o));
    uint8_t text[100];
    memset(text, 'x', sizeof text);
    for (int i = 0; i < 10; i++) {
        int64_t len = 10 * i;
        void *p[1] = {text};
        ferry_sample s = {1, p, &len, {0}};
        CHECK_OK(ferry_writer_append(w, &s));
    }
    CHECK_OK(ferry_writer_commit(w));
    struct stat st;
    CHECK(stat(shard_path(dir, 0, 1), &st) == 0);
    CHECK(st.st_size < 2048);
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s bench records:%s --batch 64 --no-progress 2>&1", FERRY_CLI, dir);
    uint64_t t0 = ferry_now_ns();
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    uint64_t ms = (ferry_now_ns() - t0) / 1000000;
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    CHECK(ms < 2000);
    CHECK_CONTAINS(out, "field \"text\"");
    CHECK_CONTAINS(out, "bound 268435456 rows");
    CHECK_CONTAINS(out, "batch_size 64");
    CHECK_CONTAINS(out, "memory budget");
    printf("%s(in %llu ms)\n", out, (unsigned long long)ms);
    test_remove_dir();
}

/* A FIFO where a shard, a lines file or a line index is expected is refused at
 * once (an open for reading would wait for a writer forever). */
TEST(a_fifo_where_a_file_is_expected_is_refused_at_once)
{
    test_make_dir("sets");
    char fifo[600], dir[600], text[600];
    snprintf(fifo, sizeof fifo, "%s/pipe", test_dir);
    CHECK(mkfifo(fifo, 0644) == 0);
    alarm(20); /* a blocking open would hang here: fail instead */
    ferry_record_file *f;
    CHECK_RC(ferry_record_file_open(&f, fifo, 0), FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), "pipe: is a FIFO, not a regular file");
    /* a set's shard */
    snprintf(dir, sizeof dir, "%s/set", test_dir);
    CHECK_OK(write_labels(dir, 1000, 10, 5, 0));
    char shard[600];
    snprintf(shard, sizeof shard, "%s", shard_path(dir, 1, 2));
    CHECK(unlink(shard) == 0 && mkfifo(shard, 0644) == 0);
    ferry_dataset *ds;
    CHECK(ferry_dataset_records(&ds, dir, 0, 1) < 0); /* its size (0) disagrees first */
    CHECK_CONTAINS(ferry_last_errmsg(), strrchr(shard, '/') + 1);
    CHECK_OK(ferry_dataset_records(&ds, dir, 0, 2)); /* the other shard alone */
    ferry_dataset_free(ds);
    uint64_t problems = 0, records = 0;
    CHECK_OK(ferry_records_verify(dir, NULL, NULL, &problems, &records));
    CHECK(problems > 0);
    /* a lines file, and a line index */
    ferry_lines_opts lo;
    ferry_lines_opts_default(&lo);
    lo.path = fifo;
    CHECK(ferry_dataset_lines(&ds, &lo) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "is a FIFO");
    snprintf(text, sizeof text, "%s/a.txt", test_dir);
    test_write_file(text, "a\nb\n", 4);
    lo.path = text;
    lo.index_path = fifo;
    CHECK(ferry_dataset_lines(&ds, &lo) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "is a FIFO");
    ferry_line_index *ix;
    CHECK(ferry_line_index_open(&ix, text, fifo, 0) < 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "is a FIFO");
    alarm(0);
    test_remove_dir();
}

/* A set written before set identities reads as before, verify finds it whole, and
 * writing over it replaces it, old files and all. */
TEST(a_set_of_the_format_before_reads_and_is_replaced_whole)
{
    test_make_dir("sets");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/old", test_dir);
    write_legacy_set(dir, 1000, 50, 20);
    CHECK_EQ(files_in(dir), 4);
    CHECK_EQ(whole_set(dir, 50, 0), 0);
    CHECK_OK(write_labels(dir, 2000, 7, 7, 0));
    CHECK_EQ(whole_set(dir, 50, 7), 1);
    CHECK_EQ(files_in(dir), 2); /* the manifest and one shard: the three old ones went */
    test_remove_dir();
}

/* A shard of another write under a name its manifest gives, or shards swapped, is
 * an error naming the file and both identities: never records taken for the set. */
TEST(a_shard_of_another_write_is_refused_by_readers_and_verify)
{
    test_make_dir("sets");
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a", test_dir);
    snprintf(b, sizeof b, "%s/b", test_dir);
    /* same sizes, record for record: only the labels (and the set ids) differ */
    CHECK_OK(write_labels(a, 1000, 20, 10, 0));
    CHECK_OK(write_labels(b, 3000, 20, 10, 0));
    char a1[600], b1[600];
    snprintf(a1, sizeof a1, "%s", shard_path(a, 1, 2));
    snprintf(b1, sizeof b1, "%s", shard_path(b, 1, 2));
    /* a's shard 1 under b's name (and b's manifest told its CRC, so that only the
     * identity can tell) */
    CHECK_EQ(sh("cp '%s' '%s'", a1, b1), 0);
    CHECK_EQ(sh("sed -i 's/^\\(%s [0-9]* [0-9]*\\) [0-9a-f]*$/\\1 %08x/' '%s/data.manifest'",
                strrchr(b1, '/') + 1, 0u, b),
             0);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_records(&ds, b, 0, 1), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), strrchr(b1, '/') + 1);
    CHECK_CONTAINS(ferry_last_errmsg(), "a file of another write");
    uint64_t problems = 0, records = 0;
    CHECK_OK(ferry_records_verify(b, NULL, NULL, &problems, &records));
    CHECK(problems >= 1);
    /* b's own shards listed in the other order: same set, wrong places */
    CHECK_OK(write_labels(b, 3000, 20, 10, 0));
    CHECK_EQ(sh("sed -i '3{h;d};4{G}' '%s/data.manifest'", b), 0);
    CHECK_RC(ferry_dataset_records(&ds, b, 0, 1), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "names it as shard 0");
    /* without a manifest, shards that carry an identity are not a set */
    CHECK_OK(write_labels(b, 3000, 20, 10, 0));
    char m[700];
    snprintf(m, sizeof m, "%s/data.manifest", b);
    CHECK(unlink(m) == 0);
    CHECK_RC(ferry_dataset_records(&ds, b, 0, 1), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "whose manifest is missing");
    /* and the next write cleans them away */
    CHECK_OK(write_labels(b, 3000, 5, 10, 0));
    CHECK_EQ(files_in(b), 2);
    test_remove_dir();
}

/* Leftovers of a killed write beside a whole set: readers, ls, stat and verify see
 * the set alone, verify notes them without calling them damage, and the next pack
 * removes them. */
TEST(leftovers_of_a_killed_write_confuse_neither_readers_nor_verify)
{
    test_make_dir("sets");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/set", test_dir);
    CHECK_OK(write_labels(dir, 1000, 30, 10, 0));
    /* a write killed after renaming its shards, before its manifest */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* appends: 2 creates, writes, closes; commit: fsync, close, rename of shard 0,
         * then of shard 1: killed at its rename, shard 0 in place */
        ferry__fault_arm(FERRY__FAULT_KILL, 6 + 3 + 3);
        write_labels(dir, 2000, 20, 10, 0);
        _exit(3);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
    CHECK_EQ(files_in(dir), 6); /* 3 shards, manifest, a new shard, a temporary */
    CHECK_EQ(whole_set(dir, 30, 20), 0);
    char out[8192], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s verify '%s' 2>&1", FERRY_CLI, dir);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK_EQ(WEXITSTATUS(pclose(p)), 0);
    CHECK_CONTAINS(out, "note: ");
    CHECK_CONTAINS(out, "not part of the set");
    CHECK(!strstr(out, "damaged"));
    CHECK_CONTAINS(out, "30 records checked, 0 problems");
    snprintf(cmd, sizeof cmd, "%s stat '%s' 2>&1", FERRY_CLI, dir);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    CHECK_CONTAINS(out, "3 shards, 30 records");
    /* the next pack removes them */
    CHECK_OK(write_labels(dir, 3000, 4, 10, 0));
    CHECK_EQ(files_in(dir), 2);
    test_remove_dir();
}

/* `ferry pack` over an existing set, killed at moments across its run: the set is
 * always the whole old one or the whole new one, and verify agrees. */
TEST(a_pack_over_a_set_killed_at_any_moment_leaves_the_old_or_the_new_set)
{
    test_make_dir("sets");
    char pristine[600], dir[600];
    snprintf(pristine, sizeof pristine, "%s/pristine", test_dir);
    snprintf(dir, sizeof dir, "%s/set", test_dir);
    CHECK_EQ(sh("%s pack synthetic:20000,bytes=64 '%s' --shard-records 3000 --no-progress "
                "> /dev/null",
                FERRY_CLI, pristine),
             0);
    /* time a replacement that runs to the end */
    CHECK_EQ(sh("cp -a '%s' '%s'", pristine, dir), 0);
    uint64_t t0 = ferry_now_ns();
    CHECK_EQ(sh("%s pack synthetic:15000,bytes=100 '%s' --shard-records 4000 --no-progress "
                "> /dev/null",
                FERRY_CLI, dir),
             0);
    uint64_t span_us = (ferry_now_ns() - t0) / 1000;
    int olds = 0, news = 0;
    for (int k = 0; k < 16; k++) {
        CHECK_EQ(sh("rm -rf '%s' && cp -a '%s' '%s'", dir, pristine, dir), 0);
        pid_t pid = fork();
        if (pid == 0) {
            freopen("/dev/null", "w", stdout);
            execl(FERRY_CLI, FERRY_CLI, "pack", "synthetic:15000,bytes=100", dir, "--shard-records",
                  "4000", "--no-progress", (char *)NULL);
            _exit(127);
        }
        /* from the start to past the end; the last run is not killed, so that a
         * loaded machine, where a pack takes longer than measured, still ends
         * with a whole new set at least once */
        usleep((useconds_t)(span_us * (uint64_t)k / 12));
        if (k < 15)
            kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        ferry_dataset *ds;
        CHECK_OK(ferry_dataset_records(&ds, dir, 0, 1));
        uint64_t n = ferry_dataset_len(ds);
        CHECK(n == 20000 || n == 15000);
        CHECK_U64(ferry_field_nbytes(ferry_dataset_field(ds, 0)), n == 20000 ? 64 : 100);
        ferry_dataset_free(ds);
        CHECK_EQ(sh("%s verify '%s' > /dev/null", FERRY_CLI, dir), 0);
        olds += n == 20000;
        news += n == 15000;
    }
    printf("killed packs over a set: %d left the old set, %d the new one\n", olds, news);
    CHECK(olds > 0 && news > 0); /* the kill at 0 us leaves the old set; the last run, the new */
    test_remove_dir();
}

/* Readers opening a set while another process replaces it again and again: each
 * open gets one whole generation (the reader reads the manifest again when the
 * shards it named were removed under it), never a mix. */
TEST(readers_opening_during_replacements_take_one_whole_set)
{
    test_make_dir("sets");
    char dir[600];
    snprintf(dir, sizeof dir, "%s/set", test_dir);
    CHECK_OK(write_labels(dir, 1000, 40, 7, 0));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (int k = 0; k < 60; k++)
            if (write_labels(dir, k % 2 ? 1000 : 2000, k % 2 ? 40 : 25, k % 2 ? 7 : 10, 0) < 0)
                _exit(1);
        _exit(0);
    }
    int opened = 0, missed = 0;
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            break;
        }
        ferry_dataset *ds;
        int rc = ferry_dataset_records(&ds, dir, 0, 1);
        if (rc < 0) {
            /* replaced more often than the reader retries: an error, never a mix */
            CHECK_RC(rc, FERRY_ENOENT);
            missed++;
            continue;
        }
        uint64_t n = ferry_dataset_len(ds);
        int64_t first = label_of_any(ds, 0);
        CHECK((first == 1000 && n == 40) || (first == 2000 && n == 25));
        for (uint64_t i = 0; i < n; i++)
            CHECK_EQ(label_of_any(ds, i), first + (int64_t)i);
        ferry_dataset_free(ds);
        opened++;
    }
    printf("opened during replacements: %d whole sets, %d opens lost the race\n", opened, missed);
    CHECK(opened > 0);
    test_remove_dir();
}
