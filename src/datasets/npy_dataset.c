/*
 * The npy dataset: rows of .npy arrays (and .npz members) along the first axis.
 * Files are mapped at open (a remote .npy file when first read whole, its rows
 * read by ranged GETs until then); deflated .npz members are inflated once into
 * memory within a bound. get copies a row from the mapping into the batch slot: one
 * memcpy for a C-order plain array, else element by element (structured members,
 * Fortran order), then converts big-endian data in place.
 */
#include "spec.h"
#include "ferry/npy.h"
#include "../core/bytes.h"
#include "../core/guard.h"
#include "../formats/zip.h"
#include "../io/io.h"
#include "../io/remote.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define DEFAULT_INFLATE_MAX ((uint64_t)1 << 30)
#define MAX_ARRAYS FERRY_MAX_FIELDS
#define FAR_HINT_MIN ((size_t)64 << 10)

typedef struct npy_array {
    char label[512];     /* "a.npy" or "b.npz/x.npy", for messages */
    const uint8_t *data; /* the array's first byte (in a mapping or in `owned`) */
    uint8_t *owned;      /* an inflated member */
    /* a remote .npy file: mapped when first read whole (data is then NULL; its bytes
     * start at data_offset in the file), else its rows read by ranged GETs */
    ferry__lazy *lz;
    ferry_npy_header h;
    uint64_t rows;
    uint64_t row_items; /* elements in one row */
    size_t row_bytes;
} npy_array;

typedef struct npy_col {
    int arr, member;
    bool fast; /* C order, one plain member, host byte order: one memcpy a row */
} npy_col;

typedef struct npy_ds {
    int nmaps;
    ferry__map maps[MAX_ARRAYS];
    char *files[MAX_ARRAYS]; /* each map's file */
    int narrays;
    npy_array arr[MAX_ARRAYS];
    int ncols;
    npy_col col[FERRY_MAX_FIELDS];
    uint64_t len;
} npy_ds;

static uint64_t npy_len(void *self)
{
    return ((npy_ds *)self)->len;
}

static void swap_units(uint8_t *p, size_t n, unsigned unit)
{
    if (unit == 2) {
        for (size_t i = 0; i + 2 <= n; i += 2) {
            uint16_t v;
            memcpy(&v, p + i, 2);
            v = __builtin_bswap16(v);
            memcpy(p + i, &v, 2);
        }
    } else if (unit == 4) {
        for (size_t i = 0; i + 4 <= n; i += 4) {
            uint32_t v;
            memcpy(&v, p + i, 4);
            v = __builtin_bswap32(v);
            memcpy(p + i, &v, 4);
        }
    } else if (unit == 8) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
            uint64_t v;
            memcpy(&v, p + i, 8);
            v = __builtin_bswap64(v);
            memcpy(p + i, &v, 8);
        }
    }
}

/* A remote array's data: its mapping's, once mapped. A fast column's row of an
 * array not wanted whole is read into dst by a ranged GET instead (*done). */
static int lazy_data(const npy_array *a, const npy_col *col, uint64_t i, uint8_t *dst,
                     const uint8_t **data, bool *done)
{
    const uint8_t *base = atomic_load_explicit(&a->lz->data, memory_order_acquire), *p;
    uint64_t off = a->h.data_offset;
    *done = false;
    if (!base && col->fast) {
        int rc = ferry__lazy_read(a->lz, dst, off + i * a->row_bytes, a->row_bytes, &p);
        if (rc < 0)
            return rc;
        if (p != dst)
            memcpy(dst, p, a->row_bytes);
        *done = true;
        return 0;
    }
    if (!base) {
        int rc = ferry__lazy_map(a->lz, &base);
        if (rc < 0)
            return rc;
    }
    *data = base + off;
    return 0;
}

