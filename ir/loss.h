/* Losses (loss.c, docs/training.md): PyTorch's loss functions built from
 * existing IR ops, so autodiff differentiates them by the rules of their
 * parts and every pass applies.  The language's cross_entropy(...) and
 * friends and `dlcc train --loss=NAME` (passes/loss.h) both come here. */
#ifndef DLCC_IR_LOSS_H
#define DLCC_IR_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

typedef enum {
  LOSS_CROSS_ENTROPY, /* logits [N, C, d...]; target i64 class indices [N, d...] or f32 probabilities like logits */
  LOSS_NLL,           /* log-probabilities [N, C, d...]; target i64 class indices [N, d...] */
  LOSS_MSE,
  LOSS_L1,
  LOSS_SMOOTH_L1,     /* beta */
  LOSS_BCE_WITH_LOGITS,
  LOSS_HUBER,         /* delta */
  LOSS_BCE,           /* probabilities in [0, 1] against targets in [0, 1]; each log clamped at -100, as PyTorch's */
  LOSS_KL_DIV,        /* log-probabilities against probabilities (log-probabilities with log_target) */
  LOSS_COUNT
} LossKind;

/* LOSS_BATCHMEAN (kl_div's "batchmean"): the sum over the batch, axis
 * 0's size (the sum itself for a value of rank 0). */
typedef enum { LOSS_MEAN, LOSS_SUM, LOSS_NONE, LOSS_BATCHMEAN } LossReduction;

typedef struct LossSpec {
  LossKind kind;
  LossReduction reduction; /* LOSS_MEAN in a zeroed struct, PyTorch's default */
  /* cross_entropy and nll with class indices: targets equal to it add
   * nothing and do not count in the mean. */
  int64_t ignore_index;    /* PyTorch's default is -100: set it (loss_spec_default) */
  double label_smoothing;  /* cross_entropy, in [0, 1] */
  double beta;             /* smooth_l1; PyTorch's default 1.0 (loss_spec_default) */
  double delta;            /* huber; PyTorch's default 1.0 (loss_spec_default) */
  bool log_target;         /* kl_div: the target holds log-probabilities */
  /* cross_entropy and nll: a weight per class, [C] of the prediction's
   * dtype (PyTorch's weight=); NULL: none.  A position's loss is scaled
   * by its class's weight and the mean divides by the weights' sum over
   * the positions that count (probabilities: by their count). */
  Value *weight;
  /* bce_with_logits: the positives' weight (PyTorch's pos_weight=),
   * broadcast against the input, of its dtype; NULL: none. */
  Value *pos_weight;
  /* pass_append_loss (passes/loss.h): > 0, weight (pos_weight) is a new
   * input of that many elements, LOSS_WEIGHT_INPUT (LOSS_POS_WEIGHT_INPUT),
   * set by whoever runs the step. */
  int64_t weight_input, pos_weight_input;
} LossSpec;

#define LOSS_WEIGHT_INPUT "dlcc.loss.weight"
#define LOSS_POS_WEIGHT_INPUT "dlcc.loss.pos_weight"

/* PyTorch's defaults for kind: mean, ignore_index -100, beta and delta
 * 1, no weights. */
LossSpec loss_spec_default(LossKind kind);
/* "cross_entropy", "nll" (or "nll_loss"), "mse", "l1", "smooth_l1",
 * "bce_with_logits", "huber", "bce", "kl_div", or PyTorch's functional
 * name ("mse_loss", "binary_cross_entropy_with_logits", ...); false when
 * unknown. */
bool loss_from_name(const char *name, LossKind *out);
const char *loss_name(LossKind kind);
/* "cross_entropy, nll, ... or kl_div": every short name, for messages
 * (loss_names().s). */
DiagWords loss_names(void);

/* Appends the nodes of the loss of pred against target to g and returns
 * its value (one element of rank 0 unless LOSS_NONE, in pred's float
 * dtype), or NULL after reporting a
 * located error (at loc) to g->ctx: shapes or dtypes that do not fit the
 * loss, an option out of range.  Class indices out of range are found
 * when it runs, with the message of the gather that reads them. */
Value *loss_build(Graph *g, const LossSpec *s, Value *pred, Value *target, SrcLoc loc);
/* Class indices may be i64 or i32.  A negative one other than
 * ignore_index is reported as out of range too, as t - C (a gather
 * would read it from the end). */

/* The target a loss of kind expects for pred when nothing else says:
 * i64 class indices [N, d...] for cross_entropy and nll, pred's type for
 * the others. */
TensorType loss_default_target(LossKind kind, const TensorType *pred);

#endif
