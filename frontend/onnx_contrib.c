/* onnxruntime's contrib ops that its transformer optimizer writes into
 * models (onnxruntime.transformers.optimizer, Hugging Face Optimum's
 * ORTOptimizer): the fused activations and the skip-connection layer
 * norms of the com.microsoft domain, and SimplifiedLayerNormalization,
 * which onnxruntime registers in the ONNX domain; and those its graph
 * optimizer saves (FusedConv, FusedGemm, FusedMatMul).  Each is the ops it
 * fuses, which dlcc's own fusion puts back together.  Takes one node's
 * operands, returns its results. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* x plus an optional bias input i (a vector along the last axis). */
static Val *plus_bias(Imp *im, ONode *n, Val *x, int i) {
  Val *b = ox_in_opt(n, i);
  return b && x ? ox_op2(im, OP_ADD, x, b) : x;
}

/* Gelu (erf), BiasGelu (erf, of A + B) and FastGelu (tanh, of X plus its
 * optional bias). */
bool ox_op_ms_gelu(Imp *im, ONode *n) {
  const char *op = im->np->op_type;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x)) return false;
  if (strcmp(op, "BiasGelu") == 0 && !ox_in_req(im, n, 1)) return false;
  bool fast = strcmp(op, "FastGelu") == 0;
  return (n->out[0] = ox_gelu(im, plus_bias(im, n, x, 1), fast ? "tanh" : "none")) != NULL;
}

/* QuickGelu: x sigmoid(alpha x), alpha 1.702 by default (CLIP's). */
bool ox_op_quick_gelu(Imp *im, ONode *n) {
  double alpha;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x) || !ox_attr_float(im, "alpha", 1.702, &alpha)) return false;
  return (n->out[0] = ox_op2(im, OP_MUL, x, ox_op1(im, OP_SIGMOID, ox_op2s(im, OP_MUL, x, alpha)))) != NULL;
}

/* SkipLayerNormalization: layernorm over the last axis of input + skip
 * (+ bias) times gamma (+ beta); its fourth output that sum.
 * SkipSimplifiedLayerNormalization: the same with an RMS norm and no
 * beta.  The mean and inverse deviation outputs (for training) are
 * refused where a node reads them. */
bool ox_op_skip_layer_norm(Imp *im, ONode *n) {
  bool rms = strcmp(im->np->op_type, "SkipSimplifiedLayerNormalization") == 0;
  double eps;
  Val *x = ox_in_req(im, n, 0), *skip = ox_in_req(im, n, 1), *gamma = ox_in_req(im, n, 2);
  if (!x || !skip || !gamma || !ox_need_float_in(im, x) || !ox_attr_float(im, "epsilon", 1e-12, &eps)) return false;
  if (x->type.rank < 1) return ox_bad(im, "input must have at least one axis");
  for (int i = 1; i < 3; i++)
    if ((n->n_out > i && n->want[i])) return ox_bad(im, "output %d (the %s) is not supported", i + 1, i == 1 ? "mean" : "inverse deviation");
  Val *beta = rms ? NULL : ox_in_opt(n, 3);
  Val *sum = plus_bias(im, n, ox_op2(im, OP_ADD, x, skip), rms ? 3 : 4);
  if (!sum) return false;
  int last = sum->type.rank - 1;
  n->out[0] = rms ? ox_rms_norm_of(im, sum, last, eps, gamma) : ox_layernorm_of(im, sum, last, eps, gamma, beta);
  if (n->n_out > 3) n->out[3] = sum;
  return n->out[0] != NULL;
}

/* SimplifiedLayerNormalization (onnxruntime's, in the ONNX domain): an
 * RMS norm over the axes from axis, times scale; its inverse deviation
 * output is refused where read. */
bool ox_op_simplified_layer_norm(Imp *im, ONode *n) {
  int64_t axis_attr, stash;
  double eps;
  Val *x = ox_in_req(im, n, 0), *scale = ox_in_req(im, n, 1);
  if (!x || !scale || !ox_need_float_in(im, x) || !ox_attr_int(im, "axis", -1, &axis_attr) ||
      !ox_attr_float(im, "epsilon", 1e-5, &eps) || !ox_attr_int(im, "stash_type", 1, &stash))
    return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  if (n->n_out > 1 && n->want[1]) return ox_bad(im, "output 2 (the inverse deviation) is not supported");
  return (n->out[0] = ox_rms_norm_of(im, x, axis, eps, scale)) != NULL;
}

