/*
 * ferry/tensors.h - named tensors in the safetensors format: checkpoints saved and
 * loaded fast and safely.
 *
 * A safetensors file (https://github.com/huggingface/safetensors) is an 8-byte
 * little-endian header length N, N bytes of JSON naming each tensor's dtype, shape
 * and [begin, end) byte range in the data section, an optional "__metadata__"
 * object of string values, then the data section: the tensors' bytes, C order,
 * little-endian, back to back. Hugging Face, candle and safetensors-cpp read and
 * write it; unlike a pickle, loading one runs no code.
 *
 * Saving (ferry_tensors_save) writes a temporary file beside the target, with large
 * tensors cut into chunks written by several threads straight to their final
 * offsets, syncs it and renames it over the target: a reader (or a crash at any
 * moment) sees the old file or the whole new one, never a part. By default each
 * tensor's CRC-32C goes into __metadata__ under "ferry.crc32c" (see
 * FERRY_TENSORS_CRC_KEY), where every other reader sees only one more metadata
 * string.
 *
 * Loading (ferry_tensors_open) maps the file and hands out read-only views of the
 * mapping, valid until ferry_tensors_free: no copy, nothing read until touched
 * (except by the CRC check). Selection by names or prefix, and renaming by
 * stripping and adding a prefix, follow Caffe2's LoadOp. CRCs present in the file
 * are checked at open unless FERRY_TENSORS_NO_VERIFY is set.
 *
 * The header is untrusted. A file is refused (FERRY_ECORRUPT, with a message
 * naming the file, the tensor and the offset where it applies) when: it is shorter
 * than 8 bytes; its header length is past the end of the file or over the header
 * limit; the header is not one JSON object, or not valid UTF-8, or nests deeper
 * than 64; a tensor lacks dtype, shape or data_offsets, has an unknown dtype, more
 * than FERRY_TENSORS_MAX_DIMS dimensions, or a byte count that disagrees with its
 * dtype and shape; two tensors share a name; the data ranges are not contiguous
 * from 0 without overlap, or do not end exactly at the end of the file;
 * __metadata__ holds a non-string value or a key twice; the stored CRCs are
 * malformed, not one for each tensor, or do not match a tensor's bytes. Memory taken at open is
 * bounded by the header size (at most the header limit), never by what the header claims.
 *
 * A mapping shows the file as it is: if another process truncates the file while
 * it is open, ferry's own reads of it (the header, the CRC checks and the copy at
 * open, ferry_tensors_verify) fail with FERRY_EIO naming the file, but the views
 * handed out are the caller's: touching one past the new end raises SIGBUS, as
 * with any mapped file (replacing it by rename, as ferry_tensors_save does, is
 * safe: the mapping keeps the old file). FERRY_TENSORS_COPY takes the bytes at
 * open instead.
 *
 * Threads: a ferry_tensors handle is read-only after open and may be read from any
 * number of threads. ferry_tensors_save may run on several threads at once for
 * different paths.
 */
#ifndef FERRY_TENSORS_H
#define FERRY_TENSORS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every safetensors dtype, by its name in the header. Values are only appended. */
typedef enum ferry_st_dtype {
    FERRY_ST_INVALID = 0,
    FERRY_ST_BOOL,
    FERRY_ST_U8,
    FERRY_ST_I8,
    FERRY_ST_U16,
    FERRY_ST_I16,
    FERRY_ST_U32,
    FERRY_ST_I32,
    FERRY_ST_U64,
    FERRY_ST_I64,
    FERRY_ST_F16,
    FERRY_ST_BF16,
    FERRY_ST_F32,
    FERRY_ST_F64,
    FERRY_ST_F8_E4M3,
    FERRY_ST_F8_E5M2,
    FERRY_ST_F8_E8M0,
    FERRY_ST_F4,      /* float4 e2m1, two to a byte */
    FERRY_ST_F6_E2M3, /* float6, packed: a tensor's bits must fill whole bytes */
    FERRY_ST_F6_E3M2,
    FERRY_ST_C64, /* complex64: two float32 */
    FERRY_ST_DTYPE_COUNT
} ferry_st_dtype;

