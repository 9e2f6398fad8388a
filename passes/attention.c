/* The attention pass: takes a graph, rewrites each chain
 *     matmul(softmax(masks(scale(matmul(Q, Kt)))), V)
 * over rank-4 [B, H, S, d] operands of one float dtype, the softmax over
 * the last axis and every link used by nothing else, into one attention
 * op (codegen/attention.c), so that the chains of older ONNX exports and
 * graphs written by hand get the fused kernel.  scale is a mul or div by
 * a const splat (or nothing: scale 1); masks are up to 8 layers of
 * add(., M), where(C, ., -inf) and where(C, -inf, .), combined into the
 * op's one mask (bool: attend where true; float: added), the where's
 * fill -inf or finfo.min-like.  A layer computed from consts alone that
 * is exactly causal becomes the op's causal flag instead.  K is Kt with
 * its last two axes swapped (a transpose of a transpose becomes one); K
 * and V repeated to every query head by repeat_kv's reshape, expand,
 * reshape reach the op un-repeated (docs/attention.md has the details).
 *
 * The probabilities may be PyTorch's safe softmax as exporters write it,
 * where(isnan(P), 0, P).  Otherwise there is one difference: a row that
 * every mask hides entirely is NaN from the unfused softmax and 0 from
 * the op (PyTorch's behaviour since 2.5). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/eval.h"
#include "passes/pass.h"

/* A mask layer over the scores: add(., value), or where(value, ., -inf)
 * (keep), or where(value, -inf, .) (!keep). */
typedef enum { LAYER_ADD, LAYER_KEEP, LAYER_DROP } LayerKind;
typedef struct Layer {
  LayerKind kind;
  Value *value;
  bool floor; /* a where's fill is finfo.min-like, not -inf */
} Layer;

/* The largest mask the pass evaluates to see whether it is causal
 * (S = 4096 at one head). */
enum { MAX_LAYERS = 8, MAX_MASK_ELEMS = 1 << 24 };

/* Half the dtype's lowest finite value: a fill at or below it hides a
 * score as -inf does whenever the row keeps one key (HF writes
 * torch.finfo(dtype).min). */
static double hide_floor(DType dt) {
  switch (dt) {
    case TY_F16: return -65504.0 / 2;
    case TY_BF16: return -3.3895313892515355e38 / 2;
    case TY_F64: return -DBL_MAX / 2;
    default: return -FLT_MAX / 2;
  }
}

/* A splat that hides a score: -inf, or (floor set) finfo.min-like. */
static bool is_hiding(const Value *v, bool *floor) {
  double x;
  if (!pass_is_const(v, &x) || x > hide_floor(v->type.dtype)) return false;
  *floor = x != -INFINITY;
  return true;
}

/* Whether m broadcasts into t without growing it. */
static bool fits_into(const TensorType *m, const TensorType *t) {
  if (m->rank > t->rank) return false;
  for (int i = 1; i <= m->rank; i++)
    if (m->dims[m->rank - i] != 1 && m->dims[m->rank - i] != t->dims[t->rank - i]) return false;
  return true;
}

/* The scores x under its mask layers and scale: the first matmul's
 * result (layers and *scale filled), or NULL.  Every link is used once
 * and keeps x's shape; an add's scores side is the one that leads to
 * the matmul. */
