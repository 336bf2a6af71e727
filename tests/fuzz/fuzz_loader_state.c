/*
 * Fuzz target: a map-style loader's state, which a resume reads as untrusted
 * input, on a loader of another world size than the one that saved it. The
 * first byte picks the loader's world size (1 + byte % 6, batch_size 12 / it:
 * the global batch of 12 that the corpus's states were saved with); the rest is
 * the blob without its CRC, which the target appends, so that the checksum does
 * not hide the reader from the fuzzer. A state accepted must give at most the
 * epoch's batches, each at most batch_size samples, all inside the dataset.
 */
#include <ferry/ferry.h>

#include <stdlib.h>
#include <string.h>

#define N 100

static ferry_dataset *ds;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!ds) {
        ferry_stream *none = NULL;
        if (ferry_source_open("synthetic:100,bytes=8", &ds, &none) != 0)
            abort();
    }
    int64_t world = 1 + data[0] % 6;
    size_t n = size - 1;
    uint8_t *buf = malloc(n + 4);
    if (!buf)
        abort();
    if (n)
        memcpy(buf, data + 1, n);
    uint32_t crc = ferry_crc32c(0, buf, n);
    for (int i = 0; i < 4; i++)
        buf[n + i] = (uint8_t)(crc >> (8 * i));
    ferry_loader_opts o;
    ferry_loader_opts_default(&o);
    o.batch_size = (uint32_t)(12 / world);
    o.shuffle = 1;
    o.seed = 5;
    o.rank = world - 1;
    o.world_size = world;
    ferry_loader *l;
    if (ferry_loader_create(&l, ds, &o))
        abort();
    uint64_t epoch, first;
    int checked = ferry_loader_state_check(l, buf, n + 4, &epoch, &first);
    int resumed = ferry_loader_state_resume(l, buf, n + 4);
    if ((resumed == 0) != (checked == 0))
        abort();
    if (resumed == 0) {
        uint64_t batches = 0, most = (N + 11) / 12;
        ferry_batch *b;
        while (ferry_loader_next(l, &b) == 0) {
            const uint64_t *idx = ferry_batch_indices(b);
            if (ferry_batch_size(b) > o.batch_size || ++batches > most ||
                ferry_batch_number(b) < first)
                abort();
            for (uint32_t i = 0; i < ferry_batch_size(b); i++)
                if (idx[i] >= N)
                    abort();
            ferry_batch_release(b);
        }
    }
    ferry_loader_free(l);
    free(buf);
    return 0;
}
