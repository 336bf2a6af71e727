/*
 * Record shards (docs/record-format.md): the mapped reader with its recovery
 * scan, the schema it decodes, the files of a set and the manifest. The writer is
 * records_write.c.
 *
 *   header (24) | schema (S) | pad to 8 | records | u64 offsets[N] | trailer (32)
 *
 * Everything read from a file is distrusted: each size is checked against the
 * mapping before it is used, and the records' CRCs are checked on every access.
 */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_create?Ctx_advanced: allocate through ferry */
#include "ferry/records.h"
#include "../io/io.h"
#include "records_internal.h"
#include "../core/guard.h"
#include "../core/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#define DCTX_SLOTS 1024u
#define CRC_CHUNK ((size_t)1 << 20)

/* zstd allocates through ferry, so its allocations fail under the tests' injection
 * like every other. */
static void *zalloc(void *opaque, size_t n)
{
    (void)opaque;
    return ferry__malloc(n);
}
static void zfree(void *opaque, void *p)
{
    (void)opaque;
    ferry__free(p);
}
static const ZSTD_customMem zmem = {zalloc, zfree, NULL};

struct ZSTD_CCtx_s *ferry__record_cctx_new(void)
{
    return ZSTD_createCCtx_advanced(zmem);
}

int ferry__record_zstd_rc(size_t r)
{
    return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? FERRY_ENOMEM : FERRY_ECORRUPT;
}

/* ---- Schema ---- */

static int schema_decode(const char *name, const uint8_t *p, size_t size, ferry_field *fs,
                         int *nfields)
{
    size_t pos = 0;
#define NEED(k, what)                                                                              \
    do {                                                                                           \
        if (size - pos < (k))                                                                      \
            return ferry__err(FERRY_ECORRUPT, "%s: schema: %s runs past its %zu bytes", name,      \
                              (what), size);                                                       \
    } while (0)
    NEED(2, "the field count");
    unsigned n = ferry__load_le16(p);
    pos = 2;
    if (n < 1 || n > FERRY_MAX_FIELDS)
        return ferry__err(FERRY_ECORRUPT, "%s: schema: %u fields is outside [1, %d]", name, n,
                          FERRY_MAX_FIELDS);
    for (unsigned i = 0; i < n; i++) {
        ferry_field *f = &fs[i];
        memset(f, 0, sizeof *f);
        NEED(1, "a field name");
        unsigned len = p[pos++];
        if (len < 1 || len >= FERRY_MAX_NAME)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: schema: field %u: name of %u bytes is outside "
                              "[1, %d]",
                              name, i, len, FERRY_MAX_NAME - 1);
        NEED(len, "a field name");
        if (memchr(p + pos, 0, len))
            return ferry__err(FERRY_ECORRUPT, "%s: schema: field %u: name holds a NUL byte", name,
                              i);
        memcpy(f->name, p + pos, len);
        pos += len;
        NEED(3, "a field's dtype, ndim and variable flag");
        unsigned dtype = p[pos], ndim = p[pos + 1], variable = p[pos + 2];
        pos += 3;
        if (ndim > FERRY_MAX_DIMS - 1)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: schema: field \"%s\": ndim %u is outside [0, %d]", name, f->name,
                              ndim, FERRY_MAX_DIMS - 1);
        if (variable > 1)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: schema: field \"%s\": variable flag %u is neither 0 nor 1", name,
                              f->name, variable);
        NEED(8 * (size_t)ndim, "a field's dims");
        f->dtype = (ferry_dtype)dtype;
        f->ndim = (int)ndim;
        f->variable = (int)variable;
        for (unsigned d = 0; d < ndim; d++, pos += 8) {
            uint64_t v = ferry__load_le64(p + pos);
            if (v > (uint64_t)INT64_MAX)
                return ferry__err(FERRY_ECORRUPT, "%s: schema: field \"%s\": dim %u is %llu", name,
                                  f->name, d, (unsigned long long)v);
            f->shape[d] = (int64_t)v;
        }
    }
#undef NEED
    if (pos != size)
        return ferry__err(FERRY_ECORRUPT, "%s: schema: %zu bytes left over after %u fields", name,
                          size - pos, n);
    int rc = ferry__check_fields(fs, (int)n);
    if (rc < 0) {
        char msg[FERRY_ERRMSG_MAX];
        ferry__err_copy(msg);
        return ferry__err(FERRY_ECORRUPT, "%s: %s", name, msg);
    }
    *nfields = (int)n;
    return 0;
}

/* The largest payload the schema allows: every field at its bound, plus the row
 * counts. Fields are at most 2^34 bytes each (ferry__check_fields), so no overflow
 * on 64-bit hosts; checked anyway. */
static bool max_payload(const ferry_field *fs, int n, size_t *out)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (!ferry__add_size(total, ferry_field_nbytes(&fs[i]) + (fs[i].variable ? 4 : 0), &total))
            return false;
    *out = total;
    return true;
}

