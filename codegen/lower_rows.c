/* Lowering of the reductions and normalizations: takes a reduce op,
 * argmax, softmax/log_softmax, softmax_xent (and its gradients),
 * layernorm, rms_norm, group_norm or global_avgpool of a verified graph
 * and appends one kernel that spreads each output row over threads
 * (docs/kernels.md):
 *   - row mode, when the reduced elements are x's innermost: the threads
 *     of a row are lanes along it (a warp for short rows, a block for
 *     long ones, several rows per block when rows are short), reading 16
 *     bytes at a time where the row allows, and combined with warp
 *     shuffles and shared memory (KS_ALLREDUCE);
 *   - column mode, when kept elements are innermost (a reduction over a
 *     middle axis): consecutive threads take consecutive outputs, so
 *     their loads are coalesced, and the rows are split over the block's
 *     y threads, combined through shared memory.
 * Each thread's elements stay in registers between passes when they
 * fit, so softmax and the normalizations read x once; their statistics
 * are two-pass (mean, then squared deviations) in f32 (f64 reductions,
 * argmax and softmax in double).  The fused prologue of a group is
 * evaluated where x is loaded, its epilogue where the result is stored
 * (fuse_lower.c). */
#include <math.h>
#include <string.h>

#include "kernel.h"

enum {
  BLOCK = 256,      /* threads per block, unless one row needs more */
  MAX_LANES = 1024, /* threads per row */
  PER_LANE = 4,     /* vectors (or elements) a lane aims to read */
  CACHE = 32,       /* f32 registers a thread may keep of its row */
  SPLIT_MIN = 1 << 16, /* elements below which rows are never cut into parts */
};

static int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x's dims as groups of adjacent dims that are all reduced or all kept
 * (dims of 1 dropped): each with its size and x's stride. */
typedef struct RowSpace {
  int n;
  int64_t size[DL_MAX_RANK], stride[DL_MAX_RANK];
  bool reduced[DL_MAX_RANK];
  int64_t rows, len; /* outputs (kept elements) and elements per output */
} RowSpace;

static RowSpace row_space(const int64_t *dims, int rank, const bool *reduced) {
  RowSpace sp = {.rows = 1, .len = 1};
  int64_t stride = 1;
  /* innermost first, then reversed */
  int64_t size[DL_MAX_RANK], st[DL_MAX_RANK];
  bool red[DL_MAX_RANK];
  int n = 0;
  for (int d = rank - 1; d >= 0; d--) {
    if (reduced[d])
      sp.len *= dims[d];
    else
      sp.rows *= dims[d];
    if (dims[d] != 1) {
      if (n > 0 && red[n - 1] == reduced[d]) {
        size[n - 1] *= dims[d];
      } else {
        size[n] = dims[d], st[n] = stride, red[n] = reduced[d];
        n++;
      }
    }
    stride *= dims[d];
  }
  sp.n = n;
  for (int i = 0; i < n; i++)
    sp.size[i] = size[n - 1 - i], sp.stride[i] = st[n - 1 - i], sp.reduced[i] = red[n - 1 - i];
  return sp;
}

/* The offset in x of linear index q over the groups of one class (kept
 * or reduced), from group `from` on: q decoded over their sizes. */
static KExpr *decode(Kernel *k, const RowSpace *sp, KExpr *q, bool reduced, int upto) {
  KExpr *off = cg_kint(k, 0);
  int64_t inner = 1;
  int outermost = -1;
  for (int g = 0; g < upto; g++)
    if (sp->reduced[g] == reduced && outermost < 0) outermost = g;
  for (int g = upto - 1; g >= 0; g--) {
    if (sp->reduced[g] != reduced) continue;
    KExpr *c = cg_kidx(k, KI_DIV, q, cg_kint(k, inner));
    if (g != outermost) c = cg_kidx(k, KI_MOD, c, cg_kint(k, sp->size[g]));
    off = cg_kadd(k, off, cg_kmul(k, c, cg_kint(k, sp->stride[g])));
    inner *= sp->size[g];
  }
  return off;
}

/* One row kernel: the launch shape and, per thread and tile, its row. */
typedef struct Rows {
  CgBuild *b;
  Kernel *k;
  const RowSpace *sp;
  bool column;
  int64_t width, per_block; /* threads of a row, rows of a block (row mode: x, y) */
  int64_t inner;            /* column mode: kept elements innermost */
  int n;                    /* lanes of one access: 16 bytes' worth, or 1 */
  int64_t trips;            /* accesses per thread and row */
  KMap across;
  KBlock *tile;             /* runs once per thread and tile */
  KExpr *valid;             /* the thread's row exists, or NULL: always */
  KVar *row, *base, *lane;  /* output index, x's offset of its element 0, the thread's place in it */
  KBuf *cache;              /* the thread's elements, as f32, when kept */
  DType cache_dt;
  int64_t splits;           /* parts each row is cut into, one a tile (1: whole rows) */
  KVar *split;              /* the tile's part, when splits > 1 */
  KVar *row_tile;           /* and its rows' tile, of row_tiles */
  int64_t row_tiles;
} Rows;

/* An access of n lanes when the row is x's innermost elements and
 * whole vectors tile it (and every stored operand is aligned, which
 * cg_vectorize checks). */
