/* Lowering of graph nodes to kernels and GEMM steps: takes one node of a
 * verified graph, appends what computes it to the plan being built
 * (kernel.h's CgBuild interface).  No fusion yet: each node becomes its
 * own kernels.  The meaning of every op is eval.c's; the comments here
 * only say how the loop nest reaches it. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"

static int64_t numel(const TensorType *t) { return ir_type_numel(t); }

static uint64_t nbytes(const TensorType *t) {
  return (uint64_t)numel(t) * (uint64_t)ir_dtype_size(t->dtype);
}

static void strides_of(const TensorType *t, int64_t *st) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->dims[i];
  }
}

/* in's strides read at out's multi-index under NumPy broadcasting. */
static void bcast_strides(const TensorType *in, const TensorType *out, int64_t *st) {
  int64_t own[DL_MAX_RANK];
  strides_of(in, own);
  int off = out->rank - in->rank;
  for (int i = 0; i < out->rank; i++) {
    int j = i - off;
    st[i] = (j < 0 || in->dims[j] == 1) ? 0 : own[j];
  }
}

static bool unsupported(CgBuild *b, const Node *n, DType dt) {
  diag_error(cg_build_ctx(b), n->loc, "codegen does not support %s on %s yet", ir_ops[n->op].name,
             ir_dtype_name(dt));
  return false;
}

/* Every operand and result a float (f32, f16, bf16: halves are loaded,
 * computed on in f32 and rounded when stored), or (ints_ok) an integer
 * dtype or bool. */
static bool check_dtypes(CgBuild *b, const Node *n, bool ints_ok) {
  for (int i = 0; i < n->n_in + n->n_out; i++) {
    DType dt = i < n->n_in ? n->in[i]->type.dtype : n->out[i - n->n_in].type.dtype;
    bool ok = ir_dtype_is_float(dt) ||
              (ints_ok && (dt == TY_I8 || dt == TY_U8 || dt == TY_I32 || dt == TY_I64 || dt == TY_BOOL ||
                           dt == TY_I16 || dt == TY_U16 || dt == TY_U32 || dt == TY_U64));
    if (!ok) return unsupported(b, n, dt);
  }
  return true;
}

static Kernel *new_kernel(CgBuild *b, const Node *n, const char *suffix, const char *what) {
  Ctx *c = cg_build_ctx(b);
  const CgGroup *grp = cg_group(b);
  const char *hint = grp && grp->anchor == n && grp->n > 1 ? cg_group_hint(c, grp) : ir_ops[n->op].name;
  if (suffix) hint = arena_printf(&c->arena, "%s_%s", hint, suffix);
  if (grp && grp->anchor == n && !what) what = arena_printf(&c->arena, "#k%d", grp->id);
  return cg_kernel_new(c, n, hint, what);
}

static KBuf *global_of(CgBuild *b, Kernel *k, const Value *v, const char *name) {
  return cg_kglobal(k, name, v->type.dtype, numel(&v->type), cg_ref(b, v));
}

/* v[index], v's value when it is a folded const, or its expression
 * when the fusion group being lowered computes it (lets into blk; pure
 * when blk is NULL). */
static KExpr *load_in(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name,
                      KExpr *index) {
  return cg_operand_load(b, k, blk, v, name, index);
}

static KExpr *load_of(CgBuild *b, Kernel *k, const Value *v, const char *name, KExpr *index) {
  return load_in(b, k, NULL, v, name, index);
}

/* The same as an f32 value: what arithmetic inside an op (sums,
 * normalizations, windows) works on, whatever v is stored in. */
static KExpr *load_f32(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name,
                       KExpr *index) {
  return cg_kcast(k, load_in(b, k, blk, v, name, index), TY_F32);
}

/* The lowerings of lower_rows.c share these. */
Kernel *cg_node_kernel(CgBuild *b, const Node *n, const char *suffix, const char *what) {
  return new_kernel(b, n, suffix, what);
}

bool cg_check_dtypes(CgBuild *b, const Node *n, bool ints_ok) { return check_dtypes(b, n, ints_ok); }

KExpr *cg_load_in(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index) {
  return load_in(b, k, blk, v, name, index);
}

void cg_store_at(CgBuild *b, Kernel *k, KBlock *blk, const Value *out, KExpr *index, KExpr *value) {
  if (cg_fused_store(b, k, blk, out, index, value)) return;
  cg_kstore(k, blk, global_of(b, k, out, "out"), index, cg_kcast(k, value, out->type.dtype));
}

/* ---- map kernels: one thread per element of an iteration space ---- */

/* The element's coordinates are decoded from the linear index only when
 * asked for, into locals at the top of the loop body. */
typedef struct Map {
  Kernel *k;
  KStmt *loop;
  KBlock pro, main;
  KExpr *i;
  TensorType t;
  int64_t st[DL_MAX_RANK];
  KExpr *coord[DL_MAX_RANK];
} Map;

static void map_begin(Map *m, Kernel *k, const TensorType *space) {
  memset(m, 0, sizeof *m);
  m->k = k;
  m->t = *space;
  strides_of(space, m->st);
  int64_t total = numel(space);
  KVar *n = cg_kparam(k, "n", KT_INDEX, total, 0);
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  m->loop = cg_kloop(k, &k->body, i, cg_kv(k, n), KM_GRID_STRIDE);
  m->i = cg_kv(k, i);
  cg_kernel_grid_1d(k, total);
}

static void map_end(Map *m) {
  KBlock *body = &m->loop->body;
  *body = m->pro;
  if (m->main.first) {
    if (body->last)
      body->last->next = m->main.first;
    else
      body->first = m->main.first;
    body->last = m->main.last;
  }
}

static KExpr *map_coord(Map *m, int d) {
  Kernel *k = m->k;
  if (m->t.dims[d] == 1) return cg_kint(k, 0);
  if (!m->coord[d]) {
    KExpr *e = cg_kidx(k, KI_DIV, m->i, cg_kint(k, m->st[d]));
    /* The outermost coordinate needs no modulo: i < numel. */
    bool outer = true;
    for (int j = 0; j < d; j++)
      if (m->t.dims[j] != 1) outer = false;
    if (!outer) e = cg_kidx(k, KI_MOD, e, cg_kint(k, m->t.dims[d]));
    m->coord[d] = cg_kv(k, cg_klet(k, &m->pro, "c", KT_INDEX, e));
  }
  return m->coord[d];
}

/* sum over d of coord(d) * st[d]: the linear index itself when st is
 * the space's own layout. */
static KExpr *map_index(Map *m, const int64_t *st) {
  Kernel *k = m->k;
  bool own = true;
  for (int d = 0; d < m->t.rank; d++)
    if (m->t.dims[d] != 1 && st[d] != m->st[d]) own = false;
  if (own) return m->i;
  KExpr *e = cg_kint(k, 0);
  for (int d = 0; d < m->t.rank; d++)
    if (st[d] && m->t.dims[d] != 1)
      e = cg_kadd(k, e, cg_kmul(k, map_coord(m, d), cg_kint(k, st[d])));
  return e;
}

static KExpr *map_operand(CgBuild *b, Map *m, const Value *v, const char *name, const int64_t *st) {
  double c;
  if (cg_const_of(b, v, &c)) return cg_kimm(m->k, c, v->type.dtype);
  if (numel(&v->type) == 1) return cg_kload(m->k, global_of(b, m->k, v, name), cg_kint(m->k, 0));
  return cg_kload(m->k, global_of(b, m->k, v, name), map_index(m, st));
}

static void map_store(CgBuild *b, Map *m, const Value *out, KExpr *value) {
  if (cg_fused_store(b, m->k, &m->main, out, m->i, value)) return;
  KBuf *o = global_of(b, m->k, out, "out");
  cg_kstore(m->k, &m->main, o, m->i, cg_kcast(m->k, value, out->type.dtype));
}

static TensorType flat(DType dt, int64_t count) { return ir_type_make(dt, 1, &count); }

void cg_fill(CgBuild *b, const Node *n, const char *what, RtRef ref, DType dt, int64_t count,
             double value) {
  if (count == 0) return;
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, "fill", what ? what : "fill");
  TensorType t = flat(dt, count);
  Map m;
  map_begin(&m, k, &t);
  KBuf *o = cg_kglobal(k, "out", dt, count, ref);
  cg_kstore(k, &m.main, o, m.i, cg_kimm(k, value, dt));
  map_end(&m);
  cg_launch(b, k);
}

/* start + step * the element's coordinate along axis (ops.def, iota):
 * integers exactly, floats in f32 rounded once to the dtype. */
static bool lower_iota(CgBuild *b, const Node *n) {
  const Value *out = &n->out[0];
  DType dt = out->type.dtype, at = ir_dtype_is_float(dt) ? TY_F32 : TY_I64;
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, "iota", "iota");
  Map m;
  map_begin(&m, k, &out->type);
  int axis = (int)ir_attr_int(n, "axis");
  KExpr *c = out->type.rank ? map_coord(&m, axis) : cg_kint(k, 0);
  KExpr *v = cg_kop2(k, OP_ADD, cg_kimm(k, ir_attr_float(n, "start"), at),
                     cg_kop2(k, OP_MUL, cg_kimm(k, ir_attr_float(n, "step"), at), cg_kcast(k, c, at)));
  cg_kstore(k, &m.main, global_of(b, k, out, "out"), m.i, cg_kcast(k, v, dt));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- elementwise ---- */

static bool int_elementwise_ok(OpKind op) {
  switch (op) {
    case OP_NEG:
    case OP_ABS:
    case OP_RELU:
    case OP_CLIP:
    case OP_CAST:
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_POW:
    case OP_MOD:
    case OP_SIGN:
    case OP_MAXIMUM:
    case OP_MINIMUM:
    case OP_EQ:
    case OP_NE:
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
    case OP_BIT_AND:
    case OP_BIT_OR:
    case OP_BIT_XOR:
    case OP_BIT_NOT:
    case OP_SHL:
    case OP_SHR:
    case OP_BITCAST: return true;
    default: return false;
  }
}

static bool is_quant(OpKind op) { return op == OP_QUANTIZE || op == OP_DEQUANTIZE; }

/* Operand names in the kernel's text. */
static const char *operand_name(const Node *n, int i) {
  static const char *const where[] = {"cond", "a", "b"};
  if (n->op == OP_WHERE) return where[i];
  if (n->n_in == 1 || is_quant(n->op)) return i == 0 ? "x" : "scale";
  return i == 0 ? "a" : "b";
}

