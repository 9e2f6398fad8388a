/* The ONNX importer's ML domain (ai.onnx.ml): Binarizer,
 * ArrayFeatureExtractor, the tree ensembles (TreeEnsemble and the older
 * TreeEnsembleRegressor and TreeEnsembleClassifier), the linear models,
 * Scaler, Normalizer, the SVMs, Imputer and LabelEncoder, on models
 * built here with protobuf-c, run by the reference interpreter.  The
 * expected values of all but the first three are onnxruntime 1.32's on
 * the same models (its rules for two classes and for targets no tree
 * reaches are its own); tests/onnx/sklearn_models.py compares real
 * scikit-learn, XGBoost and LightGBM conversions. */
#include "check_quiet.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "ir/eval.h"
#include "onnxbuild.h"

#define params onnxb_params
#define import(b) onnxb_import((b), NULL)
#define expect_error onnxb_expect_error
#define must_import onnxb_must_import
#define same_dims onnxb_same_dims
#define run1 onnxb_run1
#define expect_values onnxb_expect_values

static const float xdata[6] = {1, -2, 3, 0.5f, -1, 2};

START_TEST(test_ml_domain) {
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){2, 3});
  Onnx__NodeProto *n = add_node(b, "Binarizer", "X", "Y");
  n->domain = str("ai.onnx.ml");
  attr_f(n, "threshold", 0.5f);
  add_output(b, "Y");
  Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){2, 3}, xdata);
  expect_values(&y, 6, (const double[]){1, 0, 1, 0, 0, 1}, "Binarizer");
  ir_tensor_free(&y);
  for (int rank = 1; rank <= 2; rank++) {
    b = model_new(17);
    int64_t dims[2] = {rank == 1 ? 6 : 2, 3};
    add_input(b, "X", rank, dims);
    add_init_i64(b, "I", 2, (const int64_t[]){2, 0});
    n = add_node(b, "ArrayFeatureExtractor", "X,I", "Y");
    n->domain = str("ai.onnx.ml");
    add_output(b, "Y");
    Graph *g = must_import(b);
    ck_assert(same_dims(&g->outputs[0]->type, 2, rank == 1 ? (const int64_t[]){1, 2} : (const int64_t[]){2, 2}));
    y = run1(g, "X", rank, dims, xdata);
    expect_values(&y, 2 * rank, (const double[]){3, 1, 2, 0.5}, "ArrayFeatureExtractor");
    ir_tensor_free(&y);
  }
}
END_TEST

/* A tensor attribute of n floats (dtype FLOAT) or bytes (UINT8). */
static void attr_tensor(Onnx__NodeProto *n, const char *name, int32_t dtype, int k, const double *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  a->t = tensor(name, dtype, 1, (const int64_t[]){k});
  if (dtype == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
    a->t->n_float_data = (size_t)k, a->t->float_data = mem(sizeof(float) * (size_t)k);
    for (int i = 0; i < k; i++) a->t->float_data[i] = (float)v[i];
  } else {
    a->t->n_int32_data = (size_t)k, a->t->int32_data = mem(sizeof(int32_t) * (size_t)k);
    for (int i = 0; i < k; i++) a->t->int32_data[i] = (int32_t)v[i];
  }
}

/* TreeEnsemble of two trees over X [5, 2] into 3 targets: tree A splits
 * on x0 <= 1, then on x1 in {2, 5} (a NaN going the true way); tree B is
 * a leaf (one node whose sides reach the same leaf).  feature sets a
 * node's feature, back a true side that leads back to the root. */
static Model *tree_model(int64_t aggregate, int64_t feature1, bool back) {
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){5, 2});
  Onnx__NodeProto *n = add_node(b, "TreeEnsemble", "X", "Y");
  n->domain = str("ai.onnx.ml");
  attr_is(n, "nodes_featureids", 3, (const int64_t[]){0, feature1, 0});
  attr_tensor(n, "nodes_modes", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 3, (const double[]){0, 6, 0});
  attr_tensor(n, "nodes_splits", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (const double[]){1, 0, 0});
  attr_tensor(n, "membership_values", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (const double[]){2, 5, NAN});
  attr_is(n, "nodes_truenodeids", 3, (const int64_t[]){1, back ? 0 : 1, 3});
  attr_is(n, "nodes_trueleafs", 3, (const int64_t[]){0, back ? 0 : 1, 1});
  attr_is(n, "nodes_falsenodeids", 3, (const int64_t[]){0, 2, 3});
  attr_is(n, "nodes_falseleafs", 3, (const int64_t[]){1, 1, 1});
  attr_is(n, "nodes_missing_value_tracks_true", 3, (const int64_t[]){0, 1, 0});
  attr_is(n, "leaf_targetids", 4, (const int64_t[]){0, 1, 0, 0});
  attr_tensor(n, "leaf_weights", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, (const double[]){10, 1, 2, 100});
  attr_is(n, "tree_roots", 2, (const int64_t[]){0, 2});
  attr_i(n, "n_targets", 3);
  attr_i(n, "aggregate_function", aggregate);
  add_output(b, "Y");
  return b;
}

