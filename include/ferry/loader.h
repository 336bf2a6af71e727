/*
 * ferry/loader.h - the engine that turns sample indices into finished batches.
 *
 * The life of a batch: the batch sampler gives batch k's positions; a buffer is
 * taken from a pool of `prefetch` buffers (allocated once, sized from the schema);
 * worker threads write each sample straight into its slot; when the last slot is
 * written the batch is ready; ferry_loader_next hands it out (in sampler order by
 * default); ferry_batch_release gives the buffer back to the pool. The pool size is
 * the prefetch depth: it bounds memory and work in flight.
 *
 * Determinism: a batch's bytes depend only on the dataset, the sampler, the seed,
 * the epoch and the batch number, never on num_workers, prefetch or timing.
 * (Delivery in completion order changes the order of batches, not their bytes.)
 *
 * Thread rules: one consumer thread drives a loader (start, next, stats);
 * ferry_loader_cancel is safe from any thread; ferry_batch_release and the
 * ferry_batch_* accessors are safe from any thread, one thread per batch.
 */
#ifndef FERRY_LOADER_H
#define FERRY_LOADER_H

#include "core.h"
#include "dataset.h"
#include "sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_loader ferry_loader;
typedef struct ferry_batch ferry_batch;

enum { FERRY_ON_ERROR_FAIL = 0, FERRY_ON_ERROR_SKIP = 1 };

/* The skip budget ferry_loader_opts_default sets: with FERRY_ON_ERROR_SKIP, up to
 * this many bad samples an epoch are skipped; one more ends the epoch with
 * FERRY_EBUDGET (a source where everything fails is not read to its end). */
#define FERRY_SKIP_BUDGET_DEFAULT 1000
enum { FERRY_ORDER_SAMPLER = 0, FERRY_ORDER_COMPLETION = 1 };

/* A bad sample under the skip policy: its epoch, its dataset index (UINT64_MAX for
 * a stream sample), its status and its message ("file: record N at offset M:
 * why", valid during the call). */
typedef void (*ferry_skip_fn)(uint64_t epoch, uint64_t index, int rc, const char *msg, void *arg);

/* Called once on each worker thread before it does any work. Returning nonzero
 * makes ferry_loader_create fail with FERRY_ECALLBACK. */
typedef int (*ferry_worker_init_fn)(uint32_t worker, uint32_t num_workers, uint64_t seed,
                                    void *arg);

