/* Channels last (passes/nhwc.c, conv2d layout "nhwc"): the reference
 * interpreter's nhwc conv against the nchw one between transposes; the
 * pass on ResNet-style blocks (conv-bn-relu-conv-bn-add-relu) in f16,
 * bf16, int8 and tf32: which convolutions it rewrites, where the
 * transposes go, the rewritten graph's numbers equal to the unrewritten
 * one's on ir_eval, the emu's within the tensor cores' tolerance of
 * them, the im2col operand by cp.async, and every source through NVRTC;
 * what it leaves alone (a single conv, channels no multiple of a
 * chunk, --no-nhwc, --no-tensor-cores); the FMA kernel on an nhwc conv;
 * and the shape rule's errors. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/convcheck.h"
#include "tests/testutil.h"

typedef struct NJob {
  const char *text;
  PassOptions po;
  CgOptions cgo;
  bool compile;
  Graph *g;
  CgResult cg;
  bool ok;
} NJob;

static int run_njob(Ctx *c, void *data) {
  NJob *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  if (!j->g || !ir_verify(j->g)) return 0;
  j->po.verify_each = true;
  if (!pass_run_pipeline(j->g, &j->po, NULL) || !ir_verify(j->g)) return 0;
  j->ok = !j->compile || cg_compile_opts(j->g, &j->cgo, &j->cg);
  return 0;
}

static NJob njob(Ctx *c, const char *text, PassOptions po, CgOptions cgo, bool compile) {
  NJob j = {.text = text, .po = po, .cgo = cgo, .compile = compile};
  int rc = ctx_guard(c, run_njob, &j);
  ck_assert_msg(rc == 0 && j.ok, "failed:\n%s\n%s", diag_text(c), text);
  return j;
}

/* Random inputs and params of g (by name: a batch norm's "var" in [0.5,
 * 1.5], integers whole in [-100, 100], floats U(-1, 1)). */
typedef struct Feeds {
  TensorMap inputs, params;
  const char *in_names[32], *p_names[32];
  Tensor in[32], p[32];
} Feeds;

static void feed(Graph *g, uint64_t seed, Feeds *d) {
  memset(d, 0, sizeof *d);
  uint64_t s = seed;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
    TensorMap *m = n->op == OP_INPUT ? &d->inputs : &d->params;
    ck_assert_int_lt(m->n, 32);
    Tensor *t = n->op == OP_INPUT ? &d->in[m->n] : &d->p[m->n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    const char *name = ir_attr_str(n, "name");
    bool fl = ir_dtype_is_float(t->type.dtype), var = strstr(name, "var") != NULL;
    for (int64_t i = 0, count = ir_type_numel(&t->type); i < count; i++) {
      double u = (double)(test_splitmix64(&s) >> 11) / 9007199254740992.0;
      ir_tensor_set(t, i, var ? 0.5 + u : fl ? 2 * u - 1 : floor(201 * u) - 100);
    }
    (n->op == OP_INPUT ? d->in_names : d->p_names)[m->n++] = name;
  }
  d->inputs.names = d->in_names, d->inputs.tensors = d->in;
  d->params.names = d->p_names, d->params.tensors = d->p;
}

static void unfeed(Feeds *d) {
  for (int i = 0; i < d->inputs.n; i++) ir_tensor_free(&d->in[i]);
  for (int i = 0; i < d->params.n; i++) ir_tensor_free(&d->p[i]);
}

static Tensor eval1(Graph *g, const Feeds *d) {
  Tensor *out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &d->inputs, &d->params, out, err, sizeof err), "ir_eval: %s", err);
  Tensor t = out[0];
  for (int i = 1; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
  free(out);
  return t;
}

static bool same_bytes(const Tensor *a, const Tensor *b) {
  return ir_type_eq(&a->type, &b->type) &&
         memcmp(a->data, b->data, (size_t)ir_type_numel(&a->type) * ir_dtype_size(a->type.dtype)) == 0;
}

typedef struct Count {
  int nhwc, nchw, transposes; /* convolutions by layout; transposes of activations */
} Count;

static Count count(Graph *g) {
  Count k = {0};
  bool *weights = pass_weight_only(g);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op == OP_CONV2D || n->op == OP_CONV3D) ir_conv_nhwc(n) ? k.nhwc++ : k.nchw++;
    if (n->op == OP_TRANSPOSE && !weights[n->id]) k.transposes++;
  }
  return k;
}

/* Two ResNet basic blocks, conv-bn-relu-conv-bn-add-relu each, over x
 * [2, C, 9, 9], in dt, weights and batch norms as params. */
static char *block_text(const char *dt, int c) {
  char *t = malloc(8192);
  int len = sprintf(t, "graph block {\n  %%x0 = input {name=\"x\"} : %s[2, %d, 9, 9]\n", dt, c);
  for (int b = 0; b < 2; b++) {
    for (int i = 1; i <= 2; i++) {
      len += sprintf(t + len,
                     "  %%w%d_%d = param {name=\"l%d.conv%d.weight\"} : %s[%d, %d, 3, 3]\n"
                     "  %%c%d_%d = conv2d %%%s%d, %%w%d_%d {pad=[1, 1, 1, 1]} : %s[2, %d, 9, 9]\n",
                     b, i, b, i, dt, c, c, b, i, i == 1 ? "x" : "r", b, b, i, dt, c);
      static const char *const bn[] = {"weight", "bias", "running_mean", "running_var"};
      for (int k = 0; k < 4; k++)
        len += sprintf(t + len, "  %%bn%d_%d_%d = param {name=\"l%d.bn%d.%s\"} : %s[%d]\n", b, i, k, b, i, bn[k], dt, c);
      len += sprintf(t + len,
                     "  %%n%d_%d = batchnorm %%c%d_%d, %%bn%d_%d_0, %%bn%d_%d_1, %%bn%d_%d_2, %%bn%d_%d_3 : %s[2, %d, 9, 9]\n",
                     b, i, b, i, b, i, b, i, b, i, b, i, dt, c);
      if (i == 1) len += sprintf(t + len, "  %%r%d = relu %%n%d_1 : %s[2, %d, 9, 9]\n", b, b, dt, c);
    }
    len += sprintf(t + len,
                   "  %%a%d = add %%n%d_2, %%x%d : %s[2, %d, 9, 9]\n"
                   "  %%x%d = relu %%a%d : %s[2, %d, 9, 9]\n",
                   b, b, b, dt, c, b + 1, b, dt, c);
  }
  sprintf(t + len, "  return %%x2 as \"y\"\n}\n");
  return t;
}

/* The int8 block as the quantize pass leaves one: quantized activations,
 * per-channel dequantization, a relu's zero point -128 in the second
 * conv (1x1, no padding: by cp.async even so), the residual a dequantize
 * of x, then a strided 3x3 conv with padding. */
static const char *const i8_block =
    "graph q {\n"
    "  %x = input {name=\"x\"} : i8[2, 32, 9, 9]\n"
    "  %w1 = param {name=\"w1\"} : i8[32, 32, 3, 3]\n"
    "  %c1 = conv2d %x, %w1 {pad=[1, 1, 1, 1]} : i32[2, 32, 9, 9]\n"
    "  %s1 = param {name=\"s1\"} : f32[32, 1, 1]\n"
    "  %d1 = dequantize %c1, %s1 : f32[2, 32, 9, 9]\n"
    "  %b1 = param {name=\"b1\"} : f32[32, 1, 1]\n"
    "  %e1 = add %d1, %b1 : f32[2, 32, 9, 9]\n"
    "  %r1 = relu %e1 : f32[2, 32, 9, 9]\n"
    "  %q1 = quantize %r1 {scale=0.5, zero_point=-128} : i8[2, 32, 9, 9]\n"
    "  %w2 = param {name=\"w2\"} : i8[32, 32, 1, 1]\n"
    "  %c2 = conv2d %q1, %w2 {zero_point=-128} : i32[2, 32, 9, 9]\n"
    "  %s2 = param {name=\"s2\"} : f32[1, 32, 1, 1]\n"
    "  %d2 = dequantize %c2, %s2 : f32[2, 32, 9, 9]\n"
    "  %dx = dequantize %x {scale=0.25} : f32[2, 32, 9, 9]\n"
    "  %a = add %d2, %dx : f32[2, 32, 9, 9]\n"
    "  %y = relu %a : f32[2, 32, 9, 9]\n"
    "  %q3 = quantize %y {scale=0.25} : i8[2, 32, 9, 9]\n"
    "  %w3 = param {name=\"w3\"} : i8[16, 32, 3, 3]\n"
    "  %c3 = conv2d %q3, %w3 {stride=[2, 2], pad=[1, 1, 1, 1]} : i32[2, 16, 5, 5]\n"
    "  %d3 = dequantize %c3 {scale=0.125} : f32[2, 16, 5, 5]\n"
    "  return %d3 as \"y\"\n"
    "}\n";

