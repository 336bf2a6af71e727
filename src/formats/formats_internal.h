/*
 * Format internals shared with the datasets layer.
 */
#ifndef FERRY_FORMATS_INTERNAL_H
#define FERRY_FORMATS_INTERNAL_H

#include "ferry/lines.h"

#include <stdbool.h>
#include <stdint.h>

/* The index's offsets (count + 1 of them), mapped: valid while ix lives. Entries
 * are unchecked; ferry_line_index_get checks them. For prefetching. */
const uint64_t *ferry__line_index_offsets(const ferry_line_index *ix);

/* ferry_line_index_get without the guard against a file cut short: for a caller
 * that reads the index inside its own guarded region. */
int ferry__line_index_entry(const ferry_line_index *ix, uint64_t i, uint64_t *offset,
                            uint64_t *length);
/* The index file's path, for messages. */
const char *ferry__line_index_name(const ferry_line_index *ix);
/* Whether addr lies in the index's mapping (to tell which file faulted). */
bool ferry__line_index_holds(const ferry_line_index *ix, uintptr_t addr);

#endif
