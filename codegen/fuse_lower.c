/* Lowering of fusion groups (passes/fuse.c, Node.group): takes a group of
 * a verified graph, appends the steps that compute its root: the GEMMs of
 * its matmul/linear leaves, then ONE kernel.  That kernel is
 *   - a map over the root's elements when the group has no anchor: the
 *     body is the expression tree of the group;
 *   - otherwise the anchor's own loop nest (lower_kernels.c, or the
 *     implicit-GEMM convolution of conv_igemm.c), whose input loads evaluate the
 *     members feeding it (cg_fused_load) and whose store evaluates the
 *     members after it (cg_fused_store).
 * Values inside a group have no bytes of their own: a member is
 * evaluated at the element being computed, as eval.c defines it. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "kernel.h"
#include "passes/pass.h"

/* ---- finding groups ---- */

static bool is_member(const CgGroup *grp, const Node *n) { return grp && n->group == grp->id; }

/* The attention pattern of passes/fuse.c, found again from the members. */
static void find_attention(CgGroup *grp) {
  const Node *sm = grp->anchor;
  if (!sm || sm->op != OP_SOFTMAX) return;
  const Node *m2 = NULL;
  for (int i = 0; i < grp->n; i++) {
    const Node *m = grp->members[i];
    if (m->op != OP_MATMUL) continue;
    const Node *d = m->in[0]->def;
    /* Mixed precision: a cast of the probabilities between. */
    if (d->op == OP_CAST && is_member(grp, d)) d = d->in[0]->def;
    if (d == sm) m2 = m;
  }
  if (!m2) return;
  const Node *at = sm->in[0]->def;
  while (is_member(grp, at) && ir_ops[at->op].cls == K_ELEMWISE && at->op != OP_BATCHNORM) {
    const Node *next = NULL;
    for (int i = 0; i < at->n_in; i++)
      if (is_member(grp, at->in[i]->def)) {
        if (next) return;
        next = at->in[i]->def;
      }
    if (!next) return;
    at = next;
  }
  if (!is_member(grp, at) || at->op != OP_MATMUL) return;
  for (int i = 0; i < 2; i++)
    if (ir_matmul_trans(at, i) || ir_matmul_trans(m2, i)) return;
  /* Scores are summed in f32: exact integer products, and f64 ones,
   * stay GEMM leaves. */
  DType st = at->out[0].type.dtype, ot = m2->out[0].type.dtype;
  if (!ir_dtype_is_float(st) || !ir_dtype_is_float(ot) || st == TY_F64 || ot == TY_F64) return;
  int r = m2->out[0].type.rank;
  const TensorType *q = &at->in[0]->type, *k = &at->in[1]->type, *v = &m2->in[1]->type;
  if (r < 2 || q->rank != r || k->rank != r || v->rank != r) return;
  for (int d = 0; d < r - 2; d++)
    if (q->dims[d] != m2->out[0].type.dims[d] || k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d])
      return;
  int axis = (int)ir_attr_int(sm, "axis");
  if (axis != r - 1 && axis != -1) return;
  grp->attention = m2;
  grp->scores = at;
}

static CgGroup *group_of(CgGroup **slots, int cap, int id) {
  unsigned h = ((unsigned)id * 2654435761u) & (unsigned)(cap - 1);
  while (slots[h]->id != id) h = (h + 1) & (unsigned)(cap - 1);
  return slots[h];
}

/* The members read outside their group or returned (the verifier has
 * checked they are elementwise of the root's shape), in graph order. */
static void find_side_outputs(Ctx *c, Graph *g, CgGroup **slots, int cap) {
  bool *side = ARENA_ARRAY(&c->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      const Node *d = n->in[i]->def;
      if (d->group >= 0 && d->group != n->group) side[d->id] = true;
    }
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i]->def->group >= 0) side[g->outputs[i]->def->id] = true;
  for (int pass = 0; pass < 2; pass++) {
    for (Node *n = g->first; n; n = n->next) {
      if (n->group < 0 || !side[n->id]) continue;
      CgGroup *grp = group_of(slots, cap, n->group);
      bool sibling = false;
      for (int k = 0; k < grp->n_siblings; k++) sibling |= grp->siblings[k] == n;
      /* the anchor's lowering stores them, but an epilogue's */
      if (n == grp->root || (sibling && grp->anchor == grp->root)) continue;
      if (pass == 1) grp->side[grp->n_side] = n;
      grp->n_side++;
    }
    for (int i = 0; i < cap && pass == 0; i++)
      if (slots[i]) slots[i]->side = ARENA_ARRAY(&c->arena, const Node *, slots[i]->n_side + 1), slots[i]->n_side = 0;
  }
}

