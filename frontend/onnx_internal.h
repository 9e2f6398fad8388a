/* Shared by the ONNX importer's files (frontend/onnx*.c; nothing else
 * includes it): the importer's state, the values it tracks, and the
 * builders every op's import uses.  onnx.c walks the graph and holds the
 * op table; onnx_tensor.c reads TensorProtos and files; onnx_build.c
 * makes values and nodes (folded when their operands are known);
 * onnx_ops.c, onnx_shape.c, onnx_resize.c, onnx_rnn.c, onnx_quant.c,
 * onnx_newer.c, onnx_einsum.c, onnx_signal.c and the others import the
 * ops. */
#ifndef DLCC_FRONTEND_ONNX_INTERNAL_H
#define DLCC_FRONTEND_ONNX_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/dims.h"
#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"

typedef enum { VK_TENSOR, VK_SEQ, VK_OPT } ValKind;

/* What the importer knows about one ONNX value. */
typedef struct Val {
  const char *name; /* ONNX name; NULL for temporaries */
  TensorType type;
  Value *v;           /* in the graph; NULL until a runtime op needs it */
  Tensor *k;          /* contents known at import, or NULL */
  const Tensor *hint; /* OnnxOptions.known's value for a graph input */
  /* The hint is a size, count or index: an integer input's, or computed
   * from those alone (ox_finish), so it may pass to what uses it. */
  bool hint_flows;
  /* DequantizeLinear's codes and scales when it made this value, or the
   * accumulator of an int8 product this value dequantizes (QDQ). */
  const struct Quant *dq;
  /* The narrow ONNX type (FLOAT8E4M3FN, INT4, ...) whose values this one
   * holds in its wider dtype (ox_held_format), or 0. */
  int32_t held;
  /* A sequence or an optional, resolved at import (onnx_seq.c): not an IR
   * value but a list of them.  A sequence holds n_elems values; an
   * optional 0 (absent) or 1 (a tensor or a sequence).  elem_dtype is a
   * sequence's element dtype, known even when it is empty. */
  ValKind kind;
  int n_elems;
  struct Val **elems;
  DType elem_dtype;
  bool flat_input; /* a graph input's: as long as the caller gave */
  /* Computed from a NonZero's or Compress's result of run-time length
   * (ir/bounds.c): its static dims are upper bounds, so Shape and Size
   * cannot answer from them. */
  bool run_time_len;
  /* A small integer value computed from the Shape of a value of run-time
   * length (onnx_build.c): what it is with every length at its bound
   * (upper) and at 0 (probe), so that what it sizes can take the bound
   * and mark the length. */
  const Tensor *upper, *probe;
} Val;

typedef struct Entry {
  const char *name;
  Val *val;
  int producer; /* node index; -1 for graph inputs and initializers */
  int scope;    /* 0: the model's graph; deeper: a subgraph being imported */
  struct Entry *next;
} Entry;

typedef struct Imp {
  Ctx *c;
  Graph *g;
  const char *file; /* for messages */
  const char *dir;  /* external data */
  const SrcFile *src;
  const OnnxOptions *opt;
  DimBinder dims; /* free input dims: -D and the given inputs' shapes */
  /* One-element integer or bool graph inputs whose value a -D fixes at
   * import (fixed_input, onnx.c): a run checks it gives that value. */
  struct FixedInput *fixed;
  int64_t opset;
  const char *no_onnx_opset; /* the model imports only this preview domain: no ONNX op may appear */
  /* Every ONNX name, hashed; the table doubles as it fills, so that a
   * model's names are found in constant time however many there are. */
  Entry **buckets;
  uint32_t n_buckets, n_entries;
  /* Every known tensor (malloc'd), freed at the end unless a param took it. */
  Tensor **owned;
  int n_owned, cap_owned;
  /* Params in graph order; each is a Val whose k is its data. */
  Val **params;
  int n_params, cap_params;
  int n_temps;
  /* The node being imported. */
  const Onnx__NodeProto *np;
  int node_index;
  /* The branch being imported of an If decided at run time (NULL: none):
   * the nodes built now carry it (ir/guard.c). */
  const Guard *guard;
  bool *attr_used;
  SrcLoc loc;
  int64_t fold_max;
  int max_nodes; /* OnnxOptions.max_nodes, or IR_MAX_NODES */
  /* The decoded model, its decoder's allocator (which notes a failure),
   * and where an allocation failure unwinds to (onnx.c). */
  Onnx__ModelProto *m;
  ProtobufCAllocator pb;
  bool pb_failed;
  jmp_buf *unwind;
  /* Subgraphs (If, Loop, Scan): the depth being imported, and the names
   * each scope added, removed when it ends. */
  int scope;
  Entry **scoped;
  int n_scoped, cap_scoped;
  /* Random draws (onnx_random.c): the training state params they draw
   * with (dlcc.seed, dlcc.step, dlcc.first_sample), made by the first,
   * and the count of draws so far (each its own stream). */
  Value *rng_state[3];
  int n_draws;
} Imp;

