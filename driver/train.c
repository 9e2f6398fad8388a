/* `dlcc train MODEL --data DIR ...`: a thin client of the training API
 * (dlc_train_* in include/dlcc.h).  Reads the data folders (train_data.c),
 * compiles the step for --batch (and a second step for a last partial
 * batch, kept in step by dlc_train_copy_state), runs the epochs with the
 * learning rate of the schedule (train_sched.c), validates per epoch with
 * an eval model, and writes the state_dict and a checkpoint beside it
 * that --resume continues from exactly. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver/comm.h"
#ifdef HAVE_NCCL
#include "driver/comm_nccl.h"
#endif
#include "driver/dist.h"
#include "driver/driver.h"
#include "driver/pipeline.h"
#include "driver/run.h"
#include "driver/train.h"
#include "driver/train_tp.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "passes/optim.h"

typedef struct TrainArgs {
  const char *model_path, *data, *val, *weights, *save, *log, *resume, *schedule_text;
  const char *optimizer, *pipe_schedule, *no_decay;
  DriverLoss loss; /* --loss and its flags (loss_flags.c) */
  LossSpec loss_spec;
  double lr, momentum, dampening, weight_decay, beta1, beta2, eps, clip, clip_value;
  double alpha, lr_decay, initial_accumulator, rho, momentum_decay;
  bool set_lr, set_momentum, set_dampening, set_weight_decay, set_betas, set_eps, set_alpha, set_rho;
  bool set_momentum_decay, decoupled;
  bool nesterov, amsgrad, centered, maximize, shuffle, drop_last, sync_bn, deferred_bn;
  double dist_timeout, bucket_mb, stream_mb;
  int64_t batch, epochs, pipeline, micro_batches, tensor_parallel;
  int64_t save_every; /* --save-every=N: the --save files after every N epochs too */
  int profile; /* --profile[=N]: after training, one more step timed kernel by kernel */
  uint64_t seed;
  bool init_random; /* --init=random: an ONNX model's own weights replaced by --seed's */
  dlc_options api;
  dlc_define defines[DRIVER_MAX_DEFINES];
} TrainArgs;

static const char train_usage[] =
    "usage: dlcc train MODEL --data DIR --batch=N [options]\n"
    "\n"
    "Trains MODEL's parameters on DIR: one .npy per model input, named after it,\n"
    "samples stacked on axis 0, and target.npy for the loss (docs/training.md).\n"
    "\n"
    "  --data DIR            the training set\n"
    "  --val DIR             a validation set, laid out the same: loss (and accuracy for\n"
    "                        cross_entropy and nll) after each epoch\n"
    "  --batch=N             the batch (binds the model's free batch dim)\n"
    "  --micro-batches=M     gradient accumulation: each batch computed as M micro-batches\n"
    "                        (the activations of batch/M), the optimizer stepping once\n"
    "  --epochs=N            epochs to run (default 1; after --resume, more epochs)\n"
    "  --stream-mb=M         a data array larger than M MiB (default 1024; 0: every one)\n"
    "                        stays on disk, each batch reading its samples, so data larger\n"
    "                        than memory trains and a node's ranks share the page cache\n"
    "  --loss=L and its flags (below): the loss of a model output against target.npy;\n"
    "                        without it the model's output 0 is its loss\n"
    "  --optimizer=O         sgd (default), adam, adamw, rmsprop, adagrad, adamax,\n"
    "                        adadelta, radam, nadam: torch.optim's update rules\n"
    "  --lr=X                the base learning rate (default torch.optim's: 1e-3; 1e-2\n"
    "                        for rmsprop and adagrad, 2e-3 adamax and nadam, 1 adadelta)\n"
    "  --weight-decay=X --maximize --eps=X   any optimizer's options (default: torch.optim's)\n"
    "  --no-decay=P,...      parameters without weight decay (a second param group): names or\n"
    "                        shell patterns (\"*.bias,*norm*\"), each matching a trained one\n"
    "  --momentum=X          sgd's and rmsprop's; --dampening=X --nesterov sgd's\n"
    "  --betas=B1,B2         adam's, adamw's, adamax's, radam's and nadam's\n"
    "  --amsgrad             adam's and adamw's\n"
    "  --alpha=X --centered                  rmsprop's\n"
    "  --lr-decay=X --initial-accumulator-value=X   adagrad's\n"
    "  --rho=X               adadelta's; --momentum-decay=X nadam's\n"
    "  --decoupled-weight-decay   radam's and nadam's: weight decay as adamw's\n"
    "  --clip-grad-norm=X    clip_grad_norm_ to X before each update\n"
    "  --clip-grad-value=X   clip_grad_value_: each gradient element into [-X, X] first\n"
    "  --schedule=S          step:N:GAMMA, multistep:M1/M2/...:GAMMA, exp:GAMMA,\n"
    "                        cosine[:T_MAX[:ETA_MIN]], cosine_restarts:T0[:TMULT[:ETA_MIN]],\n"
    "                        poly[:T[:POWER]], linear:START:END[:T], plateau[:PATIENCE[:FACTOR\n"
    "                        [:MIN_LR]]] (by --val's loss after each epoch),\n"
    "                        onecycle[:PCT_START[:DIV[:FINAL_DIV]]] (--lr the peak; the\n"
    "                        momentum or beta1 cycles too, as OneCycleLR's),\n"
    "                        cyclic:BASE_LR:UP[/DOWN][:MODE[:GAMMA]] (CyclicLR from BASE_LR\n"
    "                        up to --lr over UP steps, down over DOWN; MODE triangular,\n"
    "                        triangular2 or exp_range; the momentum or beta1 cycles too),\n"
    "                        warmup:N[:START]; a warmup and one other joined by ','\n"
    "                        multiply, by '+' run one after the other (warmup:N:0+cosine is\n"
    "                        Hugging Face's cosine with warmup); counted in optimizer steps,\n"
    "                        T_MAX and T the run's unless given\n"
    "  --shuffle=false       keep the data's order (default: shuffled per epoch by --seed)\n"
    "  --seed=S              the shuffle's seed and the random initial weights' (default 0)\n"
    "  --drop-last           skip a last partial batch (default: train on it too)\n"
    "  --weights=FILE        initial parameters (a PyTorch state_dict); default: an ONNX\n"
    "                        model's own, else random from --seed\n"
    "  --init=random         an ONNX model's own weights replaced by random ones too\n"
    "  --freeze=P,...        parameters training leaves alone: names or shell patterns\n"
    "                        (\"backbone.*\", a buffer such as \"pe\"); each must match one\n"
    "  --save=OUT            write the trained state_dict to OUT and a checkpoint to\n"
    "                        OUT.ckpt.safetensors (OUT's .safetensors replaced)\n"
    "  --save-every=N        write them after every N epochs too (each write replaces the\n"
    "                        last whole or not at all), so a job cut short resumes\n"
    "  --resume=CKPT         continue from a checkpoint exactly\n"
    "  --log=FILE.jsonl      one JSON object per step (epoch, step, loss, lr)\n"
    "  --backend=B --precision=P -O0/-O1/-O2 -D NAME=VALUE --model=NAME   as for dlcc run\n"
    "  --recompute[=SCOPE,...]  activation checkpointing, as for dlcc (docs/training.md)\n"
    "  --unroll-rnn --no-split-k --no-merge-launches --no-chain-launches --loop-bound=N\n"
    "                        as for dlcc\n"
    "  --tf32                f32 convolutions, attention, matrix products and their\n"
    "                        gradients on tensor cores, operands rounded to tf32, as for dlcc\n"
    "  --profile[=N]         after training (and --save), one more step timed kernel by\n"
    "                        kernel, the N slowest (default 20) printed as dlcc run's\n"
    "\n"
    "Under mpirun or srun each rank trains on its share of every global --batch and the\n"
    "gradients are averaged across ranks (docs/parallel.md):\n"
    "  --dist-timeout=S      seconds a rank waits for the others in a collective (default 120)\n"
    "  --sync-bn             batchnorm statistics over the global batch, not each rank's\n"
    "                        (with --pipeline: each micro-batch's over the pipelines)\n"
    "  --bucket-mb=M         gradients share all-reduces in buckets of about M MiB, as\n"
    "                        PyTorch DDP's bucket_cap_mb (25 there); 0, the default: one each\n"
    "Or, with --pipeline=S under S ranks, the model is cut into S stages, one a rank:\n"
    "  --pipeline=S          pipeline parallel over S stages; mpirun -np D*S adds data\n"
    "                        parallel over D pipelines of S consecutive ranks\n"
    "  --micro-batches=M     micro-batches per --batch (default 1), through the stages\n"
    "  --schedule=gpipe|1f1b the micro-batches' order (default gpipe); also --pipe-schedule=\n"
    "  --deferred-bn         batchnorm's running statistics updated once a batch, from\n"
    "                        all its micro-batches (torchgpipe's deferred_batch_norm)\n"
    "  --tensor-parallel=T   split linear pairs and attention heads over T ranks, each holding\n"
    "                        its parts of the weights (Megatron-style); mpirun -np D*T adds data\n"
    "                        parallel over D groups of T consecutive ranks; with --pipeline=S,\n"
    "                        each stage on T consecutive ranks (mpirun -np D*S*T)\n";

