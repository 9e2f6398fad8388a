/* Run-time lengths (ir/bounds.c, docs/onnx.md): NonZero, Compress,
 * NonMaxSuppression and Unique of values computed at run time, through the ops after them, to outputs
 * whose length only a run tells.  Models built here with protobuf-c run
 * on random inputs (about half of them selected, none, all) on the
 * reference interpreter and on emu, and are checked against direct
 * loops written here; the ops that would mix the padding into real rows
 * are refused by name; the length marks survive the IR text, and a plan
 * whose marks are wrong is refused at load. */
#include "check_quiet.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/onnx.h"
#include "include/dlcrt.h"
#include "ir/eval.h"
#include "onnxbuild.h"
#include "passes/stages.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "tests/testutil.h"

#define ctx onnxb_ctx
#define params onnxb_params

static Graph *must_import(Model *b) {
  Graph *g = onnxb_import(b, &(OnnxOptions){0});
  ck_assert_msg(g != NULL, "import failed:\n%s", diag_text(&ctx));
  return g;
}

static void expect_error(Model *b, const char *want) {
  Graph *g = onnxb_import(b, &(OnnxOptions){0});
  ck_assert_msg(g == NULL, "imported, expected an error with '%s'", want);
  ck_assert_msg(strstr(diag_text(&ctx), want), "messages lack '%s':\n%s", want, diag_text(&ctx));
}

static bool have_emu(void) {
  char why[256];
  RtDevice *dev = rt_emu_open(why, sizeof why);
  if (dev) rt_device_close(dev);
  return dev != NULL;
}

/* x [rows, cols]: each element in [-1, 1), but a share `positive` of
 * them above 0 (0: none, 1: all). */
static void fill(Tensor *x, double positive, uint64_t seed) {
  for (int64_t i = 0; i < ir_type_numel(&x->type); i++) {
    double u = (double)(test_splitmix64(&seed) >> 11) / (double)(1ull << 53);
    double mag = 0.05 + (double)(test_splitmix64(&seed) >> 11) / (double)(1ull << 53);
    ir_tensor_set(x, i, u < positive ? mag : -mag);
  }
}

/* The graph's visible outputs for x, by the reference interpreter (cut
 * to their run-time lengths) and on emu; the two must agree exactly in
 * shape and within 1e-6 in value.  Returns the reference's. */
static Tensor *run(Graph *g, Tensor *x) {
  const char *nm[1] = {"x"};
  TensorMap in = {1, nm, x};
  Tensor *want = calloc((size_t)g->n_outputs + 1, sizeof *want);
  char err[512];
  ck_assert_msg(ir_eval(g, &in, &params, want, err, sizeof err), "eval: %s", err);
  ck_assert_msg(ir_trim_outputs(g, want, err, sizeof err), "trim: %s", err);
  if (!have_emu()) return want;
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  test_nvrtc(cg.source, "sm_90");
  Tensor *got = test_run_emu(cg.plan, &params, &in);
  for (int o = 0; o < g->n_outputs; o++) {
    char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
    ck_assert_msg(ir_type_eq(&got[o].type, &want[o].type), "output %d: emu %s, the reference %s", o,
                  ir_type_str(&got[o].type, a, sizeof a), ir_type_str(&want[o].type, b, sizeof b));
    for (int64_t i = 0; i < ir_type_numel(&want[o].type); i++)
      ck_assert_msg(ir_tensor_get(&got[o], i) == ir_tensor_get(&want[o], i) ||
                        fabs(ir_tensor_get(&got[o], i) - ir_tensor_get(&want[o], i)) <= 1e-6 ||
                        (isnan(ir_tensor_get(&got[o], i)) && isnan(ir_tensor_get(&want[o], i))),
                    "output %d element %lld: emu %g, the reference %g", o, (long long)i, ir_tensor_get(&got[o], i),
                    ir_tensor_get(&want[o], i));
    ir_tensor_free(&got[o]);
  }
  free(got);
  return want;
}

static void free_outputs(Graph *g, Tensor *t) {
  for (int o = 0; o < g->n_outputs; o++) ir_tensor_free(&t[o]);
  free(t);
}

static const double shares[] = {0.5, 0, 1, 0.2};

/* x[i] > 0 through Relu, NonZero, Transpose and GatherND: 2 x at the
 * coordinates of the positive elements in row-major order, and those
 * coordinates ([2, n]); one length output serves both. */
START_TEST(test_nonzero_through_gather_nd) {
  /* 28 elements, and 844: more than the kernel's 256 threads have one each */
  const int64_t R = 4, C = _i % 2 ? 211 : 7;
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){R, C});
  add_init_f32(b, "two", 0, NULL, 1, (const float[]){2});
  add_node(b, "Relu", "x", "r");
  add_node(b, "NonZero", "r", "nz");
  attr_is(add_node(b, "Transpose", "nz", "idx"), "perm", 2, (const int64_t[]){1, 0});
  add_node(b, "GatherND", "x,idx", "picked");
  add_node(b, "Mul", "picked,two", "vals");
  add_output(b, "vals");
  add_output(b, "nz");
  Graph *g = must_import(b);
  ck_assert_int_eq(ir_visible_outputs(g), 2);
  ck_assert_int_eq(g->n_outputs, 3);
  int axis;
  ck_assert_int_eq(ir_output_length(g, 0, &axis), 2);
  ck_assert_int_eq(axis, 0);
  ck_assert_int_eq(ir_output_length(g, 1, &axis), 2);
  ck_assert_int_eq(axis, 1);
  ck_assert_str_eq(g->output_names[2], "vals:length");
  Tensor x;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_INPUT) ck_assert(ir_tensor_alloc(&x, &n->out[0].type));
  fill(&x, shares[_i], 40 + (uint64_t)_i);
  Tensor *y = run(g, &x);
  int64_t count = 0;
  for (int64_t i = 0; i < R * C; i++) count += ir_tensor_get(&x, i) > 0;
  ck_assert_int_eq(y[0].type.rank, 1);
  ck_assert_int_eq(y[0].type.dims[0], count);
  ck_assert_int_eq(y[1].type.dims[0], 2);
  ck_assert_int_eq(y[1].type.dims[1], count);
  ck_assert_int_eq(*(int64_t *)y[2].data, count);
  for (int64_t i = 0, j = 0; i < R * C; i++) {
    if (ir_tensor_get(&x, i) <= 0) continue;
    ck_assert_double_eq(ir_tensor_get(&y[0], j), 2 * ir_tensor_get(&x, i));
    ck_assert_int_eq(((int64_t *)y[1].data)[j], i / C);
    ck_assert_int_eq(((int64_t *)y[1].data)[count + j], i % C);
    j++;
  }
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Compress with a condition computed at run time: the rows whose sum is
 * positive (axis 0), softmaxed along the other axis; and the columns
 * whose first element is positive (axis 1), averaged over the rows. */
