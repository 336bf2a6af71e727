/*
 * Resuming the file streams (TFRecord, WebDataset tars), plain and gzip: at every
 * position of every shard, a saved and restored iterator goes on with exactly the
 * samples of an uninterrupted read, byte for byte, also under a shuffle buffer
 * (whose restore fetches its samples again); fetch of every sample's pos gives the
 * sample, in any order; damaged, foreign and forged states are errors.
 */
#include "harness.h"

#include <ferry/ferry.h>
#include <ferry/records.h>
#include <ferry/stream.h>

#include <zlib.h>

#define TF FERRY_SHARED_DIR "/testdata/tfrecord"
#define WD FERRY_SHARED_DIR "/testdata/webdataset"
#define MAXN 6000
#define STATE_CAP 65536

/* One result of next() or fetch(): its code, its bytes (every field's length and
 * meaningful bytes), its pos. */
typedef struct rec {
    int rc;
    uint8_t *b;
    size_t n;
    ferry_pos pos;
    char msg[160]; /* an error's message (its start: file, record, offset) */
} rec;

typedef struct src {
    ferry_stream *st;
    int nf;
    ferry_field f[FERRY_MAX_FIELDS];
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    ferry_ctx *ctx;
} src;

/* Opens spec as a stream; with buffer > 0 under a shuffle buffer of that size. */
static void src_open(src *s, const char *spec, size_t buffer, uint64_t epoch)
{
    ferry_dataset *ds;
    memset(s, 0, sizeof *s);
    CHECK_OK(ferry_source_open(spec, &ds, &s->st));
    CHECK(ds == NULL && s->st != NULL);
    CHECK(ferry_stream_resumable(s->st));
    if (buffer)
        CHECK_OK(ferry_stream_shuffle(&s->st, s->st, buffer, 99));
    CHECK(ferry_stream_resumable(s->st));
    s->nf = ferry_stream_nfields(s->st);
    for (int k = 0; k < s->nf; k++) {
        s->f[k] = *ferry_stream_field(s->st, k);
        s->data[k] = calloc(1, ferry_field_nbytes(&s->f[k]) + 1);
    }
    CHECK_OK(ferry_ctx_create(&s->ctx, 0, epoch));
}

static void src_close(src *s)
{
    for (int k = 0; k < s->nf; k++)
        free(s->data[k]);
    ferry_ctx_free(s->ctx);
    ferry_stream_free(s->st);
}

static void keep(src *s, int rc, const ferry_sample *smp, rec *r)
{
    r->rc = rc;
    r->b = NULL;
    r->n = 0;
    r->pos = smp->pos;
    r->msg[0] = 0;
    if (rc != 0) {
        if (rc < 0)
            snprintf(r->msg, sizeof r->msg, "%s", ferry_last_errmsg());
        return;
    }
    size_t n = 0;
    for (int k = 0; k < s->nf; k++)
        n += 8 + ferry_field_nbytes(&s->f[k]);
    r->b = malloc(n);
    for (int k = 0; k < s->nf; k++) {
        const ferry_field *f = &s->f[k];
        size_t bytes =
            f->variable ? (size_t)s->len[k] * ferry_field_row_elems(f) * ferry_dtype_size(f->dtype)
                        : ferry_field_nbytes(f);
        CHECK(bytes <= ferry_field_nbytes(f));
        int64_t l = f->variable ? s->len[k] : -1;
        memcpy(r->b + r->n, &l, 8);
        memcpy(r->b + r->n + 8, s->data[k], bytes);
        r->n += 8 + bytes;
    }
}

static void next_rec(src *s, ferry_stream_iter *it, rec *r)
{
    ferry_sample smp = {s->nf, s->data, s->len, {0}};
    keep(s, ferry_stream_next(it, &smp, s->ctx), &smp, r);
}

static void fetch_rec(src *s, ferry_stream_iter *it, const ferry_pos *pos, rec *r)
{
    ferry_sample smp = {s->nf, s->data, s->len, {0}};
    keep(s, ferry_stream_fetch(it, pos, &smp, s->ctx), &smp, r);
}