/* Each aggregate against sums worked out by hand: [0, 5] and [0, NaN]
 * reach A's member leaf, [0, 3] its other, [2, 2] and [NaN, 2] (a NaN
 * split the false way) A's first leaf; B always adds 100 to target 0;
 * target 2 is never reached (0, as onnxruntime).  (On emu: the node
 * tests', tests/test_onnx_node.c's emu list.) */
/* One TreeEnsemble tree of `levels` nodes over X [5, 2] (every node asks
 * feature 0 <= 0), each side as the lists say, into `leaves` leaves of
 * weights 1, 2, ... each its own target. */
static Model *tree_chain(int levels, const int64_t *to_true, const int64_t *true_leaf, const int64_t *to_false,
                         const int64_t *false_leaf, int leaves) {
  int64_t *zero = mem(sizeof *zero * (size_t)levels), targets[2] = {0, 1};
  double *zerod = mem(sizeof *zerod * (size_t)levels);
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){5, 2});
  Onnx__NodeProto *n = add_node(b, "TreeEnsemble", "X", "Y");
  n->domain = str("ai.onnx.ml");
  attr_is(n, "nodes_featureids", levels, zero);
  attr_tensor(n, "nodes_modes", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, levels, zerod);
  attr_tensor(n, "nodes_splits", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, levels, zerod);
  attr_is(n, "nodes_truenodeids", levels, to_true);
  attr_is(n, "nodes_trueleafs", levels, true_leaf);
  attr_is(n, "nodes_falsenodeids", levels, to_false);
  attr_is(n, "nodes_falseleafs", levels, false_leaf);
  attr_is(n, "leaf_targetids", leaves, targets);
  attr_tensor(n, "leaf_weights", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, leaves, (const double[]){1, 2});
  attr_is(n, "tree_roots", 1, (const int64_t[]){0});
  attr_i(n, "n_targets", leaves);
  add_output(b, "Y");
  return b;
}

START_TEST(test_tree_ensemble) {
  const float x[10] = {0, 5, 0, 3, 2, 2, 0, NAN, NAN, 2};
  static const double want[4][15] = {
      {50, 0.5, 0, 51, 0, 0, 55, 0, 0, 50, 0.5, 0, 55, 0, 0},      /* average */
      {100, 1, 0, 102, 0, 0, 110, 0, 0, 100, 1, 0, 110, 0, 0},     /* sum */
      {100, 1, 0, 2, 0, 0, 10, 0, 0, 100, 1, 0, 10, 0, 0},         /* min */
      {100, 1, 0, 100, 0, 0, 100, 0, 0, 100, 1, 0, 100, 0, 0}};    /* max */
  for (int agg = 0; agg < 4; agg++) {
    Graph *g = must_import(tree_model(agg, 1, false));
    Tensor y = run1(g, "X", 2, (const int64_t[]){5, 2}, x);
    expect_values(&y, 15, want[agg], "TreeEnsemble");
  }
  /* 60 levels whose sides both lead to the next: 2^60 paths, one tree of
   * depth 60, its depth found in linear time */
  enum { LEVELS = 60 };
  int64_t next[LEVELS], leafs[LEVELS] = {0};
  for (int i = 0; i < LEVELS; i++) next[i] = i + 1;
  next[LEVELS - 1] = 0, leafs[LEVELS - 1] = 1;
  int64_t other[LEVELS];
  memcpy(other, next, sizeof other), other[LEVELS - 1] = 1;
  Tensor y = run1(must_import(tree_chain(LEVELS, next, leafs, other, leafs, 2)), "X", 2, (const int64_t[]){5, 2}, x);
  expect_values(&y, 10, (const double[]){1, 0, 1, 0, 0, 2, 1, 0, 0, 2}, "TreeEnsemble of shared subtrees");
  /* a chain deeper than the walk unrolls is refused (a crafted one of tens of thousands took minutes) */
  enum { DEEP = 4100 };
  int64_t *zero = calloc(DEEP, sizeof *zero), *ones = calloc(DEEP, sizeof *ones), *down = calloc(DEEP, sizeof *down),
          *last = calloc(DEEP, sizeof *last);
  ck_assert(zero && ones && down && last);
  for (int i = 0; i < DEEP; i++) down[i] = i + 1, ones[i] = 1;
  down[DEEP - 1] = 0, last[DEEP - 1] = 1;
  expect_error(import(tree_chain(DEEP, zero, ones, down, last, 1)),
               "the deepest tree has 4100 levels, more than the 4096 dlcc walks");
  free(zero), free(ones), free(down), free(last);
  expect_error(import(tree_model(1, 2, false)), "(TreeEnsemble): node 1: feature 2 is out of range for X's 2 features");
  expect_error(import(tree_model(1, 1, true)), "node 0 of the tree at root 0 leads back to itself: a tree has no cycles");
}
END_TEST

/* ---- the older ensembles, as scikit-learn's converters write them ---- */

