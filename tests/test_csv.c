/*
 * CSV: the row parser (exact, locale-independent numbers, errors that say where) and
 * the stream over part files (finding parts, fields, headers, line endings,
 * sharding, limits, the source description, allocation failures, the loader).
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/csv.h>
#include "core/internal.h"
#include "datasets/csv_internal.h"

#include <dirent.h>
#include <float.h>
#include <locale.h>
#include <zlib.h>
#include <zstd.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static char *make_dir(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/ferry-csv-XXXXXX", t && *t ? t : "/tmp");
    char *d = mkdtemp(tmpl);
    CHECK(d != NULL);
    char *out = strdup(d);
    CHECK(out != NULL);
    return out;
}

static void remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        CHECK(lstat(p, &st) == 0);
        if (S_ISDIR(st.st_mode))
            remove_dir(strdup(p));
        else
            CHECK(unlink(p) == 0);
    }
    closedir(d);
    CHECK(rmdir(dir) == 0);
    free(dir);
}

static void write_bytes(const char *dir, const char *name, const void *text, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(text, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    write_bytes(dir, name, text, strlen(text));
}

static void write_part(const char *dir, int i, const char *text)
{
    char name[64];
    snprintf(name, sizeof name, "part-%05d", i);
    write_text(dir, name, text);
}

/* A growable text buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} tbuf;

static void add(tbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(tbuf *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        CHECK(k >= 0);
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        t->cap = (t->cap + (size_t)k + 1) * 2;
        t->p = realloc(t->p, t->cap);
        CHECK(t->p != NULL);
    }
}

static ferry_stream *open_csv(const char *dir, const char *fields, ferry_dtype dt)
{
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.fields = fields;
    o.dtype = dt;
    ferry_stream *st = NULL;
    CHECK_OK(ferry_stream_csv(&st, &o));
    return st;
}

/* Each field of a sample after the other, in one slot of `row` bytes. */
typedef struct {
    int nf;
    size_t off[FERRY_MAX_FIELDS], row;
} layout;

static layout layout_of(const ferry_stream *st)
{
    layout l = {ferry_stream_nfields(st), {0}, 0};
    for (int f = 0; f < l.nf; f++) {
        l.off[f] = l.row;
        l.row += ferry_field_nbytes(ferry_stream_field(st, f));
    }
    return l;
}

/* Reads shard k of n into out (at most cap rows); returns the rows read. The shard
 * must end with FERRY_END. */
static size_t read_shard(ferry_stream *st, uint64_t k, uint64_t n, void *out, size_t cap)
{
    layout l = layout_of(st);
    ferry_stream_iter *it;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    CHECK_OK(ferry_stream_open(st, k, n, 0, &it));
    size_t rows = 0;
    int rc;
    for (;;) {
        CHECK(rows <= cap);
        uint8_t *slot = (uint8_t *)out + (rows < cap ? rows : 0) * l.row;
        void *p[FERRY_MAX_FIELDS];
        int64_t lens[FERRY_MAX_FIELDS];
        for (int f = 0; f < l.nf; f++)
            p[f] = slot + l.off[f];
        ferry_sample s = {l.nf, p, lens, {0}};
        if ((rc = ferry_stream_next(it, &s, ctx)) != 0)
            break;
        rows++;
    }
    CHECK_RC(rc, FERRY_END);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    return rows;
}

/* The next row of an open shard into buf: its return code. */
static int next_row(ferry_stream_iter *it, const ferry_stream *st, void *buf)
{
    layout l = layout_of(st);
    void *p[FERRY_MAX_FIELDS];
    int64_t lens[FERRY_MAX_FIELDS];
    for (int f = 0; f < l.nf; f++)
        p[f] = (uint8_t *)buf + l.off[f];
    ferry_sample s = {l.nf, p, lens, {0}};
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    int rc = ferry_stream_next(it, &s, ctx);
    ferry_ctx_free(ctx);
    return rc;
}

/* The error of opening a stream on dir with these settings. */
static int open_err(const char *dir, const ferry_csv_opts *base)
{
    ferry_csv_opts o = *base;
    o.dir = dir;
    ferry_stream *st = (ferry_stream *)1;
    int rc = ferry_stream_csv(&st, &o);
    CHECK(rc < 0);
    CHECK(st == NULL);
    return rc;
}

/* ---- numbers ---- */

