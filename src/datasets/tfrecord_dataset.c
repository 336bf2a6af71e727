/*
 * TFRecord files as datasets: map-style through an offset index, or a stream
 * over files in a per-epoch shuffled order; records decoded from tf.train.Example.
 */
#include "ferry/tfrecord.h"
#include "ferry/sampler.h"
#include "shard_stream.h"
#include "../io/remote.h"
#include "spec.h"
#include "../formats/example.h"
#include "../formats/tfrecord_internal.h"
#include "../core/guard.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_INFER 1000
#define DEFAULT_MAX_RECORD ((uint64_t)256 << 20)
/* A padded slot (the most values of one record times the longest value of
 * another) may exceed what one record holds by this much at most; past it the
 * schema is refused: memory must follow the data. */
#define PAD_FLOOR ((uint64_t)1 << 20)

typedef struct col {
    int kind; /* FERRY__FEAT_* */
    int seq;  /* a feature list of a SequenceExample: dim 0 is its steps */
} col;

typedef struct tfr {
    ferry__shard_files files;
    ferry_tfrecord_opts o;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS]; /* sorted by name when decoding Examples */
    col cols[FERRY_MAX_FIELDS];
    /* map-style: the files mapped (read under a guard: a file cut short is an error) */
    ferry__map *maps;
    uint64_t *first; /* first[k] = records before file k */
    uint64_t **offs; /* offs[k][j] = offset of record j of file k; one past the last */
} tfr;

static void tfr_free(tfr *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->files.n; k++) {
        if (t->maps)
            ferry__unmap(&t->maps[k]);
        if (t->offs)
            ferry__free(t->offs[k]);
    }
    ferry__free(t->maps);
    ferry__free(t->offs);
    ferry__free(t->first);
    ferry__shard_files_free(&t->files);
    ferry__free(t);
}

static bool want_tfrecord(const char *name)
{
    return strstr(name, "tfrecord") || strstr(name, "tfrec") || strstr(name, "TFRecord");
}

/* ---- Decoding one record ---- */

typedef struct found {
    const tfr *t;
    ferry__feature f[FERRY_MAX_FIELDS];
    bool have[FERRY_MAX_FIELDS];
} found;

static int find_col(const tfr *t, const uint8_t *key, size_t len)
{
    int lo = 0, hi = t->nfields - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const char *name = t->fields[mid].name;
        size_t nl = strlen(name);
        int c = memcmp(name, key, nl < len ? nl : len);
        if (c == 0)
            c = nl < len ? -1 : nl > len ? 1 : 0;
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int on_feature(void *arg, const ferry__feature *f)
{
    found *fd = arg;
    int k = find_col(fd->t, f->key, f->key_len);
    if (k >= 0) {
        fd->f[k] = *f;
        fd->have[k] = true;
    }
    return 0;
}

static const char *kind_name(int kind)
{
    return kind == FERRY__FEAT_BYTES   ? "bytes_list"
           : kind == FERRY__FEAT_FLOAT ? "float_list"
           : kind == FERRY__FEAT_INT64 ? "int64_list"
                                       : "no kind";
}

#define WHERE name, (unsigned long long)rec, (unsigned long long)off

/* A feature list: step j is row j (its k values, or its one bytes value
 * zero-padded); the length is the number of steps. */
static int decode_steps(const tfr *t, int k, const ferry__feature *fl, void *dst, int64_t *length,
                        const char *name, uint64_t rec, uint64_t off)
{
    const ferry_field *f = &t->fields[k];
    size_t width = f->ndim == 2 ? (size_t)f->shape[1] : 1, esize = ferry_dtype_size(f->dtype);
    size_t pos = 0;
    uint64_t j = 0;
    ferry__feature step;
    int rc;
    while ((rc = ferry__feature_step(fl, &pos, &step)) == 1) {
        if (j >= (uint64_t)f->shape[0])
            return ferry__err(FERRY_EOVERFLOW,
                              "%s: record %llu at offset %llu: feature list \"%s\" has more than "
                              "%lld steps (the most in the records read to infer it)",
                              WHERE, f->name, (long long)f->shape[0]);
        uint8_t *row = (uint8_t *)dst + j * width * esize;
        uint64_t count = 0;
        if (step.kind != FERRY__FEAT_NONE && step.kind != t->cols[k].kind)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: feature list \"%s\": step %llu is "
                              "a %s, the schema says %s",
                              WHERE, f->name, (unsigned long long)j, kind_name(step.kind),
                              kind_name(t->cols[k].kind));
        if (t->cols[k].kind == FERRY__FEAT_BYTES) {
            size_t p2 = 0, len;
            const uint8_t *v;
            memset(row, 0, width);
            while (step.kind != FERRY__FEAT_NONE &&
                   (rc = ferry__feature_bytes_next(&step, &p2, &v, &len)) == 1) {
                if (count++ || len > width)
                    return ferry__err(FERRY_EOVERFLOW,
                                      "%s: record %llu at offset %llu: feature list \"%s\": step "
                                      "%llu holds %s (the field takes one of up to %zu bytes)",
                                      WHERE, f->name, (unsigned long long)j,
                                      count > 1 ? "several values" : "a longer value", width);
                memcpy(row, v, len);
            }
        } else if (step.kind != FERRY__FEAT_NONE) {
            rc = t->cols[k].kind == FERRY__FEAT_FLOAT
                     ? ferry__feature_floats(&step, (float *)row, width, &count)
                     : ferry__feature_int64s(&step, (int64_t *)row, width, &count);
        }
        if (rc < 0)
            return ferry__err_prefix(rc, "%s: record %llu at offset %llu: feature list \"%s\"",
                                     WHERE, f->name);
        if (t->cols[k].kind != FERRY__FEAT_BYTES && count != width)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: feature list \"%s\": step %llu "
                              "holds %llu values, the field takes %zu",
                              WHERE, f->name, (unsigned long long)j, (unsigned long long)count,
                              width);
        j++;
    }
    if (rc < 0)
        return ferry__err_prefix(rc, "%s: record %llu at offset %llu: feature list \"%s\"", WHERE,
                                 f->name);
    *length = (int64_t)j;
    return 0;
}

