/* Check suite for softmax_xent and its gradient (ops.def, codegen/
 * lower_rows.c): random logits and class indices, some ignored, with and
 * without label smoothing, run on emu after -O2 against the reference
 * interpreter: in f32, and bf16/f16 logits at their tolerance; a row
 * count that no block of rows divides, C = 1 and C = 1000; and
 * cross_entropy's mean, sum and none built on them (ir/loss.c), with
 * their gradients by autodiff, one row kernel for both (passes/xent.c)
 * except where the gradient reads the loss; and the bias gradients that ride on
 * their weight gradients' GEMMs (the BGRAD epilogue) in an MLP's step. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "ir/grad.h"
#include "ir/loss.h"
#include "passes/autodiff.h"
#include "passes/loss.h"
#include "passes/pass.h"
#include "tests/testutil.h"

typedef struct XentCase {
  DType dt;
  int64_t n, c;
  double smoothing;
  bool ignore; /* some targets are ignore_index */
  LossReduction reduction;
  bool loss; /* through loss_build and autodiff, else the two ops alone */
  bool squared; /* the loss times itself: its gradient's dy reads the loss (no softmax_xent_both) */
} XentCase;

static const XentCase cases[] = {
    {TY_F32, 37, 1000, 0.1, true, LOSS_MEAN, false, false},
    {TY_F32, 13, 1, 0, false, LOSS_MEAN, false, false},
    {TY_F32, 13, 1, 0.2, true, LOSS_MEAN, false, false},
    {TY_F32, 300, 10, 0.05, true, LOSS_MEAN, false, false},
    {TY_BF16, 67, 33, 0.1, true, LOSS_MEAN, false, false},
    {TY_F16, 5, 1000, 0, true, LOSS_MEAN, false, false},
    {TY_F32, 70, 10, 0, true, LOSS_MEAN, true, false},
    {TY_F32, 70, 10, 0.1, true, LOSS_SUM, true, false},
    {TY_F32, 9, 1000, 0.1, true, LOSS_NONE, true, false},
    {TY_F32, 70, 10, 0.1, true, LOSS_MEAN, true, true},
};

static Value *source(Graph *g, OpKind op, DType dt, int rank, const int64_t *dims, const char *name) {
  TensorType t = ir_type_make(dt, rank, dims);
  return &ir_source(g, op, &t, name, (SrcLoc){0})->out[0];
}

static Value *node(Graph *g, OpKind op, int n_in, Value **in, double smoothing) {
  Node *n = ir_node_new(g, op, n_in, in, (SrcLoc){0});
  ir_set_int(g, n, "ignore_index", -100);
  ir_set_float(g, n, "smoothing", smoothing);
  char err[256];
  ck_assert_msg(ir_fill_defaults(g, n, err, sizeof err) && ir_infer(n, err, sizeof err), "%s", err);
  ir_append(g, n);
  return &n->out[0];
}

/* The case's graph: the loss and x's gradient (x a param), or
 * softmax_xent and softmax_xent_grad over the inputs x, t and dy. */
static Graph *build(Ctx *c, const XentCase *xc) {
  Graph *g = ir_graph_new(c, "xent");
  int64_t xd[2] = {xc->n, xc->c};
  Value *x = source(g, xc->loss ? OP_PARAM : OP_INPUT, xc->dt, 2, xd, "x");
  Value *t = source(g, OP_INPUT, TY_I64, 1, &xc->n, "t");
  if (xc->loss) {
    LossSpec s = loss_spec_default(LOSS_CROSS_ENTROPY);
    s.reduction = xc->reduction;
    s.label_smoothing = xc->smoothing;
    Value *loss = loss_build(g, &s, x, t, (SrcLoc){0});
    ck_assert_msg(loss, "%s", diag_text(c));
    if (xc->squared) loss = ir_grad_op(g, (SrcLoc){0}, OP_MUL, 2, (Value *[]){loss, loss});
    const char *name = "loss";
    ir_set_outputs(g, 1, &loss, &name);
    ck_assert_msg(xc->reduction == LOSS_NONE || pass_autodiff(g, NULL), "%s", diag_text(c)); /* none: no scalar */
  } else {
    Value *dy = source(g, OP_INPUT, TY_F32, 1, &xc->n, "dy");
    Value *out[2] = {node(g, OP_XENT, 2, (Value *[]){x, t}, xc->smoothing),
                     node(g, OP_XENT_GRAD, 3, (Value *[]){x, t, dy}, xc->smoothing)};
    const char *names[2] = {"per", "dx"};
    ir_set_outputs(g, 2, out, names);
  }
  ck_assert_msg(ir_verify(g), "%s", diag_text(c));
  return g;
}

