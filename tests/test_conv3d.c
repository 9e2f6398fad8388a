/* Check suite for the 3-d convolutions and pools (conv3d,
 * conv_transpose3d, maxpool3d, avgpool3d): what ir_eval computes against
 * naive loops written here (groups, dilation, strides, asymmetric pads,
 * count_include_pad, ceil_mode), their shape errors and IR text, the
 * generated kernels on emu against ir_eval at -O0 (im2col + GEMM, direct
 * loops) and -O2 (conv3d + bias + relu as one implicit-GEMM kernel, a
 * relu fused into a pool), NVRTC for sm_80 and sm_90, and the language's
 * builtins with PyTorch's weight layout and their errors. */
#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/testutil.h"

/* ---- compiling IR text and the language ---- */

typedef struct Job {
  const char *text;
  bool is_dl;  /* the language, else IR text */
  int level;   /* -1: parse (and lower) only */
  DType precision;
  Graph *g;
  CgResult cg;
  bool ok;
} Job;

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, j->is_dl ? "t.dl" : "t.ir", j->text, strlen(j->text));
  if (j->is_dl) {
    Program *p = fe_parse(c, f);
    j->g = p ? fe_lower(c, p, NULL) : NULL;
  } else {
    j->g = ir_parse(c, f);
  }
  if (!j->g || !ir_verify(j->g)) return 0;
  if (j->level < 0) {
    j->ok = true;
    return 0;
  }
  PassOptions po = {.opt_level = j->level, .verify_each = true, .precision = j->precision};
  if (!pass_run_pipeline(j->g, &po, NULL) || !ir_verify(j->g)) return 0;
  j->ok = cg_compile(j->g, &j->cg);
  return 0;
}

static Job compile_job(Ctx *c, const char *text, bool is_dl, int level) {
  Job j = {.text = text, .is_dl = is_dl, .level = level};
  int rc = ctx_guard(c, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "-O%d: failed:\n%s\n%s", level, diag_text(c), text);
  return j;
}

/* The first error of text, which must not compile. */
static void expect_error(const char *text, bool is_dl, const char *want) {
  Ctx c;
  ctx_init(&c);
  Job j = {.text = text, .is_dl = is_dl, .level = -1};
  ctx_guard(&c, run_job, &j);
  ck_assert_msg(!j.ok, "accepted:\n%s", text);
  ck_assert_msg(strstr(diag_text(&c), want), "for\n%s\nwanted: %s\ngot:\n%s", text, want, diag_text(&c));
  ctx_free(&c);
}

/* ---- tensors ---- */

