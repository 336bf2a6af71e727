/*
 * Fuzz target: ferry_tensorprotos_decode on arbitrary bytes. It must never read
 * outside the buffer (ASan) and, when it accepts a message, what it returns must
 * hold together: counts that agree with the dims, bytes inside the buffer, every
 * value and string readable.
 */
#include <ferry/caffe2.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int inside(const void *q, size_t n, const uint8_t *buf, size_t size)
{
    const uint8_t *p = q;
    return p >= buf && p <= buf + size && n <= (size_t)(buf + size - p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry_tensor_proto t[8];
    size_t n = 0;
    if (ferry_tensorprotos_decode(buf, size, t, 8, &n) != 0) {
        free(buf);
        return 0;
    }
    if (n > size)
        abort();
    for (size_t k = 0; k < n && k < 8; k++) {
        if (t[k].ndim < 0 || t[k].ndim > FERRY_MAX_DIMS || t[k].count > size)
            abort();
        if (t[k].ndim > 0) {
            uint64_t prod = 1;
            for (int d = 0; d < t[k].ndim; d++)
                if (t[k].dims[d] < 0 || __builtin_mul_overflow(prod, (uint64_t)t[k].dims[d], &prod))
                    abort();
            if (prod != t[k].count)
                abort();
        }
        if (t[k].name && !inside(t[k].name, t[k].name_len, buf, size))
            abort();
        if (t[k].bytes && !inside(t[k].bytes, t[k].nbytes, buf, size))
            abort();
        if (t[k].data_type == FERRY_C2_STRING) {
            for (uint64_t i = 0; i < t[k].count; i++) {
                const uint8_t *s;
                size_t len;
                if (ferry_tensor_proto_string(&t[k], i, &s, &len) != 0 ||
                    !inside(s, len, buf, size))
                    abort();
            }
            continue;
        }
        ferry_dtype dt = ferry_tensor_proto_dtype(&t[k]);
        if (dt == FERRY_DTYPE_INVALID)
            continue;
        uint8_t *out = malloc(t[k].count * 8 + 1);
        if (!out)
            break;
        if (ferry_tensor_proto_values(&t[k], dt, out, t[k].count) != t[k].count)
            abort();
        if (dt != FERRY_F16 &&
            ferry_tensor_proto_values(&t[k], FERRY_F64, out, t[k].count) != t[k].count)
            abort();
        free(out);
    }
    free(buf);
    return 0;
}
