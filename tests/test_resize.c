/* Check suite for ONNX's Resize and GridSample: the tables the importer
 * computes for Resize (nearest modes, linear with align_corners, cubic
 * with cubic_coeff_a and exclude_outside, antialias, axes, roi with
 * extrapolation, integer inputs, Resize-10's rounding), the operands it
 * reads as not given and its errors; what grid_sample means (values
 * worked out by hand for each mode and padding); the generated kernels
 * on emu against ir_eval, NVRTC for sm_80 and sm_90, and the language's
 * grid_sample builtin. */
#include "config.h"

#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "tests/testutil.h"

#if HAVE_ONNX
#include "tests/onnxbuild.h"
#endif

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (const Node *x = g->first; x; x = x->next) n += x->op == op;
  return n;
}

static const Node *first_op(const Graph *g, OpKind op) {
  for (const Node *x = g->first; x; x = x->next)
    if (x->op == op) return x;
  return NULL;
}

static void expect_near(const Tensor *t, const double *want, int n, double tol, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(ir_tensor_get(t, i) - want[i]) <= tol, "%s[%d] is %.9g, expected %.9g", what, i,
                  ir_tensor_get(t, i), want[i]);
}

/* Keys' cubic convolution kernel, written out independently of the
 * importer. */
static double keys(double a, double t) {
  t = fabs(t);
  if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
  if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
  return 0;
}

/* ---- ONNX import: the tables ---- */

#if HAVE_ONNX

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

static Graph *import(Model *b) {
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  ir_tensor_map_free(&params);
  return fe_onnx_import_bytes(&ctx, "/tmp/resize.onnx", buf, len, NULL, &params);
}

static Graph *must_import(Model *b) {
  Graph *g = import(b);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  return g;
}

static void expect_error(Model *b, const char *want) {
  ck_assert_msg(import(b) == NULL, "imported, expected an error with '%s'", want);
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

/* The data of the param that is operand i of n. */
static const Tensor *param_of(const Node *n, int i) {
  ck_assert_ptr_nonnull(n);
  const Node *d = n->in[i]->def;
  ck_assert_int_eq(d->op, OP_PARAM);
  const Tensor *t = ir_tensor_map_find(&params, ir_attr_str(d, "name"));
  ck_assert_ptr_nonnull(t);
  return t;
}

/* Resize of a float X [1, 1, 1, w] to `out` along the last axis, by
 * sizes; attrs set by the caller on the returned node. */
static Onnx__NodeProto *resize_row(Model *b, int64_t w, int64_t out) {
  add_input(b, "x", 4, (const int64_t[]){1, 1, 1, w});
  add_init_i64(b, "sizes", 4, (const int64_t[]){1, 1, 1, out});
  Onnx__NodeProto *n = add_node(b, "Resize", "x,,,sizes", "y");
  add_output(b, "y");
  return n;
}

static Tensor run_row(Graph *g, int64_t w, const float *x) {
  int64_t dims[4] = {1, 1, 1, w};
  Tensor in = {ir_type_make(TY_F32, 4, dims), (void *)x};
  TensorMap inputs = {1, (const char *[]){"x"}, &in};
  Tensor out;
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, &out, err, sizeof err), "eval: %s", err);
  return out;
}

/* Nearest: one gather per resized axis and nothing else; 4 -> 3 with
 * half_pixel puts the sources at 1/6, 1.5 and 17/6. */
static void expect_nearest(const char *coord, const char *mode, const int64_t *want) {
  Model *b = model_new(13);
  Onnx__NodeProto *n = resize_row(b, 4, 3);
  attr_s(n, "coordinate_transformation_mode", coord);
  attr_s(n, "nearest_mode", mode);
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_GATHER), 1);
  ck_assert_int_eq(count_op(g, OP_REDUCE_SUM), 0);
  const Node *gather = first_op(g, OP_GATHER);
  ck_assert_int_eq(ir_attr_int(gather, "axis"), 3);
  const Tensor *idx = param_of(gather, 1);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(ir_tensor_get(idx, i) == (double)want[i], "%s %s: source %d is %g, expected %lld", coord,
                  mode, i, ir_tensor_get(idx, i), (long long)want[i]);
}

