/* What a newcomer from PyTorch meets (docs/language.md, "Coming from
 * PyTorch"): free dims bound by the shapes of the given inputs, with the
 * -D that fixes a mismatch; the examples with their batch left free.
 * Models compile through the public API on the reference interpreter
 * and on emu, with the same weights and inputs, and must agree; the
 * error texts are exact. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "frontend/dims.h"
#include "include/dlcc.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/testutil.h"

/* ---- lowering alone: the graph, or the exact diagnostics ---- */

typedef struct Lowered {
  Ctx c;
  Graph *g;
} Lowered;

typedef struct LowerJob {
  const char *text;
  const LowerOptions *opt;
  Graph *g;
} LowerJob;

static int lower_job(Ctx *c, void *data) {
  LowerJob *j = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", j->text, strlen(j->text));
  Program *p = fe_parse(c, f);
  j->g = p ? fe_lower(c, p, j->opt) : NULL;
  if (j->g && !ir_verify(j->g)) j->g = NULL;
  return 0;
}

static void lower(Lowered *r, const char *text, const LowerOptions *opt) {
  ctx_init(&r->c);
  LowerJob j = {text, opt, NULL};
  ck_assert_int_eq(ctx_guard(&r->c, lower_job, &j), 0);
  r->g = j.g;
}

/* text must fail to lower with exactly want. */
static void expect_errors(const char *text, const LowerOptions *opt, const char *want) {
  Lowered r;
  lower(&r, text, opt);
  ck_assert_msg(r.g == NULL, "lowered without errors:\n%s", text);
  ck_assert_str_eq(diag_text(&r.c), want);
  ctx_free(&r.c);
}

/* ---- through the API, on ref and emu ---- */

static uint64_t rng_state;
static double rng_unit(void) { return (double)(test_splitmix64(&rng_state) >> 11) / 9007199254740992.0; }

typedef struct Run {
  int n;
  dlc_tensor_info info[16];
  float *data[16];
} Run;

