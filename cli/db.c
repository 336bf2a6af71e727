/*
 * ls, stat and verify on key/value stores given as sources (minidb:FILE,
 * leveldb:DIR, rocksdb:DIR, lmdb:PATH): ls, stat and verify hand such an
 * argument here. Entries through ferry_db, fields and decoded values through the
 * dataset the same text opens.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char *const kinds[] = {"minidb", "leveldb", "rocksdb", "lmdb"};

bool cli_is_db_source(const char *arg)
{
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        size_t n = strlen(kinds[i]);
        if (!strncmp(arg, kinds[i], n) && arg[n] == ':')
            return true;
    }
    return false;
}

/* "KIND:PATH[,opts]" split into the backend and the path (without the options). */
static void split(const char *spec, char *backend, size_t bcap, char *path, size_t pcap)
{
    const char *colon = strchr(spec, ':');
    snprintf(backend, bcap, "%.*s", (int)(colon - spec), spec);
    const char *comma = strchr(colon + 1, ',');
    size_t n = comma ? (size_t)(comma - colon - 1) : strlen(colon + 1);
    snprintf(path, pcap, "%.*s", (int)n, colon + 1);
}

typedef struct args {
    const char *spec;
    bool json;
} args;

static int parse(int argc, char **argv, const char *usage, args *a)
{
    a->spec = NULL;
    a->json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--json"))
            a->json = true;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_error(EXIT_USAGE, "%s: unknown option \"%s\" (see --help)", argv[0],
                             argv[i]);
        else if (a->spec)
            return cli_error(EXIT_USAGE, "%s: one store expected", argv[0]);
        else
            a->spec = argv[i];
    }
    return 0;
}

static void print_fields(const ferry_dataset *ds, bool json)
{
    int nf = ferry_dataset_nfields(ds);
    if (json)
        putchar('[');
    for (int i = 0; i < nf; i++) {
        const ferry_field *fi = ferry_dataset_field(ds, i);
        if (json) {
            printf("%s{\"name\": ", i ? ", " : "");
            cli_json_string(stdout, fi->name);
            printf(", \"dtype\": \"%s\", \"shape\": [", ferry_dtype_name(fi->dtype));
        } else {
            printf("  field %-12s %s [", fi->name, ferry_dtype_name(fi->dtype));
        }
        for (int d = 0; d < fi->ndim; d++)
            printf("%s%s%lld", d ? ", " : "", !json && d == 0 && fi->variable ? "<=" : "",
                   (long long)fi->shape[d]);
        if (json)
            printf("], \"variable\": %s}", fi->variable ? "true" : "false");
        else
            printf("]\n");
    }
    if (json)
        putchar(']');
}

