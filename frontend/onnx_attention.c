/* ONNX's Attention (opsets 23 to 25): takes Q, K, V, the optional mask,
 * past key and value and nonpad_kv_seqlen, returns Y, present_key,
 * present_value and qk_matmul_output, written as the op's unfused graph
 * (matmuls, scale, masks, softmax, matmul) as ONNX's reference computes
 * it, or, where the node asks for nothing the attention op lacks, as
 * that one op (codegen/attention.c: no score matrix in memory). */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

typedef struct Attn {
  Val *q, *k, *v, *mask, *past_k, *past_v, *nonpad;
  Val *sink; /* [heads] logits that join every row's softmax (onnxruntime's head_sink) */
  int64_t q_heads, kv_heads; /* for 3-d inputs; 0: 4-d */
  bool causal, has_scale;
  double scale, softcap;
  int64_t mode;      /* qk_matmul_output_mode */
  DType softmax_dt;  /* softmax_precision */
  int64_t left, right; /* sliding window (-1: unbounded) */
} Attn;

typedef struct AttnOut {
  Val *y, *present_k, *present_v, *qk;
} AttnOut;

/* [B, L, heads * H] -> [B, heads, L, H]. */
static Val *split_heads(Imp *im, Val *x, int64_t heads, const char *what) {
  if (!x) return NULL;
  const int64_t *d = x->type.dims;
  if (heads < 1 || d[2] % heads != 0) {
    ox_bad(im, "%s's hidden size %" PRId64 " is not a multiple of %" PRId64 " heads", what, d[2], heads);
    return NULL;
  }
  static const int64_t perm[4] = {0, 2, 1, 3};
  return ox_transpose(im, ox_reshape(im, x, 4, (int64_t[]){d[0], d[1], heads, d[2] / heads}), perm);
}

/* A known [L, S] tensor of x's dtype: 0 where allowed(i, j), else -inf. */
static Val *known_bias(Imp *im, DType dt, int64_t L, int64_t S, int64_t offset, int64_t left, int64_t right,
                       bool causal) {
  TensorType t = ir_type_make(dt, 2, (int64_t[]){L, S});
  Val *b = ox_known_new(im, &t);
  for (int64_t i = 0; i < L; i++)
    for (int64_t j = 0; j < S; j++) {
      int64_t diff = i + offset - j;
      bool ok = (!causal || diff >= 0) && (left < 0 || diff <= left) && (right < 0 || -diff <= right);
      ir_tensor_set(b->k, i * S + j, ok ? 0 : -INFINITY);
    }
  return b;
}

/* The same with a per-batch offset computed at run time (nonpad_kv_seqlen
 * - L): i - j is a known [L, S], plus the offsets [B, 1, 1, 1]. */
static Val *batch_bias(Imp *im, DType dt, Val *offset, int64_t L, int64_t S, int64_t left, int64_t right,
                       bool causal) {
  TensorType t = ir_type_make(TY_I64, 2, (int64_t[]){L, S});
  Val *e = ox_known_new(im, &t);
  for (int64_t i = 0; i < L; i++)
    for (int64_t j = 0; j < S; j++) ((int64_t *)e->k->data)[i * S + j] = i - j;
  Val *diff = ox_op2(im, OP_ADD, e, offset), *ok = NULL;
  if (causal) ok = ox_op2s(im, OP_GREATER_EQUAL, diff, 0);
  if (left >= 0) {
    Val *w = ox_op2s(im, OP_LESS_EQUAL, diff, (double)left);
    ok = ok ? ox_op2(im, OP_LOGICAL_AND, ok, w) : w;
  }
  if (right >= 0) {
    Val *w = ox_op2s(im, OP_GREATER_EQUAL, diff, (double)-right);
    ok = ok ? ox_op2(im, OP_LOGICAL_AND, ok, w) : w;
  }
  return ox_where(im, ok, ox_scalar(im, 0, dt), ox_scalar(im, -INFINITY, dt));
}

