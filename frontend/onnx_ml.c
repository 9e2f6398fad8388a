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

/* The post transforms' names, by ML_POST_*. */
static const char *const ml_post_names[] = {"NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"};

/* post_transform's name as ML_POST_*. */
bool ox_ml_post_attr(Imp *im, int *post) {
  const char *s;
  if (!ox_attr_str(im, "post_transform", "NONE", &s)) return false;
  for (int i = 0; i < 5; i++)
    if (strcmp(s, ml_post_names[i]) == 0) return (*post = i), true;
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
  if (F > 0 && K > INT64_MAX / F) return ox_bad(im, "%" PRId64 " rows of coefficients are too many", K), NULL;
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
    /* two labels: [1 - s, s]; onnxruntime leaves s as it is under a softmax (of one score) */
    bool softmax = post == ML_POST_SOFTMAX || post == ML_POST_SOFTMAX_ZERO;
    z = two && softmax ? scores : ox_ml_post(im, scores, post);
    if (two && z) z = ox_concat(im, 2, (Val *[]){ox_op2s(im, OP_SUB, ox_op1(im, OP_NEG, z), -1), z}, 1);
  } else {
    label = ox_gather(im, ox_ints_val(im, (int)K, labels), ox_argmax(im, scores, 1, false), 0);
    z = ox_ml_post(im, scores, post);
  }
  n->out[0] = label, n->out[1] = z;
  return label && z;
}

/* ZipMap's output is a sequence of maps (each sample's class label to
 * its score), which dlcc does not have.  Its input, the [N, C] scores in
 * the order of its class labels, stands for it, with a warning: CatBoost
 * always writes one after a classifier, and skl2onnx does unless given
 * options={'zipmap': False}. */
bool ox_op_zip_map(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  const Onnx__AttributeProto *ints = ox_find_attr(im, "classlabels_int64s"), *strs = ox_find_attr(im, "classlabels_strings");
  size_t labels = ints && ints->n_ints ? ints->n_ints : strs ? strs->n_strings : 0;
  if (x->type.dtype != TY_F32 || x->type.rank != 2 || x->type.dims[1] != (int64_t)labels)
    return ox_bad(im, "X must be f32 [N, C] for its %zu class labels", labels);
  char where[512];
  ox_node_str(im, where, sizeof where);
  diag_warning(im->c, (SrcLoc){0}, "%s: its output, a sequence of maps, is the [N, %zu] tensor of the scores it zips "
                                   "(dlcc has no maps), in the order of its class labels", where, labels);
  return (n->out[0] = x) != NULL;
}

/* ---- support vector machines (libsvm's, as skl2onnx writes SVC and SVR) ---- */

enum { SVM_LINEAR, SVM_POLY, SVM_RBF, SVM_SIGMOID };

typedef struct SvmKernel {
  int type;
  double gamma, coef0, degree;
} SvmKernel;

static bool svm_kernel_attrs(Imp *im, SvmKernel *k) {
  static const char *const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  const char *s;
  if (!ox_attr_str(im, "kernel_type", "LINEAR", &s)) return false;
  k->type = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) k->type = i;
  if (k->type < 0) return ox_bad(im, "kernel_type '%s' is not LINEAR, POLY, RBF or SIGMOID", s);
  const Onnx__AttributeProto *p = ox_find_attr(im, "kernel_params");
  k->gamma = k->coef0 = k->degree = 0;
  if (p && p->n_floats > 0 && p->n_floats < 3) return ox_bad(im, "kernel_params needs gamma, coef0 and degree");
  if (p && p->n_floats >= 3) k->gamma = p->floats[0], k->coef0 = p->floats[1], k->degree = p->floats[2];
  return true;
}

/* RBF's exp(-gamma |x - v|²) for each row of X and each of the m rows of
 * v: the squared distance is |x|² + |v|² - 2 x·v (one product, not an
 * [N, m, F] difference), with x and v first moved by the vectors' mean
 * (in double, at import) so that features of a large mean and a small
 * spread do not cancel away; never below 0. */