/* The added mask of com.microsoft Attention, [B, 1, 1, S] (or [B, 1, L,
 * S] with an attention bias), from its mask_index: 1-d [B], each
 * sequence's length (keys from it on masked, as right padding leaves
 * them), or 2-d [B, S], 1 to keep and 0 to mask; masked keys get
 * mask_filter_value added (onnxruntime's -10000, not -inf, so a row that
 * masks every key is uniform, as there). */
static Val *ms_attention_mask(Imp *im, Val *mask_index, int64_t B, int64_t S, double filter) {
  const TensorType *t = &mask_index->type;
  Val *keep;
  if (t->rank == 1 && t->dims[0] == B) {
    Val *len = ox_reshape(im, ox_cast(im, mask_index, TY_I64), 2, (int64_t[]){B, 1});
    keep = ox_op2(im, OP_LESS, ox_iota_along(im, 2, 1, S), len);
  } else if (t->rank == 2 && t->dims[0] == B && t->dims[1] == S) {
    keep = ox_op2s(im, OP_NOT_EQUAL, mask_index, 0);
  } else {
    char buf[IR_TYPE_STR_MAX];
    return ox_bad(im, "mask_index %s is not supported (1-d [%" PRId64 "] lengths or a 2-d [%" PRId64 ", %" PRId64 "] mask are)",
                  ir_type_str(t, buf, sizeof buf), B, B, S), NULL;
  }
  Val *added = ox_where(im, keep, ox_scalar(im, 0, TY_F32), ox_scalar(im, filter, TY_F32));
  return ox_reshape(im, added, 4, (int64_t[]){B, 1, 1, S});
}

/* com.microsoft Attention (BERT's, as onnxruntime's optimizer fuses it):
 * input [B, S, in] times weights [in, q + k + v] plus bias, split into Q,
 * K and V of num_heads heads; scores scaled (scale, or 1/sqrt of a head's
 * size), the mask_index's mask and an attention bias added; causal where
 * unidirectional.  No past or present (a decoder's cache), no rotary. */
bool ox_op_ms_attention(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *bias = ox_in_opt(n, 2);
  if (!x || !w || !ox_need_float_in(im, x)) return false;
  if (x->type.rank != 3 || w->type.rank != 2 || w->type.dims[0] != x->type.dims[2])
    return ox_bad(im, "input must be [B, S, in] and weights [in, q + k + v]");
  Val *proj = ox_op2(im, OP_MATMUL, x, w);
  if (bias) proj = ox_op2(im, OP_ADD, proj, bias);
  return ox_ms_attention_of(im, n, proj, ox_in_opt(n, 3), ox_in_opt(n, 4), ox_in_opt(n, 5));
}

bool ox_ms_attention_of(Imp *im, ONode *n, Val *proj, Val *mask_index, Val *past, Val *attn_bias) {
  int64_t heads, causal, rotary, rotary_dim, share;
  double filter, scale;
  if (!proj || !ox_attr_int(im, "num_heads", 0, &heads) || !ox_attr_int(im, "unidirectional", 0, &causal) ||
      !ox_attr_float(im, "mask_filter_value", -10000.0, &filter) || !ox_attr_float(im, "scale", 0, &scale) ||
      !ox_attr_int(im, "do_rotary", 0, &rotary) || !ox_attr_int(im, "rotary_embedding_dim", 0, &rotary_dim) ||
      !ox_attr_int(im, "past_present_share_buffer", 0, &share))
    return false;
  if (past || (n->n_out > 1 && n->want[1])) return ox_bad(im, "past and present (a decoder's cache) are not supported");
  if (rotary) return ox_bad(im, "do_rotary is not supported");
  int64_t B = proj->type.dims[0], S = proj->type.dims[1], total = proj->type.dims[2], sizes[3];
  int n_sizes;
  const int64_t *qkv;
  if (ox_find_attr(im, "qkv_hidden_sizes")) {
    if (!ox_attr_ints(im, "qkv_hidden_sizes", &n_sizes, &qkv)) return false;
    if (n_sizes != 3) return ox_bad(im, "qkv_hidden_sizes needs 3 values");
    memcpy(sizes, qkv, sizeof sizes);
  } else {
    sizes[0] = sizes[1] = sizes[2] = total / 3;
  }
  if (heads < 1 || sizes[0] + sizes[1] + sizes[2] != total || sizes[0] != sizes[1] || sizes[0] % heads || sizes[2] % heads ||
      sizes[0] < 1)
    return ox_bad(im, "weights of %" PRId64 " columns do not split into Q, K and V of %" PRId64 " heads", total, heads);
  if (sizes[2] != sizes[0]) return ox_bad(im, "a V of another size than Q and K is not supported");
  Val *q = ox_slice_axis(im, proj, 2, 0, sizes[0], 1), *k = ox_slice_axis(im, proj, 2, sizes[0], 2 * sizes[0], 1),
      *v = ox_slice_axis(im, proj, 2, 2 * sizes[0], total, 1);
  Val *mask = mask_index ? ms_attention_mask(im, mask_index, B, S, filter) : NULL;
  if (mask_index && !mask) return false;
  if (attn_bias) mask = mask ? ox_op2(im, OP_ADD, ox_cast(im, mask, attn_bias->type.dtype), attn_bias) : attn_bias;
  return (n->out[0] = ox_attention_3d(im, q, k, v, heads, mask, scale, causal != 0)) != NULL;
}

