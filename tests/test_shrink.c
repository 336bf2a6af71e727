/*
 * Files cut short under a reader: every mapped reader (a record shard, a lines
 * file, a line index, an LMDB environment, a .npy, a stored .npz member, a token
 * shard, an MDS shard, a TFRecord file read through its offset index, a Caffe2
 * minidb, whose grains the loader reads in index order) read by a
 * loader with 2 workers, and
 * by the ferry command, while the file is truncated. The read must end in an
 * error that names the file, never in a SIGBUS.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/lines.h>
#include <ferry/lmdb.h>
#include <ferry/loader.h>
#include <ferry/records.h>
#include <ferry/tensors.h>
#include <ferry/tokens.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NREC 3000
#define REC_BYTES 2048

typedef struct fixture {
    char spec[600];   /* the source */
    char victim[600]; /* the file that is cut */
} fixture;

static void make_records(fixture *x)
{
    char dir[512];
    test_path("shards", dir);
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "x");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = REC_BYTES;
    ferry_writer_opts o;
    memset(&o, 0, sizeof o);
    o.dir = dir;
    o.fields = &f;
    o.nfields = 1;
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &o));
    static uint8_t buf[REC_BYTES];
    void *data[1] = {buf};
    int64_t len[1] = {0};
    ferry_sample s = {.data = data, .length = len, .nfields = 1};
    for (int i = 0; i < NREC; i++) {
        memset(buf, i & 0xff, sizeof buf);
        CHECK_OK(ferry_writer_append(w, &s));
    }
    CHECK_OK(ferry_writer_commit(w));
    snprintf(x->spec, sizeof x->spec, "records:%s", dir);
    /* the one shard, whatever the writer names it */
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    x->victim[0] = 0;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".ferry") && !strstr(e->d_name, ".tmp"))
            snprintf(x->victim, sizeof x->victim, "%s/%s", dir, e->d_name);
    closedir(d);
    CHECK(x->victim[0] != 0);
}

static void make_lines(fixture *x, int cut_index)
{
    char path[512];
    test_path("lines.txt", path);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; i < 60000; i++)
        fprintf(f, "line %06d: the quick brown fox jumps over the lazy dog, %08x\n", i,
                i * 2654435761u);
    CHECK(fclose(f) == 0);
    CHECK_OK(ferry_line_index_build(path, NULL, NULL, NULL, NULL));
    snprintf(x->spec, sizeof x->spec, "lines:%s", path);
    snprintf(x->victim, sizeof x->victim, "%s%s", path, cut_index ? ".fidx" : "");
}

static void make_lmdb(fixture *x)
{
    char dir[512];
    test_path("env", dir);
    ferry_lmdb_writer_opts o;
    ferry_lmdb_writer_opts_default(&o);
    o.path = dir;
    ferry_lmdb_writer *w;
    CHECK_OK(ferry_lmdb_writer_open(&w, &o));
    static uint8_t v[3000];
    for (int i = 0; i < NREC; i++) {
        char k[32];
        int kl = snprintf(k, sizeof k, "%08d", i);
        memset(v, i & 0xff, sizeof v);
        /* every other value large enough for overflow pages */
        CHECK_OK(ferry_lmdb_writer_put(w, k, (size_t)kl, v, i % 2 ? sizeof v : 1000));
    }
    CHECK_OK(ferry_lmdb_writer_commit(w));
    ferry_lmdb_writer_free(w);
    snprintf(x->spec, sizeof x->spec, "lmdb:%s,datum=0", dir);
    snprintf(x->victim, sizeof x->victim, "%s/data.mdb", dir);
}

/* NREC rows of REC_BYTES as one uint8 .npy; with npz, as the stored member x.npy
 * of a .npz (no compression, so mapped). */
static void make_npy(fixture *x, int npz)
{
    static uint8_t data[NREC * REC_BYTES + 4096];
    size_t o = 0, nl = 5;
#define P16(v) (data[o++] = (uint8_t)(v), data[o++] = (uint8_t)((v) >> 8))
#define P32(v) (P16((v)&0xffff), P16(((uint32_t)(v)) >> 16))
    if (npz) { /* the local header; sizes filled in below */
        P32(0x04034b50u), P16(20), P16(0), P16(0), P32(0), P32(0), P32(0), P32(0), P16(nl), P16(0);
        memcpy(data + o, "x.npy", nl);
        o += nl;
    }
    size_t start = o;
    char dict[128];
    int dl =
        snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }",
                 NREC, REC_BYTES);
    memcpy(data + o, "\x93NUMPY\x01\x00", 8);
    data[o + 8] = (uint8_t)(128 - 10);
    data[o + 9] = 0;
    memset(data + o + 10, ' ', 118);
    memcpy(data + o + 10, dict, (size_t)dl);
    data[o + 127] = '\n';
    o += 128;
    for (int i = 0; i < NREC; i++, o += REC_BYTES)
        memset(data + o, i & 0xff, REC_BYTES);
    uint32_t size = (uint32_t)(o - start);
    if (npz) {
        memcpy(data + 18, &size, 4);
        memcpy(data + 22, &size, 4);
        size_t cd = o;
        P32(0x02014b50u), P16(20), P16(20), P16(0), P16(0), P32(0), P32(0), P32(size), P32(size);
        P16(nl), P16(0), P16(0), P16(0), P16(0), P32(0), P32(0);
        memcpy(data + o, "x.npy", nl);
        o += nl;
        size_t cdlen = o - cd;
        P32(0x06054b50u), P16(0), P16(0), P16(1), P16(1), P32(cdlen), P32(cd), P16(0);
    }
