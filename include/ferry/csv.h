/*
 * ferry/csv.h - numeric CSV: a row parser and a stream over a directory of part files.
 *
 * The format: each line is one row of numbers separated by a delimiter (',' by
 * default). Cells may have spaces (and tabs, unless the delimiter is a tab) around
 * them. Numbers are read the same way in every locale ('.' is the decimal point):
 *  - floats: an optional sign, digits with an optional '.', an optional exponent
 *    (1e-5, .5, 5., -0, +3E+08), or "inf", "infinity", "nan" in any case. The value
 *    is the correctly rounded nearest float32 / float64, so a value printed with
 *    "%.9g" (float32) or "%.17g" (float64) reads back bit for bit. A finite number
 *    too large for the type is an error; one too small becomes a subnormal or zero.
 *    Hexadecimal floats are not accepted.
 *  - int64: an optional sign and decimal digits, within [INT64_MIN, INT64_MAX].
 * Lines end with "\n" or "\r\n"; the last line may lack its newline. An empty
 * line is an error (a row of 0 columns) except the end of the file after a final
 * newline. With the space delimiter, runs of spaces and tabs separate cells and
 * blanks at the start and end of a line are ignored (whitespace-separated files).
 *
 * Thread rules: a ferry_csv_parser is immutable once created and may be used by
 * any number of threads at once. A stream follows dataset.h: one thread at a time
 * per open shard.
 */
#ifndef FERRY_CSV_H
#define FERRY_CSV_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_stream ferry_stream; /* made below, used through ferry/dataset.h */

/* Limits on untrusted input. A line has at most FERRY_CSV_MAX_LINE bytes (without
 * its line ending), a row at most FERRY_CSV_MAX_COLS columns (so in practice at most
 * about half a million: a line of 1 MiB holds no more), a number cell at most
 * FERRY_CSV_MAX_CELL characters (spaces around it not counted). */
#define FERRY_CSV_MAX_LINE ((size_t)1 << 20)
#define FERRY_CSV_MAX_COLS ((size_t)1 << 20)
#define FERRY_CSV_MAX_CELL 1024

/* ---- The row parser ---- */

/* What a row is made of: the delimiter and the type of each column. */
typedef struct ferry_csv_parser ferry_csv_parser;

/* Creates a parser for rows of `ncols` columns (1 .. FERRY_CSV_MAX_COLS) separated
 * by `delim`. Column c is read as col_dtype[c]: FERRY_F32, FERRY_F64 or FERRY_I64;
 * FERRY_DTYPE_INVALID skips the column (its text is not looked at). The delimiter is
 * a tab, a space, or a printable ASCII character that cannot be part of a number
 * (not a letter, digit, '+', '-' or '.'). col_dtype is copied. The parser holds a
 * "C" locale for the conversions; free it with ferry_csv_parser_free. FERRY_EINVAL
 * on a bad setting, FERRY_ENOMEM. */
FERRY_API int ferry_csv_parser_create(ferry_csv_parser **out, char delim, size_t ncols,
                                      const ferry_dtype *col_dtype);
/* NULL is a no-op. */
FERRY_API void ferry_csv_parser_free(ferry_csv_parser *p);

/* Missing values: after this call, a cell that is empty (blanks only) or one of
 * NA, N/A, n/a, NULL, null, None, #N/A, <NA> (and, in an int64 column, NaN and
 * nan) is read as `fill`, a number written as a cell of the column's type would be
 * ("0", "-1", "nan" for float columns). Without it such cells are errors. A float
 * column reads "nan" as NaN either way. FERRY_EINVAL when fill is not a number of
 * some column's type (naming the column), and the parser is left as it was. Call
 * it before the parser is shared between threads. */
FERRY_API int ferry_csv_parser_set_missing(ferry_csv_parser *p, const char *fill);

/* Where a row went wrong (filled by ferry_csv_parse_row on FERRY_ECORRUPT). */
typedef struct ferry_csv_error {
    size_t column;  /* 1-based column of the bad cell; 0 when the column count is wrong */
    size_t columns; /* columns the row has (counted when the count is wrong) */
    size_t offset;  /* the bad cell's text is line[offset .. offset + length), */
    size_t length;  /* without the spaces around it (0, 0 for a wrong count) */
} ferry_csv_error;

/* Parses one row: `line` holds `len` bytes without the line ending (a final '\r' is
 * ignored; the bytes need no terminating NUL, and may hold any byte). Column c's
 * value is written to col_dst[c] (unaligned is fine; its dtype's size in bytes;
 * entries of skipped columns are not used and may be NULL).
 * Returns 0, or FERRY_ECORRUPT when the row does not have exactly ncols columns or
 * a cell is not a number of its column's type; *err (may be NULL) then says where,
 * and the thread's message (ferry_last_errmsg) says what, e.g.
 *   column 4: "1.2.3" is not a number
 *   5 columns, expected 4
 * with the cell's text cut to 32 characters. Columns before the bad one may have
 * been written. A wrong column count is reported in preference to a bad cell. */
FERRY_API int ferry_csv_parse_row(const ferry_csv_parser *p, const char *line, size_t len,
                                  void *const *col_dst, ferry_csv_error *err);

/* Columns of a row under the same rules as ferry_csv_parse_row: 0 for an empty line
 * (or, with the space delimiter, a blank one), else 1 + the number of separators. */