static bool real_arg(const char *flag, const char *v, double *out) {
  char *end;
  errno = 0;
  *out = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(*out) || *out < 0) {
    fprintf(stderr, "dlcc: error: %s expects a number >= 0, got '%s'\n", flag, v);
    return false;
  }
  return true;
}

static bool int_arg(const char *flag, const char *v, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo) {
    fprintf(stderr, "dlcc: error: %s expects a whole number >= %" PRId64 ", got '%s'\n", flag, lo, v);
    return false;
  }
  *out = x;
  return true;
}

static bool bool_arg(const char *flag, const char *v, bool *out) {
  if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) return *out = true;
  if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) return !(*out = false);
  fprintf(stderr, "dlcc: error: %s expects true or false, got '%s'\n", flag, v);
  return false;
}

/* A string flag's destination, by name. */
static const char **string_flag(TrainArgs *o, const char *flag) {
  static const char *const names[] = {"--data", "--val",  "--weights", "--save",     "--log",  "--resume",
                                      "--optimizer", "--schedule", "--backend", "--precision", "--model",
                                      "--pipe-schedule"};
  const char **dst[] = {&o->data,      &o->val,           &o->weights,       &o->save,
                        &o->log,       &o->resume,        &o->optimizer,     &o->schedule_text,
                        &o->api.backend, &o->api.precision, &o->api.model, &o->pipe_schedule};
  for (size_t k = 0; k < ARRAY_LEN(names); k++)
    if (strcmp(flag, names[k]) == 0) return dst[k];
  return NULL;
}

/* A number flag's destination, and the flag it was given, by name. */
static double *real_flag(TrainArgs *o, const char *flag, bool **given) {
  static const char *const names[] = {"--lr",        "--momentum",   "--dampening", "--weight-decay",
                                      "--eps",       "--clip-grad-norm", "--dist-timeout", "--bucket-mb",
                                      "--stream-mb", "--alpha",      "--lr-decay",  "--initial-accumulator-value",
                                      "--clip-grad-value", "--rho",       "--momentum-decay"};
  double *dst[] = {&o->lr,        &o->momentum, &o->dampening,    &o->weight_decay,
                   &o->eps,       &o->clip,     &o->dist_timeout, &o->bucket_mb,
                   &o->stream_mb, &o->alpha,    &o->lr_decay,     &o->initial_accumulator,
                   &o->clip_value, &o->rho,     &o->momentum_decay};
  bool *set[] = {&o->set_lr, &o->set_momentum, &o->set_dampening, &o->set_weight_decay, &o->set_eps, NULL,
                 NULL,       NULL,             NULL,              &o->set_alpha,        NULL,         NULL,
                 NULL,       &o->set_rho,      &o->set_momentum_decay};
  for (size_t k = 0; k < ARRAY_LEN(names); k++)
    if (strcmp(flag, names[k]) == 0) {
      *given = set[k];
      return dst[k];
    }
  return NULL;
}

/* --shuffle[=B], --drop-last[=B], --nesterov[=B], ...: the destination, and
 * in *v the value ("true" when none is given); NULL for other flags. */
static bool *bool_flag(TrainArgs *o, const char *a, const char **v) {
  static const char *const names[] = {"--shuffle",   "--drop-last", "--nesterov", "--sync-bn",
                                      "--deferred-bn", "--amsgrad",  "--centered", "--maximize",
                                      "--decoupled-weight-decay"};
  bool *dst[] = {&o->shuffle,     &o->drop_last, &o->nesterov, &o->sync_bn,
                 &o->deferred_bn, &o->amsgrad,   &o->centered, &o->maximize,
                 &o->decoupled};
  for (size_t k = 0; k < ARRAY_LEN(names); k++) {
    size_t n = strlen(names[k]);
    if (strncmp(a, names[k], n) == 0 && (a[n] == '=' || !a[n])) {
      *v = a[n] ? a + n + 1 : "true";
      return dst[k];
    }
  }
  return NULL;
}

