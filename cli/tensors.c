/*
 * Named-tensor files (.safetensors) from the command line: ls, verify and cat
 * answer for them when given one (by suffix, or by the header's shape).
 */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool cli_is_safetensors(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    size_t n = strlen(path);
    if (n >= 12 && !strcmp(path + n - 12, ".safetensors"))
        return true;
    /* no suffix: an 8-byte length that fits the file, then a JSON object */
    unsigned char b[9];
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t got = fread(b, 1, 9, f);
    fclose(f);
    if (got != 9 || b[8] != '{')
        return false;
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | b[i];
    return h >= 2 && h <= (uint64_t)st.st_size - 8;
}

static void print_shape(const ferry_tensor_info *ti)
{
    putchar('[');
    for (int d = 0; d < ti->ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)ti->shape[d]);
    putchar(']');
}

static int open_or_fail(ferry_tensors **t, const char *path, const ferry_tensors_opts *o)
{
    if (ferry_tensors_open(t, path, o) < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    return 0;
}

int cmd_tensors_ls(int argc, char **argv)
{
    ferry_tensors *t;
    ferry_tensors_opts o = {.flags = FERRY_TENSORS_NO_VERIFY};
    if (open_or_fail(&t, argv[1], &o))
        return 1;
    size_t n = ferry_tensors_count(t), crcs = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        bytes += ferry_tensors_at(t, i)->nbytes;
        crcs += (size_t)ferry_tensors_at(t, i)->has_crc;
    }
    printf("%s  %zu tensor%s  %llu bytes of data  %zu CRC%s\n", argv[1], n, n == 1 ? "" : "s",
           (unsigned long long)bytes, crcs, crcs == 1 ? "" : "s");
    for (size_t i = 0; i < ferry_tensors_metadata_count(t); i++) {
        const char *k, *v = ferry_tensors_metadata_at(t, i, &k);
        printf("  metadata ");
        cli_json_string(stdout, k);
        printf(" = ");
        cli_json_string(stdout, v);
        putchar('\n');
    }
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_info *ti = ferry_tensors_at(t, i);
        printf("  ");
        cli_json_string(stdout, ti->name);
        printf("  %s ", ferry_st_dtype_name(ti->dtype));
        print_shape(ti);
        printf("  %llu bytes at %llu", (unsigned long long)ti->nbytes,
               (unsigned long long)ti->offset);
        if (ti->has_crc)
            printf("  crc32c %08x", ti->crc);
        putchar('\n');
    }
    ferry_tensors_free(t);
    return 0;
}

int cmd_tensors_verify(int argc, char **argv)
{
    ferry_tensors *t;
    ferry_tensors_opts o = {.flags = FERRY_TENSORS_NO_VERIFY};
    if (open_or_fail(&t, argv[1], &o))
        return 1;
    size_t n = ferry_tensors_count(t), checked = 0, problems = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = ferry_tensors_verify(t, i);
        if (rc == FERRY_ENOENT)
            continue;
        checked++;
        if (rc < 0) {
            printf("damaged: %s\n", ferry_last_errmsg());
            problems++;
        }
    }
    printf("%s: header valid, %zu tensor%s, %zu CRC%s checked, %zu without a CRC (not "
           "checked), %zu problem%s\n",
           argv[1], n, n == 1 ? "" : "s", checked, checked == 1 ? "" : "s", n - checked, problems,
           problems == 1 ? "" : "s");
    ferry_tensors_free(t);
    return problems ? 1 : 0;
}

static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return h & 0x8000 ? -v : v;
}

