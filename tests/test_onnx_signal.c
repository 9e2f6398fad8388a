/* ONNX's DFT, STFT, Col2Im and MaxUnpool (frontend/onnx_signal.c), and
 * the kernels the node tests lacked on emu (f64 products and softmax, u8
 * MaxPool, pools padded past half the kernel), and NonZero, Compress
 * and Unique of values known at import (of values computed at run time:
 * test_onnx_lengths.c): takes models built here
 * with protobuf-c on random inputs and checks the reference interpreter
 * against direct loops in double written here (a complex sum per
 * frequency, a sum per image pixel) or onnxruntime's numbers, the
 * generated kernels on emu against the reference interpreter with the
 * imported tables, the messages for bad attributes, and hints that flow
 * from an integer input to a shape but not from a float input's data. */
#include "check_quiet.h"
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "onnxbuild.h"
#include "runtime/device.h"
#include "tests/testutil.h"

#define ctx onnxb_ctx
#define params onnxb_params

static Graph *import_known(Model *b, const TensorMap *known) {
  OnnxOptions o = {.known = known};
  return onnxb_import(b, &o);
}

static Graph *must_import(Model *b) {
  Graph *g = import_known(b, NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  return g;
}

static void expect_error(Model *b, const char *want) {
  Graph *g = import_known(b, NULL);
  ck_assert_msg(g == NULL, "imported, expected an error with '%s'", want);
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

static double draw(uint64_t *state) { return (double)(test_splitmix64(state) >> 11) / (double)(1ull << 52) * 2 - 1; }

/* g's one input, allocated as its type says. */
static void alloc_input(Graph *g, Tensor *x) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_INPUT) ck_assert(ir_tensor_alloc(x, &n->out[0].type));
}

/* g's result for x by the reference interpreter and, when emu starts
 * here, the same on emu within rtol of the largest magnitude (the
 * kernels sum in another order: 1e-5 in f32, 1e-12 in f64, exact for
 * integers), its kernels compiled by NVRTC too. */
static Tensor eval_and_emu(Graph *g, Tensor *x) {
  const char *nm[1] = {"x"};
  TensorMap in = {1, nm, x};
  Tensor want;
  char err[512];
  ck_assert_msg(ir_eval(g, &in, &params, &want, err, sizeof err), "eval: %s", err);
  char why[256];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (!dev) return want;
  rt_device_close(dev);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  test_nvrtc(cg.source, "sm_90");
  Tensor *got = test_run_emu(cg.plan, &params, &in);
  DType dt = want.type.dtype;
  double top = 0, rtol = dt == TY_F64 ? 1e-12 : ir_dtype_is_float(dt) ? 1e-5 : 0;
  for (int64_t i = 0; i < ir_type_numel(&want.type); i++) top = fmax(top, fabs(ir_tensor_get(&want, i)));
  ck_assert(ir_type_eq(&got[0].type, &want.type));
  for (int64_t i = 0; i < ir_type_numel(&want.type); i++)
    ck_assert_msg(fabs(ir_tensor_get(&got[0], i) - ir_tensor_get(&want, i)) <= rtol * (top + 1) ||
                      (isnan(ir_tensor_get(&got[0], i)) && isnan(ir_tensor_get(&want, i))),
                  "emu element %lld: %.17g, the reference %.17g", (long long)i, ir_tensor_get(&got[0], i),
                  ir_tensor_get(&want, i));
  ir_tensor_free(&got[0]);
  free(got);
  return want;
}

/* The same for a random x in [-1, 1). */
static Tensor run_both(Graph *g, Tensor *x, uint64_t seed) {
  alloc_input(g, x);
  for (int64_t i = 0; i < ir_type_numel(&x->type); i++) ir_tensor_set(x, i, draw(&seed));
  return eval_and_emu(g, x);
}

/* ---- DFT ---- */

typedef struct DftCase {
  int opset, c;       /* c: 1 real, 2 complex */
  int64_t n, len;     /* len 0: dft_length not given */
  int axis;           /* of [2, n, 3, c] (1) or [2, 3, n, c] (2) */
  int inverse, onesided;
} DftCase;

/* x [2, n, 3, c] or [2, 3, n, c] at (b, j along the signal, s). */
static double complex x_at(const Tensor *x, const DftCase *k, int b, int64_t j, int s) {
  int64_t i = k->axis == 1 ? ((b * k->n + j) * 3 + s) : ((b * 3 + s) * k->n + j);
  double re = ir_tensor_get(x, i * k->c), im = k->c == 2 ? ir_tensor_get(x, i * k->c + 1) : 0;
  return re + I * im;
}

