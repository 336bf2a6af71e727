/*
 * The CSV part-file stream, for the source-description dispatcher.
 */
#ifndef FERRY_CSV_INTERNAL_H
#define FERRY_CSV_INTERNAL_H

#include "ferry/csv.h"
#include "spec.h"

/* Whether ferry_csv_parser_create takes this delimiter (src/formats/csv.c). */
bool ferry__csv_delim_ok(char d);

#endif
