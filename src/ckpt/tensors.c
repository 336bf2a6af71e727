/*
 * Named tensors in the safetensors format: zero-copy loading from a mapping, CRC
 * checks and copies on several threads, selection and renaming. The bounded header
 * parser that trusts nothing is tensors_header.c; the multi-threaded atomic writer
 * is tensors_save.c.
 */
#include "tensors_internal.h"

#include "../core/guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define VERIFY_PIECE ((uint64_t)32 << 20) /* bytes of one CRC job */
#define VERIFY_RUN ((uint64_t)4 << 20)    /* tensors smaller than this are checked in runs */

/* ---- dtypes ---- */

static const struct {
    const char *name;
    unsigned bits;
    ferry_dtype core;
} dtypes[FERRY_ST_DTYPE_COUNT] = {
    [FERRY_ST_INVALID] = {"INVALID", 0, FERRY_DTYPE_INVALID},
    [FERRY_ST_BOOL] = {"BOOL", 8, FERRY_BOOL},
    [FERRY_ST_U8] = {"U8", 8, FERRY_U8},
    [FERRY_ST_I8] = {"I8", 8, FERRY_I8},
    [FERRY_ST_U16] = {"U16", 16, FERRY_U16},
    [FERRY_ST_I16] = {"I16", 16, FERRY_I16},
    [FERRY_ST_U32] = {"U32", 32, FERRY_U32},
    [FERRY_ST_I32] = {"I32", 32, FERRY_I32},
    [FERRY_ST_U64] = {"U64", 64, FERRY_U64},
    [FERRY_ST_I64] = {"I64", 64, FERRY_I64},
    [FERRY_ST_F16] = {"F16", 16, FERRY_F16},
    [FERRY_ST_BF16] = {"BF16", 16, FERRY_BF16},
    [FERRY_ST_F32] = {"F32", 32, FERRY_F32},
    [FERRY_ST_F64] = {"F64", 64, FERRY_F64},
    [FERRY_ST_F8_E4M3] = {"F8_E4M3", 8, FERRY_DTYPE_INVALID},
    [FERRY_ST_F8_E5M2] = {"F8_E5M2", 8, FERRY_DTYPE_INVALID},
    [FERRY_ST_F8_E8M0] = {"F8_E8M0", 8, FERRY_DTYPE_INVALID},
    [FERRY_ST_F4] = {"F4", 4, FERRY_DTYPE_INVALID},
    [FERRY_ST_F6_E2M3] = {"F6_E2M3", 6, FERRY_DTYPE_INVALID},
    [FERRY_ST_F6_E3M2] = {"F6_E3M2", 6, FERRY_DTYPE_INVALID},
    [FERRY_ST_C64] = {"C64", 64, FERRY_DTYPE_INVALID},
};

bool ferry__tensors_dtype_ok(ferry_st_dtype dt)
{
    return (int)dt > FERRY_ST_INVALID && (int)dt < FERRY_ST_DTYPE_COUNT;
}

const char *ferry_st_dtype_name(ferry_st_dtype dt)
{
    return ferry__tensors_dtype_ok(dt) ? dtypes[dt].name : "INVALID";
}

ferry_st_dtype ferry_st_dtype_from_name(const char *name)
{
    /* once per tensor of a header: compare the first two bytes before the rest */
    for (int i = 1; name && name[0] && i < FERRY_ST_DTYPE_COUNT; i++)
        if (dtypes[i].name[0] == name[0] && dtypes[i].name[1] == name[1] &&
            !strcmp(dtypes[i].name + 1, name + 1))
            return (ferry_st_dtype)i;
    return FERRY_ST_INVALID;
}

ferry_st_dtype ferry__tensors_dtype_from_bytes(const char *s, size_t n)
{
    for (int i = 1; i < FERRY_ST_DTYPE_COUNT; i++) {
        const char *nm = dtypes[i].name;
        size_t k = 0;
        while (k < n && nm[k] == s[k]) /* stops at the name's NUL too */
            k++;
        if (k == n && !nm[k])
            return (ferry_st_dtype)i;
    }
    return FERRY_ST_INVALID;
}

unsigned ferry_st_dtype_bits(ferry_st_dtype dt)
{
    return ferry__tensors_dtype_ok(dt) ? dtypes[dt].bits : 0;
}