static void round_trip_floats(int f64)
{
    char *dir = make_dir();
    enum { COLS = 8, PARTS = 3 };
    size_t nvals = 0, cap = 60000;
    uint64_t *bits = malloc(cap * sizeof *bits);
    CHECK(bits != NULL);
    /* the edges first: signed zeros, subnormals, the largest and smallest normals */
    if (f64) {
        double special[] = {0.0,          -0.0,
                            DBL_TRUE_MIN, -DBL_TRUE_MIN,
                            DBL_MIN,      DBL_MAX,
                            -DBL_MAX,     1e308,
                            1e38,         0.1,
                            1.0 / 3,      INFINITY,
                            -INFINITY,    2.2250738585072009e-308,
                            5e-324,       123456789012345678.0};
        for (size_t i = 0; i < sizeof special / sizeof *special; i++)
            memcpy(&bits[nvals++], &special[i], 8);
    } else {
        float special[] = {0.0f,      -0.0f,          FLT_TRUE_MIN, -FLT_TRUE_MIN,
                           FLT_MIN,   FLT_MAX,        -FLT_MAX,     1e38f,
                           -1e38f,    0.1f,           1.0f / 3,     INFINITY,
                           -INFINITY, 1.1754942e-38f, 16777217.0f,  3.4028235e38f};
        for (size_t i = 0; i < sizeof special / sizeof *special; i++) {
            uint32_t b;
            memcpy(&b, &special[i], 4);
            bits[nvals++] = b;
        }
    }
    ferry_rng r;
    ferry_rng_init(&r, 42, 0, f64);
    while (nvals < cap) {
        uint64_t b = ferry_rng_u64(&r);
        int kind = (int)(ferry_rng_u32(&r) % 4);
        if (f64) {
            if (kind == 0)
                b &= 0x800fffffffffffffull; /* subnormal */
            double d;
            memcpy(&d, &b, 8);
            if (isnan(d))
                continue;
        } else {
            b &= 0xffffffffu;
            if (kind == 0)
                b &= 0x807fffffu;
            float f;
            uint32_t b32 = (uint32_t)b;
            memcpy(&f, &b32, 4);
            if (isnan(f))
                continue;
        }
        bits[nvals++] = b;
    }
    size_t rows = nvals / COLS;
    tbuf t[PARTS] = {{0}};
    for (size_t i = 0; i < rows; i++) {
        tbuf *tp = &t[i * PARTS / rows];
        for (int c = 0; c < COLS; c++) {
            uint64_t b = bits[i * COLS + (size_t)c];
            const char *sep = c + 1 < COLS ? "," : "\n";
            if (f64) {
                double d;
                memcpy(&d, &b, 8);
                add(tp, "%.17g%s", d, sep);
            } else {
                float f;
                uint32_t b32 = (uint32_t)b;
                memcpy(&f, &b32, 4);
                add(tp, "%.9g%s", (double)f, sep);
            }
        }
    }
    for (int p = 0; p < PARTS; p++) {
        write_part(dir, p, t[p].p);
        free(t[p].p);
    }
    ferry_stream *st = open_csv(dir, NULL, f64 ? FERRY_F64 : FERRY_F32);
    CHECK_EQ(ferry_stream_nfields(st), 1);
    const ferry_field *fd = ferry_stream_field(st, 0);
    CHECK(!strcmp(fd->name, "data"));
    CHECK_EQ(fd->dtype, f64 ? FERRY_F64 : FERRY_F32);
    CHECK_EQ(fd->ndim, 1);
    CHECK_EQ(fd->shape[0], COLS);
    size_t esize = f64 ? 8 : 4;
    uint8_t *got = malloc(rows * COLS * esize);
    CHECK(got != NULL);
    CHECK_U64(read_shard(st, 0, 1, got, rows), rows);
    for (size_t i = 0; i < rows * COLS; i++) {
        uint64_t b = 0;
        memcpy(&b, got + i * esize, esize);
        if (b != bits[i])
            test_fail(__FILE__, __LINE__, "value %zu: bits %016llx read back as %016llx", i,
                      (unsigned long long)bits[i], (unsigned long long)b);
    }
    free(got);
    free(bits);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(f32_round_trips_bit_exact)
{
    round_trip_floats(0);
}

TEST(f64_round_trips_bit_exact)
{
    round_trip_floats(1);
}

/* Parses one cell with the row parser. */
static int parse1(const char *cell, ferry_dtype dt, void *dst)
{
    ferry_csv_parser *p;
    CHECK_OK(ferry_csv_parser_create(&p, ',', 1, &dt));
    void *d[1] = {dst};
    int rc = ferry_csv_parse_row(p, cell, strlen(cell), d, NULL);
    ferry_csv_parser_free(p);
    return rc;
}

TEST(short_decimals_match_the_libc_exactly)
{
    /* the fast path (short decimals) must give what a correctly rounding strtod gives */
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    CHECK(c != (locale_t)0);
    ferry_csv_parser *p32, *p64;
    ferry_dtype d32 = FERRY_F32, d64 = FERRY_F64;
    CHECK_OK(ferry_csv_parser_create(&p32, ';', 1, &d32));
    CHECK_OK(ferry_csv_parser_create(&p64, ';', 1, &d64));
    ferry_rng r;
    ferry_rng_init(&r, 7, 0, 0);
    for (int i = 0; i < 400000; i++) {
        char cell[64];
        int digits = 1 + (int)ferry_rng_below(&r, 19);
        int point = (int)ferry_rng_below(&r, (uint64_t)digits + 1);
        int k = 0;
        if (ferry_rng_below(&r, 4) == 0)
            cell[k++] = "+-"[ferry_rng_below(&r, 2)];
        for (int j = 0; j < digits; j++) {
            if (j == point && j > 0)
                cell[k++] = '.';
            cell[k++] = (char)('0' + ferry_rng_below(&r, 10));
        }
        if (ferry_rng_below(&r, 2))
            k += snprintf(cell + k, sizeof cell - (size_t)k, "e%d",
                          (int)ferry_rng_below(&r, 61) - 30);
        cell[k] = 0;
        float f, wf = strtof_l(cell, NULL, c);
        double d, wd = strtod_l(cell, NULL, c);
        void *pf[1] = {&f}, *pd[1] = {&d};
        CHECK_OK(ferry_csv_parse_row(p64, cell, (size_t)k, pd, NULL));
        if (isinf(wf)) { /* too large for a float32 */
            CHECK_RC(ferry_csv_parse_row(p32, cell, (size_t)k, pf, NULL), FERRY_ECORRUPT);
            CHECK_CONTAINS(ferry_last_errmsg(), "out of range for float32");
            f = wf;
        } else {
            CHECK_OK(ferry_csv_parse_row(p32, cell, (size_t)k, pf, NULL));
        }
        if (memcmp(&f, &wf, 4) || memcmp(&d, &wd, 8))
            test_fail(__FILE__, __LINE__, "\"%s\": %.9g / %.17g, libc %.9g / %.17g", cell,
                      (double)f, d, (double)wf, wd);
    }
    ferry_csv_parser_free(p32);
    ferry_csv_parser_free(p64);
    freelocale(c);
}

TEST(float_syntax_specials_and_range)
{
    float f;
    double d;
    static const char *good[] = {
        "1",      " 1 ",   "+1",  "-1",        "1.",  ".5",    "1e5",
        "1E+5",   "1e-05", "inf", "-Infinity", "NaN", "\t2\t", "0e999999999999",
        "-0.0e-7"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (parse1(good[i], FERRY_F32, &f) != 0 || parse1(good[i], FERRY_F64, &d) != 0)
            test_fail(__FILE__, __LINE__, "\"%s\" was refused: %s", good[i], ferry_last_errmsg());
    }
    CHECK_OK(parse1("-Infinity", FERRY_F64, &d));
    CHECK(isinf(d) && d < 0);
    CHECK_OK(parse1("-nan", FERRY_F32, &f));
    CHECK(isnan(f) && signbit(f));
    CHECK_OK(parse1("-0.0e-7", FERRY_F64, &d));
    CHECK(d == 0 && signbit(d));
    static const char *bad[] = {"",     " ",   ".",   "e5",   "1e",     "1e+", "+-1", "1.2.3",
                                "0x10", "1,5", "1 2", "infx", "nan(1)", "1d",  "--1", "in"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ferry_csv_parser *p;
        ferry_dtype dt = FERRY_F64;
        CHECK_OK(ferry_csv_parser_create(&p, ';', 1, &dt));
        void *dst[1] = {&d};
        int rc = ferry_csv_parse_row(p, bad[i], strlen(bad[i]), dst, NULL);
        ferry_csv_parser_free(p);
        if (rc != FERRY_ECORRUPT)
            test_fail(__FILE__, __LINE__, "\"%s\" was taken (rc %d)", bad[i], rc);
    }
    /* too large is an error; too small rounds to a subnormal or zero */
    CHECK_RC(parse1("1e39", FERRY_F32, &f), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "column 1: \"1e39\" is out of range for float32");
    CHECK_RC(parse1("-1e309", FERRY_F64, &d), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "out of range for float64");
    CHECK_RC(parse1("1e99999999999999999999", FERRY_F64, &d), FERRY_ECORRUPT);
    CHECK_OK(parse1("3.4028235e38", FERRY_F32, &f));
    CHECK(f == FLT_MAX);
    CHECK_OK(parse1("1e-50", FERRY_F32, &f));
    CHECK(f == 0);
    CHECK_OK(parse1("1e-320", FERRY_F64, &d));
    CHECK(d > 0 && d < DBL_MIN);
    CHECK_OK(parse1("1e-99999999999999999999", FERRY_F64, &d));
    CHECK(d == 0);
    /* long digit strings are exact too */
    CHECK_OK(parse1("0.1000000000000000055511151231257827021181583404541015625", FERRY_F64, &d));
    CHECK(d == 0.1);
    CHECK_OK(parse1("100000000000000000000000000000000000000000000", FERRY_F64, &d));
    CHECK(d == 1e44);
    /* a cell over the length limit */
    char big[FERRY_CSV_MAX_CELL + 8];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = 0;
    big[1] = '.';
    CHECK_RC(parse1(big, FERRY_F64, &d), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "longer than 1024 characters");
    memset(big, '0', sizeof big - 1); /* on every path: zeros, short values, integers */
    CHECK_RC(parse1(big, FERRY_F32, &f), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "longer than 1024 characters");
    big[sizeof big - 2] = '1';
    CHECK_RC(parse1(big, FERRY_F64, &d), FERRY_ECORRUPT);
    CHECK_RC(parse1(big, FERRY_I64, &d), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "longer than 1024 characters");
    CHECK_OK(parse1(big + 7, FERRY_I64, &d)); /* 1024 characters are fine */
    CHECK_OK(parse1(big + 7, FERRY_F64, &d));
    CHECK(d == 1);
    /* float midpoints round to even, just off them to the nearer side */
    static const struct {
        const char *s;
        float want;
    } mid[] = {{"16777217", 16777216.0f},
               {"16777219", 16777220.0f},
               {"-16777217", -16777216.0f},
               {"16777217.000001", 16777218.0f},
               {"16777216.999999", 16777216.0f},
               {"1.00000005960464477539062", 1.0f},
               {"1.00000005960464477539063", 1.00000012f},
               {"3.4028235677973366e38", FLT_MAX}};
    for (size_t i = 0; i < sizeof mid / sizeof *mid; i++) {
        CHECK_OK(parse1(mid[i].s, FERRY_F32, &f));
        if (f != mid[i].want)
            test_fail(__FILE__, __LINE__, "\"%s\": %.9g, wanted %.9g", mid[i].s, (double)f,
                      (double)mid[i].want);
    }
    /* leading zeros do not count against the digits kept */
    CHECK_OK(parse1("000000000000000000000000000001.5", FERRY_F64, &d));
    CHECK(d == 1.5);
    CHECK_OK(parse1("-0.000000000000000000000000000000000000000000001e45", FERRY_F32, &f));
    CHECK(f == -1);
}

TEST(int64_extremes_and_overflow)
{
    int64_t v;
    CHECK_OK(parse1("9223372036854775807", FERRY_I64, &v));
    CHECK(v == INT64_MAX);
    CHECK_OK(parse1("-9223372036854775808", FERRY_I64, &v));
    CHECK(v == INT64_MIN);
    CHECK_OK(parse1(" +0000000000000000000000042 ", FERRY_I64, &v));
    CHECK_EQ(v, 42);
    CHECK_OK(parse1("-0", FERRY_I64, &v));
    CHECK_EQ(v, 0);
    CHECK_RC(parse1("9223372036854775808", FERRY_I64, &v), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "column 1: \"9223372036854775808\" is out of range for int64");
    CHECK_RC(parse1("-9223372036854775809", FERRY_I64, &v), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "out of range for int64");
    CHECK_RC(parse1("99999999999999999999999999", FERRY_I64, &v), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "out of range for int64");
    static const char *bad[] = {"1.5", "1e3", " ", "-", "+", "0x1", "inf", "nan", "1 1", "١"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = parse1(bad[i], FERRY_I64, &v);
        if (rc != FERRY_ECORRUPT || !strstr(ferry_last_errmsg(), "is not an integer"))
            test_fail(__FILE__, __LINE__, "\"%s\": rc %d, \"%s\"", bad[i], rc, ferry_last_errmsg());
    }
    /* and through the stream, with a file and a line */
    char *dir = make_dir();
    write_part(dir, 0, "1,-9223372036854775808\n2,9223372036854775807\n3,9223372036854775808\n");
    ferry_stream *st = open_csv(dir, NULL, FERRY_I64);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    int64_t row[2];
    CHECK_OK(next_row(it, st, row));
    CHECK(row[0] == 1 && row[1] == INT64_MIN);
    CHECK_OK(next_row(it, st, row));
    CHECK(row[0] == 2 && row[1] == INT64_MAX);
    CHECK_RC(next_row(it, st, row), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(),
                   "part-00000: line 3, column 2: \"9223372036854775808\" is out of range");
    CHECK_RC(next_row(it, st, row), FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(row_parser_says_which_column_and_text)
{
    ferry_dtype dt[4] = {FERRY_F32, FERRY_I64, FERRY_DTYPE_INVALID, FERRY_F64};
    ferry_csv_parser *p;
    CHECK_OK(ferry_csv_parser_create(&p, ',', 4, dt));
    float a;
    int64_t b;
    double d;
    void *dst[4] = {&a, &b, NULL, &d};
    ferry_csv_error e;
    const char *row = " 1.5 , -7 ,skipped text, 2.25\r";
    CHECK_OK(ferry_csv_parse_row(p, row, strlen(row), dst, &e));
    CHECK(a == 1.5f && b == -7 && d == 2.25);
    row = "1,2,x,1.2.3";
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, &e), FERRY_ECORRUPT);
    CHECK_U64(e.column, 4);
    CHECK_U64(e.columns, 4);
    CHECK_U64(e.offset, 6);
    CHECK_U64(e.length, 5);
    CHECK(!strcmp(ferry_last_errmsg(), "column 4: \"1.2.3\" is not a number"));
    row = "1,  2x  ,x,3";
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, &e), FERRY_ECORRUPT);
    CHECK_U64(e.column, 2);
    CHECK_U64(e.offset, 4);
    CHECK_U64(e.length, 2);
    CHECK(!strcmp(ferry_last_errmsg(), "column 2: \"2x\" is not an integer"));
    row = "1,2,3,4,5";
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, &e), FERRY_ECORRUPT);
    CHECK_U64(e.column, 0);
    CHECK_U64(e.columns, 5);
    CHECK(!strcmp(ferry_last_errmsg(), "5 columns, expected 4"));
    row = "oops,2"; /* a wrong count is reported before a bad cell */
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, &e), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(), "2 columns, expected 4"));
    CHECK_RC(ferry_csv_parse_row(p, "", 0, dst, &e), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "0 columns, expected 4");
    CHECK_RC(ferry_csv_parse_row(p, "\r", 1, dst, NULL), FERRY_ECORRUPT);
    /* one "\r" is the line ending: "\r\r" is a row of one cell, "\r" */
    CHECK_RC(ferry_csv_parse_row(p, "\r\r", 2, dst, &e), FERRY_ECORRUPT);
    CHECK_U64(e.column, 0);
    CHECK_U64(e.columns, 1);
    CHECK(!strcmp(ferry_last_errmsg(), "1 column, expected 4"));
    CHECK_U64(ferry_csv_count_columns("\r\r", 2, ','), 1);
    /* long text is cut; bytes that do not print are shown as '?' */
    char longrow[200];
    snprintf(longrow, sizeof longrow, "1,2,3,%s",
             "12345678901234567890123456789012345678901234567890");
    longrow[7] = '\x01';
    CHECK_RC(ferry_csv_parse_row(p, longrow, strlen(longrow), dst, &e), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(),
                  "column 4: \"1?345678901234567890123456789012\"... is not a number"));
    CHECK_U64(e.length, 50);
    /* the line need not end in a NUL, and bytes past len are never read */
    char *exact = malloc(7);
    memcpy(exact, "1,2,3,4", 7);
    CHECK_OK(ferry_csv_parse_row(p, exact, 7, dst, &e));
    CHECK(d == 4);
    CHECK_RC(ferry_csv_parse_row(p, exact, 5, dst, &e), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(), "3 columns, expected 4"));
    free(exact);
    ferry_csv_parser_free(p);
    /* settings */
    CHECK_RC(ferry_csv_parser_create(&p, 'e', 4, dt), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "delimiter");
    CHECK(p == NULL);
    CHECK_RC(ferry_csv_parser_create(&p, '.', 4, dt), FERRY_EINVAL);
    CHECK_RC(ferry_csv_parser_create(&p, '\n', 4, dt), FERRY_EINVAL);
    CHECK_RC(ferry_csv_parser_create(&p, ',', 0, dt), FERRY_EINVAL);
    CHECK_RC(ferry_csv_parser_create(&p, ',', FERRY_CSV_MAX_COLS + 1, dt), FERRY_EINVAL);
    ferry_dtype u8 = FERRY_U8;
    CHECK_RC(ferry_csv_parser_create(&p, ',', 1, &u8), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "uint8");
    /* counting */
    CHECK_U64(ferry_csv_count_columns("", 0, ','), 0);
    CHECK_U64(ferry_csv_count_columns("a", 1, ','), 1);
    CHECK_U64(ferry_csv_count_columns("a,,b,\r", 6, ','), 4);
    CHECK_U64(ferry_csv_count_columns("  a \t b  ", 9, ' '), 2);
    CHECK_U64(ferry_csv_count_columns("   ", 3, ' '), 0);
}

