/* Lowering of data movement: takes a reshape, transpose, expand, slice,
 * pad, concat, gather, scatter or topk node, appends its kernels to the
 * plan; indices read from data are checked and reported, never used out
 * of bounds. */
#include "lower.h"

/* ---- data movement ---- */

bool lower_reshape(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *y = &n->out[0];
  double c;
  if (cg_has_ref(b, y)) {
    /* A graph output has bytes of its own in its OUTPUT space (its
     * operand's too, when plan_storage could put the operand there). */
    if (cg_const_of(b, x, &c))
      cg_fill(b, n, NULL, cg_ref(b, y), y->type.dtype, numel(&y->type), c);
    else if (nbytes(&y->type) && !cg_same_ref(cg_ref(b, y), cg_ref(b, x)))
      cg_copy(b, n, NULL, cg_ref(b, y), cg_ref(b, x), nbytes(&y->type));
  } else if (!cg_const_of(b, x, &c)) {
    cg_alias(b, y, cg_ref(b, x));
  }
  return true;
}

/* A kernel out[i] = x[src(i)] built by a caller-provided index: any
 * dtype, the bytes move as they are. */
static bool move_dtypes(CgBuild *b, const Node *n) { return true; }

bool lower_transpose_expand_slice(CgBuild *b, const Node *n) {
  if (!move_dtypes(b, n)) return false;
  const Value *x = n->in[0], *out = &n->out[0];
  if (numel(&out->type) == 0) return true;
  int64_t xst[DL_MAX_RANK], st[DL_MAX_RANK], off = 0;
  strides_of(&x->type, xst);
  int r = out->type.rank, cnt;
  if (n->op == OP_TRANSPOSE) {
    const int64_t *perm = ir_attr_ints(n, "perm", &cnt);
    for (int d = 0; d < r; d++) st[d] = xst[perm[d]];
  } else if (n->op == OP_EXPAND) {
    bcast_strides(&x->type, &out->type, st);
  } else {
    const int64_t *starts = ir_attr_ints(n, "starts", &cnt),
                  *steps = ir_attr_ints(n, "steps", &cnt);
    for (int d = 0; d < r; d++) {
      st[d] = steps[d] * xst[d];
      off += starts[d] * xst[d];
    }
  }
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  double c;
  KExpr *v;
  if (cg_const_of(b, x, &c))
    v = cg_kimm(k, c, x->type.dtype);
  else
    v = cg_kload(k, global_of(b, k, x, "x"), cg_kadd(k, cg_kint(k, off), map_index(&m, st)));
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

bool lower_pad(CgBuild *b, const Node *n) {
  if (!move_dtypes(b, n)) return false;
  const Value *x = n->in[0], *out = &n->out[0];
  if (numel(&out->type) == 0) return true;
  int cnt, r = x->type.rank;
  const int64_t *pads = ir_attr_ints(n, "pads", &cnt);
  int64_t xst[DL_MAX_RANK];
  strides_of(&x->type, xst);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *cond = NULL, *src = cg_kint(k, 0);
  for (int d = 0; d < r; d++) {
    int64_t pb = pads[d], pe = pads[r + d];
    if (out->type.dims[d] == 1 && x->type.dims[d] == 1 && pb == 0) continue;
    KExpr *s = cg_kidx(k, KI_SUB, map_coord(&m, d), cg_kint(k, pb));
    if (pb > 0) cond = cg_kand(k, cond, cg_kcmp(k, KC_GE, s, cg_kint(k, 0)));
    if (pe > 0) cond = cg_kand(k, cond, cg_kcmp(k, KC_LT, s, cg_kint(k, x->type.dims[d])));
    src = cg_kadd(k, src, cg_kmul(k, s, cg_kint(k, xst[d])));
  }
  KExpr *fill = cg_kimm(k, ir_attr_float(n, "value"), out->type.dtype);
  KExpr *v = numel(&x->type) ? load_of(b, k, x, "x", src) : fill;
  if (cond) v = cg_ksel(k, cond, v, fill);
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* a < end ? x[...] : (the rest), over loads given from the last operand
 * to the first, as a balanced tree: a concat of thousands of operands is
 * an expression of depth log2(n), not n, for the emitter's recursion and
 * the CUDA compiler's.  Only the chosen arm is read. */
static KExpr *concat_select(Kernel *k, KExpr *a, KExpr **loads, const int64_t *ends, int n) {
  if (n == 1) return loads[0];
  int later = (n + 1) / 2; /* loads[0, later) are the later operands */
  KExpr *first = concat_select(k, a, loads + later, ends + later, n - later);
  KExpr *rest = concat_select(k, a, loads, ends, later);
  return cg_ksel(k, cg_kcmp(k, KC_LT, a, cg_kint(k, ends[later])), first, rest);
}

/* Whether every operand of concat n already lives where it goes in
 * its result (plan_build.c's place_concat_operands). */
static bool concat_in_place(CgBuild *b, const Node *n) {
  RtRef at = cg_ref(b, &n->out[0]);
  for (int i = 0; i < n->n_in; i++) {
    if (!cg_same_ref(cg_ref(b, n->in[i]), at)) return false;
    at = cg_ref_at(at, nbytes(&n->in[i]->type));
  }
  return true;
}

bool lower_concat(CgBuild *b, const Node *n) {
  if (!move_dtypes(b, n)) return false;
  const Value *out = &n->out[0];
  const TensorType *ot = &out->type;
  if (numel(ot) == 0 || concat_in_place(b, n)) return true;
  int axis = (int)ir_attr_int(n, "axis");
  if (axis < 0) axis += ot->rank;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, ot);
  KExpr *a = map_coord(&m, axis);
  Arena *ar = &cg_build_ctx(b)->arena;
  int64_t *ends = ARENA_ARRAY(ar, int64_t, n->n_in), offset = 0;
  for (int i = 0; i < n->n_in; i++) {
    offset += n->in[i]->type.dims[axis];
    ends[i] = offset;
  }
  /* The loads of the non-empty operands, made from the last (the order
   * of the kernel's parameters). */
  KExpr **loads = ARENA_ARRAY(ar, KExpr *, n->n_in);
  int64_t *load_ends = ARENA_ARRAY(ar, int64_t, n->n_in);
  int nl = 0;
  for (int i = n->n_in - 1; i >= 0; i--) {
    const Value *x = n->in[i];
    if (numel(&x->type) == 0) continue;
    int64_t start = ends[i] - x->type.dims[axis], xst[DL_MAX_RANK];
    strides_of(&x->type, xst);
    KExpr *src = cg_kint(k, 0);
    for (int d = 0; d < ot->rank; d++) {
      if (x->type.dims[d] == 1) continue;
      KExpr *c = map_coord(&m, d);
      if (d == axis) c = cg_kidx(k, KI_SUB, c, cg_kint(k, start));
      src = cg_kadd(k, src, cg_kmul(k, c, cg_kint(k, xst[d])));
    }
    loads[nl] = load_of(b, k, x, arena_printf(ar, "x%d", i), src);
    load_ends[nl++] = ends[i];
  }
  map_store(b, &m, out, concat_select(k, a, loads, load_ends, nl));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- indices read from data: checked, reported, never out of bounds ---- */

/* Where a kernel reports bad indices: n_axes reports in STATUS, one per
 * index it checks for each element, and the element's position in the
 * order the interpreter walks (pos). */
typedef struct IndexCheck {
  KBuf *reports;
  KExpr *pos;
} IndexCheck;

static KBuf *reports_of(CgBuild *b, Kernel *k, int n_axes) {
  return cg_kglobal(k, "reports", TY_I64, (int64_t)n_axes * RT_STATUS_WORDS, cg_status(b, n_axes));
}

/* An index read as i64, counted from the end of its axis when negative;
 * an index outside [-dim, dim) is reported in report r of ic: its value
 * as read, the axis and its size, unless the report already holds a
 * lower position, so that the runtime says what eval.c says (its first
 * bad index) in whatever order the threads ran.  Returns the counted
 * index, out of range as it came. */
static KExpr *from_end(Kernel *k, KBlock *blk, const IndexCheck *ic, int r, KExpr *raw, int axis, int64_t dim) {
  KVar *v = cg_klet(k, blk, "idx", TY_I64, cg_kcast(k, raw, TY_I64));
  KVar *at = cg_klet(k, blk, "at", TY_I64,
                     cg_ksel(k, cg_kcmp(k, KC_LT, cg_kv(k, v), cg_kimm(k, 0, TY_I64)),
                             cg_kop2(k, OP_ADD, cg_kv(k, v), cg_kimm(k, (double)dim, TY_I64)), cg_kv(k, v)));
  KExpr *bad = cg_kor(k, cg_kcmp(k, KC_LT, cg_kv(k, at), cg_kimm(k, 0, TY_I64)),
                      cg_kcmp(k, KC_GE, cg_kv(k, at), cg_kimm(k, (double)dim, TY_I64)));
  KExpr *pos1 = cg_kcast(k, cg_kadd(k, ic->pos, cg_kint(k, 1)), TY_I64);
  KExpr *held = cg_kload(k, ic->reports, cg_kint(k, r * RT_STATUS_WORDS));
  KExpr *first = cg_kor(k, cg_kcmp(k, KC_EQ, held, cg_kimm(k, 0, TY_I64)), cg_kcmp(k, KC_LT, pos1, held));
  KBlock *report = &cg_kif(k, blk, cg_kand(k, bad, first))->body;
  KExpr *words[RT_STATUS_WORDS] = {pos1, cg_kv(k, v), cg_kimm(k, axis, TY_I64), cg_kimm(k, (double)dim, TY_I64)};
  /* The position last: on a GPU the other words of a report come from a
   * thread that found a bad index too, whichever thread wins. */
  for (int w = 1; w < RT_STATUS_WORDS; w++)
    cg_kstore(k, report, ic->reports, cg_kint(k, r * RT_STATUS_WORDS + w), words[w]);
  cg_kstore(k, report, ic->reports, cg_kint(k, r * RT_STATUS_WORDS), words[0]);
  return cg_kv(k, at);
}

KExpr *cg_index_reported(CgBuild *b, Kernel *k, KBlock *blk, KExpr *pos, KExpr *raw, int axis, int64_t dim) {
  IndexCheck ic = {reports_of(b, k, 1), pos};
  return from_end(k, blk, &ic, 0, raw, axis, dim);
}

/* from_end's index, reported when out of range and then clamped into
 * the axis, so that nothing is read out of bounds. */
static KExpr *checked_index(Kernel *k, KBlock *blk, const IndexCheck *ic, int r, KExpr *raw, int axis, int64_t dim) {
  KExpr *at = cg_kop2(k, OP_MAXIMUM, from_end(k, blk, ic, r, raw, axis, dim), cg_kimm(k, 0, TY_I64));
  at = cg_kop2(k, OP_MINIMUM, at, cg_kimm(k, (double)(dim - 1), TY_I64));
  return cg_kv(k, cg_klet(k, blk, "safe", KT_INDEX, cg_kcast(k, at, KT_INDEX)));
}

/* An index outside [-dim, dim) is an error in eval.c: the kernel reports
 * it (checked_index) and reads a clamped one, so nothing is read out of
 * bounds while the run goes on to its end. */
bool lower_gather(CgBuild *b, const Node *n) {
  if (!move_dtypes(b, n)) return false;
  const Value *data = n->in[0], *ind = n->in[1], *out = &n->out[0];
  const TensorType *dt = &data->type, *it = &ind->type, *ot = &out->type;
  if (numel(ot) == 0) return true;
  int axis = (int)ir_attr_int(n, "axis");
  if (axis < 0) axis += dt->rank;
  int64_t dim = dt->dims[axis];
  if (dim == 0) {
    diag_error(cg_build_ctx(b), n->loc, "gather from an empty axis");
    return false;
  }
  int64_t dst[DL_MAX_RANK], ist[DL_MAX_RANK];
  strides_of(dt, dst);
  strides_of(it, ist);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, ot);
  KExpr *ii = cg_kint(k, 0);
  for (int d = 0; d < it->rank; d++)
    if (it->dims[d] != 1)
      ii = cg_kadd(k, ii, cg_kmul(k, map_coord(&m, axis + d), cg_kint(k, ist[d])));
  IndexCheck ic = {reports_of(b, k, 1), m.i};
  KExpr *at = checked_index(k, &m.main, &ic, 0, load_of(b, k, ind, "indices", ii), axis, dim);
  KExpr *src = cg_kmul(k, at, cg_kint(k, dst[axis]));
  for (int d = 0; d < axis; d++)
    if (dt->dims[d] != 1) src = cg_kadd(k, src, cg_kmul(k, map_coord(&m, d), cg_kint(k, dst[d])));
  for (int d = axis + 1; d < dt->rank; d++)
    if (dt->dims[d] != 1)
      src = cg_kadd(k, src, cg_kmul(k, map_coord(&m, d - 1 + it->rank), cg_kint(k, dst[d])));
  map_store(b, &m, out, load_of(b, k, data, "data", src));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- indexing by data: gather_elements, gather_nd, the scatters, topk ---- */

/* One thread per output element (indices' shape): data at the element's
 * coordinates with the axis one read from indices. */
bool lower_gather_elements(CgBuild *b, const Node *n) {
  const Value *data = n->in[0], *ind = n->in[1], *out = &n->out[0];
  const TensorType *dt = &data->type, *ot = &out->type;
  int axis = (int)ir_attr_int(n, "axis");
  int64_t dst[DL_MAX_RANK];
  strides_of(dt, dst);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, ot);
  IndexCheck ic = {reports_of(b, k, 1), m.i};
  KExpr *at = checked_index(k, &m.main, &ic, 0, load_of(b, k, ind, "indices", m.i), axis, dt->dims[axis]);
  KExpr *src = cg_kmul(k, at, cg_kint(k, dst[axis]));
  for (int d = 0; d < dt->rank; d++)
    if (d != axis && ot->dims[d] != 1)
      src = cg_kadd(k, src, cg_kmul(k, map_coord(&m, d), cg_kint(k, dst[d])));
  map_store(b, &m, out, load_of(b, k, data, "data", src));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* One thread per output element: its index row (the leading coordinates)
 * names the point of data, the trailing ones the element of its slice. */
bool lower_gather_nd(CgBuild *b, const Node *n) {
  const Value *data = n->in[0], *ind = n->in[1], *out = &n->out[0];
  const TensorType *dt = &data->type, *it = &ind->type, *ot = &out->type;
  int bd = (int)ir_attr_int(n, "batch_dims"), rows = it->rank - 1, q = (int)it->dims[rows];
  int64_t dst[DL_MAX_RANK], ist[DL_MAX_RANK];
  strides_of(dt, dst);
  strides_of(it, ist);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, ot);
  KExpr *row = cg_kint(k, 0), *src = cg_kint(k, 0);
  for (int d = 0; d < rows; d++) row = cg_kadd(k, row, cg_kmul(k, map_coord(&m, d), cg_kint(k, ist[d])));
  KVar *rv = cg_klet(k, &m.main, "row", KT_INDEX, row);
  for (int d = 0; d < bd; d++) src = cg_kadd(k, src, cg_kmul(k, map_coord(&m, d), cg_kint(k, dst[d])));
  IndexCheck ic = {reports_of(b, k, q), m.i};
  for (int j = 0; j < q; j++) {
    KExpr *raw = load_of(b, k, ind, "indices", cg_kadd(k, cg_kv(k, rv), cg_kint(k, j)));
    KExpr *at = checked_index(k, &m.main, &ic, j, raw, bd + j, dt->dims[bd + j]);
    src = cg_kadd(k, src, cg_kmul(k, at, cg_kint(k, dst[bd + j])));
  }
  for (int d = bd + q; d < dt->rank; d++)
    src = cg_kadd(k, src, cg_kmul(k, map_coord(&m, rows + d - bd - q), cg_kint(k, dst[d])));
  map_store(b, &m, out, load_of(b, k, data, "data", src));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* What a scatter's update does to the element there. */
static KExpr *scatter_combine(Kernel *k, const char *reduction, KExpr *cur, KExpr *upd) {
  if (strcmp(reduction, "add") == 0) return cg_kop2(k, OP_ADD, cur, upd);
  if (strcmp(reduction, "mul") == 0) return cg_kop2(k, OP_MUL, cur, upd);
  if (strcmp(reduction, "max") == 0) return cg_kop2(k, OP_MAXIMUM, cur, upd);
  if (strcmp(reduction, "min") == 0) return cg_kop2(k, OP_MINIMUM, cur, upd);
  return upd;
}

/* The scatters run one thread per element of the result, which goes
 * through every update that could address it, in order: no atomics, and
 * the same sequence of combinations as eval.c (the last "none" update
 * wins), so results are exact and deterministic.  An index out of range
 * addresses nothing and is reported (from_end).  The cost is the element count times the updates
 * per element's row (scatter_elements) or times all index rows
 * (scatter_nd). */
bool lower_scatter_elements(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, true)) return false;
  const Value *data = n->in[0], *ind = n->in[1], *upd = n->in[2], *out = &n->out[0];
  const TensorType *dt = &data->type, *it = &ind->type;
  int axis = (int)ir_attr_int(n, "axis");
  int64_t ist[DL_MAX_RANK];
  strides_of(it, ist);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, dt);
  KVar *v = cg_klet(k, &m.main, "v", dt->dtype, load_of(b, k, data, "data", m.i));
  /* Only the indices of the element's own line along axis can hit it. */
  KExpr *inside = NULL, *base = cg_kint(k, 0);
  for (int d = 0; d < dt->rank; d++) {
    if (d == axis) continue;
    if (it->dims[d] < dt->dims[d])
      inside = cg_kand(k, inside, cg_kcmp(k, KC_LT, map_coord(&m, d), cg_kint(k, it->dims[d])));
    if (it->dims[d] != 1) base = cg_kadd(k, base, cg_kmul(k, map_coord(&m, d), cg_kint(k, ist[d])));
  }
  KBlock *blk = inside ? &cg_kif(k, &m.main, inside)->body : &m.main;
  KVar *bv = cg_klet(k, blk, "line", KT_INDEX, base);
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *loop = cg_kloop(k, blk, t, cg_kint(k, it->dims[axis]), KM_SERIAL);
  KVar *u = cg_klet(k, &loop->body, "u", KT_INDEX,
                    cg_kadd(k, cg_kv(k, bv), cg_kmul(k, cg_kv(k, t), cg_kint(k, ist[axis]))));
  IndexCheck ic = {reports_of(b, k, 1), cg_kv(k, u)};
  KExpr *idx = from_end(k, &loop->body, &ic, 0, load_of(b, k, ind, "indices", cg_kv(k, u)), axis, dt->dims[axis]);
  KStmt *hit = cg_kif(k, &loop->body, cg_kcmp(k, KC_EQ, idx, cg_kcast(k, map_coord(&m, axis), TY_I64)));
  KExpr *uv = load_of(b, k, upd, "updates", cg_kv(k, u));
  cg_kset(k, &hit->body, v, scatter_combine(k, ir_attr_str(n, "reduction"), cg_kv(k, v), uv));
  map_store(b, &m, out, cg_kv(k, v));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

