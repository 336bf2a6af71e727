/*
 * Named tensors in the safetensors format: a bounded header parser that trusts
 * nothing, zero-copy loading from a mapping, and a multi-threaded atomic writer.
 */
#include "ferry/tensors.h"

#include "../core/guard.h"
#include "../core/internal.h"
#include "../core/bytes.h"
#include "../formats/json.h"
#include "../io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define JSON_MAX_DEPTH 64
#define VERIFY_PIECE ((uint64_t)32 << 20) /* bytes of one CRC job */
#define VERIFY_RUN ((uint64_t)4 << 20)    /* tensors smaller than this are checked in runs */
#define DEFAULT_CHUNK ((uint64_t)16 << 20)
#define WRITE_PIECE ((size_t)1 << 20) /* bytes checksummed then written in one go */

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

static bool dtype_ok(ferry_st_dtype dt)
{
    return (int)dt > FERRY_ST_INVALID && (int)dt < FERRY_ST_DTYPE_COUNT;
}

const char *ferry_st_dtype_name(ferry_st_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].name : "INVALID";
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

/* The dtype named by the n bytes at s (not NUL-terminated). */
static ferry_st_dtype dtype_from_bytes(const char *s, size_t n)
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
    return dtype_ok(dt) ? dtypes[dt].bits : 0;
}

ferry_dtype ferry_st_dtype_core(ferry_st_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].core : FERRY_DTYPE_INVALID;
}

/* Bytes of numel elements of dt: false when they overflow or do not fill whole
 * bytes. */
static bool byte_count(ferry_st_dtype dt, uint64_t numel, uint64_t *out)
{
    uint64_t bits;
    if (__builtin_mul_overflow(numel, (uint64_t)dtypes[dt].bits, &bits) || bits % 8)
        return false;
    *out = bits / 8;
    return true;
}

/* ---- threads ---- */

/* The threads of CRC checks, copies and writes (ferry__parallel_for): as asked, at
 * most 64 (a writer keeps a staging buffer per thread); 0 = one per CPU, up to 8. */
static unsigned default_threads(unsigned asked)
{
    if (asked)
        return asked > 64 ? 64 : asked;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > 8 ? 8 : (unsigned)c;
}

/* ---- name lookups: open addressing over a keyed FNV-1a hash ----
 * The key differs from handle to handle, so that a header cannot be made of names
 * that collide on purpose. */

typedef struct name_index {
    uint32_t *slots; /* index + 1; 0 = empty; SKIP = a name not selected (probing goes on) */
    size_t mask;
} name_index;

#define SKIP UINT32_MAX
/* The most names an index holds (a header of the default limit holds 2 million). */
#define MAX_NAMES ((size_t)UINT32_MAX - 1)

typedef const char *(*name_of_fn)(const void *ctx, size_t i);

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

