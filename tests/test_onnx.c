/* The ONNX importer: takes models built here with protobuf-c (no Python
 * needed) and checks the graphs, the params' data, the values computed by
 * the reference interpreter, folding at import, and the messages for bad
 * or unsupported input; then an .onnx file through the JIT API. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlcc.h"
#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "ir/eval.h"
#include "onnxbuild.h" /* the models, built with protobuf-c */

/* ---- importing ---- */

static Ctx ctx;
static TensorMap params;

static void setup(void) {
  ctx_init(&ctx);
  params = (TensorMap){0};
}

static void teardown(void) {
  ir_tensor_map_free(&params);
  ctx_free(&ctx);
  pool_free();
}

static Graph *import_opt(Model *b, const OnnxOptions *o) {
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  /* A test may import several models: the last one's params are kept. */
  ir_tensor_map_free(&params);
  return fe_onnx_import_bytes(&ctx, "/tmp/model.onnx", buf, len, o, &params);
}

static Graph *import(Model *b) { return import_opt(b, NULL); }

/* The import fails and the messages contain want. */
static void expect_error(Graph *g, const char *want) {
  ck_assert_msg(g == NULL, "imported, expected an error with '%s'", want);
  ck_assert_int_gt(ctx.diag.errors, 0);
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

static Graph *must_import(Model *b) {
  Graph *g = import(b);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  return g;
}

static int count_op(Graph *g, OpKind op) {
  int k = 0;
  for (Node *n = g->first; n; n = n->next) k += n->op == op;
  return k;
}

static Node *first_op(Graph *g, OpKind op) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == op) return n;
  return NULL;
}

/* Runs g with one float input named x. */
static Tensor run1(Graph *g, const char *name, int rank, const int64_t *dims, const float *x) {
  Tensor in = {ir_type_make(TY_F32, rank, dims), (void *)x};
  const char *nm[1] = {name};
  TensorMap inputs = {1, nm, &in};
  Tensor out[4];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "eval: %s", err);
  for (int i = 1; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
  return out[0];
}

static const float xdata[6] = {1, -2, 3, 0.5f, -1, 2};
static const float wdata[12] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1, 1.1f, -1.2f};
static const float bdata[4] = {0.5f, -0.25f, 0, 1};

START_TEST(test_gemm_initializers_are_params) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3}, wd[2] = {4, 3}, bd[1] = {4};
  add_input(b, "x", 2, xd);
  add_init_f32(b, "fc.weight", 2, wd, 12, wdata);
  add_init_f32(b, "fc.bias", 1, bd, 4, bdata);
  attr_i(add_node(b, "Gemm", "x,fc.weight,fc.bias", "h"), "transB", 1);
  add_node(b, "Relu", "h", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  /* nn.Linear's export stays one linear op over the two params. */
  ck_assert_int_eq(count_op(g, OP_LINEAR), 1);
  ck_assert_int_eq(count_op(g, OP_PARAM), 2);
  ck_assert_int_eq(params.n, 2);
  const Tensor *w = ir_tensor_map_find(&params, "fc.weight");
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(w->type.dims[0], 4);
  ck_assert(memcmp(w->data, wdata, sizeof wdata) == 0);
  ck_assert_str_eq(g->output_names[0], "y");
  Tensor y = run1(g, "x", 2, xd, xdata);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      double s = bdata[j];
      for (int k = 0; k < 3; k++) s += xdata[i * 3 + k] * wdata[j * 3 + k];
      ck_assert_double_eq_tol(ir_tensor_get(&y, i * 4 + j), s > 0 ? s : 0, 1e-6);
    }
  ir_tensor_free(&y);
}
END_TEST