START_TEST(nearest_tables) {
  expect_nearest("half_pixel", "round_prefer_floor", (const int64_t[]){0, 1, 3});
  expect_nearest("half_pixel", "round_prefer_ceil", (const int64_t[]){0, 2, 3});
  expect_nearest("half_pixel", "floor", (const int64_t[]){0, 1, 2});
  expect_nearest("half_pixel", "ceil", (const int64_t[]){1, 2, 3});
  /* 0, 4/3, 8/3; and align_corners' 0, 1.5, 3 */
  expect_nearest("asymmetric", "round_prefer_floor", (const int64_t[]){0, 1, 3});
  expect_nearest("align_corners", "round_prefer_floor", (const int64_t[]){0, 1, 3});
  expect_nearest("align_corners", "round_prefer_ceil", (const int64_t[]){0, 2, 3});
  /* (o + 0.5) * 4/3: 2/3, 2, 10/3 */
  expect_nearest("tf_half_pixel_for_nn", "floor", (const int64_t[]){0, 2, 3});
}
END_TEST

/* align_corners 3 -> 5 lands on 0, 0.5, 1, 1.5, 2: two taps each, the
 * left one weighing nothing where the point is whole. */
START_TEST(linear_align_corners_table) {
  Model *b = model_new(13);
  Onnx__NodeProto *n = resize_row(b, 3, 5);
  attr_s(n, "mode", "linear");
  attr_s(n, "coordinate_transformation_mode", "align_corners");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_REDUCE_SUM), 1);
  const Tensor *idx = param_of(first_op(g, OP_GATHER), 1), *w = param_of(first_op(g, OP_MUL), 1);
  expect_near(idx, (const double[]){0, 0, 0, 1, 0, 1, 1, 2, 1, 2}, 10, 0, "indices");
  expect_near(w, (const double[]){0, 1, 0.5, 0.5, 0, 1, 0.5, 0.5, 0, 1}, 10, 0, "weights");
  Tensor y = run_row(g, 3, (const float[]){1, 2, 4});
  expect_near(&y, (const double[]){1, 1.5, 2, 3, 4}, 5, 1e-6, "y");
  ir_tensor_free(&y);
}
END_TEST

/* Cubic 4 -> 8 (half_pixel): output 1 sits at 0.25, its taps at -1 (the
 * edge), 0, 1, 2.  exclude_outside drops the tap outside and scales the
 * rest back to a sum of 1. */
START_TEST(cubic_tables) {
  for (int exclude = 0; exclude < 2; exclude++) {
    Model *b = model_new(13);
    Onnx__NodeProto *n = resize_row(b, 4, 8);
    attr_s(n, "mode", "cubic");
    attr_f(n, "cubic_coeff_a", -0.5f);
    attr_i(n, "exclude_outside", exclude);
    Graph *g = must_import(b);
    const Tensor *idx = param_of(first_op(g, OP_GATHER), 1), *w = param_of(first_op(g, OP_MUL), 1);
    ck_assert_int_eq(ir_type_numel(&idx->type), 8 * 4);
    double k[4] = {keys(-0.5, 1.25), keys(-0.5, 0.25), keys(-0.5, 0.75), keys(-0.5, 1.75)};
    if (exclude) {
      double sum = k[1] + k[2] + k[3];
      k[0] = 0, k[1] /= sum, k[2] /= sum, k[3] /= sum;
    }
    static const double rows[8] = {0, 0, 0, 1, 0, 0, 1, 2}; /* outputs 0 and 1 */
    for (int t = 0; t < 8; t++) ck_assert_int_eq(ir_tensor_get(idx, t), rows[t]);
    for (int t = 0; t < 4; t++)
      ck_assert_msg(fabs(ir_tensor_get(w, 4 + t) - k[t]) < 1e-7, "exclude=%d tap %d: %g, expected %g", exclude,
                    t, ir_tensor_get(w, 4 + t), k[t]);
  }
}
END_TEST

/* Antialias stretches the tent to 1 / scale: 4 -> 2 weighs four taps
 * 1/8, 3/8, 3/8, 1/8 around 0.5 and 2.5. */
START_TEST(antialias_table) {
  Model *b = model_new(18);
  Onnx__NodeProto *n = resize_row(b, 4, 2);
  attr_s(n, "mode", "linear");
  attr_i(n, "antialias", 1);
  Graph *g = must_import(b);
  const Tensor *idx = param_of(first_op(g, OP_GATHER), 1), *w = param_of(first_op(g, OP_MUL), 1);
  expect_near(idx, (const double[]){0, 0, 1, 2, 1, 2, 3, 3}, 8, 0, "indices");
  expect_near(w, (const double[]){0.125, 0.375, 0.375, 0.125, 0.125, 0.375, 0.375, 0.125}, 8, 1e-12, "weights");
  Tensor y = run_row(g, 4, (const float[]){8, 0, 16, 0});
  expect_near(&y, (const double[]){8 * 0.5 + 16 * 0.125, 16 * 0.375}, 2, 1e-5, "y");
  ir_tensor_free(&y);
}
END_TEST

