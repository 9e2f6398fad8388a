/* ONNX If and Loop decided at run time (frontend/onnx_control.c): takes models
 * built here with protobuf-c, checks the reference interpreter and the
 * generated kernels on emu against each other and against numbers worked
 * out here.  A branch that cannot be imported at the model's shapes
 * becomes a check: the other branch runs, and a run whose condition picks
 * the refused one fails with one exact message on both; both branches
 * refused is an import error with both reasons. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "onnxbuild.h"
#include "passes/pass.h"
#include "runtime/device.h"
#include "runtime/runtime.h"
#include "tests/testutil.h"

#define ctx onnxb_ctx
#define params onnxb_params

/* A branch of no inputs giving out: 2x, or x reshaped to [2], which x
 * (f32[3], from the outer graph) cannot be. */
static Model *branch(bool bad, const char *out) {
  Model *m = model_new(17);
  if (bad) {
    add_init_i64(m, "two", 1, (const int64_t[]){2});
    add_node(m, "Reshape", "x,two", out);
  } else {
    add_node(m, "Add", "x,x", out);
  }
  add_output(m, out);
  return m;
}

/* y = If(c, then, else) of x f32[3] and c bool[1]. */
static Model *if_model(bool then_bad, bool else_bad) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){1});
  Onnx__NodeProto *n = add_node(b, "If", "c", "y");
  n->name = str("If_7");
  attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &branch(then_bad, "y1")->g;
  attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &branch(else_bad, "y2")->g;
  add_output(b, "y");
  return b;
}

static const float xs[3] = {1, -2, 4};

/* g run with condition c by the reference interpreter and on emu (when
 * emu starts here; the kernels compiled by NVRTC too): both succeed with
 * 2x, or both fail with the message want. */
static void expect_run(Graph *g, uint8_t c, const char *want) {
  Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                  {ir_type_make(TY_BOOL, 1, (const int64_t[]){1}), &c}};
  TensorMap inputs = {2, (const char *[]){"x", "c"}, in};
  Tensor y;
  char err[1024];
  bool ok = ir_eval(g, &inputs, &params, &y, err, sizeof err);
  if (want) {
    ck_assert_msg(!ok, "ir_eval ran the refused branch");
    ck_assert_str_eq(err, want);
  } else {
    ck_assert_msg(ok, "eval: %s", err);
    for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&y, i), 2 * xs[i]);
    ir_tensor_free(&y);
  }
  char why[256];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (!dev) return;
  rt_device_close(dev);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  test_nvrtc(cg.source, "sm_90");
  Tensor *out = NULL;
  int s = test_run_emu_status(cg.plan, &params, &inputs, &out, err, sizeof err);
  if (want) {
    ck_assert_int_eq(s, DLRT_E_CHECK);
    ck_assert_ptr_null(out);
    ck_assert_str_eq(err, want);
    return;
  }
  ck_assert_msg(s == DLRT_OK, "emu: %s", err);
  for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&out[0], i), 2 * xs[i]);
  ir_tensor_free(&out[0]);
  free(out);
}

static const char reshape_why[] = "node 0 'n0' (Reshape): reshape: cannot reshape f32[3] (3 elements) to [2] (2 elements)";

/* The refused branch is either one: the other runs, through a check. */
START_TEST(test_refused_branch_is_checked) {
  for (int bad_then = 0; bad_then < 2; bad_then++) {
    Graph *g = onnxb_import(if_model(bad_then, !bad_then), NULL);
    ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
    ck_assert_str_eq(diag_text(&ctx), "");
    ck_assert_int_eq(onnxb_count_op(g, OP_CHECK), 1);
    ck_assert_int_eq(onnxb_count_op(g, OP_WHERE), 0);
    char want[512];
    snprintf(want, sizeof want,
             "/tmp/model.onnx: node 0 'If_7' (If): the %s branch was chosen at run time but could not be "
             "compiled: %s",
             bad_then ? "then" : "else", reshape_why);
    expect_run(g, (uint8_t)!bad_then, NULL);
    expect_run(g, (uint8_t)bad_then, want);
  }
}
END_TEST

START_TEST(test_both_branches_refused) {
  ck_assert(onnxb_import(if_model(true, true), NULL) == NULL);
  char want[1024];
  snprintf(want, sizeof want,
           "dlcc: error: /tmp/model.onnx: node 0 'If_7' (If): neither branch can be compiled: then_branch: %s; "
           "else_branch: %s\n",
           reshape_why, reshape_why);
  ck_assert_str_eq(diag_text(&ctx), want);
}
END_TEST

/* ---- branches in the plan ---- */

/* A branch of no inputs: ops applied to x in turn ("Mul2": times the
 * outer graph's `two`), its last result named out. */
static Model *chain_branch(const char *const *ops, int n, const char *out) {
  Model *m = model_new(17);
  char prev[32] = "x", name[32];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, i == n - 1 ? "%s" : "%s_%d", out, i);
    char ins[80];
    snprintf(ins, sizeof ins, strcmp(ops[i], "Mul2") ? "%s" : "%s,two", prev);
    add_node(m, strcmp(ops[i], "Mul2") ? ops[i] : "Mul", ins, name);
    snprintf(prev, sizeof prev, "%s", name);
  }
  add_output(m, out);
  return m;
}