typedef struct ferry_loader_opts {
    uint32_t batch_size;  /* 1 .. 1<<24 */
    int drop_last;        /* drop a last, partial batch (streams: every short batch) */
    uint32_t num_workers; /* 0 .. 1024; 0 = the consumer's thread does the work */
    uint32_t prefetch;    /* batch buffers (in flight + held), 1 .. 65536; 0 = 2 per worker
                           * (at least 2), more for small batches: up to 8 MiB of
                           * buffers or 64 of them */
    int shuffle;          /* without a sampler: random (1) or sequential (0) order */
    uint64_t seed;
    ferry_sampler *sampler; /* borrowed, or NULL; the loader sets its epoch */
    int order;              /* FERRY_ORDER_SAMPLER (default) or FERRY_ORDER_COMPLETION */
    int64_t timeout_ms;     /* wait for a batch at most this long; 0 = forever; < 0 invalid */
    int on_error;           /* FERRY_ON_ERROR_FAIL (default) or FERRY_ON_ERROR_SKIP */
    uint64_t skip_budget;   /* with SKIP: bad samples allowed in an epoch (default
                             * FERRY_SKIP_BUDGET_DEFAULT; 0 = none, UINT64_MAX = no limit) */
    ferry_worker_init_fn worker_init;
    void *worker_init_arg;
    uint32_t stream_shards; /* streams only: shards read in parallel, 1 .. 65536; 0 = 1 */
    /* This rank and the world size (docs/distributed.md).
     * A stream: < 0 = from the environment (ferry_dist_from_env); the stream is cut
     * into world_size * stream_shards shards (ferry_loader_create_stream).
     * A map-style loader: world_size < 0 (the default) = not split, every rank reads
     * the sampler's whole order, as PyTorch's DataLoader without a
     * DistributedSampler does (a sampler split already, as a distributed one is:
     * its rank and world size are then the loader's). world_size >= 1 = this rank's
     * share of the sampler's order (the sampler, the caller's too, is split in
     * place by ferry_sampler_split; rank < 0 = from the environment): batch k on
     * every rank together is global batch k, positions
     * [k*G, (k+1)*G) of the order with G = batch_size x world_size, whatever the
     * world size; a last, partial global batch is padded (drop_last 0) or dropped
     * (drop_last 1) as PyTorch's DistributedSampler with the DataLoader's same
     * drop_last does. */
    int64_t rank;
    int64_t world_size;
    /* Bytes the loader may hold: the batch buffers (prefetch of them, each
     * batch_size samples with every variable field at its bound), one sample of
     * scratch per worker, and for a stream the buffers of its shuffle and group-batch
     * decorators in each of stream_shards iterators, and for a remote source the
     * fetch buffers (FERRY_REMOTE_CONNECTIONS x 1.5 MiB, docs/remote.md). 0 = a
     * quarter of physical memory. Checked before anything
     * is allocated: a schema whose batch does not fit is FERRY_EINVAL naming the
     * widest field, its bound, the batch size and the budget; the default prefetch
     * is lowered to fit (down to 1), an explicit one that does not fit is
     * FERRY_EINVAL. A file's schema decides a batch's size, so this is what keeps a
     * file that claims huge fields from taking the machine's memory. */
    uint64_t memory_budget;
    /* With FERRY_ON_ERROR_SKIP: called for every bad sample (the one over the budget
     * included), on the worker thread that met it, outside the loader's lock, so
     * possibly from several threads at once: make it thread-safe, keep it short, and
     * do not call the loader from it. NULL: none. */
    ferry_skip_fn on_skip;
    void *on_skip_arg;
    /* Page-lock every batch buffer for a CUDA device (ferry/device.h), so that a
     * copy from it to the device is asynchronous and at the host link's full
     * speed: each buffer is locked once, when it is allocated, and stays locked
     * while it lives (the pool's buffers, and those the loader allocates later
     * while exported tensors keep older ones). Locking is slow (every page is
     * touched) and locked memory is taken from the machine: memory_budget bounds
     * it as it bounds the pool. The device is `device`'s, or cuda:0. Where no
     * usable CUDA device exists ferry_loader_create is FERRY_ENOTSUP with the
     * cause ("pin_memory: no usable CUDA device: libcuda.so.1: cannot open shared
     * object file: ..."); a buffer the driver will not lock is FERRY_EIO with the
     * driver's error, from ferry_loader_create or, for a buffer allocated later,
     * ferry_loader_next. */
    int pin_memory;
    /* Where batches are delivered: NULL, "" or "cpu" = host memory; "cuda" or
     * "cuda:N" = device memory (docs/device.md). On a device, batch buffers are
     * page-locked (as with pin_memory) and each batch, once ready, is copied on a
     * stream ferry owns into one of at most `device_buffers` device buffers; the
     * host buffer goes back to the pool only after the copy's event has
     * completed. Every field and lengths tensor of such a batch is device memory
     * (ferry_batch_device says which device); its indices stay on the host. Make
     * your stream wait for the copy with ferry_batch_record_stream before using
     * the memory; a device buffer is reused only after the batch and every tensor
     * exported from it are released and the work queued on the recorded streams
     * (or, where none was recorded, on the legacy default stream) before that is
     * done. No usable device: FERRY_ENOTSUP with the cause. Read during
     * ferry_loader_create only. */
    const char *device;
    /* With a device: at most this many batches in device memory at once, handed
     * out or copied ahead (0 = 4). It bounds device memory (device_buffers x the
     * batch's bytes). ferry_loader_next is FERRY_ESTATE when all hold batches or
     * tensors not yet released. */
    uint32_t device_buffers;
    /* A trace of the loader's work, written to this file (created by
     * ferry_loader_create: FERRY_EIO naming it if it cannot be) when the loader
     * is freed: Chrome trace-event JSON, which Perfetto, chrome://tracing and
     * `ferry report` open (docs/trace.md). Each sample's time as slices named
     * after the stats' stages (read, decode, transform, write) on its worker's
     * track, the consumer's waits on its own, the batches ready and in flight,
     * errors and skipped samples; pid = the rank. At most about a million
     * events (40 bytes each, memory taken as they come); what comes after is
     * dropped and counted. NULL or "": the file FERRY_TRACE names, if it is set,
     * else no trace (a check of one pointer where it would record). */
    const char *trace;
} ferry_loader_opts;

