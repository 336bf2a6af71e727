/*
 * Record shards: CRC-32C (both implementations), writing and reading round trips
 * with and without zstd, rollover by size and by count, the manifest, zero-copy
 * access, concurrent reads, recovery of cut files, damaged records, headers,
 * footers and indexes, hand-made files that follow docs/record-format.md, abort
 * and failed commits, and allocation failures.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/records.h>
#include "core/internal.h"
#include "datasets/dataset_internal.h"
#include "formats/records_internal.h"
#include "io/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)size + 1);
    CHECK(p != NULL);
    CHECK(fread(p, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return p;
}

/* Names of the entries of d (not . and ..), sorted, joined by spaces. */
/* A shard's name with its generation (8 hex digits between dashes) as "G", so that
 * listings compare: data-1f2e3d4c-00000-of-00001.ferry -> data-G-00000-of-00001.ferry. */
static char *untag(char *name)
{
    for (char *s = name; (s = strchr(s, '-'));) {
        size_t h = strspn(s + 1, "0123456789abcdef");
        if (h == 8 && s[9] == '-' && s[10] >= '0' && s[10] <= '9') {
            s[1] = 'G';
            memmove(s + 2, s + 9, strlen(s + 9) + 1);
            break;
        }
        s++;
    }
    return name;
}

/* The file name of shard k of set NAME in test_dir, as its manifest names it. */
static const char *shard_file(const char *name, size_t k)
{
    static char out[4][300];
    static int next;
    char mp[512];
    snprintf(mp, sizeof mp, "%s/%s.manifest", test_dir, name);
    ferry__manifest_entry *e;
    size_t n;
    uint64_t id;
    CHECK_OK(ferry__manifest_read(mp, &e, &n, &id));
    CHECK(k < n);
    char *o = out[next++ % 4];
    snprintf(o, 300, "%s", e[k].file);
    ferry__free(e);
    return o;
}

static void list_dir(const char *d, char *out, size_t cap)
{
    char names[64][256];
    int n = 0;
    DIR *dp = opendir(d);
    CHECK(dp != NULL);
    struct dirent *e;
    while ((e = readdir(dp)) && n < 64)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(names[n++], 256, "%s", e->d_name);
    closedir(dp);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char t[256];
                memcpy(t, names[i], 256);
                memcpy(names[i], names[j], 256);
                memcpy(names[j], t, 256);
            }
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", untag(names[i]));
}

/* Regular files in d. */
static int count_files(const char *d)
{
    int n = 0;
    DIR *dp = opendir(d);
    if (!dp)
        return 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        char p[600];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            n++;
    }
    closedir(dp);
    return n;
}

