/* Quantized ONNX models and the u8 dtype: u8 arithmetic and casts, the
 * IR's quantize ranges (symmetric, a zero point, to=u8), and ONNX's
 * QuantizeLinear / DequantizeLinear (per tensor and per axis), QDQ Conv
 * and Gemm, ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul,
 * built in C (tests/onnxbuild.h).  Every model is checked three ways:
 * the imported IR (the products are int8 ones), ir_eval against ONNX's
 * formulas as onnxruntime computes them (bit for bit), and the compiled
 * plan on emu against ir_eval (bit for bit); then the errors. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "onnxbuild.h"
#include "passes/pass.h"
#include "tests/testutil.h"

enum {
  T_F32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
  T_U8 = ONNX__TENSOR_PROTO__DATA_TYPE__UINT8,
  T_I8 = ONNX__TENSOR_PROTO__DATA_TYPE__INT8,
  T_I32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
};

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

/* ---- data ---- */

static uint64_t rng;

/* An integer in [lo, hi]. */
static int rand_int(int lo, int hi) { return lo + (int)(test_splitmix64(&rng) % (uint64_t)(hi - lo + 1)); }

static float rand_float(float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(test_splitmix64(&rng) >> 11) / 9007199254740992.0);
}

/* Inputs of a test: up to 4 named tensors. */
typedef struct Inputs {
  int n;
  const char *names[4];
  Tensor t[4];
  TensorMap map;
} Inputs;

static Tensor *add_tensor(Inputs *in, const char *name, DType dt, int rank, const int64_t *dims) {
  ck_assert_int_lt(in->n, 4);
  Tensor *t = &in->t[in->n];
  TensorType tt = ir_type_make(dt, rank, dims);
  ck_assert(ir_tensor_alloc(t, &tt));
  in->names[in->n++] = name;
  in->map = (TensorMap){in->n, in->names, in->t};
  return t;
}

static void free_inputs(Inputs *in) {
  for (int i = 0; i < in->n; i++) ir_tensor_free(&in->t[i]);
}

static int64_t numel(const Tensor *t) { return ir_type_numel(&t->type); }

/* ---- import, evaluate, compile, run ---- */

static Graph *import(Model *b) {
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  Graph *g = fe_onnx_import_bytes(&ctx, "q.onnx", buf, len, NULL, &params);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  return g;
}

static void expect_error(Model *b, const char *want) {
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  Graph *g = fe_onnx_import_bytes(&ctx, "q.onnx", buf, len, NULL, &params);
  ck_assert_msg(g == NULL, "imported, expected an error with '%s'", want);
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

static Graph *parse(const char *text) {
  const SrcFile *f = ctx_add_file(&ctx, "t.ir", text, strlen(text));
  Graph *g = ir_parse(&ctx, f);
  ck_assert_msg(g && ir_verify(g), "%s\n%s", diag_text(&ctx), text);
  return g;
}

/* ir_eval's outputs (malloc'd; free_outputs). */
static Tensor *eval(Graph *g, const Inputs *in) {
  Tensor *out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &in->map, &params, out, err, sizeof err), "ir_eval: %s", err);
  return out;
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

typedef struct Compiled {
  Graph *g;
  CgResult cg;
  bool ok;
} Compiled;

static int compile_fn(Ctx *c, void *data) {
  (void)c;
  Compiled *j = data;
  PassOptions po = {.opt_level = 2, .verify_each = true};
  j->ok = pass_run_pipeline(j->g, &po, NULL) && ir_verify(j->g) && cg_compile(j->g, &j->cg);
  return 0;
}

/* g at -O2 (g is optimized in place). */
static CgResult compile(Graph *g) {
  Compiled j = {.g = g};
  ck_assert_msg(ctx_guard(&ctx, compile_fn, &j) == 0 && j.ok, "compile failed:\n%s", diag_text(&ctx));
  test_nvrtc(j.cg.source, "sm_90");
  return j.cg;
}

static void expect_same_bytes(const Tensor *got, const Tensor *want, const char *what) {
  ck_assert_msg(ir_type_eq(&got->type, &want->type), "%s: types differ", what);
  size_t es = (size_t)ir_dtype_size(want->type.dtype);
  for (int64_t i = 0; i < numel(want); i++)
    ck_assert_msg(memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) == 0,
                  "%s: element %lld is %.9g, expected %.9g", what, (long long)i, ir_tensor_get(got, i),
                  ir_tensor_get(want, i));
}

/* Evaluates g, compiles it at -O2 and runs it on emu: the two must agree
 * byte for byte.  Returns ir_eval's outputs; *cg_out the compiled plan. */
static Tensor *eval_and_emu(Graph *g, const Inputs *in, CgResult *cg_out) {
  Tensor *want = eval(g, in);
  int n_out = g->n_outputs;
  CgResult cg = compile(g);
  Tensor *got = test_run_emu(cg.plan, &params, &in->map);
  for (int i = 0; i < n_out; i++) expect_same_bytes(&got[i], &want[i], g->output_names[i]);
  free_outputs(got, n_out);
  if (cg_out) *cg_out = cg;
  return want;
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

static int count_steps(const RtPlan *p, RtStepKind kind) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == (uint32_t)kind;
  return n;
}