typedef struct Emit {
  Node *n;
  Graph *fold; /* non-NULL: evaluated at once */
  int n_in;
  Val **in;
} Emit;

typedef struct ONode {
  int n_in;
  Val **in; /* NULL where the name is empty */
  int n_out;
  Val **out;
  const bool *want; /* output named (used) */
} ONode;

typedef struct Window {
  int spatial;                      /* 1, 2 or 3: the ONNX node's */
  int nsp;                          /* 2 or 3: the IR op's (1-d is 2-d of height 1) */
  int64_t kernel[3], stride[3], dil[3];
  int64_t pad[6];                   /* the nsp starts, then the ends: 2-d [top, left, bottom, right] */
} Window;
/* Imports one ONNX node into n->out; false after reporting. */
typedef bool OpFn(Imp *im, ONode *n);

/* onnx_tensor.c: dtypes and files. */
extern const char ox_dtypes_we_have[];
const char *ox_onnx_type_name(int32_t t);
bool ox_dtype_from_onnx(int32_t t, DType *out);
/* A narrow ONNX type (float8, float4, int4, int2) and the dtype that
 * holds its values; NULL for the others. */
const IrNarrow *ox_held_format(int32_t t, DType *storage);
void *ox_read_whole(const char *path, size_t *len, char *err, size_t errlen);
char *ox_dir_of(Arena *a, const char *path);
bool ox_tensor_from_proto(const Onnx__TensorProto *t, const char *dir, Tensor *out, char *err, size_t errlen);

/* onnx_build.c: names, values, nodes, attributes and operands. */
Entry *ox_find_entry(Imp *im, const char *name);
Entry *ox_add_entry(Imp *im, const char *name, int producer);
/* A scope for a subgraph's names: ox_scope_end(im, mark) removes every
 * name added since ox_scope_begin returned mark. */
