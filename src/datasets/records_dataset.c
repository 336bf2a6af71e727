/*
 * Datasets over a set of record shards: map-style through a global index (prefix
 * sums of the shards' record counts), or a stream that reads whole shards in a
 * per-epoch shuffled order.
 */
#include "ferry/records.h"
#include "ferry/sampler.h"
#include "spec.h"
#include "../formats/records_internal.h"
#include "../io/io.h"
#include "../io/remote.h"
#include "../core/guard.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SHARDS 1000000u

typedef struct shard_set {
    /* files[k] is NULL until a lazy set opens shard k (shard_file) */
    ferry_record_file **files;
    char **names;
    uint64_t *first; /* first[k] = records before shard k; first[n] = total */
    size_t n;
    bool big;                 /* records of 64 KiB and more on average: each worth reading ahead */
    _Atomic uint64_t **ahead; /* by shard: ferry__read_ahead's bits */
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    /* A remote set with a manifest opens its shards as they are first read, so that
     * the first batch waits for the shards it needs, not for the whole set: paths[k]
     * (its URL) and at[k] (its place in the manifest, for the identity check). */
    bool lazy;
    char **paths;
    size_t *at;
    uint64_t *sizes; /* the manifest's byte counts */
    uint64_t set_id;
    pthread_mutex_t mu; /* installs a lazily opened shard */
} shard_set;

static void set_free(shard_set *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->n; k++) {
        ferry_record_file_free(s->files ? s->files[k] : NULL);
        ferry__free(s->names ? s->names[k] : NULL);
        ferry__free(s->paths ? s->paths[k] : NULL);
        ferry__free(s->ahead ? (void *)s->ahead[k] : NULL);
    }
    ferry__free((void *)s->ahead);
    if (s->lazy)
        pthread_mutex_destroy(&s->mu);
    ferry__free(s->files);
    ferry__free(s->names);
    ferry__free(s->first);
    ferry__free(s->paths);
    ferry__free(s->at);
    ferry__free(s->sizes);
    ferry__free(s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Without a manifest, shards named NAME-%05d-of-%05d.ferry must all be there:
 * a writer that died while renaming its shards into place leaves some of them,
 * whole each, but not a whole set. */
static int check_complete(const char *dir, char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned k, total;
        int end = 0;
        const char *dash = strstr(names[i], "-of-");
        if (!dash || dash - names[i] < 6 ||
            sscanf(dash - 6, "-%5u-of-%5u.ferry%n", &k, &total, &end) != 2 || dash[-6] != '-' ||
            dash[-6 + end] != 0)
            continue;
        size_t prefix = (size_t)(dash - 6 - names[i]);
        unsigned found = 0;
        for (size_t j = 0; j < n; j++)
            found += !strncmp(names[j], names[i], prefix) && strlen(names[j]) == strlen(names[i]) &&
                     !strcmp(names[j] + prefix + 6, names[i] + prefix + 6);
        if (found != total)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: %u of the %u shards %.*s-*-of-%05u.ferry are there and there is "
                              "no manifest (a writer that did not finish?)",
                              dir, found, total, (int)prefix, names[i], total);
    }
    return 0;
}

/* The shard files of dir: the manifest's, in its order, else every *.ferry file
 * in name order. */