/* ---- ONNX's formulas, as onnxruntime computes them ---- */

static int saturate(long v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : (int)v; }

/* QuantizeLinear: rint(x / s) (an f32 division, ties to even) + zp. */
static int ref_quantize(float x, float s, int zp, int lo, int hi) {
  float q = nearbyintf(x / s);
  return saturate((long)q + zp, lo, hi);
}

/* The requantization of an int8 product: rint(acc * m) + zp, m in f32. */
static int ref_requantize(int32_t acc, float m, int zp, int lo, int hi) {
  float v = (float)acc * m;
  return saturate((long)nearbyintf(v) + zp, lo, hi);
}

/* ---- u8 and the IR's quantize ---- */

START_TEST(test_u8_arithmetic_and_casts) {
  Graph *g = parse("graph t {\n"
                   "  %a = input {name=\"a\"} : u8[64]\n"
                   "  %b = input {name=\"b\"} : u8[64]\n"
                   "  %f = input {name=\"f\"} : f32[64]\n"
                   "  %i = input {name=\"i\"} : i32[64]\n"
                   "  %add = add %a, %b : u8[64]\n"
                   "  %sub = sub %a, %b : u8[64]\n"
                   "  %mul = mul %a, %b : u8[64]\n"
                   "  %max = maximum %a, %b : u8[64]\n"
                   "  %lt = less %a, %b : bool[64]\n"
                   "  %cf = cast %f {to=u8} : u8[64]\n"
                   "  %ci = cast %i {to=u8} : u8[64]\n"
                   "  %c8 = cast %a {to=i8} : i8[64]\n"
                   "  %cb = cast %a {to=f32} : f32[64]\n"
                   "  return %add as \"add\", %sub as \"sub\", %mul as \"mul\", %max as \"max\", "
                   "%lt as \"lt\", "
                   "%cf as \"cf\", %ci as \"ci\", %c8 as \"c8\", %cb as \"cb\"\n"
                   "}\n");
  static const float fv[] = {300.7f, -1.5f, 255.9f, 256.0f, NAN, 3e9f, -2.7f, INFINITY, 0.99f, -300.0f};
  static const uint8_t fwant[] = {44, 255, 255, 0, 0, 0, 254, 0, 0, 212};
  static const int32_t iv[] = {-1, 256, 300, -300, INT32_MIN, 255};
  static const uint8_t iwant[] = {255, 0, 44, 212, 0, 255};
  Inputs in = {0};
  int64_t d = 64;
  Tensor *a = add_tensor(&in, "a", TY_U8, 1, &d), *b = add_tensor(&in, "b", TY_U8, 1, &d);
  Tensor *f = add_tensor(&in, "f", TY_F32, 1, &d), *iw = add_tensor(&in, "i", TY_I32, 1, &d);
  rng = 1;
  for (int k = 0; k < 64; k++) {
    ((uint8_t *)a->data)[k] = (uint8_t)rand_int(0, 255);
    ((uint8_t *)b->data)[k] = (uint8_t)rand_int(0, 255);
    ((float *)f->data)[k] = fv[k % 10];
    ((int32_t *)iw->data)[k] = iv[k % 6];
  }
  Tensor *out = eval_and_emu(g, &in, NULL);
  for (int k = 0; k < 64; k++) {
    unsigned x = ((uint8_t *)a->data)[k], y = ((uint8_t *)b->data)[k];
    ck_assert_uint_eq(((uint8_t *)out[0].data)[k], (x + y) & 255);
    ck_assert_uint_eq(((uint8_t *)out[1].data)[k], (x - y) & 255);
    ck_assert_uint_eq(((uint8_t *)out[2].data)[k], (x * y) & 255);
    ck_assert_uint_eq(((uint8_t *)out[3].data)[k], x > y ? x : y);
    ck_assert_uint_eq(((uint8_t *)out[4].data)[k], x < y);
    ck_assert_uint_eq(((uint8_t *)out[5].data)[k], fwant[k % 10]);
    ck_assert_uint_eq(((uint8_t *)out[6].data)[k], iwant[k % 6]);
    ck_assert_int_eq(((int8_t *)out[7].data)[k], (int8_t)(x >= 128 ? (int)x - 256 : (int)x));
    ck_assert_float_eq(((float *)out[8].data)[k], (float)x);
  }
  free_outputs(out, 9);
  free_inputs(&in);
}
END_TEST

