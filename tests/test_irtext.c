/* Tests of the IR text printer and parser (exact text, round trips,
 * located errors, fuzzed input), the DOT writer and the verifier. */
#include "check_quiet.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static Ctx C;
static const SrcLoc NOLOC = {0};

static void setup(void) { ctx_init(&C); }
static void teardown(void) { ctx_free(&C); }

#define N_OF(T, ...) ((int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define TY(dt, ...) ir_type_make(dt, N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__})
#define INTS(...) N_OF(int64_t, __VA_ARGS__), (int64_t[]){__VA_ARGS__}
#define NODE(g, op, ...) ir_node_new(g, op, N_OF(Value *, __VA_ARGS__), (Value *[]){__VA_ARGS__}, NOLOC)

static TensorType scalar(DType dt) { return ir_type_make(dt, 0, NULL); }

static Value *input(Graph *g, const char *name, TensorType t) {
  return &ir_source(g, OP_INPUT, &t, name, NOLOC)->out[0];
}

static Value *param(Graph *g, const char *name, TensorType t) {
  return &ir_source(g, OP_PARAM, &t, name, NOLOC)->out[0];
}

/* Fills defaults, infers, appends: a node built as the frontend would. */
static Node *add(Graph *g, Node *n) {
  char err[256] = "";
  ck_assert_msg(ir_fill_defaults(g, n, err, sizeof err), "%s", err);
  ck_assert_msg(ir_infer(n, err, sizeof err), "%s: %s", ir_ops[n->op].name, err);
  ir_append(g, n);
  return n;
}

static Value *op1(Graph *g, OpKind op, Value *x) { return &add(g, NODE(g, op, x))->out[0]; }

static void outputs(Graph *g, int n, Value **v, const char **names) { ir_set_outputs(g, n, v, names); }

/* The printed text, in the arena. */
static const char *print_str(Graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(m);
  ir_print(m, g);
  fclose(m);
  char *s = arena_strdup(&g->ctx->arena, buf);
  free(buf);
  return s;
}

static const char *dot_opts_str(Graph *g, const IrDotOptions *o) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(m);
  ir_print_dot_opts(m, g, o);
  fclose(m);
  char *s = arena_strdup(&g->ctx->arena, buf);
  free(buf);
  return s;
}

static const char *dot_str(Graph *g) { return dot_opts_str(g, &(IrDotOptions){.depth = -1}); }

static Graph *parse_str(Ctx *c, const char *text) {
  return ir_parse(c, ctx_add_file(c, "t.ir", text, strlen(text)));
}

/* Parses text that must be valid, and checks it prints as `expected`
 * and that the printed text is a fixed point. */
static Graph *parse_ok(const char *text) {
  Graph *g = parse_str(&C, text);
  ck_assert_msg(g != NULL, "parse failed:\n%s", diag_text(&C));
  ck_assert_msg(ir_verify(g), "verify failed:\n%s", diag_text(&C));
  return g;
}

static void assert_round_trip(Graph *g) {
  const char *first = print_str(g);
  Graph *again = parse_str(g->ctx, first);
  ck_assert_msg(again != NULL, "reparse failed:\n%s\n%s", diag_text(g->ctx), first);
  ck_assert_msg(ir_verify(again), "reverify failed:\n%s", diag_text(g->ctx));
  ck_assert_str_eq(print_str(again), first);
}

/* ---- printing ---- */

static Graph *build_mlp(Ctx *c) {
  Graph *g = ir_graph_new(c, "mlp");
  const SrcFile *f = ctx_add_file(c, "mlp.dl", NULL, 0);
  Value *x = input(g, "x", TY(TY_F32, 8, 784));
  g->last->loc = (SrcLoc){f, 2, 11};
  Value *w = param(g, "fc1.weight", TY(TY_F32, 512, 784));
  ir_set_str(g, g->last, "init", "uniform(0.0357)");
  g->last->loc = (SrcLoc){f, 3, 16};
  Value *b = param(g, "fc1.bias", TY(TY_F32, 512));
  ir_set_str(g, g->last, "init", "uniform(0.0357)");
  g->last->loc = (SrcLoc){f, 3, 16};
  Node *lin = NODE(g, OP_LINEAR, x, w, b);
  lin->loc = (SrcLoc){f, 3, 16};
  Value *h = &add(g, lin)->out[0];
  Value *r = op1(g, OP_RELU, h);
  Value *half = &ir_const(g, 0.5, TY_F32, NOLOC)->out[0];
  Value *y = &add(g, NODE(g, OP_MUL, r, half))->out[0];
  outputs(g, 2, (Value *[]){y, h}, (const char *[]){"output", "h"});
  return g;
}

static const char MLP_TEXT[] =
    "; dlcc IR\n"
    "graph mlp {\n"
    "  %0 = input {name=\"x\"} : f32[8, 784]                           ; mlp.dl:2:11\n"
    "  %1 = param {name=\"fc1.weight\", init=\"uniform(0.0357)\"} : f32[512, 784]  ; mlp.dl:3:16\n"
    "  %2 = param {name=\"fc1.bias\", init=\"uniform(0.0357)\"} : f32[512]  ; mlp.dl:3:16\n"
    "  %3 = linear %0, %1, %2 : f32[8, 512]                          ; mlp.dl:3:16\n"
    "  %4 = relu %3 : f32[8, 512]\n"
    "  %5 = const {value=0.5} : f32[]\n"
    "  %6 = mul %4, %5 : f32[8, 512]\n"
    "  return %6 as \"output\", %3 as \"h\"\n"
    "}\n";

START_TEST(print_exact_text) {
  Graph *g = build_mlp(&C);
  ck_assert(ir_verify(g));
  ck_assert_str_eq(print_str(g), MLP_TEXT);
}
END_TEST

START_TEST(print_loc_comment_at_column_64) {
  Graph *g = build_mlp(&C);
  const char *text = print_str(g);
  const char *line = strstr(text, "  %0 = input");
  ck_assert_ptr_nonnull(line);
  ck_assert_int_eq((int)(strchr(line, ';') - line), 64);
  /* A line too long for the column keeps two spaces before the comment. */
  line = strstr(text, "  %1 = param");
  ck_assert_ptr_nonnull(strstr(line, "f32[512, 784]  ; mlp.dl:3:16\n"));
}
END_TEST

START_TEST(print_quotes_graph_name_unless_identifier) {
  Graph *g = ir_graph_new(&C, "my \"net\" v2");
  Value *x = input(g, "x", TY(TY_F32, 2));
  outputs(g, 1, &x, (const char *[]){"a \"quoted\\\" name"});
  const char *text = print_str(g);
  ck_assert_ptr_nonnull(strstr(text, "graph \"my \\\"net\\\" v2\" {\n"));
  ck_assert_ptr_nonnull(strstr(text, "return %0 as \"a \\\"quoted\\\\\\\" name\"\n"));
  Graph *back = parse_str(&C, text);
  ck_assert_ptr_nonnull(back);
  ck_assert_str_eq(back->name, "my \"net\" v2");
  ck_assert_str_eq(back->output_names[0], "a \"quoted\\\" name");
  ck_assert_str_eq(print_str(back), text);

  Graph *plain = ir_graph_new(&C, "_net2");
  x = input(plain, "x", TY(TY_F32, 2));
  outputs(plain, 1, &x, (const char *[]){"y"});
  ck_assert_ptr_nonnull(strstr(print_str(plain), "graph _net2 {\n"));
}
END_TEST

