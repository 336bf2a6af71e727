/*
 * WebDataset tar shards as datasets: map-style through a member index (each
 * sample's members' offsets and sizes), or a stream over tars in a per-epoch
 * shuffled order.
 */
#include "ferry/wds.h"
#include "ferry/sampler.h"
#include "shard_stream.h"
#include "../io/remote.h"
#include "spec.h"
#include "../formats/tar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_INFER 100
#define DEFAULT_MAX_MEMBER ((uint64_t)256 << 20)
#define CLS_MAX 32 /* bytes of a .cls member */
#define MAX_EXTS (FERRY_MAX_FIELDS - 1)

typedef struct member {
    uint64_t off, size; /* its data */
    int32_t ext;        /* in the scan's table; after the schema, the field (-1: not read) */
} member;

typedef struct sample {
    uint64_t member0; /* its members: member0 .. member0 + nmem */
    uint64_t key_off; /* in the key pool */
    uint64_t hoff;    /* offset of its first header */
    uint32_t file, key_len, nmem;
} sample;

typedef struct wds {
    ferry__shard_files files;
    ferry_wds_opts o;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS]; /* 0 is "__key__" */
    bool cls[FERRY_MAX_FIELDS];
    /* the scan: extensions, samples and members */
    int next;
    char exts[MAX_EXTS][FERRY_MAX_NAME];
    uint64_t ext_max[MAX_EXTS];
    uint64_t key_max;
    sample *samples;
    uint64_t nsamples, cap_samples;
    member *members;
    uint64_t nmembers, cap_members;
    char *keys;
    uint64_t keys_len, cap_keys;
    ferry__file *fds; /* map-style */
} wds;

static void wds_free(wds *w)
{
    if (!w)
        return;
    for (size_t k = 0; w->fds && k < w->files.n; k++)
        ferry__file_close(&w->fds[k]);
    ferry__free(w->fds);
    ferry__free(w->samples);
    ferry__free(w->members);
    ferry__free(w->keys);
    ferry__shard_files_free(&w->files);
    ferry__free(w);
}

static bool want_tar(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".tar")) ||
           (n > 7 && !strcmp(name + n - 7, ".tar.gz")) ||
           (n > 4 && !strcmp(name + n - 4, ".tgz")) || (n > 8 && !strcmp(name + n - 8, ".tar.zst"));
}

/* KEY.EXT: the key's length and the extension. */
static int split(const char *file, const ferry__tar_member *m, size_t *key_len, const char **ext)
{
    const char *base = strrchr(m->name, '/');
    base = base ? base + 1 : m->name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base || !dot[1])
        return ferry__err(FERRY_ECORRUPT,
                          "%s: member %s at offset %llu: not a WebDataset name (KEY.EXT)", file,
                          m->name, (unsigned long long)m->header_off);
    if (strlen(dot + 1) >= FERRY_MAX_NAME)
        return ferry__err(FERRY_ECORRUPT, "%s: member %s at offset %llu: extension over %d bytes",
                          file, m->name, (unsigned long long)m->header_off, FERRY_MAX_NAME - 1);
    if (!ferry__utf8_valid(dot + 1, strlen(dot + 1))) {
        char esc[512];
        return ferry__err(FERRY_ECORRUPT,
                          "%s: member \"%s\" at offset %llu: the extension is not UTF-8", file,
                          ferry__escape(esc, sizeof esc, m->name, strlen(m->name)),
                          (unsigned long long)m->header_off);
    }
    *key_len = (size_t)(dot - m->name);
    *ext = dot + 1;
    return 0;
}

static int parse_cls(const char *file, const char *key, const uint8_t *p, size_t n, int64_t *out)
{
    size_t i = 0, e = n;
    while (i < e && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
        i++;
    while (e > i && (p[e - 1] == ' ' || p[e - 1] == '\n' || p[e - 1] == '\r' || p[e - 1] == '\t'))
        e--;
    char buf[CLS_MAX + 1];
    if (e - i == 0 || e - i > CLS_MAX)
        goto bad;
    memcpy(buf, p + i, e - i);
    buf[e - i] = 0;
    if (!ferry__parse_i64(buf, INT64_MIN, INT64_MAX, out))
        goto bad;
    return 0;
bad:
    return ferry__err(FERRY_ECORRUPT, "%s: sample %s: its .cls is not an integer", file, key);
}

/* ---- The scan: members grouped into samples ---- */

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    size_t bytes;
    if (!ferry__mul_size((size_t)c, elem, &bytes))
        return ferry__err(FERRY_ENOMEM, "wds: the index does not fit in memory");
    void *g = ferry__realloc(*p, bytes);
    if (!g)
        return ferry__err(FERRY_ENOMEM, "wds: out of memory for the index");
    *p = g;
    *cap = c;
    return 0;
}

