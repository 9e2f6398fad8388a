/* The stage split of pipeline parallelism (stages.c, docs/parallel.md):
 * takes a verified forward graph whose output 0 is its loss (training) or
 * an inference graph (every output wanted) and a stage count S, returns S contiguous runs of its topological
 * order balanced by the cost model (ir_cost), and builds each stage's own
 * graphs: the forward (stage inputs to the values its cut passes on), the
 * backward (re-materialisation: stage inputs and the gradients of its
 * outputs to the gradients of its inputs and parameters, through the
 * ordinary autodiff) and the optimizer's (a parameter's accumulated
 * gradient in, its update out). */
#ifndef DLCC_PASSES_STAGES_H
#define DLCC_PASSES_STAGES_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

typedef struct StageCut {
  int n;         /* values crossing it */
  Value **values; /* in graph order: what stage s-1 sends stage s */
  double bytes;
} StageCut;

typedef struct StageSplit {
  int n_stages;
  bool marked;       /* cut at the model's stage() marks, not by cost */
  bool inference;    /* pass_stage_split_inference's: the last stage returns every output */
  int *stage;        /* by Node.id: a computing node's stage, -1 for a source */
  int *first, *last; /* per stage: its first and last computing node's id */
  int *n_nodes;      /* per stage: computing nodes */
  double *cost;      /* per stage: ir_cost's FLOPs plus bytes, summed */
  double *param_bytes; /* per stage */
  double total;
  StageCut *cut; /* cut[s] for s in 1..n_stages-1: between stages s-1 and s; cut[0] empty */
  int *cuts;     /* stage s's computing nodes are [cuts[s], cuts[s + 1]) in list order */
} StageSplit;

/* Splits g (numbered by ir_number; arrays in g's arena).  Each stage gets
 * at least one computing node (input, param and const are sources: every
 * stage that reads one has its own); a cut may not separate two readers
 * of one float param (each param lives in one stage) nor carry a value that is
 * not floating point (its gradient could not come back), and the loss
 * (output 0) is computed by the last stage.  When g has stage nodes (the
 * language's stage(x)), they say where the cuts are: g's list is put in
 * stage order, each node as late as its readers allow, and the marks
 * must make exactly n_stages stages.  Otherwise, among the allowed cuts
 * it takes the least largest stage cost, then, within 10% of that, the
 * fewest bytes crossing the cuts; ties go to the earlier cut, so the
 * split is the same every run.  A node of weights alone (an export's
 * transposed weight) is moved in g's list to just before its first
 * reader and stays in that reader's stage where any cuts allow it.  False with a message when g cannot be
 * cut into n_stages stages. */
bool pass_stage_split(Graph *g, int n_stages, StageSplit *out, char *err, size_t errlen);
/* The same cuts as `like`, a split of the same model lowered at another
 * batch size (the same operations in the same order): a pipeline's plans
 * for a last, smaller batch, whose parameters must live in the same
 * stages whatever the cost model says at that size.  False with a
 * message when g's operations do not line up with like's or a cut is
 * not allowed in g. */
bool pass_stage_split_like(Graph *g, const StageSplit *like, StageSplit *out, char *err, size_t errlen);
/* The same for inference (dlcc run --pipeline): no gradient comes back,
 * so any value may cross a cut and a param read by several stages is
 * copied into each (param_bytes counts it in every one); every output of
 * g reaches the last stage, computed there or passed on through the cuts
 * (with marks, a node that is only an output is as late as it can be). */
bool pass_stage_split_inference(Graph *g, int n_stages, StageSplit *out, char *err, size_t errlen);

typedef enum {
  /* inputs "stage_in.K" (the values of cut s), outputs "stage_out.K"
   * (those of cut s+1); not for the last stage, except under an
   * inference split: there it returns g's outputs under their names */
  STAGE_FORWARD,
  /* "stage_in.K" are params, so their gradients come out beside the
   * weights'; inputs "stage_dy.K" take the gradients of the outputs and
   * the one output is the "loss" sum over K of sum(stage_out.K *
   * stage_dy.K), whose gradients are the stage's share of the real
   * loss's; the last stage's loss is the model's own */
  STAGE_BACKWARD,
  /* each float param P of the stage and an input "grad.P" of its type,
   * the output sum(P * grad.P): a training step of it applies the
   * optimizer with grad.P as P's gradient */
  STAGE_OPTIMIZER
} StageKind;

/* Stage s's graph of that kind, built in g's context; NULL after
 * reporting to g's diagnostics.  sync_bn > 0 (a training forward): its
 * batchnorms' statistics over that many ranks, as pass_train_batchnorm. */
Graph *pass_stage_graph(Graph *g, const StageSplit *sp, int s, StageKind kind, int sync_bn);

#endif