/* Each output of got within tol of want's largest, then both freed. */
static void check_close(const Graph *ref, Tensor *want, Tensor *got, double tol, int which) {
  for (int o = 0; o < ref->n_outputs; o++) {
    int64_t count = ir_type_numel(&want[o].type);
    double scale = 1e-30;
    for (int64_t k = 0; k < count; k++) scale = fmax(scale, fabs(ir_tensor_get(&want[o], k)));
    for (int64_t k = 0; k < count; k++) {
      double a = ir_tensor_get(&got[o], k), b = ir_tensor_get(&want[o], k);
      ck_assert_msg(fabs(a - b) <= tol * scale, "case %d output %s element %lld: emu %.9g, ref %.9g", which,
                    ref->output_names[o], (long long)k, a, b);
    }
    ir_tensor_free(&want[o]);
    ir_tensor_free(&got[o]);
  }
  free(want);
  free(got);
}

/* The case at -O2 (the two ops alone also at -O1, where they stay two
 * kernels): loss and gradient share a row kernel (passes/xent.c) unless
 * the gradient's dy reads the loss. */
START_TEST(test_emu_against_ref) {
  const XentCase *xc = &cases[_i];
  Ctx c;
  ctx_init(&c);
  Graph *ref = build(&c, xc);
  uint64_t state = 11 + (uint64_t)_i;
  int64_t xd[2] = {xc->n, xc->c};
  TensorType xt = ir_type_make(xc->dt, 2, xd), tt = ir_type_make(TY_I64, 1, &xc->n),
             dt = ir_type_make(TY_F32, 1, &xc->n);
  Tensor data[3];
  ck_assert(ir_tensor_alloc(&data[0], &xt) && ir_tensor_alloc(&data[1], &tt) && ir_tensor_alloc(&data[2], &dt));
  for (int64_t i = 0; i < xc->n * xc->c; i++)
    ir_tensor_set(&data[0], i, (double)(test_splitmix64(&state) >> 11) * 0x1p-53 * 8 - 4);
  for (int64_t i = 0; i < xc->n; i++) {
    uint64_t r = test_splitmix64(&state);
    ((int64_t *)data[1].data)[i] = xc->ignore && r % 5 == 0 ? -100 : (int64_t)((r >> 8) % (uint64_t)xc->c);
    ir_tensor_set(&data[2], i, (double)(r >> 11) * 0x1p-53 * 2 - 1);
  }
  const char *names[3] = {"x", "t", "dy"};
  TensorMap inputs = {xc->loss ? 1 : 3, xc->loss ? names + 1 : names, xc->loss ? data + 1 : data};
  TensorMap params = {xc->loss ? 1 : 0, names, data};
  bool has_grad = !xc->loss || xc->reduction != LOSS_NONE;
  for (int level = xc->loss ? 2 : 1; level <= 2; level++) {
    Graph *g = ir_copy(ref, "step");
    PassOptions po = {.opt_level = level, .verify_each = true};
    CgResult cg;
    ck_assert_msg(g && pass_run_pipeline(g, &po, NULL) && cg_compile(g, &cg), "%s", diag_text(&c));
    bool joins = level == 2 && has_grad && !xc->squared;
    int both = 0, grads = 0;
    for (uint32_t i = 0; i < cg.plan->n_steps; i++) {
      const char *label = cg.plan->steps[i].label;
      both += strncmp(label, "softmax_xent_both ", 18) == 0;
      grads += strncmp(label, "softmax_xent_grad ", 18) == 0;
    }
    ck_assert_int_eq(both, joins);
    ck_assert_int_eq(grads, has_grad && !joins);
    char err[512];
    Tensor *want = calloc((size_t)ref->n_outputs, sizeof *want), *got = NULL;
    ck_assert_msg(ir_eval(ref, &inputs, &params, want, err, sizeof err), "%s", err);
    ck_assert_msg(test_run_emu_status(cg.plan, &params, &inputs, &got, err, sizeof err) == DLRT_OK, "%s", err);
    check_close(ref, want, got, xc->dt == TY_F32 ? 1e-5 : 1e-2, _i);
  }
  for (int i = 0; i < 3; i++) ir_tensor_free(&data[i]);
  ctx_free(&c);
}
END_TEST

/* An ignored row has no loss and no gradient; a row whose every logit
 * is equal has loss log C and gradient 1/C less the one-hot. */