bool lower_scatter_nd(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, true)) return false;
  const Value *data = n->in[0], *ind = n->in[1], *upd = n->in[2], *out = &n->out[0];
  const TensorType *dt = &data->type, *it = &ind->type;
  int q = (int)it->dims[it->rank - 1];
  int64_t rows = numel(it) / q, slice = 1, dst[DL_MAX_RANK];
  for (int d = q; d < dt->rank; d++) slice *= dt->dims[d];
  strides_of(dt, dst);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, dt);
  KVar *v = cg_klet(k, &m.main, "v", dt->dtype, load_of(b, k, data, "data", m.i));
  /* The element is slice element s of the point at offset p. */
  KVar *s = cg_klet(k, &m.main, "s", KT_INDEX, cg_kidx(k, KI_MOD, m.i, cg_kint(k, slice)));
  KVar *p = cg_klet(k, &m.main, "p", KT_INDEX, cg_kidx(k, KI_SUB, m.i, cg_kv(k, s)));
  KVar *r = cg_kvar(k, "r", KT_INDEX);
  KStmt *loop = cg_kloop(k, &m.main, r, cg_kint(k, rows), KM_SERIAL);
  KExpr *ok = NULL, *target = cg_kint(k, 0);
  IndexCheck ic = {reports_of(b, k, q), cg_kv(k, r)};
  for (int j = 0; j < q; j++) {
    KExpr *at = cg_kadd(k, cg_kmul(k, cg_kv(k, r), cg_kint(k, q)), cg_kint(k, j));
    KExpr *raw = load_of(b, k, ind, "indices", at);
    KVar *a = cg_klet(k, &loop->body, "a", TY_I64, from_end(k, &loop->body, &ic, j, raw, j, dt->dims[j]));
    ok = cg_kand(k, ok, cg_kcmp(k, KC_GE, cg_kv(k, a), cg_kimm(k, 0, TY_I64)));
    ok = cg_kand(k, ok, cg_kcmp(k, KC_LT, cg_kv(k, a), cg_kimm(k, (double)dt->dims[j], TY_I64)));
    target = cg_kadd(k, target, cg_kmul(k, cg_kcast(k, cg_kv(k, a), KT_INDEX), cg_kint(k, dst[j])));
  }
  /* && short-circuits: an index out of range never meets the offset. */
  KStmt *hit = cg_kif(k, &loop->body, cg_kand(k, ok, cg_kcmp(k, KC_EQ, target, cg_kv(k, p))));
  KExpr *ui = cg_kadd(k, cg_kmul(k, cg_kv(k, r), cg_kint(k, slice)), cg_kv(k, s));
  KExpr *uv = load_of(b, k, upd, "updates", ui);
  cg_kset(k, &hit->body, v, scatter_combine(k, ir_attr_str(n, "reduction"), cg_kv(k, v), uv));
  map_store(b, &m, out, cg_kv(k, v));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* a (at position ia) comes before b (at ib) in topk's order: larger
 * (smaller) first, NaN above every number, ties to the lower position. */
