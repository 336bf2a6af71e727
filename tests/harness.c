#include "harness.h"

#include <signal.h>
#include <stdarg.h>
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
