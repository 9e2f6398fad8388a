/* dlcc's compiler API: compile a model from a host program and run it.
 *
 *     dlc_model *m;
 *     if (dlc_compile_file("mlp.dl", NULL, &m) != DLC_OK) {
 *       fprintf(stderr, "%s", dlc_error(m));
 *       dlc_free(m);
 *       return 1;
 *     }
 *     dlc_load_weights(m, "mlp.safetensors");   // or dlc_init_weights(m, seed)
 *     dlc_set_input(m, "x", x, sizeof x);
 *     dlc_run(m);
 *     const void *y; size_t n;
 *     dlc_get_output(m, 0, &y, &n);
 *     dlc_free(m);
 *
 * Every call returns a status; on failure the message (file:line:col for
 * errors in the model's text) is kept on the model and dlc_error returns
 * it.  Nothing here prints, exits or aborts.  A model is used by one
 * thread at a time; different models are independent. */
#ifndef DLCC_H
#define DLCC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlc_model dlc_model;

typedef enum {
  DLC_OK = 0,
  DLC_ERR_ARGUMENT, /* a NULL, an index or name that does not exist, a size that does not fit */
  DLC_ERR_COMPILE,  /* the model's text has errors */
  DLC_ERR_WEIGHTS,  /* a weights file is missing, malformed, or does not match the model */
  DLC_ERR_INPUT,    /* an input was not set */
  DLC_ERR_RUN,      /* the computation failed (e.g. an index out of range) */
  DLC_ERR_NOMEM,
  DLC_ERR_INTERNAL,
} dlc_status;

/* Same order as the IR's dtypes.  F64 computes in double; the cuda and
 * emu backends refuse f64 matrix products, convolutions, softmax and
 * the normalizations (ref runs everything).  I16 to U64 are storage
 * and integer arithmetic (ONNX's INT16, UINT16, UINT32, UINT64). */
typedef enum {
  DLC_F32, DLC_F16, DLC_BF16, DLC_I8, DLC_I32, DLC_I64, DLC_BOOL, DLC_U8, DLC_F64, DLC_I16, DLC_U16, DLC_U32,
  DLC_U64
} dlc_dtype;

enum { DLC_MAX_RANK = 8 };

typedef struct dlc_tensor_info {
  const char *name;
  dlc_dtype dtype;
  int rank;
  int64_t dims[DLC_MAX_RANK];
  size_t nbytes;
  /* Integer inputs used as indices (token ids into an embedding): the
   * exclusive upper bound of valid values; 0 when not an index. */
  int64_t index_bound;
  /* Outputs: the axis whose length only a run tells (ONNX's NonZero,
   * Compress, Unique, NonMaxSuppression), dims[] giving its upper bound and dlc_output_shape the
   * last run's; -1 for every other tensor. */
  int run_time_axis;
} dlc_tensor_info;

typedef struct dlc_define {
  const char *name;
  int64_t value;
} dlc_define;

/* The shape of an input the caller will give (dims[0..rank)). */
typedef struct dlc_input_shape {
  const char *name;
  int rank;
  const int64_t *dims;
} dlc_input_shape;

/* A training step's optimizer (docs/training.md): PyTorch's SGD, Adam,
 * AdamW, RMSprop, Adagrad, Adamax, Adadelta, RAdam or NAdam, whose fields mean what torch.optim's
 * arguments of the same names do, taken as given (dlc_optimizer_defaults
 * fills PyTorch's defaults; a field another kind's is refused unless it
 * keeps its default).  The step then has the input "dlcc.lr" (f32, one value:
 * the learning rate, set before each run), updates every trainable
 * parameter and its state (dlcc.optim.NAME.exp_avg, ...), and counts
 * its steps in the parameter "dlcc.optim.step". */