static KExpr *topk_before(Kernel *k, bool largest, bool floats, KExpr *a, KExpr *ia, KExpr *b, KExpr *ib) {
  KExpr *first = cg_kcmp(k, largest ? KC_GT : KC_LT, a, b);
  KExpr *same = cg_kcmp(k, KC_EQ, a, b);
  if (floats) {
    KExpr *a_nan = cg_kcmp(k, KC_NE, a, a), *b_nan = cg_kcmp(k, KC_NE, b, b);
    KExpr *nan_first = largest ? cg_kand(k, a_nan, cg_knot(k, b_nan)) : cg_kand(k, b_nan, cg_knot(k, a_nan));
    first = cg_kor(k, first, nan_first);
    same = cg_kor(k, same, cg_kand(k, a_nan, b_nan));
  }
  return cg_kor(k, first, cg_kand(k, same, cg_kcmp(k, KC_LT, ia, ib)));
}

/* One thread per row, by selection as eval.c: the j-th result is the
 * first element after the (j-1)-th, k passes over the row. */
bool lower_topk(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, true)) return false;
  const Value *x = n->in[0], *vals = &n->out[0], *inds = &n->out[1];
  int axis = (int)ir_attr_int(n, "axis");
  int64_t kk = ir_attr_int(n, "k"), outer, len, inner;
  bool largest = ir_attr_int(n, "largest") != 0;
  split_axis(&x->type, axis, &outer, &len, &inner);
  DType dt = x->type.dtype;
  bool floats = ir_dtype_is_float(dt);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  TensorType rows = flat(TY_I64, outer * inner);
  Map m;
  map_begin(&m, k, &rows);
  KVar *base = row_base(k, &m.main, m.i, len, inner), *obase = row_base(k, &m.main, m.i, kk, inner);
  KVar *prev = cg_klet(k, &m.main, "prev", KT_INDEX, cg_kint(k, -1));
  KVar *pv = cg_klet(k, &m.main, "pv", dt, load_of(b, k, x, "x", cg_kv(k, base)));
  KVar *j = cg_kvar(k, "j", KT_INDEX), *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lj = cg_kloop(k, &m.main, j, cg_kint(k, kk), KM_SERIAL);
  KVar *best = cg_klet(k, &lj->body, "best", KT_INDEX, cg_kint(k, -1));
  KVar *bv = cg_klet(k, &lj->body, "bv", dt, cg_kv(k, pv));
  KStmt *lt = cg_kloop(k, &lj->body, t, cg_kint(k, len), KM_SERIAL);
  KVar *v = cg_klet(k, &lt->body, "v", dt, load_of(b, k, x, "x", row_at(k, base, cg_kv(k, t), inner)));
  KExpr *v_e = cg_kv(k, v), *t_e = cg_kv(k, t), *prev_e = cg_kv(k, prev), *best_e = cg_kv(k, best);
  KExpr *after = cg_kor(k, cg_kcmp(k, KC_LT, prev_e, cg_kint(k, 0)),
                        topk_before(k, largest, floats, cg_kv(k, pv), prev_e, v_e, t_e));
  KExpr *better = cg_kor(k, cg_kcmp(k, KC_LT, best_e, cg_kint(k, 0)),
                         topk_before(k, largest, floats, v_e, t_e, cg_kv(k, bv), best_e));
  KStmt *pick = cg_kif(k, &lt->body, cg_kand(k, after, better));
  cg_kset(k, &pick->body, best, cg_kv(k, t));
  cg_kset(k, &pick->body, bv, cg_kv(k, v));
  KVar *at = cg_klet(k, &lj->body, "o", KT_INDEX, row_at(k, obase, cg_kv(k, j), inner));
  cg_kstore(k, &lj->body, global_of(b, k, vals, "values"), cg_kv(k, at), cg_kv(k, bv));
  cg_kstore(k, &lj->body, global_of(b, k, inds, "indices"), cg_kv(k, at),
            cg_kcast(k, cg_kv(k, best), TY_I64));
  cg_kset(k, &lj->body, prev, cg_kv(k, best));
  cg_kset(k, &lj->body, pv, cg_kv(k, bv));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* One block of NONZERO_THREADS: each thread counts the nonzeros of its
 * slice of x (slices in order), thread 0 turns the counts into offsets
 * (a serial scan of a few hundred), and each thread writes its
 * coordinates from its offset, so they come in row-major order as in
 * eval.c; the columns past the total are zeroed, strided across the
 * threads.  One block, not a grid: a grid would need a second launch or
 * a grid-wide barrier for the offsets, for what in the models that use
 * NonZero is a small tensor. */
