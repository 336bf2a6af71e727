/*
 * The mds dataset: MosaicML Streaming shards under one global index. Shards are
 * mapped (or, when only their zstd file is there, decompressed into memory once)
 * and checked sample by sample at open; get copies a sample's columns into the
 * batch slot.
 */
#include "spec.h"
#include "../core/guard.h"
#include "../formats/mds_internal.h"
#include "../io/io.h"
#include "../core/bytes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zstd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "MDS shards are little-endian; this host is not"
#endif

#define DEFAULT_ZSTD_MAX ((uint64_t)1 << 30)
#define SHAPE_DIMS 8
#define FAR_HINT_MIN ((uint64_t)64 << 10) /* smaller samples: no read-ahead calls */

typedef struct shard {
    ferry__map map;
    uint8_t *owned; /* decompressed from the zstd file */
    const uint8_t *p;
    size_t size;
    uint32_t n;
    uint64_t first;
    char from[8]; /* "" read as is, "zstd" decompressed, "cache" the cached copy */
} shard;

typedef struct mds_ds {
    char *dir;
    const char *cache; /* where zstd shards are decompressed to (during open only) */
    ferry__mds_index ix;
    shard *sh;
    int field[FERRY_MAX_FIELDS];       /* the field of each column */
    int shape_field[FERRY_MAX_FIELDS]; /* ARRAY_DYN: its NAME.shape field */
    uint64_t bound[FERRY_MAX_FIELDS];  /* variable columns: the largest sample's bytes/count */
    uint64_t len;
} mds_ds;

static uint64_t mds_len(void *self)
{
    return ((mds_ds *)self)->len;
}

static int serr(const mds_ds *d, size_t s, uint64_t j, uint64_t off, int rc, const char *why)
{
    return ferry__err(rc, "%s/%s: sample %llu at offset %llu: %s", d->dir, d->ix.shards[s].raw,
                      (unsigned long long)j, (unsigned long long)off, why);
}

/* Where each column of sample j of shard s lies: off[c], len[c] (bytes). */
static int locate_columns(const mds_ds *d, size_t s, uint32_t j, size_t *off, size_t *len)
{
    const shard *sh = &d->sh[s];
    uint32_t a = ferry__load_le32(sh->p + 4 + 4 * (size_t)j),
             b = ferry__load_le32(sh->p + 8 + 4 * (size_t)j);
    /* offsets were checked at open: a <= b <= size */
    size_t n = b - a, pos = a, need = 4 * (size_t)d->ix.nvar;
    if (need > n)
        return serr(d, s, j, a, FERRY_ECORRUPT, "shorter than its column sizes");
    const uint8_t *p = sh->p;
    size_t at = pos + need;
    int v = 0;
    for (int c = 0; c < d->ix.ncols; c++) {
        const ferry__mds_column *col = &d->ix.cols[c];
        size_t l = col->size ? col->size : ferry__load_le32(p + pos + 4 * (size_t)v++);
        if (l > b - at) {
            char why[160];
            snprintf(why, sizeof why, "column \"%s\" (%zu bytes) runs past the sample's end",
                     col->name, l);
            return serr(d, s, j, a, FERRY_ECORRUPT, why);
        }
        off[c] = at;
        len[c] = l;
        at += l;
    }
    if (at != b)
        return serr(d, s, j, a, FERRY_ECORRUPT, "its columns do not fill it exactly");
    return 0;
}

