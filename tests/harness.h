/*
 * A small test harness: TEST(name) { ... } registers a test; the runner runs one
 * test (by name) or each in its own child process, with a timeout. CHECK failures
 * print where and end the test's process. A test that cannot run (a missing
 * ../shared, say) calls SKIP("why"), which exits 77, ctest's skip code.
 */
#ifndef FERRY_TEST_HARNESS_H
#define FERRY_TEST_HARNESS_H

#include <ferry/loader.h>
#include <ferry/stream.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void reg_##name(void)                                      \
    {                                                                                              \
        test_register(#name, test_##name);                                                         \
    }                                                                                              \
    static void test_##name(void)

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            test_fail(__FILE__, __LINE__, "CHECK(%s)", #c);                                        \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);               \
    } while (0)

#define CHECK_U64(a, b)                                                                            \
    do {                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);             \
        if (a_ != b_)                                                                              \
            test_fail(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b, a_, b_);               \
    } while (0)

/* rc must be 0; on failure prints ferry's message too. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0)                                                                              \
            test_fail(__FILE__, __LINE__, "%s returned %d (%s): %s", #expr, rc_,                   \
                      ferry_errname(rc_), ferry_last_errmsg());                                    \
    } while (0)

#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != (want))                                                                         \
            test_fail(__FILE__, __LINE__, "%s returned %d (%s), wanted %s: %s", #expr, rc_,        \
                      ferry_errname(rc_), #want, ferry_last_errmsg());                             \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *h_ = (hay);                                                                    \
        if (!h_ || !strstr(h_, (needle)))                                                          \
            test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)",    \
                      (needle));                                                                   \
    } while (0)

#define SKIP(why)                                                                                  \
    do {                                                                                           \
        printf("SKIP: %s\n", (why));                                                               \
        fflush(stdout);                                                                            \
        exit(77);                                                                                  \
    } while (0)

/* A fresh directory for one test's files, under $TMPDIR (or /tmp), named by tag:
 * its path is test_dir until test_remove_dir. */
extern char test_dir[256];
void test_make_dir(const char *tag);
void test_remove_dir(void);
/* test_dir/name in buf (512 bytes); returns buf. */
const char *test_path(const char *name, char *buf);
/* Runs the ferry command (the build's, FERRY_CLI) with args, a shell fragment:
 * its exit status, with its stdout and stderr in out (cap bytes, NUL-terminated).
 * Fails the test if it did not exit; skips it where the command is not built. */
int test_ferry_cli(const char *args, char *out, size_t cap);
/* Runs it with args as test_ferry_cli does: it must exit status, its output
 * holding want. */
void test_ferry_cli_says(const char *args, int status, const char *want);
/* The command's path, for a fragment that runs it more than once. */
#ifdef FERRY_CLI
#define TEST_FERRY_CLI FERRY_CLI
#else
#define TEST_FERRY_CLI "ferry" /* unused: test_ferry_cli skips */
#endif

/* Writes n bytes as the whole file at path. */
void test_write_file(const char *path, const void *data, size_t n);
/* The whole file at path, malloc'd with a NUL after it (text reads as a string),
 * its size in *n; fails the test, naming the file, when it cannot be read. */
unsigned char *test_read_file(const char *path, size_t *n);
/* SKIPs the test when path (under FERRY_SHARED_DIR, a compile definition of each
 * test executable, so the caller names it) cannot be read: ../shared is absent. */
void test_need_shared(const char *path);

/* The value of "key": in a one-line JSON object (the command's --json), as text
 * in buf (cap bytes); NULL when the object has no such key. */
const char *test_json_field(const char *json, const char *key, char *buf, size_t cap);
/* A TFRecord frame of n bytes of data at out (16 + n bytes, its length returned):
 * the length, its masked CRC-32C, the data and the data's masked CRC-32C. */
uint32_t test_tfrecord_mask(uint32_t crc);
size_t test_tfrecord_frame(uint8_t *out, const void *data, uint64_t n);
/* A 512-byte tar header at h for a member of size bytes, of type ('0' a file,
 * 'L' a GNU long name, 'x' pax), ustar magic, or GNU's when gnu. */
void test_tar_header(uint8_t *h, const char *name, char type, uint64_t size, int gnu);
/* A killed writer's temporary beside path (not locked: stale) and a live one
 * (locked through *fd); after a write of path only the live one must be left:
 * test_check_temps checks that and closes and removes the live one. */
void test_leave_temps(const char *path, char *stale, char *live, int *fd);
void test_check_temps(const char *stale, const char *live, int fd);
/* A synthetic dataset of count samples (seed 7): 8 bytes, variable up to var
 * when nonzero, every fail_every-th one failing when nonzero. */
ferry_dataset *test_synthetic(uint64_t count, uint64_t var, uint64_t fail_every);
/* A stream over ds, in index order. */
ferry_stream *test_stream_of(ferry_dataset *ds);
/* Loader options: the defaults with batch and workers set. */
ferry_loader_opts test_loader_opts(uint32_t batch, uint32_t workers);
/* Loader options for a stream read whole by one process: batch, workers and
 * stream shards set, rank 0 of a world of 1, the rest the defaults. */
ferry_loader_opts test_stream_opts(uint32_t batch, uint32_t workers, uint32_t shards);
/* FNV-1a over bytes, for comparing batches. */
static inline uint64_t test_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
