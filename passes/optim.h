/* Optimizers (optim.c, docs/training.md): after autodiff, the update of
 * every trainable parameter and of the optimizer's state, appended to the
 * step's graph as update outputs (ir_set_output_update), with PyTorch's
 * exact rules (torch.optim.SGD, Adam, AdamW, RMSprop, Adagrad, Adamax,
 * Adadelta, RAdam, NAdam; clip_grad_norm_). */
#ifndef DLCC_PASSES_OPTIM_H
#define DLCC_PASSES_OPTIM_H

#include <stdbool.h>

#include "ir/ir.h"

typedef enum {
  OPTIM_SGD,
  OPTIM_ADAM,
  OPTIM_ADAMW,
  OPTIM_RMSPROP,
  OPTIM_ADAGRAD,
  OPTIM_ADAMAX,
  OPTIM_ADADELTA,
  OPTIM_RADAM,
  OPTIM_NADAM,
  OPTIM_COUNT
} OptimKind;

typedef struct OptimSpec {
  OptimKind kind;
  /* SGD and RMSprop (momentum); SGD (dampening, nesterov) */
  double momentum, dampening;
  bool nesterov;
  /* Every kind: added to the gradient as L2, but AdamW's decoupled */
  double weight_decay;
  /* Comma-separated names or shell patterns of the params that take no
   * weight decay (PyTorch's second param group of weight_decay 0: biases
   * and norms, say); each must match a trainable param.  NULL: none. */
  const char *no_decay;
  /* Every kind: the gradient's negation is descended (maximize=True) */
  bool maximize;
  /* Adam, AdamW, Adamax, RAdam and NAdam (betas); Adam and AdamW
   * (amsgrad: the largest second moment so far divides); every kind but
   * SGD (eps) */
  double beta1, beta2, eps;
  bool amsgrad;
  /* Adadelta: the averages' smoothing */
  double rho;
  /* NAdam: the momentum's schedule, mu_t = beta1 (1 - 0.96^(t
   * momentum_decay) / 2) */
  double momentum_decay;
  /* RAdam and NAdam: weight decay as AdamW's, off the param, not added
   * to the gradient */
  bool decoupled_weight_decay;
  /* RMSprop: the square average's smoothing; centered: divided by the
   * estimated variance (the gradient's mean taken off) */
  double alpha;
  bool centered;
  /* Adagrad: the rate decays as lr / (1 + (t - 1) lr_decay); the sum of
   * squares starts at initial_accumulator_value */
  double lr_decay, initial_accumulator_value;
  /* The momentum (SGD, RMSprop: momentum > 0 says there is one) or
   * beta1 (the Adams) is the f32 scalar input OPTIM_MOMENTUM_INPUT,
   * set before each step like the rate (OneCycleLR cycles it). */
  bool momentum_input;
  /* > 0: the gradients are first scaled as clip_grad_norm_(max_norm)
   * scales them (the global 2-norm over every parameter). */
  double clip_grad_norm;
  /* > 0: each gradient element first clamped to [-v, v], as
   * clip_grad_value_(v) (after unscaling under loss scaling); not with
   * clip_grad_norm. */
  double clip_grad_value;
  /* Keep the NAME.grad outputs (for tests and --emit); false drops them,
   * so a step's outputs are the loss, the model's outputs and the
   * updates. */
  bool keep_grads;
  /* Each gradient's allreduce_mean, inserted right after the node that
   * completes it, so that its all-reduce starts while the rest of the
   * backward runs (docs/parallel.md). */
  bool data_parallel;
  /* With data_parallel: > 0, gradients share an all-reduce in buckets of
   * about this many bytes (PyTorch DDP's bucket_cap_mb), filled in the
   * order the backward completes them; 0: one all-reduce a gradient. */
  int64_t bucket_bytes;
  /* Dynamic loss scaling as torch.cuda.amp.GradScaler (f16 training):
   * the gradients come from pass_autodiff with AutodiffOptions.loss_scale
   * (multiplied by the param AMP_SCALE_PARAM); the step unscales them
   * (before clipping), skips the update of every param, its state and
   * the step counter when a gradient holds inf or NaN, and updates the
   * scale: halved on such a step, doubled after AMP_GROWTH_INTERVAL clean
   * steps in a row (counted by the param AMP_GROWTH_PARAM). */
  bool loss_scaling;
  /* With loss_scaling: the gradients were scaled before they reached
   * this graph (a pipeline stage's optimizer is fed them), so it has no
   * scale param from autodiff and makes its own (AMP_SCALE_PARAM, the
   * same start), which the caller keeps equal to the one that scaled. */
  bool scaled_elsewhere;
  /* The clip's sum of squares and the overflow check over the whole
   * model from the inputs OPTIM_SUMSQ_INPUT and OPTIM_NONFINITE_INPUT
   * (dlc_optimizer.grad_stats_input) instead of this step's gradients. */
  bool grad_stats_input;
  /* Tensor parallelism: the params of which each rank holds a part (a
   * shard, or its rows of a whole one; their gradients are zero
   * elsewhere), whose terms of the clip's norm and of the overflow
   * check are summed over the tensor group (allreduce_sum); every other
   * param is whole and the same on every rank, its terms counted once. */
  int n_tp_parts;
  const char *const *tp_parts;
} OptimSpec;

