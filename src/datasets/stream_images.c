/*
 * Images over a stream: as ferry_dataset_images, for sources read in order (a
 * gzipped WebDataset shard, a TFRecord stream). The encoded bytes go through a
 * buffer of the opened shard; every other field is written by the inner stream
 * straight into the sample.
 */
#include "dataset_internal.h"
#include "ferry/image.h"
#include "ferry/pipeline.h"

#include <stdio.h>
#include <string.h>

typedef struct simages {
    ferry_stream *inner;
    int field;
    size_t enc_bound;
    ferry_image_pipeline p;
} simages;

typedef struct simages_iter {
    const simages *s;
    ferry_stream_iter *inner;
    uint8_t *enc;
    uint64_t shard, count;
} simages_iter;

static int si_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    simages *s = self;
    simages_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "images stream: out of memory");
    it->s = s;
    it->shard = shard;
    if (!(it->enc = ferry__malloc(s->enc_bound ? s->enc_bound : 1))) {
        ferry__free(it);
        return ferry__err(FERRY_ENOMEM, "images stream: out of memory for a %zu-byte image",
                          s->enc_bound);
    }
    int rc = ferry_stream_open(s->inner, shard, nshards, epoch, &it->inner);
    if (rc < 0) {
        ferry__free(it->enc);
        ferry__free(it);
        return rc;
    }
    *iter = it;
    return 0;
}

/* Decodes the encoded image in it->enc (out->length[field] bytes) into out. */
static int decode(simages_iter *it, ferry_sample *out, ferry_ctx *ctx)
{
    const simages *s = it->s;
    size_t n = (size_t)out->length[s->field];
    /* Per-sample draws the same for any worker count: keyed by where the sample
     * came from when the inner says (so a resume that reads it again draws the
     * same), else by (shard, position). */
    ferry_rng rng;
    const ferry_pos *p = &out->pos;
    if (s->inner->resumable)
        ferry_rng_init(&rng, ctx ? ferry_ctx_seed(ctx) : 0, p->epoch,
                       ferry_hash64(ferry_hash64(p->a, p->b), p->c));
    else
        ferry_ctx_rng(ctx, ferry_hash64(it->shard, it->count - 1), &rng);
    int rc = ferry_image_pipeline_run(&s->p, it->enc, n, &rng, out->data[s->field], ctx);
    if (rc < 0)
        return ferry__err_prefix(rc, "shard %llu, sample %llu", (unsigned long long)it->shard,
                                 (unsigned long long)(it->count - 1));
    return 0;
}

/* The inner's next sample (pos NULL) or the one at *pos again, its encoded
 * image into it->enc, the other fields straight into out; then decoded. */
static int read_decode(simages_iter *it, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    const simages *s = it->s;
    void *data[FERRY_MAX_FIELDS];
    for (int k = 0; k < out->nfields; k++)
        data[k] = out->data[k];
    data[s->field] = it->enc;
    ferry_sample in = {.nfields = out->nfields, .data = data, .length = out->length};
    int rc =
        pos ? ferry_stream_fetch(it->inner, pos, &in, ctx) : ferry_stream_next(it->inner, &in, ctx);
    if (rc != 0)
        return rc;
    out->pos = in.pos;
    it->count += !pos;
    return decode(it, out, ctx);
}

static int si_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    return read_decode(iter, NULL, out, ctx);
}

/* Reads the sample of pos again (a resume refilling a buffer above). */
static int si_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    return read_decode(iter, pos, out, ctx);
}

/* The state: the samples read (8), then the inner's. */
static int si_save(void *iter, ferry_state *w)
{
    simages_iter *it = iter;
    ferry_state_put_u64(w, it->count);
    return ferry_stream_save_to(it->inner, w);
}

static int si_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    simages_iter *it = iter;
    int rc = ferry_state_get_u64(r, &it->count);
    return rc < 0 ? rc : ferry_stream_restore_from(it->inner, r, ctx);
}

static void si_close(void *iter)
{
    simages_iter *it = iter;
    ferry_stream_close(it->inner);
    ferry__free(it->enc);
    ferry__free(it);
}

static void si_destroy(void *self)
{
    simages *s = self;
    ferry_stream_free(s->inner);
    ferry__free(s);
}

static const ferry_stream_vtable si_vtable = {si_open, si_next,    si_close, si_destroy,
                                              si_save, si_restore, si_fetch};

int ferry_stream_images(ferry_stream **out, ferry_stream *inner, const char *field,
                        const ferry_image_pipeline *p)
{
    int rc = 0;
    simages *s = NULL;
    *out = NULL;
    if (!inner || !p)
        FERRY_FAIL(FERRY_EINVAL, "ferry_stream_images: inner and p must not be NULL");
    FERRY_TRY(ferry_image_pipeline_check(p));
    if (p->mode == FERRY_PIPELINE_NONE)
        FERRY_FAIL(FERRY_EINVAL, "ferry_stream_images: mode none (nothing to decode)");
    int f = -1;
    static const char *const names[] = {"image", "data", "jpg", "jpeg", "png"};
    for (int k = 0; k < inner->nfields; k++)
        if (field && !strcmp(inner->fields[k].name, field))
            f = k;
    for (int i = 0; !field && i < 5 && f < 0; i++)
        for (int k = 0; k < inner->nfields; k++)
            if (!strcmp(inner->fields[k].name, names[i]))
                f = k;
    if (f < 0)
        FERRY_FAIL(FERRY_EINVAL, "images: the stream has no field \"%s\" with encoded images",
                   field ? field : "image\", \"data\", \"jpg\", \"jpeg\" or \"png");
    const ferry_field *ef = &inner->fields[f];
    if (ef->dtype != FERRY_U8 || ef->ndim != 1 || !ef->variable)
        FERRY_FAIL(FERRY_EINVAL, "images: field \"%s\" must be variable uint8 bytes", ef->name);
    ferry_field fields[FERRY_MAX_FIELDS];
    FERRY_TRY(ferry__images_fields(fields, inner->fields, inner->nfields, f, p, "stream"));
    if (!(s = ferry__calloc(1, sizeof *s)))
        FERRY_FAIL(FERRY_ENOMEM, "images: out of memory");
    s->inner = inner;
    s->field = f;
    s->enc_bound = (size_t)ef->shape[0];
    s->p = *p;
    int nf = inner->nfields;
    bool resumable = inner->resumable, anywhere = inner->fetch_anywhere;
    inner = NULL; /* s owns it now */
    rc = ferry_stream_create(out, &si_vtable, s, fields, nf);
    if (rc == 0) {
        (*out)->resumable = resumable;
        (*out)->fetch_anywhere = anywhere;
    }
    return rc;
cleanup:
    if (s)
        si_destroy(s);
    else
        ferry_stream_free(inner);
    return rc;
}
