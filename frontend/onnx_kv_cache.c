/* onnxruntime's attention ops with a key-value cache, as its LLM
 * exporters write them (domain com.microsoft): GroupQueryAttention
 * (onnxruntime-genai's Llama, Phi, Mistral, Qwen...), MultiHeadAttention
 * (its transformer optimizer's encoders and decoders: Whisper, T5, BART,
 * Stable Diffusion) and RotaryEmbedding.  Each becomes the graph of what
 * it computes, with onnxruntime 1.32's CPU kernels as the reference: the
 * cache appended where each batch entry's own length says, the masks
 * from those lengths, the rotation at each token's position.
 *
 * dlcc's shapes are fixed when the model compiles, and here they are
 * what onnxruntime's would be for the same inputs: present is as long as
 * max(total_sequence_length, past), so total_sequence_length must be
 * known at import (genai's graphs compute it from the attention mask's
 * shape, which the input shapes bind). */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

static const int64_t to_bnsh[4] = {0, 2, 1, 3};

/* The longest cache (past, present) imported: a length from a small
 * file must not make the import build tables of any size. */
enum { KV_MAX_LENGTH = 1 << 20 };

/* v (integers) through a run-time check that every element is in [lo,
 * hi], the run failing with "NODE: what is out of range" where one is
 * not (onnxruntime refuses such a run too). */
static Val *in_range(Imp *im, Val *v, int64_t lo, int64_t hi, const char *what) {
  if (!v) return NULL;
  int r = v->type.rank;
  int64_t all[DL_MAX_RANK];
  for (int i = 0; i < r; i++) all[i] = i;
  Val *w = ox_cast(im, v, TY_I64);
  Val *low = ox_reduce(im, OP_REDUCE_MIN, w, r, all, false), *high = ox_reduce(im, OP_REDUCE_MAX, w, r, all, false);
  Val *ok = ox_op2(im, OP_LOGICAL_AND, ox_op2s(im, OP_GREATER_EQUAL, low, (double)lo),
                   ox_op2s(im, OP_LESS_EQUAL, high, (double)hi));
  char where[512];
  ox_node_str(im, where, sizeof where);
  const char *msg = arena_printf(&im->c->arena, "%s: %s is out of range at run time (each must be in [%" PRId64
                                 ", %" PRId64 "])", where, what, lo, hi);
  return ok ? ox_check_at_run_time(im, v, ok, msg) : NULL;
}

/* A float operand of x's dtype, or NULL after saying so. */
static Val *same_float(Imp *im, Val *v, const Val *x, const char *what) {
  if (v && v->type.dtype != x->type.dtype)
    return ox_bad(im, "%s must have the input's dtype %s", what, ir_dtype_name(x->type.dtype)), NULL;
  return v;
}

/* x with extra zeros after its end along axis. */
static Val *pad_end(Imp *im, Val *x, int axis, int64_t extra) {
  if (!x || extra <= 0) return x;
  int64_t pads[2 * DL_MAX_RANK] = {0};
  pads[x->type.rank + axis] = extra;
  Emit e;
  Node *p = ox_begin(im, &e, OP_PAD, 1, &x);
  ir_set_ints(im->g, p, "pads", 2 * x->type.rank, pads);
  return ox_emit1(im, &e);
}

/* [B, S, heads * H] -> [B, S, heads, H]. */
static Val *heads_of(Imp *im, Val *x, int64_t heads, int64_t H) {
  if (!x) return NULL;
  const int64_t *d = x->type.dims;
  return ox_reshape(im, x, 4, (int64_t[]){d[0], d[1], heads, H});
}

/* [B, N, S, H] -> [B, S, N * H]. */
static Val *merge_heads(Imp *im, Val *y) {
  if (!y) return NULL;
  const int64_t *d = y->type.dims;
  int64_t B = d[0], N = d[1], S = d[2], H = d[3];
  return ox_reshape(im, ox_transpose(im, y, to_bnsh), 3, (int64_t[]){B, S, N * H});
}

/* x's rows (axis 2) at idx [B, 1, R, 1], broadcast over x's heads and
 * values: [B, heads, R, H]. */
static Val *rows_at(Imp *im, Val *x, Val *idx) {
  if (!x || !idx) return NULL;
  const int64_t *d = x->type.dims;
  int64_t dims[4] = {d[0], d[1], idx->type.dims[2], d[3]};
  Val *in[2] = {x, ox_expand(im, idx, 4, dims)};
  if (!in[1]) return NULL;
  Emit e;
  Node *ge = ox_begin(im, &e, OP_GATHER_ELEMENTS, 2, in);
  ir_set_int(im->g, ge, "axis", 2);
  return ox_emit1(im, &e);
}

/* The rows of a [positions, half] cache at pos [B, S]: [B, S, half]. */
static Val *cache_rows(Imp *im, Val *cache, Val *pos, int64_t half, const char *what) {
  const TensorType *t = &cache->type;
  if (t->rank != 2 || t->dims[1] != half) {
    char buf[IR_TYPE_STR_MAX];
    return ox_bad(im, "%s is %s where [positions, %" PRId64 "] is needed", what, ir_type_str(t, buf, sizeof buf), half),
           NULL;
  }
  return ox_gather(im, cache, pos, 0);
}

/* ---- GroupQueryAttention ---- */