enum { NONZERO_THREADS = 256 };

bool lower_nonzero(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, true)) return false;
  const Value *x = n->in[0];
  const TensorType *t = &x->type;
  int64_t total = numel(t), st[DL_MAX_RANK], T = NONZERO_THREADS;
  int64_t slice = (total + T - 1) / T, stripes = (total + T - 1) / T;
  strides_of(t, st);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  k->grid[0] = k->grid[1] = k->grid[2] = 1;
  k->block[0] = (uint32_t)T, k->block[1] = k->block[2] = 1;
  KBuf *coords = global_of(b, k, &n->out[0], "coords");
  KBuf *part = cg_klocal(k, "part", TY_I64, T + 1, KSP_SHARED);
  KVar *tv = cg_kvar(k, "t", KT_INDEX);
  KStmt *lt = cg_kloop(k, &k->body, tv, cg_kint(k, T), KM_BLOCK_X);
  KBlock *body = &lt->body;
  KExpr *te = cg_kv(k, tv);
  KExpr *lo = cg_kv(k, cg_klet(k, body, "lo", KT_INDEX, cg_kmul(k, te, cg_kint(k, slice))));
  KExpr *hi = cg_kidx(k, KI_MIN, cg_kadd(k, lo, cg_kint(k, slice)), cg_kint(k, total));
  KExpr *len = cg_kv(k, cg_klet(k, body, "len", KT_INDEX,
                                cg_kidx(k, KI_MAX, cg_kidx(k, KI_SUB, hi, lo), cg_kint(k, 0))));
  KVar *mine = cg_klet(k, body, "mine", KT_INDEX, cg_kint(k, 0));
  KVar *e = cg_kvar(k, "e", KT_INDEX);
  KStmt *count = cg_kloop(k, body, e, len, KM_SERIAL);
  KExpr *v = load_of(b, k, x, "x", cg_kadd(k, lo, cg_kv(k, e)));
  KBlock *hit = &cg_kif(k, &count->body, cg_kcmp(k, KC_NE, v, cg_kimm(k, 0, t->dtype)))->body;
  cg_kset(k, hit, mine, cg_kadd(k, cg_kv(k, mine), cg_kint(k, 1)));
  cg_kstore(k, body, part, te, cg_kcast(k, cg_kv(k, mine), TY_I64));
  cg_kbarrier(k, body);
  KBlock *scan = &cg_kif(k, body, cg_kcmp(k, KC_EQ, te, cg_kint(k, 0)))->body;
  KVar *run = cg_klet(k, scan, "run", TY_I64, cg_kimm(k, 0, TY_I64));
  KVar *j = cg_kvar(k, "j", KT_INDEX);
  KStmt *sl = cg_kloop(k, scan, j, cg_kint(k, T), KM_SERIAL);
  KExpr *c = cg_kv(k, cg_klet(k, &sl->body, "c", TY_I64, cg_kload(k, part, cg_kv(k, j))));
  cg_kstore(k, &sl->body, part, cg_kv(k, j), cg_kv(k, run));
  cg_kset(k, &sl->body, run, cg_kop2(k, OP_ADD, cg_kv(k, run), c));
  cg_kstore(k, scan, part, cg_kint(k, T), cg_kv(k, run));
  cg_kstore(k, scan, global_of(b, k, &n->out[1], "count"), cg_kint(k, 0), cg_kv(k, run));
  cg_kbarrier(k, body);
  KVar *at = cg_klet(k, body, "at", KT_INDEX, cg_kcast(k, cg_kload(k, part, te), KT_INDEX));
  KExpr *all = cg_kv(k, cg_klet(k, body, "all", KT_INDEX, cg_kcast(k, cg_kload(k, part, cg_kint(k, T)), KT_INDEX)));
  KVar *w = cg_kvar(k, "w", KT_INDEX);
  KStmt *write = cg_kloop(k, body, w, len, KM_SERIAL);
  KExpr *i = cg_kv(k, cg_klet(k, &write->body, "i", KT_INDEX, cg_kadd(k, lo, cg_kv(k, w))));
  KBlock *found = &cg_kif(k, &write->body, cg_kcmp(k, KC_NE, load_of(b, k, x, "x", i), cg_kimm(k, 0, t->dtype)))->body;
  for (int d = 0; d < t->rank; d++) {
    KExpr *cd = cg_kidx(k, KI_DIV, i, cg_kint(k, st[d]));
    if (d) cd = cg_kidx(k, KI_MOD, cd, cg_kint(k, t->dims[d]));
    cg_kstore(k, found, coords, cg_kadd(k, cg_kint(k, d * total), cg_kv(k, at)), cg_kcast(k, cd, TY_I64));
  }
  cg_kset(k, found, at, cg_kadd(k, cg_kv(k, at), cg_kint(k, 1)));
  KVar *r = cg_kvar(k, "r", KT_INDEX);
  KStmt *rest = cg_kloop(k, body, r, cg_kint(k, stripes), KM_SERIAL);
  KExpr *col = cg_kv(k, cg_klet(k, &rest->body, "col", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, r), cg_kint(k, T)), te)));
  KBlock *pad = &cg_kif(k, &rest->body, cg_kand(k, cg_kcmp(k, KC_LT, col, cg_kint(k, total)), cg_kcmp(k, KC_GE, col, all)))->body;
  for (int d = 0; d < t->rank; d++)
    cg_kstore(k, pad, coords, cg_kadd(k, cg_kint(k, d * total), col), cg_kimm(k, 0, TY_I64));
  cg_launch(b, k);
  return true;
}