static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void print_float(double v)
{
    if (isnan(v) || isinf(v))
        printf("\"%s\"", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    else
        printf("%.9g", v);
}

/* Element i, copied out (views need not be aligned). Packed sub-byte and F8
 * dtypes print their raw bits. */
static void print_value(const ferry_tensor_info *ti, uint64_t i)
{
    const uint8_t *p = ti->data;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32[2];
        double f64;
    } v;
    unsigned bits = ferry_st_dtype_bits(ti->dtype);
    if (bits < 8) {
        uint64_t bit = i * bits;
        unsigned x = 0;
        for (unsigned k = 0; k < bits; k++, bit++)
            x |= (unsigned)((p[bit / 8] >> (bit % 8)) & 1) << k;
        printf("%u", x);
        return;
    }
    memcpy(&v, p + i * (bits / 8), bits / 8);
    switch (ti->dtype) {
    case FERRY_ST_BOOL:
        printf("%s", v.u8 ? "true" : "false");
        break;
    case FERRY_ST_U8:
    case FERRY_ST_F8_E4M3:
    case FERRY_ST_F8_E5M2:
    case FERRY_ST_F8_E8M0:
        printf("%u", v.u8);
        break;
    case FERRY_ST_I8:
        printf("%d", v.i8);
        break;
    case FERRY_ST_U16:
        printf("%u", v.u16);
        break;
    case FERRY_ST_I16:
        printf("%d", v.i16);
        break;
    case FERRY_ST_U32:
        printf("%u", v.u32);
        break;
    case FERRY_ST_I32:
        printf("%d", v.i32);
        break;
    case FERRY_ST_U64:
        printf("%llu", (unsigned long long)v.u64);
        break;
    case FERRY_ST_I64:
        printf("%lld", (long long)v.i64);
        break;
    case FERRY_ST_F16:
        print_float(half_to_float(v.u16));
        break;
    case FERRY_ST_BF16:
        print_float(bf16_to_float(v.u16));
        break;
    case FERRY_ST_F32:
        print_float(v.f32[0]);
        break;
    case FERRY_ST_F64:
        if (isnan(v.f64) || isinf(v.f64))
            print_float(v.f64);
        else
            printf("%.17g", v.f64);
        break;
    case FERRY_ST_C64:
        putchar('[');
        print_float(v.f32[0]);
        putchar(',');
        print_float(v.f32[1]);
        putchar(']');
        break;
    default:
        printf("null");
    }
}

int cmd_tensors_cat(int argc, char **argv)
{
    uint64_t count = 10;
    int c;
    optind = 1;
    while ((c = getopt(argc, argv, "n:h")) != -1) {
        if (c == 'n' && !cli_u64("-n", optarg, 0, UINT64_MAX, &count))
            return EXIT_USAGE;
        if (c == 'h' || c == '?') {
            printf("usage: ferry cat FILE.safetensors [NAME...] [-n COUNT]\n\n"
                   "Prints the named tensors (all by default) as JSON objects: name, dtype,\n"
                   "shape, CRC, and the first COUNT values in C order (10 by default, 0 = all);\n"
                   "\"shown\" says how many of \"numel\" are printed. F8, F4 and F6 values are\n"
                   "printed as their raw bits. CRCs are checked first.\n");
            return c == 'h' ? 0 : EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return cli_error(EXIT_USAGE, "cat: FILE expected");
    ferry_tensors *t;
    ferry_tensors_opts o = {.names = (const char *const *)argv + optind + 1,
                            .nnames = (size_t)(argc - optind - 1)};
    if (!o.nnames)
        o.names = NULL;
    if (open_or_fail(&t, argv[optind], &o))
        return 1;
    for (size_t i = 0; i < ferry_tensors_count(t); i++) {
        const ferry_tensor_info *ti = ferry_tensors_at(t, i);
        uint64_t shown = count && count < ti->numel ? count : ti->numel;
        printf("{\"name\":");
        cli_json_string(stdout, ti->name);
        printf(",\"dtype\":\"%s\",\"shape\":", ferry_st_dtype_name(ti->dtype));
        print_shape(ti);
        if (ti->has_crc)
            printf(",\"crc32c\":\"%08x\"", ti->crc);
        printf(",\"numel\":%llu,\"shown\":%llu,\"values\":[", (unsigned long long)ti->numel,
               (unsigned long long)shown);
        for (uint64_t k = 0; k < shown; k++) {
            if (k)
                putchar(',');
            print_value(ti, k);
        }
        printf("]}\n");
    }
    ferry_tensors_free(t);
    return 0;
}