/* A graph with every op of ops.def and attributes of every kind. */
static Graph *build_every_op(Ctx *c, bool *covered) {
  Graph *g = ir_graph_new(c, "every_op");
  const SrcFile *f = ctx_add_file(c, "all.dl", NULL, 0);
  Value *x = input(g, "x", TY(TY_F32, 2, 3));
  g->last->loc = (SrcLoc){f, 1, 1};
  Value *row = param(g, "row", TY(TY_F32, 3));
  ir_set_str(g, g->last, "init", "fill(-0.5)");
  Value *img = input(g, "img", TY(TY_F32, 1, 3, 8, 8));
  Value *k = &ir_const(g, 0.1, TY_F32, NOLOC)->out[0];
  Value *last = x;

  static const OpKind unary[] = {OP_NEG,  OP_ABS,  OP_RELU, OP_SIGMOID, OP_TANH,  OP_SILU,
                                 OP_HARDSIGMOID, OP_HARDSWISH, OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT,
                                 OP_ERF,  OP_RECIPROCAL, OP_SIN, OP_COS, OP_GELU, OP_LEAKY_RELU};
  for (size_t i = 0; i < ARRAY_LEN(unary); i++) last = op1(g, unary[i], last);
  Node *n = NODE(g, OP_LEAKY_RELU, last);
  ir_set_float(g, n, "alpha", -0.25);
  last = &add(g, n)->out[0];
  n = NODE(g, OP_GELU, last);
  ir_set_str(g, n, "approximate", "tanh");
  last = &add(g, n)->out[0];
  n = NODE(g, OP_CLIP, last);
  ir_set_float(g, n, "min", -1e-05);
  ir_set_float(g, n, "max", 6);
  last = &add(g, n)->out[0];
  n->loc = (SrcLoc){f, 12, 3};

  static const OpKind binary[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM, OP_MINIMUM,
                                  OP_EQ,  OP_NE,  OP_LT,  OP_LE,  OP_GT,  OP_GE};
  for (size_t i = 0; i < ARRAY_LEN(binary); i++) last = &add(g, NODE(g, binary[i], last, row))->out[0];
  last = &add(g, NODE(g, OP_MUL, last, k))->out[0];

  static const DType casts[] = {TY_F16, TY_BF16, TY_I8, TY_I32, TY_I64, TY_F32};
  Value *cast = last;
  for (size_t i = 0; i < ARRAY_LEN(casts); i++) {
    n = NODE(g, OP_CAST, cast);
    ir_set_dtype(g, n, "to", casts[i]);
    cast = &add(g, n)->out[0];
  }

  /* bools: the tests, logic, where, and casts to and from bool. */
  static const OpKind tests[] = {OP_EQUAL, OP_NOT_EQUAL, OP_LESS, OP_LESS_EQUAL, OP_GREATER, OP_GREATER_EQUAL};
  Value *mask = op1(g, OP_ISNAN, last);
  for (size_t i = 0; i < ARRAY_LEN(tests); i++) {
    Value *t = &add(g, NODE(g, tests[i], last, row))->out[0];
    mask = &add(g, NODE(g, i % 2 ? OP_LOGICAL_AND : OP_LOGICAL_OR, mask, t))->out[0];
  }
  mask = op1(g, OP_LOGICAL_NOT, &add(g, NODE(g, OP_LOGICAL_XOR, mask, op1(g, OP_ISINF, last)))->out[0]);
  Value *picked = &add(g, NODE(g, OP_WHERE, mask, last, row))->out[0];
  n = NODE(g, OP_CAST, picked);
  ir_set_dtype(g, n, "to", TY_BOOL);
  n = NODE(g, OP_CAST, &add(g, n)->out[0]);
  ir_set_dtype(g, n, "to", TY_F32);
  add(g, n);

  /* int8: a per-tensor scale with a zero point, a scale operand. */
  n = NODE(g, OP_QUANTIZE, cast);
  ir_set_float(g, n, "scale", 0.0234375);
  ir_set_int(g, n, "zero_point", -128);
  Value *q8 = &add(g, n)->out[0];
  n = NODE(g, OP_DEQUANTIZE, q8, row);
  add(g, n);

  static const OpKind reduce[] = {OP_REDUCE_SUM, OP_REDUCE_MEAN, OP_REDUCE_MAX, OP_REDUCE_MIN};
  Value *sums[4];
  for (size_t i = 0; i < ARRAY_LEN(reduce); i++) {
    n = NODE(g, reduce[i], cast);
    ir_set_ints(g, n, "axes", INTS(1));
    ir_set_int(g, n, "keepdims", (int64_t)(i % 2));
    sums[i] = &add(g, n)->out[0];
  }
  n = NODE(g, OP_REDUCE_SUM, cast);
  ir_set_ints(g, n, "axes", INTS(0, 1));
  add(g, n);
  n = NODE(g, OP_ARGMAX, cast);
  ir_set_int(g, n, "axis", 1);
  Value *am = &add(g, n)->out[0];
  n = NODE(g, OP_SOFTMAX, last);
  ir_set_int(g, n, "axis", 1);
  Value *sm = &add(g, n)->out[0];
  n = NODE(g, OP_LOG_SOFTMAX, sm);
  ir_set_int(g, n, "axis", 1);
  add(g, n);
  Value *lnw = param(g, "ln.weight", TY(TY_F32, 3)), *lnb = param(g, "ln.bias", TY(TY_F32, 3));
  n = NODE(g, OP_LAYERNORM, last, lnw, lnb);
  ir_set_int(g, n, "axis", 1);
  ir_set_float(g, n, "eps", 1e-05);
  add(g, n);
  n = NODE(g, OP_LAYERNORM, last);
  ir_set_int(g, n, "axis", 1);
  ir_set_float(g, n, "eps", 0.1);
  add(g, n);
  n = NODE(g, OP_RMS_NORM, last, lnw);
  ir_set_int(g, n, "axis", 1);
  ir_set_float(g, n, "eps", 1e-06);
  add(g, n);

  Value *cw = param(g, "conv.weight", TY(TY_F32, 4, 3, 3, 3));
  Value *cb = param(g, "conv.bias", TY(TY_F32, 4));
  n = NODE(g, OP_CONV2D, img, cw, cb);
  ir_set_ints(g, n, "stride", INTS(2, 2));
  ir_set_ints(g, n, "pad", INTS(1, 1, 1, 1));
  Value *conv = &add(g, n)->out[0];
  add(g, NODE(g, OP_CONV2D, img, cw));
  Value *gnw = param(g, "gn.weight", TY(TY_F32, 3)), *gnb = param(g, "gn.bias", TY(TY_F32, 3));
  n = NODE(g, OP_GROUP_NORM, img, gnw, gnb);
  ir_set_int(g, n, "groups", 3);
  add(g, n);
  n = NODE(g, OP_GROUP_NORM, img);
  ir_set_int(g, n, "groups", 1);
  ir_set_float(g, n, "eps", 0.001);
  add(g, n);
  n = NODE(g, OP_CONV_TRANSPOSE2D, conv, cw);
  ir_set_ints(g, n, "stride", INTS(2, 2));
  ir_set_ints(g, n, "pad", INTS(1, 1, 1, 1));
  ir_set_ints(g, n, "output_pad", INTS(1, 0));
  add(g, n);
  n = NODE(g, OP_RESIZE, img);
  ir_set_ints(g, n, "size", INTS(5, 7));
  ir_set_str(g, n, "mode", "bilinear");
  ir_set_int(g, n, "align_corners", 1);
  add(g, n);
  n = NODE(g, OP_GRID_SAMPLE, img, input(g, "grid", TY(TY_F32, 1, 2, 3, 2)));
  ir_set_str(g, n, "mode", "bicubic");
  ir_set_str(g, n, "padding_mode", "reflection");
  add(g, n);
  Value *bn[4];
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "bn.%d", i);
    bn[i] = param(g, name, TY(TY_F32, 4));
  }
  n = NODE(g, OP_BATCHNORM, conv, bn[0], bn[1], bn[2], bn[3]);
  ir_set_float(g, n, "eps", 0.001);
  Value *bnv = &add(g, n)->out[0];
  add(g, NODE(g, OP_GLOBAL_AVGPOOL, bnv));
  n = NODE(g, OP_MAXPOOL2D, img);
  ir_set_ints(g, n, "kernel", INTS(2, 2));
  ir_set_ints(g, n, "stride", INTS(2, 2));
  add(g, n);
  n = NODE(g, OP_AVGPOOL2D, img);
  ir_set_ints(g, n, "kernel", INTS(3, 3));
  ir_set_ints(g, n, "stride", INTS(1, 1));
  ir_set_ints(g, n, "pad", INTS(1, 1, 1, 1));
  ir_set_int(g, n, "count_include_pad", 0);
  add(g, n);
  /* 3-d (tests/test_conv3d.c has the rest) */
  Value *vol = input(g, "vol", TY(TY_F32, 1, 2, 3, 4, 5));
  Value *vw = param(g, "conv3.weight", TY(TY_F32, 4, 2, 1, 3, 3));
  n = NODE(g, OP_CONV3D, vol, vw);
  ir_set_ints(g, n, "pad", INTS(0, 1, 1, 0, 1, 1));
  Value *v3 = &add(g, n)->out[0];
  n = NODE(g, OP_CONV_TRANSPOSE3D, v3, vw);
  ir_set_ints(g, n, "stride", INTS(1, 2, 2));
  ir_set_ints(g, n, "output_pad", INTS(0, 1, 0));
  add(g, n);
  n = NODE(g, OP_MAXPOOL3D, vol);
  ir_set_ints(g, n, "kernel", INTS(1, 2, 2));
  ir_set_ints(g, n, "stride", INTS(1, 2, 2));
  add(g, n);
  n = NODE(g, OP_AVGPOOL3D, vol);
  ir_set_ints(g, n, "kernel", INTS(3, 3, 3));
  ir_set_ints(g, n, "stride", INTS(1, 1, 1));
  ir_set_ints(g, n, "pad", INTS(1, 1, 1, 1, 1, 1));
  ir_set_int(g, n, "ceil_mode", 1);
  add(g, n);

  Value *m = param(g, "m", TY(TY_F32, 3, 4));
  add(g, NODE(g, OP_MATMUL, x, m));
  Value *lw = param(g, "fc.weight", TY(TY_F32, 5, 3)), *lb = param(g, "fc.bias", TY(TY_F32, 5));
  add(g, NODE(g, OP_LINEAR, x, lw, lb));
  add(g, NODE(g, OP_LINEAR, x, lw));

  n = NODE(g, OP_RESHAPE, x);
  ir_set_ints(g, n, "shape", INTS(3, 2));
  add(g, n);
  Value *one = input(g, "one", TY(TY_F32, 1, 1));
  n = NODE(g, OP_RESHAPE, one);
  ir_set_ints(g, n, "shape", 0, NULL);
  add(g, n);
  n = NODE(g, OP_TRANSPOSE, x);
  ir_set_ints(g, n, "perm", INTS(1, 0));
  add(g, n);
  Value *r13 = param(g, "r13", TY(TY_F32, 1, 3));
  n = NODE(g, OP_EXPAND, r13);
  ir_set_ints(g, n, "shape", INTS(2, 3));
  add(g, n);
  n = NODE(g, OP_CONCAT, x, x, last);
  ir_set_int(g, n, "axis", 0);
  add(g, n);
  n = NODE(g, OP_SLICE, x);
  ir_set_ints(g, n, "starts", INTS(0, 1));
  ir_set_ints(g, n, "ends", INTS(2, 3));
  ir_set_ints(g, n, "steps", INTS(1, 1));
  add(g, n);
  n = NODE(g, OP_PAD, x);
  ir_set_ints(g, n, "pads", INTS(0, 1, 0, 1));
  ir_set_float(g, n, "value", -0.5);
  add(g, n);
  Value *table = param(g, "table", TY(TY_F32, 10, 4));
  Value *idx = input(g, "idx", TY(TY_I64, 2, 3));
  add(g, NODE(g, OP_GATHER, table, idx));

  /* Math, indexing by data and top-k (tests/test_ops2.c has the rest). */
  static const OpKind math[] = {OP_ROUND, OP_FLOOR, OP_CEIL, OP_SIGN, OP_TAN, OP_ASIN, OP_ACOS,
                                OP_ATAN, OP_SINH, OP_COSH, OP_ASINH, OP_ACOSH, OP_ATANH};
  Value *mv = x;
  for (size_t i = 0; i < ARRAY_LEN(math); i++) mv = op1(g, math[i], mv);

  /* A narrow format, the bits of integers, the wider integer dtypes. */
  n = NODE(g, OP_FP_ROUND, x);
  ir_set_str(g, n, "format", "e4m3fn");
  add(g, n);
  Value *u = input(g, "u", TY(TY_U32, 2, 3));
  static const OpKind bits[] = {OP_BIT_AND, OP_BIT_OR, OP_BIT_XOR, OP_SHL, OP_SHR};
  Value *bv = u;
  for (size_t i = 0; i < ARRAY_LEN(bits); i++) bv = &add(g, NODE(g, bits[i], bv, u))->out[0];
  n = NODE(g, OP_BITCAST, op1(g, OP_BIT_NOT, bv));
  ir_set_dtype(g, n, "to", TY_F32);
  add(g, n);
  static const DType wide[] = {TY_I16, TY_U16, TY_U64, TY_F64};
  for (size_t i = 0; i < ARRAY_LEN(wide); i++) {
    n = NODE(g, OP_CAST, x);
    ir_set_dtype(g, n, "to", wide[i]);
    add(g, n);
  }
  n = NODE(g, OP_MOD, mv, row);
  ir_set_int(g, n, "fmod", 1);
  add(g, n);
  n = NODE(g, OP_REDUCE_PROD, mv);
  ir_set_ints(g, n, "axes", INTS(1));
  add(g, n);
  Value *ie = input(g, "ie", TY(TY_I64, 2, 3));
  n = NODE(g, OP_GATHER_ELEMENTS, x, ie);
  ir_set_int(g, n, "axis", 1);
  add(g, n);
  n = NODE(g, OP_SCATTER_ELEMENTS, x, ie, x);
  ir_set_str(g, n, "reduction", "add");
  add(g, n);
  Value *nd = input(g, "nd", TY(TY_I64, 2, 1));
  add(g, NODE(g, OP_GATHER_ND, x, nd));
  add(g, NODE(g, OP_SCATTER_ND, x, nd, x));
  n = NODE(g, OP_TOPK, x);
  ir_set_int(g, n, "k", 2);
  ir_set_int(g, n, "axis", 1);
  add(g, n);
  n = ir_node_new(g, OP_IOTA, 0, NULL, NOLOC);
  ir_set_ints(g, n, "shape", INTS(2, 3));
  ir_set_dtype(g, n, "dtype", TY_F16);
  ir_set_int(g, n, "axis", 1);
  ir_set_float(g, n, "start", -0.5);
  add(g, n);

  Value *aq = input(g, "aq", TY(TY_F32, 1, 4, 3, 8)), *ak = input(g, "ak", TY(TY_F32, 1, 2, 5, 8));
  Value *am_ = input(g, "amask", TY(TY_BOOL, 3, 5));
  n = NODE(g, OP_ATTENTION, aq, ak, ak, am_);
  ir_set_int(g, n, "causal", 1);
  ir_set_float(g, n, "scale", 0.5);
  add(g, n);
  /* with each row's lse, and its gradient: three results, the mask last */
  n = NODE(g, OP_ATTENTION_LSE, aq, ak, ak, am_);
  ir_set_int(g, n, "causal", 1);
  add(g, n);
  Value *alse = &n->out[1];
  n = NODE(g, OP_ATTENTION_GRAD, aq, ak, ak, aq, aq, alse, am_);
  ir_set_int(g, n, "causal", 1);
  ir_set_float(g, n, "scale", 0.5);
  add(g, n);

  Value *seq = input(g, "seq", TY(TY_F32, 4, 5, 6));
  Value *lwi = param(g, "lstm.w_ih", TY(TY_F32, 28, 6)), *lwh = param(g, "lstm.w_hh", TY(TY_F32, 28, 7));
  Value *lbi = param(g, "lstm.b_ih", TY(TY_F32, 28)), *lbh = param(g, "lstm.b_hh", TY(TY_F32, 28));
  n = NODE(g, OP_LSTM, seq, lwi, lwh, lbi, lbh);
  ir_set_int(g, n, "hidden", 7);
  Node *lstm = add(g, n);
  Value *gwi = param(g, "gru.w_ih", TY(TY_F32, 21, 6)), *gwh = param(g, "gru.w_hh", TY(TY_F32, 21, 7));
  Value *gbi = param(g, "gru.b_ih", TY(TY_F32, 21)), *gbh = param(g, "gru.b_hh", TY(TY_F32, 21));
  n = NODE(g, OP_GRU, seq, gwi, gwh, gbi, gbh);
  ir_set_int(g, n, "hidden", 7);
  Node *gru = add(g, n);
  /* lstm_bptt, batch first (seq's [4, 5] is [N, T]), walking backward */
  Value *gates = input(g, "gates", TY(TY_F32, 4, 5, 28)), *dseq = input(g, "dseq", TY(TY_F32, 4, 5, 7));
  Value *dlast = input(g, "dlast", TY(TY_F32, 4, 7));
  n = NODE(g, OP_LSTM_BPTT, gates, gates, input(g, "w_hh", TY(TY_F32, 28, 7)), dseq, dlast, dlast);
  ir_set_int(g, n, "reverse", 1);
  ir_set_int(g, n, "batch_first", 1);
  add(g, n);
  /* gru_bptt, time first, its two results */
  Value *ggates = input(g, "ggates", TY(TY_F32, 5, 4, 21)), *gseq = input(g, "gseq", TY(TY_F32, 5, 4, 7));
  n = NODE(g, OP_GRU_BPTT, ggates, ggates, gwh, gseq, dlast, gseq);
  add(g, n);
  /* Training (docs/training.md): the gradients' ops, dropout, an update. */
  Value *pic = input(g, "pic", TY(TY_F32, 1, 2, 4, 4)), *dpic = input(g, "dpic", TY(TY_F32, 1, 2, 2, 2));
  n = NODE(g, OP_CONV_WEIGHT_GRAD, pic, dpic);
  ir_set_ints(g, n, "kernel", INTS(3, 3));
  ir_set_ints(g, n, "stride", INTS(1, 1));
  ir_set_ints(g, n, "pad", INTS(0, 0, 0, 0));
  ir_set_ints(g, n, "dilation", INTS(1, 1));
  add(g, n);
  for (int avg = 0; avg < 2; avg++) {
    n = avg ? NODE(g, OP_AVGPOOL_GRAD, dpic) : NODE(g, OP_MAXPOOL_GRAD, dpic, pic);
    if (avg) ir_set_ints(g, n, "size", INTS(4, 4));
    ir_set_ints(g, n, "kernel", INTS(2, 2));
    ir_set_ints(g, n, "stride", INTS(2, 2));
    ir_set_ints(g, n, "pad", INTS(0, 0, 0, 0));
    ir_set_ints(g, n, "dilation", INTS(1, 1));
    add(g, n);
  }
  n = NODE(g, OP_EMBEDDING_GRAD, input(g, "drows", TY(TY_F32, 2, 3, 4)), idx);
  ir_set_int(g, n, "num", 10);
  add(g, n);
  Value *logits = input(g, "logits", TY(TY_F32, 3, 5)), *cls = input(g, "cls", TY(TY_I64, 3));
  n = NODE(g, OP_XENT, logits, cls);
  ir_set_float(g, n, "smoothing", 0.125);
  Node *xent = add(g, n);
  n = NODE(g, OP_XENT_GRAD, logits, cls, &xent->out[0]);
  ir_set_int(g, n, "ignore_index", 4);
  add(g, n);
  add(g, NODE(g, OP_XENT_BOTH, logits, cls, &xent->out[0]));
  n = NODE(g, OP_RESIZE_GRAD, pic);
  ir_set_ints(g, n, "size", INTS(3, 2));
  ir_set_str(g, n, "mode", "bilinear");
  ir_set_int(g, n, "align_corners", 1);
  add(g, n);
  n = NODE(g, OP_MATMUL, dpic, dpic);
  ir_set_int(g, n, "trans_a", 1);
  add(g, n);
  Value *rng_seed = param(g, "dlcc.seed", ir_type_make(TY_I64, 0, NULL));
  Value *rng_step = param(g, "dlcc.step", ir_type_make(TY_I64, 0, NULL));
  n = NODE(g, OP_DROPOUT, x, rng_seed, rng_step);
  ir_set_float(g, n, "p", 0.25);
  ir_set_int(g, n, "stream", 3);
  add(g, n);
  n = NODE(g, OP_RANDOM_UNIFORM, rng_seed, rng_step);
  ir_set_ints(g, n, "shape", INTS(2, 5));
  ir_set_int(g, n, "stream", 4);
  add(g, n);
  Value *next_step = &add(g, NODE(g, OP_ADD, rng_step, rng_step))->out[0];
  Value *lr = input(g, "dlcc.lr", scalar(TY_F32));
  Value *avg = param(g, "dlcc.optim.x.exp_avg", TY(TY_F32, 2, 3));
  n = NODE(g, OP_OPTIM_UPDATE, x, x, lr, lr, lr, avg, avg);
  ir_set_str(g, n, "kind", "adamw");
  ir_set_float(g, n, "weight_decay", 0.05);
  add(g, n);
  n = NODE(g, OP_ALLREDUCE_MEAN, x);
  ir_set_int(g, n, "bucket", 2);
  add(g, n);
  add(g, NODE(g, OP_ALLREDUCE_SUM, &add(g, NODE(g, OP_TP_COPY, x))->out[0]));
  n = NODE(g, OP_CHECK, x, input(g, "ok", scalar(TY_BOOL)));
  ir_set_str(g, n, "message", "m.onnx: node 2 'If_0' (If): the \"else\" branch was chosen");
  add(g, n);
  add(g, NODE(g, OP_STAGE, x));
  /* a loop of the plan: x doubled while go holds */
  Value *go = input(g, "go", scalar(TY_BOOL));
  Node *begin = add(g, NODE(g, OP_LOOP_BEGIN, go, x));
  Value *twice = &add(g, NODE(g, OP_ADD, &begin->out[0], &begin->out[0]))->out[0];
  add(g, NODE(g, OP_LOOP_END, &begin->out[0], go, twice));
  Node *nz = add(g, NODE(g, OP_NONZERO, x));
  Value *boxes = input(g, "boxes", TY(TY_F32, 1, 3, 4)), *scores = input(g, "scores", TY(TY_F32, 1, 2, 3));
  Value *most = &ir_const(g, 2, TY_I64, (SrcLoc){0})->out[0], *thr = &ir_const(g, 0.5, TY_F32, (SrcLoc){0})->out[0];
  n = NODE(g, OP_NMS, boxes, scores, most, thr, thr);
  ir_set_int(g, n, "bound", 2);
  ir_set_int(g, n, "center_point_box", 1);
  Node *nms = add(g, n);
  n = NODE(g, OP_RESHAPE, x);
  ir_set_ints(g, n, "shape", INTS(6));
  n = NODE(g, OP_UNIQUE, &add(g, n)->out[0]);
  ir_set_int(g, n, "sorted", 0);
  add(g, n);

  /* A string with every character the printer must escape. */
  param(g, "odd \"name\" with \\ and\nnewline", TY(TY_F32, 1));

  if (covered)
    for (Node *it = g->first; it; it = it->next) covered[it->op] = true;
  outputs(g, 11,
          (Value *[]){&lstm->out[0], &lstm->out[2], &gru->out[1], am, sums[1], last, next_step, &nz->out[0],
                      &nms->out[0], &nz->out[1], &nms->out[1]},
          (const char *[]){"seq", "c", "gru_h", "argmax", "mean", "last", "dlcc.step", "nz", "kept", "nz:length",
                           "kept:length"});
  ir_set_output_update(g, 6, "dlcc.step");
  ir_set_output_length(g, 7, 1, 9);
  ir_set_output_length(g, 8, 0, 10);
  return g;
}