static void set_branches(Onnx__NodeProto *n, Model *t, Model *e) {
  attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &t->g;
  attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &e->g;
}

/* y = If(c, tanh(If(c2, relu(exp x), 2 sigmoid x)), relu(2 (-x))) of
 * x f32[4, 8]. */
static Model *nested_model(void) {
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){4, 8});
  add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
  add_input_typed(b, "c2", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){1});
  add_init_f32(b, "two", 0, NULL, 1, (const float[]){2});
  Model *t = model_new(17);
  set_branches(add_node(t, "If", "c2", "inner"), chain_branch((const char *[]){"Exp", "Relu"}, 2, "it"),
               chain_branch((const char *[]){"Sigmoid", "Mul2"}, 2, "ie"));
  add_node(t, "Tanh", "inner", "t_out");
  add_output(t, "t_out");
  set_branches(add_node(b, "If", "c", "y"), t, chain_branch((const char *[]){"Neg", "Mul2", "Relu"}, 3, "e"));
  add_output(b, "y");
  return b;
}

static double nested_want(double x, int c, int c2) {
  return c ? tanh(c2 ? fmax(exp(x), 0) : 2 / (1 + exp(-x))) : fmax(-2 * x, 0);
}

static int count_branches(const RtPlan *p) {
  int k = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) k += p->steps[i].kind == RT_STEP_BRANCH;
  return k;
}

/* The plan skips the branches not taken (four branch steps, the inner
 * ones inside the outer then's), and gives what the reference
 * interpreter and the compute-both plan (the same graph unguarded) give,
 * for every outcome of both conditions. */
