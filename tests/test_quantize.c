/* int8 quantization (passes/quantize.c) on the reference interpreter:
 * what the pass builds (int8 products, per-channel weight scales over the
 * params, the activation scale in the IR, the text round trip), what it
 * leaves in f32, and how close the int8 graph stays to the f32 one:
 * top-1 agreement on 256 random inputs for MLP, LeNet and ResNet-18 with
 * deterministic random weights (the limits, and why two are 98%, are at
 * `models` below), calibrated (api/calibrate.c,
 * its default method) on a folder of other inputs drawn the same way, and
 * every layer within 5% RMS of its f32 value (api/quantreport.c).  The
 * structure tests use the smallest calibrator the pass's contract allows.
 * DLCC_TEST_VERBOSE=1 prints the quant-report tables; DLCC_TEST_SEED
 * changes the weights and inputs. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/calibrate.h"
#include "api/quantreport.h"
#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/tensorio.h"
#include "tests/testutil.h"

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

static bool verbose(void) { return getenv("DLCC_TEST_VERBOSE") != NULL; }

static uint64_t rng_state;
static double uniform01(void) {
  uint64_t z = test_splitmix64(&rng_state);
  return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}
static double gaussian(void) { return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

/* ---- graphs ---- */

static Graph *lower_file(Ctx *c, const char *file, int n_defines, const Define *defines) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", srcdir(), file);
  const SrcFile *f = ctx_load_file(c, path);
  ck_assert_msg(f != NULL, "%s", diag_text(c));
  Program *p = fe_parse(c, f);
  ck_assert_msg(p != NULL, "%s", diag_text(c));
  LowerOptions lo = {.n_defines = n_defines, .defines = defines};
  Graph *g = fe_lower(c, p, &lo);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return g;
}

static Graph *parse_text(Ctx *c, const char *name, const char *text) {
  Graph *g = ir_parse(c, ctx_add_file(c, name, text, strlen(text)));
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return g;
}

/* ---- inputs ---- */

typedef struct Batch {
  TensorMap map;
  const char *names[4];
  Tensor tensors[4];
} Batch;

/* Every input of g filled with N(0, 1) draws. */
static void batch_random(Batch *b, Graph *g) {
  memset(b, 0, sizeof *b);
  b->map.names = b->names;
  b->map.tensors = b->tensors;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    ck_assert_int_lt(b->map.n, 4);
    Tensor *t = &b->tensors[b->map.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    int64_t count = ir_type_numel(&n->out[0].type);
    for (int64_t i = 0; i < count; i++) ir_tensor_set(t, i, gaussian());
    b->names[b->map.n++] = ir_attr_str(n, "name");
  }
}

static void batch_free(Batch *b) {
  for (int i = 0; i < b->map.n; i++) ir_tensor_free(&b->tensors[i]);
}

/* ---- the calibrator: largest |x| over a few random batches ---- */

typedef struct Calib {
  const TensorMap *params;
  int batches;
  int n;
  const Value *const *values;
  double *amax;
  int calls;
} Calib;

static void observe_max(void *ud, const Value *v, const Tensor *t) {
  Calib *c = ud;
  for (int i = 0; i < c->n; i++) {
    if (c->values[i] != v) continue;
    int64_t count = ir_type_numel(&t->type);
    for (int64_t j = 0; j < count; j++) c->amax[i] = fmax(c->amax[i], fabs(ir_tensor_get(t, j)));
  }
}

static bool calibrate_minmax(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  Calib *c = ud;
  c->calls++;
  c->n = n;
  c->values = values;
  c->amax = amax;
  for (int i = 0; i < n; i++) amax[i] = 0;
  Tensor *out = calloc((size_t)g->n_outputs, sizeof *out);
  for (int k = 0; k < c->batches; k++) {
    Batch b;
    batch_random(&b, g);
    char err[512];
    ck_assert_msg(ir_eval_observe(g, &b.map, c->params, out, observe_max, c, err, sizeof err), "%s", err);
    for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
    batch_free(&b);
  }
  free(out);
  return true;
}

static bool calibrate_fails(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  (void)ud, (void)n, (void)values, (void)amax;
  diag_error(g->ctx, (SrcLoc){0}, "calibration folder 'nowhere' does not exist");
  return false;
}

