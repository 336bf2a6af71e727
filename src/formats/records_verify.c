/*
 * Checking a shard set: the manifest against the files, every footer, every
 * record's CRC. Problems are reported one by one, with where they are, and the
 * check goes on past each, so one run lists all the damage.
 */
#include "records_internal.h"
#include "../io/io.h"

#include <dirent.h>
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

/* Every record of one shard; returns its record count (as far as it can be read). */
static uint64_t verify_file(verifier *v, const char *path)
{
    ferry_record_file *f;
    if (ferry_record_file_open(&f, path, 0) < 0) {
        problem(v, "%s", ferry_last_errmsg());
        if (ferry_record_file_open(&f, path, FERRY_RECORD_RECOVER) < 0)
            return 0;
        problem(v, "%s: %llu whole records can be recovered (open with FERRY_RECORD_RECOVER)", path,
                (unsigned long long)ferry_record_file_count(f));
    }
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

int ferry_records_verify(const char *path, ferry_report_fn report, void *arg, uint64_t *problems,
                         uint64_t *records)
{
    verifier v = {report, arg, 0, 0};
    struct stat st;
    if (!path || stat(path, &st) != 0)
        return ferry__err(FERRY_ENOENT, "%s: no such file or directory", path ? path : "(null)");
    if (!S_ISDIR(st.st_mode)) {
        verify_file(&v, path);
        goto done;
    }
    /* a directory: its manifest, else its .ferry files */
    DIR *d = opendir(path);
    if (!d)
        return ferry__err(FERRY_EIO, "%s: cannot read the directory", path);
    char manifest[4096] = "";
    char **shards = NULL;
    size_t nshards = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 9 && !strcmp(e->d_name + len - 9, ".manifest")) {
            if (manifest[0])
                problem(&v, "%s: more than one manifest (%s)", path, e->d_name);
            else
                snprintf(manifest, sizeof manifest, "%s/%s", path, e->d_name);
        } else if (len > 6 && !strcmp(e->d_name + len - 6, ".ferry")) {
            if (nshards == cap) {
                cap = cap ? 2 * cap : 16;
                char **grown = ferry__realloc(shards, cap * sizeof *grown);
                if (!grown) {
                    rc = ferry__err(FERRY_ENOMEM, "verify: out of memory");
                    break;
                }
                shards = grown;
            }
            if (!(shards[nshards] = ferry__strdup(e->d_name))) {
                rc = ferry__err(FERRY_ENOMEM, "verify: out of memory");
                break;
            }
            nshards++;
        }
    }
    closedir(d);
    if (rc == 0 && !manifest[0]) {
        problem(&v,
                "%s: no manifest: the set's writer did not finish, or this is not a shard "
                "set",
                path);
        for (size_t i = 0; i < nshards; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, shards[i]);
            verify_file(&v, p);
        }
    } else if (rc == 0) {
        ferry__manifest_entry *m = NULL;
        size_t n = 0;
        if (ferry__manifest_read(manifest, &m, &n) < 0) {
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
            uint64_t count = verify_file(&v, p);
            if (count != m[i].records)
                problem(&v, "%s: %llu records, the manifest says %llu", p,
                        (unsigned long long)count, (unsigned long long)m[i].records);
        }
        for (size_t s = 0; s < nshards; s++) {
            bool named = false;
            for (size_t i = 0; i < n && !named; i++)
                named = !strcmp(shards[s], m[i].file);
            if (!named)
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
