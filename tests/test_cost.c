/* Check suite for the cost model (ir/cost.c, codegen/plan_cost.c,
 * docs/cost.md): every op of ops.def has a rule; each op class's FLOPs
 * and minimum bytes against hand formulas on concrete shapes; fused
 * groups move no intermediate bytes; each kind of plan step costs its
 * formula and a plan's steps add up to its nodes' FLOPs; the FLOPs of
 * ResNet-18 and ResNet-50 against the published multiply-add counts;
 * the text --emit=plan and --stats print. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/randgraph.h"

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* The first node of op in g. */
static const Node *node_of(Graph *g, OpKind op) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == op) return n;
  ck_abort_msg("no %s in the graph", ir_ops[op].name);
  return NULL;
}

/* The cost of the first op node of a graph in IR text. */
static IrCost op_cost_of(const char *text, OpKind op) {
  Job j = compile_at(&ctx, text, -1);
  return ir_cost(node_of(j.g, op));
}

/* tmpl with its one '@' replaced by word. */
static const char *with(char *buf, size_t len, const char *tmpl, const char *word) {
  const char *at = strchr(tmpl, '@');
  snprintf(buf, len, "%.*s%s%s", (int)(at - tmpl), tmpl, word, at + 1);
  return buf;
}

#define ASSERT_COST(c, want_flops, want_bytes)                                                   \
  do {                                                                                           \
    IrCost c_ = (c);                                                                             \
    ck_assert_msg(c_.flops == (double)(want_flops) && c_.bytes == (double)(want_bytes),          \
                  "cost %.17g FLOPs %.17g bytes, expected %.17g and %.17g", c_.flops, c_.bytes, \
                  (double)(want_flops), (double)(want_bytes));                                   \
  } while (0)

/* ---- the table ---- */

START_TEST(every_op_has_a_rule) {
  for (int op = 0; op < OP_COUNT; op++)
    ck_assert_msg(ir_cost_has_rule((OpKind)op), "%s has no row in ir/cost.c", ir_ops[op].name);
  ck_assert(!ir_cost_has_rule(OP_COUNT));
}
END_TEST

/* docs/cost.md's per-element counts of the elementwise ops. */
static const struct {
  OpKind op;
  int per;
} elementwise[] = {
    {OP_NEG, 1}, {OP_ABS, 1}, {OP_RELU, 1}, {OP_LEAKY_RELU, 2}, {OP_CLIP, 2}, {OP_SIGMOID, 4},
    {OP_TANH, 1}, {OP_GELU, 5}, {OP_SILU, 5}, {OP_HARDSIGMOID, 4}, {OP_HARDSWISH, 5}, {OP_EXP, 1},
    {OP_LOG, 1}, {OP_SQRT, 1}, {OP_RSQRT, 1}, {OP_ERF, 1}, {OP_RECIPROCAL, 1}, {OP_SIN, 1},
    {OP_COS, 1}, {OP_ROUND, 1}, {OP_FLOOR, 1}, {OP_CEIL, 1}, {OP_SIGN, 1}, {OP_TAN, 1},
    {OP_ASIN, 1}, {OP_ACOS, 1}, {OP_ATAN, 1}, {OP_SINH, 1}, {OP_COSH, 1}, {OP_ASINH, 1},
    {OP_ACOSH, 1}, {OP_ATANH, 1}, {OP_CAST, 0}, {OP_QUANTIZE, 5}, {OP_DEQUANTIZE, 2}, {OP_ADD, 1},
    {OP_SUB, 1}, {OP_MUL, 1}, {OP_DIV, 1}, {OP_POW, 1}, {OP_MAXIMUM, 1}, {OP_MINIMUM, 1},
    {OP_MOD, 1}, {OP_EQ, 1}, {OP_NE, 1}, {OP_LT, 1}, {OP_LE, 1}, {OP_GT, 1}, {OP_GE, 1},
    {OP_EQUAL, 1}, {OP_NOT_EQUAL, 1}, {OP_LESS, 1}, {OP_LESS_EQUAL, 1}, {OP_GREATER, 1},
    {OP_GREATER_EQUAL, 1}, {OP_ISNAN, 1}, {OP_ISINF, 1}, {OP_LOGICAL_NOT, 1}, {OP_LOGICAL_AND, 1},
    {OP_LOGICAL_OR, 1}, {OP_LOGICAL_XOR, 1}, {OP_WHERE, 1}, {OP_FP_ROUND, 8}, {OP_BIT_AND, 1},
    {OP_BIT_OR, 1}, {OP_BIT_XOR, 1}, {OP_BIT_NOT, 1}, {OP_SHL, 2}, {OP_SHR, 2},
};

static int per_element(OpKind op) {
  for (size_t i = 0; i < ARRAY_LEN(elementwise); i++)
    if (elementwise[i].op == op) return elementwise[i].per;
  return -1;
}

/* Every elementwise op of ops.def on x [3, 5] (and y [5], broadcast):
 * its count per result element, each distinct operand read once. */