START_TEST(test_compress_by_run_time_condition) {
  const int64_t R = 5, C = 6;
  for (int along = 0; along < 2; along++) {
    Model *b = model_new(17);
    add_input(b, "x", 2, (const int64_t[]){R, C});
    add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
    if (along == 0) {
      add_init_i64(b, "ax", 1, (const int64_t[]){1});
      attr_i(add_node(b, "ReduceSum", "x,ax", "s"), "keepdims", 0);
      add_node(b, "Greater", "s,zero", "c");
      attr_i(add_node(b, "Compress", "x,c", "rows"), "axis", 0);
      attr_i(add_node(b, "Softmax", "rows", "y"), "axis", 1);
    } else {
      add_init_raw(b, "first", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, (const int64_t[]){0}, 8);
      attr_i(add_node(b, "Gather", "x,first", "row0"), "axis", 0);
      add_node(b, "Greater", "row0,zero", "c");
      attr_i(add_node(b, "Compress", "x,c", "cols"), "axis", 1);
      Onnx__NodeProto *mean = add_node(b, "ReduceMean", "cols", "y");
      attr_is(mean, "axes", 1, (const int64_t[]){0});
      attr_i(mean, "keepdims", 0);
    }
    add_output(b, "y");
    Graph *g = must_import(b);
    Tensor x;
    for (Node *n = g->first; n; n = n->next)
      if (n->op == OP_INPUT) ck_assert(ir_tensor_alloc(&x, &n->out[0].type));
    fill(&x, shares[_i], 70 + (uint64_t)(2 * _i + along));
    Tensor *y = run(g, &x);
    int64_t k = 0;
    if (along == 0) {
      for (int64_t r = 0; r < R; r++) {
        double s = 0, z = 0;
        for (int64_t c = 0; c < C; c++) s += ir_tensor_get(&x, r * C + c);
        if (!(s > 0)) continue;
        for (int64_t c = 0; c < C; c++) z += exp(ir_tensor_get(&x, r * C + c));
        for (int64_t c = 0; c < C; c++)
          ck_assert_double_eq_tol(ir_tensor_get(&y[0], k * C + c), exp(ir_tensor_get(&x, r * C + c)) / z, 1e-6);
        k++;
      }
      ck_assert(y[0].type.rank == 2 && y[0].type.dims[0] == k && y[0].type.dims[1] == C);
    } else {
      for (int64_t c = 0; c < C; c++) {
        if (!(ir_tensor_get(&x, c) > 0)) continue;
        double m = 0;
        for (int64_t r = 0; r < R; r++) m += ir_tensor_get(&x, r * C + c) / (double)R;
        ck_assert_double_eq_tol(ir_tensor_get(&y[0], k), m, 1e-6);
        k++;
      }
      ck_assert(y[0].type.rank == 1 && y[0].type.dims[0] == k);
    }
    free_outputs(g, y);
    ir_tensor_free(&x);
    pool_free();
  }
}
END_TEST

/* Unique of a value computed at run time, sorted and not, with repeats,
 * NaNs (one value) and -0.0 (0.0): the values, first places, inverse and
 * counts against numpy.unique's, on both backends; the inverse keeps its
 * whole length. */
START_TEST(test_unique_at_run_time) {
  const float xs[10] = {2, -0.0f, NAN, 1, 0, 2, NAN, -3, 1, 2};
  /* sorted: -3, 0, 1, 2, nan; unsorted: 2, 0, nan, 1, -3 */
  const double want_y[2][5] = {{2, 0, NAN, 1, -3}, {-3, 0, 1, 2, NAN}};
  const int64_t want_first[2][5] = {{0, 1, 2, 3, 7}, {7, 1, 3, 0, 2}};
  const int64_t want_inv[2][10] = {{0, 1, 2, 3, 1, 0, 2, 4, 3, 0}, {3, 1, 4, 2, 1, 3, 4, 0, 2, 3}};
  const int64_t want_cnt[2][5] = {{3, 2, 2, 2, 1}, {1, 2, 2, 3, 2}};
  int sorted = _i;
  Model *b = model_new(11);
  add_input(b, "x", 2, (const int64_t[]){2, 5});
  attr_i(add_node(b, "Unique", "x", "y,first,inverse,counts"), "sorted", sorted);
  add_output(b, "y");
  add_output(b, "first");
  add_output(b, "inverse");
  add_output(b, "counts");
  Graph *g = must_import(b);
  ck_assert_int_eq(ir_visible_outputs(g), 4);
  ck_assert_int_eq(ir_output_length(g, 2, NULL), -1);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {2, 5}}));
  memcpy(x.data, xs, sizeof xs);
  Tensor *y = run(g, &x);
  ck_assert_int_eq(y[0].type.dims[0], 5);
  ck_assert_int_eq(y[2].type.dims[0], 10);
  for (int k = 0; k < 5; k++) {
    double got = ir_tensor_get(&y[0], k);
    ck_assert_msg(isnan(want_y[sorted][k]) ? isnan(got) : got == want_y[sorted][k], "y[%d] = %g", k, got);
    ck_assert_int_eq(((int64_t *)y[1].data)[k], want_first[sorted][k]);
    ck_assert_int_eq(((int64_t *)y[3].data)[k], want_cnt[sorted][k]);
  }
  for (int i = 0; i < 10; i++) ck_assert_int_eq(((int64_t *)y[2].data)[i], want_inv[sorted][i]);
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Unique over an axis: the columns of x [3, 4] (A, B, A, C; sorted
 * B < C < A), sorted and not, on both backends. */