START_TEST(round_trip_every_op) {
  bool covered[OP_COUNT] = {false};
  Graph *g = build_every_op(&C, covered);
  /* shape_of and with_length never print: ir_bounds, which the
   * importer and the parser run, replaces them (test_onnx_lengths). */
  covered[OP_SHAPE_OF] = covered[OP_WITH_LENGTH] = true;
  for (int i = 0; i < OP_COUNT; i++) ck_assert_msg(covered[i], "op %s not covered", ir_ops[i].name);
  ck_assert_msg(ir_verify(g), "%s", diag_text(&C));
  assert_round_trip(g);
  const char *text = print_str(g);
  /* Spot checks of attribute spellings. */
  ck_assert_ptr_nonnull(strstr(text, " {alpha=-0.25} : f32[2, 3]"));
  ck_assert_ptr_nonnull(strstr(text, " {scale=0.0234375, zero_point=-128} : i8[2, 3]"));
  ck_assert_ptr_nonnull(strstr(text, " {min=-1e-05, max=6} : f32[2, 3]"));
  ck_assert_ptr_nonnull(strstr(text, "{axis=1, eps=0.1} : f32[2, 3]"));
  ck_assert_ptr_nonnull(strstr(text, "{axis=1, eps=1e-05} : f32[2, 3]"));
  ck_assert_ptr_nonnull(strstr(text, "{eps=0.001} : f32[1, 4, 4, 4]"));
  ck_assert_ptr_nonnull(strstr(text, "{shape=[]} : f32[]"));
  ck_assert_ptr_nonnull(strstr(text, "{to=bf16}"));
  ck_assert_ptr_nonnull(strstr(text, "{approximate=\"tanh\"}"));
  ck_assert_ptr_nonnull(strstr(text, "{name=\"odd \\\"name\\\" with \\\\ and\\nnewline\"}"));
  ck_assert_ptr_nonnull(strstr(text, "{value=0.1} : f32[]"));
  ck_assert_ptr_nonnull(strstr(text, "init=\"fill(-0.5)\""));
  ck_assert_ptr_nonnull(strstr(text, "return %"));
  ck_assert_ptr_nonnull(strstr(text, " as \"dlcc.step\" updates \"dlcc.step\", %"));
  ck_assert_ptr_nonnull(strstr(text, " as \"nz\" length 1 \"nz:length\", %"));
  ck_assert_ptr_nonnull(strstr(text, " as \"kept:length\"\n"));
}
END_TEST

