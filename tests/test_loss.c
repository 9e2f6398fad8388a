/* Check suite for the losses (passes/loss.c): every loss, reduction and
 * option against the numbers tests/loss_ref.py computed with NumPy from
 * PyTorch's formulas (tests/loss_expected.h), their gradients against
 * central finite differences in f64, a training step with every loss on
 * emu against the reference interpreter, `dlcc --loss`'s graph
 * (pass_append_loss), the located errors, and a class index out of
 * range reported at the loss on ref and emu. */
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
#include "passes/autodiff.h"
#include "passes/loss.h"
#include "passes/pass.h"
#include "tests/testutil.h"

typedef struct LossCase {
  const char *name;
  LossKind kind;
  LossReduction reduction;
  int64_t ignore_index;
  double label_smoothing, beta; /* beta: smooth_l1's, or huber's delta */
  int x_rank;
  int64_t x_dims[3];
  const double *x;
  int t_rank;
  int64_t t_dims[3];
  DType t_dtype;
  const double *t;
  int n_want;
  const double *want;
  int n_weight; /* cross_entropy and nll: weight [C]; bce_with_logits: pos_weight [n]; 0: none */
  const double *weight;
  bool log_target; /* kl_div's */
} LossCase;

#include "tests/loss_expected.h"

static LossSpec spec_of(const LossCase *lc) {
  LossSpec s = loss_spec_default(lc->kind);
  s.reduction = lc->reduction;
  s.ignore_index = lc->ignore_index;
  s.label_smoothing = lc->label_smoothing;
  s.beta = lc->beta;
  s.delta = lc->beta;
  s.log_target = lc->log_target;
  return s;
}

static void fill(Tensor *t, const TensorType *type, const double *v) {
  ck_assert(ir_tensor_alloc(t, type));
  for (int64_t i = 0, n = ir_type_numel(type); i < n; i++) ir_tensor_set(t, i, v[i]);
}

/* The case's loss in f64 with x an input (or a param when x_param), its
 * target the input "t"; data holds their values. */
typedef struct Built {
  Ctx c;
  Graph *g;
  Tensor data[3]; /* x, t, and the case's weight */
  const char *names[3];
  TensorMap inputs, params;
} Built;

static void build(Built *b, const LossCase *lc, bool x_param) {
  ctx_init(&b->c);
  b->g = ir_graph_new(&b->c, "loss");
  TensorType xt = ir_type_make(TY_F64, lc->x_rank, lc->x_dims), tt = ir_type_make(lc->t_dtype, lc->t_rank, lc->t_dims);
  Value *x = &ir_source(b->g, x_param ? OP_PARAM : OP_INPUT, &xt, "x", (SrcLoc){0})->out[0];
  Value *t = &ir_source(b->g, OP_INPUT, &tt, "t", (SrcLoc){0})->out[0];
  LossSpec s = spec_of(lc);
  TensorType wt = ir_type_make(TY_F64, 1, (int64_t[]){lc->n_weight});
  if (lc->n_weight) {
    Value *w = &ir_source(b->g, OP_INPUT, &wt, "w", (SrcLoc){0})->out[0];
    *(lc->kind == LOSS_BCE_WITH_LOGITS ? &s.pos_weight : &s.weight) = w;
  }
  Value *loss = loss_build(b->g, &s, x, t, (SrcLoc){0});
  ck_assert_msg(loss != NULL, "%s: %s", lc->name, diag_text(&b->c));
  const char *name = "loss";
  ir_set_outputs(b->g, 1, &loss, &name);
  ck_assert_msg(ir_verify(b->g), "%s: %s", lc->name, diag_text(&b->c));
  fill(&b->data[0], &xt, lc->x);
  fill(&b->data[1], &tt, lc->t);
  b->data[2] = (Tensor){0};
  if (lc->n_weight) fill(&b->data[2], &wt, lc->weight);
  b->names[0] = "x", b->names[1] = "t", b->names[2] = "w";
  int n_in = 2 + (lc->n_weight > 0);
  b->params = x_param ? (TensorMap){1, b->names, b->data} : (TensorMap){0};
  b->inputs = x_param ? (TensorMap){n_in - 1, b->names + 1, b->data + 1} : (TensorMap){n_in, b->names, b->data};
}

static void unbuild(Built *b) {
  for (int i = 0; i < 3; i++) ir_tensor_free(&b->data[i]);
  ctx_free(&b->c);
}