static int decode_field(const tfr *t, int k, const ferry__feature *f, bool have, void *dst,
                        int64_t *length, const char *name, uint64_t rec, uint64_t off)
{
    const ferry_field *fl = &t->fields[k];
    const col *c = &t->cols[k];
    size_t numel = fl->ndim == 0 ? 1 : (size_t)fl->shape[0] * ferry_field_row_elems(fl);
    int rc;
    if (!have || f->kind == FERRY__FEAT_NONE) {
        if (fl->variable) {
            *length = 0;
            return 0;
        }
        if (t->o.missing != FERRY_TFRECORD_MISSING_FILL)
            return ferry__err(FERRY_ENOENT,
                              "%s: record %llu at offset %llu: feature \"%s\" is %s (missing=fill "
                              "fills it)",
                              WHERE, fl->name, have ? "empty (a Feature with no kind)" : "missing");
        for (size_t i = 0; i < numel; i++) {
            if (fl->dtype == FERRY_F32)
                ((float *)dst)[i] = (float)t->o.fill;
            else
                ((int64_t *)dst)[i] = (int64_t)t->o.fill;
        }
        return 0;
    }
    if (f->kind != c->kind)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: feature \"%s\" is a %s, the schema "
                          "says %s",
                          WHERE, fl->name, kind_name(f->kind), kind_name(c->kind));
    if (f->seq != c->seq)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: \"%s\" is a %s, the schema has a %s",
                          WHERE, fl->name, f->seq ? "feature list" : "feature",
                          c->seq ? "feature list" : "feature");
    if (c->seq)
        return decode_steps(t, k, f, dst, length, name, rec, off);
    uint64_t count = 0;
    if (c->kind == FERRY__FEAT_BYTES) {
        size_t pos = 0, len;
        const uint8_t *v;
        size_t width = fl->ndim == 2 ? (size_t)fl->shape[1] : (size_t)fl->shape[0];
        uint64_t rows = fl->ndim == 2 ? (uint64_t)fl->shape[0] : 1;
        while ((rc = ferry__feature_bytes_next(f, &pos, &v, &len)) == 1) {
            if (count >= rows)
                return ferry__err(FERRY_EOVERFLOW,
                                  "%s: record %llu at offset %llu: feature \"%s\" holds more than "
                                  "%llu values (give features=%s:bytes:KxN)",
                                  WHERE, fl->name, (unsigned long long)rows, fl->name);
            if (len > width)
                return ferry__err(FERRY_EOVERFLOW,
                                  "%s: record %llu at offset %llu: feature \"%s\" has a %zu-byte "
                                  "value, over its bound of %zu (give features=)",
                                  WHERE, fl->name, len, width);
            uint8_t *row = (uint8_t *)dst + count * width;
            memcpy(row, v, len);
            if (fl->ndim == 2)
                memset(row + len, 0, width - len);
            else
                *length = (int64_t)len;
            count++;
        }
        if (rc < 0)
            return ferry__err_prefix(rc, "%s: record %llu at offset %llu: feature \"%s\"", WHERE,
                                     fl->name);
        if (fl->ndim == 2)
            *length = (int64_t)count;
        else if (count == 0)
            *length = 0;
        return 0;
    }
    rc = c->kind == FERRY__FEAT_FLOAT ? ferry__feature_floats(f, dst, numel, &count)
                                      : ferry__feature_int64s(f, dst, numel, &count);
    if (rc < 0)
        return ferry__err_prefix(rc, "%s: record %llu at offset %llu: feature \"%s\"", WHERE,
                                 fl->name);
    if (fl->variable) {
        if (count > numel)
            return ferry__err(FERRY_EOVERFLOW,
                              "%s: record %llu at offset %llu: feature \"%s\" holds %llu values, "
                              "over its bound of %zu (give features=)",
                              WHERE, fl->name, (unsigned long long)count, numel);
        *length = (int64_t)count;
    } else if (count != numel) {
        return ferry__err(FERRY_ECORRUPT,
                          "%s: record %llu at offset %llu: feature \"%s\" holds %llu values, its "
                          "field takes %zu",
                          WHERE, fl->name, (unsigned long long)count, numel);
    }
    return 0;
}

static int decode(const tfr *t, const uint8_t *data, size_t n, ferry_sample *out, const char *name,
                  uint64_t rec, uint64_t off)
{
    if (t->o.raw) {
        if (n > (uint64_t)t->fields[0].shape[0])
            return ferry__err(FERRY_EOVERFLOW,
                              "%s: record %llu at offset %llu: %zu bytes, over the bound of "
                              "\"data\" (%lld; give max=)",
                              WHERE, n, (long long)t->fields[0].shape[0]);
        memcpy(out->data[0], data, n);
        out->length[0] = (int64_t)n;
        return 0;
    }
    found fd;
    fd.t = t;
    memset(fd.have, 0, sizeof fd.have);
    int rc = ferry__example_walk(data, n, on_feature, &fd);
    if (rc < 0)
        return ferry__err_prefix(rc, "%s: record %llu at offset %llu", WHERE);
    for (int k = 0; k < t->nfields; k++)
        if ((rc = decode_field(t, k, &fd.f[k], fd.have[k], out->data[k], &out->length[k], name, rec,
                               off)) < 0)
            return rc;
    return 0;
}