/* A list-of-strings attribute. */
static void attr_strings(Onnx__NodeProto *n, const char *name, int k, const char *const *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  a->n_strings = (size_t)k;
  a->strings = mem(sizeof *a->strings * (size_t)(k + 1));
  for (int i = 0; i < k; i++) a->strings[i].data = (uint8_t *)str(v[i]), a->strings[i].len = strlen(v[i]);
}

/* Five rows of two features, a NaN in each of the last two. */
static const float legacy_x[10] = {0, 0, 2, 0, 2, 1, 2, NAN, NAN, 0};

/* Tree 0: node 0 asks x0 <= 1 (yes: leaf 1), node 2 asks x1 < 0.5 (yes,
 * or a NaN: leaf 3; no: leaf 4); tree 1 is one leaf.  The first `nodes`
 * nodes only (5: tree 0 alone). */
static Onnx__NodeProto *legacy_trees(Model *b, const char *op, const char *outs, int nodes) {
  add_input(b, "X", 2, (const int64_t[]){5, 2});
  Onnx__NodeProto *n = add_node(b, op, "X", outs);
  n->domain = str("ai.onnx.ml");
  static const char *const modes[6] = {"BRANCH_LEQ", "LEAF", "BRANCH_LT", "LEAF", "LEAF", "LEAF"};
  attr_is(n, "nodes_treeids", nodes, (const int64_t[]){0, 0, 0, 0, 0, 1});
  attr_is(n, "nodes_nodeids", nodes, (const int64_t[]){0, 1, 2, 3, 4, 0});
  attr_is(n, "nodes_featureids", nodes, (const int64_t[]){0, 0, 1, 0, 0, 0});
  attr_strings(n, "nodes_modes", nodes, modes);
  attr_fs(n, "nodes_values", nodes, (const float[]){1, 0, 0.5f, 0, 0, 0});
  attr_is(n, "nodes_truenodeids", nodes, (const int64_t[]){1, 0, 3, 0, 0, 0});
  attr_is(n, "nodes_falsenodeids", nodes, (const int64_t[]){2, 0, 4, 0, 0, 0});
  attr_is(n, "nodes_missing_value_tracks_true", nodes, (const int64_t[]){0, 0, 1, 0, 0, 0});
  return n;
}

/* Both outputs of g on legacy_x. */
static void run_both(Graph *g, Tensor out[2]) {
  Tensor in = {ir_type_make(TY_F32, 2, (const int64_t[]){5, 2}), (void *)legacy_x};
  TensorMap inputs = {1, (const char *[]){"X"}, &in};
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "eval: %s", err);
}

/* Two targets with base values: a target no tree reaches (the second,
 * in rows 1, 3, 4) is 0; min and max take the single leaf's two weights
 * of one target (100 and 5) one by one, sum and average add them. */
START_TEST(test_tree_ensemble_regressor) {
  static const char *const aggs[4] = {"SUM", "AVERAGE", "MIN", "MAX"};
  static const double want[4][10] = {{106.5, 9.5, 107.5, 0, 105.5, 2.5, 107.5, 0, 107.5, 0},
                                     {53.5, 4.5, 54, 0, 53, 1, 54, 0, 54, 0},
                                     {1.5, 9.5, 2.5, 0, 5.5, 2.5, 2.5, 0, 2.5, 0},
                                     {100.5, 9.5, 100.5, 0, 100.5, 2.5, 100.5, 0, 100.5, 0}};
  for (int a = 0; a < 4; a++) {
    Model *b = model_new(17);
    Onnx__NodeProto *n = legacy_trees(b, "TreeEnsembleRegressor", "Y", 6);
    attr_i(n, "n_targets", 2);
    attr_s(n, "aggregate_function", aggs[a]);
    attr_is(n, "target_treeids", 6, (const int64_t[]){0, 0, 0, 0, 1, 1});
    attr_is(n, "target_nodeids", 6, (const int64_t[]){1, 1, 3, 4, 0, 0});
    attr_is(n, "target_ids", 6, (const int64_t[]){0, 1, 0, 1, 0, 0});
    attr_fs(n, "target_weights", 6, (const float[]){1, 10, 2, 3, 100, 5});
    attr_fs(n, "base_values", 2, (const float[]){0.5f, -0.5f});
    add_output(b, "Y");
    Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){5, 2}, legacy_x);
    expect_values(&y, 10, want[a], aggs[a]);
  }
  Model *b = model_new(17);
  Onnx__NodeProto *n = legacy_trees(b, "TreeEnsembleRegressor", "Y", 6);
  attr_i(n, "n_targets", 1);
  attr_is(n, "target_treeids", 1, (const int64_t[]){0});
  attr_is(n, "target_nodeids", 1, (const int64_t[]){7});
  attr_is(n, "target_ids", 1, (const int64_t[]){0});
  attr_fs(n, "target_weights", 1, (const float[]){1});
  add_output(b, "Y");
  expect_error(import(b), "(TreeEnsembleRegressor): weight 0 is of node 7 of tree 0, which is no node");
}
END_TEST

