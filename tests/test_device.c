/*
 * The device layer and the loader's pin_memory, on a machine with or without a
 * GPU: what happens where there is no driver, and, against a stand-in driver
 * (fake_cuda.c, loaded through FERRY_CUDA_LIBRARY), that every batch buffer is
 * page-locked once when it is allocated and unlocked once when it is freed.
 * What only a real GPU shows (that the memory is really locked, copy speed) is
 * not tested here.
 */
#include "ferry/ferry.h"
#include "harness.h"
#include "core/internal.h" /* ferry__test_fail_alloc */
#include "device/ring.h"   /* the ring of device buffers */

#include <dlfcn.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>

typedef struct fake_cuda_state {
    int devices;
    int init_result;
    long fail_register;
    long inits, registers, unregisters, live, errors, ctx_refs, max_live;
    uint64_t live_bytes;
} fake_cuda_state;

typedef struct fake_cuda_sim {
    long query_steps;
    long fail_alloc; /* the n-th cuMemAlloc from now (1-based) fails; 0 = none */
    long allocs, streams_live, events_live, allocs_live, copies, copies_unpinned, host_overwritten,
        reads, waits, sim_errors, max_allocs;
    uint64_t alloc_bytes;
} fake_cuda_sim;

static void (*fake_reset)(int devices, int init_result, long fail_register);
static void (*fake_sim_reset)(long query_steps);
static void (*fake_sim_get)(fake_cuda_sim *out);
static long (*fake_progress)(long n);
static int (*fake_read)(void *stream, unsigned long long p, size_t n, uint64_t *out);
static void *(*fake_stream_new)(void);
static void (*fake_fail_alloc)(long n);
static void (*fake_fail_push)(long n);
static unsigned long long (*fake_alloc)(size_t n);
static int (*fake_copy)(void *s, unsigned long long dst, const void *src, size_t n);
static void (*fake_get)(fake_cuda_state *out);
static int (*fake_is_registered)(const void *p, size_t n);

/* Points ferry at the stand-in driver and resets it. */
static void use_fake(int devices, int init_result, long fail_register)
{
    CHECK(setenv("FERRY_CUDA_LIBRARY", FAKE_CUDA_LIBRARY, 1) == 0);
    void *lib = dlopen(FAKE_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib)
        test_fail(__FILE__, __LINE__, "cannot load the stand-in driver: %s", dlerror());
    *(void **)&fake_reset = dlsym(lib, "fake_cuda_reset");
    *(void **)&fake_get = dlsym(lib, "fake_cuda_get");
    *(void **)&fake_is_registered = dlsym(lib, "fake_cuda_is_registered");
    *(void **)&fake_sim_reset = dlsym(lib, "fake_cuda_sim_reset");
    *(void **)&fake_sim_get = dlsym(lib, "fake_cuda_sim_get");
    *(void **)&fake_progress = dlsym(lib, "fake_cuda_progress");
    *(void **)&fake_read = dlsym(lib, "fake_cuda_read");
    *(void **)&fake_stream_new = dlsym(lib, "fake_cuda_stream_new");
    *(void **)&fake_fail_alloc = dlsym(lib, "fake_cuda_sim_fail_alloc");
    *(void **)&fake_fail_push = dlsym(lib, "fake_cuda_fail_push");
    *(void **)&fake_alloc = dlsym(lib, "fake_cuda_alloc");
    *(void **)&fake_copy = dlsym(lib, "fake_cuda_copy");
    CHECK(fake_reset && fake_get && fake_is_registered && fake_sim_reset && fake_sim_get &&
          fake_progress && fake_read && fake_stream_new && fake_alloc && fake_copy &&
          fake_fail_alloc && fake_fail_push);
    fake_fail_push(0);
    fake_reset(devices, init_result, fail_register);
    fake_sim_reset(0); /* queues advance only when a call must see work done */
    dlclose(lib);
}

static fake_cuda_sim sim(void)
{
    fake_cuda_sim s;
    fake_sim_get(&s);
    return s;
}

static fake_cuda_state fake(void)
{
    fake_cuda_state s;
    fake_get(&s);
    return s;
}

static ferry_dataset *synthetic(uint64_t count, uint64_t bytes, uint64_t var)
{
    ferry_synthetic_opts o = {.count = count, .bytes = bytes, .var_max = var, .seed = 7};
    ferry_dataset *ds;
    CHECK_OK(ferry_dataset_synthetic(&ds, &o));
    return ds;
}

static ferry_loader_opts pinned(uint32_t batch, uint32_t workers, uint32_t prefetch)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = batch;
    o.num_workers = workers;
    o.prefetch = prefetch;
    o.seed = 1234;
    o.pin_memory = 1;
    return o;
}

static void check_has(const char *msg, const char *want)
{
    if (!strstr(msg, want))
        test_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", msg, want);
}

/* Every field of a batch lies in memory the driver has registered. */
static void check_batch_pinned(const ferry_batch *b)
{
    for (int f = 0; f < ferry_batch_nfields(b); f++) {
        ferry_tensor t;
        CHECK_OK(ferry_batch_field(b, f, &t));
        CHECK(fake_is_registered(t.data, ferry_tensor_nbytes(&t)));
    }
}

/* The loader's count of locked bytes against the driver's (which locks whole
 * pages). */
