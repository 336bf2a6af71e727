/*
 * The line index: a sidecar file with the offset of every line of a text file.
 * Format (docs/line-index.md), little-endian:
 *   0  magic "FERRYLIX"        32 source mtime (ns, int64)
 *   8  version (u32) = 1       40 hash of the source's first 4 KiB
 *  12  flags (u32)             48 hash of the source's last 4 KiB
 *  16  line count (u64)        56 hash of header bytes 0..55
 *  24  source size (u64)       64 offsets: u64[line count + 1]
 * offsets[i] is where line i starts and offsets[count] is the source size, so line
 * i spans [offsets[i], offsets[i+1]) including its "\n".
 */
#include "ferry/lines.h"
#include "../io/io.h"
#include "../io/seqread.h"
#include "../core/guard.h"
#include "formats_internal.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the line index format is little-endian; this host is not"
#endif

#define MAGIC "FERRYLIX"
#define VERSION 1u
#define HEADER 64u
#define FLAG_FINAL_NEWLINE 1u   /* the last line ends with "\n" */
#define EDGE 4096u              /* bytes hashed at each end of the source */
#define CHUNK ((size_t)1 << 20) /* read size: small enough to stay in cache for the scan */
#define NCHUNKS 4
#define SINK_CAP ((size_t)1 << 17)
#define PROGRESS_EVERY ((uint64_t)64 << 20)

typedef struct header {
    char magic[8];
    uint32_t version, flags;
    uint64_t count, size;
    int64_t mtime_ns;
    uint64_t head_hash, tail_hash, check;
} header;
_Static_assert(sizeof(header) == HEADER, "header layout");

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Hashes of the first and last EDGE bytes: they tell another file of the same
 * size and time apart. */
static int edge_hashes(const ferry__file *f, const char *path, uint64_t *head, uint64_t *tail)
{
    unsigned char buf[EDGE];
    size_t got;
    size_t n = f->size < EDGE ? (size_t)f->size : EDGE;
    int rc = ferry__file_pread(f, path, buf, n, 0, &got);
    if (rc < 0)
        return rc;
    *head = fnv(buf, got);
    rc = ferry__file_pread(f, path, buf, n, f->size - n, &got);
    if (rc < 0)
        return rc;
    *tail = fnv(buf, got);
    return 0;
}

/* ---- Building ---- */

typedef struct sink {
    uint64_t *buf;
    size_t n;
    ferry__atomic_file *w;
    uint64_t total, size;
    int rc;
} sink;

static void flush(sink *s)
{
    if (s->n && s->rc == 0)
        s->rc = ferry__atomic_write(s->w, s->buf, s->n * sizeof *s->buf);
    s->total += s->n;
    s->n = 0;
}

/* A line starts after each newline, except after the file's last byte. */
static inline void emit_mask(sink *s, uint64_t mask, uint64_t base)
{
    while (mask) {
        uint64_t start = base + (uint64_t)__builtin_ctzll(mask) + 1;
        if (start < s->size)
            s->buf[s->n++] = start;
        mask &= mask - 1;
    }
}

static void scan_scalar(sink *s, const uint8_t *p, size_t n, uint64_t base)
{
    const uint8_t *end = p + n, *q = p;
    while ((q = memchr(q, '\n', (size_t)(end - q))) != NULL) {
        uint64_t start = base + (uint64_t)(q - p) + 1;
        if (start < s->size)
            s->buf[s->n++] = start;
        if (s->n == SINK_CAP)
            flush(s);
        q++;
    }
}

#if defined(__x86_64__)
/* 64 bytes at a time: compare, gather a bit per byte, walk the set bits. */
__attribute__((target("avx2"))) static void scan_avx2(sink *s, const uint8_t *p, size_t n,
                                                      uint64_t base)
{
    const __m256i nl = _mm256_set1_epi8('\n');
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + i + 32));
        uint64_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, nl));
        uint64_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, nl));
        uint64_t mask = lo | hi << 32;
        if (mask) {
            if (s->n + 64 > SINK_CAP)
                flush(s);
            emit_mask(s, mask, base + i);
        }
    }
    scan_scalar(s, p + i, n - i, base + i);
}

static void scan_sse2(sink *s, const uint8_t *p, size_t n, uint64_t base)
{
    const __m128i nl = _mm_set1_epi8('\n');
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t mask = 0;
        for (int k = 0; k < 4; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i + 16 * k));
            mask |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, nl)) << (16 * k);
        }
        if (mask) {
            if (s->n + 64 > SINK_CAP)
                flush(s);
            emit_mask(s, mask, base + i);
        }
    }
    scan_scalar(s, p + i, n - i, base + i);
}
#endif

