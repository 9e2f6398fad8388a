/* Constant folding: takes a graph, replaces every op whose operands are
 * all const splats, and whose result is then a splat too, by a const of
 * its result type.  Elementwise ops are evaluated by the reference
 * interpreter on rank-0 copies of their operands, so a folded value is
 * exactly what ir_eval would have computed, rounding included.  Params
 * are not constants (weights arrive at load time): nothing over a param
 * is folded here; bn-fold leaves such subgraphs for the runtime. */
#include <math.h>
#include <string.h>

#include "ir/eval.h"
#include "passes/pass.h"

/* Integers beyond this do not survive the trip through a double. */
#define EXACT_INT_LIMIT 9007199254740992.0 /* 2^53 */

/* op applied elementwise to the scalars vals: false when the interpreter
 * refuses (an integer division by zero) or the result cannot be a const. */
static bool eval_scalar(Graph *g, const Node *n, const double *vals, double *out) {
  Graph *t = ir_graph_new(g->ctx, "fold");
  Value *in[2];
  for (int i = 0; i < n->n_in; i++) in[i] = &ir_const(t, vals[i], n->in[i]->type.dtype, n->loc)->out[0];
  Node *op = ir_node_new(t, n->op, n->n_in, in, n->loc);
  op->n_attrs = n->n_attrs;
  op->attrs = n->attrs;
  char err[256];
  if (!ir_infer(op, err, sizeof err)) return false;
  ir_append(t, op);
  const char *name = "y";
  ir_set_outputs(t, 1, &op->out, &name);
  Tensor result = {0};
  if (!ir_eval(t, NULL, NULL, &result, err, sizeof err)) return false;
  *out = ir_tensor_get(&result, 0);
  ir_tensor_free(&result);
  if (!ir_dtype_is_float(n->out[0].type.dtype) && fabs(*out) > EXACT_INT_LIMIT) return false;
  return true;
}

/* The splat value of n's result when every operand is a const splat. */
static bool fold_value(Graph *g, const Node *n, double *out) {
  if (n->n_out != 1 || n->n_in == 0) return false;
  double vals[8];
  if (n->n_in > (int)ARRAY_LEN(vals)) return false;
  for (int i = 0; i < n->n_in; i++)
    if (!pass_is_const(n->in[i], &vals[i])) return false;
  const TensorType *x = &n->in[0]->type;
  bool is_float = ir_dtype_is_float(x->dtype);
  switch (n->op) {
    case OP_BATCHNORM: return false; /* per-channel; never on consts in practice */
    case OP_RESHAPE:
    case OP_TRANSPOSE:
    case OP_EXPAND:
    case OP_SLICE:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN: *out = vals[0]; return true;
    case OP_PAD: {
      double fill;
      uint64_t buf = 0;
      Tensor t = {.type = {.dtype = x->dtype, .rank = 0}, .data = &buf};
      ir_tensor_set(&t, 0, ir_attr_float(n, "value"));
      fill = ir_tensor_get(&t, 0);
      if (!(fill == vals[0]) && !(isnan(fill) && isnan(vals[0]))) return false;
      *out = vals[0];
      return true;
    }
    case OP_CONCAT:
      for (int i = 1; i < n->n_in; i++)
        if (memcmp(&vals[i], &vals[0], sizeof(double)) != 0) return false;
      *out = vals[0];
      return true;
    /* A mean of equal values is the value when the double sum is exact:
     * at most 24 significant bits times fewer than 2^28 terms. */
    case OP_REDUCE_MEAN:
    case OP_GLOBAL_AVGPOOL:
      if (!is_float) return false;
      *out = vals[0];
      return true;
    case OP_REDUCE_SUM: {
      int64_t count = ir_type_numel(x) / ir_type_numel(&n->out[0].type);
      if (!is_float || count > ((int64_t)1 << 28)) return false;
      uint64_t buf = 0;
      Tensor t = {.type = {.dtype = x->dtype, .rank = 0}, .data = &buf};
      ir_tensor_set(&t, 0, vals[0] * (double)count);
      *out = ir_tensor_get(&t, 0);
      return true;
    }
    default: break;
  }
  if (ir_ops[n->op].cls != K_ELEMWISE) return false;
  return eval_scalar(g, n, vals, out);
}

bool pass_fold(Graph *g, PassCtx *pc) {
  PassRewrite *rw = pass_rewrite_new(g);
  int folded = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    double v;
    if (ir_ops[n->op].cls == K_SOURCE || !fold_value(g, n, &v)) continue;
    Value *c = pass_new_const(g, n, v, &n->out[0].type, n->loc);
    pass_rewrite_replace(rw, &n->out[0], c);
    ir_remove(g, n);
    folded++;
  }
  pass_rewrite_finish(rw);
  if (folded) pass_stat(pc, "fold: ops folded", folded);
  return folded > 0;
}
