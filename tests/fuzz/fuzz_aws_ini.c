/*
 * Fuzz target: INI text as ~/.aws/credentials and ~/.aws/config hold it. Every
 * section, key and value handed over is a bounded string without a newline.
 */
#include "io/remote.h"

#include <stdlib.h>
#include <string.h>

static int check(void *arg, const char *section, const char *key, const char *value)
{
    (void)arg;
    if (!key[0] || strchr(section, '\n') || strchr(key, '\n') || strchr(value, '\n') ||
        strlen(value) >= 4096)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry__ini_parse((const char *)data, size, "fuzz", check, NULL);
    return 0;
}