static int row_lanes(const RowSpace *sp, DType dt) {
  if (sp->n == 0 || !sp->reduced[sp->n - 1]) return 1;
  int reduced_groups = 0;
  for (int g = 0; g < sp->n; g++) reduced_groups += sp->reduced[g];
  int n = 16 / ir_dtype_size(dt);
  return reduced_groups == 1 && n > 1 && sp->len % n == 0 ? n : 1;
}

/* Rows few and long leave most of the GPU idle: cut each into parts,
 * one a tile, when the whole rows' threads would fill less than half of
 * it, as long as every thread still makes PER_LANE accesses (and the
 * input is large enough for the parts' round trip through memory to
 * pay). */
static int64_t split_count(const Rows *R, int64_t row_tiles, int64_t accesses) {
  int64_t threads = row_tiles * R->width * R->per_block, gpu = cg_gpu_threads();
  if (2 * threads >= gpu || R->sp->rows * R->sp->len < SPLIT_MIN) return 1;
  return clamp(gpu / threads, 1, clamp(accesses / (R->width * PER_LANE), 1, 1024));
}

/* cache_dt: what a thread keeps of its elements between passes (TY_F32,
 * TY_F64 or an integer type), or TY_COUNT for nothing; may_split: the
 * caller combines the parts of split rows (R->splits). */
static void rows_begin(Rows *R, CgBuild *b, Kernel *k, const RowSpace *sp, DType dt, DType cache_dt,
                       bool may_split) {
  memset(R, 0, sizeof *R);
  R->b = b, R->k = k, R->sp = sp;
  int64_t len = sp->len > 0 ? sp->len : 1, ntiles;
  R->column = sp->n > 0 && !sp->reduced[sp->n - 1];
  if (!R->column) {
    R->n = row_lanes(sp, dt);
    int64_t vecs = (len + R->n - 1) / R->n;
    R->width = clamp(pow2_ceil((vecs + PER_LANE - 1) / PER_LANE), 1, MAX_LANES);
    R->per_block = R->width >= BLOCK ? 1 : BLOCK / R->width;
    ntiles = (sp->rows + R->per_block - 1) / R->per_block;
    R->splits = may_split ? split_count(R, ntiles, vecs) : 1;
    R->trips = ((vecs + R->splits - 1) / R->splits + R->width - 1) / R->width;
    k->block[0] = (uint32_t)R->width, k->block[1] = (uint32_t)R->per_block;
    R->across = KM_BLOCK_X;
  } else {
    R->n = 1;
    R->inner = sp->size[sp->n - 1];
    /* y splits a row when it is long enough to give each thread a few
     * elements; x covers the rest of the block with outputs. */
    int64_t y = clamp(pow2_ceil(len / (4 * PER_LANE)), 1, 8);
    int64_t x = clamp(pow2_ceil(R->inner), 1, BLOCK / y);
    if (x * y < 32) y = 32 / x;
    R->width = y, R->per_block = x;
    ntiles = sp->rows / R->inner * ((R->inner + x - 1) / x);
    R->splits = may_split ? split_count(R, ntiles, len) : 1;
    R->trips = ((len + R->splits - 1) / R->splits + y - 1) / y;
    k->block[0] = (uint32_t)x, k->block[1] = (uint32_t)y;
    R->across = KM_BLOCK_Y;
  }
  int64_t row_tiles = R->row_tiles = ntiles;
  ntiles *= R->splits;
  int64_t cap = cg_grid_cap((int64_t)k->block[0] * k->block[1]);
  k->grid[0] = (uint32_t)(ntiles < 1 ? 1 : ntiles > cap ? cap : ntiles);
  KVar *tile = cg_kvar(k, "tile", KT_INDEX), *ty = cg_kvar(k, "ty", KT_INDEX), *tx = cg_kvar(k, "tx", KT_INDEX);
  KStmt *lt = cg_kloop(k, &k->body, tile, cg_kint(k, ntiles), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lt->body, ty, cg_kint(k, k->block[1]), KM_BLOCK_Y);
  KStmt *lx = cg_kloop(k, &ly->body, tx, cg_kint(k, k->block[0]), KM_BLOCK_X);
  R->tile = &lx->body;
  if (R->splits > 1) {
    R->split = cg_klet(k, R->tile, "part", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, tile), cg_kint(k, row_tiles)));
    tile = R->row_tile =
        cg_klet(k, R->tile, "rows", KT_INDEX, cg_kidx(k, KI_MOD, cg_kv(k, tile), cg_kint(k, row_tiles)));
  }
  KExpr *q, *base;
  if (!R->column) {
    R->lane = tx;
    q = cg_kadd(k, cg_kmul(k, cg_kv(k, tile), cg_kint(k, R->per_block)), cg_kv(k, ty));
    if (sp->rows % R->per_block) R->valid = cg_kcmp(k, KC_LT, q, cg_kint(k, sp->rows));
    R->row = cg_klet(k, R->tile, "row", KT_INDEX, q);
    base = decode(k, sp, cg_kv(k, R->row), false, sp->n);
  } else {
    int64_t x = R->per_block, chunks = (R->inner + x - 1) / x;
    R->lane = ty;
    KVar *o = cg_klet(k, R->tile, "o", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, tile), cg_kint(k, chunks)));
    KExpr *p = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_MOD, cg_kv(k, tile), cg_kint(k, chunks)), cg_kint(k, x)),
                       cg_kv(k, tx));
    KVar *pv = cg_klet(k, R->tile, "p", KT_INDEX, p);
    if (R->inner % x) R->valid = cg_kcmp(k, KC_LT, cg_kv(k, pv), cg_kint(k, R->inner));
    R->row = cg_klet(k, R->tile, "row", KT_INDEX,
                     cg_kadd(k, cg_kmul(k, cg_kv(k, o), cg_kint(k, R->inner)), cg_kv(k, pv)));
    base = cg_kadd(k, decode(k, sp, cg_kv(k, o), false, sp->n - 1), cg_kv(k, pv));
  }
  R->base = cg_klet(k, R->tile, "base", KT_INDEX, base);
  R->cache_dt = cache_dt;
  if (cache_dt != TY_COUNT && R->trips * R->n <= CACHE)
    R->cache = cg_klocal(k, "row", cache_dt, R->trips * R->n, KSP_REGISTER);
}