/* Three classes under softmax: the label is the class of the largest
 * score among the classes some tree scored (row 0: the first, at -1,
 * though the others' 0 is larger).  Two classes with the weights naming
 * one: binary, its label past 0 (mixed signs; logistic or not) or past
 * 0.5 (all positive), scores [σ(-s), σ(s)], [-s, s] or [1 - s, s]. */
START_TEST(test_tree_ensemble_classifier) {
  Model *b = model_new(17);
  Onnx__NodeProto *n = legacy_trees(b, "TreeEnsembleClassifier", "L,Z", 5);
  attr_is(n, "classlabels_int64s", 3, (const int64_t[]){10, 20, 30});
  attr_s(n, "post_transform", "SOFTMAX");
  attr_is(n, "class_treeids", 4, (const int64_t[]){0, 0, 0, 0});
  attr_is(n, "class_nodeids", 4, (const int64_t[]){1, 3, 4, 4});
  attr_is(n, "class_ids", 4, (const int64_t[]){0, 1, 2, 0});
  attr_fs(n, "class_weights", 4, (const float[]){-1, 2, 3, 0.5f});
  add_output(b, "L");
  add_output(b, "Z");
  Tensor out[2];
  run_both(must_import(b), out);
  expect_values(&out[0], 5, (const double[]){10, 20, 30, 20, 20}, "labels of 3 classes");
  static const double z3[15] = {0.15536241, 0.42231882, 0.42231882, 0.10650697, 0.78698599, 0.10650697, 0.07252145,
                                0.04398648, 0.88349205, 0.10650697, 0.78698599, 0.10650697, 0.10650697, 0.78698599,
                                0.10650697};
  for (int i = 0; i < 15; i++) ck_assert_msg(fabs(((float *)out[1].data)[i] - z3[i]) < 1e-6, "softmax score %d", i);
  ir_tensor_free(&out[1]);
  static const struct {
    const char *post;
    float w[3], base;
    double labels[5], z[10];
  } bin[3] = {
      {"LOGISTIC", {-1, 2, -3}, 0.25f, {3, 7, 3, 7, 7},
       {0.67917871, 0.32082129, 0.09534949, 0.90465051, 0.93991333, 0.06008667, 0.09534949, 0.90465051, 0.09534949, 0.90465051}},
      {"NONE", {0.2f, 0.7f, 0.4f}, NAN, {3, 7, 3, 7, 7}, {0.8, 0.2, 0.3, 0.7, 0.6, 0.4, 0.3, 0.7, 0.3, 0.7}},
      {"NONE", {-1, 2, -3}, NAN, {3, 7, 3, 7, 7}, {1, -1, -2, 2, 3, -3, -2, 2, -2, 2}},
  };
  for (int k = 0; k < 3; k++) {
    b = model_new(17);
    n = legacy_trees(b, "TreeEnsembleClassifier", "L,Z", 5);
    attr_is(n, "classlabels_int64s", 2, (const int64_t[]){3, 7});
    attr_s(n, "post_transform", bin[k].post);
    attr_is(n, "class_treeids", 3, (const int64_t[]){0, 0, 0});
    attr_is(n, "class_nodeids", 3, (const int64_t[]){1, 3, 4});
    attr_is(n, "class_ids", 3, (const int64_t[]){0, 0, 0});
    attr_fs(n, "class_weights", 3, bin[k].w);
    if (!isnan(bin[k].base)) attr_fs(n, "base_values", 1, &bin[k].base);
    add_output(b, "L");
    add_output(b, "Z");
    run_both(must_import(b), out);
    expect_values(&out[0], 5, bin[k].labels, "binary labels");
    for (int i = 0; i < 10; i++)
      ck_assert_msg(fabs(((float *)out[1].data)[i] - bin[k].z[i]) < 1e-6, "binary %d score %d: %g, want %g", k, i,
                    ((float *)out[1].data)[i], bin[k].z[i]);
    ir_tensor_free(&out[1]);
  }
  b = model_new(17);
  n = legacy_trees(b, "TreeEnsembleClassifier", "L,Z", 5);
  attr_strings(n, "classlabels_strings", 2, (const char *const[]){"no", "yes"});
  add_output(b, "L");
  expect_error(import(b), "string class labels (classlabels_strings) are not supported");
  /* ZipMap: its maps are the [N, C] scores they zip, with a warning */
  for (int labels = 3; labels >= 2; labels--) {
    b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){2, 3});
    n = add_node(b, "ZipMap", "X", "M");
    n->domain = str("ai.onnx.ml");
    attr_is(n, "classlabels_int64s", labels, (const int64_t[]){4, 5, 6});
    add_output(b, "M");
    if (labels == 2) {
      expect_error(import(b), "(ZipMap): X must be f32 [N, C] for its 2 class labels");
      continue;
    }
    Tensor m = run1(must_import(b), "X", 2, (const int64_t[]){2, 3}, xdata);
    expect_values(&m, 6, (const double[]){1, -2, 3, 0.5, -1, 2}, "ZipMap");
    ck_assert_msg(strstr(onnxb_ctx.diag.text, "(ZipMap): its output, a sequence of maps, is the [N, 3] tensor of the scores"),
                  "%s", onnxb_ctx.diag.text);
  }
}
END_TEST

