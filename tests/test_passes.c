/* The pass manager and the graph passes, by numbers: every example and
 * hundreds of random graphs (tests/randgraph.c) evaluated by the reference
 * interpreter at -O0 and after the passes.  -O1's passes are exact, so
 * its outputs must equal -O0's; -O2 (bn-fold and scale-shift round
 * differently) must agree to 1e-5 of each output's magnitude.  Plus the
 * pass manager's options: pass names, dumps, timing, statistics and the
 * verifier.  RANDGRAPH_ITERS=N runs N random graphs (make check-long),
 * RANDGRAPH_SEED=S just one. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/randgraph.h"
#include "tests/testutil.h"

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

/* ---- evaluating a graph on seeded random data ---- */

static uint64_t rng_state;
static uint64_t rng_next(void) { return test_splitmix64(&rng_state); }

typedef struct Data {
  TensorMap inputs, params;
  const char *names[16];
  Tensor tensors[16];
} Data;

static void make_data(Graph *g, uint64_t seed, Data *d) {
  memset(d, 0, sizeof *d);
  char err[512];
  ck_assert_msg(ir_init_params(g, seed, IR_INIT_RANDOM, &d->params, err, sizeof err), "%s", err);
  rng_state = seed * 7919 + 3;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    ck_assert_int_lt(d->inputs.n, 16);
    Tensor *t = &d->tensors[d->inputs.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    int64_t count = ir_type_numel(&t->type), bound = ir_index_bound(g, &n->out[0]);
    for (int64_t i = 0; i < count; i++) {
      double u = (double)(rng_next() >> 11) / 9007199254740992.0;
      ir_tensor_set(t, i, ir_dtype_is_float(t->type.dtype) ? 4 * u - 2 : (double)(int64_t)(u * (double)bound));
    }
    d->names[d->inputs.n++] = ir_attr_str(n, "name");
  }
  d->inputs.names = d->names;
  d->inputs.tensors = d->tensors;
}

static void free_data(Data *d) {
  ir_tensor_map_free(&d->params);
  for (int i = 0; i < d->inputs.n; i++) ir_tensor_free(&d->tensors[i]);
}

static Tensor *eval(Graph *g, const Data *d) {
  Tensor *out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &d->inputs, &d->params, out, err, sizeof err), "%s: %s", g->name, err);
  return out;
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

/* Largest |a - b| over the tensor's largest |b|; exact is true when every
 * element is equal (NaN to NaN, and -0 to 0). */
static double rel_error(const Tensor *a, const Tensor *b, bool *exact) {
  ck_assert(ir_type_eq(&a->type, &b->type));
  int64_t count = ir_type_numel(&a->type);
  double scale = 0, worst = 0;
  *exact = true;
  for (int64_t i = 0; i < count; i++) {
    double y = ir_tensor_get(b, i);
    if (isfinite(y) && fabs(y) > scale) scale = fabs(y);
  }
  for (int64_t i = 0; i < count; i++) {
    double x = ir_tensor_get(a, i), y = ir_tensor_get(b, i);
    if (x == y || (isnan(x) && isnan(y))) continue;
    *exact = false;
    double e = isfinite(x) && isfinite(y) ? fabs(x - y) : INFINITY;
    if (e > worst) worst = e;
  }
  return worst == 0 ? 0 : worst / (scale > 1e-30 ? scale : 1e-30);
}

static Graph *run_pipeline(Graph *g, const PassOptions *o) {
  bool ok = pass_run_pipeline(g, o, NULL);
  ck_assert_msg(ok, "%s: %.1500s", g->name, diag_text(g->ctx));
  ck_assert_msg(ir_verify(g), "%s: %.1500s", g->name, diag_text(g->ctx));
  return g;
}

/* ---- every example, -O0 against -O1 and -O2 ---- */

typedef struct Example {
  const char *file;
  int n_defines;
  Define defines[5];
} Example;

