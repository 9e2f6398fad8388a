/* Check suite for the optimizers (passes/optim.c) and a step's updates
 * applied by the runtime: 3 steps of SGD (momentum with dampening,
 * nesterov with weight decay, clip_grad_norm), Adam and AdamW on an MLP
 * and a CNN with training-mode batch norm, compiled through dlc_options
 * and run on ref and emu, against the trajectories tests/train_ref.py
 * computed in NumPy from PyTorch's formulas (train_ref.h); the weights
 * read back with dlc_get_weight (dlrt_get_weight on emu) after N runs
 * equal to N interpreter steps, optimizer state and step counter
 * included; dlcc.* params zero from dlc_init_weights; the plan's update
 * steps and rt_plan_validate's refusals; the spec errors. */
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
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "passes/optim.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"
#include "tests/testutil.h"
#include "tests/train_ref.h"

static const char mlp[] =
    "model mlp(x: f32[4, 6], t: f32[4, 3]) -> f32[] {\n"
    "  h = relu(linear(x, 5) as fc1)\n"
    "  return -mean(sum(log_softmax(linear(h, 3) as fc2, axis=-1) * t, axis=1))\n"
    "}\n";

static const char cnn[] =
    "model cnn(x: f32[4, 2, 5, 5], t: f32[4, 3]) -> f32[] {\n"
    "  y = relu(batchnorm(conv2d(x, 3, kernel=3, pad=1, bias=false) as conv1) as bn1)\n"
    "  y = flatten(global_avgpool(y))\n"
    "  return -mean(sum(log_softmax(linear(y, 3) as fc, axis=-1) * t, axis=1))\n"
    "}\n";

static dlc_optimizer optimizer_of(const RefRun *r) {
  return (dlc_optimizer){.kind = r->kind, .momentum = r->momentum, .dampening = r->dampening,
                         .nesterov = r->nesterov, .weight_decay = r->weight_decay, .beta1 = r->beta1,
                         .beta2 = r->beta2, .eps = r->eps, .clip_grad_norm = r->clip, .maximize = r->maximize,
                         .amsgrad = r->amsgrad, .alpha = r->alpha, .centered = r->centered,
                         .lr_decay = r->lr_decay, .initial_accumulator_value = r->init_acc,
                         .momentum_input = r->momentum_input, .no_decay = r->no_decay,
                         .clip_grad_value = r->clip_value, .rho = r->rho, .momentum_decay = r->momentum_decay,
                         .decoupled_weight_decay = r->decoupled};
}

static const char *precision; /* compile_step's, NULL: f32 */

static dlc_model *compile_step(const char *text, const char *backend, const dlc_optimizer *o) {
  dlc_options opt = {.backend = backend, .grad = 1, .optimizer = o, .precision = precision};
  dlc_model *m = NULL;
  ck_assert_msg(dlc_compile_string("m.dl", text, &opt, &m) == DLC_OK, "%s: %s", backend, dlc_error(m));
  ck_assert_int_eq(dlc_init_weights(m, 5), DLC_OK);
  return m;
}

static void set_floats(dlc_model *m, const char *name, const float *v, int n) {
  ck_assert_msg(dlc_set_input(m, name, v, (size_t)n * sizeof(float)) == DLC_OK, "%s", dlc_error(m));
}

static float tolerance = 1e-5f; /* of 1 + |want| */

static void expect_weight(dlc_model *m, const char *what, const char *name, const float *want, int n) {
  float *got = malloc((size_t)n * sizeof *got);
  ck_assert_msg(dlc_get_weight(m, name, got, (size_t)n * sizeof *got) == DLC_OK, "%s", dlc_error(m));
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabsf(got[i] - want[i]) <= tolerance * (1 + fabsf(want[i])), "%s: %s[%d]: dlcc %.9g, want %.9g",
                  what, name, i, got[i], want[i]);
  free(got);
}

/* ref_runs[_i] on backend: 3 steps from the NumPy initial weights. */
static void check_run(int i, const char *backend) {
  const RefRun *r = &ref_runs[i];
  bool is_mlp = strcmp(r->model, "mlp") == 0;
  dlc_optimizer o = optimizer_of(r);
  dlc_model *m = compile_step(is_mlp ? mlp : cnn, backend, &o);
  for (const RefTensor *t = is_mlp ? mlp_init : cnn_init; t->name; t++)
    ck_assert_msg(dlc_set_weight(m, t->name, t->v, (size_t)t->n * sizeof(float)) == DLC_OK, "%s", dlc_error(m));
  for (int s = 0; s < 3; s++) {
    set_floats(m, "x", (is_mlp ? mlp_x : cnn_x)[s], is_mlp ? 24 : 200);
    set_floats(m, "t", (is_mlp ? mlp_t : cnn_t)[s], 12);
    set_floats(m, OPTIM_LR_INPUT, &r->lr[s], 1);
    if (r->momentum_input) set_floats(m, OPTIM_MOMENTUM_INPUT, &r->moms[s], 1);
    ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  }
  char what[96];
  snprintf(what, sizeof what, "%s %s on %s", r->model, r->name, backend);
  for (const RefTensor *t = r->final; t->name; t++) expect_weight(m, what, t->name, t->v, t->n);
  float steps = 3;
  expect_weight(m, what, OPTIM_STEP_PARAM, &steps, 1);
  dlc_free(m);
}

