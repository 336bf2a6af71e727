/*
 * Text lines with an offset index: building and reading the index, line ends,
 * stale and foreign and damaged indexes, offsets past 4 GiB, the lines dataset
 * (truncation, errors, mmap and pread), and the loader over it.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include "core/internal.h"
#include "io/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads line i through a lines dataset into buf; returns its length. */
static int64_t line_of(ferry_dataset *ds, uint64_t i, char *buf, int *rc)
{
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    int64_t len = -1;
    void *p[1] = {buf};
    ferry_sample s = {1, p, &len, {0}};
    *rc = ferry_dataset_get(ds, i, &s, ctx);
    ferry_ctx_free(ctx);
    return len;
}

static ferry_dataset *open_lines(const char *path, uint32_t max_len, int io, int on_long)
{
    ferry_lines_opts o;
    ferry_lines_opts_default(&o);
    o.path = path;
    o.max_len = max_len;
    o.io = io;
    o.on_long = on_long;
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_lines(&ds, &o));
    return ds;
}

TEST(line_ends_crlf_empty_lines_and_no_final_newline)
{
    test_make_dir("lines");
    char p[512];
    const char text[] = "alpha\r\nbeta\n\n\r\ngamma delta\nlast";
    test_write_file(test_path("a.txt", p), text, sizeof text - 1);
    uint64_t n;
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
    CHECK_U64(n, 6);
    static const char *want[] = {"alpha", "beta", "", "", "gamma delta", "last"};
    for (int io = 0; io < 2; io++) {
        ferry_dataset *ds = open_lines(p, 64, io, 0);
        CHECK_U64(ferry_dataset_len(ds), 6);
        for (uint64_t i = 0; i < 6; i++) {
            char buf[64];
            int rc;
            int64_t len = line_of(ds, i, buf, &rc);
            CHECK_OK(rc);
            if (len != (int64_t)strlen(want[i]) || memcmp(buf, want[i], (size_t)len))
                test_fail(__FILE__, __LINE__, "io %d line %llu: got \"%.*s\", want \"%s\"", io,
                          (unsigned long long)i, (int)len, buf, want[i]);
        }
        ferry_dataset_free(ds);
    }
    /* the index itself: offsets and lengths without "\n" */
    ferry_line_index *ix;
    CHECK_OK(ferry_line_index_open(&ix, p, NULL, 0));
    uint64_t off, len;
    CHECK_OK(ferry_line_index_get(ix, 1, &off, &len));
    CHECK_U64(off, 7);
    CHECK_U64(len, 4);
    CHECK_OK(ferry_line_index_get(ix, 5, &off, &len));
    CHECK_U64(len, 4); /* "last": no newline to drop */
    CHECK_RC(ferry_line_index_get(ix, 6, &off, &len), FERRY_ERANGE);
    CHECK_U64(ferry_line_index_source_size(ix), sizeof text - 1);
    ferry_line_index_free(ix);
    test_remove_dir();
}

TEST(empty_and_newline_only_files)
{
    test_make_dir("lines");
    char p[512];
    uint64_t n = 99;
    test_write_file(test_path("empty.txt", p), "", 0);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
    CHECK_U64(n, 0);
    ferry_dataset *ds = open_lines(p, 8, 0, 0);
    CHECK_U64(ferry_dataset_len(ds), 0);
    ferry_dataset_free(ds);
    test_write_file(test_path("nl.txt", p), "\n", 1);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
    CHECK_U64(n, 1);
    test_write_file(test_path("nl2.txt", p), "\n\n\n", 3);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
    CHECK_U64(n, 3);
    /* every position of a newline against a 64-byte scan block */
    for (int k = 0; k < 200; k++) {
        char buf[256];
        memset(buf, 'x', sizeof buf);
        buf[k] = '\n';
        test_write_file(test_path("pos.txt", p), buf, sizeof buf);
        CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
        CHECK_U64(n, 2);
        ferry_line_index *ix;
        uint64_t off, len;
        CHECK_OK(ferry_line_index_open(&ix, p, NULL, 0));
        CHECK_OK(ferry_line_index_get(ix, 1, &off, &len));
        CHECK_U64(off, (uint64_t)k + 1);
        CHECK_U64(len, 255 - (uint64_t)k);
        ferry_line_index_free(ix);
    }
    test_remove_dir();
}

