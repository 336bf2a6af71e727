/*
 * A folder of files as a dataset, in the torchvision ImageFolder layout: every
 * regular file under DIR is a sample; files in a subdirectory of DIR take the
 * subdirectory's position among the sorted subdirectories as their label (files
 * directly in DIR have label -1). Files are ordered by relative path.
 */
#include "dataset_internal.h"
#include "../io/io.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES ((size_t)1 << 28)
#define MAX_DEPTH 16
#define PATH_BOUND 1024
#define DEFAULT_MAX_BYTES ((uint64_t)64 << 20)

typedef struct entry {
    char *path; /* relative to the root */
    uint64_t size;
    int64_t label;
} entry;

typedef struct files {
    char *root;
    entry *e;
    size_t n, cap;
    uint64_t max_bytes;
    char ext[256]; /* ",jpg,png," or "" for all */
} files;

static void files_destroy(void *self)
{
    files *d = self;
    for (size_t i = 0; i < d->n; i++)
        ferry__free(d->e[i].path);
    ferry__free(d->e);
    ferry__free(d->root);
    ferry__free(d);
}

static bool ext_ok(const files *d, const char *name)
{
    if (!d->ext[0])
        return true;
    const char *dot = strrchr(name, '.');
    if (!dot || strlen(dot + 1) > 32)
        return false;
    char want[40];
    snprintf(want, sizeof want, ",%s,", dot + 1);
    for (char *p = want; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    return strstr(d->ext, want) != NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds the files under root/rel, depth first in name order. */
static int walk(files *d, const char *rel, int depth, int64_t label)
{
    int rc = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", d->root, rel[0] ? "/" : "", rel);
    if (depth > MAX_DEPTH)
        return ferry__err(FERRY_EINVAL, "%s: more than %d directories deep", path, MAX_DEPTH);
    DIR *dir = opendir(path);
    if (!dir)
        return ferry__err(FERRY_ENOENT, "%s: cannot open the directory", path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.')
            continue; /* . and .., and hidden files */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = ferry__realloc(names, cap * sizeof *names);
            if (!grown) {
                rc = ferry__err(FERRY_ENOMEM, "files: out of memory");
                break;
            }
            names = grown;
        }
        if (!(names[n] = ferry__strdup(de->d_name))) {
            rc = ferry__err(FERRY_ENOMEM, "files: out of memory");
            break;
        }
        n++;
    }
    closedir(dir);
    if (rc == 0)
        qsort(names, n, sizeof *names, cmp_name);
    int64_t next_label = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char sub[4096], full[4096];
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        snprintf(full, sizeof full, "%s/%s", d->root, sub);
        struct stat st;
        if (stat(full, &st) != 0)
            continue; /* vanished or a dangling link: not a sample */
        if (S_ISDIR(st.st_mode)) {
            rc = walk(d, sub, depth + 1, depth == 0 ? next_label++ : label);
            continue;
        }
        if (!S_ISREG(st.st_mode) || !ext_ok(d, names[i]))
            continue;
        if (strlen(sub) >= PATH_BOUND) {
            rc = ferry__err(FERRY_EINVAL, "%s: the path is over %d bytes", full, PATH_BOUND - 1);
            break;
        }
        if ((uint64_t)st.st_size > d->max_bytes) {
            rc = ferry__err(FERRY_EOVERFLOW, "%s: %lld bytes, over max=%llu", full,
                            (long long)st.st_size, (unsigned long long)d->max_bytes);
            break;
        }
        if (d->n == d->cap) {
            size_t c = d->cap ? d->cap * 2 : 1024;
            entry *grown = c <= MAX_FILES ? ferry__realloc(d->e, c * sizeof *grown) : NULL;
            if (!grown) {
                rc = ferry__err(FERRY_ENOMEM, "files: out of memory for %zu files", c);
                break;
            }
            d->e = grown;
            d->cap = c;
        }
        if (!(d->e[d->n].path = ferry__strdup(sub))) {
            rc = ferry__err(FERRY_ENOMEM, "files: out of memory");
            break;
        }
        d->e[d->n].size = (uint64_t)st.st_size;
        d->e[d->n].label = depth == 0 ? -1 : label;
        d->n++;
    }
    for (size_t i = 0; i < n; i++)
        ferry__free(names[i]);
    ferry__free(names);
    return rc;
}

