/*
 * A folder of files as a dataset, in the torchvision ImageFolder layout: the
 * classes are the directories in DIR, sorted; every file under class k is a
 * sample of label k, in the order torchvision's make_dataset lists them. Files
 * directly in DIR are left out (and counted), as torchvision leaves them.
 * folder=flat reads every file under DIR by path instead, with label -1.
 */
#include "spec.h"
#include "ferry/folder.h"
#include "../io/io.h"

#include <dirent.h>
#include <errno.h>
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
    bool dangling; /* a symbolic link to nothing: listed (as torchvision lists it), fails to read */
} entry;

typedef struct ferry__folder {
    char *root;
    entry *e;
    size_t n, cap;
    uint64_t max_bytes;
    char ext[256]; /* ",jpg,png," or "" for all */
    bool flat;     /* folder=flat: every file under root, no classes */
    char **classes;
    size_t nclasses;
    ferry_folder_report report;
    char *first_ignored; /* the first file left out, for messages */
} files;

static void files_destroy(void *self)
{
    files *d = self;
    for (size_t i = 0; i < d->n; i++)
        ferry__free(d->e[i].path);
    for (size_t i = 0; i < d->nclasses; i++)
        ferry__free(d->classes[i]);
    ferry__free(d->classes);
    ferry__free(d->e);
    ferry__free(d->root);
    ferry__free(d->first_ignored);
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

/* A growable list of strings. */
typedef struct {
    char **s;
    size_t n, cap;
} strings;

static int strings_add(strings *l, const char *s)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 64;
        char **grown = c <= MAX_FILES ? ferry__realloc(l->s, c * sizeof *grown) : NULL;
        if (!grown)
            return ferry__err(FERRY_ENOMEM, "files: out of memory");
        l->s = grown;
        l->cap = c;
    }
    if (!(l->s[l->n] = ferry__strdup(s)))
        return ferry__err(FERRY_ENOMEM, "files: out of memory");
    l->n++;
    return 0;
}

static void strings_free(strings *l)
{
    for (size_t i = 0; i < l->n; i++)
        ferry__free(l->s[i]);
    ferry__free(l->s);
    memset(l, 0, sizeof *l);
}

/* Why directory path cannot be listed; for the folder itself (root), what the
 * text of the source may have meant. */
static int dir_error(const char *path, bool root, int err)
{
    struct stat st;
    if (err == ENOTDIR || (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)))
        return ferry__err(FERRY_EINVAL,
                          "%s: is a file, not a directory (this kind reads a folder of class "
                          "directories, as torchvision's ImageFolder)",
                          path);
    const char *opt = root ? strpbrk(path, " ;") : NULL;
    if (opt && strchr(opt, '='))
        return ferry__err(FERRY_ENOENT,
                          "%s: cannot open the directory: %s (options follow the location "
                          "after a ',', e.g. images:DIR,pipeline=train)",
                          path, strerror(err));
    return ferry__err(err == ENOENT ? FERRY_ENOENT : FERRY_EIO, "%s: cannot open the directory: %s",
                      path, strerror(err));
}

/* The names in directory root/rel, sorted (all, hidden ones included). */
static int list_dir(const files *d, const char *rel, strings *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", d->root, rel[0] ? "/" : "", rel);
    DIR *dir = opendir(path);
    if (!dir)
        return dir_error(path, rel[0] == 0, errno);
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if ((rc = strings_add(out, de->d_name)) < 0)
            break;
    }
    closedir(dir);
    if (rc == 0 && out->n > 1)
        qsort(out->s, out->n, sizeof *out->s, cmp_name);
    return rc;
}

static void ignored(files *d, uint64_t *count, const char *rel)
{
    (*count)++;
    if (!d->first_ignored)
        d->first_ignored = ferry__strdup(rel); /* for messages only: NULL is fine */
}