static int ref_run(const char *model_and_name) {
  for (int i = 0; i < (int)ARRAY_LEN(ref_runs); i++) {
    const RefRun *r = &ref_runs[i];
    size_t n = strlen(r->model);
    if (strncmp(model_and_name, r->model, n) == 0 && model_and_name[n] == ' ' &&
        strcmp(model_and_name + n + 1, r->name) == 0)
      return i;
  }
  ck_abort_msg("no run '%s' in train_ref.h", model_and_name);
  return -1;
}

START_TEST(test_numpy_ref) { check_run(_i, "ref"); }
END_TEST

static float *weight_of(dlc_model *m, const char *name, int n) {
  float *v = malloc((size_t)n * sizeof *v);
  ck_assert_msg(dlc_get_weight(m, name, v, (size_t)n * sizeof *v) == DLC_OK, "%s", dlc_error(m));
  return v;
}

/* Every weight and state after 5 runs on emu (read back from the device)
 * equal to 5 interpreter steps; the batch norm's running statistics too. */
START_TEST(test_emu_equals_ref) {
  dlc_optimizer o;
  ck_assert_int_eq(dlc_optimizer_defaults("adamw", &o), DLC_OK);
  o.clip_grad_norm = 1;
  dlc_model *ref = compile_step(cnn, "ref", &o), *emu = compile_step(cnn, "emu", &o);
  static const char *const names[] = {"conv1.weight", "bn1.weight", "bn1.running_var", "fc.bias",
                                      "dlcc.optim.conv1.weight.exp_avg", "dlcc.optim.fc.weight.exp_avg_sq",
                                      OPTIM_STEP_PARAM};
  static const int sizes[] = {54, 3, 3, 3, 54, 9, 1};
  /* dlc_init_weights starts every dlcc.* param at 0 */
  float *zero = weight_of(emu, "dlcc.optim.conv1.weight.exp_avg", 54);
  for (int i = 0; i < 54; i++) ck_assert(zero[i] == 0);
  free(zero);
  for (int s = 0; s < 5; s++) {
    float lr = 0.02f;
    for (int k = 0; k < 2; k++) {
      dlc_model *m = k ? emu : ref;
      set_floats(m, "x", cnn_x[s % 3], 200);
      set_floats(m, "t", cnn_t[s % 3], 12);
      set_floats(m, OPTIM_LR_INPUT, &lr, 1);
      ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
    }
  }
  for (size_t i = 0; i < ARRAY_LEN(names); i++) {
    float *want = weight_of(ref, names[i], sizes[i]);
    expect_weight(emu, "5 steps on emu", names[i], want, sizes[i]);
    free(want);
  }
  float five = 5;
  expect_weight(emu, "5 steps on emu", OPTIM_STEP_PARAM, &five, 1);
  ck_assert_int_eq(dlc_get_weight(emu, "fc.weights", &five, sizeof five), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_error(emu), "dlcc: error: the model has no weight 'fc.weights'\n");
  ck_assert_int_eq(dlc_set_weight(ref, "fc.bias", &five, sizeof five), DLC_ERR_ARGUMENT);
  ck_assert_str_eq(dlc_error(ref), "dlcc: error: weight 'fc.bias' is f32[3] (12 bytes), got 4 bytes\n");
  dlc_free(ref);
  dlc_free(emu);
}
END_TEST

static Graph *step_graph(Ctx *c, const char *text, const OptimSpec *o) {
  const SrcFile *f = ctx_add_file(c, "m.dl", text, strlen(text));
  Program *p = fe_parse(c, f);
  LowerOptions lo = {.training = true};
  Graph *g = p ? fe_lower(c, p, &lo) : NULL;
  ck_assert_msg(g && ir_verify(g) && pass_autodiff(g, NULL) && ir_verify(g), "%s", diag_text(c));
  ck_assert_msg(pass_append_optimizer(g, o) && ir_verify(g), "%s", diag_text(c));
  return g;
}

static void expect_refused(const RtPlan *p, const RtStep *steps, const char *want) {
  RtPlan bad = *p;
  bad.steps = steps;
  char err[512];
  ck_assert_int_eq(rt_plan_validate(&bad, err, sizeof err), -1);
  ck_assert_msg(strstr(err, want) != NULL, "got \"%s\", want \"%s\"", err, want);
}

static int optim_launches(const RtPlan *p) {
  int count = 0;
  for (uint32_t i = 0; i < p->n_steps; i++)
    count += p->steps[i].kind == RT_STEP_LAUNCH &&
             strncmp(p->kernels[p->steps[i].launch.kernel].name, "optim_update", 12) == 0;
  return count;
}

/* Outputs that update a param: how many, and how many live in its bytes. */
static int updates_in_place(const Graph *g, const RtPlan *p, int *updates) {
  int in_place = 0;
  *updates = 0;
  for (int i = 0; i < g->n_outputs; i++) {
    if (!ir_output_update(g, i)) continue;
    (*updates)++;
    in_place += p->outputs[i].where.space == RT_SPACE_WEIGHTS;
  }
  return in_place;
}

/* Every param's update in one launch, however many params, written over
 * the params (no copy after it), or with --no-update-in-place one copy
 * per update. */