START_TEST(test_gemm_trans_alpha_beta) {
  Model *b = model_new(13);
  int64_t ad[2] = {3, 2}, wd[2] = {3, 4}, cd[1] = {4};
  add_input(b, "a", 2, ad);
  add_init_f32(b, "B", 2, wd, 12, wdata);
  add_init_f32(b, "C", 1, cd, 4, bdata);
  Onnx__NodeProto *n = add_node(b, "Gemm", "a,B,C", "y");
  attr_i(n, "transA", 1);
  attr_f(n, "alpha", 2.0f);
  attr_f(n, "beta", 0.5f);
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_TRANSPOSE), 1);
  Tensor y = run1(g, "a", 2, ad, xdata);
  ck_assert_int_eq(y.type.dims[0], 2);
  ck_assert_int_eq(y.type.dims[1], 4);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      double s = 0;
      for (int k = 0; k < 3; k++) s += xdata[k * 2 + i] * wdata[k * 4 + j];
      ck_assert_double_eq_tol(ir_tensor_get(&y, i * 4 + j), 2 * s + 0.5 * bdata[j], 1e-5);
    }
  ir_tensor_free(&y);
}
END_TEST

START_TEST(test_symbolic_batch_needs_define) {
  Model *b = model_new(13);
  const char *sym[2] = {"N", NULL};
  int64_t d[2] = {0, 3};
  b->ins[b->g.n_input++] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, d, sym);
  add_node(b, "Relu", "x", "y");
  add_output(b, "y");
  expect_error(import(b), "dim 0 of graph input 'x' is the symbolic 'N': bind it with -D N=VALUE");
  diag_clear(&ctx);
  Define def = {"N", 5};
  OnnxOptions o = {.n_defines = 1, .defines = &def};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert_int_eq(g->first->out[0].type.dims[0], 5);
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 5);
}
END_TEST

