/*
 * ferry bench SOURCE: runs a loader over a source for some epochs and reports
 * throughput, latency to the first batch, and whether the consumer waited.
 */
#include "cli.h"

#include <getopt.h>
#include <pthread.h>

/* Streams are read as this many shards by default, whatever --workers says. */
#define STREAM_SHARDS 4
/* --shuffle on a stream: a shuffle buffer of this many samples per stream shard,
 * fewer for large samples so that one shard's buffer stays within
 * SHUFFLE_BUFFER_BYTES. */
#define SHUFFLE_BUFFER 8192
#define SHUFFLE_BUFFER_BYTES ((uint64_t)64 << 20)
#include <stdlib.h>
#include <string.h>

static void bench_usage(FILE *f)
{
    fprintf(
        f, "usage: ferry bench SOURCE [options]\n"
           "\n"
           "Runs a loader over SOURCE and prints a summary (a progress bar on a terminal).\n"
           "\n"
           "sources:\n"
           "  synthetic:COUNT[,bytes=N][,cost=N][,seed=N][,classes=N][,var=N][,fail_every=N]\n"
           "      COUNT samples of N bytes (default 16) plus an int64 label; cost=N burns N\n"
           "      Philox rounds of CPU per sample; var=N adds a variable-length field up to N;\n"
           "      fail_every=N makes every N-th sample fail; pool=N copies each sample's data\n"
           "      from N precomputed in memory instead of generating it\n"
           "  lines:FILE[,max=N][,build=1][,io=mmap|pread]  one sample per line (ferry index)\n"
           "  csv:DIR|FILE[,prefix=part-][,digits=5][,delim=,][,header=N][,dtype=f32]\n"
           "      [,fields=..][,missing=V][,shuffle=N][,seed=S]\n"
           "      numeric CSV part files (or one file; plain, gzip or zstd), read as a stream\n"
           "  files:DIR[,ext=jpg;png]  every file under DIR, labelled by its subdirectory\n"
           "  images:DIR[,size=224][,resize=256][,scale=0.08-1][,ratio=0.75-1.333][,flip=0.5]\n"
           "      [,brightness=J][,contrast=J][,saturation=J][,dtype=f32|f16|u8][,layout=chw|hwc]\n"
           "      [,grey=1][,filter=bilinear|bicubic|nearest][,normalize=0][,mean=a;b;c][,std=..]\n"
           "      an image folder (one directory per class), decoded by the image pipeline\n"
           "  records:DIR  a record shard set (ferry pack); lmdb:PATH  an LMDB environment\n"
           "      either with ,pipeline=... decodes its \"image\" (or \"data\") field\n"
           "  npy:PATH or npy:x=a.npy;y=b.npz/m  NumPy arrays, row by row along axis 0\n"
           "  tokens:GLOB[,seq=1024][,stride=S][,offset=random]  llm.c token shards as\n"
           "      windows: input, target; every S tokens (default T), at a new random\n"
           "      offset each epoch with offset=random\n"
           "  mds:DIR  MosaicML MDS shards (index.json), one global index\n"
           "  tfrecord:PATH|DIR|GLOB[,raw=1][,features=name:dtype[:shape];..][,stream=1]\n"
           "      TFRecord files of tf.train.Example (ferry/tfrecord.h)\n"
           "  wds:PATH|DIR|GLOB[,fields=jpg;cls][,stream=1]  WebDataset tar shards\n"
           "      (ferry/wds.h); with ,pipeline=... decodes the jpg/jpeg/png field\n"
           "\n"
           "options:\n"
           "  --batch N         samples per batch, 1..16777216 (default 64; 256 with\n"
           "                    --pipeline)\n"
           "  --workers N       worker threads, 0..1024; 0 = the caller's thread (default 2)\n"
           "  --prefetch N      batch buffers in flight, 1..65536 (default 2 per worker,\n"
           "                    more for small batches: up to 8 MiB or 64 buffers)\n"
           "  --shuffle         random order (a new one each epoch); a stream (csv:,\n"
           "                    records:...,stream=1) goes through a shuffle buffer per\n"
           "                    stream shard, seeded by --seed (see --shuffle-buffer)\n"
           "  --shuffle-buffer N  with --shuffle on a stream: samples per buffer, 1..16777216\n"
           "                    (default 8192, fewer for samples over 8 KiB: at most 64 MiB\n"
           "                    a shard); the same as shuffle=N,seed=S in the source\n"
           "  --window-shards W with --shuffle on a map-style source stored in shards\n"
           "                    (records, tfrecord, wds, mds, tokens): the shards in a new\n"
           "                    random order each epoch, the samples shuffled within each\n"
           "                    window of W consecutive shards of it (at most W shards read\n"
           "                    at a time); a source of one file is one shard\n"
           "  --seed N          seed of every random choice (default 0)\n"
           "  --epochs N        epochs to run, 1..1000000 (default 1)\n"
           "  --drop-last       drop a last, partial batch\n"
           "  --rank R          this rank, 0..world-1 (default: RANK, OMPI_COMM_WORLD_RANK or\n"
           "                    SLURM_PROCID from the environment, else 0)\n"
           "  --world-size W    ranks in all, 1..2^31 (default: from the environment, else 1)\n"
           "  --order ORDER     'sampler' (default) or 'completion' delivery order\n"
           "  --timeout MS      fail if a batch takes longer than MS ms (default 0 = never)\n"
           "  --on-error P      'fail' (default) or 'skip' bad samples\n"
           "  --skip-budget N   with --on-error skip: bad samples allowed per epoch (default\n"
           "                    1000; one more ends the run)\n"
           "  --skip-report F   with --on-error skip: write every bad sample (epoch, index,\n"
           "                    message) to F, one a line; the summary names the first few\n"
           "  --digest          hash every batch's bytes in delivery order (adds 'digest')\n"
           "  --json            print the summary as one JSON object on stdout\n"
           "  --no-progress     no progress bar\n"
           "  --pipeline P      decode images: 'train' (RandomResizedCrop 224, flip,\n"
           "                    normalise, float32 CHW) or 'eval' (Resize 256, CenterCrop 224)\n"
           "  --stream-shards N a stream source is read as N shards in parallel, 1..65536\n"
           "                    (default 4; fixed, so the batches do not depend on --workers)\n"
           "  --memory-budget B bytes of batch buffers and scratch the loader may hold\n"
           "                    (default: a quarter of physical memory)\n"
           "  --trace FILE      write a trace of every stage to FILE (Chrome trace JSON:\n"
           "                    Perfetto, chrome://tracing, or 'ferry report FILE')\n"
           "  -h, --help        this text\n");
}

