/* ONNX sequences and optionals (frontend/onnx_seq.c): models built here
 * with protobuf-c.  The ops resolved at import give the numbers worked
 * out here on the reference interpreter; sequence inputs and outputs
 * flatten to "s.0", "s.1", ...; positions, lengths and types that are
 * not known at import, or out of range, are errors naming the node. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"
#include "ir/eval.h"
#include "onnxbuild.h"

#define ctx onnxb_ctx
#define params onnxb_params

enum { F32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, I64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64 };

/* inner wrapped in a sequence (or an optional) type, keeping its name. */
static Onnx__ValueInfoProto *wrap(Onnx__ValueInfoProto *inner, bool optional) {
  Onnx__TypeProto *tp = mem(sizeof *tp);
  onnx__type_proto__init(tp);
  if (optional) {
    Onnx__TypeProto__Optional *o = mem(sizeof *o);
    onnx__type_proto__optional__init(o);
    o->elem_type = inner->type;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
    tp->optional_type = o;
  } else {
    Onnx__TypeProto__Sequence *s = mem(sizeof *s);
    onnx__type_proto__sequence__init(s);
    s->elem_type = inner->type;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    tp->sequence_type = s;
  }
  inner->type = tp;
  return inner;
}

static void add_info(Model *b, Onnx__ValueInfoProto *vi) {
  ck_assert_uint_lt(b->g.n_input, sizeof b->ins / sizeof *b->ins);
  b->ins[b->g.n_input++] = vi;
}

/* A sequence input "s" of f32 vectors of free length N (each element its own). */
static void add_seq_input(Model *b, const char *name) {
  add_info(b, wrap(value_info(name, F32, 1, (const int64_t[]){0}, (const char *const[]){"N"}), false));
}

static const float xs[6] = {1, 2, 3, 4, 5, 6};

/* x [2, 3] split into its columns, the first erased, its negation put
 * between the others, stacked: [[2, 5], [-1, -4], [3, 6]]; and the
 * length, 3. */
START_TEST(test_ops_resolved_at_import) {
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){2, 3});
  add_init_i64(b, "first", 1, (const int64_t[]){-3});
  add_init_i64(b, "zero", 1, (const int64_t[]){0});
  add_init_i64(b, "one", 1, (const int64_t[]){1});
  Onnx__NodeProto *n = add_node(b, "SplitToSequence", "x", "cols");
  attr_i(n, "axis", 1);
  attr_i(n, "keepdims", 0);
  add_node(b, "SequenceAt", "cols,zero", "c0");
  add_node(b, "Neg", "c0", "neg");
  add_node(b, "SequenceErase", "cols,first", "rest");
  add_node(b, "SequenceInsert", "rest,neg,one", "three");
  n = add_node(b, "ConcatFromSequence", "three", "y");
  attr_i(n, "axis", 0);
  attr_i(n, "new_axis", 1);
  add_node(b, "SequenceLength", "three", "len");
  add_output(b, "y");
  add_output(b, "len");
  Graph *g = onnxb_import(b, NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  ck_assert_int_eq(g->n_outputs, 2);
  Tensor in = {ir_type_make(TY_F32, 2, (const int64_t[]){2, 3}), (void *)xs};
  TensorMap inputs = {1, (const char *[]){"x"}, &in};
  Tensor out[2];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "eval: %s", err);
  ck_assert(ir_type_eq(&out[0].type, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {3, 2}}));
  const double want[6] = {2, 5, -1, -4, 3, 6};
  for (int i = 0; i < 6; i++) ck_assert_double_eq(ir_tensor_get(&out[0], i), want[i]);
  ck_assert_int_eq(out[1].type.dtype, TY_I64);
  ck_assert_int_eq(out[1].type.rank, 0);
  ck_assert_double_eq(ir_tensor_get(&out[1], 0), 3);
  ir_tensor_free(&out[0]);
  ir_tensor_free(&out[1]);
}
END_TEST

/* A sequence input of as many elements as are given (each binding its
 * own N), its last element, and a sequence output flattened. */