/* Default settings: batch 1, no workers, sequential, seed 0, rank/world from the
 * environment for streams. Start from these so that fields added later get sane
 * values. */
FERRY_API void ferry_loader_opts_default(ferry_loader_opts *o);

/* Creates a loader over a map-style dataset (borrowed: it must outlive the loader
 * and every batch). Starts the workers, which live until ferry_loader_free.
 * Invalid settings are FERRY_EINVAL with a message naming the setting and its
 * range. */
FERRY_API int ferry_loader_create(ferry_loader **out, ferry_dataset *ds,
                                  const ferry_loader_opts *o);

/* Creates a loader over a stream (borrowed likewise). The stream is cut into
 * world_size * stream_shards shards; this rank reads shards rank*S .. rank*S+S-1,
 * each in order, and batch k is filled from shard k % S while it lasts (shards that
 * end drop out of the rotation). Each batch holds samples of one shard only. */
FERRY_API int ferry_loader_create_stream(ferry_loader **out, ferry_stream *st,
                                         const ferry_loader_opts *o);

/* Stops the workers and frees the loader. Safe at any point mid-epoch. Batches
 * still held stay valid until each is released; the memory goes with the last.
 *
 * Never waits forever: workers drop their work at the next sample, and a worker
 * still inside a dataset (or stream) callback is waited for 5 s, or timeout_ms
 * when that is longer; past that, free returns and the worker is left to finish
 * on its own (ferry_loader_free_within says whether that happened).
 *
 * What may be freed when, after free returns:
 *  - the sampler: at once. The loader never touches it again.
 *  - the dataset or stream: at once when every worker stopped within the grace
 *    period (always, unless a callback ran past it). Otherwise the callbacks
 *    still running are the dataset's own code: free it only once they have
 *    returned (unblock them first: close what they wait on). A worker whose
 *    callback returns calls nothing more of the dataset, and touches only the
 *    loader's own memory, which lives until that worker ends; a stream iterator
 *    it was reading is left open (not closed: it may outlive its stream), and its
 *    memory is lost.
 *  - batches: held ones stay valid until released, as above. */
FERRY_API void ferry_loader_free(ferry_loader *l);

/* ferry_loader_free with the grace period given (in ms, 0 = do not wait for a
 * worker in a callback at all). Returns 0 when every worker stopped, or
 * FERRY_ETIMEDOUT ("N workers still in a dataset callback after G ms") when some
 * were left to finish on their own: then keep the dataset (or stream) until
 * their callbacks have returned. The loader is freed either way. NULL: 0.
 * With a trace (ferry_loader_opts.trace), FERRY_EIO when it could not be
 * written. */
FERRY_API int ferry_loader_free_within(ferry_loader *l, int64_t grace_ms);

/* Starts (or restarts) an epoch at batch `first_batch`, e.g. to resume where a
 * run stopped. Work still in flight for another epoch is dropped. The loader
 * starts epoch 0 at batch 0 when it is created, so its first batch is under way
 * before the first ferry_loader_next; starting that same epoch again before any
 * batch of it was handed out keeps that work. Map-style only for first_batch > 0
 * (FERRY_ENOTSUP for streams: they resume from a state, below). */
