/*
 * Record shards from the command line: pack, ls, cat, verify, stat.
 */
#include "cli.h"

#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- ferry pack SOURCE OUTDIR ---- */

static void pack_usage(FILE *f)
{
    fprintf(f, "usage: ferry pack SOURCE OUTDIR [options]\n"
               "\n"
               "Reads every sample of SOURCE (any source: lines:, csv:, lmdb:, records:, ...)\n"
               "in order and writes them as record shards NAME-GGGGGGGG-00000-of-000NN.ferry\n"
               "and NAME.manifest in OUTDIR. Nothing a reader takes for whole appears before\n"
               "the end: shards are renamed into place and the manifest written last. A set\n"
               "already in OUTDIR is replaced: it stays whole until the new one is, and its\n"
               "files are removed after the switch (GGGGGGGG names each write's shards).\n"
               "An image folder (images:DIR) is packed as its encoded files, each checked to\n"
               "be a JPEG or PNG, with fields image, path and label; records:OUTDIR with\n"
               "pipeline=train|eval then decodes them. With --max-side, images longer than N\n"
               "on either side are stored re-encoded (a JPEG of the whole image resized so\n"
               "that its longer side is N); the others are stored as they are.\n"
               "\n"
               "options:\n"
               "  --name NAME        shard name prefix (default: data)\n"
               "  --shard-size BYTES start a new shard past this size (default 1 GiB; K, M, G)\n"
               "  --shard-records N  ... or past this many records\n"
               "  --zstd LEVEL       compress each record with zstd, 1..19 (default: none)\n"
               "  --workers N        threads reading the source, 0..1024 (default 2)\n"
               "  --max-side N       image sources: re-encode images over N pixels on their\n"
               "                     longer side to N (labels and paths kept), 1..16384\n"
               "  --quality Q        with --max-side: JPEG quality, 1..100 (default 90)\n"
               "  --on-error P       'fail' (default): stop at the first bad sample, writing\n"
               "                     nothing; 'skip': leave bad samples out, name every one\n"
               "                     on stderr, and pack the rest\n"
               "  --skip-budget N    with --on-error skip: stop past N bad samples (default:\n"
               "                     no limit, so that one run lists every bad input)\n"
               "  --no-progress      no progress bar\n"
               "  -h, --help         this text\n");
}

static bool parse_size(const char *opt, const char *s, uint64_t *out)
{
    char buf[64];
    size_t n = strlen(s);
    uint64_t mul = 1;
    if (n && n < sizeof buf) {
        char last = s[n - 1];
        mul = last == 'K' || last == 'k'   ? 1ull << 10
              : last == 'M' || last == 'm' ? 1ull << 20
              : last == 'G' || last == 'g' ? 1ull << 30
                                           : 1;
        memcpy(buf, s, n + 1);
        if (mul > 1)
            buf[n - 1] = 0;
        s = buf;
    }
    uint64_t v;
    if (!cli_u64(opt, s, 1, UINT64_MAX / mul, &v))
        return false;
    *out = v * mul;
    return true;
}

/* Every bad sample a pack leaves out, named on stderr as the workers meet it. */
static pthread_mutex_t skip_lock = PTHREAD_MUTEX_INITIALIZER;

static void pack_progress(uint64_t records, void *arg)
{
    cli_progress_update(arg, records, "records");
}

static void pack_on_skip(uint64_t epoch, uint64_t index, int rc, const char *msg, void *arg)
{
    (void)epoch;
    (void)rc;
    (void)arg;
    pthread_mutex_lock(&skip_lock);
    if (index == UINT64_MAX)
        fprintf(stderr, "\rferry: pack: skipped: %s\n", msg);
    else
        fprintf(stderr, "\rferry: pack: skipped sample %llu: %s\n", (unsigned long long)index, msg);
    pthread_mutex_unlock(&skip_lock);
}

