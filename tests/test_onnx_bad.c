/* The ONNX importer on bad input: bytes that are not a model, truncated
 * or cyclic models, dangling names, dimensions and initializers that do
 * not add up, unsupported ops, attributes and dtypes, and external data
 * that points outside its folder: each refused with a message naming
 * where, nothing imported. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/onnx.h"
#include "frontend/onnx.pb-c.h"
#include "onnxbuild.h"

#define ctx onnxb_ctx
#define params onnxb_params
#define import_opt onnxb_import
#define import(b) onnxb_import((b), NULL)
#define expect_error onnxb_expect_error
#define must_import onnxb_must_import
#define count_op onnxb_count_op

/* A weight's values, for initializers (the data is not what is tested). */
static const float wdata[12] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1, 1.1f, -1.2f};

static Model *relu_model(void) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3};
  add_input(b, "x", 2, xd);
  add_node(b, "Relu", "x", "y");
  add_output(b, "y");
  return b;
}

START_TEST(test_not_protobuf) {
  const char text[] = "graph mlp { this is not protobuf }\n";
  Graph *g = fe_onnx_import_bytes(&ctx, "text.onnx", text, sizeof text - 1, NULL, &params);
  ck_assert_ptr_null(g);
  ck_assert_msg(strstr(diag_text(&ctx), "text.onnx: not an ONNX model"), "%s", diag_text(&ctx));
}
END_TEST

START_TEST(test_truncated) {
  Model *b = relu_model();
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  /* Every prefix is refused with a message, none crashes. */
  for (size_t cut = 0; cut < len; cut++) {
    diag_clear(&ctx);
    Graph *g = fe_onnx_import_bytes(&ctx, "cut.onnx", buf, cut, NULL, &params);
    ck_assert_msg(g == NULL, "a %zu-byte prefix of %zu imported", cut, len);
    ck_assert_msg(strstr(diag_text(&ctx), "cut.onnx:"), "no message for a %zu-byte prefix", cut);
  }
  diag_clear(&ctx);
  ck_assert_ptr_nonnull(fe_onnx_import_bytes(&ctx, "whole.onnx", buf, len, NULL, &params));
}
END_TEST

START_TEST(test_missing_file) {
  TensorMap p;
  ck_assert_ptr_null(fe_onnx_import(&ctx, "/nonexistent/m.onnx", NULL, &p));
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "cannot read '/nonexistent/m.onnx'"));
}
END_TEST

START_TEST(test_cycle) {
  Model *b = model_new(13);
  int64_t xd[1] = {3};
  add_input(b, "x", 1, xd);
  add_node(b, "Add", "x,b", "a");
  add_node(b, "Relu", "a", "b");
  add_output(b, "b");
  expect_error(import(b), "the graph has a cycle");
}
END_TEST

START_TEST(test_dangling_input) {
  Model *b = relu_model();
  add_node(b, "Add", "y,nope", "z");
  b->outs[0]->name = str("z");
  expect_error(import(b), "node 1 'n1' (Add): input 'nope' is not defined");
}
END_TEST

START_TEST(test_huge_dimension) {
  Model *b = model_new(13);
  int64_t xd[2] = {(int64_t)1 << 50, 3};
  add_input(b, "x", 2, xd);
  add_node(b, "Relu", "x", "y");
  add_output(b, "y");
  expect_error(import(b), "dim 0 of graph input 'x' is 1125899906842624, out of range");
  diag_clear(&ctx);
  int64_t big[2] = {(int64_t)1 << 30, (int64_t)1 << 30};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, big, NULL);
  expect_error(import(b), "graph input 'x' is larger than");
}
END_TEST

START_TEST(test_initializer_size_mismatch) {
  Model *b = relu_model();
  int64_t wd[2] = {4, 3};
  add_init_f32(b, "w", 2, wd, 10, wdata);
  expect_error(import(b), "initializer 'w': f32[4, 3] FLOAT needs 12 float_data values, the file has 10");
}
END_TEST