/* The additive bias [.., L, S] of the mask, the causal and window
 * frontiers and the padding of nonpad_kv_seqlen; NULL when there is none. */
static Val *attention_bias(Imp *im, const Attn *a, DType dt, int64_t B, int64_t L, int64_t S, int64_t past) {
  Val *bias = NULL, *zero = ox_scalar(im, 0, dt), *ninf = ox_scalar(im, -INFINITY, dt);
  if (a->mask) {
    Val *m = a->mask;
    int r = m->type.rank;
    int64_t last = r ? m->type.dims[r - 1] : 1;
    if (m->type.dtype == TY_BOOL) m = ox_where(im, m, zero, ninf);
    else m = ox_cast(im, m, dt);
    if (r && last < S) { /* a shorter mask is padded with -inf */
      int64_t pads[2 * DL_MAX_RANK] = {0};
      pads[2 * r - 1] = S - last;
      Emit e;
      Node *p = ox_begin(im, &e, OP_PAD, 1, &m);
      ir_set_ints(im->g, p, "pads", 2 * r, pads);
      ir_set_float(im->g, p, "value", -INFINITY);
      m = ox_emit1(im, &e);
    }
    bias = m;
  }
  bool window = a->left >= 0 || a->right >= 0;
  if (a->causal || window) {
    Val *f;
    if (a->nonpad && !a->past_k) {
      Val *off = ox_op2s(im, OP_SUB, ox_cast(im, a->nonpad, TY_I64), (double)L);
      f = batch_bias(im, dt, ox_reshape(im, off, 4, (int64_t[]){B, 1, 1, 1}), L, S, a->left, a->right,
                     a->causal);
    } else {
      f = known_bias(im, dt, L, S, past, a->left, a->right, a->causal);
    }
    bias = bias ? ox_op2(im, OP_ADD, bias, f) : f;
  }
  if (a->nonpad) {
    Val *keep = ox_op2(im, OP_LESS, ox_iota_along(im, 4, 3, S),
                       ox_reshape(im, ox_cast(im, a->nonpad, TY_I64), 4, (int64_t[]){B, 1, 1, 1}));
    Val *pad = ox_where(im, keep, zero, ninf);
    bias = bias ? ox_op2(im, OP_ADD, bias, pad) : pad;
  }
  return bias;
}

/* [B, kh, S, H] -> [B, kh * reps, S, H], each head repeated in place. */
static Val *repeat_heads(Imp *im, Val *x, int64_t reps) {
  if (!x || reps == 1) return x;
  const int64_t *d = x->type.dims;
  int64_t b = d[0], h = d[1], s = d[2], e = d[3];
  Val *u = ox_reshape(im, x, 5, (int64_t[]){b, h, 1, s, e});
  return ox_reshape(im, ox_expand(im, u, 5, (int64_t[]){b, h, reps, s, e}), 4, (int64_t[]){b, h * reps, s, e});
}

static Val *softmax_last(Imp *im, Val *x) {
  if (!x) return NULL;
  Emit e;
  Node *s = ox_begin(im, &e, OP_SOFTMAX, 1, &x);
  ir_set_int(im->g, s, "axis", x->type.rank - 1);
  return ox_emit1(im, &e);
}

/* Whether the attention op computes what a asks: no soft cap, sliding
 * window, per-batch key lengths, score output or softmax precision of
 * its own; causal only without a past (the op's diagonal is top-left);
 * a mask of the keys' full length (and, the caller checks, one head size
 * for Q, K and V). */
static bool fits_op(const Attn *a, const ONode *n, DType dt, int64_t S) {
  bool qk_wanted = n->n_out > 3 && n->want[3];
  if (a->softcap > 0 || a->sink || a->left >= 0 || a->right >= 0 || a->nonpad || qk_wanted || a->softmax_dt != dt)
    return false;
  if (a->causal && a->past_k) return false;
  const TensorType *m = a->mask ? &a->mask->type : NULL;
  return !m || (m->rank >= 1 && m->dims[m->rank - 1] == S && (m->dtype == TY_BOOL || ir_dtype_is_float(m->dtype)));
}