static size_t numel(const dlc_tensor_info *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

/* Compiles text with opt on backend, draws weights (seed 3) and f32
 * inputs in [-1, 1) (seed 5; integer inputs below 3), runs it once and
 * keeps the f32 outputs. */
static void run_text(const char *text, dlc_options opt, const char *backend, int level, Run *out) {
  opt.backend = backend;
  opt.opt_level = level;
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("t.dl", text, &opt, &m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  ck_assert_msg(dlc_init_weights(m, 3) == DLC_OK, "%s", dlc_error(m));
  rng_state = 5;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info t;
    ck_assert_int_eq(dlc_input_info(m, i, &t), DLC_OK);
    size_t n = numel(&t);
    void *buf = malloc(t.nbytes + 1);
    for (size_t k = 0; k < n; k++) {
      double u = rng_unit();
      if (t.dtype == DLC_F32) ((float *)buf)[k] = (float)(2 * u - 1);
      else if (t.dtype == DLC_I64) ((int64_t *)buf)[k] = (int64_t)(u * 3);
      else if (t.dtype == DLC_I32) ((int32_t *)buf)[k] = (int32_t)(u * 3);
      else if (t.dtype == DLC_BOOL) ((unsigned char *)buf)[k] = u < 0.3;
      else ck_abort_msg("input '%s': no generator for %s", t.name, dlc_dtype_name(t.dtype));
    }
    ck_assert_msg(dlc_set_input(m, t.name, buf, t.nbytes) == DLC_OK, "%s", dlc_error(m));
    free(buf);
  }
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  out->n = dlc_num_outputs(m);
  ck_assert_int_le(out->n, 16);
  for (int i = 0; i < out->n; i++) {
    const void *d;
    size_t nb;
    ck_assert_int_eq(dlc_output_info(m, i, &out->info[i]), DLC_OK);
    ck_assert_int_eq(dlc_get_output(m, i, &d, &nb), DLC_OK);
    size_t n = numel(&out->info[i]);
    out->data[i] = malloc(n * sizeof(float) + 1);
    for (size_t k = 0; k < n; k++) {
      switch (out->info[i].dtype) {
        case DLC_F32: out->data[i][k] = ((const float *)d)[k]; break;
        case DLC_I64: out->data[i][k] = (float)((const int64_t *)d)[k]; break;
        case DLC_BOOL: out->data[i][k] = ((const unsigned char *)d)[k]; break;
        default: ck_abort_msg("output %d: unexpected dtype", i);
      }
    }
    out->info[i].name = strdup(out->info[i].name);
  }
  dlc_free(m);
}

static void run_free(Run *r) {
  for (int i = 0; i < r->n; i++) {
    free(r->data[i]);
    free((char *)r->info[i].name);
  }
}

/* emu (at -O0 and -O2) against ref, within 1e-5 of each output's scale;
 * ref's outputs stay in *ref for the caller's own checks. */
static void agree(const char *text, dlc_options opt, Run *ref) {
  run_text(text, opt, "ref", DLC_O0, ref);
  for (int level = 0; level < 2; level++) {
    Run emu;
    run_text(text, opt, "emu", level ? 2 : DLC_O0, &emu);
    ck_assert_int_eq(emu.n, ref->n);
    for (int i = 0; i < ref->n; i++) {
      ck_assert_str_eq(emu.info[i].name, ref->info[i].name);
      size_t n = numel(&ref->info[i]);
      ck_assert_uint_eq(numel(&emu.info[i]), n);
      double scale = 1e-30;
      for (size_t k = 0; k < n; k++) scale = fmax(scale, fabs(ref->data[i][k]));
      for (size_t k = 0; k < n; k++) {
        double a = ref->data[i][k], b = emu.data[i][k];
        ck_assert_msg((isnan(a) && isnan(b)) || fabs(a - b) <= 1e-5 * scale,
                      "-O%d output '%s'[%zu]: emu %g, ref %g", level * 2, ref->info[i].name, k, b, a);
      }
    }
    run_free(&emu);
  }
}

/* ---- free dims ---- */

static const char free_mlp[] = "model mlp(x: f32[N, 16]) -> probs: f32[N, 3] {\n"
                               "  return softmax(linear(relu(linear(x, 8) as fc1), 3) as fc2, axis=-1)\n"
                               "}\n";

START_TEST(free_dim_from_input) {
  int64_t dims[2] = {5, 16};
  dlc_input_shape shape = {"x", 2, dims};
  dlc_options opt = {.n_input_shapes = 1, .input_shapes = &shape};
  Run ref;
  agree(free_mlp, opt, &ref);
  ck_assert_int_eq(ref.n, 1);
  ck_assert_str_eq(ref.info[0].name, "probs");
  ck_assert_int_eq(ref.info[0].dims[0], 5);
  for (int row = 0; row < 5; row++) {
    double sum = 0;
    for (int k = 0; k < 3; k++) sum += ref.data[0][row * 3 + k];
    ck_assert_msg(fabs(sum - 1) < 1e-6, "row %d sums to %g", row, sum);
  }
  run_free(&ref);
}
END_TEST

/* The name keeps its value in the body and in the results. */
START_TEST(free_dim_in_body) {
  static const char text[] = "model m(x: f32[B, T, 4]) -> y: f32[B, T * 4] {\n"
                             "  return reshape(x, [B, T * 4])\n"
                             "}\n";
  InputShape in = {"x", 3, (const int64_t[]){2, 3, 4}};
  LowerOptions lo = {.n_input_shapes = 1, .input_shapes = &in};
  Lowered r;
  lower(&r, text, &lo);
  ck_assert_msg(r.g != NULL, "%s", diag_text(&r.c));
  ck_assert_int_eq(r.g->outputs[0]->type.dims[0], 2);
  ck_assert_int_eq(r.g->outputs[0]->type.dims[1], 12);
  ctx_free(&r.c);
}
END_TEST

START_TEST(free_dim_by_input_axis_define) {
  Define d = {"x:0", 7};
  LowerOptions lo = {.n_defines = 1, .defines = &d};
  Lowered r;
  lower(&r, free_mlp, &lo);
  ck_assert_msg(r.g != NULL, "%s", diag_text(&r.c));
  ck_assert_int_eq(r.g->outputs[0]->type.dims[0], 7);
  ck_assert_str_eq(diag_text(&r.c), "");
  ctx_free(&r.c);
  /* One that binds nothing is named. */
  Define two[2] = {{"x:0", 7}, {"x:1", 16}};
  lo = (LowerOptions){.n_defines = 2, .defines = two};
  lower(&r, free_mlp, &lo);
  ck_assert_ptr_nonnull(r.g);
  ck_assert_str_eq(diag_text(&r.c), "dlcc: warning: -D x:1=16: model 'mlp' has no free dim there (a dim written as a "
                                    "name that no 'let' or -D defines)\n");
  ctx_free(&r.c);
}
END_TEST

START_TEST(free_dim_mismatch_names_define) {
  static const char text[] = "let N = 8\n"
                             "model mlp(x: f32[N, 16]) -> f32[N, 3] {\n"
                             "  return linear(x, 3)\n"
                             "}\n";
  InputShape in = {"x", 2, (const int64_t[]){4, 16}};
  LowerOptions lo = {.n_input_shapes = 1, .input_shapes = &in};
  expect_errors(text, &lo,
                "t.dl:2:18: error: dim 0 of input 'x' is N = 8 (by 'let N' at t.dl:1:5), but the input given has "
                "4: -D N=4 would make them agree\n"
                "    model mlp(x: f32[N, 16]) -> f32[N, 3] {\n"
                "                     ^\n");
  Define d = {"N", 2};
  lo.n_defines = 1, lo.defines = &d;
  expect_errors(text, &lo,
                "t.dl:2:18: error: dim 0 of input 'x' is N = 2 (by -D N=2), but the input given has 4: -D N=4 "
                "would make them agree\n"
                "    model mlp(x: f32[N, 16]) -> f32[N, 3] {\n"
                "                     ^\n");
  /* A number: no -D to name. */
  InputShape wide = {"x", 2, (const int64_t[]){8, 17}};
  lo = (LowerOptions){.n_input_shapes = 1, .input_shapes = &wide};
  expect_errors(text, &lo,
                "t.dl:2:21: error: dim 1 of input 'x' is 16, but the input given has 17\n"
                "    model mlp(x: f32[N, 16]) -> f32[N, 3] {\n"
                "                        ^\n");
  InputShape flat = {"x", 1, (const int64_t[]){128}};
  lo = (LowerOptions){.n_input_shapes = 1, .input_shapes = &flat};
  expect_errors(text, &lo,
                "t.dl:2:14: error: input 'x' is given with 1 dim, but the model declares 2\n"
                "    model mlp(x: f32[N, 16]) -> f32[N, 3] {\n"
                "                 ^\n");
}
END_TEST

START_TEST(free_dim_inputs_disagree) {
  static const char text[] = "model m(x: f32[N, 4], y: f32[N, 4]) -> f32[N, 4] {\n"
                             "  return x + y\n"
                             "}\n";
  InputShape in[2] = {{"x", 2, (const int64_t[]){2, 4}}, {"y", 2, (const int64_t[]){3, 4}}};
  LowerOptions lo = {.n_input_shapes = 2, .input_shapes = in};
  expect_errors(text, &lo,
                "t.dl:1:30: error: dim 0 of input 'y' is 'N', which input 'x' gives as 2 (its dim 0), but 'y' is "
                "given with 3: the inputs disagree (-D N=VALUE sets it for both)\n"
                "    model m(x: f32[N, 4], y: f32[N, 4]) -> f32[N, 4] {\n"
                "                                 ^\n");
  /* Given only x, y takes N from it. */
  lo.n_input_shapes = 1;
  Lowered r;
  lower(&r, text, &lo);
  ck_assert_msg(r.g != NULL, "%s", diag_text(&r.c));
  ck_assert_int_eq(r.g->outputs[0]->type.dims[0], 2);
  ctx_free(&r.c);
}
END_TEST

/* Each example with its batch `let` taken out runs with the batch of the
 * input given (3), which every output then has. */
START_TEST(examples_with_free_batch) {
  static const struct {
    const char *file, *input;
    int rank;
    int64_t dims[4];
  } ex[] = {
      {"mlp.dl", "x", 2, {3, 784}},          {"lenet.dl", "x", 4, {3, 1, 28, 28}},
      {"resnet18.dl", "x", 4, {3, 3, 64, 64}}, {"resnet50.dl", "x", 4, {3, 3, 64, 64}},
      {"mobilenetv2.dl", "x", 4, {3, 3, 64, 64}}, {"lstm.dl", "tokens", 2, {3, 32}},
      {"transformer.dl", "x", 3, {3, 16, 512}},
  };
  const char *top = getenv("top_srcdir");
  for (size_t e = 0; e < sizeof ex / sizeof ex[0]; e++) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s", top ? top : ".", ex[e].file);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    text[n] = 0;
    char *let = strstr(text, "let N =");
    ck_assert_msg(let != NULL, "%s has no 'let N'", ex[e].file);
    let[0] = '#'; /* a comment now: N is free */
    InputShape in = {ex[e].input, ex[e].rank, ex[e].dims};
    Define hw = {"HW", 64};
    LowerOptions lo = {.n_input_shapes = 1, .input_shapes = &in, .n_defines = 1, .defines = &hw};
    if (!strstr(text, "let HW")) lo.n_defines = 0;
    Lowered r;
    lower(&r, text, &lo);
    ck_assert_msg(r.g != NULL, "%s: %s", ex[e].file, diag_text(&r.c));
    for (int i = 0; i < r.g->n_outputs; i++) ck_assert_int_eq(r.g->outputs[i]->type.dims[0], 3);
    ctx_free(&r.c);
    free(text);
  }
}
END_TEST

