/* ONNX import: takes a serialized ModelProto (decoded by protobuf-c from
 * the onnx.proto of the installed onnx package) and returns a verified
 * graph plus the data of its params.  Each ONNX node is mapped onto the
 * op table, decomposed where ONNX has no single equivalent (Gemm with
 * alpha/beta, Elu, Split, Tile, ...).  Every value whose contents are
 * known at import (initializers, Constant, Shape of a static shape and
 * everything computed from those) is carried as host data and each IR node
 * whose operands are all known is evaluated at once by the reference
 * interpreter, so Shape -> Gather -> Concat -> Reshape chains and gate
 * reordering of constant LSTM weights leave no trace in the graph.  Known
 * values that reach a runtime op become params named after the ONNX value
 * (or splat consts).  This file holds the op table and the walk over the
 * graph; the builders and the ops are in onnx_*.c (onnx_internal.h). */
#include "config.h"

#include "frontend/onnx.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#if HAVE_ONNX

#include "frontend/onnx_internal.h"

/* Folding evaluates nodes on the host: past this many elements a node
 * stays in the graph (OnnxOptions.max_fold_elems overrides it). */
#define FOLD_MAX_ELEMS ((int64_t)1 << 26)

/* ---- the op table ---- */

typedef struct OpEntry {
  const char *name;
  OpFn *fn;
  const char *note; /* limits, for --onnx-support */
} OpEntry;

/* The random ops' limit, said once (onnx_random.c). */
#define DRAW "dlcc's Philox draw (docs/onnx.md): new each training step, the same each run otherwise; seed not used"

