/*
 * Resuming a stream loader: the time to resume from a saved state and hand out
 * the first batch, against the time to read the samples the shuffle buffer holds.
 *
 * Usage: resume_bench DIR SAMPLES BYTES BUFFER BATCH WORKERS SHARDS REPEATS
 *
 * Packs SAMPLES synthetic samples of BYTES bytes into record shards under DIR
 * (read from the page cache afterwards), then streams them (ferry_stream_records,
 * shuffled across shards) through a shuffle buffer of BUFFER samples per stream
 * shard into a loader (BATCH, WORKERS, SHARDS stream_shards). Rounds, taking
 * turns, best of REPEATS each:
 *   fill:   a fresh loader's first batch (creation included): each shard's first
 *           next() reads BUFFER samples into its buffer, so this is "reading the
 *           samples that the shuffle buffers hold";
 *   read:   BUFFER * SHARDS samples read with ferry_stream_next from the record
 *           stream alone, on one thread (the bare cost of reading them);
 *   resume: a fresh loader given a state saved 40% into the epoch, up to its
 *           first batch: from its creation (as fill), and from the
 *           ferry_loader_state_resume call (the resume itself);
 *   epoch:  a whole epoch through the resumable chain, and through the same
 *           chain made not resumable (the record stream behind a stream of our
 *           own without save/restore/fetch): what being resumable costs.
 * Every resumed first batch is checked against the uninterrupted run's. Prints a
 * JSON line with the seconds.
 */
#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/stream.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "resume_bench: %s: %s: %s\n", what, ferry_errname(rc), ferry_last_errmsg());
    exit(1);
}

static uint64_t hash_batch(ferry_batch *b)
{
    uint64_t h = 1469598103934665603ull;
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        if (ferry_batch_field(b, f, &t) == 0) {
            const unsigned char *p = t.data;
            size_t n = ferry_tensor_nbytes(&t);
            for (size_t i = 0; i < n; i++)
                h = (h ^ p[i]) * 1099511628211ull;
        }
    }
    return h;
}

typedef struct setup {
    const char *dir;
    uint64_t buffer, batch, workers, shards;
} setup;

/* The record stream behind a stream of our own without save/restore/fetch: the
 * chain is then not resumable, and the loader takes no positions (the cost of
 * being resumable is the difference). */
static int pass_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    return ferry_stream_open(self, shard, nshards, epoch, (ferry_stream_iter **)iter);
}

static int pass_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    return ferry_stream_next(iter, out, ctx);
}

static void pass_close(void *iter)
{
    ferry_stream_close(iter);
}

static void pass_destroy(void *self)
{
    ferry_stream_free(self);
}

static const ferry_stream_vtable pass_vt = {pass_open, pass_next, pass_close, pass_destroy,
                                            NULL,      NULL,      NULL};

static ferry_stream *make_stream(const setup *s, int shuffled, int resumable)
{
    ferry_stream *st;
    int rc = ferry_stream_records(&st, s->dir, 1);
    if (!rc && !resumable) {
        ferry_stream *inner = st;
        rc = ferry_stream_create(&st, &pass_vt, inner, ferry_stream_field(inner, 0),
                                 ferry_stream_nfields(inner));
    }
    if (!rc && shuffled)
        rc = ferry_stream_shuffle(&st, st, s->buffer, 2);
    if (rc)
        die("stream", rc);
    return st;
}