CgGroup **cg_find_groups(Ctx *c, Graph *g) {
  ir_number(g);
  int n_nodes = 0;
  for (Node *n = g->first; n; n = n->next) n_nodes++;
  CgGroup **root_of = ARENA_ARRAY(&c->arena, CgGroup *, n_nodes + 1);
  /* Open addressing from group id to its group, filled backwards so the
   * first node met is the root. */
  int cap = 16;
  while (cap < 2 * n_nodes) cap *= 2;
  CgGroup **slots = ARENA_ARRAY(&c->arena, CgGroup *, cap);
  for (Node *n = g->last; n; n = n->prev) {
    if (n->group < 0) continue;
    unsigned h = ((unsigned)n->group * 2654435761u) & (unsigned)(cap - 1);
    while (slots[h] && slots[h]->id != n->group) h = (h + 1) & (unsigned)(cap - 1);
    CgGroup *grp = slots[h];
    if (!grp) {
      grp = slots[h] = ARENA_NEW(&c->arena, CgGroup);
      grp->id = n->group;
      grp->root = n;
      root_of[n->id] = grp;
    }
    grp->n++;
    if (ir_ops[n->op].cls != K_ELEMWISE && n->op != OP_MATMUL && n->op != OP_LINEAR &&
        ir_ops[n->op].cls != K_MOVE) {
      if (grp->anchor && n != grp->anchor && ir_reduce_siblings(n, grp->anchor) &&
          grp->n_siblings < CG_MAX_SIBLINGS)
        grp->siblings[grp->n_siblings++] = n;
      else
        grp->anchor = n;
    }
  }
  for (int i = 0; i < cap; i++)
    if (slots[i]) slots[i]->members = ARENA_ARRAY(&c->arena, const Node *, slots[i]->n), slots[i]->n = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->group < 0) continue;
    unsigned h = ((unsigned)n->group * 2654435761u) & (unsigned)(cap - 1);
    while (slots[h]->id != n->group) h = (h + 1) & (unsigned)(cap - 1);
    slots[h]->members[slots[h]->n++] = n;
  }
  for (int i = 0; i < cap; i++)
    if (slots[i]) find_attention(slots[i]);
  find_side_outputs(c, g, slots, cap);
  return root_of;
}

/* A matmul/linear whose GEMM writes its own bytes for the kernel to read. */
static bool is_leaf(const CgGroup *grp, const Node *n) {
  return (n->op == OP_MATMUL || n->op == OP_LINEAR) && n != grp->attention && n != grp->scores;
}

/* ---- evaluating a member at an element ---- */

static void strides_of(const TensorType *t, int64_t *st) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->dims[i];
  }
}

/* An element of a space: its linear index, and its coordinates decoded
 * from it when asked (or given by whoever knows them). */
typedef struct Site {
  TensorType t;
  int64_t st[DL_MAX_RANK];
  KExpr *lin;
  KExpr *coord[DL_MAX_RANK];
} Site;

typedef struct Memo {
  const Value *v;
  const Site *s;
  KExpr *e;
} Memo;

typedef struct Eval {
  CgBuild *b;
  Kernel *k;
  KBlock *blk; /* where lets go; NULL: pure expressions (inside a guard) */
  const CgGroup *grp;
  /* The anchor's result (and its sibling reductions') ... */
  const Value *bound[1 + CG_MAX_SIBLINGS];
  KExpr *bound_e[1 + CG_MAX_SIBLINGS]; /* ... is this expression at the root's site */
  int n_bound;
  Memo *memo;
  int n_memo, cap_memo;
} Eval;

static Site *site_new(Eval *E, const TensorType *t, KExpr *lin) {
  Site *s = ARENA_NEW(&E->k->ctx->arena, Site);
  s->t = *t;
  strides_of(t, s->st);
  s->lin = lin;
  return s;
}

/* E's bindings for pure expressions (no lets: inside a guard). */
static Eval inner(const Eval *E) {
  Eval in = {.b = E->b, .k = E->k, .grp = E->grp, .n_bound = E->n_bound};
  memcpy(in.bound, E->bound, sizeof in.bound);
  memcpy(in.bound_e, E->bound_e, sizeof in.bound_e);
  return in;
}

static KExpr *let(Eval *E, const char *stem, DType dt, KExpr *e) {
  /* A value of a half type is rounded to it, whether or not it gets a
   * local of its own. */
  if (ir_dtype_is_float(dt) && dt != KT_INDEX) e = cg_kcast(E->k, e, dt);
  if (!E->blk || e->kind == KE_VAR || e->kind == KE_INT || e->kind == KE_FLOAT) return e;
  return cg_kv(E->k, cg_klet(E->k, E->blk, stem, dt, e));
}

static KExpr *site_coord(Eval *E, Site *s, int d) {
  Kernel *k = E->k;
  if (s->t.dims[d] == 1) return cg_kint(k, 0);
  if (!s->coord[d]) {
    KExpr *e = cg_kidx(k, KI_DIV, s->lin, cg_kint(k, s->st[d]));
    bool outer = true;
    for (int j = 0; j < d; j++)
      if (s->t.dims[j] != 1) outer = false;
    if (!outer) e = cg_kidx(k, KI_MOD, e, cg_kint(k, s->t.dims[d]));
    s->coord[d] = let(E, "c", KT_INDEX, e);
  }
  return s->coord[d];
}

/* The coordinate of v (broadcast into s's space) along v's dim j. */
static KExpr *value_coord(Eval *E, Site *s, const TensorType *vt, int j) {
  if (vt->dims[j] == 1) return cg_kint(E->k, 0);
  return site_coord(E, s, j + s->t.rank - vt->rank);
}