ferry_dtype ferry_st_dtype_core(ferry_st_dtype dt)
{
    return ferry__tensors_dtype_ok(dt) ? dtypes[dt].core : FERRY_DTYPE_INVALID;
}

bool ferry__tensors_byte_count(ferry_st_dtype dt, uint64_t numel, uint64_t *out)
{
    uint64_t bits;
    if (__builtin_mul_overflow(numel, (uint64_t)dtypes[dt].bits, &bits) || bits % 8)
        return false;
    *out = bits / 8;
    return true;
}

/* ---- threads ---- */

unsigned ferry__tensors_threads(unsigned asked)
{
    if (asked)
        return asked > 64 ? 64 : asked;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > 8 ? 8 : (unsigned)c;
}

/* ---- name lookups (the index is described in tensors_internal.h) ---- */

#define SKIP UINT32_MAX

static uint64_t hash_name(const char *s, uint64_t key)
{
    /* eight bytes a step: names are long and alike ("model.layers.17.mlp...") */
    size_t n = strlen(s);
    uint64_t h = 0x9e3779b97f4a7c15ull ^ key ^ n;
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

bool ferry__tensors_index_build(ferry__name_index *ix, size_t n, ferry__name_of_fn name_of,
                                const void *ctx, uint64_t key, size_t *dup)
{
    size_t cap = 16;
    if (n > FERRY__TENSORS_MAX_NAMES)
        return false;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = ferry__calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return false;
    ix->mask = cap - 1;
    *dup = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const char *nm = name_of(ctx, i);
        size_t h = (size_t)hash_name(nm, key) & ix->mask;
        while (ix->slots[h]) {
            if (!strcmp(name_of(ctx, ix->slots[h] - 1), nm)) {
                if (*dup == SIZE_MAX)
                    *dup = i;
                break;
            }
            h = (h + 1) & ix->mask;
        }
        if (!ix->slots[h])
            ix->slots[h] = (uint32_t)(i + 1);
    }
    return true;
}

/* The index of name, or SIZE_MAX. */
static size_t index_find(const ferry__name_index *ix, const char *name, ferry__name_of_fn name_of,
                         const void *ctx, uint64_t key)
{
    if (!ix->slots)
        return SIZE_MAX;
    size_t h = (size_t)hash_name(name, key) & ix->mask;
    while (ix->slots[h]) {
        if (ix->slots[h] != SKIP && !strcmp(name_of(ctx, ix->slots[h] - 1), name))
            return ix->slots[h] - 1;
        h = (h + 1) & ix->mask;
    }
    return SIZE_MAX;
}

/* ---- the handle ---- */

const char *ferry__tensors_entry_name(const void *ctx, size_t i)
{
    return ((const ferry_tensors *)ctx)->all[i].file_name;
}

static const char *sel_name(const void *ctx, size_t i)
{
    return ((const ferry_tensors *)ctx)->sel[i].name;
}

void ferry_tensors_free(ferry_tensors *t)
{
    if (!t)
        return;
    ferry__unmap(&t->map);
    ferry__free(t->label);
    ferry__free(t->arena);
    ferry__free(t->shapes);
    if (t->sel != t->all)
        ferry__free(t->sel);
    ferry__free(t->all);
    ferry__free(t->spans);
    ferry__free(t->meta_keys);
    ferry__free(t->meta_vals);
    ferry__free(t->names.slots);
    ferry__free(t->renamed);
    ferry__aligned_free(t->copy);
    ferry__free(t);
}

bool ferry__tensors_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    size_t bytes;
    if (!ferry__mul_size(c, elem, &bytes))
        return false;
    void *q = ferry__realloc(*p, bytes);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- CRC checks and copies, on several threads ---- */

typedef struct piece {
    size_t first, count; /* tensors in sel: a run of small ones, or one (part) */
    uint64_t off, len;   /* part: the bytes [off, off + len) of tensor first */
    bool part;
    uint32_t crc; /* of a part */
} piece;

typedef struct verify_ctx {
    const ferry_tensors *t;
    piece *pieces;
    const ferry_tensor_info *src; /* copy: the mapped tensors (NULL: only CRCs) */
    bool check;
    uint32_t *got; /* the CRCs of tensors in runs */
} verify_ctx;

