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

/* The share of rank `rank` of `world_size` in another sampler's order, as
 * PyTorch's DistributedSampler splits a dataset: position p of this sampler is
 * position rank + p * world_size of `inner`'s. Without drop_last every rank has
 * ceil(L / world_size) positions (L = the inner's length), the last ones wrapping
 * around to the start of the order (PyTorch's padding: the epoch's first samples
 * again); with drop_last, floor(L / world_size). So batch k of batch size B on
 * every rank together is positions [k*G, (k+1)*G) of the inner order, G = B *
 * world_size: the same samples for any world size that divides G (the padding of
 * a last, partial batch aside). `inner` is borrowed: it must outlive this sampler,
 * and ferry_sampler_set_epoch on this one sets the inner's epoch. rank and
 * world_size are checked as ferry_sampler_distributed checks them (no
 * environment: give both). */
FERRY_API int ferry_sampler_split(ferry_sampler **out, ferry_sampler *inner, int64_t rank,
                                  int64_t world_size, int drop_last);

/* What decides a sampler's order, as a 64-bit hash: its kind and settings (n,
 * length, seed, replacement, shuffle, drop_last, a hash of a subset's indices or
 * of the weights), not the rank and world size of a distributed or split sampler,
 * so that a loader state saved on one number of ranks can be checked against a
 * loader on another. */
FERRY_API uint64_t ferry_sampler_id(const ferry_sampler *s);

/* The rank and world size a distributed or split sampler takes its share for;
 * 0 of 1 for any other. */
FERRY_API void ferry_sampler_world(const ferry_sampler *s, int64_t *rank, int64_t *world_size);

/* The length of the order a distributed or split sampler takes its share of (its
 * n, or the inner sampler's length); the sampler's own length for any other. */
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
 * "split". */
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
