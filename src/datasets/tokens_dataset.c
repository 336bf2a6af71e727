/*
 * The tokens dataset: windows of T + 1 tokens over llm.c shards, mapped. get
 * finds the shard by a binary search over the shards' first windows and copies
 * the window twice (input, then target one token later) into the batch slot.
 */
#include "spec.h"
#include "../core/bytes.h"
#include "../core/guard.h"
#include "../formats/tokens_internal.h"
#include "../io/io.h"
#include "../io/remote.h"
#include "shard_stream.h"

#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SHARDS 65536
#define MAX_SEQ ((uint64_t)1 << 24)
#define FAR_HINT_MIN ((size_t)64 << 10) /* smaller windows: no read-ahead calls */

typedef struct shard {
    ferry__map map;
    ferry__lazy *lz;    /* a remote shard: mapped when first read, else read by ranges */
    char *path;         /* for messages */
    const uint8_t *tok; /* a local shard's tokens (NULL for a remote one) */
    uint64_t count;     /* tokens */
    unsigned header;    /* bytes before the first token: 1024, or 0 (raw) */
    uint64_t windows;   /* (count - 1) / T */
    uint64_t first;     /* the dataset index of its first sample */
    uint64_t samples;   /* how many of the dataset's samples are in it */
} shard;

typedef struct tokens_ds {
    shard *s;
    size_t n;
    unsigned size;   /* bytes a token */
    ferry_dtype out; /* the fields' dtype */
    uint64_t seq, len, dropped;
    uint64_t stride; /* windows start every stride tokens */
    bool random_offset;
    ferry_tokens_order order;
    uint64_t batch, rank, world;
    bool remote; /* its shards are remote: lazy, and read by ranges until wanted */
} tokens_ds;

#define SALT_OFFSET 0x6f666673u /* "offs" */

/* Where a shard's windows start in an epoch: 0, or with random offsets a number
 * in [0, stride) keyed by (seed, epoch, shard), the same for every worker and
 * rank. */
static uint64_t phase(const tokens_ds *d, const shard *s, const ferry_ctx *ctx)
{
    if (!d->random_offset || d->stride == 1)
        return 0;
    uint64_t seed = ctx ? ferry_ctx_seed(ctx) : 0, epoch = ctx ? ferry_ctx_epoch(ctx) : 0;
    uint64_t h =
        ferry_hash64(ferry_hash64(ferry_hash64(seed, SALT_OFFSET), epoch), (uint64_t)(s - d->s));
    return h % d->stride;
}

static uint64_t tk_len(void *self)
{
    return ((tokens_ds *)self)->len;
}