/* text at -O2 with and without the pass: the rewritten graph has
 * want_nhwc channels-last convolutions and want_t activation
 * transposes, computes the very numbers of the other on ir_eval, and
 * its plan on emu is within tol of them.  Returns the compiled source's
 * copy (malloc'd) for the caller's checks. */
/* How far the rewritten graph's numbers may be from the unrewritten
 * one's on ir_eval, relative: 0 (bit for bit) but where a rewrite
 * computes otherwise (a batch norm as a scale and a shift). */
static double eval_tol;

static char *check_block(const char *text, PassOptions po, CgOptions cgo, int want_nhwc, int want_t, double tol) {
  Ctx c0, c1;
  ctx_init(&c0);
  ctx_init(&c1);
  po.opt_level = 2;
  PassOptions off = po;
  off.no_nhwc = true;
  NJob ref = njob(&c0, text, off, cgo, false);
  NJob j = njob(&c1, text, po, cgo, true);
  Count k = count(j.g);
  ck_assert_msg(k.nhwc == want_nhwc && k.transposes == want_t, "%d nhwc convs, %d transposes:\n%s", k.nhwc,
                k.transposes, test_print_ir(j.g));
  ck_assert_int_eq(count(ref.g).nhwc, 0);
  test_nvrtc(j.cg.source, "sm_90");
  for (uint64_t seed = 1; seed <= 2; seed++) {
    Feeds d;
    feed(j.g, seed, &d);
    Tensor want = eval1(ref.g, &d), mine = eval1(j.g, &d);
    if (eval_tol > 0)
      ck_assert_msg(test_rel_error(&mine, &want) <= eval_tol, "the nhwc graph's numbers %.3g off on ir_eval",
                    test_rel_error(&mine, &want));
    else
      ck_assert_msg(same_bytes(&want, &mine), "the nhwc graph's numbers differ on ir_eval");
    Tensor *got = test_run_emu(j.cg.plan, &d.params, &d.inputs);
    double e = ir_dtype_is_float(want.type.dtype) ? test_rel_error(&got[0], &want) : !same_bytes(&got[0], &want);
    if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "emu %.3g off ir_eval\n", e);
    ck_assert_msg(e <= tol, "emu %.3g off ir_eval", e);
    ir_tensor_free(&want);
    ir_tensor_free(&mine);
    ir_tensor_free(&got[0]);
    free(got);
    unfeed(&d);
  }
  char *src = strdup(j.cg.source);
  ctx_free(&c0);
  ctx_free(&c1);
  return src;
}

/* The number of cp.async copies whose source is x's buffer (the im2col
 * operand; the weights' buffer is w). */
static int x_copies(const char *src) {
  int n = 0;
  for (const char *p = src; (p = strstr(p, "dl_cp_async16(")); p++) {
    const char *end = strchr(p, ';');
    const char *x = strstr(p, ", &x[");
    n += x && end && x < end;
  }
  return n;
}

START_TEST(block_f16_bf16) {
  static const char *const dts[] = {"f16", "bf16"};
  const char *dt = dts[_i];
  char *text = block_text(dt, 32);
  /* x in, y out: the four convs channels last, the first block's add
   * reads x's transpose */
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 4, 2, conv_tolerance(dt));
  ck_assert_msg(x_copies(src) >= 1, "no cp.async of an im2col operand");
  ck_assert_ptr_nonnull(strstr(src, dts[_i][0] == 'f' ? "dl_mma_f16(&" : "dl_mma_bf16(&"));
  free(src);
  free(text);
}
END_TEST

START_TEST(block_i8) {
  char *src = check_block(i8_block, (PassOptions){0}, (CgOptions){0}, 3, 2, 0);
  ck_assert_ptr_nonnull(strstr(src, "dl_mma_s8(&"));
  ck_assert_int_ge(x_copies(src), 1);
  free(src);
}
END_TEST

/* Padded int8 convs whose inputs are at zero point -128 (after a relu):
 * cp.async would fill their padding with zeros, so their x chunks come
 * through registers, one 16-byte load each (uint4), the padding the zero
 * point. */
static const char *const i8_padded_zero_point =
    "graph q {\n"
    "  %x = input {name=\"x\"} : i8[2, 32, 9, 9]\n"
    "  %w1 = param {name=\"w1\"} : i8[32, 32, 3, 3]\n"
    "  %c1 = conv2d %x, %w1 {pad=[1, 1, 1, 1]} : i32[2, 32, 9, 9]\n"
    "  %d1 = dequantize %c1 {scale=0.01} : f32[2, 32, 9, 9]\n"
    "  %r1 = relu %d1 : f32[2, 32, 9, 9]\n"
    "  %q1 = quantize %r1 {scale=0.5, zero_point=-128} : i8[2, 32, 9, 9]\n"
    "  %w2 = param {name=\"w2\"} : i8[32, 32, 3, 3]\n"
    "  %c2 = conv2d %q1, %w2 {pad=[1, 1, 1, 1], zero_point=-128} : i32[2, 32, 9, 9]\n"
    "  %d2 = dequantize %c2 {scale=0.02} : f32[2, 32, 9, 9]\n"
    "  %r2 = relu %d2 : f32[2, 32, 9, 9]\n"
    "  %q2 = quantize %r2 {scale=0.25, zero_point=-128} : i8[2, 32, 9, 9]\n"
    "  %w3 = param {name=\"w3\"} : i8[16, 32, 3, 3]\n"
    "  %c3 = conv2d %q2, %w3 {stride=[2, 2], pad=[1, 1, 1, 1], zero_point=-128} : i32[2, 16, 5, 5]\n"
    "  %d3 = dequantize %c3 {scale=0.125} : f32[2, 16, 5, 5]\n"
    "  return %d3 as \"y\"\n"
    "}\n";

static int count_of(const char *src, const char *s) {
  int n = 0;
  for (const char *p = src; (p = strstr(p, s)); p++) n++;
  return n;
}

START_TEST(block_i8_padded_zero_point) {
  char *src = check_block(i8_padded_zero_point, (PassOptions){0}, (CgOptions){0}, 3, 2, 0);
  ck_assert_int_eq(x_copies(src), 0);
  ck_assert_int_ge(count_of(src, "*(const uint4 *)&x["), 2);
  ck_assert_ptr_nonnull(strstr(src, "(-128)"));
  free(src);
}
END_TEST

/* A ResNeXt bottleneck: 1x1, a grouped 3x3 (4 groups of 16 channels in
 * and out, a chunk of f16 twice), 1x1, the residual: all three convs
 * channels last, the grouped one's im2col operand by cp.async too (a
 * group's channels of one tap a chunk), against ir_eval on emu.  In f32
 * (no tensor cores) the grouped conv stays NCHW. */
static char *resnext_text(const char *dt) {
  char *t = malloc(4096);
  sprintf(t,
          "graph resnext {\n"
          "  %%x = input {name=\"x\"} : %1$s[2, 64, 9, 9]\n"
          "  %%w1 = param {name=\"w1\"} : %1$s[64, 64, 1, 1]\n"
          "  %%c1 = conv2d %%x, %%w1 : %1$s[2, 64, 9, 9]\n"
          "  %%r1 = relu %%c1 : %1$s[2, 64, 9, 9]\n"
          "  %%w2 = param {name=\"w2\"} : %1$s[64, 16, 3, 3]\n"
          "  %%b2 = param {name=\"b2\"} : %1$s[64]\n"
          "  %%c2 = conv2d %%r1, %%w2, %%b2 {pad=[1, 1, 1, 1], groups=4} : %1$s[2, 64, 9, 9]\n"
          "  %%r2 = relu %%c2 : %1$s[2, 64, 9, 9]\n"
          "  %%w3 = param {name=\"w3\"} : %1$s[64, 64, 1, 1]\n"
          "  %%c3 = conv2d %%r2, %%w3 : %1$s[2, 64, 9, 9]\n"
          "  %%a = add %%c3, %%x : %1$s[2, 64, 9, 9]\n"
          "  %%y = relu %%a : %1$s[2, 64, 9, 9]\n"
          "  return %%y as \"y\"\n"
          "}\n",
          dt);
  return t;
}

START_TEST(block_grouped) {
  char *text = resnext_text("f16");
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 3, 2, conv_tolerance("f16"));
  /* the grouped conv's and the last 1x1's x chunks by cp.async */
  ck_assert_int_ge(x_copies(src), 2);
  free(src);
  free(text);
}
END_TEST

START_TEST(block_tf32) {
  char *text = block_text("f32", 16);
  PassOptions po = {.tf32 = true};
  /* four tf32 layers in a row, each about 3e-4 of its output's scale
   * (docs/tensorcores.md; measured here: 6.7e-4 and 9.0e-4 at the end) */
  char *src = check_block(text, po, (CgOptions){.tf32 = true}, 4, 2, 2e-3);
  ck_assert_ptr_nonnull(strstr(src, "dl_mma_tf32(&"));
  free(src);
  free(text);
}
END_TEST

/* Channels that do not fill 16-byte chunks are padded with zeros (a
 * pad of x's transpose, one of each weight's), so every conv of the
 * 12-channel block is channels last and reads its im2col by cp.async;
 * an RGB stem (3 channels, 7x7 stride 2, then a max pool) joins the
 * region with its pool, which is entered at x itself. */