/* Only the axes that change get ops: opset 18's axes, and N and C at
 * scale 1. */
START_TEST(axes_and_identity) {
  Model *b = model_new(18);
  add_input(b, "x", 4, (const int64_t[]){2, 3, 4, 5});
  add_init_f32(b, "scales", 1, (const int64_t[]){1}, 1, (const float[]){2});
  attr_is(add_node(b, "Resize", "x,,scales", "y"), "axes", 1, (const int64_t[]){-2});
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_GATHER), 1);
  ck_assert_int_eq(ir_attr_int(first_op(g, OP_GATHER), "axis"), 2);
  ck_assert_int_eq(g->outputs[0]->type.dims[2], 8);
  pool_free();
  b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){2, 3, 4, 5});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 0.5f, 1.5f});
  attr_s(add_node(b, "Resize", "x,,scales", "y"), "mode", "linear");
  add_output(b, "y");
  g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_GATHER), 2);
  /* floor(5 * 1.5) */
  ck_assert_int_eq(g->outputs[0]->type.dims[3], 7);
}
END_TEST

/* tf_crop_and_resize: roi [-0.5, 0.5] of 3 puts the outputs at -1, 0
 * and 1; the first is outside and takes extrapolation_value. */
START_TEST(crop_and_extrapolate) {
  Model *b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 1, 3});
  add_init_f32(b, "roi", 1, (const int64_t[]){8}, 8, (const float[]){0, 0, 0, -0.5f, 1, 1, 1, 0.5f});
  add_init_i64(b, "sizes", 4, (const int64_t[]){1, 1, 1, 3});
  Onnx__NodeProto *n = add_node(b, "Resize", "x,roi,,sizes", "y");
  attr_s(n, "mode", "linear");
  attr_s(n, "coordinate_transformation_mode", "tf_crop_and_resize");
  attr_f(n, "extrapolation_value", -7);
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_WHERE), 1);
  Tensor y = run_row(g, 3, (const float[]){1, 2, 4});
  expect_near(&y, (const double[]){-7, 1, 2}, 3, 1e-6, "y");
  ir_tensor_free(&y);
}
END_TEST

/* PyTorch's opset-11 exports give roi (and scales, next to sizes) as
 * empty Constants: those mean not given.  Any other op refuses one. */
START_TEST(empty_operands) {
  Model *b = model_new(11);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 2, 2});
  for (int i = 0; i < 2; i++) {
    Onnx__NodeProto *c = add_node(b, "Constant", "", i ? "scales" : "roi");
    attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        tensor("empty", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){0});
  }
  add_init_i64(b, "sizes", 4, (const int64_t[]){1, 1, 4, 4});
  add_node(b, "Resize", "x,roi,scales,sizes", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_int_eq(g->outputs[0]->type.dims[3], 4);
  pool_free();
  b = model_new(13);
  add_input(b, "x", 1, (const int64_t[]){2});
  add_init_f32(b, "e", 1, (const int64_t[]){0}, 0, NULL);
  add_node(b, "Add", "x,e", "y");
  add_output(b, "y");
  /* Elsewhere an empty tensor is a tensor: [2] and [0] do not broadcast. */
  expect_error(b, "(Add): add: cannot broadcast f32[2] with f32[0]");
}
END_TEST

/* A u8 image blends in f32 and is truncated back, as onnxruntime does:
 * 0 and 255 at -0.25, 0.25, 0.75, 1.25 give 0, 63.75, 191.25, 255. */
START_TEST(integer_input) {
  Model *b = model_new(13);
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 4, (const int64_t[]){1, 1, 1, 2});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 1, 2});
  attr_s(add_node(b, "Resize", "x,,scales", "y"), "mode", "linear");
  add_output(b, "y");
  Graph *g = must_import(b);
  ck_assert_int_eq(g->outputs[0]->type.dtype, TY_U8);
  TensorType t = ir_type_make(TY_U8, 4, (const int64_t[]){1, 1, 1, 2});
  Tensor in = {t, (uint8_t[]){0, 255}}, y;
  TensorMap inputs = {1, (const char *[]){"x"}, &in};
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "%s", err);
  expect_near(&y, (const double[]){0, 63, 191, 255}, 4, 0, "y");
  ir_tensor_free(&y);
}
END_TEST

