/*
 * The structure check of an LMDB environment, run before liblmdb maps it.
 * liblmdb trusts its file: a node offset past its page, a child page number past
 * the map, a branch page with one key or an overflow run past the end of the file
 * make it read outside the map (SIGSEGV, SIGBUS) or fail an assertion (abort).
 * So every page a read-only cursor will visit is read here first, with pread, and
 * checked the way liblmdb 0.9 will use it. The layout (mdb.c, LMDB 0.9, 64-bit):
 *
 *   page header (16 bytes): pgno u64, pad u16, flags u16, lower u16, upper u16
 *     (an overflow page's lower/upper are its page count, u32); then the node
 *     offsets, u16 each, (lower - 16) / 2 of them.
 *   node (8 bytes + key + data): lo u16, hi u16, flags u16, ksize u16, key, data.
 *     In a leaf, lo | hi << 16 is the data size; F_BIGDATA data is the u64 number
 *     of the first overflow page, whose data starts 16 bytes in. In a branch,
 *     lo | hi << 16 | flags << 32 is the child's page number.
 *   meta page (pages 0 and 1): the header, then magic u32, version u32, address
 *     u64, mapsize u64, two database records (free, main) of 48 bytes each,
 *     last page u64, txnid u64.
 *   database record (48 bytes): pad u32, flags u16, depth u16, branch, leaf and
 *     overflow page counts, entries, root (u64 each).
 */
#include "lmdb_env.h"
#include "../core/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#define PAGEHDRSZ 16u
#define NODESIZE 8u
#define META_OFF PAGEHDRSZ
#define META_SIZE 136u
#define DB_RECORD 48u
#define MAX_DEPTH 32u /* liblmdb's cursor stack */
#define MIN_PSIZE 512u
#define MAX_PSIZE 32768u /* liblmdb 0.9's MAX_PAGESIZE */
#define P_INVALID UINT64_MAX
#define MAGIC 0xBEEFC0DEu
#define DATA_VERSION 1u

#define P_BRANCH 0x01
#define P_LEAF 0x02
#define P_OVERFLOW 0x04
#define P_META 0x08
#define P_LEAF2 0x20
#define P_SUBP 0x40
#define P_TYPES (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2 | P_SUBP)

#define F_BIGDATA 0x01
#define F_SUBDATA 0x02
#define F_DUPDATA 0x04

typedef struct dbrec {
    uint16_t flags, depth;
    uint64_t entries, root;
} dbrec;

static dbrec read_dbrec(const uint8_t *p)
{
    return (dbrec){ferry__load_le16(p + 4), ferry__load_le16(p + 6), ferry__load_le64(p + 32),
                   ferry__load_le64(p + 40)};
}

typedef struct walk {
    int fd;
    const char *name;   /* for messages */
    const char *dbname; /* the tree being walked, NULL = the main database */
    const char *want;   /* the sub-database asked for */
    uint32_t psize;
    uint64_t last_pg;
    uint8_t *seen; /* a bit per page: reached already */
    uint8_t *bufs; /* a page per level */
    bool found;    /* the main database holds `want` */
    dbrec sub;     /* its record */
    uint64_t entries;
} walk;

static int read_at(walk *w, uint8_t *buf, size_t n, uint64_t off, const char *what)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(w->fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ferry__err(FERRY_EIO, "%s: read of %s at offset %llu: %s", w->name, what,
                              (unsigned long long)off, strerror(errno));
        if (r == 0)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: %s at offset %llu lies past the end of the file (it shrank?)",
                              w->name, what, (unsigned long long)off);
        done += (size_t)r;
    }
    return 0;
}

