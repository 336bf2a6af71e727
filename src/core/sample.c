/*
 * The sample vocabulary (ferry/sample.h): field sizes and schema checks, shared by
 * the formats that read a schema from a file and the datasets that declare one;
 * and the worker context: who calls, scratch memory that grows and is kept, and
 * the time a reader claims per stage.
 */
#include "ctx.h"

#include <stdio.h>
#include <string.h>

size_t ferry_field_row_elems(const ferry_field *f)
{
    size_t n = 1;
    for (int i = 1; i < f->ndim; i++)
        n *= (size_t)f->shape[i];
    return n;
}

size_t ferry_field_nbytes(const ferry_field *f)
{
    size_t n = ferry_dtype_size(f->dtype);
    for (int i = 0; i < f->ndim; i++)
        n *= (size_t)f->shape[i];
    return n;
}

const char *ferry__escape(char *out, size_t cap, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 <= cap; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"' && b[i] != '\\')
            out[o++] = (char)b[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", b[i]);
    }
    out[o] = 0;
    return out;
}

/* Limits on one sample's field, so that a schema read from a file cannot ask for
 * absurd batch buffers. */
#define FIELD_MAX_BYTES ((size_t)1 << 34)

int ferry__check_fields(const ferry_field *fields, int nfields)
{
    if (nfields < 1 || nfields > FERRY_MAX_FIELDS)
        return ferry__err(FERRY_EINVAL, "schema: %d fields is outside [1, %d]", nfields,
                          FERRY_MAX_FIELDS);
    if (!fields)
        return ferry__err(FERRY_EINVAL, "schema: fields is NULL");
    for (int i = 0; i < nfields; i++) {
        const ferry_field *f = &fields[i];
        size_t namelen = strnlen(f->name, FERRY_MAX_NAME);
        if (namelen == 0 || namelen == FERRY_MAX_NAME)
            return ferry__err(FERRY_EINVAL, "schema: field %d: name must be 1..%d bytes", i,
                              FERRY_MAX_NAME - 1);
        if (!ferry__utf8_valid(f->name, namelen)) {
            char esc[4 * FERRY_MAX_NAME + 1];
            return ferry__err(FERRY_EINVAL, "schema: field name \"%s\" is not UTF-8",
                              ferry__escape(esc, sizeof esc, f->name, namelen));
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(fields[j].name, f->name))
                return ferry__err(FERRY_EINVAL, "schema: field name \"%s\" appears twice", f->name);
        if (ferry_dtype_size(f->dtype) == 0)
            return ferry__err(FERRY_EINVAL, "schema: field \"%s\": invalid dtype %d", f->name,
                              (int)f->dtype);
        if (f->ndim < 0 || f->ndim > FERRY_MAX_DIMS - 1)
            return ferry__err(FERRY_EINVAL, "schema: field \"%s\": ndim %d is outside [0, %d]",
                              f->name, f->ndim, FERRY_MAX_DIMS - 1);
        if (f->variable && f->ndim < 1)
            return ferry__err(FERRY_EINVAL,
                              "schema: field \"%s\": a variable field needs ndim >= 1", f->name);
        size_t n = ferry_dtype_size(f->dtype);
        for (int d = 0; d < f->ndim; d++) {
            if (f->shape[d] < 0 || (uint64_t)f->shape[d] > FIELD_MAX_BYTES ||
                !ferry__mul_size(n, (size_t)f->shape[d], &n) || n > FIELD_MAX_BYTES)
                return ferry__err(FERRY_EINVAL,
                                  "schema: field \"%s\": shape[%d] = %lld makes a sample larger "
                                  "than 2^34 bytes or is negative",
                                  f->name, d, (long long)f->shape[d]);
        }
    }
    return 0;
}

void ferry__ctx_init(ferry_ctx *c, uint32_t worker, uint64_t seed, uint64_t epoch)
{
    memset(c, 0, sizeof *c);
    c->worker = worker;
    c->seed = seed;
    c->epoch = epoch;
}

void ferry__ctx_release(ferry_ctx *c)
{
    for (int i = 0; i < FERRY__CTX_SLOTS; i++) {
        ferry__aligned_free(c->scratch[i]);
        c->scratch[i] = NULL;
        c->scratch_cap[i] = 0;
    }
}

uint32_t ferry_ctx_worker(const ferry_ctx *c)
{
    return c->worker;
}

uint64_t ferry_ctx_seed(const ferry_ctx *c)
{
    return c->seed;
}

uint64_t ferry_ctx_epoch(const ferry_ctx *c)
{
    return c->epoch;
}

void ferry_ctx_rng(const ferry_ctx *c, uint64_t index, ferry_rng *out)
{
    ferry_rng_init(out, c->seed, c->epoch, index);
}

void *ferry__ctx_scratch(ferry_ctx *c, int slot, size_t n)
{
    if (n <= c->scratch_cap[slot])
        return c->scratch[slot];
    size_t cap = c->scratch_cap[slot] ? c->scratch_cap[slot] : 4096;
    while (cap < n) {
        if (!ferry__mul_size(cap, 2, &cap)) {
            ferry__err(FERRY_ENOMEM, "scratch: %zu bytes is too large", n);
            return NULL;
        }
    }
    void *p = ferry__aligned_alloc(cap);
    if (!p) {
        ferry__err(FERRY_ENOMEM, "scratch: cannot allocate %zu bytes", cap);
        return NULL;
    }
    ferry__aligned_free(c->scratch[slot]);
    c->scratch[slot] = p;
    c->scratch_cap[slot] = cap;
    return p;
}

void *ferry_ctx_scratch(ferry_ctx *c, size_t n)
{
    return ferry__ctx_scratch(c, 0, n);
}

void ferry_ctx_stage_add(ferry_ctx *c, ferry_stage stage, uint64_t ns)
{
    if ((unsigned)stage < FERRY_STAGE_COUNT)
        c->stage_ns[stage] += ns;
}

void ferry_ctx_count_truncated(ferry_ctx *c, uint64_t n)
{
    c->truncated += n;
}

uint64_t ferry_ctx_truncated(const ferry_ctx *c)
{
    return c->truncated;
}

int ferry_ctx_create(ferry_ctx **out, uint64_t seed, uint64_t epoch)
{
    *out = ferry__calloc(1, sizeof **out);
    if (!*out)
        return ferry__err(FERRY_ENOMEM, "context: out of memory");
    ferry__ctx_init(*out, 0, seed, epoch);
    return 0;
}

void ferry_ctx_free(ferry_ctx *c)
{
    if (!c)
        return;
    ferry__ctx_release(c);
    ferry__free(c);
}