/* A dynamic-shape ndarray value: its shape and element count. */
static int array_shape(const mds_ds *d, size_t s, uint32_t j, size_t off, int c, const uint8_t *p,
                       size_t len, int64_t *shape, int *ndim, uint64_t *count)
{
    const ferry__mds_column *col = &d->ix.cols[c];
    char why[160];
    if (len < 1) {
        snprintf(why, sizeof why, "column \"%s\": an empty ndarray value", col->name);
        return serr(d, s, j, off, FERRY_ECORRUPT, why);
    }
    int nd = p[0] >> 2;
    size_t sd = (size_t)1 << (p[0] & 3);
    if (nd < 1 || nd > SHAPE_DIMS || 1 + nd * sd > len) {
        snprintf(why, sizeof why, "column \"%s\": ndarray rank %d (1..%d) or its shape is cut",
                 col->name, nd, SHAPE_DIMS);
        return serr(d, s, j, off, FERRY_ECORRUPT, why);
    }
    uint64_t elems = 1;
    for (int k = 0; k < nd; k++) {
        uint64_t v = 0;
        memcpy(&v, p + 1 + k * sd, sd);
        if (v > ((uint64_t)1 << 40) || __builtin_mul_overflow(elems, v, &elems))
            elems = UINT64_MAX;
        shape[k] = (int64_t)v;
    }
    size_t item = ferry_dtype_size(col->dtype), body = len - 1 - nd * sd;
    if (elems == UINT64_MAX || body % item || body / item != elems) {
        snprintf(why, sizeof why,
                 "column \"%s\": the ndarray's shape makes %llu values, but %zu bytes follow",
                 col->name, (unsigned long long)elems, body);
        return serr(d, s, j, off, FERRY_ECORRUPT, why);
    }
    *ndim = nd;
    *count = elems;
    return 0;
}

static const shard *find(const mds_ds *d, uint64_t i, size_t *s)
{
    size_t lo = 0, hi = d->ix.nshards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->sh[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    *s = lo;
    return &d->sh[lo];
}

static int mds_read(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const mds_ds *d = self;
    (void)ctx;
    size_t s, off[FERRY_MAX_FIELDS], len[FERRY_MAX_FIELDS];
    const shard *sh = find(d, i, &s);
    while (sh->n == 0 || i - sh->first >= sh->n) /* empty shards share a first */
        sh = &d->sh[++s];
    uint32_t j = (uint32_t)(i - sh->first);
    int rc = locate_columns(d, s, j, off, len);
    if (rc < 0)
        return rc;
    for (int c = 0; c < d->ix.ncols; c++) {
        const ferry__mds_column *col = &d->ix.cols[c];
        int f = d->field[c];
        const uint8_t *p = sh->p + off[c];
        switch (col->kind) {
        case FERRY__MDS_SCALAR:
        case FERRY__MDS_ARRAY:
            memcpy(out->data[f], p, col->size);
            break;
        case FERRY__MDS_BYTES:
            if (len[c] > d->bound[c]) /* the file changed since open */
                return serr(d, s, j, off[c], FERRY_ECORRUPT, "a value longer than at open");
            if (len[c])
                memcpy(out->data[f], p, len[c]);
            out->length[f] = (int64_t)len[c];
            break;
        case FERRY__MDS_ARRAY_DYN: {
            int64_t shape[SHAPE_DIMS] = {0};
            int nd;
            uint64_t count;
            if ((rc = array_shape(d, s, j, off[c], c, p, len[c], shape, &nd, &count)) < 0)
                return rc;
            if (count > d->bound[c])
                return serr(d, s, j, off[c], FERRY_ECORRUPT, "an array larger than at open");
            size_t item = ferry_dtype_size(col->dtype);
            memcpy(out->data[f], p + len[c] - count * item, count * item);
            out->length[f] = (int64_t)count;
            memcpy(out->data[d->shape_field[c]], shape, sizeof shape);
            break;
        }
        }
    }
    return 0;
}

/* The shards are read from mappings: one cut short under the reader is an error
 * naming it, not a SIGBUS. */
static int mds_fault(const ferry__reading *rd, uintptr_t addr)
{
    const mds_ds *d = rd->arg;
    for (size_t k = 0; k < d->ix.nshards; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->dir, d->ix.shards[k].raw);
        int rc = ferry__guard_map_err(addr, d->sh[k].map.data, d->sh[k].map.size, path, rd->item);
        if (rc <= 0)
            return rc;
    }
    return ferry__guard_err(addr, d->dir, NULL, "sample %llu", (unsigned long long)rd->item);
}

