/* The ONNX importer: takes models built here with protobuf-c (no Python
 * needed) and checks the graphs, the params' data, the values computed by
 * the reference interpreter, folding at import and the messages for
 * unsupported input; then an .onnx file through the JIT API.  Bad input
 * (not a model, truncated, cyclic, oversized): tests/test_onnx_bad.c. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlcc.h"
#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "ir/eval.h"
#include "onnxbuild.h"
#include "passes/autodiff.h"
#include "runtime/tensorio.h" /* the models, built with protobuf-c */

/* ---- importing ---- */

#define ctx onnxb_ctx
#define params onnxb_params
#define setup onnxb_setup
#define teardown onnxb_teardown
#define import_opt onnxb_import
#define import(b) onnxb_import((b), NULL)
#define expect_error onnxb_expect_error
#define must_import onnxb_must_import
#define count_op onnxb_count_op
#define same_dims onnxb_same_dims
#define run1 onnxb_run1
#define expect_values onnxb_expect_values


static Node *first_op(Graph *g, OpKind op) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == op) return n;
  return NULL;
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
  expect_error(import(b), "dim 0 of input 'x' is the symbolic 'N': bind it with -D N=VALUE or give the input");
  diag_clear(&ctx);
  Define def = {"N", 5};
  OnnxOptions o = {.n_defines = 1, .defines = &def};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert_int_eq(g->first->out[0].type.dims[0], 5);
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 5);
}
END_TEST

/* Free dims: -1, "?" and unset ones, bound from the given inputs'
 * shapes or by -D INPUT:AXIS; a symbol two inputs share must agree; a
 * declared output dim of -1 or a symbol takes what the graph computes. */
static Model *free_dims_model(void) {
  Model *b = model_new(17);
  const char *xs[3] = {"?", "?", NULL}, *ys[3] = {"batch", NULL, NULL};
  b->ins[b->g.n_input++] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){0, 0, 4}, xs);
  b->ins[b->g.n_input++] = value_info("y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){0, -1, 0}, ys);
  b->ins[1]->type->tensor_type->shape->dim[2]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET;
  add_node(b, "Add", "x,y", "z");
  const char *zs[3] = {"N", NULL, NULL};
  b->outs[b->g.n_output++] = value_info("z", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, (int64_t[]){0, -1, 4}, zs);
  return b;
}

START_TEST(test_free_dims_from_inputs) {
  Model *b = free_dims_model();
  const int64_t xd[3] = {2, 3, 4}, yd[3] = {2, 3, 4};
  InputShape shapes[2] = {{"x", 3, xd}, {"y", 3, yd}};
  OnnxOptions o = {.n_input_shapes = 2, .input_shapes = shapes};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert(same_dims(&g->outputs[0]->type, 3, xd));
  /* Each "?" is a dim of its own: x's two are 2 and 3. */
  diag_clear(&ctx);
  expect_error(import(b), "dim 0 of input 'x' is free: bind it with -D x:0=VALUE or give the input");
  /* -D by input and axis, and by the symbol's name. */
  diag_clear(&ctx);
  Define defs[5] = {{"x:0", 2}, {"x:1", 3}, {"batch", 2}, {"y:1", 3}, {"y:2", 4}};
  OnnxOptions od = {.n_defines = 5, .defines = defs};
  g = import_opt(b, &od);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert(same_dims(&g->outputs[0]->type, 3, xd));
  /* A -D and the given input disagree. */
  diag_clear(&ctx);
  OnnxOptions both = {.n_defines = 1, .defines = &(Define){"batch", 7}, .n_input_shapes = 2, .input_shapes = shapes};
  expect_error(import_opt(b, &both), "dim 0 of input 'y' is 7 by -D batch=7, but the input given has 2");
  /* The given input has another rank. */
  diag_clear(&ctx);
  InputShape flat[2] = {{"x", 2, xd}, {"y", 3, yd}};
  OnnxOptions of = {.n_input_shapes = 2, .input_shapes = flat};
  expect_error(import_opt(b, &of), "input 'x' is given with rank 2, the model declares rank 3");
  /* Two inputs of one symbol must agree. */
  Model *c = model_new(17);
  const char *s2[2] = {"batch", NULL};
  c->ins[c->g.n_input++] = value_info("a", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){0, 4}, s2);
  c->ins[c->g.n_input++] = value_info("b", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){0, 4}, s2);
  add_node(c, "Add", "a,b", "s");
  add_output(c, "s");
  diag_clear(&ctx);
  InputShape two[2] = {{"a", 2, (const int64_t[]){2, 4}}, {"b", 2, (const int64_t[]){5, 4}}};
  OnnxOptions ot = {.n_input_shapes = 2, .input_shapes = two};
  expect_error(import_opt(c, &ot), "dim 0 of input 'b' is 'batch', which input 'a' gives as 2 (its dim 0), but "
                                   "'b' is given with 5: the inputs disagree (-D batch=VALUE sets it for both)");
}
END_TEST

/* Empty tensors: shape arithmetic at import as TorchScript exports it
 * (a slice of a shape past its end, ConstantOfShape of that empty shape:
 * a scalar), and an empty input at run time, which is an ordinary input. */
START_TEST(test_empty_tensors) {
  Model *b = model_new(17);
  const char *sym[2] = {"N", NULL};
  b->ins[b->g.n_input++] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){0, 3}, sym);
  add_init_i64(b, "two", 1, (const int64_t[]){2});
  add_init_i64(b, "big", 1, (const int64_t[]){INT64_MAX});
  add_init_i64(b, "ax", 1, (const int64_t[]){0});
  add_node(b, "Shape", "x", "s");
  add_node(b, "Slice", "s,two,big", "tail"); /* i64[0] */
  Onnx__NodeProto *c = add_node(b, "ConstantOfShape", "tail", "one");
  attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
      tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){1});
  c->attribute[0]->t->n_float_data = 1;
  c->attribute[0]->t->float_data = mem(sizeof(float));
  c->attribute[0]->t->float_data[0] = 2;
  add_node(b, "Concat", "tail,s", "s2");
  attr_i(b->nodes[b->g.n_node - 1], "axis", 0);
  add_node(b, "Reshape", "x,s2", "x2");
  add_node(b, "Mul", "x2,one", "r");     /* f32[N, 3] */
  add_node(b, "ReduceSum", "x,ax", "sum"); /* f32[1, 3]: zeros when N is 0 */
  add_node(b, "ReduceMax", "x", "max");    /* f32[1, 1] */
  add_output(b, "r");
  add_output(b, "sum");
  add_output(b, "max");
  Define n0 = {"N", 0};
  OnnxOptions o = {.n_defines = 1, .defines = &n0};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert(same_dims(&g->outputs[0]->type, 2, (const int64_t[]){0, 3}));
  ck_assert_int_eq(count_op(g, OP_MUL), 0); /* an empty result is known: no node */
  Tensor in = {ir_type_make(TY_F32, 2, (const int64_t[]){0, 3}), NULL};
  const char *nm[1] = {"x"};
  TensorMap inputs = {1, nm, &in};
  Tensor out[3];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "eval: %s", err);
  ck_assert_int_eq(ir_type_numel(&out[0].type), 0);
  for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&out[1], i), 0);
  ck_assert(isinf(ir_tensor_get(&out[2], 0)) && ir_tensor_get(&out[2], 0) < 0);
  for (int i = 0; i < 3; i++) ir_tensor_free(&out[i]);
  /* With rows, the scalar of the empty shape multiplies them. */
  diag_clear(&ctx);
  Define n2 = {"N", 2};
  o.defines = &n2;
  g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  Tensor y = run1(g, "x", 2, (const int64_t[]){2, 3}, xdata);
  for (int i = 0; i < 6; i++) ck_assert_double_eq(ir_tensor_get(&y, i), 2 * xdata[i]);
  ir_tensor_free(&y);
}
END_TEST

/* Attention (opset 23) as its unfused graph: 3-d Q [1, 3, 4 heads * 2]
 * over K and V of 2 heads (grouped: query heads 0, 1 read KV head 0),
 * causal, and a bool mask that hides key 1 from every query: against
 * attention computed here. */
START_TEST(test_attention_gqa_causal) {
  enum { L = 3, QH = 4, KH = 2, E = 2 };
  Model *b = model_new(23);
  add_input(b, "q", 3, (const int64_t[]){1, L, QH * E});
  add_input(b, "k", 3, (const int64_t[]){1, L, KH * E});
  add_input(b, "v", 3, (const int64_t[]){1, L, KH * E});
  add_init_raw(b, "m", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 2, (const int64_t[]){L, L},
               (const uint8_t[]){1, 0, 1, 1, 0, 1, 1, 0, 1}, 9);
  Onnx__NodeProto *n = add_node(b, "Attention", "q,k,v,m", "y");
  attr_i(n, "q_num_heads", QH);
  attr_i(n, "kv_num_heads", KH);
  attr_i(n, "is_causal", 1);
  add_output(b, "y");
  Graph *g = must_import(b);
  float q[L * QH * E], k[L * KH * E], v[L * KH * E];
  for (int i = 0; i < L * QH * E; i++) q[i] = (float)sin(i + 1.0);
  for (int i = 0; i < L * KH * E; i++) k[i] = (float)cos(i * 0.7), v[i] = (float)(i % 5) - 2;
  Tensor in[3] = {{ir_type_make(TY_F32, 3, (const int64_t[]){1, L, QH * E}), q},
                  {ir_type_make(TY_F32, 3, (const int64_t[]){1, L, KH * E}), k},
                  {ir_type_make(TY_F32, 3, (const int64_t[]){1, L, KH * E}), v}};
  const char *nm[3] = {"q", "k", "v"};
  TensorMap inputs = {3, nm, in};
  Tensor y;
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "eval: %s", err);
  ck_assert(same_dims(&y.type, 3, (const int64_t[]){1, L, QH * E}));
  for (int h = 0; h < QH; h++)
    for (int i = 0; i < L; i++) {
      int kvh = h / (QH / KH);
      double w[L], sum = 0;
      for (int j = 0; j < L; j++) {
        double dot = 0;
        for (int e = 0; e < E; e++) dot += q[i * QH * E + h * E + e] * k[j * KH * E + kvh * E + e];
        bool ok = j <= i && j != 1;
        w[j] = ok ? exp(dot / sqrt((double)E)) : 0;
        sum += w[j];
      }
      for (int e = 0; e < E; e++) {
        double want = 0;
        for (int j = 0; j < L; j++) want += w[j] / sum * v[j * KH * E + kvh * E + e];
        ck_assert_double_eq_tol(ir_tensor_get(&y, i * QH * E + h * E + e), want, 1e-6);
      }
    }
  ir_tensor_free(&y);
}
END_TEST