/* The header's name ("F32", "BF16", "F8_E4M3", ...); "INVALID" otherwise. */
FERRY_API const char *ferry_st_dtype_name(ferry_st_dtype dt);
/* The dtype a header name stands for (exact, case-sensitive), else FERRY_ST_INVALID. */
FERRY_API ferry_st_dtype ferry_st_dtype_from_name(const char *name);
/* Bits per element (1..64); 0 for an invalid dtype. */
FERRY_API unsigned ferry_st_dtype_bits(ferry_st_dtype dt);
/* The core dtype with the same bytes (FERRY_F32 for FERRY_ST_F32, ...), or
 * FERRY_DTYPE_INVALID where core has none (F8, F4, F6, C64). */
FERRY_API ferry_dtype ferry_st_dtype_core(ferry_st_dtype dt);

#define FERRY_TENSORS_MAX_DIMS 64
/* The default header limit: 100,000,000 bytes, the safetensors library's own. */
#define FERRY_TENSORS_DEFAULT_MAX_HEADER ((uint64_t)100000000)
/* The metadata key of the tensors' CRC-32Cs: its value holds 8 lowercase hex
 * digits for each tensor, in file order (by offset), separated by commas. One key
 * rather than one a tensor keeps the header of a 10,000-tensor file short. */
#define FERRY_TENSORS_CRC_KEY "ferry.crc32c"

/* ---- Loading ---- */

typedef struct ferry_tensors ferry_tensors;

/* One loaded tensor. Everything it points to is owned by the handle and valid
 * until ferry_tensors_free. */
typedef struct ferry_tensor_info {
    const char *name;      /* after renaming (strip_prefix, add_prefix); NUL-terminated UTF-8 */
    const char *file_name; /* as stored in the file */
    ferry_st_dtype dtype;
    int ndim;
    const int64_t *shape; /* ndim values (NULL when ndim is 0: a scalar) */
    uint64_t numel;
    /* The bytes: a read-only view of the mapping, or the handle's own copy with
     * FERRY_TENSORS_COPY (then 64-byte aligned and writable). A view is aligned as
     * the file puts it: files whose data section starts at an odd offset (some
     * writers do not pad the header) give unaligned views. NULL when nbytes is 0. */
    const void *data;
    uint64_t nbytes;
    uint64_t offset; /* of the first byte in the file */
    int has_crc;     /* 1 when the file stores this tensor's CRC-32C */
    uint32_t crc;    /* the stored CRC-32C (when has_crc) */
} ferry_tensor_info;

enum {
    /* Copy the selected tensors into memory owned by the handle and drop the
     * mapping (the file can then be replaced or deleted without affecting them). */
    FERRY_TENSORS_COPY = 1,
    /* Do not check stored CRCs at open (ferry_tensors_verify still can). */
    FERRY_TENSORS_NO_VERIFY = 2,
    /* Requested names the file lacks are left out instead of failing (Caffe2's
     * allow_incomplete). */
    FERRY_TENSORS_ALLOW_MISSING = 4,
};

typedef struct ferry_tensors_opts {
    /* Load only these names (as stored in the file); NULL = all. A name the file
     * lacks is FERRY_ENOENT unless FERRY_TENSORS_ALLOW_MISSING. */
    const char *const *names;
    size_t nnames;
    /* Load only names that start with this (as stored); NULL = all. With names,
     * a tensor must pass both. */
    const char *prefix;
    /* Renaming, in this order: strip_prefix is removed from the names that start
     * with it, then add_prefix is put in front of every name. Names that collide
     * after renaming are FERRY_EINVAL. */
    const char *strip_prefix;
    const char *add_prefix;
    unsigned flags;      /* FERRY_TENSORS_* */
    uint64_t max_header; /* 0 = FERRY_TENSORS_DEFAULT_MAX_HEADER */
    unsigned threads;    /* for CRC checks and copies; 0 = up to 8, one per CPU */
} ferry_tensors_opts;

