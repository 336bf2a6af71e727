/*
 * Sources described as text: "kind:location,key=value,...". One parser for the CLI,
 * the Python module and pipeline descriptions.
 */
#include "dataset_internal.h"
#include "csv_internal.h"
#include "lmdb_internal.h"
#include "shard_stream.h"
#include "ferry/pipeline.h"
#include "ferry/stream.h"

#include <string.h>

int ferry__spec_parse(ferry__spec *s, const char *text)
{
    memset(s, 0, sizeof *s);
    if (!text)
        return ferry__err(FERRY_EINVAL, "source: spec is NULL");
    size_t n = strlen(text);
    if (n >= FERRY_SPEC_MAX)
        return ferry__err(FERRY_EINVAL, "source: spec is %zu bytes, over the %d limit", n,
                          FERRY_SPEC_MAX - 1);
    memcpy(s->buf, text, n + 1);
    char *colon = strchr(s->buf, ':');
    if (!colon || colon == s->buf)
        return ferry__err(FERRY_EINVAL, "source \"%.64s\": expected KIND:LOCATION[,key=value...]",
                          text);
    *colon = 0;
    s->kind = s->buf;
    char *p = colon + 1;
    s->location = p;
    char *comma = strchr(p, ',');
    if (!comma)
        return 0;
    *comma = 0;
    p = comma + 1;
    if (!*p)
        return ferry__err(FERRY_EINVAL, "source %s: empty option after ','", s->kind);
    while (*p) {
        if (s->nopts == FERRY_SPEC_MAX_OPTS)
            return ferry__err(FERRY_EINVAL, "source \"%.64s\": more than %d options", text,
                              FERRY_SPEC_MAX_OPTS);
        char *end = strchr(p, ',');
        if (end)
            *end = 0;
        char *eq = strchr(p, '=');
        if (!eq || eq == p)
            return ferry__err(FERRY_EINVAL, "source %s: option \"%.64s\" is not key=value", s->kind,
                              p);
        *eq = 0;
        /* "key=," is a comma (a delimiter, say) when it ends the text or an option */
        if (end && end == eq + 1 && (end[1] == 0 || end[1] == ',')) {
            *end = ','; /* the value is the comma itself */
            if (end[1] == 0) {
                end = NULL;
            } else {
                end++; /* the next comma separates */
                *end = 0;
            }
        }
        for (int i = 0; i < s->nopts; i++)
            if (!strcmp(s->key[i], p))
                return ferry__err(FERRY_EINVAL, "source %s: option \"%.64s\" given twice", s->kind,
                                  p);
        s->key[s->nopts] = p;
        s->value[s->nopts] = eq + 1;
        s->nopts++;
        if (!end)
            break;
        p = end + 1;
        if (!*p)
            return ferry__err(FERRY_EINVAL, "source %s: empty option after ','", s->kind);
    }
    return 0;
}

int ferry__spec_u64(ferry__spec *s, const char *key, uint64_t lo, uint64_t hi, uint64_t *out)
{
    for (int i = 0; i < s->nopts; i++) {
        if (strcmp(s->key[i], key))
            continue;
        s->used[i] = true;
        uint64_t v;
        if (!ferry__parse_u64(s->value[i], &v) || v < lo || v > hi)
            return ferry__err(FERRY_EINVAL,
                              "source %s: %s=\"%.64s\" is not a number in [%llu, "
                              "%llu]",
                              s->kind, key, s->value[i], (unsigned long long)lo,
                              (unsigned long long)hi);
        *out = v;
        return 0;
    }
    return 0;
}

const char *ferry__spec_str(ferry__spec *s, const char *key)
{
    for (int i = 0; i < s->nopts; i++) {
        if (!strcmp(s->key[i], key)) {
            s->used[i] = true;
            return s->value[i];
        }
    }
    return NULL;
}

