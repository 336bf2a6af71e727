/*
 * The loader's options: their defaults and bounds, the default prefetch, the
 * memory budget, and the device options.
 */
#include "loader_internal.h"
#include "../io/remote.h"

#include <unistd.h>
#include <stdio.h>
#include <string.h>

#define MAX_BATCH ((uint32_t)1 << 24)
#define MAX_WORKERS 1024u
#define MAX_PREFETCH 65536u
#define MAX_SHARDS 65536u
/* device: batches in device memory at once, by default: the one the consumer
 * works on, the one before it (a Python loop holds it until the next arrives),
 * one copied ahead, and one spare */
#define DEVICE_BUFFERS 4u
#define MAX_DEVICE_BUFFERS 65536u
#define DEFAULT_BUDGET_DIVISOR 4 /* memory_budget 0: a quarter of physical memory */

void ferry_loader_opts_default(ferry_loader_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 1;
    o->rank = -1;
    o->world_size = -1;
    o->skip_budget = FERRY_SKIP_BUDGET_DEFAULT;
}

/* Checks the options' bounds; stream_shards 0 becomes 1. */
int ferry__loader_check_opts(ferry_loader_opts *o)
{
    if (o->batch_size < 1 || o->batch_size > MAX_BATCH)
        return ferry__err(FERRY_EINVAL, "loader: batch_size %u is outside [1, %u]", o->batch_size,
                          MAX_BATCH);
    if (o->num_workers > MAX_WORKERS)
        return ferry__err(FERRY_EINVAL, "loader: num_workers %u is outside [0, %u]", o->num_workers,
                          MAX_WORKERS);
    if (o->prefetch > MAX_PREFETCH)
        return ferry__err(FERRY_EINVAL, "loader: prefetch %u is outside [1, %u] (0 = default)",
                          o->prefetch, MAX_PREFETCH);
    if (o->timeout_ms < 0)
        return ferry__err(FERRY_EINVAL, "loader: timeout_ms %lld is negative (0 = no timeout)",
                          (long long)o->timeout_ms);
    if (o->order != FERRY_ORDER_SAMPLER && o->order != FERRY_ORDER_COMPLETION)
        return ferry__err(FERRY_EINVAL,
                          "loader: order %d is not FERRY_ORDER_SAMPLER (0) or "
                          "FERRY_ORDER_COMPLETION (1)",
                          o->order);
    if (o->on_error != FERRY_ON_ERROR_FAIL && o->on_error != FERRY_ON_ERROR_SKIP)
        return ferry__err(FERRY_EINVAL,
                          "loader: on_error %d is not FERRY_ON_ERROR_FAIL (0) or "
                          "FERRY_ON_ERROR_SKIP (1)",
                          o->on_error);
    if (o->stream_shards > MAX_SHARDS)
        return ferry__err(FERRY_EINVAL, "loader: stream_shards %u is outside [1, %u] (0 = 1)",
                          o->stream_shards, MAX_SHARDS);
    if (o->stream_shards == 0)
        o->stream_shards = 1;
    if (o->device_buffers > MAX_DEVICE_BUFFERS)
        return ferry__err(FERRY_EINVAL, "loader: device_buffers %u is outside [1, %u] (0 = %u)",
                          o->device_buffers, MAX_DEVICE_BUFFERS, DEVICE_BUFFERS);
    return 0;
}

/* The default depth: 2 buffers per worker (at least 2), and more when batches are
 * small, up to AUTO_PREFETCH_BYTES of buffers or AUTO_PREFETCH_MAX of them. Deep
 * pools of small batches let workers run on while the consumer wakes up. The bytes
 * stay within a last-level cache: the free buffers go round, and a pool larger
 * than the cache makes every write to a batch a miss (a read of the line from
 * memory before it is written), which halves the rate of a copy from the page
 * cache. */
#define AUTO_PREFETCH_BYTES ((size_t)8 << 20)
#define AUTO_PREFETCH_MAX 64u
static uint32_t auto_prefetch(const ferry_loader *l)
{
    uint32_t n = l->o.num_workers > 1 ? 2 * l->o.num_workers : 2;
    size_t batch = 1;
    for (int f = 0; f < l->nfields; f++)
        batch += l->field_stride[f] * l->o.batch_size;
    size_t by_bytes = AUTO_PREFETCH_BYTES / batch;
    if (by_bytes > n)
        n = by_bytes > AUTO_PREFETCH_MAX ? (n > AUTO_PREFETCH_MAX ? n : AUTO_PREFETCH_MAX)
                                         : (uint32_t)by_bytes;
    return n > MAX_PREFETCH ? MAX_PREFETCH : n;
}

