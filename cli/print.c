/*
 * Printing records: text for a source of one text field, else JSON objects.
 */
#include "cli.h"

#include <string.h>

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

/* Values are copied out: a field's bytes need not be aligned for its type. */
static void print_scalar(ferry_dtype dt, const void *p)
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
        printf("%u", v.u8);
        break;
    case FERRY_I8:
        printf("%d", v.i8);
        break;
    case FERRY_U16:
    case FERRY_F16: /* f16, bf16: the raw bits */
    case FERRY_BF16:
        printf("%u", v.u16);
        break;
    case FERRY_I16:
        printf("%d", v.i16);
        break;
    case FERRY_U32:
        printf("%u", v.u32);
        break;
    case FERRY_I32:
        printf("%d", v.i32);
        break;
    case FERRY_U64:
        printf("%llu", (unsigned long long)v.u64);
        break;
    case FERRY_I64:
        printf("%lld", (long long)v.i64);
        break;
    case FERRY_F32:
        printf("%.9g", v.f32);
        break;
    case FERRY_F64:
        printf("%.17g", v.f64);
        break;
    default:
        printf("null");
        break;
    }
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
        printf("%s\"%s\": ", f ? ", " : "", fi->name);
        size_t elems = 1;
        for (int d = 0; d < fi->ndim; d++)
            elems *= (size_t)fi->shape[d];
        if (fi->variable)
            elems = (size_t)len[f] * ferry_field_row_elems(fi);
        if (fi->dtype == FERRY_U8 && fi->variable) {
            print_text(data[f], elems, true);
            continue;
        }
        size_t sz = ferry_dtype_size(fi->dtype);
        if (fi->ndim == 0) {
            print_scalar(fi->dtype, data[f]);
            continue;
        }
        putchar('[');
        for (size_t i = 0; i < elems; i++) {
            if (i)
                fputs(", ", stdout);
            print_scalar(fi->dtype, (const uint8_t *)data[f] + i * sz);
        }
        putchar(']');
    }
    puts("}");
}