static Value *scores_of(Value *x, const PassUses *uses, Layer *layers, int *n_layers, double *scale) {
  Node *n = x->def;
  if (pass_uses(uses, x) != 1) return NULL;
  if (n->op == OP_MATMUL) return x;
  double c;
  if ((n->op == OP_MUL || n->op == OP_DIV) && *scale == 1) {
    int ci = n->op == OP_MUL && pass_is_const(n->in[0], &c) ? 0 : 1;
    Value *s = n->in[1 - ci];
    if (!pass_is_const(n->in[ci], &c) || c == 0 || !ir_dims_eq(&s->type, &x->type)) return NULL;
    *scale = n->op == OP_MUL ? c : 1 / c;
    /* the scale is the innermost link: a matmul must follow */
    return s->def->op == OP_MATMUL && pass_uses(uses, s) == 1 ? s : NULL;
  }
  if (*n_layers == MAX_LAYERS) return NULL;
  Layer *l = &layers[(*n_layers)++];
  if (n->op == OP_ADD) {
    for (int side = 0; side < 2; side++) {
      Value *s = n->in[side], *mask = n->in[1 - side];
      if (!ir_dims_eq(&s->type, &x->type) || !fits_into(&mask->type, &x->type)) continue;
      int saved = *n_layers;
      double saved_scale = *scale;
      *l = (Layer){LAYER_ADD, mask, false};
      Value *r = scores_of(s, uses, layers, n_layers, scale);
      if (r) return r;
      *n_layers = saved, *scale = saved_scale;
    }
  } else if (n->op == OP_WHERE && n->in[0]->type.dtype == TY_BOOL && fits_into(&n->in[0]->type, &x->type)) {
    bool floor = false;
    int arm = is_hiding(n->in[2], &floor) ? 1 : is_hiding(n->in[1], &floor) ? 2 : 0;
    if (arm && ir_dims_eq(&n->in[arm]->type, &x->type)) {
      *l = (Layer){arm == 1 ? LAYER_KEEP : LAYER_DROP, n->in[0], floor};
      return scores_of(n->in[arm], uses, layers, n_layers, scale);
    }
  }
  (*n_layers)--;
  return NULL;
}

static Value *binop(Graph *g, Node *before, OpKind op, Value *a, Value *b) {
  Value *in[2] = {a, b};
  return &pass_new_node(g, before, op, 2, in, NULL, before->loc)->out[0];
}

/* The layers as the op's one mask (NULL: none): the bool ones and'ed,
 * the added ones summed, and both together as a sum with where(keep, 0,
 * -inf). */
static Value *one_mask(Graph *g, Node *before, const Layer *layers, int n, DType dt) {
  Value *add = NULL, *keep = NULL;
  for (int i = 0; i < n; i++) {
    Value *v = layers[i].value;
    if (layers[i].kind == LAYER_ADD) {
      add = add ? binop(g, before, OP_ADD, add, v) : v;
      continue;
    }
    if (layers[i].kind == LAYER_DROP) v = &pass_new_node(g, before, OP_LOGICAL_NOT, 1, &v, NULL, before->loc)->out[0];
    keep = keep ? binop(g, before, OP_LOGICAL_AND, keep, v) : v;
  }
  if (!keep || !add) return keep ? keep : add;
  TensorType scalar = {.dtype = dt, .rank = 0};
  Value *in[3] = {keep, pass_new_const(g, before, 0, &scalar, before->loc),
                  pass_new_const(g, before, -INFINITY, &scalar, before->loc)};
  return binop(g, before, OP_ADD, add, &pass_new_node(g, before, OP_WHERE, 3, in, NULL, before->loc)->out[0]);
}

/* Whether layer l hides exactly the keys after each query of scores
 * [.., sq, sk] (top-left, the op's causal): its mask evaluated (it must
 * be a constant), element (i, j) of its last two dims hiding iff j > i
 * under every leading index.  An added mask must be 0 or hiding (-inf, or
 * finfo.min-like: *floor set) everywhere. */
static bool is_causal(Graph *g, const Layer *l, int64_t sq, int64_t sk, bool *floor) {
  const TensorType *mt = &l->value->type;
  if (mt->rank < 2 || mt->dims[mt->rank - 2] != sq || mt->dims[mt->rank - 1] != sk) return false;
  Tensor t = {0};
  if (!pass_eval_const(g, l->value, MAX_MASK_ELEMS, &t)) return false;
  int64_t n = ir_type_numel(mt);
  double lo = hide_floor(mt->dtype);
  bool ok = true;
  *floor = l->floor;
  for (int64_t e = 0; e < n && ok; e++) {
    double x = ir_tensor_get(&t, e);
    bool hide = (x != 0) == (l->kind == LAYER_DROP);
    if (l->kind == LAYER_ADD) {
      hide = x <= lo;
      ok = hide || x == 0;
      *floor |= hide && x != -INFINITY;
    }
    ok = ok && hide == (e % sk > e / sk % sq);
  }
  ir_tensor_free(&t);
  return ok;
}

/* Takes the causal layers out (their count returned), or -1 when the
 * chain must stay: a where's finfo.min-like fill that is not causal (the
 * op has no such mask).  A causal finfo.min-like layer hides as -inf
 * only while every row keeps a key, so beside other masks (which may
 * hide the diagonal) the layers all stay, added ones as the op's mask. */