int ox_scope_begin(Imp *im);
void ox_scope_end(Imp *im, int mark);
bool ox_bad(Imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "model.onnx: node 3 'If_0' (If)": the node being imported, as ox_bad
 * names it. */
void ox_node_str(const Imp *im, char *buf, size_t len);
/* Reports that an allocation of what failed and unwinds out of the
 * import (it never returns). */
_Noreturn void ox_oom(Imp *im, const char *what);
Val *ox_known(Imp *im, Tensor t);
Val *ox_known_new(Imp *im, const TensorType *t);
/* A tensor with a dim of 0 (ONNX's way, besides an empty name, to leave
 * out Resize's roi and scales). */
bool ox_is_empty(const Val *v);
Val *ox_scalar(Imp *im, double x, DType dt);
Val *ox_ints_val(Imp *im, int n, const int64_t *x);
Value *ox_use(Imp *im, Val *v);
/* The i64 param `name` of the training state (docs/training.md), made on
 * first use: zero until a step, a checkpoint or dlc_set_weight sets it.
 * slot numbers it in Imp.rng_state.  NULL after reporting a clash with a
 * name of the model. */
Value *ox_state_param(Imp *im, int slot, const char *name);
/* Whether v is an initializer of the model (a weight by its name). */
bool ox_is_initializer(Imp *im, const Val *v);
/* Whether v is a weight: a float initializer, of more than one value or
 * named as a module's parameter (a single value is otherwise a constant
 * the exporter kept).  Weights stay params: never folded, never consts. */
bool ox_is_weight(Imp *im, const Val *v);
/* Whether name is a module's parameter path as PyTorch's state_dict
 * spells it ("fc.bias", "layers.0.norm.weight"). */
bool ox_module_path(const char *name);
Val *ox_val_of(Imp *im, Value *x);
Node *ox_begin(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in);
bool ox_finish(Imp *im, Emit *e, Val **out);
Val *ox_emit1(Imp *im, Emit *e);
Val *ox_op1(Imp *im, OpKind op, Val *x);
Val *ox_op2(Imp *im, OpKind op, Val *a, Val *b);
Val *ox_op2s(Imp *im, OpKind op, Val *a, double s);
Val *ox_op1f(Imp *im, OpKind op, Val *x, const char *attr, double v);
bool ox_same_dims(const TensorType *t, int rank, const int64_t *dims);
Val *ox_reshape(Imp *im, Val *x, int rank, const int64_t *dims);
/* x broadcast to dims (OP_EXPAND; x itself when it has them). */
Val *ox_expand(Imp *im, Val *x, int rank, const int64_t *dims);
Val *ox_transpose(Imp *im, Val *x, const int64_t *perm);
Val *ox_cast(Imp *im, Val *x, DType dt);
Val *ox_widen(Imp *im, Val *x);
Val *ox_narrow(Imp *im, Val *y, DType dt);
Val *ox_slice_axis(Imp *im, Val *x, int axis, int64_t start, int64_t end, int64_t step);
Val *ox_concat(Imp *im, int n_in, Val **in, int axis);
Val *ox_reduce(Imp *im, OpKind op, Val *x, int n_axes, const int64_t *axes, bool keep);
/* gelu of x, approximate "none" (erf) or "tanh" (onnx_ops.c). */
Val *ox_gelu(Imp *im, Val *x, const char *approximate);
/* x normalized over its dims from axis with eps: one layernorm (or
 * rms_norm, no bias), scale and bias its inputs where they have exactly
 * the normalized dims, else a mul and an add after it (onnx_ops.c). */
Val *ox_layernorm_of(Imp *im, Val *x, int axis, double eps, Val *scale, Val *bias);
Val *ox_rms_norm_of(Imp *im, Val *x, int axis, double eps, Val *scale);
/* The position of the first largest value along axis, as i64. */
Val *ox_argmax(Imp *im, Val *x, int axis, bool keep);
Val *ox_gather(Imp *im, Val *data, Val *idx, int axis);
Val *ox_reverse_axis(Imp *im, Val *x, int axis);
Val *ox_iota_along(Imp *im, int r, int axis, int64_t len);
const Onnx__AttributeProto *ox_find_attr(Imp *im, const char *name);
bool ox_attr_int(Imp *im, const char *name, int64_t def, int64_t *out);
bool ox_attr_float(Imp *im, const char *name, double def, double *out);
bool ox_attr_str(Imp *im, const char *name, const char *def, const char **out);
bool ox_attr_ints(Imp *im, const char *name, int *n, const int64_t **v);
bool ox_attr_only(Imp *im, const char *name, int64_t def, int64_t allowed);
Val *ox_in_opt(const ONode *n, int i);
Val *ox_in_req(Imp *im, const ONode *n, int i);
const Tensor *ox_need_const(Imp *im, Val *v, const char *what);
bool ox_const_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out);
/* ox_const_ints, or of a value with upper bounds (Val.upper) those, and
 * in dynamic[i] whether element i depends on a run-time length. */