int cmd_pack(int argc, char **argv)
{
    enum {
        O_NAME = 256,
        O_SIZE,
        O_RECS,
        O_ZSTD,
        O_WORKERS,
        O_NOPROG,
        O_ONERR,
        O_BUDGET,
        O_MAXSIDE,
        O_QUALITY
    };
    static const struct option opts[] = {{"name", required_argument, 0, O_NAME},
                                         {"shard-size", required_argument, 0, O_SIZE},
                                         {"shard-records", required_argument, 0, O_RECS},
                                         {"zstd", required_argument, 0, O_ZSTD},
                                         {"workers", required_argument, 0, O_WORKERS},
                                         {"no-progress", no_argument, 0, O_NOPROG},
                                         {"on-error", required_argument, 0, O_ONERR},
                                         {"skip-budget", required_argument, 0, O_BUDGET},
                                         {"max-side", required_argument, 0, O_MAXSIDE},
                                         {"quality", required_argument, 0, O_QUALITY},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int on_error = FERRY_ON_ERROR_FAIL;
    uint64_t budget = UINT64_MAX;
    ferry_writer_opts w;
    memset(&w, 0, sizeof w);
    uint64_t v, workers = 2, max_side = 0, quality = 0;
    bool progress = true;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_NAME:
            w.name = optarg;
            break;
        case O_SIZE:
            if (!parse_size("--shard-size", optarg, &w.shard_bytes))
                return EXIT_USAGE;
            break;
        case O_RECS:
            if (!cli_u64("--shard-records", optarg, 1, UINT64_MAX, &w.shard_records))
                return EXIT_USAGE;
            break;
        case O_ZSTD:
            if (!cli_u64("--zstd", optarg, 1, 19, &v))
                return EXIT_USAGE;
            w.zstd_level = (int)v;
            break;
        case O_WORKERS:
            if (!cli_u64("--workers", optarg, 0, 1024, &workers))
                return EXIT_USAGE;
            break;
        case O_NOPROG:
            progress = false;
            break;
        case O_ONERR:
            if (!strcmp(optarg, "fail"))
                on_error = FERRY_ON_ERROR_FAIL;
            else if (!strcmp(optarg, "skip"))
                on_error = FERRY_ON_ERROR_SKIP;
            else
                return cli_error(EXIT_USAGE, "--on-error: \"%s\" is not 'fail' or 'skip'", optarg);
            break;
        case O_BUDGET:
            if (!cli_u64("--skip-budget", optarg, 0, UINT64_MAX, &budget))
                return EXIT_USAGE;
            break;
        case O_MAXSIDE:
            if (!cli_u64("--max-side", optarg, 1, 16384, &max_side))
                return EXIT_USAGE;
            break;
        case O_QUALITY:
            if (!cli_u64("--quality", optarg, 1, 100, &quality))
                return EXIT_USAGE;
            break;
        case 'h':
            pack_usage(stdout);
            return 0;
        default:
            return cli_bad_option("pack", argv, opts);
        }
    }
    if (optind != argc - 2) {
        cli_error(EXIT_USAGE, "pack: SOURCE and OUTDIR expected");
        pack_usage(stderr);
        return EXIT_USAGE;
    }
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    int rc, status = 0;
    /* An image folder is packed as its encoded files (checked to be images), unless
     * the source asks for a pipeline: the shards then hold decoded tensors. */
    const char *spec = argv[optind];
    char spec_buf[4200];
    if (quality && !max_side)
        return cli_error(EXIT_USAGE, "pack: --quality applies only with --max-side");
    if (max_side) {
        /* the images source re-encodes (max_side= on images in mode none) */
        const char *pl = strstr(spec, ",pipeline=");
        if (pl ? strncmp(pl, ",pipeline=none", 14) != 0 : strncmp(spec, "images:", 7) != 0)
            return cli_error(EXIT_USAGE,
                             "pack: --max-side applies to images packed as encoded files "
                             "(images:DIR, or a source with ,pipeline=none), not to %s",
                             argv[optind]);
        int k = quality ? snprintf(spec_buf, sizeof spec_buf, "%s,max_side=%llu,quality=%llu", spec,
                                   (unsigned long long)max_side, (unsigned long long)quality)
                        : snprintf(spec_buf, sizeof spec_buf, "%s,max_side=%llu", spec,
                                   (unsigned long long)max_side);
        if (k >= (int)sizeof spec_buf)
            return cli_error(EXIT_USAGE, "pack: SOURCE is too long");
        spec = spec_buf;
    }
    if (ferry_source_open_flags(spec, FERRY_SOURCE_ENCODED, &ds, &st) < 0)
        return cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
    cli_folder_note(ds, argv[optind]);
    w.dir = argv[optind + 1];
    cli_progress bar;
    uint64_t t0 = ferry_now_ns();
    cli_progress_start(&bar, "pack", ds ? ferry_dataset_len(ds) : 0, progress);
    ferry_pack_opts po = {.writer = &w,
                          .num_workers = (uint32_t)workers,
                          .on_error = on_error,
                          .skip_budget = budget,
                          .on_skip = pack_on_skip,
                          .progress = pack_progress,
                          .progress_arg = &bar};
    ferry_pack_result res;
    rc = ferry_pack(ds, st, &po, &res);
    cli_progress_end(&bar);
    if (rc < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    double secs = (double)(ferry_now_ns() - t0) / 1e9;
    printf("%s: %llu records, %.1f MB of fields, in %.3f s (%.0f MB/s)\n", w.dir,
           (unsigned long long)res.records, (double)res.bytes / 1e6, secs,
           secs > 0 ? (double)res.bytes / 1e6 / secs : 0);
    if (ds && ferry_tokens_dropped(ds))
        printf("note: %llu tokens are in no window (each shard's tail after its last whole "
               "window) and are not packed\n",
               (unsigned long long)ferry_tokens_dropped(ds));
    if (res.skipped)
        printf("%s: %llu bad samples left out (each named above)\n", w.dir,
               (unsigned long long)res.skipped);
    if (res.truncated)
        printf("%s: %llu samples were longer than their field and were cut (lines: raise max=, "
               "or set error_long=1 to make them errors)\n",
               w.dir, (unsigned long long)res.truncated);
done:
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    return status;
}

