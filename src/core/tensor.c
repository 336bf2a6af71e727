/*
 * dtypes and tensors.
 */
#include "internal.h"

#include <string.h>

static const struct {
    const char *name;
    const char *short_name;
    size_t size;
} dtypes[FERRY_DTYPE_COUNT] = {
    [FERRY_DTYPE_INVALID] = {"invalid", "invalid", 0},
    [FERRY_U8] = {"uint8", "u8", 1},
    [FERRY_I8] = {"int8", "i8", 1},
    [FERRY_U16] = {"uint16", "u16", 2},
    [FERRY_I16] = {"int16", "i16", 2},
    [FERRY_U32] = {"uint32", "u32", 4},
    [FERRY_I32] = {"int32", "i32", 4},
    [FERRY_U64] = {"uint64", "u64", 8},
    [FERRY_I64] = {"int64", "i64", 8},
    [FERRY_F16] = {"float16", "f16", 2},
    [FERRY_BF16] = {"bfloat16", "bf16", 2},
    [FERRY_F32] = {"float32", "f32", 4},
    [FERRY_F64] = {"float64", "f64", 8},
    [FERRY_BOOL] = {"bool", "bool", 1},
};

size_t ferry_dtype_size(ferry_dtype dt)
{
    if ((int)dt <= 0 || dt >= FERRY_DTYPE_COUNT)
        return 0;
    return dtypes[dt].size;
}

const char *ferry_dtype_name(ferry_dtype dt)
{
    if ((int)dt <= 0 || dt >= FERRY_DTYPE_COUNT)
        return "invalid";
    return dtypes[dt].name;
}

ferry_dtype ferry_dtype_from_name(const char *name)
{
    if (!name)
        return FERRY_DTYPE_INVALID;
    for (int i = 1; i < FERRY_DTYPE_COUNT; i++)
        if (!strcmp(name, dtypes[i].name) || !strcmp(name, dtypes[i].short_name))
            return (ferry_dtype)i;
    return FERRY_DTYPE_INVALID;
}

/* Checks dtype and shape and computes the contiguous byte size. Strides and
 * element counts are int64_t, so the product of the non-zero dimensions times the
 * element size must fit in int64_t (as NumPy requires), whatever size_t allows. */
static int check_shape(ferry_dtype dt, int ndim, const int64_t *shape, size_t *nbytes)
{
    size_t item = ferry_dtype_size(dt);
    if (item == 0)
        return ferry__err(FERRY_EINVAL, "tensor: invalid dtype %d", (int)dt);
    if (ndim < 0 || ndim > FERRY_MAX_DIMS)
        return ferry__err(FERRY_EINVAL, "tensor: ndim %d is outside [0, %d]", ndim, FERRY_MAX_DIMS);
    if (ndim > 0 && !shape)
        return ferry__err(FERRY_EINVAL, "tensor: shape is NULL");
    int64_t n = (int64_t)item;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ferry__err(FERRY_EINVAL, "tensor: shape[%d] = %lld is negative", i,
                              (long long)shape[i]);
        if (shape[i] == 0) {
            empty = true;
            continue;
        }
        if (__builtin_mul_overflow(n, shape[i], &n))
            return ferry__err(FERRY_EOVERFLOW, "tensor: the shape's byte size overflows int64");
    }
    if ((uint64_t)n > SIZE_MAX)
        return ferry__err(FERRY_EOVERFLOW, "tensor: the shape's byte size overflows size_t");
    *nbytes = empty ? 0 : (size_t)n;
    return 0;
}

static void set_contiguous_strides(ferry_tensor *t)
{
    int64_t s = (int64_t)ferry_dtype_size(t->dtype);
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        s *= t->shape[i] ? t->shape[i] : 1;
    }
}

static void release_aligned(void *owner)
{
    ferry__aligned_free(owner);
}

int ferry_tensor_alloc(ferry_tensor *t, ferry_dtype dt, int ndim, const int64_t *shape)
{
    size_t nbytes;
    int rc = check_shape(dt, ndim, shape, &nbytes);
    if (rc < 0)
        return rc;
    void *p = ferry__aligned_alloc(nbytes);
    if (!p)
        return ferry__err(FERRY_ENOMEM, "tensor: cannot allocate %zu bytes", nbytes);
    memset(p, 0, nbytes);
    memset(t, 0, sizeof *t);
    t->data = p;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    set_contiguous_strides(t);
    t->owner = p;
    t->release = release_aligned;
    return 0;
}

int ferry_tensor_wrap(ferry_tensor *t, void *data, ferry_dtype dt, int ndim, const int64_t *shape,
                      const int64_t *strides)
{
    size_t nbytes;
    int rc = check_shape(dt, ndim, shape, &nbytes);
    if (rc < 0)
        return rc;
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    if (strides)
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else
        set_contiguous_strides(t);
    return 0;
}

void ferry_tensor_release(ferry_tensor *t)
{
    if (!t)
        return;
    if (t->release)
        t->release(t->owner);
    memset(t, 0, sizeof *t);
}

int64_t ferry_tensor_numel(const ferry_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t ferry_tensor_nbytes(const ferry_tensor *t)
{
    return (size_t)ferry_tensor_numel(t) * ferry_dtype_size(t->dtype);
}

int ferry_tensor_is_contiguous(const ferry_tensor *t)
{
    if (ferry_tensor_numel(t) == 0)
        return 1; /* no elements: any strides describe them (NumPy agrees) */
    int64_t s = (int64_t)ferry_dtype_size(t->dtype);
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s)
            return 0;
        s *= t->shape[i];
    }
    return 1;
}
