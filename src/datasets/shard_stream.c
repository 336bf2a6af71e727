/*
 * The file-sharded streams' engine: the list of files, the order of each epoch,
 * shard k of n, and the stream's calls over a format's reader.
 */
#include "shard_stream.h"

#include "../io/remote.h"
#include "../io/seqread.h"

#include <dirent.h>
#include <errno.h>
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

typedef struct expand_ctx {
    ferry__shard_files *out;
    size_t *cap;
    const char *kind;
} expand_ctx;

static int expand_add(void *arg, const char *text)
{
    expand_ctx *x = arg;
    return add(x->out, x->cap, text, x->kind);
}

/* A remote location: a glob's matches, a "directory"'s objects that want accepts,
 * else the one object. */
static int remote_files(ferry__shard_files *out, size_t *cap, const char *kind,
                        const char *location, bool (*want)(const char *name), const char *what)
{
    char **urls = NULL;
    size_t n = 0;
    bool glob = strpbrk(location, "*?[") != NULL;
    char head_msg[FERRY_ERRMSG_MAX] = "";
    int rc = 0;
    if (!glob && strncmp(location, "s3://", 5))
        return add(out, cap, location, kind); /* http(s): one file */
    if (!glob) { /* an object of that name (what is learnt serves the open), else a prefix */
        uint64_t size;
        int64_t mtime;
        rc = ferry__remote_stat(location, &size, &mtime);
        if (rc == 0)
            return add(out, cap, location, kind);
        if (rc != FERRY_ENOENT)
            return rc;
        ferry__err_copy(head_msg);
        rc = 0;
    }
    FERRY_TRY(ferry__remote_list(location, &urls, &n));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *base = strrchr(urls[i], '/') + 1;
        if (glob || (base[0] != '.' && want(base)))
            rc = add(out, cap, urls[i], kind);
    }
    if (rc == 0 && n == 0 && glob)
        rc = ferry__err(FERRY_ENOENT, "%s: no object matches", location);
    else if (rc == 0 && n > 0 && out->n == 0)
        rc = ferry__err(FERRY_ENOENT, "%s: no %s under the prefix", location, what);
    else if (rc == 0 && n == 0)
        rc = ferry__err(FERRY_ENOENT, "%s; no objects under %s/ either", head_msg, location);