static int count_op(Graph *g, OpKind op) {
  int n = 0;
  for (Node *m = g->first; m; m = m->next) n += m->op == op;
  return n;
}

START_TEST(padded_channels) {
  static const char *const dts[] = {"f16", "bf16"};
  const char *dt = dts[_i];
  char *text = block_text(dt, 12);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 4, 2, conv_tolerance(dt));
  /* the four convs share two kernels, each reading x by cp.async */
  ck_assert_int_ge(x_copies(src), 2);
  free(src);
  free(text);
  char stem[2048];
  snprintf(stem, sizeof stem,
           "graph stem {\n"
           "  %%x = input {name=\"x\"} : %s[2, 3, 20, 20]\n"
           "  %%w = param {name=\"w\"} : %s[16, 3, 7, 7]\n"
           "  %%c = conv2d %%x, %%w {stride=[2, 2], pad=[3, 3, 3, 3]} : %s[2, 16, 10, 10]\n"
           "  %%r = relu %%c : %s[2, 16, 10, 10]\n"
           "  %%p = maxpool2d %%r {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]} : %s[2, 16, 5, 5]\n"
           "  %%w1 = param {name=\"w1\"} : %s[16, 16, 3, 3]\n"
           "  %%c1 = conv2d %%p, %%w1 {pad=[1, 1, 1, 1]} : %s[2, 16, 5, 5]\n"
           "  %%r1 = relu %%c1 : %s[2, 16, 5, 5]\n"
           "  %%w2 = param {name=\"w2\"} : %s[16, 16, 3, 3]\n"
           "  %%c2 = conv2d %%r1, %%w2 {pad=[1, 1, 1, 1]} : %s[2, 16, 5, 5]\n"
           "  return %%c2 as \"y\"\n"
           "}\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
  src = check_block(stem, (PassOptions){0}, (CgOptions){0}, 3, 2, conv_tolerance(dt));
  /* the stem's x arrives by cp.async from the pad's kernel too */
  ck_assert_int_ge(x_copies(src), 3);
  free(src);
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, stem, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  ck_assert_int_eq(count_op(j.g, OP_PAD), 2); /* x's and w's */
  int pools = 0;
  for (Node *n = j.g->first; n; n = n->next) pools += n->op == OP_MAXPOOL2D && ir_nhwc(n);
  ck_assert_int_eq(pools, 1);
  ctx_free(&c);
}
END_TEST

/* What the pass leaves NCHW. */
/* A MobileNetV2-style pair of blocks: expand 1x1, clip, depthwise 3x3
 * (bias), clip, project 1x1, the residual add; then a strided depthwise
 * conv, relu and a 1x1 conv.  Every conv, the depthwise ones too, is
 * channels last, with x's transpose in and y's out; the depthwise
 * kernel reads 16 bytes of channels a tap. */
static char *mobile_text(const char *dt, int mult) {
  char *t = malloc(4096);
  int64_t c2 = 32 * mult;
  snprintf(t, 4096,
           "graph mobile {\n"
           "  %%x = input {name=\"x\"} : %s[2, 32, 9, 9]\n"
           "  %%w1 = param {name=\"w1\"} : %s[64, 32, 1, 1]\n"
           "  %%c1 = conv2d %%x, %%w1 : %s[2, 64, 9, 9]\n"
           "  %%r1 = clip %%c1 {min=0, max=6} : %s[2, 64, 9, 9]\n"
           "  %%wd = param {name=\"wd\"} : %s[64, 1, 3, 3]\n"
           "  %%bd = param {name=\"bd\"} : %s[64]\n"
           "  %%d = conv2d %%r1, %%wd, %%bd {pad=[1, 1, 1, 1], groups=64} : %s[2, 64, 9, 9]\n"
           "  %%r2 = clip %%d {min=0, max=6} : %s[2, 64, 9, 9]\n"
           "  %%w2 = param {name=\"w2\"} : %s[32, 64, 1, 1]\n"
           "  %%c2 = conv2d %%r2, %%w2 : %s[2, 32, 9, 9]\n"
           "  %%a = add %%c2, %%x : %s[2, 32, 9, 9]\n"
           "  %%wd2 = param {name=\"wd2\"} : %s[%lld, 1, 3, 3]\n"
           "  %%d2 = conv2d %%a, %%wd2 {stride=[2, 2], pad=[1, 1, 1, 1], groups=32} : %s[2, %lld, 5, 5]\n"
           "  %%r3 = relu %%d2 : %s[2, %lld, 5, 5]\n"
           "  %%w3 = param {name=\"w3\"} : %s[16, %lld, 1, 1]\n"
           "  %%c3 = conv2d %%r3, %%w3 : %s[2, 16, 5, 5]\n"
           "  return %%c3 as \"y\"\n"
           "}\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, (long long)c2, dt, (long long)c2, dt, (long long)c2, dt,
           (long long)c2, dt);
  return t;
}

START_TEST(depthwise_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = mobile_text(dts[_i % 2], 1 + _i / 2);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 5, 2, conv_tolerance(dts[_i % 2]));
  ck_assert_msg(strstr(src, "depthwise, channels last, 8 channels a thread, 16-byte loads"), "%s", src);
  /* a multiplier of 2 (the second depthwise conv) stays in the region,
   * a channel a thread */
  if (_i / 2) ck_assert_msg(strstr(src, "depthwise, channels last, 1 channel a thread"), "no kernel for the multiplier");
  free(src);
  free(text);
}
END_TEST

/* An example lowered at two defines in f16, through every pass, and
 * compiled. */
typedef struct ExampleJob {
  const char *file;
  Define d[2];
  Graph *g;
  CgResult cg;
  bool ok;
} ExampleJob;

static int example_job(Ctx *c, void *data) {
  ExampleJob *j = data;
  PassOptions po = {.opt_level = 2, .precision = TY_F16, .verify_each = true};
  j->ok = (j->g = test_lower_example(c, j->file, 2, j->d)) && pass_run_pipeline(j->g, &po, NULL) &&
          cg_compile_opts(j->g, &(CgOptions){0}, &j->cg);
  return 0;
}

/* examples/unet.dl in f16 (32x32, 16 channels at the first level): its
 * 19 convolutions and 4 conv_transposes, pools and skip concats one
 * channels-last region, x's transpose in and the mask's out, on emu
 * within f16's rounding of the graph on ir_eval. */
START_TEST(unet_on_emu) {
  Ctx c;
  ctx_init(&c);
  ExampleJob j = {.file = "unet.dl", .d = {{"HW", 32}, {"C", 16}}};
  ck_assert_msg(ctx_guard(&c, example_job, &j) == 0 && j.ok, "%s", diag_text(&c));
  Count k = count(j.g);
  ck_assert_int_eq(k.nhwc, 19);
  ck_assert_int_eq(k.nchw, 0);
  ck_assert_int_eq(k.transposes, 2);
  int up = 0;
  for (Node *n = j.g->first; n; n = n->next) up += n->op == OP_CONV_TRANSPOSE2D && ir_conv_nhwc(n);
  ck_assert_int_eq(up, 4);
  ck_assert(test_emu_matches_eval(j.g, j.cg.plan, 5, -1, 1, 0.05));
  ctx_free(&c);
}
END_TEST

/* MobileNetV2 in f16: one channels-last region from the stem on (its 3
 * channels padded to 8; every depthwise conv then reads a stored NHWC
 * value, 8 channels a thread), numbers on emu as ir_eval's. */
START_TEST(mobilenet_on_emu) {
  Ctx c;
  ctx_init(&c);
  ExampleJob j = {.file = "mobilenetv2.dl", .d = {{"N", 1}, {"HW", 32}}};
  ck_assert_msg(ctx_guard(&c, example_job, &j) == 0 && j.ok, "%s", diag_text(&c));
  Count k = count(j.g);
  ck_assert_int_eq(k.nchw, 0);
  ck_assert_int_eq(k.transposes, 1); /* x in; out through the global pool */
  ck_assert_ptr_null(strstr(j.cg.source, "depthwise, channels last, 1 channel a thread"));
  ck_assert_ptr_nonnull(strstr(j.cg.source, "depthwise, channels last, 8 channels a thread, 16-byte loads"));
  ck_assert(test_emu_matches_eval(j.g, j.cg.plan, 5, -1, 1, 0.05));
  ctx_free(&c);
}
END_TEST

/* VGG-style: conv, relu, a padded max pool in ceil mode, conv, relu,
 * an average pool that counts its padding, a 1x1 conv.  The pools join
 * the region (between convolutions they no longer end it): three
 * channels-last convs, two pools, x's transpose in and y's out. */
