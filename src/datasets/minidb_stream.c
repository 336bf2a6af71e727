/*
 * minidb files as a stream: the framing of formats/minidb.c read front to back
 * through the one sequential reader (plain, gzip or zstd; any size, no index),
 * under the shard engine (one file a stream shard, a shuffled file order each
 * epoch, save and resume). Values decode as the mapped reader's do (db_values.c).
 */
#include "shard_stream.h"
#include "db_values.h"
#include "spec.h"
#include "../formats/kv.h"
#include "../formats/lmdb_env.h"
#include "../io/seqread.h"

#include <stdio.h>
#include <string.h>

#define WINDOW ((size_t)64 << 10)
#define DEFAULT_MAX_ENTRY ((uint64_t)64 << 20)
#define STREAM_KEY_MAX 1024 /* raw values: the key field's bound */

typedef struct mstream {
    ferry__shard_files files;
    ferry__db_values vs;
    uint64_t max_entry; /* key and value bytes held in memory at once */
} mstream;

typedef struct mreader {
    ferry__seqread r;
    uint64_t entry; /* the next entry's number in the file */
} mreader;

static int st_open(const void *self, void *rd, const char *path, bool fetch)
{
    mreader *m = rd;
    m->entry = 0;
    return ferry__seqread_open(&m->r, path, path, FERRY__COMP_AUTO, WINDOW);
}

static void st_close(void *rd)
{
    ferry__seqread_close(&((mreader *)rd)->r);
}

/* The next entry's bytes, in the reader's window at *h (8 + *k + *v bytes), or
 * FERRY_END. Sets *broken when the framing cannot be followed on. */
static int next_entry(const mstream *s, mreader *m, const char *path, const uint8_t **h,
                      uint32_t *k, uint32_t *v, bool *broken)
{
    uint64_t at = m->r.off;
    size_t avail;
    int rc = ferry__seqread_need(&m->r, 8, &avail);
    if (rc < 0 || avail == 0) {
        *broken = rc < 0;
        return rc < 0 ? rc : FERRY_END;
    }
    /* the lengths' ranges first, then whether the file holds them */
    if ((rc = ferry__minidb_frame(path, m->r.buf + m->r.pos, avail < 8 ? avail : UINT64_MAX / 4,
                                  m->entry, at, k, v)) < 0) {
        *broken = true;
        return rc;
    }
    uint64_t n = 8 + (uint64_t)*k + *v;
    if (n > s->max_entry) {
        uint64_t skipped;
        *broken = ferry__seqread_skip(&m->r, n, &skipped) < 0 || skipped != n;
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: entry %llu at offset %llu: %llu bytes, over max_entry %llu (raise "
                          "max_entry=)",
                          path, (unsigned long long)m->entry++, (unsigned long long)at,
                          (unsigned long long)n, (unsigned long long)s->max_entry);
    }
    if ((rc = ferry__seqread_need(&m->r, (size_t)n, &avail)) < 0) {
        *broken = true;
        return rc;
    }
    if (avail < n) {
        *broken = true;
        return ferry__minidb_frame(path, m->r.buf + m->r.pos, avail, m->entry, at, k, v);
    }
    *h = m->r.buf + m->r.pos;
    return 0;
}

/* pos: b = the entry's offset in the file (decompressed), c = its number there. */
static int st_next(const void *self, void *rd, const char *path, ferry_sample *out, bool *broken)
{
    const mstream *s = self;
    mreader *m = rd;
    const uint8_t *h = NULL;
    uint32_t k = 0, v = 0;
    uint64_t at = m->r.off, i = m->entry, skipped;
    int rc = next_entry(s, m, path, &h, &k, &v, broken);
    if (rc != 0)
        return rc;
    rc = ferry__db_values_get(&s->vs, h + 8, k, h + 8 + k, v, out);
    if (rc < 0) {
        char key[96];
        rc = ferry__err_prefix(rc, "%s: entry %llu (key \"%s\")", path, (unsigned long long)i,
                               ferry__lmdb_key_repr(key, sizeof key, h + 8, k));
    }
    if (ferry__seqread_skip(&m->r, 8 + (uint64_t)k + v, &skipped) < 0)
        *broken = true;
    m->entry++;
    out->pos.b = at;
    out->pos.c = i;
    return rc;
}

static uint64_t st_size(const void *rd)
{
    return ((const mreader *)rd)->r.size;
}

static void st_save(const void *rd, ferry_state *w)
{
    const mreader *m = rd;
    ferry_state_put_u64(w, m ? m->r.off : 0);
    ferry_state_put_u64(w, m ? m->entry : 0);
}

