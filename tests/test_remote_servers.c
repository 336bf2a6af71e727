/*
 * Remote reading through the library, against the loopback servers (run under
 * tests/servers/with_servers.py: nginx, s3rver and the fault proxy, FERRY_TEST_*).
 * These run in the sanitizer builds too (the Python tests cover the rest): the
 * same batches as the local files through a loader's worker threads, with faults,
 * two loaders of one process sharing the cache at once, and a damaged shard that
 * never enters the cache.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/remote.h>

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *need(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        SKIP("not run under tests/servers/with_servers.py (no FERRY_TEST_* variables)");
    return v;
}

/* The fixtures: a record set (the ferry command packs it) and six tars, under
 * test_dir/data, uploaded to the bucket under "PREFIX/"; the AWS variables set for
 * the S3 endpoint (or the proxy in front of it). */
static void setup(const char *tag, const char *prefix, bool via_proxy)
{
    char cmd[2048], path[512];
    test_make_dir(tag);
    snprintf(cmd, sizeof cmd,
             "'%s' pack synthetic:240,bytes=100 '%s/data/records' --shard-records 40 "
             "--no-progress >/dev/null",
             TEST_FERRY_CLI, test_dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/data/wds", test_dir);
    CHECK(mkdir(path, 0755) == 0);
    for (int s = 0; s < 6; s++) {
        uint8_t tar[512 * 9] = {0};
        size_t at = 0;
        for (int k = 0; k < 2; k++) {
            char name[64], body[64];
            int n = snprintf(body, sizeof body, "shard %d sample %d %.*s", s, k, k + s, "xxxxxxx");
            snprintf(name, sizeof name, "%06d.txt", s * 2 + k);
            test_tar_header(tar + at, name, '0', (uint64_t)n, 0);
            memcpy(tar + at + 512, body, (size_t)n);
            at += 1024;
            snprintf(name, sizeof name, "%06d.cls", s * 2 + k);
            test_tar_header(tar + at, name, '0', 1, 0);
            tar[at + 512] = (uint8_t)('0' + k);
            at += 1024;
        }
        char file[600];
        snprintf(file, sizeof file, "%s/train-%06d.tar", path, s);
        test_write_file(file, tar, sizeof tar);
    }
    snprintf(cmd, sizeof cmd, "'%s' '%s/servers.py' upload '%s/data' '%s/' >/dev/null",
             need("FERRY_TEST_SERVERS_PYTHON"), need("FERRY_TEST_SERVERS"), test_dir, prefix);
    CHECK(system(cmd) == 0);
    setenv("AWS_ACCESS_KEY_ID", need("FERRY_TEST_S3_ACCESS_KEY"), 1);
    setenv("AWS_SECRET_ACCESS_KEY", need("FERRY_TEST_S3_SECRET_KEY"), 1);
    setenv("AWS_REGION", need("FERRY_TEST_S3_REGION"), 1);
    setenv("AWS_ENDPOINT_URL",
           need(via_proxy ? "FERRY_TEST_PROXY_S3_ENDPOINT" : "FERRY_TEST_S3_ENDPOINT"), 1);
    setenv("FERRY_REMOTE_BACKOFF_MS", "1", 1);
    snprintf(path, sizeof path, "%s/cache", test_dir);
    setenv("FERRY_CACHE", path, 1);
}

static void proxy_config(const char *json)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "curl -sf -X PUT -d '%s' '%s/config' >/dev/null", json,
             need("FERRY_TEST_PROXY_CONTROL"));
    CHECK(system(cmd) == 0);
}