static bool lower_elementwise(CgBuild *b, const Node *n) {
  const Value *out = &n->out[0];
  /* quantize and dequantize cross between f32 and the integers by design;
   * the tests and logic take any dtype and give bool. */
  bool quant = is_quant(n->op), logic = cg_is_logic_op(n->op);
  bool int_ok = quant || logic || int_elementwise_ok(n->op);
  bool ints = !ir_dtype_is_float(n->in[0]->type.dtype) || !ir_dtype_is_float(out->type.dtype);
  if (!check_dtypes(b, n, int_ok)) return false;
  if (ints && !int_ok) return unsupported(b, n, n->in[0]->type.dtype);
  DType in0 = n->in[0]->type.dtype, o0 = out->type.dtype;
  if (n->op == OP_BITCAST && (in0 == TY_F16 || in0 == TY_BF16 || o0 == TY_F16 || o0 == TY_BF16))
    return unsupported(b, n, in0 == TY_F16 || in0 == TY_BF16 ? in0 : o0); /* no union of the half types */
  if (numel(&out->type) == 0) return true;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  int64_t st[DL_MAX_RANK];
  bcast_strides(&n->in[0]->type, &out->type, st);
  KExpr *x = map_operand(b, &m, n->in[0], operand_name(n, 0), st), *r;
  if (logic) {
    KExpr *ops[3] = {x};
    for (int i = 1; i < n->n_in; i++) {
      bcast_strides(&n->in[i]->type, &out->type, st);
      ops[i] = map_operand(b, &m, n->in[i], operand_name(n, i), st);
    }
    r = cg_klogic(k, n, ops);
  } else if (quant) {
    KExpr *scale = NULL;
    if (n->n_in == 2) {
      bcast_strides(&n->in[1]->type, &out->type, st);
      scale = map_operand(b, &m, n->in[1], "scale", st);
    }
    r = cg_kquant(k, n, x, scale);
  } else if (n->n_in == 2) {
    bcast_strides(&n->in[1]->type, &out->type, st);
    r = cg_kop2(k, n->op, x, map_operand(b, &m, n->in[1], "b", st));
    if (n->op == OP_MOD) r->flag = ir_attr_int(n, "fmod") != 0;
  } else if (n->op == OP_CAST) {
    r = cg_kcast(k, x, out->type.dtype);
  } else if (n->op == OP_BITCAST) {
    r = cg_kop1(k, n->op, x);
    r->dtype = out->type.dtype;
  } else {
    r = cg_kop1(k, n->op, x);
    if (n->op == OP_LEAKY_RELU) r->f = ir_attr_float(n, "alpha");
    if (n->op == OP_CLIP) r->f = ir_attr_float(n, "min"), r->f2 = ir_attr_float(n, "max");
    if (n->op == OP_GELU) r->flag = strcmp(ir_attr_str(n, "approximate"), "tanh") == 0;
    if (n->op == OP_FP_ROUND) cg_fp_round_attrs(r, n);
  }
  map_store(b, &m, out, r);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

static bool lower_batchnorm(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, false)) return false;
  const Value *x = n->in[0], *out = &n->out[0];
  const TensorType *t = &x->type;
  if (numel(t) == 0) return true;
  int64_t inner = 1;
  for (int i = 2; i < t->rank; i++) inner *= t->dims[i];
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, t);
  int64_t st[DL_MAX_RANK];
  strides_of(t, st);
  KExpr *ch =
      cg_kidx(k, KI_MOD, cg_kidx(k, KI_DIV, m.i, cg_kint(k, inner)), cg_kint(k, t->dims[1]));
  KVar *c = cg_klet(k, &m.main, "ch", KT_INDEX, ch);
  KExpr *xv = cg_kcast(k, map_operand(b, &m, x, "x", st), TY_F32);
  KExpr *w = load_f32(b, k, NULL, n->in[1], "weight", cg_kv(k, c));
  KExpr *bias = load_f32(b, k, NULL, n->in[2], "bias", cg_kv(k, c));
  KExpr *mean = load_f32(b, k, NULL, n->in[3], "mean", cg_kv(k, c));
  KExpr *var = load_f32(b, k, NULL, n->in[4], "var", cg_kv(k, c));
  KExpr *den =
      cg_kop1(k, OP_SQRT, cg_kop2(k, OP_ADD, var, cg_kimm(k, ir_attr_float(n, "eps"), TY_F32)));
  KExpr *y = cg_kop2(k, OP_DIV, cg_kop2(k, OP_SUB, xv, mean), den);
  map_store(b, &m, out, cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, y, w), bias));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- rows (topk): one thread per output row, a serial loop ---- */

static void split_axis(const TensorType *t, int axis, int64_t *outer, int64_t *len,
                       int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= t->dims[i];
  *len = t->dims[axis];
  for (int i = axis + 1; i < t->rank; i++) *inner *= t->dims[i];
}

/* A row of len elements spaced by inner, for the thread's output row o:
 * returns the base index (o / inner) * len * inner + o % inner. */
static KVar *row_base(Kernel *k, KBlock *in, KExpr *o, int64_t len, int64_t inner) {
  KExpr *base = cg_kmul(k, cg_kidx(k, KI_DIV, o, cg_kint(k, inner)), cg_kint(k, len * inner));
  base = cg_kadd(k, base, cg_kidx(k, KI_MOD, o, cg_kint(k, inner)));
  return cg_klet(k, in, "base", KT_INDEX, base);
}

static KExpr *row_at(Kernel *k, KVar *base, KExpr *kk, int64_t inner) {
  return cg_kadd(k, cg_kv(k, base), cg_kmul(k, kk, cg_kint(k, inner)));
}

/* ---- matrix products ---- */

static const uint64_t F32_BYTES = 4;

/* Floats throughout, or int8 operands with an int32 result and bias:
 * eval.c's exact integer product. */
static bool is_int8_product(const Node *n) {
  if (n->in[0]->type.dtype != TY_I8 || n->in[1]->type.dtype != TY_I8 || n->out[0].type.dtype != TY_I32)
    return false;
  return n->n_in < 3 || n->in[2]->type.dtype == TY_I32;
}

static bool product_dtypes(CgBuild *b, const Node *n) {
  return is_int8_product(n) || check_dtypes(b, n, false);
}

/* dt the operands' dtype: f32, f16 or bf16 inputs and result (the same
 * dtype codes), f32 accumulation; or i8 (RT_DT_I8): i8 inputs, an i32
 * result, exact int32 accumulation. */
static RtGemm gemm_of(DType dt, int64_t m, int64_t nn, int64_t k) {
  RtGemm g = {.dtype = (uint32_t)dt,
              .m = m,
              .n = nn,
              .k = k,
              .lda = k,
              .ldb = nn,
              .ldc = nn,
              .batch = 1,
              .alpha = 1.0f,
              .beta = 0.0f};
  return g;
}

static RtGemm gemm_f32(int64_t m, int64_t nn, int64_t k) { return gemm_of(TY_F32, m, nn, k); }

static DType gemm_c_dtype(const RtGemm *g) { return g->dtype == RT_DT_I8 ? TY_I32 : (DType)g->dtype; }

/* cuBLAS's int8 GEMM (cublasGemmEx with CUDA_R_8I A and B, CUDA_R_32I C,
 * CUBLAS_COMPUTE_32I) takes alpha and beta of 0 or 1 only, A and B 32-bit
 * aligned and lda, ldb multiples of 4 (the cuBLAS guide on cublasGemmEx);
 * in a strided batch every matrix must start aligned.  Every space starts
 * 256-byte aligned, so the refs' offsets decide, here at compile time. */
static bool blas_takes_int8(const RtGemm *g) {
  bool ok = g->lda % 4 == 0 && g->ldb % 4 == 0 && g->a.offset % 4 == 0 && g->b.offset % 4 == 0;
  if (g->batch > 1) ok = ok && g->stride_a % 4 == 0 && g->stride_b % 4 == 0;
  return ok && (g->alpha == 0.0f || g->alpha == 1.0f) && (g->beta == 0.0f || g->beta == 1.0f);
}

/* An int8 GEMM cuBLAS would refuse, as a kernel: one thread per element
 * of C, its k products summed in int32 (wrapping, as eval.c). */
static void gemm_i8_kernel(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  Kernel *k = new_kernel(b, n, "gemm_i8", what ? what : "gemm");
  TensorType space = ir_type_make(TY_I32, 3, (int64_t[]){g->batch, g->m, g->n});
  Map m;
  map_begin(&m, k, &space);
  KExpr *bi = map_coord(&m, 0), *i = map_coord(&m, 1), *j = map_coord(&m, 2);
  int64_t last = g->batch - 1;
  int64_t na = last * g->stride_a + (g->trans_a ? g->k : g->m) * g->lda;
  int64_t nb = last * g->stride_b + (g->trans_b ? g->n : g->k) * g->ldb;
  KBuf *A = cg_kglobal(k, "a", TY_I8, na, g->a), *B = cg_kglobal(k, "b", TY_I8, nb, g->b);
  KBuf *C = cg_kglobal(k, "c", TY_I32, last * g->stride_c + g->m * g->ldc, g->c);
  KVar *acc = cg_kvar(k, "acc", TY_I32), *p = cg_kvar(k, "p", KT_INDEX);
  KStmt *red = cg_kreduce(k, &m.main, acc, cg_kimm(k, 0, TY_I32), OP_ADD, p, cg_kint(k, g->k));
  KExpr *pv = cg_kv(k, p);
  KExpr *ai = g->trans_a ? cg_kadd(k, cg_kmul(k, pv, cg_kint(k, g->lda)), i)
                         : cg_kadd(k, cg_kmul(k, i, cg_kint(k, g->lda)), pv);
  KExpr *bj = g->trans_b ? cg_kadd(k, cg_kmul(k, j, cg_kint(k, g->ldb)), pv)
                         : cg_kadd(k, cg_kmul(k, pv, cg_kint(k, g->ldb)), j);
  ai = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_a)), ai);
  bj = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_b)), bj);
  red->value =
      cg_kop2(k, OP_MUL, cg_kcast(k, cg_kload(k, A, ai), TY_I32), cg_kcast(k, cg_kload(k, B, bj), TY_I32));
  KExpr *ci = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_c)),
                      cg_kadd(k, cg_kmul(k, i, cg_kint(k, g->ldc)), j));
  cg_kstore(k, &m.main, C, ci, cg_kv(k, acc));
  map_end(&m);
  cg_launch(b, k);
}

/* The same on tensor cores (tc_gemm.c): A's rows are m, B's rows n,
 * each K-contiguous (cp.async-able when aligned) unless transposed. */
typedef struct I8Gemm {
  const RtGemm *g;
} I8Gemm;

