/* Check suite for training on the devices: the kernels of the training
 * ops (conv_weight_grad, maxpool_grad, avgpool_grad, embedding_grad,
 * dropout, resize_grad) and transposed matmuls on emu against ir_eval at
 * -O0 and -O2 and through NVRTC for
 * sm_90, an id out of range reported as ir_eval words it; dropout's mask
 * on emu equal to ir_eval's bit for bit; the gradients of an MLP, LeNet,
 * a small CNN with batch norm and dropout, and stacked LSTM and GRU
 * layers, compiled with dlc_options.grad, and of the examples (lstm,
 * transformer, resnet18) made into losses, on emu against
 * the reference at 1e-5 of each output's scale; batchnorm's running
 * statistics against PyTorch's update rule computed here. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/grad.h"
#include "passes/autodiff.h"
#include "passes/loss.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

static void expect_close_at(const Tensor *got, const Tensor *want, double rtol, double floor, const char *what);

/* Within rtol of the output's scale (rtol 0: byte for byte). */
static void expect_close(const Tensor *got, const Tensor *want, double rtol, const char *what) {
  expect_close_at(got, want, rtol, 1e-30, what);
}

static double largest(const Tensor *t) {
  double m = 0;
  for (int64_t i = 0, n = ir_type_numel(&t->type); i < n; i++) m = fmax(m, fabs(ir_tensor_get(t, i)));
  return m;
}

/* A step's outputs: each within rtol of its scale, or of a thousandth of
 * the step's largest output where that is larger: a gradient that is 0
 * in exact arithmetic (BERT's key bias: the softmax ignores what a row
 * adds to all its scores) is rounding noise on both sides. */
static void expect_step_close(const Tensor *got, const Tensor *want, int n, double rtol, const char *file,
                              const char *const *names) {
  double step = 0;
  for (int i = 0; i < n; i++) step = fmax(step, largest(&want[i]));
  for (int i = 0; i < n; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s: %s", file, names[i]);
    expect_close_at(&got[i], &want[i], rtol, 1e-3 * step, what);
  }
}

static void expect_close_at(const Tensor *got, const Tensor *want, double rtol, double floor, const char *what) {
  ck_assert(ir_type_eq(&got->type, &want->type));
  int64_t count = ir_type_numel(&want->type);
  if (rtol == 0) {
    ck_assert_msg(memcmp(got->data, want->data, ir_tensor_nbytes(&want->type)) == 0, "%s: not bit for bit", what);
    return;
  }
  double scale = fmax(floor, 1e-30);
  for (int64_t i = 0; i < count; i++) scale = fmax(scale, fabs(ir_tensor_get(want, i)));
  for (int64_t i = 0; i < count; i++) {
    double g = ir_tensor_get(got, i), w = ir_tensor_get(want, i);
    ck_assert_msg(fabs(g - w) <= rtol * scale, "%s: element %lld: emu %.9g, ir_eval %.9g (scale %.3g)", what,
                  (long long)i, g, w, scale);
  }
}

/* text compiled at -O`level`, through NVRTC for sm_90, run on emu and
 * on ir_eval with the fills (from element 3 * shift). */
typedef struct Both {
  Ctx c;
  Job j;
  Data d;
  Tensor *want, *got;
} Both;

static void both_run(Both *b, const char *text, const Fill *fills, int level, int shift) {
  ctx_init(&b->c);
  b->j = compile_at(&b->c, text, level);
  test_nvrtc(b->j.cg.source, "sm_90");
  make_inputs(b->j.g, fills, shift, &b->d);
  b->want = eval_all(b->j.g, &b->d.inputs);
  b->got = test_run_emu(b->j.cg.plan, NULL, &b->d.inputs);
}

static void both_free(Both *b) {
  free_outputs(b->want, b->j.g->n_outputs);
  free_outputs(b->got, b->j.g->n_outputs);
  free_inputs(&b->d);
  ctx_free(&b->c);
}

/* text at -O0 and -O2: emu gives what ir_eval gives (rtol as
 * expect_close). */
static void check_op(const char *text, const Fill *fills, double rtol) {
  for (int level = 0; level <= 2; level += 2) {
    Both b;
    both_run(&b, text, fills, level, level);
    for (int i = 0; i < b.j.g->n_outputs; i++) {
      char what[96];
      snprintf(what, sizeof what, "-O%d output '%s'", level, b.j.g->output_names[i]);
      expect_close(&b.got[i], &b.want[i], rtol, what);
    }
    both_free(&b);
  }
}

static const Fill values[] = {
    FILL("x", 0.5, -1.25, 2, 0.75, -0.5, 1.5, -2, 0.25, 1, -0.75, 0.125, -1.5, 1.75),
    FILL("dy", 1, -0.5, 0.25, 2, -1.5, 0.75, -0.25, 1.25, -2),
    FILL("ids", 3, -1, 0, 3, 2, -4, 1, 0),
    {NULL, NULL, 0},
};

START_TEST(test_conv_weight_grad) {
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[2, 4, 7, 6]\n"
           "  %dy = input {name=\"dy\"} : f32[2, 6, 3, 3]\n"
           "  %w = conv_weight_grad %x, %dy {kernel=[3, 2], stride=[2, 2], pad=[1, 0, 0, 1], dilation=[1, 2], groups=2} : f32[6, 2, 3, 2]\n"
           "  return %w as \"dw\"\n"
           "}\n",
           values, 1e-5);
  /* depthwise (mobilenet's) */
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[2, 4, 5, 5]\n"
           "  %dy = input {name=\"dy\"} : f32[2, 4, 5, 5]\n"
           "  %w = conv_weight_grad %x, %dy {kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], dilation=[1, 1], groups=4} : f32[4, 1, 3, 3]\n"
           "  return %w as \"dw\"\n"
           "}\n",
           values, 1e-5);
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[1, 2, 4, 3, 5]\n"
           "  %dy = input {name=\"dy\"} : f32[1, 3, 2, 3, 2]\n"
           "  %w = conv_weight_grad %x, %dy {kernel=[2, 1, 3], stride=[2, 1, 2], pad=[1, 0, 0, 0, 0, 1], dilation=[1, 1, 1]} : f32[3, 2, 2, 1, 3]\n"
           "  return %w as \"dw\"\n"
           "}\n",
           values, 1e-5);
}
END_TEST

/* The weight gradient as a GEMM over K = batch x output positions
 * (lower_train.c): f32 on the FMA GEMM with K = 1024 cut into 8 slices
 * (one 64x64 tile: 16 x 72), f16 and bf16 on the tensor cores (their
 * split too), grouped and strided. */