static void verify_piece(verify_ctx *c, piece *pc)
{
    if (pc->part) {
        const ferry_tensor_info *ti = &c->t->sel[pc->first];
        if (c->src)
            memcpy((uint8_t *)ti->data + pc->off, (const uint8_t *)c->src[pc->first].data + pc->off,
                   pc->len);
        if (c->check && ti->has_crc)
            pc->crc = ferry_crc32c(0, (const uint8_t *)ti->data + pc->off, pc->len);
        return;
    }
    for (size_t k = pc->first; k < pc->first + pc->count; k++) {
        const ferry_tensor_info *ti = &c->t->sel[k];
        if (c->src && ti->nbytes)
            memcpy((uint8_t *)ti->data, c->src[k].data, ti->nbytes);
        if (c->check && ti->has_crc)
            c->got[k] = ti->nbytes ? ferry_crc32c(0, ti->data, ti->nbytes) : 0;
    }
}

/* The tensors are read from the mapping under a region: a file cut short while
 * it is checked or copied is an error naming it, not a SIGBUS. */
static int verify_job(void *p, size_t i, unsigned worker)
{
    verify_ctx *c = p;
    (void)worker;
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, c->t->label, c->t->map.data, "tensor \"%s\"",
                                c->t->sel[c->pieces[i].first].file_name);
    verify_piece(c, &c->pieces[i]);
    ferry__guard_pop(&g);
    return 0;
}

static int crc_mismatch(const ferry_tensors *t, const ferry_tensor_info *ti, uint32_t got)
{
    return ferry__err(FERRY_ECORRUPT,
                      "%s: tensor \"%s\" at offset %llu: CRC mismatch (stored %08x, the %llu "
                      "bytes give %08x)",
                      t->label, ti->file_name, (unsigned long long)ti->offset, ti->crc,
                      (unsigned long long)ti->nbytes, got);
}

/* The jobs of copy_and_verify: tensors of VERIFY_RUN bytes and more in parts of
 * VERIFY_PIECE, smaller ones in runs of about VERIFY_RUN bytes. Fills pieces when
 * not NULL; returns how many there are. */
static size_t plan_pieces(const ferry_tensors *t, bool copy, bool check, piece *pieces,
                          uint64_t *total)
{
    size_t np = 0;
    *total = 0;
    for (size_t i = 0; i < t->nsel;) {
        const ferry_tensor_info *ti = &t->sel[i];
        if (!copy && !(check && ti->has_crc)) {
            i++;
            continue;
        }
        if (ti->nbytes >= VERIFY_RUN) {
            uint64_t off = 0;
            do {
                uint64_t len = ti->nbytes - off < VERIFY_PIECE ? ti->nbytes - off : VERIFY_PIECE;
                if (pieces)
                    pieces[np] = (piece){i, 1, off, len, true, 0};
                np++;
                off += len;
            } while (off < ti->nbytes);
            *total += ti->nbytes;
            i++;
            continue;
        }
        size_t first = i;
        uint64_t bytes = 0;
        for (; i < t->nsel && bytes < VERIFY_RUN; i++) {
            if (!copy && !(check && t->sel[i].has_crc))
                continue;
            if (t->sel[i].nbytes >= VERIFY_RUN)
                break;
            bytes += t->sel[i].nbytes;
        }
        if (pieces)
            pieces[np] = (piece){first, i - first, 0, bytes, false, 0};
        np++;
        *total += bytes;
    }
    return np;
}

/* Copies (when src) and checks the selected tensors' CRCs (when check). */
static int copy_and_verify(ferry_tensors *t, const ferry_tensor_info *src, bool check,
                           unsigned threads)
{
    int rc = 0;
    piece *pieces = NULL;
    uint32_t *got = NULL;
    uint64_t total;
    size_t np = plan_pieces(t, src != NULL, check, NULL, &total);
    if (!np)
        return 0;
    pieces = ferry__malloc(np * sizeof *pieces);
    got = ferry__malloc(t->nsel * sizeof *got);
    if (!pieces || !got)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    plan_pieces(t, src != NULL, check, pieces, &total);
    /* a thread for each 16 MiB at most: starting one costs more than checking less */
    if ((uint64_t)threads > total / (16u << 20) + 1)
        threads = (unsigned)(total / (16u << 20) + 1);
    verify_ctx c = {.t = t, .pieces = pieces, .src = src, .check = check, .got = got};
    FERRY_TRY(ferry__parallel_for(np, threads, verify_job, &c));
    if (check) {
        /* in file order, so that the first bad tensor is the one named */
        for (size_t p = 0; p < np;) {
            if (!pieces[p].part) {
                for (size_t k = pieces[p].first; k < pieces[p].first + pieces[p].count; k++)
                    if (t->sel[k].has_crc && got[k] != t->sel[k].crc)
                        FERRY_FAIL(crc_mismatch(t, &t->sel[k], got[k]), "%s", ferry_last_errmsg());
                p++;
                continue;
            }
            const ferry_tensor_info *ti = &t->sel[pieces[p].first];
            uint32_t crc = pieces[p].crc;
            size_t q = p + 1;
            for (; q < np && pieces[q].part && pieces[q].first == pieces[p].first; q++)
                crc = ferry__crc32c_combine(crc, pieces[q].crc, pieces[q].len);
            if (ti->has_crc && crc != ti->crc)
                FERRY_FAIL(crc_mismatch(t, ti, crc), "%s", ferry_last_errmsg());
            p = q;
        }
    }
cleanup:
    ferry__free(pieces);
    ferry__free(got);
    return rc;
}