/* LinearClassifier (one row of coefficients for two labels: binary, [1 - s, s]
 * after the transform; three rows: the argmax), LinearRegressor, Scaler,
 * Normalizer (MAX ignores a NaN; a row whose norm is 0 is copied). */
START_TEST(test_linear_and_scalers) {
  static const struct {
    int k;
    const char *post;
    double labels[5], z[15];
  } lin[3] = {{1, "LOGISTIC", {7, 7, 7, 3, 3}, {0.37754065, 0.62245935, 0.07585818, 0.92414182, 0.37754065, 0.62245935}},
              {3, "NONE", {1, 1, 2, 1, 1}, {0.5, 0, -1, 2.5, 1, -3, 0.5, 1.5, -2}},
              {1, "NONE", {7, 7, 7, 3, 3}, {0.5, 0.5, -1.5, 2.5, 0.5, 0.5}}};
  for (int c = 0; c < 3; c++) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){5, 2});
    Onnx__NodeProto *n = add_node(b, "LinearClassifier", "X", "L,Z");
    n->domain = str("ai.onnx.ml");
    attr_fs(n, "intercepts", lin[c].k, lin[c].k == 1 ? (const float[]){0.5f} : (const float[]){0.5f, 0, -1});
    attr_fs(n, "coefficients", 2 * lin[c].k, (const float[]){1, -2, 0.5f, 0.5f, -1, 1});
    attr_is(n, "classlabels_ints", lin[c].k == 1 ? 2 : 3, lin[c].k == 1 ? (const int64_t[]){3, 7} : (const int64_t[]){1, 2, 3});
    attr_s(n, "post_transform", lin[c].post);
    add_output(b, "L");
    add_output(b, "Z");
    Tensor out[2];
    run_both(must_import(b), out);
    expect_values(&out[0], 5, lin[c].labels, "linear labels");
    int width = lin[c].k == 1 ? 2 : 3;
    ck_assert_int_eq(ir_type_numel(&out[1].type), 5 * width);
    for (int i = 0; i < 3 * width; i++) /* the rows without a NaN */
      ck_assert_msg(fabs(((float *)out[1].data)[i] - lin[c].z[i]) < 1e-6, "linear %d score %d", c, i);
    ir_tensor_free(&out[1]);
  }
  static const struct {
    const char *op, *norm;
    double want[6]; /* the rows without a NaN */
  } more[5] = {{"LinearRegressor", NULL, {1, 2, 3, 8, 5, 12}},    {"Scaler", NULL, {-2, 0.5, 2, 0.5, 2, 1}},
               {"Normalizer", "MAX", {0, 0, 1, 0, 1, 0.5}},      {"Normalizer", "L1", {0, 0, 1, 0, 2.0 / 3, 1.0 / 3}},
               {"Normalizer", "L2", {0, 0, 1, 0, 0.89442718, 0.44721359}}};
  for (int c = 0; c < 5; c++) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){5, 2});
    Onnx__NodeProto *n = add_node(b, more[c].op, "X", "Y");
    n->domain = str("ai.onnx.ml");
    if (c == 0) {
      attr_fs(n, "intercepts", 2, (const float[]){1, 2});
      attr_fs(n, "coefficients", 4, (const float[]){1, 2, 3, 4});
      attr_i(n, "targets", 2);
    } else if (c == 1) {
      attr_fs(n, "offset", 2, (const float[]){1, -1});
      attr_fs(n, "scale", 2, (const float[]){2, 0.5f});
    } else {
      attr_s(n, "norm", more[c].norm);
    }
    add_output(b, "Y");
    Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){5, 2}, legacy_x);
    for (int i = 0; i < 6; i++)
      ck_assert_msg(fabs(((float *)y.data)[i] - more[c].want[i]) < 1e-6, "%s %d: %g", more[c].op, i, ((float *)y.data)[i]);
    if (c == 2) /* [2, NaN] over its max 2; [NaN, 0]'s max is 0: copied */
      ck_assert(((float *)y.data)[6] == 1 && isnan(((float *)y.data)[7]) && isnan(((float *)y.data)[8]) &&
                ((float *)y.data)[9] == 0);
    ir_tensor_free(&y);
  }
}
END_TEST

/* Five support vectors of two features, and their coefficients. */
static const float svm_vectors[10] = {0, 0, 1, 1, 2, 0, 0, 2, 1, -1};
static const float svm_coef[10] = {1, -0.5f, 0.25f, 2, -1, 0.5f, 1.5f, -2, 1, 0.75f};

/* SVMRegressor in each kernel and without support vectors (one_class:
 * 1 or -1, a NaN -1); SVMClassifier one-vs-one of three classes (the
 * most votes; the pairs' scores) and two ([-s, s]), and in liblinear's
 * form (two classes: the second label where the best score passes 0 with
 * weights of both signs).  The rows without a NaN, onnxruntime's values. */