static int parse_one(int argc, char **argv, int *i, TrainArgs *o) {
  const char *a = argv[*i], *v;
  int loss_flag = driver_loss_option(a, &o->loss);
  if (loss_flag) return loss_flag < 0;
  char flag[64];
  snprintf(flag, sizeof flag, "%.*s", (int)strcspn(a, "="), a);
  const char **s = string_flag(o, flag);
  bool *given = NULL, *b;
  double *r = real_flag(o, flag, &given);
  if ((s || r) && !(v = driver_flag_value(argc, argv, i, flag))) {
    fprintf(stderr, "dlcc: error: %s needs a value\n", flag);
    return 1;
  }
  if (s) {
    *s = v;
  } else if (r) {
    if (!real_arg(flag, v, r)) return 1;
    if (given) *given = true;
  } else if (strcmp(a, "--profile") == 0) {
    o->profile = 20;
  } else if ((v = driver_flag_value(argc, argv, i, "--profile"))) {
    int64_t top;
    if (!int_arg("--profile", v, 1, &top)) return 1;
    o->profile = top > 1000000 ? 1000000 : (int)top;
  } else if ((v = driver_flag_value(argc, argv, i, "--batch"))) {
    if (!int_arg("--batch", v, 1, &o->batch)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--pipeline"))) {
    if (!int_arg("--pipeline", v, 1, &o->pipeline)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--micro-batches"))) {
    if (!int_arg("--micro-batches", v, 1, &o->micro_batches)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--tensor-parallel"))) {
    if (!int_arg("--tensor-parallel", v, 1, &o->tensor_parallel)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--epochs"))) {
    if (!int_arg("--epochs", v, 0, &o->epochs)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--save-every"))) {
    if (!int_arg("--save-every", v, 1, &o->save_every)) return 1;
  } else if ((v = driver_flag_value(argc, argv, i, "--seed"))) {
    int64_t seed;
    if (!int_arg("--seed", v, 0, &seed)) return 1;
    o->seed = (uint64_t)seed;
  } else if ((v = driver_flag_value(argc, argv, i, "--freeze"))) {
    o->api.freeze = v;
  } else if ((v = driver_flag_value(argc, argv, i, "--no-decay"))) {
    o->no_decay = v;
  } else if ((v = driver_flag_value(argc, argv, i, "--init"))) {
    if (strcmp(v, "random") != 0) {
      fprintf(stderr, "dlcc: error: unknown --init '%s' (expected random)\n", v);
      return 1;
    }
    o->init_random = true;
  } else if ((v = driver_flag_value(argc, argv, i, "--betas"))) {
    char *end;
    o->beta1 = strtod(v, &end);
    if (*end != ',' || !real_arg("--betas", end + 1, &o->beta2) || o->beta1 < 0 || o->beta1 >= 1 || o->beta2 >= 1) {
      fprintf(stderr, "dlcc: error: --betas expects B1,B2 in [0, 1), got '%s'\n", v);
      return 1;
    }
    o->set_betas = true;
  } else if ((b = bool_flag(o, a, &v))) {
    if (!bool_arg(flag, v, b)) return 1;
  } else {
    DriverModelWords words = {&o->model_path, &o->api, o->defines};
    return driver_model_word(argc, argv, i, "train", &words);
  }
  return 0;
}

/* The pipeline's flags against the rest; false after printing why. */
static bool pipe_args_check(TrainArgs *o) {
  const char *bad = NULL;
  /* Micro-batches without stages are gradient accumulation: a pipeline
   * of one stage, whose step adds the micro-batches' gradients up before
   * the one update (activations of batch / M at a time). */
  if (!o->pipeline && o->micro_batches > 1) o->pipeline = 1;
  if (!o->pipeline) {
    bad = o->pipe_schedule ? "--schedule=gpipe|1f1b" : o->deferred_bn ? "--deferred-bn" : NULL;
    if (bad)
      fprintf(stderr, "dlcc: error: %s is for micro-batches: give --micro-batches=M (or --pipeline=S) too\n", bad);
    return !bad;
  }
  if (!o->micro_batches) o->micro_batches = 1;
  if (o->pipe_schedule && strcmp(o->pipe_schedule, "gpipe") != 0 && strcmp(o->pipe_schedule, "1f1b") != 0) {
    fprintf(stderr, "dlcc: error: unknown pipeline schedule '%s' (expected gpipe or 1f1b)\n", o->pipe_schedule);
    return false;
  }
  return true;
}

static int parse_train_args(int argc, char **argv, TrainArgs *o) {
  o->epochs = 1;
  o->shuffle = true;
  o->optimizer = "sgd";
  o->dist_timeout = 120;
  o->stream_mb = TRAIN_RESIDENT_MAX_MB;
  o->tensor_parallel = 1;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      fputs(train_usage, stdout);
      fputs(driver_loss_usage, stdout);
      return 2;
    }
    if (parse_one(argc, argv, &i, o)) return 1;
  }
  const char *missing = !o->model_path ? "a model file" : !o->data ? "--data DIR" : !o->batch ? "--batch=N" : NULL;
  if (missing) {
    fprintf(stderr, "dlcc: error: train needs %s (see dlcc train --help)\n", missing);
    return 1;
  }
  OptimKind kind;
  if (!o->set_lr) o->lr = optim_from_name(o->optimizer, &kind) ? optim_default_lr(kind) : 1e-3;
  o->api.defines = o->defines;
  /* --schedule names the learning rate's schedule, or (gpipe, 1f1b) the
   * pipeline's. */
  if (o->schedule_text && (strcmp(o->schedule_text, "gpipe") == 0 || strcmp(o->schedule_text, "1f1b") == 0))
    o->pipe_schedule = o->schedule_text, o->schedule_text = NULL;
  if (!pipe_args_check(o)) return 1;
  if (o->resume && o->weights) {
    fputs("dlcc: error: --resume and --weights both give the weights: choose one\n", stderr);
    return 1;
  }
  if (o->save_every && !o->save) {
    fputs("dlcc: error: --save-every needs --save=OUT (the files it writes)\n", stderr);
    return 1;
  }
  if (o->val && !o->loss.name) {
    fputs("dlcc: error: --val needs --loss (validation computes the loss it names)\n", stderr);
    return 1;
  }
  return driver_loss_check(&o->loss, &o->loss_spec) ? 0 : 1;
}

/* The API's options from the flags; false after printing why. */
static bool train_options(const TrainArgs *a, dlc_train_options *o) {
  if (dlc_train_options_init(o, a->optimizer) != DLC_OK) {
    fprintf(stderr, "dlcc: error: unknown optimizer '%s' (expected %s)\n", a->optimizer, optim_names().s);
    return false;
  }
  /* A flag of another kind would be dropped without a word. */
  static const struct {
    const char *flag, *kinds, *says;
  } own[] = {{"--betas", " adam adamw adamax radam nadam ", "adam, adamw, adamax, radam and nadam"},
             {"--alpha", " rmsprop ", "rmsprop"},
             {"--rho", " adadelta ", "adadelta"},
             {"--momentum-decay", " nadam ", "nadam"},
             {"--decoupled-weight-decay", " radam nadam ", "radam and nadam"}};
  bool given[] = {a->set_betas, a->set_alpha, a->set_rho, a->set_momentum_decay, a->decoupled};
  char word[32];
  snprintf(word, sizeof word, " %s ", a->optimizer);
  for (size_t k = 0; k < ARRAY_LEN(own); k++)
    if (given[k] && !strstr(own[k].kinds, word)) {
      fprintf(stderr, "dlcc: error: %s is for --optimizer=%s, not %s\n", own[k].flag, own[k].says, a->optimizer);
      return false;
    }
  o->model = a->api;
  o->loss = a->loss.name;
  o->loss_output = a->loss.output;
  o->ignore_index = a->loss_spec.ignore_index;
  o->label_smoothing = a->loss_spec.label_smoothing;
  o->beta = a->loss_spec.beta;
  o->delta = a->loss_spec.delta;
  o->reduction_sum = a->loss.reduction_sum;
  o->reduction_batchmean = a->loss.batchmean;
  o->log_target = a->loss.log_target;
  o->class_weight = a->loss.class_weight;
  o->class_weight_count = a->loss.class_weight_count;
  o->pos_weight = a->loss.pos_weight;
  o->pos_weight_count = a->loss.pos_weight_count;
  dlc_optimizer *opt = &o->optimizer;
  if (a->set_momentum) opt->momentum = a->momentum;
  if (a->set_dampening) opt->dampening = a->dampening;
  if (a->set_weight_decay) opt->weight_decay = a->weight_decay;
  if (a->set_eps) opt->eps = a->eps;
  if (a->set_betas) opt->beta1 = a->beta1, opt->beta2 = a->beta2;
  if (a->set_alpha) opt->alpha = a->alpha;
  if (a->set_rho) opt->rho = a->rho;
  if (a->set_momentum_decay) opt->momentum_decay = a->momentum_decay;
  opt->decoupled_weight_decay = a->decoupled;
  opt->nesterov = a->nesterov;
  opt->amsgrad = a->amsgrad;
  opt->centered = a->centered;
  opt->maximize = a->maximize;
  opt->lr_decay = a->lr_decay;
  opt->initial_accumulator_value = a->initial_accumulator;
  opt->clip_grad_norm = a->clip;
  opt->clip_grad_value = a->clip_value;
  opt->no_decay = a->no_decay;
  return true;
}

/* The whole run's state. */
typedef struct Run {
  TrainArgs *a;
  TrainData data, val;
  dlc_train *step, *rest, *eval; /* rest: the last partial batch; eval: --val */
  /* Tensor parallel, rank 0: the whole step on the interpreter (no plan,
   * no device memory), where the ranks' parts are gathered to be written
   * or validated. */
  dlc_train *whole;
  int64_t rest_n;                /* its size, 0 when none */
  int64_t steps_per_epoch, total_steps;
  int64_t epoch, global_step;    /* where training is: completed epochs, steps */
  int64_t *order;
  void **bufs;                   /* one per data array, a batch each */
  TrainPrefetch *prefetch;       /* streamed data: the next batch read during this one's step */
  TrainSchedule sched;
  TrainPlateau plateau; /* --schedule=plateau's state */
  FILE *log;
  bool tty;
  int pred_output; /* the eval model's output of the model's prediction */
  const void *bufs_val_target; /* the eval batch's targets (a buffer of bufs) */
  bool accuracy; /* top-1 of class indices (cross_entropy, nll) */
  double t0;
  int64_t steps_done, steps_todo, samples_done; /* in this run */
  int64_t classes; /* cross_entropy/nll: the class axis' size; 0 otherwise */
  Dist *dist;      /* the ranks: each takes batch / size samples of every batch */
  DistComm comm;   /* the plans' all-reduces: data parallel's means, tensor parallel's sums */
  int64_t local;   /* this rank's share of a full batch */
  int64_t first_sample; /* where this rank's share of the batch starts in it */
  Pipeline *pipe;  /* --pipeline: this rank's stage; step is then the whole model, kept for saving */
  Pipeline *pipe_rest; /* ... its plans for a last partial batch (rest stays NULL) */
  int tp, dp;      /* tensor-parallel ranks (--tensor-parallel), data-parallel groups: tp * dp ranks */
  /* The ranks of this rank's tensor group or pipeline (consecutive world
   * ranks) and of its data group (the ranks of the same tensor rank or
   * stage): the world itself when the job has one kind. */
  Dist *tgroup, *dgroup;
  Dist *sgroup; /* D x T x S: the T ranks of this rank's stage (tgroup is its pipeline) */
  bool tp_noted; /* the split was printed (once, for the first step compiled) */
} Run;

/* The last error this rank printed, for the other ranks' messages. */
static char last_error[DIST_MSG];

static void keep_error(const char *msg) {
  snprintf(last_error, sizeof last_error, "%s", msg);
  size_t n = strlen(last_error);
  while (n && last_error[n - 1] == '\n') last_error[--n] = 0;
}

static bool api_ok(dlc_train *t, dlc_status st) {
  if (st != DLC_OK) {
    fprintf(stderr, "%s", dlc_train_error(t));
    keep_error(dlc_train_error(t));
  }
  return st == DLC_OK;
}

static bool is_class_loss(const DriverLoss *l) {
  return l->name && (l->kind == LOSS_CROSS_ENTROPY || l->kind == LOSS_NLL);
}

/* Which inputs the data gave, with which shapes, after a failed compile. */
static void note_shapes(const TrainData *d, const dlc_input_shape *shapes) {
  fprintf(stderr, "dlcc: note: the inputs given:");
  for (int i = 0; i < d->n; i++) {
    fprintf(stderr, "%s %s [", i ? "," : "", shapes[i].name);
    for (int k = 0; k < shapes[i].rank; k++) fprintf(stderr, "%s%" PRId64, k ? ", " : "", shapes[i].dims[k]);
    fprintf(stderr, "] from %s", d->a[i].path);
  }
  fprintf(stderr, " (the batch, then a sample's shape)\n");
}

typedef enum { FOR_STEP, FOR_EVAL, FOR_WHOLE } CompileFor;

/* OneCycleLR and CyclicLR set the momentum (or beta1) each step; SGD's
 * and RMSprop's becomes the schedule's, as PyTorch's scheduler sets it. */
static void momentum_options(const Run *r, dlc_optimizer *o) {
  if (!train_sched_cycles_momentum(&r->sched)) return;
  o->momentum_input = 1;
  bool has_momentum = strcmp(o->kind, "sgd") == 0 || strcmp(o->kind, "rmsprop") == 0;
  if (has_momentum && !(o->momentum > 0)) o->momentum = SCHED_MAX_MOMENTUM;
}

/* A step (or eval model, or tensor parallel's whole step) compiled for
 * batch; NULL after printing why. */
static dlc_train *compile_for(Run *r, const TrainData *d, int64_t batch, CompileFor what) {
  dlc_train_options o;
  if (!train_options(r->a, &o)) return NULL;
  bool eval = what == FOR_EVAL;
  o.eval = eval;
  o.optimizer.data_parallel = r->dp > 1 && !eval && !r->a->pipeline;
  if (!eval) momentum_options(r, &o.optimizer);
  /* With --pipeline the whole step only checks the data and holds the
   * weights for saving: the interpreter's compile, which makes no plan. */
  if (r->a->pipeline && !eval) o.model.backend = "ref";
  /* (a pipeline's stages sync their own batchnorms: pipeline.c) */
  o.optimizer.sync_bn = r->a->sync_bn && !eval && !r->a->pipeline ? r->dp : 0;
  /* The eval model (rank 0's) runs whole, on the gathered weights; so
   * does a pipeline's whole step (its stages split themselves). */
  o.model.tensor_parallel = what == FOR_STEP && !r->a->pipeline ? r->tp : 1;
  if (what == FOR_WHOLE) o.model.backend = "ref";
  o.model.tensor_rank = r->dist->rank % r->tp;
  o.optimizer.bucket_mb = r->a->bucket_mb;
  dlc_input_shape *shapes = calloc((size_t)d->n, sizeof *shapes);
  int64_t *dims = calloc((size_t)d->n * RT_MAX_RANK, sizeof *dims);
  if (!shapes || !dims) {
    free(shapes), free(dims);
    fputs("dlcc: error: out of memory\n", stderr);
    return NULL;
  }
  train_data_shapes(d, batch, shapes, dims);
  o.model.n_input_shapes = d->n;
  o.model.input_shapes = shapes;
  /* The target's type from target.npy: i32 or i64 indices, or
   * probabilities. */
  const TrainArray *target = train_data_find(d, TRAIN_TARGET);
  if (o.loss && target && target->t.dtype < RT_F64) {
    o.target_dtype = (dlc_dtype)target->t.dtype;
    o.target_rank = target->t.rank;
    o.target_dims[0] = batch;
    for (int k = 1; k < target->t.rank; k++) o.target_dims[k] = target->t.dims[k];
  }
  dlc_train *t;
  dlc_status st = dlc_train_compile(r->a->model_path, &o, &t);
  if (st != DLC_OK) {
    fprintf(stderr, "%s", dlc_train_error(t));
    if (st == DLC_ERR_COMPILE && (strstr(dlc_train_error(t), "input '") || strstr(dlc_train_error(t), "target"))) {
      note_shapes(d, shapes);
      if (r->dp > 1 && what != FOR_EVAL)
        fprintf(stderr, "dlcc: note: each of the %d data-parallel ranks takes %" PRId64 " of the batch of %" PRId64 "\n",
                r->dp, batch, batch * r->dp);
      if (what == FOR_STEP && r->rest_n && batch == r->rest_n / (r->dp > 1 ? r->dp : 1))
        fprintf(stderr, "dlcc: note: this is the last batch, of %" PRId64 " samples: --drop-last leaves it out\n",
                r->rest_n);
    }
    dlc_train_free(t);
  }
  free(shapes), free(dims);
  if (st != DLC_OK) return NULL;
  char err[1024];
  if (!train_data_check(d, dlc_train_model(t), err, sizeof err)) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    keep_error(err);
    dlc_train_free(t);
    return NULL;
  }
  dlc_model *m = dlc_train_model(t);
  for (int i = 0; !r->dist->rank && i < dlc_num_tensor_notes(m) && !r->tp_noted; i++)
    printf("tensor parallel: %s\n", dlc_tensor_note(m, i));
  r->tp_noted = r->tp > 1;
  bool comm = what != FOR_WHOLE && (o.optimizer.data_parallel || o.model.tensor_parallel > 1);
  if (comm && !api_ok(t, dlc_train_set_comm(t, dist_comm, &r->comm))) {
    dlc_train_free(t);
    return NULL;
  }
  return t;
}

static bool check_classes(Run *r, const TrainData *d) {
  r->pred_output = 1 + r->a->loss.output;
  if (!is_class_loss(&r->a->loss)) return true;
  dlc_tensor_info pred;
  dlc_model *m = dlc_train_model(r->step ? r->step : r->rest);
  if (dlc_output_info(m, r->pred_output, &pred) != DLC_OK || pred.rank < 2) return true; /* the loss said so */
  r->classes = pred.dims[1];
  const TrainArray *target = train_data_find(d, TRAIN_TARGET);
  r->accuracy = target && (target->t.dtype == RT_I64 || target->t.dtype == RT_I32);
  char err[1024];
  if (!train_data_check_classes(d, r->classes, r->a->loss_spec.ignore_index, err, sizeof err)) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    return false;
  }
  return true;
}

/* Samples order[0..n) of d into t's inputs (padded to pad rows).  With
 * the read ahead, next[0..next_n) is the batch after (NULL: none in this
 * epoch), started once this one's inputs are copied in. */
static bool set_batch(Run *r, dlc_train *t, const TrainData *d, const int64_t *order, int64_t n, int64_t pad,
                      const int64_t *next, int64_t next_n) {
  char err[1024];
  void *const *read = NULL;
  bool ahead = d == &r->data && r->prefetch && pad <= n;
  if (ahead && !train_prefetch_take(r->prefetch, order, n, &read, err, sizeof err)) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    keep_error(err);
    return false;
  }
  for (int i = 0; i < d->n; i++) {
    const TrainArray *a = &d->a[i];
    int64_t rows = pad > n ? pad : n;
    if (!read && !train_data_gather(a, order, n, pad, r->bufs[i], err, sizeof err)) {
      fprintf(stderr, "dlcc: error: %s\n", err);
      keep_error(err);
      return false;
    }
    void *buf = read ? read[i] : r->bufs[i];
    if (!api_ok(t, dlc_set_input(dlc_train_model(t), a->name, buf, a->sample_bytes * (size_t)rows))) return false;
  }
  /* the inputs are copied in: the buffers are free for the next batch */
  if (ahead && next) train_prefetch_start(r->prefetch, next, next_n);
  return true;
}

