/*
 * The loader's trace (ferry_loader_opts.trace, FERRY_TRACE, bench --trace) and
 * `ferry report`: the slices of each stage add up to the stats, the cap drops
 * and counts, no trace is written when none is asked for, and the report reads
 * a trace into a summary and a page that a browser draws without an error.
 */
#include "harness.h"
#include "ferry/ferry.h"
#include "loader/trace.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void spin_ns(uint64_t ns)
{
    uint64_t t0 = ferry_now_ns();
    while (ferry_now_ns() - t0 < ns) {
    }
}

/* Samples that take about 30 µs: 10 claimed as decode, 5 as transform, the
 * rest reading. Every 7th fails, for the skip policy. */
static int slow_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    (void)self;
    spin_ns(15000);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_DECODE, 10000);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_TRANSFORM, 5000);
    spin_ns(15000);
    if (index % 7 == 3)
        return ferry_error(FERRY_ECORRUPT, "sample %llu: made to fail", (unsigned long long)index);
    *(uint64_t *)out->data[0] = index;
    return 0;
}

static uint64_t slow_len(void *self)
{
    (void)self;
    return 600;
}

static ferry_dataset *slow_dataset(void)
{
    static const ferry_dataset_vtable vt = {slow_len, slow_get, NULL, NULL};
    ferry_field f = {.name = "x", .dtype = FERRY_U64, .ndim = 0};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_create(&ds, &vt, NULL, &f, 1));
    return ds;
}

/* Sums the "dur" of the slices named name, in µs, and counts the events of
 * phase ph named name. */
static double sum_dur(const char *json, const char *name, const char *ph, uint64_t *count)
{
    char pat[64];
    snprintf(pat, sizeof pat, "{\"name\":\"%s\",\"ph\":\"%s\"", name, ph);
    double sum = 0;
    *count = 0;
    /* line by line, each search bounded by its line: a sanitizer's strstr measures
     * the whole rest of the text at every call, quadratic over a large trace */
    size_t plen = strlen(pat);
    for (const char *p = json; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *hit = memmem(p, n, pat, plen);
        if (hit) {
            const char *d = memmem(hit, n - (size_t)(hit - p), "\"dur\":", 6);
            if (d)
                sum += strtod(d + 6, NULL);
            ++*count;
        }
        p += n + (end != NULL);
    }
    return sum;
}

static void run_epoch(ferry_loader *l)
{
    ferry_batch *b;
    int rc;
    while ((rc = ferry_loader_next(l, &b)) == 0)
        ferry_batch_release(b);
    CHECK_RC(rc, FERRY_END);
}