/* Uniform in [-1, 1), from the tests' own generator. */
static double draw(uint64_t *state) {
  return (double)(test_splitmix64(state) >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct Feeds {
  TensorMap map;
  const char *names[8];
  Tensor t[8];
} Feeds;

/* Every input of g drawn from seed (f32, or rounded to g's float dtype). */
static void make_feeds(Graph *g, uint64_t seed, Feeds *f) {
  memset(f, 0, sizeof *f);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    ck_assert_int_lt(f->map.n, 8);
    Tensor *t = &f->t[f->map.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    for (int64_t i = 0, count = ir_type_numel(&t->type); i < count; i++) ir_tensor_set(t, i, draw(&seed));
    f->names[f->map.n++] = ir_attr_str(n, "name");
  }
  f->map.names = f->names;
  f->map.tensors = f->t;
}

static void free_feeds(Feeds *f) {
  for (int i = 0; i < f->map.n; i++) ir_tensor_free(&f->t[i]);
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

static Tensor *eval_graph(Graph *g, const TensorMap *params, const TensorMap *inputs) {
  Tensor *out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, inputs, params, out, err, sizeof err), "ir_eval: %s", err);
  return out;
}

/* got within rtol of want's largest magnitude, element by element. */
static void expect_close(const Tensor *got, const Tensor *want, double rtol, const char *what) {
  ck_assert_msg(ir_type_eq(&got->type, &want->type), "%s: types differ", what);
  int64_t count = ir_type_numel(&want->type);
  double scale = 0;
  for (int64_t i = 0; i < count; i++) scale = fmax(scale, fabs(ir_tensor_get(want, i)));
  for (int64_t i = 0; i < count; i++) {
    double g = ir_tensor_get(got, i), w = ir_tensor_get(want, i);
    ck_assert_msg(fabs(g - w) <= rtol * fmax(scale, 1e-30), "%s: element %" PRId64 ": %.9g, expected %.9g",
                  what, i, g, w);
  }
}

/* ---- the geometry of a test case ---- */

typedef struct Geo {
  int64_t n, c, in[3];   /* x [n, c, D, H, W] */
  int64_t co, groups;    /* output channels (a conv's) */
  int64_t k[3], stride[3], pad[6], dil[3], opad[3];
  bool bias, ceil_mode, include_pad;
} Geo;

static int64_t conv_out(const Geo *p, int d) {
  return (p->in[d] + p->pad[d] + p->pad[3 + d] - p->dil[d] * (p->k[d] - 1) - 1) / p->stride[d] + 1;
}

static int64_t transposed_out(const Geo *p, int d) {
  return (p->in[d] - 1) * p->stride[d] - p->pad[d] - p->pad[3 + d] + p->dil[d] * (p->k[d] - 1) + p->opad[d] + 1;
}

/* PyTorch's pooling size: with ceil_mode the last window may hang over
 * the end but must start inside the input or the left padding. */
static int64_t pool_out(const Geo *p, int d) {
  int64_t room = p->in[d] + p->pad[d] + p->pad[3 + d] - p->dil[d] * (p->k[d] - 1) - 1;
  int64_t o = (p->ceil_mode ? (room + p->stride[d] - 1) / p->stride[d] : room / p->stride[d]) + 1;
  if (p->ceil_mode && (o - 1) * p->stride[d] >= p->in[d] + p->pad[d]) o--;
  return o;
}

static char *ints3(char *buf, const int64_t *v, int n) {
  char *s = buf;
  s += sprintf(s, "[");
  for (int i = 0; i < n; i++) s += sprintf(s, "%s%" PRId64, i ? ", " : "", v[i]);
  sprintf(s, "]");
  return buf;
}

static char *shape5(char *buf, int64_t a, int64_t b, const int64_t *dhw) {
  sprintf(buf, "f32[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]", a, b, dhw[0], dhw[1],
          dhw[2]);
  return buf;
}

/* The graph of one conv3d (transposed: conv_transpose3d) of p, with
 * weights as inputs, its result through epilogue ("relu" or NULL). */
static char *conv_text(const Geo *p, bool transposed, const char *epilogue) {
  char xs[96], ws[96], ys[96], st[48], pd[64], dl[48], op[48], opad[64] = "";
  int64_t od[3], kd[3] = {p->k[0], p->k[1], p->k[2]};
  for (int d = 0; d < 3; d++) od[d] = transposed ? transposed_out(p, d) : conv_out(p, d);
  shape5(xs, p->n, p->c, p->in);
  if (transposed)
    shape5(ws, p->c, p->co / p->groups, kd);
  else
    shape5(ws, p->co, p->c / p->groups, kd);
  shape5(ys, p->n, p->co, od);
  char *text = malloc(2048);
  int len = sprintf(text, "graph conv {\n  %%x = input {name=\"x\"} : %s\n  %%w = input {name=\"w\"} : %s\n", xs, ws);
  if (p->bias) len += sprintf(text + len, "  %%b = input {name=\"b\"} : f32[%" PRId64 "]\n", p->co);
  if (transposed) snprintf(opad, sizeof opad, "output_pad=%s, ", ints3(op, p->opad, 3));
  len += sprintf(text + len, "  %%y = %s %%x, %%w%s {stride=%s, pad=%s, %sdilation=%s, groups=%" PRId64 "} : %s\n",
                 transposed ? "conv_transpose3d" : "conv3d", p->bias ? ", %b" : "", ints3(st, p->stride, 3),
                 ints3(pd, p->pad, 6), opad, ints3(dl, p->dil, 3), p->groups, ys);
  if (epilogue) len += sprintf(text + len, "  %%r = %s %%y : %s\n", epilogue, ys);
  sprintf(text + len, "  return %%%s as \"y\"\n}\n", epilogue ? "r" : "y");
  return text;
}

static char *pool_text(const Geo *p, bool is_max, const char *prologue) {
  char xs[96], ys[96], kk[48], st[48], pd[64], dl[48];
  int64_t od[3];
  for (int d = 0; d < 3; d++) od[d] = pool_out(p, d);
  shape5(xs, p->n, p->c, p->in);
  shape5(ys, p->n, p->c, od);
  char *text = malloc(2048);
  int len = sprintf(text, "graph pool {\n  %%x = input {name=\"x\"} : %s\n", xs);
  if (prologue) len += sprintf(text + len, "  %%p = %s %%x : %s\n", prologue, xs);
  len += sprintf(text + len, "  %%y = %s %%%s {kernel=%s, stride=%s, pad=%s, dilation=%s, ceil_mode=%d",
                 is_max ? "maxpool3d" : "avgpool3d", prologue ? "p" : "x", ints3(kk, p->k, 3),
                 ints3(st, p->stride, 3), ints3(pd, p->pad, 6), ints3(dl, p->dil, 3), p->ceil_mode);
  if (!is_max) len += sprintf(text + len, ", count_include_pad=%d", p->include_pad);
  sprintf(text + len, "} : %s\n  return %%y as \"y\"\n}\n", ys);
  return text;
}

/* ---- naive loops: what the ops mean, written out ---- */

static double at5(const Tensor *t, int64_t a, int64_t b, int64_t d, int64_t h, int64_t w) {
  const int64_t *s = t->type.dims;
  return ir_tensor_get(t, (((a * s[1] + b) * s[2] + d) * s[3] + h) * s[4] + w);
}

static bool inside(int64_t p, int64_t len) { return p >= 0 && p < len; }

/* out[n][co][z][y][x] = b[co] + sum over ci of its group and the taps. */
static double *naive_conv(const Geo *p, const Tensor *x, const Tensor *w, const Tensor *b, const int64_t *od) {
  int64_t cg = p->c / p->groups, cog = p->co / p->groups, count = p->n * p->co * od[0] * od[1] * od[2];
  double *out = calloc((size_t)count, sizeof *out), *o = out;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t co = 0; co < p->co; co++)
      for (int64_t z = 0; z < od[0]; z++)
        for (int64_t y = 0; y < od[1]; y++)
          for (int64_t xx = 0; xx < od[2]; xx++, o++) {
            double s = b ? ir_tensor_get(b, co) : 0;
            for (int64_t ci = 0; ci < cg; ci++)
              for (int64_t kd = 0; kd < p->k[0]; kd++)
                for (int64_t kh = 0; kh < p->k[1]; kh++)
                  for (int64_t kw = 0; kw < p->k[2]; kw++) {
                    int64_t id = z * p->stride[0] - p->pad[0] + kd * p->dil[0];
                    int64_t ih = y * p->stride[1] - p->pad[1] + kh * p->dil[1];
                    int64_t iw = xx * p->stride[2] - p->pad[2] + kw * p->dil[2];
                    if (!inside(id, p->in[0]) || !inside(ih, p->in[1]) || !inside(iw, p->in[2])) continue;
                    s += at5(x, n, co / cog * cg + ci, id, ih, iw) * at5(w, co, ci, kd, kh, kw);
                  }
            *o = s;
          }
  return out;
}

