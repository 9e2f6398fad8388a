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
 *     the result cancels this one); so attention_lse, and attention_grad
 *     whose out and dy are such transposes too (a training step's)
 *   a slice along the last axis of a product by weights (matmul by a
 *     weight matrix, linear), or of such a product plus a bias along that
 *     axis, every use of which is such a slice -> the product by the
 *     weights' slice (plus the bias's slice): GPT-2's c_attn split into
 *     q, k and v becomes three products codegen batches as one GEMM, and
 *     no kernel copies the slices out
 *   a product by a weight matrix that has a sibling (another product of
 *     the same x by a weight matrix of that shape), plus a bias vector
 *     when that add is its one use -> linear(x, W^T, bias): an ONNX
 *     export's q, k and v (MatMul then Add each) batch as one GEMM too
 *   a sum of zero pads whose operands tile one axis, each where its pad
 *     puts it -> their concat (the gradient of a packed weight's slices)
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

/* x when concat n joins slices of x that tile the axis in order, every
 * other axis whole (a tensor-parallel rank's q, k and v rows of its
 * local in_proj_weight); NULL otherwise. */
static Value *slices_rejoined(const Node *n) {
  int64_t axis = ir_attr_int(n, "axis"), at = 0;
  Value *x = n->in[0]->def->op == OP_SLICE ? n->in[0]->def->in[0] : NULL;
  if (!x || !same_type(x, &n->out[0])) return NULL;
  if (axis < 0) axis += x->type.rank;
  if (axis < 0 || axis >= x->type.rank) return NULL;
  for (int i = 0; i < n->n_in; i++) {
    const Node *s = n->in[i]->def;
    int count;
    const int64_t *starts = s->op == OP_SLICE ? ir_attr_ints(s, "starts", &count) : NULL;
    if (!starts || s->in[0] != x) return NULL;
    const int64_t *ends = ir_attr_ints(s, "ends", NULL), *steps = ir_attr_ints(s, "steps", NULL);
    for (int k = 0; k < count; k++)
      if (steps[k] != 1 || starts[k] != (k == axis ? at : 0) || ends[k] != (k == axis ? ends[k] : x->type.dims[k]))
        return NULL;
    at = ends[axis];
  }
  return at == x->type.dims[axis] ? x : NULL;
}

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
    case OP_CONCAT: return n->n_in == 1 ? in[0] : slices_rejoined(n);
    case OP_STAGE: return in[0]; /* read by the pipeline split before any pass */
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

/* n (an attention, attention_lse or attention_grad in layout "bhsd")
 * in layout "bshd" over in, its other attributes n's, inserted before
 * it. */
static Node *in_bshd(Graph *g, Node *n, Value **in) {
  Node *a = ir_node_new(g, n->op, n->n_in, in, n->loc);
  a->scope = n->scope;
  a->n_attrs = n->n_attrs;
  a->attrs = ARENA_ARRAY(&g->ctx->arena, Attr, n->n_attrs + 1);
  memcpy(a->attrs, n->attrs, sizeof(Attr) * (size_t)n->n_attrs);
  ir_set_str(g, a, "layout", "bshd");
  char err[256];
  if (!ir_infer(a, err, sizeof err)) dl_internal(g->ctx, "%s in bshd: %s", ir_ops[n->op].name, err);
  ir_insert_before(g, n, a);
  return a;
}

/* v [B, S, H, d] transposed to [B, H, S, d], inserted before n. */
static Value *heads_back(Graph *g, Node *n, Value *v) {
  Node *t = ir_node_new(g, OP_TRANSPOSE, 1, &v, n->loc);
  ir_set_ints(g, t, "perm", 4, heads_perm);
  char err[256];
  if (!ir_infer(t, err, sizeof err)) dl_internal(g->ctx, "attention in bshd: %s", err);
  ir_insert_before(g, n, t);
  return &t->out[0];
}

/* An attention (or attention_lse, or attention_grad) in layout "bhsd"
 * whose [B, H, S, d] operands (q, k and v; and out and dy for the
 * gradient) are each a transpose of [B, S, H, d]: the same op in layout
 * "bshd" over what they transpose, each [B, H, S, d] result replaced in
 * rw by the transpose back (which a model's own transposes then cancel;
 * an lse is [B, H, Sq] in either layout).  False when n is not one. */
static bool attention_bshd(Graph *g, PassRewrite *rw, Node *n) {
  int heads = n->op == OP_ATTENTION_GRAD ? 5 : 3;
  if ((n->op != OP_ATTENTION && n->op != OP_ATTENTION_LSE && n->op != OP_ATTENTION_GRAD) ||
      strcmp(ir_attr_str(n, "layout"), "bhsd") != 0)
    return false;
  Value **in = ARENA_ARRAY(&g->ctx->arena, Value *, n->n_in + 1);
  for (int i = 0; i < n->n_in; i++) {
    if (i < heads && !swaps_heads(n->in[i])) return false;
    in[i] = i < heads ? n->in[i]->def->in[0] : n->in[i];
  }
  Node *a = in_bshd(g, n, in);
  for (int o = 0; o < n->n_out; o++)
    pass_rewrite_replace(rw, &n->out[o], n->op == OP_ATTENTION_LSE && o == 1 ? &a->out[o] : heads_back(g, n, &a->out[o]));
  return true;
}

/* The axis a zero pad (pads >= 0, value 0) pads alone, and where its
 * operand starts along it; -1 when it is not one. */
static int pad_axis(const Node *n, int64_t *start) {
  if (n->op != OP_PAD || ir_attr_float(n, "value") != 0.0) return -1;
  int count, rank = n->out[0].type.rank, axis = -1;
  const int64_t *pads = ir_attr_ints(n, "pads", &count);
  if (count != 2 * rank) return -1;
  for (int d = 0; d < rank; d++) {
    if (pads[d] < 0 || pads[rank + d] < 0) return -1;
    if (!pads[d] && !pads[rank + d]) continue;
    if (axis >= 0) return -1;
    axis = d;
  }
  *start = axis >= 0 ? pads[axis] : 0;
  return axis;
}

enum { MAX_PIECES = 64 };

/* The leaves of the tree of adds at n (through adds of n's type that n
 * alone uses), up to MAX_PIECES; 0 when there are more. */
static int add_leaves(const PassUses *uses, const Node *n, const Value **out, int count) {
  for (int i = 0; i < 2; i++) {
    const Value *v = n->in[i];
    if (v->def->op == OP_ADD && pass_uses(uses, v) == 1 && ir_type_eq(&v->type, &n->out[0].type)) {
      count = add_leaves(uses, v->def, out, count);
      if (!count) return 0;
    } else {
      if (count == MAX_PIECES) return 0;
      out[count++] = v;
    }
  }
  return count;
}

/* A sum of zero pads of one type whose operands tile one axis, each
 * where its pad puts it (the gradient of slices that cut a packed
 * weight: PyTorch's in_proj_weight into q, k and v) -> their concat
 * along that axis; NULL when n's adds are not one.  Exact: each element
 * is one operand's plus zeros. */
static Node *pads_as_concat(Graph *g, const PassUses *uses, Node *n) {
  if (n->op != OP_ADD || !ir_type_eq(&n->in[0]->type, &n->out[0].type) ||
      !ir_type_eq(&n->in[1]->type, &n->out[0].type))
    return NULL;
  const Value *leaf[MAX_PIECES];
  int count = add_leaves(uses, n, leaf, 0), axis = -1;
  if (count < 2) return NULL;
  int64_t start[MAX_PIECES];
  for (int i = 0; i < count; i++) {
    int a = pad_axis(leaf[i]->def, &start[i]);
    if (a < 0 || (axis >= 0 && a != axis)) return NULL;
    axis = a;
  }
  /* in order along the axis, each starting where the one before ends */
  Value *in[MAX_PIECES];
  int64_t at = 0;
  for (int k = 0; k < count; k++) {
    int next = -1;
    for (int i = 0; i < count && next < 0; i++)
      if (start[i] == at) next = i;
    if (next < 0) return NULL;
    in[k] = leaf[next]->def->in[0];
    at += in[k]->type.dims[axis];
  }
  if (at != n->out[0].type.dims[axis]) return NULL;
  Node *c = ir_node_new(g, OP_CONCAT, count, in, n->loc);
  c->scope = n->scope;
  ir_set_int(g, c, "axis", axis);
  char err[256];
  if (!ir_infer(c, err, sizeof err) || !ir_type_eq(&c->out[0].type, &n->out[0].type))
    dl_internal(g->ctx, "pads as a concat: %s", err);
  ir_insert_before(g, n, c);
  return c;
}

/* The last axis's range [lo, hi) when n slices that axis alone (step
 * 1, every other axis whole). */
static bool last_axis_slice(const Node *n, int64_t *lo, int64_t *hi) {
  if (n->op != OP_SLICE) return false;
  int count;
  const int64_t *starts = ir_attr_ints(n, "starts", &count);
  const int64_t *ends = ir_attr_ints(n, "ends", NULL), *steps = ir_attr_ints(n, "steps", NULL);
  const TensorType *t = &n->in[0]->type;
  if (count != t->rank || count == 0) return false;
  for (int i = 0; i < count; i++) {
    if (steps[i] != 1) return false;
    if (i < count - 1 && (starts[i] != 0 || ends[i] != t->dims[i])) return false;
  }
  *lo = starts[count - 1], *hi = ends[count - 1];
  return *lo < *hi;
}

typedef struct Slicer {
  Graph *g;
  Node *before;
  const bool *weights; /* by the ids pass_weight_only gave */
  const PassUses *uses;
  const int *slice_uses; /* by id: uses that are last-axis slices */
  int n_ids;
} Slicer;

/* v[..., lo:hi] as a plain slice of `axis` (negative: from the end). */
static Value *slice_of(Slicer *S, Value *v, int axis, int64_t lo, int64_t hi) {
  const TensorType *t = &v->type;
  int r = t->rank;
  if (axis < 0) axis += r;
  int64_t starts[DL_MAX_RANK], ends[DL_MAX_RANK], steps[DL_MAX_RANK];
  for (int i = 0; i < r; i++) starts[i] = 0, ends[i] = t->dims[i], steps[i] = 1;
  starts[axis] = lo, ends[axis] = hi;
  Node *n = ir_node_new(S->g, OP_SLICE, 1, &v, S->before->loc);
  n->scope = S->before->scope;
  ir_set_ints(S->g, n, "starts", r, starts);
  ir_set_ints(S->g, n, "ends", r, ends);
  ir_set_ints(S->g, n, "steps", r, steps);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(S->g->ctx, "simplify: a weight's slice: %s", err);
  ir_insert_before(S->g, S->before, n);
  return &n->out[0];
}

static bool is_weight(const Slicer *S, const Value *v) {
  return v->def->id >= 0 && v->def->id < S->n_ids && S->weights[v->def->id];
}

/* Whether v's node may be computed in parts: v is its only result, made
 * before this walk, and every use of it is this path or such a slice. */
static bool divisible(const Slicer *S, const Value *v) {
  const Node *p = v->def;
  if (p->n_out != 1 || p->id < 0 || p->id >= S->n_ids || is_weight(S, v)) return false;
  int uses = pass_uses(S->uses, v);
  return uses == 1 || uses == S->slice_uses[p->id];
}

/* linear(x, w^T, bias) for a weight matrix w [K, N], or linear(x, w,
 * bias) when w_nk (stored [N, K] already): the transpose is computed
 * with the weights, once. */
static Value *linear_by(Slicer *S, Value *x, Value *w, bool w_nk, Value *bias) {
  if (!w_nk) {
    static const int64_t swap[2] = {1, 0};
    Node *t = ir_node_new(S->g, OP_TRANSPOSE, 1, &w, S->before->loc);
    t->scope = S->before->scope;
    ir_set_ints(S->g, t, "perm", 2, swap);
    char err[256];
    if (!ir_infer(t, err, sizeof err)) dl_internal(S->g->ctx, "simplify: a weight's transpose: %s", err);
    ir_insert_before(S->g, S->before, t);
    w = &t->out[0];
  }
  Value *in[3] = {x, w, bias};
  return &pass_new_node(S->g, S->before, OP_LINEAR, bias ? 3 : 2, in, NULL, S->before->loc)->out[0];
}

/* x @ W[:, lo:hi] (+ bias) as linear(x, W[:, lo:hi]^T, bias) when v is
 * x @ W with W a weight matrix and x of rank 2 or more; NULL otherwise.
 * The transposed part is computed with the weights, once. */
static Value *as_linear(Slicer *S, Value *v, int64_t lo, int64_t hi, Value *bias) {
  Node *p = v->def;
  if (p->op != OP_MATMUL || !divisible(S, v)) return NULL;
  Value *x = p->in[0], *w = p->in[1];
  if (!is_weight(S, w) || is_weight(S, x) || w->type.rank != 2 || x->type.rank < 2 || ir_matmul_trans(p, 0))
    return NULL;
  bool wt = ir_matmul_trans(p, 1); /* W stored [N, K] already */
  return linear_by(S, x, slice_of(S, w, wt ? 0 : 1, lo, hi), wt, bias);
}

/* v[..., lo:hi] computed from parts of v's operands where v is a product
 * by weights or such a product plus a bias along the last axis; NULL
 * when it is not (the caller keeps its slice). */
static Value *sliced_product(Slicer *S, Value *v, int64_t lo, int64_t hi, int depth) {
  Node *p = v->def;
  if (depth > 2 || !divisible(S, v)) return NULL;
  const TensorType *t = &v->type;
  int64_t n = t->dims[t->rank - 1];
  switch (p->op) {
    case OP_ADD: {
      /* the product's part plus the bias's (a bias broadcast along the
       * axis as it is) */
      Value *in[2];
      int products = 0;
      for (int i = 0; i < 2; i++) {
        Value *o = p->in[i];
        int64_t last = o->type.rank ? o->type.dims[o->type.rank - 1] : 1;
        if (!is_weight(S, o)) {
          if (last != n) return NULL;
          products++;
          continue;
        }
        in[i] = last == 1 ? o : last == n ? slice_of(S, o, -1, lo, hi) : NULL;
        if (!in[i]) return NULL;
      }
      if (products != 1) return NULL;
      int j = is_weight(S, p->in[0]) ? 1 : 0;
      /* x @ W + b with a bias vector: a linear, so that codegen batches
       * the parts as it batches q, k and v's projections */
      Value *bias = in[1 - j];
      if (bias->type.rank == 1 && bias != p->in[1 - j] && (in[j] = as_linear(S, p->in[j], lo, hi, bias)))
        return in[j];
      if (!(in[j] = sliced_product(S, p->in[j], lo, hi, depth + 1))) return NULL;
      return &pass_new_node(S->g, S->before, OP_ADD, 2, in, NULL, S->before->loc)->out[0];
    }
    case OP_MATMUL: {
      Value *lin = as_linear(S, v, lo, hi, NULL);
      if (lin) return lin;
      Value *w = p->in[1];
      if (!is_weight(S, w) || is_weight(S, p->in[0]) || w->type.rank < 2) return NULL;
      Value *in[2] = {p->in[0], slice_of(S, w, ir_matmul_trans(p, 1) ? -2 : -1, lo, hi)};
      return &pass_new_node(S->g, S->before, OP_MATMUL, 2, in, p, S->before->loc)->out[0];
    }
    case OP_LINEAR: {
      if (!is_weight(S, p->in[1]) || is_weight(S, p->in[0]) || (p->n_in > 2 && !is_weight(S, p->in[2])))
        return NULL;
      Value *in[3] = {p->in[0], slice_of(S, p->in[1], 0, lo, hi),
                      p->n_in > 2 ? slice_of(S, p->in[2], 0, lo, hi) : NULL};
      return &pass_new_node(S->g, S->before, OP_LINEAR, p->n_in, in, p, S->before->loc)->out[0];
    }
    default: return NULL;
  }
}

/* x @ W by a weight matrix, x of rank 2 or more and not transposed, in a
 * float dtype: a product a linear computes as well. */
static bool weight_product(const Slicer *S, const Node *p) {
  if (p->op != OP_MATMUL || ir_matmul_trans(p, 0)) return false;
  const Value *x = p->in[0], *w = p->in[1];
  DType dt = x->type.dtype;
  return is_weight(S, w) && !is_weight(S, x) && w->type.rank == 2 && x->type.rank >= 2 && w->type.dtype == dt &&
         (dt == TY_F32 || dt == TY_F16 || dt == TY_BF16);
}

static int64_t product_n(const Node *p) { return p->out[0].type.dims[p->out[0].type.rank - 1]; }

/* By id: the weight products that have a sibling (a product of the same
 * x by a weight matrix of the same shape), so that as linears codegen
 * batches them into one GEMM (an ONNX export's q, k and v projections,
 * MatMul then Add each); by an Add's id, the sibling product it alone
 * adds a bias vector to (that Add becomes the linear with its bias), and
 * such products marked in to_add. */
static void find_siblings(Slicer *S, bool *sibling, const Node **biased, bool *to_add) {
  Graph *g = S->g;
  int n = 0;
  const Node **prods = ARENA_ARRAY(&g->ctx->arena, const Node *, S->n_ids + 1);
  /* A product cut into slices, or plus a bias and then cut, is the rule
   * above's (its parts batch), and two products by one weight are cse's. */
  bool *cut = ARENA_ARRAY(&g->ctx->arena, bool, S->n_ids + 1);
  for (const Node *a = g->first; a; a = a->next)
    if (a->op == OP_ADD && a->id >= 0 && a->id < S->n_ids && S->slice_uses[a->id])
      for (int k = 0; k < 2; k++) {
        const Node *d = a->in[k]->def;
        if (d->id >= 0 && d->id < S->n_ids) cut[d->id] = true;
      }
  for (const Node *p = g->first; p; p = p->next)
    if (p->id >= 0 && p->id < S->n_ids && weight_product(S, p) && !S->slice_uses[p->id] && !cut[p->id])
      prods[n++] = p;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j && prods[i]->in[0] == prods[j]->in[0] && prods[i]->in[1] != prods[j]->in[1] &&
          product_n(prods[i]) == product_n(prods[j]) &&
          ir_type_eq(&prods[i]->in[1]->type, &prods[j]->in[1]->type) &&
          ir_matmul_trans(prods[i], 1) == ir_matmul_trans(prods[j], 1))
        sibling[prods[i]->id] = true;
  for (const Node *a = g->first; a; a = a->next) {
    if (a->op != OP_ADD || a->id < 0 || a->id >= S->n_ids) continue;
    for (int k = 0; k < 2; k++) {
      const Value *v = a->in[k], *b = a->in[1 - k];
      const Node *p = v->def;
      if (p->id >= 0 && p->id < S->n_ids && sibling[p->id] && pass_uses(S->uses, v) == 1 && !S->slice_uses[a->id] &&
          is_weight(S, b) &&
          b->type.rank == 1 && b->type.dims[0] == product_n(p) && b->type.dtype == v->type.dtype &&
          ir_type_eq(&a->out[0].type, &v->type)) {
        biased[a->id] = p;
        to_add[p->id] = true;
        break;
      }
    }
  }
}