/* The pipeline's outcome: a local error printed and kept for the other
 * ranks; a failed exchange is end_ranks' to report. */
static bool pipe_ok(bool ok, bool comm, const char *err) {
  if (!ok && !comm) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    keep_error(err);
  }
  return ok;
}

/* The stages' parameters and state into r->step on rank 0. */
static bool gather(Run *r) {
  char err[1024];
  bool comm = false;
  if (!r->pipe) return true;
  bool ok = pipe_gather(r->pipe, r->step, &comm, err, sizeof err);
  return pipe_ok(ok, comm, err);
}

static char *checkpoint_path(const char *out) {
  size_t n = strlen(out), k = strlen(".safetensors");
  bool suffix = n > k && strcmp(out + n - k, ".safetensors") == 0;
  char *p = malloc(n + 32);
  if (p) sprintf(p, "%.*s.ckpt.safetensors", (int)(suffix ? n - k : n), out);
  return p;
}

/* Tensor parallel: every rank's weights whole (each split part from its
 * owner), before rank 0 writes or validates them. */
static bool gather_parts(Run *r) {
  char err[512];
  /* (a pipeline's optimizers hold their stages whole) */
  if (r->tp == 1 || r->pipe || train_tp_gather(r->tgroup, r->step ? r->step : r->rest, r->whole, err, sizeof err))
    return true;
  fprintf(stderr, "dlcc: error: %s\n", err);
  keep_error(err);
  return false;
}

/* The step whose weights rank 0 writes or validates. */
static dlc_train *weights_of(Run *r) { return r->whole ? r->whole : r->step ? r->step : r->rest; }

/* --profile: one more full-batch step, every kernel timed (dlc_profile:
 * GPU time on cuda); the weights it updates are not saved again. */
static bool profile_step(Run *r) {
  if (r->dp > 1 || r->tp > 1 || r->pipe) {
    fputs("dlcc: error: --profile times one process's whole step: not under mpirun, --pipeline, --micro-batches "
          "or --tensor-parallel\n",
          stderr);
    keep_error("--profile with several ranks");
    return false;
  }
  dlc_train *t = r->step ? r->step : r->rest;
  dlc_model *m = dlc_train_model(t);
  int n = dlc_num_steps(m);
  dlc_step_time *st = calloc((size_t)(n > 0 ? n : 1), sizeof *st);
  if (!st || dlc_profile(m, st, n) != DLC_OK) {
    fputs(st ? dlc_error(m) : "dlcc: error: out of memory\n", stderr);
    free(st);
    keep_error("--profile failed");
    return false;
  }
  run_print_profile(dlc_backend(m), st, n, r->a->profile);
  free(st);
  return true;
}