/* Builds the index of n names; *dup is the first name seen twice (or SIZE_MAX). */
static bool index_build(name_index *ix, size_t n, name_of_fn name_of, const void *ctx, uint64_t key,
                        size_t *dup)
{
    size_t cap = 16;
    if (n > MAX_NAMES)
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
static size_t index_find(const name_index *ix, const char *name, name_of_fn name_of,
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

/* Where the header puts a tensor (beside its ferry_tensor_info in all). */
typedef struct span {
    uint64_t begin, end; /* in the data section */
    size_t shape_at;     /* index of its first dimension in shapes */
} span;

struct ferry_tensors {
    char *label; /* the path, for messages */
    ferry__map map;
    const uint8_t *base; /* the whole file */
    size_t size;
    uint64_t data_start;
    char *arena; /* decoded strings of the header */
    size_t arena_used, arena_cap;
    int64_t *shapes;
    size_t nshapes, cap_shapes;
    ferry_tensor_info *all; /* every tensor, in header order */
    span *spans;            /* beside all */
    size_t nall, cap_all, cap_spans;
    const char **meta_keys, **meta_vals;
    size_t nmeta, cap_meta;
    /* selected, in file order: all itself when that is every tensor (the usual
     * case, which then costs no copy) */
    ferry_tensor_info *sel;
    size_t nsel;
    name_index names; /* of sel, by name after renaming */
    uint64_t hash_key;
    char *renamed; /* names after renaming */
    void *copy;    /* FERRY_TENSORS_COPY: the tensors' bytes */
};

static const char *entry_name(const void *ctx, size_t i)
{
    return ((const ferry_tensors *)ctx)->all[i].file_name;
}

static const char *sel_name(const void *ctx, size_t i)
{
    return ((const ferry_tensors *)ctx)->sel[i].name;
}

static const char *meta_key(const void *ctx, size_t i)
{
    return ((const char *const *)ctx)[i];
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

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
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

/* ---- the header ---- */

typedef struct parser {
    ferry_tensors *t;
    ferry__json j;
    bool seen_meta;
} parser;

/* "file: header at offset N: why", the offset counted from the start of the file. */
static int json_error(parser *ps, const char *what)
{
    return ferry__err(FERRY_ECORRUPT, "%s: header at offset %llu: %s%s%s", ps->t->label,
                      (unsigned long long)(8 + ferry__json_offset(&ps->j)), what,
                      ps->j.err ? ": " : "", ps->j.err ? ps->j.err : "");
}

/* A string decoded at the end of the arena; kept only when committed. */
static bool str_at_end(parser *ps, char **s, size_t *len)
{
    ferry_tensors *t = ps->t;
    *s = t->arena + t->arena_used;
    return ferry__json_string(&ps->j, *s, t->arena_cap - t->arena_used, len);
}

static void str_commit(ferry_tensors *t, size_t len)
{
    t->arena_used += len + 1;
}

static int parse_metadata(parser *ps)
{
    ferry_tensors *t = ps->t;
    ferry__json *j = &ps->j;
    if (ps->seen_meta)
        return json_error(ps, "__metadata__ appears twice");
    ps->seen_meta = true;
    if (!ferry__json_eat(j, '{'))
        return json_error(ps, "__metadata__ is not an object");
    if (ferry__json_eat(j, '}'))
        return 0;
    for (;;) {
        char *k, *v;
        size_t kn, vn;
        if (!str_at_end(ps, &k, &kn))
            return json_error(ps, "bad __metadata__ key");
        str_commit(t, kn);
        if (!ferry__json_eat(j, ':'))
            return json_error(ps, "':' expected in __metadata__");
        if (!ferry__json_peek(j, '"'))
            return ferry__err(FERRY_ECORRUPT,
                              "%s: header at offset %llu: __metadata__ value of \"%s\" is not "
                              "a string",
                              t->label, (unsigned long long)(8 + ferry__json_offset(j)), k);
        if (!str_at_end(ps, &v, &vn))
            return json_error(ps, "bad __metadata__ value");
        str_commit(t, vn);
        size_t cap = t->cap_meta;
        if (!grow((void **)&t->meta_keys, &cap, t->nmeta + 1, sizeof *t->meta_keys) ||
            !grow((void **)&t->meta_vals, &t->cap_meta, t->nmeta + 1, sizeof *t->meta_vals))
            return ferry__err(FERRY_ENOMEM, "%s: out of memory", t->label);
        t->meta_keys[t->nmeta] = k;
        t->meta_vals[t->nmeta++] = v;
        if (ferry__json_eat(j, ','))
            continue;
        if (ferry__json_eat(j, '}'))
            return 0;
        return json_error(ps, "',' or '}' expected in __metadata__");
    }
}

static int parse_tensor(parser *ps, const char *name)
{
    ferry_tensors *t = ps->t;
    ferry__json *j = &ps->j;
    ferry_tensor_info info;
    memset(&info, 0, sizeof info);
    info.name = info.file_name = name;
    span sp = {0, 0, t->nshapes};
    bool have_dtype = false, have_shape = false, have_offsets = false;
    if (!ferry__json_eat(j, '{'))
        return ferry__err(FERRY_ECORRUPT,
                          "%s: header at offset %llu: tensor \"%s\" is not an object", t->label,
                          (unsigned long long)(8 + ferry__json_offset(j)), name);
    if (!ferry__json_eat(j, '}')) {
        for (;;) {
            /* the keys as writers put them, matched in place; others decoded */
            enum { OTHER, DTYPE, SHAPE, OFFSETS } key;
            if (ferry__json_match(j, "\"dtype\"", 7)) {
                key = DTYPE;
            } else if (ferry__json_match(j, "\"shape\"", 7)) {
                key = SHAPE;
            } else if (ferry__json_match(j, "\"data_offsets\"", 14)) {
                key = OFFSETS;
            } else {
                char *k;
                size_t kn;
                if (!str_at_end(ps, &k, &kn))
                    return json_error(ps, "bad key in a tensor");
                key = kn == 5 && !memcmp(k, "dtype", 5)            ? DTYPE
                      : kn == 5 && !memcmp(k, "shape", 5)          ? SHAPE
                      : kn == 12 && !memcmp(k, "data_offsets", 12) ? OFFSETS
                                                                   : OTHER;
            }
            if (!ferry__json_eat(j, ':'))
                return json_error(ps, "':' expected");
            if (key == DTYPE) {
                if (have_dtype)
                    return ferry__err(FERRY_ECORRUPT, "%s: tensor \"%s\": dtype given twice",
                                      t->label, name);
                have_dtype = true;
                const char *pv;
                size_t vn;
                if (ferry__json_plain(j, &pv, &vn, 16)) {
                    info.dtype = dtype_from_bytes(pv, vn);
                    if (info.dtype == FERRY_ST_INVALID)
                        return ferry__err(FERRY_ECORRUPT,
                                          "%s: tensor \"%s\": unknown dtype \"%.*s\"", t->label,
                                          name, (int)vn, pv);
                } else {
                    char *v;
                    if (!str_at_end(ps, &v, &vn))
                        return json_error(ps, "bad dtype");
                    info.dtype = ferry_st_dtype_from_name(v);
                    if (info.dtype == FERRY_ST_INVALID)
                        return ferry__err(FERRY_ECORRUPT, "%s: tensor \"%s\": unknown dtype \"%s\"",
                                          t->label, name, v);
                }
            } else if (key == SHAPE) {
                if (have_shape)
                    return ferry__err(FERRY_ECORRUPT, "%s: tensor \"%s\": shape given twice",
                                      t->label, name);
                have_shape = true;
                if (!ferry__json_eat(j, '['))
                    return json_error(ps, "shape is not an array");
                if (!ferry__json_eat(j, ']')) {
                    for (;;) {
                        uint64_t d;
                        if (!ferry__json_u64(j, &d))
                            return json_error(ps, "bad dimension in a shape");
                        if (d > (uint64_t)INT64_MAX)
                            return ferry__err(FERRY_ECORRUPT,
                                              "%s: tensor \"%s\": dimension %llu too large",
                                              t->label, name, (unsigned long long)d);
                        if (info.ndim == FERRY_TENSORS_MAX_DIMS)
                            return ferry__err(FERRY_ECORRUPT,
                                              "%s: tensor \"%s\": more than %d dimensions",
                                              t->label, name, FERRY_TENSORS_MAX_DIMS);
                        if (!grow((void **)&t->shapes, &t->cap_shapes, t->nshapes + 1,
                                  sizeof *t->shapes))
                            return ferry__err(FERRY_ENOMEM, "%s: out of memory", t->label);
                        t->shapes[t->nshapes++] = (int64_t)d;
                        info.ndim++;
                        if (ferry__json_eat(j, ','))
                            continue;
                        if (ferry__json_eat(j, ']'))
                            break;
                        return json_error(ps, "',' or ']' expected in a shape");
                    }
                }
            } else if (key == OFFSETS) {
                if (have_offsets)
                    return ferry__err(FERRY_ECORRUPT, "%s: tensor \"%s\": data_offsets given twice",
                                      t->label, name);
                have_offsets = true;
                if (!ferry__json_eat(j, '[') || !ferry__json_u64(j, &sp.begin) ||
                    !ferry__json_eat(j, ',') || !ferry__json_u64(j, &sp.end) ||
                    !ferry__json_eat(j, ']'))
                    return json_error(ps, "data_offsets is not [BEGIN, END]");
            } else if (!ferry__json_skip(j)) {
                return json_error(ps, "bad value");
            }
            if (ferry__json_eat(j, ','))
                continue;
            if (ferry__json_eat(j, '}'))
                break;
            return json_error(ps, "',' or '}' expected in a tensor");
        }
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return ferry__err(FERRY_ECORRUPT, "%s: tensor \"%s\": no %s", t->label, name,
                          !have_dtype   ? "dtype"
                          : !have_shape ? "shape"
                                        : "data_offsets");
    if (!grow((void **)&t->all, &t->cap_all, t->nall + 1, sizeof *t->all) ||
        !grow((void **)&t->spans, &t->cap_spans, t->nall + 1, sizeof *t->spans))
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", t->label);
    t->spans[t->nall] = sp;
    t->all[t->nall++] = info;
    return 0;
}

static int parse_json(ferry_tensors *t, const uint8_t *hdr, size_t n)
{
    parser ps = {.t = t, .seen_meta = false};
    ferry__json_init(&ps.j, hdr, n, JSON_MAX_DEPTH);
    int rc;
    if (!ferry__json_eat(&ps.j, '{'))
        return json_error(&ps, "the header is not a JSON object");
    if (!ferry__json_eat(&ps.j, '}')) {
        for (;;) {
            char *k;
            size_t kn;
            if (!str_at_end(&ps, &k, &kn))
                return json_error(&ps, "bad tensor name");
            str_commit(t, kn);
            if (!ferry__json_eat(&ps.j, ':'))
                return json_error(&ps, "':' expected");
            rc = kn == 12 && !memcmp(k, "__metadata__", 12) ? parse_metadata(&ps)
                                                            : parse_tensor(&ps, k);
            if (rc < 0)
                return rc;
            if (ferry__json_eat(&ps.j, ','))
                continue;
            if (ferry__json_eat(&ps.j, '}'))
                break;
            return json_error(&ps, "',' or '}' expected");
        }
    }
    if (!ferry__json_at_end(&ps.j))
        return json_error(&ps, "bytes after the header's JSON object");
    return 0;
}

/* Orders indexes of tensors by where their bytes lie (arg: the spans). */
static int cmp_offset(const void *a, const void *b, void *arg)
{
    const span *sp = arg, *x = &sp[*(const size_t *)a], *y = &sp[*(const size_t *)b];
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* The value of a hex digit; 0 for any other byte as well. */
static const uint8_t hex_digit[256] = {
    ['0'] = 0,  ['1'] = 1,  ['2'] = 2,  ['3'] = 3,  ['4'] = 4,  ['5'] = 5,  ['6'] = 6,  ['7'] = 7,
    ['8'] = 8,  ['9'] = 9,  ['a'] = 10, ['b'] = 11, ['c'] = 12, ['d'] = 13, ['e'] = 14, ['f'] = 15,
    ['A'] = 10, ['B'] = 11, ['C'] = 12, ['D'] = 13, ['E'] = 14, ['F'] = 15,
};

/* The 8 hex digits at s (the caller checks what follows them). */
static bool parse_hex32(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        unsigned char c = (unsigned char)s[i];
        uint32_t h = hex_digit[c];
        if (h == 0 && c != '0')
            return false;
        v = v << 4 | h;
    }
    *out = v;
    return true;
}

/* Checks what the header says against itself and the file. On success
 * *by_off_out holds the indexes of the tensors in file order and *ix_out indexes them by name
 * (the caller frees both). */
static int check_header(ferry_tensors *t, uint64_t data_len, size_t **by_off_out,
                        name_index *ix_out)
{
    int rc = 0;
    size_t *by_off = NULL;
    const char **keys = NULL;
    name_index ix = {0}, mix = {0};
    size_t n = t->nall, dup;
    if (n > MAX_NAMES || t->nmeta > MAX_NAMES)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %zu tensors and %zu metadata keys: more than %zu", t->label,
                   n, t->nmeta, MAX_NAMES);
    by_off = ferry__malloc((n ? n : 1) * sizeof *by_off);
    if (!by_off)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    bool sorted = true;
    for (size_t i = 0; i < n; i++) {
        ferry_tensor_info *e = &t->all[i];
        const span *sp = &t->spans[i];
        e->shape = e->ndim ? t->shapes + sp->shape_at : NULL;
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++)
            if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel))
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: tensor \"%s\": the shape's element count "
                           "overflows",
                           t->label, e->name);
        e->numel = numel;
        uint64_t nbytes;
        if (!byte_count(e->dtype, numel, &nbytes))
            FERRY_FAIL(FERRY_ECORRUPT, "%s: tensor \"%s\": %llu elements of %s %s", t->label,
                       e->name, (unsigned long long)numel, ferry_st_dtype_name(e->dtype),
                       numel > UINT64_MAX / dtypes[e->dtype].bits ? "overflow a 64-bit byte count"
                                                                  : "do not fill whole bytes");
        if (sp->end < sp->begin)
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] end before "
                       "they begin",
                       t->label, e->name, (unsigned long long)sp->begin,
                       (unsigned long long)sp->end);
        if (sp->end - sp->begin != nbytes)
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu "
                       "bytes, but %s of %llu elements takes %llu",
                       t->label, e->name, (unsigned long long)sp->begin,
                       (unsigned long long)sp->end, (unsigned long long)(sp->end - sp->begin),
                       ferry_st_dtype_name(e->dtype), (unsigned long long)numel,
                       (unsigned long long)nbytes);
        if (sp->end > data_len)
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] past the end "
                       "of the data (%llu bytes)",
                       t->label, e->name, (unsigned long long)sp->begin,
                       (unsigned long long)sp->end, (unsigned long long)data_len);
        e->nbytes = nbytes;
        e->offset = t->data_start + sp->begin;
        e->data = nbytes ? t->base + e->offset : NULL;
        by_off[i] = i;
        if (i && cmp_offset(&by_off[i - 1], &by_off[i], t->spans) > 0)
            sorted = false;
    }
    if (!index_build(&ix, n, entry_name, t, t->hash_key, &dup))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    if (dup != SIZE_MAX)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: tensor \"%s\" appears twice", t->label,
                   t->all[dup].file_name);
    if (!sorted) /* files are usually written in order */
        qsort_r(by_off, n, sizeof *by_off, cmp_offset, t->spans);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_info *e = &t->all[by_off[i]];
        const span *sp = &t->spans[by_off[i]];
        if (sp->begin != at)
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] %s the "
                       "previous tensor's end at %llu (tensors must be contiguous and not "
                       "overlap)",
                       t->label, e->name, (unsigned long long)sp->begin,
                       (unsigned long long)sp->end,
                       sp->begin < at ? "overlap" : "leave a gap after", (unsigned long long)at);
        at = sp->end;
    }
    if (at != data_len)
        FERRY_FAIL(FERRY_ECORRUPT,
                   "%s: the tensors cover %llu bytes of data, the file holds %llu "
                   "after the header",
                   t->label, (unsigned long long)at, (unsigned long long)data_len);
    /* metadata: unique keys; ferry's CRCs matched to their tensors */
    keys = ferry__malloc((t->nmeta ? t->nmeta : 1) * sizeof *keys);
    if (!keys)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    size_t nkeys = 0;
    const char *crcs = NULL;
    for (size_t i = 0; i < t->nmeta; i++) {
        if (strcmp(t->meta_keys[i], FERRY_TENSORS_CRC_KEY) != 0)
            keys[nkeys++] = t->meta_keys[i];
        else if (crcs)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: __metadata__ key \"%s\" appears twice", t->label,
                       FERRY_TENSORS_CRC_KEY);
        else
            crcs = t->meta_vals[i];
    }
    if (crcs) {
        /* 8 hex digits a tensor, in file order, separated by commas */
        size_t len = strlen(crcs);
        if ((n ? len != 9 * n - 1 : len != 0))
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: __metadata__ \"%s\": %zu bytes is not 8 hex digits "
                       "for each of the %zu tensors",
                       t->label, FERRY_TENSORS_CRC_KEY, len, n);
        for (size_t i = 0; i < n; i++) {
            if ((i + 1 < n && crcs[9 * i + 8] != ',') ||
                !parse_hex32(crcs + 9 * i, &t->all[by_off[i]].crc))
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: tensor \"%s\": its stored CRC (number %zu in "
                           "__metadata__ \"%s\") is not 8 hex digits and a comma",
                           t->label, t->all[by_off[i]].name, i, FERRY_TENSORS_CRC_KEY);
            t->all[by_off[i]].has_crc = 1;
        }
    }
    if (!index_build(&mix, nkeys, meta_key, keys, t->hash_key, &dup))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    if (dup != SIZE_MAX)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: __metadata__ key \"%s\" appears twice", t->label,
                   keys[dup]);
    *by_off_out = by_off;
    *ix_out = ix;
    by_off = NULL;
    ix.slots = NULL;
