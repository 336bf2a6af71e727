/*
 * Places: where the values a library lends lie in the files it has mapped, so
 * that later reads copy them from ferry's own mapping of those files instead of
 * asking the library again (LevelDB's reads in place, leveldb_env.c).
 *
 * While the library lends entry i's value (a pointer into its mapping of a file
 * of one directory, valid for the moment), note() finds the mapping that holds
 * it (Linux's /proc/self/maps, read again when a pointer lies in no mapping
 * known yet) and keeps the file, the offset and a check of the bytes around the
 * value. finish() maps each of those files itself (the file the library mapped:
 * same device and inode), and keeps a place only where its own mapping holds
 * the same bytes at that offset; the others (a value in the library's heap, a
 * file it read with pread, one that changed) have no place. The files' bytes
 * must not change in place while they are mapped (the library writes new files
 * rather than rewriting old ones); a file cut short under a read is a SIGBUS,
 * which the reader takes under a guard (core/guard.h) and names with fault().
 *
 * One thread notes, in entry order, before any read; get() is then safe from
 * any number of threads.
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
 * bytes the places may take (the caller's budget less what else it holds);
 * past it, or without memory, the places give up: nothing has a place. */
void ferry__places_note(ferry__places *p, const void *v, size_t len, uint64_t room);

/* After the last note: maps the files and keeps the places that check.
 * Returns how many entries have a place (0: the places may be freed). */
uint64_t ferry__places_finish(ferry__places *p);

/* Entry i's value in ferry's mapping, or NULL (then *len is not set). */
static inline const uint8_t *ferry__places_get(const ferry__places *p, uint64_t i, size_t *len);

/* Whether entry i's bytes (it has a place) are still those the library lent:
 * asked after a read, which a file cut short since (its last page reads as
 * zeros past the end) or written in place fails. Reads the bytes again: under
 * the guard, as the read. */
bool ferry__places_intact(const ferry__places *p, uint64_t i);

/* The path of the file whose mapping of ferry's holds addr, and the mapping's
 * start (the file's offset 0); NULL when none does. */
const char *ferry__places_file(const ferry__places *p, uintptr_t addr, const void **base);

/* The file holding entry i's value (it has a place), its mapping's start and the
 * value's offset in it. */
const char *ferry__places_where(const ferry__places *p, uint64_t i, uint64_t *off,
                                const void **base);

void ferry__places_free(ferry__places *p);

/* ---- inline ---- */
struct ferry__places {
    const uint8_t **at; /* after finish: each entry's value, or NULL */
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