/* com.microsoft EmbedLayerNormalization (BERT's embeddings, fused): the
 * word, position (position_ids, or 0 to S - 1) and segment embeddings
 * gathered and summed, layer-normalized with gamma and beta; its second
 * output each sequence's length, the mask's count of ones (i32; without
 * a mask 0), which Attention's mask_index takes; its third the sum. */
bool ox_op_embed_layer_norm(Imp *im, ONode *n) {
  Val *ids = ox_in_req(im, n, 0), *seg_ids = ox_in_opt(n, 1), *word = ox_in_req(im, n, 2), *pos = ox_in_req(im, n, 3),
      *seg = ox_in_opt(n, 4), *gamma = ox_in_req(im, n, 5), *beta = ox_in_req(im, n, 6), *mask = ox_in_opt(n, 7),
      *pos_ids = ox_in_opt(n, 8);
  double eps;
  int64_t index_type;
  if (!ids || !word || !pos || !gamma || !beta || !ox_attr_float(im, "epsilon", 1e-12, &eps) ||
      !ox_attr_int(im, "mask_index_type", 1, &index_type))
    return false;
  if (ids->type.rank != 2 || word->type.rank != 2 || pos->type.rank != 2 || ir_dtype_is_float(ids->type.dtype))
    return ox_bad(im, "input_ids must be integer [B, S] and the embeddings 2-d");
  if ((seg_ids != NULL) != (seg != NULL)) return ox_bad(im, "segment_ids and segment_embedding go together");
  int64_t B = ids->type.dims[0], S = ids->type.dims[1];
  Val *at = pos_ids ? pos_ids : ox_iota_along(im, 2, 1, S);
  Val *sum = ox_op2(im, OP_ADD, ox_gather(im, word, ids, 0), ox_gather(im, pos, at, 0));
  if (seg) sum = ox_op2(im, OP_ADD, sum, ox_gather(im, seg, seg_ids, 0));
  if (!sum) return false;
  n->out[0] = ox_layernorm_of(im, sum, sum->type.rank - 1, eps, gamma, beta);
  if (n->n_out > 1) {
    /* without a mask, zeros, as onnxruntime gives them */
    Val *len = mask ? ox_reduce(im, OP_REDUCE_SUM, ox_cast(im, ox_op2s(im, OP_NOT_EQUAL, mask, 0), TY_I32), 1,
                                (int64_t[]){1}, false)
                    : ox_expand(im, ox_scalar(im, 0, TY_I32), 1, &B);
    n->out[1] = len;
  }
  if (n->n_out > 2) n->out[2] = sum;
  return n->out[0] != NULL;
}

/* com.microsoft MatMulNBits (weights of 2, 4 or 8 bits in blocks along
 * K, as onnxruntime's quantizer and onnxruntime-genai write LLMs and
 * transformers.js its q4 models): A times B dequantized at import, (q -
 * zero point) x scale per block (zero points packed as B is, 2^(bits-1)
 * without them), plus the optional bias.  The weights are held
 * dequantized, in A's dtype: the product is exact to them, the memory
 * 32/bits times the file's. */
