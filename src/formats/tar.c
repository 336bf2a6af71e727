/*
 * tar archives, read in order.
 */
#include "tar.h"

#include <string.h>

#define BLOCK 512
#define WINDOW ((size_t)1 << 20)

/* An octal field (spaces and NULs around it allowed), or GNU base-256. */
static int number(const uint8_t *p, size_t n, uint64_t *out, const char *what)
{
    uint64_t v = 0;
    if (p[0] & 0x80) {
        if (p[0] != 0x80)
            return ferry__err(FERRY_ECORRUPT, "negative or oversized base-256 %s", what);
        for (size_t i = 1; i < n; i++) {
            if (v >> 55)
                return ferry__err(FERRY_ECORRUPT, "base-256 %s over 2^63", what);
            v = (v << 8) | p[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && p[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return ferry__err(FERRY_ECORRUPT, "octal %s over 2^63", what);
        v = (v << 3) | (uint64_t)(p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != 0)
            return ferry__err(FERRY_ECORRUPT, "%s field is not an octal number", what);
    if (!digits && strcmp(what, "checksum") == 0)
        return ferry__err(FERRY_ECORRUPT, "empty %s field", what);
    *out = v;
    return 0;
}

int ferry__tar_header(const uint8_t *h, char *type, uint64_t *size, char *name, size_t *name_len)
{
    bool zero = true;
    for (int i = 0; i < BLOCK && zero; i++)
        zero = h[i] == 0;
    if (zero)
        return 0;
    uint64_t stored = 0;
    int rc = number(h + 148, 8, &stored, "checksum");
    if (rc < 0)
        return rc;
    uint64_t sum = 0;
    int64_t ssum = 0;
    for (int i = 0; i < BLOCK; i++) {
        uint8_t b = i >= 148 && i < 156 ? ' ' : h[i];
        sum += b;
        ssum += (int8_t)b;
    }
    if (stored != sum && (int64_t)stored != ssum)
        return ferry__err(FERRY_ECORRUPT, "bad header checksum (stored %llo, computed %llo)",
                          (unsigned long long)stored, (unsigned long long)sum);
    if ((rc = number(h + 124, 12, size, "size")) < 0)
        return rc;
    *type = (char)h[156];
    size_t n = strnlen((const char *)h, 100), pre = 0;
    /* POSIX ustar keeps a prefix; GNU ("ustar  ") uses those bytes otherwise */
    if (!memcmp(h + 257, "ustar\0", 6))
        pre = strnlen((const char *)h + 345, 155);
    if (pre) {
        memcpy(name, h + 345, pre);
        name[pre] = '/';
        memcpy(name + pre + 1, h, n);
        *name_len = pre + 1 + n;
    } else {
        memcpy(name, h, n);
        *name_len = n;
    }
    name[*name_len] = 0;
    return 1;
}

int ferry__tar_open(ferry__tar *t, const char *path, const char *name, int compression,
                    uint64_t max_data, size_t window)
{
    memset(t, 0, sizeof *t);
    t->max_data = max_data;
    return ferry__seqread_open(&t->r, path, name, compression, window ? window : WINDOW);
}

void ferry__tar_close(ferry__tar *t)
{
    ferry__seqread_close(&t->r);
}

#define AT t->r.name, (unsigned long long)hno, (unsigned long long)hoff

/* "LEN key=value\n" records: path and size are applied. */
static int pax(ferry__tar *t, const uint8_t *p, size_t n, uint64_t hno, uint64_t hoff)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9' && len < n)
            len = len * 10 + (size_t)(p[j++] - '0');
        if (j == i || j >= n || p[j] != ' ' || len < j - i + 3 || len > n - i ||
            p[i + len - 1] != '\n')
            return ferry__err(FERRY_ECORRUPT,
                              "%s: header %llu at offset %llu: bad pax record at byte %zu", AT, i);
        const uint8_t *kv = p + j + 1, *end = p + i + len - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: header %llu at offset %llu: pax record without '='", AT);
        size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
        if (kl == 4 && !memcmp(kv, "path", 4)) {
            if (vl > FERRY__TAR_MAX_NAME || memchr(eq + 1, 0, vl))
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: header %llu at offset %llu: a pax path of %zu bytes (limit "
                                  "%d)",
                                  AT, vl, FERRY__TAR_MAX_NAME);
            memcpy(t->longname, eq + 1, vl);
            t->longname[vl] = 0;
            t->have_long = true;
        } else if (kl == 4 && !memcmp(kv, "size", 4)) {
            uint64_t v = 0;
            if (vl == 0 || vl > 19)
                return ferry__err(FERRY_ECORRUPT, "%s: header %llu at offset %llu: bad pax size",
                                  AT);
            for (size_t k = 0; k < vl; k++) {
                uint8_t c = eq[1 + k];
                if (c < '0' || c > '9')
                    return ferry__err(FERRY_ECORRUPT,
                                      "%s: header %llu at offset %llu: bad pax size", AT);
                v = v * 10 + (c - '0');
            }
            t->pax_size = v;
            t->have_pax_size = true;
        }
        i += len;
    }
    return 0;
}

int ferry__tar_next(ferry__tar *t, ferry__tar_member *m)
{
    int rc;
    uint64_t skipped;
    size_t got;
    uint64_t first_hoff = UINT64_MAX, first_hno = 0;
    for (;;) {
        if (t->pending) {
            if ((rc = ferry__seqread_skip(&t->r, t->pending, &skipped)) < 0)
                return rc;
            if (skipped < t->pending)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: member %s: its data runs past the end of the archive",
                                  t->r.name, t->name);
            t->pending = 0;
        }
        uint64_t hoff = t->r.off, hno = t->headers;
        if (first_hoff == UINT64_MAX) {
            first_hoff = hoff;
            first_hno = hno;
        }
        if ((rc = ferry__seqread_need(&t->r, BLOCK, &got)) < 0)
            return rc;
        if (got == 0 && !t->have_long && !t->have_pax_size)
            return FERRY_END; /* no end-of-archive blocks: accepted, as GNU tar does */
        if (got < BLOCK)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: header %llu at offset %llu: the archive ends inside a header "
                              "or after a long name with no member",
                              AT);
        char type;
        uint64_t size;
        size_t nlen;
        rc = ferry__tar_header(t->r.buf + t->r.pos, &type, &size, t->name, &nlen);
        if (rc < 0)
            return ferry__err_prefix(rc, "%s: header %llu at offset %llu", AT);
        int member = rc;
        if ((rc = ferry__seqread_skip(&t->r, BLOCK, &skipped)) < 0)
            return rc;
        if (member == 0) {
            /* a zero block: the end of the archive */
            if (t->have_long)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: header %llu at offset %llu: a long name with no member "
                                  "after it",
                                  AT);
            return FERRY_END;
        }
        t->headers++;
        uint64_t padded = (size + BLOCK - 1) / BLOCK * BLOCK;
        if (size > ((uint64_t)1 << 62))
            return ferry__err(FERRY_ECORRUPT, "%s: header %llu at offset %llu: size %llu", AT,
                              (unsigned long long)size);
        if (!t->r.compressed && hoff + BLOCK + size > t->r.size)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: header %llu at offset %llu (%s): a size of %llu bytes runs past "
                              "the end of the file (%llu bytes)",
                              AT, t->name, (unsigned long long)size, (unsigned long long)t->r.size);
        if (type == 'L' || type == 'x' || type == 'K' || type == 'g') {
            size_t limit = type == 'L' ? FERRY__TAR_MAX_NAME : FERRY__TAR_MAX_PAX;
            if (size > limit)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: header %llu at offset %llu: a %s of %llu bytes (limit "
                                  "%zu): a name that never ends?",
                                  AT, type == 'L' ? "GNU long name" : "pax or long-link header",
                                  (unsigned long long)size, limit);
            if ((rc = ferry__seqread_need(&t->r, (size_t)padded, &got)) < 0)
                return rc;
            if (got < padded)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: header %llu at offset %llu: the archive ends inside a long "
                                  "name or pax header",
                                  AT);
            const uint8_t *d = t->r.buf + t->r.pos;
            if (type == 'L') {
                size_t l = strnlen((const char *)d, (size_t)size);
                memcpy(t->longname, d, l);
                t->longname[l] = 0;
                t->have_long = true;
            } else if (type == 'x' && (rc = pax(t, d, (size_t)size, hno, hoff)) < 0) {
                return rc;
            }
            t->pending = padded;
            continue;
        }
        if (type == '5') { /* a directory */
            t->have_long = t->have_pax_size = false;
            t->pending = padded;
            first_hoff = UINT64_MAX;
            continue;
        }
        if (type != '0' && type != 0 && type != '7')
            return ferry__err(FERRY_ENOTSUP,
                              "%s: header %llu at offset %llu (%s): type '%c' (a link, device or "
                              "sparse file) is not a WebDataset member",
                              AT, t->name, type >= 32 && type < 127 ? type : '?');
        if (t->have_long)
            memcpy(t->name, t->longname, strlen(t->longname) + 1);
        if (t->have_pax_size) {
            size = t->pax_size;
            padded = (size + BLOCK - 1) / BLOCK * BLOCK;
            if (!t->r.compressed && hoff + BLOCK + size > t->r.size)
                return ferry__err(FERRY_ECORRUPT,
                                  "%s: header %llu at offset %llu (%s): a pax size of %llu bytes "
                                  "runs past the end of the file",
                                  AT, t->name, (unsigned long long)size);
        }
        t->have_long = t->have_pax_size = false;
        t->cur.name = t->name;
        t->cur.name_len = strlen(t->name);
        t->cur.size = size;
        t->cur.header_off = first_hoff;
        t->cur.data_off = hoff + BLOCK;
        t->cur.index = hno;
        t->cur.first_index = first_hno;
        t->pending = padded;
        *m = t->cur;
        return 0;
    }
}

