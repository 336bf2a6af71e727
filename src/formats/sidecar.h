/*
 * Sidecar offset indexes: a file beside a source (FILE.fidx by default) that holds
 * where each of the source's units starts (a text file's lines: line_index.c; a
 * minidb's entries: minidb_index.c), with what tells a current index from a stale
 * one: the source's size, modification time and hashes of its first and last
 * 4 KiB. One layout for every kind, told apart by the magic (docs/line-index.md):
 *   0  magic (8 bytes)          32 source mtime (ns, int64)
 *   8  version (u32)            40 hash of the source's first 4 KiB
 *  12  flags (u32)              48 hash of the source's last 4 KiB
 *  16  count N (u64)            56 hash of bytes 0..55 and the extra words
 *  24  source size (u64)        64 the kind's extra words (u64 each; lines: none)
 * then offsets: u64[N + 1], offsets[N] the source's size.
 */
#ifndef FERRY_SIDECAR_H
#define FERRY_SIDECAR_H

#include "../io/io.h"

#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the sidecar index format is little-endian; this host is not"
#endif

#define FERRY__SIDECAR_HEADER 64u
#define FERRY__SIDECAR_EXTRA_MAX 4u

typedef struct ferry__sidecar_header {
    char magic[8];
    uint32_t version, flags;
    uint64_t count, size;
    int64_t mtime_ns;
    uint64_t head_hash, tail_hash, check;
} ferry__sidecar_header;

/* What an index holds and how its messages name it. */
typedef struct ferry__sidecar_kind {
    const char *magic; /* 8 characters: "FERRYLIX" */
    uint32_t version;
    const char *what;  /* "line index" */
    const char *units; /* "lines" */
    unsigned nextra;   /* extra words after the header (at most FERRY__SIDECAR_EXTRA_MAX) */
    const char *build; /* the command that writes one, before the source's path: "ferry index " */
} ferry__sidecar_kind;

/* path + ".fidx", malloc'd (ferry__free), or NULL without memory. */
char *ferry__sidecar_path(const char *path);

/* A header for the source f has open (path: its name in messages): magic, version,
 * size, time and hashes of its ends. The caller sets count and flags, then seals. */
int ferry__sidecar_header_init(ferry__sidecar_header *h, const ferry__sidecar_kind *k,
                               const ferry__file *f, const char *path);
/* Sets h->check over the header and the kind's extra words. */
void ferry__sidecar_seal(ferry__sidecar_header *h, const ferry__sidecar_kind *k,
                         const uint64_t *extra);
/* FERRY_ESTALE when path's size or time is no longer f's: it changed while it was
 * indexed, and the index would be of neither version. */
int ferry__sidecar_unchanged(const ferry__file *f, const char *path);

/* An index checked against its source. */
typedef struct ferry__sidecar {
    ferry__map map;
    ferry__sidecar_header h;
    uint64_t extra[FERRY__SIDECAR_EXTRA_MAX];
    const uint64_t *off; /* count + 1, in the mapping: each use checks its own pair */
} ferry__sidecar;

/* Maps index_path and checks it against path, in order (each failure names the
 * index): at least a header, the kind's magic (another kind's is named), the
 * version, the header's check; exactly the size that N offsets take
 * (FERRY_ECORRUPT); path's size and time, then the hashes of its ends, as
 * recorded (FERRY_ESTALE, saying how to rebuild it); offsets[0] 0 and offsets[N]
 * the source's size (FERRY_ECORRUPT). FERRY_ENOENT when index_path is missing.
 * The mapping is read under a guard (an index cut short meanwhile is an error).
 * ferry__sidecar_close also after a failure. */
int ferry__sidecar_open(ferry__sidecar *s, const ferry__sidecar_kind *k, const char *path,
                        const char *index_path);
void ferry__sidecar_close(ferry__sidecar *s);

#endif