START_TEST(test_conv_weight_grad_gemm) {
  static const char *const texts[] = {
      "graph g {\n"
      "  %x = input {name=\"x\"} : f32[4, 8, 16, 16]\n"
      "  %dy = input {name=\"dy\"} : f32[4, 16, 16, 16]\n"
      "  %w = conv_weight_grad %x, %dy {kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], dilation=[1, 1]} : f32[16, 8, 3, 3]\n"
      "  return %w as \"dw\"\n"
      "}\n",
      "graph g {\n"
      "  %x = input {name=\"x\"} : bf16[4, 16, 8, 8]\n"
      "  %dy = input {name=\"dy\"} : bf16[4, 32, 8, 8]\n"
      "  %w = conv_weight_grad %x, %dy {kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], dilation=[1, 1]} : bf16[32, 16, 3, 3]\n"
      "  return %w as \"dw\"\n"
      "}\n",
      "graph g {\n"
      "  %x = input {name=\"x\"} : f16[2, 32, 9, 9]\n"
      "  %dy = input {name=\"dy\"} : f16[2, 32, 5, 5]\n"
      "  %w = conv_weight_grad %x, %dy {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1], dilation=[1, 1], groups=2} : f16[32, 16, 3, 3]\n"
      "  return %w as \"dw\"\n"
      "}\n",
  };
  static const char *const steps[] = {"fma 64x64x16, split-K 8", "tensor cores bf16", "tensor cores f16"};
  Both b;
  both_run(&b, texts[_i], values, 2, 2);
  bool found = false;
  for (uint32_t i = 0; i < b.j.cg.plan->n_steps; i++)
    found = found || (b.j.cg.plan->steps[i].label && strstr(b.j.cg.plan->steps[i].label, steps[_i]));
  ck_assert_msg(found, "no step '%s'", steps[_i]);
  /* f32 exact up to the slices' regrouping; a half result rounds once
   * (bf16: 2^-8 relative, f16: 2^-11) */
  static const double tol[] = {1e-5, 8e-3, 2e-3};
  expect_close(&b.got[0], &b.want[0], tol[_i], "dw");
  both_free(&b);
}
END_TEST

/* The gradients' transposed products: GEMM flags on emu against eval,
 * batched with B broadcast (a shared B too, which A^T cannot fold into
 * rows). */
START_TEST(test_matmul_trans) {
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[2, 3, 4, 5]\n"
           "  %dy = input {name=\"dy\"} : f32[3, 6, 4]\n"
           "  %d2 = reshape %dy {shape=[4, 18]} : f32[4, 18]\n"
           "  %y = matmul %x, %dy {trans_a=1, trans_b=1} : f32[2, 3, 5, 6]\n"
           "  %z = matmul %x, %d2 {trans_a=1} : f32[2, 3, 5, 18]\n"
           "  return %y as \"y\", %z as \"z\"\n"
           "}\n",
           values, 1e-6);
}
END_TEST

/* resize_grad up and down, nearest and bilinear (both coordinate modes):
 * each dx element's gather over the outputs that read it. */
START_TEST(test_resize_grad) {
  check_op("graph g {\n"
           "  %dy = input {name=\"dy\"} : f32[2, 3, 7, 5]\n"
           "  %a = resize_grad %dy {size=[3, 4], mode=\"bilinear\"} : f32[2, 3, 3, 4]\n"
           "  %b = resize_grad %dy {size=[3, 4], mode=\"bilinear\", align_corners=1} : f32[2, 3, 3, 4]\n"
           "  %c = resize_grad %dy {size=[3, 4]} : f32[2, 3, 3, 4]\n"
           "  %d = resize_grad %dy {size=[10, 2], mode=\"bilinear\"} : f32[2, 3, 10, 2]\n"
           "  %e = resize_grad %dy {size=[10, 2], mode=\"bilinear\", align_corners=1} : f32[2, 3, 10, 2]\n"
           "  %f = resize_grad %dy {size=[1, 16]} : f32[2, 3, 1, 16]\n"
           "  return %a as \"up\", %b as \"up_corners\", %c as \"up_nearest\", %d as \"down\", %e as "
           "\"down_corners\", %f as \"mixed_nearest\"\n"
           "}\n",
           values, 1e-5);
}
END_TEST

START_TEST(test_pool_grads) {
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[2, 3, 7, 6]\n"
           "  %dy = input {name=\"dy\"} : f32[2, 3, 4, 3]\n"
           "  %m = maxpool_grad %dy, %x {kernel=[3, 2], stride=[2, 2], pad=[1, 0, 1, 1], dilation=[1, 1], ceil_mode=1} : f32[2, 3, 7, 6]\n"
           "  %a = avgpool_grad %dy {size=[7, 6], kernel=[3, 2], stride=[2, 2], pad=[1, 0, 1, 1], dilation=[1, 1], ceil_mode=1, count_include_pad=0} : f32[2, 3, 7, 6]\n"
           "  %b = avgpool_grad %dy {size=[7, 6], kernel=[3, 2], stride=[2, 2], pad=[1, 0, 1, 1], dilation=[1, 1], ceil_mode=1, count_include_pad=1} : f32[2, 3, 7, 6]\n"
           "  return %m as \"max\", %a as \"avg\", %b as \"avg_pad\"\n"
           "}\n",
           values, 1e-6);
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[1, 2, 5, 4, 6]\n"
           "  %dy = input {name=\"dy\"} : f32[1, 2, 2, 2, 3]\n"
           "  %m = maxpool_grad %dy, %x {kernel=[2, 2, 3], stride=[2, 2, 2], pad=[0, 0, 1, 0, 0, 0], dilation=[1, 1, 1], ceil_mode=0} : f32[1, 2, 5, 4, 6]\n"
           "  %a = avgpool_grad %dy {size=[5, 4, 6], kernel=[2, 2, 3], stride=[2, 2, 2], pad=[0, 0, 1, 0, 0, 0], dilation=[1, 1, 1]} : f32[1, 2, 5, 4, 6]\n"
           "  return %m as \"max\", %a as \"avg\"\n"
           "}\n",
           values, 1e-6);
  /* dilated windows that overlap */
  check_op("graph g {\n"
           "  %x = input {name=\"x\"} : f32[1, 2, 7, 7]\n"
           "  %dy = input {name=\"dy\"} : f32[1, 2, 5, 3]\n"
           "  %m = maxpool_grad %dy, %x {kernel=[2, 3], stride=[1, 2], pad=[0, 1, 0, 1], dilation=[2, 2], ceil_mode=0} : f32[1, 2, 7, 7]\n"
           "  return %m as \"max\"\n"
           "}\n",
           values, 1e-6);
}
END_TEST

START_TEST(test_embedding_grad) {
  check_op("graph g {\n"
           "  %dy = input {name=\"dy\"} : f32[2, 4, 3]\n"
           "  %ids = input {name=\"ids\"} : i64[2, 4]\n"
           "  %e = embedding_grad %dy, %ids {num=5} : f32[5, 3]\n"
           "  return %e as \"rows\"\n"
           "}\n",
           values, 1e-6);
}
END_TEST

/* An id out of range: emu reports the first, as ir_eval does. */
START_TEST(test_embedding_grad_bad_id) {
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c,
                     "graph g {\n"
                     "  %dy = input {name=\"dy\"} : f32[2, 4, 3]\n"
                     "  %ids = input {name=\"ids\"} : i32[2, 4]\n"
                     "  %e = embedding_grad %dy, %ids {num=5} : f32[5, 3]   ; m.dl:3:9\n"
                     "  return %e as \"rows\"\n"
                     "}\n",
                     2);
  Data d;
  make_inputs(j.g, (const Fill[]){values[1], FILL("ids", 0, 1, 2, 3, -5, 9, -7, 4), {NULL, NULL, 0}}, 0, &d);
  char ref[512], got[512];
  Tensor *out = calloc((size_t)j.g->n_outputs + 1, sizeof *out);
  ck_assert(!ir_eval(j.g, &d.inputs, NULL, out, ref, sizeof ref));
  free(out);
  ck_assert_str_eq(ref, "m.dl:3:9: embedding_grad: index 9 is out of range for axis 0 of size 5");
  ck_assert_int_eq(test_run_emu_status(j.cg.plan, NULL, &d.inputs, &out, got, sizeof got), DLRT_E_INDEX);
  ck_assert_str_eq(got, ref);
  free_inputs(&d);
  ctx_free(&c);
}
END_TEST