FERRY__GUARDED_GET(mds_get, mds_read, mds_fault)

static void mds_hint_mapped(void *self, const uint64_t *indices, size_t count, int soon)
{
    const mds_ds *d = self;
    for (size_t k = 0; k < count; k++) {
        if (indices[k] >= d->len)
            continue;
        size_t s;
        const shard *sh = find(d, indices[k], &s);
        if (sh->n == 0 || indices[k] - sh->first >= sh->n)
            continue;
        uint32_t j = (uint32_t)(indices[k] - sh->first);
        uint32_t a = ferry__load_le32(sh->p + 4 + 4 * (size_t)j),
                 b = ferry__load_le32(sh->p + 8 + 4 * (size_t)j);
        if (soon) {
            __builtin_prefetch(sh->p + a);
            continue;
        }
        if (sh->owned || b - a < FAR_HINT_MIN)
            continue;
        uintptr_t addr = (uintptr_t)(sh->p + a), page = 4096;
        madvise((void *)(addr & ~(page - 1)), (b - a) + (addr & (page - 1)), MADV_WILLNEED);
    }
}

FERRY__GUARDED_HINT(mds_hint, mds_hint_mapped, mds_fault)

static void mds_destroy(void *self)
{
    mds_ds *d = self;
    if (!d)
        return;
    if (d->sh)
        for (size_t k = 0; k < d->ix.nshards; k++) {
            ferry__unmap(&d->sh[k].map);
            ferry__free(d->sh[k].owned);
        }
    ferry__free(d->sh);
    ferry__mds_index_free(&d->ix);
    ferry__free(d->dir);
    ferry__free(d);
}

static const ferry_dataset_vtable mds_vtable = {
    .len = mds_len, .get = mds_get, .destroy = mds_destroy, .hint = mds_hint};

static int read_index(const char *path, char **text, size_t *n)
{
    ferry__file f = {-1, 0, 0};
    int rc = ferry__file_open(&f, path);
    if (rc < 0)
        return rc;
    if (f.size > FERRY_MDS_MAX_INDEX) {
        ferry__file_close(&f);
        return ferry__err(FERRY_EOVERFLOW, "%s: %llu bytes, over the %llu limit", path,
                          (unsigned long long)f.size, (unsigned long long)FERRY_MDS_MAX_INDEX);
    }
    *text = ferry__malloc((size_t)f.size + 1);
    if (!*text) {
        ferry__file_close(&f);
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", path);
    }
    size_t got;
    rc = ferry__file_pread(&f, path, *text, (size_t)f.size, 0, &got);
    ferry__file_close(&f);
    if (rc == 0 && got != f.size)
        rc = ferry__err(FERRY_EIO, "%s: shrank while read", path);
    if (rc < 0) {
        ferry__free(*text);
        *text = NULL;
        return rc;
    }
    *n = got;
    return 0;
}

/* Decompresses the zstd file z (frames of `want` bytes) into path, whole or not
 * at all, through a bounded stream buffer. */