/* The attention op on q, k and v of one dtype ([B, H, S, d], or with
 * bshd [B, S, H, d]), mask (bool or added) cast to it. */
static Val *attention_op(Imp *im, const Attn *a, Val *q, Val *k, Val *v, bool bshd) {
  Val *mask = a->mask;
  if (mask && mask->type.dtype != TY_BOOL) mask = ox_cast(im, mask, q->type.dtype);
  Val *in[4] = {q, k, v, mask};
  Emit e;
  Node *n = ox_begin(im, &e, OP_ATTENTION, mask ? 4 : 3, in);
  ir_set_int(im->g, n, "causal", a->causal);
  if (a->has_scale) ir_set_float(im->g, n, "scale", a->scale);
  if (bshd) ir_set_str(im->g, n, "layout", "bshd");
  return ox_emit1(im, &e);
}

/* 3-d Q, K and V [B, L, heads * H] without a past, nothing but Y
 * wanted: the op in layout "bshd" over their reshapes, no transposes.
 * False, with nothing built, when that does not fit. */
static bool attention_3d(Imp *im, const Attn *a, const ONode *n, AttnOut *out) {
  const int64_t *qd = a->q->type.dims, *kd = a->k->type.dims, *vd = a->v->type.dims;
  int64_t qh = a->q_heads, kh = a->kv_heads;
  bool presents = n->n_out > 1 && (n->want[1] || (n->n_out > 2 && n->want[2]));
  if (a->q->type.rank != 3 || a->past_k || presents || qh % kh || qd[2] % qh || kd[2] % kh ||
      qd[2] / qh != kd[2] / kh || vd[2] != kd[2] || !fits_op(a, n, a->q->type.dtype, kd[1]))
    return false;
  int64_t H = qd[2] / qh;
  Val *q = ox_reshape(im, a->q, 4, (int64_t[]){qd[0], qd[1], qh, H});
  Val *k = ox_reshape(im, a->k, 4, (int64_t[]){kd[0], kd[1], kh, H});
  Val *v = ox_reshape(im, a->v, 4, (int64_t[]){vd[0], vd[1], kh, H});
  Val *y = q && k && v ? attention_op(im, a, q, k, v, true) : NULL;
  out->y = ox_reshape(im, y, 3, (int64_t[]){qd[0], qd[1], qd[2]});
  return true;
}