/* ---- CRC-32C ---- */

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void check_vectors(crc_fn crc)
{
    uint8_t b[48];
    CHECK_U64(crc(0, "123456789", 9), 0xE3069283u);
    CHECK_U64(crc(0, NULL, 0), 0);
    CHECK_U64(crc(0x12345678u, NULL, 0), 0x12345678u);
    memset(b, 0, 32);
    CHECK_U64(crc(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, 32);
    CHECK_U64(crc(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    CHECK_U64(crc(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    CHECK_U64(crc(0, b, 32), 0x113FDB5Cu);
    /* RFC 3720 B.4: an iSCSI Read (10) command PDU */
    static const uint8_t pdu[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    CHECK_U64(crc(0, pdu, 48), 0xD9963A56u);
    /* chained calls cover one buffer */
    CHECK_U64(crc(crc(0, "1234", 4), "56789", 5), 0xE3069283u);
}

TEST(crc32c_known_vectors)
{
    check_vectors(ferry_crc32c);
    check_vectors(ferry__crc32c_sw);
    if (!ferry__crc32c_hw_available())
        SKIP("no SSE4.2 CRC instruction: the table version alone was checked");
    check_vectors(ferry__crc32c_hw);
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

TEST(crc32c_hardware_matches_table)
{
    if (!ferry__crc32c_hw_available())
        SKIP("no SSE4.2 CRC instruction");
    size_t cap = 3 * 8192 * 4 + 64;
    uint8_t *buf = malloc(cap);
    fill_random(buf, cap, 7);
    for (size_t len = 0; len <= 300; len++)
        for (size_t start = 0; start < 8; start++) {
            uint32_t a = ferry__crc32c_sw(0, buf + start, len);
            uint32_t b = ferry__crc32c_hw(0, buf + start, len);
            if (a != b)
                test_fail(__FILE__, __LINE__, "len %zu start %zu: table %08x, hardware %08x", len,
                          start, a, b);
            CHECK_U64(ferry__crc32c_hw(0xdeadbeefu, buf + start, len),
                      ferry__crc32c_sw(0xdeadbeefu, buf + start, len));
        }
    /* around the three-way blocks' edges */
    static const size_t big[] = {767,   768,   769,   775,   776,   1000,  3071,  3072,  3073,
                                 3839,  3840,  3841,  4000,  4096,  24575, 24576, 24577, 24583,
                                 24584, 25344, 27647, 27648, 49152, 65536, 98303, 98304};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        for (size_t start = 0; start < 8; start += 3) {
            CHECK(big[k] + start <= cap);
            CHECK_U64(ferry__crc32c_hw(0, buf + start, big[k]),
                      ferry__crc32c_sw(0, buf + start, big[k]));
        }
    /* chaining at every kind of split */
    uint32_t whole = ferry__crc32c_sw(0, buf, 70001);
    for (size_t cut = 0; cut <= 70001; cut += 997) {
        CHECK_U64(ferry__crc32c_hw(ferry__crc32c_hw(0, buf, cut), buf + cut, 70001 - cut), whole);
        CHECK_U64(ferry__crc32c_sw(ferry__crc32c_sw(0, buf, cut), buf + cut, 70001 - cut), whole);
    }
    free(buf);
}

TEST(crc32c_clmul_matches_table)
{
    if (!ferry__crc32c_clmul_available())
        SKIP("no AVX-512 carry-less multiply (VPCLMULQDQ): the instruction's version serves");
    size_t cap = 70001 + 64;
    uint8_t *buf = malloc(cap);
    fill_random(buf, cap, 11);
    for (size_t len = 0; len <= 1100; len++)
        for (size_t start = 0; start < 64; start += len < 300 ? 1 : 13) {
            uint32_t a = ferry__crc32c_sw(0, buf + start, len);
            uint32_t b = ferry__crc32c_clmul(0, buf + start, len);
            if (a != b)
                test_fail(__FILE__, __LINE__, "len %zu start %zu: table %08x, clmul %08x", len,
                          start, a, b);
            CHECK_U64(ferry__crc32c_clmul(0xdeadbeefu, buf + start, len),
                      ferry__crc32c_sw(0xdeadbeefu, buf + start, len));
        }
    /* around the 256-, 64- and 16-byte steps */
    static const size_t big[] = {4095, 4096, 4097, 4111,  4112, 4159,
                                 4160, 4351, 4352, 65535, 65536};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        for (size_t start = 0; start < 8; start += 3)
            CHECK_U64(ferry__crc32c_clmul(0, buf + start, big[k]),
                      ferry__crc32c_sw(0, buf + start, big[k]));
    /* all ones and all zeros (the starting CRC folded into the first bytes) */
    memset(buf, 0xff, 4096);
    CHECK_U64(ferry__crc32c_clmul(0, buf, 4096), ferry__crc32c_sw(0, buf, 4096));
    memset(buf, 0, 4096);
    CHECK_U64(ferry__crc32c_clmul(0, buf, 4096), ferry__crc32c_sw(0, buf, 4096));
    fill_random(buf, cap, 12);
    uint32_t whole = ferry__crc32c_sw(0, buf, 70001);
    for (size_t cut = 0; cut <= 70001; cut += 997)
        CHECK_U64(ferry__crc32c_clmul(ferry__crc32c_clmul(0, buf, cut), buf + cut, 70001 - cut),
                  whole);
    free(buf);
}

static double gbps(crc_fn crc, const uint8_t *p, size_t n, uint32_t *out)
{
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t0 = ferry_now_ns();
        *out = crc(0, p, n);
        double s = (double)(ferry_now_ns() - t0) / 1e9;
        if (s < best)
            best = s;
    }
    return (double)n / best / 1e9;
}

TEST(crc32c_throughput_64mib)
{
    size_t n = (size_t)64 << 20;
    uint8_t *p = malloc(n);
    fill_random(p, n, 3);
    uint32_t a, b;
    double sw = gbps(ferry__crc32c_sw, p, n, &a);
    printf("crc32c table:    %.2f GB/s\n", sw);
    if (ferry__crc32c_hw_available()) {
        double hw = gbps(ferry__crc32c_hw, p, n, &b);
        printf("crc32c hardware: %.2f GB/s\n", hw);
        CHECK_U64(a, b);
    }
    if (ferry__crc32c_clmul_available()) {
        double cl = gbps(ferry__crc32c_clmul, p, n, &b);
        printf("crc32c clmul:    %.2f GB/s\n", cl);
        CHECK_U64(a, b);
    }
    CHECK_U64(ferry_crc32c(0, p, n), a);
    free(p);
}

/* ---- A schema with fixed, variable and scalar fields of several dtypes ---- */

#define NF 8
static ferry_field fields[NF];

static void field(int i, const char *name, ferry_dtype dt, int ndim, int64_t d0, int64_t d1,
                  int64_t d2, int variable)
{
    memset(&fields[i], 0, sizeof fields[i]);
    snprintf(fields[i].name, sizeof fields[i].name, "%s", name);
    fields[i].dtype = dt;
    fields[i].ndim = ndim;
    fields[i].shape[0] = d0;
    fields[i].shape[1] = d1;
    fields[i].shape[2] = d2;
    fields[i].variable = variable;
}

static void schema(void)
{
    field(0, "image", FERRY_U8, 3, 4, 5, 3, 0);
    field(1, "label", FERRY_I64, 0, 0, 0, 0, 0);
    field(2, "weight", FERRY_F32, 1, 3, 0, 0, 0);
    field(3, "tokens", FERRY_I32, 1, 50, 0, 0, 1);
    field(4, "text", FERRY_U8, 1, 100, 0, 0, 1);
    field(5, "flag", FERRY_BOOL, 0, 0, 0, 0, 0);
    field(6, "mat", FERRY_F64, 2, 10, 2, 0, 1);
    field(7, "half", FERRY_U16, 1, 2, 0, 0, 0);
}

static int64_t rows_of(int f, uint64_t i)
{
    switch (f) {
    case 3:
        return (int64_t)(i % 51);
    case 4:
        return (int64_t)((i * 7) % 101);
    case 6:
        return (int64_t)(i % 11);
    default:
        return 0;
    }
}

static size_t row_bytes(int f)
{
    return ferry_field_row_elems(&fields[f]) * ferry_dtype_size(fields[f].dtype);
}

/* Bytes of field f of sample i (variable fields: its rows). */
static size_t used_bytes(int f, uint64_t i)
{
    return fields[f].variable ? (size_t)rows_of(f, i) * row_bytes(f)
                              : ferry_field_nbytes(&fields[f]);
}

static uint8_t pat(uint64_t i, int f, size_t j)
{
    if (fields[f].dtype == FERRY_BOOL)
        return (uint8_t)(i & 1);
    return (uint8_t)((i * 131 + (uint64_t)f * 17 + j / 3) ^ (j % 7));
}

typedef struct sample_buf {
    void *ptr[NF];
    int64_t len[NF];
    ferry_sample s;
} sample_buf;

static void sb_init(sample_buf *b)
{
    for (int f = 0; f < NF; f++) {
        b->ptr[f] = malloc(ferry_field_nbytes(&fields[f]) + 1);
        b->len[f] = -1;
    }
    b->s.nfields = NF;
    b->s.data = b->ptr;
    b->s.length = b->len;
}

static void sb_free(sample_buf *b)
{
    for (int f = 0; f < NF; f++)
        free(b->ptr[f]);
}

static void sb_fill(sample_buf *b, uint64_t i)
{
    for (int f = 0; f < NF; f++) {
        uint8_t *p = b->ptr[f];
        size_t n = used_bytes(f, i);
        for (size_t j = 0; j < n; j++)
            p[j] = pat(i, f, j);
        b->len[f] = fields[f].variable ? rows_of(f, i) : 0;
    }
}

/* 0 when b holds sample i as read back (fresh garbage elsewhere is fine). */
static int sb_check(const sample_buf *b, uint64_t i)
{
    for (int f = 0; f < NF; f++) {
        if (fields[f].variable && b->len[f] != rows_of(f, i))
            return 1;
        const uint8_t *p = b->ptr[f];
        size_t n = used_bytes(f, i);
        for (size_t j = 0; j < n; j++)
            if (p[j] != pat(i, f, j))
                return 1;
    }
    return 0;
}

/* The payload of sample i, encoded here from the spec rather than by the writer. */
static size_t payload_of(uint64_t i, uint8_t *out)
{
    size_t pos = 0;
    for (int f = 0; f < NF; f++) {
        if (fields[f].variable) {
            uint32_t rows = (uint32_t)rows_of(f, i);
            memcpy(out + pos, &rows, 4);
            pos += 4;
        }
        size_t n = used_bytes(f, i);
        for (size_t j = 0; j < n; j++)
            out[pos++] = pat(i, f, j);
    }
    return pos;
}

static void write_set(const char *name, uint64_t first, uint64_t count, int level,
                      uint64_t shard_bytes, uint64_t shard_records)
{
    ferry_writer_opts o = {test_dir, name, fields, NF, shard_bytes, shard_records, level};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &o));
    sample_buf b;
    sb_init(&b);
    for (uint64_t i = first; i < first + count; i++) {
        sb_fill(&b, i);
        CHECK_OK(ferry_writer_append(w, &b.s));
    }
    CHECK_U64(ferry_writer_records(w), count);
    sb_free(&b);
    CHECK_OK(ferry_writer_commit(w));
}

/* Reads every record of the file and checks it is sample first + k. */
static void check_file(const char *path, uint64_t first, uint64_t count, int compressed)
{
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, path, 0));
    CHECK_U64(ferry_record_file_count(f), count);
    CHECK_EQ(ferry_record_file_recovered(f), 0);
    CHECK_EQ(ferry_record_file_nfields(f), NF);
    for (int k = 0; k < NF; k++) {
        const ferry_field *g = ferry_record_file_field(f, k);
        CHECK(g != NULL);
        CHECK(!strcmp(g->name, fields[k].name));
        CHECK_EQ(g->dtype, fields[k].dtype);
        CHECK_EQ(g->ndim, fields[k].ndim);
        CHECK_EQ(g->variable, fields[k].variable);
        for (int d = 0; d < g->ndim; d++)
            CHECK_EQ(g->shape[d], fields[k].shape[d]);
    }
    CHECK(ferry_record_file_field(f, NF) == NULL);
    CHECK(ferry_record_file_field(f, -1) == NULL);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    sample_buf b;
    sb_init(&b);
    uint8_t *want = malloc(8192), *got = malloc(8192);
    for (uint64_t k = 0; k < count; k++) {
        CHECK_OK(ferry_record_file_read(f, k, &b.s, ctx));
        if (sb_check(&b, first + k))
            test_fail(__FILE__, __LINE__, "%s: record %llu differs", path, (unsigned long long)k);
        const void *p;
        size_t n;
        uint64_t off;
        CHECK_OK(ferry_record_file_raw(f, k, &p, &n, &off));
        CHECK(off % 8 == 0);
        size_t wn = payload_of(first + k, want);
        if (compressed) {
            size_t r = ZSTD_decompress(got, 8192, p, n);
            CHECK(!ZSTD_isError(r));
            CHECK_U64(r, wn);
            CHECK(!memcmp(got, want, wn));
        } else {
            CHECK_U64(n, wn);
            CHECK(!memcmp(p, want, wn));
        }
    }
    CHECK_RC(ferry_record_file_read(f, count, &b.s, ctx), FERRY_ERANGE);
    const void *p;
    size_t n;
    CHECK_RC(ferry_record_file_raw(f, count, &p, &n, NULL), FERRY_ERANGE);
    free(want);
    free(got);
    sb_free(&b);
    ferry_ctx_free(ctx);
    ferry_record_file_free(f);
}

/* Checks the manifest against the files: names, counts, sizes, CRCs; returns the
 * number of shards. */
static size_t check_manifest(const char *name, uint64_t total, ferry__manifest_entry **out)
{
    char p[512], mp[512];
    snprintf(mp, sizeof mp, "%s/%s.manifest", test_dir, name);
    ferry__manifest_entry *e;
    size_t n;
    uint64_t id;
    CHECK_OK(ferry__manifest_read(mp, &e, &n, &id));
    CHECK(id != 0);
    uint64_t sum = 0;
    for (size_t k = 0; k < n; k++) {
        char want[300];
        snprintf(want, sizeof want, "%s-%08llx-%05zu-of-%05zu.ferry", name,
                 (unsigned long long)(id >> 32), k, n);
        CHECK(!strcmp(e[k].file, want));
        uint32_t crc;
        uint64_t size;
        CHECK_OK(ferry__crc32c_file(test_path(e[k].file, p), &crc, &size));
        CHECK_U64(crc, e[k].crc);
        CHECK_U64(size, e[k].bytes);
        ferry_record_file *f;
        CHECK_OK(ferry_record_file_open(&f, p, 0));
        CHECK_U64(ferry_record_file_count(f), e[k].records);
        uint64_t fid;
        uint32_t index;
        CHECK(ferry__record_file_set(f, &fid, &index));
        CHECK_U64(fid, id);
        CHECK_U64(index, k);
        ferry_record_file_free(f);
        sum += e[k].records;
    }
    CHECK_U64(sum, total);
    /* the header line says the same */
    size_t len;
    char *text = (char *)read_all(mp, &len);
    text[len] = '\0';
    char head[100];
    snprintf(head, sizeof head, "ferry-records 2\nshards %zu records %llu set %016llx\n", n,
             (unsigned long long)total, (unsigned long long)id);
    CHECK(!strncmp(text, head, strlen(head)));
    free(text);
    if (out)
        *out = e;
    else
        ferry__free(e);
    return n;
}

static void round_trip(int level)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 500, level, 0, 0);
    char p[512], ls[4096];
    list_dir(test_dir, ls, sizeof ls);
    CHECK(!strcmp(ls, "data-G-00000-of-00001.ferry data.manifest"));
    check_file(test_path(shard_file("data", 0), p), 0, 500, level > 0);
    CHECK_EQ(check_manifest("data", 500, NULL), 1);
    test_remove_dir();
}

