/*
 * ferry - pack, check and benchmark datasets for training. This file only
 * dispatches: each command lives in its own file, the helpers they share in
 * util.c.
 */
#include "cli.h"

#include <getopt.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: ferry COMMAND [options]\n"
               "\n"
               "commands:\n"
               "  bench SOURCE [options]   run a loading pipeline and report its throughput\n"
               "  report TRACE [-o HTML]   summarise a trace (bench --trace) or write a page\n"
               "  index FILE               write the line index of a text file (FILE.fidx)\n"
               "  index minidb:FILE        write the saved index of a minidb's entries\n"
               "  head SOURCE [-n N]       print the first records of a source\n"
               "  pack SOURCE OUTDIR       write a source as record shards and a manifest\n"
               "  ls DIR|FILE              list record shards\n"
               "  cat FILE [-f I] [-n N]   print records of a shard\n"
               "  verify DIR|FILE          check every record's CRC and the manifest\n"
               "  stat DIR|FILE            summarise record shards\n"
               "  (ls, cat and verify also read .safetensors files: names, dtypes, shapes, CRCs)\n"
               "  (ls, stat and verify also read stores: minidb:FILE, leveldb:DIR, rocksdb:DIR,\n"
               "   lmdb:PATH: entries, keys, fields, every value decoded)\n"
               "  tokens SOURCE OUT        write a field of token ids as an llm.c token shard\n"
               "  classes SOURCE           the classes of an image folder and their labels\n"
               "  version                  print the version (also -V, --version)\n"
               "  help                     this text\n"
               "\n"
               "SOURCE is KIND:LOCATION[,key=value...], e.g. synthetic:100000,bytes=16 or\n"
               "lines:train.txt,max=512.\n"
               "'ferry COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    opterr = 0; /* the commands report a bad option in one line (cli_bad_option) */
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "report"))
        return cmd_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "index"))
        return cmd_index(argc - 1, argv + 1);
    if (!strcmp(cmd, "head"))
        return cmd_head(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack"))
        return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "ls"))
        return cmd_ls(argc - 1, argv + 1);
    if (!strcmp(cmd, "cat"))
        return cmd_cat(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify"))
        return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(cmd, "stat"))
        return cmd_stat(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokens"))
        return cmd_tokens(argc - 1, argv + 1);
    if (!strcmp(cmd, "classes"))
        return cmd_classes(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("ferry %s\n", ferry_version_string());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    static const char *const commands[] = {"bench",   "index", "head",    "pack",
                                           "ls",      "cat",   "verify",  "stat",
                                           "version", "help",  "classes", "report"};
    const char *near = cli_closest(cmd, commands, sizeof commands / sizeof *commands);
    if (near)
        return cli_error(EXIT_USAGE,
                         "unknown command \"%s\"; did you mean \"%s\"? (ferry help "
                         "lists them)",
                         cmd, near);
    return cli_error(EXIT_USAGE, "unknown command \"%s\" (ferry help lists them)", cmd);
}