static void check_pinned_bytes(const ferry_loader_stats *s)
{
    fake_cuda_state f = fake();
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    CHECK(s->pinned_bytes > 0);
    CHECK(s->pinned_bytes <= f.live_bytes);
    CHECK(f.live_bytes < s->pinned_bytes + (uint64_t)f.live * page);
}

/* Sample i's bytes as the dataset gives them, against batch memory. */
static void check_sample(ferry_dataset *ds, uint64_t i, const uint8_t *got, size_t n)
{
    ferry_ctx *ctx;
    CHECK_OK(ferry_ctx_create(&ctx, 0, 0));
    uint8_t want[64];
    int64_t label, len[2] = {0};
    void *data[2] = {want, &label};
    ferry_sample s = {2, data, len, {0}};
    CHECK(n <= sizeof want);
    CHECK_OK(ferry_dataset_get(ds, i, &s, ctx));
    CHECK(memcmp(got, want, n) == 0);
    ferry_ctx_free(ctx);
}

TEST(opts_default_is_unpinned_on_the_host)
{
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    CHECK_EQ(o.pin_memory, 0);
    CHECK(o.device == NULL);
    /* nothing asks for a driver: none is loaded, even a loadable one */
    use_fake(1, 0, 0);
    ferry_dataset *ds = synthetic(64, 16, 0);
    o.batch_size = 8;
    o.device = "cpu";
    ferry_loader *l;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_batch *b;
    CHECK_OK(ferry_loader_next(l, &b));
    ferry_batch_release(b);
    ferry_loader_stats s;
    CHECK_OK(ferry_loader_stats_get(l, &s));
    CHECK_U64(s.pinned_bytes, 0);
    ferry_loader_free(l);
    CHECK_EQ(fake().inits, 0);
    CHECK_EQ(fake().registers, 0);
    ferry_dataset_free(ds);
}

/* A FIFO given as the driver: refused at once (dlopen would wait for a writer). */
TEST(a_fifo_as_the_driver_is_refused)
{
    ferry_dataset *ds = synthetic(64, 16, 0);
    ferry_loader_opts o = pinned(8, 2, 2);
    ferry_loader *l;
    char fifo[600];
    test_make_dir("device-fifo");
    test_path("libcuda.so.1", fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(setenv("FERRY_CUDA_LIBRARY", fifo, 1) == 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(), "is not a regular file");
    CHECK(unsetenv("FERRY_CUDA_LIBRARY") == 0);
    test_remove_dir();
    ferry_dataset_free(ds);
}

TEST(no_driver_is_enotsup_naming_the_cause)
{
    ferry_dataset *ds = synthetic(64, 16, 0);
    ferry_loader_opts o = pinned(8, 2, 2);
    ferry_loader *l;
    /* a driver library that is not there */
    CHECK(setenv("FERRY_CUDA_LIBRARY", "libferry-test-no-such-driver.so.1", 1) == 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(), "pin_memory: no usable CUDA device: "
                                   "libferry-test-no-such-driver.so.1: cannot open shared object "
                                   "file");
    CHECK_RC(ferry_device_probe("cuda"), FERRY_ENOTSUP);
    /* the machine's own driver, where it has none (on a GPU machine: skip) */
    CHECK(unsetenv("FERRY_CUDA_LIBRARY") == 0);
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        ferry_dataset_free(ds);
        SKIP("this machine has a CUDA driver (libcuda.so.1): the no-driver case cannot be seen");
    }
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(),
              "pin_memory: no usable CUDA device: libcuda.so.1: cannot open shared object file");
    o.pin_memory = 0;
    o.device = "cuda:1";
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(), "device \"cuda:1\": no usable CUDA device: libcuda.so.1");
    ferry_dataset_free(ds);
}

TEST(driver_without_devices_is_enotsup_naming_the_cause)
{
    ferry_dataset *ds = synthetic(64, 16, 0);
    ferry_loader_opts o = pinned(8, 0, 2);
    ferry_loader *l;
    use_fake(1, 100 /* CUDA_ERROR_NO_DEVICE */, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(),
              "pin_memory: no usable CUDA device: cuInit: CUDA_ERROR_NO_DEVICE");
    use_fake(0, 0, 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(), "pin_memory: no usable CUDA device: the driver sees no device");
    use_fake(2, 0, 0);
    o.device = "cuda:2";
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_ENOTSUP);
    check_has(ferry_last_errmsg(),
              "\"cuda:2\" asked, and the driver sees 2 devices (cuda:0 .. cuda:1)");
    /* a device that exists: batches are delivered there */
    o.device = "cuda:1";
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    ferry_loader_free(l);
    CHECK_EQ(fake().ctx_refs, 0);
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().errors, 0);
    ferry_dataset_free(ds);
}