/* The whole of Attention as ops of the IR. */
static bool attention_graph(Imp *im, const Attn *a, const ONode *n, AttnOut *out) {
  if (attention_3d(im, a, n, out)) return out->y != NULL;
  bool three = a->q->type.rank == 3;
  Val *q = a->q, *k = a->k, *v = a->v;
  if (three) {
    q = split_heads(im, q, a->q_heads, "Q");
    k = split_heads(im, k, a->kv_heads, "K");
    v = split_heads(im, v, a->kv_heads, "V");
    if (!q || !k || !v) return false;
  }
  DType dt = q->type.dtype;
  int64_t B = q->type.dims[0], qh = q->type.dims[1], L = q->type.dims[2], H = q->type.dims[3];
  int64_t past = 0;
  if (a->past_k) {
    past = a->past_k->type.dims[2];
    k = ox_concat(im, 2, (Val *[]){a->past_k, k}, 2);
    v = ox_concat(im, 2, (Val *[]){a->past_v, v}, 2);
    if (!k || !v) return false;
  }
  out->present_k = k, out->present_v = v;
  int64_t kh = k->type.dims[1], S = k->type.dims[2];
  if (kh < 1 || qh % kh != 0 || v->type.dims[1] != kh)
    return ox_bad(im, "%" PRId64 " query heads do not group over %" PRId64 " key and %" PRId64 " value heads", qh,
                  kh, v->type.dims[1]);
  if (fits_op(a, n, dt, S) && v->type.dims[3] == H && k->type.dims[3] == H) {
    Val *y = attention_op(im, a, q, k, v, false);
    if (three && y) {
      static const int64_t back[4] = {0, 2, 1, 3};
      y = ox_reshape(im, ox_transpose(im, y, back), 3, (int64_t[]){B, L, qh * H});
    }
    out->y = y;
    return y != NULL;
  }
  /* Q and K each times sqrt(scale), as the reference and the function
   * body; a negative scale (onnxruntime's contrib ops use it as given)
   * all on Q. */
  double scale = a->has_scale ? a->scale : 1 / sqrt((double)H);
  Val *rs_q = ox_cast(im, ox_scalar(im, scale < 0 ? scale : sqrt(scale), TY_F32), dt);
  Val *rs_k = ox_cast(im, ox_scalar(im, scale < 0 ? 1 : sqrt(scale), TY_F32), dt);
  static const int64_t swap_last[4] = {0, 1, 3, 2};
  Val *kt = ox_transpose(im, ox_op2(im, OP_MUL, repeat_heads(im, k, qh / kh), rs_k), swap_last);
  Val *qk = ox_op2(im, OP_MATMUL, ox_op2(im, OP_MUL, q, rs_q), kt);
  if (a->softcap > 0) qk = ox_op2s(im, OP_MUL, ox_op1(im, OP_TANH, ox_op2s(im, OP_DIV, qk, a->softcap)), a->softcap);
  Val *bias = attention_bias(im, a, dt, B, L, S, past);
  Val *scores = bias ? ox_op2(im, OP_ADD, qk, bias) : qk;
  out->qk = a->mode == 2 ? scores : qk;
  Val *p;
  if (a->sink) {
    /* One more logit a row, the head's sink, in the softmax and then
     * dropped: it takes its share of every row's mass. */
    int64_t col[4] = {B, qh, L, 1};
    Val *sink = ox_expand(im, ox_reshape(im, ox_cast(im, a->sink, a->softmax_dt), 4, (int64_t[]){1, qh, 1, 1}), 4, col);
    Val *both[2] = {ox_cast(im, scores, a->softmax_dt), sink};
    p = ox_slice_axis(im, softmax_last(im, ox_concat(im, 2, both, 3)), 3, 0, S, 1);
  } else {
    p = softmax_last(im, ox_cast(im, scores, a->softmax_dt));
  }
  if (bias && p && !a->sink) {
    /* A row the bias masks entirely has no key: 0, not softmax's NaN. */
    Val *masked = ox_op2s(im, OP_EQUAL, ox_reduce(im, OP_REDUCE_MAX, bias, 1, (int64_t[]){bias->type.rank - 1}, true),
                          -INFINITY);
    p = ox_where(im, masked, ox_scalar(im, 0, p->type.dtype), p);
  }
  if (a->mode == 3) out->qk = p;
  out->qk = ox_cast(im, out->qk, dt);
  Val *y = ox_op2(im, OP_MATMUL, ox_cast(im, p, dt), repeat_heads(im, v, qh / kh));
  if (three && y) {
    static const int64_t back[4] = {0, 2, 1, 3};
    y = ox_reshape(im, ox_transpose(im, y, back), 3, (int64_t[]){B, L, qh * y->type.dims[3]});
  }
  out->y = y;
  return y && out->qk;
}

Val *ox_attention_3d(Imp *im, Val *q, Val *k, Val *v, int64_t heads, Val *mask, double scale, bool causal) {
  if (!q || !k || !v) return NULL;
  Attn a = {.q = q, .k = k, .v = v, .mask = mask, .q_heads = heads, .kv_heads = heads, .causal = causal,
            .has_scale = scale != 0, .scale = scale, .softmax_dt = q->type.dtype, .left = -1, .right = -1};
  ONode y_only = {.n_out = 1, .want = (const bool[]){true}};
  AttnOut out = {0};
  return attention_graph(im, &a, &y_only, &out) ? out.y : NULL;
}