static const OpEntry onnx_ops[] = {
    {"Abs", ox_op_unary, NULL},
    {"Acos", ox_op_unary, NULL},
    {"Acosh", ox_op_unary, NULL},
    {"Add", ox_op_binary, "NumPy broadcasting"},
    {"AffineGrid", ox_op_affine_grid, "2-d and 3-d, align_corners; constant size"},
    {"And", ox_op_logic, NULL},
    {"ArgMax", ox_op_argmax, NULL},
    {"BitCast", ox_op_bitcast, "between dtypes of one size"},
    {"BitShift", ox_op_bit_shift, NULL},
    {"BitwiseAnd", ox_op_logic, NULL},
    {"BitwiseNot", ox_op_logic, NULL},
    {"BitwiseOr", ox_op_logic, NULL},
    {"BitwiseXor", ox_op_logic, NULL},
    {"Attention", ox_op_attention,
     "opsets 23-25 as its unfused graph: 3-d and 4-d, scale, causal, bool and additive masks (shorter "
     "ones padded), past key/value, grouped KV heads, softcap, softmax_precision, qk_matmul_output "
     "modes, nonpad_kv_seqlen, sliding windows"},
    {"ArgMin", ox_op_argmax, NULL},
    {"Asin", ox_op_unary, NULL},
    {"Asinh", ox_op_unary, NULL},
    {"Atan", ox_op_unary, NULL},
    {"Atanh", ox_op_unary, NULL},
    {"AveragePool", ox_op_pool, "1-d and 2-d; pads less than the kernel (past half of it: an explicit pad)"},
    {"BatchNormalization", ox_op_batchnorm, "inference, and training_mode=1: batch statistics, the running ones moved by momentum as outputs 2 and 3"},
    {"Bernoulli", ox_op_bernoulli, DRAW},
    {"BlackmanWindow", ox_op_window, "a constant: size must be known"},
    {"Cast", ox_op_cast,
     "to FLOAT, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64, BOOL (nonzero is true; "
     "a float to UINT8 truncates and wraps, as onnxruntime)"},
    {"CastLike", ox_op_cast, NULL},
    {"CausalConvWithState", ox_op_causal_conv,
     "depthwise, its past state joined on the left (zeros without one); activation none, silu or swish"},
    {"Ceil", ox_op_unary, NULL},
    {"Celu", ox_op_elu_family, NULL},
    {"Clip", ox_op_clip, "min and max constant or computed at run time (one value each)"},
    {"Col2Im", ox_op_col2im, "1 to 3 spatial dims, constant image and block shapes; a grouped conv_transpose"},
    {"Concat", ox_op_concat, NULL},
    {"ConcatFromSequence", ox_op_concat_from_sequence, "a sequence known at import; new_axis"},
    {"Constant", ox_op_constant, "value, value_float(s), value_int(s)"},
    {"ConstantOfShape", ox_op_constant_of_shape, "constant shape"},
    {"Conv", ox_op_conv_qdq,
     "1-d and 2-d, any auto_pad, pads, strides, dilations, group; of "
     "DequantizeLinear's x and w: an int8 convolution"},
    {"ConvInteger", ox_op_conv_integer, "UINT8/INT8, zero points per tensor (w: or per channel; x: or computed at run time)"},
    {"ConvTranspose", ox_op_conv_transpose,
     "1-d and 2-d, any auto_pad, pads or output_shape, strides, dilations, group, "
     "output_padding"},
    {"Compress", ox_op_compress, "a gather; a condition computed at run time gives a run-time length"},
    {"Cos", ox_op_unary, NULL},
    {"CenterCropPad", ox_op_center_crop_pad, "constant shape; a slice and a zero pad"},
    {"CumProd", ox_op_cumulative, "constant axis, exclusive, reverse; log2(n) shifted products"},
    {"CumSum", ox_op_cumulative, "constant axis, exclusive, reverse; log2(n) shifted sums"},
    {"Cosh", ox_op_unary, NULL},
    {"DeformConv", ox_op_deform_conv, "2-d; groups, offset groups, mask, bias (bilinear samples gathered, then a GEMM)"},
    {"DepthToSpace", ox_op_depth_space, "DCR and CRD"},
    {"DFT", ox_op_dft,
     "opsets 17 and 20: a constant length and axis, inverse, onesided (irfft); an O(N^2) matmul by "
     "a table of twiddles"},
    {"DequantizeLinear", ox_op_dequantize_linear,
     "UINT8, INT8, UINT16, INT16, INT32; per tensor, per axis or blocked; a scale and zero point computed at run "
     "time (one value or one per slice) as elementwise ops"},
    {"Det", ox_op_det, "matrices up to 4x4 (Leibniz's formula)"},
    {"Div", ox_op_binary, NULL},
    {"Dropout", ox_op_dropout, "inference: the identity, its mask all true; training_mode with a constant ratio: dlcc's dropout (docs/training.md)"},
    {"DynamicQuantizeLinear", ox_op_dynamic_quantize_linear, "FLOAT to UINT8, its scale and zero point computed at run time"},
    {"Einsum", ox_op_einsum, "one or two operands: diagonals, sums, one batched matmul"},
    {"Elu", ox_op_elu_family, NULL},
    {"Equal", ox_op_logic, NULL},
    {"Erf", ox_op_unary, NULL},
    {"Exp", ox_op_unary, NULL},
    {"Expand", ox_op_expand, "constant shape"},
    {"EyeLike", ox_op_eye_like, "folded at import"},
    {"Flatten", ox_op_flatten, NULL},
    {"Floor", ox_op_unary, NULL},
    {"Gather", ox_op_gather, "constant or runtime indices"},
    {"GatherElements", ox_op_gather_elements, "constant or runtime indices"},
    {"GatherND", ox_op_gather_nd, "batch_dims"},
    {"Gelu", ox_op_gelu, "approximate none or tanh"},
    {"Gemm", ox_op_gemm_qdq,
     "transA, transB, alpha, beta; of DequantizeLinear's A and B: an int8 "
     "linear layer"},
    {"GlobalAveragePool", ox_op_global_pool, NULL},
    {"GlobalLpPool", ox_op_global_pool, "as a sum of |x|^p and its p-th root"},
    {"GlobalMaxPool", ox_op_global_pool, NULL},
    {"Greater", ox_op_logic, NULL},
    {"GreaterOrEqual", ox_op_logic, NULL},
    {"GridSample", ox_op_grid_sample, "4-d; bilinear, nearest, bicubic; zeros, border, reflection padding"},
    {"GroupNormalization", ox_op_group_norm, "stash_type=1; scale and bias per channel (opset 21) or per group (18)"},
    {"GRU", ox_op_rnn,
     "forward/reverse/bidirectional, layout 0/1; unrolled (up to 1024 steps) for "
     "linear_before_reset=0, clip, other activations, initial state, sequence_lens"},
    {"HammingWindow", ox_op_window, "a constant: size must be known"},
    {"HannWindow", ox_op_window, "a constant: size must be known"},
    {"Hardmax", ox_op_hardmax, "argmax and an equal to an iota"},
    {"HardSigmoid", ox_op_hardsigmoid, NULL},
    {"HardSwish", ox_op_unary, NULL},
    {"Identity", ox_op_identity, NULL},
    {"If", ox_op_if,
     "a condition known at import imports the branch taken; else the plan runs the branch the run takes "
     "(one type per output), and a branch that cannot be compiled fails the run that takes it"},
    {"InstanceNormalization", ox_op_instancenorm, NULL},
    {"IsInf", ox_op_isinf, "detect_negative, detect_positive"},
    {"IsNaN", ox_op_logic, NULL},
    {"LayerNormalization", ox_op_layernorm, "stash_type=1; Mean and InvStdDev outputs too"},
    {"LeakyRelu", ox_op_leaky_relu, NULL},
    {"Less", ox_op_logic, NULL},
    {"LessOrEqual", ox_op_logic, NULL},
    {"LinearAttention", ox_op_linear_attention,
     "linear, gated, delta and gated_delta; GQA; unrolled over time (at most 1,024 steps)"},
    {"Log", ox_op_unary, NULL},
    {"LogSoftmax", ox_op_softmax, NULL},
    {"Loop", ox_op_loop, "unrolled (up to 1024 steps); an end decided at run time: to the trip count or its bound, the steps past the end skipped"},
    {"LRN", ox_op_lrn, "as x^2, an avgpool2d over channels, pow and div"},
    {"LpNormalization", ox_op_lp_norm, "p 1 or 2"},
    {"LpPool", ox_op_pool, "as an avgpool of |x|^p times the window size, to the 1/p"},
    {"LSTM", ox_op_rnn,
     "forward/reverse/bidirectional, layout 0/1; unrolled (up to 1024 steps) for "
     "peepholes, clip, input_forget, other activations, initial state, sequence_lens"},
    {"MatMul", ox_op_matmul_qdq, "of DequantizeLinear's A and B: an int8 matmul"},
    {"MatMulInteger", ox_op_matmul_integer,
     "UINT8/INT8, zero points per tensor, per row of A, per column of B, or computed at run time"},
    {"Max", ox_op_variadic, NULL},
    {"MaxPool", ox_op_pool,
     "1-d, 2-d and 3-d; Indices (not with ceil_mode, up to 1024 taps); pads less than the kernel (past half of it: an explicit pad)"},
    {"MaxUnpool", ox_op_max_unpool, "output_shape constant; a scatter_nd into zeros"},
    {"Mean", ox_op_variadic, NULL},
    {"MeanVarianceNormalization", ox_op_mvn, NULL},
    {"MelWeightMatrix", ox_op_mel_weight_matrix, "known operands: a constant, as the reference computes it"},
    {"Min", ox_op_variadic, NULL},
    {"Mish", ox_op_mish, NULL},
    {"Mod", ox_op_mod, "fmod 0 and 1, integers and floats"},
    {"Mul", ox_op_binary, NULL},
    {"Multinomial", ox_op_multinomial, DRAW},
    {"Neg", ox_op_unary, NULL},
    {"NegativeLogLikelihoodLoss", ox_op_nll_loss, "reduction none/sum/mean, weight, ignore_index"},
    {"NonMaxSuppression", ox_op_nms, "rows of run-time length; max_output_boxes_per_class known at import bounds them"},
    {"NonZero", ox_op_nonzero, "a constant when its input is known at import, else a run-time length"},
    {"Not", ox_op_logic, NULL},
    {"OneHot", ox_op_one_hot, "constant depth; equal to an iota and a where"},
    {"Optional", ox_op_optional, "resolved at import: present with an input, absent without"},
    {"OptionalGetElement", ox_op_optional_get_element, "an optional present at import (a tensor or sequence passes)"},
    {"OptionalHasElement", ox_op_optional_has_element, "folded at import"},
    {"Or", ox_op_logic, NULL},
    {"Pad", ox_op_pad, "modes constant, reflect, edge (and wrap from opset 19); constant pads"},
    {"Pow", ox_op_binary, NULL},
    {"PRelu", ox_op_prelu, NULL},
    {"QLinearConv", ox_op_qlinear_conv, "UINT8/INT8; w scales and zero points per tensor or per channel"},
    {"QLinearMatMul", ox_op_qlinear_matmul, "UINT8/INT8; a per tensor, b per tensor or per column"},
    {"QuantizeLinear", ox_op_quantize_linear,
     "to UINT8, INT8, UINT16 or INT16, per tensor, per axis or blocked (saturating, "
     "round half to even); a scale and zero point computed at run time as elementwise ops"},
    {"RandomNormal", ox_op_random, DRAW},
    {"RandomNormalLike", ox_op_random, DRAW},
    {"RandomUniform", ox_op_random, DRAW},
    {"RandomUniformLike", ox_op_random, DRAW},
    {"Range", ox_op_range, "constant inputs"},
    {"Reciprocal", ox_op_unary, NULL},
    {"ReduceL1", ox_op_reduce, NULL},
    {"ReduceL2", ox_op_reduce, NULL},
    {"ReduceLogSum", ox_op_reduce, NULL},
    {"ReduceLogSumExp", ox_op_reduce, NULL},
    {"ReduceMax", ox_op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceMean", ox_op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceMin", ox_op_reduce, NULL},
    {"ReduceProd", ox_op_reduce, NULL},
    {"ReduceSum", ox_op_reduce, "axes as attribute or constant input, per opset"},
    {"ReduceSumSquare", ox_op_reduce, NULL},
    {"RMSNormalization", ox_op_rms_norm, "stash_type=1"},
    {"RoiAlign", ox_op_roi_align, "avg and max, half_pixel and output_half_pixel; sampling_ratio given (> 0)"},
    {"RotaryEmbedding", ox_op_rotary, "3-d and 4-d X, position_ids or per-position caches, interleaved, "
     "rotary_embedding_dim"},
    {"RNN", ox_op_rnn, "unrolled (up to 1024 steps); the activations, clip, initial state, sequence_lens"},
    {"Relu", ox_op_unary, NULL},
    {"Round", ox_op_unary, "half to even"},
    {"Scatter", ox_op_scatter_elements, "opset 9-10: ScatterElements without reduction"},
    {"ScatterElements", ox_op_scatter_elements, "reduction none, add, mul, max, min"},
    {"ScatterND", ox_op_scatter_nd, "reduction none, add, mul, max, min"},
    {"Reshape", ox_op_reshape, "constant shape (0 and -1 rules)"},
    {"Resize", ox_op_resize,
     "constant scales or sizes (and roi); every mode, coordinate transformation and nearest_mode, "
     "cubic_coeff_a, exclude_outside, extrapolation_value, antialias, axes, "
     "keep_aspect_ratio_policy"},
    {"ReverseSequence", ox_op_reverse_sequence, "batch_axis and time_axis 0 and 1; run-time lengths"},
    {"Scan", ox_op_scan, "opset 9 on; unrolled over the scan axis (up to 1024 steps)"},
    {"Selu", ox_op_elu_family, NULL},
    {"SequenceAt", ox_op_sequence_at, "a position known at import (negative from the end)"},
    {"SequenceConstruct", ox_op_sequence_construct, "a list of values at import"},
    {"SequenceEmpty", ox_op_sequence_empty, NULL},
    {"SequenceErase", ox_op_sequence_erase, "a position known at import"},
    {"SequenceInsert", ox_op_sequence_insert, "a position known at import"},
    {"SequenceLength", ox_op_sequence_length, "folded at import"},
    {"SequenceMap", ox_op_sequence_map, "the body imported once per element"},
    {"Shrink", ox_op_shrink, NULL},
    {"Shape", ox_op_shape, "folded at import"},
    {"Sigmoid", ox_op_unary, NULL},
    {"Sign", ox_op_unary, NULL},
    {"SimplifiedLayerNormalization", ox_op_simplified_layer_norm, "onnxruntime's; no inverse deviation output"},
    {"Sin", ox_op_unary, NULL},
    {"Sinh", ox_op_unary, NULL},
    {"Size", ox_op_size, "folded at import"},
    {"Slice", ox_op_slice, "constant starts/ends/axes/steps, negative steps too"},
    {"Softmax", ox_op_softmax, "per-axis from opset 13, 2-d coercion before"},
    {"SoftmaxCrossEntropyLoss", ox_op_softmax_ce_loss, "as log_softmax and NegativeLogLikelihoodLoss"},
    {"Softplus", ox_op_softplus, NULL},
    {"Softsign", ox_op_softsign, NULL},
    {"SpaceToDepth", ox_op_depth_space, "mode DCR and CRD"},
    {"Split", ox_op_split, NULL},
    {"SplitToSequence", ox_op_split_to_sequence, "constant split; keepdims"},
    {"Sqrt", ox_op_unary, NULL},
    {"Squeeze", ox_op_squeeze, NULL},
    {"STFT", ox_op_stft, "constant frame_step and frame_length, a window, onesided; frames by a gather, then DFT's matmul"},
    {"Sub", ox_op_binary, NULL},
    {"Sum", ox_op_variadic, NULL},
    {"SwiGLU", ox_op_swiglu, "alpha"},
    {"Swish", ox_op_swish, NULL},
    {"Tan", ox_op_unary, NULL},
    {"Tanh", ox_op_unary, NULL},
    {"TensorScatter", ox_op_tensor_scatter, "linear and circular; run-time write_indices"},
    {"TfIdfVectorizer", ox_op_tfidf,
     "INT32/INT64 tokens and pool_int64s; TF, IDF, TFIDF; n-grams up to 16, skips up to 64"},
    {"ThresholdedRelu", ox_op_thresholded_relu, NULL},
    {"Tile", ox_op_tile, "constant repeats"},
    {"TopK", ox_op_topk, "constant K; sorted results"},
    {"Transpose", ox_op_transpose, NULL},
    {"Trilu", ox_op_trilu, "constant k"},
    {"Unique", ox_op_unique, "constants of an input known at import, else a run-time length; over an axis, its slices as rows"},
    {"Unsqueeze", ox_op_unsqueeze, NULL},
    {"Upsample", ox_op_resize, "as Resize-10 (asymmetric)"},
    {"Where", ox_op_where, "NumPy broadcasting of all three"},
    {"Xor", ox_op_logic, NULL},
};

