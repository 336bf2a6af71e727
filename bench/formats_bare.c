/*
 * The formats benchmark's data writer and bare loops (formats_vs.py compiles this with cc -O2):
 *
 *   formats_bare write OUT COUNT BYTES [--gzip LEVEL] [--seed S]
 *       writes a TFRecord file of COUNT records of BYTES bytes each (masked
 *       CRC-32Cs as TensorFlow writes them); raw records are random bytes, and
 *       with --gzip the records are text-like (words from a small vocabulary, so
 *       that they compress about 3:1) and the file is one gzip stream (zlib).
 *   formats_bare inflate --threads T FILE...
 *       the bare decompression rate of zlib: each thread inflates its share of
 *       the files (file i goes to thread i % T) into a 1 MiB buffer, front to
 *       back, and drops the output. Prints {"bytes_out", "seconds"} as JSON.
 *   formats_bare libdeflate --threads T FILE...
 *       the same with libdeflate (built with -DHAVE_LIBDEFLATE): a whole-buffer
 *       decompressor, so each file is read whole and inflated whole into memory
 *       the size of its output (what a streaming reader cannot afford).
 *   formats_bare igzip --threads T FILE...
 *       the same with ISA-L's igzip (built with -DHAVE_ISAL): a streaming
 *       inflater, used as the zlib loop uses zlib (1 MiB output buffer, the
 *       gzip header and trailer CRC-32 checked).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#ifdef HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

static uint32_t table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmd_write(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *out = argv[0];
    long count = atol(argv[1]), bytes = atol(argv[2]);
    int level = -1;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--gzip") && i + 1 < argc)
            level = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng ^= strtoull(argv[++i], NULL, 10) * 0x9e3779b97f4a7c15ull;
    }
    static const char *words[] = {"the",  "of",   "and", "to",    "in",   "a",    "is",
                                  "that", "for",  "it",  "as",    "was",  "with", "be",
                                  "by",   "on",   "not", "he",    "this", "are",  "or",
                                  "his",  "from", "at",  "which", "but"};
    crc_init();
    uint8_t *rec = malloc((size_t)bytes + 16);
    FILE *f = level < 0 ? fopen(out, "wb") : NULL;
    gzFile g = NULL;
    if (level >= 0) {
        char mode[8];
        snprintf(mode, sizeof mode, "wb%d", level);
        g = gzopen(out, mode);
    }
    if (!rec || (!f && !g))
        return 1;
    for (long r = 0; r < count; r++) {
        uint64_t n = (uint64_t)bytes;
        memcpy(rec, &n, 8);
        uint32_t c = mask(crc32c(rec, 8));
        memcpy(rec + 8, &c, 4);
        uint8_t *d = rec + 12;
        if (level < 0) {
            for (long i = 0; i < bytes; i += 8) {
                uint64_t v = next();
                memcpy(d + i, &v, bytes - i < 8 ? (size_t)(bytes - i) : 8);
            }
        } else {
            long i = 0;
            while (i < bytes) {
                const char *w = words[next() % 26];
                size_t wl = strlen(w);
                for (size_t k = 0; k < wl && i < bytes; k++)
                    d[i++] = (uint8_t)w[k];
                if (i < bytes)
                    d[i++] = (next() % 11) ? ' ' : (uint8_t)('0' + next() % 10);
            }
        }
        c = mask(crc32c(d, (size_t)bytes));
        memcpy(d + bytes, &c, 4);
        if (f ? fwrite(rec, 1, (size_t)bytes + 16, f) != (size_t)bytes + 16
              : gzwrite(g, rec, (unsigned)bytes + 16) != (int)bytes + 16)
            return 1;
    }
    free(rec);
    return f ? (fclose(f) != 0) : (gzclose(g) != Z_OK);
}

typedef struct job {
    char **files;
    int nfiles, threads, index, libdeflate;
    uint64_t out;
    int failed;
} job;

static void *inflate_files(void *arg)
{
    job *j = arg;
    uint8_t *in = malloc(256 << 10), *out = malloc(1 << 20);
    for (int i = j->index; i < j->nfiles; i += j->threads) {
        FILE *f = fopen(j->files[i], "rb");
        z_stream z;
        memset(&z, 0, sizeof z);
        if (!f || inflateInit2(&z, 15 + 16) != Z_OK) {
            j->failed = 1;
            break;
        }
        int zr = Z_OK;
        for (;;) {
            if (z.avail_in == 0) {
                size_t got = fread(in, 1, 256 << 10, f);
                if (got == 0)
                    break;
                z.next_in = in;
                z.avail_in = (uInt)got;
            }
            z.next_out = out;
            z.avail_out = 1 << 20;
            zr = inflate(&z, Z_NO_FLUSH);
            j->out += (1 << 20) - z.avail_out;
            if (zr == Z_STREAM_END) {
                if (z.avail_in == 0 && feof(f))
                    break;
                inflateReset(&z);
            } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
                j->failed = 1;
                break;
            }
        }
        inflateEnd(&z);
        fclose(f);
    }
    free(in);
    free(out);
    return NULL;
}

#ifdef HAVE_LIBDEFLATE
static void *deflate_files(void *arg)
{
    job *j = arg;
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    for (int i = j->index; i < j->nfiles; i += j->threads) {
        FILE *f = fopen(j->files[i], "rb");
        if (!f) {
            j->failed = 1;
            break;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *in = malloc((size_t)n);
        if (!in || fread(in, 1, (size_t)n, f) != (size_t)n || n < 18) {
            j->failed = 1;
            fclose(f);
            free(in);
            break;
        }
        fclose(f);
        uint32_t isize;
        memcpy(&isize, in + n - 4, 4); /* one member, under 4 GiB */
        uint8_t *out = malloc(isize ? isize : 1);
        size_t got = 0;
        if (!out ||
            libdeflate_gzip_decompress(d, in, (size_t)n, out, isize, &got) != LIBDEFLATE_SUCCESS)
            j->failed = 1;
        j->out += got;
        free(in);
        free(out);
    }
    libdeflate_free_decompressor(d);
    return NULL;
}
#endif