static int ext_id(wds *w, const char *path, const ferry__tar_member *m, const char *ext)
{
    for (int i = 0; i < w->next; i++)
        if (!strcmp(w->exts[i], ext))
            return i;
    if (w->next == MAX_EXTS)
        return ferry__err(FERRY_ERANGE,
                          "%s: member %s at offset %llu: more than %d extensions: choose some "
                          "with fields=",
                          path, m->name, (unsigned long long)m->header_off, MAX_EXTS);
    snprintf(w->exts[w->next], FERRY_MAX_NAME, "%s", ext);
    w->ext_max[w->next] = 0;
    return w->next++;
}

/* Adds the samples of file k (up to `limit` samples in all) to the index. */
static int scan(wds *w, uint32_t k, uint64_t limit)
{
    const char *path = w->files.paths[k];
    ferry__tar tar;
    int rc = ferry__tar_open(&tar, path, path, FERRY__COMP_AUTO, 0, 0);
    if (rc < 0)
        return rc;
    char *key = ferry__malloc(FERRY__TAR_MAX_NAME + 1);
    size_t key_len = 0;
    bool open_sample = false;
    uint64_t seen_mask = 0;
    if (!key)
        FERRY_FAIL(FERRY_ENOMEM, "wds: out of memory");
    for (;;) {
        ferry__tar_member m;
        rc = ferry__tar_next(&tar, &m);
        if (rc == FERRY_END) {
            rc = 0;
            break;
        }
        if (rc < 0)
            goto cleanup;
        size_t kl;
        const char *ext;
        FERRY_TRY(split(path, &m, &kl, &ext));
        if (!open_sample || kl != key_len || memcmp(key, m.name, kl)) {
            if (w->nsamples >= limit)
                break;
            memcpy(key, m.name, kl);
            key_len = kl;
            open_sample = true;
            seen_mask = 0;
            FERRY_TRY(
                grow((void **)&w->samples, &w->cap_samples, w->nsamples + 1, sizeof *w->samples));
            FERRY_TRY(grow((void **)&w->keys, &w->cap_keys, w->keys_len + kl, 1));
            sample *s = &w->samples[w->nsamples++];
            s->member0 = w->nmembers;
            s->nmem = 0;
            s->key_off = w->keys_len;
            s->key_len = (uint32_t)kl;
            s->hoff = m.header_off;
            s->file = k;
            memcpy(w->keys + w->keys_len, key, kl);
            w->keys_len += kl;
            if (kl > w->key_max)
                w->key_max = kl;
        }
        int id = ext_id(w, path, &m, ext);
        if (id < 0)
            FERRY_FAIL(id, "%s", ferry_last_errmsg());
        if (seen_mask & ((uint64_t)1 << id))
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: member %s at offset %llu: sample %.*s has a .%s already", path, m.name,
                       (unsigned long long)m.header_off, (int)key_len, key, ext);
        seen_mask |= (uint64_t)1 << id;
        FERRY_TRY(grow((void **)&w->members, &w->cap_members, w->nmembers + 1, sizeof *w->members));
        member *mb = &w->members[w->nmembers++];
        mb->off = m.data_off;
        mb->size = m.size;
        mb->ext = id;
        w->samples[w->nsamples - 1].nmem++;
        if (m.size > w->ext_max[id])
            w->ext_max[id] = m.size;
    }
cleanup:
    ferry__free(key);
    ferry__tar_close(&tar);
    return rc;
}