/* ---- The files of a set ---- */

static size_t count_digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

static size_t count_hex(const char *s)
{
    size_t n = 0;
    while ((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))
        n++;
    return n;
}

int ferry__set_file_kind(const char *set, const char *file)
{
    size_t n = strlen(set);
    if (strncmp(file, set, n) != 0)
        return FERRY__SET_FILE_NONE;
    const char *p = file + n;
    if (!strncmp(p, ".manifest.tmp.", 14))
        return strlen(p + 14) == 6 ? FERRY__SET_FILE_TEMP : FERRY__SET_FILE_NONE;
    if (*p++ != '-')
        return FERRY__SET_FILE_NONE;
    bool gen = count_hex(p) == FERRY__SET_TAG_HEX && p[FERRY__SET_TAG_HEX] == '-';
    if (gen)
        p += FERRY__SET_TAG_HEX + 1;
    size_t k = count_digits(p);
    if (k < 5)
        return FERRY__SET_FILE_NONE;
    p += k;
    if (!strncmp(p, ".ferry.tmp.", 11))
        return strlen(p + 11) == 6 ? FERRY__SET_FILE_TEMP : FERRY__SET_FILE_NONE;
    if (strncmp(p, "-of-", 4) != 0)
        return FERRY__SET_FILE_NONE;
    p += 4;
    k = count_digits(p);
    if (k < 5 || strcmp(p + k, ".ferry") != 0)
        return FERRY__SET_FILE_NONE;
    return gen ? FERRY__SET_FILE_SHARD : FERRY__SET_FILE_OLD_SHARD;
}

/* ---- Reading ---- */

struct ferry_record_file {
    ferry__map map;
    const uint8_t *base;
    uint64_t size;
    char *name;
    uint32_t hflags;
    int nfields;
    ferry_field fields[FERRY_MAX_FIELDS];
    size_t max_payload;
    uint64_t start; /* record 0 */
    uint64_t end;   /* the index (or where the scan stopped): the records' end */
    uint64_t count;
    const uint8_t *index; /* the mapped offsets, or NULL after a scan */
    bool has_set;         /* the header carries a set identity */
    uint64_t set_id;
    uint32_t set_index;
    uint64_t *scanned; /* the offsets a recovery scan found */
    int recovered;
    /* decompression contexts by worker id (modulo DCTX_SLOTS). A reader takes a
     * context out of its slot (exchange with NULL) and puts it back (compare and
     * swap from NULL), so two threads with the same worker id never share one: the
     * second makes its own, and the spare is freed when the slot is taken. */
    _Atomic(ZSTD_DCtx *) *dctx;
};

static inline uint64_t rec_offset(const ferry_record_file *f, uint64_t i)
{
    return f->index ? ferry__load_le64(f->index + 8 * i) : f->scanned[i];
}

static int read_header(ferry_record_file *f)
{
    const char *name = f->name;
    const uint8_t *b = f->base;
    if (f->size < FERRY__REC_HEADER)
        return ferry__err(FERRY_ECORRUPT, "%s: %llu bytes is too short for a record shard", name,
                          (unsigned long long)f->size);
    if (memcmp(b, FERRY__REC_MAGIC, 8) != 0)
        return ferry__err(FERRY_ECORRUPT, "%s: not a ferry record shard (bad magic)", name);
    uint32_t version = ferry__load_le32(b + 8), flags = ferry__load_le32(b + 12),
             s = ferry__load_le32(b + 16);
    if (version != FERRY__REC_VERSION)
        return ferry__err(FERRY_ECORRUPT, "%s: record format version %u; this ferry reads %u", name,
                          version, FERRY__REC_VERSION);
    if (flags & ~(FERRY__REC_FLAG_ZSTD | FERRY__REC_FLAG_SET))
        return ferry__err(FERRY_ECORRUPT, "%s: unknown flags 0x%x in the header", name, flags);
    uint32_t id = flags & FERRY__REC_FLAG_SET ? FERRY__REC_IDENTITY : 0;
    if (s > FERRY__RECORD_MAX_SCHEMA)
        return ferry__err(FERRY_ECORRUPT, "%s: schema of %u bytes is over the %u-byte limit", name,
                          s, FERRY__RECORD_MAX_SCHEMA);
    if ((uint64_t)s + id > f->size - FERRY__REC_HEADER)
        return ferry__err(FERRY_ECORRUPT, "%s: schema of %u bytes runs past the end of the file",
                          name, s);
    uint32_t crc = ferry_crc32c(ferry_crc32c(0, b, 20), b + FERRY__REC_HEADER, id + s);
    if (crc != ferry__load_le32(b + 20))
        return ferry__err(FERRY_ECORRUPT, "%s: header crc mismatch (damaged header or schema)",
                          name);
    if (id) {
        f->has_set = true;
        f->set_id = ferry__load_le64(b + FERRY__REC_HEADER);
        f->set_index = ferry__load_le32(b + FERRY__REC_HEADER + 8);
    }
    int rc = schema_decode(name, b + FERRY__REC_HEADER + id, s, f->fields, &f->nfields);
    if (rc < 0)
        return rc;
    if (!max_payload(f->fields, f->nfields, &f->max_payload))
        return ferry__err(FERRY_ECORRUPT, "%s: schema: records would be too large", name);
    f->hflags = flags;
    f->start = ferry__align8(FERRY__REC_HEADER + (uint64_t)id + s);
    return 0;
}