static int npy_read(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    const npy_ds *d = self;
    (void)ctx;
    for (int c = 0; c < d->ncols; c++) {
        const npy_col *col = &d->col[c];
        const npy_array *a = &d->arr[col->arr];
        const ferry_npy_member *m = &a->h.members[col->member];
        uint8_t *dst = out->data[c];
        const uint8_t *data = a->data;
        if (a->lz) {
            bool done;
            int rc = lazy_data(a, col, i, dst, &data, &done);
            if (rc < 0)
                return rc;
            if (done)
                continue;
        }
        if (col->fast) {
            memcpy(dst, data + i * a->row_bytes, a->row_bytes);
            continue;
        }
        size_t item = a->h.itemsize;
        if (!a->h.fortran || a->h.ndim < 2) {
            const uint8_t *src = data + i * a->row_bytes + m->offset;
            for (uint64_t r = 0; r < a->row_items; r++)
                memcpy(dst + r * m->nbytes, src + r * item, m->nbytes);
        } else {
            /* Fortran order: element (i, j1, .., jk) is at i + j1*s0 + j2*s0*s1 + ...;
             * walk the row's C-order positions with an odometer */
            int64_t idx[FERRY_MAX_DIMS] = {0};
            uint64_t stride[FERRY_MAX_DIMS];
            uint64_t s = (uint64_t)a->h.shape[0];
            for (int k = 1; k < a->h.ndim; k++) {
                stride[k] = s;
                s *= (uint64_t)a->h.shape[k];
            }
            uint64_t lin = i;
            for (uint64_t r = 0; r < a->row_items; r++) {
                memcpy(dst + r * m->nbytes, data + lin * item + m->offset, m->nbytes);
                for (int k = a->h.ndim - 1; k >= 1; k--) {
                    lin += stride[k];
                    if (++idx[k] < a->h.shape[k])
                        break;
                    lin -= stride[k] * (uint64_t)a->h.shape[k];
                    idx[k] = 0;
                }
            }
        }
        if (m->swap)
            swap_units(dst, m->nbytes * a->row_items, m->swap);
    }
    return 0;
}

/* The arrays are read from mappings: a file cut short under the reader is an
 * error naming it, not a SIGBUS. */
static int npy_fault(const ferry__reading *rd, uintptr_t addr)
{
    const npy_ds *d = rd->arg;
    for (int k = 0; k < d->nmaps; k++) {
        int rc =
            ferry__guard_map_err(addr, d->maps[k].data, d->maps[k].size, d->files[k], rd->item);
        if (rc <= 0)
            return rc;
    }
    for (int k = 0; k < d->narrays; k++) {
        const ferry__lazy *z = d->arr[k].lz;
        if (!z || !atomic_load_explicit(&z->data, memory_order_acquire))
            continue;
        int rc = ferry__guard_map_err(addr, z->map.data, z->map.size, z->path, rd->item);
        if (rc <= 0)
            return rc;
    }
    return ferry__guard_err(addr, NULL, NULL, "sample %llu", (unsigned long long)rd->item);
}

FERRY__GUARDED_GET(npy_get, npy_read, npy_fault)

/* soon: pull the rows' first lines into the cache; later batches (only for rows
 * of FAR_HINT_MIN bytes and more: smaller ones cost a system call each for no
 * gain, and the dataset then asks the loader for near hints only): ask the
 * kernel to read their pages (an array larger than memory). */
static void npy_hint(void *self, const uint64_t *indices, size_t count, int soon)
{
    const npy_ds *d = self;
    for (int c = 0; c < d->ncols; c++) {
        const npy_array *a = &d->arr[d->col[c].arr];
        const uint8_t *data = a->data;
        if (a->lz) { /* a loader reads it: fetched whole, ahead of the workers */
            if (!(data = atomic_load_explicit(&a->lz->data, memory_order_acquire))) {
                ferry__lazy_want(a->lz);
                continue;
            }
            data += a->h.data_offset;
        }
        if (!d->col[c].fast || a->owned)
            continue;
        for (size_t k = 0; k < count; k++) {
            if (indices[k] >= d->len)
                continue;
            const uint8_t *p = data + indices[k] * a->row_bytes;
            if (soon) {
                __builtin_prefetch(p);
                continue;
            }
            if (a->row_bytes < FAR_HINT_MIN)
                continue;
            uintptr_t addr = (uintptr_t)p, page = 4096;
            madvise((void *)(addr & ~(page - 1)), a->row_bytes + (addr & (page - 1)),
                    MADV_WILLNEED);
        }
    }
}

static void npy_destroy(void *self)
{
    npy_ds *d = self;
    if (!d)
        return;
    for (int k = 0; k < d->nmaps; k++) {
        ferry__unmap(&d->maps[k]);
        ferry__free(d->files[k]);
    }
    for (int k = 0; k < d->narrays; k++) {
        ferry__free(d->arr[k].owned);
        ferry__lazy_free(d->arr[k].lz);
        ferry__free(d->arr[k].lz);
    }
    ferry__free(d);
}