START_TEST(test_svm) {
  static const struct {
    const char *kernel;
    float params[3];
    double want[3];
  } reg[4] = {{"RBF", {0.5f, 0, 3}, {0.87768525, -0.00485262, 0.13753733}},
              {"POLY", {0.5f, 1, 2}, {1.875, -0.625, 6}},
              {"SIGMOID", {0.3f, 0.1f, 0}, {0.29941896, -0.2671169, 0.88808835}},
              {"LINEAR", {1, 0, 0}, {0.125, -1.875, 2.625}}};
  for (int c = 0; c < 5; c++) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){5, 2});
    Onnx__NodeProto *n = add_node(b, "SVMRegressor", "X", "Y");
    n->domain = str("ai.onnx.ml");
    if (c < 4) {
      attr_s(n, "kernel_type", reg[c].kernel);
      attr_fs(n, "kernel_params", 3, reg[c].params);
      attr_i(n, "n_supports", 5);
      attr_fs(n, "support_vectors", 10, svm_vectors);
      attr_fs(n, "coefficients", 5, svm_coef);
      attr_fs(n, "rho", 1, (const float[]){0.125f});
    } else {
      attr_fs(n, "coefficients", 2, (const float[]){1, -2});
      attr_fs(n, "rho", 1, (const float[]){0.5f});
      attr_i(n, "one_class", 1);
    }
    add_output(b, "Y");
    Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){5, 2}, legacy_x);
    if (c == 4) {
      expect_values(&y, 5, (const double[]){1, 1, 1, -1, -1}, "one-class SVM");
      continue;
    }
    for (int i = 0; i < 3; i++)
      ck_assert_msg(fabs(((float *)y.data)[i] - reg[c].want[i]) < 1e-6, "SVR %s row %d: %g", reg[c].kernel, i, ((float *)y.data)[i]);
    ir_tensor_free(&y);
  }
  static const struct {
    int classes, width;
    double labels[5], z[9];
  } cls[4] = {{3, 3, {4, 4, 4, 6, 6}, {1.2205646, 0.48393977, 0.44057435, 0.33802682, 0.05160739, -1.4057747, 0.19462234, 0.6687535, -0.76941258}},
              {2, 2, {8, 9, 8, 9, 9}, {-1.35, 1.35, 1.15, -1.15, -5.475, 5.475}},
              {3, 3, {1, 1, 2, 1, 1}, {0.25, 0.25, 0.25, 2.25, 1.25, -1.75, 0.25, 1.75, -0.75}},
              {2, 2, {2, 2, 2, 1, 1}, {0.25, 0.25, 2.25, 1.25, 0.25, 1.75}}};
  for (int c = 0; c < 4; c++) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){5, 2});
    Onnx__NodeProto *n = add_node(b, "SVMClassifier", "X", "L,Z");
    n->domain = str("ai.onnx.ml");
    if (c == 0) {
      attr_s(n, "kernel_type", "RBF");
      attr_fs(n, "kernel_params", 3, (const float[]){0.5f, 0, 3});
      attr_is(n, "classlabels_ints", 3, (const int64_t[]){4, 5, 6});
      attr_is(n, "vectors_per_class", 3, (const int64_t[]){2, 2, 1});
      attr_fs(n, "coefficients", 10, svm_coef);
      attr_fs(n, "rho", 3, (const float[]){0.1f, -0.2f, 0.3f});
    } else if (c == 1) {
      attr_s(n, "kernel_type", "POLY");
      attr_fs(n, "kernel_params", 3, (const float[]){0.5f, 1, 2});
      attr_is(n, "classlabels_ints", 2, (const int64_t[]){8, 9});
      attr_is(n, "vectors_per_class", 2, (const int64_t[]){3, 2});
      attr_fs(n, "coefficients", 5, svm_coef);
      attr_fs(n, "rho", 1, (const float[]){-0.4f});
    } else {
      attr_is(n, "classlabels_ints", cls[c].classes, (const int64_t[]){1, 2, 3});
      attr_fs(n, "coefficients", 2 * cls[c].classes, (const float[]){1, -2, 0.5f, 0.5f, -1, 1});
      attr_fs(n, "rho", 1, (const float[]){0.25f});
    }
    if (c < 2) attr_fs(n, "support_vectors", 10, svm_vectors);
    add_output(b, "L");
    add_output(b, "Z");
    Tensor out[2];
    run_both(must_import(b), out);
    expect_values(&out[0], 5, cls[c].labels, "SVM labels");
    ck_assert_int_eq(ir_type_numel(&out[1].type), 5 * cls[c].width);
    for (int i = 0; i < 3 * cls[c].width; i++)
      ck_assert_msg(fabs(((float *)out[1].data)[i] - cls[c].z[i]) < 1e-5, "SVM %d score %d: %g", c, i, ((float *)out[1].data)[i]);
    ir_tensor_free(&out[1]);
  }
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){5, 2});
  Onnx__NodeProto *n = add_node(b, "SVMClassifier", "X", "L,Z");
  n->domain = str("ai.onnx.ml");
  attr_is(n, "classlabels_ints", 2, (const int64_t[]){0, 1});
  attr_fs(n, "coefficients", 4, (const float[]){1, 2, 3, 4});
  attr_fs(n, "rho", 1, (const float[]){0});
  attr_fs(n, "prob_a", 1, (const float[]){-1});
  add_output(b, "L");
  expect_error(import(b), "(SVMClassifier): probability estimates (prob_a, prob_b) are not supported");
}
END_TEST

