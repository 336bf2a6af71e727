/*
 * A stream over a directory of numeric CSV part files (part-00000, part-00001, ...):
 * shard k of n reads the parts i with i % n == k, line by line through one buffer
 * per open shard, and parses each row straight into the sample's fields. A row's
 * position is its part and the decoded offset of its line: saving an iterator
 * keeps the next line's, a restore opens that part there (decoding a compressed
 * one up to it), and fetch reads one line again with a second reader. The parts,
 * their order and the state are the shard engine's (shard_stream.h).
 */
#include "csv_internal.h"
#include "shard_stream.h"
#include "../io/seqread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A line of FERRY_CSV_MAX_LINE bytes with its "\r\n" fits in the buffer. */
#define READ_CAP (FERRY_CSV_MAX_LINE + 2)
#define MAX_DIGITS 18
#define MAX_AFFIX 255
#define NO_FIELD 0xff
#define CSV_MAX_HEADER 1000000
/* fetch's reads: each fetch away from the last one reads at least this much */
#define FETCH_CHUNK ((size_t)64 << 10)

typedef struct {
    ferry__shard_files parts; /* one file: the only part */
    uint64_t header;          /* lines to pass over at the start of every part */
    size_t ncols;
    ferry_csv_parser *parser;
    uint8_t *col_field; /* [ncols]: the field column c goes to, or NO_FIELD */
    uint32_t *col_off;  /* [ncols]: its byte offset within that field */
} csv_source;

/* Lines of one file, read through a buffer of READ_CAP bytes; gzip and zstd files
 * are decoded on the way (found by their magic bytes). */
typedef struct {
    ferry__seqread sr; /* sr.src set when a file is open */
    char *buf;
    size_t start, end; /* unread bytes: buf[start .. end) */
    uint64_t buf_off;  /* the decoded file offset of buf[0] */
    size_t chunk;      /* bytes per read when smaller than the buffer (0: the buffer) */
    bool eof;
    bool broken;          /* a failed read or damaged compressed data: the file ends here */
    uint64_t line;        /* lines handed out so far: the last one's 1-based number */
    uint64_t header_left; /* header lines still to pass over */
    const char *path;     /* the open file, for messages */
    void **col_dst;       /* [ncols] */
} reader;

/* r's buffers, made once: reading rows allocates nothing */
static int csv_init(const void *self, void *rd)
{
    const csv_source *src = self;
    reader *r = rd;
    if (!r->buf)
        r->buf = ferry__malloc(READ_CAP);
    if (!r->col_dst && src->ncols)
        r->col_dst = ferry__calloc(src->ncols, sizeof *r->col_dst);
    if (!r->buf || (src->ncols && !r->col_dst))
        return ferry__err(FERRY_ENOMEM, "csv: out of memory for a read buffer");
    return 0;
}

static int csv_open(const void *self, void *rd, const char *path, bool fetch)
{
    const csv_source *src = self;
    reader *r = rd;
    int rc = csv_init(self, rd);
    if (rc < 0)
        return rc;
    r->path = path;
    r->start = r->end = 0;
    r->buf_off = 0;
    r->chunk = fetch ? FETCH_CHUNK : 0;
    r->eof = false;
    r->broken = false;
    r->line = 0;
    r->header_left = fetch ? 0 : src->header;
    ferry__seqread_close(&r->sr);
    if ((rc = ferry__seqread_open(&r->sr, path, path, FERRY__COMP_AUTO, 0)) < 0)
        return rc;
    /* a compressed part is inflated on another thread while this one parses: the
     * parse costs more than the inflate, so the file reads at nearly the rate of
     * its plain text */
    if (!fetch)
        ferry__seqread_decode_ahead(&r->sr);
    return 0;
}

static void csv_close(void *rd)
{
    ferry__seqread_close(&((reader *)rd)->sr);
}

static void csv_free(void *rd)
{
    reader *r = rd;
    ferry__seqread_close(&r->sr);
    ferry__free(r->buf);
    ferry__free(r->col_dst);
}

