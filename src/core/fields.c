/*
 * Schema checks, shared by the formats that read a schema from a file and the
 * datasets that declare one.
 */
#include "internal.h"
#include "ferry/dataset.h"

#include <string.h>

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