/* The adjoint, as a scatter: every input element adds its products into
 * the outputs its taps reach (eval.c gathers instead). */
static double *naive_conv_transpose(const Geo *p, const Tensor *x, const Tensor *w, const Tensor *b,
                                    const int64_t *od) {
  int64_t cig = p->c / p->groups, cog = p->co / p->groups, plane = od[0] * od[1] * od[2];
  double *out = calloc((size_t)(p->n * p->co * plane), sizeof *out);
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t co = 0; co < p->co; co++)
      for (int64_t i = 0; i < plane; i++) out[(n * p->co + co) * plane + i] = b ? ir_tensor_get(b, co) : 0;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t ci = 0; ci < p->c; ci++)
      for (int64_t id = 0; id < p->in[0]; id++)
        for (int64_t ih = 0; ih < p->in[1]; ih++)
          for (int64_t iw = 0; iw < p->in[2]; iw++)
            for (int64_t c = 0; c < cog; c++)
              for (int64_t kd = 0; kd < p->k[0]; kd++)
                for (int64_t kh = 0; kh < p->k[1]; kh++)
                  for (int64_t kw = 0; kw < p->k[2]; kw++) {
                    int64_t z = id * p->stride[0] - p->pad[0] + kd * p->dil[0];
                    int64_t y = ih * p->stride[1] - p->pad[1] + kh * p->dil[1];
                    int64_t xx = iw * p->stride[2] - p->pad[2] + kw * p->dil[2];
                    if (!inside(z, od[0]) || !inside(y, od[1]) || !inside(xx, od[2])) continue;
                    int64_t co = ci / cig * cog + c;
                    out[(((n * p->co + co) * od[0] + z) * od[1] + y) * od[2] + xx] +=
                        at5(x, n, ci, id, ih, iw) * at5(w, ci, c, kd, kh, kw);
                  }
  return out;
}

/* Max, or the mean over the real positions (count_include_pad=0) or over
 * those inside the padded input (1); positions past that (ceil_mode) are
 * not in the window. */
