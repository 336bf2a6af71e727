/*
 * The remote layer's pieces that need no server: SHA-256 and HMAC against their
 * standards' vectors, the SigV4 signer against AWS's documented S3 examples, URL
 * and brace parsing, the AWS settings, S3's XML answers, and the node cache
 * (several processes, a killed fetch, eviction) with a fetch that writes known
 * bytes instead of downloading them; the formats' checks of a fetched copy.
 */
#include "harness.h"
#include "formats/records_internal.h"
#include "formats/tar.h"
#include "formats/tfrecord_internal.h"
#include "io/remote.h"

#include <ferry/remote.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void check_sha(const char *msg, size_t n, const char *want)
{
    char hex[65];
    ferry__sha256_hex(msg, n, hex);
    if (strcmp(hex, want))
        test_fail(__FILE__, __LINE__, "sha256 of %zu bytes: %s, want %s", n, hex, want);
}

TEST(sha256_vectors)
{
    /* FIPS 180-4 examples */
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(m, strlen(m), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a', fed in uneven pieces */
    ferry__sha256 s;
    char buf[1000], hex[65];
    uint8_t d[32];
    memset(buf, 'a', sizeof buf);
    ferry__sha256_init(&s);
    for (size_t done = 0, k = 1; done < 1000000; k = k % 997 + 1) {
        size_t take = 1000000 - done < k ? 1000000 - done : k;
        ferry__sha256_update(&s, buf, take);
        done += take;
    }
    ferry__sha256_final(&s, d);
    ferry__hex(d, 32, hex);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

TEST(hmac_rfc4231)
{
    uint8_t key[131], out[32];
    char hex[65];
    memset(key, 0x0b, 20);
    ferry__hmac_sha256(key, 20, "Hi There", 8, out);
    ferry__hex(out, 32, hex);
    CHECK(!strcmp(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
    ferry__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, out);
    ferry__hex(out, 32, hex);
    CHECK(!strcmp(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    /* a key longer than the block is hashed first (test case 6) */
    memset(key, 0xaa, sizeof key);
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    ferry__hmac_sha256(key, 131, m, strlen(m), out);
    ferry__hex(out, 32, hex);
    CHECK(!strcmp(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

#define AWS_ID "AKIAIOSFODNN7EXAMPLE"
#define AWS_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EMPTY_HASH "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The examples of AWS's "Signature Calculations for the Authorization Header"
 * (S3 API reference): their signatures as published. */
TEST(sigv4_s3_examples)
{
    char canon[4096], sts[1024], auth[1024];
    ferry__hdr get_object[] = {{"Host", "examplebucket.s3.amazonaws.com"},
                               {"Range", "bytes=0-9"},
                               {"x-amz-content-sha256", EMPTY_HASH},
                               {"x-amz-date", "20130524T000000Z"}};
    ferry__sigv4_req r = {.method = "GET",
                          .path = "/test.txt",
                          .query = "",
                          .headers = get_object,
                          .nheaders = 4,
                          .payload_hash = EMPTY_HASH,
                          .region = "us-east-1",
                          .service = "s3",
                          .key_id = AWS_ID,
                          .secret = AWS_SECRET};
    CHECK_OK(ferry__sigv4_sign(&r, canon, sts, auth, sizeof auth));
    CHECK_CONTAINS(canon,
                   "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n");
    CHECK_CONTAINS(sts, "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK_CONTAINS(auth,
                   "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                   "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                   "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");

    /* GET Bucket (list objects): the query sorted by name */
    ferry__hdr list[] = {{"host", "examplebucket.s3.amazonaws.com"},
                         {"x-amz-date", "20130524T000000Z"},
                         {"x-amz-content-sha256", EMPTY_HASH}};
    r.path = "/";
    r.query = "prefix=J&max-keys=2";
    r.headers = list;
    r.nheaders = 3;
    CHECK_OK(ferry__sigv4_sign(&r, canon, sts, auth, sizeof auth));
    CHECK_CONTAINS(canon, "GET\n/\nmax-keys=2&prefix=J\n");
    CHECK_CONTAINS(auth,
                   "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");

    /* GET Bucket lifecycle: a name with no value */
    r.query = "lifecycle";
    CHECK_OK(ferry__sigv4_sign(&r, canon, sts, auth, sizeof auth));
    CHECK_CONTAINS(canon, "GET\n/\nlifecycle=\n");
    CHECK_CONTAINS(auth,
                   "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");

    /* values are trimmed and runs of spaces made one; no x-amz-date is refused */
    ferry__hdr spaced[] = {
        {"host", "h"}, {"x-amz-date", "20130524T000000Z"}, {"My-Header", "  a   b  "}};
    r.headers = spaced;
    CHECK_OK(ferry__sigv4_sign(&r, canon, NULL, auth, sizeof auth));
    CHECK_CONTAINS(canon, "my-header:a b\n");
    r.nheaders = 1;
    CHECK_RC(ferry__sigv4_sign(&r, canon, NULL, auth, sizeof auth), FERRY_EINVAL);
}

TEST(url_parse)
{
    ferry__url u;
    /* a space is refused: it must be written %20 */
    CHECK_RC(ferry__url_parse(&u, "s3://my-bucket/a b"), FERRY_EINVAL);
    CHECK_OK(ferry__url_parse(&u, "s3://my-bucket/a/b%/k.tar"));
    CHECK_EQ(u.scheme, FERRY__URL_S3);
    CHECK(!strcmp(u.host, "my-bucket"));
    CHECK(!strcmp(u.path, "a/b%/k.tar"));
    CHECK_OK(ferry__url_parse(&u, "https://example.com:8443/x/y.tar?v=1#frag"));
    CHECK_EQ(u.scheme, FERRY__URL_HTTPS);
    CHECK(!strcmp(u.host, "example.com:8443"));
    CHECK(!strcmp(u.path, "/x/y.tar?v=1"));
    CHECK_OK(ferry__url_parse(&u, "http://h"));
    CHECK(!strcmp(u.path, "/"));
    CHECK_RC(ferry__url_parse(&u, "s3:///key"), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "no bucket");
    CHECK_RC(ferry__url_parse(&u, "s3://bad$bucket/k"), FERRY_EINVAL);
    CHECK_RC(ferry__url_parse(&u, "http://user:pw@h/k"), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "credentials in the URL");
    CHECK_RC(ferry__url_parse(&u, "ftp://h/k"), FERRY_EINVAL);
    CHECK(ferry__is_remote("s3://b") && ferry__is_remote("https://h") &&
          !ferry__is_remote("/s3://"));

    char enc[64];
    CHECK(ferry__uri_encode("a b/c~é", strlen("a b/c~é"), true, enc, sizeof enc));
    CHECK(!strcmp(enc, "a%20b/c~%C3%A9"));
    CHECK(ferry__uri_encode("a/b=", 4, false, enc, sizeof enc));
    CHECK(!strcmp(enc, "a%2Fb%3D"));
    CHECK(!ferry__uri_encode("abcdef", 6, false, enc, 6));
}

typedef struct names {
    char v[64][64];
    int n;
} names;

static int add_name(void *arg, const char *text)
{
    names *ns = arg;
    if (ns->n == 64)
        return ferry__err(FERRY_ERANGE, "too many");
    snprintf(ns->v[ns->n++], 64, "%s", text);
    return 0;
}

TEST(brace_ranges)
{
    names ns = {0};
    CHECK_OK(ferry__brace_expand("s3://b/train-{000008..000011}.tar", 100, add_name, &ns));
    CHECK_EQ(ns.n, 4);
    CHECK(!strcmp(ns.v[0], "s3://b/train-000008.tar"));
    CHECK(!strcmp(ns.v[3], "s3://b/train-000011.tar"));
    ns.n = 0;
    CHECK_OK(ferry__brace_expand("{a,b}-{9..10}{,.gz}", 100, add_name, &ns));
    CHECK_EQ(ns.n, 8);
    CHECK(!strcmp(ns.v[0], "a-9"));
    CHECK(!strcmp(ns.v[1], "a-9.gz"));
    CHECK(!strcmp(ns.v[2], "a-10"));
    CHECK(!strcmp(ns.v[7], "b-10.gz"));
    ns.n = 0;
    CHECK_OK(ferry__brace_expand("plain", 100, add_name, &ns));
    CHECK_EQ(ns.n, 1);
    CHECK_RC(ferry__brace_expand("x{1..3", 100, add_name, &ns), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "not closed");
    CHECK_RC(ferry__brace_expand("x{5..3}", 100, add_name, &ns), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "backwards");
    CHECK_RC(ferry__brace_expand("x{a{b}}", 100, add_name, &ns), FERRY_EINVAL);
    CHECK_RC(ferry__brace_expand("x}", 100, add_name, &ns), FERRY_EINVAL);
    CHECK_RC(ferry__brace_expand("{0..999999}", 1000, add_name, &ns), FERRY_ERANGE);
}

static int ini_line(void *arg, const char *section, const char *key, const char *value)
{
    char *out = arg;
    snprintf(out + strlen(out), 1024 - strlen(out), "[%s]%s=%s;", section, key, value);
    return 0;
}

TEST(ini_parse)
{
    char out[1024] = "";
    const char *text = "# comment\n[default]\naws_access_key_id = AK\r\n ; indented comment\n"
                       "[profile p]\nregion=eu-west-1\ns3 =\n  endpoint_url = http://x:9\n"
                       "  addressing_style = path\nother = 1\n";
    CHECK_OK(ferry__ini_parse(text, strlen(text), "cfg", ini_line, out));
    CHECK(!strcmp(out, "[default]aws_access_key_id=AK;[profile p]region=eu-west-1;[profile p]s3=;"
                       "[profile p]s3.endpoint_url=http://x:9;[profile p]s3.addressing_style=path;"
                       "[profile p]other=1;"));
    CHECK_RC(ferry__ini_parse("[a]\nnot a pair\n", 16, "cfg", ini_line, out), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "cfg: line 2");
    CHECK_RC(ferry__ini_parse("k=v\n", 4, "cfg", ini_line, out), FERRY_ECORRUPT);
    CHECK_RC(ferry__ini_parse("[a\n", 3, "cfg", ini_line, out), FERRY_ECORRUPT);
}

/* ferry_remote_wait: nothing in the background is an immediate 0; a bad timeout
 * is refused. */
TEST(remote_wait)
{
    CHECK_OK(ferry_remote_wait(0));
    CHECK_RC(ferry_remote_wait(-1), FERRY_EINVAL);
    CHECK_RC(ferry_remote_wait(NAN), FERRY_EINVAL);
}

TEST(aws_settings)
{
    char cred[512], conf[512], e1[600], e2[600];
    ferry__aws a;
    test_make_dir("aws");
    test_path("credentials", cred);
    test_path("config", conf);
    const char *c = "[default]\naws_access_key_id = DEF\naws_secret_access_key = DSECRET\n"
                    "[work]\naws_access_key_id = WORK\naws_secret_access_key = WSECRET\n"
                    "aws_session_token = TOK\n";
    const char *f = "[default]\nregion = us-west-2\n[profile work]\nregion = eu-central-1\n"
                    "s3 =\n  endpoint_url = http://127.0.0.1:9000/\n";
    test_write_file(cred, c, strlen(c));
    test_write_file(conf, f, strlen(f));
    snprintf(e1, sizeof e1, "AWS_SHARED_CREDENTIALS_FILE=%s", cred);
    snprintf(e2, sizeof e2, "AWS_CONFIG_FILE=%s", conf);

    char *env_default[] = {e1, e2, NULL};
    CHECK_OK(ferry__aws_load(&a, env_default));
    CHECK(!strcmp(a.key_id, "DEF") && !strcmp(a.secret, "DSECRET") && !a.token[0]);
    CHECK(!strcmp(a.region, "us-west-2"));
    CHECK(!a.endpoint[0]);

    char *env_work[] = {e1, e2, "AWS_PROFILE=work", NULL};
    CHECK_OK(ferry__aws_load(&a, env_work));
    CHECK(!strcmp(a.key_id, "WORK") && !strcmp(a.token, "TOK"));
    CHECK(!strcmp(a.region, "eu-central-1"));
    CHECK(!strcmp(a.endpoint, "http://127.0.0.1:9000"));
    CHECK_CONTAINS(a.where, "profile \"work\"");

    /* the environment wins over the files */
    char *env_keys[] = {e1,
                        e2,
                        "AWS_PROFILE=work",
                        "AWS_ACCESS_KEY_ID=ENV",
                        "AWS_SECRET_ACCESS_KEY=ESECRET",
                        "AWS_REGION=ap-south-1",
                        "AWS_ENDPOINT_URL_S3=https://s3.example",
                        NULL};
    CHECK_OK(ferry__aws_load(&a, env_keys));
    CHECK(!strcmp(a.key_id, "ENV") && !a.token[0]);
    CHECK(!strcmp(a.region, "ap-south-1"));
    CHECK(!strcmp(a.endpoint, "https://s3.example"));

    char *env_missing[] = {e1, e2, "AWS_PROFILE=nope", NULL};
    CHECK_RC(ferry__aws_load(&a, env_missing), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "profile \"nope\"");

    /* nothing at all: unsigned, us-east-1 */
    char *env_none[] = {"HOME=/nonexistent", NULL};
    CHECK_OK(ferry__aws_load(&a, env_none));
    CHECK(!a.key_id[0]);
    CHECK(!strcmp(a.region, "us-east-1"));
    /* where credentials were looked for, for the message of a refused unsigned request */
    CHECK_CONTAINS(a.where, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment");
    CHECK_CONTAINS(a.where, "profile \"default\" (AWS_PROFILE) in /nonexistent/.aws/credentials "
                            "and /nonexistent/.aws/config");
    char *env_files[] = {e1, e2, "AWS_PROFILE=empty", NULL};
    const char *none = "[empty]\nregion = us-west-1\n";
    test_write_file(cred, none, strlen(none));
    CHECK_OK(ferry__aws_load(&a, env_files));
    CHECK(!a.key_id[0]);
    CHECK_CONTAINS(a.where, cred);
    CHECK_CONTAINS(a.where, conf);
    test_write_file(cred, c, strlen(c));

    char *env_bad[] = {"HOME=/nonexistent", "AWS_ENDPOINT_URL=localhost:9000", NULL};
    CHECK_RC(ferry__aws_load(&a, env_bad), FERRY_EINVAL);
    test_remove_dir();
}

TEST(s3_xml)
{
    const char *page =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>b</Name><Prefix>d/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
        "<Contents><Key>d/a&amp;b.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
        "<ETag>&quot;abc&quot;</ETag><Size>123</Size><StorageClass>STANDARD</StorageClass></"
        "Contents>"
        "<Contents><Key>d/&#x4e2d;.tar</Key><ETag>\"e2\"</ETag><Size>0</Size></Contents>"
        "<CommonPrefixes><Prefix>d/sub/</Prefix></CommonPrefixes>"
        "<NextContinuationToken>tok+/=</NextContinuationToken><Empty/></ListBucketResult>";
    ferry__s3_page p;
    CHECK_OK(ferry__s3_parse_list(&p, page, strlen(page), "list"));
    CHECK_EQ(p.n, 2);
    CHECK(!strcmp(p.obj[0].key, "d/a&b.tar"));
    CHECK_U64(p.obj[0].size, 123);
    CHECK(!strcmp(p.obj[0].etag, "\"abc\""));
    CHECK(!strcmp(p.obj[1].key, "d/\xe4\xb8\xad.tar"));
    CHECK_EQ(p.nprefixes, 1);
    CHECK(!strcmp(p.prefixes[0], "d/sub/"));
    CHECK(p.truncated);
    CHECK(!strcmp(p.next_token, "tok+/="));
    ferry__s3_page_free(&p);

    const char *bad[] = {
        "<ListBucketResult><Contents><Key>k</Key><Size>x</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<Error><Code>AccessDenied</Code></Error>",
        "<ListBucketResult>&bogus;</ListBucketResult>",
        "<ListBucketResult>"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_RC(ferry__s3_parse_list(&p, bad[i], strlen(bad[i]), "list"), FERRY_ECORRUPT);

    char code[64], msg[128];
    const char *err = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The "
                      "specified key does not exist.</Message><Key>k</Key></Error>";
    CHECK(ferry__s3_parse_error(err, strlen(err), code, sizeof code, msg, sizeof msg));
    CHECK(!strcmp(code, "NoSuchKey"));
    CHECK(!strcmp(msg, "The specified key does not exist."));
    CHECK(!ferry__s3_parse_error("<html>", 6, code, sizeof code, msg, sizeof msg));
    CHECK(!code[0]);
}

TEST(parse_size)
{
    uint64_t v;
    CHECK(ferry__parse_size("123", &v) && v == 123);
    CHECK(ferry__parse_size("2K", &v) && v == 2048);
    CHECK(ferry__parse_size("1.5GiB", &v) && v == (uint64_t)3 << 29);
    CHECK(ferry__parse_size("10GB", &v) && v == (uint64_t)10 << 30);
    CHECK(ferry__parse_size("1T", &v) && v == (uint64_t)1 << 40);
    CHECK(!ferry__parse_size("", &v) && !ferry__parse_size("-1", &v) &&
          !ferry__parse_size("5X", &v) && !ferry__parse_size("1e30", &v));
}

/* ---- The cache, with a fetch that writes known bytes ---- */

typedef struct fake {
    const char *count_path; /* each fetch appends a byte here */
    int kill_after;         /* > 0: the process dies after writing this many bytes */
    int fail;               /* the fetch fails */
} fake;

static int fake_fetch(void *arg, const ferry__obj *o, int fd, const char *name)
{
    fake *f = arg;
    (void)name;
    int c = open(f->count_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (c >= 0) {
        CHECK(write(c, "x", 1) == 1);
        close(c);
    }
    if (f->fail)
        return ferry__err(FERRY_EIO, "%s: the fake fetch fails", o->url);
    for (uint64_t i = 0; i < o->size; i++) {
        uint8_t b = (uint8_t)(i * 7 + o->etag[1]);
        if (f->kill_after && i == (uint64_t)f->kill_after)
            raise(SIGKILL);
        if (pwrite(fd, &b, 1, (off_t)i) != 1)
            return ferry__err(FERRY_EIO, "write");
        if (i % 4096 == 0)
            usleep(200); /* long enough for other processes to come and wait */
    }
    return 0;
}

static size_t fetches(const char *count_path)
{
    struct stat st;
    return stat(count_path, &st) == 0 ? (size_t)st.st_size : 0;
}

static void check_copy(int fd, const ferry__obj *o)
{
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    CHECK_U64(st.st_size, o->size);
    uint8_t *b = malloc(o->size);
    CHECK(pread(fd, b, o->size, 0) == (ssize_t)o->size);
    for (uint64_t i = 0; i < o->size; i++)
        if (b[i] != (uint8_t)(i * 7 + o->etag[1]))
            test_fail(__FILE__, __LINE__, "byte %llu of the copy is wrong", (unsigned long long)i);
    free(b);
}

static size_t count_files(const char *sub)
{
    char cmd[700], out[64] = "";
    snprintf(cmd, sizeof cmd, "find %s/%s -type f | wc -l", test_dir, sub);
    FILE *p = popen(cmd, "r");
    CHECK(p && fgets(out, sizeof out, p));
    pclose(p);
    return (size_t)atol(out);
}

TEST(cache_one_fetch_per_node)
{
    char count[512];
    test_make_dir("cache1");
    CHECK_OK(ferry__cache_configure(test_dir, "1G"));
    test_path("fetches", count);
    ferry__obj o = {.url = "s3://b/shard-0.tar", .size = 200000, .etag = "\"v1\""};
    /* four processes open the same object at once: one fetches, the others wait */
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        if ((kids[k] = fork()) == 0) {
            fake f = {count, 0, 0};
            int fd;
            bool hit;
            if (ferry__cache_open(&o, fake_fetch, &f, &fd, &hit) != 0)
                _exit(1);
            check_copy(fd, &o);
            close(fd);
            _exit(0);
        }
    }
    for (int k = 0; k < 4; k++) {
        int st;
        CHECK(waitpid(kids[k], &st, 0) == kids[k]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_EQ(fetches(count), 1);
    /* a new version (another ETag) is another key: fetched again; the old stays */
    ferry__obj o2 = o;
    snprintf(o2.etag, sizeof o2.etag, "\"v2\"");
    fake f = {count, 0, 0};
    int fd;
    bool hit;
    CHECK_OK(ferry__cache_open(&o2, fake_fetch, &f, &fd, &hit));
    CHECK(!hit);
    check_copy(fd, &o2);
    close(fd);
    CHECK_EQ(fetches(count), 2);
    CHECK_OK(ferry__cache_open(&o, fake_fetch, &f, &fd, &hit));
    CHECK(hit);
    close(fd);
    CHECK_EQ(count_files("v1/objects"), 2);
    /* a failed fetch leaves no temporary and no copy */
    ferry__obj o3 = {.url = "s3://b/other", .size = 10, .etag = "\"z\""};
    fake bad = {count, 0, 1};
    CHECK_RC(ferry__cache_open(&o3, fake_fetch, &bad, &fd, &hit), FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), "the fake fetch fails");
    CHECK_EQ(count_files("v1/tmp"), 0);
    CHECK_EQ(count_files("v1/objects"), 2);
    test_remove_dir();
}

TEST(cache_killed_fetch)
{
    char count[512];
    test_make_dir("cache2");
    CHECK_OK(ferry__cache_configure(test_dir, "1G"));
    test_path("fetches", count);
    ferry__obj o = {.url = "https://h/x.tfrecord", .size = 100000, .etag = "\"k\""};
    pid_t kid = fork();
    if (kid == 0) {
        fake f = {count, 50000, 0};
        int fd;
        bool hit;
        ferry__cache_open(&o, fake_fetch, &f, &fd, &hit);
        _exit(3); /* not reached: the fetch kills the process */
    }
    int st;
    CHECK(waitpid(kid, &st, 0) == kid);
    CHECK(WIFSIGNALED(st));
    /* the half-written temporary is there, and no copy */
    CHECK_EQ(count_files("v1/tmp"), 1);
    CHECK_EQ(count_files("v1/objects"), 0);
    /* the next process removes it and fetches the whole object */
    kid = fork();
    if (kid == 0) {
        fake f = {count, 0, 0};
        int fd;
        bool hit;
        if (ferry__cache_open(&o, fake_fetch, &f, &fd, &hit) != 0 || hit)
            _exit(1);
        check_copy(fd, &o);
        _exit(0);
    }
    CHECK(waitpid(kid, &st, 0) == kid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(count_files("v1/tmp"), 0);
    CHECK_EQ(count_files("v1/objects"), 1);
    CHECK_EQ(fetches(count), 2);
    test_remove_dir();
}

TEST(cache_eviction)
{
    char count[512];
    test_make_dir("cache3");
    /* room for three objects of 30000 bytes */
    CHECK_OK(ferry__cache_configure(test_dir, "100000"));
    test_path("fetches", count);
    fake f = {count, 0, 0};
    ferry__obj o[5];
    char urls[5][64];
    int fds[5];
    bool hit;
    for (int i = 0; i < 5; i++) {
        snprintf(urls[i], sizeof urls[i], "s3://b/part-%d", i);
        o[i] = (ferry__obj){.url = urls[i], .size = 30000, .etag = "\"e\""};
    }
    /* 0, 1 and 2 read at once: they fill the cache */
    for (int i = 0; i < 3; i++)
        CHECK_OK(ferry__cache_open(&o[i], fake_fetch, &f, &fds[i], &hit));
    /* 3 does not fit beside three copies being read: said with the numbers */
    CHECK_RC(ferry__cache_open(&o[3], fake_fetch, &f, &fds[3], &hit), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "the limit is 100000 bytes");
    CHECK_CONTAINS(ferry_last_errmsg(), "90000 by copies being read");
    /* with 1 closed, the least recently used free copy goes: 1, not 0 or 2 */
    usleep(20000);
    close(fds[1]);
    CHECK_OK(ferry__cache_open(&o[3], fake_fetch, &f, &fds[3], &hit));
    check_copy(fds[0], &o[0]);
    check_copy(fds[2], &o[2]);
    check_copy(fds[3], &o[3]);
    CHECK_EQ(count_files("v1/objects"), 3);
    /* 0 used again (a hit) is now more recent than 2: closing both, 2 goes first */
    close(fds[0]);
    close(fds[2]);
    usleep(20000);
    CHECK_OK(ferry__cache_open(&o[0], fake_fetch, &f, &fds[0], &hit));
    CHECK(hit);
    close(fds[0]);
    size_t before = fetches(count);
    CHECK_OK(ferry__cache_open(&o[4], fake_fetch, &f, &fds[4], &hit));
    CHECK_OK(ferry__cache_open(&o[0], fake_fetch, &f, &fds[0], &hit));
    CHECK(hit);
    CHECK_EQ(fetches(count), before + 1);
    close(fds[3]);
    close(fds[4]);
    CHECK_OK(ferry__cache_open(&o[2], fake_fetch, &f, &fds[2], &hit));
    CHECK(!hit); /* it was evicted */
    /* an object larger than the whole limit is refused at once */
    ferry__obj big = {.url = "s3://b/big", .size = 200000, .etag = "\"e\""};
    close(fds[0]);
    CHECK_RC(ferry__cache_open(&big, fake_fetch, &f, &fds[0], &hit), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "s3://b/big: 200000 bytes, more than cache");
    test_remove_dir();
}

TEST(cache_key_is_version)
{
    char k1[65], k2[65], k3[65], k4[65];
    ferry__obj a = {.url = "s3://b/x/train.tar", .size = 5, .etag = "\"1\""};
    ferry__obj b = {.url = "s3://b/y/train.tar", .size = 5, .etag = "\"1\""};
    ferry__obj c = {.url = "s3://b/x/train.tar", .size = 5, .etag = "\"2\""};
    ferry__obj d = {.url = "http://h/train.tar", .size = 5, .modified = "Mon"};
    ferry__cache_key(&a, k1);
    ferry__cache_key(&b, k2);
    ferry__cache_key(&c, k3);
    ferry__cache_key(&d, k4);
    /* the same basename in two places, and two versions of one object: four keys */
    CHECK(strcmp(k1, k2) && strcmp(k1, k3) && strcmp(k2, k3) && strcmp(k4, k1));
    d.size = 6;
    ferry__cache_key(&d, k1);
    CHECK(strcmp(k1, k4));
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, off, SEEK_SET) == 0);
    int b = fgetc(f);
    CHECK(b != EOF);
    CHECK(fseek(f, off, SEEK_SET) == 0);
    CHECK(fputc(b ^ 0x5A, f) != EOF);
    CHECK(fclose(f) == 0);
}

/* The formats' checks of a fetched copy, run by the cache before the rename: a
 * good file passes; a byte changed is an error naming the URL (never the
 * temporary), the record or header and its offset. */
TEST(format_checks_of_fetched_copies)
{
    char path[512], cmd[1024], shard[600] = "";
    const char *url = "s3://bucket/data/file";
    test_make_dir("checks");

    /* TFRecord: two frames */
    uint8_t buf[4096];
    size_t n = test_tfrecord_frame(buf, "first record", 12);
    n += test_tfrecord_frame(buf + n, "the second one", 14);
    test_path("a.tfrecord", path);
    test_write_file(path, buf, n);
    CHECK_OK(ferry__tfr_check_copy(path, url));
    flip_byte(path, 12 + 12 + 4 + 12 + 3); /* in the second record's data */
    CHECK_RC(ferry__tfr_check_copy(path, url), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "s3://bucket/data/file: record 1 at offset 28");
    test_write_file(path, buf, n - 3); /* cut short */
    CHECK_RC(ferry__tfr_check_copy(path, url), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "record 1 at offset 28: truncated");

    /* a tar: two members */
    uint8_t tar[512 * 6] = {0};
    test_tar_header(tar, "0.txt", '0', 5, 0);
    memcpy(tar + 512, "hello", 5);
    test_tar_header(tar + 1024, "0.cls", '0', 1, 0);
    tar[1536] = '7';
    test_path("a.tar", path);
    test_write_file(path, tar, sizeof tar);
    CHECK_OK(ferry__tar_check_copy(path, url));
    flip_byte(path, 1024 + 2); /* the second header's name */
    CHECK_RC(ferry__tar_check_copy(path, url), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "s3://bucket/data/file: header 1 at offset 1024");
    CHECK_CONTAINS(ferry_last_errmsg(), "checksum");

    /* a records shard, made by the command */
    snprintf(cmd, sizeof cmd,
             "'%s' pack synthetic:20,bytes=100 '%s/set' --shard-records 10 --no-progress "
             ">/dev/null",
             TEST_FERRY_CLI, test_dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s/set", test_dir);
    DIR *d = opendir(cmd);
    CHECK(d != NULL);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "00001-of") && strstr(e->d_name, ".ferry"))
            snprintf(shard, sizeof shard, "%s/%s", cmd, e->d_name);
    closedir(d);
    CHECK(shard[0]);
    CHECK_OK(ferry__records_check_copy(shard, url));
    flip_byte(shard, 600); /* inside a record */
    CHECK_RC(ferry__records_check_copy(shard, url), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "offset");
    CHECK_CONTAINS(ferry_last_errmsg(), shard); /* the cache puts the URL in its place */
    test_remove_dir();
}
