/*
 * The record shard writer (docs/record-format.md): records go to a temporary per
 * shard, each shard is renamed into place when full, and the manifest naming them
 * all is written last, so that a reader sees the whole set or the set before.
 * The reader, the files of a set and the manifest are records.c.
 */
#include "ferry/records.h"
#include "../io/io.h"
#include "records_internal.h"
#include "../core/bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define DEFAULT_SHARD_BYTES ((uint64_t)1 << 30)
#define MAX_LEVEL 19
#define MAX_NAME 200 /* a writer's name prefix, so that shard names fit a manifest entry */

/* ---- Schema ---- */

/* Bytes of the encoded schema. */
static size_t schema_size(const ferry_field *fs, int n)
{
    size_t s = 2;
    for (int i = 0; i < n; i++)
        s += 1 + strlen(fs[i].name) + 3 + 8 * (size_t)fs[i].ndim;
    return s;
}

static void schema_encode(const ferry_field *fs, int n, uint8_t *p)
{
    ferry__store_le16(p, (uint16_t)n);
    p += 2;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(fs[i].name);
        *p++ = (uint8_t)len;
        memcpy(p, fs[i].name, len);
        p += len;
        *p++ = (uint8_t)fs[i].dtype;
        *p++ = (uint8_t)fs[i].ndim;
        *p++ = fs[i].variable ? 1 : 0;
        for (int d = 0; d < fs[i].ndim; d++, p += 8)
            ferry__store_le64(p, (uint64_t)fs[i].shape[d]);
    }
}

/* ---- Writing ---- */

typedef struct wshard {
    ferry__atomic_file af; /* the temporary; its fd is closed once the shard is finished */
    uint64_t records, bytes;
    uint32_t crc; /* of the bytes written so far: the file's CRC once finished */
    bool finished;
} wshard;

struct ferry_record_writer {
    char *dir, *name;
    uint64_t set_id; /* the identity every shard carries and the manifest names */
    /* the id's first FERRY__SET_TAG_HEX hex digits, in the shards' names */
    char tag[FERRY__SET_TAG_HEX + 1];
    size_t schema_len;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    uint64_t shard_bytes, shard_records, total;
    int level;
    bool broken; /* a write failed part way: only abort is left */
    ZSTD_CCtx *cctx;
    uint8_t *prefix; /* header, identity, schema and padding: the start of every shard */
    size_t prefix_len;
    uint8_t *rec; /* record header + stored payload + padding */
    size_t rec_cap;
    uint8_t *raw; /* the payload before compression (compressed shards only) */
    size_t raw_cap;
    uint64_t *off; /* offsets of the current shard's records */
    size_t off_cap;
    wshard *shards;
    size_t nshards, shards_cap;
};

/* A path "dir/..." built with printf, allocated with ferry__malloc. */
__attribute__((format(printf, 2, 3))) static char *path_fmt(const char *dir, const char *fmt, ...)
{
    char tail[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tail)
        return NULL;
    size_t n = strlen(dir) + 1 + (size_t)k + 1;
    char *p = ferry__malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, tail);
    return p;
}