TEST(device_names_parse)
{
    int kind, ord;
    CHECK_OK(ferry_device_parse("cpu", &kind, &ord));
    CHECK(kind == FERRY_DEVICE_CPU && ord == 0);
    CHECK_OK(ferry_device_parse("cuda", &kind, &ord));
    CHECK(kind == FERRY_DEVICE_CUDA && ord == 0);
    CHECK_OK(ferry_device_parse("cuda:1", &kind, &ord));
    CHECK(kind == FERRY_DEVICE_CUDA && ord == 1);
    CHECK_OK(ferry_device_parse("cuda:1023", &kind, &ord));
    CHECK_EQ(ord, 1023);
    const char *bad[] = {"",          "gpu",     "cuda:", "cuda:-1", "cuda:+1",
                         "cuda:1024", "cuda:1x", "CUDA",  "cuda: 1", "cuda:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(ferry_device_parse(bad[i], &kind, &ord), FERRY_EINVAL);
        check_has(ferry_last_errmsg(), "not \"cpu\", \"cuda\" or \"cuda:N\"");
    }
    /* and through the loader, before any driver is looked for */
    ferry_dataset *ds = synthetic(8, 4, 0);
    ferry_loader_opts o = pinned(2, 0, 1);
    o.device = "tpu:0";
    ferry_loader *l;
    CHECK(setenv("FERRY_CUDA_LIBRARY", "libferry-test-no-such-driver.so.1", 1) == 0);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EINVAL);
    check_has(ferry_last_errmsg(), "device \"tpu:0\": not \"cpu\"");
    ferry_dataset_free(ds);
}

TEST(host_alloc_is_zeroed_page_aligned_and_registered_once)
{
    use_fake(1, 0, 0);
    ferry_device *d;
    CHECK_OK(ferry_device_open(&d, "cuda"));
    CHECK_EQ(ferry_device_ordinal(d), 0);
    CHECK_EQ(fake().ctx_refs, 1);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p[3];
    size_t sizes[3] = {1, page, 3 * page + 5};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ferry_device_host_alloc(d, sizes[i], &p[i]));
        CHECK((uintptr_t)p[i] % page == 0);
        for (size_t k = 0; k < sizes[i]; k++)
            CHECK(((uint8_t *)p[i])[k] == 0);
        memset(p[i], 0xab, sizes[i]);
        CHECK(fake_is_registered(p[i], sizes[i]));
    }
    CHECK_EQ(fake().registers, 3);
    CHECK_EQ(fake().live, 3);
    void *q;
    CHECK_RC(ferry_device_host_alloc(d, 0, &q), FERRY_EINVAL);
    for (int i = 0; i < 3; i++)
        ferry_device_host_free(d, p[i], sizes[i]);
    ferry_device_host_free(d, NULL, 0);
    CHECK_EQ(fake().unregisters, 3);
    CHECK_EQ(fake().live, 0);
    ferry_device_free(d);
    ferry_device_free(NULL);
    CHECK_EQ(fake().ctx_refs, 0);
    CHECK_EQ(fake().errors, 0);
}

/* A steady loop: the pool's buffers are locked once each, at creation, and
 * reused with no more driver calls; freeing the loader unlocks each once. */
TEST(pool_is_pinned_once_at_creation)
{
    ferry_dataset *ds = synthetic(800, 16, 0);
    for (uint32_t workers = 0; workers < 4; workers += 3) {
        use_fake(1, 0, 0);
        ferry_loader_opts o = pinned(8, workers, 0);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_loader_stats s;
        CHECK_OK(ferry_loader_stats_get(l, &s));
        CHECK_EQ(fake().registers, s.prefetch);
        CHECK_EQ(fake().live, s.prefetch);
        check_pinned_bytes(&s);
        for (int epoch = 0; epoch < 2; epoch++) {
            CHECK_OK(ferry_loader_start(l, (uint64_t)epoch, 0));
            ferry_batch *b;
            uint64_t n = 0;
            while (ferry_loader_next(l, &b) == 0) {
                check_batch_pinned(b);
                ferry_tensor t;
                CHECK_OK(ferry_batch_field(b, 0, &t));
                check_sample(ds, ferry_batch_indices(b)[0], t.data, 16);
                n++;
                ferry_batch_release(b);
            }
            CHECK_U64(n, 100);
        }
        CHECK_EQ(fake().registers, s.prefetch);
        CHECK_EQ(fake().unregisters, 0);
        ferry_loader_free(l);
        CHECK_EQ(fake().unregisters, s.prefetch);
        CHECK_EQ(fake().live, 0);
        CHECK_EQ(fake().ctx_refs, 0);
        CHECK_EQ(fake().errors, 0);
    }
    ferry_dataset_free(ds);
}

/* Batches released while their tensors live get new buffers: each is locked
 * once when made and unlocked once when its last tensor goes, whenever that is. */
TEST(blocks_kept_by_tensors_are_pinned_and_unpinned_once)
{
    ferry_dataset *ds = synthetic(400, 16, 0);
    for (uint32_t workers = 0; workers < 4; workers++) {
        use_fake(1, 0, 0);
        ferry_loader_opts o = pinned(8, workers, 2);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_tensor kept[50];
        ferry_batch *b;
        for (int i = 0; i < 50; i++) {
            CHECK_OK(ferry_loader_next(l, &b));
            check_batch_pinned(b);
            CHECK_OK(ferry_batch_export(b, 0, 0, &kept[i]));
            ferry_batch_release(b); /* a pool of 2 and 50 batches kept by their tensors */
        }
        CHECK_RC(ferry_loader_next(l, &b), FERRY_END);
        /* every kept batch has memory of its own, locked: 50 of them, plus what
         * the pool holds (at most its 2 buffers and as many spares) */
        fake_cuda_state f = fake();
        CHECK(f.registers >= 50 && f.registers <= 54);
        CHECK_EQ(f.live, f.registers - f.unregisters);
        ferry_loader_stats s;
        CHECK_OK(ferry_loader_stats_get(l, &s));
        check_pinned_bytes(&s);
        if (workers % 2)
            ferry_loader_free(l); /* the tensors outlive the loader */
        for (int i = 0; i < 50; i++) {
            CHECK(fake_is_registered(kept[i].data, ferry_tensor_nbytes(&kept[i])));
            check_sample(ds, (uint64_t)i * 8 + 5, (uint8_t *)kept[i].data + 5 * 16, 16);
            ferry_tensor_release(&kept[i]);
        }
        if (workers % 2 == 0) {
            /* the loader keeps at most a pool's worth of spares, locked */
            CHECK(fake().live <= 4);
            ferry_loader_free(l);
        }
        f = fake();
        CHECK_EQ(f.unregisters, f.registers);
        CHECK_EQ(f.live, 0);
        CHECK_EQ(f.ctx_refs, 0);
        CHECK_EQ(f.errors, 0);
    }
    ferry_dataset_free(ds);
}