static Val *svm_rbf(Imp *im, const SvmKernel *k, Val *rows, int64_t m, const float *v) {
  int64_t F = rows->type.dims[1];
  double *mean = calloc((size_t)F, sizeof *mean);
  float *moved = malloc(sizeof *moved * (size_t)(m * F)), *norms = malloc(sizeof *norms * (size_t)m),
        *mean_f = malloc(sizeof *mean_f * (size_t)F);
  if (!mean || !moved || !norms || !mean_f) {
    free(mean), free(moved), free(norms), free(mean_f);
    return ox_bad(im, "out of memory"), NULL;
  }
  for (int64_t i = 0; i < m * F; i++) mean[i % F] += v[i] / (double)m;
  for (int64_t i = 0; i < m; i++) {
    double s = 0;
    for (int64_t f = 0; f < F; f++) {
      double d = v[i * F + f] - mean[f];
      moved[i * F + f] = (float)d, s += d * d;
    }
    norms[i] = (float)s;
  }
  for (int64_t f = 0; f < F; f++) mean_f[f] = (float)mean[f];
  Val *x = ox_op2(im, OP_SUB, rows, ml_vector(im, F, mean_f));
  Val *vt = ox_transpose(im, ox_reshape(im, ml_vector(im, m * F, moved), 2, (int64_t[]){m, F}), (int64_t[]){1, 0});
  Val *vn = ox_reshape(im, ml_vector(im, m, norms), 2, (int64_t[]){1, m});
  free(mean), free(moved), free(norms), free(mean_f);
  Val *xn = ox_reduce(im, OP_REDUCE_SUM, ox_op2(im, OP_MUL, x, x), 1, (int64_t[]){1}, true);
  Val *d2 = ox_op2(im, OP_SUB, ox_op2(im, OP_ADD, xn, vn), ox_op2s(im, OP_MUL, ox_op2(im, OP_MATMUL, x, vt), 2));
  d2 = ox_op2(im, OP_MAXIMUM, d2, ox_scalar(im, 0, TY_F32));
  return ox_op1(im, OP_EXP, ox_op2s(im, OP_MUL, d2, -k->gamma));
}

/* K(x, v) of each row of X with each of the m rows of v ([m, F], known):
 * [N, m]. */
static Val *svm_kernel(Imp *im, const SvmKernel *k, Val *rows, int64_t m, const float *v) {
  if (k->type == SVM_RBF) return svm_rbf(im, k, rows, m, v);
  int64_t F = rows->type.dims[1];
  Val *vt = ox_transpose(im, ox_reshape(im, ml_vector(im, m * F, v), 2, (int64_t[]){m, F}), (int64_t[]){1, 0});
  Val *dot = ox_op2(im, OP_MATMUL, rows, vt);
  switch (k->type) {
    case SVM_POLY: return ox_op2(im, OP_POW, ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, dot, k->gamma), k->coef0),
                                 ox_scalar(im, k->degree, TY_F32));
    case SVM_SIGMOID: return ox_op1(im, OP_TANH, ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, dot, k->gamma), k->coef0));
    default: return dot;
  }
}

/* A list-of-floats attribute with at least `least` values (0: may be absent). */
static bool svm_floats(Imp *im, const char *name, int64_t least, const float **v, int64_t *n) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *v = a ? a->floats : NULL, *n = a ? (int64_t)a->n_floats : 0;
  if (*n < least) return ox_bad(im, "%s has %" PRId64 " values, %" PRId64 " needed", name, *n, least);
  return true;
}

/* The support vectors, [m, F]: m of them, each of X's F features. */
static bool svm_vectors(Imp *im, int64_t m, int64_t F, const float **sv) {
  int64_t n;
  if (!svm_floats(im, "support_vectors", 0, sv, &n)) return false;
  if (m > 0 && F > n / m)
    return ox_bad(im, "support_vectors has %" PRId64 " values, fewer than %" PRId64 " vectors of X's %" PRId64 " features",
                  n, m, F);
  if (n != m * F)
    return ox_bad(im, "support_vectors has %" PRId64 " values, not %" PRId64 " (%" PRId64 " vectors of X's %" PRId64
                      " features)", n, m * F, m, F);
  return true;
}

/* SVMRegressor: the kernels of X with the support vectors times the
 * coefficients, plus rho (no support vectors: X's dot with the
 * coefficients); one_class makes it 1 or -1.  onnxruntime reads
 * post_transform and applies none. */
