/* Two passes that fold per-channel and scalar affine maps, for inference.
 *
 * bn-fold: takes a graph, rewrites every batchnorm whose operand is a
 * conv2d or a rank-2 linear used by nothing else into that conv/linear
 * with new weights and bias:
 *     s  = gamma * rsqrt(var + eps)                (per output channel)
 *     W' = W * reshape(s, [C, 1, ...])
 *     b' = (b - mean) * s + beta,   or beta - mean * s without a bias
 * Weights are only known at load time, so W' and b' are small subgraphs
 * over params; they compute the same thing on every run, and a runtime
 * step that evaluates param-only subgraphs once at load is where they
 * belong (docs/passes.md).
 *
 * scale-shift: takes a graph, collapses chains of mul/add/sub/div/neg by
 * const splats (each link used only by the next, none broadcasting) into
 * at most one mul and one add: ((x*a)+b)*c -> x*(a*c) + b*c.  The
 * coefficients are computed in double and rounded once, so the result may
 * differ from the chain's in the last bit of each step. */
#include <math.h>

#include "ir/eval.h"
#include "passes/pass.h"

/* ---- bn-fold ---- */

static Value *binop(Graph *g, Node *before, OpKind op, Value *a, Value *b, SrcLoc loc) {
  Value *in[2] = {a, b};
  return &pass_new_node(g, before, op, 2, in, NULL, loc)->out[0];
}

static Value *unop(Graph *g, Node *before, OpKind op, Value *a, SrcLoc loc) {
  return &pass_new_node(g, before, op, 1, &a, NULL, loc)->out[0];
}

/* The folded conv/linear for bn over y = mm(x, W[, b]); NULL when bn
 * does not fit. */
static Node *fold_bn(Graph *g, Node *bn, const PassUses *uses) {
  Value *y = bn->in[0];
  Node *mm = y->def;
  if (mm->op != OP_CONV2D && mm->op != OP_CONV3D && mm->op != OP_LINEAR) return NULL;
  if (ir_conv_nhwc(mm)) return NULL; /* its channels are the last axis, not 1 */
  if (ir_attr(bn, "batch_stats")) return NULL; /* statistics of y itself, not constants */
  if (mm->op == OP_LINEAR && y->type.rank != 2) return NULL; /* channel must be dim 1 */
  if (pass_uses(uses, y) != 1) return NULL;                   /* someone needs y unnormalized */
  const TensorType *t = &y->type;
  Value *gamma = bn->in[1], *beta = bn->in[2], *mean = bn->in[3], *var = bn->in[4];
  Value *w = mm->in[1];
  SrcLoc loc = bn->loc;
  TensorType scalar = {.dtype = t->dtype, .rank = 0};
  Value *eps = pass_new_const(g, bn, ir_attr_float(bn, "eps"), &scalar, loc);
  Value *s = binop(g, bn, OP_MUL, gamma, unop(g, bn, OP_RSQRT, binop(g, bn, OP_ADD, var, eps, loc), loc), loc);
  int64_t shape[DL_MAX_RANK];
  shape[0] = w->type.dims[0];
  for (int i = 1; i < w->type.rank; i++) shape[i] = 1;
  Node *r = ir_node_new(g, OP_RESHAPE, 1, &s, loc);
  ir_set_ints(g, r, "shape", w->type.rank, shape);
  char err[256];
  if (!ir_infer(r, err, sizeof err)) dl_internal(g->ctx, "bn-fold reshape: %s", err);
  ir_insert_before(g, bn, r);
  Value *w2 = binop(g, bn, OP_MUL, w, &r->out[0], loc);
  Value *b2 = mm->n_in > 2
                  ? binop(g, bn, OP_ADD, binop(g, bn, OP_MUL, binop(g, bn, OP_SUB, mm->in[2], mean, loc), s, loc), beta, loc)
                  : binop(g, bn, OP_SUB, beta, binop(g, bn, OP_MUL, mean, s, loc), loc);
  Value *in[3] = {mm->in[0], w2, b2};
  return pass_new_node(g, bn, mm->op, 3, in, mm, mm->loc);
}

