/*
 * The minidb, leveldb and rocksdb datasets: sample i is entry i of the store
 * (formats/kv.h), or every num_shards-th entry; values decode as Datum,
 * TensorProtos or raw bytes (db_values.c). One lookup a sample, no allocation of
 * ferry's own.
 */
#include "spec.h"
#include "db_values.h"
#include "../formats/kv.h"
#include "../formats/lmdb_env.h"
#include "../core/guard.h"
#include "../io/io.h"
#include "../io/seqread.h"
#include "shard_stream.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct kv_ds {
    const ferry__kv_ops *ops;
    ferry__kv *kv;
    ferry__db_values vs;
    uint64_t n, first, step;
    _Atomic uint64_t *ahead; /* a minidb read through its saved index: ferry__read_ahead's bits */
} kv_ds;

typedef struct get_arg {
    const kv_ds *d;
    uint64_t e;
    const uint8_t *key;
    size_t klen;
    ferry_sample *out;
} get_arg;

static uint64_t kv_len(void *self)
{
    return ((kv_ds *)self)->n;
}

static int entry_prefix(const kv_ds *d, uint64_t e, int rc)
{
    const uint8_t *k;
    size_t kl;
    char key[96];
    d->ops->key(d->kv, e, &k, &kl);
    return ferry__err_prefix(rc, "%s: entry %llu (key \"%s\")", ferry__kv_path(d->kv),
                             (unsigned long long)e, ferry__lmdb_key_repr(key, sizeof key, k, kl));
}

/* The library's errors name the store and the entry already; the decoder's get
 * them here. */
static int decode(void *arg, const uint8_t *v, size_t vlen)
{
    const get_arg *a = arg;
    int rc = ferry__db_values_get(&a->d->vs, a->key, a->klen, v, vlen, a->out);
    return rc < 0 ? entry_prefix(a->d, a->e, rc) : rc;
}

static int read_entry(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const kv_ds *d = self;
    get_arg a = {d, d->first + i * d->step, NULL, 0, out};
    d->ops->key(d->kv, a.e, &a.key, &a.klen);
    return d->ops->get(d->kv, a.e, decode, &a);
}

/* minidb: the values are copied out of the file's mapping, under a guard. */
static int entry_fault(const ferry__reading *rd, uintptr_t addr)
{
    const kv_ds *d = rd->arg;
    return ferry__guard_err(addr, ferry__kv_path(d->kv), NULL, "entry %llu",
                            (unsigned long long)(d->first + rd->item * d->step));
}

FERRY__GUARDED_GET(mapped_get, read_entry, entry_fault)

/* A minidb read through its saved index has not touched the file at open. soon:
 * the next entries' headers into the CPU's caches. Later batches: the kernel
 * reads runs of consecutive entries ahead, as for record shards, and a run whose
 * pages are cached is mapped in one call by the worker that hints it. */
static void hint_entries(void *self, const uint64_t *indices, size_t count, int soon)
{
    const kv_ds *d = self;
    const uint8_t *p;
    size_t n;
    for (size_t k = 0; soon && k < count; k++)
        if (indices[k] < d->n) {
            uint64_t e = d->first + indices[k] * d->step;
            ferry__minidb_span(d->kv, e, e, &p, &n);
            __builtin_prefetch(p);
        }
    if (soon)
        return;
    const void *base;
    size_t size;
    ferry__minidb_mapping(d->kv, &base, &size);
    for (size_t k = 0; k < count;) {
        size_t e = k + 1;
        while (e < count && indices[e] == indices[e - 1] + 1 && indices[e] < d->n)
            e++;
        if (indices[k] < d->n) {
            ferry__minidb_span(d->kv, d->first + indices[k] * d->step,
                               d->first + indices[e - 1] * d->step, &p, &n);
            if (n >= ((size_t)64 << 10))
                ferry__read_ahead(d->ahead, base, (uintptr_t)p, (uintptr_t)p + n, true);
        }
        k = e;
    }
}

static int hint_fault(const ferry__reading *rd, uintptr_t addr)
{
    const kv_ds *d = rd->arg;
    return ferry__guard_err(addr, ferry__kv_path(d->kv), NULL, "reading ahead");
}

FERRY__GUARDED_HINT(indexed_hint, hint_entries, hint_fault)

static void kv_destroy(void *self)
{
    kv_ds *d = self;
    if (d->kv)
        d->ops->close(d->kv);
    ferry__free((void *)d->ahead);
    ferry__free(d);
}

/* soon: the keys of the coming gets pulled into the cache, their index entries
 * read side by side (one miss each in a large index, overlapped instead of one
 * after another); a library's lookup has no address to prefetch before it runs.
 * Later batches: nothing (the loader is told not to ask). Not for a mapped
 * store, whose keys lie in the mapping, outside a guard here. */