#ifdef HAVE_ISAL
static void *igzip_files(void *arg)
{
    job *j = arg;
    uint8_t *in = malloc(256 << 10), *out = malloc(1 << 20);
    struct inflate_state *st = malloc(sizeof *st);
    for (int i = j->index; i < j->nfiles && st; i += j->threads) {
        FILE *f = fopen(j->files[i], "rb");
        if (!f) {
            j->failed = 1;
            break;
        }
        isal_inflate_init(st);
        st->crc_flag = ISAL_GZIP;
        for (;;) {
            if (st->avail_in == 0) {
                size_t got = fread(in, 1, 256 << 10, f);
                if (got == 0)
                    break;
                st->next_in = in;
                st->avail_in = (uint32_t)got;
            }
            st->next_out = out;
            st->avail_out = 1 << 20;
            int r = isal_inflate(st);
            j->out += (1 << 20) - st->avail_out;
            if (r != ISAL_DECOMP_OK) {
                j->failed = 1;
                break;
            }
            if (st->block_state == ISAL_BLOCK_FINISH) {
                if (st->avail_in == 0 && feof(f))
                    break;
                uint8_t *rest = st->next_in;
                uint32_t left = st->avail_in;
                isal_inflate_reset(st); /* another member */
                st->crc_flag = ISAL_GZIP;
                st->next_in = rest;
                st->avail_in = left;
            }
        }
        fclose(f);
    }
    free(st);
    free(in);
    free(out);
    return NULL;
}
#endif

static int cmd_inflate(int argc, char **argv, int libdeflate)
{
    int threads = 1, first = 0;
    if (argc >= 2 && !strcmp(argv[0], "--threads")) {
        threads = atoi(argv[1]);
        first = 2;
    }
    if (threads < 1 || threads > 256 || argc - first < 1)
        return 2;
#ifndef HAVE_LIBDEFLATE
    if (libdeflate == 1) {
        fprintf(stderr, "formats_bare: built without libdeflate\n");
        return 3;
    }
#endif
#ifndef HAVE_ISAL
    if (libdeflate == 2) {
        fprintf(stderr, "formats_bare: built without ISA-L\n");
        return 3;
    }
#endif
    job jobs[256];
    pthread_t t[256];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){argv + first, argc - first, threads, i, libdeflate, 0, 0};
        void *(*fn)(void *) = inflate_files;
#ifdef HAVE_LIBDEFLATE
        if (libdeflate == 1)
            fn = deflate_files;
#endif
#ifdef HAVE_ISAL
        if (libdeflate == 2)
            fn = igzip_files;
#endif
        pthread_create(&t[i], NULL, fn, &jobs[i]);
    }
    uint64_t out = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        out += jobs[i].out;
        failed |= jobs[i].failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (failed) {
        fprintf(stderr, "formats_bare: a file could not be inflated\n");
        return 1;
    }
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("{\"bytes_out\": %llu, \"seconds\": %.6f, \"threads\": %d}\n", (unsigned long long)out,
           s, threads);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "write"))
        return cmd_write(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "inflate"))
        return cmd_inflate(argc - 2, argv + 2, 0);
    if (argc >= 2 && !strcmp(argv[1], "libdeflate"))
        return cmd_inflate(argc - 2, argv + 2, 1);
    if (argc >= 2 && !strcmp(argv[1], "igzip"))
        return cmd_inflate(argc - 2, argv + 2, 2);
    fprintf(stderr, "usage: formats_bare write|inflate|libdeflate|igzip ...\n");
    return 2;
}