/* Where statements that need the thread's row go: inside a guard when
 * some threads of the last tile have none. */
static KBlock *rows_guard(Rows *R, KExpr *also) {
  KExpr *c = cg_kand(R->k, R->valid, also);
  return c ? &cg_kif(R->k, R->tile, c)->body : R->tile;
}

/* One pass over the thread's elements: body runs at element e of the
 * row (x's index at; slot its place in the cache). */
typedef struct Pass {
  KBlock *body;
  KExpr *e, *at, *slot;
} Pass;

static Pass rows_pass(Rows *R, KBlock *in) {
  Kernel *k = R->k;
  const RowSpace *sp = R->sp;
  Pass P = {0};
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lt = cg_kloop(k, in, t, cg_kint(k, R->trips), R->cache ? KM_UNROLL : KM_SERIAL);
  /* the access's first element: accesses of consecutive lanes are adjacent */
  KExpr *access = cg_kadd(k, cg_kmul(k, cg_kv(k, t), cg_kint(k, R->width)), cg_kv(k, R->lane));
  if (R->split) access = cg_kadd(k, cg_kmul(k, cg_kv(k, R->split), cg_kint(k, R->trips * R->width)), access);
  KExpr *first = cg_kmul(k, access, cg_kint(k, R->n));
  KVar *e0 = cg_klet(k, &lt->body, "e", KT_INDEX, first);
  KBlock *at = &lt->body;
  if (R->splits * R->trips * R->width * R->n != sp->len)
    at = &cg_kif(k, at, cg_kcmp(k, KC_LT, cg_kv(k, e0), cg_kint(k, sp->len)))->body;
  KExpr *e = cg_kv(k, e0), *slot = cg_kmul(k, cg_kv(k, t), cg_kint(k, R->n));
  if (R->n > 1) {
    KVar *v = cg_kvar(k, "v", KT_INDEX);
    at = &cg_kloop(k, at, v, cg_kint(k, R->n), KM_LANES)->body;
    e = cg_kadd(k, e, cg_kv(k, v));
    slot = cg_kadd(k, slot, cg_kv(k, v));
  }
  P.body = at;
  P.e = e;
  P.slot = slot;
  /* x's offset of element e: e itself when the row is contiguous */
  bool contiguous = sp->n > 0 && sp->reduced[sp->n - 1] && sp->stride[sp->n - 1] == 1;
  int reduced_groups = 0;
  for (int g = 0; g < sp->n; g++) reduced_groups += sp->reduced[g];
  KExpr *off = contiguous && reduced_groups == 1 ? e : decode(k, sp, e, true, sp->n);
  P.at = cg_kadd(k, cg_kv(k, R->base), off);
  return P;
}

/* x's element of the pass, as f32 (or i64 for integer argmax): from the
 * cache once the first pass has filled it. */
static KExpr *rows_value(Rows *R, const Pass *P, const Value *x, bool first, DType dt) {
  Kernel *k = R->k;
  if (R->cache && !first) return cg_kload(k, R->cache, P->slot);
  KExpr *v = cg_kcast(k, cg_load_in(R->b, k, P->body, x, "x", P->at), dt);
  if (!R->cache) return v;
  cg_kstore(k, P->body, R->cache, P->slot, v);
  return cg_kload(k, R->cache, P->slot);
}

/* acc = combine over the row of what each pass element gives. */
static KVar *rows_acc(Rows *R, const char *stem, DType dt, double init) {
  return cg_klet(R->k, R->tile, stem, dt, cg_kimm(R->k, init, dt));
}

static void accumulate(Kernel *k, const Pass *P, KVar *acc, OpKind comb, KExpr *v) {
  cg_kset(k, P->body, acc, cg_kop2(k, comb, cg_kv(k, acc), v));
}

/* acc combined over the threads of its row (nothing to do for one). */
static void rows_allreduce(Rows *R, KVar *acc, OpKind comb) {
  if (R->width > 1) cg_kallreduce(R->k, R->tile, acc, comb, R->across);
}

static Kernel *rows_kernel(CgBuild *b, const Node *n) { return cg_node_kernel(b, n, NULL, NULL); }

/* The reduced flags of axis from..to-1 of a rank-r tensor. */
static void mark(bool *reduced, int rank, int from, int to) {
  for (int d = 0; d < rank; d++) reduced[d] = d >= from && d < to;
}

static int norm_axis(const Node *n, int rank) {
  int axis = (int)ir_attr_int(n, "axis");
  return axis < 0 ? axis + rank : axis;
}

/* ---- reductions to one value per row ---- */

/* How reduction n combines: the operation, its identity, and whether
 * the result divides by the count (a mean). */
typedef struct Combine {
  OpKind op;
  double init;
  bool mean;
} Combine;

