/*
 * The line index: a sidecar (sidecar.h, docs/line-index.md) with the offset of
 * every line of a text file, magic "FERRYLIX", no extra words, flags bit 0 when
 * the last line ends with "\n". offsets[i] is where line i starts and
 * offsets[count] is the source size, so line i spans [offsets[i], offsets[i+1])
 * including its "\n".
 */
#include "ferry/lines.h"
#include "sidecar.h"
#include "../io/io.h"
#include "../io/seqread.h"
#include "../core/guard.h"
#include "formats_internal.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define HEADER FERRY__SIDECAR_HEADER
#define FLAG_FINAL_NEWLINE 1u               /* the last line ends with "\n" */
#define CHUNK ((size_t)1 << 20)             /* bytes a scanner takes at a time */
#define WRITEBACK_EVERY ((uint64_t)4 << 20) /* index bytes between writeback starts */
#define PROGRESS_EVERY ((uint64_t)64 << 20)

static const ferry__sidecar_kind KIND = {"FERRYLIX", 1, "line index", "lines", 0, "ferry index "};

/* ---- Building ---- */

/* The line starts found in one chunk of the file. */
typedef struct sink {
    uint64_t *buf; /* room for CHUNK entries: a chunk cannot hold more line starts */
    size_t n;
    uint64_t size; /* the file's: no line starts at its end */
} sink;

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
        if (mask)
            emit_mask(s, mask, base + i);
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
        if (mask)
            emit_mask(s, mask, base + i);
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

/* The file is mapped and scanned by two threads, the caller's and one more (each
 * byte read from memory once, where a read into a buffer would copy it first: the
 * mapping costs few faults, the page cache handing out large folios). Each takes
 * the next chunk, scans it into a slot's list of line starts, and the caller's
 * thread writes the lists out in the file's order as they complete: chunk c uses
 * slot c % NSLOTS, taken again once the list of chunk c - NSLOTS is written. Only
 * the caller's thread writes, so every write is on the thread that asked for the
 * index. There is no third thread to wait for the others: two cores are kept
 * scanning. A scanner reads under a guard: a file cut short while it is indexed is
 * an error naming it, not a fault. */
#define NSLOTS 4

typedef struct slot {
    size_t n;
    uint64_t off;
    uint8_t last;  /* its last byte */
    uint64_t turn; /* the chunk that takes it next, or holds it (turn % NSLOTS is its index) */
    bool busy;     /* taken by chunk turn, not yet written */
    bool ready;    /* scanned (or failed: rc) */
    int rc;
    char msg[FERRY_ERRMSG_MAX];
    sink s;
} slot;

typedef struct scan_job {
    const uint8_t *base; /* the mapping */
    uint64_t size, nchunks;
    const char *path;
    scan_fn scan;
    pthread_mutex_t m;
    pthread_cond_t cv;
    uint64_t next_scan;  /* the next chunk to take */
    uint64_t next_write; /* the next chunk to write out */
    bool stop;           /* an error, or the caller gave up: take no more chunks */
    slot slots[NSLOTS];
} scan_job;

__attribute__((noinline)) static int scan_chunk(const scan_job *b, slot *c)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, b->path, b->base, "indexing");
    b->scan(&c->s, b->base + c->off, c->n, c->off);
    c->last = b->base[c->off + c->n - 1];
    ferry__guard_pop(&g);
    return 0;
}

/* What the caller's thread keeps while it writes the index. */
typedef struct writer {
    ferry__atomic_file *w;
    uint64_t total, kicked;
    uint8_t last;
    ferry_progress_fn progress;
    void *arg;
    uint64_t next_report;
} writer;

/* The error of the chunk that stopped the build. */
static int failed_chunk(const scan_job *b)
{
    for (int i = 0; i < NSLOTS; i++)
        if (b->slots[i].busy && b->slots[i].ready && b->slots[i].rc < 0)
            return ferry__err(b->slots[i].rc, "%s", b->slots[i].msg);
    return ferry__err(FERRY_EIO, "%s: indexing stopped", b->path);
}

/* Writes out the lists of the chunks scanned in order from next_write on (with
 * wait, all of them), with the lock held but not while writing. The appends go
 * through the writer's buffer in aligned pieces, which the page cache takes in
 * large folios: half the system time of writing each list as it comes. */