cleanup:
    for (size_t i = 0; i < n; i++)
        ferry__free(urls[i]);
    ferry__free(urls);
    return rc;
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
    if (strchr(location, '{')) {
        /* WebDataset's brace ranges name the files: each is taken as named */
        expand_ctx x = {out, &cap, kind};
        rc = ferry__brace_expand(location, MAX_FILES, expand_add, &x);
    } else if (ferry__is_remote(location)) {
        rc = remote_files(out, &cap, kind, location, want, what);
    } else if (strpbrk(location, "*?[")) {
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

bool ferry__shard_files_compressed(const char *kind, const char *location,
                                   bool (*want)(const char *name), const char *what,
                                   int compression)
{
    ferry__shard_files f;
    bool compressed = false;
    if (ferry__shard_files_list(&f, kind, location, want, what) < 0)
        return false;
    for (size_t k = 0; k < f.n && !compressed; k++) {
        ferry__seqread r;
        if (ferry__is_remote(f.paths[k])) {
            /* by its name: sniffing would fetch every object at open */
            size_t len = strlen(f.paths[k]);
            const char *p = f.paths[k];
            compressed =
                (len > 3 && !strcmp(p + len - 3, ".gz")) ||
                (len > 4 && (!strcmp(p + len - 4, ".tgz") || !strcmp(p + len - 4, ".zst"))) ||
                (len > 5 && !strcmp(p + len - 5, ".zstd"));
            continue;
        }
        if (ferry__seqread_open(&r, f.paths[k], f.paths[k], compression, 4096) == 0) {
            compressed = r.compressed != NULL;
            ferry__seqread_close(&r);
        }
    }
    ferry__shard_files_free(&f);
    return compressed;
}

/* ---- Part files ---- */

/* The part number of a name prefix + digits + suffix, where the digits are exactly
 * what "%0*llu" writes: `digits` wide, wider only without a leading zero. */
static bool match_part(const char *prefix, unsigned digits, const char *suffix, const char *name,
                       uint64_t *num)
{
    size_t pl = strlen(prefix), sl = strlen(suffix), nl = strlen(name);
    if (nl < pl + digits + sl || memcmp(name, prefix, pl) || memcmp(name + nl - sl, suffix, sl))
        return false;
    const char *d = name + pl;
    size_t dl = nl - pl - sl;
    if (dl > 19 || (dl > digits && d[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < dl; i++) {
        if (d[i] < '0' || d[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(d[i] - '0');
    }
    *num = v;
    return true;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static const char *errno_text(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n); /* the GNU variant: may return a static string */
}

int ferry__shard_files_parts(ferry__shard_files *out, const char *kind, const char *dir,
                             const char *prefix, unsigned digits, const char *suffix)
{
    int rc = 0;
    uint64_t *nums = NULL;
    size_t n = 0, cap = 0;
    char eb[128], pat[600], *path = NULL;
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) { /* one file: the only part */
        if ((rc = add(out, &cap, dir, kind)) < 0)
            ferry__shard_files_free(out);
        return rc;
    }
    /* "part-NNNNN.csv": the pattern, for messages */
    snprintf(pat, sizeof pat, "%s%.*s%s", prefix, (int)digits, "NNNNNNNNNNNNNNNNNNNN", suffix);
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        FERRY_FAIL(e == ENOENT || e == ENOTDIR ? FERRY_ENOENT : FERRY_EIO,
                   "%s: cannot open the directory \"%s\": %s", kind, dir,
                   errno_text(e, eb, sizeof eb));
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                int e = errno;
                FERRY_FAIL(FERRY_EIO, "%s: cannot list the directory \"%s\": %s", kind, dir,
                           errno_text(e, eb, sizeof eb));
            }
            break;
        }
        uint64_t num;
        if (!match_part(prefix, digits, suffix, de->d_name, &num))
            continue;
        if (n == MAX_FILES)
            FERRY_FAIL(FERRY_ERANGE, "source %s: more than %u files", kind, MAX_FILES);
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            uint64_t *p = ferry__realloc(nums, ncap * sizeof *nums);
            if (!p)
                FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory listing \"%s\"", kind, dir);
            nums = p;
            cap = ncap;
        }
        nums[n++] = num;
    }
    if (n == 0)
        FERRY_FAIL(FERRY_ENOENT, "%s: the directory \"%s\" has no part files named %s", kind, dir,
                   pat);
    qsort(nums, n, sizeof *nums, cmp_u64);
    cap = 0;
    /* dir '/' prefix, at most 19 digits (see match_part), suffix, NUL */
    size_t path_cap = strlen(dir) + 1 + strlen(prefix) + 19 + strlen(suffix) + 1;
    if (!(path = ferry__malloc(path_cap)))
        FERRY_FAIL(FERRY_ENOMEM, "%s: out of memory", kind);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, path_cap, "%s/%s%0*llu%s", dir, prefix, (int)digits, (unsigned long long)i,
                 suffix);
        if (nums[i] != i)
            FERRY_FAIL(FERRY_ENOENT,
                       "%s: %s is missing: parts %s must be numbered from 0 without gaps (found "
                       "%zu, the highest number %llu)",
                       kind, path, pat, n, (unsigned long long)nums[n - 1]);
        FERRY_TRY(add(out, &cap, path, kind));
    }
cleanup:
    if (d)
        closedir(d);
    ferry__free(nums);
    ferry__free(path);
    if (rc < 0)
        ferry__shard_files_free(out);
    return rc;
}

/* ---- The stream ---- */

typedef struct shard_src {
    const ferry__shard_format *fmt;
    void *self;
    const ferry__shard_files *files;
    uint64_t seed;
} shard_src;

typedef struct shard_iter {
    const shard_src *s;
    ferry_permutation order;
    uint64_t place, step, shard; /* place: in the epoch's order of files */
    bool open, fr_open;          /* rd open on file, the one at place; fr on fr_file */
    uint64_t file, fr_file;
    void *rd, *fr; /* the format's readers, after the iterator */
} shard_iter;

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