/* Python's max and min as eval.c takes them (NaN aside, fmaxf's and
 * fminf's values), and a box's low and high side. */
static KExpr *py_max(Kernel *k, KExpr *a, KExpr *b) { return cg_ksel(k, cg_kcmp(k, KC_GT, b, a), b, a); }
static KExpr *py_min(Kernel *k, KExpr *a, KExpr *b) { return cg_ksel(k, cg_kcmp(k, KC_LT, b, a), b, a); }

/* The candidate's and a kept box's sides, [x0, x1, y0, y1], as lets. */
static void nms_sides(Kernel *k, KBlock *in, KBuf *boxes, KExpr *at, bool centers, KExpr **side) {
  KExpr *v[4];
  for (int c = 0; c < 4; c++)
    v[c] = cg_kv(k, cg_klet(k, in, "bc", TY_F32, cg_kload(k, boxes, cg_kadd(k, at, cg_kint(k, c)))));
  KExpr *lo[2], *hi[2];
  for (int d = 0; d < 2; d++) {
    if (centers) { /* [x, y, w, h]: x for d 0 */
      KExpr *half = cg_kop2(k, OP_DIV, v[2 + d], cg_kimm(k, 2, TY_F32));
      lo[d] = cg_kop2(k, OP_SUB, v[d], half);
      hi[d] = cg_kop2(k, OP_ADD, v[d], half);
    } else { /* [y1, x1, y2, x2]: x from 1 and 3 for d 0 */
      KExpr *a = v[1 - d], *b = v[3 - d], *swap = cg_kcmp(k, KC_GE, a, b);
      lo[d] = cg_ksel(k, swap, b, a);
      hi[d] = cg_ksel(k, swap, a, b);
    }
  }
  side[0] = lo[0], side[1] = hi[0], side[2] = lo[1], side[3] = hi[1];
  for (int s = 0; s < 4; s++) side[s] = cg_kv(k, cg_klet(k, in, "side", TY_F32, side[s]));
}

/* nms (ops.def) in one block of NMS_THREADS, as eval.c's loops: every
 * class of every batch in turn, and each step of a class's selection
 * spread over the threads: each takes the best of its stripe of scores
 * after the last pick, a tree in shared memory the best of those (the
 * higher score, then the lower box), and the kept boxes of the class
 * are checked side by side, any IoU over the threshold setting a shared
 * flag.  Every thread follows the same steps (the picks are read back
 * from shared memory), so the barriers are reached together; thread 0
 * writes the rows.  One block and not one per class: the rows of all
 * classes are packed in order, which needs each class's count before
 * the next class's rows. */
enum { NMS_THREADS = 256 };