START_TEST(test_quantize_ranges) {
  Graph *g = parse("graph t {\n"
                   "  %x = input {name=\"x\"} : f32[16]\n"
                   "  %s = quantize %x {scale=1} : i8[16]\n"
                   "  %z = quantize %x {scale=1, zero_point=0} : i8[16]\n"
                   "  %u = quantize %x {scale=0.5, zero_point=10, to=u8} : u8[16]\n"
                   "  %d = dequantize %u {scale=0.5, zero_point=10} : f32[16]\n"
                   "  return %s as \"s\", %z as \"z\", %u as \"u\", %d as \"d\"\n"
                   "}\n");
  static const float xv[16] = {-200, -128, -127.5f, -127.4f, 2.5f, 3.5f, 127.6f, 300,
                               NAN,  -0.5f, 0.5f,   1.5f,    -5.2f, 0.25f, 0.75f, 122.3f};
  Inputs in = {0};
  int64_t d = 16;
  memcpy(add_tensor(&in, "x", TY_F32, 1, &d)->data, xv, sizeof xv);
  Tensor *out = eval_and_emu(g, &in, NULL);
  for (int k = 0; k < 16; k++) {
    float x = xv[k];
    /* Without a zero point symmetric, with one (even 0) the whole range. */
    int s = isnan(x) ? 0 : ref_quantize(x, 1, 0, -127, 127);
    int z = isnan(x) ? 0 : ref_quantize(x, 1, 0, -128, 127);
    int u = isnan(x) ? 10 : ref_quantize(x, 0.5f, 10, 0, 255);
    ck_assert_int_eq(((int8_t *)out[0].data)[k], s);
    ck_assert_int_eq(((int8_t *)out[1].data)[k], z);
    ck_assert_int_eq(((uint8_t *)out[2].data)[k], u);
    ck_assert_float_eq(((float *)out[3].data)[k], (float)(u - 10) * 0.5f);
  }
  ck_assert_int_eq(((int8_t *)out[1].data)[1], -128); /* -128 is a code with a zero point */
  ck_assert_int_eq(((int8_t *)out[0].data)[1], -127);
  ck_assert_int_eq(((int8_t *)out[0].data)[4], 2);    /* 2.5: ties to even */
  free_outputs(out, 4);
  free_inputs(&in);
  /* The text keeps to=u8; the ranges are checked. */
  char *text = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&text, &len);
  ir_print(mf, g);
  fclose(mf);
  ck_assert_ptr_nonnull(strstr(text, "zero_point=10, to=u8} : u8[16]"));
  free(text);
}
END_TEST

