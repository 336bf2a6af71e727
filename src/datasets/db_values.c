/*
 * A key/value store's values as fields (db_values.h): Caffe Datum, Caffe2
 * TensorProtos, or raw bytes, decided from the first entry.
 */
#include "db_values.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_MAX_LEN ((uint64_t)1 << 20)
#define MAX_MAX_LEN ((uint64_t)1 << 30)

static void add_field(ferry__db_values *vs, const char *name, ferry_dtype dt, int ndim,
                      const int64_t *shape, int variable)
{
    ferry_field *x = &vs->f[vs->nfields++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = dt;
    x->ndim = ndim;
    for (int k = 0; k < ndim; k++)
        x->shape[k] = shape[k];
    x->variable = variable;
}

static int init_datum(ferry__db_values *vs, const ferry_datum *first)
{
    vs->f_data = vs->f_label = vs->f_float = -1;
    if (first->data_size > 0 || first->encoded) {
        vs->f_data = vs->nfields;
        if (first->encoded) {
            vs->encoded = true;
            int64_t shape[1] = {(int64_t)vs->max_len};
            add_field(vs, "data", FERRY_U8, 1, shape, 1);
        } else {
            vs->c = first->channels;
            vs->h = first->height;
            vs->w = first->width;
            int64_t shape[3] = {vs->c, vs->h, vs->w};
            add_field(vs, "data", FERRY_U8, 3, shape, 0);
        }
    }
    vs->f_label = vs->nfields;
    add_field(vs, "label", FERRY_I64, 0, NULL, 0);
    if (first->float_count > 0) {
        vs->f_float = vs->nfields;
        vs->nfloat = first->float_count;
        int64_t shape[1] = {(int64_t)first->float_count};
        add_field(vs, "float_data", FERRY_F32, 1, shape, 0);
    }
    return 0;
}

/* A proto's field: its name when it has a usable one not taken yet, else by
 * position. */
static void proto_name(const ferry__db_values *vs, const ferry_tensor_proto *t, int k, char *out,
                       size_t cap)
{
    bool ok = t->name && t->name_len > 0 && t->name_len < cap && t->name_len < FERRY_MAX_NAME;
    for (size_t i = 0; ok && i < t->name_len; i++)
        ok = t->name[i] > 0x20 && t->name[i] < 0x7f && t->name[i] != ',';
    if (ok) {
        memcpy(out, t->name, t->name_len);
        out[t->name_len] = 0;
        for (int j = 0; j < vs->nfields; j++)
            ok = ok && strcmp(vs->f[j].name, out) != 0;
    }
    if (!ok)
        snprintf(out, cap, k == 0 ? "data" : k == 1 ? "label" : "tensor%d", k);
}

static bool int32_scalar(const ferry_tensor_proto *t)
{
    return t->data_type == FERRY_C2_INT32 && t->count == 1 &&
           (t->ndim == 0 || (t->ndim == 1 && t->dims[0] == 1));
}

static int init_protos(ferry__db_values *vs, const ferry_tensor_proto *t, size_t n)
{
    if (n > FERRY_MAX_FIELDS)
        return ferry__err(FERRY_ECORRUPT,
                          "the first value has %zu protos, over the %d fields a "
                          "sample may have",
                          n, FERRY_MAX_FIELDS);
    vs->nprotos = (int)n;
    for (int k = 0; k < (int)n; k++) {
        char name[FERRY_MAX_NAME];
        proto_name(vs, &t[k], k, name, sizeof name);
        vs->type[k] = t[k].data_type;
        vs->count[k] = t[k].count;
        if (t[k].data_type == FERRY_C2_STRING) {
            if (t[k].count != 1)
                return ferry__err(FERRY_ECORRUPT,
                                  "proto %d is a STRING tensor of %llu strings; ferry reads "
                                  "one (an encoded image)",
                                  k, (unsigned long long)t[k].count);
            int64_t shape[1] = {(int64_t)vs->max_len};
            add_field(vs, name, FERRY_U8, 1, shape, 1);
            continue;
        }
        ferry_dtype dt = ferry_tensor_proto_dtype(&t[k]);
        if (dt == FERRY_DTYPE_INVALID)
            return ferry__err(FERRY_ECORRUPT,
                              "proto %d has data_type %d, which ferry does not read", k,
                              t[k].data_type);
        if (int32_scalar(&t[k])) {
            add_field(vs, name, FERRY_I64, 0, NULL, 0);
            continue;
        }
        int64_t shape[FERRY_MAX_DIMS];
        int ndim = t[k].ndim;
        for (int d = 0; d < ndim; d++)
            shape[d] = t[k].dims[d];
        if (ndim == 0 && t[k].count != 1) {
            ndim = 1;
            shape[0] = (int64_t)t[k].count;
        }
        add_field(vs, name, dt, ndim, shape, 0);
    }
    return 0;
}

int ferry__db_values_init(ferry__db_values *vs, int mode, uint64_t max_len, uint64_t largest,
                          size_t max_klen, const uint8_t *first, size_t n)
{
    memset(vs, 0, sizeof *vs);
    if (max_len > MAX_MAX_LEN)
        return ferry__err(FERRY_EINVAL, "max_len %llu is outside [1, 2^30]",
                          (unsigned long long)max_len);
    vs->max_len = max_len ? max_len : DEFAULT_MAX_LEN;
    ferry_datum d;
    ferry_tensor_proto t[FERRY_MAX_FIELDS];
    size_t nt = 0;
    int rc;
    if (first && (mode == FERRY_DB_VALUE_AUTO || mode == FERRY_DB_VALUE_DATUM)) {
        rc = ferry_datum_decode(first, n, &d);
        if (rc < 0 && mode == FERRY_DB_VALUE_DATUM)
            return ferry__err_prefix(rc, "the first value is not a Caffe Datum");
        if (rc == 0 && (mode == FERRY_DB_VALUE_DATUM || d.data_size > 0 || d.float_count > 0)) {
            vs->mode = FERRY_DB_VALUE_DATUM;
            return init_datum(vs, &d);
        }
    }
    if (first && (mode == FERRY_DB_VALUE_AUTO || mode == FERRY_DB_VALUE_TENSORPROTOS)) {
        rc = ferry_tensorprotos_decode(first, n, t, FERRY_MAX_FIELDS, &nt);
        if (rc < 0 && mode == FERRY_DB_VALUE_TENSORPROTOS)
            return ferry__err_prefix(rc, "the first value is not a Caffe2 TensorProtos");
        if (rc == 0 && nt == 0 && mode == FERRY_DB_VALUE_TENSORPROTOS)
            return ferry__err(FERRY_ECORRUPT, "the first value is a TensorProtos with no proto");
        if (rc == 0 && nt > 0) {
            vs->mode = FERRY_DB_VALUE_TENSORPROTOS;
            return init_protos(vs, t, nt);
        }
    }
    if (mode == FERRY_DB_VALUE_DATUM || mode == FERRY_DB_VALUE_TENSORPROTOS)
        return ferry__err(FERRY_EINVAL,
                          "value=%s, but the store is empty (no first entry to "
                          "take the fields from)",
                          mode == FERRY_DB_VALUE_DATUM ? "datum" : "tensorprotos");
    vs->mode = FERRY_DB_VALUE_RAW;
    if (!max_len && largest > MAX_MAX_LEN)
        return ferry__err(FERRY_EOVERFLOW, "a value of %llu bytes is over 2^30",
                          (unsigned long long)largest);
    if (!max_len && largest) /* the bound is the batch slot's size: the largest value */
        vs->max_len = largest;
    int64_t kshape[1] = {max_klen ? (int64_t)max_klen : 1};
    int64_t vshape[1] = {(int64_t)vs->max_len};
    add_field(vs, "key", FERRY_U8, 1, kshape, 1);
    add_field(vs, "value", FERRY_U8, 1, vshape, 1);
    return 0;
}

static int get_datum(const ferry__db_values *vs, const uint8_t *v, size_t vlen, ferry_sample *out)
{
    ferry_datum dt;
    int rc = ferry_datum_decode(v, vlen, &dt);
    if (rc < 0)
        return rc;
    if (vs->f_data >= 0) {
        if (vs->encoded) {
            if (!dt.encoded)
                return ferry__err(FERRY_ECORRUPT,
                                  "raw %dx%dx%d pixels, but the first entry is encoded",
                                  dt.channels, dt.height, dt.width);
            if (dt.data_size > vs->max_len)
                return ferry__err(FERRY_EOVERFLOW,
                                  "the encoded image is %zu bytes, over max %llu (raise max=)",
                                  dt.data_size, (unsigned long long)vs->max_len);
            out->length[vs->f_data] = (int64_t)dt.data_size;
        } else if (dt.encoded || dt.channels != vs->c || dt.height != vs->h || dt.width != vs->w ||
                   dt.data_size != (size_t)vs->c * (size_t)vs->h * (size_t)vs->w) {
            return ferry__err(FERRY_ECORRUPT,
                              "%s [%d, %d, %d] (%zu data bytes), but the first entry's is "
                              "[%d, %d, %d]",
                              dt.encoded ? "encoded, shape" : "shape", dt.channels, dt.height,
                              dt.width, dt.data_size, vs->c, vs->h, vs->w);
        }
        if (dt.data_size)
            memcpy(out->data[vs->f_data], dt.data, dt.data_size);
    }
    int64_t label = dt.label;
    memcpy(out->data[vs->f_label], &label, sizeof label);
    if (vs->f_float >= 0) {
        if (dt.float_count != vs->nfloat)
            return ferry__err(FERRY_ECORRUPT, "%zu float_data values, but the first entry has %zu",
                              dt.float_count, vs->nfloat);
        ferry_datum_floats(&dt, out->data[vs->f_float], vs->nfloat);
    }
    return 0;
}

static int get_protos(const ferry__db_values *vs, const uint8_t *v, size_t vlen, ferry_sample *out)
{
    ferry_tensor_proto t[FERRY_MAX_FIELDS];
    size_t nt;
    int rc = ferry_tensorprotos_decode(v, vlen, t, FERRY_MAX_FIELDS, &nt);
    if (rc < 0)
        return rc;
    if (nt != (size_t)vs->nprotos)
        return ferry__err(FERRY_ECORRUPT, "%zu protos, but the first entry has %d", nt,
                          vs->nprotos);
    for (int k = 0; k < vs->nprotos; k++) {
        const ferry_field *f = &vs->f[k];
        if (t[k].data_type != vs->type[k])
            return ferry__err(FERRY_ECORRUPT,
                              "proto %d (%s) has data_type %d, but the first entry's is %d", k,
                              f->name, t[k].data_type, vs->type[k]);
        if (f->variable) { /* STRING */
            const uint8_t *s;
            size_t len;
            if (t[k].count != 1)
                return ferry__err(FERRY_ECORRUPT, "proto %d (%s) holds %llu strings, not one", k,
                                  f->name, (unsigned long long)t[k].count);
            if ((rc = ferry_tensor_proto_string(&t[k], 0, &s, &len)) < 0)
                return rc;
            if (len > vs->max_len)
                return ferry__err(FERRY_EOVERFLOW,
                                  "proto %d (%s) is %zu bytes, over max %llu (raise max=)", k,
                                  f->name, len, (unsigned long long)vs->max_len);
            if (len)
                memcpy(out->data[k], s, len);
            out->length[k] = (int64_t)len;
            continue;
        }
        bool same = t[k].count == vs->count[k];
        if (same && f->ndim > 0 && t[k].ndim > 0) {
            for (int d = 0; d < t[k].ndim && d < f->ndim; d++)
                same = same && t[k].dims[d] == f->shape[d];
            same = same && t[k].ndim == f->ndim;
        }
        if (!same)
            return ferry__err(FERRY_ECORRUPT,
                              "proto %d (%s) holds %llu values (%d dims), but the first entry's "
                              "holds %llu",
                              k, f->name, (unsigned long long)t[k].count, t[k].ndim,
                              (unsigned long long)vs->count[k]);
        if (ferry_tensor_proto_values(&t[k], f->dtype, out->data[k], t[k].count) != t[k].count)
            return ferry__err(FERRY_ECORRUPT, "proto %d (%s): its values could not be read", k,
                              f->name);
    }
    return 0;
}

int ferry__db_values_get(const ferry__db_values *vs, const uint8_t *key, size_t klen,
                         const uint8_t *v, size_t vlen, ferry_sample *out)
{
    if (vs->mode == FERRY_DB_VALUE_DATUM)
        return get_datum(vs, v, vlen, out);
    if (vs->mode == FERRY_DB_VALUE_TENSORPROTOS)
        return get_protos(vs, v, vlen, out);
    if (vlen > vs->max_len)
        return ferry__err(FERRY_EOVERFLOW, "the value is %zu bytes, over max %llu (raise max=)",
                          vlen, (unsigned long long)vs->max_len);
    if (klen > (size_t)vs->f[0].shape[0])
        return ferry__err(FERRY_EOVERFLOW, "the key is %zu bytes, over the longest key %lld", klen,
                          (long long)vs->f[0].shape[0]);
    memcpy(out->data[0], key, klen);
    out->length[0] = (int64_t)klen;
    if (vlen)
        memcpy(out->data[1], v, vlen);
    out->length[1] = (int64_t)vlen;
    return 0;
}