bool ox_op_svm_regressor(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  SvmKernel k;
  int post;
  int64_t m, one_class, n_coef, n_rho;
  const float *coef, *rho, *sv;
  if (!rows || !svm_kernel_attrs(im, &k) || !ox_ml_post_attr(im, &post) || !ox_attr_int(im, "n_supports", 0, &m) ||
      !ox_attr_int(im, "one_class", 0, &one_class) || !svm_floats(im, "rho", 1, &rho, &n_rho))
    return false;
  int64_t F = rows->type.dims[1];
  if (m < 0 || m > (1 << 24)) return ox_bad(im, "n_supports %" PRId64 " is out of range", m);
  if (!svm_floats(im, "coefficients", m > 0 ? m : F, &coef, &n_coef) || !svm_vectors(im, m, F, &sv)) return false;
  Val *y;
  if (m > 0)
    y = ox_op2(im, OP_MATMUL, svm_kernel(im, &k, rows, m, sv), ox_reshape(im, ml_vector(im, m, coef), 2, (int64_t[]){m, 1}));
  else
    y = ox_op2(im, OP_MATMUL, rows, ox_reshape(im, ml_vector(im, F, coef), 2, (int64_t[]){F, 1}));
  y = ox_op2s(im, OP_ADD, y, rho[0]);
  if (y && one_class) y = ox_where(im, ox_op2s(im, OP_GREATER, y, 0), ox_scalar(im, 1, TY_F32), ox_scalar(im, -1, TY_F32));
  return (n->out[0] = y) != NULL;
}

/* SVMClassifier, one-vs-one as libsvm: each pair (i, j) of classes scores
 * its two classes' support vectors' kernels by their coefficients plus
 * its rho, a vote for i where the score is above 0, else for j; the
 * label is the class of the most votes (the first of equals) and the
 * scores are the pairs' (two classes: [-s, s]).  Without support
 * vectors (liblinear's form) X's dot with each class's coefficients plus
 * rho.  Probability estimates (prob_a, prob_b) are refused: libsvm's
 * pairwise coupling is an iteration onnxruntime stops at a tolerance. */