START_TEST(test_nested_branches_in_the_plan) {
  Graph *g = onnxb_import(nested_model(), NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  CgResult cg, both;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  ck_assert_int_eq(count_branches(cg.plan), 4);
  char err[512];
  ck_assert_msg(rt_plan_validate(cg.plan, err, sizeof err) == 0, "%s", err);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cg_print_plan(f, cg.plan);
  fclose(f);
  ck_assert_msg(strstr(text, "branch unless in1+0 is true: skip 8 steps"), "%s", text);
  ck_assert_msg(strstr(text, "branch unless in2+0 is false: skip 2 steps"), "%s", text);
  free(text);
  for (Node *n = g->first; n; n = n->next) n->guard = NULL;
  ck_assert_msg(cg_compile(g, &both), "codegen: %s", diag_text(&ctx));
  ck_assert_int_eq(count_branches(both.plan), 0);
  float xv[32];
  uint64_t seed = 3;
  for (int i = 0; i < 32; i++) xv[i] = (float)((double)(test_splitmix64(&seed) >> 11) / (double)(1ull << 53) * 4 - 2);
  char why[256];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (dev) rt_device_close(dev);
  for (int c = 0; c < 2; c++)
    for (int c2 = 0; c2 < 2; c2++) {
      uint8_t cv = (uint8_t)c, c2v = (uint8_t)c2;
      Tensor in[3] = {{ir_type_make(TY_F32, 2, (const int64_t[]){4, 8}), xv},
                      {ir_type_make(TY_BOOL, 0, NULL), &cv},
                      {ir_type_make(TY_BOOL, 1, (const int64_t[]){1}), &c2v}};
      TensorMap inputs = {3, (const char *[]){"x", "c", "c2"}, in};
      Tensor y;
      ck_assert_msg(ir_eval(g, &inputs, &params, &y, err, sizeof err), "eval: %s", err);
      for (int i = 0; i < 32; i++) ck_assert_double_eq_tol(ir_tensor_get(&y, i), nested_want(xv[i], c, c2), 1e-6);
      if (dev) {
        Tensor *got = test_run_emu(cg.plan, &params, &inputs), *ref = test_run_emu(both.plan, &params, &inputs);
        for (int i = 0; i < 32; i++) {
          ck_assert_double_eq_tol(ir_tensor_get(&got[0], i), ir_tensor_get(&y, i), 1e-6);
          ck_assert_double_eq(ir_tensor_get(&got[0], i), ir_tensor_get(&ref[0], i));
        }
        ir_tensor_free(&got[0]), ir_tensor_free(&ref[0]);
        free(got), free(ref);
      }
      ir_tensor_free(&y);
    }
}
END_TEST

/* The loader refuses a branch that jumps past the steps, a condition
 * that is no bool, outside its input, or in OUTPUT. */
START_TEST(test_bad_branches_refused) {
  Graph *g = onnxb_import(nested_model(), NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  RtPlan p = *cg.plan;
  RtStep *steps = malloc(sizeof *steps * p.n_steps);
  p.steps = steps;
  static const struct {
    uint32_t skip, when, space, offset;
    const char *want;
  } cases[] = {
      {14, 1, RT_SPACE_INPUT, 0, "a branch skips 14 steps, past the last step before the updates (13 follow)"},
      {8, 2, RT_SPACE_INPUT, 0, "a branch taken when its condition is 2 (a bool is 0 or 1)"},
      {8, 1, RT_SPACE_INPUT, 1, "branch condition: offset 1 + 1 bytes is outside INPUT 1 (1 bytes)"},
      {8, 1, RT_SPACE_OUTPUT, 0, "a branch condition in OUTPUT, which steps only write"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    memcpy(steps, cg.plan->steps, sizeof *steps * p.n_steps);
    ck_assert_int_eq(steps[0].kind, RT_STEP_BRANCH);
    steps[0].branch.skip = cases[k].skip;
    steps[0].branch.when = cases[k].when;
    steps[0].branch.cond.space = cases[k].space;
    steps[0].branch.cond.offset = cases[k].offset;
    steps[0].branch.cond.index = cases[k].space == RT_SPACE_OUTPUT ? 0 : 1;
    char err[512];
    ck_assert_int_eq(rt_plan_validate(&p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "step 0 (exp %4 branch): ") && strstr(err, cases[k].want), "%s", err);
  }
  free(steps);
}
END_TEST

/* The branch not taken does not run: its gather of an index out of range
 * fails neither the reference interpreter nor emu, while the
 * compute-both plan reports it; taken, it fails both with the gather's
 * message. */
START_TEST(test_untaken_branch_does_not_run) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
  add_input_typed(b, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (const int64_t[]){3});
  Model *t = model_new(17);
  add_node(t, "Gather", "x,i", "y1");
  add_output(t, "y1");
  set_branches(add_node(b, "If", "c", "y"), t, chain_branch((const char *[]){"Neg"}, 1, "y2"));
  add_output(b, "y");
  Graph *g = onnxb_import(b, NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  CgResult cg, both;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  const float x[3] = {1, -2, 4};
  const int64_t idx[3] = {0, 7, 2};
  char why[256], err[512];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (dev) rt_device_close(dev);
  for (int c = 0; c < 2; c++) {
    uint8_t cv = (uint8_t)c;
    Tensor in[3] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)x},
                    {ir_type_make(TY_BOOL, 0, NULL), &cv},
                    {ir_type_make(TY_I64, 1, (const int64_t[]){3}), (void *)idx}};
    TensorMap inputs = {3, (const char *[]){"x", "c", "i"}, in};
    Tensor y, *out = NULL;
    const char *want = "/tmp/model.onnx:1:1: gather: index 7 is out of range for axis 0 of size 3";
    bool ok = ir_eval(g, &inputs, &params, &y, err, sizeof err);
    if (c) {
      ck_assert(!ok);
      ck_assert_str_eq(err, want);
    } else {
      ck_assert_msg(ok, "eval: %s", err);
      for (int k = 0; k < 3; k++) ck_assert_double_eq(ir_tensor_get(&y, k), -x[k]);
      ir_tensor_free(&y);
    }
    if (!dev) continue;
    int s = test_run_emu_status(cg.plan, &params, &inputs, &out, err, sizeof err);
    if (c) {
      ck_assert_int_eq(s, DLRT_E_INDEX);
      ck_assert_str_eq(err, want);
      continue;
    }
    ck_assert_msg(s == DLRT_OK, "emu: %s", err);
    for (int k = 0; k < 3; k++) ck_assert_double_eq(ir_tensor_get(&out[0], k), -x[k]);
    ir_tensor_free(&out[0]);
    free(out);
    for (Node *n = g->first; n; n = n->next) n->guard = NULL;
    ck_assert_msg(cg_compile(g, &both), "codegen: %s", diag_text(&ctx));
    ck_assert_int_eq(test_run_emu_status(both.plan, &params, &inputs, &out, err, sizeof err), DLRT_E_INDEX);
    g = onnxb_import(b, NULL); /* guarded again for c = 1 */
    ck_assert_msg(g && cg_compile(g, &cg), "%s", diag_text(&ctx));
  }
}
END_TEST

/* ---- Loop whose end is decided at run time ---- */

/* A loop of at most 6 steps over v (f32[3], from x): each step doubles
 * v and keeps it and the step's number as scan outputs; the body goes on
 * while sum(v) < limit (a condition of shape [1]), and the loop starts
 * when go.  With count, the trip count is instead the number of positive
 * elements of m (f32[6]), a count of run-time length whose bound is 6,
 * and the body always goes on; count 2 makes it 6 minus that, which
 * shrinks as the count grows. */