static uint64_t file_at(const shard_iter *it, uint64_t place)
{
    return it->s->fmt->name_order ? place : ferry_permutation_at(&it->order, place);
}

static void sh_close(void *iter)
{
    shard_iter *it = iter;
    const ferry__shard_format *fmt = it->s->fmt;
    if (it->open)
        fmt->close(it->rd);
    if (it->fr_open)
        fmt->close(it->fr);
    if (fmt->free) {
        fmt->free(it->rd);
        fmt->free(it->fr);
    }
    ferry__free(it);
}

static int sh_open(void *self, uint64_t shard, uint64_t nshards, uint64_t epoch, void **iter)
{
    const shard_src *s = self;
    size_t rs = ALIGN16(s->fmt->reader_size);
    shard_iter *it = ferry__calloc(1, ALIGN16(sizeof *it) + 2 * rs);
    if (!it)
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", s->fmt->who);
    it->s = s;
    it->rd = (char *)it + ALIGN16(sizeof *it);
    it->fr = (char *)it->rd + rs;
    if (!s->fmt->name_order)
        ferry_permutation_init(&it->order, s->files->n, s->seed, epoch);
    it->place = it->shard = shard;
    it->step = nshards;
    int rc = s->fmt->init ? s->fmt->init(s->self, it->rd) : 0;
    if (rc < 0) {
        sh_close(it);
        return rc;
    }
    *iter = it;
    return 0;
}

static void end_file(shard_iter *it)
{
    if (it->open)
        it->s->fmt->close(it->rd);
    it->open = false;
    it->place = it->place + it->step < it->place ? UINT64_MAX : it->place + it->step;
}

/* The framing is lost: nothing after this point of the file can be trusted. */
static int broken_file(shard_iter *it, int rc)
{
    char msg[FERRY_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s; the rest of the %s is not read", ferry_last_errmsg(),
             it->s->fmt->unit);
    end_file(it);
    return ferry__err(rc, "%s", msg);
}

/* Remote files: the next ones of this shard's order are fetched while this one is
 * read (into the node cache, io/remote.h). */
static void fetch_ahead(const shard_iter *it)
{
    char *next[8];
    size_t n = 0;
    for (uint64_t p = it->place; n < 8 && p < it->s->files->n; p += it->step) {
        next[n++] = it->s->files->paths[file_at(it, p)];
        if (p + it->step < p)
            break;
    }
    ferry__prefetch_ahead(next, n, 1, 0);
}

static int sh_next(void *iter, ferry_sample *out, ferry_ctx *ctx)
{
    shard_iter *it = iter;
    const shard_src *s = it->s;
    const ferry__shard_format *fmt = s->fmt;
    int rc;
    (void)ctx;
    for (;;) {
        if (!it->open) {
            if (it->place >= s->files->n)
                return FERRY_END;
            it->file = file_at(it, it->place);
            if ((rc = fmt->open(s->self, it->rd, s->files->paths[it->file], false)) < 0) {
                end_file(it);
                return rc;
            }
            it->open = true;
            /* after the open: the file wanted now is fetched first, on its own */
            if (ferry__is_remote(s->files->paths[it->file]))
                fetch_ahead(it);
        }
        bool broken = false;
        rc = fmt->next(s->self, it->rd, s->files->paths[it->file], out, &broken);
        if (rc == FERRY_END) {
            end_file(it);
            continue;
        }
        if (rc == FERRY__SHARD_SKIP)
            continue;
        out->pos.a = it->file;
        if (rc < 0 && broken)
            return broken_file(it, rc);
        /* else 0, or an error for this sample only: the next call reads the next */
        return rc;
    }
}

/* ---- Saving and resuming ----
 * The state is the format's tag, the engine's words, then the format's (its
 * reader's place in the open file; zeros when none is open). In a permuted
 * order (TFRecord: 48 bytes, WebDataset: 64 and the key being passed over): the
 * place in the epoch's order, the file there (a check: UINT64_MAX past the
 * last) and the size of the open file (0: none open). In name order (CSV: 72
 * bytes): the setting, the count of files and of shards, the place (UINT64_MAX
 * once the shard is done) and whether its file is open. */