FERRY_API size_t ferry_csv_count_columns(const char *line, size_t len, char delim);

/* ---- A stream over CSV part files ----
 * The directory `dir` holds part files named prefix + number + suffix, the number
 * zero-padded to `digits` digits (as printf's "%0*llu" writes it: part-00007,
 * part-123456): part-00000, part-00001, ... Files are found by listing the
 * directory; other names are ignored. The numbering must start at 0 and have no gap:
 * a missing part is FERRY_ENOENT naming it, and so is a directory with no parts.
 *
 * Each row is one sample. Without `fields`, the sample is one field "data" of
 * shape [ncols] and dtype `dtype`. With `fields`, columns are split into named
 * fields: "x:0-783;y:784:i64" makes "x" of shape [784] (columns 0 to 783) and "y" a
 * scalar (column 784) of int64. Each item is NAME:COL (a scalar) or NAME:FIRST-LAST
 * (shape [LAST - FIRST + 1]), optionally followed by :DTYPE (f32, f64, i64 or
 * their NumPy names) that overrides `dtype`. Columns may be named in any order, each
 * at most once; columns that no field names are skipped without being parsed.
 *
 * The column count is `cols`, or when 0, the count of the first data row of part 0,
 * read when the stream is created. Every row must have exactly that many columns.
 * With header = N, the first N lines of every part file are skipped. `dir` may
 * also name one file, read as the only part.
 *
 * Part files compressed with gzip or zstd (found by their magic bytes, whatever
 * their names) are decoded as they are read; xz, bzip2, lz4 and zip files are
 * FERRY_ENOTSUP naming the file and what to run.
 *
 * Shard k of n reads the parts i with i % n == k, in order, each with buffered reads
 * (memory per open shard is about FERRY_CSV_MAX_LINE plus a pointer per column,
 * whatever the file sizes). The epoch is ignored: the order is the file order.
 * A bad row is FERRY_ECORRUPT with a message naming the file, the 1-based line and
 * column and the text:
 *   DIR/part-00003: line 17, column 4: "1.2.3" is not a number
 *   DIR/part-00001: line 9: 5 columns, expected 4
 * and the next call goes on with the next row. A line over FERRY_CSV_MAX_LINE bytes
 * is one bad row too (FERRY_ECORRUPT, "line 17: longer than 1048576 bytes
 * (skipped)"): it is passed over to its end, and the next call goes on with the
 * line after it. A failed read (FERRY_EIO) or damaged compressed data
 * (FERRY_ECORRUPT) ends that part file; the next call goes on with the next part
 * of the shard.
 *
 * The stream is resumable (ferry_stream_save / ferry_stream_restore, ferry/dataset.h):
 * a row's pos is a = its part number, b = the byte offset of its line in the
 * (decoded) part file, c = its 1-based line number. A shard's state is 72 bytes
 * (the next line's part, offset and line number, the header lines still to pass
 * over, and the settings it must be restored under: header, the number of parts
 * and of shards); a state that does not fit the stream, the shard or the files
 * (a part the shard does not read, an offset past the end of the file or inside a
 * line) is FERRY_ECORRUPT saying so, a different header FERRY_EINVAL. A restore
 * opens the part and goes on at the offset: bad rows, long lines and damaged
 * files after it give what they gave the saved iterator. A plain part is read from
 * the offset. Compressed files cannot seek: resuming inside a compressed part
 * decodes it from its start up to the position. ferry_stream_fetch reads one row
 * again by its own reader (a second buffer of about FERRY_CSV_MAX_LINE, made on
 * the first fetch), left after the row: rows fetched in the order of (part,
 * offset) read and decode each part once; a fetch behind the last one in a
 * compressed part decodes that part again from its start. */
typedef struct ferry_csv_opts {
    const char *dir;     /* the directory (required) */
    const char *prefix;  /* of part file names; default (and NULL) "part-" */
    uint32_t digits;     /* zero-padded width of the number, 1 .. 18; default (and 0) 5 */
    const char *suffix;  /* after the number, e.g. ".csv"; default (and NULL) "" */
    char delim;          /* default (and 0) ',' */
    int header;          /* lines to skip at the start of every part, 0 .. 1000000 */
    ferry_dtype dtype;   /* FERRY_F32 (default, and FERRY_DTYPE_INVALID), F64 or I64 */
    const char *fields;  /* NULL: one field "data" with every column */
    uint64_t cols;       /* columns per row, 1 .. FERRY_CSV_MAX_COLS; 0: from part 0 */
    const char *missing; /* NULL: missing cells are errors; else their fill value
                          * (ferry_csv_parser_set_missing) */
} ferry_csv_opts;

/* Default settings (see ferry_csv_opts); set dir before use. */
FERRY_API void ferry_csv_opts_default(ferry_csv_opts *o);

/* Creates the stream. The strings in *o are copied. Free with ferry_stream_free.
 * FERRY_EINVAL names a bad setting; FERRY_ENOENT a missing directory or part;
 * FERRY_EIO a directory or file that cannot be read; FERRY_ECORRUPT a bad first row
 * when the column count is taken from it; FERRY_ENOMEM. On failure *out is NULL. */
FERRY_API int ferry_stream_csv(ferry_stream **out, const ferry_csv_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_CSV_H */
