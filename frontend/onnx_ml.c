/* ONNX's ML domain (ai.onnx.ml), the ops that are tensor arithmetic
 * (the tree ensembles are in onnx_trees.c): Binarizer,
 * ArrayFeatureExtractor, Scaler, Normalizer, LinearRegressor and
 * LinearClassifier, as onnxruntime gives them (the runtime scikit-learn's
 * and LightGBM's converters are checked against).  Takes one node's
 * operands, returns its results. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* x > threshold as 1 or 0 in x's dtype. */
bool ox_op_binarizer(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  double threshold;
  if (!x || !ox_attr_float(im, "threshold", 0, &threshold)) return false;
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool");
  Val *above = ox_op2(im, OP_GREATER, x, ox_scalar(im, threshold, x->type.dtype));
  return (n->out[0] = ox_cast(im, above, x->type.dtype));
}

/* X[..., Y] with Y's indices flattened (K of them): [..., K], or [1, K]
 * for a 1-d X.  The gather checks each index against X's last axis. */
bool ox_op_array_feature_extractor(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *y = ox_in_req(im, n, 1);
  if (!x || !y) return false;
  if (x->type.rank < 1) return ox_bad(im, "X must have at least one axis");
  if (ir_dtype_is_float(y->type.dtype) || y->type.dtype == TY_BOOL) return ox_bad(im, "Y must be integer indices");
  int64_t k = ir_type_numel(&y->type);
  Val *idx = ox_reshape(im, y, 1, &k);
  Val *g = ox_gather(im, x, idx, x->type.rank - 1);
  if (!g) return false;
  if (x->type.rank > 1) return (n->out[0] = g);
  int64_t dims[2] = {1, k};
  return (n->out[0] = ox_reshape(im, g, 2, dims));
}

/* ---- post transforms, scalers and linear models ---- */

/* post_transform's name as ML_POST_*. */
bool ox_ml_post_attr(Imp *im, int *post) {
  static const char *const names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};
  const char *s;
  if (!ox_attr_str(im, "post_transform", "NONE", &s)) return false;
  for (int i = 0; i < 5; i++)
    if (strcmp(s, names[i]) == 0) return (*post = i), true;
  return ox_bad(im, "post_transform '%s' is not one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO and PROBIT", s);
}

/* onnxruntime's probit: sqrt(2) erfinv(2v - 1) with its closed-form
 * erfinv (Winitzki's approximation, a = 0.147), not the exact one. */
static Val *ml_probit(Imp *im, Val *v) {
  Val *x = ox_op2s(im, OP_SUB, ox_op2s(im, OP_MUL, v, 2), 1);
  Val *sign = ox_where(im, ox_op2s(im, OP_LESS, x, 0), ox_scalar(im, -1, x->type.dtype), ox_scalar(im, 1, x->type.dtype));
  Val *l = ox_op1(im, OP_LOG, ox_op2(im, OP_MUL, ox_op2s(im, OP_SUB, ox_op1(im, OP_NEG, x), -1), ox_op2s(im, OP_ADD, x, 1)));
  Val *a = ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, l, 0.5), 2 / (3.14159f * 0.147f));
  Val *b = ox_op2s(im, OP_MUL, l, 1 / 0.147f);
  Val *inner = ox_op2(im, OP_SUB, ox_op1(im, OP_SQRT, ox_op2(im, OP_SUB, ox_op2(im, OP_MUL, a, a), b)), a);
  return ox_op2s(im, OP_MUL, ox_op2(im, OP_MUL, sign, ox_op1(im, OP_SQRT, inner)), 1.41421356f);
}

/* y [N, K] through a post transform over each row, as onnxruntime's:
 * softmax_zero leaves the zeros out of the sum (|v| <= 1e-7 is zero, and
 * comes out as v e^-max over it). */
Val *ox_ml_post(Imp *im, Val *y, int post) {
  if (!y) return NULL;
  DType dt = y->type.dtype;
  switch (post) {
    case ML_POST_LOGISTIC: return ox_op1(im, OP_SIGMOID, y);
    case ML_POST_PROBIT: return ml_probit(im, y);
    case ML_POST_SOFTMAX: {
      Emit e;
      Node *s = ox_begin(im, &e, OP_SOFTMAX, 1, &y);
      ir_set_int(im->g, s, "axis", y->type.rank - 1);
      return ox_emit1(im, &e);
    }
    case ML_POST_SOFTMAX_ZERO: {
      int64_t last = y->type.rank - 1;
      Val *top = ox_reduce(im, OP_REDUCE_MAX, y, 1, &last, true);
      Val *nonzero = ox_op2s(im, OP_GREATER, ox_op1(im, OP_ABS, y), 1e-7);
      Val *e = ox_where(im, nonzero, ox_op1(im, OP_EXP, ox_op2(im, OP_SUB, y, top)),
                        ox_op2(im, OP_MUL, y, ox_op1(im, OP_EXP, ox_op1(im, OP_NEG, top))));
      Val *sum = ox_reduce(im, OP_REDUCE_SUM, ox_where(im, nonzero, e, ox_scalar(im, 0, dt)), 1, &last, true);
      return ox_op2(im, OP_DIV, e, sum);
    }
    default: return y;
  }
}

