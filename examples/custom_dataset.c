/*
 * A dataset written in C: a length and a get(index, sample) that writes the
 * sample's fields where the loader points it. Here sample i is a point on a
 * noisy spiral ("x", float32 [2]), its arm ("label", int64) and a name of
 * varying length ("name", uint8, variable up to 16 bytes), loaded shuffled on two
 * workers.
 *
 *     cc custom_dataset.c $(pkg-config --cflags --libs ferry) -lm -o custom_dataset
 *     ./custom_dataset [SAMPLES]
 */
#include <ferry/ferry.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t count;
    int arms;
} spiral;

static uint64_t spiral_len(void *self)
{
    return ((spiral *)self)->count;
}

/* Called from several worker threads at once: it reads only its arguments and
 * the dataset's settings, and draws its noise from the context's generator, so
 * sample i is the same whatever the number of workers. */
static int spiral_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const spiral *s = self;
    ferry_rng rng;
    ferry_ctx_rng(ctx, i, &rng);
    int64_t arm = (int64_t)(i % (uint64_t)s->arms);
    double t = (double)(i / (uint64_t)s->arms) / (double)(s->count / (uint64_t)s->arms + 1) * 6.0;
    double angle = t + 2.0 * 3.14159265358979 * (double)arm / s->arms;
    float *x = out->data[0];
    x[0] = (float)(t * cos(angle) + 0.1 * (ferry_rng_uniform(&rng) - 0.5));
    x[1] = (float)(t * sin(angle) + 0.1 * (ferry_rng_uniform(&rng) - 0.5));
    *(int64_t *)out->data[1] = arm;
    char name[32];
    int n = snprintf(name, sizeof name, "arm%lld-%llu", (long long)arm, (unsigned long long)i);
    if (n > 16)
        n = 16; /* the field's bound */
    memcpy(out->data[2], name, (size_t)n);
    out->length[2] = n;
    return 0;
}

static void spiral_destroy(void *self)
{
    free(self);
}

static const ferry_dataset_vtable spiral_vt = {spiral_len, spiral_get, spiral_destroy, NULL};

int main(int argc, char **argv)
{
    uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000;
    ferry_field fields[3] = {
        {.name = "x", .dtype = FERRY_F32, .ndim = 1, .shape = {2}},
        {.name = "label", .dtype = FERRY_I64, .ndim = 0},
        {.name = "name", .dtype = FERRY_U8, .ndim = 1, .shape = {16}, .variable = 1},
    };
    spiral *self = malloc(sizeof *self);
    if (!self)
        return 1;
    self->count = count;
    self->arms = 3;

    ferry_dataset *ds = NULL;
    ferry_loader *l = NULL;
    int rc, status = 1;
    /* the dataset owns self from here, also when this fails */
    if ((rc = ferry_dataset_create(&ds, &spiral_vt, self, fields, 3)) != 0) {
        fprintf(stderr, "%s\n", ferry_last_errmsg());
        return 1;
    }
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = 128;
    o.num_workers = 2;
    o.shuffle = 1;
    o.seed = 7;
    if ((rc = ferry_loader_create(&l, ds, &o)) != 0) {
        fprintf(stderr, "%s\n", ferry_last_errmsg());
        goto done;
    }
    uint64_t seen = 0, per_arm[3] = {0, 0, 0};
    ferry_batch *b;
    while ((rc = ferry_loader_next(l, &b)) == 0) {
        ferry_tensor x, label, name, len;
        ferry_batch_field(b, 0, &x);     /* float32 [n, 2] */
        ferry_batch_field(b, 1, &label); /* int64 [n] */
        ferry_batch_field(b, 2, &name);  /* uint8 [n, 16], zero-padded */
        ferry_batch_lengths(b, 2, &len); /* int64 [n]: the bytes of each name */
        const int64_t *lab = label.data, *ln = len.data;
        for (uint32_t k = 0; k < ferry_batch_size(b); k++) {
            if (lab[k] < 0 || lab[k] > 2 || ln[k] < 1 || ln[k] > 16) {
                fprintf(stderr, "sample %u of batch %llu is wrong\n", k,
                        (unsigned long long)ferry_batch_number(b));
                ferry_batch_release(b);
                goto done;
            }
            per_arm[lab[k]]++;
        }
        if (seen == 0) {
            const float *p = x.data;
            const char *nm = name.data;
            printf("first sample: x = (%.3f, %.3f), label %lld, name \"%.*s\"\n", p[0], p[1],
                   (long long)lab[0], (int)ln[0], nm);
        }
        seen += ferry_batch_size(b);
        ferry_batch_release(b);
    }
    if (rc != FERRY_END) {
        fprintf(stderr, "%s\n", ferry_loader_errmsg(l));
        goto done;
    }
    printf("%llu samples: %llu, %llu and %llu per arm\n", (unsigned long long)seen,
           (unsigned long long)per_arm[0], (unsigned long long)per_arm[1],
           (unsigned long long)per_arm[2]);
    status = seen == count ? 0 : 1;
done:
    ferry_loader_free(l);
    ferry_dataset_free(ds);
    return status;
}