START_TEST(test_unique_over_an_axis) {
  const float xs[12] = {1, 0, 1, 1, 2, 5, 2, 2, 3, 1, 3, -1};
  const float cols[3][3] = {{1, 2, 3}, {0, 5, 1}, {1, 2, -1}}; /* A, B, C */
  const int order[2][3] = {{0, 1, 2}, {1, 2, 0}};              /* unsorted: A B C; sorted: B C A */
  const int64_t want_first[2][3] = {{0, 1, 3}, {1, 3, 0}}, want_inv[2][4] = {{0, 1, 0, 2}, {2, 0, 2, 1}};
  const int64_t want_cnt[2][3] = {{2, 1, 1}, {1, 1, 2}};
  int sorted = _i;
  Model *b = model_new(11);
  add_input(b, "x", 2, (const int64_t[]){3, 4});
  Onnx__NodeProto *u = add_node(b, "Unique", "x", "y,first,inverse,counts");
  attr_i(u, "sorted", sorted);
  attr_i(u, "axis", -1);
  add_output(b, "y");
  add_output(b, "first");
  add_output(b, "inverse");
  add_output(b, "counts");
  Graph *g = must_import(b);
  int axis;
  ck_assert_int_eq(ir_output_length(g, 0, &axis), 4);
  ck_assert_int_eq(axis, 1);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {3, 4}}));
  memcpy(x.data, xs, sizeof xs);
  Tensor *y = run(g, &x);
  ck_assert(y[0].type.rank == 2 && y[0].type.dims[0] == 3 && y[0].type.dims[1] == 3);
  for (int c = 0; c < 3; c++) {
    for (int r = 0; r < 3; r++) ck_assert_double_eq(ir_tensor_get(&y[0], r * 3 + c), cols[order[sorted][c]][r]);
    ck_assert_int_eq(((int64_t *)y[1].data)[c], want_first[sorted][c]);
    ck_assert_int_eq(((int64_t *)y[3].data)[c], want_cnt[sorted][c]);
  }
  for (int i = 0; i < 4; i++) ck_assert_int_eq(((int64_t *)y[2].data)[i], want_inv[sorted][i]);
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Unique over an axis with NaNs: the columns of x [2, 6] are A (1, 2),
 * N (nan, 3), A, N, Z (0, -0) and A.  As numpy.unique(x, axis=1): the
 * two N columns stay apart (NaN != NaN), after the columns below them
 * and in their order; -0 is 0. */
START_TEST(test_unique_rows_with_nan) {
  const float xs[12] = {1, NAN, 1, NAN, 0, 1, 2, 3, 2, 3, -0.0f, 2};
  const int64_t want_first[2][4] = {{0, 1, 3, 4}, {4, 0, 1, 3}};
  const int64_t want_inv[2][6] = {{0, 1, 0, 2, 3, 0}, {1, 2, 1, 3, 0, 1}};
  const int64_t want_cnt[2][4] = {{3, 1, 1, 1}, {1, 3, 1, 1}};
  int sorted = _i;
  Model *b = model_new(11);
  add_input(b, "x", 2, (const int64_t[]){2, 6});
  Onnx__NodeProto *u = add_node(b, "Unique", "x", "y,first,inverse,counts");
  attr_i(u, "sorted", sorted);
  attr_i(u, "axis", 1);
  add_output(b, "y");
  add_output(b, "first");
  add_output(b, "inverse");
  add_output(b, "counts");
  Graph *g = must_import(b);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {2, 6}}));
  memcpy(x.data, xs, sizeof xs);
  Tensor *y = run(g, &x);
  ck_assert(y[0].type.rank == 2 && y[0].type.dims[0] == 2 && y[0].type.dims[1] == 4);
  for (int c = 0; c < 4; c++) {
    int64_t from = want_first[sorted][c];
    ck_assert_int_eq(((int64_t *)y[1].data)[c], from);
    ck_assert_int_eq(((int64_t *)y[3].data)[c], want_cnt[sorted][c]);
    for (int r = 0; r < 2; r++) {
      double got = ir_tensor_get(&y[0], r * 4 + c), want = xs[r * 6 + from];
      ck_assert_msg(isnan(want) ? isnan(got) : got == want, "y[%d][%d] = %g", r, c, got);
    }
  }
  for (int i = 0; i < 6; i++) ck_assert_int_eq(((int64_t *)y[2].data)[i], want_inv[sorted][i]);
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Two masks of one condition (PyTorch exports each x[m] with a NonZero
 * of its own) share a count: x[m] * (x * x)[m] is x^3 where x > 0. */
START_TEST(test_one_mask_twice) {
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){3, 4});
  add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
  add_node(b, "Greater", "x,zero", "m");
  add_node(b, "Mul", "x,x", "sq");
  const char *src[2] = {"x", "sq"}, *nz[2] = {"nz0", "nz1"}, *idx[2] = {"idx0", "idx1"}, *val[2] = {"v0", "v1"};
  for (int k = 0; k < 2; k++) {
    add_node(b, "NonZero", "m", nz[k]);
    attr_is(add_node(b, "Transpose", nz[k], idx[k]), "perm", 2, (const int64_t[]){1, 0});
    char ins[16];
    snprintf(ins, sizeof ins, "%s,%s", src[k], idx[k]);
    add_node(b, "GatherND", ins, val[k]);
  }
  add_node(b, "Mul", "v0,v1", "cube");
  add_output(b, "cube");
  Graph *g = must_import(b);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {3, 4}}));
  fill(&x, 0.5, 11);
  Tensor *y = run(g, &x);
  for (int64_t i = 0, j = 0; i < 12; i++) {
    double v = ir_tensor_get(&x, i);
    if (v > 0) ck_assert_double_eq_tol(ir_tensor_get(&y[0], j++), v * v * v, 1e-6);
  }
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Shapes of run-time length, as torchvision's detectors export them:
 * v = 2 x[x > 0]; n = Shape(v)[0]; ConstantOfShape(Shape(v)) + v,
 * TopK of v with K = min(3, n) (values and indices), Range(0, n),
 * Size(v), v[:2], Expand of a scalar to Shape(v), an If whose then
 * branch (n == 0) is empty, NonZero(v > 0.3) of v's real rows, and
 * Concat(v, [7, 8, 9], v), real rows first, v[:n - 1] and v at the
 * TopK's indices; each
 * of its run-time length, against direct loops, with none selected, all
 * and some. */
