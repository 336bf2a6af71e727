/*
 * The CSV part-file stream, for the source-description dispatcher.
 */
#ifndef FERRY_CSV_INTERNAL_H
#define FERRY_CSV_INTERNAL_H

#include "ferry/csv.h"
#include "dataset_internal.h"

/* Builds a stream from a parsed "csv:DIR[,prefix=part-][,digits=5][,suffix=]
 * [,delim=,][,header=0][,dtype=f32][,fields=...][,cols=N]" (s->kind is "csv").
 * delim takes one character or a name: comma, tab, space, semicolon, pipe.
 * Unknown options are FERRY_EINVAL naming them. */
int ferry__csv_open_spec(ferry_stream **out, ferry__spec *s);

/* Whether ferry_csv_parser_create takes this delimiter (src/formats/csv.c). */
bool ferry__csv_delim_ok(char d);

#endif
