/*
 * Images over another dataset: one field of the inner dataset holds encoded JPEG
 * or PNG bytes; it becomes "image", the pipeline's tensor. The other fields are
 * written by the inner dataset straight into the batch (a "path" field there also
 * names the file in messages); only the encoded bytes go through per-worker
 * scratch (slot 1). Mode none passes the encoded bytes through, after checking
 * that their header is an image's.
 */
#include "spec.h"
#include "ferry/image.h"
#include "ferry/pipeline.h"

#include <stdio.h>
#include <string.h>

#define SLOT_ENCODED 1

typedef struct images {
    ferry_dataset *inner;
    int own;
    int field; /* inner field with the encoded bytes */
    int path;  /* inner "path" field, or -1 */
    int nin;
    size_t enc_bound; /* bytes of the encoded field at its bound: the scratch needed */
    size_t out_bound; /* mode none: the field's bound out (max_side: room for a JPEG) */
    ferry_image_pipeline p;
} images;

static void images_destroy(void *self)
{
    images *d = self;
    if (d->own)
        ferry_dataset_free(d->inner);
    ferry__free(d);
}

static uint64_t images_len(void *self)
{
    return ferry_dataset_len(((images *)self)->inner);
}

static void images_hint(void *self, const uint64_t *indices, size_t n, int soon)
{
    images *d = self;
    if (d->inner->vt->hint)
        d->inner->vt->hint(d->inner->self, indices, n, soon);
}

/* Re-states the thread's message with the sample's file (or index) in front. */
static int name_it(const images *d, int rc, uint64_t index, const char *path, size_t plen)
{
    char msg[FERRY_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", ferry_last_errmsg());
    if (path)
        return ferry__err(rc, "%.*s: %s", (int)plen, path, msg);
    return ferry__err(rc, "sample %llu: %s", (unsigned long long)index, msg);
}

static int images_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    images *d = self;
    uint8_t *scratch = ferry__ctx_scratch(ctx, SLOT_ENCODED, d->enc_bound);
    if (!scratch)
        return FERRY_ENOMEM;
    void *data[FERRY_MAX_FIELDS];
    int64_t length[FERRY_MAX_FIELDS] = {0};
    /* output fields are the inner ones in the same order: only the encoded field
     * (and a path we must read) are redirected */
    for (int k = 0; k < d->nin; k++)
        data[k] = out->data[k];
    if (d->p.mode != FERRY_PIPELINE_NONE)
        data[d->field] = scratch;
    ferry_sample in = {.nfields = d->nin, .data = data, .length = length};
    int rc = d->inner->vt->get(d->inner->self, index, &in, ctx);
    if (rc < 0)
        return rc;
    for (int k = 0; k < d->nin; k++)
        out->length[k] = length[k];
    const char *path = d->path >= 0 ? (const char *)data[d->path] : NULL;
    size_t plen = d->path >= 0 ? (size_t)length[d->path] : 0;
    const uint8_t *enc = data[d->field];
    size_t n = d->inner->fields[d->field].variable ? (size_t)length[d->field] : d->enc_bound;
    if (d->p.mode == FERRY_PIPELINE_NONE) {
        ferry_image_info info;
        if ((rc = ferry_image_info_get(enc, n, &info)) < 0)
            return name_it(d, rc, index, path, plen);
        if (!d->p.max_side || (info.width <= d->p.max_side && info.height <= d->p.max_side))
            return 0; /* stored as it is */
        /* re-encoded smaller: from a copy, since the result goes where the bytes are */
        uint8_t *copy = ferry__ctx_scratch(ctx, SLOT_ENCODED, n);
        if (!copy)
            return FERRY_ENOMEM;
        memcpy(copy, enc, n);
        size_t written;
        if ((rc = ferry_image_shrink(&d->p, copy, n, out->data[d->field], d->out_bound, &written,
                                     ctx)) < 0)
            return name_it(d, rc, index, path, plen);
        out->length[d->field] = (int64_t)written;
        return 0;
    }
    ferry_rng rng;
    ferry_ctx_rng(ctx, index, &rng);
    rc = ferry_image_pipeline_run(&d->p, enc, n, &rng, out->data[d->field], ctx);
    if (rc < 0)
        return name_it(d, rc, index, path, plen);
    return 0;
}