/* ---- Shards of a path: a .ferry file, or a directory of them ---- */

typedef struct shard_list {
    char **paths;
    size_t n;
} shard_list;

static void list_free(shard_list *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->paths[i]);
    free(s->paths);
}

static int list_shards(const char *path, shard_list *out)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    /* a remote location (s3://, http(s)://) is a shard when it names one, else a set */
    bool remote = strstr(path, "://") != NULL;
    size_t len = strlen(path);
    bool one = remote && len > 6 && !strcmp(path + len - 6, ".ferry");
    bool manifest = len > 9 && !strcmp(path + len - 9, ".manifest"); /* names its set */
    if (!remote && stat(path, &st) != 0)
        return cli_error(EXIT_USAGE, "%s: no such file or directory", path);
    if (one || (!remote && !manifest && !S_ISDIR(st.st_mode))) {
        out->paths = malloc(sizeof *out->paths);
        out->paths[0] = strdup(path);
        out->n = 1;
        return 0;
    }
    /* the set's shards as a reader takes them: its manifest's, not files an
     * earlier write left */
    char **paths;
    size_t n;
    if (ferry_records_shards(path, &paths, &n) < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    out->paths = malloc((n ? n : 1) * sizeof *out->paths);
    for (size_t i = 0; out->paths && i < n; i++)
        out->paths[out->n++] = strdup(paths[i]);
    ferry_records_shards_free(paths, n);
    if (!out->paths)
        return cli_error(1, "%s: out of memory", path);
    if (out->n == 0)
        return cli_error(1, "%s: no .ferry shards", path);
    return 0;
}

