/* Lowering of matrix products: takes a matmul, linear (alone or with its
 * fused epilogue) node, appends cuBLAS/CPU GEMM steps, int8 GEMM kernels
 * and the kernels around them to the plan (recurrent layers: lower_rnn.c). */
#include "lower.h"

/* ---- matrix products ---- */

/* Floats throughout, or int8 operands with an int32 result and bias:
 * eval.c's exact integer product. */
static bool is_int8_product(const Node *n) {
  if (n->in[0]->type.dtype != TY_I8 || n->in[1]->type.dtype != TY_I8 || n->out[0].type.dtype != TY_I32)
    return false;
  return n->n_in < 3 || n->in[2]->type.dtype == TY_I32;
}

bool product_dtypes(CgBuild *b, const Node *n) {
  return is_int8_product(n) || check_dtypes(b, n, false);
}

/* dt the operands' dtype: f32, f16 or bf16 inputs and result (the same
 * dtype codes), f32 accumulation; or i8 (RT_DT_I8): i8 inputs, an i32
 * result, exact int32 accumulation. */
RtGemm gemm_of(DType dt, int64_t m, int64_t nn, int64_t k) {
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

static DType gemm_c_dtype(const RtGemm *g) { return g->dtype == RT_DT_I8 ? TY_I32 : (DType)g->dtype; }

/* Whether g adds a C read from bytes other than its own (a residual). */
static bool reads_c_apart(const RtGemm *g) {
  return g->beta != 0.0f &&
         (g->c_in.space != g->c.space || g->c_in.index != g->c.index || g->c_in.offset != g->c.offset);
}

/* cuBLAS's int8 GEMM (cublasGemmEx with CUDA_R_8I A and B, CUDA_R_32I C,
 * CUBLAS_COMPUTE_32I) takes alpha and beta of 0 or 1 only, A and B 32-bit
 * aligned and lda, ldb multiples of 4 (the cuBLAS guide on cublasGemmEx);
 * in a strided batch every matrix must start aligned.  Every space starts
 * 256-byte aligned, so the refs' offsets decide, here at compile time.
 * And B transposed, A not (cuBLAS's TN, in its column-major terms): the
 * only form that ran for every shape on the H200 (the plan's rule,
 * runtime/plan.c). */
static bool blas_takes_int8(const RtGemm *g) {
  bool ok = !g->trans_a && g->trans_b && g->lda % 4 == 0 && g->ldb % 4 == 0 && g->a.offset % 4 == 0 &&
            g->b.offset % 4 == 0;
  if (g->batch > 1) ok = ok && g->stride_a % 4 == 0 && g->stride_b % 4 == 0;
  return ok && (g->alpha == 0.0f || g->alpha == 1.0f) && (g->beta == 0.0f || g->beta == 1.0f);
}

/* A GEMM as a kernel of ours: an int8 one cuBLAS would refuse (its k
 * products summed in int32, wrapping, as eval.c), or an f64 one (summed
 * in double; the plan's GEMM step is f32/f16/bf16/int8, and a direct
 * kernel keeps f64 off cuBLAS and out of the emulator's GEMM).  One
 * thread per element of C; beta 1 adds C_in's element (C's old value,
 * or a residual's). */
static void gemm_kernel(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  DType et = g->dtype == RT_DT_I8 ? TY_I8 : (DType)g->dtype, ct = gemm_c_dtype(g);
  Kernel *k = new_kernel(b, n, et == TY_I8 ? "gemm_i8" : "gemm_f64", what ? what : "gemm");
  TensorType space = ir_type_make(ct, 3, (int64_t[]){g->batch, g->m, g->n});
  Map m;
  map_begin(&m, k, &space);
  KExpr *bi = map_coord(&m, 0), *i = map_coord(&m, 1), *j = map_coord(&m, 2);
  int64_t last = g->batch - 1;
  int64_t na = last * g->stride_a + (g->trans_a ? g->k : g->m) * g->lda;
  int64_t nb = last * g->stride_b + (g->trans_b ? g->n : g->k) * g->ldb;
  KBuf *A = cg_kglobal(k, "a", et, na, g->a), *B = cg_kglobal(k, "b", et, nb, g->b);
  KBuf *C = cg_kglobal(k, "c", ct, last * g->stride_c + g->m * g->ldc, g->c);
  KVar *acc = cg_kvar(k, "acc", ct), *p = cg_kvar(k, "p", KT_INDEX);
  KStmt *red = cg_kreduce(k, &m.main, acc, cg_kimm(k, 0, ct), OP_ADD, p, cg_kint(k, g->k));
  KExpr *pv = cg_kv(k, p);
  KExpr *ai = g->trans_a ? cg_kadd(k, cg_kmul(k, pv, cg_kint(k, g->lda)), i)
                         : cg_kadd(k, cg_kmul(k, i, cg_kint(k, g->lda)), pv);
  KExpr *bj = g->trans_b ? cg_kadd(k, cg_kmul(k, j, cg_kint(k, g->ldb)), pv)
                         : cg_kadd(k, cg_kmul(k, pv, cg_kint(k, g->ldb)), j);
  ai = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_a)), ai);
  bj = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_b)), bj);
  red->value = cg_kop2(k, OP_MUL, cg_kcast(k, cg_kload(k, A, ai), ct), cg_kcast(k, cg_kload(k, B, bj), ct));
  KExpr *ci = cg_kadd(k, cg_kmul(k, bi, cg_kint(k, g->stride_c)),
                      cg_kadd(k, cg_kmul(k, i, cg_kint(k, g->ldc)), j));
  KExpr *v = cg_kv(k, acc);
  if (g->beta != 0.0f) {
    KBuf *cin = reads_c_apart(g) ? cg_kglobal(k, "c_in", ct, last * g->stride_c + g->m * g->ldc, g->c_in) : C;
    v = cg_kop2(k, OP_ADD, cg_kload(k, cin, ci), v);
  }
  cg_kstore(k, &m.main, C, ci, v);
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
 * always contiguous here); an f64 g, or an int8 g that cuBLAS cannot
 * run (any but its TN form), becomes a kernel of ours (int8 on tensor cores unless
 * --no-tensor-cores). */