/* The mask is Philox's on both sides: emu equals ir_eval to the bit,
 * for f32 (the scaled values too) and at two offsets that differ. */
START_TEST(test_dropout_bits) {
  static const char text[] =
      "graph g {\n"
      "  %x = input {name=\"x\"} : f32[3, 37, 11]\n"
      "  %s = input {name=\"seed\"} : i64[]\n"
      "  %o = input {name=\"offset\"} : i64[]\n"
      "  %y = dropout %x, %s, %o {p=0.3, stream=5} : f32[3, 37, 11]\n"
      "  %z = dropout %x, %s, %o {p=0.3, stream=6} : f32[3, 37, 11]\n"
      "  return %y as \"y\", %z as \"z\"\n"
      "}\n";
  Tensor first = {0};
  for (int offset = 0; offset < 2; offset++) {
    const Fill fills[] = {values[0], FILL("seed", 123456789012345.0), FILL("offset", offset ? 7 : 6), {NULL, NULL, 0}};
    for (int level = 0; level <= 2; level += 2) {
      Both b;
      both_run(&b, text, fills, level, 0);
      Tensor *got = b.got;
      expect_close(&got[0], &b.want[0], 0, "dropout stream 5");
      expect_close(&got[1], &b.want[1], 0, "dropout stream 6");
      ck_assert(memcmp(got[0].data, got[1].data, ir_tensor_nbytes(&got[0].type)) != 0);
      int64_t dropped = 0, count = ir_type_numel(&got[0].type);
      for (int64_t i = 0; i < count; i++) dropped += ir_tensor_get(&got[0], i) == 0;
      ck_assert_msg(dropped > count / 5 && dropped < count * 2 / 5, "dropped %lld of %lld", (long long)dropped,
                    (long long)count);
      if (!first.data) {
        ck_assert(ir_tensor_alloc(&first, &got[0].type));
        memcpy(first.data, got[0].data, ir_tensor_nbytes(&first.type));
      } else {
        ck_assert((offset != 0) == (memcmp(first.data, got[0].data, ir_tensor_nbytes(&first.type)) != 0));
      }
      both_free(&b);
    }
  }
  ir_tensor_free(&first);
}
END_TEST

/* random_uniform is dropout's draw scaled to [0, 1): emu equals ir_eval
 * to the bit, element i is the 24 bits dropout keeps i by over 2^24,
 * first shifts the counters by a sample's elements, and the draws look
 * uniform (mean and variance of 12 * 37 values). */
START_TEST(test_random_uniform_bits) {
  static const char text[] =
      "graph g {\n"
      "  %s = input {name=\"seed\"} : i64[]\n"
      "  %o = input {name=\"offset\"} : i64[]\n"
      "  %f = input {name=\"first\"} : i64[]\n"
      "  %u = random_uniform %s, %o {shape=[12, 37], stream=9} : f32[12, 37]\n"
      "  %v = random_uniform %s, %o, %f {shape=[12, 37], stream=9, batch=12} : f32[12, 37]\n"
      "  return %u as \"u\", %v as \"v\"\n"
      "}\n";
  const Fill fills[] = {FILL("seed", 42), FILL("offset", 3), FILL("first", 2), {NULL, NULL, 0}};
  for (int level = 0; level <= 2; level += 2) {
    Both b;
    both_run(&b, text, fills, level, 0);
    expect_close(&b.got[0], &b.want[0], 0, "random_uniform");
    expect_close(&b.got[1], &b.want[1], 0, "random_uniform from sample 2");
    int64_t count = ir_type_numel(&b.got[0].type);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < count; i++) {
      double u = ir_tensor_get(&b.got[0], i);
      ck_assert_double_eq(u, ldexp((double)ir_dropout_bits(42, 3, (uint64_t)i, 9), -24));
      /* sample 2 on starts where sample 0's row 2 does */
      if (i + 2 * 37 < count) ck_assert_double_eq(ir_tensor_get(&b.got[1], i), ir_tensor_get(&b.got[0], i + 2 * 37));
      ck_assert(u >= 0 && u < 1);
      sum += u, sq += u * u;
    }
    double mean = sum / (double)count, var = sq / (double)count - mean * mean;
    ck_assert_msg(fabs(mean - 0.5) < 0.05 && fabs(var - 1.0 / 12) < 0.02, "mean %g, variance %g", mean, var);
    both_free(&b);
  }
}
END_TEST

/* ---- models: the step's gradients on emu against ref ---- */

static const char *step_precision; /* compile_on's for emu; NULL: f32 */
static double step_rtol = 1e-5;    /* check_step's */

static dlc_model *compile_on(const char *text, const char *backend, int grad) {
  dlc_options opt = {.backend = backend, .grad = grad, .precision = strcmp(backend, "emu") == 0 ? step_precision : NULL};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("m.dl", text, &opt, &m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 11), DLC_OK);
  uint64_t state = 5;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info in;
    ck_assert_int_eq(dlc_input_info(m, i, &in), DLC_OK);
    if (in.dtype == DLC_BOOL) { /* a mask: every fourth element set */
      unsigned char *bits = malloc(in.nbytes);
      for (size_t k = 0; k < in.nbytes; k++) bits[k] = k % 4 == 3;
      ck_assert_int_eq(dlc_set_input(m, in.name, bits, in.nbytes), DLC_OK);
      free(bits);
      continue;
    }
    ck_assert_int_eq(in.dtype, DLC_F32);
    size_t n = in.nbytes / sizeof(float);
    float *data = malloc(in.nbytes);
    for (size_t k = 0; k < n; k++) data[k] = (float)((double)(test_splitmix64(&state) >> 11) * 0x1p-52 - 1);
    ck_assert_int_eq(dlc_set_input(m, in.name, data, in.nbytes), DLC_OK);
    free(data);
  }
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  return m;
}

static Tensor output_of(dlc_model *m, int i) {
  dlc_tensor_info info;
  ck_assert_int_eq(dlc_output_info(m, i, &info), DLC_OK);
  const void *data;
  size_t n;
  ck_assert_int_eq(dlc_get_output(m, i, &data, &n), DLC_OK);
  return (Tensor){ir_type_make((DType)info.dtype, info.rank, info.dims), (void *)data};
}

/* Every output of the step (loss, gradients, updates) on emu within
 * step_rtol (1e-5) of the f32 reference's scale; returns the output
 * count. */
static int check_step(const char *name, const char *text) {
  dlc_model *ref = compile_on(text, "ref", 1), *emu = compile_on(text, "emu", 1);
  int n = dlc_num_outputs(ref);
  ck_assert_int_eq(dlc_num_outputs(emu), n);
  for (int i = 0; i < n; i++) {
    dlc_tensor_info info;
    dlc_output_info(ref, i, &info);
    Tensor want = output_of(ref, i), got = output_of(emu, i);
    char what[160];
    snprintf(what, sizeof what, "%s: %s", name, info.name);
    expect_close(&got, &want, step_rtol, what);
  }
  dlc_free(ref);
  dlc_free(emu);
  return n;
}

static const char mlp[] =
    "model mlp(x: f32[2, 784], t: f32[2, 10]) -> f32[] {\n"
    "  h = gelu(linear(x, 512) as fc1, approximate=\"tanh\")\n"
    "  h = gelu(linear(h, 512) as fc2, approximate=\"tanh\")\n"
    "  return -mean(sum(log_softmax(linear(h, 10) as fc3, axis=-1) * t, axis=1))\n"
    "}\n";