static const ferry_dataset_vtable npy_vtable = {
    .len = npy_len, .get = npy_get, .destroy = npy_destroy, .hint = npy_hint};

/* Rows along the first axis and a row's elements and bytes, from a's header. */
static void set_rows(npy_array *a)
{
    a->rows = a->h.ndim ? (uint64_t)a->h.shape[0] : 1;
    a->row_items = 1;
    for (int k = 1; k < a->h.ndim; k++)
        a->row_items *= (uint64_t)a->h.shape[k];
    a->row_bytes = (size_t)(a->row_items * a->h.itemsize);
}

/* Parses the array at p[0..n) (a .npy file or member) into a. */
static int take_array(npy_array *a, const uint8_t *p, size_t n)
{
    int rc = ferry_npy_parse_header(p, n, a->label, &a->h);
    if (rc < 0)
        return rc;
    uint64_t have = n - a->h.data_offset;
    if (have != a->h.data_bytes)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: offset %llu: the header's shape and dtype make %llu data bytes, "
                          "but the file has %llu after the header",
                          a->label, (unsigned long long)a->h.data_offset,
                          (unsigned long long)a->h.data_bytes, (unsigned long long)have);
    a->data = p + a->h.data_offset;
    set_rows(a);
    return 0;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* The stem of a path: "dir/feat.npy" -> "feat". */
static void stem(const char *path, char *buf, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    const char *dot = strrchr(b, '.');
    if (dot && dot != b)
        n = (size_t)(dot - b);
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, b, n);
    buf[n] = 0;
}

typedef struct opening {
    npy_ds *d;
    uint64_t inflate_left, inflate_max;
    char names[MAX_ARRAYS][FERRY_MAX_NAME]; /* the name of each array's field(s) */
    bool named[MAX_ARRAYS];
} opening;

static int add_array(opening *op, const char *label, const char *name, bool named, npy_array **out)
{
    npy_ds *d = op->d;
    if (d->narrays == MAX_ARRAYS)
        return ferry__err(FERRY_EINVAL, "npy: more than %d arrays", MAX_ARRAYS);
    npy_array *a = &d->arr[d->narrays];
    memset(a, 0, sizeof *a);
    snprintf(a->label, sizeof a->label, "%s", label);
    if (strlen(name) >= FERRY_MAX_NAME)
        return ferry__err(FERRY_EINVAL, "npy: field name \"%.64s...\" is over %d bytes", name,
                          FERRY_MAX_NAME - 1);
    snprintf(op->names[d->narrays], FERRY_MAX_NAME, "%s", name);
    op->named[d->narrays] = named;
    d->narrays++;
    *out = a;
    return 0;
}

#define REMOTE_HEAD 4096                  /* bytes of a remote .npy read for its header */
#define REMOTE_HEAD_MAX ((size_t)1 << 20) /* a header longer than this: fetched whole */

/* A remote .npy file: its size and header now (a ranged GET, or the cached
 * copy), its data when first read. *lazy false: it is not a plain .npy file (a
 * zip, a header over REMOTE_HEAD_MAX): the caller maps it whole. */
static int open_remote(opening *op, const char *file, const char *name, bool *lazy)
{
    uint64_t size;
    uint8_t *head = NULL;
    size_t n;
    int rc;
    *lazy = false;
    if (!(head = ferry__malloc(REMOTE_HEAD_MAX)))
        return ferry__err(FERRY_ENOMEM, "npy: out of memory");
    /* the size and the header by one request */
    if ((rc = ferry__remote_peek_first(file, head, REMOTE_HEAD, &n, &size)) < 0)
        goto done;
    if (n < 10 || memcmp(head, "\x93NUMPY", 6) != 0)
        goto done; /* not a .npy file: the ordinary path says what it is */
    /* version 1: a u16 header length at 8; 2 and 3: a u32 */
    uint64_t hlen = head[6] == 1 ? 10 + (uint64_t)(head[8] | head[9] << 8)
                    : n >= 12    ? 12 + (uint64_t)ferry__load_le32(head + 8)
                                 : 0;
    if (hlen > n && hlen <= REMOTE_HEAD_MAX && hlen <= size) {
        n = (size_t)hlen;
        if ((rc = ferry__remote_peek(file, head, 0, n)) < 0)
            goto done;
    } else if (hlen > n) {
        goto done;
    }
    char nm[FERRY_MAX_NAME];
    if (name)
        snprintf(nm, sizeof nm, "%s", name);
    else
        stem(file, nm, sizeof nm);
    npy_array *a;
    if ((rc = add_array(op, file, nm, name != NULL, &a)) < 0 ||
        (rc = ferry_npy_parse_header(head, n, a->label, &a->h)) < 0)
        goto done;
    if (size - a->h.data_offset != a->h.data_bytes) {
        rc = ferry__err(FERRY_ECORRUPT,
                        "%s: offset %llu: the header's shape and dtype make %llu data bytes, "
                        "but the file has %llu after the header",
                        a->label, (unsigned long long)a->h.data_offset,
                        (unsigned long long)a->h.data_bytes,
                        (unsigned long long)(size - a->h.data_offset));
        goto done;
    }
    if (!(a->lz = ferry__calloc(1, sizeof *a->lz)) || (rc = ferry__lazy_init(a->lz, file)) < 0) {
        ferry__free(a->lz);
        a->lz = NULL;
        rc = ferry__err(FERRY_ENOMEM, "npy: out of memory");
        goto done;
    }
    set_rows(a);
    *lazy = true;
done:
    ferry__free(head);
    return rc;
}