void emit_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g) {
  if (g->m == 0 || g->n == 0 || g->batch == 0) return;
  if (g->k == 0) {
    /* A product over nothing is 0: C stays as it is when added to. */
    if (g->beta == 0.0f) cg_fill(b, n, what, g->c, gemm_c_dtype(g), g->batch * g->m * g->n, 0.0);
    if (g->beta != 0.0f && g->epilogue)
      dl_internal(cg_build_ctx(b), "gemm over k = 0 with beta %g and epilogue %u", (double)g->beta, g->epilogue);
    if (reads_c_apart(g))
      cg_copy(b, n, what, g->c, g->c_in, (uint64_t)(g->batch * g->m * g->n) * (uint64_t)ir_dtype_size(gemm_c_dtype(g)));
    return;
  }
  if (g->dtype == TY_F64) {
    if (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f) || g->epilogue)
      dl_internal(cg_build_ctx(b), "f64 gemm with alpha %g, beta %g, epilogue %u", (double)g->alpha,
                  (double)g->beta, g->epilogue);
    gemm_kernel(b, n, what, g);
    return;
  }
  if (g->dtype == RT_DT_I8 && !blas_takes_int8(g)) {
    if (g->alpha != 1.0f || g->beta != 0.0f)
      dl_internal(cg_build_ctx(b), "int8 gemm with alpha %g, beta %g", (double)g->alpha, (double)g->beta);
    if (cg_options(b)->no_tensor_cores)
      gemm_kernel(b, n, what, g);
    else
      gemm_i8_tc(b, n, what, g);
    return;
  }
  cg_gemm(b, n, what, g);
}