static Combine combine_of(const Node *n) {
  switch (n->op) {
    case OP_REDUCE_MAX: return (Combine){OP_MAXIMUM, -INFINITY, false};
    case OP_REDUCE_MIN: return (Combine){OP_MINIMUM, INFINITY, false};
    case OP_REDUCE_PROD: return (Combine){OP_MUL, 1.0, false};
    case OP_REDUCE_MEAN:
    case OP_GLOBAL_AVGPOOL: return (Combine){OP_ADD, 0.0, true};
    default: return (Combine){OP_ADD, 0.0, false};
  }
}

/* An integer reduction's accumulator before its first element: the
 * least value of the result's dtype for a max, the greatest for a min
 * (ONNX's ReduceMax/Min of nothing, as eval.c), else the combine's
 * identity; in i64, where every integer reduction but u64's sums (u64's
 * max and min are refused).  i64's greatest is 2^63 as a double, which
 * cg_kimm saturates back to INT64_MAX. */
static KExpr *int_init(Kernel *k, const Combine *cb, DType out) {
  if (cb->op != OP_MAXIMUM && cb->op != OP_MINIMUM) return cg_kimm(k, cb->init, TY_I64);
  int64_t lo, hi;
  ir_int_range(out, &lo, &hi);
  return cg_kimm(k, (double)(cb->op == OP_MAXIMUM ? lo : hi), TY_I64);
}

/* One or more reductions over the same rows (the anchor's siblings in
 * its fusion group, ir_reduce_siblings): one kernel, an accumulator each
 * per row, their loads in one pass.  Split rows leave a part per tile
 * and reduction in memory; the last tile of a row's parts to arrive
 * (KS_LAST_ARRIVAL, a counter per row tile) combines them in part order,
 * whichever tile came last, and stores the result.  Integers accumulate
 * in i64, wrapping as eval.c's do (a u64 sum or product has the same
 * bits; its max, min and mean, which compare and divide unsigned, are
 * not built). */
static bool lower_reduce(CgBuild *b, const Node *n) {
  if (!cg_check_dtypes(b, n, true)) return false;
  if (cg_gemm_bias_grad(b, n)) return true;
  const Value *x = n->in[0];
  const TensorType *xt = &x->type;
  if (ir_type_numel(&n->out[0].type) == 0) return true;
  const Node *red[1 + CG_MAX_SIBLINGS] = {n};
  int nr = 1;
  const CgGroup *grp = cg_group(b);
  if (grp && grp->anchor == n)
    for (int j = 0; j < grp->n_siblings; j++) red[nr++] = grp->siblings[j];
  bool reduced[DL_MAX_RANK] = {false};
  if (n->op == OP_GLOBAL_AVGPOOL) {
    /* channels last: the pixels are the middle axes (column mode) */
    if (ir_nhwc(n))
      mark(reduced, xt->rank, 1, xt->rank - 1);
    else
      mark(reduced, xt->rank, 2, xt->rank);
  } else {
    int n_axes;
    const int64_t *axes = ir_attr_ints(n, "axes", &n_axes);
    for (int i = 0; i < n_axes; i++) reduced[axes[i] < 0 ? axes[i] + xt->rank : axes[i]] = true;
  }
  RowSpace sp = row_space(xt->dims, xt->rank, reduced);
  Combine cb[1 + CG_MAX_SIBLINGS];
  bool ints = !ir_dtype_is_float(xt->dtype);
  for (int j = 0; j < nr; j++) {
    cb[j] = combine_of(red[j]);
    if (ints != !ir_dtype_is_float(red[j]->out[0].type.dtype) || (ints && n->op == OP_GLOBAL_AVGPOOL) ||
        (xt->dtype == TY_U64 && (cb[j].mean || (cb[j].op != OP_ADD && cb[j].op != OP_MUL))))
      return diag_error(cg_build_ctx(b), red[j]->loc, "codegen does not support %s on %s yet",
                        ir_ops[red[j]->op].name, ir_dtype_name(xt->dtype)),
             false;
  }
  /* f64 sums in double, integers in i64 */
  DType at = ints ? TY_I64 : xt->dtype == TY_F64 ? TY_F64 : TY_F32;
  Kernel *k = rows_kernel(b, n);
  Rows R;
  rows_begin(&R, b, k, &sp, xt->dtype, TY_COUNT, true);
  KVar *acc[1 + CG_MAX_SIBLINGS];
  for (int j = 0; j < nr; j++)
    acc[j] = ints ? cg_klet(k, R.tile, "acc", at, int_init(k, &cb[j], red[j]->out[0].type.dtype))
                  : rows_acc(&R, "acc", at, cb[j].init);
  Pass P = rows_pass(&R, rows_guard(&R, NULL));
  for (int j = 0; j < nr; j++) accumulate(k, &P, acc[j], cb[j].op, rows_value(&R, &P, red[j]->in[0], true, at));
  for (int j = 0; j < nr; j++) rows_allreduce(&R, acc[j], cb[j].op);
  KExpr *first_lane = R.width > 1 ? cg_kcmp(k, KC_EQ, cg_kv(k, R.lane), cg_kint(k, 0)) : NULL;
  KBlock *st = rows_guard(&R, first_lane);
  if (R.splits > 1) {
    /* parts[split][row] */
    int64_t count = R.splits * sp.rows;
    KBuf *parts[1 + CG_MAX_SIBLINGS];
    for (int j = 0; j < nr; j++) {
      RtRef ref = cg_scratch(b, red[j], (uint64_t)count * (uint64_t)ir_dtype_size(at));
      parts[j] = cg_kglobal(k, "part", at, count, ref);
      cg_kstore(k, st, parts[j], cg_kadd(k, cg_kmul(k, cg_kv(k, R.split), cg_kint(k, sp.rows)), cg_kv(k, R.row)),
                cg_kv(k, acc[j]));
    }
    KBuf *arrived = cg_kglobal(k, "arrived", TY_I32, R.row_tiles, cg_sync_words(b, R.row_tiles));
    KVar *last = cg_klast_arrival(k, R.tile, arrived, cg_kv(k, R.row_tile), R.splits);
    KBlock *fix = &cg_kif(k, R.tile, cg_kcmp(k, KC_NE, cg_kv(k, last), cg_kint(k, 0)))->body;
    /* The row's threads take the parts in turn, then combine as the
     * parts' own threads did. */
    KVar *t = cg_kvar(k, "t", KT_INDEX);
    for (int j = 0; j < nr; j++)
      acc[j] = cg_klet(k, fix, "total", at,
                       ints ? int_init(k, &cb[j], red[j]->out[0].type.dtype) : cg_kimm(k, cb[j].init, at));
    KBlock *rows = R.valid ? &cg_kif(k, fix, R.valid)->body : fix;
    KBlock *each = &cg_kloop(k, rows, t, cg_kint(k, (R.splits + R.width - 1) / R.width), KM_SERIAL)->body;
    KVar *s = cg_klet(k, each, "s", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, t), cg_kint(k, R.width)), cg_kv(k, R.lane)));
    if (R.splits % R.width) each = &cg_kif(k, each, cg_kcmp(k, KC_LT, cg_kv(k, s), cg_kint(k, R.splits)))->body;
    KExpr *at_part = cg_kadd(k, cg_kmul(k, cg_kv(k, s), cg_kint(k, sp.rows)), cg_kv(k, R.row));
    for (int j = 0; j < nr; j++)
      cg_kset(k, each, acc[j], cg_kop2(k, cb[j].op, cg_kv(k, acc[j]), cg_kload(k, parts[j], at_part)));
    if (R.width > 1)
      for (int j = 0; j < nr; j++) cg_kallreduce(k, fix, acc[j], cb[j].op, R.across);
    KExpr *c = cg_kand(k, R.valid, first_lane);
    st = c ? &cg_kif(k, fix, c)->body : fix;
  }
  KExpr *res[1 + CG_MAX_SIBLINGS];
  for (int j = 0; j < nr; j++) {
    res[j] = cg_kv(k, acc[j]);
    if (cb[j].mean) res[j] = cg_kop2(k, OP_DIV, res[j], cg_kimm(k, (double)sp.len, at));
  }
  if (!cg_fused_store_rows(b, k, st, red, res, nr, cg_kv(k, R.row)))
    for (int j = 0; j < nr; j++) cg_store_at(b, k, st, &red[j]->out[0], cg_kv(k, R.row), res[j]);
  cg_launch(b, k);
  return true;
}