static const ferry_dataset_vtable images_vtable = {
    .len = images_len, .get = images_get, .destroy = images_destroy, .hint = images_hint};

int ferry__images_fields(ferry_field *out, const ferry_field *in, int n, int f,
                         const ferry_image_pipeline *p, const char *who)
{
    memcpy(out, in, sizeof(ferry_field) * (size_t)n);
    for (int k = 0; k < n; k++)
        if (k != f && !strcmp(in[k].name, "image"))
            return ferry__err(FERRY_EINVAL, "images: the %s already has a field \"image\"", who);
    ferry_field *img = &out[f];
    strcpy(img->name, "image");
    if (p->mode == FERRY_PIPELINE_NONE) {
        /* max_side: a re-encoded image may take more bytes than the largest file */
        size_t b = ferry_image_shrink_bound(p);
        if (img->variable && (int64_t)b > img->shape[0])
            img->shape[0] = (int64_t)b;
        return 0;
    }
    int64_t shape[3];
    int rc = ferry_image_pipeline_shape(p, shape);
    if (rc < 0)
        return rc;
    img->dtype = p->dtype;
    img->ndim = 3;
    img->variable = 0;
    memcpy(img->shape, shape, sizeof shape);
    return 0;
}

int ferry_dataset_images(ferry_dataset **out, ferry_dataset *inner, const char *field,
                         const ferry_image_pipeline *p, int own_inner)
{
    int rc = 0;
    images *d = NULL;
    if (!out || !inner || !p) {
        rc = ferry__err(FERRY_EINVAL, "ferry_dataset_images: out, inner and p must not be NULL");
        goto cleanup;
    }
    *out = NULL;
    FERRY_TRY(ferry_image_pipeline_check(p));
    if (!(d = ferry__calloc(1, sizeof *d)))
        FERRY_FAIL(FERRY_ENOMEM, "images: out of memory");
    d->inner = inner;
    d->own = own_inner;
    d->p = *p;
    d->nin = inner->nfields;
    d->field = field ? ferry_dataset_find_field(inner, field) : -1;
    if (!field) {
        d->field = ferry_dataset_find_field(inner, "image");
        if (d->field < 0)
            d->field = ferry_dataset_find_field(inner, "data");
        /* WebDataset names fields by extension */
        static const char *const exts[] = {"jpg", "jpeg", "png"};
        for (int i = 0; i < 3 && d->field < 0; i++)
            d->field = ferry_dataset_find_field(inner, exts[i]);
    }
    if (d->field < 0)
        FERRY_FAIL(FERRY_EINVAL, "images: the dataset has no field \"%s\" with encoded images",
                   field ? field : "image\" or \"data");
    const ferry_field *ef = &inner->fields[d->field];
    if (ef->dtype != FERRY_U8 || ef->ndim != 1)
        FERRY_FAIL(FERRY_EINVAL,
                   "images: field \"%s\" must be uint8 bytes (1 dimension), not %s "
                   "with %d dimensions",
                   ef->name, ferry_dtype_name(ef->dtype), ef->ndim);
    d->path = ferry_dataset_find_field(inner, "path");
    if (d->path >= 0 && (inner->fields[d->path].dtype != FERRY_U8 ||
                         inner->fields[d->path].ndim != 1 || !inner->fields[d->path].variable))
        d->path = -1;
    d->enc_bound = (size_t)ef->shape[0];
    if (p->mode == FERRY_PIPELINE_NONE && p->max_side && !ef->variable)
        FERRY_FAIL(FERRY_EINVAL,
                   "images: max_side needs a variable field of encoded images (\"%s\" is fixed)",
                   ef->name);

    ferry_field f[FERRY_MAX_FIELDS];
    FERRY_TRY(ferry__images_fields(f, inner->fields, d->nin, d->field, p, "dataset"));
    d->out_bound = (size_t)f[d->field].shape[0];
    ferry_dataset *ds = NULL;
    rc = ferry_dataset_create(&ds, &images_vtable, d, f, d->nin);
    d = NULL; /* the dataset owns it now, also on failure */
    if (rc < 0)
        return rc;
    ds->folder = inner->folder; /* the classes of the folder under it */
    const uint64_t *bounds;
    uint64_t nsh = ferry_dataset_shards(inner, &bounds);
    if (nsh > 1 && (rc = ferry_dataset_set_shards(ds, bounds, nsh)) < 0) {
        ferry_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return 0;
cleanup:
    if (d)
        images_destroy(d);
    else if (own_inner && inner)
        ferry_dataset_free(inner);
    return rc;
}

/* ---- "images:DIR,..." and ",pipeline=..." on other sources ---- */

/* A plain decimal ("0.08", "1", "-2.5"): no locale, no exponent. */
static bool parse_num(const char *s, double *out)
{
    double v = 0, scale = 1;
    int neg = *s == '-', digits = 0;
    if (*s == '-' || *s == '+')
        s++;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        v = v * 10 + (*s - '0');
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++, digits++)
            v += (*s - '0') * (scale /= 10);
    if (*s || !digits || digits > 17)
        return false;
    *out = neg ? -v : v;
    return true;
}