TEST(space_and_tab_delimiters)
{
    ferry_dtype dt[3] = {FERRY_F64, FERRY_F64, FERRY_F64};
    double v[3];
    void *dst[3] = {&v[0], &v[1], &v[2]};
    ferry_csv_parser *p;
    CHECK_OK(ferry_csv_parser_create(&p, ' ', 3, dt));
    const char *row = "  1 \t 2    3  ";
    CHECK_OK(ferry_csv_parse_row(p, row, strlen(row), dst, NULL));
    CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3);
    row = "1 2x 3";
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, NULL), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(), "column 2: \"2x\" is not a number"));
    CHECK_RC(ferry_csv_parse_row(p, "   ", 3, dst, NULL), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "0 columns");
    row = "1 2 3 \r\r"; /* the second "\r" is a fourth cell */
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, NULL), FERRY_ECORRUPT);
    CHECK(!strcmp(ferry_last_errmsg(), "4 columns, expected 3"));
    ferry_csv_parser_free(p);
    CHECK_OK(ferry_csv_parser_create(&p, '\t', 3, dt));
    row = " 4 \t5\t 6";
    CHECK_OK(ferry_csv_parse_row(p, row, strlen(row), dst, NULL));
    CHECK(v[0] == 4 && v[1] == 5 && v[2] == 6);
    row = "4\t\t6"; /* a tab-separated empty cell is a cell */
    CHECK_RC(ferry_csv_parse_row(p, row, strlen(row), dst, NULL), FERRY_ECORRUPT);
    CHECK(!strncmp(ferry_last_errmsg(),
                   "column 2: \"\" is not a number: a missing value (missing=V", 56));
    ferry_csv_parser_free(p);
}