/* The shard holding sample i and where in it the window starts (a token index). */
static const shard *locate(const tokens_ds *d, uint64_t i, const ferry_ctx *ctx, uint64_t *start)
{
    size_t lo = 0, hi = d->n; /* the last shard whose first <= i */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->s[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    const shard *s = &d->s[lo];
    uint64_t q = i - s->first, w = q;
    if (d->order == FERRY_TOKENS_LLMC)
        w = q / d->batch * d->batch * d->world + d->rank * d->batch + q % d->batch;
    *start = d->order == FERRY_TOKENS_LLMC ? w * d->seq : phase(d, s, ctx) + w * d->stride;
    return s;
}

/* Shards k .. k + FERRY_REMOTE_AHEAD - 1 fetched whole in the background: the
 * shards that follow one a loader reads, in file order (the hints of the next
 * batches reach only as far as the loader's prefetch), once that one is there
 * (so that the first batch does not share the connection with them). */
static void want_ahead(const tokens_ds *d, size_t k)
{
    size_t ahead = ferry__remote_ahead();
    for (size_t j = k; j < d->n && j - k < ahead; j++)
        ferry__lazy_want(d->s[j].lz);
}

/* The window's seq + 1 tokens from `start`: in the mapping, or (a remote shard
 * not fetched whole) read by a ranged GET into *tmp, which the caller frees. */
static int window(const tokens_ds *d, const shard *s, uint64_t start, uint8_t **tmp,
                  const uint8_t **p)
{
    *tmp = NULL;
    if (!s->lz) {
        *p = s->tok + start * d->size;
        return 0;
    }
    size_t bytes = (size_t)(d->seq + 1) * d->size;
    uint64_t off = s->header + start * d->size;
    const uint8_t *data = atomic_load_explicit(&s->lz->data, memory_order_acquire);
    if (data) {
        *p = data + off;
        return 0;
    }
    if (!(*tmp = ferry__malloc(bytes)))
        return ferry__err(FERRY_ENOMEM, "%s: out of memory for a window of %zu bytes", s->path,
                          bytes);
    int rc = ferry__lazy_read(s->lz, *tmp, off, bytes, p);
    if (rc == 0 && *p != *tmp)
        want_ahead(d, (size_t)(s - d->s) + 1); /* opened whole: the next ones follow */
    return rc;
}

static int tk_copy(const tokens_ds *d, const shard *s, uint64_t i, uint64_t start, const uint8_t *p,
                   ferry_sample *out);

static int tk_read(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const tokens_ds *d = self;
    uint64_t start;
    const shard *s = locate(d, i, ctx, &start);
    const uint8_t *p;
    uint8_t *tmp;
    int rc = window(d, s, start, &tmp, &p);
    if (rc == 0)
        rc = tk_copy(d, s, i, start, p, out);
    ferry__free(tmp);
    return rc;
}

/* Input and target from the window's tokens at p. */
static int tk_copy(const tokens_ds *d, const shard *s, uint64_t i, uint64_t start, const uint8_t *p,
                   ferry_sample *out)
{
    size_t bytes = (size_t)d->seq * d->size;
    if (d->out == FERRY_U16 || d->out == FERRY_U32) {
        memcpy(out->data[0], p, bytes);
        memcpy(out->data[1], p + d->size, bytes);
        return 0;
    }
    /* widen: the window's T + 1 tokens once, input and target from the same reads */
    size_t n = (size_t)d->seq;
    if (d->out == FERRY_I64) {
        int64_t *in = out->data[0], *tg = out->data[1];
        for (size_t k = 0; k <= n; k++) {
            int64_t v;
            if (d->size == 2) {
                uint16_t t;
                memcpy(&t, p + 2 * k, 2);
                v = t;
            } else {
                uint32_t t;
                memcpy(&t, p + 4 * k, 4);
                v = t;
            }
            if (k < n)
                in[k] = v;
            if (k)
                tg[k - 1] = v;
        }
    } else {
        int32_t *in = out->data[0], *tg = out->data[1];
        for (size_t k = 0; k <= n; k++) {
            uint32_t t = 0;
            memcpy(&t, p + d->size * k, d->size);
            if (t > INT32_MAX)
                return ferry_error(FERRY_EOVERFLOW,
                                   "%s: offset %llu: token %u does not fit int32 (sample %llu)",
                                   s->path, (unsigned long long)(s->header + (start + k) * d->size),
                                   t, (unsigned long long)i);
            if (k < n)
                in[k] = (int32_t)t;
            if (k)
                tg[k - 1] = (int32_t)t;
        }
    }
    return 0;
}

/* The shards are read from mappings: one cut short under the reader is an error
 * naming it, not a SIGBUS. */
static int tk_fault(const ferry__reading *rd, uintptr_t addr)
{
    const tokens_ds *d = rd->arg;
    for (size_t k = 0; k < d->n; k++) {
        const shard *s = &d->s[k];
        const ferry__map *m = s->lz ? &s->lz->map : &s->map;
        if (s->lz && !atomic_load_explicit(&s->lz->data, memory_order_acquire))
            continue;
        int rc = ferry__guard_map_err(addr, m->data, m->size, s->path, rd->item);
        if (rc <= 0)
            return rc;
    }
    return ferry__guard_err(addr, NULL, NULL, "sample %llu", (unsigned long long)rd->item);
}

FERRY__GUARDED_GET(tk_get, tk_read, tk_fault)

static void tk_hint(void *self, const uint64_t *indices, size_t count, int soon)
{
    const tokens_ds *d = self;
    size_t bytes = (size_t)(d->seq + 1) * d->size;
    for (size_t k = 0; k < count; k++) {
        if (indices[k] >= d->len)
            continue;
        uint64_t start;
        const shard *s = locate(d, indices[k], NULL, &start); /* offset 0: near enough */
        const uint8_t *p;
        if (!s->lz) {
            p = s->tok + start * d->size;
        } else {
            /* a loader reads it: fetched whole, ahead of the workers */ /* a loader reads it:
                                                                            fetched whole, ahead of
                                                                            the workers */
            const uint8_t *data = atomic_load_explicit(&s->lz->data, memory_order_acquire);
            if (!data) {
                ferry__lazy_want(s->lz);
                continue;
            }
            p = data + s->header + start * d->size;
        }
        if (soon) {
            __builtin_prefetch(p);
            continue;
        }
        if (bytes < FAR_HINT_MIN)
            continue;
        uintptr_t a = (uintptr_t)p, page = 4096;
        madvise((void *)(a & ~(page - 1)), bytes + (a & (page - 1)), MADV_WILLNEED);
    }
}

static void tk_destroy(void *self)
{
    tokens_ds *d = self;
    if (!d)
        return;
    for (size_t k = 0; k < d->n; k++) {
        ferry__unmap(&d->s[k].map);
        ferry__lazy_free(d->s[k].lz);
        ferry__free(d->s[k].lz);
        ferry__free(d->s[k].path);
    }
    ferry__free(d->s);
    ferry__free(d);
}

static const ferry_dataset_vtable tokens_vtable = {
    .len = tk_len, .get = tk_get, .destroy = tk_destroy, .hint = tk_hint};

uint64_t ferry_tokens_dropped(const ferry_dataset *ds)
{
    if (!ds || ds->vt != &tokens_vtable)
        return 0;
    return ((const tokens_ds *)ds->self)->dropped;
}
static bool any_name(const char *name)
{
    (void)name;
    return true;
}

/* What the open knows of a remote shard without fetching it: its size (from the
 * listing, or a HEAD) and, unless raw, its header (a ranged GET of 1024 bytes, or
 * the cached copy's). */
typedef struct remote_head {
    uint64_t size, count;
    unsigned tsize, version;
} remote_head;

typedef struct heads {
    char **paths;
    remote_head *h;
    bool raw;
} heads;

static int head_one(void *arg, size_t i, unsigned worker)
{
    heads *c = arg;
    remote_head *h = &c->h[i];
    const char *path = c->paths[i];
    int64_t mtime;
    uint8_t hdr[FERRY_TOKENS_HEADER];
    (void)worker;
    size_t n;
    int rc;
    if (c->raw)
        return ferry__stat(path, &h->size, &mtime);
    /* the size and the header by one request */
    if ((rc = ferry__remote_peek_first(path, hdr, sizeof hdr, &n, &h->size)) < 0)
        return rc;
    h->version = n >= 8 ? ferry__load_le32(hdr + 4) : 0;
    return ferry__tokens_header(hdr, n, h->size, path, &h->tsize, &h->count);
}

/* Frees what glob or the stream engine's list made. */
static void list_free(glob_t *g, bool remote)
{
    if (remote) {
        ferry__shard_files f = {g->gl_pathv, g->gl_pathc};
        ferry__shard_files_free(&f);
        memset(g, 0, sizeof *g);
    } else {
        globfree(g);
    }
}

int ferry_dataset_tokens(ferry_dataset **out, const ferry_tokens_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->pattern || !*o->pattern)
        return ferry__err(FERRY_EINVAL, "tokens: pattern is empty");
    uint64_t seq = o->seq ? o->seq : 1024;
    if (seq > MAX_SEQ)
        return ferry__err(FERRY_EINVAL, "tokens: seq %llu is outside [1, %llu]",
                          (unsigned long long)seq, (unsigned long long)MAX_SEQ);
    if (o->dtype != FERRY_DTYPE_INVALID && o->dtype != FERRY_U16 && o->dtype != FERRY_U32)
        return ferry__err(FERRY_EINVAL, "tokens: dtype %s is not uint16 or uint32",
                          ferry_dtype_name(o->dtype));
    if (o->out != FERRY_DTYPE_INVALID && o->out != FERRY_I32 && o->out != FERRY_I64)
        return ferry__err(FERRY_EINVAL, "tokens: out %s is not int32 or int64 (or 0: as stored)",
                          ferry_dtype_name(o->out));
    if (o->order != FERRY_TOKENS_ALL && o->order != FERRY_TOKENS_LLMC)
        return ferry__err(FERRY_EINVAL, "tokens: order %d is not ALL (0) or LLMC (1)", o->order);
    uint64_t world = o->world_size ? o->world_size : 1;
    uint64_t stride = o->stride ? o->stride : seq;
    if (stride > MAX_SEQ)
        return ferry__err(FERRY_EINVAL, "tokens: stride %llu is outside [1, %llu]",
                          (unsigned long long)stride, (unsigned long long)MAX_SEQ);
    if (o->order == FERRY_TOKENS_LLMC && (stride != seq || o->random_offset))
        return ferry__err(FERRY_EINVAL, "tokens: llm.c order cuts windows at multiples of seq: "
                                        "stride and random offsets are for order all");
    if (o->order == FERRY_TOKENS_LLMC && (o->batch < 1 || o->batch > ((uint64_t)1 << 24) ||
                                          world > ((uint64_t)1 << 20) || o->rank >= world))
        return ferry__err(FERRY_EINVAL,
                          "tokens: llm.c order needs batch in [1, 2^24] and rank < world_size "
                          "(batch %llu, rank %llu, world_size %llu)",
                          (unsigned long long)o->batch, (unsigned long long)o->rank,
                          (unsigned long long)world);
    glob_t g;
    memset(&g, 0, sizeof g);
    heads hs = {0};
    bool remote = ferry__is_remote(o->pattern) || strchr(o->pattern, '{');
    int gr = 0;
    if (remote) { /* an object store's listing, or brace ranges: the stream engine's list */
        ferry__shard_files f;
        if ((rc = ferry__shard_files_list(&f, "tokens", o->pattern, any_name, "token shards")) < 0)
            return rc;
        g.gl_pathc = f.n;
        g.gl_pathv = f.paths;
    } else {
        gr = glob(o->pattern, GLOB_ERR, NULL, &g);
    }
    if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0)) {
        list_free(&g, remote);
        return ferry__err(FERRY_ENOENT, "tokens: no file matches \"%s\"", o->pattern);
    }
    if (gr == GLOB_ABORTED) {
        list_free(&g, remote);
        return ferry__err(FERRY_ENOENT,
                          "tokens: no file matches \"%s\" (a directory on its way cannot be read)",
                          o->pattern);
    }
    if (gr != 0) {
        list_free(&g, remote);
        return ferry__err(gr == GLOB_NOSPACE ? FERRY_ENOMEM : FERRY_EIO,
                          "tokens: cannot list \"%s\"", o->pattern);
    }
    tokens_ds *d = ferry__calloc(1, sizeof *d);
    if (!d || g.gl_pathc > MAX_SHARDS || !(d->s = ferry__calloc(g.gl_pathc, sizeof *d->s))) {
        rc = g.gl_pathc > MAX_SHARDS ? ferry__err(FERRY_EINVAL, "tokens: %zu shards match, over %d",
                                                  g.gl_pathc, MAX_SHARDS)
                                     : ferry__err(FERRY_ENOMEM, "tokens: out of memory");
        ferry__free(d);
        list_free(&g, remote);
        return rc;
    }
    d->seq = seq;
    d->stride = stride;
    d->random_offset = o->random_offset != 0;
    d->order = o->order;
    d->batch = o->batch;
    d->rank = o->rank;
    d->world = world;
    /* remote shards (every one or none: a listing or brace ranges of one location):
     * their sizes and headers now, their tokens when first read */
    d->remote = g.gl_pathc && ferry__is_remote(g.gl_pathv[0]);
    hs = (heads){g.gl_pathv, NULL, o->raw != 0};
    if (d->remote) {
        if (!(hs.h = ferry__calloc(g.gl_pathc, sizeof *hs.h)))
            FERRY_FAIL(FERRY_ENOMEM, "tokens: out of memory");
        FERRY_TRY(ferry__parallel_for(g.gl_pathc, 8, head_one, &hs));
        uint64_t total = 0;
        for (size_t k = 0; k < g.gl_pathc; k++)
            total += hs.h[k].size;
        FERRY_TRY(ferry__remote_fits(o->pattern, g.gl_pathc, total));
    }
    for (size_t k = 0; k < g.gl_pathc; k++) { /* glob sorts */
        const char *path = g.gl_pathv[k];
        shard *s = &d->s[d->n];
        uint64_t fsize;
        if (d->remote) {
            if (!(s->lz = ferry__calloc(1, sizeof *s->lz)) || ferry__lazy_init(s->lz, path) < 0) {
                ferry__free(s->lz);
                s->lz = NULL;
                FERRY_FAIL(FERRY_ENOMEM, "tokens: out of memory");
            }
            fsize = hs.h[k].size;
        } else {
            FERRY_TRY(ferry__guard_install());
            FERRY_TRY(ferry__map_file(&s->map, path));
            fsize = s->map.size;
        }
        d->n++;
        if (!(s->path = ferry__strdup(path)))
            FERRY_FAIL(FERRY_ENOMEM, "tokens: out of memory");
        unsigned size, header = o->raw ? 0 : FERRY_TOKENS_HEADER, version;
        if (o->raw) {
            size = o->dtype == FERRY_U32 ? 4 : 2;
            s->count = fsize / size;
            if (fsize % size)
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: offset %llu: %llu bytes is not a whole number of %u-byte tokens "
                           "(raw=1)",
                           path, (unsigned long long)(fsize - fsize % size),
                           (unsigned long long)fsize, size);
        } else {
            if (d->remote) {
                size = hs.h[k].tsize;
                s->count = hs.h[k].count;
                version = hs.h[k].version;
            } else {
                FERRY_TRY(ferry__tokens_header(s->map.data, fsize, fsize, path, &size, &s->count));
                version = ferry__load_le32((const uint8_t *)s->map.data + 4);
            }
            if (o->dtype != FERRY_DTYPE_INVALID && ferry_dtype_size(o->dtype) != size)
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: offset 4: version %d holds %s tokens, but dtype=%s was asked "
                           "for",
                           path, (int)version, size == 2 ? "uint16" : "uint32",
                           ferry_dtype_name(o->dtype));
        }
        if (d->size && size != d->size)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: offset 4: %u-byte tokens, but %s has %u-byte ones",
                       path, size, g.gl_pathv[0], d->size);
        d->size = size;
        s->tok = d->remote ? NULL : (const uint8_t *)s->map.data + header;
        s->header = header;
        /* windows of seq + 1 tokens every stride tokens; with random offsets as
         * many as fit whatever the offset in [0, stride) */
        uint64_t reach = seq + (d->random_offset ? stride : 1);
        s->windows = s->count >= reach ? (s->count - reach) / stride + 1 : 0;
        if (o->order == FERRY_TOKENS_LLMC)
            s->samples = s->windows / (d->batch * world) * d->batch;
        else
            s->samples = s->windows;
        /* what no sample reads (at offset 0): the tail, the gaps between windows
         * further apart than seq + 1, and in llm.c's order the partial chunk and
         * the other ranks' windows */
        uint64_t covered = 0;
        if (s->samples && stride <= seq + 1)
            covered = (s->samples - 1) * stride + seq + 1;
        else if (s->samples)
            covered = s->samples * (seq + 1);
        if (o->order == FERRY_TOKENS_LLMC)
            covered = s->samples ? s->samples / d->batch * d->batch * world * seq + 1 : 0;
        d->dropped += s->count - (covered < s->count ? covered : s->count);
        s->first = d->len;
        d->len += s->samples;
        if ((rc = s->map.data ? madvise(s->map.data, s->map.size, MADV_RANDOM) : 0) != 0)
            rc = 0; /* advice only */
    }
    list_free(&g, remote);
    ferry__free(hs.h);
    hs.h = NULL;
    ferry_field f[2];
    memset(f, 0, sizeof f);
    snprintf(f[0].name, sizeof f[0].name, "input");
    snprintf(f[1].name, sizeof f[1].name, "target");
    d->out = o->out ? o->out : d->size == 2 ? FERRY_U16 : FERRY_U32;
    for (int k = 0; k < 2; k++) {
        f[k].dtype = d->out;
        f[k].ndim = 1;
        f[k].shape[0] = (int64_t)seq;
    }
    /* remote shards take the loader's hints of later batches: they fetch them ahead */
    bool far = (seq + 1) * d->size >= FAR_HINT_MIN || d->remote;
    bool lazy = d->remote;
    const shard *sh = d->s; /* the dataset owns d from here */
    size_t nsh = d->n;
    rc = ferry_dataset_create(out, &tokens_vtable, d, f, 2);
    rc = ferry__dataset_shards_at(out, rc, &sh->first, sizeof *sh, nsh);
    if (rc == 0 && !far)
        (*out)->near_hints_only = true;
    if (rc == 0)
        (*out)->remote = lazy;
    return rc;