static Model *while_model(int count) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  Model *body = model_new(17);
  body->ins[body->g.n_input++] = value_info("i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, NULL);
  body->ins[body->g.n_input++] = value_info("cond", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, NULL);
  add_input(body, "v", 1, (const int64_t[]){3});
  add_node(body, "Add", "v,v", "v_out");
  add_node(body, "Identity", "v_out", "v_scan");
  add_node(body, "Identity", "i", "i_scan");
  if (count) {
    add_node(body, "Identity", "cond", "cond_out");
    add_input(b, "m", 1, (const int64_t[]){6});
    add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
    add_init_i64(b, "one", 1, (const int64_t[]){1});
    b->inits[b->g.n_initializer - 1]->n_dims = 0;
    add_node(b, "Greater", "m,zero", "pos");
    add_node(b, "NonZero", "pos", "where");
    add_node(b, "Shape", "where", "shape");
    add_node(b, "Gather", "shape,one", count == 2 ? "n" : "M");
    attr_i(b->nodes[b->g.n_node - 1], "axis", 0);
    if (count == 2) {
      add_init_i64(b, "six", 1, (const int64_t[]){6});
      b->inits[b->g.n_initializer - 1]->n_dims = 0;
      add_node(b, "Sub", "six,n", "M");
    }
  } else {
    attr_i(add_node(body, "ReduceSum", "v_out", "s"), "keepdims", 1);
    add_node(body, "Less", "s,limit", "cond_out");
    add_input(b, "limit", 0, NULL);
    add_input_typed(b, "go", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
    add_init_i64(b, "M", 1, (const int64_t[]){6});
    b->inits[b->g.n_initializer - 1]->n_dims = 0;
  }
  add_output(body, "cond_out");
  add_output(body, "v_out");
  add_output(body, "v_scan");
  add_output(body, "i_scan");
  Onnx__NodeProto *n = add_node(b, "Loop", count ? "M,,x" : "M,go,x", "v_final,vs,is");
  n->name = str("Loop_3");
  attr(n, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &body->g;
  add_output(b, "v_final");
  add_output(b, "vs");
  add_output(b, "is");
  return b;
}

/* Runs g on inputs by the reference interpreter (outputs cut to their
 * run-time lengths) and on emu, which must agree exactly; the
 * reference's visible outputs (the lengths after them freed). */
static Tensor *run_both(Graph *g, const TensorMap *inputs) {
  Tensor *want = calloc((size_t)g->n_outputs + 1, sizeof *want);
  char err[512], why[256];
  ck_assert_msg(ir_eval(g, inputs, &params, want, err, sizeof err), "eval: %s", err);
  ck_assert_msg(ir_trim_outputs(g, want, err, sizeof err), "trim: %s", err);
  for (int o = ir_visible_outputs(g); o < g->n_outputs; o++) ir_tensor_free(&want[o]);
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (!dev) return want;
  rt_device_close(dev);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  Tensor *got = test_run_emu(cg.plan, &params, inputs);
  for (int o = 0; o < g->n_outputs; o++) {
    ck_assert(o >= ir_visible_outputs(g) || ir_type_eq(&got[o].type, &want[o].type));
    ck_assert(o >= ir_visible_outputs(g) || memcmp(got[o].data, want[o].data, ir_tensor_nbytes(&want[o].type)) == 0);
    ir_tensor_free(&got[o]);
  }
  free(got);
  return want;
}

static void expect_loop(Tensor *out, const float *x, int steps) {
  for (int j = 0; j < 3; j++) ck_assert_double_eq(ir_tensor_get(&out[0], j), x[j] * (double)(1 << steps));
  ck_assert_int_eq(out[1].type.rank, 2);
  ck_assert_int_eq(out[1].type.dims[0], steps);
  ck_assert_int_eq(out[2].type.dims[0], steps);
  for (int s = 0; s < steps; s++) {
    ck_assert_int_eq(ir_tensor_get_int(&out[2], s), s);
    for (int j = 0; j < 3; j++) ck_assert_double_eq(ir_tensor_get(&out[1], s * 3 + j), x[j] * (double)(2 << s));
  }
  for (int o = 0; o < 3; o++) ir_tensor_free(&out[o]);
  free(out);
}

/* The body's condition and the initial one at run time: the loop is
 * unrolled to its 6 steps, each guarded, and runs 0 to 6 of them. */
START_TEST(test_loop_ends_at_run_time) {
  Graph *g = onnxb_import(while_model(0), NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  ck_assert_int_ge(count_branches(cg.plan), 6);
  static const struct {
    float limit;
    uint8_t go;
    int steps;
  } runs[] = {{0, 1, 1}, {10, 1, 2}, {40, 1, 4}, {1000, 1, 6}, {1000, 0, 0}};
  for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
    Tensor in[3] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 0, NULL), (void *)&runs[r].limit},
                    {ir_type_make(TY_BOOL, 0, NULL), (void *)&runs[r].go}};
    TensorMap inputs = {3, (const char *[]){"x", "limit", "go"}, in};
    expect_loop(run_both(g, &inputs), xs, runs[r].steps);
  }
}
END_TEST

/* A trip count of run-time value with a bound at import (a count of
 * NonZero's positions, at most 6): unrolled to 6 guarded steps. */