#undef P16
#undef P32
    test_path(npz ? "a.npz" : "a.npy", x->victim);
    test_write_file(x->victim, data, o);
    snprintf(x->spec, sizeof x->spec, "npy:%s", x->victim);
}

static void make_tokens(fixture *x, int arg)
{
    test_path("train_000.bin", x->victim);
    ferry_tokens_writer *w;
    CHECK_OK(ferry_tokens_writer_open(&w, x->victim, FERRY_U16));
    static uint16_t t[NREC * 256];
    for (size_t k = 0; k < sizeof t / 2; k++)
        t[k] = (uint16_t)(k * 7);
    CHECK_OK(ferry_tokens_writer_append(w, t, sizeof t / 2));
    CHECK_OK(ferry_tokens_writer_commit(w));
    snprintf(x->spec, sizeof x->spec, "tokens:%s,seq=255,out=i32", x->victim);
}

/* One MDS shard of NREC samples, one bytes column of REC_BYTES each. */
static void make_mds(fixture *x, int arg)
{
    size_t table = 4 + 4 * (NREC + 1), n = table + (size_t)NREC * (4 + REC_BYTES);
    uint8_t *buf = calloc(1, n);
    CHECK(buf != NULL);
    uint32_t u = NREC;
    memcpy(buf, &u, 4);
    for (uint32_t j = 0; j <= NREC; j++) {
        u = (uint32_t)(table + j * (4 + REC_BYTES));
        memcpy(buf + 4 + 4 * j, &u, 4);
        if (j < NREC) {
            uint32_t len = REC_BYTES;
            memcpy(buf + u, &len, 4);
            memset(buf + u + 4, (int)(j & 0xff), REC_BYTES);
        }
    }
    char dir[512], text[1024];
    test_path("mds", dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(x->victim, sizeof x->victim, "%s/shard.00000.mds", dir);
    test_write_file(x->victim, buf, n);
    free(buf);
    int tl = snprintf(text, sizeof text,
                      "{\"shards\": [{\"column_encodings\": [\"bytes\"], \"column_names\": "
                      "[\"x\"], \"column_sizes\": [null], \"compression\": null, \"format\": "
                      "\"mds\", \"hashes\": [], \"raw_data\": {\"basename\": "
                      "\"shard.00000.mds\", \"bytes\": %zu, \"hashes\": {}}, \"samples\": %d, "
                      "\"size_limit\": 67108864, \"version\": 2, \"zip_data\": null}], "
                      "\"version\": 2}",
                      n, NREC);
    char ix[600];
    snprintf(ix, sizeof ix, "%s/index.json", dir);
    test_write_file(ix, text, (size_t)tl);
    snprintf(x->spec, sizeof x->spec, "mds:%s", dir);
}

/* One TFRecord file of NREC records of REC_BYTES, read map-style (raw). */
static void make_tfrecord(fixture *x, int arg)
{
    size_t n = (size_t)NREC * (REC_BYTES + 16), at = 0;
    uint8_t *buf = malloc(n), rec[REC_BYTES];
    CHECK(buf != NULL);
    for (int j = 0; j < NREC; j++) {
        memset(rec, j & 0xff, sizeof rec);
        at += test_tfrecord_frame(buf + at, rec, sizeof rec);
    }
    test_path("a.tfrecord", x->victim);
    test_write_file(x->victim, buf, at);
    free(buf);
    snprintf(x->spec, sizeof x->spec, "tfrecord:%s,raw=1", x->victim);
}

/* One Caffe2 minidb of NREC entries of REC_BYTES, read map-style (raw): the
 * loader reads each grain in index order. */
static void make_minidb(fixture *x, int arg)
{
    size_t n = (size_t)NREC * (REC_BYTES + 16), at = 0;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    for (int j = 0; j < NREC; j++) {
        char key[16];
        int32_t kl = (int32_t)snprintf(key, sizeof key, "%08d", j), vl = REC_BYTES;
        memcpy(buf + at, &kl, 4);
        memcpy(buf + at + 4, &vl, 4);
        memcpy(buf + at + 8, key, (size_t)kl);
        memset(buf + at + 8 + kl, j & 0xff, REC_BYTES);
        at += 8 + (size_t)kl + REC_BYTES;
    }
    test_path("a.minidb", x->victim);
    test_write_file(x->victim, buf, at);
    free(buf);
    snprintf(x->spec, sizeof x->spec, "minidb:%s,value=raw", x->victim);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return (uint64_t)st.st_size;
}

/* Reads `before` batches, cuts the victim to `keep` bytes, and reads on: the read
 * must end in an error naming the victim (or, when nothing left to read lies past
 * the cut, at the end of the epoch). Returns 1 when it ended in the error. */
static int read_through_a_cut(const fixture *x, int shuffle, int before, uint64_t keep)
{
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, x->spec));
    ferry_loader_opts o = test_loader_opts(16, 2);
    o.shuffle = shuffle;
    o.seed = 7;
    o.timeout_ms = 60000;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    int rc = 0, k = 0;
    ferry_batch *b;
    for (; k < before && (rc = ferry_loader_next(l, &b)) == 0; k++)
        ferry_batch_release(b);
    CHECK_OK(rc);
    CHECK(truncate(x->victim, (off_t)keep) == 0);
    while ((rc = ferry_loader_next(l, &b)) == 0)
        ferry_batch_release(b);
    int cut = rc != FERRY_END;
    if (cut) {
        const char *msg = ferry_loader_errmsg(l);
        /* bytes past the end in the last page read as zeros: an index entry there
         * is a damaged entry (FERRY_ECORRUPT), a TFRecord there is a file shorter
         * than when it was indexed (FERRY_ESTALE); past that page, the fault is
         * caught */
        if (!strstr(msg, x->victim) ||
            (rc == FERRY_EIO      ? !strstr(msg, "cut short while it was read")
             : rc == FERRY_ESTALE ? !strstr(msg, "shorter than when it was indexed")
                                  : rc != FERRY_ECORRUPT))
            test_fail(__FILE__, __LINE__, "%s cut to %llu bytes: %s (%s)", x->victim,
                      (unsigned long long)keep, ferry_errname(rc), msg);
    }
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    return cut;
}

