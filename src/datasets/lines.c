/*
 * The lines dataset: sample i is line i of a text file, read at its offset
 * straight into the batch slot. Only the index is mapped (page cache, not the
 * process's own memory), so memory does not grow with the file.
 */
#include "ferry/lines.h"
#include "spec.h"
#include "../io/io.h"
#include "../io/seqread.h"
#include "../core/guard.h"
#include "../formats/formats_internal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MAX_LEN 4096u
#define MAX_MAX_LEN ((uint32_t)1 << 24)
#define HINT_MAX 4096u /* bytes of a line the near hint prefetches */

typedef struct lines {
    ferry_line_index *ix;
    ferry__file f;
    ferry__map map; /* the source, when read through a mapping */
    uint32_t max_len;
    int on_long;
    bool readahead;
    atomic_ullong truncated;
    char path[256];
} lines;

static uint64_t lines_len(void *self)
{
    return ferry_line_index_count(((lines *)self)->ix);
}

static int get_line(lines *d, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    uint64_t off, len;
    int rc = ferry__line_index_entry(d->ix, i, &off, &len);
    if (rc < 0)
        return rc;
    uint8_t *dst = out->data[0];
    size_t n = len < d->max_len ? (size_t)len : d->max_len, got = n;
    if (d->map.data) {
        const uint8_t *src = (const uint8_t *)d->map.data + off; /* in bounds: index checked */
        memcpy(dst, src, n);
        if (len == (uint64_t)n + 1 && src[n] == '\r') {
            out->length[0] = (int64_t)n;
            return 0;
        }
        goto got_line;
    }
    if ((rc = ferry__file_pread(&d->f, d->path, dst, n, off, &got)) < 0)
        return rc;
    if (got < n)
        return ferry_error(FERRY_ECORRUPT,
                           "%s: line %llu at offset %llu: the file ends after %zu of its %zu bytes "
                           "(it shrank since it was indexed)",
                           d->path, (unsigned long long)i, (unsigned long long)off, got, n);
got_line:
    if (len > n) {
        /* One byte over may be the "\r" of a CRLF line that fits exactly. */
        uint8_t last = 0;
        if (len == (uint64_t)n + 1 &&
            ferry__file_pread(&d->f, d->path, &last, 1, off + n, &got) == 0 && got == 1 &&
            last == '\r') {
            out->length[0] = (int64_t)n;
            return 0;
        }
        if (d->on_long == FERRY_LINES_LONG_ERROR)
            return ferry_error(FERRY_EOVERFLOW,
                               "%s: line %llu at offset %llu is %llu bytes, over "
                               "max_len %u",
                               d->path, (unsigned long long)i, (unsigned long long)off,
                               (unsigned long long)len, d->max_len);
        atomic_fetch_add_explicit(&d->truncated, 1, memory_order_relaxed);
        ferry_ctx_count_truncated(ctx, 1);
    } else if (n && dst[n - 1] == '\r') {
        n--;
    }
    out->length[0] = (int64_t)n;
    return 0;
}

/* The index, and with io=mmap the lines, are read from mappings: a file cut short
 * under the reader is an error naming it, not a SIGBUS. */
static int line_fault(const ferry__reading *rd, uintptr_t addr)
{
    const lines *d = rd->arg;
    char what[64] = "reading ahead";
    if (rd->item != UINT64_MAX)
        snprintf(what, sizeof what, "line %llu", (unsigned long long)rd->item);
    if (ferry__line_index_holds(d->ix, addr))
        return ferry__guard_err(addr, ferry__line_index_name(d->ix), NULL, "%s", what);
    return ferry__guard_err(addr, d->path, d->map.data, "%s", what);
}

__attribute__((noinline)) static int get_guarded(lines *d, uint64_t i, ferry_sample *out,
                                                 ferry_ctx *ctx)
{
    ferry__reading rd = {line_fault, d, i, NULL};
    int rc;
    FERRY__GUARDED(rc, &rd, get_line(d, i, out, ctx));
    return rc;
}