/* Tensors that outlive their batch a little: the blocks they free come back as
 * spares, still locked, and take turns without another driver call. */
TEST(spare_blocks_stay_pinned_and_are_not_locked_again)
{
    ferry_dataset *ds = synthetic(800, 16, 0);
    for (uint32_t workers = 0; workers < 3; workers += 2) {
        use_fake(1, 0, 0);
        ferry_loader_opts o = pinned(8, workers, 2);
        ferry_loader *l;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_tensor prev = {0};
        ferry_batch *b;
        int n = 0;
        while (ferry_loader_next(l, &b) == 0) {
            check_batch_pinned(b);
            ferry_tensor t;
            CHECK_OK(ferry_batch_export(b, 0, 0, &t));
            /* the block before goes back as a spare, then this batch goes back
             * without its block (the tensor keeps it) and takes the spare */
            if (n++)
                ferry_tensor_release(&prev);
            ferry_batch_release(b);
            prev = t;
        }
        CHECK_EQ(n, 100);
        /* the pool's 2 and the one the first kept tensor took; from then on a
         * spare is always there when a buffer needs a block, and is not locked
         * again */
        fake_cuda_state f = fake();
        if (f.registers > 3)
            test_fail(__FILE__, __LINE__, "%ld registrations for 100 batches", f.registers);
        CHECK_EQ(f.unregisters, 0);
        ferry_tensor_release(&prev);
        ferry_loader_free(l);
        f = fake();
        CHECK_EQ(f.unregisters, f.registers);
        CHECK_EQ(f.live, 0);
        CHECK_EQ(f.errors, 0);
    }
    ferry_dataset_free(ds);
}

TEST(stream_loader_pins_too)
{
    use_fake(1, 0, 0);
    ferry_dataset *ds = synthetic(100, 16, 0);
    ferry_stream *st;
    CHECK_OK(ferry_stream_from_dataset(&st, ds));
    ferry_loader_opts o = pinned(10, 2, 3);
    o.stream_shards = 2;
    o.rank = 0;
    o.world_size = 1;
    ferry_loader *l;
    CHECK_OK(ferry_loader_create_stream(&l, st, &o));
    CHECK_EQ(fake().registers, 3);
    ferry_batch *b;
    int n = 0;
    while (ferry_loader_next(l, &b) == 0) {
        check_batch_pinned(b);
        ferry_batch_release(b);
        n++;
    }
    CHECK_EQ(n, 10);
    ferry_loader_free(l);
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().errors, 0);
    ferry_stream_free(st);
    ferry_dataset_free(ds);
}

TEST(a_buffer_the_driver_will_not_lock_is_a_clear_error)
{
    ferry_dataset *ds = synthetic(400, 16, 0);
    ferry_loader *l;
    /* at creation: the second buffer of the pool */
    use_fake(1, 0, 2);
    ferry_loader_opts o = pinned(8, 2, 3);
    CHECK_RC(ferry_loader_create(&l, ds, &o), FERRY_EIO);
    check_has(ferry_last_errmsg(), "pin_memory: batch buffer 1: cuda:0: cannot page-lock ");
    check_has(ferry_last_errmsg(), "cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().ctx_refs, 0);
    /* later: the first buffer made because tensors keep the pool's */
    for (uint32_t workers = 0; workers < 3; workers += 2) {
        use_fake(1, 0, 3);
        o = pinned(8, workers, 2);
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        ferry_tensor kept[3];
        int got = 0, rc;
        ferry_batch *b;
        while (got < 3 && (rc = ferry_loader_next(l, &b)) == 0) {
            CHECK_OK(ferry_batch_export(b, 0, 0, &kept[got++]));
            ferry_batch_release(b);
        }
        CHECK(got < 3);
        CHECK_RC(rc, FERRY_EIO);
        check_has(ferry_loader_errmsg(l),
                  "pin_memory: a new batch buffer: cuda:0: cannot page-lock");
        check_has(ferry_loader_errmsg(l), "CUDA_ERROR_OUT_OF_MEMORY");
        /* the epoch is over; a new one runs once memory can be locked again */
        for (int i = 0; i < got; i++)
            ferry_tensor_release(&kept[i]);
        CHECK_OK(ferry_loader_start(l, 1, 0));
        uint64_t n = 0;
        while ((rc = ferry_loader_next(l, &b)) == 0) {
            n++;
            ferry_batch_release(b);
        }
        CHECK_RC(rc, FERRY_END);
        CHECK_U64(n, 50);
        ferry_loader_free(l);
        fake_cuda_state f = fake();
        CHECK_EQ(f.live, 0);
        CHECK_EQ(f.ctx_refs, 0);
        CHECK_EQ(f.errors, 0);
    }
    ferry_dataset_free(ds);
}

/* Each allocation of opening a device, and of a pinned loader's creation,
 * failing in turn: a clean error and nothing left locked or retained. */
TEST(out_of_memory_leaves_nothing_locked)
{
    use_fake(1, 0, 0);
    ferry_device *d;
    ferry__test_fail_alloc(0);
    CHECK_RC(ferry_device_open(&d, "cuda"), FERRY_ENOMEM);
    ferry__test_fail_alloc(-1);
    CHECK_EQ(fake().ctx_refs, 0);
    ferry_dataset *ds = synthetic(64, 16, 4);
    ferry_loader_opts o = pinned(8, 2, 3);
    int failed = 0;
    for (long n = 0; n < 1000; n++) {
        ferry_loader *l;
        ferry__test_fail_alloc(n);
        int rc = ferry_loader_create(&l, ds, &o);
        ferry__test_fail_alloc(-1);
        if (rc == 0) {
            ferry_loader_free(l);
            break;
        }
        CHECK_RC(rc, FERRY_ENOMEM);
        failed++;
        CHECK_EQ(fake().live, 0);
        CHECK_EQ(fake().ctx_refs, 0);
    }
    CHECK(failed > 3);
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().ctx_refs, 0);
    CHECK_EQ(fake().errors, 0);
    ferry_dataset_free(ds);
}