static ferry_loader *make_loader(const setup *s, ferry_stream *st)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = (uint32_t)s->batch;
    o.num_workers = (uint32_t)s->workers;
    o.stream_shards = (uint32_t)s->shards;
    o.rank = 0;
    o.world_size = 1;
    ferry_loader *l;
    int rc = ferry_loader_create_stream(&l, st, &o);
    if (rc)
        die("loader", rc);
    return l;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: resume_bench DIR SAMPLES BYTES BUFFER BATCH WORKERS SHARDS "
                        "REPEATS\n");
        return 2;
    }
    setup s = {argv[1], strtoull(argv[4], 0, 10), strtoull(argv[5], 0, 10),
               strtoull(argv[6], 0, 10), strtoull(argv[7], 0, 10)};
    uint64_t samples = strtoull(argv[2], 0, 10), bytes = strtoull(argv[3], 0, 10);
    int repeats = atoi(argv[8]);
    char spec[128];
    snprintf(spec, sizeof spec, "synthetic:%llu,bytes=%llu", (unsigned long long)samples,
             (unsigned long long)bytes);
    ferry_dataset *ds;
    ferry_stream *none = NULL;
    int rc = ferry_source_open(spec, &ds, &none);
    if (rc)
        die("source", rc);
    ferry_writer_opts w = {.dir = s.dir, .shard_records = samples / 8 + 1};
    ferry_pack_opts po = {.writer = &w, .num_workers = 2};
    ferry_pack_result pr;
    if ((rc = ferry_pack(ds, NULL, &po, &pr)))
        die("pack", rc);
    ferry_dataset_free(ds);

    /* the uninterrupted run: its batches' hashes, and the state 40% in */
    ferry_stream *st = make_stream(&s, 1, 1);
    ferry_loader *l = make_loader(&s, st);
    uint64_t nb = samples / s.batch, cut = nb * 2 / 5;
    uint64_t *ref = calloc(nb + 1, sizeof *ref);
    static unsigned char state[1 << 26];
    size_t len = 0;
    for (uint64_t i = 0; i <= cut; i++) {
        ferry_batch *b;
        if ((rc = ferry_loader_next(l, &b)))
            die("next", rc);
        ref[i] = hash_batch(b);
        ferry_batch_release(b);
        if (i + 1 == cut && (rc = ferry_loader_state_save(l, state, sizeof state, &len)))
            die("state_save", rc);
    }
    ferry_loader_free(l);

    double fill = 1e9, read = 1e9, resume = 1e9, resume_only = 1e9;
    int nf = ferry_stream_nfields(st);
    void *data[FERRY_MAX_FIELDS];
    int64_t lens[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++)
        data[f] = malloc(ferry_field_nbytes(ferry_stream_field(st, f)) + 1);
    ferry_stream *plain = make_stream(&s, 0, 1);
    ferry_stream *unsaved = make_stream(&s, 1, 0);
    double epoch_saved = 1e9, epoch_unsaved = 1e9;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        l = make_loader(&s, st);
        ferry_batch *b;
        if ((rc = ferry_loader_next(l, &b)))
            die("next", rc);
        double t1 = now();
        if (hash_batch(b) != ref[0])
            die("first batch differs", FERRY_ECORRUPT);
        ferry_batch_release(b);
        ferry_loader_free(l);
        fill = t1 - t0 < fill ? t1 - t0 : fill;

        ferry_ctx *ctx;
        ferry_ctx_create(&ctx, 0, 0);
        t0 = now();
        for (uint64_t k = 0; k < s.shards; k++) {
            ferry_stream_iter *it;
            if ((rc = ferry_stream_open(plain, k, s.shards, 0, &it)))
                die("open", rc);
            for (uint64_t i = 0; i < s.buffer; i++) {
                ferry_sample smp = {nf, data, lens, {0}};
                if ((rc = ferry_stream_next(it, &smp, ctx)))
                    die("next", rc);
            }
            ferry_stream_close(it);
        }
        t1 = now();
        ferry_ctx_free(ctx);
        read = t1 - t0 < read ? t1 - t0 : read;

        /* a whole epoch, resumable (positions taken) and not */
        for (int k = 0; k < 2; k++) {
            t0 = now();
            l = make_loader(&s, k ? unsaved : st);
            while ((rc = ferry_loader_next(l, &b)) == 0)
                ferry_batch_release(b);
            if (rc != FERRY_END)
                die("epoch", rc);
            ferry_loader_free(l);
            t1 = now();
            double *e = k ? &epoch_unsaved : &epoch_saved;
            *e = t1 - t0 < *e ? t1 - t0 : *e;
        }
        t0 = now();
        l = make_loader(&s, st);
        double tc = now();
        if ((rc = ferry_loader_state_resume(l, state, len)))
            die("state_resume", rc);
        if ((rc = ferry_loader_next(l, &b)))
            die("next", rc);
        t1 = now();
        if (hash_batch(b) != ref[cut])
            die("the resumed batch differs from the uninterrupted run's", FERRY_ECORRUPT);
        ferry_batch_release(b);
        ferry_loader_free(l);
        resume = t1 - t0 < resume ? t1 - t0 : resume;
        resume_only = t1 - tc < resume_only ? t1 - tc : resume_only;
    }
    printf("{\"fill_s\": %.6f, \"read_s\": %.6f, \"resume_s\": %.6f, \"resume_only_s\": %.6f, "
           "\"state_bytes\": %zu, "
           "\"cut_batch\": %llu, \"epoch_resumable_s\": %.6f, \"epoch_not_resumable_s\": %.6f}\n",
           fill, read, resume, resume_only, len, (unsigned long long)cut, epoch_saved,
           epoch_unsaved);
    for (int f = 0; f < nf; f++)
        free(data[f]);
    free(ref);
    ferry_stream_free(plain);
    ferry_stream_free(unsaved);
    ferry_stream_free(st);
    return 0;
}
