/*
 * ferry tokens SOURCE OUT: writes the integers of one field of any source, in
 * order, as an llm.c token shard.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

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
    uint64_t written;
    if (ferry_source_open(argv[optind], &ds, &st) < 0)
        return cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
    int rc = ferry_pack_tokens(ds, st, field, out_dt, out, &written);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    if (rc < 0)
        return cli_error(rc == FERRY_EINVAL ? EXIT_USAGE : 1, "%s", ferry_last_errmsg());
    printf("%s: %llu tokens (%s, version %d)\n", out, (unsigned long long)written,
           ferry_dtype_name(out_dt), out_dt == FERRY_U16 ? 1 : 2);
    return 0;
}