/* Several cuts: to nothing, to a third, past the middle (not on a page boundary),
 * early and later in the epoch, in order and shuffled. */
static void cut_each_way(void (*make)(fixture *, int), int arg)
{
    static const int befores[] = {0, 3, 40};
    static const int shuffles[] = {0, 1, 0};
    int errors = 0;
    for (int t = 0; t < 3; t++) {
        test_make_dir("shrink");
        fixture x;
        make(&x, arg);
        uint64_t size = file_size(x.victim);
        uint64_t keeps[3] = {0, size / 3, size / 2 + 123};
        errors += read_through_a_cut(&x, shuffles[t], befores[t], keeps[t]);
        test_remove_dir();
    }
    CHECK(errors >= 2); /* a cut to nothing always fails; the others nearly always */
}

static void make_records_(fixture *x, int arg)
{
    make_records(x);
}
static void make_lmdb_(fixture *x, int arg)
{
    make_lmdb(x);
}

TEST(a_record_shard_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_records_, 0);
}

TEST(a_lines_file_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_lines, 0);
}

TEST(a_line_index_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_lines, 1);
}

TEST(an_lmdb_environment_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_lmdb_, 0);
}

TEST(an_npy_file_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_npy, 0);
}

TEST(a_stored_npz_member_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_npy, 1);
}

TEST(a_token_shard_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_tokens, 0);
}

TEST(an_mds_shard_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_mds, 0);
}

TEST(a_tfrecord_file_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_tfrecord, 0);
}

TEST(a_minidb_cut_short_under_a_loader_is_an_error)
{
    cut_each_way(make_minidb, 0);
}

/* Skipping what the cut took: the loader reads each grain in index order, and a
 * fault fails the sample in hand and goes on with the next in that order; every
 * sample delivered holds its own entry, and delivered and skipped make NREC. */