static int lines_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    lines *d = self;
    ferry__guard *g = ferry__guard_direct(self);
    if (!g)
        return get_guarded(d, i, out, ctx);
    ferry__reading rd = {line_fault, d, i, NULL};
    int rc;
    FERRY__DIRECT_READ(rc, g, &rd, get_line(d, i, out, ctx));
    return rc;
}

/* soon: pull the grain's index entries, then its lines (up to HINT_MAX bytes of
 * each), into the cache, so that the misses (and TLB walks) of a shuffled read
 * overlap. Later batches: ask the kernel to read their lines ahead. */
static void hint_mapped(lines *d, const uint64_t *indices, size_t count, int soon)
{
    uint64_t nlines = ferry_line_index_count(d->ix);
    if (soon) {
        /* two stages, DEPTH lines apart: a line's index entry is requested, and
         * DEPTH lines later, when it has arrived, the line itself (to max_len) */
        enum { DEPTH = 24 };
        const uint64_t *off = ferry__line_index_offsets(d->ix);
        const uint8_t *base = d->map.data;
        for (size_t k = 0; k < count + DEPTH; k++) {
            if (k < count && indices[k] < nlines)
                __builtin_prefetch(&off[indices[k]]);
            if (k < DEPTH || !base || indices[k - DEPTH] >= nlines)
                continue;
            uint64_t i = indices[k - DEPTH], a = off[i], e = off[i + 1];
            if (e > d->map.size || a >= e)
                continue; /* lines_get reports it */
            if (e - a > d->max_len)
                e = a + d->max_len;
            if (e - a > HINT_MAX)
                e = a + HINT_MAX; /* a long line streams in behind its start */
            for (uint64_t c = a & ~(uint64_t)63; c < e; c += 64)
                __builtin_prefetch(base + c);
        }
        return;
    }
    if (!d->readahead)
        return;
    for (size_t k = 0; k < count; k++) {
        uint64_t off, len;
        if (ferry__line_index_entry(d->ix, indices[k], &off, &len) != 0)
            continue;
        size_t n = len < d->max_len ? (size_t)len : d->max_len;
        if (d->map.data) {
            uintptr_t a = (uintptr_t)d->map.data + off, page = 4096;
            madvise((void *)(a & ~(page - 1)), n + (a & (page - 1)), MADV_WILLNEED);
        } else {
            posix_fadvise(d->f.fd, (off_t)off, (off_t)n, POSIX_FADV_WILLNEED);
        }
    }
}

/* Under a worker's direct region a fault fails the sample in hand, as the read
 * of its line would. */
FERRY__GUARDED_HINT(lines_hint, hint_mapped, line_fault)

static void lines_destroy(void *self)
{
    lines *d = self;
    ferry_line_index_free(d->ix);
    ferry__unmap(&d->map);
    ferry__file_close(&d->f);
    ferry__free(d);
}

static const ferry_dataset_vtable lines_vtable = {
    .len = lines_len, .get = lines_get, .destroy = lines_destroy, .hint = lines_hint};

void ferry_lines_opts_default(ferry_lines_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_len = DEFAULT_MAX_LEN;
}