static KBuf *i8_buf(Kernel *k, const RtGemm *g, bool is_b) {
  int64_t last = g->batch - 1;
  int64_t n = is_b ? last * g->stride_b + (g->trans_b ? g->n : g->k) * g->ldb
                   : last * g->stride_a + (g->trans_a ? g->k : g->m) * g->lda;
  return cg_kglobal(k, is_b ? "b" : "a", TY_I8, n, is_b ? g->b : g->a);
}

/* Element (row, kk) of A (is_b false) or B in batch z. */
static KExpr *i8_index(Kernel *k, const RtGemm *g, bool is_b, KExpr *z, KExpr *row, KExpr *kk) {
  bool k_major = is_b ? g->trans_b : !g->trans_a;
  KExpr *ld = cg_kint(k, is_b ? g->ldb : g->lda), *stride = cg_kint(k, is_b ? g->stride_b : g->stride_a);
  KExpr *at = k_major ? cg_kadd(k, cg_kmul(k, row, ld), kk) : cg_kadd(k, cg_kmul(k, kk, ld), row);
  return cg_kadd(k, cg_kmul(k, z, stride), at);
}

static bool i8_aligned(const RtGemm *g, bool is_b) {
  bool k_major = is_b ? g->trans_b : !g->trans_a;
  int64_t ld = is_b ? g->ldb : g->lda, stride = is_b ? g->stride_b : g->stride_a;
  uint64_t off = is_b ? g->b.offset : g->a.offset;
  return k_major && ld % 16 == 0 && off % 16 == 0 && (g->batch == 1 || stride % 16 == 0);
}

static KBuf *i8_async_a(void *ctx, Kernel *k) {
  const RtGemm *g = ((I8Gemm *)ctx)->g;
  return i8_aligned(g, false) ? i8_buf(k, g, false) : NULL;
}

static KBuf *i8_async_b(void *ctx, Kernel *k) {
  const RtGemm *g = ((I8Gemm *)ctx)->g;
  return i8_aligned(g, true) ? i8_buf(k, g, true) : NULL;
}

static KExpr *i8_chunk_a(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  (void)blk;
  *ok = NULL;
  return i8_index(k, ((I8Gemm *)ctx)->g, false, z, row, kk);
}

static KExpr *i8_chunk_b(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  (void)blk;
  *ok = NULL;
  return i8_index(k, ((I8Gemm *)ctx)->g, true, z, row, kk);
}

static void *i8_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  (void)ctx, (void)k, (void)blk, (void)z;
  return row;
}

static KExpr *i8_element_a(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  (void)blk;
  const RtGemm *g = ((I8Gemm *)ctx)->g;
  return cg_kload(k, i8_buf(k, g, false), i8_index(k, g, false, z, row, kk));
}

static KExpr *i8_element_b(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  (void)blk;
  const RtGemm *g = ((I8Gemm *)ctx)->g;
  return cg_kload(k, i8_buf(k, g, true), i8_index(k, g, true, z, row, kk));
}

static void i8_store(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *m, KExpr *n, KExpr *acc) {
  const RtGemm *g = ((I8Gemm *)ctx)->g;
  KBuf *c = cg_kglobal(k, "c", TY_I32, (g->batch - 1) * g->stride_c + g->m * g->ldc, g->c);
  KExpr *at = cg_kadd(k, cg_kmul(k, z, cg_kint(k, g->stride_c)), cg_kadd(k, cg_kmul(k, m, cg_kint(k, g->ldc)), n));
  cg_kstore(k, blk, c, at, acc);
}

static void gemm_i8_tc(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  Ctx *c = cg_build_ctx(b);
  I8Gemm *ig = ARENA_NEW(&c->arena, I8Gemm);
  RtGemm *copy = ARENA_NEW(&c->arena, RtGemm);
  *copy = *g;
  ig->g = copy;
  const CgGroup *grp = cg_group(b);
  CgTcGemm tg = {
      .node = n,
      .hint = arena_printf(&c->arena, "%s_gemm_i8", grp && grp->anchor == n && grp->n > 1 ? cg_group_hint(c, grp)
                                                                                             : ir_ops[n->op].name),
      .what = what ? what : "gemm",
      .tc = KTC_S8,
      .m = g->m,
      .n = g->n,
      .k = g->k,
      .batch = g->batch,
      .a = {.rows = g->m, .k_major = !g->trans_a, .async_buf = i8_async_a, .chunk_at = i8_chunk_a,
            .row_begin = i8_row, .element = i8_element_a},
      .b = {.rows = g->n, .k_major = g->trans_b != 0, .async_buf = i8_async_b, .chunk_at = i8_chunk_b,
            .row_begin = i8_row, .element = i8_element_b},
      .ctx = ig,
      .store = i8_store,
  };
  cg_tc_gemm(b, &tg);
}

/* Appends g, or nothing when C is empty, or zeros when k is 0 (C is
 * always contiguous here); an int8 g that cuBLAS cannot run becomes a
 * kernel of ours, on tensor cores unless --no-tensor-cores. */
static void emit_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  if (g->m == 0 || g->n == 0 || g->batch == 0) return;
  if (g->k == 0) {
    /* A product over nothing is 0: C stays as it is when added to. */
    if (g->beta == 0.0f) cg_fill(b, n, what, g->c, gemm_c_dtype(g), g->batch * g->m * g->n, 0.0);
    return;
  }
  if (g->dtype == RT_DT_I8 && !blas_takes_int8(g)) {
    if (g->alpha != 1.0f || g->beta != 0.0f)
      dl_internal(cg_build_ctx(b), "int8 gemm with alpha %g, beta %g", (double)g->alpha, (double)g->beta);
    if (cg_options(b)->no_tensor_cores)
      gemm_i8_kernel(b, n, what, g);
    else
      gemm_i8_tc(b, n, what, g);
    return;
  }
  cg_gemm(b, n, what, g);
}

/* out[i] += bias[(i / inner) % channels], in place. */
static void bias_add(CgBuild *b, const Node *n, RtRef out, int64_t total, int64_t inner,
                     int64_t channels, const Value *bias) {
  if (total == 0) return;
  Kernel *k = new_kernel(b, n, "bias", "bias");
  DType dt = n->out[0].type.dtype;
  TensorType t = flat(dt, total);
  Map m;
  map_begin(&m, k, &t);
  KBuf *o = cg_kglobal(k, "out", dt, total, out);
  KExpr *ch = cg_kidx(k, KI_MOD, cg_kidx(k, KI_DIV, m.i, cg_kint(k, inner)), cg_kint(k, channels));
  KExpr *v = cg_kop2(k, OP_ADD, cg_kload(k, o, m.i), load_of(b, k, bias, "bias", ch));
  cg_kstore(k, &m.main, o, m.i, v);
  map_end(&m);
  cg_launch(b, k);
}

static bool lower_matmul(CgBuild *b, const Node *n) {
  return cg_lower_matmul_into(b, n, cg_ref(b, &n->out[0]), 0.0f);
}

bool cg_lower_matmul_into(CgBuild *b, const Node *n, RtRef rc, float beta) {
  if (!product_dtypes(b, n)) return false;
  TensorType at = ir_matmul_operand(n, 0), bt = ir_matmul_operand(n, 1);
  bool ta = ir_matmul_trans(n, 0), tb = ir_matmul_trans(n, 1);
  if (at.rank == 1) at = ir_type_make(at.dtype, 2, (int64_t[]){1, at.dims[0]});
  if (bt.rank == 1) bt = ir_type_make(bt.dtype, 2, (int64_t[]){bt.dims[0], 1});
  int64_t m = at.dims[at.rank - 2], k = at.dims[at.rank - 1], nn = bt.dims[bt.rank - 1];
  TensorType ab = at, bb = bt, batch = {.dtype = at.dtype};
  ab.rank -= 2;
  bb.rank -= 2;
  batch.rank = ab.rank > bb.rank ? ab.rank : bb.rank;
  for (int i = 0; i < batch.rank; i++) {
    int ia = i - (batch.rank - ab.rank), ib = i - (batch.rank - bb.rank);
    int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    batch.dims[i] = da == 1 ? db : da;
  }
  int64_t nbatch = numel(&batch), na = numel(&ab), nb = numel(&bb);
  if (nbatch * m * nn == 0) return true;
  RtRef ra = cg_ref(b, n->in[0]), rb = cg_ref(b, n->in[1]);
  DType dt = n->in[0]->type.dtype;
  /* int8 operands, an int32 C: the sizes differ */
  uint64_t es = (uint64_t)ir_dtype_size(dt), esc = (uint64_t)ir_dtype_size(n->out[0].type.dtype);
  RtGemm g = gemm_of(dt, m, nn, k);
  g.a = ra, g.b = rb, g.c = rc;
  g.beta = beta;
  g.trans_a = ta, g.trans_b = tb;
  if (ta) g.lda = m;
  if (tb) g.ldb = k;
  if (nb == 1 && na == nbatch && !ta) {
    /* One shared B: the batch folds into the rows of one product (not
     * A^T's: its matrices' rows are not one matrix's). */
    g.m = nbatch * m;
    emit_gemm(b, n, NULL, &g);
  } else if ((na == nbatch || na == 1) && (nb == nbatch || nb == 1)) {
    g.batch = nbatch;
    g.stride_a = na == 1 ? 0 : m * k;
    g.stride_b = nb == 1 ? 0 : k * nn;
    g.stride_c = m * nn;
    emit_gemm(b, n, NULL, &g);
  } else {
    /* Broadcasting that one stride per operand cannot express: a GEMM per
     * batch index. */
    int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], bst[DL_MAX_RANK];
    bcast_strides(&ab, &batch, sa);
    bcast_strides(&bb, &batch, sb);
    strides_of(&batch, bst);
    for (int64_t bi = 0; bi < nbatch; bi++) {
      int64_t oa = 0, ob = 0;
      for (int d = 0; d < batch.rank; d++) {
        int64_t idx = bi / bst[d] % batch.dims[d];
        oa += idx * sa[d];
        ob += idx * sb[d];
      }
      RtGemm one = g;
      one.a = cg_ref_at(ra, (uint64_t)(oa * m * k) * es);
      one.b = cg_ref_at(rb, (uint64_t)(ob * k * nn) * es);
      one.c = cg_ref_at(rc, (uint64_t)(bi * m * nn) * esc);
      emit_gemm(b, n, arena_printf(&cg_build_ctx(b)->arena, "batch %" PRId64, bi), &one);
    }
  }
  return true;
}

/* linear's product x W^T (rows of x by the weight's out features) into c. */
static RtGemm linear_gemm(CgBuild *b, const Node *n, RtRef c) {
  const Value *x = n->in[0], *w = n->in[1];
  int64_t in = x->type.dims[x->type.rank - 1], outf = w->type.dims[0];
  int64_t total = numel(&n->out[0].type), rows = outf ? total / outf : 0;
  RtGemm g = gemm_of(x->type.dtype, rows, outf, in);
  g.trans_b = 1;
  g.ldb = in;
  g.a = cg_ref(b, x), g.b = cg_ref(b, w), g.c = c;
  return g;
}