/* --skip-report: every bad sample, one a line, from the workers. */
typedef struct {
    FILE *f;
    pthread_mutex_t m;
} skip_report;

static void on_skip(uint64_t epoch, uint64_t index, int rc, const char *msg, void *arg)
{
    skip_report *r = arg;
    pthread_mutex_lock(&r->m);
    if (index == UINT64_MAX)
        fprintf(r->f, "epoch %llu, stream sample: %s: %s\n", (unsigned long long)epoch,
                ferry_errname(rc), msg);
    else
        fprintf(r->f, "epoch %llu, sample %llu: %s: %s\n", (unsigned long long)epoch,
                (unsigned long long)index, ferry_errname(rc), msg);
    pthread_mutex_unlock(&r->m);
}

/* A fast 64-bit hash over the bytes, chained batch to batch. Not cryptographic:
 * it tells two runs apart. */
static uint64_t digest_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t digest_batch(uint64_t h, const ferry_batch *b)
{
    int nf = ferry_batch_nfields(b);
    for (int f = 0; f < nf; f++) {
        ferry_tensor t;
        if (ferry_batch_field(b, f, &t) == 0)
            h = digest_bytes(h, t.data, ferry_tensor_nbytes(&t));
        if (ferry_batch_lengths(b, f, &t) == 0)
            h = digest_bytes(h, t.data, ferry_tensor_nbytes(&t));
    }
    return h;
}

