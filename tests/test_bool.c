/* Check suite for the bool dtype and the ops with a bool result: what
 * ir_eval says they mean (NaN, broadcasting, casts), the IR text round
 * trip, the shape rules' and the language's errors, and codegen: every
 * op on emu byte for byte against ir_eval at -O0 and -O2 (NaN, inf and
 * signed zeros among the inputs), the generated source through NVRTC for
 * sm_80 and sm_90, a where/greater/mul chain fused into one kernel, and
 * bool tensors through .npy and safetensors. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/tensorio.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

/* Byte for byte, with the first difference in the message. */
static void expect_same(const Tensor *got, const Tensor *want, const char *what) {
  ck_assert(ir_type_eq(&got->type, &want->type));
  size_t es = (size_t)ir_dtype_size(want->type.dtype);
  for (int64_t i = 0, count = ir_type_numel(&want->type); i < count; i++)
    ck_assert_msg(memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) == 0,
                  "%s: element %lld: emu %.9g, ir_eval %.9g", what, (long long)i, ir_tensor_get(got, i),
                  ir_tensor_get(want, i));
}

static int launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_LAUNCH;
  return n;
}

/* text at -O0 and -O2: NVRTC compiles it, emu equals ir_eval exactly for
 * two input shifts.  n_launches (when given) gets each level's count. */
static void check_both(const char *text, const Fill *fills, int *n_launches) {
  for (int l = 0; l < 2; l++) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, text, 2 * l);
    test_nvrtc(j.cg.source, "sm_80");
    test_nvrtc(j.cg.source, "sm_90");
    for (int shift = 0; shift < 2; shift++) {
      Data d;
      make_inputs(j.g, fills, shift, &d);
      Tensor *want = eval_all(j.g, &d.inputs);
      Tensor *got = test_run_emu(j.cg.plan, NULL, &d.inputs);
      for (int i = 0; i < j.g->n_outputs; i++) {
        char what[96];
        snprintf(what, sizeof what, "-O%d output '%s'", 2 * l, j.g->output_names[i]);
        expect_same(&got[i], &want[i], what);
      }
      free_outputs(want, j.g->n_outputs);
      free_outputs(got, j.g->n_outputs);
      free_inputs(&d);
    }
    if (n_launches) n_launches[l] = launches(j.cg.plan);
    ctx_free(&c);
  }
}

/* ir_eval of text (parsed, not optimized) on the given inputs. */
static Tensor *eval_text(Ctx *c, const char *text, const Fill *fills, Graph **g) {
  Job j = compile_at(c, text, -1);
  Data d;
  make_inputs(j.g, fills, 0, &d);
  Tensor *out = eval_all(j.g, &d.inputs);
  free_inputs(&d);
  *g = j.g;
  return out;
}

static void expect_values(const Tensor *t, const double *want, int n, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++) {
    double v = ir_tensor_get(t, i);
    bool same = (isnan(want[i]) && isnan(v)) || v == want[i];
    ck_assert_msg(same, "%s[%d] is %g, expected %g", what, i, v, want[i]);
    if (t->type.dtype == TY_BOOL) ck_assert_uint_le(((const uint8_t *)t->data)[i], 1);
  }
}

/* ---- what the ops mean ---- */

