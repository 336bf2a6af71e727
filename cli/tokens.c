/*
 * ferry tokens SOURCE OUT: writes the integers of one field of any source, in
 * order, as an llm.c token shard.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 65536

static void tokens_usage(FILE *f)
{
    fprintf(f, "usage: ferry tokens SOURCE OUT [options]\n"
               "\n"
               "Writes the token ids of SOURCE, sample after sample, as one llm.c token shard\n"
               "OUT (header 20240520, version 1 for uint16 or 2 for uint32 tokens). Each\n"
               "sample gives every element of its field, in order (a variable field: its\n"
               "length). OUT is replaced whole or not at all.\n"
               "\n"
               "options:\n"
               "  --field NAME   the field of token ids (default: the source's only integer\n"
               "                 field)\n"
               "  --dtype T      u16 (default) or u32; a token that does not fit is an error\n"
               "  -h, --help     this text\n"
               "\n"
               "example: ferry tokens npy:train_ids.npy train_000000.bin\n");
}

/* Element k of a field's data as an integer; false for a float dtype. */
static bool int_at(ferry_dtype dt, const void *p, size_t k, int64_t *v, uint64_t *u, bool *neg)
{
    const unsigned char *b = (const unsigned char *)p + k * ferry_dtype_size(dt);
    *neg = false;
    switch (dt) {
#define S(T)                                                                                       \
    do {                                                                                           \
        T x;                                                                                       \
        memcpy(&x, b, sizeof x);                                                                   \
        *v = (int64_t)x;                                                                           \
        *neg = *v < 0;                                                                             \
        *u = (uint64_t)*v;                                                                         \
        return true;                                                                               \
    } while (0)
#define U(T)                                                                                       \
    do {                                                                                           \
        T x;                                                                                       \
        memcpy(&x, b, sizeof x);                                                                   \
        *u = (uint64_t)x;                                                                          \
        *v = (int64_t)x;                                                                           \
        return true;                                                                               \
    } while (0)
    case FERRY_I8:
        S(int8_t);
    case FERRY_I16:
        S(int16_t);
    case FERRY_I32:
        S(int32_t);
    case FERRY_I64:
        S(int64_t);
    case FERRY_U8:
    case FERRY_BOOL:
        U(uint8_t);
    case FERRY_U16:
        U(uint16_t);
    case FERRY_U32:
        U(uint32_t);
    case FERRY_U64:
        U(uint64_t);
    default:
        return false;
    }
#undef S
#undef U
}

static bool is_int(ferry_dtype dt)
{
    int64_t v;
    uint64_t u;
    bool neg;
    uint64_t zero = 0;
    return int_at(dt, &zero, 0, &v, &u, &neg);
}