/* Opens one path: a .npy file, ARCHIVE.npz (every member) or ARCHIVE.npz/MEMBER. */
static int open_path(opening *op, const char *path, const char *name)
{
    npy_ds *d = op->d;
    char file[4096], member[FERRY__ZIP_MAX_NAME + 1] = "";
    int rc = 0;
    const char *npz = strstr(path, ".npz/");
    size_t flen = npz ? (size_t)(npz - path) + 4 : strlen(path);
    if (flen >= sizeof file)
        return ferry__err(FERRY_EINVAL, "npy: path \"%.64s...\" is too long", path);
    memcpy(file, path, flen);
    file[flen] = 0;
    if (npz) {
        const char *mem = npz + 5;
        if (!*mem || strlen(mem) + 4 > FERRY__ZIP_MAX_NAME)
            return ferry__err(FERRY_EINVAL, "npy: \"%s\": bad member name after .npz/", path);
        snprintf(member, sizeof member, "%s%s", mem,
                 ends_with(mem, strlen(mem), ".npy") ? "" : ".npy");
    }
    if (!npz && ferry__is_remote(file) && !ends_with(file, flen, ".npz")) {
        bool lazy;
        if ((rc = open_remote(op, file, name, &lazy)) < 0 || lazy)
            return rc;
    }
    if (d->nmaps == MAX_ARRAYS)
        return ferry__err(FERRY_EINVAL, "npy: more than %d files", MAX_ARRAYS);
    ferry__map *map = &d->maps[d->nmaps];
    if ((rc = ferry__map_file(map, file)) < 0)
        return rc;
    d->files[d->nmaps++] = ferry__strdup(file);
    if (!d->files[d->nmaps - 1])
        return ferry__err(FERRY_ENOMEM, "npy: out of memory");
    if ((rc = ferry__guard_install()) < 0)
        return rc;
    const uint8_t *p = map->data;
    size_t n = map->size;
    bool is_zip = n >= 4 && p[0] == 'P' && p[1] == 'K' && p[2] == 3 && p[3] == 4;
    if (!is_zip && n >= 22 && !memcmp(p, "PK\x05\x06", 4))
        is_zip = true; /* an empty archive */
    if (!is_zip) {
        if (npz)
            return ferry__err(FERRY_ECORRUPT, "%s: offset 0: not a zip archive (.npz)", file);
        char nm[FERRY_MAX_NAME];
        if (name)
            snprintf(nm, sizeof nm, "%s", name);
        else
            stem(file, nm, sizeof nm);
        npy_array *a;
        if ((rc = add_array(op, file, nm, name != NULL, &a)) < 0)
            return rc;
        return take_array(a, p, n);
    }
    ferry__zip_member *mem = NULL;
    size_t count = 0;
    if ((rc = ferry__zip_read(p, n, file, FERRY__ZIP_MAX_MEMBERS, &mem, &count)) < 0)
        return rc;
    int taken = 0;
    for (size_t k = 0; k < count; k++) {
        ferry__zip_member *e = &mem[k];
        size_t elen = strlen(e->name);
        if (npz ? strcmp(e->name, member) != 0 : !ends_with(e->name, elen, ".npy"))
            continue;
        char label[512], nm[FERRY_MAX_NAME];
        snprintf(label, sizeof label, "%s/%s", file, e->name);
        if (name && npz)
            snprintf(nm, sizeof nm, "%s", name);
        else if (name)
            snprintf(nm, sizeof nm, "%s.%.*s", name, (int)(elen - 4), e->name);
        else
            snprintf(nm, sizeof nm, "%.*s", (int)(elen - 4), e->name);
        npy_array *a;
        if ((rc = add_array(op, label, nm, true, &a)) < 0)
            goto done;
        taken++;
        if (e->method == FERRY__ZIP_STORED) {
            rc = take_array(a, p + e->data_off, (size_t)e->csize);
        } else {
            if (e->usize > op->inflate_left) {
                rc = ferry__err(FERRY_EOVERFLOW,
                                "%s: member \"%s\" is deflated and inflates to %llu bytes: over "
                                "what is left of the %llu-byte inflate bound (inflate_max=): "
                                "store it uncompressed (np.savez) to have it mapped",
                                file, e->name, (unsigned long long)e->usize,
                                (unsigned long long)op->inflate_max);
                goto done;
            }
            a->owned = ferry__malloc(e->usize ? (size_t)e->usize : 1);
            if (!a->owned) {
                rc = ferry__err(FERRY_ENOMEM, "%s: member \"%s\": out of memory for %llu bytes",
                                file, e->name, (unsigned long long)e->usize);
                goto done;
            }
            op->inflate_left -= e->usize;
            if ((rc = ferry__zip_inflate(p, n, file, e, a->owned)) < 0)
                goto done;
            rc = take_array(a, a->owned, (size_t)e->usize);
        }
        if (rc < 0)
            goto done;
    }
    if (!taken)
        rc = npz ? ferry__err(FERRY_ENOENT, "%s: no member \"%s\"", file, member)
                 : ferry__err(FERRY_ENOENT, "%s: no .npy members", file);
done:
    ferry__free(mem);
    return rc;
}

