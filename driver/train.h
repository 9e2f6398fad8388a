/* What `dlcc train` (train.c) reads and computes on the host: the data
 * folder (train_data.c: one .npy per model input and target.npy, checked
 * against the compiled step), the order of samples per epoch, batches
 * gathered from it, and the learning-rate schedule (train_sched.c). */
#ifndef DLCC_DRIVER_TRAIN_H
#define DLCC_DRIVER_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlcc.h"
#include "runtime/tensorio.h"

#define TRAIN_TARGET "target"

typedef struct TrainArray {
  char *name; /* the file's name without .npy: the model input it feeds */
  char *path; /* DIR/NAME.npy, for messages */
  RtTensor t; /* t.data NULL when streamed */
  size_t sample_bytes; /* one row of axis 0 */
  /* Streamed (fd >= 0): the file stays open and each batch reads its
   * rows at data_start, so an array larger than memory trains, and the
   * ranks of a node share the page cache instead of a copy each. */
  int fd;
  int64_t data_start;
} TrainArray;

typedef struct TrainData {
  char *dir;
  int n;
  TrainArray *a; /* sorted by name */
  int64_t count; /* samples: every array's length */
} TrainData;

enum {
  TRAIN_RESIDENT_MAX_MB = 1024, /* dlcc train's default: larger arrays stream */
  TRAIN_HEADERS_ONLY = -2       /* train_data_read's resident_max for the shapes alone */
};
/* Reads every DIR/NAME.npy: target.npy must be there when need_target
 * (a loss reads it), each array has rank >= 1 and all have the same
 * length, at least one sample.  An array of more than resident_max bytes
 * (-1: none) is streamed instead of read whole (its header checked, its
 * rows read by each batch), unless its file is in Fortran order;
 * TRAIN_HEADERS_ONLY reads no data at all (nothing may be gathered).
 * False with a message naming the file in err. */
bool train_data_read(const char *dir, bool need_target, int64_t resident_max, TrainData *d, char *err,
                     size_t errlen);
void train_data_free(TrainData *d);
const TrainArray *train_data_find(const TrainData *d, const char *name);
/* The shapes the step compiles for: [batch, per-sample dims...] per
 * array (dims points into storage, RT_MAX_RANK per array). */
void train_data_shapes(const TrainData *d, int64_t batch, dlc_input_shape *shapes, int64_t *storage);
/* The compiled step against the data: every model input but "dlcc.lr"
 * has its array with the input's dtype and per-sample shape, and every
 * array feeds an input.  False with a message naming the file. */
bool train_data_check(const TrainData *d, dlc_model *m, char *err, size_t errlen);
/* cross_entropy and nll with class indices: every target in [0, classes)
 * or equal to ignore_index; false naming target.npy and the sample. */
bool train_data_check_classes(const TrainData *d, int64_t classes, int64_t ignore_index, char *err,
                              size_t errlen);
/* The order of epoch `epoch` (from 0): 0..count-1, or with shuffle a
 * Fisher-Yates shuffle drawing from splitmix64 seeded with
 * seed + epoch (docs/training.md), so an epoch's order depends on
 * nothing but the seed and its number. */
void train_data_order(int64_t count, bool shuffle, uint64_t seed, int64_t epoch, int64_t *order);
/* Samples order[0..n) of array a into dst, then (pad > n) sample order[0]
 * again up to pad rows; a streamed array's by a read of each run of
 * consecutive samples.  False with the reason (a file that shrank or
 * failed to read) in err. */
bool train_data_gather(const TrainArray *a, const int64_t *order, int64_t n, int64_t pad, void *dst, char *err,
                       size_t errlen);

/* One batch read ahead on a thread of its own (train_prefetch.c), for
 * streamed data: start reads samples order[0..n) of every array (order
 * must stay valid until taken); take joins the thread and gives in
 * *bufs its buffers (per array, as train_data_gather fills them) when
 * they hold exactly that batch, else NULL (read it yourself), and false
 * with the reason when the read failed. */
typedef struct TrainPrefetch TrainPrefetch;
TrainPrefetch *train_prefetch_new(const TrainData *d, int64_t rows); /* NULL: out of memory */
void train_prefetch_start(TrainPrefetch *p, const int64_t *order, int64_t n);
bool train_prefetch_take(TrainPrefetch *p, const int64_t *order, int64_t n, void *const **bufs, char *err,
                         size_t errlen);
/* The batches taken, and those of them the read ahead held. */
void train_prefetch_count(const TrainPrefetch *p, int64_t *hits, int64_t *takes);
void train_prefetch_free(TrainPrefetch *p);

