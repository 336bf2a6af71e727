/*
 * ferry head SOURCE: prints the first records of any source.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void head_usage(FILE *f)
{
    fprintf(f, "usage: ferry head SOURCE [options]\n"
               "\n"
               "Prints the first records of SOURCE, one a line: the text itself for a source\n"
               "of one text field (lines:), else a JSON object per record.\n"
               "\n"
               "options:\n"
               "  -n N          records to print, 0..1000000000 (default 10)\n"
               "  --json        JSON objects even for a text source\n"
               "  --base64      in JSON, bytes that are not text as base64 (default: their\n"
               "                size, format and first bytes)\n"
               "  --full        in JSON, every element of an array (default: past 16\n"
               "                elements, dtype, shape, the first 8, min, max, mean)\n"
               "  -h, --help    this text\n");
}

int cmd_head(int argc, char **argv)
{
    enum { O_JSON = 256, O_BASE64, O_FULL };
    static const struct option opts[] = {{"json", no_argument, 0, O_JSON},
                                         {"base64", no_argument, 0, O_BASE64},
                                         {"full", no_argument, 0, O_FULL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool base64 = false, full = false;
    uint64_t n = 10;
    bool force_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!cli_u64("-n", optarg, 0, 1000000000, &n))
                return EXIT_USAGE;
            break;
        case O_JSON:
            force_json = true;
            break;
        case O_BASE64:
            base64 = true;
            break;
        case O_FULL:
            full = true;
            break;
        case 'h':
            head_usage(stdout);
            return 0;
        default:
            return cli_bad_option("head", argv, opts);
        }
    }
    if (optind != argc - 1) {
        cli_error(EXIT_USAGE, "head: one SOURCE expected");
        head_usage(stderr);
        return EXIT_USAGE;
    }
    cli_print_options(base64, full);
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    ferry_stream_iter *it = NULL;
    ferry_ctx *ctx = NULL;
    uint8_t *buf = NULL;
    int status = 0, rc;
    if (ferry_source_open(argv[optind], &ds, &st) < 0)
        return cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
    cli_folder_note(ds, argv[optind]);
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    const ferry_field *fields[FERRY_MAX_FIELDS];
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    int widest = 0;
    for (int f = 0; f < nf; f++) { /* each field 64-byte aligned, as in a batch */
        fields[f] = ds ? ferry_dataset_field(ds, f) : ferry_stream_field(st, f);
        total += (ferry_field_nbytes(fields[f]) + 63) & ~(size_t)63;
        if (ferry_field_nbytes(fields[f]) > ferry_field_nbytes(fields[widest]))
            widest = f;
    }
    bool json = force_json || nf != 1 || fields[0]->dtype != FERRY_U8 || !fields[0]->variable;
    buf = malloc(total ? total : 1);
    if (!buf || ferry_ctx_create(&ctx, 0, 0) < 0) {
        status = cli_error(1, "%s: out of memory for a sample of %zu bytes (field \"%s\": %zu)",
                           argv[optind], total, fields[widest]->name,
                           ferry_field_nbytes(fields[widest]));
        goto done;
    }
    for (size_t f = 0, off = 0; f < (size_t)nf; f++) {
        data[f] = buf + off;
        off += (ferry_field_nbytes(fields[f]) + 63) & ~(size_t)63;
    }
    ferry_sample s = {nf, data, len, {0}};
    if (st && (rc = ferry_stream_open(st, 0, 1, 0, &it)) < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    uint64_t count = ds ? ferry_dataset_len(ds) : UINT64_MAX;
    for (uint64_t i = 0; i < n && i < count; i++) {
        memset(len, 0, sizeof len);
        rc = ds ? ferry_dataset_get(ds, i, &s, ctx) : ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END)
            break;
        if (rc == FERRY_BREAK) {
            i--;
            continue;
        }
        if (rc < 0) {
            fflush(stdout);
            status = cli_error(1, "%s", ferry_last_errmsg());
            break;
        }
        cli_print_record(nf, fields, data, len, json);
    }
    if (ctx && ferry_ctx_truncated(ctx)) {
        fflush(stdout);
        fprintf(stderr,
                "ferry: %llu of the records shown were longer than their field and were cut "
                "(lines: raise max=, or set error_long=1 to make them errors)\n",
                (unsigned long long)ferry_ctx_truncated(ctx));
    }
done:
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    free(buf);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    return status;
}
