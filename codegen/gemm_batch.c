/* Linears that share their input, as one GEMM: takes a numbered graph,
 * its fusion groups and its init split, returns (by node id) the batch
 * each linear belongs to.  A batch is two or more linears of a run with
 * the same A (one value, or reshapes of it), the same in and out
 * features, dtypes and epilogue, whose weights (and biases, when the
 * GEMM adds them) are functions of the weights alone.  plan_build.c then
 * gives their results one arena slot, member i at i * stride_c, and
 * their weights one contiguous range of the derived region (init steps
 * fill it), and the first member lowered emits one strided-batched GEMM
 * with A's stride 0 for all (lower_gemm.c); the others emit none.
 *
 * Every operand is ready when the first member is lowered: A is its own
 * operand, the weights are computed before a run starts.  That is why a
 * weight that depends on an input never joins, and why no member's
 * result can be needed before another member's operand exists.  And
 * members lie between the same two barriers: run nodes that are neither
 * elementwise nor moves nor candidates (a product, a reduction, an
 * attention).  A later linear of the same input beyond one (a clone
 * that --recompute placed in the backward pass, a second layer's) would
 * otherwise have its result computed early and kept alive meanwhile. */
#include "lower.h"

/* What a linear's GEMM writes and how, when it may join a batch. */
typedef struct Member {
  const Value *a, *c;
  uint32_t epilogue;
  bool bias_after; /* lower_linear adds the bias by a kernel after (int8) */
} Member;

static const Value *unshaped(const Value *v) {
  while (v->def->op == OP_RESHAPE) v = v->def->in[0];
  return v;
}

/* A param, or a value the init steps compute. */
static bool of_weights(const CgInit *init, const Value *v) {
  v = unshaped(v);
  return v->def->op == OP_PARAM || init->node[v->def->id];
}

static bool is_output(const Graph *g, const Value *v) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return true;
  return false;
}

static bool is_float(DType t) { return t == TY_F32 || t == TY_F16 || t == TY_BF16; }

static bool member_of(const Graph *g, const CgGroup *grp, const CgInit *init, const Node *n, Member *m) {
  if (n->op != OP_LINEAR || init->node[n->id]) return false;
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  DType dt = x->type.dtype;
  bool int8 = dt == TY_I8 && w->type.dtype == TY_I8 && out->type.dtype == TY_I32 &&
              (n->n_in < 3 || n->in[2]->type.dtype == TY_I32);
  bool flt = is_float(dt) && w->type.dtype == dt && out->type.dtype == dt && (n->n_in < 3 || n->in[2]->type.dtype == dt);
  if ((!int8 && !flt) || ir_type_numel(&out->type) == 0 || x->type.dims[x->type.rank - 1] == 0) return false;
  if (!of_weights(init, w)) return false;
  *m = (Member){.a = unshaped(x), .c = out};
  if (!grp) {
    bool bias = n->n_in > 2;
    if (bias && flt) m->epilogue = RT_EPILOGUE_BIAS;
    m->bias_after = bias && int8;
  } else {
    const Node *lin = NULL;
    const Value *bias;
    uint32_t e = cg_gemm_epilogue_of(grp, &lin, &bias);
    if (e && lin == n) {
      m->c = &grp->root->out[0];
      m->epilogue = e;
    } else if (grp->attention == n || grp->scores == n || e) {
      return false;
    }
    /* else a leaf: the group's kernel adds the bias where it reads */
  }
  if (m->epilogue && !of_weights(init, n->in[2])) return false;
  return !is_output(g, m->c);
}

static bool same_kind(const Node *x, const Member *mx, const Node *y, const Member *my, const int *segment) {
  const TensorType *xa = &x->in[0]->type, *ya = &y->in[0]->type;
  return mx->a == my->a && segment[x->id] == segment[y->id] && mx->epilogue == my->epilogue && mx->bias_after == my->bias_after &&
         xa->dtype == ya->dtype && ir_type_numel(xa) == ir_type_numel(ya) &&
         xa->dims[xa->rank - 1] == ya->dims[ya->rank - 1] && x->in[1]->type.dims[0] == y->in[1]->type.dims[0] &&
         mx->c->type.dtype == my->c->type.dtype;
}