/* A subgraph for If, Loop and Scan: its inputs and outputs typed f32[3]
 * (the graph names them; their types are the values bound to them). */
static Model *subgraph(const char *ins, const char *outs) {
  Model *g = model_new(17);
  size_t ni, no;
  char **in = names(ins, &ni), **out = names(outs, &no);
  for (size_t i = 0; i < ni && *in[i]; i++) add_input(g, in[i], 1, (const int64_t[]){3});
  for (size_t i = 0; i < no; i++) add_output(g, out[i]);
  return g;
}


/* If with a condition at run time (both branches and a where) and a
 * constant one (the branch taken alone); the branches read x from
 * outside. */
START_TEST(test_if_branches) {
  for (int constant = 0; constant < 2; constant++) {
    Model *b = model_new(17);
    add_input(b, "x", 1, (const int64_t[]){3});
    if (constant)
      add_init_raw(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){1}, (const uint8_t[]){0}, 1);
    else
      add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){1});
    Model *t = subgraph("", "y1"), *e = subgraph("", "y2");
    add_node(t, "Add", "x,x", "y1");
    add_node(e, "Neg", "x", "y2");
    Onnx__NodeProto *n = add_node(b, "If", "c", "y");
    attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &t->g;
    attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &e->g;
    add_output(b, "y");
    Graph *g = must_import(b);
    ck_assert_int_eq(count_op(g, OP_WHERE), !constant);
    const float x[3] = {1, -2, 4};
    for (int c = 0; c < 2 - constant; c++) {
      uint8_t cv = (uint8_t)c;
      Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)x},
                      {ir_type_make(TY_BOOL, 1, (const int64_t[]){1}), &cv}};
      TensorMap inputs = {2 - constant, (const char *[]){"x", "c"}, in};
      Tensor y;
      char err[256];
      ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "%s", err);
      expect_values(&y, 3, c ? (const double[]){2, -4, 8} : (const double[]){-1, 2, -4}, "y");
    }
  }
}
END_TEST

/* CausalConvWithState over [1, 2, 3] with k = 3: the two left taps read
 * past_state (zeros without one), silu after; present_state is the last
 * two positions of the state and input joined; k = 1 leaves an empty
 * state.  Values by hand. */
START_TEST(test_causal_conv_with_state) {
  const float x[6] = {1, 2, 3, -1, 0, 2}, w[6] = {1, 0, 2, 0.5f, -1, 1}, past[4] = {4, 5, 1, 1};
  for (int with_past = 0; with_past < 2; with_past++) {
    Model *b = model_new(26);
    add_input(b, "x", 3, (const int64_t[]){1, 2, 3});
    add_init_f32(b, "w", 3, (const int64_t[]){2, 1, 3}, 6, w);
    if (with_past) add_init_f32(b, "p", 3, (const int64_t[]){1, 2, 2}, 4, past);
    attr_s(add_node(b, "CausalConvWithState", with_past ? "x,w,,p" : "x,w", "y,s"), "activation", "none");
    add_output(b, "y");
    add_output(b, "s");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_F32, 3, (const int64_t[]){1, 2, 3}), (void *)x}, out[2];
    TensorMap inputs = {1, (const char *[]){"x"}, &in};
    char err[256];
    ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
    /* channel 0 taps 1, 0, 2 over [p0 p1 1 2 3]; channel 1 taps 0.5, -1,
     * 1 over [p2 p3 -1 0 2] */
    if (with_past) {
      expect_values(&out[0], 6, (const double[]){6, 9, 7, -1.5, 1.5, 1.5}, "y");
      expect_values(&out[1], 4, (const double[]){2, 3, 0, 2}, "s");
    } else {
      expect_values(&out[0], 6, (const double[]){2, 4, 7, -1, 1, 1.5}, "y");
      expect_values(&out[1], 4, (const double[]){2, 3, 0, 2}, "s");
    }
    diag_clear(&ctx);
  }
  Model *b = model_new(26);
  add_input(b, "x", 3, (const int64_t[]){1, 2, 3});
  add_init_f32(b, "w", 3, (const int64_t[]){2, 1, 1}, 2, (const float[]){2, -1});
  attr_s(add_node(b, "CausalConvWithState", "x,w", "y,s"), "activation", "silu");
  add_output(b, "y");
  add_output(b, "s");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_SILU), 1);
  ck_assert_int_eq(ir_type_numel(&g->outputs[1]->type), 0);
  diag_clear(&ctx);
  b = model_new(26);
  add_input(b, "x", 3, (const int64_t[]){1, 2, 3});
  add_init_f32(b, "w", 3, (const int64_t[]){2, 1, 3}, 6, w);
  attr_s(add_node(b, "CausalConvWithState", "x,w", "y,s"), "activation", "gelu");
  add_output(b, "y");
  add_output(b, "s");
  expect_error(import(b), "(CausalConvWithState): activation 'gelu' is not supported (none, silu, swish)");
}
END_TEST

/* LinearAttention against the recurrence written out here (ONNX's
 * reference, in double): B 1, T 4, 2 query heads reading 1 KV head,
 * d_k 2, d_v 3, for each update rule (decay per key dim, beta per head),
 * with and without a past state. */
static void linear_attention_ref(const char *rule, const float *q, const float *k, const float *v, const float *g,
                                 const float *beta, const float *past, double *y, double *state) {
  enum { T = 4, QH = 2, DK = 2, DV = 3 };
  bool gated = strstr(rule, "gated") != NULL, delta = strstr(rule, "delta") != NULL;
  for (int i = 0; i < DK * DV; i++) state[i] = past ? past[i] : 0;
  for (int t = 0; t < T; t++) {
    double vt[DV];
    for (int m = 0; m < DV; m++) vt[m] = v[t * DV + m];
    if (gated)
      for (int d = 0; d < DK; d++)
        for (int m = 0; m < DV; m++) state[d * DV + m] *= exp(g[t * DK + d]);
    if (delta)
      for (int m = 0; m < DV; m++) {
        double r = 0;
        for (int d = 0; d < DK; d++) r += state[d * DV + m] * k[t * DK + d];
        vt[m] = beta[t] * (vt[m] - r);
      }
    for (int d = 0; d < DK; d++)
      for (int m = 0; m < DV; m++) state[d * DV + m] += k[t * DK + d] * vt[m];
    for (int h = 0; h < QH; h++)
      for (int m = 0; m < DV; m++) {
        double o = 0;
        for (int d = 0; d < DK; d++) o += q[t * QH * DK + h * DK + d] * state[d * DV + m];
        y[t * QH * DV + h * DV + m] = o / sqrt((double)DK);
      }
  }
}

START_TEST(test_linear_attention) {
  static const char *const rules[] = {"linear", "gated", "delta", "gated_delta"};
  float q[16], k[8], v[12], g[8], beta[4], past[6];
  srand(7);
  for (int i = 0; i < 16; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < 8; i++) k[i] = (float)rand() / RAND_MAX - 0.5f, g[i] = -(float)rand() / RAND_MAX;
  for (int i = 0; i < 12; i++) v[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < 4; i++) beta[i] = (float)rand() / RAND_MAX;
  for (int i = 0; i < 6; i++) past[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int r = 0; r < 4; r++)
    for (int with_past = 0; with_past < 2; with_past++) {
      bool gated = strstr(rules[r], "gated") != NULL, delta = strstr(rules[r], "delta") != NULL;
      Model *b = model_new(26);
      add_input(b, "q", 3, (const int64_t[]){1, 4, 4});
      add_init_f32(b, "k", 3, (const int64_t[]){1, 4, 2}, 8, k);
      add_init_f32(b, "v", 3, (const int64_t[]){1, 4, 3}, 12, v);
      if (with_past) add_init_f32(b, "p", 4, (const int64_t[]){1, 1, 2, 3}, 6, past);
      if (gated) add_init_f32(b, "g", 3, (const int64_t[]){1, 4, 2}, 8, g);
      if (delta) add_init_f32(b, "beta", 3, (const int64_t[]){1, 4, 1}, 4, beta);
      char ins[64];
      snprintf(ins, sizeof ins, "q,k,v,%s,%s,%s", with_past ? "p" : "", gated ? "g" : "", delta ? "beta" : "");
      Onnx__NodeProto *n = add_node(b, "LinearAttention", ins, "y,s");
      attr_i(n, "q_num_heads", 2);
      attr_i(n, "kv_num_heads", 1);
      attr_s(n, "update_rule", rules[r]);
      add_output(b, "y");
      add_output(b, "s");
      Graph *gr = must_import(b);
      Tensor in = {ir_type_make(TY_F32, 3, (const int64_t[]){1, 4, 4}), q}, out[2];
      TensorMap inputs = {1, (const char *[]){"q"}, &in};
      char err[256];
      ck_assert_msg(ir_eval(gr, &inputs, &params, out, err, sizeof err), "%s", err);
      double y[24], st[6];
      linear_attention_ref(rules[r], q, k, v, g, beta, with_past ? past : NULL, y, st);
      for (int i = 0; i < 24; i++)
        ck_assert_msg(fabs(ir_tensor_get(&out[0], i) - y[i]) < 1e-5, "%s: y[%d] %g, want %g", rules[r], i,
                      ir_tensor_get(&out[0], i), y[i]);
      for (int i = 0; i < 6; i++)
        ck_assert_msg(fabs(ir_tensor_get(&out[1], i) - st[i]) < 1e-5, "%s: state[%d] %g, want %g", rules[r], i,
                      ir_tensor_get(&out[1], i), st[i]);
      ir_tensor_free(&out[0]);
      ir_tensor_free(&out[1]);
      diag_clear(&ctx);
    }
  Model *b = model_new(26);
  add_input(b, "q", 3, (const int64_t[]){1, 4, 4});
  add_init_f32(b, "k", 3, (const int64_t[]){1, 4, 2}, 8, k);
  add_init_f32(b, "v", 3, (const int64_t[]){1, 4, 3}, 12, v);
  Onnx__NodeProto *n = add_node(b, "LinearAttention", "q,k,v", "y,s");
  attr_i(n, "q_num_heads", 2);
  attr_i(n, "kv_num_heads", 1);
  add_output(b, "y");
  add_output(b, "s");
  expect_error(import(b), "(LinearAttention): update_rule 'gated_delta' needs the decay input");
}
END_TEST