/* The newest opset whose changes to these ops are handled (22 to 28
 * added dtypes to most of them, attributes that are refused when given
 * and an unknown value, and new ops). */
enum { ONNX_OPSET_KNOWN = 28 };

static const OpEntry *find_op(const char *name) {
  for (size_t i = 0; i < ARRAY_LEN(onnx_ops); i++)
    if (strcmp(onnx_ops[i].name, name) == 0) return &onnx_ops[i];
  return NULL;
}

/* The ops of ONNX's preview domains that dlcc imports. */
static const OpEntry preview_ops[] = {
    {"FlexAttention", ox_op_flex_attention, "score_mod and prob_mod as subgraphs of the scores; fewer KV heads"},
};
static const OpEntry training_ops[] = {
    {"Adagrad", ox_op_adagrad, "any number of tensors"},
    {"Adam", ox_op_adam, "any number of tensors"},
    {"Momentum", ox_op_momentum, "standard and nesterov"},
};
static const OpEntry microsoft_ops[] = {
    {"Attention", ox_op_ms_attention, "BERT's: no past or present, no rotary; mask_index 1-d lengths or 2-d"},
    {"BiasGelu", ox_op_ms_gelu, NULL},
    {"DynamicQuantizeMatMul", ox_op_dynamic_quantize_matmul, "B INT8/UINT8 per tensor or per column"},
    {"EmbedLayerNormalization", ox_op_embed_layer_norm, NULL},
    {"FastGelu", ox_op_ms_gelu, "tanh approximation, optional bias"},
    {"FusedConv", ox_op_fused_conv, "Relu, Tanh, Sigmoid, LeakyRelu, Clip or HardSigmoid; Z added"},
    {"FusedGemm", ox_op_fused_gemm, "Relu, Tanh, Sigmoid, LeakyRelu, Clip or HardSigmoid"},
    {"FusedMatMul", ox_op_fused_matmul, NULL},
    {"Gelu", ox_op_ms_gelu, NULL},
    {"GroupQueryAttention", ox_op_group_query_attention,
     "KV cache, rotary, window, softcap, sinks, QK norms; total_sequence_length known at import; no quantized cache, "
     "position_ids or query_seqlens"},
    {"MatMulIntegerToFloat", ox_op_matmul_integer_to_float, "INT8/UINT8 codes"},
    {"MatMulNBits", ox_op_matmul_nbits, "2, 4 or 8 bits, packed zero points, no g_idx; weights dequantized at import"},
    {"MultiHeadAttention", ox_op_multi_head_attention,
     "packed or separate Q/K/V, past and present, padding masks, bias; no shared buffer or beam search"},
    {"QAttention", ox_op_qattention, "as Attention, of the input's and weight's int8 codes"},
    {"QEmbedLayerNormalization", ox_op_qembed_layer_norm, "as EmbedLayerNormalization, of its tables' codes"},
    {"QGemm", ox_op_qgemm, "INT8/UINT8, B per tensor or per column, an INT32 bias; y quantized or f32"},
    {"QLinearAdd", ox_op_qlinear_binary, "INT8/UINT8, one scale and zero point each"},
    {"QLinearAveragePool", ox_op_qlinear_unary, "as AveragePool; channels_last=0"},
    {"QLinearConcat", ox_op_qlinear_concat, NULL},
    {"QLinearGlobalAveragePool", ox_op_qlinear_unary, "channels_last=0"},
    {"QLinearLeakyRelu", ox_op_qlinear_unary, NULL},
    {"QLinearMul", ox_op_qlinear_binary, NULL},
    {"QLinearSigmoid", ox_op_qlinear_unary, NULL},
    {"QuickGelu", ox_op_quick_gelu, NULL},
    {"RelativePositionBias", ox_op_relative_position_bias, "T5's; query_length = key_length, known at import"},
    {"RotaryEmbedding", ox_op_ms_rotary, "position_ids [1] or [B, S]; no packed batching"},
    {"SkipLayerNormalization", ox_op_skip_layer_norm, "no mean or inverse deviation output"},
    {"SkipSimplifiedLayerNormalization", ox_op_skip_layer_norm, "no mean or inverse deviation output"},
    {"TransposeMatMul", ox_op_fused_matmul, NULL},
};
static const OpEntry ml_ops[] = {
    {"ArrayFeatureExtractor", ox_op_array_feature_extractor, NULL},
    {"Binarizer", ox_op_binarizer, NULL},
    {"Imputer", ox_op_imputer, NULL},
    {"LabelEncoder", ox_op_label_encoder, "numbers (no strings)"},
    {"LinearClassifier", ox_op_linear_classifier, "integer class labels"},
    {"LinearRegressor", ox_op_linear_regressor, NULL},
    {"Normalizer", ox_op_normalizer, NULL},
    {"OneHotEncoder", ox_op_one_hot_encoder, "integer categories"},
    {"SVMClassifier", ox_op_svm_classifier, "integer class labels; no probability estimates"},
    {"SVMRegressor", ox_op_svm_regressor, NULL},
    {"Scaler", ox_op_scaler, NULL},
    {"TreeEnsemble", ox_op_tree_ensemble, "post_transform none, softmax or logistic"},
    {"TreeEnsembleClassifier", ox_op_tree_ensemble_classifier, "integer class labels"},
    {"TreeEnsembleRegressor", ox_op_tree_ensemble_regressor, NULL},
    {"ZipMap", ox_op_zip_map, "its [N, C] scores as they are (no maps), with a warning"},
};
static const struct {
  const char *name, *note;
  const OpEntry *ops;
  size_t n_ops;
} domains[] = {
    {"ai.onnx.preview", " (of it, FlexAttention is)", preview_ops, ARRAY_LEN(preview_ops)},
    {"ai.onnx.preview.training", " (of it, Adagrad, Adam and Momentum are)", training_ops, ARRAY_LEN(training_ops)},
    {"ai.onnx.ml",
     " (of it, ArrayFeatureExtractor, Binarizer, Imputer, LabelEncoder, LinearClassifier, LinearRegressor, Normalizer, "
     "OneHotEncoder, SVMClassifier, "
     "SVMRegressor, Scaler, TreeEnsemble, TreeEnsembleClassifier, TreeEnsembleRegressor and ZipMap are)",
     ml_ops, ARRAY_LEN(ml_ops)},
    {"com.microsoft",
     " (of it, onnxruntime's QOperator ops QGemm, QLinearAdd, QLinearAveragePool, QLinearConcat, "
     "QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearMul and QLinearSigmoid, and the fused ops of its transformer "
     "optimizer Attention, EmbedLayerNormalization, Gelu, BiasGelu, FastGelu, QuickGelu, SkipLayerNormalization and "
     "SkipSimplifiedLayerNormalization, its graph optimizer's FusedConv, FusedGemm, FusedMatMul, TransposeMatMul, "
     "DynamicQuantizeMatMul and MatMulIntegerToFloat, quantize_dynamic's QAttention and QEmbedLayerNormalization, "
     "T5's RelativePositionBias, "
     "the LLM exporters' GroupQueryAttention, MultiHeadAttention and RotaryEmbedding, "
     "and MatMulNBits, are)",
     microsoft_ops, ARRAY_LEN(microsoft_ops)},
};