TEST(many_lines_match_a_plain_split)
{
    test_make_dir("lines");
    char p[512];
    size_t cap = 3 << 20, n = 0;
    char *text = malloc(cap);
    ferry_rng r;
    ferry_rng_init(&r, 5, 0, 0);
    uint64_t lines = 0;
    while (n + 600 < cap) {
        size_t len = ferry_rng_below(&r, 300);
        for (size_t i = 0; i < len; i++)
            text[n++] = (char)('a' + ferry_rng_below(&r, 26));
        if (ferry_rng_below(&r, 10) == 0)
            text[n++] = '\r';
        text[n++] = '\n';
        lines++;
    }
    test_write_file(test_path("many.txt", p), text, n);
    uint64_t got;
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &got));
    CHECK_U64(got, lines);
    ferry_dataset *ds = open_lines(p, 512, 0, 0);
    size_t at = 0;
    for (uint64_t i = 0; i < lines; i++) {
        char *nl = memchr(text + at, '\n', n - at);
        size_t len = (size_t)(nl - (text + at));
        if (len && text[at + len - 1] == '\r')
            len--;
        char buf[512];
        int rc;
        int64_t l = line_of(ds, i, buf, &rc);
        CHECK_OK(rc);
        CHECK_EQ(l, len);
        CHECK(!memcmp(buf, text + at, len));
        at = (size_t)(nl - text) + 1;
    }
    ferry_dataset_free(ds);
    free(text);
    test_remove_dir();
}

TEST(stale_index_is_detected_and_rebuilt_on_request)
{
    test_make_dir("lines");
    char p[512];
    test_write_file(test_path("s.txt", p), "one\ntwo\n", 8);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, NULL));
    test_write_file(p, "one\ntwo\nthree\n", 14); /* changed since */
    ferry_line_index *ix;
    CHECK_RC(ferry_line_index_open(&ix, p, NULL, 0), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "s.txt.fidx is stale");
    CHECK_CONTAINS(ferry_last_errmsg(), "8 bytes then, 14 now");
    ferry_dataset *ds;
    char spec[600];
    snprintf(spec, sizeof spec, "lines:%s", p);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_ESTALE);
    snprintf(spec, sizeof spec, "lines:%s,build=1", p);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_U64(ferry_dataset_len(ds), 3);
    ferry_dataset_free(ds);
    /* the same size, touched: also stale */
    test_write_file(p, "one\ntwo\nthreE\n", 14);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000, 0}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
    CHECK_RC(ferry_line_index_open(&ix, p, NULL, 0), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "modified since");
    test_remove_dir();
}

TEST(index_of_another_file_is_detected)
{
    test_make_dir("lines");
    char a[512], b[512], ia[512];
    test_write_file(test_path("a.txt", a), "same size\nline\n", 15);
    test_write_file(test_path("b.txt", b), "SAME SIZE\nLINE\n", 15);
    struct timespec ts[2] = {{5, 0}, {5, 0}};
    CHECK(utimensat(AT_FDCWD, a, ts, 0) == 0);
    CHECK(utimensat(AT_FDCWD, b, ts, 0) == 0);
    CHECK_OK(ferry_line_index_build(a, test_path("a.idx", ia), NULL, NULL, NULL));
    ferry_line_index *ix;
    CHECK_RC(ferry_line_index_open(&ix, b, ia, 0), FERRY_ESTALE);
    CHECK_CONTAINS(ferry_last_errmsg(), "index of another file");
    CHECK_OK(ferry_line_index_open(&ix, a, ia, 0));
    ferry_line_index_free(ix);
    test_remove_dir();
}