typedef struct dlc_optimizer {
  const char *kind; /* "sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax", "adadelta", "radam", "nadam" */
  double momentum, dampening; /* momentum: SGD's and RMSprop's */
  int nesterov;
  double weight_decay;
  double beta1, beta2, eps;
  double clip_grad_norm;  /* > 0: clip_grad_norm_(max_norm) first */
  double clip_grad_value; /* > 0: clip_grad_value_(clip_value) first (not with clip_grad_norm) */
  int keep_grads;        /* nonzero: the NAME.grad outputs stay */
  /* nonzero: every gradient passes through allreduce_mean (its mean over
   * the ranks of a data-parallel job, docs/parallel.md) before the
   * update and the clipping norm */
  int data_parallel;
  /* > 0: training-mode batchnorm normalizes over the global batch of
   * that many ranks, as torch.nn.SyncBatchNorm (its statistics and their
   * gradients pass through allreduce_mean); 0: each rank's own batch */
  int sync_bn;
  /* With data_parallel, > 0: gradients share an all-reduce in buckets of
   * about that many MiB (PyTorch DDP's bucket_cap_mb), filled in the
   * order the backward completes them; 0: one all-reduce a gradient */
  double bucket_mb;
  /* Nonzero: the step's parameters are some of a model's (a pipeline's
   * stage, docs/parallel.md), so the clip's norm and the loss scaler's
   * overflow check span gradients this step does not see: they come from
   * the f32 scalar inputs "dlcc.optim.grad_sumsq" (the sum of squares of
   * every gradient of the model, as fed: scaled under loss scaling) and
   * "dlcc.optim.nonfinite" (NaN when any gradient of the model holds inf
   * or NaN, else 0), set before each step; each input exists only where
   * clip_grad_norm or loss scaling needs it. */
  int grad_stats_input;
  int maximize; /* every kind */
  int amsgrad;  /* Adam and AdamW */
  double alpha; /* RMSprop, with centered */
  int centered;
  double lr_decay, initial_accumulator_value; /* Adagrad */
  double rho;                 /* Adadelta */
  double momentum_decay;      /* NAdam */
  int decoupled_weight_decay; /* RAdam, NAdam: weight decay as AdamW's */
  /* nonzero: the momentum (SGD, RMSprop, which need one > 0) or beta1
   * (Adam, AdamW, Adamax, RAdam, NAdam) is the f32 input "dlcc.momentum", set before each step
   * (dlc_train_set_momentum), as OneCycleLR cycles it */
  int momentum_input;
  /* comma-separated names or shell patterns ("*.bias,*norm*") of the
   * parameters that take no weight decay, as a second param group of
   * weight_decay 0 in PyTorch; each must match a trained one.  NULL: none */
  const char *no_decay;
} dlc_optimizer;