START_TEST(test_one_launch) {
  static const char deep[] =
      "model deep(x: f32[4, 6], t: f32[4, 3]) -> f32[] {\n"
      "  h = relu(linear(x, 5) as fc1)\n"
      "  h = relu(linear(h, 5) as fc2)\n"
      "  h = relu(linear(h, 5) as fc3)\n"
      "  h = relu(linear(h, 5) as fc4)\n"
      "  return -mean(sum(log_softmax(linear(h, 3) as fc5, axis=-1) * t, axis=1))\n"
      "}\n";
  for (int kind = 0; kind < OPTIM_COUNT; kind++)
    for (int model = 0; model < 2; model++) {
      Ctx c;
      ctx_init(&c);
      OptimSpec o = optim_spec_default((OptimKind)kind);
      if (kind == OPTIM_SGD || kind == OPTIM_RMSPROP) o.momentum = 0.9;
      Graph *g = step_graph(&c, model ? deep : mlp, &o);
      /* each param and its states, the step counter, NAdam's mu_product */
      int want = (model ? 10 : 4) * (kind == OPTIM_SGD || kind == OPTIM_ADAGRAD ? 2 : 3) + 1 + (kind == OPTIM_NADAM);
      int updates;
      for (int copies = 0; copies < 2; copies++) {
        CgResult cg;
        ck_assert_msg(cg_compile_opts(g, &(CgOptions){.no_update_in_place = copies}, &cg), "%s", diag_text(&c));
        ck_assert_int_eq(optim_launches(cg.plan), 1);
        if (model) test_nvrtc(cg.source, "sm_90");
        ck_assert_int_eq(updates_in_place(g, cg.plan, &updates), copies ? 0 : want);
        ck_assert_int_eq(updates, want);
        ck_assert_int_eq(cg.plan->n_update_steps, copies ? want : 0);
        char err[512];
        ck_assert_msg(rt_plan_validate(cg.plan, err, sizeof err) == 0, "%s", err);
      }
      ctx_free(&c);
    }
}
END_TEST

/* The plan ends with one copy per update output into its weight; the
 * validator refuses an update that is not exactly one weight. */
START_TEST(test_plan_updates) {
  Ctx c;
  ctx_init(&c);
  OptimSpec o = optim_spec_default(OPTIM_ADAM);
  Graph *g = step_graph(&c, mlp, &o);
  int updates = 0;
  for (int i = 0; i < g->n_outputs; i++) updates += ir_output_update(g, i) != NULL;
  ck_assert_int_eq(updates, 4 * 3 + 1); /* 4 params, 2 moments each, the step counter */
  CgResult cg;
  ck_assert_msg(cg_compile_opts(g, &(CgOptions){.no_update_in_place = true}, &cg), "%s", diag_text(&c));
  const RtPlan *p = cg.plan;
  ck_assert_int_eq(p->n_update_steps, updates);
  char err[512];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  RtStep *steps = malloc(p->n_steps * sizeof *steps);
  memcpy(steps, p->steps, p->n_steps * sizeof *steps);
  RtStep *last = &steps[p->n_steps - 1];
  ck_assert_int_eq(last->kind, RT_STEP_COPY);
  ck_assert_int_eq(last->copy.dst.space, RT_SPACE_WEIGHTS);
  last->copy.dst.offset += 4;
  expect_refused(p, steps, "is not exactly one weight's bytes");
  last->copy = steps[p->n_steps - 2].copy;
  expect_refused(p, steps, "is updated twice");
  /* a plain step may still not write WEIGHTS */
  RtPlan fewer = *p;
  fewer.n_update_steps = 0;
  ck_assert_int_eq(rt_plan_validate(&fewer, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "writes into WEIGHTS, which the model only reads"), "%s", err);
  free(steps);
  ctx_free(&c);
}
END_TEST

/* Steps run on emu with every update in place and with every update
 * copied: the weights after three steps and every output (state read
 * back from the device) are the same bits, and an update output reads
 * as its param's new value. */
static void run_steps(const RtPlan *p, uint8_t **weights, uint8_t **outputs) {
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(p, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  srand(7);
  for (uint32_t w = 0; w < p->n_weights; w++) {
    const RtTensorDesc *d = &p->weights[w];
    float *v = calloc(d->nbytes / 4 + 1, sizeof *v);
    for (uint64_t i = 0; strncmp(d->name, "dlcc.", 5) != 0 && i < d->nbytes / 4; i++)
      v[i] = (float)rand() / RAND_MAX - 0.5f;
    ck_assert_int_eq(dlrt_set_weight(m, d->name, v, d->nbytes), DLRT_OK);
    free(v);
  }
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    const RtTensorDesc *d = &p->inputs[i];
    float *v = malloc(d->nbytes + 4);
    for (uint64_t k = 0; k < d->nbytes / 4; k++) v[k] = 0.1f * ((float)rand() / RAND_MAX);
    ck_assert_int_eq(dlrt_set_input(m, (int)i, v, d->nbytes), DLRT_OK);
    free(v);
  }
  for (int step = 0; step < 3; step++) ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_str_eq(dlrt_backend(m), "emu");
  for (uint32_t w = 0; w < p->n_weights; w++) {
    weights[w] = malloc(p->weights[w].nbytes + 1);
    ck_assert_int_eq(dlrt_get_weight(m, p->weights[w].name, weights[w], p->weights[w].nbytes), DLRT_OK);
  }
  for (uint32_t i = 0; i < p->n_outputs; i++) {
    outputs[i] = malloc(p->outputs[i].nbytes + 1);
    ck_assert_msg(dlrt_get_output(m, (int)i, outputs[i], p->outputs[i].nbytes) == DLRT_OK, "%s", dlrt_error(m));
  }
  dlrt_close(m);
}