static void expect_ir_error(const char *text, const char *want) {
  const SrcFile *f = ctx_add_file(&ctx, "t.ir", text, strlen(text));
  ck_assert_ptr_null(ir_parse(&ctx, f));
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

START_TEST(test_quantize_errors) {
  expect_ir_error("graph t {\n  %x = input {name=\"x\"} : f32[4]\n"
                  "  %q = quantize %x {scale=1, to=f32} : f32[4]\n  return %q as \"q\"\n}\n",
                  "quantize: to must be i8 or u8, got f32");
  expect_ir_error("graph t {\n  %x = input {name=\"x\"} : f32[4]\n"
                  "  %q = quantize %x {scale=1, zero_point=256, to=u8} : u8[4]\n  return %q as \"q\"\n}\n",
                  "zero_point 256 is outside u8's [0, 255]");
  expect_ir_error("graph t {\n  %x = input {name=\"x\"} : u8[4]\n"
                  "  %q = dequantize %x {scale=1, zero_point=-1} : f32[4]\n  return %q as \"q\"\n}\n",
                  "zero_point -1 is outside u8's [0, 255]");
  expect_ir_error("graph t {\n  %x = input {name=\"x\"} : f32[4]\n"
                  "  %q = quantize %x {scale=1, zero_point=200} : i8[4]\n  return %q as \"q\"\n}\n",
                  "zero_point 200 is outside int8's [-128, 127]");
}
END_TEST

/* ---- QuantizeLinear and DequantizeLinear ---- */

static void scalar_init(Model *b, const char *name, int32_t dtype, const void *v, size_t bytes) {
  add_init_raw(b, name, dtype, 0, NULL, v, bytes);
}

START_TEST(test_quantize_dequantize_linear) {
  Model *b = model_new(13);
  int64_t xd[3] = {2, 3, 4}, c3 = 3;
  add_input(b, "x", 3, xd);
  float s = 0.05f, sa[3] = {0.1f, 0.02f, 0.5f};
  uint8_t zp = 100, za[3] = {0, 128, 250};
  int8_t zi[3] = {-5, -5, -5};
  scalar_init(b, "s", T_F32, &s, 4);
  scalar_init(b, "zp", T_U8, &zp, 1);
  add_init_raw(b, "sa", T_F32, 1, &c3, sa, sizeof sa);
  add_init_raw(b, "za", T_U8, 1, &c3, za, sizeof za);
  add_init_raw(b, "zi", T_I8, 1, &c3, zi, sizeof zi);
  add_node(b, "QuantizeLinear", "x,s,zp", "q");             /* per tensor, u8 */
  add_node(b, "QuantizeLinear", "x,sa,za", "qa");           /* per axis 1, zero points differ */
  add_node(b, "QuantizeLinear", "x,sa,zi", "qi");           /* per axis, one i8 zero point */
  add_node(b, "QuantizeLinear", "x,s", "qd");               /* no zero point: u8, 0 */
  add_node(b, "DequantizeLinear", "qa,sa,za", "da");
  add_node(b, "DequantizeLinear", "qi,sa,zi", "di");
  add_output(b, "q");
  add_output(b, "qa");
  add_output(b, "qi");
  add_output(b, "qd");
  add_output(b, "da");
  add_output(b, "di");
  Graph *g = import(b);
  /* Varying zero points: one quantize per slice (3), the rest one each. */
  ck_assert_int_eq(count_op(g, OP_QUANTIZE), 6);
  ck_assert_int_eq(count_op(g, OP_CONCAT), 1);
  Inputs in = {0};
  Tensor *x = add_tensor(&in, "x", TY_F32, 3, xd);
  rng = 2;
  for (int k = 0; k < 24; k++) ((float *)x->data)[k] = rand_float(-30, 30);
  ((float *)x->data)[3] = 2.5f * 0.05f; /* a tie */
  Tensor *out = eval_and_emu(g, &in, NULL);
  ck_assert_int_eq(out[0].type.dtype, TY_U8);
  ck_assert_int_eq(out[2].type.dtype, TY_I8);
  for (int k = 0; k < 24; k++) {
    float v = ((float *)x->data)[k];
    int c = (k / 4) % 3;
    int qa = ref_quantize(v, sa[c], za[c], 0, 255), qi = ref_quantize(v, sa[c], zi[c], -128, 127);
    ck_assert_int_eq(((uint8_t *)out[0].data)[k], ref_quantize(v, s, zp, 0, 255));
    ck_assert_int_eq(((uint8_t *)out[1].data)[k], qa);
    ck_assert_int_eq(((int8_t *)out[2].data)[k], qi);
    ck_assert_int_eq(((uint8_t *)out[3].data)[k], ref_quantize(v, s, 0, 0, 255));
    ck_assert_float_eq(((float *)out[4].data)[k], (float)(qa - za[c]) * sa[c]);
    ck_assert_float_eq(((float *)out[5].data)[k], (float)(qi - zi[c]) * sa[c]);
  }
  free_outputs(out, 6);
  free_inputs(&in);
}
END_TEST

/* ---- QDQ: products of dequantized operands ---- */

/* x f32 [1, 3, 8, 8] -> Q (u8) -> DQ -> Conv 3x3 pad 1 with DQ(i8 w per
 * channel) and DQ(i32 bias) -> Q (u8) -> DQ: onnxruntime's static
 * quantization of a convolution. */
static const float conv_sx = 0.02f, conv_sy = 0.03f;
static const uint8_t conv_zx = 120, conv_zy = 7;
static float conv_sw[4];
static int8_t conv_w[4 * 3 * 9];
static int32_t conv_b[4];

static Model *qdq_conv_model(void) {
  Model *b = model_new(13);
  int64_t xd[4] = {1, 3, 8, 8}, wd[4] = {4, 3, 3, 3}, c4 = 4;
  add_input(b, "x", 4, xd);
  rng = 3;
  float sb[4];
  for (int c = 0; c < 4; c++) {
    conv_sw[c] = 0.001f * (float)(c + 1) + 0.0003f;
    sb[c] = conv_sx * conv_sw[c]; /* as onnxruntime's quantizer: s_x * s_w in f32 */
    conv_b[c] = rand_int(-3000, 3000);
  }
  for (int i = 0; i < 4 * 27; i++) conv_w[i] = (int8_t)rand_int(-127, 127);
  int32_t z4[4] = {0};
  int8_t zw[4] = {0};
  scalar_init(b, "sx", T_F32, &conv_sx, 4);
  scalar_init(b, "zx", T_U8, &conv_zx, 1);
  scalar_init(b, "sy", T_F32, &conv_sy, 4);
  scalar_init(b, "zy", T_U8, &conv_zy, 1);
  add_init_raw(b, "wq", T_I8, 4, wd, conv_w, sizeof conv_w);
  add_init_raw(b, "sw", T_F32, 1, &c4, conv_sw, sizeof conv_sw);
  add_init_raw(b, "zw", T_I8, 1, &c4, zw, sizeof zw);
  add_init_raw(b, "bq", T_I32, 1, &c4, conv_b, sizeof conv_b);
  add_init_raw(b, "sb", T_F32, 1, &c4, sb, sizeof sb);
  add_init_raw(b, "zb", T_I32, 1, &c4, z4, sizeof z4);
  add_node(b, "QuantizeLinear", "x,sx,zx", "xq");
  add_node(b, "DequantizeLinear", "xq,sx,zx", "xd");
  attr_i(add_node(b, "DequantizeLinear", "wq,sw,zw", "w"), "axis", 0);
  attr_i(add_node(b, "DequantizeLinear", "bq,sb,zb", "bias"), "axis", 0);
  int64_t pads[4] = {1, 1, 1, 1};
  attr_is(add_node(b, "Conv", "xd,w,bias", "c"), "pads", 4, pads);
  add_node(b, "QuantizeLinear", "c,sy,zy", "yq");
  add_node(b, "DequantizeLinear", "yq,sy,zy", "y");
  add_output(b, "y");
  return b;
}

START_TEST(test_qdq_conv_runs_as_int8) {
  Graph *g = import(qdq_conv_model());
  Node *conv = first_op(g, OP_CONV2D);
  ck_assert_int_eq(count_op(g, OP_CONV2D), 1);
  ck_assert_int_eq(conv->in[0]->type.dtype, TY_I8);
  ck_assert_int_eq(conv->in[1]->type.dtype, TY_I8);
  ck_assert_int_eq(conv->out[0].type.dtype, TY_I32);
  ck_assert_int_eq(ir_attr_int(conv, "zero_point"), (int)conv_zx - 128); /* padding reads a real 0 */
  Inputs in = {0};
  int64_t xd[4] = {1, 3, 8, 8};
  Tensor *x = add_tensor(&in, "x", TY_F32, 4, xd);
  for (int i = 0; i < 192; i++) ((float *)x->data)[i] = rand_float(-2.6f, 2.6f);
  CgResult cg;
  Tensor *out = eval_and_emu(g, &in, &cg);
  /* The whole chain is one implicit-GEMM kernel: quantize in its loads,
   * requantize and dequantize in its store. */
  ck_assert_int_eq(count_steps(cg.plan, RT_STEP_LAUNCH), 1);
  ck_assert_int_eq(count_steps(cg.plan, RT_STEP_GEMM), 0);
  ck_assert_ptr_nonnull(strstr(cg.source, "igemm"));
  for (int co = 0; co < 4; co++)
    for (int oh = 0; oh < 8; oh++)
      for (int ow = 0; ow < 8; ow++) {
        int32_t acc = conv_b[co];
        for (int ci = 0; ci < 3; ci++)
          for (int kh = 0; kh < 3; kh++)
            for (int kw = 0; kw < 3; kw++) {
              int ih = oh + kh - 1, iw = ow + kw - 1;
              if (ih < 0 || ih >= 8 || iw < 0 || iw >= 8) continue;
              int qx = ref_quantize(((float *)x->data)[(ci * 8 + ih) * 8 + iw], conv_sx, conv_zx, 0, 255);
              acc += (qx - conv_zx) * conv_w[((co * 3 + ci) * 3 + kh) * 3 + kw];
            }
        float m = (conv_sx * conv_sw[co]) / conv_sy;
        int qy = ref_requantize(acc, m, conv_zy, 0, 255);
        ck_assert_float_eq(((float *)out[0].data)[(co * 8 + oh) * 8 + ow], (float)(qy - conv_zy) * conv_sy);
      }
  free_outputs(out, 1);
  free_inputs(&in);
}
END_TEST

/* DQ(x u8) @ DQ(W i8 [8, 16] per row)^T + DQ(bias i32) -> Q -> DQ, as
 * Gemm(transB=1): an int8 linear layer, cuBLAS's int8 GEMM on a GPU. */
START_TEST(test_qdq_gemm_is_an_int8_gemm) {
  Model *b = model_new(13);
  int64_t xd[2] = {4, 16}, wd[2] = {8, 16}, c8 = 8;
  add_input(b, "x", 2, xd);
  float sx = 0.04f, sy = 0.25f, sw[8], sb[8];
  uint8_t zx = 140, zy = 128;
  int8_t w[128], zw[8] = {0};
  int32_t bias[8], zb[8] = {0};
  rng = 4;
  for (int i = 0; i < 128; i++) w[i] = (int8_t)rand_int(-127, 127);
  for (int c = 0; c < 8; c++) {
    sw[c] = 0.002f + 0.0001f * (float)c;
    sb[c] = sx * sw[c];
    bias[c] = rand_int(-500, 500);
  }
  scalar_init(b, "sx", T_F32, &sx, 4);
  scalar_init(b, "zx", T_U8, &zx, 1);
  scalar_init(b, "sy", T_F32, &sy, 4);
  scalar_init(b, "zy", T_U8, &zy, 1);
  add_init_raw(b, "wq", T_I8, 2, wd, w, sizeof w);
  add_init_raw(b, "sw", T_F32, 1, &c8, sw, sizeof sw);
  add_init_raw(b, "zw", T_I8, 1, &c8, zw, sizeof zw);
  add_init_raw(b, "bq", T_I32, 1, &c8, bias, sizeof bias);
  add_init_raw(b, "sb", T_F32, 1, &c8, sb, sizeof sb);
  add_init_raw(b, "zb", T_I32, 1, &c8, zb, sizeof zb);
  add_node(b, "QuantizeLinear", "x,sx,zx", "xq");
  add_node(b, "DequantizeLinear", "xq,sx,zx", "xd");
  attr_i(add_node(b, "DequantizeLinear", "wq,sw,zw", "W"), "axis", 0);
  attr_i(add_node(b, "DequantizeLinear", "bq,sb,zb", "B"), "axis", 0);
  attr_i(add_node(b, "Gemm", "xd,W,B", "h"), "transB", 1);
  add_node(b, "QuantizeLinear", "h,sy,zy", "yq");
  add_node(b, "DequantizeLinear", "yq,sy,zy", "y");
  add_output(b, "y");
  Graph *g = import(b);
  Node *lin = first_op(g, OP_LINEAR);
  ck_assert_ptr_nonnull(lin);
  ck_assert_int_eq(lin->in[0]->type.dtype, TY_I8);
  ck_assert_int_eq(lin->out[0].type.dtype, TY_I32);
  ck_assert_int_eq(count_op(g, OP_MATMUL), 0);
  Inputs in = {0};
  Tensor *x = add_tensor(&in, "x", TY_F32, 2, xd);
  for (int i = 0; i < 64; i++) ((float *)x->data)[i] = rand_float(-6, 4);
  CgResult cg;
  Tensor *out = eval_and_emu(g, &in, &cg);
  int i8_gemms = 0;
  for (uint32_t i = 0; i < cg.plan->n_steps; i++)
    i8_gemms += cg.plan->steps[i].kind == RT_STEP_GEMM && cg.plan->steps[i].gemm.dtype == RT_DT_I8;
  ck_assert_int_eq(i8_gemms, 1);
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 8; c++) {
      int32_t acc = bias[c];
      for (int k = 0; k < 16; k++)
        acc += (ref_quantize(((float *)x->data)[r * 16 + k], sx, zx, 0, 255) - zx) * w[c * 16 + k];
      int qy = ref_requantize(acc, (sx * sw[c]) / sy, zy, 0, 255);
      ck_assert_float_eq(((float *)out[0].data)[r * 8 + c], (float)(qy - zy) * sy);
    }
  free_outputs(out, 1);
  free_inputs(&in);
}
END_TEST