int ferry__tar_data(ferry__tar *t, const uint8_t **p)
{
    size_t got;
    int rc;
    if (t->cur.size > t->max_data)
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: member %s at offset %llu: %llu bytes, over the limit of %llu",
                          t->r.name, t->cur.name, (unsigned long long)t->cur.header_off,
                          (unsigned long long)t->cur.size, (unsigned long long)t->max_data);
    if ((rc = ferry__seqread_need(&t->r, (size_t)t->cur.size, &got)) < 0)
        return rc;
    if (got < t->cur.size)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: member %s at offset %llu: %llu bytes announced, the archive ends "
                          "after %zu",
                          t->r.name, t->cur.name, (unsigned long long)t->cur.header_off,
                          (unsigned long long)t->cur.size, got);
    *p = t->r.buf + t->r.pos;
    return 0;
}

int ferry__tar_check_copy(const char *path, const char *url)
{
    ferry__tar t;
    ferry__tar_member m;
    int rc = ferry__tar_open(&t, path, url, FERRY__COMP_AUTO, 0, 64 << 10);
    if (rc < 0)
        return rc;
    if (!t.r.compressed)
        while ((rc = ferry__tar_next(&t, &m)) == 0)
            ;
    ferry__tar_close(&t);
    return rc == FERRY_END ? 0 : rc;
}