START_TEST(round_trip_keeps_values) {
  Graph *g = build_every_op(&C, NULL);
  Graph *back = parse_str(&C, print_str(g));
  ck_assert_ptr_nonnull(back);
  ck_assert_int_eq(back->n_nodes, g->n_nodes);
  ck_assert_int_eq(back->n_outputs, 11);
  ck_assert_int_eq(ir_visible_outputs(back), 9);
  ck_assert_ptr_null(ir_output_update(back, 5));
  ck_assert_str_eq(ir_output_update(back, 6), "dlcc.step");
  int axis;
  ck_assert_int_eq(ir_output_length(back, 8, &axis), 10);
  ck_assert_int_eq(axis, 0);
  for (Node *a = g->first, *b = back->first; a; a = a->next, b = b->next) {
    ck_assert_int_eq(a->op, b->op);
    ck_assert_int_eq(a->n_attrs, b->n_attrs);
    for (int i = 0; i < a->n_out; i++) ck_assert(ir_type_eq(&a->out[i].type, &b->out[i].type));
    if (a->loc.file) {
      ck_assert_str_eq(a->loc.file->name, b->loc.file->name);
      ck_assert_int_eq(a->loc.line, b->loc.line);
      ck_assert_int_eq(a->loc.col, b->loc.col);
      ck_assert_ptr_null(b->loc.file->text);
    } else {
      ck_assert_ptr_null(b->loc.file);
    }
  }
  const Node *odd = back->last;
  ck_assert_str_eq(ir_attr_str(odd, "name"), "odd \"name\" with \\ and\nnewline");
  ck_assert_int_eq(back->outputs[1]->index, 2);
  ck_assert_ptr_eq(back->outputs[1]->def, back->outputs[0]->def);
  ck_assert_int_eq(back->outputs[0]->def->op, OP_LSTM);
}
END_TEST

START_TEST(parse_interns_loc_files) {
  Graph *g = parse_ok(
      "graph g {\n"
      "  %0 = input {name=\"x\"} : f32[2]  ; a.dl:1:2\n"
      "  %1 = relu %0 : f32[2]  ;a.dl:3:4\n"
      "  %2 = relu %1 : f32[2]  ; b.dl:5:6\n"
      "  %3 = relu %2 : f32[2]  ; not a location\n"
      "  %4 = relu %3 : f32[2]  ; C:\\dir\\c.dl:7:8  \n"
      "  return %4 as \"y\"\n"
      "}\n");
  Node *n0 = g->first, *n1 = n0->next, *n2 = n1->next, *n3 = n2->next, *n4 = n3->next;
  ck_assert_ptr_eq(n0->loc.file, n1->loc.file);
  ck_assert_str_eq(n0->loc.file->name, "a.dl");
  ck_assert_ptr_null(n0->loc.file->text);
  ck_assert_int_eq(n1->loc.line, 3);
  ck_assert_int_eq(n1->loc.col, 4);
  ck_assert_str_eq(n2->loc.file->name, "b.dl");
  ck_assert_ptr_ne(n2->loc.file, n0->loc.file);
  ck_assert_ptr_null(n3->loc.file);
  ck_assert_str_eq(n4->loc.file->name, "C:\\dir\\c.dl");
  ck_assert_int_eq(n4->loc.line, 7);
}
END_TEST

START_TEST(parse_hand_written_variations) {
  Graph *g = parse_ok(
      "\n; leading comment\n\n"
      "graph   g{   ; comment after the brace\n"
      "; a comment line\n"
      "  %x = input {name=\"x\"} : f32[2, 3]\r\n"
      "  %7=relu %x:f32[2,3]\n"
      "  %alpha.1 = leaky_relu %7 { } : f32[2, 3]\n"
      "  %s = reduce_sum %alpha.1 {axes=[ 1 ]} : f32[2]\n"
      "  return %s as \"sum\" , %7 as \"r\"   ; trailing\n"
      "}   \n"
      "\n; comment after the graph\n");
  ck_assert_str_eq(print_str(g),
                   "; dlcc IR\n"
                   "graph g {\n"
                   "  %0 = input {name=\"x\"} : f32[2, 3]\n"
                   "  %1 = relu %0 : f32[2, 3]\n"
                   "  %2 = leaky_relu %1 {alpha=0.01} : f32[2, 3]\n"
                   "  %3 = reduce_sum %2 {axes=[1], keepdims=0} : f32[2]\n"
                   "  return %3 as \"sum\", %1 as \"r\"\n"
                   "}\n");
}
END_TEST

/* ---- golden files ---- */