static bool same_dims(const TensorType *a, const TensorType *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* v's linear index at s, v broadcast into s's space by NumPy's rules. */
static KExpr *index_in(Eval *E, Site *s, const TensorType *vt) {
  if (same_dims(vt, &s->t)) return s->lin;
  int64_t st[DL_MAX_RANK];
  strides_of(vt, st);
  KExpr *e = cg_kint(E->k, 0);
  for (int j = 0; j < vt->rank; j++)
    if (vt->dims[j] != 1) e = cg_kadd(E->k, e, cg_kmul(E->k, value_coord(E, s, vt, j), cg_kint(E->k, st[j])));
  return e;
}

static KExpr *eval(Eval *E, const Value *v, Site *s);
static KExpr *attention(Eval *E, const Node *m2, Site *s);

static KExpr *load_stored(Eval *E, const Value *v, KExpr *index) {
  double c;
  if (cg_const_of(E->b, v, &c)) return cg_kimm(E->k, c, v->type.dtype);
  KBuf *buf = cg_kglobal(E->k, "x", v->type.dtype, ir_type_numel(&v->type), cg_ref(E->b, v));
  if (ir_type_numel(&v->type) == 1) index = cg_kint(E->k, 0);
  return cg_kload(E->k, buf, index);
}

static KExpr *elementwise(Eval *E, const Node *n, Site *s) {
  Kernel *k = E->k;
  if (n->op == OP_BATCHNORM) {
    /* One op in eval.c: computed in f32, rounded once to its type. */
    const TensorType *t = &n->out[0].type;
    KExpr *x = cg_kcast(k, eval(E, n->in[0], s), TY_F32);
    KExpr *ch = t->rank > 1 ? value_coord(E, s, t, 1) : cg_kint(k, 0);
    TensorType ct = n->in[1]->type;
    Site *cs = site_new(E, &ct, ch);
    KExpr *w = cg_kcast(k, eval(E, n->in[1], cs), TY_F32), *bias = cg_kcast(k, eval(E, n->in[2], cs), TY_F32);
    KExpr *mean = cg_kcast(k, eval(E, n->in[3], cs), TY_F32), *var = cg_kcast(k, eval(E, n->in[4], cs), TY_F32);
    KExpr *den = cg_kop1(k, OP_SQRT, cg_kop2(k, OP_ADD, var, cg_kimm(k, ir_attr_float(n, "eps"), TY_F32)));
    KExpr *y = cg_kop2(k, OP_DIV, cg_kop2(k, OP_SUB, x, mean), den);
    return cg_kcast(k, cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, y, w), bias), t->dtype);
  }
  if (ir_op_is_logic(n->op)) {
    KExpr *in[3];
    for (int i = 0; i < n->n_in; i++) in[i] = eval(E, n->in[i], s);
    return cg_klogic(k, n, in);
  }
  KExpr *x = eval(E, n->in[0], s);
  if (n->op == OP_QUANTIZE || n->op == OP_DEQUANTIZE)
    return cg_kquant(k, n, x, n->n_in == 2 ? eval(E, n->in[1], s) : NULL);
  if (n->n_in == 2) {
    KExpr *r = cg_kop2(k, n->op, x, eval(E, n->in[1], s));
    if (n->op == OP_MOD) r->flag = ir_attr_int(n, "fmod") != 0;
    return r;
  }
  if (n->op == OP_CAST) return cg_kcast(k, x, n->out[0].type.dtype);
  KExpr *r = cg_kop1(k, n->op, x);
  if (n->op == OP_LEAKY_RELU) r->f = ir_attr_float(n, "alpha");
  if (n->op == OP_CLIP) r->f = ir_attr_float(n, "min"), r->f2 = ir_attr_float(n, "max");
  if (n->op == OP_GELU) r->flag = strcmp(ir_attr_str(n, "approximate"), "tanh") == 0;
  if (n->op == OP_FP_ROUND) cg_fp_round_attrs(r, n);
  return r;
}

/* A constant pad: the operand's element where this one falls inside
 * it, else the fill.  The operand is evaluated inside the select's arm
 * as pure expressions (no lets), so nothing is read outside it (a slice's
 * gradient is a pad, summed with the other slices': one kernel). */
static KExpr *pad(Eval *E, const Node *n, Site *s) {
  Kernel *k = E->k;
  const Value *x = n->in[0];
  const TensorType *vt = &n->out[0].type, *xt = &x->type;
  int64_t xst[DL_MAX_RANK];
  strides_of(xt, xst);
  int cnt, r = xt->rank;
  const int64_t *pads = ir_attr_ints(n, "pads", &cnt);
  KExpr *cond = NULL, *idx = cg_kint(k, 0);
  for (int d = 0; d < r; d++) {
    int64_t pb = pads[d], pe = pads[r + d];
    if (vt->dims[d] == 1 && xt->dims[d] == 1 && pb == 0) continue;
    KExpr *c = cg_kidx(k, KI_SUB, value_coord(E, s, vt, d), cg_kint(k, pb));
    if (pb > 0) cond = cg_kand(k, cond, cg_kcmp(k, KC_GE, c, cg_kint(k, 0)));
    if (pe > 0) cond = cg_kand(k, cond, cg_kcmp(k, KC_LT, c, cg_kint(k, xt->dims[d])));
    idx = cg_kadd(k, idx, cg_kmul(k, c, cg_kint(k, xst[d])));
  }
  KExpr *fill = cg_kimm(k, ir_attr_float(n, "value"), vt->dtype);
  if (!ir_type_numel(xt)) return fill;
  if (!cond) return eval(E, x, site_new(E, xt, let(E, "at", KT_INDEX, idx)));
  Eval in = inner(E);
  return cg_ksel(k, cond, cg_kcast(k, eval(&in, x, site_new(&in, xt, idx)), vt->dtype), fill);
}

/* A concat: the element of the operand whose range along the axis holds
 * this one, each operand evaluated inside its select's arm as pure
 * expressions as in pad (Llama's rotate_half: two slices, one negated,
 * joined, then multiplied: one kernel). */