/* "a-b" (a range) or "a;b;c" (a list): up to n numbers separated by sep. */
static int spec_nums(ferry__spec *s, const char *key, char sep, int n, double *out, int *got)
{
    const char *v = ferry__spec_str(s, key);
    *got = 0;
    if (!v)
        return 0;
    char buf[128];
    if (strlen(v) >= sizeof buf)
        return ferry__err(FERRY_EINVAL, "source %s: %s= is too long", s->kind, key);
    strcpy(buf, v);
    char *p = buf;
    while (*got < n) {
        char *end = strchr(p, sep);
        if (end)
            *end = 0;
        if (!parse_num(p, &out[*got]))
            break;
        (*got)++;
        if (!end)
            return 0;
        p = end + 1;
    }
    return ferry__err(FERRY_EINVAL, "source %s: %s=\"%.64s\" is not %d number%s separated by '%c'",
                      s->kind, key, v, n, n > 1 ? "s" : "", sep);
}

/* "MIN-MAX" into *lo and *hi (kept when the option is absent). */
static int spec_range(ferry__spec *s, const char *key, double *lo, double *hi)
{
    double v[2];
    int got, rc = spec_nums(s, key, '-', 2, v, &got);
    if (rc < 0)
        return rc;
    if (got == 1)
        return ferry__err(FERRY_EINVAL, "source %s: %s= is a range MIN-MAX", s->kind, key);
    if (got == 2) {
        *lo = v[0];
        *hi = v[1];
    }
    return 0;
}