/* More bytes after buf[end]; sets eof at the end of the data. */
static int reader_fill(reader *r)
{
    size_t want = READ_CAP - r->end, got;
    if (r->chunk && want > r->chunk)
        want = r->chunk;
    int rc = ferry__seqread_read(&r->sr, r->buf + r->end, want, &got);
    if (rc < 0) {
        r->broken = true;
        return rc;
    }
    r->eof = got < want && !r->sr.err; /* short at the end, or before an error */
    r->end += got;
    return 0;
}

static int long_line(reader *r)
{
    return ferry__err(FERRY_ECORRUPT, "%s: line %llu: longer than %zu bytes (skipped)", r->path,
                      (unsigned long long)r->line, FERRY_CSV_MAX_LINE);
}

/* The next line, without its "\n" (a "\r" before it stays; the row parser drops it).
 * 1 and *line, *len set; 0 at the end of the file; or an error. *line is valid until
 * the next call. A line over FERRY_CSV_MAX_LINE bytes is passed over to its end and
 * reported as FERRY_ECORRUPT: the next call goes on with the line after it. A failed
 * read sets r->broken. */
static int reader_line(reader *r, const char **line, size_t *len)
{
    for (;;) {
        char *b = r->buf + r->start;
        size_t avail = r->end - r->start;
        char *nl = memchr(b, '\n', avail);
        if (nl || (r->eof && avail > 0)) {
            size_t n = nl ? (size_t)(nl - b) : avail;
            r->start += nl ? n + 1 : n;
            r->line++;
            if (n - (n > 0 && b[n - 1] == '\r') > FERRY_CSV_MAX_LINE)
                return long_line(r);
            *line = b;
            *len = n;
            return 1;
        }
        if (r->eof)
            return 0;
        if (r->start > 0) {
            memmove(r->buf, b, avail);
            r->buf_off += r->start;
            r->start = 0;
            r->end = avail;
        }
        if (r->end == READ_CAP) { /* a full buffer and no newline: pass over the line */
            r->line++;
            for (;;) {
                r->buf_off += r->end;
                r->start = r->end = 0;
                int rc = reader_fill(r);
                if (rc < 0)
                    return rc;
                nl = memchr(r->buf, '\n', r->end);
                if (nl) {
                    r->start = (size_t)(nl - r->buf) + 1;
                    return long_line(r);
                }
                if (r->eof) {
                    r->buf_off += r->end;
                    r->end = 0;
                    return long_line(r);
                }
            }
        }
        int rc = reader_fill(r);
        if (rc < 0)
            return rc;
    }
}

/* ---- The stream ---- */

/* Parses the line r just gave into out's fields. */
static int parse_line(const csv_source *src, const reader *r, const char *line, size_t len,
                      ferry_sample *out)
{
    const size_t ncols = src->ncols;
    void **dst = r->col_dst;
    for (size_t c = 0; c < ncols; c++)
        if (src->col_field[c] != NO_FIELD)
            dst[c] = (char *)out->data[src->col_field[c]] + src->col_off[c];
    ferry_csv_error e;
    int rc = ferry_csv_parse_row(src->parser, line, len, dst, &e);
    if (rc < 0) {
        char msg[FERRY_ERRMSG_MAX];
        ferry__err_copy(msg);
        return ferry__err(rc, "%s: line %llu%s%s", r->path, (unsigned long long)r->line,
                          e.column ? ", " : ": ", msg);
    }
    return 0;
}

/* pos: b = the decoded offset of the line's first byte, c = the line's 1-based
 * number. A bad line is one bad row: the next call reads the next line. */
static int csv_next(const void *self, void *rd, const char *path, ferry_sample *out, bool *broken)
{
    reader *r = rd;
    const char *line;
    size_t len;
    int rc;
    (void)path;
    while ((rc = reader_line(r, &line, &len)) == 1 && r->header_left)
        r->header_left--;
    if (rc == 0)
        return FERRY_END;
    if (rc < 0)
        return *broken = r->broken, rc;
    out->pos.b = r->buf_off + (uint64_t)(line - r->buf);
    out->pos.c = r->line;
    return parse_line(self, r, line, len, out);
}