START_TEST(test_in_place_equals_copies) {
  Ctx c;
  ctx_init(&c);
  OptimSpec o = optim_spec_default(OPTIM_ADAM);
  o.weight_decay = 0.01;
  Graph *g = step_graph(&c, cnn, &o);
  uint8_t **w[2], **out[2];
  const RtPlan *plans[2];
  for (int copies = 0; copies < 2; copies++) {
    CgResult cg;
    ck_assert_msg(cg_compile_opts(g, &(CgOptions){.no_update_in_place = copies}, &cg), "%s", diag_text(&c));
    plans[copies] = cg.plan;
    /* Unfused (no pass pipeline here), batchnorm's running statistics
     * are a chain of kernels whose last does not read the param: in
     * place all the same, every read of the old value being before it. */
    int updates, in_place = updates_in_place(g, cg.plan, &updates);
    ck_assert_int_eq(updates, 18); /* 4 params and their moments, 2 running statistics, the step */
    if (copies) ck_assert_int_eq(in_place, 0);
    else ck_assert_int_eq(in_place, 18);
    w[copies] = calloc(cg.plan->n_weights + 1, sizeof *w[copies]);
    out[copies] = calloc(cg.plan->n_outputs + 1, sizeof *out[copies]);
    run_steps(cg.plan, w[copies], out[copies]);
  }
  const RtPlan *p = plans[0];
  ck_assert_int_eq(p->n_weights, plans[1]->n_weights);
  for (uint32_t i = 0; i < p->n_weights; i++)
    ck_assert_msg(memcmp(w[0][i], w[1][i], p->weights[i].nbytes) == 0, "weight '%s'", p->weights[i].name);
  int checked = 0;
  for (uint32_t i = 0; i < p->n_outputs; i++) {
    ck_assert_msg(memcmp(out[0][i], out[1][i], p->outputs[i].nbytes) == 0, "output '%s'", p->outputs[i].name);
    const char *param = ir_output_update(g, (int)i);
    for (uint32_t k = 0; param && k < p->n_weights; k++)
      if (strcmp(p->weights[k].name, param) == 0) {
        for (int copies = 0; copies < 2; copies++)
          ck_assert_msg(memcmp(out[copies][i], w[copies][k], p->weights[k].nbytes) == 0, "output '%s' (copies %d)",
                        p->outputs[i].name, copies);
        checked++;
      }
    free(out[0][i]), free(out[1][i]);
  }
  ck_assert_int_gt(checked, 10);
  for (uint32_t i = 0; i < p->n_weights; i++) free(w[0][i]), free(w[1][i]);
  for (int k = 0; k < 2; k++) free(w[k]), free(out[k]);
  ctx_free(&c);
}
END_TEST

/* An update that a later step's read of the old value forbids, or whose
 * writer reads the param other than element for element, is copied; the
 * one beside it with neither goes in place. */
START_TEST(test_in_place_refused) {
  static const char text[] =
      "graph g {\n"
      "  %0 = input {name=\"x\"} : f32[4]\n"
      "  %1 = param {name=\"p\"} : f32[4]\n"
      "  %2 = param {name=\"q\"} : f32[4]\n"
      "  %3 = param {name=\"r\"} : f32[2, 2]\n"
      "  %4 = add %1, %0 : f32[4]\n"
      "  %5 = mul %1, %0 : f32[4]\n"
      "  %6 = add %2, %0 : f32[4]\n"
      "  %7 = transpose %3 {perm=[1, 0]} : f32[2, 2]\n"
      "  return %4 as \"p.new\" updates \"p\", %5 as \"late\", %6 as \"q.new\" updates \"q\", "
      "%7 as \"r.new\" updates \"r\"\n"
      "}\n";
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "u.ir", text, strlen(text)));
  ck_assert_msg(g, "%s", diag_text(&c));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  const RtPlan *p = cg.plan;
  ck_assert_int_eq(p->outputs[0].where.space, RT_SPACE_OUTPUT); /* %5 reads p after %4 */
  ck_assert_int_eq(p->outputs[2].where.space, RT_SPACE_WEIGHTS);
  ck_assert_int_eq(p->outputs[3].where.space, RT_SPACE_OUTPUT); /* a transpose reads across elements */
  ck_assert_int_eq(p->n_update_steps, 2);
  char err[512];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(p, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  float x[4] = {1, 2, 3, 4}, pv[4] = {5, 6, 7, 8}, qv[4] = {-1, -2, -3, -4}, rv[4] = {1, 2, 3, 4}, got[4];
  ck_assert_int_eq(dlrt_set_weight(m, "p", pv, sizeof pv), DLRT_OK);
  ck_assert_int_eq(dlrt_set_weight(m, "q", qv, sizeof qv), DLRT_OK);
  ck_assert_int_eq(dlrt_set_weight(m, "r", rv, sizeof rv), DLRT_OK);
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_get_output(m, 1, got, sizeof got), DLRT_OK);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(got[i], pv[i] * x[i]); /* the old p */
  ck_assert_int_eq(dlrt_get_weight(m, "p", got, sizeof got), DLRT_OK);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(got[i], pv[i] + x[i]);
  ck_assert_int_eq(dlrt_get_output(m, 2, got, sizeof got), DLRT_OK);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(got[i], qv[i] + x[i]);
  ck_assert_int_eq(dlrt_get_weight(m, "r", got, sizeof got), DLRT_OK);
  ck_assert(got[0] == 1 && got[1] == 3 && got[2] == 2 && got[3] == 4);
  /* an output in place is the weight: it cannot be bound elsewhere */
  ck_assert_int_eq(dlrt_bind_output(m, 2, (uint64_t)(uintptr_t)got), DLRT_E_ARG);
  ck_assert_str_eq(dlrt_error(m), "bind_output 'q.new': it is a weight the run updates in place, so it cannot be bound");
  dlrt_close(m);
  ctx_free(&c);
}
END_TEST