START_TEST(test_shape_chain_folds) {
  /* y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) */
  Model *b = model_new(13);
  int64_t xd[3] = {2, 3, 4}, zero = 0, minus1 = -1;
  add_input(b, "x", 3, xd);
  Onnx__TensorProto *z = tensor("zero", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
  z->n_int64_data = 1;
  z->int64_data = mem(sizeof(int64_t));
  z->int64_data[0] = zero;
  b->inits[b->g.n_initializer++] = z;
  add_init_i64(b, "axes0", 1, &zero);
  add_init_i64(b, "rest", 1, &minus1);
  add_node(b, "Shape", "x", "s");
  add_node(b, "Gather", "s,zero", "n");
  add_node(b, "Unsqueeze", "n,axes0", "n1");
  attr_i(add_node(b, "Concat", "n1,rest", "shape"), "axis", 0);
  add_node(b, "Reshape", "x,shape", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  /* Nothing of the shape arithmetic is left: the input and one reshape. */
  ck_assert_int_eq(g->n_nodes, 2);
  ck_assert_int_eq(count_op(g, OP_RESHAPE), 1);
  ck_assert_int_eq(params.n, 0);
  ck_assert_int_eq(g->outputs[0]->type.rank, 2);
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 2);
  ck_assert_int_eq(g->outputs[0]->type.dims[1], 12);
}
END_TEST

START_TEST(test_lstm_gates_reordered_at_import) {
  /* hidden 1, input 1: W rows are the gates i, o, f, c. */
  Model *b = model_new(14);
  int64_t xd[3] = {2, 1, 1}, wd[3] = {1, 4, 1}, bd[2] = {1, 8};
  add_input(b, "x", 3, xd);
  const float w[4] = {1, 2, 3, 4}, r[4] = {10, 20, 30, 40};
  const float bias[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  add_init_f32(b, "W", 3, wd, 4, w);
  add_init_f32(b, "R", 3, wd, 4, r);
  add_init_f32(b, "B", 2, bd, 8, bias);
  attr_i(add_node(b, "LSTM", "x,W,R,B", "Y,Y_h"), "hidden_size", 1);
  add_output(b, "Y");
  add_output(b, "Y_h");
  Graph *g = must_import(b);
  Node *l = first_op(g, OP_LSTM);
  ck_assert_ptr_nonnull(l);
  ck_assert_int_eq(l->n_in, 5);
  /* PyTorch order i, f, g, o = ONNX rows 0, 2, 3, 1, folded into params. */
  const float want_w[4] = {1, 3, 4, 2}, want_r[4] = {10, 30, 40, 20};
  const float want_bih[4] = {1, 3, 4, 2}, want_bhh[4] = {5, 7, 8, 6};
  const float *want[4] = {want_w, want_r, want_bih, want_bhh};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(l->in[1 + k]->def->op, OP_PARAM);
    const Tensor *t = ir_tensor_map_find(&params, ir_attr_str(l->in[1 + k]->def, "name"));
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(((const float *)t->data)[i], want[k][i]);
  }
  /* ONNX's Y is [T, dirs, N, H]. */
  ck_assert_int_eq(g->outputs[0]->type.rank, 4);
  ck_assert_int_eq(g->outputs[0]->type.dims[1], 1);
  /* One step by hand: x=0.5 then 0.25, h0=c0=0. */
  const float x[2] = {0.5f, 0.25f};
  Tensor y = run1(g, "x", 3, xd, x);
  double h = 0, c = 0;
  for (int t = 0; t < 2; t++) {
    double gi = 1 * x[t] + 10 * h + 1 + 5, go = 2 * x[t] + 20 * h + 2 + 6;
    double gf = 3 * x[t] + 30 * h + 3 + 7, gc = 4 * x[t] + 40 * h + 4 + 8;
    double sg_i = 1 / (1 + exp(-gi)), sg_o = 1 / (1 + exp(-go)), sg_f = 1 / (1 + exp(-gf));
    c = sg_f * c + sg_i * tanh(gc);
    h = sg_o * tanh(c);
    ck_assert_double_eq_tol(ir_tensor_get(&y, t), h, 1e-6);
  }
  ir_tensor_free(&y);
}
END_TEST

START_TEST(test_conv_auto_pad_same) {
  Model *b = model_new(13);
  int64_t xd[4] = {1, 1, 6, 6}, wd[4] = {1, 1, 3, 3};
  float w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  add_input(b, "x", 4, xd);
  add_init_f32(b, "w", 4, wd, 9, w);
  int64_t s2[2] = {2, 2};
  Onnx__NodeProto *n = add_node(b, "Conv", "x,w", "y");
  attr_s(n, "auto_pad", "SAME_LOWER");
  attr_is(n, "strides", 2, s2);
  add_output(b, "y");
  Graph *g = must_import(b);
  Node *c = first_op(g, OP_CONV2D);
  int count;
  const int64_t *pad = ir_attr_ints(c, "pad", &count);
  /* out 3, total padding 1: SAME_LOWER puts it before. */
  ck_assert_int_eq(count, 4);
  ck_assert_int_eq(pad[0], 1);
  ck_assert_int_eq(pad[1], 1);
  ck_assert_int_eq(pad[2], 0);
  ck_assert_int_eq(pad[3], 0);
  ck_assert_int_eq(g->outputs[0]->type.dims[2], 3);
}
END_TEST

START_TEST(test_slice_negative_step) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  int64_t st = -1, en = INT64_MIN, ax = 1, step = -1;
  add_init_i64(b, "st", 1, &st);
  add_init_i64(b, "en", 1, &en);
  add_init_i64(b, "ax", 1, &ax);
  add_init_i64(b, "sp", 1, &step);
  add_node(b, "Slice", "x,st,en,ax,sp", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor y = run1(g, "x", 2, xd, xdata);
  const float want[6] = {3, -2, 1, 2, -1, 0.5f};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(ir_tensor_get(&y, i), want[i]);
  ir_tensor_free(&y);
}
END_TEST

START_TEST(test_gelu_opset20) {
  Model *b = model_new(20);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  attr_s(add_node(b, "Gelu", "x", "y"), "approximate", "tanh");
  add_output(b, "y");
  Graph *g = must_import(b);
  Node *n = first_op(g, OP_GELU);
  ck_assert_ptr_nonnull(n);
  ck_assert_str_eq(ir_attr_str(n, "approximate"), "tanh");
  Tensor y = run1(g, "x", 2, xd, xdata);
  double x = xdata[2];
  ck_assert_double_eq_tol(ir_tensor_get(&y, 2),
                          0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))), 1e-6);
  ir_tensor_free(&y);
}
END_TEST