TEST(round_trip_uncompressed)
{
    round_trip(0);
}

TEST(round_trip_zstd)
{
    round_trip(3);
}

TEST(zstd_shrinks_compressible_records)
{
    test_make_dir("records");
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "page");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = 4096;
    static uint8_t page[4096];
    void *ptr[1] = {page};
    ferry_sample s = {1, ptr, NULL, {0}};
    uint64_t size[2];
    for (int level = 0; level <= 1; level++) {
        const char *name = level ? "packed" : "plain";
        ferry_writer_opts o = {test_dir, name, &f, 1, 0, 0, level ? 9 : 0};
        ferry_record_writer *w;
        CHECK_OK(ferry_writer_open(&w, &o));
        for (int i = 0; i < 100; i++) {
            for (int j = 0; j < 4096; j++)
                page[j] = (uint8_t)(j % 64 < 32 ? i : j / 64);
            CHECK_OK(ferry_writer_append(w, &s));
        }
        CHECK_OK(ferry_writer_commit(w));
        char p[512], file[300];
        snprintf(file, sizeof file, "%s", shard_file(name, 0));
        int64_t t;
        CHECK_OK(ferry__stat(test_path(file, p), &size[level], &t));
        ferry_record_file *rf;
        CHECK_OK(ferry_record_file_open(&rf, p, 0));
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        for (int i = 0; i < 100; i++) {
            memset(page, 0xee, sizeof page);
            CHECK_OK(ferry_record_file_read(rf, (uint64_t)i, &s, ctx));
            for (int j = 0; j < 4096; j++)
                CHECK_EQ(page[j], (uint8_t)(j % 64 < 32 ? i : j / 64));
        }
        ferry_ctx_free(ctx);
        ferry_record_file_free(rf);
    }
    CHECK(size[1] * 10 < size[0]);
    test_remove_dir();
}

static void rollover(uint64_t shard_bytes, uint64_t shard_records, int level, size_t want_shards)
{
    test_make_dir("records");
    schema();
    uint64_t total = 103;
    write_set("train", 0, total, level, shard_bytes, shard_records);
    ferry__manifest_entry *e;
    size_t n = check_manifest("train", total, &e);
    if (want_shards)
        CHECK_U64(n, want_shards);
    CHECK(n > 1);
    char p[512];
    uint64_t first = 0;
    for (size_t k = 0; k < n; k++) {
        if (shard_records)
            CHECK_U64(e[k].records, k + 1 < n ? shard_records : total - shard_records * k);
        if (shard_bytes)
            CHECK(e[k].bytes <= shard_bytes);
        CHECK(e[k].records > 0);
        check_file(test_path(e[k].file, p), first, e[k].records, level > 0);
        first += e[k].records;
    }
    CHECK_U64(first, total);
    /* nothing else was left behind: the shards and the manifest */
    CHECK_EQ(count_files(test_dir), (int)n + 1);
    ferry__free(e);
    test_remove_dir();
}

TEST(rollover_by_records)
{
    rollover(0, 10, 0, 11);
    rollover(0, 7, 1, 15);
}

TEST(rollover_by_bytes)
{
    rollover(4096, 0, 0, 0);
    rollover(2048, 0, 5, 0);
}

TEST(empty_set_and_one_record_shards)
{
    test_make_dir("records");
    schema();
    write_set("empty", 0, 0, 0, 0, 0);
    char p[512];
    check_file(test_path(shard_file("empty", 0), p), 0, 0, 0);
    CHECK_EQ(check_manifest("empty", 0, NULL), 1);
    /* a shard size smaller than any record: one record a shard */
    write_set("tiny", 5, 4, 2, 64, 0);
    CHECK_EQ(check_manifest("tiny", 4, NULL), 4);
    check_file(test_path(shard_file("tiny", 2), p), 7, 1, 1);
    test_remove_dir();
}

TEST(raw_access_is_zero_copy)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 50, 0, 0, 0);
    char p[512];
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, test_path(shard_file("data", 0), p), 0));
    const void *a, *b, *c;
    size_t na, nb, nc;
    uint64_t oa, ob, oc;
    CHECK_OK(ferry_record_file_raw(f, 3, &a, &na, &oa));
    CHECK_OK(ferry_record_file_raw(f, 3, &b, &nb, &ob));
    CHECK_OK(ferry_record_file_raw(f, 4, &c, &nc, &oc));
    CHECK(a == b); /* the same bytes every time: the mapping, not a copy */
    CHECK_U64(oa, ob);
    CHECK_U64((uint64_t)((const uint8_t *)c - (const uint8_t *)a), oc - oa);
    CHECK_U64(oc, oa + ((16 + na + 7) & ~(size_t)7)); /* records follow each other */
    /* and they are the file's bytes at that offset */
    size_t n;
    uint8_t *file = read_all(p, &n);
    CHECK(oa + 16 + na <= n);
    CHECK(!memcmp(file + oa + 16, a, na));
    free(file);
    const void *sp;
    size_t sn;
    CHECK_OK(ferry__record_file_span(f, 3, &sp, &sn));
    CHECK((const uint8_t *)sp + 16 == (const uint8_t *)a);
    CHECK_U64(sn, oc - oa);
    CHECK(!strcmp(ferry__record_file_name(f), p));
    ferry_record_file_free(f);
    test_remove_dir();
}

/* ---- Concurrent reads ---- */

typedef struct reader_arg {
    ferry_record_file *f;
    uint64_t n;
    int id;
    int errors;
} reader_arg;

static void *reader_main(void *arg)
{
    reader_arg *a = arg;
    ferry_ctx own, *ctx = NULL;
    /* half the threads share worker id 0 (ferry_ctx_create), the others have
     * their own ids, as loader workers do */
    if (a->id % 2 == 0) {
        if (ferry_ctx_create(&ctx, 0, 0) != 0) {
            a->errors++;
            return NULL;
        }
    } else {
        ferry__ctx_init(&own, (uint32_t)a->id, 0, 0);
        ctx = &own;
    }
    sample_buf b;
    sb_init(&b);
    for (int round = 0; round < 2; round++)
        for (uint64_t k = 0; k < a->n; k++) {
            uint64_t i = (k * 7919 + (uint64_t)a->id * 131) % a->n; /* 7919 is prime */
            if (ferry_record_file_read(a->f, i, &b.s, ctx) != 0 || sb_check(&b, i))
                a->errors++;
            const void *p;
            size_t n;
            if (ferry_record_file_raw(a->f, i, &p, &n, NULL) != 0)
                a->errors++;
        }
    sb_free(&b);
    if (a->id % 2 == 0)
        ferry_ctx_free(ctx);
    else
        ferry__ctx_release(&own);
    return NULL;
}

TEST(concurrent_reads_of_a_compressed_shard)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 1500, 3, 0, 0);
    char p[512];
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, test_path(shard_file("data", 0), p), 0));
    enum { T = 8 };
    pthread_t th[T];
    reader_arg args[T];
    for (int t = 0; t < T; t++) {
        args[t] = (reader_arg){f, 1500, t, 0};
        CHECK(pthread_create(&th[t], NULL, reader_main, &args[t]) == 0);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ(args[t].errors, 0);
    }
    ferry_record_file_free(f);
    test_remove_dir();
}

TEST(steady_state_reads_do_not_allocate)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 200, 3, 0, 0);
    char p[512];
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, test_path(shard_file("data", 0), p), 0));
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    sample_buf b;
    sb_init(&b);
    for (uint64_t i = 0; i < 200; i++) /* warm: the scratch grows to the largest record */
        CHECK_OK(ferry_record_file_read(f, i, &b.s, ctx));
    ferry__test_fail_alloc(-1);
    for (uint64_t i = 0; i < 200; i++) {
        CHECK_OK(ferry_record_file_read(f, i, &b.s, ctx));
        CHECK_EQ(sb_check(&b, i), 0);
    }
    CHECK_EQ(ferry__test_fail_alloc(-1), 0);
    sb_free(&b);
    ferry_ctx_free(ctx);
    ferry_record_file_free(f);
    test_remove_dir();
}

/* ---- Damage ---- */

typedef struct layout {
    uint64_t n, index_off;
    uint64_t off[256];
    uint32_t stored[256];
} layout;

static void layout_of(const char *path, layout *l)
{
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, path, 0));
    l->n = ferry_record_file_count(f);
    CHECK(l->n <= 256);
    for (uint64_t i = 0; i < l->n; i++) {
        const void *p;
        size_t n;
        CHECK_OK(ferry_record_file_raw(f, i, &p, &n, &l->off[i]));
        l->stored[i] = (uint32_t)n;
    }
    ferry_record_file_free(f);
    uint64_t size;
    int64_t t;
    CHECK_OK(ferry__stat(path, &size, &t));
    l->index_off = size - 32 - 8 * l->n;
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* Fixes the CRCs of a record header at off. */
static void fix_record_header(uint8_t *file, uint64_t off)
{
    put32(file + off + 12, ferry_crc32c(0, file + off, 12));
}

/* Recomputes the index and trailer CRCs of a file of n bytes. */
static void fix_footer(uint8_t *file, size_t n)
{
    uint8_t *t = file + n - 32;
    uint64_t count, ix;
    memcpy(&count, t, 8);
    memcpy(&ix, t + 8, 8);
    if (ix <= n && count <= n / 8 && ix + 8 * count <= n)
        put32(t + 16, ferry_crc32c(0, file + ix, 8 * count));
    put32(t + 20, ferry_crc32c(0, t, 20));
}

