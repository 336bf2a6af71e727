/*
 * ferry - pack, check and benchmark datasets for training.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_error(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("ferry: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

bool cli_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s && *s && *s != '-' ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *s == '-' || errno || *end || v < lo || v > hi) {
        cli_error(EXIT_USAGE, "%s: \"%s\" is not a number in [%llu, %llu]", opt, s ? s : "",
                  (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = s && *s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || errno || *end || v < lo || v > hi) {
        cli_error(EXIT_USAGE, "%s: \"%s\" is not a number in [%lld, %lld]", opt, s ? s : "",
                  (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total, bool enabled)
{
    p->on = enabled && isatty(STDERR_FILENO);
    p->total = total;
    p->label = label;
    p->start_ns = ferry_now_ns();
    p->last_ns = 0;
}

void cli_progress_update(cli_progress *p, uint64_t done, const char *unit)
{
    if (!p->on)
        return;
    uint64_t now = ferry_now_ns();
    if (p->last_ns && now - p->last_ns < 100000000u && done != p->total)
        return;
    p->last_ns = now;
    double secs = (double)(now - p->start_ns) / 1e9;
    double rate = secs > 0 ? (double)done / secs : 0;
    if (p->total) {
        int width = 30, fill = (int)((double)done / (double)p->total * width);
        if (fill > width)
            fill = width;
        char eta[32] = "";
        if (done > 0 && done < p->total) {
            uint64_t left = (uint64_t)(secs * (double)(p->total - done) / (double)done);
            if (left >= 3600)
                snprintf(eta, sizeof eta, ", ETA %lluh%02llum", (unsigned long long)(left / 3600),
                         (unsigned long long)(left / 60 % 60));
            else
                snprintf(eta, sizeof eta, ", ETA %llum%02llus", (unsigned long long)(left / 60),
                         (unsigned long long)(left % 60));
        }
        fprintf(stderr, "\r%s [%.*s%*s] %3d%% %llu/%llu %s, %.0f/s%s ", p->label, fill,
                "##############################", width - fill, "",
                (int)(100.0 * (double)done / (double)p->total), (unsigned long long)done,
                (unsigned long long)p->total, unit, rate, eta);
    } else {
        fprintf(stderr, "\r%s %llu %s, %.0f/s ", p->label, (unsigned long long)done, unit, rate);
    }
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->on)
        fputc('\n', stderr);
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ferry COMMAND [options]\n"
               "\n"
               "commands:\n"
               "  bench SOURCE [options]   run a loading pipeline and report its throughput\n"
               "  index FILE               write the line index of a text file (FILE.fidx)\n"
               "  head SOURCE [-n N]       print the first records of a source\n"
               "  pack SOURCE OUTDIR       write a source as record shards and a manifest\n"
               "  ls DIR|FILE              list record shards\n"
               "  cat FILE [-f I] [-n N]   print records of a shard\n"
               "  verify DIR|FILE          check every record's CRC and the manifest\n"
               "  stat DIR|FILE            summarise record shards\n"
               "  version                  print the version\n"
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
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
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
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("ferry %s\n", ferry_version_string());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    cli_error(EXIT_USAGE, "unknown command \"%s\"", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
