/*
 * ferry report TRACE [-o report.html]: reads a loader's trace and prints what it
 * says (the stages per worker, the consumer's waits, the queue, the slowest
 * samples), or writes it as one self-contained page (report_html.c).
 *
 * The reader takes Chrome trace-event JSON, an object with "traceEvents" or a
 * bare array, such as ferry writes or several ranks' files merged: slices
 * ("ph":"X"), counters ("C"), instants ("i"/"I") and thread names ("M"); it
 * skips whatever else it meets. A million events read in about a second.
 */
#include "cli.h"
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

const char *const report_kind_names[RK_COUNT] = {"read",  "decode", "transform",
                                                 "write", "wait",   "other"};

/* ---- A small JSON reader, for trace events ---- */

typedef struct jcur {
    const char *p, *end;
    bool bad;
} jcur;

static void ws(jcur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static bool eat(jcur *c, char ch)
{
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A string into buf (cut to cap - 1 bytes; escapes other than \" and \\ kept
 * as they are: names here are plain). */
static bool str(jcur *c, char *buf, size_t cap)
{
    size_t n = 0;
    if (!eat(c, '"'))
        return c->bad = true, false;
    while (c->p < c->end && *c->p != '"') {
        char ch = *c->p++;
        if (ch == '\\' && c->p < c->end)
            ch = *c->p++;
        if (n + 1 < cap)
            buf[n++] = ch;
    }
    if (cap)
        buf[n] = 0;
    if (c->p >= c->end)
        return c->bad = true, false;
    c->p++;
    return true;
}

static double num(jcur *c)
{
    ws(c);
    char *e;
    double v = strtod(c->p, &e);
    if (e == c->p) {
        c->bad = true;
        return 0;
    }
    c->p = e;
    return v;
}

static void skip(jcur *c, int depth)
{
    ws(c);
    if (c->p >= c->end || depth > 64) {
        c->bad = true;
        return;
    }
    char ch = *c->p;
    if (ch == '"') {
        char tmp[1];
        str(c, tmp, 0);
    } else if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        if (eat(c, close))
            return;
        do {
            if (ch == '{') {
                char tmp[1];
                if (!str(c, tmp, 0) || !eat(c, ':'))
                    return (void)(c->bad = true);
            }
            skip(c, depth + 1);
        } while (!c->bad && eat(c, ','));
        if (!eat(c, close))
            c->bad = true;
    } else if (ch == 't' || ch == 'f' || ch == 'n') {
        while (c->p < c->end && *c->p >= 'a' && *c->p <= 'z')
            c->p++;
    } else {
        num(c);
    }
}

/* ---- Events ---- */

typedef struct ev {
    char name[64], ph[4], tname[64];
    int64_t pid, tid;
    double ts, dur;
    uint64_t index, batch;
    int32_t slot;
    double ready, flight;
    bool has_ready;
    uint32_t grain;
    int32_t first;
} ev;

static void args(jcur *c, ev *e)
{
    if (!eat(c, '{'))
        return skip(c, 1);
    if (eat(c, '}'))
        return;
    do {
        char k[32];
        if (!str(c, k, sizeof k) || !eat(c, ':'))
            return;
        ws(c);
        if (!strcmp(k, "name") && c->p < c->end && *c->p == '"')
            str(c, e->tname, sizeof e->tname);
        else if (!strcmp(k, "index"))
            e->index = (uint64_t)num(c);
        else if (!strcmp(k, "batch"))
            e->batch = (uint64_t)num(c);
        else if (!strcmp(k, "slot"))
            e->slot = (int32_t)num(c);
        else if (!strcmp(k, "ready"))
            e->ready = num(c), e->has_ready = true;
        else if (!strcmp(k, "in flight"))
            e->flight = num(c);
        else if (!strcmp(k, "samples"))
            e->grain = (uint32_t)num(c);
        else if (!strcmp(k, "first"))
            e->first = (int32_t)num(c);
        else
            skip(c, 2);
    } while (!c->bad && eat(c, ','));
    if (!eat(c, '}'))
        c->bad = true;
}

static bool event(jcur *c, ev *e)
{
    memset(e, 0, sizeof *e);
    e->index = e->batch = UINT64_MAX;
    e->slot = -1;
    if (!eat(c, '{'))
        return c->bad = true, false;
    if (eat(c, '}'))
        return true;
    do {
        char k[16];
        if (!str(c, k, sizeof k) || !eat(c, ':'))
            return false;
        ws(c);
        bool is_str = c->p < c->end && *c->p == '"';
        if (!strcmp(k, "name") && is_str)
            str(c, e->name, sizeof e->name);
        else if (!strcmp(k, "ph") && is_str)
            str(c, e->ph, sizeof e->ph);
        else if (!strcmp(k, "pid") && !is_str)
            e->pid = (int64_t)num(c);
        else if (!strcmp(k, "tid") && !is_str)
            e->tid = (int64_t)num(c);
        else if (!strcmp(k, "ts"))
            e->ts = num(c);
        else if (!strcmp(k, "dur"))
            e->dur = num(c);
        else if (!strcmp(k, "args"))
            args(c, e);
        else
            skip(c, 1);
    } while (!c->bad && eat(c, ','));
    if (!eat(c, '}'))
        c->bad = true;
    return !c->bad;
}

static bool grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 4096;
    void *q = realloc(*p, nc * size);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

static uint32_t track_of(rtrace *t, int64_t pid, int64_t tid)
{
    for (uint32_t i = t->ntracks; i-- > 0;)
        if (t->tracks[i].pid == pid && t->tracks[i].tid == tid)
            return i;
    rtrack *nt = realloc(t->tracks, (t->ntracks + 1) * sizeof *nt);
    if (!nt)
        return UINT32_MAX;
    t->tracks = nt;
    rtrack *k = &t->tracks[t->ntracks];
    memset(k, 0, sizeof *k);
    k->pid = pid;
    k->tid = tid;
    snprintf(k->name, sizeof k->name, "pid %lld tid %lld", (long long)pid, (long long)tid);
    return t->ntracks++;
}

static int kind_of(const char *name)
{
    for (int k = 0; k < RK_OTHER; k++)
        if (!strcmp(name, report_kind_names[k]))
            return k;
    return RK_OTHER;
}

/* One event into the trace. False when out of memory. */
static bool add(rtrace *t, const ev *e)
{
    t->events++;
    if (e->ph[0] == 'M') {
        if (strcmp(e->name, "thread_name") != 0)
            return true;
        uint32_t k = track_of(t, e->pid, e->tid);
        if (k == UINT32_MAX)
            return false;
        if (e->pid != 0 && strncmp(e->tname, "rank", 4) != 0)
            snprintf(t->tracks[k].name, sizeof t->tracks[k].name, "rank %lld %s", (long long)e->pid,
                     e->tname);
        else
            snprintf(t->tracks[k].name, sizeof t->tracks[k].name, "%s", e->tname);
        return true;
    }
    if (e->ph[0] == 'X') {
        uint32_t k = track_of(t, e->pid, e->tid);
        if (k == UINT32_MAX ||
            !grow((void **)&t->slices, &t->cap_slices, t->nslices, sizeof(rslice)))
            return false;
        rslice r = {e->ts, e->dur, e->index, e->batch, e->slot, k, (uint32_t)kind_of(e->name), 0};
        if (e->grain) { /* a grain of samples too cheap to trace one by one */
            r.slot = e->first;
            r.grain = e->grain;
        }
        t->slices[t->nslices++] = r;
        return true;
    }
    if (e->ph[0] == 'C' && e->has_ready) {
        if (!grow((void **)&t->counters, &t->cap_counters, t->ncounters, sizeof(rcounter)))
            return false;
        t->counters[t->ncounters++] = (rcounter){e->ts, e->pid, e->ready, e->flight};
        return true;
    }
    if (e->ph[0] == 'i' || e->ph[0] == 'I') {
        uint32_t k = track_of(t, e->pid, e->tid);
        if (k == UINT32_MAX ||
            !grow((void **)&t->instants, &t->cap_instants, t->ninstants, sizeof(rinstant)))
            return false;
        bool err = strcmp(e->name, "skip") != 0;
        t->instants[t->ninstants++] = (rinstant){e->ts, k, err, e->index, e->batch};
        err ? t->nerrors++ : t->nskips++;
    }
    return true;
}

static void other_data(jcur *c, rtrace *t)
{
    if (!eat(c, '{'))
        return skip(c, 1);
    if (eat(c, '}'))
        return;
    do {
        char k[32];
        if (!str(c, k, sizeof k) || !eat(c, ':'))
            return;
        ws(c);
        bool is_num = c->p < c->end && (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'));
        if (!strcmp(k, "dropped") && is_num)
            t->dropped += (uint64_t)num(c);
        else if (!strcmp(k, "wall_start_us") && is_num)
            t->wall_start_us = num(c);
        else
            skip(c, 1);
    } while (!c->bad && eat(c, ','));
    eat(c, '}');
}

static int events(jcur *c, rtrace *t)
{
    if (!eat(c, '['))
        return c->bad = true, 0;
    if (eat(c, ']'))
        return 0;
    ev e;
    do {
        if (!event(c, &e))
            break;
        if (!add(t, &e))
            return cli_error(1, "report: out of memory");
    } while (eat(c, ','));
    if (!eat(c, ']'))
        c->bad = true;
    return 0;
}

static int parse(const char *text, size_t len, rtrace *t)
{
    jcur c = {text, text + len, false};
    ws(&c);
    if (c.p < c.end && *c.p == '[') {
        if (events(&c, t))
            return 1;
    } else if (eat(&c, '{') && !eat(&c, '}')) {
        do {
            char k[32];
            if (!str(&c, k, sizeof k) || !eat(&c, ':'))
                break;
            if (!strcmp(k, "traceEvents")) {
                if (events(&c, t))
                    return 1;
            } else if (!strcmp(k, "otherData")) {
                other_data(&c, t);
            } else {
                skip(&c, 1);
            }
        } while (!c.bad && eat(&c, ','));
    } else {
        c.bad = true;
    }
    if (c.bad)
        return cli_error(1, "report: %s: not a trace (JSON trace events) at byte %zu", t->path,
                         (size_t)(c.p - text));
    return 0;
}

/* ---- What the trace says ---- */

static int by_track_ts(const void *a, const void *b)
{
    const rslice *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int by_ts(const void *a, const void *b)
{
    const rcounter *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Keeps item (of `size` bytes, its duration `dur`) among the longest `cap` in arr,
 * longest first; *n of them are kept. dur_off: where an entry keeps its duration. */
static void keep_longest(void *arr, uint32_t *n, uint32_t cap, size_t size, size_t dur_off,
                         const void *item, double dur)
{
    uint8_t *a = arr;
    double d;
    uint32_t k = *n < cap ? *n : cap - 1;
    if (*n == cap && (memcpy(&d, a + k * size + dur_off, sizeof d), dur <= d))
        return;
    for (; k > 0; k--) {
        memcpy(&d, a + (k - 1) * size + dur_off, sizeof d);
        if (d >= dur)
            break;
        memcpy(a + k * size, a + (k - 1) * size, size);
    }
    memcpy(a + k * size, item, size);
    if (*n < cap)
        (*n)++;
}

static void keep_slowest(rtrace *t, const rsample *s)
{
    keep_longest(t->slowest, &t->nslowest, REPORT_SLOWEST, sizeof *s, offsetof(rsample, dur), s,
                 s->dur);
}

static void keep_wait(rtrace *t, const rslice *s)
{
    keep_longest(t->waits, &t->nwaits_kept, REPORT_WAITS, sizeof *s, offsetof(rslice, dur), s,
                 s->dur);
}

static void analyse(rtrace *t)
{
    double t0 = 1e300, t1 = -1e300;
    for (size_t i = 0; i < t->nslices; i++) {
        t0 = t->slices[i].ts < t0 ? t->slices[i].ts : t0;
        t1 = t->slices[i].ts + t->slices[i].dur > t1 ? t->slices[i].ts + t->slices[i].dur : t1;
    }
    for (size_t i = 0; i < t->ncounters; i++) {
        t0 = t->counters[i].ts < t0 ? t->counters[i].ts : t0;
        t1 = t->counters[i].ts > t1 ? t->counters[i].ts : t1;
    }
    if (t0 > t1)
        t0 = t1 = 0;
    t->span = t1 - t0;
    for (size_t i = 0; i < t->nslices; i++)
        t->slices[i].ts -= t0;
    for (size_t i = 0; i < t->ncounters; i++)
        t->counters[i].ts -= t0;
    for (size_t i = 0; i < t->ninstants; i++)
        t->instants[i].ts -= t0;
    if (t->nslices)
        qsort(t->slices, t->nslices, sizeof *t->slices, by_track_ts);
    if (t->ncounters)
        qsort(t->counters, t->ncounters, sizeof *t->counters, by_ts);
    t->first_wait = -1;
    rsample cur = {0};
    bool open = false;
    for (size_t i = 0; i < t->nslices; i++) {
        const rslice *s = &t->slices[i];
        rtrack *k = &t->tracks[s->track];
        if (k->count == 0)
            k->first = (uint32_t)i;
        k->count++;
        k->total[s->kind] += s->dur;
        if (s->kind == RK_WAIT) {
            t->nwaits++;
            t->wait_total += s->dur;
            if (t->first_wait < 0) {
                t->first_wait = s->dur;
                t->first_wait_end = s->ts + s->dur;
            }
            keep_wait(t, s);
        }
        if (s->slot < 0)
            continue;
        /* a sample's slices follow one another on its track */
        bool same = open && cur.track == s->track && cur.batch == s->batch && cur.slot == s->slot &&
                    cur.grain == s->grain && s->ts <= cur.ts + cur.dur + 0.002;
        if (!same) {
            if (open && !cur.grain)
                keep_slowest(t, &cur);
            memset(&cur, 0, sizeof cur);
            cur.ts = s->ts;
            cur.index = s->index;
            cur.batch = s->batch;
            cur.slot = s->slot;
            cur.track = s->track;
            cur.grain = s->grain;
            open = true;
            k->samples += s->grain ? s->grain : 1; /* a grain of cheap samples, or one */
        }
        cur.dur = s->ts + s->dur - cur.ts;
        cur.stage[s->kind] += s->dur;
    }
    if (open && !cur.grain)
        keep_slowest(t, &cur);
    /* the queue, weighted by time: each value holds until the next */
    double weighted = 0, empty = 0, covered = 0;
    for (size_t i = 0; i + 1 < t->ncounters; i++) {
        const rcounter *a = &t->counters[i], *b = &t->counters[i + 1];
        if (a->pid != b->pid)
            continue;
        double d = b->ts - a->ts;
        weighted += a->ready * d;
        covered += d;
        if (a->ready == 0)
            empty += d;
    }
    for (size_t i = 0; i < t->ncounters; i++)
        if (t->counters[i].ready > t->ready_max)
            t->ready_max = t->counters[i].ready;
    t->ready_mean = covered > 0 ? weighted / covered : 0;
    t->empty_frac = covered > 0 ? empty / covered : 0;
}

/* ---- The text summary ---- */

static void ms(FILE *f, double us)
{
    fprintf(f, "%10.3f", us / 1000);
}

static void summary(const rtrace *t, FILE *f)
{
    fprintf(f, "trace       %s: %llu events, %llu dropped, %u tracks, %.3f ms\n", t->path,
            (unsigned long long)t->events, (unsigned long long)t->dropped, t->ntracks,
            t->span / 1000);
    fprintf(f, "\n%-20s %10s %10s %10s %10s %10s %10s %9s\n", "track (ms)", "busy", "read",
            "decode", "transform", "write", "wait", "samples");
    for (uint32_t i = 0; i < t->ntracks; i++) {
        const rtrack *k = &t->tracks[i];
        double busy = 0;
        for (int s = 0; s < RK_COUNT; s++)
            busy += s == RK_WAIT ? 0 : k->total[s];
        fprintf(f, "%-20s ", k->name);
        ms(f, busy);
        for (int s = 0; s <= RK_WAIT; s++) {
            fputc(' ', f);
            ms(f, k->total[s]);
        }
        fprintf(f, " %9llu\n", (unsigned long long)k->samples);
    }
    fprintf(f, "\nconsumer    waited %.3f ms in %llu waits (%.1f%% of the span)",
            t->wait_total / 1000, (unsigned long long)t->nwaits,
            t->span > 0 ? 100 * t->wait_total / t->span : 0.0);
    if (t->first_wait >= 0)
        fprintf(f, "; the first lasted %.3f ms, until %.3f ms", t->first_wait / 1000,
                t->first_wait_end / 1000);
    fputc('\n', f);
    for (uint32_t i = 0; i < t->nwaits_kept && i < 5; i++) {
        const rslice *w = &t->waits[i];
        fprintf(f, "            %.3f ms at %.3f ms", w->dur / 1000, w->ts / 1000);
        if (w->batch != UINT64_MAX)
            fprintf(f, " for batch %llu", (unsigned long long)w->batch);
        fputc('\n', f);
    }
    if (t->ncounters)
        fprintf(f,
                "queue       batches ready: mean %.1f, max %.0f; none ready %.1f%% of the time\n",
                t->ready_mean, t->ready_max, 100 * t->empty_frac);
    fprintf(f, "problems    %llu errors, %llu samples skipped\n", (unsigned long long)t->nerrors,
            (unsigned long long)t->nskips);
    if (!t->nslowest)
        return;
    fprintf(f, "\nslowest samples\n%12s %10s %6s  %-16s %10s %10s %10s %10s\n", "index", "batch",
            "slot", "track", "ms", "at ms", "read", "decode");
    for (uint32_t i = 0; i < t->nslowest; i++) {
        const rsample *s = &t->slowest[i];
        if (s->index == UINT64_MAX)
            fprintf(f, "%12s ", "-");
        else
            fprintf(f, "%12llu ", (unsigned long long)s->index);
        fprintf(f, "%10llu %6d  %-16s %10.3f %10.3f %10.3f %10.3f\n", (unsigned long long)s->batch,
                s->slot, t->tracks[s->track].name, s->dur / 1000, s->ts / 1000,
                s->stage[RK_READ] / 1000, s->stage[RK_DECODE] / 1000);
    }
}

/* ---- The command ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: ferry report TRACE [-o report.html]\n"
               "\n"
               "Reads a loader's trace (ferry bench --trace FILE, FERRY_TRACE=FILE, or the\n"
               "loader's trace option): Chrome trace-event JSON, one rank's or several\n"
               "merged. Prints a summary: each worker's time per stage, the consumer's\n"
               "waits, the queue of ready batches, the slowest samples.\n"
               "\n"
               "  -o FILE      write the report as one HTML page instead (no network needed:\n"
               "               a timeline with zoom, stage totals, the queue, the waits,\n"
               "               the slowest samples)\n"
               "  -h, --help   this text\n");
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        errno = bad ? EIO : ENOMEM;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return cli_bad_option("report", argv, opts);
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    rtrace t = {0};
    t.path = argv[optind];
    size_t len;
    char *text = slurp(t.path, &len);
    if (!text)
        return cli_error(1, "report: cannot read %s: %s", t.path, strerror(errno));
    int status = parse(text, len, &t);
    free(text);
    if (!status) {
        analyse(&t);
        if (!out) {
            summary(&t, stdout);
        } else {
            FILE *f = fopen(out, "w");
            if (!f) {
                status = cli_error(1, "report: cannot create %s: %s", out, strerror(errno));
            } else {
                status = report_write_html(&t, f);
                if (fclose(f) != 0 && !status)
                    status = cli_error(1, "report: writing %s failed", out);
            }
        }
    }
    free(t.slices);
    free(t.tracks);
    free(t.counters);
    free(t.instants);
    return status;
}