/* ---- The schema ---- */

typedef struct stat_ {
    char name[FERRY_MAX_NAME];
    int kind, seq;
    uint64_t min_count, max_count, max_len, seen;
    uint64_t max_steps, max_per_step;  /* feature lists */
    uint64_t max_product;              /* the most values x width of one record */
    const char *count_file, *len_file; /* where max_count (max_steps), max_len were */
    uint64_t count_rec, len_rec;
} stat_;

typedef struct infer_state {
    stat_ s[FERRY_MAX_FIELDS];
    int n;
    uint64_t records;
    const char *file;
    uint64_t rec, off;
} infer_state;

static int on_infer(void *arg, const ferry__feature *f)
{
    infer_state *st = arg;
    int k;
    for (k = 0; k < st->n; k++)
        if (strlen(st->s[k].name) == f->key_len && !memcmp(st->s[k].name, f->key, f->key_len))
            break;
    if (k == st->n) {
        if (st->n == FERRY_MAX_FIELDS)
            return ferry__err(FERRY_ERANGE,
                              "%s: record %llu: more than %d features: choose some with features=",
                              st->file, (unsigned long long)st->rec, FERRY_MAX_FIELDS);
        if (f->key_len == 0 || f->key_len >= FERRY_MAX_NAME || memchr(f->key, 0, f->key_len))
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: a feature name of %zu bytes (1..%d "
                              "allowed)",
                              st->file, (unsigned long long)st->rec, (unsigned long long)st->off,
                              f->key_len, FERRY_MAX_NAME - 1);
        if (!ferry__utf8_valid(f->key, f->key_len)) {
            char esc[4 * FERRY_MAX_NAME + 1];
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: feature name \"%s\" is not UTF-8",
                              st->file, (unsigned long long)st->rec, (unsigned long long)st->off,
                              ferry__escape(esc, sizeof esc, f->key, f->key_len));
        }
        memset(&st->s[k], 0, sizeof st->s[k]);
        memcpy(st->s[k].name, f->key, f->key_len);
        st->s[k].min_count = st->records ? 0 : UINT64_MAX; /* absent from earlier records */
        st->n++;
    }
    stat_ *s = &st->s[k];
    if (s->seen && s->seq != f->seq)
        return ferry__err(FERRY_ENOTSUP,
                          "%s: record %llu at offset %llu: \"%s\" is both a context feature and a "
                          "feature list",
                          st->file, (unsigned long long)st->rec, (unsigned long long)st->off,
                          s->name);
    s->seq = f->seq;
    uint64_t count = 0, max_len = 0, per_step = 0;
    int rc = 0;
    if (f->seq) {
        size_t pos = 0;
        ferry__feature step;
        while ((rc = ferry__feature_step(f, &pos, &step)) == 1) {
            uint64_t c, l;
            if ((rc = ferry__feature_count(&step, &c, &l)) < 0)
                break;
            if (step.kind == FERRY__FEAT_BYTES && c > 1)
                return ferry__err(FERRY_ENOTSUP,
                                  "%s: record %llu at offset %llu: feature list \"%s\" has a step "
                                  "of %llu bytes values: not supported (one per step is; read "
                                  "with raw=1)",
                                  st->file, (unsigned long long)st->rec,
                                  (unsigned long long)st->off, s->name, (unsigned long long)c);
            if (c > per_step)
                per_step = c;
            if (l > max_len)
                max_len = l;
            count++;
        }
        if (count > s->max_steps) {
            s->max_steps = count;
            s->count_file = st->file, s->count_rec = st->rec;
        }
        if (per_step > s->max_per_step)
            s->max_per_step = per_step;
    } else {
        rc = ferry__feature_count(f, &count, &max_len);
    }
    if (rc < 0)
        return ferry__err_prefix(rc, "%s: record %llu at offset %llu: feature \"%s\"", st->file,
                                 (unsigned long long)st->rec, (unsigned long long)st->off, s->name);
    if (f->kind != FERRY__FEAT_NONE) {
        if (s->kind && s->kind != f->kind)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: record %llu at offset %llu: feature \"%s\" is a %s, earlier "
                              "records have a %s",
                              st->file, (unsigned long long)st->rec, (unsigned long long)st->off,
                              s->name, kind_name(f->kind), kind_name(s->kind));
        s->kind = f->kind;
    }
    s->seen = st->records + 1;
    if (count < s->min_count)
        s->min_count = count;
    if (count > s->max_count) {
        s->max_count = count;
        if (!f->seq)
            s->count_file = st->file, s->count_rec = st->rec;
    }
    if (max_len > s->max_len) {
        s->max_len = max_len;
        s->len_file = st->file, s->len_rec = st->rec;
    }
    uint64_t width = f->kind == FERRY__FEAT_BYTES ? max_len : f->seq ? per_step : 1, product;
    if (__builtin_mul_overflow(count, width, &product))
        product = UINT64_MAX;
    if (product > s->max_product)
        s->max_product = product;
    return 0;
}

/* A slot of rows x width from two records' maxima, refused where it is far over
 * what one record holds (an 80 KB file asked 394 MB a sample). */