int ferry_dataset_npy(ferry_dataset **out, const ferry_npy_opts *o)
{
    int rc = 0;
    *out = NULL;
    if (!o || !o->paths || o->npaths < 1 || o->npaths > MAX_ARRAYS)
        return ferry__err(FERRY_EINVAL, "npy: 1 to %d paths are needed", MAX_ARRAYS);
    opening *op = ferry__calloc(1, sizeof *op);
    npy_ds *d = ferry__calloc(1, sizeof *d);
    ferry_field *f = ferry__calloc(FERRY_MAX_FIELDS, sizeof *f);
    if (!op || !d || !f) {
        ferry__free(op);
        ferry__free(f);
        npy_destroy(d);
        return ferry__err(FERRY_ENOMEM, "npy: out of memory");
    }
    op->d = d;
    op->inflate_max = op->inflate_left = o->inflate_max ? o->inflate_max : DEFAULT_INFLATE_MAX;
    for (int k = 0; k < o->npaths; k++) {
        const char *name = o->names ? o->names[k] : NULL;
        if (!o->paths[k] || !*o->paths[k])
            FERRY_FAIL(FERRY_EINVAL, "npy: path %d is empty", k);
        if (name && !*name)
            FERRY_FAIL(FERRY_EINVAL, "npy: the name of path %d is empty", k);
        FERRY_TRY(open_path(op, o->paths[k], name));
    }
    uint64_t remote_bytes = 0;
    int nremote = 0;
    for (int k = 0; k < d->narrays; k++)
        if (d->arr[k].lz) {
            remote_bytes += d->arr[k].h.data_offset + d->arr[k].h.data_bytes;
            nremote++;
        }
    if (nremote && (rc = ferry__remote_fits("npy", (size_t)nremote, remote_bytes)) < 0)
        goto cleanup;
    /* one plain array with no name given: its field is "data" */
    bool single = d->narrays == 1;
    for (int k = 0; k < d->narrays; k++) {
        npy_array *a = &d->arr[k];
        if (a->rows != d->arr[0].rows)
            FERRY_FAIL(FERRY_EINVAL,
                       "npy: %s has %llu rows along its first axis, but %s has %llu: the "
                       "arrays of one sample must agree",
                       a->label, (unsigned long long)a->rows, d->arr[0].label,
                       (unsigned long long)d->arr[0].rows);
        for (int m = 0; m < a->h.nmembers; m++) {
            const ferry_npy_member *mb = &a->h.members[m];
            if (d->ncols == FERRY_MAX_FIELDS)
                FERRY_FAIL(FERRY_EINVAL, "npy: more than %d fields", FERRY_MAX_FIELDS);
            ferry_field *x = &f[d->ncols];
            int rowdims = a->h.ndim > 0 ? a->h.ndim - 1 : 0;
            if (rowdims + mb->ndim > FERRY_MAX_DIMS - 1)
                FERRY_FAIL(FERRY_EINVAL, "%s: a row has %d dimensions, over ferry's %d", a->label,
                           rowdims + mb->ndim, FERRY_MAX_DIMS - 1);
            const char *base = single && !op->named[k] ? "data" : op->names[k];
            int w;
            if (!a->h.structured)
                w = snprintf(x->name, sizeof x->name, "%s", base);
            else if (single && !op->named[k])
                w = snprintf(x->name, sizeof x->name, "%s", mb->name);
            else
                w = snprintf(x->name, sizeof x->name, "%s.%s", base, mb->name);
            if (w < 0 || w >= (int)sizeof x->name)
                FERRY_FAIL(FERRY_EINVAL, "%s: field name \"%s.%s\" is over %d bytes", a->label,
                           base, mb->name, FERRY_MAX_NAME - 1);
            x->dtype = mb->dtype;
            x->ndim = rowdims + mb->ndim;
            for (int j = 0; j < rowdims; j++)
                x->shape[j] = a->h.shape[j + 1];
            for (int j = 0; j < mb->ndim; j++)
                x->shape[rowdims + j] = mb->shape[j];
            if ((rc = ferry__check_fields(x, 1)) < 0) {
                ferry__err_prefix(rc, "%s", a->label);
                goto cleanup;
            }
            npy_col *c = &d->col[d->ncols++];
            c->arr = k;
            c->member = m;
            c->fast = !a->h.structured && !mb->swap && (!a->h.fortran || a->h.ndim < 2);
        }
    }
    d->len = d->arr[0].rows;
    ferry__free(op);
    op = NULL;
    bool far = false, lazy = false;
    for (int c = 0; c < d->ncols; c++)
        far |= d->col[c].fast && !d->arr[d->col[c].arr].owned &&
               d->arr[d->col[c].arr].row_bytes >= FAR_HINT_MIN;
    for (int k = 0; k < d->narrays; k++)
        lazy |= d->arr[k].lz != NULL;
    far |= lazy; /* remote arrays take the hints of later batches: fetched ahead */
    rc = ferry_dataset_create(out, &npy_vtable, d, f, d->ncols);
    if (rc == 0 && !far)
        (*out)->near_hints_only = true;
    if (rc == 0)
        (*out)->remote = lazy;
    ferry__free(f);
    return rc;
cleanup:
    ferry__free(op);
    ferry__free(f);
    npy_destroy(d);
    return rc;
}