/* Resize-10 has no nearest_mode: onnxruntime takes the ceiling when
 * downscaling (x / 0.6 = 0, 5/3, 10/3, 5, 20/3, 25/3) and floors
 * upscaling, as Upsample does. */
START_TEST(resize10_rounding) {
  Model *b = model_new(10);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 1, 10});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 1, 0.6f});
  add_node(b, "Resize", "x,scales", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  expect_near(param_of(first_op(g, OP_GATHER), 1), (const double[]){0, 2, 4, 5, 7, 9}, 6, 0, "down");
  pool_free();
  b = model_new(9);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 1, 2});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 1, 2.5f});
  add_node(b, "Upsample", "x,scales", "y");
  add_output(b, "y");
  g = must_import(b);
  expect_near(param_of(first_op(g, OP_GATHER), 1), (const double[]){0, 0, 0, 1, 1}, 5, 0, "up");
}
END_TEST

static Model *resize_with(const char *attr_name, const char *value) {
  Model *b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 4, 4});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 2, 2});
  Onnx__NodeProto *n = add_node(b, "Resize", "x,,scales", "y");
  if (attr_name) attr_s(n, attr_name, value);
  add_output(b, "y");
  return b;
}

START_TEST(resize_errors) {
  expect_error(resize_with("mode", "area"), "(Resize): mode='area' is not one of ONNX's (nearest, linear, cubic)");
  expect_error(resize_with("coordinate_transformation_mode", "centre"),
               "coordinate_transformation_mode='centre' is not one of ONNX's");
  expect_error(resize_with("nearest_mode", "up"), "nearest_mode='up' is not one of ONNX's");
  Model *b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 4, 4});
  add_input(b, "s", 1, (const int64_t[]){4});
  add_node(b, "Resize", "x,,s", "y");
  add_output(b, "y");
  expect_error(b, "the scales computed at run time is not supported");
  b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 4, 4});
  add_init_f32(b, "scales", 1, (const int64_t[]){2}, 2, (const float[]){2, 2});
  add_node(b, "Resize", "x,,scales", "y");
  add_output(b, "y");
  expect_error(b, "the scales need 4 values, one per axis");
  b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 4, 4});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 0.2f, 1});
  add_node(b, "Resize", "x,,scales", "y");
  add_output(b, "y");
  expect_error(b, "scale 0.2 on dim 2 of 4 gives an empty output");
  b = model_new(13);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 4, 4});
  add_init_f32(b, "scales", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 2, 2});
  add_init_i64(b, "sizes", 4, (const int64_t[]){1, 1, 8, 8});
  add_node(b, "Resize", "x,,scales,sizes", "y");
  add_output(b, "y");
  expect_error(b, "both scales and sizes are given");
}
END_TEST

START_TEST(grid_sample_import) {
  Model *b = model_new(20);
  add_input(b, "x", 4, (const int64_t[]){1, 2, 3, 4});
  add_input(b, "grid", 4, (const int64_t[]){1, 5, 6, 2});
  Onnx__NodeProto *n = add_node(b, "GridSample", "x,grid", "y");
  attr_s(n, "mode", "cubic");
  attr_s(n, "padding_mode", "border");
  attr_i(n, "align_corners", 1);
  add_output(b, "y");
  Graph *g = must_import(b);
  const Node *s = first_op(g, OP_GRID_SAMPLE);
  ck_assert_ptr_nonnull(s);
  ck_assert_str_eq(ir_attr_str(s, "mode"), "bicubic");
  ck_assert_str_eq(ir_attr_str(s, "padding_mode"), "border");
  ck_assert_int_eq(ir_attr_int(s, "align_corners"), 1);
  ck_assert_int_eq(g->outputs[0]->type.dims[2], 5);
  ck_assert_int_eq(g->outputs[0]->type.dims[3], 6);
  pool_free();
  b = model_new(16);
  add_input(b, "x", 4, (const int64_t[]){1, 2, 3, 4});
  add_input(b, "grid", 4, (const int64_t[]){1, 5, 6, 2});
  attr_s(add_node(b, "GridSample", "x,grid", "y"), "padding_mode", "mirror");
  add_output(b, "y");
  expect_error(b, "padding_mode must be \"zeros\", \"border\" or \"reflection\", got \"mirror\"");
}
END_TEST

#endif /* HAVE_ONNX */