/* onnxruntime's dynamic int8 format: DynamicQuantizeLinear's zero point
 * (computed at run time) feeds MatMulInteger (or ConvInteger), which
 * subtracts its terms with elementwise ops; one of the wrong shape, or
 * one for a constant operand, is refused where it is read. */
START_TEST(test_runtime_zero_points) {
  Model *b = model_new(13);
  int64_t xd[2] = {3, 8}, wd[2] = {8, 4}, zd[1] = {5};
  int8_t w[32];
  for (int i = 0; i < 32; i++) w[i] = (int8_t)(i % 7 - 3);
  add_input(b, "x", 2, xd);
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, wd, w, sizeof w);
  add_node(b, "DynamicQuantizeLinear", "x", "xq,xs,xz");
  add_node(b, "MatMulInteger", "xq,w,xz", "acc");
  add_output(b, "acc");
  Graph *g = must_import(b);
  ck_assert_int_eq(count_op(g, OP_REDUCE_MAX), 1);
  ck_assert_int_eq(count_op(g, OP_REDUCE_MIN), 1);
  ck_assert_int_ge(count_op(g, OP_MATMUL), 1);
  diag_clear(&ctx);
  /* five zero points for three rows */
  b = model_new(13);
  add_input(b, "x", 2, xd);
  add_input_typed(b, "z", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 1, zd);
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, wd, w, sizeof w);
  add_node(b, "DynamicQuantizeLinear", "x", "xq,xs,xz");
  add_node(b, "MatMulInteger", "xq,w,z", "acc");
  add_output(b, "acc");
  expect_error(import(b), "(MatMulInteger): a zero point u8[5] computed at run time must be one value or one per "
                          "row of A");
  diag_clear(&ctx);
  /* a constant A with a zero point computed at run time */
  b = model_new(13);
  int64_t one = 1;
  add_input_typed(b, "z", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, &one);
  add_init_raw(b, "a", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, (int64_t[]){4, 8}, w, sizeof w);
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, wd, w, sizeof w);
  add_node(b, "MatMulInteger", "a,w,z", "acc");
  add_output(b, "acc");
  expect_error(import(b), "(MatMulInteger): a zero point computed at run time for a constant operand is not "
                          "supported");
  diag_clear(&ctx);
  /* ConvInteger's x zero point: one value */
  b = model_new(13);
  int64_t img[4] = {1, 2, 5, 5}, k[4] = {4, 2, 1, 1}, three = 3;
  add_input_typed(b, "x", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 4, img);
  add_input_typed(b, "z", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 1, &three);
  add_init_raw(b, "w", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 4, k, w, 8);
  add_node(b, "ConvInteger", "x,w,z", "acc");
  add_output(b, "acc");
  expect_error(import(b), "(ConvInteger): a zero point u8[3] computed at run time must be one value");
}
END_TEST

START_TEST(test_unsupported_op_attr_dtype) {
  Model *b = relu_model();
  b->nodes[0]->op_type = str("Frobnicate");
  expect_error(import(b), "/tmp/model.onnx: node 0 'n0' (Frobnicate): op Frobnicate is not supported");
  diag_clear(&ctx);
  b = relu_model();
  attr_i(b->nodes[0], "bogus", 1);
  expect_error(import(b), "node 0 'n0' (Relu): attribute 'bogus' is not supported");
  diag_clear(&ctx);
  b = relu_model();
  int64_t d[2] = {2, 3};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__STRING, 2, d, NULL);
  expect_error(import(b), "graph input 'x' has dtype STRING, which is not supported");
  diag_clear(&ctx);
  /* FLOAT8E4M3FN (17) is held in f16: a Relu would compute in f16 */
  b = relu_model();
  b->ins[0] = value_info("x", 17, 2, d, NULL);
  expect_error(import(b), "node 0 'n0' (Relu): FLOAT8E4M3FN operands are not supported (only Cast, CastLike, "
                          "QuantizeLinear and DequantizeLinear read them)");
  diag_clear(&ctx);
  b = relu_model();
  attr_s(add_node(b, "MaxPool", "y", "z"), "auto_pad", "WEIRD");
  attr_is(b->nodes[1], "kernel_shape", 1, (int64_t[]){2});
  b->outs[0]->name = str("z");
  int64_t x3[3] = {1, 2, 3};
  b->ins[0] = value_info("x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, x3, NULL);
  expect_error(import(b), "(MaxPool): auto_pad='WEIRD' is not supported");
}
END_TEST