/* TfIdfVectorizer over [1 2 1 3 2 1], unigrams 1 and 2, bigrams (1 2),
 * (2 1), (3 3), skips up to 1: by hand (and as ONNX's reference gives)
 * the counts are 3, 2; (1 2) once at distance 1 and once at 2, (2 1)
 * twice at 1; (3 3) never.  IDF without weights: 1 where present. */
START_TEST(test_tfidf_vectorizer) {
  static const struct {
    const char *mode;
    bool weights;
    double want[5];
  } cases[] = {{"TF", false, {3, 2, 2, 2, 0}},
               {"TFIDF", true, {1.5, 2, 4, 8, 0}},
               {"IDF", true, {0.5, 1, 2, 4, 0}},
               {"IDF", false, {1, 1, 1, 1, 0}},
               {"TFIDF", false, {3, 2, 2, 2, 0}}};
  const int64_t x[6] = {1, 2, 1, 3, 2, 1};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Model *b = model_new(9);
    add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (const int64_t[]){6});
    Onnx__NodeProto *n = add_node(b, "TfIdfVectorizer", "x", "y");
    attr_s(n, "mode", cases[c].mode);
    attr_i(n, "min_gram_length", 1);
    attr_i(n, "max_gram_length", 2);
    attr_i(n, "max_skip_count", 1);
    attr_is(n, "ngram_counts", 2, (const int64_t[]){0, 2});
    attr_is(n, "ngram_indexes", 5, (const int64_t[]){0, 1, 2, 3, 4});
    attr_is(n, "pool_int64s", 8, (const int64_t[]){1, 2, 1, 2, 2, 1, 3, 3});
    if (cases[c].weights) attr_fs(n, "weights", 5, (const float[]){0.5f, 1, 2, 4, 8});
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_I64, 1, (const int64_t[]){6}), (void *)x}, y;
    TensorMap inputs = {1, (const char *[]){"x"}, &in};
    char err[256];
    ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "%s", err);
    expect_values(&y, 5, cases[c].want, cases[c].mode);
    diag_clear(&ctx);
  }
  Model *b = model_new(9);
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (const int64_t[]){6});
  Onnx__NodeProto *n = add_node(b, "TfIdfVectorizer", "x", "y");
  attr_s(n, "mode", "TF");
  attr_i(n, "min_gram_length", 1);
  attr_i(n, "max_gram_length", 1);
  attr_is(n, "ngram_counts", 1, (const int64_t[]){0});
  attr_is(n, "ngram_indexes", 1, (const int64_t[]){0});
  attr_is(n, "pool_int64s", 3, (const int64_t[]){1, 2, 3});
  add_output(b, "y");
  expect_error(import(b), "(TfIdfVectorizer): the pool has more n-grams than ngram_indexes has entries (1)");
}
END_TEST

/* Det by Leibniz's formula: a batch of a 3x3 (det -1) and, alone, a
 * 4x4 permuted diagonal (-24); 5x5 is refused. */
START_TEST(test_det) {
  static const float m3[18] = {2, 1, 1, 1, 3, 2, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  static const float m4[16] = {0, 2, 0, 0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 4};
  for (int four = 0; four < 2; four++) {
    Model *b = model_new(11);
    int64_t d3[3] = {2, 3, 3}, d4[2] = {4, 4};
    add_input(b, "x", four ? 2 : 3, four ? d4 : d3);
    add_node(b, "Det", "x", "y");
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor y = run1(g, "x", four ? 2 : 3, four ? d4 : d3, four ? m4 : m3);
    expect_values(&y, four ? 1 : 2, four ? (const double[]){-24} : (const double[]){-1, 1}, "det");
    diag_clear(&ctx);
  }
  Model *b = model_new(11);
  add_input(b, "x", 2, (const int64_t[]){5, 5});
  add_node(b, "Det", "x", "y");
  add_output(b, "y");
  expect_error(import(b), "(Det): Det of 5x5 matrices is not supported (at most 4x4)");
}
END_TEST

/* FlexAttention of the preview domain with a score_mod that zeroes the
 * scores (s - s): every query weighs the keys alike, so each output row
 * is V's column means; without a mod the scores are Q K^T / sqrt(4),
 * checked against softmax by hand for one row. */
START_TEST(test_flex_attention) {
  const float q[8] = {1, 0, 0, 0, 0, 2, 0, 0}, k[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  const float v[6] = {1, 2, 3, 4, 5, 9};
  for (int mod = 0; mod < 2; mod++) {
    Model *b = model_new(17);
    add_input(b, "q", 4, (const int64_t[]){1, 1, 2, 4});
    add_init_f32(b, "k", 4, (const int64_t[]){1, 1, 3, 4}, 12, k);
    add_init_f32(b, "v", 4, (const int64_t[]){1, 1, 3, 2}, 6, v);
    Onnx__NodeProto *n = add_node(b, "FlexAttention", "q,k,v", "y");
    n->domain = str("ai.onnx.preview");
    if (mod) {
      Model *sm = subgraph("s", "t");
      add_node(sm, "Sub", "s,s", "t");
      attr(n, "score_mod", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &sm->g;
    }
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor y = run1(g, "q", 4, (const int64_t[]){1, 1, 2, 4}, q);
    /* row 0 scores 0.5, 0, 0; row 1: 0, 1, 0 */
    double e5 = exp(0.5), e1 = exp(1.0);
    double r0[2] = {(1 * e5 + 3 + 5) / (e5 + 2), (2 * e5 + 4 + 9) / (e5 + 2)};
    double r1[2] = {(1 + 3 * e1 + 5) / (e1 + 2), (2 + 4 * e1 + 9) / (e1 + 2)};
    expect_values(&y, 4, mod ? (const double[]){3, 5, 3, 5} : (const double[]){r0[0], r0[1], r1[0], r1[1]},
                  mod ? "uniform" : "softmax");
    diag_clear(&ctx);
  }
  Model *b = model_new(17);
  add_input(b, "q", 4, (const int64_t[]){1, 1, 2, 4});
  Onnx__NodeProto *n = add_node(b, "FlexAttentionX", "q,q,q", "y");
  n->domain = str("ai.onnx.preview");
  add_output(b, "y");
  expect_error(import(b), "ops of domain 'ai.onnx.preview' are not supported (of it, FlexAttention is)");
}
END_TEST

/* The training preview domain's optimizers against their rules by hand:
 * Adam at step 2 (bias-corrected, weight decay before and after),
 * Nesterov momentum at step 0 (beta taken as 1), Adagrad with a decayed
 * rate; X the input, the rest initializers; a mode that is not one of
 * the two refused. */
START_TEST(test_training_domain) {
  const float x[2] = {1, -2}, g[2] = {0.5f, 0.25f}, v[2] = {0.1f, -0.2f}, h[2] = {0.04f, 0.09f};
  const char *ops[3] = {"Adam", "Momentum", "Adagrad"};
  for (int k = 0; k < 3; k++) {
    Model *b = model_new(17);
    int64_t d[1] = {2};
    add_input(b, "X", 1, d);
    add_init_f32(b, "R", 0, NULL, 1, (const float[]){0.1f});
    add_init_i64(b, "T", 1, (const int64_t[]){k == 1 ? 0 : 2});
    add_init_f32(b, "G", 1, d, 2, g);
    add_init_f32(b, "V", 1, d, 2, k == 2 ? h : v);
    add_init_f32(b, "H", 1, d, 2, h);
    Onnx__NodeProto *n = add_node(b, ops[k], k ? "R,T,X,G,V" : "R,T,X,G,V,H", k ? "Xn,Vn" : "Xn,Vn,Hn");
    n->domain = str("ai.onnx.preview.training");
    if (k == 0) attr_f(n, "norm_coefficient", 0.01f), attr_f(n, "norm_coefficient_post", 0.1f), attr_f(n, "epsilon", 1e-3f);
    if (k == 1) attr_f(n, "alpha", 0.9f), attr_f(n, "beta", 0.5f), attr_s(n, "mode", "nesterov");
    if (k == 2) attr_f(n, "decay_factor", 0.5f), attr_f(n, "epsilon", 1e-3f);
    add_output(b, "Xn");
    Graph *gr = must_import(b);
    Tensor y = run1(gr, "X", 1, d, x);
    double want[2];
    for (int i = 0; i < 2; i++) {
      if (k == 0) {
        double gr2 = 0.01 * x[i] + g[i], vn = 0.9 * v[i] + 0.1 * gr2, hn = 0.999 * h[i] + 0.001 * gr2 * gr2;
        double r = 0.1 * sqrt(1 - pow(0.999, 2)) / (1 - pow(0.9, 2));
        want[i] = 0.9 * (x[i] - r * vn / (sqrt(hn) + 1e-3));
      } else if (k == 1) {
        double vn = 0.9 * v[i] + 1.0 * g[i]; /* beta 1 at step 0 */
        want[i] = x[i] - 0.1 * (g[i] + 0.9 * vn);
      } else {
        double hn = h[i] + g[i] * g[i];
        want[i] = x[i] - 0.1 / (1 + 2 * 0.5) * g[i] / (sqrt(hn) + 1e-3);
      }
    }
    expect_values(&y, 2, want, ops[k]);
    ir_tensor_free(&y);
  }
  Model *b = model_new(17);
  add_input(b, "X", 1, (const int64_t[]){2});
  add_init_f32(b, "R", 0, NULL, 1, (const float[]){0.1f});
  add_init_i64(b, "T", 1, (const int64_t[]){1});
  Onnx__NodeProto *n = add_node(b, "Momentum", "R,T,X,X,X", "Xn,Vn");
  n->domain = str("ai.onnx.preview.training");
  attr_s(n, "mode", "heavy-ball");
  add_output(b, "Xn");
  expect_error(import(b), "mode 'heavy-ball' is not one of standard and nesterov");
}
END_TEST

/* The ML domain's tensor ops: Binarizer (x > threshold as 1 or 0) and
 * ArrayFeatureExtractor (columns of the last axis, [1, K] for a 1-d X). */
/* A declared output shape that is not the computed one (converters write
 * such: onnxmltools declares a LightGBM classifier's labels [1]) imports
 * with a warning, the computed shape used; a declared dtype that is not
 * the computed one is an error. */
START_TEST(test_declared_output_shape) {
  for (int wrong_dtype = 0; wrong_dtype < 2; wrong_dtype++) {
    Model *b = model_new(17);
    add_input(b, "x", 2, (const int64_t[]){2, 3});
    add_node(b, "Relu", "x", "y");
    b->outs[b->g.n_output++] = value_info(
        "y", wrong_dtype ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1,
        (const int64_t[]){1}, NULL);
    Graph *g = import(b);
    if (wrong_dtype) {
      expect_error(g, "graph output 'y' computes f32[2, 3], which differs from its declared type");
      continue;
    }
    ck_assert_ptr_nonnull(g);
    ck_assert(same_dims(&g->outputs[0]->type, 2, (const int64_t[]){2, 3}));
    ck_assert_int_eq(ctx.diag.warnings, 1);
    ck_assert_msg(strstr(ctx.diag.text, "graph output 'y' computes f32[2, 3], another shape than the file declares"), "%s",
                  ctx.diag.text);
  }
}
END_TEST

/* DeformConv with zero offsets is Conv (strides, dilations, pads and
 * groups alike); with every x offset +1 it is Conv of X shifted left
 * by one column (a zero column entering at the right), and a mask of
 * 0.5 halves it (the bias aside). */
START_TEST(test_deform_conv) {
  enum { N = 1, C = 4, H = 6, W = 7, CO = 4, KH = 3, KW = 2, OH = 2, OW = 7, OFF = 2 * KH * KW * 2 };
  float x[N * C * H * W], xs[N * C * H * W], w[CO * 2 * KH * KW], off[OFF * OH * OW], half[KH * KW * 2 * OH * OW];
  srand(11);
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < N * C * H * W; i++) xs[i] = i % W == W - 1 ? 0 : x[i + 1];
  for (int i = 0; i < CO * 2 * KH * KW; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < KH * KW * 2 * OH * OW; i++) half[i] = 0.5f;
  for (int shift = 0; shift < 2; shift++) {
    for (int i = 0; i < OFF * OH * OW; i++) off[i] = shift && (i / (OH * OW)) % 2 ? 1.0f : 0.0f;
    Model *b = model_new(19);
    add_input(b, "x", 4, (const int64_t[]){N, C, H, W});
    add_init_f32(b, "xs", 4, (const int64_t[]){N, C, H, W}, N * C * H * W, xs);
    add_init_f32(b, "w", 4, (const int64_t[]){CO, 2, KH, KW}, CO * 2 * KH * KW, w);
    add_init_f32(b, "off", 4, (const int64_t[]){N, OFF, OH, OW}, OFF * OH * OW, off);
    add_init_f32(b, "m", 4, (const int64_t[]){N, KH * KW * 2, OH, OW}, KH * KW * 2 * OH * OW, half);
    Onnx__NodeProto *d = add_node(b, "DeformConv", "x,w,off,,m", "y"), *c = add_node(b, "Conv", shift ? "xs,w" : "x,w", "z");
    for (int k = 0; k < 2; k++) {
      Onnx__NodeProto *n = k ? c : d;
      attr_i(n, "group", 2);
      attr_is(n, "strides", 2, (const int64_t[]){2, 1});
      attr_is(n, "dilations", 2, (const int64_t[]){2, 1});
      attr_is(n, "pads", 4, (const int64_t[]){1, 0, 0, 1});
    }
    attr_i(d, "offset_group", 2);
    add_output(b, "y");
    add_output(b, "z");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_F32, 4, (const int64_t[]){N, C, H, W}), x}, out[2];
    TensorMap inputs = {1, (const char *[]){"x"}, &in};
    char err[256];
    ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
    ck_assert_int_eq(ir_type_numel(&out[0].type), N * CO * OH * OW);
    ck_assert_int_eq(ir_type_numel(&out[1].type), N * CO * OH * OW);
    for (int i = 0; i < N * CO * OH * OW; i++)
      ck_assert_msg(fabs(ir_tensor_get(&out[0], i) - 0.5 * ir_tensor_get(&out[1], i)) < 1e-5,
                    "shift %d: y[%d] %g, conv/2 %g", shift, i, ir_tensor_get(&out[0], i), ir_tensor_get(&out[1], i));
    ir_tensor_free(&out[0]);
    ir_tensor_free(&out[1]);
    diag_clear(&ctx);
  }
}
END_TEST