START_TEST(test_loop_counts_at_run_time) {
  Graph *g = onnxb_import(while_model(1), NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  for (int positive = 0; positive <= 6; positive += 3) {
    float m[6];
    for (int i = 0; i < 6; i++) m[i] = i % 2 == 0 ? (i / 2 < positive / 2 ? 1.f : -1.f) : (positive == 6 ? 2.f : -3.f);
    int want = 0;
    for (int i = 0; i < 6; i++) want += m[i] > 0;
    Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 1, (const int64_t[]){6}), m}};
    TensorMap inputs = {2, (const char *[]){"x", "m"}, in};
    expect_loop(run_both(g, &inputs), xs, want);
  }
}
END_TEST

/* What stays refused: a loop ended at run time with no bound, past 1024
 * steps or by a trip count that shrinks as a length grows, and a carried
 * value whose shape changes. */
START_TEST(test_run_time_loops_refused) {
  Model *b = while_model(0);
  const int64_t many = INT64_MAX;
  memcpy(b->inits[b->g.n_initializer - 1]->raw_data.data, &many, sizeof many);
  ck_assert_ptr_null(onnxb_import(b, NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "node 0 'Loop_3' (Loop): the loop's end is decided at run time and its trip "
                                        "count (9223372036854775807) is more than the 1024 steps dlcc unrolls"),
                "%s", diag_text(&ctx));
  b = while_model(0);
  b->nodes[b->g.n_node - 1]->input = names(",go,x", &b->nodes[b->g.n_node - 1]->n_input);
  ck_assert_ptr_null(onnxb_import(b, NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): the loop's end is decided at run time and it has no trip count"),
                "%s", diag_text(&ctx));
  /* a trip count that shrinks as the count grows: 6 - n has no bound (without --loop-bound) */
  ck_assert_ptr_null(onnxb_import(while_model(2), NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): the trip count is computed at run time and has no bound at import "
                                        "(the trip count computed at run time from a run-time length is not "
                                        "supported: its element 0 shrinks as the length grows"),
                "%s", diag_text(&ctx));
  /* a carried value that grows each step: v concatenated with itself */
  b = while_model(0);
  Onnx__GraphProto *body = b->nodes[b->g.n_node - 1]->attribute[0]->g;
  body->node[0]->op_type = str("Concat");
  attr_i(body->node[0], "axis", 0);
  ck_assert_ptr_null(onnxb_import(b, NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): loop-carried value 1 is f32[3] before step 0 and f32[6] after it: a "
                                        "loop whose end is decided at run time keeps one type"),
                "%s", diag_text(&ctx));
}
END_TEST

static int count_steps(const RtPlan *p, RtStepKind kind) {
  int k = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) k += p->steps[i].kind == kind;
  return k;
}

/* while_model without its scan outputs: the final v alone. */
static Model *while_model_carried(void) {
  Model *b = while_model(0);
  Onnx__NodeProto *loop = b->nodes[b->g.n_node - 1];
  loop->attribute[0]->g->n_output = 2; /* cond_out, v_out */
  loop->output = names("v_final", &loop->n_output);
  b->g.n_output = 1;
  return b;
}

/* A loop with no bound and no scan outputs (a while loop, a trip count
 * of INT64_MAX or given at run time) runs as a loop of the plan: the
 * body imported once, one repeat step, as many steps as the run needs,
 * far past the 1024 steps dlcc unrolls; ref and emu agree bit for bit. */