static KExpr *concat(Eval *E, const Node *n, Site *s) {
  Kernel *k = E->k;
  const TensorType *vt = &n->out[0].type;
  int axis = (int)ir_attr_int(n, "axis");
  KExpr *c = let(E, "cc", KT_INDEX, value_coord(E, s, vt, axis)), *r = NULL;
  int64_t end = vt->dims[axis];
  for (int i = n->n_in - 1; i >= 0; i--) {
    const TensorType *xt = &n->in[i]->type;
    int64_t off = end - xt->dims[axis], xst[DL_MAX_RANK];
    if (!xt->dims[axis]) continue;
    strides_of(xt, xst);
    KExpr *idx = cg_kint(k, 0);
    for (int d = 0; d < vt->rank; d++) {
      if (xt->dims[d] == 1) continue;
      KExpr *cd = d == axis ? cg_kidx(k, KI_SUB, c, cg_kint(k, off)) : value_coord(E, s, vt, d);
      idx = cg_kadd(k, idx, cg_kmul(k, cd, cg_kint(k, xst[d])));
    }
    Eval in = inner(E);
    KExpr *x = cg_kcast(k, eval(&in, n->in[i], site_new(&in, xt, idx)), vt->dtype);
    r = r ? cg_ksel(k, cg_kcmp(k, KC_LT, c, cg_kint(k, end)), x, r) : x;
    end = off;
  }
  return r ? r : cg_kimm(k, 0, vt->dtype);
}

/* A data movement: the operand's element this element reads. */
static KExpr *move(Eval *E, const Node *n, Site *s) {
  Kernel *k = E->k;
  const Value *x = n->in[0];
  const TensorType *vt = &n->out[0].type, *xt = &x->type;
  int64_t xst[DL_MAX_RANK];
  strides_of(xt, xst);
  KExpr *idx = cg_kint(k, 0);
  int cnt;
  switch (n->op) {
    case OP_RESHAPE: idx = index_in(E, s, vt); break;
    case OP_TRANSPOSE: {
      const int64_t *perm = ir_attr_ints(n, "perm", &cnt);
      for (int d = 0; d < vt->rank; d++)
        if (vt->dims[d] != 1)
          idx = cg_kadd(k, idx, cg_kmul(k, value_coord(E, s, vt, d), cg_kint(k, xst[perm[d]])));
      break;
    }
    case OP_SLICE: {
      const int64_t *starts = ir_attr_ints(n, "starts", &cnt), *steps = ir_attr_ints(n, "steps", &cnt);
      for (int d = 0; d < vt->rank; d++) {
        KExpr *c = cg_kadd(k, cg_kint(k, starts[d]), cg_kmul(k, value_coord(E, s, vt, d), cg_kint(k, steps[d])));
        idx = cg_kadd(k, idx, cg_kmul(k, c, cg_kint(k, xst[d])));
      }
      break;
    }
    case OP_EXPAND: {
      int off = vt->rank - xt->rank;
      for (int j = 0; j < xt->rank; j++)
        if (xt->dims[j] != 1)
          idx = cg_kadd(k, idx, cg_kmul(k, value_coord(E, s, vt, j + off), cg_kint(k, xst[j])));
      break;
    }
    case OP_PAD: return pad(E, n, s);
    case OP_CONCAT: return concat(E, n, s);
    default: dl_internal(k->ctx, "%s is not an index move", ir_ops[n->op].name);
  }
  return eval(E, x, site_new(E, xt, let(E, "at", KT_INDEX, idx)));
}

/* A matmul/linear leaf: what its GEMM wrote, plus linear's bias. */
static KExpr *leaf(Eval *E, const Node *n, Site *s) {
  const Value *v = &n->out[0];
  KExpr *idx = index_in(E, s, &v->type);
  KBuf *buf = cg_kglobal(E->k, "gemm", v->type.dtype, ir_type_numel(&v->type), cg_ref(E->b, v));
  KExpr *r = cg_kload(E->k, buf, idx);
  if (n->op == OP_LINEAR && n->n_in > 2) {
    int64_t outf = v->type.dims[v->type.rank - 1];
    TensorType bt = n->in[2]->type;
    KExpr *col = cg_kidx(E->k, KI_MOD, idx, cg_kint(E->k, outf));
    r = cg_kop2(E->k, OP_ADD, r, eval(E, n->in[2], site_new(E, &bt, col)));
  }
  return r;
}

/* One element (b..., i, j) of softmax(f(Q K)) V: a pass for the row's
 * largest score, then a pass summing exp(score - max) and its product
 * with V's column.  Scores are recomputed in both passes, never stored. */
