/*
 * Fuzz target: saved positions of the file streams (TFRecord and WebDataset tars,
 * plain and gzip) given back to restore, and sample positions given to fetch. The
 * files are small ones written at start; the input picks the stream (byte 0) and
 * the shard (byte 1), and the rest is a state's own bytes, restored as they are
 * and sealed with a right header (so that the streams' checks are reached), or
 * (byte 1 & 4) a pos to fetch. A restored iterator is read to its end, and every
 * sample it gives is fetched again.
 */
#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/tfrecord.h>
#include <ferry/wds.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_READS 200
#define NSTREAMS 4

static char dir[256], paths[NSTREAMS][300];
static ferry_stream *streams[NSTREAMS];
static ferry_ctx *ctx;

static void cleanup(void)
{
    for (int i = 0; i < NSTREAMS; i++) {
        ferry_stream_free(streams[i]);
        unlink(paths[i]);
    }
    ferry_ctx_free(ctx);
    rmdir(dir);
}

static void put_file(const char *path, const uint8_t *b, size_t n, int gzip)
{
    if (gzip) {
        gzFile g = gzopen(path, "wb");
        if (!g || gzwrite(g, b, (unsigned)n) != (int)n || gzclose(g) != Z_OK)
            abort();
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0)
        abort();
}

static uint32_t mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* 8 records of 1 to 300 bytes. */
static size_t tfrecords(uint8_t *out)
{
    size_t at = 0;
    for (int i = 0; i < 8; i++) {
        uint64_t n = 1 + (uint64_t)(i * 97) % 300;
        uint8_t *r = out + at;
        memcpy(r, &n, 8);
        uint32_t c = mask(ferry_crc32c(0, r, 8));
        memcpy(r + 8, &c, 4);
        for (uint64_t j = 0; j < n; j++)
            r[12 + j] = (uint8_t)(i + j);
        c = mask(ferry_crc32c(0, r + 12, n));
        memcpy(r + 12 + n, &c, 4);
        at += 16 + n;
    }
    return at;
}

static void tar_header(uint8_t *h, const char *name, char type, size_t size)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 124, 12, "%011zo", size);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\00000", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* 6 samples (.cls and .txt; sample 3's .txt named by a pax header). */
static size_t tar(uint8_t *out)
{
    size_t at = 0;
    for (int i = 0; i < 6; i++) {
        char name[64], txt[200];
        size_t n = 1 + (size_t)(i * 61) % 200;
        snprintf(name, sizeof name, "k%d.cls", i);
        tar_header(out + at, name, '0', 1);
        memset(out + at + 512, 0, 512);
        out[at + 512] = (uint8_t)('0' + i);
        at += 1024;
        snprintf(name, sizeof name, "k%d.txt", i);
        if (i == 3) {
            const char *pax = "15 path=k3.txt\n"; /* a record's length counts itself */
            size_t pl = strlen(pax);
            tar_header(out + at, "PaxHeader", 'x', pl);
            memset(out + at + 512, 0, 512);
            memcpy(out + at + 512, pax, pl);
            at += 1024;
        }
        tar_header(out + at, name, '0', n);
        memset(out + at + 512, 0, 512);
        for (size_t j = 0; j < n; j++)
            txt[j] = (char)('a' + (i + j) % 26);
        memcpy(out + at + 512, txt, n);
        at += 1024;
    }
    memset(out + at, 0, 1024);
    return at + 1024;
}

static void setup(void)
{
    static uint8_t buf[1 << 16];
    if (dir[0])
        return;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ferry-fuzz-state-XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(dir))
        abort();
    static const char *names[NSTREAMS] = {"a.tfrecord", "b.tfrecord.gz", "c.tar", "d.tar.gz"};
    for (int i = 0; i < NSTREAMS; i++)
        snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]);
    size_t n = tfrecords(buf);
    put_file(paths[0], buf, n, 0);
    put_file(paths[1], buf, n, 1);
    n = tar(buf);
    put_file(paths[2], buf, n, 0);
    put_file(paths[3], buf, n, 1);
    ferry_tfrecord_opts to = {.raw = 1, .max = 512};
    ferry_wds_opts wo = {.max = 512};
    for (int i = 0; i < NSTREAMS; i++)
        if ((i < 2 ? ferry_stream_tfrecord(&streams[i], paths[i], &to, 0)
                   : ferry_stream_wds(&streams[i], paths[i], &wo, 0)) != 0)
            abort();
    if (ferry_ctx_create(&ctx, 0, 0) != 0)
        abort();
    atexit(cleanup);
}