bool ox_op_svm_classifier(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rows = x ? ml_rows(im, x) : NULL;
  SvmKernel k;
  int post;
  int64_t C, n_prob_a, n_prob_b, n_coef, n_rho, m = 0;
  const int64_t *labels, *per_class = NULL;
  const float *prob, *coef, *rho, *sv;
  if (!rows || !svm_kernel_attrs(im, &k) || !ox_ml_post_attr(im, &post) ||
      !ox_ml_labels(im, "classlabels_ints", "classlabels_strings", &C, &labels) ||
      !svm_floats(im, "prob_a", 0, &prob, &n_prob_a) || !svm_floats(im, "prob_b", 0, &prob, &n_prob_b) ||
      !svm_floats(im, "rho", 1, &rho, &n_rho))
    return false;
  if (n_prob_a > 0 || n_prob_b > 0)
    return ox_bad(im, "probability estimates (prob_a, prob_b) are not supported: libsvm's pairwise coupling iterates "
                      "to a tolerance; convert a model trained without probability=True");
  if (C < 2 || C > 4096) return ox_bad(im, "%" PRId64 " class labels: 2 to 4096 are supported", C);
  const Onnx__AttributeProto *vpc = ox_find_attr(im, "vectors_per_class");
  if (vpc && vpc->n_ints > 0) {
    if ((int64_t)vpc->n_ints != C) return ox_bad(im, "vectors_per_class has %zu values for %" PRId64 " classes", vpc->n_ints, C);
    per_class = vpc->ints;
    for (int64_t i = 0; i < C; i++) {
      if (per_class[i] < 0 || per_class[i] > (1 << 24)) return ox_bad(im, "vectors_per_class[%" PRId64 "] is out of range", i);
      m += per_class[i];
    }
  }
  int64_t F = rows->type.dims[1], P = C * (C - 1) / 2;
  Val *scores, *label;
  if (m > 0) {
    if (!svm_floats(im, "coefficients", (C - 1) * m, &coef, &n_coef) || !svm_floats(im, "rho", P, &rho, &n_rho) ||
        !svm_vectors(im, m, F, &sv))
      return false;
    if (m > im->fold_max / P || P > im->fold_max / C)
      return ox_bad(im, "the one-vs-one tables (%" PRId64 " vectors and %" PRId64 " classes by %" PRId64
                        " pairs) are larger than dlcc builds at import", m, C, P);
    /* pair p = (i, j): class i's vectors weighted by coefficient row j - 1, class j's by row i */
    float *w = calloc((size_t)(m * P), sizeof *w), *vote_i = calloc((size_t)(P * C), sizeof *w),
          *vote_j = calloc((size_t)(P * C), sizeof *w);
    int64_t *start = malloc(sizeof *start * (size_t)C);
    if (!w || !vote_i || !vote_j || !start) {
      free(w), free(vote_i), free(vote_j), free(start);
      return ox_bad(im, "out of memory");
    }
    for (int64_t i = 0, s = 0; i < C; s += per_class[i++]) start[i] = s;
    for (int64_t i = 0, p = 0; i < C; i++)
      for (int64_t j = i + 1; j < C; j++, p++) {
        for (int64_t v = start[i]; v < start[i] + per_class[i]; v++) w[v * P + p] = coef[(j - 1) * m + v];
        for (int64_t v = start[j]; v < start[j] + per_class[j]; v++) w[v * P + p] = coef[i * m + v];
        vote_i[p * C + i] = 1, vote_j[p * C + j] = 1;
      }
    Val *wp = ox_reshape(im, ml_vector(im, m * P, w), 2, (int64_t[]){m, P});
    Val *vi = ox_reshape(im, ml_vector(im, P * C, vote_i), 2, (int64_t[]){P, C});
    Val *vj = ox_reshape(im, ml_vector(im, P * C, vote_j), 2, (int64_t[]){P, C});
    free(w), free(vote_i), free(vote_j), free(start);
    scores = ox_op2(im, OP_ADD, ox_op2(im, OP_MATMUL, svm_kernel(im, &k, rows, m, sv), wp), ml_vector(im, P, rho));
    Val *above = ox_cast(im, ox_op2s(im, OP_GREATER, scores, 0), TY_F32);
    Val *votes = ox_op2(im, OP_ADD, ox_op2(im, OP_MATMUL, above, vi),
                        ox_op2(im, OP_MATMUL, ox_op2s(im, OP_SUB, ox_op1(im, OP_NEG, above), -1), vj));
    label = ox_gather(im, ox_ints_val(im, (int)C, labels), ox_argmax(im, votes, 1, false), 0);
    if (C == 2 && post != ML_POST_NONE)
      return ox_bad(im, "post_transform %s of a two-class SVM is not supported (NONE is)", ml_post_names[post]);
    scores = C == 2 ? ox_concat(im, 2, (Val *[]){ox_op1(im, OP_NEG, scores), scores}, 1) : ox_ml_post(im, scores, post);
  } else {
    if (F > (1 << 30)) return ox_bad(im, "X's %" PRId64 " features are too many", F);
    if (!svm_floats(im, "coefficients", C * F, &coef, &n_coef) || !svm_vectors(im, 0, F, &sv)) return false;
    Val *w = ox_reshape(im, ml_vector(im, C * F, coef), 2, (int64_t[]){C, F});
    scores = ox_op2s(im, OP_ADD, ox_op2(im, OP_MATMUL, rows, ox_transpose(im, w, (int64_t[]){1, 0})), rho[0]);
    Val *top = ox_argmax(im, scores, 1, false);
    if (C == 2) { /* the second label where the best score passes 0.5 (all weights positive) or 0 */
      bool positive = true;
      for (int64_t i = 0; i < C * F; i++) positive &= !(coef[i] < 0);
      Val *best = ox_reduce(im, OP_REDUCE_MAX, scores, 1, (int64_t[]){1}, false);
      Val *second = positive ? ox_op2s(im, OP_GREATER_EQUAL, best, 0.5) : ox_op2s(im, OP_GREATER, best, 0);
      top = ox_where(im, second, ox_scalar(im, 1, TY_I64), top);
    }
    label = ox_gather(im, ox_ints_val(im, (int)C, labels), top, 0);
    scores = ox_ml_post(im, scores, post);
  }
  n->out[0] = label, n->out[1] = scores;
  return label && scores;
}