static int sh_save(void *iter, ferry_state *w)
{
    shard_iter *it = iter;
    const shard_src *s = it->s;
    const ferry__shard_format *fmt = s->fmt;
    uint64_t n = s->files->n;
    ferry_state_put_u64(w, fmt->tag);
    if (fmt->name_order) {
        ferry_state_put_u64(w, fmt->setting(s->self));
        ferry_state_put_u64(w, n);
        ferry_state_put_u64(w, it->step);
        ferry_state_put_u64(w, it->open || it->place < n ? it->place : UINT64_MAX);
        ferry_state_put_u64(w, it->open);
    } else {
        ferry_state_put_u64(w, it->place);
        ferry_state_put_u64(w, it->place < n ? file_at(it, it->place) : UINT64_MAX);
        ferry_state_put_u64(w, it->open ? fmt->size(it->rd) : 0);
    }
    fmt->save(it->open ? it->rd : NULL, w);
    return 0;
}

/* The engine's words of a state in name order: 0 and *place, *open; or an error. */
static int check_named(const shard_iter *it, const uint64_t *v, bool names, uint64_t *place,
                       bool *open)
{
    const ferry__shard_format *fmt = it->s->fmt;
    const char *who = fmt->who, *unit = fmt->unit;
    uint64_t n = it->s->files->n, set = fmt->setting(it->s->self);
    uint64_t step = it->step, shard = it->shard, now = it->place;
    if (v[1] != set)
        return ferry__err(FERRY_EINVAL,
                          "%s: the state was saved with %s=%llu, this stream has %s=%llu", who,
                          fmt->setting_name, (unsigned long long)v[1], fmt->setting_name,
                          (unsigned long long)set);
    if (v[2] != n)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state was saved over %llu %s files, this stream has %llu", who,
                          (unsigned long long)v[2], unit, (unsigned long long)n);
    if (v[3] != step)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state is a position in one of %llu shards, this iterator is "
                          "shard %llu of %llu",
                          who, (unsigned long long)v[3], (unsigned long long)shard,
                          (unsigned long long)step);
    *place = v[4];
    *open = v[5] == 1;
    if (v[5] > 1 ||
        (*place == UINT64_MAX ? *open : *place >= n || *place < now || (*place - now) % step))
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state names %s %llu%s, which shard %llu of %llu (of %llu %ss) "
                          "does not hold",
                          who, unit, (unsigned long long)*place, v[5] > 1 ? " (damaged)" : "",
                          (unsigned long long)shard, (unsigned long long)step,
                          (unsigned long long)n, unit);
    if (!*open && names)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state is damaged (a position in %s %llu, which is not open)",
                          who, unit, (unsigned long long)*place);
    return 0;
}

/* The engine's words of a state in a permuted order: 0 and *place, *open; or an
 * error. */
static int check_permuted(const shard_iter *it, const uint64_t *v, bool names, uint64_t *place,
                          bool *open)
{
    const ferry__shard_files *f = it->s->files;
    const char *who = it->s->fmt->who, *unit = it->s->fmt->unit;
    uint64_t step = it->step, now = it->place, file = v[2];
    *place = v[1];
    *open = v[3] != 0;
    if (*place != UINT64_MAX &&
        (*place < now || (*place - now) % step || (*place != now && *place - step >= f->n)))
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state is at %s %llu of the epoch's order, not one of stream "
                          "shard %llu of %llu (%zu %ss)",
                          who, unit, (unsigned long long)*place, (unsigned long long)it->shard,
                          (unsigned long long)step, f->n, unit);
    if (*place >= f->n) {
        if (file != UINT64_MAX || *open || names)
            return ferry__err(FERRY_ECORRUPT,
                              "%s: the state is past the last %s but names a position in one", who,
                              unit);
        return 0;
    }
    uint64_t want = file_at(it, *place);
    if (file != want)
        return ferry__err(FERRY_ECORRUPT,
                          "%s: the state's %s %llu of the epoch's order is %s %llu, here it is "
                          "%llu (%s): another file list, seed or epoch",
                          who, unit, (unsigned long long)*place, unit, (unsigned long long)file,
                          (unsigned long long)want, f->paths[want]);
    if (!*open && names)
        return ferry__err(FERRY_ECORRUPT, "%s: the state names a position in %s with no %s open",
                          who, f->paths[want], unit);
    return 0;
}