/* ---- grid_sample's meaning ---- */

/* One grid_sample of x [1, 1, 2, 3] = [[1, 2, 3], [4, 5, 6]] at the
 * given points (x, y pairs). */
static Tensor sample(const char *mode, const char *pad, int align, int n, const float *points) {
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_graph_new(&c, "gs");
  TensorType xt = ir_type_make(TY_F32, 4, (const int64_t[]){1, 1, 2, 3});
  TensorType gt = ir_type_make(TY_F32, 4, (const int64_t[]){1, 1, n, 2});
  Value *x = &ir_source(g, OP_INPUT, &xt, "x", (SrcLoc){0})->out[0];
  Value *grid = &ir_source(g, OP_INPUT, &gt, "grid", (SrcLoc){0})->out[0];
  Node *s = ir_node_new(g, OP_GRID_SAMPLE, 2, (Value *[]){x, grid}, (SrcLoc){0});
  ir_set_str(g, s, "mode", mode);
  ir_set_str(g, s, "padding_mode", pad);
  ir_set_int(g, s, "align_corners", align);
  char err[256];
  ck_assert_msg(ir_infer(s, err, sizeof err), "%s", err);
  ir_append(g, s);
  ir_set_outputs(g, 1, (Value *[]){&s->out[0]}, (const char *[]){"y"});
  Tensor in[2] = {{x->type, (float[]){1, 2, 3, 4, 5, 6}}, {grid->type, (void *)points}}, y;
  TensorMap inputs = {2, (const char *[]){"x", "grid"}, in};
  ck_assert_msg(ir_eval(g, &inputs, NULL, &y, err, sizeof err), "%s", err);
  ctx_free(&c);
  return y;
}

static void expect_sample(const char *mode, const char *pad, int align, int n, const float *points,
                          const double *want) {
  Tensor y = sample(mode, pad, align, n, points);
  char what[64];
  snprintf(what, sizeof what, "%s %s align=%d", mode, pad, align);
  expect_near(&y, want, n, 1e-5, what);
  ir_tensor_free(&y);
}

START_TEST(grid_sample_by_hand) {
  /* Without align_corners (0, 0) is the point (1, 0.5), (-1, -1) the
   * corner (-0.5, -0.5), a quarter of pixel 1; with it (1, 1) is pixel 6. */
  expect_sample("bilinear", "zeros", 0, 2, (const float[]){0, 0, -1, -1}, (const double[]){3.5, 0.25});
  expect_sample("bilinear", "zeros", 1, 2, (const float[]){1, 1, -1, 0}, (const double[]){6, 2.5});
  /* x = -1.5 is the point -1.25: border reads column 0 twice (2.5 down
   * the middle); reflection reads column 1 at 1/4 and column 0 at 3/4. */
  expect_sample("bilinear", "border", 0, 1, (const float[]){-1.5f, 0}, (const double[]){2.5});
  expect_sample("bilinear", "reflection", 0, 1, (const float[]){-1.5f, 0}, (const double[]){0.25 * 3.5 + 0.75 * 2.5});
  /* Nearest rounds the point (1.3, 0.5) half to even: pixel (0, 1); the
   * row 1.5 rounds to 2, outside: 0 with zeros, row 1 with border. */
  expect_sample("nearest", "zeros", 0, 2, (const float[]){0.2f, 0, 0.2f, 1}, (const double[]){2, 0});
  expect_sample("nearest", "border", 0, 1, (const float[]){0.2f, 1}, (const double[]){5});
  /* Bicubic on a pixel (align_corners: (0, 1) is pixel (1, 1)) is the
   * pixel; at (1.5, 0) only row 0 counts, where 1, 2, 3 and a zero past
   * the edge weigh k(1.5), k(0.5), k(0.5), k(1.5). */
  double half = keys(-0.75, 1.5) * 1 + keys(-0.75, 0.5) * 2 + keys(-0.75, 0.5) * 3;
  expect_sample("bicubic", "zeros", 1, 2, (const float[]){0, 1, 0.5f, -1}, (const double[]){5, half});
}
END_TEST

/* ---- codegen: emu against ir_eval, NVRTC ---- */

typedef struct Job {
  const char *text;
  Graph *g;
  CgResult cg;
  bool ok;
} Job;

static int compile_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  j->ok = j->g && ir_verify(j->g) && cg_compile(j->g, &j->cg);
  return 0;
}

/* Random inputs for every input of g: grids in [-1.3, 1.3] (some points
 * outside), everything else in [-2, 2). */