static int check_padding(const stat_ *s, uint64_t rows, uint64_t width)
{
    uint64_t slot;
    if (!__builtin_mul_overflow(rows, width, &slot) &&
        (slot <= PAD_FLOOR || slot <= s->max_product))
        return 0;
    return ferry__err(FERRY_EOVERFLOW,
                      "%s: feature \"%s\": %llu %s (record %llu) of up to %llu %s (%s record "
                      "%llu) would pad every sample to %llu x %llu, far over the %llu of its "
                      "fullest record: give its shape with features=, or read with raw=1",
                      s->count_file, s->name, (unsigned long long)rows, s->seq ? "steps" : "values",
                      (unsigned long long)s->count_rec, (unsigned long long)width,
                      s->kind == FERRY__FEAT_BYTES ? "bytes" : "values",
                      s->len_file == s->count_file ? "in" : s->len_file,
                      (unsigned long long)s->len_rec, (unsigned long long)rows,
                      (unsigned long long)width, (unsigned long long)s->max_product);
}

static int cmp_field(const void *a, const void *b)
{
    return strcmp(((const ferry_field *)a)->name, ((const ferry_field *)b)->name);
}

static int infer_schema(tfr *t, uint64_t *max_raw)
{
    infer_state *st = ferry__calloc(1, sizeof *st);
    if (!st)
        return ferry__err(FERRY_ENOMEM, "tfrecord: out of memory");
    uint64_t limit = t->o.infer ? t->o.infer : DEFAULT_INFER;
    int rc = 0;
    *max_raw = 0;
    for (size_t k = 0; k < t->files.n && st->records < limit && rc == 0; k++) {
        ferry__tfr_reader rd;
        /* raw needs the lengths only: the data is not read (plain files) */
        if ((rc = ferry__tfr_open(&rd, t->files.paths[k], t->files.paths[k], t->o.compression,
                                  t->o.max_record, t->o.raw ? 4096 : 0)) < 0)
            break;
        st->file = t->files.paths[k];
        while (st->records < limit) {
            const uint8_t *d;
            size_t n;
            st->rec = rd.record;
            rc = ferry__tfr_next(&rd, &d, &n, &st->off, !t->o.raw);
            if (rc == FERRY_END) {
                rc = 0;
                break;
            }
            if (rc < 0)
                break;
            if (n > *max_raw)
                *max_raw = n;
            if (!t->o.raw) {
                if ((rc = ferry__example_walk(d, n, on_infer, st)) < 0) {
                    if (rc != FERRY_ERANGE &&
                        strncmp(ferry_last_errmsg(), st->file, strlen(st->file)) != 0)
                        rc = ferry__err_prefix(rc, "%s: record %llu at offset %llu", st->file,
                                               (unsigned long long)st->rec,
                                               (unsigned long long)st->off);
                    break;
                }
                /* keys absent from this record count as 0 values */
                for (int i = 0; i < st->n; i++)
                    if (st->s[i].seen != st->records + 1)
                        st->s[i].min_count = 0;
            }
            st->records++;
        }
        ferry__tfr_close(&rd);
    }
    if (rc == 0 && !t->o.raw) {
        if (st->n == 0)
            rc = ferry__err(FERRY_ECORRUPT, "%s: no features in the first %llu records",
                            t->files.paths[0], (unsigned long long)st->records);
        for (int i = 0; rc == 0 && i < st->n; i++) {
            stat_ *s = &st->s[i];
            ferry_field *f = &t->fields[i];
            memset(f, 0, sizeof *f);
            snprintf(f->name, sizeof f->name, "%s", s->name);
            if (!s->kind) {
                rc = ferry__err(FERRY_EINVAL,
                                "%s: feature \"%s\" has no values in the first %llu records: give "
                                "its type with features=",
                                t->files.paths[0], s->name, (unsigned long long)st->records);
                break;
            }
            t->cols[i].kind = s->kind;
            t->cols[i].seq = s->seq;
            if (s->seq) {
                /* steps in dim 0; a step's values (or its bytes) in dim 1 */
                f->variable = 1;
                f->shape[0] = s->max_steps ? (int64_t)s->max_steps : 1;
                uint64_t w = s->kind == FERRY__FEAT_BYTES ? s->max_len : s->max_per_step;
                f->dtype = s->kind == FERRY__FEAT_BYTES   ? FERRY_U8
                           : s->kind == FERRY__FEAT_FLOAT ? FERRY_F32
                                                          : FERRY_I64;
                f->ndim = s->kind != FERRY__FEAT_BYTES && w <= 1 ? 1 : 2;
                f->shape[1] = f->ndim == 2 ? (int64_t)(w ? w : 1) : 0;
                if ((rc = check_padding(s, s->max_steps, w)) < 0)
                    break;
            } else if (s->kind == FERRY__FEAT_BYTES) {
                f->dtype = FERRY_U8;
                f->variable = 1;
                int64_t width = s->max_len ? (int64_t)s->max_len : 1;
                if (s->max_count <= 1) {
                    f->ndim = 1;
                    f->shape[0] = width;
                } else {
                    f->ndim = 2;
                    f->shape[0] = (int64_t)s->max_count;
                    f->shape[1] = width;
                    if ((rc = check_padding(s, s->max_count, s->max_len)) < 0)
                        break;
                }
            } else {
                f->dtype = s->kind == FERRY__FEAT_FLOAT ? FERRY_F32 : FERRY_I64;
                if (s->min_count == s->max_count && s->max_count == 1) {
                    f->ndim = 0;
                } else {
                    f->ndim = 1;
                    f->shape[0] = s->max_count ? (int64_t)s->max_count : 1;
                    f->variable = s->min_count != s->max_count || s->max_count == 0;
                }
            }
        }
        t->nfields = st->n;
        /* sort fields and their kinds together */
        for (int i = 0; i < t->nfields; i++) /* carried through qsort */
            t->fields[i].shape[FERRY_MAX_DIMS - 1] = t->cols[i].kind + 8 * t->cols[i].seq;
        qsort(t->fields, (size_t)t->nfields, sizeof t->fields[0], cmp_field);
        for (int i = 0; i < t->nfields; i++) {
            t->cols[i].kind = (int)(t->fields[i].shape[FERRY_MAX_DIMS - 1] % 8);
            t->cols[i].seq = (int)(t->fields[i].shape[FERRY_MAX_DIMS - 1] / 8);
            t->fields[i].shape[FERRY_MAX_DIMS - 1] = 0;
        }
    }
    ferry__free(st);
    return rc;
}