START_TEST(eval_comparisons_and_nan) {
  static const char text[] = "graph cmp {\n"
                             "  %x = input {name=\"x\"} : f32[6]\n"
                             "  %y = input {name=\"y\"} : f32[6]\n"
                             "  %eq = equal %x, %y : bool[6]\n"
                             "  %ne = not_equal %x, %y : bool[6]\n"
                             "  %lt = less %x, %y : bool[6]\n"
                             "  %le = less_equal %x, %y : bool[6]\n"
                             "  %gt = greater %x, %y : bool[6]\n"
                             "  %ge = greater_equal %x, %y : bool[6]\n"
                             "  %nan = isnan %x : bool[6]\n"
                             "  %inf = isinf %x : bool[6]\n"
                             "  return %eq as \"eq\", %ne as \"ne\", %lt as \"lt\", %le as \"le\", %gt as \"gt\", "
                             "%ge as \"ge\", %nan as \"nan\", %inf as \"inf\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", NAN, 1, -INFINITY, 0.0, 2, INFINITY), FILL("y", NAN, NAN, -INFINITY, -0.0, 1, 3),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double eq[] = {0, 0, 1, 1, 0, 0}, ne[] = {1, 1, 0, 0, 1, 1};
  static const double lt[] = {0, 0, 0, 0, 0, 0}, le[] = {0, 0, 1, 1, 0, 0};
  static const double gt[] = {0, 0, 0, 0, 1, 1}, ge[] = {0, 0, 1, 1, 1, 1};
  static const double nan[] = {1, 0, 0, 0, 0, 0}, inf[] = {0, 0, 1, 0, 0, 1};
  const double *want[] = {eq, ne, lt, le, gt, ge, nan, inf};
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(r[i].type.dtype, TY_BOOL);
    expect_values(&r[i], want[i], 6, g->output_names[i]);
  }
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

