/*
 * The engine of the file-sharded streams (TFRecord, WebDataset, CSV): the list of
 * files, each epoch's order of them, stream shard k of n (the files at places k,
 * k + n, ... of that order), and the stream's open, next, save, restore and
 * fetch, with one set of checks on a saved state. A format supplies only its
 * framing and decoding (ferry__shard_format): a reader opened on a file, its
 * next sample, its place in a saved state, and the sample at a position.
 *
 * A sample's pos: a = its file (index in the file list, in name order); b and c
 * are the format's (an offset in the file's decoded bytes and a count there).
 * Threads: an iterator (with its two readers) is one thread's at a time; the
 * format's self is shared by all of a stream's iterators and only read.
 */
#ifndef FERRY_SHARD_STREAM_H
#define FERRY_SHARD_STREAM_H

#include "dataset_internal.h"
#include "ferry/sampler.h"

/* Paths owned by the list, freed by ferry__shard_files_free; at most 10^7. */
typedef struct ferry__shard_files {
    char **paths;
    size_t n;
} ferry__shard_files;

/* The files at location: a file, a directory (its files that `want` accepts, in
 * name order) or a glob pattern (its matches in name order). kind names the
 * source in messages; what = "TFRecord files" and the like. */
int ferry__shard_files_list(ferry__shard_files *out, const char *kind, const char *location,
                            bool (*want)(const char *name), const char *what);
/* Part files dir/PREFIX + number + SUFFIX, the number exactly what "%0*llu" writes
 * (`digits` wide, wider only without a leading zero), numbered from 0 without
 * gaps: out->paths[i] is part i; or dir itself when it is a file (the only part).
 * `kind` begins the messages ("csv"). */
int ferry__shard_files_parts(ferry__shard_files *out, const char *kind, const char *dir,
                             const char *prefix, unsigned digits, const char *suffix);
void ferry__shard_files_free(ferry__shard_files *s);
/* Whether any file at location (as ferry__shard_files_list lists them) is
 * compressed, opened with compression (FERRY__COMP_*): such a file cannot be
 * indexed, so the source is a stream. False when they cannot be listed or
 * opened: opening the source then says why. */
bool ferry__shard_files_compressed(const char *kind, const char *location,
                                   bool (*want)(const char *name), const char *what,
                                   int compression);

/* What a format's next returns for a sample it passed over (WebDataset's
 * missing=skip): the engine reads the next one. */
#define FERRY__SHARD_SKIP 2

/* A format: its reader (reader_size bytes, zeroed before the first open; one for
 * next() and one of its own for fetch, opened on the file it last fetched from)
 * and what it does on it. self is the format's own, given to the engine at
 * creation; path is the file's, for messages. */
typedef struct ferry__shard_format {
    const char *who;      /* names the stream in messages: "tfrecord stream" */
    const char *unit;     /* names a file in messages: "file", "tar", "part" */
    const char *stranger; /* the message for a state whose tag is another's */
    uint64_t tag;         /* a state's first word */
    /* The files in name order in every epoch (CSV: part k of the numbering goes
     * to shard k mod n), with CSV's layout of the state; else a per-epoch
     * permutation of them (ferry_permutation, from the stream's seed). */
    bool name_order;
    /* name_order: a setting a state is saved with and restored only under (CSV's
     * header, the lines passed over at the top of every part) */
    const char *setting_name;
    uint64_t (*setting)(const void *self);
    size_t reader_size;
    unsigned words; /* the reader's words in a state (at most 4) */
    /* Makes rd's buffers (NULL: none), for the reader of next() when the
     * iterator opens; open makes them for fetch's. */
    int (*init)(const void *self, void *rd);
    /* Opens rd on path (fetch: for fetch's reader, which reads small windows);
     * an error leaves nothing open. */
    int (*open)(const void *self, void *rd, const char *path, bool fetch);
    /* Closes rd's file; free (NULL when there is none) frees the rest when the
     * iterator goes. */
    void (*close)(void *rd);
    void (*free)(void *rd);
    /* The next sample into out with its pos.b and pos.c: 0, FERRY_END (the file
     * has no more), FERRY__SHARD_SKIP or an error; *broken when the file cannot
     * be read on (the engine goes on with the next file, the error saying that
     * the rest of the file is not read). */
    int (*next)(const void *self, void *rd, const char *path, ferry_sample *out, bool *broken);
    /* The open file's size, saved as a check (NULL with name_order). */
    uint64_t (*size)(const void *rd);
    /* Writes the format's words of rd's place (rd NULL: none open; zeros), and
     * any bytes after them. */
    void (*save)(const void *rd, ferry_state *w);
    /* rd, just opened on path, to the place of the saved words w (any bytes
     * after them read from r): 0, or FERRY_ECORRUPT naming path. */
    int (*resume)(const void *self, void *rd, const char *path, const uint64_t *w, ferry_state *r);
    /* The sample at pos (pos->a is path's) into out, read by rd (open on path,
     * where the last fetch left it): 0, FERRY_ERANGE for a pos that names no
     * sample, or another error; *broken: open rd again for the next fetch. */
    int (*fetch)(const void *self, void *rd, const char *path, const ferry_pos *pos,
                 ferry_sample *out, bool *broken);
    void (*destroy)(void *self);
} ferry__shard_format;

/* A stream of fmt over files (owned by self; valid until fmt->destroy(self)),
 * the permutation of each epoch from seed. Owns self from here, also when it
 * fails. */
int ferry__shard_stream_create(ferry_stream **out, const ferry__shard_format *fmt, void *self,
                               const ferry__shard_files *files, uint64_t seed,
                               const ferry_field *fields, int nfields);

#endif