typedef struct Gqa {
  int64_t B, S, N, Nk, H;
  int64_t total; /* total_sequence_length */
  int64_t T;     /* present's length */
  bool first;    /* the first prompt: nothing of the past is used */
  Val *past_len;  /* [B, 1, 1, 1] i64: each entry's tokens before this step */
  Val *total_len; /* [B, 1, 1, 1] i64: and after it (seqlens_k + 1) */
} Gqa;

/* The past's first past_len[b] positions, this step's S after them,
 * zeros after that: [B, Nk, T, H], as onnxruntime concatenates each
 * entry's cache (a right-padded past keeps its own length). */
static Val *present_of(Imp *im, const Gqa *g, Val *past, Val *now) {
  if (!now) return NULL;
  if (g->first || !past) return pad_end(im, now, 2, g->T - g->S);
  int64_t P = past->type.dims[2];
  Val *old = pad_end(im, past, 2, g->T - P);
  Val *t = ox_iota_along(im, 4, 2, g->T);
  Val *at = ox_op2(im, OP_SUB, t, g->past_len); /* [B, 1, T, 1]: the position in this step's */
  Val *row = ox_op2s(im, OP_MINIMUM, ox_op2s(im, OP_MAXIMUM, at, 0), (double)(g->S - 1));
  Val *moved = rows_at(im, now, ox_expand(im, row, 4, (int64_t[]){g->B, 1, g->T, 1}));
  Val *zero = ox_scalar(im, 0, now->type.dtype);
  Val *fresh = ox_where(im, ox_op2s(im, OP_LESS, at, (double)g->S), moved, zero);
  return ox_where(im, ox_op2(im, OP_LESS, t, g->past_len), old, fresh);
}

/* The added bias [B, 1, S, T]: query i of entry b, at position
 * past_len[b] + i, sees the keys up to its own position, with a window
 * only the last local_window_size of them (none for 0, as onnxruntime:
 * the row is then 0), and without causal every
 * key; never one at or past the entry's total (a padded prompt's rows
 * past it see the same keys as its last one). */
static Val *gqa_bias(Imp *im, const Gqa *g, bool causal, int64_t window, DType dt) {
  Val *qpos = ox_op2(im, OP_ADD, ox_iota_along(im, 4, 2, g->S), g->past_len); /* [B, 1, S, 1] */
  Val *k = ox_iota_along(im, 4, 3, g->T);
  Val *ok = ox_op2(im, OP_LESS, k, g->total_len);
  if (causal) ok = ox_op2(im, OP_LOGICAL_AND, ok, ox_op2(im, OP_LESS_EQUAL, k, qpos));
  if (causal && window >= 0)
    ok = ox_op2(im, OP_LOGICAL_AND, ok, ox_op2(im, OP_GREATER, k, ox_op2s(im, OP_SUB, qpos, (double)window)));
  return ox_where(im, ok, ox_scalar(im, 0, dt), ox_scalar(im, -INFINITY, dt));
}

/* sliding_window_cache: past and present are windows of capacity C
 * (past's length) holding, in rows [0, L(T)), an entry's L(T) most
 * recent tokens of the T it has seen, where with W = local_window_size
 * and G = C - W + 1, L(T) = T up to C and T - G ceil((T - C) / G) past
 * it (eviction frees G rows at once).  [B, 1, 1, 1] i64. */
static Val *resident(Imp *im, Val *t, int64_t C, int64_t W) {
  int64_t G = C - W + 1;
  Val *over = ox_op2s(im, OP_DIV, ox_op2s(im, OP_ADD, t, (double)(G - 1 - C)), (double)G);
  Val *kept = ox_op2(im, OP_SUB, t, ox_op2s(im, OP_MUL, over, (double)G));
  return ox_where(im, ox_op2s(im, OP_LESS_EQUAL, t, (double)C), t, kept);
}

/* The keys and values a windowed step reads, the past's C rows and this
 * step's S after them ([B, Nk, C + S, H]), the bias [B, 1, S, C + S]
 * that lets query i (position p = past_len + i) see the resident rows at
 * positions in (p - W, p], and present: the rows of the L(total) most
 * recent positions moved to the front, zeros after them. */
typedef struct CacheView {
  Val *keys, *values, *present_k, *present_v, *bias;
} CacheView;

