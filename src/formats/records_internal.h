/*
 * Record shard internals shared with the datasets layer and the tests
 * (docs/record-format.md specifies the bytes).
 */
#ifndef FERRY_RECORDS_INTERNAL_H
#define FERRY_RECORDS_INTERNAL_H

#include "ferry/records.h"
#include "../core/internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on what a file may ask of a reader. */
#define FERRY__RECORD_MAX_SCHEMA ((uint32_t)64 << 10) /* schema bytes S */
#define FERRY__RECORD_MAX_SIZE ((uint32_t)1 << 31)    /* a record's stored or raw size */
#define FERRY__MANIFEST_MAX ((uint64_t)64 << 20)      /* bytes of a NAME.manifest */

/* ---- The byte layout, shared by the writer (records_write.c) and the reader ---- */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the record format is little-endian; this host is not"
#endif
#define FERRY__REC_MAGIC "FERRYREC"
#define FERRY__REC_END_MAGIC "FERRYEND"
#define FERRY__REC_VERSION 1u
#define FERRY__REC_FLAG_ZSTD 1u
#define FERRY__REC_FLAG_SET 2u /* the set identity follows the header */
#define FERRY__REC_HEADER 24u
#define FERRY__REC_IDENTITY 16u /* u64 set id, u32 shard index, u32 zero */
#define FERRY__REC_RECORD_HEADER 16u
#define FERRY__REC_TRAILER 32u

static inline uint64_t ferry__align8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

/* A compression context that allocates through ferry, so that zstd's allocations
 * fail under the tests' injection like every other; NULL when out of memory. */
struct ZSTD_CCtx_s *ferry__record_cctx_new(void);
/* FERRY_ENOMEM for a zstd error that is an allocation failure, else FERRY_ECORRUPT. */
int ferry__record_zstd_rc(size_t r);

/* ---- The manifest (NAME.manifest) ---- */
typedef struct ferry__manifest_entry {
    char file[256]; /* a name in the manifest's directory: no '/', not "." or ".." */
    uint64_t records, bytes;
    uint32_t crc; /* CRC-32C of the whole file */
} ferry__manifest_entry;

/* Parses NAME.manifest: the "ferry-records 2" line, "shards N records TOTAL set ID"
 * (version 1: no set id), then N lines "FILE RECORDS BYTES CRC-IN-HEX". The number
 * of lines must be N, the records must add up to TOTAL and no file may appear
 * twice. FERRY_ECORRUPT naming the file and line on any malformed line;
 * FERRY_ENOENT / FERRY_EIO from the file layer. *entries is allocated with
 * ferry__malloc (free it with ferry__free), NULL when *n is 0 or on failure.
 * *set_id is the set's identity, which each of its shards carries; 0 for a
 * version 1 manifest, whose shards carry none. */
int ferry__manifest_read(const char *path, ferry__manifest_entry **entries, size_t *n,
                         uint64_t *set_id);

/* ---- The files of a set named NAME in its directory ---- */
#define FERRY__SET_TAG_HEX 8 /* hex digits of the set id in its shards' names */
enum {
    FERRY__SET_FILE_NONE,      /* not a file of the set */
    FERRY__SET_FILE_TEMP,      /* a writer's temporary: NAME-*.ferry.tmp.*, NAME.manifest.tmp.* */
    FERRY__SET_FILE_SHARD,     /* a shard: NAME-GENERATION-00000-of-00004.ferry */
    FERRY__SET_FILE_OLD_SHARD, /* a shard named as before generations: NAME-00000-of-00004.ferry */
};
int ferry__set_file_kind(const char *set, const char *file);

/* CRC-32C and size of a whole file, read with pread in chunks. */
int ferry__crc32c_file(const char *path, uint32_t *crc, uint64_t *size);
/* The check of a fetched copy of a shard (io/remote.h, ferry__remote_check_fn): its
 * footer and index, and the CRC-32C of every record as stored (nothing is
 * decompressed), in one pass over the mapping; the first problem is the error,
 * naming path (the cache puts url in its place), the record and its offset. */
int ferry__records_check_copy(const char *path, const char *url);

/* ---- Reading helpers for the datasets layer ---- */

/* The mapped bytes of record i, header through padding, as the index says (not
 * checked against the record: for prefetch and read-ahead hints only). Valid
 * until ferry_record_file_free. FERRY_ERANGE past the last record. */
int ferry__record_file_span(const ferry_record_file *f, uint64_t i, const void **p, size_t *n);
/* 1 when the shard's records are zstd-compressed. */
int ferry__record_file_compressed(const ferry_record_file *f);
/* The set identity in the shard's header: true with the set id and the shard's
 * index in its set, false for a shard written without one (format of before). */
bool ferry__record_file_set(const ferry_record_file *f, uint64_t *id, uint32_t *index);
/* The path the file was opened with. */
const char *ferry__record_file_name(const ferry_record_file *f);

/* ferry_record_file_read for dataset `self`, whose samples match the shard's
 * fields (see ferry__guard_direct in src/core/guard.h: called directly by a
 * loader's worker, it reads under the worker's region instead of its own). */
int ferry__record_file_read_by(const ferry_record_file *f, uint64_t i, ferry_sample *out,
                               ferry_ctx *ctx, const void *self);
/* Whether addr lies in the shard's mapping (to tell which file faulted). */
bool ferry__record_file_holds(const ferry_record_file *f, uintptr_t addr);
/* The start of the shard's mapping (valid while f lives). */
const void *ferry__record_file_base(const ferry_record_file *f);

#endif
