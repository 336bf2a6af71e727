/*
 * The values of a key/value store as a sample's fields: a Caffe Datum, a Caffe2
 * TensorProtos, or the key and the value as bytes. The fields are decided from
 * the first entry; every other entry must fit them (else an error that the
 * caller puts after the store, the entry and its key).
 */
#ifndef FERRY_DB_VALUES_H
#define FERRY_DB_VALUES_H

#include "ferry/caffe2.h"
#include "ferry/db.h"
#include "ferry/lmdb.h"
#include "../core/internal.h"

typedef struct ferry__db_values {
    int mode; /* FERRY_DB_VALUE_DATUM, _TENSORPROTOS or _RAW, after AUTO is decided */
    uint64_t max_len;
    int nfields;
    ferry_field f[FERRY_MAX_FIELDS];
    /* datum: the field numbers (-1 absent) and the first entry's shape */
    int f_data, f_label, f_float;
    bool encoded;
    int32_t c, h, w;
    size_t nfloat;
    /* tensorprotos: one field a proto, in order */
    int nprotos;
    int32_t type[FERRY_MAX_FIELDS];
    uint64_t count[FERRY_MAX_FIELDS];
} ferry__db_values;

/* Decides the fields from the first value (NULL when the store is empty: raw),
 * with mode AUTO, DATUM, TENSORPROTOS or RAW; max_len 0 = the default bound of
 * variable fields (`largest` for raw values when known, else 1 MiB). Errors say
 * what (the caller adds the store and the entry). */
int ferry__db_values_init(ferry__db_values *vs, int mode, uint64_t max_len, uint64_t largest,
                          size_t max_klen, const uint8_t *first, size_t n);

/* Writes one entry's fields into out (room as the fields say). No allocation. */
int ferry__db_values_get(const ferry__db_values *vs, const uint8_t *key, size_t klen,
                         const uint8_t *v, size_t vlen, ferry_sample *out);

#endif