/* In place, an update output's desc is exactly its weight's bytes, and
 * only those weights may be written by a run's steps. */
START_TEST(test_plan_updates_in_place) {
  Ctx c;
  ctx_init(&c);
  OptimSpec o = optim_spec_default(OPTIM_ADAM);
  Graph *g = step_graph(&c, mlp, &o);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  const RtPlan *p = cg.plan;
  int updates;
  ck_assert_int_eq(updates_in_place(g, p, &updates), updates);
  ck_assert_int_eq(p->n_update_steps, 0);
  char err[512];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  int first = -1, second = -1;
  for (int i = 0; i < g->n_outputs && second < 0; i++)
    if (ir_output_update(g, i)) *(first < 0 ? &first : &second) = i;
  ck_assert_int_ge(second, 0);
  RtTensorDesc *outs = malloc(p->n_outputs * sizeof *outs);
  RtPlan bad = *p;
  bad.outputs = outs;
  memcpy(outs, p->outputs, p->n_outputs * sizeof *outs);
  outs[first].where.offset += 4;
  ck_assert_int_eq(rt_plan_validate(&bad, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "which is not exactly one weight's bytes"), "%s", err);
  memcpy(outs, p->outputs, p->n_outputs * sizeof *outs);
  outs[second].where = outs[first].where;
  outs[second].nbytes = outs[first].nbytes;
  memcpy(outs[second].dims, outs[first].dims, sizeof outs[first].dims);
  outs[second].rank = outs[first].rank;
  ck_assert_int_eq(rt_plan_validate(&bad, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "is updated twice"), "%s", err);
  /* back in OUTPUT, its weight is no longer the run's to write */
  memcpy(outs, p->outputs, p->n_outputs * sizeof *outs);
  outs[first].where = (RtRef){.space = RT_SPACE_OUTPUT, .index = (uint32_t)first};
  ck_assert_int_eq(rt_plan_validate(&bad, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "writes into WEIGHTS, which the model only reads"), "%s", err);
  free(outs);
  ctx_free(&c);
}
END_TEST

static void expect_spec_error(const OptimSpec *o, const char *want) {
  Ctx c;
  ctx_init(&c);
  const SrcFile *f = ctx_add_file(&c, "m.dl", mlp, strlen(mlp));
  Program *p = fe_parse(&c, f);
  LowerOptions lo = {.training = true};
  Graph *g = fe_lower(&c, p, &lo);
  ck_assert(g && pass_autodiff(g, NULL));
  ck_assert(!pass_append_optimizer(g, o));
  ck_assert_msg(strstr(diag_text(&c), want), "got \"%s\", want \"%s\"", diag_text(&c), want);
  ctx_free(&c);
}

START_TEST(test_spec_errors) {
  OptimSpec o = optim_spec_default(OPTIM_SGD);
  o.nesterov = true;
  expect_spec_error(&o, "error: sgd: nesterov needs a momentum and zero dampening");
  o = optim_spec_default(OPTIM_ADAMW);
  o.beta2 = 1;
  expect_spec_error(&o, "error: adamw: betas must be in [0, 1)");
  OptimKind k;
  ck_assert(!optim_from_name("lion", &k));
  o = optim_spec_default(OPTIM_SGD);
  o.clip_grad_norm = 1, o.clip_grad_value = 0.5;
  expect_spec_error(&o, "error: sgd: clip_grad_value and clip_grad_norm both clip: choose one");
  o = optim_spec_default(OPTIM_ADAMW);
  o.no_decay = "fc1.bias,*.bais";
  expect_spec_error(&o, "error: no_decay: '*.bais' matches no trainable parameter of the model");
  dlc_optimizer bad = {.kind = "lion"};
  dlc_options opt = {.backend = "ref", .grad = 1, .optimizer = &bad};
  dlc_model *m = NULL;
  ck_assert_int_eq(dlc_compile_string("m.dl", mlp, &opt, &m), DLC_ERR_COMPILE);
  ck_assert_msg(strstr(dlc_error(m), "unknown optimizer 'lion' (expected sgd, adam, adamw, rmsprop, adagrad, adamax, "
                                       "adadelta, radam or nadam)"), "%s",
                dlc_error(m));
  dlc_free(m);
}
END_TEST

/* check_run's four steps on emu at precision p, within tol of the f32
 * trajectory. */