/* mkdir -p. */
static int make_dirs(const char *dir)
{
    char *p = ferry__strdup(dir);
    if (!p)
        return ferry__err(FERRY_ENOMEM, "writer: out of memory");
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = ferry__err(FERRY_EIO, "%s: cannot create directory: %s", p, strerror(errno));
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    ferry__free(p);
    struct stat st;
    if (rc == 0 && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = ferry__err(FERRY_EIO, "%s: not a directory", dir);
    return rc;
}

static int grow(void *bufp, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        if (!ferry__mul_size(n, 2, &n))
            return ferry__err(FERRY_ENOMEM, "writer: %zu elements is too large", need);
    size_t bytes;
    if (!ferry__mul_size(n, elem, &bytes))
        return ferry__err(FERRY_ENOMEM, "writer: %zu elements is too large", need);
    void *p = ferry__realloc(*(void **)bufp, bytes);
    if (!p)
        return ferry__err(FERRY_ENOMEM, "writer: out of memory (%zu bytes)", bytes);
    *(void **)bufp = p;
    *cap = n;
    return 0;
}

static wshard *current(ferry_record_writer *w)
{
    if (w->nshards == 0 || w->shards[w->nshards - 1].finished)
        return NULL;
    return &w->shards[w->nshards - 1];
}

/* Creates the next shard's temporary (DIR/NAME-%05d.ferry.tmp.XXXXXX) and writes its
 * header and schema. */
static int shard_start(ferry_record_writer *w)
{
    int rc = grow(&w->shards, &w->shards_cap, w->nshards + 1, sizeof *w->shards);
    if (rc < 0)
        return rc;
    wshard *s = &w->shards[w->nshards];
    memset(s, 0, sizeof *s);
    s->af.fd = -1;
    char *target = path_fmt(w->dir, "%s-%s-%05zu.ferry", w->name, w->tag, w->nshards);
    if (!target)
        return ferry__err(FERRY_ENOMEM, "writer: out of memory");
    rc = ferry__atomic_open(&s->af, target);
    ferry__free(target);
    if (rc < 0)
        return rc;
    /* this shard's place in the set, under the header's CRC */
    ferry__store_le32(w->prefix + FERRY__REC_HEADER + 8, (uint32_t)w->nshards);
    uint32_t crc = ferry_crc32c(0, w->prefix, 20);
    ferry__store_le32(w->prefix + 20, ferry_crc32c(crc, w->prefix + FERRY__REC_HEADER,
                                                   FERRY__REC_IDENTITY + w->schema_len));
    rc = ferry__atomic_write(&s->af, w->prefix, w->prefix_len);
    if (rc < 0) {
        ferry__atomic_abort(&s->af);
        return rc;
    }
    s->bytes = w->prefix_len;
    s->crc = ferry_crc32c(0, w->prefix, w->prefix_len);
    w->nshards++;
    return 0;
}

/* Writes the index and trailer and closes the temporary (commit reopens it to sync
 * and rename it): a set of many shards holds no descriptors. */
static int shard_finish(ferry_record_writer *w, wshard *s)
{
    size_t ixbytes = (size_t)s->records * 8;
    uint8_t t[FERRY__REC_TRAILER];
    ferry__store_le64(t, s->records);
    ferry__store_le64(t + 8, s->bytes);
    ferry__store_le32(t + 16, ferry_crc32c(0, w->off, ixbytes));
    ferry__store_le32(t + 20, ferry_crc32c(0, t, 20));
    memcpy(t + 24, FERRY__REC_END_MAGIC, 8);
    int rc = ferry__atomic_write(&s->af, w->off, ixbytes);
    if (rc == 0)
        rc = ferry__atomic_write(&s->af, t, sizeof t);
    if (rc < 0) {
        w->broken = true;
        return rc;
    }
    s->crc = ferry_crc32c(s->crc, w->off, ixbytes);
    s->crc = ferry_crc32c(s->crc, t, sizeof t);
    s->bytes += ixbytes + FERRY__REC_TRAILER;
    s->finished = true;
    rc = ferry__atomic_close(&s->af);
    if (rc < 0)
        w->broken = true;
    return rc;
}

static void writer_free(ferry_record_writer *w)
{
    for (size_t i = 0; i < w->nshards; i++)
        ferry__atomic_abort(&w->shards[i].af);
    ZSTD_freeCCtx(w->cctx);
    ferry__free(w->shards);
    ferry__free(w->off);
    ferry__free(w->raw);
    ferry__free(w->rec);
    ferry__free(w->prefix);
    ferry__free(w->dir);
    ferry__free(w->name);
    ferry__free(w);
}

void ferry_writer_abort(ferry_record_writer *w)
{
    if (w)
        writer_free(w);
}

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] <= ' ' || s[i] == 0x7f)
            return false;
    return true;
}

/* A fresh set id: from the kernel's random source, else the clock and the pid. */
static uint64_t new_set_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
             ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&id;
        id ^= id >> 31;
        id *= 0x9e3779b97f4a7c15u;
    }
    return id ? id : 1;
}