bool ox_bounded_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out, bool *dynamic);
/* x (sized by an upper bound) with element elem of the integer value len
 * as its run-time length on axis (ir/bounds.c's with_length). */
Val *ox_with_length(Imp *im, Val *x, int axis, Val *len, int64_t elem);
/* onnx_shape.c: x's shape computed at run time, x of run-time length. */
Val *ox_run_time_shape(Imp *im, Val *x);
bool ox_const_scalar(Imp *im, Val *v, const char *what, double *out);
bool ox_norm_axis(Imp *im, int64_t a, int rank, int *out);
bool ox_norm_axes(Imp *im, int n, const int64_t *in, int rank, int *n_out, int64_t *out);
bool ox_need_float_in(Imp *im, Val *x);

/* onnx_ops.c: elementwise, products, convolution, pooling,
 * normalization, losses, reductions. */
OpFn ox_op_unary, ox_op_leaky_relu, ox_op_gelu, ox_op_elu_family, ox_op_hardsigmoid, ox_op_softplus,
    ox_op_softsign, ox_op_prelu, ox_op_clip, ox_op_binary, ox_op_mod, ox_op_variadic, ox_op_logic, ox_op_bit_shift, ox_op_bitcast,
    ox_op_isinf, ox_op_where, ox_op_thresholded_relu, ox_op_shrink, ox_op_trilu, ox_op_identity,
    ox_op_dropout, ox_op_cast, ox_op_matmul, ox_op_gemm, ox_op_conv, ox_op_conv_transpose, ox_op_pool,
    ox_op_global_pool, ox_op_batchnorm, ox_op_layernorm, ox_op_rms_norm, ox_op_group_norm, ox_op_lrn, ox_op_instancenorm, ox_op_softmax,
    ox_op_nll_loss, ox_op_softmax_ce_loss, ox_op_reduce, ox_op_argmax, ox_op_hardmax;
Val *ox_neg_exp_side(Imp *im, Val *x, double alpha, double scale);
Val *ox_hardsigmoid_of(Imp *im, Val *x, double alpha, double beta);
/* x clipped to [lo, hi] (infinities: no bound; lo > hi: everything hi). */
Val *ox_clip_of(Imp *im, Val *x, double lo, double hi);
Val *ox_softplus_of(Imp *im, Val *x);
Val *ox_softsign_of(Imp *im, Val *x);
Val *ox_where(Imp *im, Val *cond, Val *a, Val *b);
bool ox_window_attrs(Imp *im, const Val *x, const int64_t *wkernel, Window *w);
Val *ox_to_2d(Imp *im, Val *x);
Val *ox_from_2d(Imp *im, Val *y, int spatial);

/* onnx_shape.c: shapes, data movement, indexing, values known at import. */
OpFn ox_op_reshape, ox_op_flatten, ox_op_squeeze, ox_op_unsqueeze, ox_op_transpose, ox_op_concat, ox_op_split,
    ox_op_slice, ox_op_gather, ox_op_gather_elements, ox_op_gather_nd, ox_op_scatter_elements,
    ox_op_scatter_nd, ox_op_topk, ox_op_one_hot, ox_op_eye_like, ox_op_expand, ox_op_tile, ox_op_pad,
    ox_op_depth_space, ox_op_constant, ox_op_constant_of_shape, ox_op_shape, ox_op_size, ox_op_range,
    ox_op_reverse_sequence, ox_op_tensor_scatter;

/* onnx_resize.c: Resize, Upsample and GridSample. */
OpFn ox_op_resize, ox_op_grid_sample, ox_op_roi_align, ox_op_deform_conv;

/* onnx_newer.c: newer opsets' ops by decomposition. */
/* x's running sums (or products) along axis, as CumSum's attributes say. */
Val *ox_cumulative(Imp *im, Val *x, int axis, bool prod, bool exclusive, bool reverse);
OpFn ox_op_mish, ox_op_swish, ox_op_swiglu, ox_op_affine_grid, ox_op_mvn, ox_op_lp_norm, ox_op_cumulative, ox_op_center_crop_pad, ox_op_window,
    ox_op_rotary, ox_op_causal_conv, ox_op_det;