static bool window_cache(Imp *im, const Gqa *g, int64_t W, Val *past_k, Val *past_v, Val *k, Val *v, DType dt,
                         CacheView *out) {
  int64_t C = past_k->type.dims[2], R = C + g->S;
  if (C < W) return ox_bad(im, "a windowed cache of %" PRId64 " rows cannot hold local_window_size %" PRId64, C, W);
  Val *before = resident(im, g->past_len, C, W), *after = resident(im, g->total_len, C, W);
  Val *oldest = ox_op2(im, OP_SUB, g->past_len, before); /* the position of past row 0 */
  Val *row = ox_iota_along(im, 4, 3, R);
  /* Each row's position; a past row past the resident ones holds none
   * (valid says which do). */
  Val *in_past = ox_op2s(im, OP_LESS, row, (double)C);
  Val *pos = ox_where(im, in_past, ox_op2(im, OP_ADD, oldest, row),
                      ox_op2(im, OP_ADD, g->past_len, ox_op2s(im, OP_SUB, row, (double)C)));
  Val *valid = ox_op2(
      im, OP_LOGICAL_AND, ox_op2(im, OP_LESS, pos, g->total_len),
      ox_op2(im, OP_LOGICAL_OR, ox_op2s(im, OP_GREATER_EQUAL, row, (double)C), ox_op2(im, OP_LESS, row, before)));
  Val *qpos = ox_op2(im, OP_ADD, ox_iota_along(im, 4, 2, g->S), g->past_len);
  Val *ok = ox_op2(im, OP_LOGICAL_AND, valid, ox_op2(im, OP_LESS_EQUAL, pos, qpos));
  ok = ox_op2(im, OP_LOGICAL_AND, ok, ox_op2(im, OP_GREATER, pos, ox_op2s(im, OP_SUB, qpos, (double)W)));
  out->bias = ox_where(im, ok, ox_scalar(im, 0, dt), ox_scalar(im, -INFINITY, dt));
  out->keys = ox_concat(im, 2, (Val *[]){past_k, k}, 2);
  out->values = ox_concat(im, 2, (Val *[]){past_v, v}, 2);
  /* present row i holds position total - L + i: past row (that - oldest)
   * or this step's row (that - past_len) after the C past rows. */
  Val *i = ox_iota_along(im, 4, 2, C);
  Val *at = ox_op2(im, OP_ADD, ox_op2(im, OP_SUB, g->total_len, after), i);
  Val *src = ox_where(im, ox_op2(im, OP_LESS, at, g->past_len), ox_op2(im, OP_SUB, at, oldest),
                      ox_op2s(im, OP_ADD, ox_op2(im, OP_SUB, at, g->past_len), (double)C));
  src = ox_op2s(im, OP_MINIMUM, ox_op2s(im, OP_MAXIMUM, src, 0), (double)(R - 1));
  Val *kept = ox_op2(im, OP_LESS, i, after);
  Val *idx = ox_expand(im, src, 4, (int64_t[]){g->B, 1, C, 1});
  Val *both[2] = {out->keys, out->values}, *res[2];
  for (int j = 0; j < 2; j++) res[j] = ox_where(im, kept, rows_at(im, both[j], idx), ox_scalar(im, 0, dt));
  out->present_k = res[0], out->present_v = res[1];
  return out->keys && out->values && res[0] && res[1] && out->bias;
}

static bool refuse_input(Imp *im, const ONode *n, int i, const char *what) {
  return ox_in_opt(n, i) ? ox_bad(im, "%s is not supported", what) : true;
}