static int list_shards(const char *dir, char ***names, uint64_t **counts, uint64_t **bytes,
                       size_t *n, uint64_t *set_id)
{
    int rc = 0;
    *names = NULL;
    *counts = *bytes = NULL;
    *n = 0;
    *set_id = 0;
    char **ents = NULL;
    size_t nents = 0;
    char manifest[4096] = "";
    size_t cap = 0;
    /* the set's manifest named: no listing (an HTTP server has none) */
    size_t dl = strlen(dir);
    if (dl > 9 && !strcmp(dir + dl - 9, ".manifest"))
        snprintf(manifest, sizeof manifest, "%s", dir);
    else if ((rc = ferry__list_dir(dir, &ents, &nents)) < 0)
        return rc;
    for (size_t i = 0; i < nents; i++) {
        const char *name = ents[i];
        size_t len = strlen(name);
        if (len > 9 && !strcmp(name + len - 9, ".manifest")) {
            if (manifest[0]) {
                rc = ferry__err(FERRY_EINVAL,
                                "%s: more than one manifest (%s, %s): give the set's manifest", dir,
                                manifest + strlen(dir) + 1, name);
                break;
            }
            snprintf(manifest, sizeof manifest, "%s/%s", dir, name);
            continue;
        }
        if (len <= 6 || strcmp(name + len - 6, ".ferry"))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = ferry__realloc(*names, cap * sizeof *grown);
            if (!grown) {
                rc = ferry__err(FERRY_ENOMEM, "%s: out of memory", dir);
                break;
            }
            *names = grown;
        }
        if (!((*names)[*n] = ferry__strdup(name))) {
            rc = ferry__err(FERRY_ENOMEM, "%s: out of memory", dir);
            break;
        }
        (*n)++;
    }
    for (size_t i = 0; i < nents; i++)
        ferry__free(ents[i]);
    ferry__free(ents);
    if (rc == 0 && manifest[0]) {
        /* the manifest decides which files make the set */
        for (size_t k = 0; k < *n; k++)
            ferry__free((*names)[k]);
        ferry__free(*names);
        *names = NULL;
        *n = 0;
        ferry__manifest_entry *m = NULL;
        size_t count = 0;
        if ((rc = ferry__manifest_read(manifest, &m, &count, set_id)) < 0)
            return rc;
        *names = ferry__calloc(count, sizeof **names);
        *counts = ferry__calloc(count, sizeof **counts);
        *bytes = ferry__calloc(count, sizeof **bytes);
        if (!*names || !*counts || !*bytes)
            rc = ferry__err(FERRY_ENOMEM, "%s: out of memory", dir);
        for (size_t k = 0; rc == 0 && k < count; k++) {
            if (!((*names)[k] = ferry__strdup(m[k].file)))
                rc = ferry__err(FERRY_ENOMEM, "%s: out of memory", dir);
            (*counts)[k] = m[k].records;
            (*bytes)[k] = m[k].bytes;
            *n = k + 1;
        }
        ferry__free(m);
        return rc;
    }
    if (rc == 0 && *n == 0)
        rc = ferry__err(FERRY_ENOENT, "%s: no manifest and no .ferry shard files", dir);
    if (rc == 0)
        qsort(*names, *n, sizeof **names, cmp_str);
    if (rc == 0)
        rc = check_complete(dir, *names, *n);
    return rc;
}

static bool same_schema(const shard_set *s, const ferry_record_file *f)
{
    if (ferry_record_file_nfields(f) != s->nfields)
        return false;
    for (int i = 0; i < s->nfields; i++)
        if (memcmp(ferry_record_file_field(f, i), &s->fields[i], sizeof s->fields[i]) != 0)
            return false;
    return true;
}

/* A shard's identity against its set: with a manifest of a set id, each shard must
 * carry that id and its place in the manifest's list; without a manifest, no shard
 * may carry one (it belongs to a set whose manifest is missing). */
static int check_identity(const char *path, const ferry_record_file *f, bool manifest,
                          uint64_t set_id, size_t pos)
{
    uint64_t id;
    uint32_t index;
    bool has = ferry__record_file_set(f, &id, &index);
    if (!manifest && has)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: shard %u of set %016llx, whose manifest is missing (a writer that "
                          "did not finish?)",
                          path, index, (unsigned long long)id);
    if (manifest && set_id && !has)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: carries no set identity; the manifest is of set %016llx", path,
                          (unsigned long long)set_id);
    if (manifest && set_id && (id != set_id || index != pos))
        return ferry__err(FERRY_ECORRUPT,
                          "%s: shard %u of set %016llx; the manifest names it as shard %zu of set "
                          "%016llx (a file of another write)",
                          path, index, (unsigned long long)id, pos, (unsigned long long)set_id);
    return 0;
}

/* The folder of a set's shards: location itself, or the folder of the manifest it
 * names. */
static const char *set_dir(const char *location, char *buf, size_t cap)
{
    size_t n = strlen(location);
    const char *slash = strrchr(location, '/');
    if (n <= 9 || strcmp(location + n - 9, ".manifest"))
        return location;
    snprintf(buf, cap, "%.*s", slash ? (int)(slash - location) : 1, slash ? location : ".");
    return buf;
}