enum { CLEAN_TEMPS, CLEAN_GENERATIONS, CLEAN_ALL };

/* Removes what earlier writes of the set left in the directory: temporaries
 * (CLEAN_TEMPS), and also shards of a generation that no manifest names
 * (CLEAN_GENERATIONS: there is no manifest), or every shard file of the set that
 * `keep` does not name (CLEAN_ALL: keep is the manifest in place). A file that
 * cannot be removed stays for the next write to remove; readers never take it.
 * Sets *tag_used when a file of the set already carries w->tag. */
static void clean(ferry_record_writer *w, int what, const ferry__manifest_entry *keep, size_t nkeep,
                  bool *tag_used)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return;
    size_t nlen = strlen(w->name);
    struct dirent *e;
    while ((e = readdir(d))) {
        int kind = ferry__set_file_kind(w->name, e->d_name);
        if (kind == FERRY__SET_FILE_NONE)
            continue;
        if (tag_used && !strncmp(e->d_name + nlen + 1, w->tag, FERRY__SET_TAG_HEX) &&
            e->d_name[nlen] == '-')
            *tag_used = true;
        bool drop = kind == FERRY__SET_FILE_TEMP ||
                    (kind == FERRY__SET_FILE_SHARD && what >= CLEAN_GENERATIONS) ||
                    (kind == FERRY__SET_FILE_OLD_SHARD && what == CLEAN_ALL);
        for (size_t i = 0; drop && kind != FERRY__SET_FILE_TEMP && i < nkeep; i++)
            drop = strcmp(keep[i].file, e->d_name) != 0;
        if (!drop)
            continue;
        char *p = path_fmt(w->dir, "%s", e->d_name);
        if (p)
            ferry__unlink(p);
        ferry__free(p);
    }
    closedir(d);
}

/* Before the first shard: the set's id, and the leftovers of killed writers gone.
 * What the manifest in place names is kept, so the set stays readable throughout. */
static int writer_prepare(ferry_record_writer *w)
{
    char *mpath = path_fmt(w->dir, "%s.manifest", w->name);
    if (!mpath)
        return ferry__err(FERRY_ENOMEM, "writer: out of memory");
    ferry__manifest_entry *m = NULL;
    size_t n = 0;
    uint64_t old_id = 0;
    int what = CLEAN_ALL;
    int rc = ferry__manifest_read(mpath, &m, &n, &old_id);
    ferry__free(mpath);
    if (rc == FERRY_ENOENT)
        what = CLEAN_GENERATIONS;
    else if (rc < 0)
        what = CLEAN_TEMPS; /* an unreadable manifest: touch no shard */
    ferry__err_clear();
    for (int tries = 0;; tries++) {
        bool used = false;
        do
            w->set_id = new_set_id();
        while (w->set_id == old_id);
        snprintf(w->tag, sizeof w->tag, "%0*llx", FERRY__SET_TAG_HEX,
                 (unsigned long long)(w->set_id >> (64 - 4 * FERRY__SET_TAG_HEX)));
        clean(w, what, m, n, &used);
        if (!used)
            break;
        if (tries == 16) {
            ferry__free(m);
            return ferry__err(FERRY_EIO, "%s: cannot find a name for a new set %s", w->dir,
                              w->name);
        }
    }
    ferry__free(m);
    return 0;
}