const char *ferry__lmdb_key_repr(char *buf, size_t cap, const void *key, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *k = key;
    size_t o = 0;
    if (cap < 8) {
        if (cap)
            buf[0] = 0;
        return buf;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = k[i];
        bool plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        if (o + (plain ? 1 : 4) + 4 > cap) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
        if (plain) {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = 0;
    return buf;
}

/* "NAME: [db "X": ]page N: why" */
static int page_err(const walk *w, uint64_t pgno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int page_err(const walk *w, uint64_t pgno, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (w->dbname)
        return ferry__err(FERRY_ECORRUPT, "%s: sub-database \"%.64s\": page %llu (offset %llu): %s",
                          w->name, w->dbname, (unsigned long long)pgno,
                          (unsigned long long)pgno * w->psize, why);
    return ferry__err(FERRY_ECORRUPT, "%s: page %llu (offset %llu): %s", w->name,
                      (unsigned long long)pgno, (unsigned long long)pgno * w->psize, why);
}

/* The leaf node at `off` of page p (already known to hold its 8-byte head). */
static int check_leaf_node(walk *w, uint64_t pgno, const uint8_t *p, unsigned i, unsigned off)
{
    const uint8_t *node = p + off;
    uint32_t dsize = ferry__load_le16(node) | (uint32_t)ferry__load_le16(node + 2) << 16;
    unsigned flags = ferry__load_le16(node + 4), ksize = ferry__load_le16(node + 6);
    size_t room = w->psize - off - NODESIZE;
    if (ksize > room)
        return page_err(w, pgno, "node %u: its key of %u bytes runs past the page", i, ksize);
    room -= ksize;
    if (flags & F_DUPDATA)
        return page_err(w, pgno, "node %u: marked as holding duplicates in a database without them",
                        i);
    if (flags & F_BIGDATA) {
        if (room < 8)
            return page_err(w, pgno, "node %u: its overflow page number runs past the page", i);
        uint64_t first = ferry__load_le64(node + NODESIZE + ksize);
        uint64_t pages = ((uint64_t)PAGEHDRSZ - 1 + dsize) / w->psize + 1;
        if (first < 2 || first > w->last_pg || pages - 1 > w->last_pg - first) {
            char key[80];
            ferry__lmdb_key_repr(key, sizeof key, node + NODESIZE, ksize);
            return ferry__err(FERRY_ECORRUPT,
                              "%s: entry %llu (key \"%s\"): its value of %u bytes lies outside "
                              "the file's %llu bytes (overflow pages %llu..%llu of %llu)",
                              w->name, (unsigned long long)w->entries, key, dsize,
                              (unsigned long long)(w->last_pg + 1) * w->psize,
                              (unsigned long long)first, (unsigned long long)(first + pages - 1),
                              (unsigned long long)w->last_pg + 1);
        }
    } else if (dsize > room) {
        return page_err(w, pgno, "node %u: its value of %u bytes runs past the page", i, dsize);
    }
    if (!w->dbname && (flags & F_SUBDATA)) {
        /* a named sub-database's record (liblmdb copies 48 bytes from here) */
        if ((flags & F_BIGDATA) || dsize != DB_RECORD)
            return page_err(w, pgno, "node %u: a sub-database record of %u bytes, not %u", i, dsize,
                            DB_RECORD);
        if (w->want && strlen(w->want) == ksize && !memcmp(node + NODESIZE, w->want, ksize)) {
            w->found = true;
            w->sub = read_dbrec(node + NODESIZE + ksize);
        }
    }
    w->entries++;
    return 0;
}

static int check_page(walk *w, uint64_t pgno, unsigned level, unsigned depth)
{
    if (pgno < 2 || pgno > w->last_pg)
        return page_err(w, pgno, "a %s page number outside the file's pages 2..%llu",
                        level == 1 ? "root" : "child", (unsigned long long)w->last_pg);
    if (w->seen[pgno >> 3] & (1u << (pgno & 7)))
        return page_err(w, pgno, "reached twice (a cycle, or pages shared between trees)");
    w->seen[pgno >> 3] |= (uint8_t)(1u << (pgno & 7));
    uint8_t *p = w->bufs + (size_t)(level - 1) * w->psize;
    int rc = read_at(w, p, w->psize, pgno * w->psize, "a page");
    if (rc < 0)
        return rc;
    if (ferry__load_le64(p) != pgno)
        return page_err(w, pgno, "the header says page %llu",
                        (unsigned long long)ferry__load_le64(p));
    unsigned type = ferry__load_le16(p + 10) & P_TYPES, want = level < depth ? P_BRANCH : P_LEAF;
    if (type != want)
        return page_err(w, pgno, "flags 0x%x at level %u of %u: not a %s page",
                        ferry__load_le16(p + 10), level, depth,
                        want == P_BRANCH ? "branch" : "leaf");
    unsigned lower = ferry__load_le16(p + 12), upper = ferry__load_le16(p + 14);
    if (lower < PAGEHDRSZ || lower > upper || upper > w->psize)
        return page_err(w, pgno, "lower %u and upper %u are not within [%u, %u] in order", lower,
                        upper, PAGEHDRSZ, w->psize);
    unsigned n = (lower - PAGEHDRSZ) >> 1;
    if (n < (want == P_BRANCH ? 2u : 1u))
        return page_err(w, pgno, "a %s page with %u node%s", want == P_BRANCH ? "branch" : "leaf",
                        n, n == 1 ? "" : "s");
    for (unsigned i = 0; i < n; i++) {
        unsigned off = ferry__load_le16(p + PAGEHDRSZ + 2 * i);
        if (off < upper || (off & 1) || off > w->psize - NODESIZE)
            return page_err(w, pgno, "node %u at offset %u lies outside the page's nodes [%u, %u)",
                            i, off, upper, w->psize);
        if (want == P_LEAF) {
            if ((rc = check_leaf_node(w, pgno, p, i, off)) < 0)
                return rc;
            continue;
        }
        const uint8_t *node = p + off;
        unsigned ksize = ferry__load_le16(node + 6);
        if (ksize > w->psize - off - NODESIZE)
            return page_err(w, pgno, "node %u: its key of %u bytes runs past the page", i, ksize);
        uint64_t child = ferry__load_le16(node) | (uint64_t)ferry__load_le16(node + 2) << 16 |
                         (uint64_t)ferry__load_le16(node + 4) << 32;
        if ((rc = check_page(w, child, level + 1, depth)) < 0)
            return rc;
    }
    return 0;
}

/* One database's tree, from its record. */
static int check_tree(walk *w, const dbrec *d)
{
    if (d->flags & MDB_DUPSORT)
        return ferry__err(FERRY_EINVAL,
                          "%s: %s%.64s%s keeps duplicate keys (MDB_DUPSORT), which ferry does "
                          "not read",
                          w->name, w->dbname ? "sub-database \"" : "the main database",
                          w->dbname ? w->dbname : "", w->dbname ? "\"" : "");
    if (d->root == P_INVALID) {
        if (d->depth != 0)
            return page_err(w, 0, "an empty database (no root page) of depth %u", d->depth);
        return 0;
    }
    if (d->depth == 0 || d->depth > MAX_DEPTH)
        return page_err(w, d->root, "a tree of depth %u (not within [1, %u])", d->depth, MAX_DEPTH);
    w->entries = 0;
    return check_page(w, d->root, 1, d->depth);
}

int ferry__lmdb_check(const char *file, const char *name, const char *db, uint64_t txnid,
                      ferry__lmdb_checked *out)
{
    int rc = 0;
    walk w = {.fd = -1, .name = name, .want = db};
    uint8_t m[2][PAGEHDRSZ + META_SIZE];
    struct stat st;
    memset(out, 0, sizeof *out);
    w.fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (w.fd < 0)
        return ferry__err(errno == ENOENT || errno == ENOTDIR ? FERRY_ENOENT : FERRY_EIO, "%s: %s",
                          name, strerror(errno));
    if (fstat(w.fd, &st) != 0)
        FERRY_FAIL(FERRY_EIO, "%s: %s", name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        FERRY_FAIL(FERRY_EINVAL, "%s: not a regular file", name);
    if (st.st_size == 0)
        FERRY_FAIL(FERRY_ECORRUPT, "%s: the file is empty (not an LMDB file)", name);
    uint64_t size = (uint64_t)st.st_size, off = 0;
    for (int k = 0; k < 2; k++) {
        const char *bad = NULL;
        if (off > size || size - off < sizeof m[k]) {
            bad = k ? "too short for its second meta page" : "too short for a meta page";
        } else {
            FERRY_TRY(read_at(&w, m[k], sizeof m[k], off, "a meta page"));
            if (!(ferry__load_le16(m[k] + 10) & P_META))
                bad = k ? "the second meta page is not marked as one" : "no meta page";
            else if (ferry__load_le32(m[k] + META_OFF) != MAGIC)
                bad = k ? "the second meta page has no LMDB magic" : "no LMDB magic";
        }
        if (bad)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: MDB_INVALID: File is not an LMDB file (%s)", name, bad);
        if (ferry__load_le32(m[k] + META_OFF + 4) != DATA_VERSION)
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: MDB_VERSION_MISMATCH: meta page %d is of LMDB data version %u, not %u",
                       name, k, ferry__load_le32(m[k] + META_OFF + 4), DATA_VERSION);
        /* The free database's pad holds the page size (mm_psize). */
        uint32_t psize = ferry__load_le32(m[k] + META_OFF + 24);
        if (psize < MIN_PSIZE || psize > MAX_PSIZE || (psize & (psize - 1)))
            FERRY_FAIL(FERRY_ECORRUPT,
                       "%s: meta page %d: a page size of %u bytes (not a power of two within "
                       "[%u, %u])",
                       name, k, psize, MIN_PSIZE, MAX_PSIZE);
        if (k == 1 && psize != w.psize)
            FERRY_FAIL(FERRY_ECORRUPT, "%s: the meta pages disagree on the page size (%u, %u)",
                       name, w.psize, psize);
        w.psize = psize;
        off = psize;
    }
    /* liblmdb reads from the meta page with the newer transaction (the first on a
     * tie); a reader with the lock asks for the one its transaction took. */
    uint64_t t0 = ferry__load_le64(m[0] + META_OFF + 128),
             t1 = ferry__load_le64(m[1] + META_OFF + 128);
    int pick = t0 < t1;
    if (txnid != FERRY__LMDB_NEWEST) {
        if (t0 != txnid && t1 != txnid)
            FERRY_FAIL(FERRY_ESTALE,
                       "%s: transaction %llu is no longer on the meta pages (%llu, %llu): the "
                       "database changed while it was opened",
                       name, (unsigned long long)txnid, (unsigned long long)t0,
                       (unsigned long long)t1);
        pick = t1 == txnid && t0 != txnid;
    }
    const uint8_t *meta = m[pick] + META_OFF;
    w.last_pg = ferry__load_le64(meta + 120);
    /* last_pg + 1 pages fit: compared without the + 1, which wraps at 2^64 - 1 */
    if (w.last_pg < 1 || w.last_pg >= size / w.psize) {
        char pages[24] = "18446744073709551616";
        if (w.last_pg != UINT64_MAX)
            snprintf(pages, sizeof pages, "%llu", (unsigned long long)w.last_pg + 1);
        FERRY_FAIL(FERRY_ECORRUPT,
                   "%s: the file is %llu bytes, but its meta page says it holds %s pages of %u "
                   "bytes (truncated?)",
                   name, (unsigned long long)size, pages, w.psize);
    }
    out->txnid = pick ? t1 : t0;
    out->last_pg = w.last_pg;
    out->psize = w.psize;
    /* The bitmap is bounded by the file's real length (checked just above). */
    if (!(w.seen = ferry__calloc((size_t)(w.last_pg >> 3) + 1, 1)) ||
        !(w.bufs = ferry__malloc((size_t)MAX_DEPTH * w.psize)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory to check %llu pages", name,
                   (unsigned long long)w.last_pg + 1);
    dbrec main = read_dbrec(meta + 24 + DB_RECORD);
    FERRY_TRY(check_tree(&w, &main));
    /* liblmdb keeps no named databases in a main database with these flags (and
     * says so): no record to follow there */
    if (db && w.found && !(main.flags & (MDB_DUPSORT | MDB_INTEGERKEY))) {
        w.dbname = db;
        FERRY_TRY(check_tree(&w, &w.sub));
    }
cleanup:
    ferry__free(w.seen);
    ferry__free(w.bufs);
    if (w.fd >= 0)
        close(w.fd);
    return rc;
}