/* ---- PyTorch's spellings ---- */

/* g's IR text without its location comments (the two spellings sit at
 * other columns). */
static char *ir_shape(Graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ir_print(f, g);
  fclose(f);
  char *o = buf;
  for (char *p = buf; *p;) {
    char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    char *semi = memchr(p, ';', n);
    size_t keep = semi ? (size_t)(semi - p) : n;
    while (keep && p[keep - 1] == ' ') keep--;
    memmove(o, p, keep);
    o += keep;
    *o++ = '\n';
    p += n + (nl != NULL);
  }
  *o = 0;
  return buf;
}

/* Each alias of frontend/pytorch.c's table builds what dlcc's spelling
 * does. */
START_TEST(aliases_mean_the_same) {
  static const struct {
    const char *torch, *dlcc;
  } pairs[] = {
      {"conv2d(x, out_channels=4, kernel_size=3, padding=1)", "conv2d(x, 4, kernel=3, pad=1)"},
      {"flatten(maxpool2d(x, kernel_size=2), start_dim=1, end_dim=-1)", "flatten(maxpool2d(x, kernel=2), start=1, end=-1)"},
      {"max_pool2d(x, 2, padding=1)", "maxpool2d(x, 2, pad=1)"},
      {"avg_pool2d(x, 2)", "avgpool2d(x, 2)"},
      {"softmax(cat([x, x], dim=1), dim=-1)", "softmax(concat([x, x], axis=1), axis=-1)"},
      {"sum(x, dim=[2, 3], keepdim=True)", "sum(x, axis=[2, 3], keepdims=true)"},
      {"leaky_relu(clamp(x, -1, 1), negative_slope=0.2)", "leaky_relu(clip(x, -1, 1), alpha=0.2)"},
      {"linear(flatten(x), out_features=5, bias=False)", "linear(flatten(x), 5, bias=false)"},
      {"bmm(permute(x, dims=[0, 1, 3, 2]), x)", "matmul(transpose(x, perm=[0, 1, 3, 2]), x)"},
      {"mm(view(x, [24, 8]), reshape(x, [8, 24]))", "matmul(reshape(x, [24, 8]), reshape(x, [8, 24]))"},
      {"pad(x, pad=[1, 1])", "pad(x, [1, 1])"},
      {"upsample(x, scale_factor=2)", "upsample(x, scale=2)"},
      {"relu(input=x)", "relu(x)"},
      {"cast(x, float16)", "cast(x, f16)"},
      {"cast(x, long)", "cast(x, i64)"},
      {"x * float(\"-inf\")", "x * -(1e308 * 10.0)"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    char *shapes[2];
    for (int k = 0; k < 2; k++) {
      char full[640];
      snprintf(full, sizeof full,
               "block f(x) {\n  return %s\n}\nmodel m(x: f32[2, 3, 4, 8]) -> f32[] {\n  return cast(sum(f(x)), f32)\n}\n",
               k ? pairs[i].dlcc : pairs[i].torch);
      Lowered r;
      lower(&r, full, NULL);
      ck_assert_msg(r.g != NULL, "%s: %s", k ? pairs[i].dlcc : pairs[i].torch, diag_text(&r.c));
      shapes[k] = ir_shape(r.g);
      ctx_free(&r.c);
    }
    ck_assert_msg(strcmp(shapes[0], shapes[1]) == 0, "%s:\n%s\nis not %s:\n%s", pairs[i].torch, shapes[0],
                  pairs[i].dlcc, shapes[1]);
    free(shapes[0]);
    free(shapes[1]);
  }
}
END_TEST

/* ---- tensor constructors, @, gather, index_select ---- */

static const float *output(const Run *r, const char *name, size_t count) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->info[i].name, name) == 0) {
      ck_assert_uint_eq(numel(&r->info[i]), count);
      return r->data[i];
    }
  ck_abort_msg("no output '%s'", name);
  return NULL;
}

