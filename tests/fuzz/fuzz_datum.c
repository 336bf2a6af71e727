/*
 * Fuzz target: ferry_datum_decode on arbitrary bytes. It must never read outside
 * the buffer (ASan) and, when it accepts a record, what it returns must hold
 * together: data and floats inside the buffer, sizes that agree with the
 * dimensions, floats readable both ways, and a re-encoded record that decodes to
 * the same Datum.
 */
#include <ferry/lmdb.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t size)
{
    return p >= buf && p <= buf + size && n <= (size_t)(buf + size - p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly `size` bytes, so that ASan sees any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry_datum d;
    if (ferry_datum_decode(buf, size, &d) != 0) {
        free(buf);
        return 0;
    }
    if (d.channels < 0 || d.height < 0 || d.width < 0)
        abort();
    uint64_t chw; /* the decoder caps it at 2^31 */
    if (__builtin_mul_overflow((uint64_t)d.channels, (uint64_t)d.height, &chw) ||
        __builtin_mul_overflow(chw, (uint64_t)d.width, &chw) || chw > ((uint64_t)1 << 31))
        abort();
    if (d.data_size && (!d.data || !inside(d.data, d.data_size, buf, size)))
        abort();
    if (d.float_count > size / 4)
        abort();
    if (d.float_bytes && !inside(d.float_bytes, 4 * d.float_count, buf, size))
        abort();
    if (!d.encoded && d.data_size != chw && !(d.data_size == 0 && d.float_count == chw))
        abort();
    float *f = malloc(d.float_count * sizeof *f + 1);
    if (!f) {
        free(buf);
        return 0;
    }
    if (ferry_datum_floats(&d, f, d.float_count) != d.float_count)
        abort();
    if (d.float_bytes && memcmp(f, d.float_bytes, 4 * d.float_count) != 0) {
        /* a big-endian host converts; compare element by element instead */
        for (size_t i = 0; i < d.float_count; i++) {
            const uint8_t *b = d.float_bytes + 4 * i;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24,
                     v;
            memcpy(&v, &f[i], 4);
            if (u != v)
                abort();
        }
    }
    /* re-encode: what decoded must encode, and decode to the same thing */
    size_t need = 0;
    if (ferry_datum_encode(&d, NULL, 0, &need) != FERRY_EOVERFLOW)
        abort();
    uint8_t *out = malloc(need ? need : 1);
    size_t got = 0;
    ferry_datum e;
    if (!out || ferry_datum_encode(&d, out, need, &got) != 0 || got != need ||
        ferry_datum_decode(out, got, &e) != 0)
        abort();
    if (e.channels != d.channels || e.height != d.height || e.width != d.width ||
        e.label != d.label || e.encoded != d.encoded || e.data_size != d.data_size ||
        e.float_count != d.float_count || (d.data_size && memcmp(e.data, d.data, d.data_size)))
        abort();
    float *g = malloc(e.float_count * sizeof *g + 1);
    if (!g || ferry_datum_floats(&e, g, e.float_count) != e.float_count ||
        memcmp(f, g, e.float_count * sizeof *g) != 0)
        abort();
    free(g);
    free(out);
    free(f);
    free(buf);
    return 0;
}