/* onnx_einsum.c */
OpFn ox_op_einsum;
/* onnx_select.c: NonZero, Compress, Unique of values known at import. */
OpFn ox_op_nonzero, ox_op_compress, ox_op_unique, ox_op_nms;
/* onnx_random.c: the random ops, and Dropout in training mode with a
 * ratio p (a constant above 0). */
OpFn ox_op_random, ox_op_bernoulli, ox_op_multinomial;
bool ox_training_dropout(Imp *im, ONode *n, Val *x, double p);
/* onnx_text.c: TfIdfVectorizer over integer tokens. */
OpFn ox_op_tfidf;
/* onnx_signal.c: DFT, STFT, Col2Im, MaxUnpool, MelWeightMatrix. */
OpFn ox_op_dft, ox_op_stft, ox_op_col2im, ox_op_max_unpool, ox_op_mel_weight_matrix;

/* onnx.c: a graph's nodes in the current scope. */
bool ox_import_nodes(Imp *im, const Onnx__GraphProto *gp);

/* onnx_control.c: If, Loop and Scan. */
OpFn ox_op_if, ox_op_loop, ox_op_scan;

/* onnx_seq.c: sequences and optionals, resolved at import. */
OpFn ox_op_sequence_construct, ox_op_sequence_empty, ox_op_sequence_at, ox_op_sequence_insert, ox_op_sequence_erase,
    ox_op_sequence_length, ox_op_split_to_sequence, ox_op_concat_from_sequence, ox_op_sequence_map, ox_op_optional,
    ox_op_optional_has_element, ox_op_optional_get_element;
/* True for the ops that take a sequence or optional operand. */
bool ox_takes_containers(const char *op_type);
const char *ox_kind_name(const Val *v);
/* A graph input of sequence or optional type, flattened: a sequence
 * "x" of n elements is the inputs "x.0" ... "x.<n-1>", n being how many
 * of them the caller gives; an optional "x" is present when the caller
 * gives "x" (or, holding a sequence, "x.0"...). */
bool ox_container_input(Imp *im, const Onnx__ValueInfoProto *vi);
/* The tensors a graph output flattens to (a sequence's elements, an
 * optional's element or nothing), with their names; false after
 * reporting. */
bool ox_flatten_output(Imp *im, Val *v, const char *name, int *n, Val ***vals, const char ***names);
/* onnx.c: a graph input's tensor type, its free dims bound as for any
 * input; without symbols a dim_param is no symbol (a sequence's
 * elements may differ where their type says "N"). */
bool ox_tensor_input_type(Imp *im, const char *name, const Onnx__TypeProto *tp, bool symbols, TensorType *out,
                          volatile int32_t *held);
/* onnx_control.c: a subgraph imported in a scope of its own, its inputs
 * bound by position to in[0..n_in), its outputs into out. */
bool ox_import_subgraph(Imp *im, const Onnx__GraphProto *gp, const char *what, int n_in, Val **in, Val **out);

/* onnx_attention.c: Attention as its unfused graph; LinearAttention
 * unrolled over time; the preview domain's FlexAttention. */
OpFn ox_op_attention, ox_op_linear_attention, ox_op_flex_attention;
OpFn ox_op_adagrad, ox_op_adam, ox_op_momentum; /* onnx_training.c */
OpFn ox_op_binarizer, ox_op_array_feature_extractor, ox_op_scaler, ox_op_normalizer, ox_op_linear_regressor,
    ox_op_linear_classifier, ox_op_svm_classifier, ox_op_svm_regressor, ox_op_imputer, ox_op_label_encoder,
    ox_op_one_hot_encoder, ox_op_zip_map; /* onnx_ml.c */
/* y through a check that ok (one bool) holds where the node being
 * imported runs, the run failing with msg where it does not
 * (onnx_control.c); NULL after reporting. */