START_TEST(elementwise_ops_count_per_element) {
  Graph *g = ir_graph_new(&ctx, "g");
  SrcLoc loc = {0};
  char err[256];
  for (int op = 0; op < OP_COUNT; op++) {
    if (ir_ops[op].cls != K_ELEMWISE || op == OP_BATCHNORM) continue;
    int per = per_element((OpKind)op);
    ck_assert_msg(per >= 0, "%s: no count in this test's table", ir_ops[op].name);
    bool logic = op == OP_LOGICAL_NOT || op == OP_LOGICAL_AND || op == OP_LOGICAL_OR || op == OP_LOGICAL_XOR;
    bool bits = op == OP_BIT_AND || op == OP_BIT_OR || op == OP_BIT_XOR || op == OP_BIT_NOT || op == OP_SHL ||
                op == OP_SHR;
    DType dt = logic ? TY_BOOL : op == OP_DEQUANTIZE ? TY_I8 : bits ? TY_I32 : TY_F32;
    TensorType tx = ir_type_make(dt, 2, (int64_t[]){3, 5}), ty = ir_type_make(TY_F32, 1, (int64_t[]){5});
    if (logic) ty.dtype = TY_BOOL;
    if (bits) ty.dtype = TY_I32;
    Value *in[3];
    int n_in = ir_ops[op].min_in;
    if (op == OP_WHERE) {
      tx.dtype = TY_BOOL;
      in[0] = &ir_source(g, OP_INPUT, &tx, "c", loc)->out[0];
      tx.dtype = TY_F32;
      in[1] = &ir_source(g, OP_INPUT, &tx, "a", loc)->out[0];
      in[2] = &ir_source(g, OP_INPUT, &ty, "b", loc)->out[0];
    } else {
      in[0] = &ir_source(g, OP_INPUT, &tx, "x", loc)->out[0];
      in[1] = &ir_source(g, OP_INPUT, &ty, "y", loc)->out[0];
    }
    Node *n = ir_node_new(g, (OpKind)op, n_in, in, loc);
    if (op == OP_CLIP) ir_set_float(g, n, "min", -1), ir_set_float(g, n, "max", 1);
    if (op == OP_CAST) ir_set_dtype(g, n, "to", TY_F16);
    if (op == OP_FP_ROUND) ir_set_str(g, n, "format", "e4m3fn");
    if (op == OP_QUANTIZE || op == OP_DEQUANTIZE) ir_set_float(g, n, "scale", 0.5);
    ck_assert_msg(ir_fill_defaults(g, n, err, sizeof err) && ir_infer(n, err, sizeof err), "%s: %s",
                  ir_ops[op].name, err);
    ir_append(g, n);
    double out = 15 * ir_dtype_size(n->out[0].type.dtype);
    double read = 0;
    for (int i = 0; i < n_in; i++)
      read += (double)ir_type_numel(&in[i]->type) * ir_dtype_size(in[i]->type.dtype);
    IrCost c = ir_cost(n);
    ck_assert_msg(c.flops == 15.0 * per && c.bytes == read + out, "%s: %g FLOPs %g bytes", ir_ops[op].name,
                  c.flops, c.bytes);
  }
}
END_TEST

START_TEST(gelu_tanh_and_repeated_operands) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[4, 8]\n"
                     "  %0 = gelu %x {approximate=\"tanh\"} : f32[4, 8]\n"
                     "  %1 = mul %0, %0 : f32[4, 8]\n"
                     "  %k = const {value=2} : f32[]\n"
                     "  %2 = add %1, %k : f32[4, 8]\n"
                     "  return %2 as \"y\"\n"
                     "}\n",
                     -1);
  /* the cubic of the tanh form: 9 a element */
  ASSERT_COST(ir_cost(node_of(j.g, OP_GELU)), 9 * 32, 2 * 128);
  /* x * x reads x once */
  ASSERT_COST(ir_cost(node_of(j.g, OP_MUL)), 32, 2 * 128);
  /* a splat const is an immediate */
  ASSERT_COST(ir_cost(node_of(j.g, OP_ADD)), 32, 2 * 128);
}
END_TEST

/* ---- products ---- */

START_TEST(conv2d_with_stride_dilation_groups) {
  /* OH = (9 + 1 + 2 - 1 * 2 - 1) / 2 + 1 = 5, OW = (10 + 0 + 1 - 2 * 2 - 1) / 1 + 1 = 7 */
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : f32[1, 4, 9, 10]\n"
                        "  %w = param {name=\"w\"} : f32[6, 2, 3, 3]\n"
                        "  %b = param {name=\"b\"} : f32[6]\n"
                        "  %0 = conv2d %x, %w, %b"
                        " {stride=[2, 1], pad=[1, 0, 2, 1], dilation=[1, 2], groups=2}"
                        " : f32[1, 6, 5, 7]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_CONV2D);
  double N = 1, Ci = 4, H = 9, W = 10, Co = 6, g = 2, KH = 3, KW = 3, OH = 5, OW = 7;
  ASSERT_COST(c, 2 * N * Co * OH * OW * (Ci / g) * KH * KW + N * Co * OH * OW,
              4 * (N * Ci * H * W + Co * (Ci / g) * KH * KW + Co + N * Co * OH * OW));
}
END_TEST

START_TEST(conv3d_depthwise) {
  /* OD = (5 + 2 - 3) + 1 = 5, OH = OW = (6 + 2 - 3) / 2 + 1 = 3 */
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : f32[1, 4, 5, 6, 6]\n"
                        "  %w = param {name=\"w\"} : f32[4, 1, 3, 3, 3]\n"
                        "  %0 = conv3d %x, %w {stride=[1, 2, 2], pad=[1, 1, 1, 1, 1, 1], groups=4}"
                        " : f32[1, 4, 5, 3, 3]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_CONV3D);
  double out = 1 * 4 * 5 * 3 * 3;
  ASSERT_COST(c, 2 * out * 1 * 27, 4 * (4 * 5 * 36 + 4 * 27 + out));
}
END_TEST

START_TEST(transposed_convs_count_per_input) {
  /* OH = (3 - 1) * 2 + (2 - 1) + 1 = 6; every input element meets
   * Cout/groups * kH * kW weights */
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : f32[1, 4, 3, 3]\n"
                        "  %w = param {name=\"w\"} : f32[4, 3, 2, 2]\n"
                        "  %b = param {name=\"b\"} : f32[6]\n"
                        "  %0 = conv_transpose2d %x, %w, %b {stride=[2, 2], groups=2} : f32[1, 6, 6, 6]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_CONV_TRANSPOSE2D);
  double N = 1, Ci = 4, H = 3, W = 3, Cog = 3, KH = 2, KW = 2, Co = 6, OH = 6, OW = 6;
  ASSERT_COST(c, 2 * N * Ci * H * W * Cog * KH * KW + N * Co * OH * OW,
              4 * (N * Ci * H * W + Ci * Cog * KH * KW + Co + N * Co * OH * OW));
  c = op_cost_of("graph g {\n"
                 "  %x = input {name=\"x\"} : f32[1, 2, 2, 2, 2]\n"
                 "  %w = param {name=\"w\"} : f32[2, 2, 2, 2, 2]\n"
                 "  %0 = conv_transpose3d %x, %w : f32[1, 2, 3, 3, 3]\n"
                 "  return %0 as \"y\"\n"
                 "}\n",
                 OP_CONV_TRANSPOSE3D);
  ASSERT_COST(c, 2 * (2 * 8) * (2 * 8), 4 * (16 + 32 + 54));
}
END_TEST