bool ox_op_group_query_attention(Imp *im, ONode *n) {
  Val *q = ox_in_req(im, n, 0), *k = ox_in_opt(n, 1), *v = ox_in_opt(n, 2), *past_k = ox_in_opt(n, 3),
      *past_v = ox_in_opt(n, 4), *seqlens = ox_in_req(im, n, 5), *total_in = ox_in_req(im, n, 6),
      *cos_c = ox_in_opt(n, 7), *sin_c = ox_in_opt(n, 8), *bias_in = ox_in_opt(n, 10), *sink = ox_in_opt(n, 11),
      *q_norm = ox_in_opt(n, 14), *k_norm = ox_in_opt(n, 15);
  int64_t N, Nk, rotary, interleaved, window, smooth, causal, qk_output, sliding, bits;
  double scale, softcap, qk_eps, q_eps, k_eps, total;
  const char *kq, *vq;
  if (!q || !seqlens || !total_in || !ox_attr_int(im, "num_heads", 0, &N) ||
      !ox_attr_int(im, "kv_num_heads", 0, &Nk) || !ox_attr_float(im, "scale", 0, &scale) ||
      !ox_attr_float(im, "softcap", 0, &softcap) || !ox_attr_int(im, "do_rotary", 0, &rotary) ||
      !ox_attr_int(im, "rotary_interleaved", 0, &interleaved) || !ox_attr_int(im, "local_window_size", -1, &window) ||
      !ox_attr_int(im, "smooth_softmax", 0, &smooth) || !ox_attr_int(im, "causal", 1, &causal) ||
      !ox_attr_int(im, "qk_output", 0, &qk_output) || !ox_attr_int(im, "sliding_window_cache", 0, &sliding) ||
      !ox_attr_int(im, "kv_cache_bit_width", 0, &bits) || !ox_attr_str(im, "k_quant_type", "NONE", &kq) ||
      !ox_attr_str(im, "v_quant_type", "NONE", &vq) || !ox_attr_float(im, "qk_norm_epsilon", 1e-6, &qk_eps) ||
      !ox_attr_float(im, "q_norm_epsilon", qk_eps, &q_eps) || !ox_attr_float(im, "k_norm_epsilon", qk_eps, &k_eps) ||
      !ox_need_float_in(im, q))
    return false;
  if (!refuse_input(im, n, 9, "position_ids") || !refuse_input(im, n, 12, "a quantized cache (k_scale)") ||
      !refuse_input(im, n, 13, "a quantized cache (v_scale)") || !refuse_input(im, n, 16, "query_seqlens"))
    return false;
  if (strcmp(kq, "NONE") != 0 || strcmp(vq, "NONE") != 0 || bits)
    return ox_bad(im, "a quantized cache is not supported");
  if (sliding && (window <= 0 || !causal || !past_k))
    return ox_bad(im, "sliding_window_cache needs local_window_size > 0, causal and past_key and past_value");
  if (qk_output && n->n_out > 3 && n->want[3]) return ox_bad(im, "output_qk is not supported");
  if (N < 1 || Nk < 1)
    return ox_bad(im, "num_heads and kv_num_heads must be given, positive (got %" PRId64 " and %" PRId64 ")", N, Nk);
  if (N % Nk) return ox_bad(im, "num_heads %" PRId64 " is not a multiple of kv_num_heads %" PRId64, N, Nk);
  if (causal != 0 && causal != 1) return ox_bad(im, "causal must be 0 or 1");
  if (!causal && window >= 0) return ox_bad(im, "local_window_size needs causal=1");
  const TensorType *qt = &q->type;
  if (qt->rank != 3) return ox_bad(im, "query must be 3-d [batch, sequence, hidden]");
  if ((k != NULL) != (v != NULL)) return ox_bad(im, "key and value go together (both absent: query is packed)");
  if ((past_k != NULL) != (past_v != NULL)) return ox_bad(im, "past_key and past_value go together");
  if ((cos_c != NULL) != (sin_c != NULL)) return ox_bad(im, "cos_cache and sin_cache go together");
  if ((q_norm != NULL) != (k_norm != NULL)) return ox_bad(im, "q_norm_weight and k_norm_weight go together");
  if (rotary && !cos_c) return ox_bad(im, "do_rotary needs cos_cache and sin_cache");
  Gqa g = {.B = qt->dims[0], .S = qt->dims[1], .N = N, .Nk = Nk};
  DType dt = qt->dtype;
  if (k) {
    if (qt->dims[2] % N)
      return ox_bad(im, "query's hidden size %" PRId64 " is not a multiple of %" PRId64 " heads", qt->dims[2], N);
    g.H = qt->dims[2] / N;
    int64_t kv[3] = {g.B, g.S, Nk * g.H};
    if (!ox_same_dims(&k->type, 3, kv) || !ox_same_dims(&v->type, 3, kv) || k->type.dtype != dt || v->type.dtype != dt)
      return ox_bad(im, "key and value must be [%" PRId64 ", %" PRId64 ", %" PRId64 "] of query's dtype", kv[0], kv[1],
                    kv[2]);
  } else {
    if (qt->dims[2] % (N + 2 * Nk))
      return ox_bad(im, "packed query's hidden size %" PRId64 " is not a multiple of %" PRId64 " heads", qt->dims[2],
                    N + 2 * Nk);
    g.H = qt->dims[2] / (N + 2 * Nk);
    k = ox_slice_axis(im, q, 2, N * g.H, (N + Nk) * g.H, 1);
    v = ox_slice_axis(im, q, 2, (N + Nk) * g.H, (N + 2 * Nk) * g.H, 1);
    q = ox_slice_axis(im, q, 2, 0, N * g.H, 1);
  }
  if (g.H < 1) return ox_bad(im, "the heads are empty");
  if ((cos_c && (!same_float(im, cos_c, q, "cos_cache") || !same_float(im, sin_c, q, "sin_cache"))) ||
      (bias_in && !ir_dtype_is_float(bias_in->type.dtype)) || (sink && !ir_dtype_is_float(sink->type.dtype)))
    return ox_bad(im,
                  "cos_cache, sin_cache, attention_bias and head_sink must be floats (the caches of query's dtype)");
  if (q_norm && (q_norm->type.rank != 1 || q_norm->type.dims[0] != g.H || k_norm->type.rank != 1 ||
                 k_norm->type.dims[0] != g.H || !same_float(im, q_norm, q, "q_norm_weight") ||
                 !same_float(im, k_norm, q, "k_norm_weight")))
    return ox_bad(im, "q_norm_weight and k_norm_weight must be [%" PRId64 "] of query's dtype", g.H);
  int64_t P = 0;
  if (past_k) {
    int64_t pd[4] = {g.B, Nk, past_k->type.dims[2], g.H};
    if (past_k->type.rank != 4 || !ox_same_dims(&past_k->type, 4, pd) || !ox_same_dims(&past_v->type, 4, pd) ||
        past_k->type.dtype != dt || past_v->type.dtype != dt)
      return ox_bad(im,
                    "past_key and past_value must be [%" PRId64 ", %" PRId64 ", past, %" PRId64 "] of query's dtype",
                    g.B, Nk, g.H);
    P = pd[2];
    if (P > KV_MAX_LENGTH) return ox_bad(im, "a past of %" PRId64 " is more than dlcc imports (%d)", P, KV_MAX_LENGTH);
  }
  if (seqlens->type.rank != 1 || seqlens->type.dims[0] != g.B || ir_dtype_is_float(seqlens->type.dtype))
    return ox_bad(im, "seqlens_k must be [%" PRId64 "] integers", g.B);
  if (!ox_const_scalar(im, total_in, "total_sequence_length (present's length)", &total))
    return false;
  g.total = (int64_t)total;
  if (g.total < 1 || (double)g.total != total)
    return ox_bad(im, "total_sequence_length %g is not a positive count", total);
  if (g.total > KV_MAX_LENGTH)
    return ox_bad(im, "total_sequence_length %" PRId64 " is more than dlcc imports (%d)", g.total, KV_MAX_LENGTH);
  g.T = g.total > P ? g.total : P;
  g.first = g.S == g.total;
  if (!g.first && g.S > 1 && g.B != 1)
    return ox_bad(im, "a prompt after a past (sequence %" PRId64 " of %" PRId64 " in all) needs batch 1", g.S, g.total);
  if (!g.first && !past_k)
    return ox_bad(im, "a sequence of %" PRId64 " of %" PRId64 " in all needs past_key and past_value", g.S, g.total);
  if (g.S > g.T)
    return ox_bad(im, "total_sequence_length %" PRId64 " is shorter than the query's %" PRId64, g.total, g.S);
  /* As onnxruntime: a past is empty or a buffer holding the total on a
   * first prompt, and holds what the total does not take from this
   * step otherwise (a windowed cache holds the window alone). */
  if (!sliding && g.first && P > 0 && P < g.total)
    return ox_bad(im, "a first prompt's past of %" PRId64 " is neither empty nor a buffer of %" PRId64, P, g.total);
  if (!sliding && !g.first && g.total > P + g.S)
    return ox_bad(im, "total_sequence_length %" PRId64 " is more than the past's %" PRId64 " and this step's %" PRId64,
                  g.total, P, g.S);
  /* Each entry's tokens before this step: seqlens_k + 1 is its total. */
  seqlens = in_range(im, seqlens, g.first ? 0 : g.S - 1, g.total - 1, "seqlens_k");
  g.total_len = ox_reshape(im, ox_op2s(im, OP_ADD, ox_cast(im, seqlens, TY_I64), 1), 4, (int64_t[]){g.B, 1, 1, 1});
  g.past_len = g.first ? ox_scalar(im, 0, TY_I64) : ox_op2s(im, OP_SUB, g.total_len, (double)g.S);
  Val *q4 = heads_of(im, q, N, g.H), *k4 = heads_of(im, k, Nk, g.H);
  if (q_norm) {
    q4 = ox_rms_norm_of(im, q4, 3, q_eps, q_norm);
    k4 = ox_rms_norm_of(im, k4, 3, k_eps, k_norm);
  }
  if (rotary) {
    int64_t half = cos_c->type.rank == 2 ? cos_c->type.dims[1] : 0;
    if (half < 1 || 2 * half > g.H || cos_c->type.dims[0] < g.total || !ox_same_dims(&sin_c->type, 2, cos_c->type.dims))
      return ox_bad(im, "cos_cache and sin_cache must be [at least %" PRId64 " positions, at most %" PRId64 "]",
                    g.total, g.H / 2);
    Val *pos = ox_op2(im, OP_ADD, ox_iota_along(im, 2, 1, g.S),
                      g.first ? ox_scalar(im, 0, TY_I64) : ox_reshape(im, g.past_len, 2, (int64_t[]){g.B, 1}));
    pos = ox_expand(im, pos, 2, (int64_t[]){g.B, g.S});
    Val *c = cache_rows(im, cos_c, pos, half, "cos_cache"), *s = cache_rows(im, sin_c, pos, half, "sin_cache");
    if (!c || !s) return false;
    q4 = ox_rotate(im, q4, c, s, 2 * half, interleaved != 0);
    k4 = ox_rotate(im, k4, c, s, 2 * half, interleaved != 0);
  }
  Val *qh = ox_transpose(im, q4, to_bnsh), *kh = ox_transpose(im, k4, to_bnsh),
      *vh = ox_transpose(im, heads_of(im, v, Nk, g.H), to_bnsh);
  CacheView win = {0};
  if (sliding) {
    if (!qh || !kh || !vh || !window_cache(im, &g, window, past_k, past_v, kh, vh, dt, &win)) return false;
  } else {
    win.keys = win.present_k = present_of(im, &g, past_k, kh);
    win.values = win.present_v = present_of(im, &g, past_v, vh);
    win.bias = gqa_bias(im, &g, causal != 0, window, dt);
  }
  if (!qh || !win.keys || !win.values || !win.bias) return false;
  Val *bias = win.bias;
  int64_t keys = win.keys->type.dims[2];
  if (bias_in) {
    const TensorType *bt = &bias_in->type;
    if (sliding) return ox_bad(im, "attention_bias with sliding_window_cache is not supported");
    if (bt->rank != 4 || bt->dims[3] != g.total)
      return ox_bad(im, "attention_bias must be 4-d, %" PRId64 " keys long (total_sequence_length)", g.total);
    bias = ox_op2(im, OP_ADD, bias, pad_end(im, ox_cast(im, bias_in, dt), 3, keys - bt->dims[3]));
  }
  if (smooth && !sink) sink = ox_scalar(im, 0, TY_F32);
  if (sink) {
    if (sink->type.rank > 1 || (sink->type.rank == 1 && sink->type.dims[0] != N))
      return ox_bad(im, "head_sink must be [%" PRId64 "]", N);
    sink = ox_expand(im, ox_cast(im, sink, TY_F32), 1, &N);
  }
  Val *y = ox_attention_heads(im, qh, win.keys, win.values, bias, scale, softcap, sink, TY_F32);
  Val *res[3] = {merge_heads(im, y), win.present_k, win.present_v};
  for (int i = 0; i < n->n_out && i < 3; i++) n->out[i] = res[i];
  return res[0] != NULL;
}