/* What a fetch of the pos {epoch 0, a, b} returns (the sample dropped). */
static int fetch_rc(src *s, ferry_stream_iter *it, uint64_t a, uint64_t b)
{
    ferry_pos pos = {0, a, b, 0};
    rec r;
    fetch_rec(s, it, &pos, &r);
    free(r.b);
    return r.rc;
}

static int same(const rec *a, const rec *b)
{
    return a->rc == b->rc && a->n == b->n && (a->n == 0 || !memcmp(a->b, b->b, a->n)) &&
           !strcmp(a->msg, b->msg);
}

/* Every result of one shard up to and with its FERRY_END (errors in between are
 * results too: the read goes on after them). */
static size_t read_all(src *s, uint64_t shard, uint64_t nshards, uint64_t epoch, rec *out)
{
    ferry_stream_iter *it;
    CHECK_OK(ferry_stream_open(s->st, shard, nshards, epoch, &it));
    size_t n = 0;
    do {
        CHECK(n < MAXN);
        next_rec(s, it, &out[n]);
    } while (out[n++].rc != FERRY_END);
    ferry_stream_close(it);
    return n;
}

static void free_recs(rec *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(r[i].b);
}

/* Reads k results, saves; the saving iterator goes on unchanged, and a fresh one
 * restored from the state yields the rest of `all` (n results). stride > 1 tests
 * every stride-th k only (long shards). */
static void check_shard(src *s, uint64_t shard, uint64_t nshards, uint64_t epoch, const rec *all,
                        size_t n, size_t stride)
{
    static uint8_t state[STATE_CAP];
    for (size_t k = 0; k < n; k += (k + stride < n ? stride : 1)) {
        ferry_stream_iter *it, *re;
        rec r;
        CHECK_OK(ferry_stream_open(s->st, shard, nshards, epoch, &it));
        for (size_t i = 0; i < k; i++) {
            next_rec(s, it, &r);
            CHECK(same(&r, &all[i]));
            free(r.b);
        }
        size_t len;
        CHECK_OK(ferry_stream_save(it, state, sizeof state, &len));
        CHECK_OK(ferry_stream_open(s->st, shard, nshards, epoch, &re));
        CHECK_OK(ferry_stream_restore(re, state, len, s->ctx));
        for (size_t i = k; i < n; i++) {
            next_rec(s, re, &r);
            if (!same(&r, &all[i]))
                test_fail(__FILE__, __LINE__,
                          "shard %llu of %llu: restored after %zu, result %zu differs (rc %d, "
                          "wanted %d): %s",
                          (unsigned long long)shard, (unsigned long long)nshards, k, i, r.rc,
                          all[i].rc, ferry_last_errmsg());
            free(r.b);
            /* the saved iterator goes on as if nothing happened */
            next_rec(s, it, &r);
            CHECK(same(&r, &all[i]));
            free(r.b);
        }
        ferry_stream_close(re);
        ferry_stream_close(it);
    }
}

/* fetch(pos) of every sample gives it again: in order (one pass over a gzip file),
 * from an iterator of another shard and epoch, backwards, and interleaved with
 * next() on the same iterator. */
static void check_fetch(src *s, uint64_t shard, uint64_t nshards, uint64_t epoch, const rec *all,
                        size_t n)
{
    ferry_stream_iter *it;
    rec r;
    /* from another shard's iterator, of another epoch (pos says which) */
    CHECK_OK(ferry_stream_open(s->st, (shard + 1) % nshards, nshards, epoch + 1, &it));
    for (size_t i = 0; i < n; i++)
        if (all[i].rc == 0) {
            fetch_rec(s, it, &all[i].pos, &r);
            CHECK(same(&r, &all[i]));
            free(r.b);
        }
    ferry_stream_close(it);
    CHECK_OK(ferry_stream_open(s->st, shard, nshards, epoch, &it));
    for (size_t i = 0; i < n; i++)
        if (all[i].rc == 0) {
            fetch_rec(s, it, &all[i].pos, &r);
            CHECK(same(&r, &all[i]));
            free(r.b);
        }
    for (size_t i = n; i-- > 0;)
        if (all[i].rc == 0) {
            fetch_rec(s, it, &all[i].pos, &r);
            CHECK(same(&r, &all[i]));
            free(r.b);
        }
    for (size_t i = 0; i < n; i++) {
        next_rec(s, it, &r);
        CHECK(same(&r, &all[i]));
        free(r.b);
        size_t j = (i * 7 + 3) % n;
        if (all[j].rc == 0) {
            fetch_rec(s, it, &all[j].pos, &r);
            CHECK(same(&r, &all[j]));
            free(r.b);
        }
    }
    ferry_stream_close(it);
}