Val *ox_check_at_run_time(Imp *im, Val *y, Val *ok, const char *msg);
/* Q [B, L, heads * H], K and V [B, S, heads * H] through attention, a
 * mask (bool, or added to the scores) broadcast to [B, heads, L, S] or
 * NULL, scale (0: 1/sqrt(H)): Y [B, L, heads * H] (onnx_attention.c). */
Val *ox_attention_3d(Imp *im, Val *q, Val *k, Val *v, int64_t heads, Val *mask, double scale, bool causal);
/* Q [B, N, L, H] over K and V [B, Nk, S, H] (N a multiple of Nk, each K
 * and V head serving N / Nk query heads), bias added to the scores
 * (broadcast to [B, N, L, S]; NULL: none), scale (0: 1/sqrt(H), as
 * onnxruntime's attributes default; a negative one is used), soft
 * cap (0: none), sink [N] (a logit a head that joins each row's softmax;
 * NULL: none), the softmax in softmax_dt: Y [B, N, L, H]
 * (onnx_attention.c). */
Val *ox_attention_heads(Imp *im, Val *q, Val *k, Val *v, Val *bias, double scale, double softcap, Val *sink,
                        DType softmax_dt);
/* h [B, S, heads, D] with its first rdim values of each head rotated by
 * the angles whose cos and sin are [B, S, rdim / 2]: halves, or even
 * and odd elements when interleaved (onnx_newer.c). */
Val *ox_rotate(Imp *im, Val *h, Val *cos_bs, Val *sin_bs, int64_t rdim, bool interleaved);
/* com.microsoft Attention's work after its input projection proj [B, S,
 * q + k + v] (the bias added): heads, mask_index, attention bias,
 * unidirectional, from the node's attributes (onnx_contrib.c). */
bool ox_ms_attention_of(Imp *im, ONode *n, Val *proj, Val *mask_index, Val *past, Val *attn_bias);
OpFn ox_op_ms_gelu, ox_op_quick_gelu, ox_op_skip_layer_norm, ox_op_simplified_layer_norm, ox_op_ms_attention,
    ox_op_embed_layer_norm, ox_op_matmul_nbits, ox_op_fused_conv, ox_op_fused_gemm, ox_op_fused_matmul,
    ox_op_relative_position_bias;
/* (onnx_contrib.c, above; onnx_kv_cache.c, below) */
OpFn ox_op_group_query_attention, ox_op_multi_head_attention, ox_op_ms_rotary; /* onnx_kv_cache.c */
OpFn ox_op_tree_ensemble, ox_op_tree_ensemble_regressor, ox_op_tree_ensemble_classifier; /* onnx_trees.c */
/* The ML domain's post_transform (onnx_ml.c): its attribute, and a
 * [.., K] value's rows through it, as onnxruntime computes them. */
enum { ML_POST_NONE, ML_POST_LOGISTIC, ML_POST_SOFTMAX, ML_POST_SOFTMAX_ZERO, ML_POST_PROBIT };
bool ox_ml_post_attr(Imp *im, int *post);
Val *ox_ml_post(Imp *im, Val *y, int post);
bool ox_ml_labels(Imp *im, const char *ints_name, const char *strings_name, int64_t *n, const int64_t **labels);

/* onnx_rnn.c: RNN, GRU and LSTM, unrolled. */
OpFn ox_op_rnn;

/* onnx_quant.c: QDQ and QOperator int8 models. */
OpFn ox_op_quantize_linear, ox_op_dequantize_linear, ox_op_dynamic_quantize_linear, ox_op_conv_integer,
    ox_op_qlinear_conv, ox_op_matmul_integer, ox_op_qlinear_matmul, ox_op_conv_qdq, ox_op_matmul_qdq,
    ox_op_gemm_qdq, ox_op_qlinear_binary, ox_op_qlinear_unary, ox_op_qlinear_concat, ox_op_qgemm,
    ox_op_dynamic_quantize_matmul, ox_op_matmul_integer_to_float, ox_op_qattention, ox_op_qembed_layer_norm;

#endif