static char *vgg_text(const char *dt) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "graph vgg {\n"
           "  %%x = input {name=\"x\"} : %s[2, 16, 12, 12]\n"
           "  %%w1 = param {name=\"w1\"} : %s[32, 16, 3, 3]\n"
           "  %%c1 = conv2d %%x, %%w1 {pad=[1, 1, 1, 1]} : %s[2, 32, 12, 12]\n"
           "  %%r1 = relu %%c1 : %s[2, 32, 12, 12]\n"
           "  %%p1 = maxpool2d %%r1 {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 0, 0], ceil_mode=1} : %s[2, 32, 6, 6]\n"
           "  %%w2 = param {name=\"w2\"} : %s[32, 32, 3, 3]\n"
           "  %%c2 = conv2d %%p1, %%w2 {pad=[1, 1, 1, 1]} : %s[2, 32, 6, 6]\n"
           "  %%r2 = relu %%c2 : %s[2, 32, 6, 6]\n"
           "  %%p2 = avgpool2d %%r2 {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]} : %s[2, 32, 3, 3]\n"
           "  %%w3 = param {name=\"w3\"} : %s[16, 32, 1, 1]\n"
           "  %%c3 = conv2d %%p2, %%w3 : %s[2, 16, 3, 3]\n"
           "  return %%c3 as \"y\"\n"
           "}\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
  return t;
}

START_TEST(pools_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = vgg_text(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 3, 2, conv_tolerance(dts[_i]));
  free(src);
  /* both pools channels last */
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, text, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  int pools = 0;
  for (Node *n = j.g->first; n; n = n->next) pools += (n->op == OP_MAXPOOL2D || n->op == OP_AVGPOOL2D) && ir_nhwc(n);
  ck_assert_int_eq(pools, 2);
  ctx_free(&c);
  free(text);
}
END_TEST

/* A U-Net's two levels: conv-relu twice, a max pool, conv-relu twice,
 * a resize up (nearest, or bilinear with align_corners), its concat
 * with the encoder's result (the skip connection, along the channels),
 * conv-relu, conv.  The resize and the concat join the region, the
 * concat's axis channels last (3): all six convolutions channels last,
 * with two transposes (x in, y out).  Without the concat in the region
 * the decoder's first convolution would read an entry and its second
 * alone would gain: two convolutions left NCHW; without the resize, two
 * transposes more around it. */
static char *unet_text(const char *dt, const char *resize_attrs) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "graph unet {\n"
           "  %%x = input {name=\"x\"} : %1$s[2, 16, 8, 8]\n"
           "  %%w1 = param {name=\"w1\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c1 = conv2d %%x, %%w1 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  %%r1 = relu %%c1 : %1$s[2, 16, 8, 8]\n"
           "  %%w2 = param {name=\"w2\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c2 = conv2d %%r1, %%w2 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  %%r2 = relu %%c2 : %1$s[2, 16, 8, 8]\n"
           "  %%p = maxpool2d %%r2 {kernel=[2, 2], stride=[2, 2]} : %1$s[2, 16, 4, 4]\n"
           "  %%w3 = param {name=\"w3\"} : %1$s[32, 16, 3, 3]\n"
           "  %%c3 = conv2d %%p, %%w3 {pad=[1, 1, 1, 1]} : %1$s[2, 32, 4, 4]\n"
           "  %%r3 = relu %%c3 : %1$s[2, 32, 4, 4]\n"
           "  %%w4 = param {name=\"w4\"} : %1$s[32, 32, 3, 3]\n"
           "  %%c4 = conv2d %%r3, %%w4 {pad=[1, 1, 1, 1]} : %1$s[2, 32, 4, 4]\n"
           "  %%r4 = relu %%c4 : %1$s[2, 32, 4, 4]\n"
           "  %%u = resize %%r4 {size=[8, 8]%2$s} : %1$s[2, 32, 8, 8]\n"
           "  %%cat = concat %%u, %%r2 {axis=1} : %1$s[2, 48, 8, 8]\n"
           "  %%w5 = param {name=\"w5\"} : %1$s[16, 48, 3, 3]\n"
           "  %%c5 = conv2d %%cat, %%w5 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  %%r5 = relu %%c5 : %1$s[2, 16, 8, 8]\n"
           "  %%w6 = param {name=\"w6\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c6 = conv2d %%r5, %%w6 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  return %%c6 as \"y\"\n"
           "}\n",
           dt, resize_attrs);
  return t;
}

START_TEST(concat_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  static const char *const modes[] = {"", ", mode=\"bilinear\", align_corners=1"};
  char *text = unet_text(dts[_i % 2], modes[_i / 2]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 6, 2, conv_tolerance(dts[_i % 2]));
  free(src);
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, text, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  int concats = 0, resizes = 0;
  for (Node *n = j.g->first; n; n = n->next) {
    if (n->op == OP_CONCAT) {
      concats++;
      ck_assert_int_eq(ir_attr_int(n, "axis"), 3);
    }
    resizes += n->op == OP_RESIZE && ir_nhwc(n);
  }
  ck_assert_int_eq(concats, 1);
  ck_assert_int_eq(resizes, 1);
  ctx_free(&c);
  free(text);
}
END_TEST

/* DenseNet's pre-activation: conv-relu, a batch norm of the result
 * (after the relu, so not bn-fold's), relu, conv, its concat with the
 * relu's result, a batch norm of that, relu, conv.  The batch norms
 * become a scale and a shift over their weights (init steps) and join
 * the region: 3 convolutions channels last, x's transpose in and y's
 * out; before, each batch norm ended the region and none was rewritten.
 * The rewritten graph computes the norm otherwise: f16's rounding apart
 * on ir_eval. */
static char *dense_text(const char *dt) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "graph dense {\n"
           "  %%x = input {name=\"x\"} : %1$s[2, 16, 8, 8]\n"
           "  %%w0 = param {name=\"w0\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c0 = conv2d %%x, %%w0 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  %%r0 = relu %%c0 : %1$s[2, 16, 8, 8]\n"
           "  %%g1 = param {name=\"n1.weight\"} : %1$s[16]\n"
           "  %%e1 = param {name=\"n1.bias\"} : %1$s[16]\n"
           "  %%m1 = param {name=\"n1.mean\"} : %1$s[16]\n"
           "  %%v1 = param {name=\"n1.var\"} : %1$s[16]\n"
           "  %%b1 = batchnorm %%r0, %%g1, %%e1, %%m1, %%v1 : %1$s[2, 16, 8, 8]\n"
           "  %%r1 = relu %%b1 : %1$s[2, 16, 8, 8]\n"
           "  %%w1 = param {name=\"w1\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c1 = conv2d %%r1, %%w1 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  %%cat = concat %%r0, %%c1 {axis=1} : %1$s[2, 32, 8, 8]\n"
           "  %%g2 = param {name=\"n2.weight\"} : %1$s[32]\n"
           "  %%e2 = param {name=\"n2.bias\"} : %1$s[32]\n"
           "  %%m2 = param {name=\"n2.mean\"} : %1$s[32]\n"
           "  %%v2 = param {name=\"n2.var\"} : %1$s[32]\n"
           "  %%b2 = batchnorm %%cat, %%g2, %%e2, %%m2, %%v2 : %1$s[2, 32, 8, 8]\n"
           "  %%r2 = relu %%b2 : %1$s[2, 32, 8, 8]\n"
           "  %%w2 = param {name=\"w2\"} : %1$s[16, 32, 3, 3]\n"
           "  %%c2 = conv2d %%r2, %%w2 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 8, 8]\n"
           "  return %%c2 as \"y\"\n"
           "}\n",
           dt);
  return t;
}

START_TEST(batchnorm_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = dense_text(dts[_i]);
  eval_tol = conv_tolerance(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 3, 2, conv_tolerance(dts[_i]));
  free(src);
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, text, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  for (Node *n = j.g->first; n; n = n->next) ck_assert_int_ne(n->op, OP_BATCHNORM);
  ctx_free(&c);
  free(text);
}
END_TEST

/* Stable Diffusion's ResNet block: conv, then group norm, SiLU, conv,
 * group norm, SiLU, conv, the residual add, and a last group norm,
 * SiLU, conv.  The group norms join the region (their rows a group's
 * pixels and channels, channels last): 4 of 4 convolutions channels
 * last with x's transpose in and y's out; before, a group norm ended
 * the region at every convolution and none was rewritten.  ir_eval
 * sums a channels-last group in NCHW's order: the same numbers. */