/* ---- the QOperator format ---- */

/* QLinearConv with u8 weights whose zero points differ per channel and
 * do not let w - zw fit i8 (so the window sums of x correct them), a
 * stride, padding and an i32 bias. */
START_TEST(test_qlinearconv_u8_weight_zero_points) {
  Model *b = model_new(10);
  int64_t xd[4] = {1, 2, 6, 6}, wd[4] = {3, 2, 3, 3}, c3 = 3;
  add_input_typed(b, "x", T_U8, 4, xd);
  float sx = 0.01f, sy = 0.02f, sw[3] = {0.004f, 0.003f, 0.005f};
  uint8_t zx = 30, zy = 200, zw[3] = {0, 77, 255}, w[54];
  int32_t bias[3] = {100, -2000, 7};
  rng = 5;
  for (int i = 0; i < 54; i++) w[i] = (uint8_t)rand_int(0, 255);
  scalar_init(b, "sx", T_F32, &sx, 4);
  scalar_init(b, "zx", T_U8, &zx, 1);
  add_init_raw(b, "w", T_U8, 4, wd, w, sizeof w);
  add_init_raw(b, "sw", T_F32, 1, &c3, sw, sizeof sw);
  add_init_raw(b, "zw", T_U8, 1, &c3, zw, sizeof zw);
  scalar_init(b, "sy", T_F32, &sy, 4);
  scalar_init(b, "zy", T_U8, &zy, 1);
  add_init_raw(b, "B", T_I32, 1, &c3, bias, sizeof bias);
  Onnx__NodeProto *n = add_node(b, "QLinearConv", "x,sx,zx,w,sw,zw,sy,zy,B", "y");
  int64_t pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
  attr_is(n, "pads", 4, pads);
  attr_is(n, "strides", 2, strides);
  add_output(b, "y");
  Graph *g = import(b);
  for (Node *c = g->first; c; c = c->next)
    if (c->op == OP_CONV2D) ck_assert_int_eq(c->in[0]->type.dtype, TY_I8);
  Inputs in = {0};
  Tensor *x = add_tensor(&in, "x", TY_U8, 4, xd);
  for (int i = 0; i < 72; i++) ((uint8_t *)x->data)[i] = (uint8_t)rand_int(0, 255);
  Tensor *out = eval_and_emu(g, &in, NULL);
  ck_assert_int_eq(out[0].type.dims[2], 3);
  for (int co = 0; co < 3; co++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 3; ow++) {
        int32_t acc = bias[co];
        for (int ci = 0; ci < 2; ci++)
          for (int kh = 0; kh < 3; kh++)
            for (int kw = 0; kw < 3; kw++) {
              int ih = oh * 2 + kh - 1, iw = ow * 2 + kw - 1;
              if (ih < 0 || ih >= 6 || iw < 0 || iw >= 6) continue;
              acc += (((uint8_t *)x->data)[(ci * 6 + ih) * 6 + iw] - zx) *
                     (w[((co * 2 + ci) * 3 + kh) * 3 + kw] - zw[co]);
            }
        int want = ref_requantize(acc, (sx * sw[co]) / sy, zy, 0, 255);
        ck_assert_int_eq(((uint8_t *)out[0].data)[(co * 3 + oh) * 3 + ow], want);
      }
  free_outputs(out, 1);
  free_inputs(&in);
}
END_TEST