typedef void (*scan_fn)(sink *, const uint8_t *, size_t, uint64_t);

static scan_fn pick_scan(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        return scan_avx2;
    return scan_sse2;
#else
    return scan_scalar; /* glibc's memchr is vectorised on other targets too */
#endif
}

/* Reading and scanning overlap: a reader thread fills chunks (pread: a file
 * that shrinks gives an error, never a fault) while the caller's thread scans
 * the previous ones. The two bounded queues carry chunks back and forth. */
typedef struct chunk {
    uint8_t *data;
    size_t n;
    uint64_t off;
    int rc;
    char msg[FERRY_ERRMSG_MAX];
} chunk;

typedef struct reader {
    const ferry__file *f;
    const char *path;
    ferry__queue *empty, *full;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    uint64_t off = 0;
    while (off < r->f->size) {
        void *item;
        if (ferry__queue_pop(r->empty, &item, 0) != 0)
            break; /* closed: the scanner gave up */
        chunk *c = item;
        size_t want = r->f->size - off < CHUNK ? (size_t)(r->f->size - off) : CHUNK;
        c->off = off;
        c->rc = ferry__file_pread(r->f, r->path, c->data, want, off, &c->n);
        if (c->rc == 0 && c->n < want)
            c->rc = ferry__err(FERRY_EIO, "%s: shrank while being indexed (at offset %llu)",
                               r->path, (unsigned long long)(off + c->n));
        if (c->rc < 0)
            ferry__err_copy(c->msg); /* the message lives in this thread: carry it over */
        off += want;
        if (ferry__queue_push(r->full, c, 0) != 0 || c->rc < 0)
            break;
    }
    return NULL;
}

static char *default_index_path(const char *path)
{
    size_t n = strlen(path);
    char *p = ferry__malloc(n + 6);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, ".fidx", 6);
    }
    return p;
}

int ferry_line_index_build(const char *path, const char *index_path, ferry_progress_fn progress,
                           void *arg, uint64_t *nlines)
{
    int rc = 0;
    ferry__file f = {-1, 0, 0};
    ferry__atomic_file w = {.fd = -1};
    uint8_t *chunk_mem = NULL;
    chunk chunks[NCHUNKS];
    char *own_index = NULL;
    sink s = {0};
    reader r = {NULL, NULL, NULL, NULL};
    ferry__thread thread;
    bool started = false;
    if (!path)
        return ferry__err(FERRY_EINVAL, "line index: path is NULL");
    if (!index_path && !(index_path = own_index = default_index_path(path)))
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    FERRY_TRY(ferry__refuse_compressed(path, "a line index"));
    FERRY_TRY(ferry__file_open(&f, path));
    header h = {.version = VERSION, .size = f.size, .mtime_ns = f.mtime_ns};
    memcpy(h.magic, MAGIC, 8);
    FERRY_TRY(edge_hashes(&f, path, &h.head_hash, &h.tail_hash));
    chunk_mem = ferry__aligned_alloc(CHUNK * NCHUNKS);
    s.buf = ferry__malloc(SINK_CAP * sizeof *s.buf);
    if (!chunk_mem || !s.buf)
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    FERRY_TRY(ferry__atomic_open(&w, index_path));
    s.w = &w;
    s.size = f.size;
    header zero = {0};
    FERRY_TRY(ferry__atomic_write(&w, &zero, sizeof zero));
    if (f.size)
        s.buf[s.n++] = 0;
    scan_fn scan = pick_scan();
    uint64_t done = 0, next_report = PROGRESS_EVERY;
    uint8_t last = '\n';
    r = (reader){&f, path, NULL, NULL};
    FERRY_TRY(ferry__queue_create(&r.empty, NCHUNKS));
    FERRY_TRY(ferry__queue_create(&r.full, NCHUNKS));
    for (int i = 0; i < NCHUNKS; i++) {
        chunks[i].data = chunk_mem + (size_t)i * CHUNK;
        ferry__queue_push(r.empty, &chunks[i], 0);
    }
    FERRY_TRY(ferry__thread_start(&thread, reader_main, &r));
    started = true;
    while (done < f.size) {
        void *item;
        ferry__queue_pop(r.full, &item, 0);
        chunk *c = item;
        if (c->rc < 0) {
            rc = ferry__err(c->rc, "%s", c->msg);
            goto cleanup;
        }
        scan(&s, c->data, c->n, c->off);
        if ((rc = s.rc) < 0)
            goto cleanup;
        last = c->data[c->n - 1];
        done += c->n;
        ferry__queue_push(r.empty, c, 0);
        if (progress && done >= next_report) {
            progress(done, f.size, arg);
            next_report = done + PROGRESS_EVERY;
        }
    }
    if (s.n + 1 > SINK_CAP)
        flush(&s);
    s.buf[s.n++] = f.size; /* the end of the last line */
    flush(&s);
    if ((rc = s.rc) < 0)
        goto cleanup;
    h.count = s.total - 1;
    h.flags = f.size && last == '\n' ? FLAG_FINAL_NEWLINE : 0;
    h.check = fnv(&h, offsetof(header, check));
    /* a file that changed while it was read would get an index of neither version */
    uint64_t size2;
    int64_t mtime2;
    FERRY_TRY(ferry__stat(path, &size2, &mtime2));
    if (size2 != f.size || mtime2 != f.mtime_ns)
        FERRY_FAIL(FERRY_ESTALE, "%s: changed while being indexed", path);
    FERRY_TRY(ferry__atomic_pwrite(&w, &h, sizeof h, 0));
    FERRY_TRY(ferry__atomic_commit(&w));
    if (progress)
        progress(f.size, f.size, arg);
    if (nlines)
        *nlines = h.count;
cleanup:
    if (started) {
        ferry__queue_close(r.empty); /* a reader still waiting for a chunk stops */
        ferry__queue_close(r.full);
        ferry__thread_join(&thread);
    }
    ferry__queue_free(r.empty);
    ferry__queue_free(r.full);
    ferry__atomic_abort(&w);
    ferry__file_close(&f);
    ferry__aligned_free(chunk_mem);
    ferry__free(s.buf);
    ferry__free(own_index);
    return rc;
}

