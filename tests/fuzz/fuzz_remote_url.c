/*
 * Fuzz target: remote locations as users write them: the URL parser, SigV4's URI
 * encoding and WebDataset's brace ranges (bounded to 1000 names). A parsed URL's
 * parts fit their buffers; every expansion is shorter than the URL limit.
 */
#include "io/remote.h"

#include <stdlib.h>
#include <string.h>

static int take(void *arg, const char *text)
{
    size_t *n = arg;
    if (strlen(text) >= FERRY__URL_MAX || strchr(text, '{'))
        abort();
    (*n)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    ferry__url u;
    if (ferry__url_parse(&u, text) == 0) {
        if (strlen(u.host) == 0 || strlen(u.host) >= sizeof u.host)
            abort();
        char enc[FERRY__URL_MAX * 3 + 1];
        if (!ferry__uri_encode(u.path, strlen(u.path), true, enc, sizeof enc))
            abort();
    }
    size_t n = 0;
    if (ferry__brace_expand(text, 1000, take, &n) == 0 && n == 0)
        abort();
    free(text);
    return 0;
}