int ferry__spec_bool(ferry__spec *s, const char *key, int *out)
{
    const char *v = ferry__spec_str(s, key);
    if (!v)
        return 0;
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        *out = 0;
    else
        return ferry__err(FERRY_EINVAL, "source %s: %s=\"%.64s\" is not 0 or 1", s->kind, key, v);
    return 0;
}

int ferry__spec_check_used(const ferry__spec *s)
{
    for (int i = 0; i < s->nopts; i++)
        if (!s->used[i])
            return ferry__err(FERRY_EINVAL, "source %s: unknown option \"%.64s\"", s->kind,
                              s->key[i]);
    return 0;
}

static int open_synthetic(ferry_dataset **out, ferry__spec *s)
{
    ferry_synthetic_opts o = {.bytes = 16};
    if (!ferry__parse_u64(s->location, &o.count))
        return ferry__err(FERRY_EINVAL, "source synthetic: COUNT \"%.64s\" is not a number",
                          s->location);
    int rc;
    if ((rc = ferry__spec_u64(s, "bytes", 0, (uint64_t)1 << 30, &o.bytes)) < 0 ||
        (rc = ferry__spec_u64(s, "cost", 0, (uint64_t)1 << 32, &o.cost)) < 0 ||
        (rc = ferry__spec_u64(s, "seed", 0, UINT64_MAX, &o.seed)) < 0 ||
        (rc = ferry__spec_u64(s, "classes", 1, UINT64_MAX, &o.classes)) < 0 ||
        (rc = ferry__spec_u64(s, "var", 0, (uint64_t)1 << 24, &o.var_max)) < 0 ||
        (rc = ferry__spec_u64(s, "fail_every", 0, UINT64_MAX, &o.fail_every)) < 0 ||
        (rc = ferry__spec_u64(s, "sleep_us", 0, 60000000, &o.sleep_us)) < 0 ||
        (rc = ferry__spec_u64(s, "pool", 0, (uint64_t)1 << 24, &o.pool)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    return ferry_dataset_synthetic(out, &o);
}

/* The value of option `key` without taking it (the kind's own parser may). */
static const char *spec_peek(const ferry__spec *s, const char *key)
{
    for (int i = 0; i < s->nopts; i++)
        if (!strcmp(s->key[i], key))
            return s->value[i];
    return NULL;
}

/* shuffle=N on a stream: a shuffle buffer of N samples per opened shard, seeded by
 * the source's seed= (0 without one). The option is taken before the kind's parser
 * runs; a map-style kind then refuses it with what to do instead. */
static int stream_shuffle_spec(ferry__spec *s, uint64_t *buffer, uint64_t *seed)
{
    int rc;
    *buffer = 0;
    *seed = 0;
    if ((rc = ferry__spec_u64(s, "shuffle", 1, FERRY_STREAM_MAX_BUFFER, buffer)) < 0)
        return rc;
    if (*buffer == 0)
        return 0;
    const char *v = spec_peek(s, "seed");
    if (v && !strcmp(s->kind, "csv")) /* csv has no seed of its own */
        return ferry__spec_u64(s, "seed", 0, UINT64_MAX, seed);
    if (v && !ferry__parse_u64(v, seed))
        return ferry__err(FERRY_EINVAL, "source %s: seed=\"%.64s\" is not a number", s->kind, v);
    return 0;
}

int ferry_source_open(const char *spec, ferry_dataset **ds, ferry_stream **st)
{
    *ds = NULL;
    if (st)
        *st = NULL;
    ferry__spec *s = ferry__malloc(sizeof *s);
    if (!s)
        return ferry__err(FERRY_ENOMEM, "source: out of memory");
    ferry_image_pipeline ip;
    const char *image_field = NULL;
    int images = 0;
    uint64_t shuffle_buffer = 0, shuffle_seed = 0;
    int rc = ferry__spec_parse(s, spec);
    if (rc == 0)
        rc = stream_shuffle_spec(s, &shuffle_buffer, &shuffle_seed);
    if (rc == 0)
        rc = ferry__images_spec(s, !strcmp(s->kind, "images"), &ip, &image_field, &images);
    if (rc == 0) {
        if (!strcmp(s->kind, "images")) {
            /* an image folder: files with image extensions, decoded by the pipeline */
            if (!ferry__spec_str(s, "ext") && s->nopts < FERRY_SPEC_MAX_OPTS) {
                s->key[s->nopts] = "ext";
                s->value[s->nopts++] = "jpg;jpeg;png";
            }
            rc = ferry__files_open_spec(ds, s);
        } else if (!strcmp(s->kind, "synthetic"))
            rc = open_synthetic(ds, s);
        else if (!strcmp(s->kind, "lines"))
            rc = ferry__lines_open_spec(ds, s);
        else if (!strcmp(s->kind, "records"))
            rc = ferry__records_open_spec(ds, st, s);
        else if (!strcmp(s->kind, "lmdb"))
            rc = ferry__lmdb_open_spec(ds, s);
        else if (!strcmp(s->kind, "files"))
            rc = ferry__files_open_spec(ds, s);
        else if (!strcmp(s->kind, "npy"))
            rc = ferry__npy_open_spec(ds, s);
        else if (!strcmp(s->kind, "tokens"))
            rc = ferry__tokens_open_spec(ds, s);
        else if (!strcmp(s->kind, "mds"))
            rc = ferry__mds_open_spec(ds, s);
        else if (!strcmp(s->kind, "tfrecord"))
            rc = ferry__tfrecord_open_spec(ds, st, s);
        else if (!strcmp(s->kind, "wds"))
            rc = ferry__wds_open_spec(ds, st, s);
        else if (!strcmp(s->kind, "csv"))
            rc = st ? ferry__csv_open_spec(st, s)
                    : ferry__err(FERRY_EINVAL,
                                 "source csv: a stream; open it with ferry_source_open");
        else
            rc = ferry__err(FERRY_EINVAL,
                            "source: unknown kind \"%.64s\" (known: synthetic, lines, files, "
                            "images, records, lmdb, csv, npy, tokens, mds, tfrecord, wds)",
                            s->kind);
    }
    if (rc == 0 && images) {
        if (!*ds && ip.mode != FERRY_PIPELINE_NONE) {
            ferry_stream *inner = *st;
            *st = NULL;
            rc = ferry_stream_images(st, inner, image_field, &ip);
        } else if (!*ds) {
            ferry_stream_free(*st);
            *st = NULL;
            rc = ferry__err(FERRY_EINVAL, "source %s: pipeline=none needs a map-style source",
                            s->kind);
        } else {
            ferry_dataset *inner = *ds;
            *ds = NULL;
            rc = ferry_dataset_images(ds, inner, image_field, &ip, 1);
        }
    }
    if (rc == 0 && shuffle_buffer) {
        if (!*ds && st && *st) {
            ferry_stream *inner = *st;
            *st = NULL;
            rc = ferry_stream_shuffle(st, inner, (size_t)shuffle_buffer, shuffle_seed);
        } else {
            ferry_dataset_free(*ds);
            *ds = NULL;
            rc = ferry__err(FERRY_EINVAL,
                            "source %s: shuffle= is for streams; a map-style source is shuffled "
                            "by the loader (the shuffle option, ferry bench --shuffle)",
                            s->kind);
        }
    }
    ferry__free(s);
    return rc;
}

int ferry_dataset_open(ferry_dataset **out, const char *spec)
{
    ferry_stream *st = NULL;
    int rc = ferry_source_open(spec, out, &st);
    if (rc == 0 && st) {
        ferry_stream_free(st);
        return ferry__err(FERRY_EINVAL,
                          "source \"%.64s\" is a stream, not map-style: open it with "
                          "ferry_source_open",
                          spec);
    }
    return rc;
}