static void expect_values(const Run *r, const char *name, const double *want, size_t count) {
  const float *got = output(r, name, count);
  for (size_t k = 0; k < count; k++)
    ck_assert_msg((isnan(want[k]) && isnan(got[k])) || got[k] == (float)want[k], "%s[%zu] is %g, expected %g", name,
                  k, got[k], want[k]);
}

START_TEST(constructors) {
  static const char text[] =
      "model m(unused: f32[1]) -> (z: f32[2, 3], o: i64[2, 2], a: i64[5], f: f32[4], d: i64[4], e: f32[3, 4],\n"
      "                            u: f32[2, 3, 4], lo: f32[2, 3, 4], full7: i64[2, 2], h: f32[3], zl: f32[2, 3, 4],\n"
      "                            fl: f32[2, 3, 4], b: bool[2]) {\n"
      "  x = reshape(cast(arange(24), f32), [2, 3, 4])\n"
      "  return zeros(2, 3) + 0.5, ones([2, 2], dtype=i64), arange(5), arange(0.5, 2.5, 0.5), arange(10, 0, -3),\n"
      "         eye(3, 4), triu(x, diagonal=1), tril(x, -1), full([2, 2], 7), cast(arange(3, dtype=f16) * 1.5, f32),\n"
      "         zeros_like(x) + x, full_like(x, 2.5) * x, ones(2, dtype=bool)\n"
      "}\n";
  Run r;
  agree(text, (dlc_options){0}, &r);
  double want[24];
  for (int i = 0; i < 6; i++) want[i] = 0.5;
  expect_values(&r, "z", want, 6);
  for (int i = 0; i < 4; i++) want[i] = 1;
  expect_values(&r, "o", want, 4);
  expect_values(&r, "a", (const double[]){0, 1, 2, 3, 4}, 5);
  expect_values(&r, "f", (const double[]){0.5, 1, 1.5, 2}, 4);
  expect_values(&r, "d", (const double[]){10, 7, 4, 1}, 4);
  for (int i = 0; i < 12; i++) want[i] = i / 4 == i % 4;
  expect_values(&r, "e", want, 12);
  for (int i = 0; i < 24; i++) want[i] = i % 4 - i / 4 % 3 >= 1 ? i : 0;
  expect_values(&r, "u", want, 24);
  for (int i = 0; i < 24; i++) want[i] = i % 4 - i / 4 % 3 <= -1 ? i : 0;
  expect_values(&r, "lo", want, 24);
  for (int i = 0; i < 4; i++) want[i] = 7;
  expect_values(&r, "full7", want, 4);
  expect_values(&r, "h", (const double[]){0, 1.5, 3}, 3);
  for (int i = 0; i < 24; i++) want[i] = i;
  expect_values(&r, "zl", want, 24);
  for (int i = 0; i < 24; i++) want[i] = 2.5 * i;
  expect_values(&r, "fl", want, 24);
  expect_values(&r, "b", (const double[]){1, 1}, 2);
  run_free(&r);
}
END_TEST

