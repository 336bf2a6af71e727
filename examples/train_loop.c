/*
 * A training loop's consumer: any source described as text (map-style or a
 * stream), a few epochs, bad samples skipped within a budget and counted, and a
 * summary from the loader's statistics. Every status is checked against
 * FERRY_END: an error is never taken for the end of an epoch.
 *
 *     cc train_loop.c $(pkg-config --cflags --libs ferry) -o train_loop
 *     ./train_loop 'csv:data/,header=1,shuffle=10000' 3
 *     ./train_loop 'synthetic:10000,fail_every=500' 2
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    const char *source = argc > 1 ? argv[1] : "synthetic:20000,bytes=64,fail_every=1000";
    uint64_t epochs = argc > 2 ? strtoull(argv[2], NULL, 10) : 2;
    ferry_dataset *ds = NULL;
    ferry_stream *st = NULL;
    ferry_loader *l = NULL;
    int rc, status = 1;

    if ((rc = ferry_source_open(source, &ds, &st)) != 0) {
        fprintf(stderr, "%s\n", ferry_last_errmsg());
        return 1;
    }
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = 64;
    o.num_workers = 2;
    o.shuffle = 1; /* map-style sources; a stream shuffles with shuffle=N in its text */
    o.seed = 1;
    o.on_error = FERRY_ON_ERROR_SKIP;
    o.skip_budget = 100; /* per epoch: more bad samples than this end the run */
    if (ds)
        rc = ferry_loader_create(&l, ds, &o);
    else
        rc = ferry_loader_create_stream(&l, st, &o);
    if (rc != 0) {
        fprintf(stderr, "%s\n", ferry_last_errmsg());
        goto done;
    }
    for (uint64_t epoch = 0; epoch < epochs; epoch++) {
        if ((rc = ferry_loader_start(l, epoch, 0)) != 0)
            break;
        uint64_t samples = 0;
        ferry_batch *b;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            /* ... copy the batch's fields to the device, take a step ... */
            samples += ferry_batch_size(b);
            ferry_batch_release(b);
        }
        if (rc != FERRY_END)
            break;
        printf("epoch %llu: %llu samples\n", (unsigned long long)epoch,
               (unsigned long long)samples);
    }
    if (rc != FERRY_END) {
        fprintf(stderr, "%s\n", ferry_loader_errmsg(l));
        goto done;
    }
    ferry_loader_stats s;
    ferry_loader_stats_get(l, &s);
    printf("%llu samples in %llu batches, %llu bad samples skipped; waited %.1f%% of the time\n",
           (unsigned long long)s.samples, (unsigned long long)s.batches,
           (unsigned long long)s.skipped,
           s.elapsed_ns ? 100.0 * (double)s.consumer_wait_ns / (double)s.elapsed_ns : 0.0);
    status = 0;
done:
    ferry_loader_free(l);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
    return status;
}
