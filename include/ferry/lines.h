/*
 * ferry/lines.h - text files of one sample per line, larger than memory.
 *
 * A line index is a sidecar file (FILE.fidx by default) holding the byte offset of
 * every line, so that line i is one read at a known offset: random access, any
 * sampler, several workers at once, and nothing of the file held in memory. The
 * index records the source's size, modification time and a hash of its first
 * bytes, so a stale index (the file changed) or the index of another file is
 * detected on open. docs/line-index.md specifies the format.
 *
 * Lines end at "\n"; a "\r" before it is not part of the line (CRLF files), and a
 * last line without a final newline counts. Offsets are 64-bit: files over 4 GiB
 * and more than 2^32 lines work.
 */
#ifndef FERRY_LINES_H
#define FERRY_LINES_H

#include "sample.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_dataset ferry_dataset; /* made below, used through ferry/dataset.h */

/* Writes the index of `path` to `index_path` (NULL: path + ".fidx"). The index is
 * written to a temporary file, synced and renamed into place: a reader sees the
 * old index or the whole new one. progress (may be NULL) is called now and then with
 * the bytes scanned so far. *nlines (may be NULL) gets the line count. */
FERRY_API int ferry_line_index_build(const char *path, const char *index_path,
                                     ferry_progress_fn progress, void *arg, uint64_t *nlines);

typedef struct ferry_line_index ferry_line_index;

/* Opens (maps) the index of `path`. Errors name the index and say why:
 * FERRY_ENOENT (no index; with build nonzero it is built instead),
 * FERRY_ESTALE (the source changed since it was indexed, or the index is of
 * another file; with build nonzero it is rebuilt), FERRY_ECORRUPT (truncated,
 * bad magic or version, offsets outside the source). */
FERRY_API int ferry_line_index_open(ferry_line_index **out, const char *path,
                                    const char *index_path, int build);
FERRY_API void ferry_line_index_free(ferry_line_index *ix);
FERRY_API uint64_t ferry_line_index_count(const ferry_line_index *ix);
/* Size in bytes of the indexed source. */
FERRY_API uint64_t ferry_line_index_source_size(const ferry_line_index *ix);
/* Line i: its offset in the source and its length without "\n" or "\r\n".
 * FERRY_ERANGE past the end; FERRY_ECORRUPT when the index's offsets for it are
 * out of order or past the source (with the index's name and the line). */
FERRY_API int ferry_line_index_get(const ferry_line_index *ix, uint64_t i, uint64_t *offset,
                                   uint64_t *length);

/* ---- The lines dataset: sample i is line i ----
 * One field "line": uint8, variable up to max_len bytes, padded with zeros, with
 * its length. A longer line is cut to max_len and counted
 * (ferry_lines_truncated), or is an error with on_long = FERRY_LINES_LONG_ERROR. */
enum { FERRY_LINES_LONG_TRUNCATE = 0, FERRY_LINES_LONG_ERROR = 1 };
enum { FERRY_READAHEAD_AUTO = 0, FERRY_READAHEAD_ON = 1, FERRY_READAHEAD_OFF = 2 };
/* MMAP (default): lines are copied out of a read-only mapping of the file: no
 * system call per line, and the mapped pages are the page cache's, not the
 * process's own memory. PREAD reads each line with a system call. Either way a
 * file (or its index) cut short while it is read is an error naming it
 * (FERRY_EIO "... the file was cut short while it was read"), never a SIGBUS; a
 * file replaced by a rename or grown is read as it was at open. See
 * docs/changing-files.md. */
enum { FERRY_LINES_IO_MMAP = 0, FERRY_LINES_IO_PREAD = 1 };

typedef struct ferry_lines_opts {
    const char *path;
    const char *index_path; /* NULL: path + ".fidx" */
    int build_index;        /* build (or rebuild a stale) index on open */
    uint32_t max_len;       /* 1 .. 1<<24; 0 = 4096 */
    int on_long;            /* FERRY_LINES_LONG_TRUNCATE or FERRY_LINES_LONG_ERROR */
    int readahead;          /* hint the kernel about the lines of upcoming batches:
                             * AUTO = when the file is larger than half of memory
                             * (when reads would miss the page cache) */
    int io;                 /* FERRY_LINES_IO_MMAP or FERRY_LINES_IO_PREAD */
} ferry_lines_opts;

FERRY_API void ferry_lines_opts_default(ferry_lines_opts *o);
FERRY_API int ferry_dataset_lines(ferry_dataset **out, const ferry_lines_opts *o);
/* Lines cut to max_len so far (0 for a dataset that is not a lines dataset). */
FERRY_API uint64_t ferry_lines_truncated(const ferry_dataset *ds);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_LINES_H */