static int add_field(wds *w, const char *name, int ext)
{
    if (w->nfields == FERRY_MAX_FIELDS)
        return ferry__err(FERRY_EINVAL, "wds: more than %d fields", FERRY_MAX_FIELDS - 1);
    ferry_field *f = &w->fields[w->nfields];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    w->cls[w->nfields] = !strcmp(name, "cls");
    if (w->cls[w->nfields]) {
        f->dtype = FERRY_I64;
    } else {
        uint64_t b = w->o.max ? w->o.max : ext >= 0 && w->ext_max[ext] ? w->ext_max[ext] : 1;
        f->dtype = FERRY_U8;
        f->ndim = 1;
        f->variable = 1;
        f->shape[0] = (int64_t)b;
    }
    w->nfields++;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Fields from the scan (or the chosen ones); members' ext ids become field numbers. */
static int build_schema(wds *w, const char *chosen)
{
    int rc;
    int32_t map[MAX_EXTS];
    memset(&w->fields[0], 0, sizeof w->fields[0]);
    snprintf(w->fields[0].name, sizeof w->fields[0].name, "__key__");
    w->fields[0].dtype = FERRY_U8;
    w->fields[0].ndim = 1;
    w->fields[0].variable = 1;
    w->fields[0].shape[0] = (int64_t)(w->key_max ? w->key_max : 1);
    w->nfields = 1;
    for (int i = 0; i < MAX_EXTS; i++)
        map[i] = -1;
    if (chosen) {
        char buf[2048];
        if (strlen(chosen) >= sizeof buf)
            return ferry__err(FERRY_EINVAL, "wds: fields= is too long");
        snprintf(buf, sizeof buf, "%s", chosen);
        char *save = NULL;
        for (char *e = strtok_r(buf, ";", &save); e; e = strtok_r(NULL, ";", &save)) {
            int id = -1;
            for (int i = 0; i < w->next; i++)
                if (!strcmp(w->exts[i], e))
                    id = i;
            if (strlen(e) >= FERRY_MAX_NAME || !strcmp(e, "__key__"))
                return ferry__err(FERRY_EINVAL, "wds: fields= names \"%.64s\"", e);
            if (id >= 0)
                map[id] = w->nfields;
            if ((rc = add_field(w, e, id)) < 0)
                return rc;
        }
        if (w->nfields == 1)
            return ferry__err(FERRY_EINVAL, "wds: fields= is empty");
    } else {
        char names[MAX_EXTS][FERRY_MAX_NAME];
        memcpy(names, w->exts, sizeof names);
        qsort(names, (size_t)w->next, FERRY_MAX_NAME, cmp_name);
        for (int j = 0; j < w->next; j++)
            for (int i = 0; i < w->next; i++)
                if (!strcmp(w->exts[i], names[j])) {
                    map[i] = w->nfields;
                    if ((rc = add_field(w, names[j], i)) < 0)
                        return rc;
                }
        if (w->nfields == 1)
            return ferry__err(FERRY_ECORRUPT, "%s: no members", w->files.paths[0]);
    }
    for (uint64_t i = 0; i < w->nmembers; i++)
        w->members[i].ext = map[w->members[i].ext];
    return ferry__check_fields(w->fields, w->nfields);
}

/* Map-style: a member of a read field over max_member is refused at open, as a
 * stream refuses it when it reads it (the field's slot is its largest member). */
static int check_member_sizes(const wds *w)
{
    for (uint64_t i = 0; i < w->nsamples; i++) {
        const sample *s = &w->samples[i];
        for (uint64_t m = s->member0; m < s->member0 + s->nmem; m++) {
            const member *mb = &w->members[m];
            if (mb->ext < 0 || mb->size <= w->o.max_member)
                continue;
            return ferry__err(FERRY_EOVERFLOW,
                              "%s: sample %.*s: its .%s member at offset %llu: %llu bytes, over "
                              "the limit of %llu (max_member=)",
                              w->files.paths[s->file], (int)s->key_len, w->keys + s->key_off,
                              w->fields[mb->ext].name, (unsigned long long)mb->off,
                              (unsigned long long)mb->size, (unsigned long long)w->o.max_member);
        }
    }
    return 0;
}

/* Missing fields: which of the sample's fields are there. */
static uint64_t present(const wds *w, const sample *s)
{
    uint64_t mask = 1; /* the key */
    for (uint64_t m = s->member0; m < s->member0 + s->nmem; m++)
        if (w->members[m].ext >= 0)
            mask |= (uint64_t)1 << w->members[m].ext;
    return mask;
}

static uint64_t all_fields(const wds *w)
{
    return w->nfields == 64 ? UINT64_MAX : (((uint64_t)1 << w->nfields) - 1);
}

static int missing_error(const wds *w, const char *path, const char *key, size_t key_len,
                         uint64_t hoff, uint64_t mask)
{
    int k = 1;
    while (k < w->nfields && (mask & ((uint64_t)1 << k)))
        k++;
    return ferry__err(FERRY_ENOENT,
                      "%s: sample %.*s at offset %llu has no .%s (missing=skip leaves such "
                      "samples out)",
                      path, (int)key_len, key, (unsigned long long)hoff, w->fields[k].name);
}

static int wds_open(wds **out, const char *location, const ferry_wds_opts *o, bool map)
{
    int rc = 0;
    wds *w = ferry__calloc(1, sizeof *w);
    *out = NULL;
    if (!w)
        return ferry__err(FERRY_ENOMEM, "wds: out of memory");
    if (o)
        w->o = *o;
    const char *chosen = w->o.fields;
    w->o.fields = NULL;
    if (!w->o.max_member)
        w->o.max_member = DEFAULT_MAX_MEMBER;
    FERRY_TRY(ferry__shard_files_list(&w->files, "wds", location, want_tar,
                                      "tar files (.tar, .tar.gz, .tgz, .tar.zst)"));
    /* remote tars: their headers checked before their copies enter the cache */
    ferry__remote_check_paths(w->files.paths, w->files.n, ferry__tar_check_copy);
    if (map) {
        if (!(w->fds = ferry__calloc(w->files.n, sizeof *w->fds)))
            FERRY_FAIL(FERRY_ENOMEM, "wds: out of memory");
        for (size_t k = 0; k < w->files.n; k++)
            w->fds[k].fd = -1;
        for (size_t k = 0; k < w->files.n; k++) {
            ferry__prefetch_ahead(w->files.paths, w->files.n, k + 1, 0);
            FERRY_TRY(ferry__file_open(&w->fds[k], w->files.paths[k]));
            uint8_t magic[8];
            size_t got;
            FERRY_TRY(ferry__file_pread(&w->fds[k], w->files.paths[k], magic, 8, 0, &got));
            const char *c = ferry__compression_of(magic, got);
            if (c)
                FERRY_FAIL(FERRY_ENOTSUP,
                           "%s: %s-compressed: a map-style dataset needs uncompressed tars "
                           "(read it as a stream)",
                           w->files.paths[k], c);
            FERRY_TRY(scan(w, (uint32_t)k, UINT64_MAX));
        }
        if (w->nsamples == 0)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: no samples", location);
    } else {
        uint64_t limit = w->o.infer ? w->o.infer : DEFAULT_INFER;
        for (size_t k = 0; k < w->files.n && w->nsamples < limit; k++)
            FERRY_TRY(scan(w, (uint32_t)k, limit));
        if (w->nsamples == 0)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: no samples in the first tars", location);
    }
    FERRY_TRY(build_schema(w, chosen));
    if (map)
        FERRY_TRY(check_member_sizes(w));
    if (map && w->o.missing == FERRY_WDS_MISSING_SKIP) {
        /* leave out the samples that miss a field */
        uint64_t keep = 0;
        for (uint64_t i = 0; i < w->nsamples; i++)
            if (present(w, &w->samples[i]) == all_fields(w))
                w->samples[keep++] = w->samples[i];
        w->nsamples = keep;
        if (keep == 0)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: no sample has every field", location);
    }
    if (!map) {
        /* the stream reads the tars again; the scan only set the schema */
        ferry__free(w->samples);
        ferry__free(w->members);
        ferry__free(w->keys);
        w->samples = NULL;
        w->members = NULL;
        w->keys = NULL;
    }
    *out = w;
    return 0;
cleanup:
    wds_free(w);
    return rc;
}

/* ---- Map-style ---- */

static uint64_t wds_len(void *self)
{
    return ((wds *)self)->nsamples;
}

static int wds_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    wds *w = self;
    const sample *s = &w->samples[i];
    const char *path = w->files.paths[s->file];
    const char *key = w->keys + s->key_off;
    uint64_t mask = present(w, s);
    int rc;
    (void)ctx;
    if (mask != all_fields(w))
        return missing_error(w, path, key, s->key_len, s->hoff, mask);
    memcpy(out->data[0], key, s->key_len);
    out->length[0] = s->key_len;
    for (uint64_t j = s->member0; j < s->member0 + s->nmem; j++) {
        const member *m = &w->members[j];
        int k = m->ext;
        if (k < 0)
            continue;
        size_t got;
        if (w->cls[k]) {
            uint8_t buf[CLS_MAX + 1];
            if (m->size > CLS_MAX)
                return ferry__err(FERRY_ECORRUPT, "%s: sample %.*s: its .cls is %llu bytes", path,
                                  (int)s->key_len, key, (unsigned long long)m->size);
            if ((rc = ferry__file_pread(&w->fds[s->file], path, buf, (size_t)m->size, m->off,
                                        &got)) < 0)
                return rc;
            if (got < m->size)
                goto shrank;
            char name[FERRY__TAR_MAX_NAME + 1];
            snprintf(name, sizeof name, "%.*s", (int)s->key_len, key);
            int64_t v;
            if ((rc = parse_cls(path, name, buf, (size_t)m->size, &v)) < 0)
                return rc;
            memcpy(out->data[k], &v, sizeof v);
            continue;
        }
        if (m->size > (uint64_t)w->fields[k].shape[0])
            return ferry__err(FERRY_EOVERFLOW,
                              "%s: sample %.*s: its .%s is %llu bytes, over the bound of %lld "
                              "(max=)",
                              path, (int)s->key_len, key, w->fields[k].name,
                              (unsigned long long)m->size, (long long)w->fields[k].shape[0]);
        if ((rc = ferry__file_pread(&w->fds[s->file], path, out->data[k], (size_t)m->size, m->off,
                                    &got)) < 0)
            return rc;
        if (got < m->size)
            goto shrank;
        out->length[k] = (int64_t)m->size;
    }
    return 0;
shrank:
    return ferry__err(FERRY_ESTALE, "%s: sample %.*s: the file is shorter than when it was indexed",
                      path, (int)s->key_len, key);
}

