/*
 * WebDataset: the real shards in ../shared/testdata/webdataset read with the
 * contents SOURCES.md lists (map-style and stream, tar and tgz), GNU and pax long
 * names, missing fields by policy, the stream's split across shards, the image
 * pipeline over a shard of JPEGs, and every bad archive with its message.
 */
#include "harness.h"
#include "source_table.h"

#include <ferry/ferry.h>
#include <ferry/image.h>
#include <ferry/wds.h>

#include <zlib.h>
#include <unistd.h>

#define WDS FERRY_SHARED_DIR "/testdata/webdataset"
#define JPEGS FERRY_SHARED_DIR "/testdata/jpeg/valid"

static const char *key(const table *t, size_t i)
{
    static char buf[4200];
    int k = col(t, "__key__");
    memcpy(buf, t->rows[i].data[k], (size_t)t->rows[i].len[k]);
    buf[t->rows[i].len[k]] = 0;
    return buf;
}

static const uint8_t *bytes(const table *t, size_t i, const char *f, size_t *n)
{
    int k = col(t, f);
    *n = (size_t)t->rows[i].len[k];
    return t->rows[i].data[k];
}

static int64_t cls(const table *t, size_t i)
{
    int64_t v;
    memcpy(&v, t->rows[i].data[col(t, "cls")], 8);
    return v;
}

TEST(compressed_tar)
{
    test_need_shared(WDS "/compressed.tar");
    table t = read_source("wds:" WDS "/compressed.tar", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 3); /* the directory entry is passed over */
    CHECK_EQ(t.nf, 2);
    static const char *want[] = {"hello\n", "world\n", "gzip\n"};
    for (size_t i = 0; i < 3; i++) {
        char k[32];
        snprintf(k, sizeof k, "compressed/%04zu", i + 1);
        CHECK(!strcmp(key(&t, i), k));
        size_t n;
        const uint8_t *gz = bytes(&t, i, "txt.gz", &n);
        uint8_t out[64];
        z_stream z = {0};
        CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
        z.next_in = (uint8_t *)gz;
        z.avail_in = (uInt)n;
        z.next_out = out;
        z.avail_out = sizeof out;
        CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
        CHECK_EQ(z.total_out, strlen(want[i]));
        CHECK(!memcmp(out, want[i], strlen(want[i])));
        inflateEnd(&z);
    }
    table_free(&t);
}

/* msgpack's positive integers as the writer used them */
static const uint8_t *mp_int(const uint8_t *p, uint64_t *v)
{
    if (p[0] < 0x80) {
        *v = p[0];
        return p + 1;
    }
    if (p[0] == 0xcc) {
        *v = p[1];
        return p + 2;
    }
    CHECK(p[0] == 0xcd);
    *v = (uint64_t)p[1] << 8 | p[2];
    return p + 3;
}

TEST(mpdata_tar)
{
    test_need_shared(WDS "/mpdata.tar");
    for (int stream = 0; stream <= 1; stream++) {
        table t = read_source(stream ? "wds:" WDS "/mpdata.tar,stream=1" : "wds:" WDS "/mpdata.tar",
                              0, 1, 0);
        CHECK_EQ(t.rc, FERRY_END);
        CHECK_EQ(t.n, 100);
        size_t n;
        const uint8_t *p = bytes(&t, 0, "mp", &n);
        static const uint8_t first[] = {0x82, 0xa1, 0x78, 0x00, 0xa1, 0x79, 0x00};
        CHECK_EQ(n, sizeof first);
        CHECK(!memcmp(p, first, n));
        for (size_t k = 0; k < 100; k++) {
            char want[8];
            snprintf(want, sizeof want, "%06zu", k);
            CHECK(!strcmp(key(&t, k), want));
            p = bytes(&t, k, "mp", &n);
            uint64_t x, y;
            CHECK(p[0] == 0x82 && p[1] == 0xa1 && p[2] == 'x');
            p = mp_int(p + 3, &x);
            CHECK(p[0] == 0xa1 && p[1] == 'y');
            mp_int(p + 2, &y);
            CHECK_U64(x, k);
            CHECK_U64(y, k * k);
        }
        table_free(&t);
    }
}