static const Example examples[] = {
    {"mlp.dl", 1, {{"N", 3}}},
    {"lenet.dl", 1, {{"N", 2}}},
    {"lstm.dl", 5, {{"N", 2}, {"T", 5}, {"V", 300}, {"E", 16}, {"H", 24}}},
    {"transformer.dl", 3, {{"N", 2}, {"S", 7}, {"D", 64}}},
    {"resnet18.dl", 2, {{"N", 1}, {"HW", 32}}},
    {"resnet50.dl", 2, {{"N", 1}, {"HW", 32}}},
    {"mobilenetv2.dl", 2, {{"N", 2}, {"HW", 32}}},
};

static Graph *lower_example(Ctx *c, const Example *ex) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", srcdir(), ex->file);
  const SrcFile *f = ctx_load_file(c, path);
  ck_assert_msg(f != NULL, "%s", diag_text(c));
  Program *p = fe_parse(c, f);
  ck_assert_msg(p != NULL, "%s", diag_text(c));
  LowerOptions lo = {.n_defines = ex->n_defines, .defines = ex->defines};
  Graph *g = fe_lower(c, p, &lo);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return g;
}

START_TEST(example_O2_matches_O0) {
  const Example *ex = &examples[_i];
  Ctx c0, c1, c2;
  ctx_init(&c0);
  ctx_init(&c1);
  ctx_init(&c2);
  Graph *g0 = lower_example(&c0, ex);
  Graph *g1 = run_pipeline(lower_example(&c1, ex), &(PassOptions){.opt_level = 1, .verify_each = true});
  Graph *g2 = run_pipeline(lower_example(&c2, ex), &(PassOptions){.opt_level = 2, .verify_each = true});
  Data d;
  make_data(g0, 42, &d);
  Tensor *y0 = eval(g0, &d), *y1 = eval(g1, &d), *y2 = eval(g2, &d);
  for (int i = 0; i < g0->n_outputs; i++) {
    bool exact;
    double e1 = rel_error(&y1[i], &y0[i], &exact);
    ck_assert_msg(exact, "%s output %d: -O1 differs from -O0 (%g)", ex->file, i, e1);
    double e2 = rel_error(&y2[i], &y0[i], &exact);
    fprintf(stderr, "test_passes: %-15s output %d: ops %d -> %d at -O2, max error %.3g of the output's magnitude\n",
            ex->file, i, pass_count_ops(g0), pass_count_ops(g2), e2);
    ck_assert_msg(e2 <= 1e-5, "%s output %d: -O2 is %g off -O0", ex->file, i, e2);
  }
  free_outputs(y0, g0->n_outputs);
  free_outputs(y1, g1->n_outputs);
  free_outputs(y2, g2->n_outputs);
  free_data(&d);
  ctx_free(&c0);
  ctx_free(&c1);
  ctx_free(&c2);
}
END_TEST

START_TEST(bn_fold_removes_every_batchnorm_of_resnet18) {
  Ctx c;
  ctx_init(&c);
  Graph *g = run_pipeline(lower_example(&c, &examples[4]), &(PassOptions){.passes = "bn-fold,dce"});
  for (Node *n = g->first; n; n = n->next) ck_assert_int_ne(n->op, OP_BATCHNORM);
  ctx_free(&c);
}
END_TEST

/* ---- random graphs ---- */

static int env_int(const char *name, int fallback) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : fallback;
}