static void check_run_at(const char *p, float tol) {
  precision = p;
  tolerance = tol;
  check_run(ref_run("mlp adamw"), "emu");
  precision = NULL;
  tolerance = 1e-5f;
}

/* bf16 compute with f32 master weights: the params and state stay f32
 * in WEIGHTS and the trajectory stays within bf16's error of the f32
 * one (AdamW on the MLP, lr 0.01: 1e-3). */
START_TEST(test_bf16_master_weights) { check_run_at("bf16", 1e-3f); }
END_TEST

/* f16 with dynamic loss scaling (GradScaler): AdamW on the MLP within
 * 1e-3 of the f32 trajectory, no step skipped at the initial 65536 (3
 * steps counted, 3 clean steps tracked, the scale unchanged). */
START_TEST(test_f16_loss_scaled_trajectory) { check_run_at("f16", 1e-3f); }
END_TEST

static float weight1(dlc_model *m, const char *name) {
  float v;
  ck_assert_msg(dlc_get_weight(m, name, &v, sizeof v) == DLC_OK, "%s", dlc_error(m));
  return v;
}

static void set_weight1(dlc_model *m, const char *name, float v) {
  ck_assert_msg(dlc_set_weight(m, name, &v, sizeof v) == DLC_OK, "%s", dlc_error(m));
}

/* One step of the MLP on x filled with v; then the scale, the clean
 * steps counted and the optimizer's step count as GradScaler's rules
 * give them (docs/training.md): want[0..2]. */
static void amp_step(dlc_model *m, float v, const float want[3]) {
  float x[24], lr = 0.01f;
  for (int i = 0; i < 24; i++) x[i] = v * mlp_x0[i];
  set_floats(m, "x", x, 24);
  set_floats(m, "t", mlp_t0, 12);
  set_floats(m, OPTIM_LR_INPUT, &lr, 1);
  ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  ck_assert_msg(weight1(m, AMP_SCALE_PARAM) == want[0], "scale %g, want %g", weight1(m, AMP_SCALE_PARAM), want[0]);
  ck_assert_msg(weight1(m, AMP_GROWTH_PARAM) == want[1], "clean steps %g, want %g", weight1(m, AMP_GROWTH_PARAM),
                want[1]);
  ck_assert_msg(weight1(m, OPTIM_STEP_PARAM) == want[2], "step %g, want %g", weight1(m, OPTIM_STEP_PARAM), want[2]);
}

/* A huge input (f16's inf, so NaN gradients) skips the step: every
 * param and its Adam state as before, the step count too, the scale
 * halved and the count of clean steps restarted; the 2000th clean step
 * in a row doubles the scale.  On ref and emu alike. */
START_TEST(test_f16_overflow_skips) {
  static const char *const backends[] = {"ref", "emu"};
  dlc_optimizer o;
  ck_assert_int_eq(dlc_optimizer_defaults("adamw", &o), DLC_OK);
  precision = "f16";
  dlc_model *m = compile_step(mlp, backends[_i], &o);
  precision = NULL;
  ck_assert(weight1(m, AMP_SCALE_PARAM) == 65536); /* GradScaler's init_scale */
  amp_step(m, 1, (const float[]){65536, 1, 1});
  float *w = weight_of(m, "fc1.weight", 30), *avg = weight_of(m, "dlcc.optim.fc1.weight.exp_avg", 30);
  amp_step(m, 1e30f, (const float[]){32768, 0, 1});
  float *w2 = weight_of(m, "fc1.weight", 30), *avg2 = weight_of(m, "dlcc.optim.fc1.weight.exp_avg", 30);
  ck_assert(memcmp(w, w2, 30 * sizeof *w) == 0 && memcmp(avg, avg2, 30 * sizeof *avg) == 0);
  amp_step(m, 1e30f, (const float[]){16384, 0, 1});
  amp_step(m, 1, (const float[]){16384, 1, 2});
  set_weight1(m, AMP_GROWTH_PARAM, 1998);
  amp_step(m, 1, (const float[]){16384, 1999, 3});
  amp_step(m, 1, (const float[]){32768, 0, 4});
  free(w), free(w2), free(avg), free(avg2);
  dlc_free(m);
}
END_TEST

/* 1 - beta^t as exact as double makes it (PyTorch's): within 2 ulps
 * of f32 where 1 - powf(beta, t) is 1.3e-5 off for beta2 = 0.999 at t = 1. */
START_TEST(test_bias_correction) {
  static const double betas[] = {0, 0.5, 0.9, 0.98, 0.99, 0.999, 0.9999, 0.99999};
  static const float steps[] = {1, 2, 3, 10, 100, 1000, 12345, 1e6f, 1.6e7f};
  for (size_t i = 0; i < ARRAY_LEN(betas); i++)
    for (size_t j = 0; j < ARRAY_LEN(steps); j++) {
      double want = 1 - pow(betas[i], steps[j]);
      float got = ir_bias_correction(betas[i], steps[j]);
      ck_assert_msg(fabs(got - want) <= 2.4e-7 * want, "1 - %g^%g: %.9g, want %.9g", betas[i], steps[j], got, want);
    }
}
END_TEST

static const char *const both_backends[] = {"ref", "emu"};

/* One weight of 0.25 whose gradient stays 1, after `steps` steps of o at
 * rate 0.5 on backend. */