static bool save(Run *r) {
  dlc_train *t = weights_of(r);
  if (!gather(r) || !gather_parts(r)) return false;
  if (r->dist->rank) return true; /* one writer: the ranks hold the same weights */
  if (!api_ok(t, dlc_train_save(t, r->a->save, 0, 0, NULL, NULL))) return false;
  char epoch[32], step[32], seed[32], batch[32];
  snprintf(epoch, sizeof epoch, "%" PRId64, r->epoch);
  snprintf(step, sizeof step, "%" PRId64, r->global_step);
  snprintf(seed, sizeof seed, "%" PRIu64, r->a->seed);
  snprintf(batch, sizeof batch, "%" PRId64, r->a->batch);
  char plateau[96];
  snprintf(plateau, sizeof plateau, "%.17g %.17g %" PRId64, r->plateau.lr, r->plateau.best, r->plateau.bad);
  const char *keys[] = {"epoch", "step", "seed", "shuffle", "batch", "plateau"};
  const char *values[] = {epoch, step, seed, r->a->shuffle ? "true" : "false", batch, plateau};
  int n_keys = (int)ARRAY_LEN(keys) - (r->sched.kind != SCHED_PLATEAU);
  char *ckpt = checkpoint_path(r->a->save);
  bool ok = ckpt && api_ok(t, dlc_train_save(t, ckpt, 1, n_keys, keys, values));
  if (ok) printf("saved %s and %s (epoch %" PRId64 ")\n", r->a->save, ckpt, r->epoch);
  free(ckpt);
  return ok;
}

static bool meta_int(dlc_train *t, const char *path, const char *key, int64_t *v) {
  char *s;
  if (!api_ok(t, dlc_train_checkpoint_meta(t, path, key, &s))) return false;
  char *end;
  *v = strtoll(s, &end, 10);
  bool ok = end != s && !*end && *v >= 0;
  if (!ok) fprintf(stderr, "dlcc: error: %s: the checkpoint's \"%s\" is '%s', not a count\n", path, key, s);
  free(s);
  return ok;
}

/* --schedule=plateau's state from a checkpoint: "LR BEST BAD". */
static bool meta_plateau(dlc_train *t, const char *path, TrainPlateau *p) {
  char *s;
  if (!api_ok(t, dlc_train_checkpoint_meta(t, path, "plateau", &s))) return false;
  char *end, *at = s;
  double lr = strtod(at, &end);
  bool ok = end != at;
  double best = strtod(at = end, &end);
  ok = ok && end != at;
  long long bad = strtoll(at = end, &end, 10);
  ok = ok && end != at && !*end && lr >= 0 && bad >= 0;
  if (ok) *p = (TrainPlateau){.lr = lr, .best = best, .bad = bad};
  else
    fprintf(stderr, "dlcc: error: %s: the checkpoint's \"plateau\" is '%s', not a rate, a loss and a count\n", path,
            s);
  free(s);
  return ok;
}

/* Every parameter and state tensor of t as rank 0 has it, so that the
 * ranks start alike whatever each read or drew. */
static bool broadcast_weights(Run *r, dlc_train *t) {
  if (r->dist->size == 1) return true;
  dlc_model *m = dlc_train_model(t);
  bool ok = true;
  for (int i = 0; ok && i < dlc_train_num_params(t); i++) {
    dlc_tensor_info info;
    if (!api_ok(t, dlc_train_param_info(t, i, &info))) return false;
    if (train_tp_sharded(m, info.name, NULL)) continue; /* each rank cut its own parts from the same whole */
    void *buf = malloc(info.nbytes + 1);
    if (!buf) return false;
    ok = api_ok(t, dlc_get_weight(m, info.name, buf, info.nbytes));
    ok = ok && dist_bcast(r->dist, buf, info.nbytes) == DIST_OK; /* end_ranks says why not */
    ok = ok && api_ok(t, dlc_set_weight(m, info.name, buf, info.nbytes));
    free(buf);
  }
  return ok;
}

/* The tensors of t the model already holds (an ONNX model's own
 * weights), copied out: names and data, n of them. */
typedef struct Held {
  int n;
  char **names;
  void **data;
  size_t *bytes;
} Held;

static void held_free(Held *h) {
  for (int i = 0; i < h->n; i++) free(h->names[i]), free(h->data[i]);
  free(h->names), free(h->data), free(h->bytes);
  *h = (Held){0};
}

static bool held_take(dlc_train *t, Held *h) {
  dlc_model *m = dlc_train_model(t);
  int n = dlc_train_num_params(t);
  *h = (Held){0};
  if (!dlc_weights_bound(m)) return true;
  h->names = calloc((size_t)n + 1, sizeof *h->names);
  h->data = calloc((size_t)n + 1, sizeof *h->data);
  h->bytes = calloc((size_t)n + 1, sizeof *h->bytes);
  if (!h->names || !h->data || !h->bytes) return held_free(h), false;
  for (int i = 0; i < n; i++) {
    dlc_tensor_info info;
    if (dlc_train_param_info(t, i, &info) != DLC_OK) continue;
    void *buf = malloc(info.nbytes + 1);
    char *name = strdup(info.name);
    if (!buf || !name) return free(buf), free(name), held_free(h), false;
    /* the optimizer's state and what training added are not held yet */
    if (dlc_get_weight(m, info.name, buf, info.nbytes) != DLC_OK) {
      free(buf), free(name);
      continue;
    }
    h->names[h->n] = name, h->data[h->n] = buf, h->bytes[h->n++] = info.nbytes;
  }
  return true;
}

/* The weights: a checkpoint, a state_dict, an ONNX model's own, or
 * random from --seed.  An ONNX model's own weights are what it was
 * exported with (PyTorch's, say, to fine-tune); what training adds to
 * them (the optimizer's state, running statistics a training-mode
 * export dropped) starts as --seed's draw gives it (zeros, ones). */
