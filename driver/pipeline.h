/* Pipeline parallel `dlcc train` (pipeline.c, docs/parallel.md): takes
 * the model, the loss, the data and the ranks of an mpirun of S
 * processes, splits the model into S stages (passes/stages.c), compiles
 * this rank's stage into its own plans, and runs each global batch as M
 * micro-batches under the GPipe or 1F1B schedule, activations sent
 * forward and their gradients back point to point, the gradients
 * accumulated over the micro-batches and the optimizer stepped once. */
#ifndef DLCC_DRIVER_PIPELINE_H
#define DLCC_DRIVER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/dist.h"
#include "driver/train.h"
#include "dlcc.h"
#include "passes/loss.h"

typedef struct PipeConfig {
  const char *model_path;
  const dlc_train_options *train; /* the optimizer and the model's options */
  const LossSpec *loss;           /* NULL: the model's output 0 is its loss */
  int loss_output;
  const TrainData *data;
  int64_t batch, micro; /* the global batch and M, micro-batches per batch */
  bool one_f_one_b;     /* else GPipe */
  Dist *dist;           /* rank r computes stage r */
} PipeConfig;

typedef struct Pipeline Pipeline;

/* Splits and compiles this rank's stage; rank 0 prints the split.  NULL
 * after writing the reason into err. */
Pipeline *pipe_new(const PipeConfig *c, char *err, size_t errlen);
/* This rank's stage takes its parameters and optimizer state from whole,
 * a training step of the whole model holding every rank's values. */
bool pipe_bind(Pipeline *p, dlc_train *whole, char *err, size_t errlen);
/* One global batch: samples order[0..batch), rank 0 gets the loss (the
 * mean of the micro-batches').  A failed exchange leaves the reason in
 * the Dist's err with *comm set. */
bool pipe_step(Pipeline *p, const int64_t *order, float lr, float *loss, bool *comm, char *err, size_t errlen);
/* Every stage's parameters and optimizer state into rank 0's whole, so
 * that it saves (or validates) as one process would; every rank calls it. */
bool pipe_gather(Pipeline *p, dlc_train *whole, bool *comm, char *err, size_t errlen);
void pipe_free(Pipeline *p);

#endif