START_TEST(test_dft_against_direct_sums) {
  static const DftCase cases[] = {
      {20, 1, 8, 0, 1, 0, 0},  {20, 2, 7, 0, 2, 0, 0}, {17, 2, 6, 9, 1, 0, 0},  {20, 1, 9, 5, 2, 0, 1},
      {17, 2, 5, 0, 2, 1, 0},  {20, 2, 6, 10, 1, 1, 1}, {20, 2, 5, 0, 2, 1, 1}, {20, 1, 10, 0, 1, 0, 1},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const DftCase *k = &cases[ci];
    int64_t xd[4] = {2, k->axis == 1 ? k->n : 3, k->axis == 1 ? 3 : k->n, k->c};
    Model *b = model_new(k->opset);
    add_input(b, "x", 4, xd);
    if (k->len) add_init_i64(b, "len", 1, &k->len);
    int64_t ax = k->axis == 2 ? -2 : 1;
    if (k->opset >= 20) add_init_i64(b, "axis", 1, &ax);
    char ins[32];
    snprintf(ins, sizeof ins, "x,%s%s", k->len ? "len" : "", k->opset >= 20 ? ",axis" : "");
    Onnx__NodeProto *node = add_node(b, "DFT", ins, "y");
    if (k->opset < 20) attr_i(node, "axis", k->axis);
    if (k->inverse) attr_i(node, "inverse", 1);
    if (k->onesided) attr_i(node, "onesided", 1);
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor x;
    Tensor y = run_both(g, &x, 100 + ci);
    int64_t N = k->len ? k->len : k->inverse && k->onesided ? 2 * (k->n - 1) : k->n;
    bool irfft = k->inverse && k->onesided;
    int64_t m = irfft || !k->onesided ? N : N / 2 + 1, cout = irfft ? 1 : 2;
    int64_t yd[4] = {2, k->axis == 1 ? m : 3, k->axis == 1 ? 3 : m, cout};
    ck_assert_msg(ir_type_eq(&y.type, &(TensorType){.dtype = TY_F32, .rank = 4, .dims = {yd[0], yd[1], yd[2], yd[3]}}),
                  "case %zu: shape", ci);
    for (int bb = 0; bb < 2; bb++)
      for (int s = 0; s < 3; s++)
        for (int64_t f = 0; f < m; f++) {
          double complex want = 0;
          if (irfft) {
            /* The Hermitian spectrum of the first N/2 + 1 inputs, real part. */
            for (int64_t q = 0; q < N; q++) {
              int64_t src = q <= N / 2 ? q : N - q;
              double complex z = src < k->n ? x_at(&x, k, bb, src, s) : 0;
              if (q > N / 2) z = conj(z);
              want += z * cexp(2 * M_PI * I * (double)(q * f % N) / (double)N);
            }
            want = creal(want) / (double)N;
          } else {
            for (int64_t j = 0; j < k->n && j < N; j++)
              want += x_at(&x, k, bb, j, s) * cexp((k->inverse ? 2 : -2) * M_PI * I * (double)(j * f % N) / (double)N);
            if (k->inverse) want /= (double)N;
          }
          int64_t o = k->axis == 1 ? ((bb * m + f) * 3 + s) : ((bb * 3 + s) * m + f);
          ck_assert_msg(fabs(ir_tensor_get(&y, o * cout) - creal(want)) < 1e-5, "case %zu re at %lld", ci, (long long)f);
          if (cout == 2)
            ck_assert_msg(fabs(ir_tensor_get(&y, o * 2 + 1) - cimag(want)) < 1e-5, "case %zu im", ci);
        }
    ir_tensor_free(&x);
    ir_tensor_free(&y);
  }
}
END_TEST

/* Frames of 6 every 3 of a complex signal of 14, windowed, full spectrum. */
START_TEST(test_stft_windowed_frames) {
  enum { L = 14, FL = 6, HOP = 3, FR = 1 + (L - FL) / HOP };
  Model *b = model_new(17);
  add_input(b, "x", 3, (const int64_t[]){2, L, 2});
  add_init_i64(b, "step", 1, (const int64_t[]){HOP});
  float wv[FL];
  for (int t = 0; t < FL; t++) wv[t] = 0.5f + 0.1f * (float)t;
  add_init_f32(b, "win", 1, (const int64_t[]){FL}, FL, wv);
  attr_i(add_node(b, "STFT", "x,step,win", "y"), "onesided", 0);
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor x, y = run_both(g, &x, 7);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = TY_F32, .rank = 4, .dims = {2, FR, FL, 2}}));
  for (int bb = 0; bb < 2; bb++)
    for (int fr = 0; fr < FR; fr++)
      for (int f = 0; f < FL; f++) {
        double complex want = 0;
        for (int t = 0; t < FL; t++) {
          int64_t i = (bb * L + fr * HOP + t) * 2;
          want += wv[t] * (ir_tensor_get(&x, i) + I * ir_tensor_get(&x, i + 1)) * cexp(-2 * M_PI * I * (t * f % FL) / FL);
        }
        int64_t o = ((bb * FR + fr) * FL + f) * 2;
        ck_assert(fabs(ir_tensor_get(&y, o) - creal(want)) < 1e-5 && fabs(ir_tensor_get(&y, o + 1) - cimag(want)) < 1e-5);
      }
  ir_tensor_free(&x);
  ir_tensor_free(&y);
}
END_TEST