static int domain_index(const char *domain) {
  for (size_t d = 0; domain && d < ARRAY_LEN(domains); d++)
    if (strcmp(domains[d].name, domain) == 0) return (int)d;
  return -1;
}

static const OpEntry *find_preview_op(const char *domain, const char *name) {
  int d = domain_index(domain);
  for (size_t i = 0; d >= 0 && i < domains[d].n_ops; i++)
    if (strcmp(domains[d].ops[i].name, name) == 0) return &domains[d].ops[i];
  return NULL;
}

static const char *preview_note(const char *domain) {
  int d = domain_index(domain);
  return d >= 0 ? domains[d].note : "";
}

bool fe_onnx_enabled(void) { return true; }

/* An op's line: its name, then its limits (if any) in a column, or a
 * space past a longer name. */
static void print_op(FILE *f, const OpEntry *op) {
  if (!op->note) {
    fprintf(f, "  %s\n", op->name);
    return;
  }
  int pad = 22 - (int)strlen(op->name);
  fprintf(f, "  %s%*s%s\n", op->name, pad > 1 ? pad : 1, "", op->note);
}

void fe_onnx_print_support(FILE *f) {
  fprintf(f,
          "ONNX import (opsets up to %d; 13 and later are the target, older ones where an op's\n"
          "meaning is handled).  Data types: FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT8, UINT8, INT16, UINT16, INT32, "
          "UINT32, INT64, UINT64, BOOL (the float8, float4, int4 and int2 types through Cast and "
          "(De)QuantizeLinear; no strings); an input's free dims bound by -D NAME=VALUE (a symbol), "
          "-D INPUT:AXIS=VALUE or the given input's shape; initializers (also external data) become params.\n\nops:\n",
          ONNX_OPSET_KNOWN);
  for (size_t i = 0; i < ARRAY_LEN(onnx_ops); i++) print_op(f, &onnx_ops[i]);
  for (size_t d = 0; d < ARRAY_LEN(domains); d++) {
    fprintf(f, "\nops of the domain %s:\n", domains[d].name);
    for (size_t i = 0; i < domains[d].n_ops; i++) print_op(f, &domains[d].ops[i]);
  }
}

/* ---- graphs ---- */

/* A graph input whose value a -D fixes: `-D use_cache_branch=1` makes
 * optimum's merged decoder the with-past one at import (its If then
 * takes that branch, whose shapes differ from the other's), as a
 * compiled plan's shapes must be fixed anyway. */
struct FixedInput {
  Val *input, *value;
  const Define *define;
  struct FixedInput *next;
};

/* input's value when a -D NAME=VALUE names it and it is one integer or
 * bool element (else NULL: such a -D can still bind a dim of that name),
 * noted so that each run checks it. */
static const Tensor *fixed_input(Imp *im, Val *input, const char *name) {
  const TensorType *t = &input->type;
  if (!im->opt || ir_type_numel(t) != 1 || ir_dtype_is_float(t->dtype)) return NULL;
  for (int j = 0; j < im->opt->n_defines; j++) {
    const Define *d = &im->opt->defines[j];
    if (strcmp(d->name, name) != 0) continue;
    im->dims.define_used[j] = true;
    Val *k = ox_known_new(im, t);
    ir_tensor_set(k->k, 0, t->dtype == TY_BOOL ? d->value != 0 : (double)d->value);
    struct FixedInput *f = ARENA_NEW(&im->c->arena, struct FixedInput);
    *f = (struct FixedInput){input, k, d, im->fixed};
    im->fixed = f;
    return k->k;
  }
  return NULL;
}

/* The first tensor output through a check that each fixed input has
 * its -D's value: what the import decided from it holds for this run
 * only then. */