TEST(a_minidb_cut_short_under_a_skipping_loader_keeps_each_slot_its_own)
{
    test_make_dir("shrink");
    fixture x;
    make_minidb(&x, 0);
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_open(&ds, x.spec));
    CHECK(truncate(x.victim, (off_t)(file_size(x.victim) / 2 + 123)) == 0);
    ferry_loader_opts o = test_loader_opts(64, 2);
    o.shuffle = 1;
    o.seed = 3;
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = NREC;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    uint64_t seen = 0;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor val;
        CHECK_OK(ferry_batch_field(b, 1, &val));
        const uint64_t *idx = ferry_batch_indices(b);
        for (uint32_t k = 0; k < ferry_batch_size(b); k++) {
            const uint8_t *v = (const uint8_t *)val.data + (size_t)k * (size_t)val.strides[0];
            CHECK(idx[k] < NREC / 2 + 1);
            CHECK_EQ(v[0], (uint8_t)(idx[k] & 0xff));
            CHECK_EQ(v[REC_BYTES - 1], (uint8_t)(idx[k] & 0xff));
        }
        seen += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    CHECK_EQ(rc, FERRY_END);
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    printf("%llu delivered, %llu skipped\n", (unsigned long long)seen,
           (unsigned long long)st.skipped);
    CHECK(st.skipped > NREC / 3);
    CHECK_EQ(seen + st.skipped, NREC);
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    test_remove_dir();
}

/* ferry bench over the source while the victim is cut: exits by itself, non-zero,
 * naming the file; never dies of a signal. */
static void bench_through_a_cut(const fixture *x, const char *extra)
{
    char out[512];
    test_path("bench.out", out);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        FILE *o = freopen(out, "w", stdout);
        (void)o;
        dup2(fileno(stdout), 2);
        execl(FERRY_CLI, "ferry", "bench", x->spec, "--workers", "2", "--batch", "16", "--epochs",
              "1000000", "--no-progress", extra, (char *)NULL);
        _exit(127);
    }
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK(truncate(x->victim, (off_t)(file_size(x->victim) / 3)) == 0);
    int st = 0;
    for (int waited = 0; waited < 600; waited++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        struct timespec tick = {0, 50 * 1000000L};
        nanosleep(&tick, NULL);
        if (waited == 599) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            test_fail(__FILE__, __LINE__, "ferry bench %s went on for 30 s after the cut", x->spec);
        }
    }
    size_t n;
    char *text = (char *)test_read_file(out, &n);
    /* "cut short" for a fault; a damaged entry when the last page's zeros were read */
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 0 || !strstr(text, x->victim) ||
        (!strstr(text, "cut short") && !strstr(text, "out of order or past the source")))
        test_fail(__FILE__, __LINE__, "ferry bench %s: %s %d: %s", x->spec,
                  WIFSIGNALED(st) ? "killed by signal" : "exit status",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), text);
    free(text);
}

TEST(ferry_bench_reports_each_file_cut_short_and_exits)
{
#ifndef FERRY_CLI
    SKIP("the ferry command is not built");
#else
    for (int kind = 0; kind < 4; kind++) {
        test_make_dir("shrinkcli");
        fixture x;
        if (kind == 0)
            make_records(&x);
        else if (kind == 3)
            make_lmdb(&x);
        else
            make_lines(&x, kind == 2);
        bench_through_a_cut(&x, kind % 2 ? "--shuffle" : "--no-progress");
        test_remove_dir();
    }
#endif
}

/* Outside a loader (a direct call, as the CLI's head or a user's code makes), the
 * readers set a region of their own: the same error. */
TEST(direct_reads_of_a_file_cut_short_are_errors)
{
    for (int kind = 0; kind < 7; kind++) {
        test_make_dir("shrinkdirect");
        fixture x;
        if (kind == 0)
            make_records(&x);
        else if (kind == 1)
            make_lines(&x, 0);
        else if (kind == 2)
            make_lmdb(&x);
        else if (kind < 5)
            make_npy(&x, kind == 4);
        else if (kind == 5)
            make_tokens(&x, 0);
        else
            make_mds(&x, 0);
        ferry_dataset *ds;
        CHECK_OK(ferry_dataset_open(&ds, x.spec));
        int nf = ferry_dataset_nfields(ds);
        void *bufs[FERRY_MAX_FIELDS] = {0};
        int64_t len[FERRY_MAX_FIELDS];
        ferry_sample s = {.data = bufs, .length = len, .nfields = nf};
        for (int f = 0; f < nf; f++)
            CHECK((bufs[f] = malloc(ferry_field_nbytes(ferry_dataset_field(ds, f)))) != NULL);
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        uint64_t n = ferry_dataset_len(ds);
        CHECK_OK(ferry_dataset_get(ds, n - 1, &s, ctx));
        CHECK(truncate(x.victim, 4096) == 0);
        CHECK_RC(ferry_dataset_get(ds, n - 1, &s, ctx), FERRY_EIO);
        CHECK_CONTAINS(ferry_last_errmsg(), x.victim);
        CHECK_CONTAINS(ferry_last_errmsg(), "the file was cut short while it was read");
        CHECK_CONTAINS(ferry_last_errmsg(), "4096 bytes now");
        ferry_ctx_free(ctx);
        for (int f = 0; f < nf; f++)
            free(bufs[f]);
        ferry_dataset_free(ds);
        test_remove_dir();
    }
}