TEST(slices_of_each_stage_add_up_to_the_stats)
{
    char path[512];
    test_make_dir("trace_sum");
    test_path("t.json", path);
    ferry_dataset *ds = slow_dataset();
    for (uint32_t workers = 0; workers <= 3; workers += 3) {
        ferry_loader_opts o = test_loader_opts(16, workers);
        o.on_error = FERRY_ON_ERROR_SKIP;
        o.trace = path;
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        run_epoch(l);
        ferry_loader_stats st;
        CHECK_OK(ferry_loader_stats_get(l, &st));
        CHECK_OK(ferry_loader_free_within(l, 5000));
        size_t n;
        char *json = (char *)test_read_file(path, &n);
        CHECK_CONTAINS(json, "\"traceEvents\"");
        CHECK_CONTAINS(json, "\"wall_start_us\":");
        CHECK_CONTAINS(json, "\"dropped\":0");
        CHECK_CONTAINS(json, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
                             "\"args\":{\"name\":\"consumer\"}}");
        if (workers)
            CHECK_CONTAINS(json, "\"args\":{\"name\":\"worker 2\"}");
        static const char *const stages[] = {"read", "decode", "transform", "write"};
        for (int s = 0; s < FERRY_STAGE_COUNT; s++) {
            uint64_t count;
            double us = sum_dur(json, stages[s], "X", &count);
            double want = (double)st.stage_ns[s] / 1000;
            if (want < 100) {
                CHECK(us < 100);
                continue;
            }
            if (us < 0.9 * want || us > 1.1 * want)
                test_fail(__FILE__, __LINE__, "%u workers: %s slices add up to %.1f us; stats %.1f",
                          workers, stages[s], us, want);
        }
        uint64_t nskip, nqueue, nwait;
        sum_dur(json, "skip", "i", &nskip);
        CHECK_U64(nskip, st.skipped);
        sum_dur(json, "queue", "C", &nqueue);
        CHECK(nqueue >= st.batches);
        double wait = sum_dur(json, "wait", "X", &nwait);
        double want = (double)st.consumer_wait_ns / 1000;
        CHECK(wait >= 0.9 * want && wait <= 1.1 * want + 10);
        /* each sample's slices name it */
        CHECK_CONTAINS(json, "\"args\":{\"batch\":0,\"slot\":0,\"index\":0}");
        free(json);
    }
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(cheap_samples_are_traced_a_grain_at_a_time)
{
    char path[512];
    test_make_dir("trace_grain");
    test_path("t.json", path);
    ferry_dataset *ds;
    ferry_synthetic_opts so = {.count = 300000, .bytes = 8};
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    ferry_loader_opts o = test_loader_opts(64, 2);
    o.trace = path;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    run_epoch(l);
    ferry_loader_stats st;
    CHECK_OK(ferry_loader_stats_get(l, &st));
    CHECK_OK(ferry_loader_free_within(l, 5000));
    size_t n;
    char *json = (char *)test_read_file(path, &n);
    CHECK_CONTAINS(json, "\"first\":0,\"samples\":");
    uint64_t count;
    double us = sum_dur(json, "read", "X", &count), want = (double)st.stage_ns[0] / 1000;
    if (us < 0.9 * want || us > 1.1 * want)
        test_fail(__FILE__, __LINE__, "read slices add up to %.1f us; stats %.1f", us, want);
    /* a few slices a grain, not one a sample, where samples are cheap; an
     * instrumented build (TSan) can make them dearer than FERRY_TRACE_SAMPLE_NS,
     * and they then have slices of their own, as they should */
    uint64_t ns = 0;
    for (int s = 0; s < FERRY_STAGE_COUNT; s++)
        ns += st.stage_ns[s];
    if (ns / 300000 < FERRY_TRACE_SAMPLE_NS / 2)
        CHECK(count < 300000 / 8);
    free(json);
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(a_full_buffer_drops_and_counts)
{
    char path[512];
    test_make_dir("trace_cap");
    test_path("t.json", path);
    ferry__trace *t;
    CHECK_OK(ferry__trace_create(&t, path, 1, 160, 3));
    ferry__tbuf *w = ferry__trace_buf(t, 0), *c = ferry__trace_buf(t, -1);
    CHECK_EQ(c->cap, 10); /* a sixteenth for the consumer */
    CHECK_EQ(w->cap, 150);
    uint64_t claimed[FERRY_STAGE_COUNT] = {0};
    w->mark = ferry_now_ns();
    for (int i = 0; i < 200; i++)
        ferry__trace_sample(w, w->mark + 1000, claimed, (uint64_t)i, 0, i);
    CHECK_EQ(w->n, 150);
    CHECK_U64(w->dropped, 50);
    CHECK(ferry__trace_full(w));
    CHECK_U64(w->dropped, 51);
    CHECK_OK(ferry__trace_write(t));
    ferry__trace_free(t);
    size_t n;
    char *json = (char *)test_read_file(path, &n);
    CHECK_CONTAINS(json, "\"dropped\":51");
    CHECK_CONTAINS(json, "\"cap\":160");
    CHECK_CONTAINS(json, "\"pid\":3"); /* the rank */
    uint64_t count;
    sum_dur(json, "read", "X", &count);
    CHECK_U64(count, 150);
    free(json);
    test_remove_dir();
}

TEST(no_trace_is_written_unless_asked)
{
    char path[512], dir[512];
    test_make_dir("trace_off");
    test_path("env.json", path);
    snprintf(dir, sizeof dir, "%s", test_dir);
    CHECK(chdir(dir) == 0);
    unsetenv("FERRY_TRACE");
    ferry_dataset *ds;
    ferry_synthetic_opts so = {.count = 1000, .bytes = 8};
    CHECK_OK(ferry_dataset_synthetic(&ds, &so));
    ferry_loader_opts o = test_loader_opts(10, 2);
    o.trace = ""; /* as NULL */
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    run_epoch(l);
    ferry_loader_free(l);
    size_t files = 0;
    FILE *p = popen("ls -A .", "r");
    char line[256];
    while (p && fgets(line, sizeof line, p))
        files++;
    if (p)
        pclose(p);
    CHECK_EQ(files, 0);
    /* FERRY_TRACE: every loader of the process, the second to FILE.1.json */
    setenv("FERRY_TRACE", path, 1);
    o.trace = NULL;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    run_epoch(l);
    ferry_loader_free(l);
    CHECK(access(path, R_OK) == 0);
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_loader_free(l);
    CHECK(access(test_path("env.1.json", line), R_OK) == 0);
    unsetenv("FERRY_TRACE");
    /* a file that cannot be created fails the loader's creation, naming it */
    o.trace = "/nonexistent-dir/t.json";
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EIO);
    CHECK_CONTAINS(ferry_last_errmsg(), "trace: cannot create /nonexistent-dir/t.json");
    ferry_dataset_free(ds);
    test_remove_dir();
}

TEST(ferry_trace_is_written_at_exit)
{
    char path[512], cmd[1200];
    test_make_dir("trace_exit");
    test_path("t.json", path);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* a program that never frees its loader */
        setenv("FERRY_TRACE", path, 1);
        ferry_dataset *ds;
        ferry_synthetic_opts so = {.count = 100, .bytes = 8};
        ferry_loader_opts o;
        ferry_loader_opts_default(&o);
        o.batch_size = 10;
        ferry_loader *l;
        ferry_batch *b;
        if (ferry_dataset_synthetic(&ds, &so) || ferry_loader_create(&l, ds, &o) ||
            ferry_loader_next(l, &b))
            _exit(1);
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    size_t n;
    char *json = (char *)test_read_file(path, &n);
    CHECK_CONTAINS(json, "\"name\":\"read\",\"ph\":\"X\"");
    CHECK(n > 2 && !strcmp(json + n - 4, "\n]}\n"));
    free(json);
    (void)cmd;
    test_remove_dir();
}

TEST(report_prints_a_summary_and_writes_a_page)
{
    char path[512], html[512], args[1400], out[16384];
    test_make_dir("trace_report");
    test_path("t.json", path);
    test_path("r.html", html);
    snprintf(args, sizeof args,
             "bench synthetic:20000,bytes=8,fail_every=1000 --on-error skip --workers 2 "
             "--no-progress --trace %s",
             path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "report %s", path);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "worker 1");
    CHECK_CONTAINS(out, "consumer    waited");
    CHECK_CONTAINS(out, "20 samples skipped");
    CHECK_CONTAINS(out, "slowest samples");
    snprintf(args, sizeof args, "report %s -o %s", path, html);
    CHECK_EQ(test_ferry_cli(args, out, sizeof out), 0);
    size_t n;
    char *page = (char *)test_read_file(html, &n);
    CHECK_CONTAINS(page, "<canvas id=tl>");
    CHECK_CONTAINS(page, "The slowest samples");
    /* self-contained: nothing fetched */
    CHECK(!strstr(page, "src="));
    CHECK(!strstr(page, "http://") && !strstr(page, "https://"));
    free(page);
    snprintf(args, sizeof args, "report %s/nothing.json", test_dir);
    test_ferry_cli_says(args, 1, "cannot read");
    test_write_file(html, "{\"traceEvents\":[{\"name\":", 23);
    snprintf(args, sizeof args, "report %s", html);
    test_ferry_cli_says(args, 1, "not a trace");
    test_remove_dir();
}