START_TEST(constructor_errors) {
  static const struct {
    const char *expr, *want;
  } cases[] = {
      {"arange(3, 3)", "t.dl:2:10: error: arange: 3 to 3 by 1 is empty (empty tensors are not supported)\n"},
      {"arange(0, 3, 0)", "t.dl:2:23: error: arange: step must not be 0\n"},
      {"zeros(2, 0)", "t.dl:2:16: error: zeros: the shape must be at most 8 positive ints (zeros(2, 3) or zeros([2, 3]))\n"},
      {"full([2], 0.5, dtype=i32)", "t.dl:2:20: error: full: 'value' must be a value of i32, got 0.5\n"},
      {"triu(arange(4))", "t.dl:2:10: error: triu expects a matrix or a batch of them [..., rows, cols], got i64[4]\n"},
      {"masked_fill(x, x, 0)", "t.dl:2:25: error: masked_fill: 'mask' must be a bool tensor (greater(x, 0) gives one; x > 0 gives a mask in x's dtype), got a tensor f32[2, 3]\n"},
      {"2 @ x", "t.dl:2:12: error: '@' is a matrix product of two tensors, got 2 and a tensor f32[2, 3]\n"},
      {"index_select(x, 2, arange(2))", "t.dl:2:26: error: index_select: axis 2 is out of range for a tensor of rank 2\n"},
      {"gather(x, 0, x)", "t.dl:2:23: error: gather: 'indices' must be an i32 or i64 tensor, got a tensor f32[2, 3]\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "model m(x: f32[2, 3]) -> f32[2, 3] {\n  return %s\n}\n", cases[i].expr);
    Lowered r;
    lower(&r, text, NULL);
    ck_assert_msg(r.g == NULL, "%s lowered", cases[i].expr);
    const char *got = diag_text(&r.c);
    ck_assert_msg(strncmp(got, cases[i].want, strlen(cases[i].want)) == 0, "%s:\n%s\nwanted:\n%s", cases[i].expr, got,
                  cases[i].want);
    ctx_free(&r.c);
  }
}
END_TEST

/* a @ b is matmul(a, b), at the precedence of *. */
START_TEST(matmul_operator) {
  Lowered r[2];
  lower(&r[0], "model m(a: f32[2, 3], b: f32[3, 4]) -> f32[2, 4] {\n  return a @ b * 2 + 1\n}\n", NULL);
  lower(&r[1], "model m(a: f32[2, 3], b: f32[3, 4]) -> f32[2, 4] {\n  return matmul(a, b) * 2 + 1\n}\n", NULL);
  ck_assert_msg(r[0].g && r[1].g, "%s%s", diag_text(&r[0].c), diag_text(&r[1].c));
  char *a = ir_shape(r[0].g), *b = ir_shape(r[1].g);
  ck_assert_str_eq(a, b);
  free(a);
  free(b);
  ctx_free(&r[0].c);
  ctx_free(&r[1].c);
}
END_TEST

/* gather is torch.gather, index_select its namesake; a negative index
 * counts from the end. */
START_TEST(gather_and_index_select) {
  static const char text[] =
      "model m(unused: f32[1]) -> (g: f32[2, 2], s: f32[2, 3], t: f32[2, 2, 2]) {\n"
      "  x = reshape(cast(arange(6), f32), [2, 3])\n"
      "  g = gather(x, 1, reshape(arange(4) % 3 - 1, [2, 2]))\n"
      "  s = index_select(x, 0, arange(1, -1, -1))\n"
      "  t = index_select(x, dim=1, index=reshape(arange(4) - 2, [2, 2]))\n"
      "  return g, s, t\n"
      "}\n";
  Run r;
  agree(text, (dlc_options){0}, &r);
  /* x = [[0, 1, 2], [3, 4, 5]]; g's indices [[-1, 0], [1, -1]] */
  expect_values(&r, "g", (const double[]){2, 0, 4, 5}, 4);
  expect_values(&r, "s", (const double[]){3, 4, 5, 0, 1, 2}, 6);
  /* t[i] = x[:, idx] with idx [[-2, -1], [0, 1]] = [[1, 2], [0, 1]] */
  expect_values(&r, "t", (const double[]){1, 2, 0, 1, 4, 5, 3, 4}, 8);
  run_free(&r);
}
END_TEST

/* An index out of range stops the run with the op's location, on ref
 * and on emu alike. */
START_TEST(index_out_of_range) {
  static const char text[] = "model m(x: f32[2, 3], i: i64[2]) -> f32[2, 2] {\n"
                             "  return index_select(x, 1, i)\n"
                             "}\n";
  static const char *const backends[] = {"ref", "emu"};
  for (int b = 0; b < 2; b++) {
    dlc_options opt = {.backend = backends[b]};
    dlc_model *m = NULL;
    ck_assert_msg(dlc_compile_string("t.dl", text, &opt, &m) == DLC_OK, "%s", dlc_error(m));
    ck_assert_int_eq(dlc_init_weights(m, 1), DLC_OK);
    float x[6] = {0};
    int64_t idx[2] = {1, 3};
    ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
    ck_assert_int_eq(dlc_set_input(m, "i", idx, sizeof idx), DLC_OK);
    ck_assert_int_ne(dlc_run(m), DLC_OK);
    ck_assert_msg(strstr(dlc_error(m), "t.dl:2:10: gather: index 3 is out of range for axis 1 of size 3"), "%s: %s",
                  backends[b], dlc_error(m));
    dlc_free(m);
  }
}
END_TEST

/* param names take {expr} as `as` scopes do, and bind their last name. */
START_TEST(param_names_interpolate) {
  static const char text[] = "model m(x: f32[2, 4]) -> f32[2, 4] {\n"
                             "  for i in 0..3 {\n"
                             "    param w{i}: f32[4, 4]\n"
                             "    param layers.{i}.bias: f32[4] = 0.5\n"
                             "    x = tanh(x @ w + bias)\n"
                             "  }\n"
                             "  param params.{\"p\" + \"q\"}: f32[4] = 1\n"
                             "  return x * params\n"
                             "}\n";
  Lowered r;
  lower(&r, text, NULL);
  ck_assert_msg(r.g != NULL, "%s", diag_text(&r.c));
  static const char *const names[] = {"w0", "layers.0.bias", "w1", "layers.1.bias", "w2", "layers.2.bias", "params.pq"};
  int k = 0;
  for (Node *n = r.g->first; n; n = n->next)
    if (n->op == OP_PARAM) {
      ck_assert_int_lt(k, 7);
      ck_assert_str_eq(ir_attr_str(n, "name"), names[k++]);
    }
  ck_assert_int_eq(k, 7);
  ctx_free(&r.c);
  expect_errors("model m(x: f32[2]) -> f32[2] {\n  for i in 0..2 {\n    param {i}: f32[2]\n  }\n  return x\n}\n", NULL,
                "t.dl:3:11: error: a param's name needs a part that is a name, which it binds (w{i} binds w, "
                "layers.{i}.weight binds weight)\n"
                "        param {i}: f32[2]\n"
                "              ^\n");
  expect_errors("model m(x: f32[2]) -> f32[2] {\n  for i in 0..2 {\n    param w{0}: f32[2]\n  }\n  return x\n}\n", NULL,
                "t.dl:3:5: error: parameter 'w0' is defined twice\n"
                "        param w{0}: f32[2]\n"
                "        ^\n"
                "t.dl:3:5: note: 'w0' was first defined here\n"
                "        param w{0}: f32[2]\n"
                "        ^\n");
}
END_TEST

/* ---- masks on multihead_attention ---- */

enum { MN = 2, MS = 4, ME = 8 };

/* text on backend with the f32 inputs given in order (weights seed 3);
 * the first output's values in out[] (MN * MS * ME of them). */
static void run_given(const char *text, const char *backend, int n_in, const float *const *in, float *out) {
  dlc_options opt = {.backend = backend};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("t.dl", text, &opt, &m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 3), DLC_OK);
  ck_assert_int_eq(dlc_num_inputs(m), n_in);
  for (int i = 0; i < n_in; i++) {
    dlc_tensor_info t;
    dlc_input_info(m, i, &t);
    ck_assert_msg(dlc_set_input(m, t.name, in[i], t.nbytes) == DLC_OK, "%s", dlc_error(m));
  }
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  const void *d;
  size_t nb;
  ck_assert_int_eq(dlc_get_output(m, 0, &d, &nb), DLC_OK);
  ck_assert_uint_eq(nb, sizeof(float) * MN * MS * ME);
  memcpy(out, d, nb);
  dlc_free(m);
}