static void recovery(int level)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 40, level, 0, 0);
    char src[512], cut_path[512];
    test_path(shard_file("data", 0), src);
    test_path("cut.ferry", cut_path);
    layout l;
    layout_of(src, &l);
    size_t size;
    uint8_t *file = read_all(src, &size);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    sample_buf b;
    sb_init(&b);
    int tried = 0;
    for (size_t cut = (size_t)l.off[l.n - 6]; cut < size; cut += cut < l.index_off ? 3 : 1) {
        test_write_file(cut_path, file, cut);
        ferry_record_file *f;
        CHECK_RC(ferry_record_file_open(&f, cut_path, 0), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "no valid footer (the writer did not finish?)");
        CHECK_CONTAINS(ferry_last_errmsg(), "FERRY_RECORD_RECOVER");
        CHECK_OK(ferry_record_file_open(&f, cut_path, FERRY_RECORD_RECOVER));
        uint64_t whole = 0;
        while (whole < l.n && l.off[whole] + 16 + l.stored[whole] <= cut)
            whole++;
        if (ferry_record_file_count(f) != whole)
            test_fail(__FILE__, __LINE__, "cut at %zu: recovered %llu records, want %llu", cut,
                      (unsigned long long)ferry_record_file_count(f), (unsigned long long)whole);
        CHECK_EQ(ferry_record_file_recovered(f), 1);
        for (uint64_t i = 0; i < whole; i++) {
            CHECK_OK(ferry_record_file_read(f, i, &b.s, ctx));
            CHECK_EQ(sb_check(&b, i), 0);
        }
        CHECK_RC(ferry_record_file_read(f, whole, &b.s, ctx), FERRY_ERANGE);
        ferry_record_file_free(f);
        tried++;
    }
    CHECK(tried > 300);
    /* the whole file opens either way, from its footer */
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, src, FERRY_RECORD_RECOVER));
    CHECK_EQ(ferry_record_file_recovered(f), 0);
    CHECK_U64(ferry_record_file_count(f), 40);
    ferry_record_file_free(f);
    sb_free(&b);
    ferry_ctx_free(ctx);
    free(file);
    test_remove_dir();
}

TEST(recovery_of_cut_files)
{
    recovery(0);
}

TEST(recovery_of_cut_compressed_files)
{
    recovery(3);
}

/* Writes 20 records, returns the file's bytes and layout for damaging. */
static uint8_t *damage_setup(int level, layout *l, size_t *size, char *src)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 20, level, 0, 0);
    test_path(shard_file("data", 0), src);
    layout_of(src, l);
    return read_all(src, size);
}

/* Reads every record of path; checks that exactly `bad` fails, with rc and a
 * message that holds each of the needles. */
static void expect_only_bad(const char *path, int flags, uint64_t n, uint64_t bad, int rc,
                            const char *n1, const char *n2)
{
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, path, flags));
    CHECK_U64(ferry_record_file_count(f), n);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    sample_buf b;
    sb_init(&b);
    for (uint64_t i = 0; i < n; i++) {
        int r = ferry_record_file_read(f, i, &b.s, ctx);
        if (i != bad) {
            CHECK_OK(r);
            CHECK_EQ(sb_check(&b, i), 0);
            continue;
        }
        CHECK_RC(r, rc);
        CHECK_CONTAINS(ferry_last_errmsg(), path);
        if (n1)
            CHECK_CONTAINS(ferry_last_errmsg(), n1);
        if (n2)
            CHECK_CONTAINS(ferry_last_errmsg(), n2);
        const void *p;
        size_t sz;
        CHECK_RC(ferry_record_file_raw(f, i, &p, &sz, NULL), rc);
    }
    sb_free(&b);
    ferry_ctx_free(ctx);
    ferry_record_file_free(f);
}

TEST(flipped_payload_bits_fail_that_record_only)
{
    for (int level = 0; level <= 3; level += 3) {
        layout l;
        size_t size;
        char src[512], p[512], where[64];
        uint8_t *file = damage_setup(level, &l, &size, src);
        for (uint32_t bit = 0; bit < 8; bit += 3) {
            uint8_t *copy = malloc(size);
            memcpy(copy, file, size);
            copy[l.off[5] + 16 + l.stored[5] / 2] ^= (uint8_t)(1u << bit);
            test_write_file(test_path("flip.ferry", p), copy, size);
            snprintf(where, sizeof where, "record 5 at offset %llu: crc mismatch",
                     (unsigned long long)l.off[5]);
            expect_only_bad(p, 0, 20, 5, FERRY_ECORRUPT, where, NULL);
            free(copy);
        }
        free(file);
        test_remove_dir();
    }
}

TEST(damaged_record_header)
{
    layout l;
    size_t size;
    char src[512], p[512];
    uint8_t *file = damage_setup(0, &l, &size, src);
    file[l.off[3] + 1] ^= 0x10; /* the stored size */
    test_write_file(test_path("hdr.ferry", p), file, size);
    expect_only_bad(p, 0, 20, 3, FERRY_ECORRUPT, "record 3 at offset", "header crc mismatch");
    /* without the footer, recovery stops before it */
    test_write_file(p, file, (size_t)l.index_off);
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, p, FERRY_RECORD_RECOVER));
    CHECK_U64(ferry_record_file_count(f), 3);
    ferry_record_file_free(f);
    free(file);
    test_remove_dir();
}

TEST(length_larger_than_the_file)
{
    for (int level = 0; level <= 1; level++) {
        layout l;
        size_t size;
        char src[512], p[512];
        uint8_t *file = damage_setup(level, &l, &size, src);
        uint64_t last = l.off[19];
        put32(file + last, 0x7fff0000u); /* stored */
        if (!level)
            put32(file + last + 4, 0x7fff0000u); /* raw, equal when uncompressed */
        fix_record_header(file, last);
        test_write_file(test_path("long.ferry", p), file, size);
        expect_only_bad(p, 0, 20, 19, FERRY_ECORRUPT, "record 19", "runs past");
        /* over the 2 GiB limit */
        put32(file + last, 0x90000000u);
        fix_record_header(file, last);
        test_write_file(p, file, size);
        expect_only_bad(p, 0, 20, 19, FERRY_ECORRUPT, "record 19", "limit");
        /* a scan stops there */
        test_write_file(p, file, (size_t)l.index_off);
        ferry_record_file *f;
        CHECK_OK(ferry_record_file_open(&f, p, FERRY_RECORD_RECOVER));
        CHECK_U64(ferry_record_file_count(f), 19);
        ferry_record_file_free(f);
        free(file);
        test_remove_dir();
    }
}

/* path holds a file whose footer is bad: open fails with `why` in the message and
 * recovery finds every record. */
static void expect_bad_footer(const char *path, const char *why, uint64_t n)
{
    ferry_record_file *f;
    CHECK_RC(ferry_record_file_open(&f, path, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "no valid footer");
    CHECK_CONTAINS(ferry_last_errmsg(), why);
    CHECK_OK(ferry_record_file_open(&f, path, FERRY_RECORD_RECOVER));
    CHECK_EQ(ferry_record_file_recovered(f), 1);
    CHECK_U64(ferry_record_file_count(f), n);
    ferry_record_file_free(f);
}

TEST(footer_or_index_pointing_outside_the_file)
{
    layout l;
    size_t size;
    char src[512], p[512];
    uint8_t *orig = damage_setup(0, &l, &size, src);
    uint8_t *file = malloc(size);
    test_path("foot.ferry", p);
    struct {
        uint64_t count, ix;
        const char *why;
    } cases[] = {
        {20, size + 4096, "does not fit"},
        {20, (uint64_t)-8, "does not fit"},
        {21, l.index_off, "does not fit"},
        {(uint64_t)1 << 61, l.index_off, "does not fit"},
        {19, l.index_off + 8, "out of order or outside"}, /* the first offset is not record 0 */
        {0, l.index_off, "does not fit"},
        {20, 8, "does not fit"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(file, orig, size);
        put64(file + size - 32, cases[c].count);
        put64(file + size - 24, cases[c].ix);
        fix_footer(file, size);
        test_write_file(p, file, size);
        expect_bad_footer(p, cases[c].why, 20);
    }
    /* an index entry past the records */
    memcpy(file, orig, size);
    put64(file + l.index_off + 8 * 19, size + 100);
    fix_footer(file, size);
    test_write_file(p, file, size);
    expect_bad_footer(p, "out of order or outside", 20);
    /* damaged index, damaged trailer, no end magic */
    memcpy(file, orig, size);
    file[l.index_off + 3] ^= 1;
    test_write_file(p, file, size);
    expect_bad_footer(p, "index crc mismatch", 20);
    memcpy(file, orig, size);
    file[size - 30] ^= 1;
    test_write_file(p, file, size);
    expect_bad_footer(p, "trailer crc mismatch", 20);
    memcpy(file, orig, size);
    file[size - 1] = 'X';
    test_write_file(p, file, size);
    expect_bad_footer(p, "no end magic", 20);
    free(file);
    free(orig);
    test_remove_dir();
}

TEST(index_that_disagrees_with_the_records)
{
    layout l;
    size_t size;
    char src[512], p[512];
    uint8_t *file = damage_setup(0, &l, &size, src);
    test_path("ix.ferry", p);
    uint8_t *ix = file + l.index_off;
    /* swapped: out of order, refused at open */
    put64(ix + 16, l.off[3]);
    put64(ix + 24, l.off[2]);
    fix_footer(file, size);
    test_write_file(p, file, size);
    expect_bad_footer(p, "out of order", 20);
    /* mid-record: record 4 fails (no record header there), and record 3 ends
     * before where the index says 4 starts */
    put64(ix + 16, l.off[2]);
    put64(ix + 24, l.off[3]);
    CHECK(l.off[4] + 8 + 16 <= l.off[5]);
    put64(ix + 32, l.off[4] + 8);
    fix_footer(file, size);
    test_write_file(p, file, size);
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, p, 0));
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    sample_buf b;
    sb_init(&b);
    for (uint64_t i = 0; i < 20; i++) {
        int rc = ferry_record_file_read(f, i, &b.s, ctx);
        if (i == 3) {
            CHECK_RC(rc, FERRY_ECORRUPT);
            CHECK_CONTAINS(ferry_last_errmsg(), "the index disagrees with the records");
        } else if (i == 4) {
            CHECK_RC(rc, FERRY_ECORRUPT);
            CHECK_CONTAINS(ferry_last_errmsg(), "header crc mismatch");
        } else {
            CHECK_OK(rc);
            CHECK_EQ(sb_check(&b, i), 0);
        }
    }
    sb_free(&b);
    ferry_ctx_free(ctx);
    ferry_record_file_free(f);
    free(file);
    test_remove_dir();
}