START_TEST(eval_broadcasting_logic_and_where) {
  static const char text[] = "graph bc {\n"
                             "  %a = input {name=\"a\"} : bool[2, 1]\n"
                             "  %b = input {name=\"b\"} : bool[3]\n"
                             "  %x = input {name=\"x\"} : f32[3]\n"
                             "  %y = input {name=\"y\"} : f32[2, 1]\n"
                             "  %and = logical_and %a, %b : bool[2, 3]\n"
                             "  %or = logical_or %a, %b : bool[2, 3]\n"
                             "  %xor = logical_xor %a, %b : bool[2, 3]\n"
                             "  %not = logical_not %b : bool[3]\n"
                             "  %w = where %a, %x, %y : f32[2, 3]\n"
                             "  %w3 = where %xor, %x, %y : f32[2, 3]\n"
                             "  return %and as \"and\", %or as \"or\", %xor as \"xor\", %not as \"not\", %w as \"w\", "
                             "%w3 as \"w3\"\n"
                             "}\n";
  /* a = [[1], [0]], b = [1, 0, 1] */
  const Fill fills[] = {FILL("a", 1, 0), FILL("b", 1, 0, 1), FILL("x", 10, 20, 30), FILL("y", -1, -2),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double and[] = {1, 0, 1, 0, 0, 0}, or[] = {1, 1, 1, 1, 0, 1}, xor[] = {0, 1, 0, 1, 0, 1};
  static const double not[] = {0, 1, 0}, w[] = {10, 20, 30, -2, -2, -2}, w3[] = {-1, 20, -1, 10, -2, 30};
  const double *want[] = {and, or, xor, not, w, w3};
  const int n[] = {6, 6, 6, 3, 6, 6};
  for (int i = 0; i < 6; i++) expect_values(&r[i], want[i], n[i], g->output_names[i]);
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

/* Nonzero is true (NaN and -0.0 too: only a zero is false); a bool reads
 * back as 0 or 1. */
START_TEST(eval_casts) {
  static const char text[] = "graph casts {\n"
                             "  %x = input {name=\"x\"} : f32[7]\n"
                             "  %i = input {name=\"i\"} : i64[7]\n"
                             "  %xb = cast %x {to=bool} : bool[7]\n"
                             "  %ib = cast %i {to=bool} : bool[7]\n"
                             "  %bf = cast %xb {to=f32} : f32[7]\n"
                             "  %bh = cast %ib {to=f16} : f16[7]\n"
                             "  %bi = cast %xb {to=i32} : i32[7]\n"
                             "  return %xb as \"xb\", %ib as \"ib\", %bf as \"bf\", %bh as \"bh\", %bi as \"bi\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 0.0, -0.0, 0.5, NAN, -3, INFINITY, 1e-30), FILL("i", 0, 5, -1, 0, 1, 0, -7),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double xb[] = {0, 0, 1, 1, 1, 1, 1}, ib[] = {0, 1, 1, 0, 1, 0, 1};
  expect_values(&r[0], xb, 7, "xb");
  expect_values(&r[1], ib, 7, "ib");
  expect_values(&r[2], xb, 7, "bf");
  expect_values(&r[3], ib, 7, "bh");
  expect_values(&r[4], xb, 7, "bi");
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

/* The optimizer keeps what a cast to bool loses: cast(cast(q, bool), f32)
 * of an i8 is 0 or 1, not q. */
START_TEST(optimizer_keeps_bool_casts) {
  static const char text[] = "graph cc {\n"
                             "  %q = input {name=\"q\"} : i8[5]\n"
                             "  %b = cast %q {to=bool} : bool[5]\n"
                             "  %f = cast %b {to=f32} : f32[5]\n"
                             "  %x = input {name=\"x\"} : f32[5]\n"
                             "  %xb = cast %x {to=bool} : bool[5]\n"
                             "  %xi = cast %xb {to=i8} : i8[5]\n"
                             "  %xf = cast %xi {to=f32} : f32[5]\n"
                             "  return %f as \"f\", %xf as \"xf\"\n"
                             "}\n";
  const Fill fills[] = {FILL("q", 0, 3, -7, 1, 0), FILL("x", 0.25, 0, -2, NAN, 8), {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, 2);
  Data d;
  make_inputs(j.g, fills, 0, &d);
  Tensor *r = eval_all(j.g, &d.inputs);
  static const double f[] = {0, 1, 1, 1, 0}, xf[] = {1, 0, 1, 1, 1};
  expect_values(&r[0], f, 5, "f");
  expect_values(&r[1], xf, 5, "xf");
  free_outputs(r, 2);
  free_inputs(&d);
  ctx_free(&c);
}
END_TEST

/* ---- the text format and the shape rules ---- */

START_TEST(text_round_trip) {
  static const char text[] = "; dlcc IR\n"
                             "graph masks {\n"
                             "  %0 = input {name=\"m\"} : bool[2, 3]\n"
                             "  %1 = input {name=\"x\"} : f32[2, 3]\n"
                             "  %2 = const {value=1} : bool[]\n"
                             "  %3 = logical_xor %0, %2 : bool[2, 3]\n"
                             "  %4 = isinf %1 : bool[2, 3]\n"
                             "  %5 = less_equal %1, %1 : bool[2, 3]\n"
                             "  %6 = logical_or %4, %5 : bool[2, 3]\n"
                             "  %7 = where %3, %1, %1 : f32[2, 3]\n"
                             "  %8 = cast %6 {to=bool} : bool[2, 3]\n"
                             "  %9 = transpose %8 {perm=[1, 0]} : bool[3, 2]\n"
                             "  return %7 as \"y\", %9 as \"mask\"\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, -1);
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

/* The error the IR parser reports for one node line. */
static void expect_node_error(const char *line, const char *want) {
  char text[1024];
  snprintf(text, sizeof text,
           "graph e {\n  %%x = input {name=\"x\"} : f32[4]\n  %%b = input {name=\"b\"} : bool[4]\n%s\n"
           "  return %%r as \"r\"\n}\n",
           line);
  Ctx c;
  ctx_init(&c);
  Job j = {.text = text, .level = -1};
  ctx_guard(&c, run_job, &j);
  ck_assert_msg(!j.ok, "accepted: %s", line);
  ck_assert_msg(strstr(diag_text(&c), want), "for %s\nwanted: %s\ngot:\n%s", line, want, diag_text(&c));
  ctx_free(&c);
}

START_TEST(shape_errors) {
  expect_node_error("  %r = less %b, %b : bool[4]", "less: bool operands have no order");
  expect_node_error("  %r = add %b, %b : bool[4]", "add: operand 1 is bool[4], and bool is not a number (cast it first)");
  expect_node_error("  %r = where %x, %x, %x : f32[4]", "where: the condition (operand 1) must be bool, got f32[4]");
  expect_node_error("  %r = where %b, %x, %b : f32[4]", "where: dtype mismatch f32 vs bool");
  expect_node_error("  %r = logical_and %b, %x : bool[4]", "logical_and: operand 2 must be bool, got f32[4]");
  expect_node_error("  %r = logical_not %x : bool[4]", "logical_not: the operand must be bool, got f32[4]");
  expect_node_error("  %r = isnan %b : bool[4]", "isnan needs a floating-point input, got bool[4]");
  expect_node_error("  %r = equal %x, %b : bool[4]", "equal: dtype mismatch f32 vs bool");
  expect_node_error("  %r = greater %x, %x : f32[4]", "declared f32[4] but greater of these operands gives bool[4]");
  expect_node_error("  %r = reduce_sum %b {axes=[0]} : bool[]", "reduce_sum: operand 1 is bool[4], and bool is not a number");
}
END_TEST

/* ---- codegen: emu against ir_eval, NVRTC ---- */

START_TEST(emu_floats_every_op) {
  static const char text[] = "graph cmp {\n"
                             "  %x = input {name=\"x\"} : f32[4, 8]\n"
                             "  %y = input {name=\"y\"} : f32[8]\n"
                             "  %eq = equal %x, %y : bool[4, 8]\n"
                             "  %ne = not_equal %x, %y : bool[4, 8]\n"
                             "  %lt = less %x, %y : bool[4, 8]\n"
                             "  %le = less_equal %x, %y : bool[4, 8]\n"
                             "  %gt = greater %x, %y : bool[4, 8]\n"
                             "  %ge = greater_equal %x, %y : bool[4, 8]\n"
                             "  %nan = isnan %x : bool[4, 8]\n"
                             "  %inf = isinf %y : bool[8]\n"
                             "  %and = logical_and %lt, %inf : bool[4, 8]\n"
                             "  %or = logical_or %eq, %nan : bool[4, 8]\n"
                             "  %xor = logical_xor %le, %ge : bool[4, 8]\n"
                             "  %not = logical_not %ne : bool[4, 8]\n"
                             "  %w = where %gt, %x, %y : f32[4, 8]\n"
                             "  %c = cast %or {to=f32} : f32[4, 8]\n"
                             "  %cb = cast %x {to=bool} : bool[4, 8]\n"
                             "  return %and as \"and\", %xor as \"xor\", %not as \"not\", %w as \"w\", %c as \"c\", "
                             "%cb as \"cb\", %ne as \"ne\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", NAN, 1, -INFINITY, 0.0, 2, -0.0, 0.5, INFINITY, 1),
                        FILL("y", 1, NAN, -INFINITY, -0.0, 3, 0.0, INFINITY, 0.5), {NULL, NULL, 0}};
  check_both(text, fills, NULL);
}
END_TEST

/* f16 and i64 operands, bool operands of equal, where on bools, an
 * attention mask's where(equal(mask, 0), -inf, scores), moves of bools. */
START_TEST(emu_halves_ints_bools_and_moves) {
  static const char text[] = "graph mixed {\n"
                             "  %h = input {name=\"h\"} : f16[2, 3, 4]\n"
                             "  %k = input {name=\"k\"} : f16[4]\n"
                             "  %m = input {name=\"mask\"} : i64[2, 1, 4]\n"
                             "  %b = input {name=\"b\"} : bool[3, 1]\n"
                             "  %z = const {value=0} : i64[]\n"
                             "  %pad = equal %m, %z : bool[2, 1, 4]\n"
                             "  %ninf = const {value=-inf} : f16[]\n"
                             "  %s = where %pad, %ninf, %h : f16[2, 3, 4]\n"
                             "  %hk = less %h, %k : bool[2, 3, 4]\n"
                             "  %both = logical_and %hk, %b : bool[2, 3, 4]\n"
                             "  %same = equal %both, %pad : bool[2, 3, 4]\n"
                             "  %t = transpose %same {perm=[2, 0, 1]} : bool[4, 2, 3]\n"
                             "  %sl = slice %t {starts=[1, 0, 0], ends=[4, 2, 3], steps=[2, 1, 1]} : bool[2, 2, 3]\n"
                             "  %e = expand %b {shape=[2, 3, 4]} : bool[2, 3, 4]\n"
                             "  %pick = where %e, %same, %hk : bool[2, 3, 4]\n"
                             "  %cnt = cast %pick {to=i32} : i32[2, 3, 4]\n"
                             "  %hb = cast %h {to=bool} : bool[2, 3, 4]\n"
                             "  %bh = cast %b {to=f16} : f16[3, 1]\n"
                             "  %r = reshape %pick {shape=[6, 4]} : bool[6, 4]\n"
                             "  return %s as \"scores\", %sl as \"sl\", %cnt as \"cnt\", %hb as \"hb\", %bh as \"bh\", "
                             "%r as \"r\"\n"
                             "}\n";
  const Fill fills[] = {FILL("h", 0.5, -1, 0.0, NAN, 2, -0.0, 1e-3, -3), FILL("k", 0.25, -2, 1, 3),
                        FILL("mask", 0, 1, 1, 0, 1), FILL("b", 1, 0, 1, 1), {NULL, NULL, 0}};
  check_both(text, fills, NULL);
}
END_TEST

/* The brief's chain: a leaky relu written as where, one kernel at -O2. */
START_TEST(fused_where_chain_is_one_kernel) {
  static const char text[] = "graph leaky {\n"
                             "  %x = input {name=\"x\"} : f32[4, 300]\n"
                             "  %z = const {value=0} : f32[]\n"
                             "  %p = greater %x, %z : bool[4, 300]\n"
                             "  %s = const {value=0.1} : f32[]\n"
                             "  %m = mul %x, %s : f32[4, 300]\n"
                             "  %y = where %p, %x, %m : f32[4, 300]\n"
                             "  return %y as \"y\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", -1.5, 0.0, 2, NAN, -0.0, 3.25, -INFINITY), {NULL, NULL, 0}};
  int n[2];
  check_both(text, fills, n);
  ck_assert_int_eq(n[0], 3);
  ck_assert_int_eq(n[1], 1);
}
END_TEST

/* A mask in the loads of a reduction and a test in its store: still one
 * kernel. */
START_TEST(fused_mask_around_a_reduction) {
  static const char text[] = "graph masked {\n"
                             "  %s = input {name=\"s\"} : f32[2, 5, 7]\n"
                             "  %m = input {name=\"m\"} : bool[2, 1, 7]\n"
                             "  %low = const {value=-1000000000} : f32[]\n"
                             "  %w = where %m, %s, %low : f32[2, 5, 7]\n"
                             "  %mx = reduce_max %w {axes=[2], keepdims=1} : f32[2, 5, 1]\n"
                             "  %z = const {value=0} : f32[]\n"
                             "  %pos = greater %mx, %z : bool[2, 5, 1]\n"
                             "  return %pos as \"pos\"\n"
                             "}\n";
  const Fill fills[] = {FILL("s", -1, 2, -3, 0.5, -0.25, 4, -2, 1), FILL("m", 1, 0, 0, 1, 0, 0), {NULL, NULL, 0}};
  int n[2];
  check_both(text, fills, n);
  ck_assert_int_eq(n[1], 1);
}
END_TEST

/* ---- the language ---- */

typedef struct Lowered {
  const char *text;
  Graph *g;
} Lowered;

static int lower_job(Ctx *c, void *data) {
  Lowered *l = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", l->text, strlen(l->text));
  Program *p = fe_parse(c, f);
  l->g = p ? fe_lower(c, p, NULL) : NULL;
  if (l->g && !ir_verify(l->g)) l->g = NULL;
  return 0;
}

static Graph *lower_dl(Ctx *c, const char *text) {
  Lowered l = {.text = text};
  ck_assert_int_ne(ctx_guard(c, lower_job, &l), -1);
  return l.g;
}

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (Node *x = g->first; x; x = x->next) n += x->op == op;
  return n;
}