bool ox_op_matmul_nbits(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *bq = ox_in_req(im, n, 1), *sv = ox_in_req(im, n, 2), *zv = ox_in_opt(n, 3),
      *bias = ox_in_opt(n, 5);
  int64_t K, N, bits, block, accuracy;
  if (!a || !bq || !sv || !ox_attr_int(im, "K", 0, &K) || !ox_attr_int(im, "N", 0, &N) ||
      !ox_attr_int(im, "bits", 4, &bits) || !ox_attr_int(im, "block_size", 0, &block) ||
      !ox_attr_int(im, "accuracy_level", 0, &accuracy) || !ox_need_float_in(im, a))
    return false;
  if (ox_in_opt(n, 4)) return ox_bad(im, "g_idx (act-order) is not supported");
  if (bits != 2 && bits != 4 && bits != 8) return ox_bad(im, "bits %" PRId64 " is not 2, 4 or 8", bits);
  if (block < 16 || (block & (block - 1)) || K < 1 || N < 1 || K > im->fold_max / N)
    return ox_bad(im, "K %" PRId64 ", N %" PRId64 " and block_size %" PRId64 " do not describe a weight dlcc builds", K, N, block);
  if (a->type.rank < 1 || a->type.dims[a->type.rank - 1] != K) return ox_bad(im, "A's last axis is not K (%" PRId64 ")", K);
  const Tensor *b = ox_need_const(im, bq, "B"), *s = b ? ox_need_const(im, sv, "scales") : NULL,
               *z = s && zv ? ox_need_const(im, zv, "zero_points") : NULL;
  if (!s || (zv && !z)) return false;
  int64_t blocks = (K + block - 1) / block, blob = block * bits / 8, per = 8 / bits, mask = (1 << bits) - 1;
  if (b->type.dtype != TY_U8 || ir_type_numel(&b->type) != N * blocks * blob)
    return ox_bad(im, "B must be u8 [%" PRId64 ", %" PRId64 ", %" PRId64 "]", N, blocks, blob);
  if (!ir_dtype_is_float(s->type.dtype) || ir_type_numel(&s->type) != N * blocks)
    return ox_bad(im, "scales must be %" PRId64 " floats", N * blocks);
  int64_t zrow = (blocks * bits + 7) / 8;
  if (z && (z->type.dtype != TY_U8 || ir_type_numel(&z->type) != N * zrow))
    return ox_bad(im, "zero_points must be packed u8, %" PRId64 " bytes (floating-point zero points are not supported)",
                  N * zrow);
  TensorType wt = ir_type_make(TY_F32, 2, (int64_t[]){K, N});
  Val *w = ox_known_new(im, &wt);
  const uint8_t *bd = b->data, *zd = z ? z->data : NULL;
  float *wd = w->k->data;
  for (int64_t col = 0; col < N; col++)
    for (int64_t blk = 0; blk < blocks; blk++) {
      double scale = ir_tensor_get(s, col * blocks + blk), zp = (double)(1 << (bits - 1));
      if (zd) zp = (zd[col * zrow + blk / per] >> ((blk % per) * bits)) & mask;
      for (int64_t j = 0; j < block && blk * block + j < K; j++) {
        int q = (bd[(col * blocks + blk) * blob + j / per] >> ((j % per) * bits)) & mask;
        wd[(blk * block + j) * N + col] = (float)((q - zp) * scale);
      }
    }
  Val *y = ox_op2(im, OP_MATMUL, a, ox_cast(im, w, a->type.dtype));
  return (n->out[0] = bias && y ? ox_op2(im, OP_ADD, y, bias) : y) != NULL;
}

/* ---- the fused ops of onnxruntime's graph optimizer ----
 * What a model saved with SessionOptions.optimized_model_filepath at the
 * extended level holds: FusedConv and FusedGemm (Conv or Gemm, then an
 * activation), FusedMatMul (MatMul of transposed operands, scaled). */

/* x through the activation named act (empty: none), with its
 * parameters: LeakyRelu alpha, Clip min and max, HardSigmoid alpha and
 * beta, as onnxruntime's fused kernels read them. */