/* ---- the numbers ---- */

START_TEST(test_expected) {
  const LossCase *lc = &loss_cases[_i];
  Built b;
  build(&b, lc, false);
  Tensor *out = calloc((size_t)b.g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(b.g, &b.inputs, NULL, out, err, sizeof err), "%s: %s", lc->name, err);
  ck_assert_int_eq(ir_type_numel(&out[0].type), lc->n_want);
  if (lc->reduction != LOSS_NONE) ck_assert_int_eq(out[0].type.rank, 0);
  for (int i = 0; i < lc->n_want; i++) {
    double got = ir_tensor_get(&out[0], i), want = lc->want[i];
    ck_assert_msg(isnan(want) ? isnan(got) : fabs(got - want) <= 1e-12 * (fabs(want) + 1),
                  "%s: element %d: %.17g, expected %.17g", lc->name, i, got, want);
  }
  ir_tensor_free(&out[0]);
  free(out);
  unbuild(&b);
}
END_TEST

static double loss_at(Built *b) {
  Tensor *out = calloc((size_t)b->g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(b->g, &b->inputs, &b->params, out, err, sizeof err), "%s", err);
  double l = ir_tensor_get(&out[0], 0);
  for (int i = 0; i < b->g->n_outputs; i++) ir_tensor_free(&out[i]);
  free(out);
  return l;
}

/* i32 class indices read as i64 ones do. */
START_TEST(test_i32_targets) {
  for (size_t k = 0; k < ARRAY_LEN(loss_cases); k++) {
    LossCase lc = loss_cases[k];
    if (lc.t_dtype != TY_I64 || lc.reduction == LOSS_NONE) continue;
    lc.t_dtype = TY_I32;
    Built b;
    build(&b, &lc, false);
    double got = loss_at(&b);
    ck_assert_msg(isnan(lc.want[0]) ? isnan(got) : fabs(got - lc.want[0]) <= 1e-12 * (fabs(lc.want[0]) + 1),
                  "%s with i32 targets: %.17g, expected %.17g", lc.name, got, lc.want[0]);
    unbuild(&b);
  }
}
END_TEST

/* ---- gradients ---- */


/* Every scalar case: autodiff's x.grad against (L(x + h) - L(x - h)) /
 * 2h at every element of x; 0 where the loss is NaN (all ignored). */
START_TEST(test_gradients) {
  int checked = 0;
  for (size_t k = 0; k < ARRAY_LEN(loss_cases); k++) {
    const LossCase *lc = &loss_cases[k];
    if (lc->reduction == LOSS_NONE) continue;
    Built b;
    build(&b, lc, true);
    ck_assert_msg(pass_autodiff(b.g, NULL) && ir_verify(b.g), "%s: %s", lc->name, diag_text(&b.c));
    ck_assert_int_eq(b.g->n_outputs, 2);
    ck_assert_str_eq(b.g->output_names[1], "x.grad");
    Tensor *out = calloc(2, sizeof *out);
    char err[512];
    ck_assert_msg(ir_eval(b.g, &b.inputs, &b.params, out, err, sizeof err), "%s: %s", lc->name, err);
    for (int64_t j = 0, n = ir_type_numel(&b.data[0].type); j < n; j++) {
      if (isnan(lc->want[0])) { /* every target ignored: NaN, and no gradient, as PyTorch's */
        ck_assert_msg(ir_tensor_get(&out[1], j) == 0, "%s: x.grad[%lld] = %g", lc->name, (long long)j,
                      ir_tensor_get(&out[1], j));
        continue;
      }
      double v = ir_tensor_get(&b.data[0], j), h = 1e-6;
      ir_tensor_set(&b.data[0], j, v + h);
      double up = loss_at(&b);
      ir_tensor_set(&b.data[0], j, v - h);
      double fd = (up - loss_at(&b)) / (2 * h), got = ir_tensor_get(&out[1], j);
      ir_tensor_set(&b.data[0], j, v);
      ck_assert_msg(fabs(fd - got) <= 1e-6 * (fabs(fd) + 1), "%s: d loss / d x[%lld]: autodiff %.12g, finite differences %.12g",
                    lc->name, (long long)j, got, fd);
    }
    ir_tensor_free(&out[0]);
    ir_tensor_free(&out[1]);
    free(out);
    unbuild(&b);
    checked++;
  }
  ck_assert_int_ge(checked, 20);
}
END_TEST

