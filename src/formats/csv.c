/*
 * Numeric CSV rows: one pass over the line that checks each cell's syntax itself
 * and converts it. Decimals of up to 15-16 digits with moderate exponents (the common
 * case, and "%.9g" floats) take Clinger's exact fast path through a double; the rest
 * go to strtod_l / strtof_l under a "C" locale owned by the parser, so the result is
 * correctly rounded whatever LC_NUMERIC says. Checking the syntax first
 * keeps the libc call from accepting more than the format allows (hex floats,
 * "nan(...)"), and lets the line be any bytes with no terminating NUL.
 */
#include "ferry/csv.h"
#include "../core/internal.h"

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Column kinds, one byte per column so that wide rows stay in cache. */
enum { COL_SKIP = 0, COL_F32, COL_F64, COL_I64 };

struct ferry_csv_parser {
    char delim;
    bool ws; /* delimiter ' ': runs of blanks separate, blanks at the ends ignored */
    size_t ncols;
    locale_t c_locale;
    uint8_t *kind; /* [ncols] */
    bool missing;  /* missing cells take the fill values below */
    float fill_f32;
    double fill_f64;
    int64_t fill_i64;
};

/* Blanks around a cell: spaces and tabs, except the delimiter itself. */
static inline bool is_blank(const ferry_csv_parser *p, char c)
{
    return (c == ' ' || c == '\t') && c != p->delim;
}

static inline bool is_ws(char c)
{
    return c == ' ' || c == '\t';
}

/* Also used by the CSV stream to check its settings before it lists a directory
 * (declared in datasets/csv_internal.h). */
bool ferry__csv_delim_ok(char d)
{
    unsigned char u = (unsigned char)d;
    if (d == '\t' || d == ' ')
        return true;
    if (u < 0x21 || u > 0x7e)
        return false;
    return !((d >= '0' && d <= '9') || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') ||
             d == '+' || d == '-' || d == '.');
}

int ferry_csv_parser_create(ferry_csv_parser **out, char delim, size_t ncols,
                            const ferry_dtype *col_dtype)
{
    int rc = 0;
    ferry_csv_parser *p = NULL;
    *out = NULL;
    if (!ferry__csv_delim_ok(delim))
        FERRY_FAIL(FERRY_EINVAL,
                   "csv: delimiter 0x%02x is not a tab, a space or a printable character "
                   "outside letters, digits, '+', '-' and '.'",
                   (unsigned char)delim);
    if (ncols < 1 || ncols > FERRY_CSV_MAX_COLS)
        FERRY_FAIL(FERRY_EINVAL, "csv: %zu columns is outside [1, %zu]", ncols, FERRY_CSV_MAX_COLS);
    if (!col_dtype)
        FERRY_FAIL(FERRY_EINVAL, "csv: col_dtype is NULL");
    p = ferry__calloc(1, sizeof *p);
    if (!p)
        FERRY_FAIL(FERRY_ENOMEM, "csv: out of memory");
    p->delim = delim;
    p->ws = delim == ' ';
    p->ncols = ncols;
    p->kind = ferry__malloc(ncols);
    if (!p->kind)
        FERRY_FAIL(FERRY_ENOMEM, "csv: out of memory for %zu columns", ncols);
    for (size_t c = 0; c < ncols; c++) {
        switch (col_dtype[c]) {
        case FERRY_DTYPE_INVALID:
            p->kind[c] = COL_SKIP;
            break;
        case FERRY_F32:
            p->kind[c] = COL_F32;
            break;
        case FERRY_F64:
            p->kind[c] = COL_F64;
            break;
        case FERRY_I64:
            p->kind[c] = COL_I64;
            break;
        default:
            FERRY_FAIL(FERRY_EINVAL, "csv: column %zu: dtype %s is not float32, float64 or int64",
                       c + 1, ferry_dtype_name(col_dtype[c]));
        }
    }
    p->c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!p->c_locale)
        FERRY_FAIL(FERRY_ENOMEM, "csv: cannot create a \"C\" locale");
    *out = p;
    return 0;
