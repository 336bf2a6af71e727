/*
 * Fuzz target: the LMDB reader. The input is a whole environment's data file
 * (data.mdb). It is opened read-only without a lock file, as a Caffe Datum
 * database and as plain keys and values, the main database and a named one, and
 * every entry it admits is read into a sample. liblmdb trusts its file: the
 * structure check in front of it must turn every damaged page into an error.
 * Every error must name the file, no key or value may be longer than the input,
 * and a plain read must hand out exactly the entry's key and value.
 */
#include <ferry/ferry.h>
#include <ferry/lmdb.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "scratch.h"

#define MAX_READS 4096

static void read_all(ferry_dataset *ds, const uint8_t *data, size_t size, int plain)
{
    int nf = ferry_dataset_nfields(ds);
    void *bufs[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    ferry_sample s = {.data = bufs, .length = len, .nfields = nf};
    ferry_ctx *ctx = NULL;
    for (int f = 0; f < nf; f++) {
        size_t n = ferry_field_nbytes(ferry_dataset_field(ds, f));
        if (n > ((size_t)64 << 20) || !(bufs[f] = malloc(n ? n : 1)))
            goto out;
    }
    if (ferry_ctx_create(&ctx, 0, 0) < 0)
        goto out;
    uint64_t n = ferry_dataset_len(ds);
    for (uint64_t i = 0; i < n && i < MAX_READS; i++) {
        const void *k, *v;
        size_t kl, vl;
        if (ferry_lmdb_entry(ds, i, &k, &kl, &v, &vl) < 0 || kl > size || vl > size)
            abort();
        if (plain && ferry_dataset_get(ds, i, &s, ctx) == 0 &&
            (len[0] != (int64_t)kl || memcmp(bufs[0], k, kl) || len[1] != (int64_t)vl ||
             memcmp(bufs[1], v, vl)))
            abort();
        if (!plain)
            ferry_dataset_get(ds, i, &s, ctx);
    }
out:
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++)
        free(bufs[f]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_scratch("ferry-fuzz-lmdb", "data.mdb");
    FILE *f = fopen(fuzz_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    static const char *dbs[] = {NULL, "dbnew"};
    for (int k = 0; k < 2; k++) {
        for (int datum = FERRY_LMDB_DATUM_AUTO; datum <= FERRY_LMDB_DATUM_OFF; datum += 2) {
            ferry_lmdb_opts o;
            ferry_lmdb_opts_default(&o);
            o.path = fuzz_path;
            o.db = dbs[k];
            o.datum = datum;
            o.max_len = datum == FERRY_LMDB_DATUM_OFF ? ((uint64_t)1 << 20) : 0;
            ferry_dataset *ds = NULL;
            int rc = ferry_dataset_lmdb(&ds, &o);
            if (rc < 0) {
                if (!strstr(ferry_last_errmsg(), fuzz_path))
                    abort(); /* an error that does not name the file */
                continue;
            }
            read_all(ds, data, size, datum == FERRY_LMDB_DATUM_OFF);
            ferry_dataset_free(ds);
        }
    }
    return 0;
}
