/* Index bounds: takes a graph and an integer value, returns how large the
 * indices in it may be for every op that reads it as indices.  Hosts
 * need it to draw valid random inputs (dlcc run, dlc_input_info, a
 * model.so's dlrt_model_index_bound). */
#include "ir.h"

static int64_t min_extent(int64_t bound, int64_t extent) {
  return bound == 0 || extent < bound ? extent : bound;
}

/* The smallest of data's dims [first, first + count). */
static int64_t dims_extent(const TensorType *data, int64_t first, int64_t count) {
  int64_t e = 0;
  for (int64_t d = first; d < first + count && d < data->rank; d++) e = min_extent(e, data->dims[d]);
  return e;
}

/* The extent a use of v as operand i of n allows, 0 when n reads no
 * indices there. */
static int64_t use_extent(const Node *n, int i) {
  const TensorType *data = &n->in[0]->type;
  int q = n->in[i]->type.rank > 0 ? (int)n->in[i]->type.dims[n->in[i]->type.rank - 1] : 0;
  switch (n->op) {
    case OP_GATHER:
    case OP_GATHER_ELEMENTS:
      return i == 1 ? data->dims[ir_attr_int(n, "axis")] : 0;
    case OP_SCATTER_ELEMENTS:
      return i == 1 ? data->dims[ir_attr_int(n, "axis")] : 0;
    case OP_GATHER_ND:
      return i == 1 ? dims_extent(data, ir_attr_int(n, "batch_dims"), q) : 0;
    case OP_SCATTER_ND:
      return i == 1 ? dims_extent(data, 0, q) : 0;
    default: return 0;
  }
}

static bool passes_indices(OpKind op) {
  return op == OP_RESHAPE || op == OP_TRANSPOSE || op == OP_EXPAND || op == OP_SLICE || op == OP_CAST;
}

/* Each call scans the graph, and a value used by several reshapes fans
 * out at every level: work bounds the calls (a real model needs a few). */
static int64_t bound_of(const Graph *g, const Value *v, int depth, int *work) {
  int64_t bound = 0;
  if (depth > 8 || --*work < 0) return 0;
  for (const Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      if (n->in[i] != v) continue;
      int64_t e = passes_indices(n->op) && i == 0 ? bound_of(g, &n->out[0], depth + 1, work) : use_extent(n, i);
      if (e > 0) bound = min_extent(bound, e);
    }
  return bound;
}

int64_t ir_index_bound(const Graph *g, const Value *v) {
  int work = 64;
  return bound_of(g, v, 0, &work);
}