cleanup:
    ferry_csv_parser_free(p);
    return rc;
}

void ferry_csv_parser_free(ferry_csv_parser *p)
{
    if (!p)
        return;
    if (p->c_locale)
        freelocale(p->c_locale);
    ferry__free(p->kind);
    ferry__free(p);
}

/* ---- Numbers ---- */

enum { NUM_OK = 0, NUM_BAD, NUM_RANGE, NUM_LONG };

static const double pow10_d[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Case-insensitive: does [s, end) start with the lower-case word w? */
static bool starts_with_word(const char *s, const char *end, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(end - s) < n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != w[i])
            return false;
    return true;
}

/* Reads a float at *ps (before end); on NUM_OK, *ps is past it. The syntax is
 * checked here; the conversion is Clinger's fast path when exact, else the libc
 * under the C locale. */
static int parse_float(const ferry_csv_parser *p, const char **ps, const char *end, bool f32,
                       void *dst)
{
    const char *s = *ps, *start = s;
    bool neg = false;
    if (s < end && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++;
    }
    if (s < end && ((*s | 0x20) == 'i' || (*s | 0x20) == 'n')) {
        double v;
        if (starts_with_word(s, end, "infinity")) {
            s += 8;
            v = INFINITY;
        } else if (starts_with_word(s, end, "inf")) {
            s += 3;
            v = INFINITY;
        } else if (starts_with_word(s, end, "nan")) {
            s += 3;
            v = NAN;
        } else {
            return NUM_BAD;
        }
        if (neg)
            v = -v;
        if (f32) {
            float f = (float)v;
            memcpy(dst, &f, sizeof f);
        } else {
            memcpy(dst, &v, sizeof v);
        }
        *ps = s;
        return NUM_OK;
    }
    uint64_t m = 0;
    int sig = 0;          /* significant digits taken into m (at most 19) */
    bool dropped = false; /* nonzero digits beyond those */
    int64_t e10 = 0;      /* value = m * 10^e10 when !dropped */
    int ndigits = 0;
    for (; s < end && *s >= '0' && *s <= '9'; s++, ndigits++) {
        if (sig < 19) {
            m = m * 10 + (uint64_t)(*s - '0');
            sig += m != 0;
        } else {
            e10++;
            dropped |= *s != '0';
        }
    }
    if (s < end && *s == '.') {
        s++;
        for (; s < end && *s >= '0' && *s <= '9'; s++, ndigits++) {
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*s - '0');
                sig += m != 0;
                e10--;
            } else {
                dropped |= *s != '0';
            }
        }
    }
    if (ndigits == 0)
        return NUM_BAD;
    if (s < end && (*s == 'e' || *s == 'E')) {
        s++;
        bool eneg = false;
        if (s < end && (*s == '+' || *s == '-')) {
            eneg = *s == '-';
            s++;
        }
        if (s == end || *s < '0' || *s > '9')
            return NUM_BAD;
        int64_t ex = 0;
        for (; s < end && *s >= '0' && *s <= '9'; s++)
            if (ex < 100000000)
                ex = ex * 10 + (*s - '0');
        e10 += eneg ? -ex : ex;
    }
    size_t n = (size_t)(s - start);
    if (n > FERRY_CSV_MAX_CELL) /* the same limit on every path */
        return NUM_LONG;
    *ps = s;
    if (m == 0 && !dropped) { /* any zero, whatever its exponent */
        if (f32) {
            float f = neg ? -0.0f : 0.0f;
            memcpy(dst, &f, sizeof f);
        } else {
            double d = neg ? -0.0 : 0.0;
            memcpy(dst, &d, sizeof d);
        }
        return NUM_OK;
    }