static char *sd_text(const char *dt) {
  char *t = malloc(8192);
  int len = sprintf(t, "graph sd {\n  %%x = input {name=\"x\"} : %s[2, 32, 8, 8]\n", dt);
  /* conv i reads x (i 0) or SiLU i of group norm i of the value before:
   * conv i - 1's, and for the last the residual sum of convs 0 and 2 */
  for (int i = 0; i < 4; i++) {
    if (i > 0)
      len += sprintf(t + len,
                     "  %%g%d_w = param {name=\"n%d.weight\"} : %s[32]\n"
                     "  %%g%d_b = param {name=\"n%d.bias\"} : %s[32]\n"
                     "  %%g%d = group_norm %%%s, %%g%d_w, %%g%d_b {groups=4} : %s[2, 32, 8, 8]\n"
                     "  %%s%d = silu %%g%d : %s[2, 32, 8, 8]\n",
                     i, i, dt, i, i, dt, i, i == 3 ? "a" : i == 2 ? "c1" : "c0", i, i, dt, i, i, dt);
    char in[8];
    snprintf(in, sizeof in, i ? "s%d" : "x", i);
    len += sprintf(t + len,
                   "  %%w%d = param {name=\"w%d\"} : %s[32, 32, 3, 3]\n"
                   "  %%c%d = conv2d %%%s, %%w%d {pad=[1, 1, 1, 1]} : %s[2, 32, 8, 8]\n",
                   i, i, dt, i, in, i, dt);
    if (i == 2) len += sprintf(t + len, "  %%a = add %%c0, %%c2 : %s[2, 32, 8, 8]\n", dt);
  }
  sprintf(t + len, "  return %%c3 as \"y\"\n}\n");
  return t;
}

START_TEST(group_norm_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = sd_text(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 4, 2, conv_tolerance(dts[_i]));
  free(src);
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, text, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  int norms = 0;
  for (Node *n = j.g->first; n; n = n->next) norms += n->op == OP_GROUP_NORM && ir_nhwc(n);
  ck_assert_int_eq(norms, 3);
  ctx_free(&c);
  free(text);
}
END_TEST

/* MobileNetV3's squeeze-and-excitation between convolutions: conv,
 * relu, the gate (global average pool, 1x1 conv, relu, 1x1 conv,
 * sigmoid: [N, C, 1, 1]), the image times the gate, then conv-relu
 * three times.  The product joins the region with its gate reshaped to
 * [N, 1, 1, C] (batch 2) or, at batch 1, as a channel vector that an
 * agnostic op made: the four image convolutions channels last, with
 * three transposes (x in, the pool's operand out, y out; the gate's two
 * 1x1 convolutions stay NCHW: one gains, the rule wants two).  Before,
 * the product ended the region: the convolutions after it formed their
 * own, 3 of 4 channels last.  torchvision's MobileNetV3-small
 * in f16: 34 of 52 convolutions channels last, 9 before (the other 18
 * are its gates'); EfficientNet-B0: 49 of 81, none before. */
static char *se_text(const char *dt, int n) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "graph se {\n"
           "  %%x = input {name=\"x\"} : %1$s[%2$d, 32, 8, 8]\n"
           "  %%w0 = param {name=\"w0\"} : %1$s[32, 32, 3, 3]\n"
           "  %%c0 = conv2d %%x, %%w0 {pad=[1, 1, 1, 1]} : %1$s[%2$d, 32, 8, 8]\n"
           "  %%r0 = relu %%c0 : %1$s[%2$d, 32, 8, 8]\n"
           "  %%p = global_avgpool %%r0 : %1$s[%2$d, 32, 1, 1]\n"
           "  %%f1 = param {name=\"se.fc1\"} : %1$s[16, 32, 1, 1]\n"
           "  %%s1 = conv2d %%p, %%f1 : %1$s[%2$d, 16, 1, 1]\n"
           "  %%s2 = relu %%s1 : %1$s[%2$d, 16, 1, 1]\n"
           "  %%f2 = param {name=\"se.fc2\"} : %1$s[32, 16, 1, 1]\n"
           "  %%s3 = conv2d %%s2, %%f2 : %1$s[%2$d, 32, 1, 1]\n"
           "  %%g = sigmoid %%s3 : %1$s[%2$d, 32, 1, 1]\n"
           "  %%m = mul %%r0, %%g : %1$s[%2$d, 32, 8, 8]\n"
           "  %%w1 = param {name=\"w1\"} : %1$s[32, 32, 3, 3]\n"
           "  %%c1 = conv2d %%m, %%w1 {pad=[1, 1, 1, 1]} : %1$s[%2$d, 32, 8, 8]\n"
           "  %%r1 = relu %%c1 : %1$s[%2$d, 32, 8, 8]\n"
           "  %%w2 = param {name=\"w2\"} : %1$s[32, 32, 3, 3]\n"
           "  %%c2 = conv2d %%r1, %%w2 {pad=[1, 1, 1, 1]} : %1$s[%2$d, 32, 8, 8]\n"
           "  %%r2 = relu %%c2 : %1$s[%2$d, 32, 8, 8]\n"
           "  %%w3 = param {name=\"w3\"} : %1$s[32, 32, 3, 3]\n"
           "  %%c3 = conv2d %%r2, %%w3 {pad=[1, 1, 1, 1]} : %1$s[%2$d, 32, 8, 8]\n"
           "  return %%c3 as \"y\"\n"
           "}\n",
           dt, n);
  return t;
}

START_TEST(gate_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = se_text(dts[_i % 2], _i < 2 ? 2 : 1);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 4, 2, conv_tolerance(dts[_i % 2]));
  free(src);
  free(text);
}
END_TEST

/* A region left through reductions over the spatial dims (a mean and a
 * max of [N, C], a global pool's [N, C, 1, 1]): each the same reduction
 * over the middle axes channels last, so x's transpose in is the only
 * one. */
static char *reduce_text(const char *dt) {
  char *t = malloc(4096);
  int len = snprintf(t, 4096, "graph heads {\n  %%x = input {name=\"x\"} : %s[2, 32, 8, 8]\n", dt);
  for (int i = 0; i < 3; i++)
    len += snprintf(t + len, 4096 - (size_t)len,
                    "  %%w%d = param {name=\"w%d\"} : %s[32, 32, 3, 3]\n"
                    "  %%c%d = conv2d %%%s, %%w%d {pad=[1, 1, 1, 1]} : %s[2, 32, 8, 8]\n"
                    "  %%r%d = relu %%c%d : %s[2, 32, 8, 8]\n",
                    i, i, dt, i, i ? (const char *[]){"r0", "r1"}[i - 1] : "x", i, dt, i, i, dt);
  snprintf(t + len, 4096 - (size_t)len,
           "  %%m = reduce_mean %%r2 {axes=[2, 3]} : %1$s[2, 32]\n"
           "  %%M = reduce_max %%r2 {axes=[2, 3]} : %1$s[2, 32]\n"
           "  %%p = global_avgpool %%r2 : %1$s[2, 32, 1, 1]\n"
           "  %%pr = reshape %%p {shape=[2, 32]} : %1$s[2, 32]\n"
           "  %%s = add %%m, %%M : %1$s[2, 32]\n"
           "  %%y = add %%s, %%pr : %1$s[2, 32]\n"
           "  return %%y as \"y\"\n}\n",
           dt);
  return t;
}

START_TEST(reduce_leaves_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = reduce_text(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 3, 1, conv_tolerance(dts[_i]));
  free(src);
  free(text);
}
END_TEST

/* Two ConvNeXt blocks: a 7x7 depthwise convolution, the model's own
 * permute to NHWC for a LayerNorm and an MLP over the channels, its
 * permute back, a layer scale and the residual add.  Channels last the
 * region takes the model's permutes away (the first becomes a no-op
 * reshape, the second goes: the region reads the MLP's NHWC result), so
 * only x's transpose in and y's out are left of the 4. */
static char *convnext_text(const char *dt) {
  char *t = malloc(8192);
  int len = snprintf(t, 8192, "graph convnext {\n  %%x0 = input {name=\"x\"} : %s[2, 32, 8, 8]\n", dt);
  for (int b = 0; b < 2; b++)
    len += snprintf(t + len, 8192 - (size_t)len,
                    "  %%w%2$d = param {name=\"b%2$d.dw\"} : %1$s[32, 1, 7, 7]\n"
                    "  %%d%2$d = conv2d %%x%2$d, %%w%2$d {pad=[3, 3, 3, 3], groups=32} : %1$s[2, 32, 8, 8]\n"
                    "  %%p%2$d = transpose %%d%2$d {perm=[0, 2, 3, 1]} : %1$s[2, 8, 8, 32]\n"
                    "  %%g%2$d = param {name=\"b%2$d.ln.weight\"} : %1$s[32]\n"
                    "  %%e%2$d = param {name=\"b%2$d.ln.bias\"} : %1$s[32]\n"
                    "  %%n%2$d = layernorm %%p%2$d, %%g%2$d, %%e%2$d {axis=3} : %1$s[2, 8, 8, 32]\n"
                    "  %%u%2$d = param {name=\"b%2$d.fc1\"} : %1$s[32, 64]\n"
                    "  %%h%2$d = matmul %%n%2$d, %%u%2$d : %1$s[2, 8, 8, 64]\n"
                    "  %%a%2$d = gelu %%h%2$d : %1$s[2, 8, 8, 64]\n"
                    "  %%v%2$d = param {name=\"b%2$d.fc2\"} : %1$s[64, 32]\n"
                    "  %%m%2$d = matmul %%a%2$d, %%v%2$d : %1$s[2, 8, 8, 32]\n"
                    "  %%q%2$d = transpose %%m%2$d {perm=[0, 3, 1, 2]} : %1$s[2, 32, 8, 8]\n"
                    "  %%s%2$d = param {name=\"b%2$d.gamma\"} : %1$s[32, 1, 1]\n"
                    "  %%l%2$d = mul %%q%2$d, %%s%2$d : %1$s[2, 32, 8, 8]\n"
                    "  %%x%3$d = add %%l%2$d, %%x%2$d : %1$s[2, 32, 8, 8]\n",
                    dt, b, b + 1);
  snprintf(t + len, 8192 - (size_t)len, "  return %%x2 as \"y\"\n}\n");
  return t;
}