/* ---- a step on emu against the reference ---- */

static const char every_loss[] =
    "model m(x: f32[4, 6], t: i64[4], p: f32[4, 5], y: f32[4, 5], b: f32[4, 5], cw: f32[5], pw: f32[5]) -> f32[] {\n"
    "  z = linear(x, 5) as fc\n"
    "  c = cross_entropy(z, t, label_smoothing=0.1, ignore_index=2) + cross_entropy(z, p)\n"
    "  c = c + nll_loss(log_softmax(z, axis=1), t, reduction=\"sum\")\n"
    "  c = c + cross_entropy(z, t, weight=cw, label_smoothing=0.2) + nll_loss(log_softmax(z, axis=1), t, weight=cw)\n"
    "  r = mse_loss(z, y) + l1_loss(z, y, reduction=\"sum\") + smooth_l1_loss(z, y, beta=0.5)\n"
    "  r = r + huber_loss(z, y, delta=0.5) + binary_cross_entropy_with_logits(z, b, pos_weight=pw)\n"
    "  r = r + binary_cross_entropy(sigmoid(z), sigmoid(y)) + kl_div(log_softmax(z, axis=1), p, reduction=\"batchmean\")\n"
    "  r = r + kl_div(log_softmax(z, axis=1), log_softmax(y, axis=1), log_target=true)\n"
    "  return c + r + binary_cross_entropy_with_logits(z, b)\n"
    "}\n";

static dlc_model *run_on(const char *backend) {
  dlc_options opt = {.backend = backend, .grad = 1};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("m.dl", every_loss, &opt, &m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 7), DLC_OK);
  static const int64_t t[4] = {3, 2, 2, 0};
  uint64_t state = 3;
  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info in;
    ck_assert_int_eq(dlc_input_info(m, i, &in), DLC_OK);
    if (in.dtype == DLC_I64) {
      ck_assert_int_eq(dlc_set_input(m, in.name, t, sizeof t), DLC_OK);
      continue;
    }
    float data[32];
    for (size_t k = 0; k < in.nbytes / sizeof(float); k++)
      data[k] = (float)((double)(test_splitmix64(&state) >> 11) * 0x1p-53 * 2 -
                        (in.name[0] == 'b' ? 0.5 : in.name[1] == 'w' ? -0.2 : 1)); /* weights in [0.2, 2.2) */
    ck_assert_int_eq(dlc_set_input(m, in.name, data, in.nbytes), DLC_OK);
  }
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  return m;
}

START_TEST(test_step_emu) {
  dlc_model *ref = run_on("ref"), *emu = run_on("emu");
  ck_assert_int_eq(dlc_num_outputs(ref), 3); /* the loss, fc.weight.grad, fc.bias.grad */
  for (int i = 0; i < 3; i++) {
    const void *a, *b;
    size_t na, nb;
    ck_assert_int_eq(dlc_get_output(ref, i, &a, &na), DLC_OK);
    ck_assert_int_eq(dlc_get_output(emu, i, &b, &nb), DLC_OK);
    ck_assert_uint_eq(na, nb);
    const float *want = a, *got = b;
    double scale = 1e-30;
    for (size_t k = 0; k < na / sizeof(float); k++) scale = fmax(scale, fabs(want[k]));
    for (size_t k = 0; k < na / sizeof(float); k++)
      ck_assert_msg(fabs(got[k] - want[k]) <= 1e-5 * scale, "output %d element %zu: emu %.9g, ref %.9g", i, k,
                    got[k], want[k]);
  }
  dlc_free(ref);
  dlc_free(emu);
}
END_TEST

/* ---- dlcc --loss ---- */

static const char mlp[] =
    "model mlp(x: f32[3, 4]) -> y: f32[3, 5] {\n"
    "  return linear(relu(linear(x, 8) as fc1), 5) as fc2\n"
    "}\n";

static Graph *lower(Ctx *c, const char *text) {
  TestSource src = {text, NULL};
  ck_assert_int_eq(ctx_guard(c, test_lower_source, &src), 0);
  ck_assert_msg(src.g && ir_verify(src.g), "%s", diag_text(c));
  return src.g;
}

static Tensor input(const TensorType *t, const double *v, int n) {
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, t));
  for (int64_t i = 0, count = ir_type_numel(t); i < count; i++) ir_tensor_set(&x, i, v[i % n]);
  return x;
}