static bool check_fixed_inputs(Imp *im, const Onnx__GraphProto *gp) {
  if (!im->fixed) return true;
  Val *ok = NULL;
  char names[512] = "";
  size_t used = 0;
  for (const struct FixedInput *f = im->fixed; f; f = f->next) {
    Val *same = ox_op2(im, OP_EQUAL, ox_reshape(im, f->input, 0, NULL), ox_reshape(im, f->value, 0, NULL));
    ok = ok ? ox_op2(im, OP_LOGICAL_AND, ok, same) : same;
    used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0, "%s-D %s=%lld",
                             used ? ", " : "", f->define->name, (long long)f->define->value);
    if (used >= sizeof names) used = sizeof names - 1;
  }
  for (size_t o = 0; o < gp->n_output; o++) {
    const char *name = gp->output[o]->name;
    Entry *e = name && *name ? ox_find_entry(im, name) : NULL;
    if (!e || !e->val || e->val->kind != VK_TENSOR) continue;
    const char *msg = arena_printf(&im->c->arena, "%s: the model was compiled for %s, and this run's inputs differ",
                                   im->file, names);
    return ok && (e->val = ox_check_at_run_time(im, e->val, ok, msg)) != NULL;
  }
  return true;
}

/* A graph input's type.  A dim that is not a dim_value >= 0 is free
 * (a dim_param, "?", -1 or unset): -D or the input's given shape binds it
 * (frontend/dims.c); "?" and an empty name are no symbol, so two such
 * dims need not agree. */
bool ox_tensor_input_type(Imp *im, const char *name, const Onnx__TypeProto *tp, bool symbols, TensorType *out,
                          volatile int32_t *held) {
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return ox_bad(im, "graph input '%s' is not a tensor (maps and sparse tensors are not supported)", name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  DType dt;
  *held = 0;
  if (ox_held_format(tt->elem_type, &dt))
    *held = tt->elem_type;
  else if (!ox_dtype_from_onnx(tt->elem_type, &dt))
    return ox_bad(im, "graph input '%s' has dtype %s, which is not supported (%s)", name,
                  ox_onnx_type_name(tt->elem_type), ox_dtypes_we_have);
  const InputShape *given = fe_dims_shape(&im->dims, name);
  if (!tt->shape && !given) return ox_bad(im, "graph input '%s' has no shape: give the input to bind it", name);
  int rank = tt->shape ? (int)tt->shape->n_dim : given->rank;
  if ((tt->shape && tt->shape->n_dim > DL_MAX_RANK) || rank > DL_MAX_RANK)
    return ox_bad(im, "graph input '%s' has rank %d, more than the supported %d", name,
                  tt->shape ? (int)tt->shape->n_dim : rank, (int)DL_MAX_RANK);
  if (given && given->rank != rank)
    return ox_bad(im, "input '%s' is given with rank %d, the model declares rank %d", name, given->rank, rank);
  *out = (TensorType){.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape ? tt->shape->dim[i] : NULL;
    int64_t v;
    if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0) {
      v = d->dim_value;
      /* A static dim is what the model was traced at: its reshapes may
       * hold it too, so it is not rebound from the input. */
      if (given && given->dims[i] != v)
        return ox_bad(im,
                      "dim %d of input '%s' is %" PRId64 " in the model (static, as it was exported), but the input "
                      "given has %" PRId64 ": give inputs of the model's shape, or export it with that dim free "
                      "(torch.onnx.export's dynamic_axes)",
                      i, name, v, given->dims[i]);
    } else {
      const char *sym = symbols && d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                                d->dim_param && *d->dim_param && strcmp(d->dim_param, "?") != 0
                            ? d->dim_param
                            : NULL;
      char err[768];
      if (!fe_dims_bind(&im->dims, name, rank, i, sym, &v, err, sizeof err)) return ox_bad(im, "%s", err);
    }
    if (v < 0 || v > DL_MAX_ELEMS)
      return ox_bad(im, "dim %d of graph input '%s' is %" PRId64 ", out of range (0 to %" PRId64 ")", i, name, v,
                    DL_MAX_ELEMS);
    out->dims[i] = v;
  }
  if (ir_type_numel(out) < 0)
    return ox_bad(im, "graph input '%s' is larger than %" PRId64 " elements", name, DL_MAX_ELEMS);
  return true;
}

/* The names node np reads: its inputs, and those its subgraphs (If's
 * branches, Loop's and Scan's bodies) read from outside, at any depth;
 * f(ud, name) for each (a name local to a subgraph may come too: it is
 * not found, or found in an outer scope, which costs only an edge). */
static void node_reads(const Onnx__NodeProto *np, void (*f)(void *, const char *), void *ud) {
  for (size_t j = 0; j < np->n_input; j++)
    if (np->input[j] && *np->input[j]) f(ud, np->input[j]);
  for (size_t a = 0; a < np->n_attribute; a++) {
    const Onnx__AttributeProto *at = np->attribute[a];
    const Onnx__GraphProto *gs[1] = {at->g};
    size_t ng = at->g ? 1 : 0;
    for (size_t k = 0; k < ng + at->n_graphs; k++) {
      const Onnx__GraphProto *g = k < ng ? gs[k] : at->graphs[k - ng];
      for (size_t i = 0; g && i < g->n_node; i++) node_reads(g->node[i], f, ud);
    }
  }
}

typedef struct Deps {
  Imp *im;
  int node, *indeg, *start, *fill, *edges;
  bool counting;
} Deps;

static void add_dep(void *ud, const char *name) {
  Deps *d = ud;
  Entry *e = ox_find_entry(d->im, name);
  if (!e || e->producer < 0 || e->scope != d->im->scope || e->producer == d->node) return;
  if (d->counting)
    d->start[e->producer + 1]++, d->indeg[d->node]++;
  else
    d->edges[d->start[e->producer] + d->fill[e->producer]++] = d->node;
}

/* Kahn's algorithm over the nodes; order[] gets them so that every value
 * is produced before it is used. */
static bool topo_order(Imp *im, const Onnx__GraphProto *gp, int *order) {
  int n = (int)gp->n_node;
  Arena *a = &im->c->arena;
  Deps d = {.im = im, .indeg = ARENA_ARRAY(a, int, n + 1), .start = ARENA_ARRAY(a, int, n + 2),
            .fill = ARENA_ARRAY(a, int, n + 1), .counting = true};
  for (d.node = 0; d.node < n; d.node++) node_reads(gp->node[d.node], add_dep, &d);
  for (int i = 0; i < n; i++) d.start[i + 1] += d.start[i];
  d.edges = ARENA_ARRAY(a, int, d.start[n] + 1);
  d.counting = false;
  for (d.node = 0; d.node < n; d.node++) node_reads(gp->node[d.node], add_dep, &d);
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (d.indeg[i] == 0) order[tail++] = i;
  while (head < tail) {
    int i = order[head++];
    for (int k = d.start[i]; k < d.start[i + 1]; k++)
      if (--d.indeg[d.edges[k]] == 0) order[tail++] = d.edges[k];
  }
  if (tail == n) return true;
  for (int i = 0; i < n; i++)
    if (d.indeg[i] > 0) {
      im->np = gp->node[i];
      im->node_index = i;
      return ox_bad(im, "the graph has a cycle through this node");
    }
  return ox_bad(im, "the graph has a cycle");
}