/* X as f32 [N, F] (a 1-d X is one row), as the linear models and scalers
 * take it: onnxruntime casts float64 and integer inputs to f32. */
static Val *ml_rows(Imp *im, Val *x) {
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool"), NULL;
  if (x->type.rank < 1 || x->type.rank > 2) return ox_bad(im, "X must be 1-d or 2-d, not rank %d", x->type.rank), NULL;
  Val *f = ox_cast(im, x, TY_F32);
  return x->type.rank == 2 ? f : ox_reshape(im, f, 2, (int64_t[]){1, x->type.dims[0]});
}

/* A list-of-floats attribute of n values exactly (1 or n where one_ok). */
static bool ml_floats(Imp *im, const char *name, int64_t n, bool one_ok, const float **v, int64_t *got) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *v = a ? a->floats : NULL, *got = a ? (int64_t)a->n_floats : 0;
  if (!a || *got == 0) return ox_bad(im, "attribute '%s' is required", name);
  if (*got != n && !(one_ok && *got == 1))
    return ox_bad(im, "%s has %" PRId64 " values, not %s%" PRId64, name, *got, one_ok ? "1 or " : "", n);
  return true;
}

/* A known [n] f32 tensor of values v. */
static Val *ml_vector(Imp *im, int64_t n, const float *v) {
  TensorType ty = ir_type_make(TY_F32, 1, &n);
  Val *t = ox_known_new(im, &ty);
  for (int64_t i = 0; t && i < n; i++) ((float *)t->k->data)[i] = v[i];
  return t;
}

/* (X - offset) * scale, each one value or one a feature. */
bool ox_op_scaler(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  if (!rows) return false;
  int64_t F = rows->type.dims[1], n_off, n_scale;
  const float *off, *scale;
  if (!ml_floats(im, "offset", F, true, &off, &n_off) || !ml_floats(im, "scale", F, true, &scale, &n_scale)) return false;
  Val *y = ox_op2(im, OP_MUL, ox_op2(im, OP_SUB, rows, ml_vector(im, n_off, off)), ml_vector(im, n_scale, scale));
  return (n->out[0] = x->type.rank == 2 ? y : ox_reshape(im, y, 1, x->type.dims));
}

/* Each row over its MAX (the largest value, signed), L1 or L2 norm; a row
 * whose norm is 0 is copied, as onnxruntime does. */
bool ox_op_normalizer(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  const char *norm;
  if (!rows || !ox_attr_str(im, "norm", "MAX", &norm)) return false;
  int64_t last = 1;
  Val *d;
  if (strcmp(norm, "MAX") == 0) /* a NaN never the max (std::max keeps the first) */
    d = ox_reduce(im, OP_REDUCE_MAX, ox_where(im, ox_op1(im, OP_ISNAN, rows), ox_scalar(im, -INFINITY, TY_F32), rows), 1,
                  &last, true);
  else if (strcmp(norm, "L1") == 0)
    d = ox_reduce(im, OP_REDUCE_SUM, ox_op1(im, OP_ABS, rows), 1, &last, true);
  else if (strcmp(norm, "L2") == 0)
    d = ox_op1(im, OP_SQRT, ox_reduce(im, OP_REDUCE_SUM, ox_op2(im, OP_MUL, rows, rows), 1, &last, true));
  else
    return ox_bad(im, "norm '%s' is not MAX, L1 or L2", norm);
  Val *zero = ox_op2s(im, OP_EQUAL, d, 0);
  Val *y = ox_op2(im, OP_DIV, rows, ox_where(im, zero, ox_scalar(im, 1, TY_F32), d));
  return (n->out[0] = x->type.rank == 2 ? y : ox_reshape(im, y, 1, x->type.dims));
}