/* Scan of opset 8: a batch axis first, the body per batch element
 * (state s += x_t, scanned out): rows [1 2 3] and [4 5 6] from 0 give
 * 1 3 6 and 4 9 15; sequence_lens shorter than the sequence refused. */
START_TEST(test_scan8) {
  for (int lens = 0; lens < 2; lens++) {
    Model *b = model_new(8);
    add_init_f32(b, "s0", 2, (const int64_t[]){2, 1}, 2, (const float[]){0, 0});
    add_input(b, "x", 3, (const int64_t[]){2, 3, 1});
    if (lens) add_init_i64(b, "lens", 2, (const int64_t[]){3, 2});
    Model *body = subgraph("s,xt", "s2,o");
    body->ins[0] = value_info("s", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){1}, NULL);
    body->ins[1] = value_info("xt", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){1}, NULL);
    add_node(body, "Add", "s,xt", "s2");
    add_node(body, "Identity", "s2", "o");
    Onnx__NodeProto *n = add_node(b, "Scan", lens ? "lens,s0,x" : ",s0,x", "fin,ys");
    attr_i(n, "num_scan_inputs", 1);
    attr(n, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &body->g;
    add_output(b, "ys");
    add_output(b, "fin");
    if (lens) {
      expect_error(import(b), "(Scan): sequence_lens[1] is 2: only whole sequences (3) are supported");
      continue;
    }
    Graph *g = must_import(b);
    Tensor y = run1(g, "x", 3, (const int64_t[]){2, 3, 1}, (const float[]){1, 2, 3, 4, 5, 6});
    expect_values(&y, 6, (const double[]){1, 3, 6, 4, 9, 15}, "ys");
    diag_clear(&ctx);
  }
}
END_TEST

/* Loop of 3 steps: v += x, the scan output the v each step starts with.
 * Scan backwards over the rows of [3, 3]: s += row, each s kept. */
START_TEST(test_loop_scan_unrolled) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_init_i64(b, "M", 1, (const int64_t[]){3});
  b->inits[b->g.n_initializer - 1]->n_dims = 0; /* a scalar trip count */
  Model *body = subgraph("i,cond,v", "cond_out,v_out,v_scan");
  body->ins[0] = value_info("i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, NULL);
  body->ins[1] = value_info("cond", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, NULL);
  add_node(body, "Identity", "cond", "cond_out");
  add_node(body, "Add", "v,x", "v_out");
  add_node(body, "Identity", "v", "v_scan");
  attr(add_node(b, "Loop", "M,,x", "v_final,vs"), "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g =
      &body->g;
  add_input(b, "rows", 2, (const int64_t[]){3, 3});
  add_init_f32(b, "zero", 1, (const int64_t[]){3}, 3, (const float[]){0, 0, 0});
  Model *sb = subgraph("s,r", "s_out,keep");
  add_node(sb, "Add", "s,r", "s_out");
  add_node(sb, "Identity", "s_out", "keep");
  Onnx__NodeProto *sc = add_node(b, "Scan", "zero,rows", "sum,sums");
  attr(sc, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &sb->g;
  attr_i(sc, "num_scan_inputs", 1);
  attr_is(sc, "scan_input_directions", 1, (const int64_t[]){1});
  add_output(b, "v_final");
  add_output(b, "vs");
  add_output(b, "sum");
  add_output(b, "sums");
  Graph *g = must_import(b);
  const float x[3] = {1, -2, 4}, rows[9] = {1, 2, 3, 10, 20, 30, 100, 200, 300};
  Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)x},
                  {ir_type_make(TY_F32, 2, (const int64_t[]){3, 3}), (void *)rows}};
  TensorMap inputs = {2, (const char *[]){"x", "rows"}, in};
  Tensor y[4];
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, y, err, sizeof err), "%s", err);
  expect_values(&y[0], 3, (const double[]){4, -8, 16}, "v_final");
  ck_assert(same_dims(&y[1].type, 2, (const int64_t[]){3, 3}));
  expect_values(&y[1], 9, (const double[]){1, -2, 4, 2, -4, 8, 3, -6, 12}, "vs");
  expect_values(&y[2], 3, (const double[]){111, 222, 333}, "sum");
  expect_values(&y[3], 9, (const double[]){100, 200, 300, 110, 220, 330, 111, 222, 333}, "sums");
  /* (A condition the body computes at run time: tests/test_onnx_if.c.) */
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

/* ConstantOfShape past what import computes (OnnxOptions.max_fold_elems:
 * the "light" test models fill VGG-19's 25088 x 4096 fc6 weight this
 * way) is its value broadcast at run time, not a refusal. */
START_TEST(test_constant_of_shape_past_folding) {
  for (int small = 0; small < 2; small++) {
    Model *b = model_new(13);
    int64_t xd[2] = {4, 8};
    add_input(b, "x", 2, xd);
    add_init_i64(b, "shape", 2, xd);
    Onnx__AttributeProto *v = attr(add_node(b, "ConstantOfShape", "shape", "c"), "value",
                                   ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    v->t = tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){1});
    v->t->n_float_data = 1;
    v->t->float_data = mem(sizeof(float));
    v->t->float_data[0] = 2.5f;
    add_node(b, "Add", "x,c", "y");
    add_output(b, "y");
    OnnxOptions o = {.max_fold_elems = small ? 16 : 0};
    Graph *g = import_opt(b, &o);
    ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
    ck_assert_int_eq(count_op(g, OP_EXPAND), small);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)i - 7.5f;
    Tensor y = run1(g, "x", 2, xd, x);
    for (int i = 0; i < 32; i++) ck_assert_float_eq(((float *)y.data)[i], x[i] + 2.5f);
    ir_tensor_free(&y);
  }
}
END_TEST

/* Weights stay params whatever they hold and whatever computes from
 * them: a Linear's weight transposed for its MatMul keeps its name (a
 * weights file and training's gradient reach it, the checkpoint PyTorch
 * loads names it), a bias of zeros and a scale of ones are params, not
 * consts; an initializer of one value is a const unless a module's path
 * names it; an int64 shape initializer still folds. */