/* The graph's inputs x (cycled values) and target t, on ir_eval and on
 * emu after -O2: both succeed and agree, or both fail with one message,
 * which goes to err. */
static bool run_both(Graph *ref, const int64_t *t, char *err, size_t errlen) {
  Graph *g = ir_copy(ref, "step");
  PassOptions po = {.opt_level = 2, .verify_each = true};
  CgResult cg;
  ck_assert_msg(g && pass_run_pipeline(g, &po, NULL) && cg_compile(g, &cg), "%s", diag_text(ref->ctx));
  TensorMap params;
  ck_assert_msg(ir_init_params(ref, 5, IR_INIT_RANDOM, &params, err, errlen), "%s", err);
  const char *names[2] = {"x", "target"};
  Tensor in[2];
  for (Node *n = ref->first; n; n = n->next)
    if (n->op == OP_INPUT) {
      bool is_t = strcmp(ir_attr_str(n, "name"), "target") == 0;
      double tv[3] = {(double)t[0], (double)t[1], (double)t[2]};
      in[is_t] = is_t ? input(&n->out[0].type, tv, 3) : input(&n->out[0].type, (const double[]){0.5, -1, 2, 0.25, -0.75}, 5);
    }
  TensorMap inputs = {2, names, in};
  Tensor *want = calloc((size_t)ref->n_outputs, sizeof *want), *got = NULL;
  bool ok = ir_eval(ref, &inputs, &params, want, err, errlen);
  char emu_err[512];
  int rc = test_run_emu_status(cg.plan, &params, &inputs, &got, emu_err, sizeof emu_err);
  ck_assert_int_eq(rc, ok ? DLRT_OK : DLRT_E_INDEX);
  if (!ok) ck_assert_str_eq(emu_err, err);
  for (int i = 0; ok && i < ref->n_outputs; i++) {
    int64_t count = ir_type_numel(&want[i].type);
    double scale = 1e-30;
    for (int64_t k = 0; k < count; k++) scale = fmax(scale, fabs(ir_tensor_get(&want[i], k)));
    for (int64_t k = 0; k < count; k++)
      ck_assert_msg(fabs(ir_tensor_get(&got[i], k) - ir_tensor_get(&want[i], k)) <= 1e-5 * scale,
                    "output %s element %lld", ref->output_names[i], (long long)k);
  }
  for (int i = 0; i < ref->n_outputs; i++) {
    ir_tensor_free(&want[i]);
    if (got) ir_tensor_free(&got[i]);
  }
  free(want);
  free(got);
  ir_tensor_free(&in[0]);
  ir_tensor_free(&in[1]);
  ir_tensor_map_free(&params);
  return ok;
}

START_TEST(test_append_loss) {
  Ctx c;
  ctx_init(&c);
  Graph *g = lower(&c, mlp);
  LossSpec s = loss_spec_default(LOSS_CROSS_ENTROPY);
  s.label_smoothing = 0.05;
  ck_assert_msg(pass_append_loss(g, &s, 0, "target", NULL) && ir_verify(g), "%s", diag_text(&c));
  ck_assert_int_eq(g->n_outputs, 2);
  ck_assert_str_eq(g->output_names[0], "loss");
  ck_assert_str_eq(g->output_names[1], "y");
  ck_assert_int_eq(g->outputs[0]->type.rank, 0);
  /* The target follows the model's input, i64 [N]. */
  const Node *n = g->first;
  while (n->op != OP_INPUT) n = n->next;
  ck_assert_str_eq(ir_attr_str(n, "name"), "x");
  while ((n = n->next)->op != OP_INPUT) continue;
  ck_assert_str_eq(ir_attr_str(n, "name"), "target");
  char tb[IR_TYPE_STR_MAX];
  ck_assert_str_eq(ir_type_str(&n->out[0].type, tb, sizeof tb), "i64[3]");
  ck_assert_msg(pass_autodiff(g, NULL) && ir_verify(g), "%s", diag_text(&c));
  ck_assert_str_eq(g->output_names[2], "fc1.weight.grad");
  char err[512];
  ck_assert(run_both(g, (const int64_t[]){4, -100, 0}, err, sizeof err));
  /* Out of range, at the loss on both sides; a negative index too. */
  ck_assert(!run_both(g, (const int64_t[]){1, 7, 0}, err, sizeof err));
  ck_assert_str_eq(err, "loss cross_entropy: gather_elements: index 7 is out of range for axis 1 of size 5");
  ck_assert(!run_both(g, (const int64_t[]){1, 2, -1}, err, sizeof err));
  ck_assert_str_eq(err, "loss cross_entropy: gather_elements: index -6 is out of range for axis 1 of size 5");
  ctx_free(&c);
}
END_TEST

