/*
 * A small pull reader for untrusted JSON: the caller walks the document value by
 * value. It never allocates, never reads outside [p, end), and nests at most
 * `max_depth` arrays and objects when skipping a value (the only place it
 * recurses). Strings are checked to be valid UTF-8 (no surrogates, no overlong
 * forms) and unescaped into a caller's buffer.
 */
#ifndef FERRY_JSON_H
#define FERRY_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ferry__json {
    const char *start, *p, *end;
    int max_depth;
    const char *err; /* a static reason once a call fails */
} ferry__json;

void ferry__json_init(ferry__json *j, const void *data, size_t n, int max_depth);
/* The offset of the reader from the start (for messages). */
size_t ferry__json_offset(const ferry__json *j);
/* Skips whitespace. */
static inline void ferry__json_ws(ferry__json *j)
{
    while (j->p < j->end && (unsigned char)*j->p <= ' ' &&
           (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* Skips whitespace; true when the next byte is c (not consumed). Inline: a
 * header of 10,000 tensors asks a quarter of a million times. */
static inline bool ferry__json_peek(ferry__json *j, char c)
{
    if (j->p < j->end && *j->p == c && c != ' ' && c != '\t' && c != '\n' && c != '\r')
        return true; /* no whitespace before it: the common case */
    ferry__json_ws(j);
    return j->p < j->end && *j->p == c;
}

/* Skips whitespace; true when the next byte is c, which is then consumed. */
static inline bool ferry__json_eat(ferry__json *j, char c)
{
    if (!ferry__json_peek(j, c))
        return false;
    j->p++;
    return true;
}
/* Skips whitespace; true at the end of the input. */
bool ferry__json_at_end(ferry__json *j);
/* A string: unescaped into out (at most cap bytes, then a NUL), its length in
 * *len. out may be NULL to check and skip it. Strings holding "\u0000" are refused
 * (they cannot be C strings). The unescaped string is never longer than its JSON
 * form. false with j->err on any error. */
bool ferry__json_string(ferry__json *j, char *out, size_t cap, size_t *len);
/* A non-negative integer without fraction or exponent that fits in uint64_t. */
bool ferry__json_u64(ferry__json *j, uint64_t *v);
/* Any value, checked and skipped. */
bool ferry__json_skip(ferry__json *j);
/* true when the n bytes at p are valid UTF-8 (no surrogates, no overlong forms). */
bool ferry__utf8_valid(const void *p, size_t n);

#endif