int cmd_tokens(int argc, char **argv)
{
    enum { O_FIELD = 256, O_DTYPE };
    static const struct option opts[] = {{"field", required_argument, 0, O_FIELD},
                                         {"dtype", required_argument, 0, O_DTYPE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *field = NULL;
    ferry_dtype out_dt = FERRY_U16;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_FIELD:
            field = optarg;
            break;
        case O_DTYPE:
            if (!strcmp(optarg, "u16"))
                out_dt = FERRY_U16;
            else if (!strcmp(optarg, "u32"))
                out_dt = FERRY_U32;
            else
                return cli_error(EXIT_USAGE, "tokens: --dtype \"%s\" is not u16 or u32", optarg);
            break;
        case 'h':
            tokens_usage(stdout);
            return 0;
        default:
            tokens_usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind != argc - 2) {
        cli_error(EXIT_USAGE, "tokens: SOURCE and OUT expected");
        tokens_usage(stderr);
        return EXIT_USAGE;
    }
    const char *out = argv[optind + 1];
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    ferry_stream_iter *it = NULL;
    ferry_ctx *ctx = NULL;
    ferry_tokens_writer *w = NULL;
    uint8_t *buf = NULL;
    uint32_t *chunk = NULL;
    int status = 0, rc;
    if (ferry_source_open(argv[optind], &ds, &st) < 0)
        return cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    const ferry_field *fields[FERRY_MAX_FIELDS];
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    int f = -1, nint = 0;
    for (int k = 0; k < nf; k++) {
        fields[k] = ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k);
        total += ferry_field_nbytes(fields[k]);
        if (field ? !strcmp(fields[k]->name, field) : is_int(fields[k]->dtype)) {
            f = k;
            nint++;
        }
    }
    if (f < 0 || (!field && nint > 1)) {
        status = cli_error(EXIT_USAGE,
                           field ? "tokens: the source has no field \"%s\""
                                 : "tokens: %s: name the field of token ids with --field",
                           field ? field : argv[optind]);
        goto done;
    }
    if (!is_int(fields[f]->dtype)) {
        status = cli_error(EXIT_USAGE, "tokens: field \"%s\" is %s, not integers", fields[f]->name,
                           ferry_dtype_name(fields[f]->dtype));
        goto done;
    }
    buf = malloc(total ? total : 1);
    chunk = malloc(CHUNK * sizeof *chunk);
    if (!buf || !chunk || ferry_ctx_create(&ctx, 0, 0) < 0) {
        status = cli_error(1, "out of memory");
        goto done;
    }
    for (int k = 0, off = 0; k < nf; k++) {
        data[k] = buf + off;
        off += (int)ferry_field_nbytes(fields[k]);
    }
    ferry_sample s = {nf, data, len, {0}};
    if ((st && (rc = ferry_stream_open(st, 0, 1, 0, &it)) < 0) ||
        (rc = ferry_tokens_writer_open(&w, out, out_dt)) < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    uint64_t limit = out_dt == FERRY_U16 ? UINT16_MAX : UINT32_MAX, written = 0;
    uint64_t count = ds ? ferry_dataset_len(ds) : UINT64_MAX;
    size_t held = 0, row = ferry_field_row_elems(fields[f]), whole = 1;
    for (int d = 0; d < fields[f]->ndim; d++)
        whole *= (size_t)fields[f]->shape[d];
    for (uint64_t i = 0; i < count; i++) {
        memset(len, 0, sizeof len);
        rc = ds ? ferry_dataset_get(ds, i, &s, ctx) : ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END)
            break;
        if (rc == FERRY_BREAK) {
            i--;
            continue;
        }
        if (rc < 0) {
            status = cli_error(1, "%s", ferry_last_errmsg());
            goto done;
        }
        size_t n = fields[f]->variable ? (size_t)len[f] * row : whole;
        for (size_t k = 0; k < n; k++) {
            int64_t v;
            uint64_t u;
            bool neg;
            int_at(fields[f]->dtype, data[f], k, &v, &u, &neg);
            if (neg || u > limit) {
                status = cli_error(1,
                                   "tokens: sample %llu, element %zu: %lld does not fit %s%s "
                                   "(%s is left as it was)",
                                   (unsigned long long)i, k, (long long)v, ferry_dtype_name(out_dt),
                                   out_dt == FERRY_U16 && !neg ? "; try --dtype u32" : "", out);
                goto done;
            }
            if (out_dt == FERRY_U16)
                ((uint16_t *)chunk)[held++] = (uint16_t)u;
            else
                chunk[held++] = (uint32_t)u;
            if (held == CHUNK) {
                if ((rc = ferry_tokens_writer_append(w, chunk, held)) < 0) {
                    status = cli_error(1, "%s", ferry_last_errmsg());
                    goto done;
                }
                written += held;
                held = 0;
            }
        }
    }
    if (held && (rc = ferry_tokens_writer_append(w, chunk, held)) < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    written += held;
    rc = ferry_tokens_writer_commit(w);
    w = NULL;
    if (rc < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    printf("%s: %llu tokens (%s, version %d)\n", out, (unsigned long long)written,
           ferry_dtype_name(out_dt), out_dt == FERRY_U16 ? 1 : 2);
done:
    ferry_tokens_writer_abort(w);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    free(chunk);
    free(buf);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    return status;
}