/* ---- MultiHeadAttention ---- */

/* Q, K and V [B, N, S, H] of MultiHeadAttention's forms: query [B, S,
 * N H] with key and value [B, L, N H] (bias added to each), or with
 * key and value already [B, N, L, H] (a cross attention's cache: no
 * bias for them), or with key [B, L, N, 2, H] packing K and V; or query
 * [B, S, N, 3, H] packing all three.  onnxruntime's CPU kernel has no
 * packed form (its CUDA kernel has): a bias with one is refused rather
 * than guessed. */
typedef struct Mha {
  Val *q, *k, *v;
  bool kv_given; /* K and V came as [B, N, L, H] */
} Mha;

/* Part i of x [B, S, N, parts, H]: [B, N, S, H]. */
static Val *unpack(Imp *im, Val *x, int i) {
  const int64_t *d = x->type.dims;
  Val *p = ox_reshape(im, ox_slice_axis(im, x, 3, i, i + 1, 1), 4, (int64_t[]){d[0], d[1], d[2], d[4]});
  return ox_transpose(im, p, to_bnsh);
}

static bool mha_inputs(Imp *im, Val *q, Val *k, Val *v, Val *bias, int64_t N, Mha *m) {
  const TensorType *qt = &q->type;
  if (qt->rank == 5) {
    if (k || v || qt->dims[2] != N || qt->dims[3] != 3)
      return ox_bad(im, "a 5-d query packs Q, K and V as [batch, sequence, %" PRId64 ", 3, head] with no key or value",
                    N);
    if (bias) return ox_bad(im, "a bias with packed Q, K and V is not supported");
    m->q = unpack(im, q, 0), m->k = unpack(im, q, 1), m->v = unpack(im, q, 2);
    return m->q && m->k && m->v;
  }
  if (qt->rank != 3 || qt->dims[2] % N)
    return ox_bad(
        im, "query must be [batch, sequence, hidden] with hidden a multiple of %" PRId64 " heads, or packed 5-d", N);
  int64_t D = qt->dims[2], H = D / N;
  if (H < 1) return ox_bad(im, "the heads are empty");
  if (!k) return ox_bad(im, "key is needed unless query packs Q, K and V");
  if (bias && (bias->type.rank != 1 || bias->type.dims[0] < 2 * D || bias->type.dtype != qt->dtype))
    return ox_bad(im, "bias must be 1-d [q + k + v hidden sizes] of query's dtype");
  Val *qb = bias ? ox_op2(im, OP_ADD, q, ox_slice_axis(im, bias, 0, 0, D, 1)) : q;
  m->q = ox_transpose(im, heads_of(im, qb, N, H), to_bnsh);
  const TensorType *kt = &k->type;
  if (kt->rank == 5) {
    if (v || kt->dims[2] != N || kt->dims[3] != 2 || kt->dims[4] != H)
      return ox_bad(im, "a 5-d key packs K and V as [batch, sequence, %" PRId64 ", 2, %" PRId64 "] with no value", N,
                    H);
    if (bias) return ox_bad(im, "a bias with packed K and V is not supported");
    m->k = unpack(im, k, 0), m->v = unpack(im, k, 1);
    return m->q && m->k && m->v;
  }
  if (!v || v->type.rank != kt->rank) return ox_bad(im, "key and value must be both 3-d or both 4-d");
  if (kt->rank == 4) {
    if (kt->dims[1] != N || kt->dims[3] != H || v->type.dims[1] != N || v->type.dims[2] != kt->dims[2])
      return ox_bad(im, "4-d key and value must be [batch, %" PRId64 ", kv_sequence, %" PRId64 "]", N, H);
    m->k = k, m->v = v, m->kv_given = true;
    return m->q != NULL;
  }
  const TensorType *vt = &v->type;
  if (kt->rank != 3 || kt->dims[2] != D || vt->dims[1] != kt->dims[1] || vt->dims[2] % N)
    return ox_bad(im, "key must be [batch, kv_sequence, %" PRId64 "] and value [batch, kv_sequence, heads * v_head]",
                  D);
  if (bias) {
    if (bias->type.dims[0] != 2 * D + vt->dims[2]) return ox_bad(im, "bias must be [%" PRId64 "]", 2 * D + vt->dims[2]);
    k = ox_op2(im, OP_ADD, k, ox_slice_axis(im, bias, 0, D, 2 * D, 1));
    v = ox_op2(im, OP_ADD, v, ox_slice_axis(im, bias, 0, 2 * D, 2 * D + vt->dims[2], 1));
  }
  m->k = ox_transpose(im, heads_of(im, k, N, H), to_bnsh);
  m->v = ox_transpose(im, heads_of(im, v, N, vt->dims[2] / N), to_bnsh);
  return m->q && m->k && m->v;
}

