/*
 * The file layer: every file operation of the library goes through here. Reads
 * are at an offset (pread), never seek+read, so one descriptor serves many
 * threads. Writers that must never leave a half-written file use
 * ferry__atomic_file: a temporary beside the target, synced and renamed over it.
 */
#ifndef FERRY_IO_H
#define FERRY_IO_H

#include "../core/internal.h"

typedef struct ferry__file {
    int fd;
    uint64_t size;
    int64_t mtime_ns;
} ferry__file;

/* Opens for reading and stats. FERRY_ENOENT or FERRY_EIO with "path: reason". */
int ferry__file_open(ferry__file *f, const char *path);
void ferry__file_close(ferry__file *f);
/* Reads up to n bytes at off, retrying short reads and EINTR; *got < n only at the
 * end of the file. FERRY_EIO naming `name` on failure. */
int ferry__file_pread(const ferry__file *f, const char *name, void *buf, size_t n, uint64_t off,
                      size_t *got);
/* Size and modification time of a path. */
int ferry__stat(const char *path, uint64_t *size, int64_t *mtime_ns);

/* Maps a whole file read-only (NULL map for an empty file). */
typedef struct ferry__map {
    void *data;
    size_t size;
} ferry__map;
int ferry__map_file(ferry__map *m, const char *path);
void ferry__unmap(ferry__map *m);

#define FERRY__ATOMIC_BUF ((size_t)256 << 10)

typedef struct ferry__atomic_file {
    int fd;
    char *path;   /* the target */
    char *tmp;    /* the temporary beside it */
    uint64_t off; /* where ferry__atomic_write appends */
    uint8_t *buf; /* FERRY__ATOMIC_BUF bytes: appends not yet written */
    size_t held;  /* how many: they belong at off - held */
} ferry__atomic_file;

/* Creates a temporary in the target's directory. */
int ferry__atomic_open(ferry__atomic_file *w, const char *path);
/* Appends after what ferry__atomic_write wrote before (pwrite does not move it).
 * Appends are buffered; a failure (here, in pwrite or in commit) leaves the file
 * good only for ferry__atomic_abort. */
int ferry__atomic_write(ferry__atomic_file *w, const void *p, size_t n);
int ferry__atomic_pwrite(ferry__atomic_file *w, const void *p, size_t n, uint64_t off);
/* A positioned write that leaves the append buffer alone: several threads may
 * call it at once on disjoint ranges, provided nothing is appended meanwhile. */
int ferry__atomic_pwrite_mt(const ferry__atomic_file *w, const void *p, size_t n, uint64_t off);
/* Sets the temporary's size to `size`, so that positioned writes may land in any
 * order (a full disk shows in the writes, as with appends). */
int ferry__atomic_reserve(ferry__atomic_file *w, uint64_t size);
/* Writes out what is buffered and closes the descriptor, keeping the temporary: for
 * a writer of many files that should not hold a descriptor (and a buffer) each.
 * Nothing more can be appended; before ferry__atomic_commit, w->fd must be a
 * descriptor of w->tmp again. */
int ferry__atomic_close(ferry__atomic_file *w);
/* fsync, rename over the target, fsync the directory, and free. On failure the
 * temporary is removed and the target left as it was. */
int ferry__atomic_commit(ferry__atomic_file *w);
/* Removes the temporary and frees. Safe after a failed commit and on a zeroed w. */
void ferry__atomic_abort(ferry__atomic_file *w);

#endif