START_TEST(language_builtins) {
  static const char text[] = "model m(x: f32[8], mask: bool[8]) -> (y: f32[8], ok: bool[8]) {\n"
                             "  keep = logical_and(mask, logical_not(isnan(x)))\n"
                             "  y = where(keep, x, 0)\n"
                             "  y = where(greater_equal(y, 1.5), 1.5, y)\n"
                             "  ok = logical_or(equal(y, x), less(x, -2))\n"
                             "  return y, logical_xor(ok, isinf(x))\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_dl(&c, text);
  ck_assert_msg(g != NULL, "%s", diag_text(&c));
  ck_assert_int_eq(count_op(g, OP_WHERE), 2);
  ck_assert_int_eq(count_op(g, OP_LOGICAL_AND), 1);
  ck_assert_int_eq(count_op(g, OP_GREATER_EQUAL), 1);
  ck_assert_int_eq(count_op(g, OP_EQUAL), 1);
  ck_assert_int_eq(count_op(g, OP_LOGICAL_XOR), 1);
  ck_assert_int_eq(g->outputs[1]->type.dtype, TY_BOOL);
  /* == and != of bool tensors are equal and not_equal: their mask is a bool */
  Graph *g2 = lower_dl(&c, "model n(a: bool[4], b: bool[4]) -> bool[4] {\n  return (a == b) != a\n}\n");
  ck_assert_msg(g2 != NULL, "%s", diag_text(&c));
  ck_assert_int_eq(count_op(g2, OP_EQUAL), 1);
  ck_assert_int_eq(count_op(g2, OP_NOT_EQUAL), 1);
  /* x = [nan, 1, 2, -3, inf, ...], mask alternating */
  TensorType t = ir_type_make(TY_F32, 1, (int64_t[]){8}), tb = ir_type_make(TY_BOOL, 1, (int64_t[]){8});
  Tensor in[2];
  ck_assert(ir_tensor_alloc(&in[0], &t) && ir_tensor_alloc(&in[1], &tb));
  const double xs[] = {NAN, 1, 2, -3, INFINITY, -0.5, 1.5, 0};
  for (int i = 0; i < 8; i++) ir_tensor_set(&in[0], i, xs[i]), ir_tensor_set(&in[1], i, i != 2);
  TensorMap inputs = {2, (const char *[]){"x", "mask"}, in};
  Tensor *r = eval_all(g, &inputs);
  static const double y[] = {0, 1, 0, -3, 1.5, -0.5, 1.5, 0}, ok[] = {0, 1, 0, 1, 1, 1, 1, 1};
  expect_values(&r[0], y, 8, "y");
  expect_values(&r[1], ok, 8, "ok");
  free_outputs(r, 2);
  ir_tensor_free(&in[0]);
  ir_tensor_free(&in[1]);
  ctx_free(&c);
}
END_TEST

