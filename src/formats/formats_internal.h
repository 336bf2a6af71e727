/*
 * Format internals shared with the datasets layer.
 */
#ifndef FERRY_FORMATS_INTERNAL_H
#define FERRY_FORMATS_INTERNAL_H

#include "ferry/lines.h"

/* The index's offsets (count + 1 of them), mapped: valid while ix lives. Entries
 * are unchecked; ferry_line_index_get checks them. For prefetching. */
const uint64_t *ferry__line_index_offsets(const ferry_line_index *ix);

#endif
