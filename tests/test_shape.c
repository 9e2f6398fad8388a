/* Check suite for ir/shape.c: builds single nodes over typed inputs, runs
 * ir_infer and compares the result types or the exact error message. */
#include "check_quiet.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static Ctx ctx;
static Graph *g;
static char err[512];

static void setup(void) {
  ctx_init(&ctx);
  g = ir_graph_new(&ctx, "t");
  err[0] = 0;
}

static void teardown(void) { ctx_free(&ctx); }

/* An input of the type written as in the IR text: "f32[8, 512]", "i64[]". */
static Value *val(const char *text) {
  char name[8];
  size_t i = 0;
  while (text[i] != '[' && i < sizeof name - 1) {
    name[i] = text[i];
    i++;
  }
  name[i] = 0;
  TensorType t = {0};
  ck_assert_msg(ir_dtype_from_name(name, &t.dtype), "bad dtype in %s", text);
  const char *p = text + i + 1;
  while (*p != ']') {
    char *end;
    t.dims[t.rank++] = strtoll(p, &end, 10);
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  SrcLoc loc = {0};
  return &ir_source(g, OP_INPUT, &t, "x", loc)->out[0];
}

static Node *node(OpKind op, int n_in, ...) {
  Value *in[64];
  va_list ap;
  va_start(ap, n_in);
  for (int i = 0; i < n_in; i++) in[i] = va_arg(ap, Value *);
  va_end(ap);
  SrcLoc loc = {0};
  return ir_node_new(g, op, n_in, in, loc);
}

static bool run(Node *n) {
  err[0] = 0;
  if (!ir_fill_defaults(g, n, err, sizeof err)) return false;
  return ir_infer(n, err, sizeof err);
}

static const char *type_of(const Node *n, int i) {
  static char buf[4][IR_TYPE_STR_MAX];
  return ir_type_str(&n->out[i].type, buf[i], sizeof buf[i]);
}

#define INTS(...) \
  (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

#define OK(n, want)                               \
  do {                                            \
    Node *n_ = (n);                               \
    ck_assert_msg(run(n_), "unexpected: %s", err); \
    ck_assert_str_eq(type_of(n_, 0), want);       \
  } while (0)

#define FAILS(n, msg)                                      \
  do {                                                     \
    ck_assert_msg(!run(n), "expected an error: %s", msg);  \
    ck_assert_str_eq(err, msg);                            \
  } while (0)

/* ---- elementwise ---- */

START_TEST(unary_keeps_type) {
  OK(node(OP_RELU, 1, val("i32[4, 5]")), "i32[4, 5]");
  OK(node(OP_NEG, 1, val("f16[]")), "f16[]");
  OK(node(OP_TANH, 1, val("bf16[3]")), "bf16[3]");
}
END_TEST

START_TEST(unary_float_rejects_int) {
  FAILS(node(OP_SIGMOID, 1, val("i32[4]")), "sigmoid needs a floating-point input, got i32[4]");
}
END_TEST

START_TEST(cast_changes_dtype) {
  Node *n = node(OP_CAST, 1, val("f32[2, 3]"));
  ir_set_dtype(g, n, "to", TY_I8);
  OK(n, "i8[2, 3]");
}
END_TEST

START_TEST(binary_broadcasts) {
  OK(node(OP_ADD, 2, val("f32[8, 1, 3]"), val("f32[4, 1]")), "f32[8, 4, 3]");
  OK(node(OP_MUL, 2, val("f32[]"), val("f32[2, 3]")), "f32[2, 3]");
  OK(node(OP_SUB, 2, val("f32[2, 3]"), val("f32[]")), "f32[2, 3]");
  OK(node(OP_DIV, 2, val("f32[]"), val("f32[]")), "f32[]");
  OK(node(OP_MAXIMUM, 2, val("i32[1, 1]"), val("i32[5]")), "i32[1, 5]");
}
END_TEST

START_TEST(binary_errors) {
  FAILS(node(OP_ADD, 2, val("f32[8, 512]"), val("f32[8, 256]")),
        "add: cannot broadcast f32[8, 512] with f32[8, 256]");
  FAILS(node(OP_ADD, 2, val("f32[8]"), val("f16[8]")), "add: dtype mismatch f32 vs f16");
}
END_TEST

/* ---- reductions ---- */

START_TEST(reduce_keepdims) {
  Node *n = node(OP_REDUCE_SUM, 1, val("f32[2, 3, 4]"));
  ir_set_ints(g, n, "axes", INTS(1));
  OK(n, "f32[2, 4]");
  n = node(OP_REDUCE_MEAN, 1, val("f32[2, 3, 4]"));
  ir_set_ints(g, n, "axes", INTS(0, 2));
  ir_set_int(g, n, "keepdims", 1);
  OK(n, "f32[1, 3, 1]");
}
END_TEST

START_TEST(reduce_all_axes_gives_scalar) {
  Node *n = node(OP_REDUCE_MAX, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "axes", INTS(0, 1));
  OK(n, "f32[]");
}
END_TEST

START_TEST(reduce_bad_axes) {
  Node *n = node(OP_REDUCE_SUM, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "axes", 0, NULL);
  FAILS(n, "reduce_sum: axes must not be empty");
  n = node(OP_REDUCE_SUM, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "axes", INTS(1, 0));
  FAILS(n, "reduce_sum: axes must be strictly ascending, got [1, 0]");
  n = node(OP_REDUCE_SUM, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "axes", INTS(2));
  FAILS(n, "reduce_sum: axis 2 is out of range for f32[2, 3] (rank 2)");
  n = node(OP_REDUCE_SUM, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "axes", INTS(0));
  ir_set_int(g, n, "keepdims", 2);
  FAILS(n, "reduce_sum: keepdims must be 0 or 1, got 2");
}
END_TEST

START_TEST(argmax_gives_i64) {
  Node *n = node(OP_ARGMAX, 1, val("f32[8, 10]"));
  ir_set_int(g, n, "axis", 1);
  OK(n, "i64[8]");
  n = node(OP_ARGMAX, 1, val("f32[8, 10]"));
  ir_set_int(g, n, "axis", 0);
  ir_set_int(g, n, "keepdims", 1);
  OK(n, "i64[1, 10]");
}
END_TEST

START_TEST(softmax_and_layernorm) {
  Node *n = node(OP_SOFTMAX, 1, val("f32[8, 10]"));
  ir_set_int(g, n, "axis", 1);
  OK(n, "f32[8, 10]");
  n = node(OP_LOG_SOFTMAX, 1, val("f32[8, 10]"));
  ir_set_int(g, n, "axis", 2);
  FAILS(n, "log_softmax: axis 2 is out of range for f32[8, 10] (rank 2)");
  n = node(OP_LAYERNORM, 3, val("f32[2, 5, 64]"), val("f32[64]"), val("f32[64]"));
  ir_set_int(g, n, "axis", 2);
  OK(n, "f32[2, 5, 64]");
  n = node(OP_LAYERNORM, 2, val("f32[2, 5, 64]"), val("f32[5, 64]"));
  ir_set_int(g, n, "axis", 1);
  OK(n, "f32[2, 5, 64]");
  n = node(OP_LAYERNORM, 3, val("f32[2, 5, 64]"), val("f32[64]"), val("f16[64]"));
  ir_set_int(g, n, "axis", 2);
  FAILS(n, "layernorm: bias must be f32[64] (the dims of x from axis 2), got f16[64]");
}
END_TEST

START_TEST(global_pool_and_batchnorm) {
  OK(node(OP_GLOBAL_AVGPOOL, 1, val("f32[2, 512, 7, 7]")), "f32[2, 512, 1, 1]");
  FAILS(node(OP_GLOBAL_AVGPOOL, 1, val("f32[8, 512]")),
        "global_avgpool expects a 4-d input [N, C, H, W], got f32[8, 512]");
  OK(node(OP_BATCHNORM, 5, val("f32[2, 16, 8, 8]"), val("f32[16]"), val("f32[16]"), val("f32[16]"),
          val("f32[16]")),
     "f32[2, 16, 8, 8]");
  FAILS(node(OP_BATCHNORM, 5, val("f32[2, 16, 8, 8]"), val("f32[16]"), val("f32[16]"),
             val("f32[16]"), val("f32[8]")),
        "batchnorm: running_var must be f32[16] (one value per channel of f32[2, 16, 8, 8]), got "
        "f32[8]");
}
END_TEST

/* ---- matrix products ---- */

START_TEST(matmul_shapes) {
  OK(node(OP_MATMUL, 2, val("f32[8, 64]"), val("f32[64, 10]")), "f32[8, 10]");
  OK(node(OP_MATMUL, 2, val("f32[64]"), val("f32[64, 10]")), "f32[10]");
  OK(node(OP_MATMUL, 2, val("f32[8, 64]"), val("f32[64]")), "f32[8]");
  OK(node(OP_MATMUL, 2, val("f32[64]"), val("f32[64]")), "f32[]");
  OK(node(OP_MATMUL, 2, val("f32[2, 1, 3, 4]"), val("f32[5, 4, 6]")), "f32[2, 5, 3, 6]");
  OK(node(OP_MATMUL, 2, val("f32[4]"), val("f32[7, 4, 6]")), "f32[7, 6]");
  OK(node(OP_MATMUL, 2, val("f32[7, 3, 4]"), val("f32[4]")), "f32[7, 3]");
}
END_TEST

START_TEST(matmul_errors) {
  FAILS(node(OP_MATMUL, 2, val("f32[8, 64]"), val("f32[32, 10]")),
        "matmul: inner dimensions differ: f32[8, 64] @ f32[32, 10] (64 vs 32)");
  FAILS(node(OP_MATMUL, 2, val("f32[2, 3, 4]"), val("f32[5, 4, 6]")),
        "matmul: cannot broadcast the batch dims of f32[2, 3, 4] with f32[5, 4, 6]");
  FAILS(node(OP_MATMUL, 2, val("f32[]"), val("f32[3]")),
        "matmul needs operands of rank >= 1, got f32[] @ f32[3]");
}
END_TEST

START_TEST(linear_shapes) {
  OK(node(OP_LINEAR, 3, val("f32[8, 784]"), val("f32[10, 784]"), val("f32[10]")), "f32[8, 10]");
  OK(node(OP_LINEAR, 2, val("f32[2, 5, 64]"), val("f32[32, 64]")), "f32[2, 5, 32]");
  FAILS(node(OP_LINEAR, 2, val("f32[8, 784]"), val("f32[10, 512]")),
        "linear: input f32[8, 784] has 784 features but weight f32[10, 512] expects 512");
  FAILS(node(OP_LINEAR, 3, val("f32[8, 784]"), val("f32[10, 784]"), val("f32[784]")),
        "linear: bias must be f32[10] (one value per output feature), got f32[784]");
}
END_TEST

static Node *conv(const char *x, const char *w, int64_t stride, int64_t pad, int64_t dilation,
                  int64_t groups) {
  Node *n = node(OP_CONV2D, 2, val(x), val(w));
  ir_set_ints(g, n, "stride", INTS(stride, stride));
  ir_set_ints(g, n, "pad", INTS(pad, pad, pad, pad));
  ir_set_ints(g, n, "dilation", INTS(dilation, dilation));
  ir_set_int(g, n, "groups", groups);
  return n;
}

START_TEST(conv2d_shapes) {
  OK(conv("f32[1, 3, 224, 224]", "f32[64, 3, 7, 7]", 2, 3, 1, 1), "f32[1, 64, 112, 112]");
  OK(conv("f32[1, 3, 32, 32]", "f32[8, 3, 3, 3]", 1, 0, 2, 1), "f32[1, 8, 28, 28]");
  OK(conv("f32[1, 4, 8, 8]", "f32[6, 2, 3, 3]", 1, 0, 1, 2), "f32[1, 6, 6, 6]");
  OK(conv("f32[1, 32, 16, 16]", "f32[32, 1, 3, 3]", 1, 1, 1, 32), "f32[1, 32, 16, 16]");
  OK(conv("f32[1, 1, 7, 7]", "f32[1, 1, 3, 3]", 3, 0, 1, 1), "f32[1, 1, 2, 2]");
  /* Defaults and an asymmetric pad [top, left, bottom, right]. */
  Node *n = node(OP_CONV2D, 3, val("f32[2, 3, 10, 10]"), val("f32[4, 3, 3, 3]"), val("f32[4]"));
  OK(n, "f32[2, 4, 8, 8]");
  n = node(OP_CONV2D, 2, val("f32[2, 3, 10, 10]"), val("f32[4, 3, 3, 3]"));
  ir_set_ints(g, n, "pad", INTS(1, 0, 0, 2));
  OK(n, "f32[2, 4, 9, 10]");
}
END_TEST

START_TEST(conv2d_errors) {
  FAILS(conv("f32[8, 512]", "f32[4, 3, 3, 3]", 1, 0, 1, 1),
        "conv2d expects a 4-d input [N, C, H, W], got f32[8, 512]");
  FAILS(conv("f32[1, 1, 3, 3]", "f32[1, 1, 5, 5]", 1, 0, 1, 1),
        "conv2d: kernel height 5 (dilation 1) does not fit the input height 3 with padding 0+0: "
        "the output would be empty (empty tensors are not supported)");
  OK(conv("f32[1, 1, 3, 3]", "f32[1, 1, 5, 5]", 1, 1, 1, 1), "f32[1, 1, 1, 1]");
  FAILS(conv("f32[1, 6, 8, 8]", "f32[4, 2, 3, 3]", 1, 0, 1, 4),
        "conv2d: groups=4 must divide the input channels (6) and the output channels (4)");
  FAILS(conv("f32[1, 6, 32, 32]", "f32[64, 3, 3, 3]", 1, 0, 1, 1),
        "conv2d: weight f32[64, 3, 3, 3] expects 3 input channels per group, but input "
        "f32[1, 6, 32, 32] has 6 with groups=1");
  FAILS(conv("f32[1, 3, 8, 8]", "f32[4, 3, 3, 3]", 0, 0, 1, 1),
        "conv2d: stride values must be >= 1, got [0, 0]");
  Node *n = node(OP_CONV2D, 2, val("f32[1, 3, 8, 8]"), val("f32[4, 3, 3, 3]"));
  ir_set_ints(g, n, "pad", INTS(1, 1));
  FAILS(n, "conv2d: pad must have 4 values, got [1, 1]");
}
END_TEST

/* ---- windows ---- */

static Node *pool(OpKind op, int64_t len, int64_t k, int64_t s, int64_t pad, bool ceil) {
  char x[64];
  snprintf(x, sizeof x, "f32[1, 2, %lld, %lld]", (long long)len, (long long)len);
  Node *n = node(op, 1, val(x));
  ir_set_ints(g, n, "kernel", INTS(k, k));
  ir_set_ints(g, n, "stride", INTS(s, s));
  ir_set_ints(g, n, "pad", INTS(pad, pad, pad, pad));
  ir_set_int(g, n, "ceil_mode", ceil);
  return n;
}

/* Expected values are PyTorch's (nn.MaxPool2d / nn.AvgPool2d). */
START_TEST(pool_ceil_mode) {
  OK(pool(OP_MAXPOOL2D, 6, 3, 2, 0, true), "f32[1, 2, 3, 3]");
  OK(pool(OP_MAXPOOL2D, 6, 3, 2, 0, false), "f32[1, 2, 2, 2]");
  OK(pool(OP_MAXPOOL2D, 5, 2, 2, 0, true), "f32[1, 2, 3, 3]");
  OK(pool(OP_MAXPOOL2D, 5, 2, 2, 0, false), "f32[1, 2, 2, 2]");
  /* The last window would start in the right padding: dropped. */
  OK(pool(OP_MAXPOOL2D, 3, 2, 2, 1, true), "f32[1, 2, 2, 2]");
  OK(pool(OP_AVGPOOL2D, 4, 2, 2, 0, true), "f32[1, 2, 2, 2]");
  OK(pool(OP_MAXPOOL2D, 112, 3, 2, 1, false), "f32[1, 2, 56, 56]");
  OK(pool(OP_AVGPOOL2D, 7, 3, 3, 1, true), "f32[1, 2, 3, 3]");
}
END_TEST

START_TEST(pool_errors) {
  FAILS(pool(OP_MAXPOOL2D, 6, 3, 2, 2, false),
        "maxpool2d: padding height 2+2 is more than half the kernel height 3");
  FAILS(pool(OP_MAXPOOL2D, 2, 3, 1, 0, true),
        "maxpool2d: kernel height 3 (dilation 1) does not fit the input height 2 with padding "
        "0+0: the output would be empty (empty tensors are not supported)");
  Node *n = pool(OP_AVGPOOL2D, 4, 2, 2, 0, false);
  ir_set_int(g, n, "count_include_pad", 3);
  FAILS(n, "avgpool2d: count_include_pad must be 0 or 1, got 3");
  n = node(OP_MAXPOOL2D, 1, val("f32[1, 2, 4, 4]"));
  ir_set_ints(g, n, "kernel", INTS(2, 2));
  FAILS(n, "maxpool2d needs attribute 'stride'");
}
END_TEST

/* ---- data movement ---- */

START_TEST(reshape_shapes) {
  Node *n = node(OP_RESHAPE, 1, val("f32[8, 512]"));
  ir_set_ints(g, n, "shape", INTS(8, 2, 256));
  OK(n, "f32[8, 2, 256]");
  n = node(OP_RESHAPE, 1, val("f32[1, 1]"));
  ir_set_ints(g, n, "shape", 0, NULL);
  OK(n, "f32[]");
  n = node(OP_RESHAPE, 1, val("f32[8, 512]"));
  ir_set_ints(g, n, "shape", INTS(8, 256));
  FAILS(n, "reshape: cannot reshape f32[8, 512] (4096 elements) to [8, 256] (2048 elements)");
  n = node(OP_RESHAPE, 1, val("f32[8, 512]"));
  ir_set_ints(g, n, "shape", INTS(8, -2));
  FAILS(n, "reshape: shape [8, -2] has a negative dim");
  n = node(OP_RESHAPE, 1, val("f32[0, 512]"));
  ir_set_ints(g, n, "shape", INTS(8, 0, 3));
  OK(n, "f32[8, 0, 3]");
  n = node(OP_RESHAPE, 1, val("f32[8]"));
  ir_set_ints(g, n, "shape", INTS(1, 1, 1, 1, 1, 1, 1, 1, 8));
  FAILS(n, "reshape: shape [1, 1, 1, 1, 1, 1, 1, 1, 8] has rank 9, more than the supported 8");
}
END_TEST

START_TEST(transpose_perm) {
  Node *n = node(OP_TRANSPOSE, 1, val("f32[2, 3, 4]"));
  ir_set_ints(g, n, "perm", INTS(2, 0, 1));
  OK(n, "f32[4, 2, 3]");
  n = node(OP_TRANSPOSE, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "perm", INTS(0, 0));
  FAILS(n, "transpose: perm [0, 0] is not a permutation of 0..1 for f32[2, 3]");
  n = node(OP_TRANSPOSE, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "perm", INTS(1, 0, 2));
  FAILS(n, "transpose: perm [1, 0, 2] is not a permutation of 0..1 for f32[2, 3]");
}
END_TEST

START_TEST(expand_shapes) {
  Node *n = node(OP_EXPAND, 1, val("f32[3, 1]"));
  ir_set_ints(g, n, "shape", INTS(2, 3, 4));
  OK(n, "f32[2, 3, 4]");
  n = node(OP_EXPAND, 1, val("f32[3, 2]"));
  ir_set_ints(g, n, "shape", INTS(4, 3));
  FAILS(n, "expand: cannot expand f32[3, 2] to [4, 3]");
  n = node(OP_EXPAND, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "shape", INTS(3));
  FAILS(n, "expand: cannot expand f32[2, 3] to [3]");
}
END_TEST

START_TEST(concat_shapes) {
  Node *n = node(OP_CONCAT, 3, val("f32[2, 3]"), val("f32[2, 5]"), val("f32[2, 1]"));
  ir_set_int(g, n, "axis", 1);
  OK(n, "f32[2, 9]");
  n = node(OP_CONCAT, 1, val("f32[2, 3]"));
  ir_set_int(g, n, "axis", 0);
  OK(n, "f32[2, 3]");
  n = node(OP_CONCAT, 2, val("f32[2, 3]"), val("f32[3, 4]"));
  ir_set_int(g, n, "axis", 0);
  FAILS(n, "concat: operand 2 f32[3, 4] differs from operand 1 f32[2, 3] in dim 1 (only axis 0 may "
           "differ)");
  n = node(OP_CONCAT, 2, val("f32[2, 3]"), val("f16[2, 3]"));
  ir_set_int(g, n, "axis", 0);
  FAILS(n, "concat: dtype mismatch f32 vs f16 (operand 2)");
  n = node(OP_CONCAT, 2, val("f32[2, 3]"), val("f32[2, 3, 1]"));
  ir_set_int(g, n, "axis", 0);
  FAILS(n, "concat: operand 2 f32[2, 3, 1] has rank 3, operand 1 f32[2, 3] has rank 2");
}
END_TEST

START_TEST(slice_shapes) {
  Node *n = node(OP_SLICE, 1, val("f32[10, 8, 3]"));
  ir_set_ints(g, n, "starts", INTS(1, 0, 0));
  ir_set_ints(g, n, "ends", INTS(10, 8, 3));
  ir_set_ints(g, n, "steps", INTS(3, 2, 1));
  OK(n, "f32[3, 4, 3]");
  n = node(OP_SLICE, 1, val("f32[10]"));
  ir_set_ints(g, n, "starts", INTS(2));
  ir_set_ints(g, n, "ends", INTS(11));
  ir_set_ints(g, n, "steps", INTS(1));
  FAILS(n, "slice: range 2:11 is outside dim 0 of f32[10] (need 0 <= start <= end <= 10)");
  n = node(OP_SLICE, 1, val("f32[10]"));
  ir_set_ints(g, n, "starts", INTS(4));
  ir_set_ints(g, n, "ends", INTS(4));
  ir_set_ints(g, n, "steps", INTS(1));
  OK(n, "f32[0]");
  n = node(OP_SLICE, 1, val("f32[10, 2]"));
  ir_set_ints(g, n, "starts", INTS(0));
  ir_set_ints(g, n, "ends", INTS(4));
  ir_set_ints(g, n, "steps", INTS(1));
  FAILS(n, "slice: starts must have 2 values, got [0]");
}
END_TEST

START_TEST(pad_shapes) {
  Node *n = node(OP_PAD, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "pads", INTS(0, 1, 2, 3));
  OK(n, "f32[4, 7]");
  n = node(OP_PAD, 1, val("f32[2, 3]"));
  ir_set_ints(g, n, "pads", INTS(0, -1, 2, 3));
  FAILS(n, "pad: pads values must be >= 0, got [0, -1, 2, 3]");
}
END_TEST

START_TEST(gather_ranks) {
  Node *n = node(OP_GATHER, 2, val("f32[5, 4]"), val("i64[2, 3]"));
  OK(n, "f32[2, 3, 4]");
  n = node(OP_GATHER, 2, val("f32[5, 4]"), val("i32[2, 3]"));
  ir_set_int(g, n, "axis", 1);
  OK(n, "f32[5, 2, 3]");
  OK(node(OP_GATHER, 2, val("f32[5, 4]"), val("i64[]")), "f32[4]");
  OK(node(OP_GATHER, 2, val("f32[5]"), val("i64[]")), "f32[]");
  FAILS(node(OP_GATHER, 2, val("f32[5, 4]"), val("f32[2]")),
        "gather needs i32 or i64 indices, got f32[2]");
  FAILS(node(OP_GATHER, 2, val("f32[]"), val("i64[2]")), "gather needs data of rank >= 1, got f32[]");
  FAILS(node(OP_GATHER, 2, val("f32[2, 2, 2, 2, 2, 2, 2]"), val("i64[1, 1, 1]")),
        "gather: data f32[2, 2, 2, 2, 2, 2, 2] with indices i64[1, 1, 1] gives rank 9, more than "
        "the supported 8");
}
END_TEST

/* ---- recurrent layers ---- */

/* x then PyTorch-ordered parameters for the given configuration; the
 * operand at index `wrong` (if > 0) gets one row too few. */
static Node *recurrent(OpKind op, const char *x, int64_t in, int64_t hidden, int layers, bool bidir,
                       bool bias, int wrong) {
  int64_t gh = (op == OP_LSTM ? 4 : 3) * hidden;
  int dirs = bidir ? 2 : 1;
  Value *ins[64];
  int k = 0;
  ins[k++] = val(x);
  for (int l = 0; l < layers; l++)
    for (int d = 0; d < dirs; d++) {
      int64_t shapes[4][2] = {{gh, l ? hidden * dirs : in}, {gh, hidden}, {gh, 0}, {gh, 0}};
      for (int p = 0; p < (bias ? 4 : 2); p++) {
        char t[64];
        int64_t rows = shapes[p][0] - (k == wrong);
        if (p < 2)
          snprintf(t, sizeof t, "f32[%lld, %lld]", (long long)rows, (long long)shapes[p][1]);
        else
          snprintf(t, sizeof t, "f32[%lld]", (long long)rows);
        ins[k++] = val(t);
      }
    }
  SrcLoc loc = {0};
  Node *n = ir_node_new(g, op, k, ins, loc);
  ir_set_int(g, n, "hidden", hidden);
  ir_set_int(g, n, "layers", layers);
  ir_set_int(g, n, "bidirectional", bidir);
  ir_set_int(g, n, "bias", bias);
  return n;
}

START_TEST(lstm_shapes) {
  Node *n = recurrent(OP_LSTM, "f32[4, 10, 8]", 8, 16, 1, false, true, 0);
  OK(n, "f32[4, 10, 16]");
  ck_assert_str_eq(type_of(n, 1), "f32[1, 4, 16]");
  ck_assert_str_eq(type_of(n, 2), "f32[1, 4, 16]");
  n = recurrent(OP_LSTM, "f32[10, 4, 8]", 8, 16, 2, true, true, 0);
  ir_set_int(g, n, "batch_first", 0);
  OK(n, "f32[10, 4, 32]");
  ck_assert_int_eq(n->n_in, 17);
  ck_assert_str_eq(type_of(n, 1), "f32[4, 4, 16]");
  ck_assert_str_eq(type_of(n, 2), "f32[4, 4, 16]");
}
END_TEST

/* lstm_bptt: p's type in both layouts, each operand's type named. */
START_TEST(lstm_bptt_shapes) {
  OK(node(OP_LSTM_BPTT, 6, val("f32[5, 3, 16]"), val("f32[5, 3, 16]"), val("f32[16, 4]"), val("f32[5, 3, 4]"),
          val("f32[3, 4]"), val("f32[3, 4]")),
     "f32[5, 3, 16]");
  Node *n = node(OP_LSTM_BPTT, 6, val("f32[3, 5, 16]"), val("f32[3, 5, 16]"), val("f32[16, 4]"), val("f32[3, 5, 4]"),
                 val("f32[3, 4]"), val("f32[3, 4]"));
  ir_set_int(g, n, "batch_first", 1);
  OK(n, "f32[3, 5, 16]");
  FAILS(node(OP_LSTM_BPTT, 6, val("f32[5, 3, 15]"), val("f32[5, 3, 15]"), val("f32[16, 4]"), val("f32[5, 3, 4]"),
             val("f32[3, 4]"), val("f32[3, 4]")),
        "lstm_bptt expects px [T, N, 4H], got f32[5, 3, 15]");
  FAILS(node(OP_LSTM_BPTT, 6, val("f32[5, 3, 16]"), val("f32[5, 3, 16]"), val("f32[4, 16]"), val("f32[5, 3, 4]"),
             val("f32[3, 4]"), val("f32[3, 4]")),
        "lstm_bptt: w_hh must be f32[16, 4], got f32[4, 16]");
  FAILS(node(OP_LSTM_BPTT, 6, val("f32[5, 3, 16]"), val("f32[5, 3, 16]"), val("f32[16, 4]"), val("f32[5, 3, 4]"),
             val("f32[5, 4]"), val("f32[3, 4]")),
        "lstm_bptt: dh_n must be f32[3, 4], got f32[5, 4]");
}
END_TEST

/* A conv-transpose's empty kernel is an error, not arithmetic on a
 * kernel extent of -1 (fuzz_ir found the signed overflow). */
START_TEST(conv_transpose_empty_kernel) {
  FAILS(node(OP_CONV_TRANSPOSE3D, 3, val("f32[1, 3, 2, 3, 3]"), val("f32[3, 3, 1, 0, 1]"), val("f32[3]")),
        "conv_transpose3d: weight f32[3, 3, 1, 0, 1] has an empty kernel (empty tensors are not supported)");
  FAILS(node(OP_CONV_TRANSPOSE2D, 2, val("f32[1, 3, 4, 4]"), val("f32[3, 2, 0, 2]")),
        "conv_transpose2d: weight f32[3, 2, 0, 2] has an empty kernel (empty tensors are not supported)");
}
END_TEST

/* gru_bptt: two results of p's type; hprev is a sequence, not a state. */
START_TEST(gru_bptt_shapes) {
  Node *n = node(OP_GRU_BPTT, 6, val("f32[5, 3, 12]"), val("f32[5, 3, 12]"), val("f32[12, 4]"), val("f32[5, 3, 4]"),
                 val("f32[3, 4]"), val("f32[5, 3, 4]"));
  OK(n, "f32[5, 3, 12]");
  ck_assert_str_eq(type_of(n, 1), "f32[5, 3, 12]");
  FAILS(node(OP_GRU_BPTT, 6, val("f32[5, 3, 16]"), val("f32[5, 3, 16]"), val("f32[16, 4]"), val("f32[5, 3, 4]"),
             val("f32[3, 4]"), val("f32[5, 3, 4]")),
        "gru_bptt expects px [T, N, 3H], got f32[5, 3, 16]");
  FAILS(node(OP_GRU_BPTT, 6, val("f32[5, 3, 12]"), val("f32[5, 3, 12]"), val("f32[12, 4]"), val("f32[5, 3, 4]"),
             val("f32[3, 4]"), val("f32[3, 4]")),
        "gru_bptt: hprev must be f32[5, 3, 4], got f32[3, 4]");
}
END_TEST

START_TEST(gru_shapes) {
  Node *n = recurrent(OP_GRU, "f32[3, 7, 5]", 5, 6, 3, true, false, 0);
  OK(n, "f32[3, 7, 12]");
  ck_assert_int_eq(n->n_in, 13);
  ck_assert_str_eq(type_of(n, 1), "f32[6, 3, 6]");
}
END_TEST

START_TEST(recurrent_errors) {
  /* Operand 10 is layer 1's forward w_ih, which reads both directions of layer 0. */
  Node *n = recurrent(OP_LSTM, "f32[4, 10, 8]", 8, 16, 2, true, true, 9);
  FAILS(n, "lstm: weight_ih_l1 (operand 10) must be f32[64, 32], got f32[63, 32]");
  n = recurrent(OP_GRU, "f32[4, 10, 8]", 8, 16, 1, true, true, 8);
  FAILS(n, "gru: bias_hh_l0_reverse (operand 9) must be f32[48], got f32[47]");
  n = recurrent(OP_LSTM, "f32[4, 10, 8]", 8, 16, 1, false, true, 0);
  ir_set_int(g, n, "layers", 2);
  FAILS(n, "lstm with layers=2, bidirectional=0, bias=1 takes 9 operands (x and 8 parameters), "
           "got 5");
  n = recurrent(OP_LSTM, "f32[4, 10]", 8, 16, 1, false, true, 0);
  FAILS(n, "lstm expects a 3-d input [N, T, I] (batch_first=1), got f32[4, 10]");
  n = recurrent(OP_LSTM, "f32[4, 10, 8]", 8, 16, 1, false, true, 0);
  ir_set_int(g, n, "layers", INT64_MAX);
  FAILS(n, "lstm: layers=9223372036854775807 is too large");
  n = recurrent(OP_LSTM, "f32[4, 10, 8]", 8, 16, 1, false, true, 0);
  ir_set_int(g, n, "hidden", INT64_MAX / 2);
  FAILS(n, "lstm: hidden=4611686018427387903 is too large");
}
END_TEST

/* ---- absurd sizes and malformed attributes ---- */

START_TEST(overflow_is_an_error) {
  FAILS(node(OP_ADD, 2, val("f32[1099511627776, 1]"), val("f32[1, 1099511627776]")),
        "add result f32[1099511627776, 1099511627776] is larger than 1099511627776 elements");
  FAILS(node(OP_MATMUL, 2, val("f32[1099511627776, 1]"), val("f32[1, 1099511627776]")),
        "matmul result f32[1099511627776, 1099511627776] is larger than 1099511627776 elements");
  FAILS(node(OP_RELU, 1, val("f32[4611686018427387904]")),
        "relu: operand 1 has type f32[4611686018427387904], larger than 1099511627776 elements");
  OK(node(OP_RELU, 1, val("f32[3, 0]")), "f32[3, 0]");
  Node *n = node(OP_RESHAPE, 1, val("f32[8]"));
  ir_set_ints(g, n, "shape", INTS(1099511627776, 1099511627776));
  FAILS(n, "reshape: cannot reshape f32[8] (8 elements) to [1099511627776, 1099511627776] (more "
           "than 1099511627776 elements)");
  n = node(OP_PAD, 1, val("f32[2]"));
  ir_set_ints(g, n, "pads", INTS(INT64_MAX, 1));
  FAILS(n, "pad: dim 0 of f32[2] padded by 9223372036854775807+1 is too large");
  n = conv("f32[1, 1, 4, 4]", "f32[1, 1, 3, 3]", 1, INT64_MAX, 1, 1);
  ck_assert(!run(n));
  n = conv("f32[1, 1, 4, 4]", "f32[1, 1, 3, 3]", 1, 0, INT64_MAX, 1);
  ck_assert(!run(n));
  n = conv("f32[1, 1, 4, 4]", "f32[1, 1, 3, 3]", INT64_MAX, 1, 1, 1);
  OK(n, "f32[1, 1, 1, 1]");
  n = pool(OP_MAXPOOL2D, 6, 3, INT64_MAX, 1, true);
  OK(n, "f32[1, 2, 1, 1]");
  n = node(OP_SLICE, 1, val("f32[10]"));
  ir_set_ints(g, n, "starts", INTS(0));
  ir_set_ints(g, n, "ends", INTS(10));
  ir_set_ints(g, n, "steps", INTS(INT64_MAX));
  OK(n, "f32[1]");
}
END_TEST

START_TEST(malformed_attributes) {
  Node *n = node(OP_SOFTMAX, 1, val("f32[2, 3]"));
  err[0] = 0;
  ck_assert(!ir_infer(n, err, sizeof err));
  ck_assert_str_eq(err, "softmax needs attribute 'axis'");
  /* The IR parser may attach a value of the wrong kind. */
  Attr bad = {.name = "axis", .kind = AK_FLOAT, .f = 1.0};
  n->attrs = &bad;
  n->n_attrs = 1;
  ck_assert(!ir_infer(n, err, sizeof err));
  ck_assert_str_eq(err, "softmax: attribute 'axis' must be an integer");
  Attr bad_axes = {.name = "axes", .kind = AK_INT, .i = 0};
  n = node(OP_REDUCE_SUM, 1, val("f32[2, 3]"));
  n->attrs = &bad_axes;
  n->n_attrs = 1;
  ck_assert(!ir_infer(n, err, sizeof err));
  ck_assert_str_eq(err, "reduce_sum: attribute 'axes' must be a list of integers");
}
END_TEST

static Suite *shape_suite(void) {
  Suite *s = suite_create("shape");
  TCase *tc = tcase_create("rules");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, unary_keeps_type);
  tcase_add_test(tc, unary_float_rejects_int);
  tcase_add_test(tc, cast_changes_dtype);
  tcase_add_test(tc, binary_broadcasts);
  tcase_add_test(tc, binary_errors);
  tcase_add_test(tc, reduce_keepdims);
  tcase_add_test(tc, reduce_all_axes_gives_scalar);
  tcase_add_test(tc, reduce_bad_axes);
  tcase_add_test(tc, argmax_gives_i64);
  tcase_add_test(tc, softmax_and_layernorm);
  tcase_add_test(tc, global_pool_and_batchnorm);
  tcase_add_test(tc, matmul_shapes);
  tcase_add_test(tc, matmul_errors);
  tcase_add_test(tc, linear_shapes);
  tcase_add_test(tc, conv2d_shapes);
  tcase_add_test(tc, conv2d_errors);
  tcase_add_test(tc, pool_ceil_mode);
  tcase_add_test(tc, pool_errors);
  tcase_add_test(tc, reshape_shapes);
  tcase_add_test(tc, transpose_perm);
  tcase_add_test(tc, expand_shapes);
  tcase_add_test(tc, concat_shapes);
  tcase_add_test(tc, slice_shapes);
  tcase_add_test(tc, pad_shapes);
  tcase_add_test(tc, gather_ranks);
  tcase_add_test(tc, lstm_shapes);
  tcase_add_test(tc, gru_shapes);
  tcase_add_test(tc, lstm_bptt_shapes);
  tcase_add_test(tc, gru_bptt_shapes);
  tcase_add_test(tc, conv_transpose_empty_kernel);
  tcase_add_test(tc, recurrent_errors);
  tcase_add_test(tc, overflow_is_an_error);
  tcase_add_test(tc, malformed_attributes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(shape_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