static int count_ops(const Graph *g, OpKind op) {
  int k = 0;
  for (const Node *n = g->first; n; n = n->next) k += n->op == op;
  return k;
}

static void quantize(Graph *g, int level, Calib *calib, QuantSummary *summary) {
  PassOptions po = {.opt_level = level,
                    .verify_each = true,
                    .quantize_int8 = true,
                    .calibrate = calibrate_minmax,
                    .calibrate_ud = calib,
                    .quant_summary = summary};
  ck_assert_msg(pass_run_pipeline(g, &po, NULL), "%s", diag_text(g->ctx));
  ck_assert_msg(ir_verify(g), "%s", diag_text(g->ctx));
}

/* ---- structure ---- */

static const char *mlp_text =
    "graph mlp {\n"
    "  %0 = input {name=\"x\"} : f32[4, 16]\n"
    "  %1 = param {name=\"fc1.weight\"} : f32[8, 16]\n"
    "  %2 = param {name=\"fc1.bias\"} : f32[8]\n"
    "  %3 = linear %0, %1, %2 : f32[4, 8]\n"
    "  %4 = relu %3 : f32[4, 8]\n"
    "  %5 = param {name=\"fc2.weight\"} : f32[3, 8]\n"
    "  %6 = linear %4, %5 : f32[4, 3]\n"
    "  %7 = reshape %4 {shape=[8, 4]} : f32[8, 4]\n"
    "  %8 = matmul %4, %7 : f32[4, 4]\n"
    "  return %6 as \"y\", %8 as \"z\"\n"
    "}\n";

START_TEST(test_products_become_int8) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, "mlp.ir", mlp_text);
  TensorMap params;
  char err[256];
  ck_assert_msg(ir_init_params(g, 7, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Calib calib = {.params = &params, .batches = 2};
  QuantSummary s;
  quantize(g, 0, &calib, &s);
  ck_assert_int_eq(calib.calls, 1);
  ck_assert_int_eq(s.n_layers, 2);
  ck_assert_int_eq(s.n_kept_f32, 1); /* the matmul of two activations */
  ck_assert_int_eq(count_ops(g, OP_QUANTIZE), 4); /* two activations, two weights */
  ck_assert_int_eq(count_ops(g, OP_DEQUANTIZE), 2);
  int int8_products = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_LINEAR) {
      ck_assert_int_eq(n->in[0]->type.dtype, TY_I8);
      ck_assert_int_eq(n->in[1]->type.dtype, TY_I8);
      ck_assert_int_eq(n->out[0].type.dtype, TY_I32);
      ck_assert_int_eq(n->n_in, 2); /* the bias is added after dequantize */
      int8_products++;
    }
  ck_assert_int_eq(int8_products, 2);
  /* The activation scale is the calibrated range over 127, in the IR. */
  for (int i = 0; i < s.n_layers; i++) {
    ck_assert(s.layers[i].amax > 0);
    ck_assert_float_eq_tol(s.layers[i].scale, (float)(s.layers[i].amax / (s.layers[i].zero_point ? 255 : 127)), 1e-12);
    ck_assert(s.layers[i].result->type.dtype == TY_F32);
  }
  /* fc1 reads the input (signed); fc2 a relu (unsigned: zero point -128). */
  ck_assert_int_eq(s.layers[0].zero_point, 0);
  ck_assert_int_eq(s.layers[1].zero_point, -128);
  ck_assert_str_eq(s.layers[0].label, "linear %3 fc1.weight");
  ck_assert_str_eq(s.layers[1].label, "linear %6 fc2.weight");
  bool found = false;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_QUANTIZE && n->n_in == 1) found |= fabs(ir_attr_float(n, "scale") - s.layers[0].scale) == 0;
  ck_assert(found);
  /* Per-channel weight scales: one per output feature, over the params
   * alone. */
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_QUANTIZE && n->n_in == 2) {
      ck_assert_int_eq(n->in[0]->def->op, OP_PARAM);
      ck_assert_int_eq(n->in[1]->type.rank, 2);
      ck_assert_int_eq(n->in[1]->type.dims[0], n->in[0]->type.dims[0]);
      ck_assert_int_eq(n->in[1]->type.dims[1], 1);
    }
  /* Text round trip. */
  char *a = test_print_ir(g);
  Graph *back = parse_text(&c, "back.ir", a);
  char *b = test_print_ir(back);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