/* X coefficientsᵀ + intercepts: [N, K] for K rows of F coefficients. */
static Val *ml_linear(Imp *im, Val *rows, int64_t K) {
  int64_t F = rows->type.dims[1], n_coef, n_icpt;
  const float *coef, *icpt;
  if (!ml_floats(im, "coefficients", K * F, false, &coef, &n_coef)) return NULL;
  const Onnx__AttributeProto *ia = ox_find_attr(im, "intercepts");
  Val *w = ox_reshape(im, ml_vector(im, K * F, coef), 2, (int64_t[]){K, F});
  Val *y = ox_op2(im, OP_MATMUL, rows, ox_transpose(im, w, (int64_t[]){1, 0}));
  if (ia && ia->n_floats > 0) {
    if (!ml_floats(im, "intercepts", K, false, &icpt, &n_icpt)) return NULL;
    y = ox_op2(im, OP_ADD, y, ml_vector(im, K, icpt));
  }
  return y;
}

bool ox_op_linear_regressor(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  int64_t targets;
  int post;
  if (!rows || !ox_attr_int(im, "targets", 1, &targets) || !ox_ml_post_attr(im, &post)) return false;
  if (targets < 1 || targets > (1 << 20)) return ox_bad(im, "targets must be from 1 to %d, not %" PRId64, 1 << 20, targets);
  return (n->out[0] = ox_ml_post(im, ml_linear(im, rows, targets), post)) != NULL;
}

/* The labels of a classifier: its classlabels_ints (or int64s), one a
 * class; string labels are refused (dlcc has no strings). */
bool ox_ml_labels(Imp *im, const char *ints_name, const char *strings_name, int64_t *n, const int64_t **labels) {
  const Onnx__AttributeProto *s = ox_find_attr(im, strings_name), *a = ox_find_attr(im, ints_name);
  if (s && s->n_strings > 0)
    return ox_bad(im, "string class labels (%s) are not supported: dlcc has no strings; convert the model with integer "
                      "labels", strings_name);
  if (!a || a->n_ints == 0) return ox_bad(im, "attribute '%s' is required", ints_name);
  *n = (int64_t)a->n_ints, *labels = a->ints;
  return true;
}

/* Scores X coefficientsᵀ + intercepts, one a class; the label is the
 * class of the largest.  One row of coefficients for two labels is a
 * binary model: the label is the second where the score is above 0, and
 * the scores are [1 - s, s] after the transform (onnxruntime's rule). */
bool ox_op_linear_classifier(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  int post;
  int64_t n_labels, multi_class;
  const int64_t *labels;
  /* multi_class (one-vs-rest or not) changes nothing onnxruntime computes */
  if (!rows || !ox_ml_post_attr(im, &post) || !ox_attr_int(im, "multi_class", 0, &multi_class) ||
      !ox_ml_labels(im, "classlabels_ints", "classlabels_strings", &n_labels, &labels))
    return false;
  const Onnx__AttributeProto *ia = ox_find_attr(im, "intercepts");
  int64_t K = ia ? (int64_t)ia->n_floats : 0;
  if (K < 1) return ox_bad(im, "attribute 'intercepts' is required (one a class)");
  if (K > 1 && n_labels != K) return ox_bad(im, "%" PRId64 " class labels for %" PRId64 " classes", n_labels, K);
  Val *scores = ml_linear(im, rows, K);
  if (!scores) return false;
  Val *label, *z;
  if (K == 1) {
    bool two = n_labels == 2;
    int64_t pair[2] = {two ? labels[0] : 0, two ? labels[1] : 1};
    Val *positive = ox_cast(im, ox_op2s(im, OP_GREATER, scores, 0), TY_I64);
    label = ox_gather(im, ox_ints_val(im, 2, pair), ox_reshape(im, positive, 1, rows->type.dims), 0);
    z = ox_ml_post(im, scores, post);
    if (two && z) z = ox_concat(im, 2, (Val *[]){ox_op2s(im, OP_SUB, ox_op1(im, OP_NEG, z), -1), z}, 1);
  } else {
    Emit e;
    Node *am = ox_begin(im, &e, OP_ARGMAX, 1, &scores);
    ir_set_int(im->g, am, "axis", 1);
    ir_set_int(im->g, am, "keepdims", 0);
    label = ox_gather(im, ox_ints_val(im, (int)K, labels), ox_cast(im, ox_emit1(im, &e), TY_I64), 0);
    z = ox_ml_post(im, scores, post);
  }
  n->out[0] = label, n->out[1] = z;
  return label && z;
}

/* ZipMap's output is a sequence of maps (a class's label to its score per
 * sample), which dlcc does not have: refused with the converter's own
 * way out. */
bool ox_refuse_zip_map(Imp *im) {
  return ox_bad(im, "its output is a sequence of maps, which dlcc does not have: convert the classifier without it "
                    "(skl2onnx: options={'zipmap': False}; onnxmltools: zipmap=False) and read the scores tensor");
}
