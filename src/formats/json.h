/*
 * A small JSON reader for the metadata files other formats carry (MDS's
 * index.json, a shard's embedded config, a safetensors header). Not a public
 * API: formats and datasets share it.
 *
 * Bounded: the caller sets the most nodes and the deepest nesting it accepts, and
 * the parser is not recursive (an explicit stack of open containers), so no input
 * can exhaust the C stack or make it allocate more than max_nodes nodes. The text
 * is not copied: nodes point into it, and strings keep their escapes until
 * ferry__json_str unescapes them into a caller's buffer.
 *
 * Errors: FERRY_ECORRUPT with "NAME: offset N: why" (name is what the caller
 * calls the text, a file path say), FERRY_EOVERFLOW past a limit, FERRY_ENOMEM.
 */
#ifndef FERRY_JSON_H
#define FERRY_JSON_H

#include "../core/internal.h"

typedef enum ferry__json_type {
    FERRY__JSON_NULL = 0,
    FERRY__JSON_FALSE,
    FERRY__JSON_TRUE,
    FERRY__JSON_NUMBER,
    FERRY__JSON_STRING,
    FERRY__JSON_ARRAY,
    FERRY__JSON_OBJECT
} ferry__json_type;

/* One value. Nodes are in document order; node 0 is the root. */
typedef struct ferry__json_node {
    uint8_t type;
    bool is_int;     /* a number written without fraction or exponent, fits int64 */
    uint32_t next;   /* the next sibling's node number, 0 for none */
    uint32_t first;  /* arrays and objects: the first child's node number, 0 if empty */
    uint32_t count;  /* arrays and objects: number of children */
    uint32_t offset; /* where the value starts in the text */
    const char *key; /* a member of an object: its key as written, escapes kept */
    uint32_t key_len;
    const char *str; /* strings: between the quotes, escapes kept */
    uint32_t str_len;
    int64_t i; /* is_int numbers */
    double num;
} ferry__json_node;

typedef struct ferry__json {
    ferry__json_node *nodes;
    uint32_t count;
} ferry__json;

#define FERRY__JSON_MAX_DEPTH 64

/* Parses text[0..n) (which need not end in a NUL) as one JSON value with optional
 * whitespace around it. At most max_nodes values (FERRY_EOVERFLOW past it) and
 * max_depth nested containers (at most FERRY__JSON_MAX_DEPTH). The nodes are
 * allocated (free with ferry__json_free) and point into text, which must outlive
 * them. */
int ferry__json_parse(ferry__json *doc, const char *name, const char *text, size_t n,
                      uint32_t max_nodes, int max_depth);
void ferry__json_free(ferry__json *doc);

static inline const ferry__json_node *ferry__json_node_at(const ferry__json *doc, uint32_t i)
{
    return i < doc->count ? &doc->nodes[i] : NULL;
}
/* The member of object `obj` whose (unescaped) key is `key`, or NULL. */
const ferry__json_node *ferry__json_get(const ferry__json *doc, const ferry__json_node *obj,
                                        const char *key);
/* Child i of an array or object (counting from 0), or NULL. O(i). */
const ferry__json_node *ferry__json_item(const ferry__json *doc, const ferry__json_node *arr,
                                         uint32_t i);
/* The sibling after n, or NULL. */
const ferry__json_node *ferry__json_next(const ferry__json *doc, const ferry__json_node *n);
/* Unescapes a string node into buf (cap bytes, NUL-terminated); *len (may be NULL)
 * gets its length without the NUL. FERRY_EOVERFLOW when it does not fit,
 * FERRY_ECORRUPT for a bad escape; node not a string: FERRY_EINVAL. */
int ferry__json_str(const ferry__json_node *n, char *buf, size_t cap, size_t *len);
/* Compares a string node's unescaped value with s (1 when equal). */
bool ferry__json_str_eq(const ferry__json_node *n, const char *s);

#endif