/* Opens path (opts may be NULL: everything, zero-copy, CRCs checked).
 * *out is NULL on failure. */
FERRY_API int ferry_tensors_open(ferry_tensors **out, const char *path,
                                 const ferry_tensors_opts *opts);
/* The same on bytes in memory (borrowed: they must outlive the handle unless
 * FERRY_TENSORS_COPY), named `name` in messages. */
FERRY_API int ferry_tensors_open_memory(ferry_tensors **out, const void *data, size_t size,
                                        const char *name, const ferry_tensors_opts *opts);
/* NULL is fine. Unmaps the file: every view handed out ends here. */
FERRY_API void ferry_tensors_free(ferry_tensors *t);

/* The selected tensors, in file order (by offset). */
FERRY_API size_t ferry_tensors_count(const ferry_tensors *t);
/* Tensor i (< count), or NULL. */
FERRY_API const ferry_tensor_info *ferry_tensors_at(const ferry_tensors *t, size_t i);
/* The tensor with this name (after renaming), or NULL: a binary search. */
FERRY_API const ferry_tensor_info *ferry_tensors_find(const ferry_tensors *t, const char *name);
/* How many tensors the file holds (selected or not). */
FERRY_API size_t ferry_tensors_file_count(const ferry_tensors *t);

/* __metadata__ entries, in file order, without ferry's own CRC entry (the CRCs
 * are in ferry_tensor_info). Strings owned by the handle. */
FERRY_API size_t ferry_tensors_metadata_count(const ferry_tensors *t);
/* Entry i: its key in *key, its value returned; NULL when i is out of range. */
FERRY_API const char *ferry_tensors_metadata_at(const ferry_tensors *t, size_t i, const char **key);
/* The value of a metadata key, or NULL. */
FERRY_API const char *ferry_tensors_metadata_get(const ferry_tensors *t, const char *key);

/* Checks tensor i's stored CRC against its bytes: 0 when it matches,
 * FERRY_ENOENT when the file stores none, FERRY_ECORRUPT (naming the file, the
 * tensor and its offset) when it does not match. */
FERRY_API int ferry_tensors_verify(const ferry_tensors *t, size_t i);

/* ---- Saving ---- */

/* One tensor to save: C-contiguous little-endian bytes of numel * bits / 8 bytes
 * (numel = product of shape; the bits must fill whole bytes). Borrowed for the
 * call only. */
typedef struct ferry_tensor_src {
    const char *name; /* UTF-8, unique, not "__metadata__" */
    ferry_st_dtype dtype;
    int ndim; /* 0..FERRY_TENSORS_MAX_DIMS */
    const int64_t *shape;
    const void *data; /* may be NULL only when the byte count is 0 */
} ferry_tensor_src;

typedef struct ferry_tensors_save_opts {
    /* __metadata__ strings (UTF-8); keys unique and not FERRY_TENSORS_CRC_KEY. */
    const char *const *meta_keys;
    const char *const *meta_values;
    size_t nmeta;
    int no_crc;           /* 1 = store no CRCs */
    unsigned threads;     /* writer threads; 0 = up to 8, one per CPU */
    uint64_t chunk_bytes; /* bytes per write; 0 = 16 MiB; 64 KiB..1 GiB */
} ferry_tensors_save_opts;

/* Writes the n tensors to path (opts may be NULL: CRCs on, default threads):
 * temporary file, chunks written by several threads at their final offsets, fsync,
 * rename over path, fsync of the directory. On failure path is left as it was and
 * the temporary removed. In the file, tensors are ordered by element size, largest
 * first (then as given), so that every tensor starts aligned to its element size;
 * the header is padded with spaces to a multiple of 8 bytes. */
FERRY_API int ferry_tensors_save(const char *path, const ferry_tensor_src *tensors, size_t n,
                                 const ferry_tensors_save_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TENSORS_H */