START_TEST(test_inputs_and_outputs_flatten) {
  Model *b = model_new(17);
  add_seq_input(b, "s");
  add_init_i64(b, "last", 1, (const int64_t[]){-1});
  add_node(b, "SequenceAt", "s,last", "z");
  add_node(b, "SequenceConstruct", "z,z", "pair");
  Onnx__NodeProto *opt = add_node(b, "Optional", "", "none");
  Onnx__AttributeProto *ty = attr(opt, "type", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO);
  ty->tp = value_info("t", F32, 0, NULL, NULL)->type;
  add_node(b, "OptionalHasElement", "none", "has");
  add_output(b, "z");
  add_output(b, "pair");
  add_output(b, "none");
  add_output(b, "has");
  InputShape shapes[2] = {{"s.0", 1, (const int64_t[]){2}}, {"s.1", 1, (const int64_t[]){3}}};
  OnnxOptions o = {.n_input_shapes = 2, .input_shapes = shapes};
  Graph *g = onnxb_import(b, &o);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  ck_assert_int_eq(g->n_outputs, 4); /* z, pair.0, pair.1, has; the absent optional gives none */
  ck_assert_str_eq(g->output_names[0], "z");
  ck_assert_str_eq(g->output_names[1], "pair.0");
  ck_assert_str_eq(g->output_names[2], "pair.1");
  ck_assert_str_eq(g->output_names[3], "has");
  ck_assert_int_eq(g->outputs[1]->type.dims[0], 3);
  const float a[2] = {1, 2}, c[3] = {7, 8, 9};
  Tensor in[2] = {{ir_type_make(TY_F32, 1, (const int64_t[]){2}), (void *)a},
                  {ir_type_make(TY_F32, 1, (const int64_t[]){3}), (void *)c}};
  TensorMap inputs = {2, (const char *[]){"s.0", "s.1"}, in};
  Tensor out[4];
  char err[512];
  ck_assert_msg(ir_eval(g, &inputs, &params, out, err, sizeof err), "eval: %s", err);
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&out[k], i), c[i]);
    ir_tensor_free(&out[k]);
  }
  ck_assert_double_eq(ir_tensor_get(&out[3], 0), 0);
  ir_tensor_free(&out[3]);
}
END_TEST

/* The import of b fails with exactly want. */
static void expect_error(Model *b, const OnnxOptions *o, const char *want) {
  ck_assert_msg(onnxb_import(b, o) == NULL, "imported");
  char full[1024];
  snprintf(full, sizeof full, "dlcc: error: /tmp/model.onnx: %s\n", want);
  ck_assert_str_eq(diag_text(&ctx), full);
}

/* SequenceConstruct(x, x) then SequenceAt at pos (an initializer, or
 * the graph input "p" when pos is NULL). */
static Model *at_model(const int64_t *pos) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){2});
  if (pos) add_init_i64(b, "p", 1, pos);
  else add_input_typed(b, "p", I64, 0, NULL);
  add_node(b, "SequenceConstruct", "x,x", "s");
  add_node(b, "SequenceAt", "s,p", "y");
  add_output(b, "y");
  return b;
}

START_TEST(test_positions_checked) {
  expect_error(at_model((const int64_t[]){2}), NULL,
               "node 1 'n1' (SequenceAt): position 2 is out of range for a sequence of 2 (-2 to 1)");
  onnxb_teardown(), onnxb_setup();
  expect_error(at_model((const int64_t[]){-3}), NULL,
               "node 1 'n1' (SequenceAt): position -3 is out of range for a sequence of 2 (-2 to 1)");
  onnxb_teardown(), onnxb_setup();
  /* an empty sequence of the model's own: no word of inputs */
  Model *b = model_new(17);
  add_init_i64(b, "p", 1, (const int64_t[]){0});
  add_node(b, "SequenceEmpty", "", "s");
  add_node(b, "SequenceAt", "s,p", "y");
  add_output(b, "y");
  expect_error(b, NULL, "node 1 'n1' (SequenceAt): position 0 is out of range for a sequence of 0 (0 to -1)");
  onnxb_teardown(), onnxb_setup();
  expect_error(at_model(NULL), NULL,
               "node 1 'n1' (SequenceAt): a sequence position computed at run time is not supported: it "
               "determines a shape or the ops built, so it must be an initializer, a Constant or follow from "
               "static shapes");
}
END_TEST