TEST(damaged_indexes_say_what_is_wrong)
{
    test_make_dir("lines");
    char p[512], ip[512];
    test_write_file(test_path("d.txt", p), "a\nbb\nccc\n", 9);
    test_path("d.txt.fidx", ip);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, NULL));
    size_t n;
    uint8_t *good = test_read_file(ip, &n), bad[256];
    CHECK_EQ(n, 64 + 8 * 4);
    ferry_line_index *ix;
    static const struct {
        size_t at;
        int cut;
        uint8_t value;
        int rc;
        const char *says;
    } cases[] = {
        {0, 0, 'X', FERRY_ECORRUPT, "bad magic"},        {8, 0, 7, FERRY_ECORRUPT, "version 7"},
        {20, 0, 0x55, FERRY_ECORRUPT, "damaged header"}, {0, 8, 'F', FERRY_ECORRUPT, "truncated"},
        {0, 90, 'F', FERRY_ECORRUPT, "too short"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(bad, good, n);
        bad[cases[i].at] = cases[i].value;
        test_write_file(ip, bad, n - (size_t)cases[i].cut);
        CHECK_RC(ferry_line_index_open(&ix, p, NULL, 0), cases[i].rc);
        CHECK_CONTAINS(ferry_last_errmsg(), "d.txt.fidx");
        CHECK_CONTAINS(ferry_last_errmsg(), cases[i].says);
    }
    /* offsets out of order: the header is fine, line 1 is not */
    memcpy(bad, good, n);
    uint64_t o = 6;
    memcpy(bad + 64 + 8 * 1, &o, 8); /* offsets 0, 6, 5, 9: line 1 ends before it starts */
    test_write_file(ip, bad, n);
    CHECK_OK(ferry_line_index_open(&ix, p, NULL, 0));
    uint64_t off, len;
    CHECK_OK(ferry_line_index_get(ix, 0, &off, &len)); /* 0..6 is a plausible line */
    CHECK_RC(ferry_line_index_get(ix, 1, &off, &len), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "line 1: offsets 6..5");
    CHECK_OK(ferry_line_index_get(ix, 2, &off, &len));
    ferry_line_index_free(ix);
    /* a missing index, and a missing source */
    unlink(ip);
    CHECK_RC(ferry_line_index_open(&ix, p, NULL, 0), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "d.txt.fidx");
    CHECK_OK(ferry_line_index_open(&ix, p, NULL, 1)); /* built on request */
    CHECK_U64(ferry_line_index_count(ix), 3);
    ferry_line_index_free(ix);
    CHECK_RC(ferry_line_index_open(&ix, test_path("nope.txt", ip), NULL, 1), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "nope.txt");
    free(good);
    test_remove_dir();
}

TEST(a_failed_rebuild_leaves_the_old_index)
{
    test_make_dir("lines");
    char p[512], ip[512], sub[512];
    test_write_file(test_path("k.txt", p), "x\ny\n", 4);
    CHECK_OK(ferry_line_index_build(p, test_path("k.idx", ip), NULL, NULL, NULL));
    size_t n, m;
    uint8_t *before = test_read_file(ip, &n);
    CHECK(mkdir(test_path("sub", sub), 0755) == 0);
    CHECK(ferry_line_index_build(sub, ip, NULL, NULL, NULL) < 0); /* a directory */
    uint8_t *after = test_read_file(ip, &m);
    CHECK_EQ(m, n);
    CHECK(!memcmp(before, after, n));
    free(before);
    free(after);
    /* and no temporary is left behind */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp", test_dir);
    FILE *ls = popen(cmd, "r");
    char out[16] = "";
    CHECK(fgets(out, sizeof out, ls) != NULL);
    pclose(ls);
    CHECK_EQ(atoi(out), 0);
    test_remove_dir();
}

/* How many temporaries of the index are in the test's folder. */
static int temporaries(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp", test_dir);
    FILE *ls = popen(cmd, "r");
    char out[16] = "";
    CHECK(fgets(out, sizeof out, ls) != NULL);
    pclose(ls);
    return atoi(out);
}