START_TEST(test_values) {
  Ctx c;
  ctx_init(&c);
  XentCase xc = {TY_F32, 2, 4, 0, true, LOSS_MEAN, false, false};
  Graph *g = build(&c, &xc);
  int64_t xd[2] = {2, 4}, n = 2;
  TensorType xt = ir_type_make(TY_F32, 2, xd), tt = ir_type_make(TY_I64, 1, &n), dt = ir_type_make(TY_F32, 1, &n);
  Tensor data[3];
  ck_assert(ir_tensor_alloc(&data[0], &xt) && ir_tensor_alloc(&data[1], &tt) && ir_tensor_alloc(&data[2], &dt));
  for (int i = 0; i < 8; i++) ir_tensor_set(&data[0], i, i < 4 ? 1.5 : i);
  ((int64_t *)data[1].data)[0] = 2;
  ((int64_t *)data[1].data)[1] = -100;
  ir_tensor_set(&data[2], 0, 2);
  ir_tensor_set(&data[2], 1, 3);
  const char *names[3] = {"x", "t", "dy"};
  TensorMap inputs = {3, names, data}, params = {0, NULL, NULL};
  Tensor out[2];
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s", err);
  ck_assert_double_eq_tol(ir_tensor_get(&out[0], 0), log(4.0), 1e-6);
  ck_assert_double_eq(ir_tensor_get(&out[0], 1), 0);
  for (int j = 0; j < 4; j++) {
    ck_assert_double_eq_tol(ir_tensor_get(&out[1], j), 2 * (0.25 - (j == 2)), 1e-6);
    ck_assert_double_eq(ir_tensor_get(&out[1], 4 + j), 0);
  }
  for (int i = 0; i < 2; i++) ir_tensor_free(&out[i]);
  for (int i = 0; i < 3; i++) ir_tensor_free(&data[i]);
  ctx_free(&c);
}
END_TEST

/* ---- a linear's bias gradient in its weight gradient's GEMM ---- */

static const char mlp[] =
    "model mlp(x: f32[37, 20]) -> y: f32[37, 7] {\n"
    "  return linear(relu(linear(x, 24) as fc1), 7) as fc2\n"
    "}\n";

/* The MLP's step with cross_entropy: each bias gradient is its weight
 * gradient GEMM's BGRAD epilogue, no kernel of its own, and emu's step
 * agrees with the reference interpreter. */
START_TEST(test_bias_grad_epilogue) {
  Ctx c;
  ctx_init(&c);
  TestSource src = {mlp, NULL};
  ck_assert_int_eq(ctx_guard(&c, test_lower_source, &src), 0);
  Graph *ref = src.g;
  LossSpec s = loss_spec_default(LOSS_CROSS_ENTROPY);
  ck_assert_msg(ref && pass_append_loss(ref, &s, 0, "target", NULL) && pass_autodiff(ref, NULL) && ir_verify(ref),
                "%s", diag_text(&c));
  Graph *g = ir_copy(ref, "step");
  PassOptions po = {.opt_level = 2, .verify_each = true};
  CgResult cg;
  ck_assert_msg(g && pass_run_pipeline(g, &po, NULL) && cg_compile(g, &cg), "%s", diag_text(&c));
  int bgrad = 0, sums = 0;
  for (uint32_t i = 0; i < cg.plan->n_steps; i++) {
    const RtStep *st = &cg.plan->steps[i];
    if (st->kind == RT_STEP_GEMM && st->gemm.epilogue == RT_EPILOGUE_BGRAD) {
      bgrad++;
      ck_assert_int_eq(st->gemm.m, bgrad == 1 ? 7 : 24);
      ck_assert_int_eq(st->gemm.k, 37);
      ck_assert_msg(strstr(st->label, "reduce_sum") != NULL, "%s", st->label);
    }
    sums += st->kind == RT_STEP_LAUNCH && strstr(st->label, "reduce_sum") && !strstr(st->label, "#");
  }
  ck_assert_int_eq(bgrad, 2);
  ck_assert_int_eq(sums, 0);
  char err[512];
  TensorMap params;
  ck_assert_msg(ir_init_params(ref, 3, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  int64_t xd[2] = {37, 20}, n = 37;
  TensorType xt = ir_type_make(TY_F32, 2, xd), tt = ir_type_make(TY_I64, 1, &n);
  Tensor data[2];
  ck_assert(ir_tensor_alloc(&data[0], &xt) && ir_tensor_alloc(&data[1], &tt));
  uint64_t state = 9;
  for (int64_t i = 0; i < 37 * 20; i++) ir_tensor_set(&data[0], i, (double)(test_splitmix64(&state) >> 11) * 0x1p-53 - 0.5);
  for (int64_t i = 0; i < 37; i++) ((int64_t *)data[1].data)[i] = (int64_t)(test_splitmix64(&state) % 7);
  const char *names[2] = {"x", "target"};
  TensorMap inputs = {2, names, data};
  Tensor *want = calloc((size_t)ref->n_outputs, sizeof *want), *got = NULL;
  ck_assert_msg(ir_eval(ref, &inputs, &params, want, err, sizeof err), "%s", err);
  ck_assert_msg(test_run_emu_status(cg.plan, &params, &inputs, &got, err, sizeof err) == DLRT_OK, "%s", err);
  check_close(ref, want, got, 1e-5, -1);
  ir_tensor_free(&data[0]);
  ir_tensor_free(&data[1]);
  ir_tensor_map_free(&params);
  ctx_free(&c);
}
END_TEST

static Suite *xent_suite(void) {
  Suite *s = suite_create("xent");
  TCase *tc = tcase_create("xent");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_emu_against_ref, 0, (int)ARRAY_LEN(cases));
  tcase_add_test(tc, test_values);
  tcase_add_test(tc, test_bias_grad_epilogue);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(xent_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