static void fill_random(float *v, int n, uint64_t seed) {
  rng_state = seed;
  for (int i = 0; i < n; i++) v[i] = (float)(2 * rng_unit() - 1);
}

/* One query row (batch b, position s) of two outputs: equal, or not. */
static bool same_row(const float *a, const float *b, int batch, int pos) {
  const float *x = a + (batch * MS + pos) * ME, *y = b + (batch * MS + pos) * ME;
  return memcmp(x, y, sizeof(float) * ME) == 0;
}

/* A padded key changes nothing; every other one changes every row. */
START_TEST(mha_key_padding_mask) {
  static const char text[] = "model m(q: f32[2, 4, 8], kv: f32[2, 4, 8]) -> f32[2, 4, 8] {\n"
                             "  ids = reshape(arange(8), [2, 4])\n"
                             "  pad = logical_or(equal(ids, 2), equal(ids, 4))\n"
                             "  return multihead_attention(q, kv, kv, 2, key_padding_mask=pad) as attn\n"
                             "}\n";
  /* pad is true at (0, 2) and (1, 0): ids 2 and 4 of 0..7 */
  static float q[MN * MS * ME], kv[MN * MS * ME], kv2[MN * MS * ME], a[MN * MS * ME], b[MN * MS * ME];
  fill_random(q, MN * MS * ME, 1);
  fill_random(kv, MN * MS * ME, 2);
  for (int be = 0; be < 2; be++) {
    const char *backend = be ? "emu" : "ref";
    run_given(text, backend, 2, (const float *[]){q, kv}, a);
    memcpy(kv2, kv, sizeof kv);
    for (int e = 0; e < ME; e++) kv2[(0 * MS + 2) * ME + e] += 5, kv2[(1 * MS + 0) * ME + e] -= 3;
    run_given(text, backend, 2, (const float *[]){q, kv2}, b);
    for (int bt = 0; bt < MN; bt++)
      for (int p = 0; p < MS; p++) ck_assert_msg(same_row(a, b, bt, p), "%s: row %d, %d moved", backend, bt, p);
    memcpy(kv2, kv, sizeof kv);
    kv2[(0 * MS + 1) * ME] += 1; /* an unpadded key */
    run_given(text, backend, 2, (const float *[]){q, kv2}, b);
    for (int p = 0; p < MS; p++) ck_assert_msg(!same_row(a, b, 0, p), "%s: row 0, %d did not move", backend, p);
  }
}
END_TEST