TEST(a_rebuild_failing_at_any_write_leaves_the_old_index)
{
    test_make_dir("lines");
    char p[512], ip[512];
    /* 5 MiB of lines: chunks scanned by both threads, the index written in pieces */
    size_t cap = 5 << 20, n = 0;
    char *text = malloc(cap);
    ferry_rng r;
    ferry_rng_init(&r, 9, 0, 0);
    while (n + 100 < cap) {
        size_t len = ferry_rng_below(&r, 60);
        memset(text + n, 'q', len);
        n += len;
        text[n++] = '\n';
    }
    test_write_file(test_path("f.txt", p), "old\n", 4);
    CHECK_OK(ferry_line_index_build(p, test_path("f.idx", ip), NULL, NULL, NULL));
    size_t n_old, n_new, m;
    uint8_t *old = test_read_file(ip, &n_old);
    test_write_file(p, text, n);
    /* every create, write, fsync, close and rename of the build, counted */
    ferry__fault_arm(FERRY__FAULT_FAIL, 0);
    CHECK_OK(ferry_line_index_build(p, ip, NULL, NULL, NULL));
    long points = ferry__fault_arm(FERRY__FAULT_OFF, 0);
    CHECK(points >= 8);
    uint8_t *fresh = test_read_file(ip, &n_new);
    int after_rename = 0;
    for (long at = 1; at <= points; at++) {
        unlink(ip);
        test_write_file(ip, old, n_old);
        ferry__fault_arm(FERRY__FAULT_FAIL, at);
        int rc = ferry_line_index_build(p, ip, NULL, NULL, NULL);
        ferry__fault_arm(FERRY__FAULT_OFF, 0);
        uint8_t *now = test_read_file(ip, &m);
        /* every point fails the build; before the rename the old index stays whole,
         * after it (the directory's sync) the new one is in place; never a temporary */
        CHECK_RC(rc, FERRY_EIO);
        CHECK((m == n_old && !memcmp(now, old, m)) || (m == n_new && !memcmp(now, fresh, m)));
        CHECK_EQ(temporaries(), 0);
        after_rename += m == n_new;
        free(now);
    }
    CHECK(after_rename >= 1 && after_rename <= 2);
    free(old);
    free(fresh);
    free(text);
    test_remove_dir();
}

TEST(offsets_past_4_gib)
{
    test_make_dir("lines");
    char p[512];
    test_path("big.txt", p);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0);
    uint64_t hole = (5ull << 30);
    const char tail[] = "\nfar away\nfurther\n";
    /* a sparse file: 5 GiB of zeros (one line), then two short lines */
    CHECK(pwrite(fd, tail, sizeof tail - 1, (off_t)hole) == (ssize_t)(sizeof tail - 1));
    close(fd);
    uint64_t n;
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, &n));
    CHECK_U64(n, 3);
    ferry_line_index *ix;
    uint64_t off, len;
    CHECK_OK(ferry_line_index_open(&ix, p, NULL, 0));
    CHECK_OK(ferry_line_index_get(ix, 0, &off, &len));
    CHECK_U64(len, hole);
    CHECK_OK(ferry_line_index_get(ix, 2, &off, &len));
    CHECK_U64(off, hole + 10);
    CHECK_U64(len, 7);
    ferry_line_index_free(ix);
    for (int io = 0; io < 2; io++) {
        ferry_dataset *ds = open_lines(p, 16, io, 0);
        char buf[16];
        int rc;
        CHECK_EQ(line_of(ds, 1, buf, &rc), 8);
        CHECK_OK(rc);
        CHECK(!memcmp(buf, "far away", 8));
        CHECK_EQ(line_of(ds, 0, buf, &rc), 16); /* the 5 GiB line, cut */
        CHECK_U64(ferry_lines_truncated(ds), 1);
        ferry_dataset_free(ds);
    }
    test_remove_dir();
}