/* RMSNormalization (opset 23): one rms_norm; a scale of the normalized
 * shape is its weight, a broadcast one a mul after it. */
START_TEST(test_rms_normalization) {
  int64_t xd[2] = {2, 3}, one = 1;
  for (int broadcast = 0; broadcast < 2; broadcast++) {
    Model *b = model_new(23);
    add_input(b, "x", 2, xd);
    add_init_f32(b, "s", 1, broadcast ? &one : &xd[1], broadcast ? 1 : 3, bdata);
    Onnx__NodeProto *n = add_node(b, "RMSNormalization", "x,s", "y");
    attr_f(n, "epsilon", 0.5f);
    add_output(b, "y");
    Graph *g = must_import(b);
    ck_assert_int_eq(count_op(g, OP_RMS_NORM), 1);
    ck_assert_int_eq(count_op(g, OP_MUL), broadcast);
    ck_assert_int_eq(first_op(g, OP_RMS_NORM)->n_in, 2 - broadcast);
    Tensor y = run1(g, "x", 2, xd, xdata);
    for (int r = 0; r < 2; r++) {
      double ms = 0;
      for (int k = 0; k < 3; k++) ms += xdata[3 * r + k] * xdata[3 * r + k] / 3.0;
      for (int k = 0; k < 3; k++)
        ck_assert_double_eq_tol(ir_tensor_get(&y, 3 * r + k),
                                xdata[3 * r + k] / sqrt(ms + 0.5f) * bdata[broadcast ? 0 : k], 1e-6);
    }
    ir_tensor_free(&y);
  }
}
END_TEST

/* GroupNormalization: scale and bias per channel (opset 21) or per group
 * (opset 18, each channel taking its group's): one group_norm. */
START_TEST(test_group_normalization) {
  int64_t xd[3] = {1, 4, 2}, c = 4, groups = 2;
  static const float per_group[2] = {2, -1}, per_channel[4] = {2, 2, -1, -1}, bias[4] = {0.5f, 0.5f, 1, 1};
  for (int opset = 18; opset <= 21; opset += 3) {
    Model *b = model_new(opset);
    add_input(b, "x", 3, xd);
    add_init_f32(b, "s", 1, opset == 18 ? &groups : &c, opset == 18 ? 2 : 4, opset == 18 ? per_group : per_channel);
    add_init_f32(b, "b", 1, opset == 18 ? &groups : &c, opset == 18 ? 2 : 4, opset == 18 ? bias + 1 : bias);
    Onnx__NodeProto *n = add_node(b, "GroupNormalization", "x,s,b", "y");
    attr_i(n, "num_groups", 2);
    add_output(b, "y");
    Graph *g = must_import(b);
    ck_assert_int_eq(count_op(g, OP_GROUP_NORM), 1);
    Tensor y = run1(g, "x", 3, xd, wdata);
    for (int gr = 0; gr < 2; gr++) {
      double mean = 0, var = 0;
      for (int k = 0; k < 4; k++) mean += wdata[4 * gr + k] / 4.0;
      for (int k = 0; k < 4; k++) var += (wdata[4 * gr + k] - mean) * (wdata[4 * gr + k] - mean) / 4.0;
      for (int k = 0; k < 4; k++) {
        int ch = 2 * gr + k / 2;
        double want = (wdata[4 * gr + k] - mean) / sqrt(var + 1e-5) * per_channel[ch] + (opset == 18 ? bias[1 + gr] : bias[ch]);
        ck_assert_double_eq_tol(ir_tensor_get(&y, 4 * gr + k), want, 1e-5);
      }
    }
    ir_tensor_free(&y);
  }
}
END_TEST

/* Pad's reflect, edge and (opset 19) wrap modes, as gathers: x's rows
 * [1, -2, 3] and [0.5, -1, 2] padded by 2 before and 1 after on axis 1. */