START_TEST(test_plan_loop) {
  for (int form = 0; form < 3; form++) {
    Model *b = while_model_carried();
    Onnx__NodeProto *loop = b->nodes[b->g.n_node - 1];
    if (form == 0) {
      const int64_t many = INT64_MAX;
      memcpy(b->inits[b->g.n_initializer - 1]->raw_data.data, &many, sizeof many);
    } else if (form == 1) {
      loop->input = names(",go,x", &loop->n_input);
    } else {
      loop->input = names("n,go,x", &loop->n_input);
      add_input_typed(b, "n", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    }
    Graph *g = onnxb_import(b, NULL);
    ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
    int loops = 0;
    for (Node *n = g->first; n; n = n->next) loops += n->op == OP_LOOP_BEGIN;
    ck_assert_int_eq(loops, 1);
    CgResult cg;
    ck_assert_msg(cg_compile(ir_copy(g, "copy"), &cg), "codegen: %s", diag_text(&ctx));
    ck_assert_int_eq(count_steps(cg.plan, RT_STEP_REPEAT), 1);
    ck_assert_int_eq(count_steps(cg.plan, RT_STEP_BRANCH), 1);
    /* the loader refuses a repeat that goes back before the first step */
    RtPlan p = *cg.plan;
    RtStep *bad = malloc(sizeof *bad * p.n_steps);
    memcpy(bad, cg.plan->steps, sizeof *bad * p.n_steps);
    p.steps = bad;
    uint32_t at = 0;
    while (bad[at].kind != RT_STEP_REPEAT) at++;
    bad[at].branch.skip = at + 1;
    char err[512];
    ck_assert_int_eq(rt_plan_validate(&p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "a loop goes back"), "%s", err);
    bad[at].branch.skip = at;
    ck_assert_int_eq(rt_plan_validate(&p, err, sizeof err), 0);
    free(bad);
    /* the sum of v = (1 - 2 + 4) 2^steps: the run ends at the first sum
     * at or past the limit; with a count, at n steps if sooner */
    static const struct {
      float limit;
      uint8_t go;
      int64_t n;
      int steps;
    } runs[] = {{0, 1, 99, 1},       {10, 1, 99, 2},     {1e30f, 1, 2000, 99}, /* 3 * 2^99 passes 1e30 */
                {1000, 0, 2000, 0},  {1e30f, 1, 0, 0},   {1e30f, 1, 50, 50}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
      if (form < 2 && runs[r].n != 99 && runs[r].n != 2000) continue;
      int steps = runs[r].steps;
      Tensor in[4] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                      {ir_type_make(TY_F32, 0, NULL), (void *)&runs[r].limit},
                      {ir_type_make(TY_BOOL, 0, NULL), (void *)&runs[r].go},
                      {ir_type_make(TY_I64, 0, NULL), (void *)&runs[r].n}};
      TensorMap inputs = {form == 2 ? 4 : 3, (const char *[]){"x", "limit", "go", "n"}, in};
      Tensor *y = run_both(g, &inputs);
      for (int j = 0; j < 3; j++) ck_assert_double_eq(ir_tensor_get(&y[0], j), xs[j] * ldexp(1, steps));
      ir_tensor_free(&y[0]);
      free(y);
    }
  }
  /* a carried value that grows each step keeps no one type */
  Model *b = while_model_carried();
  b->nodes[b->g.n_node - 1]->input = names(",go,x", &b->nodes[b->g.n_node - 1]->n_input);
  b->nodes[b->g.n_node - 1]->attribute[0]->g->node[0]->op_type = str("Concat");
  attr_i(b->nodes[b->g.n_node - 1]->attribute[0]->g->node[0], "axis", 0);
  ck_assert_ptr_null(onnxb_import(b, NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): loop-carried value 1 is f32[3] before a step and f32[6] after it: a "
                                        "loop whose end is decided at run time keeps one type"),
                "%s", diag_text(&ctx));
}
END_TEST

/* g on inputs fails its check with the message want, on the reference
 * interpreter and on emu. */
static void expect_fails(Graph *g, const TensorMap *inputs, const char *want) {
  Tensor *y = calloc((size_t)g->n_outputs + 1, sizeof *y); /* outputs of run-time length bring their lengths */
  char err[1024], why[256];
  ck_assert_msg(!ir_eval(g, inputs, &params, y, err, sizeof err), "ir_eval ran past the bound");
  free(y);
  ck_assert_str_eq(err, want);
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (!dev) return;
  rt_device_close(dev);
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  Tensor *out = NULL;
  ck_assert_int_eq(test_run_emu_status(cg.plan, &params, inputs, &out, err, sizeof err), DLRT_E_CHECK);
  ck_assert_ptr_null(out);
  ck_assert_str_eq(err, want);
}

/* A loop with no bound in its file (a while loop: no trip count, or
 * INT64_MAX as TorchScript writes one, or a count given at run time)
 * runs under the user's bound (--loop-bound): any number of steps up to
 * it, and a run that would take one more fails its check. */