/* ---- Imputer and LabelEncoder ---- */

/* A known scalar of dtype dt holding v exactly (an int64 does not pass
 * through a double). */
static Val *exact_scalar(Imp *im, DType dt, double f, int64_t i) {
  TensorType ty = ir_type_make(dt, 0, NULL);
  Val *v = ox_known_new(im, &ty);
  if (dt == TY_I64)
    *(int64_t *)v->k->data = i;
  else
    ir_tensor_set(v->k, 0, f);
  return v;
}

/* Imputer: a missing value (a NaN where replaced_value_float is NaN, else
 * that value; for integers replaced_value_int64) becomes its feature's
 * imputed value (one for all, or one a feature). */
bool ox_op_imputer(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  if (x->type.rank < 1 || x->type.rank > 2) return ox_bad(im, "X must be 1-d or 2-d, not rank %d", x->type.rank);
  const Onnx__AttributeProto *vf = ox_find_attr(im, "imputed_value_floats"), *vi = ox_find_attr(im, "imputed_value_int64s");
  double missing_f;
  int64_t missing_int;
  if (!ox_attr_float(im, "replaced_value_float", 0, &missing_f) || !ox_attr_int(im, "replaced_value_int64", 0, &missing_int))
    return false;
  bool floats = ir_dtype_is_float(x->type.dtype);
  int64_t k = floats ? (vf ? (int64_t)vf->n_floats : 0) : (vi ? (int64_t)vi->n_ints : 0);
  int64_t F = x->type.dims[x->type.rank - 1];
  if (k != 1 && k != F)
    return ox_bad(im, "%s needs 1 value or one a feature (%" PRId64 "), not %" PRId64,
                  floats ? "imputed_value_floats" : "imputed_value_int64s", F, k);
  TensorType ty = ir_type_make(x->type.dtype, 1, &k);
  Val *values = ox_known_new(im, &ty);
  for (int64_t i = 0; i < k; i++) {
    if (x->type.dtype == TY_I64 && !floats)
      ((int64_t *)values->k->data)[i] = vi->ints[i];
    else
      ir_tensor_set(values->k, i, floats ? vf->floats[i] : (double)vi->ints[i]);
  }
  Val *is_missing = floats && isnan(missing_f) ? ox_op1(im, OP_ISNAN, x)
                    : floats ? ox_op2s(im, OP_EQUAL, x, missing_f)
                             : ox_op2(im, OP_EQUAL, ox_cast(im, x, TY_I64), exact_scalar(im, TY_I64, 0, missing_int));
  return (n->out[0] = ox_where(im, is_missing, values, x)) != NULL;
}

/* A LabelEncoder's keys or values: its _int64s, _floats or _tensor
 * attribute (strings refused), as a known 1-d tensor. */
static Val *encoder_list(Imp *im, const char *what) {
  char name[3][32];
  snprintf(name[0], sizeof name[0], "%s_int64s", what);
  snprintf(name[1], sizeof name[1], "%s_floats", what);
  snprintf(name[2], sizeof name[2], "%s_tensor", what);
  char strings[32];
  snprintf(strings, sizeof strings, "%s_strings", what);
  const Onnx__AttributeProto *s = ox_find_attr(im, strings), *a[3];
  for (int i = 0; i < 3; i++) a[i] = ox_find_attr(im, name[i]);
  if (s && s->n_strings) return ox_bad(im, "string %s (%s) are not supported: dlcc has no strings", what, strings), NULL;
  if (a[2] && a[2]->t) {
    Tensor t;
    char err[512];
    if (!ox_tensor_from_proto(a[2]->t, im->dir, &t, err, sizeof err)) return ox_bad(im, "%s: %s", name[2], err), NULL;
    if (t.type.dtype == TY_BOOL) return ir_tensor_free(&t), ox_bad(im, "%s must hold numbers", name[2]), NULL;
    int64_t k = ir_type_numel(&t.type);
    if (k < 1) return ir_tensor_free(&t), ox_bad(im, "%s holds no %s", name[2], what), NULL;
    t.type = ir_type_make(t.type.dtype, 1, &k);
    return ox_known(im, t);
  }
  bool ints = a[0] && a[0]->n_ints;
  int64_t k = ints ? (int64_t)a[0]->n_ints : a[1] ? (int64_t)a[1]->n_floats : 0;
  if (k < 1) return ox_bad(im, "attribute %s or %s is required", name[0], name[1]), NULL;
  TensorType ty = ir_type_make(ints ? TY_I64 : TY_F32, 1, &k);
  Val *v = ox_known_new(im, &ty);
  for (int64_t i = 0; i < k; i++) {
    if (ints)
      ((int64_t *)v->k->data)[i] = a[0]->ints[i];
    else
      ir_tensor_set(v->k, i, a[1]->floats[i]);
  }
  return v;
}