/* Sets LC_NUMERIC to a locale whose decimal point is ','. Builds one with localedef
 * in `dir` when none is installed. False when that cannot be done. */
static bool comma_locale(const char *dir)
{
    static const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8",
                                  "de_DE",       "fr_FR",      "ru_RU.UTF-8", "nl_NL.UTF-8"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (setlocale(LC_NUMERIC, names[i]) && localeconv()->decimal_point[0] == ',')
            return true;
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "localedef -i de_DE -f UTF-8 '%s/de_DE.UTF-8' >/dev/null 2>&1 || true", dir);
    if (system(cmd) == -1)
        return false;
    setenv("LOCPATH", dir, 1);
    return setlocale(LC_NUMERIC, "de_DE.UTF-8") && localeconv()->decimal_point[0] == ',';
}

TEST(numbers_do_not_depend_on_the_locale)
{
    char *dir = make_dir();
    char *locdir = make_dir();
    write_part(dir, 0, "1.5;-2.25e1;3\n0.1;1e-3;7\n");
    if (!comma_locale(locdir)) {
        printf("note: no locale with a ',' decimal point is installed or can be built; "
               "checked in the C locale only\n");
    } else {
        CHECK(strtod("1.5", NULL) == 1.0); /* the process's locale really is in effect */
        char buf[32];
        snprintf(buf, sizeof buf, "%.1f", 1.5);
        CHECK(!strcmp(buf, "1,5"));
    }
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.delim = ';';
    o.fields = "a:0-1:f64;b:2:i64";
    ferry_stream *st;
    CHECK_OK(ferry_stream_csv(&st, &o));
    struct {
        double a[2];
        int64_t b;
    } rows[2];
    CHECK_U64(read_shard(st, 0, 1, rows, 2), 2);
    CHECK(rows[0].a[0] == 1.5 && rows[0].a[1] == -22.5 && rows[0].b == 3);
    CHECK(rows[1].a[0] == 0.1 && rows[1].a[1] == 1e-3 && rows[1].b == 7);
    ferry_stream_free(st);
    float f;
    CHECK_OK(parse1("0.30000001", FERRY_F32, &f));
    CHECK(f == 0.30000001f);
    CHECK_RC(parse1("1,5", FERRY_F32, &f), FERRY_ECORRUPT); /* never the locale's comma */
    setlocale(LC_NUMERIC, "C");
    remove_dir(locdir);
    remove_dir(dir);
}

/* ---- the stream ---- */