START_TEST(test_refusals_name_what) {
  /* a tensor op given a sequence */
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){2});
  add_node(b, "SequenceConstruct", "x", "s");
  add_node(b, "Add", "s,x", "y");
  add_output(b, "y");
  expect_error(b, NULL, "node 1 'n1' (Add): input 1 ('s') is a sequence: Add takes tensors");
  onnxb_teardown(), onnxb_setup();
  /* a sequence input given no elements, indexed */
  b = model_new(17);
  add_seq_input(b, "s");
  add_init_i64(b, "p", 1, (const int64_t[]){0});
  add_node(b, "SequenceAt", "s,p", "y");
  add_output(b, "y");
  expect_error(b, NULL, "node 0 'n0' (SequenceAt): position 0 of 's', which is empty (a sequence graph input holds "
                        "the elements given: s.0, s.1, ...)");
  onnxb_teardown(), onnxb_setup();
  /* a flattened name that another input has (declared after it) */
  b = model_new(17);
  add_seq_input(b, "s");
  add_input(b, "s.0", 1, (const int64_t[]){2});
  add_node(b, "SequenceLength", "s", "y");
  add_output(b, "y");
  InputShape one = {"s.0", 1, (const int64_t[]){2}};
  expect_error(b, &(OnnxOptions){.n_input_shapes = 1, .input_shapes = &one},
               "graph input 's' flattens to 's.0', which the model also names");
  onnxb_teardown(), onnxb_setup();
  /* a sequence of sequences as a graph input */
  b = model_new(17);
  add_info(b, wrap(wrap(value_info("ss", F32, 1, (const int64_t[]){2}, NULL), false), false));
  add_node(b, "SequenceLength", "ss", "y");
  add_output(b, "y");
  expect_error(b, NULL, "graph input 'ss' is a sequence of sequences: only a sequence of tensors flattens to inputs");
  onnxb_teardown(), onnxb_setup();
  /* split sizes that do not cover the axis */
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){5});
  add_init_i64(b, "sp", 2, (const int64_t[]){2, 2});
  add_node(b, "SplitToSequence", "x,sp", "s");
  add_node(b, "SequenceLength", "s", "y");
  add_output(b, "y");
  expect_error(b, NULL, "node 0 'n0' (SplitToSequence): the split sizes add up to 4, the axis has 5");
  onnxb_teardown(), onnxb_setup();
  /* an optional absent at import, opened */
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){2});
  add_info(b, wrap(value_info("o", F32, 1, (const int64_t[]){2}, NULL), true));
  add_node(b, "OptionalGetElement", "o", "y");
  add_output(b, "y");
  expect_error(b, NULL, "node 0 'n0' (OptionalGetElement): the optional is empty at import: OptionalGetElement has "
                        "nothing to give");
  onnxb_teardown(), onnxb_setup();
  /* an element of another dtype */
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){2});
  add_init_i64(b, "i", 1, (const int64_t[]){1});
  add_node(b, "SequenceConstruct", "x", "s");
  add_node(b, "SequenceInsert", "s,i", "y");
  add_node(b, "SequenceLength", "y", "n");
  add_output(b, "n");
  expect_error(b, NULL, "node 1 'n1' (SequenceInsert): the tensor is i64, the sequence holds f32");
}
END_TEST

/* A branch giving SequenceConstruct of k copies of x. */
static Model *seq_branch(int k, const char *out) {
  Model *m = model_new(17);
  char ins[64] = "";
  for (int i = 0; i < k; i++) strcat(ins, i ? ",x" : "x");
  add_node(m, "SequenceConstruct", ins, out);
  add_output(m, out);
  return m;
}

static Model *if_seq_model(int kt, int ke) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){2});
  add_input_typed(b, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
  Onnx__NodeProto *n = add_node(b, "If", "c", "s");
  attr(n, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &seq_branch(kt, "t")->g;
  attr(n, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &seq_branch(ke, "e")->g;
  add_output(b, "s");
  return b;
}

/* An If decided at run time selects sequences of one length element by
 * element, and refuses two lengths. */
START_TEST(test_if_of_sequences) {
  Graph *g = onnxb_import(if_seq_model(2, 2), NULL);
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  ck_assert_int_eq(g->n_outputs, 2);
  ck_assert_str_eq(g->output_names[1], "s.1");
  onnxb_teardown(), onnxb_setup();
  expect_error(if_seq_model(1, 2), NULL,
               "node 0 'n0' (If): output 1 is a sequence of 1 values in then_branch and a sequence of 2 in "
               "else_branch (or their types differ): with a condition computed at run time a sequence or "
               "optional must have one length and type");
}
END_TEST

static Suite *seq_suite(void) {
  Suite *s = suite_create("onnx_seq");
  TCase *tc = tcase_create("seq");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_add_test(tc, test_ops_resolved_at_import);
  tcase_add_test(tc, test_inputs_and_outputs_flatten);
  tcase_add_test(tc, test_positions_checked);
  tcase_add_test(tc, test_refusals_name_what);
  tcase_add_test(tc, test_if_of_sequences);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(seq_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