typedef struct sample_buf {
    int nf;
    const ferry_field *f[FERRY_MAX_FIELDS];
    void *ptr[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
} sample_buf;

static void buf_open(sample_buf *b, ferry_stream *st)
{
    b->nf = ferry_stream_nfields(st);
    for (int k = 0; k < b->nf; k++) {
        b->f[k] = ferry_stream_field(st, k);
        if (!(b->ptr[k] = malloc(ferry_field_nbytes(b->f[k]) + 1)))
            abort();
    }
}

static void buf_close(sample_buf *b)
{
    for (int k = 0; k < b->nf; k++)
        free(b->ptr[k]);
}

static void check(const sample_buf *b)
{
    for (int k = 0; k < b->nf; k++)
        if (b->f[k]->variable && (b->len[k] < 0 || b->len[k] > b->f[k]->shape[0]))
            abort();
}

static void fetch(ferry_stream_iter *it, sample_buf *b, const ferry_pos *pos)
{
    ferry_sample s = {b->nf, b->ptr, b->len, {0}};
    for (int k = 0; k < b->nf; k++)
        b->len[k] = -1;
    if (ferry_stream_fetch(it, pos, &s, ctx) == 0)
        check(b);
}

/* Restores state into a fresh iterator of shard `shard` of nshards; on success
 * reads it to its end, fetching each sample again. */
static void restore(ferry_stream *st, uint64_t shard, uint64_t nshards, const uint8_t *state,
                    size_t n)
{
    sample_buf b;
    ferry_stream_iter *it;
    if (ferry_stream_open(st, shard, nshards, 0, &it) != 0)
        return;
    buf_open(&b, st);
    if (ferry_stream_restore(it, state, n, ctx) == 0) {
        ferry_sample s = {b.nf, b.ptr, b.len, {0}};
        for (int i = 0; i < MAX_READS; i++) {
            for (int k = 0; k < b.nf; k++)
                b.len[k] = -1;
            int rc = ferry_stream_next(it, &s, ctx);
            if (rc == FERRY_END)
                break;
            if (rc != 0)
                continue;
            check(&b);
            ferry_pos pos = s.pos;
            fetch(it, &b, &pos);
        }
    }
    buf_close(&b);
    ferry_stream_close(it);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 2)
        return 0;
    ferry_stream *st = streams[data[0] % NSTREAMS];
    uint64_t nshards = 1 + (data[1] & 1), shard = (data[1] >> 1) & 1 ? nshards - 1 : 0;
    const uint8_t *body = data + 2;
    size_t n = size - 2;
    if (data[1] & 4) {
        /* a pos to fetch */
        ferry_pos pos = {0};
        memcpy(&pos, body, n < sizeof pos ? n : sizeof pos);
        sample_buf b;
        ferry_stream_iter *it;
        if (ferry_stream_open(st, shard, nshards, 0, &it) != 0)
            return 0;
        buf_open(&b, st);
        fetch(it, &b, &pos);
        buf_close(&b);
        ferry_stream_close(it);
        return 0;
    }
    restore(st, shard, nshards, body, n); /* as it is: the header's checks */
    uint8_t *sealed = malloc(n + 16);
    if (!sealed)
        return 0;
    uint32_t head[4] = {0x50545346u /* "FSTP" */, 1, ferry_crc32c(0, body, n), (uint32_t)n};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            sealed[4 * i + j] = (uint8_t)(head[i] >> (8 * j));
    if (n)
        memcpy(sealed + 16, body, n);
    restore(st, shard, nshards, sealed, n + 16);
    free(sealed);
    return 0;
}