static int write_ready(scan_job *b, writer *o, bool wait)
{
    int rc = 0;
    while (b->next_write < b->nchunks) {
        slot *c = &b->slots[b->next_write % NSLOTS];
        if (c->busy && c->ready && c->rc < 0)
            return ferry__err(c->rc, "%s", c->msg);
        if (b->stop)
            return failed_chunk(b);
        if (!c->busy || !c->ready) {
            if (!wait)
                break;
            pthread_cond_wait(&b->cv, &b->m);
            continue;
        }
        pthread_mutex_unlock(&b->m);
        rc = ferry__atomic_write(o->w, c->s.buf, c->s.n * sizeof(uint64_t));
        /* the kernel writes the index out while the file is scanned, so that the
         * fsync at the end finds little left to do */
        uint64_t written = o->w->off - o->w->held;
        if (rc == 0 && written - o->kicked >= WRITEBACK_EVERY) {
            ferry__atomic_writeback(o->w, o->kicked, written - o->kicked);
            o->kicked = written;
        }
        o->total += c->s.n;
        o->last = c->last;
        uint64_t done = c->off + c->n;
        if (rc == 0 && o->progress && done >= o->next_report) {
            o->progress(done, b->size, o->arg);
            o->next_report = done + PROGRESS_EVERY;
        }
        pthread_mutex_lock(&b->m);
        if (rc < 0)
            return rc;
        c->busy = c->ready = false;
        c->turn += NSLOTS;
        b->next_write++;
        pthread_cond_broadcast(&b->cv);
    }
    return rc;
}

/* Takes the next chunk and scans it into its slot: 1, or 0 when there is none to
 * take (all taken, or stop), or the error of a write. Called and returns with the
 * lock held. The writer (o) writes out what is ready while its slot is taken. */
static int scan_next(scan_job *b, writer *o)
{
    if (b->stop || b->next_scan >= b->nchunks)
        return 0;
    uint64_t k = b->next_scan++;
    slot *c = &b->slots[k % NSLOTS];
    while ((c->busy || c->turn != k) && !b->stop) {
        if (o) {
            int rc = write_ready(b, o, false);
            if (rc < 0)
                return rc;
            if (!c->busy && c->turn == k)
                break;
        }
        pthread_cond_wait(&b->cv, &b->m);
    }
    if (b->stop)
        return 0;
    c->busy = true;
    c->ready = false;
    pthread_mutex_unlock(&b->m);
    c->off = k * CHUNK;
    c->n = b->size - c->off < CHUNK ? (size_t)(b->size - c->off) : CHUNK;
    c->s.n = 0;
    if ((c->rc = scan_chunk(b, c)) < 0)
        ferry__err_copy(c->msg); /* the message lives in this thread: carry it over */
    pthread_mutex_lock(&b->m);
    c->ready = true;
    if (c->rc < 0)
        b->stop = true;
    pthread_cond_broadcast(&b->cv);
    return 1;
}

static void *helper_main(void *arg)
{
    scan_job *b = arg;
    pthread_mutex_lock(&b->m);
    while (scan_next(b, NULL) > 0)
        ;
    pthread_mutex_unlock(&b->m);
    return NULL;
}