START_TEST(test_initializers_stay_params) {
  Model *b = model_new(17);
  int64_t xd[2] = {2, 3}, wd[2] = {4, 3}, bd[1] = {4};
  add_input(b, "x", 2, xd);
  const float w[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, zeros[4] = {0}, ones[4] = {1, 1, 1, 1};
  add_init_f32(b, "fc.weight", 2, wd, 12, w);
  add_init_f32(b, "fc.bias", 1, bd, 4, zeros);
  add_init_f32(b, "scale", 1, bd, 4, ones);
  /* one value: a constant the exporter kept (the dynamo exporter's
   * "val_70"), unless a module's path names it (Linear(n, 1)'s bias) */
  const int64_t one[1] = {1};
  add_init_f32(b, "val_7", 1, one, 1, (const float[]){1});
  add_init_f32(b, "head.bias", 1, one, 1, (const float[]){0});
  const int64_t shape[2] = {4, 2};
  add_init_i64(b, "shape", 2, shape);
  attr_is(add_node(b, "Transpose", "fc.weight", "wt"), "perm", 2, (int64_t[]){1, 0});
  add_node(b, "MatMul", "x,wt", "xw");
  add_node(b, "Add", "xw,fc.bias", "y");
  add_node(b, "Mul", "y,scale", "z0");
  add_node(b, "Mul", "z0,val_7", "z1");
  add_node(b, "Add", "z1,head.bias", "z");
  add_node(b, "Reshape", "z,shape", "out");
  add_output(b, "out");
  Graph *g = must_import(b);
  const char *want[4] = {"fc.weight", "fc.bias", "scale", "head.bias"};
  int found = 0;
  for (const Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    const char *name = ir_attr_str(n, "name");
    bool known = false;
    for (int i = 0; i < 4; i++) known |= strcmp(name, want[i]) == 0;
    ck_assert_msg(known, "param '%s' is not a weight", name);
    found++;
  }
  ck_assert_int_eq(found, 4);
  ck_assert_int_eq(count_op(g, OP_CONST), 1);
  ck_assert_int_eq(count_op(g, OP_TRANSPOSE), 1);
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 4);
  const float x[6] = {1, 0, -1, 2, 1, 0};
  Tensor y = run1(g, "x", 2, xd, x);
  /* x @ W^T: rows (1,0,-1) and (2,1,0) against W's rows */
  const float expect[8] = {-2, -2, -2, -2, 4, 13, 22, 31};
  for (int i = 0; i < 8; i++) ck_assert_float_eq((float)ir_tensor_get(&y, i), expect[i]);
  ir_tensor_free(&y);
}
END_TEST

/* bn.weight (ones), bn.bias (zeros) and the running statistics rm, rv:
 * [2] each. */
static void add_bn_initializers(Model *b, const float *rm, const float *rv) {
  const int64_t cd[1] = {2};
  const float ones[2] = {1, 1}, zeros[2] = {0, 0};
  add_init_f32(b, "bn.weight", 1, cd, 2, ones);
  add_init_f32(b, "bn.bias", 1, cd, 2, zeros);
  add_init_f32(b, "bn.running_mean", 1, cd, 2, rm);
  add_init_f32(b, "bn.running_var", 1, cd, 2, rv);
}

/* g in training mode, its outputs the result and the two new running
 * statistics, evaluated at x = 1..8 ([2, 2, 1, 2]): channel 0 holds 1,
 * 2, 5, 6 (mean 3.5, unbiased variance 17/3), channel 1 3, 4, 7, 8
 * (mean 5.5, the same). */
static void eval_training_mode(Graph *g, const int64_t *xd, Tensor out[3]) {
  AutodiffOptions ado = {0};
  ck_assert_msg(pass_train_mode(g, &ado) && ir_verify(g), "%s", diag_text(&ctx));
  ck_assert_int_eq(g->n_outputs, 3);
  ck_assert_str_eq(ir_output_update(g, 1), "bn.running_mean");
  ck_assert_str_eq(ir_output_update(g, 2), "bn.running_var");
  const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Tensor xt;
  TensorType xty = ir_type_make(TY_F32, 4, xd);
  ck_assert(ir_tensor_alloc(&xt, &xty));
  memcpy(xt.data, x, sizeof x);
  const char *xname = "x";
  TensorMap in = {1, &xname, &xt};
  char err[256];
  ck_assert_msg(ir_eval(g, &in, &params, out, err, sizeof err), "%s", err);
  ir_tensor_free(&xt);
}

/* PyTorch's export of BatchNorm in train(): training_mode=1, the running
 * statistics' outputs named but read by nothing.  The batchnorm computes
 * the batch's statistics and names the running initializers (kept in
 * the params), momentum PyTorch's (1 - ONNX's); a training step
 * (passes/train_mode.c) updates them as PyTorch does, the variance
 * unbiased. */
START_TEST(test_batchnorm_training_export) {
  Model *b = model_new(15);
  int64_t xd[4] = {2, 2, 1, 2};
  add_input(b, "x", 4, xd);
  const float rm[2] = {0.5f, -1}, rv[2] = {2, 3};
  add_bn_initializers(b, rm, rv);
  Onnx__NodeProto *n =
      add_node(b, "BatchNormalization", "x,bn.weight,bn.bias,bn.running_mean,bn.running_var", "y,m_out,v_out");
  attr_i(n, "training_mode", 1);
  attr_f(n, "momentum", 0.75f);
  add_output(b, "y");
  Graph *g = must_import(b);
  Node *bn = first_op(g, OP_BATCHNORM);
  ck_assert_ptr_nonnull(bn);
  ck_assert_str_eq(ir_attr_str(bn, "running_mean"), "bn.running_mean");
  ck_assert_str_eq(ir_attr_str(bn, "running_var"), "bn.running_var");
  ck_assert_double_eq_tol(ir_attr_float(bn, "momentum"), 0.25, 1e-7);
  ck_assert_ptr_nonnull(ir_tensor_map_find(&params, "bn.running_mean"));
  ck_assert_ptr_nonnull(ir_tensor_map_find(&params, "bn.running_var"));
  Tensor out[3];
  eval_training_mode(g, xd, out);
  const double mean[2] = {3.5, 5.5}, var = 17.0 / 3;
  for (int c = 0; c < 2; c++) {
    ck_assert_double_eq_tol(ir_tensor_get(&out[1], c), 0.75 * rm[c] + 0.25 * mean[c], 1e-5);
    ck_assert_double_eq_tol(ir_tensor_get(&out[2], c), 0.75 * rv[c] + 0.25 * var, 1e-5);
  }
  for (int i = 0; i < 3; i++) ir_tensor_free(&out[i]);
}
END_TEST

/* A model exported in training mode (torch.onnx's TRAINING), as dlcc
 * train takes it: Dropout with training_mode true is the dropout op over
 * the training state params (zero at import), its mask output where a
 * dropout of ones keeps the element, the mask each element's Philox word
 * gives (ops.def); pass_eval_mode makes it PyTorch's eval(): no dropout,
 * the batchnorm by its running statistics. */
START_TEST(test_training_export_eval_mode) {
  Model *b = model_new(15);
  int64_t xd[4] = {2, 2, 1, 2};
  add_input(b, "x", 4, xd);
  const float rm[2] = {0.5f, -1}, rv[2] = {2, 3}, ratio = 0.5f;
  const uint8_t yes = 1;
  add_bn_initializers(b, rm, rv);
  add_init_f32(b, "ratio", 0, NULL, 1, &ratio);
  add_init_raw(b, "train", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, &yes, 1);
  attr_i(add_node(b, "BatchNormalization", "x,bn.weight,bn.bias,bn.running_mean,bn.running_var", "y1,m_out,v_out"),
         "training_mode", 1);
  add_node(b, "Dropout", "y1,ratio,train", "y,mask");
  add_output(b, "y");
  add_output(b, "mask");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_DROPOUT), 2); /* the values and the mask's ones */
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_DROPOUT) {
      ck_assert_int_eq(ir_attr_int(n, "stream"), 0);
      ck_assert_int_eq(ir_attr_int(n, "batch"), 2);
      ck_assert_double_eq(ir_attr_float(n, "p"), 0.5);
    }
  const char *state[3] = {"dlcc.seed", "dlcc.step", "dlcc.first_sample"};
  for (int i = 0; i < 3; i++) {
    const Tensor *t = ir_tensor_map_find(&params, state[i]);
    ck_assert_msg(t && t->type.dtype == TY_I64 && t->type.rank == 0 && *(int64_t *)t->data == 0, "%s", state[i]);
  }
  const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Tensor in = {ir_type_make(TY_F32, 4, xd), (void *)x}, out[2];
  const char *xname = "x";
  TensorMap inputs = {1, &xname, &in};
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
  /* the batch's statistics: channel 0 holds 1, 2, 5, 6, channel 1 3, 4,
   * 7, 8 (means 3.5 and 5.5, biased variance 4.25) */
  int kept = 0;
  for (int i = 0; i < 8; i++) {
    int c = (i / 2) % 2;
    double y1 = (x[i] - (c ? 5.5 : 3.5)) / sqrt(4.25 + 1e-5);
    bool keep = ir_dropout_bits(0, 0, (uint64_t)i, 0) >= ir_dropout_threshold(0.5);
    kept += keep;
    ck_assert_double_eq_tol(ir_tensor_get(&out[0], i), keep ? 2 * y1 : 0, 1e-5);
    ck_assert_int_eq(((const uint8_t *)out[1].data)[i], keep);
  }
  ck_assert_msg(kept > 0 && kept < 8, "the mask keeps %d of 8", kept);
  for (int i = 0; i < 2; i++) ir_tensor_free(&out[i]);
  ck_assert_msg(pass_eval_mode(g) && ir_verify(g), "%s", diag_text(&ctx));
  ck_assert_int_eq(count_op(g, OP_DROPOUT), 0);
  ck_assert_ptr_null(ir_attr(first_op(g, OP_BATCHNORM), "batch_stats"));
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
  for (int i = 0; i < 8; i++) {
    int c = (i / 2) % 2;
    ck_assert_double_eq_tol(ir_tensor_get(&out[0], i), (x[i] - rm[c]) / sqrt(rv[c] + 1e-5), 1e-5);
    ck_assert_int_eq(((const uint8_t *)out[1].data)[i], 1);
  }
  for (int i = 0; i < 2; i++) ir_tensor_free(&out[i]);
  /* a ratio that is no probability; a model value of a state param's name */
  const float bad = 1.5f;
  teardown(), setup();
  b = model_new(15);
  add_input(b, "x", 4, xd);
  add_init_f32(b, "ratio", 0, NULL, 1, &bad);
  add_init_raw(b, "train", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, &yes, 1);
  add_node(b, "Dropout", "x,ratio,train", "y");
  add_output(b, "y");
  expect_error(import(b), "node 0 'n0' (Dropout): the ratio 1.5 is not a probability (0 to 1)");
  teardown(), setup();
  b = model_new(15);
  add_input(b, "x", 4, xd);
  add_init_f32(b, "ratio", 0, NULL, 1, &ratio);
  add_init_raw(b, "train", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, &yes, 1);
  add_init_i64(b, "dlcc.step", 1, (const int64_t[]){3});
  add_node(b, "Dropout", "x,ratio,train", "y");
  add_node(b, "Add", "y,y", "z");
  add_output(b, "z");
  expect_error(import(b), "the model has a value named 'dlcc.step', the name of dlcc's dropout state");
}
END_TEST

