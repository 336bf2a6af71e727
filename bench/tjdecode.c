/*
 * tjdecode - the image benchmark's anchor: a plain TurboJPEG decode loop.
 *
 * Usage: tjdecode [--threads N] [--seconds S | --passes P] [--list FILE] PATH...
 *
 * Each PATH is a JPEG file or a directory, walked recursively for files named
 * *.jpg or *.jpeg (any case); --list FILE adds the paths in FILE, one a line.
 * The files are sorted by path. N threads (default 1) take files from one shared
 * atomic counter, in that order, round and round: each opens the file, reads it
 * whole into a buffer that it reuses (growing it when a file is bigger), closes
 * it, and decodes it fully to packed RGB with tjDecompress2 (default flags:
 * accurate integer DCT, fancy upsampling) into a second reused buffer. There is no
 * other work: no crop, no resize, no conversion to float. libjpeg's warnings (a
 * truncated file, say) do not count as errors; fatal errors do.
 *
 * --passes P (default 1) decodes every file P times in all; --seconds S instead
 * runs until S seconds have passed (each thread finishes the image it is on).
 * The clock starts before the threads are created and stops when the last one
 * has joined.
 *
 * Prints one JSON object on stdout: threads, files, images (decoded), bytes
 * (file bytes read), pixels (decoded), seconds, images_per_s, errors. Exits 1 if
 * any image failed (the first errors go to stderr), 2 on bad usage.
 *
 * Build: cc -O2 tjdecode.c -o tjdecode $(pkg-config --cflags --libs libturbojpeg)
 *        -lpthread
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#define MAX_THREADS 256
#define MAX_REPORTED_ERRORS 5

static char **files;
static size_t nfiles, capfiles;

static atomic_ullong next_image; /* the shared counter */
static unsigned long long limit; /* images in all with --passes (0: by time) */
static double deadline;          /* with --seconds: stop at this time */
static atomic_int reported;

typedef struct {
    unsigned long long images, bytes, pixels, errors;
} result;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "tjdecode: %s\n", what);
    exit(2);
}

static void add_file(const char *path)
{
    if (nfiles == capfiles) {
        capfiles = capfiles ? capfiles * 2 : 1024;
        files = realloc(files, capfiles * sizeof *files);
        if (!files)
            die("out of memory");
    }
    files[nfiles] = strdup(path);
    if (!files[nfiles])
        die("out of memory");
    nfiles++;
}

static int is_jpeg_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static void walk(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "tjdecode: %s: %s\n", dir, strerror(errno));
        exit(2);
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p)
            die("out of memory");
        snprintf(p, n, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                walk(p);
            else if (S_ISREG(st.st_mode) && is_jpeg_name(e->d_name))
                add_file(p);
        }
        free(p);
    }
    closedir(d);
}

static void add_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "tjdecode: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (S_ISDIR(st.st_mode))
        walk(path);
    else
        add_file(path);
}

static void add_list(const char *list)
{
    FILE *f = fopen(list, "r");
    if (!f) {
        fprintf(stderr, "tjdecode: %s: %s\n", list, strerror(errno));
        exit(2);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (n > 0)
            add_path(line);
    }
    free(line);
    fclose(f);
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void report(const char *path, const char *msg)
{
    if (atomic_fetch_add(&reported, 1) < MAX_REPORTED_ERRORS)
        fprintf(stderr, "tjdecode: %s: %s\n", path, msg);
}

/* Reads the whole file into *buf (grown as needed). Returns its size, or -1. */
static long read_file(const char *path, unsigned char **buf, size_t *cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        report(path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        report(path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size > *cap) {
        size_t c = size + size / 4;
        unsigned char *p = realloc(*buf, c);
        if (!p) {
            report(path, "out of memory");
            close(fd);
            return -1;
        }
        *buf = p;
        *cap = c;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, *buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            report(path, r < 0 ? strerror(errno) : "short read");
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    return (long)size;
}

static void *worker(void *arg)
{
    result *res = arg;
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        report("tjInitDecompress", tjGetErrorStr2(NULL));
        res->errors++;
        return NULL;
    }
    unsigned char *src = NULL, *dst = NULL;
    size_t src_cap = 0, dst_cap = 0;
    for (;;) {
        unsigned long long k;
        if (limit) {
            k = atomic_fetch_add(&next_image, 1);
            if (k >= limit)
                break;
        } else {
            if (now() >= deadline)
                break;
            k = atomic_fetch_add(&next_image, 1);
        }
        const char *path = files[k % nfiles];
        long n = read_file(path, &src, &src_cap);
        if (n < 0) {
            res->errors++;
            continue;
        }
        int w, h, subsamp, cs;
        if (tjDecompressHeader3(tj, src, (unsigned long)n, &w, &h, &subsamp, &cs) != 0) {
            report(path, tjGetErrorStr2(tj));
            res->errors++;
            continue;
        }
        size_t need = (size_t)w * (size_t)h * 3;
        if (need > dst_cap) {
            unsigned char *p = realloc(dst, need);
            if (!p) {
                report(path, "out of memory");
                res->errors++;
                continue;
            }
            dst = p;
            dst_cap = need;
        }
        if (tjDecompress2(tj, src, (unsigned long)n, dst, w, 0, h, TJPF_RGB, 0) != 0 &&
            tjGetErrorCode(tj) == TJERR_FATAL) {
            report(path, tjGetErrorStr2(tj));
            res->errors++;
            continue;
        }
        res->images++;
        res->bytes += (unsigned long long)n;
        res->pixels += (unsigned long long)w * (unsigned long long)h;
    }
    free(src);
    free(dst);
    tjDestroy(tj);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: tjdecode [--threads N] [--seconds S | --passes P] "
                    "[--list FILE] PATH...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = 1;
    double seconds = 0;
    long passes = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
            if (threads < 1 || threads > MAX_THREADS)
                die("--threads must be 1..256");
        } else if (!strcmp(a, "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
            if (!(seconds > 0))
                die("--seconds must be > 0");
        } else if (!strcmp(a, "--passes") && i + 1 < argc) {
            passes = atol(argv[++i]);
            if (passes < 1)
                die("--passes must be >= 1");
        } else if (!strcmp(a, "--list") && i + 1 < argc) {
            add_list(argv[++i]);
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help") || a[0] == '-') {
            usage();
        } else {
            add_path(a);
        }
    }
    if (seconds > 0 && passes > 0)
        die("give --seconds or --passes, not both");
    if (nfiles == 0)
        die("no JPEG files");
    qsort(files, nfiles, sizeof *files, cmp_path);
    limit = seconds > 0 ? 0 : (unsigned long long)(passes ? passes : 1) * nfiles;

    pthread_t tid[MAX_THREADS];
    result res[MAX_THREADS];
    memset(res, 0, sizeof res);
    double t0 = now();
    deadline = t0 + seconds;
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, &res[t]) != 0)
            die("pthread_create failed");
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    double el = now() - t0;

    result sum = {0, 0, 0, 0};
    for (int t = 0; t < threads; t++) {
        sum.images += res[t].images;
        sum.bytes += res[t].bytes;
        sum.pixels += res[t].pixels;
        sum.errors += res[t].errors;
    }
    printf("{\"threads\": %d, \"files\": %zu, \"images\": %llu, \"bytes\": %llu, "
           "\"pixels\": %llu, \"seconds\": %.6f, \"images_per_s\": %.1f, "
           "\"errors\": %llu}\n",
           threads, nfiles, sum.images, sum.bytes, sum.pixels, el, el > 0 ? sum.images / el : 0.0,
           sum.errors);
    for (size_t i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
    return sum.errors ? 1 : 0;
}