/* MatMulInteger with zero points per column of B and, B a run-time
 * input (the matmul form), per row of A; B an initializer and one zero
 * point for A: the linear form, whose A correction is in its bias. */
static void matmul_integer(bool b_known) {
  Model *m = model_new(10);
  int64_t ad[2] = {3, 5}, bd[2] = {5, 4}, r3 = b_known ? 1 : 3, c4 = 4;
  add_input_typed(m, "A", T_U8, 2, ad);
  uint8_t za[3] = {7, b_known ? 7 : 200, b_known ? 7 : 0};
  int8_t zb[4] = {-3, 0, 100, -128}, bv[20];
  rng = 6;
  for (int i = 0; i < 20; i++) bv[i] = (int8_t)rand_int(-128, 127);
  if (b_known)
    add_init_raw(m, "B", T_I8, 2, bd, bv, sizeof bv);
  else
    add_input_typed(m, "B", T_I8, 2, bd);
  add_init_raw(m, "za", T_U8, 1, &r3, za, (size_t)r3);
  add_init_raw(m, "zb", T_I8, 1, &c4, zb, sizeof zb);
  add_node(m, "MatMulInteger", "A,B,za,zb", "Y");
  add_output(m, "Y");
  Graph *g = import(m);
  ck_assert_int_eq(count_op(g, OP_LINEAR), b_known);
  Inputs in = {0};
  Tensor *a = add_tensor(&in, "A", TY_U8, 2, ad);
  for (int i = 0; i < 15; i++) ((uint8_t *)a->data)[i] = (uint8_t)rand_int(0, 255);
  if (!b_known) memcpy(add_tensor(&in, "B", TY_I8, 2, bd)->data, bv, sizeof bv);
  Tensor *out = eval_and_emu(g, &in, NULL);
  ck_assert_int_eq(out[0].type.dtype, TY_I32);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 4; c++) {
      int32_t acc = 0;
      for (int k = 0; k < 5; k++)
        acc += (((uint8_t *)a->data)[r * 5 + k] - za[r]) * (bv[k * 4 + c] - zb[c]);
      ck_assert_int_eq(((int32_t *)out[0].data)[r * 4 + c], acc);
    }
  free_outputs(out, 1);
  free_inputs(&in);
}

