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

/* Opens for reading and stats. FERRY_ENOENT or FERRY_EIO with "path: reason". Only a
 * regular file is taken: a FIFO, device or directory is refused at once (the open
 * never blocks). A remote location (s3://, http://, https://: remote.h) opens its
 * copy in the node cache, fetched first when missing; the descriptor holds the
 * copy against eviction until it is closed (and a mapping of it until unmapped). */
int ferry__file_open(ferry__file *f, const char *path);
void ferry__file_close(ferry__file *f);
/* Reads up to n bytes at off, retrying short reads and EINTR; *got < n only at the
 * end of the file. FERRY_EIO naming `name` on failure. */
int ferry__file_pread(const ferry__file *f, const char *name, void *buf, size_t n, uint64_t off,
                      size_t *got);
/* Size and modification time of a path (a remote one: of the object). */
int ferry__stat(const char *path, uint64_t *size, int64_t *mtime_ns);

/* The names of the entries of a folder (with "." and ".."), or of the objects
 * directly under a remote prefix (dir + "/"), malloc'd (ferry__free each, then the
 * array). FERRY_ENOENT when the folder cannot be opened or the prefix holds nothing. */
int ferry__list_dir(const char *dir, char ***names, size_t *n);

/* Maps a whole file read-only (NULL map for an empty file). */
typedef struct ferry__map {
    void *data;
    size_t size;
} ferry__map;
int ferry__map_file(ferry__map *m, const char *path);
/* Maps the file f has open, as far as its size when it was opened (path: for
 * messages). */
int ferry__map_open(ferry__map *m, const ferry__file *f, const char *path);
void ferry__unmap(ferry__map *m);

/* Reading a mapping ahead: the kernel is asked to read bytes [a, e) of the mapping
 * at base into the page cache (MADV_WILLNEED, which starts the reads and
 * returns), unless an earlier call asked for them (bits: a bit per
 * FERRY__AHEAD_UNIT bytes of the mapping, set atomically, so that threads share
 * it) or their first and last pages are cached already (mincore: two lookups,
 * where MADV_WILLNEED would look up every page). Cached pages are left to the
 * faults of the read (each maps 16 pages), or with map_cached mapped now in one
 * call (MADV_POPULATE_READ, Linux 5.14): for a reader of every page of the span
 * (a run of small minidb entries), where that measured 5-10% less CPU than the
 * faults. ferry__ahead_bits: a zeroed bitmap for a mapping of size bytes
 * (ferry__free), or NULL without memory. */
#define FERRY__AHEAD_UNIT ((uint64_t)64 << 10)
_Atomic uint64_t *ferry__ahead_bits(uint64_t size);
void ferry__read_ahead(_Atomic uint64_t *bits, const void *base, uintptr_t a, uintptr_t e,
                       bool map_cached);

#define FERRY__ATOMIC_BUF ((size_t)256 << 10)

typedef struct ferry__atomic_file {
    int fd;
    char *path;   /* the target */
    char *tmp;    /* the temporary beside it */
    uint64_t off; /* where ferry__atomic_write appends */
    uint8_t *buf; /* FERRY__ATOMIC_BUF bytes: appends not yet written */
    size_t held;  /* how many: they belong at off - held */
} ferry__atomic_file;

/* Creates a temporary in the target's directory (PATH.tmp.XXXXXX), locked
 * (flock) until it is committed or aborted. */
int ferry__atomic_open(ferry__atomic_file *w, const char *path);
/* Removes the temporaries of path that killed writers left: those that no live
 * writer holds locked (the kernel drops a dead process's locks). Writers of one
 * file at a time call it before ferry__atomic_open; a writer of many files (a
 * set) cleans its own way, once. */
void ferry__atomic_remove_stale(const char *path);
/* Appends after what ferry__atomic_write wrote before (pwrite does not move it).
 * Appends are buffered; a failure (here, in pwrite or in commit) leaves the file
 * good only for ferry__atomic_abort. */
int ferry__atomic_write(ferry__atomic_file *w, const void *p, size_t n);
int ferry__atomic_pwrite(ferry__atomic_file *w, const void *p, size_t n, uint64_t off);
/* A positioned write that leaves the append buffer alone: several threads may
 * call it at once on disjoint ranges, provided nothing is appended meanwhile. */
int ferry__atomic_pwrite_mt(const ferry__atomic_file *w, const void *p, size_t n, uint64_t off);
/* Starts writing bytes [off, off + n) of the temporary out to the disk and returns
 * (sync_file_range; a hint: nothing where the system lacks it): a writer of a large
 * file calls it as it goes, so that the fsync of the commit finds little left. */
void ferry__atomic_writeback(const ferry__atomic_file *w, uint64_t off, uint64_t n);
/* Sets the temporary's size to `size`, so that positioned writes may land in any
 * order (a full disk shows in the writes, as with appends). */
int ferry__atomic_reserve(ferry__atomic_file *w, uint64_t size);
/* Writes out what is buffered and closes the descriptor, keeping the temporary: for
 * a writer of many files that should not hold a descriptor (and a buffer) each.
 * Nothing more can be appended; before ferry__atomic_commit, w->fd must be a
 * descriptor of w->tmp again. */
int ferry__atomic_close(ferry__atomic_file *w);
/* fsync, rename over the target, fsync the directory, and free. On a failure before
 * the rename the temporary is removed and the target left as it was; a failed
 * directory fsync is an error too, though the target is then already in place. */
int ferry__atomic_commit(ferry__atomic_file *w);
/* ferry__atomic_commit without the directory fsync, for a writer of many files
 * that syncs their directory once (ferry__sync_dir) after renaming them all. */
int ferry__atomic_rename(ferry__atomic_file *w);
/* fsync of the directory holding path (a file in it), which makes renames and
 * removals in it durable. FERRY_EIO on failure. */
int ferry__sync_dir(const char *path);
/* Removes a file; a missing one is no error. FERRY_EIO naming it otherwise. */
int ferry__unlink(const char *path);

/* ---- Fault injection, for the tests ----
 * Every create, write, fsync, close, rename and unlink of a writer in this layer is
 * a fault point. Armed with mode FERRY__FAULT_FAIL, the n-th point (1-based)
 * counted from the arming fails as the disk would (a write is cut short with
 * ENOSPC, the others fail with EIO); with FERRY__FAULT_KILL the process is killed
 * (SIGKILL) at it, a write having written about half its bytes. n = 0 only counts.
 * The hook is per thread and off unless armed, at the cost of a test of a
 * thread-local flag per system call. Returns the points counted since the last
 * arming; FERRY__FAULT_OFF disarms. */
enum { FERRY__FAULT_OFF = 0, FERRY__FAULT_FAIL = 1, FERRY__FAULT_KILL = 2 };
long ferry__fault_arm(int mode, long n);
/* Removes the temporary and frees. Safe after a failed commit and on a zeroed w. */
void ferry__atomic_abort(ferry__atomic_file *w);

#endif