static void random_inputs(Graph *g, uint64_t seed, TensorMap *m, Tensor *t, const char **names) {
  m->n = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    const char *name = ir_attr_str(n, "name");
    double span = strcmp(name, "grid") == 0 ? 1.3 : 2;
    ck_assert(ir_tensor_alloc(&t[m->n], &n->out[0].type));
    for (int64_t i = 0, count = ir_type_numel(&t[m->n].type); i < count; i++)
      ir_tensor_set(&t[m->n], i, ((double)(test_splitmix64(&seed) >> 11) / 9007199254740992.0 * 2 - 1) * span);
    names[m->n++] = name;
  }
  m->names = names;
  m->tensors = t;
}

static void emu_matches_eval(const char *text, double tol) {
  Ctx c;
  ctx_init(&c);
  Job j = {.text = text};
  ck_assert_int_eq(ctx_guard(&c, compile_job, &j), 0);
  ck_assert_msg(j.ok, "%s\n%s", diag_text(&c), text);
  test_nvrtc(j.cg.source, "sm_80");
  test_nvrtc(j.cg.source, "sm_90");
  Tensor in[4];
  const char *names[4];
  TensorMap inputs;
  random_inputs(j.g, 42, &inputs, in, names);
  Tensor *want = calloc((size_t)j.g->n_outputs, sizeof *want);
  char err[512];
  ck_assert_msg(ir_eval(j.g, &inputs, NULL, want, err, sizeof err), "%s", err);
  Tensor *got = test_run_emu(j.cg.plan, NULL, &inputs);
  for (int o = 0; o < j.g->n_outputs; o++) {
    for (int64_t i = 0, count = ir_type_numel(&want[o].type); i < count; i++) {
      double g = ir_tensor_get(&got[o], i), w = ir_tensor_get(&want[o], i);
      ck_assert_msg(fabs(g - w) <= tol * (1 + fabs(w)), "output '%s' element %lld: emu %.9g, ir_eval %.9g",
                    j.g->output_names[o], (long long)i, g, w);
    }
    ir_tensor_free(&want[o]);
    ir_tensor_free(&got[o]);
  }
  free(want);
  free(got);
  for (int i = 0; i < inputs.n; i++) ir_tensor_free(&in[i]);
  ctx_free(&c);
}

/* A graph of grid_sample x [xt] at grid [gt] into [ot] in the first
 * n_modes modes (bilinear, nearest, bicubic), every padding and
 * align_corners. */
static void every_mode(char *text, size_t size, const char *xt, const char *gt, const char *ot, int n_modes) {
  static const char *const modes[] = {"bilinear", "nearest", "bicubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  int at = snprintf(text, size,
                    "graph gs {\n"
                    "  %%0 = input {name=\"x\"} : f32%s\n"
                    "  %%1 = input {name=\"grid\"} : f32%s\n",
                    xt, gt);
  int v = 2;
  for (int m = 0; m < n_modes; m++)
    for (int p = 0; p < 3; p++)
      for (int a = 0; a < 2; a++, v++)
        at += snprintf(text + at, size - (size_t)at,
                       "  %%%d = grid_sample %%0, %%1 {mode=\"%s\", padding_mode=\"%s\", align_corners=%d} : f32%s\n",
                       v, modes[m], pads[p], a, ot);
  at += snprintf(text + at, size - (size_t)at, "  return");
  for (int i = 2; i < v; i++) at += snprintf(text + at, size - (size_t)at, "%s %%%d as \"y%d\"", i > 2 ? "," : "", i, i);
  snprintf(text + at, size - (size_t)at, "\n}\n");
}

START_TEST(emu_grid_sample) {
  char text[8192];
  every_mode(text, sizeof text, "[2, 3, 4, 5]", "[2, 3, 7, 2]", "[2, 3, 3, 7]", 3);
  emu_matches_eval(text, 1e-5);
}
END_TEST

/* A volume [N, C, D, H, W] at grid [N, Do, Ho, Wo, 3]: trilinear and
 * nearest (bicubic is 2-d only), every padding and align_corners; and
 * one point by hand: the volume's centre of x = 1..8 over [1, 1, 2, 2, 2]
 * with align_corners is the mean 4.5, and (1, -1, 1) the corner x[1][0][1] = 6. */