typedef struct dlc_options {
  const char *model; /* which model of the file; NULL: the last one */
  int n_defines;     /* -D NAME=VALUE */
  const dlc_define *defines;
  /* Where dlc_run computes: "cuda" (the generated kernels on a GPU), "emu"
   * (the same kernels on the CPU), "auto" (cuda when a GPU answers, else
   * emu; the default when NULL), or "ref" (the reference interpreter). */
  const char *backend;
  /* Graph optimization, as dlcc's -O: 1 (cheap cleanups) or 2 (all of
   * it).  0, as in a zeroed struct, is the default, 2; DLC_O0 turns the
   * optimizer off. */
  int opt_level;
  /* Mixed precision, as dlcc's --precision: "f16" or "bf16" stores
   * activations and weights in that type (sensitive ops in f32, f32
   * accumulation); NULL or "f32" keeps everything f32.  Inputs and
   * outputs keep their declared types either way. */
  const char *precision;
  /* Nonzero, as dlcc's --tf32 (PyTorch's allow_tf32): f32 convolutions,
   * attention and matrix products run on tensor cores with their
   * operands rounded to tf32 (10 fraction bits: about 1e-3 of the
   * output's scale, docs/tensorcores.md); zero keeps them exact. */
  int tf32;
  /* Weights bound at compile, as dlc_load_weights would bind them: a
   * safetensors file (or a torch.save .pt) with PyTorch state_dict names.  NULL: none (an .onnx
   * model still brings its own). */
  const char *weights;
  /* int8 quantization, as dlcc's --quantize (docs/quantization.md):
   * "int8" runs each convolution, linear layer and matmul that has a
   * weight operand in int8; NULL or "none" keeps f32.  It needs
   * calibrate_dir, a folder of sample inputs as .npy files (one file per
   * sample for a model with one input; for several, a subfolder per input
   * name with one file per sample in each), and does not combine with
   * precision "f16" or "bf16".
   *
   * The activation scales come from running the model on those samples,
   * with `weights` when given, else the model's own (.onnx), else the
   * values dlc_init_weights(m, calibrate_seed) gives.  They are fixed at
   * compile: weights loaded later get new per-channel weight scales (they
   * are recomputed from whatever weights are loaded) but keep the
   * activation scales, so calibrate with the weights you will run. */
  const char *quantize;
  const char *calibrate_dir;
  /* "minmax", "percentile", "percentile=P" or "entropy"; NULL: the
   * default, percentile=99.99. */
  const char *calib_method;
  int calib_samples;       /* calibrate on the first N samples by name; 0: all */
  uint64_t calibrate_seed; /* see quantize; 0 in a zeroed struct */
  /* Where calibration runs the f32 model on the samples: "ref" (the
   * reference interpreter), "cuda" (the generated kernels on a GPU),
   * "emu" (the same kernels on the CPU emulator) or "auto" (cuda when a
   * GPU answers, else ref; the default when NULL, so without a GPU a
   * zeroed struct calibrates as it always did). */
  const char *calib_backend;
  /* The shapes of the inputs dlc_set_input will get, by name (dlcc run's
   * --input files): each dim the model leaves free (an ONNX input's
   * symbolic, -1, "?" or unset dim) is taken from them, unless a define
   * binds it (by its name, or as "input:axis").  NULL: none. */
  int n_input_shapes;
  const dlc_input_shape *input_shapes;
  /* Nonzero: compile the gradients of a training step (docs/training.md),
   * as dlcc's --grad.  Output 0 of the model must be its loss, one float
   * value.  The model lowers for training (dropout active, batchnorm with
   * batch statistics) and gains, after its own outputs, an output
   * "NAME.grad" per trainable parameter NAME the loss depends on, in
   * state_dict order, then the new values of the state a step changes
   * (batchnorm's running statistics, the dropout step counter
   * "dlcc.step"), each named after its parameter. */
  int grad;
  /* With grad: the whole training step, its optimizer's updates applied
   * to the weights by every dlc_run (read them with dlc_get_weight).
   * NULL: the gradients only. */
  const dlc_optimizer *optimizer;
  /* Nonzero, as dlcc run's --no-graphs: every step launched by itself on
   * each run instead of replaying a captured CUDA graph (the emu's
   * recording likewise); for debugging.  DLCC_NO_GRAPHS=1 does the same. */
  int no_graphs;
  /* With grad, as dlcc's --recompute (activation checkpointing,
   * docs/training.md): "" recomputes the automatic segments in the
   * backward, "SCOPE,..." the forward of those `as` scopes; NULL keeps
   * every activation.  Needs opt_level 2 (the default). */
  const char *recompute;
  /* > 1: Megatron-style tensor parallelism over that many ranks, this
   * process being rank tensor_rank (docs/parallel.md): linear pairs and
   * attention heads split, their sums through the communicator
   * (dlc_set_comm, dlc_train_set_comm).  0 or 1: one process. */
  int tensor_parallel, tensor_rank;
  /* Nonzero: every kernel a launch of its own, as dlcc's
   * --no-merge-launches; else at opt_level 1 and 2 independent kernels
   * may share a launch (docs/kernels.md), which also leaves fewer
   * independent steps for side streams. */
  int no_merge_launches;
  /* Nonzero, as dlcc's --no-split-k: a convolution's tile sums all of
   * K in one block, even where its tiles are fewer than the SMs. */
  int no_split_k;
  /* With grad, as dlcc's --unroll-rnn: an lstm's or gru's gradient
   * through its recurrence unrolled over time instead of the lstm_bptt
   * or gru_bptt op (docs/training.md). */
  int unroll_rnn;
  /* As dlcc's --loop-bound=N: an ONNX Loop whose end is decided at run
   * time and that has no bound in the file (a while loop, or a trip
   * count computed at run time) is unrolled to N steps (at most 1024),
   * and a run that needs more fails with DLRT_E_CHECK.  0: such a loop
   * is refused at compile. */
  int loop_bound;
  /* f16 loss scaling (torch.cuda.amp.GradScaler) for a training step
   * split over plans, as a pipeline's stages (docs/parallel.md):
   * DLC_LOSS_SCALE_SEED (with grad): the loss's gradient is the param
   * dlcc.amp.scale instead of 1, as in a whole f16 step, with no
   * optimizer in this plan to unscale; DLC_LOSS_SCALE_FED (with an
   * optimizer): the gradients the step computes are scaled already, so
   * its seed stays 1 while the optimizer unscales them, skips the step
   * on inf or NaN and updates dlcc.amp.scale.  0: precision "f16" with an
   * optimizer does both, anything else neither. */
  int loss_scale;
  /* Nonzero, as dlcc's --no-chain-launches: a kernel that reads what the
   * launch before it wrote keeps a launch of its own instead of joining
   * it behind a grid barrier (docs/kernels.md, chains). */
  int no_chain_launches;
  /* With grad: the params training leaves alone, as dlcc train's
   * --freeze: comma-separated names or shell patterns ("backbone.*",
   * "pe"), each of which must match a param; NULL: none. */
  const char *freeze;
  /* With grad and no optimizer (a pipeline stage's backward, which a
   * separate plan steps): as dlc_optimizer.sync_bn, training-mode
   * batchnorm's statistics and their gradients averaged over that many
   * ranks through the communicator's means (dlc_set_comm).  A step with
   * an optimizer takes the optimizer's. */
  int sync_bn;
  /* Nonzero, as dlcc run's --eval: a model exported in training mode (an
   * ONNX file from torch.onnx.TrainingMode.TRAINING, what dlcc train
   * takes) runs as PyTorch's eval() would: dropout the identity,
   * batchnorm by its running statistics (docs/training.md).  Not with
   * grad.  dlc_train's eval models set it. */
  int eval_mode;
  /* With tensor_parallel and no grad: the forward of a training step
   * compiled apart (a pipeline stage's), split as that step is.  Else a
   * model without grad is inference and may split a layer whose
   * parameter something else reads too (docs/parallel.md). */
  int tensor_parallel_step;
} dlc_options;