static bool import_node(Imp *im, const Onnx__GraphProto *gp, int idx) {
  const Onnx__NodeProto *np = gp->node[idx];
  im->np = np;
  im->node_index = idx;
  im->loc = (SrcLoc){im->src, idx + 1, 1};
  im->attr_used = ARENA_ARRAY(&im->c->arena, bool, np->n_attribute + 1);
  if (!np->op_type || !*np->op_type) return ox_bad(im, "the node has no op_type");
  const OpEntry *op;
  if (np->domain && *np->domain && strcmp(np->domain, "ai.onnx") != 0) {
    op = find_preview_op(np->domain, np->op_type);
    if (!op) return ox_bad(im, "ops of domain '%s' are not supported%s", np->domain, preview_note(np->domain));
  } else if (im->no_onnx_opset) {
    return ox_bad(im, "op %s of the ONNX domain, which the model does not import (only %s)", np->op_type,
                  im->no_onnx_opset);
  } else {
    op = find_op(np->op_type);
  }
  if (!op)
    return ox_bad(im, "op %s is not supported (dlcc --onnx-support lists the ones that are)", np->op_type);
  for (size_t i = 0; i < np->n_attribute; i++)
    if (!np->attribute[i]->name) return ox_bad(im, "an attribute has no name");
  ONode on = {.n_in = (int)np->n_input, .n_out = (int)np->n_output};
  on.in = ARENA_ARRAY(&im->c->arena, Val *, on.n_in + 1);
  on.out = ARENA_ARRAY(&im->c->arena, Val *, on.n_out + 1);
  bool *want = ARENA_ARRAY(&im->c->arena, bool, on.n_out + 1);
  on.want = want;
  for (int i = 0; i < on.n_in; i++) {
    const char *in = np->input[i];
    if (in && *in) on.in[i] = ox_find_entry(im, in)->val;
  }
  for (int i = 0; i < on.n_out; i++) want[i] = np->output[i] && *np->output[i];
  /* A narrow type's values held wider are only read by a Cast: another
   * op would compute in the wider dtype and give it as the narrow one. */
  bool casts = strcmp(np->op_type, "Cast") == 0 || strcmp(np->op_type, "CastLike") == 0 ||
               strcmp(np->op_type, "QuantizeLinear") == 0 || strcmp(np->op_type, "DequantizeLinear") == 0;
  if (!ox_takes_containers(np->op_type))
    for (int i = 0; i < on.n_in; i++)
      if (on.in[i] && on.in[i]->kind != VK_TENSOR)
        return ox_bad(im, "input %d ('%s') is %s: %s takes tensors", i + 1, np->input[i], ox_kind_name(on.in[i]),
                      np->op_type);
  for (int i = 0; i < on.n_in; i++)
    if (on.in[i] && on.in[i]->held && !casts)
      return ox_bad(im, "%s operands are not supported (only Cast, CastLike, QuantizeLinear and DequantizeLinear read them)",
                    ox_onnx_type_name(on.in[i]->held));
  int errors = im->c->diag.errors;
  if (!op->fn(im, &on)) {
    if (im->c->diag.errors == errors) ox_bad(im, "cannot import this node");
    return false;
  }
  for (size_t i = 0; i < np->n_attribute; i++)
    if (!im->attr_used[i]) return ox_bad(im, "attribute '%s' is not supported", np->attribute[i]->name);
  /* Shape and Size of a value of run-time length have static sizes (their
   * values carry the length, Val.upper). */
  bool run_time_len = false, sizes = strcmp(np->op_type, "Shape") == 0 || strcmp(np->op_type, "Size") == 0;
  for (int i = 0; i < on.n_in && !sizes; i++) run_time_len |= on.in[i] && on.in[i]->run_time_len;
  for (int i = 0; run_time_len && i < on.n_out; i++)
    if (on.out[i] && !on.out[i]->k) on.out[i]->run_time_len = true;
  for (int i = 0; i < on.n_out; i++) {
    if (!want[i]) continue;
    if (!on.out[i]) return ox_bad(im, "output %d is not supported", i + 1);
    Entry *e = ox_find_entry(im, np->output[i]);
    e->val = on.out[i];
    /* Inside a subgraph (imported once per branch or loop step) a value
     * keeps no name, so a param made of it gets a fresh one. */
    if (!on.out[i]->name && !im->scope) on.out[i]->name = e->name;
  }
  return true;
}

/* Registers the nodes' outputs in the current scope, checks that every
 * input is defined (here or outside), and imports the nodes in
 * dependency order. */
bool ox_import_nodes(Imp *im, const Onnx__GraphProto *gp) {
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t j = 0; j < np->n_output; j++) {
      const char *out = np->output[j];
      if (!out || !*out) continue;
      Entry *e = ox_find_entry(im, out);
      if (e && e->scope == im->scope) { /* a subgraph may shadow an outer name */
        im->np = np;
        im->node_index = (int)i;
        return ox_bad(im, "value '%s' is defined twice (also %s)", out,
                      e->producer < 0 ? "as a graph input or initializer" : "by an earlier node");
      }
      ox_add_entry(im, out, (int)i);
    }
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t j = 0; j < np->n_input; j++) {
      const char *in = np->input[j];
      if (in && *in && !ox_find_entry(im, in)) {
        im->np = np;
        im->node_index = (int)i;
        return ox_bad(im, "input '%s' is not defined: no graph input, initializer or node produces it", in);
      }
    }
  }
  int *order = ARENA_ARRAY(&im->c->arena, int, gp->n_node + 1);
  if (!topo_order(im, gp, order)) return false;
  for (size_t i = 0; i < gp->n_node; i++) {
    if (!import_node(im, gp, order[i])) return false;
    if (diag_should_stop(im->c)) return false;
  }
  return true;
}