/* The learning rate of step t (from 0, counted over the whole run) as
 * torch.optim.lr_scheduler's closed forms give it, stepped once per
 * optimizer step (docs/training.md): "step:N:GAMMA" (StepLR),
 * "multistep:M1/M2/...:GAMMA" (MultiStepLR), "exp:GAMMA"
 * (ExponentialLR), "cosine[:T_MAX[:ETA_MIN]]" (CosineAnnealingLR),
 * "cosine_restarts:T0[:TMULT[:ETA_MIN]]" (CosineAnnealingWarmRestarts),
 * "poly[:T[:POWER]]" (PolynomialLR), "linear:START:END[:T]" (LinearLR),
 * T_MAX and T the run's steps unless given; "plateau", "onecycle" and
 * "cyclic" (below);
 * "warmup:N[:START]" (LinearLR
 * from START, default 1/3, to 1 over N steps) joined to one of the
 * others by ',' multiplies it (ChainedScheduler), by '+' runs before it
 * (SequentialLR: the decay starts at step N, its span the run's steps
 * after N unless given). */
typedef enum {
  SCHED_CONSTANT,
  SCHED_STEP,
  SCHED_MULTISTEP,
  SCHED_EXP,
  SCHED_COSINE,
  SCHED_COSINE_RESTARTS,
  SCHED_POLY,
  SCHED_LINEAR,
  SCHED_PLATEAU,
  SCHED_ONECYCLE,
  SCHED_CYCLIC
} SchedKind;
typedef enum { CYCLIC_TRIANGULAR, CYCLIC_TRIANGULAR2, CYCLIC_EXP_RANGE } CyclicMode;
enum { SCHED_MAX_MILESTONES = 32 };

typedef struct TrainSchedule {
  SchedKind kind;
  int64_t step_size;                          /* step */
  int n_milestones;                           /* multistep */
  int64_t milestones[SCHED_MAX_MILESTONES];
  double gamma;                               /* step, multistep, exp */
  int64_t t_max;                              /* cosine, poly, linear: 0 is the run's steps */
  double eta_min;                             /* cosine, cosine_restarts */
  int64_t t_0, t_mult;                        /* cosine_restarts */
  double power;                               /* poly */
  double start_factor, end_factor;            /* linear */
  int64_t patience;                           /* plateau */
  double factor, min_lr;                      /* plateau */
  double pct_start, div_factor, final_div;    /* onecycle */
  double base_lr;                             /* cyclic (--lr its max_lr); gamma for exp_range */
  int64_t step_up, step_down;                 /* cyclic */
  CyclicMode mode;                            /* cyclic */
  int64_t warmup;
  double warmup_start;
  bool sequential; /* "warmup:N+DECAY": the decay from step N, counting from 0 there */
} TrainSchedule;

bool train_sched_parse(const char *text, TrainSchedule *s, char *err, size_t errlen);
/* For "plateau" the rate is the plateau's (TrainPlateau.lr), not this. */
double train_sched_lr(const TrainSchedule *s, double base, int64_t t, int64_t total_steps);
/* "onecycle[:PCT_START[:DIV[:FINAL_DIV]]]" (OneCycleLR over the run's
 * steps, max_lr the base rate, cosine annealing) also cycles the
 * momentum (or beta1) between 0.95 and 0.85, PyTorch's defaults, and
 * "cyclic:BASE_LR:UP[/DOWN][:MODE[:GAMMA]]" (CyclicLR from BASE_LR up to
 * the base rate over UP steps and down over DOWN, default UP; MODE
 * triangular, triangular2 or exp_range, GAMMA exp_range's, default 1)
 * between 0.9 and 0.8: the momentum of step t.  Other schedules keep
 * the optimizer's (false). */
bool train_sched_momentum(const TrainSchedule *s, int64_t t, int64_t total_steps, double *momentum);
#define SCHED_MAX_MOMENTUM 0.95
/* Whether s sets the momentum (or beta1) each step. */
bool train_sched_cycles_momentum(const TrainSchedule *s);

/* "plateau[:PATIENCE[:FACTOR[:MIN_LR]]]" (ReduceLROnPlateau, mode "min",
 * threshold 1e-4 relative, no cooldown; PyTorch's defaults 10 and 0.1 and
 * 0): stepped once an epoch by the validation loss, not by the step
 * count; its state is the checkpoint's too. */
typedef struct TrainPlateau {
  double lr, best;  /* the rate now; the best loss so far (inf before any) */
  int64_t bad;      /* epochs since the best */
} TrainPlateau;
void train_plateau_start(TrainPlateau *p, double base);
/* After an epoch whose validation loss is metric: true when it cut the
 * rate (lr then new). */
bool train_plateau_step(const TrainSchedule *s, TrainPlateau *p, double metric);

#endif
