/*
 * ferry/remote.h - remote locations: what the process has fetched.
 *
 * Wherever a source takes a file, a directory or a glob it also takes
 * s3://BUCKET/KEY-or-PREFIX and http(s)://URL (docs/remote.md). Remote objects
 * are read through one cache per node (cache=DIR in the source text, else
 * FERRY_CACHE, else ~/.cache/ferry): each is fetched once into a local file,
 * which the readers then use as they use local files.
 *
 * The counters are the process's, summed over every thread and source, from the
 * start of the process; a loader's statistics (ferry_loader_stats) carry them too.
 *
 * Thread rules: safe from any thread.
 */
#ifndef FERRY_REMOTE_H
#define FERRY_REMOTE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_remote_stats {
    uint64_t downloaded_bytes; /* bodies received from servers */
    uint64_t cache_hits;       /* opens served by the cache (or by another process's fetch) */
    uint64_t cache_misses;     /* objects fetched into the cache */
    uint64_t retries;          /* requests tried again (5xx, 429, resets, cut-short bodies) */
    uint64_t fetch_wait_ns;    /* time threads waited on fetches to open a remote file */
    uint64_t requests;         /* HTTP requests sent */
    uint64_t ranged_reads;     /* parts of objects read by a ranged GET, not through the cache
                                * (a sample of an uncached shard, a shard's header) */
    /* memory the transfers' buffers hold now, and the most they held: at most
     * FERRY_REMOTE_CONNECTIONS (16) transfers of 1.5 MiB each (512 KiB received,
     * 1 MiB written out) */
    uint64_t fetch_buffer_bytes, fetch_buffer_peak;
} ferry_remote_stats;

/* The counters so far. */
FERRY_API void ferry_remote_stats_get(ferry_remote_stats *out);

/* Waits until the fetches ahead and revalidations running in the background (they
 * outlive the dataset that asked for them: the cache is the node's) have finished,
 * up to timeout_s seconds: before removing a cache directory, or to time a cold
 * read. 0, FERRY_ETIMEDOUT with the number still under way, or FERRY_EINVAL. */
FERRY_API int ferry_remote_wait(double timeout_s);

/* 1 when this build reads remote locations (it has libcurl), else 0. */
FERRY_API int ferry_remote_available(void);

#ifdef __cplusplus
}
#endif

#endif