static void wds_destroy(void *self)
{
    wds_free(self);
}

static const ferry_dataset_vtable wds_vtable = {
    .len = wds_len, .get = wds_get, .destroy = wds_destroy};

int ferry_dataset_wds(ferry_dataset **out, const char *location, const ferry_wds_opts *o)
{
    *out = NULL;
    wds *w;
    int rc = wds_open(&w, location, o, true);
    if (rc < 0)
        return rc;
    /* the tars' first samples: the samples are in file order */
    size_t nf = w->files.n;
    uint64_t *first = ferry__malloc((nf ? nf : 1) * sizeof *first);
    for (uint64_t k = 0, i = 0; first && k < nf; k++) {
        while (i < w->nsamples && w->samples[i].file < k)
            i++;
        first[k] = i;
    }
    rc = ferry_dataset_create(out, &wds_vtable, w, w->fields, w->nfields);
    if (rc == 0 && !first) {
        ferry_dataset_free(*out);
        *out = NULL;
        rc = ferry__err(FERRY_ENOMEM, "wds: out of memory");
    }
    rc = ferry__dataset_shards_at(out, rc, first, sizeof *first, nf);
    ferry__free(first);
    return rc;
}

/* ---- Stream: the members of a tar grouped into samples, under the shard engine ---- */