/* The first index of the largest value (NaN the largest, ints exact):
 * the row's largest, then the least index that holds it. */
static bool lower_argmax(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *out = &n->out[0];
  if (!cg_check_dtypes(b, n, true)) return false;
  const TensorType *xt = &x->type;
  int axis = norm_axis(n, xt->rank);
  if (ir_type_numel(&out->type) == 0) return true;
  if (xt->dims[axis] == 0) {
    diag_error(cg_build_ctx(b), n->loc, "argmax over an empty axis");
    return false;
  }
  bool reduced[DL_MAX_RANK];
  mark(reduced, xt->rank, axis, axis + 1);
  RowSpace sp = row_space(xt->dims, xt->rank, reduced);
  bool floats = ir_dtype_is_float(xt->dtype);
  DType vt = xt->dtype == TY_F64 ? TY_F64 : floats ? TY_F32 : TY_U64 == xt->dtype ? TY_U64 : TY_I64;
  Kernel *k = rows_kernel(b, n);
  Rows R;
  rows_begin(&R, b, k, &sp, xt->dtype, vt, false);
  KVar *mx = rows_acc(&R, "mx", vt, floats ? -INFINITY : vt == TY_U64 ? 0.0 : (double)INT64_MIN);
  Pass P = rows_pass(&R, rows_guard(&R, NULL));
  accumulate(k, &P, mx, OP_MAXIMUM, rows_value(&R, &P, x, true, vt));
  rows_allreduce(&R, mx, OP_MAXIMUM);
  KVar *best = rows_acc(&R, "best", TY_I64, (double)sp.len);
  P = rows_pass(&R, rows_guard(&R, NULL));
  KVar *v = cg_klet(k, P.body, "xv", vt, rows_value(&R, &P, x, false, vt));
  KExpr *hit = cg_kcmp(k, KC_EQ, cg_kv(k, v), cg_kv(k, mx));
  if (floats)
    hit = cg_kor(k, hit, cg_kand(k, cg_kcmp(k, KC_NE, cg_kv(k, mx), cg_kv(k, mx)),
                                 cg_kcmp(k, KC_NE, cg_kv(k, v), cg_kv(k, v))));
  KExpr *idx = cg_ksel(k, hit, cg_kcast(k, P.e, TY_I64), cg_kimm(k, (double)sp.len, TY_I64));
  accumulate(k, &P, best, OP_MINIMUM, idx);
  rows_allreduce(&R, best, OP_MINIMUM);
  KBlock *st = rows_guard(&R, R.width > 1 ? cg_kcmp(k, KC_EQ, cg_kv(k, R.lane), cg_kint(k, 0)) : NULL);
  cg_store_at(b, k, st, out, cg_kv(k, R.row), cg_kv(k, best));
  cg_launch(b, k);
  return true;
}

