/* Loads one epoch of synthetic samples through the installed library. */
#include <ferry/ferry.h>
#include <stdio.h>

int main(void)
{
    ferry_dataset *ds;
    ferry_loader *l;
    ferry_batch *b;
    ferry_loader_opts o;
    if (ferry_dataset_open(&ds, "synthetic:1000,bytes=8") != 0)
        return 1;
    ferry_loader_opts_default(&o);
    o.batch_size = 100;
    o.num_workers = 2;
    if (ferry_loader_create(&l, ds, &o) != 0)
        return 1;
    unsigned n = 0;
    while (ferry_loader_next(l, &b) == 0) {
        n += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    printf("consumer: %u samples with ferry %s\n", n, ferry_version_string());
    return n == 1000 ? 0 : 1;
}