static int spec_choice(ferry__spec *s, const char *key, const char *const *names, int n, int *out)
{
    const char *v = ferry__spec_str(s, key);
    if (!v)
        return 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    char all[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", names[i]);
    return ferry__err(FERRY_EINVAL, "source %s: %s=\"%.64s\" is not one of %s", s->kind, key, v,
                      all);
}

int ferry__images_spec(ferry__spec *s, int is_images, ferry_image_pipeline *p, const char **field,
                       int *present)
{
    static const char *const modes[] = {"eval", "train", "none"};
    static const char *const filters[] = {"bilinear", "nearest", "bicubic"};
    static const char *const layouts[] = {"hwc", "chw"}; /* FERRY_LAYOUT_* order */
    static const char *const dtypes[] = {"f32", "f16", "u8", "float32", "float16", "uint8"};
    int rc, mode = FERRY_PIPELINE_EVAL;
    *present = is_images || ferry__spec_str(s, "pipeline") != NULL;
    *field = NULL;
    if (!*present)
        return 0;
    if ((rc = spec_choice(s, "pipeline", modes, 3, &mode)) < 0)
        return rc;
    ferry_image_pipeline_default(p, (ferry_pipeline_mode)mode);
    double v[3];
    int got, filter = p->filter, layout = p->layout, dt = 0, grey = 0, lenient = 0, norm = 1;
    int fast = 0, reduce = 0; /* dct_reduce=1 is fast=1's older name */
    uint64_t max_side = 0, quality = 0;
    if ((rc = spec_nums(s, "size", 'x', 2, v, &got)) < 0)
        return rc;
    if (got) {
        if (v[0] < 1 || v[0] > 16384 || (got == 2 && (v[1] < 1 || v[1] > 16384)))
            return ferry__err(FERRY_EINVAL, "source %s: size= must be N or WxH, 1..16384", s->kind);
        p->width = (uint32_t)v[0];
        p->height = (uint32_t)(got == 2 ? v[1] : v[0]);
    }
    uint64_t u = 0;
    if ((rc = ferry__spec_u64(s, "resize", 1, 16384, &u)) < 0)
        return rc;
    p->resize = u ? (uint32_t)u : p->resize;
    if (!u && (p->height > 224 || p->width > 224)) /* keep torchvision's 256/224 proportion */
        p->resize = (uint32_t)((p->height > p->width ? p->height : p->width) * 8 / 7);
    if ((rc = spec_range(s, "scale", &p->scale_min, &p->scale_max)) < 0 ||
        (rc = spec_range(s, "ratio", &p->ratio_min, &p->ratio_max)) < 0)
        return rc;
    if ((rc = spec_nums(s, "flip", ';', 1, v, &got)) < 0)
        return rc;
    if (got)
        p->flip = v[0];
    const char *jit[3] = {"brightness", "contrast", "saturation"};
    float *jf[3] = {&p->brightness, &p->contrast, &p->saturation};
    for (int i = 0; i < 3; i++) {
        if ((rc = spec_nums(s, jit[i], ';', 1, v, &got)) < 0)
            return rc;
        if (got)
            *jf[i] = (float)v[0];
    }
    const char *per_channel[2] = {"mean", "std"};
    float *dst[2] = {p->mean, p->std};
    for (int k = 0; k < 2; k++) {
        if ((rc = spec_nums(s, per_channel[k], ';', 3, v, &got)) < 0)
            return rc;
        if (got && got != 3)
            return ferry__err(FERRY_EINVAL, "source %s: %s= needs 3 numbers", s->kind,
                              per_channel[k]);
        for (int c = 0; c < got; c++)
            dst[k][c] = (float)v[c];
    }
    if ((rc = spec_choice(s, "filter", filters, 3, &filter)) < 0 ||
        (rc = spec_choice(s, "layout", layouts, 2, &layout)) < 0 ||
        (rc = ferry__spec_bool(s, "grey", &grey)) < 0 ||
        (rc = ferry__spec_bool(s, "lenient", &lenient)) < 0 ||
        (rc = ferry__spec_bool(s, "normalize", &norm)) < 0 ||
        (rc = ferry__spec_bool(s, "fast", &fast)) < 0 ||
        (rc = ferry__spec_bool(s, "dct_reduce", &reduce)) < 0 ||
        (rc = ferry__spec_u64(s, "max_pixels", 1, UINT64_MAX, &p->max_pixels)) < 0 ||
        (rc = ferry__spec_u64(s, "max_side", 1, 16384, &max_side)) < 0 ||
        (rc = ferry__spec_u64(s, "quality", 1, 100, &quality)) < 0)
        return rc;
    const char *dv = ferry__spec_str(s, "dtype");
    if (dv) {
        for (dt = 0; dt < 6 && strcmp(dv, dtypes[dt]); dt++)
            ;
        if (dt == 6)
            return ferry__err(FERRY_EINVAL, "source %s: dtype=\"%.64s\" is not f32, f16 or u8",
                              s->kind, dv);
        p->dtype = dt % 3 == 0 ? FERRY_F32 : dt % 3 == 1 ? FERRY_F16 : FERRY_U8;
        if (p->dtype == FERRY_U8)
            norm = 0; /* bytes cannot carry a normalised value */
    }
    p->filter = (ferry_filter)filter;
    p->layout = layout;
    p->grey = grey;
    p->lenient = lenient;
    p->normalize = norm;
    if (ferry__spec_str(s, "fast") && ferry__spec_str(s, "dct_reduce") && fast != reduce)
        return ferry__err(FERRY_EINVAL,
                          "source %s: fast= and dct_reduce= disagree (they are "
                          "one setting: fast=1 reduces in the DCT domain)",
                          s->kind);
    p->fast = fast || reduce;
    p->max_side = (uint32_t)max_side;
    p->quality = (int)quality;
    if (quality && !max_side)
        return ferry__err(FERRY_EINVAL, "source %s: quality= applies only with max_side=", s->kind);
    *field = ferry__spec_str(s, "image_field");
    return ferry_image_pipeline_check(p);
}

/* "images:DIR,...": an image folder, files: with image extensions by default,
 * decoded by the pipeline (the registry adds it: the kind's flag IMAGES). */
int ferry__images_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s)
{
    int rc = ferry__spec_default(s, "ext", "jpg;jpeg;png");
    return rc < 0 ? rc : ferry__files_open_spec(ds, st, s);
}