/* ---- Col2Im and MaxUnpool ---- */

/* 2 channels of 2x3 blocks, strides 2 and 1, dilation 1 and 2, pads, a
 * 7x6 image (the floor drops a row: output_pad gives it back). */
START_TEST(test_col2im_sums_blocks) {
  enum { C = 2, KH = 2, KW = 3, H = 7, W = 6 };
  const int64_t st[2] = {2, 1}, dl[2] = {1, 2}, pd[4] = {1, 0, 0, 1};
  int64_t ch = (H + pd[0] + pd[2] - dl[0] * (KH - 1) - 1) / st[0] + 1;
  int64_t cw = (W + pd[1] + pd[3] - dl[1] * (KW - 1) - 1) / st[1] + 1;
  Model *b = model_new(18);
  add_input(b, "x", 3, (const int64_t[]){1, C * KH * KW, ch * cw});
  add_init_i64(b, "img", 2, (const int64_t[]){H, W});
  add_init_i64(b, "blk", 2, (const int64_t[]){KH, KW});
  Onnx__NodeProto *n = add_node(b, "Col2Im", "x,img,blk", "y");
  attr_is(n, "strides", 2, st);
  attr_is(n, "dilations", 2, dl);
  attr_is(n, "pads", 4, pd);
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor x, y = run_both(g, &x, 11);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = TY_F32, .rank = 4, .dims = {1, C, H, W}}));
  double want[C][H][W] = {{{0}}};
  for (int c = 0; c < C; c++)
    for (int kh = 0; kh < KH; kh++)
      for (int kw = 0; kw < KW; kw++)
        for (int64_t bh = 0; bh < ch; bh++)
          for (int64_t bw = 0; bw < cw; bw++) {
            int64_t h = bh * st[0] - pd[0] + kh * dl[0], w = bw * st[1] - pd[1] + kw * dl[1];
            if (h >= 0 && h < H && w >= 0 && w < W)
              want[c][h][w] += ir_tensor_get(&x, ((c * KH + kh) * KW + kw) * ch * cw + bh * cw + bw);
          }
  for (int c = 0; c < C; c++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++)
        ck_assert_double_eq_tol(ir_tensor_get(&y, (c * H + h) * W + w), want[c][h][w], 1e-5);
  ir_tensor_free(&x);
  ir_tensor_free(&y);
}
END_TEST

/* Values at the flat indices MaxPool would give, into the inferred
 * [1, 2, 4, 4], padded at the end to output_shape [1, 2, 5, 6]. */
START_TEST(test_max_unpool_scatters_then_pads) {
  Model *b = model_new(22);
  add_input(b, "x", 4, (const int64_t[]){1, 2, 2, 2});
  const int64_t idx[8] = {5, 2, 13, 10, 16, 23, 24, 31};
  add_init_raw(b, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 4, (const int64_t[]){1, 2, 2, 2}, idx, sizeof idx);
  add_init_i64(b, "shape", 4, (const int64_t[]){1, 2, 5, 6});
  Onnx__NodeProto *n = add_node(b, "MaxUnpool", "x,i,shape", "y");
  attr_is(n, "kernel_shape", 2, (const int64_t[]){2, 2});
  attr_is(n, "strides", 2, (const int64_t[]){2, 2});
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor x, y = run_both(g, &x, 3);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = TY_F32, .rank = 4, .dims = {1, 2, 5, 6}}));
  double want[2 * 5 * 6] = {0};
  for (int k = 0; k < 8; k++) {
    int64_t c = idx[k] / 16, h = idx[k] % 16 / 4, w = idx[k] % 4;
    want[(c * 5 + h) * 6 + w] = ir_tensor_get(&x, k);
  }
  for (int i = 0; i < 2 * 5 * 6; i++) ck_assert_double_eq(ir_tensor_get(&y, i), want[i]);
  ir_tensor_free(&x);
  ir_tensor_free(&y);
}
END_TEST

/* One node of op reading x (f32 of dims) and inputs ins, its result y;
 * the caller adds the initializers ins names. */
