/*
 * CSV part-file stream positions: save at every point of a shard and resume a
 * fresh iterator from there (plain, gzip and zstd parts, header lines, bad rows,
 * long lines, truncated compressed parts, several shards), the same under a
 * shuffle buffer (which reads its samples again with fetch), fetch of every row,
 * and states that do not fit the stream. Also the compressed reader's forward
 * seek underneath.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/csv.h>
#include <ferry/records.h>
#include <ferry/stream.h>
#include "core/internal.h"
#include "io/seqread.h"

#include <stdarg.h>
#include <zlib.h>
#include <zstd.h>

#define HEADER 2
#define MAX_EVENTS 4096
#define STATE_CAP 4096

/* ---- files ---- */

typedef struct {
    char *p;
    size_t n, cap;
} tbuf;

static void put(tbuf *t, const void *p, size_t n)
{
    if (t->n + n > t->cap) {
        t->cap = (t->n + n) * 2;
        t->p = realloc(t->p, t->cap);
        CHECK(t->p != NULL);
    }
    memcpy(t->p + t->n, p, n);
    t->n += n;
}

static void add(tbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(tbuf *t, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    CHECK(k >= 0 && (size_t)k < sizeof line);
    put(t, line, (size_t)k);
}

/* A line of n bytes of 'x' (then "\n" when nl). */
static void add_long(tbuf *t, size_t n, bool nl)
{
    char *x = malloc(n);
    CHECK(x != NULL);
    memset(x, 'x', n);
    put(t, x, n);
    free(x);
    if (nl)
        put(t, "\n", 1);
}

static void gzip_to(tbuf *out, const void *data, size_t n)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&zs, (uLong)n) + 64;
    char *z = malloc(cap);
    CHECK(z != NULL);
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = (Bytef *)z;
    zs.avail_out = (uInt)cap;
    CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    put(out, z, cap - zs.avail_out);
    deflateEnd(&zs);
    free(z);
}

static void zstd_to(tbuf *out, const void *data, size_t n)
{
    size_t cap = ZSTD_compressBound(n);
    char *z = malloc(cap);
    CHECK(z != NULL);
    size_t zn = ZSTD_compress(z, cap, data, n, 3);
    CHECK(!ZSTD_isError(zn));
    put(out, z, zn);
    free(z);
}

/* The same, flushed every 100 input bytes, so that a cut stream still decodes up
 * to the last flush before the cut. */
static void gzip_flushed(tbuf *out, const char *data, size_t n)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&zs, (uLong)n) + 64 * (n / 100 + 2);
    char *z = malloc(cap);
    CHECK(z != NULL);
    zs.next_out = (Bytef *)z;
    zs.avail_out = (uInt)cap;
    for (size_t at = 0; at < n; at += 100) {
        size_t k = n - at < 100 ? n - at : 100;
        zs.next_in = (Bytef *)data + at;
        zs.avail_in = (uInt)k;
        int z_rc = deflate(&zs, at + k < n ? Z_SYNC_FLUSH : Z_FINISH);
        CHECK(z_rc == Z_OK || z_rc == Z_STREAM_END);
        CHECK(zs.avail_in == 0);
    }
    put(out, z, cap - zs.avail_out);
    deflateEnd(&zs);
    free(z);
}

static void zstd_flushed(tbuf *out, const char *data, size_t n)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    CHECK(c != NULL);
    size_t cap = ZSTD_compressBound(n) + 64 * (n / 100 + 2);
    char *z = malloc(cap);
    CHECK(z != NULL);
    ZSTD_outBuffer o = {z, cap, 0};
    for (size_t at = 0; at < n; at += 100) {
        size_t k = n - at < 100 ? n - at : 100;
        ZSTD_inBuffer in = {data + at, k, 0};
        size_t left = ZSTD_compressStream2(c, &o, &in, at + k < n ? ZSTD_e_flush : ZSTD_e_end);
        CHECK(left == 0 && in.pos == k);
    }
    put(out, z, o.pos);
    ZSTD_freeCCtx(c);
    free(z);
}

/* Rows "i,i%7 + .5" from `first`, count of them; every 23rd is a bad row and every
 * 11th ends with "\r\n". */
static void add_rows(tbuf *t, int first, int count)
{
    for (int i = first; i < first + count; i++) {
        if (i % 23 == 5)
            add(t, "%d,not-a-number\n", i);
        else
            add(t, "%d,%d.5%s", i, i % 7, i % 11 == 3 ? "\r\n" : "\n");
    }
}

static void add_header(tbuf *t)
{
    add(t, "a,b\n# the second header line\n");
}

static void write_part(int i, const tbuf *t)
{
    char name[64], path[512];
    snprintf(name, sizeof name, "part-%05d", i);
    test_write_file(test_path(name, path), t->p, t->n);
}