static int st_resume(const void *self, void *rd, const char *path, const uint64_t *w,
                     ferry_state *r)
{
    mreader *m = rd;
    uint64_t at;
    int rc;
    if (w[1] > w[0] / 9)
        return ferry__err(FERRY_ECORRUPT,
                          "minidb stream: the state names entry %llu at offset %llu of %s: more "
                          "entries than fit there",
                          (unsigned long long)w[1], (unsigned long long)w[0], path);
    if ((rc = ferry__seqread_seek(&m->r, w[0], &at)) < 0)
        return rc;
    if (at != w[0])
        return ferry__err(FERRY_ECORRUPT,
                          "minidb stream: the state names offset %llu of %s, which ends at %llu",
                          (unsigned long long)w[0], path, (unsigned long long)at);
    m->entry = w[1];
    return 0;
}

static int st_fetch(const void *self, void *rd, const char *path, const ferry_pos *pos,
                    ferry_sample *out, bool *broken)
{
    mreader *m = rd;
    uint64_t at;
    int rc;
    if ((rc = ferry__seqread_seek(&m->r, pos->b, &at)) < 0)
        return *broken = true, rc;
    m->entry = pos->c;
    rc = at == pos->b ? st_next(self, rd, path, out, broken) : FERRY_END;
    if (rc == FERRY_END)
        return ferry__err(FERRY_ERANGE, "%s: no entry %llu at offset %llu: the file ends at %llu",
                          path, (unsigned long long)pos->c, (unsigned long long)pos->b,
                          (unsigned long long)at);
    return rc;
}

static void st_destroy(void *self)
{
    mstream *s = self;
    ferry__shard_files_free(&s->files);
    ferry__free(s);
}

static const ferry__shard_format minidb_format = {
    .who = "minidb stream",
    .unit = "file",
    .stranger = "the state was not saved by a minidb stream",
    .tag = 0x31304244494d5946ull, /* "FYMIDB01" */
    .reader_size = sizeof(mreader),
    .words = 2,
    .open = st_open,
    .close = st_close,
    .next = st_next,
    .size = st_size,
    .save = st_save,
    .resume = st_resume,
    .fetch = st_fetch,
    .destroy = st_destroy,
};

/* The fields, from the first entry of the first file. */
static int first_fields(mstream *s, const ferry_db_dataset_opts *o)
{
    mreader m;
    memset(&m, 0, sizeof m);
    const char *path = s->files.paths[0];
    int rc = st_open(s, &m, path, false);
    if (rc < 0)
        return rc;
    const uint8_t *h = NULL;
    uint32_t k = 0, v = 0;
    bool broken = false;
    rc = next_entry(s, &m, path, &h, &k, &v, &broken);
    if (rc == 0)
        rc = ferry__db_values_init(&s->vs, o->value, o->max_len, 0, STREAM_KEY_MAX, h + 8 + k, v);
    else if (rc == FERRY_END)
        rc = ferry__db_values_init(&s->vs, o->value, o->max_len, 0, STREAM_KEY_MAX, NULL, 0);
    if (rc < 0 && h) { /* the value does not decode (the framing errors name the file) */
        char key[96];
        rc = ferry__err_prefix(rc, "%s: entry 0 (key \"%s\")", path,
                               ferry__lmdb_key_repr(key, sizeof key, h + 8, k));
    }
    st_close(&m);
    return rc;
}

int ferry_stream_db(ferry_stream **out, const char *location, const ferry_db_dataset_opts *o,
                    uint64_t max_entry, uint64_t seed)
{
    *out = NULL;
    if (!o || !location)
        return ferry__err(FERRY_EINVAL, "minidb stream: location and options are required");
    if (o->backend && strcmp(o->backend, "minidb"))
        return ferry__err(FERRY_ENOTSUP,
                          "%s stream: only minidb files are read as a stream (LevelDB and "
                          "RocksDB are map-style)",
                          o->backend);
    mstream *s = ferry__calloc(1, sizeof *s);
    if (!s)
        return ferry__err(FERRY_ENOMEM, "minidb stream: out of memory");
    s->max_entry = max_entry ? max_entry : DEFAULT_MAX_ENTRY;
    int rc = ferry__shard_files_list(&s->files, "minidb", location, ferry__minidb_listed,
                                     "minidb files");
    if (rc == 0)
        rc = first_fields(s, o);
    if (rc < 0) {
        st_destroy(s);
        return rc;
    }
    return ferry__shard_stream_create(out, &minidb_format, s, &s->files, seed, s->vs.f,
                                      s->vs.nfields);
}