#if FLT_EVAL_METHOD == 0
    /* Clinger's fast path: when m and 10^|e| are exact doubles, one correctly rounded
     * operation is the correctly rounded double of the decimal. */
    if (!dropped && m <= ((uint64_t)1 << 53)) {
        int64_t e = e10;
        while (e > 22 && m <= ((uint64_t)1 << 53) / 10) { /* 15e23 = 150e22 */
            m *= 10;
            e--;
        }
        if (e >= -22 && e <= 22) {
            double d = (double)m;
            d = e < 0 ? d / pow10_d[-e] : d * pow10_d[e];
            if (neg)
                d = -d;
            if (!f32) {
                memcpy(dst, &d, sizeof d);
                return NUM_OK;
            }
            /* Rounding that double to float is the float of the decimal unless the
             * double is a float midpoint (its 29 bits below float precision are
             * 1000...0): rounding to double moves a value onto a midpoint but never
             * across one. Here |d| is within [1e-22, 2^53 * 1e22], normal as a
             * float, so the bit test is enough. */
            uint64_t bits;
            memcpy(&bits, &d, sizeof bits);
            if ((bits & 0x1fffffffu) != 0x10000000u) {
                float f = (float)d;
                memcpy(dst, &f, sizeof f);
                return NUM_OK;
            }
        }
    }
#endif
    char buf[FERRY_CSV_MAX_CELL + 1];
    memcpy(buf, start, n);
    buf[n] = 0;
    char *stop;
    errno = 0;
    if (f32) {
        float f = strtof_l(buf, &stop, p->c_locale);
        if (stop != buf + n)
            return NUM_BAD; /* the libc disagrees with the syntax above: refuse */
        if (errno == ERANGE && isinf(f))
            return NUM_RANGE;
        memcpy(dst, &f, sizeof f);
    } else {
        double d = strtod_l(buf, &stop, p->c_locale);
        if (stop != buf + n)
            return NUM_BAD;
        if (errno == ERANGE && isinf(d))
            return NUM_RANGE;
        memcpy(dst, &d, sizeof d);
    }
    return NUM_OK;
}

static int parse_i64(const char **ps, const char *end, void *dst)
{
    const char *s = *ps;
    bool neg = false;
    if (s < end && (*s == '+' || *s == '-')) {
        neg = *s == '-';
        s++;
    }
    const char *digits = s;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool over = false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (limit - d) / 10)
            over = true;
        else
            v = v * 10 + d;
    }
    if (s == digits)
        return NUM_BAD;
    if ((size_t)(s - *ps) > FERRY_CSV_MAX_CELL)
        return NUM_LONG;
    /* "1.5", "1e3": not integers (checked before overflow, which needs the whole cell) */
    if (s < end && (*s == '.' || *s == 'e' || *s == 'E'))
        return NUM_BAD;
    if (over)
        return NUM_RANGE;
    int64_t x = !neg ? (int64_t)v : v > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)v;
    memcpy(dst, &x, sizeof x);
    *ps = s;
    return NUM_OK;
}

/* ---- Rows ---- */

/* The columns of a line whose ending ("\r" too) is already off: parse_row strips
 * one "\r", so counting again with ferry_csv_count_columns would strip a second
 * ("\r\r" is one column, the cell "\r", not an empty row). */
static size_t count_columns(const char *line, size_t len, char delim)
{
    const char *s = line, *end = line + len;
    if (delim == ' ') {
        size_t n = 0;
        while (s < end) {
            while (s < end && is_ws(*s))
                s++;
            if (s == end)
                break;
            n++;
            while (s < end && !is_ws(*s))
                s++;
        }
        return n;
    }
    if (len == 0)
        return 0;
    size_t n = 1;
    while ((s = memchr(s, delim, (size_t)(end - s))) != NULL) {
        n++;
        s++;
    }
    return n;
}

size_t ferry_csv_count_columns(const char *line, size_t len, char delim)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    return count_columns(line, len, delim);
}