/* key_padding_mask as a bool [B, 1, S or 1, T]: true to keep.  [B]:
 * each entry's key count (right padding); [B, T] or [B, S, T]: nonzero
 * to keep. */
static Val *mha_keep(Imp *im, Val *mask, int64_t B, int64_t S, int64_t T) {
  const TensorType *t = &mask->type;
  if (ir_dtype_is_float(t->dtype)) return ox_bad(im, "key_padding_mask must be integers"), NULL;
  mask = ox_cast(im, mask, TY_I64);
  if (t->rank == 1 && t->dims[0] == B)
    return ox_op2(im, OP_LESS, ox_iota_along(im, 4, 3, T),
                  ox_reshape(im, mask, 4, (int64_t[]){B, 1, 1, 1}));
  if (t->rank == 2 && t->dims[0] == B && t->dims[1] == T)
    return ox_reshape(im, ox_op2s(im, OP_NOT_EQUAL, mask, 0), 4, (int64_t[]){B, 1, 1, T});
  if (t->rank == 3 && t->dims[0] == B && t->dims[1] == S && t->dims[2] == T)
    return ox_reshape(im, ox_op2s(im, OP_NOT_EQUAL, mask, 0), 4, (int64_t[]){B, 1, S, T});
  char buf[IR_TYPE_STR_MAX];
  return ox_bad(im,
                "key_padding_mask %s is not supported ([%" PRId64 "] lengths, [%" PRId64 ", %" PRId64 "] or [%" PRId64
                ", %" PRId64 ", %" PRId64 "] are)",
                ir_type_str(t, buf, sizeof buf), B, B, T, B, S, T),
         NULL;
}

