/* Reverse-mode autodiff of the graph IR (autodiff.c, docs/training.md):
 * turns a model whose output is its loss into the graph of a training
 * step's gradients, in place. */
#ifndef DLCC_PASSES_AUTODIFF_H
#define DLCC_PASSES_AUTODIFF_H

#include <stdbool.h>

#include "ir/ir.h"

typedef struct AutodiffOptions {
  int loss; /* which output is the loss (0 in a zeroed struct) */
  /* Keep inference-mode ops: batchnorm normalizes with its running
   * statistics and leaves them alone (fine-tuning with frozen
   * statistics).  false, the default, lowers to training mode. */
  bool inference;
  /* Dynamic loss scaling (f16 training, docs/training.md): the backward
   * is seeded with the f32 param AMP_SCALE_PARAM (init fill(65536))
   * instead of 1, so every gradient comes out multiplied by it; the
   * optimizer (passes/optim.c) unscales them and updates the scale. */
  bool loss_scale;
  /* --sync-bn (docs/parallel.md): > 0, the number of ranks of a
   * data-parallel job, whose batches training-mode batchnorm normalizes
   * over as one, as torch.nn.SyncBatchNorm: its batch mean and variance
   * pass through allreduce_mean (so its backward all-reduces their
   * gradients) and the running variance is unbiased over the global
   * count.  0: each rank's own statistics. */
  int sync_bn;
  /* --unroll-rnn: training mode unrolls every lstm and gru over time
   * (the graph of ops with gradient rules that their own rule is
   * checked against).  false: one lstm or gru per layer, whose rule
   * backpropagates through lstm_bptt or gru_bptt. */
  bool unroll_rnn;
  /* The attention pass on the forward first (pass_fuses_attention: what
   * the pipeline runs at -O2, where it comes after autodiff, too late:
   * the written-out chain's softmax is by then kept for the backward),
   * so that matmul-softmax-matmul chains train through attention_lse
   * and attention_grad, with no Sq x Sk matrix kept. */
  bool fuse_attention;
} AutodiffOptions;

#define AMP_SCALE_PARAM "dlcc.amp.scale"
#define AMP_GROWTH_PARAM "dlcc.amp.growth_tracker"
#define AMP_INIT_SCALE "fill(65536)"

/* Rewrites g (verified) into a graph with the same outputs followed by
 * NAME.grad for every trainable param the loss depends on, in graph
 * order, then the state updates of training-mode ops (batchnorm's
 * running statistics, the dlcc.step counter), each marked with
 * ir_set_output_update.  False after reporting errors to g->ctx, located
 * at the op they concern: a loss that is not one float value, a
 * gradient that must flow through an op with no rule, a parameter that
 * reaches the loss only through ops without gradients, a training-mode
 * batchnorm over one value per channel. */
bool pass_autodiff(Graph *g, const AutodiffOptions *o);

/* The forward of a training step (train_mode.c), which pass_autodiff
 * runs first: batchnorm with batch statistics (unless o->inference; over
 * the ranks with o->sync_bn),
 * lstm and gru unrolled over time, and the state updates (running
 * statistics, dlcc.step) appended as outputs marked with
 * ir_set_output_update.  False after reporting errors to g->ctx. */
bool pass_train_mode(Graph *g, const AutodiffOptions *o);

/* Only the batchnorms of g to training mode, normalizing with each
 * batch's statistics, and no state update: the forward plan of a
 * pipeline stage, whose backward plan recomputes the same batchnorms
 * and alone keeps the running statistics; sync_bn as AutodiffOptions'
 * (the backward's must be the same).  False after reporting
 * errors to g->ctx (a batchnorm over one value per channel). */
bool pass_train_batchnorm(Graph *g, int sync_bn);

/* By Node.id (g numbered here): the params a training step trains, the
 * float params with a use that gradients flow through; not the buffers
 * that only feed batchnorm's running statistics. */
bool *pass_trainable_params(Graph *g);
/* dlcc train's --freeze (dlc_options.freeze): every param whose name
 * matches one of list's comma-separated names or shell patterns gets
 * `frozen`, so that nothing trains it; false after reporting a pattern
 * that matches no param of g to g->ctx (a misspelt name would otherwise
 * train what it meant to keep). */
bool pass_freeze_params(Graph *g, const char *list);

/* Eval mode (eval_mode.c): a training-mode export as PyTorch's eval()
 * runs it: dropout the identity, a batchnorm with batch_stats that names
 * its running statistics normalizing by them.  False after reporting a
 * batchnorm with none to use. */
bool pass_eval_mode(Graph *g);

#endif
