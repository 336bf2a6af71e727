/*
 * A remote file opened when first read: the policy that decides between fetching
 * a file whole into the node cache and reading one sample of it by a ranged GET.
 * A file a loader hints (it knows the batches ahead), a file already cached and a
 * file read more than a few times are mapped whole; a few samples of a file
 * nobody asked for (`ferry head`, one dataset[i]) are read by ranged GETs, so that
 * looking at a sample of a large remote set does not fetch its shards.
 */
#include "remote.h"

#include <stdlib.h>
#include <string.h>

unsigned ferry__lazy_ranged_max(void)
{
    static _Atomic int max = -1;
    int m = atomic_load_explicit(&max, memory_order_relaxed);
    if (m < 0) {
        const char *v = getenv("FERRY_REMOTE_RANGED");
        int64_t x;
        m = v && ferry__parse_i64(v, 0, 1 << 20, &x) ? (int)x : 8;
        atomic_store_explicit(&max, m, memory_order_relaxed);
    }
    return (unsigned)m;
}

int ferry__lazy_init(ferry__lazy *z, const char *path)
{
    memset(z, 0, sizeof *z);
    if (!(z->path = ferry__strdup(path)))
        return ferry__err(FERRY_ENOMEM, "%s: out of memory", path);
    pthread_mutex_init(&z->mu, NULL);
    return 0;
}

void ferry__lazy_free(ferry__lazy *z)
{
    if (!z || !z->path)
        return;
    ferry__unmap(&z->map);
    pthread_mutex_destroy(&z->mu);
    ferry__free(z->path);
    z->path = NULL;
}

int ferry__lazy_map(ferry__lazy *z, const uint8_t **data)
{
    void *d = atomic_load_explicit(&z->data, memory_order_acquire);
    if (!d) {
        pthread_mutex_lock(&z->mu);
        /* under the lock: threads that want it at once wait for one fetch */
        d = atomic_load_explicit(&z->data, memory_order_relaxed);
        int rc = 0;
        if (!d && (rc = ferry__map_file(&z->map, z->path)) == 0) {
            /* an empty file maps to NULL: any non-NULL address says "mapped" */
            d = z->map.data ? z->map.data : (void *)z;
            atomic_store_explicit(&z->data, d, memory_order_release);
        }
        pthread_mutex_unlock(&z->mu);
        if (rc < 0)
            return rc;
    }
    *data = d == (void *)z ? NULL : d;
    return 0;
}

void ferry__lazy_want(ferry__lazy *z)
{
    if (atomic_load_explicit(&z->data, memory_order_relaxed) ||
        atomic_exchange_explicit(&z->wanted, true, memory_order_relaxed))
        return;
    ferry__remote_prefetch(z->path);
}

int ferry__lazy_read(ferry__lazy *z, void *buf, uint64_t off, size_t len, const uint8_t **p)
{
    const uint8_t *data;
    if (atomic_load_explicit(&z->data, memory_order_acquire) ||
        atomic_load_explicit(&z->wanted, memory_order_relaxed) || ferry__remote_cached(z->path)) {
        int rc = ferry__lazy_map(z, &data);
        if (rc == 0)
            *p = data + off;
        return rc;
    }
    int rc = ferry__remote_read(z->path, buf, off, len);
    if (rc == 0)
        *p = buf;
    if (atomic_fetch_add_explicit(&z->ranged, 1, memory_order_relaxed) + 1 >=
        ferry__lazy_ranged_max())
        ferry__lazy_want(z); /* read often: the whole file is cheaper */
    return rc;
}