static Model *one_node(int opset, const char *op, const char *ins, int rank, const int64_t *dims) {
  Model *b = model_new(opset);
  add_input(b, "x", rank, dims);
  add_node(b, op, ins, "y");
  add_output(b, "y");
  return b;
}

START_TEST(test_bad_attributes) {
  Model *b = one_node(20, "DFT", "x,,axis", 3, (const int64_t[]){1, 4, 1});
  add_init_i64(b, "axis", 1, (const int64_t[]){2});
  expect_error(b, "/tmp/model.onnx: node 0 'n0' (DFT): axis 2 is the last dim, which holds the real and imaginary parts");
  b = one_node(17, "DFT", "x", 3, (const int64_t[]){1, 4, 3});
  expect_error(b, "node 0 'n0' (DFT): the last dim is 3: it must be 1 (real) or 2 (real and imaginary)");
  b = one_node(17, "DFT", "x,len", 3, (const int64_t[]){1, 4, 1});
  add_init_i64(b, "len", 1, (const int64_t[]){0});
  expect_error(b, "node 0 'n0' (DFT): dft_length 0 is not a positive whole number");
  b = one_node(17, "STFT", "x,step,,len", 3, (const int64_t[]){1, 8, 1});
  add_init_i64(b, "step", 1, (const int64_t[]){2});
  add_init_i64(b, "len", 1, (const int64_t[]){9});
  expect_error(b, "node 0 'n0' (STFT): frame_length 9 must be a whole number from 1 to the signal's length (8)");
  b = one_node(18, "Col2Im", "x,img,blk", 3, (const int64_t[]){1, 4, 5});
  add_init_i64(b, "img", 2, (const int64_t[]){4, 4});
  add_init_i64(b, "blk", 2, (const int64_t[]){2, 2});
  expect_error(b, "node 0 'n0' (Col2Im): the input has 5 blocks, the image and block shapes give 9");
  b = one_node(18, "Col2Im", "x,img,blk", 3, (const int64_t[]){1, 4, 9});
  add_init_i64(b, "img", 2, (const int64_t[]){4, 4});
  add_init_i64(b, "blk", 1, (const int64_t[]){2});
  expect_error(b, "node 0 'n0' (Col2Im): block_shape has 1 dims, image_shape 2");
  b = one_node(22, "MaxUnpool", "x,i", 4, (const int64_t[]){1, 1, 2, 2});
  add_init_raw(b, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 4, (const int64_t[]){1, 1, 2, 2},
               (const int64_t[]){0, 1, 2, 3}, 32);
  expect_error(b, "node 0 'n0' (MaxUnpool): kernel_shape has 0 values for 2 spatial dims");
}
END_TEST

/* ---- hints ---- */

/* A Range whose limit is an integer input's value plus one imports when
 * the input's value is given (a shape follows from it); one whose limit
 * is a float input's ReduceMax does not: that is the data's. */