/* ---- The ring of device buffers, against the stand-in's queues ---- */

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A ring of max buffers of n bytes on the stand-in, and a second device handle
 * for host memory (the ring takes its own over). */
static ferry__dring *ring_new(size_t n, uint32_t max, ferry_device **host)
{
    use_fake(1, 0, 0);
    ferry_device *d;
    ferry__dring *r;
    CHECK_OK(ferry_device_open(&d, "cuda:0"));
    CHECK_OK(ferry_device_open(host, "cuda"));
    CHECK_OK(ferry__dring_create(&r, d, n, max));
    return r;
}

/* A consumer takes a buffer on its stream, queues a kernel that reads it, and
 * gives it back before the kernel has run; the next copy into the same buffer
 * must wait for that kernel. The queues run only at the end, so a copy that did
 * not wait would show the second batch's bytes to the first kernel. */
TEST(ring_reuses_a_buffer_only_after_the_consumers_work)
{
    enum { N = 8192 };
    ferry_device *h;
    ferry__dring *r = ring_new(N, 1, &h);
    void *stream = fake_stream_new();
    uint8_t *host[3];
    uint64_t want[3], got[3] = {0};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(ferry_device_host_alloc(h, N, (void **)&host[k]));
        memset(host[k], 'a' + k, N);
        want[k] = fnv(host[k], N);
    }
    for (int k = 0; k < 3; k++) {
        ferry__dbuf *b;
        CHECK_OK(ferry__dring_copy(r, host[k], N, &b));
        CHECK(!ferry__dbuf_copied(b)); /* nothing has run yet */
        CHECK_OK(ferry__dbuf_use(b, stream));
        CHECK_OK(ferry__dbuf_use(b, stream)); /* a second use of one stream: one wait more */
        CHECK_EQ(fake_read(stream, ferry__dbuf_ptr(b), N, &got[k]), 0);
        ferry__dbuf_unref(b);
        if (k == 0)
            fake_progress(1 << 20); /* copy 0's events are read back when it is reused */
    }
    CHECK(fake_progress(1 << 20) > 0);
    for (int k = 0; k < 3; k++)
        CHECK_U64(got[k], want[k]);
    CHECK_EQ(sim().host_overwritten, 0);
    CHECK_EQ(sim().copies, 3);
    CHECK_EQ(sim().copies_unpinned, 0);
    CHECK_EQ(sim().max_allocs, 1);
    ferry__dring_stats st;
    ferry__dring_stats_get(r, &st);
    CHECK_U64(st.copies, 3);
    CHECK_U64(st.bytes, 3 * N);
    /* copy 1 was reused before its events had run: its figures are not counted */
    CHECK(st.timed == 2 && st.copy_ns > 0 && st.exposed_ns <= st.copy_ns);
    CHECK_U64(st.device_bytes, N);
    ferry__dring_free(r);
    for (int k = 0; k < 3; k++)
        ferry_device_host_free(h, host[k], N);
    ferry_device_free(h);
    CHECK_EQ(sim().allocs_live, 0);
    CHECK_EQ(sim().events_live, 0);
    CHECK_EQ(sim().streams_live, 1); /* the test's own stream */
    CHECK_EQ(sim().sim_errors, 0);
    CHECK_EQ(fake().errors, 0);
    CHECK_EQ(fake().ctx_refs, 0);
}

/* The stand-in catches what the ring guards against: a consumer that reads on a
 * stream it did not declare gets no such guarantee, and the kernel sees the next
 * batch's bytes. (Shows that the test above can fail.) */
