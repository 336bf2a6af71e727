/*
 * Fuzz target: the line index reader. The input is an index file for a small
 * fixed source. When the first byte is odd, the header's source fields (size,
 * time, edge hashes, checksum) are patched to match the source, so that the
 * fuzzer gets past the stale check to the counts and offsets. Every line the
 * index admits is then read through the lines dataset, both ways.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], src[300], idx[300];

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static const char text[] = "first line\r\nsecond\n\nfourth line is longer than the bound\nlast";

static void setup(void)
{
    if (dir[0])
        return;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ferry-fuzz-XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(src, sizeof src, "%s/src.txt", dir);
    snprintf(idx, sizeof idx, "%s/src.txt.fidx", dir);
    FILE *f = fopen(src, "wb");
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
}

static void cleanup(void)
{
    unlink(idx);
    unlink(src);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    static int registered;
    if (!registered++)
        atexit(cleanup);
    uint8_t *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (size >= 64 && (data[0] & 1)) {
        struct stat st;
        stat(src, &st);
        uint64_t sz = (uint64_t)st.st_size;
        int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        uint64_t edge = fnv(text, sizeof text - 1); /* the source is under 4 KiB */
        memcpy(buf, "FERRYLIX", 8);
        memcpy(buf + 24, &sz, 8);
        memcpy(buf + 32, &mtime, 8);
        memcpy(buf + 40, &edge, 8);
        memcpy(buf + 48, &edge, 8);
        uint64_t check = fnv(buf, 56);
        memcpy(buf + 56, &check, 8);
    }
    FILE *f = fopen(idx, "wb");
    if (f) {
        fwrite(buf, 1, size, f);
        fclose(f);
    }
    free(buf);
    ferry_line_index *ix;
    if (ferry_line_index_open(&ix, src, NULL, 0) == 0) {
        uint64_t n = ferry_line_index_count(ix), off, len;
        for (uint64_t i = 0; i < n && i < 4096; i++)
            if (ferry_line_index_get(ix, i, &off, &len) == 0 &&
                (off >= sizeof text || len > sizeof text - 1 - off))
                abort(); /* an accepted line outside the source */
        ferry_line_index_free(ix);
    }
    for (int io = 0; io < 2; io++) {
        ferry_lines_opts o;
        ferry_lines_opts_default(&o);
        o.path = src;
        o.max_len = 16;
        o.io = io;
        ferry_dataset *ds;
        if (ferry_dataset_lines(&ds, &o) != 0)
            continue;
        ferry_ctx *ctx;
        if (ferry_ctx_create(&ctx, 0, 0) == 0) {
            uint8_t line[16];
            int64_t len;
            void *p[1] = {line};
            ferry_sample s = {1, p, &len, {0}};
            for (uint64_t i = 0; i < ferry_dataset_len(ds) && i < 4096; i++)
                ferry_dataset_get(ds, i, &s, ctx);
            ferry_ctx_free(ctx);
        }
        ferry_dataset_free(ds);
    }
    return 0;
}