static const char lenet[] =
    "model lenet(x: f32[2, 1, 28, 28], t: f32[2, 10]) -> f32[] {\n"
    "  y = maxpool2d(relu(conv2d(x, 6, kernel=5, pad=2) as conv1), kernel=2)\n"
    "  y = maxpool2d(relu(conv2d(y, 16, kernel=5) as conv2), kernel=2)\n"
    "  y = flatten(y)\n"
    "  y = relu(linear(y, 120) as fc1)\n"
    "  y = relu(linear(y, 84) as fc2)\n"
    "  return -mean(sum(log_softmax(linear(y, 10) as fc3, axis=-1) * t, axis=1))\n"
    "}\n";

static const char bn_cnn[] =
    "model cnn(x: f32[2, 3, 8, 8], t: f32[2, 10]) -> f32[] {\n"
    "  y = relu(batchnorm(conv2d(x, 8, kernel=3, pad=1, bias=false) as conv1) as bn1)\n"
    "  y = avgpool2d(y, kernel=2)\n"
    "  y = relu(batchnorm(conv2d(y, 8, kernel=3, stride=2, pad=1, bias=false) as conv2) as bn2)\n"
    "  y = dropout(flatten(global_avgpool(y)), p=0.25)\n"
    "  return -mean(sum(log_softmax(linear(y, 10) as fc, axis=-1) * t, axis=1))\n"
    "}\n";

/* Values near 1 that differ by about 0.005, below bf16's spacing at 1
 * (2^-7) and a few of f16's: the statistics are only right when
 * training batchnorm computes in f32 from its f32 input, as autocast's
 * batch_norm does. */
static const char bn_shifted[] =
    "block shift(x) {\n"
    "  return x * 0.005 + 1\n"
    "}\n"
    "model shifted(x: f32[4, 3, 2, 2], t: f32[4, 3, 2, 2]) -> f32[] {\n"
    "  s = shift(x, precision=\"f32\")\n"
    "  return mean(batchnorm(s) as bn * t)\n"
    "}\n";

static const char rnn[] =
    "model rnn(x: f32[2, 5, 6], t: f32[2, 5, 8]) -> f32[] {\n"
    "  y, h, c = lstm(x, 7, layers=2, bidirectional=true) as lstm\n"
    "  z, hz = gru(y, 8) as gru\n"
    "  return mean(z * t)\n"
    "}\n";

static const char norms[] =
    "model norms(x: f32[2, 4, 4, 4], t: f32[2, 4, 8, 8]) -> f32[] {\n"
    "  y = group_norm(conv2d(x, 4, kernel=3, pad=1) as conv1, 2) as gn\n"
    "  y = rms_norm(upsample(relu(y), 2)) as rn\n"
    "  return mean(y * t)\n"
    "}\n";

/* Attention through attention_grad's two kernels: grouped causal
 * self-attention over 70 tokens (two 64-row tiles) beside attention
 * with a key padding mask over another length (a bool input). */
static const char transformer[] =
    "model tf(x: f32[2, 70, 16], m: f32[2, 9, 16], pad: bool[2, 9], t: f32[2, 70, 16]) -> f32[] {\n"
    "  a = multihead_attention(x, x, x, 4, is_causal=true, kv_heads=2) as self_attn\n"
    "  b = multihead_attention(a, m, m, 2, key_padding_mask=pad) as cross_attn\n"
    "  return mean(layernorm(x + b) as norm * t)\n"
    "}\n";

START_TEST(test_mlp) { ck_assert_int_eq(check_step("mlp", mlp), 1 + 6); }
END_TEST

START_TEST(test_lenet) { ck_assert_int_eq(check_step("lenet", lenet), 1 + 10); }
END_TEST

/* 8 gradients, 4 running statistics and the dropout step counter. */
START_TEST(test_bn_cnn) { ck_assert_int_eq(check_step("cnn", bn_cnn), 1 + 8 + 4 + 1); }
END_TEST

/* Backpropagation through time: 16 LSTM weights, 4 GRU weights. */
START_TEST(test_rnn) { ck_assert_int_eq(check_step("rnn", rnn), 1 + 20); }
END_TEST

/* group_norm's and rms_norm's closed forms, nearest upsampling's block sums. */
/* Mixed precision (docs/training.md): the batchnorm CNN (convolutions'
 * weight gradients, avgpool's, dropout) and the transformer
 * (attention_grad's kernels on f16/bf16 operands) in bf16 and f16 and
 * LeNet (maxpool's) in f16, on emu against the f32 interpreter, every output
 * within 2.5% (bf16) or 1% (f16) of its scale (measured: 1.5% and
 * 0.65%).  LeNet in bf16 parts by up to 14% where a relu's input lies
 * within bf16's rounding of 0 and the two runs pass different units. */
START_TEST(test_low_precision) {
  step_precision = _i ? "f16" : "bf16";
  step_rtol = _i ? 1e-2 : 2.5e-2;
  ck_assert_int_eq(check_step(step_precision, bn_cnn), 1 + 8 + 4 + 1);
  ck_assert_int_eq(check_step(step_precision, bn_shifted), 1 + 2 + 2);
  if (_i) ck_assert_int_eq(check_step(step_precision, lenet), 1 + 10);
  ck_assert_int_eq(check_step(step_precision, transformer), 1 + 4 + 4 + 2);
  step_precision = NULL;
  step_rtol = 1e-5;
}
END_TEST

START_TEST(test_norms) { ck_assert_int_eq(check_step("norms", norms), 1 + 5); }
END_TEST

/* 4 weights of each attention, the layernorm's 2 */
START_TEST(test_transformer) { ck_assert_int_eq(check_step("transformer", transformer), 1 + 4 + 4 + 2); }
END_TEST

/* ---- every example model: a step on emu equal to ref ---- */

/* The examples the tests above do not already cover in kind, shrunk
 * (mobilenetv2's depthwise convolutions and relu6 are in test_grad and in
 * the ops above: its step compiles 307 kernels, too many for emu here).
 * resnet18 keeps batchnorm frozen (its running statistics): in training
 * mode a batch of 2 reaches its last stage at 1x1, where
 * each channel's statistics come from 2 values and the normalized result
 * hangs on the difference of two nearly equal numbers, so f32 and double
 * part by 1e-4 and more; the CNN above checks training mode where each
 * channel has 8 values and more. */
typedef struct Example {
  const char *file;
  int n_defines;
  Define defines[5];
  bool frozen_batchnorm;
  /* Also with --recompute: a smaller arena and the same numbers, within
   * this of each output's scale (0: bit for bit; docs/training.md says
   * why resnet18's and the transformer's part by an ulp). */
  bool recompute;
  double recompute_rtol;
  /* Its scopes removed before --recompute, as an ONNX import has none:
   * the automatic choice cuts the forward into sqrt(n) runs instead. */
  bool unscoped;
} Example;

static const Example examples[] = {
    {"lstm.dl", 5, {{"N", 2}, {"T", 3}, {"V", 40}, {"E", 8}, {"H", 8}}, false, false, 0, false},
    {"transformer.dl", 3, {{"N", 2}, {"S", 3}, {"D", 16}}, false, true, 1e-6, false},
    {"resnet18.dl", 2, {{"N", 2}, {"HW", 32}}, true, true, 1e-6, false},
    {"transformer.dl", 3, {{"N", 2}, {"S", 3}, {"D", 16}}, false, true, 1e-6, true},
    /* their matmul-softmax-matmul chains train as attention_lse and
     * attention_grad (the attention pass before autodiff) */
    {"gpt2_block.dl", 4, {{"N", 2}, {"S", 5}, {"D", 16}, {"H", 2}}, false, false, 0, false},
    {"bert_layer.dl", 5, {{"N", 2}, {"S", 5}, {"D", 16}, {"H", 2}, {"F", 32}}, false, false, 0, false},
};