static void expect_pad(int opset, const char *mode, const float *want) {
  Model *b = model_new(opset);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  int64_t pads[4] = {0, 2, 0, 1};
  add_init_i64(b, "pads", 4, pads);
  attr_s(add_node(b, "Pad", "x,pads", "y"), "mode", mode);
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_ptr_nonnull(first_op(g, OP_GATHER));
  Tensor y = run1(g, "x", 2, xd, xdata);
  ck_assert_int_eq(ir_type_numel(&y.type), 12);
  for (int i = 0; i < 12; i++) ck_assert_msg(ir_tensor_get(&y, i) == want[i], "%s element %d", mode, i);
  ir_tensor_free(&y);
}

START_TEST(test_pad_modes) {
  expect_pad(13, "reflect", (const float[]){3, -2, 1, -2, 3, -2, 2, -1, 0.5f, -1, 2, -1});
  expect_pad(13, "edge", (const float[]){1, 1, 1, -2, 3, 3, 0.5f, 0.5f, 0.5f, -1, 2, 2});
  expect_pad(19, "wrap", (const float[]){-2, 3, 1, -2, 3, 1, -1, 2, 0.5f, -1, 2, 0.5f});
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  add_init_i64(b, "pads", 4, (const int64_t[]){0, 1, 0, 1});
  attr_s(add_node(b, "Pad", "x,pads", "y"), "mode", "wrap");
  add_output(b, "y");
  expect_error(import(b), "(Pad): mode='wrap' is not supported (constant, reflect, edge are)");
}
END_TEST

/* Before opset 7: broadcast=1 with an axis, and PRelu's per-channel
 * slope. */
START_TEST(test_legacy_broadcast) {
  Model *b = model_new(6);
  int64_t xd[2] = {2, 3}, bd = 2;
  add_input(b, "x", 2, xd);
  add_init_f32(b, "c", 1, &bd, 2, (const float[]){10, 20});
  Onnx__NodeProto *add = add_node(b, "Add", "x,c", "y");
  attr_i(add, "broadcast", 1);
  attr_i(add, "axis", 0);
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor y = run1(g, "x", 2, xd, xdata);
  for (int i = 0; i < 6; i++) ck_assert_double_eq(ir_tensor_get(&y, i), xdata[i] + (i < 3 ? 10 : 20));
  ir_tensor_free(&y);
  b = model_new(6);
  add_input(b, "x", 2, xd);
  add_init_f32(b, "c", 1, &bd, 2, (const float[]){10, 20});
  add = add_node(b, "Add", "x,c", "y");
  attr_i(add, "broadcast", 1);
  attr_i(add, "axis", 1);
  add_output(b, "y");
  expect_error(import(b), "(Add): broadcast axis 1: B's dim 0 is 2, A's dim 1 is 3");
  diag_clear(&ctx);
  b->nodes[0]->attribute[1]->i = 2;
  expect_error(import(b), "(Add): broadcast axis 2 does not fit B's 1 dims in A's 2");
  diag_clear(&ctx);
  b = model_new(6);
  int64_t x3[3] = {1, 2, 3};
  add_input(b, "x", 3, x3);
  add_init_f32(b, "slope", 1, &bd, 2, (const float[]){0.5f, 0.25f});
  add_node(b, "PRelu", "x,slope", "y");
  add_output(b, "y");
  g = must_import(b);
  y = run1(g, "x", 3, x3, xdata);
  for (int i = 0; i < 6; i++) {
    double x = xdata[i];
    ck_assert_double_eq(ir_tensor_get(&y, i), x > 0 ? x : x * (i < 3 ? 0.5 : 0.25));
  }
  ir_tensor_free(&y);
}
END_TEST

/* A plain RNN, hidden 1 and input 1 (W = 2, R = 0.5, no bias): h_t =
 * act(2 x_t + 0.5 h_{t-1}), imported step by step. */