/* Whether cuBLASLt adds linear's bias (its BIAS epilogue): a float
 * product with a bias, not empty (a sum over no features is the bias
 * alone, which emit_gemm would not add to its zeros). */
static bool bias_in_epilogue(const Node *n) {
  const TensorType *x = &n->in[0]->type;
  return n->n_in > 2 && ir_dtype_is_float(n->out[0].type.dtype) && x->dims[x->rank - 1] > 0 &&
         numel(&n->out[0].type) > 0;
}

static bool lower_linear(CgBuild *b, const Node *n) {
  if (!product_dtypes(b, n)) return false;
  const Value *out = &n->out[0];
  int64_t total = numel(&out->type), outf = n->in[1]->type.dims[0];
  if (total == 0) return true;
  RtRef rc = cg_ref(b, out);
  RtGemm g = linear_gemm(b, n, rc);
  /* In a fusion group the group's kernel adds the bias where it reads. */
  if (n->group < 0 && bias_in_epilogue(n)) g.epilogue = RT_EPILOGUE_BIAS, g.bias = cg_ref(b, n->in[2]);
  emit_gemm(b, n, NULL, &g);
  if (n->n_in > 2 && n->group < 0 && !g.epilogue) bias_add(b, n, rc, total, 1, outf, n->in[2]);
  return true;
}

/* The activation cuBLASLt applies after the bias: relu in every float
 * type; gelu's tanh form in f16 and bf16 only, since cuBLASLt does not
 * say how precise its gelu is, and f32 models are held to 1e-5. */
static uint32_t activation_epilogue(const Node *act, DType dt) {
  if (act->op == OP_RELU) return RT_EPILOGUE_RELU_BIAS;
  if (act->op == OP_GELU && dt != TY_F32 && strcmp(ir_attr_str(act, "approximate"), "tanh") == 0)
    return RT_EPILOGUE_GELU_BIAS;
  return RT_EPILOGUE_NONE;
}

bool cg_lower_gemm_epilogue(CgBuild *b, const CgGroup *grp) {
  const Node *act = grp->root, *lin = act->n_in == 1 ? act->in[0]->def : NULL;
  if (grp->n != 2 || grp->attention || !lin || lin->op != OP_LINEAR || lin->group != grp->id ||
      !bias_in_epilogue(lin))
    return false;
  DType dt = lin->out[0].type.dtype;
  uint32_t e = act->out[0].type.dtype == dt ? activation_epilogue(act, dt) : RT_EPILOGUE_NONE;
  if (!e) return false;
  RtGemm g = linear_gemm(b, lin, cg_ref(b, &act->out[0]));
  g.epilogue = e;
  g.bias = cg_ref(b, lin->in[2]);
  emit_gemm(b, act, arena_printf(&cg_build_ctx(b)->arena, "#k%d", grp->id), &g);
  return true;
}

static KExpr *window_pos(Kernel *k, KExpr *o, int64_t stride, int64_t pad, KExpr *kk, int64_t dil) {
  return cg_kadd(k, cg_kidx(k, KI_SUB, cg_kmul(k, o, cg_kint(k, stride)), cg_kint(k, pad)),
                 cg_kmul(k, kk, cg_kint(k, dil)));
}

/* lo <= p < hi, leaving out a bound the window can never cross. */
static KExpr *in_range(Kernel *k, KExpr *p, int64_t lo, int64_t hi, int64_t pmin, int64_t pmax) {
  KExpr *c = NULL;
  if (pmin < lo) c = cg_kcmp(k, KC_GE, p, cg_kint(k, lo));
  if (pmax >= hi) c = cg_kand(k, c, cg_kcmp(k, KC_LT, p, cg_kint(k, hi)));
  return c;
}

/* Convolutions and windows over 2 or 3 spatial dims (the 3-d ops are the
 * 2-d ones with a depth): positions and taps along each spatial dim are
 * named for it, the last dims last. */
enum { MAX_SPATIAL = 3 };

static const char *spatial_name(const char *const names[MAX_SPATIAL], int nsp, int d) {
  return names[MAX_SPATIAL - nsp + d];
}

static const char *const pos_names[MAX_SPATIAL] = {"id", "ih", "iw"};
static const char *const tap_names[MAX_SPATIAL] = {"kd", "kh", "kw"};

static int64_t product(const int64_t *v, int count) {
  int64_t p = 1;
  for (int i = 0; i < count; i++) p *= v[i];
  return p;
}

/* The extreme input positions a window touches along each dim, so that
 * bound checks it can never fail are left out. */
static void window_extent(int nsp, const int64_t *out, const int64_t *kern, const int64_t *stride,
                          const int64_t *pad, const int64_t *dil, int64_t *pmin, int64_t *pmax) {
  for (int d = 0; d < nsp; d++) {
    pmin[d] = -pad[d];
    pmax[d] = (out[d] - 1) * stride[d] - pad[d] + (kern[d] - 1) * dil[d];
  }
}

/* ((plane * in[0] + pos[0]) * in[1] + pos[1]) ...: a position's index. */
static KExpr *window_index(Kernel *k, KExpr *plane, int nsp, const int64_t *in, KVar *const *pos) {
  KExpr *e = plane;
  for (int d = 0; d < nsp; d++) e = cg_kadd(k, cg_kmul(k, e, cg_kint(k, in[d])), cg_kv(k, pos[d]));
  return e;
}

/* Every position inside [lo[d], hi[d]) along its dim, or NULL when no
 * window can leave that box. */
static KExpr *window_inside(Kernel *k, int nsp, KVar *const *pos, const int64_t *lo,
                            const int64_t *hi, const int64_t *pmin, const int64_t *pmax) {
  KExpr *c = NULL;
  for (int d = 0; d < nsp; d++) c = cg_kand(k, c, in_range(k, cg_kv(k, pos[d]), lo[d], hi[d], pmin[d], pmax[d]));
  return c;
}

/* A convolution's geometry, read once from the node: nsp spatial dims of
 * the input (in), the kernel and the output (od), the attributes, and the
 * extreme input positions a window reaches. */
typedef struct ConvGeo {
  int nsp;
  const int64_t *stride, *pad, *dil, *in, *kern, *od;
  int64_t pmin[MAX_SPATIAL], pmax[MAX_SPATIAL];
} ConvGeo;

static ConvGeo conv_geo(const Node *n) {
  int cnt;
  ConvGeo g = {.nsp = n->in[0]->type.rank - 2,
               .stride = ir_attr_ints(n, "stride", &cnt),
               .pad = ir_attr_ints(n, "pad", &cnt),
               .dil = ir_attr_ints(n, "dilation", &cnt),
               .in = n->in[0]->type.dims + 2,
               .kern = n->in[1]->type.dims + 2,
               .od = n->out[0].type.dims + 2};
  window_extent(g.nsp, g.od, g.kern, g.stride, g.pad, g.dil, g.pmin, g.pmax);
  return g;
}

static const int64_t no_lo[MAX_SPATIAL] = {0, 0, 0};

/* cols[n][(c*KH + kh)*KW + kw][oh*OW + ow] = x[n][c][ih][iw], or int8's
 * zero point (a real 0) in the padding; likewise with a depth. */
static void conv_im2col(CgBuild *b, const Node *n, const ConvGeo *cg, RtRef cols) {
  const Value *x = n->in[0];
  int nsp = cg->nsp;
  int64_t N = x->type.dims[0], C = x->type.dims[1];
  DType dt = x->type.dtype;
  Kernel *k = new_kernel(b, n, "im2col", "im2col");
  TensorType space = {.dtype = dt, .rank = 2 + 2 * nsp, .dims = {N, C}};
  for (int d = 0; d < nsp; d++) space.dims[2 + d] = cg->kern[d], space.dims[2 + nsp + d] = cg->od[d];
  Map m;
  map_begin(&m, k, &space);
  KVar *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++)
    pos[d] = cg_klet(k, &m.main, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, 2 + nsp + d), cg->stride[d], cg->pad[d], map_coord(&m, 2 + d),
                                cg->dil[d]));
  KExpr *cond = window_inside(k, nsp, pos, no_lo, cg->in, cg->pmin, cg->pmax);
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)), map_coord(&m, 1));
  KExpr *v = load_of(b, k, x, "x", window_index(k, plane, nsp, cg->in, pos));
  if (cond) v = cg_ksel(k, cond, v, cg_kimm(k, (double)cg_zero_point(n), dt));
  cg_kstore(k, &m.main, cg_kglobal(k, "cols", dt, numel(&space), cols), m.i, v);
  map_end(&m);
  cg_launch(b, k);
}

/* groups 1 outside a fusion group: im2col (unless x already is the
 * column matrix), one GEMM per image, the bias. */
static void conv_gemm(CgBuild *b, const Node *n, const ConvGeo *cg) {
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = cg->nsp;
  int64_t N = x->type.dims[0], C = x->type.dims[1], Co = w->type.dims[0];
  int64_t OHW = product(cg->od, nsp), CKK = C * product(cg->kern, nsp);
  RtRef rc = cg_ref(b, out);
  DType dt = x->type.dtype; /* the columns' type: i8 for an int32 result */
  RtGemm g = gemm_of(dt, Co, OHW, CKK);
  g.a = cg_ref(b, w), g.c = rc;
  g.batch = N, g.stride_a = 0, g.stride_b = CKK * OHW, g.stride_c = Co * OHW;
  bool direct = product(cg->kern, nsp) == 1;
  for (int d = 0; d < nsp; d++) direct = direct && cg->stride[d] == 1 && cg->pad[d] == 0 && cg->pad[nsp + d] == 0;
  if (direct) {
    g.b = cg_ref(b, x); /* x[n] is already the [C, H*W] matrix */
  } else {
    g.b = cg_scratch(b, n, (uint64_t)(N * CKK * OHW) * (uint64_t)ir_dtype_size(dt));
    conv_im2col(b, n, cg, g.b);
  }
  if (N == 1) g.batch = 1;
  emit_gemm(b, n, "gemm", &g);
  if (n->n_in > 2) bias_add(b, n, rc, numel(&out->type), OHW, Co, n->in[2]);
}

/* Grouped (depthwise): a direct loop per output element, summing in
 * f32, or exactly in int32 for int8. */