FERRY_API int ferry_loader_start(ferry_loader *l, uint64_t epoch, uint64_t first_batch);

/* ---- Loader state: resuming an epoch where a run stopped ----
 * ferry_loader_state_save writes the loader's position as the batches handed out
 * so far leave it (batches prefetched but not handed out do not count): the epoch,
 * the next batch, the rotation among a stream's shards and, per stream shard, its
 * position. A loader made with the same source and settings (batch_size, seed,
 * drop_last, rank, world_size, stream_shards; num_workers and prefetch may differ)
 * and given the state by ferry_loader_state_resume hands out exactly the batches
 * the first would have handed out next. The state is checksummed and versioned.
 *
 * A map-style state is the same on every rank (the epoch, the next global step,
 * the seed, the order's ferry_sampler_id, the world size and the global batch
 * G = batch_size x world_size; and the samples skipped this epoch, this rank's)
 * and resumes on another world size: the next batch is the next global step, so
 * every rank's batches together go on with the same global batches as an
 * uninterrupted run, every remaining sample once (PyTorch's padding of a last,
 * partial batch aside). batch_size may change with the world size; G may not.
 * Resuming a map-style loader is ferry_loader_start(epoch, next batch): no
 * reading. A stream loader whose stream is resumable (ferry_stream_resumable:
 * record shards, TFRecord, WebDataset and CSV files, map-style datasets read in
 * order, and the decorators over them): saving waits for the batches being read
 * (holding off new ones meanwhile, so a save costs at most one batch's reading)
 * and takes each shard's position (ferry_stream_save: each file's cursor, the
 * decorators' counters, a shuffle or group-batch buffer as the places of the
 * samples it holds, not their bytes), and the batches read ahead but not handed
 * out as their samples' places too. Reading costs nothing for this. A resume
 * restores each shard's position and makes those batches again by reading their
 * samples from their places; a shuffle buffer over a source that reads any place
 * at once (record shards, a map-style dataset) reads each buffered sample again
 * only when it hands it out, others read their buffers again at the resume (in
 * the order of their places, so a compressed file is decoded once, from its
 * start up to the last of them). A stream that is not resumable (one of its
 * streams lacks save/restore/fetch) is resumed by reading again, on the caller's
 * thread, every sample its shards gave since the epoch began.
 *
 * Size: ferry_loader_state_size(l) bytes: 116 for a map-style loader; for a
 * stream loader, which changes as batches are read, 128, plus per stream shard 32 and its position
 * (16 bytes, plus each stream's own: 8 to 32 for a file cursor, 24 per decorator plus 32 per
 * buffered sample for a shuffle buffer or a group-batch; see ferry/stream.h), plus per batch read
 * ahead 36 bytes and 32 per sample (at most prefetch batches). A shuffle buffer of 10,000 samples
 * is about 320 KB per shard.
 *
 * Errors: FERRY_EOVERFLOW when cap is too small (*len then says how much is
 * needed; it can change by the next call, as workers read ahead); FERRY_ENOTSUP
 * for a loader in completion order (no position); FERRY_ESTATE for a resumable
 * stream loader whose epoch an error or a cancel stopped after its shards had
 * read ahead (those batches are gone: start an epoch first). Resume: FERRY_ECORRUPT for a damaged
 * or truncated blob; FERRY_EINVAL naming the setting for a state saved with another seed,
 * drop_last or stream_shards, a stream's other batch_size or rank, a map-style loader's other
 * order (sampler) or other global batch (naming G, both world sizes and the batch sizes that keep
 * G), or from another source (told apart by the schema and, map-style, the length, and for a
 * stream by each decorator's kind and settings; two sources with the same schema and length are
 * not: where the files are is not part of a source's identity), or when a buffered sample read
 * again does not match (a group key that changed: the source changed since); FERRY_ESTATE for a
 * stream state on another world size (a stream's shards are not dealt again: resume it on as many
 * ranks); FERRY_ENOTSUP for a version this library does not read (it reads 1 to 3).
 * Then the loader is as after a failed ferry_loader_start. */
