/*
 * Packing one integer field of a source as an llm.c token shard: every sample in
 * order, each element range-checked against the shard's token size. One
 * implementation for the `ferry tokens` command and Python's ferry.tokens.
 */
#include "ferry/loader.h"
#include "ferry/tokens.h"
#include "../core/internal.h"
#include "../datasets/dataset_internal.h"

#include <string.h>

#define CHUNK 65536 /* tokens converted between appends */

/* Element k of a field's data as an integer; false for a float dtype. */
static bool int_at(ferry_dtype dt, const void *p, size_t k, int64_t *v, uint64_t *u, bool *neg)
{
    const unsigned char *b = (const unsigned char *)p + k * ferry_dtype_size(dt);
    *neg = false;
    switch (dt) {
#define S(T)                                                                                       \
    do {                                                                                           \
        T x;                                                                                       \
        memcpy(&x, b, sizeof x);                                                                   \
        *v = (int64_t)x;                                                                           \
        *neg = *v < 0;                                                                             \
        *u = (uint64_t)*v;                                                                         \
        return true;                                                                               \
    } while (0)
#define U(T)                                                                                       \
    do {                                                                                           \
        T x;                                                                                       \
        memcpy(&x, b, sizeof x);                                                                   \
        *u = (uint64_t)x;                                                                          \
        *v = (int64_t)x;                                                                           \
        return true;                                                                               \
    } while (0)
    case FERRY_I8:
        S(int8_t);
    case FERRY_I16:
        S(int16_t);
    case FERRY_I32:
        S(int32_t);
    case FERRY_I64:
        S(int64_t);
    case FERRY_U8:
    case FERRY_BOOL:
        U(uint8_t);
    case FERRY_U16:
        U(uint16_t);
    case FERRY_U32:
        U(uint32_t);
    case FERRY_U64:
        U(uint64_t);
    default:
        return false;
    }
#undef S
#undef U
}

static bool is_int(ferry_dtype dt)
{
    int64_t v;
    uint64_t u;
    bool neg;
    uint64_t zero = 0;
    return int_at(dt, &zero, 0, &v, &u, &neg);
}

/* The index of the field of token ids: `name`, or the only integer field. */
static int token_field(ferry_dataset *ds, ferry_stream *st, const char *name, const char *source)
{
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st), f = -1, nint = 0;
    for (int k = 0; k < nf; k++) {
        const ferry_field *fk = ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k);
        if (name ? !strcmp(fk->name, name) : is_int(fk->dtype)) {
            f = k;
            nint++;
        }
    }
    if (f < 0 && name)
        return ferry__err(FERRY_EINVAL, "tokens: the source has no field \"%s\"", name);
    if (f < 0 || nint > 1)
        return ferry__err(FERRY_EINVAL, "tokens: %s: name the field of token ids (--field, field=)",
                          source);
    const ferry_field *ff = ds ? ferry_dataset_field(ds, f) : ferry_stream_field(st, f);
    if (!is_int(ff->dtype))
        return ferry__err(FERRY_EINVAL, "tokens: field \"%s\" is %s, not integers", ff->name,
                          ferry_dtype_name(ff->dtype));
    return f;
}

int ferry_pack_tokens(ferry_dataset *ds, ferry_stream *st, const char *field, ferry_dtype dtype,
                      const char *path, uint64_t *written)
{
    *written = 0;
    if (!ds == !st)
        return ferry__err(FERRY_EINVAL, "tokens: give a dataset or a stream");
    if (dtype == FERRY_DTYPE_INVALID)
        dtype = FERRY_U16;
    if (dtype != FERRY_U16 && dtype != FERRY_U32)
        return ferry__err(FERRY_EINVAL, "tokens: dtype %s is not uint16 or uint32",
                          ferry_dtype_name(dtype));
    const char *source = ds ? ds->source : st->source;
    int f = token_field(ds, st, field, source);
    if (f < 0)
        return f;
    int nf = ds ? ferry_dataset_nfields(ds) : ferry_stream_nfields(st);
    const ferry_field *fields[FERRY_MAX_FIELDS];
    void *data[FERRY_MAX_FIELDS];
    int64_t len[FERRY_MAX_FIELDS];
    size_t total = 0;
    for (int k = 0; k < nf; k++) {
        fields[k] = ds ? ferry_dataset_field(ds, k) : ferry_stream_field(st, k);
        total += ferry_field_nbytes(fields[k]);
    }
    ferry_stream_iter *it = NULL;
    ferry_ctx *ctx = NULL;
    ferry_tokens_writer *w = NULL;
    uint8_t *buf = ferry__malloc(total ? total : 1);
    uint32_t *chunk = ferry__malloc(CHUNK * sizeof *chunk);
    int rc = 0;
    if (!buf || !chunk || ferry_ctx_create(&ctx, 0, 0) < 0)
        FERRY_FAIL(FERRY_ENOMEM, "tokens: out of memory");
    for (int k = 0, off = 0; k < nf; k++) {
        data[k] = buf + off;
        off += (int)ferry_field_nbytes(fields[k]);
    }
    ferry_sample s = {nf, data, len, {0}};
    if (st)
        FERRY_TRY(ferry_stream_open(st, 0, 1, 0, &it));
    FERRY_TRY(ferry_tokens_writer_open(&w, path, dtype));
    uint64_t limit = dtype == FERRY_U16 ? UINT16_MAX : UINT32_MAX;
    uint64_t count = ds ? ferry_dataset_len(ds) : UINT64_MAX;
    size_t held = 0, row = ferry_field_row_elems(fields[f]), whole = 1;
    for (int d = 0; d < fields[f]->ndim; d++)
        whole *= (size_t)fields[f]->shape[d];
    for (uint64_t i = 0; i < count; i++) {
        memset(len, 0, sizeof len);
        rc = ds ? ferry_dataset_get(ds, i, &s, ctx) : ferry_stream_next(it, &s, ctx);
        if (rc == FERRY_END) {
            rc = 0;
            break;
        }
        if (rc == FERRY_BREAK) {
            i--;
            continue;
        }
        if (rc < 0)
            goto cleanup;
        size_t n = fields[f]->variable ? (size_t)len[f] * row : whole;
        for (size_t k = 0; k < n; k++) {
            int64_t v;
            uint64_t u;
            bool neg;
            int_at(fields[f]->dtype, data[f], k, &v, &u, &neg);
            if (neg || u > limit)
                FERRY_FAIL(FERRY_EOVERFLOW,
                           "tokens: sample %llu, element %zu: %lld does not fit %s%s (%s is left "
                           "as it was)",
                           (unsigned long long)i, k, (long long)v, ferry_dtype_name(dtype),
                           dtype == FERRY_U16 && !neg ? "; try --dtype u32 (dtype=\"u32\")" : "",
                           path);
            if (dtype == FERRY_U16)
                ((uint16_t *)chunk)[held++] = (uint16_t)u;
            else
                chunk[held++] = (uint32_t)u;
            if (held == CHUNK) {
                FERRY_TRY(ferry_tokens_writer_append(w, chunk, held));
                *written += held;
                held = 0;
            }
        }
    }
    if (held)
        FERRY_TRY(ferry_tokens_writer_append(w, chunk, held));
    *written += held;
    rc = ferry_tokens_writer_commit(w);
    w = NULL;
cleanup:
    if (rc < 0)
        *written = 0;
    ferry_tokens_writer_abort(w);
    ferry_stream_close(it);
    ferry_ctx_free(ctx);
    ferry__free(chunk);
    ferry__free(buf);
    return rc;
}