/* ---- Files made by hand, from the spec ---- */

typedef struct out {
    uint8_t *p;
    size_t n, cap;
} out;

static void put(out *o, const void *p, size_t n)
{
    if (!n)
        return;
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 64;
        o->p = realloc(o->p, o->cap);
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

static void pad8(out *o)
{
    static const uint8_t z[8];
    put(o, z, (8 - o->n % 8) % 8);
}

/* Header and schema for fs; extra bytes are appended to the schema. */
static void make_header(out *o, const ferry_field *fs, int n, uint32_t flags, const void *extra,
                        size_t nextra)
{
    out s = {0};
    uint16_t nf = (uint16_t)n;
    put(&s, &nf, 2);
    for (int i = 0; i < n; i++) {
        uint8_t len = (uint8_t)strlen(fs[i].name);
        put(&s, &len, 1);
        put(&s, fs[i].name, len);
        uint8_t t[3] = {(uint8_t)fs[i].dtype, (uint8_t)fs[i].ndim, (uint8_t)fs[i].variable};
        put(&s, t, 3);
        for (int d = 0; d < fs[i].ndim; d++)
            put(&s, &fs[i].shape[d], 8);
    }
    put(&s, extra, nextra);
    uint8_t h[24];
    memcpy(h, "FERRYREC", 8);
    put32(h + 8, 1);
    put32(h + 12, flags);
    put32(h + 16, (uint32_t)s.n);
    put32(h + 20, ferry_crc32c(ferry_crc32c(0, h, 20), s.p, s.n));
    put(o, h, 24);
    put(o, s.p, s.n);
    pad8(o);
    free(s.p);
}

static uint64_t make_record(out *o, const void *payload, uint32_t stored, uint32_t raw)
{
    uint64_t off = o->n;
    uint8_t h[16];
    put32(h, stored);
    put32(h + 4, raw);
    put32(h + 8, ferry_crc32c(0, payload, stored));
    put32(h + 12, ferry_crc32c(0, h, 12));
    put(o, h, 16);
    put(o, payload, stored);
    pad8(o);
    return off;
}

static void make_footer(out *o, const uint64_t *offs, uint64_t n)
{
    uint64_t ix = o->n;
    put(o, offs, 8 * n);
    uint8_t t[32];
    put64(t, n);
    put64(t + 8, ix);
    put32(t + 16, ferry_crc32c(0, offs, 8 * n));
    put32(t + 20, ferry_crc32c(0, t, 20));
    memcpy(t + 24, "FERRYEND", 8);
    put(o, t, 32);
}

TEST(hand_made_files_follow_the_spec)
{
    test_make_dir("records");
    ferry_field fs[2];
    memset(fs, 0, sizeof fs);
    strcpy(fs[0].name, "id");
    fs[0].dtype = FERRY_U32;
    strcpy(fs[1].name, "words");
    fs[1].dtype = FERRY_U16;
    fs[1].ndim = 2;
    fs[1].shape[0] = 4;
    fs[1].shape[1] = 2;
    fs[1].variable = 1;
    for (int z = 0; z < 2; z++) {
        out o = {0};
        make_header(&o, fs, 2, z ? 1 : 0, NULL, 0);
        uint64_t offs[8];
        /* payloads: good (2 rows), too many rows, cut short, trailing bytes, no rows */
        uint8_t pl[5][64];
        uint32_t len[5];
        uint32_t id = 7, rows = 2;
        memcpy(pl[0], &id, 4);
        memcpy(pl[0] + 4, &rows, 4);
        for (int j = 0; j < 8; j++)
            pl[0][8 + j] = (uint8_t)(j + 1);
        len[0] = 16;
        memcpy(pl[1], pl[0], 16);
        rows = 5;
        memcpy(pl[1] + 4, &rows, 4);
        len[1] = 16;
        memcpy(pl[2], pl[0], 16);
        len[2] = 12;
        memcpy(pl[3], pl[0], 16);
        pl[3][16] = 0;
        len[3] = 17;
        memcpy(pl[4], pl[0], 4);
        rows = 0;
        memcpy(pl[4] + 4, &rows, 4);
        len[4] = 8;
        for (int k = 0; k < 5; k++) {
            if (!z) {
                offs[k] = make_record(&o, pl[k], len[k], len[k]);
                continue;
            }
            uint8_t c[256];
            size_t cn = ZSTD_compress(c, sizeof c, pl[k], len[k], 1);
            CHECK(!ZSTD_isError(cn));
            offs[k] = make_record(&o, c, (uint32_t)cn, len[k]);
        }
        if (z) { /* a raw size that disagrees with the frame */
            uint8_t c[256];
            size_t cn = ZSTD_compress(c, sizeof c, pl[0], 16, 1);
            offs[5] = make_record(&o, c, (uint32_t)cn, 15);
        }
        make_footer(&o, offs, z ? 6 : 5);
        char p[512];
        test_write_file(test_path("hand.ferry", p), o.p, o.n);
        ferry_record_file *f;
        CHECK_OK(ferry_record_file_open(&f, p, 0));
        CHECK_U64(ferry_record_file_count(f), z ? 6 : 5);
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        uint32_t got_id = 0;
        uint16_t words[8];
        void *ptr[2] = {&got_id, words};
        int64_t lens[2] = {-1, -1};
        ferry_sample s = {2, ptr, lens, {0}};
        CHECK_OK(ferry_record_file_read(f, 0, &s, ctx));
        CHECK_EQ(got_id, 7);
        CHECK_EQ(lens[1], 2);
        CHECK(!memcmp(words, pl[0] + 8, 8));
        CHECK_RC(ferry_record_file_read(f, 1, &s, ctx), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "5 rows is more than its bound 4");
        CHECK_RC(ferry_record_file_read(f, 2, &s, ctx), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "field \"words\" needs 8 bytes");
        CHECK_RC(ferry_record_file_read(f, 3, &s, ctx), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), "1 bytes left over");
        CHECK_OK(ferry_record_file_read(f, 4, &s, ctx));
        CHECK_EQ(lens[1], 0);
        if (z) {
            CHECK_RC(ferry_record_file_read(f, 5, &s, ctx), FERRY_ECORRUPT);
            CHECK_CONTAINS(ferry_last_errmsg(), "record 5 at offset");
        }
        /* a sample with the wrong field count, and a compressed shard without a ctx */
        s.nfields = 1;
        CHECK_RC(ferry_record_file_read(f, 0, &s, ctx), FERRY_EINVAL);
        s.nfields = 2;
        if (z)
            CHECK_RC(ferry_record_file_read(f, 0, &s, NULL), FERRY_EINVAL);
        ferry_ctx_free(ctx);
        ferry_record_file_free(f);
        free(o.p);
    }
    test_remove_dir();
}

/* Opening a file of these bytes fails with FERRY_ECORRUPT and `why`. */
static void expect_open_fails(const void *bytes, size_t n, int flags, const char *why)
{
    char p[512];
    test_write_file(test_path("bad.ferry", p), bytes, n);
    ferry_record_file *f = (ferry_record_file *)1;
    CHECK_RC(ferry_record_file_open(&f, p, flags), FERRY_ECORRUPT);
    CHECK(f == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), p);
    CHECK_CONTAINS(ferry_last_errmsg(), why);
}