static int set_open_once(shard_set **out, const char *location, uint64_t shard_id,
                         uint64_t num_shards, bool *changed)
{
    char dirbuf[4096];
    const char *dir = set_dir(location, dirbuf, sizeof dirbuf);
    int rc = 0;
    char **names = NULL;
    uint64_t *counts = NULL, *bytes = NULL, set_id = 0;
    size_t n = 0;
    uint64_t total_bytes = 0;
    shard_set *s = NULL;
    *out = NULL;
    if (num_shards == 0 || shard_id >= num_shards || num_shards > MAX_SHARDS)
        return ferry__err(FERRY_EINVAL, "records: shard_id %llu is outside [0, num_shards %llu)",
                          (unsigned long long)shard_id, (unsigned long long)num_shards);
    FERRY_TRY(list_shards(location, &names, &counts, &bytes, &n, &set_id));
    s = ferry__calloc(1, sizeof *s);
    size_t take = n > shard_id ? (n - shard_id + num_shards - 1) / num_shards : 0;
    if (!s)
        FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
    s->files = ferry__calloc(take ? take : 1, sizeof *s->files);
    s->names = ferry__calloc(take ? take : 1, sizeof *s->names);
    s->first = ferry__calloc(take + 1, sizeof *s->first);
    s->ahead = ferry__calloc(take ? take : 1, sizeof *s->ahead);
    if (!s->files || !s->names || !s->first || !s->ahead)
        FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
    if (take == 0)
        FERRY_FAIL(FERRY_EINVAL, "%s: %zu shards leave none for shard_id %llu of %llu", dir, n,
                   (unsigned long long)shard_id, (unsigned long long)num_shards);
    bool remote = ferry__is_remote(dir);
    /* a remote set with a manifest: the shards after the first are opened when read */
    if (remote && counts) {
        s->lazy = true;
        s->set_id = set_id;
        pthread_mutex_init(&s->mu, NULL);
        s->paths = ferry__calloc(take, sizeof *s->paths);
        s->at = ferry__calloc(take, sizeof *s->at);
        s->sizes = ferry__calloc(take, sizeof *s->sizes);
        if (!s->paths || !s->at || !s->sizes)
            FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
        uint64_t all = 0; /* every shard it reads stays open: they must fit in the cache */
        for (size_t p = shard_id; p < n; p += num_shards)
            all += bytes[p];
        FERRY_TRY(ferry__remote_fits(dir, take, all));
    }
    /* the versions of the shards after the first are learnt in the background
     * (HEADs, in file order) while the first one opens */
    for (size_t p = shard_id + num_shards, k = 1; s->lazy && p < n; p += num_shards, k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[p]);
        if (!(s->paths[k] = ferry__strdup(path)))
            FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
        ferry__remote_check_set(path, ferry__records_check_copy);
    }
    if (s->lazy)
        ferry__remote_revalidate(s->paths + 1, take - 1, 0);
    for (size_t p = shard_id; p < n; p += num_shards) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[p]);
        if (remote) /* each shard's CRCs checked before its copy enters the cache */
            ferry__remote_check_set(path, ferry__records_check_copy);
        size_t k = s->n;
        if (!(s->names[k] = ferry__strdup(names[p])))
            FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
        s->n++;
        if (s->lazy && k > 0) {
            s->at[k] = p;
            s->sizes[k] = bytes[p];
            s->first[k + 1] = s->first[k] + counts[p];
            total_bytes += bytes[p];
            if (!(s->ahead[k] = ferry__ahead_bits(bytes[p])))
                FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
            continue;
        }
        if (s->lazy)
            s->at[k] = p;
        uint64_t size;
        int64_t mtime;
        if (ferry__stat(path, &size, &mtime) < 0) {
            *changed = counts != NULL; /* a writer may have just replaced the set */
            FERRY_FAIL(FERRY_ENOENT, "%s: the manifest names %s, which is missing", dir, names[p]);
        }
        if (bytes && size != bytes[p])
            FERRY_FAIL(FERRY_ECORRUPT, "%s: %llu bytes, the manifest says %llu", path,
                       (unsigned long long)size, (unsigned long long)bytes[p]);
        if ((rc = ferry_record_file_open(&s->files[k], path, 0)) < 0) {
            *changed = rc == FERRY_ENOENT && counts != NULL; /* removed since the stat */
            goto cleanup;
        }
        FERRY_TRY(check_identity(path, s->files[k], counts != NULL, set_id, p));
        uint64_t c = ferry_record_file_count(s->files[k]);
        if (counts && c != counts[p])
            FERRY_FAIL(FERRY_ECORRUPT, "%s: %llu records, the manifest says %llu", path,
                       (unsigned long long)c, (unsigned long long)counts[p]);
        if (k == 0) {
            s->nfields = ferry_record_file_nfields(s->files[0]);
            for (int i = 0; i < s->nfields; i++)
                s->fields[i] = *ferry_record_file_field(s->files[0], i);
        } else if (!same_schema(s, s->files[k])) {
            FERRY_FAIL(FERRY_ECORRUPT, "%s: its fields differ from %s's", path, s->names[0]);
        }
        s->first[k + 1] = s->first[k] + c;
        total_bytes += size;
        if (!(s->ahead[k] = ferry__ahead_bits(size)))
            FERRY_FAIL(FERRY_ENOMEM, "records: out of memory");
    }
    s->big = s->first[s->n] && total_bytes / s->first[s->n] >= ((uint64_t)64 << 10);
    *out = s;
    s = NULL;