static int inflate_to_file(const ferry__map *z, const char *zpath, const char *path, uint64_t want)
{
    ferry__atomic_file w;
    int rc = ferry__atomic_open(&w, path);
    if (rc < 0)
        return rc;
    ZSTD_DStream *ds = ZSTD_createDStream();
    size_t cap = ZSTD_DStreamOutSize();
    void *buf = ferry__malloc(cap);
    if (!ds || !buf) {
        rc = ferry__err(FERRY_ENOMEM, "%s: out of memory", zpath);
        goto done;
    }
    ZSTD_initDStream(ds);
    ZSTD_inBuffer in = {z->data, z->size, 0};
    uint64_t made = 0;
    size_t r = 1;
    while (r != 0 || in.pos < in.size) { /* every frame, as ZSTD_decompress reads them */
        ZSTD_outBuffer out = {buf, cap, 0};
        r = ZSTD_decompressStream(ds, &out, &in);
        if (ZSTD_isError(r)) {
            rc = ferry__err(FERRY_ECORRUPT, "%s: offset %zu: zstd: %s", zpath, in.pos,
                            ZSTD_getErrorName(r));
            goto done;
        }
        made += out.pos;
        if (made > want) {
            rc = ferry__err(FERRY_ECORRUPT,
                            "%s: decompresses to more than the %llu bytes the "
                            "index says",
                            zpath, (unsigned long long)want);
            goto done;
        }
        if (out.pos && (rc = ferry__atomic_write(&w, buf, out.pos)) < 0)
            goto done;
        if (r != 0 && in.pos == in.size && out.pos < cap) {
            rc = ferry__err(FERRY_ECORRUPT, "%s: offset %zu: the zstd frame is cut short", zpath,
                            in.pos);
            goto done;
        }
    }
    if (made != want) {
        rc = ferry__err(FERRY_ECORRUPT, "%s: decompresses to %llu bytes, the index says %llu",
                        zpath, (unsigned long long)made, (unsigned long long)want);
        goto done;
    }
    rc = ferry__atomic_commit(&w);
done:
    if (rc < 0)
        ferry__atomic_abort(&w);
    ZSTD_freeDStream(ds);
    ferry__free(buf);
    return rc;
}

/* The bytes all frames of a zstd file hold, as ZSTD_decompress reads them. */
static unsigned long long content_size(const uint8_t *p, size_t n)
{
    unsigned long long total = 0;
    while (n) {
        unsigned long long k = ZSTD_getFrameContentSize(p, n);
        size_t c = ZSTD_findFrameCompressedSize(p, n);
        if (k == ZSTD_CONTENTSIZE_UNKNOWN || k == ZSTD_CONTENTSIZE_ERROR)
            return k;
        if (ZSTD_isError(c) || total + k < total)
            return ZSTD_CONTENTSIZE_ERROR;
        total += k;
        p += c;
        n -= c;
    }
    return total;
}

/* A cached copy is trusted while the record beside it (.NAME.src) still matches
 * the zstd file's and the copy's size, mtime and inode: an edit of either, on
 * disk, decompresses the shard again. */
static int cache_record(const char *zpath, const char *cpath, char *out, size_t cap)
{
    struct stat a, b;
    if (stat(zpath, &a) != 0 || stat(cpath, &b) != 0)
        return -1;
    snprintf(out, cap, "%lld %lld.%09ld %lld %lld.%09ld %llu\n", (long long)a.st_size,
             (long long)a.st_mtim.tv_sec, a.st_mtim.tv_nsec, (long long)b.st_size,
             (long long)b.st_mtim.tv_sec, b.st_mtim.tv_nsec, (unsigned long long)b.st_ino);
    return 0;
}

static bool cache_fresh(const char *zpath, const char *cpath, const char *rpath)
{
    char want[160], got[160] = "";
    FILE *f = fopen(rpath, "r");
    bool ok = f && fgets(got, sizeof got, f) &&
              cache_record(zpath, cpath, want, sizeof want) == 0 && !strcmp(want, got);
    if (f)
        fclose(f);
    return ok;
}

static int cache_note(const char *zpath, const char *cpath, const char *rpath)
{
    char rec[160];
    if (cache_record(zpath, cpath, rec, sizeof rec) < 0)
        return ferry__err(FERRY_EIO, "%s: %s", cpath, strerror(errno));
    ferry__atomic_file w;
    int rc = ferry__atomic_open(&w, rpath);
    if (rc == 0 && (rc = ferry__atomic_write(&w, rec, strlen(rec))) == 0)
        return ferry__atomic_commit(&w);
    if (rc < 0)
        ferry__atomic_abort(&w);
    return rc;
}