START_TEST(test_hints_flow_from_integer_inputs_only) {
  Model *b = model_new(13);
  add_input_typed(b, "n", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
  add_init_raw(b, "one", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, (const int64_t[]){1}, 8);
  add_init_raw(b, "zero", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, (const int64_t[]){0}, 8);
  add_node(b, "Add", "n,one", "lim");
  add_node(b, "Range", "zero,lim,one", "y");
  add_output(b, "y");
  int64_t five = 5;
  Tensor t = {ir_type_make(TY_I64, 0, NULL), &five};
  const char *nm[1] = {"n"};
  TensorMap known = {1, nm, &t};
  Graph *g = import_known(b, &known);
  ck_assert_msg(g != NULL, "%s", diag_text(&ctx));
  ck_assert(ir_type_eq(&g->outputs[0]->type, &(TensorType){.dtype = TY_I64, .rank = 1, .dims = {6}}));

  b = model_new(13);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_init_raw(b, "zero", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, (const float[]){0}, 4);
  add_init_raw(b, "one", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, (const float[]){1}, 4);
  attr_i(add_node(b, "ReduceMax", "x", "m"), "keepdims", 0);
  add_node(b, "Range", "zero,m,one", "y");
  add_output(b, "y");
  float xv[3] = {1, 4, 2};
  Tensor tx = {ir_type_make(TY_F32, 1, (const int64_t[]){3}), xv};
  const char *nx[1] = {"x"};
  TensorMap kx = {1, nx, &tx};
  ck_assert(import_known(b, &kx) == NULL);
  ck_assert_msg(strstr(diag_text(&ctx), "node 1 'n1' (Range): limit computed at run time is not supported"), "%s",
                diag_text(&ctx));
}
END_TEST

/* An If whose branches differ in shape under a condition computed from a
 * given integer input takes the branch the value picks; without the
 * value it is refused as before. */
START_TEST(test_if_of_shapes_follows_hint) {
  for (int given = 1; given >= 0; given--) {
    Model *b = model_new(17);
    add_input_typed(b, "n", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    add_init_raw(b, "two", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, (const int64_t[]){2}, 8);
    add_node(b, "Equal", "n,two", "c");
    Model *t = model_new(17), *e = model_new(17);
    attr_is(add_node(t, "Constant", "", "y1"), "value_ints", 2, (const int64_t[]){7, 8});
    attr_is(add_node(e, "Constant", "", "y2"), "value_ints", 1, (const int64_t[]){9});
    add_output(t, "y1");
    add_output(e, "y2");
    Onnx__NodeProto *n = add_node(b, "If", "c", "y");
    attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &t->g;
    attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &e->g;
    add_output(b, "y");
    int64_t two = 2;
    Tensor tn = {ir_type_make(TY_I64, 0, NULL), &two};
    const char *nm[1] = {"n"};
    TensorMap known = {1, nm, &tn};
    Graph *g = import_known(b, given ? &known : NULL);
    if (!given) {
      ck_assert(g == NULL);
      ck_assert_msg(strstr(diag_text(&ctx), "output 1 is i64[2] in then_branch and i64[1] in else_branch"), "%s",
                    diag_text(&ctx));
      continue;
    }
    ck_assert_msg(g != NULL, "%s", diag_text(&ctx));
    ck_assert(ir_type_eq(&g->outputs[0]->type, &(TensorType){.dtype = TY_I64, .rank = 1, .dims = {2}}));
  }
}
END_TEST

/* ---- the kernels the node tests lacked on emu ---- */

/* softmax(x W) + log_softmax(x W) over another axis in f64, with x
 * [2, 1, 4, 5] and W [3, 5, 6] broadcast against each other (a GEMM per
 * batch index); then Gemm's x W^T + c: f64 products are a kernel of
 * ours, and the rows are computed in double. */
START_TEST(test_f64_products_and_softmax) {
  uint64_t seed = 5;
  double w[3 * 5 * 6], c[6];
  for (int i = 0; i < 90; i++) w[i] = draw(&seed);
  for (int i = 0; i < 6; i++) c[i] = draw(&seed);
  Model *b = model_new(13);
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 4, (const int64_t[]){2, 1, 4, 5});
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 3, (const int64_t[]){3, 5, 6}, w, sizeof w);
  add_node(b, "MatMul", "x,w", "m");
  attr_i(add_node(b, "Softmax", "m", "s"), "axis", -1);
  attr_i(add_node(b, "LogSoftmax", "m", "l"), "axis", 1);
  add_node(b, "Add", "s,l", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor x, y = run_both(g, &x, 6);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = TY_F64, .rank = 4, .dims = {2, 3, 4, 6}}));
  /* one element by hand: softmax over j of m[1, 2, 3, :], log_softmax over the 3 of m[1, :, 3, 4] */
  double m[3][6];
  for (int h = 0; h < 3; h++)
    for (int j = 0; j < 6; j++) {
      m[h][j] = 0;
      for (int q = 0; q < 5; q++) m[h][j] += ir_tensor_get(&x, (1 * 4 + 3) * 5 + q) * w[(h * 5 + q) * 6 + j];
    }
  double se = 0, sl = 0;
  for (int j = 0; j < 6; j++) se += exp(m[2][j]);
  for (int h = 0; h < 3; h++) sl += exp(m[h][4]);
  ck_assert_double_eq_tol(ir_tensor_get(&y, ((1 * 3 + 2) * 4 + 3) * 6 + 4), exp(m[2][4]) / se + m[2][4] - log(sl),
                          1e-13);
  ir_tensor_free(&x);
  ir_tensor_free(&y);
  pool_free();

  b = model_new(13);
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 2, (const int64_t[]){4, 5});
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 2, (const int64_t[]){6, 5}, w, 30 * sizeof *w);
  add_init_raw(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 1, (const int64_t[]){6}, c, sizeof c);
  attr_i(add_node(b, "Gemm", "x,w,c", "y"), "transB", 1);
  add_output(b, "y");
  g = must_import(b);
  y = run_both(g, &x, 7);
  double want = c[5];
  for (int q = 0; q < 5; q++) want += ir_tensor_get(&x, 2 * 5 + q) * w[5 * 5 + q];
  ck_assert_double_eq_tol(ir_tensor_get(&y, 2 * 6 + 5), want, 1e-14);
  ir_tensor_free(&x);
  ir_tensor_free(&y);
}
END_TEST