static double *naive_pool(const Geo *p, bool is_max, const Tensor *x, const int64_t *od) {
  double *out = calloc((size_t)(p->n * p->c * od[0] * od[1] * od[2]), sizeof *out), *o = out;
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t c = 0; c < p->c; c++)
      for (int64_t z = 0; z < od[0]; z++)
        for (int64_t y = 0; y < od[1]; y++)
          for (int64_t xx = 0; xx < od[2]; xx++, o++) {
            double best = -INFINITY, sum = 0;
            int64_t real = 0, padded = 0;
            for (int64_t kd = 0; kd < p->k[0]; kd++)
              for (int64_t kh = 0; kh < p->k[1]; kh++)
                for (int64_t kw = 0; kw < p->k[2]; kw++) {
                  int64_t pos[3] = {z * p->stride[0] - p->pad[0] + kd * p->dil[0],
                                    y * p->stride[1] - p->pad[1] + kh * p->dil[1],
                                    xx * p->stride[2] - p->pad[2] + kw * p->dil[2]};
                  bool real_pos = true, padded_pos = true;
                  for (int d = 0; d < 3; d++) {
                    real_pos = real_pos && inside(pos[d], p->in[d]);
                    padded_pos = padded_pos && pos[d] >= -p->pad[d] && pos[d] < p->in[d] + p->pad[3 + d];
                  }
                  padded += padded_pos;
                  if (!real_pos) continue;
                  double v = at5(x, n, c, pos[0], pos[1], pos[2]);
                  best = fmax(best, v);
                  sum += v;
                  real++;
                }
            int64_t div = p->include_pad ? padded : real;
            *o = is_max ? best : sum / (double)div;
          }
  return out;
}

static void expect_naive(const Tensor *got, const double *want, const char *what) {
  for (int64_t i = 0, count = ir_type_numel(&got->type); i < count; i++) {
    double g = ir_tensor_get(got, i);
    ck_assert_msg(fabs(g - want[i]) <= 1e-6 * fmax(1, fabs(want[i])), "%s: element %" PRId64 ": %.9g, naive %.9g",
                  what, i, g, want[i]);
  }
}

/* ---- the cases ---- */

/* Groups, dilations, strides, asymmetric pads, no bias. */
static const Geo convs[] = {
    {.n = 2, .c = 3, .in = {5, 6, 7}, .co = 4, .groups = 1, .k = {3, 3, 3}, .stride = {1, 1, 1},
     .pad = {1, 1, 1, 1, 1, 1}, .dil = {1, 1, 1}, .bias = true},
    {.n = 1, .c = 4, .in = {6, 5, 7}, .co = 6, .groups = 2, .k = {2, 3, 2}, .stride = {2, 1, 2},
     .pad = {1, 0, 2, 0, 1, 1}, .dil = {1, 2, 1}, .bias = true},
    {.n = 1, .c = 2, .in = {7, 7, 6}, .co = 5, .groups = 1, .k = {3, 2, 3}, .stride = {2, 3, 1},
     .pad = {0, 1, 0, 2, 0, 1}, .dil = {2, 1, 2}, .bias = false},
    {.n = 2, .c = 4, .in = {4, 5, 6}, .co = 4, .groups = 4, .k = {3, 3, 3}, .stride = {1, 2, 2},
     .pad = {1, 1, 1, 1, 1, 1}, .dil = {1, 1, 1}, .bias = true}, /* depthwise */
};

static const Geo transposes[] = {
    {.n = 1, .c = 4, .in = {3, 4, 3}, .co = 6, .groups = 2, .k = {2, 3, 3}, .stride = {2, 2, 1},
     .pad = {0, 1, 1, 1, 0, 1}, .dil = {1, 1, 2}, .opad = {1, 1, 0}, .bias = true},
    {.n = 2, .c = 3, .in = {2, 3, 4}, .co = 2, .groups = 1, .k = {3, 2, 2}, .stride = {1, 3, 2},
     .pad = {1, 0, 0, 0, 1, 0}, .dil = {2, 1, 1}, .opad = {1, 2, 0}, .bias = false},
};

static const Geo pools[] = {
    {.n = 2, .c = 3, .in = {5, 6, 7}, .k = {2, 2, 2}, .stride = {2, 2, 2}, .pad = {0, 0, 0, 0, 0, 0},
     .dil = {1, 1, 1}},
    {.n = 1, .c = 2, .in = {7, 6, 5}, .k = {3, 2, 3}, .stride = {2, 1, 2}, .pad = {1, 1, 0, 0, 1, 1},
     .dil = {1, 1, 1}, .ceil_mode = true, .include_pad = true},
    {.n = 1, .c = 3, .in = {6, 7, 6}, .k = {3, 3, 2}, .stride = {2, 2, 3}, .pad = {1, 0, 1, 1, 1, 0},
     .dil = {1, 1, 1}, .ceil_mode = true, .include_pad = false},
};

/* maxpool3d only: a dilated window (avgpool has no dilation). */
static const Geo dilated_pool = {.n = 1, .c = 2, .in = {7, 8, 6}, .k = {2, 3, 2}, .stride = {1, 2, 2},
                                 .pad = {1, 1, 0, 1, 0, 1}, .dil = {2, 2, 3}};

