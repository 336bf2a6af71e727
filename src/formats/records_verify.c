/*
 * Checking a shard set: the manifest against the files, every footer, every
 * record's CRC. Problems are reported one by one, with where they are, and the
 * check goes on past each, so one run lists all the damage.
 */
#include "records_internal.h"
#include "../io/io.h"
#include "../io/remote.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct verifier {
    ferry_report_fn report;
    void *arg;
    uint64_t problems, records;
} verifier;

static void problem(verifier *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(verifier *v, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v->problems++;
    if (v->report)
        v->report(msg, v->arg);
}

/* A remark that is not damage: counted neither as a problem nor kept silent. */
static void note(verifier *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(verifier *v, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(msg, sizeof msg, "note: ");
    vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    va_end(ap);
    if (v->report)
        v->report(msg, v->arg);
}

/* Every record of one shard; returns its record count (as far as it can be read).
 * With a manifest (in_set), the shard's identity must be the set's id and its
 * position pos; without one, a shard must carry none. */
static uint64_t verify_file(verifier *v, const char *path, bool in_set, uint64_t set_id, size_t pos)
{
    ferry_record_file *f;
    if (ferry_record_file_open(&f, path, 0) < 0) {
        problem(v, "%s", ferry_last_errmsg());
        if (ferry_record_file_open(&f, path, FERRY_RECORD_RECOVER) < 0)
            return 0;
        problem(v, "%s: %llu whole records can be recovered (open with FERRY_RECORD_RECOVER)", path,
                (unsigned long long)ferry_record_file_count(f));
    }
    uint64_t id;
    uint32_t index;
    bool has = ferry__record_file_set(f, &id, &index);
    if (!in_set && has)
        problem(v,
                "%s: shard %u of set %016llx, whose manifest is missing (a writer that did not "
                "finish?)",
                path, index, (unsigned long long)id);
    else if (in_set && set_id && !has)
        problem(v, "%s: carries no set identity; the manifest is of set %016llx", path,
                (unsigned long long)set_id);
    else if (in_set && set_id && (id != set_id || index != pos))
        problem(v,
                "%s: shard %u of set %016llx; the manifest names it as shard %zu of set %016llx "
                "(a file of another write)",
                path, index, (unsigned long long)id, pos, (unsigned long long)set_id);
    uint64_t n = ferry_record_file_count(f);
    for (uint64_t i = 0; i < n; i++) {
        const void *p;
        size_t size;
        uint64_t off;
        if (ferry_record_file_raw(f, i, &p, &size, &off) < 0)
            problem(v, "%s", ferry_last_errmsg());
        else
            v->records++;
    }
    ferry_record_file_free(f);
    return n;
}

int ferry__records_check_copy(const char *path, const char *url)
{
    ferry_record_file *f;
    (void)url;
    int rc = ferry_record_file_open(&f, path, 0);
    if (rc < 0)
        return rc;
    uint64_t n = ferry_record_file_count(f);
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        const void *p;
        size_t size;
        rc = ferry_record_file_raw(f, i, &p, &size, NULL);
    }
    ferry_record_file_free(f);
    return rc;
}

int ferry_records_verify(const char *path, ferry_report_fn report, void *arg, uint64_t *problems,
                         uint64_t *records)
{
    verifier v = {report, arg, 0, 0};
    struct stat st;
    if (!path)
        return ferry__err(FERRY_EINVAL, "verify: path is NULL");
    /* a set's manifest named: the set, without listing its folder (HTTP has none) */
    size_t plen = strlen(path);
    char dirbuf[4096];
    const char *named_manifest = NULL;
    if (plen > 9 && !strcmp(path + plen - 9, ".manifest")) {
        const char *slash = strrchr(path, '/');
        snprintf(dirbuf, sizeof dirbuf, "%.*s", slash ? (int)(slash - path) : 1,
                 slash ? path : ".");
        named_manifest = path;
        path = dirbuf;
        plen = strlen(path);
    }
    /* a remote location is a shard when it names one, else a set's prefix */
    bool remote = ferry__is_remote(path);
    if (named_manifest) {
        memset(&st, 0, sizeof st);
        st.st_mode = S_IFDIR;
    } else if (remote) {
        memset(&st, 0, sizeof st);
        st.st_mode = plen > 6 && !strcmp(path + plen - 6, ".ferry") ? S_IFREG : S_IFDIR;
    } else if (stat(path, &st) != 0) {
        int e = errno;
        return ferry__err(e == ENOENT || e == ENOTDIR ? FERRY_ENOENT : FERRY_EIO, "%s: %s", path,
                          strerror(e));
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return ferry__err(FERRY_EIO, "%s: is %s, not a shard file or a set's directory", path,
                          S_ISFIFO(st.st_mode)  ? "a FIFO"
                          : S_ISCHR(st.st_mode) ? "a character device"
                          : S_ISBLK(st.st_mode) ? "a block device"
                                                : "not a regular file");
    if (!S_ISDIR(st.st_mode)) {
        /* a shard on its own: its identity is not checked */
        ferry_record_file *f;
        if (ferry_record_file_open(&f, path, FERRY_RECORD_RECOVER) == 0) {
            uint64_t id;
            uint32_t index;
            bool has = ferry__record_file_set(f, &id, &index);
            ferry_record_file_free(f);
            verify_file(&v, path, has, has ? id : 0, index);
        } else {
            verify_file(&v, path, false, 0, 0);
        }
        goto done;
    }
    /* a directory: its manifest, else its .ferry files */
    char **ents = NULL;
    size_t nents = 0;
    int lr = named_manifest ? 0 : ferry__list_dir(path, &ents, &nents);
    if (lr < 0)
        return remote ? lr : ferry__err(FERRY_EIO, "%s: cannot read the directory", path);
    char manifest[4096] = "";
    if (named_manifest)
        snprintf(manifest, sizeof manifest, "%s", named_manifest);
    char **shards = NULL;
    size_t nshards = 0, cap = 0;
    int rc = 0;
    for (size_t k = 0; k < nents; k++) {
        const char *name = ents[k];
        size_t len = strlen(name);
        if (len > 9 && !strcmp(name + len - 9, ".manifest")) {
            if (manifest[0])
                problem(&v, "%s: more than one manifest (%s)", path, name);
            else
                snprintf(manifest, sizeof manifest, "%s/%s", path, name);
        } else if (len > 6 && !strcmp(name + len - 6, ".ferry")) {
            if (nshards == cap) {
                cap = cap ? 2 * cap : 16;
                char **grown = ferry__realloc(shards, cap * sizeof *grown);
                if (!grown) {
                    rc = ferry__err(FERRY_ENOMEM, "verify: out of memory");
                    break;
                }
                shards = grown;
            }
            if (!(shards[nshards] = ferry__strdup(name))) {
                rc = ferry__err(FERRY_ENOMEM, "verify: out of memory");
                break;
            }
            nshards++;
        }
    }
    for (size_t k = 0; k < nents; k++)
        ferry__free(ents[k]);
    ferry__free(ents);
    if (rc == 0 && !manifest[0]) {
        problem(&v,
                "%s: no manifest: the set's writer did not finish, or this is not a shard "
                "set",
                path);
        for (size_t i = 0; i < nshards; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, shards[i]);
            verify_file(&v, p, false, 0, 0);
        }
    } else if (rc == 0) {
        ferry__manifest_entry *m = NULL;
        size_t n = 0;
        uint64_t set_id = 0;
        if (ferry__manifest_read(manifest, &m, &n, &set_id) < 0) {
            problem(&v, "%s", ferry_last_errmsg());
        }
        for (size_t i = 0; i < n; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, m[i].file);
            uint32_t crc;
            uint64_t size;
            if (ferry__crc32c_file(p, &crc, &size) < 0) {
                problem(&v, "%s: named by %s, but %s", p, manifest, ferry_last_errmsg());
                continue;
            }
            if (size != m[i].bytes)
                problem(&v, "%s: %llu bytes, the manifest says %llu", p, (unsigned long long)size,
                        (unsigned long long)m[i].bytes);
            if (crc != m[i].crc)
                problem(&v, "%s: file CRC-32C %08x, the manifest says %08x", p, crc, m[i].crc);
            uint64_t count = verify_file(&v, p, true, set_id, i);
            if (count != m[i].records)
                problem(&v, "%s: %llu records, the manifest says %llu", p,
                        (unsigned long long)count, (unsigned long long)m[i].records);
        }
        /* the set's name: its manifest's, without ".manifest" */
        char set[4096];
        const char *base = strrchr(manifest, '/') + 1;
        snprintf(set, sizeof set, "%.*s", (int)(strlen(base) - 9), base);
        for (size_t s = 0; s < nshards; s++) {
            bool named = false;
            for (size_t i = 0; i < n && !named; i++)
                named = !strcmp(shards[s], m[i].file);
            int kind = ferry__set_file_kind(set, shards[s]);
            if (named)
                continue;
            if (kind == FERRY__SET_FILE_SHARD || kind == FERRY__SET_FILE_OLD_SHARD)
                note(&v,
                     "%s/%s: not part of the set: left by an earlier or unfinished write of "
                     "%s; the next write of the set removes it",
                     path, shards[s], set);
            else
                problem(&v, "%s/%s: a shard file the manifest does not name", path, shards[s]);
        }
        ferry__free(m);
    }
    for (size_t i = 0; i < nshards; i++)
        ferry__free(shards[i]);
    ferry__free(shards);
    if (rc < 0)
        return rc;
done:
    if (problems)
        *problems = v.problems;
    if (records)
        *records = v.records;
    return 0;
}