bool pass_simplify(Graph *g, PassCtx *pc) {
  Slicer S = {.g = g, .weights = pass_weight_only(g), .uses = pass_uses_new(g)};
  for (Node *n = g->first; n; n = n->next) S.n_ids = n->id + 1 > S.n_ids ? n->id + 1 : S.n_ids;
  int *slice_uses = ARENA_ARRAY(&g->ctx->arena, int, S.n_ids + 1);
  for (Node *n = g->first; n; n = n->next) {
    int64_t lo, hi;
    if (last_axis_slice(n, &lo, &hi)) slice_uses[n->in[0]->def->id]++;
  }
  S.slice_uses = slice_uses;
  bool *sibling = ARENA_ARRAY(&g->ctx->arena, bool, S.n_ids + 1);
  const Node **biased = ARENA_ARRAY(&g->ctx->arena, const Node *, S.n_ids + 1);
  bool *to_add = ARENA_ARRAY(&g->ctx->arena, bool, S.n_ids + 1);
  find_siblings(&S, sibling, biased, to_add);
  PassRewrite *rw = pass_rewrite_new(g);
  int identities = 0, pairs = 0, parts = 0, linears = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    if (attention_bshd(g, rw, n)) {
      /* the transposes back, before n, combine with the model's own
       * where the walk reaches those */
      pairs++;
      ir_remove(g, n);
      continue;
    }
    if (ir_ops[n->op].cls == K_SOURCE || n->n_out != 1 || n->n_in == 0) continue;
    Value *x = identity_of(n);
    Node *cat;
    int64_t lo, hi;
    bool old = n->id >= 0 && n->id < S.n_ids;
    const Node *p = old && n->op == OP_ADD ? biased[n->id] : NULL;
    if (x) {
      identities++;
    } else if (p || (old && n->op == OP_MATMUL && sibling[n->id] && !to_add[n->id])) {
      S.before = n;
      Value *bias = p ? n->in[n->in[0]->def == p ? 1 : 0] : NULL;
      if (!p) p = n;
      x = linear_by(&S, p->in[0], p->in[1], ir_matmul_trans(p, 1), bias);
      linears++;
      next = n->next;
    } else if (last_axis_slice(n, &lo, &hi) && (S.before = n, x = sliced_product(&S, n->in[0], lo, hi, 0))) {
      /* nodes made here have no id: the walk, which reaches them next,
       * leaves them alone */
      parts++;
      next = n->next;
    } else if ((cat = pads_as_concat(g, S.uses, n))) {
      x = &cat->out[0];
      pairs++;
    } else {
      Node *r = combine(g, n);
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
  if (parts) pass_stat(pc, "simplify: slices of products computed as products of slices", parts);
  if (linears) pass_stat(pc, "simplify: products by weights made linears to batch", linears);
  return identities + pairs + parts + linears > 0;
}
