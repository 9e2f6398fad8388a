/* Lowering of graph nodes to kernels and GEMM steps: takes one node of a
 * verified graph, appends what computes it to the plan being built
 * (kernel.h's CgBuild interface).  No fusion yet: each node becomes its
 * own kernels.  The meaning of every op is eval.c's; the comments here
 * only say how the loop nest reaches it.  This file holds the map
 * kernels (elementwise, batchnorm, iota, fill) and the dispatch on the
 * op; lower_gemm.c, lower_window.c and lower_move.c the rest. */
#include "lower.h"

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

/* check (ops.def): x copied; the element-0 thread reports a false
 * condition (RT_STATUS_CHECK), also when x is empty. */
static bool lower_check(CgBuild *b, const Node *n) {
  const Value *out = &n->out[0];
  int64_t count = numel(&out->type);
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, "check", "check");
  TensorType space = flat(TY_I64, count ? count : 1);
  Map m;
  map_begin(&m, k, &space);
  if (count) cg_store_at(b, k, &m.main, out, m.i, load_in(b, k, &m.main, n->in[0], "x", m.i));
  KExpr *ok = cg_kcast(k, load_in(b, k, &m.main, n->in[1], "ok", cg_kint(k, 0)), TY_I64);
  KExpr *bad = cg_kand(k, cg_kcmp(k, KC_EQ, m.i, cg_kint(k, 0)), cg_kcmp(k, KC_EQ, ok, cg_kimm(k, 0, TY_I64)));
  KBuf *reports = cg_kglobal(k, "reports", TY_I64, RT_STATUS_WORDS, cg_status(b, 1));
  KBlock *report = &cg_kif(k, &m.main, bad)->body;
  const int64_t words[RT_STATUS_WORDS] = {1, 0, RT_STATUS_CHECK, 0};
  for (int w = 0; w < RT_STATUS_WORDS; w++)
    cg_kstore(k, report, reports, cg_kint(k, w), cg_kimm(k, (double)words[w], TY_I64));
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- elementwise ---- */

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
  bool quant = is_quant(n->op), logic = ir_op_is_logic(n->op);
  bool int_ok = quant || logic || ir_op_takes_ints(n->op);
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

/* ---- dispatch ---- */

/* f64 kernels are the loop nests of elementwise ops, reductions,
 * softmax/log_softmax and data movement (each op in double, as emit_cuda
 * spells it), and matrix products as a kernel of ours (lower_gemm.c);
 * windows, the normalizations and the other opaque ops have f32/f16
 * kernels or cuBLAS calls only. */
static bool f64_lowered(CgBuild *b, const Node *n) {
  OpClass cls = ir_ops[n->op].cls;
  if (n->op == OP_BITCAST || n->op == OP_MATMUL || n->op == OP_LINEAR) return true;
  bool rows = n->op == OP_LAYERNORM || n->op == OP_RMS_NORM || n->op == OP_GROUP_NORM; /* rows in f32 */
  if (!rows && (cls == K_SOURCE || cls == K_ELEMWISE || cls == K_REDUCE || cls == K_MOVE)) return true;
  for (int i = 0; i < n->n_in + n->n_out; i++)
    if ((i < n->n_in ? n->in[i]->type.dtype : n->out[i - n->n_in].type.dtype) == TY_F64)
      return unsupported(b, n, TY_F64);
  return true;
}

/* The ops one map kernel computes (lower_elementwise): ops.def's
 * elementwise class but batchnorm, and bitcast (opaque to fusion). */
static bool is_map_op(OpKind op) {
  return (ir_ops[op].cls == K_ELEMWISE && op != OP_BATCHNORM) || op == OP_BITCAST;
}

bool cg_lower_node(CgBuild *b, const Node *n) {
  if (!f64_lowered(b, n)) return false;
  if (is_map_op(n->op)) return lower_elementwise(b, n);
  switch (n->op) {
    case OP_INPUT:
    case OP_PARAM: return true;
    case OP_CONST:
      /* Folded into consumers; an output gets its bytes filled. */
      if (cg_has_ref(b, &n->out[0]))
        cg_fill(b, n, NULL, cg_ref(b, &n->out[0]), n->out[0].type.dtype, numel(&n->out[0].type),
                ir_attr_float(n, "value"));
      return true;
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
    case OP_GLOBAL_AVGPOOL:
    case OP_XENT:
    case OP_XENT_GRAD:
    case OP_XENT_BOTH: return cg_lower_rows(b, n);
    case OP_BATCHNORM: return lower_batchnorm(b, n);
    case OP_MATMUL: return lower_matmul(b, n);
    case OP_LINEAR: return lower_linear(b, n);
    case OP_CONV2D:
    case OP_CONV3D: return lower_conv(b, n);
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D: return lower_conv_transpose(b, n);
    case OP_RESIZE: return lower_resize(b, n);
    case OP_GRID_SAMPLE: return lower_grid_sample(b, n);
    case OP_ATTENTION:
    case OP_ATTENTION_LSE: return cg_lower_attention(b, n);
    case OP_ATTENTION_GRAD: return cg_lower_attention_grad(b, n);
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
    case OP_NONZERO: return lower_nonzero(b, n);
    case OP_NMS: return lower_nms(b, n);
    case OP_UNIQUE: return lower_unique(b, n);
    case OP_IOTA: return lower_iota(b, n);
    case OP_CHECK: return lower_check(b, n);
    case OP_LOOP_BEGIN:
    case OP_LOOP_END: return cg_lower_loop(b, n);
    case OP_LSTM:
    case OP_GRU: return lower_rnn(b, n);
    case OP_LSTM_BPTT:
    case OP_GRU_BPTT: return lower_bptt(b, n);
    case OP_CONV_WEIGHT_GRAD:
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD:
    case OP_EMBEDDING_GRAD:
    case OP_DROPOUT:
    case OP_RANDOM_UNIFORM:
    case OP_RESIZE_GRAD:
    case OP_OPTIM_UPDATE: return cg_lower_train(b, n);
    case OP_TP_COPY: /* the identity forward: its gradient is the point */
    case OP_STAGE:   /* simplify removes it; -O0 keeps it */
      cg_copy(b, n, NULL, cg_ref(b, &n->out[0]), cg_ref(b, n->in[0]), nbytes(&n->out[0].type));
      return true;
    case OP_ALLREDUCE_MEAN:
    case OP_ALLREDUCE_SUM:
      if (n->in[0]->type.dtype != TY_F32) {
        diag_error(cg_build_ctx(b), n->loc, "%s supports f32 only, got %s", ir_ops[n->op].name,
                   ir_dtype_name(n->in[0]->type.dtype));
        return false;
      }
      cg_allreduce(b, n, cg_ref(b, &n->out[0]), cg_ref(b, n->in[0]), nbytes(&n->out[0].type));
      return true;
    default: break;
  }
  dl_unreachable(cg_build_ctx(b));
}
