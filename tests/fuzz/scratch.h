/*
 * A fuzz target's scratch file: fuzz_path, NAME in a fresh directory fuzz_dir
 * under $TMPDIR (or /tmp), made on the first call and removed at exit.
 */
#ifndef FERRY_FUZZ_SCRATCH_H
#define FERRY_FUZZ_SCRATCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_dir[256], fuzz_path[300];

static void fuzz_scratch_remove(void)
{
    unlink(fuzz_path);
    rmdir(fuzz_dir);
}

/* The directory is TAG-XXXXXX ("ferry-fuzz-tar"). */
static void fuzz_scratch(const char *tag, const char *name)
{
    if (fuzz_dir[0])
        return;
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/%s-XXXXXX", t ? t : "/tmp", tag);
    if (!mkdtemp(fuzz_dir))
        abort();
    snprintf(fuzz_path, sizeof fuzz_path, "%s/%s", fuzz_dir, name);
    atexit(fuzz_scratch_remove);
}

/* The input as the scratch file: 0, or -1 when it could not be written. */
static inline int fuzz_write(const uint8_t *data, size_t size)
{
    FILE *fp = fopen(fuzz_path, "wb");
    if (!fp)
        return -1;
    size_t wrote = fwrite(data, 1, size, fp);
    return fclose(fp) != 0 || wrote != size ? -1 : 0;
}

#endif