/* The key as text when it is printable, else in hex. */
static void print_key(const void *k, size_t n, bool json)
{
    char buf[1100];
    const unsigned char *p = k;
    bool text = n < 512;
    for (size_t i = 0; text && i < n; i++)
        text = p[i] >= 0x20 && p[i] < 0x7f;
    size_t o = 0;
    if (text) {
        memcpy(buf, p, n);
        o = n;
    } else {
        o = (size_t)snprintf(buf, sizeof buf, "0x");
        for (size_t i = 0; i < n && o + 3 < sizeof buf; i++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%02x", p[i]);
    }
    buf[o] = 0;
    if (json)
        cli_json_string(stdout, buf);
    else
        fputs(buf, stdout);
}

int cmd_db_ls(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv,
                   "usage: ferry ls KIND:PATH [--json]   (minidb:, leveldb:, rocksdb:, lmdb:)\n\n"
                   "Lists a store's entries in its order: key and value bytes, then the\n"
                   "fields its values decode to. --json prints one object:\n"
                   "{\"entries\": [{\"key\", \"bytes\"}], \"fields\": [...]}.\n",
                   &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    char backend[16], path[1024];
    split(a.spec, backend, sizeof backend, path, sizeof path);
    ferry_db *db;
    ferry_dataset *ds = NULL;
    if (ferry_db_open(&db, backend, path, FERRY_DB_READ) < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    ferry_db_cursor *c;
    const void *k, *v;
    size_t kl, vl;
    int status = 0;
    if (ferry_db_cursor_open(db, 0, 1, &c) < 0) {
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    if (a.json)
        printf("{\"entries\": [");
    for (uint64_t i = 0; (rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) == 0; i++) {
        if (a.json) {
            printf("%s{\"key\": ", i ? ", " : "");
            print_key(k, kl, true);
            printf(", \"bytes\": %zu}", vl);
        } else {
            print_key(k, kl, false);
            printf("  %zu bytes\n", vl);
        }
    }
    ferry_db_cursor_close(c);
    /* LevelDB takes a lock a process: the db is closed before the dataset opens */
    ferry_db_close(db);
    db = NULL;
    if (rc < 0 || ferry_dataset_open(&ds, a.spec) < 0) {
        fflush(stdout);
        status = cli_error(1, "%s", ferry_last_errmsg());
        goto done;
    }
    if (a.json) {
        printf("], \"fields\": ");
        print_fields(ds, true);
        printf("}\n");
    } else {
        print_fields(ds, false);
    }
done:
    ferry_dataset_free(ds);
    ferry_db_close(db);
    return status;
}

/* Reads every entry in order (the library checks what it reads) and, with ds,
 * decodes every value as a sample; counts entries, key and value bytes and
 * problems, printing each problem unless quiet. */
typedef struct totals {
    uint64_t entries, key_bytes, value_bytes, problems;
} totals;

/* Counts the last error as a problem, printing it unless quiet (JSON: an element
 * of the problems array). */
static void problem(totals *t, bool print, bool json)
{
    t->problems++;
    if (print && json) {
        printf("%s", t->problems > 1 ? ", " : "");
        cli_json_string(stdout, ferry_last_errmsg());
    } else if (print) {
        printf("%s\n", ferry_last_errmsg());
    }
}

static void walk(ferry_db *db, const char *spec, ferry_dataset **dsp, bool print, bool json,
                 totals *t)
{
    ferry_db_cursor *c;
    const void *k, *v;
    size_t kl, vl;
    int rc;
    memset(t, 0, sizeof *t);
    *dsp = NULL;
    if (ferry_db_cursor_open(db, 0, 1, &c) < 0) {
        t->problems++;
        ferry_db_close(db);
        return;
    }
    while ((rc = ferry_db_cursor_next(c, &k, &kl, &v, &vl)) == 0) {
        t->entries++;
        t->key_bytes += kl;
        t->value_bytes += vl;
    }
    ferry_db_cursor_close(c);
    if (rc < 0) {
        problem(t, print, json);
    }
    /* LevelDB takes a lock a process: the db is closed before the dataset opens */
    ferry_db_close(db);
    if (ferry_dataset_open(dsp, spec) < 0) {
        *dsp = NULL;
        problem(t, print, json);
        return;
    }
    ferry_dataset *ds = *dsp;
    if (!print)
        return;
    int nf = ferry_dataset_nfields(ds);
    void *data[FERRY_MAX_FIELDS] = {0};
    int64_t len[FERRY_MAX_FIELDS];
    for (int f = 0; f < nf; f++) {
        const ferry_field *fi = ferry_dataset_field(ds, f);
        size_t bytes = ferry_dtype_size(fi->dtype);
        for (int d = 0; d < fi->ndim; d++)
            bytes *= (size_t)fi->shape[d];
        data[f] = malloc(bytes ? bytes : 1);
    }
    ferry_sample s = {nf, data, len, {0}};
    ferry_ctx *ctx = NULL;
    if (ferry_ctx_create(&ctx, 0, 0) == 0)
        for (uint64_t i = 0; i < ferry_dataset_len(ds); i++) {
            if (ferry_dataset_get(ds, i, &s, ctx) == 0)
                continue;
            problem(t, print, json);
        }
    ferry_ctx_free(ctx);
    for (int f = 0; f < nf; f++)
        free(data[f]);
}

static int open_db(const char *spec, ferry_db **db)
{
    char backend[16], path[1024];
    split(spec, backend, sizeof backend, path, sizeof path);
    return ferry_db_open(db, backend, path, FERRY_DB_READ);
}

int cmd_db_stat(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv,
                   "usage: ferry stat KIND:PATH [--json]   (minidb:, leveldb:, rocksdb:, lmdb:)\n\n"
                   "Summarises a store: entries, key and value bytes, bytes an entry, fields.\n"
                   "--json prints one object: {\"path\", \"backend\", \"entries\", "
                   "\"key_bytes\", \"value_bytes\", \"bytes_per_entry\", \"fields\"}.\n",
                   &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    ferry_db *db;
    ferry_dataset *ds = NULL;
    if (open_db(a.spec, &db) < 0)
        return cli_error(1, "%s", ferry_last_errmsg());
    totals t;
    walk(db, a.spec, &ds, false, false, &t);
    char backend[16], path[1024];
    split(a.spec, backend, sizeof backend, path, sizeof path);
    double per = t.entries ? (double)(t.key_bytes + t.value_bytes) / (double)t.entries : 0;
    int status = 0;
    if (t.problems) {
        status = cli_error(1, "%s", ferry_last_errmsg());
    } else if (a.json) {
        printf("{\"path\": ");
        cli_json_string(stdout, path);
        printf(", \"backend\": \"%s\", \"entries\": %llu, \"key_bytes\": %llu, "
               "\"value_bytes\": %llu, \"bytes_per_entry\": %.1f, \"fields\": ",
               backend, (unsigned long long)t.entries, (unsigned long long)t.key_bytes,
               (unsigned long long)t.value_bytes, per);
        print_fields(ds, true);
        printf("}\n");
    } else {
        printf("%s (%s): %llu entries, %llu key bytes, %llu value bytes, %.1f bytes an entry\n",
               path, backend, (unsigned long long)t.entries, (unsigned long long)t.key_bytes,
               (unsigned long long)t.value_bytes, per);
        print_fields(ds, false);
    }
    ferry_dataset_free(ds);
    return status;
}

int cmd_db_verify(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv,
                   "usage: ferry verify KIND:PATH [--json]   (minidb:, leveldb:, rocksdb:, "
                   "lmdb:)\n\n"
                   "Reads every entry of a store in order (LevelDB and RocksDB check every\n"
                   "block's checksum) and decodes every value into its fields (Datum,\n"
                   "TensorProtos), printing each problem with the entry and its key; exits 1\n"
                   "if there is any. --json prints one object: {\"path\", \"problems\", "
                   "\"entries\", \"ok\"}.\n",
                   &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    ferry_db *db;
    ferry_dataset *ds = NULL;
    if (open_db(a.spec, &db) < 0) {
        if (a.json) {
            printf("{\"path\": ");
            cli_json_string(stdout, a.spec);
            printf(", \"problems\": [");
            cli_json_string(stdout, ferry_last_errmsg());
            printf("], \"entries\": 0, \"ok\": false}\n");
        } else {
            printf("%s\n", ferry_last_errmsg());
        }
        return 1;
    }
    if (a.json) {
        printf("{\"path\": ");
        cli_json_string(stdout, a.spec);
        printf(", \"problems\": [");
    }
    totals t;
    walk(db, a.spec, &ds, true, a.json, &t);
    if (a.json)
        printf("], \"entries\": %llu, \"ok\": %s}\n", (unsigned long long)t.entries,
               t.problems ? "false" : "true");
    else
        printf("%s: %llu entries, %s\n", a.spec, (unsigned long long)t.entries,
               t.problems ? "damaged" : "ok");
    ferry_dataset_free(ds);
    return t.problems ? 1 : 0;
}