/* The trailer and index: false with the reason in why when they are missing or
 * damaged. Every offset is checked once here, so that access is one lookup. */
static bool read_footer(ferry_record_file *f, char *why, size_t cap)
{
    const uint8_t *b = f->base;
    uint64_t size = f->size;
    if (size < f->start || size - f->start < FERRY__REC_TRAILER) {
        snprintf(why, cap, "%llu bytes leave no room for a footer", (unsigned long long)size);
        return false;
    }
    const uint8_t *t = b + size - FERRY__REC_TRAILER;
    if (memcmp(t + 24, FERRY__REC_END_MAGIC, 8) != 0) {
        snprintf(why, cap, "no end magic");
        return false;
    }
    if (ferry_crc32c(0, t, 20) != ferry__load_le32(t + 20)) {
        snprintf(why, cap, "trailer crc mismatch");
        return false;
    }
    uint64_t n = ferry__load_le64(t), ix = ferry__load_le64(t + 8),
             ixend = size - FERRY__REC_TRAILER;
    if (ix < f->start || ix > ixend || ix % 8 != 0 || (ixend - ix) / 8 != n ||
        (ixend - ix) % 8 != 0) {
        snprintf(why, cap, "an index of %llu records at offset %llu does not fit the file",
                 (unsigned long long)n, (unsigned long long)ix);
        return false;
    }
    if (ferry_crc32c(0, b + ix, (size_t)(8 * n)) != ferry__load_le32(t + 16)) {
        snprintf(why, cap, "index crc mismatch");
        return false;
    }
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = ferry__load_le64(b + ix + 8 * i);
        bool ok = i == 0 ? off == f->start : off >= prev + FERRY__REC_RECORD_HEADER;
        if (!ok || off % 8 != 0 || off > ix - FERRY__REC_RECORD_HEADER) {
            snprintf(why, cap,
                     "index entry %llu (offset %llu) is out of order or outside the records",
                     (unsigned long long)i, (unsigned long long)off);
            return false;
        }
        prev = off;
    }
    f->index = b + ix;
    f->count = n;
    f->end = ix;
    return true;
}

/* Walks records from the end of the schema while each is whole: header CRC, sizes
 * within the limit, payload inside the file, payload CRC. */
static int scan(ferry_record_file *f)
{
    const uint8_t *b = f->base;
    uint64_t pos = f->start, n = 0, end = f->start;
    size_t cap = 0;
    uint64_t *offs = NULL;
    bool zstd = f->hflags & FERRY__REC_FLAG_ZSTD;
    while (pos <= f->size && f->size - pos >= FERRY__REC_RECORD_HEADER) {
        const uint8_t *h = b + pos;
        uint32_t stored = ferry__load_le32(h), raw = ferry__load_le32(h + 4);
        if (ferry_crc32c(0, h, 12) != ferry__load_le32(h + 12) || stored > FERRY__RECORD_MAX_SIZE ||
            raw > FERRY__RECORD_MAX_SIZE || (!zstd && raw != stored) ||
            stored > f->size - pos - FERRY__REC_RECORD_HEADER ||
            ferry_crc32c(0, h + FERRY__REC_RECORD_HEADER, stored) != ferry__load_le32(h + 8))
            break;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 1024;
            uint64_t *p = ferry__realloc(offs, ncap * sizeof *offs);
            if (!p) {
                ferry__free(offs);
                return ferry__err(FERRY_ENOMEM, "%s: out of memory for %llu record offsets",
                                  f->name, (unsigned long long)n);
            }
            offs = p;
            f->scanned = offs; /* freed with f, whatever happens next */
            cap = ncap;
        }
        offs[n++] = pos;
        end = pos + FERRY__REC_RECORD_HEADER + stored;
        pos = ferry__align8(end);
    }
    f->scanned = offs;
    f->count = n;
    /* a last record whose padding was cut off is still whole */
    f->end = n ? (ferry__align8(end) < f->size ? ferry__align8(end) : f->size) : f->start;
    f->recovered = 1;
    return 0;
}

