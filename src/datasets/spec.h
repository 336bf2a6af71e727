/*
 * Source text, "KIND:LOCATION[,key=value...]": the one parser of it, at the bottom
 * of the datasets layer. It splits the text and reads the options; it knows no
 * kind. The registry (source.c) finds the kind in its table and calls that kind's
 * opener, which takes its own options through the readers below.
 *
 * Quoting: there is none. A value runs to the next ',' (so it holds no comma),
 * except that "key=," is the comma itself (a CSV delimiter) where it ends the text
 * or is followed by another ','. The location runs to the first ',' after the
 * first ':' (so a location may hold ':' but not ',').
 */
#ifndef FERRY_SPEC_H
#define FERRY_SPEC_H

#include "dataset_internal.h"

/* Limits on the text: its length with the terminating NUL, and its options. */
#define FERRY_SPEC_MAX 4096
#define FERRY_SPEC_MAX_OPTS 32

/* The text split in place in buf: kind and location, and the options in the
 * order given; used[i] marks the options a reader took. */
typedef struct ferry__spec {
    char buf[FERRY_SPEC_MAX];
    const char *kind, *location;
    int nopts;
    const char *key[FERRY_SPEC_MAX_OPTS], *value[FERRY_SPEC_MAX_OPTS];
    bool used[FERRY_SPEC_MAX_OPTS];
} ferry__spec;

/* Splits text into *s. Returns FERRY_EINVAL with a message on a malformed spec
 * (no ':', an empty kind, an option that is not key=value or is given twice). */
int ferry__spec_parse(ferry__spec *s, const char *text);
/* Takes option `key` as an unsigned number in [lo, hi] (keeps *out when absent). */
int ferry__spec_u64(ferry__spec *s, const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
/* The value of option `key` (marked as taken), or NULL when absent. */
const char *ferry__spec_str(ferry__spec *s, const char *key);
/* The value of option `key` without taking it (the kind's own reader may), or
 * NULL when absent. */
const char *ferry__spec_peek(const ferry__spec *s, const char *key);
/* Takes option `key` as 0/1 (also false/true, no/yes, off/on). */
int ferry__spec_bool(ferry__spec *s, const char *key, int *out);
/* Adds key=value when the text has no option `key`: a kind's default that a
 * reader then takes as if it had been written (both strings outlive *s).
 * FERRY_EINVAL when the options are full. */
int ferry__spec_default(ferry__spec *s, const char *key, const char *value);
/* FERRY_EINVAL naming the first option no one took. */
int ferry__spec_check_used(const ferry__spec *s);

/* A kind's opener, one per kind, each in its kind's file and listed in the table
 * of source.c. It takes its options from s (ending with ferry__spec_check_used),
 * and sets *ds (map-style) or *st (a stream), both NULL on entry. st is NULL when
 * the caller takes no stream: a kind that could make one then says to open it
 * with ferry_source_open (a kind that only makes streams is refused before its
 * opener runs). The options every kind takes (shuffle=, pipeline= and the image
 * options) are taken by the registry before the opener runs. */
typedef int ferry__opener(ferry_dataset **ds, ferry_stream **st, ferry__spec *s);
ferry__opener ferry__synthetic_open_spec, ferry__lines_open_spec, ferry__files_open_spec,
    ferry__images_open_spec, ferry__records_open_spec, ferry__lmdb_open_spec, ferry__csv_open_spec,
    ferry__npy_open_spec, ferry__tokens_open_spec, ferry__mds_open_spec, ferry__tfrecord_open_spec,
    ferry__wds_open_spec, ferry__kv_open_spec;

/* The image options of a spec ("pipeline=", "size=", ...), taken when the kind
 * decodes images (is_images) or a pipeline= is given (*present); *field is
 * image_field= or NULL. In images.c. */
struct ferry_image_pipeline;
int ferry__images_spec(ferry__spec *s, int is_images, struct ferry_image_pipeline *p,
                       const char **field, int *present);

#endif