cleanup:
    list_free(&g, remote);
    ferry__free(hs.h);
    tk_destroy(d);
    return rc;
}

int ferry__tokens_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_tokens_opts o = {.pattern = s->location};
    const char *dt = ferry__spec_str(s, "dtype"), *order = ferry__spec_str(s, "order"),
               *outs = ferry__spec_str(s, "out");
    int rc;
    const char *offset = ferry__spec_str(s, "offset");
    if ((rc = ferry__spec_bool(s, "raw", &o.raw)) < 0 ||
        (rc = ferry__spec_u64(s, "seq", 1, MAX_SEQ, &o.seq)) < 0 ||
        (rc = ferry__spec_u64(s, "stride", 1, MAX_SEQ, &o.stride)) < 0 ||
        (rc = ferry__spec_u64(s, "batch", 1, (uint64_t)1 << 24, &o.batch)) < 0 ||
        (rc = ferry__spec_u64(s, "rank", 0, (uint64_t)1 << 20, &o.rank)) < 0 ||
        (rc = ferry__spec_u64(s, "world", 1, (uint64_t)1 << 20, &o.world_size)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (dt && !strcmp(dt, "u16"))
        o.dtype = FERRY_U16;
    else if (dt && !strcmp(dt, "u32"))
        o.dtype = FERRY_U32;
    else if (dt)
        return ferry__err(FERRY_EINVAL, "source %s: dtype=\"%.32s\" is not u16 or u32", s->kind,
                          dt);
    if (outs && !strcmp(outs, "i32"))
        o.out = FERRY_I32;
    else if (outs && !strcmp(outs, "i64"))
        o.out = FERRY_I64;
    else if (outs)
        return ferry__err(FERRY_EINVAL, "source %s: out=\"%.32s\" is not i32 or i64", s->kind,
                          outs);
    if (offset && !strcmp(offset, "random"))
        o.random_offset = 1;
    else if (offset && strcmp(offset, "0"))
        return ferry__err(FERRY_EINVAL, "source %s: offset=\"%.32s\" is not 0 or random", s->kind,
                          offset);
    if (!order || !strcmp(order, "all"))
        o.order = FERRY_TOKENS_ALL;
    else if (!strcmp(order, "llmc"))
        o.order = FERRY_TOKENS_LLMC;
    else
        return ferry__err(FERRY_EINVAL, "source %s: order=\"%.32s\" is not all or llmc", s->kind,
                          order);
    if (o.order == FERRY_TOKENS_LLMC && !o.batch)
        return ferry__err(FERRY_EINVAL, "source %s: order=llmc needs batch=B", s->kind);
    return ferry_dataset_tokens(out, &o);
}
