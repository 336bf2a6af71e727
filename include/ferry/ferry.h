/*
 * ferry/ferry.h - everything public in one include.
 *
 * ferry is a data loading library for training machine-learning models: it reads
 * samples, orders them with samplers, and builds batches on worker threads straight
 * into pooled memory, in a reproducible order. Start with loader.h.
 */
#ifndef FERRY_H
#define FERRY_H

#include "core.h"
#include "sample.h"
#include "sampler.h"
#include "dataset.h"
#include "loader.h"
#include "device.h"
#include "lines.h"
#include "stream.h"
#include "csv.h"
#include "lmdb.h"
#include "records.h"
#include "db.h"
#include "image.h"
#include "transform.h"
#include "pipeline.h"
#include "tensors.h"
#include "npy.h"
#include "tokens.h"
#include "mds.h"
#include "tfrecord.h"
#include "wds.h"
#include "caffe2.h"
#include "folder.h"
#include "remote.h"

#endif /* FERRY_H */