/* A trace of a million slices over 8 workers, as a loader writes them. */
static void write_big_trace(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"traceEvents\":[\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
          "\"args\":{\"name\":\"consumer\"}}",
          f);
    uint64_t ts[8] = {0};
    for (uint64_t i = 0; i < 1000000; i++) {
        unsigned w = (unsigned)(i % 8);
        uint64_t dur = 1000 + (i * 7919) % 5000;
        fprintf(f,
                ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"ts\":%llu.%03u,"
                "\"dur\":%llu.%03u,\"args\":{\"batch\":%llu,\"slot\":%u,\"index\":%llu}}",
                i % 3 ? "read" : "decode", w + 1, (unsigned long long)(ts[w] / 1000),
                (unsigned)(ts[w] % 1000), (unsigned long long)(dur / 1000), (unsigned)(dur % 1000),
                (unsigned long long)(i / 64), (unsigned)(i % 64), (unsigned long long)i);
        ts[w] += dur + (i % 5 == 0 ? 2000 : 0);
    }
    fputs("\n]}\n", f);
    CHECK(fclose(f) == 0);
}

TEST(report_of_a_million_events_is_quick)
{
    char path[512], html[512], args[1200], out[16384];
    test_make_dir("trace_big");
    test_path("big.json", path);
    test_path("big.html", html);
    write_big_trace(path);
    snprintf(args, sizeof args, "report %s -o %s", path, html);
    /* the command's CPU time, which other work on the machine does not stretch
     * (it runs on one thread, so on an idle machine this is its wall time) */
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    int rc = test_ferry_cli(args, out, sizeof out);
    if (rc != 0)
        test_fail(__FILE__, __LINE__, "report: %d: %s", rc, out);
    getrusage(RUSAGE_CHILDREN, &r1);
    double s = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                        r0.ru_stime.tv_sec) +
               (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                        r0.ru_stime.tv_usec) /
                   1e6;
    printf("a million events: report in %.2f s of CPU\n", s);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(s < 5);
