/* Depth and size limits: inputs an attacker would write (a 10,001-term
 * sum, ten thousand blocks calling each other, IR text chains of tens of
 * thousands of nodes, a hand-written fusion group of hundreds, a concat
 * of thousands) compile or fail with a located error on a thread with a
 * 1 MB stack, as a host's small-stack thread would call the JIT API; and
 * an allocation failure inside the plan's memory checker unwinds. */
#include "check_quiet.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcc.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

/* ---- a thread with a 1 MB stack ---- */

typedef struct Small {
  void (*fn)(void *);
  void *arg;
} Small;

static void *small_main(void *p) {
  Small *s = p;
  s->fn(s->arg);
  return NULL;
}

/* Runs fn(arg) on a 1 MB stack; fn asserts nothing (Check's assertions
 * belong on the test's own thread): it leaves its results in arg. */
static void on_small_stack(void (*fn)(void *), void *arg) {
  pthread_attr_t a;
  ck_assert_int_eq(pthread_attr_init(&a), 0);
  ck_assert_int_eq(pthread_attr_setstacksize(&a, 1 << 20), 0);
  pthread_t t;
  Small s = {fn, arg};
  ck_assert_int_eq(pthread_create(&t, &a, small_main, &s), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  pthread_attr_destroy(&a);
}

/* A growing string of generated source. */
typedef struct Text {
  char *s;
  size_t len, cap;
} Text;

static void add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(Text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(n, 0);
    if (t->s && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    t->cap = t->cap ? 2 * t->cap + (size_t)n : 4096 + (size_t)n;
    t->s = realloc(t->s, t->cap);
    ck_assert_ptr_nonnull(t->s);
  }
}

/* ---- through the JIT API ---- */

typedef struct Compile {
  const char *name, *text;
  dlc_options opt;
  dlc_status st;
  char *error; /* malloc'd copy of dlc_error */
  float out[4];
  bool ran;
} Compile;

/* Compiles, and when that works and the model has one f32[4] input x,
 * runs it on x = 1, 2, 3, 4. */
static void compile_run(void *data) {
  Compile *c = data;
  dlc_model *m;
  c->st = dlc_compile_string(c->name, c->text, &c->opt, &m);
  c->error = strdup(dlc_error(m));
  const float x[4] = {1, 2, 3, 4};
  const void *y;
  size_t n;
  if (c->st == DLC_OK && dlc_set_input(m, "x", x, sizeof x) == DLC_OK && dlc_run(m) == DLC_OK &&
      dlc_get_output(m, 0, &y, &n) == DLC_OK && n == sizeof c->out) {
    memcpy(c->out, y, n);
    c->ran = true;
  }
  dlc_free(m);
}

static Compile compile_small(const char *text) {
  Compile c = {.name = "t.dl", .text = text, .opt = {.backend = "ref"}};
  on_small_stack(compile_run, &c);
  ck_assert_ptr_nonnull(c.error);
  return c;
}

static void expect_error(const char *text, const char *want) {
  Compile c = compile_small(text);
  ck_assert_int_eq(c.st, DLC_ERR_COMPILE);
  ck_assert_str_eq(c.error, want);
  free(c.error);
}

static const char *const model_head = "model m(x: f32[4]) -> f32[4] {\n  return x";

/* head, term n times, tail (malloc'd). */
static char *repeat(const char *head, const char *term, int n, const char *tail) {
  Text t = {0};
  add(&t, "%s", head);
  for (int i = 0; i < n; i++) add(&t, "%s", term);
  add(&t, "%s", tail);
  return t.s;
}

/* text (freed here) fails with "expression nests deeper than 200" at
 * line:col. */
static void expect_too_deep(char *text, int line, int col) {
  char want[256];
  snprintf(want, sizeof want,
           "t.dl:%d:%d: error: expression nests deeper than 200 (each operator of a chain like a + b + c is a "
           "level: split it over several statements)\n",
           line, col);
  expect_error(text, want);
  free(text);
}

/* The exact inputs that killed dlcc with SIGSEGV: 10,001 terms.  The
 * 200th '+' is where the tree grows past 200 levels. */
START_TEST(sum_of_10001_terms) {
  expect_too_deep(repeat("let A = 1", "+1", 10000, "\nmodel m(x: f32[4]) -> f32[4] {\n  return x\n}\n"), 1, 408);
  expect_too_deep(repeat(model_head, "+x", 10000, "\n}\n"), 2, 409);
}
END_TEST

START_TEST(expression_depth_boundary) {
  /* 199 operators (200 levels) compile and compute; 200 do not. */
  char *text = repeat(model_head, "+x", 199, "\n}\n");
  Compile c = compile_small(text);
  ck_assert_msg(c.st == DLC_OK && c.ran, "%s", c.error);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(c.out[i], 200.0f * (float)(i + 1));
  free(c.error);
  free(text);
  expect_too_deep(repeat(model_head, "+x", 200, "\n}\n"), 2, 409);
  /* Nesting of any kind counts: a call and its argument are a level
   * each, so the 100th call from the inside, the 51st abs, crosses. */
  char *inner = repeat("let a = ", "abs(", 150, "1");
  expect_too_deep(repeat(inner, ")", 150, "\nmodel m(x: f32[4]) -> f32[4] {\n  return x\n}\n"), 1, 209);
  free(inner);
}
END_TEST

START_TEST(evaluation_levels) {
  /* Each block's body nests 150 levels around the call of the next, so
   * the evaluator goes past 500 levels in the fourth block, though no
   * expression and no chain of calls is too deep alone. */
  Text t = {0};
  for (int b = 0; b < 8; b++) {
    add(&t, "block b%d(x) {\n  return ", b);
    for (int i = 0; i < 150; i++) add(&t, "(");
    add(&t, "b%d(x)", b + 1);
    for (int i = 0; i < 150; i++) add(&t, " + x)");
    add(&t, "\n}\n");
  }
  add(&t, "block b8(x) {\n  return x\n}\nmodel m(x: f32[4]) -> f32[4] {\n  return b0(x)\n}\n");
  Compile c = compile_small(t.s);
  ck_assert_int_eq(c.st, DLC_ERR_COMPILE);
  const char *want = "t.dl:11:706: error: nesting too deep: expressions, statements and block calls nest more "
                     "than 500 levels here\n";
  ck_assert_msg(strncmp(c.error, want, strlen(want)) == 0, "%s", c.error);
  free(c.error);
  free(t.s);
}
END_TEST

START_TEST(ten_thousand_blocks) {
  /* A chain: no cycle, and the check for cycles has a stack of its own. */
  Text t = {0};
  for (int b = 0; b < 10000; b++) add(&t, "block b%d(x) { return b%d(x) }\n", b, b + 1);
  add(&t, "block b10000(x) { return x }\nmodel m(x: f32[4]) -> f32[4] { return b0(x) }\n");
  Compile c = compile_small(t.s);
  ck_assert_int_eq(c.st, DLC_ERR_COMPILE);
  ck_assert_msg(strncmp(c.error, "t.dl:100:23: error: block calls nested more than 100 deep\n", 58) == 0, "%s",
                c.error);
  free(c.error);
  /* A cycle through all of them, named by its ends. */
  t.len = 0;
  for (int b = 0; b < 10000; b++) add(&t, "block b%d(x) { return b%d(x) }\n", b, (b + 1) % 10000);
  add(&t, "model m(x: f32[4]) -> f32[4] { return b0(x) }\n");
  c = compile_small(t.s);
  ck_assert_int_eq(c.st, DLC_ERR_COMPILE);
  ck_assert_str_eq(c.error,
                   "t.dl:10000:25: error: block 'b0' calls itself: b0 -> b1 -> b2 -> b3 -> b4 -> b5 -> ... -> b9998 "
                   "-> b9999 -> b0\n    block b9999(x) { return b0(x) }\n                            ^\n");
  free(c.error);
  free(t.s);
}
END_TEST

/* ---- graphs in IR text, through passes and codegen ---- */

typedef struct Build {
  const char *text;
  PassOptions po;
  int max_nodes; /* 0: ir_parse's own limit */
  int rc, kernels;
  char *diag;
  const char *source; /* the plan's CUDA text, in c's arena */
  Ctx c;
} Build;

static int build_job(Ctx *c, void *data) {
  Build *b = data;
  const SrcFile *f = ctx_add_file(c, "t.ir", b->text, strlen(b->text));
  Graph *g = b->max_nodes ? ir_parse_max(c, f, b->max_nodes) : ir_parse(c, f);
  if (!g || !ir_verify(g) || !pass_run_pipeline(g, &b->po, NULL) || !ir_verify(g)) return 1;
  CgResult r;
  if (!cg_compile(g, &r)) return 1;
  b->kernels = (int)r.plan->n_kernels;
  b->source = r.source;
  return 0;
}

static void build(void *data) {
  Build *b = data;
  ctx_init(&b->c);
  b->rc = ctx_guard(&b->c, build_job, b);
  b->diag = strdup(diag_text(&b->c));
}

static Build build_small(const char *text, int level) {
  Build b = {.text = text, .po = {.opt_level = level}};
  on_small_stack(build, &b);
  ck_assert_ptr_nonnull(b.diag);
  return b;
}

static void build_done(Build *b) {
  free(b->diag);
  ctx_free(&b->c);
}

START_TEST(ir_chains) {
  /* 20,000 links: a recursion over them would need 20,000 frames. */
  enum { N = 20000 };
  Text t = {0};
  add(&t, "graph g {\n  %%0 = input {name=\"x\"} : f32[4]\n");
  for (int i = 1; i <= N; i++) add(&t, "  %%%d = %s %%%d : f32[4]\n", i, i % 3 ? "relu" : "neg", i - 1);
  add(&t, "  return %%%d as \"y\"\n}\n", N);
  for (int level = 0; level <= 2; level += 2) {
    Build b = build_small(t.s, level);
    ck_assert_msg(b.rc == 0, "-O%d: %s", level, b.diag);
    build_done(&b);
  }
  /* A chain of reshapes that precision must convert as a whole: exp stays
   * f32, the product is f16, the cast goes where the chain begins. */
  t.len = 0;
  add(&t, "graph g {\n  %%x = input {name=\"x\"} : f32[4, 4]\n  %%0 = exp %%x : f32[4, 4]\n");
  for (int i = 1; i <= N; i++) add(&t, "  %%%d = reshape %%%d {shape=[%s]} : f32[%s]\n", i, i - 1, i % 2 ? "16" : "4, 4", i % 2 ? "16" : "4, 4");
  add(&t, "  %%w = param {name=\"w\"} : f32[4, 4]\n  %%y = matmul %%%d, %%w : f32[4, 4]\n  return %%y as \"y\"\n}\n", N);
  Build b = {.text = t.s, .po = {.opt_level = 0, .precision = TY_F16, .passes = "precision"}};
  on_small_stack(build, &b);
  ck_assert_msg(b.rc == 0, "%s", b.diag);
  build_done(&b);
  free(t.s);
}
END_TEST

START_TEST(ir_node_limit) {
  Text t = {0};
  add(&t, "graph g {\n  %%0 = input {name=\"x\"} : f32[4]\n");
  for (int i = 1; i <= 10; i++) add(&t, "  %%%d = relu %%%d : f32[4]\n", i, i - 1);
  add(&t, "  return %%10 as \"y\"\n}\n");
  Build b = {.text = t.s, .max_nodes = 11};
  on_small_stack(build, &b);
  ck_assert_int_eq(b.rc, 0);
  build_done(&b);
  b = (Build){.text = t.s, .max_nodes = 10};
  on_small_stack(build, &b);
  ck_assert_int_eq(b.rc, 1);
  ck_assert_str_eq(b.diag, "t.ir:12:3: error: graph too large: more than 10 operations\n"
                           "      %10 = relu %9 : f32[4]\n      ^\n");
  build_done(&b);
  free(t.s);
}
END_TEST

/* n relus in fusion group k0, written by hand. */
static char *group_text(int n) {
  Text t = {0};
  add(&t, "graph g {\n  %%0 = input {name=\"x\"} : f32[4]\n");
  for (int i = 1; i <= n; i++) add(&t, "  %%%d = relu %%%d : f32[4] #k0\n", i, i - 1);
  add(&t, "  return %%%d as \"y\"\n}\n", n);
  return t.s;
}

START_TEST(hand_written_groups) {
  /* Codegen evaluates a group by recursion over its members. */
  char *text = group_text(IR_MAX_GROUP);
  Build b = build_small(text, 0);
  ck_assert_msg(b.rc == 0, "%s", b.diag);
  ck_assert_int_eq(b.kernels, 1);
  build_done(&b);
  free(text);
  text = group_text(20000);
  b = build_small(text, 0);
  ck_assert_int_eq(b.rc, 1);
  ck_assert_str_eq(b.diag, "dlcc: error: verifier: relu %20000: fusion group k0 has 20000 members, more than 256\n");
  build_done(&b);
  free(text);
}
END_TEST

/* The deepest nesting of parentheses in CUDA text. */
static int paren_depth(const char *s) {
  int d = 0, most = 0;
  for (; *s; s++) {
    d += *s == '(';
    d -= *s == ')';
    if (d > most) most = d;
  }
  return most;
}

START_TEST(concat_of_thousands) {
  /* One select per operand, as a balanced tree: depth log2(n). */
  enum { N = 3000 };
  Text t = {0};
  add(&t, "graph g {\n  %%x = input {name=\"x\"} : f32[2]\n  %%y = concat ");
  for (int i = 0; i < N; i++) add(&t, "%s%%x", i ? ", " : "");
  add(&t, " {axis=0} : f32[%d]\n  return %%y as \"y\"\n}\n", 2 * N);
  Build b = build_small(t.s, 0);
  ck_assert_msg(b.rc == 0, "%s", b.diag);
  ck_assert_int_lt(paren_depth(b.source), 80);
  build_done(&b);
  free(t.s);
}
END_TEST

START_TEST(concat_selects_the_right_operand) {
  /* Seven operands of different lengths: the tree's every branch, against
   * the reference interpreter on the emu device. */
  const char *text =
      "graph g {\n"
      "  %a = input {name=\"a\"} : f32[2, 1]\n  %b = input {name=\"b\"} : f32[2, 3]\n"
      "  %c = input {name=\"c\"} : f32[2, 2]\n  %d = input {name=\"d\"} : f32[2, 5]\n"
      "  %y = concat %a, %b, %c, %d, %a, %c, %b {axis=1} : f32[2, 17]\n"
      "  return %y as \"y\"\n}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, 0);
  Fill fills[] = {FILL("a", 1, 2), FILL("b", 3, 4, 5, 6, 7, 8), FILL("c", 9, 10, 11, 12),
                  FILL("d", 13, 14, 15, 16, 17, 18, 19, 20, 21, 22), {NULL, NULL, 0}};
  Data d;
  make_inputs(j.g, fills, 0, &d);
  Tensor *want = eval_all(j.g, &d.inputs);
  Tensor *got = test_run_emu(j.cg.plan, NULL, &d.inputs);
  ck_assert_mem_eq(got[0].data, want[0].data, 2 * 17 * sizeof(float));
  free_outputs(want, 1);
  free_outputs(got, 1);
  free_inputs(&d);
  ctx_free(&c);
}
END_TEST

/* ---- an allocation failure in the memory plan's checker ---- */

static bool fail_always(void) { return true; }

static int check_job(Ctx *c, void *data) {
  char err[256];
  arena_set_fail_hook(fail_always);
  bool ok = cg_check_memory(data, err, sizeof err);
  arena_set_fail_hook(NULL);
  return ok ? 0 : 1;
}

START_TEST(memory_check_out_of_memory) {
  /* Its scratch arena had no handler: the failure printed "out of memory
   * and no handler installed" and aborted the process. */
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, "graph g {\n  %x = input {name=\"x\"} : f32[4]\n  %y = relu %x : f32[4]\n"
                         "  %z = neg %y : f32[4]\n  return %z as \"z\"\n}\n",
                     0);
  char err[256];
  ck_assert_msg(cg_check_memory(&j.cg, err, sizeof err), "%s", err);
  diag_clear(&c);
  int rc = ctx_guard(&c, check_job, &j.cg);
  arena_set_fail_hook(NULL);
  ck_assert_int_eq(rc, -1);
  ck_assert(c.oom);
  ck_assert_str_eq(diag_text(&c), "dlcc: error: out of memory\n");
  ctx_free(&c);
}
END_TEST

