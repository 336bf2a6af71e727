/*
 * The helpers every command shares (declared in cli.h): errors and "did you
 * mean", whole-string numbers, the progress bar, JSON strings.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
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
    ferry_remote_stats_get(&p->remote0);
}

/* ", 112 MB/s down, cache 3 hits 5 fetched" once remote objects were read since
 * the progress started, else "". */
static const char *remote_note(cli_progress *p, double secs)
{
    ferry_remote_stats r;
    ferry_remote_stats_get(&r);
    uint64_t down = r.downloaded_bytes - p->remote0.downloaded_bytes;
    uint64_t hits = r.cache_hits - p->remote0.cache_hits;
    uint64_t misses = r.cache_misses - p->remote0.cache_misses;
    if (!down && !hits && !misses) {
        p->note[0] = 0;
    } else {
        snprintf(p->note, sizeof p->note, ", %.1f MB/s down, cache %llu hit%s %llu fetched",
                 secs > 0 ? (double)down / 1e6 / secs : 0.0, (unsigned long long)hits,
                 hits == 1 ? "" : "s", (unsigned long long)misses);
    }
    return p->note;
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
        fprintf(stderr, "\r%s [%.*s%*s] %3d%% %llu/%llu %s, %.0f/s%s%s ", p->label, fill,
                "##############################", width - fill, "",
                (int)(100.0 * (double)done / (double)p->total), (unsigned long long)done,
                (unsigned long long)p->total, unit, rate, eta, remote_note(p, secs));
    } else {
        fprintf(stderr, "\r%s %llu %s, %.0f/s%s ", p->label, (unsigned long long)done, unit, rate,
                remote_note(p, secs));
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

/* Edit distance (insertions, deletions, substitutions, swaps of neighbours), for
 * "did you mean". Strings longer than 63 bytes are far from everything. */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

const char *cli_closest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bd = 3, len = strlen(s);
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(s, names[i]);
        /* a prefix ("--shuff") is close too */
        if (len >= 3 && !strncmp(names[i], s, len))
            d = 1;
        if (d < bd || (d == bd && !best && d <= len / 3)) {
            bd = d;
            best = names[i];
        }
    }
    return best;
}

int cli_bad_option(const char *cmd, char **argv, const struct option *opts)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    char name[64];
    snprintf(name, sizeof name, "%s", arg[0] == '-' && arg[1] == '-' ? arg + 2 : "");
    char *eq = strchr(name, '=');
    if (eq)
        *eq = 0;
    const char *names[64];
    size_t n = 0;
    for (const struct option *o = opts; o && o->name && n < 64; o++) {
        if (name[0] && !strcmp(o->name, name) && o->has_arg == required_argument)
            return cli_error(EXIT_USAGE, "%s: --%s needs a value (see ferry %s --help)", cmd, name,
                             cmd);
        names[n++] = o->name;
    }
    if (optopt && !name[0]) /* a short option: unknown, or its value missing */
        return cli_error(EXIT_USAGE, "%s: -%c is unknown or needs a value (see ferry %s --help)",
                         cmd, optopt, cmd);
    const char *near = name[0] ? cli_closest(name, names, n) : NULL;
    if (near)
        return cli_error(EXIT_USAGE,
                         "%s: unknown option \"%s\"; did you mean --%s? (ferry %s --help "
                         "lists them)",
                         cmd, arg, near, cmd);
    return cli_error(EXIT_USAGE, "%s: unknown option \"%s\" (ferry %s --help lists them)", cmd, arg,
                     cmd);
}