/* ---- normalizations: every element of the row, from its statistics ---- */

/* A row kernel over sp for n and each row's largest x, in at: the first
 * pass of softmax and of softmax_xent.  In f32 a NaN is skipped (fmaxf:
 * one instruction where the NaN-propagating maximum takes five): its
 * exp(x - max) is NaN, and so the row's sum and every result. */
static KVar *rows_max(Rows *R, CgBuild *b, const Node *n, const RowSpace *sp, const Value *x, DType at) {
  Kernel *k = rows_kernel(b, n);
  rows_begin(R, b, k, sp, x->type.dtype, at, false);
  KVar *mx = rows_acc(R, "mx", at, -INFINITY);
  Pass P = rows_pass(R, rows_guard(R, NULL));
  KExpr *v = rows_value(R, &P, x, true, at);
  if (at == TY_F32)
    cg_kset(k, P.body, mx, cg_kfmax(k, cg_kv(k, mx), v));
  else
    accumulate(k, &P, mx, OP_MAXIMUM, v);
  rows_allreduce(R, mx, OP_MAXIMUM);
  return mx;
}

/* e^d, as 2^(d log2 e) (one MUFU.EX2 where expf is a range reduction
 * around one) when the result is rounded to a half type anyway. */
static KExpr *row_exp(Kernel *k, KExpr *d, DType out) {
  if (out == TY_F16 || out == TY_BF16) return cg_kexp2(k, cg_kop2(k, OP_MUL, d, cg_kimm(k, M_LOG2E, d->dtype)));
  return cg_kop1(k, OP_EXP, d);
}

static bool lower_softmax(CgBuild *b, const Node *n) {
  if (!cg_check_dtypes(b, n, false)) return false;
  const Value *x = n->in[0], *out = &n->out[0];
  const TensorType *xt = &x->type;
  if (ir_type_numel(xt) == 0) return true;
  int axis = norm_axis(n, xt->rank);
  bool reduced[DL_MAX_RANK], lsm = n->op == OP_LOG_SOFTMAX;
  mark(reduced, xt->rank, axis, axis + 1);
  RowSpace sp = row_space(xt->dims, xt->rank, reduced);
  DType at = xt->dtype == TY_F64 ? TY_F64 : TY_F32; /* f64 rows in double, as eval.c */
  Rows R;
  KVar *mx = rows_max(&R, b, n, &sp, x, at);
  Kernel *k = R.k;
  KVar *sum = rows_acc(&R, "sum", at, 0);
  Pass P = rows_pass(&R, rows_guard(&R, NULL));
  DType ot = out->type.dtype;
  KVar *ex = cg_klet(k, P.body, "ex", at, row_exp(k, cg_kop2(k, OP_SUB, rows_value(&R, &P, x, false, at), cg_kv(k, mx)), ot));
  /* softmax keeps exp(x - max), log_softmax x itself */
  if (R.cache && !lsm) cg_kstore(k, P.body, R.cache, P.slot, cg_kv(k, ex));
  accumulate(k, &P, sum, OP_ADD, cg_kv(k, ex));
  rows_allreduce(&R, sum, OP_ADD);
  KBlock *in = rows_guard(&R, NULL);
  KVar *lsum = lsm ? cg_klet(k, in, "lsum", at, cg_kop1(k, OP_LOG, cg_kv(k, sum))) : NULL;
  P = rows_pass(&R, in);
  KExpr *v = rows_value(&R, &P, x, false, at), *y;
  if (lsm)
    y = cg_kop2(k, OP_SUB, cg_kop2(k, OP_SUB, v, cg_kv(k, mx)), cg_kv(k, lsum));
  else
    y = cg_kop2(k, OP_DIV, R.cache ? v : row_exp(k, cg_kop2(k, OP_SUB, v, cg_kv(k, mx)), ot), cg_kv(k, sum));
  cg_store_at(b, k, P.body, out, P.at, y);
  cg_launch(b, k);
  return true;
}

/* softmax_xent, its gradient or both (ops.def), a row of x per row of
 * threads: the max, then exp(x - max) and x - max summed, then the
 * row's loss from its target's logit, and the gradient row.  The target
 * is checked as the gather_elements it replaced did (ir_op_origin). */
