/* What a newcomer from PyTorch meets (docs/language.md, "Coming from
 * PyTorch"): free dims bound by the shapes of the given inputs, with the
 * -D that fixes a mismatch; the examples with their batch left free.
 * Models compile through the public API on the reference interpreter
 * and on emu, with the same weights and inputs, and must agree; the
 * error texts are exact. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "frontend/dims.h"
#include "include/dlcc.h"
#include "ir/ir.h"

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
static double rng_unit(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

typedef struct Run {
  int n;
  dlc_tensor_info info[8];
  float *data[8];
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
  return s;
}

int main(void) {
  SRunner *r = srunner_create(pytorch_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
