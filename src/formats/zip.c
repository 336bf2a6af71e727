/*
 * Zip central directory reader and member inflater (zlib). See zip.h.
 */
#include "zip.h"
#include "../core/bytes.h"

#include <string.h>
#include <zlib.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u

#define ZFAIL(off, fmt, ...)                                                                       \
    do {                                                                                           \
        rc = ferry__err(FERRY_ECORRUPT, "%s: offset %llu: " fmt, name, (unsigned long long)(off),  \
                        ##__VA_ARGS__);                                                            \
        goto cleanup;                                                                              \
    } while (0)

int ferry__zip_read(const uint8_t *p, size_t n, const char *name, size_t max_members,
                    ferry__zip_member **out, size_t *count)
{
    int rc = 0;
    ferry__zip_member *m = NULL;
    *out = NULL;
    *count = 0;
    if (n < 22)
        return ferry__err(FERRY_ECORRUPT, "%s: offset 0: %zu bytes is too short for a zip archive",
                          name, n);
    /* the end record: 22 bytes and a comment of up to 65535 */
    size_t eocd = SIZE_MAX;
    size_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
    for (size_t i = n - 22 + 1; i-- > lowest;) {
        if (ferry__load_le32(p + i) == SIG_EOCD && i + 22 + ferry__load_le16(p + i + 20) == n) {
            eocd = i;
            break;
        }
    }
    if (eocd == SIZE_MAX)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset %zu: no zip end-of-central-directory record (not a zip "
                          "archive, or cut short)",
                          name, n);
    uint64_t entries = ferry__load_le16(p + eocd + 10), cd_size = ferry__load_le32(p + eocd + 12),
             cd_off = ferry__load_le32(p + eocd + 16);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        if (eocd < 20 || ferry__load_le32(p + eocd - 20) != SIG_LOC64)
            ZFAIL(eocd, "zip64 sizes without a zip64 locator");
        uint64_t r = ferry__load_le64(p + eocd - 20 + 8);
        if (r > n - 56 || n < 56 || ferry__load_le32(p + r) != SIG_EOCD64)
            ZFAIL(eocd - 20, "the zip64 end record it points to (offset %llu) is not there",
                  (unsigned long long)r);
        entries = ferry__load_le64(p + r + 32);
        cd_size = ferry__load_le64(p + r + 40);
        cd_off = ferry__load_le64(p + r + 48);
    }
    if (cd_off > n || cd_size > n - cd_off)
        ZFAIL(eocd, "the central directory (offset %llu, %llu bytes) lies past the end",
              (unsigned long long)cd_off, (unsigned long long)cd_size);
    if (entries > max_members)
        ZFAIL(eocd, "%llu members, over the limit of %zu", (unsigned long long)entries,
              max_members);
    if (entries > cd_size / 46)
        ZFAIL(eocd, "%llu members cannot fit in a %llu-byte directory", (unsigned long long)entries,
              (unsigned long long)cd_size);
    m = ferry__calloc(entries ? (size_t)entries : 1, sizeof *m);
    if (!m)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory for %llu zip members", name,
                          (unsigned long long)entries);
    uint64_t at = cd_off, end = cd_off + cd_size;
    for (uint64_t k = 0; k < entries; k++) {
        ferry__zip_member *e = &m[k];
        if (end - at < 46 || ferry__load_le32(p + at) != SIG_CENTRAL)
            ZFAIL(at, "central directory entry %llu is not there", (unsigned long long)k);
        const uint8_t *c = p + at;
        uint16_t flags = ferry__load_le16(c + 8), nlen = ferry__load_le16(c + 28),
                 xlen = ferry__load_le16(c + 30), clen = ferry__load_le16(c + 32);
        e->method = ferry__load_le16(c + 10);
        e->crc = ferry__load_le32(c + 16);
        e->csize = ferry__load_le32(c + 20);
        e->usize = ferry__load_le32(c + 24);
        e->header_off = ferry__load_le32(c + 42);
        if ((uint64_t)46 + nlen + xlen + clen > end - at)
            ZFAIL(at, "central directory entry %llu runs past the directory",
                  (unsigned long long)k);
        if (flags & 1)
            ZFAIL(at, "member %llu is encrypted", (unsigned long long)k);
        if (nlen > FERRY__ZIP_MAX_NAME)
            ZFAIL(at, "member %llu's name is %u bytes, over %d", (unsigned long long)k, nlen,
                  FERRY__ZIP_MAX_NAME);
        memcpy(e->name, c + 46, nlen);
        e->name[nlen] = 0;
        if (memchr(e->name, 0, nlen))
            ZFAIL(at + 46, "member %llu's name holds a NUL byte", (unsigned long long)k);
        /* zip64: the extra field holds the sizes and offset set to all ones */
        const uint8_t *x = c + 46 + nlen, *xend = x + xlen;
        while (xend - x >= 4) {
            uint16_t id = ferry__load_le16(x), len = ferry__load_le16(x + 2);
            if (len > xend - x - 4)
                ZFAIL((uint64_t)(x - p), "member \"%s\": an extra field runs past its entry",
                      e->name);
            if (id == 1) {
                const uint8_t *v = x + 4, *vend = v + len;
                uint64_t *vals[3] = {&e->usize, &e->csize, &e->header_off};
                uint32_t lim[3] = {ferry__load_le32(c + 24), ferry__load_le32(c + 20),
                                   ferry__load_le32(c + 42)};
                for (int j = 0; j < 3; j++) {
                    if (lim[j] != 0xFFFFFFFFu)
                        continue;
                    if (vend - v < 8)
                        ZFAIL((uint64_t)(x - p), "member \"%s\": zip64 extra field too short",
                              e->name);
                    *vals[j] = ferry__load_le64(v);
                    v += 8;
                }
            }
            x += 4 + len;
        }
        if (e->method != FERRY__ZIP_STORED && e->method != FERRY__ZIP_DEFLATED)
            ZFAIL(at, "member \"%s\": compression method %u (only stored and deflated are read)",
                  e->name, e->method);
        if (e->method == FERRY__ZIP_STORED && e->csize != e->usize)
            ZFAIL(at, "member \"%s\" is stored, but its sizes disagree (%llu compressed, %llu not)",
                  e->name, (unsigned long long)e->csize, (unsigned long long)e->usize);
        /* the local header: its name must match; its own lengths place the data */
        uint64_t h = e->header_off;
        if (h > cd_off || cd_off - h < 30 || ferry__load_le32(p + h) != SIG_LOCAL)
            ZFAIL(h, "member \"%s\": no local header where the directory says", e->name);
        uint16_t lnlen = ferry__load_le16(p + h + 26), lxlen = ferry__load_le16(p + h + 28);
        if (lnlen != nlen || (uint64_t)30 + lnlen > cd_off - h ||
            memcmp(p + h + 30, e->name, nlen) != 0)
            ZFAIL(h, "member \"%s\": the local header names another member", e->name);
        e->data_off = h + 30 + lnlen + lxlen;
        if (e->data_off > cd_off || e->csize > cd_off - e->data_off)
            ZFAIL(e->data_off,
                  "member \"%s\": its %llu bytes run past the start of the directory (offset "
                  "%llu)",
                  e->name, (unsigned long long)e->csize, (unsigned long long)cd_off);
        at += 46 + (uint64_t)nlen + xlen + clen;
    }
    *out = m;
    *count = (size_t)entries;
    return 0;
