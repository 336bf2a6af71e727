/*
 * The safetensors handle and the helpers its reader (tensors.c), header parser
 * (tensors_header.c) and writer (tensors_save.c) share.
 */
#ifndef FERRY_TENSORS_INTERNAL_H
#define FERRY_TENSORS_INTERNAL_H

#include "ferry/tensors.h"

#include "../core/internal.h"
#include "../io/io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- dtypes ---- */

/* Whether dt is a dtype other than FERRY_ST_INVALID. */
bool ferry__tensors_dtype_ok(ferry_st_dtype dt);
/* The dtype named by the n bytes at s (not NUL-terminated). */
ferry_st_dtype ferry__tensors_dtype_from_bytes(const char *s, size_t n);
/* Bytes of numel elements of dt: false when they overflow or do not fill whole
 * bytes. */
bool ferry__tensors_byte_count(ferry_st_dtype dt, uint64_t numel, uint64_t *out);

/* The threads of CRC checks, copies and writes (ferry__parallel_for): as asked, at
 * most 64 (a writer keeps a staging buffer per thread); 0 = one per CPU, up to 8. */
unsigned ferry__tensors_threads(unsigned asked);

/* Grows *p to hold need elements of elem bytes (doubling, from 16). */
bool ferry__tensors_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Whether k is the metadata key of ferry's CRCs (hidden from the caller). */
bool ferry__tensors_is_crc_key(const char *k);

/* ---- name lookups: open addressing over a keyed FNV-1a hash ----
 * The key differs from handle to handle, so that a header cannot be made of names
 * that collide on purpose. */

typedef struct ferry__name_index {
    uint32_t *slots; /* index + 1; 0 = empty; SKIP = a name not selected (probing goes on) */
    size_t mask;
} ferry__name_index;

/* The most names an index holds (a header of the default limit holds 2 million). */
#define FERRY__TENSORS_MAX_NAMES ((size_t)UINT32_MAX - 1)

typedef const char *(*ferry__name_of_fn)(const void *ctx, size_t i);

/* Builds the index of n names; *dup is the first name seen twice (or SIZE_MAX). */
bool ferry__tensors_index_build(ferry__name_index *ix, size_t n, ferry__name_of_fn name_of,
                                const void *ctx, uint64_t key, size_t *dup);

/* ---- the handle ---- */

/* Where the header puts a tensor (beside its ferry_tensor_info in all). */
typedef struct ferry__tensor_span {
    uint64_t begin, end; /* in the data section */
    size_t shape_at;     /* index of its first dimension in shapes */
} ferry__tensor_span;

struct ferry_tensors {
    char *label; /* the path, for messages */
    ferry__map map;
    const uint8_t *base; /* the whole file */
    size_t size;
    uint64_t data_start;
    char *arena; /* decoded strings of the header */
    size_t arena_used, arena_cap;
    int64_t *shapes;
    size_t nshapes, cap_shapes;
    ferry_tensor_info *all;    /* every tensor, in header order */
    ferry__tensor_span *spans; /* beside all */
    size_t nall, cap_all, cap_spans;
    const char **meta_keys, **meta_vals;
    size_t nmeta, cap_meta;
    /* selected, in file order: all itself when that is every tensor (the usual
     * case, which then costs no copy) */
    ferry_tensor_info *sel;
    size_t nsel;
    ferry__name_index names; /* of sel, by name after renaming */
    uint64_t hash_key;
    char *renamed; /* names after renaming */
    void *copy;    /* FERRY_TENSORS_COPY: the tensors' bytes */
};

/* The file name of tensor i of all (ctx: the handle), for an index of them. */
const char *ferry__tensors_entry_name(const void *ctx, size_t i);

/* ---- the header (tensors_header.c) ---- */

/* The header, parsed from the mapping under a region (what it allocates is
 * t's): a file cut short meanwhile is an error naming it, not a SIGBUS. */
int ferry__tensors_read_header(ferry_tensors *t, uint64_t max_header);

/* Checks what the header says against itself and the file. On success
 * *by_off_out holds the indexes of the tensors in file order and *ix_out indexes them by name
 * (the caller frees both). */
int ferry__tensors_check_header(ferry_tensors *t, uint64_t data_len, size_t **by_off_out,
                                ferry__name_index *ix_out);

#endif
