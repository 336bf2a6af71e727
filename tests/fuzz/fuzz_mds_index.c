/*
 * Fuzz target: MDS index.json, through the JSON reader and the index checks.
 * The JSON tree must hold together (children inside the node array, counts that
 * match the sibling chains, strings that unescape); an accepted index must have
 * columns and shards within their limits and plain basenames.
 */
#include "formats/json_tree.h"
#include "formats/mds_internal.h"

#include <stdlib.h>
#include <string.h>

static void walk(const ferry__jtree *doc)
{
    char buf[64];
    for (uint32_t i = 0; i < doc->count; i++) {
        const ferry__jtree_node *n = &doc->nodes[i];
        if (n->next && (n->next <= i || n->next >= doc->count))
            abort();
        if (n->type == FERRY__JTREE_ARRAY || n->type == FERRY__JTREE_OBJECT) {
            uint32_t c = 0;
            for (const ferry__jtree_node *k = ferry__jtree_item(doc, n, 0); k;
                 k = ferry__jtree_next(doc, k))
                c++;
            if (c != n->count || (n->count && n->first != i + 1))
                abort();
        }
        if (n->type == FERRY__JTREE_STRING) {
            int rc = ferry__jtree_str(n, buf, sizeof buf, NULL);
            if (rc != 0 && rc != FERRY_EOVERFLOW)
                abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry__jtree doc;
    if (ferry__jtree_parse(&doc, "fuzz.json", buf, size, 4096, 32) == 0) {
        walk(&doc);
        ferry__jtree_free(&doc);
    }
    ferry__mds_index ix;
    if (ferry__mds_index_parse(&ix, "index.json", buf, size) == 0) {
        if (ix.ncols < 1 || ix.ncols > FERRY_MAX_FIELDS || ix.nshards < 1)
            abort();
        for (size_t s = 0; s < ix.nshards; s++)
            if (strchr(ix.shards[s].raw, '/') || strchr(ix.shards[s].zip, '/'))
                abort();
        ferry__mds_index_free(&ix);
    }
    free(buf);
    return 0;
}