START_TEST(matrix_products) {
  /* batch dims broadcast: [2, 1] against [5] -> [2, 5] */
  IrCost c = op_cost_of("graph g {\n"
                        "  %a = input {name=\"a\"} : f32[2, 1, 3, 4]\n"
                        "  %b = input {name=\"b\"} : f32[5, 4, 6]\n"
                        "  %0 = matmul %a, %b : f32[2, 5, 3, 6]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_MATMUL);
  double M = 3, N = 6, K = 4, batch = 10;
  ASSERT_COST(c, 2 * batch * M * N * K, 4 * (2 * M * K + 5 * K * N + batch * M * N));
  c = op_cost_of("graph g {\n"
                 "  %a = input {name=\"a\"} : f32[4]\n"
                 "  %b = input {name=\"b\"} : f32[4, 6]\n"
                 "  %0 = matmul %a, %b : f32[6]\n"
                 "  return %0 as \"y\"\n"
                 "}\n",
                 OP_MATMUL);
  ASSERT_COST(c, 2 * 6 * 4, 4 * (4 + 24 + 6));
  c = op_cost_of("graph g {\n"
                 "  %x = input {name=\"x\"} : f16[2, 3, 4]\n"
                 "  %w = param {name=\"w\"} : f16[5, 4]\n"
                 "  %b = param {name=\"b\"} : f16[5]\n"
                 "  %0 = linear %x, %w, %b : f16[2, 3, 5]\n"
                 "  return %0 as \"y\"\n"
                 "}\n",
                 OP_LINEAR);
  ASSERT_COST(c, 2 * 30 * 4 + 30, 2 * (24 + 20 + 5 + 30));
}
END_TEST

START_TEST(int8_products) {
  /* int8 operands a byte each, the int32 accumulator and bias 4 */
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : i8[1, 3, 6, 6]\n"
                        "  %w = param {name=\"w\"} : i8[4, 3, 3, 3]\n"
                        "  %b = param {name=\"b\"} : i32[4]\n"
                        "  %0 = conv2d %x, %w, %b {zero_point=3} : i32[1, 4, 4, 4]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_CONV2D);
  ASSERT_COST(c, 2 * 64 * 27 + 64, 108 + 108 + 4 * 4 + 4 * 64);
  c = op_cost_of("graph g {\n"
                 "  %a = input {name=\"a\"} : i8[3, 8]\n"
                 "  %b = param {name=\"b\"} : i8[8, 4]\n"
                 "  %0 = matmul %a, %b : i32[3, 4]\n"
                 "  return %0 as \"y\"\n"
                 "}\n",
                 OP_MATMUL);
  ASSERT_COST(c, 2 * 12 * 8, 24 + 32 + 4 * 12);
}
END_TEST

START_TEST(recurrent_layers) {
  /* LSTM, batch first (N 2, T 3, I 4), H 5, two bidirectional layers:
   * per layer, direction, timestep and row the two projections, the two
   * biases and 22 per hidden unit for the gates */
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[2, 3, 4]\n"
                     "  %a0 = param {name=\"a0\"} : f32[20, 4]\n"
                     "  %a1 = param {name=\"a1\"} : f32[20, 5]\n"
                     "  %a2 = param {name=\"a2\"} : f32[20]\n"
                     "  %a3 = param {name=\"a3\"} : f32[20]\n"
                     "  %b0 = param {name=\"b0\"} : f32[20, 4]\n"
                     "  %b1 = param {name=\"b1\"} : f32[20, 5]\n"
                     "  %b2 = param {name=\"b2\"} : f32[20]\n"
                     "  %b3 = param {name=\"b3\"} : f32[20]\n"
                     "  %c0 = param {name=\"c0\"} : f32[20, 10]\n"
                     "  %c1 = param {name=\"c1\"} : f32[20, 5]\n"
                     "  %c2 = param {name=\"c2\"} : f32[20]\n"
                     "  %c3 = param {name=\"c3\"} : f32[20]\n"
                     "  %d0 = param {name=\"d0\"} : f32[20, 10]\n"
                     "  %d1 = param {name=\"d1\"} : f32[20, 5]\n"
                     "  %d2 = param {name=\"d2\"} : f32[20]\n"
                     "  %d3 = param {name=\"d3\"} : f32[20]\n"
                     "  %y, %h, %c = lstm %x, %a0, %a1, %a2, %a3, %b0, %b1, %b2, %b3, %c0, %c1, %c2, %c3,"
                     " %d0, %d1, %d2, %d3 {hidden=5, layers=2, bidirectional=1}"
                     " : f32[2, 3, 10], f32[4, 2, 5], f32[4, 2, 5]\n"
                     "  return %y as \"y\"\n"
                     "}\n",
                     -1);
  double N = 2, T = 3, H = 5, G = 4, dirs = 2, flops = 0;
  double in[2] = {4, 10};
  for (int l = 0; l < 2; l++) flops += dirs * T * N * (2 * G * H * (in[l] + H) + 2 * G * H + 22 * H);
  double weights = 2 * (20 * 4 + 100 + 40) + 2 * (20 * 10 + 100 + 40);
  ASSERT_COST(ir_cost(node_of(j.g, OP_LSTM)), flops, 4 * (24 + weights + 60 + 40 + 40));
  /* GRU, sequence first (T 3, N 2), no bias: 17 per hidden unit */
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : f32[3, 2, 4]\n"
                        "  %wi = param {name=\"wi\"} : f32[15, 4]\n"
                        "  %wh = param {name=\"wh\"} : f32[15, 5]\n"
                        "  %y, %h = gru %x, %wi, %wh {hidden=5, batch_first=0, bias=0}"
                        " : f32[3, 2, 5], f32[1, 2, 5]\n"
                        "  return %y as \"y\"\n"
                        "}\n",
                        OP_GRU);
  ASSERT_COST(c, 3 * 2 * (2 * 15 * (4 + 5) + 17 * 5), 4 * (24 + 60 + 75 + 30 + 10));
}
END_TEST

/* ---- windows, reductions, normalizations ---- */