static int check_mapped(ferry_record_file *f, int flags, char *why, size_t cap)
{
    int rc = read_header(f);
    if (rc < 0)
        return rc;
    if (!read_footer(f, why, cap)) {
        if (!(flags & FERRY_RECORD_RECOVER))
            return ferry__err(FERRY_ECORRUPT,
                              "%s: no valid footer (the writer did not finish?): open with "
                              "FERRY_RECORD_RECOVER to read the whole records it has (%s)",
                              f->name, why);
        return scan(f);
    }
    return 0;
}

/* The header, footer and index (or a scan), read from the mapping under a guard:
 * the file may be cut short while it is opened. */
static int open_mapped(ferry_record_file *f, int flags, char *why, size_t cap)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, f->name, f->base, "opening");
    int rc = check_mapped(f, flags, why, cap);
    ferry__guard_pop(&g);
    return rc;
}

int ferry_record_file_open(ferry_record_file **out, const char *path, int flags)
{
    int rc = 0;
    ferry_record_file *f = NULL;
    char why[160];
    if (!out)
        return ferry__err(FERRY_EINVAL, "record file: out is NULL");
    *out = NULL;
    if (!path)
        return ferry__err(FERRY_EINVAL, "record file: path is NULL");
    if (flags & ~FERRY_RECORD_RECOVER)
        return ferry__err(FERRY_EINVAL, "%s: unknown open flags 0x%x", path, (unsigned)flags);
    f = ferry__calloc(1, sizeof *f);
    if (!f || !(f->name = ferry__strdup(path)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    FERRY_TRY(ferry__guard_install());
    FERRY_TRY(ferry__map_file(&f->map, path));
    f->base = f->map.data;
    f->size = f->map.size;
    FERRY_TRY(open_mapped(f, flags, why, sizeof why));
    if (f->hflags & FERRY__REC_FLAG_ZSTD) {
        f->dctx = ferry__calloc(DCTX_SLOTS, sizeof *f->dctx);
        if (!f->dctx)
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    }
    *out = f;
    f = NULL;
cleanup:
    ferry_record_file_free(f);
    return rc;
}

void ferry_record_file_free(ferry_record_file *f)
{
    if (!f)
        return;
    if (f->dctx)
        for (unsigned i = 0; i < DCTX_SLOTS; i++)
            ZSTD_freeDCtx(atomic_load_explicit(&f->dctx[i], memory_order_acquire));
    ferry__free((void *)f->dctx);
    ferry__unmap(&f->map);
    ferry__free(f->scanned);
    ferry__free(f->name);
    ferry__free(f);
}

uint64_t ferry_record_file_count(const ferry_record_file *f)
{
    return f->count;
}

uint64_t ferry_record_file_bytes(const ferry_record_file *f)
{
    return f->map.size;
}

int ferry_record_file_nfields(const ferry_record_file *f)
{
    return f->nfields;
}

const ferry_field *ferry_record_file_field(const ferry_record_file *f, int i)
{
    return i >= 0 && i < f->nfields ? &f->fields[i] : NULL;
}

int ferry_record_file_recovered(const ferry_record_file *f)
{
    return f->recovered;
}

int ferry__record_file_compressed(const ferry_record_file *f)
{
    return (f->hflags & FERRY__REC_FLAG_ZSTD) != 0;
}

bool ferry__record_file_set(const ferry_record_file *f, uint64_t *id, uint32_t *index)
{
    *id = f->set_id;
    *index = f->set_index;
    return f->has_set;
}

const char *ferry__record_file_name(const ferry_record_file *f)
{
    return f->name;
}

int ferry__record_file_span(const ferry_record_file *f, uint64_t i, const void **p, size_t *n)
{
    if (i >= f->count)
        return ferry__err(FERRY_ERANGE, "%s: record %llu is past the last (%llu records)", f->name,
                          (unsigned long long)i, (unsigned long long)f->count);
    uint64_t off = rec_offset(f, i), next = i + 1 < f->count ? rec_offset(f, i + 1) : f->end;
    *p = f->base + off;
    *n = (size_t)(next - off);
    return 0;
}

typedef struct rec {
    uint64_t off;
    const uint8_t *payload;
    uint32_t stored, raw, crc;
} rec;

#define REC_FMT "%s: record %llu at offset %llu: "
#define REC_ARGS(f, i, off) (f)->name, (unsigned long long)(i), (unsigned long long)(off)

/* Finds record i and checks it: its header, its place between its neighbours and,
 * unless the caller checks it while copying (check_payload false), its payload's
 * CRC. */
static int locate(const ferry_record_file *f, uint64_t i, rec *r, bool check_payload)
{
    if (i >= f->count)
        return ferry__err(FERRY_ERANGE, "%s: record %llu is past the last (%llu records)", f->name,
                          (unsigned long long)i, (unsigned long long)f->count);
    uint64_t off = rec_offset(f, i), next = i + 1 < f->count ? rec_offset(f, i + 1) : f->end;
    /* the open checked the offsets; checked again, cheaply, because memory safety
     * rests on them */
    if (off < f->start || next > f->end || off > next || next - off < FERRY__REC_RECORD_HEADER)
        return ferry__err(FERRY_ECORRUPT, REC_FMT "outside the records (next at %llu)",
                          REC_ARGS(f, i, off), (unsigned long long)next);
    const uint8_t *h = f->base + off;
    if (ferry_crc32c(0, h, 12) != ferry__load_le32(h + 12))
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "header crc mismatch (a damaged header, or the index points "
                                  "elsewhere than a record)",
                          REC_ARGS(f, i, off));
    uint32_t stored = ferry__load_le32(h), raw = ferry__load_le32(h + 4);
    if (stored > FERRY__RECORD_MAX_SIZE || raw > FERRY__RECORD_MAX_SIZE)
        return ferry__err(FERRY_ECORRUPT, REC_FMT "sizes %u and %u are over the %u-byte limit",
                          REC_ARGS(f, i, off), stored, raw, FERRY__RECORD_MAX_SIZE);
    if (!(f->hflags & FERRY__REC_FLAG_ZSTD) && raw != stored)
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "raw size %u differs from its stored size %u, uncompressed",
                          REC_ARGS(f, i, off), raw, stored);
    uint64_t room = next - off - FERRY__REC_RECORD_HEADER;
    if (stored > room)
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "payload of %u bytes runs past the record's end at offset %llu%s",
                          REC_ARGS(f, i, off), stored, (unsigned long long)next,
                          next == f->size ? " (the end of the file)" : "");
    if (room - stored >= 8)
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "ends %llu bytes before the next at offset %llu (the index "
                                  "disagrees with the records)",
                          REC_ARGS(f, i, off), (unsigned long long)(room - stored),
                          (unsigned long long)next);
    if (check_payload &&
        ferry_crc32c(0, h + FERRY__REC_RECORD_HEADER, stored) != ferry__load_le32(h + 8))
        return ferry__err(FERRY_ECORRUPT, REC_FMT "crc mismatch", REC_ARGS(f, i, off));
    r->off = off;
    r->crc = ferry__load_le32(h + 8);
    r->payload = h + FERRY__REC_RECORD_HEADER;
    r->stored = stored;
    r->raw = raw;
    return 0;
}