static bool import_graph(Imp *im, const Onnx__ModelProto *m) {
  Arena *a = &im->c->arena;
  if (!m->has_ir_version) return ox_bad(im, "not an ONNX model: no ir_version");
  im->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0) im->opset = o->version;
  }
  if (im->opset < 0) {
    /* A model of preview ops alone (the training domain's node tests)
     * has no ONNX ops to give an opset to. */
    const char *other = m->n_opset_import && m->opset_import[0]->domain ? m->opset_import[0]->domain : NULL;
    if (other && domain_index(other) >= 0) {
      im->no_onnx_opset = other;
      im->opset = ONNX_OPSET_KNOWN;
    } else if (other) {
      return ox_bad(im, "opset domain '%s' is not supported (only the ONNX opset and its preview domains)", other);
    } else {
      return ox_bad(im, "the model imports no ONNX opset");
    }
  }
  if (im->opset < 1) return ox_bad(im, "opset %" PRId64 " is invalid", im->opset);
  if (im->opset > ONNX_OPSET_KNOWN)
    diag_warning(im->c, (SrcLoc){0}, "%s: opset %" PRId64 " is newer than dlcc knows (%d)", im->file,
                 im->opset, (int)ONNX_OPSET_KNOWN);
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return ox_bad(im, "the model has no graph");
  im->g = ir_graph_new(im->c, gp->name && *gp->name ? gp->name : "onnx");
  im->loc = (SrcLoc){0};
  if (gp->n_sparse_initializer) return ox_bad(im, "sparse initializers are not supported");
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t->name || !*t->name) return ox_bad(im, "initializer %zu has no name", i);
    if (ox_find_entry(im, t->name)) return ox_bad(im, "initializer '%s' is defined twice", t->name);
    Tensor data;
    char err[512];
    Entry *e;
    if (!ox_tensor_from_proto(t, im->dir, &data, err, sizeof err))
      return ox_bad(im, "initializer '%s': %s", t->name, err);
    Val *v = ox_known(im, data); /* owned before the next allocation can fail */
    e = ox_add_entry(im, t->name, -1);
    e->val = v;
    e->val->name = e->name;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi->name || !*vi->name) return ox_bad(im, "graph input %zu has no name", i);
    Entry *e = ox_find_entry(im, vi->name);
    if (e && e->val->k) continue; /* an initializer's default: a param */
    if (e) return ox_bad(im, "graph input '%s' is declared twice", vi->name);
    if (vi->type && (vi->type->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
                     vi->type->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE)) {
      if (!ox_container_input(im, vi)) return false;
      continue;
    }
    TensorType t;
    volatile int32_t held = 0; /* volatile: ox_bad may longjmp */
    if (!ox_tensor_input_type(im, vi->name, vi->type, true, &t, &held)) return false;
    e = ox_add_entry(im, vi->name, -1);
    e->val = ox_val_of(im, &ir_source(im->g, OP_INPUT, &t, vi->name, im->loc)->out[0]);
    e->val->name = e->name;
    e->val->held = held;
    const Tensor *hint = im->opt && im->opt->known ? ir_tensor_map_find(im->opt->known, vi->name) : NULL;
    if (!hint) hint = fixed_input(im, e->val, vi->name);
    if (hint && ir_type_eq(&hint->type, &t)) {
      e->val->hint = hint;
      e->val->hint_flows = !ir_dtype_is_float(t.dtype);
    }
  }
  if (!ox_import_nodes(im, gp)) return false;
  im->np = NULL;
  im->loc = (SrcLoc){0};
  if (gp->n_output == 0) return ox_bad(im, "the graph has no outputs");
  if (!check_fixed_inputs(im, gp)) return false;
  /* A sequence or optional output flattens to its tensors, so there may
   * be more IR outputs than ONNX ones, or fewer. */
  int n_out = 0, cap_out = (int)gp->n_output;
  Value **outs = ARENA_ARRAY(a, Value *, cap_out + 1);
  const char **names = ARENA_ARRAY(a, const char *, cap_out + 1);
  for (size_t o = 0; o < gp->n_output; o++) {
    const Onnx__ValueInfoProto *vi = gp->output[o];
    Entry *e = vi->name && *vi->name ? ox_find_entry(im, vi->name) : NULL;
    if (!e || !e->val)
      return ox_bad(im, "graph output '%s' is not computed by any node", vi->name ? vi->name : "");
    if (e->val->kind != VK_TENSOR) {
      int n;
      Val **vals;
      const char **flat;
      if (!ox_flatten_output(im, e->val, e->name, &n, &vals, &flat)) return false;
      if (n_out + n + (int)(gp->n_output - o) > cap_out) {
        cap_out = 2 * (n_out + n + (int)(gp->n_output - o));
        Value **o2 = ARENA_ARRAY(a, Value *, cap_out);
        const char **n2 = ARENA_ARRAY(a, const char *, cap_out);
        if (n_out) memcpy(o2, outs, sizeof *outs * (size_t)n_out), memcpy(n2, names, sizeof *names * (size_t)n_out);
        outs = o2, names = n2;
      }
      for (int j = 0; j < n; j++) outs[n_out] = ox_use(im, vals[j]), names[n_out++] = flat[j];
      continue;
    }
    int i = n_out++;
    outs[i] = ox_use(im, e->val);
    names[i] = e->name;
    /* A declared output dtype must agree with what the graph computes.
     * A declared shape that does not is a warning: converters write
     * wrong ones (skl2onnx declares a multi-target regressor's output
     * [N, 1], onnxmltools a LightGBM classifier's labels [1]), and
     * onnxruntime runs them with the computed shape, warning too. */
    const Onnx__TypeProto *tp = vi->type;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type) {
      const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
      DType dt;
      char buf[IR_TYPE_STR_MAX];
      if (tt->has_elem_type && tt->elem_type &&
          (e->val->held ? tt->elem_type != e->val->held
                        : !ox_dtype_from_onnx(tt->elem_type, &dt) || dt != outs[i]->type.dtype))
        return ox_bad(im, "graph output '%s' computes %s, which differs from its declared type", e->name,
                      ir_type_str(&outs[i]->type, buf, sizeof buf));
      /* A symbolic, -1 or unset dim accepts what the graph computes; so
       * does every dim of a value of run-time length (its dims are
       * bounds, and the declared ones what some run gave). */
      bool other_shape = false;
      if (tt->shape) {
        other_shape = (int)tt->shape->n_dim != outs[i]->type.rank;
        for (size_t d = 0; !other_shape && !e->val->run_time_len && d < tt->shape->n_dim; d++)
          if (tt->shape->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
              tt->shape->dim[d]->dim_value >= 0)
            other_shape |= tt->shape->dim[d]->dim_value != outs[i]->type.dims[d];
      }
      if (other_shape)
        diag_warning(im->c, (SrcLoc){0}, "%s: graph output '%s' computes %s, another shape than the file declares: "
                                         "the computed shape is used", im->file, e->name,
                     ir_type_str(&outs[i]->type, buf, sizeof buf));
    }
  }
  if (n_out == 0) return ox_bad(im, "the graph's outputs are all absent optionals or empty sequences: no tensor to compute");
  ir_set_outputs(im->g, n_out, outs, names);
  ir_guards_fix(im->g);
  if (!ir_bounds(im->g)) return false;
  for (int j = 0; im->opt && j < im->opt->n_defines; j++)
    if (!im->dims.define_used[j])
      diag_warning(im->c, (SrcLoc){0}, "-D %s: the model has no free dim of that name",
                   im->opt->defines[j].name);
  return true;
}

/* Moves each param's data into out (the params map); out->n counts the
 * names taken so far, so that an allocation failure halfway leaves a map
 * that ir_tensor_map_free frees (the tensors not moved stay owned). */
static void take_params(Imp *im, TensorMap *out) {
  out->names = calloc((size_t)(im->n_params + 1), sizeof *out->names);
  out->tensors = calloc((size_t)(im->n_params + 1), sizeof *out->tensors);
  if (!out->names || !out->tensors) ox_oom(im, "the params' names");
  for (int i = 0; i < im->n_params; i++) {
    Val *v = im->params[i];
    out->names[i] = strdup(v->name);
    if (!out->names[i]) ox_oom(im, "the params' names");
    out->tensors[i] = *v->k;
    v->k->data = NULL; /* now the map's */
    out->n = i + 1;
  }
}

/* One copy more of t named name into out (which counts what it holds,
 * so a failure halfway leaves a map ir_tensor_map_free frees). */
static void own_add(Imp *im, TensorMap *out, int cap, const char *name, const Tensor *t) {
  if (out->n == cap) return;
  Tensor copy = {.type = t->type};
  char *dup = strdup(name);
  if (!dup || (t->data && !ir_tensor_alloc(&copy, &t->type))) {
    free(dup);
    ox_oom(im, "the model's own values");
  }
  if (t->data) memcpy(copy.data, t->data, ir_tensor_nbytes(&t->type));
  out->names[out->n] = dup;
  out->tensors[out->n++] = copy;
}

static bool param_flag(const Node *n, const char *name) {
  const Attr *a = ir_attr(n, name);
  return a && a->i;
}

/* Where param i goes in OnnxOptions.own's order (onnx.h): 0 derived, 1
 * a constant, 3 a weight (2: the buffers). */