static void conv_direct(CgBuild *b, const Node *n, const ConvGeo *cg) {
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = cg->nsp;
  int64_t C = x->type.dims[1], Co = w->type.dims[0], Cg = w->type.dims[1];
  int64_t cog = Co / ir_attr_int(n, "groups");
  DType at_t = out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *co = map_coord(&m, 1);
  KVar *cin0 = cg_klet(k, &m.main, "cin", KT_INDEX,
                       cg_kmul(k, cg_kidx(k, KI_DIV, co, cg_kint(k, cog)), cg_kint(k, Cg)));
  KVar *acc = cg_klet(k, &m.main, "acc", at_t, cg_kimm(k, 0, at_t));
  KVar *ci = cg_kvar(k, "ci", KT_INDEX), *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *at = &cg_kloop(k, &m.main, ci, cg_kint(k, Cg), KM_SERIAL)->body;
  for (int d = 0; d < nsp; d++) {
    at = &cg_kloop(k, at, tap[d], cg_kint(k, cg->kern[d]), KM_SERIAL)->body;
    pos[d] = cg_klet(k, at, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, 2 + d), cg->stride[d], cg->pad[d], cg_kv(k, tap[d]), cg->dil[d]));
  }
  KExpr *cond = window_inside(k, nsp, pos, no_lo, cg->in, cg->pmin, cg->pmax);
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)),
                         cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)));
  KExpr *xi = window_index(k, plane, nsp, cg->in, pos);
  KExpr *wi = cg_kadd(k, cg_kmul(k, co, cg_kint(k, Cg)), cg_kv(k, ci));
  for (int d = 0; d < nsp; d++) wi = cg_kadd(k, cg_kmul(k, wi, cg_kint(k, cg->kern[d])), cg_kv(k, tap[d]));
  int64_t zp = cg_zero_point(n);
  KStmt *guard = cond ? cg_kif(k, at, cond) : NULL;
  if (guard) at = &guard->body;
  KExpr *prod = cg_kop2(k, OP_MUL, cg_kcast(k, load_in(b, k, at, x, "x", xi), at_t),
                        cg_kcast(k, load_in(b, k, at, w, "w", wi), at_t));
  cg_kset(k, at, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), prod));
  if (guard && zp) {
    /* int8 padding reads the zero point (a real 0) */
    KExpr *pad_prod = cg_kop2(k, OP_MUL, cg_kimm(k, (double)zp, at_t),
                              cg_kcast(k, load_in(b, k, &guard->orelse, w, "w", wi), at_t));
    cg_kset(k, &guard->orelse, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), pad_prod));
  }
  KExpr *res = cg_kv(k, acc);
  if (n->n_in > 2)
    res = cg_kop2(k, OP_ADD, res, cg_kcast(k, load_in(b, k, NULL, n->in[2], "bias", co), at_t));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
}

/* conv2d and conv3d: an implicit GEMM in a fusion group (grouped ones
 * when the tensor cores take them), else im2col and a GEMM (groups 1) or
 * a direct loop (grouped, depthwise). */
static bool lower_conv(CgBuild *b, const Node *n) {
  if (!product_dtypes(b, n)) return false;
  if (numel(&n->out[0].type) == 0) return true;
  int64_t groups = ir_attr_int(n, "groups");
  if (n->group >= 0 && (groups == 1 || cg_conv_on_tc(b, n))) return cg_lower_conv_igemm(b, n);
  ConvGeo cg = conv_geo(n);
  if (groups == 1)
    conv_gemm(b, n, &cg);
  else
    conv_direct(b, n, &cg);
  return true;
}

/* A direct gather per output element: input row ih reaches output row
 * oh through tap kh when oh + pad - kh * dil == ih * stride.  The offset
 * (a multiple of the stride) keeps the dividend non-negative, so the
 * divisibility test and the quotient never depend on how division
 * rounds negative numbers. */
static KExpr *transposed_pos(Kernel *k, KExpr *o, int64_t pad, KExpr *kk, int64_t dil,
                             int64_t off) {
  return cg_kidx(k, KI_SUB, cg_kadd(k, o, cg_kint(k, pad + off)), cg_kmul(k, kk, cg_kint(k, dil)));
}

static KExpr *transposed_hit(Kernel *k, KExpr *t, int64_t stride, int64_t off, int64_t len) {
  KExpr *c = NULL;
  if (stride > 1)
    c = cg_kcmp(k, KC_EQ, cg_kidx(k, KI_MOD, t, cg_kint(k, stride)), cg_kint(k, 0));
  c = cg_kand(k, c, cg_kcmp(k, KC_GE, t, cg_kint(k, off)));
  return cg_kand(k, c, cg_kcmp(k, KC_LT, t, cg_kint(k, off + len * stride)));
}

static const char *const hit_names[MAX_SPATIAL] = {"td", "th", "tw"};

/* conv_transpose2d and conv_transpose3d: a direct gather per output
 * element, nested per spatial dim so that a tap that misses skips the
 * dims inside it. */
static bool lower_conv_transpose(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, false)) return false;
  int cnt;
  const int64_t *stride = ir_attr_ints(n, "stride", &cnt), *pad = ir_attr_ints(n, "pad", &cnt);
  const int64_t *dil = ir_attr_ints(n, "dilation", &cnt);
  int64_t groups = ir_attr_int(n, "groups");
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = x->type.rank - 2;
  const int64_t *xd = x->type.dims, *wd = w->type.dims;
  const int64_t *in = xd + 2, *kern = wd + 2;
  int64_t C = xd[1], Cog = wd[1], cig = C / groups;
  if (numel(&out->type) == 0) return true;
  int64_t off[MAX_SPATIAL];
  for (int d = 0; d < nsp; d++) off[d] = stride[d] * (((kern[d] - 1) * dil[d] + stride[d] - 1) / stride[d]);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *co = map_coord(&m, 1);
  KVar *cin0 = cg_klet(k, &m.main, "cin", KT_INDEX,
                       cg_kmul(k, cg_kidx(k, KI_DIV, co, cg_kint(k, Cog)), cg_kint(k, cig)));
  KVar *cw = cg_klet(k, &m.main, "cw", KT_INDEX, cg_kidx(k, KI_MOD, co, cg_kint(k, Cog)));
  KVar *acc = cg_klet(k, &m.main, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *ci = cg_kvar(k, "ci", KT_INDEX), *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *at = &cg_kloop(k, &m.main, ci, cg_kint(k, cig), KM_SERIAL)->body;
  for (int d = 0; d < nsp; d++) {
    KBlock *body = &cg_kloop(k, at, tap[d], cg_kint(k, kern[d]), KM_SERIAL)->body;
    KVar *t = cg_klet(k, body, spatial_name(hit_names, nsp, d), KT_INDEX,
                      transposed_pos(k, map_coord(&m, 2 + d), pad[d], cg_kv(k, tap[d]), dil[d], off[d]));
    at = &cg_kif(k, body, transposed_hit(k, cg_kv(k, t), stride[d], off[d], in[d]))->body;
    pos[d] = cg_klet(k, at, spatial_name(pos_names, nsp, d), KT_INDEX,
                     cg_kidx(k, KI_SUB, cg_kidx(k, KI_DIV, cg_kv(k, t), cg_kint(k, stride[d])),
                             cg_kint(k, off[d] / stride[d])));
  }
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)),
                         cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)));
  KExpr *xi = window_index(k, plane, nsp, in, pos);
  KExpr *wi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)), cg_kint(k, Cog)),
                      cg_kv(k, cw));
  for (int d = 0; d < nsp; d++) wi = cg_kadd(k, cg_kmul(k, wi, cg_kint(k, kern[d])), cg_kv(k, tap[d]));
  KExpr *prod = cg_kop2(k, OP_MUL, load_f32(b, k, at, x, "x", xi), load_f32(b, k, at, w, "w", wi));
  cg_kset(k, at, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), prod));
  KExpr *res = cg_kv(k, acc);
  if (n->n_in > 2) res = cg_kop2(k, OP_ADD, res, load_f32(b, k, NULL, n->in[2], "bias", co));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* The source coordinates of resize in exact integer arithmetic: src =
 * num / den with num = (2 * dst + 1) * in - out, den = 2 * out (half
 * pixel, clamped at 0) or num = dst * (in - 1), den = out - 1 (corners).
 * Sets *lo to the lower neighbour and returns the f32 weight of the upper. */
static KExpr *resize_axis(Kernel *k, KBlock *at, KExpr *d, int64_t in, int64_t out, bool align,
                          KVar **lo) {
  KExpr *num;
  int64_t den;
  if (align) {
    den = out > 1 ? out - 1 : 1;
    num = cg_kmul(k, d, cg_kint(k, out > 1 ? in - 1 : 0));
  } else {
    den = 2 * out;
    num = cg_kidx(k, KI_MAX,
                  cg_kidx(k, KI_SUB, cg_kmul(k, cg_kadd(k, cg_kmul(k, d, cg_kint(k, 2)), cg_kint(k, 1)),
                                             cg_kint(k, in)),
                          cg_kint(k, out)),
                  cg_kint(k, 0));
  }
  KVar *nv = cg_klet(k, at, "num", KT_INDEX, num);
  *lo = cg_klet(k, at, "lo", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, nv), cg_kint(k, den)));
  KExpr *rem = cg_kidx(k, KI_MOD, cg_kv(k, nv), cg_kint(k, den));
  return cg_kop2(k, OP_DIV, cg_kcast(k, rem, TY_F32), cg_kimm(k, (double)den, TY_F32));
}