/* The parts of the mixed set in test_dir; returns their count. */
static int make_parts(void)
{
    tbuf t = {0}, z = {0};
    /* 0: plain, a long line in the middle, the last line without "\n" */
    add_header(&t);
    add_rows(&t, 0, 30);
    add_long(&t, FERRY_CSV_MAX_LINE + 10, true);
    add_rows(&t, 30, 20);
    add(&t, "50,1.5");
    write_part(0, &t);
    /* 1: gzip in two members, cut inside a line */
    t.n = 0;
    add_header(&t);
    add_rows(&t, 100, 60);
    gzip_to(&z, t.p, t.n / 2 + 3);
    gzip_to(&z, t.p + t.n / 2 + 3, t.n - t.n / 2 - 3);
    write_part(1, &z);
    /* 2: zstd in two frames, ending with a long line without "\n" */
    t.n = z.n = 0;
    add_header(&t);
    add_rows(&t, 200, 40);
    size_t half = t.n;
    add_rows(&t, 240, 10);
    add_long(&t, FERRY_CSV_MAX_LINE + 1, false);
    zstd_to(&z, t.p, half);
    zstd_to(&z, t.p + half, t.n - half);
    write_part(2, &z);
    /* 3: gzip, truncated: rows, then an error */
    t.n = z.n = 0;
    add_header(&t);
    add_rows(&t, 300, 50);
    gzip_flushed(&z, t.p, t.n);
    z.n = z.n * 2 / 3;
    write_part(3, &z);
    /* 4: zstd, truncated */
    t.n = z.n = 0;
    add_header(&t);
    add_rows(&t, 400, 50);
    zstd_flushed(&z, t.p, t.n);
    z.n = z.n * 2 / 3;
    write_part(4, &z);
    /* 5: only the header */
    t.n = 0;
    add_header(&t);
    write_part(5, &t);
    /* 6: a long first line (a bad row, not a header line), then the header, rows */
    t.n = 0;
    add_long(&t, FERRY_CSV_MAX_LINE + 3, true);
    add_header(&t);
    add_rows(&t, 600, 12);
    write_part(6, &t);
    /* 7: empty */
    t.n = 0;
    write_part(7, &t);
    /* 8: xz, which the stream refuses (an error, then the next part) */
    t.n = 0;
    put(&t,
        "\xfd"
        "7zXZ\0\0\0",
        8);
    write_part(8, &t);
    free(t.p);
    free(z.p);
    return 9;
}

static ferry_stream *open_csv(const char *dir, int header)
{
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.header = header;
    o.cols = 2;
    o.fields = "a:0:i64;b:1:f64";
    ferry_stream *st = NULL;
    CHECK_OK(ferry_stream_csv(&st, &o));
    CHECK(ferry_stream_resumable(st));
    return st;
}

/* ---- events: what each next() gave ---- */

typedef struct {
    int64_t a;
    double b;
} row;

typedef struct {
    int rc;
    row r;
    ferry_pos pos;
    char msg[200];
} event;

typedef struct {
    size_t n;
    event *e;
} events;

static int next_event(ferry_stream_iter *it, ferry_ctx *ctx, event *ev)
{
    memset(ev, 0, sizeof *ev);
    row r;
    memset(&r, 0xa5, sizeof r);
    void *p[2] = {&r.a, &r.b};
    int64_t len[2];
    ferry_sample s = {2, p, len, {0}};
    ev->rc = ferry_stream_next(it, &s, ctx);
    if (ev->rc == 0) {
        ev->r = r;
        ev->pos = s.pos;
    } else if (ev->rc < 0) {
        snprintf(ev->msg, sizeof ev->msg, "%s", ferry_last_errmsg());
    }
    return ev->rc;
}

static void same_event(const event *got, const event *want, const char *what, size_t i)
{
    if (got->rc != want->rc || memcmp(&got->r, &want->r, sizeof got->r) ||
        memcmp(&got->pos, &want->pos, sizeof got->pos) || strcmp(got->msg, want->msg))
        test_fail(__FILE__, __LINE__,
                  "%s: call %zu: rc %d a %lld pos (%llu,%llu,%llu) \"%s\", expected rc %d a %lld "
                  "pos (%llu,%llu,%llu) \"%s\"",
                  what, i, got->rc, (long long)got->r.a, (unsigned long long)got->pos.a,
                  (unsigned long long)got->pos.b, (unsigned long long)got->pos.c, got->msg,
                  want->rc, (long long)want->r.a, (unsigned long long)want->pos.a,
                  (unsigned long long)want->pos.b, (unsigned long long)want->pos.c, want->msg);
}

/* Every call of shard k of n up to and including FERRY_END. */
static events read_all(ferry_stream *st, uint64_t k, uint64_t n)
{
    events ev = {0, calloc(MAX_EVENTS, sizeof(event))};
    CHECK(ev.e != NULL);
    ferry_ctx *ctx;
    ferry_stream_iter *it;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_stream_open(st, k, n, 0, &it));
    for (;;) {
        CHECK(ev.n < MAX_EVENTS);
        int rc = next_event(it, ctx, &ev.e[ev.n++]);
        CHECK(rc <= 0 || rc == FERRY_END);
        if (rc == FERRY_END)
            break;
    }
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    return ev;
}