bool ox_op_multi_head_attention(Imp *im, ONode *n) {
  Val *q = ox_in_req(im, n, 0), *k = ox_in_opt(n, 1), *v = ox_in_opt(n, 2), *bias = ox_in_opt(n, 3),
      *pad_mask = ox_in_opt(n, 4), *attn_bias = ox_in_opt(n, 5), *past_k = ox_in_opt(n, 6), *past_v = ox_in_opt(n, 7);
  int64_t N, causal;
  double scale, filter;
  if (!q || !ox_attr_int(im, "num_heads", 0, &N) || !ox_attr_int(im, "unidirectional", 0, &causal) ||
      !ox_attr_float(im, "scale", 0, &scale) || !ox_attr_float(im, "mask_filter_value", -10000.0, &filter) ||
      !ox_need_float_in(im, q))
    return false;
  if (!refuse_input(im, n, 8, "past_sequence_length (a shared past and present buffer)") ||
      !refuse_input(im, n, 9, "cache_indirection (beam search)"))
    return false;
  if (n->n_out > 3 && n->want[3]) return ox_bad(im, "output qk is not supported");
  if (N < 1) return ox_bad(im, "num_heads must be given, positive");
  if (causal != 0 && causal != 1) return ox_bad(im, "unidirectional must be 0 or 1");
  if ((past_k != NULL) != (past_v != NULL)) return ox_bad(im, "past_key and past_value go together");
  Mha m = {0};
  if (!mha_inputs(im, q, k, v, bias, N, &m)) return false;
  DType dt = q->type.dtype;
  if (m.k->type.dtype != dt || m.v->type.dtype != dt) return ox_bad(im, "query, key and value must have one dtype");
  int64_t B = m.q->type.dims[0], S = m.q->type.dims[2], H = m.q->type.dims[3], P = 0;
  /* onnxruntime lines a causal mask up with the past only where this
   * step brings as many keys as queries (its last row sees every key
   * otherwise): anything else is refused rather than guessed. */
  if (causal && m.k->type.dims[2] != S)
    return ox_bad(im, "unidirectional with %" PRId64 " new keys for %" PRId64 " queries is not supported",
                  m.k->type.dims[2], S);
  if (past_k) {
    if (m.kv_given) return ox_bad(im, "a past key and value do not combine with 4-d key and value");
    int64_t pd[4] = {B, N, past_k->type.dims[2], H}, vd[4] = {B, N, past_k->type.dims[2], m.v->type.dims[3]};
    if (past_k->type.rank != 4 || !ox_same_dims(&past_k->type, 4, pd) || past_v->type.rank != 4 ||
        !ox_same_dims(&past_v->type, 4, vd) || past_k->type.dtype != dt || past_v->type.dtype != dt)
      return ox_bad(im,
                    "past_key and past_value must be [%" PRId64 ", %" PRId64 ", past, %" PRId64 "] of query's dtype", B,
                    N, H);
    P = pd[2];
    if (P > KV_MAX_LENGTH) return ox_bad(im, "a past of %" PRId64 " is more than dlcc imports (%d)", P, KV_MAX_LENGTH);
    m.k = ox_concat(im, 2, (Val *[]){past_k, m.k}, 2);
    m.v = ox_concat(im, 2, (Val *[]){past_v, m.v}, 2);
    if (!m.k || !m.v) return false;
  }
  int64_t T = m.k->type.dims[2];
  /* A padding key's score gets mask_filter_value, not -inf, so that a
   * row whose keys are all padding is uniform over the keys causality
   * lets it see, as in onnxruntime; a key past the query is out. */
  Val *zero = ox_scalar(im, 0, dt), *fill = ox_scalar(im, filter, dt), *added = NULL;
  if (pad_mask) {
    Val *keep = mha_keep(im, pad_mask, B, S, T);
    if (!keep) return false;
    added = ox_where(im, keep, zero, fill);
  }
  if (causal) {
    Val *ok = ox_op2(im, OP_LESS_EQUAL, ox_iota_along(im, 4, 3, T),
                     ox_op2s(im, OP_ADD, ox_iota_along(im, 4, 2, S), (double)P));
    added = ox_where(im, ok, added ? added : zero, ox_scalar(im, -INFINITY, dt));
  }
  if (attn_bias) {
    const TensorType *bt = &attn_bias->type;
    if (bt->rank != 4 || bt->dims[2] != S || bt->dims[3] != T || !ir_dtype_is_float(bt->dtype))
      return ox_bad(im, "attention_bias must be floats [batch or 1, heads or 1, %" PRId64 ", %" PRId64 "]", S, T);
    Val *ab = ox_cast(im, attn_bias, dt);
    added = added ? ox_op2(im, OP_ADD, added, ab) : ab;
  }
  Val *y = ox_attention_heads(im, m.q, m.k, m.v, added, scale, 0, NULL, TY_F32);
  Val *res[3] = {merge_heads(im, y), m.k, m.v};
  for (int i = 0; i < n->n_out && i < 3; i++) n->out[i] = res[i];
  return res[0] != NULL;
}