int ferry_record_file_raw(const ferry_record_file *f, uint64_t i, const void **data, size_t *size,
                          uint64_t *offset)
{
    if (!f || !data || !size)
        return ferry__err(FERRY_EINVAL, "record file: NULL argument");
    rec r = {0};
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, f->name, f->base, "record %llu", (unsigned long long)i);
    int rc = locate(f, i, &r, true);
    ferry__guard_pop(&g);
    if (rc < 0)
        return rc;
    *data = r.payload;
    *size = r.stored;
    if (offset)
        *offset = r.off;
    return 0;
}

static ZSTD_DCtx *dctx_take(const ferry_record_file *f, uint32_t worker)
{
    ZSTD_DCtx *d =
        atomic_exchange_explicit(&f->dctx[worker % DCTX_SLOTS], NULL, memory_order_acquire);
    return d ? d : ZSTD_createDCtx_advanced(zmem);
}

static void dctx_give(const ferry_record_file *f, uint32_t worker, ZSTD_DCtx *d)
{
    ZSTD_DCtx *empty = NULL;
    if (!atomic_compare_exchange_strong_explicit(&f->dctx[worker % DCTX_SLOTS], &empty, d,
                                                 memory_order_release, memory_order_relaxed))
        ZSTD_freeDCtx(d);
}

/* Copies the fields of a payload into the sample, checking each length against the
 * schema and the payload's end. With check, the payload's CRC is checked in the
 * same pass as the copy (each byte read from memory once), against r->crc; a
 * payload that fails it is reported as a CRC mismatch, whatever its fields say. */
