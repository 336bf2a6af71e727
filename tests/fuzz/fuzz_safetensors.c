/*
 * Fuzz target: a safetensors file from arbitrary bytes (ferry_tensors_open_memory).
 * It must never read outside the buffer (ASan) and, when it accepts a file, what
 * it hands out must hold together: every tensor inside the buffer, byte counts that
 * agree with dtype and shape, the tensors back to back up to the end, names that
 * find themselves, and the same bytes through a copy and a renamed selection.
 */
#include <ferry/tensors.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly `size` bytes, so that ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry_tensors *t;
    ferry_tensors_opts o = {.threads = 1};
    if (ferry_tensors_open_memory(&t, buf, size, "fuzz", &o) != 0) {
        free(buf);
        return 0;
    }
    size_t n = ferry_tensors_count(t);
    if (n != ferry_tensors_file_count(t))
        abort();
    uint64_t at = 0, start = 0;
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_info *ti = ferry_tensors_at(t, i);
        if (i == 0)
            start = ti->offset;
        if (ti->offset != start + at || ti->offset > size || ti->nbytes > size - ti->offset)
            abort();
        if (ti->nbytes && (const uint8_t *)ti->data != buf + ti->offset)
            abort();
        uint64_t numel = 1;
        for (int d = 0; d < ti->ndim; d++)
            numel *= (uint64_t)ti->shape[d];
        if (numel != ti->numel || ti->ndim > FERRY_TENSORS_MAX_DIMS)
            abort();
        if ((__uint128_t)numel * ferry_st_dtype_bits(ti->dtype) != (__uint128_t)ti->nbytes * 8)
            abort();
        if (ferry_tensors_find(t, ti->name) != ti)
            abort();
        if (ti->has_crc && ferry_tensors_verify(t, i) != 0)
            abort();
        at += ti->nbytes;
    }
    if (n && start + at != size)
        abort();
    for (size_t i = 0; i < ferry_tensors_metadata_count(t); i++) {
        const char *k, *v = ferry_tensors_metadata_at(t, i, &k);
        if (!v || !k || ferry_tensors_metadata_get(t, k) != v)
            abort();
    }
    /* a copy, renamed: the same bytes under the new names */
    ferry_tensors *c;
    ferry_tensors_opts co = {.flags = FERRY_TENSORS_COPY, .add_prefix = "x/", .threads = 1};
    if (ferry_tensors_open_memory(&c, buf, size, "fuzz", &co) != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_info *a = ferry_tensors_at(t, i), *b = ferry_tensors_at(c, i);
        if (strncmp(b->name, "x/", 2) || strcmp(b->name + 2, a->name) || b->nbytes != a->nbytes ||
            (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
            abort();
    }
    ferry_tensors_free(c);
    ferry_tensors_free(t);
    free(buf);
    return 0;
}