/* ---- RotaryEmbedding (com.microsoft) ---- */

/* input [B, S, hidden] or [B, N, S, H]; position_ids [B, S], or [1]: the
 * first token's position, the rest following; cos and sin caches
 * [positions, rotary_embedding_dim / 2]. */
bool ox_op_ms_rotary(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *pos = ox_in_req(im, n, 1), *cos_c = ox_in_req(im, n, 2), *sin_c = ox_in_req(im, n, 3);
  int64_t interleaved, rdim, heads, packed;
  double scale;
  if (!x || !pos || !cos_c || !sin_c || !ox_attr_int(im, "interleaved", 0, &interleaved) ||
      !ox_attr_int(im, "rotary_embedding_dim", 0, &rdim) || !ox_attr_int(im, "num_heads", 0, &heads) ||
      !ox_attr_int(im, "is_packed_batching", 0, &packed) || !ox_attr_float(im, "scale", 1.0, &scale) ||
      !ox_need_float_in(im, x))
    return false;
  if (packed) return ox_bad(im, "is_packed_batching is not supported");
  if (scale != 1.0) return ox_bad(im, "scale %g is not supported (1 is)", scale);
  if (heads < 0 || rdim < 0) return ox_bad(im, "num_heads and rotary_embedding_dim must not be negative");
  if (rdim && heads == 0) return ox_bad(im, "rotary_embedding_dim needs num_heads");
  const TensorType *xt = &x->type;
  if (cos_c->type.rank != 2 || !ox_same_dims(&sin_c->type, 2, cos_c->type.dims) ||
      !same_float(im, cos_c, x, "cos_cache") || !same_float(im, sin_c, x, "sin_cache"))
    return ox_bad(im, "cos_cache and sin_cache must be 2-d [positions, rotary_embedding_dim / 2] of the input's dtype");
  int64_t half = cos_c->type.dims[1];
  if (half < 1) return ox_bad(im, "cos_cache is empty");
  bool given_rdim = rdim != 0;
  if (rdim == 0) rdim = 2 * half;
  Val *h;
  if (xt->rank == 4) {
    h = ox_transpose(im, x, to_bnsh);
  } else if (xt->rank == 3) {
    if (heads > 0 && xt->dims[2] % heads)
      return ox_bad(im, "hidden size %" PRId64 " is not a multiple of num_heads %" PRId64, xt->dims[2], heads);
    int64_t H = heads > 0 ? xt->dims[2] / heads : 2 * half;
    if (H < 1 || xt->dims[2] % H)
      return ox_bad(im, "hidden size %" PRId64 " does not split into heads of %" PRId64, xt->dims[2], H);
    h = heads_of(im, x, xt->dims[2] / H, H);
  } else {
    return ox_bad(im, "input must be 3-d [batch, sequence, hidden] or 4-d [batch, heads, sequence, head]");
  }
  if (!h) return false;
  int64_t B = h->type.dims[0], S = h->type.dims[1], H = h->type.dims[3];
  if (rdim != 2 * half || rdim > H || (!given_rdim && rdim != H))
    return ox_bad(
        im, "rotary_embedding_dim %" PRId64 " must be twice the caches' %" PRId64 " and at most the head size %" PRId64,
        rdim, half, H);
  const TensorType *pt = &pos->type;
  if (ir_dtype_is_float(pt->dtype)) return ox_bad(im, "position_ids must be integers");
  Val *at = ox_cast(im, pos, TY_I64);
  if (pt->rank == 1 && pt->dims[0] == 1)
    at = ox_expand(im, ox_op2(im, OP_ADD, ox_iota_along(im, 2, 1, S), ox_reshape(im, at, 2, (int64_t[]){1, 1})), 2,
                   (int64_t[]){B, S});
  else if (!(pt->rank == 2 && pt->dims[0] == B && pt->dims[1] == S))
    return ox_bad(im, "position_ids must be [1] or [%" PRId64 ", %" PRId64 "]", B, S);
  at = in_range(im, at, 0, cos_c->type.dims[0] - 1, "position_ids");
  Val *c = cache_rows(im, cos_c, at, half, "cos_cache"), *s = cache_rows(im, sin_c, at, half, "sin_cache");
  if (!c || !s) return false;
  Val *y = ox_rotate(im, h, c, s, rdim, interleaved != 0);
  if (!y) return false;
  return (n->out[0] = xt->rank == 4 ? ox_transpose(im, y, to_bnsh) : ox_reshape(im, y, 3, xt->dims));
}
