/*
 * ferry/sample.h - the words every layer speaks: fields, samples, positions, the
 * worker context and its stages.
 *
 * A sample is a fixed list of named fields (its schema). Each field has a dtype and
 * a per-sample shape. A fixed field has that exact shape. A variable field has a
 * first dimension that varies up to a bound (shape[0]); the loader pads it with
 * zeros to the bound and gives a lengths tensor beside it.
 *
 * Samples are written in place: the loader hands a reader a ferry_sample whose
 * data pointers lead straight into the sample's slot of a batch buffer, so a
 * reader never allocates per sample. Scratch memory that a reader needs per call
 * comes from ferry_ctx_scratch (per worker, reused).
 *
 * The formats (ferry/records.h, ferry/npy.h, ...) read and write samples in these
 * terms and name the datasets their constructors make without including
 * ferry/dataset.h, which hands samples to the loader (ferry/loader.h).
 */
#ifndef FERRY_SAMPLE_H
#define FERRY_SAMPLE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_MAX_FIELDS 32
#define FERRY_MAX_NAME 64

typedef struct ferry_field {
    char name[FERRY_MAX_NAME];
    ferry_dtype dtype;
    int ndim; /* dimensions of one sample, 0 for a scalar */
    int64_t shape[FERRY_MAX_DIMS];
    int variable; /* nonzero: dim 0 varies, up to shape[0] */
} ferry_field;

/* Bytes of one sample's field at full size (variable fields at their bound). */
FERRY_API size_t ferry_field_nbytes(const ferry_field *f);
/* Elements of one row along dim 0 (product of shape[1..]); 1 for a scalar. */
FERRY_API size_t ferry_field_row_elems(const ferry_field *f);

/* Where a stream's sample came from, so that it can be read again (a resume
 * refills a shuffle buffer this way): set by the next() of a resumable stream
 * (ferry_stream_resumable), kept by decorators, handed back to fetch. epoch is
 * the epoch the sample was read under (ferry_ctx_epoch during next: ferry_stream_next
 * sets it); a, b and c are the stream's own (for a file: which file, the offset, a
 * record or line number). */
typedef struct ferry_pos {
    uint64_t epoch, a, b, c;
} ferry_pos;

/* Where a reader writes one sample. data[f] has room for ferry_field_nbytes of field
 * f. For a variable field the reader writes length[f] rows (0..bound), nothing past
 * them, and sets length[f]; the batch holds zeros past them (the loader zeroes only
 * as far as an earlier sample in the slot wrote, so a reader that writes past its
 * length breaks this; on an error return it may have written anything). For a
 * fixed field the reader writes every byte. Valid only during the call it was
 * passed to. */
typedef struct ferry_sample {
    int nfields;
    void *const *data;
    int64_t *length;
    ferry_pos pos; /* streams: where next() read it; unused by map-style datasets */
} ferry_sample;

/* The per-call context of a worker: who is calling, and scratch memory. */
typedef struct ferry_ctx ferry_ctx;

/* Worker number (0..workers-1; 0 when the caller's thread does the work). */
FERRY_API uint32_t ferry_ctx_worker(const ferry_ctx *c);
FERRY_API uint64_t ferry_ctx_seed(const ferry_ctx *c);
FERRY_API uint64_t ferry_ctx_epoch(const ferry_ctx *c);
/* A generator positioned at draw 0 of (seed, epoch, index): the same for every
 * worker count. */
FERRY_API void ferry_ctx_rng(const ferry_ctx *c, uint64_t index, ferry_rng *out);
/* Per-worker scratch of at least n bytes, 64-byte aligned. Grows as needed and is
 * kept; valid until the next ferry_ctx_scratch call on this context. NULL on
 * allocation failure (with the thread's message set). */
FERRY_API void *ferry_ctx_scratch(ferry_ctx *c, size_t n);

/* Stages for timing (ferry_ctx_stage_add, ferry_loader_stats). */
typedef enum ferry_stage {
    FERRY_STAGE_READ = 0,
    FERRY_STAGE_DECODE,
    FERRY_STAGE_TRANSFORM,
    FERRY_STAGE_WRITE,
    FERRY_STAGE_COUNT
} ferry_stage;
/* Adds ns to a stage of this worker. Time of get/next that no stage claims is
 * counted as READ. */
FERRY_API void ferry_ctx_stage_add(ferry_ctx *c, ferry_stage stage, uint64_t ns);

/* A reader that cuts a sample to fit its fields (a line longer than its bound)
 * counts it here, n samples at a time: the loader adds the counts to its stats
 * (ferry_loader_stats.truncated), so that cutting is never silent. */
FERRY_API void ferry_ctx_count_truncated(ferry_ctx *c, uint64_t n);
/* Samples counted as cut on this context so far (a context of your own; a
 * loader's workers hand theirs to the loader's stats as they go). */
FERRY_API uint64_t ferry_ctx_truncated(const ferry_ctx *c);

/* A context for reading samples yourself (ferry_dataset_get, a format's reader),
 * outside a loader. */
FERRY_API int ferry_ctx_create(ferry_ctx **out, uint64_t seed, uint64_t epoch);
FERRY_API void ferry_ctx_free(ferry_ctx *c);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_SAMPLE_H */