START_TEST(test_shapes_of_run_time_length) {
  const int64_t R = 3, C = 5;
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){R, C});
  add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
  add_init_f32(b, "two", 0, NULL, 1, (const float[]){2});
  add_init_i64(b, "three", 1, (const int64_t[]){3});
  const int64_t zero_i = 0, one_i = 1;
  add_init_raw(b, "at0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &zero_i, 8);
  add_init_raw(b, "i0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &zero_i, 8);
  add_init_raw(b, "i1", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &one_i, 8);
  add_init_i64(b, "s0", 1, (const int64_t[]){0});
  add_init_i64(b, "s2", 1, (const int64_t[]){2});
  add_node(b, "Greater", "x,zero", "m");
  add_node(b, "NonZero", "m", "nz");
  attr_is(add_node(b, "Transpose", "nz", "idx"), "perm", 2, (const int64_t[]){1, 0});
  add_node(b, "GatherND", "x,idx", "picked");
  add_node(b, "Mul", "picked,two", "v");
  add_node(b, "Shape", "v", "shape");
  add_node(b, "ConstantOfShape", "shape", "zeros");
  add_node(b, "Add", "v,zeros", "v_plus");
  add_node(b, "Gather", "shape,at0", "n");
  add_node(b, "Unsqueeze", "n,s0", "n1");
  add_node(b, "Concat", "three,n1", "cand");
  attr_i(b->g.node[b->g.n_node - 1], "axis", 0);
  attr_i(add_node(b, "ReduceMin", "cand", "kmin"), "keepdims", 1);
  add_node(b, "TopK", "v,kmin", "top,top_at");
  add_node(b, "Range", "i0,n,i1", "iota");
  add_node(b, "Size", "v", "size");
  add_node(b, "Slice", "v,s0,s2", "head");
  add_node(b, "Expand", "two,shape", "twos");
  add_node(b, "Equal", "size,i0", "empty");
  Model *t = model_new(17);
  add_init_raw(t, "none", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (const int64_t[]){0}, NULL, 0);
  add_node(t, "Identity", "none", "t_out");
  add_output(t, "t_out");
  Model *e = model_new(17);
  add_node(e, "Mul", "v,two", "e_out");
  add_output(e, "e_out");
  Onnx__NodeProto *nif = add_node(b, "If", "empty", "chosen");
  attr(nif, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &t->g;
  attr(nif, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = &e->g;
  add_init_f32(b, "third", 0, NULL, 1, (const float[]){0.3f});
  add_node(b, "Greater", "v,third", "big");
  add_node(b, "NonZero", "big", "big_at");
  add_node(b, "Gather", "v,top_at", "top_again"); /* padded indices into a padded axis */
  add_init_i64(b, "one1", 1, (const int64_t[]){1});
  add_node(b, "Sub", "n1,one1", "n_less");
  add_node(b, "Slice", "v,s0,n_less", "but_last");
  add_init_f32(b, "seven", 1, (const int64_t[]){3}, 3, (const float[]){7, 8, 9});
  attr_i(add_node(b, "Concat", "v,seven,v", "joined"), "axis", 0);
  const char *outs[] = {"v_plus", "top", "top_at", "iota", "size", "head", "twos", "chosen", "big_at", "joined", "but_last", "top_again"};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) add_output(b, outs[i]);
  Graph *g = must_import(b);
  ck_assert_int_eq(ir_visible_outputs(g), 12);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {R, C}}));
  fill(&x, shares[_i], 70 + (uint64_t)_i);
  Tensor *y = run(g, &x);
  double v[15];
  int64_t n = 0;
  for (int64_t i = 0; i < R * C; i++)
    if (ir_tensor_get(&x, i) > 0) v[n++] = 2 * ir_tensor_get(&x, i);
  int64_t k = n < 3 ? n : 3, head = n < 2 ? n : 2;
  const int64_t want_len[] = {n, k, k, n, -1, head, n, n};
  for (int o = 0; o < 8; o++)
    if (want_len[o] >= 0) {
      ck_assert_int_eq(y[o].type.rank, 1);
      ck_assert_msg(y[o].type.dims[0] == want_len[o], "output %s: %lld rows, expected %lld", outs[o],
                    (long long)y[o].type.dims[0], (long long)want_len[o]);
    }
  ck_assert_int_eq(y[4].type.rank, 0);
  ck_assert_int_eq(*(int64_t *)y[4].data, n);
  bool used[15] = {false};
  for (int64_t i = 0; i < n; i++) {
    ck_assert_double_eq_tol(ir_tensor_get(&y[0], i), v[i], 1e-6);
    ck_assert_int_eq(((int64_t *)y[3].data)[i], i);
    ck_assert_double_eq(ir_tensor_get(&y[6], i), 2);
    ck_assert_double_eq_tol(ir_tensor_get(&y[7], i), 2 * v[i], 1e-6);
    if (i < head) ck_assert_double_eq_tol(ir_tensor_get(&y[5], i), v[i], 1e-6);
  }
  ck_assert_int_eq(y[11].type.dims[0], k);
  ck_assert_int_eq(y[10].type.dims[0], n > 0 ? n - 1 : 0); /* v[:n - 1] */
  for (int64_t i = 0; i + 1 < n; i++) ck_assert_double_eq_tol(ir_tensor_get(&y[10], i), v[i], 1e-6);
  ck_assert_int_eq(y[9].type.dims[0], 2 * n + 3); /* the concat: real rows first */
  for (int64_t i = 0; i < n; i++) {
    ck_assert_double_eq_tol(ir_tensor_get(&y[9], i), v[i], 1e-6);
    ck_assert_double_eq_tol(ir_tensor_get(&y[9], n + 3 + i), v[i], 1e-6);
  }
  for (int64_t i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&y[9], n + i), 7 + i);
  int64_t m = 0; /* NonZero of v: of its real rows alone */
  for (int64_t i = 0; i < n; i++)
    if (v[i] > 0.3f) ck_assert_int_eq(((int64_t *)y[8].data)[m++], i);
  ck_assert_int_eq(y[8].type.rank, 2);
  ck_assert_int_eq(y[8].type.dims[1], m);
  for (int64_t r = 0; r < k; r++) { /* the largest first, ties to the lower index */
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
      if (!used[i] && (best < 0 || v[i] > v[best])) best = i;
    used[best] = true;
    ck_assert_double_eq_tol(ir_tensor_get(&y[1], r), v[best], 1e-6);
    ck_assert_double_eq_tol(ir_tensor_get(&y[11], r), v[best], 1e-6);
    ck_assert_int_eq(((int64_t *)y[2].data)[r], best);
  }
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* What torchvision's Faster R-CNN does with rows of run-time length:
 * rows = x[x.max(1) > 0]; rows.reshape(-1) (the length times the row's
 * size); zeros.scatter(0, index, 10 rows) of an index expanded to the
 * rows' shape (MultiScaleRoIAlign's result[idx] = ...); rows + a column
 * index from Range(0, Shape(rows)[1]) expanded to Shape(rows); against
 * direct loops. */
