/*
 * The lmdb dataset: sample i is entry i of an LMDB database, in key order. The
 * entries are located once at open (lmdb_env.c); get copies a value out of the
 * map into the batch slot, decoding a Caffe Datum on the way, with no LMDB call
 * and no allocation.
 */
#include "spec.h"
#include "db_values.h"
#include "../formats/lmdb_env.h"
#include "../core/guard.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_MAX_LEN ((uint64_t)1 << 20)
#define MAX_MAX_LEN ((uint64_t)1 << 30)

typedef struct lmdb_ds {
    ferry__lmdb_reader *r;
    ferry__db_values vs; /* the fields: Datum, TensorProtos or key and value */
} lmdb_ds;

static uint64_t lmdb_len(void *self)
{
    return ((lmdb_ds *)self)->r->n;
}

/* Sets the thread's message for entry i and returns rc. */
static int entry_err(const lmdb_ds *d, uint64_t i, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int entry_err(const lmdb_ds *d, uint64_t i, int rc, const char *fmt, ...)
{
    char key[96], what[FERRY_ERRMSG_MAX];
    const ferry__lmdb_entry *e = &d->r->e[i];
    ferry__lmdb_key_repr(key, sizeof key, e->key, e->klen);
    if (!fmt)
        return ferry__err_prefix(rc, "%s: entry %llu (key \"%s\")", d->r->path,
                                 (unsigned long long)i, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ferry__err(rc, "%s: entry %llu (key \"%s\"): %s", d->r->path, (unsigned long long)i, key,
                      what);
}

static int get_entry(const lmdb_ds *d, uint64_t i, ferry_sample *out)
{
    const ferry__lmdb_entry *e = &d->r->e[i];
    int rc = ferry__db_values_get(&d->vs, e->key, e->klen, e->val, e->vlen, out);
    return rc < 0 ? entry_err(d, i, rc, NULL) : rc;
}

/* The values are copied out of liblmdb's map of the file: a file cut short under
 * the reader is an error naming it (the key, in the map too, is left out). */
static int entry_fault(const ferry__reading *rd, uintptr_t addr)
{
    const lmdb_ds *d = rd->arg;
    return ferry__guard_err(addr, d->r->file, NULL, "entry %llu", (unsigned long long)rd->item);
}

__attribute__((noinline)) static int get_guarded(const lmdb_ds *d, uint64_t i, ferry_sample *out)
{
    ferry__reading rd = {entry_fault, d, i, NULL};
    int rc;
    FERRY__GUARDED(rc, &rd, get_entry(d, i, out));
    return rc;
}

static int lmdb_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const lmdb_ds *d = self;
    ferry__guard *g = ferry__guard_direct(self);
    if (!g)
        return get_guarded(d, i, out);
    ferry__reading rd = {entry_fault, d, i, NULL};
    int rc;
    FERRY__DIRECT_READ(rc, g, &rd, get_entry(d, i, out));
    return rc;
}

/* soon: pull the entries and their values' first lines into the cache; later
 * batches: ask the kernel to read the values' pages ahead (a database larger
 * than memory). */
static void lmdb_hint(void *self, const uint64_t *indices, size_t count, int soon)
{
    const lmdb_ds *d = self;
    const ferry__lmdb_reader *r = d->r;
    for (size_t k = 0; k < count; k++) {
        if (indices[k] >= r->n)
            continue;
        const ferry__lmdb_entry *e = &r->e[indices[k]];
        if (soon) {
            __builtin_prefetch(e->val);
            continue;
        }
        uintptr_t a = (uintptr_t)e->val, page = 4096;
        if (e->vlen)
            madvise((void *)(a & ~(page - 1)), e->vlen + (a & (page - 1)), MADV_WILLNEED);
    }
}

static void lmdb_destroy(void *self)
{
    lmdb_ds *d = self;
    ferry__lmdb_reader_free(d->r);
    ferry__free(d);
}

static const ferry_dataset_vtable lmdb_vtable = {
    .len = lmdb_len, .get = lmdb_get, .destroy = lmdb_destroy, .hint = lmdb_hint};

/* The first entry as a Datum, read from the map under a guard. */
static int decode_first(const ferry__lmdb_reader *r, ferry_datum *first)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, r->file, NULL, "entry 0");
    int rc = ferry_datum_decode(r->e[0].val, r->e[0].vlen, first);
    ferry__guard_pop(&g);
    return rc;
}

/* Decides the fields (ferry__db_values_init in `mode`) from the first entry, read
 * under a guard; largest: the longest value, for raw values. */
static int values_first(lmdb_ds *d, int mode, uint64_t max_len, uint64_t largest)
{
    const ferry__lmdb_entry *e = d->r->n ? &d->r->e[0] : NULL;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, d->r->file, NULL, "entry 0");
    int rc =
        ferry__db_values_init(&d->vs, mode, max_len, largest, d->r->max_klen,
                              e && mode != FERRY_DB_VALUE_RAW ? e->val : NULL, e ? e->vlen : 0);
    ferry__guard_pop(&g);
    return rc;
}

void ferry_lmdb_opts_default(ferry_lmdb_opts *o)
{
    memset(o, 0, sizeof *o);
    o->datum = FERRY_LMDB_DATUM_AUTO;
    o->max_len = 0; /* the largest value (key/value), 1 MiB (encoded Datum data) */
}