/* x from a formula (the same in tests' Python); y on ref and emu against
 * onnxruntime's numbers for it. */
typedef struct PoolCase {
  const char *op;
  int32_t elem;
  int rank;
  int64_t dims[4], kernel[2], pads[4], strides[2];
  int ceil_mode, count_include_pad;
  int64_t out[4];
  double want[64];
} PoolCase;

/* onnxruntime 1.23 (CPUExecutionProvider, opset 19) gave these; the
 * pads are more than half the kernel, which the IR's pools refuse. */
static const PoolCase pool_cases[] = {
    {"MaxPool", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 4, {1, 1, 5, 5}, {3, 3}, {2, 2, 2, 2}, {1, 1}, 0, 0,
     {1, 1, 7, 7},
     {0,   37,  74,  111, 148, 148, 148, 185, 222, 222, 222, 148, 148, 148, 185, 222, 222,
      230, 230, 230, 148, 185, 222, 222, 230, 230, 230, 201, 238, 238, 238, 230, 230, 230,
      201, 238, 238, 238, 164, 201, 201, 201, 238, 238, 238, 98,  135, 135, 135}},
    {"AveragePool", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, {1, 2, 4, 5}, {3, 2}, {2, 1, 2, 1}, {2, 2}, 1, 0,
     {1, 2, 3, 3},
     {-1.5, -0.5, -0.25, -0.3333333432674408, 0.125, -0.1666666716337204, -0.75, 0.25, -0.3125, 1.0, 0.375,
      0.625, 0.0, -0.0833333358168602, 0.1666666716337204, 0.125, 0.3125, -0.25}},
    {"AveragePool", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 4, {1, 2, 4, 5}, {3, 2}, {2, 1, 2, 1}, {2, 2}, 1, 1,
     {1, 2, 3, 3},
     {-0.25, -0.1666666716337204, -0.0833333358168602, -0.1666666716337204, 0.125, -0.1666666716337204, -0.25,
      0.1666666716337204, -0.2083333283662796, 0.1666666716337204, 0.125, 0.2083333283662796, 0.0,
      -0.0833333358168602, 0.1666666716337204, 0.0416666679084301, 0.2083333283662796, -0.1666666716337204}},
    {"MaxPool", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, {1, 2, 7}, {3}, {2, 1}, {2}, 1, 0, {1, 2, 5},
     {-1.5, 0.25, 0.5, 0.75, -0.75, 1.0, 1.25, 1.5, 1.5, -1.5}},
};

START_TEST(test_pools_padded_past_half_the_kernel) {
  const PoolCase *pc = &pool_cases[_i];
  int sp = pc->rank - 2;
  Model *b = model_new(19);
  add_input_typed(b, "x", pc->elem, pc->rank, pc->dims);
  Onnx__NodeProto *n = add_node(b, pc->op, "x", "y");
  attr_is(n, "kernel_shape", sp, pc->kernel);
  attr_is(n, "pads", 2 * sp, pc->pads);
  attr_is(n, "strides", sp, pc->strides);
  attr_i(n, "ceil_mode", pc->ceil_mode);
  if (strcmp(pc->op, "AveragePool") == 0) attr_i(n, "count_include_pad", pc->count_include_pad);
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor x;
  alloc_input(g, &x);
  bool u8 = pc->elem == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  for (int64_t i = 0; i < ir_type_numel(&x.type); i++)
    ir_tensor_set(&x, i, u8 ? (double)(i * 37 % 251) : (double)(i * 7 % 13 - 6) / 4);
  Tensor y = eval_and_emu(g, &x);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = u8 ? TY_U8 : TY_F32, .rank = pc->rank, .dims = {
                                                  pc->out[0], pc->out[1], pc->out[2], pc->out[3]}}));
  for (int64_t i = 0; i < ir_type_numel(&y.type); i++)
    ck_assert_msg(fabs(ir_tensor_get(&y, i) - pc->want[i]) <= 1e-6, "element %lld: %.9g, onnxruntime %.9g",
                  (long long)i, ir_tensor_get(&y, i), pc->want[i]);
  ir_tensor_free(&x);
  ir_tensor_free(&y);
}
END_TEST

START_TEST(test_pool_padding_not_less_than_kernel) {
  Model *b = model_new(19);
  add_input(b, "x", 4, (const int64_t[]){1, 1, 5, 5});
  Onnx__NodeProto *n = add_node(b, "MaxPool", "x", "y");
  attr_is(n, "kernel_shape", 2, (const int64_t[]){3, 2});
  attr_is(n, "pads", 4, (const int64_t[]){0, 2, 0, 1});
  add_output(b, "y");
  expect_error(b, "node 0 'n0' (MaxPool): padding 2 is not less than the kernel 2");
}
END_TEST