TEST(ring_without_the_consumers_stream_is_caught_by_the_stand_in)
{
    enum { N = 4096 };
    ferry_device *h;
    ferry__dring *r = ring_new(N, 1, &h);
    void *stream = fake_stream_new();
    uint8_t *host;
    CHECK_OK(ferry_device_host_alloc(h, N, (void **)&host));
    memset(host, 'x', N);
    uint64_t want = fnv(host, N), got = 0;
    ferry__dbuf *b;
    CHECK_OK(ferry__dring_copy(r, host, N, &b));
    CHECK_OK(ferry__dbuf_wait_copied(b));
    CHECK_EQ(fake_read(stream, ferry__dbuf_ptr(b), N, &got), 0); /* not declared */
    ferry__dbuf_unref(b);
    memset(host, 'y', N);
    CHECK_OK(ferry__dring_copy(r, host, N, &b));
    CHECK_OK(ferry__dbuf_wait_copied(b)); /* the copy ran before the kernel */
    fake_progress(1 << 20);
    CHECK(got != want);
    ferry__dbuf_unref(b);
    ferry__dring_free(r);
    ferry_device_host_free(h, host, N);
    ferry_device_free(h);
    CHECK_EQ(sim().sim_errors, 0);
}

/* A host buffer may be refilled once the copy's event has completed: the ring
 * says when, and the stand-in checks that the copy read the bytes as queued. All
 * buffers held is FERRY_ESTATE; buffers outlive the ring's owner. */
TEST(ring_limits_buffers_and_outlives_its_owner)
{
    enum { N = 1000 };
    ferry_device *h;
    ferry__dring *r = ring_new(N, 2, &h);
    uint8_t *host;
    CHECK_OK(ferry_device_host_alloc(h, N, (void **)&host));
    ferry__dbuf *b[3];
    memset(host, 1, N);
    CHECK_OK(ferry__dring_copy(r, host, N, &b[0]));
    CHECK(!ferry__dbuf_copied(b[0]));
    CHECK_OK(ferry__dbuf_wait_copied(b[0]));
    CHECK(ferry__dbuf_copied(b[0]));
    memset(host, 2, N); /* after the copy's event: allowed */
    CHECK_OK(ferry__dring_copy(r, host, N - 1, &b[1]));
    CHECK_RC(ferry__dring_copy(r, host, N, &b[2]), FERRY_ESTATE);
    CHECK_CONTAINS(ferry_last_errmsg(), "all 2 device buffers");
    CHECK_RC(ferry__dring_copy(r, host, N + 1, &b[2]), FERRY_EINVAL);
    ferry__dbuf_ref(b[1]); /* a tensor viewing it */
    ferry__dbuf_unref(b[1]);
    ferry__dring_free(r); /* the owner goes; b[0] and b[1] are still in use */
    CHECK_EQ(sim().allocs_live, 2);
    ferry__dbuf_unref(b[0]);
    CHECK_EQ(sim().allocs_live, 2);
    ferry__dbuf_release(b[1]); /* the last: the ring goes with it */
    CHECK_EQ(sim().allocs_live, 0);
    CHECK_EQ(sim().events_live, 0);
    CHECK_EQ(sim().streams_live, 0);
    CHECK_EQ(sim().host_overwritten, 0);
    ferry_device_host_free(h, host, N);
    ferry_device_free(h);
    CHECK_EQ(sim().sim_errors, 0);
    CHECK_EQ(fake().errors, 0);
    CHECK_EQ(fake().ctx_refs, 0);
}

/* Fences: recorded on the streams given (or the legacy stream), done once their
 * events have run, waited for by the host on those events alone. */
TEST(fences_wait_for_the_streams_that_used_the_memory)
{
    use_fake(1, 0, 0);
    ferry_device *d;
    CHECK_OK(ferry_device_open(&d, "cuda"));
    void *s[2] = {fake_stream_new(), fake_stream_new()};
    ferry__fence f = {0};
    CHECK(ferry__fence_done(d, &f));
    CHECK_OK(ferry__fence_record(d, &f, s, 2));
    CHECK(!ferry__fence_done(d, &f));
    CHECK_OK(ferry__fence_wait(d, &f));
    CHECK(ferry__fence_done(d, &f));
    CHECK_OK(ferry__fence_record(d, &f, NULL, 0)); /* the legacy default stream */
    CHECK_EQ(f.n, 1);
    fake_progress(100);
    CHECK(ferry__fence_done(d, &f));
    ferry__fence_clear(d, &f);
    CHECK_EQ(sim().events_live, 0);
    ferry_device_free(d);
    CHECK_EQ(sim().sim_errors, 0);
}

/* ---- Delivery on the device, through the loader ---- */

typedef struct field_sums {
    uint64_t sum[4];
} field_sums;

/* The FNV hash of each field (and lengths) of every batch, from a host loader. */
static uint32_t host_sums(ferry_dataset *ds, ferry_loader_opts o, field_sums *out, uint32_t cap)
{
    o.device = NULL;
    o.pin_memory = 0;
    ferry_loader *l;
    ferry_batch *b;
    uint32_t n = 0;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    while (ferry_loader_next(l, &b) == 0) {
        CHECK(n < cap);
        int k = 0;
        for (int f = 0; f < ferry_batch_nfields(b); f++) {
            ferry_tensor t;
            CHECK_OK(ferry_batch_field(b, f, &t));
            out[n].sum[k++] = fnv(t.data, ferry_tensor_nbytes(&t));
            if (ferry_batch_field_info(b, f)->variable) {
                CHECK_OK(ferry_batch_lengths(b, f, &t));
                out[n].sum[k++] = fnv(t.data, ferry_tensor_nbytes(&t));
            }
        }
        ferry_batch_release(b);
        n++;
    }
    ferry_loader_free(l);
    return n;
}