/* Keys in a total order (NaN after every number, NaNs equal), so that a
 * sort puts equal keys side by side: integers as themselves, floats as
 * doubles. */
static int key_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
  return x < y ? -1 : x > y;
}

static int int_key_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* LabelEncoder of numbers: each element that equals a key becomes that
 * key's value, any other the default (default_int64 -1, default_float
 * -0.0, or default_tensor).  A key given twice is refused (onnxruntime
 * and the ONNX reference keep different ones). */
bool ox_op_label_encoder(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  Val *keys = encoder_list(im, "keys"), *values = keys ? encoder_list(im, "values") : NULL;
  if (!values) return false;
  int64_t k = keys->type.dims[0];
  if (values->type.dims[0] != k) return ox_bad(im, "%" PRId64 " keys and %" PRId64 " values", k, values->type.dims[0]);
  if (k > im->fold_max) return ox_bad(im, "%" PRId64 " keys are more than dlcc builds at import", k);
  bool int_keys = !ir_dtype_is_float(keys->type.dtype);
  Val *keys64 = int_keys ? ox_cast(im, keys, TY_I64) : NULL; /* folded: known */
  void *sorted = malloc(8 * (size_t)k);
  if (!sorted || (int_keys && (!keys64 || !keys64->k))) return free(sorted), ox_bad(im, "out of memory");
  for (int64_t i = 0; i < k; i++) {
    if (int_keys)
      ((int64_t *)sorted)[i] = ((const int64_t *)keys64->k->data)[i];
    else
      ((double *)sorted)[i] = ir_tensor_get(keys->k, i);
  }
  qsort(sorted, (size_t)k, 8, int_keys ? int_key_cmp : key_cmp);
  for (int64_t i = 1; i < k; i++)
    if ((int_keys ? int_key_cmp : key_cmp)((char *)sorted + 8 * i, (char *)sorted + 8 * (i - 1)) == 0) {
      char twice[32];
      if (int_keys)
        snprintf(twice, sizeof twice, "%" PRId64, ((int64_t *)sorted)[i]);
      else
        snprintf(twice, sizeof twice, "%g", ((double *)sorted)[i]);
      free(sorted);
      return ox_bad(im, "key %s is given twice", twice);
    }
  free(sorted);
  double def_f, def_i_d;
  int64_t def_i;
  const Onnx__AttributeProto *dt = ox_find_attr(im, "default_tensor");
  if (!ox_attr_float(im, "default_float", -0.0, &def_f) || !ox_attr_int(im, "default_int64", -1, &def_i)) return false;
  def_i_d = (double)def_i;
  DType vt = values->type.dtype;
  double def = ir_dtype_is_float(vt) ? def_f : def_i_d;
  int64_t def_int = def_i;
  if (dt && dt->t) {
    Tensor t;
    char err[512];
    if (!ox_tensor_from_proto(dt->t, im->dir, &t, err, sizeof err)) return ox_bad(im, "default_tensor: %s", err);
    bool one = ir_type_numel(&t.type) == 1;
    def = one ? ir_tensor_get(&t, 0) : 0;
    if (one && t.type.dtype == TY_I64) def_int = *(const int64_t *)t.data;
    ir_tensor_free(&t);
    if (!one) return ox_bad(im, "default_tensor must hold one value");
  }
  if (ir_dtype_is_float(x->type.dtype) != ir_dtype_is_float(keys->type.dtype))
    return ox_bad(im, "X is %s but the keys are %s", ir_dtype_name(x->type.dtype), ir_dtype_name(keys->type.dtype));
  /* [..., k]: each element against every key; the first equal one's value */
  int r = x->type.rank;
  if (r >= DL_MAX_RANK) return ox_bad(im, "X has too many axes (%d)", r);
  int64_t dims[DL_MAX_RANK];
  memcpy(dims, x->type.dims, sizeof *dims * (size_t)r);
  dims[r] = 1;
  /* integers compared as i64 (X cast up, never the keys down); floats in the keys' dtype */
  Val *xs = ox_reshape(im, ox_cast(im, x, int_keys ? TY_I64 : keys->type.dtype), r + 1, dims);
  Val *eq = ox_op2(im, OP_EQUAL, xs, int_keys ? keys64 : keys);
  Val *hit = eq ? ox_cast(im, eq, TY_F32) : NULL;
  int64_t last = r;
  Val *found = hit ? ox_op2s(im, OP_GREATER, ox_reduce(im, OP_REDUCE_MAX, hit, 1, &last, false), 0) : NULL;
  Val *at = found ? ox_argmax(im, hit, r, false) : NULL;
  if (!at) return false;
  Val *fallback = vt == TY_I64 ? exact_scalar(im, TY_I64, 0, def_int) : ox_scalar(im, def, vt);
  return (n->out[0] = ox_where(im, found, ox_gather(im, values, at, 0), fallback)) != NULL;
}