TEST(bad_magic_version_flags_and_schema)
{
    layout l;
    size_t size;
    char src[512];
    uint8_t *orig = damage_setup(0, &l, &size, src);
    uint8_t *file = malloc(size);
    for (int flags = 0; flags <= FERRY_RECORD_RECOVER; flags++) {
        expect_open_fails("", 0, flags, "too short");
        expect_open_fails(orig, 20, flags, "too short");
        memcpy(file, orig, size);
        file[3] = 'X';
        expect_open_fails(file, size, flags, "bad magic");
        memcpy(file, orig, size);
        put32(file + 8, 2);
        put32(file + 20, ferry_crc32c(0, file, 20)); /* wrong, but not checked first */
        expect_open_fails(file, size, flags, "version 2");
        memcpy(file, orig, size);
        put32(file + 12, 6);
        expect_open_fails(file, size, flags, "unknown flags 0x6");
        memcpy(file, orig, size);
        file[30] ^= 0x20; /* inside the schema */
        expect_open_fails(file, size, flags, "header crc mismatch");
        memcpy(file, orig, size);
        put32(file + 16, 70000);
        expect_open_fails(file, size, flags, "over the");
        memcpy(file, orig, 24);
        put32(file + 16, 4000);
        expect_open_fails(file, 24 + 100, flags, "runs past the end of the file");
    }
    /* schemas that are well-formed bytes but not valid */
    ferry_field fs[2];
    memset(fs, 0, sizeof fs);
    strcpy(fs[0].name, "a");
    fs[0].dtype = FERRY_U8;
    strcpy(fs[1].name, "b");
    fs[1].dtype = FERRY_F32;
    struct {
        int field;
        ferry_dtype dt;
        int ndim, variable;
        int64_t d0;
        const char *extra, *why;
    } cases[] = {
        {0, (ferry_dtype)99, 0, 0, 0, NULL, "dtype"},
        {0, FERRY_U8, 0, 1, 0, NULL, "variable field needs ndim"},
        {0, FERRY_U8, 0, 2, 0, NULL, "variable flag 2"},
        {0, FERRY_U8, 1, 0, -5, NULL, "dim 0"},
        {0, FERRY_U8, 1, 0, (int64_t)1 << 40, NULL, "larger than"},
        {0, FERRY_U8, 0, 0, 0, "x", "left over"},
        {1, FERRY_F32, 8, 0, 0, NULL, "ndim 8"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ferry_field g[2];
        memcpy(g, fs, sizeof g);
        g[cases[c].field].dtype = cases[c].dt;
        g[cases[c].field].ndim = cases[c].ndim;
        g[cases[c].field].variable = cases[c].variable;
        g[cases[c].field].shape[0] = cases[c].d0;
        out o = {0};
        make_header(&o, g, 2, 0, cases[c].extra, cases[c].extra ? strlen(cases[c].extra) : 0);
        make_footer(&o, NULL, 0);
        expect_open_fails(o.p, o.n, 0, cases[c].why);
        free(o.p);
    }
    {
        ferry_field g[2];
        memcpy(g, fs, sizeof g);
        strcpy(g[1].name, "a");
        out o = {0};
        make_header(&o, g, 2, 0, NULL, 0);
        make_footer(&o, NULL, 0);
        expect_open_fails(o.p, o.n, 0, "appears twice");
        free(o.p);
        o = (out){0};
        make_header(&o, g, 0, 0, NULL, 0);
        expect_open_fails(o.p, o.n, FERRY_RECORD_RECOVER, "0 fields");
        free(o.p);
    }
    /* a header and schema alone: no footer; recovery finds nothing */
    {
        out o = {0};
        make_header(&o, fs, 2, 0, NULL, 0);
        expect_open_fails(o.p, o.n, 0, "no valid footer");
        char p[512];
        ferry_record_file *f;
        CHECK_OK(ferry_record_file_open(&f, test_path("bad.ferry", p), FERRY_RECORD_RECOVER));
        CHECK_U64(ferry_record_file_count(f), 0);
        ferry_record_file_free(f);
        free(o.p);
    }
    char p[512];
    ferry_record_file *f;
    CHECK_RC(ferry_record_file_open(&f, test_path("missing.ferry", p), 0), FERRY_ENOENT);
    CHECK_RC(ferry_record_file_open(&f, src, 8), FERRY_EINVAL);
    CHECK_RC(ferry_record_file_open(&f, NULL, 0), FERRY_EINVAL);
    free(file);
    free(orig);
    test_remove_dir();
}

/* ---- Writer errors, abort and failed commits ---- */

TEST(writer_rejects_bad_options_and_samples)
{
    test_make_dir("records");
    schema();
    ferry_record_writer *w;
    char sub[512];
    ferry_writer_opts o = {test_dir, NULL, fields, NF, 0, 0, 0};
    o.zstd_level = 20;
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "zstd_level 20");
    o.zstd_level = -1;
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    o.zstd_level = 0;
    o.name = "a/b";
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    o.name = "a b";
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    o.name = "";
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    o.name = NULL;
    o.nfields = 0;
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    o.nfields = NF;
    o.dir = NULL;
    CHECK_RC(ferry_writer_open(&w, &o), FERRY_EINVAL);
    CHECK_RC(ferry_writer_open(&w, NULL), FERRY_EINVAL);
    /* a directory under a file cannot be made */
    char p[512];
    test_write_file(test_path("plain", p), "x", 1);
    snprintf(sub, sizeof sub, "%s/plain/sub", test_dir);
    o.dir = sub;
    CHECK(ferry_writer_open(&w, &o) < 0);
    /* nested directories are made */
    snprintf(sub, sizeof sub, "%s/a/b/c", test_dir);
    o.dir = sub;
    CHECK_OK(ferry_writer_open(&w, &o));
    sample_buf b;
    sb_init(&b);
    sb_fill(&b, 1);
    b.len[4] = 101; /* "text" is bounded by 100 */
    CHECK_RC(ferry_writer_append(w, &b.s), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "\"text\"");
    b.len[4] = -1;
    CHECK_RC(ferry_writer_append(w, &b.s), FERRY_EOVERFLOW);
    CHECK_CONTAINS(ferry_last_errmsg(), "\"text\"");
    b.len[4] = rows_of(4, 1);
    b.s.nfields = 3;
    CHECK_RC(ferry_writer_append(w, &b.s), FERRY_EINVAL);
    b.s.nfields = NF;
    b.s.length = NULL;
    CHECK_RC(ferry_writer_append(w, &b.s), FERRY_EINVAL);
    b.s.length = b.len;
    CHECK_U64(ferry_writer_records(w), 0);
    /* the writer is still good */
    sb_fill(&b, 0);
    CHECK_OK(ferry_writer_append(w, &b.s));
    CHECK_U64(ferry_writer_records(w), 1);
    sb_free(&b);
    CHECK_OK(ferry_writer_commit(w));
    char ls[1024];
    list_dir(sub, ls, sizeof ls);
    CHECK(!strcmp(ls, "data-G-00000-of-00001.ferry data.manifest"));
    {
        char mp[600];
        ferry__manifest_entry *e;
        size_t n;
        uint64_t id;
        snprintf(mp, sizeof mp, "%s/data.manifest", sub);
        CHECK_OK(ferry__manifest_read(mp, &e, &n, &id));
        snprintf(p, sizeof p, "%s/%s", sub, e[0].file);
        ferry__free(e);
    }
    check_file(p, 0, 1, 0);
    ferry_writer_abort(NULL);
    CHECK_RC(ferry_writer_commit(NULL), FERRY_EINVAL);
    test_remove_dir();
}

TEST(abort_leaves_no_files)
{
    test_make_dir("records");
    schema();
    for (int level = 0; level <= 1; level++) {
        ferry_writer_opts o = {test_dir, "gone", fields, NF, 0, 3, level};
        ferry_record_writer *w;
        CHECK_OK(ferry_writer_open(&w, &o));
        CHECK_EQ(count_files(test_dir), 1); /* the first shard's temporary */
        sample_buf b;
        sb_init(&b);
        for (uint64_t i = 0; i < 10; i++) {
            sb_fill(&b, i);
            CHECK_OK(ferry_writer_append(w, &b.s));
        }
        sb_free(&b);
        CHECK_EQ(count_files(test_dir), 4);
        char ls[1024];
        list_dir(test_dir, ls, sizeof ls);
        CHECK_CONTAINS(ls, "gone-G-00003.ferry.tmp.");
        ferry_writer_abort(w);
        CHECK_EQ(count_files(test_dir), 0);
    }
    test_remove_dir();
}

/* After a failed commit nothing in test_dir passes for a whole shard or set: no
 * manifest, no temporaries, no file a reader opens. */
static void expect_nothing_whole(const char *except)
{
    DIR *dp = opendir(test_dir);
    CHECK(dp != NULL);
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.' || (except && !strcmp(e->d_name, except)))
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", test_dir, e->d_name);
        struct stat st;
        CHECK(stat(p, &st) == 0);
        if (S_ISDIR(st.st_mode))
            continue;
        test_fail(__FILE__, __LINE__, "left behind: %s", e->d_name);
    }
    closedir(dp);
}

static int commit_some(const char *name, uint64_t n, uint64_t per_shard)
{
    ferry_writer_opts o = {test_dir, name, fields, NF, 0, per_shard, 1};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &o));
    sample_buf b;
    sb_init(&b);
    for (uint64_t i = 0; i < n; i++) {
        sb_fill(&b, i);
        CHECK_OK(ferry_writer_append(w, &b.s));
    }
    sb_free(&b);
    return ferry_writer_commit(w);
}

