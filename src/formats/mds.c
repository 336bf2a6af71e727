/*
 * MDS index.json: shards and column encodings, checked before any shard is
 * opened. Uses the bounded JSON reader.
 */
#include "mds_internal.h"
#include "json_tree.h"

#include <stdio.h>
#include <string.h>

#define MAX_NODES ((uint32_t)1 << 22) /* about 120,000 shards */

typedef struct ctx {
    const char *name;
    const ferry__jtree *doc;
} ctx;

static int at(const ctx *c, const ferry__jtree_node *n, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int at(const ctx *c, const ferry__jtree_node *n, int rc, const char *fmt, ...)
{
    char why[FERRY_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return ferry__err(rc, "%s: offset %u: %s", c->name, n ? n->offset : 0, why);
}

static const struct {
    const char *name;
    ferry_dtype dt;
} SCALARS[] = {{"int", FERRY_I64},     {"int8", FERRY_I8},     {"int16", FERRY_I16},
               {"int32", FERRY_I32},   {"int64", FERRY_I64},   {"uint8", FERRY_U8},
               {"uint16", FERRY_U16},  {"uint32", FERRY_U32},  {"uint64", FERRY_U64},
               {"float16", FERRY_F16}, {"float32", FERRY_F32}, {"float64", FERRY_F64}};

static const char *const BYTES[] = {"str",         "bytes", "json", "str_int", "str_float",
                                    "str_decimal", "jpeg",  "png",  "pil"};

/* One column's encoding string into col. */
static int parse_encoding(const ctx *c, const ferry__jtree_node *n, ferry__mds_column *col,
                          const char *enc)
{
    snprintf(col->encoding, sizeof col->encoding, "%s", enc);
    for (size_t k = 0; k < sizeof SCALARS / sizeof SCALARS[0]; k++)
        if (!strcmp(enc, SCALARS[k].name)) {
            col->kind = FERRY__MDS_SCALAR;
            col->dtype = SCALARS[k].dt;
            col->size = ferry_dtype_size(col->dtype);
            return 0;
        }
    for (size_t k = 0; k < sizeof BYTES / sizeof BYTES[0]; k++)
        if (!strcmp(enc, BYTES[k])) {
            col->kind = FERRY__MDS_BYTES;
            col->dtype = FERRY_U8;
            return 0;
        }
    if (!strcmp(enc, "pkl"))
        return at(c, n, FERRY_ENOTSUP,
                  "column \"%s\": encoding pkl (Python pickles: code in data) is refused",
                  col->name);
    if (!strncmp(enc, "ndarray", 7) && (enc[7] == 0 || enc[7] == ':')) {
        if (enc[7] == 0)
            return at(c, n, FERRY_ENOTSUP,
                      "column \"%s\": ndarray without a fixed dtype (each sample names its own) "
                      "is not supported: write it as ndarray:DTYPE",
                      col->name);
        char dt[32];
        const char *colon = strchr(enc + 8, ':');
        size_t dl = colon ? (size_t)(colon - (enc + 8)) : strlen(enc + 8);
        if (dl == 0 || dl >= sizeof dt)
            return at(c, n, FERRY_ECORRUPT, "column \"%s\": bad encoding \"%s\"", col->name, enc);
        memcpy(dt, enc + 8, dl);
        dt[dl] = 0;
        col->dtype = ferry_dtype_from_name(dt);
        if (col->dtype == FERRY_DTYPE_INVALID || col->dtype == FERRY_BOOL ||
            col->dtype == FERRY_BF16 || strlen(dt) < 4)
            return at(c, n, FERRY_ECORRUPT, "column \"%s\": unknown ndarray dtype \"%s\"",
                      col->name, dt);
        if (!colon) {
            col->kind = FERRY__MDS_ARRAY_DYN;
            return 0;
        }
        col->kind = FERRY__MDS_ARRAY;
        size_t bytes = ferry_dtype_size(col->dtype);
        const char *s = colon + 1;
        while (*s) {
            uint64_t v = 0;
            const char *d = s;
            while (*s >= '0' && *s <= '9' && v < ((uint64_t)1 << 40))
                v = v * 10 + (uint64_t)(*s++ - '0');
            if (s == d || v == 0 || (*s && *s != ',') || col->ndim == FERRY_MAX_DIMS - 1 ||
                !ferry__mul_size(bytes, (size_t)v, &bytes) || bytes > ((size_t)1 << 32))
                return at(c, n, FERRY_ECORRUPT, "column \"%s\": bad ndarray shape in \"%s\"",
                          col->name, enc);
            col->shape[col->ndim++] = (int64_t)v;
            if (*s == ',')
                s++;
        }
        if (col->ndim == 0)
            return at(c, n, FERRY_ECORRUPT, "column \"%s\": empty ndarray shape in \"%s\"",
                      col->name, enc);
        col->size = bytes;
        return 0;
    }
    return at(c, n, FERRY_ENOTSUP, "column \"%s\": unknown encoding \"%s\"", col->name, enc);
}

static int get_str(const ctx *c, const ferry__jtree_node *obj, const char *key, char *buf,
                   size_t cap, bool required)
{
    const ferry__jtree_node *v = ferry__jtree_get(c->doc, obj, key);
    buf[0] = 0;
    if (!v || v->type == FERRY__JTREE_NULL) {
        if (required)
            return at(c, obj, FERRY_ECORRUPT, "no \"%s\"", key);
        return 0;
    }
    if (v->type != FERRY__JTREE_STRING)
        return at(c, v, FERRY_ECORRUPT, "\"%s\" is not a string", key);
    if (ferry__jtree_str(v, buf, cap, NULL) < 0)
        return at(c, v, FERRY_ECORRUPT, "\"%s\" is longer than %zu bytes", key, cap - 1);
    return 0;
}

static int get_u64(const ctx *c, const ferry__jtree_node *obj, const char *key, uint64_t *out)
{
    const ferry__jtree_node *v = ferry__jtree_get(c->doc, obj, key);
    if (!v)
        return at(c, obj, FERRY_ECORRUPT, "no \"%s\"", key);
    if (v->type != FERRY__JTREE_NUMBER || !v->is_int || v->i < 0)
        return at(c, v, FERRY_ECORRUPT, "\"%s\" is not a non-negative integer", key);
    *out = (uint64_t)v->i;
    return 0;
}

static int check_basename(const ctx *c, const ferry__jtree_node *n, const char *b)
{
    if (!*b || strchr(b, '/') || !strcmp(b, ".") || !strcmp(b, ".."))
        return at(c, n, FERRY_ECORRUPT, "basename \"%s\" is not a plain file name", b);
    return 0;
}

/* The columns of one shard entry into cols (ncols of them). */
static int parse_columns(const ctx *c, const ferry__jtree_node *sh, ferry__mds_column *cols,
                         int *ncols)
{
    const ferry__jtree_node *names = ferry__jtree_get(c->doc, sh, "column_names"),
                            *encs = ferry__jtree_get(c->doc, sh, "column_encodings"),
                            *sizes = ferry__jtree_get(c->doc, sh, "column_sizes");
    if (!names || names->type != FERRY__JTREE_ARRAY || !encs || encs->type != FERRY__JTREE_ARRAY ||
        !sizes || sizes->type != FERRY__JTREE_ARRAY)
        return at(c, sh, FERRY_ECORRUPT,
                  "a shard needs column_names, column_encodings and column_sizes lists");
    if (names->count != encs->count || names->count != sizes->count)
        return at(c, sh, FERRY_ECORRUPT,
                  "column_names (%u), column_encodings (%u) and column_sizes (%u) disagree",
                  names->count, encs->count, sizes->count);
    if (names->count < 1 || names->count > FERRY_MAX_FIELDS)
        return at(c, names, FERRY_ECORRUPT, "%u columns, outside [1, %d]", names->count,
                  FERRY_MAX_FIELDS);
    const ferry__jtree_node *nm = ferry__jtree_item(c->doc, names, 0),
                            *en = ferry__jtree_item(c->doc, encs, 0),
                            *sz = ferry__jtree_item(c->doc, sizes, 0);
    *ncols = 0;
    for (; nm && en && sz; nm = ferry__jtree_next(c->doc, nm), en = ferry__jtree_next(c->doc, en),
                           sz = ferry__jtree_next(c->doc, sz)) {
        ferry__mds_column *col = &cols[(*ncols)++];
        memset(col, 0, sizeof *col);
        char enc[64];
        if (nm->type != FERRY__JTREE_STRING ||
            ferry__jtree_str(nm, col->name, sizeof col->name - 6, NULL) < 0 || !col->name[0])
            return at(c, nm, FERRY_ECORRUPT, "a column name is not a string of 1..%d bytes",
                      FERRY_MAX_NAME - 7);
        for (int k = 0; k < *ncols - 1; k++)
            if (!strcmp(cols[k].name, col->name))
                return at(c, nm, FERRY_ECORRUPT, "column \"%s\" appears twice", col->name);
        if (en->type != FERRY__JTREE_STRING || ferry__jtree_str(en, enc, sizeof enc, NULL) < 0)
            return at(c, en, FERRY_ECORRUPT, "column \"%s\": the encoding is not a short string",
                      col->name);
        int rc = parse_encoding(c, en, col, enc);
        if (rc < 0)
            return rc;
        /* column_sizes: the fixed size, or null for a variable column */
        if (col->size) {
            if (sz->type != FERRY__JTREE_NUMBER || !sz->is_int || (uint64_t)sz->i != col->size)
                return at(c, sz, FERRY_ECORRUPT,
                          "column \"%s\" (%s) is %zu bytes a sample, but column_sizes says "
                          "otherwise",
                          col->name, enc, col->size);
        } else if (sz->type != FERRY__JTREE_NULL) {
            return at(c, sz, FERRY_ECORRUPT,
                      "column \"%s\" (%s) has a per-sample size, but column_sizes gives it a "
                      "fixed one",
                      col->name, enc);
        }
    }
    return 0;
}

int ferry__mds_index_parse(ferry__mds_index *ix, const char *name, const char *text, size_t n)
{
    memset(ix, 0, sizeof *ix);
    ferry__jtree doc;
    int rc = ferry__jtree_parse(&doc, name, text, n, MAX_NODES, 16);
    if (rc < 0)
        return rc;
    ctx c = {name, &doc};
    const ferry__jtree_node *root = ferry__jtree_node_at(&doc, 0), *ver, *shards;
    if (root->type != FERRY__JTREE_OBJECT)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: offset 0: the index is not a JSON object", name);
    ver = ferry__jtree_get(&doc, root, "version");
    if (ver && (ver->type != FERRY__JTREE_NUMBER || !ver->is_int || ver->i != 2)) {
        rc = at(&c, ver, FERRY_ENOTSUP, "index version is not 2");
        goto cleanup;
    }
    shards = ferry__jtree_get(&doc, root, "shards");
    if (!shards || shards->type != FERRY__JTREE_ARRAY) {
        rc = at(&c, root, FERRY_ECORRUPT, "no \"shards\" list");
        goto cleanup;
    }
    if (shards->count > FERRY__MDS_MAX_SHARDS) {
        rc = at(&c, shards, FERRY_EOVERFLOW, "%u shards, over %zu", shards->count,
                FERRY__MDS_MAX_SHARDS);
        goto cleanup;
    }
    ix->shards = ferry__calloc(shards->count ? shards->count : 1, sizeof *ix->shards);
    if (!ix->shards)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory for %u shards", name, shards->count);
    ferry__mds_column cols[FERRY_MAX_FIELDS];
    for (const ferry__jtree_node *sh = ferry__jtree_item(&doc, shards, 0); sh;
         sh = ferry__jtree_next(&doc, sh)) {
        ferry__mds_shard *s = &ix->shards[ix->nshards];
        char fmt[16], comp[32];
        if (sh->type != FERRY__JTREE_OBJECT) {
            rc = at(&c, sh, FERRY_ECORRUPT, "shard %zu is not an object", ix->nshards);
            goto cleanup;
        }
        s->offset = sh->offset;
        if ((rc = get_str(&c, sh, "format", fmt, sizeof fmt, true)) < 0)
            goto cleanup;
        if (strcmp(fmt, "mds")) {
            rc = at(&c, sh, FERRY_ENOTSUP, "shard %zu: format \"%s\" (only mds is read)",
                    ix->nshards, fmt);
            goto cleanup;
        }
        int ncols = 0;
        if ((rc = parse_columns(&c, sh, ix->nshards ? cols : ix->cols, &ncols)) < 0)
            goto cleanup;
        if (ix->nshards == 0) {
            ix->ncols = ncols;
            for (int k = 0; k < ncols; k++)
                ix->nvar += ix->cols[k].size == 0;
        } else {
            bool same = ncols == ix->ncols;
            for (int k = 0; same && k < ncols; k++)
                same = !strcmp(cols[k].name, ix->cols[k].name) &&
                       !strcmp(cols[k].encoding, ix->cols[k].encoding);
            if (!same) {
                rc = at(&c, sh, FERRY_ECORRUPT, "shard %zu's columns differ from shard 0's",
                        ix->nshards);
                goto cleanup;
            }
        }
        const ferry__jtree_node *raw = ferry__jtree_get(&doc, sh, "raw_data"),
                                *zip = ferry__jtree_get(&doc, sh, "zip_data");
        if (!raw || raw->type != FERRY__JTREE_OBJECT) {
            rc = at(&c, sh, FERRY_ECORRUPT, "shard %zu: no raw_data", ix->nshards);
            goto cleanup;
        }
        if ((rc = get_str(&c, raw, "basename", s->raw, sizeof s->raw, true)) < 0 ||
            (rc = check_basename(&c, raw, s->raw)) < 0 ||
            (rc = get_u64(&c, raw, "bytes", &s->raw_bytes)) < 0 ||
            (rc = get_u64(&c, sh, "samples", &s->samples)) < 0 ||
            (rc = get_str(&c, sh, "compression", comp, sizeof comp, false)) < 0)
            goto cleanup;
        if (comp[0]) {
            /* "zstd" or "zstd:LEVEL" */
            if (strncmp(comp, "zstd", 4) || (comp[4] && comp[4] != ':')) {
                rc = at(&c, sh, FERRY_ENOTSUP, "shard %zu: compression \"%s\" (only zstd is read)",
                        ix->nshards, comp);
                goto cleanup;
            }
            if (!zip || zip->type != FERRY__JTREE_OBJECT) {
                rc = at(&c, sh, FERRY_ECORRUPT, "shard %zu: compressed, but no zip_data",
                        ix->nshards);
                goto cleanup;
            }
            if ((rc = get_str(&c, zip, "basename", s->zip, sizeof s->zip, true)) < 0 ||
                (rc = check_basename(&c, zip, s->zip)) < 0 ||
                (rc = get_u64(&c, zip, "bytes", &s->zip_bytes)) < 0)
                goto cleanup;
        }
        if (s->samples > UINT32_MAX || ix->samples + s->samples < ix->samples) {
            rc = at(&c, sh, FERRY_ECORRUPT, "shard %zu: %llu samples is too many", ix->nshards,
                    (unsigned long long)s->samples);
            goto cleanup;
        }
        ix->samples += s->samples;
        ix->nshards++;
    }
    if (ix->nshards == 0) {
        rc = at(&c, shards, FERRY_ECORRUPT, "no shards");
        goto cleanup;
    }
    ferry__jtree_free(&doc);
    return 0;
cleanup:
    ferry__jtree_free(&doc);
    ferry__mds_index_free(ix);
    return rc;
}

void ferry__mds_index_free(ferry__mds_index *ix)
{
    ferry__free(ix->shards);
    ix->shards = NULL;
    ix->nshards = 0;
}