cleanup:
    set_free(s);
    for (size_t k = 0; k < n; k++)
        ferry__free(names[k]);
    ferry__free(names);
    ferry__free(counts);
    ferry__free(bytes);
    return rc;
}

/* A set replaced between reading its manifest and opening its shards (whose old
 * generation the writer then removes) is opened again, from the new manifest. */
static int set_open(shard_set **out, const char *dir, uint64_t shard_id, uint64_t num_shards)
{
    for (int tries = 0;; tries++) {
        bool changed = false;
        int rc = set_open_once(out, dir, shard_id, num_shards, &changed);
        if (rc != FERRY_ENOENT || !changed || tries == 8)
            return rc;
    }
}

int ferry_records_shards(const char *location, char ***paths, size_t *n)
{
    char dirbuf[4096];
    const char *dir = location ? set_dir(location, dirbuf, sizeof dirbuf) : NULL;
    int rc = 0;
    char **names = NULL;
    uint64_t *counts = NULL, *bytes = NULL, set_id;
    size_t count = 0;
    if (!paths || !n)
        return ferry__err(FERRY_EINVAL, "records: NULL argument");
    *paths = NULL;
    *n = 0;
    if (!dir)
        return ferry__err(FERRY_EINVAL, "records: dir is NULL");
    FERRY_TRY(list_shards(location, &names, &counts, &bytes, &count, &set_id));
    *paths = ferry__calloc(count ? count : 1, sizeof **paths);
    if (!*paths)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", dir);
    for (size_t k = 0; k < count; k++) {
        size_t len = strlen(dir) + strlen(names[k]) + 2;
        if (!((*paths)[k] = ferry__malloc(len)))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", dir);
        snprintf((*paths)[k], len, "%s/%s", dir, names[k]);
        *n = k + 1;
    }
    ferry__remote_check_paths(*paths, *n, ferry__records_check_copy);
cleanup:
    if (rc < 0) {
        ferry_records_shards_free(*paths, *n);
        *paths = NULL;
        *n = 0;
    }
    for (size_t k = 0; k < count; k++)
        ferry__free(names[k]);
    ferry__free(names);
    ferry__free(counts);
    ferry__free(bytes);
    return rc;
}

void ferry_records_shards_free(char **paths, size_t n)
{
    if (!paths)
        return;
    for (size_t k = 0; k < n; k++)
        ferry__free(paths[k]);
    ferry__free(paths);
}

/* ---- Map-style ---- */

static uint64_t set_len(void *self)
{
    shard_set *s = self;
    return s->first[s->n];
}