START_TEST(model_permutes_taken_away) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = convnext_text(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 2, 2, conv_tolerance(dts[_i]));
  free(src);
  free(text);
}
END_TEST

/* 3-d: conv3d with a per-channel bias add, relu, a 3-d max pool,
 * conv3d, relu, a 1x1x1 conv3d: all channels last over [N, D, H, W, C]
 * values, the bias reshaped to [C], x's transpose in and y's out. */
static char *c3d_text(const char *dt) {
  char *t = malloc(4096);
  snprintf(t, 4096,
           "graph c3 {\n"
           "  %%x = input {name=\"x\"} : %s[2, 16, 6, 8, 8]\n"
           "  %%w1 = param {name=\"w1\"} : %s[32, 16, 3, 3, 3]\n"
           "  %%c1 = conv3d %%x, %%w1 {pad=[1, 1, 1, 1, 1, 1]} : %s[2, 32, 6, 8, 8]\n"
           "  %%b1 = param {name=\"b1\"} : %s[32, 1, 1, 1]\n"
           "  %%a1 = add %%c1, %%b1 : %s[2, 32, 6, 8, 8]\n"
           "  %%r1 = relu %%a1 : %s[2, 32, 6, 8, 8]\n"
           "  %%p1 = maxpool3d %%r1 {kernel=[2, 2, 2], stride=[2, 2, 2]} : %s[2, 32, 3, 4, 4]\n"
           "  %%w2 = param {name=\"w2\"} : %s[32, 32, 3, 3, 3]\n"
           "  %%c2 = conv3d %%p1, %%w2 {pad=[1, 1, 1, 1, 1, 1]} : %s[2, 32, 3, 4, 4]\n"
           "  %%r2 = relu %%c2 : %s[2, 32, 3, 4, 4]\n"
           "  %%w3 = param {name=\"w3\"} : %s[16, 32, 1, 1, 1]\n"
           "  %%c3 = conv3d %%r2, %%w3 : %s[2, 16, 3, 4, 4]\n"
           "  return %%c3 as \"y\"\n"
           "}\n",
           dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
  return t;
}

START_TEST(conv3d_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  char *text = c3d_text(dts[_i]);
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 3, 2, conv_tolerance(dts[_i]));
  ck_assert_msg(x_copies(src) >= 1, "no cp.async of a 3-d im2col operand");
  free(src);
  free(text);
}
END_TEST

START_TEST(left_alone) {
  Ctx c;
  ctx_init(&c);
  PassOptions o2 = {.opt_level = 2};
  /* f32 without --tf32: no tensor cores */
  char *f32 = block_text("f32", 16);
  ck_assert_int_eq(count(njob(&c, f32, o2, (CgOptions){0}, false).g).nhwc, 0);
  /* 2 channels: padded to a chunk of f16 they would be 4 times the
   * products */
  char *c12 = block_text("f16", 2);
  ck_assert_int_eq(count(njob(&c, c12, o2, (CgOptions){0}, false).g).nhwc, 0);
  /* the options */
  char *f16 = block_text("f16", 16);
  PassOptions off = o2;
  off.no_nhwc = true;
  ck_assert_int_eq(count(njob(&c, f16, off, (CgOptions){0}, false).g).nhwc, 0);
  off = o2;
  off.no_tensor_cores = true;
  ck_assert_int_eq(count(njob(&c, f16, off, (CgOptions){.no_tensor_cores = true}, false).g).nhwc, 0);
  /* a single conv between two pools: two transposes for one conv */
  const char *single = "graph s {\n"
                       "  %x = input {name=\"x\"} : f16[2, 16, 8, 8]\n"
                       "  %p = maxpool2d %x {kernel=[2, 2], stride=[2, 2]} : f16[2, 16, 4, 4]\n"
                       "  %w = param {name=\"w\"} : f16[16, 16, 3, 3]\n"
                       "  %c = conv2d %p, %w {pad=[1, 1, 1, 1]} : f16[2, 16, 4, 4]\n"
                       "  %r = relu %c : f16[2, 16, 4, 4]\n"
                       "  %q = maxpool2d %r {kernel=[2, 2], stride=[2, 2]} : f16[2, 16, 2, 2]\n"
                       "  return %q as \"y\"\n"
                       "}\n";
  Count k = count(njob(&c, single, o2, (CgOptions){0}, false).g);
  ck_assert_int_eq(k.nhwc, 0);
  ck_assert_int_eq(k.transposes, 0);
  /* two convs whose results both leave to pools: the first reads an
   * entry, so one conv gains, for three transposes */
  const char *leaky = "graph l {\n"
                      "  %x = input {name=\"x\"} : f16[2, 16, 8, 8]\n"
                      "  %w = param {name=\"w\"} : f16[16, 16, 3, 3]\n"
                      "  %c = conv2d %x, %w {pad=[1, 1, 1, 1]} : f16[2, 16, 8, 8]\n"
                      "  %p = maxpool2d %c {kernel=[2, 2], stride=[2, 2]} : f16[2, 16, 4, 4]\n"
                      "  %d = conv2d %c, %w {pad=[1, 1, 1, 1]} : f16[2, 16, 8, 8]\n"
                      "  %q = maxpool2d %d {kernel=[2, 2], stride=[2, 2]} : f16[2, 16, 4, 4]\n"
                      "  %s = global_avgpool %c : f16[2, 16, 1, 1]\n"
                      "  return %p as \"p\", %q as \"q\", %s as \"s\"\n"
                      "}\n";
  ck_assert_int_eq(count(njob(&c, leaky, o2, (CgOptions){0}, false).g).nhwc, 0);
  /* one basic block: the first conv reads the entry x, so only the
   * second gains, against two transposes */
  char *one = block_text("f16", 16);
  *strstr(one, "  %w1_1") = 0;
  strcat(one, "  return %x1 as \"y\"\n}\n");
  ck_assert_int_eq(count(njob(&c, one, o2, (CgOptions){0}, false).g).nhwc, 0);
  free(one);
  free(f32);
  free(c12);
  free(f16);
  ctx_free(&c);
}
END_TEST

/* An nhwc graph against the same conv between transposes: the same
 * bytes on ir_eval, within f32 rounding on emu (the FMA kernel). */
static void nhwc_equals_nchw(const char *nhwc, const char *nchw, uint64_t seed) {
  Ctx c;
  ctx_init(&c);
  NJob a = njob(&c, nhwc, (PassOptions){0}, (CgOptions){0}, true);
  NJob b = njob(&c, nchw, (PassOptions){0}, (CgOptions){0}, false);
  test_nvrtc(a.cg.source, "sm_90");
  Feeds d;
  feed(a.g, seed, &d);
  Tensor want = eval1(b.g, &d), mine = eval1(a.g, &d);
  ck_assert(same_bytes(&want, &mine));
  Tensor *got = test_run_emu(a.cg.plan, &d.params, &d.inputs);
  ck_assert_double_le(test_rel_error(&got[0], &want), 1e-6);
  ir_tensor_free(&want);
  ir_tensor_free(&mine);
  ir_tensor_free(&got[0]);
  free(got);
  unfeed(&d);
  ctx_free(&c);
}

/* An nhwc conv written in the IR equals the nchw one between
 * transposes, on ir_eval exactly and on emu by the FMA kernel (f32),
 * with a stride, dilation and asymmetric padding. */