/* "name:dtype[:shape];..." */
static int parse_features(tfr *t, const char *text)
{
    char buf[4096];
    if (strlen(text) >= sizeof buf)
        return ferry__err(FERRY_EINVAL, "tfrecord: features= is too long");
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    t->nfields = 0;
    for (char *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        if (t->nfields == FERRY_MAX_FIELDS)
            return ferry__err(FERRY_EINVAL, "tfrecord: features= names more than %d",
                              FERRY_MAX_FIELDS);
        char *c1 = strchr(item, ':');
        if (!c1 || c1 == item)
            return ferry__err(FERRY_EINVAL,
                              "tfrecord: features= item \"%.64s\" is not name:dtype[:shape]", item);
        *c1 = 0;
        char *dt = c1 + 1, *shape = strchr(dt, ':');
        if (shape)
            *shape++ = 0;
        ferry_field *f = &t->fields[t->nfields];
        memset(f, 0, sizeof *f);
        if (strlen(item) >= FERRY_MAX_NAME)
            return ferry__err(FERRY_EINVAL, "tfrecord: feature name \"%.64s\" is too long", item);
        snprintf(f->name, sizeof f->name, "%s", item);
        int kind;
        if (!strcmp(dt, "f32") || !strcmp(dt, "float32") || !strcmp(dt, "float"))
            kind = FERRY__FEAT_FLOAT, f->dtype = FERRY_F32;
        else if (!strcmp(dt, "i64") || !strcmp(dt, "int64"))
            kind = FERRY__FEAT_INT64, f->dtype = FERRY_I64;
        else if (!strcmp(dt, "bytes"))
            kind = FERRY__FEAT_BYTES, f->dtype = FERRY_U8;
        else
            return ferry__err(FERRY_EINVAL,
                              "tfrecord: feature \"%s\": dtype \"%.16s\" is not f32, i64 or bytes",
                              item, dt);
        t->cols[t->nfields].kind = kind;
        uint64_t a = 0, b = 0;
        bool var = shape && shape[0] == '~';
        char *x = shape ? strchr(shape, 'x') : NULL;
        if (x)
            *x = 0;
        if (shape && (!ferry__parse_u64(shape + var, &a) || a < 1 || a > ((uint64_t)1 << 32) ||
                      (x && (!ferry__parse_u64(x + 1, &b) || b < 1 || b > ((uint64_t)1 << 32)))))
            return ferry__err(FERRY_EINVAL,
                              "tfrecord: feature \"%s\": shape is not N, ~N or KxN (1..2^32)",
                              item);
        if (kind == FERRY__FEAT_BYTES) {
            if (!shape || var)
                return ferry__err(FERRY_EINVAL,
                                  "tfrecord: feature \"%s\": bytes need a bound: N or KxN", item);
            f->variable = 1;
            f->ndim = x ? 2 : 1;
            f->shape[0] = (int64_t)a;
            f->shape[1] = x ? (int64_t)b : 0;
        } else if (x) {
            return ferry__err(FERRY_EINVAL, "tfrecord: feature \"%s\": KxN is for bytes", item);
        } else if (shape) {
            f->ndim = 1;
            f->shape[0] = (int64_t)a;
            f->variable = var;
        }
        t->nfields++;
    }
    if (t->nfields == 0)
        return ferry__err(FERRY_EINVAL, "tfrecord: features= is empty");
    for (int i = 0; i < t->nfields; i++)
        t->fields[i].shape[FERRY_MAX_DIMS - 1] = t->cols[i].kind;
    qsort(t->fields, (size_t)t->nfields, sizeof t->fields[0], cmp_field);
    for (int i = 0; i < t->nfields; i++) {
        t->cols[i].kind = (int)t->fields[i].shape[FERRY_MAX_DIMS - 1];
        t->fields[i].shape[FERRY_MAX_DIMS - 1] = 0;
    }
    return ferry__check_fields(t->fields, t->nfields);
}

/* The index of mapped plain file k from its record headers alone: offs[k] gets
 * each record's offset and one past the last (*cnt of them), max_raw the longest
 * record. The errors are a stream's (a damaged or cut header, a record running
 * past the end). Read under a guard, as the file may be cut short meanwhile; the
 * offsets grow in t->offs[k], which t frees whatever happens. */