int ferry__npy_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    uint64_t inflate_max = 0;
    int rc;
    if ((rc = ferry__spec_u64(s, "inflate_max", 1, UINT64_MAX, &inflate_max)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        return rc;
    /* "PATH" or "x=a.npy;y=b.npy" */
    char *buf = ferry__strdup(s->location);
    if (!buf)
        return ferry__err(FERRY_ENOMEM, "source npy: out of memory");
    const char *paths[MAX_ARRAYS], *names[MAX_ARRAYS];
    int n = 0, named = 0;
    for (char *item = buf; item;) {
        char *semi = strchr(item, ';');
        if (semi)
            *semi = 0;
        if (n == MAX_ARRAYS) {
            rc = ferry__err(FERRY_EINVAL, "source npy: more than %d arrays", MAX_ARRAYS);
            goto done;
        }
        char *eq = strchr(item, '=');
        names[n] = NULL;
        if (eq) {
            *eq = 0;
            names[n] = item;
            item = eq + 1;
            named++;
        }
        if (!*item || (names[n] && !*names[n])) {
            rc = ferry__err(FERRY_EINVAL, "source npy: empty path or name in \"%.64s\"",
                            s->location);
            goto done;
        }
        paths[n++] = item;
        item = semi ? semi + 1 : NULL;
    }
    if (named && named != n) {
        rc = ferry__err(FERRY_EINVAL,
                        "source npy: name every array (x=a.npy;y=b.npy) or none of them");
        goto done;
    }
    ferry_npy_opts o = {
        .paths = paths, .names = named ? names : NULL, .npaths = n, .inflate_max = inflate_max};
    rc = ferry_dataset_npy(out, &o);
done:
    ferry__free(buf);
    return rc;
}