/* ---- Reading ---- */

struct ferry_line_index {
    ferry__map map;
    const uint64_t *off;
    uint64_t count, size;
    uint32_t flags;
    char name[256];
};

static int check_index(ferry_line_index *ix, const char *path, const char *index_path)
{
    const char *name = index_path;
    header h;
    if (ix->map.size < HEADER)
        return ferry__err(FERRY_ECORRUPT, "%s: %zu bytes is too short for a line index", name,
                          ix->map.size);
    memcpy(&h, ix->map.data, sizeof h);
    if (memcmp(h.magic, MAGIC, 8) != 0)
        return ferry__err(FERRY_ECORRUPT, "%s: not a ferry line index (bad magic)", name);
    if (h.version != VERSION)
        return ferry__err(FERRY_ECORRUPT, "%s: line index version %u; this ferry reads %u", name,
                          h.version, VERSION);
    if (h.check != fnv(&h, offsetof(header, check)))
        return ferry__err(FERRY_ECORRUPT, "%s: damaged header (checksum mismatch)", name);
    uint64_t entries = (ix->map.size - HEADER) / 8;
    if ((ix->map.size - HEADER) % 8 != 0 || h.count == UINT64_MAX || entries != h.count + 1)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: truncated or padded: %zu bytes hold %llu offsets, the header says "
                          "%llu lines",
                          name, ix->map.size, (unsigned long long)entries,
                          (unsigned long long)h.count);
    ferry__file f;
    int rc = ferry__file_open(&f, path);
    if (rc < 0)
        return rc;
    uint64_t head = 0, tail = 0;
    if (f.size == h.size && f.mtime_ns == h.mtime_ns)
        rc = edge_hashes(&f, path, &head, &tail);
    ferry__file_close(&f);
    if (rc < 0)
        return rc;
    if (f.size != h.size || f.mtime_ns != h.mtime_ns)
        return ferry__err(
            FERRY_ESTALE,
            "%s is stale: %s changed since it was indexed (%llu bytes then, %llu now%s)", name,
            path, (unsigned long long)h.size, (unsigned long long)f.size,
            f.size == h.size ? ", modified since" : "");
    if (head != h.head_hash || tail != h.tail_hash)
        return ferry__err(FERRY_ESTALE, "%s is the index of another file than %s (contents differ)",
                          name, path);
    ix->off = (const uint64_t *)((const char *)ix->map.data + HEADER);
    if (ix->off[0] != 0 || ix->off[h.count] != h.size)
        return ferry__err(FERRY_ECORRUPT, "%s: offsets do not span %s (first %llu, last %llu)",
                          name, path, (unsigned long long)ix->off[0],
                          (unsigned long long)ix->off[h.count]);
    ix->count = h.count;
    ix->size = h.size;
    ix->flags = h.flags;
    return 0;
}