/* is_causal: a query sees its own and earlier positions only. */
START_TEST(mha_causal) {
  static const char text[] = "model m(x: f32[2, 4, 8]) -> f32[2, 4, 8] {\n"
                             "  return multihead_attention(x, x, x, 2, is_causal=true) as attn\n"
                             "}\n";
  static float x[MN * MS * ME], x2[MN * MS * ME], a[MN * MS * ME], b[MN * MS * ME];
  fill_random(x, MN * MS * ME, 4);
  for (int be = 0; be < 2; be++) {
    const char *backend = be ? "emu" : "ref";
    run_given(text, backend, 1, (const float *[]){x}, a);
    memcpy(x2, x, sizeof x);
    for (int bt = 0; bt < MN; bt++) x2[(bt * MS + 2) * ME + 3] += 1;
    run_given(text, backend, 1, (const float *[]){x2}, b);
    for (int bt = 0; bt < MN; bt++)
      for (int p = 0; p < MS; p++)
        ck_assert_msg(same_row(a, b, bt, p) == (p < 2), "%s: row %d, %d", backend, bt, p);
  }
}
END_TEST

/* is_causal, a bool attn_mask, its additive form and PyTorch's
 * [N * heads, S, S] form all give one result, ref and emu alike; a row
 * with every key masked is 0, as scaled_dot_product_attention's. */
START_TEST(mha_mask_forms) {
  static const char *const masks[] = {
      "is_causal=true",
      "attn_mask=triu(ones(4, 4, dtype=bool), diagonal=1)",
      "attn_mask=masked_fill(zeros(4, 4), triu(ones(4, 4, dtype=bool), 1), float(\"-inf\"))",
      "attn_mask=expand(reshape(triu(ones(4, 4, dtype=bool), 1), [1, 4, 4]), [4, 4, 4])",
  };
  static float x[MN * MS * ME], want[MN * MS * ME], got[MN * MS * ME];
  fill_random(x, MN * MS * ME, 6);
  for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
    char text[512];
    snprintf(text, sizeof text,
             "model m(x: f32[2, 4, 8]) -> f32[2, 4, 8] {\n  return multihead_attention(x, x, x, 2, %s) as attn\n}\n",
             masks[i]);
    for (int be = 0; be < 2; be++) {
      run_given(text, be ? "emu" : "ref", 1, (const float *[]){x}, i || be ? got : want);
      if (!i && !be) continue;
      for (int k = 0; k < MN * MS * ME; k++)
        ck_assert_msg(fabsf(got[k] - want[k]) <= 1e-5f * (1 + fabsf(want[k])), "%s on %s: [%d] %g, want %g", masks[i],
                      be ? "emu" : "ref", k, got[k], want[k]);
    }
  }
  static const char dead[] = "model m(x: f32[2, 4, 8]) -> f32[2, 4, 8] {\n"
                             "  return multihead_attention(x, x, x, 2, attn_mask=greater(eye(4), 0.5)) as attn\n"
                             "}\n";
  for (int be = 0; be < 2; be++) {
    run_given(dead, be ? "emu" : "ref", 1, (const float *[]){x}, got);
    for (int k = 0; k < MN * MS * ME; k++)
      ck_assert_msg(!isnan(got[k]), "%s: a diagonal mask gave NaN at %d", be ? "emu" : "ref", k);
  }
  static const char all[] = "model m(x: f32[2, 4, 8]) -> f32[2, 4, 8] {\n"
                            "  return multihead_attention(x, x, x, 2, attn_mask=ones(4, 4, dtype=bool)) as attn\n"
                            "}\n";
  /* every key masked: the attention op gives 0 (scaled_dot_product_attention
   * since PyTorch 2.5), so every row is out_proj's bias, on both devices */
  for (int be = 0; be < 2; be++) {
    run_given(all, be ? "emu" : "ref", 1, (const float *[]){x}, got);
    for (int k = 0; k < MN * MS * ME; k++)
      ck_assert_msg(!isnan(got[k]) && got[k] == got[k % ME], "%s: [%d] %g", be ? "emu" : "ref", k, got[k]);
  }
}
END_TEST