/* The file at top_srcdir/dir/name, NUL-terminated, in C's arena. */
static const char *read_source_file(const char *dir, const char *name) {
  const char *top = getenv("top_srcdir");
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", top ? top : ".", dir, name);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = arena_alloc(&C.arena, (size_t)n + 1);
  ck_assert_int_eq((long)fread(buf, 1, (size_t)n, f), n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static const char *read_golden(const char *name) { return read_source_file("tests/golden/ir", name); }

static const char *const golden[] = {"mlp", "lstm", "cnn"};

START_TEST(golden_files) {
  char name[64];
  snprintf(name, sizeof name, "%s.ir", golden[_i]);
  const char *text = read_golden(name);
  snprintf(name, sizeof name, "%s.expected", golden[_i]);
  const char *expected = read_golden(name);
  Graph *g = ir_parse(&C, ctx_add_file(&C, name, text, strlen(text)));
  ck_assert_msg(g != NULL, "%s", diag_text(&C));
  ck_assert_msg(ir_verify(g), "%s", diag_text(&C));
  ck_assert_str_eq(print_str(g), expected);
  assert_round_trip(g);
}
END_TEST

/* ---- the op table of docs/ir.md ---- */

/* Every op of ops.def has its row in docs/ir.md's table, as ops.def
 * says it: operand count, results, and each attribute with its kind and
 * default, in order. */
START_TEST(ops_table_in_docs) {
  const char *doc = read_source_file("docs", "ir.md");
  static const char *const kinds[] = {[AK_INT] = "int", [AK_FLOAT] = "float", [AK_INTS] = "ints", [AK_STR] = "str",
                                      [AK_DTYPE] = "dtype"};
  char wrong[4096] = "";
  for (int op = 0; op < OP_COUNT; op++) {
    const OpInfo *o = &ir_ops[op];
    char row[2048], count[32];
    if (o->max_in < 0) snprintf(count, sizeof count, "%d+", o->min_in);
    else if (o->max_in == o->min_in) snprintf(count, sizeof count, "%d", o->min_in);
    else snprintf(count, sizeof count, "%d-%d", o->min_in, o->max_in);
    char results[16] = "1+"; /* a loop's: one per carried value */
    if (o->n_out >= 0) snprintf(results, sizeof results, "%d", o->n_out);
    int len = snprintf(row, sizeof row, "| `%s` | %s | %s | ", o->name, count, results);
    for (int a = 0; a < o->n_attrs; a++) {
      const AttrSpec *at = &o->attrs[a];
      const char *d = at->default_text;
      len += snprintf(row + len, sizeof row - (size_t)len, "%s`%s`: %s%s%s%s", a ? ", " : "", at->name, kinds[at->kind],
                      !d ? " (required)" : strcmp(d, "?") == 0 ? " (optional)" : " = `", d && strcmp(d, "?") ? d : "",
                      d && strcmp(d, "?") ? "`" : "");
    }
    snprintf(row + len, sizeof row - (size_t)len, " |\n");
    if (!strstr(doc, row))
      snprintf(wrong + strlen(wrong), sizeof wrong - strlen(wrong), "%s", row);
  }
  ck_assert_msg(!wrong[0], "docs/ir.md's op table lacks these rows (as ops.def has them):\n%s", wrong);
}
END_TEST

/* ---- parse errors: the exact text, with location and caret ---- */

/* The If branches a node is needed on (an ONNX If decided at run time,
 * ir/guard.c): " if %c", " if !%c" after the types, outermost first; one
 * frame is one Guard for every node that names it. */
START_TEST(round_trip_guards) {
  static const char text[] =
      "; dlcc IR\n"
      "graph g {\n"
      "  %0 = input {name=\"x\"} : f32[4]\n"
      "  %1 = input {name=\"c\"} : bool[]\n"
      "  %2 = input {name=\"d\"} : bool[1]\n"
      "  %3 = relu %0 : f32[4] if %1\n"
      "  %4 = neg %3 : f32[4] if %1 if !%2\n"
      "  %5 = abs %3 : f32[4] if %1 if %2\n"
      "  %6 = where %2, %5, %4 : f32[4] if %1\n"
      "  %7 = exp %0 : f32[4] #k3 if !%1\n"
      "  %8 = where %1, %6, %7 : f32[4]\n"
      "  return %8 as \"y\"\n"
      "}\n";
  Graph *g = parse_ok(text);
  ck_assert_str_eq(print_str(g), text);
  assert_round_trip(g);
  const Node *n[9] = {0};
  int i = 0;
  for (const Node *m = g->first; m && i < 9; m = m->next) n[i++] = m;
  ck_assert_ptr_null(n[0]->guard);
  ck_assert_ptr_eq(n[3]->guard, n[6]->guard);         /* one frame, one object */
  ck_assert_ptr_eq(n[4]->guard->outer, n[3]->guard);  /* nested inside it */
  ck_assert_ptr_eq(n[5]->guard->outer, n[3]->guard);
  ck_assert_ptr_ne(n[4]->guard, n[5]->guard);
  ck_assert(!n[4]->guard->when && n[5]->guard->when && n[4]->guard->depth == 2);
  ck_assert_ptr_eq(n[7]->guard->cond, &n[1]->out[0]);
  ck_assert(!n[7]->guard->when && n[7]->group == 3);
  ck_assert_ptr_null(n[8]->guard);
}
END_TEST

static void assert_parse_error(const char *text, const char *expected) {
  diag_clear(&C);
  Graph *g = parse_str(&C, text);
  ck_assert_msg(g == NULL, "parsed but should not have:\n%s", text);
  ck_assert_str_eq(diag_text(&C), expected);
}

#define HEAD "graph g {\n  %0 = input {name=\"x\"} : f32[8, 12]\n"
#define TAIL "  return %0 as \"y\"\n}\n"

START_TEST(error_unknown_op) {
  assert_parse_error(HEAD "  %1 = reluu %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:8: error: unknown op 'reluu'; did you mean 'relu'?\n"
                     "      %1 = reluu %0 : f32[8, 12]\n"
                     "           ^\n");
  assert_parse_error(HEAD "  %1 = frobnicate %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:8: error: unknown op 'frobnicate'\n"
                     "      %1 = frobnicate %0 : f32[8, 12]\n"
                     "           ^\n");
}
END_TEST

START_TEST(error_declared_type_differs) {
  assert_parse_error(HEAD "  %1 = add %0, %0 : f32[8, 10]\n" TAIL,
                     "t.ir:3:21: error: declared f32[8, 10] but add of these operands gives f32[8, 12]\n"
                     "      %1 = add %0, %0 : f32[8, 10]\n"
                     "                        ^\n");
}
END_TEST

START_TEST(error_attributes) {
  assert_parse_error(HEAD "  %1 = leaky_relu %0 {alpah=0.1} : f32[8, 12]\n" TAIL,
                     "t.ir:3:23: error: unknown attribute 'alpah' for leaky_relu; did you mean 'alpha'?\n"
                     "      %1 = leaky_relu %0 {alpah=0.1} : f32[8, 12]\n"
                     "                          ^\n");
  assert_parse_error(HEAD "  %1 = relu %0 {alpha=0.1} : f32[8, 12]\n" TAIL,
                     "t.ir:3:17: error: relu takes no attributes\n"
                     "      %1 = relu %0 {alpha=0.1} : f32[8, 12]\n"
                     "                    ^\n");
  assert_parse_error(HEAD "  %1 = softmax %0 {axis=1.5} : f32[8, 12]\n" TAIL,
                     "t.ir:3:25: error: attribute 'axis' of softmax needs an integer, found '1.5'\n"
                     "      %1 = softmax %0 {axis=1.5} : f32[8, 12]\n"
                     "                            ^\n");
  assert_parse_error(HEAD "  %1 = reduce_sum %0 {axes=1} : f32[8]\n" TAIL,
                     "t.ir:3:28: error: attribute 'axes' of reduce_sum needs a list of integers such as [1, 2], found '1'\n"
                     "      %1 = reduce_sum %0 {axes=1} : f32[8]\n"
                     "                               ^\n");
  assert_parse_error(HEAD "  %1 = cast %0 {to=f128} : f32[8, 12]\n" TAIL,
                     "t.ir:3:20: error: attribute 'to' of cast needs a dtype (f32, f16, bf16, i8, i32, i64, bool, u8, f64), found 'f128'\n"
                     "      %1 = cast %0 {to=f128} : f32[8, 12]\n"
                     "                       ^\n");
  assert_parse_error(HEAD "  %1 = softmax %0 {axis=1, axis=1} : f32[8, 12]\n" TAIL,
                     "t.ir:3:28: error: attribute 'axis' is given twice\n"
                     "      %1 = softmax %0 {axis=1, axis=1} : f32[8, 12]\n"
                     "                               ^\n");
  assert_parse_error(HEAD "  %1 = softmax %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:8: error: softmax needs attribute 'axis'\n"
                     "      %1 = softmax %0 : f32[8, 12]\n"
                     "           ^\n");
  /* dropout's block of a whole tensor (a tensor-parallel rank's) */
  assert_parse_error(HEAD "  %s = const {value=1} : i64[]\n  %1 = dropout %0, %s, %s {p=0.5, part=[1, 2, 2]} : f32[8, 12]\n" TAIL,
                     "t.ir:4:8: error: dropout: part must be [axis of x, parts from 1 to 65536, index below parts] "
                     "and optionally groups dividing the axis, got [1, 2, 2]\n"
                     "      %1 = dropout %0, %s, %s {p=0.5, part=[1, 2, 2]} : f32[8, 12]\n"
                     "           ^\n");
}
END_TEST

START_TEST(error_result_counts) {
  assert_parse_error(HEAD "  %1 = relu %0 : f32[8, 12], f32[8, 12]\n" TAIL,
                     "t.ir:3:18: error: relu gives 1 result, but 2 types are written\n"
                     "      %1 = relu %0 : f32[8, 12], f32[8, 12]\n"
                     "                     ^\n");
  assert_parse_error(HEAD "  %1, %2 = relu %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:3: error: relu gives 1 result, but 2 are named\n"
                     "      %1, %2 = relu %0 : f32[8, 12]\n"
                     "      ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[8, 12], f32[8]\n" TAIL,
                     "t.ir:2:27: error: input gives 1 result, but 2 types are written\n"
                     "      %0 = input {name=\"x\"} : f32[8, 12], f32[8]\n"
                     "                              ^\n");
}
END_TEST

START_TEST(error_values) {
  assert_parse_error(HEAD "  %1 = relu %9 : f32[8, 12]\n" TAIL,
                     "t.ir:3:13: error: %9 is not defined\n"
                     "      %1 = relu %9 : f32[8, 12]\n"
                     "                ^\n");
  assert_parse_error(HEAD "  %0 = relu %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:3: error: %0 is already defined on line 2\n"
                     "      %0 = relu %0 : f32[8, 12]\n"
                     "      ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[2]\n  return %1 as \"y\"\n}\n",
                     "t.ir:3:10: error: %1 is not defined\n"
                     "      return %1 as \"y\"\n"
                     "             ^\n");
  /* Outputs are looked up by name: two of one name would hide one. */
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[2]\n  return %0 as \"y\", %0 as \"y\"\n}\n",
                     "t.ir:3:27: error: output name \"y\" is used twice\n"
                     "      return %0 as \"y\", %0 as \"y\"\n"
                     "                              ^\n");
}
END_TEST

START_TEST(error_guards) {
  assert_parse_error(HEAD "  %1 = relu %0 : f32[8, 12] if %9\n" TAIL,
                     "t.ir:3:32: error: %9 is not defined\n"
                     "      %1 = relu %0 : f32[8, 12] if %9\n"
                     "                                   ^\n");
  assert_parse_error(HEAD "  %1 = relu %0 : f32[8, 12] if !%0\n" TAIL,
                     "t.ir:3:33: error: a guard's condition must be one bool, and %0 is f32[8, 12]\n"
                     "      %1 = relu %0 : f32[8, 12] if !%0\n"
                     "                                    ^\n");
  assert_parse_error(HEAD "  %1 = relu %0 : f32[8, 12] if\n" TAIL,
                     "t.ir:3:31: error: expected a value such as %0, found end of line\n"
                     "      %1 = relu %0 : f32[8, 12] if\n"
                     "                                  ^\n");
  assert_parse_error(HEAD "  %1 = relu %0 : f32[8, 12] iff %0\n" TAIL,
                     "t.ir:3:29: error: expected ',' or the end of the line after the type, found 'iff'\n"
                     "      %1 = relu %0 : f32[8, 12] iff %0\n"
                     "                                ^\n");
}
END_TEST

START_TEST(error_structure) {
  assert_parse_error(HEAD "}\n",
                     "t.ir:3:1: error: graph 'g' has no 'return'\n"
                     "    }\n"
                     "    ^\n");
  assert_parse_error(HEAD TAIL "%1 = relu %0 : f32[8, 12]\n",
                     "t.ir:5:1: error: text after the graph's closing '}'\n"
                     "    %1 = relu %0 : f32[8, 12]\n"
                     "    ^\n");
  assert_parse_error(HEAD "  return %0 as \"y\"\n} x\n",
                     "t.ir:4:3: error: text after the graph's closing '}'\n"
                     "    } x\n"
                     "      ^\n");
  assert_parse_error("graph g {\n  return\n}\n",
                     "t.ir:2:9: error: 'return' needs at least one value\n"
                     "      return\n"
                     "            ^\n");
  assert_parse_error("graph empty {\n}\n",
                     "t.ir:2:1: error: graph 'empty' has no nodes\n"
                     "    }\n"
                     "    ^\n");
  assert_parse_error("; nothing\n\n",
                     "t.ir:1:10: error: empty IR text: expected 'graph NAME {'\n"
                     "    ; nothing\n"
                     "             ^\n");
  assert_parse_error(HEAD "  return %0 as \"y\"\n",
                     "t.ir:3:19: error: missing '}' at the end of graph 'g'\n"
                     "      return %0 as \"y\"\n"
                     "                      ^\n");
  assert_parse_error(HEAD TAIL "}\n",
                     "t.ir:5:1: error: text after the graph's closing '}'\n"
                     "    }\n"
                     "    ^\n");
}
END_TEST

START_TEST(error_graph_without_nodes) {
  /* A return needs a value, so an empty graph is reported at its head
   * only when nothing else is wrong; build one by hand around that. */
  assert_parse_error("graph g {\n  return %0 as \"y\"\n}\n",
                     "t.ir:2:10: error: %0 is not defined\n"
                     "      return %0 as \"y\"\n"
                     "             ^\n");
  assert_parse_error("graph g {\n; only a comment\n\n}\n",
                     "t.ir:4:1: error: graph 'g' has no nodes\n"
                     "    }\n"
                     "    ^\n");
}
END_TEST

START_TEST(error_nul_byte) {
  static const char text[] = "graph g {\n  %0 = input {name=\"x\"} : f32[2]\n  %1 = relu\0 %0 : f32[2]\n" TAIL;
  diag_clear(&C);
  Graph *g = ir_parse(&C, ctx_add_file(&C, "t.ir", text, sizeof text - 1));
  ck_assert_ptr_null(g);
  ck_assert_str_eq(diag_text(&C),
                   "t.ir:3:12: error: NUL byte in IR text\n"
                   "      %1 = relu? %0 : f32[2]\n"
                   "               ^\n");
}
END_TEST

START_TEST(error_types) {
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f128[2]\n" TAIL,
                     "t.ir:2:27: error: unknown dtype 'f128' (f32, f16, bf16, i8, i32, i64, bool, u8, f64)\n"
                     "      %0 = input {name=\"x\"} : f128[2]\n"
                     "                              ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[2, -1]\n" TAIL,
                     "t.ir:2:34: error: dimension -1 is negative\n"
                     "      %0 = input {name=\"x\"} : f32[2, -1]\n"
                     "                                     ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[1, 1, 1, 1, 1, 1, 1, 1, 1]\n" TAIL,
                     "t.ir:2:27: error: a type has at most 8 dimensions\n"
                     "      %0 = input {name=\"x\"} : f32[1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
                     "                              ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[1048576, 1048576, 2]\n" TAIL,
                     "t.ir:2:27: error: type has more than 1099511627776 elements\n"
                     "      %0 = input {name=\"x\"} : f32[1048576, 1048576, 2]\n"
                     "                              ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x\"} : f32[2\n" TAIL,
                     "t.ir:2:32: error: expected ',' or ']' in the type, found end of line\n"
                     "      %0 = input {name=\"x\"} : f32[2\n"
                     "                                   ^\n");
}
END_TEST

