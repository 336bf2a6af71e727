/*
 * Fuzz target: the saved index of a minidb (FERRYMDX). The input is an index
 * file for a small fixed minidb. When the first byte is odd, the header's source
 * fields (magic, size, time, edge hashes, checksum over the header and its two
 * extra words) are patched to match the source, so that the fuzzer gets past the
 * stale check to the counts, bounds and offsets. Every entry the index admits is
 * then read through ferry_db's cursor and the dataset: each must lie inside the
 * source, and every error must name the source or its index.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], src[300], idx[300];
static uint8_t body[256];
static size_t body_n;

static uint64_t fnv_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void put(const char *k, size_t vl)
{
    uint32_t kl = (uint32_t)strlen(k), v = (uint32_t)vl;
    memcpy(body + body_n, &kl, 4);
    memcpy(body + body_n + 4, &v, 4);
    memcpy(body + body_n + 8, k, kl);
    for (size_t j = 0; j < vl; j++)
        body[body_n + 8 + kl + j] = (uint8_t)(j * 7 + kl);
    body_n += 8 + kl + vl;
}

static void cleanup(void)
{
    unlink(idx);
    unlink(src);
    rmdir(dir);
}

static void setup(void)
{
    if (dir[0])
        return;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ferry-fuzz-mdbidx-XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(src, sizeof src, "%s/src.minidb", dir);
    snprintf(idx, sizeof idx, "%s/src.minidb.fidx", dir);
    put("k0", 5); /* entries at 0, 15, 25, 53, 63 */
    put("k1", 0);
    put("key2", 16);
    put("k3", 0);
    put("k4", 33);
    FILE *f = fopen(src, "wb");
    fwrite(body, 1, body_n, f);
    fclose(f);
    atexit(cleanup);
}

static int names_it(void)
{
    return strstr(ferry_last_errmsg(), src) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    uint8_t *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (size >= 80 && (data[0] & 1)) {
        struct stat st;
        stat(src, &st);
        uint64_t sz = (uint64_t)st.st_size;
        int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        uint64_t edge = fnv_more(0xcbf29ce484222325ull, body, body_n); /* under 4 KiB */
        memcpy(buf, "FERRYMDX", 8);
        memcpy(buf + 24, &sz, 8);
        memcpy(buf + 32, &mtime, 8);
        memcpy(buf + 40, &edge, 8);
        memcpy(buf + 48, &edge, 8);
        uint64_t check = fnv_more(fnv_more(0xcbf29ce484222325ull, buf, 56), buf + 64, 16);
        memcpy(buf + 56, &check, 8);
    }
    FILE *f = fopen(idx, "wb");
    if (f) {
        fwrite(buf, 1, size, f);
        fclose(f);
    }
    free(buf);
    ferry_db *db;
    if (ferry_db_open(&db, "minidb", src, FERRY_DB_READ) == 0) {
        ferry_db_cursor *c;
        const void *k, *v;
        size_t kl, vl;
        int rc;
        if (ferry_db_cursor_open(db, 0, 1, &c) == 0) {
            uint64_t seen = 0;
            while (seen++ < 4096 && (rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) != FERRY_END) {
                if (rc < 0 && !names_it())
                    abort();
                if (rc < 0)
                    break;
                /* inside the source: the key and the value are bytes of it */
                if (kl == 0 || 8 + kl + vl > body_n ||
                    (const uint8_t *)v != (const uint8_t *)k + kl)
                    abort();
            }
            ferry_db_cursor_close(c);
        }
        ferry_db_close(db);
    } else if (!names_it()) {
        abort();
    }
    char spec[400];
    snprintf(spec, sizeof spec, "minidb:%s,value=raw", src);
    ferry_dataset *ds;
    if (ferry_dataset_open(&ds, spec) == 0) {
        ferry_ctx *ctx;
        uint8_t key[64], val[64];
        int64_t len[2];
        void *p[2] = {key, val};
        ferry_sample s = {2, p, len, {0}};
        if (ferry_dataset_nfields(ds) == 2 &&
            ferry_field_nbytes(ferry_dataset_field(ds, 0)) <= sizeof key &&
            ferry_field_nbytes(ferry_dataset_field(ds, 1)) <= sizeof val &&
            ferry_ctx_create(&ctx, 0, 0) == 0) {
            for (uint64_t i = 0; i < ferry_dataset_len(ds) && i < 4096; i++)
                if (ferry_dataset_get(ds, i, &s, ctx) < 0 && !names_it())
                    abort();
            ferry_ctx_free(ctx);
        }
        ferry_dataset_free(ds);
    } else if (!names_it()) {
        abort();
    }
    return 0;
}