static void kv_hint(void *self, const uint64_t *indices, size_t n, int soon)
{
    const kv_ds *d = self;
    for (size_t k = 0; soon && k < n; k++) {
        if (indices[k] >= d->n)
            continue;
        const uint8_t *key;
        size_t kl;
        d->ops->key(d->kv, d->first + indices[k] * d->step, &key, &kl);
        __builtin_prefetch(key);
    }
}

static const ferry_dataset_vtable kv_vtable = {
    .len = kv_len, .get = read_entry, .destroy = kv_destroy, .hint = kv_hint};
static const ferry_dataset_vtable mapped_vtable = {
    .len = kv_len, .get = mapped_get, .destroy = kv_destroy};
static const ferry_dataset_vtable indexed_vtable = {
    .len = kv_len, .get = mapped_get, .destroy = kv_destroy, .hint = indexed_hint};

void ferry_db_dataset_opts_default(ferry_db_dataset_opts *o)
{
    memset(o, 0, sizeof *o);
    o->value = FERRY_DB_VALUE_AUTO;
    o->verify = 1;
    o->in_place = 1;
    o->num_shards = 1;
}

typedef struct first_arg {
    const kv_ds *d; /* NULL: the store is empty */
    ferry__db_values *vs;
    const ferry_db_dataset_opts *o;
    uint64_t largest;
    size_t longest_key;
} first_arg;

static int init_from(void *arg, const uint8_t *v, size_t vlen)
{
    first_arg *a = arg;
    int rc = ferry__db_values_init(a->vs, a->o->value, a->o->max_len, a->largest, a->longest_key, v,
                                   vlen);
    if (rc < 0 && a->d)
        return entry_prefix(a->d, 0, rc);
    return rc < 0 ? ferry__err_prefix(rc, "%s", a->o->path) : rc;
}

/* The first value read under a guard when it lies in a mapping. */
static int init_mapped(const kv_ds *d, first_arg *a)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, ferry__kv_path(d->kv), NULL, "entry 0");
    int rc = d->ops->get(d->kv, 0, init_from, a);
    ferry__guard_pop(&g);
    return rc;
}