static void out_dims(const Geo *p, int kind, int64_t *od) {
  for (int d = 0; d < 3; d++) od[d] = kind == 0 ? conv_out(p, d) : kind == 1 ? transposed_out(p, d) : pool_out(p, d);
}

/* ir_eval of text against want() on inputs drawn from seed. */
static void check_eval(const char *text, const Geo *p, int kind, bool is_max, const char *what) {
  Ctx c;
  ctx_init(&c);
  Job j = compile_job(&c, text, false, -1);
  Feeds f;
  make_feeds(j.g, 11, &f);
  Tensor *got = eval_graph(j.g, NULL, &f.map);
  int64_t od[3];
  out_dims(p, kind, od);
  const Tensor *x = ir_tensor_map_find(&f.map, "x"), *w = ir_tensor_map_find(&f.map, "w");
  const Tensor *b = ir_tensor_map_find(&f.map, "b");
  double *want = kind == 0   ? naive_conv(p, x, w, b, od)
                 : kind == 1 ? naive_conv_transpose(p, x, w, b, od)
                             : naive_pool(p, is_max, x, od);
  expect_naive(&got[0], want, what);
  free(want);
  free_outputs(got, 1);
  free_feeds(&f);
  ctx_free(&c);
}

START_TEST(eval_conv3d_naive) {
  for (size_t i = 0; i < ARRAY_LEN(convs); i++) {
    char *text = conv_text(&convs[i], false, NULL), what[32];
    snprintf(what, sizeof what, "conv3d case %zu", i);
    check_eval(text, &convs[i], 0, false, what);
    free(text);
  }
}
END_TEST

START_TEST(eval_conv_transpose3d_naive) {
  for (size_t i = 0; i < ARRAY_LEN(transposes); i++) {
    char *text = conv_text(&transposes[i], true, NULL), what[40];
    snprintf(what, sizeof what, "conv_transpose3d case %zu", i);
    check_eval(text, &transposes[i], 1, false, what);
    free(text);
  }
}
END_TEST

START_TEST(eval_pool3d_naive) {
  for (size_t i = 0; i < ARRAY_LEN(pools); i++)
    for (int is_max = 0; is_max < 2; is_max++) {
      char *text = pool_text(&pools[i], is_max, NULL), what[40];
      snprintf(what, sizeof what, "%s case %zu", is_max ? "maxpool3d" : "avgpool3d", i);
      check_eval(text, &pools[i], 2, is_max, what);
      free(text);
    }
  char *text = pool_text(&dilated_pool, true, NULL);
  check_eval(text, &dilated_pool, 2, true, "dilated maxpool3d");
  free(text);
}
END_TEST

/* The sizes the shape rules give, with ceil_mode's last window. */
START_TEST(shapes_and_text) {
  static const char text[] = "; dlcc IR\n"
                             "graph shapes {\n"
                             "  %0 = input {name=\"x\"} : f32[1, 4, 5, 6, 7]\n"
                             "  %1 = input {name=\"w\"} : f32[8, 2, 3, 3, 1]\n"
                             "  %2 = conv3d %0, %1 {stride=[2, 1, 3], pad=[1, 0, 0, 1, 2, 0], dilation=[1, 2, 1], groups=2} : f32[1, 8, 3, 4, 3]\n"
                             "  %3 = maxpool3d %2 {kernel=[2, 2, 2], stride=[2, 2, 2], pad=[0, 1, 0, 0, 0, 1], dilation=[1, 1, 1], ceil_mode=1} : f32[1, 8, 2, 3, 2]\n"
                             "  %4 = avgpool3d %3 {kernel=[1, 3, 2], stride=[1, 1, 1], pad=[0, 1, 1, 0, 1, 0], dilation=[1, 1, 1], ceil_mode=0, count_include_pad=0} : f32[1, 8, 2, 3, 2]\n"
                             "  %5 = input {name=\"v\"} : f32[8, 3, 2, 3, 3]\n"
                             "  %6 = conv_transpose3d %4, %5 {stride=[2, 2, 1], pad=[0, 1, 1, 0, 1, 1], output_pad=[1, 1, 0], dilation=[1, 1, 1], groups=1} : f32[1, 3, 5, 6, 2]\n"
                             "  return %6 as \"y\"\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_job(&c, text, false, -1);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  ir_print(f, j.g);
  fclose(f);
  ck_assert_str_eq(out, text);
  free(out);
  ctx_free(&c);
}
END_TEST

static void expect_node_error(const char *line, const char *want) {
  char text[1024];
  snprintf(text, sizeof text,
           "graph e {\n  %%x = input {name=\"x\"} : f32[1, 4, 3, 5, 6]\n  %%w = input {name=\"w\"} : f32[6, 2, 3, 3, 3]\n"
           "  %%q = input {name=\"q\"} : f32[1, 4, 5, 6]\n  %%v = input {name=\"v\"} : f32[4, 2, 3, 3, 3]\n"
           "%s\n  return %%r as \"r\"\n}\n",
           line);
  expect_error(text, false, want);
}