FERRY_API size_t ferry_loader_state_size(const ferry_loader *l);
FERRY_API int ferry_loader_state_save(ferry_loader *l, void *buf, size_t cap, size_t *len);
FERRY_API int ferry_loader_state_resume(ferry_loader *l, const void *buf, size_t len);
/* Checks a saved state as ferry_loader_state_resume would (the same errors and
 * messages), changing nothing; 0 and the epoch and next batch it would resume at. */
FERRY_API int ferry_loader_state_check(const ferry_loader *l, const void *buf, size_t len,
                                       uint64_t *epoch, uint64_t *first_batch);

/* The next batch: 0 and *out set; FERRY_END when the epoch is over (until the next
 * ferry_loader_start); or an error: a sample that failed (its index and message),
 * FERRY_EBUDGET, FERRY_ETIMEDOUT (naming the batch and the samples outstanding),
 * FERRY_ECANCELED, or FERRY_ESTATE when the caller holds every buffer of the pool.
 * After an error other than FERRY_ETIMEDOUT and FERRY_ESTATE the epoch is over.
 * With num_workers 0 the caller's thread does the work inside this call, so there
 * is no one to time out: timeout_ms applies to workers. Batch numbers follow the
 * sampler's positions, so a batch that ends up empty (every sample skipped, or a
 * stream's tail) leaves its number unused. The batch is the caller's until
 * ferry_batch_release. */
FERRY_API int ferry_loader_next(ferry_loader *l, ferry_batch **out);

/* Makes a waiting or future ferry_loader_next return FERRY_ECANCELED, stops the
 * workers' work at the next sample, and keeps doing so until ferry_loader_start.
 * Safe from any thread, any number of times. */
FERRY_API void ferry_loader_cancel(ferry_loader *l);

/* Batches in the current (or, before any, the first) epoch. */
FERRY_API uint64_t ferry_loader_len(const ferry_loader *l);

/* The message of the last failure on this loader; "" if none. Valid until the next
 * call on the loader. */
FERRY_API const char *ferry_loader_errmsg(const ferry_loader *l);

typedef struct ferry_loader_stats {
    uint64_t samples;    /* delivered */
    uint64_t batches;    /* delivered */
    uint64_t bytes;      /* of delivered batches' buffers: every slot at full size, variable fields
                          * padded to their bound (data_bytes is the data in them) */
    uint64_t skipped;    /* bad samples skipped */
    uint64_t elapsed_ns; /* since the first start */
    uint64_t first_batch_ns;              /* from the first start to the first batch handed out */
    uint64_t consumer_wait_ns;            /* time the consumer spent waiting in next() */
    uint64_t worker_busy_ns;              /* summed over workers: time spent on samples */
    uint64_t worker_idle_ns;              /* summed over workers: time spent waiting for work */
    uint64_t stage_ns[FERRY_STAGE_COUNT]; /* summed over workers */
    uint32_t num_workers;
    uint32_t prefetch;   /* batch buffers in the pool (the default resolved) */
    uint64_t truncated;  /* samples the dataset cut to fit (ferry_ctx_count_truncated: lines
                          * longer than max), in the work done so far */
    uint64_t data_bytes; /* of delivered samples' data: fixed fields whole, variable fields
                          * their rows only (bytes less the padding) */
    /* batch memory page-locked now (pin_memory), spares included */
    uint64_t pinned_bytes;
    /* With a device: batches copied to it and their bytes; device memory held by
     * batch buffers now; the copies' time on the copy engine and, of it, the part
     * after the consumer's stream had reached the batch (time the consumer's
     * work could wait on the copy: the rest was hidden behind its work). The
     * times are read back from the copies' events once they have completed; the
     * copies they count are `copies_timed`, of `copy_bytes_timed` bytes. */
    uint64_t copies, copy_bytes, device_bytes;
    uint64_t copies_timed, copy_bytes_timed, copy_ns, copy_exposed_ns;
    /* Remote locations (ferry/remote.h): bytes downloaded, opens served by the
     * node cache and objects fetched into it, requests retried, and the time
     * threads waited on fetches. They are the process's counters (the fetches of
     * a source's open, before the loader was made, included): loaders of one
     * process see each other's. Then the parts of objects read by a ranged GET
     * outside the cache, and the memory the transfers' buffers hold now and the
     * most they held (ferry_remote_stats says more). */
    uint64_t downloaded_bytes, cache_hits, cache_misses, retries, fetch_wait_ns;
    uint64_t ranged_reads, fetch_buffer_bytes, fetch_buffer_peak;
} ferry_loader_stats;