START_TEST(emu_grid_sample_volume) {
  char text[8192];
  every_mode(text, sizeof text, "[2, 2, 3, 4, 5]", "[2, 2, 3, 2, 3]", "[2, 2, 2, 3, 2]", 2);
  emu_matches_eval(text, 1e-5);

  Ctx c;
  ctx_init(&c);
  Graph *g = ir_graph_new(&c, "gs");
  TensorType xt = ir_type_make(TY_F32, 5, (const int64_t[]){1, 1, 2, 2, 2});
  TensorType gt = ir_type_make(TY_F32, 5, (const int64_t[]){1, 1, 1, 2, 3});
  Value *x = &ir_source(g, OP_INPUT, &xt, "x", (SrcLoc){0})->out[0];
  Value *grid = &ir_source(g, OP_INPUT, &gt, "grid", (SrcLoc){0})->out[0];
  Node *s = ir_node_new(g, OP_GRID_SAMPLE, 2, (Value *[]){x, grid}, (SrcLoc){0});
  ir_set_str(g, s, "mode", "bilinear");
  ir_set_str(g, s, "padding_mode", "zeros");
  ir_set_int(g, s, "align_corners", 1);
  char err[256];
  ck_assert_msg(ir_infer(s, err, sizeof err), "%s", err);
  ir_append(g, s);
  ir_set_outputs(g, 1, (Value *[]){&s->out[0]}, (const char *[]){"y"});
  Tensor in[2] = {{x->type, (float[]){1, 2, 3, 4, 5, 6, 7, 8}}, {grid->type, (float[]){0, 0, 0, 1, -1, 1}}}, y;
  TensorMap inputs = {2, (const char *[]){"x", "grid"}, in};
  ck_assert_msg(ir_eval(g, &inputs, NULL, &y, err, sizeof err), "%s", err);
  expect_near(&y, (const double[]){4.5, 6}, 2, 1e-6, "volume by hand");
  ir_tensor_free(&y);
  ctx_free(&c);
}
END_TEST

/* f16 data sampled at an f32 grid, stored as f16: computed in f32 by both. */
START_TEST(emu_grid_sample_f16) {
  emu_matches_eval("graph gs {\n"
                   "  %0 = input {name=\"x\"} : f16[1, 2, 3, 6]\n"
                   "  %1 = input {name=\"grid\"} : f32[1, 4, 4, 2]\n"
                   "  %2 = grid_sample %0, %1 {mode=\"bicubic\", padding_mode=\"border\"} : f16[1, 2, 4, 4]\n"
                   "  return %2 as \"y\"\n"
                   "}\n",
                   2e-3);
}
END_TEST

#if HAVE_ONNX
/* Imported Resizes (cubic with antialias, nearest on one axis, crop with
 * extrapolation) through codegen on emu. */
START_TEST(emu_imported_resize) {
  Model *b = model_new(18);
  add_input(b, "x", 4, (const int64_t[]){2, 3, 9, 7});
  add_init_f32(b, "roi", 1, (const int64_t[]){4}, 4, (const float[]){-0.2f, 0.1f, 0.9f, 1.3f});
  add_init_f32(b, "s1", 1, (const int64_t[]){4}, 4, (const float[]){1, 1, 0.45f, 1.7f});
  add_init_i64(b, "z2", 2, (const int64_t[]){4, 11});
  add_init_i64(b, "z3", 2, (const int64_t[]){12, 5});
  Onnx__NodeProto *n = add_node(b, "Resize", "x,,s1", "a");
  attr_s(n, "mode", "cubic");
  attr_i(n, "antialias", 1);
  n = add_node(b, "Resize", "x,,,z2", "b");
  attr_is(n, "axes", 2, (const int64_t[]){1, 3});
  attr_s(n, "nearest_mode", "ceil");
  n = add_node(b, "Resize", "x,roi,,z3", "c");
  attr_is(n, "axes", 2, (const int64_t[]){2, 3});
  attr_s(n, "mode", "linear");
  attr_s(n, "coordinate_transformation_mode", "tf_crop_and_resize");
  attr_f(n, "extrapolation_value", 3);
  add_output(b, "a");
  add_output(b, "b");
  add_output(b, "c");
  Graph *g = must_import(b);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&ctx));
  test_nvrtc(cg.source, "sm_90");
  Tensor in;
  const char *names[1];
  TensorMap inputs;
  random_inputs(g, 7, &inputs, &in, names);
  Tensor want[3];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, want, err, sizeof err), "%s", err);
  Tensor *got = test_run_emu(cg.plan, &params, &inputs);
  for (int o = 0; o < 3; o++) {
    for (int64_t i = 0, count = ir_type_numel(&want[o].type); i < count; i++) {
      double gv = ir_tensor_get(&got[o], i), w = ir_tensor_get(&want[o], i);
      ck_assert_msg(fabs(gv - w) <= 1e-5 * (1 + fabs(w)), "output %d element %lld: emu %.9g, ir_eval %.9g", o,
                    (long long)i, gv, w);
    }
    ir_tensor_free(&want[o]);
    ir_tensor_free(&got[o]);
  }
  free(got);
  ir_tensor_free(&in);
}
END_TEST
#endif