/* out[i] += bias[(i / inner) % channels], in place. */
void bias_add(CgBuild *b, const Node *n, RtRef out, int64_t total, int64_t inner,
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

bool lower_matmul(CgBuild *b, const Node *n) {
  return cg_lower_matmul_into(b, n, cg_ref(b, &n->out[0]), 0.0f);
}

static bool matmul_gemms(CgBuild *b, const Node *n, RtRef rc, RtRef cin, float beta, uint32_t epilogue, RtRef bias);

bool cg_lower_matmul_into(CgBuild *b, const Node *n, RtRef rc, float beta) {
  return matmul_gemms(b, n, rc, rc, beta, RT_EPILOGUE_NONE, (RtRef){0});
}

/* matmul n's GEMMs into rc, each adding beta times cin's matching
 * elements (laid out as rc) and with the epilogue (its bias shared by
 * every batch). */
static bool matmul_gemms(CgBuild *b, const Node *n, RtRef rc, RtRef cin, float beta, uint32_t epilogue,
                         RtRef bias) {
  if (!product_dtypes(b, n)) return false;
  TensorType at = ir_matmul_operand(n, 0), bt = ir_matmul_operand(n, 1);
  bool ta = ir_matmul_trans(n, 0), tb = ir_matmul_trans(n, 1);
  if (at.rank == 1) at = ir_type_make(at.dtype, 2, (int64_t[]){1, at.dims[0]});
  if (bt.rank == 1) bt = ir_type_make(bt.dtype, 2, (int64_t[]){bt.dims[0], 1});
  int64_t m = at.dims[at.rank - 2], k = at.dims[at.rank - 1], nn = bt.dims[bt.rank - 1];
  TensorType ab = at, bb = bt, batch = {.dtype = at.dtype};
  ab.rank -= 2;
  bb.rank -= 2;
  /* shape inference checked that the batch dims broadcast */
  (void)ir_broadcast_dims(ab.dims, ab.rank, bb.dims, bb.rank, batch.dims, &batch.rank);
  int64_t nbatch = numel(&batch), na = numel(&ab), nb = numel(&bb);
  if (nbatch * m * nn == 0) return true;
  RtRef ra = cg_ref(b, n->in[0]), rb = cg_ref(b, n->in[1]);
  DType dt = n->in[0]->type.dtype;
  /* int8 operands, an int32 C: the sizes differ */
  uint64_t es = (uint64_t)ir_dtype_size(dt), esc = (uint64_t)ir_dtype_size(n->out[0].type.dtype);
  RtGemm g = gemm_of(dt, m, nn, k);
  g.a = ra, g.b = rb, g.c = rc;
  g.beta = beta;
  if (beta != 0.0f) g.c_in = cin;
  g.epilogue = epilogue, g.bias = bias;
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
      if (beta != 0.0f) one.c_in = cg_ref_at(cin, (uint64_t)(bi * m * nn) * esc);
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
 * product (not f64: a kernel of ours) with a bias, not empty (a sum
 * over no features is the bias alone, which emit_gemm would not add to
 * its zeros). */
static bool bias_in_epilogue(const Node *n) {
  const TensorType *x = &n->in[0]->type;
  DType dt = n->out[0].type.dtype;
  return n->n_in > 2 && ir_dtype_is_float(dt) && dt != TY_F64 && x->dims[x->rank - 1] > 0 &&
         numel(&n->out[0].type) > 0;
}

static double product_flops(const Node *lin) {
  const TensorType *x = &lin->in[0]->type;
  return 2.0 * (double)ir_type_numel(&lin->out[0].type) * (double)x->dims[x->rank - 1];
}

/* Whether member i of bt has a kernel after the GEMM: its group's, or
 * the int8 bias's. */
static bool has_kernel_after(const CgGemmBatch *bt, int i) {
  const Node *lin = bt->lin[i];
  return lin->group >= 0 ? bt->c[i] == &lin->out[0] : lin->n_in > 2 && !bt->epilogue;
}

/* When n is a member of a batch (gemm_batch.c): the batch's one GEMM,
 * at its first member, and true; false for any other linear.  The FLOPs
 * of the others' products go with the GEMM's step (plan_cost.c): all
 * they cost when they have no kernel after it. */
static bool emit_gemm_batch(CgBuild *b, const Node *n) {
  CgGemmBatch *bt = cg_gemm_batch_of(b, n);
  if (!bt) return false;
  int self = 0;
  while (bt->lin[self] != n) self++;
  if (bt->emitted) {
    if (has_kernel_after(bt, self)) cg_note_elsewhere(b, product_flops(n));
    return true;
  }
  bt->emitted = true;
  for (int i = 0; i < bt->n; i++) {
    const Node *lin = bt->lin[i];
    if (i == self) continue;
    if (has_kernel_after(bt, i))
      cg_note_elsewhere(b, -product_flops(lin));
    else
      cg_note_elsewhere(b, -ir_cost(lin).flops - (bt->c[i] != &lin->out[0] ? ir_cost(bt->c[i]->def).flops : 0));
  }
  const Node *first = bt->lin[0];
  RtGemm g = linear_gemm(b, first, cg_ref(b, bt->c[0]));
  g.b = bt->stride_b ? bt->w : cg_ref(b, first->in[1]);
  g.batch = bt->n;
  g.stride_a = 0, g.stride_b = bt->stride_b, g.stride_c = bt->stride_c;
  if (bt->epilogue) {
    g.epilogue = bt->epilogue, g.stride_bias = bt->stride_bias;
    g.bias = bt->stride_bias ? bt->bias : cg_ref(b, first->in[2]);
  }
  Ctx *c = cg_build_ctx(b);
  const char *with = "with";
  for (int i = 1; i < bt->n; i++) with = arena_printf(&c->arena, "%s %%%d", with, bt->lin[i]->out[0].id);
  emit_gemm(b, n, with, &g);
  return true;
}

bool lower_linear(CgBuild *b, const Node *n) {
  if (!product_dtypes(b, n)) return false;
  const Value *out = &n->out[0];
  int64_t total = numel(&out->type), outf = n->in[1]->type.dims[0];
  if (total == 0) return true;
  RtRef rc = cg_ref(b, out);
  RtGemm g = linear_gemm(b, n, rc);
  /* In a fusion group the group's kernel adds the bias where it reads. */
  if (n->group < 0 && bias_in_epilogue(n)) g.epilogue = RT_EPILOGUE_BIAS, g.bias = cg_ref(b, n->in[2]);
  if (!emit_gemm_batch(b, n)) emit_gemm(b, n, NULL, &g);
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

/* add(p, bias) of grp, p a float matmul of matrices (not vectors) that
 * sums over something, bias stored and n values along p's last axis
 * (ones elsewhere): p, with the bias in *bias; else NULL.  Not f64: its
 * product is a kernel of ours, which takes no epilogue. */
static const Node *matmul_plus_bias(const CgGroup *grp, const Node *add, const Value **bias) {
  if (add->op != OP_ADD) return NULL;
  for (int i = 0; i < 2; i++) {
    const Node *p = add->in[i]->def;
    const Value *v = add->in[1 - i], *u = v;
    if (p->op != OP_MATMUL || p->group != grp->id || !ir_type_eq(&p->out[0].type, &add->out[0].type)) continue;
    const TensorType *pt = &p->out[0].type, *vt = &v->type, *at = &p->in[0]->type;
    int64_t nn = pt->dims[pt->rank - 1], k = ir_matmul_trans(p, 0) ? at->dims[at->rank - 2] : at->dims[at->rank - 1];
    if (!ir_dtype_is_float(pt->dtype) || pt->dtype == TY_F64 || pt->dtype != at->dtype || at->rank < 2 || p->in[1]->type.rank < 2 ||
        vt->dtype != pt->dtype || vt->rank < 1 || vt->dims[vt->rank - 1] != nn || numel(vt) != nn || k == 0 ||
        numel(pt) == 0)
      continue;
    while (u->def->op == OP_RESHAPE) u = u->def->in[0];
    if (u->def->op == OP_CONST) continue;
    *bias = v;
    return p;
  }
  return NULL;
}

uint32_t cg_gemm_epilogue_of(const CgGroup *grp, const Node **product, const Value **bias) {
  const Node *act = grp->root, *in = act->n_in == 1 ? act->in[0]->def : NULL;
  if (grp->attention) return RT_EPILOGUE_NONE;
  DType dt = act->out[0].type.dtype;
  if (grp->n == 2 && in && in->op == OP_LINEAR && in->group == grp->id && bias_in_epilogue(in) &&
      in->out[0].type.dtype == dt) {
    *product = in;
    *bias = in->in[2];
    return activation_epilogue(act, dt);
  }
  if (grp->n == 2 && (*product = matmul_plus_bias(grp, act, bias))) return RT_EPILOGUE_BIAS;
  if (grp->n == 3 && in && in->group == grp->id && in->out[0].type.dtype == dt &&
      (*product = matmul_plus_bias(grp, in, bias)))
    return activation_epilogue(act, dt);
  return RT_EPILOGUE_NONE;
}

bool cg_lower_gemm_epilogue(CgBuild *b, const CgGroup *grp) {
  const Node *act = grp->root, *lin = NULL;
  const Value *bias = NULL;
  uint32_t e = cg_gemm_epilogue_of(grp, &lin, &bias);
  if (!e) return false;
  if (lin->op == OP_MATMUL) return matmul_gemms(b, lin, cg_ref(b, &act->out[0]), (RtRef){0}, 0.0f, e, cg_ref(b, bias));
  if (emit_gemm_batch(b, lin)) return true;
  RtGemm g = linear_gemm(b, lin, cg_ref(b, &act->out[0]));
  g.epilogue = e;
  g.bias = cg_ref(b, lin->in[2]);
  emit_gemm(b, act, arena_printf(&cg_build_ctx(b)->arena, "#k%d", grp->id), &g);
  return true;
}

/* ---- a residual added by the GEMM ---- */

/* Whether r can be the GEMM's C beside its D: exactly the root's type
 * (no broadcast), and stored before the group runs (no member of it,
 * no const the GEMM would need filled first). */
static bool stored_residual(CgBuild *b, const CgGroup *grp, const Value *r) {
  return ir_type_eq(&r->type, &grp->root->out[0].type) && r->def->group != grp->id && cg_has_ref(b, r);
}

/* A product of matrices that sums over something, in the dtype of its
 * result, whose GEMM is its own (not part of a batch of linears). */
static bool plain_product(CgBuild *b, const Node *p, DType dt) {
  if (p->op != OP_LINEAR && p->op != OP_MATMUL) return false;
  if (p->in[0]->type.dtype != dt || p->in[1]->type.dtype != dt || p->out[0].type.dtype != dt) return false;
  const TensorType *at = &p->in[0]->type;
  if (p->op == OP_LINEAR)
    return at->dims[at->rank - 1] > 0 && (p->n_in < 3 || bias_in_epilogue(p)) && !cg_gemm_batch_of(b, p);
  if (at->rank < 2 || p->in[1]->type.rank < 2) return false;
  return (ir_matmul_trans(p, 0) ? at->dims[at->rank - 2] : at->dims[at->rank - 1]) > 0;
}

/* The group residual + (product [+ bias]) with nothing between: its root
 * an add of a stored value of the root's type (stored_residual) and a
 * linear (its bias, if any, in cuBLASLt's BIAS epilogue), a matmul, or a
 * matmul plus a bias (matmul_plus_bias).  cuBLASLt adds beta * C before
 * the epilogue's activation, so an activation between the product and
 * the add never maps.  Returns the product, the residual in *res and the
 * bias or NULL in *bias; NULL for any other group. */
static const Node *residual_product(CgBuild *b, const CgGroup *grp, const Value **res, const Value **bias) {
  const Node *add = grp->root;
  DType dt = add->out[0].type.dtype;
  if (add->op != OP_ADD || grp->anchor || grp->attention || grp->n_side || grp->n_siblings ||
      (dt != TY_F32 && dt != TY_F16 && dt != TY_BF16 && dt != TY_F64))
    return NULL;
  for (int i = 0; i < 2; i++) {
    const Node *p = add->in[i]->def;
    if (p->group != grp->id || !ir_type_eq(&p->out[0].type, &add->out[0].type) ||
        !stored_residual(b, grp, add->in[1 - i]))
      continue;
    *res = add->in[1 - i];
    *bias = NULL;
    if (grp->n == 2 && plain_product(b, p, dt)) {
      if (p->op == OP_LINEAR && p->n_in > 2) *bias = p->in[2];
      return p;
    }
    const Node *mm = grp->n == 3 ? matmul_plus_bias(grp, p, bias) : NULL;
    if (mm) return mm;
  }
  return NULL;
}

bool cg_lower_gemm_residual(CgBuild *b, const CgGroup *grp) {
  const Value *res = NULL, *bias = NULL;
  const Node *p = residual_product(b, grp, &res, &bias);
  if (!p) return false;
  const Node *add = grp->root;
  RtRef rc = cg_ref(b, &add->out[0]), rr = cg_ref(b, res), rbias = bias ? cg_ref(b, bias) : (RtRef){0};
  uint32_t e = bias ? RT_EPILOGUE_BIAS : RT_EPILOGUE_NONE;
  if (p->op == OP_MATMUL) return matmul_gemms(b, p, rc, rr, 1.0f, e, rbias);
  RtGemm g = linear_gemm(b, p, rc);
  g.beta = 1.0f, g.c_in = rr;
  g.epilogue = e, g.bias = rbias;
  emit_gemm(b, add, arena_printf(&cg_build_ctx(b)->arena, "#k%d", grp->id), &g);
  return true;
}