/* The whole check of spec for nshards shards: the leaf alone (resume and fetch),
 * and under a shuffle buffer of 3 (resume). Returns the samples read. */
static size_t check_resume(const char *spec, uint64_t nshards, uint64_t epoch, size_t stride)
{
    static rec all[MAXN];
    size_t total = 0;
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        src s;
        src_open(&s, spec, shuffled ? 3 : 0, epoch);
        for (uint64_t shard = 0; shard < nshards; shard++) {
            size_t n = read_all(&s, shard, nshards, epoch, all);
            if (!shuffled) {
                total += n - 1;
                check_fetch(&s, shard, nshards, epoch, all, n);
            }
            check_shard(&s, shard, nshards, epoch, all, n, stride);
            free_recs(all, n);
        }
        src_close(&s);
    }
    return total;
}

/* The state's own bytes start after the 16-byte header (magic, version, CRC-32C,
 * length): reseal after an edit. */
static void reseal(uint8_t *b, size_t len)
{
    uint32_t crc = ferry_crc32c(0, b + 16, len - 16), l = (uint32_t)(len - 16);
    memcpy(b + 8, &crc, 4);
    memcpy(b + 12, &l, 4);
}

/* Saves shard `shard` of nshards after k samples of spec's leaf. */
static size_t save_after(const char *spec, uint64_t shard, uint64_t nshards, size_t k,
                         uint8_t *state)
{
    src s;
    rec r;
    ferry_stream_iter *it;
    src_open(&s, spec, 0, 0);
    CHECK_OK(ferry_stream_open(s.st, shard, nshards, 0, &it));
    for (size_t i = 0; i < k; i++) {
        next_rec(&s, it, &r);
        CHECK_EQ(r.rc, 0);
        free(r.b);
    }
    size_t len;
    CHECK_OK(ferry_stream_save(it, state, STATE_CAP, &len));
    ferry_stream_close(it);
    src_close(&s);
    return len;
}

/* Restores state into shard `shard` of nshards of spec's leaf: the code, and the
 * message in msg. */
static int restore_into(const char *spec, uint64_t shard, uint64_t nshards, const uint8_t *state,
                        size_t len, char *msg)
{
    src s;
    ferry_stream_iter *it;
    src_open(&s, spec, 0, 0);
    CHECK_OK(ferry_stream_open(s.st, shard, nshards, 0, &it));
    int rc = ferry_stream_restore(it, state, len, s.ctx);
    snprintf(msg, 512, "%s", rc < 0 ? ferry_last_errmsg() : "");
    if (rc == 0) { /* usable: read to the end */
        rec r;
        do {
            next_rec(&s, it, &r);
            free(r.b);
        } while (r.rc != FERRY_END);
    }
    ferry_stream_close(it);
    src_close(&s);
    return rc;
}

/* st with the 8 bytes at `at` of the state's own set to v, resealed, given to
 * shard 0 of 3 of spec: refused as corrupt, with want in the message. */
