/*
 * Printing records: text for a source of one text field, else JSON objects that a
 * program can read: text fields as strings when they are UTF-8, other bytes as a
 * short description (or base64 on request), large arrays as a summary (dtype,
 * shape, first values, range) unless asked for in full.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

/* Arrays of more elements than this are summarised (unless --full). */
#define SUMMARY_OVER 16
#define SUMMARY_FIRST 8

static bool opt_base64, opt_full;

void cli_print_options(bool base64, bool full)
{
    opt_base64 = base64;
    opt_full = full;
}

static void print_text(const uint8_t *p, size_t n, bool json)
{
    if (json)
        putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned c = p[i];
        if (json && (c == '"' || c == '\\'))
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs(json ? "\\t" : "\t", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf(json ? "\\u%04x" : "\\x%02x", c);
        else
            putchar((int)c);
    }
    if (json)
        putchar('"');
}

/* Whether p holds valid UTF-8 with no NUL: text to print as a JSON string. */
static bool is_text(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3fu);
        }
        /* overlong forms, surrogates, past U+10FFFF */
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* What a blob of bytes looks like, by its first bytes; NULL when unknown. */
static const char *sniff(const uint8_t *p, size_t n)
{
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return "jpeg";
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        return "png";
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6)))
        return "gif";
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
        return "webp";
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
        return "gzip";
    if (n >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
        return "zstd";
    if (n >= 6 && !memcmp(p, "\x93NUMPY", 6))
        return "npy";
    if (n >= 5 && !memcmp(p, "%PDF-", 5))
        return "pdf";
    return NULL;
}

static void print_base64(const uint8_t *p, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    putchar('"');
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        putchar(t[v >> 18 & 63]);
        putchar(t[v >> 12 & 63]);
        putchar(i + 1 < n ? t[v >> 6 & 63] : '=');
        putchar(i + 2 < n ? t[v & 63] : '=');
    }
    putchar('"');
}

/* Bytes that are not text: {"bytes": N, "format": "jpeg", "head": "ffd8ffe0..."},
 * or with --base64 {"bytes": N, "base64": "..."}. */
static void print_blob(const uint8_t *p, size_t n)
{
    printf("{\"bytes\": %zu", n);
    const char *fmt = sniff(p, n);
    if (fmt)
        printf(", \"format\": \"%s\"", fmt);
    if (opt_base64) {
        printf(", \"base64\": ");
        print_base64(p, n);
    } else {
        printf(", \"head\": \"");
        for (size_t i = 0; i < n && i < 16; i++)
            printf("%02x", p[i]);
        putchar('"');
    }
    putchar('}');
}

/* Values are copied out: a field's bytes need not be aligned for its type. */
static double value_of(ferry_dtype dt, const void *p)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    size_t n = ferry_dtype_size(dt);
    memcpy(&v, p, n <= sizeof v ? n : sizeof v);
    switch (dt) {
    case FERRY_U8:
    case FERRY_BOOL:
        return v.u8;
    case FERRY_I8:
        return v.i8;
    case FERRY_U16:
    case FERRY_F16:
    case FERRY_BF16:
        return v.u16;
    case FERRY_I16:
        return v.i16;
    case FERRY_U32:
        return v.u32;
    case FERRY_I32:
        return v.i32;
    case FERRY_U64:
        return (double)v.u64;
    case FERRY_I64:
        return (double)v.i64;
    case FERRY_F32:
        return v.f32;
    case FERRY_F64:
        return v.f64;
    default:
        return NAN;
    }
}

/* A finite number as JSON; NaN and the infinities as the strings "nan", "inf",
 * "-inf" (JSON has no such numbers). */
static void print_double(double d, bool f32)
{
    if (isnan(d))
        fputs("\"nan\"", stdout);
    else if (isinf(d))
        fputs(d > 0 ? "\"inf\"" : "\"-inf\"", stdout);
    else
        printf(f32 ? "%.9g" : "%.17g", d);
}

static void print_scalar(ferry_dtype dt, const void *p)
{
    int64_t i64;
    uint64_t u64;
    switch (dt) {
    case FERRY_I64:
        memcpy(&i64, p, 8);
        printf("%lld", (long long)i64);
        return;
    case FERRY_U64:
        memcpy(&u64, p, 8);
        printf("%llu", (unsigned long long)u64);
        return;
    case FERRY_F32:
        print_double(value_of(dt, p), true);
        return;
    case FERRY_F64:
        print_double(value_of(dt, p), false);
        return;
    case FERRY_F16: /* f16, bf16: the raw bits */
    case FERRY_BF16:
    default:
        printf("%.17g", value_of(dt, p));
        return;
    }
}

static void print_array(const ferry_field *fi, const uint8_t *p, size_t elems, int64_t rows)
{
    size_t sz = ferry_dtype_size(fi->dtype);
    bool summary = !opt_full && elems > SUMMARY_OVER;
    if (summary) {
        printf("{\"dtype\": \"%s\", \"shape\": [", ferry_dtype_name(fi->dtype));
        for (int d = 0; d < fi->ndim; d++)
            printf("%s%lld", d ? ", " : "",
                   (long long)(d == 0 && fi->variable ? rows : fi->shape[d]));
        printf("], \"first\": ");
    }
    putchar('[');
    size_t shown = summary ? SUMMARY_FIRST : elems;
    for (size_t i = 0; i < shown; i++) {
        if (i)
            fputs(", ", stdout);
        print_scalar(fi->dtype, p + i * sz);
    }
    putchar(']');
    if (!summary)
        return;
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t finite = 0;
    for (size_t i = 0; i < elems; i++) {
        double v = value_of(fi->dtype, p + i * sz);
        if (!isfinite(v))
            continue;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
        finite++;
    }
    if (finite) {
        printf(", \"min\": ");
        print_double(lo, false);
        printf(", \"max\": ");
        print_double(hi, false);
        printf(", \"mean\": ");
        print_double(sum / (double)finite, false);
    }
    printf(", \"summary\": true}");
}

void cli_print_record(int nf, const ferry_field *const *fields, void *const *data,
                      const int64_t *len, bool json)
{
    if (!json) {
        print_text(data[0], (size_t)len[0], false);
        putchar('\n');
        return;
    }
    putchar('{');
    for (int f = 0; f < nf; f++) {
        const ferry_field *fi = fields[f];
        if (f)
            fputs(", ", stdout);
        cli_json_string(stdout, fi->name);
        fputs(": ", stdout);
        size_t elems = 1;
        for (int d = 0; d < fi->ndim; d++)
            elems *= (size_t)fi->shape[d];
        if (fi->variable)
            elems = (size_t)len[f] * ferry_field_row_elems(fi);
        if (fi->dtype == FERRY_U8 && fi->variable && fi->ndim == 1) {
            /* bytes: text when they are text, else a description */
            if (is_text(data[f], elems))
                print_text(data[f], elems, true);
            else
                print_blob(data[f], elems);
            continue;
        }
        if (fi->ndim == 0) {
            print_scalar(fi->dtype, data[f]);
            continue;
        }
        print_array(fi, data[f], elems, len[f]);
    }
    puts("}");
}