/* A reader of one tar, a sample at a time. */
typedef struct ws_reader {
    ferry__tar tar;
    bool peeked;
    ferry__tar_member m;               /* peeked: the first member of the next sample */
    char key[FERRY__TAR_MAX_NAME + 1]; /* the sample being read */
    size_t key_len;
    char drop[FERRY__TAR_MAX_NAME + 1]; /* members of this key are passed over (after an error) */
    size_t drop_len;
    bool dropping;
} ws_reader;

/* fetch's read window: each fetch away from the last one reads at least this much
 * (a gzipped tar's is 256 KiB whatever is asked) */
#define FETCH_WINDOW ((size_t)16 << 10)

static int ws_open(const void *self, void *rd, const char *path, bool fetch)
{
    const wds *w = self;
    return ferry__tar_open(&((ws_reader *)rd)->tar, path, path, FERRY__COMP_AUTO, w->o.max_member,
                           fetch ? FETCH_WINDOW : 0);
}

static void ws_close(void *rd)
{
    ws_reader *c = rd;
    ferry__tar_close(&c->tar);
    c->peeked = c->dropping = false;
}

/* An error inside a sample: the rest of its members are passed over. */
static int ws_drop(ws_reader *c, int rc)
{
    memcpy(c->drop, c->key, c->key_len);
    c->drop_len = c->key_len;
    c->dropping = true;
    return rc;
}