/* The cache folder and its parents. */
static int make_dirs(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1;; c++) {
        if (*c && *c != '/')
            continue;
        char was = *c;
        *c = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return ferry__err(FERRY_EIO, "%s: cannot create: %s", p, strerror(errno));
        if (!(*c = was))
            return 0;
    }
}

/* Maps shard s, or decompresses its zstd file when the raw one is absent. */
static int load_shard(mds_ds *d, size_t s, uint64_t *zstd_left, uint64_t zstd_max)
{
    const ferry__mds_shard *e = &d->ix.shards[s];
    shard *sh = &d->sh[s];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d->dir, e->raw);
    int rc = ferry__guard_install();
    if (rc < 0)
        return rc;
    rc = ferry__map_file(&sh->map, path);
    if (rc == 0) {
        sh->p = sh->map.data;
        sh->size = sh->map.size;
        return 0;
    }
    if (rc != FERRY_ENOENT || !e->zip[0])
        return rc;
    char zpath[4096], cpath[4096], rpath[4096];
    snprintf(zpath, sizeof zpath, "%s/%s", d->dir, e->zip);
    ferry__map z;
    if ((rc = ferry__map_file(&z, zpath)) < 0)
        return ferry__err_prefix(rc, "%s is absent and its zstd file cannot be read", path);
    if (z.size != e->zip_bytes) {
        rc = ferry__err(FERRY_ECORRUPT, "%s: offset 0: the index says %llu bytes, the file has %zu",
                        zpath, (unsigned long long)e->zip_bytes, z.size);
        goto done;
    }
    unsigned long long want = z.size ? content_size(z.data, z.size) : 0;
    if (!z.size || want == ZSTD_CONTENTSIZE_ERROR) {
        rc = ferry__err(FERRY_ECORRUPT, "%s: offset 0: not a zstd frame", zpath);
        goto done;
    }
    if (want == ZSTD_CONTENTSIZE_UNKNOWN || want != e->raw_bytes) {
        rc = ferry__err(FERRY_ECORRUPT,
                        "%s: offset 0: the zstd frame holds %s bytes, the index says %llu", zpath,
                        want == ZSTD_CONTENTSIZE_UNKNOWN ? "an unknown number of" : "other",
                        (unsigned long long)e->raw_bytes);
        goto done;
    }
    if (d->cache) {
        /* decompressed onto disk once, then mapped: memory stays bounded */
        snprintf(cpath, sizeof cpath, "%s/%s", d->cache, e->raw);
        snprintf(rpath, sizeof rpath, "%s/.%s.src", d->cache, e->raw);
        snprintf(sh->from, sizeof sh->from, "cache");
        if (cache_fresh(zpath, cpath, rpath) && ferry__map_file(&sh->map, cpath) == 0 &&
            sh->map.size == want) {
            sh->p = sh->map.data;
            sh->size = sh->map.size;
            goto done;
        }
        ferry__unmap(&sh->map);
    }
    if (want > (d->cache ? zstd_max : *zstd_left)) {
        rc = ferry__err(FERRY_EOVERFLOW,
                        "%s: decompresses to %llu bytes: over what is left of the %llu-byte "
                        "bound on decompressed shards (zstd_max=)",
                        zpath, want, (unsigned long long)zstd_max);
        goto done;
    }
    if (d->cache) {
        if ((rc = make_dirs(d->cache)) < 0 || (rc = inflate_to_file(&z, zpath, cpath, want)) < 0 ||
            (rc = cache_note(zpath, cpath, rpath)) < 0 ||
            (rc = ferry__map_file(&sh->map, cpath)) < 0)
            goto done;
        sh->p = sh->map.data;
        sh->size = sh->map.size;
        goto done;
    }
    *zstd_left -= want;
    snprintf(sh->from, sizeof sh->from, "zstd");
    sh->owned = ferry__malloc(want ? (size_t)want : 1);
    if (!sh->owned) {
        rc = ferry__err(FERRY_ENOMEM, "%s: out of memory for %llu bytes", zpath, want);
        goto done;
    }
    size_t got = ZSTD_decompress(sh->owned, (size_t)want, z.data, z.size);
    if (ZSTD_isError(got) || got != want) {
        rc = ferry__err(FERRY_ECORRUPT, "%s: zstd: %s", zpath,
                        ZSTD_isError(got) ? ZSTD_getErrorName(got) : "fewer bytes than it says");
        goto done;
    }
    sh->p = sh->owned;
    sh->size = (size_t)want;