TEST(fields_split_columns_with_shapes_and_dtypes)
{
    char *dir = make_dir();
    write_part(dir, 0, "0.5,1.5,2.5,10\n-1,-2,-3,-20\n");
    ferry_stream *st = open_csv(dir, "x:0-2;y:3:i64", FERRY_F32);
    CHECK_EQ(ferry_stream_nfields(st), 2);
    const ferry_field *x = ferry_stream_field(st, 0), *y = ferry_stream_field(st, 1);
    CHECK(!strcmp(x->name, "x"));
    CHECK_EQ(x->dtype, FERRY_F32);
    CHECK_EQ(x->ndim, 1);
    CHECK_EQ(x->shape[0], 3);
    CHECK(!x->variable);
    CHECK(!strcmp(y->name, "y"));
    CHECK_EQ(y->dtype, FERRY_I64);
    CHECK_EQ(y->ndim, 0);
    struct __attribute__((packed)) {
        float x[3];
        int64_t y;
    } rows[2];
    CHECK_EQ(layout_of(st).row, sizeof rows[0]);
    CHECK_U64(read_shard(st, 0, 1, rows, 2), 2);
    CHECK(rows[0].x[0] == 0.5f && rows[0].x[1] == 1.5f && rows[0].x[2] == 2.5f);
    CHECK_EQ(rows[0].y, 10);
    CHECK(rows[1].x[0] == -1 && rows[1].x[2] == -3);
    CHECK_EQ(rows[1].y, -20);
    ferry_stream_free(st);

    /* any order, a range of one, columns left out are not parsed, numpy dtype names */
    write_part(dir, 1, "1,2,not a number,4\n");
    st = open_csv(dir, "late:3:float64;early:0-0", FERRY_I64);
    CHECK_EQ(ferry_stream_field(st, 0)->dtype, FERRY_F64);
    CHECK_EQ(ferry_stream_field(st, 0)->ndim, 0);
    CHECK_EQ(ferry_stream_field(st, 1)->dtype, FERRY_I64);
    CHECK_EQ(ferry_stream_field(st, 1)->ndim, 1);
    CHECK_EQ(ferry_stream_field(st, 1)->shape[0], 1);
    ferry_stream_free(st);
    /* part 0's second column is not an integer for an i64 field */
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    static const struct {
        const char *fields, *says;
    } bad[] = {
        {"x:0-4", "column 4 is past the last column (4 columns"},
        {"x:0-1;y:1", "column 1 is in both fields \"x\" and \"y\""},
        {"x:0;x:1", "\"x\" appears twice"},
        {"x:2-1", "run backwards"},
        {"x:a", "COL or FIRST-LAST"},
        {"x:-1", "COL or FIRST-LAST"},
        {"x:1-", "COL or FIRST-LAST"},
        {"x", "NAME:COL"},
        {":1", "a name must be"},
        {"x:1:u8", "dtype \"u8\" is not"},
        {"x:1;", "empty item"},
        {"", "fields is empty"},
        {"a:0;b:1;c:2;d:3;e:0;f:0;g:0;h:0;i:0;j:0;k:0;l:0;m:0;n:0;o:0;p:0;q:0;r:0;s:0;t:0;"
         "u:0;v:0;w:0;x:0;y:0;z:0;A:0;B:0;C:0;D:0;E:0;F:0;G:0",
         "more than 32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o.fields = bad[i].fields;
        int rc = open_err(dir, &o);
        if (rc != FERRY_EINVAL || !strstr(ferry_last_errmsg(), bad[i].says))
            test_fail(__FILE__, __LINE__, "%s: rc %d, \"%s\" lacks \"%s\"", bad[i].fields, rc,
                      ferry_last_errmsg(), bad[i].says);
    }
    remove_dir(dir);
}

TEST(header_is_skipped_in_every_part)
{
    char *dir = make_dir();
    write_part(dir, 0, "a,b\n1,2\n3,4\n");
    write_part(dir, 1, "a,b\n");        /* a header and no rows */
    write_part(dir, 2, "");             /* not even a header */
    write_part(dir, 3, "a,b,c,d\n5,6"); /* the header's count does not matter */
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.header = 1;
    o.dtype = FERRY_I64;
    ferry_stream *st;
    CHECK_OK(ferry_stream_csv(&st, &o));
    CHECK_EQ(ferry_stream_field(st, 0)->shape[0], 2); /* from the first data row */
    int64_t rows[3][2];
    CHECK_U64(read_shard(st, 0, 1, rows, 3), 3);
    CHECK(rows[0][0] == 1 && rows[1][1] == 4 && rows[2][0] == 5 && rows[2][1] == 6);
    ferry_stream_free(st);
    /* without header=1 the header is a bad row */
    o.header = 0;
    o.cols = 2;
    CHECK_OK(ferry_stream_csv(&st, &o));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    CHECK_RC(next_row(it, st, rows[0]), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: line 1, column 1: \"a\" is not an integer");
    CHECK_OK(next_row(it, st, rows[0]));
    CHECK_EQ(rows[0][0], 1);
    ferry_stream_close(it);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(crlf_and_a_missing_final_newline)
{
    char *dir = make_dir();
    write_part(dir, 0, "1,2\r\n3,4\r\n");
    write_part(dir, 1, "5,6\n7,8");        /* no final newline */
    write_part(dir, 2, "9,10\r\n11,12\r"); /* a final CR alone */
    ferry_stream *st = open_csv(dir, NULL, FERRY_F64);
    double rows[6][2];
    CHECK_U64(read_shard(st, 0, 1, rows, 6), 6);
    for (int i = 0; i < 6; i++)
        CHECK(rows[i][0] == 2 * i + 1 && rows[i][1] == 2 * i + 2);
    ferry_stream_free(st);
    /* an empty line within a file is an error; the next call goes on */
    write_part(dir, 1, "5,6\n\n7,8\n");
    st = open_csv(dir, NULL, FERRY_F64);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 1, 3, 0, &it));
    CHECK_OK(next_row(it, st, rows[0]));
    CHECK_RC(next_row(it, st, rows[0]), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001: line 2: 0 columns, expected 2");
    CHECK_OK(next_row(it, st, rows[0]));
    CHECK(rows[0][0] == 7);
    CHECK_RC(next_row(it, st, rows[0]), FERRY_END);
    CHECK_RC(next_row(it, st, rows[0]), FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(shards_cover_every_row_once)
{
    char *dir = make_dir();
    enum { PARTS = 7 };
    int64_t total = 0;
    for (int p = 0; p < PARTS; p++) {
        tbuf t = {0};
        int rows = p == 3 ? 0 : 5 + p * 3; /* one empty part */
        for (int i = 0; i < rows; i++)
            add(&t, "%lld,%d\n", (long long)total++, p);
        write_part(dir, p, t.p ? t.p : "");
        free(t.p);
    }
    ferry_stream *st = open_csv(dir, "id:0:i64;part:1:i64", FERRY_F32);
    int64_t(*rows)[2] = malloc((size_t)total * sizeof *rows);
    CHECK(rows != NULL);
    for (uint64_t n = 1; n <= 3; n++) {
        uint8_t *seen = calloc((size_t)total, 1);
        size_t sum = 0;
        for (uint64_t k = 0; k < n; k++) {
            size_t got = read_shard(st, k, n, rows, (size_t)total);
            int64_t last = -1;
            for (size_t i = 0; i < got; i++) {
                CHECK(rows[i][0] >= 0 && rows[i][0] < total);
                CHECK_U64((uint64_t)rows[i][1] % n, k); /* shard k reads parts i % n == k */
                CHECK(rows[i][0] > last);               /* in file order */
                last = rows[i][0];
                seen[rows[i][0]]++;
            }
            sum += got;
        }
        CHECK_U64(sum, (uint64_t)total);
        for (int64_t i = 0; i < total; i++)
            CHECK_EQ(seen[i], 1);
        free(seen);
    }
    /* more shards than parts: the extra ones are empty */
    CHECK_U64(read_shard(st, 8, 9, rows, (size_t)total), 0);
    /* the epoch does not change the order */
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 5, &it));
    int64_t r[2];
    CHECK_OK(next_row(it, st, r));
    CHECK_EQ(r[0], 0);
    ferry_stream_close(it);
    free(rows);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(prefix_digits_and_suffix)
{
    char *dir = make_dir();
    write_text(dir, "data_000.csv", "0\n");
    write_text(dir, "data_001.csv", "1\n");
    write_text(dir, "data_002.csv", "2\n");
    write_text(dir, "data_0003.csv", "99\n");    /* not what %03u writes: ignored */
    write_text(dir, "data_003.csv.bak", "99\n"); /* another suffix */
    write_text(dir, "data_00x.csv", "99\n");
    write_text(dir, "README", "hello\n");
    write_text(dir, "part-00000", "99\n");
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/subdir", dir);
    CHECK(mkdir(sub, 0700) == 0);
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.prefix = "data_";
    o.digits = 3;
    o.suffix = ".csv";
    o.dtype = FERRY_I64;
    ferry_stream *st;
    CHECK_OK(ferry_stream_csv(&st, &o));
    int64_t v[4];
    CHECK_U64(read_shard(st, 0, 1, v, 4), 3);
    CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2);
    ferry_stream_free(st);
    /* numbers wider than the digits; an empty prefix */
    char *d2 = make_dir();
    for (int i = 0; i < 12; i++) {
        char name[16], row[16];
        snprintf(name, sizeof name, "%d", i);
        snprintf(row, sizeof row, "%d\n", i);
        write_text(d2, name, row);
    }
    ferry_csv_opts_default(&o);
    o.dir = d2;
    o.prefix = "";
    o.digits = 1;
    o.dtype = FERRY_I64;
    CHECK_OK(ferry_stream_csv(&st, &o));
    int64_t w[12];
    CHECK_U64(read_shard(st, 0, 1, w, 12), 12);
    for (int i = 0; i < 12; i++)
        CHECK_EQ(w[i], i); /* numeric order: 10 after 9 */
    ferry_stream_free(st);
    remove_dir(d2);
    remove_dir(dir);
}

TEST(bad_cell_names_file_line_column_and_text)
{
    char *dir = make_dir();
    for (int p = 0; p < 4; p++) {
        tbuf t = {0};
        for (int i = 1; i <= 20; i++)
            add(&t, "%d,%d,%d,%s,%d\n", p, i, 0, p == 3 && i == 17 ? " 1.2.3 " : "4.5", 5);
        write_part(dir, p, t.p);
        free(t.p);
    }
    ferry_stream *st = open_csv(dir, NULL, FERRY_F32);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 1, 2, 0, &it)); /* parts 1 and 3 */
    float row[5];
    int rc, n = 0;
    while ((rc = next_row(it, st, row)) == 0)
        n++;
    CHECK_EQ(n, 20 + 16);
    CHECK_RC(rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00003: line 17, column 4: \"1.2.3\" is not a number");
    CHECK_CONTAINS(ferry_last_errmsg(), dir);
    /* a skip policy goes on with the next row */
    CHECK_OK(next_row(it, st, row));
    CHECK(row[0] == 3 && row[1] == 18);
    while ((rc = next_row(it, st, row)) == 0)
        n++;
    CHECK_RC(rc, FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(wrong_column_count_names_file_and_line)
{
    char *dir = make_dir();
    write_part(dir, 0, "1,2,3,4\n");
    write_part(dir, 1,
               "1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n"
               "1,2,3,4\n1,2,3,4,5\n1,2,3\n1,2,3,4\n");
    ferry_stream *st = open_csv(dir, NULL, FERRY_F32);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 1, 2, 0, &it));
    float row[4];
    for (int i = 0; i < 8; i++)
        CHECK_OK(next_row(it, st, row));
    CHECK_RC(next_row(it, st, row), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001: line 9: 5 columns, expected 4");
    CHECK_RC(next_row(it, st, row), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001: line 10: 3 columns, expected 4");
    CHECK_OK(next_row(it, st, row));
    CHECK_RC(next_row(it, st, row), FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    /* cols= that does not match the file */
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.cols = 3;
    CHECK_OK(ferry_stream_csv(&st, &o));
    CHECK_EQ(ferry_stream_field(st, 0)->shape[0], 3);
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    CHECK_RC(next_row(it, st, row), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: line 1: 4 columns, expected 3");
    ferry_stream_close(it);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(missing_part_is_named)
{
    char *dir = make_dir();
    write_part(dir, 0, "1\n");
    write_part(dir, 2, "1\n");
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    CHECK_RC(open_err(dir, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001 is missing");
    CHECK_CONTAINS(ferry_last_errmsg(), dir);
    write_part(dir, 1, "1\n");
    char p[1024];
    snprintf(p, sizeof p, "%s/part-00000", dir);
    CHECK(unlink(p) == 0);
    CHECK_RC(open_err(dir, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000 is missing");
    remove_dir(dir);
}

TEST(empty_or_missing_directory)
{
    char *dir = make_dir();
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    CHECK_RC(open_err(dir, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), dir);
    CHECK_CONTAINS(ferry_last_errmsg(), "no part files named part-NNNNN");
    write_text(dir, "other.csv", "1\n");
    o.suffix = ".csv";
    CHECK_RC(open_err(dir, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-NNNNN.csv");
    char gone[1024];
    snprintf(gone, sizeof gone, "%s/nonexistent", dir);
    CHECK_RC(open_err(gone, &o), FERRY_ENOENT);
    CHECK_CONTAINS(ferry_last_errmsg(), gone);
    CHECK_CONTAINS(ferry_last_errmsg(), "cannot open the directory");
    /* a file, not a directory: read as the only part */
    snprintf(gone, sizeof gone, "%s/other.csv", dir);
    o.dir = gone;
    ferry_stream *one = NULL;
    CHECK_OK(ferry_stream_csv(&one, &o));
    float x;
    CHECK_EQ(read_shard(one, 0, 1, &x, 1), 1);
    CHECK(x == 1.0f);
    ferry_stream_free(one);
    CHECK_RC(open_err("/dev/null", &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "neither a directory of part files nor a file");
    /* a part 0 with no data row cannot give the column count */
    o.suffix = "";
    write_part(dir, 0, "");
    CHECK_RC(open_err(dir, &o), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: no data row");
    write_part(dir, 0, "\n1\n");
    CHECK_RC(open_err(dir, &o), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "line 1: 0 columns");
    remove_dir(dir);
}

TEST(line_longer_than_the_limit)
{
    char *dir = make_dir();
    size_t max = FERRY_CSV_MAX_LINE;
    /* a line of exactly the limit (blanks around one number), with CRLF, is fine */
    char *big = malloc(max + 64);
    memset(big, ' ', max);
    big[max - 1] = '7';
    memcpy(big + max, "\r\n8\n", 4);
    write_bytes(dir, "part-00000", big, max + 4);
    /* one byte more is not: that line is one bad row, and the rows after it are read */
    memset(big, ' ', max + 1);
    big[0] = '1';
    memcpy(big + max + 1, "\n9\n", 3);
    char head[] = "5\n";
    char *p1 = malloc(max + 16);
    memcpy(p1, head, 2);
    memcpy(p1 + 2, big, max + 4);
    write_bytes(dir, "part-00001", p1, max + 6);
    write_part(dir, 2, "6\n");
    /* and a file that ends inside a long line */
    write_bytes(dir, "part-00003", big, max + 1);
    ferry_stream *st = open_csv(dir, NULL, FERRY_I64);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    int64_t v;
    CHECK_OK(next_row(it, st, &v));
    CHECK_EQ(v, 7);
    CHECK_OK(next_row(it, st, &v));
    CHECK_EQ(v, 8);
    CHECK_OK(next_row(it, st, &v));
    CHECK_EQ(v, 5);
    CHECK_RC(next_row(it, st, &v), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00001: line 2: longer than 1048576 bytes (skipped)");
    CHECK_OK(next_row(it, st, &v));
    CHECK_EQ(v, 9);
    CHECK_OK(next_row(it, st, &v));
    CHECK_EQ(v, 6);
    CHECK_RC(next_row(it, st, &v), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00003: line 1: longer than");
    CHECK_RC(next_row(it, st, &v), FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    /* no newline at all in more than the buffer */
    memset(big, '1', max + 40);
    write_bytes(dir, "part-00000", big, max + 40);
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    CHECK_RC(open_err(dir, &o), FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "line 1: longer than");
    free(big);
    free(p1);
    remove_dir(dir);
}

TEST(settings_are_checked)
{
    char *dir = make_dir();
    write_part(dir, 0, "1,2\n");
    static const struct {
        const char *prefix, *suffix;
        uint32_t digits;
        char delim;
        ferry_dtype dt;
        uint64_t cols;
        const char *says;
    } bad[] = {
        {"a/b", NULL, 0, 0, 0, 0, "prefix \"a/b\" holds a '/'"},
        {NULL, "/x", 0, 0, 0, 0, "suffix"},
        {NULL, NULL, 19, 0, 0, 0, "digits 19 is outside [1, 18]"},
        {NULL, NULL, 0, 'e', 0, 0, "delimiter 0x65"},
        {NULL, NULL, 0, '7', 0, 0, "delimiter"},
        {NULL, NULL, 0, '\n', 0, 0, "delimiter"},
        {NULL, NULL, 0, 0, FERRY_U8, 0, "dtype uint8"},
        {NULL, NULL, 0, 0, 0, FERRY_CSV_MAX_COLS + 1, "cols 1048577"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ferry_csv_opts o;
        ferry_csv_opts_default(&o);
        if (bad[i].prefix)
            o.prefix = bad[i].prefix;
        if (bad[i].suffix)
            o.suffix = bad[i].suffix;
        if (bad[i].digits)
            o.digits = bad[i].digits;
        if (bad[i].delim)
            o.delim = bad[i].delim;
        if (bad[i].dt)
            o.dtype = bad[i].dt;
        o.cols = bad[i].cols;
        int rc = open_err(dir, &o);
        if (rc != FERRY_EINVAL || !strstr(ferry_last_errmsg(), bad[i].says))
            test_fail(__FILE__, __LINE__, "case %zu: rc %d, \"%s\" lacks \"%s\"", i, rc,
                      ferry_last_errmsg(), bad[i].says);
    }
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    ferry_stream *st = (ferry_stream *)1;
    CHECK_RC(ferry_stream_csv(&st, &o), FERRY_EINVAL); /* no dir */
    CHECK(st == NULL);
    CHECK_CONTAINS(ferry_last_errmsg(), "dir is NULL");
    /* zeroed settings mean the defaults */
    memset(&o, 0, sizeof o);
    o.dir = dir;
    CHECK_OK(ferry_stream_csv(&st, &o));
    CHECK_EQ(ferry_stream_field(st, 0)->dtype, FERRY_F32);
    CHECK_EQ(ferry_stream_field(st, 0)->shape[0], 2);
    ferry_stream_free(st);
    remove_dir(dir);
}

/* Opens "csv:<dir><rest>" through the description parser. */
static int open_spec(const char *dir, const char *rest, ferry_stream **st)
{
    char spec[2048];
    snprintf(spec, sizeof spec, "csv:%s%s", dir, rest);
    ferry__spec s;
    int rc = ferry__spec_parse(&s, spec);
    if (rc < 0)
        return rc;
    return ferry__csv_open_spec(NULL, st, &s);
}

TEST(source_description)
{
    char *dir = make_dir();
    write_text(dir, "p_0.txt", "id,x,y\n1,2.5,3.5\n2,4.5,5.5\n");
    ferry_stream *st;
    CHECK_OK(open_spec(dir,
                       ",prefix=p_,digits=1,suffix=.txt,delim=,,header=1,dtype=f64,"
                       "fields=id:0:i64;xy:1-2",
                       &st));
    CHECK_EQ(ferry_stream_nfields(st), 2);
    CHECK_EQ(ferry_stream_field(st, 1)->dtype, FERRY_F64);
    struct {
        int64_t id;
        double xy[2];
    } rows[2];
    CHECK_U64(read_shard(st, 0, 1, rows, 2), 2);
    CHECK(rows[1].id == 2 && rows[1].xy[0] == 4.5 && rows[1].xy[1] == 5.5);
    ferry_stream_free(st);
    /* delim=, at the end, and the named delimiters */
    write_part(dir, 0, "1,2\n");
    CHECK_OK(open_spec(dir, ",cols=2,delim=,", &st));
    ferry_stream_free(st);
    write_part(dir, 0, "1\t2\t3\n");
    CHECK_OK(open_spec(dir, ",delim=tab,dtype=int64", &st));
    CHECK_EQ(ferry_stream_field(st, 0)->shape[0], 3);
    CHECK_EQ(ferry_stream_field(st, 0)->dtype, FERRY_I64);
    ferry_stream_free(st);
    static const struct {
        const char *name, *row;
    } named[] = {{"comma", "1,2"}, {"semicolon", "1;2"}, {"space", " 1   2 "}, {"pipe", "1|2"},
                 {"|", "1|2"},     {":", "1:2"},         {"tab", "1\t2"},      {";", "1;2"}};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        char row[32], opt[64];
        snprintf(row, sizeof row, "%s\n", named[i].row);
        write_part(dir, 0, row);
        snprintf(opt, sizeof opt, ",delim=%s", named[i].name);
        CHECK_OK(open_spec(dir, opt, &st));
        float v[2];
        CHECK_U64(read_shard(st, 0, 1, v, 1), 1);
        CHECK(v[0] == 1 && v[1] == 2);
        ferry_stream_free(st);
    }
    static const struct {
        const char *rest, *says;
    } bad[] = {
        {",colour=red", "unknown option \"colour\""},
        {",delim=ab", "delim=\"ab\""},
        {",delim=e", "delim=\"e\""},
        {",delim=5", "delim=\"5\""},
        {",dtype=u8", "dtype=\"u8\""},
        {",digits=0", "digits=\"0\""},
        {",cols=0", "cols=\"0\""},
        {",cols=2000000", "cols=\"2000000\""},
        {",header=maybe", "header=\"maybe\""},
        {",fields=x:9", "column 9 is past the last column"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        st = (ferry_stream *)1;
        int rc = open_spec(dir, bad[i].rest, &st);
        CHECK(st == NULL);
        if (rc != FERRY_EINVAL || !strstr(ferry_last_errmsg(), bad[i].says))
            test_fail(__FILE__, __LINE__, "%s: rc %d, \"%s\" lacks \"%s\"", bad[i].rest, rc,
                      ferry_last_errmsg(), bad[i].says);
    }
    ferry__spec s;
    CHECK_OK(ferry__spec_parse(&s, "csv:"));
    st = (ferry_stream *)1;
    CHECK_RC(ferry__csv_open_spec(NULL, &st, &s), FERRY_EINVAL);
    CHECK(st == NULL);
    remove_dir(dir);
}

TEST(allocation_failures_are_returned)
{
    char *dir = make_dir();
    write_part(dir, 0, "1,2,3\n4,5,6\n");
    write_part(dir, 1, "7,8,9\n");
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.fields = "a:0-1;b:2:i64";
    ferry_stream *st = NULL;
    int fails = 0;
    for (long n = 0;; n++) {
        CHECK(n < 1000);
        st = (ferry_stream *)1;
        ferry__test_fail_alloc(n);
        int rc = ferry_stream_csv(&st, &o);
        ferry__test_fail_alloc(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(st == NULL);
        fails++;
    }
    CHECK(fails >= 8);
    ferry_stream_iter *it;
    for (long n = 0;; n++) {
        CHECK(n < 100);
        it = (ferry_stream_iter *)1;
        ferry__test_fail_alloc(n);
        int rc = ferry_stream_open(st, 0, 1, 0, &it);
        ferry__test_fail_alloc(-1);
        if (rc == 0)
            break;
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(it == NULL);
    }
    struct {
        float a[2];
        int64_t b;
    } row;
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    void *dst[2] = {row.a, &row.b};
    int64_t lens[2];
    ferry_sample sample = {2, dst, lens, {0}};
    ferry__test_fail_alloc(0); /* reading rows allocates nothing */
    CHECK_OK(ferry_stream_next(it, &sample, ctx));
    ferry__test_fail_alloc(-1);
    ferry_ctx_free(ctx);
    CHECK(row.a[1] == 2 && row.b == 3);
    ferry_stream_close(it);
    ferry_stream_free(st);
    /* the parser too */
    ferry_dtype dt[2] = {FERRY_F32, FERRY_F32};
    for (long n = 0;; n++) {
        ferry_csv_parser *p = (ferry_csv_parser *)1;
        ferry__test_fail_alloc(n);
        int rc = ferry_csv_parser_create(&p, ',', 2, dt);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            ferry_csv_parser_free(p);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        CHECK(p == NULL);
    }
    remove_dir(dir);
}

TEST(loader_reads_every_row_once)
{
    char *dir = make_dir();
    enum { PARTS = 5 };
    int64_t total = 0;
    for (int p = 0; p < PARTS; p++) {
        tbuf t = {0};
        for (int i = 0; i < 37 + p * 11; i++, total++)
            add(&t, "%lld,%.9g,%.9g\n", (long long)total, (double)total * 0.5, -(double)total);
        write_part(dir, p, t.p);
        free(t.p);
    }
    ferry_stream *st = open_csv(dir, "id:0:i64;v:1-2", FERRY_F32);
    ferry_loader_opts o = test_stream_opts(8, 2, 2);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    uint8_t *seen = calloc((size_t)total, 1);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, (size_t)total);
        CHECK_OK(ferry_loader_start(l, epoch, 0));
        ferry_batch *b;
        int rc;
        int64_t n = 0;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            ferry_tensor id, v;
            CHECK_OK(ferry_batch_field(b, 0, &id));
            CHECK_OK(ferry_batch_field(b, 1, &v));
            CHECK_EQ(id.ndim, 1);
            CHECK_EQ(v.ndim, 2);
            CHECK_EQ(v.shape[1], 2);
            for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
                int64_t k = ((int64_t *)id.data)[i];
                CHECK(k >= 0 && k < total);
                CHECK(((float *)v.data)[2 * i] == (float)k * 0.5f);
                CHECK(((float *)v.data)[2 * i + 1] == -(float)k);
                seen[k]++;
                n++;
            }
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_EQ(n, total);
        for (int64_t k = 0; k < total; k++)
            CHECK_EQ(seen[k], 1);
    }
    free(seen);
    ferry_loader_free(l);
    ferry_stream_free(st);
    remove_dir(dir);
}

/* Batches of a class-sorted CSV that hold more than one class, out of all batches;
 * every row must come once. */
static void class_mix(const char *spec, int *mixed, int *batches)
{
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    CHECK_OK(ferry_source_open(spec, &ds, &st));
    CHECK(ds == NULL && st != NULL);
    ferry_loader_opts o = test_stream_opts(50, 2, 1);
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    uint8_t seen[2000] = {0};
    ferry_batch *b;
    int rc;
    *mixed = *batches = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor id, cls;
        CHECK_OK(ferry_batch_field(b, 0, &id));
        CHECK_OK(ferry_batch_field(b, 1, &cls));
        const int64_t *ids = id.data, *c = cls.data;
        bool m = false;
        for (uint32_t i = 0; i < ferry_batch_size(b); i++) {
            CHECK(ids[i] >= 0 && ids[i] < 2000);
            CHECK_EQ(c[i], ids[i] / 500);
            seen[ids[i]]++;
            m |= c[i] != c[0];
        }
        *mixed += m;
        (*batches)++;
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    for (int i = 0; i < 2000; i++)
        CHECK_EQ(seen[i], 1);
    ferry_loader_free(l);
    ferry_stream_free(st);
}

TEST(shuffle_key_mixes_a_class_sorted_file)
{
    char *dir = make_dir();
    tbuf t = {0};
    for (int i = 0; i < 2000; i++)
        add(&t, "%d,%d\n", i, i / 500); /* 4 classes, one after the other */
    write_part(dir, 0, t.p);
    free(t.p);
    char spec[1200];
    int mixed, batches;
    snprintf(spec, sizeof spec, "csv:%s,dtype=i64,fields=id:0;label:1", dir);
    class_mix(spec, &mixed, &batches);
    CHECK_EQ(batches, 40);
    CHECK_EQ(mixed, 0); /* file order: one class per batch */
    snprintf(spec, sizeof spec, "csv:%s,dtype=i64,fields=id:0;label:1,shuffle=1000,seed=5", dir);
    class_mix(spec, &mixed, &batches);
    CHECK_EQ(batches, 40);
    CHECK(mixed >= 32); /* all but the drained tail of the last class */
    /* shuffle= on a map-style source says what to do instead */
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    CHECK_RC(ferry_source_open("synthetic:10,shuffle=4", &ds, &st), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shuffle= is for streams");
    CHECK(ds == NULL && st == NULL);
    snprintf(spec, sizeof spec, "csv:%s,shuffle=0", dir);
    CHECK_RC(ferry_source_open(spec, &ds, &st), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "shuffle=\"0\" is not a number in [1, 16777216]");
    remove_dir(dir);
}

TEST(a_long_line_is_one_bad_row)
{
    /* a line of 3 MiB, far over the buffer, between good rows: it is one bad row, and
     * the 1000 rows after it are all read; the loader's skip count is 1 */
    char *dir = make_dir();
    tbuf t = {0};
    add(&t, "-1\n-2\n");
    size_t at = t.n, big = (size_t)3 << 20;
    for (size_t i = 0; i < big; i += 1024)
        add(&t, "%01024d", 7);
    add(&t, "\n");
    CHECK(t.n - at > big);
    for (int i = 0; i < 1000; i++)
        add(&t, "%d\n", i);
    write_bytes(dir, "part-00000", t.p, t.n);
    free(t.p);
    ferry_stream *st = open_csv(dir, NULL, FERRY_I64);
    ferry_loader_opts o = test_stream_opts(64, 2, 1);
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = 5;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    ferry_batch *b;
    int rc;
    int64_t n = 0, sum = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor x;
        CHECK_OK(ferry_batch_field(b, 0, &x));
        for (uint32_t i = 0; i < ferry_batch_size(b); i++, n++)
            sum += ((int64_t *)x.data)[i];
        ferry_batch_release(b);
    }
    CHECK_RC(rc, FERRY_END);
    CHECK_EQ(n, 1002);
    CHECK_EQ(sum, 999 * 1000 / 2 - 3);
    ferry_loader_stats s;
    CHECK_OK(ferry_loader_stats_get(l, &s));
    CHECK_U64(s.skipped, 1);
    ferry_loader_free(l);
    ferry_stream_free(st);
    remove_dir(dir);
}

TEST(header_count_and_missing_values)
{
    char *dir = make_dir();
    write_part(dir, 0, "# written by a tool\nx,y,label\n1.5,,3\nNA,2,NA\n  ,  N/A ,7\n");
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.header = 2;
    o.fields = "x:0-1;label:2:i64";
    ferry_stream *st = NULL;
    CHECK_OK(ferry_stream_csv(&st, &o));
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    struct {
        float x[2];
        int64_t label;
    } row;
    CHECK_RC(next_row(it, st, &row), FERRY_ECORRUPT); /* missing cells are errors by default */
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: line 3, column 2");
    ferry_stream_close(it);
    ferry_stream_free(st);
    o.missing = "-1";
    CHECK_OK(ferry_stream_csv(&st, &o));
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    CHECK_OK(next_row(it, st, &row));
    CHECK(row.x[0] == 1.5f && row.x[1] == -1.0f && row.label == 3);
    CHECK_OK(next_row(it, st, &row));
    CHECK(row.x[0] == -1.0f && row.x[1] == 2.0f && row.label == -1);
    CHECK_OK(next_row(it, st, &row));
    CHECK(row.x[0] == -1.0f && row.x[1] == -1.0f && row.label == 7);
    CHECK_RC(next_row(it, st, &row), FERRY_END);
    ferry_stream_close(it);
    ferry_stream_free(st);
    /* a fill that is not a number of some column's type */
    o.missing = "nan";
    CHECK_RC(open_err(dir, &o), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "missing=\"nan\" is not a number for the int64 columns");
    /* the source text: header=N, missing=V */
    ferry_dataset *ds = NULL;
    char spec[1200];
    snprintf(spec, sizeof spec, "csv:%s,header=2,fields=x:0-1;label:2:i64,missing=0", dir);
    CHECK_OK(ferry_source_open(spec, &ds, &st));
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    CHECK_OK(next_row(it, st, &row));
    CHECK(row.x[1] == 0.0f);
    ferry_stream_close(it);
    ferry_stream_free(st);
    snprintf(spec, sizeof spec, "csv:%s,header=x", dir);
    CHECK_RC(ferry_source_open(spec, &ds, &st), FERRY_EINVAL);
    CHECK_CONTAINS(ferry_last_errmsg(), "header=\"x\" is not a count of lines");
    remove_dir(dir);
}

/* data as a gzip member (zlib's deflate with a gzip wrapper), appended to t. */
static void add_gzip(tbuf *t, const void *data, size_t n)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&zs, (uLong)n) + 64;
    if (t->cap < t->n + cap) {
        t->cap = t->n + cap;
        t->p = realloc(t->p, t->cap);
        CHECK(t->p != NULL);
    }
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = (Bytef *)t->p + t->n;
    zs.avail_out = (uInt)cap;
    CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    t->n += cap - zs.avail_out;
    deflateEnd(&zs);
}

TEST(gzip_and_zstd_parts_are_read_as_text)
{
    char *dir = make_dir();
    tbuf plain = {0};
    for (int i = 0; i < 50000; i++) /* several of the decoder's input buffers */
        add(&plain, "%d,%d.5\n", i, i % 7);
    /* part 0: gzip in two members (as `cat a.gz b.gz` makes); part 1: zstd; part 2 plain */
    tbuf gz = {0};
    add_gzip(&gz, plain.p, plain.n / 2 + 3); /* the cut falls inside a line */
    add_gzip(&gz, plain.p + plain.n / 2 + 3, plain.n - plain.n / 2 - 3);
    write_bytes(dir, "part-00000", gz.p, gz.n);
    size_t zcap = ZSTD_compressBound(plain.n);
    char *zs = malloc(zcap);
    size_t zn = ZSTD_compress(zs, zcap, plain.p, plain.n, 3);
    CHECK(!ZSTD_isError(zn));
    write_bytes(dir, "part-00001", zs, zn);
    write_bytes(dir, "part-00002", plain.p, plain.n);
    ferry_stream *st = open_csv(dir, "a:0:i64;b:1:f64", FERRY_F32);
    struct {
        int64_t a;
        double b;
    } *rows = malloc(50000 * sizeof *rows);
    for (uint64_t k = 0; k < 3; k++) {
        CHECK_EQ(read_shard(st, k, 3, rows, 50000), 50000);
        for (int i = 0; i < 50000; i++)
            if (rows[i].a != i || rows[i].b != i % 7 + 0.5)
                test_fail(__FILE__, __LINE__, "part %d row %d: %lld %g", (int)k, i,
                          (long long)rows[i].a, rows[i].b);
    }
    ferry_stream_free(st);
    /* the column count is taken from a compressed part 0 too */
    st = open_csv(dir, NULL, FERRY_F64);
    CHECK_EQ(ferry_stream_field(st, 0)->shape[0], 2);
    ferry_stream_free(st);
    /* a truncated gzip part: an error naming the file, then the next part */
    write_bytes(dir, "part-00000", gz.p, gz.n / 3);
    st = open_csv(dir, "a:0:i64;b:1:f64", FERRY_F32);
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(st, 0, 1, 0, &it));
    int rc, good = 0;
    while ((rc = next_row(it, st, rows)) == 0)
        good++;
    CHECK(good > 0 && good < 50000);
    CHECK_RC(rc, FERRY_ECORRUPT);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: the gzip stream ends early");
    CHECK_OK(next_row(it, st, rows)); /* part 1 */
    CHECK_EQ(rows[0].a, 0);
    ferry_stream_close(it);
    ferry_stream_free(st);
    /* xz is named, with what to do */
    write_bytes(dir, "part-00000",
                "\xfd"
                "7zXZ\0\0\0",
                8);
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    CHECK_RC(open_err(dir, &o), FERRY_ENOTSUP);
    CHECK_CONTAINS(ferry_last_errmsg(), "part-00000: the file is xz-compressed");
    CHECK_CONTAINS(ferry_last_errmsg(), "unxz -k");
    free(rows);
    free(zs);
    free(gz.p);
    free(plain.p);
    remove_dir(dir);
}