static Model *rnn_model(int64_t T, const char *activation) {
  Model *b = model_new(14);
  int64_t xd[3] = {T, 1, 1}, wd[3] = {1, 1, 1};
  add_input(b, "x", 3, xd);
  add_init_f32(b, "W", 3, wd, 1, (const float[]){2});
  add_init_f32(b, "R", 3, wd, 1, (const float[]){0.5f});
  Onnx__NodeProto *n = add_node(b, "RNN", "x,W,R", "Y");
  attr_i(n, "hidden_size", 1);
  if (activation) {
    Onnx__AttributeProto *a = attr(n, "activations", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    a->n_strings = 1;
    a->strings = mem(sizeof *a->strings);
    a->strings[0].data = (uint8_t *)str(activation);
    a->strings[0].len = strlen(activation);
  }
  add_output(b, "Y");
  return b;
}

START_TEST(test_rnn_unrolled) {
  int64_t xd[3] = {3, 1, 1};
  const float x[3] = {0.5f, -1, 0.25f};
  const char *acts[2] = {NULL, "Relu"};
  for (int k = 0; k < 2; k++) {
    Graph *g = must_import(rnn_model(3, acts[k]));
    ck_assert_ptr_null(first_op(g, OP_LSTM));
    ck_assert_ptr_null(first_op(g, OP_GRU));
    Tensor y = run1(g, "x", 3, xd, x);
    double h = 0;
    for (int t = 0; t < 3; t++) {
      double pre = 2 * x[t] + 0.5 * h;
      h = k ? fmax(pre, 0) : tanh(pre);
      ck_assert_double_eq_tol(ir_tensor_get(&y, t), h, 1e-6);
    }
    ir_tensor_free(&y);
  }
  expect_error(import(rnn_model(3, "Frobnicate")), "(RNN): activation 'Frobnicate' is not supported");
  diag_clear(&ctx);
  expect_error(import(rnn_model(1100, NULL)), "(RNN): unrolled, this is 1100 steps, more than dlcc unrolls (1024)");
  diag_clear(&ctx);
  Model *b = rnn_model(3, NULL);
  add_init_i64(b, "lens", 1, (const int64_t[]){4});
  b->nodes[0]->input = names("x,W,R,,lens", &b->nodes[0]->n_input);
  expect_error(import(b), "(RNN): sequence_lens entry 0 is 4, not in [1, 3]");
  diag_clear(&ctx);
}
END_TEST

/* ---- bad input ---- */

static Model *relu_model(void) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  add_node(b, "Relu", "x", "y");
  add_output(b, "y");
  return b;
}

START_TEST(test_not_protobuf) {
  const char text[] = "graph mlp { this is not protobuf }\n";
  Graph *g = fe_onnx_import_bytes(&ctx, "text.onnx", text, sizeof text - 1, NULL, &params);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(diag_text(&ctx), "text.onnx: not an ONNX model"), "%s", diag_text(&ctx));
}
END_TEST

START_TEST(test_truncated) {
  Model *b = relu_model();
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  /* Every prefix is refused with a message, none crashes. */
  for (size_t cut = 0; cut < len; cut++) {
    diag_clear(&ctx);
    Graph *g = fe_onnx_import_bytes(&ctx, "cut.onnx", buf, cut, NULL, &params);
    ck_assert_msg(g == NULL, "a %zu-byte prefix of %zu imported", cut, len);
    ck_assert_msg(strstr(diag_text(&ctx), "cut.onnx:"), "no message for a %zu-byte prefix", cut);
  }
  diag_clear(&ctx);
  ck_assert_ptr_nonnull(fe_onnx_import_bytes(&ctx, "whole.onnx", buf, len, NULL, &params));
}
END_TEST

START_TEST(test_missing_file) {
  TensorMap p;
  ck_assert_ptr_null(fe_onnx_import(&ctx, "/nonexistent/m.onnx", NULL, &p));
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "cannot read '/nonexistent/m.onnx'"));
}
END_TEST

START_TEST(test_cycle) {
  Model *b = model_new(13);
  int64_t xd[1] = {3};
  add_input(b, "x", 1, xd);
  add_node(b, "Add", "x,b", "a");
  add_node(b, "Relu", "a", "b");
  add_output(b, "b");
  expect_error(import(b), "the graph has a cycle");
}
END_TEST