START_TEST(shape_errors) {
  expect_node_error("  %r = conv3d %q, %w : f32[1]", "conv3d expects a 5-d input [N, C, D, H, W], got f32[1, 4, 5, 6]");
  expect_node_error("  %r = conv3d %x, %w : f32[1]", "conv3d: weight f32[6, 2, 3, 3, 3] expects 2 input channels per group");
  expect_node_error("  %r = conv3d %x, %w {groups=2, pad=[0, 0, 0, 0]} : f32[1]",
                    "conv3d: pad must have 6 values, got [0, 0, 0, 0]");
  expect_node_error("  %r = conv3d %x, %w {groups=2, dilation=[2, 1, 1]} : f32[1]",
                    "conv3d: kernel depth 3 (dilation 2) does not fit the input depth 3 with padding 0+0");
  expect_node_error("  %r = conv3d %x, %w {groups=4} : f32[1]",
                    "conv3d: groups=4 must divide the input channels (4) and the output channels (6)");
  expect_node_error("  %r = conv3d %x, %q {groups=2} : f32[1]", "conv3d expects a 5-d weight [Cout, C/groups, kD, kH, kW], got f32[1, 4, 5, 6]");
  expect_node_error("  %r = maxpool3d %x {kernel=[2, 2, 2], stride=[1, 1, 1], pad=[0, 0, 2, 0, 0, 0]} : f32[1]",
                    "maxpool3d: padding width 2+0 is more than half the kernel width 2");
  expect_node_error("  %r = avgpool3d %x {kernel=[4, 2, 2], stride=[1, 1, 1]} : f32[1]",
                    "avgpool3d: kernel depth 4 (dilation 1) does not fit the input depth 3 with padding 0+0");
  expect_node_error("  %r = maxpool3d %x {kernel=[2, 2], stride=[1, 1]} : f32[1]",
                    "maxpool3d: kernel must have 3 values, got [2, 2]");
  expect_node_error("  %r = avgpool3d %q {kernel=[2, 2, 2], stride=[1, 1, 1]} : f32[1]",
                    "avgpool3d expects a 5-d input [N, C, D, H, W], got f32[1, 4, 5, 6]");
  expect_node_error("  %r = conv_transpose3d %x, %w {output_pad=[0, 1, 0]} : f32[1]",
                    "conv_transpose3d: weight f32[6, 2, 3, 3, 3] expects 6 input channels, but input f32[1, 4, 3, 5, 6] has 4");
  expect_node_error("  %r = conv_transpose3d %x, %v {output_pad=[0, 1, 0]} : f32[1]",
                    "conv_transpose3d: output_pad height 1 must be smaller than the stride (1) or the dilation (1)");
  expect_node_error("  %r = conv3d %x, %w {groups=2} : f32[1, 6, 1, 3, 5]",
                    "declared f32[1, 6, 1, 3, 5] but conv3d of these operands gives f32[1, 6, 1, 3, 4]");
}
END_TEST

/* ---- codegen: emu against ir_eval, NVRTC ---- */

static int launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_LAUNCH;
  return n;
}

/* text at -O0 and -O2 (precision f32, or f16 with its tolerance):
 * NVRTC compiles it for sm_80 and sm_90, emu matches ir_eval of the
 * graph as written.  n_launches (when given) gets each level's count;
 * source_has, when given, must be in -O2's CUDA. */
static void check_emu(const char *text, DType precision, int *n_launches, const char *source_has) {
  Ctx ref;
  ctx_init(&ref);
  Job plain = compile_job(&ref, text, false, -1);
  for (int l = 0; l < 2; l++) {
    Ctx c;
    ctx_init(&c);
    Job j = {.text = text, .level = 2 * l, .precision = precision};
    int rc = ctx_guard(&c, run_job, &j);
    ck_assert_msg(rc == 0 && j.ok, "-O%d: failed:\n%s\n%s", 2 * l, diag_text(&c), text);
    test_nvrtc(j.cg.source, "sm_80");
    test_nvrtc(j.cg.source, "sm_90");
    if (l == 1 && source_has)
      ck_assert_msg(strstr(j.cg.source, source_has), "no %s in -O2's CUDA:\n%s", source_has, j.cg.source);
    Feeds f;
    make_feeds(plain.g, 5 + (uint64_t)l, &f);
    Tensor *want = eval_graph(plain.g, NULL, &f.map);
    Tensor *got = test_run_emu(j.cg.plan, NULL, &f.map);
    char what[64];
    snprintf(what, sizeof what, "-O%d", 2 * l);
    expect_close(&got[0], &want[0], precision == TY_F16 ? 2e-2 : 1e-5, what);
    free_outputs(want, 1);
    free_outputs(got, 1);
    free_feeds(&f);
    if (n_launches) n_launches[l] = launches(j.cg.plan);
    ctx_free(&c);
  }
  ctx_free(&ref);
}