/* ReverseSequence, TensorScatter and SwiGLU refuse what they cannot
 * mean, naming the node (their numbers: the node tests). */
START_TEST(test_sequence_ops_refused) {
  int64_t xd[2] = {3, 4}, ld[1] = {4}, bad[1] = {3};
  Model *b = model_new(13);
  add_input(b, "x", 2, xd);
  b->ins[b->g.n_input++] = value_info("lens", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, ld, NULL);
  attr_i(add_node(b, "ReverseSequence", "x,lens", "y"), "batch_axis", 1);
  attr_i(b->nodes[0], "time_axis", 1);
  add_output(b, "y");
  expect_error(import(b), "(ReverseSequence): batch_axis 1 and time_axis 1 must be 0 and 1, one each");
  diag_clear(&ctx);
  b = model_new(13);
  add_input(b, "x", 2, xd);
  b->ins[b->g.n_input++] = value_info("lens", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, bad, NULL);
  add_node(b, "ReverseSequence", "x,lens", "y");
  add_output(b, "y");
  expect_error(import(b), "(ReverseSequence): sequence_lens must be an integer vector of the batch's 4 lengths");
  diag_clear(&ctx);
  int64_t pd[3] = {2, 5, 4}, ud[3] = {2, 6, 4};
  b = model_new(24);
  add_input(b, "past", 3, pd);
  add_input(b, "upd", 3, ud);
  attr_i(add_node(b, "TensorScatter", "past,upd", "y"), "axis", 1);
  add_output(b, "y");
  expect_error(import(b), "(TensorScatter): update's 6 steps do not fit the cache's 5");
  diag_clear(&ctx);
  b = model_new(24);
  add_input(b, "past", 3, pd);
  add_input(b, "upd", 3, pd);
  attr_s(add_node(b, "TensorScatter", "past,upd", "y"), "mode", "ring");
  add_output(b, "y");
  expect_error(import(b), "(TensorScatter): mode 'ring' is not supported (linear or circular)");
  diag_clear(&ctx);
  b = model_new(24);
  add_input(b, "a", 2, xd);
  add_input(b, "b", 1, ld);
  add_node(b, "SwiGLU", "a,b", "y");
  add_output(b, "y");
  expect_error(import(b), "(SwiGLU): A and B must have one dtype and one shape (SwiGLU does not broadcast)");
}
END_TEST

/* MaxPool's Indices: a window of more taps than the bound, and
 * ceil_mode, are refused naming the node. */
START_TEST(test_pool_indices_refused) {
  int64_t xd[4] = {1, 1, 64, 64};
  Model *b = model_new(13);
  add_input(b, "x", 4, xd);
  attr_is(add_node(b, "MaxPool", "x", "y,i"), "kernel_shape", 2, (int64_t[]){64, 64});
  add_output(b, "y");
  add_output(b, "i");
  expect_error(import(b), "(MaxPool): the Indices output of a 4096-tap window is not supported (at most 1024 taps)");
  diag_clear(&ctx);
  b = model_new(13);
  add_input(b, "x", 4, xd);
  Onnx__NodeProto *p = add_node(b, "MaxPool", "x", "y,i");
  attr_is(p, "kernel_shape", 2, (int64_t[]){2, 2});
  attr_i(p, "ceil_mode", 1);
  add_output(b, "y");
  add_output(b, "i");
  expect_error(import(b), "(MaxPool): the Indices output with ceil_mode=1 is not supported");
}
END_TEST