START_TEST(pooling_windows) {
  /* (7 + 2 - 3) / 2 + 1 = 4: a comparison per tap; avg adds and divides */
  const char *pool2d = "graph g {\n"
                       "  %x = input {name=\"x\"} : f32[1, 2, 7, 7]\n"
                       "  %0 = @ %x {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]} : f32[1, 2, 4, 4]\n"
                       "  return %0 as \"y\"\n"
                       "}\n";
  char text[512];
  ASSERT_COST(op_cost_of(with(text, sizeof text, pool2d, "maxpool2d"), OP_MAXPOOL2D), 32 * 9, 4 * (98 + 32));
  ASSERT_COST(op_cost_of(with(text, sizeof text, pool2d, "avgpool2d"), OP_AVGPOOL2D), 32 * 10, 4 * (98 + 32));
  const char *pool3d = "graph g {\n"
                       "  %x = input {name=\"x\"} : f32[1, 1, 4, 4, 4]\n"
                       "  %0 = @ %x {kernel=[2, 2, 2], stride=[2, 2, 2]} : f32[1, 1, 2, 2, 2]\n"
                       "  return %0 as \"y\"\n"
                       "}\n";
  ASSERT_COST(op_cost_of(with(text, sizeof text, pool3d, "maxpool3d"), OP_MAXPOOL3D), 8 * 8, 4 * (64 + 8));
  ASSERT_COST(op_cost_of(with(text, sizeof text, pool3d, "avgpool3d"), OP_AVGPOOL3D), 8 * 9, 4 * (64 + 8));
  ASSERT_COST(op_cost_of("graph g {\n"
                         "  %x = input {name=\"x\"} : f32[2, 3, 4, 5]\n"
                         "  %0 = global_avgpool %x : f32[2, 3, 1, 1]\n"
                         "  return %0 as \"y\"\n"
                         "}\n",
                         OP_GLOBAL_AVGPOOL),
              120 + 6, 4 * (120 + 6));
}
END_TEST

START_TEST(reductions_and_normalizations) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[3, 4, 5]\n"
                     "  %w = param {name=\"w\"} : f32[4, 5]\n"
                     "  %b = param {name=\"b\"} : f32[4, 5]\n"
                     "  %0 = reduce_sum %x {axes=[1]} : f32[3, 5]\n"
                     "  %1 = reduce_mean %x {axes=[0, 2], keepdims=1} : f32[1, 4, 1]\n"
                     "  %2 = argmax %x {axis=2} : i64[3, 4]\n"
                     "  %3 = softmax %x {axis=2} : f32[3, 4, 5]\n"
                     "  %4 = log_softmax %x {axis=1} : f32[3, 4, 5]\n"
                     "  %5 = layernorm %x, %w, %b {axis=1} : f32[3, 4, 5]\n"
                     "  return %0 as \"a\", %1 as \"b\", %2 as \"c\", %3 as \"d\", %4 as \"e\", %5 as \"f\"\n"
                     "}\n",
                     -1);
  double n = 60;
  ASSERT_COST(ir_cost(node_of(j.g, OP_REDUCE_SUM)), n, 4 * (n + 15));
  ASSERT_COST(ir_cost(node_of(j.g, OP_REDUCE_MEAN)), n + 4, 4 * (n + 4));
  ASSERT_COST(ir_cost(node_of(j.g, OP_ARGMAX)), n, 4 * n + 8 * 12);
  ASSERT_COST(ir_cost(node_of(j.g, OP_SOFTMAX)), 5 * n, 8 * n);
  /* 15 rows of 4: a log each */
  ASSERT_COST(ir_cost(node_of(j.g, OP_LOG_SOFTMAX)), 5 * n + 15, 8 * n);
  /* 3 rows of 20: 5 per element, 4 per row, weight and bias 1 each */
  ASSERT_COST(ir_cost(node_of(j.g, OP_LAYERNORM)), 5 * n + 4 * 3 + 2 * n, 4 * (n + 40 + n));
  IrCost c = op_cost_of("graph g {\n"
                        "  %x = input {name=\"x\"} : f32[2, 3, 4, 4]\n"
                        "  %w = param {name=\"w\"} : f32[3]\n"
                        "  %b = param {name=\"b\"} : f32[3]\n"
                        "  %m = param {name=\"m\"} : f32[3]\n"
                        "  %v = param {name=\"v\"} : f32[3]\n"
                        "  %0 = batchnorm %x, %w, %b, %m, %v : f32[2, 3, 4, 4]\n"
                        "  return %0 as \"y\"\n"
                        "}\n",
                        OP_BATCHNORM);
  ASSERT_COST(c, 4 * 96 + 2 * 3, 4 * (96 + 12 + 96));
}
END_TEST

START_TEST(resize_and_grid_sample) {
  const char *resize = "graph g {\n"
                       "  %x = input {name=\"x\"} : f32[1, 2, 3, 4]\n"
                       "  %0 = resize %x {size=[6, 8], mode=\"@\"} : f32[1, 2, 6, 8]\n"
                       "  return %0 as \"y\"\n"
                       "}\n";
  char text[512];
  ASSERT_COST(op_cost_of(with(text, sizeof text, resize, "nearest"), OP_RESIZE), 0, 4 * (24 + 96));
  ASSERT_COST(op_cost_of(with(text, sizeof text, resize, "bilinear"), OP_RESIZE), 8 * 96, 4 * (24 + 96));
  const char *grid = "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[1, 2, 4, 4]\n"
                     "  %g = input {name=\"g\"} : f32[1, 3, 5, 2]\n"
                     "  %0 = grid_sample %x, %g {mode=\"@\"} : f32[1, 2, 3, 5]\n"
                     "  return %0 as \"y\"\n"
                     "}\n";
  double bytes = 4 * (32 + 30 + 30);
  ASSERT_COST(op_cost_of(with(text, sizeof text, grid, "nearest"), OP_GRID_SAMPLE), 4 * 15, bytes);
  ASSERT_COST(op_cost_of(with(text, sizeof text, grid, "bilinear"), OP_GRID_SAMPLE),
              2 * 4 * 30 + 4 * 15, bytes);
  ASSERT_COST(op_cost_of(with(text, sizeof text, grid, "bicubic"), OP_GRID_SAMPLE),
              2 * 16 * 30 + 4 * 15, bytes);
}
END_TEST

/* ---- data movement ---- */