static void print_schema(const ferry_record_file *f)
{
    for (int i = 0; i < ferry_record_file_nfields(f); i++) {
        const ferry_field *fi = ferry_record_file_field(f, i);
        printf("  field %-12s %s [", fi->name, ferry_dtype_name(fi->dtype));
        for (int d = 0; d < fi->ndim; d++)
            printf("%s%s%lld", d ? ", " : "", d == 0 && fi->variable ? "<=" : "",
                   (long long)fi->shape[d]);
        printf("]\n");
    }
}

/* The schema as a JSON array of {"name", "dtype", "shape", "variable"}. */
static void print_schema_json(const ferry_record_file *f)
{
    putchar('[');
    for (int i = 0; i < ferry_record_file_nfields(f); i++) {
        const ferry_field *fi = ferry_record_file_field(f, i);
        printf("%s{\"name\": ", i ? ", " : "");
        cli_json_string(stdout, fi->name);
        printf(", \"dtype\": \"%s\", \"shape\": [", ferry_dtype_name(fi->dtype));
        for (int d = 0; d < fi->ndim; d++)
            printf("%s%lld", d ? ", " : "", (long long)fi->shape[d]);
        printf("], \"variable\": %s}", fi->variable ? "true" : "false");
    }
    putchar(']');
}

/* "COMMAND DIR|FILE [--json]": the path and whether --json was given; 0 to go on,
 * else the exit status (after printing usage for -h/--help or a bad call). */