enum { DLC_O0 = -1 };
enum { DLC_LOSS_SCALE_SEED = 1, DLC_LOSS_SCALE_FED = 2 };

/* Compiles a .dl source, .ir text or .onnx model file (by its suffix).  *out is set
 * even on failure (so dlc_error can tell why), except when memory ran out
 * before a model existed: then *out is NULL and dlc_error(NULL) says so. */
dlc_status dlc_compile_file(const char *path, const dlc_options *opt, dlc_model **out);
/* The same for text in memory; name is used in messages. */
dlc_status dlc_compile_string(const char *name, const char *text, const dlc_options *opt,
                              dlc_model **out);
void dlc_free(dlc_model *m);
const char *dlc_error(const dlc_model *m);
/* The backend a compiled model runs on ("cuda", "emu" or "ref"): what
 * "auto" chose.  "" when it did not compile. */
const char *dlc_backend(const dlc_model *m);
/* How the runtime runs the model (dlrt_engine_report): CUDA graphs and
 * why not, the staging of inputs and outputs. */
const char *dlc_engine_report(dlc_model *m);

/* Where a run's time goes (dlrt_profile): after a dlc_run, one more run
 * with every step launched by itself and timed; steps[i] gets step i's
 * label (as --emit=plan prints it, owned by the model), microseconds
 * (GPU time on cuda) and the cost report's FLOPs and minimum bytes
 * (docs/cost.md).  n must be dlc_num_steps; the reference interpreter
 * has no steps (0). */
typedef struct dlc_step_time {
  const char *label;
  double us, flops, bytes;
} dlc_step_time;
int dlc_num_steps(const dlc_model *m);
dlc_status dlc_profile(dlc_model *m, dlc_step_time *steps, int n);

/* With tensor_parallel: the parts of parameters the ranks share out.
 * Along axis, rank r of T owns [start + r * len / T, start + (r + 1) *
 * len / T).  The optimizer's state of a split parameter is split the
 * same way.  sharded: the parameter's splits tile its axis, and this
 * rank's model holds only its parts (the weight is 1/T of the whole
 * along axis, the parts one after another in the order of start); a
 * file or a seed still gives the whole tensor, which each rank cuts.
 * Otherwise every rank holds the whole tensor and reads and updates
 * only its own part of it. */