/* In the language the index error points at the call. */
START_TEST(test_index_in_language) {
  Ctx c;
  ctx_init(&c);
  Graph *g = lower(&c,
                   "model m(x: f32[3, 4], target: i64[3]) -> f32[] {\n"
                   "  y = linear(x, 5) as fc\n"
                   "  return nll_loss(log_softmax(y, axis=1), target, ignore_index=9)\n"
                   "}\n");
  char err[512];
  ck_assert(run_both(g, (const int64_t[]){9, 4, 0}, err, sizeof err)); /* 9 ignored */
  ck_assert(!run_both(g, (const int64_t[]){9, 5, -100}, err, sizeof err));
  ck_assert_str_eq(err, "t.dl:3:10: gather_elements: index 5 is out of range for axis 1 of size 5");
  ctx_free(&c);
}
END_TEST

/* ---- errors ---- */

static void expect_first_line(const char *text, const char *line) {
  size_t n = strcspn(text, "\n");
  ck_assert_msg(strlen(line) == n && strncmp(text, line, n) == 0, "expected\n  %s\ngot\n  %.*s", line, (int)n, text);
}

static void expect_lower_error(const char *text, const char *line) {
  Ctx c;
  ctx_init(&c);
  TestSource src = {text, NULL};
  ck_assert_int_eq(ctx_guard(&c, test_lower_source, &src), 0);
  ck_assert_ptr_null(src.g);
  expect_first_line(diag_text(&c), line);
  ctx_free(&c);
}

START_TEST(test_errors) {
  expect_lower_error("model m(x: f32[8, 5], t: f32[8, 3]) -> f32[] {\n"
                     "  return cross_entropy(linear(x, 10) as fc, t)\n"
                     "}\n",
                     "t.dl:2:10: error: cross_entropy: target f32[8, 3] does not fit logits f32[8, 10]: "
                     "expected class indices i64[8] or probabilities f32[8, 10]");
  expect_lower_error("model m(x: f32[8, 5], t: i64[8, 2]) -> f32[] {\n"
                     "  return nll_loss(x, t)\n"
                     "}\n",
                     "t.dl:2:10: error: nll_loss: target i64[8, 2] does not fit log-probabilities f32[8, 5]: "
                     "expected class indices i64[8]");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8]) -> f32[] {\n"
                     "  return mse_loss(x, t)\n"
                     "}\n",
                     "t.dl:2:10: error: mse_loss: target f32[8] does not fit input f32[8, 5]: it must have the "
                     "same shape and dtype");
  expect_lower_error("model m(x: f32[8, 5], t: i64[8]) -> f32[] {\n"
                     "  return cross_entropy(x, t, label_smoothing=1.5)\n"
                     "}\n",
                     "t.dl:2:30: error: cross_entropy: 'label_smoothing' must be between 0 and 1, got 1.5");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8, 5]) -> f32[] {\n"
                     "  return smooth_l1_loss(x, t, beta=-1)\n"
                     "}\n",
                     "t.dl:2:10: error: smooth_l1_loss: beta must be 0 or more, got -1");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8, 5]) -> f32[] {\n"
                     "  return l1_loss(x, t, reduction=\"avg\")\n"
                     "}\n",
                     "t.dl:2:24: error: l1_loss: 'reduction' must be \"mean\", \"sum\" or \"none\", got \"avg\"");
  expect_lower_error("model m(x: i64[8, 5], t: i64[8, 5]) -> i64[] {\n"
                     "  return binary_cross_entropy_with_logits(x, t)\n"
                     "}\n",
                     "t.dl:2:10: error: binary_cross_entropy_with_logits: input must be floating point, got "
                     "i64[8, 5]");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8, 5]) -> f32[] {\n"
                     "  return mse_loss(x, t, reduction=\"batchmean\")\n"
                     "}\n",
                     "t.dl:2:25: error: mse_loss: 'reduction' must be \"mean\", \"sum\" or \"none\", got "
                     "\"batchmean\"");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8, 5]) -> f32[] {\n"
                     "  return kl_div(x, t, reduction=\"avg\")\n"
                     "}\n",
                     "t.dl:2:23: error: kl_div: 'reduction' must be \"mean\", \"sum\", \"batchmean\" or \"none\", "
                     "got \"avg\"");
  expect_lower_error("model m(x: f32[8, 5], t: f32[8]) -> f32[] {\n"
                     "  return binary_cross_entropy(sigmoid(x), t)\n"
                     "}\n",
                     "t.dl:2:10: error: binary_cross_entropy: target f32[8] does not fit input f32[8, 5]: it must "
                     "have the same shape and dtype");
}
END_TEST