/* The shard holding global record i: the last k with first[k] <= i. */
static size_t shard_of(const shard_set *s, uint64_t i)
{
    size_t lo = 0, hi = s->n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->first[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Shard k of a lazy set, opened (fetched through the node cache) on first use and
 * checked as set_open_once checks the others: its identity, record count, size and
 * fields. Threads that want it at once may each open it (the cache fetches it once);
 * the first to finish installs it. */
static int shard_file(shard_set *s, size_t k, ferry_record_file **out)
{
    ferry_record_file *f = __atomic_load_n(&s->files[k], __ATOMIC_ACQUIRE);
    int rc = 0;
    if (f) {
        *out = f;
        return 0;
    }
    const char *path = s->paths[k];
    uint64_t want = s->first[k + 1] - s->first[k];
    FERRY_TRY(ferry_record_file_open(&f, path, 0));
    FERRY_TRY(check_identity(path, f, true, s->set_id, s->at[k]));
    if (ferry_record_file_bytes(f) != s->sizes[k])
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %llu bytes, the manifest says %llu", path,
                   (unsigned long long)ferry_record_file_bytes(f), (unsigned long long)s->sizes[k]);
    if (ferry_record_file_count(f) != want)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %llu records, the manifest says %llu", path,
                   (unsigned long long)ferry_record_file_count(f), (unsigned long long)want);
    if (!same_schema(s, f))
        FERRY_FAIL(FERRY_ECORRUPT, "%s: its fields differ from %s's", path, s->names[0]);
    pthread_mutex_lock(&s->mu);
    if (s->files[k]) { /* another thread was first */
        ferry_record_file_free(f);
    } else {
        __atomic_store_n(&s->files[k], f, __ATOMIC_RELEASE);
    }
    f = s->files[k];
    pthread_mutex_unlock(&s->mu);
    *out = f;
    /* the shards after it, in file order, are likely next (FERRY_REMOTE_AHEAD) */
    ferry__prefetch_ahead(s->paths, s->n, k + 1, 0);
    return 0;
cleanup:
    ferry_record_file_free(f);
    return rc;
}

static int set_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    shard_set *s = self;
    size_t k = shard_of(s, i);
    ferry_record_file *f;
    int rc = shard_file(s, k, &f);
    if (rc < 0)
        return rc;
    return ferry__record_file_read_by(f, i - s->first[k], out, ctx, s);
}

int ferry__records_raw(const ferry_dataset *ds, uint64_t i, const void **payload, size_t *n,
                       int *compressed)
{
    const shard_set *s = ds->self;
    if (ds->vt->get != set_get)
        return ferry__err(FERRY_EINVAL, "records: not a records dataset");
    if (i >= s->first[s->n])
        return ferry__err(FERRY_ERANGE, "records: record %llu is past the last (%llu)",
                          (unsigned long long)i, (unsigned long long)s->first[s->n]);
    size_t k = shard_of(s, i);
    ferry_record_file *f;
    int rc = shard_file((shard_set *)s, k, &f);
    if (rc < 0)
        return rc;
    *compressed = ferry__record_file_compressed(f);
    uint64_t off;
    return ferry_record_file_raw(f, i - s->first[k], payload, n, &off);
}

/* Later batches: records i..last (consecutive) lie together in their shards; have
 * the kernel read each shard's part of them ahead, when it is large enough to be
 * worth a call. */
static void read_ahead_run(shard_set *s, uint64_t i, uint64_t last)
{
    size_t j = shard_of(s, i);
    while (i <= last && j < s->n) {
        uint64_t end = s->first[j + 1] - 1 < last ? s->first[j + 1] - 1 : last;
        const void *p, *q;
        size_t n, m;
        if (!__atomic_load_n(&s->files[j], __ATOMIC_ACQUIRE)) {
            ferry__remote_prefetch(s->paths[j]); /* a lazy set's shard, not yet open */
        } else if (end >= i && ferry__record_file_span(s->files[j], i - s->first[j], &p, &n) == 0 &&
                   ferry__record_file_span(s->files[j], end - s->first[j], &q, &m) == 0) {
            uintptr_t a = (uintptr_t)p, e = (uintptr_t)q + m;
            if (e > a && e - a >= ((uintptr_t)64 << 10))
                ferry__read_ahead(s->ahead[j], ferry__record_file_base(s->files[j]), a, e, false);
        }
        i = end + 1;
        j++;
    }
}