static KExpr *score(Eval *E, KBlock *blk, KExpr *bl, KExpr *row, KExpr *t) {
  Kernel *k = E->k;
  const Node *m1 = E->grp->scores, *sm = E->grp->anchor;
  const TensorType *qt = &m1->in[0]->type, *kt = &m1->in[1]->type, *st = &m1->out[0].type;
  int r = qt->rank;
  int64_t S = qt->dims[r - 2], De = qt->dims[r - 1], T = kt->dims[r - 1];
  KVar *sc = cg_kvar(k, "sc", TY_F32), *e = cg_kvar(k, "e", KT_INDEX);
  KStmt *red = cg_kreduce(k, blk, sc, cg_kimm(k, 0, TY_F32), OP_ADD, e, cg_kint(k, De));
  Eval in = {.b = E->b, .k = k, .blk = &red->body, .grp = E->grp};
  KExpr *qi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, bl, cg_kint(k, S)), row), cg_kint(k, De)), cg_kv(k, e));
  KExpr *ki = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, bl, cg_kint(k, De)), cg_kv(k, e)), cg_kint(k, T)), t);
  KExpr *q = eval(&in, m1->in[0], site_new(&in, qt, let(&in, "qi", KT_INDEX, qi)));
  KExpr *kk = eval(&in, m1->in[1], site_new(&in, kt, let(&in, "ki", KT_INDEX, ki)));
  red->value = cg_kop2(k, OP_MUL, cg_kcast(k, q, TY_F32), cg_kcast(k, kk, TY_F32));
  /* The scores are the first matmul's result: rounded to its type. */
  Eval f = {.b = E->b, .k = k, .blk = blk, .grp = E->grp, .n_bound = 1};
  f.bound[0] = &m1->out[0];
  f.bound_e[0] = cg_kcast(k, cg_kv(k, sc), m1->out[0].type.dtype);
  KExpr *si = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, bl, cg_kint(k, S)), row), cg_kint(k, T)), t);
  return let(&f, "x", TY_F32, eval(&f, sm->in[0], site_new(&f, st, let(&f, "si", KT_INDEX, si))));
}

static KExpr *attention(Eval *E, const Node *m2, Site *s) {
  Kernel *k = E->k;
  if (!E->blk) dl_internal(k->ctx, "an attention evaluated inside a guard");
  const TensorType *ot = &m2->out[0].type, *vt = &m2->in[1]->type;
  int r = ot->rank;
  int64_t T = vt->dims[r - 2], D = vt->dims[r - 1];
  KExpr *bl = cg_kint(k, 0);
  for (int d = 0; d < r - 2; d++)
    bl = cg_kadd(k, cg_kmul(k, bl, cg_kint(k, ot->dims[d])), value_coord(E, s, ot, d));
  bl = let(E, "b", KT_INDEX, bl);
  KExpr *row = value_coord(E, s, ot, r - 2), *col = value_coord(E, s, ot, r - 1);
  KVar *mx = cg_kvar(k, "mx", TY_F32), *t1 = cg_kvar(k, "t", KT_INDEX);
  KStmt *pass1 = cg_kreduce(k, E->blk, mx, cg_kimm(k, -INFINITY, TY_F32), OP_MAXIMUM, t1, cg_kint(k, T));
  pass1->value = score(E, &pass1->body, bl, row, cg_kv(k, t1));
  KVar *l = cg_klet(k, E->blk, "l", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *acc = cg_klet(k, E->blk, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *t2 = cg_kvar(k, "t", KT_INDEX);
  KStmt *pass2 = cg_kloop(k, E->blk, t2, cg_kint(k, T), KM_SERIAL);
  KExpr *x = score(E, &pass2->body, bl, row, cg_kv(k, t2));
  KVar *p = cg_klet(k, &pass2->body, "p", TY_F32, cg_kop1(k, OP_EXP, cg_kop2(k, OP_SUB, x, cg_kv(k, mx))));
  cg_kset(k, &pass2->body, l, cg_kop2(k, OP_ADD, cg_kv(k, l), cg_kv(k, p)));
  Eval in = {.b = E->b, .k = k, .blk = &pass2->body, .grp = E->grp};
  KExpr *vi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, bl, cg_kint(k, T)), cg_kv(k, t2)), cg_kint(k, D)), col);
  KExpr *vv = eval(&in, m2->in[1], site_new(&in, vt, let(&in, "vi", KT_INDEX, vi)));
  cg_kset(k, &pass2->body, acc,
          cg_kop2(k, OP_ADD, cg_kv(k, acc), cg_kop2(k, OP_MUL, cg_kv(k, p), cg_kcast(k, vv, TY_F32))));
  return cg_kcast(k, cg_kop2(k, OP_DIV, cg_kv(k, acc), cg_kv(k, l)), ot->dtype);
}

static KExpr *eval(Eval *E, const Value *v, Site *s) {
  for (int i = 0; i < E->n_bound; i++)
    if (v == E->bound[i]) return E->bound_e[i];
  for (int i = 0; i < E->n_memo; i++)
    if (E->memo[i].v == v && E->memo[i].s == s) return E->memo[i].e;
  const Node *n = v->def;
  KExpr *e;
  if (!is_member(E->grp, n) || n == E->grp->anchor) {
    if (n == E->grp->anchor && E->grp->anchor != E->grp->root)
      dl_internal(E->k->ctx, "fusion group k%d reads its anchor outside the epilogue", E->grp->id);
    return load_stored(E, v, index_in(E, s, &v->type));
  } else if (n == E->grp->attention) {
    e = attention(E, n, s);
  } else if (is_leaf(E->grp, n)) {
    e = leaf(E, n, s);
  } else if (ir_ops[n->op].cls == K_MOVE) {
    e = move(E, n, s);
  } else {
    e = let(E, "f", v->type.dtype, elementwise(E, n, s));
  }
  if (E->n_memo == E->cap_memo) {
    int cap = E->cap_memo ? 2 * E->cap_memo : 16;
    E->memo = arena_realloc(&E->k->ctx->arena, E->memo, sizeof(Memo) * (size_t)E->cap_memo,
                            sizeof(Memo) * (size_t)cap);
    E->cap_memo = cap;
  }
  E->memo[E->n_memo++] = (Memo){v, s, e};
  return e;
}