START_TEST(mha_mask_errors) {
  static const char text[] = "model m(x: f32[2, 4, 8]) -> f32[2, 4, 8] {\n"
                             "  return multihead_attention(x, x, x, 2, attn_mask=ones(4, 3)) as attn\n"
                             "}\n";
  expect_errors(text, NULL,
                "t.dl:2:42: error: multihead_attention: 'attn_mask' must be a bool or f32 tensor [4, 4] or [4, 4, 4] "
                "(PyTorch's [S, S'] or [N * heads, S, S']), got a tensor f32[4, 3]\n"
                "      return multihead_attention(x, x, x, 2, attn_mask=ones(4, 3)) as attn\n"
                "                                             ^\n");
}
END_TEST

/* The kernels the constructors and masks give (iota's among them)
 * compile with NVRTC for sm_80 and sm_90, at -O0 and -O2. */
typedef struct CgJob {
  const char *text;
  int level;
  CgResult cg;
} CgJob;

static int cg_job(Ctx *c, void *data) {
  CgJob *j = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", j->text, strlen(j->text));
  Program *p = fe_parse(c, f);
  Graph *g = p ? fe_lower(c, p, NULL) : NULL;
  PassOptions po = {.opt_level = j->level};
  return g && pass_run_pipeline(g, &po, NULL) && cg_compile(g, &j->cg) ? 0 : 1;
}

START_TEST(kernels_compile) {
  static const char text[] =
      "model m(x: f32[2, 4, 8], p: bool[2, 4]) -> (y: f32[2, 4, 8], e: f16[3, 3], t: f32[2, 4, 8]) {\n"
      "  y = multihead_attention(x, x, x, 2, key_padding_mask=p, is_causal=true) as attn\n"
      "  return y, eye(3, dtype=f16) + cast(arange(0.5, 2, 0.5), f16), tril(x) + cast(arange(8), f32)\n"
      "}\n";
  for (int level = 0; level <= 2; level += 2) {
    Ctx c;
    ctx_init(&c);
    CgJob j = {text, level, {0}};
    ck_assert_msg(ctx_guard(&c, cg_job, &j) == 0, "%s", diag_text(&c));
    ck_assert_ptr_nonnull(strstr(j.cg.source, "iota"));
    test_nvrtc(j.cg.source, "sm_80");
    test_nvrtc(j.cg.source, "sm_90");
    ctx_free(&c);
  }
}
END_TEST

static Suite *pytorch_suite(void) {
  Suite *s = suite_create("pytorch");
  TCase *t = tcase_create("free_dims");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, free_dim_from_input);
  tcase_add_test(t, free_dim_in_body);
  tcase_add_test(t, free_dim_by_input_axis_define);
  tcase_add_test(t, free_dim_mismatch_names_define);
  tcase_add_test(t, free_dim_inputs_disagree);
  tcase_add_test(t, examples_with_free_batch);
  suite_add_tcase(s, t);
  t = tcase_create("spellings");
  tcase_add_test(t, aliases_mean_the_same);
  suite_add_tcase(s, t);
  t = tcase_create("tensors");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, constructors);
  tcase_add_test(t, constructor_errors);
  tcase_add_test(t, matmul_operator);
  tcase_add_test(t, gather_and_index_select);
  tcase_add_test(t, index_out_of_range);
  tcase_add_test(t, kernels_compile);
  tcase_add_test(t, param_names_interpolate);
  suite_add_tcase(s, t);
  t = tcase_create("attention_masks");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, mha_key_padding_mask);
  tcase_add_test(t, mha_causal);
  tcase_add_test(t, mha_mask_forms);
  tcase_add_test(t, mha_mask_errors);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(pytorch_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
