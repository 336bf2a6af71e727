/*
 * ferry/tokens.h - llm.c token shards: a dataset of token windows, and a writer.
 *
 * A shard (llm.c's dev/data/data_common.py write_datafile) is a 1024-byte header
 * of 256 little-endian int32: [0] = 20240520 (magic), [1] = version (1: uint16
 * tokens, GPT-2; 2: uint32 tokens, Llama 3), [2] = the token count, the rest 0;
 * then the tokens, little-endian. The count must agree with the file's size.
 * llm.c's newer Llama 3 shards have [0] = 20240801 and [1] = 7 (uint32 tokens),
 * the same layout otherwise; both open. A file of bare tokens without the header
 * (nanoGPT's prepare.py writes train.bin as np.uint16) opens with raw = 1.
 *
 * Samples are windows of T + 1 tokens, as llm.c's DataLoader cuts them: window w
 * of a shard starts at token w * T and gives "input" = tokens [wT, wT + T) and
 * "target" = tokens [wT + 1, wT + T + 1) (both [T], the shard's dtype).
 * Consecutive windows share one token, so a shard of N tokens holds (N - 1) / T
 * windows; the last (N - 1) % T tokens of each shard are in none
 * (ferry_tokens_dropped says how many in all). So an epoch sees (N - 1) / T
 * contexts of a shard, always the same ones; `stride` (windows every S tokens,
 * down to 1: every offset, as nanoGPT's get_batch samples) and `random_offset`
 * (a new offset each epoch, keyed by seed and epoch) widen that (below).
 *
 * The dataset is map-style over every window of every shard (shards in sorted
 * path order), so any sampler can order it and a distributed sampler gives ranks
 * disjoint windows. llm.c's own order is an option (order = FERRY_TOKENS_LLMC).
 *
 * Thread rules: a dataset may be read from any number of threads at once; a
 * writer belongs to one thread.
 */
#ifndef FERRY_TOKENS_H
#define FERRY_TOKENS_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */

#define FERRY_TOKENS_MAGIC 20240520
#define FERRY_TOKENS_MAGIC_LLAMA3 20240801 /* version 7: uint32 tokens */
#define FERRY_TOKENS_HEADER 1024

typedef enum ferry_tokens_order {
    FERRY_TOKENS_ALL = 0, /* every window of every shard: index i is window i */
    /* llm.c's DataLoader unshuffled, for one rank: per shard, chunks of
     * batch * world windows; rank r takes windows [r * batch, (r + 1) * batch) of
     * each chunk, and a shard's last, partial chunk is skipped as llm.c skips it.
     * Read it in sequential order to see llm.c's batches. */
    FERRY_TOKENS_LLMC = 1
} ferry_tokens_order;

typedef struct ferry_tokens_opts {
    const char *pattern; /* a path or a glob(3) pattern ("data/fineweb_train_*.bin") */
    uint64_t seq;        /* T: tokens of input per sample; 0 = 1024 */
    ferry_dtype dtype;   /* FERRY_U16 or FERRY_U32 to insist on one; 0 = from the version */
    ferry_tokens_order order;
    /* the fields' dtype: 0 = the shard's (uint16 or uint32, copied as stored);
     * FERRY_I32 or FERRY_I64 widen each token on the way (what an embedding
     * lookup takes: llm.c's int, PyTorch's long) */
    ferry_dtype out;
    uint64_t batch;            /* LLMC order: B, sequences per rank per step (>= 1) */
    uint64_t rank, world_size; /* LLMC order: this process of world_size (0 means 1) */
    /* 1: the files are bare little-endian tokens without llm.c's header (nanoGPT's
     * train.bin), of dtype (0 means uint16); a size that is not a whole number of
     * tokens is FERRY_ECORRUPT */
    int raw;
    /* Order ALL only. Windows start every `stride` tokens (0 = seq: side by
     * side, as llm.c cuts them; 1 = at every token, the contexts nanoGPT's
     * get_batch draws from; between: overlapping; over seq + 1: gaps). A
     * shard of N tokens then holds (N - seq - 1) / stride + 1 windows. */
    uint64_t stride;
    /* Order ALL only. Nonzero: each epoch, each shard's windows start at a
     * random offset in [0, stride) (then every stride tokens): keyed by (the
     * loader's seed, the epoch, the shard), so the same for any number of
     * workers and ranks and again on a resume, and a new one each epoch, so
     * that over epochs windows start at every token. A shard then holds
     * (N - seq - stride) / stride + 1 windows, so that every offset fits the
     * same number. Outside a loader (no seed, no epoch) the offset is that of
     * seed 0, epoch 0. */
    int random_offset;
} ferry_tokens_opts;

/* Opens every shard the pattern matches (sorted by path; no match is
 * FERRY_ENOENT). Each header is checked: magic, version, and count against the
 * file's size (FERRY_ECORRUPT naming the file and the header's offset). All
 * shards must have the same token size. */
FERRY_API int ferry_dataset_tokens(ferry_dataset **out, const ferry_tokens_opts *o);
/* Tokens of a tokens dataset that no window covers (each shard's tail). */
FERRY_API uint64_t ferry_tokens_dropped(const ferry_dataset *ds);

/* ---- Writing a shard ---- */
typedef struct ferry_tokens_writer ferry_tokens_writer;

/* Starts a shard at path (FERRY_U16: version 1; FERRY_U32: version 2). Tokens go
 * to a temporary beside it; commit writes the header and renames it into place,
 * so a reader sees the old file or the whole new one. */
FERRY_API int ferry_tokens_writer_open(ferry_tokens_writer **out, const char *path,
                                       ferry_dtype dtype);
/* Appends n tokens (uint16_t or uint32_t, as opened). A shard holds at most
 * INT32_MAX tokens (the header's count is an int32): FERRY_EOVERFLOW past it. */
FERRY_API int ferry_tokens_writer_append(ferry_tokens_writer *w, const void *tokens, size_t n);
/* Writes the header, syncs and renames into place; frees w whatever happens. */
FERRY_API int ferry_tokens_writer_commit(ferry_tokens_writer *w);
/* Removes the temporary and frees w. NULL is fine. */
FERRY_API void ferry_tokens_writer_abort(ferry_tokens_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_TOKENS_H */