int ferry_line_index_build(const char *path, const char *index_path, ferry_progress_fn progress,
                           void *arg, uint64_t *nlines)
{
    int rc = 0;
    ferry__file f = {-1, 0, 0};
    ferry__atomic_file w = {.fd = -1};
    ferry__map map = {NULL, 0};
    char *own_index = NULL;
    scan_job b;
    ferry__thread helper;
    bool started = false, locked = false;
    memset(&b, 0, sizeof b);
    pthread_mutex_init(&b.m, NULL);
    pthread_cond_init(&b.cv, NULL);
    if (!path)
        FERRY_FAIL(FERRY_EINVAL, "line index: path is NULL");
    if (!index_path && !(index_path = own_index = ferry__sidecar_path(path)))
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    FERRY_TRY(ferry__refuse_compressed(path, "a line index"));
    FERRY_TRY(ferry__file_open(&f, path));
    ferry__sidecar_header h;
    FERRY_TRY(ferry__sidecar_header_init(&h, &KIND, &f, path));
    FERRY_TRY(ferry__guard_install());
    FERRY_TRY(ferry__map_open(&map, &f, path));
    /* read once, in order: the kernel may read ahead and drop behind */
    if (map.data)
        madvise(map.data, map.size, MADV_SEQUENTIAL);
    for (int i = 0; i < NSLOTS; i++) {
        b.slots[i].s.size = f.size;
        b.slots[i].turn = (uint64_t)i;
        /* its pages are touched only as far as line starts are found */
        if (!(b.slots[i].s.buf = ferry__malloc(CHUNK * sizeof(uint64_t))))
            FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    }
    FERRY_TRY(ferry__atomic_open(&w, index_path));
    ferry__sidecar_header zero = {0};
    FERRY_TRY(ferry__atomic_write(&w, &zero, sizeof zero));
    writer o = {&w, 0, HEADER, '\n', progress, arg, PROGRESS_EVERY};
    if (f.size) {
        uint64_t first = 0;
        FERRY_TRY(ferry__atomic_write(&w, &first, sizeof first));
        o.total = 1;
    }
    b.base = map.data;
    b.size = f.size;
    b.nchunks = (f.size + CHUNK - 1) / CHUNK;
    b.path = path;
    b.scan = pick_scan();
    /* one chunk is scanned here in the time the thread takes to start */
    if (b.nchunks > 1 && ferry__thread_start(&helper, helper_main, &b) == 0)
        started = true;
    else
        ferry__err_clear(); /* without the thread, this one scans it all */
    pthread_mutex_lock(&b.m);
    locked = true;
    while ((rc = scan_next(&b, &o)) > 0)
        FERRY_TRY(write_ready(&b, &o, false));
    FERRY_TRY(rc);
    FERRY_TRY(write_ready(&b, &o, true));
    pthread_mutex_unlock(&b.m);
    locked = false;
    /* the end of the last line */
    FERRY_TRY(ferry__atomic_write(&w, &f.size, sizeof f.size));
    h.count = o.total;
    h.flags = f.size && o.last == '\n' ? FLAG_FINAL_NEWLINE : 0;
    ferry__sidecar_seal(&h, &KIND, NULL);
    /* a file that changed while it was read would get an index of neither version */
    FERRY_TRY(ferry__sidecar_unchanged(&f, path));
    FERRY_TRY(ferry__atomic_pwrite(&w, &h, sizeof h, 0));
    FERRY_TRY(ferry__atomic_commit(&w));
    if (progress)
        progress(f.size, f.size, arg);
    if (nlines)
        *nlines = h.count;
cleanup:
    if (!locked)
        pthread_mutex_lock(&b.m);
    b.stop = true; /* a helper waiting for a slot stops */
    pthread_cond_broadcast(&b.cv);
    pthread_mutex_unlock(&b.m);
    if (started)
        ferry__thread_join(&helper);
    pthread_mutex_destroy(&b.m);
    pthread_cond_destroy(&b.cv);
    ferry__atomic_abort(&w);
    ferry__unmap(&map);
    ferry__file_close(&f);
    for (int i = 0; i < NSLOTS; i++)
        ferry__free(b.slots[i].s.buf);
    ferry__free(own_index);
    return rc;
}

/* ---- Reading ---- */

struct ferry_line_index {
    ferry__sidecar sc;
    const uint64_t *off;
    uint64_t count, size;
    uint32_t flags;
    char name[256];
};

static int check_mapped(ferry_line_index *ix, const char *path, const char *index_path)
{
    ferry__sidecar_close(&ix->sc);
    int rc = ferry__sidecar_open(&ix->sc, &KIND, path, index_path);
    if (rc < 0)
        return rc;
    ix->off = ix->sc.off;
    ix->count = ix->sc.h.count;
    ix->size = ix->sc.h.size;
    ix->flags = ix->sc.h.flags;
    return 0;
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
    if (!index_path && !(index_path = own_index = ferry__sidecar_path(path)))
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    ix = ferry__calloc(1, sizeof *ix);
    if (!ix)
        FERRY_FAIL(FERRY_ENOMEM, "line index: out of memory");
    snprintf(ix->name, sizeof ix->name, "%s", index_path);
    rc = check_mapped(ix, path, index_path);
    if ((rc == FERRY_ENOENT || rc == FERRY_ESTALE) && build) {
        uint64_t size;
        int64_t mtime;
        if (ferry__stat(path, &size, &mtime) < 0) /* the source itself is missing */
            goto cleanup;
        ferry__sidecar_close(&ix->sc);
        FERRY_TRY(ferry_line_index_build(path, index_path, NULL, NULL, NULL));
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
    ferry__sidecar_close(&ix->sc);
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
    uintptr_t a = (uintptr_t)ix->sc.map.data;
    return addr >= a && addr - a < ix->sc.map.size;
}

int ferry_line_index_get(const ferry_line_index *ix, uint64_t i, uint64_t *offset, uint64_t *length)
{
    ferry__guard g;
    ferry__guard_push(&g);
    if (sigsetjmp(g.jb, 0))
        return ferry__guard_err(g.addr, ix->name, ix->sc.map.data, "line %llu",
                                (unsigned long long)i);
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