/* Each snippet's first error, located. */
static void expect_dl_error(const char *body, const char *want) {
  char text[1024];
  snprintf(text, sizeof text, "model m(x: f32[8], b: bool[8]) -> f32[8] {\n%s\n}\n", body);
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_dl(&c, text);
  ck_assert_msg(g == NULL, "accepted:\n%s", text);
  ck_assert_msg(strstr(diag_text(&c), want), "for\n%s\nwanted: %s\ngot:\n%s", body, want, diag_text(&c));
  ctx_free(&c);
}

START_TEST(language_errors) {
  expect_dl_error("  return where(x > 0, x, 0)",
                  "t.dl:2:18: error: where: 'cond' must be a bool tensor (greater(x, 0) gives one; x > 0 "
                  "gives a mask in x's dtype), got");
  expect_dl_error("  return where(b, 1, 2)", "t.dl:2:10: error: where: at least one of 'a' and 'b' must be a tensor");
  expect_dl_error("  return where(b, x, \"no\")", "t.dl:2:22: error: where: 'b' must be a tensor or a number");
  expect_dl_error("  return x + b", "t.dl:2:12: error: add: operand 2 is bool[8], and bool is not a number (cast it first)");
  expect_dl_error("  return where(logical_and(x, b), x, x)",
                  "t.dl:2:16: error: logical_and: operand 1 must be bool, got f32[8]");
  expect_dl_error("  return where(less(b, b), x, x)", "t.dl:2:16: error: less: bool operands have no order");
  expect_dl_error("  return cast(greater(x, 0), i32)", "t.dl:2:10: error: model returns i32[8]");
}
END_TEST

