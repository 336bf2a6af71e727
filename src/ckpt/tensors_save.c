/*
 * The safetensors writer: the header with ferry's CRCs, then the tensors written
 * by several threads into a file that appears whole or not at all.
 */
#include "tensors_internal.h"

#include "../core/bytes.h"
#include "../formats/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CHUNK ((uint64_t)16 << 20)
#define WRITE_PIECE ((size_t)1 << 20) /* bytes checksummed then written in one go */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (!ferry__tensors_grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_escaped(sbuf *b, const char *s)
{
    for (const char *r = s; *r; r++) {
        unsigned char c = (unsigned char)*r;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, r, 1);
        }
    }
}

/* The JSON string of a followed by s. */
static void sb_json2(sbuf *b, const char *a, const char *s)
{
    sb_put(b, "\"", 1);
    sb_escaped(b, a);
    sb_escaped(b, s);
    sb_put(b, "\"", 1);
}

static void sb_json(sbuf *b, const char *s)
{
    sb_json2(b, "", s);
}

static void sb_u64(sbuf *b, uint64_t v)
{
    char num[24];
    int k = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    sb_put(b, num, (size_t)k);
}

typedef struct wtensor {
    const ferry_tensor_src *src;
    size_t index; /* as given */
    unsigned align;
    uint64_t nbytes, begin;
    uint32_t crc;
} wtensor;

typedef struct wjob {
    size_t first, count; /* tensors (in file order) */
    uint64_t off, len;   /* a piece of one tensor when count is 1; else whole tensors */
    uint32_t crc;        /* of the piece (count 1) */
} wjob;

typedef struct save_ctx {
    ferry__atomic_file *w;
    wtensor *ts;
    wjob *jobs;
    uint64_t data_start, chunk;
    uint8_t **staging; /* one per worker, chunk bytes, made on first use */
    bool crc;
} save_ctx;

static int save_job(void *p, size_t i, unsigned worker)
{
    save_ctx *c = p;
    wjob *jb = &c->jobs[i];
    int rc;
    if (jb->count == 1) {
        wtensor *wt = &c->ts[jb->first];
        const uint8_t *src = (const uint8_t *)wt->src->data + jb->off;
        /* 1 MiB at a time: the CRC brings the bytes into the cache, the write copies
         * them from there, so memory is read once */
        uint32_t crc = 0;
        uint64_t to = c->data_start + wt->begin + jb->off;
        rc = 0;
        for (uint64_t at = 0; at < jb->len && rc == 0;) {
            size_t k = jb->len - at < WRITE_PIECE ? (size_t)(jb->len - at) : WRITE_PIECE;
            if (c->crc)
                crc = ferry_crc32c(crc, src + at, k);
            rc = ferry__atomic_pwrite_mt(c->w, src + at, k, to + at);
            at += k;
        }
        jb->crc = crc;
    } else {
        if (!c->staging[worker]) {
            c->staging[worker] = ferry__malloc(c->chunk);
            if (!c->staging[worker])
                return ferry__err(FERRY_ENOMEM, "%s: out of memory", c->w->tmp);
        }
        uint8_t *buf = c->staging[worker];
        uint64_t at = 0;
        for (size_t k = jb->first; k < jb->first + jb->count; k++) {
            wtensor *wt = &c->ts[k];
            if (wt->nbytes)
                memcpy(buf + at, wt->src->data, wt->nbytes);
            if (c->crc)
                wt->crc = ferry_crc32c(0, buf + at, wt->nbytes);
            at += wt->nbytes;
        }
        rc = ferry__atomic_pwrite_mt(c->w, buf, at, c->data_start + c->ts[jb->first].begin);
    }
    return rc;
}