TEST(long_lines_are_cut_and_counted_or_an_error)
{
    test_make_dir("lines");
    char p[512];
    test_write_file(test_path("l.txt", p), "12345678\n123456789\n1234567\r\n12345678\r\n", 38);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, NULL));
    for (int io = 0; io < 2; io++) {
        ferry_dataset *ds = open_lines(p, 8, io, FERRY_LINES_LONG_TRUNCATE);
        char buf[8];
        int rc;
        CHECK_EQ(line_of(ds, 0, buf, &rc), 8); /* exactly the bound */
        CHECK_EQ(line_of(ds, 1, buf, &rc), 8); /* cut */
        CHECK(!memcmp(buf, "12345678", 8));
        CHECK_EQ(line_of(ds, 2, buf, &rc), 7);
        CHECK_EQ(line_of(ds, 3, buf, &rc), 8); /* CRLF that fits once "\r" goes */
        CHECK_U64(ferry_lines_truncated(ds), 1);
        ferry_dataset_free(ds);
        ds = open_lines(p, 8, io, FERRY_LINES_LONG_ERROR);
        CHECK_EQ(line_of(ds, 0, buf, &rc), 8);
        CHECK_OK(rc);
        line_of(ds, 1, buf, &rc);
        CHECK_RC(rc, FERRY_EOVERFLOW);
        CHECK_CONTAINS(ferry_last_errmsg(), "line 1 at offset 9 is 9 bytes, over max_len 8");
        CHECK_CONTAINS(ferry_last_errmsg(), "l.txt");
        line_of(ds, 3, buf, &rc);
        CHECK_OK(rc);
        ferry_dataset_free(ds);
    }
    test_remove_dir();
}

TEST(loader_reads_every_line_once_for_any_workers)
{
    test_make_dir("lines");
    char p[512], spec[600];
    FILE *f = fopen(test_path("w.txt", p), "w");
    for (int i = 0; i < 5000; i++)
        fprintf(f, "line %d %.*s\n", i, i % 50,
                "..................................................");
    fclose(f);
    snprintf(spec, sizeof spec, "lines:%s,build=1,max=64", p);
    uint64_t want = 0;
    for (int io = 0; io < 2; io++) {
        snprintf(spec, sizeof spec, "lines:%s,build=1,max=64,io=%s", p, io ? "pread" : "mmap");
        ferry_dataset *ds;
        CHECK_OK(ferry_dataset_open(&ds, spec));
        for (uint32_t w = 0; w <= 3; w++) {
            ferry_loader_opts o = test_loader_opts(64, w);
            o.shuffle = 1;
            o.seed = 9;
            ferry_loader *l;
            CHECK_OK(ferry_loader_create(&l, ds, &o));
            uint8_t seen[5000] = {0};
            ferry_batch *b;
            uint64_t h = 1;
            int rc;
            while ((rc = ferry_loader_next(l, &b)) == 0) {
                ferry_tensor t, len;
                CHECK_OK(ferry_batch_field(b, 0, &t));
                CHECK_OK(ferry_batch_lengths(b, 0, &len));
                for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
                    const char *line = (const char *)t.data + i * 64;
                    int k = atoi(line + 5);
                    CHECK_U64(ferry_batch_indices(b)[i], (uint64_t)k);
                    CHECK(!seen[k]);
                    seen[k] = 1;
                    CHECK(((int64_t *)len.data)[i] > 6);
                }
                h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
                ferry_batch_release(b);
            }
            CHECK_RC(rc, FERRY_END);
            for (int i = 0; i < 5000; i++)
                CHECK(seen[i]);
            if (!want)
                want = h;
            CHECK_U64(h, want); /* the same bytes for mmap and pread, any workers */
            ferry_loader_free(l);
        }
        ferry_dataset_free(ds);
    }
    test_remove_dir();
}

TEST(settings_and_allocation_failures)
{
    test_make_dir("lines");
    char p[512], spec[600];
    test_write_file(test_path("o.txt", p), "a\nb\n", 4);
    CHECK_OK(ferry_line_index_build(p, NULL, NULL, NULL, NULL));
    ferry_lines_opts o;
    ferry_lines_opts_default(&o);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_lines(&ds, &o), FERRY_EINVAL); /* no path */
    o.path = p;
    o.max_len = (1u << 24) + 1;
    CHECK_RC(ferry_dataset_lines(&ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "max_len");
    o.max_len = 0;
    o.io = 5;
    CHECK_RC(ferry_dataset_lines(&ds, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "io 5");
    snprintf(spec, sizeof spec, "lines:%s,io=fast", p);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "io=\"fast\"");
    snprintf(spec, sizeof spec, "lines:%s,readahead=maybe", p);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    snprintf(spec, sizeof spec, "lines:%s,max=0", p);
    CHECK_RC(ferry_dataset_open(&ds, spec), FERRY_EINVAL);
    snprintf(spec, sizeof spec, "lines:%s,max=4,io=pread,readahead=on,error_long=1", p);
    CHECK_OK(ferry_dataset_open(&ds, spec));
    CHECK_EQ(ferry_dataset_field(ds, 0)->shape[0], 4);
    ferry_dataset_free(ds);
    for (int io = 0; io < 2; io++) {
        int done = 0;
        for (long n = 0; n < 200 && !done; n++) {
            ferry_lines_opts_default(&o);
            o.path = p;
            o.io = io;
            ferry__test_fail_alloc(n);
            int rc = ferry_dataset_lines(&ds, &o);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                ferry_dataset_free(ds);
                done = 1;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
            }
        }
        CHECK(done);
    }
    for (long n = 0; n < 200; n++) {
        ferry__test_fail_alloc(n);
        int rc = ferry_line_index_build(p, NULL, NULL, NULL, NULL);
        ferry__test_fail_alloc(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, FERRY_ENOMEM);
    }
    test_remove_dir();
}