int ferry_tensors_verify(const ferry_tensors *t, size_t i)
{
    if (!t || i >= t->nsel)
        return ferry__err(FERRY_ERANGE, "tensor %zu of %zu", i, t ? t->nsel : 0);
    const ferry_tensor_info *ti = &t->sel[i];
    if (!ti->has_crc)
        return ferry__err(FERRY_ENOENT, "%s: tensor \"%s\": the file stores no CRC", t->label,
                          ti->file_name);
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, t->label, t->map.data, "tensor \"%s\"", ti->file_name);
    uint32_t crc = ti->nbytes ? ferry_crc32c(0, ti->data, ti->nbytes) : 0;
    ferry__guard_pop(&g);
    return crc == ti->crc ? 0 : crc_mismatch(t, ti, crc);
}

/* ---- selection and renaming ---- */

static int select_and_rename(ferry_tensors *t, const size_t *by_off, ferry__name_index *ix,
                             const ferry_tensors_opts *o)
{
    int rc = 0;
    size_t n = t->nall, dup;
    bool *keep = NULL;
    keep = ferry__calloc(n ? n : 1, sizeof *keep);
    if (!keep)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    if (o->names) {
        for (size_t i = 0; i < o->nnames; i++) {
            if (!o->names[i])
                FERRY_FAIL(FERRY_EINVAL, "%s: names[%zu] is NULL", t->label, i);
            size_t e = index_find(ix, o->names[i], ferry__tensors_entry_name, t, t->hash_key);
            if (e != SIZE_MAX)
                keep[e] = true;
            else if (!(o->flags & FERRY_TENSORS_ALLOW_MISSING))
                FERRY_FAIL(FERRY_ENOENT, "%s: no tensor named \"%s\"", t->label, o->names[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            keep[i] = true;
    }
    size_t plen = o->prefix ? strlen(o->prefix) : 0;
    bool every = !o->names && !plen;
    for (size_t i = 0; i < n && every; i++)
        every = by_off[i] == i;
    if (every) {
        t->sel = t->all;
        t->nsel = n;
    } else {
        t->sel = ferry__calloc(n ? n : 1, sizeof *t->sel);
        if (!t->sel)
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
        for (size_t i = 0; i < n; i++) {
            const ferry_tensor_info *e = &t->all[by_off[i]];
            if (keep[by_off[i]] && (!plen || !strncmp(e->file_name, o->prefix, plen)))
                t->sel[t->nsel++] = *e;
        }
    }
    size_t strip = o->strip_prefix ? strlen(o->strip_prefix) : 0;
    size_t add = o->add_prefix ? strlen(o->add_prefix) : 0;
    if (strip || add) {
        size_t total = 0;
        for (size_t i = 0; i < t->nsel; i++)
            total += add + strlen(t->sel[i].file_name) + 1;
        t->renamed = ferry__malloc(total ? total : 1);
        if (!t->renamed)
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
        char *w = t->renamed;
        for (size_t i = 0; i < t->nsel; i++) {
            const char *s = t->sel[i].file_name;
            if (strip && !strncmp(s, o->strip_prefix, strip))
                s += strip;
            size_t len = strlen(s);
            memcpy(w, o->add_prefix ? o->add_prefix : "", add);
            memcpy(w + add, s, len + 1);
            t->sel[i].name = w;
            w += add + len + 1;
        }
    }
    if (!strip && !add) {
        /* the names are the file's, already indexed and unique: the index is
         * taken over, its slots mapped from tensors to their places in sel (or
         * SKIP); when sel is all, they are those places already */
        if (t->sel != t->all) {
            uint32_t *pos = ferry__malloc((n ? n : 1) * sizeof *pos);
            if (!pos)
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
            for (size_t i = 0; i < n; i++)
                pos[i] = SKIP;
            for (size_t i = 0, k = 0; i < n; i++)
                if (k < t->nsel && t->all[by_off[i]].file_name == t->sel[k].file_name)
                    pos[by_off[i]] = (uint32_t)k++;
            for (size_t h = 0; h <= ix->mask; h++) {
                uint32_t e = ix->slots[h];
                ix->slots[h] = !e ? 0 : pos[e - 1] == SKIP ? SKIP : pos[e - 1] + 1;
            }
            ferry__free(pos);
        }
        t->names = *ix;
        ix->slots = NULL;
        goto cleanup;
    }
    if (!ferry__tensors_index_build(&t->names, t->nsel, sel_name, t, t->hash_key, &dup))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    if (dup != SIZE_MAX) {
        size_t other = index_find(&t->names, t->sel[dup].name, sel_name, t, t->hash_key);
        FERRY_FAIL(FERRY_EINVAL,
                   "%s: tensors \"%s\" and \"%s\" are both named \"%s\" after "
                   "renaming",
                   t->label, t->sel[other].file_name, t->sel[dup].file_name, t->sel[dup].name);
    }
cleanup:
    ferry__free(keep);
    return rc;
}

/* ---- open ---- */

/* The selected tensors will be read (by the CRC check or the caller): ask the
 * kernel for them ahead, in runs of adjacent tensors (one call when all are
 * selected), and for nothing else. The pages are not mapped here: faults taken by
 * the CRC threads, a few pages at a time and on every thread at once, cost less
 * than mapping them all from one thread first (MADV_POPULATE_READ). */
static void advise_selected(const ferry_tensors *t)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t pg = page > 0 ? (uint64_t)page : 4096;
    for (size_t i = 0; i < t->nsel;) {
        uint64_t a = t->sel[i].offset, b = a + t->sel[i].nbytes;
        size_t k = i + 1;
        while (k < t->nsel && t->sel[k].offset == b)
            b += t->sel[k++].nbytes;
        i = k;
        a -= a % pg;
        if (b <= a)
            continue;
        madvise((uint8_t *)t->map.data + a, (size_t)(b - a), MADV_WILLNEED);
    }
}

static int open_bytes(ferry_tensors *t, const ferry_tensors_opts *o)
{
    int rc = 0;
    size_t *by_off = NULL;
    ferry__name_index ix = {0};
    FERRY_TRY(ferry__tensors_read_header(t, o->max_header ? o->max_header
                                                          : FERRY_TENSORS_DEFAULT_MAX_HEADER));
    FERRY_TRY(ferry__tensors_check_header(t, t->size - t->data_start, &by_off, &ix));
    FERRY_TRY(select_and_rename(t, by_off, &ix, o));
    bool check = !(o->flags & FERRY_TENSORS_NO_VERIFY);
    unsigned threads = ferry__tensors_threads(o->threads);
    if (t->map.data)
        advise_selected(t);
    if (o->flags & FERRY_TENSORS_COPY) {
        size_t total = 0;
        for (size_t i = 0; i < t->nsel; i++) {
            if (t->sel[i].nbytes > SIZE_MAX - 64 ||
                !ferry__add_size(total, ferry__align64((size_t)t->sel[i].nbytes), &total))
                FERRY_FAIL(FERRY_EOVERFLOW, "%s: too large to copy", t->label);
        }
        ferry_tensor_info *src = ferry__malloc((t->nsel ? t->nsel : 1) * sizeof *src);
        if (!src)
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
        if (t->nsel) /* sel is NULL in a file of no tensors */
            memcpy(src, t->sel, t->nsel * sizeof *src);
        t->copy = total ? ferry__aligned_alloc(total) : NULL;
        if (total && !t->copy) {
            ferry__free(src);
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a %zu-byte copy", t->label, total);
        }
        size_t at = 0;
        for (size_t i = 0; i < t->nsel; i++) {
            t->sel[i].data = t->sel[i].nbytes ? (uint8_t *)t->copy + at : NULL;
            at += ferry__align64((size_t)t->sel[i].nbytes);
        }
        /* the CRCs are checked on the copy: the bytes kept are the bytes checked */
        rc = copy_and_verify(t, src, check, threads);
        ferry__free(src);
        if (rc < 0)
            goto cleanup;
        /* the header's strings stay in the arena; only the data goes */
        ferry__unmap(&t->map);
        t->base = NULL;
    } else {
        FERRY_TRY(copy_and_verify(t, NULL, check, threads));
    }
cleanup:
    ferry__free(by_off);
    ferry__free(ix.slots);
    return rc;
}

static const ferry_tensors_opts no_opts;

int ferry_tensors_open_memory(ferry_tensors **out, const void *data, size_t size, const char *name,
                              const ferry_tensors_opts *opts)
{
    int rc = 0;
    *out = NULL;
    ferry_tensors *t = ferry__calloc(1, sizeof *t);
    if (!t)
        return ferry__err(FERRY_ENOMEM, "out of memory");
    t->label = ferry__strdup(name ? name : "(memory)");
    if (!t->label)
        FERRY_FAIL(FERRY_ENOMEM, "out of memory");
    if (!data && size)
        FERRY_FAIL(FERRY_EINVAL, "%s: NULL data of %zu bytes", t->label, size);
    t->base = data;
    t->size = size;
    t->hash_key = ferry_hash64(ferry_now_ns(), (uint64_t)(uintptr_t)t);
    FERRY_TRY(open_bytes(t, opts ? opts : &no_opts));
    *out = t;
    return 0;
cleanup:
    ferry_tensors_free(t);
    return rc;
}

int ferry_tensors_open(ferry_tensors **out, const char *path, const ferry_tensors_opts *opts)
{
    int rc = 0;
    *out = NULL;
    if (!path)
        return ferry__err(FERRY_EINVAL, "ferry_tensors_open: NULL path");
    ferry_tensors *t = ferry__calloc(1, sizeof *t);
    if (!t)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", path);
    t->label = ferry__strdup(path);
    if (!t->label)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    t->hash_key = ferry_hash64(ferry_now_ns(), (uint64_t)(uintptr_t)t);
    FERRY_TRY(ferry__guard_install());
    FERRY_TRY(ferry__map_file(&t->map, path));
    t->base = t->map.data;
    t->size = t->map.size;
    FERRY_TRY(open_bytes(t, opts ? opts : &no_opts));
    *out = t;
    return 0;
cleanup:
    ferry_tensors_free(t);
    return rc;
}

size_t ferry_tensors_count(const ferry_tensors *t)
{
    return t ? t->nsel : 0;
}

size_t ferry_tensors_file_count(const ferry_tensors *t)
{
    return t ? t->nall : 0;
}

const ferry_tensor_info *ferry_tensors_at(const ferry_tensors *t, size_t i)
{
    return t && i < t->nsel ? &t->sel[i] : NULL;
}

const ferry_tensor_info *ferry_tensors_find(const ferry_tensors *t, const char *name)
{
    if (!t || !name)
        return NULL;
    size_t i = index_find(&t->names, name, sel_name, t, t->hash_key);
    return i == SIZE_MAX ? NULL : &t->sel[i];
}

bool ferry__tensors_is_crc_key(const char *k)
{
    return !strcmp(k, FERRY_TENSORS_CRC_KEY);
}

size_t ferry_tensors_metadata_count(const ferry_tensors *t)
{
    size_t n = 0;
    for (size_t i = 0; t && i < t->nmeta; i++)
        n += !ferry__tensors_is_crc_key(t->meta_keys[i]);
    return n;
}

const char *ferry_tensors_metadata_at(const ferry_tensors *t, size_t i, const char **key)
{
    for (size_t k = 0; t && k < t->nmeta; k++) {
        if (ferry__tensors_is_crc_key(t->meta_keys[k]))
            continue;
        if (i-- == 0) {
            if (key)
                *key = t->meta_keys[k];
            return t->meta_vals[k];
        }
    }
    if (key)
        *key = NULL;
    return NULL;
}

const char *ferry_tensors_metadata_get(const ferry_tensors *t, const char *key)
{
    for (size_t k = 0; t && key && k < t->nmeta; k++)
        if (!ferry__tensors_is_crc_key(t->meta_keys[k]) && !strcmp(t->meta_keys[k], key))
            return t->meta_vals[k];
    return NULL;
}