START_TEST(test_detector_patterns) {
  const int64_t R = 4, C = 3;
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){R, C});
  add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
  add_init_f32(b, "ten", 0, NULL, 1, (const float[]){10});
  add_init_i64(b, "flat_shape", 1, (const int64_t[]){-1});
  add_init_i64(b, "col_shape", 2, (const int64_t[]){-1, 1});
  add_init_i64(b, "row_shape", 2, (const int64_t[]){1, -1});
  const int64_t zero_i = 0, one_i = 1;
  add_init_raw(b, "i0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &zero_i, 8);
  add_init_raw(b, "i1", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &one_i, 8);
  Onnx__NodeProto *mx = add_node(b, "ReduceMax", "x", "best");
  attr_is(mx, "axes", 1, (const int64_t[]){1});
  attr_i(mx, "keepdims", 0);
  add_node(b, "Greater", "best,zero", "m");
  add_node(b, "NonZero", "m", "nz");
  add_node(b, "Reshape", "nz,flat_shape", "idx");
  add_node(b, "Gather", "x,idx", "rows");
  add_node(b, "Reshape", "rows,flat_shape", "flat");
  add_node(b, "Shape", "x", "xshape");
  add_node(b, "ConstantOfShape", "xshape", "zeros");
  add_node(b, "Shape", "rows", "rshape");
  add_node(b, "Reshape", "idx,col_shape", "idx_col");
  add_node(b, "Expand", "idx_col,rshape", "index");
  add_node(b, "Mul", "rows,ten", "upd");
  attr_i(add_node(b, "ScatterElements", "zeros,index,upd", "placed"), "axis", 0);
  add_node(b, "Gather", "rshape,i1", "cols");
  add_node(b, "Range", "i0,cols,i1", "col_at");
  add_node(b, "Reshape", "col_at,row_shape", "col_row");
  add_node(b, "Expand", "col_row,rshape", "col_each");
  attr_i(add_node(b, "Cast", "col_each", "col_f"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  add_node(b, "Add", "rows,col_f", "plus_col");
  add_output(b, "flat");
  add_output(b, "placed");
  add_output(b, "plus_col");
  Graph *g = must_import(b);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {R, C}}));
  fill(&x, shares[_i] * 0.4, 90 + (uint64_t)_i);
  Tensor *y = run(g, &x);
  int64_t n = 0, picked[4];
  for (int64_t r = 0; r < R; r++) {
    bool any = false;
    for (int64_t c = 0; c < C; c++) any |= ir_tensor_get(&x, r * C + c) > 0;
    if (any) picked[n++] = r;
  }
  ck_assert_int_eq(y[0].type.dims[0], n * C);
  ck_assert_int_eq(y[2].type.dims[0], n);
  for (int64_t j = 0; j < n; j++)
    for (int64_t c = 0; c < C; c++) {
      double v = ir_tensor_get(&x, picked[j] * C + c);
      ck_assert_double_eq_tol(ir_tensor_get(&y[0], j * C + c), v, 1e-6);
      ck_assert_double_eq_tol(ir_tensor_get(&y[2], j * C + c), v + (double)c, 1e-6);
    }
  for (int64_t r = 0, j = 0; r < R; r++) {
    bool kept = j < n && picked[j] == r;
    for (int64_t c = 0; c < C; c++)
      ck_assert_double_eq_tol(ir_tensor_get(&y[1], r * C + c), kept ? 10 * ir_tensor_get(&x, r * C + c) : 0, 1e-5);
    j += kept;
  }
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* Counted from the back of a run-time length, not of its bound:
 * v = x[x > 0] of x = [1, -1, 2, 3, -2, 4], v[-1] (Gather) and v[:-1]
 * (Slice); a K of two values is refused. */
START_TEST(test_from_the_back) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){6});
  add_init_f32(b, "zero", 0, NULL, 1, (const float[]){0});
  const int64_t minus_one = -1;
  add_init_raw(b, "last_at", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, &minus_one, 8);
  add_init_i64(b, "s0", 1, (const int64_t[]){0});
  add_init_i64(b, "e1", 1, (const int64_t[]){-1});
  add_node(b, "Greater", "x,zero", "m");
  add_node(b, "NonZero", "m", "nz");
  add_init_i64(b, "flat", 1, (const int64_t[]){-1});
  add_node(b, "Reshape", "nz,flat", "idx");
  add_node(b, "Gather", "x,idx", "v");
  add_node(b, "Gather", "v,last_at", "last");
  add_node(b, "Slice", "v,s0,e1", "but_last");
  add_output(b, "last");
  add_output(b, "but_last");
  Graph *g = must_import(b);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 1, .dims = {6}}));
  const float xs[6] = {1, -1, 2, 3, -2, 4};
  memcpy(x.data, xs, sizeof xs);
  Tensor *y = run(g, &x);
  ck_assert_double_eq(ir_tensor_get(&y[0], 0), 4);
  ck_assert_int_eq(y[1].type.dims[0], 3);
  for (int i = 0; i < 3; i++) ck_assert_double_eq(ir_tensor_get(&y[1], i), i + 1);
  free_outputs(g, y);
  ir_tensor_free(&x);
  pool_free();
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){6});
  add_init_i64(b, "two_ks", 2, (const int64_t[]){1, 2});
  add_node(b, "TopK", "x,two_ks", "top,top_at");
  add_output(b, "top");
  expect_error(b, "TopK's K must hold one value, not 2");
}
END_TEST

/* Reductions over the run-time length read the real rows alone (the
 * padding masked to the reduction's identity): sum, mean (over the
 * count), max, min, argmax, softmax and top-1 of x[x > 0.3], and the product
 * of the coordinates with their transpose, which contracts the length;
 * against direct loops, with none selected too. */