static int parse(const ferry_record_file *f, uint64_t i, const rec *r, const uint8_t *p, size_t n,
                 ferry_sample *out, bool check)
{
    size_t pos = 0;
    uint32_t crc = 0;
    int rc = 0;
    for (int k = 0; k < f->nfields; k++) {
        const ferry_field *fl = &f->fields[k];
        size_t bytes = ferry_field_nbytes(fl);
        if (fl->variable) {
            if (n - pos < 4) {
                rc = ferry__err(FERRY_ECORRUPT, REC_FMT "field \"%s\": row count past the end",
                                REC_ARGS(f, i, r->off), fl->name);
                goto done;
            }
            uint32_t rows = ferry__load_le32(p + pos);
            if (check)
                crc = ferry_crc32c(crc, p + pos, 4);
            pos += 4;
            if ((int64_t)rows > fl->shape[0]) {
                rc = ferry__err(FERRY_ECORRUPT,
                                REC_FMT "field \"%s\": %u rows is more than its bound %lld",
                                REC_ARGS(f, i, r->off), fl->name, rows, (long long)fl->shape[0]);
                goto done;
            }
            /* rows <= bound, so this is at most the field's size */
            bytes = (size_t)rows * ferry_field_row_elems(fl) * ferry_dtype_size(fl->dtype);
            if (!out->length)
                return ferry__err(FERRY_EINVAL, "%s: sample has no lengths for field \"%s\"",
                                  f->name, fl->name);
            out->length[k] = rows;
        }
        if (n - pos < bytes) {
            rc = ferry__err(FERRY_ECORRUPT,
                            REC_FMT "field \"%s\" needs %zu bytes; the payload has %zu left",
                            REC_ARGS(f, i, r->off), fl->name, bytes, n - pos);
            goto done;
        }
        if (bytes) {
            if (!out->data[k])
                return ferry__err(FERRY_EINVAL, "%s: sample has no memory for field \"%s\"",
                                  f->name, fl->name);
            if (check)
                crc = ferry__crc32c_copy(crc, out->data[k], p + pos, bytes);
            else
                memcpy(out->data[k], p + pos, bytes);
        }
        pos += bytes;
    }
    if (pos != n)
        rc = ferry__err(FERRY_ECORRUPT, REC_FMT "%zu bytes left over after the last field",
                        REC_ARGS(f, i, r->off), n - pos);
done:
    if (check && (rc < 0 ? ferry_crc32c(0, p, n) : crc) != r->crc)
        return ferry__err(FERRY_ECORRUPT, REC_FMT "crc mismatch", REC_ARGS(f, i, r->off));
    return rc;
}

#define FUSE_MIN 1024u

/* Whether record i spans FUSE_MIN bytes or more (from the index: its header is
 * checked later). */
static inline bool rec_fits_fuse(const ferry_record_file *f, uint64_t i)
{
    if (i >= f->count)
        return false;
    uint64_t off = rec_offset(f, i), next = i + 1 < f->count ? rec_offset(f, i + 1) : f->end;
    return next > off && next - off >= FUSE_MIN + FERRY__REC_RECORD_HEADER;
}

static int read_record(const ferry_record_file *f, uint64_t i, ferry_sample *out, ferry_ctx *ctx,
                       ferry__reading *rd)
{
    rec r = {0};
    bool zstd = f->hflags & FERRY__REC_FLAG_ZSTD;
    /* an uncompressed payload of FUSE_MIN bytes or more is checked while it is
     * copied; a smaller one, which the cache holds between the two, first */
    bool fuse = !zstd && rec_fits_fuse(f, i);
    int rc = locate(f, i, &r, !fuse);
    if (rc < 0)
        return rc;
    if (!zstd)
        return parse(f, i, &r, r.payload, r.stored, out, fuse);
    if (!ctx)
        return ferry__err(FERRY_EINVAL, "%s: reading a compressed shard needs a ctx", f->name);
    uint64_t t0 = ferry_now_ns();
    if (r.raw > f->max_payload)
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "raw size %u is more than the schema allows (%zu)",
                          REC_ARGS(f, i, r.off), r.raw, f->max_payload);
    unsigned long long fcs = ZSTD_getFrameContentSize(r.payload, r.stored);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != r.raw))
        return ferry__err(FERRY_ECORRUPT,
                          REC_FMT "not a zstd frame of the %u bytes its header says",
                          REC_ARGS(f, i, r.off), r.raw);
    uint8_t *dst = ferry_ctx_scratch(ctx, r.raw ? r.raw : 1);
    if (!dst)
        return ferry__err(FERRY_ENOMEM, REC_FMT "out of memory for %u bytes", REC_ARGS(f, i, r.off),
                          r.raw);
    uint32_t worker = ferry_ctx_worker(ctx);
    ZSTD_DCtx *d = dctx_take(f, worker);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory (zstd context)", f->name);
    rd->res = d; /* a fault in the decompression frees it */
    size_t got = ZSTD_decompressDCtx(d, dst, r.raw, r.payload, r.stored);
    rd->res = NULL;
    dctx_give(f, worker, d);
    if (ZSTD_isError(got))
        return ferry__err(ferry__record_zstd_rc(got), REC_FMT "zstd: %s", REC_ARGS(f, i, r.off),
                          ZSTD_getErrorName(got));
    if (got != r.raw)
        return ferry__err(FERRY_ECORRUPT, REC_FMT "decompresses to %zu bytes, its header says %u",
                          REC_ARGS(f, i, r.off), got, r.raw);
    rc = parse(f, i, &r, dst, got, out, false);
    ferry_ctx_stage_add(ctx, FERRY_STAGE_DECODE, ferry_now_ns() - t0);
    return rc;
}

