/*
 * Fuzz target: the tf.train.Example (and SequenceExample) parser on arbitrary
 * protobuf bytes. Every feature (and feature list step) it reports is counted
 * and read back every way (floats, int64s, bytes); the counts must agree and
 * every value must lie inside the input.
 */
#include <ferry/ferry.h>
#include "formats/example.h"

#include <stdlib.h>
#include <string.h>

typedef struct bounds {
    const uint8_t *p;
    size_t n;
} bounds;

static void inside(const bounds *b, const uint8_t *q, size_t n)
{
    if (q < b->p || q > b->p + b->n || n > (size_t)(b->p + b->n - q))
        abort();
}

static int on_feature(void *arg, const ferry__feature *f)
{
    const bounds *b = arg;
    if (f->key_len) /* an entry without a key has the key "" */
        inside(b, f->key, f->key_len);
    if (f->seq) {
        /* a feature list: every step as a feature of its own */
        if (f->list_len)
            inside(b, f->list, f->list_len);
        size_t pos = 0;
        ferry__feature step;
        while (ferry__feature_step(f, &pos, &step) == 1) {
            if (pos > f->list_len || step.seq)
                abort();
            on_feature(arg, &step);
        }
        return 0;
    }
    if (f->kind == FERRY__FEAT_NONE)
        return 0;
    inside(b, f->list, f->list_len);
    uint64_t count, max_len;
    int rc = ferry__feature_count(f, &count, &max_len);
    if (rc < 0)
        return 0;
    if (count > f->list_len)
        abort(); /* every value takes at least one byte */
    if (f->kind == FERRY__FEAT_BYTES) {
        size_t pos = 0, len;
        const uint8_t *v;
        uint64_t k = 0;
        while ((rc = ferry__feature_bytes_next(f, &pos, &v, &len)) == 1) {
            inside(b, v, len);
            if (len > max_len)
                abort();
            k++;
        }
        if (rc != 0 || k != count)
            abort();
        return 0;
    }
    uint64_t cap = count < 64 ? count : 64, got;
    void *dst = malloc(cap * 8 + 8);
    if (!dst)
        return 0;
    rc = f->kind == FERRY__FEAT_FLOAT ? ferry__feature_floats(f, dst, cap, &got)
                                      : ferry__feature_int64s(f, dst, cap, &got);
    if (rc != 0 || got != count)
        abort();
    free(dst);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bounds b = {data, size};
    ferry__example_walk(data, size, on_feature, &b);
    return 0;
}
