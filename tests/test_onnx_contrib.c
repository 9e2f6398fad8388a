/* onnxruntime's contrib ops that its transformer optimizer writes
 * (frontend/onnx_contrib.c): FastGelu, BiasGelu, QuickGelu,
 * SkipLayerNormalization, SkipSimplifiedLayerNormalization and
 * SimplifiedLayerNormalization on models built here with protobuf-c, run
 * by the reference interpreter, against onnxruntime 1.32's values on the
 * same models. */
#include "check_quiet.h"
#include <math.h>
#include <string.h>

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "ir/eval.h"
#include "onnxbuild.h"

#define params onnxb_params
#define import(b) onnxb_import((b), NULL)
#define expect_error onnxb_expect_error
#define must_import onnxb_must_import

static const int64_t xd[3] = {1, 2, 4};
static const float x[8] = {0.5f, -1, 2, 0.25f, 1.5f, 0, -0.75f, 3};

/* A model of one node on x [1, 2, 4] with initializers S (a skip), G (a
 * scale), B (a shift) and BI (a bias); outputs as listed. */
static Onnx__NodeProto *contrib_node(Model *b, const char *op, const char *ins, const char *outs, bool ms) {
  add_input(b, "X", 3, xd);
  add_init_f32(b, "S", 3, xd, 8, (const float[]){0.1f, 0.2f, -0.3f, 0.4f, -1, 0.5f, 0.25f, 0});
  add_init_f32(b, "G", 1, (const int64_t[]){4}, 4, (const float[]){1, 0.5f, 2, -1});
  add_init_f32(b, "B", 1, (const int64_t[]){4}, 4, (const float[]){0.1f, -0.2f, 0.3f, 0});
  add_init_f32(b, "BI", 1, (const int64_t[]){4}, 4, (const float[]){0.05f, 0, -0.1f, 0.2f});
  Onnx__NodeProto *n = add_node(b, op, ins, outs);
  if (ms) n->domain = str("com.microsoft");
  return n;
}

static void expect_near(const Tensor *t, const double *want, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), 8);
  for (int i = 0; i < 8; i++)
    ck_assert_msg(fabs(((float *)t->data)[i] - want[i]) < 2e-6, "%s[%d] is %.9g, want %.9g", what, i, ((float *)t->data)[i],
                  want[i]);
}

/* Each op's outputs on x against onnxruntime's: the activations (FastGelu
 * is the tanh form, with its bias), the skip norms (the sum output
 * includes the bias in both), the simplified norm. */
START_TEST(test_contrib_ops) {
  static const struct {
    const char *op, *ins, *outs;
    bool ms;
    double want[2][8];
  } c[6] = {
      {"FastGelu", "X,BI", "Y", true,
       {{0.389837921, -0.158807963, 1.84545124, 0.303128451, 1.45591211, 0, -0.168113425, 3.19813037}}},
      {"BiasGelu", "X,BI", "Y", true,
       {{0.38986218, -0.158655256, 1.84543848, 0.303140134, 1.45611525, 0, -0.168013155, 3.19780135}}},
      {"QuickGelu", "X", "Y", true,
       {{0.339589357, -0.182425559, 1.90514827, 0.148166656, 1.35697579, 0, -0.183813751, 2.96703911}}},
      {"SkipLayerNormalization", "X,S,G,B,BI", "Y,,,SUM", true,
       {{0.186279088, -0.990891039, 2.65829349, -0.316356391, -0.159227759, -0.347491652, -1.86321092, -1.63581634},
        {0.65, -0.8, 1.6, 0.85, 0.55, 0.5, -0.6, 3.2}}},
      {"SkipSimplifiedLayerNormalization", "X,S,G,BI", "Y,,,SUM", true,
       {{0.623658001, -0.38378951, 3.07031608, -0.815552652, 0.329386473, 0.149721116, -0.718661427, -1.91643035},
        {0.65, -0.8, 1.6, 0.85, 0.55, 0.5, -0.6, 3.2}}},
      {"SimplifiedLayerNormalization", "X,G", "Y", false,
       {{0.433859289, -0.433859289, 3.47087431, -0.216929644, 0.872870088, 0, -0.872870088, -1.74574018}}},
  };
  for (int k = 0; k < 6; k++) {
    Model *b = model_new(17);
    Onnx__NodeProto *n = contrib_node(b, c[k].op, c[k].ins, c[k].outs, c[k].ms);
    if (k == 2) attr_f(n, "alpha", 1.5f);
    if (k >= 3) attr_f(n, "epsilon", 1e-5f);
    add_output(b, "Y");
    bool sum = strstr(c[k].outs, "SUM") != NULL;
    if (sum) add_output(b, "SUM");
    Graph *g = must_import(b);
    Tensor in = {ir_type_make(TY_F32, 3, xd), (void *)x}, out[2];
    TensorMap inputs = {1, (const char *[]){"X"}, &in};
    char err[512];
    ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "%s: %s", c[k].op, err);
    for (int o = 0; o < (sum ? 2 : 1); o++) {
      expect_near(&out[o], c[k].want[o], c[k].op);
      ir_tensor_free(&out[o]);
    }
  }
  /* the training outputs are refused where read */
  Model *b = model_new(17);
  contrib_node(b, "SkipLayerNormalization", "X,S,G", "Y,M", true);
  add_output(b, "M");
  expect_error(import(b), "(SkipLayerNormalization): output 2 (the mean) is not supported");
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_contrib");
  TCase *tc = tcase_create("contrib");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_add_test(tc, test_contrib_ops);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