/* Counters so far. consumer_wait_ns / elapsed_ns near 1 means training is
 * input-bound; near 0, the loader keeps up. */
FERRY_API int ferry_loader_stats_get(ferry_loader *l, ferry_loader_stats *out);

/* The first FERRY_SKIPPED_KEPT bad samples met under the skip policy over the
 * loader's life, in (epoch, index) order whatever the worker count, k from 0: their
 * epoch, dataset index (UINT64_MAX for a stream sample) and message (valid until
 * the next call on the loader). When an epoch ends early (the budget, a cancel, a
 * new start), bad samples of batches read ahead and never delivered may be among
 * them. FERRY_ERANGE past the last one kept. Every bad sample, however many, goes
 * to opts.on_skip. Consumer thread only. */
#define FERRY_SKIPPED_KEPT 8
FERRY_API int ferry_loader_skipped_sample(ferry_loader *l, uint64_t k, uint64_t *epoch,
                                          uint64_t *index, const char **msg);

/* ---- Batches ---- */

/* Batch number within its epoch, and the epoch. */
FERRY_API uint64_t ferry_batch_number(const ferry_batch *b);
FERRY_API uint64_t ferry_batch_epoch(const ferry_batch *b);
/* Samples in the batch (smaller than batch_size for a last partial batch, or when
 * samples were skipped). */
FERRY_API uint32_t ferry_batch_size(const ferry_batch *b);
/* The dataset index of each sample, ferry_batch_size of them (UINT64_MAX for stream
 * samples). Valid until release. */
FERRY_API const uint64_t *ferry_batch_indices(const ferry_batch *b);
FERRY_API int ferry_batch_nfields(const ferry_batch *b);
/* Field f as a tensor of shape [size, sample shape...] (a variable field at its
 * bound). Borrowed memory, valid until ferry_batch_release; the tensor's release
 * hook is NULL. */
FERRY_API int ferry_batch_field(const ferry_batch *b, int f, ferry_tensor *out);
/* The lengths (int64 [size]) of variable field f; FERRY_EINVAL for a fixed one. */
FERRY_API int ferry_batch_lengths(const ferry_batch *b, int f, ferry_tensor *out);
/* The schema of field f. */
FERRY_API const ferry_field *ferry_batch_field_info(const ferry_batch *b, int f);
/* Field f (or, with lengths nonzero, its lengths) as a tensor that holds a
 * reference to the batch's memory: it stays valid until ferry_tensor_release
 * runs on it, whenever the batch is released and even after ferry_loader_free.
 * This is what zero-copy exports (NumPy, DLPack) hand their deleters; the release
 * is an atomic reference drop that may run on any thread.
 *
 * Releasing the batch while exported tensors live gives the batch back to the
 * pool at once: the tensors keep its memory, and the batch gets other memory
 * when it is next filled (a spare buffer whose tensors are gone, of which the
 * loader keeps at most `prefetch`, or a new allocation). So tensors kept for long
 * never leave the loader without buffers; memory is then at most twice the pool
 * plus what the caller's tensors keep. */
FERRY_API int ferry_batch_export(ferry_batch *b, int f, int lengths, ferry_tensor *out);
/* The batch's dataset indices (uint64 [size], UINT64_MAX for stream samples) as
 * an exported tensor, like ferry_batch_export. */