START_TEST(test_loop_bounded_by_user) {
  static const char want[] = "/tmp/model.onnx: node 0 'Loop_3' (Loop): the loop runs more than 4 steps, the bound it "
                             "was compiled with (--loop-bound)";
  OnnxOptions o = {.loop_bound = 4};
  for (int form = 0; form < 2; form++) {
    Model *b = while_model(0);
    if (form == 0) {
      const int64_t many = INT64_MAX;
      memcpy(b->inits[b->g.n_initializer - 1]->raw_data.data, &many, sizeof many);
    } else {
      b->nodes[b->g.n_node - 1]->input = names(",go,x", &b->nodes[b->g.n_node - 1]->n_input);
    }
    Graph *g = onnxb_import(b, &o);
    ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
    static const struct {
      float limit;
      uint8_t go;
      int steps; /* -1: more than 4 */
    } runs[] = {{0, 1, 1}, {10, 1, 2}, {40, 1, 4}, {1000, 0, 0}, {80, 1, -1}, {1000, 1, -1}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
      Tensor in[3] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                      {ir_type_make(TY_F32, 0, NULL), (void *)&runs[r].limit},
                      {ir_type_make(TY_BOOL, 0, NULL), (void *)&runs[r].go}};
      TensorMap inputs = {3, (const char *[]){"x", "limit", "go"}, in};
      if (runs[r].steps < 0) expect_fails(g, &inputs, want);
      else expect_loop(run_both(g, &inputs), xs, runs[r].steps);
    }
  }
  /* a trip count given at run time (no bound at import): it and the
   * body's condition end the loop, whichever comes first */
  Model *b = while_model(0);
  b->nodes[b->g.n_node - 1]->input = names("n,go,x", &b->nodes[b->g.n_node - 1]->n_input);
  add_input_typed(b, "n", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
  ck_assert_ptr_null(onnxb_import(b, NULL));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): the trip count is computed at run time and has no bound at import: "
                                        "a loop with scan outputs is unrolled, so give it one with --loop-bound=N"),
                "%s", diag_text(&ctx));
  Graph *g = onnxb_import(b, &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  static const struct {
    int64_t n;
    float limit;
    int steps;
  } counted[] = {{3, 1000, 3}, {4, 1000, 4}, {0, 1000, 0}, {9, 10, 2}, {5, 1000, -1}};
  for (size_t r = 0; r < sizeof counted / sizeof *counted; r++) {
    const uint8_t go = 1;
    Tensor in[4] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 0, NULL), (void *)&counted[r].limit},
                    {ir_type_make(TY_BOOL, 0, NULL), (void *)&go},
                    {ir_type_make(TY_I64, 0, NULL), (void *)&counted[r].n}};
    TensorMap inputs = {4, (const char *[]){"x", "limit", "go", "n"}, in};
    if (counted[r].steps < 0) expect_fails(g, &inputs, want);
    else expect_loop(run_both(g, &inputs), xs, counted[r].steps);
  }
  /* a trip count that shrinks as a length grows (6 minus the count of
   * positive elements) has no bound at import: the user's serves */
  g = onnxb_import(while_model(2), &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  ck_assert_msg(!strstr(diag_text(&ctx), "shrinks"), "%s", diag_text(&ctx)); /* the reason taken back */
  for (int positive = 6; positive >= 0; positive -= 3) {
    float m[6];
    for (int i = 0; i < 6; i++) m[i] = i < positive ? 1.f : -1.f;
    Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 1, (const int64_t[]){6}), m}};
    TensorMap inputs = {2, (const char *[]){"x", "m"}, in};
    if (6 - positive > 4)
      expect_fails(g, &inputs,
                   "/tmp/model.onnx: node 5 'Loop_3' (Loop): the loop runs more than 4 steps, the bound it was compiled "
                   "with (--loop-bound)");
    else expect_loop(run_both(g, &inputs), xs, 6 - positive);
  }
  /* a model that reads only a scan output's shape, the loop's end
   * decided by a counter: its length passes the check too, so a run
   * past the bound fails rather than give the bound's length */
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_input_typed(b, "lim", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
  attr_i(add_node(b, "Constant", "", "i0"), "value_int", 0);
  add_node(b, "Less", "i0,lim", "go");
  Model *body = model_new(17);
  body->ins[body->g.n_input++] = value_info("it", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, NULL);
  body->ins[body->g.n_input++] = value_info("c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, NULL);
  body->ins[body->g.n_input++] = value_info("i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, NULL);
  add_input(body, "v", 1, (const int64_t[]){3});
  attr_i(add_node(body, "Constant", "", "one"), "value_int", 1);
  add_node(body, "Add", "i,one", "i_out");
  add_node(body, "Add", "v,v", "v_out");
  add_node(body, "Less", "i_out,lim", "c_out");
  add_node(body, "Identity", "v_out", "v_scan");
  add_output(body, "c_out");
  add_output(body, "i_out");
  add_output(body, "v_out");
  add_output(body, "v_scan");
  Onnx__NodeProto *loop = add_node(b, "Loop", ",go,i0,x", "i_f,v_f,vs");
  loop->name = str("Loop_3");
  attr(loop, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &body->g;
  add_node(b, "Shape", "vs", "steps");
  add_output(b, "steps");
  g = onnxb_import(b, &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  /* optimized as dlcc run does: dead code goes, so only a check the
   * shape needs stays */
  PassOptions po = {.opt_level = 2, .verify_each = true};
  ck_assert_msg(pass_run_pipeline(g, &po, NULL), "%s", diag_text(&ctx));
  for (int64_t lim = 3; lim <= 5; lim += 2) {
    Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_I64, 0, NULL), (void *)&lim}};
    TensorMap inputs = {2, (const char *[]){"x", "lim"}, in};
    if (lim > 4) {
      expect_fails(g, &inputs,
                   "/tmp/model.onnx: node 2 'Loop_3' (Loop): the loop runs more than 4 steps, the bound it was "
                   "compiled with (--loop-bound)");
      continue;
    }
    Tensor *out = run_both(g, &inputs);
    ck_assert_int_eq(ir_tensor_get_int(&out[0], 0), lim);
    ck_assert_int_eq(ir_tensor_get_int(&out[0], 1), 3);
    ir_tensor_free(&out[0]);
    free(out);
  }
  /* a bound out of range (the API's; dlcc's flag takes 1 to 1024) */
  OnnxOptions bad = {.loop_bound = -1};
  ck_assert_ptr_null(onnxb_import(while_model(1), &bad));
  ck_assert_msg(strstr(diag_text(&ctx), "(Loop): the loop bound -1 is out of range (1 to 1024 steps, or 0 for none)"),
                "%s", diag_text(&ctx));
  /* no condition at the start: the first step always runs, then the
   * body's decides; a bound of 1 lets it end there, one of 0 cannot */
  b = while_model(0);
  b->nodes[b->g.n_node - 1]->input = names(",yes,x", &b->nodes[b->g.n_node - 1]->n_input);
  add_init_raw(b, "yes", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL, (const uint8_t[]){1}, 1);
  o.loop_bound = 1;
  g = onnxb_import(b, &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  for (int r = 0; r < 2; r++) {
    const float limit = r ? 10 : 0;
    const uint8_t unused = 0;
    Tensor in[3] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 0, NULL), (void *)&limit},
                    {ir_type_make(TY_BOOL, 0, NULL), (void *)&unused}};
    TensorMap inputs = {3, (const char *[]){"x", "limit", "go"}, in};
    if (r)
      expect_fails(g, &inputs,
                   "/tmp/model.onnx: node 0 'Loop_3' (Loop): the loop runs more than 1 step, the bound it was "
                   "compiled with (--loop-bound)");
    else
      expect_loop(run_both(g, &inputs), xs, 1);
  }
}
END_TEST