static void check_forged(const char *spec, const uint8_t *st, size_t len, size_t at, uint64_t v,
                         const char *want)
{
    static uint8_t b[STATE_CAP];
    char msg[512];
    memcpy(b, st, len);
    memcpy(b + 16 + at, &v, 8);
    reseal(b, len);
    CHECK_RC(restore_into(spec, 0, 3, b, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, want);
}

/* ---- TFRecord ---- */

/* A file of count records, record i of 1 + (i * 37 + seed) % 300 bytes; plain, or
 * gzip in one member or (flags & 1) two; flags & 2: record count / 3 has a bad data
 * CRC (an error for it alone) and record 2 * count / 3 a bad length CRC (the rest
 * of the file is lost). */
static void write_tfr(const char *name, int count, int seed, int gzip, int flags)
{
    int members = flags & 1 ? 2 : 1;
    static uint8_t file[1 << 20];
    uint8_t data[512];
    size_t at = 0, cut[8] = {0};
    for (int i = 0; i < count; i++) {
        size_t n = 1 + (size_t)(i * 37 + seed) % 300;
        for (size_t j = 0; j < n; j++)
            data[j] = (uint8_t)(seed * 131 + i * 7 + j);
        size_t f = test_tfrecord_frame(file + at, data, n);
        if ((flags & 2) && i == count / 3)
            file[at + f - 1] ^= 1;
        if ((flags & 2) && i == 2 * count / 3)
            file[at + 8] ^= 1;
        at += f;
        if (members > 1 && i == count / 2)
            cut[1] = at;
    }
    char path[512];
    test_path(name, path);
    if (!gzip) {
        test_write_file(path, file, at);
        return;
    }
    gzFile g = gzopen(path, "wb");
    CHECK(g != NULL);
    if (members > 1) {
        /* two members: write, close, append */
        CHECK(gzwrite(g, file, (unsigned)cut[1]) == (int)cut[1] && gzclose(g) == Z_OK);
        g = gzopen(path, "ab");
        CHECK(g && gzwrite(g, file + cut[1], (unsigned)(at - cut[1])) == (int)(at - cut[1]));
    } else {
        CHECK(gzwrite(g, file, (unsigned)at) == (int)at);
    }
    CHECK(gzclose(g) == Z_OK);
}

TEST(tfrecord_real_files)
{
    test_need_shared(TF "/tfx_penguin_train-00000-of-00001.tfrecord.gz");
    /* gzip: 234 + 100 records in two files; plain: 3 + 1 */
    CHECK_U64(check_resume("tfrecord:" TF "/tfx_penguin_*.tfrecord.gz", 1, 0, 1), 334);
    CHECK_U64(check_resume("tfrecord:" TF "/tfx_penguin_*.tfrecord.gz", 2, 1, 1), 334);
    CHECK_U64(check_resume("tfrecord:" TF "/ydf_toy_uncompressed-*,stream=1", 2, 0, 1), 4);
    CHECK_U64(check_resume("tfrecord:" TF "/ydf_toy_uncompressed-*,stream=1,raw=1", 1, 0, 1), 4);
    CHECK_U64(check_resume("tfrecord:" TF "/ydf_toy_gzip-*", 3, 0, 1), 4);
    /* 4500 SequenceExamples in one gzip file: every 250th position */
    CHECK_U64(check_resume("tfrecord:" TF "/tfx_sequence_example_eval.tfrecord.gz", 1, 0, 250),
              4500);
}

TEST(tfrecord_written_files)
{
    test_make_dir("resume-tfr");
    for (int k = 0; k < 7; k++) {
        char name[64];
        snprintf(name, sizeof name, "p-%d.tfrecord%s", k, k % 2 ? ".gz" : "");
        write_tfr(name, 3 + 5 * k, k, k % 2, k == 3 ? 1 : 0);
    }
    write_tfr("p-empty.tfrecord", 0, 0, 0, 0);
    write_tfr("p-bad.tfrecord", 12, 7, 0, 2);
    write_tfr("p-bad.tfrecord.gz", 12, 8, 1, 2);
    char spec[700];
    uint64_t want = 0;
    for (int k = 0; k < 7; k++)
        want += 3 + 5 * (uint64_t)k;
    want += 2 * 9; /* the damaged files: 8 results (one an error), then the broken frame */
    for (int bound = 0; bound < 2; bound++) {
        /* max=64: the longer records are errors (EOVERFLOW), each passed over */
        snprintf(spec, sizeof spec, "tfrecord:%s/p-*,stream=1,raw=1,seed=5%s", test_dir,
                 bound ? ",max=64" : ",max=400");
        for (uint64_t nshards = 1; nshards <= 4; nshards++)
            CHECK_U64(check_resume(spec, nshards, nshards, 1), want);
    }
    test_remove_dir();
}

TEST(tfrecord_bad_states)
{
    test_make_dir("resume-tfr-bad");
    write_tfr("a-0.tfrecord", 20, 1, 0, 0);
    write_tfr("a-1.tfrecord.gz", 20, 2, 1, 0);
    write_tfr("a-2.tfrecord", 20, 3, 0, 0);
    char spec[700], msg[512];
    snprintf(spec, sizeof spec, "tfrecord:%s/a-*,stream=1,raw=1", test_dir);
    static uint8_t st[STATE_CAP], b[STATE_CAP];
    size_t len = save_after(spec, 0, 3, 5, st);
    CHECK_EQ(len, 16 + 48); /* the header, then the TFRecord stream's 48 bytes */
    CHECK_OK(restore_into(spec, 0, 3, st, len, msg));
    /* damaged: the checksum says so */
    memcpy(b, st, len);
    b[40] ^= 1;
    CHECK_RC(restore_into(spec, 0, 3, b, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "checksum");
    /* cut short (resealed) */
    memcpy(b, st, len);
    reseal(b, len - 8);
    CHECK_RC(restore_into(spec, 0, 3, b, len - 8, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "cut short");
    /* another shard */
    CHECK_RC(restore_into(spec, 1, 3, st, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "not one of stream shard 1 of 3");
    /* another file order (another seed): where the file at that place differs */
    int refused = 0;
    for (int seed = 1; seed < 40 && !refused; seed++) {
        char other[700];
        snprintf(other, sizeof other, "tfrecord:%s/a-*,stream=1,raw=1,seed=%d", test_dir, seed);
        size_t l2 = save_after(other, 0, 1, 30, st); /* in the second file of its order */
        int rc = restore_into(spec, 0, 1, st, l2, msg);
        CHECK(rc == 0 || rc == FERRY_ECORRUPT);
        if (rc < 0) {
            CHECK_CONTAINS(msg, "another file list, seed or epoch");
            refused = 1;
        }
    }
    CHECK(refused);
    len = save_after(spec, 0, 3, 5, st);
    /* forged: offset past the file's end, more records than fit, another size, a tag */
    check_forged(spec, st, len, 32, 1 << 20, "which ends at");
    check_forged(spec, st, len, 40, 1000, "more records than fit there");
    check_forged(spec, st, len, 24, 12, "the file changed");
    memcpy(b, st, len);
    b[16] ^= 0x20;
    reseal(b, len);
    CHECK_RC(restore_into(spec, 0, 3, b, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "not saved by a TFRecord stream");
    /* state bytes left over */
    memcpy(b, st, len);
    reseal(b, len + 8);
    CHECK_RC(restore_into(spec, 0, 3, b, len + 8, msg), FERRY_ECORRUPT);
    /* fetch of a pos that names nothing */
    src s;
    ferry_stream_iter *it;
    src_open(&s, spec, 0, 0);
    CHECK_OK(ferry_stream_open(s.st, 0, 1, 0, &it));
    CHECK_EQ(fetch_rc(&s, it, 7, 0), FERRY_ERANGE);
    CHECK_EQ(fetch_rc(&s, it, 1, 1 << 20), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "the file ends at");
    /* not a record's start: its header's CRC fails */
    CHECK_EQ(fetch_rc(&s, it, 1, 5), FERRY_ECORRUPT);
    CHECK_EQ(fetch_rc(&s, it, 1, 0), 0); /* and the next fetch reads again */
    ferry_stream_close(it);
    src_close(&s);
    test_remove_dir();
}

/* ---- WebDataset tars ---- */

TEST(wds_real_files)
{
    test_need_shared(WD "/sample.tgz");
    CHECK_U64(check_resume("wds:" WD "/sample.tgz", 1, 0, 1), 90); /* gzip */
    CHECK_U64(check_resume("wds:" WD "/mpdata.tar,stream=1", 1, 0, 1), 100);
    /* a directory entry first */
    CHECK_U64(check_resume("wds:" WD "/compressed.tar,stream=1", 1, 0, 1), 3);
    /* all four, plain and gzip, over 1 to 3 shards (the fields found first are
     * missing from the others: those samples are errors, each a result) */
    for (uint64_t nshards = 1; nshards <= 3; nshards++)
        CHECK_U64(check_resume("wds:" WD "/*.t*,stream=1,seed=4", nshards, 1, 7), 293);
}

typedef struct tarbuf {
    uint8_t *p;
    size_t n;
} tarbuf;

static void header(tarbuf *t, const char *name, char type, uint64_t size)
{
    test_tar_header(t->p + t->n, name, type, size, type == 'L');
    t->n += 512;
}

static void data(tarbuf *t, const void *d, size_t n)
{
    memcpy(t->p + t->n, d, n);
    memset(t->p + t->n + n, 0, (512 - n % 512) % 512);
    t->n += (n + 511) / 512 * 512;
}

/* A member; a name over 99 bytes gets a GNU long-name header (gnu) or a pax one. */
static void member(tarbuf *t, const char *name, const void *d, size_t n, int gnu)
{
    size_t nl = strlen(name);
    if (nl > 99 && gnu) {
        header(t, "././@LongLink", 'L', nl + 1);
        data(t, name, nl + 1);
    } else if (nl > 99) {
        char pax[700];
        size_t body = nl + 7, len = body + 1; /* " path=", "\n", and len's own digits */
        while (len != body + (size_t)snprintf(NULL, 0, "%zu", len))
            len = body + (size_t)snprintf(NULL, 0, "%zu", len);
        snprintf(pax, sizeof pax, "%zu path=%s\n", len, name);
        CHECK_EQ(strlen(pax), len);
        header(t, "PaxHeader", 'x', len);
        data(t, pax, len);
    }
    header(t, name, '0', n);
    data(t, d, n);
}

/* count samples "d/kNNNN" (every 5th a long key, by pax or GNU headers) with .cls
 * and .txt (flags & 1: every 7th lacks .txt; flags & 2: sample 6 has two .txt, an
 * error, and a third member passed over; flags & 4: a bad header in sample 10), a
 * directory entry and a member of another extension now and then; gzip or not. */
static void write_tar(const char *name, int count, int seed, int gzip, int flags)
{
    tarbuf t = {malloc((size_t)count * 8192 + 4096), 0};
    for (int i = 0; i < count; i++) {
        char key[400], m[420], txt[600];
        if (i % 5 == 4)
            snprintf(key, sizeof key, "d/%0150d-k%04d", seed, i);
        else
            snprintf(key, sizeof key, "d/k%04d", i);
        if (i % 6 == 2)
            header(&t, "d/", '5', 0);
        char cls = (char)('0' + (i + seed) % 10);
        snprintf(m, sizeof m, "%s.cls", key);
        member(&t, m, &cls, 1, i % 2);
        size_t n = (size_t)(i * 53 + seed) % 580;
        for (size_t j = 0; j < n; j++)
            txt[j] = (char)('a' + (i + j) % 26);
        snprintf(m, sizeof m, "%s.txt", key);
        size_t h = t.n;
        if (!((flags & 1) && i % 7 == 3))
            member(&t, m, txt, n, i % 2);
        if ((flags & 4) && i == 10)
            t.p[h + 3] ^= 1; /* its header's checksum fails: the rest of the tar is lost */
        if ((flags & 2) && i == 6) {
            member(&t, m, txt, 3, 0);
            snprintf(m, sizeof m, "%s.cls", key);
            member(&t, m, &cls, 1, 0);
        }
        if (i % 4 == 1) {
            snprintf(m, sizeof m, "%s.json", key);
            member(&t, m, "{}", 2, 0);
        }
    }
    memset(t.p + t.n, 0, 1024);
    t.n += 1024;
    char path[512];
    test_path(name, path);
    if (gzip) {
        gzFile g = gzopen(path, "wb");
        CHECK(g && gzwrite(g, t.p, (unsigned)t.n) == (int)t.n && gzclose(g) == Z_OK);
    } else {
        test_write_file(path, t.p, t.n);
    }
    free(t.p);
}

TEST(wds_written_files)
{
    test_make_dir("resume-wds");
    uint64_t want = 0;
    for (int k = 0; k < 6; k++) {
        char name[64];
        snprintf(name, sizeof name, "w-%d.tar%s", k, k % 2 ? ".gz" : "");
        write_tar(name, 4 + 6 * k, k, k % 2, 0);
        want += 4 + 6 * (uint64_t)k;
    }
    write_tar("w-bad.tar", 20, 6, 0, 4);
    write_tar("w-bad.tar.gz", 20, 7, 1, 4);
    want += 2 * 11; /* samples 0 to 9, then the error */
    char spec[700];
    snprintf(spec, sizeof spec, "wds:%s/w-*,stream=1,seed=8,fields=cls;txt", test_dir);
    for (uint64_t nshards = 1; nshards <= 4; nshards++)
        CHECK_U64(check_resume(spec, nshards, nshards, 1), want);
    /* every extension (json is missing from most: errors, each a result) */
    snprintf(spec, sizeof spec, "wds:%s/w-*,stream=1,seed=8", test_dir);
    CHECK_U64(check_resume(spec, 2, 0, 1), want);
    test_remove_dir();
    /* samples without .txt passed over (missing=skip), or errors; a sample with
     * two .txt: an error, the rest of its members passed over (a state saved right
     * after it holds that key) */
    test_make_dir("resume-wds-skip");
    write_tar("s-0.tar", 30, 1, 0, 3);
    write_tar("s-1.tar.gz", 30, 2, 1, 3);
    snprintf(spec, sizeof spec, "wds:%s/s-*,stream=1,fields=cls;txt,missing=skip,infer=3,max=1000",
             test_dir);
    CHECK_U64(check_resume(spec, 1, 0, 1), 2 * (30 - 4)); /* 4 skipped in each */
    snprintf(spec, sizeof spec, "wds:%s/s-*,stream=1,fields=cls;txt,infer=3,max=1000", test_dir);
    CHECK_U64(check_resume(spec, 2, 0, 1), 2 * 30);
    /* the state while a key is passed over: 64 bytes and the key */
    static uint8_t st[STATE_CAP];
    src s;
    rec r;
    ferry_stream_iter *it;
    src_open(&s, spec, 0, 0);
    CHECK_OK(ferry_stream_open(s.st, 0, 1, 0, &it));
    size_t len = 0, seen = 0;
    for (int i = 0; i < 70; i++) {
        next_rec(&s, it, &r);
        free(r.b);
        if (r.rc == FERRY_ECORRUPT && strstr(ferry_last_errmsg(), "has a .txt already")) {
            CHECK_OK(ferry_stream_save(it, st, sizeof st, &len));
            CHECK_EQ(len, 16 + 64 + strlen("d/k0006"));
            CHECK(memmem(st, len, "d/k0006", 7) != NULL);
            seen++;
        }
    }
    CHECK_EQ(seen, 2); /* one in each tar */
    ferry_stream_close(it);
    src_close(&s);
    test_remove_dir();
}

TEST(wds_bad_states)
{
    test_make_dir("resume-wds-bad");
    write_tar("a-0.tar", 12, 1, 0, 0);
    write_tar("a-1.tar.gz", 12, 2, 1, 0);
    write_tar("a-2.tar", 12, 3, 0, 0);
    char spec[700], msg[512];
    snprintf(spec, sizeof spec, "wds:%s/a-*,stream=1,fields=cls;txt", test_dir);
    static uint8_t st[STATE_CAP], b[STATE_CAP];
    size_t len = save_after(spec, 0, 3, 5, st);
    CHECK_EQ(len, 16 + 64);
    CHECK_OK(restore_into(spec, 0, 3, st, len, msg));
    memcpy(b, st, len);
    b[50] ^= 4;
    CHECK_RC(restore_into(spec, 0, 3, b, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "checksum");
    CHECK_RC(restore_into(spec, 2, 3, st, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "not one of stream shard 2 of 3");
    /* forged: not a header's place, past the end, another size, a key too long */
    check_forged(spec, st, len, 32, 700, "not a place in a tar");
    check_forged(spec, st, len, 32, 512 << 12, "which ends at");
    check_forged(spec, st, len, 24, 513, "the tar changed");
    check_forged(spec, st, len, 56, 1 << 20, "a key of");
    /* a key announced, its bytes missing */
    check_forged(spec, st, len, 56, 100, "cut short");
    /* a TFRecord stream's state, and this one given to a TFRecord stream */
    test_make_dir("resume-wds-bad-tfr");
    write_tfr("t.tfrecord", 10, 1, 0, 0);
    char tspec[700];
    snprintf(tspec, sizeof tspec, "tfrecord:%s/t.tfrecord,stream=1,raw=1", test_dir);
    size_t tlen = save_after(tspec, 0, 1, 3, b);
    CHECK_RC(restore_into(tspec, 0, 1, st, len, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "not saved by a TFRecord stream");
    test_remove_dir();
    test_make_dir("resume-wds-bad");
    CHECK_RC(restore_into(spec, 0, 3, b, tlen, msg), FERRY_ECORRUPT);
    CHECK_CONTAINS(msg, "not saved by a wds stream");
    /* fetch of a pos that names nothing */
    src s;
    ferry_stream_iter *it;
    src_open(&s, spec, 0, 0);
    CHECK_OK(ferry_stream_open(s.st, 0, 1, 0, &it));
    CHECK_EQ(fetch_rc(&s, it, 9, 0), FERRY_ERANGE);
    CHECK_EQ(fetch_rc(&s, it, 1, 100), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "not a header's offset");
    CHECK_EQ(fetch_rc(&s, it, 1, 512 << 12), FERRY_ERANGE);
    CHECK_CONTAINS(ferry_last_errmsg(), "the tar ends at");
    CHECK(fetch_rc(&s, it, 1, 512) < 0); /* the data of the first member: not a header */
    CHECK_EQ(fetch_rc(&s, it, 1, 0), 0); /* and the next fetch reads again */
    ferry_stream_close(it);
    src_close(&s);
    test_remove_dir();
}

TEST(wds_image_pipeline)
{
    /* decoded and randomly cropped images over a gzipped tar: a restored (or
     * fetched) sample is the same tensor, its draws keyed by its pos */
#define JPEGS FERRY_SHARED_DIR "/testdata/jpeg/valid"
    test_need_shared(JPEGS "/jd_jpg-progressive.jpg");
    test_make_dir("resume-wds-jpeg");
    static const char *files[] = {"jd_jpg-progressive.jpg", "jd_jpg-size-17x17.jpg",
                                  "jd_jpg-gray.jpg"};
    tarbuf t = {calloc(1, 1 << 21), 0};
    for (int i = 0; i < 12; i++) {
        char p[512], name[64], c[4];
        snprintf(p, sizeof p, "%s/%s", JPEGS, files[i % 3]);
        size_t n;
        unsigned char *b = test_read_file(p, &n);
        snprintf(name, sizeof name, "img%02d.jpg", i);
        member(&t, name, b, n, 0);
        snprintf(name, sizeof name, "img%02d.cls", i);
        snprintf(c, sizeof c, "%d", i % 10);
        member(&t, name, c, strlen(c), 0);
        free(b);
    }
    memset(t.p + t.n, 0, 1024);
    t.n += 1024;
    char path[512], spec[700];
    test_path("jpegs.tar.gz", path);
    gzFile g = gzopen(path, "wb");
    CHECK(g && gzwrite(g, t.p, (unsigned)t.n) == (int)t.n && gzclose(g) == Z_OK);
    free(t.p);
    snprintf(spec, sizeof spec, "wds:%s,pipeline=train,size=16", path);
    CHECK_U64(check_resume(spec, 1, 3, 1), 12);
    test_remove_dir();
}
