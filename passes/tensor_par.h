/* Tensor parallelism, Megatron-style (tensor_par.c, docs/parallel.md):
 * takes a forward graph, the number of ranks T and this rank, and
 * returns the graph this rank runs: each pair linear(W1) -> ... ->
 * linear(W2) whose middle is elementwise (and head reshapes, attention)
 * computes its share, W1 split by output rows and W2 by input columns,
 * with tp_copy before W1 and allreduce_sum after W2; plus which parts of
 * which parameters this rank owns and a report of what was split and
 * what was not and why. */
#ifndef DLCC_PASSES_TENSOR_PAR_H
#define DLCC_PASSES_TENSOR_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

/* The part of a parameter the ranks share out: along axis, the range
 * [start, start + len), rank r owning [start + r * len / T, start + (r
 * + 1) * len / T).  Every rank keeps the whole parameter; only its own
 * part is read (and so has a gradient), so the rest goes stale and a
 * checkpoint takes each part from its owner. */
typedef struct TpSplit {
  const char *param;
  int axis;
  int64_t start, len;
} TpSplit;

typedef struct TpResult {
  int n_splits;
  TpSplit *splits;
  int n_lines;
  const char **lines; /* "split: ..." or "not split: NAME: why", in g's arena */
  int n_regions;      /* pairs (or attention blocks) split */
} TpResult;

/* Rewrites g (a forward graph, before autodiff) for rank of ranks (> 1).
 * Layers that do not split stay whole on every rank, each with its line
 * in out->lines.  False after reporting an internal error to g->ctx. */
bool pass_tensor_parallel(Graph *g, int ranks, int rank, TpResult *out);

#endif