/* Every batch of a source's first epoch, hashed; the loader's counters in *st. */
static uint64_t digest(const char *spec, uint32_t workers, ferry_loader_stats *st)
{
    ferry_dataset *ds = NULL;
    ferry_stream *stream = NULL;
    ferry_loader *l = NULL;
    ferry_batch *b;
    uint64_t h = 0xcbf29ce484222325ull;
    int rc;
    CHECK_OK(ferry_source_open(spec, &ds, &stream));
    ferry_loader_opts o = ds ? test_loader_opts(8, workers) : test_stream_opts(8, workers, 2);
    o.shuffle = ds != NULL;
    o.seed = 11;
    CHECK_OK(ds ? ferry_loader_create(&l, ds, &o) : ferry_loader_create_stream(&l, stream, &o));
    CHECK_OK(ferry_loader_start(l, 0, 0));
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        for (int f = 0; f < ferry_batch_nfields(b); f++) {
            ferry_tensor t;
            CHECK_OK(ferry_batch_field(b, f, &t));
            h = test_hash(h, t.data, ferry_tensor_nbytes(&t));
        }
        ferry_batch_release(b);
    }
    if (rc != FERRY_END)
        test_fail(__FILE__, __LINE__, "%s: %s", spec, ferry_loader_errmsg(l));
    if (st)
        CHECK_OK(ferry_loader_stats_get(l, st));
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    ferry_stream_free(stream);
    return h;
}

TEST(records_and_tars_match_the_local_files)
{
    char local[600], remote[600];
    setup("rs1", "rs1", false);
    const char *bucket = need("FERRY_TEST_S3_BUCKET");
    static const char *kinds[] = {"records:%s/records", "records:%s/records,stream=1", "wds:%s/wds",
                                  "wds:%s/wds,stream=1"};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        char base[300];
        snprintf(base, sizeof base, "%s/data", test_dir);
        snprintf(local, sizeof local, kinds[k], base);
        snprintf(base, sizeof base, "s3://%s/rs1", bucket);
        snprintf(remote, sizeof remote, kinds[k], base);
        uint64_t want = digest(local, 2, NULL);
        CHECK_U64(digest(remote, 2, NULL), want);
        CHECK_U64(digest(remote, 0, NULL), want);
    }
    ferry_remote_stats r;
    ferry_remote_stats_get(&r);
    CHECK(r.cache_misses >= 12 && r.cache_hits > 0 && r.downloaded_bytes > 0);
    CHECK_U64(r.retries, 0);
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