static float one_weight_after(const char *backend, const dlc_optimizer *o, int steps) {
  static const char one[] = "model one(x: f32[1, 1]) -> f32[] {\n  return sum(linear(x, 1, bias=false) as fc)\n}\n";
  dlc_model *m = compile_step(one, backend, o);
  float w = 0.25f, x = 1, lr = 0.5f;
  ck_assert_int_eq(dlc_set_weight(m, "fc.weight", &w, sizeof w), DLC_OK);
  for (int s = 0; s < steps; s++) {
    set_floats(m, "x", &x, 1);
    set_floats(m, OPTIM_LR_INPUT, &lr, 1);
    ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
  }
  ck_assert_int_eq(dlc_get_weight(m, "fc.weight", &w, sizeof w), DLC_OK);
  dlc_free(m);
  return w;
}

/* A gradient that stays 1: each Adam step moves the weight by lr / (1 +
 * eps) exactly (m and v are their own bias corrections), so 3 steps of
 * lr 0.5 move it by 1.5 to f32's rounding, on ref and on emu. */
START_TEST(test_adam_constant_gradient) {
  for (int amsgrad = 0; amsgrad < 2; amsgrad++)
    for (int b = 0; b < 2; b++) {
      dlc_optimizer o;
      ck_assert_int_eq(dlc_optimizer_defaults("adam", &o), DLC_OK);
      o.beta2 = amsgrad ? 0.9999 : 0.999;
      o.amsgrad = amsgrad;
      float w = one_weight_after(both_backends[b], &o, 3);
      ck_assert_msg(fabsf(w - -1.25f) <= 3e-7f, "%s, amsgrad %d: %.9g, want -1.25", both_backends[b], amsgrad, w);
    }
}
END_TEST

/* RAdam's rectification, which starts at step 6 (rho_t > 5): with a
 * gradient that stays 1 the bias-corrected moment is 1 and the adaptive
 * rate 1 / (1 + eps / sqrt(v)), so step t moves the weight by lr, or by
 * lr times the rectification term from step 6, on ref and emu. */
START_TEST(test_radam_rectified) {
  double rho_inf = 2 / (1 - 0.999) - 1, want = 0.25;
  for (int t = 1; t <= 8; t++) {
    double bc2 = 1 - pow(0.999, t), rho_t = rho_inf - 2 * t * pow(0.999, t) / bc2;
    double rect = sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
    want -= 0.5 * (rho_t > 5 ? rect / (1 + 1e-8 / sqrt(bc2)) : 1);
    ck_assert((rho_t > 5) == (t >= 6));
  }
  dlc_optimizer o;
  ck_assert_int_eq(dlc_optimizer_defaults("radam", &o), DLC_OK);
  for (int b = 0; b < 2; b++) {
    float w = one_weight_after(both_backends[b], &o, 8);
    ck_assert_msg(fabs(w - want) <= 2e-6, "%s: %.9g, want %.9g", both_backends[b], w, want);
  }
}
END_TEST

/* A pipeline stage's no_decay names its params exactly whatever their
 * characters (an ONNX model's): each name's pattern, joined into one
 * list and split again, matches that name and no other. */
START_TEST(test_exact_name_patterns) {
  static const char *const names[] = {"fc.bias", "a,b", "w[0]", "x*y", "q?", "back\\slash", "a", "b"};
  enum { N = sizeof names / sizeof names[0] };
  Ctx c;
  ctx_init(&c);
  const char *list = "";
  for (int i = 0; i < N; i++)
    list = arena_printf(&c.arena, "%s%s%s", list, i ? "," : "", pass_name_pattern(&c.arena, names[i]));
  const char **pats;
  ck_assert_int_eq(pass_split_names(&c.arena, list, &pats), N);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++)
      ck_assert_msg(pass_name_matches(&pats[i], 1, names[j]) == (i == j), "pattern '%s' and name '%s'", pats[i],
                    names[j]);
  /* the lists a user gives split as before: a last comma adds nothing */
  ck_assert_int_eq(pass_split_names(&c.arena, "fc1.*,", &pats), 1);
  ck_assert_int_eq(pass_split_names(&c.arena, ",fc1.*", &pats), 2);
  ck_assert_str_eq(pats[0], "");
  ctx_free(&c);
}
END_TEST

/* optim_update's shape rule, on IR text. */
static void expect_ir_error(const char *op_line, const char *want) {
  Ctx c;
  ctx_init(&c);
  char text[1024];
  snprintf(text, sizeof text,
           "graph g {\n"
           "  %%0 = param {name=\"w\"} : f32[3]\n"
           "  %%1 = input {name=\"g\"} : f32[3]\n"
           "  %%2 = input {name=\"lr\"} : f32[]\n"
           "  %%3 = param {name=\"m\"} : f32[3]\n"
           "  %s\n"
           "  return %%4 as \"w\"\n"
           "}\n",
           op_line);
  const SrcFile *f = ctx_add_file(&c, "t.ir", text, strlen(text));
  Graph *g = ir_parse(&c, f);
  ck_assert(!g || !ir_verify(g));
  ck_assert_msg(strstr(diag_text(&c), want), "got \"%s\", want \"%s\"", diag_text(&c), want);
  ctx_free(&c);
}