TEST(failed_commit_leaves_no_whole_shard)
{
    test_make_dir("records");
    schema();
    char p[512];
    /* the file layer's fault points of a commit of 3 shards: 3 creates, writes and
     * closes while appending; then fsync, close and rename of each shard, a directory
     * sync (open and fsync), the manifest's create, write, fsync, close, rename and
     * directory sync, and one more directory sync after the old generation's removal */
    ferry__fault_arm(FERRY__FAULT_FAIL, 0);
    CHECK_OK(commit_some("count", 5, 2));
    long points = ferry__fault_arm(FERRY__FAULT_OFF, 0);
    CHECK_EQ(points, 9 + 9 + 2 + 7 + 2);
    test_remove_dir();
    test_make_dir("records");
    /* the second shard's rename fails after the first shard is in place */
    ferry__fault_arm(FERRY__FAULT_FAIL, 9 + 6);
    CHECK_RC(commit_some("data", 5, 2), FERRY_EIO);
    ferry__fault_arm(FERRY__FAULT_OFF, 0);
    CHECK_CONTAINS(ferry_last_errmsg(), "-00001-of-00003.ferry: rename into place");
    expect_nothing_whole(NULL);
    /* the manifest's name is taken: every shard is in place by then */
    CHECK(mkdir(test_path("data.manifest", p), 0755) == 0);
    CHECK_RC(commit_some("data", 5, 2), FERRY_EIO);
    expect_nothing_whole(NULL);
    CHECK(rmdir(p) == 0);
    /* a read-only directory (moot for root, who may write anyway) */
    if (geteuid() != 0) {
        ferry_writer_opts o = {test_dir, "ro", fields, NF, 0, 2, 0};
        ferry_record_writer *w;
        CHECK_OK(ferry_writer_open(&w, &o));
        sample_buf b;
        sb_init(&b);
        for (uint64_t i = 0; i < 5; i++) {
            sb_fill(&b, i);
            CHECK_OK(ferry_writer_append(w, &b.s));
        }
        sb_free(&b);
        CHECK(chmod(test_dir, 0555) == 0);
        CHECK(ferry_writer_commit(w) < 0);
        CHECK(chmod(test_dir, 0755) == 0);
        /* the temporaries could not be removed from a read-only test_dir either; none
         * of them has a name a reader takes for a shard */
        DIR *dp = opendir(test_dir);
        struct dirent *e;
        while ((e = readdir(dp))) {
            size_t n = strlen(e->d_name);
            CHECK(!(n > 6 && !strcmp(e->d_name + n - 6, ".ferry")));
            CHECK(!strstr(e->d_name, ".manifest") || strstr(e->d_name, ".tmp."));
        }
        closedir(dp);
    }
    /* and then a commit that works */
    test_remove_dir();
    test_make_dir("records");
    CHECK_OK(commit_some("data", 5, 2));
    CHECK_EQ(check_manifest("data", 5, NULL), 3);
    test_remove_dir();
}

TEST(commit_after_a_failed_write_is_refused)
{
    test_make_dir("records");
    schema();
    ferry_writer_opts o = {test_dir, NULL, fields, NF, 0, 0, 0};
    ferry_record_writer *w;
    CHECK_OK(ferry_writer_open(&w, &o));
    sample_buf b;
    sb_init(&b);
    sb_fill(&b, 0);
    CHECK_OK(ferry_writer_append(w, &b.s));
    /* break the temporary's descriptor under the writer: the next write fails */
    int fd = -1;
    for (int i = 3; i < 1024; i++) {
        char link[64], target[600];
        snprintf(link, sizeof link, "/proc/self/fd/%d", i);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            if (strstr(target, test_dir) && strstr(target, ".tmp.")) {
                fd = i;
                break;
            }
        }
    }
    if (fd < 0) {
        ferry_writer_abort(w);
        sb_free(&b);
        test_remove_dir();
        SKIP("no /proc/self/fd to find the temporary's descriptor");
    }
    int saved = dup(fd);
    int ro = open("/dev/null", O_RDONLY);
    CHECK(dup2(ro, fd) == fd);
    close(ro);
    /* appends are buffered: one of the next MiB worth of them writes and fails */
    int rc = 0;
    for (long k = 0; k < (1L << 20) + 1 && rc == 0; k++)
        rc = ferry_writer_append(w, &b.s);
    CHECK_RC(rc, FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), ".tmp."); /* names the file */
    CHECK_RC(ferry_writer_append(w, &b.s), FERRY_ESTATE);
    CHECK(dup2(saved, fd) == fd);
    close(saved);
    CHECK_RC(ferry_writer_commit(w), FERRY_ESTATE);
    expect_nothing_whole(NULL);
    sb_free(&b);
    test_remove_dir();
}

/* ---- Allocation failures ---- */

TEST(out_of_memory_in_writer_open)
{
    test_make_dir("records");
    schema();
    int done = 0;
    for (long n = 0; n < 200 && !done; n++) {
        for (int level = 0; level <= 1; level++) {
            ferry_writer_opts o = {test_dir, "oom", fields, NF, 0, 0, level};
            ferry_record_writer *w;
            ferry__test_fail_alloc(n);
            int rc = ferry_writer_open(&w, &o);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                ferry_writer_abort(w);
                done = level;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
                CHECK(w == NULL);
            }
            CHECK_EQ(count_files(test_dir), 0);
        }
    }
    CHECK(done);
    test_remove_dir();
}

TEST(out_of_memory_in_append)
{
    test_make_dir("records");
    schema();
    sample_buf b;
    sb_init(&b);
    int failures = 1;
    for (long n = 0; failures; n++) {
        CHECK(n < 1000);
        ferry_writer_opts o = {test_dir, "oom", fields, NF, 0, 2, 1};
        ferry_record_writer *w;
        CHECK_OK(ferry_writer_open(&w, &o));
        failures = 0;
        ferry__test_fail_alloc(n);
        for (uint64_t i = 0; i < 5; i++) {
            sb_fill(&b, i);
            int rc = ferry_writer_append(w, &b.s);
            if (rc != 0) {
                CHECK_RC(rc, FERRY_ENOMEM);
                failures++;
                ferry__test_fail_alloc(-1);
                CHECK_OK(ferry_writer_append(w, &b.s)); /* the writer is still good */
            }
        }
        ferry__test_fail_alloc(-1);
        CHECK_U64(ferry_writer_records(w), 5);
        CHECK_OK(ferry_writer_commit(w));
        char p[512];
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "%s/%s", test_dir, shard_file("oom", (size_t)k));
            check_file(p, 2 * (uint64_t)k, k < 2 ? 2 : 1, 1);
        }
        CHECK_EQ(check_manifest("oom", 5, NULL), 3);
        CHECK_EQ(count_files(test_dir), 4);
    }
    sb_free(&b);
    test_remove_dir();
}

TEST(out_of_memory_in_commit)
{
    test_make_dir("records");
    schema();
    for (long n = 0;; n++) {
        CHECK(n < 1000);
        ferry_writer_opts o = {test_dir, "oom", fields, NF, 0, 2, 0};
        ferry_record_writer *w;
        CHECK_OK(ferry_writer_open(&w, &o));
        sample_buf b;
        sb_init(&b);
        for (uint64_t i = 0; i < 5; i++) {
            sb_fill(&b, i);
            CHECK_OK(ferry_writer_append(w, &b.s));
        }
        sb_free(&b);
        ferry__test_fail_alloc(n);
        int rc = ferry_writer_commit(w);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK_EQ(check_manifest("oom", 5, NULL), 3);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        expect_nothing_whole(NULL);
    }
    test_remove_dir();
}

TEST(out_of_memory_in_reader)
{
    test_make_dir("records");
    schema();
    write_set("data", 0, 30, 3, 0, 0);
    char p[512], cut[512];
    test_path(shard_file("data", 0), p);
    size_t size;
    uint8_t *file = read_all(p, &size);
    test_write_file(test_path("cut.ferry", cut), file,
                    size - 300); /* footer and part of record 29 */
    free(file);
    for (int which = 0; which < 2; which++) {
        int done = 0;
        for (long n = 0; n < 200 && !done; n++) {
            ferry_record_file *f;
            ferry__test_fail_alloc(n);
            int rc = which ? ferry_record_file_open(&f, cut, FERRY_RECORD_RECOVER)
                           : ferry_record_file_open(&f, p, 0);
            ferry__test_fail_alloc(-1);
            if (rc == 0) {
                CHECK_U64(ferry_record_file_count(f), which ? 29 : 30);
                ferry_record_file_free(f);
                done = 1;
            } else {
                CHECK_RC(rc, FERRY_ENOMEM);
            }
        }
        CHECK(done);
    }
    /* reads: the zstd context and the scratch */
    ferry_record_file *f;
    CHECK_OK(ferry_record_file_open(&f, p, 0));
    sample_buf b;
    sb_init(&b);
    int done = 0;
    for (long n = 0; n < 200 && !done; n++) {
        ferry_ctx *ctx;
        CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
        ferry__test_fail_alloc(n);
        int rc = ferry_record_file_read(f, 17, &b.s, ctx);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            CHECK_EQ(sb_check(&b, 17), 0);
            done = 1;
        } else {
            CHECK_RC(rc, FERRY_ENOMEM);
        }
        ferry_ctx_free(ctx);
    }
    CHECK(done);
    sb_free(&b);
    ferry_record_file_free(f);
    test_remove_dir();
}

/* ---- The manifest parser ---- */