START_TEST(moves_read_what_they_pick) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[4, 6]\n"
                     "  %y = input {name=\"y\"} : f32[4, 2]\n"
                     "  %t = param {name=\"t\"} : f32[10, 8]\n"
                     "  %i = input {name=\"i\"} : i32[3]\n"
                     "  %e = input {name=\"e\"} : i64[2, 6]\n"
                     "  %q = input {name=\"q\"} : i64[3, 1]\n"
                     "  %0 = reshape %x {shape=[3, 8]} : f32[3, 8]\n"
                     "  %1 = transpose %x {perm=[1, 0]} : f32[6, 4]\n"
                     "  %2 = slice %x {starts=[1, 0], ends=[3, 6], steps=[1, 2]} : f32[2, 3]\n"
                     "  %3 = gather %t, %i : f32[3, 8]\n"
                     "  %4 = gather_elements %x, %e : f32[2, 6]\n"
                     "  %5 = gather_nd %t, %q : f32[3, 8]\n"
                     "  %6 = concat %x, %y {axis=1} : f32[4, 8]\n"
                     "  %7 = pad %x {pads=[1, 0, 1, 2]} : f32[6, 8]\n"
                     "  %8 = expand %y {shape=[3, 4, 2]} : f32[3, 4, 2]\n"
                     "  return %0 as \"a\", %1 as \"b\", %2 as \"c\", %3 as \"d\", %4 as \"e\", %5 as \"f\","
                     " %6 as \"g\", %7 as \"h\", %8 as \"i\"\n"
                     "}\n",
                     -1);
  ASSERT_COST(ir_cost(node_of(j.g, OP_RESHAPE)), 0, 0);
  ASSERT_COST(ir_cost(node_of(j.g, OP_TRANSPOSE)), 0, 4 * 48);
  /* 6 of x's 24 elements */
  ASSERT_COST(ir_cost(node_of(j.g, OP_SLICE)), 0, 4 * 12);
  /* 3 rows of the table, the indices, the result */
  ASSERT_COST(ir_cost(node_of(j.g, OP_GATHER)), 0, 4 * 24 + 4 * 3 + 4 * 24);
  ASSERT_COST(ir_cost(node_of(j.g, OP_GATHER_ELEMENTS)), 0, 4 * 12 + 8 * 12 + 4 * 12);
  ASSERT_COST(ir_cost(node_of(j.g, OP_GATHER_ND)), 0, 4 * 24 + 8 * 3 + 4 * 24);
  ASSERT_COST(ir_cost(node_of(j.g, OP_CONCAT)), 0, 4 * (24 + 8 + 32));
  ASSERT_COST(ir_cost(node_of(j.g, OP_PAD)), 0, 4 * (24 + 48));
  ASSERT_COST(ir_cost(node_of(j.g, OP_EXPAND)), 0, 4 * (8 + 24));
}
END_TEST

START_TEST(scatters_and_topk) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %d = input {name=\"d\"} : f32[4, 5]\n"
                     "  %i = input {name=\"i\"} : i64[2, 5]\n"
                     "  %u = input {name=\"u\"} : f32[2, 5]\n"
                     "  %q = input {name=\"q\"} : i64[2, 1]\n"
                     "  %x = input {name=\"x\"} : f32[3, 10]\n"
                     "  %0 = scatter_elements %d, %i, %u {reduction=\"add\"} : f32[4, 5]\n"
                     "  %1 = scatter_nd %d, %q, %u : f32[4, 5]\n"
                     "  %v, %k = topk %x {k=4, axis=1} : f32[3, 4], i64[3, 4]\n"
                     "  return %0 as \"a\", %1 as \"b\", %v as \"v\", %k as \"k\"\n"
                     "}\n",
                     -1);
  ASSERT_COST(ir_cost(node_of(j.g, OP_SCATTER_ELEMENTS)), 10, 4 * 20 + 8 * 10 + 4 * 10 + 4 * 20);
  ASSERT_COST(ir_cost(node_of(j.g, OP_SCATTER_ND)), 0, 4 * 20 + 8 * 2 + 4 * 10 + 4 * 20);
  /* each of a row's 10 elements against a heap of 4: ceil(log2 5) = 3 */
  ASSERT_COST(ir_cost(node_of(j.g, OP_TOPK)), 30 * 3, 4 * 30 + 4 * 12 + 8 * 12);
}
END_TEST

/* ---- fused groups ---- */

/* One kernel from x, y to the result: the add's and relu's results are
 * never stored, so they cost nothing, and x is read once for two
 * members. */
START_TEST(fused_group_moves_no_intermediate) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[4, 8]\n"
                     "  %y = input {name=\"y\"} : f32[8]\n"
                     "  %0 = add %x, %y : f32[4, 8] #k0\n"
                     "  %1 = relu %0 : f32[4, 8] #k0\n"
                     "  %2 = mul %1, %x : f32[4, 8] #k0\n"
                     "  return %2 as \"out\"\n"
                     "}\n",
                     -1);
  const Node *members[3] = {node_of(j.g, OP_ADD), node_of(j.g, OP_RELU), node_of(j.g, OP_MUL)};
  ASSERT_COST(ir_cost_fused(members, 3), 3 * 32, 4 * (32 + 8 + 32));
  double apart = 0;
  for (int i = 0; i < 3; i++) apart += ir_cost(members[i]).bytes;
  ck_assert_double_eq(apart, 4 * (32 + 8 + 32) + 4 * (32 + 32) + 4 * (32 + 32 + 32));
  CgResult r;
  ck_assert(cg_compile(j.g, &r));
  ck_assert_uint_eq(r.plan->n_steps, 1);
  ASSERT_COST(r.step_costs[0], 3 * 32, 4 * (32 + 8 + 32));
}
END_TEST

/* A convolution with its bias add and relu fused by -O2: one launch,
 * reading x, the weights and the bias once and writing the result. */
START_TEST(fused_conv_step_reads_its_operands_once) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[1, 3, 8, 8]\n"
                     "  %w = param {name=\"w\"} : f32[4, 3, 3, 3]\n"
                     "  %b = param {name=\"b\"} : f32[4, 1, 1]\n"
                     "  %0 = conv2d %x, %w {pad=[1, 1, 1, 1]} : f32[1, 4, 8, 8]\n"
                     "  %1 = add %0, %b : f32[1, 4, 8, 8]\n"
                     "  %2 = relu %1 : f32[1, 4, 8, 8]\n"
                     "  return %2 as \"y\"\n"
                     "}\n",
                     2);
  ck_assert_uint_eq(j.cg.plan->n_steps, 1);
  double out = 256;
  ASSERT_COST(j.cg.step_costs[j.cg.plan->n_init_steps], 2 * out * 27 + 2 * out,
              4 * (192 + 108 + 4 + out));
}
END_TEST

/* Attention as one kernel after the query projection's GEMM: the
 * scores [2, 5, 5] never reach memory; the kernel reads the projection,
 * its bias, K and V and writes the result. */