bool lower_nms(CgBuild *b, const Node *n) {
  const TensorType *st = &n->in[1]->type;
  int64_t C = st->dims[1], N = st->dims[2], BC = st->dims[0] * C, bound = ir_attr_int(n, "bound");
  int64_t T = NMS_THREADS, stripes = (N + T - 1) / T, kept_stripes = (bound + T - 1) / T;
  int64_t cells = numel(&n->out[0].type);
  bool centers = ir_attr_int(n, "center_point_box") != 0, use_floor = ir_attr_int(n, "use_floor") != 0;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  k->grid[0] = k->grid[1] = k->grid[2] = 1;
  k->block[0] = (uint32_t)T, k->block[1] = k->block[2] = 1;
  KBuf *rows = global_of(b, k, &n->out[0], "rows"), *boxes = global_of(b, k, n->in[0], "boxes");
  KBuf *scores = global_of(b, k, n->in[1], "scores");
  KBuf *red_s = cg_klocal(k, "red_s", TY_F32, T, KSP_SHARED), *red_i = cg_klocal(k, "red_i", TY_I64, T, KSP_SHARED);
  KBuf *flag = cg_klocal(k, "flag", TY_I64, 1, KSP_SHARED);
  KVar *tv = cg_kvar(k, "t", KT_INDEX);
  KStmt *lt = cg_kloop(k, &k->body, tv, cg_kint(k, T), KM_BLOCK_X);
  KBlock *top = &lt->body;
  KExpr *te = cg_kv(k, tv), *zero_i = cg_kint(k, 0);
  KVar *z = cg_kvar(k, "z", KT_INDEX);
  KStmt *clear = cg_kloop(k, top, z, cg_kint(k, (cells + T - 1) / T), KM_SERIAL);
  KExpr *cell = cg_kv(k, cg_klet(k, &clear->body, "cell", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, z), cg_kint(k, T)), te)));
  cg_kstore(k, &cg_kif(k, &clear->body, cg_kcmp(k, KC_LT, cell, cg_kint(k, cells)))->body, rows, cell,
            cg_kimm(k, 0, TY_I64));
  cg_kbarrier(k, top);
  /* Clamped in i64 first: torchvision's export asks for INT64_MAX. */
  KExpr *want = cg_kv(k, cg_klet(k, top, "asked", TY_I64, load_of(b, k, n->in[2], "most", zero_i)));
  KExpr *none = cg_kimm(k, 0, TY_I64), *all = cg_kimm(k, (double)bound, TY_I64);
  want = cg_ksel(k, cg_kcmp(k, KC_LT, want, none), none, cg_ksel(k, cg_kcmp(k, KC_GT, want, all), all, want));
  KExpr *most = cg_kv(k, cg_klet(k, top, "most", KT_INDEX, cg_kcast(k, want, KT_INDEX)));
  KExpr *iou = cg_kv(k, cg_klet(k, top, "iou", TY_F32, load_of(b, k, n->in[3], "iou", zero_i)));
  KExpr *floor_score = cg_kv(k, cg_klet(k, top, "floor", TY_F32, load_of(b, k, n->in[4], "floor", zero_i)));
  KVar *count = cg_klet(k, top, "count", KT_INDEX, zero_i);
  KVar *bc = cg_kvar(k, "bc", KT_INDEX);
  KStmt *classes = cg_kloop(k, top, bc, cg_kint(k, BC), KM_SERIAL);
  KBlock *cls = &classes->body;
  KExpr *batch = cg_kv(k, cg_klet(k, cls, "batch", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, bc), cg_kint(k, C))));
  KExpr *sbase = cg_kv(k, cg_klet(k, cls, "sbase", KT_INDEX, cg_kmul(k, cg_kv(k, bc), cg_kint(k, N))));
  KVar *kept = cg_klet(k, cls, "kept", KT_INDEX, zero_i);
  KVar *prev = cg_klet(k, cls, "prev", KT_INDEX, cg_kint(k, -1));
  KVar *ps = cg_klet(k, cls, "ps", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *done = cg_klet(k, cls, "done", KT_INDEX, zero_i);
  KVar *step = cg_kvar(k, "step", KT_INDEX);
  KStmt *steps = cg_kloop(k, cls, step, cg_kint(k, N), KM_SERIAL);
  KExpr *active = cg_kand(k, cg_kcmp(k, KC_EQ, cg_kv(k, done), zero_i), cg_kcmp(k, KC_LT, cg_kv(k, kept), most));
  KBlock *go = &cg_kif(k, &steps->body, active)->body;
  /* this thread's best of its stripe */
  KVar *best = cg_klet(k, go, "best", KT_INDEX, cg_kint(k, -1));
  KVar *bs = cg_klet(k, go, "bs", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *q = cg_kvar(k, "q", KT_INDEX);
  KStmt *scan = cg_kloop(k, go, q, cg_kint(k, stripes), KM_SERIAL);
  KExpr *tix = cg_kv(k, cg_klet(k, &scan->body, "box", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, q), cg_kint(k, T)), te)));
  KBlock *in = &cg_kif(k, &scan->body, cg_kcmp(k, KC_LT, tix, cg_kint(k, N)))->body;
  KExpr *s = cg_kv(k, cg_klet(k, in, "s", TY_F32, cg_kload(k, scores, cg_kadd(k, sbase, tix))));
  KExpr *pv = cg_kv(k, prev), *pse = cg_kv(k, ps);
  KExpr *after = cg_kor(k, cg_kcmp(k, KC_LT, pv, zero_i),
                        cg_kor(k, cg_kcmp(k, KC_LT, s, pse), cg_kand(k, cg_kcmp(k, KC_EQ, s, pse), cg_kcmp(k, KC_GT, tix, pv))));
  KExpr *better = cg_kor(k, cg_kcmp(k, KC_LT, cg_kv(k, best), zero_i), cg_kcmp(k, KC_GT, s, cg_kv(k, bs)));
  KExpr *counts = use_floor ? cg_kcmp(k, KC_GT, s, floor_score) : NULL; /* cg_kand of NULL: the other alone */
  KBlock *pick = &cg_kif(k, in, cg_kand(k, counts, cg_kand(k, after, better)))->body;
  cg_kset(k, pick, best, tix);
  cg_kset(k, pick, bs, s);
  cg_kstore(k, go, red_s, te, cg_kv(k, bs));
  cg_kstore(k, go, red_i, te, cg_kcast(k, cg_kv(k, best), TY_I64));
  cg_kbarrier(k, go);
  /* the block's best: the higher score, then the lower box */
  for (int64_t h = T / 2; h >= 1; h /= 2) {
    KBlock *half = &cg_kif(k, go, cg_kcmp(k, KC_LT, te, cg_kint(k, h)))->body;
    KExpr *other = cg_kadd(k, te, cg_kint(k, h));
    KExpr *oi = cg_kv(k, cg_klet(k, half, "oi", TY_I64, cg_kload(k, red_i, other)));
    KExpr *os = cg_kv(k, cg_klet(k, half, "os", TY_F32, cg_kload(k, red_s, other)));
    KExpr *mi = cg_kv(k, cg_klet(k, half, "mi", TY_I64, cg_kload(k, red_i, te)));
    KExpr *ms = cg_kv(k, cg_klet(k, half, "ms", TY_F32, cg_kload(k, red_s, te)));
    KExpr *take = cg_kand(k, cg_kcmp(k, KC_GE, oi, none),
                          cg_kor(k, cg_kcmp(k, KC_LT, mi, none),
                                 cg_kor(k, cg_kcmp(k, KC_GT, os, ms),
                                        cg_kand(k, cg_kcmp(k, KC_EQ, os, ms), cg_kcmp(k, KC_LT, oi, mi)))));
    KBlock *swap = &cg_kif(k, half, take)->body;
    cg_kstore(k, swap, red_i, te, oi);
    cg_kstore(k, swap, red_s, te, os);
    cg_kbarrier(k, go);
  }
  KExpr *bi = cg_kv(k, cg_klet(k, go, "pick", KT_INDEX, cg_kcast(k, cg_kload(k, red_i, zero_i), KT_INDEX)));
  KExpr *bsv = cg_kv(k, cg_klet(k, go, "pick_s", TY_F32, cg_kload(k, red_s, zero_i)));
  cg_kstore(k, &cg_kif(k, go, cg_kcmp(k, KC_EQ, te, zero_i))->body, flag, zero_i, none);
  cg_kbarrier(k, go);
  KStmt *found = cg_kif(k, go, cg_kcmp(k, KC_GE, bi, zero_i));
  cg_kset(k, &found->orelse, done, cg_kint(k, 1));
  KBlock *f = &found->body;
  cg_kset(k, f, prev, bi);
  cg_kset(k, f, ps, bsv);
  KExpr *at = cg_kmul(k, cg_kadd(k, cg_kmul(k, batch, cg_kint(k, N)), bi), cg_kint(k, 4));
  KExpr *cand[4];
  nms_sides(k, f, boxes, at, centers, cand);
  /* the kept boxes of this class, a stripe each */
  KVar *r = cg_kvar(k, "r", KT_INDEX);
  KStmt *check = cg_kloop(k, f, r, cg_kint(k, kept_stripes), KM_SERIAL);
  KExpr *kq = cg_kv(k, cg_klet(k, &check->body, "kq", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, r), cg_kint(k, T)), te)));
  KBlock *cb = &cg_kif(k, &check->body, cg_kcmp(k, KC_LT, kq, cg_kv(k, kept)))->body;
  KExpr *row = cg_kadd(k, cg_kidx(k, KI_SUB, cg_kv(k, count), cg_kv(k, kept)), kq);
  KExpr *other = cg_kcast(k, cg_kload(k, rows, cg_kadd(k, cg_kmul(k, row, cg_kint(k, 3)), cg_kint(k, 2))), KT_INDEX);
  KExpr *kside[4];
  nms_sides(k, cb, boxes, cg_kmul(k, cg_kadd(k, cg_kmul(k, batch, cg_kint(k, N)), other), cg_kint(k, 4)), centers,
            kside);
  KExpr *ix0 = cg_kv(k, cg_klet(k, cb, "ix0", TY_F32, py_max(k, cand[0], kside[0])));
  KExpr *ix1 = cg_kv(k, cg_klet(k, cb, "ix1", TY_F32, py_min(k, cand[1], kside[1])));
  KExpr *iy0 = cg_kv(k, cg_klet(k, cb, "iy0", TY_F32, py_max(k, cand[2], kside[2])));
  KExpr *iy1 = cg_kv(k, cg_klet(k, cb, "iy1", TY_F32, py_min(k, cand[3], kside[3])));
  KExpr *inter = cg_kv(k, cg_klet(k, cb, "inter", TY_F32,
                                   cg_kop2(k, OP_MUL, cg_kop2(k, OP_SUB, ix1, ix0), cg_kop2(k, OP_SUB, iy1, iy0))));
  KExpr *area_a = cg_kv(k, cg_klet(k, cb, "area", TY_F32,
                                    cg_kop2(k, OP_MUL, cg_kop2(k, OP_SUB, cand[1], cand[0]),
                                            cg_kop2(k, OP_SUB, cand[3], cand[2]))));
  KExpr *area_b = cg_kv(k, cg_klet(k, cb, "area", TY_F32,
                                    cg_kop2(k, OP_MUL, cg_kop2(k, OP_SUB, kside[1], kside[0]),
                                            cg_kop2(k, OP_SUB, kside[3], kside[2]))));
  KExpr *uni = cg_kv(k, cg_klet(k, cb, "uni", TY_F32, cg_kop2(k, OP_SUB, cg_kop2(k, OP_ADD, area_a, area_b), inter)));
  KExpr *zero_f = cg_kimm(k, 0, TY_F32);
  KExpr *overlap = cg_kand(k, cg_kcmp(k, KC_GT, ix1, ix0), cg_kcmp(k, KC_GT, iy1, iy0));
  overlap = cg_kand(k, overlap, cg_kand(k, cg_kcmp(k, KC_GT, inter, zero_f), cg_kcmp(k, KC_GT, area_a, zero_f)));
  overlap = cg_kand(k, overlap, cg_kand(k, cg_kcmp(k, KC_GT, area_b, zero_f), cg_kcmp(k, KC_GT, uni, zero_f)));
  KExpr *suppress = cg_kand(k, overlap, cg_kcmp(k, KC_GT, cg_kop2(k, OP_DIV, inter, uni), iou));
  cg_kstore(k, &cg_kif(k, cb, suppress)->body, flag, zero_i, cg_kimm(k, 1, TY_I64));
  cg_kbarrier(k, f);
  KBlock *add = &cg_kif(k, f, cg_kcmp(k, KC_EQ, cg_kload(k, flag, zero_i), none))->body;
  KBlock *writer = &cg_kif(k, add, cg_kcmp(k, KC_EQ, te, zero_i))->body;
  KExpr *r3 = cg_kmul(k, cg_kv(k, count), cg_kint(k, 3));
  cg_kstore(k, writer, rows, r3, cg_kcast(k, batch, TY_I64));
  cg_kstore(k, writer, rows, cg_kadd(k, r3, cg_kint(k, 1)), cg_kcast(k, cg_kidx(k, KI_MOD, cg_kv(k, bc), cg_kint(k, C)), TY_I64));
  cg_kstore(k, writer, rows, cg_kadd(k, r3, cg_kint(k, 2)), cg_kcast(k, bi, TY_I64));
  cg_kset(k, add, count, cg_kadd(k, cg_kv(k, count), cg_kint(k, 1)));
  cg_kset(k, add, kept, cg_kadd(k, cg_kv(k, kept), cg_kint(k, 1)));
  cg_kbarrier(k, f);
  cg_kstore(k, &cg_kif(k, top, cg_kcmp(k, KC_EQ, te, zero_i))->body, global_of(b, k, &n->out[1], "count"), zero_i,
            cg_kcast(k, cg_kv(k, count), TY_I64));
  cg_launch(b, k);
  return true;
}

