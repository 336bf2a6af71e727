/*
 * LMDB internals of the datasets layer: the source-description entry point of the
 * lmdb dataset. The environment reader lives below, in src/formats/lmdb_env.h.
 */
#ifndef FERRY_LMDB_INTERNAL_H
#define FERRY_LMDB_INTERNAL_H

#include "../formats/lmdb_env.h"
#include "dataset_internal.h"

/* "lmdb:PATH[,db=NAME][,datum=auto|1|0][,max=N][,lock=0|1]" */
int ferry__lmdb_open_spec(ferry_dataset **out, ferry__spec *s);

#endif