cleanup:
    ferry__free(m);
    return rc;
}

int ferry__zip_check_crc(const uint8_t *p, const char *name, const ferry__zip_member *m)
{
    uLong crc = crc32(0, Z_NULL, 0);
    uint64_t left = m->csize;
    const uint8_t *q = p + m->data_off;
    while (left) {
        uInt k = left > (1u << 30) ? (1u << 30) : (uInt)left;
        crc = crc32(crc, q, k);
        q += k;
        left -= k;
    }
    if ((uint32_t)crc != m->crc)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: member \"%s\" at offset %llu: CRC-32 %08x, the "
                          "directory says %08x",
                          name, m->name, (unsigned long long)m->data_off, (unsigned)crc, m->crc);
    return 0;
}

int ferry__zip_inflate(const uint8_t *p, size_t n, const char *name, const ferry__zip_member *m,
                       void *dst)
{
    (void)n;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
        return ferry__err(FERRY_ENOMEM, "%s: member \"%s\": cannot start zlib", name, m->name);
    const uint8_t *in = p + m->data_off;
    uint64_t in_left = m->csize, out_left = m->usize;
    uint8_t *out = dst;
    int zr = Z_OK, rc = 0;
    uLong crc = crc32(0, Z_NULL, 0);
    while (zr != Z_STREAM_END) {
        if (z.avail_in == 0 && in_left) {
            z.next_in = (Bytef *)in;
            z.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            in += z.avail_in;
            in_left -= z.avail_in;
        }
        uint8_t spare[1];
        Bytef *before = out;
        if (out_left) {
            z.next_out = out;
            z.avail_out = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
        } else {
            /* the directory's size is used up: one more byte means it lied */
            z.next_out = spare;
            z.avail_out = 1;
        }
        zr = inflate(&z, Z_NO_FLUSH);
        if (out_left) {
            size_t made = (size_t)(z.next_out - before);
            crc = crc32(crc, before, (uInt)made);
            out += made;
            out_left -= made;
        } else if (z.next_out != spare) {
            rc = ferry__err(FERRY_ECORRUPT,
                            "%s: member \"%s\" at offset %llu: inflates to more than the %llu "
                            "bytes the directory says",
                            name, m->name, (unsigned long long)m->data_off,
                            (unsigned long long)m->usize);
            goto done;
        }
        if (zr == Z_STREAM_END)
            break;
        if (zr != Z_OK && !(zr == Z_BUF_ERROR && (z.avail_in || in_left))) {
            rc = ferry__err(FERRY_ECORRUPT, "%s: member \"%s\" at offset %llu: deflate data: %s",
                            name, m->name, (unsigned long long)m->data_off,
                            z.msg               ? z.msg
                            : zr == Z_BUF_ERROR ? "cut short"
                                                : "corrupt");
            goto done;
        }
        if (z.avail_in == 0 && in_left == 0 && zr == Z_BUF_ERROR) {
            rc = ferry__err(FERRY_ECORRUPT,
                            "%s: member \"%s\" at offset %llu: the deflate stream is cut short",
                            name, m->name, (unsigned long long)m->data_off);
            goto done;
        }
    }
    if (out_left)
        rc = ferry__err(FERRY_ECORRUPT,
                        "%s: member \"%s\" at offset %llu: inflates to %llu bytes, the directory "
                        "says %llu",
                        name, m->name, (unsigned long long)m->data_off,
                        (unsigned long long)(m->usize - out_left), (unsigned long long)m->usize);
    else if ((uint32_t)crc != m->crc)
        rc = ferry__err(FERRY_ECORRUPT,
                        "%s: member \"%s\" at offset %llu: CRC-32 %08x, the directory says %08x",
                        name, m->name, (unsigned long long)m->data_off, (unsigned)crc, m->crc);
done:
    inflateEnd(&z);
    return rc;
}