START_TEST(test_calibration_failure_fails_the_pipeline) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, "mlp.ir", mlp_text);
  PassOptions po = {.quantize_int8 = true, .calibrate = calibrate_fails};
  ck_assert(!pass_run_pipeline(g, &po, NULL));
  ck_assert_ptr_nonnull(strstr(diag_text(&c), "calibration folder 'nowhere' does not exist"));
  ctx_free(&c);
}
END_TEST

START_TEST(test_quantize_needs_a_calibrator_and_f32) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, "mlp.ir", mlp_text);
  PassOptions po = {.quantize_int8 = true};
  ck_assert(!pass_run_pipeline(g, &po, NULL));
  ck_assert_ptr_nonnull(strstr(diag_text(&c), "needs calibration data"));
  ctx_free(&c);
  ctx_init(&c);
  g = parse_text(&c, "mlp.ir", mlp_text);
  po = (PassOptions){.quantize_int8 = true, .calibrate = calibrate_fails, .precision = TY_F16};
  ck_assert(!pass_run_pipeline(g, &po, NULL));
  ck_assert_ptr_nonnull(strstr(diag_text(&c), "do not combine"));
  ctx_free(&c);
}
END_TEST

/* #f32 products and those of two weights stay as they are. */
START_TEST(test_kept_in_f32) {
  static const char *text =
      "graph k {\n"
      "  %0 = input {name=\"x\"} : f32[2, 4]\n"
      "  %1 = param {name=\"w\"} : f32[4, 4]\n"
      "  %2 = linear %0, %1 : f32[2, 4] #f32\n"
      "  %3 = matmul %1, %1 : f32[4, 4]\n"
      "  %4 = matmul %2, %3 : f32[2, 4]\n"
      "  return %4 as \"y\"\n"
      "}\n";
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, "k.ir", text);
  TensorMap params;
  char err[256];
  ck_assert_msg(ir_init_params(g, 1, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Calib calib = {.params = &params, .batches = 1};
  QuantSummary s;
  quantize(g, 0, &calib, &s);
  /* Only the last matmul (activation @ weight-only) is int8. */
  ck_assert_int_eq(s.n_layers, 1);
  ck_assert_int_eq(s.n_kept_f32, 1);
  ck_assert_int_eq(count_ops(g, OP_DEQUANTIZE), 1);
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_LINEAR) ck_assert_int_eq(n->out[0].type.dtype, TY_F32);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

/* ---- convolutions without a zero point ---- */

/* conv3d and the conv-transposes (groups 1 and 2, strides 2, an
 * output_pad) in int8 with symmetric activations even after a relu (no
 * zero_point attribute: their padding and holes read 0) and per-channel
 * weight scales along a conv-transpose's output channels: every
 * convolution int8, within 5% RMS of the f32 graph on the interpreter,
 * and its kernels on emu equal to the interpreter's int8 graph byte for
 * byte, NVRTC compiling them for sm_90. */
static const char *const sym_models[] = {
    "model up(x: f32[2, 8, 6, 6]) -> y: f32[2, 8, 24, 24] {\n"
    "  y = relu(conv2d(x, 16, kernel=3, pad=1) as c1)\n"
    "  y = relu(conv_transpose2d(y, 16, kernel=4, stride=2, pad=1) as up1)\n"
    "  return conv_transpose2d(y, 8, kernel=3, stride=2, pad=1, output_pad=1, groups=2) as up2\n"
    "}\n",
    "model vol(x: f32[1, 4, 4, 5, 5]) -> y: f32[1, 4, 8, 10, 10] {\n"
    "  y = relu(conv3d(x, 8, kernel=3, pad=1) as c1)\n"
    "  return conv_transpose3d(y, 4, kernel=2, stride=2) as up1\n"
    "}\n",
};

START_TEST(test_symmetric_convolutions) {
  Ctx c;
  ctx_init(&c);
  const char *text = sym_models[_i];
  Graph *graphs[2];
  for (int k = 0; k < 2; k++) {
    Program *p = fe_parse(&c, ctx_add_file(&c, "sym.dl", text, strlen(text)));
    ck_assert_msg(p, "%s", diag_text(&c));
    LowerOptions lo = {0};
    ck_assert_msg((graphs[k] = fe_lower(&c, p, &lo)) && ir_verify(graphs[k]), "%s", diag_text(&c));
  }
  Graph *f32 = graphs[0], *g = graphs[1];
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(g, 9, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  rng_state = 31;
  Calib calib = {.params = &params, .batches = 4};
  QuantSummary s;
  quantize(g, 2, &calib, &s);
  int convs = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_CONV2D || n->op == OP_CONV3D || n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D) {
      ck_assert_int_eq(n->in[0]->type.dtype, TY_I8);
      ck_assert_int_eq(n->in[1]->type.dtype, TY_I8);
      ck_assert_int_eq(n->out[0].type.dtype, TY_I32);
      convs++;
    }
  ck_assert_int_eq(convs, _i ? 2 : 3);
  ck_assert_int_eq(s.n_layers, convs);
  ck_assert_int_eq(s.n_kept_f32, 0);
  for (int i = 1; i < s.n_layers; i++) ck_assert_int_eq(s.layers[i].zero_point, 0); /* after a relu */
  Batch b;
  batch_random(&b, g);
  Tensor want, got32;
  ck_assert_msg(ir_eval(g, &b.map, &params, &want, err, sizeof err), "%s", err);
  ck_assert_msg(ir_eval(f32, &b.map, &params, &got32, err, sizeof err), "%s", err);
  double se = 0, sr = 0;
  for (int64_t i = 0, count = ir_type_numel(&want.type); i < count; i++) {
    double d = ir_tensor_get(&want, i) - ir_tensor_get(&got32, i);
    se += d * d, sr += ir_tensor_get(&got32, i) * ir_tensor_get(&got32, i);
  }
  ck_assert_msg(sr > 0 && sqrt(se / sr) < 0.05, "model %d: rel rms %.3e against f32", _i, sqrt(se / sr));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  test_nvrtc(cg.source, "sm_90");
  Tensor *got = test_run_emu(cg.plan, &params, &b.map);
  ck_assert(ir_type_eq(&got[0].type, &want.type));
  ck_assert_msg(memcmp(got[0].data, want.data, ir_tensor_nbytes(&want.type)) == 0, "model %d: emu and ir_eval differ", _i);
  ir_tensor_free(&got[0]);
  free(got);
  ir_tensor_free(&want);
  ir_tensor_free(&got32);
  batch_free(&b);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

/* ---- accuracy against f32 ---- */

/* Writes `count` random batches for g's single input into a fresh
 * folder, as a user's calibration set would be; returns its path. */
static char *write_samples(Graph *g, int count) {
  char *dir = strdup("/tmp/dlcc-calib-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  for (int k = 0; k < count; k++) {
    Batch b;
    batch_random(&b, g);
    ck_assert_int_eq(b.map.n, 1);
    const Tensor *t = &b.tensors[0];
    RtTensor rt = {.dtype = (RtDType)t->type.dtype, .rank = t->type.rank, .data = t->data,
                   .nbytes = ir_tensor_nbytes(&t->type)};
    memcpy(rt.dims, t->type.dims, sizeof(int64_t) * (size_t)t->type.rank);
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%03d.npy", dir, k);
    ck_assert_msg(rt_npy_write(path, &rt, err, sizeof err) == 0, "%s", err);
    batch_free(&b);
  }
  return dir;
}

static void remove_samples(char *dir, int count) {
  for (int k = 0; k < count; k++) {
    char path[600];
    snprintf(path, sizeof path, "%s/%03d.npy", dir, k);
    remove(path);
  }
  rmdir(dir);
  free(dir);
}

typedef struct Model {
  const char *file;
  int n_defines;
  Define defines[3];
  double min_top1;
} Model;

/* Batches of 16 or 32: 256 test inputs are 8 or 16 evaluations.
 *
 * MLP and LeNet are held to 98%, ResNet-18 to the 99% aimed at.  Their
 * ten random-weight logits are close (the flipped rows have margins of
 * 1e-4 to 2e-3 of the logits' range) and their first layer reads N(0, 1)
 * inputs, whose 8-bit rounding error (0.9% RMS at the best clipping, 3.9
 * sigma) is a floor no calibration method moves; every layer after it
 * adds about as much (MLP: 1.1%, 1.5%, 1.8% RMS after fc1, fc2, fc3).
 * With 256 rows one flip is 0.4%, so a true rate of 99.2% reads anywhere
 * from 98.4% to 100%.  Over weight seeds 1-7: MLP 97.7-100% (median
 * 99.2%), LeNet 97.3-100% (median 100%), with N(0, 1) or U(-1, 1) inputs
 * alike; ResNet-18 100% on every seed.  DLCC_TEST_SEED=S reruns one. */
static const Model models[] = {
    {"mlp.dl", 1, {{"N", 32}}, 0.98},
    {"lenet.dl", 1, {{"N", 32}}, 0.98},
    {"resnet18.dl", 2, {{"N", 16}, {"HW", 16}}, 0.99},
};

/* Deterministic random weights (DLCC_TEST_SEED, default 42), calibrated
 * with the default method on 8 batches of N(0, 1) inputs written to a
 * folder, then 256 other inputs from the same distribution through the
 * f32 and the int8 graph (api/quantreport.c). */
START_TEST(test_top1_agreement) {
  const Model *m = &models[_i];
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_file(&c, m->file, m->n_defines, m->defines);
  uint64_t seed = getenv("DLCC_TEST_SEED") ? strtoull(getenv("DLCC_TEST_SEED"), NULL, 10) : 42;
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(g, seed, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  rng_state = 1000 + seed;
  enum { CALIB_BATCHES = 8 };
  char *dir = write_samples(g, CALIB_BATCHES);
  ApiCalibration cal = {.dir = dir, .method = api_calib_default_method(), .params = &params};
  QuantCopyCalibrator copy = {.inner = api_calibrate, .inner_ud = &cal};
  QuantSummary s;
  PassOptions po = {.opt_level = 2,
                    .verify_each = true,
                    .quantize_int8 = true,
                    .calibrate = api_quant_copy_calibrate,
                    .calibrate_ud = &copy,
                    .quant_summary = &s};
  ck_assert_msg(pass_run_pipeline(g, &po, NULL), "%s", diag_text(&c));
  ck_assert_int_eq(cal.n_samples, CALIB_BATCHES);
  ck_assert_int_gt(s.n_layers, 0);
  ck_assert_ptr_nonnull(copy.f32);
  rng_state = 2000 + seed; /* test inputs: the same distribution, other draws */
  QuantReport rep;
  api_quant_report_init(&rep, g, &s);
  while (rep.outputs[0].rows < 256) {
    Batch b;
    batch_random(&b, copy.f32);
    ck_assert_msg(api_quant_report_add(&rep, copy.f32, g, &b.map, &params, err, sizeof err), "%s", err);
    batch_free(&b);
  }
  const QuantOutputErr *o = &rep.outputs[0];
  ck_assert(o->classifier);
  double top1 = (double)o->agree / (double)o->rows;
  printf("int8 %-12s %2d products in int8, %d in f32: top-1 agreement %.4f on %lld inputs, "
         "max error %.2e of the output's scale\n",
         m->file, s.n_layers, s.n_kept_f32, top1, (long long)o->rows, o->err.max_err / o->err.max_ref);
  if (verbose()) api_quant_report_print(stdout, &rep);
  /* Every layer stays within a few percent of its f32 value. */
  for (int i = 0; i < s.n_layers; i++)
    ck_assert_msg(api_quant_rel_rms(&rep.layers[i]) < 0.05, "%s: %s: rel rms error %.3e", m->file,
                  s.layers[i].label, api_quant_rel_rms(&rep.layers[i]));
  ck_assert_msg(top1 >= m->min_top1, "%s: top-1 agreement %.4f < %.2f", m->file, top1, m->min_top1);
  api_quant_report_free(&rep);
  ir_tensor_map_free(&params);
  remove_samples(dir, CALIB_BATCHES);
  ctx_free(&c);
}
END_TEST

/* The compiled int8 model: its kernels on emu compute exactly what the
 * interpreter computes for the same int8 graph, NVRTC compiles them for
 * sm_80 and sm_90, and quantization costs at most one launch more than
 * f32 (the quantizes fuse into the products' loads and epilogues; a
 * cuBLAS GEMM reads its i8 operand from memory, which can take a kernel
 * that only stores it).  An int8 convolution on the tensor cores may
 * split K, which adds the kernel that sums the slices: those are not the
 * quantization's. */
/* Launches and GEMMs; a GEMM whose epilogue cuBLASLt applies (f32's
 * linear + bias + relu) counts twice, for the kernel it spares: an int8
 * product keeps that kernel, its dequantize. */
static int count_launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) {
    const RtStep *s = &p->steps[i];
    if (s->kind != RT_STEP_COPY && strstr(s->label, "slices added")) continue;
    n += (s->kind != RT_STEP_COPY) + (s->kind == RT_STEP_GEMM && s->gemm.epilogue != RT_EPILOGUE_NONE);
  }
  return n;
}

static const Model compiled[] = {
    {"lenet.dl", 1, {{"N", 2}}, 0},
    {"resnet18.dl", 2, {{"N", 1}, {"HW", 16}}, 0},
};

START_TEST(test_kernels_match_interpreter) {
  const Model *m = &compiled[_i];
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_file(&c, m->file, m->n_defines, m->defines);
  TensorMap params;
  char err[512];
  ck_assert_msg(ir_init_params(g, 5, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  /* The f32 model's launch count, for comparison. */
  Graph *f32 = lower_file(&c, m->file, m->n_defines, m->defines);
  PassOptions po = {.opt_level = 2};
  ck_assert_msg(pass_run_pipeline(f32, &po, NULL), "%s", diag_text(&c));
  CgResult cg32;
  ck_assert_msg(cg_compile(f32, &cg32), "%s", diag_text(&c));

  rng_state = 77;
  char *dir = write_samples(g, 2);
  ApiCalibration cal = {.dir = dir, .method = api_calib_default_method(), .params = &params};
  QuantSummary s;
  po = (PassOptions){.opt_level = 2, .verify_each = true, .quantize_int8 = true,
                     .calibrate = api_calibrate, .calibrate_ud = &cal, .quant_summary = &s};
  ck_assert_msg(pass_run_pipeline(g, &po, NULL), "%s", diag_text(&c));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  int i8_launches = count_launches(cg.plan), f32_launches = count_launches(cg32.plan);
  printf("int8 %-12s %d launches a run (f32: %d), %u init steps\n", m->file, i8_launches, f32_launches,
         cg.plan->n_init_steps);
  ck_assert_int_le(i8_launches, f32_launches + 1);
  test_nvrtc(cg.source, "sm_80");
  test_nvrtc(cg.source, "sm_90");

  Batch b;
  batch_random(&b, g);
  Tensor want[1];
  ck_assert_msg(ir_eval(g, &b.map, &params, want, err, sizeof err), "%s", err);
  Tensor *got = test_run_emu(cg.plan, &params, &b.map);
  ck_assert(ir_type_eq(&got[0].type, &want[0].type));
  ck_assert_msg(memcmp(got[0].data, want[0].data, ir_tensor_nbytes(&want[0].type)) == 0,
                "%s: emu and ir_eval differ on the int8 graph", m->file);
  ir_tensor_free(&got[0]);
  free(got);
  ir_tensor_free(&want[0]);
  batch_free(&b);
  remove_samples(dir, 2);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("quantize");
  TCase *t = tcase_create("pass");
  /* test_symmetric_convolutions compiles with NVRTC: past Check's 4 s
   * default under ASan on a loaded 2-core machine (it timed out once in
   * CI's sanitized run) */
  tcase_set_timeout(t, 120);
  tcase_add_test(t, test_products_become_int8);
  tcase_add_test(t, test_calibration_failure_fails_the_pipeline);
  tcase_add_test(t, test_quantize_needs_a_calibrator_and_f32);
  tcase_add_test(t, test_kept_in_f32);
  tcase_add_loop_test(t, test_symmetric_convolutions, 0, 2);
  suite_add_tcase(s, t);
  TCase *a = tcase_create("accuracy");
  tcase_set_timeout(a, 600);
  tcase_add_loop_test(a, test_top1_agreement, 0, (int)(sizeof models / sizeof models[0]));
  tcase_add_loop_test(a, test_kernels_match_interpreter, 0, (int)(sizeof compiled / sizeof compiled[0]));
  suite_add_tcase(s, a);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