/* One seed: false (after printing why, with the seed) when it fails. */
static bool check_random(uint64_t seed, double *worst) {
  Ctx c0, c1, c2;
  ctx_init(&c0);
  ctx_init(&c1);
  ctx_init(&c2);
  int n_ops = 8 + (int)(seed % 40);
  Graph *g0 = rg_build(&c0, seed, n_ops);
  bool ok = ir_verify(g0);
  if (!ok) fprintf(stderr, "randgraph seed %llu: does not verify:\n%s", (unsigned long long)seed, diag_text(&c0));
  Graph *g1 = rg_build(&c1, seed, n_ops), *g2 = rg_build(&c2, seed, n_ops);
  PassOptions o1 = {.opt_level = 1, .verify_each = true}, o2 = {.opt_level = 2, .verify_each = true};
  if (ok && (!pass_run_pipeline(g1, &o1, NULL) || !pass_run_pipeline(g2, &o2, NULL))) {
    fprintf(stderr, "randgraph seed %llu: the pipeline failed:\n%s%s", (unsigned long long)seed,
            diag_text(&c1), diag_text(&c2));
    ok = false;
  }
  if (ok) {
    Data d;
    make_data(g0, seed, &d);
    Tensor *y0 = eval(g0, &d), *y1 = eval(g1, &d), *y2 = eval(g2, &d);
    for (int i = 0; ok && i < g0->n_outputs; i++) {
      bool exact;
      double e1 = rel_error(&y1[i], &y0[i], &exact);
      if (!exact) {
        fprintf(stderr, "randgraph seed %llu: output %d: -O1 differs from -O0 (%g)\n",
                (unsigned long long)seed, i, e1);
        ok = false;
      }
      double e2 = rel_error(&y2[i], &y0[i], &exact);
      if (e2 > *worst) *worst = e2;
      if (e2 > 1e-5) {
        fprintf(stderr, "randgraph seed %llu: output %d: -O2 is %g off -O0\n", (unsigned long long)seed, i, e2);
        ok = false;
      }
    }
    if (!ok) {
      fprintf(stderr, "-O0 graph:\n");
      ir_print(stderr, g0);
      fprintf(stderr, "-O2 graph:\n");
      ir_print(stderr, g2);
    }
    free_outputs(y0, g0->n_outputs);
    free_outputs(y1, g1->n_outputs);
    free_outputs(y2, g2->n_outputs);
    free_data(&d);
  }
  ctx_free(&c0);
  ctx_free(&c1);
  ctx_free(&c2);
  return ok;
}

START_TEST(random_graphs_O2_match_O0) {
  int iters = env_int("RANDGRAPH_ITERS", 300), one = env_int("RANDGRAPH_SEED", -1);
  int failed = 0;
  double worst = 0;
  uint64_t first = one >= 0 ? (uint64_t)one : 1, last = one >= 0 ? first + 1 : 1 + (uint64_t)iters;
  for (uint64_t s = first; s < last && failed < 5; s++) failed += !check_random(s, &worst);
  fprintf(stderr, "test_passes: %llu random graphs, worst -O2 error %.3g\n",
          (unsigned long long)(last - first), worst);
  ck_assert_msg(failed == 0, "%d random graphs failed (seeds above; rerun one with RANDGRAPH_SEED=S)", failed);
}
END_TEST

START_TEST(random_graphs_exercise_the_passes) {
  /* The generator must produce what the passes rewrite, or the
   * differential test proves little. */
  PassCtx totals = {0};
  Ctx tc;
  ctx_init(&tc);
  totals.ctx = &tc;
  for (uint64_t s = 1; s <= 60; s++) {
    Ctx c;
    ctx_init(&c);
    Graph *g = rg_build(&c, s, 30);
    PassCtx *pc = ARENA_NEW(&c.arena, PassCtx);
    pc->ctx = &c;
    pass_simplify(g, pc);
    pass_fold(g, pc);
    pass_cse(g, pc);
    pass_bn_fold(g, pc);
    pass_scale_shift(g, pc);
    pass_dce(g, pc);
    ck_assert_msg(ir_verify(g), "%s", diag_text(&c));
    for (int i = 0; i < pc->n_stats; i++) pass_stat(&totals, pc->stats[i].name, pc->stats[i].value);
    ctx_free(&c);
  }
  const char *want[] = {"simplify: identities removed", "simplify: pairs combined", "fold: ops folded",
                        "cse: nodes merged", "bn-fold: batch norms folded",
                        "scale-shift: chains collapsed", "dce: nodes removed"};
  for (size_t i = 0; i < ARRAY_LEN(want); i++) {
    int64_t v = 0;
    for (int k = 0; k < totals.n_stats; k++)
      if (strcmp(totals.stats[k].name, want[i]) == 0) v = totals.stats[k].value;
    ck_assert_msg(v > 0, "60 random graphs never triggered '%s'", want[i]);
  }
  ctx_free(&tc);
}
END_TEST

/* ---- the pass manager ---- */