static bool bind_weights(Run *r) {
  dlc_train *t = r->step ? r->step : r->rest;
  dlc_model *m = dlc_train_model(t);
  const char *ckpt = r->a->resume;
  if (ckpt) {
    if (!meta_int(t, ckpt, "epoch", &r->epoch) || !meta_int(t, ckpt, "step", &r->global_step)) return false;
    if (r->sched.kind == SCHED_PLATEAU && !meta_plateau(t, ckpt, &r->plateau)) return false;
    if (!api_ok(t, dlc_load_weights(m, ckpt))) return false;
  } else if (r->a->weights) {
    if (!api_ok(t, dlc_load_weights(m, r->a->weights))) return false;
  } else {
    Held own;
    if (!held_take(t, &own)) {
      fputs("dlcc: error: out of memory copying the model's weights\n", stderr);
      return false;
    }
    bool ok = api_ok(t, dlc_init_weights(m, r->a->seed));
    for (int i = 0; ok && !r->a->init_random && i < own.n; i++)
      ok = api_ok(t, dlc_set_weight(m, own.names[i], own.data[i], own.bytes[i]));
    held_free(&own);
    if (!ok) return false;
  }
  if (!broadcast_weights(r, t)) return false;
  if (r->whole && !api_ok(r->whole, dlc_init_weights(dlc_train_model(r->whole), 0))) return false;
  if (r->whole) train_tp_report(t, r->whole);
  if (r->pipe) {
    char err[1024];
    if (!pipe_bind(r->pipe, t, err, sizeof err) || (r->pipe_rest && !pipe_bind(r->pipe_rest, t, err, sizeof err))) {
      fprintf(stderr, "dlcc: error: %s\n", err);
      keep_error(err);
      return false;
    }
  }
  return !r->step || !r->rest || api_ok(r->rest, dlc_train_copy_state(r->rest, r->step));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The terminal's progress line: epoch, step, loss, samples/s, time left. */
static void progress(Run *r, int64_t step_in_epoch, float loss) {
  if (!r->tty) return;
  double el = now() - r->t0;
  double rate = el > 0 ? (double)r->samples_done / el : 0;
  double left = r->steps_done > 0 ? el / (double)r->steps_done * (double)(r->steps_todo - r->steps_done) : 0;
  fprintf(stderr, "\r\033[Kepoch %" PRId64 " step %" PRId64 "/%" PRId64 "  loss %.5f  %.1f samples/s  %d:%02d left",
          r->epoch + 1, step_in_epoch, r->steps_per_epoch, (double)loss, rate, (int)(left / 60), (int)left % 60);
  fflush(stderr);
}

/* x as a JSON number, or null where it is not finite: JSON has no NaN,
 * and a diverged run's log must still parse (Python's json, jq, pandas). */
static const char *json_number(char *buf, size_t len, double x) {
  if (!isfinite(x)) return "null";
  snprintf(buf, len, "%.9g", x);
  return buf;
}

/* "seconds" is the wall time since training began, at the step's end:
 * differences between steps give the throughput without the compile and
 * the first step's warm-up (tests/gpu/check.sh).  "momentum" only when
 * the schedule set one (momentum not NaN). */
static void log_step(Run *r, float loss, double lr, double momentum) {
  char l[32], m[48] = "";
  if (!isnan(momentum)) snprintf(m, sizeof m, "\"momentum\": %.9g, ", momentum);
  if (r->log && !r->dist->rank)
    fprintf(r->log,
            "{\"epoch\": %" PRId64 ", \"step\": %" PRId64 ", \"loss\": %s, \"seconds\": %.6f, %s\"lr\": %.9g}\n",
            r->epoch + 1, r->global_step, json_number(l, sizeof l, loss), now() - r->t0, m, lr);
}

/* Tells t's dropouts where this rank's slice starts in the global batch
 * (the param dlcc.first_sample, ops.def), so that the ranks draw the
 * masks one process draws instead of each the same ones. */
static bool set_first_sample(dlc_train *t, int64_t first) {
  for (int i = 0; i < dlc_train_num_params(t); i++) {
    dlc_tensor_info info;
    if (!api_ok(t, dlc_train_param_info(t, i, &info))) return false;
    if (strcmp(info.name, "dlcc.first_sample") == 0)
      return api_ok(t, dlc_set_weight(dlc_train_model(t), info.name, &first, sizeof first));
  }
  return true;
}

/* This step's learning rate, and its momentum when the schedule sets
 * one (else NaN). */
static double step_lr(const Run *r, double *momentum) {
  if (!train_sched_momentum(&r->sched, r->global_step, r->total_steps, momentum)) *momentum = NAN;
  if (r->sched.kind == SCHED_PLATEAU) return r->plateau.lr;
  return train_sched_lr(&r->sched, r->a->lr, r->global_step, r->total_steps);
}

/* One step on samples order[0..n) by t (the full-batch step or the rest;
 * under a pipeline the rest is NULL and pipe_rest takes it). */
static bool train_batch(Run *r, dlc_train *t, const int64_t *order, int64_t n, const int64_t *next, int64_t next_n,
                        float *loss) {
  if (r->pipe) {
    char err[1024];
    bool comm = false;
    double momentum, lr = step_lr(r, &momentum);
    Pipeline *p = t ? r->pipe : r->pipe_rest;
    bool ok = p == r->pipe || pipe_copy_state(p, r->pipe, err, sizeof err);
    ok = ok && pipe_step(p, order, (float)lr, (float)momentum, loss, &comm, err, sizeof err);
    if (ok && p != r->pipe) ok = pipe_copy_state(r->pipe, p, err, sizeof err);
    if (!pipe_ok(ok, comm, err)) return false;
    r->global_step++;
    r->steps_done++;
    r->samples_done += n * r->dp;
    log_step(r, *loss, lr, momentum);
    return true;
  }
  if (t == r->rest && r->step && !api_ok(t, dlc_train_copy_state(t, r->step))) return false;
  if (!set_first_sample(t, r->first_sample) || !set_batch(r, t, &r->data, order, n, 0, next, next_n)) return false;
  double momentum, lr = step_lr(r, &momentum);
  if (!isnan(momentum) && !api_ok(t, dlc_train_set_momentum(t, (float)momentum))) return false;
  if (!api_ok(t, dlc_train_step(t, (float)lr, loss))) return false;
  /* The global batch's loss: the mean of the ranks' means, as every rank
   * takes as many samples. */
  if (r->dp > 1 && dist_allreduce_mean(r->dgroup, loss, 1) != DIST_OK) return false; /* end_ranks says why */
  n *= r->dp;
  if (t == r->rest && r->step && !api_ok(r->step, dlc_train_copy_state(r->step, t))) return false;
  r->global_step++;
  r->steps_done++;
  r->samples_done += n;
  log_step(r, *loss, lr, momentum);
  return true;
}

/* Element i of a buffer of class indices. */
static int64_t class_at(const void *buf, RtDType dt, int64_t i) {
  return dt == RT_I64 ? ((const int64_t *)buf)[i] : ((const int32_t *)buf)[i];
}

/* Loss and accuracy sums of one eval batch's first n samples: the
 * losses' sum, what their mean divides it by (the positions that count,
 * or with class weights the sum of their classes' weights, as PyTorch's
 * weighted mean), the positions that count and the correct ones. */
static void score_batch(Run *r, int64_t n, double *loss_sum, double *divisor, int64_t *counted, int64_t *correct) {
  dlc_model *m = dlc_train_model(r->eval);
  const void *lp, *pp;
  size_t lb, pb;
  dlc_get_output(m, 0, &lp, &lb);
  const float *l = lp;
  int64_t per = (int64_t)(lb / sizeof *l) / r->a->batch; /* loss values per sample */
  RtDType dt = train_data_find(&r->val, TRAIN_TARGET)->t.dtype;
  const void *target = r->accuracy ? r->bufs_val_target : NULL;
  const DriverLoss *dl = &r->a->loss;
  for (int64_t i = 0; i < n * per; i++) {
    *loss_sum += l[i];
    int64_t t = target ? class_at(target, dt, i) : 0;
    bool counts = !target || t != r->a->loss_spec.ignore_index;
    *counted += counts;
    bool weighted = target && dl->class_weight && t >= 0 && t < dl->class_weight_count;
    /* kl_div's batchmean: the sum over the samples, however many values each has */
    *divisor += dl->batchmean ? i % per == 0 : !counts ? 0 : weighted ? dl->class_weight[t] : 1;
  }
  if (!target || dlc_get_output(m, r->pred_output, &pp, &pb) != DLC_OK) return;
  const float *p = pp;
  int64_t c = r->classes;
  for (int64_t s = 0; s < n; s++)
    for (int64_t j = 0; j < per; j++) {
      int64_t t = class_at(target, dt, s * per + j);
      if (t == r->a->loss_spec.ignore_index) continue;
      int64_t best = 0;
      for (int64_t k = 1; k < c; k++)
        if (p[(s * c + k) * per + j] > p[(s * c + best) * per + j]) best = k;
      *correct += best == t;
    }
}

/* The validation set's loss (PyTorch's mean, into *loss) and accuracy. */
static bool validate(Run *r, double *loss) {
  dlc_train *t = weights_of(r);
  if (!api_ok(r->eval, dlc_train_copy_state(r->eval, t))) return false;
  int64_t *order = malloc(sizeof *order * (size_t)r->val.count);
  if (!order) return false;
  train_data_order(r->val.count, false, 0, 0, order);
  double loss_sum = 0, divisor = 0;
  int64_t counted = 0, correct = 0;
  bool ok = true;
  for (int64_t at = 0; ok && at < r->val.count; at += r->a->batch) {
    int64_t n = r->val.count - at < r->a->batch ? r->val.count - at : r->a->batch;
    ok = set_batch(r, r->eval, &r->val, order + at, n, r->a->batch, NULL, 0) &&
         api_ok(r->eval, dlc_run(dlc_train_model(r->eval)));
    if (ok) score_batch(r, n, &loss_sum, &divisor, &counted, &correct);
  }
  free(order);
  if (!ok) return false;
  double val_loss = divisor != 0 ? loss_sum / divisor : 0.0;
  *loss = val_loss;
  printf("epoch %" PRId64 ": val loss %.6f", r->epoch, val_loss);
  if (r->accuracy) printf(", val accuracy %.2f%%", counted ? 100.0 * (double)correct / (double)counted : 0.0);
  printf("\n");
  char vl[32];
  if (r->log)
    fprintf(r->log, "{\"epoch\": %" PRId64 ", \"val_loss\": %s%s%.9g}\n", r->epoch,
            json_number(vl, sizeof vl, val_loss),
            r->accuracy ? ", \"val_accuracy\": " : ", \"val_n\": ",
            r->accuracy ? (counted ? (double)correct / (double)counted : 0.0) : (double)r->val.count);
  return true;
}

/* --schedule=plateau after an epoch: every rank steps it by rank 0's
 * validation loss. */
static bool plateau_step(Run *r, double val_loss) {
  if (r->sched.kind != SCHED_PLATEAU) return true;
  if (r->dist->size > 1 && dist_bcast(r->dist, &val_loss, sizeof val_loss) != DIST_OK) return false;
  double was = r->plateau.lr;
  if (train_plateau_step(&r->sched, &r->plateau, val_loss) && !r->dist->rank) {
    printf("epoch %" PRId64 ": no better validation loss for %" PRId64 " epoch%s: learning rate %.6g -> %.6g\n",
           r->epoch, r->sched.patience + 1, r->sched.patience ? "s" : "", was, r->plateau.lr);
    fflush(stdout);
  }
  return true;
}

static bool run_epoch(Run *r) {
  train_data_order(r->data.count, r->a->shuffle, r->a->seed, r->epoch, r->order);
  int64_t b = r->a->batch, full = r->data.count / b;
  double loss_sum = 0;
  int64_t steps = 0;
  for (int64_t k = 0; k < full + (r->rest_n > 0); k++) {
    float loss;
    bool last = k == full;
    /* Data group q (a tensor group or a pipeline: world ranks
     * q * per ..) takes the q-th equal slice of each batch, in the order
     * every rank computes alike from the seed. */
    int64_t share = (last ? r->rest_n : b) / r->dp, per = r->pipe ? r->a->pipeline * r->tp : r->tp;
    r->first_sample = r->dist->rank / per * share;
    /* the next step's slice, for the read ahead (none past the epoch:
     * the next one reorders r->order) */
    bool more = k + 1 < full || (k + 1 == full && r->rest_n > 0);
    int64_t next_n = (k + 1 == full ? r->rest_n : b) / r->dp;
    const int64_t *next = more ? r->order + (k + 1) * b + r->dist->rank / per * next_n : NULL;
    if (!train_batch(r, last ? r->rest : r->step, r->order + k * b + r->first_sample, share, next, next_n, &loss))
      return false;
    loss_sum += loss;
    steps++;
    progress(r, k + 1, loss);
  }
  if (r->tty) fputs("\r\033[K", stderr);
  r->epoch++;
  if (r->a->val && (!gather(r) || !gather_parts(r))) return false; /* rank 0 validates: every rank gathers */
  bool ok = true;
  double val_loss = 0;
  if (!r->dist->rank) { /* rank 0 prints and validates */
    printf("epoch %" PRId64 ": train loss %.6f (mean of %" PRId64 " steps)\n", r->epoch,
           steps ? loss_sum / (double)steps : 0.0, steps);
    ok = !r->eval || validate(r, &val_loss);
    fflush(stdout); /* a line per epoch, also into a pipe or a file */
    if (r->log) fflush(r->log);
  }
  return ok && plateau_step(r, val_loss);
}

/* --pipeline: the refusals, the whole step at a micro-batch (the data's
 * check, the weights), then this rank's stage. */
static bool compile_pipeline(Run *r) {
  TrainArgs *a = r->a;
  int64_t m = a->micro_batches, D = r->dp;
  if (D == 1 && a->batch % m)
    snprintf(last_error, sizeof last_error,
             "--batch=%" PRId64 " does not divide into %" PRId64 " micro-batches: give a multiple of %" PRId64,
             a->batch, m, m);
  else if (a->batch % (D * m))
    snprintf(last_error, sizeof last_error,
             "--batch=%" PRId64 " does not divide into %" PRId64 " pipelines of %" PRId64
             " micro-batches: give a multiple of %" PRId64, a->batch, D, m, D * m);
  else if (r->rest_n % D)
    snprintf(last_error, sizeof last_error,
             "the last batch of %" PRId64 " samples does not divide among %" PRId64 " pipelines: add --drop-last, or "
             "give a --batch that leaves a multiple of %" PRId64, r->rest_n, D, D);
  else
    last_error[0] = 0;
  if (last_error[0]) {
    fprintf(stderr, "dlcc: error: %s\n", last_error);
    return false;
  }
  if (!(r->step = compile_for(r, &r->data, a->batch / (D * m), FOR_STEP))) return false;
  if (!check_classes(r, &r->data)) return false;
  if (a->val && !r->dist->rank && !(r->eval = compile_for(r, &r->val, a->batch, FOR_EVAL))) return false;
  dlc_train_options o;
  if (!train_options(a, &o)) return false;
  momentum_options(r, &o.optimizer);
  PipeConfig pc = {.model_path = a->model_path, .train = &o, .loss = a->loss.name ? &a->loss_spec : NULL,
                   .loss_output = a->loss.output, .data = &r->data, .batch = a->batch / D, .micro = m,
                   .first_sample = r->dist->rank / (a->pipeline * r->tp) * (a->batch / D),
                   .one_f_one_b = a->pipe_schedule && strcmp(a->pipe_schedule, "1f1b") == 0, .dist = r->tgroup,
                   .world = r->dist, .replicas = D > 1 ? r->dgroup : NULL, .tensor = r->tp > 1 ? r->sgroup : NULL,
                   .deferred_bn = a->deferred_bn, .sync_bn = a->sync_bn, .bucket_mb = a->bucket_mb};
  char err[4096];
  if (!(r->pipe = pipe_new(&pc, err, sizeof err))) {
    fprintf(stderr, strstr(err, ": error: ") ? "%s\n" : "dlcc: error: %s\n", err); /* located: as diag wrote it */
    keep_error(err);
    return false;
  }
  if (!r->rest_n) return true;
  /* The last partial batch: the same stages, compiled again for the
   * pipeline's share of it in as many equal micro-batches as divide it,
   * up to M (their mean is the batch's mean loss, as one process's). */
  int64_t share = r->rest_n / D, mr = m;
  while (share % mr) mr--;
  pc.batch = share, pc.micro = mr;
  pc.first_sample = r->dist->rank / (a->pipeline * r->tp) * share;
  if (!(r->pipe_rest = pipe_new_like(&pc, r->pipe, err, sizeof err))) {
    fprintf(stderr, strstr(err, ": error: ") ? "%s\n" : "dlcc: error: %s\n", err);
    keep_error(err);
    return false;
  }
  if (!r->dist->rank)
    printf("%s: the last batch, %" PRId64 " samples, as %" PRId64 " micro-batch%s of %" PRId64 "%s\n",
           r->a->pipeline == 1 && r->tp == 1 ? "gradient accumulation" : "pipeline", r->rest_n, mr, mr == 1 ? "" : "es",
           share / mr, D > 1 ? (r->a->pipeline == 1 && r->tp == 1 ? " on each rank" : " in each pipeline") : "");
  return true;
}

/* Steps per epoch and the compiled steps: the full batch, the rest. */
static bool compile_steps(Run *r) {
  int64_t b = r->a->batch, full = r->data.count / b;
  r->rest_n = r->a->drop_last ? 0 : r->data.count % b;
  r->steps_per_epoch = full + (r->rest_n > 0);
  if (r->steps_per_epoch == 0) {
    fprintf(stderr, "dlcc: error: %s has %" PRId64 " samples, fewer than one batch of %" PRId64
                    ", and --drop-last skips them all\n", r->data.dir, r->data.count, b);
    return false;
  }
  int k = r->dp;
  if (r->a->pipeline) return compile_pipeline(r);
  if (k > 1 && (b % k || r->rest_n % k)) {
    snprintf(last_error, sizeof last_error,
             b % k ? "--batch=%" PRId64 " does not divide among %d ranks: give a multiple of %d (each rank takes an "
                     "equal share, so the step equals one process's)"
                   : "the last batch of %" PRId64 " samples does not divide among %d ranks: add --drop-last, or "
                     "give a --batch that leaves a multiple of %d",
             b % k ? b : r->rest_n, k, k);
    fprintf(stderr, "dlcc: error: %s\n", last_error);
    return false;
  }
  if (full && !(r->step = compile_for(r, &r->data, b / k, FOR_STEP))) return false;
  if (r->rest_n && !(r->rest = compile_for(r, &r->data, r->rest_n / k, FOR_STEP))) return false;
  if (r->a->val && !r->dist->rank && !(r->eval = compile_for(r, &r->val, b, FOR_EVAL))) return false;
  if (r->tp > 1 && !r->dist->rank && !(r->whole = compile_for(r, &r->data, full ? b / k : r->rest_n / k, FOR_WHOLE)))
    return false;
  if (!check_classes(r, &r->data) || (r->a->val && !check_classes(r, &r->val))) return false;
  return true;
}

static bool setup(Run *r) {
  char err[1024];
  TrainArgs *a = r->a;
  if (a->schedule_text && !train_sched_parse(a->schedule_text, &r->sched, err, sizeof err)) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    return false;
  }
  if (train_sched_cycles_momentum(&r->sched) && (strcmp(a->optimizer, "adagrad") == 0 ||
                                                  strcmp(a->optimizer, "adadelta") == 0)) {
    fprintf(stderr, "dlcc: error: --schedule=%s cycles the momentum or beta1: %s has neither\n",
            r->sched.kind == SCHED_ONECYCLE ? "onecycle" : "cyclic", a->optimizer);
    return false;
  }
  if (r->sched.kind == SCHED_PLATEAU && !a->val) {
    fputs("dlcc: error: --schedule=plateau steps by the validation loss: give --val DIR\n", stderr);
    return false;
  }
  train_plateau_start(&r->plateau, a->lr);
  bool need_target = a->loss.name != NULL;
  int64_t resident_max = a->stream_mb * 1048576.0 >= 9e18 ? -1 : (int64_t)(a->stream_mb * 1048576.0);
  if (!train_data_read(a->data, need_target, resident_max, &r->data, err, sizeof err) ||
      (a->val && !train_data_read(a->val, need_target, resident_max, &r->val, err, sizeof err))) {
    fprintf(stderr, "dlcc: error: %s\n", err);
    keep_error(err);
    return false;
  }
  if (!compile_steps(r) || !bind_weights(r)) return false;
  r->order = malloc(sizeof *r->order * (size_t)r->data.count);
  r->bufs = calloc((size_t)r->data.n, sizeof *r->bufs);
  for (int i = 0; r->bufs && i < r->data.n; i++) {
    const TrainArray *v = a->val ? train_data_find(&r->val, r->data.a[i].name) : NULL;
    size_t row = r->data.a[i].sample_bytes;
    if (v && v->sample_bytes > row) row = v->sample_bytes;
    r->bufs[i] = malloc(row * (size_t)a->batch);
    if (v && strcmp(v->name, TRAIN_TARGET) == 0) r->bufs_val_target = r->bufs[i];
    if (!r->bufs[i]) break;
  }
  if (!r->order || !r->bufs || (r->data.n && !r->bufs[r->data.n - 1])) {
    fputs("dlcc: error: out of memory\n", stderr);
    return false;
  }
  bool streamed = false;
  for (int i = 0; i < r->data.n; i++) streamed = streamed || r->data.a[i].fd >= 0;
  /* (a rank reads its share of a batch) */
  if (streamed && !a->pipeline && !(r->prefetch = train_prefetch_new(&r->data, a->batch / r->dp))) {
    fputs("dlcc: error: out of memory\n", stderr);
    return false;
  }
  if (a->log && !r->dist->rank && !(r->log = fopen(a->log, a->resume ? "a" : "w"))) {
    fprintf(stderr, "dlcc: error: %s: %s\n", a->log, strerror(errno));
    return false;
  }
  r->tty = isatty(STDERR_FILENO) && !r->dist->rank;
  return true;
}