START_TEST(test_reductions_over_the_length) {
  const int64_t R = 5, C = 6;
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){R, C});
  add_init_f32(b, "cut", 0, NULL, 1, (const float[]){0.3f});
  add_node(b, "Greater", "x,cut", "mask");
  add_node(b, "NonZero", "mask", "nz");
  attr_is(add_node(b, "Transpose", "nz", "idx"), "perm", 2, (const int64_t[]){1, 0});
  add_node(b, "GatherND", "x,idx", "v");
  const char *reduce[4] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}, *names[4] = {"sum", "mean", "max", "min"};
  for (int k = 0; k < 4; k++) attr_i(add_node(b, reduce[k], "v", names[k]), "keepdims", 0);
  attr_i(add_node(b, "ArgMax", "v", "arg"), "keepdims", 0);
  attr_i(add_node(b, "Softmax", "v", "soft"), "axis", 0);
  add_init_i64(b, "one", 1, (const int64_t[]){1});
  attr_i(add_node(b, "TopK", "v,one", "best,best_at"), "axis", 0);
  attr_i(add_node(b, "Cast", "nz", "f"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  attr_is(add_node(b, "Transpose", "f", "ft"), "perm", 2, (const int64_t[]){1, 0});
  add_node(b, "MatMul", "f,ft", "gram");
  const char *outs[8] = {"sum", "mean", "max", "min", "arg", "soft", "gram", "best"};
  for (int k = 0; k < 8; k++) add_output(b, outs[k]);
  Graph *g = must_import(b);
  ck_assert_int_eq(ir_visible_outputs(g), 8);
  int axis;
  ck_assert_int_eq(ir_output_length(g, 5, &axis), 8); /* softmax keeps the length */
  ck_assert_int_eq(ir_output_length(g, 0, NULL), -1);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 2, .dims = {R, C}}));
  fill(&x, shares[_i], 90 + (uint64_t)_i);
  Tensor *y = run(g, &x);
  double sum = 0, top = -INFINITY, low = INFINITY, z = 0, gram[4] = {0};
  int64_t n = 0, arg = 0;
  for (int64_t i = 0; i < R * C; i++) {
    double v = ir_tensor_get(&x, i);
    if (!(v > 0.3f)) continue;
    if (v > top) top = v, arg = n;
    low = fmin(low, v), sum += v, z += exp(v);
    double c[2] = {(double)(i / C), (double)(i % C)};
    for (int p = 0; p < 4; p++) gram[p] += c[p / 2] * c[p % 2];
    n++;
  }
  ck_assert_double_eq_tol(ir_tensor_get(&y[0], 0), sum, 1e-5);
  if (n)
    ck_assert_double_eq_tol(ir_tensor_get(&y[1], 0), sum / (double)n, 1e-5);
  else
    ck_assert(isnan(ir_tensor_get(&y[1], 0)));
  ck_assert_double_eq(ir_tensor_get(&y[2], 0), n ? top : -INFINITY);
  ck_assert_double_eq(ir_tensor_get(&y[3], 0), n ? low : INFINITY);
  if (n) ck_assert_int_eq(*(int64_t *)y[4].data, arg);
  ck_assert_int_eq(y[5].type.dims[0], n);
  for (int64_t i = 0, j = 0; i < R * C; i++)
    if (ir_tensor_get(&x, i) > 0.3f) ck_assert_double_eq_tol(ir_tensor_get(&y[5], j++), exp(ir_tensor_get(&x, i)) / z, 1e-6);
  for (int p = 0; p < 4; p++) ck_assert_double_eq_tol(ir_tensor_get(&y[6], p), gram[p], 1e-3);
  if (n) ck_assert_double_eq(ir_tensor_get(&y[7], 0), top); /* the top 1 of the real rows */
  free_outputs(g, y);
  ir_tensor_free(&x);
}
END_TEST

/* What would mix the padding into real rows, or needs the length as a
 * shape, is refused and named. */
START_TEST(test_refusals) {
  Model *b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){2, 3});
  add_node(b, "NonZero", "x", "nz");
  add_node(b, "Neg", "x", "neg");
  add_node(b, "NonZero", "neg", "nz2");
  attr_i(add_node(b, "Concat", "nz,nz2", "both"), "axis", 0);
  add_output(b, "both");
  expect_error(b, "concat: operand 1 has a length known only at run time on axis 1 (a NonZero's, Compress's, "
                  "NonMaxSuppression's or Unique's result), which is not supported here: another operand's length is "
                  "another count");
  pool_free();
  /* x[mask] + y, y of the bound's length: ONNX would need the count to be
   * that length (or 1, broadcast) */
  b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){6});
  add_node(b, "NonZero", "x", "nz");
  add_init_i64(b, "six", 1, (const int64_t[]){6});
  add_node(b, "Reshape", "nz,six", "idx");
  add_node(b, "Gather", "x,idx", "picked");
  add_node(b, "Add", "picked,x", "sum");
  add_output(b, "sum");
  expect_error(b, "add: operand 0 has a length known only at run time on axis 0");
  ck_assert_msg(strstr(diag_text(&ctx), "another operand has that axis at its full size"), "%s", diag_text(&ctx));
  pool_free();
  b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){2, 3});
  add_node(b, "NonZero", "x", "nz");
  attr_i(add_node(b, "Cast", "nz", "f"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  attr_i(add_node(b, "LayerNormalization", "f,g", "ln"), "axis", 1);
  add_init_f32(b, "g", 1, (const int64_t[]){6}, 6, (const float[]){1, 1, 1, 1, 1, 1});
  add_output(b, "ln");
  expect_error(b, "layernorm: operand 0 has a length known only at run time on axis 1");
  pool_free();
  b = model_new(17);
  add_input(b, "x", 2, (const int64_t[]){2, 3});
  add_node(b, "NonZero", "x", "nz");
  add_node(b, "Shape", "nz", "s");
  add_init_i64(b, "ten", 1, (const int64_t[]){10});
  add_node(b, "Sub", "ten,s", "left");
  add_node(b, "ConstantOfShape", "left", "c");
  add_output(b, "c");
  expect_error(b, "node 3 'n3' (ConstantOfShape): the shape computed at run time from a run-time length is not "
                  "supported: its element 0 shrinks as the length grows");
  pool_free();
  b = model_new(11);
  add_input(b, "x", 2, (const int64_t[]){0, 3});
  attr_i(add_node(b, "Unique", "x", "y"), "axis", 1);
  add_output(b, "y");
  expect_error(b, "node 0 'n0' (Unique): Unique over an axis of an empty tensor is not supported");
}
END_TEST

/* A graph whose run-time lengths end inside it (the sum of a concat of
 * real rows) prints `bounded`, so that parsing it back does not rewrite
 * the rewritten concat again: the text round-trips and the sum is the
 * same. */
START_TEST(test_bounded_text) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){6});
  add_init_i64(b, "flat", 1, (const int64_t[]){-1});
  add_node(b, "NonZero", "x", "nz");
  add_node(b, "Reshape", "nz,flat", "idx");
  add_node(b, "Gather", "x,idx", "v");
  attr_i(add_node(b, "Concat", "v,v", "vv"), "axis", 0);
  attr_i(add_node(b, "ReduceSum", "vv", "sum"), "keepdims", 0);
  add_output(b, "sum");
  Graph *g = must_import(b);
  char *text = ir_print_text(g);
  ck_assert_msg(strstr(text, "graph main bounded {") || strstr(text, " bounded {\n"), "%s", text);
  Graph *copy = ir_copy(g, "copy.ir");
  ck_assert_msg(copy && ir_verify(copy), "%s", diag_text(&ctx));
  char *again = ir_print_text(copy);
  ck_assert_str_eq(text, again);
  free(again);
  free(text);
  Tensor x;
  ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 1, .dims = {6}}));
  const float xs[6] = {1, 0, 2, 0, 0, 4};
  memcpy(x.data, xs, sizeof xs);
  Tensor *y = run(copy, &x);
  ck_assert_double_eq(ir_tensor_get(&y[0], 0), 14);
  free_outputs(copy, y);
  ir_tensor_free(&x);
}
END_TEST

