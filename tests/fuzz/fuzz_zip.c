/*
 * Fuzz target: the zip central directory reader (for .npz) and the member
 * inflater. Every member it admits must lie inside the archive, before its
 * directory; deflated members up to 1 MiB are inflated, and must make exactly
 * the bytes the directory says or fail.
 */
#include "formats/zip.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    ferry__zip_member *m = NULL;
    size_t count = 0;
    if (ferry__zip_read(buf, size, "fuzz.npz", 64, &m, &count) == 0) {
        for (size_t k = 0; k < count; k++) {
            const ferry__zip_member *e = &m[k];
            if (e->data_off > size || e->csize > size - e->data_off || e->header_off >= size ||
                strlen(e->name) > FERRY__ZIP_MAX_NAME)
                abort();
            if (e->method == FERRY__ZIP_STORED) {
                if (e->csize != e->usize)
                    abort();
                ferry__zip_check_crc(buf, "fuzz.npz", e);
            } else if (e->usize <= ((uint64_t)1 << 20)) {
                uint8_t *out = malloc(e->usize ? (size_t)e->usize : 1);
                if (!out)
                    abort();
                ferry__zip_inflate(buf, size, "fuzz.npz", e, out);
                free(out);
            }
        }
        free(m);
    }
    free(buf);
    return 0;
}