static Graph *parse_text(Ctx *c, const char *text) {
  const SrcFile *f = ctx_add_file(c, "t.ir", arena_strdup(&c->arena, text), strlen(text));
  Graph *g = ir_parse(c, f);
  ck_assert_msg(g != NULL, "%s", diag_text(c));
  return g;
}

static const char small_ir[] =
    "graph t {\n"
    "  %x = input {name=\"x\"} : f32[4]\n"
    "  %one = const {value=1} : f32[]\n"
    "  %a = mul %x, %one : f32[4]\n"
    "  %b = relu %a : f32[4]\n"
    "  %c = relu %a : f32[4]\n"
    "  %d = add %b, %c : f32[4]\n"
    "  return %d as \"d\"\n"
    "}\n";

START_TEST(unknown_pass_names_get_a_suggestion) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, small_ir);
  ck_assert(!pass_run_pipeline(g, &(PassOptions){.passes = "simplify,cse,dcee"}, NULL));
  ck_assert_msg(strstr(diag_text(&c), "unknown pass 'dcee' in --passes; did you mean 'dce'?"), "%s",
                diag_text(&c));
  diag_clear(&c);
  ck_assert(!pass_run_pipeline(g, &(PassOptions){.print_after = "smplify"}, NULL));
  ck_assert_msg(strstr(diag_text(&c), "did you mean 'simplify'?"), "%s", diag_text(&c));
  diag_clear(&c);
  ck_assert(!pass_run_pipeline(g, &(PassOptions){.passes = "cse,,dce"}, NULL));
  ck_assert_msg(strstr(diag_text(&c), "empty pass name"), "%s", diag_text(&c));
  diag_clear(&c);
  ck_assert(!pass_run_pipeline(g, &(PassOptions){.opt_level = 3}, NULL));
  ck_assert_ptr_nonnull(pass_find("bn-fold"));
  ck_assert_ptr_null(pass_find("bnfold"));
  ctx_free(&c);
}
END_TEST

START_TEST(explicit_passes_run_in_order_with_dumps) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, small_ir);
  char *text = NULL;
  size_t len = 0;
  FILE *dump = open_memstream(&text, &len);
  PassOptions o = {.passes = "simplify,cse,dce", .print_before = "cse", .print_after_all = true,
                   .time_passes = true, .stats = true};
  ck_assert_msg(pass_run_pipeline(g, &o, dump), "%s", diag_text(&c));
  fclose(dump);
  const char *before = strstr(text, "; *** IR Dump Before cse ***");
  const char *a1 = strstr(text, "; *** IR Dump After simplify ***");
  const char *a2 = strstr(text, "; *** IR Dump After cse ***");
  const char *a3 = strstr(text, "; *** IR Dump After dce ***");
  ck_assert_msg(a1 && before && a2 && a3 && a1 < before && before < a2 && a2 < a3, "%s", text);
  ck_assert_msg(strstr(text, "Pass execution timing report"), "%s", text);
  ck_assert_msg(strstr(text, "         4 graph: ops before"), "%s", text);
  ck_assert_msg(strstr(text, "         2 graph: ops after"), "%s", text);
  ck_assert_msg(strstr(text, "         1 cse: nodes merged"), "%s", text);
  ck_assert_msg(strstr(text, "         1 simplify: identities removed"), "%s", text);
  free(text);
  ctx_free(&c);
}
END_TEST

START_TEST(dump_dir_gets_one_numbered_file_per_pass) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, small_ir);
  char dir[] = "/tmp/dlcc-passes-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char sub[600];
  snprintf(sub, sizeof sub, "%s/d", dir);
  ck_assert(pass_run_pipeline(g, &(PassOptions){.passes = "simplify,dce", .dump_dir = sub}, NULL));
  char p1[700], p2[700];
  snprintf(p1, sizeof p1, "%s/001_simplify.ir", sub);
  snprintf(p2, sizeof p2, "%s/002_dce.ir", sub);
  struct stat st;
  ck_assert_msg(stat(p1, &st) == 0 && st.st_size > 0, "%s missing", p1);
  ck_assert_msg(stat(p2, &st) == 0 && st.st_size > 0, "%s missing", p2);
  /* What was dumped parses back. */
  FILE *f = fopen(p2, "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  Ctx c2;
  ctx_init(&c2);
  parse_text(&c2, buf);
  ctx_free(&c2);
  remove(p1);
  remove(p2);
  rmdir(sub);
  rmdir(dir);
  ctx_free(&c);
}
END_TEST