typedef struct dlc_tensor_split {
  const char *param;
  int axis;
  int64_t start, len;
  int sharded;
} dlc_tensor_split;
int dlc_num_tensor_splits(const dlc_model *m);
dlc_status dlc_tensor_split_info(const dlc_model *m, int index, dlc_tensor_split *out);
/* A sharded weight's parts: copies between whole (the whole tensor,
 * whole_dims, dims of them) and part (rank's part, the size the model
 * holds): to_whole writes the elements rank owns into whole, else part
 * from whole.  DLC_ERR_ARGUMENT when name is not a sharded weight. */
dlc_status dlc_weight_part(const dlc_model *m, const char *name, int rank, int dims, const int64_t *whole_dims,
                           void *whole, void *part, int to_whole);
/* The device memory a compiled model's plan holds: its weights (a
 * training step's optimizer state with them, each weight aligned) and
 * its activation arena.  DLC_ERR_ARGUMENT on the ref backend (no plan). */
dlc_status dlc_plan_memory(const dlc_model *m, uint64_t *weights_bytes, uint64_t *arena_bytes);
/* With tensor_parallel: what was split and what was not and why, a line
 * each ("split: ...", "not split: NAME: why"). */
int dlc_num_tensor_notes(const dlc_model *m);
const char *dlc_tensor_note(const dlc_model *m, int index);

int dlc_num_inputs(const dlc_model *m);
int dlc_num_outputs(const dlc_model *m);
dlc_status dlc_input_info(const dlc_model *m, int index, dlc_tensor_info *out);
dlc_status dlc_output_info(const dlc_model *m, int index, dlc_tensor_info *out);
/* The output's shape in the last run (dlc_output_info's, with the
 * run-time length on its run_time_axis); DLC_ERR_ARGUMENT before a run. */
dlc_status dlc_output_shape(dlc_model *m, int index, dlc_tensor_info *out);
/* -1 when there is no such input. */
int dlc_input_index(const dlc_model *m, const char *name);

/* Parameters: from a safetensors file with PyTorch state_dict names (or
 * a torch.save file of a state_dict, read without running its pickle:
 * docs/security.md), or
 * reproducibly random (sane scales; the same seed gives the same values).
 * A file that does not fit gives DLC_ERR_WEIGHTS, each problem at the
 * source location that declared its parameter (dlc_error). */
dlc_status dlc_load_weights(dlc_model *m, const char *safetensors_path);
dlc_status dlc_init_weights(dlc_model *m, uint64_t seed);
/* 1 when the parameters are bound: loaded, initialized, or brought by the
 * model itself (an .onnx file's initializers are bound at compile). */
int dlc_weights_bound(const dlc_model *m);
/* One bound weight by its name, nbytes exactly its size: read (after a
 * training step, its updated value) or written.  DLC_ERR_ARGUMENT for a
 * name the model does not have. */
dlc_status dlc_get_weight(dlc_model *m, const char *name, void *data, size_t nbytes);
dlc_status dlc_set_weight(dlc_model *m, const char *name, const void *data, size_t nbytes);
/* PyTorch's defaults for kind ("sgd", "adam", "adamw", "rmsprop",
 * "adagrad"); DLC_ERR_ARGUMENT
 * for another. */
dlc_status dlc_optimizer_defaults(const char *kind, dlc_optimizer *out);

/* Copies nbytes (exactly the input's size) of C-order data. */
dlc_status dlc_set_input(dlc_model *m, const char *name, const void *data, size_t nbytes);
dlc_status dlc_run(dlc_model *m);
/* The output's data stays valid until the next dlc_run or dlc_free; an
 * output of run-time length holds that run's rows (dlc_output_shape). */
dlc_status dlc_get_output(dlc_model *m, int index, const void **data, size_t *nbytes);

/* A stream of batches with the copies overlapped (dlrt_run_batches in
 * dlcrt.h, docs/runtime.md): feed fills inputs[i] (dlc_input_info's
 * order, each its nbytes) of batch `batch` and returns 0, 1 when there is
 * no such batch, -1 to stop; drain takes its outputs (dlc_output_info's
 * order; valid during the call) and returns 0, or -1 to stop.  The cuda
 * and emu backends only.  Does not touch dlc_set_input's inputs or
 * dlc_get_output's outputs. */
