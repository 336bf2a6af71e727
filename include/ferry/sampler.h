/*
 * ferry/sampler.h - orders of sample indices.
 *
 * A sampler is a function of (its settings, seed, epoch) alone: position p of
 * epoch e always maps to the same index. Random orders are keyed bijections on
 * [0, n) (a Feistel network with cycle-walking), so they take O(1) memory however
 * large n is, and a resumed run can seek straight to any position.
 *
 * Thread rules: ferry_sampler_set_epoch must not run concurrently with anything
 * else on the sampler; after it, ferry_sampler_len/_at/_fill may be called from
 * any number of threads at once.
 */
#ifndef FERRY_SAMPLER_H
#define FERRY_SAMPLER_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_sampler ferry_sampler;

/* 0, 1, ..., n-1. */
FERRY_API int ferry_sampler_sequential(ferry_sampler **out, uint64_t n);

/* A random order of [0, n). Without replacement (replacement = 0): a permutation,
 * num_samples must be 0 (meaning n). With replacement: num_samples draws
 * (0 means n), each uniform on [0, n). */
FERRY_API int ferry_sampler_random(ferry_sampler **out, uint64_t n, uint64_t seed, int replacement,
                                   uint64_t num_samples);

/* A random permutation of the given indices (copied; the caller keeps its array). */
FERRY_API int ferry_sampler_subset_random(ferry_sampler **out, const uint64_t *indices,
                                          uint64_t count, uint64_t seed);

/* num_samples indices drawn with probability proportional to weights[i]. Weights
 * must be finite and >= 0 with a positive sum. With replacement, draws use an alias
 * table (O(n) memory, O(1) per draw). Without replacement, num_samples <= the
 * number of positive weights, and each epoch's order is built when the epoch is set
 * (Efraimidis-Spirakis keys, O(n log n) time, O(n) memory): as torch.multinomial. */
FERRY_API int ferry_sampler_weighted(ferry_sampler **out, const double *weights, uint64_t n,
                                     uint64_t num_samples, int replacement, uint64_t seed);

/* PyTorch DistributedSampler semantics: the (optionally shuffled) order of [0, n)
 * is split so that rank r takes positions r, r + world_size, r + 2*world_size, ...
 * Without drop_last the order is padded by wrapping around to a multiple of
 * world_size, so every rank gets ceil(n / world_size) samples; with drop_last the
 * tail is dropped and every rank gets floor(n / world_size).
 * rank / world_size < 0 mean "from the environment" (ferry_dist_from_env). */
typedef struct ferry_distributed_opts {
    uint64_t n;
    int64_t rank;
    int64_t world_size;
    int shuffle;
    uint64_t seed;
    int drop_last;
} ferry_distributed_opts;

FERRY_API int ferry_sampler_distributed(ferry_sampler **out, const ferry_distributed_opts *o);

/* The given indices in the given order, the same every epoch (copied; the caller
 * keeps its array): a curriculum, length buckets, a fixed evaluation subset. The
 * order is the caller's; what ferry adds is the rest: batches of the same bytes
 * for any number of workers, a resume at any batch (ferry/loader.h), and a rank
 * split (ferry_sampler_split). Indices may repeat; each must be below the
 * dataset's length (the loader says which is not). */
FERRY_API int ferry_sampler_fixed(ferry_sampler **out, const uint64_t *indices, uint64_t count);

/* A shuffle for data stored in shards (files, possibly remote): the shards in a
 * random order each epoch, cut into windows of `window` consecutive shards of
 * that order, and the samples of each window in a random order of their own;
 * the windows one after another. So window j's run of positions (as many as its
 * shards' samples) holds exactly the samples of its `window` shards, each once: a
 * reader that follows the order needs at most `window` shards at a time (a batch that
 * straddles two windows, 2 x window), and each shard's samples are read within
 * one window's span, not across the epoch. window >= the number of shards is a
 * full shuffle; window 1 reads each shard whole (its samples shuffled) before the
 * next.
 *
 * bounds: nshards + 1 nondecreasing indices from 0; shard k holds the indices
 * [bounds[k], bounds[k + 1]) (copied; ferry_dataset_shards gives a dataset's).
 * Both orders are keyed bijections of (seed, epoch): O(nshards) memory, O(log
 * nshards) per position, any position reached directly (a resume seeks). The
 * order is a function of (bounds, window, seed, epoch) alone: the same for any
 * number of workers, and with ferry_sampler_split the union of the ranks' t-th
 * batches is the same for any number of ranks. FERRY_EINVAL for no shards,
 * window 0 or bounds that do not start at 0 or go down, naming the shard. */
FERRY_API int ferry_sampler_window(ferry_sampler **out, const uint64_t *bounds, uint64_t nshards,
                                   uint64_t window, uint64_t seed);

/* Splits any sampler's order among world_size ranks, as DistributedSampler does:
 * rank r takes positions r, r + world_size, r + 2*world_size, ... of the order;
 * without drop_last the order is padded by wrapping around to a multiple of
 * world_size (every rank gets ceil(len / world_size) positions), with drop_last
 * the tail is dropped (floor). So with batch size B on each rank, the ranks' t-th
 * batches together are positions [t*B*world_size, (t+1)*B*world_size) of the
 * whole order: the same global batches for any number of ranks. rank /
 * world_size < 0 mean "from the environment" (ferry_dist_from_env); world_size 1
 * undoes a split. Call it before the sampler is given to a loader.
 * ferry_sampler_distributed is a random (or sequential) sampler split this way. */