Val *ox_attention_heads(Imp *im, Val *q, Val *k, Val *v, Val *bias, double scale, double softcap, Val *sink,
                        DType softmax_dt) {
  if (!q || !k || !v) return NULL;
  Attn a = {.q = q, .k = k, .v = v, .mask = bias, .sink = sink, .has_scale = scale != 0, .scale = scale,
            .softcap = softcap, .softmax_dt = softmax_dt, .left = -1, .right = -1};
  ONode y_only = {.n_out = 1, .want = (const bool[]){true}};
  AttnOut out = {0};
  return attention_graph(im, &a, &y_only, &out) ? out.y : NULL;
}

bool ox_op_attention(Imp *im, ONode *n) {
  Attn a = {.q = ox_in_req(im, n, 0), .k = ox_in_req(im, n, 1), .v = ox_in_req(im, n, 2),
            .mask = ox_in_opt(n, 3), .past_k = ox_in_opt(n, 4), .past_v = ox_in_opt(n, 5),
            .nonpad = ox_in_opt(n, 6)};
  int64_t causal, sm_prec, qh, kvh;
  if (!a.q || !a.k || !a.v || !ox_attr_int(im, "is_causal", 0, &causal) ||
      !ox_attr_int(im, "q_num_heads", 0, &qh) || !ox_attr_int(im, "kv_num_heads", 0, &kvh) ||
      !ox_attr_int(im, "qk_matmul_output_mode", 0, &a.mode) || !ox_attr_float(im, "softcap", 0, &a.softcap) ||
      !ox_attr_int(im, "softmax_precision", 0, &sm_prec) || !ox_attr_int(im, "left_window_size", -1, &a.left) ||
      !ox_attr_int(im, "right_window_size", -1, &a.right))
    return false;
  a.causal = causal != 0;
  a.has_scale = ox_find_attr(im, "scale") != NULL;
  if (!ox_attr_float(im, "scale", 1.0, &a.scale)) return false;
  a.q_heads = qh, a.kv_heads = kvh;
  int r = a.q->type.rank;
  if ((r != 3 && r != 4) || a.k->type.rank != r || a.v->type.rank != r)
    return ox_bad(im, "Q, K and V must all be 3-d or all 4-d, got ranks %d, %d and %d", r, a.k->type.rank,
                  a.v->type.rank);
  if (r == 3 && (qh < 1 || kvh < 1))
    return ox_bad(im, "3-d inputs need q_num_heads and kv_num_heads");
  if (!ox_need_float_in(im, a.q)) return false;
  if (a.k->type.dtype != a.q->type.dtype || a.v->type.dtype != a.q->type.dtype)
    return ox_bad(im, "Q, K and V must have one dtype");
  if ((a.past_k != NULL) != (a.past_v != NULL)) return ox_bad(im, "past_key and past_value go together");
  if (a.past_k && a.nonpad) return ox_bad(im, "nonpad_kv_seqlen does not combine with a past key and value");
  if (a.mode < 0 || a.mode > 3) return ox_bad(im, "qk_matmul_output_mode %" PRId64 " is invalid", a.mode);
  a.softmax_dt = a.q->type.dtype;
  if (sm_prec && !ox_dtype_from_onnx((int32_t)sm_prec, &a.softmax_dt))
    return ox_bad(im, "softmax_precision %s is not supported", ox_onnx_type_name((int32_t)sm_prec));
  if (!ir_dtype_is_float(a.softmax_dt)) return ox_bad(im, "softmax_precision must be a float type");
  if (a.mask && a.mask->type.rank > 4) return ox_bad(im, "attn_mask has rank %d, more than 4", a.mask->type.rank);
  AttnOut out = {0};
  if (!attention_graph(im, &a, n, &out)) return false;
  Val *res[4] = {out.y, out.present_k, out.present_v, out.qk};
  for (int i = 0; i < n->n_out && i < 4; i++) n->out[i] = res[i];
  return true;
}

/* ---- LinearAttention (opset 26) ---- */