typedef int (*dlc_feed_fn)(void *user, long batch, void *const *inputs);
typedef int (*dlc_drain_fn)(void *user, long batch, const void *const *outputs);
dlc_status dlc_run_batches(dlc_model *m, dlc_feed_fn feed, dlc_drain_fn drain, void *user, long *n_batches);

/* ---- Training (docs/training.md) ----
 *
 *     dlc_train_options o;
 *     dlc_train_options_init(&o, "adamw");
 *     o.loss = "cross_entropy";
 *     dlc_train *t;
 *     if (dlc_train_compile("lenet.dl", &o, &t) != DLC_OK) ... dlc_train_error(t)
 *     dlc_init_weights(dlc_train_model(t), 0);     // or dlc_load_weights(...)
 *     for each batch:
 *       dlc_set_input(dlc_train_model(t), "x", x, nbytes);
 *       dlc_set_input(dlc_train_model(t), "target", y, nbytes);
 *       dlc_train_step(t, lr, &loss);
 *     dlc_train_save(t, "out.safetensors", 0, 0, NULL, NULL);
 *
 * A dlc_train is one compiled training step: the model, its loss against
 * a new input "target", the gradients and the optimizer's update of
 * every trainable parameter and of the optimizer's state (the params
 * "dlcc.optim.NAME.exp_avg", ...).  dlc_train_model gives the step as a
 * dlc_model: its inputs (the model's, "target" and the learning rate
 * "dlcc.lr", which dlc_train_step sets), its outputs (output 0 the loss,
 * then the model's own outputs, then the updates), dlc_set_input,
 * dlc_load_weights and dlc_init_weights work on it as on any model.  The
 * batch is fixed at compile (options.model's defines or input_shapes):
 * a last partial batch needs a second dlc_train of that size, which
 * dlc_train_copy_state keeps in step. */
typedef struct dlc_train dlc_train;

typedef struct dlc_train_options {
  /* How the model compiles: backend, defines, input_shapes, opt_level,
   * precision.  grad, optimizer, quantize and weights must stay unset
   * (load weights with dlc_load_weights on dlc_train_model). */
  dlc_options model;
  /* "cross_entropy", "nll", "mse", "l1", "smooth_l1", "huber",
   * "bce_with_logits", "bce" (binary_cross_entropy), "kl_div" (PyTorch's)
   * of the model's output loss_output
   * against the input "target"; NULL: the model's output 0 is already its
   * loss. */
  const char *loss;
  int loss_output;
  int64_t ignore_index;    /* cross_entropy, nll; PyTorch's -100 from dlc_train_options_init */
  double label_smoothing;  /* cross_entropy */
  double beta;             /* smooth_l1; 1 from dlc_train_options_init */
  double delta;            /* huber; 1 from dlc_train_options_init */
  int reduction_sum;       /* nonzero: the loss sums over the batch (reduction="sum"); 0: the mean */
  int reduction_batchmean; /* kl_div: nonzero: the sum over the batch size (reduction="batchmean") */
  int log_target;          /* kl_div: nonzero: the target holds log-probabilities */
  /* cross_entropy and nll: a weight per class (PyTorch's weight=),
   * class_weight_count of them, one per class; bce_with_logits: the
   * positives' weight (pos_weight=), pos_weight_count of them, broadcast
   * against the prediction's last axis.  NULL: none.  Copied. */
  const float *class_weight;
  int64_t class_weight_count;
  const float *pos_weight;
  int64_t pos_weight_count;
  /* target_rank > 0: the input "target" is target_dtype[target_dims]
   * (batch first): i32 class indices, or for cross_entropy f32
   * probabilities shaped like the prediction.  0: the loss's default
   * (i64 class indices for cross_entropy and nll, the prediction's type
   * for the others). */
  int target_rank;
  int64_t target_dims[DLC_MAX_RANK];
  dlc_dtype target_dtype;
  /* The optimizer (dlc_optimizer above; dlc_train_options_init fills
   * PyTorch's defaults for a kind). */
  dlc_optimizer optimizer;
  /* Nonzero: no gradients and no optimizer, the model in inference mode
   * (batchnorm's running statistics, dropout the identity) and the loss
   * with reduction "none" (one value per sample, or per element of a
   * per-element target), for validation: dlc_run on dlc_train_model, the
   * parameters from a training step by dlc_train_copy_state. */
  int eval;
} dlc_train_options;