static Val *fused_activation(Imp *im, Val *x, const char *act, int n_params, const double *p) {
  if (!x || !*act) return x;
  static const struct {
    const char *name;
    int params;
  } acts[] = {{"Relu", 0}, {"Tanh", 0}, {"Sigmoid", 0}, {"LeakyRelu", 1}, {"Clip", 2}, {"HardSigmoid", 2}};
  size_t k = 0;
  while (k < ARRAY_LEN(acts) && strcmp(acts[k].name, act) != 0) k++;
  if (k == ARRAY_LEN(acts))
    return ox_bad(im, "activation '%s' is not supported (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid)", act),
           NULL;
  if (n_params < acts[k].params)
    return ox_bad(im, "activation %s needs %d parameters, got %d", act, acts[k].params, n_params), NULL;
  switch (k) {
  case 0: return ox_op1(im, OP_RELU, x);
  case 1: return ox_op1(im, OP_TANH, x);
  case 2: return ox_op1(im, OP_SIGMOID, x);
  case 3: return ox_op1f(im, OP_LEAKY_RELU, x, "alpha", p[0]);
  case 4: return ox_clip_of(im, x, p[0], p[1]);
  default: return ox_narrow(im, ox_hardsigmoid_of(im, ox_widen(im, x), p[0], p[1]), x->type.dtype);
  }
}

/* The node's first n_in inputs as a node of their own, imported by fn
 * (the plain op, which reads the same attributes): its one output. */
static Val *plain_op(Imp *im, ONode *n, int n_in, OpFn *fn) {
  Val *out = NULL;
  ONode sub = {.n_in = n->n_in < n_in ? n->n_in : n_in, .in = n->in, .n_out = 1, .out = &out,
               .want = (const bool[]){true}};
  return fn(im, &sub) ? out : NULL;
}

/* FusedConv: Conv, plus Z (a residual) when given, then the activation. */
bool ox_op_fused_conv(Imp *im, ONode *n) {
  const char *act;
  int n_params = 0;
  const float *fp = NULL;
  const Onnx__AttributeProto *a = ox_find_attr(im, "activation_params");
  if (!ox_attr_str(im, "activation", "", &act)) return false;
  if (a) n_params = (int)a->n_floats, fp = a->floats;
  double p[2] = {0, 0};
  for (int i = 0; i < n_params && i < 2; i++) p[i] = fp[i];
  Val *y = plain_op(im, n, 3, ox_op_conv), *z = ox_in_opt(n, 3);
  if (y && z) y = ox_op2(im, OP_ADD, y, z);
  return (n->out[0] = fused_activation(im, y, act, n_params, p)) != NULL;
}

/* FusedGemm: Gemm, then the activation (activation_alpha and _beta its
 * parameters; leaky_relu_alpha, the older name, LeakyRelu's). */
bool ox_op_fused_gemm(Imp *im, ONode *n) {
  const char *act;
  double p[3], leaky;
  if (!ox_attr_str(im, "activation", "", &act) || !ox_attr_float(im, "activation_alpha", NAN, &p[0]) ||
      !ox_attr_float(im, "activation_beta", NAN, &p[1]) || !ox_attr_float(im, "activation_gamma", NAN, &p[2]) ||
      !ox_attr_float(im, "leaky_relu_alpha", 0.01, &leaky))
    return false;
  if (strcmp(act, "LeakyRelu") == 0 && isnan(p[0])) p[0] = leaky;
  int n_params = isnan(p[0]) ? 0 : isnan(p[1]) ? 1 : 2;
  return (n->out[0] = fused_activation(im, plain_op(im, n, 3, ox_op_gemm), act, n_params, p)) != NULL;
}

/* A FusedMatMul operand: with trans_batch its first dim moved after the
 * batch dims (before the last), then with trans its last two swapped. */
static Val *fused_operand(Imp *im, Val *x, int64_t trans_batch, int64_t trans, const char *what) {
  int r = x->type.rank;
  if (trans && r < 2) return ox_bad(im, "%s is transposed but 1-d", what), NULL;
  int64_t perm[DL_MAX_RANK];
  for (int d = 0; d < r; d++) perm[d] = d;
  if (trans_batch) {
    for (int d = 0; d < r - 2; d++) perm[d] = d + 1;
    perm[r - 2] = 0;
  }
  if (trans) {
    int64_t t = perm[r - 1];
    perm[r - 1] = perm[r - 2], perm[r - 2] = t;
  }
  for (int d = 0; d < r; d++)
    if (perm[d] != d) return ox_transpose(im, x, perm);
  return x;
}

/* FusedMatMul (and TransposeMatMul, its older name): alpha times the
 * numpy matmul of the operands as fused_operand arranges them. */
