/*
 * llm.c token shard headers, shared by the tokens dataset and the fuzz targets.
 */
#ifndef FERRY_TOKENS_INTERNAL_H
#define FERRY_TOKENS_INTERNAL_H

#include "ferry/tokens.h"
#include "../core/internal.h"

/* Checks the 1024-byte header at hdr (n bytes available) of a file of file_size
 * bytes named `name`: magic, version, and count against the size. Sets *token_size
 * (2 or 4) and *count. */
int ferry__tokens_header(const uint8_t *hdr, size_t n, uint64_t file_size, const char *name,
                         unsigned *token_size, uint64_t *count);

#endif