FERRY_API int ferry_sampler_split(ferry_sampler *s, int64_t rank, int64_t world_size,
                                  int drop_last);

/* What decides a sampler's order, as a 64-bit hash: its kind and settings (n,
 * length, seed, replacement, window, a hash of the indices, weights or shards'
 * bounds), not its rank and world size (ferry_sampler_split) nor what follows
 * from them, so that a loader state saved on one number of ranks can be checked
 * against a loader on another. */
FERRY_API uint64_t ferry_sampler_id(const ferry_sampler *s);

/* The rank and world size a sampler is split for (ferry_sampler_split, a
 * distributed sampler); 0 of 1 when it is not. */
FERRY_API void ferry_sampler_world(const ferry_sampler *s, int64_t *rank, int64_t *world_size);

/* The length of the whole order, before a split (the sampler's own length when it
 * is not split). */
FERRY_API uint64_t ferry_sampler_global_len(const ferry_sampler *s);

/* ---- The launcher's environment ---- */

/* Where a process is among those a launcher started. local_rank and
 * local_world_size are the process's place on its node and the processes there,
 * -1 when the launcher did not say. launcher names the variables read:
 * "torchrun", "Open MPI", "Slurm", or "" when none was set (rank 0 of 1). */
typedef struct ferry_dist_env {
    int64_t rank, world_size;
    int64_t local_rank, local_world_size;
    const char *launcher; /* static */
} ferry_dist_env;

/* Reads the environment a launcher set, from the first family of variables
 * found, in this order:
 *   torchrun (and torch.distributed.launch, DeepSpeed, Accelerate):
 *     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *   Open MPI (mpirun):
 *     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
 *     OMPI_COMM_WORLD_LOCAL_SIZE
 *   Slurm (srun):
 *     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and SLURM_NTASKS_PER_NODE or
 *     else this node's entry (SLURM_NODEID) of SLURM_TASKS_PER_NODE ("4(x2),3")
 * A family is chosen by its rank or world size variable; torchrun run inside a
 * Slurm or MPI job sets both families, and its own describe the processes that
 * load, so they win. Within the family the variables are checked against each
 * other: a rank without its world size (or the reverse, or a local rank without
 * a local world size), a value that is not a decimal number, rank >= world size,
 * local rank >= local world size, local world size > world size, or local rank >
 * rank are FERRY_EINVAL with a message naming the variables and their values. */
FERRY_API int ferry_dist_env_read(ferry_dist_env *out);

/* The rank and world size of ferry_dist_env_read (rank 0 of 1 when none is set),
 * with its errors. */
FERRY_API int ferry_dist_from_env(int64_t *rank, int64_t *world_size);

FERRY_API void ferry_sampler_free(ferry_sampler *s);

/* Selects the epoch (the default is 0). Samplers that precompute (weighted
 * without replacement) do so here: FERRY_ENOMEM is possible. */
FERRY_API int ferry_sampler_set_epoch(ferry_sampler *s, uint64_t epoch);
FERRY_API uint64_t ferry_sampler_epoch(const ferry_sampler *s);

/* Number of positions in an epoch. */
FERRY_API uint64_t ferry_sampler_len(const ferry_sampler *s);

/* The index at position pos (pos < len; larger positions return UINT64_MAX). */
FERRY_API uint64_t ferry_sampler_at(const ferry_sampler *s, uint64_t pos);

/* out[i] = ferry_sampler_at(s, pos + i) for i < count; pos + count <= len. */
FERRY_API int ferry_sampler_fill(const ferry_sampler *s, uint64_t pos, uint64_t count,
                                 uint64_t *out);

/* A name for messages: "sequential", "random", "subset", "weighted", "distributed",
 * "fixed", "window". */
FERRY_API const char *ferry_sampler_kind(const ferry_sampler *s);

/* ---- Batch sampling ---- batches are consecutive runs of sampler positions. */

/* Batches in an epoch of `len` positions: ceil(len / b), or floor with drop_last. */
FERRY_API uint64_t ferry_batch_count(uint64_t len, uint64_t batch_size, int drop_last);

/* The positions of batch k: [*first, *first + *count). FERRY_ERANGE past the end. */
FERRY_API int ferry_batch_positions(uint64_t len, uint64_t batch_size, int drop_last, uint64_t k,
                                    uint64_t *first, uint64_t *count);

/* ---- The keyed bijection itself, for callers that need an order of their own ---- */
typedef struct ferry_permutation {
    uint64_t n;
    unsigned bits; /* the network's width: ceil(log2 n), at least 2 */
    uint64_t keys[4];
} ferry_permutation;

/* A pseudo-random bijection on [0, n) keyed by (seed, epoch). n may be 0. */
FERRY_API void ferry_permutation_init(ferry_permutation *p, uint64_t n, uint64_t seed,
                                      uint64_t epoch);
/* The image of x (x < n). */
FERRY_API uint64_t ferry_permutation_at(const ferry_permutation *p, uint64_t x);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_SAMPLER_H */