START_TEST(test_runtime_shape_refused) {
  Model *b = model_new(13);
  int64_t xd[2] = {2, 3}, sd[1] = {2};
  add_input(b, "x", 2, xd);
  b->ins[b->g.n_input++] = value_info("shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, sd, NULL);
  add_node(b, "Reshape", "x,shape", "y");
  add_output(b, "y");
  expect_error(import(b), "(Reshape): the target shape computed at run time is not supported");
  /* The backend tests' way: the input's value is known at import. */
  diag_clear(&ctx);
  int64_t sh[2] = {3, -1};
  Tensor t = {ir_type_make(TY_I64, 1, sd), sh};
  const char *nm[1] = {"shape"};
  TensorMap known = {1, nm, &t};
  OnnxOptions o = {.known = &known};
  Graph *g = import_opt(b, &o);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  ck_assert_int_eq(g->outputs[0]->type.dims[0], 3);
  ck_assert_int_eq(g->outputs[0]->type.dims[1], 2);
}
END_TEST

START_TEST(test_external_data) {
  char dir[] = "/tmp/dlcc-onnx-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/w.bin", dir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite("12345678", 1, 8, f);
  fwrite(wdata, sizeof(float), 12, f);
  fclose(f);
  Model *b = relu_model();
  int64_t wd[2] = {4, 3};
  Onnx__TensorProto *t = tensor("w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, wd);
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *kv[3][2] = {{"location", "w.bin"}, {"offset", "8"}, {"length", "48"}};
  t->n_external_data = 3;
  t->external_data = mem(sizeof *t->external_data * 3);
  for (int i = 0; i < 3; i++) {
    Onnx__StringStringEntryProto *e = mem(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = str(kv[i][0]);
    e->value = str(kv[i][1]);
    t->external_data[i] = e;
  }
  b->inits[b->g.n_initializer++] = t;
  /* w is used, so it becomes a param with the file's data. */
  b->nodes[0]->op_type = str("Gemm");
  b->nodes[0]->input = names("x,w", &b->nodes[0]->n_input);
  attr_i(b->nodes[0], "transB", 1);
  size_t len;
  uint8_t *buf = pack_model(b, &len);
  char model[256];
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  Graph *g = fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params);
  ck_assert_msg(g, "%s", diag_text(&ctx));
  const Tensor *w = ir_tensor_map_find(&params, "w");
  ck_assert_ptr_nonnull(w);
  ck_assert(memcmp(w->data, wdata, sizeof wdata) == 0);
  ir_tensor_map_free(&params);
  /* Outside the model's directory: refused. */
  t->external_data[0]->value = str("../etc/passwd");
  diag_clear(&ctx);
  buf = pack_model(b, &len);
  expect_error(fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params),
               "must be a relative path below the model's directory");
  /* Too short. */
  t->external_data[0]->value = str("w.bin");
  t->external_data[1]->value = str("16");
  diag_clear(&ctx);
  buf = pack_model(b, &len);
  expect_error(fe_onnx_import_bytes(&ctx, model, buf, len, NULL, &params), "is too short");
  unlink(path);
  rmdir(dir);
}
END_TEST

static Suite *onnx_bad_suite(void) {
  Suite *s = suite_create("onnx_bad");
  TCase *tc = tcase_create("bad");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_add_test(tc, test_not_protobuf);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_missing_file);
  tcase_add_test(tc, test_cycle);
  tcase_add_test(tc, test_dangling_input);
  tcase_add_test(tc, test_huge_dimension);
  tcase_add_test(tc, test_initializer_size_mismatch);
  tcase_add_test(tc, test_runtime_zero_points);
  tcase_add_test(tc, test_unsupported_op_attr_dtype);
  tcase_add_test(tc, test_sequence_ops_refused);
  tcase_add_test(tc, test_pool_indices_refused);
  tcase_add_test(tc, test_runtime_shape_refused);
  tcase_add_test(tc, test_external_data);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(onnx_bad_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
