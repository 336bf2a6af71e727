/*
 * The registry of source kinds: "kind:location,key=value,..." split by spec.c and
 * opened by its kind's opener from the table below (the order of its rows is that
 * of the "known" list). Adding a kind is a file with its opener, and a row.
 */
#include "spec.h"
#include "../io/remote.h"
#include "ferry/pipeline.h"
#include "ferry/stream.h"

#include <stdio.h>
#include <string.h>

enum {
    MAP = 1,    /* opens map-style: without it the kind is stream-only */
    STREAM = 2, /* may open a stream: then shuffle= applies */
    SEED = 4,   /* reads seed= itself; a stream kind without it has shuffle= take it */
    IMAGES = 8, /* decodes images: the image options apply without pipeline= */
};

static const struct kind {
    const char *name;
    ferry__opener *open;
    unsigned flags;
} kinds[] = {
    {"synthetic", ferry__synthetic_open_spec, MAP | SEED},
    {"lines", ferry__lines_open_spec, MAP},
    {"files", ferry__files_open_spec, MAP},
    {"images", ferry__images_open_spec, MAP | IMAGES},
    {"records", ferry__records_open_spec, MAP | STREAM | SEED},
    {"lmdb", ferry__lmdb_open_spec, MAP},
    {"csv", ferry__csv_open_spec, STREAM},
    {"npy", ferry__npy_open_spec, MAP},
    {"tokens", ferry__tokens_open_spec, MAP},
    {"mds", ferry__mds_open_spec, MAP},
    {"tfrecord", ferry__tfrecord_open_spec, MAP | STREAM | SEED},
    {"wds", ferry__wds_open_spec, MAP | STREAM | SEED},
    {"minidb", ferry__kv_open_spec, MAP | STREAM | SEED},
    {"leveldb", ferry__kv_open_spec, MAP},
    {"rocksdb", ferry__kv_open_spec, MAP},
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static int unknown_kind(const char *name)
{
    char known[256] = "";
    for (size_t i = 0; i < NKINDS; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 kinds[i].name);
    return ferry__err(FERRY_EINVAL, "source: unknown kind \"%.64s\" (known: %s)", name, known);
}

/* shuffle=N on a stream: a shuffle buffer of N samples per opened shard, seeded by
 * the source's seed= (0 without one). The option is taken before the kind's opener
 * runs; a map-style source then refuses it with what to do instead. */
static int shuffle_spec(ferry__spec *s, unsigned flags, uint64_t *buffer, uint64_t *seed)
{
    int rc;
    *buffer = 0;
    *seed = 0;
    if ((rc = ferry__spec_u64(s, "shuffle", 1, FERRY_STREAM_MAX_BUFFER, buffer)) < 0)
        return rc;
    if (*buffer == 0)
        return 0;
    const char *v = ferry__spec_peek(s, "seed");
    if (v && (flags & STREAM) && !(flags & SEED))
        return ferry__spec_u64(s, "seed", 0, UINT64_MAX, seed);
    if (v && !ferry__parse_u64(v, seed))
        return ferry__err(FERRY_EINVAL, "source %s: seed=\"%.64s\" is not a number", s->kind, v);
    return 0;
}

/* cache= and cache_limit=: the node cache of remote objects (io/remote.h), for the
 * process. mds: reads cache= too (its zstd shards' decompressed copies go there),
 * so there it is only looked at. */
static int cache_spec(ferry__spec *s)
{
    const char *dir =
        strcmp(s->kind, "mds") ? ferry__spec_str(s, "cache") : ferry__spec_peek(s, "cache");
    const char *limit = ferry__spec_str(s, "cache_limit");
    if (!dir && !limit)
        return 0;
    if (dir && !strcmp(s->kind, "mds") && !strstr(s->location, "://"))
        return 0; /* a local MDS set's own cache folder */
    return ferry__cache_configure(dir, limit);
}

int ferry_source_open(const char *spec, ferry_dataset **ds, ferry_stream **st)
{
    return ferry_source_open_flags(spec, 0, ds, st);
}

int ferry_source_open_flags(const char *spec, unsigned flags, ferry_dataset **ds, ferry_stream **st)
{
    *ds = NULL;
    if (st)
        *st = NULL;
    ferry__spec *s = ferry__malloc(sizeof *s);
    if (!s)
        return ferry__err(FERRY_ENOMEM, "source: out of memory");
    ferry_image_pipeline ip;
    const char *image_field = NULL;
    const struct kind *k = NULL;
    int images = 0;
    uint64_t shuffle_buffer = 0, shuffle_seed = 0;
    int rc = ferry__spec_parse(s, spec);
    for (size_t i = 0; rc == 0 && !k && i < NKINDS; i++)
        k = !strcmp(s->kind, kinds[i].name) ? &kinds[i] : NULL;
    if (rc == 0 && (flags & FERRY_SOURCE_ENCODED) && k && (k->flags & IMAGES))
        rc = ferry__spec_default(s, "pipeline", "none");
    if (rc == 0)
        rc = shuffle_spec(s, k ? k->flags : 0, &shuffle_buffer, &shuffle_seed);
    if (rc == 0)
        rc = cache_spec(s);
    if (rc == 0)
        rc = ferry__images_spec(s, k && (k->flags & IMAGES), &ip, &image_field, &images);
    if (rc == 0 && !k)
        rc = unknown_kind(s->kind);
    else if (rc == 0 && !st && !(k->flags & MAP))
        rc = ferry__err(FERRY_EINVAL, "source %s: a stream; open it with ferry_source_open",
                        s->kind);
    else if (rc == 0)
        rc = k->open(ds, st, s);
    /* the decorators take the inner one, also when they fail */
    if (rc == 0 && images && *ds)
        rc = ferry_dataset_images(ds, *ds, image_field, &ip, 1);
    else if (rc == 0 && images && ip.mode != FERRY_PIPELINE_NONE)
        rc = ferry_stream_images(st, *st, image_field, &ip);
    else if (rc == 0 && images) {
        ferry_stream_free(*st);
        *st = NULL;
        rc = ferry__err(FERRY_EINVAL, "source %s: pipeline=none needs a map-style source", s->kind);
    }
    if (rc == 0 && shuffle_buffer && !*ds)
        rc = ferry_stream_shuffle(st, *st, (size_t)shuffle_buffer, shuffle_seed);
    else if (rc == 0 && shuffle_buffer) {
        ferry_dataset_free(*ds);
        *ds = NULL;
        rc = ferry__err(FERRY_EINVAL,
                        "source %s: shuffle= is for streams; a map-style source is shuffled by "
                        "the loader (the shuffle option, ferry bench --shuffle)",
                        s->kind);
    }
    char *name = rc < 0 ? NULL : *ds ? (*ds)->source : (*st)->source;
    if (name)
        snprintf(name, sizeof(*ds)->source, "%s:%s", s->kind, s->location);
    /* remote objects anywhere in the location (npy: "x=s3://...;y=..."): a loader
     * counts the fetch buffers in its memory budget */
    if (name && (strstr(s->location, "s3://") || strstr(s->location, "http://") ||
                 strstr(s->location, "https://")))
        *(*ds ? &(*ds)->remote : &(*st)->remote) = true;
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