TEST(faults_on_every_request_kind)
{
    char local[600], remote[600];
    setup("rs2", "rs2", true);
    proxy_config("{\"seed\": 5, \"faults\": {\"slowdown\": 0.15, \"reset\": 0.1, \"short\": "
                 "0.1, \"500\": 0.05}}");
    snprintf(local, sizeof local, "wds:%s/data/wds,stream=1", test_dir);
    snprintf(remote, sizeof remote, "wds:s3://%s/rs2/wds,stream=1", need("FERRY_TEST_S3_BUCKET"));
    ferry_loader_stats st;
    CHECK_U64(digest(remote, 2, &st), digest(local, 2, NULL));
    CHECK(st.retries > 0);
    snprintf(local, sizeof local, "records:%s/data/records", test_dir);
    snprintf(remote, sizeof remote, "records:s3://%s/rs2/records", need("FERRY_TEST_S3_BUCKET"));
    CHECK_U64(digest(remote, 2, &st), digest(local, 2, NULL));
    proxy_config("{\"faults\": {}}");
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

typedef struct job {
    const char *spec;
    uint64_t h;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    j->h = digest(j->spec, 2, NULL);
    return NULL;
}

/* Two loaders of one process read the same remote set at once, on an empty cache:
 * their threads wait on one another's fetches, and both get the local bytes. */
TEST(two_loaders_share_the_cache)
{
    char local[600], remote[600];
    setup("rs3", "rs3", false);
    snprintf(local, sizeof local, "records:%s/data/records", test_dir);
    snprintf(remote, sizeof remote, "records:s3://%s/rs3/records", need("FERRY_TEST_S3_BUCKET"));
    uint64_t want = digest(local, 2, NULL);
    job a = {remote, 0}, b = {remote, 0};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, run_job, &a) == 0);
    CHECK(pthread_create(&tb, NULL, run_job, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_U64(a.h, want);
    CHECK_U64(b.h, want);
    ferry_remote_stats r;
    ferry_remote_stats_get(&r);
    CHECK_U64(r.cache_misses, 7);    /* the manifest and 6 shards, each fetched once */
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}

/* A shard whose bytes fail its CRCs: each fetched copy is checked before it enters
 * the cache, so the error names the URL and the offset, no copy of it is left in
 * the cache, and under the skip policy its samples are skipped, each named. */
TEST(a_corrupt_shard_is_never_cached)
{
    char cmd[2048], path[700], remote[600], shard[600] = "";
    setup("rs4", "rs4", false);
    snprintf(path, sizeof path, "%s/data/records", test_dir);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "00001-of") && strstr(e->d_name, ".ferry"))
            snprintf(shard, sizeof shard, "%s", e->d_name);
    closedir(d);
    CHECK(shard[0]);
    snprintf(path, sizeof path, "%s/data/records/%s", test_dir, shard);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, 2000, SEEK_SET) == 0); /* inside a record of 100 bytes */
    int b = fgetc(f);
    CHECK(fseek(f, 2000, SEEK_SET) == 0);
    CHECK(fputc(b ^ 0x5A, f) != EOF);
    CHECK(fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "'%s' '%s/servers.py' upload '%s/data' 'rs4bad/' >/dev/null",
             need("FERRY_TEST_SERVERS_PYTHON"), need("FERRY_TEST_SERVERS"), test_dir);
    CHECK(system(cmd) == 0);
    snprintf(remote, sizeof remote, "records:s3://%s/rs4bad/records", need("FERRY_TEST_S3_BUCKET"));

    ferry_dataset *ds = NULL;
    ferry_loader *l = NULL;
    ferry_batch *batch;
    int rc;
    for (int skip = 0; skip < 2; skip++) {
        CHECK_OK(ferry_source_open(remote, &ds, NULL));
        ferry_loader_opts o = test_loader_opts(8, 2);
        o.on_error = skip ? FERRY_ON_ERROR_SKIP : FERRY_ON_ERROR_FAIL;
        o.skip_budget = 1000;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        CHECK_OK(ferry_loader_start(l, 0, 0));
        uint64_t samples = 0;
        while ((rc = ferry_loader_next(l, &batch)) == 0) {
            samples += ferry_batch_size(batch);
            ferry_batch_release(batch);
        }
        char want[800];
        snprintf(want, sizeof want, "s3://%s/rs4bad/records/%s: record ",
                 need("FERRY_TEST_S3_BUCKET"), shard);
        if (!skip) {
            CHECK_RC(rc, FERRY_ECORRUPT);
            CHECK_CONTAINS(ferry_loader_errmsg(l), want);
            CHECK_CONTAINS(ferry_loader_errmsg(l), "offset");
            CHECK_CONTAINS(ferry_loader_errmsg(l), "failing its check each time: not cached");
        } else {
            ferry_loader_stats st;
            CHECK_RC(rc, FERRY_END);
            CHECK_OK(ferry_loader_stats_get(l, &st));
            CHECK_U64(st.skipped, 40); /* the shard's records */
            CHECK_U64(samples, 200);
            uint64_t epoch, index;
            const char *msg;
            CHECK_OK(ferry_loader_skipped_sample(l, 0, &epoch, &index, &msg));
            CHECK_CONTAINS(msg, want);
        }
        ferry_loader_free(l);
        ferry_dataset_free(ds);
    }
    /* nothing of the damaged object in the cache: no temporary, and no copy of it */
    snprintf(path, sizeof path, "%s/cache/v1/tmp", test_dir);
    d = opendir(path);
    CHECK(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        CHECK(e->d_name[0] == '.');
    closedir(d);
    snprintf(cmd, sizeof cmd,
             "find '%s/cache/v1/objects' -type f -exec cmp -s '%s/data/records/%s' {} \\; "
             "-print | grep -q .",
             test_dir, test_dir, shard);
    CHECK(system(cmd) != 0);
    CHECK_OK(ferry_remote_wait(60)); /* fetches ahead outlive the dataset */
    test_remove_dir();
}