/* Writes at most 32 characters of text, quoted, with bytes that do not print as '?'. */
static void show(char *buf, size_t cap, const char *s, size_t n)
{
    size_t k = n > 32 ? 32 : n, j = 0;
    buf[j++] = '"';
    for (size_t i = 0; i < k && j + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[j++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    buf[j++] = '"';
    if (k < n && j + 4 < cap) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = 0;
}

static int count_error(const ferry_csv_parser *p, size_t found, ferry_csv_error *err)
{
    if (err) {
        err->column = 0;
        err->columns = found;
        err->offset = err->length = 0;
    }
    return ferry__err(FERRY_ECORRUPT, "%zu column%s, expected %zu%s", found, found == 1 ? "" : "s",
                      p->ncols, found == 0 ? " (an empty row)" : "");
}

/* The text of the cell that starts at `cell`, its blanks left out: [*a, *b). */
static void cell_bounds(const ferry_csv_parser *p, const char *cell, const char *end,
                        const char **a_out, const char **b_out)
{
    const char *a = cell, *b;
    if (p->ws) {
        while (a < end && is_ws(*a))
            a++;
        b = a;
        while (b < end && !is_ws(*b))
            b++;
    } else {
        b = memchr(a, p->delim, (size_t)(end - a));
        if (!b)
            b = end;
        while (a < b && is_blank(p, *a))
            a++;
        while (b > a && is_blank(p, b[-1]))
            b--;
    }
    *a_out = a;
    *b_out = b;
}

/* Whether cell [a, b) (blanks trimmed) is a missing value in a column of kind k. */
static bool is_missing(const char *a, const char *b, uint8_t k)
{
    static const char *const words[] = {"NA", "N/A", "n/a", "NULL", "null", "None", "#N/A", "<NA>"};
    size_t n = (size_t)(b - a);
    if (n == 0)
        return true;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i]) == n && !memcmp(a, words[i], n))
            return true;
    return k == COL_I64 && n == 3 && (!memcmp(a, "NaN", 3) || !memcmp(a, "nan", 3));
}

/* A bad cell starting at cell (its blanks included): finds its extent, and reports
 * the column count instead when that is wrong too. */
static int cell_error(const ferry_csv_parser *p, const char *line, const char *end,
                      const char *cell, size_t col, int why, ferry_csv_error *err)
{
    size_t found = count_columns(line, (size_t)(end - line), p->delim);
    if (found != p->ncols)
        return count_error(p, found, err);
    const char *a, *b;
    cell_bounds(p, cell, end, &a, &b);
    if (err) {
        err->column = col + 1;
        err->columns = found;
        err->offset = (size_t)(a - line);
        err->length = (size_t)(b - a);
    }
    char text[48];
    show(text, sizeof text, a, (size_t)(b - a));
    const char *what = "is not a number";
    if (why == NUM_RANGE)
        what = p->kind[col] == COL_I64   ? "is out of range for int64"
               : p->kind[col] == COL_F32 ? "is out of range for float32"
                                         : "is out of range for float64";
    else if (why == NUM_LONG)
        what = "is longer than 1024 characters";
    else if (p->kind[col] == COL_I64)
        what = "is not an integer";
    /* a missing value where no missing= says what it reads as: say how */
    bool hint =
        why != NUM_RANGE && why != NUM_LONG && !p->missing && is_missing(a, b, p->kind[col]);
    return ferry__err(FERRY_ECORRUPT, "column %zu: %s %s%s", col + 1, text, what,
                      hint ? ": a missing value (missing=V reads empty cells, NA, N/A, NULL, "
                             "None, #N/A and <NA> as V, e.g. missing=nan)"
                           : "");
}