int cmd_bench(int argc, char **argv)
{
    enum {
        O_BATCH = 256,
        O_WORKERS,
        O_PREFETCH,
        O_SHUFFLE,
        O_SEED,
        O_EPOCHS,
        O_DROP,
        O_RANK,
        O_WORLD,
        O_ORDER,
        O_TIMEOUT,
        O_ONERR,
        O_BUDGET,
        O_DIGEST,
        O_JSON,
        O_NOPROG,
        O_SHARDS,
        O_PIPELINE,
        O_MEMORY,
        O_SHUFBUF,
        O_REPORT,
        O_TRACE,
        O_WINDOW
    };
    static const struct option opts[] = {{"batch", required_argument, 0, O_BATCH},
                                         {"workers", required_argument, 0, O_WORKERS},
                                         {"prefetch", required_argument, 0, O_PREFETCH},
                                         {"shuffle", no_argument, 0, O_SHUFFLE},
                                         {"seed", required_argument, 0, O_SEED},
                                         {"epochs", required_argument, 0, O_EPOCHS},
                                         {"drop-last", no_argument, 0, O_DROP},
                                         {"rank", required_argument, 0, O_RANK},
                                         {"world-size", required_argument, 0, O_WORLD},
                                         {"order", required_argument, 0, O_ORDER},
                                         {"timeout", required_argument, 0, O_TIMEOUT},
                                         {"on-error", required_argument, 0, O_ONERR},
                                         {"skip-budget", required_argument, 0, O_BUDGET},
                                         {"digest", no_argument, 0, O_DIGEST},
                                         {"json", no_argument, 0, O_JSON},
                                         {"no-progress", no_argument, 0, O_NOPROG},
                                         {"stream-shards", required_argument, 0, O_SHARDS},
                                         {"pipeline", required_argument, 0, O_PIPELINE},
                                         {"memory-budget", required_argument, 0, O_MEMORY},
                                         {"shuffle-buffer", required_argument, 0, O_SHUFBUF},
                                         {"skip-report", required_argument, 0, O_REPORT},
                                         {"trace", required_argument, 0, O_TRACE},
                                         {"window-shards", required_argument, 0, O_WINDOW},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = 64;
    o.num_workers = 2;
    uint64_t v, epochs = 1;
    int64_t rank = -1, world = -1, iv;
    bool digest = false, json = false, progress = true;
    const char *pipeline = NULL;
    bool batch_set = false;
    uint64_t shuffle_buffer = 0; /* streams: the buffer in use, 0 for none */
    const char *report_path = NULL;
    skip_report report = {NULL, PTHREAD_MUTEX_INITIALIZER};
    bool source_shuffles = false;
    uint64_t window = 0, nshards = 0; /* --window-shards, and the source's shards */

    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_BATCH:
            if (!cli_u64("--batch", optarg, 1, 1u << 24, &v))
                return EXIT_USAGE;
            o.batch_size = (uint32_t)v;
            batch_set = true;
            break;
        case O_WORKERS:
            if (!cli_u64("--workers", optarg, 0, 1024, &v))
                return EXIT_USAGE;
            o.num_workers = (uint32_t)v;
            break;
        case O_PREFETCH:
            if (!cli_u64("--prefetch", optarg, 1, 65536, &v))
                return EXIT_USAGE;
            o.prefetch = (uint32_t)v;
            break;
        case O_SHUFFLE:
            o.shuffle = 1;
            break;
        case O_SEED:
            if (!cli_u64("--seed", optarg, 0, UINT64_MAX, &o.seed))
                return EXIT_USAGE;
            break;
        case O_EPOCHS:
            if (!cli_u64("--epochs", optarg, 1, 1000000, &epochs))
                return EXIT_USAGE;
            break;
        case O_DROP:
            o.drop_last = 1;
            break;
        case O_RANK:
            if (!cli_i64("--rank", optarg, 0, INT32_MAX, &rank))
                return EXIT_USAGE;
            break;
        case O_WORLD:
            if (!cli_i64("--world-size", optarg, 1, (int64_t)1 << 31, &world))
                return EXIT_USAGE;
            break;
        case O_ORDER:
            if (!strcmp(optarg, "sampler"))
                o.order = FERRY_ORDER_SAMPLER;
            else if (!strcmp(optarg, "completion"))
                o.order = FERRY_ORDER_COMPLETION;
            else
                return cli_error(EXIT_USAGE, "--order: \"%s\" is not 'sampler' or 'completion'",
                                 optarg);
            break;
        case O_TIMEOUT:
            if (!cli_i64("--timeout", optarg, 0, INT64_MAX / 1000000, &iv))
                return EXIT_USAGE;
            o.timeout_ms = iv;
            break;
        case O_ONERR:
            if (!strcmp(optarg, "fail"))
                o.on_error = FERRY_ON_ERROR_FAIL;
            else if (!strcmp(optarg, "skip"))
                o.on_error = FERRY_ON_ERROR_SKIP;
            else
                return cli_error(EXIT_USAGE, "--on-error: \"%s\" is not 'fail' or 'skip'", optarg);
            break;
        case O_BUDGET:
            if (!cli_u64("--skip-budget", optarg, 0, UINT64_MAX, &o.skip_budget))
                return EXIT_USAGE;
            break;
        case O_DIGEST:
            digest = true;
            break;
        case O_JSON:
            json = true;
            break;
        case O_NOPROG:
            progress = false;
            break;
        case O_SHARDS:
            if (!cli_u64("--stream-shards", optarg, 1, 65536, &v))
                return EXIT_USAGE;
            o.stream_shards = (uint32_t)v;
            break;
        case O_PIPELINE:
            if (strcmp(optarg, "train") && strcmp(optarg, "eval"))
                return cli_error(EXIT_USAGE, "--pipeline: \"%s\" is not 'train' or 'eval'", optarg);
            pipeline = optarg;
            break;
        case O_MEMORY:
            if (!cli_u64("--memory-budget", optarg, 1, UINT64_MAX, &o.memory_budget))
                return EXIT_USAGE;
            break;
        case O_REPORT:
            report_path = optarg;
            break;
        case O_TRACE:
            o.trace = optarg;
            break;
        case O_WINDOW:
            if (!cli_u64("--window-shards", optarg, 1, UINT32_MAX, &window))
                return EXIT_USAGE;
            break;
        case O_SHUFBUF:
            if (!cli_u64("--shuffle-buffer", optarg, 1, 1u << 24, &shuffle_buffer))
                return EXIT_USAGE;
            break;
        case 'h':
            bench_usage(stdout);
            return 0;
        default:
            return cli_bad_option("bench", argv, opts);
        }
    }
    if (optind != argc - 1) {
        cli_error(EXIT_USAGE,
                  optind >= argc ? "bench: SOURCE is missing" : "bench: one SOURCE expected");
        bench_usage(stderr);
        return EXIT_USAGE;
    }
    const char *spec = argv[optind];
    char spec_buf[4096];
    if (pipeline) { /* the same as writing ,pipeline=P into the source */
        if (strstr(spec, ",pipeline="))
            return cli_error(EXIT_USAGE, "bench: --pipeline and a pipeline= in SOURCE");
        if (snprintf(spec_buf, sizeof spec_buf, "%s,pipeline=%s", spec, pipeline) >=
            (int)sizeof spec_buf)
            return cli_error(EXIT_USAGE, "bench: SOURCE is too long");
        spec = spec_buf;
        if (!batch_set)
            o.batch_size = 256; /* the standard ImageNet pipelines' batch */
    }

    int rc, status = 0;
    ferry_dataset *ds = NULL;
    ferry_stream *stream = NULL;
    ferry_sampler *sampler = NULL;
    ferry_loader *l = NULL;
    uint64_t t0 = ferry_now_ns(), t_first = 0, samples = 0, batches = 0, h = 0xcbf29ce484222325ull;
    char errbuf[1024] = "";

    if ((rc = ferry_source_open(spec, &ds, &stream)) < 0) {
        status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
        goto done;
    }
    cli_folder_note(ds, spec);
    /* Rank and world: flags first, then the launcher's environment. */
    if (rank < 0 || world < 0) {
        int64_t er, ew;
        if ((rc = ferry_dist_from_env(&er, &ew)) < 0) {
            status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
            goto done;
        }
        if (rank < 0)
            rank = world < 0 || er < world ? er : 0;
        if (world < 0)
            world = ew;
    }
    if (rank >= world) {
        status = cli_error(EXIT_USAGE, "--rank %lld is outside [0, %lld] for --world-size %lld",
                           (long long)rank, (long long)world - 1, (long long)world);
        goto done;
    }
    if (stream) {
        /* the source's own shuffle=N, or --shuffle here: a shuffle buffer per shard */
        const char *sp = strstr(spec, ",shuffle=");
        source_shuffles = sp != NULL;
        if (source_shuffles && (o.shuffle || shuffle_buffer)) {
            status = cli_error(EXIT_USAGE, "bench: --shuffle and a shuffle= in SOURCE: use one");
            goto done;
        }
        if (source_shuffles) {
            shuffle_buffer = strtoull(sp + 9, NULL, 10);
        } else if (o.shuffle) {
            if (!shuffle_buffer) {
                uint64_t sample = 0;
                for (int f = 0; f < ferry_stream_nfields(stream); f++)
                    sample += ferry_field_nbytes(ferry_stream_field(stream, f));
                shuffle_buffer = SHUFFLE_BUFFER;
                if (sample && SHUFFLE_BUFFER_BYTES / sample < shuffle_buffer)
                    shuffle_buffer =
                        SHUFFLE_BUFFER_BYTES / sample ? SHUFFLE_BUFFER_BYTES / sample : 1;
            }
            ferry_stream *inner = stream;
            stream = NULL; /* the decorator owns it from here, also when it fails */
            if ((rc = ferry_stream_shuffle(&stream, inner, (size_t)shuffle_buffer, o.seed)) < 0) {
                status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
                goto done;
            }
        } else if (shuffle_buffer) {
            status = cli_error(EXIT_USAGE, "bench: --shuffle-buffer needs --shuffle");
            goto done;
        }
    } else if (shuffle_buffer) {
        status = cli_error(EXIT_USAGE,
                           "bench: --shuffle-buffer is for streams; this source is map-style, "
                           "and --shuffle alone gives it a random order");
        goto done;
    }
    if (window && !o.shuffle) {
        status = cli_error(EXIT_USAGE, "bench: --window-shards needs --shuffle");
        goto done;
    }
    if (window && stream) {
        status = cli_error(EXIT_USAGE,
                           "bench: --window-shards is for map-style sources; a stream reads its "
                           "files in a new random order each epoch already (CSV parts: in name "
                           "order), and --shuffle mixes its samples through a shuffle buffer "
                           "(--shuffle-buffer N)");
        goto done;
    }
    if (stream && !o.stream_shards)
        o.stream_shards = STREAM_SHARDS; /* fixed, so the batches do not depend on --workers */
    o.rank = rank;
    o.world_size = world;
    if (window) {
        const uint64_t *bounds;
        nshards = ferry_dataset_shards(ds, &bounds);
        if ((rc = ferry_sampler_window(&sampler, bounds, nshards, window, o.seed)) < 0 ||
            (rc = ferry_sampler_split(sampler, rank, world, o.drop_last)) < 0) {
            status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
            goto done;
        }
        o.sampler = sampler;
        o.shuffle = 0;
    } else if (world > 1 && ds) {
        ferry_distributed_opts d = {
            ferry_dataset_len(ds), rank, world, o.shuffle, o.seed, o.drop_last};
        if ((rc = ferry_sampler_distributed(&sampler, &d)) < 0) {
            status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
            goto done;
        }
        o.sampler = sampler;
    }
    if (report_path) {
        if (o.on_error != FERRY_ON_ERROR_SKIP) {
            status = cli_error(EXIT_USAGE, "bench: --skip-report needs --on-error skip");
            goto done;
        }
        if (!(report.f = fopen(report_path, "w"))) {
            status = cli_error(EXIT_USAGE, "--skip-report: cannot write \"%s\": %m", report_path);
            goto done;
        }
        o.on_skip = on_skip;
        o.on_skip_arg = &report;
    }
    t0 = ferry_now_ns();
    if ((rc = ds ? ferry_loader_create(&l, ds, &o) : ferry_loader_create_stream(&l, stream, &o)) <
        0) {
        status = cli_error(EXIT_USAGE, "%s", ferry_last_errmsg());
        goto done;
    }
    uint64_t per_epoch = ds ? ferry_loader_len(l) : 0; /* a stream's length is unknown */
    cli_progress bar;
    cli_progress_start(&bar, "bench", per_epoch * epochs, progress);
    for (uint64_t e = 0; e < epochs && status == 0; e++) {
        if ((rc = ferry_loader_start(l, e, 0)) < 0)
            break;
        ferry_batch *b;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            if (!t_first)
                t_first = ferry_now_ns();
            if (digest)
                h = digest_batch(h, b);
            samples += ferry_batch_size(b);
            batches++;
            ferry_batch_release(b);
            cli_progress_update(&bar, batches, "batches");
        }
        if (rc != FERRY_END)
            break;
        rc = 0;
    }
    cli_progress_end(&bar);
    uint64_t t_end = ferry_now_ns();
    if (rc < 0) {
        snprintf(errbuf, sizeof errbuf, "%s", ferry_loader_errmsg(l));
        cli_error(1, "%s", errbuf);
        status = 1;
    }

    ferry_loader_stats st;
    ferry_loader_stats_get(l, &st);
    double secs = (double)(t_end - t0) / 1e9;
    double first_ms = t_first ? (double)(t_first - t0) / 1e6 : 0;
    double wait = st.elapsed_ns ? (double)st.consumer_wait_ns / (double)st.elapsed_ns : 0;
    double sps = secs > 0 ? (double)samples / secs : 0;
    double bps = secs > 0 ? (double)st.data_bytes / secs : 0;
    double buf_bps = secs > 0 ? (double)st.bytes / secs : 0;
    uint64_t errors = st.skipped + (status != 0);
    if (json) {
        printf("{\"source\": ");
        cli_json_string(stdout, spec);
        printf(", \"samples\": %llu, \"batches\": %llu, \"epochs\": %llu, \"batch_size\": %u"
               ", \"workers\": %u, \"prefetch\": %u, \"seconds\": %.6f, \"samples_per_s\": %.1f"
               ", \"batches_per_s\": %.1f, \"bytes_per_s\": %.1f, \"first_batch_ms\": %.3f"
               ", \"consumer_wait_fraction\": %.4f, \"errors\": %llu, \"skipped\": %llu"
               ", \"worker_busy_s\": %.6f, \"worker_idle_s\": %.6f, \"stage_s\": {\"read\": %.6f, "
               "\"decode\": %.6f"
               ", \"transform\": %.6f, \"write\": %.6f}",
               (unsigned long long)samples, (unsigned long long)batches, (unsigned long long)epochs,
               o.batch_size, o.num_workers, st.prefetch, secs, sps,
               secs > 0 ? (double)batches / secs : 0, bps, first_ms, wait,
               (unsigned long long)errors, (unsigned long long)st.skipped,
               (double)st.worker_busy_ns / 1e9, (double)st.worker_idle_ns / 1e9,
               (double)st.stage_ns[FERRY_STAGE_READ] / 1e9,
               (double)st.stage_ns[FERRY_STAGE_DECODE] / 1e9,
               (double)st.stage_ns[FERRY_STAGE_TRANSFORM] / 1e9,
               (double)st.stage_ns[FERRY_STAGE_WRITE] / 1e9);
        printf(", \"truncated\": %llu, \"buffer_bytes_per_s\": %.1f",
               (unsigned long long)st.truncated, buf_bps);
        printf(", \"downloaded_bytes\": %llu, \"cache_hits\": %llu, \"cache_misses\": %llu"
               ", \"retries\": %llu, \"fetch_wait_s\": %.6f, \"ranged_reads\": %llu"
               ", \"fetch_buffer_bytes\": %llu, \"fetch_buffer_peak\": %llu"
               ", \"skipped_samples\": [",
               (unsigned long long)st.downloaded_bytes, (unsigned long long)st.cache_hits,
               (unsigned long long)st.cache_misses, (unsigned long long)st.retries,
               (double)st.fetch_wait_ns / 1e9, (unsigned long long)st.ranged_reads,
               (unsigned long long)st.fetch_buffer_bytes, (unsigned long long)st.fetch_buffer_peak);
        for (uint64_t k = 0;; k++) {
            uint64_t ep, ix;
            const char *msg;
            if (ferry_loader_skipped_sample(l, k, &ep, &ix, &msg) < 0)
                break;
            printf("%s{\"epoch\": %llu, \"index\": ", k ? ", " : "", (unsigned long long)ep);
            if (ix == UINT64_MAX)
                printf("null");
            else
                printf("%llu", (unsigned long long)ix);
            printf(", \"error\": ");
            cli_json_string(stdout, msg);
            printf("}");
        }
        printf("]");
        printf(", \"order\": \"%s\", \"shuffle_buffer\": %llu",
               stream   ? (shuffle_buffer ? "shuffle_buffer" : "stream")
               : window ? "shard_window"
                        : (o.shuffle ? "shuffled" : "sequential"),
               (unsigned long long)shuffle_buffer);
        if (window)
            printf(", \"window_shards\": %llu, \"shards\": %llu", (unsigned long long)window,
                   (unsigned long long)nshards);
        if (digest)
            printf(", \"digest\": \"%016llx\"", (unsigned long long)h);
        if (status) {
            printf(", \"error\": ");
            cli_json_string(stdout, errbuf);
        }
        printf("}\n");
    } else {
        printf("source      %s\n", spec);
        char order[160];
        if (window)
            snprintf(order, sizeof order, "shuffled in windows of %llu of %llu shards",
                     (unsigned long long)window, (unsigned long long)nshards);
        else if (!stream)
            snprintf(order, sizeof order, "%s order", o.shuffle ? "shuffled" : "sequential");
        else if (shuffle_buffer)
            snprintf(order, sizeof order,
                     "stream order through a shuffle buffer of %llu samples per shard",
                     (unsigned long long)shuffle_buffer);
        else
            snprintf(order, sizeof order,
                     "stream order, no shuffle buffer (--shuffle or shuffle=N adds one)");
        printf("setup       batch %u, workers %u, prefetch %u, epochs %llu, %s, rank %lld "
               "of %lld\n",
               o.batch_size, o.num_workers, st.prefetch, (unsigned long long)epochs, order,
               (long long)rank, (long long)world);
        printf("delivered   %llu samples in %llu batches, %llu skipped, %llu cut to fit\n",
               (unsigned long long)samples, (unsigned long long)batches,
               (unsigned long long)st.skipped, (unsigned long long)st.truncated);
        if (st.truncated)
            printf("cut         %llu samples were longer than their field and were cut (lines: "
                   "raise max=, or set error_long=1 to make them errors)\n",
                   (unsigned long long)st.truncated);
        for (uint64_t k = 0; k < 5; k++) {
            uint64_t ep, ix;
            const char *msg;
            if (ferry_loader_skipped_sample(l, k, &ep, &ix, &msg) < 0)
                break;
            if (ix == UINT64_MAX)
                printf("skipped     epoch %llu, a stream sample: %s\n", (unsigned long long)ep,
                       msg);
            else
                printf("skipped     epoch %llu, sample %llu: %s\n", (unsigned long long)ep,
                       (unsigned long long)ix, msg);
        }
        if (st.skipped > 5)
            printf("skipped     ... and %llu more%s\n", (unsigned long long)(st.skipped - 5),
                   report.f ? " (all in the --skip-report file)"
                            : " (--skip-report FILE lists them all)");
        if (ds && ferry_tokens_dropped(ds))
            printf("note        %llu tokens are in no window (each shard's tail after its "
                   "last whole window)\n",
                   (unsigned long long)ferry_tokens_dropped(ds));
        printf("time        %.3f s, first batch after %.3f ms\n", secs, first_ms);
        printf("throughput  %.0f samples/s, %.0f batches/s, %.1f MB/s of data (%.1f MB/s of "
               "batch buffers)\n",
               sps, secs > 0 ? (double)batches / secs : 0, bps / 1e6, buf_bps / 1e6);
        printf("consumer    waited %.1f%% of the time%s\n", 100 * wait,
               wait > 0.5 ? " (input-bound)" : "");
        if (st.num_workers)
            printf("workers     busy %.1f%% (read %.3f s, decode %.3f s, transform %.3f s, write "
                   "%.3f s)\n",
                   100.0 * (double)st.worker_busy_ns / ((double)st.elapsed_ns * st.num_workers + 1),
                   (double)st.stage_ns[0] / 1e9, (double)st.stage_ns[1] / 1e9,
                   (double)st.stage_ns[2] / 1e9, (double)st.stage_ns[3] / 1e9);
        if (digest)
            printf("digest      %016llx\n", (unsigned long long)h);
    }
done:
    if (report.f && fclose(report.f) != 0 && status == 0)
        status = cli_error(1, "--skip-report: cannot write \"%s\": %m", report_path);
    ferry_loader_free(l);
    ferry_sampler_free(sampler);
    ferry_stream_free(stream);
    ferry_dataset_free(ds);
    return status;
}
