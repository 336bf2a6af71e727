/*
 * Places: where the values a library lends lie in the files it has mapped, so
 * that later reads copy them from ferry's own mapping of those files instead of
 * asking the library again (LevelDB's reads in place, leveldb_env.c).
 *
 * While the library lends entry i's value (a pointer into its mapping of a file
 * of one directory, valid for the moment), note() finds the mapping that holds
 * it (Linux's /proc/self/maps, read again when a pointer lies in no mapping
 * known yet: the files seen there are mapped by ferry at once, the same files
 * by inode), and keeps the place only where ferry's own mapping holds the very
 * same bytes at the matching offset (compared whole). The others (a value in the
 * library's heap, a file it read with pread, a file ferry could not map) have
 * no place. So the walk that notes reads every value once, in both mappings.
 *
 * The files' bytes must not change in place while they are mapped (the library
 * writes new files rather than rewriting old ones). A file cut short under a
 * read is a SIGBUS, which the reader takes under a guard (core/guard.h) and
 * names with ferry__places_file(); and past the new end, inside its last page,
 * a file reads as zeros, which intact() tells after the read: each place keeps
 * the distance from the value's end to the first non-zero byte after it (in a
 * LevelDB block, the next entry's header or the block's restart count), and
 * that byte reads as zero, or faults, exactly when the file no longer holds the
 * whole value. 13 bytes an entry.
 *
 * One thread notes, in entry order, before any read; get() and intact() are
 * then safe from any number of threads.
 */
#ifndef FERRY_PLACES_H
#define FERRY_PLACES_H

#include "../core/internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ferry__places ferry__places;

/* Places for the files of directory dir whose names file_ok accepts; NULL
 * without memory or when dir cannot be resolved (then nothing has a place). */
ferry__places *ferry__places_new(const char *dir, bool (*file_ok)(const char *name));

/* Notes the next entry's value (v, len), lent by the library now. room: the
 * bytes the places may take (the caller's budget less what else it holds),
 * checked at every note; past it, or without memory, the places give up:
 * nothing has a place. Reads v whole: the caller runs it under a guard. */
void ferry__places_note(ferry__places *p, const void *v, size_t len, uint64_t room);

/* After the last note: returns how many entries have a place (0: the places
 * may be freed); ferry's mappings of files that hold none are dropped. */
uint64_t ferry__places_finish(ferry__places *p);

/* Entry i's value in ferry's mapping, or NULL (then *len is not set). */
static inline const uint8_t *ferry__places_get(const ferry__places *p, uint64_t i, size_t *len);

/* Whether the file still held all of entry i's value (it has a place) when
 * asked: asked after a read, under the same guard (it reads the file). */
bool ferry__places_intact(const ferry__places *p, uint64_t i);

/* The path of the file whose mapping of ferry's holds addr, and the mapping's
 * start (the file's offset 0); NULL when none does. */
const char *ferry__places_file(const ferry__places *p, uintptr_t addr, const void **base);

void ferry__places_free(ferry__places *p);

/* ---- inline ---- */
struct ferry__places {
    const uint8_t **at; /* each entry's value in ferry's mapping, or NULL */
    uint32_t *len;
    uint64_t n; /* entries noted */
};

static inline const uint8_t *ferry__places_get(const ferry__places *p, uint64_t i, size_t *len)
{
    if (!p || i >= p->n || !p->at[i])
        return NULL;
    *len = p->len[i];
    return p->at[i];
}

#endif