int ferry_dataset_lmdb(ferry_dataset **out, const ferry_lmdb_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->path)
        return ferry__err(FERRY_EINVAL, "lmdb: path is NULL");
    uint64_t max_len = o->max_len ? o->max_len : DEFAULT_MAX_LEN;
    bool auto_len = o->max_len == 0;
    if (max_len > MAX_MAX_LEN)
        return ferry__err(FERRY_EINVAL, "lmdb: max_len %llu is outside [1, %llu]",
                          (unsigned long long)max_len, (unsigned long long)MAX_MAX_LEN);
    if (o->datum < FERRY_LMDB_DATUM_AUTO || o->datum > FERRY_LMDB_DATUM_OFF)
        return ferry__err(FERRY_EINVAL, "lmdb: datum %d is not AUTO (0), ON (1) or OFF (2)",
                          o->datum);
    lmdb_ds *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "lmdb: out of memory");
    FERRY_TRY(ferry__lmdb_reader_open(&d->r, o->path, o->db, o->lock));
    ferry_datum first;
    memset(&first, 0, sizeof first);
    if (o->datum == FERRY_LMDB_DATUM_ON && d->r->n == 0)
        FERRY_FAIL(FERRY_EINVAL,
                   "%s: datum=1, but the database is empty (no first entry to "
                   "take the shape from)",
                   d->r->path);
    int mode = FERRY_DB_VALUE_RAW;
    if (o->datum != FERRY_LMDB_DATUM_OFF && d->r->n > 0) {
        rc = decode_first(d->r, &first);
        if (rc < 0 && o->datum == FERRY_LMDB_DATUM_ON) {
            char key[96];
            ferry__lmdb_key_repr(key, sizeof key, d->r->e[0].key, d->r->e[0].klen);
            rc = ferry__err_prefix(rc, "%s: entry 0 (key \"%s\") is not a Caffe Datum", d->r->path,
                                   key);
            goto cleanup;
        }
        if (rc == 0 &&
            (o->datum == FERRY_LMDB_DATUM_ON || first.data_size > 0 || first.float_count > 0))
            mode = FERRY_DB_VALUE_DATUM;
        else if (o->datum == FERRY_LMDB_DATUM_AUTO &&
                 values_first(d, FERRY_DB_VALUE_TENSORPROTOS, o->max_len, 0) == 0)
            mode = FERRY_DB_VALUE_TENSORPROTOS;
        rc = 0;
    }
    uint64_t largest = 1;
    if (mode == FERRY_DB_VALUE_RAW && auto_len) {
        /* the bound is the batch slot's size: the largest value, not a guess */
        for (size_t i = 0; i < d->r->n; i++)
            largest = d->r->e[i].vlen > largest ? d->r->e[i].vlen : largest;
        if (largest > MAX_MAX_LEN)
            FERRY_FAIL(FERRY_EOVERFLOW, "%s: a value of %llu bytes is over 2^30", d->r->path,
                       (unsigned long long)largest);
    }
    if (mode != FERRY_DB_VALUE_TENSORPROTOS &&
        (rc = values_first(d, mode, o->max_len, largest)) < 0) {
        rc = ferry__err_prefix(rc, "%s: entry 0", d->r->path);
        goto cleanup;
    }
    return ferry_dataset_create(out, &lmdb_vtable, d, d->vs.f, d->vs.nfields);
cleanup:
    lmdb_destroy(d);
    return rc;
}

int ferry_lmdb_entry(const ferry_dataset *ds, uint64_t i, const void **key, size_t *klen,
                     const void **val, size_t *vlen)
{
    if (!ds || ds->vt != &lmdb_vtable)
        return ferry__err(FERRY_EINVAL, "lmdb: not an lmdb dataset");
    const ferry__lmdb_reader *r = ((const lmdb_ds *)ds->self)->r;
    if (i >= r->n)
        return ferry__err(FERRY_ERANGE, "%s: entry %llu is past the end (%llu entries)", r->path,
                          (unsigned long long)i, (unsigned long long)r->n);
    const ferry__lmdb_entry *e = &r->e[i];
    if (key)
        *key = e->key;
    if (klen)
        *klen = e->klen;
    if (val)
        *val = e->val;
    if (vlen)
        *vlen = e->vlen;
    return 0;
}

/* "lmdb:PATH[,db=NAME][,datum=auto|1|0][,max=N][,lock=0|1]" */
int ferry__lmdb_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_lmdb_opts o;
    ferry_lmdb_opts_default(&o);
    o.path = s->location;
    o.db = ferry__spec_str(s, "db");
    const char *datum = ferry__spec_str(s, "datum");
    uint64_t max = 0;
    int rc, lock = 0;
    if ((rc = ferry__spec_u64(s, "max", 1, MAX_MAX_LEN, &max)) < 0 ||
        (rc = ferry__spec_bool(s, "lock", &lock)) < 0 || (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (!datum || !strcmp(datum, "auto"))
        o.datum = FERRY_LMDB_DATUM_AUTO;
    else if (!strcmp(datum, "1") || !strcmp(datum, "true") || !strcmp(datum, "yes") ||
             !strcmp(datum, "on"))
        o.datum = FERRY_LMDB_DATUM_ON;
    else if (!strcmp(datum, "0") || !strcmp(datum, "false") || !strcmp(datum, "no") ||
             !strcmp(datum, "off"))
        o.datum = FERRY_LMDB_DATUM_OFF;
    else
        return ferry__err(FERRY_EINVAL, "source %s: datum=\"%.32s\" is not auto, 1 or 0", s->kind,
                          datum);
    if (o.db && !*o.db)
        return ferry__err(FERRY_EINVAL, "source %s: db= is empty", s->kind);
    if (!*o.path)
        return ferry__err(FERRY_EINVAL, "source %s: PATH is empty", s->kind);
    o.max_len = max;
    o.lock = lock;
    return ferry_dataset_lmdb(out, &o);
}
