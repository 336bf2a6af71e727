/*
 * A small JSON reader for the metadata files other formats carry (MDS's
 * index.json, a shard's embedded config, a safetensors header). Not a public
 * API: formats and datasets share it.
 *
 * Bounded: the caller sets the most nodes and the deepest nesting it accepts, and
 * the parser is not recursive (an explicit stack of open containers), so no input
 * can exhaust the C stack or make it allocate more than max_nodes nodes. The text
 * is not copied: nodes point into it, and strings keep their escapes until
 * ferry__jtree_str unescapes them into a caller's buffer.
 *
 * The tokens are read by the one lexer (json.h), with its rules: a string must be
 * valid UTF-8, and its escapes must not make a lone surrogate or "\u0000" (text
 * that breaks them is refused at the parse, not mended when unescaped).
 *
 * Errors: FERRY_ECORRUPT with "NAME: offset N: why" (name is what the caller
 * calls the text, a file path say), FERRY_EOVERFLOW past a limit, FERRY_ENOMEM.
 */
#ifndef FERRY_JSON_TREE_H
#define FERRY_JSON_TREE_H

#include "../core/internal.h"

typedef enum ferry__jtree_type {
    FERRY__JTREE_NULL = 0,
    FERRY__JTREE_FALSE,
    FERRY__JTREE_TRUE,
    FERRY__JTREE_NUMBER,
    FERRY__JTREE_STRING,
    FERRY__JTREE_ARRAY,
    FERRY__JTREE_OBJECT
} ferry__jtree_type;

/* One value. Nodes are in document order; node 0 is the root. */
typedef struct ferry__jtree_node {
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
} ferry__jtree_node;

typedef struct ferry__jtree {
    ferry__jtree_node *nodes;
    uint32_t count;
} ferry__jtree;

#define FERRY__JTREE_MAX_DEPTH 64

/* Parses text[0..n) (which need not end in a NUL) as one JSON value with optional
 * whitespace around it. At most max_nodes values (FERRY_EOVERFLOW past it) and
 * max_depth nested containers (at most FERRY__JTREE_MAX_DEPTH). The nodes are
 * allocated (free with ferry__jtree_free) and point into text, which must outlive
 * them. */
int ferry__jtree_parse(ferry__jtree *doc, const char *name, const char *text, size_t n,
                       uint32_t max_nodes, int max_depth);
void ferry__jtree_free(ferry__jtree *doc);

static inline const ferry__jtree_node *ferry__jtree_node_at(const ferry__jtree *doc, uint32_t i)
{
    return i < doc->count ? &doc->nodes[i] : NULL;
}
/* The member of object `obj` whose (unescaped) key is `key`, or NULL. */
const ferry__jtree_node *ferry__jtree_get(const ferry__jtree *doc, const ferry__jtree_node *obj,
                                          const char *key);
/* Child i of an array or object (counting from 0), or NULL. O(i). */
const ferry__jtree_node *ferry__jtree_item(const ferry__jtree *doc, const ferry__jtree_node *arr,
                                           uint32_t i);
/* The sibling after n, or NULL. */
const ferry__jtree_node *ferry__jtree_next(const ferry__jtree *doc, const ferry__jtree_node *n);
/* Unescapes a string node into buf (cap bytes, NUL-terminated); *len (may be NULL)
 * gets its length without the NUL. FERRY_EOVERFLOW when it does not fit; node not
 * a string: FERRY_EINVAL. */
int ferry__jtree_str(const ferry__jtree_node *n, char *buf, size_t cap, size_t *len);
/* Compares a string node's unescaped value with s (1 when equal). */
bool ferry__jtree_str_eq(const ferry__jtree_node *n, const char *s);

#endif
