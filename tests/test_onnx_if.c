/* ONNX If decided at run time (frontend/onnx_control.c): takes models
 * built here with protobuf-c, checks the reference interpreter and the
 * generated kernels on emu against each other and against numbers worked
 * out here.  A branch that cannot be imported at the model's shapes
 * becomes a check: the other branch runs, and a run whose condition picks
 * the refused one fails with one exact message on both; both branches
 * refused is an import error with both reasons. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "onnxbuild.h"
#include "runtime/device.h"
#include "tests/testutil.h"

#define ctx onnxb_ctx
#define params onnxb_params

static int count_op(Graph *g, OpKind op) {
  int k = 0;
  for (Node *n = g->first; n; n = n->next) k += n->op == op;
  return k;
}

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
    ck_assert_int_eq(count_op(g, OP_CHECK), 1);
    ck_assert_int_eq(count_op(g, OP_WHERE), 0);
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

static Suite *if_suite(void) {
  Suite *s = suite_create("onnx_if");
  TCase *tc = tcase_create("if");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_refused_branch_is_checked);
  tcase_add_test(tc, test_both_branches_refused);
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