/* Every batch on the device holds the host batch's bytes, read by a consumer's
 * kernel that runs long after the batch and its tensors were given back: with
 * two device buffers taking turns, each copy waited for the kernels before it. */
TEST(device_batches_hold_the_host_bytes_and_wait_for_the_consumer)
{
    ferry_dataset *ds = synthetic(300, 24, 5);
    for (uint32_t workers = 0; workers <= 2; workers += 2) {
        use_fake(1, 0, 0);
        ferry_loader_opts o = pinned(16, workers, 4);
        o.pin_memory = 0;
        o.shuffle = 1;
        o.seed = 3;
        o.device = "cuda";
        o.device_buffers = 2;
        field_sums want[32], got[32];
        memset(got, 0, sizeof got);
        uint32_t n = host_sums(ds, o, want, 32);
        void *stream = fake_stream_new();
        ferry_loader *l;
        ferry_batch *b;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        uint32_t k = 0;
        while (ferry_loader_next(l, &b) == 0) {
            CHECK(k < n);
            CHECK_EQ(ferry_batch_device(b), 0);
            CHECK(ferry_batch_event(b) != NULL);
            CHECK_OK(ferry_batch_record_stream(b, stream));
            int j = 0;
            ferry_tensor t[4];
            for (int f = 0; f < ferry_batch_nfields(b); f++) {
                CHECK_OK(ferry_batch_export(b, f, 0, &t[j]));
                CHECK(!fake_is_registered(t[j].data, 1)); /* device memory, not the block */
                CHECK_EQ(fake_read(stream, (uintptr_t)t[j].data, ferry_tensor_nbytes(&t[j]),
                                   &got[k].sum[j]),
                         0);
                j++;
                if (ferry_batch_field_info(b, f)->variable) {
                    CHECK_OK(ferry_batch_export(b, f, 1, &t[j]));
                    CHECK_EQ(fake_read(stream, (uintptr_t)t[j].data, ferry_tensor_nbytes(&t[j]),
                                       &got[k].sum[j]),
                             0);
                    j++;
                }
            }
            ferry_batch_release(b);
            for (int i = 0; i < j; i++)
                ferry_tensor_release(&t[i]);
            k++;
        }
        CHECK_EQ(k, n);
        fake_progress(1 << 24);
        for (uint32_t i = 0; i < n; i++)
            for (int j = 0; j < 3; j++)
                CHECK_U64(got[i].sum[j], want[i].sum[j]);
        ferry_loader_stats s;
        CHECK_OK(ferry_loader_stats_get(l, &s));
        CHECK_U64(s.copies, n);
        CHECK(s.device_bytes > 0 && s.copy_bytes >= s.device_bytes);
        CHECK(s.copies_timed > 0 && s.copy_ns > 0);
        ferry_loader_free(l);
        CHECK(sim().max_allocs >= 1 && sim().max_allocs <= 2 && sim().copies > 2);
        CHECK_EQ(sim().allocs_live, 0);
        CHECK_EQ(sim().host_overwritten, 0);
        CHECK_EQ(sim().copies_unpinned, 0);
        CHECK_EQ(sim().sim_errors, 0);
        CHECK_EQ(fake().errors, 0);
        CHECK_EQ(fake().live, 0);
        CHECK_EQ(fake().ctx_refs, 0);
    }
    ferry_dataset_free(ds);
}

/* All device buffers held: FERRY_ESTATE, saying so, and the epoch goes on once
 * one is released. Tensors outlive the loader with their device memory. */
TEST(device_buffers_bound_device_memory_and_outlive_the_loader)
{
    use_fake(1, 0, 0);
    ferry_dataset *ds = synthetic(64, 16, 0);
    ferry_loader_opts o = pinned(8, 2, 4);
    o.pin_memory = 0;
    o.device = "cuda:0";
    o.device_buffers = 2;
    ferry_loader *l;
    ferry_batch *b[3];
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    CHECK_OK(ferry_loader_next(l, &b[0]));
    CHECK_OK(ferry_loader_next(l, &b[1]));
    CHECK_RC(ferry_loader_next(l, &b[2]), FERRY_ESTATE);
    check_has(ferry_loader_errmsg(l), "all 2 device buffers hold batches");
    ferry_tensor keep;
    CHECK_OK(ferry_batch_export(b[0], 0, 0, &keep));
    ferry_batch_release(b[0]);
    CHECK_RC(ferry_loader_next(l, &b[2]), FERRY_ESTATE); /* the tensor holds its buffer */
    ferry_batch_release(b[1]);
    CHECK_OK(ferry_loader_next(l, &b[2]));
    ferry_batch_release(b[2]);
    ferry_loader_free(l);
    CHECK_EQ(sim().allocs_live, 2); /* the tensor's buffer and the ring's other one */
    ferry_tensor_release(&keep);
    CHECK_EQ(sim().allocs_live, 0);
    CHECK_EQ(sim().events_live, 0);
    CHECK_EQ(sim().streams_live, 0);
    CHECK_EQ(sim().sim_errors, 0);
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().ctx_refs, 0);
    ferry_dataset_free(ds);
}