static void manifest_case(const char *text, int rc, const char *why)
{
    char p[512];
    test_write_file(test_path("m.manifest", p), text, strlen(text));
    ferry__manifest_entry *e = (ferry__manifest_entry *)1;
    size_t n = 99;
    uint64_t id;
    int got = ferry__manifest_read(p, &e, &n, &id);
    if (got != rc)
        test_fail(__FILE__, __LINE__, "manifest \"%s\": rc %d, want %d: %s", text, got, rc,
                  ferry_last_errmsg());
    if (rc != 0) {
        CHECK(e == NULL);
        CHECK_U64(n, 0);
        CHECK_CONTAINS(ferry_last_errmsg(), p);
        CHECK_CONTAINS(ferry_last_errmsg(), why);
    }
    ferry__free(e);
}

TEST(manifest_parser)
{
    test_make_dir("records");
    char p[512];
    const char *ok = "ferry-records 1\nshards 2 records 30\n"
                     "a-00000-of-00002.ferry 10 4096 DEADBEEF\n"
                     "a-00001-of-00002.ferry 20 123 0\n";
    test_write_file(test_path("ok.manifest", p), ok, strlen(ok));
    ferry__manifest_entry *e;
    size_t n;
    uint64_t id;
    CHECK_OK(ferry__manifest_read(p, &e, &n, &id));
    CHECK_U64(id, 0); /* version 1: no set id */
    CHECK_U64(n, 2);
    CHECK(!strcmp(e[0].file, "a-00000-of-00002.ferry"));
    CHECK_U64(e[0].records, 10);
    CHECK_U64(e[0].bytes, 4096);
    CHECK_U64(e[0].crc, 0xdeadbeefu);
    CHECK_U64(e[1].records, 20);
    CHECK_U64(e[1].crc, 0);
    ferry__free(e);
    manifest_case("ferry-records 1\nshards 0 records 0\n", 0, NULL);
    manifest_case("ferry-records 1\nshards 1 records 1\nx 1 2 3", 0, NULL); /* no final \n */
    manifest_case("", FERRY_ECORRUPT, "line 1:");
    manifest_case("ferry-records 1\n", FERRY_ECORRUPT, "line 2:");
    manifest_case("hello\n", FERRY_ECORRUPT, "line 1: not a ferry manifest");
    manifest_case("ferry-records 3\n", FERRY_ECORRUPT, "line 1: manifest version \"3\"");
    /* version 2: the set id */
    const char *v2 = "ferry-records 2\nshards 1 records 10 set 0123456789abcdef\n"
                     "a-01234567-00000-of-00001.ferry 10 4096 1\n";
    test_write_file(test_path("v2.manifest", p), v2, strlen(v2));
    CHECK_OK(ferry__manifest_read(p, &e, &n, &id));
    CHECK_U64(id, 0x0123456789abcdefull);
    CHECK_U64(n, 1);
    ferry__free(e);
    manifest_case("ferry-records 2\nshards 0 records 0\n", FERRY_ECORRUPT, "line 2: expected");
    manifest_case("ferry-records 2\nshards 0 records 0 set 0000000000000000\n", FERRY_ECORRUPT,
                  "line 2: the set id");
    manifest_case("ferry-records 2\nshards 0 records 0 set 123\n", FERRY_ECORRUPT,
                  "line 2: the set id");
    manifest_case("ferry-records 2\nshards 0 records 0 sat 0123456789abcdef\n", FERRY_ECORRUPT,
                  "line 2: the set id");
    manifest_case("ferry-records 1\nshards 0 records 0 set 0123456789abcdef\n", FERRY_ECORRUPT,
                  "line 2: expected");
    manifest_case("ferry-records 1\nshards x records 0\n", FERRY_ECORRUPT, "line 2:");
    manifest_case("ferry-records 1\nshards 1 records 0 extra\n", FERRY_ECORRUPT, "line 2:");
    manifest_case("ferry-records 1\nshards -1 records 0\n", FERRY_ECORRUPT, "line 2:");
    manifest_case("ferry-records 1\nshards 99999999999 records 0\n", FERRY_ECORRUPT,
                  "line 2: 99999999999 shards cannot fit");
    manifest_case("ferry-records 1\nshards 2 records 3\na.ferry 3 10 abc\n", FERRY_ECORRUPT,
                  "line 4: line 2 says 2 shards; the manifest lists 1");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry 1 10 xyz\n", FERRY_ECORRUPT,
                  "line 3: crc \"xyz\"");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry 1 10 123456789\n", FERRY_ECORRUPT,
                  "line 3: crc");
    manifest_case("ferry-records 1\nshards 1 records 1\n../a.ferry 1 10 ab\n", FERRY_ECORRUPT,
                  "line 3: \"../a.ferry\" is not a file name");
    manifest_case("ferry-records 1\nshards 1 records 1\n.. 1 10 ab\n", FERRY_ECORRUPT, "line 3");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry  1 10 ab\n", FERRY_ECORRUPT,
                  "line 3: expected");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry 1 10\n", FERRY_ECORRUPT,
                  "line 3: expected");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry 1x 10 ab\n", FERRY_ECORRUPT,
                  "line 3: record count");
    manifest_case("ferry-records 1\nshards 1 records 1\na.ferry 1 10 ab\r\n", FERRY_ECORRUPT,
                  "line 3: crc");
    manifest_case("ferry-records 1\nshards 2 records 2\na 1 1 1\na 1 1 1\n", FERRY_ECORRUPT,
                  "line 4: a is listed twice");
    manifest_case("ferry-records 1\nshards 2 records 5\na 1 1 1\nb 1 1 1\n", FERRY_ECORRUPT,
                  "line 2: says 5 records");
    manifest_case("ferry-records 1\nshards 1 records 1\na 1 1 1\nb 1 1 1\n", FERRY_ECORRUPT,
                  "line 4: more shards");
    manifest_case("ferry-records 1\nshards 1 records 1\n\na 1 1 1\n", FERRY_ECORRUPT,
                  "line 3: expected");
    manifest_case("ferry-records 1\nshards 2 records 1\na 18446744073709551615 1 1\nb 1 1 1\n",
                  FERRY_ECORRUPT, "line 4: record counts overflow");
    manifest_case("ferry-records 1\nshards 1 records 1\na 18446744073709551616 1 1\n",
                  FERRY_ECORRUPT, "line 3");
    CHECK_RC(ferry__manifest_read(test_path("none.manifest", p), &e, &n, &id), FERRY_ENOENT);
    /* a NUL byte in a line */
    static const char nul[] = "ferry-records 1\nshards 1 records 1\na\0 1 1 1\n";
    test_write_file(p, nul, sizeof nul - 1);
    CHECK_RC(ferry__manifest_read(p, &e, &n, &id), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "line 3: holds a NUL byte");
    test_remove_dir();
}

TEST(crc32c_of_a_file)
{
    test_make_dir("records");
    char p[512];
    size_t n = (1 << 20) * 2 + 12345;
    uint8_t *buf = malloc(n);
    fill_random(buf, n, 11);
    test_write_file(test_path("f.bin", p), buf, n);
    uint32_t crc;
    uint64_t size;
    CHECK_OK(ferry__crc32c_file(p, &crc, &size));
    CHECK_U64(size, n);
    CHECK_U64(crc, ferry_crc32c(0, buf, n));
    test_write_file(p, buf, 0);
    CHECK_OK(ferry__crc32c_file(p, &crc, &size));
    CHECK_U64(size, 0);
    CHECK_U64(crc, 0);
    CHECK_RC(ferry__crc32c_file(test_path("none", p), &crc, &size), FERRY_ENOENT);
    free(buf);
    test_remove_dir();
}

/* ferry_pack: what `ferry pack` and the Python module run. */
static void count_progress(uint64_t records, void *arg)
{
    *(uint64_t *)arg = records;
}

TEST(pack_writes_a_source_and_says_what_it_wrote)
{
    test_make_dir("pack");
    char setdir[512];
    ferry_synthetic_opts so = {.count = 1000, .bytes = 16, .var_max = 40, .seed = 3};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    ferry_writer_opts w;
    memset(&w, 0, sizeof w);
    w.dir = test_path("set", setdir);
    w.shard_records = 300;
    uint64_t seen = 0;
    ferry_pack_opts po = {
        .writer = &w, .num_workers = 2, .progress = count_progress, .progress_arg = &seen};
    ferry_pack_result r;
    CHECK_OK(ferry_pack(ds, NULL, &po, &r));
    CHECK_U64(r.records, 1000);
    CHECK_U64(seen, 1000);
    CHECK_U64(r.skipped, 0);
    ferry_dataset *back;
    CHECK_OK(ferry_dataset_records(&back, w.dir, 0, 1));
    CHECK_U64(ferry_dataset_len(back), 1000);
    ferry_dataset_free(back);
    /* bad samples: named by the error, or skipped and counted */
    ferry_dataset_free(ds);
    so.fail_every = 100;
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    CHECK_RC(ferry_pack(ds, NULL, &po, &r), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "sample 99");
    po.on_error = FERRY_ON_ERROR_SKIP;
    po.skip_budget = 100;
    CHECK_OK(ferry_pack(ds, NULL, &po, &r));
    CHECK_U64(r.records, 990);
    CHECK_U64(r.skipped, 10);
    CHECK_RC(ferry_pack(NULL, NULL, &po, &r), FERRY_EINVAL);
    ferry_dataset_free(ds);
    test_remove_dir();
}
