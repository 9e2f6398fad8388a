/* Tensor parallelism, Megatron-style (tensor_par.c, docs/parallel.md):
 * takes a forward graph, the number of ranks T and this rank, and
 * returns the graph this rank runs: each pair linear(W1) -> ... ->
 * linear(W2) whose middle is elementwise (and head reshapes, attention)
 * computes its share, W1 split by output rows and W2 by input columns,
 * with tp_copy before W1 and allreduce_sum after W2, and each embedding
 * larger than its lookups split by rows, the ranks' lookups summed; plus which parts of
 * which parameters this rank owns and a report of what was split and
 * what was not and why. */
#ifndef DLCC_PASSES_TENSOR_PAR_H
#define DLCC_PASSES_TENSOR_PAR_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

/* The part of a parameter the ranks share out: along axis, the range
 * [start, start + len), rank r owning [start + r * len / T, start + (r
 * + 1) * len / T).  When a parameter's splits tile its axis (sharded),
 * the rank's graph holds only its parts: the param's axis is 1/T of the
 * whole, its parts one after another in the order of start.  Otherwise
 * (splits that leave rows over) every rank keeps the whole parameter and
 * reads only its own part, the rest going stale. */
typedef struct TpSplit {
  const char *param;
  int axis;
  int64_t start, len;
  bool sharded;
} TpSplit;

typedef struct TpResult {
  int n_splits;
  TpSplit *splits;
  int n_lines;
  const char **lines; /* "split: ..." or "not split: NAME: why", in g's arena */
  int n_regions;      /* pairs (or attention blocks) split */
  int ranks, rank;
} TpResult;

typedef struct TpOptions {
  int ranks, rank;
  /* Run the attention pass first (when autodiff or the pipeline would:
   * pass_fuses_attention), so that an exported model's attention splits
   * by heads. */
  bool fuse_attention;
  /* No training step follows: a split parameter may also be read
   * outside its region (an exporter's one tensor of zeros for several
   * biases), each rank reading its part of the whole. */
  bool inference;
} TpOptions;

/* Rewrites g (a forward graph, before autodiff) for rank o->rank of
 * o->ranks (> 1).  Layers that do not split stay whole on every rank,
 * each with its line in out->lines.  False after reporting an internal
 * error to g->ctx. */
bool pass_tensor_parallel(Graph *g, const TpOptions *o, TpResult *out);

/* The names of the split params (tp->n_splits of them, in g's arena):
 * OptimSpec.tp_parts, whose clip norm and overflow check span the
 * tensor group. */
const char **tp_split_names(Graph *g, const TpResult *tp);

/* Whether param name is sharded; then *axis is its split axis. */
bool tp_is_sharded(const TpResult *tp, const char *name, int *axis);
/* Copies between a whole tensor of sharded param name (whole_dims, rank
 * dims, es bytes an element) and rank's part of it: to_whole writes
 * whole's elements that rank owns from part, else part from whole.
 * False when name is not sharded. */
bool tp_copy_part(const TpResult *tp, const char *name, int rank, int dims, const int64_t *whole_dims, size_t es,
                  void *whole, void *part, bool to_whole);

#endif