/* The root's element at index and the side outputs' there (the same
 * element: they have its elements in its order), every value computed
 * before the first store. */
static void store_root_and_sides(Eval *E, KExpr *index) {
  const CgGroup *grp = E->grp;
  Kernel *k = E->k;
  const Value *root = &grp->root->out[0];
  Site *s = site_new(E, &root->type, index);
  KExpr **vals = ARENA_ARRAY(&k->ctx->arena, KExpr *, grp->n_side + 1);
  for (int i = 0; i < grp->n_side; i++) {
    /* Its dims may be the root's with size-1 dims in or out. */
    const TensorType *t = &grp->side[i]->out[0].type;
    vals[i] = eval(E, &grp->side[i]->out[0], same_dims(t, &root->type) ? s : site_new(E, t, index));
  }
  KExpr *r = eval(E, root, s);
  for (int i = 0; i < grp->n_side; i++) {
    const Value *v = &grp->side[i]->out[0];
    KBuf *o = cg_kglobal(k, "side", v->type.dtype, ir_type_numel(&v->type), cg_ref(E->b, v));
    cg_kstore(k, E->blk, o, index, cg_kcast(k, vals[i], v->type.dtype));
  }
  KBuf *o = cg_kglobal(k, "out", root->type.dtype, ir_type_numel(&root->type), cg_ref(E->b, root));
  cg_kstore(k, E->blk, o, index, cg_kcast(k, r, root->type.dtype));
}

/* ---- an epilogue's update over its input ---- */

/* The reads of one buffer in a kernel: all of them, and those at one
 * index by the thread that then stores there (before the store). */
typedef struct Reads {
  const KBuf *in;
  const KVar *at;
  int all, at_index;
} Reads;

static void reads_in_expr(Reads *r, const KExpr *e, bool here) {
  if (!e) return;
  if (e->kind == KE_LOAD && e->buf == r->in) {
    r->all++;
    r->at_index += here && e->a[0] && e->a[0]->kind == KE_VAR && e->a[0]->var == r->at;
  }
  for (int i = 0; i < 3; i++) reads_in_expr(r, e->a[i], here);
}

static void reads_in_block(Reads *r, const KBlock *blk, const KBlock *here_blk, bool here);

static void reads_in_stmt(Reads *r, const KStmt *s, const KBlock *here_blk, bool here) {
  const KExpr *exprs[] = {s->extent, s->init, s->value, s->cond, s->index, s->src_at, s->src2_at};
  for (size_t i = 0; i < ARRAY_LEN(exprs); i++) reads_in_expr(r, exprs[i], here);
  for (int i = 0; s->kind == KS_VSTORE && i < s->n_lanes; i++) reads_in_expr(r, s->lanes[i], here);
  for (int i = 0; s->kind == KS_CHUNK && i < s->count; i++) reads_in_expr(r, s->chunk[i], here);
  /* read other than by a load, or written: never at one index */
  if (s->src == r->in || s->src2 == r->in || s->buf == r->in) r->all++;
  reads_in_block(r, &s->body, here_blk, here);
  reads_in_block(r, &s->orelse, here_blk, here);
}

static void reads_in_block(Reads *r, const KBlock *blk, const KBlock *here_blk, bool here) {
  bool top = blk == here_blk, stored = false;
  for (const KStmt *s = blk->first; s; s = s->next) {
    stored = stored || (top && s->kind == KS_STORE);
    reads_in_stmt(r, s, here_blk, here || (top && !stored));
  }
}

static int stores_of(const KBlock *blk, const KBuf *out) {
  int n = 0;
  for (const KStmt *s = blk->first; s; s = s->next)
    n += (s->kind == KS_STORE && s->buf == out) + stores_of(&s->body, out) + stores_of(&s->orelse, out);
  return n;
}

/* Each buffer the epilogue stores in blk at the thread's index var (a
 * reduction's row) may take the bytes of an input of its size that the
 * whole kernel reads only there, before the epilogue's stores (a
 * batchnorm's new running statistics over the old: the update in place,
 * plan_build.c). */
static void mark_overwrites(Kernel *k, const KBlock *blk, const KExpr *index) {
  if (index->kind != KE_VAR) return;
  for (const KStmt *s = blk->first; s; s = s->next) {
    KBuf *out = s->buf;
    if (s->kind != KS_STORE || out->overwrites || s->index->kind != KE_VAR || s->index->var != index->var ||
        stores_of(&k->body, out) != 1)
      continue;
    for (int p = 0; p < k->n_params && !out->overwrites; p++) {
      const KBuf *in = k->params[p].buf;
      if (!in || in == out || in->written || in->numel != out->numel ||
          ir_dtype_size(in->dtype) != ir_dtype_size(out->dtype))
        continue;
      Reads r = {.in = in, .at = index->var};
      reads_in_block(&r, &k->body, blk, false);
      if (r.all && r.all == r.at_index) out->overwrites = in;
    }
  }
}

/* ---- the hooks the anchors' lowerings call ---- */

bool cg_is_fused(CgBuild *b, const Value *v) {
  const CgGroup *grp = cg_group(b);
  return grp && is_member(grp, v->def) && v->def != grp->anchor;
}

KExpr *cg_fused_load(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, KExpr *index) {
  const CgGroup *grp = cg_group(b);
  if (!cg_is_fused(b, v)) return NULL;
  Eval E = {.b = b, .k = k, .blk = blk, .grp = grp};
  return eval(&E, v, site_new(&E, &v->type, index));
}