/* The random ops draw random_uniform: RandomNormal's draws have its mean
 * and scale, RandomUniformLike's lie in [low, high) with x's shape and
 * its own stream, and a model of them evaluates the same twice (the
 * state params unchanged); pass_eval_mode leaves them, warning. */
START_TEST(test_random_ops) {
  Model *b = model_new(15);
  int64_t xd[2] = {64, 64};
  add_input(b, "x", 2, xd);
  Onnx__NodeProto *n = add_node(b, "RandomNormal", "", "z");
  attr_is(n, "shape", 2, xd);
  attr_f(n, "mean", 2);
  attr_f(n, "scale", 3);
  n = add_node(b, "RandomUniformLike", "x", "u");
  attr_f(n, "low", -1);
  attr_f(n, "high", 0.5f);
  add_node(b, "Add", "z,x", "y");
  add_output(b, "y");
  add_output(b, "u");
  Graph *g = must_import(b);
  int streams = 0;
  for (Node *k = g->first; k; k = k->next)
    if (k->op == OP_RANDOM_UNIFORM) ck_assert_int_eq(ir_attr_int(k, "stream"), streams++);
  ck_assert_int_eq(streams, 3); /* the normal's two, the uniform's one */
  float *x = calloc(64 * 64, sizeof *x);
  ck_assert_ptr_nonnull(x);
  Tensor in = {ir_type_make(TY_F32, 2, xd), x}, out[2], again[2];
  const char *xname = "x";
  TensorMap inputs = {1, &xname, &in};
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
  ck_assert_msg(ir_eval(g, &inputs, &params, again, err, sizeof err), "%s", err);
  double sum = 0, sq = 0, lo = 1, hi = -1;
  for (int i = 0; i < 64 * 64; i++) {
    double z = ir_tensor_get(&out[0], i), u = ir_tensor_get(&out[1], i);
    sum += z, sq += z * z;
    lo = fmin(lo, u), hi = fmax(hi, u);
    ck_assert(z == ir_tensor_get(&again[0], i) && u == ir_tensor_get(&again[1], i));
  }
  double mean = sum / 4096, sd = sqrt(sq / 4096 - mean * mean);
  ck_assert_msg(fabs(mean - 2) < 0.2 && fabs(sd - 3) < 0.2, "mean %g, sd %g", mean, sd);
  ck_assert_msg(lo >= -1 && lo < -0.99 && hi < 0.5 && hi > 0.49, "uniform in [%g, %g]", lo, hi);
  for (int i = 0; i < 2; i++) ir_tensor_free(&out[i]), ir_tensor_free(&again[i]);
  free(x);
  ck_assert(pass_eval_mode(g));
  ck_assert_int_eq(count_op(g, OP_RANDOM_UNIFORM), 3);
  ck_assert_msg(strstr(diag_text(&ctx), "eval mode: this random draw stays random"), "%s", diag_text(&ctx));
}
END_TEST

/* Multinomial: 4000 samples of each row's classes, int32 by default,
 * each class drawn about as often as its softmax probability (within
 * five standard deviations), a class of probability 0 never. */
START_TEST(test_multinomial) {
  Model *b = model_new(15);
  int64_t xd[2] = {2, 4};
  add_input(b, "x", 2, xd);
  attr_i(add_node(b, "Multinomial", "x", "y"), "sample_size", 4000);
  add_output(b, "y");
  Graph *g = must_import(b);
  const double p[2][4] = {{0.1, 0.2, 0.3, 0.4}, {0.7, 0, 0.2, 0.1}};
  float x[8];
  for (int i = 0; i < 8; i++) x[i] = p[i / 4][i % 4] ? (float)log(p[i / 4][i % 4]) : -INFINITY;
  Tensor in = {ir_type_make(TY_F32, 2, xd), x}, out;
  const char *xname = "x";
  TensorMap inputs = {1, &xname, &in};
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, &out, err, sizeof err), "%s", err);
  ck_assert_int_eq(out.type.dtype, TY_I32);
  for (int r = 0; r < 2; r++) {
    int count[4] = {0};
    for (int s = 0; s < 4000; s++) {
      int64_t c = ir_tensor_get_int(&out, r * 4000 + s);
      ck_assert(c >= 0 && c < 4);
      count[c]++;
    }
    for (int c = 0; c < 4; c++)
      ck_assert_msg(fabs(count[c] - 4000 * p[r][c]) <= 5 * sqrt(4000 * p[r][c] * (1 - p[r][c])) + (p[r][c] > 0),
                    "row %d class %d: %d of 4000", r, c, count[c]);
  }
  ir_tensor_free(&out);
}
END_TEST

/* torchvision's StochasticDepth as its training-mode export: x *
 * cast(RandomUniformLike(noise) < 0.8) / 0.8.  Trained, some samples
 * lose x and the rest scale it by 1.25; pass_eval_mode makes the mask
 * its expectation, 1, so the result is x, without a warning. */
START_TEST(test_stochastic_depth_eval) {
  Model *b = model_new(15);
  int64_t xd[2] = {64, 3}, nd[2] = {64, 1};
  add_input(b, "x", 2, xd);
  const float survive = 0.8f;
  float zeros[64] = {0};
  add_init_f32(b, "noise_shape", 2, nd, 64, zeros);
  add_init_f32(b, "p", 0, NULL, 1, &survive);
  add_node(b, "RandomUniformLike", "noise_shape", "u");
  add_node(b, "Less", "u,p", "keep");
  attr_i(add_node(b, "Cast", "keep", "mask"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  add_node(b, "Div", "mask,p", "scaled");
  add_node(b, "Mul", "x,scaled", "y");
  add_output(b, "y");
  for (int eval = 0; eval < 2; eval++) {
    Graph *g = must_import(b);
    if (eval) ck_assert_msg(pass_eval_mode(g) && ir_verify(g), "%s", diag_text(&ctx));
    float x[64 * 3];
    for (int i = 0; i < 64 * 3; i++) x[i] = 1 + (float)i;
    Tensor in = {ir_type_make(TY_F32, 2, xd), x}, out;
    const char *xname = "x";
    TensorMap inputs = {1, &xname, &in};
    char err[256];
    ck_assert_msg(ir_eval(g, &inputs, &params, &out, err, sizeof err), "%s", err);
    int dropped = 0;
    for (int i = 0; i < 64 * 3; i++) {
      double y = ir_tensor_get(&out, i);
      if (eval) ck_assert_double_eq(y, x[i]);
      else ck_assert_msg(y == 0 || fabs(y - x[i] * 1.25) < 1e-4 * x[i], "y %g for x %g", y, x[i]);
      dropped += y == 0;
    }
    if (!eval) ck_assert_msg(dropped > 0 && dropped % 3 == 0 && dropped < 64 * 3 / 2, "dropped %d", dropped);
    ir_tensor_free(&out);
  }
  ck_assert_msg(!strstr(diag_text(&ctx), "stays random"), "%s", diag_text(&ctx));
}
END_TEST

/* A batchnorm module called twice (one set of initializers, two
 * BatchNormalization nodes in inference form that training turns to
 * batch statistics) moves its running statistics twice, the second
 * time from the first's result, as PyTorch's in-place updates do; one
 * whose running mean is its bias (an exporter merged the equal zeros)
 * is refused, naming both. */
START_TEST(test_batchnorm_twice_and_merged) {
  Model *b = model_new(15);
  int64_t xd[4] = {2, 2, 1, 2}, cd[1] = {2};
  add_input(b, "x", 4, xd);
  const float ones[2] = {1, 1}, zeros[2] = {0, 0}, rm[2] = {0.5f, -1}, rv[2] = {2, 3};
  add_bn_initializers(b, rm, rv);
  add_node(b, "BatchNormalization", "x,bn.weight,bn.bias,bn.running_mean,bn.running_var", "y1");
  add_node(b, "BatchNormalization", "y1,bn.weight,bn.bias,bn.running_mean,bn.running_var", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor out[3];
  eval_training_mode(g, xd, out);
  /* the first normalizes each channel (mean 3.5 or 5.5, unbiased
   * variance 17/3) to mean 0 and biased variance var / (var + eps): the
   * second's statistics */
  const double mean[2] = {3.5, 5.5}, var = 17.0 / 3, biased = var * 3 / 4, eps = 1e-5;
  for (int c = 0; c < 2; c++) {
    double m1 = 0.9 * rm[c] + 0.1 * mean[c], v1 = 0.9 * rv[c] + 0.1 * var;
    ck_assert_double_eq_tol(ir_tensor_get(&out[1], c), 0.9 * m1, 1e-5);
    ck_assert_double_eq_tol(ir_tensor_get(&out[2], c), 0.9 * v1 + 0.1 * biased / (biased + eps) * 4 / 3, 1e-5);
  }
  for (int i = 0; i < 3; i++) ir_tensor_free(&out[i]);
  /* a running statistic that is another operand too: the bias as the
   * mean (an exporter merged equal initializers), one param as both */
  static const struct {
    const char *inputs, *want, *also;
  } shared[] = {
      {"x,bn.weight,bn.bias,bn.bias,bn.running_var",
       "batchnorm in training mode updates its running mean 'bn.bias', which is also read as another operand (an "
       "exporter merged equal initializers",
       NULL},
      {"x,bn.weight,bn.bias,bn.running_var,bn.running_var",
       "batchnorm in training mode updates its running mean 'bn.running_var', which is also read as another operand",
       "its running variance 'bn.running_var', which is also read as another operand"},
  };
  for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++) {
    teardown();
    setup();
    b = model_new(15);
    add_input(b, "x", 4, xd);
    add_init_f32(b, "bn.weight", 1, cd, 2, ones);
    add_init_f32(b, "bn.bias", 1, cd, 2, zeros);
    add_init_f32(b, "bn.running_var", 1, cd, 2, rv);
    add_node(b, "BatchNormalization", shared[k].inputs, "y");
    add_output(b, "y");
    g = must_import(b);
    ck_assert(!pass_train_mode(g, &(AutodiffOptions){0}));
    ck_assert_msg(strstr(diag_text(&ctx), shared[k].want) && (!shared[k].also || strstr(diag_text(&ctx), shared[k].also)),
                  "%s", diag_text(&ctx));
  }
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
  /* PyTorch order i, f, g, o = ONNX rows 0, 2, 3, 1, computed from the
   * W, R and B params (weights keep their names: the reorder is the init
   * steps' at a load, and training's gradient reaches W itself). */
  const float want_w[4] = {1, 3, 4, 2}, want_r[4] = {10, 30, 40, 20};
  const float want_bih[4] = {1, 3, 4, 2}, want_bhh[4] = {5, 7, 8, 6};
  const float *want[4] = {want_w, want_r, want_bih, want_bhh};
  Graph *ops = ir_copy(g, "operands");
  Node *lc = first_op(ops, OP_LSTM);
  Value *operand[4] = {lc->in[1], lc->in[2], lc->in[3], lc->in[4]};
  const char *names[4] = {"w", "r", "bih", "bhh"};
  ir_set_outputs(ops, 4, operand, names);
  Tensor got[4];
  char err[256];
  TensorMap none = {0}, *in = &none;
  float xz[2] = {0, 0};
  Tensor xt;
  TensorType xty = ir_type_make(TY_F32, 3, xd);
  ck_assert(ir_tensor_alloc(&xt, &xty));
  memcpy(xt.data, xz, sizeof xz);
  const char *xname = "x";
  none = (TensorMap){1, &xname, &xt};
  ck_assert_msg(ir_eval(ops, in, &params, got, err, sizeof err), "%s", err);
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < 4; i++) ck_assert_float_eq((float)ir_tensor_get(&got[k], i), want[k][i]);
    ir_tensor_free(&got[k]);
  }
  ir_tensor_free(&xt);
  for (const Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM) ck_assert(strchr("WRB", ir_attr_str(n, "name")[0]) && !ir_attr_str(n, "name")[1]);
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

/* Clip with min > max is max everywhere (ONNX: min(max(x, min), max)). */
START_TEST(test_clip_min_above_max) {
  Model *b = model_new(13);
  int64_t xd[1] = {3};
  add_input(b, "x", 1, xd);
  add_init_f32(b, "lo", 0, NULL, 1, (const float[]){2});
  add_init_f32(b, "hi", 0, NULL, 1, (const float[]){1});
  add_node(b, "Clip", "x,lo,hi", "y");
  add_output(b, "y");
  Tensor y = run1(must_import(b), "x", 1, xd, (const float[]){-2, 0, 6});
  for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&y, i), 1);
  ir_tensor_free(&y);
}
END_TEST