static int ws_member(const wds *w, ws_reader *c, int k, ferry_sample *out, const char *path,
                     bool *broken)
{
    const uint8_t *p;
    int rc;
    if (w->cls[k]) {
        if (c->m.size > CLS_MAX)
            return ferry__err(FERRY_ECORRUPT, "%s: member %s at offset %llu: .cls of %llu bytes",
                              path, c->m.name, (unsigned long long)c->m.header_off,
                              (unsigned long long)c->m.size);
        if ((rc = ferry__tar_data(&c->tar, &p)) < 0)
            return *broken = true, rc;
        int64_t v;
        char name[FERRY__TAR_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)c->key_len, c->key);
        if ((rc = parse_cls(path, name, p, (size_t)c->m.size, &v)) < 0)
            return rc;
        memcpy(out->data[k], &v, sizeof v);
        return 0;
    }
    if (c->m.size > (uint64_t)w->fields[k].shape[0])
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: member %s at offset %llu: %llu bytes, over the bound of .%s (%lld, "
                          "the largest in the first samples; give max=)",
                          path, c->m.name, (unsigned long long)c->m.header_off,
                          (unsigned long long)c->m.size, w->fields[k].name,
                          (long long)w->fields[k].shape[0]);
    if ((rc = ferry__tar_data(&c->tar, &p)) < 0)
        return *broken = true, rc;
    memcpy(out->data[k], p, (size_t)c->m.size);
    out->length[k] = (int64_t)c->m.size;
    return 0;
}

/* The next sample of c's tar into out: 0, FERRY_END (no member left),
 * FERRY__SHARD_SKIP (it lacks a field and skip_missing), or an error (*broken: the
 * tar cannot be read on). *hoff and *hidx: the offset and header number of its
 * first header. */
static int ws_sample(const wds *w, ws_reader *c, const char *path, bool skip_missing,
                     ferry_sample *out, uint64_t *hoff, uint64_t *hidx, bool *broken)
{
    uint64_t have = 1;
    bool started = false;
    int rc;
    for (;;) {
        if (!c->peeked) {
            rc = ferry__tar_next(&c->tar, &c->m);
            if (rc == FERRY_END)
                break;
            if (rc < 0)
                return *broken = true, rc;
            c->peeked = true;
        }
        size_t kl;
        const char *ext;
        if ((rc = split(path, &c->m, &kl, &ext)) < 0) {
            c->peeked = false;
            return started ? ws_drop(c, rc) : rc; /* the sample it was in is lost */
        }
        if (c->dropping && kl == c->drop_len && !memcmp(c->m.name, c->drop, kl)) {
            c->peeked = false;
            continue;
        }
        c->dropping = false;
        if (started && (kl != c->key_len || memcmp(c->m.name, c->key, kl)))
            break; /* the next sample begins: keep its member for the next call */
        if (!started) {
            memcpy(c->key, c->m.name, kl);
            c->key_len = kl;
            *hoff = c->m.header_off;
            *hidx = c->m.first_index;
            started = true;
        }
        c->peeked = false;
        int k = 1;
        while (k < w->nfields && strcmp(w->fields[k].name, ext))
            k++;
        if (k == w->nfields)
            continue; /* not a chosen field */
        if (have & ((uint64_t)1 << k))
            return ws_drop(c, ferry__err(FERRY_ECORRUPT,
                                         "%s: member %s at offset %llu: sample %.*s has a .%s "
                                         "already",
                                         path, c->m.name, (unsigned long long)c->m.header_off,
                                         (int)c->key_len, c->key, ext));
        if ((rc = ws_member(w, c, k, out, path, broken)) < 0)
            return *broken ? rc : ws_drop(c, rc);
        have |= (uint64_t)1 << k;
    }
    if (!started)
        return FERRY_END;
    if (have != all_fields(w))
        return skip_missing ? FERRY__SHARD_SKIP
                            : missing_error(w, path, c->key, c->key_len, *hoff, have);
    if (c->key_len > (uint64_t)w->fields[0].shape[0])
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: sample %.*s at offset %llu: a key of %zu bytes, over the bound "
                          "of __key__ (%lld, the longest in the first samples)",
                          path, (int)c->key_len, c->key, (unsigned long long)*hoff, c->key_len,
                          (long long)w->fields[0].shape[0]);
    memcpy(out->data[0], c->key, c->key_len);
    out->length[0] = (int64_t)c->key_len;
    return 0;
}