START_TEST(test_optim_update_shape) {
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3 {kind=\"adam\"} : f32[3], f32[3], f32[3], "
                  "f32[]",
                  "optim_update: adam takes 7 operands (p, g, lr, t, scale, exp_avg, exp_avg_sq), got 6");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3, %3 {kind=\"adam\", amsgrad=1} : f32[3], "
                  "f32[3], f32[3], f32[3]",
                  "optim_update: adam takes 8 operands (p, g, lr, t, scale, exp_avg, exp_avg_sq, max_exp_avg_sq), "
                  "got 7");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3 {kind=\"rmsprop\", centered=1} : f32[3], "
                  "f32[3], f32[3], f32[]",
                  "optim_update: rmsprop takes 7 operands (p, g, lr, t, scale, square_avg, grad_avg), got 6");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3 {kind=\"sgd\", momentum=0.9, "
                  "momentum_input=1} : f32[3], f32[3], f32[], f32[]",
                  "optim_update: sgd takes 7 operands (p, g, lr, t, scale, momentum, momentum_buffer), got 6");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3, %3 {kind=\"sgd\", momentum=0.9, "
                  "momentum_input=1} : f32[3], f32[3], f32[], f32[]",
                  "optim_update: operand 6 must be f32[], got f32[3]");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %1 {kind=\"sgd\"} : f32[3], f32[], f32[], f32[]",
                  "optim_update: operand 5 must be f32[], got f32[3]");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3, %3 {kind=\"adam\", decoupled=1} : "
                  "f32[3], f32[3], f32[3], f32[]",
                  "optim_update: decoupled is radam's and nadam's (adam: adamw is adam's)");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %2, %3 {kind=\"adagrad\", momentum_input=1} : "
                  "f32[3], f32[3], f32[], f32[]",
                  "optim_update: adagrad has neither a momentum nor a beta1 to take as momentum_input");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2 {kind=\"lion\"} : f32[3], f32[], f32[], f32[]",
                  "optim_update: kind must be \"sgd\", \"adam\", \"adamw\", \"rmsprop\", \"adagrad\", \"adamax\", "
                  "\"adadelta\", \"radam\" or \"nadam\", got \"lion\"");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %2, %3, %3 {kind=\"nadam\", momentum_input=1} : "
                  "f32[3], f32[3], f32[3], f32[]",
                  "optim_update: nadam takes 9 operands (p, g, lr, t, scale, momentum, mu_product, exp_avg, "
                  "exp_avg_sq), got 8");
  expect_ir_error("%4, %5, %6, %7 = optim_update %0, %1, %2, %2, %2, %3, %3 {kind=\"nadam\"} : "
                  "f32[3], f32[3], f32[3], f32[]",
                  "optim_update: nadam takes 8 operands (p, g, lr, t, scale, mu_product, exp_avg, exp_avg_sq), got 7");
}
END_TEST

/* The runs emu checks: every option on the MLP, and each kind on the CNN. */
static const char *const emu_runs[] = {
    "mlp sgd",          "mlp sgd_momentum",     "mlp sgd_nesterov",  "mlp adamw",      "mlp sgd_clip",
    "mlp adam_amsgrad", "mlp adamw_amsgrad_maximize", "mlp rmsprop", "mlp rmsprop_centered",
    "mlp rmsprop_momentum", "mlp adagrad",      "mlp adagrad_decay", "mlp sgd_maximize", "cnn sgd_momentum",
    "cnn adam",         "cnn adamw",            "cnn rmsprop_centered", "cnn adagrad_decay", "mlp sgd_momentum_input",
    "mlp adam_beta1_input", "mlp rmsprop_momentum_input", "cnn adam_beta1_input", "mlp adamw_no_decay",
    "cnn sgd_no_decay", "mlp sgd_clip_value", "cnn adam_clip_value", "mlp adamax_maximize", "cnn adamax",
    "mlp adadelta", "cnn adadelta_rho", "mlp radam_decoupled", "cnn radam", "mlp nadam", "cnn nadam_decoupled",
    "mlp adamax_beta1_input", "cnn radam_beta1_input", "mlp nadam_beta1_input", "cnn nadam_beta1_input"};

START_TEST(test_numpy_emu_some) { check_run(ref_run(emu_runs[_i]), "emu"); }
END_TEST

static Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *t = tcase_create("optim");
  tcase_set_timeout(t, 300);
  tcase_add_loop_test(t, test_numpy_ref, 0, (int)ARRAY_LEN(ref_runs));
  tcase_add_loop_test(t, test_numpy_emu_some, 0, (int)ARRAY_LEN(emu_runs));
  tcase_add_test(t, test_plan_updates_in_place);
  tcase_add_test(t, test_in_place_equals_copies);
  tcase_add_test(t, test_in_place_refused);
  tcase_add_test(t, test_emu_equals_ref);
  tcase_add_test(t, test_plan_updates);
  tcase_add_test(t, test_one_launch);
  tcase_add_test(t, test_spec_errors);
  tcase_add_test(t, test_optim_update_shape);
  tcase_add_test(t, test_bias_correction);
  tcase_add_test(t, test_exact_name_patterns);
  tcase_add_test(t, test_adam_constant_gradient);
  tcase_add_test(t, test_radam_rectified);
  tcase_add_test(t, test_bf16_master_weights);
  tcase_add_test(t, test_f16_loss_scaled_trajectory);
  tcase_add_loop_test(t, test_f16_overflow_skips, 0, 2);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(optim_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