/* pin_memory: the caller copies a batch asynchronously on its stream, which runs
 * late, and gives the batch back at once. With the stream recorded, the buffer
 * is refilled only after that copy; the legacy default stream's fence alone does
 * not cover another stream, and the stand-in sees the refill overwrite the
 * bytes before the copy reads them. */
TEST(pinned_buffers_are_refilled_only_after_the_recorded_streams)
{
    ferry_dataset *ds = synthetic(64, 4000, 0);
    for (int record = 1; record >= 0; record--) {
        use_fake(1, 0, 0);
        ferry_loader_opts o = pinned(4, 0, 1); /* one buffer: each batch refills it */
        void *stream = fake_stream_new();
        ferry_loader *l;
        ferry_batch *b;
        CHECK_OK(ferry_loader_create(&l, ds, &o));
        unsigned long long dst = fake_alloc(16000);
        CHECK(dst != 0);
        int batches = 0;
        while (ferry_loader_next(l, &b) == 0) {
            ferry_tensor t;
            if (record && batches % 2) {
                /* as Python does: the batch goes at once, a tensor keeps the block,
                 * the copy is queued from the tensor, then the tensor goes */
                CHECK_OK(ferry_batch_record_stream(b, stream));
                CHECK_OK(ferry_batch_export(b, 0, 0, &t));
                ferry_batch_release(b);
                CHECK_EQ(fake_copy(stream, dst, t.data, ferry_tensor_nbytes(&t)), 0);
                ferry_tensor_release(&t);
            } else {
                CHECK_OK(ferry_batch_field(b, 0, &t));
                CHECK_EQ(fake_copy(stream, dst, t.data, ferry_tensor_nbytes(&t)), 0);
                if (record)
                    CHECK_OK(ferry_batch_record_stream(b, stream));
                ferry_batch_release(b);
            }
            batches++;
        }
        CHECK_EQ(batches, 16);
        fake_progress(1 << 24);
        if (record)
            CHECK_EQ(sim().host_overwritten, 0);
        else
            CHECK(sim().host_overwritten > 0);
        ferry_loader_free(l);
        CHECK_EQ(sim().sim_errors, 0);
        CHECK_EQ(fake().live, 0);
    }
    ferry_dataset_free(ds);
}

/* Device memory the driver will not give: the epoch ends with the driver's error,
 * naming the buffer; the next epoch gets its buffers; nothing leaks. */
TEST(device_memory_refused_ends_the_epoch_saying_so)
{
    use_fake(1, 0, 0);
    ferry_dataset *ds = synthetic(64, 16, 0);
    ferry_loader_opts o = pinned(8, 2, 4);
    o.pin_memory = 0;
    o.device = "cuda";
    ferry_loader *l;
    ferry_batch *b;
    CHECK_OK(ferry_loader_create(&l, ds, &o));
    fake_fail_alloc(1);
    CHECK_RC(ferry_loader_next(l, &b), FERRY_EIO);
    check_has(ferry_loader_errmsg(l), "device \"cuda\": a device buffer of ");
    check_has(ferry_loader_errmsg(l), "(1 of at most 4): cuda:0: cuMemAlloc: "
                                      "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_RC(ferry_loader_next(l, &b), FERRY_END);
    CHECK_OK(ferry_loader_start(l, 1, 0));
    int n = 0;
    while (ferry_loader_next(l, &b) == 0) {
        CHECK_EQ(ferry_batch_device(b), 0);
        ferry_batch_release(b);
        n++;
    }
    CHECK_EQ(n, 8);
    ferry_loader_free(l);
    CHECK_EQ(sim().allocs_live, 0);
    CHECK_EQ(sim().events_live, 0);
    CHECK_EQ(sim().sim_errors, 0);
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().ctx_refs, 0);
    ferry_dataset_free(ds);
}

/* A context the driver will not make current: page-locking says so (not a
 * registration failure), and memory it cannot unregister is not unmapped, so no
 * later mapping meets a stale registration. */
TEST(a_context_push_refused_is_named_and_leaves_no_stale_registration)
{
    use_fake(1, 0, 0);
    ferry_device *d;
    CHECK_OK(ferry_device_open(&d, "cuda"));
    void *p, *q;
    fake_fail_push(1);
    CHECK_RC(ferry_device_host_alloc(d, 4096, &p), FERRY_EIO);
    check_has(ferry_last_errmsg(), "cannot page-lock 4096 bytes: cuCtxPushCurrent: "
                                   "CUDA_ERROR_INVALID_CONTEXT");
    CHECK_EQ(fake().registers, 0);
    CHECK_OK(ferry_device_host_alloc(d, 4096, &p));
    fake_fail_push(1);
    ferry_device_host_free(d, p, 4096); /* cannot unregister: kept mapped */
    CHECK_EQ(fake().live, 1);
    CHECK(fake_is_registered(p, 4096));
    CHECK_OK(ferry_device_host_alloc(d, 4096, &q)); /* elsewhere: no stale range there */
    CHECK(q != p);
    ferry_device_host_free(d, q, 4096);
    ferry_device_host_free(d, p, 4096); /* the context is back: now it goes */
    CHECK_EQ(fake().live, 0);
    CHECK_EQ(fake().errors, 0);
    ferry_device_free(d);
}
