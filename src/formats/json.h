/*
 * A small pull reader for untrusted JSON (RFC 8259): the caller walks the document
 * value by value. It never allocates, never reads outside [p, end), and nests at
 * most `max_depth` arrays and objects when skipping a value (the only place it
 * recurses). It is the one lexer of the library's JSON: the safetensors header
 * walks it, and the tree reader (json_tree.h) is built on it, so both take and
 * refuse the same text. Strings are checked to be valid UTF-8 (no surrogates, no
 * overlong forms), "\u0000" and lone surrogate escapes are refused (a string must
 * be a C string and valid UTF-8 once unescaped), and strings are unescaped into a
 * caller's buffer. On failure j->err says why and ferry__json_offset where.
 */
#ifndef FERRY_JSON_H
#define FERRY_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
/* Skips whitespace; true when the next bytes are the n bytes of s, which are then
 * consumed: a fast path for a token the caller expects, such as a key with its
 * quotes ("\"dtype\""), which the caller reads in full when this fails. */
static inline bool ferry__json_match(ferry__json *j, const char *s, size_t n)
{
    ferry__json_ws(j);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, s, n) != 0)
        return false;
    j->p += n;
    return true;
}

/* Skips whitespace; a string of at most max bytes of printable ASCII without
 * escapes: its bytes in place in *s, *n, and true. Anything else (a longer string,
 * one with escapes or other bytes, another value) is false, with nothing consumed
 * but the whitespace: the caller then reads it with ferry__json_string. */
static inline bool ferry__json_plain(ferry__json *j, const char **s, size_t *n, size_t max)
{
    ferry__json_ws(j);
    const char *p = j->p;
    if (p >= j->end || *p != '"')
        return false;
    for (size_t i = 1; i <= max + 1 && i < (size_t)(j->end - p); i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"') {
            *s = p + 1;
            *n = i - 1;
            j->p = p + i + 1;
            return true;
        }
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return false;
    }
    return false;
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
/* A number (RFC 8259's grammar): its value to an ulp or so in *num, and in *i with
 * *is_int when it is written without fraction or exponent and fits int64_t (any
 * of the three may be NULL). */
bool ferry__json_number(ferry__json *j, double *num, int64_t *i, bool *is_int);
/* The literal word ("true", "false", "null") at the reader, consumed. */
bool ferry__json_literal(ferry__json *j, const char *word);
/* Any value, checked and skipped. */
bool ferry__json_skip(ferry__json *j);

#endif
