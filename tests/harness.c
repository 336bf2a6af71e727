#include "harness.h"

#include <ferry/core.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TESTS 512
#define TIMEOUT_S 100

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int ntests;

void test_register(const char *name, test_fn fn)
{
    if (ntests < MAX_TESTS) {
        tests[ntests].name = name;
        tests[ntests].fn = fn;
        ntests++;
    }
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: FAILED: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

char test_dir[256];

void test_make_dir(const char *tag)
{
    const char *t = getenv("TMPDIR");
    snprintf(test_dir, sizeof test_dir, "%s/ferry-%s-XXXXXX", t ? t : "/tmp", tag);
    CHECK(mkdtemp(test_dir) != NULL);
}

void test_remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
    CHECK(system(cmd) == 0);
}

const char *test_path(const char *name, char *buf)
{
    snprintf(buf, 512, "%s/%s", test_dir, name);
    return buf;
}

void test_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

unsigned char *test_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        test_fail(__FILE__, __LINE__, "cannot open %s: %s", path, strerror(errno));
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    CHECK(len >= 0);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    CHECK(b != NULL);
    if (fread(b, 1, (size_t)len, f) != (size_t)len)
        test_fail(__FILE__, __LINE__, "cannot read %s", path);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

void test_need_shared(const char *path)
{
    if (access(path, R_OK) != 0) {
        printf("SKIP: %s is absent\n", path);
        fflush(stdout);
        exit(77);
    }
}

static int run_one(int i)
{
    alarm(TIMEOUT_S);
    tests[i].fn();
    alarm(0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int i = 0; i < ntests; i++)
            if (!strcmp(tests[i].name, argv[1]))
                return run_one(i);
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    int failed = 0, skipped = 0;
    for (int i = 0; i < ntests; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(run_one(i));
        int st = 0;
        waitpid(pid, &st, 0);
        const char *verdict = "ok";
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            verdict = "skipped";
            skipped++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            verdict = WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "FAILED";
            failed++;
        }
        printf("%-40s %s\n", tests[i].name, verdict);
    }
    printf("%d passed, %d failed, %d skipped\n", ntests - failed - skipped, failed, skipped);
    return failed != 0;
}

int test_ferry_cli(const char *args, char *out, size_t cap)
{
#ifdef FERRY_CLI
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", FERRY_CLI, args);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    CHECK(WIFEXITED(st));
    return WEXITSTATUS(st);
#else
    (void)args;
    (void)out;
    (void)cap;
    SKIP("the ferry command is not built");
#endif
}

void test_ferry_cli_says(const char *args, int status, const char *want)
{
    size_t cap = 1 << 20;
    char *out = malloc(cap);
    CHECK(out != NULL);
    CHECK_EQ(test_ferry_cli(args, out, cap), status);
    CHECK_CONTAINS(out, want);
    free(out);
}

const char *test_json_field(const char *json, const char *key, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    size_t i = 0;
    while (*p && *p != ',' && *p != '}' && i + 1 < cap)
        buf[i++] = *p++;
    buf[i] = 0;
    return buf;
}

uint32_t test_tfrecord_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

size_t test_tfrecord_frame(uint8_t *out, const void *data, uint64_t n)
{
    memcpy(out, &n, 8);
    uint32_t c = test_tfrecord_mask(ferry_crc32c(0, out, 8));
    memcpy(out + 8, &c, 4);
    memcpy(out + 12, data, n);
    c = test_tfrecord_mask(ferry_crc32c(0, data, n));
    memcpy(out + 12 + n, &c, 4);
    return 16 + n;
}

void test_tar_header(uint8_t *h, const char *name, char type, uint64_t size, int gnu)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, gnu ? "ustar  " : "ustar\00000", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

void test_leave_temps(const char *path, char *stale, char *live, int *fd)
{
    sprintf(stale, "%s.tmp.Ab3x9Z", path);
    sprintf(live, "%s.tmp.LiVe12", path);
    test_write_file(stale, "partial", 7);
    test_write_file(live, "writing", 7);
    *fd = open(live, O_RDONLY);
    CHECK(*fd >= 0 && flock(*fd, LOCK_EX) == 0);
}

void test_check_temps(const char *stale, const char *live, int fd)
{
    CHECK(access(stale, F_OK) != 0);
    CHECK(access(live, F_OK) == 0);
    close(fd);
    unlink(live);
}

ferry_loader_opts test_loader_opts(uint32_t batch, uint32_t workers)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = batch;
    o.num_workers = workers;
    return o;
}

ferry_loader_opts test_stream_opts(uint32_t batch, uint32_t workers, uint32_t shards)
{
    ferry_loader_opts o = test_loader_opts(batch, workers);
    o.stream_shards = shards;
    o.rank = 0;
    o.world_size = 1;
    return o;
}

ferry_dataset *test_synthetic(uint64_t count, uint64_t var, uint64_t fail_every)
{
    ferry_synthetic_opts o = {
        .count = count, .bytes = 8, .var_max = var, .fail_every = fail_every, .seed = 7};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_synthetic(&ds, &o));
    return ds;
}

ferry_stream *test_stream_of(ferry_dataset *ds)
{
    ferry_stream *st;
    CHECK_OK(ferry_stream_from_dataset(&st, ds));
    return st;
}