TEST(compressed_text_and_a_missing_index_say_what_to_do)
{
    test_make_dir("lines-gz");
    char p[512], q[512];
    /* a real gzip file: the gzip magic, then a deflate stream */
    static const unsigned char gz[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00,
                                       0x00, 0x03, 0x4b, 0xe4, 0x02, 0x00, 0x07, 0xa1,
                                       0xea, 0xdd, 0x02, 0x00, 0x00, 0x00};
    test_write_file(test_path("train.txt.gz", p), gz, sizeof gz);
    CHECK_RC(ferry_line_index_build(p, NULL, NULL, NULL, NULL), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "train.txt.gz: the file is gzip-compressed");
    CHECK_CONTAINS(ferry_last_errmsg(), "gunzip -k");
    snprintf(q, sizeof q, "%s.fidx", p);
    CHECK(access(q, F_OK) != 0); /* no index of garbage written */
    ferry_lines_opts o;
    ferry_lines_opts_default(&o);
    o.path = p;
    o.build_index = 1;
    ferry_dataset *ds = NULL;
    CHECK_RC(ferry_dataset_lines(&ds, &o), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "gzip-compressed");
    /* zstd too */
    static const unsigned char zst[] = {0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0x11, 0x00,
                                        0x00, 0x61, 0x0a, 0x55, 0xc8, 0xcc, 0x1e};
    test_write_file(test_path("train.txt.zst", p), zst, sizeof zst);
    CHECK_RC(ferry_line_index_build(p, NULL, NULL, NULL, NULL), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "zstd-compressed");
    /* plain text without its index: what to run */
    test_write_file(test_path("plain.txt", p), "a\nb\n", 4);
    o.path = p;
    o.build_index = 0;
    CHECK_RC(ferry_dataset_lines(&ds, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "has no line index");
    CHECK_CONTAINS(ferry_last_errmsg(), "ferry index");
    CHECK_CONTAINS(ferry_last_errmsg(), "build=1");
    test_remove_dir();
}

TEST(cut_lines_are_counted_in_the_loader_stats)
{
    test_make_dir("lines-cut");
    char p[512];
    char text[4096] = "";
    size_t n = 0;
    for (int i = 0; i < 100; i++) /* every 4th line is 40 bytes, the rest 5 */
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\n",
                              i % 4 ? "short" : "a line of forty bytes, over max=16 ....");
    test_write_file(test_path("t.txt", p), text, n);
    char spec[600];
    snprintf(spec, sizeof spec, "lines:%s,max=16,build=1", p);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, spec));
    for (uint32_t w = 0; w <= 2; w += 2) {
        ferry_loader_opts o = test_loader_opts(10, w);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_batch *b;
        int rc;
        while ((rc = ferry_loader_next(l, &b)) == 0)
            ferry_batch_release(b);
        CHECK_RC(rc, FERRY_END);
        ferry_loader_stats st;
        CHECK_OK(ferry_loader_stats_get(l, &st));
        CHECK_U64(st.truncated, 25);
        CHECK_U64(st.samples, 100);
        CHECK_U64(st.data_bytes, 75 * 5 + 25 * 16);
        ferry_loader_free(l);
    }
    ferry_dataset_free(ds);
    test_remove_dir();
}