int ferry_writer_open(ferry_record_writer **out, const ferry_writer_opts *o)
{
    int rc = 0;
    ferry_record_writer *w = NULL;
    if (!out)
        return ferry__err(FERRY_EINVAL, "writer: out is NULL");
    *out = NULL;
    if (!o)
        return ferry__err(FERRY_EINVAL, "writer: options are NULL");
    if (!o->dir || !o->dir[0])
        return ferry__err(FERRY_EINVAL, "writer: dir is NULL or empty");
    const char *name = o->name ? o->name : "data";
    if (!valid_name(name))
        return ferry__err(FERRY_EINVAL,
                          "writer: name \"%s\" must be 1..%d bytes without '/', spaces or control "
                          "characters",
                          name, MAX_NAME);
    if (o->zstd_level < 0 || o->zstd_level > MAX_LEVEL)
        return ferry__err(FERRY_EINVAL, "writer: zstd_level %d is outside [0, %d]", o->zstd_level,
                          MAX_LEVEL);
    FERRY_TRY(ferry__check_fields(o->fields, o->nfields));
    w = ferry__calloc(1, sizeof *w);
    if (!w)
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
    w->dir = ferry__strdup(o->dir);
    w->name = ferry__strdup(name);
    if (!w->dir || !w->name)
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
    w->nfields = o->nfields;
    memcpy(w->fields, o->fields, (size_t)o->nfields * sizeof *o->fields);
    w->shard_bytes = o->shard_bytes ? o->shard_bytes : DEFAULT_SHARD_BYTES;
    w->shard_records = o->shard_records ? o->shard_records : UINT64_MAX;
    w->level = o->zstd_level;
    size_t s = schema_size(w->fields, w->nfields); /* at most 32 * 123 + 2 bytes */
    w->schema_len = s;
    w->prefix_len = (size_t)ferry__align8(FERRY__REC_HEADER + FERRY__REC_IDENTITY + s);
    w->prefix = ferry__calloc(1, w->prefix_len);
    if (!w->prefix)
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
    if (w->level && !(w->cctx = ferry__record_cctx_new()))
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory (zstd context)");
    FERRY_TRY(make_dirs(w->dir));
    FERRY_TRY(writer_prepare(w));
    memcpy(w->prefix, FERRY__REC_MAGIC, 8);
    ferry__store_le32(w->prefix + 8, FERRY__REC_VERSION);
    ferry__store_le32(w->prefix + 12, (w->level ? FERRY__REC_FLAG_ZSTD : 0) | FERRY__REC_FLAG_SET);
    ferry__store_le32(w->prefix + 16, (uint32_t)s);
    ferry__store_le64(w->prefix + FERRY__REC_HEADER, w->set_id);
    schema_encode(w->fields, w->nfields, w->prefix + FERRY__REC_HEADER + FERRY__REC_IDENTITY);
    FERRY_TRY(shard_start(w));
    *out = w;
    return 0;
cleanup:
    if (w)
        writer_free(w);
    return rc;
}

/* Lays the sample out as a payload in dst (raw bytes, already sized). */
static void encode_payload(const ferry_record_writer *w, const ferry_sample *s, uint8_t *dst)
{
    for (int i = 0; i < w->nfields; i++) {
        const ferry_field *f = &w->fields[i];
        size_t n = ferry_field_nbytes(f);
        if (f->variable) {
            uint32_t rows = (uint32_t)s->length[i];
            ferry__store_le32(dst, rows);
            dst += 4;
            n = (size_t)rows * ferry_field_row_elems(f) * ferry_dtype_size(f->dtype);
        }
        if (n)
            memcpy(dst, s->data[i], n);
        dst += n;
    }
}