/* Einsum beyond the node tests' equations: '...' with the output implicit
 * ("...ik"), a diagonal summed away against a second operand, upper-case
 * letters. */
START_TEST(test_einsum_ellipsis_and_trace) {
  Model *b = model_new(12);
  int64_t xd[3] = {2, 1, 2}, wd[3] = {2, 2, 1};
  add_input(b, "x", 3, xd);
  add_init_f32(b, "w", 3, wd, 4, (const float[]){1, -1, 2, 0.5f});
  attr_s(add_node(b, "Einsum", "x,w", "y"), "equation", "...ij,...jk");
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert(same_dims(&g->outputs[0]->type, 3, (int64_t[]){2, 1, 1}));
  Tensor y = run1(g, "x", 3, xd, (const float[]){1, 2, 3, 4});
  expect_values(&y, 2, (const double[]){-1, 8}, "y");
  ir_tensor_free(&y);
  b = model_new(12);
  int64_t td[3] = {2, 2, 2};
  add_input(b, "x", 3, td);
  add_init_f32(b, "v", 2, (int64_t[]){2, 3}, 6, (const float[]){1, 2, 3, -1, 0, 1});
  attr_s(add_node(b, "Einsum", "x,v", "y"), "equation", "bii,bj->bj");
  add_output(b, "y");
  y = run1(must_import(b), "x", 3, td, (const float[]){1, 2, 3, 4, 5, 6, 7, 8});
  expect_values(&y, 6, (const double[]){5, 10, 15, -13, 0, 13}, "y"); /* traces 5 and 13 */
  ir_tensor_free(&y);
  /* upper-case letters, as torchvision's MaxViT writes them; implicit,
   * the output's letters in numpy's order, 'C' before 'b': (x w)^T */
  b = model_new(12);
  int64_t ad[2] = {2, 3};
  add_input(b, "x", 2, ad);
  add_init_f32(b, "w", 2, (int64_t[]){3, 2}, 6, (const float[]){1, 0, 0, 1, 1, -1});
  attr_s(add_node(b, "Einsum", "x,w", "y"), "equation", "ba,aC");
  add_output(b, "y");
  y = run1(must_import(b), "x", 2, ad, (const float[]){1, 2, 3, 4, 5, 6});
  expect_values(&y, 4, (const double[]){4, 10, -1, -1}, "y");
  ir_tensor_free(&y);
}
END_TEST

/* Celu of bf16 is written as several ops; they compute in f32 and round
 * to bf16 once, as the op does: exp(-0.25) - 1 in bf16 steps gives
 * -0.4453125 at x = -0.5, where the correctly rounded result is
 * -0.443359375 (ONNX's test_celu_bfloat16). */
START_TEST(test_celu_bf16_rounds_once) {
  Model *b = model_new(12);
  int64_t xd[1] = {5};
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, 1, xd);
  attr_f(add_node(b, "Celu", "x", "y"), "alpha", 2.0f);
  add_output(b, "y");
  Graph *g = must_import(b);
  static const double xs[5] = {-3, -0.5, 0, 0.5, 3};
  uint16_t bits[5];
  for (int i = 0; i < 5; i++) bits[i] = ir_bf16_from_double(xs[i]);
  Tensor in = {ir_type_make(TY_BF16, 1, xd), bits};
  const char *nm[1] = {"x"};
  TensorMap inputs = {1, nm, &in};
  Tensor y;
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "eval: %s", err);
  ck_assert_int_eq(y.type.dtype, TY_BF16);
  for (int i = 0; i < 5; i++) {
    double want = xs[i] > 0 ? xs[i] : 2 * expm1(xs[i] / 2);
    ck_assert_msg(((uint16_t *)y.data)[i] == ir_bf16_from_double(want), "element %d: 0x%04x, want 0x%04x", i,
                  ((uint16_t *)y.data)[i], ir_bf16_from_double(want));
  }
  ck_assert_double_eq(ir_tensor_get(&y, 1), -0.443359375);
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
  /* Unrolling multiplies one ONNX node: the graph's node bound holds. */
  expect_error(import_opt(rnn_model(1000, NULL), &(OnnxOptions){.max_nodes = 500}),
               "(RNN): model too large: more than 500 operations in the imported graph");
  diag_clear(&ctx);
  Model *b = rnn_model(3, NULL);
  add_init_i64(b, "lens", 1, (const int64_t[]){4});
  b->nodes[0]->input = names("x,W,R,,lens", &b->nodes[0]->n_input);
  expect_error(import(b), "(RNN): sequence_lens entry 0 is 4, not in [1, 3]");
  diag_clear(&ctx);
}
END_TEST

/* ---- through the API ---- */

/* b written to path, a mkstemps template ending in ".onnx". */
static void save_model(Model *b, char *path) {
  int fd = mkstemps(path, 5);
  ck_assert_int_ge(fd, 0);
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
  close(fd);
}

START_TEST(test_api_runs_without_weights_file) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3}, wd[2] = {4, 3}, bd[1] = {4};
  add_input(b, "x", 2, xd);
  add_init_f32(b, "fc.weight", 2, wd, 12, wdata);
  add_init_f32(b, "fc.bias", 1, bd, 4, bdata);
  attr_i(add_node(b, "Gemm", "x,fc.weight,fc.bias", "y"), "transB", 1);
  add_output(b, "y");
  char path[] = "/tmp/dlcc-onnx-api-XXXXXX.onnx";
  save_model(b, path);
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

/* What an exported forward computes from constants is no weight: a Cast
 * of an integer initializer ("steps") becomes a param that training
 * leaves alone (frozen, as PyTorch has no gradient for it) and a saved
 * state_dict leaves out (derived: PyTorch has no such key), while
 * "m.index", a buffer the import folds away (a Reshape of it feeds a
 * Gather), is written back, and binds again only with its own values. */