enum { LINEAR_ATTN_MAX_STEPS = 1024 };

/* x [B, T, n] as [B, heads, T, n / heads] in f32, or NULL. */
static Val *heads_f32(Imp *im, Val *x, int64_t heads, const char *what) {
  return ox_widen(im, split_heads(im, x, heads, what));
}

/* The recurrence of ONNX's reference, unrolled over T (as the RNNs are):
 * per step the state [B, H_kv, d_k, d_v] decays by exp(g) (gated), the
 * value is corrected by what the state recalls of the key, times beta
 * (delta), the key's outer product with it is added, and each query
 * head reads its KV head's state (GQA) times the scale; all in f32. */
bool ox_op_linear_attention(Imp *im, ONode *n) {
  Val *q = ox_in_req(im, n, 0), *k = ox_in_req(im, n, 1), *v = ox_in_req(im, n, 2);
  Val *past = ox_in_opt(n, 3), *decay = ox_in_opt(n, 4), *beta = ox_in_opt(n, 5);
  int64_t qh, kh, chunk;
  double scale;
  const char *rule;
  if (!q || !k || !v || !ox_attr_int(im, "q_num_heads", 0, &qh) || !ox_attr_int(im, "kv_num_heads", 0, &kh) ||
      !ox_attr_int(im, "chunk_size", 64, &chunk) || !ox_attr_float(im, "scale", 0, &scale) ||
      !ox_attr_str(im, "update_rule", "gated_delta", &rule) || !ox_need_float_in(im, q))
    return false;
  bool gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
  bool delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
  if (!gated && !delta && strcmp(rule, "linear") != 0)
    return ox_bad(im, "update_rule '%s' is not supported (linear, gated, delta, gated_delta)", rule);
  if (qh <= 0 || kh <= 0 || qh % kh)
    return ox_bad(im, "q_num_heads (%" PRId64 ") must be a positive multiple of kv_num_heads (%" PRId64 ")", qh, kh);
  if (gated != (decay != NULL)) return ox_bad(im, "update_rule '%s' %s the decay input", rule, gated ? "needs" : "takes no");
  if (delta != (beta != NULL)) return ox_bad(im, "update_rule '%s' %s the beta input", rule, delta ? "needs" : "takes no");
  char ts[IR_TYPE_STR_MAX];
  Val *const qkv[3] = {q, k, v};
  for (int i = 0; i < 3; i++)
    if (qkv[i]->type.rank != 3 || qkv[i]->type.dims[0] != q->type.dims[0] || qkv[i]->type.dims[1] != q->type.dims[1])
      return ox_bad(im, "query, key and value must be [B, T, heads * D] of one B and T; %s is %s",
                    i == 0 ? "query" : i == 1 ? "key" : "value", ir_type_str(&qkv[i]->type, ts, sizeof ts));
  int64_t B = q->type.dims[0], T = q->type.dims[1];
  if (T > LINEAR_ATTN_MAX_STEPS)
    return ox_bad(im, "unrolled, this is %" PRId64 " steps, more than dlcc unrolls (%d)", T,
                  (int)LINEAR_ATTN_MAX_STEPS);
  Val *q4 = heads_f32(im, q, qh, "query"), *k4 = heads_f32(im, k, kh, "key"), *v4 = heads_f32(im, v, kh, "value");
  if (!q4 || !k4 || !v4) return false;
  int64_t dk = q4->type.dims[3], dv = v4->type.dims[3], group = qh / kh;
  if (k4->type.dims[3] != dk)
    return ox_bad(im, "key's head size %" PRId64 " differs from query's %" PRId64, k4->type.dims[3], dk);
  /* decay as [B, H_kv, T, 1 or d_k], beta as [B, H_kv or 1, T, 1] */
  Val *g4 = NULL, *b4 = NULL;
  if (decay) {
    int64_t last = decay->type.rank == 3 ? decay->type.dims[2] : -1;
    if (decay->type.rank != 3 || decay->type.dims[0] != B || decay->type.dims[1] != T ||
        (last != kh && last != kh * dk))
      return ox_bad(im, "decay %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 " or %" PRId64 "]",
                    ir_type_str(&decay->type, ts, sizeof ts), B, T, kh, kh * dk);
    g4 = heads_f32(im, decay, kh, "decay");
  }
  if (beta) {
    int64_t last = beta->type.rank == 3 ? beta->type.dims[2] : -1;
    if (beta->type.rank != 3 || beta->type.dims[0] != B || beta->type.dims[1] != T || (last != kh && last != 1))
      return ox_bad(im, "beta %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 " or 1]",
                    ir_type_str(&beta->type, ts, sizeof ts), B, T, kh);
    b4 = heads_f32(im, beta, last, "beta");
  }
  int64_t sd[4] = {B, kh, dk, dv};
  Val *state;
  DType state_dt = q->type.dtype;
  if (past) {
    if (!ox_same_dims(&past->type, 4, sd) || !ir_dtype_is_float(past->type.dtype))
      return ox_bad(im, "past_state %s must be a float [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]",
                    ir_type_str(&past->type, ts, sizeof ts), B, kh, dk, dv);
    state_dt = past->type.dtype;
    state = ox_widen(im, past);
  } else {
    TensorType zt = ir_type_make(TY_F32, 4, sd);
    state = ox_known_new(im, &zt);
  }
  double s = scale == 0 ? 1 / sqrt((double)dk) : scale;
  static const int64_t swap_last[4] = {0, 1, 3, 2};
  Val **outs = ARENA_ARRAY(&im->c->arena, Val *, T + 1);
  for (int64_t t = 0; t < T; t++) {
    Val *qt = ox_slice_axis(im, q4, 2, t, t + 1, 1), *kt = ox_slice_axis(im, k4, 2, t, t + 1, 1);
    Val *vt = ox_slice_axis(im, v4, 2, t, t + 1, 1);
    if (gated) /* [B, H, 1, 1 or d_k] -> [B, H, 1 or d_k, 1]: over d_v */
      state = ox_op2(im, OP_MUL, state, ox_transpose(im, ox_op1(im, OP_EXP, ox_slice_axis(im, g4, 2, t, t + 1, 1)),
                                                        swap_last));
    if (delta) /* beta (v - k S) */
      vt = ox_op2(im, OP_MUL, ox_slice_axis(im, b4, 2, t, t + 1, 1),
                  ox_op2(im, OP_SUB, vt, ox_op2(im, OP_MATMUL, kt, state)));
    state = ox_op2(im, OP_ADD, state, ox_op2(im, OP_MATMUL, ox_transpose(im, kt, swap_last), vt));
    /* each KV head's group of query heads reads its state */
    Val *qg = ox_reshape(im, qt, 4, (int64_t[]){B, kh, group, dk});
    Val *o = ox_op2s(im, OP_MUL, ox_op2(im, OP_MATMUL, qg, state), s);
    outs[t] = ox_reshape(im, o, 4, (int64_t[]){B, qh, 1, dv});
    if (!outs[t]) return false;
  }
  static const int64_t back[4] = {0, 2, 1, 3};
  Val *y = ox_reshape(im, ox_transpose(im, ox_concat(im, (int)T, outs, 2), back), 3, (int64_t[]){B, T, qh * dv});
  n->out[0] = ox_narrow(im, y, q->type.dtype);
  n->out[1] = ox_narrow(im, state, state_dt);
  return n->out[0] && n->out[1];
}