static void csv_destroy(void *self)
{
    csv_source *src = self;
    if (!src)
        return;
    ferry_csv_parser_free(src->parser);
    ferry__free(src->col_field);
    ferry__free(src->col_off);
    ferry__shard_files_free(&src->parts);
    ferry__free(src);
}

enum { GOTO_OK, GOTO_PAST_END, GOTO_NOT_LINE };

/* Positions r (open) at decoded offset off, which must start a line (0, or a
 * "\n" before it) or, with end_ok, be the end of the data: GOTO_OK; GOTO_PAST_END
 * or GOTO_NOT_LINE when it is not; or the error of a read on the way (a
 * compressed file is decoded up to off, from its start when off is behind). */
static int reader_goto(reader *r, uint64_t off, bool end_ok)
{
    r->start = r->end = 0;
    r->buf_off = off;
    r->eof = false;
    r->broken = false;
    uint64_t at;
    if (off == 0)
        return ferry__seqread_seek(&r->sr, 0, &at);
    int rc = ferry__seqread_seek(&r->sr, off - 1, &at);
    if (rc < 0)
        return rc;
    if (at != off - 1)
        return GOTO_PAST_END;
    char c;
    size_t got;
    if ((rc = ferry__seqread_read(&r->sr, &c, 1, &got)) < 0)
        return rc;
    if (got == 0)
        return GOTO_PAST_END;
    if (c == '\n')
        return GOTO_OK;
    if (end_ok) { /* after a last line without "\n", or a long line passed over */
        if ((rc = ferry__seqread_read(&r->sr, &c, 1, &got)) < 0)
            return rc;
        if (got == 0)
            return GOTO_OK;
    }
    return GOTO_NOT_LINE;
}

/* The state's words: the decoded offset of the open part's next line, the lines
 * read from it and the header lines still to pass over. */
static void csv_save(const void *rd, ferry_state *w)
{
    const reader *r = rd;
    ferry_state_put_u64(w, r ? r->buf_off + r->start : 0);
    ferry_state_put_u64(w, r ? r->line : 0);
    ferry_state_put_u64(w, r ? r->header_left : 0);
}

static int csv_resume(const void *self, void *rd, const char *path, const uint64_t *w,
                      ferry_state *st)
{
    const csv_source *src = self;
    reader *r = rd;
    uint64_t off = w[0], line = w[1], left = w[2];
    (void)st;
    if (left > src->header || line > off || line + left < src->header)
        return ferry__err(FERRY_ECORRUPT,
                          "csv stream: the state is damaged (%s: %llu lines read to offset "
                          "%llu, %llu header lines of %llu left)",
                          path, (unsigned long long)line, (unsigned long long)off,
                          (unsigned long long)left, (unsigned long long)src->header);
    int rc = reader_goto(r, off, true);
    if (rc < 0)
        return ferry__err_prefix(rc, "csv stream: resuming at offset %llu of %s",
                                 (unsigned long long)off, path);
    if (rc != GOTO_OK)
        return ferry__err(FERRY_ECORRUPT,
                          "csv stream: %s: the state's offset %llu is %s (the file changed, or "
                          "the state is another stream's)",
                          path, (unsigned long long)off,
                          rc == GOTO_PAST_END ? "past the end of the file"
                                              : "not the start of a line");
    r->line = line;
    r->header_left = left;
    return 0;
}