/* At every call k of the shard: read k calls, save, restore a fresh iterator, and
 * the rest matches the uninterrupted read (rows, pos, errors and their messages). */
static void resume_everywhere(ferry_stream *st, uint64_t shard, uint64_t n, const events *full,
                              const char *what)
{
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    uint8_t *state = malloc(STATE_CAP), *again = malloc(STATE_CAP);
    CHECK(state && again);
    for (size_t k = 0; k < full->n; k++) {
        ferry_stream_iter *it;
        event ev;
        CHECK_OK(ferry_stream_open(st, shard, n, 0, &it));
        for (size_t i = 0; i < k; i++) {
            next_event(it, ctx, &ev);
            same_event(&ev, &full->e[i], what, i);
        }
        size_t len, len2;
        CHECK_OK(ferry_stream_save(it, state, STATE_CAP, &len));
        CHECK_OK(ferry_stream_save(it, again, STATE_CAP, &len2));
        CHECK(len == len2 && !memcmp(state, again, len));
        ferry_stream_close(it);
        CHECK_OK(ferry_stream_open(st, shard, n, 0, &it));
        CHECK_OK(ferry_stream_restore(it, state, len, ctx));
        for (size_t i = k; i < full->n; i++) {
            next_event(it, ctx, &ev);
            same_event(&ev, &full->e[i], what, i);
        }
        CHECK_RC(next_event(it, ctx, &ev), FERRY_END);
        ferry_stream_close(it);
    }
    free(state);
    free(again);
    ferry_ctx_free(ctx);
}

static size_t count_rc(const events *e, int rc)
{
    size_t c = 0;
    for (size_t i = 0; i < e->n; i++)
        c += e->e[i].rc == rc;
    return c;
}

TEST(resume_at_every_call_of_every_shard)
{
    test_make_dir("csv-resume");
    int nparts = make_parts();
    ferry_stream *st = open_csv(test_dir, HEADER);
    /* what the set holds, read whole: rows, bad rows, long lines, broken parts */
    events all = read_all(st, 0, 1);
    CHECK(count_rc(&all, 0) > 200);
    CHECK(count_rc(&all, FERRY_ECORRUPT) >= 10);
    size_t longs = 0, ends = 0;
    for (size_t i = 0; i < all.n; i++) {
        longs += strstr(all.e[i].msg, "longer than") != NULL;
        ends += strstr(all.e[i].msg, "ends early") != NULL;
    }
    CHECK_EQ(longs, 3);
    CHECK_EQ(ends, 2);
    CHECK_CONTAINS(all.e[all.n - 2].msg, "part-00008: the file is xz-compressed");
    /* pos: the part, the offset and the 1-based line of each row */
    CHECK_U64(all.e[0].pos.a, 0);
    CHECK_U64(all.e[0].pos.b, strlen("a,b\n# the second header line\n"));
    CHECK_U64(all.e[0].pos.c, 3);
    CHECK_U64(all.e[1].pos.b, all.e[0].pos.b + strlen("0,0.5\n"));
    free(all.e);
    for (uint64_t n = 1; n <= 3; n++) {
        for (uint64_t k = 0; k < n; k++) {
            events full = read_all(st, k, n);
            char what[64];
            snprintf(what, sizeof what, "shard %llu of %llu", (unsigned long long)k,
                     (unsigned long long)n);
            resume_everywhere(st, k, n, &full, what);
            free(full.e);
        }
    }
    /* a shard with no part (more shards than parts) */
    events none = read_all(st, (uint64_t)nparts, (uint64_t)nparts + 1);
    CHECK_EQ(none.n, 1);
    resume_everywhere(st, (uint64_t)nparts, (uint64_t)nparts + 1, &none, "empty shard");
    free(none.e);
    ferry_stream_free(st);
    test_remove_dir();
}

TEST(resume_under_a_shuffle_buffer)
{
    test_make_dir("csv-resume");
    make_parts();
    for (uint64_t n = 1; n <= 2; n++) {
        for (uint64_t k = 0; k < n; k++) {
            ferry_stream *sh;
            CHECK_OK(ferry_stream_shuffle(&sh, open_csv(test_dir, HEADER), 7, 42 + k));
            CHECK(ferry_stream_resumable(sh));
            events full = read_all(sh, k, n);
            CHECK(count_rc(&full, 0) > 80);
            /* shuffled: not the file order */
            size_t out_of_order = 0;
            for (size_t i = 1; i < full.n; i++)
                out_of_order +=
                    full.e[i].rc == 0 && full.e[i - 1].rc == 0 && full.e[i].r.a < full.e[i - 1].r.a;
            CHECK(out_of_order > 10);
            char what[64];
            snprintf(what, sizeof what, "shuffle, shard %llu of %llu", (unsigned long long)k,
                     (unsigned long long)n);
            resume_everywhere(sh, k, n, &full, what);
            free(full.e);
            ferry_stream_free(sh);
        }
    }
    test_remove_dir();
}

