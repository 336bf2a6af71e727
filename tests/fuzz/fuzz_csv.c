/*
 * Fuzz target: numeric CSV. The first byte picks the delimiter, the column types and
 * count, and whether part files have a header; the rest is the text. Each line goes
 * through the row parser, and every value it accepts is checked against the libc's
 * own conversion in the C locale. Then the text is written as part files in a
 * temporary directory and read through the stream, every shard to its end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strtod_l and friends; the fuzz targets are built without it */
#endif
#include <ferry/ferry.h>
#include <ferry/csv.h>

#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char delims[8] = {',', ';', '\t', ' ', '|', ':', ',', ','};

static bool blank(char c, char delim)
{
    return (c == ' ' || c == '\t') && c != delim;
}

/* The cells of a row the parser took, split independently of it. */
static size_t split(const char *s, size_t n, char delim, const char **cell, size_t *len, size_t max)
{
    if (n && s[n - 1] == '\r')
        n--;
    size_t k = 0, i = 0;
    if (delim == ' ') {
        while (k < max) {
            while (i < n && (s[i] == ' ' || s[i] == '\t'))
                i++;
            if (i == n)
                break;
            size_t j = i;
            while (j < n && s[j] != ' ' && s[j] != '\t')
                j++;
            cell[k] = s + i;
            len[k++] = j - i;
            i = j;
        }
        return k;
    }
    for (;;) {
        size_t j = i;
        while (j < n && s[j] != delim)
            j++;
        size_t a = i, b = j;
        while (a < b && blank(s[a], delim))
            a++;
        while (b > a && blank(s[b - 1], delim))
            b--;
        if (k == max)
            abort(); /* the parser took a row with too many columns */
        cell[k] = s + a;
        len[k++] = b - a;
        if (j == n)
            return k;
        i = j + 1;
    }
}

static void check_row(locale_t c, const char *line, size_t n, char delim, const ferry_dtype *dt,
                      size_t ncols, uint8_t (*vals)[8])
{
    const char *cell[4];
    size_t len[4];
    if (split(line, n, delim, cell, len, 4) != ncols)
        abort();
    for (size_t i = 0; i < ncols; i++) {
        char buf[FERRY_CSV_MAX_CELL + 1];
        if (dt[i] == FERRY_DTYPE_INVALID)
            continue;
        if (len[i] > FERRY_CSV_MAX_CELL)
            abort();
        memcpy(buf, cell[i], len[i]);
        buf[len[i]] = 0;
        char *end;
        if (dt[i] == FERRY_F32) {
            float want = strtof_l(buf, &end, c), got;
            memcpy(&got, vals[i], 4);
            if (*end || (isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0))
                abort();
        } else if (dt[i] == FERRY_F64) {
            double want = strtod_l(buf, &end, c), got;
            memcpy(&got, vals[i], 8);
            if (*end || (isnan(want) ? !isnan(got) : memcmp(&want, &got, 8) != 0))
                abort();
        } else {
            long long want = strtoll_l(buf, &end, 10, c);
            int64_t got;
            memcpy(&got, vals[i], 8);
            if (*end || want != got)
                abort();
        }
    }
}

static void parse_lines(const char *text, size_t n, char delim, const ferry_dtype *dt, size_t ncols)
{
    static locale_t c;
    if (!c)
        c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    ferry_csv_parser *p;
    if (ferry_csv_parser_create(&p, delim, ncols, dt) != 0)
        abort();
    uint8_t vals[4][8];
    void *dst[4] = {vals[0], vals[1], vals[2], vals[3]};
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) : n - i;
        const char *line = text + i;
        ferry_csv_error e;
        int rc = ferry_csv_parse_row(p, line, len, dst, &e);
        size_t cols = ferry_csv_count_columns(line, len, delim);
        if (rc == 0) {
            if (cols != ncols)
                abort();
            check_row(c, line, len, delim, dt, ncols, vals);
        } else if (rc != FERRY_ECORRUPT || e.column > ncols || e.offset + e.length > len ||
                   (e.column == 0 && (e.columns == ncols || e.columns != cols)) ||
                   (e.column != 0 && cols != ncols) || strlen(ferry_last_errmsg()) == 0) {
            abort();
        }
        i += len + 1;
    }
    ferry_csv_parser_free(p);
}

static void write_file(const char *dir, const char *name, const char *p, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    if (n)
        fwrite(p, 1, n, f);
    fclose(f);
}

static void read_stream(ferry_stream *st)
{
    int nf = ferry_stream_nfields(st);
    size_t total = 0, off[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++) {
        off[f] = total;
        total += ferry_field_nbytes(ferry_stream_field(st, f));
    }
    uint8_t *buf = malloc(total ? total : 1);
    ferry_ctx *ctx = NULL;
    if (!buf || ferry_ctx_create(&ctx, 0, 0) != 0) {
        free(buf);
        return;
    }
    void *ptrs[FERRY_MAX_FIELDS];
    int64_t lens[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++)
        ptrs[f] = buf + off[f];
    ferry_sample s = {nf, ptrs, lens, {0}};
    for (uint64_t n = 1; n <= 2; n++) {
        for (uint64_t k = 0; k < n; k++) {
            ferry_stream_iter *it;
            if (ferry_stream_open(st, k, n, 0, &it) != 0)
                continue;
            /* every call consumes a row or a file: the shard must end */
            for (long i = 0;; i++) {
                if (i > 10000000)
                    abort();
                int rc = ferry_stream_next(it, &s, ctx);
                if (rc == FERRY_END)
                    break;
                /* a part compressed in a way the stream refuses (xz) is ENOTSUP */
                if (rc != 0 && rc != FERRY_ECORRUPT && rc != FERRY_EIO && rc != FERRY_ENOTSUP)
                    abort();
            }
            ferry_stream_close(it);
        }
    }
    ferry_ctx_free(ctx);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t sel = data[0];
    char delim = delims[sel & 7];
    int kind = (sel >> 3) & 3;
    size_t ncols = 1 + ((sel >> 5) & 3);
    int header = sel >> 7;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    static const ferry_dtype mixed[4] = {FERRY_F32, FERRY_I64, FERRY_DTYPE_INVALID, FERRY_F64};
    static const ferry_dtype one[3] = {FERRY_F32, FERRY_F64, FERRY_I64};
    ferry_dtype dt[4];
    for (size_t c = 0; c < ncols; c++)
        dt[c] = kind == 3 ? mixed[c] : one[kind];
    parse_lines(text, n, delim, dt, ncols);

    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ferry-fuzz-csv-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return 0;
    /* an odd length splits the text into two parts */
    size_t cut = n % 2 ? n / 2 : n;
    write_file(dir, "part-00000", text, cut);
    if (cut < n)
        write_file(dir, "part-00001", text + cut, n - cut);
    ferry_csv_opts o;
    ferry_csv_opts_default(&o);
    o.dir = dir;
    o.delim = delim;
    o.header = header;
    o.dtype = kind == 3 ? FERRY_F64 : one[kind];
    o.cols = n % 3 ? ncols : 0; /* else from the first row */
    char fields[64];
    if (kind == 3 && o.cols) {
        snprintf(fields, sizeof fields, "a:0%s%s", ncols > 1 ? ";b:1-" : "",
                 ncols > 1 ? (ncols == 2   ? "1:i64"
                              : ncols == 3 ? "2:i64"
                                           : "3:i64")
                           : "");
        o.fields = fields;
    }
    ferry_stream *st = NULL;
    if (ferry_stream_csv(&st, &o) == 0) {
        read_stream(st);
        ferry_stream_free(st);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/part-00000", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/part-00001", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