static int path_args(int argc, char **argv, const char *usage, const char **path, bool *json)
{
    *path = NULL;
    *json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--json")) {
            *json = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_error(EXIT_USAGE, "%s: unknown option \"%s\" (see --help)", argv[0], argv[i]);
            return EXIT_USAGE;
        } else if (*path) {
            cli_error(EXIT_USAGE, "%s: one DIR or FILE expected", argv[0]);
            return EXIT_USAGE;
        } else {
            *path = argv[i];
        }
    }
    if (!*path) {
        cli_error(EXIT_USAGE, "%s: DIR or FILE is missing", argv[0]);
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_ls(int argc, char **argv)
{
    if (argc == 2 && cli_is_safetensors(argv[1]))
        return cmd_tensors_ls(argc, argv);
    for (int i = 1; i < argc; i++)
        if (cli_is_db_source(argv[i]))
            return cmd_db_ls(argc, argv);
    const char *path;
    bool json;
    int a = path_args(argc, argv,
                      "usage: ferry ls DIR|FILE [--json]\n\n"
                      "Lists record shards: records, bytes, fields. --json prints one object:\n"
                      "{\"shards\": [{\"path\", \"records\", \"bytes\"}], \"fields\": [...]}.\n",
                      &path, &json);
    if (a)
        return a < 0 ? 0 : a;
    shard_list s;
    int status = list_shards(path, &s);
    if (json && status == 0)
        printf("{\"shards\": [");
    for (size_t i = 0; i < s.n && status == 0; i++) {
        ferry_record_file *f;
        if (ferry_record_file_open(&f, s.paths[i], 0) < 0) {
            fflush(stdout);
            status = cli_error(1, "%s", ferry_last_errmsg());
            break;
        }
        if (json) {
            printf("%s{\"path\": ", i ? ", " : "");
            cli_json_string(stdout, s.paths[i]);
            printf(", \"records\": %llu, \"bytes\": %lld}",
                   (unsigned long long)ferry_record_file_count(f),
                   (long long)ferry_record_file_bytes(f));
            if (i + 1 == s.n) {
                printf("], \"fields\": ");
                print_schema_json(f);
                printf("}\n");
            }
        } else {
            printf("%s  %llu records  %lld bytes\n", s.paths[i],
                   (unsigned long long)ferry_record_file_count(f),
                   (long long)ferry_record_file_bytes(f));
            if (i == 0)
                print_schema(f);
        }
        ferry_record_file_free(f);
    }
    list_free(&s);
    return status;
}

static void cat_usage(FILE *f)
{
    fprintf(f, "usage: ferry cat FILE [-f FIRST] [-n COUNT] [options]\n"
               "\n"
               "Prints records FIRST.. of a shard as JSON objects, one a line (10 by default).\n"
               "\n"
               "options:\n"
               "  -f FIRST      the first record (default 0)\n"
               "  -n COUNT      records to print (default 10)\n"
               "  --base64      bytes that are not text as base64 (default: their size,\n"
               "                format and first bytes)\n"
               "  --full        every element of an array (default: past 16 elements,\n"
               "                dtype, shape, the first 8, min, max, mean)\n"
               "  -h, --help    this text\n");
}

int cmd_cat(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-' && cli_is_safetensors(argv[i]))
            return cmd_tensors_cat(argc, argv);
    enum { O_BASE64 = 256, O_FULL };
    static const struct option opts[] = {{"base64", no_argument, 0, O_BASE64},
                                         {"full", no_argument, 0, O_FULL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    uint64_t from = 0, n = 10;
    bool base64 = false, full = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!cli_u64("-f", optarg, 0, UINT64_MAX, &from))
                return EXIT_USAGE;
            break;
        case 'n':
            if (!cli_u64("-n", optarg, 0, UINT64_MAX, &n))
                return EXIT_USAGE;
            break;
        case O_BASE64:
            base64 = true;
            break;
        case O_FULL:
            full = true;
            break;
        case 'h':
            cat_usage(stdout);
            return 0;
        default:
            return cli_bad_option("cat", argv, opts);
        }
    }
    cli_print_options(base64, full);
    if (optind != argc - 1)
        return cli_error(EXIT_USAGE, "cat: one shard FILE expected");
    ferry_record_file *f;
    if (ferry_record_file_open(&f, argv[optind], FERRY_RECORD_RECOVER) < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    int nf = ferry_record_file_nfields(f), status = 0;
    const ferry_field *fields[FERRY_MAX_FIELDS];
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    for (int i = 0; i < nf; i++) {
        fields[i] = ferry_record_file_field(f, i);
        total += ferry_field_nbytes(fields[i]);
    }
    uint8_t *buf = malloc(total ? total : 1);
    for (int i = 0, off = 0; i < nf; i++, off += (int)ferry_field_nbytes(fields[i - 1]))
        data[i] = buf + off;
    ferry_ctx *ctx;
    ferry_ctx_create(&ctx, 0, 0);
    ferry_sample s = {nf, data, len, {0}};
    for (uint64_t i = from; i < ferry_record_file_count(f) && i - from < n; i++) {
        if (ferry_record_file_read(f, i, &s, ctx) < 0) {
            fflush(stdout);
            status = cli_error(1, "%s", ferry_last_errmsg());
            break;
        }
        cli_print_record(nf, fields, data, len, true);
    }
    ferry_ctx_free(ctx);
    free(buf);
    ferry_record_file_free(f);
    return status;
}

static void print_problem(const char *message, void *arg)
{
    (void)arg;
    /* notes (files of an earlier write, not part of the set) are no damage */
    printf("%s%s\n", strncmp(message, "note: ", 6) ? "damaged: " : "", message);
}

/* --json: the problems as a JSON array, as they come. */
static void json_problem(const char *message, void *arg)
{
    uint64_t *n = arg;
    printf("%s", (*n)++ ? ", " : "");
    cli_json_string(stdout, message);
}

/* Whether a file starts as a ferry record shard does (docs/record-format.md). */
static bool looks_like_shard(const char *path)
{
    char head[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return true; /* let the verifier say why it cannot be read */
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n == sizeof head && !memcmp(head, "FERRYREC", 8);
}

int cmd_verify(int argc, char **argv)
{
    if (argc == 2 && cli_is_safetensors(argv[1]))
        return cmd_tensors_verify(argc, argv);
    for (int i = 1; i < argc; i++)
        if (cli_is_db_source(argv[i]))
            return cmd_db_verify(argc, argv);
    const char *path;
    bool json;
    int a =
        path_args(argc, argv,
                  "usage: ferry verify DIR|FILE [--json]\n\n"
                  "Checks a shard set by its manifest (or one shard): every record's CRC, every\n"
                  "footer, and the manifest's counts, sizes and file CRCs. Prints each problem\n"
                  "with its file, record and offset; exits 1 if there is any. --json prints\n"
                  "one object: {\"path\", \"records\", \"problems\": [...], \"ok\"}.\n",
                  &path, &json);
    if (a)
        return a < 0 ? 0 : a;
    struct stat sb;
    size_t plen = strlen(path);
    bool manifest = plen > 9 && !strcmp(path + plen - 9, ".manifest"); /* names its set */
    if (!manifest && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && !looks_like_shard(path)) {
        /* not damage: something else than a shard */
        char msg[1024];
        snprintf(msg, sizeof msg,
                 "%s is not a ferry record shard (it does not start with FERRYREC): verify "
                 "checks the shards and shard sets that ferry pack writes",
                 path);
        if (json) {
            printf("{\"path\": ");
            cli_json_string(stdout, path);
            printf(", \"records\": 0, \"problems\": [");
            cli_json_string(stdout, msg);
            printf("], \"ok\": false, \"shard\": false}\n");
            return 1;
        }
        return cli_error(1, "%s", msg);
    }
    uint64_t problems = 0, records = 0, listed = 0;
    if (json) {
        printf("{\"path\": ");
        cli_json_string(stdout, path);
        printf(", \"problems\": [");
    }
    if (ferry_records_verify(path, json ? json_problem : print_problem, json ? &listed : NULL,
                             &problems, &records) < 0) {
        if (!json)
            return cli_error(1, "%s", ferry_last_errmsg());
        printf("%s", listed ? ", " : "");
        cli_json_string(stdout, ferry_last_errmsg());
        printf("], \"records\": 0, \"ok\": false}\n");
        return 1;
    }
    if (json) {
        printf("], \"records\": %llu, \"ok\": %s}\n", (unsigned long long)records,
               problems ? "false" : "true");
        return problems ? 1 : 0;
    }
    printf("%s: %llu records checked, %llu problem%s\n", path, (unsigned long long)records,
           (unsigned long long)problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}

int cmd_stat(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (cli_is_db_source(argv[i]))
            return cmd_db_stat(argc, argv);
    const char *path;
    bool json;
    int a = path_args(argc, argv,
                      "usage: ferry stat DIR|FILE [--json]\n\nSummarises record shards: shards, "
                      "records, bytes, bytes a record, fields. --json prints one object:\n"
                      "{\"path\", \"shards\", \"records\", \"bytes\", \"bytes_per_record\", "
                      "\"fields\"}.\n",
                      &path, &json);
    if (a)
        return a < 0 ? 0 : a;
    shard_list s;
    int status = list_shards(path, &s);
    uint64_t records = 0, bytes = 0;
    for (size_t i = 0; i < s.n && status == 0; i++) {
        ferry_record_file *f;
        if (ferry_record_file_open(&f, s.paths[i], 0) < 0) {
            status = cli_error(1, "%s", ferry_last_errmsg());
            break;
        }
        records += ferry_record_file_count(f);
        bytes += ferry_record_file_bytes(f);
        if (i + 1 == s.n && json) {
            printf("{\"path\": ");
            cli_json_string(stdout, path);
            printf(", \"shards\": %zu, \"records\": %llu, \"bytes\": %llu, "
                   "\"bytes_per_record\": %.1f, \"fields\": ",
                   s.n, (unsigned long long)records, (unsigned long long)bytes,
                   records ? (double)bytes / (double)records : 0.0);
            print_schema_json(f);
            printf("}\n");
        } else if (i + 1 == s.n) {
            printf("%s: %zu shard%s, %llu records, %llu bytes, %.1f bytes a record\n", path, s.n,
                   s.n == 1 ? "" : "s", (unsigned long long)records, (unsigned long long)bytes,
                   records ? (double)bytes / (double)records : 0.0);
            print_schema(f);
        }
        ferry_record_file_free(f);
    }
    list_free(&s);
    return status;
}