static void fetch_event(ferry_stream_iter *it, ferry_ctx *ctx, const ferry_pos *pos, event *ev)
{
    memset(ev, 0, sizeof *ev);
    row r;
    memset(&r, 0xa5, sizeof r);
    void *p[2] = {&r.a, &r.b};
    int64_t len[2];
    ferry_sample s = {2, p, len, {0}};
    ev->rc = ferry_stream_fetch(it, pos, &s, ctx);
    if (ev->rc == 0) {
        ev->r = r;
        ev->pos = s.pos;
    } else {
        snprintf(ev->msg, sizeof ev->msg, "%s", ferry_last_errmsg());
    }
}

/* The call of the first row read from part `part`. */
static size_t row_in(const events *e, uint64_t part)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->e[i].rc == 0 && e->e[i].pos.a == part)
            return i;
    CHECK(!"no row in that part");
    return 0;
}

TEST(fetch_reads_every_row_again_in_any_order)
{
    test_make_dir("csv-resume");
    make_parts();
    ferry_stream *st = open_csv(test_dir, HEADER);
    events all = read_all(st, 0, 1);
    size_t *rows = malloc(all.n * sizeof *rows), nrows = 0;
    CHECK(rows != NULL);
    for (size_t i = 0; i < all.n; i++)
        if (all.e[i].rc == 0)
            rows[nrows++] = i;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    /* from an iterator of another shard: in order, backwards, shuffled */
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 1, 2, 0, &it));
    event ev;
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 2) {
            uint64_t x = 88172645463325252ull;
            for (size_t i = nrows - 1; i > 0; i--) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                size_t j = (size_t)(x % (i + 1)), t = rows[i];
                rows[i] = rows[j];
                rows[j] = t;
            }
        }
        for (size_t q = 0; q < nrows; q++) {
            const event *want = &all.e[rows[pass == 1 ? nrows - 1 - q : q]];
            fetch_event(it, ctx, &want->pos, &ev);
            same_event(&ev, want, "fetch", q);
        }
    }
    /* fetch does not move the cursor: the iterator still reads shard 1 from its start */
    events shard1 = read_all(st, 1, 2);
    for (size_t i = 0; i < shard1.n; i++) {
        next_event(it, ctx, &ev);
        same_event(&ev, &shard1.e[i], "next after fetches", i);
        if (i % 5 == 0) { /* and fetches in between change nothing */
            fetch_event(it, ctx, &all.e[rows[i % nrows]].pos, &ev);
            CHECK_OK(ev.rc);
        }
    }
    ferry_stream_close(it);
    /* a bad row fetched again is the same error, with the same message: row 5, the
     * sixth call, on line 8 after row 4's "4,4.5\n" */
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    CHECK(all.e[4].rc == 0 && all.e[4].r.a == 4 && all.e[5].rc == FERRY_ECORRUPT);
    ferry_pos bad = {0, 0, all.e[4].pos.b + 6, 8};
    fetch_event(it, ctx, &bad, &ev);
    CHECK_RC(ev.rc, FERRY_ECORRUPT);
    CHECK(!strcmp(ev.msg, all.e[5].msg));
    CHECK_CONTAINS(ev.msg, "part-00000: line 8, column 2");
    /* positions that are no line of the stream: behind the fetch reader, and just
     * ahead of it, in what it has read already */
    ferry_pos p = all.e[rows[3]].pos;
    p.b += 1;
    fetch_event(it, ctx, &p, &ev);
    CHECK_RC(ev.rc, FERRY_ERANGE);
    CHECK_CONTAINS(ev.msg, "no line starts at offset");
    for (size_t from = 0; from < 2; from++) { /* a plain part, a gzip part */
        size_t i = from ? row_in(&all, 1) : 0;
        fetch_event(it, ctx, &all.e[i].pos, &ev);
        same_event(&ev, &all.e[i], "fetch", i);
        p = all.e[i + 2].pos;
        p.b += 1;
        fetch_event(it, ctx, &p, &ev);
        CHECK_RC(ev.rc, FERRY_ERANGE);
        CHECK_CONTAINS(ev.msg, "no line starts at offset");
    }
    p = all.e[row_in(&all, 2)].pos; /* in a zstd part */
    p.b = 1ull << 40;
    fetch_event(it, ctx, &p, &ev);
    CHECK_RC(ev.rc, FERRY_ERANGE);
    CHECK_CONTAINS(ev.msg, "past the end of the file");
    p = all.e[row_in(&all, 1) + 3].pos; /* in a gzip part */
    CHECK_U64(p.a, 1);
    p.b += 2;
    fetch_event(it, ctx, &p, &ev);
    CHECK_RC(ev.rc, FERRY_ERANGE);
    p.a = 9;
    fetch_event(it, ctx, &p, &ev);
    CHECK_RC(ev.rc, FERRY_ERANGE);
    CHECK_CONTAINS(ev.msg, "of 9 parts");
    p = all.e[rows[3]].pos;
    p.c = 0;
    fetch_event(it, ctx, &p, &ev);
    CHECK_RC(ev.rc, FERRY_ERANGE);
    /* and the reader is fine after them */
    fetch_event(it, ctx, &all.e[rows[7]].pos, &ev);
    same_event(&ev, &all.e[rows[7]], "fetch after errors", 0);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    free(rows);
    free(shard1.e);
    free(all.e);
    ferry_stream_free(st);
    test_remove_dir();
}