/* pos: b = the offset of the sample's first member's (first) header in the tar
 * (in the decompressed bytes of a gzipped tar), c = that header's number in the
 * tar (as messages count them). */
static int ws_next(const void *self, void *rd, const char *path, ferry_sample *out, bool *broken)
{
    const wds *w = self;
    uint64_t hoff = 0, hidx = 0;
    int rc =
        ws_sample(w, rd, path, w->o.missing == FERRY_WDS_MISSING_SKIP, out, &hoff, &hidx, broken);
    out->pos.b = hoff;
    out->pos.c = hidx;
    return rc;
}

static uint64_t ws_size(const void *rd)
{
    return ((const ws_reader *)rd)->tar.r.size;
}

/* The state's words: the offset the reader goes on from, the member bytes it has
 * still to pass there, its header count, and the key whose members are being
 * passed over after an error (its length + 1, 0: none; then its bytes). */
static void ws_save(const void *rd, ferry_state *s)
{
    const ws_reader *c = rd;
    uint64_t off = 0, pending = 0, headers = 0;
    if (c && c->peeked) { /* again from the header of the member it holds */
        off = c->m.header_off;
        headers = c->m.first_index;
    } else if (c) {
        off = c->tar.r.off;
        pending = c->tar.pending;
        headers = c->tar.headers;
    }
    ferry_state_put_u64(s, off);
    ferry_state_put_u64(s, pending);
    ferry_state_put_u64(s, headers);
    ferry_state_put_u64(s, c && c->dropping ? c->drop_len + 1 : 0);
    if (c && c->dropping)
        ferry_state_put(s, c->drop, c->drop_len);
}

static int ws_resume(const void *self, void *rd, const char *path, const uint64_t *v,
                     ferry_state *r)
{
    ws_reader *c = rd;
    uint64_t off = v[0], pending = v[1], headers = v[2], drop = v[3], at;
    int rc;
    (void)self;
    if (drop > FERRY__TAR_MAX_NAME + 1)
        return ferry__err(FERRY_ECORRUPT, "wds stream: the state names a key of %llu bytes",
                          (unsigned long long)drop - 1);
    if (drop && (rc = ferry_state_get(r, c->drop, (size_t)drop - 1)) < 0)
        return rc;
    if (off % 512 || pending % 512 || pending > ((uint64_t)1 << 62) + 512 || headers > off / 512)
        return ferry__err(FERRY_ECORRUPT,
                          "wds stream: the state names offset %llu (%llu bytes to pass, %llu "
                          "headers before) of %s: not a place in a tar",
                          (unsigned long long)off, (unsigned long long)pending,
                          (unsigned long long)headers, path);
    if ((rc = ferry__seqread_seek(&c->tar.r, off, &at)) < 0)
        return rc;
    if (at != off)
        return ferry__err(FERRY_ECORRUPT,
                          "wds stream: the state names offset %llu of %s, which ends at %llu%s",
                          (unsigned long long)off, path, (unsigned long long)at,
                          c->tar.r.compressed ? " (decompressed)" : "");
    c->tar.pending = pending;
    c->tar.headers = headers;
    c->dropping = drop != 0;
    c->drop_len = drop ? (size_t)drop - 1 : 0;
    return 0;
}