START_TEST(nhwc_conv_op) {
  const char *nhwc = "graph a {\n"
                     "  %x = input {name=\"x\"} : f32[2, 9, 10, 5]\n"
                     "  %w = input {name=\"w\"} : f32[7, 3, 2, 5]\n"
                     "  %b = input {name=\"b\"} : f32[7]\n"
                     "  %y = conv2d %x, %w, %b {stride=[2, 1], pad=[1, 0, 2, 1], dilation=[1, 2], layout=\"nhwc\"} "
                     ": f32[2, 5, 9, 7]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  const char *nchw = "graph b {\n"
                     "  %x = input {name=\"x\"} : f32[2, 9, 10, 5]\n"
                     "  %w = input {name=\"w\"} : f32[7, 3, 2, 5]\n"
                     "  %b = input {name=\"b\"} : f32[7]\n"
                     "  %xt = transpose %x {perm=[0, 3, 1, 2]} : f32[2, 5, 9, 10]\n"
                     "  %wt = transpose %w {perm=[0, 3, 1, 2]} : f32[7, 5, 3, 2]\n"
                     "  %c = conv2d %xt, %wt, %b {stride=[2, 1], pad=[1, 0, 2, 1], dilation=[1, 2]} : f32[2, 7, 5, 9]\n"
                     "  %y = transpose %c {perm=[0, 2, 3, 1]} : f32[2, 5, 9, 7]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  nhwc_equals_nchw(nhwc, nchw, 5);
}
END_TEST

/* The same for a grouped conv (2 groups of 4 input channels, 3 output
 * channels each): W [Co, kH, kW, C / groups]. */
START_TEST(nhwc_grouped_conv_op) {
  const char *nhwc = "graph a {\n"
                     "  %x = input {name=\"x\"} : f32[2, 7, 6, 8]\n"
                     "  %w = input {name=\"w\"} : f32[6, 3, 3, 4]\n"
                     "  %y = conv2d %x, %w {stride=[2, 1], pad=[1, 1, 1, 1], groups=2, layout=\"nhwc\"} "
                     ": f32[2, 4, 6, 6]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  const char *nchw = "graph b {\n"
                     "  %x = input {name=\"x\"} : f32[2, 7, 6, 8]\n"
                     "  %w = input {name=\"w\"} : f32[6, 3, 3, 4]\n"
                     "  %xt = transpose %x {perm=[0, 3, 1, 2]} : f32[2, 8, 7, 6]\n"
                     "  %wt = transpose %w {perm=[0, 3, 1, 2]} : f32[6, 4, 3, 3]\n"
                     "  %c = conv2d %xt, %wt {stride=[2, 1], pad=[1, 1, 1, 1], groups=2} : f32[2, 6, 4, 6]\n"
                     "  %y = transpose %c {perm=[0, 2, 3, 1]} : f32[2, 4, 6, 6]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  nhwc_equals_nchw(nhwc, nchw, 7);
}
END_TEST

/* A conv_transpose in layout nhwc (x [N, spatial, C], W [Co, taps, C])
 * against the nchw one between transposes, exactly on ir_eval and on
 * emu by the FMA kernel (f32): by stride phases (a 3x3 kernel at stride
 * 2 with an output_pad: ragged; a stride of 3 with dilation 2, prime to
 * it), at stride 1 (one phase: the gather), with a dilation the stride
 * divides (the gather), and in 3-d. */
static const struct {
  int nsp;
  int64_t x[3], k[3], stride[3], pad[6], opad[3], dil[3];
} tr_cases[] = {
    {2, {5, 4}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}},
    {2, {4, 5}, {4, 2}, {3, 2}, {1, 0, 2, 1}, {0, 1}, {2, 1}},
    {2, {6, 5}, {3, 2}, {1, 1}, {1, 0, 0, 1}, {0, 0}, {1, 1}},
    {2, {4, 4}, {3, 3}, {2, 2}, {0, 1, 1, 0}, {1, 0}, {2, 2}},
    {3, {3, 4, 3}, {2, 3, 2}, {2, 2, 1}, {0, 1, 0, 0, 1, 1}, {1, 0, 0}, {1, 1, 1}},
};

static int ints_str(char *at, const int64_t *v, int n) {
  int len = sprintf(at, "[");
  for (int i = 0; i < n; i++) len += sprintf(at + len, "%s%lld", i ? ", " : "", (long long)v[i]);
  return len + sprintf(at + len, "]");
}

static int type_str(char *at, const char *dt, const int64_t *dims, int n) {
  int len = sprintf(at, "%s", dt);
  return len + ints_str(at + len, dims, n);
}

START_TEST(nhwc_conv_transpose_op) {
  const int C = 5, Co = 3, N = 2;
  int nsp = tr_cases[_i].nsp, R = nsp + 2;
  int64_t o[3], xh[5] = {N}, xc[5] = {N, C}, wh[5] = {Co}, wc[5] = {C, Co}, yh[5] = {N}, yc[5] = {N, Co};
  for (int d = 0; d < nsp; d++) {
    o[d] = (tr_cases[_i].x[d] - 1) * tr_cases[_i].stride[d] - tr_cases[_i].pad[d] - tr_cases[_i].pad[nsp + d] +
           tr_cases[_i].dil[d] * (tr_cases[_i].k[d] - 1) + tr_cases[_i].opad[d] + 1;
    xh[1 + d] = xc[2 + d] = tr_cases[_i].x[d];
    wh[1 + d] = wc[2 + d] = tr_cases[_i].k[d];
    yh[1 + d] = yc[2 + d] = o[d];
  }
  xh[R - 1] = C, wh[R - 1] = C, yh[R - 1] = Co;
  char attrs[256], *a = attrs;
  a += sprintf(a, "stride=");
  a += ints_str(a, tr_cases[_i].stride, nsp);
  a += sprintf(a, ", pad=");
  a += ints_str(a, tr_cases[_i].pad, 2 * nsp);
  a += sprintf(a, ", output_pad=");
  a += ints_str(a, tr_cases[_i].opad, nsp);
  a += sprintf(a, ", dilation=");
  ints_str(a, tr_cases[_i].dil, nsp);
  const char *op = nsp == 3 ? "conv_transpose3d" : "conv_transpose2d";
  const char *in_perm = nsp == 3 ? "[0, 4, 1, 2, 3]" : "[0, 3, 1, 2]", *out_perm = nsp == 3 ? "[0, 2, 3, 4, 1]" : "[0, 2, 3, 1]";
  const char *w_perm = nsp == 3 ? "[4, 0, 1, 2, 3]" : "[3, 0, 1, 2]";
  char t[6][64], nhwc[2048], nchw[2048];
  type_str(t[0], "f32", xh, R), type_str(t[1], "f32", wh, R), type_str(t[2], "f32", yh, R);
  type_str(t[3], "f32", xc, R), type_str(t[4], "f32", wc, R), type_str(t[5], "f32", yc, R);
  snprintf(nhwc, sizeof nhwc,
           "graph a {\n  %%x = input {name=\"x\"} : %s\n  %%w = input {name=\"w\"} : %s\n"
           "  %%b = input {name=\"b\"} : f32[%d]\n"
           "  %%y = %s %%x, %%w, %%b {%s, layout=\"nhwc\"} : %s\n  return %%y as \"y\"\n}\n",
           t[0], t[1], Co, op, attrs, t[2]);
  snprintf(nchw, sizeof nchw,
           "graph b {\n  %%x = input {name=\"x\"} : %s\n  %%w = input {name=\"w\"} : %s\n"
           "  %%b = input {name=\"b\"} : f32[%d]\n"
           "  %%xt = transpose %%x {perm=%s} : %s\n  %%wt = transpose %%w {perm=%s} : %s\n"
           "  %%c = %s %%xt, %%wt, %%b {%s} : %s\n  %%y = transpose %%c {perm=%s} : %s\n  return %%y as \"y\"\n}\n",
           t[0], t[1], Co, in_perm, t[3], w_perm, t[4], op, attrs, t[5], out_perm, t[2]);
  nhwc_equals_nchw(nhwc, nchw, 11 + (uint64_t)_i);
}
END_TEST

/* The same for a grouped one (2 groups of 3 input channels, 2 output
 * channels each, ragged stride phases): W [Co, kH, kW, Cin / groups],
 * PyTorch's [Cin, Cout / groups, kH, kW] group by group. */
START_TEST(nhwc_grouped_conv_transpose_op) {
  const char *nhwc = "graph a {\n"
                     "  %x = input {name=\"x\"} : f32[2, 5, 4, 6]\n"
                     "  %w = input {name=\"w\"} : f32[4, 3, 3, 3]\n"
                     "  %b = input {name=\"b\"} : f32[4]\n"
                     "  %y = conv_transpose2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1], output_pad=[1, 1], groups=2, "
                     "layout=\"nhwc\"} : f32[2, 10, 8, 4]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  const char *nchw = "graph b {\n"
                     "  %x = input {name=\"x\"} : f32[2, 5, 4, 6]\n"
                     "  %w = input {name=\"w\"} : f32[4, 3, 3, 3]\n"
                     "  %b = input {name=\"b\"} : f32[4]\n"
                     "  %xt = transpose %x {perm=[0, 3, 1, 2]} : f32[2, 6, 5, 4]\n"
                     "  %w5 = reshape %w {shape=[2, 2, 3, 3, 3]} : f32[2, 2, 3, 3, 3]\n"
                     "  %w6 = transpose %w5 {perm=[0, 4, 1, 2, 3]} : f32[2, 3, 2, 3, 3]\n"
                     "  %wt = reshape %w6 {shape=[6, 2, 3, 3]} : f32[6, 2, 3, 3]\n"
                     "  %c = conv_transpose2d %xt, %wt, %b {stride=[2, 2], pad=[1, 1, 1, 1], output_pad=[1, 1], "
                     "groups=2} : f32[2, 4, 10, 8]\n"
                     "  %y = transpose %c {perm=[0, 2, 3, 1]} : f32[2, 10, 8, 4]\n"
                     "  return %y as \"y\"\n"
                     "}\n";
  nhwc_equals_nchw(nhwc, nchw, 17);
}
END_TEST

/* A decoder: conv, relu, a conv_transpose upsampling by 2 (a 2x2
 * kernel, or a 3x3 one with an output_pad: ragged phases), relu, conv.
 * All three join one region: the conv_transpose channels last with its
 * weight [C, Co, kH, kW] moved to [Co, kH, kW, C] at load, x's
 * transpose in and y's out, and its operands by cp.async. */
START_TEST(conv_transpose_in_region) {
  static const char *const dts[] = {"f16", "bf16"};
  const char *dt = dts[_i % 2];
  bool ragged = _i >= 2;
  char text[4096];
  snprintf(text, sizeof text,
           "graph dec {\n"
           "  %%x = input {name=\"x\"} : %1$s[2, 16, 5, 6]\n"
           "  %%w1 = param {name=\"w1\"} : %1$s[32, 16, 3, 3]\n"
           "  %%c1 = conv2d %%x, %%w1 {pad=[1, 1, 1, 1]} : %1$s[2, 32, 5, 6]\n"
           "  %%r1 = relu %%c1 : %1$s[2, 32, 5, 6]\n"
           "  %%wt = param {name=\"up.weight\"} : %1$s[32, 16, %2$d, %2$d]\n"
           "  %%bt = param {name=\"up.bias\"} : %1$s[16]\n"
           "  %%u = conv_transpose2d %%r1, %%wt, %%bt {stride=[2, 2]%3$s} : %1$s[2, 16, 10, 12]\n"
           "  %%r2 = relu %%u : %1$s[2, 16, 10, 12]\n"
           "  %%w2 = param {name=\"w2\"} : %1$s[16, 16, 3, 3]\n"
           "  %%c2 = conv2d %%r2, %%w2 {pad=[1, 1, 1, 1]} : %1$s[2, 16, 10, 12]\n"
           "  return %%c2 as \"y\"\n"
           "}\n",
           dt, ragged ? 3 : 2, ragged ? ", pad=[1, 1, 1, 1], output_pad=[1, 1]" : "");
  char *src = check_block(text, (PassOptions){0}, (CgOptions){0}, 2, 2, conv_tolerance(dt));
  /* the conv_transpose's kernel copies both operands by cp.async: its
   * im2col chunks and its weights (no longer across W's rows) */
  const char *kern = strstr(src, "__global__ void conv_transpose2d_");
  ck_assert_ptr_nonnull(kern);
  const char *end = strstr(kern + 1, "__global__");
  char *body = strndup(kern, end ? (size_t)(end - kern) : strlen(kern));
  ck_assert_int_ge(x_copies(body), 1);
  int w_copies = 0;
  for (const char *p = body; (p = strstr(p, "dl_cp_async16(")); p++) {
    const char *semi = strchr(p, ';'), *w = strstr(p, ", &w[");
    w_copies += w && semi && w < semi;
  }
  ck_assert_int_ge(w_copies, 1);
  free(body);
  free(src);
  Ctx c;
  ctx_init(&c);
  NJob j = njob(&c, text, (PassOptions){.opt_level = 2}, (CgOptions){0}, false);
  int up = 0;
  for (Node *n = j.g->first; n; n = n->next)
    if (n->op == OP_CONV_TRANSPOSE2D) {
      up++;
      ck_assert(ir_conv_nhwc(n));
      ck_assert_int_eq(n->in[1]->type.dims[3], 32);
    }
  ck_assert_int_eq(up, 1);
  ctx_free(&c);
}
END_TEST

static const char *shape_error(const char *text) {
  static char msg[1024];
  Ctx c;
  ctx_init(&c);
  NJob j = {.text = text, .po = {0}};
  ctx_guard(&c, run_njob, &j);
  ck_assert(!j.ok);
  snprintf(msg, sizeof msg, "%s", diag_text(&c));
  ctx_free(&c);
  return msg;
}

START_TEST(nhwc_errors) {
  /* a grouped nhwc weight's last axis is a group's channels */
  const char *m = shape_error("graph e {\n"
                              "  %x = input {name=\"x\"} : f32[1, 4, 4, 8]\n"
                              "  %w = input {name=\"w\"} : f32[8, 3, 3, 8]\n"
                              "  %y = conv2d %x, %w {groups=2, layout=\"nhwc\"} : f32[1, 2, 2, 8]\n"
                              "  return %y as \"y\"\n}\n");
  ck_assert_msg(strstr(m, "expects 8 input channels per group, but input f32[1, 4, 4, 8] has 4 with groups=2"), "%s", m);
  m = shape_error("graph e {\n"
                  "  %x = input {name=\"x\"} : f32[1, 4, 4, 8]\n"
                  "  %w = input {name=\"w\"} : f32[8, 3, 3, 8]\n"
                  "  %y = conv2d %x, %w {layout=\"nhcw\"} : f32[1, 2, 2, 8]\n"
                  "  return %y as \"y\"\n}\n");
  ck_assert_msg(strstr(m, "layout must be \"nchw\" or \"nhwc\""), "%s", m);
  m = shape_error("graph e {\n"
                  "  %x = input {name=\"x\"} : f32[1, 4, 4, 8]\n"
                  "  %w = input {name=\"w\"} : f32[8, 8, 3, 3]\n"
                  "  %y = conv2d %x, %w {layout=\"nhwc\"} : f32[1, 2, 2, 8]\n"
                  "  return %y as \"y\"\n}\n");
  ck_assert_msg(strstr(m, "expects 3 input channels per group") || strstr(m, "input channels"), "%s", m);
}
END_TEST

typedef struct ExJob {
  const char *file;
  Graph *g;
} ExJob;

static int lower_ex(Ctx *c, void *data) {
  ExJob *j = data;
  Define d[2] = {{"N", 2}, {"HW", 64}};
  j->g = test_lower_example(c, j->file, 2, d);
  if (!j->g) return 0;
  PassOptions po = {.opt_level = 2, .precision = TY_F16, .verify_each = true};
  if (!pass_run_pipeline(j->g, &po, NULL)) j->g = NULL;
  return 0;
}

/* The examples in f16: every convolution in one channels-last region,
 * the first (3 channels) padded to 8, entered at x and left through the
 * global pool channels last (over the middle axes of [N, H, W, C]): one
 * transpose of activations.  MobileNetV2's depthwise convolutions are
 * in the region too. */
START_TEST(resnets) {
  static const struct {
    const char *file;
    int convs;
  } ex[] = {{"resnet18.dl", 20}, {"resnet50.dl", 53}, {"mobilenetv2.dl", 52}};
  Ctx c;
  ctx_init(&c);
  ExJob j = {.file = ex[_i].file};
  ck_assert_int_eq(ctx_guard(&c, lower_ex, &j), 0);
  ck_assert_msg(j.g != NULL, "%s", diag_text(&c));
  Count k = count(j.g);
  ck_assert_int_eq(k.nhwc, ex[_i].convs);
  ck_assert_int_eq(k.nchw, 0);
  ck_assert_int_eq(k.transposes, 1);
  Node *pool = NULL;
  for (Node *n = j.g->first; n; n = n->next)
    if (n->op == OP_GLOBAL_AVGPOOL) pool = n;
  ck_assert(pool && ir_nhwc(pool));
  ck_assert_int_eq(count_op(j.g, OP_PAD), 2); /* the stem's x and W, 3 channels to 8 */
  ctx_free(&c);
}
END_TEST

static Suite *nhwc_suite(void) {
  Suite *s = suite_create("nhwc");
  TCase *t = tcase_create("nhwc");
  tcase_set_timeout(t, 600);
  tcase_add_loop_test(t, block_f16_bf16, 0, 2);
  tcase_add_loop_test(t, reduce_leaves_region, 0, 2);
  tcase_add_loop_test(t, model_permutes_taken_away, 0, 2);
  tcase_add_test(t, block_i8);
  tcase_add_test(t, block_i8_padded_zero_point);
  tcase_add_test(t, block_grouped);
  tcase_add_test(t, nhwc_grouped_conv_op);
  tcase_add_test(t, block_tf32);
  tcase_add_test(t, left_alone);
  tcase_add_loop_test(t, padded_channels, 0, 2);
  tcase_add_loop_test(t, depthwise_in_region, 0, 4);
  tcase_add_test(t, mobilenet_on_emu);
  tcase_add_test(t, unet_on_emu);
  tcase_add_loop_test(t, pools_in_region, 0, 2);
  tcase_add_loop_test(t, concat_in_region, 0, 4);
  tcase_add_loop_test(t, batchnorm_in_region, 0, 2);
  tcase_add_loop_test(t, group_norm_in_region, 0, 2);
  tcase_add_loop_test(t, gate_in_region, 0, 4);
  tcase_add_loop_test(t, conv3d_in_region, 0, 2);
  tcase_add_test(t, nhwc_conv_op);
  tcase_add_loop_test(t, nhwc_conv_transpose_op, 0, 5);
  tcase_add_test(t, nhwc_grouped_conv_transpose_op);
  tcase_add_loop_test(t, conv_transpose_in_region, 0, 4);
  tcase_add_test(t, nhwc_errors);
  tcase_add_loop_test(t, resnets, 0, 3);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(nhwc_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