static int take_causal(Graph *g, Layer *layers, int *n, int64_t sq, int64_t sk) {
  bool causal[MAX_LAYERS], any_floor = false, where_floor = false;
  int others = 0;
  for (int i = 0; i < *n; i++) {
    bool floor = false;
    causal[i] = is_causal(g, &layers[i], sq, sk, &floor);
    if (!causal[i] && layers[i].floor) return -1;
    others += !causal[i];
    any_floor |= causal[i] && floor;
    where_floor |= causal[i] && floor && layers[i].kind != LAYER_ADD;
  }
  if (any_floor && others) {
    if (where_floor) return -1;
    return 0;
  }
  int kept = 0;
  for (int i = 0; i < *n; i++)
    if (!causal[i]) layers[kept++] = layers[i];
  int taken = *n - kept;
  *n = kept;
  return taken;
}

static Value *move_op(Graph *g, Node *before, OpKind op, Value *x, const char *attr, int count,
                      const int64_t *ints) {
  Node *t = ir_node_new(g, op, 1, &x, before->loc);
  ir_set_ints(g, t, attr, count, ints);
  char err[256];
  if (!ir_infer(t, err, sizeof err)) dl_internal(g->ctx, "attention pass: %s", err);
  ir_insert_before(g, before, t);
  return &t->out[0];
}

static Value *transpose(Graph *g, Node *before, Value *x, const int64_t *perm) {
  return move_op(g, before, OP_TRANSPOSE, x, "perm", 4, perm);
}

/* x [B, G R, X, Y] as reshape(expand(y [B, G, 1, X, Y] to [B, G, R, X,
 * Y])), HF's repeat_kv, where head h reads head h / R of y: y, with
 * *groups = G (1 also when y is [B, 1, 1, X, Y] expanded on either
 * axis); else NULL.  A Tile's order [B, R, G, X, Y] reads head h % G,
 * which is not the op's grouping. */
static Value *repeated_from(Value *x, int64_t *groups) {
  if (x->def->op != OP_RESHAPE || x->type.rank != 4 || x->def->in[0]->def->op != OP_EXPAND) return NULL;
  Value *e = x->def->in[0], *y = e->def->in[0];
  const int64_t *xd = x->type.dims, *ed = e->type.dims, *yd = y->type.dims;
  if (e->type.rank != 5 || y->type.rank != 5 || yd[0] != xd[0] || ed[0] != xd[0] || yd[2] != 1 ||
      (yd[1] != ed[1] && yd[1] != 1) || xd[1] != ed[1] * ed[2] || yd[3] != xd[2] || yd[4] != xd[3])
    return NULL;
  *groups = yd[1];
  return y;
}

/* y [B, G, 1, X, Y] as [B, G, X, Y]. */
static Value *squeeze_group(Graph *g, Node *before, Value *y, int64_t groups) {
  const int64_t *d = y->type.dims;
  int64_t shape[4] = {d[0], groups, d[3], d[4]};
  return move_op(g, before, OP_RESHAPE, y, "shape", 4, shape);
}

/* Kt [B, H, d, S] as K [B, H, S, d]. */
static Value *untranspose(Graph *g, Node *before, Value *kt) {
  static const int64_t swap[4] = {0, 1, 3, 2};
  if (kt->def->op != OP_TRANSPOSE) return transpose(g, before, kt, swap);
  int count;
  const int64_t *p = ir_attr_ints(kt->def, "perm", &count);
  int64_t q[4];
  bool identity = true;
  for (int i = 0; i < 4; i++) identity &= (q[i] = p[swap[i]]) == i;
  return identity ? kt->def->in[0] : transpose(g, before, kt->def->in[0], q);
}

/* The probabilities P of matmul(P, V), used there alone: softmax(s),
 * or PyTorch's safe softmax as exported (Hugging Face's attention with
 * a mask: where(isnan(P), 0, P), a row with every key hidden 0 as the
 * op gives it) as that softmax; NULL otherwise. */
