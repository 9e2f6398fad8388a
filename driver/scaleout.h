/* The scale-out estimate behind `dlcc train --plan-parallel` (scaleout.c):
 * takes what compiling the training step measured (per local batch: the
 * roofline time of its plan, the share of it tensor parallelism divides, its
 * arena; per micro-batch: the stage split of the forward pass and the
 * bytes crossing each cut; the gradient bytes) and a device from a
 * documented table, and returns for one split of G x N GPUs into data x
 * tensor x pipeline parallel groups the step time broken into compute,
 * exposed communication and pipeline bubble, and the memory per GPU.
 * Pure arithmetic on those figures, so tests can check it by hand; the
 * formulas and the table are docs/parallel.md's. */
#ifndef DLCC_DRIVER_SCALEOUT_H
#define DLCC_DRIVER_SCALEOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One GPU model and its links, from vendors' data sheets (dense peaks,
 * no sparsity). */
typedef struct ScaleDevice {
  const char *name;
  double half_flops; /* f16/bf16 on tensor cores, FLOP/s */
  double tf32_flops;
  double f32_flops;  /* CUDA cores */
  double hbm_bytes;  /* bytes/s */
  double memory;     /* bytes */
  double link_bytes; /* NVLink, bytes/s each way per GPU */
  double nic_bytes;  /* InfiniBand, bytes/s per GPU (one NIC each) */
  double link_lat, nic_lat; /* seconds per hop of a ring */
  double launch_s;   /* the gap a kernel or GEMM costs however small */
} ScaleDevice;

/* NULL when the name is not in the table ("h200", "h100", "a100"). */
const ScaleDevice *scale_device(const char *name);
/* "h200, h100, a100", for messages. */
const char *scale_device_names(void);

/* One plan step's time on one GPU: its roofline (FLOPs at the peak of
 * the units it runs on, or its bytes at HBM bandwidth, whichever is
 * longer) plus the launch gap. */
typedef enum { SCALE_ON_F32, SCALE_ON_TF32, SCALE_ON_HALF } ScaleUnits;
double scale_step_time(const ScaleDevice *d, double flops, double bytes, ScaleUnits on);

/* A ring all-reduce of `bytes` over n GPUs: 2(n-1)/n of the bytes
 * through each GPU's slowest link, and 2(n-1) hops of latency.  0 for
 * n <= 1. */
double scale_allreduce_time(const ScaleDevice *d, double bytes, int n, bool across_nodes);

/* What a cut before node `at` costs at the end of stage `stage`. */
typedef double (*ScaleCutCost)(void *ctx, int stage, int at);

/* The cut of costs[0..n) (a topological order's node costs, seconds)
 * into `parts` contiguous non-empty stages whose slowest stage, its
 * costs plus the cost of the cut at its end (none for the last), is the
 * least; cut[k] is the first node of stage k + 1 (parts - 1 entries).
 * Exact over every boundary up to 1,000 nodes, over 1,000 evenly spaced
 * ones beyond; ties keep the earliest cuts, so the result depends on
 * nothing but the costs.  Returns that slowest stage's time, or -1 when
 * n < parts (or out of memory). */
double scale_partition(const double *costs, int n, int parts, ScaleCutCost cut_cost, void *ctx, int *cut);

/* The step measured at one local batch: compiled and costed per plan
 * step on the device. */
typedef struct ScaleStep {
  double compute_s;  /* the forward and backward steps, summed */
  double split_s;    /* of that, what tensor parallel divides: the work of the
                      * split linears and of everything between them */
  double arena_bytes;
  /* Tensor parallel's all-reduces for one local batch (Megatron's: the
   * output of each row-split linear forward, the input gradient of each
   * column-split group backward; passes/tensor_par.c's allreduce_sum and
   * tp_copy): their bytes and count. */
  double tp_bytes;
  int tp_count;
  /* The forward nodes' costs in order, for the stage split, and the
   * bytes of the values live across the boundary after each node. */
  int n_nodes;
  const double *node_s;
  const double *cut_bytes;
} ScaleStep;

/* What does not depend on the batch. */
typedef struct ScaleModel {
  int64_t batch;       /* the global batch */
  double weight_bytes; /* parameters, optimizer state, master copies */
  double grad_bytes;   /* what data parallel all-reduces per step (f32) */
  double optim_s;      /* the optimizer's update on one GPU, all parameters */
  double bucket_bytes; /* DDP's bucket (25 MiB): the last one cannot overlap */
} ScaleModel;

/* One split: D data x T tensor x S pipeline, G GPUs per node. */
typedef struct ScaleSplit {
  int data, tensor, stages, micro_batches;
  int gpus_per_node;
  bool gpipe; /* GPipe holds all M micro-batches' activations; 1F1B at most S */
} ScaleSplit;

typedef struct ScaleResult {
  double compute_s;    /* matrix and other work on the busiest GPU */
  double dp_s, tp_s, p2p_s; /* exposed communication of each kind */
  double bubble_s;     /* pipeline slots spent idle (S - 1 of M + S - 1) */
  double step_s;
  double memory;       /* bytes per GPU */
  double samples_per_s;
  double stage_share;  /* the largest stage's share of the forward cost */
} ScaleResult;

/* The step of split s.  `local` is the step at the batch one GPU group
 * computes at a time: B / D without a pipeline, B / D / M with one. */
ScaleResult scale_estimate(const ScaleDevice *d, const ScaleModel *m, const ScaleSplit *s, const ScaleStep *local);

#endif
