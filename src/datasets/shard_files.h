/*
 * The files of a file-sharded source (TFRecord, WebDataset): a file, a directory
 * (its files that `want` accepts, in name order) or a glob pattern (its matches in
 * name order).
 */
#ifndef FERRY_SHARD_FILES_H
#define FERRY_SHARD_FILES_H

#include "dataset_internal.h"

typedef struct ferry__shard_files {
    char **paths;
    size_t n;
} ferry__shard_files;

/* kind names the source in messages; what = "TFRecord files" and the like. */
int ferry__shard_files_list(ferry__shard_files *out, const char *kind, const char *location,
                            bool (*want)(const char *name), const char *what);
void ferry__shard_files_free(ferry__shard_files *s);

/* The kinds over file shards, opened from a parsed description. */
int ferry__tfrecord_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s);
int ferry__wds_open_spec(ferry_dataset **ds, ferry_stream **st, ferry__spec *s);

#endif