START_TEST(attention_group_moves_no_scores) {
  Job j = compile_at(&ctx,
                     "graph attn {\n"
                     "  %x = input {name=\"x\"} : f32[2, 5, 8]\n"
                     "  %w = param {name=\"q.weight\"} : f32[8, 8]\n"
                     "  %b = param {name=\"q.bias\"} : f32[8]\n"
                     "  %k = input {name=\"k\"} : f32[2, 8, 5]\n"
                     "  %v = input {name=\"v\"} : f32[2, 5, 8]\n"
                     "  %0 = linear %x, %w, %b : f32[2, 5, 8]\n"
                     "  %1 = matmul %0, %k : f32[2, 5, 5]\n"
                     "  %s = const {value=0.25} : f32[]\n"
                     "  %2 = mul %1, %s : f32[2, 5, 5]\n"
                     "  %3 = softmax %2 {axis=2} : f32[2, 5, 5]\n"
                     "  %4 = matmul %3, %v : f32[2, 5, 8]\n"
                     "  return %4 as \"out\"\n"
                     "}\n",
                     2);
  const RtPlan *p = j.cg.plan;
  ck_assert_uint_eq(p->n_steps, 2);
  ck_assert_uint_eq(p->steps[0].kind, RT_STEP_GEMM);
  const IrCost *c = j.cg.step_costs + p->n_init_steps;
  double rows = 10, d = 8, scores = 2 * 5 * 5;
  double proj = 2 * rows * d * d, qk = 2 * scores * d, av = 2 * 2 * 5 * d * 5;
  ASSERT_COST(c[0], proj, 4 * (rows * d + d * d + rows * d));
  ASSERT_COST(c[1], rows * d + qk + scores + 5 * scores + av, 4 * (4 * rows * d + d));
  /* The whole group at the IR: x, the weights, K and V in, the result
   * out. */
  int grp = node_of(j.g, OP_SOFTMAX)->group, n = 0;
  ck_assert_int_ge(grp, 0);
  const Node *members[8];
  for (Node *m = j.g->first; m; m = m->next)
    if (m->group == grp && n < 8) members[n++] = m;
  ck_assert_int_eq(n, 5);
  ASSERT_COST(ir_cost_fused(members, n), c[0].flops + c[1].flops, 4 * (rows * d + d * d + d + 3 * rows * d));
}
END_TEST

/* ---- plan steps ---- */

static const char linear_text[] = "graph printed {\n"
                                  "  %x = input {name=\"x\"} : f32[2, 4]\n"
                                  "  %w = param {name=\"fc.weight\"} : f32[3, 4]\n"
                                  "  %b = param {name=\"fc.bias\"} : f32[3]\n"
                                  "  %0 = linear %x, %w, %b : f32[2, 3]\n"
                                  "  %1 = relu %0 : f32[2, 3]\n"
                                  "  return %1 as \"y\"\n"
                                  "}\n";

/* Unfused: the GEMM adds the bias in its epilogue, so its one step costs
 * the whole linear (2mnk and the bias; x, W, b read, y written); the relu
 * launch reads y and writes its result. */
START_TEST(gemm_and_bias_steps) {
  Job j = compile_at(&ctx, linear_text, 0);
  ck_assert_uint_eq(j.cg.plan->n_steps, 2);
  ck_assert_uint_eq(j.cg.plan->steps[0].gemm.epilogue, RT_EPILOGUE_BIAS);
  ASSERT_COST(j.cg.step_costs[0], 2 * 2 * 3 * 4 + 6, 4 * (8 + 12 + 3 + 6));
  ASSERT_COST(j.cg.step_costs[1], 6, 4 * (6 + 6));
}
END_TEST

/* -O0 lowers a conv to im2col, a GEMM and the bias: the columns are
 * written and read, im2col computes nothing, the bias launch adds. */
START_TEST(im2col_conv_steps) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[1, 2, 5, 5]\n"
                     "  %w = param {name=\"w\"} : f32[3, 2, 3, 3]\n"
                     "  %b = param {name=\"b\"} : f32[3]\n"
                     "  %0 = conv2d %x, %w, %b {pad=[1, 1, 1, 1]} : f32[1, 3, 5, 5]\n"
                     "  return %0 as \"y\"\n"
                     "}\n",
                     0);
  const RtPlan *p = j.cg.plan;
  ck_assert_uint_eq(p->n_steps, 3);
  ck_assert_uint_eq(p->steps[1].kind, RT_STEP_GEMM);
  double cols = 18 * 25;
  ASSERT_COST(j.cg.step_costs[0], 0, 4 * (50 + cols));
  ASSERT_COST(j.cg.step_costs[1], 2 * 3 * 25 * 18, 4 * (54 + cols + 75));
  ASSERT_COST(j.cg.step_costs[2], 75, 4 * (3 + 75 + 75));
}
END_TEST

/* Copies move their bytes twice (read and write); a fill writes. */
START_TEST(copy_and_fill_steps) {
  Job j = compile_at(&ctx,
                     "graph g {\n"
                     "  %x = input {name=\"x\"} : f32[3, 5]\n"
                     "  %k = const {value=1} : f16[2, 8]\n"
                     "  return %x as \"a\", %k as \"b\"\n"
                     "}\n",
                     0);
  const RtPlan *p = j.cg.plan;
  ck_assert_uint_eq(p->n_steps, 2);
  for (uint32_t s = 0; s < 2; s++) {
    if (p->steps[s].kind == RT_STEP_COPY)
      ASSERT_COST(j.cg.step_costs[s], 0, 2 * 60);
    else
      ASSERT_COST(j.cg.step_costs[s], 0, 2 * 16);
  }
}
END_TEST

static IrCost plan_total(const CgResult *r) {
  IrCost t = {0, 0};
  for (uint32_t s = 0; s < r->plan->n_init_steps + r->plan->n_steps; s++)
    t.flops += r->step_costs[s].flops, t.bytes += r->step_costs[s].bytes;
  return t;
}

static double graph_flops(Graph *g) {
  double f = 0;
  for (Node *n = g->first; n; n = n->next) f += ir_cost(n).flops;
  return f;
}

/* A recurrent layer with --no-persistent-rnn is many steps: the input
 * projection's GEMM, then a step kernel per timestep that gets the rest (the recurrent product,
 * the biases, the gates); all of them add up to the node's. */
static const char RECURRENT_LAYER[] =
    "graph g {\n"
    "  %x = input {name=\"x\"} : f32[2, 3, 4]\n"
    "  %wi = param {name=\"wi\"} : f32[32, 4]\n"
    "  %wh = param {name=\"wh\"} : f32[32, 8]\n"
    "  %bi = param {name=\"bi\"} : f32[32]\n"
    "  %bh = param {name=\"bh\"} : f32[32]\n"
    "  %y, %h, %c = lstm %x, %wi, %wh, %bi, %bh {hidden=8}"
    " : f32[2, 3, 8], f32[1, 2, 8], f32[1, 2, 8]\n"
    "  return %y as \"y\", %h as \"h\", %c as \"c\"\n"
    "}\n";