START_TEST(error_sources) {
  assert_parse_error("graph g {\n  %0 = input : f32[2]\n" TAIL,
                     "t.ir:2:8: error: input needs attribute 'name'\n"
                     "      %0 = input : f32[2]\n"
                     "           ^\n");
  assert_parse_error(HEAD "  %1 = input {name=\"x\"} : f32[2]\n" TAIL,
                     "t.ir:3:8: error: input name \"x\" is already used on line 2\n"
                     "      %1 = input {name=\"x\"} : f32[2]\n"
                     "           ^\n");
  assert_parse_error(HEAD "  %1 = param %0 {name=\"w\"} : f32[2]\n" TAIL,
                     "t.ir:3:8: error: param takes no operands\n"
                     "      %1 = param %0 {name=\"w\"} : f32[2]\n"
                     "           ^\n");
  assert_parse_error(HEAD "  %1 = relu %0, %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:8: error: relu takes 1 operand, got 2\n"
                     "      %1 = relu %0, %0 : f32[8, 12]\n"
                     "           ^\n");
}
END_TEST

START_TEST(error_recovery_reports_many) {
  assert_parse_error(HEAD
                     "  %1 = reluu %0 : f32[8, 12]\n"
                     "  %2 = relu %1 : f32[8, 12]\n"
                     "  %3 = relu %0 : f32[8, 13]\n"
                     "  %4 = tanh %zz : f32[8, 12]\n"
                     "  return %2 as \"y\"\n}\n",
                     "t.ir:3:8: error: unknown op 'reluu'; did you mean 'relu'?\n"
                     "      %1 = reluu %0 : f32[8, 12]\n"
                     "           ^\n"
                     "t.ir:5:18: error: declared f32[8, 13] but relu of these operands gives f32[8, 12]\n"
                     "      %3 = relu %0 : f32[8, 13]\n"
                     "                     ^\n"
                     "t.ir:6:13: error: %zz is not defined\n"
                     "      %4 = tanh %zz : f32[8, 12]\n"
                     "                ^\n");
  ck_assert_int_eq(C.diag.errors, 3);
}
END_TEST

START_TEST(error_syntax) {
  assert_parse_error("grph g {\n}\n",
                     "t.ir:1:1: error: expected 'graph NAME {', found 'grph'\n"
                     "    grph g {\n"
                     "    ^\n"
                     "t.ir:2:1: error: graph 'graph' has no 'return'\n"
                     "    }\n"
                     "    ^\n");
  assert_parse_error(HEAD "  %1 relu %0 : f32[8, 12]\n" TAIL,
                     "t.ir:3:6: error: expected ',' or '=' after the result, found 'relu'\n"
                     "      %1 relu %0 : f32[8, 12]\n"
                     "         ^\n");
  assert_parse_error(HEAD "  %1 = relu %0\n" TAIL,
                     "t.ir:3:15: error: expected ':' and the result types, found end of line\n"
                     "      %1 = relu %0\n"
                     "                  ^\n");
  assert_parse_error(HEAD "  relu %0\n" TAIL,
                     "t.ir:3:3: error: expected a node ('%0 = op ...'), 'return' or '}', found 'relu'\n"
                     "      relu %0\n"
                     "      ^\n");
  assert_parse_error(HEAD "  return %0 as y\n}\n",
                     "t.ir:3:16: error: expected the output's name in double quotes, found 'y'\n"
                     "      return %0 as y\n"
                     "                   ^\n");
  assert_parse_error("graph g {\n  %0 = input {name=\"x} : f32[2]\n" TAIL,
                     "t.ir:2:20: error: attribute 'name' of input needs a string in double quotes, found '\"'\n"
                     "      %0 = input {name=\"x} : f32[2]\n"
                     "                       ^\n");
}
END_TEST

START_TEST(error_stops_after_max_errors) {
  char *text = arena_alloc(&C.arena, 64 * 40 + 100);
  strcpy(text, "graph g {\n");
  /* (not "nope": that now suggests 'ne') */
  for (int i = 0; i < 40; i++) strcat(text, "  %1 = xyzw : f32[1]\n");
  strcat(text, "}\n");
  Graph *g = parse_str(&C, text);
  ck_assert_ptr_null(g);
  ck_assert_int_eq(C.diag.errors, 20);
  ck_assert_ptr_nonnull(strstr(diag_text(&C), "t.ir:2:8: error: unknown op 'xyzw'\n"));
  ck_assert_ptr_nonnull(strstr(diag_text(&C), "t.ir:21:3: error: %1 is already defined on line 2\n"));
  ck_assert_ptr_null(strstr(diag_text(&C), "t.ir:22:"));
}
END_TEST