/* ---- data-dependent sizes, from values known at import ---- */

static int64_t i64_at(const Tensor *t, int64_t i) { return ((const int64_t *)t->data)[i]; }

/* NonZero of an initializer is a constant; Compress gathers a run-time
 * x at the places a known condition selects (along axis 1, and of the
 * flattened x without an axis); Unique of a constant gives its four
 * outputs, sorted and in first-occurrence order. */
START_TEST(test_nonzero_compress_unique_of_known_values) {
  const int64_t nz[6] = {0, 3, 0, 0, -1, 2};
  Model *b = model_new(13);
  add_init_raw(b, "k", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, (const int64_t[]){2, 3}, nz, sizeof nz);
  add_node(b, "NonZero", "k", "y");
  add_output(b, "y");
  Graph *g = must_import(b);
  Tensor y;
  char err[256];
  ck_assert_msg(ir_eval(g, NULL, &params, &y, err, sizeof err), "%s", err);
  ck_assert(ir_type_eq(&y.type, &(TensorType){.dtype = TY_I64, .rank = 2, .dims = {2, 3}}));
  const int64_t want_nz[6] = {0, 1, 1, 1, 1, 2};
  for (int i = 0; i < 6; i++) ck_assert_int_eq(i64_at(&y, i), want_nz[i]);
  ir_tensor_free(&y);
  pool_free();

  for (int axis = 1; axis >= -1; axis -= 2) {
    b = model_new(13);
    add_input(b, "x", 2, (const int64_t[]){3, 4});
    add_init_raw(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){3}, (const uint8_t[]){1, 0, 1},
                 3);
    Onnx__NodeProto *n = add_node(b, "Compress", "x,c", "y");
    if (axis >= 0) attr_i(n, "axis", axis);
    add_output(b, "y");
    g = must_import(b);
    Tensor x;
    y = run_both(g, &x, 9);
    /* axis 1: columns 0 and 2 of each row; none: elements 0 and 2 */
    int64_t count = axis >= 0 ? 6 : 2;
    ck_assert_int_eq(ir_type_numel(&y.type), count);
    for (int64_t i = 0; i < count; i++)
      ck_assert_double_eq(ir_tensor_get(&y, i), ir_tensor_get(&x, axis >= 0 ? i / 2 * 4 + i % 2 * 2 : i * 2));
    ir_tensor_free(&x);
    ir_tensor_free(&y);
    pool_free();
  }

  const float u[7] = {2, 1, 1, 3, 4, 3, 2};
  for (int sorted = 1; sorted >= 0; sorted--) {
    b = model_new(11);
    add_init_f32(b, "u", 1, (const int64_t[]){7}, 7, u);
    attr_i(add_node(b, "Unique", "u", "y,first,inverse,counts"), "sorted", sorted);
    add_output(b, "y");
    add_output(b, "first");
    add_output(b, "inverse");
    add_output(b, "counts");
    g = must_import(b);
    Tensor out[4];
    ck_assert_msg(ir_eval(g, NULL, &params, out, err, sizeof err), "%s", err);
    /* numpy.unique(return_index, return_inverse, return_counts); unsorted: ONNX's example order */
    const double want_y[2][4] = {{2, 1, 3, 4}, {1, 2, 3, 4}};
    const int64_t want_first[2][4] = {{0, 1, 3, 4}, {1, 0, 3, 4}};
    const int64_t want_inv[2][7] = {{0, 1, 1, 2, 3, 2, 0}, {1, 0, 0, 2, 3, 2, 1}};
    const int64_t want_cnt[2][4] = {{2, 2, 2, 1}, {2, 2, 2, 1}};
    ck_assert_int_eq(ir_type_numel(&out[0].type), 4);
    for (int i = 0; i < 4; i++) {
      ck_assert_double_eq(ir_tensor_get(&out[0], i), want_y[sorted][i]);
      ck_assert_int_eq(i64_at(&out[1], i), want_first[sorted][i]);
      ck_assert_int_eq(i64_at(&out[3], i), want_cnt[sorted][i]);
    }
    for (int i = 0; i < 7; i++) ck_assert_int_eq(i64_at(&out[2], i), want_inv[sorted][i]);
    for (int i = 0; i < 4; i++) ir_tensor_free(&out[i]);
    pool_free();
  }
  /* NaNs are one value after +inf, -0.0 is 0.0 (numpy.unique), and
   * int64 values a double cannot tell apart stay apart. */
  b = model_new(11);
  add_init_f32(b, "u", 1, (const int64_t[]){6}, 6, (const float[]){NAN, 0.0f, INFINITY, -0.0f, NAN, -1});
  add_node(b, "Unique", "u", "y");
  add_output(b, "y");
  g = must_import(b);
  Tensor uy;
  ck_assert_msg(ir_eval(g, NULL, &params, &uy, err, sizeof err), "%s", err);
  ck_assert_int_eq(ir_type_numel(&uy.type), 4);
  ck_assert_double_eq(ir_tensor_get(&uy, 0), -1);
  ck_assert_double_eq(ir_tensor_get(&uy, 1), 0);
  ck_assert(isinf(ir_tensor_get(&uy, 2)));
  ck_assert(isnan(ir_tensor_get(&uy, 3)));
  ir_tensor_free(&uy);
  pool_free();
  b = model_new(11);
  const int64_t big = (int64_t)1 << 53;
  add_init_i64(b, "u", 3, (const int64_t[]){big + 1, big, -big});
  add_node(b, "Unique", "u", "y");
  add_output(b, "y");
  g = must_import(b);
  ck_assert_msg(ir_eval(g, NULL, &params, &uy, err, sizeof err), "%s", err);
  ck_assert_int_eq(ir_type_numel(&uy.type), 3);
  ck_assert_int_eq(i64_at(&uy, 0), -big);
  ck_assert_int_eq(i64_at(&uy, 1), big);
  ck_assert_int_eq(i64_at(&uy, 2), big + 1);
  ir_tensor_free(&uy);
  pool_free();
}
END_TEST