TEST(sample_tgz)
{
    test_need_shared(WDS "/sample.tgz");
    table t = read_source("wds:" WDS "/sample.tgz", 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 90);
    CHECK_EQ(t.nf, 3);
    CHECK(!strcmp(key(&t, 0), "10"));
    CHECK_EQ(cls(&t, 0), 0);
    int hist[10] = {0};
    for (size_t i = 0; i < t.n; i++) {
        char want[8];
        snprintf(want, sizeof want, "%zu", i + 10);
        CHECK(!strcmp(key(&t, i), want));
        CHECK(cls(&t, i) >= 0 && cls(&t, i) <= 9);
        hist[cls(&t, i)]++;
        size_t n;
        const uint8_t *png = bytes(&t, i, "png", &n);
        CHECK(n > 16 && !memcmp(png, "\x89PNG\r\n\x1a\n\0\0\0", 11));
        ferry_image_info info;
        CHECK_OK(ferry_image_info_get(png, n, &info));
        CHECK_EQ(info.width, 28);
        CHECK_EQ(info.height, 28);
        CHECK_EQ(info.bit_depth, 8);
    }
    static const int want_hist[10] = {7, 12, 7, 11, 12, 6, 10, 14, 2, 9};
    for (int c = 0; c < 10; c++)
        CHECK_EQ(hist[c], want_hist[c]);
    table_free(&t);
    /* a gzipped tar has no map-style form */
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_wds(&ds, WDS "/sample.tgz", NULL), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "sample.tgz: gzip-compressed");
}

TEST(zstd_tar)
{
    test_need_shared(WDS "/sample.tgz");
    /* the same tar compressed with the zstd command: the same samples */
    test_make_dir("wds-zst");
    char path[512], cmd[1400], spec[700];
    test_path("sample.tar.zst", path);
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' | zstd -q -f -o '%s'", WDS "/sample.tgz", path);
    if (system(cmd) != 0)
        SKIP("no zstd command");
    table g = read_source("wds:" WDS "/sample.tgz", 0, 1, 0);
    snprintf(spec, sizeof spec, "wds:%s", path);
    table t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.rc, FERRY_END);
    CHECK_EQ(t.n, 90);
    CHECK_EQ(t.n, g.n);
    for (size_t i = 0; i < t.n && i < g.n; i++)
        CHECK(!strcmp(key(&t, i), key(&g, i)));
    table_free(&t);
    table_free(&g);
    /* found in a directory too, and refused map-style */
    snprintf(spec, sizeof spec, "wds:%s", test_dir);
    t = read_source(spec, 0, 1, 0);
    CHECK_EQ(t.n, 90);
    table_free(&t);
    ferry_dataset *ds;
    CHECK_RC(ferry_dataset_wds(&ds, path, NULL), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "sample.tar.zst: zstd-compressed");
    test_remove_dir();
}

TEST(tendata_tar)
{
    test_need_shared(WDS "/tendata.tar");
    table t = read_source("wds:" WDS "/tendata.tar", 0, 1, 0);
    CHECK_EQ(t.n, 100);
    for (size_t i = 0; i < t.n; i++) {
        size_t n;
        const uint8_t *p = bytes(&t, i, "ten", &n);
        CHECK_EQ(n, 12736);
        CHECK(!memcmp(p, "~TenBin~", 8));
        /* chunks: magic, int64 size, data padded to 64; header then 28*28 float64 */
        size_t at = 0, chunks = 0, data = 0;
        while (at + 16 <= n) {
            CHECK(!memcmp(p + at, "~TenBin~", 8));
            uint64_t sz;
            memcpy(&sz, p + at + 8, 8);
            if (chunks % 2 == 1)
                data += sz == 6272;
            at += 16 + (sz + 63) / 64 * 64;
            chunks++;
        }
        CHECK_EQ(at, n);
        CHECK_EQ(chunks, 4);
        CHECK_EQ(data, 2); /* xs and ys, 28 x 28 float64 each */
        CHECK(memmem(p, n, "xs", 2) && memmem(p, n, "ys", 2));
    }
    table_free(&t);
}

/* ---- Archives written here ---- */

typedef struct tarbuf {
    uint8_t *p;
    size_t n;
} tarbuf;

