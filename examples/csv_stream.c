/*
 * A stream in C: a CSV file read through a shuffle buffer, the way a file too
 * large for random access is read for training. With no argument it writes a
 * small class-sorted CSV (label, then four features) to a temporary directory
 * first, and shows that the shuffle buffer mixes the classes in every batch.
 *
 *     cc csv_stream.c $(pkg-config --cflags --libs ferry) -o csv_stream
 *     ./csv_stream [FILE.csv[.gz|.zst]]
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A CSV of `rows` rows sorted by class (4 classes), with a header line. */
static int write_sorted_csv(const char *path, int rows)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "label,a,b,c,d\n");
    for (int i = 0; i < rows; i++)
        fprintf(f, "%d,%d.5,%d,%d,%d\n", i * 4 / rows, i, i % 7, -i, i % 3);
    return fclose(f);
}

int main(int argc, char **argv)
{
    char dir[512] = "", path[600];
    if (argc > 1) {
        snprintf(path, sizeof path, "%s", argv[1]);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/ferry-example-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir) ||
            (snprintf(path, sizeof path, "%s/train.csv", dir), write_sorted_csv(path, 4000)) != 0) {
            perror("writing the example CSV");
            return 1;
        }
    }
    int status = 1, rc;
    ferry_stream *st = NULL;
    ferry_loader *l = NULL;

    ferry_csv_opts co;
    ferry_csv_opts_default(&co);
    co.dir = path;    /* a directory of part files, or one file (plain, gzip or zstd) */
    co.header = 1;    /* lines to skip at the top */
    co.missing = "0"; /* empty and NA cells read as 0 instead of failing */
    co.fields = "label:0:i64;x:1-4";
    if ((rc = ferry_stream_csv(&st, &co)) != 0)
        goto fail;
    /* the stream is in file order; a shuffle buffer of 1500 samples per shard
     * mixes it (a sample moves at most 1499 places earlier: more than a class) */
    if ((rc = ferry_stream_shuffle(&st, st, 1500, 7)) != 0)
        goto fail;

    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = 100;
    o.num_workers = 2;
    o.stream_shards = 1; /* shards read in parallel: fixed, so batches do not depend on workers */
    o.rank = 0;
    o.world_size = 1;
    if ((rc = ferry_loader_create_stream(&l, st, &o)) != 0)
        goto fail;
    ferry_batch *b;
    uint64_t batches = 0, mixed = 0, samples = 0;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor label;
        ferry_batch_field(b, 0, &label);
        const int64_t *y = label.data;
        int seen[4] = {0, 0, 0, 0}, classes = 0;
        for (uint32_t i = 0; i < ferry_batch_size(b); i++)
            if (y[i] >= 0 && y[i] < 4 && !seen[y[i]]++)
                classes++;
        mixed += classes > 1;
        batches++;
        samples += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    if (rc != FERRY_END) {
        fprintf(stderr, "%s\n", ferry_loader_errmsg(l));
        goto done;
    }
    printf("%llu samples in %llu batches, %llu of them with more than one class\n",
           (unsigned long long)samples, (unsigned long long)batches, (unsigned long long)mixed);
    status = argc > 1 || mixed * 10 >= batches * 8 ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "%s\n", ferry_last_errmsg());
done:
    ferry_loader_free(l);
    ferry_stream_free(st);
    if (dir[0]) {
        unlink(path);
        rmdir(dir);
    }
    return status;
}