START_TEST(test_matmul_integer_runtime_b) { matmul_integer(false); }
END_TEST

START_TEST(test_matmul_integer_known_b) { matmul_integer(true); }
END_TEST

/* QLinearMatMul of batched i8 a and a known u8 b per column, i8 result. */
START_TEST(test_qlinearmatmul_i8) {
  Model *m = model_new(10);
  int64_t ad[3] = {2, 3, 4}, bd[2] = {4, 6}, c6 = 6;
  add_input_typed(m, "a", T_I8, 3, ad);
  float sa = 0.05f, sy = 0.1f, sb[6];
  int8_t za = -7, zy = 3;
  uint8_t zb[6], bv[24];
  rng = 7;
  for (int c = 0; c < 6; c++) sb[c] = 0.01f * (float)(c + 1), zb[c] = (uint8_t)rand_int(0, 255);
  for (int i = 0; i < 24; i++) bv[i] = (uint8_t)rand_int(0, 255);
  scalar_init(m, "sa", T_F32, &sa, 4);
  scalar_init(m, "za", T_I8, &za, 1);
  add_init_raw(m, "b", T_U8, 2, bd, bv, sizeof bv);
  add_init_raw(m, "sb", T_F32, 1, &c6, sb, sizeof sb);
  add_init_raw(m, "zb", T_U8, 1, &c6, zb, sizeof zb);
  scalar_init(m, "sy", T_F32, &sy, 4);
  scalar_init(m, "zy", T_I8, &zy, 1);
  add_node(m, "QLinearMatMul", "a,sa,za,b,sb,zb,sy,zy", "y");
  add_output(m, "y");
  Graph *g = import(m);
  Inputs in = {0};
  Tensor *a = add_tensor(&in, "a", TY_I8, 3, ad);
  for (int i = 0; i < 24; i++) ((int8_t *)a->data)[i] = (int8_t)rand_int(-128, 127);
  Tensor *out = eval_and_emu(g, &in, NULL);
  ck_assert_int_eq(out[0].type.dtype, TY_I8);
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 6; c++) {
      int32_t acc = 0;
      for (int k = 0; k < 4; k++) acc += (((int8_t *)a->data)[r * 4 + k] - za) * (bv[k * 6 + c] - zb[c]);
      int want = ref_requantize(acc, (sa * sb[c]) / sy, zy, -128, 127);
      ck_assert_int_eq(((int8_t *)out[0].data)[r * 6 + c], want);
    }
  free_outputs(out, 1);
  free_inputs(&in);
}
END_TEST

/* ---- errors ---- */