static void header(tarbuf *t, const char *name, char type, uint64_t size, int gnu)
{
    test_tar_header(t->p + t->n, name, type, size, gnu);
    t->n += 512;
}

static void member(tarbuf *t, const char *name, const void *data, size_t n)
{
    header(t, name, '0', n, 0);
    memcpy(t->p + t->n, data, n);
    memset(t->p + t->n + n, 0, (512 - n % 512) % 512);
    t->n += (n + 511) / 512 * 512;
}

static void finish(tarbuf *t)
{
    memset(t->p + t->n, 0, 1024);
    t->n += 1024;
}

static table read_tar(const char *name, const tarbuf *t, const char *opts, int *open_rc)
{
    char path[512], spec[700];
    test_write_file(test_path(name, path), t->p, t->n);
    snprintf(spec, sizeof spec, "wds:%s%s", path, opts);
    ferry_dataset *ds;
    ferry_stream *st;
    *open_rc = ferry_source_open(spec, &ds, &st);
    if (*open_rc < 0) {
        table r = {0};
        r.rc = *open_rc;
        snprintf(r.msg, sizeof r.msg, "%s", ferry_last_errmsg());
        return r;
    }
    ferry_dataset_free(ds);
    ferry_stream_free(st);
    return read_source(spec, 0, 1, 0);
}

TEST(long_names)
{
    test_make_dir("wds-names");
    tarbuf t = {calloc(1, 1 << 16), 0};
    char longname[300];
    memset(longname, 'd', 150);
    memcpy(longname + 150, "/sample_a.txt", 14);
    /* GNU: an 'L' member holding the name, then the member */
    header(&t, "././@LongLink", 'L', strlen(longname) + 1, 1);
    memcpy(t.p + t.n, longname, strlen(longname) + 1);
    t.n += 512;
    member(&t, "truncated-name", "A", 1);
    memcpy(longname + 150, "/sample_a.cls", 14);
    header(&t, "././@LongLink", 'L', strlen(longname) + 1, 1);
    memcpy(t.p + t.n, longname, strlen(longname) + 1);
    t.n += 512;
    member(&t, "truncated-name2", "7\n", 2);
    /* pax: "path" and "size" records */
    memset(longname, 'p', 120);
    snprintf(longname + 120, 100, "/sample_b.txt");
    char rec[400];
    int body = snprintf(rec, sizeof rec, "path=%s\n", longname);
    int len = body + 4; /* "NNN " */
    char pax[400];
    snprintf(pax, sizeof pax, "%d %s", len, rec);
    CHECK_EQ((int)strlen(pax), len);
    header(&t, "PaxHeaders/x", 'x', (uint64_t)len, 0);
    memcpy(t.p + t.n, pax, (size_t)len);
    t.n += 512;
    member(&t, "short", "BB", 2);
    snprintf(longname + 120, 100, "/sample_b.cls");
    body = snprintf(rec, sizeof rec, "path=%s\n", longname);
    len = body + 4;
    snprintf(pax, sizeof pax, "%d %s", len, rec);
    header(&t, "PaxHeaders/y", 'x', (uint64_t)len, 0);
    memcpy(t.p + t.n, pax, (size_t)len);
    t.n += 512;
    member(&t, "short2", "-3", 2);
    header(&t, "somedir/", '5', 0, 0);
    finish(&t);
    int orc;
    table r = read_tar("names.tar", &t, "", &orc);
    CHECK_OK(orc);
    CHECK_EQ(r.rc, FERRY_END);
    CHECK_EQ(r.n, 2);
    CHECK_EQ(strlen(key(&r, 0)), 150 + 9);
    CHECK(!strcmp(key(&r, 0) + 150, "/sample_a"));
    CHECK_EQ(cls(&r, 0), 7);
    CHECK(!strcmp(key(&r, 1) + 120, "/sample_b"));
    CHECK_EQ(cls(&r, 1), -3);
    size_t n;
    CHECK(!memcmp(bytes(&r, 1, "txt", &n), "BB", 2) && n == 2);
    table_free(&r);
    free(t.p);
    test_remove_dir();
}