/* The example lowered for training, its output y made the loss
 * mean(y * y), and differentiated (its attention chains fused first, as
 * at -O2, unless written_out). */
static Graph *example_step_as(Ctx *c, const Example *ex, bool written_out) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", getenv("top_srcdir") ? getenv("top_srcdir") : ".", ex->file);
  const SrcFile *f = ctx_load_file(c, path);
  ck_assert_msg(f != NULL, "%s", diag_text(c));
  Program *p = fe_parse(c, f);
  LowerOptions lo = {.n_defines = ex->n_defines, .defines = ex->defines, .training = true};
  Graph *g = p ? fe_lower(c, p, &lo) : NULL;
  ck_assert_msg(g && ir_verify(g), "%s: %s", ex->file, diag_text(c));
  Value *y = g->outputs[0];
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < y->type.rank; d++) axes[d] = d;
  Value *sq = ir_grad_op2(g, (SrcLoc){0}, OP_MUL, y, y);
  Value *loss = ir_grad_mean(g, (SrcLoc){0}, sq, y->type.rank, axes, false);
  const char *name = "loss";
  ir_set_outputs(g, 1, &loss, &name);
  AutodiffOptions ado = {.inference = ex->frozen_batchnorm, .fuse_attention = !written_out};
  ck_assert_msg(pass_autodiff(g, &ado) && ir_verify(g), "%s: %s", ex->file, diag_text(c));
  return g;
}

static Graph *example_step(Ctx *c, const Example *ex) { return example_step_as(c, ex, false); }

/* ---- lstm and gru through lstm_bptt and gru_bptt against the unrolled form ---- */

/* A training step of an lstm or gru (its sequence, last h and the
 * lstm's last c all in the loss) with SGD, the reference interpreter's
 * outputs of the bptt form (the default) equal to those of the unrolled
 * form (--unroll-rnn) within 1e-5 of each output's scale, and the step
 * on emu equal to the reference within 1e-5, with the persistent kernel
 * and (persist 0) with a kernel per step. */
typedef struct RnnCase {
  int gru, layers, bidirectional, batch_first, bias, T, persist;
  int last_only; /* the loss reads h_n alone: no gradient reaches y or c_n */
  int wide;      /* 6 batch rows (a group of 4 and a part) and 40 hidden units (5 warps' blocks); else 3 and 5 */
} RnnCase;

static const RnnCase rnn_cases[] = {
    {0, 1, 0, 1, 1, 5, 1, 0, 0}, {0, 2, 0, 1, 1, 3, 1, 0, 0}, {0, 1, 1, 0, 1, 5, 1, 0, 0}, {0, 2, 1, 1, 0, 3, 1, 0, 0},
    {0, 1, 0, 0, 0, 1, 1, 0, 0}, {0, 2, 1, 0, 1, 1, 0, 0, 0}, {0, 2, 1, 1, 1, 5, 0, 0, 0}, {0, 1, 0, 1, 0, 7, 0, 0, 0},
    {0, 2, 1, 1, 1, 5, 1, 1, 0}, {0, 1, 0, 1, 1, 4, 0, 1, 0}, {1, 1, 0, 1, 1, 5, 1, 0, 0}, {1, 2, 1, 0, 1, 4, 1, 0, 0},
    {1, 2, 1, 1, 0, 3, 0, 0, 0}, {1, 1, 0, 0, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 6, 0, 0, 0}, {1, 2, 0, 1, 1, 4, 1, 1, 0},
    {1, 1, 1, 0, 1, 3, 1, 0, 1}, {1, 1, 0, 1, 1, 3, 0, 0, 1}, {0, 1, 1, 1, 1, 3, 1, 0, 1},
};

static Graph *rnn_step(Ctx *c, const RnnCase *k, bool unroll) {
  int64_t N = k->wide ? 6 : 3, I = 4, H = k->wide ? 40 : 5, D = k->bidirectional ? 2 : 1;
  int64_t a = k->batch_first ? N : k->T, b = k->batch_first ? k->T : N;
  char text[1024];
  snprintf(text, sizeof text,
           "model m(x: f32[%lld, %lld, %lld], t: f32[%lld, %lld, %lld]) -> f32[] {\n"
           "  %s = %s(x, %lld, layers=%d, bidirectional=%s, batch_first=%s, bias=%s) as rnn\n"
           "  return %s\n"
           "}\n",
           (long long)a, (long long)b, (long long)I, (long long)a, (long long)b, (long long)(D * H),
           k->gru ? "y, h" : "y, h, c", k->gru ? "gru" : "lstm", (long long)H, k->layers,
           k->bidirectional ? "true" : "false", k->batch_first ? "true" : "false", k->bias ? "true" : "false",
           k->last_only ? "mean(h * h)" : k->gru ? "mean(y * t) + mean(h * h)" : "mean(y * t) + mean(h * h) + mean(c) * 0.5");
  const SrcFile *f = ctx_add_file(c, "rnn.dl", text, strlen(text));
  Program *p = f ? fe_parse(c, f) : NULL;
  LowerOptions lo = {.training = true};
  Graph *g = p ? fe_lower(c, p, &lo) : NULL;
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  AutodiffOptions ado = {.unroll_rnn = unroll};
  OptimSpec sgd = optim_spec_default(OPTIM_SGD);
  sgd.keep_grads = true;
  ck_assert_msg(pass_autodiff(g, &ado) && ir_verify(g) && pass_append_optimizer(g, &sgd) && ir_verify(g), "%s",
                diag_text(c));
  int bptt = 0;
  for (Node *n = g->first; n; n = n->next) {
    bptt += n->op == (k->gru ? OP_GRU_BPTT : OP_LSTM_BPTT);
    if (unroll) ck_assert(n->op != OP_LSTM && n->op != OP_GRU);
  }
  ck_assert_int_eq(bptt, unroll ? 0 : k->layers * D);
  return g;
}