/* A line read again by fetch's reader, from its buffer when the line is in it. */
static int csv_fetch(const void *self, void *rd, const char *path, const ferry_pos *pos,
                     ferry_sample *out, bool *broken)
{
    reader *r = rd;
    int rc;
    if (pos->c == 0 || pos->c - 1 > pos->b)
        return ferry__err(FERRY_ERANGE, "csv stream: %s: no line %llu at offset %llu", path,
                          (unsigned long long)pos->c, (unsigned long long)pos->b);
    uint64_t in = pos->b - r->buf_off; /* within the buffer: no read */
    if (!r->broken && pos->b > r->buf_off && in < r->end && r->buf[in - 1] == '\n') {
        r->start = (size_t)in;
    } else {
        rc = reader_goto(r, pos->b, false);
        if (rc < 0)
            return *broken = true, rc;
        if (rc != GOTO_OK)
            return *broken = true,
                   ferry__err(FERRY_ERANGE, "csv stream: %s: no line starts at offset %llu%s", path,
                              (unsigned long long)pos->b,
                              rc == GOTO_PAST_END ? " (past the end of the file)" : "");
    }
    r->line = pos->c - 1;
    const char *line;
    size_t len;
    rc = reader_line(r, &line, &len);
    if (rc == 0)
        return ferry__err(FERRY_ERANGE, "csv stream: %s: no line at offset %llu (the end)", path,
                          (unsigned long long)pos->b);
    if (rc < 0)
        return rc;
    return parse_line(self, r, line, len, out);
}

static uint64_t csv_header(const void *self)
{
    return ((const csv_source *)self)->header;
}

static const ferry__shard_format csv_format = {
    .who = "csv stream",
    .unit = "part",
    .stranger = "the state is not a CSV stream's position (saved by another stream?)",
    .tag = 0x3174726170767363ull, /* "csvpart1" */
    .name_order = true,
    .setting_name = "header",
    .setting = csv_header,
    .reader_size = sizeof(reader),
    .words = 3,
    .init = csv_init,
    .open = csv_open,
    .close = csv_close,
    .free = csv_free,
    .next = csv_next,
    .save = csv_save,
    .resume = csv_resume,
    .fetch = csv_fetch,
    .destroy = csv_destroy,
};

/* The column count of part 0's first data row. */
static int detect_cols(const csv_source *src, char delim, size_t *ncols)
{
    int rc = 0;
    reader r = {0};
    FERRY_TRY(csv_open(src, &r, src->parts.paths[0], false));
    const char *line = NULL;
    size_t len = 0;
    for (uint64_t i = 0; i <= src->header; i++) {
        FERRY_TRY(reader_line(&r, &line, &len));
        if (rc == 0)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: no data row to take the column count from (set cols=N)",
                       r.path);
    }
    size_t n = ferry_csv_count_columns(line, len, delim);
    if (n == 0)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: line %llu: 0 columns (an empty row)", r.path,
                   (unsigned long long)r.line);
    if (n > FERRY_CSV_MAX_COLS)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: line %llu: %zu columns, over the limit of %zu", r.path,
                   (unsigned long long)r.line, n, FERRY_CSV_MAX_COLS);
    *ncols = n;
    rc = 0;
cleanup:
    csv_free(&r);
    return rc;
}

/* ---- Fields ---- */

typedef struct {
    char name[FERRY_MAX_NAME];
    uint64_t first, last;
    bool scalar;
    ferry_dtype dtype;
} field_spec;

static bool csv_dtype_ok(ferry_dtype dt)
{
    return dt == FERRY_F32 || dt == FERRY_F64 || dt == FERRY_I64;
}

