/*
 * The files of a file-sharded source (TFRecord, WebDataset): a file, a directory
 * (its files that `want` accepts, in name order) or a glob pattern (its matches in
 * name order).
 */
#ifndef FERRY_SHARD_FILES_H
#define FERRY_SHARD_FILES_H

#include "dataset_internal.h"
#include "ferry/sampler.h"

typedef struct ferry__shard_files {
    char **paths;
    size_t n;
} ferry__shard_files;

/* kind names the source in messages; what = "TFRecord files" and the like. */
int ferry__shard_files_list(ferry__shard_files *out, const char *kind, const char *location,
                            bool (*want)(const char *name), const char *what);
void ferry__shard_files_free(ferry__shard_files *s);

/* A file-sharded stream's saved place in the epoch's order of files, checked
 * for an iterator of stream shard `shard` of `step` now at place `now` (a fresh
 * one: its first) with that `order`: `place` must be one of this shard's (or
 * the one just past the last file), `file` the file at that place (UINT64_MAX
 * past the last), and a state past the last file or with no file open (`open`
 * false) must name no position in one (`names`). 0 and *path, the file's (NULL
 * past the last file); or FERRY_ECORRUPT saying which, `who` ("tfrecord
 * stream") and `unit` ("file", "tar") naming things. */
int ferry__shard_files_place(const ferry__shard_files *f, const ferry_permutation *order,
                             const char *who, const char *unit, uint64_t shard, uint64_t step,
                             uint64_t now, uint64_t place, uint64_t file, bool open, bool names,
                             const char **path);

#endif