/* ---- a whole model on a small stack ---- */

START_TEST(resnet_on_a_small_stack) {
  char path[512];
  const char *src = getenv("top_srcdir");
  snprintf(path, sizeof path, "%s/examples/resnet50.dl", src ? src : ".");
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  char *text = calloc(1, 1 << 16);
  ck_assert_ptr_nonnull(text);
  ck_assert_int_gt(fread(text, 1, (1 << 16) - 1, f), 0);
  fclose(f);
  Compile c = {.name = "resnet50.dl", .text = text, .opt = {.backend = "ref"}};
  on_small_stack(compile_run, &c);
  ck_assert_msg(c.st == DLC_OK, "%s", c.error);
  free(c.error);
  free(text);
}
END_TEST

static Suite *limits_suite(void) {
  Suite *s = suite_create("limits");
  TCase *t = tcase_create("language");
  tcase_add_test(t, sum_of_10001_terms);
  tcase_add_test(t, expression_depth_boundary);
  tcase_add_test(t, evaluation_levels);
  tcase_add_test(t, ten_thousand_blocks);
  tcase_set_timeout(t, 60);
  suite_add_tcase(s, t);
  t = tcase_create("graphs");
  tcase_add_test(t, ir_chains);
  tcase_add_test(t, ir_node_limit);
  tcase_add_test(t, hand_written_groups);
  tcase_add_test(t, concat_of_thousands);
  tcase_add_test(t, concat_selects_the_right_operand);
  tcase_add_test(t, memory_check_out_of_memory);
  tcase_add_test(t, resnet_on_a_small_stack);
  tcase_set_timeout(t, 120);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(limits_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