START_TEST(recurrent_steps_add_up) {
  Job j = compile_opts(&ctx, RECURRENT_LAYER, 0, (CgOptions){.no_persistent_rnn = true});
  const RtPlan *p = j.cg.plan;
  double N = 2, H = 8, G = 4;
  int cells = 0;
  for (uint32_t s = 0; s < p->n_steps; s++) {
    const RtStep *st = &p->steps[s];
    if (st->kind != RT_STEP_LAUNCH || !strstr(p->kernels[st->launch.kernel].name, "_step_")) continue;
    cells++;
    /* this timestep's rows of the projection (read by lane 0 alone),
     * W_hh, both biases and h_{t-1} read; h_t, h_n and y written; c
     * read and written */
    ASSERT_COST(j.cg.step_costs[s], N * H * (2 * G * H + 2 * G + 22),
                4 * (N * G * H + G * H * H + 2 * G * H + N * H + 3 * N * H + 2 * N * H));
  }
  ck_assert_int_eq(cells, 3);
  ck_assert_double_eq(plan_total(&j.cg).flops, ir_cost(node_of(j.g, OP_LSTM)).flops);
}
END_TEST

/* The same layer as one persistent kernel: the FLOPs of every timestep;
 * the sequence's projection rows and y, W_hh, both biases, the state
 * pair, h_n, c and the grid barrier's words, each counted once. */
START_TEST(recurrent_persistent_adds_up) {
  Job j = compile_at(&ctx, RECURRENT_LAYER, 0);
  const RtPlan *p = j.cg.plan;
  double N = 2, H = 8, G = 4, T = 3;
  int kernels = 0;
  for (uint32_t s = 0; s < p->n_steps; s++) {
    const RtStep *st = &p->steps[s];
    if (st->kind != RT_STEP_LAUNCH || !strstr(p->kernels[st->launch.kernel].name, "_persist_")) continue;
    kernels++;
    /* projection rows, W_hh, biases; the pair read and written; y,
     * h_n; c read and written; the barrier's two i32 words */
    ASSERT_COST(j.cg.step_costs[s], T * N * H * (2 * G * H + 2 * G + 22),
                4 * (T * N * G * H + G * H * H + 2 * G * H + 2 * 2 * N * H + T * N * H + N * H + 2 * N * H) + 8);
  }
  ck_assert_int_eq(kernels, 1);
  ck_assert_double_eq(plan_total(&j.cg).flops, ir_cost(node_of(j.g, OP_LSTM)).flops);
}
END_TEST

/* ---- whole models ---- */

/* An example by file name, or a random graph (tests/randgraph.c) by
 * seed, through the -O`level` pipeline and codegen.  ok is false when
 * codegen refused the graph (reported in the context). */
typedef struct ModelJob {
  const char *name;
  uint64_t seed;
  int level;
  bool no_split_k;
  Graph *g;
  CgResult r;
  bool ok;
} ModelJob;

static int model_job(Ctx *c, void *data) {
  ModelJob *j = data;
  if (j->name) {
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", top ? top : ".", j->name);
    const SrcFile *f = ctx_load_file(c, path);
    Program *p = f ? fe_parse(c, f) : NULL;
    LowerOptions lo = {0};
    j->g = p ? fe_lower(c, p, &lo) : NULL;
  } else {
    j->g = rg_build(c, j->seed, 30);
  }
  if (!j->g || !ir_verify(j->g)) return 1;
  PassOptions po = {.opt_level = j->level};
  if (!pass_run_pipeline(j->g, &po, NULL)) return 1;
  j->ok = cg_compile_opts(j->g, &(CgOptions){.no_split_k = j->no_split_k}, &j->r);
  return 0;
}

static ModelJob model(const char *name, int level) {
  ModelJob j = {.name = name, .level = level};
  ck_assert_msg(ctx_guard(&ctx, model_job, &j) == 0 && j.ok, "%s: %s", name, diag_text(&ctx));
  return j;
}

static double product_flops(Graph *g) {
  double f = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_CONV2D || n->op == OP_LINEAR) f += ir_cost(n).flops;
  return f;
}

/* torchvision's model cards: ResNet-18 1.81 and ResNet-50 4.09 GFLOPS
 * at 224x224, counted as multiply-adds (fvcore: 1,814,073,344 and
 * 4,089,184,256 for the convolutions and the classifier).  At -O0 the
 * convolutions have no bias; the classifier's 1000 bias adds are the
 * only difference. */
START_TEST(resnets_against_published_counts) {
  ModelJob r18 = model("resnet18.dl", 0);
  ck_assert_double_eq(product_flops(r18.g), 2 * 1814073344.0 + 1000);
  ModelJob r50 = model("resnet50.dl", 0);
  ck_assert_double_eq(product_flops(r50.g), 2 * 4089184256.0 + 1000);
  /* Fusion keeps activations out of memory: -O2 moves fewer bytes.
   * Without split-K, which at batch 1 trades bytes (each slice's f32
   * partial sums, written and read back) for blocks on every SM. */
  ModelJob r50o2 = {.name = "resnet50.dl", .level = 2, .no_split_k = true};
  ck_assert_msg(ctx_guard(&ctx, model_job, &r50o2) == 0 && r50o2.ok, "resnet50: %s", diag_text(&ctx));
  ck_assert_double_lt(plan_total(&r50o2.r).bytes, plan_total(&r50.r).bytes);
}
END_TEST

/* Every example, unfused and fused: its plan's steps (init and run) add
 * up to its nodes' FLOPs, however they were split into steps. */
START_TEST(plans_add_up_to_their_nodes) {
  static const char *const names[] = {"mlp.dl",       "lenet.dl",      "resnet18.dl", "mobilenetv2.dl",
                                      "lstm.dl",      "transformer.dl"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++)
    for (int level = 0; level <= 2; level += 2) {
      ModelJob m = model(names[i], level);
      double want = graph_flops(m.g), got = plan_total(&m.r).flops;
      ck_assert_msg(fabs(got - want) <= 1e-9 * want, "%s -O%d: plan %.17g FLOPs, nodes %.17g", names[i],
                    level, got, want);
    }
}
END_TEST

/* The last node of its fusion group. */
static bool is_root(const Node *n) {
  for (const Node *x = n->next; x; x = x->next)
    if (x->group == n->group) return false;
  return true;
}

