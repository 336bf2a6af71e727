/*
 * What the key/value stores share (kv.h): the table of backends and the key
 * index.
 */
#include "kv.h"

#include <stdio.h>
#include <string.h>

const ferry__kv_ops *ferry__kv_find(const char *name)
{
    static const ferry__kv_ops *const all[] = {&ferry__minidb_ops, &ferry__leveldb_ops,
                                               &ferry__rocksdb_ops};
    for (size_t i = 0; name && i < sizeof all / sizeof *all; i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

const char *ferry__kv_path(const ferry__kv *kv)
{
    return ((const ferry__kv_base *)kv)->path;
}

int ferry__kv_keys_add(ferry__kv_keys *ks, const char *path, const void *k, size_t klen)
{
    uint64_t max = ks->max ? ks->max : FERRY__KV_INDEX_MAX;
    uint64_t after = (uint64_t)ks->used + klen + 8 * (ks->n + 2);
    if (after > max)
        return ferry__err(FERRY_EOVERFLOW,
                          "%s: the key index passes index_max=%llu bytes at entry %llu (raise "
                          "index_max)",
                          path, (unsigned long long)max, (unsigned long long)ks->n);
    if (ks->n + 2 > ks->cap_n) {
        uint64_t c = ks->cap_n ? 2 * ks->cap_n : 1024;
        uint64_t *o = ferry__realloc(ks->off, (size_t)c * sizeof *o);
        if (!o)
            return ferry__err(FERRY_ENOMEM, "%s: out of memory for the key index", path);
        ks->off = o;
        ks->cap_n = c;
    }
    if (ks->used + klen > ks->cap) {
        size_t c = ks->cap ? 2 * ks->cap : 65536;
        while (c < ks->used + klen)
            c *= 2;
        uint8_t *a = ferry__realloc(ks->arena, c);
        if (!a)
            return ferry__err(FERRY_ENOMEM, "%s: out of memory for the key index", path);
        ks->arena = a;
        ks->cap = c;
    }
    if (ks->n == 0)
        ks->off[0] = 0;
    if (klen)
        memcpy(ks->arena + ks->used, k, klen);
    ks->used += klen;
    ks->longest = klen > ks->longest ? klen : ks->longest;
    ks->off[++ks->n] = ks->used;
    return 0;
}

void ferry__kv_keys_get(const ferry__kv_keys *ks, uint64_t i, const uint8_t **k, size_t *klen)
{
    *k = ks->arena + ks->off[i];
    *klen = (size_t)(ks->off[i + 1] - ks->off[i]);
}

void ferry__kv_keys_free(ferry__kv_keys *ks)
{
    ferry__free(ks->arena);
    ferry__free(ks->off);
    memset(ks, 0, sizeof *ks);
}

int ferry__kv_lib_err(const char *path, const char *lib, const char *what, const char *err)
{
    const char *e = err ? err : "unknown error";
    int rc = FERRY_EIO;
    if (!strncmp(e, "Corruption", 10))
        rc = FERRY_ECORRUPT;
    else if (!strncmp(e, "NotFound", 8) || strstr(e, "does not exist") || strstr(e, "No such file"))
        rc = FERRY_ENOENT;
    else if (!strncmp(e, "Invalid argument", 16))
        rc = FERRY_EINVAL;
    if (what)
        return ferry__err(rc, "%s: %s: %s: %s", path, what, lib, e);
    return ferry__err(rc, "%s: %s: %s", path, lib, e);
}