/* y = If(c, Concat(past, x), x) of x f32[3], past f32[2], c bool[1]:
 * branches of different shapes, as optimum's merged decoders have
 * (use_cache_branch).  Refused with the -D that fixes c named; with
 * -D c=1 the then branch, and a run with c false fails its check, on
 * the reference interpreter and on emu. */
START_TEST(test_condition_fixed_by_define) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){3});
  add_input(b, "past", 1, (const int64_t[]){2});
  add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, (const int64_t[]){1});
  Model *with = model_new(17), *without = model_new(17);
  attr_i(add_node(with, "Concat", "past,x", "y1"), "axis", 0);
  add_output(with, "y1");
  add_node(without, "Identity", "x", "y2");
  add_output(without, "y2");
  Onnx__NodeProto *n = add_node(b, "If", "c", "y");
  attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &with->g;
  attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &without->g;
  add_output(b, "y");
  ck_assert(onnxb_import(b, NULL) == NULL);
  ck_assert_msg(strstr(diag_text(&ctx), "; -D c=1 or -D c=0 compiles the model for one value of input 'c'"), "%s",
                diag_text(&ctx));
  OnnxOptions o = {.n_defines = 1, .defines = (const Define[]){{"c", 1}}};
  Graph *g = onnxb_import(b, &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  static const float past[2] = {7, 8};
  const char *want = "/tmp/model.onnx: the model was compiled for -D c=1, and this run's inputs differ";
  char why[256];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (dev) rt_device_close(dev);
  CgResult cg;
  if (dev) ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  for (uint8_t c = 0; c < 2; c++) {
    Tensor in[3] = {{ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)xs},
                    {ir_type_make(TY_F32, 1, (const int64_t[]){2}), (void *)past},
                    {ir_type_make(TY_BOOL, 1, (const int64_t[]){1}), &c}};
    TensorMap inputs = {3, (const char *[]){"x", "past", "c"}, in};
    Tensor y, *out = NULL;
    char err[1024];
    bool ok = ir_eval(g, &inputs, &params, &y, err, sizeof err);
    if (!c) {
      ck_assert(!ok);
      ck_assert_str_eq(err, want);
    } else {
      ck_assert_msg(ok, "eval: %s", err);
      ck_assert_int_eq(ir_type_numel(&y.type), 5);
      ck_assert_double_eq(ir_tensor_get(&y, 1), 8);
      ck_assert_double_eq(ir_tensor_get(&y, 4), 4);
      ir_tensor_free(&y);
    }
    if (!dev) continue;
    int st = test_run_emu_status(cg.plan, &params, &inputs, &out, err, sizeof err);
    if (!c) {
      ck_assert_int_eq(st, DLRT_E_CHECK);
      ck_assert_str_eq(err, want);
    } else {
      ck_assert_msg(st == DLRT_OK, "emu: %s", err);
      ck_assert_double_eq(ir_tensor_get(&out[0], 0), 7);
      ck_assert_double_eq(ir_tensor_get(&out[0], 2), 1);
      ir_tensor_free(&out[0]);
      free(out);
    }
  }
}
END_TEST

static Suite *if_suite(void) {
  Suite *s = suite_create("onnx_if");
  TCase *tc = tcase_create("if");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_refused_branch_is_checked);
  tcase_add_test(tc, test_both_branches_refused);
  tcase_add_test(tc, test_nested_branches_in_the_plan);
  tcase_add_test(tc, test_untaken_branch_does_not_run);
  tcase_add_test(tc, test_bad_branches_refused);
  tcase_add_test(tc, test_loop_ends_at_run_time);
  tcase_add_test(tc, test_loop_counts_at_run_time);
  tcase_add_test(tc, test_run_time_loops_refused);
  tcase_add_test(tc, test_loop_bounded_by_user);
  tcase_add_test(tc, test_plan_loop);
  tcase_add_test(tc, test_condition_fixed_by_define);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(if_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