#define AMP_GROWTH_INTERVAL 2000

/* PyTorch's defaults for kind (SGD: everything 0; Adam, Adamax, RAdam,
 * NAdam: betas 0.9, 0.999, eps 1e-8, weight decay 0; AdamW: weight
 * decay 0.01; RMSprop: alpha 0.99, eps 1e-8; Adagrad: eps 1e-10;
 * Adadelta: rho 0.9, eps 1e-6; NAdam: momentum_decay 4e-3). */
OptimSpec optim_spec_default(OptimKind kind);
/* torch.optim's default learning rate for kind: 1e-2 for RMSprop and
 * Adagrad, 2e-3 for Adamax and NAdam, 1 for Adadelta, 1e-3 for the
 * others. */
double optim_default_lr(OptimKind kind);
/* "sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax", "adadelta",
 * "radam", "nadam"; false when unknown. */
bool optim_from_name(const char *name, OptimKind *out);
const char *optim_name(OptimKind kind);
/* "sgd, adam, ... or nadam": every kind, for messages (optim_names().s). */
DiagWords optim_names(void);

/* The learning rate is the f32 scalar input OPTIM_LR_INPUT, set by the
 * host before each step (schedules are the host's); the step counter
 * the bias corrections read is the param OPTIM_STEP_PARAM (f32 scalar,
 * 0 before the first step, advanced by the step as an update). */
#define OPTIM_LR_INPUT "dlcc.lr"
#define OPTIM_MOMENTUM_INPUT "dlcc.momentum"
#define OPTIM_SUMSQ_INPUT "dlcc.optim.grad_sumsq"
#define OPTIM_NONFINITE_INPUT "dlcc.optim.nonfinite"
#define OPTIM_STEP_PARAM "dlcc.optim.step"
/* NAdam's product of its momentums so far (f32 scalar, 1 before the
 * first step): PyTorch's state "mu_product", the same for every param
 * as they all step together, so one for the model. */
#define OPTIM_MU_PRODUCT_PARAM "dlcc.optim.mu_product"

/* Rewrites g, the output of pass_autodiff (NAME.grad outputs after the
 * model's), so that one run is a whole training step: each trainable
 * param NAME gets an output updating it, and its state params outputs
 * updating them: "dlcc.optim.NAME.KEY", KEY PyTorch's state key
 * ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq",
 * "square_avg", "grad_avg", "sum", "exp_inf", "acc_delta":
 * ir_optim_states).  Under the "dlcc." prefix they start at 0 when a weights
 * file lacks them (api/weights.c), so a PyTorch state_dict still loads
 * and a checkpoint that has them resumes exactly.  False after reporting
 * errors to g->ctx. */
bool pass_append_optimizer(Graph *g, const OptimSpec *o);

#endif