/* conv3d + bias + relu: im2col, a GEMM, a bias and a relu kernel at -O0;
 * one implicit-GEMM kernel at -O2.  Grouped ones are one direct loop. */
START_TEST(emu_conv3d) {
  for (size_t i = 0; i < ARRAY_LEN(convs); i++) {
    char *text = conv_text(&convs[i], false, "relu");
    int n[2];
    bool igemm = convs[i].groups == 1;
    check_emu(text, TY_F32, n, igemm ? "conv3d_relu_igemm" : NULL);
    ck_assert_int_eq(n[1], 1);
    ck_assert_int_ge(n[0], 2);
    free(text);
  }
}
END_TEST

START_TEST(emu_conv3d_f16) {
  char *text = conv_text(&convs[0], false, "relu");
  check_emu(text, TY_F16, NULL, "conv3d_relu_igemm");
  free(text);
}
END_TEST

START_TEST(emu_conv_transpose3d) {
  for (size_t i = 0; i < ARRAY_LEN(transposes); i++) {
    char *text = conv_text(&transposes[i], true, NULL);
    check_emu(text, TY_F32, NULL, NULL);
    free(text);
  }
}
END_TEST

/* A relu before the pool is evaluated in the pool's loads at -O2. */
START_TEST(emu_pool3d) {
  for (size_t i = 0; i < ARRAY_LEN(pools); i++)
    for (int is_max = 0; is_max < 2; is_max++) {
      char *text = pool_text(&pools[i], is_max, "relu");
      int n[2];
      check_emu(text, TY_F32, n, NULL);
      ck_assert_int_eq(n[0], 2);
      ck_assert_int_eq(n[1], 1);
      free(text);
    }
  char *text = pool_text(&dilated_pool, true, NULL);
  check_emu(text, TY_F32, NULL, NULL);
  free(text);
}
END_TEST

/* ---- the language ---- */

/* A small video network (C3D-like), PyTorch's names and layouts. */
static const char video_dl[] =
    "model video(x: f32[2, 3, 4, 8, 8]) -> f32[2, 5] {\n"
    "  h = relu(batchnorm(conv3d(x, 8, kernel=3, pad=1) as conv1) as bn1)\n"
    "  h = maxpool3d(h, kernel=[1, 2, 2])\n"
    "  h = relu(conv3d(h, 8, kernel=[3, 1, 3], stride=[1, 2, 1], pad=[1, 0, 1], groups=2) as conv2)\n"
    "  u = conv_transpose3d(h, 4, kernel=2, stride=2, bias=false) as up\n"
    "  u = avgpool3d(u, kernel=2, pad=[0, 1, 1, 1, 0, 0], count_include_pad=false)\n"
    "  return linear(flatten(global_avgpool(u)), 5) as fc\n"
    "}\n";