/* A scale and zero point computed at run time (DynamicQuantizeLinear's
 * expanded form): QuantizeLinear and DequantizeLinear as elementwise
 * ops, on the interpreter and emu alike, each value by hand. */
START_TEST(test_runtime_scale) {
  int64_t d6 = 6;
  Model *b = model_new(13);
  add_input(b, "x", 1, &d6);
  add_input(b, "s", 0, NULL);
  add_input_typed(b, "z", T_U8, 0, NULL);
  add_node(b, "QuantizeLinear", "x,s,z", "q");
  add_node(b, "DequantizeLinear", "q,s,z", "y");
  add_output(b, "q");
  add_output(b, "y");
  Graph *g = import(b);
  Inputs in = {0};
  static const float xv[6] = {-3.0f, -0.26f, 0.25f, 0.75f, 10.0f, 200.0f};
  memcpy(add_tensor(&in, "x", TY_F32, 1, &d6)->data, xv, sizeof xv);
  *(float *)add_tensor(&in, "s", TY_F32, 0, NULL)->data = 0.5f;
  *(uint8_t *)add_tensor(&in, "z", TY_U8, 0, NULL)->data = 3;
  Tensor *out = eval_and_emu(g, &in, NULL);
  /* rint(x / 0.5) + 3 saturated (half to even: 0.5 -> 0, 1.5 -> 2) */
  static const uint8_t want_q[6] = {0, 2, 3, 5, 23, 255};
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(((uint8_t *)out[0].data)[i], want_q[i]);
    ck_assert_float_eq(((float *)out[1].data)[i], (want_q[i] - 3) * 0.5f);
  }
  free_outputs(out, 2);
  free_inputs(&in);
}
END_TEST

START_TEST(test_errors) {
  int64_t d4 = 4, d3 = 3;
  Model *b = model_new(13);
  add_input(b, "x", 2, (int64_t[]){2, 4});
  add_input(b, "s", 1, &d3);
  add_node(b, "QuantizeLinear", "x,s", "q");
  add_output(b, "q");
  expect_error(b, "y's scale f32[3] computed at run time must be one value or one per slice along axis 1");

  float s = 0, one = 1;
  int8_t zi = 0;
  b = model_new(13);
  add_input(b, "x", 1, &d4);
  scalar_init(b, "s", T_F32, &s, 4);
  add_node(b, "QuantizeLinear", "x,s", "q");
  add_output(b, "q");
  expect_error(b, "y: scale 0 is not a positive finite f32");

  b = model_new(13);
  add_input_typed(b, "x", T_U8, 1, &d4);
  scalar_init(b, "s", T_F32, &one, 4);
  scalar_init(b, "z", T_I8, &zi, 1);
  add_node(b, "DequantizeLinear", "x,s,z", "y");
  add_output(b, "y");
  expect_error(b, "x_zero_point is i8 but x is u8");

  b = model_new(21);
  add_input(b, "x", 1, &d4);
  scalar_init(b, "s", T_F32, &one, 4);
  /* blocked: the scale has x's shape but along the axis */
  Onnx__NodeProto *qn = add_node(b, "QuantizeLinear", "x,s", "q");
  attr_i(qn, "block_size", 2);
  attr_i(qn, "axis", 0);
  add_output(b, "q");
  expect_error(b, "a blocked scale or zero point f32[] does not fit x f32[4] in blocks of 2 along axis 0");

  float s2[2] = {1, 2};
  int64_t d2 = 2;
  b = model_new(13);
  add_input(b, "x", 1, &d4);
  add_init_raw(b, "s", T_F32, 1, &d2, s2, sizeof s2);
  attr_i(add_node(b, "QuantizeLinear", "x,s", "q"), "axis", 0);
  add_output(b, "q");
  expect_error(b, "y: 2 scales or zero points, but 4 slices along axis 0");
}
END_TEST

static Suite *qdq_suite(void) {
  Suite *s = suite_create("qdq");
  TCase *u = tcase_create("u8");
  tcase_add_checked_fixture(u, setup, teardown);
  tcase_set_timeout(u, 120);
  tcase_add_test(u, test_u8_arithmetic_and_casts);
  tcase_add_test(u, test_quantize_ranges);
  tcase_add_test(u, test_quantize_errors);
  suite_add_tcase(s, u);
  TCase *q = tcase_create("onnx");
  tcase_add_checked_fixture(q, setup, teardown);
  tcase_set_timeout(q, 120);
  tcase_add_test(q, test_quantize_dequantize_linear);
  tcase_add_test(q, test_runtime_scale);
  tcase_add_test(q, test_qdq_conv_runs_as_int8);
  tcase_add_test(q, test_qdq_gemm_is_an_int8_gemm);
  tcase_add_test(q, test_qlinearconv_u8_weight_zero_points);
  tcase_add_test(q, test_matmul_integer_runtime_b);
  tcase_add_test(q, test_matmul_integer_known_b);
  tcase_add_test(q, test_qlinearmatmul_i8);
  tcase_add_test(q, test_errors);
  suite_add_tcase(s, q);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(qdq_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