static bool lower_resize(CgBuild *b, const Node *n) {
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0;
  if (!check_dtypes(b, n, !linear)) return false;
  bool align = ir_attr_int(n, "align_corners") != 0;
  const Value *x = n->in[0], *out = &n->out[0];
  int64_t H = x->type.dims[2], W = x->type.dims[3];
  int64_t OH = out->type.dims[2], OW = out->type.dims[3];
  if (numel(&out->type) == 0) return true;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, x->type.dims[1])),
                         map_coord(&m, 1));
  KVar *base = cg_klet(k, &m.main, "base", KT_INDEX, cg_kmul(k, plane, cg_kint(k, H * W)));
  if (!linear) {
    KExpr *ih = cg_kidx(k, KI_DIV, cg_kmul(k, map_coord(&m, 2), cg_kint(k, H)), cg_kint(k, OH));
    KExpr *iw = cg_kidx(k, KI_DIV, cg_kmul(k, map_coord(&m, 3), cg_kint(k, W)), cg_kint(k, OW));
    KExpr *xi = cg_kadd(k, cg_kv(k, base), cg_kadd(k, cg_kmul(k, ih, cg_kint(k, W)), iw));
    map_store(b, &m, out, load_of(b, k, x, "x", xi));
    map_end(&m);
    cg_launch(b, k);
    return true;
  }
  KVar *h0, *w0;
  KVar *lh = cg_klet(k, &m.main, "lh", TY_F32,
                     resize_axis(k, &m.main, map_coord(&m, 2), H, OH, align, &h0));
  KVar *lw = cg_klet(k, &m.main, "lw", TY_F32,
                     resize_axis(k, &m.main, map_coord(&m, 3), W, OW, align, &w0));
  KExpr *h1 = cg_kidx(k, KI_MIN, cg_kadd(k, cg_kv(k, h0), cg_kint(k, 1)), cg_kint(k, H - 1));
  KExpr *w1 = cg_kidx(k, KI_MIN, cg_kadd(k, cg_kv(k, w0), cg_kint(k, 1)), cg_kint(k, W - 1));
  KExpr *rows[2] = {cg_kmul(k, cg_kv(k, h0), cg_kint(k, W)), cg_kmul(k, h1, cg_kint(k, W))};
  KExpr *cols[2] = {cg_kv(k, w0), w1};
  KExpr *one = cg_kimm(k, 1, TY_F32);
  KExpr *wh[2] = {cg_kop2(k, OP_SUB, one, cg_kv(k, lh)), cg_kv(k, lh)};
  KExpr *ww[2] = {cg_kop2(k, OP_SUB, one, cg_kv(k, lw)), cg_kv(k, lw)};
  KExpr *v = NULL;
  for (int r = 0; r < 2; r++) {
    KExpr *row = NULL;
    for (int c = 0; c < 2; c++) {
      KExpr *xi = cg_kadd(k, cg_kv(k, base), cg_kadd(k, rows[r], cols[c]));
      KExpr *t = cg_kop2(k, OP_MUL, ww[c], load_f32(b, k, &m.main, x, "x", xi));
      row = row ? cg_kop2(k, OP_ADD, row, t) : t;
    }
    KExpr *t = cg_kop2(k, OP_MUL, wh[r], row);
    v = v ? cg_kop2(k, OP_ADD, v, t) : t;
  }
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- grid_sample: eval.c's gs_* step by step, one thread per output ---- */

typedef struct Sampler {
  Kernel *k;
  KBlock *at;
  KExpr *plane; /* the first element of x[n, c] */
  int64_t H, W;
  bool align, border, reflection;
} Sampler;

static KExpr *f32(Kernel *k, double v) { return cg_kimm(k, v, TY_F32); }

static KExpr *fop(Kernel *k, OpKind op, KExpr *a, KExpr *b) { return cg_kop2(k, op, a, b); }

static KExpr *flet(Sampler *s, const char *stem, KExpr *v) {
  return cg_kv(s->k, cg_klet(s->k, s->at, stem, TY_F32, v));
}

static void gs_borders(const Sampler *s, int64_t len, double *lo, double *hi) {
  *lo = s->align ? 0 : -0.5;
  *hi = s->align ? (double)len - 1 : (double)len - 0.5;
}

/* v inside [0, len - 1]; a NaN stays one. */
static KExpr *gs_clamp(Sampler *s, KExpr *v, int64_t len) {
  Kernel *k = s->k;
  KExpr *top = f32(k, (double)len - 1);
  return cg_ksel(k, cg_kcmp(k, KC_LT, v, f32(k, 0)), f32(k, 0),
                 cg_ksel(k, cg_kcmp(k, KC_GT, v, top), top, v));
}

static KExpr *gs_reflect(Sampler *s, KExpr *v, double lo, double hi) {
  Kernel *k = s->k;
  double range = hi - lo;
  if (!(range > 0)) return f32(k, lo);
  KExpr *below = cg_kcmp(k, KC_LT, v, f32(k, lo)), *above = cg_kcmp(k, KC_GT, v, f32(k, hi));
  KExpr *dx = flet(s, "dx", cg_ksel(k, below, fop(k, OP_SUB, f32(k, lo), v), fop(k, OP_SUB, v, f32(k, hi))));
  KExpr *flips = flet(s, "flips", cg_kop1(k, OP_FLOOR, fop(k, OP_DIV, dx, f32(k, range))));
  KExpr *r = flet(s, "r", fop(k, OP_SUB, dx, fop(k, OP_MUL, flips, f32(k, range))));
  KExpr *half = cg_kop1(k, OP_FLOOR, fop(k, OP_DIV, flips, f32(k, 2)));
  KExpr *even = cg_kcmp(k, KC_EQ, fop(k, OP_SUB, flips, fop(k, OP_MUL, half, f32(k, 2))), f32(k, 0));
  KExpr *up = fop(k, OP_ADD, f32(k, lo), r), *down = fop(k, OP_SUB, f32(k, hi), r);
  KExpr *folded = cg_ksel(k, below, cg_ksel(k, even, up, down), cg_ksel(k, even, down, up));
  return cg_ksel(k, cg_kor(k, below, above), folded, v);
}

/* The point grid coordinate g names along an axis of len pixels (only
 * the taps go through padding_mode). */
static KExpr *gs_source(Sampler *s, KExpr *g, int64_t len, bool nearest) {
  Kernel *k = s->k;
  KExpr *g1 = fop(k, OP_ADD, g, f32(k, 1));
  KExpr *v = s->align ? fop(k, OP_MUL, fop(k, OP_DIV, g1, f32(k, 2)), f32(k, (double)len - 1))
                      : fop(k, OP_DIV, fop(k, OP_SUB, fop(k, OP_MUL, g1, f32(k, (double)len)), f32(k, 1)),
                            f32(k, 2));
  return flet(s, "src", nearest ? cg_kop1(k, OP_ROUND, v) : v);
}

/* A tap's whole-number coordinate through padding_mode: the index to read
 * (clamped, so that nothing outside is read) and whether it is inside. */
static KExpr *gs_tap(Sampler *s, KExpr *i, int64_t len, KExpr **inside) {
  Kernel *k = s->k;
  double lo, hi;
  gs_borders(s, len, &lo, &hi);
  i = flet(s, "tap", i);
  if (s->border) i = gs_clamp(s, i, len);
  if (s->reflection) i = gs_reflect(s, i, lo, hi);
  KExpr *v = flet(s, "tap", i);
  *inside = cg_kand(k, cg_kcmp(k, KC_GE, v, f32(k, 0)), cg_kcmp(k, KC_LT, v, f32(k, (double)len)));
  KExpr *at = cg_kop2(k, OP_MINIMUM, cg_kop2(k, OP_MAXIMUM, cg_kcast(k, v, TY_I64), cg_kimm(k, 0, TY_I64)),
                      cg_kimm(k, (double)len - 1, TY_I64));
  return cg_kv(k, cg_klet(k, s->at, "at", KT_INDEX, cg_kcast(k, at, KT_INDEX)));
}

/* Keys' weights (a = -0.75) of the taps at -1, 0, 1, 2 for a point t
 * past tap 0: ((a x - 5a) x + 8a) x - 4a for the outer two (x in [1, 2]),
 * ((a + 2) x - (a + 3)) x x + 1 for the inner two (x in [0, 1]). */
static void gs_cubic(Sampler *s, KExpr *t, KExpr **c) {
  Kernel *k = s->k;
  const double A = -0.75;
  KExpr *d[4] = {fop(k, OP_ADD, t, f32(k, 1)), t, fop(k, OP_SUB, f32(k, 1), t),
                 fop(k, OP_SUB, f32(k, 2), t)};
  for (int i = 0; i < 4; i++) {
    KExpr *x = flet(s, "d", d[i]), *v;
    if (i == 0 || i == 3) {
      v = fop(k, OP_SUB, fop(k, OP_MUL, f32(k, A), x), f32(k, 5 * A));
      v = fop(k, OP_ADD, fop(k, OP_MUL, v, x), f32(k, 8 * A));
      v = fop(k, OP_SUB, fop(k, OP_MUL, v, x), f32(k, 4 * A));
    } else {
      v = fop(k, OP_SUB, fop(k, OP_MUL, f32(k, A + 2), x), f32(k, A + 3));
      v = fop(k, OP_ADD, fop(k, OP_MUL, fop(k, OP_MUL, v, x), x), f32(k, 1));
    }
    c[i] = flet(s, "c", v);
  }
}

static bool lower_grid_sample(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, false)) return false;
  const Value *x = n->in[0], *grid = n->in[1], *out = &n->out[0];
  const char *mode = ir_attr_str(n, "mode"), *pad = ir_attr_str(n, "padding_mode");
  bool nearest = strcmp(mode, "nearest") == 0, cubic = strcmp(mode, "bicubic") == 0;
  int64_t C = x->type.dims[1], Ho = out->type.dims[2], Wo = out->type.dims[3];
  if (numel(&out->type) == 0) return true;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  Sampler s = {.k = k, .at = &m.main, .H = x->type.dims[2], .W = x->type.dims[3],
               .align = ir_attr_int(n, "align_corners") != 0,
               .border = strcmp(pad, "border") == 0, .reflection = strcmp(pad, "reflection") == 0};
  KExpr *nb = map_coord(&m, 0);
  s.plane = cg_kv(k, cg_klet(k, &m.main, "plane", KT_INDEX,
                             cg_kmul(k, cg_kadd(k, cg_kmul(k, nb, cg_kint(k, C)), map_coord(&m, 1)),
                                     cg_kint(k, s.H * s.W))));
  KExpr *point = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, nb, cg_kint(k, Ho)), map_coord(&m, 2)),
                                    cg_kint(k, Wo)),
                         map_coord(&m, 3));
  KVar *g = cg_klet(k, &m.main, "g", KT_INDEX, cg_kmul(k, point, cg_kint(k, 2)));
  KExpr *gx = load_f32(b, k, &m.main, grid, "grid", cg_kv(k, g));
  KExpr *gy = load_f32(b, k, &m.main, grid, "grid", cg_kadd(k, cg_kv(k, g), cg_kint(k, 1)));
  KExpr *sx = gs_source(&s, gx, s.W, nearest), *sy = gs_source(&s, gy, s.H, nearest);
  int taps = nearest ? 1 : cubic ? 4 : 2, first = cubic ? -1 : 0;
  KExpr *x0 = nearest ? sx : flet(&s, "x0", cg_kop1(k, OP_FLOOR, sx));
  KExpr *y0 = nearest ? sy : flet(&s, "y0", cg_kop1(k, OP_FLOOR, sy));
  KExpr *wx[4] = {f32(k, 1)}, *wy[4] = {f32(k, 1)};
  if (!nearest) {
    KExpr *tx = flet(&s, "tx", fop(k, OP_SUB, sx, x0)), *ty = flet(&s, "ty", fop(k, OP_SUB, sy, y0));
    if (cubic) {
      gs_cubic(&s, tx, wx);
      gs_cubic(&s, ty, wy);
    } else {
      wx[0] = fop(k, OP_SUB, f32(k, 1), tx), wx[1] = tx;
      wy[0] = fop(k, OP_SUB, f32(k, 1), ty), wy[1] = ty;
    }
  }
  KExpr *row_at[4], *row_in[4], *col_at[4], *col_in[4];
  for (int i = 0; i < taps; i++) {
    row_at[i] = gs_tap(&s, fop(k, OP_ADD, y0, f32(k, first + i)), s.H, &row_in[i]);
    col_at[i] = gs_tap(&s, fop(k, OP_ADD, x0, f32(k, first + i)), s.W, &col_in[i]);
  }
  /* Along each row first, then down the rows, as eval.c. */
  KExpr *v = f32(k, 0);
  for (int i = 0; i < taps; i++) {
    KExpr *row = f32(k, 0);
    for (int j = 0; j < taps; j++) {
      KExpr *xi = cg_kadd(k, s.plane, cg_kadd(k, cg_kmul(k, row_at[i], cg_kint(k, s.W)), col_at[j]));
      KExpr *p = cg_ksel(k, cg_kand(k, row_in[i], col_in[j]), load_f32(b, k, &m.main, x, "x", xi), f32(k, 0));
      row = flet(&s, "row", fop(k, OP_ADD, row, fop(k, OP_MUL, wx[j], p)));
    }
    v = flet(&s, "acc", fop(k, OP_ADD, v, fop(k, OP_MUL, wy[i], row)));
  }
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- windows ---- */