/* soon: pull the grain's index entries and the starts of its records into the
 * cache. Later batches: runs of consecutive records (a sequential read), found
 * from the indices alone, so that a shuffled order of small records costs no
 * index lookups here; where records are large, each one on its own. */
static void hint_mapped(shard_set *s, const uint64_t *indices, size_t count, int soon)
{
    uint64_t total = s->first[s->n];
    if (soon) {
        for (size_t k = 0; k < count; k++) {
            if (indices[k] >= total)
                continue;
            size_t j = shard_of(s, indices[k]);
            const void *p;
            size_t n;
            if (!__atomic_load_n(&s->files[j], __ATOMIC_ACQUIRE) ||
                ferry__record_file_span(s->files[j], indices[k] - s->first[j], &p, &n) < 0)
                continue;
            __builtin_prefetch(p);
            __builtin_prefetch((const char *)p + 64);
        }
        return;
    }
    for (size_t k = 0; s->lazy && k < count; k++) /* later batches' shards: fetched ahead */
        if (indices[k] < total) {
            size_t j = shard_of(s, indices[k]);
            if (!__atomic_load_n(&s->files[j], __ATOMIC_ACQUIRE))
                ferry__remote_prefetch(s->paths[j]);
        }
    for (size_t k = 0; k < count;) {
        size_t e = k + 1;
        while (e < count && indices[e] == indices[e - 1] + 1 && indices[e] < total)
            e++;
        if ((e - k >= 2 || s->big) && indices[k] < total)
            read_ahead_run(s, indices[k], indices[e - 1]);
        k = e;
    }
}

/* The index lies in the mapped shards: a shard cut short under the reader ends the
 * hint (its records' reads report it). */
static int hint_fault(const ferry__reading *rd, uintptr_t addr)
{
    const shard_set *s = rd->arg;
    for (size_t k = 0; k < s->n; k++)
        if (__atomic_load_n(&s->files[k], __ATOMIC_ACQUIRE) &&
            ferry__record_file_holds(s->files[k], addr))
            return ferry__guard_err(addr, ferry__record_file_name(s->files[k]), NULL,
                                    "reading ahead");
    return ferry__guard_err(addr, NULL, NULL, "reading ahead");
}

/* Under a worker's direct region a fault fails the sample in hand, as the read
 * of its record would. */
FERRY__GUARDED_HINT(set_hint, hint_mapped, hint_fault)

static void set_destroy(void *self)
{
    set_free(self);
}

static const ferry_dataset_vtable set_vtable = {
    .len = set_len, .get = set_get, .destroy = set_destroy, .hint = set_hint};

int ferry_dataset_records(ferry_dataset **out, const char *dir, uint64_t shard_id,
                          uint64_t num_shards)
{
    *out = NULL;
    if (!dir)
        return ferry__err(FERRY_EINVAL, "records: dir is NULL");
    shard_set *s;
    int rc = set_open(&s, dir, shard_id, num_shards);
    if (rc < 0)
        return rc;
    uint64_t n = s->n;
    const uint64_t *first = s->first; /* the dataset owns s from here */
    rc = ferry_dataset_create(out, &set_vtable, s, s->fields, s->nfields);
    return ferry__dataset_shards_at(out, rc, first, sizeof *first, n);
}

/* ---- Stream ---- */

typedef struct set_stream {
    shard_set *set;
    uint64_t seed;
} set_stream;

typedef struct set_iter {
    const set_stream *st;
    ferry_permutation order;
    uint64_t pos, step, record; /* position in the shuffled order; record in that shard */
} set_iter;

static int st_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    set_stream *st = self;
    set_iter *it = ferry__calloc(1, sizeof *it);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "records stream: out of memory");
    it->st = st;
    ferry_permutation_init(&it->order, st->set->n, st->seed, epoch);
    it->pos = shard;
    it->step = nshards;
    *iter = it;
    return 0;
}