/* The header and the offsets' ends are read from the mapping: under a guard, as
 * the index may be cut short while it is opened. */
static int check_mapped(ferry_line_index *ix, const char *path, const char *index_path)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, index_path, ix->map.data, "opening");
    int rc = check_index(ix, path, index_path);
    ferry__guard_pop(&g);
    return rc;
}

int ferry_line_index_open(ferry_line_index **out, const char *path, const char *index_path,
                          int build)
{
    int rc = 0;
    char *own_index = NULL;
    ferry_line_index *ix = NULL;
    *out = NULL;
    if (!path)
        return ferry__err(FERRY_EINVAL, "line index: path is NULL");
    if (!index_path && !(index_path = own_index = default_index_path(path)))
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    ix = ferry__calloc(1, sizeof *ix);
    if (!ix)
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    snprintf(ix->name, sizeof ix->name, "%s", index_path);
    FERRY_TRY(ferry__guard_install());
    rc = ferry__map_file(&ix->map, index_path);
    if (rc == 0)
        rc = check_mapped(ix, path, index_path);
    if ((rc == FERRY_ENOENT || rc == FERRY_ESTALE) && build) {
        uint64_t size;
        int64_t mtime;
        if (ferry__stat(path, &size, &mtime) < 0) /* the source itself is missing */
            goto cleanup;
        ferry__unmap(&ix->map);
        FERRY_TRY(ferry_line_index_build(path, index_path, NULL, NULL, NULL));
        FERRY_TRY(ferry__map_file(&ix->map, index_path));
        rc = check_mapped(ix, path, index_path);
    }
    if (rc == FERRY_ENOENT && !build) {
        uint64_t size;
        int64_t mtime;
        if (ferry__stat(path, &size, &mtime) == 0) /* the text is there, its index is not */
            rc = ferry__err(FERRY_ENOENT,
                            "%s has no line index (%s): run `ferry index %s` (in Python: "
                            "ferry.index(path)), or add build=1 to the source (build_index in C) "
                            "to build it when opening",
                            path, index_path, path);
    }
    if (rc < 0)
        goto cleanup;
    *out = ix;
    ix = NULL;
cleanup:
    ferry_line_index_free(ix);
    ferry__free(own_index);
    return rc;
}

void ferry_line_index_free(ferry_line_index *ix)
{
    if (!ix)
        return;
    ferry__unmap(&ix->map);
    ferry__free(ix);
}

const uint64_t *ferry__line_index_offsets(const ferry_line_index *ix)
{
    return ix->off;
}

uint64_t ferry_line_index_count(const ferry_line_index *ix)
{
    return ix->count;
}

uint64_t ferry_line_index_source_size(const ferry_line_index *ix)
{
    return ix->size;
}

const char *ferry__line_index_name(const ferry_line_index *ix)
{
    return ix->name;
}

bool ferry__line_index_holds(const ferry_line_index *ix, uintptr_t addr)
{
    uintptr_t a = (uintptr_t)ix->map.data;
    return addr >= a && addr - a < ix->map.size;
}

int ferry_line_index_get(const ferry_line_index *ix, uint64_t i, uint64_t *offset, uint64_t *length)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, ix->name, ix->map.data, "line %llu", (unsigned long long)i);
    int rc = ferry__line_index_entry(ix, i, offset, length);
    ferry__guard_pop(&g);
    return rc;
}

int ferry__line_index_entry(const ferry_line_index *ix, uint64_t i, uint64_t *offset,
                            uint64_t *length)
{
    if (i >= ix->count)
        return ferry__err(FERRY_ERANGE, "%s: line %llu is past the last (%llu lines)", ix->name,
                          (unsigned long long)i, (unsigned long long)ix->count);
    uint64_t a = ix->off[i], b = ix->off[i + 1];
    if (a >= b || b > ix->size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: line %llu: offsets %llu..%llu are out of order or past the source "
                          "(%llu bytes)",
                          ix->name, (unsigned long long)i, (unsigned long long)a,
                          (unsigned long long)b, (unsigned long long)ix->size);
    /* every line but the last ends with "\n"; the last one when the file does */
    bool newline = i + 1 < ix->count || (ix->flags & FLAG_FINAL_NEWLINE);
    *offset = a;
    *length = b - a - newline;
    return 0;
}