/* ---- files ---- */

START_TEST(bool_files) {
  uint8_t bits[6] = {1, 0, 0, 1, 1, 0};
  RtTensor t = {.dtype = RT_BOOL, .rank = 2, .dims = {2, 3}, .data = bits, .nbytes = sizeof bits};
  char dir[] = "/tmp/dlcc-bool-XXXXXX", npy[64], st[64], err[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(npy, sizeof npy, "%s/m.npy", dir);
  snprintf(st, sizeof st, "%s/m.safetensors", dir);
  ck_assert_msg(rt_npy_write(npy, &t, err, sizeof err) == 0, "%s", err);
  RtTensor back;
  ck_assert_msg(rt_npy_read(npy, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(back.dtype, RT_BOOL);
  ck_assert_int_eq(back.nbytes, 6);
  ck_assert_mem_eq(back.data, bits, 6);
  rt_tensor_free(&back);
  char *name = "mask";
  RtTensorSet set = {.n = 1, .names = &name, .tensors = &t};
  ck_assert_msg(rt_safetensors_write(st, &set, err, sizeof err) == 0, "%s", err);
  RtTensorSet got;
  ck_assert_msg(rt_safetensors_read(st, &got, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(got.tensors[0].dtype, RT_BOOL);
  ck_assert_mem_eq(got.tensors[0].data, bits, 6);
  rt_tensor_set_free(&got);
  /* The runtime's codes name the compiler's types. */
  ck_assert_int_eq((int)RT_BOOL, (int)TY_BOOL);
  ck_assert_int_eq((int)RT_DT_BOOL, (int)TY_BOOL);
  ck_assert_str_eq(rt_dtype_name(RT_BOOL), "bool");
  unlink(npy);
  unlink(st);
  rmdir(dir);
}
END_TEST

static Suite *bool_suite(void) {
  Suite *s = suite_create("bool");
  TCase *e = tcase_create("meaning");
  tcase_add_test(e, eval_comparisons_and_nan);
  tcase_add_test(e, eval_broadcasting_logic_and_where);
  tcase_add_test(e, eval_casts);
  tcase_add_test(e, optimizer_keeps_bool_casts);
  tcase_add_test(e, text_round_trip);
  tcase_add_test(e, shape_errors);
  tcase_add_test(e, bool_files);
  suite_add_tcase(s, e);
  TCase *l = tcase_create("language");
  tcase_add_test(l, language_builtins);
  tcase_add_test(l, language_errors);
  suite_add_tcase(s, l);
  TCase *g = tcase_create("codegen");
  tcase_set_timeout(g, 180);
  tcase_add_test(g, emu_floats_every_op);
  tcase_add_test(g, emu_halves_ints_bools_and_moves);
  tcase_add_test(g, fused_where_chain_is_one_kernel);
  tcase_add_test(g, fused_mask_around_a_reduction);
  suite_add_tcase(s, g);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(bool_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