static int st_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    set_iter *it = iter;
    const shard_set *s = it->st->set;
    for (;;) {
        if (it->pos >= s->n)
            return FERRY_END;
        uint64_t file = ferry_permutation_at(&it->order, it->pos);
        if (it->record < s->first[file + 1] - s->first[file]) {
            ferry_record_file *f;
            int rc = shard_file((shard_set *)s, file, &f);
            if (rc < 0)
                return rc;
            out->pos.a = file;
            out->pos.b = it->record;
            return ferry_record_file_read(f, it->record++, out, ctx);
        }
        it->pos += it->step;
        it->record = 0;
    }
}

static void st_close(void *iter)
{
    ferry__free(iter);
}

static void st_destroy(void *self)
{
    set_stream *st = self;
    set_free(st->set);
    ferry__free(st);
}

/* The state: the position in the epoch's order of shards and the record in that
 * shard (16 bytes). A sample's pos: a = its shard file, b = its record. */
static int st_save(void *iter, ferry_state *w)
{
    set_iter *it = iter;
    ferry_state_put_u64(w, it->pos);
    ferry_state_put_u64(w, it->record);
    return 0;
}

static int st_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    (void)ctx;
    set_iter *it = iter;
    uint64_t pos, record;
    int rc;
    if ((rc = ferry_state_get_u64(r, &pos)) < 0 || (rc = ferry_state_get_u64(r, &record)) < 0)
        return rc;
    const shard_set *s = it->st->set;
    if (pos % it->step != it->pos % it->step ||
        (pos < s->n && record > s->first[ferry_permutation_at(&it->order, pos) + 1] -
                                    s->first[ferry_permutation_at(&it->order, pos)]))
        return ferry__err(FERRY_ECORRUPT,
                          "records stream: the state names shard %llu, record %llu, which this "
                          "stream shard does not hold",
                          (unsigned long long)pos, (unsigned long long)record);
    it->pos = pos;
    it->record = record;
    return 0;
}

static int st_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    const shard_set *s = ((set_iter *)iter)->st->set;
    if (pos->a >= s->n || pos->b >= s->first[pos->a + 1] - s->first[pos->a])
        return ferry__err(FERRY_ERANGE, "records stream: no record %llu in shard %llu of %llu",
                          (unsigned long long)pos->b, (unsigned long long)pos->a,
                          (unsigned long long)s->n);
    ferry_record_file *f;
    int rc = shard_file((shard_set *)s, pos->a, &f);
    return rc < 0 ? rc : ferry_record_file_read(f, pos->b, out, ctx);
}

static const ferry_stream_vtable stream_vtable = {st_open, st_next,    st_close, st_destroy,
                                                  st_save, st_restore, st_fetch};

int ferry_stream_records(ferry_stream **out, const char *dir, uint64_t seed)
{
    *out = NULL;
    if (!dir)
        return ferry__err(FERRY_EINVAL, "records: dir is NULL");
    set_stream *st = ferry__calloc(1, sizeof *st);
    if (!st)
        return ferry__err(FERRY_ENOMEM, "records stream: out of memory");
    st->seed = seed;
    int rc = set_open(&st->set, dir, 0, 1);
    if (rc < 0) {
        ferry__free(st);
        return rc;
    }
    rc = ferry_stream_create(out, &stream_vtable, st, st->set->fields, st->set->nfields);
    if (rc == 0)
        (*out)->fetch_anywhere = true; /* mapped shards */
    return rc;
}

int ferry__records_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s)
{
    uint64_t shard = 0, of = 1, seed = 0;
    int stream = 0, rc;
    if ((rc = ferry__spec_u64(s, "shard", 0, MAX_SHARDS - 1, &shard)) < 0 ||
        (rc = ferry__spec_u64(s, "of", 1, MAX_SHARDS, &of)) < 0 ||
        (rc = ferry__spec_bool(s, "stream", &stream)) < 0 ||
        (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &seed)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (stream) {
        if (shard != 0 || of != 1)
            return ferry__err(FERRY_EINVAL, "source records: a stream is split by the loader's "
                                            "ranks and shards, not shard=/of=");
        return st ? ferry_stream_records(st, s->location, seed)
                  : ferry__err(FERRY_EINVAL, "source records: stream=1 makes a stream; open it "
                                             "with ferry_source_open");
    }
    return ferry_dataset_records(ds, s->location, shard, of);
}