/* OneHotEncoder of integer categories: X's shape plus an axis of one
 * f32 a category, 1 where the value (a float truncated, as onnxruntime
 * reads it) is that category.  A value that is none of them gives zeros
 * (zeros=1), or fails the run (zeros=0, scikit-learn's
 * handle_unknown='error'). */
bool ox_op_one_hot_encoder(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t zeros;
  if (!x || !ox_attr_int(im, "zeros", 1, &zeros)) return false;
  const Onnx__AttributeProto *s = ox_find_attr(im, "cats_strings"), *c = ox_find_attr(im, "cats_int64s");
  if (s && s->n_strings) return ox_bad(im, "string categories (cats_strings) are not supported: dlcc has no strings");
  if (!c || !c->n_ints) return ox_bad(im, "attribute 'cats_int64s' is required");
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool");
  int r = x->type.rank;
  if (r >= DL_MAX_RANK) return ox_bad(im, "X has too many axes (%d)", r);
  if (c->n_ints > (size_t)im->fold_max) return ox_bad(im, "%zu categories are more than dlcc builds at import", c->n_ints);
  int64_t dims[DL_MAX_RANK];
  memcpy(dims, x->type.dims, sizeof *dims * (size_t)r);
  dims[r] = 1;
  Val *code = ox_reshape(im, ox_cast(im, x, TY_I64), r + 1, dims);
  Val *hot = ox_op2(im, OP_EQUAL, code, ox_ints_val(im, (int)c->n_ints, c->ints));
  if (ir_dtype_is_float(x->type.dtype)) /* a NaN is no category (its cast to an integer is any) */
    hot = ox_op2(im, OP_LOGICAL_AND, hot, ox_reshape(im, ox_op1(im, OP_LOGICAL_NOT, ox_op1(im, OP_ISNAN, x)), r + 1, dims));
  Val *y = hot ? ox_cast(im, hot, TY_F32) : NULL;
  if (y && !zeros) {
    int64_t all[DL_MAX_RANK];
    for (int i = 0; i <= r; i++) all[i] = i;
    Val *known = ox_reduce(im, OP_REDUCE_MAX, y, 1, &all[r], false);
    if (r > 0) known = ox_reduce(im, OP_REDUCE_MIN, known, r, all, false);
    char where[512];
    ox_node_str(im, where, sizeof where);
    y = known ? ox_check_at_run_time(im, y, ox_op2s(im, OP_GREATER, known, 0),
                                     arena_printf(&im->c->arena, "%s: a value is none of the categories (zeros=0)", where))
              : NULL;
  }
  return (n->out[0] = y) != NULL;
}