START_TEST(test_dangling_input) {
  Model *b = relu_model();
  add_node(b, "Add", "y,nope", "z");
  b->outs[0]->name = str("z");
  expect_error(import(b), "node 1 'n1' (Add): input 'nope' is not defined");
}
END_TEST

START_TEST(test_huge_dimension) {
  Model *b = model_new(13);
  int64_t xd[2] = {(int64_t)1 << 50, 3};
  add_input(b, "x", 2, xd);
  add_node(b, "Relu", "x", "y");
  add_output(b, "y");
  expect_error(import(b), "dim 0 of graph input 'x' is 1125899906842624, out of range");
  diag_clear(&ctx);
  int64_t big[2] = {(int64_t)1 << 30, (int64_t)1 << 30};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big, NULL);
  expect_error(import(b), "graph input 'x' is larger than");
}
END_TEST

START_TEST(test_initializer_size_mismatch) {
  Model *b = relu_model();
  int64_t wd[2] = {4, 3};
  add_init_f32(b, "w", 2, wd, 10, wdata);
  expect_error(import(b), "initializer 'w': f32[4, 3] FLOAT needs 12 float_data values, the file has 10");
}
END_TEST

START_TEST(test_unsupported_op_attr_dtype) {
  Model *b = relu_model();
  b->nodes[0]->op_type = str("Frobnicate");
  expect_error(import(b), "/tmp/model.onnx: node 0 'n0' (Frobnicate): op Frobnicate is not supported");
  diag_clear(&ctx);
  b = relu_model();
  attr_i(b->nodes[0], "bogus", 1);
  expect_error(import(b), "node 0 'n0' (Relu): attribute 'bogus' is not supported");
  diag_clear(&ctx);
  b = relu_model();
  int64_t d[2] = {2, 3};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 2, d, NULL);
  expect_error(import(b), "graph input 'x' has dtype DOUBLE, which is not supported");
  diag_clear(&ctx);
  b = relu_model();
  attr_s(add_node(b, "MaxPool", "y", "z"), "auto_pad", "WEIRD");
  attr_is(b->nodes[1], "kernel_shape", 1, (int64_t[]){2});
  b->outs[0]->name = str("z");
  int64_t x3[3] = {1, 2, 3};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, x3, NULL);
  expect_error(import(b), "(MaxPool): auto_pad='WEIRD' is not supported");
}
END_TEST

START_TEST(test_runtime_shape_refused) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3}, sd[1] = {2};
  add_input(b, "x", 2, xd);
  b->ins[b->g.n_input++] = value_info("shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, sd, NULL);
  add_node(b, "Reshape", "x,shape", "y");
  add_output(b, "y");
  expect_error(import(b), "(Reshape): the target shape computed at run time is not supported");
  /* The backend tests' way: the input's value is known at import. */
  diag_clear(&ctx);
  int64_t sh[2] = {3, -1};
  Tensor t = {ir_type_make(TY_I64, 1, sd), sh};
  const char *nm[1] = {"shape"};
  TensorMap known = {1, nm, &t};
  OnnxOptions o = {.known = &known};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 3);
  ck_assert_int_eq(g->outputs[0]->type.dims[1], 2);
}
END_TEST