/* Imputer (NaNs, or a value, become their feature's imputed value) and
 * LabelEncoder of numbers (a key's value, the default for the rest; a
 * key given twice is refused). */
START_TEST(test_imputer_and_label_encoder) {
  for (int c = 0; c < 3; c++) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){5, 2});
    Onnx__NodeProto *n = add_node(b, c < 2 ? "Imputer" : "LabelEncoder", "X", "Y");
    n->domain = str("ai.onnx.ml");
    if (c == 0) {
      attr_fs(n, "imputed_value_floats", 2, (const float[]){7, 8});
      attr_f(n, "replaced_value_float", NAN);
    } else if (c == 1) {
      attr_fs(n, "imputed_value_floats", 1, (const float[]){-1});
      attr_f(n, "replaced_value_float", 2);
    } else {
      attr_fs(n, "keys_floats", 3, (const float[]){0, 2, 1});
      attr_is(n, "values_int64s", 3, (const int64_t[]){10, 20, 30});
      attr_i(n, "default_int64", -5);
    }
    add_output(b, "Y");
    Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){5, 2}, legacy_x);
    if (c == 0) expect_values(&y, 10, (const double[]){0, 0, 2, 0, 2, 1, 2, 8, 7, 0}, "Imputer of NaNs");
    if (c == 1) {
      ck_assert(isnan(((float *)y.data)[7]) && isnan(((float *)y.data)[8]));
      ((float *)y.data)[7] = ((float *)y.data)[8] = 0;
      expect_values(&y, 10, (const double[]){0, 0, -1, 0, -1, 1, -1, 0, 0, 0}, "Imputer of 2");
    }
    if (c == 2) expect_values(&y, 10, (const double[]){10, 10, 20, 10, 20, 30, 20, -5, -5, 10}, "LabelEncoder");
  }
  Model *b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){5, 2});
  Onnx__NodeProto *n = add_node(b, "LabelEncoder", "X", "Y");
  n->domain = str("ai.onnx.ml");
  attr_fs(n, "keys_floats", 3, (const float[]){0, 2, 0});
  attr_is(n, "values_int64s", 3, (const int64_t[]){10, 20, 30});
  add_output(b, "Y");
  expect_error(import(b), "(LabelEncoder): key 0 is given twice");
}
END_TEST

/* OneHotEncoder of integer categories (a float truncated): an axis of
 * one a category; a value of none gives zeros, or with zeros=0 fails
 * the run naming the node. */
START_TEST(test_one_hot_encoder) {
  static const float x[4] = {2, 0.5f, 7, 1.9f};
  for (int zeros = 1; zeros >= 0; zeros--) {
    Model *b = model_new(17);
    add_input(b, "X", 2, (const int64_t[]){4, 1});
    Onnx__NodeProto *n = add_node(b, "OneHotEncoder", "X", "Y");
    n->domain = str("ai.onnx.ml");
    attr_is(n, "cats_int64s", 3, (const int64_t[]){0, 1, 2});
    attr_i(n, "zeros", zeros);
    add_output(b, "Y");
    Graph *g = must_import(b);
    ck_assert(same_dims(&g->outputs[0]->type, 3, (const int64_t[]){4, 1, 3}));
    if (zeros) {
      Tensor y = run1(g, "X", 2, (const int64_t[]){4, 1}, x);
      expect_values(&y, 12, (const double[]){0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0}, "OneHotEncoder");
      continue;
    }
    Tensor in = {ir_type_make(TY_F32, 2, (const int64_t[]){4, 1}), (void *)x}, out[1];
    TensorMap inputs = {1, (const char *[]){"X"}, &in};
    char err[512];
    ck_assert(!ir_eval(g, &inputs, &params, out, err, sizeof err));
    ck_assert_msg(strstr(err, "(OneHotEncoder): a value is none of the categories (zeros=0)"), "%s", err);
  }
}
END_TEST

/* What review against onnxruntime 1.32 found: a binary classifier of
 * positive weights under LOGISTIC scores [1 - σ(s), σ(s)]; a base value
 * is added only to a score some tree gave (weights naming the second
 * class only, two base values: [0, base1 + 0]); an RBF kernel of
 * features of large mean keeps its precision; LabelEncoder's int64 keys
 * past 2^53 stay exact. */