static Value *probabilities(Value *p, const PassUses *uses) {
  Node *w = p->def;
  if (pass_uses(uses, p) != 1) return NULL;
  if (w->op == OP_SOFTMAX) return p;
  double zero;
  if (w->op != OP_WHERE || w->in[0]->def->op != OP_ISNAN) return NULL;
  Value *nan = w->in[0], *s = w->in[2];
  if (nan->def->in[0] != s || pass_uses(uses, nan) != 1 || pass_uses(uses, s) != 2 || s->def->op != OP_SOFTMAX ||
      !pass_is_const(w->in[1], &zero) || zero != 0 || !ir_dims_eq(&s->type, &p->type) || s->type.dtype != p->type.dtype)
    return NULL;
  return s;
}

/* The attention op for m2 = matmul(P, V) when the chain fits (built
 * before m2), else NULL with nothing changed. */
static Node *match(Graph *g, Node *m2, const PassUses *uses) {
  Value *p = probabilities(m2->in[0], uses), *v = m2->in[1];
  if (!p) return NULL;
  Node *sm = p->def;
  const TensorType *pt = &p->type, *vt = &v->type;
  if (pt->rank != 4 || vt->rank != 4) return NULL;
  int64_t axis = ir_attr_int(sm, "axis");
  if (axis != 3 && axis != -1) return NULL;
  Layer layers[MAX_LAYERS];
  int n_layers = 0;
  double scale = 1;
  Value *x = scores_of(sm->in[0], uses, layers, &n_layers, &scale);
  if (!x || !ir_dims_eq(&x->type, pt)) return NULL;
  Value *q = x->def->in[0], *kt = x->def->in[1];
  const TensorType *qt = &q->type, *ktt = &kt->type;
  DType dt = qt->dtype;
  if (!ir_dtype_is_float(dt) || ktt->dtype != dt || vt->dtype != dt || qt->rank != 4 || ktt->rank != 4) return NULL;
  /* one batch and head count everywhere (no broadcasting), V's width d */
  if (qt->dims[0] != ktt->dims[0] || qt->dims[1] != ktt->dims[1] || vt->dims[0] != qt->dims[0] ||
      vt->dims[1] != qt->dims[1] || ktt->dims[2] != qt->dims[3] || vt->dims[2] != ktt->dims[3] ||
      vt->dims[3] != qt->dims[3])
    return NULL;
  for (int i = 0; i < n_layers; i++)
    if (layers[i].kind == LAYER_ADD && layers[i].value->type.dtype != dt) return NULL;
  int causal = take_causal(g, layers, &n_layers, qt->dims[2], vt->dims[2]);
  if (causal < 0) return NULL;
  Value *mask = one_mask(g, m2, layers, n_layers, dt);
  /* K and V repeated to every query head: the op reads each group's head
   * itself (K repeated before or after its transpose). */
  int64_t gkt = 0, gk = 0, gv = 0;
  Value *k = untranspose(g, m2, kt);
  Value *kt0 = repeated_from(kt, &gkt), *k0 = repeated_from(k, &gk), *v0 = repeated_from(v, &gv);
  if (v0 && (kt0 || k0) && (kt0 ? gkt : gk) == gv) {
    k = kt0 ? untranspose(g, m2, squeeze_group(g, m2, kt0, gv)) : squeeze_group(g, m2, k0, gv);
    v = squeeze_group(g, m2, v0, gv);
  }
  Value *in[4] = {q, k, v, mask};
  Node *a = pass_new_node(g, m2, OP_ATTENTION, mask ? 4 : 3, in, NULL, m2->loc);
  ir_set_float(g, a, "scale", scale);
  if (causal) ir_set_int(g, a, "causal", 1);
  return a;
}

bool pass_attention(Graph *g, PassCtx *pc) {
  PassUses *uses = pass_uses_new(g);
  PassRewrite *rw = pass_rewrite_new(g);
  int fused = 0;
  for (Node *n = g->first; n; n = n->next) {
    pass_rewrite_operands(rw, n);
    if (n->op != OP_MATMUL) continue;
    Node *a = match(g, n, uses);
    if (!a) continue;
    pass_rewrite_replace(rw, &n->out[0], &a->out[0]);
    fused++;
  }
  pass_rewrite_finish(rw);
  if (pc && fused) pass_stat(pc, "attention chains fused", fused);
  return fused > 0;
}