#endif
    test_remove_dir();
}

/* The page in headless Chromium: it draws the timeline and logs no error. */
TEST(report_renders_in_a_browser)
{
    static const char *const browsers[] = {"chromium", "chromium-browser", "google-chrome"};
    const char *browser = NULL;
    char cmd[2048], line[4096];
    for (size_t i = 0; i < sizeof browsers / sizeof *browsers && !browser; i++) {
        snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", browsers[i]);
        if (system(cmd) == 0)
            browser = browsers[i];
    }
    if (!browser)
        SKIP("no headless browser (install Debian's chromium: scripts/install-deps.sh browser)");
    char path[512], html[512], out[16384];
    test_make_dir("trace_browser");
    test_path("t.json", path);
    test_path("r.html", html);
    snprintf(cmd, sizeof cmd,
             "bench synthetic:50000,bytes=8,fail_every=5000 --on-error skip --workers 3 "
             "--no-progress --trace %s && " TEST_FERRY_CLI " report %s -o %s",
             path, path, html);
    CHECK_EQ(test_ferry_cli(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd,
             "cd %s && HOME=%s timeout 60 %s --headless --no-sandbox --disable-gpu "
             "--no-first-run --user-data-dir=%s/profile --enable-logging=stderr --v=0 "
             "--virtual-time-budget=5000 --dump-dom file://%s 2>%s/stderr.txt",
             test_dir, test_dir, browser, test_dir, html, test_dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    bool rendered = false, error = false, drawn = false;
    while (fgets(line, sizeof line, p)) {
        char *body = strstr(line, "<body");
        if (body) {
            rendered |= strstr(body, "data-rendered=\"1\"") != NULL;
            error |= strstr(body, "data-error") != NULL;
            drawn |= strstr(body, "data-drawn=\"") && !strstr(body, "data-drawn=\"0\"");
            if (error)
                printf("page: %s", body);
        }
    }
    int rc = pclose(p);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 124)
        SKIP("the browser did not finish in 60 s");
    CHECK(rendered);
    CHECK(drawn);
    CHECK(!error);
    /* the browser's log: no console error from the page */
    snprintf(cmd, sizeof cmd, "%s/stderr.txt", test_dir);
    FILE *f = fopen(cmd, "r");
    CHECK(f != NULL);
    while (fgets(line, sizeof line, f))
        if (strstr(line, "CONSOLE") && (strstr(line, "Uncaught") || strstr(line, "rror")))
            test_fail(__FILE__, __LINE__, "the page logged: %s", line);
    fclose(f);
    test_remove_dir();
}