static bool lower_xent(CgBuild *b, const Node *n) {
  if (!cg_check_dtypes(b, n, true)) return false;
  const Value *x = n->in[0], *t = n->in[1];
  const Value *loss_out = n->op != OP_XENT_GRAD ? &n->out[0] : NULL;
  const Value *grad_out = n->op == OP_XENT_GRAD ? &n->out[0] : n->op == OP_XENT_BOTH ? &n->out[1] : NULL;
  const TensorType *xt = &x->type;
  int64_t C = xt->dims[1];
  if (xt->dims[0] == 0) return true;
  if (C == 0) {
    diag_error(cg_build_ctx(b), n->loc, "%s over an empty class axis", ir_ops[n->op].name);
    return false;
  }
  bool reduced[2] = {false, true};
  double eps = ir_attr_float(n, "smoothing");
  RowSpace sp = row_space(xt->dims, 2, reduced);
  DType at = xt->dtype == TY_F64 ? TY_F64 : TY_F32;
  Rows R;
  KVar *mx = rows_max(&R, b, n, &sp, x, at);
  Kernel *k = R.k;
  KVar *sum = rows_acc(&R, "sum", at, 0), *dev = eps > 0 ? rows_acc(&R, "dev", at, 0) : NULL;
  Pass P = rows_pass(&R, rows_guard(&R, NULL));
  KVar *d = cg_klet(k, P.body, "d", at, cg_kop2(k, OP_SUB, rows_value(&R, &P, x, false, at), cg_kv(k, mx)));
  accumulate(k, &P, sum, OP_ADD, cg_kop1(k, OP_EXP, cg_kv(k, d)));
  if (dev) accumulate(k, &P, dev, OP_ADD, cg_kv(k, d));
  rows_allreduce(&R, sum, OP_ADD);
  if (dev) rows_allreduce(&R, dev, OP_ADD);
  KBlock *in = rows_guard(&R, NULL);
  /* The target: ignored, or checked (a negative one reported as t - C,
   * as gather_elements saw it) and clamped into the row. */
  KVar *ti = cg_klet(k, in, "ti", TY_I64, cg_kcast(k, cg_load_in(b, k, in, t, "t", cg_kv(k, R.row)), TY_I64));
  KExpr *zero = cg_kimm(k, 0, TY_I64);
  KVar *skip = cg_klet(k, in, "skip", TY_BOOL,
                       cg_kcmp(k, KC_EQ, cg_kv(k, ti), cg_kimm(k, (double)ir_attr_int(n, "ignore_index"), TY_I64)));
  KExpr *raw = cg_ksel(k, cg_kv(k, skip), zero,
                       cg_ksel(k, cg_kcmp(k, KC_LT, cg_kv(k, ti), zero),
                               cg_kop2(k, OP_SUB, cg_kv(k, ti), cg_kimm(k, (double)C, TY_I64)), cg_kv(k, ti)));
  KExpr *cls = cg_index_reported(b, k, in, cg_kv(k, R.row), raw, 1, C);
  cls = cg_kop2(k, OP_MINIMUM, cg_kop2(k, OP_MAXIMUM, cls, zero), cg_kimm(k, (double)(C - 1), TY_I64));
  KVar *c = cg_klet(k, in, "cls", KT_INDEX, cg_kcast(k, cls, KT_INDEX));
  KVar *ls = cg_klet(k, in, "ls", at, cg_kop1(k, OP_LOG, cg_kv(k, sum)));
  KExpr *zf = cg_kimm(k, 0, at);
  if (loss_out) {
    KBlock *st = R.width > 1 ? &cg_kif(k, in, cg_kcmp(k, KC_EQ, cg_kv(k, R.lane), cg_kint(k, 0)))->body : in;
    KExpr *xc = cg_kcast(k, cg_load_in(b, k, st, x, "x", cg_kadd(k, cg_kv(k, R.base), cg_kv(k, c))), at);
    KExpr *loss = cg_kop2(k, OP_ADD, cg_kop2(k, OP_SUB, cg_kv(k, mx), xc), cg_kv(k, ls));
    if (dev) {
      KExpr *smooth = cg_kop2(k, OP_SUB, cg_kv(k, ls), cg_kop2(k, OP_DIV, cg_kv(k, dev), cg_kimm(k, (double)C, at)));
      loss = cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, cg_kimm(k, 1 - eps, at), loss),
                     cg_kop2(k, OP_MUL, cg_kimm(k, eps, at), smooth));
    }
    cg_store_at(b, k, st, loss_out, cg_kv(k, R.row), cg_ksel(k, cg_kv(k, skip), zf, loss));
  }
  if (!grad_out) {
    cg_launch(b, k);
    return true;
  }
  KExpr *dy_at = ir_type_numel(&n->in[2]->type) == 1 ? cg_kint(k, 0) : cg_kv(k, R.row);
  KVar *g = cg_klet(k, in, "g", at,
                    cg_ksel(k, cg_kv(k, skip), zf, cg_kcast(k, cg_load_in(b, k, in, n->in[2], "dy", dy_at), at)));
  P = rows_pass(&R, in);
  KExpr *p = cg_kop2(k, OP_DIV, cg_kop1(k, OP_EXP, cg_kop2(k, OP_SUB, rows_value(&R, &P, x, false, at), cg_kv(k, mx))),
                     cg_kv(k, sum));
  if (eps > 0) p = cg_kop2(k, OP_SUB, p, cg_kimm(k, eps / (double)C, at));
  KExpr *hit = cg_kcmp(k, KC_EQ, P.e, cg_kv(k, c));
  p = cg_kop2(k, OP_SUB, p, cg_ksel(k, hit, cg_kimm(k, 1 - eps, at), zf));
  cg_store_at(b, k, P.body, grad_out, P.at, cg_kop2(k, OP_MUL, cg_kv(k, g), p));
  cg_launch(b, k);
  return true;
}

/* layernorm, rms_norm and group_norm: x's rows normalized by their
 * mean and variance (rms_norm: their mean square), then the per-element
 * (per-channel for group_norm) weight and bias where given. */