FERRY_API int ferry_batch_export_indices(ferry_batch *b, ferry_tensor *out);

/* Where the batch's memory is: -1 for host memory, else the CUDA device's ordinal
 * (ferry_loader_opts.device). */
FERRY_API int ferry_batch_device(const ferry_batch *b);

/* Declares that work queued on `stream` (a CUstream; NULL = the legacy default
 * stream) uses the batch's memory, as PyTorch's record_stream does:
 * - a device batch: the stream waits for the batch's copy (cuStreamWaitEvent: the
 *   host goes on), and the device buffer is reused only after the work queued on
 *   the stream before the buffer's release;
 * - a page-locked host batch (pin_memory): the buffer is refilled only after the
 *   work queued on the stream before ferry_batch_release, such as an asynchronous
 *   copy from it (`non_blocking=True`); without a recorded stream the legacy
 *   default stream is fenced;
 * - any other batch: nothing to do.
 * FERRY_EIO with the driver's error. */
FERRY_API int ferry_batch_record_stream(ferry_batch *b, void *stream);

/* A device batch's copy event (a CUevent, recorded after its copy), for waiting on
 * it in other ways; NULL for a host batch. Valid while the batch is held. */
FERRY_API void *ferry_batch_event(const ferry_batch *b);

/* Takes another reference to a batch, to be dropped with ferry_batch_release. */
FERRY_API void ferry_batch_retain(ferry_batch *b);

/* Drops a reference; the last one gives the batch's buffer back to the pool.
 * NULL is a no-op. */
FERRY_API void ferry_batch_release(ferry_batch *b);

/* ---- Packing a source into record shards (what `ferry pack` does) ---- */

struct ferry_writer_opts;

typedef struct ferry_pack_opts {
    /* where and how to write (ferry/records.h); its fields and nfields are
     * ignored: the source's schema is written */
    const struct ferry_writer_opts *writer;
    uint32_t num_workers; /* threads reading the source, 0 .. 1024 */
    int on_error;         /* FERRY_ON_ERROR_FAIL or _SKIP, as for the loader */
    uint64_t skip_budget;
    ferry_skip_fn on_skip; /* every bad sample, as for the loader; may be NULL */
    void *on_skip_arg;
    /* called on the caller's thread after each batch is written: records so far */
    void (*progress)(uint64_t records, void *arg);
    void *progress_arg;
} ferry_pack_opts;

typedef struct ferry_pack_result {
    uint64_t records;   /* written */
    uint64_t bytes;     /* of sample data written (variable fields at their length) */
    uint64_t skipped;   /* bad samples left out (FERRY_ON_ERROR_SKIP) */
    uint64_t truncated; /* samples the source cut to fit their field */
} ferry_pack_result;

/* Reads every sample of ds or st (exactly one non-NULL; borrowed) in order through a
 * loader and writes them as record shards: a transaction that replaces any set of
 * the same name whole or not at all (ferry/records.h). Returns 0, or the first
 * error with the thread's message naming the sample or the file; *out says what was
 * written. */
FERRY_API int ferry_pack(ferry_dataset *ds, ferry_stream *st, const ferry_pack_opts *o,
                         ferry_pack_result *out);

/* Writes one integer field of ds or st (exactly one non-NULL; borrowed), sample
 * after sample in order, as the llm.c token shard at path (ferry/tokens.h):
 * field names it (NULL: the source's only integer field); dtype FERRY_U16
 * (version 1; 0 means it) or FERRY_U32 (version 2). Each sample gives every
 * element of the field (a variable field: its length). A token that does not fit
 * dtype is FERRY_EOVERFLOW naming the sample and element; the shard is then left
 * as it was (it is replaced whole or not at all). *written: the tokens written. */
FERRY_API int ferry_pack_tokens(ferry_dataset *ds, ferry_stream *st, const char *field,
                                ferry_dtype dtype, const char *path, uint64_t *written);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_LOADER_H */