/* Adds file rel (st from stat, or dangling) with this label. */
static int add_file(files *d, const char *rel, const struct stat *st, bool dangling, int64_t label)
{
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", d->root, rel);
    if (strlen(rel) >= PATH_BOUND)
        return ferry__err(FERRY_EINVAL, "%s: the path is over %d bytes", full, PATH_BOUND - 1);
    if (!dangling && (uint64_t)st->st_size > d->max_bytes)
        return ferry__err(FERRY_EOVERFLOW, "%s: %lld bytes, over max=%llu", full,
                          (long long)st->st_size, (unsigned long long)d->max_bytes);
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 1024;
        entry *grown = c <= MAX_FILES ? ferry__realloc(d->e, c * sizeof *grown) : NULL;
        if (!grown)
            return ferry__err(FERRY_ENOMEM, "files: out of memory for %zu files", c);
        d->e = grown;
        d->cap = c;
    }
    if (!(d->e[d->n].path = ferry__strdup(rel)))
        return ferry__err(FERRY_ENOMEM, "files: out of memory");
    d->e[d->n].size = dangling ? 0 : (uint64_t)st->st_size;
    d->e[d->n].label = label;
    d->e[d->n].dangling = dangling;
    if (dangling)
        d->report.dangling++;
    d->n++;
    return 0;
}

/* One name in directory rel: a file to add (or leave out, counted), or a
 * directory to go into (*is_dir). */
static int visit(files *d, const char *rel, const char *name, int64_t label, bool *is_dir,
                 char *sub, size_t cap)
{
    *is_dir = false;
    snprintf(sub, cap, "%s%s%s", rel, rel[0] ? "/" : "", name);
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", d->root, sub);
    struct stat st;
    if (stat(full, &st) != 0) {
        struct stat ls;
        if (lstat(full, &ls) == 0 && S_ISLNK(ls.st_mode) && ext_ok(d, name))
            return add_file(d, sub, &st, true, label); /* a dangling link */
        ignored(d, &d->report.other, sub); /* vanished, or a link without the extension */
        return 0;
    }
    if (S_ISDIR(st.st_mode)) {
        *is_dir = true;
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        ignored(d, &d->report.other, sub);
        return 0;
    }
    if (!d->ext[0] && name[0] == '.') { /* without an extension filter, no hidden files */
        ignored(d, &d->report.hidden, sub);
        return 0;
    }
    if (!ext_ok(d, name)) {
        ignored(d, &d->report.filtered, sub);
        return 0;
    }
    return add_file(d, sub, &st, false, label);
}

/* folder=flat: the files under root/rel, depth first in name order, label -1. */
static int walk_flat(files *d, const char *rel, int depth)
{
    if (depth > MAX_DEPTH)
        return ferry__err(FERRY_EINVAL, "%s/%s: more than %d directories deep", d->root, rel,
                          MAX_DEPTH);
    strings names = {0};
    int rc = list_dir(d, rel, &names);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char sub[4096];
        bool is_dir;
        if (names.s[i][0] == '.') { /* hidden files and directories */
            snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", names.s[i]);
            ignored(d, &d->report.hidden, sub);
            continue;
        }
        rc = visit(d, rel, names.s[i], -1, &is_dir, sub, sizeof sub);
        if (rc == 0 && is_dir)
            rc = walk_flat(d, sub, depth + 1);
    }
    strings_free(&names);
    return rc;
}

/* Every directory under root/rel (rel included), into dirs. */
static int collect_dirs(files *d, const char *rel, int depth, strings *dirs)
{
    if (depth > MAX_DEPTH)
        return ferry__err(FERRY_EINVAL, "%s/%s: more than %d directories deep", d->root, rel,
                          MAX_DEPTH);
    int rc = strings_add(dirs, rel);
    strings names = {0};
    if (rc == 0)
        rc = list_dir(d, rel, &names);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char sub[4096], full[4096];
        snprintf(sub, sizeof sub, "%s/%s", rel, names.s[i]);
        snprintf(full, sizeof full, "%s/%s", d->root, sub);
        struct stat st;
        if (stat(full, &st) == 0 && S_ISDIR(st.st_mode))
            rc = collect_dirs(d, sub, depth + 1, dirs);
    }
    strings_free(&names);
    return rc;
}

/* torchvision's ImageFolder (find_classes, make_dataset): the classes are the
 * directories in the root (hidden ones too, links followed), sorted; a class's
 * files are those of every directory under it, the directories taken in the
 * order of their sorted paths and the files of each sorted by name; files in the
 * root are not samples; a class without a file is an error. */