static uint64_t files_len(void *self)
{
    return ((files *)self)->n;
}

static int files_get(void *self, uint64_t i, ferry_sample *out, ferry_ctx *ctx)
{
    files *d = self;
    const entry *e = &d->e[i];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d->root, e->path);
    ferry__file f;
    int rc = ferry__file_open(&f, path);
    if (rc < 0)
        return rc;
    size_t got = 0;
    if (f.size != e->size)
        rc = ferry_error(FERRY_ESTALE, "%s: %llu bytes now, %llu when listed", path,
                         (unsigned long long)f.size, (unsigned long long)e->size);
    else
        rc = ferry__file_pread(&f, path, out->data[0], (size_t)e->size, 0, &got);
    ferry__file_close(&f);
    if (rc < 0)
        return rc;
    if (got != e->size)
        return ferry_error(FERRY_EIO, "%s: read %zu of %llu bytes", path, got,
                           (unsigned long long)e->size);
    out->length[0] = (int64_t)got;
    size_t plen = strlen(e->path);
    memcpy(out->data[1], e->path, plen);
    out->length[1] = (int64_t)plen;
    memcpy(out->data[2], &e->label, sizeof e->label);
    return 0;
}

static const ferry_dataset_vtable files_vtable = {
    .len = files_len, .get = files_get, .destroy = files_destroy};

int ferry__files_open_spec(ferry_dataset **out, ferry__spec *s)
{
    int rc = 0;
    *out = NULL;
    files *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "files: out of memory");
    uint64_t max = 0;
    const char *ext = ferry__spec_str(s, "ext");
    d->max_bytes = DEFAULT_MAX_BYTES;
    if ((rc = ferry__spec_u64(s, "max", 1, (uint64_t)1 << 31, &max)) < 0 ||
        (rc = ferry__spec_check_used(s)) < 0)
        goto cleanup;
    if (max)
        d->max_bytes = max;
    if (ext) {
        /* ext=jpg;jpeg;png -> ",jpg,jpeg,png," */
        if (strlen(ext) + 3 > sizeof d->ext)
            FERRY_FAIL(FERRY_EINVAL, "source files: ext= is too long");
        snprintf(d->ext, sizeof d->ext, ",%s,", ext);
        for (char *p = d->ext; *p; p++)
            *p = *p == ';' ? ',' : (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    }
    if (!(d->root = ferry__strdup(s->location)))
        FERRY_FAIL(FERRY_ENOMEM, "files: out of memory");
    FERRY_TRY(walk(d, "", 0, -1));
    if (d->n == 0)
        FERRY_FAIL(FERRY_ENOENT, "%s: no files%s%s", d->root, ext ? " with extension " : "",
                   ext ? ext : "");
    uint64_t largest = 1;
    for (size_t i = 0; i < d->n; i++)
        largest = d->e[i].size > largest ? d->e[i].size : largest;
    ferry_field f[3];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "data");
    f[0].dtype = FERRY_U8;
    f[0].ndim = 1;
    f[0].shape[0] = (int64_t)(max ? max : largest); /* the bound: the largest file */
    f[0].variable = 1;
    strcpy(f[1].name, "path");
    f[1].dtype = FERRY_U8;
    f[1].ndim = 1;
    f[1].shape[0] = PATH_BOUND;
    f[1].variable = 1;
    strcpy(f[2].name, "label");
    f[2].dtype = FERRY_I64;
    return ferry_dataset_create(out, &files_vtable, d, f, 3);
cleanup:
    files_destroy(d);
    return rc;
}
