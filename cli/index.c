/*
 * ferry index FILE: writes the line index beside a text file; ferry index
 * minidb:FILE the saved index of a minidb's entries.
 */
#include "cli.h"

#include <getopt.h>
#include <string.h>

static void index_usage(FILE *f)
{
    fprintf(f, "usage: ferry index FILE [options]\n"
               "       ferry index minidb:FILE [options]\n"
               "\n"
               "Writes FILE.fidx, the offset of every line of FILE, so that the lines can be\n"
               "read in any order (source lines:FILE); of a Caffe2 minidb, the offset of every\n"
               "entry, so that opening minidb:FILE reads the index instead of scanning the file.\n"
               "The index records FILE's size, time and a hash of its ends: a changed FILE\n"
               "makes the index stale, and reading says so.\n"
               "\n"
               "options:\n"
               "  -o, --output PATH  write the index to PATH instead of FILE.fidx\n"
               "  --no-progress      no progress bar\n"
               "  -h, --help         this text\n");
}

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
    cli_progress_update(arg, done >> 20, "MiB");
    (void)total;
}

int cmd_index(int argc, char **argv)
{
    enum { O_NOPROG = 256 };
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"no-progress", no_argument, 0, O_NOPROG},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *output = NULL;
    bool progress = true;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case O_NOPROG:
            progress = false;
            break;
        case 'h':
            index_usage(stdout);
            return 0;
        default:
            return cli_bad_option("index", argv, opts);
        }
    }
    if (optind != argc - 1) {
        cli_error(EXIT_USAGE, "index: one FILE expected");
        index_usage(stderr);
        return EXIT_USAGE;
    }
    const char *path = argv[optind];
    cli_progress bar;
    uint64_t size = 0, lines = 0, t0 = ferry_now_ns();
    ferry_line_index *ix;
    if (!strncmp(path, "minidb:", 7)) {
        uint64_t entries = 0;
        int rc = ferry_minidb_index_build(path + 7, output, &entries);
        if (rc < 0)
            return cli_error(1, "%s", ferry_last_errmsg());
        double secs = (double)(ferry_now_ns() - t0) / 1e9;
        printf("%s: %llu entries, indexed in %.3f s\n", path + 7, (unsigned long long)entries,
               secs);
        return 0;
    }
    cli_progress_start(&bar, "index", 0, progress);
    int rc = ferry_line_index_build(path, output, on_progress, &bar, &lines);
    cli_progress_end(&bar);
    if (rc < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    double secs = (double)(ferry_now_ns() - t0) / 1e9;
    if (ferry_line_index_open(&ix, path, output, 0) == 0) { /* read it back: it is whole */
        size = ferry_line_index_source_size(ix);
        ferry_line_index_free(ix);
    } else {
        return cli_error(1, "%s", ferry_last_errmsg());
    }
    printf("%s: %llu lines, %llu bytes, indexed in %.3f s (%.0f MB/s)\n", path,
           (unsigned long long)lines, (unsigned long long)size, secs,
           secs > 0 ? (double)size / secs / 1e6 : 0);
    return 0;
}
