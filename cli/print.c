/*
 * Printing records: text for a source of one text field, else JSON objects.
 */
#include "cli.h"

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

static void print_scalar(ferry_dtype dt, const void *p)
{
    switch (dt) {
    case FERRY_U8:
    case FERRY_BOOL:
        printf("%u", *(const uint8_t *)p);
        break;
    case FERRY_I8:
        printf("%d", *(const int8_t *)p);
        break;
    case FERRY_U16:
        printf("%u", *(const uint16_t *)p);
        break;
    case FERRY_I16:
        printf("%d", *(const int16_t *)p);
        break;
    case FERRY_U32:
        printf("%u", *(const uint32_t *)p);
        break;
    case FERRY_I32:
        printf("%d", *(const int32_t *)p);
        break;
    case FERRY_U64:
        printf("%llu", (unsigned long long)*(const uint64_t *)p);
        break;
    case FERRY_I64:
        printf("%lld", (long long)*(const int64_t *)p);
        break;
    case FERRY_F32:
        printf("%.9g", *(const float *)p);
        break;
    case FERRY_F64:
        printf("%.17g", *(const double *)p);
        break;
    default: /* f16, bf16: the raw bits */
        printf("%u", *(const uint16_t *)p);
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