/* unique's order (ops.def): NaNs equal and above every number, -0.0
 * equal to 0.0 (neither < says so). */
static KExpr *unique_lt(Kernel *k, bool floats, KExpr *a, KExpr *b) {
  KExpr *lt = cg_kcmp(k, KC_LT, a, b);
  return floats ? cg_kor(k, lt, cg_kand(k, cg_kcmp(k, KC_EQ, a, a), cg_kcmp(k, KC_NE, b, b))) : lt;
}

/* Rows a and b of x (m elements each) compared in unique's order: a
 * let of -1, 0 or 1, the first element that differs deciding.  With
 * apart (rows of floats), a row with a NaN equals no other: rows that
 * tie are ordered by place, as eval.c's stable sort leaves them. */
static KExpr *unique_cmp(Kernel *k, KBlock *in, KBuf *xs, bool floats, bool apart, KExpr *a, KExpr *b, int64_t m) {
  KVar *cmp = cg_klet(k, in, "cmp", KT_INDEX, cg_kint(k, 0));
  KVar *c = cg_kvar(k, "c", KT_INDEX);
  KStmt *walk = cg_kloop(k, in, c, cg_kint(k, m), KM_SERIAL);
  KBlock *undecided = &cg_kif(k, &walk->body, cg_kcmp(k, KC_EQ, cg_kv(k, cmp), cg_kint(k, 0)))->body;
  KExpr *va = cg_kv(k, cg_klet(k, undecided, "va", xs->dtype,
                               cg_kload(k, xs, cg_kadd(k, cg_kmul(k, a, cg_kint(k, m)), cg_kv(k, c)))));
  KExpr *vb = cg_kv(k, cg_klet(k, undecided, "vb", xs->dtype,
                               cg_kload(k, xs, cg_kadd(k, cg_kmul(k, b, cg_kint(k, m)), cg_kv(k, c)))));
  KStmt *less = cg_kif(k, undecided, unique_lt(k, floats, va, vb));
  cg_kset(k, &less->body, cmp, cg_kint(k, -1));
  cg_kset(k, &cg_kif(k, &less->orelse, unique_lt(k, floats, vb, va))->body, cmp, cg_kint(k, 1));
  if (!apart) return cg_kv(k, cmp);
  KVar *nan = cg_klet(k, in, "nan", KT_INDEX, cg_kint(k, 0));
  KBlock *tie = &cg_kif(k, in, cg_kcmp(k, KC_EQ, cg_kv(k, cmp), cg_kint(k, 0)))->body;
  KVar *c2 = cg_kvar(k, "c", KT_INDEX);
  KStmt *scan = cg_kloop(k, tie, c2, cg_kint(k, m), KM_SERIAL);
  KExpr *v = cg_kv(k, cg_klet(k, &scan->body, "v", xs->dtype,
                              cg_kload(k, xs, cg_kadd(k, cg_kmul(k, a, cg_kint(k, m)), cg_kv(k, c2)))));
  cg_kset(k, &cg_kif(k, &scan->body, cg_kcmp(k, KC_NE, v, v))->body, nan, cg_kint(k, 1));
  KBlock *by_place = &cg_kif(k, tie, cg_kcmp(k, KC_NE, cg_kv(k, nan), cg_kint(k, 0)))->body;
  cg_kset(k, &cg_kif(k, by_place, cg_kcmp(k, KC_LT, a, b))->body, cmp, cg_kint(k, -1));
  cg_kset(k, &cg_kif(k, by_place, cg_kcmp(k, KC_GT, a, b))->body, cmp, cg_kint(k, 1));
  return cg_kv(k, cmp);
}

/* unique in one thread, O(n) row comparisons per distinct row (a value
 * of a 1-d x is a row of one): unsorted, each row looked up among the
 * first rows of the groups found so far; sorted, each next group
 * selected as the least row above the last (eval.c sorts instead; the
 * results are the same).  The padding is zeroed first. */