int ferry_writer_append(ferry_record_writer *w, const ferry_sample *s)
{
    int rc = 0;
    if (!w || !s)
        return ferry__err(FERRY_EINVAL, "writer: NULL writer or sample");
    if (w->broken)
        return ferry__err(FERRY_ESTATE, "writer: an earlier write failed; abort the writer");
    if (s->nfields != w->nfields)
        return ferry__err(FERRY_EINVAL, "writer: sample has %d fields, the schema %d", s->nfields,
                          w->nfields);
    /* the payload's size, with every length checked against its field */
    size_t raw = 0;
    for (int i = 0; i < w->nfields; i++) {
        const ferry_field *f = &w->fields[i];
        size_t n = ferry_field_nbytes(f);
        if (f->variable) {
            if (!s->length)
                return ferry__err(FERRY_EINVAL, "writer: field \"%s\" is variable; length is NULL",
                                  f->name);
            int64_t rows = s->length[i];
            if (rows < 0 || rows > f->shape[0] || rows > (int64_t)UINT32_MAX)
                return ferry__err(FERRY_EOVERFLOW,
                                  "writer: field \"%s\": %lld rows is outside [0, %lld]", f->name,
                                  (long long)rows, (long long)f->shape[0]);
            n = (size_t)rows * ferry_field_row_elems(f) * ferry_dtype_size(f->dtype) + 4;
        }
        if (n && !s->data[i])
            return ferry__err(FERRY_EINVAL, "writer: field \"%s\": data is NULL", f->name);
        if (!ferry__add_size(raw, n, &raw) || raw > FERRY__RECORD_MAX_SIZE)
            return ferry__err(FERRY_EOVERFLOW, "writer: record %llu is over the %u-byte limit",
                              (unsigned long long)w->total, FERRY__RECORD_MAX_SIZE);
    }
    size_t stored = raw;
    if (w->level) {
        size_t bound = ZSTD_compressBound(raw);
        FERRY_TRY(grow(&w->raw, &w->raw_cap, raw, 1));
        FERRY_TRY(grow(&w->rec, &w->rec_cap, FERRY__REC_RECORD_HEADER + bound + 8, 1));
        encode_payload(w, s, w->raw);
        stored = ZSTD_compressCCtx(w->cctx, w->rec + FERRY__REC_RECORD_HEADER, bound, w->raw, raw,
                                   w->level);
        if (ZSTD_isError(stored))
            FERRY_FAIL(ferry__record_zstd_rc(stored) == FERRY_ENOMEM ? FERRY_ENOMEM : FERRY_EIO,
                       "writer: record %llu: zstd: %s", (unsigned long long)w->total,
                       ZSTD_getErrorName(stored));
        if (stored > FERRY__RECORD_MAX_SIZE)
            FERRY_FAIL(FERRY_EOVERFLOW,
                       "writer: record %llu compresses to %zu bytes, over the limit",
                       (unsigned long long)w->total, stored);
    } else {
        FERRY_TRY(grow(&w->rec, &w->rec_cap, FERRY__REC_RECORD_HEADER + raw + 8, 1));
        encode_payload(w, s, w->rec + FERRY__REC_RECORD_HEADER);
    }
    uint8_t *h = w->rec;
    ferry__store_le32(h, (uint32_t)stored);
    ferry__store_le32(h + 4, (uint32_t)raw);
    ferry__store_le32(h + 8, ferry_crc32c(0, h + FERRY__REC_RECORD_HEADER, stored));
    ferry__store_le32(h + 12, ferry_crc32c(0, h, 12));
    size_t total = (size_t)ferry__align8(FERRY__REC_RECORD_HEADER + stored);
    memset(h + FERRY__REC_RECORD_HEADER + stored, 0, total - FERRY__REC_RECORD_HEADER - stored);

    wshard *sh = current(w);
    if (sh && sh->records > 0 &&
        (sh->records >= w->shard_records ||
         sh->bytes + total + 8 * (sh->records + 1) + FERRY__REC_TRAILER > w->shard_bytes)) {
        FERRY_TRY(shard_finish(w, sh));
        sh = NULL;
    }
    if (!sh) {
        FERRY_TRY(shard_start(w));
        sh = current(w);
    }
    FERRY_TRY(grow(&w->off, &w->off_cap, (size_t)sh->records + 1, sizeof *w->off));
    rc = ferry__atomic_write(&sh->af, h, total);
    if (rc < 0) {
        w->broken = true;
        goto cleanup;
    }
    w->off[sh->records++] = sh->bytes;
    sh->bytes += total;
    sh->crc = ferry_crc32c(sh->crc, h, total);
    w->total++;
cleanup:
    return rc;
}

uint64_t ferry_writer_records(const ferry_record_writer *w)
{
    return w ? w->total : 0;
}