static int record_fault(const ferry__reading *rd, uintptr_t addr)
{
    const ferry_record_file *f = rd->arg;
    ZSTD_freeDCtx(rd->res);
    return ferry__guard_err(addr, f->name, f->base, "record %llu", (unsigned long long)rd->item);
}

__attribute__((noinline)) static int read_guarded(const ferry_record_file *f, uint64_t i,
                                                  ferry_sample *out, ferry_ctx *ctx)
{
    ferry__reading rd = {record_fault, f, i, NULL};
    int rc;
    FERRY__GUARDED(rc, &rd, read_record(f, i, out, ctx, &rd));
    return rc;
}

bool ferry__record_file_holds(const ferry_record_file *f, uintptr_t addr)
{
    return addr >= (uintptr_t)f->base && addr - (uintptr_t)f->base < f->size;
}

const void *ferry__record_file_base(const ferry_record_file *f)
{
    return f->base;
}

int ferry__record_file_read_by(const ferry_record_file *f, uint64_t i, ferry_sample *out,
                               ferry_ctx *ctx, const void *self)
{
    ferry__guard *g = ferry__guard_direct(self);
    if (!g)
        return read_guarded(f, i, out, ctx);
    ferry__reading rd = {record_fault, f, i, NULL};
    int rc;
    FERRY__DIRECT_READ(rc, g, &rd, read_record(f, i, out, ctx, &rd));
    return rc;
}

int ferry_record_file_read(const ferry_record_file *f, uint64_t i, ferry_sample *out,
                           ferry_ctx *ctx)
{
    if (!f || !out || !out->data)
        return ferry__err(FERRY_EINVAL, "record file: NULL argument");
    if (out->nfields != f->nfields)
        return ferry__err(FERRY_EINVAL, "%s: sample has %d fields, the shard %d", f->name,
                          out->nfields, f->nfields);
    return read_guarded(f, i, out, ctx);
}

/* ---- The manifest and whole-file CRCs ---- */

int ferry__crc32c_file(const char *path, uint32_t *crc, uint64_t *size)
{
    int rc = 0;
    ferry__file f = {-1, 0, 0};
    uint8_t *buf = NULL;
    uint32_t c = 0;
    uint64_t done = 0;
    FERRY_TRY(ferry__file_open(&f, path));
    buf = ferry__malloc(CRC_CHUNK);
    if (!buf)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    for (;;) {
        size_t got;
        FERRY_TRY(ferry__file_pread(&f, path, buf, CRC_CHUNK, done, &got));
        c = ferry_crc32c(c, buf, got);
        done += got;
        if (got < CRC_CHUNK)
            break;
    }
    if (done != f.size)
        FERRY_FAIL(FERRY_EIO, "%s: changed size while being read (%llu bytes, then %llu)", path,
                   (unsigned long long)f.size, (unsigned long long)done);
    *crc = c;
    *size = done;
cleanup:
    ferry__free(buf);
    ferry__file_close(&f);
    return rc;
}

