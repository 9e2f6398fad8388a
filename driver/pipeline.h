/* Pipeline parallel `dlcc train` (pipeline.c, docs/parallel.md): takes
 * the model, the loss, the data and the ranks of an mpirun of D * S
 * processes (D pipelines of S stages), splits the model into S stages
 * (passes/stages.c), compiles this rank's stage into its own plans, and
 * runs its pipeline's share of each global batch as M micro-batches
 * under the GPipe or 1F1B schedule, activations sent forward and their
 * gradients back point to point, the gradients accumulated over the
 * micro-batches, averaged over the D copies of the stage, and the
 * optimizer stepped once. */
#ifndef DLCC_DRIVER_PIPELINE_H
#define DLCC_DRIVER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/dist.h"
#include "driver/train.h"
#include "dlcc.h"
#include "passes/loss.h"
#include "passes/stages.h"

typedef struct PipeConfig {
  const char *model_path;
  const dlc_train_options *train; /* the optimizer and the model's options */
  const LossSpec *loss;           /* NULL: the model's output 0 is its loss */
  int loss_output;
  const TrainData *data;
  int64_t batch, micro; /* the pipeline's share of a global batch and M, its micro-batches */
  int64_t first_sample; /* where the pipeline's share starts in the global batch (dropout's masks) */
  bool one_f_one_b;     /* else GPipe */
  Dist *dist;           /* the pipeline's ranks: rank s computes stage s */
  Dist *world;          /* every rank: the status exchanged before each batch; rank 0 prints */
  Dist *replicas;       /* the D ranks holding this stage (data parallel), NULL when D is 1 */
  /* The T ranks sharing this stage Megatron-style (--tensor-parallel;
   * this rank is tensor->rank), NULL when T is 1: the forward and
   * backward plans split their linear pairs and attention heads, the
   * optimizer's plan holds the stage's parameters whole on every one of
   * them and steps them alike from the gathered gradients. */
  Dist *tensor;
  /* Batchnorm's running statistics updated once a global batch, by the
   * statistics of all its micro-batches together (torchgpipe's
   * DeferredBatchNorm), not once a micro-batch. */
  bool deferred_bn;
  /* --sync-bn: training-mode batchnorm's statistics over each
   * micro-batch of the D pipelines together (their samples of the stage
   * at that micro-batch), through the replicas' all-reduce in the
   * forward and backward plans; nothing when D is 1. */
  bool sync_bn;
  /* --bucket-mb: the gradients averaged over the D pipelines in buckets
   * of consecutive parameters of about that many MiB; 0: one each. */
  double bucket_mb;
} PipeConfig;

typedef struct Pipeline Pipeline;

/* Splits and compiles this rank's stage at another batch (a last,
 * smaller one) with like's stages; prints nothing.  NULL after writing
 * the reason into err. */
Pipeline *pipe_new_like(const PipeConfig *c, const Pipeline *like, char *err, size_t errlen);
/* to's parameters, optimizer state, running statistics and step counts
 * from from's (two pipelines of one stage at two batch sizes), then into
 * to's other plans. */
bool pipe_copy_state(Pipeline *to, const Pipeline *from, char *err, size_t errlen);

/* Splits and compiles this rank's stage; rank 0 prints the split.  NULL
 * after writing the reason into err. */
Pipeline *pipe_new(const PipeConfig *c, char *err, size_t errlen);
/* This rank's stage takes its parameters and optimizer state from whole,
 * a training step of the whole model holding every rank's values. */
bool pipe_bind(Pipeline *p, dlc_train *whole, char *err, size_t errlen);
/* One global batch: the pipeline's samples order[0..batch); stage 0 gets
 * the loss (the mean of the micro-batches', then of the pipelines').  A
 * failed exchange leaves the reason in the Dist's err with *comm set.
 * momentum: the optimizer's for this step (dlc_train_set_momentum), NaN
 * when the schedule does not set one. */
bool pipe_step(Pipeline *p, const int64_t *order, float lr, float momentum, float *loss, bool *comm, char *err,
               size_t errlen);
/* Every stage's parameters and optimizer state into stage 0's whole, so
 * that world rank 0 saves (or validates) as one process would; every
 * rank calls it. */
bool pipe_gather(Pipeline *p, dlc_train *whole, bool *comm, char *err, size_t errlen);
void pipe_free(Pipeline *p);
/* The split as rank 0 prints it (dlcc train and dlcc run): the header
 * with M micro-batches of b samples (b 0: not said), the schedule's name
 * and the bubble, the data-parallel line when D > 1, then each stage
 * (ops, share of the cost, parameter bytes, layers) and each cut. */
void pipe_print_split(Graph *g, const StageSplit *sp, int M, int64_t b, const char *schedule, int D,
                      int64_t per_pipeline, int T);

#endif
