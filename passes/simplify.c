/* Algebraic simplification: takes a graph, rewrites nodes that compute
 * something simpler than they say, each rewrite exact (the same numbers,
 * up to the sign of a zero):
 *   x*1, 1*x, x+0, 0+x, x-0, x/1, x**1, max(x,x), min(x,x)  -> x
 *   neg(neg x) -> x; relu(relu x) -> relu x; abs(abs x) -> abs x
 *   cast to x's own dtype -> x; cast(cast(x, B), C) -> cast(x, C) when B
 *     holds every value of x's dtype exactly
 *   reshape to x's shape, transpose by the identity, slice of the whole
 *     range, expand to x's shape, concat of one operand, pad by nothing -> x
 *   reshape(reshape x) -> reshape x; transpose(transpose x) -> one
 *     transpose by the composed permutation (or x when that is the identity)
 *   attention (layout "bhsd") of q, k, v that are each a transpose by
 *     [0, 2, 1, 3] -> the same attention in layout "bshd" of what they
 *     transpose, its result transposed back (a projection's heads then
 *     reach the kernel as they are, and the transpose a model applies to
 *     the result cancels this one)
 * An identity only applies when the result has x's type exactly (x*1 with
 * a larger 1 broadcasts).  Operands left unused are dce's. */
#include <string.h>

#include "passes/pass.h"

static bool is_splat(const Value *v, double want) {
  double c;
  return pass_is_const(v, &c) && c == want;
}

/* Every value of dtype a is exactly a value of dtype b. */
static bool cast_is_exact(DType a, DType b) {
  if (a == b) return true;
  switch (a) {
    case TY_BOOL: return true; /* 0 and 1 */
    case TY_I8: return b != TY_I8 && b != TY_BOOL && b != TY_U8;
    case TY_U8: return b != TY_I8 && b != TY_BOOL; /* 0..255: exact in bf16 too */
    case TY_I32: return b == TY_I64;
    case TY_F16:
    case TY_BF16: return b == TY_F32;
    default: return false;
  }
}

static bool same_type(const Value *a, const Value *b) { return ir_type_eq(&a->type, &b->type); }

/* x when n computes x; NULL otherwise. */
static Value *identity_of(const Node *n) {
  Value *const *in = n->in;
  const Value *out = &n->out[0];
  switch (n->op) {
    case OP_MUL:
      if (is_splat(in[1], 1) && same_type(in[0], out)) return in[0];
      if (is_splat(in[0], 1) && same_type(in[1], out)) return in[1];
      return NULL;
    case OP_ADD:
      if (is_splat(in[1], 0) && same_type(in[0], out)) return in[0];
      if (is_splat(in[0], 0) && same_type(in[1], out)) return in[1];
      return NULL;
    case OP_SUB:
      return is_splat(in[1], 0) && same_type(in[0], out) ? in[0] : NULL;
    case OP_DIV:
    case OP_POW:
      return is_splat(in[1], 1) && same_type(in[0], out) ? in[0] : NULL;
    case OP_MAXIMUM:
    case OP_MINIMUM: return in[0] == in[1] ? in[0] : NULL;
    case OP_NEG: return in[0]->def->op == OP_NEG ? in[0]->def->in[0] : NULL;
    case OP_RELU:
    case OP_ABS: return in[0]->def->op == n->op ? in[0] : NULL;
    case OP_CAST: return in[0]->type.dtype == out->type.dtype ? in[0] : NULL;
    case OP_RESHAPE:
    case OP_EXPAND: return same_type(in[0], out) ? in[0] : NULL;
    case OP_CONCAT: return n->n_in == 1 ? in[0] : NULL;
    case OP_TRANSPOSE: {
      int count;
      const int64_t *perm = ir_attr_ints(n, "perm", &count);
      for (int i = 0; i < count; i++)
        if (perm[i] != i) return NULL;
      return in[0];
    }
    case OP_SLICE: {
      int count;
      const int64_t *starts = ir_attr_ints(n, "starts", &count);
      const int64_t *ends = ir_attr_ints(n, "ends", NULL);
      const int64_t *steps = ir_attr_ints(n, "steps", NULL);
      for (int i = 0; i < count; i++)
        if (starts[i] != 0 || ends[i] != in[0]->type.dims[i] || steps[i] != 1) return NULL;
      return in[0];
    }
    case OP_PAD: {
      int count;
      const int64_t *pads = ir_attr_ints(n, "pads", &count);
      for (int i = 0; i < count; i++)
        if (pads[i] != 0) return NULL;
      return in[0];
    }
    default: return NULL;
  }
}