/* ---- states that do not fit ---- */

#define BODY 16 /* the saved position's envelope (ferry_stream_save) */

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Sets the envelope's length and checksum for a body of len - BODY bytes. */
static void reseal(uint8_t *s, size_t len)
{
    uint32_t n = (uint32_t)(len - BODY), c = ferry_crc32c(0, s + BODY, len - BODY);
    for (int i = 0; i < 4; i++) {
        s[8 + i] = (uint8_t)(c >> (8 * i));
        s[12 + i] = (uint8_t)(n >> (8 * i));
    }
}

/* Restores shard k of n of st from s with word w of the CSV state set to v: rc. */
static int restore_with(ferry_stream *st, uint64_t k, uint64_t n, const uint8_t *saved, size_t len,
                        int w, uint64_t v)
{
    uint8_t s[256];
    CHECK(len <= sizeof s);
    memcpy(s, saved, len);
    if (w >= 0) {
        put_u64(s + BODY + 8 * (size_t)w, v);
        reseal(s, len);
    }
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, k, n, 0, &it));
    int rc = ferry_stream_restore(it, s, len, NULL);
    ferry_stream_close(it);
    return rc;
}

enum { W_TAG, W_HEADER, W_NPARTS, W_NSHARDS, W_PART, W_OPEN, W_OFF, W_LINE, W_LEFT };