static int walk(tfr *t, size_t k, uint64_t *cnt, uint64_t *max_raw)
{
    const char *name = t->files.paths[k];
    const uint8_t *b = t->maps[k].data;
    uint64_t size = t->maps[k].size, off = 0, rec = 0, len;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (*cnt == cap) {
            size_t ncap = cap ? 2 * cap : 1024;
            uint64_t *grown = ferry__realloc(t->offs[k], ncap * sizeof *grown);
            if (!grown) {
                rc = ferry__err(FERRY_ENOMEM, "%s: out of memory for the index", name);
                break;
            }
            t->offs[k] = grown;
            cap = ncap;
        }
        t->offs[k][(*cnt)++] = off;
        if (off == size)
            break; /* one past the last */
        if (size - off < FERRY__TFR_HEADER) {
            rc = ferry__err(FERRY_ECORRUPT,
                            "%s: record %llu at offset %llu: truncated header (%llu of 12 bytes)",
                            name, (unsigned long long)rec, (unsigned long long)off,
                            (unsigned long long)(size - off));
            break;
        }
        if ((rc = ferry__tfr_header(name, rec, off, b + off, t->o.max_record, &len)) < 0)
            break;
        if (size - off < FERRY__TFR_OVERHEAD + len) {
            uint64_t there = size - off;
            rc = ferry__err(
                FERRY_ECORRUPT,
                "%s: record %llu at offset %llu: truncated: %llu data bytes and a "
                "CRC announced, %llu there",
                name, (unsigned long long)rec, (unsigned long long)off, (unsigned long long)len,
                (unsigned long long)(there > FERRY__TFR_OVERHEAD ? there - FERRY__TFR_OVERHEAD
                                                                 : 0));
            break;
        }
        if (len > *max_raw)
            *max_raw = len;
        off += FERRY__TFR_OVERHEAD + len;
        rec++;
    }
    return rc;
}

__attribute__((noinline)) static int walk_headers(tfr *t, size_t k, uint64_t *cnt,
                                                  uint64_t *max_raw)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, t->files.paths[k], t->maps[k].data, "indexing");
    int rc = walk(t, k, cnt, max_raw);
    ferry__guard_pop(&g);
    return rc;
}

static int tfr_open(tfr **out, const char *location, const ferry_tfrecord_opts *o, bool map)
{
    int rc = 0;
    uint64_t max_raw = 0;
    tfr *t = ferry__calloc(1, sizeof *t);
    *out = NULL;
    if (!t)
        return ferry__err(FERRY_ENOMEM, "tfrecord: out of memory");
    if (o)
        t->o = *o;
    t->o.features = NULL;
    if (!t->o.max_record)
        t->o.max_record = DEFAULT_MAX_RECORD;
    if (t->o.compression < FERRY_TFRECORD_AUTO || t->o.compression > FERRY_TFRECORD_GZIP)
        FERRY_FAIL(FERRY_EINVAL, "tfrecord: compression %d is not AUTO, NONE or GZIP",
                   t->o.compression);
    FERRY_TRY(ferry__shard_files_list(&t->files, "tfrecord", location, want_tfrecord,
                                      "TFRecord files (names containing \"tfrecord\" or "
                                      "\"tfrec\")"));
    /* remote files: their framing and CRCs checked before their copies enter the cache */
    ferry__remote_check_paths(t->files.paths, t->files.n, ferry__tfr_check_copy);
    if (map) {
        /* the index: every record's offset, from the headers alone */
        t->maps = ferry__calloc(t->files.n, sizeof *t->maps);
        t->offs = ferry__calloc(t->files.n, sizeof *t->offs);
        t->first = ferry__calloc(t->files.n + 1, sizeof *t->first);
        if (!t->maps || !t->offs || !t->first)
            FERRY_FAIL(FERRY_ENOMEM, "tfrecord: out of memory");
        FERRY_TRY(ferry__guard_install());
        for (size_t k = 0; k < t->files.n; k++) {
            const char *path = t->files.paths[k];
            ferry__tfr_reader rd;
            ferry__prefetch_ahead(t->files.paths, t->files.n, k + 1, 0);
            /* opened to tell a compressed file (its first bytes); then mapped */
            FERRY_TRY(ferry__tfr_open(&rd, path, path, t->o.compression, t->o.max_record, 4096));
            if (rd.r.compressed) {
                const char *c = rd.r.compressed;
                ferry__tfr_close(&rd);
                FERRY_FAIL(FERRY_ENOTSUP,
                           "%s: %s-compressed: a map-style dataset needs uncompressed files "
                           "(read %s files as a stream)",
                           path, c, c);
            }
            ferry__tfr_close(&rd);
            FERRY_TRY(ferry__map_file(&t->maps[k], path));
            uint64_t cnt = 0;
            FERRY_TRY(walk_headers(t, k, &cnt, &max_raw));
            t->first[k + 1] = t->first[k] + (cnt - 1);
        }
    }
    if (o && o->features && !t->o.raw) {
        FERRY_TRY(parse_features(t, o->features));
    } else if (!(t->o.raw && (map || t->o.max))) {
        uint64_t inferred = 0;
        FERRY_TRY(infer_schema(t, &inferred));
        if (!map)
            max_raw = inferred;
    }
    if (t->o.raw) {
        memset(&t->fields[0], 0, sizeof t->fields[0]);
        snprintf(t->fields[0].name, sizeof t->fields[0].name, "data");
        t->fields[0].dtype = FERRY_U8;
        t->fields[0].ndim = 1;
        t->fields[0].variable = 1;
        t->fields[0].shape[0] = (int64_t)(t->o.max ? t->o.max : max_raw ? max_raw : 1);
        t->nfields = 1;
    }
    *out = t;
    return 0;
cleanup:
    tfr_free(t);
    return rc;
}

/* ---- Map-style ---- */

static uint64_t tfr_len(void *self)
{
    tfr *t = self;
    return t->first[t->files.n];
}

static int stale(const char *name, uint64_t j, uint64_t off, const char *why)
{
    return ferry__err(FERRY_ESTALE, "%s: record %llu at offset %llu: %s", name,
                      (unsigned long long)j, (unsigned long long)off, why);
}