/* A node that replaces a pair (outer over inner); NULL when none. */
static Node *combine(Graph *g, Node *n) {
  Node *inner = n->in[0]->def;
  if (n->op != inner->op && !(n->op == OP_CAST && inner->op == OP_CAST)) return NULL;
  switch (n->op) {
    case OP_RESHAPE: {
      Node *r = pass_new_node(g, n, OP_RESHAPE, 1, &inner->in[0], n, n->loc);
      return r;
    }
    case OP_TRANSPOSE: {
      int count;
      const int64_t *outer = ir_attr_ints(n, "perm", &count);
      const int64_t *first = ir_attr_ints(inner, "perm", NULL);
      int64_t perm[DL_MAX_RANK];
      /* out[i] = mid[outer[i]] = x[first[outer[i]]] */
      for (int i = 0; i < count; i++) perm[i] = first[outer[i]];
      Node *t = ir_node_new(g, OP_TRANSPOSE, 1, &inner->in[0], n->loc);
      ir_set_ints(g, t, "perm", count, perm);
      char err[256];
      if (!ir_infer(t, err, sizeof err)) dl_internal(g->ctx, "composed transpose: %s", err);
      ir_insert_before(g, n, t);
      return t;
    }
    case OP_CAST: {
      DType a = inner->in[0]->type.dtype, b = inner->out[0].type.dtype;
      if (!cast_is_exact(a, b)) return NULL;
      return pass_new_node(g, n, OP_CAST, 1, &inner->in[0], n, n->loc);
    }
    default: return NULL;
  }
}

static bool swaps_heads(const Value *v) {
  if (v->def->op != OP_TRANSPOSE) return false;
  int count;
  const int64_t *perm = ir_attr_ints(v->def, "perm", &count);
  return count == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

static const int64_t heads_perm[4] = {0, 2, 1, 3};

/* The transpose back from an attention in layout "bshd" over the
 * operands of n's transposes; NULL when n is not such an attention. */
static Node *attention_bshd(Graph *g, Node *n) {
  if (n->op != OP_ATTENTION || strcmp(ir_attr_str(n, "layout"), "bhsd") != 0) return NULL;
  Value *in[4];
  for (int i = 0; i < n->n_in; i++) {
    if (i < 3 && !swaps_heads(n->in[i])) return NULL;
    in[i] = i < 3 ? n->in[i]->def->in[0] : n->in[i];
  }
  Node *a = ir_node_new(g, OP_ATTENTION, n->n_in, in, n->loc);
  a->scope = n->scope;
  ir_set_int(g, a, "causal", ir_attr_int(n, "causal"));
  if (ir_attr(n, "scale")) ir_set_float(g, a, "scale", ir_attr_float(n, "scale"));
  ir_set_str(g, a, "layout", "bshd");
  char err[256];
  if (!ir_infer(a, err, sizeof err)) dl_internal(g->ctx, "attention in bshd: %s", err);
  ir_insert_before(g, n, a);
  Value *result = &a->out[0];
  Node *t = ir_node_new(g, OP_TRANSPOSE, 1, &result, n->loc);
  ir_set_ints(g, t, "perm", 4, heads_perm);
  if (!ir_infer(t, err, sizeof err)) dl_internal(g->ctx, "attention in bshd: %s", err);
  ir_insert_before(g, n, t);
  return t;
}

bool pass_simplify(Graph *g, PassCtx *pc) {
  PassRewrite *rw = pass_rewrite_new(g);
  int identities = 0, pairs = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    if (ir_ops[n->op].cls == K_SOURCE || n->n_out != 1 || n->n_in == 0) continue;
    Value *x = identity_of(n);
    if (x) {
      identities++;
    } else {
      Node *r = n->op == OP_ATTENTION ? attention_bshd(g, n) : combine(g, n);
      if (!r) continue;
      pairs++;
      /* The combined node may itself be an identity (a cast back to x's
       * dtype, transposes that cancel): the walk reaches it next. */
      next = r;
      x = &r->out[0];
    }
    pass_rewrite_replace(rw, &n->out[0], x);
    ir_remove(g, n);
  }
  pass_rewrite_finish(rw);
  if (identities) pass_stat(pc, "simplify: identities removed", identities);
  if (pairs) pass_stat(pc, "simplify: pairs combined", pairs);
  return identities + pairs > 0;
}