static int sh_restore(void *iter, ferry_state *r, ferry_ctx *ctx)
{
    shard_iter *it = iter;
    const shard_src *s = it->s;
    const ferry__shard_format *fmt = s->fmt;
    unsigned head = fmt->name_order ? 6 : 4;
    uint64_t v[10], place;
    bool names = false, open;
    int rc;
    (void)ctx;
    if ((rc = ferry_state_get_u64(r, &v[0])) < 0)
        return rc;
    if (v[0] != fmt->tag)
        return ferry__err(FERRY_ECORRUPT, "%s: %s", fmt->who, fmt->stranger);
    for (unsigned i = 1; i < head + fmt->words; i++) {
        if ((rc = ferry_state_get_u64(r, &v[i])) < 0)
            return rc;
        names |= i >= head && v[i] != 0;
    }
    if ((rc = (fmt->name_order ? check_named : check_permuted)(it, v, names, &place, &open)) < 0)
        return rc;
    if (place >= s->files->n || !open) {
        it->place = place;
        return 0;
    }
    it->file = file_at(it, place);
    const char *path = s->files->paths[it->file];
    if ((rc = fmt->open(s->self, it->rd, path, false)) < 0)
        return rc;
    it->open = true; /* closed by sh_close, also after an error */
    it->place = place;
    if (!fmt->name_order && fmt->size(it->rd) != v[3])
        return ferry__err(FERRY_ECORRUPT,
                          "%s: %s is %llu bytes, %llu when the state was saved (the %s changed)",
                          fmt->who, path, (unsigned long long)fmt->size(it->rd),
                          (unsigned long long)v[3], fmt->unit);
    return fmt->resume(s->self, it->rd, path, v + head, r);
}

/* A sample read again by fetch's own reader, left after it: fetches in the order
 * of (file, offset) read each file once (and decode it once when compressed;
 * going back in a compressed file decodes it again from its start). */
static int sh_fetch(void *iter, const ferry_pos *pos, ferry_sample *out, ferry_ctx *ctx)
{
    shard_iter *it = iter;
    const shard_src *s = it->s;
    const ferry__shard_format *fmt = s->fmt;
    int rc;
    (void)ctx;
    if (pos->a >= s->files->n)
        return ferry__err(FERRY_ERANGE, "%s: no %s %llu (of %zu %ss)", fmt->who, fmt->unit,
                          (unsigned long long)pos->a, s->files->n, fmt->unit);
    const char *path = s->files->paths[pos->a];
    if (it->fr_open && it->fr_file != pos->a) {
        fmt->close(it->fr);
        it->fr_open = false;
    }
    if (!it->fr_open) {
        if ((rc = fmt->open(s->self, it->fr, path, true)) < 0)
            return rc;
        it->fr_open = true;
        it->fr_file = pos->a;
    }
    bool broken = false;
    rc = fmt->fetch(s->self, it->fr, path, pos, out, &broken);
    if (broken) { /* the reader is spent: the next fetch opens the file again */
        fmt->close(it->fr);
        it->fr_open = false;
    }
    return rc;
}

static void sh_destroy(void *self)
{
    shard_src *s = self;
    s->fmt->destroy(s->self);
    ferry__free(s);
}

static const ferry_stream_vtable shard_vtable = {sh_open, sh_next,    sh_close, sh_destroy,
                                                 sh_save, sh_restore, sh_fetch};

int ferry__shard_stream_create(ferry_stream **out, const ferry__shard_format *fmt, void *self,
                               const ferry__shard_files *files, uint64_t seed,
                               const ferry_field *fields, int nfields)
{
    *out = NULL;
    shard_src *s = ferry__calloc(1, sizeof *s);
    if (!s) {
        fmt->destroy(self);
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", fmt->who);
    }
    s->fmt = fmt;
    s->self = self;
    s->files = files;
    s->seed = seed;
    return ferry_stream_create(out, &shard_vtable, s, fields, nfields);
}