bool lower_unique(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, true)) return false;
  const Value *x = n->in[0];
  DType dt = x->type.dtype;
  bool floats = ir_dtype_is_float(dt), sorted = ir_attr_int(n, "sorted") != 0;
  bool apart = floats && x->type.rank == 2; /* rows with a NaN each their own */
  int64_t rows = x->type.dims[0], m = x->type.rank == 2 ? x->type.dims[1] : 1;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  TensorType one = flat(TY_I64, 1);
  Map mp;
  map_begin(&mp, k, &one);
  KBlock *top = &mp.main;
  KBuf *y = global_of(b, k, &n->out[0], "y"), *first = global_of(b, k, &n->out[1], "first");
  KBuf *inverse = global_of(b, k, &n->out[2], "inverse"), *counts = global_of(b, k, &n->out[3], "counts");
  KBuf *xs = global_of(b, k, x, "x");
  KVar *e = cg_kvar(k, "e", KT_INDEX);
  KStmt *zero = cg_kloop(k, top, e, cg_kint(k, rows * m), KM_SERIAL);
  cg_kstore(k, &zero->body, y, cg_kv(k, e), cg_kimm(k, 0, dt));
  KVar *e2 = cg_kvar(k, "e", KT_INDEX);
  KStmt *zero2 = cg_kloop(k, top, e2, cg_kint(k, rows), KM_SERIAL);
  cg_kstore(k, &zero2->body, first, cg_kv(k, e2), cg_kimm(k, 0, TY_I64));
  cg_kstore(k, &zero2->body, counts, cg_kv(k, e2), cg_kimm(k, 0, TY_I64));
  KVar *count = cg_klet(k, top, "count", KT_INDEX, cg_kint(k, 0));
  KExpr *ce = cg_kv(k, count);
  KVar *group_first = NULL; /* the row that starts a group just found */
  KBlock *fresh_at = NULL;
  if (!sorted) {
    KVar *i = cg_kvar(k, "i", KT_INDEX);
    KStmt *walk = cg_kloop(k, top, i, cg_kint(k, rows), KM_SERIAL);
    KBlock *w = &walk->body;
    KVar *found = cg_klet(k, w, "found", KT_INDEX, cg_kint(k, -1));
    KVar *j = cg_kvar(k, "j", KT_INDEX);
    KStmt *look = cg_kloop(k, w, j, ce, KM_SERIAL);
    KBlock *lb = &cg_kif(k, &look->body, cg_kcmp(k, KC_LT, cg_kv(k, found), cg_kint(k, 0)))->body;
    KExpr *head = cg_kcast(k, cg_kload(k, first, cg_kv(k, j)), KT_INDEX);
    KExpr *cmp = unique_cmp(k, lb, xs, floats, apart, head, cg_kv(k, i), m);
    cg_kset(k, &cg_kif(k, lb, cg_kcmp(k, KC_EQ, cmp, cg_kint(k, 0)))->body, found, cg_kv(k, j));
    KBlock *fresh = &cg_kif(k, w, cg_kcmp(k, KC_LT, cg_kv(k, found), cg_kint(k, 0)))->body;
    cg_kstore(k, fresh, first, ce, cg_kcast(k, cg_kv(k, i), TY_I64));
    group_first = i, fresh_at = fresh;
    cg_kset(k, fresh, found, ce);
    KExpr *f = cg_kv(k, found);
    cg_kstore(k, w, counts, f, cg_kop2(k, OP_ADD, cg_kload(k, counts, f), cg_kimm(k, 1, TY_I64)));
    cg_kstore(k, w, inverse, cg_kv(k, i), cg_kcast(k, f, TY_I64));
  } else {
    KVar *have = cg_klet(k, top, "have", KT_INDEX, cg_kint(k, 0)), *done = cg_klet(k, top, "done", KT_INDEX, cg_kint(k, 0));
    KVar *prev = cg_klet(k, top, "prev", KT_INDEX, cg_kint(k, 0));
    KVar *step = cg_kvar(k, "step", KT_INDEX);
    KStmt *steps = cg_kloop(k, top, step, cg_kint(k, rows), KM_SERIAL);
    KBlock *go = &cg_kif(k, &steps->body, cg_kcmp(k, KC_EQ, cg_kv(k, done), cg_kint(k, 0)))->body;
    KVar *best = cg_klet(k, go, "best", KT_INDEX, cg_kint(k, -1));
    KVar *cnt = cg_klet(k, go, "cnt", KT_INDEX, cg_kint(k, 0));
    KVar *t = cg_kvar(k, "t", KT_INDEX);
    KStmt *scan = cg_kloop(k, go, t, cg_kint(k, rows), KM_SERIAL);
    KBlock *sb = &scan->body;
    KExpr *above = cg_kor(k, cg_kcmp(k, KC_EQ, cg_kv(k, have), cg_kint(k, 0)),
                          cg_kcmp(k, KC_LT, unique_cmp(k, sb, xs, floats, apart, cg_kv(k, prev), cg_kv(k, t), m), cg_kint(k, 0)));
    KBlock *in = &cg_kif(k, sb, above)->body;
    KStmt *no_best = cg_kif(k, in, cg_kcmp(k, KC_LT, cg_kv(k, best), cg_kint(k, 0)));
    cg_kset(k, &no_best->body, best, cg_kv(k, t));
    cg_kset(k, &no_best->body, cnt, cg_kint(k, 1));
    KBlock *vs = &no_best->orelse;
    KExpr *cmp = unique_cmp(k, vs, xs, floats, apart, cg_kv(k, t), cg_kv(k, best), m);
    KStmt *lower = cg_kif(k, vs, cg_kcmp(k, KC_LT, cmp, cg_kint(k, 0)));
    cg_kset(k, &lower->body, best, cg_kv(k, t));
    cg_kset(k, &lower->body, cnt, cg_kint(k, 1));
    cg_kset(k, &cg_kif(k, &lower->orelse, cg_kcmp(k, KC_EQ, cmp, cg_kint(k, 0)))->body, cnt,
            cg_kadd(k, cg_kv(k, cnt), cg_kint(k, 1)));
    KStmt *found = cg_kif(k, go, cg_kcmp(k, KC_GE, cg_kv(k, best), cg_kint(k, 0)));
    cg_kset(k, &found->orelse, done, cg_kint(k, 1));
    KBlock *f = &found->body;
    cg_kstore(k, f, first, ce, cg_kcast(k, cg_kv(k, best), TY_I64));
    cg_kstore(k, f, counts, ce, cg_kcast(k, cg_kv(k, cnt), TY_I64));
    KVar *u = cg_kvar(k, "u", KT_INDEX);
    KStmt *mark = cg_kloop(k, f, u, cg_kint(k, rows), KM_SERIAL);
    KExpr *same = unique_cmp(k, &mark->body, xs, floats, apart, cg_kv(k, u), cg_kv(k, best), m);
    cg_kstore(k, &cg_kif(k, &mark->body, cg_kcmp(k, KC_EQ, same, cg_kint(k, 0)))->body, inverse, cg_kv(k, u),
              cg_kcast(k, ce, TY_I64));
    cg_kset(k, f, prev, cg_kv(k, best));
    cg_kset(k, f, have, cg_kint(k, 1));
    group_first = best, fresh_at = f;
  }
  /* the group's row into y, and one group more */
  KVar *c = cg_kvar(k, "c", KT_INDEX);
  KStmt *copy = cg_kloop(k, fresh_at, c, cg_kint(k, m), KM_SERIAL);
  cg_kstore(k, &copy->body, y, cg_kadd(k, cg_kmul(k, ce, cg_kint(k, m)), cg_kv(k, c)),
            cg_kload(k, xs, cg_kadd(k, cg_kmul(k, cg_kv(k, group_first), cg_kint(k, m)), cg_kv(k, c))));
  cg_kset(k, fresh_at, count, cg_kadd(k, ce, cg_kint(k, 1)));
  cg_kstore(k, top, global_of(b, k, &n->out[4], "count"), cg_kint(k, 0), cg_kcast(k, ce, TY_I64));
  map_end(&mp);
  cg_launch(b, k);
  return true;
}