/* Random graphs at -O2 (elementwise chains, reductions, moves, casts,
 * linear, conv2d with batchnorm): every step costs a finite, non-negative
 * amount and moves bytes, the steps add up to the nodes' FLOPs, and no
 * fusion group moves more than its members would apart. */
START_TEST(random_plans_add_up) {
  int compiled = 0, groups = 0;
  for (uint64_t seed = 1; seed <= 40; seed++) {
    Ctx c;
    ctx_init(&c);
    ModelJob m = {.seed = seed, .level = 2};
    ck_assert_msg(ctx_guard(&c, model_job, &m) == 0, "seed %d: %s", (int)seed, diag_text(&c));
    if (!m.ok) {
      /* an op codegen refuses (an integer cast it lacks) */
      ck_assert_msg(strstr(diag_text(&c), "does not support"), "seed %d: %s", (int)seed, diag_text(&c));
      ctx_free(&c);
      continue;
    }
    compiled++;
    const RtPlan *p = m.r.plan;
    for (uint32_t s = 0; s < p->n_init_steps + p->n_steps; s++) {
      IrCost sc = m.r.step_costs[s];
      ck_assert_msg(isfinite(sc.flops) && sc.flops >= 0 && isfinite(sc.bytes) && sc.bytes > 0,
                    "seed %d step %u: %g FLOPs %g bytes", (int)seed, s, sc.flops, sc.bytes);
    }
    double want = graph_flops(m.g), got = plan_total(&m.r).flops;
    ck_assert_msg(fabs(got - want) <= 1e-9 * want, "seed %d: plan %.17g FLOPs, nodes %.17g", (int)seed,
                  got, want);
    for (Node *root = m.g->first; root; root = root->next) {
      if (root->group < 0 || !is_root(root)) continue;
      const Node *members[64];
      int n = 0;
      double apart = 0;
      for (Node *x = m.g->first; x; x = x->next)
        if (x->group == root->group && n < 64) members[n++] = x, apart += ir_cost(x).bytes;
      ck_assert_double_le(ir_cost_fused(members, n).bytes, apart);
      groups++;
    }
    ctx_free(&c);
  }
  ck_assert_int_ge(compiled, 20);
  ck_assert_int_ge(groups, 20);
}
END_TEST

/* ---- printing ---- */

typedef enum { PRINT_COST, PRINT_PLAN, PRINT_STATS } Printer;

/* What a printer writes (malloc'd): c, or r's plan with costs, or r's
 * --stats lines. */
static char *printed(Printer what, IrCost c, const CgResult *r) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (what == PRINT_COST) cg_print_cost(f, c);
  if (what == PRINT_PLAN) cg_print_plan_costs(f, r->plan, r->step_costs);
  if (what == PRINT_STATS) cg_print_cost_stats(f, r, 5);
  fclose(f);
  return text;
}

START_TEST(cost_text) {
  static const struct {
    IrCost c;
    const char *text;
  } cases[] = {
      {{0, 0}, "0 FLOP 0 B"},
      {{999, 1000}, "999 FLOP 1.0 kB"},
      {{2.1e9, 12.34e6}, "2.1 GFLOP 12.3 MB"},
      {{999960, 1.5e12}, "1.0 MFLOP 1.5 TB"},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    char *t = printed(PRINT_COST, cases[i].c, NULL);
    ck_assert_str_eq(t, cases[i].text);
    free(t);
  }
}
END_TEST

START_TEST(plan_and_stats_text) {
  Job j = compile_at(&ctx, linear_text, 0);
  IrCost none = {0, 0};
  char *text = printed(PRINT_PLAN, none, &j.cg);
  ck_assert_msg(strstr(text, "  ; linear %3  [54 FLOP 116 B]\n") && strstr(text, "  ; relu %4  [6 FLOP 48 B]\n"),
                "%s", text);
  free(text);
  text = printed(PRINT_STATS, none, &j.cg);
  ck_assert_str_eq(text,
                   "        60 cost: FLOPs per run\n"
                   "       164 cost: minimum bytes per run"
                   " (each step's operands read once, results written once)\n"
                   "     0.366 cost: FLOPs per byte per run (arithmetic intensity)\n"
                   "         0 cost: FLOPs at init (once per change of the weights)\n"
                   "         0 cost: minimum bytes at init\n"
                   "         0 cost: top step 1: 54 FLOP 116 B, 0.5 FLOP/B,"
                   " 90.0% of the run's FLOPs (linear %3)\n"
                   "         1 cost: top step 2: 6 FLOP 48 B, 0.1 FLOP/B,"
                   " 10.0% of the run's FLOPs (relu %4)\n");
  free(text);
}
END_TEST

static Suite *cost_suite(void) {
  Suite *s = suite_create("cost");
  TCase *t = tcase_create("ops");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, every_op_has_a_rule);
  tcase_add_test(t, elementwise_ops_count_per_element);
  tcase_add_test(t, gelu_tanh_and_repeated_operands);
  tcase_add_test(t, conv2d_with_stride_dilation_groups);
  tcase_add_test(t, conv3d_depthwise);
  tcase_add_test(t, transposed_convs_count_per_input);
  tcase_add_test(t, matrix_products);
  tcase_add_test(t, int8_products);
  tcase_add_test(t, recurrent_layers);
  tcase_add_test(t, pooling_windows);
  tcase_add_test(t, reductions_and_normalizations);
  tcase_add_test(t, resize_and_grid_sample);
  tcase_add_test(t, moves_read_what_they_pick);
  tcase_add_test(t, scatters_and_topk);
  suite_add_tcase(s, t);
  t = tcase_create("plans");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 60);
  tcase_add_test(t, fused_group_moves_no_intermediate);
  tcase_add_test(t, fused_conv_step_reads_its_operands_once);
  tcase_add_test(t, attention_group_moves_no_scores);
  tcase_add_test(t, gemm_and_bias_steps);
  tcase_add_test(t, im2col_conv_steps);
  tcase_add_test(t, copy_and_fill_steps);
  tcase_add_test(t, recurrent_steps_add_up);
  tcase_add_test(t, recurrent_persistent_adds_up);
  tcase_add_test(t, resnets_against_published_counts);
  tcase_add_test(t, plans_add_up_to_their_nodes);
  tcase_add_test(t, random_plans_add_up);
  tcase_add_test(t, cost_text);
  tcase_add_test(t, plan_and_stats_text);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(cost_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