TEST(states_that_do_not_fit_are_errors)
{
    test_make_dir("csv-resume");
    make_parts();
    ferry_stream *st = open_csv(test_dir, HEADER);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    /* shard 1 of 3 (parts 1, 4, 7), some rows into part 1 (gzip) */
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 1, 3, 0, &it));
    event ev;
    for (int i = 0; i < 10; i++)
        next_event(it, ctx, &ev);
    uint8_t s[256];
    size_t len;
    CHECK_OK(ferry_stream_save(it, s, sizeof s, &len));
    CHECK_EQ(len, BODY + 72); /* the envelope and 72 bytes */
    CHECK_RC(ferry_stream_save(it, s, 10, &len), FERRY_EOVERFLOW);
    CHECK_EQ(len, BODY + 72);
    CHECK_OK(ferry_stream_save(it, s, sizeof s, &len));
    ferry_stream_close(it);
    uint64_t off = get_u64(s + BODY + 8 * W_OFF), line = get_u64(s + BODY + 8 * W_LINE);
    CHECK_U64(get_u64(s + BODY + 8 * W_PART), 1);
    CHECK(off > 0 && line == 12);
    CHECK_OK(restore_with(st, 1, 3, s, len, -1, 0)); /* as saved */
    static const struct {
        int word;
        uint64_t v;
        const char *msg;
    } bad[] = {
        {W_TAG, 7, "not a CSV stream's position"},
        {W_NPARTS, 10, "saved over 10 part files"},
        {W_NSHARDS, 4, "one of 4 shards, this iterator is shard 1 of 3"},
        {W_PART, 2, "names part 2, which shard 1 of 3 (of 9 parts) does not hold"},
        {W_PART, 10, "names part 10"},
        {W_PART, UINT64_MAX, "does not hold"}, /* the end, with a part open */
        {W_OPEN, 2, "(damaged)"},
        {W_OFF, 1ull << 40, "past the end of the file"},
        {W_LINE, 1ull << 41, "state is damaged"},
        {W_LEFT, HEADER + 1, "state is damaged"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_RC(restore_with(st, 1, 3, s, len, bad[i].word, bad[i].v), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), bad[i].msg);
    }
    /* an offset inside a line, in a gzip part and in a plain one */
    CHECK_RC(restore_with(st, 1, 3, s, len, W_OFF, off + 1), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001: the state's offset");
    CHECK_CONTAINS(ferry_last_errmsg(), "is not the start of a line");
    uint8_t s0[256];
    memcpy(s0, s, len);
    put_u64(s0 + BODY + 8 * W_PART, 0);
    reseal(s0, len);
    CHECK_RC(restore_with(st, 0, 3, s0, len, W_OFF, 40), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: the state's offset 40 is not the start");
    /* another shard's state */
    CHECK_RC(restore_with(st, 0, 3, s, len, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "which shard 0 of 3");
    CHECK_RC(restore_with(st, 1, 2, s, len, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "one of 3 shards, this iterator is shard 1 of 2");
    /* a closed part with a line position */
    memcpy(s0, s, len);
    put_u64(s0 + BODY + 8 * W_OPEN, 0);
    reseal(s0, len);
    CHECK_RC(restore_with(st, 1, 3, s0, len, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "which is not open");
    /* damaged bytes, a state cut short, one with bytes left over */
    s0[BODY + 40] ^= 1;
    CHECK_RC(restore_with(st, 1, 3, s0, len, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "checksum mismatch");
    memcpy(s0, s, len);
    reseal(s0, len - 8);
    CHECK_RC(restore_with(st, 1, 3, s0, len - 8, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "cut short");
    memcpy(s0, s, len);
    memset(s0 + len, 0, 8);
    reseal(s0, len + 8);
    CHECK_RC(restore_with(st, 1, 3, s0, len + 8, -1, 0), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "left over");
    /* other settings: header */
    ferry_stream *h1 = open_csv(test_dir, 1);
    CHECK_RC(restore_with(h1, 1, 3, s, len, -1, 0), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "saved with header=2, this stream has header=1");
    ferry_stream_free(h1);
    /* a shuffle's state given to the CSV stream, and the CSV stream's to a shuffle */
    ferry_stream *sh;
    CHECK_OK(ferry_stream_shuffle(&sh, open_csv(test_dir, HEADER), 4, 1));
    CHECK_OK(ferry_stream_open(sh, 1, 3, 0, &it));
    for (int i = 0; i < 6; i++)
        next_event(it, ctx, &ev);
    uint8_t ss[512];
    size_t slen;
    CHECK_OK(ferry_stream_save(it, ss, sizeof ss, &slen));
    ferry_stream_close(it);
    CHECK_OK(ferry_stream_open(st, 1, 3, 0, &it));
    CHECK_RC(ferry_stream_restore(it, ss, slen, ctx), FERRY_ECORRUPT);
    ferry_stream_close(it);
    CHECK_OK(ferry_stream_open(sh, 1, 3, 0, &it));
    CHECK(ferry_stream_restore(it, s, len, ctx) < 0);
    ferry_stream_close(it);
    ferry_stream_free(sh);
    /* a state saved before the first row, and at the end */
    CHECK_OK(ferry_stream_open(st, 2, 3, 0, &it));
    CHECK_OK(ferry_stream_save(it, s, sizeof s, &len));
    ferry_stream_close(it);
    CHECK_OK(restore_with(st, 2, 3, s, len, -1, 0));
    CHECK_OK(ferry_stream_open(st, 2, 3, 0, &it));
    while (next_event(it, ctx, &ev) != FERRY_END) {
    }
    CHECK_OK(ferry_stream_save(it, s, sizeof s, &len));
    ferry_stream_close(it);
    CHECK_U64(get_u64(s + BODY + 8 * W_PART), UINT64_MAX);
    CHECK_OK(ferry_stream_open(st, 2, 3, 0, &it));
    CHECK_OK(ferry_stream_restore(it, s, len, ctx));
    CHECK_RC(next_event(it, ctx, &ev), FERRY_END);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    test_remove_dir();
}

/* The part directory changed under a state: a part cut shorter than the state's
 * offset is an error naming it, not a wrong resume. */
TEST(a_part_cut_shorter_than_the_state_is_an_error)
{
    test_make_dir("csv-resume");
    make_parts();
    ferry_stream *st = open_csv(test_dir, HEADER);
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    for (int part = 0; part <= 2; part++) { /* plain, gzip, zstd */
        ferry_stream_iter *it;
        event ev;
        CHECK_OK(ferry_stream_open(st, (uint64_t)part, 8, 0, &it));
        for (int i = 0; i < 45; i++)
            next_event(it, ctx, &ev);
        uint8_t s[256];
        size_t len;
        CHECK_OK(ferry_stream_save(it, s, sizeof s, &len));
        ferry_stream_close(it);
        char name[64], path[512];
        snprintf(name, sizeof name, "part-%05d", part);
        size_t n;
        unsigned char *whole = test_read_file(test_path(name, path), &n);
        tbuf t = {0};
        if (part == 0) {
            add(&t, "a,b\nb\n1,2\n");
        } else {
            tbuf plain = {0};
            add(&plain, "a,b\nb\n1,2\n");
            (part == 1 ? gzip_to : zstd_to)(&t, plain.p, plain.n);
            free(plain.p);
        }
        write_part(part, &t);
        CHECK_OK(ferry_stream_open(st, (uint64_t)part, 8, 0, &it));
        CHECK_RC(ferry_stream_restore(it, s, len, ctx), FERRY_ECORRUPT);
        CHECK_CONTAINS(ferry_last_errmsg(), name);
        CHECK_CONTAINS(ferry_last_errmsg(), "past the end of the file");
        ferry_stream_close(it);
        test_write_file(path, whole, n);
        free(whole);
        free(t.p);
    }
    ferry_ctx_free(ctx);
    ferry_stream_free(st);
    test_remove_dir();
}

/* ---- the reader underneath: seek forward and back in decoded data ---- */

/* Opens path, decoding ahead on a thread of its own when `ahead`. */
static void open_sr(ferry__seqread *r, const char *path, int ahead)
{
    CHECK_OK(ferry__seqread_open(r, path, path, FERRY__COMP_AUTO, 0));
    if (ahead)
        ferry__seqread_decode_ahead(r);
}

static void seek_in_each_kind(int ahead)
{
    test_make_dir("csv-resume");
    tbuf plain = {0};
    for (int i = 0; i < 40000; i++) /* several 64 KiB input buffers */
        add(&plain, "%d;", i * 7919);
    tbuf gz = {0}, zs = {0};
    gzip_to(&gz, plain.p, plain.n / 3);
    gzip_to(&gz, plain.p + plain.n / 3, plain.n - plain.n / 3);
    zstd_to(&zs, plain.p, plain.n);
    char path[3][512];
    test_write_file(test_path("plain", path[0]), plain.p, plain.n);
    test_write_file(test_path("gz", path[1]), gz.p, gz.n);
    test_write_file(test_path("zst", path[2]), zs.p, zs.n);
    const uint64_t at[] = {0, 1, 5000, 5000, 200000, 70000, plain.n / 3, plain.n - 1, 3, plain.n};
    char got[64];
    for (int f = 0; f < 3; f++) {
        ferry__seqread r;
        uint64_t to;
        open_sr(&r, path[f], ahead);
        for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
            CHECK_OK(ferry__seqread_seek(&r, at[i], &to));
            CHECK_U64(r.off, at[i]);
            size_t want = sizeof got, n;
            CHECK_OK(ferry__seqread_read(&r, got, want, &n));
            size_t left = (size_t)(plain.n - at[i]);
            CHECK_EQ(n, left < want ? left : want);
            CHECK(!memcmp(got, plain.p + at[i], n));
            CHECK_U64(r.off, at[i] + n);
        }
        /* past the end: the reader stops at the end and says where */
        CHECK_OK(ferry__seqread_seek(&r, plain.n + 10, &to));
        CHECK_U64(r.off, plain.n);
        CHECK_U64(to, plain.n);
        size_t n;
        CHECK_OK(ferry__seqread_read(&r, got, 8, &n));
        CHECK_EQ(n, 0);
        CHECK_OK(ferry__seqread_seek(&r, 9, &to)); /* and back again */
        CHECK_OK(ferry__seqread_read(&r, got, 8, &n));
        CHECK(n == 8 && !memcmp(got, plain.p + 9, 8));
        ferry__seqread_close(&r);
    }
    /* a truncated gzip file: a seek past the damage is its error */
    test_write_file(path[1], gz.p, gz.n / 4);
    ferry__seqread r;
    uint64_t to;
    open_sr(&r, path[1], ahead);
    CHECK_RC(ferry__seqread_seek(&r, plain.n - 1, &to), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "the gzip stream ends early");
    CHECK_OK(ferry__seqread_seek(&r, 100, &to)); /* a broken reader starts again */
    size_t n;
    CHECK_OK(ferry__seqread_read(&r, got, 8, &n));
    CHECK(n == 8 && !memcmp(got, plain.p + 100, 8));
    /* read a byte at a time, it gives every byte the decoder can make before the
     * cut, as one large read does: none is left inside the decoder (long matches,
     * cut short by a full buffer, leave bytes there) */
    ferry__seqread_close(&r);
    plain.n = gz.n = 0;
    for (int i = 0; i < 5000; i++)
        add(&plain, "%d,%s\n", i, "0.25,0.50,0.75,1.00,1.25,1.50,1.75,2.00,2.25,2.50");
    gzip_to(&gz, plain.p, plain.n);
    test_write_file(path[1], gz.p, gz.n / 2);
    open_sr(&r, path[1], ahead);
    uint64_t whole;
    CHECK_OK(ferry__seqread_read(&r, plain.p, plain.n, &n));
    whole = r.off;
    CHECK(whole > 1000 && whole < plain.n);
    CHECK_RC(ferry__seqread_read(&r, got, 1, &n), FERRY_ECORRUPT);
    CHECK_OK(ferry__seqread_seek(&r, 0, &to));
    int rc;
    while ((rc = ferry__seqread_read(&r, got, 1, &n)) == 0 && n == 1) {
    }
    CHECK_RC(rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "the gzip stream ends early");
    CHECK_U64(r.off, whole);
    ferry__seqread_close(&r);
    free(plain.p);
    free(gz.p);
    free(zs.p);
    test_remove_dir();
}

TEST(seqread_seek_in_plain_gzip_and_zstd_files)
{
    seek_in_each_kind(0);
}

/* The same decoded on a thread ahead of the reader: the same bytes, the same
 * errors after the same bytes, and seeks back that start the decoder again. */
TEST(seqread_decoding_ahead_reads_and_seeks_the_same)
{
    seek_in_each_kind(1);
}

/* Past the 4 MiB the caller's thread decodes first, the decoder runs ahead on a
 * thread of its own: every byte the same, in reads of every size, seeks back and
 * forth that stop and start it, and a file cut short: the bytes before the cut,
 * then the error. */
TEST(seqread_decoding_ahead_past_its_start)
{
    test_make_dir("csv-resume");
    tbuf plain = {0}, gz = {0}, zs = {0};
    for (int i = 0; plain.n < ((size_t)12 << 20); i++)
        add(&plain, "%lld,%d.25\n", (long long)i * 7919, i % 1000);
    gzip_to(&gz, plain.p, plain.n / 2);
    gzip_to(&gz, plain.p + plain.n / 2, plain.n - plain.n / 2); /* two members */
    zstd_to(&zs, plain.p, plain.n);
    char path[2][512];
    test_write_file(test_path("big.gz", path[0]), gz.p, gz.n);
    test_write_file(test_path("big.zst", path[1]), zs.p, zs.n);
    char *got = malloc(plain.n + 1);
    for (int f = 0; f < 2; f++) {
        ferry__seqread r;
        open_sr(&r, path[f], 1);
        size_t n, at = 0, step = 1;
        while (at < plain.n) { /* reads of 1 byte to 1 MiB and more */
            size_t want = step < plain.n - at ? step : plain.n - at;
            CHECK_OK(ferry__seqread_read(&r, got + at, want, &n));
            CHECK_EQ(n, want);
            at += n;
            step = step * 3 + 1;
            if (step > ((size_t)3 << 20))
                step = 7;
        }
        CHECK(r.ahead != NULL); /* it did start */
        CHECK(!memcmp(got, plain.p, plain.n));
        CHECK_OK(ferry__seqread_read(&r, got, 8, &n));
        CHECK_EQ(n, 0);
        uint64_t to;
        const uint64_t seek[] = {100, (uint64_t)9 << 20, plain.n / 2 - 3, (uint64_t)5 << 20, 7};
        for (size_t i = 0; i < sizeof seek / sizeof *seek; i++) {
            CHECK_OK(ferry__seqread_seek(&r, seek[i], &to));
            CHECK_U64(to, seek[i]);
            CHECK_OK(ferry__seqread_read(&r, got, 4096, &n));
            CHECK(n == 4096 && !memcmp(got, plain.p + seek[i], n));
        }
        ferry__seqread_close(&r);
    }
    /* cut short three quarters in: every byte before the cut, then the error */
    test_write_file(path[0], gz.p, gz.n * 3 / 4);
    ferry__seqread r;
    open_sr(&r, path[0], 1);
    size_t n, at = 0;
    int rc;
    while ((rc = ferry__seqread_read(&r, got + at, 65536, &n)) == 0 && n > 0)
        at += n;
    CHECK_RC(rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "the gzip stream ends early");
    CHECK(at > ((size_t)6 << 20) && at < plain.n && !memcmp(got, plain.p, at));
    CHECK_RC(ferry__seqread_read(&r, got, 1, &n), FERRY_ECORRUPT); /* and stays */
    ferry__seqread_close(&r);
    free(got);
    free(plain.p);
    free(gz.p);
    free(zs.p);
    test_remove_dir();
}

/* A gzip member with a back-reference that reaches before its start (igzip hands
 * out bytes of its own buffer before the error), then a second member. */
TEST(seqread_damaged_gzip_decodes_the_same_every_time)
{
    static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x33\xd4\x31\xd2\x31\xe6\x32"
                             "\xd1\x32\xd5\x23\x4e\x2f\x41\xb4\xd1\x9f\xdb\x0c\x00\x00\x00\x1f\x8b"
                             "\x08\x3b\x00\x00\x00\x00\x00\x02\x03\x33\xd7\xb1\xd0\xb1\xe4\x02\x00"
                             "\xd9\x5f\x15\x46\x06\x00\x00\x00";
    test_make_dir("csv-resume");
    char path[512], got[2][4096];
    size_t n[2];
    test_write_file(test_path("damaged.gz", path), gz, sizeof gz - 1);
    for (int i = 0; i < 2; i++) {
        /* freed memory with other bytes in it each time, which a decoder may get */
        char *junk = malloc(120000);
        CHECK(junk != NULL);
        for (size_t j = 0; j < 120000; j++)
            junk[j] = i ? "7,8,9\n"[j % 6] : (char)j;
        free(junk);
        ferry__seqread r;
        CHECK_OK(ferry__seqread_open(&r, path, path, FERRY__COMP_AUTO, 0));
        size_t k;
        int rc;
        for (n[i] = 0; (rc = ferry__seqread_read(&r, got[i] + n[i], 1, &k)) == 0 && k == 1;)
            CHECK(++n[i] < sizeof got[i]);
        CHECK_RC(rc, FERRY_ECORRUPT);
        ferry__seqread_close(&r);
    }
    CHECK_U64(n[0], n[1]);
    CHECK(!memcmp(got[0], got[1], n[0]));
    test_remove_dir();
}