static const Node *param_named(const Graph *g, const char *name) {
  for (const Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  return NULL;
}

static void expect_param(const Graph *g, const char *name, int rank, const int64_t *dims) {
  const Node *p = param_named(g, name);
  ck_assert_msg(p != NULL, "no param %s", name);
  TensorType want = ir_type_make(TY_F32, rank, dims);
  char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
  ck_assert_msg(ir_type_eq(&p->out[0].type, &want), "%s is %s, expected %s", name,
                ir_type_str(&p->out[0].type, a, sizeof a), ir_type_str(&want, b, sizeof b));
}

START_TEST(language_video_model) {
  Ctx c;
  ctx_init(&c);
  Job plain = compile_job(&c, video_dl, true, -1);
  expect_param(plain.g, "conv1.weight", 5, (int64_t[]){8, 3, 3, 3, 3});
  expect_param(plain.g, "conv1.bias", 1, (int64_t[]){8});
  expect_param(plain.g, "conv2.weight", 5, (int64_t[]){8, 4, 3, 1, 3});
  expect_param(plain.g, "up.weight", 5, (int64_t[]){8, 4, 2, 2, 2});
  ck_assert(param_named(plain.g, "up.bias") == NULL);
  ck_assert_msg(strstr(ir_attr(param_named(plain.g, "conv1.weight"), "init")->s, "uniform(0.111"),
                "PyTorch's init bound 1/sqrt(3*27)");
  TensorMap params;
  char err[256];
  ck_assert_msg(ir_init_params(plain.g, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  Feeds f;
  make_feeds(plain.g, 9, &f);
  Tensor *want = eval_graph(plain.g, &params, &f.map);
  for (int l = 0; l < 2; l++) {
    Ctx cc;
    ctx_init(&cc);
    Job j = compile_job(&cc, video_dl, true, 2 * l);
    /* -O2: bn-fold puts bn1 into conv1's weights and bias. */
    int batchnorms = 0;
    for (const Node *n = j.g->first; n; n = n->next) batchnorms += n->op == OP_BATCHNORM;
    ck_assert_int_eq(batchnorms, l ? 0 : 1);
    Tensor *got = test_run_emu(j.cg.plan, &params, &f.map);
    expect_close(&got[0], &want[0], 1e-5, l ? "video -O2" : "video -O0");
    free_outputs(got, 1);
    ctx_free(&cc);
  }
  free_outputs(want, 1);
  free_feeds(&f);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

static void expect_dl_error(const char *body, const char *want) {
  char text[1024];
  snprintf(text, sizeof text, "model m(x: f32[1, 4, 6, 6, 6], q: f32[1, 4, 6, 6]) -> f32[1] {\n%s\n}\n", body);
  expect_error(text, true, want);
}

START_TEST(language_errors) {
  expect_dl_error("  return conv3d(q, 8, kernel=3)",
                  "t.dl:2:10: error: conv3d expects a 5-d input [N, C, D, H, W], got f32[1, 4, 6, 6]");
  expect_dl_error("  return conv3d(x, 8, kernel=[3, 3])",
                  "t.dl:2:23: error: conv3d: 'kernel' must be a positive int or a list of 3 positive ints, got a list of 2 values");
  expect_dl_error("  return conv3d(x, 8, kernel=3, pad=[1, 1, 1, 1])",
                  "t.dl:2:33: error: conv3d: 'pad' must be a non-negative int or a list of 3 or 6 of them, got a list of 4 values");
  expect_dl_error("  return conv3d(x, 6, kernel=3, groups=4)",
                  "t.dl:2:33: error: conv3d: groups=4 must divide the input channels (4) and the output channels (6)");
  expect_dl_error("  return conv3d(x, 8, kernel=3, stride=2, pad=\"same\")",
                  "t.dl:2:43: error: conv3d: pad=\"same\" needs stride 1");
  expect_dl_error("  return maxpool3d(q, kernel=2)",
                  "t.dl:2:10: error: maxpool3d expects a 5-d input [N, C, D, H, W], got f32[1, 4, 6, 6]");
  expect_dl_error("  return avgpool3d(x, kernel=2, stride=[1, 0, 1])",
                  "t.dl:2:33: error: avgpool3d: 'stride' must be a positive int or a list of 3 positive ints");
  expect_dl_error("  return conv_transpose3d(x, 4, kernel=2, stride=2, output_pad=2)",
                  "t.dl:2:53: error: conv_transpose3d: output_pad 2 must be smaller than the stride (2) or the dilation (1)");
  expect_dl_error("  return conv3d(x, 8, kernel=3, pad=\"valid\")",
                  "t.dl:2:33: error: conv3d: 'pad' must be an int, a list of 3 or 6 ints, or \"same\", got a string");
  expect_dl_error("  return maxpool3d(x, kernel=2, pad=[2, 0, 0])",
                  "t.dl:2:10: error: maxpool3d: padding depth 2+2 is more than half the kernel depth 2");
  expect_dl_error("  return global_avgpool(reshape(x, [4, 216]))",
                  "t.dl:2:10: error: global_avgpool expects a 4-d input [N, C, H, W] or a 5-d input [N, C, D, H, W], "
                  "got f32[4, 216]");
}
END_TEST

static Suite *conv3d_suite(void) {
  Suite *s = suite_create("conv3d");
  TCase *e = tcase_create("meaning");
  tcase_add_test(e, eval_conv3d_naive);
  tcase_add_test(e, eval_conv_transpose3d_naive);
  tcase_add_test(e, eval_pool3d_naive);
  tcase_add_test(e, shapes_and_text);
  tcase_add_test(e, shape_errors);
  suite_add_tcase(s, e);
  TCase *l = tcase_create("language");
  tcase_set_timeout(l, 120);
  tcase_add_test(l, language_video_model);
  tcase_add_test(l, language_errors);
  suite_add_tcase(s, l);
  TCase *g = tcase_create("codegen");
  tcase_set_timeout(g, 240);
  tcase_add_test(g, emu_conv3d);
  tcase_add_test(g, emu_conv3d_f16);
  tcase_add_test(g, emu_conv_transpose3d);
  tcase_add_test(g, emu_pool3d);
  suite_add_tcase(s, g);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(conv3d_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