int ferry_dataset_lines(ferry_dataset **out, const ferry_lines_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->path)
        return ferry__err(FERRY_EINVAL, "lines: path is NULL");
    uint32_t max_len = o->max_len ? o->max_len : DEFAULT_MAX_LEN;
    if (max_len > MAX_MAX_LEN)
        return ferry__err(FERRY_EINVAL, "lines: max_len %u is outside [1, %u]", max_len,
                          MAX_MAX_LEN);
    if (o->on_long != FERRY_LINES_LONG_TRUNCATE && o->on_long != FERRY_LINES_LONG_ERROR)
        return ferry__err(FERRY_EINVAL, "lines: on_long %d is not TRUNCATE (0) or ERROR (1)",
                          o->on_long);
    if (o->io != FERRY_LINES_IO_MMAP && o->io != FERRY_LINES_IO_PREAD)
        return ferry__err(FERRY_EINVAL, "lines: io %d is not MMAP (0) or PREAD (1)", o->io);
    if (o->readahead < FERRY_READAHEAD_AUTO || o->readahead > FERRY_READAHEAD_OFF)
        return ferry__err(FERRY_EINVAL, "lines: readahead %d is not AUTO (0), ON (1) or OFF (2)",
                          o->readahead);
    lines *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "lines: out of memory");
    d->f.fd = -1;
    d->max_len = max_len;
    d->on_long = o->on_long;
    snprintf(d->path, sizeof d->path, "%s", o->path);
    FERRY_TRY(ferry__refuse_compressed(o->path, "the lines: source"));
    FERRY_TRY(ferry__file_open(&d->f, o->path));
    FERRY_TRY(ferry_line_index_open(&d->ix, o->path, o->index_path, o->build_index));
    if (ferry_line_index_source_size(d->ix) != d->f.size)
        FERRY_FAIL(FERRY_ESTALE, "%s changed while it was being opened", o->path);
    if (o->readahead == FERRY_READAHEAD_AUTO) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        d->readahead = pages > 0 && page > 0 && d->f.size > (uint64_t)pages * (uint64_t)page / 2;
    } else {
        d->readahead = o->readahead == FERRY_READAHEAD_ON;
    }
    /* shuffled reads: the kernel's sequential read-ahead would only waste I/O */
    posix_fadvise(d->f.fd, 0, 0, POSIX_FADV_RANDOM);
    if (o->io == FERRY_LINES_IO_MMAP && d->f.size) {
        FERRY_TRY(ferry__map_file(&d->map, o->path));
        if (d->map.size != d->f.size)
            FERRY_FAIL(FERRY_ESTALE, "%s changed while it was being opened", o->path);
        madvise(d->map.data, d->map.size, MADV_RANDOM);
        /* where the filesystem keeps the file in large folios, fewer page walks
         * per shuffled line (about 10% more lines a second on one thread here) */
        madvise(d->map.data, d->map.size, MADV_HUGEPAGE);
    }
    ferry_field f;
    memset(&f, 0, sizeof f);
    strcpy(f.name, "line");
    f.dtype = FERRY_U8;
    f.ndim = 1;
    f.shape[0] = max_len;
    f.variable = 1;
    bool readahead = d->readahead;
    rc = ferry_dataset_create(out, &lines_vtable, d, &f, 1);
    if (rc == 0 && !readahead)
        (*out)->near_hints_only = true; /* the loader need not draw batches ahead */
    return rc;
cleanup:
    lines_destroy(d);
    return rc;
}

uint64_t ferry_lines_truncated(const ferry_dataset *ds)
{
    if (!ds || ds->vt != &lines_vtable)
        return 0;
    return atomic_load(&((lines *)ds->self)->truncated);
}

int ferry__lines_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    ferry_lines_opts o;
    ferry_lines_opts_default(&o);
    o.path = s->location;
    uint64_t max = o.max_len;
    int rc, err = 0, build = 0;
    const char *ra = ferry__spec_str(s, "readahead"), *io = ferry__spec_str(s, "io");
    o.index_path = ferry__spec_str(s, "index");
    if ((rc = ferry__spec_u64(s, "max", 1, MAX_MAX_LEN, &max)) < 0 ||
        (rc = ferry__spec_bool(s, "build", &build)) < 0 ||
        (rc = ferry__spec_bool(s, "error_long", &err)) < 0 || (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    if (ra && !strcmp(ra, "on"))
        o.readahead = FERRY_READAHEAD_ON;
    else if (ra && !strcmp(ra, "off"))
        o.readahead = FERRY_READAHEAD_OFF;
    else if (ra && strcmp(ra, "auto"))
        return ferry__err(FERRY_EINVAL, "source lines: readahead=\"%.32s\" is not auto, on or off",
                          ra);
    if (io && !strcmp(io, "pread"))
        o.io = FERRY_LINES_IO_PREAD;
    else if (io && strcmp(io, "mmap"))
        return ferry__err(FERRY_EINVAL, "source lines: io=\"%.32s\" is not mmap or pread", io);
    o.max_len = (uint32_t)max;
    o.build_index = build;
    o.on_long = err ? FERRY_LINES_LONG_ERROR : FERRY_LINES_LONG_TRUNCATE;
    return ferry_dataset_lines(out, &o);
}