static bool parse_col(const char *s, uint64_t *out)
{
    if (!*s || strlen(s) > 9)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* "NAME:COL[:DTYPE]" or "NAME:FIRST-LAST[:DTYPE]", separated by ';'. */
static int parse_fields(const char *text, ferry_dtype dflt, field_spec *fs, int *nfs)
{
    int n = 0;
    const char *s = text;
    if (!*text)
        return ferry__err(FERRY_EINVAL, "csv: fields is empty");
    for (;;) {
        const char *e = strchr(s, ';');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[256];
        if (len == 0)
            return ferry__err(FERRY_EINVAL, "csv: fields \"%.64s\": an empty item", text);
        if (len >= sizeof item)
            return ferry__err(FERRY_EINVAL, "csv: fields: item \"%.64s...\" is too long", s);
        if (n == FERRY_MAX_FIELDS)
            return ferry__err(FERRY_EINVAL, "csv: fields: more than %d", FERRY_MAX_FIELDS);
        memcpy(item, s, len);
        item[len] = 0;
        field_spec *f = &fs[n];
        memset(f, 0, sizeof *f);
        char *c1 = strchr(item, ':');
        if (!c1)
            return ferry__err(FERRY_EINVAL,
                              "csv: fields: \"%s\" is not NAME:COL or NAME:FIRST-LAST[:DTYPE]",
                              item);
        *c1 = 0;
        char *cols = c1 + 1, *c2 = strchr(cols, ':'), *dt = NULL;
        if (c2) {
            *c2 = 0;
            dt = c2 + 1;
        }
        size_t nl = strlen(item);
        if (nl == 0 || nl >= FERRY_MAX_NAME)
            return ferry__err(FERRY_EINVAL, "csv: fields: a name must be 1..%d bytes (\"%.64s\")",
                              FERRY_MAX_NAME - 1, item);
        memcpy(f->name, item, nl + 1);
        char *dash = strchr(cols, '-');
        if (dash)
            *dash = 0;
        if (!parse_col(cols, &f->first) || (dash && !parse_col(dash + 1, &f->last)))
            return ferry__err(FERRY_EINVAL,
                              "csv: field \"%s\": columns must be COL or FIRST-LAST (numbers from "
                              "0)",
                              f->name);
        f->scalar = !dash;
        if (!dash)
            f->last = f->first;
        if (f->last < f->first)
            return ferry__err(FERRY_EINVAL, "csv: field \"%s\": columns %llu-%llu run backwards",
                              f->name, (unsigned long long)f->first, (unsigned long long)f->last);
        f->dtype = dflt;
        if (dt) {
            f->dtype = ferry_dtype_from_name(dt);
            if (!csv_dtype_ok(f->dtype))
                return ferry__err(FERRY_EINVAL,
                                  "csv: field \"%s\": dtype \"%.32s\" is not f32, f64 or i64",
                                  f->name, dt);
        }
        n++;
        if (!e)
            break;
        s = e + 1;
    }
    *nfs = n;
    return 0;
}

/* Maps columns to fields and builds the schema and the parser. */
static int build_layout(csv_source *src, char delim, const char *missing, const field_spec *fs,
                        int nfs, ferry_field *fields)
{
    int rc = 0;
    ferry_dtype *col_dtype = NULL;
    const size_t ncols = src->ncols;
    src->col_field = ferry__malloc(ncols);
    src->col_off = ferry__calloc(ncols, sizeof *src->col_off);
    col_dtype = ferry__calloc(ncols, sizeof *col_dtype);
    if (!src->col_field || !src->col_off || !col_dtype)
        FERRY_FAIL(FERRY_ENOMEM, "csv: out of memory for %zu columns", ncols);
    memset(src->col_field, NO_FIELD, ncols);
    for (int i = 0; i < nfs; i++) {
        const field_spec *f = &fs[i];
        if (f->last >= ncols)
            FERRY_FAIL(FERRY_EINVAL,
                       "csv: field \"%s\": column %llu is past the last column (%zu columns, "
                       "numbered from 0)",
                       f->name, (unsigned long long)f->last, ncols);
        size_t size = ferry_dtype_size(f->dtype);
        for (uint64_t c = f->first; c <= f->last; c++) {
            if (src->col_field[c] != NO_FIELD)
                FERRY_FAIL(FERRY_EINVAL, "csv: column %llu is in both fields \"%s\" and \"%s\"",
                           (unsigned long long)c, fs[src->col_field[c]].name, f->name);
            src->col_field[c] = (uint8_t)i;
            src->col_off[c] = (uint32_t)((c - f->first) * size);
            col_dtype[c] = f->dtype;
        }
        ferry_field *o = &fields[i];
        memset(o, 0, sizeof *o);
        memcpy(o->name, f->name, sizeof o->name);
        o->dtype = f->dtype;
        o->ndim = f->scalar ? 0 : 1;
        o->shape[0] = f->scalar ? 0 : (int64_t)(f->last - f->first + 1);
    }
    FERRY_TRY(ferry_csv_parser_create(&src->parser, delim, ncols, col_dtype));
    if (missing)
        FERRY_TRY(ferry_csv_parser_set_missing(src->parser, missing));
cleanup:
    ferry__free(col_dtype);
    return rc;
}

/* ---- Construction ---- */

void ferry_csv_opts_default(ferry_csv_opts *o)
{
    memset(o, 0, sizeof *o);
    o->prefix = "part-";
    o->digits = 5;
    o->suffix = "";
    o->delim = ',';
    o->header = 0;
    o->dtype = FERRY_F32;
    o->fields = NULL;
    o->cols = 0;
}

static int check_affix(const char *what, const char *s)
{
    if (strlen(s) > MAX_AFFIX)
        return ferry__err(FERRY_EINVAL, "csv: %s is longer than %d bytes", what, MAX_AFFIX);
    if (strchr(s, '/'))
        return ferry__err(FERRY_EINVAL, "csv: %s \"%s\" holds a '/'", what, s);
    return 0;
}

int ferry_stream_csv(ferry_stream **out, const ferry_csv_opts *o)
{
    int rc = 0;
    csv_source *src = NULL;
    field_spec *fs = NULL;
    int nfs = 0;
    *out = NULL;
    if (!o || !o->dir || !*o->dir)
        FERRY_FAIL(FERRY_EINVAL, "csv: dir is %s", o && o->dir ? "empty" : "NULL");
    const char *prefix = o->prefix ? o->prefix : "part-";
    const char *suffix = o->suffix ? o->suffix : "";
    unsigned digits = o->digits ? o->digits : 5;
    char delim = o->delim ? o->delim : ',';
    ferry_dtype dtype = o->dtype ? o->dtype : FERRY_F32;
    FERRY_TRY(check_affix("prefix", prefix));
    FERRY_TRY(check_affix("suffix", suffix));
    if (digits > MAX_DIGITS)
        FERRY_FAIL(FERRY_EINVAL, "csv: digits %u is outside [1, %d]", digits, MAX_DIGITS);
    if (!ferry__csv_delim_ok(delim))
        FERRY_FAIL(FERRY_EINVAL,
                   "csv: delimiter 0x%02x is not a tab, a space or a printable character "
                   "outside letters, digits, '+', '-' and '.'",
                   (unsigned char)delim);
    if (!csv_dtype_ok(dtype))
        FERRY_FAIL(FERRY_EINVAL, "csv: dtype %s is not float32, float64 or int64",
                   ferry_dtype_name(dtype));
    if (o->header < 0 || o->header > CSV_MAX_HEADER)
        FERRY_FAIL(FERRY_EINVAL, "csv: header %d is outside [0, %d] (lines to skip)", o->header,
                   CSV_MAX_HEADER);
    if (o->cols > FERRY_CSV_MAX_COLS)
        FERRY_FAIL(FERRY_EINVAL, "csv: cols %llu is outside [1, %zu] (0: from the first row)",
                   (unsigned long long)o->cols, FERRY_CSV_MAX_COLS);
    fs = ferry__malloc(FERRY_MAX_FIELDS * sizeof *fs);
    if (!fs)
        FERRY_FAIL(FERRY_ENOMEM, "csv: out of memory");
    if (o->fields) {
        FERRY_TRY(parse_fields(o->fields, dtype, fs, &nfs));
    } else {
        memset(&fs[0], 0, sizeof fs[0]);
        strcpy(fs[0].name, "data");
        fs[0].dtype = dtype;
        nfs = 1; /* its columns are set once the count is known */
    }

    src = ferry__calloc(1, sizeof *src);
    if (!src)
        FERRY_FAIL(FERRY_ENOMEM, "csv: out of memory");
    src->header = (uint64_t)o->header;
    struct stat sb;
    if (stat(o->dir, &sb) == 0 && !S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
        FERRY_FAIL(FERRY_EINVAL, "csv: \"%s\" is neither a directory of part files nor a file",
                   o->dir);
    FERRY_TRY(ferry__shard_files_parts(&src->parts, "csv", o->dir, prefix, digits, suffix));
    if (o->cols)
        src->ncols = (size_t)o->cols;
    else
        FERRY_TRY(detect_cols(src, delim, &src->ncols));
    if (!o->fields)
        fs[0].last = src->ncols - 1;
    ferry_field fields[FERRY_MAX_FIELDS];
    FERRY_TRY(build_layout(src, delim, o->missing, fs, nfs, fields));
    ferry__free(fs);
    /* owns src from here, also when it fails */
    return ferry__shard_stream_create(out, &csv_format, src, &src->parts, 0, fields, nfs);
cleanup:
    ferry__free(fs);
    csv_destroy(src);
    return rc;
}

/* ---- "csv:DIR,key=value,..." ---- */

static int spec_delim(const char *v, char *out)
{
    static const struct {
        const char *name;
        char c;
    } names[] = {{"comma", ','}, {"tab", '\t'}, {"space", ' '}, {"semicolon", ';'}, {"pipe", '|'}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (!strcmp(v, names[i].name)) {
            *out = names[i].c;
            return 0;
        }
    }
    if (strlen(v) == 1 && ferry__csv_delim_ok(v[0])) {
        *out = v[0];
        return 0;
    }
    return ferry__err(FERRY_EINVAL,
                      "source csv: delim=\"%.64s\" is not comma, tab, space, semicolon, pipe or "
                      "one printable character other than a letter, digit, '+', '-' or '.'",
                      v);
}

/* "csv:DIR[,prefix=part-][,digits=5][,suffix=][,delim=,][,header=0][,dtype=f32]
 * [,fields=...][,cols=N]": delim takes one character or a name: comma, tab, space,
 * semicolon, pipe. A stream only: the registry gives it an st. */
int ferry__csv_open_spec(ferry_dataset **ds, ferry_stream **out, ferry__spec *s)
{
    int rc = 0;
    ferry_csv_opts o;
    *out = NULL;
    ferry_csv_opts_default(&o);
    o.dir = s->location;
    if (!*o.dir)
        return ferry__err(FERRY_EINVAL, "source csv: DIR is empty");
    const char *v;
    uint64_t digits = o.digits;
    if ((v = ferry__spec_str(s, "prefix")))
        o.prefix = v;
    if ((v = ferry__spec_str(s, "suffix")))
        o.suffix = v;
    FERRY_TRY(ferry__spec_u64(s, "digits", 1, MAX_DIGITS, &digits));
    o.digits = (uint32_t)digits;
    if ((v = ferry__spec_str(s, "delim")))
        FERRY_TRY(spec_delim(v, &o.delim));
    if ((v = ferry__spec_str(s, "header"))) {
        uint64_t h;
        if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
            o.header = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
            o.header = 0;
        else if (ferry__parse_u64(v, &h) && h <= CSV_MAX_HEADER)
            o.header = (int)h;
        else
            FERRY_FAIL(FERRY_EINVAL,
                       "source csv: header=\"%.64s\" is not a count of lines in [0, %d]", v,
                       CSV_MAX_HEADER);
    }
    o.missing = ferry__spec_str(s, "missing");
    if ((v = ferry__spec_str(s, "dtype"))) {
        o.dtype = ferry_dtype_from_name(v);
        if (!csv_dtype_ok(o.dtype))
            FERRY_FAIL(FERRY_EINVAL, "source csv: dtype=\"%.64s\" is not f32, f64 or i64", v);
    }
    o.fields = ferry__spec_str(s, "fields");
    FERRY_TRY(ferry__spec_u64(s, "cols", 1, FERRY_CSV_MAX_COLS, &o.cols));
    FERRY_TRY(ferry__spec_check_used(s));
    return ferry_stream_csv(out, &o);
cleanup:
    return rc;
}
