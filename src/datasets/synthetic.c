/*
 * Synthetic samples: deterministic bytes from Philox, a label, optional
 * variable-length text, a tunable CPU cost, and injected failures. For tests and
 * for measuring the loader itself.
 */
#include "spec.h"

#include <string.h>
#include <time.h>

#define SYN_MAX_BYTES ((uint64_t)1 << 30)
#define SYN_MAX_VAR ((uint64_t)1 << 24)
#define SYN_MAX_POOL ((uint64_t)1 << 24)
#define SYN_MAX_POOL_BYTES ((uint64_t)1 << 30)

typedef struct {
    ferry_synthetic_opts o;
    uint8_t *pool; /* o.pool precomputed samples' data, or NULL */
} synthetic;

static uint64_t syn_len(void *self)
{
    return ((synthetic *)self)->o.count;
}

static void fill_random(uint8_t *dst, size_t n, ferry_rng *r)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t w = ferry_rng_u32(r);
        memcpy(dst + i, &w, 4);
    }
    if (i < n) {
        uint32_t w = ferry_rng_u32(r);
        memcpy(dst + i, &w, n - i);
    }
}

static int syn_get(void *self, uint64_t index, ferry_sample *out, ferry_ctx *ctx)
{
    (void)ctx;
    const ferry_synthetic_opts *o = &((synthetic *)self)->o;
    if (o->sleep_us) {
        struct timespec ts = {(time_t)(o->sleep_us / 1000000),
                              (long)(o->sleep_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    if (o->fail_every && index % o->fail_every == o->fail_every - 1)
        return ferry_error(FERRY_ECORRUPT,
                           "synthetic: sample %llu: injected failure (fail_every=%llu)",
                           (unsigned long long)index, (unsigned long long)o->fail_every);
    const synthetic *syn = self;
    ferry_rng r;
    uint8_t *data = out->data[0];
    if (syn->pool) {
        ferry_rng_init(&r, o->seed, 0, index % o->pool);
        memcpy(data, syn->pool + (size_t)(index % o->pool) * o->bytes, (size_t)o->bytes);
    } else {
        ferry_rng_init(&r, o->seed, 0, index);
        fill_random(data, (size_t)o->bytes, &r);
    }
    if (o->cost) {
        uint32_t acc[4] = {0, 0, 0, 0}, ctr[4] = {0, 1, (uint32_t)index, (uint32_t)(index >> 32)};
        for (uint64_t i = 0; i < o->cost; i++) {
            uint32_t b[4];
            ctr[0] = (uint32_t)i ^ acc[0];
            ferry_philox4x32_10(ctr, r.key, b);
            acc[0] ^= b[0];
            acc[1] += b[1];
        }
        size_t n = o->bytes < 8 ? (size_t)o->bytes : 8;
        for (size_t i = 0; i < n; i++)
            data[i] ^= (uint8_t)(acc[i / 4] >> (8 * (i % 4)));
    }
    int64_t label = (int64_t)(index % (o->classes ? o->classes : 1000));
    memcpy(out->data[1], &label, sizeof label);
    if (o->var_max) {
        uint64_t len = ferry_hash64(index, o->seed) % (o->var_max + 1);
        uint8_t *text = out->data[2];
        for (uint64_t i = 0; i < len; i++)
            text[i] = (uint8_t)('a' + (index + i) % 26);
        out->length[2] = (int64_t)len;
    }
    return 0;
}

static void syn_destroy(void *self)
{
    synthetic *s = self;
    ferry__free(s->pool);
    ferry__free(s);
}

static const ferry_dataset_vtable syn_vtable = {
    .len = syn_len, .get = syn_get, .destroy = syn_destroy};

int ferry_dataset_synthetic(ferry_dataset **out, const ferry_synthetic_opts *o)
{
    *out = NULL;
    if (o->bytes > SYN_MAX_BYTES)
        return ferry__err(FERRY_EINVAL, "synthetic: bytes=%llu is outside [0, 2^30]",
                          (unsigned long long)o->bytes);
    if (o->var_max > SYN_MAX_VAR)
        return ferry__err(FERRY_EINVAL, "synthetic: var=%llu is outside [0, 2^24]",
                          (unsigned long long)o->var_max);
    if (o->sleep_us > 60000000)
        return ferry__err(FERRY_EINVAL, "synthetic: sleep_us=%llu is outside [0, 60000000]",
                          (unsigned long long)o->sleep_us);
    if (o->pool > SYN_MAX_POOL || o->pool * o->bytes > SYN_MAX_POOL_BYTES)
        return ferry__err(FERRY_EINVAL,
                          "synthetic: pool=%llu of %llu-byte samples is over 2^24 samples or 1 GiB",
                          (unsigned long long)o->pool, (unsigned long long)o->bytes);
    synthetic *s = ferry__calloc(1, sizeof *s);
    if (!s)
        return ferry__err(FERRY_ENOMEM, "synthetic: out of memory");
    s->o = *o;
    if (o->pool) {
        s->pool = ferry__malloc((size_t)(o->pool * o->bytes));
        if (!s->pool) {
            ferry__free(s);
            return ferry__err(FERRY_ENOMEM, "synthetic: cannot allocate a pool of %llu samples",
                              (unsigned long long)o->pool);
        }
        for (uint64_t i = 0; i < o->pool; i++) {
            ferry_rng r;
            ferry_rng_init(&r, o->seed, 0, i);
            fill_random(s->pool + i * o->bytes, (size_t)o->bytes, &r);
        }
    }
    ferry_field f[3];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "data");
    f[0].dtype = FERRY_U8;
    f[0].ndim = 1;
    f[0].shape[0] = (int64_t)o->bytes;
    strcpy(f[1].name, "label");
    f[1].dtype = FERRY_I64;
    strcpy(f[2].name, "text");
    f[2].dtype = FERRY_U8;
    f[2].ndim = 1;
    f[2].shape[0] = (int64_t)o->var_max;
    f[2].variable = 1;
    return ferry_dataset_create(out, &syn_vtable, s, f, o->var_max ? 3 : 2);
}

int ferry__synthetic_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_synthetic_opts o = {.bytes = 16};
    if (!ferry__parse_u64(s->location, &o.count))
        return ferry__err(FERRY_EINVAL, "source synthetic: COUNT \"%.64s\" is not a number",
                          s->location);
    int rc;
    if ((rc = ferry__spec_u64(s, "bytes", 0, (uint64_t)1 << 30, &o.bytes)) < 0 ||
        (rc = ferry__spec_u64(s, "cost", 0, (uint64_t)1 << 32, &o.cost)) < 0 ||
        (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &o.seed)) < 0 ||
        (rc = ferry__spec_u64(s, "classes", 1, UINT64_MAX, &o.classes)) < 0 ||
        (rc = ferry__spec_u64(s, "var", 0, (uint64_t)1 << 24, &o.var_max)) < 0 ||
        (rc = ferry__spec_u64(s, "fail_every", 0, UINT64_MAX, &o.fail_every)) < 0 ||
        (rc = ferry__spec_u64(s, "sleep_us", 0, 60000000, &o.sleep_us)) < 0 ||
        (rc = ferry__spec_u64(s, "pool", 0, (uint64_t)1 << 24, &o.pool)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    return ferry_dataset_synthetic(out, &o);
}