static int cmp_wtensor_align(const void *a, const void *b)
{
    const wtensor *x = a, *y = b;
    if (x->align != y->align)
        return x->align > y->align ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_src_name(const void *a, const void *b, void *arg)
{
    const ferry_tensor_src *t = arg;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int check_string(const char *what, const char *s)
{
    if (!s)
        return ferry__err(FERRY_EINVAL, "%s is NULL", what);
    if (!ferry__utf8_valid(s, strlen(s)))
        return ferry__err(FERRY_EINVAL, "%s \"%s\" is not valid UTF-8", what, s);
    return 0;
}

int ferry_tensors_save(const char *path, const ferry_tensor_src *src, size_t n,
                       const ferry_tensors_save_opts *opts)
{
    static const ferry_tensors_save_opts defaults;
    const ferry_tensors_save_opts *o = opts ? opts : &defaults;
    int rc = 0;
    wtensor *ts = NULL;
    wjob *jl = NULL;
    size_t *idx = NULL;
    sbuf h = {0};
    ferry__atomic_file w;
    memset(&w, 0, sizeof w);
    w.fd = -1;
    uint8_t *staging[64] = {0};
    bool crc = !o->no_crc;
    size_t crc_at = 0; /* where the CRCs' hex digits go in the header */
    uint64_t chunk = o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK;
    unsigned threads = ferry__tensors_threads(o->threads);

    if (!path)
        return ferry__err(FERRY_EINVAL, "ferry_tensors_save: NULL path");
    if (n && !src)
        return ferry__err(FERRY_EINVAL, "%s: NULL tensors", path);
    if (chunk < ((uint64_t)64 << 10) || chunk > ((uint64_t)1 << 30))
        return ferry__err(FERRY_EINVAL, "%s: chunk_bytes %llu is not in [64 KiB, 1 GiB]", path,
                          (unsigned long long)chunk);
    if (o->threads > 64)
        return ferry__err(FERRY_EINVAL, "%s: threads %u is not in [0, 64]", path, o->threads);
    if (o->nmeta && (!o->meta_keys || !o->meta_values))
        return ferry__err(FERRY_EINVAL, "%s: NULL metadata arrays", path);

    ts = ferry__calloc(n ? n : 1, sizeof *ts);
    idx = ferry__malloc((n + o->nmeta + 1) * sizeof *idx);
    if (!ts || !idx)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_src *s = &src[i];
        FERRY_TRY(check_string("tensor name", s->name));
        if (!strcmp(s->name, "__metadata__"))
            FERRY_FAIL(FERRY_EINVAL, "%s: a tensor cannot be named \"__metadata__\"", path);
        if (!ferry__tensors_dtype_ok(s->dtype))
            FERRY_FAIL(FERRY_EINVAL, "%s: tensor \"%s\": invalid dtype %d", path, s->name,
                       (int)s->dtype);
        if (s->ndim < 0 || s->ndim > FERRY_TENSORS_MAX_DIMS || (s->ndim && !s->shape))
            FERRY_FAIL(FERRY_EINVAL, "%s: tensor \"%s\": ndim %d is not in [0, %d] (or no shape)",
                       path, s->name, s->ndim, FERRY_TENSORS_MAX_DIMS);
        uint64_t numel = 1, nbytes;
        for (int d = 0; d < s->ndim; d++) {
            if (s->shape[d] < 0)
                FERRY_FAIL(FERRY_EINVAL, "%s: tensor \"%s\": dimension %d is %lld", path, s->name,
                           d, (long long)s->shape[d]);
            if (__builtin_mul_overflow(numel, (uint64_t)s->shape[d], &numel))
                FERRY_FAIL(FERRY_EOVERFLOW, "%s: tensor \"%s\": too many elements", path, s->name);
        }
        if (!ferry__tensors_byte_count(s->dtype, numel, &nbytes) || nbytes > SIZE_MAX)
            FERRY_FAIL(FERRY_EINVAL,
                       "%s: tensor \"%s\": %llu elements of %s do not fill whole "
                       "bytes",
                       path, s->name, (unsigned long long)numel, ferry_st_dtype_name(s->dtype));
        if (nbytes && !s->data)
            FERRY_FAIL(FERRY_EINVAL, "%s: tensor \"%s\": NULL data", path, s->name);
        unsigned bits = ferry_st_dtype_bits(s->dtype);
        ts[i] =
            (wtensor){.src = s, .index = i, .align = bits >= 8 ? bits / 8 : 1, .nbytes = nbytes};
        idx[i] = i;
    }
    qsort_r(idx, n, sizeof *idx, cmp_src_name, (void *)src);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(src[idx[i - 1]].name, src[idx[i]].name))
            FERRY_FAIL(FERRY_EINVAL, "%s: two tensors are named \"%s\"", path, src[idx[i]].name);
    for (size_t i = 0; i < o->nmeta; i++) {
        FERRY_TRY(check_string("metadata key", o->meta_keys[i]));
        FERRY_TRY(check_string("metadata value", o->meta_values[i]));
        if (ferry__tensors_is_crc_key(o->meta_keys[i]))
            FERRY_FAIL(FERRY_EINVAL, "%s: metadata key \"%s\" is ferry's own", path,
                       o->meta_keys[i]);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(o->meta_keys[k], o->meta_keys[i]))
                FERRY_FAIL(FERRY_EINVAL, "%s: metadata key \"%s\" given twice", path,
                           o->meta_keys[i]);
    }

    /* layout: largest elements first keeps every tensor aligned to its element */
    qsort(ts, n, sizeof *ts, cmp_wtensor_align);
    uint64_t data_len = 0;
    for (size_t i = 0; i < n; i++) {
        ts[i].begin = data_len;
        if (__builtin_add_overflow(data_len, ts[i].nbytes, &data_len))
            FERRY_FAIL(FERRY_EOVERFLOW, "%s: the tensors' bytes overflow", path);
    }

    /* the header, CRCs as placeholders of fixed width */
    sb_put(&h, "{", 1);
    if (o->nmeta || (crc && n)) {
        sb_str(&h, "\"__metadata__\":{");
        bool first = true;
        for (size_t i = 0; i < o->nmeta; i++) {
            if (!first)
                sb_put(&h, ",", 1);
            first = false;
            sb_json(&h, o->meta_keys[i]);
            sb_put(&h, ":", 1);
            sb_json(&h, o->meta_values[i]);
        }
        if (crc && n) {
            if (!first)
                sb_put(&h, ",", 1);
            sb_json(&h, FERRY_TENSORS_CRC_KEY);
            sb_put(&h, ":\"", 2);
            crc_at = h.n;
            for (size_t i = 0; i < n; i++)
                sb_put(&h, i + 1 < n ? "00000000," : "00000000", i + 1 < n ? 9 : 8);
            sb_put(&h, "\"", 1);
        }
        sb_put(&h, "}", 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (h.n > 1)
            sb_put(&h, ",", 1);
        sb_json(&h, ts[i].src->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, ferry_st_dtype_name(ts[i].src->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < ts[i].src->ndim; d++) {
            if (d)
                sb_put(&h, ",", 1);
            sb_u64(&h, (uint64_t)ts[i].src->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, ts[i].begin);
        sb_put(&h, ",", 1);
        sb_u64(&h, ts[i].begin + ts[i].nbytes);
        sb_str(&h, "]}");
    }
    sb_put(&h, "}", 1);
    while (!h.oom && (8 + h.n) % 8)
        sb_put(&h, " ", 1);
    if (h.oom)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for the header", path);
    if (h.n > FERRY_TENSORS_DEFAULT_MAX_HEADER)
        FERRY_FAIL(FERRY_EOVERFLOW, "%s: a %zu-byte header is over the %llu bytes readers accept",
                   path, h.n, (unsigned long long)FERRY_TENSORS_DEFAULT_MAX_HEADER);

    /* jobs: large tensors in chunks written straight from the caller's memory,
     * runs of small ones gathered into one write */
    size_t nj = 0, capj = 0;
    for (size_t i = 0; i < n;) {
        if (!ferry__tensors_grow((void **)&jl, &capj, nj + (size_t)(ts[i].nbytes / chunk) + 2,
                                 sizeof *jl))
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
        if (ts[i].nbytes >= chunk / 2) {
            uint64_t off = 0;
            do {
                uint64_t len = ts[i].nbytes - off < chunk ? ts[i].nbytes - off : chunk;
                jl[nj++] = (wjob){i, 1, off, len, 0};
                off += len;
            } while (off < ts[i].nbytes);
            i++;
            continue;
        }
        size_t first = i;
        uint64_t bytes = 0;
        while (i < n && ts[i].nbytes < chunk / 2 && bytes + ts[i].nbytes <= chunk)
            bytes += ts[i++].nbytes;
        jl[nj++] = (wjob){first, i - first, 0, bytes, 0};
        if (i - first == 1) /* a lone small tensor: a piece of itself */
            jl[nj - 1].count = 1;
    }

    ferry__atomic_remove_stale(path); /* what a killed save left */
    FERRY_TRY(ferry__atomic_open(&w, path));
    uint64_t data_start = 8 + h.n;
    FERRY_TRY(ferry__atomic_reserve(&w, data_start + data_len));
    save_ctx c = {.w = &w,
                  .ts = ts,
                  .jobs = jl,
                  .data_start = data_start,
                  .chunk = chunk,
                  .staging = staging,
                  .crc = crc};
    FERRY_TRY(ferry__parallel_for(nj, threads, save_job, &c));
    if (crc) {
        for (size_t k = 0; k < nj;) {
            if (jl[k].count != 1) {
                k++;
                continue;
            }
            size_t q = k + 1;
            uint32_t v = jl[k].crc;
            for (; q < nj && jl[q].count == 1 && jl[q].first == jl[k].first; q++)
                v = ferry__crc32c_combine(v, jl[q].crc, jl[q].len);
            ts[jl[k].first].crc = v;
            k = q;
        }
        for (size_t i = 0; i < n; i++) {
            char hex[9];
            snprintf(hex, sizeof hex, "%08x", ts[i].crc);
            memcpy(h.p + crc_at + 9 * i, hex, 8);
        }
    }
    uint8_t len8[8];
    ferry__store_le64(len8, h.n);
    FERRY_TRY(ferry__atomic_pwrite_mt(&w, len8, 8, 0));
    FERRY_TRY(ferry__atomic_pwrite_mt(&w, h.p, h.n, 8));
    rc = ferry__atomic_commit(&w); /* frees w, success or not */
cleanup:
    ferry__atomic_abort(&w);
    for (int i = 0; i < 64; i++)
        ferry__free(staging[i]);
    ferry__free(ts);
    ferry__free(jl);
    ferry__free(idx);
    ferry__free(h.p);
    return rc;
}