/* Zeroes o and sets PyTorch's defaults: the optimizer's for its kind
 * (dlc_optimizer_defaults), ignore_index -100 and beta 1.
 * DLC_ERR_ARGUMENT for an unknown optimizer. */
dlc_status dlc_train_options_init(dlc_train_options *o, const char *optimizer);
/* *out is set even on failure, for dlc_train_error (NULL only when memory
 * ran out first). */
dlc_status dlc_train_compile(const char *path, const dlc_train_options *o, dlc_train **out);
/* The same for a model's text in memory, as dlc_compile_string (IR text
 * when name ends in .ir; pipeline stages compile their graphs so). */
dlc_status dlc_train_compile_string(const char *name, const char *text, const dlc_train_options *o,
                                    dlc_train **out);
void dlc_train_free(dlc_train *t);
const char *dlc_train_error(const dlc_train *t);
dlc_model *dlc_train_model(dlc_train *t);
/* One step at learning rate lr on the inputs set: the parameters and the
 * optimizer's state take their new values; *loss (may be NULL) gets the
 * loss, computed before the update. */
dlc_status dlc_train_step(dlc_train *t, float lr, float *loss);
/* With optimizer.momentum_input: the momentum (or Adam's beta1) of the
 * steps from now on. */
dlc_status dlc_train_set_momentum(dlc_train *t, float momentum);

/* The communicator (the same function as dlcrt.h's DlrtCommFn) that a step compiled with optimizer.data_parallel
 * hands each gradient to, and a step compiled with tensor_parallel its regions' sums (dlcrt.h's dlrt_set_comm;
 * docs/parallel.md).  On the ref backend fn gets device "ref": buf is host memory, each all-reduce followed at once
 * by its DLRT_COMM_WAIT. */
typedef int (*dlc_comm_fn)(void *ctx, const char *device, uint64_t buf, uint64_t count, int bucket, int op,
                           char *err, size_t errlen);
dlc_status dlc_train_set_comm(dlc_train *t, dlc_comm_fn fn, void *ctx);
/* The same for a model: an inference model compiled with tensor_parallel
 * (`dlcc run --tensor-parallel`) sums its regions through it. */
dlc_status dlc_set_comm(dlc_model *m, dlc_comm_fn fn, void *ctx);
/* The step's parameters and state (dlcc.* names too), in the order of
 * the model's state_dict; valid once the weights are bound.  A value is
 * read with dlc_get_weight (the step's updates are applied on the
 * device, so it copies from there) and written with dlc_set_weight. */
int dlc_train_num_params(const dlc_train *t);
dlc_status dlc_train_param_info(const dlc_train *t, int index, dlc_tensor_info *out);
/* Every parameter of dst from src's of the same name and type (all
 * must be there): a remainder batch's step, or an eval model. */
dlc_status dlc_train_copy_state(dlc_train *dst, const dlc_train *src);
/* Writes a safetensors file.  with_state 0: the parameters and buffers
 * under their state_dict names only, so PyTorch's
 * model.load_state_dict(load_file(path)) takes it strictly; nonzero: also
 * the dlcc.* state (optimizer, step counters), with the metadata
 * meta_keys[i] = meta_values[i] and "dlcc.checkpoint" = "1": a checkpoint
 * that dlc_load_weights on dlc_train_model resumes from exactly. */
dlc_status dlc_train_save(dlc_train *t, const char *path, int with_state, int n_meta,
                          const char *const *meta_keys, const char *const *meta_values);
/* A checkpoint's metadata value for key (malloc'd into *value, free it),
 * or DLC_ERR_WEIGHTS naming the file when it is not a checkpoint or
 * lacks key. */
dlc_status dlc_train_checkpoint_meta(dlc_train *t, const char *path, const char *key, char **value);

const char *dlc_dtype_name(dlc_dtype t);
size_t dlc_dtype_size(dlc_dtype t);

#ifdef __cplusplus
}
#endif

#endif