static int64_t padded(int64_t count, int64_t esize) {
  int64_t a = 256;
  return (count * esize + a - 1) / a * a / esize;
}

CgGemmBatch **cg_find_gemm_batches(Ctx *c, const Graph *g, CgGroup *const *groups, const CgInit *init) {
  int n_nodes = 0;
  for (const Node *n = g->first; n; n = n->next) n_nodes = n->id + 1 > n_nodes ? n->id + 1 : n_nodes;
  CgGemmBatch **of = ARENA_ARRAY(&c->arena, CgGemmBatch *, n_nodes + 1);
  Member *mem = ARENA_ARRAY(&c->arena, Member, n_nodes + 1);
  /* By node id: the group it is a member of. */
  const CgGroup **grp = ARENA_ARRAY(&c->arena, const CgGroup *, n_nodes + 1);
  for (int i = 0; i < n_nodes; i++)
    for (int j = 0; groups && groups[i] && j < groups[i]->n; j++) grp[groups[i]->members[j]->id] = groups[i];
  const Node **lins = ARENA_ARRAY(&c->arena, const Node *, n_nodes + 1);
  int *segment = ARENA_ARRAY(&c->arena, int, n_nodes + 1);
  int n_lins = 0, seg = 0;
  for (const Node *n = g->first; n; n = n->next) {
    if (member_of(g, n->group < 0 ? NULL : grp[n->id], init, n, &mem[n->id])) {
      segment[n->id] = seg;
      lins[n_lins++] = n;
      continue;
    }
    OpClass k = ir_ops[n->op].cls;
    seg += !init->node[n->id] && k != K_SOURCE && k != K_ELEMWISE && k != K_MOVE;
  }
  bool *taken = ARENA_ARRAY(&c->arena, bool, n_lins + 1);
  for (int i = 0; i < n_lins; i++) {
    if (taken[i]) continue;
    const Node *first = lins[i];
    int count = 1;
    for (int j = i + 1; j < n_lins; j++)
      count += !taken[j] && same_kind(first, &mem[first->id], lins[j], &mem[lins[j]->id], segment);
    if (count < 2) continue;
    CgGemmBatch *bt = ARENA_NEW(&c->arena, CgGemmBatch);
    bt->lin = ARENA_ARRAY(&c->arena, const Node *, count);
    bt->c = ARENA_ARRAY(&c->arena, const Value *, count);
    for (int j = i; j < n_lins; j++) {
      if (taken[j] || !same_kind(first, &mem[first->id], lins[j], &mem[lins[j]->id], segment)) continue;
      taken[j] = true;
      bt->lin[bt->n] = lins[j];
      bt->c[bt->n++] = mem[lins[j]->id].c;
      of[lins[j]->id] = bt;
    }
    const Value *w = first->in[1], *cv = bt->c[0];
    int64_t es = ir_dtype_size(w->type.dtype);
    bt->epilogue = mem[first->id].epilogue;
    /* One weight (bias) read by every member: stride 0, no copies. */
    bool one_w = true, one_bias = true;
    for (int j = 1; j < bt->n; j++) {
      one_w = one_w && bt->lin[j]->in[1] == w;
      one_bias = one_bias && bt->epilogue && bt->lin[j]->in[2] == first->in[2];
    }
    bt->stride_b = one_w ? 0 : padded(ir_type_numel(&w->type), es);
    bt->stride_c = padded(ir_type_numel(&cv->type), ir_dtype_size(cv->type.dtype));
    if (bt->epilogue && !one_bias) bt->stride_bias = padded(w->type.dims[0], es);
  }
  return of;
}