cleanup:
    ferry__free(by_off);
    ferry__free(keys);
    ferry__free(ix.slots);
    ferry__free(mix.slots);
    return rc;
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

static int select_and_rename(ferry_tensors *t, const size_t *by_off, name_index *ix,
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
            size_t e = index_find(ix, o->names[i], entry_name, t, t->hash_key);
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
    if (!index_build(&t->names, t->nsel, sel_name, t, t->hash_key, &dup))
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

/* The header, parsed from the mapping under a region (what it allocates is
 * t's): a file cut short meanwhile is an error naming it, not a SIGBUS. */
__attribute__((noinline)) static int read_header(ferry_tensors *t, uint64_t max_header)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, t->label, t->map.data, "reading the header");
    int rc = 0;
    if (t->size < 8)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %zu bytes, shorter than the 8-byte header length", t->label,
                   t->size);
    uint64_t n = ferry__load_le64(t->base);
    if (n > max_header)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: header length %llu is over the limit of %llu bytes",
                   t->label, (unsigned long long)n, (unsigned long long)max_header);
    if (n > t->size - 8)
        FERRY_FAIL(FERRY_ECORRUPT,
                   "%s: header length %llu runs past the end of the file (%zu "
                   "bytes)",
                   t->label, (unsigned long long)n, t->size);
    t->data_start = 8 + n;
    t->arena_cap = (size_t)n + 1;
    t->arena = ferry__malloc(t->arena_cap);
    /* Room for as many tensors as the header can hold, so that the arrays are not
     * moved while they fill: a tensor takes at least MIN_TENSOR_JSON bytes of it
     * (more than that would only cost a move). */
    if (!t->arena)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for a %llu-byte header", t->label,
                   (unsigned long long)n);
    rc = parse_json(t, t->base + 8, (size_t)n);
