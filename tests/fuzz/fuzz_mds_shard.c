/*
 * Fuzz target: MDS shard bodies (index.json has its own target). The input's
 * first byte picks one of a few column sets; the rest is the shard, described by
 * an index.json with its size and the sample count it says. A shard that opens
 * (its samples checked at open) reads every sample.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256], shard[300], index_path[300];

static void cleanup(void)
{
    unlink(shard);
    unlink(index_path);
    rmdir(dir);
}

static void setup(void)
{
    if (dir[0])
        return;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ferry-fuzz-XXXXXX", t ? t : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(shard, sizeof shard, "%s/shard.00000.mds", dir);
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    atexit(cleanup);
}

static const char *const columns[][3] = {
    /* names, encodings, sizes */
    {"\"x\"", "\"bytes\"", "null"},
    {"\"i\", \"s\"", "\"int32\", \"str\"", "4, null"},
    {"\"a\", \"f\"", "\"ndarray:float32\", \"ndarray:uint8:2,3\"", "null, 6"},
    {"\"j\", \"u\", \"h\"", "\"json\", \"uint64\", \"float16\"", "null, 8, 2"},
};

static void write_file(const char *p, const void *data, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    fwrite(data, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    setup();
    const char *const *c = columns[data[0] % (sizeof columns / sizeof columns[0])];
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    uint32_t samples = 0;
    if (n >= 4)
        memcpy(&samples, body, 4);
    char text[2048];
    int tl = snprintf(text, sizeof text,
                      "{\"shards\": [{\"column_encodings\": [%s], \"column_names\": [%s], "
                      "\"column_sizes\": [%s], \"compression\": null, \"format\": \"mds\", "
                      "\"hashes\": [], \"raw_data\": {\"basename\": \"shard.00000.mds\", "
                      "\"bytes\": %zu, \"hashes\": {}}, \"samples\": %u, \"size_limit\": "
                      "67108864, \"version\": 2, \"zip_data\": null}], \"version\": 2}",
                      c[1], c[0], c[2], n, samples);
    write_file(index_path, text, (size_t)tl);
    write_file(shard, body, n);
    char spec[400];
    snprintf(spec, sizeof spec, "mds:%s", dir);
    ferry_dataset *ds = NULL;
    if (ferry_dataset_open(&ds, spec) == 0) {
        ferry_ctx *ctx;
        if (ferry_ctx_create(&ctx, 0, 0) != 0)
            abort();
        int nf = ferry_dataset_nfields(ds);
        void *bufs[FERRY_MAX_FIELDS];
        int64_t len[FERRY_MAX_FIELDS];
        for (int k = 0; k < nf; k++)
            if (!(bufs[k] = malloc(ferry_field_nbytes(ferry_dataset_field(ds, k)) + 1)))
                abort();
        ferry_sample s = {nf, bufs, len, {0}};
        uint64_t total = ferry_dataset_len(ds);
        for (uint64_t i = 0; i < total && i < 4096; i++)
            if (ferry_dataset_get(ds, i, &s, ctx) != 0)
                abort(); /* a shard checked at open reads whole */
        for (int k = 0; k < nf; k++)
            free(bufs[k]);
        ferry_ctx_free(ctx);
        ferry_dataset_free(ds);
    }
    unlink(shard);
    unlink(index_path);
    return 0;
}