START_TEST(test_external_data) {
  char dir[] = "/tmp/dlcc-onnx-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/w.bin", dir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite("12345678", 1, 8, f);
  fwrite(wdata, sizeof(float), 12, f);
  fclose(f);
  Model *b = relu_model();
  int64_t wd[2] = {4, 3};
  Onnx__TensorProto *t = tensor("w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, wd);
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *kv[3][2] = {{"location", "w.bin"}, {"offset", "8"}, {"length", "48"}};
  t->n_external_data = 3;
  t->external_data = mem(sizeof *t->external_data * 3);
  for (int i = 0; i < 3; i++) {
    Onnx__StringStringEntryProto *e = mem(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = str(kv[i][0]);
    e->value = str(kv[i][1]);
    t->external_data[i] = e;
  }
  b->inits[b->g.n_initializer++] = t;
  /* w is used, so it becomes a param with the file's data. */
  b->nodes[0]->op_type = str("Gemm");
  b->nodes[0]->input = names("x,w", &b->nodes[0]->n_input);
  attr_i(b->nodes[0], "transB", 1);
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  char model[256];
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  Graph *g = fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  const Tensor *w = ir_tensor_map_find(&params, "w");
  ck_assert_ptr_nonnull(w);
  ck_assert(memcmp(w->data, wdata, sizeof wdata) == 0);
  ir_tensor_map_free(&params);
  /* Outside the model's directory: refused. */
  t->external_data[0]->value = str("../etc/passwd");
  diag_clear(&ctx);
  buf = pack_model(b, &len);
  expect_error(fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params),
               "must be a relative path below the model's directory");
  /* Too short. */
  t->external_data[0]->value = str("w.bin");
  t->external_data[1]->value = str("16");
  diag_clear(&ctx);
  buf = pack_model(b, &len);
  expect_error(fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params), "is too short");
  unlink(path);
  rmdir(dir);
}
END_TEST

/* ---- through the API ---- */

START_TEST(test_api_runs_without_weights_file) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3}, wd[2] = {4, 3}, bd[1] = {4};
  add_input(b, "x", 2, xd);
  add_init_f32(b, "fc.weight", 2, wd, 12, wdata);
  add_init_f32(b, "fc.bias", 1, bd, 4, bdata);
  attr_i(add_node(b, "Gemm", "x,fc.weight,fc.bias", "y"), "transB", 1);
  add_output(b, "y");
  char path[] = "/tmp/dlcc-onnx-api-XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  ck_assert_int_ge(fd, 0);
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
  close(fd);
  dlc_options opt = {.backend = "ref"};
  dlc_model *m;
  ck_assert_msg(dlc_compile_file(path, &opt, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_weights_bound(m), 1);
  ck_assert_int_eq(dlc_num_inputs(m), 1);
  ck_assert_int_eq(dlc_set_input(m, "x", xdata, sizeof xdata), DLC_OK);
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  const void *y;
  size_t n;
  ck_assert_int_eq(dlc_get_output(m, 0, &y, &n), DLC_OK);
  ck_assert_int_eq(n, 8 * sizeof(float));
  double s = bdata[1];
  for (int k = 0; k < 3; k++) s += xdata[k] * wdata[3 + k];
  ck_assert_double_eq_tol(((const float *)y)[1], s, 1e-6);
  dlc_free(m);
  unlink(path);
}
END_TEST

static Suite *onnx_suite(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("import");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_gemm_initializers_are_params);
  tcase_add_test(tc, test_gemm_trans_alpha_beta);
  tcase_add_test(tc, test_symbolic_batch_needs_define);
  tcase_add_test(tc, test_shape_chain_folds);
  tcase_add_test(tc, test_lstm_gates_reordered_at_import);
  tcase_add_test(tc, test_conv_auto_pad_same);
  tcase_add_test(tc, test_slice_negative_step);
  tcase_add_test(tc, test_gelu_opset20);
  tcase_add_test(tc, test_pad_modes);
  tcase_add_test(tc, test_legacy_broadcast);
  tcase_add_test(tc, test_rnn_unrolled);
  tcase_add_test(tc, test_not_protobuf);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_missing_file);
  tcase_add_test(tc, test_cycle);
  tcase_add_test(tc, test_dangling_input);
  tcase_add_test(tc, test_huge_dimension);
  tcase_add_test(tc, test_initializer_size_mismatch);
  tcase_add_test(tc, test_unsupported_op_attr_dtype);
  tcase_add_test(tc, test_runtime_shape_refused);
  tcase_add_test(tc, test_external_data);
  tcase_add_test(tc, test_api_runs_without_weights_file);
  tcase_add_test(tc, test_rms_normalization);
  tcase_add_test(tc, test_group_normalization);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(onnx_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