cleanup:
    ferry__guard_pop(&g);
    return rc;
}

static int open_bytes(ferry_tensors *t, const ferry_tensors_opts *o)
{
    int rc = 0;
    size_t *by_off = NULL;
    name_index ix = {0};
    FERRY_TRY(read_header(t, o->max_header ? o->max_header : FERRY_TENSORS_DEFAULT_MAX_HEADER));
    FERRY_TRY(check_header(t, t->size - t->data_start, &by_off, &ix));
    FERRY_TRY(select_and_rename(t, by_off, &ix, o));
    bool check = !(o->flags & FERRY_TENSORS_NO_VERIFY);
    unsigned threads = default_threads(o->threads);
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

static bool is_crc_key(const char *k)
{
    return !strcmp(k, FERRY_TENSORS_CRC_KEY);
}

size_t ferry_tensors_metadata_count(const ferry_tensors *t)
{
    size_t n = 0;
    for (size_t i = 0; t && i < t->nmeta; i++)
        n += !is_crc_key(t->meta_keys[i]);
    return n;
}

const char *ferry_tensors_metadata_at(const ferry_tensors *t, size_t i, const char **key)
{
    for (size_t k = 0; t && k < t->nmeta; k++) {
        if (is_crc_key(t->meta_keys[k]))
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
        if (!is_crc_key(t->meta_keys[k]) && !strcmp(t->meta_keys[k], key))
            return t->meta_vals[k];
    return NULL;
}

/* ---- save ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (!grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) {
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
    unsigned threads = default_threads(o->threads);

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
        if (!dtype_ok(s->dtype))
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
        if (!byte_count(s->dtype, numel, &nbytes) || nbytes > SIZE_MAX)
            FERRY_FAIL(FERRY_EINVAL,
                       "%s: tensor \"%s\": %llu elements of %s do not fill whole "
                       "bytes",
                       path, s->name, (unsigned long long)numel, ferry_st_dtype_name(s->dtype));
        if (nbytes && !s->data)
            FERRY_FAIL(FERRY_EINVAL, "%s: tensor \"%s\": NULL data", path, s->name);
        unsigned bits = dtypes[s->dtype].bits;
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
        if (is_crc_key(o->meta_keys[i]))
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
        sb_str(&h, dtypes[ts[i].src->dtype].name);
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
        if (!grow((void **)&jl, &capj, nj + (size_t)(ts[i].nbytes / chunk) + 2, sizeof *jl))
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
