/*
 * The ferry side of bench/tensors_vs.py: saves, loads and looks up named tensors
 * through the public API (ferry/tensors.h) and prints what it timed as one JSON
 * line. Built by the script with cc against the library it benchmarks.
 *
 *   tensors_bench save SPEC BLOB OUT REPS   save the tensors SPEC describes (one a
 *       line: NAME DTYPE NBYTES NDIM DIMS...) whose bytes lie back to back in BLOB
 *   tensors_bench load FILE REPS VERIFY     open (CRCs checked when VERIFY is 1) and
 *       touch every byte of every tensor
 *   tensors_bench many OUT N                write N small tensors
 *   tensors_bench lookup FILE NAME REPS     open FILE and find NAME
 */
#define _GNU_SOURCE
#include <ferry/tensors.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "tensors_bench: %s: %s\n", what, ferry_last_errmsg());
    exit(1);
}

static void print_times(const char *what, const double *t, int reps, unsigned long long bytes,
                        unsigned long long check)
{
    printf("{\"what\": \"%s\", \"bytes\": %llu, \"check\": %llu, \"seconds\": [", what, bytes,
           check);
    for (int i = 0; i < reps; i++)
        printf("%s%.6f", i ? ", " : "", t[i]);
    printf("]}\n");
}

static int cmd_save(char **argv)
{
    FILE *spec = fopen(argv[0], "r"), *blob = fopen(argv[1], "rb");
    const char *out = argv[2];
    int reps = atoi(argv[3]);
    if (!spec || !blob || reps < 1 || reps > 100) {
        fprintf(stderr, "tensors_bench save: bad arguments\n");
        return 2;
    }
    fseek(blob, 0, SEEK_END);
    long size = ftell(blob);
    fseek(blob, 0, SEEK_SET);
    unsigned char *bytes = malloc(size ? (size_t)size : 1);
    if (!bytes || fread(bytes, 1, (size_t)size, blob) != (size_t)size) {
        fprintf(stderr, "tensors_bench save: cannot read the blob\n");
        return 1;
    }
    fclose(blob);
    size_t n = 0, cap = 1024;
    ferry_tensor_src *src = malloc(cap * sizeof *src);
    char name[512], dtype[32];
    unsigned long long nbytes, at = 0;
    int ndim;
    while (fscanf(spec, "%511s %31s %llu %d", name, dtype, &nbytes, &ndim) == 4) {
        if (n == cap)
            src = realloc(src, (cap *= 2) * sizeof *src);
        int64_t *shape = malloc((size_t)(ndim ? ndim : 1) * sizeof *shape);
        for (int d = 0; d < ndim; d++) {
            long long v;
            if (fscanf(spec, "%lld", &v) != 1)
                return 2;
            shape[d] = v;
        }
        src[n++] = (ferry_tensor_src){strdup(name), ferry_st_dtype_from_name(dtype), ndim, shape,
                                      bytes + at};
        at += nbytes;
    }
    fclose(spec);
    if (at != (unsigned long long)size) {
        fprintf(stderr, "tensors_bench save: the spec covers %llu bytes, the blob %ld\n", at, size);
        return 2;
    }
    double t[100];
    for (int r = 0; r < reps; r++) {
        unlink(out);
        double t0 = now();
        if (ferry_tensors_save(out, src, n, NULL) != 0)
            die("save");
        t[r] = now() - t0;
    }
    print_times("save", t, reps, at, n);
    return 0;
}

/* Reads every byte (as 64-bit words where it can). */
static unsigned long long touch(const unsigned char *p, unsigned long long n)
{
    unsigned long long s = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned long long w;
        memcpy(&w, p + i, 8);
        s += w;
    }
    for (; i < n; i++)
        s += p[i];
    return s;
}

static int cmd_load(char **argv)
{
    const char *path = argv[0];
    int reps = atoi(argv[1]), verify = atoi(argv[2]);
    if (reps < 1 || reps > 100)
        return 2;
    double t[100];
    unsigned long long sum = 0, bytes = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ferry_tensors *ts;
        ferry_tensors_opts o = {.flags = verify ? 0 : FERRY_TENSORS_NO_VERIFY};
        if (ferry_tensors_open(&ts, path, &o) != 0)
            die("open");
        sum = bytes = 0;
        for (size_t i = 0; i < ferry_tensors_count(ts); i++) {
            const ferry_tensor_info *ti = ferry_tensors_at(ts, i);
            sum += touch(ti->data, ti->nbytes);
            bytes += ti->nbytes;
        }
        ferry_tensors_free(ts);
        t[r] = now() - t0;
    }
    print_times(verify ? "load" : "load_no_verify", t, reps, bytes, sum);
    return 0;
}

static int cmd_many(char **argv)
{
    int n = atoi(argv[1]);
    if (n < 1 || n > 10000000)
        return 2;
    ferry_tensor_src *src = calloc((size_t)n, sizeof *src);
    static int64_t shape[2] = {4, 16};
    float *data = malloc((size_t)n * 64 * sizeof *data);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.mlp.weight", i);
        for (int k = 0; k < 64; k++)
            data[(size_t)i * 64 + k] = (float)(i + k);
        src[i] = (ferry_tensor_src){strdup(name), FERRY_ST_F32, 2, shape, data + (size_t)i * 64};
    }
    if (ferry_tensors_save(argv[0], src, (size_t)n, NULL) != 0)
        die("save");
    printf("{\"what\": \"many\", \"tensors\": %d}\n", n);
    return 0;
}

static int cmd_lookup(char **argv)
{
    const char *path = argv[0], *name = argv[1];
    int reps = atoi(argv[2]);
    if (reps < 1 || reps > 100)
        return 2;
    double t[100];
    unsigned long long sum = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ferry_tensors *ts;
        if (ferry_tensors_open(&ts, path, NULL) != 0)
            die("open");
        const ferry_tensor_info *ti = ferry_tensors_find(ts, name);
        if (!ti) {
            fprintf(stderr, "tensors_bench: no tensor %s\n", name);
            return 1;
        }
        sum = touch(ti->data, ti->nbytes);
        ferry_tensors_free(ts);
        t[r] = now() - t0;
    }
    print_times("lookup", t, reps, 0, sum);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && !strcmp(argv[1], "save"))
        return cmd_save(argv + 2);
    if (argc >= 5 && !strcmp(argv[1], "load"))
        return cmd_load(argv + 2);
    if (argc >= 4 && !strcmp(argv[1], "many"))
        return cmd_many(argv + 2);
    if (argc >= 5 && !strcmp(argv[1], "lookup"))
        return cmd_lookup(argv + 2);
    fprintf(stderr, "usage: tensors_bench save|load|many|lookup ...\n");
    return 2;
}
