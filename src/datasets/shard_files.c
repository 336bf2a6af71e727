/*
 * Listing the files of a file-sharded source.
 */
#include "shard_files.h"

#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES 10000000u

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add(ferry__shard_files *s, size_t *cap, const char *path, const char *kind)
{
    if (s->n == MAX_FILES)
        return ferry__err(FERRY_ERANGE, "source %s: more than %u files", kind, MAX_FILES);
    if (s->n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **grown = ferry__realloc(s->paths, c * sizeof *grown);
        if (!grown)
            return ferry__err(FERRY_ENOMEM, "source %s: out of memory", kind);
        s->paths = grown;
        *cap = c;
    }
    if (!(s->paths[s->n] = ferry__strdup(path)))
        return ferry__err(FERRY_ENOMEM, "source %s: out of memory", kind);
    s->n++;
    return 0;
}

int ferry__shard_files_list(ferry__shard_files *out, const char *kind, const char *location,
                            bool (*want)(const char *name), const char *what)
{
    int rc = 0;
    size_t cap = 0;
    struct stat st;
    memset(out, 0, sizeof *out);
    if (!location || !*location)
        return ferry__err(FERRY_EINVAL, "source %s: no path", kind);
    if (strpbrk(location, "*?[")) {
        glob_t g;
        int gr = glob(location, 0, NULL, &g);
        if (gr == GLOB_NOMATCH)
            return ferry__err(FERRY_ENOENT, "%s: no file matches", location);
        if (gr != 0)
            return ferry__err(FERRY_EIO, "%s: the pattern could not be read", location);
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
            if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode))
                rc = add(out, &cap, g.gl_pathv[i], kind);
        globfree(&g);
    } else if (stat(location, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(location);
        if (!d)
            return ferry__err(FERRY_EIO, "%s: the directory cannot be read", location);
        struct dirent *e;
        char path[4096];
        while (rc == 0 && (e = readdir(d))) {
            if (e->d_name[0] == '.' || !want(e->d_name))
                continue;
            int len = snprintf(path, sizeof path, "%s/%s", location, e->d_name);
            if (len < 0 || (size_t)len >= sizeof path)
                rc = ferry__err(FERRY_ERANGE, "%s/%s: path too long", location, e->d_name);
            else if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                rc = add(out, &cap, path, kind);
        }
        closedir(d);
        if (rc == 0 && out->n == 0)
            rc = ferry__err(FERRY_ENOENT, "%s: no %s in the directory", location, what);
    } else {
        rc = add(out, &cap, location, kind); /* a file: opening it says if it is missing */
    }
    if (rc < 0) {
        ferry__shard_files_free(out);
        return rc;
    }
    if (out->n == 0)
        return ferry__err(FERRY_ENOENT, "%s: no %s", location, what);
    qsort(out->paths, out->n, sizeof *out->paths, cmp_str);
    return 0;
}

void ferry__shard_files_free(ferry__shard_files *s)
{
    for (size_t i = 0; i < s->n; i++)
        ferry__free(s->paths[i]);
    ferry__free(s->paths);
    s->paths = NULL;
    s->n = 0;
}

int ferry__shard_files_place(const ferry__shard_files *f, const ferry_permutation *order,
                             const char *who, const char *unit, uint64_t shard, uint64_t step,
                             uint64_t now, uint64_t place, uint64_t file, bool open, bool names,
                             const char **path)
{
    *path = NULL;
    if (place < now || (place - now) % step || (place != now && place - step >= f->n))
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state is at %s %llu of the epoch's order, not one of stream "
                          "shard %llu of %llu (%zu %ss)",
                          who, unit, (unsigned long long)place, (unsigned long long)shard,
                          (unsigned long long)step, f->n, unit);
    if (place >= f->n) {
        if (file != UINT64_MAX || open || names)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: the state is past the last %s but names a position in one", who,
                              unit);
        return 0;
    }
    uint64_t want = ferry_permutation_at(order, place);
    if (file != want)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state's %s %llu of the epoch's order is %s %llu, here it is "
                          "%llu (%s): another file list, seed or epoch",
                          who, unit, (unsigned long long)place, unit, (unsigned long long)file,
                          (unsigned long long)want, f->paths[want]);
    if (!open && names)
        return ferry__err(FERRY_ECORRUPT, "%s: the state names a position in %s with no %s open",
                          who, f->paths[want], unit);
    *path = f->paths[want];
    return 0;
}