bool ox_op_fused_matmul(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  int64_t ta, tb, tba, tbb;
  double alpha;
  if (!a || !b || !ox_attr_int(im, "transA", 0, &ta) || !ox_attr_int(im, "transB", 0, &tb) ||
      !ox_attr_int(im, "transBatchA", 0, &tba) || !ox_attr_int(im, "transBatchB", 0, &tbb) ||
      !ox_attr_float(im, "alpha", 1.0, &alpha) || !ox_need_float_in(im, a))
    return false;
  if ((tba || tbb) && (a->type.rank < 3 || a->type.rank != b->type.rank))
    return ox_bad(im, "transBatchA and transBatchB need A and B of one rank, 3 or more");
  Val *y = ox_op2(im, OP_MATMUL, fused_operand(im, a, tba, ta, "A"), fused_operand(im, b, tbb, tb, "B"));
  if (y && alpha != 1) y = ox_narrow(im, ox_op2s(im, OP_MUL, ox_widen(im, y), alpha), y->type.dtype);
  return (n->out[0] = y) != NULL;
}

/* T5's relative position bucket of a key j positions after its query
 * (before it when negative), as onnxruntime's kernel computes it: half
 * the buckets for each direction when bidirectional (|j| otherwise),
 * exact below half of those, logarithmic up to max_distance, in f32. */
static int64_t t5_bucket(int64_t rel, int64_t buckets, bool bidirectional, int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0) bucket += buckets;
  }
  rel = rel < 0 ? -rel : rel;
  int64_t exact = buckets / 2;
  if (rel < exact) return bucket + rel;
  int64_t large = exact + (int64_t)(logf((float)rel / (float)exact) / logf((float)max_distance / (float)exact) *
                                    (float)(buckets - exact));
  return bucket + (large < buckets - 1 ? large : buckets - 1);
}

/* RelativePositionBias (T5 through onnxruntime's optimizer): [1, heads,
 * L, L] of the bias table at each (query, key) pair's bucket.  The
 * table is declared [buckets, heads] but its data is head-major, as
 * onnxruntime's kernel reads it. */
bool ox_op_relative_position_bias(Imp *im, ONode *n) {
  Val *table = ox_in_req(im, n, 0), *qv = ox_in_req(im, n, 1), *kv = ox_in_req(im, n, 2);
  int64_t max_distance, bidirectional;
  double ql, kl;
  if (!table || !qv || !kv || !ox_attr_int(im, "max_distance", 0, &max_distance) ||
      !ox_attr_int(im, "is_bidirectional", 0, &bidirectional) || !ox_need_float_in(im, table) ||
      !ox_const_scalar(im, qv, "query_length", &ql) || !ox_const_scalar(im, kv, "key_length", &kl))
    return false;
  const TensorType *t = &table->type;
  if (t->rank != 2 || t->dims[0] < 2 || t->dims[1] < 1) return ox_bad(im, "bias_table must be [buckets, heads]");
  int64_t buckets = t->dims[0], heads = t->dims[1], L = (int64_t)ql;
  if (ql != kl) return ox_bad(im, "query_length %g and key_length %g differ (self attention only)", ql, kl);
  if (ql < 1 || (double)L != ql || L > im->fold_max / L)
    return ox_bad(im, "query_length %g is not a count dlcc builds a table for", ql);
  int64_t exact = buckets / (bidirectional ? 4 : 2);
  if (exact < 1) return ox_bad(im, "%" PRId64 " buckets leave none exact", buckets);
  if (max_distance <= exact)
    return ox_bad(im, "max_distance %" PRId64 " must exceed the exact buckets (%" PRId64 ")", max_distance, exact);
  TensorType it = ir_type_make(TY_I64, 2, (int64_t[]){L, L});
  Val *idx = ox_known_new(im, &it);
  for (int64_t i = 0; i < L; i++)
    for (int64_t j = 0; j < L; j++)
      ((int64_t *)idx->k->data)[i * L + j] = t5_bucket(j - i, buckets, bidirectional != 0, max_distance);
  Val *per_head = ox_gather(im, ox_reshape(im, table, 2, (int64_t[]){heads, buckets}), idx, 1);
  return (n->out[0] = ox_reshape(im, per_head, 4, (int64_t[]){1, heads, L, L})) != NULL;
}