START_TEST(test_ml_review_cases) {
  Model *b = model_new(17);
  Onnx__NodeProto *n = legacy_trees(b, "TreeEnsembleClassifier", "L,Z", 5);
  attr_is(n, "classlabels_int64s", 2, (const int64_t[]){3, 7});
  attr_s(n, "post_transform", "LOGISTIC");
  attr_is(n, "class_treeids", 3, (const int64_t[]){0, 0, 0});
  attr_is(n, "class_nodeids", 3, (const int64_t[]){1, 3, 4});
  attr_is(n, "class_ids", 3, (const int64_t[]){0, 0, 0});
  attr_fs(n, "class_weights", 3, (const float[]){0.2f, 0.7f, 0.4f});
  add_output(b, "L");
  add_output(b, "Z");
  Tensor out[2];
  run_both(must_import(b), out);
  expect_values(&out[0], 5, (const double[]){3, 7, 3, 7, 7}, "labels");
  static const double z[10] = {0.45016600, 0.54983400, 0.33181223, 0.66818777, 0.40131234, 0.59868766, 0.33181223, 0.66818777, 0.33181223, 0.66818777};
  for (int i = 0; i < 10; i++) ck_assert_msg(fabs(((float *)out[1].data)[i] - z[i]) < 1e-6, "logistic score %d", i);
  ir_tensor_free(&out[1]);
  b = model_new(17);
  n = legacy_trees(b, "TreeEnsembleClassifier", "L,Z", 5);
  attr_is(n, "classlabels_int64s", 2, (const int64_t[]){3, 7});
  attr_is(n, "class_treeids", 3, (const int64_t[]){0, 0, 0});
  attr_is(n, "class_nodeids", 3, (const int64_t[]){1, 3, 4});
  attr_is(n, "class_ids", 3, (const int64_t[]){1, 1, 1});
  attr_fs(n, "class_weights", 3, (const float[]){0.2f, 0.7f, 0.4f});
  attr_fs(n, "base_values", 2, (const float[]){0.1f, -0.2f});
  add_output(b, "L");
  add_output(b, "Z");
  run_both(must_import(b), out);
  ir_tensor_free(&out[0]);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(((float *)out[1].data)[2 * i] == 0 && fabs(((float *)out[1].data)[2 * i + 1] + 0.2) < 1e-6,
                  "row %d: [%g, %g], want [0, -0.2]", i, ((float *)out[1].data)[2 * i], ((float *)out[1].data)[2 * i + 1]);
  ir_tensor_free(&out[1]);
  b = model_new(17);
  add_input(b, "X", 2, (const int64_t[]){1, 3});
  n = add_node(b, "SVMRegressor", "X", "Y");
  n->domain = str("ai.onnx.ml");
  attr_s(n, "kernel_type", "RBF");
  attr_fs(n, "kernel_params", 3, (const float[]){1, 0, 0});
  attr_i(n, "n_supports", 1);
  attr_fs(n, "support_vectors", 3, (const float[]){10000, 10000, 10000});
  attr_fs(n, "coefficients", 1, (const float[]){1});
  attr_fs(n, "rho", 1, (const float[]){0});
  add_output(b, "Y");
  Tensor y = run1(must_import(b), "X", 2, (const int64_t[]){1, 3}, (const float[]){10000.5f, 10000, 10000});
  expect_values(&y, 1, (const double[]){0.77880078}, "RBF of a large mean");
  b = model_new(17);
  add_input_typed(b, "X", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (const int64_t[]){3});
  n = add_node(b, "LabelEncoder", "X", "Y");
  n->domain = str("ai.onnx.ml");
  const int64_t big = ((int64_t)1 << 53) + 1;
  attr_is(n, "keys_int64s", 3, (const int64_t[]){1, 3, big});
  attr_is(n, "values_int64s", 3, (const int64_t[]){5, 6, 7});
  add_output(b, "Y");
  Graph *g = must_import(b);
  Tensor in = {ir_type_make(TY_I64, 1, (const int64_t[]){3}), (int64_t[]){big - 1, big, 3}}, lo[1];
  TensorMap inputs = {1, (const char *[]){"X"}, &in};
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, lo, err, sizeof err), "%s", err);
  ck_assert(((int64_t *)lo[0].data)[0] == -1 && ((int64_t *)lo[0].data)[1] == 7 && ((int64_t *)lo[0].data)[2] == 6);
  ir_tensor_free(&lo[0]);
}
END_TEST

static Suite *onnx_ml_suite(void) {
  Suite *s = suite_create("onnx_ml");
  TCase *tc = tcase_create("ml");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_ml_domain);
  tcase_add_test(tc, test_tree_ensemble);
  tcase_add_test(tc, test_tree_ensemble_regressor);
  tcase_add_test(tc, test_tree_ensemble_classifier);
  tcase_add_test(tc, test_linear_and_scalers);
  tcase_add_test(tc, test_svm);
  tcase_add_test(tc, test_imputer_and_label_encoder);
  tcase_add_test(tc, test_one_hot_encoder);
  tcase_add_test(tc, test_ml_review_cases);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(onnx_ml_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