/* Cast to FLOAT8E8M0 in its three rounding modes, saturating and not,
 * and back to f32 (the values onnx's numpy_helper.to_float8e8m0 gives,
 * worked out by hand from the f32 bits), on ref and emu. */
START_TEST(test_cast_e8m0_round_modes) {
  const float xs[9] = {3.0f, 2.5f, 1.5f, -0.75f, 0x1.8p127f, 0.0f, INFINITY, NAN, 0x1p-130f};
  static const struct {
    const char *mode;
    int saturate;
    double want[9];
  } cases[] = {
      {"up", 1, {4, 4, 2, 1, 0x1p127, 0x1p-127, NAN, NAN, 0x1p-126}},
      {"down", 1, {2, 2, 1, 0.5, 0x1p127, 0x1p-127, NAN, NAN, 0x1p-127}},
      {"nearest", 1, {4, 2, 2, 1, 0x1p127, 0x1p-127, NAN, NAN, 0x1p-127}},
      {"up", 0, {4, 4, 2, 1, NAN, 0x1p-127, NAN, NAN, 0x1p-126}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    Model *b = model_new(24);
    add_input(b, "x", 1, (const int64_t[]){9});
    Onnx__NodeProto *n = add_node(b, "Cast", "x", "e");
    attr_i(n, "to", 24); /* FLOAT8E8M0: newer than this onnx.proto */
    attr_s(n, "round_mode", cases[c].mode);
    attr_i(n, "saturate", cases[c].saturate);
    attr_i(add_node(b, "Cast", "e", "y"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor x;
    alloc_input(g, &x);
    memcpy(x.data, xs, sizeof xs);
    Tensor y = eval_and_emu(g, &x);
    for (int i = 0; i < 9; i++) {
      double got = ir_tensor_get(&y, i), want = cases[c].want[i];
      ck_assert_msg(isnan(want) ? isnan(got) : got == want, "%s%s: %g gave %g, want %g", cases[c].mode,
                    cases[c].saturate ? "" : " unsaturated", (double)xs[i], got, want);
    }
    ir_tensor_free(&x);
    ir_tensor_free(&y);
    pool_free();
  }
}
END_TEST

static Suite *signal_suite(void) {
  Suite *s = suite_create("onnx_signal");
  TCase *tc = tcase_create("signal");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_dft_against_direct_sums);
  tcase_add_test(tc, test_stft_windowed_frames);
  tcase_add_test(tc, test_col2im_sums_blocks);
  tcase_add_test(tc, test_max_unpool_scatters_then_pads);
  tcase_add_test(tc, test_bad_attributes);
  tcase_add_test(tc, test_hints_flow_from_integer_inputs_only);
  tcase_add_test(tc, test_if_of_shapes_follows_hint);
  tcase_add_test(tc, test_f64_products_and_softmax);
  tcase_add_loop_test(tc, test_pools_padded_past_half_the_kernel, 0, sizeof pool_cases / sizeof *pool_cases);
  tcase_add_test(tc, test_pool_padding_not_less_than_kernel);
  tcase_add_test(tc, test_nonzero_compress_unique_of_known_values);
  tcase_add_test(tc, test_cast_e8m0_round_modes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(signal_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