/* ---- FlexAttention (ai.onnx.preview) ---- */

/* mod(x) by the graph attribute `name` (one input, one output), or x
 * when the node has none; in dt. */
static Val *apply_mod(Imp *im, const char *name, Val *x, DType dt) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  if (!a || !x) return x;
  if (!a->g) {
    ox_bad(im, "attribute '%s' must be a graph", name);
    return NULL;
  }
  if (a->g->n_output != 1) {
    ox_bad(im, "%s has %zu outputs, 1 expected", name, a->g->n_output);
    return NULL;
  }
  Val *out;
  if (!ox_import_subgraph(im, a->g, name, 1, &x, &out)) return NULL;
  if (!ox_same_dims(&out->type, x->type.rank, x->type.dims)) {
    char os[IR_TYPE_STR_MAX], xs[IR_TYPE_STR_MAX];
    ox_bad(im, "%s gives %s for scores %s: it must keep their shape", name, ir_type_str(&out->type, os, sizeof os),
           ir_type_str(&x->type, xs, sizeof xs));
    return NULL;
  }
  return ox_cast(im, out, dt);
}

/* softmax(score_mod(Q K^T scale)) -> prob_mod -> times V, as the
 * preview domain's reference computes it: Q and K each times sqrt(scale)
 * in their dtype, the scores then in softmax_precision (f32 for half
 * types), K and V repeated for fewer KV heads; the mods imported as
 * subgraphs of the scores. */