START_TEST(verify_each_names_the_pass) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, small_ir);
  /* Break the graph behind the passes' back: a wrong result type. */
  g->last->out[0].type.dims[0] = 5;
  ck_assert(!pass_run_pipeline(g, &(PassOptions){.passes = "dce", .verify_each = true}, NULL));
  ck_assert_msg(strstr(diag_text(&c), "does not verify after pass 'dce'"), "%s", diag_text(&c));
  ctx_free(&c);
}
END_TEST

START_TEST(O1_is_a_fixpoint) {
  for (uint64_t s = 1; s <= 40; s++) {
    Ctx c;
    ctx_init(&c);
    Graph *g = run_pipeline(rg_build(&c, s, 30), &(PassOptions){.opt_level = 1});
    PassCtx pc = {.ctx = &c};
    ck_assert_msg(!pass_simplify(g, &pc) && !pass_fold(g, &pc) && !pass_cse(g, &pc) && !pass_dce(g, &pc),
                  "seed %llu: a pass still changes the -O1 result", (unsigned long long)s);
    ctx_free(&c);
  }
}
END_TEST

START_TEST(O0_changes_nothing) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_text(&c, small_ir);
  int nodes = g->n_nodes;
  ck_assert(pass_run_pipeline(g, &(PassOptions){.opt_level = 0}, NULL));
  ck_assert_int_eq(g->n_nodes, nodes);
  ctx_free(&c);
}
END_TEST

/* Passes walk the graph once: a long chain of rewrites stays fast. */
START_TEST(passes_are_linear_in_graph_size) {
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_graph_new(&c, "long");
  TensorType t = {.dtype = TY_F32, .rank = 1, .dims = {4}};
  Value *v = &ir_source(g, OP_INPUT, &t, "x", (SrcLoc){0})->out[0];
  Value *one = &ir_const(g, 1, TY_F32, (SrcLoc){0})->out[0];
  enum { N = 40000 };
  for (int i = 0; i < N; i++) {
    Value *in[2] = {v, one};
    Node *n = ir_node_new(g, i % 2 ? OP_MUL : OP_RELU, i % 2 ? 2 : 1, in, (SrcLoc){0});
    char err[128];
    ck_assert(ir_infer(n, err, sizeof err));
    ir_append(g, n);
    v = &n->out[0];
  }
  const char *name = "y";
  ir_set_outputs(g, 1, &v, &name);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  run_pipeline(g, &(PassOptions){.opt_level = 2});
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  ck_assert_int_eq(pass_count_ops(g), 1); /* relu of x: the rest are x*1 and relu(relu) */
  ck_assert_msg(s < 5.0, "-O2 on %d ops took %.2f s", N, s);
  ctx_free(&c);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("passes");
  TCase *tc = tcase_create("passes");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, example_O2_matches_O0, 0, (int)ARRAY_LEN(examples));
  tcase_add_test(tc, bn_fold_removes_every_batchnorm_of_resnet18);
  tcase_add_test(tc, random_graphs_O2_match_O0);
  tcase_add_test(tc, random_graphs_exercise_the_passes);
  tcase_add_test(tc, unknown_pass_names_get_a_suggestion);
  tcase_add_test(tc, explicit_passes_run_in_order_with_dumps);
  tcase_add_test(tc, dump_dir_gets_one_numbered_file_per_pass);
  tcase_add_test(tc, verify_each_names_the_pass);
  tcase_add_test(tc, O1_is_a_fixpoint);
  tcase_add_test(tc, O0_changes_nothing);
  tcase_add_test(tc, passes_are_linear_in_graph_size);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const char *dir = getenv("top_srcdir");
  if (dir && chdir(dir) != 0) return 1;
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