/* A whole token of decimal digits, at most UINT64_MAX. */
static bool parse_dec(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

static bool parse_hex32(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    size_t n = strlen(s);
    if (n < 1 || n > 8)
        return false;
    for (; *s; s++) {
        int d = *s >= '0' && *s <= '9'   ? *s - '0'
                : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                : *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
                                         : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return true;
}

/* Splits a line in place at single spaces into at most max tokens; returns how
 * many there were (max + 1 when there are more). */
static int split(char *line, char **tok, int max)
{
    int n = 0;
    for (char *s = line;;) {
        if (n == max)
            return max + 1;
        tok[n++] = s;
        char *sp = strchr(s, ' ');
        if (!sp)
            return n;
        *sp = '\0';
        s = sp + 1;
    }
}

static int cmp_names(const void *a, const void *b)
{
    const ferry__manifest_entry *x = *(const ferry__manifest_entry *const *)a;
    const ferry__manifest_entry *y = *(const ferry__manifest_entry *const *)b;
    return strcmp(x->file, y->file);
}

int ferry__manifest_read(const char *path, ferry__manifest_entry **entries, size_t *nout,
                         uint64_t *set_id)
{
    int rc = 0;
    ferry__file f = {-1, 0, 0};
    char *buf = NULL;
    ferry__manifest_entry *e = NULL;
    const ferry__manifest_entry **sorted = NULL;
    size_t got, n = 0, lineno = 0;
    uint64_t shards = 0, total = 0, sum = 0, id = 0;
    int version = 0;
    *entries = NULL;
    *nout = 0;
    *set_id = 0;
    FERRY_TRY(ferry__file_open(&f, path));
    if (f.size > FERRY__MANIFEST_MAX)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: %llu bytes is too large for a manifest", path,
                   (unsigned long long)f.size);
    buf = ferry__malloc((size_t)f.size + 1);
    if (!buf)
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
    FERRY_TRY(ferry__file_pread(&f, path, buf, (size_t)f.size, 0, &got));
    if (got != f.size)
        FERRY_FAIL(FERRY_EIO, "%s: shrank while being read", path);
    buf[got] = '\0';
    char *s = buf, *end = buf + got;
    while (s < end) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        char *line = s;
        if (nl) {
            *nl = '\0';
            s = nl + 1;
        } else {
            s = end;
        }
        lineno++;
        if (strlen(line) != (size_t)((nl ? nl : end) - line))
            FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: holds a NUL byte", path, lineno);
        char *tok[7];
        int k = split(line, tok, lineno == 2 ? 6 : 4);
        if (lineno == 1) {
            if (k != 2 || strcmp(tok[0], "ferry-records") != 0)
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line 1: not a ferry manifest (expected \"ferry-records 2\")", path);
            if (strcmp(tok[1], "1") != 0 && strcmp(tok[1], "2") != 0)
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line 1: manifest version \"%.20s\"; this ferry "
                           "reads 1 and 2",
                           path, tok[1]);
            version = tok[1][0] - '0';
        } else if (lineno == 2) {
            uint32_t hi, lo;
            if (k != (version == 1 ? 4 : 6) || strcmp(tok[0], "shards") != 0 ||
                strcmp(tok[2], "records") != 0 || !parse_dec(tok[1], &shards) ||
                !parse_dec(tok[3], &total))
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line 2: expected \"shards N records TOTAL%s\" with decimal numbers",
                           path, version == 1 ? "" : " set ID");
            if (version == 2) {
                if (strcmp(tok[4], "set") != 0 || strlen(tok[5]) != 16 ||
                    !parse_hex32(tok[5] + 8, &lo) ||
                    (tok[5][8] = '\0', !parse_hex32(tok[5], &hi)) ||
                    (id = (uint64_t)hi << 32 | lo) == 0)
                    FERRY_FAIL(FERRY_ECORRUPT,
                               "%s: line 2: the set id must be 16 hex digits, not all zero", path);
            }
            /* each entry line takes at least 8 bytes ("a 0 0 0\n") */
            if (shards > (uint64_t)(end - s) / 8 + 1)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: line 2: %llu shards cannot fit in the file", path,
                           (unsigned long long)shards);
            if (shards && !(e = ferry__calloc((size_t)shards, sizeof *e)))
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
        } else {
            if (n == shards)
                FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: more shards than the %llu of line 2",
                           path, lineno, (unsigned long long)shards);
            ferry__manifest_entry *x = &e[n];
            if (k != 4)
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line %zu: expected \"FILE RECORDS BYTES CRC\" separated by single "
                           "spaces",
                           path, lineno);
            size_t len = strlen(tok[0]);
            if (len == 0 || len >= sizeof x->file || strchr(tok[0], '/') || !strcmp(tok[0], ".") ||
                !strcmp(tok[0], ".."))
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line %zu: \"%.64s\" is not a file name in the manifest's directory",
                           path, lineno, tok[0]);
            memcpy(x->file, tok[0], len + 1);
            if (!parse_dec(tok[1], &x->records) || !parse_dec(tok[2], &x->bytes))
                FERRY_FAIL(FERRY_ECORRUPT,
                           "%s: line %zu: record count and size must be decimal numbers", path,
                           lineno);
            if (!parse_hex32(tok[3], &x->crc))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: crc \"%.16s\" is not 1..8 hex digits",
                           path, lineno, tok[3]);
            if (__builtin_add_overflow(sum, x->records, &sum))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: record counts overflow", path, lineno);
            n++;
        }
    }
    if (lineno < 2)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: ends before the \"shards\" line", path,
                   lineno + 1);
    if (n != shards)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: line 2 says %llu shards; the manifest lists %zu",
                   path, lineno + 1, (unsigned long long)shards, n);
    if (sum != total)
        FERRY_FAIL(FERRY_ECORRUPT,
                   "%s: line 2: says %llu records; the shards' counts add up to %llu", path,
                   (unsigned long long)total, (unsigned long long)sum);
    if (n > 1) {
        sorted = ferry__malloc(n * sizeof *sorted);
        if (!sorted)
            FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", path);
        for (size_t i = 0; i < n; i++)
            sorted[i] = &e[i];
        qsort(sorted, n, sizeof *sorted, cmp_names);
        for (size_t i = 1; i < n; i++)
            if (!strcmp(sorted[i - 1]->file, sorted[i]->file))
                FERRY_FAIL(FERRY_ECORRUPT, "%s: line %zu: %s is listed twice", path,
                           (size_t)(sorted[i] - e) + 3, sorted[i]->file);
    }
    *entries = e;
    *nout = n;
    *set_id = id;
    e = NULL;
cleanup:
    ferry__free(sorted);
    ferry__free(e);
    ferry__free(buf);
    ferry__file_close(&f);
    return rc;
}
