/*
 * Fuzz target: what S3 answers in XML, as the network gives it: a ListObjectsV2
 * page and an error document. Every key parsed must be a string of its stated
 * bounds; an error document's fields fit their buffers.
 */
#include "io/remote.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry__s3_page p;
    if (ferry__s3_parse_list(&p, (const char *)data, size, "fuzz") == 0) {
        for (size_t i = 0; i < p.n; i++)
            if (!p.obj[i].key || strlen(p.obj[i].key) == 0 || strlen(p.obj[i].key) > 1024)
                abort();
        if (p.truncated && !p.next_token[0])
            abort();
        ferry__s3_page_free(&p);
    }
    char code[64], msg[256];
    if (ferry__s3_parse_error((const char *)data, size, code, sizeof code, msg, sizeof msg) &&
        (strlen(code) >= sizeof code || strlen(msg) >= sizeof msg))
        abort();
    return 0;
}