static uint64_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (uint64_t)4 << 30;
    return (uint64_t)pages * (uint64_t)page / DEFAULT_BUDGET_DIVISOR;
}

/* "1.5 GiB" */
static const char *human(uint64_t n, char *buf, size_t cap)
{
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

/* The memory the settings ask for, against the budget, before anything is
 * allocated: the batch buffers (prefetch of them) and, per worker, scratch of up to
 * one sample (what a decoder such as a compressed shard's needs). With the default
 * prefetch, the pool is made as deep as the budget allows, down to one buffer. */
static int check_budget(ferry_loader *l)
{
    uint64_t budget = l->o.memory_budget ? l->o.memory_budget : default_budget();
    uint64_t B = l->o.batch_size, sample = 0, batch = 64 + 2 * B, big = 0;
    int widest = 0;
    for (int f = 0; f < l->nfields; f++) {
        uint64_t bytes = l->field_stride[f], field;
        if (__builtin_mul_overflow(bytes, B, &field))
            field = UINT64_MAX;
        if (field > big) {
            big = field;
            widest = f;
        }
        sample = sample + bytes < sample ? UINT64_MAX : sample + bytes;
        uint64_t extra = field + 64 + (l->fields[f].variable ? 16 * B : 0);
        batch = batch + extra < batch ? UINT64_MAX : batch + extra;
    }
    uint64_t workers = l->o.num_workers ? l->o.num_workers : 1, scratch, streams = 0;
    if (__builtin_mul_overflow(sample, workers, &scratch))
        scratch = UINT64_MAX;
    char b1[32], b2[32], b3[32];
    /* a stream's buffering decorators hold their buffers in each shard's iterator */
    if (l->st && __builtin_mul_overflow(l->st->iter_bytes, (uint64_t)l->o.stream_shards, &streams))
        streams = UINT64_MAX;
    if (streams > budget)
        return ferry__err(FERRY_EINVAL,
                          "loader: the stream's buffers (shuffle or group-batch) of %s each, "
                          "times stream_shards %u, need %s, over the memory budget of %s "
                          "(memory_budget; 0 = 1/%d of physical memory)",
                          human(l->st->iter_bytes, b1, sizeof b1), l->o.stream_shards,
                          human(streams, b2, sizeof b2), human(budget, b3, sizeof b3),
                          DEFAULT_BUDGET_DIVISOR);
    scratch = scratch + streams < scratch ? UINT64_MAX : scratch + streams;
    /* a remote source's transfers hold their receive buffers (the bodies go to the
     * cache's files) */
    uint64_t fetch = (l->ds ? l->ds->remote : l->st->remote) ? ferry__remote_buffer_bytes() : 0;
    if (fetch && fetch >= budget)
        return ferry__err(FERRY_EINVAL,
                          "loader: the fetch buffers of a remote source, %u connections "
                          "(FERRY_REMOTE_CONNECTIONS) of %s each, need %s, over the memory "
                          "budget of %s (memory_budget; 0 = 1/%d of physical memory)",
                          ferry__http_config()->connections,
                          human(FERRY__FETCH_BUFFER + FERRY__WRITE_BUFFER, b1, sizeof b1),
                          human(fetch, b2, sizeof b2), human(budget, b3, sizeof b3),
                          DEFAULT_BUDGET_DIVISOR);
    scratch = scratch + fetch < scratch ? UINT64_MAX : scratch + fetch;
    const ferry_field *f = &l->fields[widest];
    if (fetch && batch <= budget && scratch > budget - batch) {
        char b4[32], b5[32];
        return ferry__err(
            FERRY_EINVAL,
            "loader: a batch buffer of %s, the workers' scratch and the fetch "
            "buffers of a remote source (%s: FERRY_REMOTE_CONNECTIONS %u of %s) "
            "need %s, over the memory budget of %s (memory_budget; 0 = 1/%d of "
            "physical memory)",
            human(batch, b1, sizeof b1), human(fetch, b2, sizeof b2),
            ferry__http_config()->connections,
            human(FERRY__FETCH_BUFFER + FERRY__WRITE_BUFFER, b4, sizeof b4),
            human(batch + scratch < batch ? UINT64_MAX : batch + scratch, b3, sizeof b3),
            human(budget, b5, sizeof b5), DEFAULT_BUDGET_DIVISOR);
    }
    if (batch > budget || scratch > budget - batch) {
        if (f->variable)
            return ferry__err(FERRY_EINVAL,
                              "loader: field \"%s\" (variable, bound %lld rows: %s a sample) "
                              "times batch_size %llu needs %s, over the memory budget of %s "
                              "(memory_budget; 0 = 1/%d of physical memory)",
                              f->name, (long long)f->shape[0],
                              human(l->field_stride[widest], b1, sizeof b1), (unsigned long long)B,
                              human(batch, b2, sizeof b2), human(budget, b3, sizeof b3),
                              DEFAULT_BUDGET_DIVISOR);
        return ferry__err(FERRY_EINVAL,
                          "loader: field \"%s\" (%s a sample) times batch_size %llu needs %s, "
                          "over the memory budget of %s (memory_budget; 0 = 1/%d of physical "
                          "memory)",
                          f->name, human(l->field_stride[widest], b1, sizeof b1),
                          (unsigned long long)B, human(batch, b2, sizeof b2),
                          human(budget, b3, sizeof b3), DEFAULT_BUDGET_DIVISOR);
    }
    uint64_t fits = (budget - scratch) / batch;
    if (l->o.prefetch == 0) {
        l->o.prefetch = auto_prefetch(l);
        if (l->o.prefetch > fits)
            l->o.prefetch = (uint32_t)fits;
    }
    /* spare buffers (exported tensors' memory coming back) count too */
    if (l->o.prefetch <= fits)
        l->max_spare =
            (uint32_t)(fits - l->o.prefetch < l->o.prefetch ? fits - l->o.prefetch : l->o.prefetch);
    if (l->o.prefetch > fits)
        return ferry__err(FERRY_EINVAL,
                          "loader: prefetch %u buffers of %s (batch_size %llu) are over the "
                          "memory budget of %s: at most %llu fit (memory_budget; 0 = 1/%d of "
                          "physical memory)",
                          l->o.prefetch, human(batch, b1, sizeof b1), (unsigned long long)B,
                          human(budget, b2, sizeof b2), (unsigned long long)fits,
                          DEFAULT_BUDGET_DIVISOR);
    return 0;
}

/* Its refusals name the source, when it has one. */
int ferry__loader_check_budget(ferry_loader *l)
{
    int rc = check_budget(l);
    const char *source = l->ds ? l->ds->source : l->st->source;
    return rc < 0 && *source ? ferry__err_prefix(rc, "%s", source) : rc;
}

/* The device options: a device name is checked (and refused: delivery on the
 * device is not in this version); pin_memory opens the device its blocks are
 * page-locked for. */
int ferry__loader_open_device(ferry_loader *l)
{
    const char *name = l->o.device && *l->o.device ? l->o.device : NULL;
    l->o.device = NULL; /* borrowed for the call only */
    l->device = -1;
    if (name) {
        int kind, ordinal, rc;
        if ((rc = ferry_device_parse(name, &kind, &ordinal)) < 0)
            return ferry__err_prefix(rc, "loader");
        if (kind == FERRY_DEVICE_CPU)
            name = NULL;
        else {
            /* batches are copied from page-locked blocks: pinned whatever pin_memory says */
            if ((rc = ferry_device_open(&l->dev, name)) < 0)
                return ferry__err_prefix(rc, "device \"%s\"", name);
            l->device = ordinal;
            snprintf(l->device_name, sizeof l->device_name, "%s", name);
            return 0;
        }
    }
    int rc = l->o.pin_memory ? ferry_device_open(&l->dev, name) : 0;
    return rc < 0 ? ferry__err_prefix(rc, "pin_memory") : 0;
}

/* The ring of device buffers, once the blocks' size is known. */
int ferry__loader_open_ring(ferry_loader *l)
{
    if (l->device < 0)
        return 0;
    ferry_device *dv;
    int rc = ferry_device_open(&dv, l->device_name);
    if (rc == 0 &&
        (rc = ferry__dring_create(&l->ring, dv, l->blk_bytes,
                                  l->o.device_buffers ? l->o.device_buffers : DEVICE_BUFFERS)) < 0)
        ferry_device_free(dv);
    return rc < 0 ? ferry__err_prefix(rc, "device \"%s\"", l->device_name) : 0;
}
