/*
 * The safetensors header: an 8-byte length, then a JSON object of tensors and
 * __metadata__, parsed within bounds and checked against itself and the file.
 */
#include "tensors_internal.h"

#include "../core/guard.h"
#include "../core/bytes.h"
#include "../formats/json.h"

#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

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
        if (!ferry__tensors_grow((void **)&t->meta_keys, &cap, t->nmeta + 1,
                                 sizeof *t->meta_keys) ||
            !ferry__tensors_grow((void **)&t->meta_vals, &t->cap_meta, t->nmeta + 1,
                                 sizeof *t->meta_vals))
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
    ferry__tensor_span sp = {0, 0, t->nshapes};
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
                    info.dtype = ferry__tensors_dtype_from_bytes(pv, vn);
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
                        if (!ferry__tensors_grow((void **)&t->shapes, &t->cap_shapes,
                                                 t->nshapes + 1, sizeof *t->shapes))
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
    if (!ferry__tensors_grow((void **)&t->all, &t->cap_all, t->nall + 1, sizeof *t->all) ||
        !ferry__tensors_grow((void **)&t->spans, &t->cap_spans, t->nall + 1, sizeof *t->spans))
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
    const ferry__tensor_span *sp = arg, *x = &sp[*(const size_t *)a], *y = &sp[*(const size_t *)b];
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

static const char *meta_key(const void *ctx, size_t i)
{
    return ((const char *const *)ctx)[i];
}

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

int ferry__tensors_check_header(ferry_tensors *t, uint64_t data_len, size_t **by_off_out,
                                ferry__name_index *ix_out)
{
    int rc = 0;
    size_t *by_off = NULL;
    const char **keys = NULL;
    ferry__name_index ix = {0}, mix = {0};
    size_t n = t->nall, dup;
    if (n > FERRY__TENSORS_MAX_NAMES || t->nmeta > FERRY__TENSORS_MAX_NAMES)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %zu tensors and %zu metadata keys: more than %zu", t->label,
                   n, t->nmeta, FERRY__TENSORS_MAX_NAMES);
    by_off = ferry__malloc((n ? n : 1) * sizeof *by_off);
    if (!by_off)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    bool sorted = true;
    for (size_t i = 0; i < n; i++) {
        ferry_tensor_info *e = &t->all[i];
        const ferry__tensor_span *sp = &t->spans[i];
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
        if (!ferry__tensors_byte_count(e->dtype, numel, &nbytes))
            FERRY_FAIL(FERRY_ECORRUPT, "%s: tensor \"%s\": %llu elements of %s %s", t->label,
                       e->name, (unsigned long long)numel, ferry_st_dtype_name(e->dtype),
                       numel > UINT64_MAX / ferry_st_dtype_bits(e->dtype)
                           ? "overflow a 64-bit byte count"
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
    if (!ferry__tensors_index_build(&ix, n, ferry__tensors_entry_name, t, t->hash_key, &dup))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", t->label);
    if (dup != SIZE_MAX)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: tensor \"%s\" appears twice", t->label,
                   t->all[dup].file_name);
    if (!sorted) /* files are usually written in order */
        qsort_r(by_off, n, sizeof *by_off, cmp_offset, t->spans);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_info *e = &t->all[by_off[i]];
        const ferry__tensor_span *sp = &t->spans[by_off[i]];
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
    if (!ferry__tensors_index_build(&mix, nkeys, meta_key, keys, t->hash_key, &dup))
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

__attribute__((noinline)) int ferry__tensors_read_header(ferry_tensors *t, uint64_t max_header)
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