done:
    ferry__unmap(&z);
    return rc;
}

/* Checks shard s against the index, every sample's columns, and takes bounds. */
static int check_shard(mds_ds *d, size_t s)
{
    const ferry__mds_shard *e = &d->ix.shards[s];
    shard *sh = &d->sh[s];
    char path[8300];
    if (!strcmp(sh->from, "cache"))
        snprintf(path, sizeof path, "%s/%s (cached from %s/%s)", d->cache, e->raw, d->dir, e->zip);
    else
        snprintf(path, sizeof path, "%s/%s", d->dir, sh->from[0] ? e->zip : e->raw);
    if (sh->size != e->raw_bytes)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 0: the index says %llu bytes (shard %zu at index.json "
                          "offset %u), the file has %zu",
                          path, (unsigned long long)e->raw_bytes, s, e->offset, sh->size);
    if (sh->size < 8)
        return ferry__err(FERRY_ECORRUPT, "%s: offset 0: %zu bytes is too short for a shard", path,
                          sh->size);
    uint32_t n = ferry__load_le32(sh->p);
    if (n != e->samples)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 0: %u samples, but the index says %llu (index.json offset "
                          "%u)",
                          path, n, (unsigned long long)e->samples, e->offset);
    size_t table = 4 + 4 * ((size_t)n + 1);
    if (table > sh->size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 4: the offsets of %u samples run past the end", path, n);
    sh->n = n;
    uint32_t prev = ferry__load_le32(sh->p + 4);
    if (prev < table || prev > sh->size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset 4: the first sample's offset %u is not in [%zu, %zu]", path,
                          prev, table, sh->size);
    for (uint32_t j = 1; j <= n; j++) {
        uint32_t o = ferry__load_le32(sh->p + 4 + 4 * (size_t)j);
        if (o < prev || o > sh->size)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: offset %zu: sample %u's end %u is before its start %u or past "
                              "the end (%zu)",
                              path, 4 + 4 * (size_t)j, j - 1, o, prev, sh->size);
        prev = o;
    }
    if (prev != sh->size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset %zu: the samples end at %u, but the file has %zu bytes", path,
                          4 + 4 * (size_t)n, prev, sh->size);
    size_t off[FERRY_MAX_FIELDS], len[FERRY_MAX_FIELDS];
    for (uint32_t j = 0; j < n; j++) {
        int rc = locate_columns(d, s, j, off, len);
        if (rc < 0)
            return rc;
        for (int c = 0; c < d->ix.ncols; c++) {
            const ferry__mds_column *col = &d->ix.cols[c];
            uint64_t v = len[c];
            if (col->kind == FERRY__MDS_ARRAY_DYN) {
                int64_t shape[SHAPE_DIMS];
                int nd;
                if ((rc = array_shape(d, s, j, off[c], c, sh->p + off[c], len[c], shape, &nd, &v)) <
                    0)
                    return rc;
            }
            if (v > d->bound[c])
                d->bound[c] = v;
        }
    }
    return 0;
}