/* ---- fuzzing: seeded mutations never crash and never yield a graph the
 * verifier rejects or that prints differently after a round trip ---- */

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
  return (uint32_t)(rng_state >> 33);
}

static size_t mutate(char *buf, size_t n, size_t cap) {
  static const char alphabet[] = "%=,:{}[]\"\\; \n\t0123456789-.eafirnxg\0\r";
  int rounds = 1 + (int)(rnd() % 4);
  for (int r = 0; r < rounds && n > 0; r++) {
    size_t at = rnd() % n;
    switch (rnd() % 6) {
      case 0: buf[at] = alphabet[rnd() % (sizeof alphabet - 1)]; break;
      case 1: buf[at] = (char)(rnd() & 0xff); break;
      case 2: { /* delete a run */
        size_t len = 1 + rnd() % 8;
        if (at + len > n) len = n - at;
        memmove(buf + at, buf + at + len, n - at - len);
        n -= len;
        break;
      }
      case 3: /* insert a char */
        if (n + 1 < cap) {
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = alphabet[rnd() % (sizeof alphabet - 1)];
          n++;
        }
        break;
      case 4: { /* duplicate a run */
        size_t len = 1 + rnd() % 40;
        if (at + len > n) len = n - at;
        if (n + len < cap && len <= 64) {
          char run[64];
          memcpy(run, buf + at, len);
          size_t to = rnd() % n;
          memmove(buf + to + len, buf + to, n - to);
          memcpy(buf + to, run, len);
          n += len;
        }
        break;
      }
      default: n = at; break; /* truncate */
    }
  }
  return n;
}

START_TEST(fuzz_mutations) {
  const char *seeds[] = {MLP_TEXT, read_golden("lstm.ir"), read_golden("cnn.ir")};
  rng_state = 12345;
  int parsed = 0;
  /* IRTEXT_FUZZ_ITERS raises the count for a longer run by hand. */
  const char *env = getenv("IRTEXT_FUZZ_ITERS");
  int iters = env ? atoi(env) : 3000;
  for (int iter = 0; iter < iters; iter++) {
    const char *seed = seeds[iter % 3];
    size_t n = strlen(seed), cap = n + 512;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, seed, n);
    n = mutate(buf, n, cap);
    /* Exactly n bytes, no terminator: the parser must respect len. */
    char *exact = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(exact);
    memcpy(exact, buf, n);
    free(buf);
    Ctx c;
    ctx_init(&c);
    Graph *g = ir_parse(&c, ctx_add_file(&c, "fuzz.ir", exact, n));
    if (g) {
      parsed++;
      ck_assert_msg(ir_verify(g), "%s", diag_text(&c));
      assert_round_trip(g);
    } else {
      ck_assert_int_gt(c.diag.errors, 0);
    }
    ctx_free(&c);
    free(exact);
  }
  ck_assert_int_gt(parsed, iters / 50);
}
END_TEST

/* ---- DOT ---- */

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

START_TEST(dot_well_formed) {
  Graph *g = build_every_op(&C, NULL);
  const char *d = dot_str(g);
  ck_assert_ptr_nonnull(strstr(d, "digraph \"every_op\" {\n"));
  ck_assert_ptr_nonnull(strstr(d, "rankdir=TB"));
  /* Braces balance outside quoted strings, and quotes close. */
  int depth = 0, min_depth = 0;
  bool in_str = false;
  for (const char *p = d; *p; p++) {
    if (in_str) {
      if (*p == '\\' && p[1])
        p++;
      else if (*p == '"')
        in_str = false;
      else
        ck_assert_msg(*p != '\n', "newline inside a DOT string");
    } else if (*p == '"') {
      in_str = true;
    } else if (*p == '{') {
      depth++;
    } else if (*p == '}') {
      depth--;
      if (depth < min_depth) min_depth = depth;
    }
  }
  ck_assert(!in_str);
  ck_assert_int_eq(depth, 0);
  ck_assert_int_eq(min_depth, 0);
  /* Weights fold into the ops that use them: no node of their own, and
   * at most one edge between two nodes (tests/test_dot has the rest). */
  int uses = 0;
  for (Node *n = g->first; n; n = n->next) uses += n->n_in;
  ck_assert_int_lt(count_of(d, " -> "), uses + g->n_outputs);
  ck_assert_int_eq(count_of(d, "fillcolor=gray90"), 0);
  ck_assert_int_eq(count_of(d, "[label=\"output\\n"), g->n_outputs);
  /* A param nothing uses is drawn nowhere (test_dot checks escapes). */
  ck_assert_ptr_null(strstr(d, "odd"));
  ck_assert_ptr_nonnull(strstr(d, "[label=\"f32[2, 3]\"]"));
  ck_assert_ptr_nonnull(strstr(d, "[label=\"#2 f32[1, 4, 7]\"]"));
  /* Defaults are left out of the label, others shown. */
  ck_assert_ptr_nonnull(strstr(d, "[label=\"conv2d\\nstride=[2, 2], pad=[1, 1, 1, 1]\\nweight, bias\"]"));
  ck_assert_ptr_nonnull(strstr(d, "[label=\"conv2d\\nweight f32[4, 3, 3, 3]\"]"));
  ck_assert_ptr_nonnull(strstr(d, "[label=\"lstm: lstm\\nhidden=7\\nw_ih, w_hh, b_ih, b_hh\"]"));
}
END_TEST

/* IR text has no scopes: the params' names give them.  A fusion group
 * is one node with its notes, weights fold into their users (an unused
 * one is nowhere), a weight-only output stays a node, and names are
 * escaped. */
START_TEST(dot_kernels_from_ir_text) {
  Graph *g = parse_ok("graph \"g\" {\n"
                      "  %0 = input {name=\"x\"} : f32[2, 4]\n"
                      "  %1 = param {name=\"blk.0.fc.weight\"} : f32[4, 4]\n"
                      "  %2 = param {name=\"blk.0.fc.bias\"} : f32[4]\n"
                      "  %3 = linear %0, %1, %2 : f32[2, 4] #k0\n"
                      "  %4 = relu %3 : f32[2, 4] #k0\n"
                      "  %5 = param {name=\"blk.1.odd \\\"w\\\"\"} : f32[4]\n"
                      "  %6 = const {value=2} : f32[]\n"
                      "  %7 = mul %5, %6 : f32[4]\n"
                      "  %8 = add %4, %7 : f32[2, 4]\n"
                      "  %9 = param {name=\"unused\"} : f32[3]\n"
                      "  return %8 as \"y\", %7 as \"w2\"\n"
                      "}\n");
  const char *notes[10] = {[3] = "gemm 2x4x4", [4] = "launch 1 of 32", [7] = "init launch"};
  const char *d = dot_opts_str(g, &(IrDotOptions){.depth = -1, .kernels = true, .notes = notes});
  ck_assert_str_eq(d, "digraph \"g\" {\n"
                      "  rankdir=TB;\n"
                      "  graph [fontname=\"Helvetica\", fontsize=11];\n"
                      "  node [shape=box, fontname=\"Helvetica\", fontsize=11];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=9];\n"
                      "  n0 [label=\"input\\nx\", shape=ellipse, style=filled, fillcolor=lightblue];\n"
                      "  n3 [label=\"add\"];\n"
                      "  subgraph cluster_0 {\n"
                      "  label=\"blk\";\n"
                      "  style=rounded; color=gray60;\n"
                      "  n1 [label=\"0.fc: linear+relu\\ngemm 2x4x4\\nlaunch 1 of 32\\nweight, bias\"];\n"
                      "  n2 [label=\"1: mul\\ninit launch\\nodd \\\"w\\\" f32[4]\"];\n"
                      "  }\n"
                      "  n0 -> n1 [label=\"f32[2, 4]\"];\n"
                      "  n1 -> n3 [label=\"f32[2, 4]\"];\n"
                      "  n2 -> n3 [label=\"f32[4]\"];\n"
                      "  out0 [label=\"output\\ny\", shape=ellipse, style=filled, fillcolor=palegreen];\n"
                      "  n3 -> out0 [label=\"f32[2, 4]\"];\n"
                      "  out1 [label=\"output\\nw2\", shape=ellipse, style=filled, fillcolor=palegreen];\n"
                      "  n2 -> out1 [label=\"f32[4]\"];\n"
                      "}\n");
  /* Depth 0: "blk" and what it holds is one node; no cluster. */
  d = dot_opts_str(g, &(IrDotOptions){.depth = 0, .kernels = true, .notes = notes});
  ck_assert_ptr_nonnull(strstr(d, "  n4 [label=\"blk\\n2 kernels\", style=\"rounded,filled\", fillcolor=lightyellow];\n"));
  ck_assert_ptr_nonnull(strstr(d, "  n0 -> n4 [label=\"f32[2, 4]\"];\n  n4 -> n3 [label=\"f32[2, 4]\"];\n"));
  ck_assert_ptr_nonnull(strstr(d, "  n4 -> out1 [label=\"f32[4]\"];\n"));
  ck_assert_ptr_null(strstr(d, "cluster"));
}
END_TEST

START_TEST(dot_runs_through_graphviz) {
  if (system("command -v dot >/dev/null 2>&1") != 0) return; /* optional tool */
  Graph *g = build_mlp(&C);
  char path[] = "/tmp/test_irtext_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  ir_print_dot(f, g);
  fclose(f);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "dot -Tsvg %s >/dev/null 2>&1", path);
  int rc = system(cmd);
  remove(path);
  ck_assert_int_eq(rc, 0);
}
END_TEST

/* ---- verifier ---- */

static void assert_verify_fails(Graph *g, const char *message) {
  diag_clear(&C);
  ck_assert(!ir_verify(g));
  ck_assert_msg(strstr(diag_text(&C), message) != NULL, "wanted '%s' in:\n%s", message, diag_text(&C));
}