static bool lower_norm(CgBuild *b, const Node *n) {
  if (!cg_check_dtypes(b, n, false)) return false;
  const Value *x = n->in[0], *out = &n->out[0];
  const TensorType *xt = &x->type;
  if (ir_type_numel(xt) == 0) return true;
  bool rms = n->op == OP_RMS_NORM;
  /* group_norm channels last: x as [N, pixels, groups, C / groups], its
   * rows (n, g) over the pixels and the group's channels */
  bool nhwc = n->op == OP_GROUP_NORM && ir_nhwc(n);
  int64_t dims[4], groups = 1, per_channel = 1;
  bool reduced[4] = {false, true, false, true};
  int rank = 2;
  if (nhwc) {
    groups = ir_attr_int(n, "groups");
    for (int d = 1; d < xt->rank - 1; d++) per_channel *= xt->dims[d];
    dims[0] = xt->dims[0], dims[1] = per_channel, dims[2] = groups, dims[3] = xt->dims[xt->rank - 1] / groups;
    rank = 4;
  } else if (n->op == OP_GROUP_NORM) {
    groups = ir_attr_int(n, "groups");
    for (int d = 2; d < xt->rank; d++) per_channel *= xt->dims[d];
    dims[0] = xt->dims[0] * groups;
    dims[1] = ir_type_numel(xt) / dims[0];
  } else {
    int axis = norm_axis(n, xt->rank);
    dims[0] = dims[1] = 1;
    for (int d = 0; d < xt->rank; d++) dims[d >= axis] *= xt->dims[d];
  }
  RowSpace sp = row_space(dims, rank, reduced);
  double eps = ir_attr_float(n, "eps");
  Kernel *k = rows_kernel(b, n);
  Rows R;
  rows_begin(&R, b, k, &sp, xt->dtype, TY_F32, false);
  KExpr *flen = cg_kimm(k, (double)sp.len, TY_F32), *mean = NULL;
  if (!rms) {
    KVar *s = rows_acc(&R, "sum", TY_F32, 0);
    Pass P = rows_pass(&R, rows_guard(&R, NULL));
    accumulate(k, &P, s, OP_ADD, rows_value(&R, &P, x, true, TY_F32));
    rows_allreduce(&R, s, OP_ADD);
    mean = cg_kv(k, cg_klet(k, R.tile, "mean", TY_F32, cg_kop2(k, OP_DIV, cg_kv(k, s), flen)));
  }
  KVar *sq = rows_acc(&R, "sq", TY_F32, 0);
  Pass P = rows_pass(&R, rows_guard(&R, NULL));
  KExpr *v = rows_value(&R, &P, x, rms, TY_F32);
  KVar *d = cg_klet(k, P.body, "d", TY_F32, rms ? v : cg_kop2(k, OP_SUB, v, mean));
  accumulate(k, &P, sq, OP_ADD, cg_kop2(k, OP_MUL, cg_kv(k, d), cg_kv(k, d)));
  rows_allreduce(&R, sq, OP_ADD);
  KBlock *in = rows_guard(&R, NULL);
  KExpr *var = cg_kop2(k, OP_DIV, cg_kv(k, sq), flen);
  KExpr *den = cg_kop1(k, OP_SQRT, cg_kop2(k, OP_ADD, var, cg_kimm(k, eps, TY_F32)));
  KVar *inv = cg_klet(k, in, "inv", TY_F32, cg_kop2(k, OP_DIV, cg_kimm(k, 1, TY_F32), den));
  P = rows_pass(&R, in);
  v = rows_value(&R, &P, x, false, TY_F32);
  KExpr *y = cg_kop2(k, OP_MUL, rms ? v : cg_kop2(k, OP_SUB, v, mean), cg_kv(k, inv));
  /* the affine operands: per element of the row, or per channel */
  KExpr *at = P.e;
  if (n->op == OP_GROUP_NORM) {
    /* the channel: g C/groups plus the element's within the group (its
     * row's elements pixel-major channels last, channel-major NCHW) */
    KExpr *g = cg_kidx(k, KI_MOD, cg_kv(k, R.row), cg_kint(k, groups));
    int64_t cg = sp.len / per_channel;
    KExpr *c = nhwc ? cg_kidx(k, KI_MOD, P.e, cg_kint(k, cg)) : cg_kidx(k, KI_DIV, P.e, cg_kint(k, per_channel));
    at = cg_kadd(k, cg_kmul(k, g, cg_kint(k, cg)), c);
  }
  if (n->n_in > 1)
    y = cg_kop2(k, OP_MUL, y, cg_kcast(k, cg_load_in(b, k, P.body, n->in[1], "weight", at), TY_F32));
  if (n->n_in > 2)
    y = cg_kop2(k, OP_ADD, y, cg_kcast(k, cg_load_in(b, k, P.body, n->in[2], "bias", at), TY_F32));
  cg_store_at(b, k, P.body, out, P.at, y);
  cg_launch(b, k);
  return true;
}

bool cg_lower_rows(CgBuild *b, const Node *n) {
  switch (n->op) {
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_REDUCE_PROD:
    case OP_GLOBAL_AVGPOOL: return lower_reduce(b, n);
    case OP_ARGMAX: return lower_argmax(b, n);
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: return lower_softmax(b, n);
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM: return lower_norm(b, n);
    case OP_XENT:
    case OP_XENT_GRAD:
    case OP_XENT_BOTH: return lower_xent(b, n);
    default: dl_internal(cg_build_ctx(b), "%s is not a row reduction", ir_ops[n->op].name);
  }
}
