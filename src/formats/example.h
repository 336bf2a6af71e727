/*
 * tf.train.Example and tf.train.SequenceExample, parsed in place from a record's
 * protobuf bytes.
 *
 * The parser walks a fixed nesting (Example > Features > map entry > Feature >
 * list; SequenceExample > FeatureLists > map entry > FeatureList > Feature >
 * list) with no recursion; every length is checked against what is left of its
 * enclosing message before it is used, varints are at most 10 bytes, and unknown
 * fields are skipped as the wire format says. Errors say what is wrong and at which
 * byte of the record ("protobuf: bad varint at byte 17"), for the caller to put
 * after the file, record and offset.
 */
#ifndef FERRY_EXAMPLE_H
#define FERRY_EXAMPLE_H

#include "../core/internal.h"

#include <stddef.h>
#include <stdint.h>

enum {
    FERRY__FEAT_NONE = 0, /* a Feature with no kind set: a missing value */
    FERRY__FEAT_BYTES = 1,
    FERRY__FEAT_FLOAT = 2,
    FERRY__FEAT_INT64 = 3
};

typedef struct ferry__feature {
    const uint8_t *key;
    size_t key_len;
    int kind;
    const uint8_t *list; /* the BytesList / FloatList / Int64List message */
    size_t list_len;
    size_t base; /* byte offset of list within the record, for messages */
    int seq;     /* 1: a FeatureList of a SequenceExample: list is the FeatureList
                  * message, its steps come from ferry__feature_step, and kind is
                  * that of its first step with a kind */
} ferry__feature;

/* Calls fn for every entry of the feature map of a tf.train.Example, or of the
 * context and the feature_lists of a tf.train.SequenceExample (the two share
 * field 1, so an Example is a SequenceExample without lists), in the order they
 * are stored (a key given twice comes twice: the last one counts, as in
 * protobuf). A non-zero return from fn stops the walk and is returned.
 * FERRY_ECORRUPT on malformed bytes. */
int ferry__example_walk(const uint8_t *p, size_t n, int (*fn)(void *arg, const ferry__feature *f),
                        void *arg);

/* The steps of a feature list (f->seq) one by one: start with *pos = 0; 1 with
 * *step set (a Feature, seq 0), 0 after the last, or FERRY_ECORRUPT. */
int ferry__feature_step(const ferry__feature *fl, size_t *pos, ferry__feature *step);

/* Counts the values of a feature's list and, for bytes, the longest value. */
int ferry__feature_count(const ferry__feature *f, uint64_t *count, uint64_t *max_len);

/* Writes up to cap values (float32 / int64 as stored) to dst; *count is how many
 * the list holds (more than cap: nothing is written past cap). */
int ferry__feature_floats(const ferry__feature *f, float *dst, uint64_t cap, uint64_t *count);
int ferry__feature_int64s(const ferry__feature *f, int64_t *dst, uint64_t cap, uint64_t *count);

/* The bytes values one by one: start with *pos = 0; 1 with *v, *len set, 0 at the
 * end, or FERRY_ECORRUPT. */
int ferry__feature_bytes_next(const ferry__feature *f, size_t *pos, const uint8_t **v, size_t *len);

#endif