static int own_rank(Imp *im, int i) {
  const Node *n = im->params[i]->v->def; /* the param node ox_use made */
  return param_flag(n, "derived") ? 0 : param_flag(n, "frozen") ? 1 : 3;
}

/* OnnxOptions.own, in its order: the params' values from params (which
 * now holds them, as take_params took im->params), a weight's type
 * alone; a buffer's value, still the importer's. */
static void take_own(Imp *im, const Onnx__GraphProto *gp, const TensorMap *params, OnnxOwn *own) {
  TensorMap *out = &own->values;
  int cap = params->n + (int)gp->n_initializer;
  out->names = calloc((size_t)cap + 1, sizeof *out->names);
  out->tensors = calloc((size_t)cap + 1, sizeof *out->tensors);
  if (!out->names || !out->tensors) ox_oom(im, "the model's own values");
  for (int rank = 0; rank <= 3; rank++) {
    for (int i = 0; i < params->n; i++) {
      const Tensor *t = &params->tensors[i];
      if (own_rank(im, i) == rank) own_add(im, out, cap, params->names[i], rank < 3 ? t : &(Tensor){.type = t->type});
    }
    for (size_t i = 0; rank == 2 && i < gp->n_initializer; i++) {
      const Entry *e = ox_find_entry(im, gp->initializer[i]->name);
      if (e && e->producer < 0 && !e->val->v && e->val->k && e->val->k->data && ox_module_path(e->name))
        own_add(im, out, cap, e->name, e->val->k);
    }
    if (rank == 0) own->n_derived = out->n;
  }
}

static void free_owned(Imp *im) {
  for (int i = 0; i < im->n_owned; i++) {
    ir_tensor_free(im->owned[i]);
    free(im->owned[i]);
  }
  free(im->owned);
  free(im->params);
  im->owned = NULL;
  im->params = NULL;
  im->n_owned = im->n_params = 0;
}

/* protobuf-c's allocations through malloc, noting a failure, so that a
 * model too large to decode is not called malformed. */
static void *pb_alloc(void *data, size_t size) {
  void *p = malloc(size);
  if (!p) ((Imp *)data)->pb_failed = true;
  return p;
}

static void pb_free(void *data, void *p) {
  (void)data;
  free(p);
}

static bool import_model(Imp *im, const void *data, size_t len, TensorMap *params) {
  Ctx *c = im->c;
  im->dir = ox_dir_of(&c->arena, im->file);
  im->src = ctx_add_file(c, im->file, NULL, 0);
  int nd = im->opt ? im->opt->n_defines : 0;
  fe_dims_init(&im->dims, &c->arena, nd, nd ? im->opt->defines : NULL, ARENA_ARRAY(&c->arena, bool, nd + 1),
               im->opt ? im->opt->n_input_shapes : 0, im->opt ? im->opt->input_shapes : NULL);
  im->pb = (ProtobufCAllocator){pb_alloc, pb_free, im};
  im->m = onnx__model_proto__unpack(&im->pb, len, data);
  if (!im->m && im->pb_failed) return ox_bad(im, "out of memory decoding the model (%zu bytes)", len);
  if (!im->m)
    return ox_bad(im, "not an ONNX model: the file does not decode as a ModelProto (truncated, or not "
                      "protobuf)");
  if (!import_graph(im, im->m) || !ir_verify(im->g)) return false;
  take_params(im, params);
  if (im->opt && im->opt->own) take_own(im, im->m->graph, params, im->opt->own);
  return true;
}

static void arena_oom(void *data) { ox_oom(data, "the compilation's arena"); }

/* The context's handlers as they were before the import. */
typedef struct Handlers {
  void (*on_oom)(void *);
  void *on_oom_data;
  jmp_buf *fatal;
} Handlers;

static void restore(Imp *im, const Handlers *h) {
  im->c->arena.on_oom = h->on_oom;
  im->c->arena.on_oom_data = h->on_oom_data;
  im->c->fatal = h->fatal;
  im->unwind = NULL;
}

/* The import with every allocation failure (the arena's, the importer's
 * own) and every internal error unwinding back here, so that it ends as
 * an error message and the caller frees what the import held. */
static bool import_guarded(Imp *im, const void *data, size_t len, TensorMap *params) {
  Ctx *c = im->c;
  jmp_buf here;
  const Handlers outer = {c->arena.on_oom, c->arena.on_oom_data, c->fatal};
  if (setjmp(here) != 0) {
    restore(im, &outer);
    return false;
  }
  im->unwind = &here;
  c->fatal = &here;
  c->arena.on_oom = arena_oom;
  c->arena.on_oom_data = im;
  bool ok = import_model(im, data, len, params);
  restore(im, &outer);
  return ok;
}

Graph *fe_onnx_import_bytes(Ctx *c, const char *name, const void *data, size_t len,
                            const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  Imp im = {.c = c, .file = name, .opt = opt, .fold_max = FOLD_MAX_ELEMS};
  if (opt && opt->max_fold_elems > 0) im.fold_max = opt->max_fold_elems;
  im.max_nodes = opt && opt->max_nodes > 0 ? opt->max_nodes : IR_MAX_NODES;
  if (opt && opt->own) *opt->own = (OnnxOwn){0};
  bool ok = import_guarded(&im, data, len, params);
  if (im.m) onnx__model_proto__free_unpacked(im.m, &im.pb);
  if (!ok) ir_tensor_map_free(params);
  if (!ok && opt && opt->own) ir_tensor_map_free(&opt->own->values), opt->own->n_derived = 0;
  free_owned(&im);
  return ok ? im.g : NULL;
}

Graph *fe_onnx_import(Ctx *c, const char *path, const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  char err[512];
  size_t len;
  void *buf = ox_read_whole(path, &len, err, sizeof err);
  if (!buf) {
    diag_error(c, (SrcLoc){0}, "%s", err);
    return NULL;
  }
  Graph *g = fe_onnx_import_bytes(c, path, buf, len, opt, params);
  free(buf);
  return g;
}

#else /* !HAVE_ONNX */

static const char no_onnx[] =
    "this dlcc was built without ONNX support (it needs libprotobuf-c: install "
    "libprotobuf-c-dev and reconfigure)";

bool fe_onnx_enabled(void) { return false; }

Graph *fe_onnx_import_bytes(Ctx *c, const char *name, const void *data, size_t len,
                            const OnnxOptions *opt, TensorMap *params) {
  *params = (TensorMap){0};
  if (opt && opt->own) *opt->own = (OnnxOwn){0};
  diag_error(c, (SrcLoc){0}, "%s: %s", name, no_onnx);
  return NULL;
}

Graph *fe_onnx_import(Ctx *c, const char *path, const OnnxOptions *opt, TensorMap *params) {
  return fe_onnx_import_bytes(c, path, NULL, 0, opt, params);
}

bool fe_onnx_read_tensor(const char *path, Tensor *out, char **name, char *err, size_t errlen) {
  *out = (Tensor){0};
  if (name) *name = NULL;
  snprintf(err, errlen, "%s", no_onnx);
  return false;
}

bool fe_onnx_read_value(const char *path, int max, int *n, Tensor *out, char **names, bool *one_tensor, char *err,
                        size_t errlen) {
  (void)path, (void)max, (void)out, (void)names;
  *n = 0;
  *one_tensor = false;
  snprintf(err, errlen, "%s", no_onnx);
  return false;
}

void fe_onnx_print_support(FILE *f) { fprintf(f, "%s\n", no_onnx); }

#endif