/* The marks print and parse back, the verifier checks them, and a plan
 * whose marks are wrong does not load. */
START_TEST(test_marks_in_text_and_plan) {
  Model *b = model_new(17);
  add_input(b, "x", 1, (const int64_t[]){5});
  add_node(b, "NonZero", "x", "nz");
  add_output(b, "nz");
  Graph *g = must_import(b);
  char *text = ir_print_text(g);
  ck_assert_msg(strstr(text, "as \"nz\" length 1 \"nz:length\", %"), "%s", text);
  Graph *copy = ir_copy(g, "copy.ir");
  ck_assert_msg(copy && ir_verify(copy), "%s", diag_text(&ctx));
  char *again = ir_print_text(copy);
  ck_assert_str_eq(text, again);
  free(again);
  /* A length that is not an i64 scalar. */
  char *bad = strdup(text);
  char *at = strstr(bad, "length 1 \"nz:length\"");
  memcpy(at, "length 1 \"nz\"       ", strlen("length 1 \"nz:length\""));
  Graph *broken = ir_parse(&ctx, ctx_add_file(&ctx, "bad.ir", bad, strlen(bad)));
  ck_assert(broken == NULL || !ir_verify(broken));
  ck_assert_msg(strstr(diag_text(&ctx), "output 0's length is output 0, which does not exist"), "%s",
                diag_text(&ctx));
  free(bad);
  free(text);
  /* Text written by hand, without marks, gets them as the importer gives them. */
  static const char hand[] = "graph hand {\n"
                             "  %0 = input {name=\"x\"} : f32[6]\n"
                             "  %1, %2 = nonzero %0 : i64[1, 6], i64[]\n"
                             "  return %1 as \"c\"\n"
                             "}\n";
  Graph *marked = ir_parse(&ctx, ctx_add_file(&ctx, "hand.ir", hand, strlen(hand)));
  ck_assert_msg(marked != NULL, "%s", diag_text(&ctx));
  int axis;
  ck_assert_int_eq(ir_output_length(marked, 0, &axis), 1);
  ck_assert_int_eq(axis, 1);

  /* Stages would lose the marks: refused. */
  StageSplit split;
  char why[512];
  ck_assert(!pass_stage_split_inference(g, 2, &split, why, sizeof why));
  ck_assert_msg(strstr(why, "a pipeline of stages does not run such a model"), "%s", why);

  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
  ck_assert_int_eq(cg.plan->outputs[0].length_output, 2);
  RtPlan p = *cg.plan;
  RtTensorDesc outs[2] = {cg.plan->outputs[0], cg.plan->outputs[1]};
  p.outputs = outs;
  outs[0].length_axis = 2;
  DlrtModel *m;
  ck_assert_int_eq(dlrt_open(&p, "emu", &m), DLRT_E_PLAN);
  ck_assert_msg(strstr(dlrt_error(m), "a run-time length on axis 2 of rank 2"), "%s", dlrt_error(m));
  dlrt_close(m);
  outs[0].length_axis = 1;
  outs[0].length_output = 1;
  ck_assert_int_eq(dlrt_open(&p, "emu", &m), DLRT_E_PLAN);
  ck_assert_msg(strstr(dlrt_error(m), "which is not another output"), "%s", dlrt_error(m));
  dlrt_close(m);
  if (!have_emu()) return;
  /* Read the right way, the length is this run's, and binding it is refused. */
  ck_assert_int_eq(dlrt_open(cg.plan, "emu", &m), DLRT_OK);
  ck_assert_int_eq(dlrt_num_outputs(m), 1);
  const float xs[5] = {0, 2, 0, 0, -1};
  ck_assert_int_eq(dlrt_set_input(m, 0, xs, sizeof xs), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  DlrtTensorInfo info;
  ck_assert_int_eq(dlrt_output_info(m, 0, &info), DLRT_OK);
  ck_assert(info.run_time_axis == 1 && info.dims[1] == 5);
  ck_assert_int_eq(dlrt_output_shape(m, 0, &info), DLRT_OK);
  ck_assert(info.dims[0] == 1 && info.dims[1] == 2 && info.nbytes == 16);
  int64_t got[2];
  ck_assert_int_eq(dlrt_get_output(m, 0, got, 40), DLRT_E_ARG);
  ck_assert_int_eq(dlrt_get_output(m, 0, got, sizeof got), DLRT_OK);
  ck_assert(got[0] == 1 && got[1] == 4);
  ck_assert_int_eq(dlrt_bind_output(m, 0, 0x1000), DLRT_E_ARG);
  dlrt_close(m);
}
END_TEST

/* NonMaxSuppression: ONNX's suppress_by_IOU example (two clusters and a
 * far box, the best of each kept), with max_output_boxes_per_class known
 * at import and given at run time; then random boxes in two batches and
 * three classes on both backends, reference and emu alike. */
START_TEST(test_nms) {
  const float boxes[24] = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101};
  const float scores[6] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
  for (int run_time_max = 0; run_time_max < 4; run_time_max++) {
    Model *b = model_new(11);
    add_input(b, "x", 3, (const int64_t[]){1, 1, 6});
    add_init_f32(b, "boxes", 3, (const int64_t[]){1, 6, 4}, 24, boxes);
    if (run_time_max == 1) {
      /* the most, computed from x: 3 */
      add_init_raw(b, "three", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, (const float[]){3}, 4);
      add_node(b, "ReduceMax", "x", "top");
      add_node(b, "Mul", "top,three", "t3");
      add_node(b, "Ceil", "t3", "c3");
      attr_i(add_node(b, "Cast", "c3", "m3"), "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
      add_node(b, "Reshape", "m3,one", "most");
      add_init_i64(b, "one", 1, (const int64_t[]){1});
    } else {
      /* 3, or as torchvision's export asks: INT64_MAX, which bounds nothing */
      add_init_i64(b, "most", 1, (const int64_t[]){run_time_max >= 2 ? INT64_MAX : 3});
    }
    add_init_f32(b, "iou", 1, (const int64_t[]){1}, 1, (const float[]){0.5f});
    add_init_f32(b, "floor", 1, (const int64_t[]){1}, 1, (const float[]){0});
    /* 3: no score threshold, and the far box's score -inf, which counts */
    add_node(b, "NonMaxSuppression", run_time_max == 3 ? "boxes,x,most,iou" : "boxes,x,most,iou,floor", "sel");
    add_output(b, "sel");
    Graph *g = must_import(b);
    Tensor x;
    ck_assert(ir_tensor_alloc(&x, &(TensorType){.dtype = TY_F32, .rank = 3, .dims = {1, 1, 6}}));
    memcpy(x.data, scores, sizeof scores);
    if (run_time_max == 3) ((float *)x.data)[5] = -INFINITY;
    Tensor *y = run(g, &x);
    ck_assert(y[0].type.rank == 2 && y[0].type.dims[0] == 3 && y[0].type.dims[1] == 3);
    const int64_t want[9] = {0, 0, 3, 0, 0, 0, 0, 0, 5};
    for (int i = 0; i < 9; i++) ck_assert_int_eq(((int64_t *)y[0].data)[i], want[i]);
    free_outputs(g, y);
    ir_tensor_free(&x);
    pool_free();
  }
  for (int centers = 0; centers < 2; centers++) {
    /* 9 boxes, and 600: more than the kernel's 256 threads, 300 kept at most */
    const int64_t B = 2, C = 3, N = centers ? 600 : 9, most = centers ? 300 : 4;
    Model *b = model_new(11);
    add_input(b, "x", 3, (const int64_t[]){B, N, 4});
    add_input(b, "s", 3, (const int64_t[]){B, C, N});
    add_init_i64(b, "most", 1, (const int64_t[]){most});
    add_init_f32(b, "iou", 1, (const int64_t[]){1}, 1, (const float[]){0.3f});
    add_init_f32(b, "floor", 1, (const int64_t[]){1}, 1, (const float[]){-0.5f});
    attr_i(add_node(b, "NonMaxSuppression", "x,s,most,iou,floor", "sel"), "center_point_box", centers);
    add_output(b, "sel");
    Graph *g = must_import(b);
    Tensor in[2];
    uint64_t seed = 7 + (uint64_t)centers;
    for (int k = 0; k < 2; k++) {
      int64_t dims[3] = {B, k ? C : N, k ? N : 4};
      ck_assert(ir_tensor_alloc(&in[k], &(TensorType){.dtype = TY_F32, .rank = 3, .dims = {dims[0], dims[1], dims[2]}}));
      for (int64_t i = 0; i < ir_type_numel(&in[k].type); i++) {
        double v = (double)(test_splitmix64(&seed) >> 11) / (double)(1ull << 53) * 2 - 1;
        ir_tensor_set(&in[k], i, centers && k == 0 && i % 4 >= 2 ? fabs(v) / 4 : v); /* widths and heights */
      }
    }
    /* a tie, broken by the lower box */
    ir_tensor_set(&in[1], 4, ir_tensor_get(&in[1], 2));
    const char *nm[2] = {"x", "s"};
    TensorMap im = {2, nm, in};
    Tensor want[2];
    char err[256];
    ck_assert_msg(ir_eval(g, &im, &params, want, err, sizeof err), "%s", err);
    ck_assert(ir_trim_outputs(g, want, err, sizeof err));
    int64_t rows = want[0].type.dims[0];
    ck_assert(rows >= B * C && rows <= B * C * most); /* every class keeps its best, at most `most` */
    if (have_emu()) {
      CgResult cg;
      ck_assert_msg(cg_compile(g, &cg), "codegen: %s", diag_text(&ctx));
      test_nvrtc(cg.source, "sm_90");
      Tensor *got = test_run_emu(cg.plan, &params, &im);
      ck_assert(ir_type_eq(&got[0].type, &want[0].type));
      ck_assert(memcmp(got[0].data, want[0].data, (size_t)rows * 3 * 8) == 0);
      for (int o = 0; o < g->n_outputs; o++) ir_tensor_free(&got[o]);
      free(got);
    }
    for (int o = 0; o < g->n_outputs; o++) ir_tensor_free(&want[o]);
    ir_tensor_free(&in[0]);
    ir_tensor_free(&in[1]);
    pool_free();
  }
}
END_TEST

static Suite *lengths_suite(void) {
  Suite *s = suite_create("onnx_lengths");
  TCase *tc = tcase_create("lengths");
  tcase_add_checked_fixture(tc, onnxb_setup, onnxb_teardown);
  tcase_set_timeout(tc, 120);
  int n = (int)(sizeof shares / sizeof *shares);
  tcase_add_loop_test(tc, test_nonzero_through_gather_nd, 0, n);
  tcase_add_loop_test(tc, test_compress_by_run_time_condition, 0, n);
  tcase_add_test(tc, test_nms);
  tcase_add_loop_test(tc, test_unique_at_run_time, 0, 2);
  tcase_add_loop_test(tc, test_unique_over_an_axis, 0, 2);
  tcase_add_loop_test(tc, test_unique_rows_with_nan, 0, 2);
  tcase_add_loop_test(tc, test_reductions_over_the_length, 0, (int)(sizeof shares / sizeof *shares));
  tcase_add_test(tc, test_one_mask_twice);
  tcase_add_loop_test(tc, test_shapes_of_run_time_length, 0, (int)(sizeof shares / sizeof *shares));
  tcase_add_loop_test(tc, test_detector_patterns, 0, (int)(sizeof shares / sizeof *shares));
  tcase_add_test(tc, test_from_the_back);
  tcase_add_test(tc, test_bounded_text);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_marks_in_text_and_plan);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(lengths_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