static int walk_classes(files *d)
{
    strings top = {0}, classes = {0}, empty = {0};
    int rc = list_dir(d, "", &top);
    for (size_t i = 0; rc == 0 && i < top.n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", d->root, top.s[i]);
        struct stat st;
        if (stat(full, &st) == 0 && S_ISDIR(st.st_mode))
            rc = strings_add(&classes, top.s[i]);
        else
            ignored(d, &d->report.root_files, top.s[i]);
    }
    if (rc == 0 && classes.n == 0)
        rc = ferry__err(FERRY_ENOENT,
                        "%s: no class directories (the ImageFolder layout is DIR/CLASS/FILE); "
                        "folder=flat reads every file under DIR, unlabelled",
                        d->root);
    for (size_t k = 0; rc == 0 && k < classes.n; k++) {
        strings dirs = {0};
        size_t before = d->n;
        rc = collect_dirs(d, classes.s[k], 1, &dirs);
        if (rc == 0)
            qsort(dirs.s, dirs.n, sizeof *dirs.s, cmp_name);
        for (size_t j = 0; rc == 0 && j < dirs.n; j++) {
            strings names = {0};
            rc = list_dir(d, dirs.s[j], &names);
            for (size_t i = 0; rc == 0 && i < names.n; i++) {
                char sub[4096];
                bool is_dir;
                rc = visit(d, dirs.s[j], names.s[i], (int64_t)k, &is_dir, sub, sizeof sub);
            }
            strings_free(&names);
        }
        strings_free(&dirs);
        if (rc == 0 && d->n == before)
            rc = strings_add(&empty, classes.s[k]);
    }
    if (rc == 0 && empty.n) {
        char exts[256];
        snprintf(exts, sizeof exts, "%s", d->ext[0] ? d->ext + 1 : ""); /* ",a,b," -> "a,b" */
        if (exts[0])
            exts[strlen(exts) - 1] = 0;
        char list[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < empty.n && used < sizeof list - 1; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                     empty.s[i]);
        rc = ferry__err(FERRY_ENOENT,
                        "%s: found no valid file for the classes %s%s%s%s (each would take a "
                        "label and shift the later ones: fill them or remove them)",
                        d->root, list, exts[0] ? " (supported extensions: " : "", exts,
                        exts[0] ? ")" : "");
    }
    if (rc == 0) {
        d->classes = classes.s;
        d->nclasses = classes.n;
        memset(&classes, 0, sizeof classes);
    }
    strings_free(&top);
    strings_free(&classes);
    strings_free(&empty);
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
    if (e->dangling)
        return ferry_error(FERRY_ENOENT, "%s: a symbolic link to a file that does not exist", path);
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

int ferry__files_open_spec(ferry_dataset **out, ferry_stream **st, ferry__spec *s)
{
    int rc = 0;
    *out = NULL;
    files *d = ferry__calloc(1, sizeof *d);
    if (!d)
        return ferry__err(FERRY_ENOMEM, "files: out of memory");
    uint64_t max = 0;
    const char *ext = ferry__spec_str(s, "ext");
    const char *layout = ferry__spec_str(s, "folder");
    if (layout && strcmp(layout, "imagefolder") && strcmp(layout, "flat"))
        FERRY_FAIL(FERRY_EINVAL, "source %s: folder=\"%.64s\" is not imagefolder or flat", s->kind,
                   layout);
    d->flat = layout && !strcmp(layout, "flat");
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
    if (d->flat)
        FERRY_TRY(walk_flat(d, "", 0));
    else
        FERRY_TRY(walk_classes(d));
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
    rc = ferry_dataset_create(out, &files_vtable, d, f, 3); /* owns d, also on failure */
    if (rc == 0)
        (*out)->folder = d;
    return rc;
cleanup:
    files_destroy(d);
    return rc;
}

/* ---- ferry/folder.h ---- */

static const files *folder_of(const ferry_dataset *ds)
{
    return ds ? ds->folder : NULL;
}

uint64_t ferry_folder_nclasses(const ferry_dataset *ds)
{
    const files *d = folder_of(ds);
    return d ? d->nclasses : 0;
}

const char *ferry_folder_class_name(const ferry_dataset *ds, uint64_t label)
{
    const files *d = folder_of(ds);
    return d && label < d->nclasses ? d->classes[label] : NULL;
}

int ferry_folder_get_report(const ferry_dataset *ds, ferry_folder_report *out)
{
    const files *d = folder_of(ds);
    memset(out, 0, sizeof *out);
    if (!d)
        return ferry__err(FERRY_EINVAL,
                          "folder: the dataset is not over a folder (files:, images:)");
    *out = d->report;
    out->first_ignored = d->first_ignored;
    return 0;
}