KExpr *cg_operand_load(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index) {
  KExpr *f = cg_fused_load(b, k, blk, v, index);
  if (f) return f;
  double c;
  if (cg_const_of(b, v, &c)) return cg_kimm(k, c, v->type.dtype);
  return cg_kload(k, cg_kglobal(k, name, v->type.dtype, ir_type_numel(&v->type), cg_ref(b, v)), index);
}

KExpr *cg_operand_load_or(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index,
                          KExpr *cond, double fill) {
  DType dt = v->type.dtype;
  KVar *r = cg_klet(k, blk, arena_printf(&k->ctx->arena, "%sv", name), dt, cg_kimm(k, fill, dt));
  KBlock *in = &cg_kif(k, blk, cond)->body;
  cg_kset(k, in, r, cg_operand_load(b, k, in, v, name, index));
  return cg_kv(k, r);
}

bool cg_fused_store(CgBuild *b, Kernel *k, KBlock *blk, const Value *out, KExpr *index,
                    KExpr *value) {
  const CgGroup *grp = cg_group(b);
  if (!grp || !grp->anchor || out->def != grp->anchor || grp->anchor == grp->root) return false;
  Eval E = {.b = b, .k = k, .blk = blk, .grp = grp, .n_bound = 1};
  E.bound[0] = out;
  E.bound_e[0] = let(&E, "y", out->type.dtype, value);
  store_root_and_sides(&E, index);
  return true;
}

bool cg_fused_store_rows(CgBuild *b, Kernel *k, KBlock *blk, const Node *const *red, KExpr *const *values, int n,
                         KExpr *index) {
  const CgGroup *grp = cg_group(b);
  if (!grp || !grp->anchor || red[0] != grp->anchor || grp->anchor == grp->root) return false;
  if (n > 1 + CG_MAX_SIBLINGS) dl_internal(k->ctx, "%d reductions bound in one epilogue", n);
  Eval E = {.b = b, .k = k, .blk = blk, .grp = grp, .n_bound = n};
  for (int i = 0; i < n; i++) {
    E.bound[i] = &red[i]->out[0];
    E.bound_e[i] = let(&E, "y", red[i]->out[0].type.dtype, values[i]);
  }
  store_root_and_sides(&E, index);
  mark_overwrites(k, blk, index);
  return true;
}

/* "conv2d_batchnorm_relu": the first few distinct ops of the group. */
const char *cg_group_hint(Ctx *c, const CgGroup *grp) {
  const char *hint = NULL;
  int shown = 0;
  for (int i = 0; i < grp->n && shown < 3; i++) {
    const char *name = ir_ops[grp->members[i]->op].name;
    if (hint && strstr(hint, name)) continue;
    hint = hint ? arena_printf(&c->arena, "%s_%s", hint, name) : name;
    shown++;
  }
  return hint ? hint : "fused";
}

/* ---- checks: what this lowering can do with a hand-written group ---- */

/* Floats throughout, or int8 where this lowering computes it: quantize
 * (float to i8 or u8), dequantize and cast (i8, u8 or i32 to float), an int8
 * product (i8 operands, an i32 result and bias), integer arithmetic and
 * index moves of i8 and u8. */
static bool member_types_ok(const Node *n) {
  DType out = n->out[0].type.dtype, in0 = n->in[0]->type.dtype;
  bool floats_out = ir_dtype_is_float(out), floats = floats_out;
  for (int j = 0; j < n->n_in; j++) floats = floats && ir_dtype_is_float(n->in[j]->type.dtype);
  if (floats) return true;
  /* bools: the tests, logic and where on any dtype, casts to and from
   * bool, index moves of bools */
  if (ir_op_is_logic(n->op) || (n->op == OP_CAST && (in0 == TY_BOOL || out == TY_BOOL))) return true;
  if (ir_ops[n->op].cls == K_MOVE && in0 == TY_BOOL) return true;
  if (pass_is_int_arith(n)) return true;
  switch (n->op) {
    case OP_QUANTIZE: return true;
    case OP_DEQUANTIZE: return in0 == TY_I8 || in0 == TY_U8 || in0 == TY_I32;
    case OP_CAST: return (in0 == TY_I8 || in0 == TY_U8 || in0 == TY_I32) && floats_out;
    case OP_CONV2D:
    case OP_MATMUL:
    case OP_LINEAR:
      return in0 == TY_I8 && n->in[1]->type.dtype == TY_I8 && out == TY_I32 &&
             (n->n_in < 3 || n->in[2]->type.dtype == TY_I32);
    default: return ir_ops[n->op].cls == K_MOVE && (in0 == TY_I8 || in0 == TY_U8) && out == in0;
  }
}