TEST(missing_fields)
{
    test_make_dir("wds-missing");
    tarbuf t = {calloc(1, 1 << 16), 0};
    member(&t, "a.txt", "aa", 2);
    member(&t, "a.cls", "1", 1);
    member(&t, "b.txt", "bb", 2);
    member(&t, "c.txt", "cc", 2);
    member(&t, "c.cls", "2", 1);
    finish(&t);
    for (int stream = 0; stream <= 1; stream++) {
        int orc;
        table r = read_tar(stream ? "m1.tar" : "m0.tar", &t, stream ? ",stream=1" : "", &orc);
        CHECK_OK(orc);
        CHECK_EQ(r.n, 1);
        CHECK_EQ(r.rc, FERRY_ENOENT);
        CHECK_CONTAINS(r.msg, stream ? "m1.tar: sample b at offset 2048 has no .cls"
                                     : "m0.tar: sample b at offset 2048 has no .cls");
        table_free(&r);
        r = read_tar(stream ? "m3.tar" : "m2.tar", &t,
                     stream ? ",stream=1,missing=skip" : ",missing=skip", &orc);
        CHECK_EQ(r.rc, FERRY_END);
        CHECK_EQ(r.n, 2);
        CHECK(!strcmp(key(&r, 1), "c"));
        CHECK_EQ(cls(&r, 1), 2);
        table_free(&r);
        /* fields= picks extensions: the others are not read */
        r = read_tar(stream ? "m5.tar" : "m4.tar", &t,
                     stream ? ",stream=1,fields=txt" : ",fields=txt", &orc);
        CHECK_EQ(r.rc, FERRY_END);
        CHECK_EQ(r.n, 3);
        CHECK_EQ(r.nf, 2);
        table_free(&r);
    }
    free(t.p);
    test_remove_dir();
}

/* max_member= bounds map-style datasets too (the slot of a field is its largest
 * member): at open, naming the file, the sample and the member. */
TEST(max_member_bounds_map_style)
{
    test_make_dir("wds-max-member");
    tarbuf t = {calloc(1, 1 << 16), 0};
    static const char big[100] = {0};
    member(&t, "a.txt", "aa", 2);
    member(&t, "a.bin", "a", 1);
    member(&t, "b.txt", big, sizeof big);
    member(&t, "b.bin", big, sizeof big);
    finish(&t);
    int orc;
    table r = read_tar("big.tar", &t, ",max_member=50", &orc);
    CHECK_RC(orc, FERRY_EOVERFLOW);
    CHECK_CONTAINS(r.msg, "big.tar: sample b: its .");
    CHECK_CONTAINS(r.msg, "100 bytes, over the limit of 50 (max_member=)");
    table_free(&r);
    r = read_tar("big.tar", &t, ",max_member=100", &orc);
    CHECK_OK(orc);
    CHECK_EQ(r.rc, FERRY_END);
    CHECK_EQ(r.n, 2);
    table_free(&r);
    free(t.p);
    test_remove_dir();
}