bool ox_op_flex_attention(Imp *im, ONode *n) {
  Val *q = ox_in_req(im, n, 0), *k = ox_in_req(im, n, 1), *v = ox_in_req(im, n, 2);
  double scale;
  int64_t prec;
  if (!q || !k || !v || !ox_attr_float(im, "scale", 0, &scale) || !ox_attr_int(im, "softmax_precision", 0, &prec) ||
      !ox_need_float_in(im, q))
    return false;
  /* the graphs are read below */
  for (size_t i = 0; i < im->np->n_attribute; i++) {
    const char *an = im->np->attribute[i]->name;
    if (strcmp(an, "score_mod") == 0 || strcmp(an, "prob_mod") == 0) im->attr_used[i] = true;
  }
  char ts[IR_TYPE_STR_MAX];
  Val *const qkv[3] = {q, k, v};
  for (int i = 0; i < 3; i++)
    if (qkv[i]->type.rank != 4 || qkv[i]->type.dims[0] != q->type.dims[0] || qkv[i]->type.dtype != q->type.dtype)
      return ox_bad(im, "Q, K and V must be [B, heads, length, size] of one B and dtype; %s is %s", "QKV" + i,
                    ir_type_str(&qkv[i]->type, ts, sizeof ts));
  int64_t qh = q->type.dims[1], kh = k->type.dims[1], E = q->type.dims[3];
  if (v->type.dims[1] != kh || v->type.dims[2] != k->type.dims[2] || k->type.dims[3] != E || qh % kh)
    return ox_bad(im, "K and V must share heads and length, K and Q their size, and Q's heads be a multiple of K's");
  DType dt = q->type.dtype, cdt = dt == TY_F64 ? TY_F64 : TY_F32;
  if (prec && !ox_dtype_from_onnx((int32_t)prec, &cdt))
    return ox_bad(im, "softmax_precision %s is not supported", ox_onnx_type_name((int32_t)prec));
  if (!ir_dtype_is_float(cdt)) return ox_bad(im, "softmax_precision must be a float type");
  double s = scale == 0 ? 1 / sqrt((double)E) : scale;
  Val *root = ox_cast(im, ox_scalar(im, sqrtf((float)s), TY_F32), dt);
  static const int64_t swap_last[4] = {0, 1, 3, 2};
  Val *kr = repeat_heads(im, k, qh / kh), *vr = repeat_heads(im, v, qh / kh);
  Val *scores = ox_op2(im, OP_MATMUL, ox_op2(im, OP_MUL, q, root),
                       ox_transpose(im, ox_op2(im, OP_MUL, kr, root), swap_last));
  scores = apply_mod(im, "score_mod", ox_cast(im, scores, cdt), cdt);
  Val *probs = apply_mod(im, "prob_mod", softmax_last(im, scores), cdt);
  return (n->out[0] = ox_cast(im, ox_op2(im, OP_MATMUL, probs, ox_cast(im, vr, cdt)), v->type.dtype));
}