/* ---- the language ---- */

typedef struct Lowered {
  const char *text;
  Graph *g;
} Lowered;

static int lower_job(Ctx *c, void *data) {
  Lowered *l = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", l->text, strlen(l->text));
  Program *p = fe_parse(c, f);
  l->g = p ? fe_lower(c, p, NULL) : NULL;
  if (l->g && !ir_verify(l->g)) l->g = NULL;
  return 0;
}

START_TEST(language_grid_sample) {
  Ctx c;
  ctx_init(&c);
  Lowered l = {.text = "model m(x: f32[1, 2, 5, 6], g: f32[1, 3, 4, 2]) -> f32[1, 2, 3, 4] {\n"
               "  return grid_sample(x, g, mode=\"nearest\", padding_mode=\"reflection\", align_corners=true)\n"
               "}\n"};
  ck_assert_int_eq(ctx_guard(&c, lower_job, &l), 0);
  ck_assert_msg(l.g != NULL, "%s", diag_text(&c));
  const Node *s = first_op(l.g, OP_GRID_SAMPLE);
  ck_assert_ptr_nonnull(s);
  ck_assert_str_eq(ir_attr_str(s, "mode"), "nearest");
  ck_assert_str_eq(ir_attr_str(s, "padding_mode"), "reflection");
  ck_assert_int_eq(ir_attr_int(s, "align_corners"), 1);
  ctx_free(&c);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"model m(x: f32[1, 2, 5, 6], g: f32[1, 3, 4, 2]) -> f32[1, 2, 3, 4] { return grid_sample(x, g, mode=\"area\") }\n",
       "t.dl:1:95: error: grid_sample: mode must be \"bilinear\", \"nearest\" or \"bicubic\", got \"area\""},
      {"model m(x: f32[1, 2, 5, 6], g: f32[2, 3, 4, 2]) -> f32[1, 2, 3, 4] { return grid_sample(x, g) }\n",
       "grid_sample: grid must be [N, Ho, Wo, 2] with x's N = 1, got f32[2, 3, 4, 2]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ctx_init(&c);
    Lowered e = {.text = bad[i].text};
    ck_assert_int_eq(ctx_guard(&c, lower_job, &e), 0);
    ck_assert_ptr_null(e.g);
    ck_assert_msg(strstr(diag_text(&c), bad[i].want), "messages lack '%s':\n%s", bad[i].want, diag_text(&c));
    ctx_free(&c);
  }
}
END_TEST

static Suite *resize_suite(void) {
  Suite *s = suite_create("resize");
#if HAVE_ONNX
  TCase *imp = tcase_create("import");
  tcase_add_checked_fixture(imp, setup, teardown);
  tcase_add_test(imp, nearest_tables);
  tcase_add_test(imp, linear_align_corners_table);
  tcase_add_test(imp, cubic_tables);
  tcase_add_test(imp, antialias_table);
  tcase_add_test(imp, axes_and_identity);
  tcase_add_test(imp, crop_and_extrapolate);
  tcase_add_test(imp, empty_operands);
  tcase_add_test(imp, integer_input);
  tcase_add_test(imp, resize10_rounding);
  tcase_add_test(imp, resize_errors);
  tcase_add_test(imp, grid_sample_import);
  tcase_add_test(imp, emu_imported_resize);
  tcase_set_timeout(imp, 120);
  suite_add_tcase(s, imp);
#endif
  TCase *m = tcase_create("meaning");
  tcase_add_test(m, grid_sample_by_hand);
  tcase_add_test(m, language_grid_sample);
  suite_add_tcase(s, m);
  TCase *g = tcase_create("codegen");
  tcase_set_timeout(g, 120);
  tcase_add_test(g, emu_grid_sample);
  tcase_add_test(g, emu_grid_sample_volume);
  tcase_add_test(g, emu_grid_sample_f16);
  suite_add_tcase(s, g);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(resize_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