static bool group_lowerable(CgBuild *b, const CgGroup *grp) {
  Ctx *c = cg_build_ctx(b);
  const Node *root = grp->root, *anchor = grp->anchor;
  for (int i = 0; i < grp->n; i++) {
    const Node *n = grp->members[i];
    bool ok = n->n_out == 1 && member_types_ok(n) && ir_type_numel(&n->out[0].type) > 0;
    if (ir_ops[n->op].cls == K_MOVE && n->op != OP_RESHAPE && n->op != OP_TRANSPOSE &&
        n->op != OP_SLICE && n->op != OP_EXPAND && n->op != OP_PAD && n->op != OP_CONCAT)
      ok = false;
    if (n->op == OP_RESHAPE && n == root) ok = false;
    /* A GEMM reads its matrices from memory. */
    if (is_leaf(grp, n) && (is_member(grp, n->in[0]->def) || is_member(grp, n->in[1]->def))) ok = false;
    if (!ok) {
      diag_error(c, n->loc, "codegen cannot lower %s in fusion group k%d (float elementwise, "
                 "quantize/dequantize, index moves, matmul/linear leaves and one anchor only)",
                 ir_ops[n->op].name, grp->id);
      return false;
    }
  }
  if (anchor && anchor != root && !grp->attention) {
    /* Members after the anchor run at its store, element for element:
     * after row reductions, reshapes too and any dims of as many
     * elements (no broadcast reorders equal counts). */
    bool rows = ir_reduce_siblings(anchor, anchor);
    int64_t count = ir_type_numel(&anchor->out[0].type);
    bool *dep = ARENA_ARRAY(&c->arena, bool, grp->n);
    for (int i = 0; i < grp->n; i++) {
      const Node *n = grp->members[i];
      if (n == anchor || (rows && ir_reduce_siblings(n, anchor))) {
        dep[i] = true;
        continue;
      }
      for (int j = 0; j < n->n_in; j++)
        for (int q = 0; q < i; q++)
          if (dep[q] && n->in[j] == &grp->members[q]->out[0]) dep[i] = true;
      bool ok = rows ? (ir_ops[n->op].cls == K_ELEMWISE || n->op == OP_RESHAPE) &&
                           ir_type_numel(&n->out[0].type) == count
                     : ir_ops[n->op].cls == K_ELEMWISE && same_dims(&n->out[0].type, &anchor->out[0].type);
      if (dep[i] && !ok) {
        diag_error(c, n->loc, "codegen cannot lower fusion group k%d: %s after its %s is not "
                   "elementwise of the same shape", grp->id, ir_ops[n->op].name, ir_ops[anchor->op].name);
        return false;
      }
    }
  }
  return true;
}

/* ---- groups without an anchor: one map over the root ---- */

static void lower_map(CgBuild *b, const CgGroup *grp) {
  Ctx *c = cg_build_ctx(b);
  const Value *root = &grp->root->out[0];
  int64_t total = ir_type_numel(&root->type);
  Kernel *k = cg_kernel_new(c, grp->root, cg_group_hint(c, grp), arena_printf(&c->arena, "#k%d", grp->id));
  KVar *nv = cg_kparam(k, "n", KT_INDEX, total, 0);
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  KStmt *loop = cg_kloop(k, &k->body, i, cg_kv(k, nv), KM_GRID_STRIDE);
  cg_kernel_grid_1d(k, total);
  Eval E = {.b = b, .k = k, .blk = &loop->body, .grp = grp};
  store_root_and_sides(&E, cg_kv(k, i));
  cg_launch(b, k);
}

/* ---- a sum of products: GEMMs accumulating into the root ---- */

/* The leaves of a left-deep chain of f32 adds over f32 matmuls of the
 * root's dims, in the order the chain adds them: each add has a matmul
 * operand and a matmul or an add operand.  Returns the count, or 0 when
 * grp is not such a chain. */
static int product_chain(const CgGroup *grp, const Node *at, const Node **leaves, int n) {
  const TensorType *rt = &grp->root->out[0].type;
  if (at->out[0].type.dtype != TY_F32 || !same_dims(&at->out[0].type, rt) || !is_member(grp, at)) return 0;
  if (at->op == OP_MATMUL && is_leaf(grp, at)) {
    leaves[n] = at;
    return n + 1;
  }
  if (at->op != OP_ADD) return 0;
  const Node *x = at->in[0]->def, *y = at->in[1]->def;
  if (y->op == OP_ADD) {
    const Node *t = x;
    x = y, y = t;
  }
  if (y->op != OP_MATMUL) return 0;
  n = product_chain(grp, x, leaves, n);
  return n ? product_chain(grp, y, leaves, n) : 0;
}

/* The gradient of a weight a recurrent layer uses at every step is a sum
 * of one product per step: the first GEMM writes the root, each next one
 * adds to it (beta 1, the sum rounded once per add as the adds round
 * it), and no kernel runs. */
static bool lower_product_sum(CgBuild *b, const CgGroup *grp) {
  if (grp->n_side || grp->attention || grp->anchor || grp->root->op != OP_ADD) return false;
  Ctx *c = cg_build_ctx(b);
  const Node **leaves = ARENA_ARRAY(&c->arena, const Node *, grp->n + 1);
  int n = product_chain(grp, grp->root, leaves, 0);
  if (!n || 2 * n - 1 != grp->n) return false;
  RtRef rc = cg_ref(b, &grp->root->out[0]);
  for (int i = 0; i < n; i++)
    if (!cg_lower_matmul_into(b, leaves[i], rc, i ? 1.0f : 0.0f)) return false;
  return true;
}

bool cg_lower_group(CgBuild *b, const CgGroup *grp) {
  if (!group_lowerable(b, grp)) return false;
  if (cg_lower_gemm_epilogue(b, grp) || cg_lower_gemm_residual(b, grp)) return true;
  if (lower_product_sum(b, grp)) return true;
  /* The leaves' GEMMs first: they read memory only. */
  for (int i = 0; i < grp->n; i++)
    if (is_leaf(grp, grp->members[i]) && !cg_lower_node(b, grp->members[i])) return false;
  if (!grp->anchor || grp->attention) {
    lower_map(b, grp);
    return true;
  }
  return cg_lower_node(b, grp->anchor);
}