START_TEST(test_rnn_bptt) {
  const RnnCase *k = &rnn_cases[_i];
  Ctx c;
  ctx_init(&c);
  Graph *g = rnn_step(&c, k, false), *u = rnn_step(&c, k, true), *cg_g = ir_copy(g, "step");
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(g, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Data d = {0};
  uint64_t state = 9;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    Tensor *in = &d.t[d.inputs.n];
    ck_assert(ir_tensor_alloc(in, &n->out[0].type));
    for (int64_t i = 0, count = ir_type_numel(&in->type); i < count; i++)
      ir_tensor_set(in, i, (double)(test_splitmix64(&state) >> 11) * 0x1p-52 - 1);
    d.names[d.inputs.n++] = ir_attr_str(n, "name");
  }
  d.inputs.names = d.names, d.inputs.tensors = d.t;
  ck_assert_int_eq(g->n_outputs, u->n_outputs);
  Tensor *want = calloc((size_t)g->n_outputs, sizeof *want), *unrolled = calloc((size_t)u->n_outputs, sizeof *want);
  ck_assert_msg(ir_eval(g, &d.inputs, &params, want, err, sizeof err), "ir_eval: %s", err);
  ck_assert_msg(ir_eval(u, &d.inputs, &params, unrolled, err, sizeof err), "ir_eval (unrolled): %s", err);
  char what[200];
  for (int i = 0; i < g->n_outputs; i++) {
    ck_assert_str_eq(g->output_names[i], u->output_names[i]);
    snprintf(what, sizeof what, "case %d: %s against the unrolled form", _i, g->output_names[i]);
    expect_close(&want[i], &unrolled[i], 1e-5, what);
  }
  PassOptions po = {.opt_level = 2, .verify_each = true, .no_persistent_rnn = !k->persist};
  CgResult cg;
  ck_assert_msg(cg_g && pass_run_pipeline(cg_g, &po, NULL) &&
                    cg_compile_opts(cg_g, &(CgOptions){.no_persistent_rnn = !k->persist}, &cg),
                "%s", diag_text(&c));
  /* the walk's kernels: a text per direction (layers share it, unless
   * one reads a folded dy of zeros) */
  int persist = 0, step = 0;
  const char *walk = k->gru ? "gru_bptt" : "lstm_bptt";
  char persist_name[32], step_name[32];
  snprintf(persist_name, sizeof persist_name, "%s_persist", walk);
  snprintf(step_name, sizeof step_name, "%s_step", walk);
  for (uint32_t i = 0; i < cg.plan->n_kernels; i++) {
    persist += strstr(cg.plan->kernels[i].name, persist_name) != NULL;
    step += strstr(cg.plan->kernels[i].name, step_name) != NULL;
  }
  int texts = (k->bidirectional ? 2 : 1) * (k->last_only && k->layers > 1 ? 2 : 1);
  ck_assert_int_eq(persist, k->persist ? texts : 0);
  ck_assert_int_eq(step, k->persist ? 0 : texts);
  Tensor *got = test_run_emu(cg.plan, &params, &d.inputs);
  for (int i = 0; i < g->n_outputs; i++) {
    snprintf(what, sizeof what, "case %d: %s on emu", _i, g->output_names[i]);
    expect_close(&got[i], &want[i], 1e-5, what);
  }
  free_outputs(want, g->n_outputs);
  free_outputs(unrolled, u->n_outputs);
  free_outputs(got, cg_g->n_outputs);
  free_inputs(&d);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

/* Inputs of ref from a fixed seed: floats in [-1, 1), token ids and
 * classes in range (with some_ignored, one in seven -100, the ignored
 * class), the optimizer's learning rate 0.01. */
static void draw_inputs(Graph *ref, Data *d, bool some_ignored) {
  memset(d, 0, sizeof *d);
  uint64_t state = 9;
  for (Node *n = ref->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    Tensor *in = &d->t[d->inputs.n];
    ck_assert(ir_tensor_alloc(in, &n->out[0].type));
    int64_t bound = ir_index_bound(ref, &n->out[0]);
    for (int64_t i = 0, count = ir_type_numel(&in->type); i < count; i++) {
      uint64_t r = test_splitmix64(&state);
      double v = !bound                         ? (double)(r >> 11) * 0x1p-52 - 1
                 : some_ignored && r % 7 == 0 ? -100.0
                                              : (double)(r % (uint64_t)bound);
      if (ir_dtype_is_float(in->type.dtype) && strcmp(ir_attr_str(n, "name"), OPTIM_LR_INPUT) == 0) v = 0.01;
      ir_tensor_set(in, i, v);
    }
    d->names[d->inputs.n++] = ir_attr_str(n, "name");
  }
  d->inputs.names = d->names, d->inputs.tensors = d->t;
}

/* The examples whose attention is a chain in the language (GPT-2's
 * causal mask, BERT's additive one, Llama's grouped heads, rotary
 * embedding and causal mask): their training step with the chains fused
 * (attention_lse, attention_grad) computes what the written-out one
 * computes, in the interpreter. */
START_TEST(test_attention_chains) {
  static const Example chains[] = {
      {"gpt2_block.dl", 4, {{"N", 2}, {"S", 5}, {"D", 16}, {"H", 2}}, false, false, 0, false},
      {"bert_layer.dl", 5, {{"N", 2}, {"S", 5}, {"D", 16}, {"H", 2}, {"F", 32}}, false, false, 0, false},
      {"llama_block.dl", 5, {{"N", 2}, {"S", 5}, {"D", 16}, {"H", 4}, {"KV", 2}}, false, false, 0, false},
  };
  const Example *ex = &chains[_i];
  Ctx c;
  ctx_init(&c);
  Graph *fused = example_step_as(&c, ex, false), *plain = example_step_as(&c, ex, true);
  int grads = 0;
  for (Node *n = fused->first; n; n = n->next) grads += n->op == OP_ATTENTION_GRAD;
  ck_assert_msg(grads == 1, "%s: %d attention_grad nodes, 1 wanted", ex->file, grads);
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(plain, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Data d;
  draw_inputs(plain, &d, false);
  Tensor *want = calloc((size_t)plain->n_outputs, sizeof *want), *got = calloc((size_t)fused->n_outputs, sizeof *got);
  ck_assert_msg(ir_eval(plain, &d.inputs, &params, want, err, sizeof err), "%s: ir_eval: %s", ex->file, err);
  ck_assert_msg(ir_eval(fused, &d.inputs, &params, got, err, sizeof err), "%s: ir_eval: %s", ex->file, err);
  ck_assert_int_eq(fused->n_outputs, plain->n_outputs);
  /* the values in between are f32 in both (the graphs' types), rounded
   * at other places */
  expect_step_close(got, want, plain->n_outputs, 1e-5, ex->file, plain->output_names);
  free_outputs(want, plain->n_outputs);
  free_outputs(got, fused->n_outputs);
  free_inputs(&d);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

START_TEST(test_example) {
  const Example *ex = &examples[_i];
  Ctx c;
  ctx_init(&c);
  Graph *ref = example_step(&c, ex), *g = ir_copy(ref, "step");
  PassOptions po = {.opt_level = 2, .verify_each = true};
  CgResult cg;
  ck_assert_msg(g && pass_run_pipeline(g, &po, NULL) && cg_compile(g, &cg), "%s: %s", ex->file, diag_text(&c));
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(ref, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Data d;
  draw_inputs(ref, &d, false);
  Tensor *want = calloc((size_t)ref->n_outputs, sizeof *want);
  ck_assert_msg(ir_eval(ref, &d.inputs, &params, want, err, sizeof err), "%s: ir_eval: %s", ex->file, err);
  Tensor *got = test_run_emu(cg.plan, &params, &d.inputs);
  ck_assert_int_eq(g->n_outputs, ref->n_outputs);
  expect_step_close(got, want, ref->n_outputs, 1e-5, ex->file, ref->output_names);
  if (ex->recompute) {
    /* --recompute: the same numbers in a smaller arena. */
    Graph *rg = example_step(&c, ex); /* lowered again: ir_copy keeps no scopes */
    if (ex->unscoped)
      for (Node *n = rg->first; n; n = n->next) n->scope = NULL;
    PassOptions rpo = {.opt_level = 2, .verify_each = true, .recompute = ""};
    CgResult rcg;
    ck_assert_msg(rg && pass_run_pipeline(rg, &rpo, NULL) && cg_compile(rg, &rcg), "%s: %s", ex->file,
                  diag_text(&c));
    Tensor *again = test_run_emu(rcg.plan, &params, &d.inputs);
    for (int i = 0; i < ref->n_outputs; i++) {
      char what[160];
      snprintf(what, sizeof what, "%s --recompute: %s", ex->file, ref->output_names[i]);
      expect_close(&again[i], &got[i], ex->recompute_rtol, what);
    }
    uint64_t before = cg.plan->arena_bytes, after = rcg.plan->arena_bytes;
    printf("%s%s: --recompute: arena %llu -> %llu bytes (%.1f%% smaller)\n", ex->file,
           ex->unscoped ? " (no scopes)" : "", (unsigned long long)before,
           (unsigned long long)after, 100.0 * (double)(before - after) / (double)before);
    ck_assert_msg(after < before, "%s: --recompute: arena %llu, not below %llu", ex->file,
                  (unsigned long long)after, (unsigned long long)before);
    free_outputs(again, rg->n_outputs);
  }
  free_outputs(want, ref->n_outputs);
  free_outputs(got, g->n_outputs);
  free_inputs(&d);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

/* ---- make bench's training steps: independent kernels share launches ---- */

/* tests/bench/train's models with --loss=cross_entropy --grad (and an
 * optimizer), lowered as dlcc does; launches at -O2 with and without
 * merged launches (plan_build.c's merge_launch, docs/passes.md). */
typedef struct BenchStep {
  const char *file;
  int merged, apart; /* launches of the step without an optimizer */
} BenchStep;

/* LeNet and the BN CNN: each conv_weight_grad, a GEMM over K = batch x
 * output positions with a single 64x64 tile, is split 16 ways, its last
 * slice adding the slices in the same launch (lower_train.c); its tiles
 * and slices on the grid's x alone (cg_ktiles), it shares a launch with
 * the bias gradient's sum.  The BN CNN's batch statistics:
 * one launch a batchnorm, its new running statistics the epilogue of
 * their sums (passes/fuse.c join_rows_maps), rows cut into parts added
 * by the last part to arrive (lower_rows.c). */
static const BenchStep bench_steps[] = {
    {"mlp.dl", 5, 7},
    {"lenet.dl", 11, 16},
    {"bn_cnn.dl", 11, 20},
};

static Graph *bench_step(Ctx *c, const char *file, int optim) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/bench/train/%s", getenv("top_srcdir") ? getenv("top_srcdir") : ".", file);
  const SrcFile *f = ctx_load_file(c, path);
  ck_assert_msg(f != NULL, "%s", diag_text(c));
  Program *p = fe_parse(c, f);
  LowerOptions lo = {.training = true};
  Graph *g = p ? fe_lower(c, p, &lo) : NULL;
  ck_assert_msg(g && ir_verify(g), "%s: %s", file, diag_text(c));
  LossSpec ls = loss_spec_default(LOSS_CROSS_ENTROPY);
  ck_assert_msg(pass_append_loss(g, &ls, 0, "target", NULL) && ir_verify(g), "%s: %s", file, diag_text(c));
  AutodiffOptions ado = {0};
  ck_assert_msg(pass_autodiff(g, &ado) && ir_verify(g), "%s: %s", file, diag_text(c));
  if (optim) {
    OptimSpec os = optim_spec_default(optim == 1 ? OPTIM_SGD : OPTIM_ADAM);
    ck_assert_msg(pass_append_optimizer(g, &os) && ir_verify(g), "%s: %s", file, diag_text(c));
  }
  return g;
}

static int count_launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_LAUNCH;
  return n;
}

/* Each model without an optimizer, with SGD and with Adam: the step's
 * launches (the figures of docs/training.md without one: fewer than
 * with every kernel its own launch), every output of the merged plan on
 * emu equal bit for bit to the plan with a launch per kernel (a part
 * computes what its kernel computed alone) and within 1e-5 of ir_eval's
 * scale; Adam's within 1e-3 (its first step is g / (|g| + 1e-8), which
 * turns a gradient of about 1e-12 where ir_eval's is 0 into a tenth of
 * the learning rate: measured 1.1e-4 of the scale in the MLP). */
START_TEST(test_bench_step_launches) {
  const BenchStep *bs = &bench_steps[_i / 3];
  int optim = _i % 3;
  Ctx c;
  ctx_init(&c);
  Graph *ref = bench_step(&c, bs->file, optim), *g = ir_copy(ref, "step"), *h = ir_copy(ref, "apart");
  PassOptions po = {.opt_level = 2, .verify_each = true};
  CgResult cg, cg_apart;
  ck_assert_msg(pass_run_pipeline(g, &po, NULL) && cg_compile_opts(g, &(CgOptions){.merge_launches = true}, &cg),
                "%s: %s", bs->file, diag_text(&c));
  ck_assert_msg(pass_run_pipeline(h, &po, NULL) && cg_compile(h, &cg_apart),
                "%s: %s", bs->file, diag_text(&c));
  int merged = count_launches(cg.plan), apart = count_launches(cg_apart.plan);
  printf("%s (optimizer %d): %d launches, %d apart\n", bs->file, optim, merged, apart);
  ck_assert_int_lt(merged, apart);
  /* shared launches and chains never give up the planner's reuse of a
   * large buffer (plan_build.c's MERGE_HOLD_BYTES: a few small ones may
   * live longer) */
  ck_assert_uint_le(cg.plan->arena_bytes, cg_apart.plan->arena_bytes + 32768);
  if (!optim) {
    ck_assert_int_eq(merged, bs->merged);
    ck_assert_int_eq(apart, bs->apart);
  }
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(ref, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Data d;
  draw_inputs(ref, &d, true);
  Tensor *want = calloc((size_t)ref->n_outputs, sizeof *want);
  ck_assert_msg(ir_eval(ref, &d.inputs, &params, want, err, sizeof err), "%s: ir_eval: %s", bs->file, err);
  Tensor *got = test_run_emu(cg.plan, &params, &d.inputs);
  Tensor *alone = test_run_emu(cg_apart.plan, &params, &d.inputs);
  for (int i = 0; i < ref->n_outputs; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s (optimizer %d): %s", bs->file, optim, ref->output_names[i]);
    char apart_what[200];
    snprintf(apart_what, sizeof apart_what, "%s, merged against apart", what);
    expect_close(&got[i], &alone[i], 0, apart_what);
    expect_close(&got[i], &want[i], optim == 2 ? 1e-3 : 1e-5, what);
  }
  free_outputs(want, ref->n_outputs);
  free_outputs(got, g->n_outputs);
  free_outputs(alone, h->n_outputs);
  free_inputs(&d);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

/* The new running statistics are PyTorch's: (1 - momentum) running +
 * momentum batch, the variance unbiased; computed here from the input. */
START_TEST(test_running_stats) {
  static const char text[] =
      "model m(x: f32[3, 2, 2]) -> f32[] {\n"
      "  return sum(batchnorm(x, momentum=0.25) as bn)\n"
      "}\n";
  dlc_model *m = compile_on(text, "ref", 1);
  ck_assert_int_eq(dlc_num_outputs(m), 5);
  dlc_tensor_info info;
  ck_assert_int_eq(dlc_output_info(m, 4, &info), DLC_OK);
  ck_assert_str_eq(info.name, "bn.running_var");
  /* the same input as compile_on's, and the weights from dlc_init_weights(m, 11) */
  uint64_t state = 5;
  float x[12];
  for (int k = 0; k < 12; k++) x[k] = (float)((double)(test_splitmix64(&state) >> 11) * 0x1p-52 - 1);
  Ctx c;
  ctx_init(&c);
  static const char src[] = "graph g {\n  %0 = param {name=\"bn.running_mean\", init=\"zeros\"} : f32[2]\n"
                            "  %1 = param {name=\"bn.running_var\", init=\"ones\"} : f32[2]\n"
                            "  return %0 as \"m\", %1 as \"v\"\n}\n";
  Graph *g = ir_parse(&c, ctx_add_file(&c, "p.ir", src, strlen(src)));
  TensorMap params;
  char err[256];
  ck_assert(ir_init_params(g, 11, IR_INIT_RANDOM, &params, err, sizeof err));
  const Tensor *rm = ir_tensor_map_find(&params, "bn.running_mean"), *rv = ir_tensor_map_find(&params, "bn.running_var");
  Tensor new_mean = output_of(m, 3), new_var = output_of(m, 4);
  for (int ch = 0; ch < 2; ch++) {
    double s = 0, q = 0;
    for (int b = 0; b < 3; b++)
      for (int i = 0; i < 2; i++) s += x[b * 4 + ch * 2 + i];
    double mean = s / 6;
    for (int b = 0; b < 3; b++)
      for (int i = 0; i < 2; i++) q += (x[b * 4 + ch * 2 + i] - mean) * (x[b * 4 + ch * 2 + i] - mean);
    double want_m = 0.75 * ir_tensor_get(rm, ch) + 0.25 * mean;
    double want_v = 0.75 * ir_tensor_get(rv, ch) + 0.25 * q / 5;
    ck_assert_double_eq_tol(ir_tensor_get(&new_mean, ch), want_m, 1e-6);
    ck_assert_double_eq_tol(ir_tensor_get(&new_var, ch), want_v, 1e-6);
  }
  ir_tensor_map_free(&params);
  ctx_free(&c);
  dlc_free(m);
}
END_TEST

/* The batch statistics in one pass over x (passes/train_mode.c) on data
 * whose mean is large against its spread: mean 1000 and -500, spread
 * 1e-2, where E[x^2] - E[x]^2 in f32 loses the variance (1e-4) to an
 * error of about 0.06.  With momentum 1 the new running statistics are
 * the batch's (the variance unbiased), checked against f64 sums of the
 * same f32 values on ref and on emu at -O0 and -O2 (one kernel for both
 * sums); and the loss sum(y^2), y the normalized x (weight one, bias
 * zero), is C * M * var / (var + eps). */
START_TEST(test_stats_large_mean) {
  static const char text[] =
      "model m(x: f32[4, 2, 3, 3]) -> f32[] {\n"
      "  y = batchnorm(x, momentum=1) as bn\n"
      "  return sum(y * y)\n"
      "}\n";
  enum { N = 4, C = 2, P = 9, M = N * P };
  static const double centre[C] = {1000, -500};
  float x[N * C * P];
  uint64_t state = 7;
  for (int k = 0; k < N * C * P; k++)
    x[k] = (float)(centre[(k / P) % C] + 1e-2 * ((double)(test_splitmix64(&state) >> 11) * 0x1p-52 - 0.5));
  double mean[C], var[C], loss = 0;
  for (int ch = 0; ch < C; ch++) {
    double s = 0, q = 0;
    for (int b = 0; b < N; b++)
      for (int i = 0; i < P; i++) s += x[(b * C + ch) * P + i];
    mean[ch] = s / M;
    for (int b = 0; b < N; b++)
      for (int i = 0; i < P; i++) q += (x[(b * C + ch) * P + i] - mean[ch]) * (x[(b * C + ch) * P + i] - mean[ch]);
    var[ch] = q / M;
    loss += M * var[ch] / (var[ch] + 1e-5);
  }
  const char *backends[] = {"ref", "emu", "emu"};
  for (int k = 0; k < 3; k++) {
    dlc_options opt = {.backend = backends[k], .grad = 1, .opt_level = k == 1 ? DLC_O0 : 2};
    dlc_model *m = NULL;
    ck_assert_msg(dlc_compile_string("m.dl", text, &opt, &m) == DLC_OK, "%s: %s", backends[k], dlc_error(m));
    ck_assert_int_eq(dlc_init_weights(m, 11), DLC_OK);
    static const float one[C] = {1, 1}, zero[C] = {0, 0};
    ck_assert_int_eq(dlc_set_weight(m, "bn.weight", one, sizeof one), DLC_OK);
    ck_assert_int_eq(dlc_set_weight(m, "bn.bias", zero, sizeof zero), DLC_OK);
    ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
    ck_assert_msg(dlc_run(m) == DLC_OK, "%s: %s", backends[k], dlc_error(m));
    Tensor got_loss = output_of(m, 0), got_mean = output_of(m, 3), got_var = output_of(m, 4);
    for (int ch = 0; ch < C; ch++) {
      double m_got = ir_tensor_get(&got_mean, ch), v_got = ir_tensor_get(&got_var, ch);
      double v_want = var[ch] * M / (M - 1);
      ck_assert_msg(fabs(m_got - mean[ch]) <= 1e-7 * fabs(mean[ch]), "%s -O%d: channel %d: mean %.9g, want %.9g",
                    backends[k], k == 1 ? 0 : 2, ch, m_got, mean[ch]);
      ck_assert_msg(fabs(v_got - v_want) <= 1e-5 * v_want, "%s -O%d: channel %d: variance %.9g, want %.9g",
                    backends[k], k == 1 ? 0 : 2, ch, v_got, v_want);
    }
    ck_assert_msg(fabs(ir_tensor_get(&got_loss, 0) - loss) <= 1e-5 * loss, "%s -O%d: loss %.9g, want %.9g",
                  backends[k], k == 1 ? 0 : 2, ir_tensor_get(&got_loss, 0), loss);
    dlc_free(m);
  }
}
END_TEST

static Suite *train_suite(void) {
  Suite *s = suite_create("train");
  TCase *ops = tcase_create("ops");
  tcase_set_timeout(ops, 180);
  tcase_add_test(ops, test_conv_weight_grad);
  tcase_add_loop_test(ops, test_conv_weight_grad_gemm, 0, 3);
  tcase_add_test(ops, test_matmul_trans);
  tcase_add_test(ops, test_resize_grad);
  tcase_add_test(ops, test_pool_grads);
  tcase_add_test(ops, test_embedding_grad);
  tcase_add_test(ops, test_embedding_grad_bad_id);
  tcase_add_test(ops, test_dropout_bits);
  tcase_add_test(ops, test_random_uniform_bits);
  suite_add_tcase(s, ops);
  TCase *models = tcase_create("models");
  tcase_set_timeout(models, 300);
  tcase_add_test(models, test_mlp);
  tcase_add_test(models, test_lenet);
  tcase_add_test(models, test_bn_cnn);
  tcase_add_test(models, test_rnn);
  tcase_add_test(models, test_norms);
  tcase_add_test(models, test_transformer);
  tcase_add_test(models, test_running_stats);
  tcase_add_test(models, test_stats_large_mean);
  tcase_add_loop_test(models, test_low_precision, 0, 2);
  suite_add_tcase(s, models);
  TCase *ex = tcase_create("examples");
  tcase_set_timeout(ex, 600);
  tcase_add_loop_test(ex, test_example, 0, (int)ARRAY_LEN(examples));
  tcase_add_loop_test(ex, test_attention_chains, 0, 3);
  TCase *bptt = tcase_create("rnn_bptt");
  tcase_set_timeout(bptt, 600);
  tcase_add_loop_test(bptt, test_rnn_bptt, 0, (int)ARRAY_LEN(rnn_cases));
  suite_add_tcase(s, bptt);
  suite_add_tcase(s, ex);
  TCase *bench = tcase_create("bench_steps");
  tcase_set_timeout(bench, 600);
  tcase_add_loop_test(bench, test_bench_step_launches, 0, 3 * (int)ARRAY_LEN(bench_steps));
  suite_add_tcase(s, bench);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(train_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