int ferry_csv_parser_set_missing(ferry_csv_parser *p, const char *fill)
{
    if (!p || !fill)
        return ferry__err(FERRY_EINVAL, "csv: missing: %s is NULL", p ? "fill" : "the parser");
    size_t n = strlen(fill);
    float f32 = 0;
    double f64 = 0;
    int64_t i64 = 0;
    bool need[4] = {false, false, false, false};
    for (size_t c = 0; c < p->ncols; c++)
        need[p->kind[c]] = true;
    static const char *const names[] = {"", "float32", "float64", "int64"};
    for (int k = COL_F32; k <= COL_I64; k++) {
        if (!need[k])
            continue;
        const char *s = fill, *end = fill + n;
        int why = k == COL_I64 ? parse_i64(&s, end, &i64)
                               : parse_float(p, &s, end, k == COL_F32,
                                             k == COL_F32 ? (void *)&f32 : (void *)&f64);
        if (why != NUM_OK || s != end)
            return ferry__err(FERRY_EINVAL,
                              "csv: missing=\"%.64s\" is not a number for the %s columns", fill,
                              names[k]);
    }
    p->fill_f32 = f32;
    p->fill_f64 = f64;
    p->fill_i64 = i64;
    p->missing = true;
    return 0;
}

/* Writes column c's fill value when cell (its blanks included) is a missing value;
 * returns where the cell ends (blanks after it not passed over), or NULL. */
static const char *fill_missing(const ferry_csv_parser *p, const char *cell, const char *end,
                                size_t c, void *dst)
{
    const char *a, *b;
    cell_bounds(p, cell, end, &a, &b);
    if (!is_missing(a, b, p->kind[c]))
        return NULL;
    if (p->kind[c] == COL_F32)
        memcpy(dst, &p->fill_f32, sizeof p->fill_f32);
    else if (p->kind[c] == COL_F64)
        memcpy(dst, &p->fill_f64, sizeof p->fill_f64);
    else
        memcpy(dst, &p->fill_i64, sizeof p->fill_i64);
    return b;
}

int ferry_csv_parse_row(const ferry_csv_parser *p, const char *line, size_t len,
                        void *const *col_dst, ferry_csv_error *err)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    const char *s = line, *end = line + len;
    const char delim = p->delim;
    const size_t ncols = p->ncols;
    if (p->ws) {
        while (s < end && is_ws(*s))
            s++;
    }
    if (s == end && (p->ws || len == 0))
        return count_error(p, 0, err);
    for (size_t c = 0;; c++) {
        if (c == ncols)
            return count_error(p, count_columns(line, len, delim), err);
        const char *cell = s;
        int why = NUM_OK;
        switch (p->kind[c]) {
        case COL_SKIP:
            if (p->ws) {
                while (s < end && !is_ws(*s))
                    s++;
            } else {
                const char *q = memchr(s, delim, (size_t)(end - s));
                s = q ? q : end;
            }
            break;
        case COL_F32:
        case COL_F64:
            while (s < end && is_blank(p, *s))
                s++;
            why = parse_float(p, &s, end, p->kind[c] == COL_F32, col_dst[c]);
            break;
        default:
            while (s < end && is_blank(p, *s))
                s++;
            why = parse_i64(&s, end, col_dst[c]);
            break;
        }
        if (why != NUM_OK) {
            const char *after = p->missing ? fill_missing(p, cell, end, c, col_dst[c]) : NULL;
            if (!after)
                return cell_error(p, line, end, cell, c, why, err);
            s = after;
        }
        /* after the number: blanks, then the delimiter or the end of the line */
        if (p->ws) {
            if (s == end)
                goto last;
            if (!is_ws(*s))
                return cell_error(p, line, end, cell, c, NUM_BAD, err);
            while (s < end && is_ws(*s))
                s++;
            if (s == end)
                goto last;
        } else {
            while (s < end && is_blank(p, *s))
                s++;
            if (s == end)
                goto last;
            if (*s != delim)
                return cell_error(p, line, end, cell, c, NUM_BAD, err);
            s++;
        }
        continue;
    last:
        if (c + 1 != ncols)
            return count_error(p, c + 1, err);
        return 0;
    }
}