static int ws_fetch(const void *self, void *rd, const char *path, const ferry_pos *pos,
                    ferry_sample *out, bool *broken)
{
    ws_reader *c = rd;
    int rc;
    if (pos->b % 512)
        return ferry__err(FERRY_ERANGE, "%s: no sample at offset %llu: not a header's offset", path,
                          (unsigned long long)pos->b);
    c->dropping = false;
    if (!c->peeked || c->m.header_off != pos->b) {
        /* the sample after the last fetched one is there already; else forward from
         * it (a gzipped tar decodes from its start to go back) */
        uint64_t at;
        if ((rc = ferry__seqread_seek(&c->tar.r, pos->b, &at)) < 0)
            return *broken = true, rc;
        c->peeked = false;
        c->tar.pending = 0;
        c->tar.headers = pos->c;
        c->tar.have_long = c->tar.have_pax_size = false;
        if (at != pos->b)
            return ferry__err(FERRY_ERANGE, "%s: no sample at offset %llu%s: the tar ends at %llu",
                              path, (unsigned long long)pos->b,
                              c->tar.r.compressed ? " (decompressed)" : "", (unsigned long long)at);
    }
    uint64_t hoff = 0, hidx = 0;
    rc = ws_sample(self, c, path, false, out, &hoff, &hidx, broken);
    if (rc == FERRY_END)
        return ferry__err(FERRY_ERANGE, "%s: no sample at offset %llu%s: the tar ends there", path,
                          (unsigned long long)pos->b, c->tar.r.compressed ? " (decompressed)" : "");
    return rc;
}

static const ferry__shard_format wds_format = {
    .who = "wds stream",
    .unit = "tar",
    .stranger = "the state was not saved by a wds stream",
    .tag = 0x3130534457595246ull, /* "FRYWDS01" */
    .reader_size = sizeof(ws_reader),
    .words = 4,
    .open = ws_open,
    .close = ws_close,
    .next = ws_next,
    .size = ws_size,
    .save = ws_save,
    .resume = ws_resume,
    .fetch = ws_fetch,
    .destroy = wds_destroy,
};

int ferry_stream_wds(ferry_stream **out, const char *location, const ferry_wds_opts *o,
                     uint64_t seed)
{
    *out = NULL;
    wds *w;
    int rc = wds_open(&w, location, o, false);
    if (rc < 0)
        return rc;
    return ferry__shard_stream_create(out, &wds_format, w, &w->files, seed, w->fields, w->nfields);
}

/* ---- "wds:PATH,..." ---- */

int ferry__wds_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s)
{
    ferry_wds_opts o = {0};
    uint64_t seed = 0;
    int stream = -1, rc;
    const char *missing = ferry__spec_str(s, "missing");
    o.fields = ferry__spec_str(s, "fields");
    if ((rc = ferry__spec_u64(s, "infer", 1, (uint64_t)1 << 32, &o.infer)) < 0 ||
        (rc = ferry__spec_u64(s, "max", 1, (uint64_t)1 << 34, &o.max)) < 0 ||
        (rc = ferry__spec_u64(s, "max_member", 1, (uint64_t)1 << 34, &o.max_member)) < 0 ||
        (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &seed)) < 0 ||
        (rc = ferry__spec_bool(s, "stream", &stream)) < 0 || (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (missing && !strcmp(missing, "skip"))
        o.missing = FERRY_WDS_MISSING_SKIP;
    else if (missing && strcmp(missing, "error"))
        return ferry__err(FERRY_EINVAL, "source wds: missing=\"%.32s\" is not error or skip",
                          missing);
    if (stream < 0) {
        /* map-style when every tar can be indexed (uncompressed); else a stream */
        stream = ferry__shard_files_compressed("wds", s->location, want_tar, "tar files",
                                               FERRY__COMP_AUTO);
    }
    if (stream)
        return st ? ferry_stream_wds(st, s->location, &o, seed)
                  : ferry__err(FERRY_EINVAL, "source wds: compressed tars make a stream; open it "
                                             "with ferry_source_open");
    return ferry_dataset_wds(ds, s->location, &o);
}