static void teardown(Run *r) {
  train_prefetch_free(r->prefetch);
  for (int i = 0; r->bufs && i < r->data.n; i++) free(r->bufs[i]);
  free(r->bufs);
  free(r->order);
  if (r->log) fclose(r->log);
  dlc_train_free(r->step);
  dlc_train_free(r->rest);
  dlc_train_free(r->eval);
  dlc_train_free(r->whole);
  pipe_free(r->pipe);
  pipe_free(r->pipe_rest);
  dist_comm_free(&r->comm);
  train_data_free(&r->data);
  train_data_free(&r->val);
  for (int i = 0; i < r->a->api.n_defines; i++) free((char *)r->a->defines[i].name);
}

static void end_ranks(Dist *d, bool ok) { dist_end(d, ok, last_error[0] ? last_error : NULL); }

/* --tensor-parallel=T or --pipeline=S against the launch's ranks: D =
 * ranks / T data-parallel groups of T consecutive ranks, or D pipelines
 * of S. */
static bool parallel_shape(Run *r) {
  int T = r->tp, k = r->dist->size, S = (int)r->a->pipeline;
  if (S && T > 1 && k % (S * T))
    snprintf(last_error, sizeof last_error,
             "--pipeline=%d with --tensor-parallel=%d does not divide the %d rank%s of the launch (mpirun -np %d for "
             "one pipeline, a multiple of %d for data parallel over pipelines)", S, T, k, k == 1 ? "" : "s", S * T,
             S * T);
  else if (S && T > 1)
    return r->dp = k / (S * T), true;
  else if (S && k % S)
    snprintf(last_error, sizeof last_error,
             "--pipeline=%d does not divide the %d rank%s of the launch (mpirun -np %d for one pipeline, a multiple "
             "of %d for data parallel over pipelines of %d)", S, k, k == 1 ? "" : "s", S, S, S);
  else if (S)
    return r->dp = k / S, true;
  else if (T == 1)
    return true;
  else if (k % T)
    snprintf(last_error, sizeof last_error,
             "--tensor-parallel=%d does not divide the %d ranks of the launch "
             "(mpirun -np %d for tensor parallel alone, a multiple of %d for data parallel over groups of %d)",
             T, k, T, T, T);
  else
    return r->dp = k / T, true;
  fprintf(stderr, "dlcc: error: %s\n", last_error);
  return false;
}