/* x -> relu -> tanh, output the tanh. */
static Graph *small(Node **relu, Node **tanh_node) {
  Graph *g = ir_graph_new(&C, "small");
  Value *x = input(g, "x", TY(TY_F32, 2, 3));
  Value *r = op1(g, OP_RELU, x);
  Value *t = op1(g, OP_TANH, r);
  *relu = r->def;
  *tanh_node = t->def;
  outputs(g, 1, &t, (const char *[]){"y"});
  return g;
}

START_TEST(verify_accepts_good_graphs) {
  ck_assert(ir_verify(build_mlp(&C)));
  ck_assert(ir_verify(build_every_op(&C, NULL)));
  ck_assert_int_eq(C.diag.errors, 0);
}
END_TEST

START_TEST(verify_use_before_definition) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  ir_remove(g, t);
  ir_insert_before(g, r, t);
  assert_verify_fails(g, "dlcc: error: verifier: tanh %1: operand 0 is not a result of an earlier node in this graph\n");
}
END_TEST

START_TEST(verify_operand_from_other_graph) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  Graph *other = ir_graph_new(&C, "other");
  Value *y = input(other, "y", TY(TY_F32, 2, 3));
  r->in[0] = y;
  assert_verify_fails(g, "verifier: relu %1: operand 0 is not a result of an earlier node in this graph");
  r->in[0] = NULL;
  assert_verify_fails(g, "verifier: relu %1: operand 0 is null");
}
END_TEST

START_TEST(verify_arity_and_results) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  r->n_in = 0;
  assert_verify_fails(g, "verifier: relu %1: takes 1 operand, has 0");
  r->n_in = 1;
  r->n_out = 2;
  assert_verify_fails(g, "dlcc: error: verifier: relu: has 2 results, relu gives 1\n");
  r->n_out = 1;
  r->out[0].index = 1;
  assert_verify_fails(g, "result 0 does not point back at its node");
  r->out[0].index = 0;
  ck_assert(ir_verify(g));
}
END_TEST

START_TEST(verify_attributes) {
  Graph *g = ir_graph_new(&C, "attrs");
  Value *x = input(g, "x", TY(TY_F32, 2, 3));
  Node *n = NODE(g, OP_SOFTMAX, x);
  ir_set_int(g, n, "axis", 1);
  add(g, n);
  outputs(g, 1, (Value *[]){&n->out[0]}, (const char *[]){"y"});
  ck_assert(ir_verify(g));
  n->n_attrs = 0;
  assert_verify_fails(g, "verifier: softmax %1: missing attribute 'axis'");
  n->n_attrs = 1;
  n->attrs[0].kind = AK_FLOAT;
  assert_verify_fails(g, "verifier: softmax %1: attribute 'axis' is a float, should be a int");
  n->attrs[0].kind = AK_INT;
  n->attrs[0].name = "dim";
  assert_verify_fails(g, "verifier: softmax %1: attribute 'dim' is not in softmax's schema");
  n->attrs[0].name = "axis";
  ck_assert(ir_verify(g));
  Attr two[2] = {n->attrs[0], n->attrs[0]};
  n->attrs = two;
  n->n_attrs = 2;
  assert_verify_fails(g, "attribute 'axis' appears twice");
  Node *c = NODE(g, OP_CONV2D, x, x);
  add(g, NODE(g, OP_RELU, x)); /* keep the graph otherwise sound */
  ir_fill_defaults(g, c, (char[64]){0}, 64);
  Attr swapped = c->attrs[0];
  c->attrs[0] = c->attrs[1];
  c->attrs[1] = swapped;
  n->attrs = two;
  n->n_attrs = 1;
  ir_insert_before(g, NULL, c);
  assert_verify_fails(g, "verifier: conv2d %3: attribute 'stride' is out of schema order");
}
END_TEST

START_TEST(verify_declared_types) {
  Graph *g = ir_graph_new(&C, "decl");
  Value *x = input(g, "x", TY(TY_F32, 2, 3));
  outputs(g, 1, &x, (const char *[]){"y"});
  x->type.rank = 9;
  assert_verify_fails(g, "verifier: input %0: declared rank 9 is outside 0..8");
  x->type = TY(TY_F32, 2, -3);
  assert_verify_fails(g, "verifier: input %0: declared type f32[2, -3] has a negative dimension");
  x->type = TY(TY_F32, 1 << 20, 1 << 20, 4);
  assert_verify_fails(g, "declared type f32[1048576, 1048576, 4] has more than 1099511627776 elements");
  x->type = TY(TY_F32, 2, 3);
  x->type.dtype = (DType)TY_COUNT;
  assert_verify_fails(g, "verifier: input %0: declared type has no valid dtype");
  x->type = scalar(TY_I8);
  ck_assert(ir_verify(g));
}
END_TEST

START_TEST(verify_inferred_types_without_overwriting) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  r->loc = (SrcLoc){ctx_add_file(&C, "net.dl", NULL, 0), 4, 7};
  r->out[0].type = TY(TY_F32, 2, 4);
  assert_verify_fails(g, "net.dl:4:7: error: verifier: relu %1: result 0 has type f32[2, 4] but its operands give f32[2, 3]\n");
  TensorType kept = TY(TY_F32, 2, 4);
  ck_assert(ir_type_eq(&r->out[0].type, &kept));
  r->out[0].type = TY(TY_F32, 2, 3);
  t->out[0].type.dtype = TY_F16;
  assert_verify_fails(g, "verifier: tanh %2: result 0 has type f16[2, 3] but its operands give f32[2, 3]");
  ck_assert_int_eq(t->out[0].type.dtype, TY_F16);
}
END_TEST

START_TEST(verify_unique_source_names) {
  Graph *g = ir_graph_new(&C, "names");
  Value *a = input(g, "x", TY(TY_F32, 2));
  input(g, "x", TY(TY_F32, 2));
  outputs(g, 1, &a, (const char *[]){"y"});
  assert_verify_fails(g, "verifier: input %1: input name \"x\" is used twice");
  g = ir_graph_new(&C, "names");
  a = input(g, "x", TY(TY_F32, 2));
  param(g, "x", TY(TY_F32, 2)); /* an input and a param may share a name */
  param(g, "w", TY(TY_F32, 2));
  param(g, "w", TY(TY_F32, 2));
  outputs(g, 1, &a, (const char *[]){"y"});
  assert_verify_fails(g, "verifier: param %3: param name \"w\" is used twice");
  ck_assert_ptr_null(strstr(diag_text(&C), "\"x\""));
}
END_TEST

START_TEST(verify_outputs) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  g->n_outputs = 0;
  assert_verify_fails(g, "dlcc: error: verifier: graph 'small': has no outputs\n");
  g->n_outputs = 1;
  Graph *other = ir_graph_new(&C, "other");
  g->outputs[0] = input(other, "z", TY(TY_F32, 2));
  assert_verify_fails(g, "verifier: graph 'small': output 0 (\"y\") is not a value of this graph");
  g->outputs[0] = &t->out[0];
  ir_remove(g, t);
  assert_verify_fails(g, "output 0 (\"y\") is not a value of this graph");
}
END_TEST

START_TEST(verify_list_structure) {
  Node *r, *t;
  Graph *g = small(&r, &t);
  g->n_nodes = 2;
  assert_verify_fails(g, "verifier: graph 'small': n_nodes is 2 but the list has 3 nodes");
  g->n_nodes = 4;
  assert_verify_fails(g, "verifier: graph 'small': n_nodes is 4 but the list has 3 nodes");
  g->n_nodes = 3;
  t->next = g->first; /* a cycle must not hang the verifier */
  assert_verify_fails(g, "has a cycle");
  t->next = NULL;
  r->prev = NULL;
  assert_verify_fails(g, "verifier: relu %1: prev link does not point at the node before it");
  r->prev = g->first;
  ck_assert(ir_verify(g));
}
END_TEST

static Suite *irtext_suite(void) {
  Suite *s = suite_create("irtext");
  TCase *t = tcase_create("print");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, print_exact_text);
  tcase_add_test(t, print_loc_comment_at_column_64);
  tcase_add_test(t, print_quotes_graph_name_unless_identifier);
  tcase_add_test(t, round_trip_every_op);
  tcase_add_test(t, round_trip_keeps_values);
  tcase_add_test(t, round_trip_guards);
  suite_add_tcase(s, t);

  t = tcase_create("parse");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, parse_interns_loc_files);
  tcase_add_test(t, parse_hand_written_variations);
  tcase_add_loop_test(t, golden_files, 0, (int)ARRAY_LEN(golden));
  tcase_add_test(t, error_unknown_op);
  tcase_add_test(t, error_declared_type_differs);
  tcase_add_test(t, error_attributes);
  tcase_add_test(t, error_result_counts);
  tcase_add_test(t, error_values);
  tcase_add_test(t, ops_table_in_docs);
  tcase_add_test(t, error_guards);
  tcase_add_test(t, error_structure);
  tcase_add_test(t, error_graph_without_nodes);
  tcase_add_test(t, error_nul_byte);
  tcase_add_test(t, error_types);
  tcase_add_test(t, error_sources);
  tcase_add_test(t, error_recovery_reports_many);
  tcase_add_test(t, error_syntax);
  tcase_add_test(t, error_stops_after_max_errors);
  tcase_add_test(t, fuzz_mutations);
  tcase_set_timeout(t, 60);
  suite_add_tcase(s, t);

  t = tcase_create("dot");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, dot_well_formed);
  tcase_add_test(t, dot_kernels_from_ir_text);
  tcase_add_test(t, dot_runs_through_graphviz);
  suite_add_tcase(s, t);

  t = tcase_create("verify");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, verify_accepts_good_graphs);
  tcase_add_test(t, verify_use_before_definition);
  tcase_add_test(t, verify_operand_from_other_graph);
  tcase_add_test(t, verify_arity_and_results);
  tcase_add_test(t, verify_attributes);
  tcase_add_test(t, verify_declared_types);
  tcase_add_test(t, verify_inferred_types_without_overwriting);
  tcase_add_test(t, verify_unique_source_names);
  tcase_add_test(t, verify_outputs);
  tcase_add_test(t, verify_list_structure);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(irtext_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