START_TEST(test_constants_and_buffers_train_as_pytorch) {
  Model *b = model_new(17);
  int64_t xd[2] = {2, 3}, wd[2] = {3, 3};
  add_input(b, "x", 2, xd);
  const float w[9] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, 0.9f};
  add_init_f32(b, "fc.weight", 2, wd, 9, w);
  add_init_i64(b, "steps", 3, (const int64_t[]){1, 2, 3});
  add_init_i64(b, "m.index", 2, (const int64_t[]){2, 0});
  add_init_i64(b, "shape", 2, (const int64_t[]){1, 2});
  attr_i(add_node(b, "Cast", "steps", "scale"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  add_node(b, "Reshape", "m.index,shape", "idx");
  add_node(b, "MatMul", "x,fc.weight", "xw");
  add_node(b, "Mul", "xw,scale", "y");
  attr_i(add_node(b, "Gather", "y,idx", "z"), "axis", 1);
  add_output(b, "z");
  char path[] = "/tmp/dlcc-onnx-buffers-XXXXXX.onnx";
  save_model(b, path);
  dlc_train_options o;
  ck_assert_int_eq(dlc_train_options_init(&o, "sgd"), DLC_OK);
  o.model.backend = "ref";
  o.loss = "mse";
  dlc_train *t;
  ck_assert_msg(dlc_train_compile(path, &o, &t) == DLC_OK, "%s", dlc_train_error(t));
  dlc_model *m = dlc_train_model(t);
  float loss, scale[3], w1[9];
  /* a random draw (and the optimizer's state) keeps the constants */
  ck_assert_int_eq(dlc_init_weights(m, 7), DLC_OK);
  ck_assert_int_eq(dlc_get_weight(m, "scale", scale, sizeof scale), DLC_OK);
  for (int i = 0; i < 3; i++) ck_assert_float_eq(scale[i], (float)(i + 1));
  ck_assert_int_eq(dlc_set_weight(m, "fc.weight", w, sizeof w), DLC_OK);
  const float x[6] = {1, -2, 3, 0.5f, -1, 2}, target[4] = {1, 0, -1, 2};
  ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
  ck_assert_int_eq(dlc_set_input(m, "target", target, sizeof target), DLC_OK);
  ck_assert_msg(dlc_train_step(t, 0.1f, &loss) == DLC_OK, "%s", dlc_train_error(t));
  /* z = (x @ W * scale)[:, [2, 0]]: the gather's index is the model's */
  double want = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      int col = j ? 0 : 2;
      double z = 0;
      for (int k = 0; k < 3; k++) z += x[i * 3 + k] * w[k * 3 + col] * (col + 1);
      want += (z - target[i * 2 + j]) * (z - target[i * 2 + j]) / 4;
    }
  ck_assert_double_eq_tol(loss, want, 1e-5);
  ck_assert_int_eq(dlc_get_weight(m, "scale", scale, sizeof scale), DLC_OK);
  for (int i = 0; i < 3; i++) ck_assert_float_eq(scale[i], (float)(i + 1));
  ck_assert_int_eq(dlc_get_weight(m, "fc.weight", w1, sizeof w1), DLC_OK);
  ck_assert(memcmp(w, w1, sizeof w) != 0);
  char saved[] = "/tmp/dlcc-onnx-buffers-XXXXXX.safetensors";
  int fd = mkstemps(saved, 12);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_msg(dlc_train_save(t, saved, 0, 0, NULL, NULL) == DLC_OK, "%s", dlc_train_error(t));
  RtTensorSet set;
  char err[512];
  ck_assert_msg(rt_safetensors_read(saved, &set, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(set.n, 2);
  ck_assert_ptr_nonnull(rt_tensor_set_find(&set, "fc.weight"));
  const RtTensor *index = rt_tensor_set_find(&set, "m.index");
  ck_assert_ptr_nonnull(index);
  ck_assert_int_eq(index->dtype, RT_I64);
  ck_assert_int_eq(((const int64_t *)index->data)[0], 2);
  /* the file binds back; with another index it cannot */
  ck_assert_msg(dlc_load_weights(m, saved) == DLC_OK, "%s", dlc_error(m));
  ((int64_t *)index->data)[0] = 1;
  ck_assert_int_eq(rt_safetensors_write(saved, &set, err, sizeof err), 0);
  rt_tensor_set_free(&set);
  ck_assert_int_eq(dlc_load_weights(m, saved), DLC_ERR_WEIGHTS);
  ck_assert_msg(strstr(dlc_error(m), "tensor 'm.index' differs from the model's own i64[2]"), "%s", dlc_error(m));
  dlc_train_free(t);
  unlink(saved);
  unlink(path);
}
END_TEST

/* f16 codes of k / 16 for |k| <= 16 (exact in f16): sign, exponent,
 * the mantissa's top bits. */
static uint16_t f16_of_sixteenths(int k) {
  if (!k) return 0;
  uint16_t sign = k < 0 ? 0x8000u : 0;
  int m = k < 0 ? -k : k, e = 0;
  while (m >= 2 << e) e++;                     /* 2^e <= m < 2^(e+1) */
  uint16_t frac = (uint16_t)((m - (1 << e)) << (10 - e));
  return (uint16_t)(sign | ((uint16_t)(15 + e - 4) << 10) | frac);
}

/* A model.half() export's LSTM: x and the layer in FLOAT16.  The layer
 * runs in f32 between casts (codegen's recurrent kernels are f32 only,
 * so emu and cuda once refused it: "codegen does not support lstm on
 * f16 yet"); emu equals the interpreter within f16's rounding. */
START_TEST(test_lstm_f16_runs_in_f32) {
  enum { T = 3, N = 2, I = 4, H = 4 };
  Model *b = model_new(14);
  int64_t xd[3] = {T, N, I}, wd[3] = {2, 4 * H, I}, rd[3] = {2, 4 * H, H}, bd[2] = {2, 8 * H};
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 3, xd);
  float w[2 * 4 * H * I], r[2 * 4 * H * H], bias[2 * 8 * H];
  for (int i = 0; i < 2 * 4 * H * I; i++) w[i] = (float)((i * 7 % 17) - 8) / 16;
  for (int i = 0; i < 2 * 4 * H * H; i++) r[i] = (float)((i * 5 % 13) - 6) / 16;
  for (int i = 0; i < 2 * 8 * H; i++) bias[i] = (float)((i * 3 % 11) - 5) / 16;
  add_init_f32(b, "W32", 3, wd, 2 * 4 * H * I, w);
  add_init_f32(b, "R32", 3, rd, 2 * 4 * H * H, r);
  add_init_f32(b, "B32", 2, bd, 2 * 8 * H, bias);
  const char *names[3][2] = {{"W32", "W"}, {"R32", "R"}, {"B32", "B"}};
  for (int i = 0; i < 3; i++) {
    char in[8], out[8];
    snprintf(in, sizeof in, "%s", names[i][0]), snprintf(out, sizeof out, "%s", names[i][1]);
    attr_i(add_node(b, "Cast", in, out), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
  }
  Onnx__NodeProto *l = add_node(b, "LSTM", "x,W,R,B", "Y");
  attr_i(l, "hidden_size", H);
  attr_s(l, "direction", "bidirectional");
  add_output(b, "Y");
  Graph *g = must_import(b);
  Node *ln = first_op(g, OP_LSTM);
  ck_assert_ptr_nonnull(ln);
  ck_assert_int_eq(ln->in[0]->type.dtype, TY_F32);
  ck_assert_int_eq(g->outputs[0]->type.dtype, TY_F16);
  char path[] = "/tmp/dlcc-onnx-lstm16-XXXXXX.onnx";
  save_model(b, path);
  uint16_t x[T * N * I];
  for (int i = 0; i < T * N * I; i++) x[i] = f16_of_sixteenths((i * 11 % 33) - 16);
  uint16_t y[2][T * 2 * N * H];
  const char *backends[2] = {"ref", "emu"};
  for (int k = 0; k < 2; k++) {
    dlc_options opt = {.backend = backends[k]};
    dlc_model *m;
    ck_assert_msg(dlc_compile_file(path, &opt, &m) == DLC_OK, "%s: %s", backends[k], dlc_error(m));
    ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
    ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
    const void *out;
    size_t n;
    ck_assert_int_eq(dlc_get_output(m, 0, &out, &n), DLC_OK);
    ck_assert_uint_eq(n, sizeof y[k]);
    memcpy(y[k], out, n);
    dlc_free(m);
  }
  unlink(path);
  /* within two f16 steps: the codes of values of one sign are ordered */
  for (int i = 0; i < T * 2 * N * H; i++)
    ck_assert_msg(abs((int)y[0][i] - (int)y[1][i]) <= 2 || (y[0][i] & 0x7fffu) + (y[1][i] & 0x7fffu) <= 2,
                  "Y[%d]: emu 0x%04x, ref 0x%04x", i, y[1][i], y[0][i]);
}
END_TEST

static Suite *onnx_suite(void) {
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("import");
  /* some compile kernels with NVRTC (emu), past Check's 4 s default
   * under ASan on a loaded machine */
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_gemm_initializers_are_params);
  tcase_add_test(tc, test_gemm_trans_alpha_beta);
  tcase_add_test(tc, test_symbolic_batch_needs_define);
  tcase_add_test(tc, test_free_dims_from_inputs);
  tcase_add_test(tc, test_empty_tensors);
  tcase_add_test(tc, test_attention_gqa_causal);
  tcase_add_test(tc, test_if_branches);
  tcase_add_test(tc, test_loop_scan_unrolled);
  tcase_add_test(tc, test_shape_chain_folds);
  tcase_add_test(tc, test_constant_of_shape_past_folding);
  tcase_add_test(tc, test_lstm_gates_reordered_at_import);
  tcase_add_test(tc, test_lstm_f16_runs_in_f32);
  tcase_add_test(tc, test_initializers_stay_params);
  tcase_add_test(tc, test_batchnorm_training_export);
  tcase_add_test(tc, test_batchnorm_twice_and_merged);
  tcase_add_test(tc, test_training_export_eval_mode);
  tcase_add_test(tc, test_random_ops);
  tcase_add_test(tc, test_stochastic_depth_eval);
  tcase_add_test(tc, test_multinomial);
  tcase_add_test(tc, test_conv_auto_pad_same);
  tcase_add_test(tc, test_slice_negative_step);
  tcase_add_test(tc, test_gelu_opset20);
  tcase_add_test(tc, test_clip_min_above_max);
  tcase_add_test(tc, test_celu_bf16_rounds_once);
  tcase_add_test(tc, test_einsum_ellipsis_and_trace);
  tcase_add_test(tc, test_pad_modes);
  tcase_add_test(tc, test_legacy_broadcast);
  tcase_add_test(tc, test_rnn_unrolled);
  tcase_add_test(tc, test_causal_conv_with_state);
  tcase_add_test(tc, test_linear_attention);
  tcase_add_test(tc, test_tfidf_vectorizer);
  tcase_add_test(tc, test_det);
  tcase_add_test(tc, test_flex_attention);
  tcase_add_test(tc, test_training_domain);
  tcase_add_test(tc, test_declared_output_shape);
  tcase_add_test(tc, test_deform_conv);
  tcase_add_test(tc, test_scan8);
  tcase_add_test(tc, test_api_runs_without_weights_file);
  tcase_add_test(tc, test_constants_and_buffers_train_as_pytorch);
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