/* maxpool2d/3d and avgpool2d/3d: a thread per output element, a loop
 * per spatial dim over its window. */
static bool lower_pool(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, false)) return false;
  int cnt;
  const int64_t *kern = ir_attr_ints(n, "kernel", &cnt), *stride = ir_attr_ints(n, "stride", &cnt);
  const int64_t *pad = ir_attr_ints(n, "pad", &cnt), *dil = ir_attr_ints(n, "dilation", &cnt);
  bool is_max = n->op == OP_MAXPOOL2D || n->op == OP_MAXPOOL3D;
  bool include_pad = !is_max && ir_attr_int(n, "count_include_pad");
  const Value *x = n->in[0], *out = &n->out[0];
  int nsp = x->type.rank - 2;
  const int64_t *in = x->type.dims + 2, *od = out->type.dims + 2;
  if (numel(&out->type) == 0) return true;
  int64_t pmin[MAX_SPATIAL], pmax[MAX_SPATIAL], zeros[MAX_SPATIAL] = {0, 0, 0};
  int64_t lo[MAX_SPATIAL], hi[MAX_SPATIAL];
  window_extent(nsp, od, kern, stride, pad, dil, pmin, pmax);
  for (int d = 0; d < nsp; d++) lo[d] = -pad[d], hi[d] = in[d] + pad[nsp + d];
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  /* The (n, c) plane: every output plane has OH*OW elements. */
  KVar *plane =
      cg_klet(k, &m.main, "plane", KT_INDEX, cg_kidx(k, KI_DIV, m.i, cg_kint(k, product(od, nsp))));
  KVar *acc = cg_klet(k, &m.main, "acc", TY_F32, cg_kimm(k, is_max ? -INFINITY : 0.0, TY_F32));
  KVar *count = is_max ? NULL : cg_klet(k, &m.main, "count", KT_INDEX, cg_kint(k, 0));
  KVar *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *body = &m.main;
  for (int d = 0; d < nsp; d++) {
    body = &cg_kloop(k, body, tap[d], cg_kint(k, kern[d]), KM_SERIAL)->body;
    pos[d] = cg_klet(k, body, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, 2 + d), stride[d], pad[d], cg_kv(k, tap[d]), dil[d]));
  }
  KExpr *inc = count ? cg_kadd(k, cg_kv(k, count), cg_kint(k, 1)) : NULL;
  if (include_pad) {
    /* Positions past the padded border (ceil_mode) do not count. */
    KExpr *padded = window_inside(k, nsp, pos, lo, hi, pmin, pmax);
    if (padded)
      cg_kset(k, &cg_kif(k, body, padded)->body, count, inc);
    else
      cg_kset(k, body, count, inc);
  }
  KExpr *inside = window_inside(k, nsp, pos, zeros, in, pmin, pmax);
  KBlock *at = inside ? &cg_kif(k, body, inside)->body : body;
  KExpr *v = load_f32(b, k, at, x, "x", window_index(k, cg_kv(k, plane), nsp, in, pos));
  cg_kset(k, at, acc, cg_kop2(k, is_max ? OP_MAXIMUM : OP_ADD, cg_kv(k, acc), v));
  if (count && !include_pad) cg_kset(k, at, count, inc);
  KExpr *res = cg_kv(k, acc);
  if (!is_max)
    res = cg_ksel(k, cg_kcmp(k, KC_NE, cg_kv(k, count), cg_kint(k, 0)),
                  cg_kop2(k, OP_DIV, res, cg_kcast(k, cg_kv(k, count), TY_F32)),
                  cg_kimm(k, 0, TY_F32));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- data movement ---- */

static bool lower_reshape(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *y = &n->out[0];
  double c;
  if (cg_has_ref(b, y)) {
    /* A graph output has bytes of its own in its OUTPUT space. */
    if (cg_const_of(b, x, &c))
      cg_fill(b, n, NULL, cg_ref(b, y), y->type.dtype, numel(&y->type), c);
    else if (nbytes(&y->type))
      cg_copy(b, n, NULL, cg_ref(b, y), cg_ref(b, x), nbytes(&y->type));
  } else if (!cg_const_of(b, x, &c)) {
    cg_alias(b, y, cg_ref(b, x));
  }
  return true;
}

/* A kernel out[i] = x[src(i)] built by a caller-provided index: any
 * dtype, the bytes move as they are. */
static bool move_dtypes(CgBuild *b, const Node *n) { return true; }