/* The file of global record i: the last k with first[k] <= i. */
static size_t file_of(const tfr *t, uint64_t i)
{
    size_t lo = 0, hi = t->files.n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (t->first[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* A record that fails its data CRC in a file that is shorter now than when it was
 * indexed: the bytes past the new end read as zeros from the mapping's last page. */
static int bad_data(const tfr *t, size_t k, uint64_t j, uint64_t off, uint64_t end, int rc)
{
    uint64_t size;
    int64_t mtime;
    if (ferry__stat(t->files.paths[k], &size, &mtime) == 0 && size < end)
        return stale(t->files.paths[k], j, off, "the file is shorter than when it was indexed");
    return rc;
}

/* Record i from the mapping: both CRCs checked; raw = 1, the data's CRC in the same
 * pass as its copy into the sample. Does not allocate (a fault leaves it). */
static int tfr_read(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    (void)ctx;
    tfr *t = self;
    size_t k = file_of(t, i);
    uint64_t j = i - t->first[k], off = t->offs[k][j];
    uint64_t total = t->offs[k][j + 1] - off, len;
    const char *name = t->files.paths[k];
    const uint8_t *h = (const uint8_t *)t->maps[k].data + off;
    int rc;
    if ((rc = ferry__tfr_header(name, j, off, h, t->o.max_record, &len)) < 0)
        return bad_data(t, k, j, off, off + total, rc);
    if (len + FERRY__TFR_OVERHEAD != total)
        return bad_data(t, k, j, off, off + total,
                        stale(name, j, off, "its length changed since the file was indexed"));
    const uint8_t *d = h + FERRY__TFR_HEADER;
    if (!t->o.raw) {
        if ((rc = ferry__tfr_data(name, j, off, d, len)) < 0)
            return bad_data(t, k, j, off, off + total, rc);
        return decode(t, d, (size_t)len, out, name, j, off);
    }
    if (len > (uint64_t)t->fields[0].shape[0])
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: record %llu at offset %llu: %llu bytes, over the bound of \"data\" "
                          "(%lld; give max=)",
                          name, (unsigned long long)j, (unsigned long long)off,
                          (unsigned long long)len, (long long)t->fields[0].shape[0]);
    uint32_t crc = ferry__crc32c_copy(0, out->data[0], d, (size_t)len);
    if ((rc = ferry__tfr_data_crc(name, j, off, crc, len, d + len)) < 0)
        return bad_data(t, k, j, off, off + total, rc);
    out->length[0] = (int64_t)len;
    return 0;
}

static int tfr_fault(const ferry__reading *rd, uintptr_t addr)
{
    const tfr *t = rd->arg;
    size_t k = file_of(t, rd->item);
    return ferry__guard_err(addr, t->files.paths[k], t->maps[k].data, "record %llu",
                            (unsigned long long)(rd->item - t->first[k]));
}

FERRY__GUARDED_GET(tfr_get, tfr_read, tfr_fault)

static void tfr_destroy(void *self)
{
    tfr_free(self);
}

static const ferry_dataset_vtable tfr_vtable = {
    .len = tfr_len, .get = tfr_get, .destroy = tfr_destroy};

int ferry_dataset_tfrecord(ferry_dataset **out, const char *location, const ferry_tfrecord_opts *o)
{
    *out = NULL;
    tfr *t;
    int rc = tfr_open(&t, location, o, true);
    if (rc < 0)
        return rc;
    uint64_t n = t->files.n;
    const uint64_t *first = t->first; /* the dataset owns t from here */
    rc = ferry_dataset_create(out, &tfr_vtable, t, t->fields, t->nfields);
    return ferry__dataset_shards_at(out, rc, first, sizeof *first, n);
}

/* ---- Stream: the framing of a file's records, under the shard engine ---- */

/* A window of 1 MiB (the default): a record of up to a quarter of it is checked and
 * copied out of the window in one pass (ferry__tfr_next_into), one read of the
 * file for many small records; a larger one is read from the file straight into
 * the sample. For fetch a small one, where each fetch away from the last one reads
 * a window (a compressed file's is 64 KiB at least). */
static int st_open(const void *self, void *rd, const char *path, bool fetch)
{
    const tfr *t = self;
    size_t window = fetch ? (size_t)16 << 10 : 0;
    return ferry__tfr_open(rd, path, path, t->o.compression, t->o.max_record, window);
}

static void st_close(void *rd)
{
    ferry__tfr_close(rd);
}

/* The record at rd's position into out: 0, FERRY_END, or an error (*broken when
 * the framing is lost; else for this record only: a bad data CRC, too long for
 * its field, does not decode). pos: b = its offset in the file (in the
 * decompressed bytes of a gzip file), c = its record number in the file. */
static int st_next(const void *self, void *reader, const char *path, ferry_sample *out,
                   bool *broken)
{
    const tfr *t = self;
    ferry__tfr_reader *rd = reader;
    const uint8_t *d = NULL;
    size_t n;
    uint64_t rec = rd->record, off;
    int rc;
    if (t->o.raw) { /* straight into the sample */
        rc = ferry__tfr_next_into(rd, out->data[0], (size_t)t->fields[0].shape[0], &n, &off);
        if (rc == 0)
            out->length[0] = (int64_t)n;
    } else if ((rc = ferry__tfr_next(rd, &d, &n, &off, 1)) == 0) {
        rc = decode(t, d, n, out, path, rec, off);
    }
    if (rc == FERRY_END)
        return rc;
    out->pos.b = off;
    out->pos.c = rec;
    *broken = rc < 0 && rd->broken;
    return rc;
}

static uint64_t st_size(const void *rd)
{
    return ((const ferry__tfr_reader *)rd)->r.size;
}

/* The state's words: the reader's offset and record number in the open file. */
static void st_save(const void *reader, ferry_state *w)
{
    const ferry__tfr_reader *rd = reader;
    ferry_state_put_u64(w, rd ? rd->r.off : 0);
    ferry_state_put_u64(w, rd ? rd->record : 0);
}

static int st_resume(const void *self, void *reader, const char *path, const uint64_t *w,
                     ferry_state *r)
{
    ferry__tfr_reader *rd = reader;
    uint64_t off = w[0], record = w[1], at;
    int rc;
    (void)self;
    (void)r;
    if (record > off / FERRY__TFR_OVERHEAD)
        return ferry__err(FERRY_ECORRUPT,
                          "tfrecord stream: the state names record %llu at offset %llu of %s: "
                          "more records than fit there",
                          (unsigned long long)record, (unsigned long long)off, path);
    if ((rc = ferry__seqread_seek(&rd->r, off, &at)) < 0)
        return rc;
    if (at != off)
        return ferry__err(FERRY_ECORRUPT,
                          "tfrecord stream: the state names offset %llu of %s, which ends at "
                          "%llu%s",
                          (unsigned long long)off, path, (unsigned long long)at,
                          rd->r.compressed ? " (decompressed)" : "");
    rd->record = record;
    return 0;
}

static int st_fetch(const void *self, void *reader, const char *path, const ferry_pos *pos,
                    ferry_sample *out, bool *broken)
{
    ferry__tfr_reader *rd = reader;
    /* forward from the last fetch; a gzip file decodes from its start to go back */
    uint64_t at;
    int rc;
    if ((rc = ferry__seqread_seek(&rd->r, pos->b, &at)) < 0)
        return *broken = true, rc;
    rd->record = pos->c;
    rd->broken = false;
    rc = at == pos->b ? st_next(self, rd, path, out, broken) : FERRY_END;
    if (rc == FERRY_END)
        return ferry__err(FERRY_ERANGE,
                          "%s: no record %llu at offset %llu%s: the file ends at %llu", path,
                          (unsigned long long)pos->c, (unsigned long long)pos->b,
                          rd->r.compressed ? " (decompressed)" : "", (unsigned long long)at);
    return rc;
}

static const ferry__shard_format tfr_format = {
    .who = "tfrecord stream",
    .unit = "file",
    .stranger = "the state was not saved by a TFRecord stream",
    .tag = 0x3130525446595246ull, /* "FRYFTR01" */
    .reader_size = sizeof(ferry__tfr_reader),
    .words = 2,
    .open = st_open,
    .close = st_close,
    .next = st_next,
    .size = st_size,
    .save = st_save,
    .resume = st_resume,
    .fetch = st_fetch,
    .destroy = tfr_destroy,
};

int ferry_stream_tfrecord(ferry_stream **out, const char *location, const ferry_tfrecord_opts *o,
                          uint64_t seed)
{
    *out = NULL;
    tfr *t;
    int rc = tfr_open(&t, location, o, false);
    if (rc < 0)
        return rc;
    return ferry__shard_stream_create(out, &tfr_format, t, &t->files, seed, t->fields, t->nfields);
}

/* ---- "tfrecord:PATH,..." ---- */

int ferry__tfrecord_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s)
{
    ferry_tfrecord_opts o = {0};
    uint64_t seed = 0;
    int stream = -1, rc;
    const char *comp = ferry__spec_str(s, "compression");
    const char *missing = ferry__spec_str(s, "missing");
    const char *fill = ferry__spec_str(s, "fill");
    o.features = ferry__spec_str(s, "features");
    if ((rc = ferry__spec_bool(s, "raw", &o.raw)) < 0 ||
        (rc = ferry__spec_u64(s, "infer", 1, (uint64_t)1 << 32, &o.infer)) < 0 ||
        (rc = ferry__spec_u64(s, "max_record", 1, (uint64_t)1 << 34, &o.max_record)) < 0 ||
        (rc = ferry__spec_u64(s, "max", 1, (uint64_t)1 << 34, &o.max)) < 0 ||
        (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &seed)) < 0 ||
        (rc = ferry__spec_bool(s, "stream", &stream)) < 0 || (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (comp && !strcmp(comp, "none"))
        o.compression = FERRY_TFRECORD_NONE;
    else if (comp && !strcmp(comp, "gzip"))
        o.compression = FERRY_TFRECORD_GZIP;
    else if (comp && strcmp(comp, "auto"))
        return ferry__err(FERRY_EINVAL,
                          "source tfrecord: compression=\"%.32s\" is not auto, none "
                          "or gzip",
                          comp);
    if (missing && !strcmp(missing, "fill"))
        o.missing = FERRY_TFRECORD_MISSING_FILL;
    else if (missing && strcmp(missing, "error"))
        return ferry__err(FERRY_EINVAL, "source tfrecord: missing=\"%.32s\" is not error or fill",
                          missing);
    if (fill) {
        char *end;
        o.fill = strtod(fill, &end);
        if (end == fill || *end || !isfinite(o.fill))
            return ferry__err(FERRY_EINVAL, "source tfrecord: fill=\"%.32s\" is not a number",
                              fill);
    }
    if (stream < 0) {
        /* map-style where every file can be indexed; else a stream */
        stream = o.compression == FERRY_TFRECORD_GZIP ||
                 ferry__shard_files_compressed("tfrecord", s->location, want_tfrecord,
                                               "TFRecord files", o.compression);
    }
    if (stream)
        return st ? ferry_stream_tfrecord(st, s->location, &o, seed)
                  : ferry__err(FERRY_EINVAL,
                               "source tfrecord: compressed files make a stream; open "
                               "it with ferry_source_open");
    return ferry_dataset_tfrecord(ds, s->location, &o);
}