int ferry_dataset_mds(ferry_dataset **out, const ferry_mds_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->dir || !*o->dir)
        return ferry__err(FERRY_EINVAL, "mds: dir is empty");
    if (o->cache && !*o->cache)
        return ferry__err(FERRY_EINVAL, "mds: cache is empty");
    mds_ds *d = ferry__calloc(1, sizeof *d);
    char *text = NULL, *ipath = NULL;
    ferry_field *f = NULL;
    if (!d || !(d->dir = ferry__strdup(o->dir)) || !(ipath = ferry__malloc(strlen(o->dir) + 16)) ||
        !(f = ferry__calloc(FERRY_MAX_FIELDS, sizeof *f)))
        FERRY_FAIL(FERRY_ENOMEM, "mds: out of memory");
    size_t dl = strlen(d->dir);
    while (dl > 1 && d->dir[dl - 1] == '/')
        d->dir[--dl] = 0;
    sprintf(ipath, "%s/index.json", d->dir);
    size_t n = 0;
    FERRY_TRY(read_index(ipath, &text, &n));
    FERRY_TRY(ferry__mds_index_parse(&d->ix, ipath, text, n));
    ferry__free(text);
    text = NULL;
    d->sh = ferry__calloc(d->ix.nshards, sizeof *d->sh);
    if (!d->sh)
        FERRY_FAIL(FERRY_ENOMEM, "mds: out of memory for %zu shards", d->ix.nshards);
    uint64_t zmax = o->zstd_max ? o->zstd_max : DEFAULT_ZSTD_MAX, zleft = zmax;
    d->cache = o->cache;
    for (size_t s = 0; s < d->ix.nshards; s++) {
        FERRY_TRY(load_shard(d, s, &zleft, zmax));
        FERRY_TRY(check_shard(d, s));
        d->sh[s].first = d->len;
        d->len += d->sh[s].n;
    }
    int nf = 0;
    for (int c = 0; c < d->ix.ncols; c++) {
        const ferry__mds_column *col = &d->ix.cols[c];
        if (nf + 2 > FERRY_MAX_FIELDS)
            FERRY_FAIL(FERRY_EINVAL, "%s: more than %d fields", ipath, FERRY_MAX_FIELDS);
        ferry_field *x = &f[nf];
        d->field[c] = nf++;
        snprintf(x->name, sizeof x->name, "%s", col->name);
        x->dtype = col->dtype;
        if (col->kind == FERRY__MDS_ARRAY) {
            x->ndim = col->ndim;
            memcpy(x->shape, col->shape, sizeof x->shape);
        } else if (col->kind != FERRY__MDS_SCALAR) {
            x->ndim = 1;
            x->variable = 1;
            x->shape[0] = (int64_t)(d->bound[c] ? d->bound[c] : 1);
        }
        if (col->kind == FERRY__MDS_ARRAY_DYN) {
            ferry_field *y = &f[nf];
            d->shape_field[c] = nf++;
            snprintf(y->name, sizeof y->name, "%s.shape", col->name);
            y->dtype = FERRY_I64;
            y->ndim = 1;
            y->shape[0] = SHAPE_DIMS;
        }
    }
    ferry__free(ipath);
    uint64_t bytes = 0;
    for (size_t s = 0; s < d->ix.nshards; s++)
        bytes += d->sh[s].size;
    bool far = d->len && bytes / d->len >= FAR_HINT_MIN;
    d->cache = NULL;         /* the caller's string: not kept past open */
    const shard *sh = d->sh; /* the dataset owns d from here */
    size_t nsh = d->ix.nshards;
    rc = ferry_dataset_create(out, &mds_vtable, d, f, nf);
    rc = ferry__dataset_shards_at(out, rc, nsh ? &sh->first : NULL, sizeof *sh, nsh);
    if (rc == 0 && !far)
        (*out)->near_hints_only = true;
    ferry__free(f);
    return rc;
cleanup:
    ferry__free(text);
    ferry__free(ipath);
    ferry__free(f);
    mds_destroy(d);
    return rc;
}

int ferry__mds_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_mds_opts o = {.dir = s->location, .cache = ferry__spec_str(s, "cache")};
    int rc;
    if ((rc = ferry__spec_u64(s, "zstd_max", 1, UINT64_MAX, &o.zstd_max)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    return ferry_dataset_mds(out, &o);
}