static bool lower_transpose_expand_slice(CgBuild *b, const Node *n) {
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

static bool lower_pad(CgBuild *b, const Node *n) {
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

static bool lower_concat(CgBuild *b, const Node *n) {
  if (!move_dtypes(b, n)) return false;
  const Value *out = &n->out[0];
  const TensorType *ot = &out->type;
  if (numel(ot) == 0) return true;
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
static bool lower_gather(CgBuild *b, const Node *n) {
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
static bool lower_gather_elements(CgBuild *b, const Node *n) {
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
static bool lower_gather_nd(CgBuild *b, const Node *n) {
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
static bool lower_scatter_elements(CgBuild *b, const Node *n) {
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

static bool lower_scatter_nd(CgBuild *b, const Node *n) {
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
static bool lower_topk(CgBuild *b, const Node *n) {
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

/* ---- recurrent layers ---- */

typedef struct Rnn {
  bool lstm, bf, bias;
  int64_t N, T, H, G, dirs;
} Rnn;

/* One timestep of one layer and direction, after the two projections:
 * thread (b, j) combines the gates, updates h (and c) in place and
 * writes y.  t is a parameter so every timestep shares the text. */
static void rnn_cell(CgBuild *b, const Node *n, const Rnn *r, const char *what, int64_t t,
                     RtRef xproj, RtRef hproj, const Value *bih, const Value *bhh, RtRef h, RtRef c,
                     RtRef y) {
  int64_t N = r->N, T = r->T, H = r->H, GH = r->G * r->H;
  Kernel *k = new_kernel(b, n, "cell", what);
  TensorType space = ir_type_make(TY_F32, 2, (int64_t[]){N, H});
  Map m;
  map_begin(&m, k, &space);
  /* Every timestep's launch keeps one contract: the buffers hold all T. */
  KVar *tv = cg_kparam_range(k, "t", KT_INDEX, t, 0, T - 1);
  KExpr *bi = map_coord(&m, 0), *j = map_coord(&m, 1);
  KExpr *row = r->bf ? cg_kadd(k, cg_kmul(k, bi, cg_kint(k, T)), cg_kv(k, tv))
                     : cg_kadd(k, cg_kmul(k, cg_kv(k, tv), cg_kint(k, N)), bi);
  KVar *rowv = cg_klet(k, &m.main, "row", KT_INDEX, row);
  KBuf *xp = cg_kglobal(k, "xproj", TY_F32, T * N * GH, xproj);
  KBuf *hp = cg_kglobal(k, "hproj", TY_F32, N * GH, hproj);
  KBuf *hb = cg_kglobal(k, "h", TY_F32, N * H, h);
  /* y starts at this direction's columns: the last row ends H short of
   * the sequence's end for every direction but the last. */
  KBuf *yb = cg_kglobal(k, "y", TY_F32, T * N * r->dirs * H - (r->dirs - 1) * H, y);
  KExpr *gi[4], *gh[4];
  for (int q = 0; q < r->G; q++) {
    KExpr *col = cg_kadd(k, cg_kint(k, q * H), j);
    gi[q] = cg_kload(k, xp, cg_kadd(k, cg_kmul(k, cg_kv(k, rowv), cg_kint(k, GH)), col));
    gh[q] = cg_kload(k, hp, cg_kadd(k, cg_kmul(k, bi, cg_kint(k, GH)), col));
    if (r->bias) {
      gi[q] = cg_kop2(k, OP_ADD, gi[q], load_of(b, k, bih, "b_ih", col));
      gh[q] = cg_kop2(k, OP_ADD, gh[q], load_of(b, k, bhh, "b_hh", col));
    }
  }
  KVar *hn;
  if (r->lstm) {
    KBuf *cb = cg_kglobal(k, "c", TY_F32, N * H, c);
    KVar *ig =
        cg_klet(k, &m.main, "ig", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[0], gh[0])));
    KVar *fg =
        cg_klet(k, &m.main, "fg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[1], gh[1])));
    KVar *gg =
        cg_klet(k, &m.main, "gg", TY_F32, cg_kop1(k, OP_TANH, cg_kop2(k, OP_ADD, gi[2], gh[2])));
    KVar *og =
        cg_klet(k, &m.main, "og", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[3], gh[3])));
    KExpr *cn = cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, cg_kv(k, fg), cg_kload(k, cb, m.i)),
                        cg_kop2(k, OP_MUL, cg_kv(k, ig), cg_kv(k, gg)));
    KVar *cv = cg_klet(k, &m.main, "cn", TY_F32, cn);
    cg_kstore(k, &m.main, cb, m.i, cg_kv(k, cv));
    hn = cg_klet(k, &m.main, "hn", TY_F32,
                 cg_kop2(k, OP_MUL, cg_kv(k, og), cg_kop1(k, OP_TANH, cg_kv(k, cv))));
  } else {
    KVar *rg =
        cg_klet(k, &m.main, "rg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[0], gh[0])));
    KVar *zg =
        cg_klet(k, &m.main, "zg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[1], gh[1])));
    KVar *ng = cg_klet(
        k, &m.main, "ng", TY_F32,
        cg_kop1(k, OP_TANH, cg_kop2(k, OP_ADD, gi[2], cg_kop2(k, OP_MUL, cg_kv(k, rg), gh[2]))));
    KExpr *keep = cg_kop2(k, OP_MUL, cg_kv(k, zg), cg_kload(k, hb, m.i));
    KExpr *upd =
        cg_kop2(k, OP_MUL, cg_kop2(k, OP_SUB, cg_kimm(k, 1, TY_F32), cg_kv(k, zg)), cg_kv(k, ng));
    hn = cg_klet(k, &m.main, "hn", TY_F32, cg_kop2(k, OP_ADD, upd, keep));
  }
  cg_kstore(k, &m.main, hb, m.i, cg_kv(k, hn));
  cg_kstore(k, &m.main, yb, cg_kadd(k, cg_kmul(k, cg_kv(k, rowv), cg_kint(k, r->dirs * H)), j),
            cg_kv(k, hn));
  map_end(&m);
  cg_launch(b, k);
}

/* Per layer and direction: one GEMM projects every timestep's input
 * (x @ W_ih^T); then per timestep a GEMM h @ W_hh^T and the cell kernel.
 * h and c live in the h_n / c_n results themselves, so the last state
 * needs no copy.  Every layer's sequence has the caller's layout. */
static bool lower_rnn(CgBuild *b, const Node *n) {
  /* f32 only: the precision pass keeps recurrent layers in f32. */
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->type.dtype != TY_F32) return unsupported(b, n, n->in[i]->type.dtype);
  Arena *ar = &cg_build_ctx(b)->arena;
  Rnn r = {.lstm = n->op == OP_LSTM,
           .bf = ir_attr_int(n, "batch_first") != 0,
           .bias = ir_attr_int(n, "bias") != 0,
           .H = ir_attr_int(n, "hidden"),
           .dirs = ir_attr_int(n, "bidirectional") ? 2 : 1};
  r.G = r.lstm ? 4 : 3;
  int64_t layers = ir_attr_int(n, "layers");
  const Value *x = n->in[0];
  r.N = r.bf ? x->type.dims[0] : x->type.dims[1];
  r.T = r.bf ? x->type.dims[1] : x->type.dims[0];
  int64_t N = r.N, T = r.T, H = r.H, GH = r.G * r.H, rows = T * N;
  int per = r.bias ? 4 : 2;
  RtRef hn = cg_ref(b, &n->out[1]), cn = r.lstm ? cg_ref(b, &n->out[2]) : hn;
  RtRef in = cg_ref(b, x), yfinal = cg_ref(b, &n->out[0]);
  int64_t feat = x->type.dims[2];
  for (int64_t l = 0; l < layers; l++) {
    RtRef seq =
        l == layers - 1 ? yfinal : cg_scratch(b, n, (uint64_t)(rows * r.dirs * H) * F32_BYTES);
    for (int64_t d = 0; d < r.dirs; d++) {
      const Value *const *wt = (const Value *const *)n->in + 1 + (l * r.dirs + d) * per;
      const char *ld = arena_printf(ar, "l%" PRId64 " d%" PRId64, l, d);
      uint64_t state = (uint64_t)((l * r.dirs + d) * N * H) * F32_BYTES;
      RtRef h = cg_ref_at(hn, state), c = cg_ref_at(cn, state);
      cg_fill(b, n, arena_printf(ar, "%s h0", ld), h, TY_F32, N * H, 0.0);
      if (r.lstm) cg_fill(b, n, arena_printf(ar, "%s c0", ld), c, TY_F32, N * H, 0.0);
      if (rows == 0) continue;
      RtRef xproj = cg_scratch(b, n, (uint64_t)(rows * GH) * F32_BYTES);
      RtRef hproj = cg_scratch(b, n, (uint64_t)(N * GH) * F32_BYTES);
      RtGemm g = gemm_f32(rows, GH, feat);
      g.trans_b = 1, g.ldb = feat;
      g.a = in, g.b = cg_ref(b, wt[0]), g.c = xproj;
      emit_gemm(b, n, arena_printf(ar, "%s input", ld), &g);
      for (int64_t s = 0; s < T; s++) {
        int64_t t = d == 0 ? s : T - 1 - s;
        RtGemm gh = gemm_f32(N, GH, H);
        gh.trans_b = 1, gh.ldb = H;
        gh.a = h, gh.b = cg_ref(b, wt[1]), gh.c = hproj;
        emit_gemm(b, n, arena_printf(ar, "%s t%" PRId64 " hidden", ld, t), &gh);
        rnn_cell(b, n, &r, arena_printf(ar, "%s t%" PRId64 " cell", ld, t), t, xproj, hproj,
                 r.bias ? wt[2] : NULL, r.bias ? wt[3] : NULL, h, c,
                 cg_ref_at(seq, (uint64_t)(d * H) * F32_BYTES));
      }
    }
    in = seq;
    feat = r.dirs * H;
  }
  return true;
}

/* ---- dispatch ---- */

/* f64 kernels are the loop nests of elementwise ops, reductions and
 * data movement (each op in double, as emit_cuda spells it); matrix
 * products, windows and the other opaque ops have f32/f16 kernels or
 * cuBLAS calls only. */
static bool f64_lowered(CgBuild *b, const Node *n) {
  OpClass cls = ir_ops[n->op].cls;
  if (n->op == OP_BITCAST) return true;
  bool rows = n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX || n->op == OP_LAYERNORM || n->op == OP_RMS_NORM ||
              n->op == OP_GROUP_NORM; /* their rows are computed in f32 */
  if (!rows && (cls == K_SOURCE || cls == K_ELEMWISE || cls == K_REDUCE || cls == K_MOVE)) return true;
  for (int i = 0; i < n->n_in + n->n_out; i++)
    if ((i < n->n_in ? n->in[i]->type.dtype : n->out[i - n->n_in].type.dtype) == TY_F64)
      return unsupported(b, n, TY_F64);
  return true;
}

bool cg_lower_node(CgBuild *b, const Node *n) {
  if (!f64_lowered(b, n)) return false;
  switch (n->op) {
    case OP_INPUT:
    case OP_PARAM: return true;
    case OP_CONST:
      /* Folded into consumers; an output gets its bytes filled. */
      if (cg_has_ref(b, &n->out[0]))
        cg_fill(b, n, NULL, cg_ref(b, &n->out[0]), n->out[0].type.dtype, numel(&n->out[0].type),
                ir_attr_float(n, "value"));
      return true;
    case OP_NEG:
    case OP_ABS:
    case OP_RELU:
    case OP_LEAKY_RELU:
    case OP_CLIP:
    case OP_SIGMOID:
    case OP_TANH:
    case OP_GELU:
    case OP_SILU:
    case OP_HARDSIGMOID:
    case OP_HARDSWISH:
    case OP_EXP:
    case OP_LOG:
    case OP_SQRT:
    case OP_RSQRT:
    case OP_ERF:
    case OP_RECIPROCAL:
    case OP_SIN:
    case OP_COS:
    case OP_ROUND:
    case OP_FLOOR:
    case OP_CEIL:
    case OP_FP_ROUND:
    case OP_SIGN:
    case OP_TAN:
    case OP_ASIN:
    case OP_ACOS:
    case OP_ATAN:
    case OP_SINH:
    case OP_COSH:
    case OP_ASINH:
    case OP_ACOSH:
    case OP_ATANH:
    case OP_CAST:
    case OP_QUANTIZE:
    case OP_DEQUANTIZE:
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_POW:
    case OP_MAXIMUM:
    case OP_MINIMUM:
    case OP_MOD:
    case OP_EQ:
    case OP_NE:
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
    case OP_BIT_AND:
    case OP_BIT_OR:
    case OP_BIT_XOR:
    case OP_BIT_NOT:
    case OP_SHL:
    case OP_SHR:
    case OP_EQUAL:
    case OP_NOT_EQUAL:
    case OP_LESS:
    case OP_LESS_EQUAL:
    case OP_GREATER:
    case OP_GREATER_EQUAL:
    case OP_ISNAN:
    case OP_ISINF:
    case OP_LOGICAL_NOT:
    case OP_LOGICAL_AND:
    case OP_LOGICAL_OR:
    case OP_LOGICAL_XOR:
    case OP_WHERE:
    case OP_BITCAST: return lower_elementwise(b, n);
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_REDUCE_PROD:
    case OP_ARGMAX:
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM:
    case OP_GLOBAL_AVGPOOL: return cg_lower_rows(b, n);
    case OP_BATCHNORM: return lower_batchnorm(b, n);
    case OP_MATMUL: return lower_matmul(b, n);
    case OP_LINEAR: return lower_linear(b, n);
    case OP_CONV2D:
    case OP_CONV3D: return lower_conv(b, n);
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D: return lower_conv_transpose(b, n);
    case OP_RESIZE: return lower_resize(b, n);
    case OP_GRID_SAMPLE: return lower_grid_sample(b, n);
    case OP_ATTENTION: return cg_lower_attention(b, n);
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D: return lower_pool(b, n);
    case OP_RESHAPE: return lower_reshape(b, n);
    case OP_TRANSPOSE:
    case OP_EXPAND:
    case OP_SLICE: return lower_transpose_expand_slice(b, n);
    case OP_CONCAT: return lower_concat(b, n);
    case OP_PAD: return lower_pad(b, n);
    case OP_GATHER: return lower_gather(b, n);
    case OP_GATHER_ELEMENTS: return lower_gather_elements(b, n);
    case OP_GATHER_ND: return lower_gather_nd(b, n);
    case OP_SCATTER_ELEMENTS: return lower_scatter_elements(b, n);
    case OP_SCATTER_ND: return lower_scatter_nd(b, n);
    case OP_TOPK: return lower_topk(b, n);
    case OP_IOTA: return lower_iota(b, n);
    case OP_LSTM:
    case OP_GRU: return lower_rnn(b, n);
    case OP_CONV_WEIGHT_GRAD:
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD:
    case OP_EMBEDDING_GRAD:
    case OP_DROPOUT:
    case OP_RESIZE_GRAD:
    case OP_OPTIM_UPDATE: return cg_lower_train(b, n);
    case OP_ALLREDUCE_MEAN:
      if (n->in[0]->type.dtype != TY_F32) {
        diag_error(cg_build_ctx(b), n->loc, "allreduce_mean supports f32 only, got %s",
                   ir_dtype_name(n->in[0]->type.dtype));
        return false;
      }
      cg_allreduce(b, n, cg_ref(b, &n->out[0]), cg_ref(b, n->in[0]), nbytes(&n->out[0].type));
      return true;
    case OP_COUNT: break;
  }
  dl_unreachable(cg_build_ctx(b));
}