bool pass_bn_fold(Graph *g, PassCtx *pc) {
  PassUses *uses = pass_uses_new(g);
  PassRewrite *rw = pass_rewrite_new(g);
  int folded = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    if (n->op != OP_BATCHNORM) continue;
    Node *mm = n->in[0]->def;
    Node *f = fold_bn(g, n, uses);
    if (!f) continue;
    pass_rewrite_replace(rw, &n->out[0], &f->out[0]);
    ir_remove(g, n);
    ir_remove(g, mm);
    folded++;
  }
  pass_rewrite_finish(rw);
  if (folded) pass_stat(pc, "bn-fold: batch norms folded", folded);
  return folded > 0;
}

/* ---- scale-shift ---- */

/* n as x*s + t over a const splat; false when it is not such a link. */
static bool affine_link(const Node *n, Value **x, double *s, double *t) {
  if (n->n_out != 1 || !ir_dtype_is_float(n->out[0].type.dtype)) return false;
  if (n->op == OP_NEG) {
    *x = n->in[0], *s = -1, *t = 0;
    return true;
  }
  if (n->op != OP_MUL && n->op != OP_ADD && n->op != OP_SUB && n->op != OP_DIV) return false;
  double c;
  int k; /* the operand that is not the const */
  if (pass_is_const(n->in[1], &c)) k = 0;
  else if (pass_is_const(n->in[0], &c) && n->op != OP_DIV) k = 1;
  else return false;
  *x = n->in[k];
  if (!ir_type_eq(&(*x)->type, &n->out[0].type) || !isfinite(c)) return false;
  switch (n->op) {
    case OP_MUL: *s = c, *t = 0; return true;
    case OP_ADD: *s = 1, *t = c; return true;
    case OP_SUB: *s = k == 0 ? 1 : -1, *t = k == 0 ? -c : c; return true;
    case OP_DIV:
      if (c == 0) return false;
      *s = 1 / c, *t = 0;
      return true;
    default: return false;
  }
}

static bool is_scale(const Node *n) { return n->op == OP_MUL || n->op == OP_DIV || n->op == OP_NEG; }

static double round_to(DType dt, double v) {
  uint64_t buf = 0;
  Tensor t = {.type = {.dtype = dt, .rank = 0}, .data = &buf};
  ir_tensor_set(&t, 0, v);
  return ir_tensor_get(&t, 0);
}

bool pass_scale_shift(Graph *g, PassCtx *pc) {
  PassUses *uses = pass_uses_new(g);
  PassRewrite *rw = pass_rewrite_new(g);
  int collapsed = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    Value *x;
    double s, t;
    if (!affine_link(n, &x, &s, &t)) continue;
    /* Extend down through links used only by this chain. */
    int len = 1;
    Node *below = n; /* the lowest link so far */
    for (;;) {
      Value *x2;
      double s2, t2;
      if (pass_uses(uses, x) != 1 || !affine_link(x->def, &x2, &s2, &t2)) break;
      below = x->def;
      /* (x2*s2 + t2)*s + t */
      t = t2 * s + t;
      s = s2 * s;
      x = x2;
      len++;
    }
    DType dt = n->out[0].type.dtype;
    s = round_to(dt, s);
    t = round_to(dt, t);
    if (!isfinite(s) || !isfinite(t)) continue;
    int cost = (s != 1) + (t != 0);
    /* Same length is worth it only to move the scale below the shift, so
     * that a later link can merge. */
    bool reorder = len == 2 && cost == 2 && !is_scale(below) && is_scale(n);
    if (cost >= len && !reorder) continue;
    TensorType scalar = {.dtype = dt, .rank = 0};
    Value *y = x;
    if (s != 1) {
      Value *in[2] = {y, pass_new_const(g, n, s, &scalar, n->loc)};
      y = &pass_new_node(g, n, OP_MUL, 2, in, NULL, n->loc)->out[0];
    }
    if (t != 0) {
      if (y != x) pass_uses_add(uses, y, 1);
      Value *in[2] = {y, pass_new_const(g, n, t, &scalar, n->loc)};
      y = &pass_new_node(g, n, OP_ADD, 2, in, NULL, n->loc)->out[0];
    }
    pass_uses_add(uses, y, pass_uses(uses, &n->out[0]));
    pass_rewrite_replace(rw, &n->out[0], y);
    ir_remove(g, n);
    collapsed++;
  }
  pass_rewrite_finish(rw);
  if (collapsed) pass_stat(pc, "scale-shift: chains collapsed", collapsed);
  return collapsed > 0;
}