int ferry_writer_commit(ferry_record_writer *w)
{
    int rc = 0;
    char **finals = NULL;
    char *text = NULL, *mpath = NULL;
    size_t renamed = 0;
    bool switched = false;
    ferry__atomic_file m = {.fd = -1};
    ferry__manifest_entry *keep = NULL;
    if (!w)
        return ferry__err(FERRY_EINVAL, "writer: NULL writer");
    if (w->broken)
        FERRY_FAIL(FERRY_ESTATE, "%s: an earlier write failed; nothing was committed", w->dir);
    wshard *sh = current(w);
    if (sh)
        FERRY_TRY(shard_finish(w, sh));
    size_t n = w->nshards;
    finals = ferry__calloc(n, sizeof *finals);
    keep = ferry__calloc(n, sizeof *keep);
    mpath = path_fmt(w->dir, "%s.manifest", w->name);
    if (!finals || !keep || !mpath)
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
    for (size_t k = 0; k < n; k++) {
        if (!(finals[k] = path_fmt(w->dir, "%s-%s-%05zu-of-%05zu.ferry", w->name, w->tag, k, n)))
            FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
        snprintf(keep[k].file, sizeof keep[k].file, "%s", strrchr(finals[k], '/') + 1);
    }
    /* the manifest's text first: nothing is renamed before it is known to fit */
    size_t cap = 96 + n * (strlen(w->name) + 160); /* a line is at most name + 130 */
    text = ferry__malloc(cap);
    if (!text)
        FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
    size_t len =
        (size_t)snprintf(text, cap, "ferry-records 2\nshards %zu records %llu set %016llx\n", n,
                         (unsigned long long)w->total, (unsigned long long)w->set_id);
    for (size_t k = 0; k < n; k++)
        len += (size_t)snprintf(text + len, cap - len, "%s %llu %llu %08x\n", keep[k].file,
                                (unsigned long long)w->shards[k].records,
                                (unsigned long long)w->shards[k].bytes, w->shards[k].crc);
    /* The new generation's shards take names no other set uses, so the set in
     * place stays whole until the manifest's rename switches to the new one. */
    for (size_t k = 0; k < n; k++) {
        wshard *s = &w->shards[k];
        char *target = ferry__strdup(finals[k]);
        if (!target)
            FERRY_FAIL(FERRY_ENOMEM, "writer: out of memory");
        ferry__free(s->af.path);
        s->af.path = target;
        /* reopened so that ferry__atomic_rename can sync it */
        s->af.fd = open(s->af.tmp, O_RDONLY | O_CLOEXEC);
        if (s->af.fd < 0)
            FERRY_FAIL(FERRY_EIO, "%s: reopen: %s", s->af.tmp, strerror(errno));
        FERRY_TRY(ferry__atomic_rename(&s->af));
        renamed = k + 1;
    }
    /* the shards' names are durable before a manifest names them */
    FERRY_TRY(ferry__sync_dir(mpath));
    FERRY_TRY(ferry__atomic_open(&m, mpath));
    FERRY_TRY(ferry__atomic_write(&m, text, len));
    FERRY_TRY(ferry__atomic_rename(&m));
    switched = true;
    /* The switch is made; until it is durable the old set must stay, for a crash
     * could bring its manifest back. */
    if ((rc = ferry__sync_dir(mpath)) < 0) {
        char msg[FERRY_ERRMSG_MAX];
        ferry__err_copy(msg);
        FERRY_FAIL(rc,
                   "%s: the new set is in place, but may not survive a crash (%s); the old "
                   "set's files are left for the next write to remove",
                   w->dir, msg);
    }
    /* the old generation, and anything else of the set the manifest does not name */
    clean(w, CLEAN_ALL, keep, n, NULL);
    ferry__sync_dir(mpath); /* a removal lost in a crash is redone by the next write */
    ferry__err_clear();
cleanup:
    if (rc < 0 && !switched) {
        char msg[FERRY_ERRMSG_MAX];
        ferry__err_copy(msg);
        /* the new generation's shards in place: no manifest names them (one that
         * cannot be removed is removed by the next write) */
        for (size_t k = 0; k < renamed; k++)
            ferry__unlink(finals[k]);
        ferry__atomic_abort(&m);
        ferry__err(rc, "%s", msg);
    }
    if (finals)
        for (size_t k = 0; k < w->nshards; k++)
            ferry__free(finals[k]);
    ferry__free(finals);
    ferry__free(keep);
    ferry__free(mpath);
    ferry__free(text);
    writer_free(w);
    return rc;
}