int ferry_dataset_db(ferry_dataset **out, const ferry_db_dataset_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->path || !o->backend)
        return ferry__err(FERRY_EINVAL, "db dataset: backend and path are required");
    const ferry__kv_ops *ops = ferry__kv_find(o->backend);
    if (!ops)
        return ferry__err(FERRY_EINVAL,
                          "db dataset: unknown backend \"%.32s\" (minidb, leveldb, rocksdb; "
                          "LMDB is ferry_dataset_lmdb)",
                          o->backend);
    if (o->value < FERRY_DB_VALUE_AUTO || o->value > FERRY_DB_VALUE_RAW)
        return ferry__err(FERRY_EINVAL,
                          "db dataset: value %d is not AUTO (0), DATUM (1), "
                          "TENSORPROTOS (2) or RAW (3)",
                          o->value);
    uint64_t step = o->num_shards ? o->num_shards : 1;
    if (o->shard_id >= step)
        return ferry__err(FERRY_EINVAL, "%s: shard %llu is outside [0, of=%llu)", o->path,
                          (unsigned long long)o->shard_id, (unsigned long long)step);
    kv_ds *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "db dataset: out of memory");
    d->ops = ops;
    if ((o->index_path || o->build_index) && ops != &ferry__minidb_ops)
        FERRY_FAIL(FERRY_EINVAL, "%s: a saved index (index_path, build_index) is minidb's",
                   o->path);
    ferry__kv_opts ko = {o->index_max, o->verify, o->index_path, o->build_index, o->in_place};
    FERRY_TRY(ops->open(&d->kv, o->path, &ko));
    if (ops == &ferry__minidb_ops && ferry__minidb_indexed(d->kv)) {
        const void *base;
        size_t size;
        ferry__minidb_mapping(d->kv, &base, &size);
        if (!(d->ahead = ferry__ahead_bits(size)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", o->path);
    }
    uint64_t count = ops->count(d->kv);
    d->first = o->shard_id;
    d->step = step;
    d->n = count > d->first ? (count - d->first + step - 1) / step : 0;
    first_arg a = {count ? d : NULL, &d->vs, o, ops->largest ? ops->largest(d->kv) : 0,
                   ops->longest_key(d->kv)};
    if (count == 0)
        rc = init_from(&a, NULL, 0);
    else if (ops->mapped)
        rc = init_mapped(d, &a);
    else
        rc = ops->get(d->kv, 0, init_from, &a);
    if (rc < 0)
        goto cleanup;
    if ((rc = ferry_dataset_create(out,
                                   d->ahead      ? &indexed_vtable
                                   : ops->mapped ? &mapped_vtable
                                                 : &kv_vtable,
                                   d, d->vs.f, d->vs.nfields)) < 0)
        return rc; /* d freed by the call */
    /* a library's store takes only the near hints; an indexed minidb reads ahead */
    (*out)->near_hints_only = !d->ahead;
    (*out)->in_order = true; /* key order, or the file's */
    return 0;
cleanup:
    kv_destroy(d);
    return rc;
}

/* Whether a minidb location is read as a stream without being asked: a
 * directory, a glob, or a compressed file. */
static bool minidb_streams(const char *location)
{
    struct stat st;
    if (stat(location, &st) != 0)
        return strpbrk(location, "*?[") != NULL;
    if (S_ISDIR(st.st_mode))
        return true;
    return ferry__shard_files_compressed("minidb", location, ferry__minidb_listed, "minidb files",
                                         FERRY__COMP_AUTO);
}

/* "minidb:FILE", "leveldb:DIR", "rocksdb:DIR"
 * [,value=auto|datum|tensorprotos|raw][,max=N][,index_max=B][,verify=0|1][,shard=K,of=N];
 * minidb also [,index=PATH][,build=1] and [,stream=1][,seed=S][,max_entry=N]; leveldb
 * [,in_place=0|1] */
int ferry__kv_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_db_dataset_opts o;
    ferry_db_dataset_opts_default(&o);
    o.backend = s->kind;
    o.path = s->location;
    bool minidb = !strcmp(s->kind, "minidb");
    const char *value = ferry__spec_str(s, "value");
    uint64_t max = 0, index_max = 0, shard = 0, of = 1, seed = 0, max_entry = 0;
    int rc, verify = 1, stream = -1, build = 0, in_place = 1;
    if ((rc = ferry__spec_u64(s, "max", 1, (uint64_t)1 << 30, &max)) < 0 ||
        (rc = ferry__spec_u64(s, "index_max", 1 << 20, UINT64_MAX, &index_max)) < 0 ||
        (rc = ferry__spec_u64(s, "shard", 0, UINT64_MAX - 1, &shard)) < 0 ||
        (rc = ferry__spec_u64(s, "of", 1, UINT64_MAX, &of)) < 0 ||
        (rc = ferry__spec_bool(s, "verify", &verify)) < 0)
        return rc;
    if (minidb && ((rc = ferry__spec_bool(s, "stream", &stream)) < 0 ||
                   (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &seed)) < 0 ||
                   (rc = ferry__spec_u64(s, "max_entry", 16, (uint64_t)1 << 32, &max_entry)) < 0 ||
                   (rc = ferry__spec_bool(s, "build", &build)) < 0))
        return rc;
    if (!strcmp(s->kind, "leveldb") && (rc = ferry__spec_bool(s, "in_place", &in_place)) < 0)
        return rc;
    const char *index = minidb ? ferry__spec_str(s, "index") : NULL;
    if ((rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (!value || !strcmp(value, "auto"))
        o.value = FERRY_DB_VALUE_AUTO;
    else if (!strcmp(value, "datum"))
        o.value = FERRY_DB_VALUE_DATUM;
    else if (!strcmp(value, "tensorprotos"))
        o.value = FERRY_DB_VALUE_TENSORPROTOS;
    else if (!strcmp(value, "raw"))
        o.value = FERRY_DB_VALUE_RAW;
    else
        return ferry__err(FERRY_EINVAL,
                          "source %s: value=\"%.32s\" is not auto, datum, tensorprotos or raw",
                          s->kind, value);
    if (!*o.path)
        return ferry__err(FERRY_EINVAL, "source %s: PATH is empty", s->kind);
    if (shard >= of)
        return ferry__err(FERRY_EINVAL, "source %s: shard=%llu is outside [0, of=%llu)", s->kind,
                          (unsigned long long)shard, (unsigned long long)of);
    o.max_len = max;
    o.index_max = index_max;
    o.verify = verify;
    o.in_place = in_place;
    o.shard_id = shard;
    o.num_shards = of;
    o.index_path = index && *index ? index : NULL;
    o.build_index = build;
    if (minidb && stream < 0)
        stream = minidb_streams(s->location);
    if (stream > 0 && (o.index_path || build))
        return ferry__err(FERRY_EINVAL, "source minidb: index= and build= are for map-style "
                                        "reading; a stream reads the file front to back");
    if (stream > 0 && of > 1)
        return ferry__err(FERRY_EINVAL, "source minidb: shard= is for map-style reading; a "
                                        "stream is sharded by the loader (one file a shard)");
    if (stream > 0)
        return st ? ferry_stream_db(st, s->location, &o, max_entry, seed)
                  : ferry__err(FERRY_EINVAL, "source minidb: a directory, a glob or a "
                                             "compressed file makes a stream; open it with "
                                             "ferry_source_open");
    return ferry_dataset_db(out, &o);
}