/* D x T x S ranks: world rank w = (q S + s) T + t is rank t of stage s
 * of pipeline q.  Its stage's T ranks are consecutive (sgroup), its
 * pipeline (tgroup) the S ranks of its q and t, its data group the D of
 * its s and t. */
static bool make_pipeline_tp_groups(Run *r, Dist *tg, Dist *dg, Dist *sg) {
  Dist *d = r->dist;
  int T = r->tp, S = (int)r->a->pipeline, w = d->rank;
  int t = w % T, s = w / T % S, q = w / (S * T);
  if (!dist_split(d, q * T + t, s, tg)) return fprintf(stderr, "dlcc: error: %s\n", d->err), false;
  r->tgroup = tg;
  if (!dist_split(d, q * S + s, t, sg)) return fprintf(stderr, "dlcc: error: %s\n", d->err), false;
  r->sgroup = sg;
  if (r->dp > 1) {
    if (!dist_split(d, s * T + t, q, dg)) return fprintf(stderr, "dlcc: error: %s\n", d->err), false;
    r->dgroup = dg;
  }
  return true;
}

/* D x T ranks: world rank w is rank w % T of tensor group w / T, and
 * rank w / T of data group w % T.  D x S the same with pipelines of S
 * stages for tensor groups (tgroup is then the pipeline's ranks). */
static bool make_groups(Run *r, Dist *tg, Dist *dg, Dist *sg) {
  Dist *d = r->dist;
  if (r->a->pipeline && r->tp > 1) {
    r->tgroup = r->dgroup = d;
    return make_pipeline_tp_groups(r, tg, dg, sg);
  }
  int per = r->a->pipeline ? (int)r->a->pipeline : r->tp;
  r->tgroup = r->dgroup = d;
  if (r->dp == 1 || (per == 1 && !r->a->pipeline)) return true;
  if (!dist_split(d, d->rank / per, d->rank % per, tg)) return fprintf(stderr, "dlcc: error: %s\n", d->err), false;
  if (!dist_split(d, d->rank % per, d->rank / per, dg)) {
    dist_finish(tg);
    return fprintf(stderr, "dlcc: error: %s\n", d->err), false;
  }
  r->tgroup = tg, r->dgroup = dg;
  if (!r->a->pipeline) r->comm = (DistComm){tg, dg, NULL, NULL};
  return true;
}

/* A group's collective failed: the world cannot end in step (its peers
 * wait in other groups' collectives), so the job ends after the message. */
static void end_groups(Run *r) {
  Dist *d = r->dist, *groups[3] = {r->tgroup, r->dgroup, r->sgroup};
  for (int i = 0; i < 3; i++) {
    Dist *g = groups[i];
    if (!g || g == d) continue;
    if ((g->broken || g->peer_failed) && !d->broken) {
      d->broken = true;
      snprintf(d->err, sizeof d->err, "%s", g->err);
    }
    dist_finish(g);
  }
}

int driver_train(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--plan-parallel") == 0) return driver_plan_parallel(argc, argv);
  TrainArgs a = {0};
  int rc = parse_train_args(argc, argv, &a);
  if (rc) return rc == 2 ? 0 : 1;
  Dist dist;
  if (!dist_init(&dist, a.dist_timeout)) {
    fprintf(stderr, "dlcc: error: %s\n", dist.err);
    return 1;
  }
#ifdef HAVE_NCCL
  if (dist.size > 1) nccl_pick_device();
#endif
  Run r = {.a = &a, .dist = &dist, .tp = (int)a.tensor_parallel, .dp = dist.size, .comm = {&dist, &dist, NULL, NULL}};
  Dist tgroup, dgroup, sgroup;
  bool ok = parallel_shape(&r) && make_groups(&r, &tgroup, &dgroup, &sgroup) && setup(&r);
  if (ok) {
    r.total_steps = (r.epoch + a.epochs) * r.steps_per_epoch;
    r.steps_todo = a.epochs * r.steps_per_epoch;
    r.t0 = now();
    for (int64_t e = 0; ok && e < a.epochs; e++) {
      ok = run_epoch(&r);
      /* (the last epoch's are the end's) */
      if (ok && a.save_every && r.epoch % a.save_every == 0 && e + 1 < a.epochs) ok = save(&r);
    }
  }
  if (ok && r.prefetch && !dist.rank) {
    int64_t hits, takes;
    train_prefetch_count(r.prefetch, &hits, &takes);
    printf("data: streamed from its files, %" PRId64 " of %" PRId64 " batches read ahead during the step before\n",
           hits, takes);
  }
  if (ok && a.save) ok = save(&r);
  if (ok && a.profile) ok = profile_step(&r);
  if (ok && r.dp > 1 && r.tp > 1 && !dist.rank && !a.pipeline)
    printf("data parallel: %d groups of %d tensor-parallel ranks\n", r.dp, r.tp);
  else if (ok && r.dp > 1 && !dist.rank && !a.pipeline)
    printf("data parallel: %d ranks; rank 0's gradient all-reduces took %.3f s, %.3f s of it exposed (%.0f%% hidden "
           "behind the backward)\n",
           dist.size, dist.comm_s, dist.exposed_s,
           dist.comm_s > 0 ? 100.0 * (1.0 - dist.exposed_s / dist.comm_s) : 0.0);
  teardown(&r);
  end_groups(&r);
  end_ranks(&dist, ok);
  return ok ? 0 : 1;
}