TEST(bad_archives)
{
    test_make_dir("wds-bad");
    tarbuf t = {calloc(1, 1 << 20), 0};
    int orc;
    /* a bad header checksum in the second member */
    member(&t, "a.txt", "aa", 2);
    member(&t, "a.cls", "1", 1);
    finish(&t);
    t.p[1024 + 10] ^= 1;
    table r = read_tar("sum.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "sum.tar: header 1 at offset 1024: bad header checksum");
    r = read_tar("sum2.tar", &t, ",stream=1,fields=txt", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT); /* the stream's schema scan meets it too */
    CHECK_CONTAINS(r.msg, "bad header checksum");
    /* a size past the end of the file */
    t.n = 0;
    member(&t, "a.txt", "aa", 2);
    header(&t, "a.cls", '0', 100000, 0);
    t.n += 512;
    r = read_tar("past.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "past.tar: header 1 at offset 1024 (a.cls): a size of 100000 bytes "
                          "runs past the end of the file");
    /* a long name that never ends: an 'L' member far over the limit */
    t.n = 0;
    header(&t, "././@LongLink", 'L', 1 << 19, 1);
    memset(t.p + t.n, 'n', 1 << 19);
    t.n += 1 << 19;
    member(&t, "x.txt", "x", 1);
    finish(&t);
    r = read_tar("long.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "long.tar: header 0 at offset 0: a GNU long name of 524288 bytes");
    /* ... and a long name at the end of the archive, with no member after it */
    t.n = 0;
    member(&t, "x.txt", "x", 1);
    header(&t, "././@LongLink", 'L', 5, 1);
    memcpy(t.p + t.n, "y.txt", 5);
    t.n += 512;
    finish(&t);
    r = read_tar("long2.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "a long name with no member after it");
    /* a symbolic link */
    t.n = 0;
    member(&t, "x.txt", "x", 1);
    header(&t, "y.txt", '2', 0, 0);
    finish(&t);
    r = read_tar("link.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ENOTSUP);
    CHECK_CONTAINS(r.msg, "link.tar: header 1 at offset 1024 (y.txt): type '2'");
    /* a name without an extension; a sample with an extension twice */
    t.n = 0;
    member(&t, "README", "x", 1);
    finish(&t);
    r = read_tar("noext.tar", &t, "", &orc);
    CHECK_CONTAINS(r.msg, "noext.tar: member README at offset 0: not a WebDataset name");
    t.n = 0;
    member(&t, "a.txt", "x", 1);
    member(&t, "a.txt", "y", 1);
    finish(&t);
    r = read_tar("twice.tar", &t, "", &orc);
    CHECK_CONTAINS(r.msg, "twice.tar: member a.txt at offset 1024: sample a has a .txt already");
    /* a stream's bound: a member larger than the inferred ones */
    t.n = 0;
    member(&t, "a.txt", "x", 1);
    member(&t, "b.txt", "xyz", 3);
    finish(&t);
    r = read_tar("bound.tar", &t, ",stream=1,infer=1", &orc);
    CHECK_EQ(r.n, 1);
    CHECK_EQ(r.rc, FERRY_EOVERFLOW);
    CHECK_CONTAINS(r.msg,
                   "bound.tar: member b.txt at offset 1024: 3 bytes, over the bound of .txt");
    table_free(&r);
    free(t.p);
    /* a gzipped tar cut short */
    test_need_shared(WDS "/sample.tgz");
    size_t n;
    unsigned char *b = test_read_file(WDS "/sample.tgz", &n);
    char path[512];
    test_write_file(test_path("cut.tgz", path), b, n * 2 / 3);
    char spec[600];
    snprintf(spec, sizeof spec, "wds:%s,infer=5,max=4096", path);
    r = read_source(spec, 0, 1, 0);
    CHECK(r.n < 90);
    CHECK_EQ(r.rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "cut.tgz: the gzip stream ends early");
    CHECK_CONTAINS(r.msg, "the rest of the tar is not read");
    table_free(&r);
    free(b);
    test_remove_dir();
}

TEST(pipeline_jpegs)
{
    test_need_shared(JPEGS "/jd_jpg-progressive.jpg");
    test_make_dir("wds-jpeg");
    static const char *files[] = {"jd_jpg-progressive.jpg", "jd_jpg-size-17x17.jpg",
                                  "jd_jpg-gray.jpg"};
    tarbuf t = {calloc(1, 1 << 20), 0};
    for (int i = 0; i < 3; i++) {
        char p[512], name[64], c[4];
        snprintf(p, sizeof p, "%s/%s", JPEGS, files[i]);
        size_t n;
        unsigned char *b = test_read_file(p, &n);
        snprintf(name, sizeof name, "img%d.jpg", i);
        member(&t, name, b, n);
        snprintf(name, sizeof name, "img%d.cls", i);
        snprintf(c, sizeof c, "%d", i + 5);
        member(&t, name, c, strlen(c));
        free(b);
    }
    finish(&t);
    int orc;
    table r = read_tar("jpegs.tar", &t, ",pipeline=train,size=16", &orc);
    CHECK_OK(orc);
    CHECK_EQ(r.rc, FERRY_END);
    CHECK_EQ(r.n, 3);
    int k = col(&r, "image");
    CHECK_EQ(r.f[k].dtype, FERRY_F32);
    CHECK_EQ(r.f[k].ndim, 3);
    CHECK_EQ(r.f[k].shape[0], 3);
    CHECK_EQ(r.f[k].shape[1], 16);
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ(cls(&r, i), (int64_t)i + 5);
    table_free(&r);
    /* eval is deterministic: the gzipped tar, read as a stream through the same
     * pipeline, gives the same tensors as the map-style form */
    char gzpath[512], spec[700];
    test_path("jpegs.tar.gz", gzpath);
    gzFile g = gzopen(gzpath, "wb");
    CHECK(g && gzwrite(g, t.p, (unsigned)t.n) == (int)t.n);
    CHECK(gzclose(g) == Z_OK);
    r = read_tar("jpegs2.tar", &t, ",pipeline=eval,size=16", &orc);
    snprintf(spec, sizeof spec, "wds:%s,pipeline=eval,size=16", gzpath);
    table s = read_source(spec, 0, 1, 0);
    CHECK_EQ(r.n, 3);
    CHECK_EQ(s.n, 3);
    k = col(&r, "image");
    CHECK_EQ(col(&s, "image"), k);
    for (size_t i = 0; i < 3; i++)
        CHECK(!memcmp(r.rows[i].data[k], s.rows[i].data[k], ferry_field_nbytes(&r.f[k])));
    table_free(&r);
    table_free(&s);
    /* train draws are keyed by (seed, epoch, shard, position): two reads agree */
    snprintf(spec, sizeof spec, "wds:%s,pipeline=train,size=16", gzpath);
    table a = read_source(spec, 0, 1, 4), b = read_source(spec, 0, 1, 4);
    for (size_t i = 0; i < 3; i++)
        CHECK(!memcmp(a.rows[i].data[k], b.rows[i].data[k], ferry_field_nbytes(&a.f[k])));
    table_free(&a);
    table_free(&b);
    free(t.p);
    /* a stream with no image field: refused, naming what it looked for */
    test_need_shared(WDS "/mpdata.tar");
    ferry_dataset *ds;
    ferry_stream *st;
    CHECK_RC(ferry_source_open("wds:" WDS "/mpdata.tar,stream=1,pipeline=train", &ds, &st),
             FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "no field \"image\", \"data\", \"jpg\"");
    CHECK(!ds && !st);
    test_remove_dir();
}

TEST(stream_shards)
{
    test_make_dir("wds-shards");
    tarbuf t = {calloc(1, 1 << 16), 0};
    /* six shards of 1..6 samples, every other one gzipped */
    for (int s = 0; s < 6; s++) {
        t.n = 0;
        for (int i = 0; i <= s; i++) {
            char name[32], c[8];
            snprintf(name, sizeof name, "s%d_%d.txt", s, i);
            member(&t, name, name, strlen(name));
            snprintf(name, sizeof name, "s%d_%d.cls", s, i);
            snprintf(c, sizeof c, "%d", 10 * s + i);
            member(&t, name, c, strlen(c));
        }
        finish(&t);
        char file[32], path[512];
        snprintf(file, sizeof file, s % 2 ? "shard-%d.tar.gz" : "shard-%d.tar", s);
        test_path(file, path);
        if (s % 2) {
            gzFile g = gzopen(path, "wb");
            CHECK(g && gzwrite(g, t.p, (unsigned)t.n) == (int)t.n);
            CHECK(gzclose(g) == Z_OK);
        } else {
            test_write_file(path, t.p, t.n);
        }
    }
    char spec[600];
    snprintf(spec, sizeof spec, "wds:%s,seed=9,max=64", test_dir);
    int seen[60] = {0};
    size_t total = 0;
    for (uint64_t s = 0; s < 4; s++) {
        table r = read_source(spec, s, 4, 2);
        CHECK_EQ(r.rc, FERRY_END);
        for (size_t i = 0; i < r.n; i++) {
            int64_t c = cls(&r, i);
            CHECK(c >= 0 && c < 60);
            seen[c]++;
            char want[32];
            snprintf(want, sizeof want, "s%d_%d", (int)(c / 10), (int)(c % 10));
            CHECK(!strcmp(key(&r, i), want));
        }
        total += r.n;
        table_free(&r);
    }
    CHECK_EQ(total, 21);
    for (int s = 0; s < 6; s++)
        for (int i = 0; i <= s; i++)
            CHECK_EQ(seen[10 * s + i], 1);
    /* a new shard order each epoch */
    table a = read_source(spec, 0, 1, 0), b = read_source(spec, 0, 1, 1);
    CHECK_EQ(a.n, 21);
    CHECK_EQ(b.n, 21);
    int differ = 0;
    for (size_t i = 0; i < 21; i++)
        differ |= cls(&a, i) != cls(&b, i);
    CHECK(differ);
    table_free(&a);
    table_free(&b);
    free(t.p);
    test_remove_dir();
}

TEST(loader_workers)
{
    test_need_shared(WDS "/sample.tgz");
    /* a gzipped shard as a stream: every label once, whatever the workers */
    int64_t sum0, sum2;
    CHECK_U64(loader_sum("wds:" WDS "/sample.tgz", 0, 8, "cls", &sum0), 90);
    CHECK_U64(loader_sum("wds:" WDS "/sample.tgz", 2, 8, "cls", &sum2), 90);
    static const int hist[10] = {7, 12, 7, 11, 12, 6, 10, 14, 2, 9};
    int64_t want = 0;
    for (int c = 0; c < 10; c++)
        want += c * hist[c];
    CHECK_EQ(sum0, want);
    CHECK_EQ(sum2, want);
}

#ifdef FERRY_CLI
/* ferry pack converts a shard to record shards: the same samples come back. */
TEST(cli_pack_head)
{
    test_need_shared(WDS "/sample.tgz");
    test_make_dir("wds-pack");
    char cmd[2048], out[512];
    test_path("shards", out);
    snprintf(cmd, sizeof cmd, "%s pack wds:%s/sample.tgz %s --no-progress >/dev/null 2>&1",
             FERRY_CLI, WDS, out);
    CHECK(system(cmd) == 0);
    char spec[600];
    snprintf(spec, sizeof spec, "records:%s", out);
    table a = read_source("wds:" WDS "/sample.tgz", 0, 1, 0), b = read_source(spec, 0, 1, 0);
    CHECK_EQ(a.n, 90);
    CHECK_EQ(b.n, 90);
    CHECK_EQ(a.nf, b.nf);
    for (size_t i = 0; i < a.n; i++)
        for (int k = 0; k < a.nf; k++) {
            CHECK(!strcmp(a.f[k].name, b.f[k].name));
            size_t n = a.f[k].variable ? (size_t)a.rows[i].len[k] : ferry_field_nbytes(&a.f[k]);
            CHECK_EQ(a.rows[i].len[k] * a.f[k].variable, b.rows[i].len[k] * b.f[k].variable);
            CHECK(!memcmp(a.rows[i].data[k], b.rows[i].data[k], n));
        }
    table_free(&a);
    table_free(&b);
    /* ferry head over a TFRecord file */
    snprintf(cmd, sizeof cmd, "%s head tfrecord:%s/../tfrecord/ydf_sentences_gzip.tfrecord.gz -n 2",
             FERRY_CLI, WDS);
    FILE *p = popen(cmd, "r");
    CHECK(p);
    char text[4096] = "";
    size_t got = fread(text, 1, sizeof text - 1, p);
    text[got] = 0;
    CHECK(pclose(p) == 0);
    CHECK_CONTAINS(text, "Hello world");
    CHECK_CONTAINS(text, "Bonjour le monde");
    test_remove_dir();
}
#endif

TEST(extensions_that_are_not_utf8)
{
    test_make_dir("wds-names");
    tarbuf t = {calloc(1, 1 << 16), 0};
    int orc;
    member(&t, "a.txt", "aa", 2);
    member(&t, "a.t\xe9xt", "bb", 2);
    finish(&t);
    table r = read_tar("latin.tar", &t, "", &orc);
    CHECK_EQ(orc, FERRY_ECORRUPT);
    CHECK_CONTAINS(r.msg, "latin.tar: member \"a.t\\xe9xt\" at offset 1024: the extension is not "
                          "UTF-8");
    /* UTF-8 names are fields as they are */
    t.n = 0;
    member(&t, "a.t\xc3\xa9xt", "bb", 2);
    finish(&t);
    r = read_tar("utf8.tar", &t, "", &orc);
    CHECK_EQ(orc, 0);
    table_free(&r);
    free(t.p);
    test_remove_dir();
}