/* reduction="none" is no loss to differentiate: autodiff says so at the
 * call. */
START_TEST(test_not_scalar) {
  Ctx c;
  ctx_init(&c);
  Graph *g = lower(&c,
                   "model m(x: f32[8, 5], t: i64[8]) -> f32[8] {\n"
                   "  return cross_entropy(linear(x, 3) as fc, t, reduction=\"none\")\n"
                   "}\n");
  ck_assert(!pass_autodiff(g, NULL));
  expect_first_line(diag_text(&c), "t.dl:2:10: error: the loss must be one float value to differentiate, but "
                                   "output 'output' is f32[8] (reduce it, e.g. with a mean)");
  ctx_free(&c);
}
END_TEST

START_TEST(test_append_errors) {
  Ctx c;
  ctx_init(&c);
  Graph *g = lower(&c, mlp);
  LossSpec s = loss_spec_default(LOSS_MSE);
  ck_assert(!pass_append_loss(g, &s, 1, "target", NULL));
  expect_first_line(diag_text(&c), "loss mse: error: the loss reads output 1, but the model has 1 output");
  diag_clear(&c);
  ck_assert(!pass_append_loss(g, &s, 0, "x", NULL));
  expect_first_line(diag_text(&c), "loss mse: error: the model already has an input named 'x' (the loss's target)");
  diag_clear(&c);
  TensorType bad = ir_type_make(TY_F32, 1, (int64_t[]){3});
  ck_assert(!pass_append_loss(g, &s, 0, "target", &bad));
  expect_first_line(diag_text(&c), "loss mse: error: mse_loss: target f32[3] does not fit input f32[3, 5]: it "
                                   "must have the same shape and dtype");
  ctx_free(&c);
}
END_TEST

START_TEST(test_names) {
  static const char *const names[][2] = {{"cross_entropy", "cross_entropy"}, {"nll_loss", "nll"},
                                         {"mse", "mse"},
                                         {"smooth_l1_loss", "smooth_l1"},
                                         {"binary_cross_entropy_with_logits", "bce_with_logits"},
                                         {"binary_cross_entropy", "bce"}, {"kl_div", "kl_div"}};
  for (size_t i = 0; i < ARRAY_LEN(names); i++) {
    LossKind k;
    ck_assert(loss_from_name(names[i][0], &k));
    ck_assert_str_eq(loss_name(k), names[i][1]);
  }
  LossKind k;
  ck_assert(!loss_from_name("hinge", &k));
  ck_assert_str_eq(loss_names().s, "cross_entropy, nll, mse, l1, smooth_l1, bce_with_logits, huber, bce or kl_div");
  LossSpec s = loss_spec_default(LOSS_SMOOTH_L1);
  ck_assert(s.reduction == LOSS_MEAN && s.ignore_index == -100 && s.beta == 1 && s.label_smoothing == 0);
}
END_TEST

static Suite *loss_suite(void) {
  Suite *s = suite_create("loss");
  TCase *values = tcase_create("values");
  tcase_add_loop_test(values, test_expected, 0, (int)ARRAY_LEN(loss_cases));
  tcase_add_test(values, test_i32_targets);
  tcase_add_test(values, test_gradients);
  tcase_add_test(values, test_names);
  suite_add_tcase(s, values);
  TCase *runs = tcase_create("runs");
  tcase_set_timeout(runs, 120);
  tcase_add_test(runs, test_step_emu);
  tcase_add_test(runs, test_append_loss);
  tcase_add_test(runs, test_index_in_language);
  suite_add_tcase(s, runs);
  TCase *errors = tcase_create("errors");
  tcase_add_test(errors, test_errors);
  tcase_add_test(errors, test_not_scalar);
  tcase_add_test(errors, test_append_errors);
  suite_add_tcase(s, errors);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(loss_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
