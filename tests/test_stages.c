/* Check suite for the stage split of pipeline parallel training
 * (passes/stages.c, docs/parallel.md), without MPI: stages are
 * contiguous runs of the graph order, each non-empty, balanced (the
 * largest stage within 10% of the best any cuts give, by brute force),
 * cut where few bytes cross, the same split every time; the cuts a
 * tied weight or an integer value forbid; the refusals' messages; the
 * cuts the model's stage() marks ask for; and the stage graphs (forward, backward, optimizer) verify with the
 * inputs and outputs the pipeline driver binds by name.  The inference
 * split (dlcc run --pipeline): the cuts training forbids allowed, a
 * weight copied into each stage that reads it, every output brought to
 * the last stage, which returns them under their names. */
#include "check_quiet.h"
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/stages.h"
#include "tests/irjob.h"

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* Four layers of matmul and relu, the middle two twice as wide, then a
 * mean as the loss. */
static const char chain[] =
    "graph chain {\n"
    "  %0 = input {name=\"x\"} : f32[4, 8]\n"
    "  %1 = param {name=\"w1\", init=\"uniform(0.3)\"} : f32[8, 16]\n"
    "  %2 = matmul %0, %1 : f32[4, 16]\n"
    "  %3 = relu %2 : f32[4, 16]\n"
    "  %4 = param {name=\"w2\", init=\"uniform(0.3)\"} : f32[16, 16]\n"
    "  %5 = matmul %3, %4 : f32[4, 16]\n"
    "  %6 = relu %5 : f32[4, 16]\n"
    "  %7 = param {name=\"w3\", init=\"uniform(0.3)\"} : f32[16, 16]\n"
    "  %8 = matmul %6, %7 : f32[4, 16]\n"
    "  %9 = relu %8 : f32[4, 16]\n"
    "  %10 = param {name=\"w4\", init=\"uniform(0.3)\"} : f32[16, 8]\n"
    "  %11 = matmul %9, %10 : f32[4, 8]\n"
    "  %12 = reduce_mean %11 {axes=[0, 1], keepdims=0} : f32[]\n"
    "  return %12 as \"loss\"\n"
    "}\n";

static bool is_source(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_CONST; }

static double cost_of(const Node *n) {
  IrCost c = ir_cost(n);
  return c.flops + c.bytes;
}

/* The least largest stage over every way to cut the computing nodes
 * into s contiguous non-empty runs (no cut after the loss's node). */
static double brute_best(const double *cost, int n, int s, int from) {
  if (s == 1) {
    double t = 0;
    for (int i = from; i < n; i++) t += cost[i];
    return t;
  }
  double best = DBL_MAX, run = 0;
  for (int end = from; end < n - (s - 1); end++) {
    run += cost[end];
    double rest = brute_best(cost, n, s - 1, end + 1);
    double m = run > rest ? run : rest;
    if (m < best) best = m;
  }
  return best;
}

static void check_split(Graph *g, int s_count, StageSplit *sp) {
  char err[512];
  ck_assert_msg(pass_stage_split(g, s_count, sp, err, sizeof err), "%s", err);
  double cost[64];
  int n = 0, prev = 0;
  for (Node *m = g->first; m; m = m->next) {
    int s = sp->stage[m->id];
    if (is_source(m)) {
      ck_assert_int_eq(s, -1);
      continue;
    }
    /* contiguous: the stages rise by at most one along the order */
    ck_assert_msg(s == prev || s == prev + 1, "node %d in stage %d after stage %d", m->id, s, prev);
    prev = s;
    cost[n++] = cost_of(m);
  }
  ck_assert_int_eq(prev, s_count - 1);
  double worst = 0, sum = 0;
  for (int s = 0; s < s_count; s++) {
    ck_assert_int_gt(sp->n_nodes[s], 0);
    worst = sp->cost[s] > worst ? sp->cost[s] : worst;
    sum += sp->cost[s];
  }
  ck_assert(sum == sp->total);
  if (sp->marked) return; /* the model chose: no balance to check */
  double best = brute_best(cost, n, s_count, 0);
  ck_assert_msg(worst <= best * 1.1 + 1e-9, "largest stage %g, the best cuts give %g", worst, best);
}

START_TEST(chain_is_balanced_and_contiguous) {
  for (int s = 1; s <= 4; s++) {
    Graph *g = compile_at(&ctx, chain, -1).g;
    StageSplit sp;
    check_split(g, s, &sp);
    for (int c = 1; c < s; c++) {
      ck_assert_int_eq(sp.cut[c].n, 1); /* a chain passes one activation */
      ck_assert(sp.cut[c].bytes == 4 * 16 * 4 || sp.cut[c].bytes == 4 * 8 * 4);
    }
  }
}
END_TEST

START_TEST(split_is_deterministic) {
  StageSplit a, b;
  Graph *ga = compile_at(&ctx, chain, -1).g, *gb = compile_at(&ctx, chain, -1).g;
  check_split(ga, 3, &a);
  check_split(gb, 3, &b);
  ck_assert_int_eq(ga->n_nodes, gb->n_nodes);
  for (int i = 0; i < ga->n_nodes; i++) ck_assert_int_eq(a.stage[i], b.stage[i]);
}
END_TEST

/* Two equal halves joined by one f32[4, 16] or split where an f32[4, 64]
 * would cross: the cut goes where fewer bytes cross, when the costs
 * allow.  Here w2's matmul widens to 64 and the next narrows back. */
START_TEST(cut_where_few_bytes_cross) {
  const char *wide =
      "graph wide {\n"
      "  %0 = input {name=\"x\"} : f32[4, 16]\n"
      "  %1 = param {name=\"a\", init=\"uniform(0.3)\"} : f32[16, 64]\n"
      "  %2 = matmul %0, %1 : f32[4, 64]\n"
      "  %3 = param {name=\"b\", init=\"uniform(0.3)\"} : f32[64, 16]\n"
      "  %4 = matmul %2, %3 : f32[4, 16]\n"
      "  %5 = tanh %4 : f32[4, 16]\n"
      "  %6 = param {name=\"c\", init=\"uniform(0.3)\"} : f32[16, 64]\n"
      "  %7 = matmul %5, %6 : f32[4, 64]\n"
      "  %8 = param {name=\"d\", init=\"uniform(0.3)\"} : f32[64, 16]\n"
      "  %9 = matmul %7, %8 : f32[4, 16]\n"
      "  %10 = reduce_mean %9 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  return %10 as \"loss\"\n"
      "}\n";
  Graph *g = compile_at(&ctx, wide, -1).g;
  StageSplit sp;
  check_split(g, 2, &sp);
  ck_assert_int_eq(sp.cut[1].n, 1);
  ck_assert(sp.cut[1].bytes == 4 * 16 * 4);
}
END_TEST

/* Every weight transposed at the top of the graph, as exporters write
 * them: each transpose moves to just before its matmul and is computed
 * in that matmul's stage, so the cut carries the activation alone. */
START_TEST(weights_stay_with_readers) {
  const char *text =
      "graph weights_first {\n"
      "  %0 = input {name=\"x\"} : f32[4, 16]\n"
      "  %1 = param {name=\"a\", init=\"uniform(0.3)\"} : f32[16, 16]\n"
      "  %2 = param {name=\"b\", init=\"uniform(0.3)\"} : f32[16, 16]\n"
      "  %3 = transpose %1 {perm=[1, 0]} : f32[16, 16]\n"
      "  %4 = transpose %2 {perm=[1, 0]} : f32[16, 16]\n"
      "  %5 = matmul %0, %3 : f32[4, 16]\n"
      "  %6 = tanh %5 : f32[4, 16]\n"
      "  %7 = matmul %6, %4 : f32[4, 16]\n"
      "  %8 = tanh %7 : f32[4, 16]\n"
      "  %9 = reduce_mean %8 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  return %9 as \"loss\"\n"
      "}\n";
  Graph *g = compile_at(&ctx, text, -1).g;
  StageSplit sp;
  check_split(g, 2, &sp);
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_TRANSPOSE) {
      ck_assert_ptr_eq(n->next->op == OP_MATMUL ? n->next : NULL, n->next);
      ck_assert_int_eq(sp.stage[n->id], sp.stage[n->next->id]);
    }
  ck_assert_int_eq(sp.cut[1].n, 1);
  ck_assert(sp.cut[1].bytes == 4 * 16 * 4);
}
END_TEST

START_TEST(refusals) {
  char err[512];
  StageSplit sp;
  /* a weight read first and by the loss pins every cut but the last */
  const char *tied =
      "graph tied {\n"
      "  %0 = input {name=\"x\"} : f32[8, 4]\n"
      "  %1 = param {name=\"w\", init=\"uniform(0.5)\"} : f32[4, 4]\n"
      "  %2 = matmul %0, %1 : f32[8, 4]\n"
      "  %3 = tanh %2 : f32[8, 4]\n"
      "  %4 = reduce_mean %3 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  %5 = reduce_mean %1 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  %6 = add %4, %5 : f32[]\n"
      "  return %6 as \"loss\"\n"
      "}\n";
  Graph *g = compile_at(&ctx, tied, -1).g;
  ck_assert(pass_stage_split(g, 2, &sp, err, sizeof err));
  ck_assert_int_eq(sp.stage[g->last->id], 1);
  ck_assert_int_eq(sp.n_nodes[1], 1);
  ck_assert(!pass_stage_split(g, 3, &sp, err, sizeof err));
  ck_assert_str_eq(err, "the model cannot be cut into 3 stages: each stage needs an operation, a parameter's "
                        "readers must share a stage, only floating-point values may cross a cut, and the last "
                        "stage computes the loss");
  ck_assert(!pass_stage_split(g, 6, &sp, err, sizeof err));
  ck_assert_str_eq(err, "the model has 5 operations: it cannot be cut into 6 stages");
  /* an integer value (argmax) may not cross a cut: the only cut left is
   * before the add */
  const char *ints =
      "graph ints {\n"
      "  %0 = input {name=\"x\"} : f32[8, 4]\n"
      "  %1 = param {name=\"w\", init=\"uniform(0.5)\"} : f32[4, 4]\n"
      "  %2 = matmul %0, %1 : f32[8, 4]\n"
      "  %3 = argmax %2 {axis=1, keepdims=0} : i64[8]\n"
      "  %4 = cast %3 {to=f32} : f32[8]\n"
      "  %5 = reduce_mean %4 {axes=[0], keepdims=0} : f32[]\n"
      "  %6 = reduce_mean %2 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  %7 = add %5, %6 : f32[]\n"
      "  return %7 as \"loss\"\n"
      "}\n";
  g = compile_at(&ctx, ints, -1).g;
  ck_assert(pass_stage_split(g, 2, &sp, err, sizeof err));
  for (int k = 0; k < sp.cut[1].n; k++) ck_assert(ir_dtype_is_float(sp.cut[1].values[k]->type.dtype));
}
END_TEST

/* stage marks: x's mean, read only by the loss, is computed in the last
 * stage (as late as its reader allows), not before the first mark where
 * the graph has it; the cuts carry only the marked values. */
static const char marked[] =
    "graph marked {\n"
    "  %0 = input {name=\"x\"} : f32[4, 8]\n"
    "  %1 = param {name=\"w1\", init=\"uniform(0.3)\"} : f32[8, 16]\n"
    "  %2 = param {name=\"w2\", init=\"uniform(0.3)\"} : f32[16, 8]\n"
    "  %3 = matmul %0, %1 : f32[4, 16]\n"
    "  %4 = reduce_mean %0 {axes=[0, 1], keepdims=0} : f32[]\n"
    "  %5 = stage %3 : f32[4, 16]\n"
    "  %6 = relu %5 : f32[4, 16]\n"
    "  %7 = stage %6 : f32[4, 16]\n"
    "  %8 = matmul %7, %2 : f32[4, 8]\n"
    "  %9 = reduce_mean %8 {axes=[0, 1], keepdims=0} : f32[]\n"
    "  %10 = add %9, %4 : f32[]\n"
    "  return %10 as \"loss\"\n"
    "}\n";

START_TEST(stage_marks) {
  StageSplit sp;
  char err[512];
  Graph *g = compile_at(&ctx, marked, -1).g;
  ck_assert(!pass_stage_split(g, 2, &sp, err, sizeof err));
  ck_assert_msg(strstr(err, "stage() marks (the first at ") && strstr(err, ") make 3 stages, but the pipeline has 2"),
                "%s", err);
  check_split(g, 3, &sp);
  ck_assert(sp.marked);
  int want[3] = {2, 2, 4}, got[3] = {0};
  for (Node *m = g->first; m; m = m->next) {
    if (is_source(m)) continue;
    got[sp.stage[m->id]]++;
    if (m->op == OP_REDUCE_MEAN && m->in[0]->def->op == OP_INPUT) ck_assert_int_eq(sp.stage[m->id], 2);
    if (m->op == OP_STAGE) ck_assert_int_eq(sp.stage[m->id], m == g->last ? -1 : sp.stage[m->in[0]->def->id]);
  }
  for (int s = 0; s < 3; s++) ck_assert_int_eq(got[s], want[s]);
  for (int s = 1; s < 3; s++) {
    ck_assert_int_eq(sp.cut[s].n, 1);
    ck_assert_int_eq(sp.cut[s].values[0]->def->op, OP_STAGE);
  }
  /* a weight read on both sides of the mark cannot be cut there */
  const char *tied =
      "graph tied {\n"
      "  %0 = input {name=\"x\"} : f32[4, 4]\n"
      "  %1 = param {name=\"w\", init=\"uniform(0.5)\"} : f32[4, 4]\n"
      "  %2 = matmul %0, %1 : f32[4, 4]\n"
      "  %3 = stage %2 : f32[4, 4]\n"
      "  %4 = matmul %3, %1 : f32[4, 4]\n"
      "  %5 = reduce_mean %4 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  return %5 as \"loss\"\n"
      "}\n";
  g = compile_at(&ctx, tied, -1).g;
  ck_assert(!pass_stage_split(g, 2, &sp, err, sizeof err));
  ck_assert_msg(strstr(err, "the stage() mark at ") && strstr(err, " cannot end stage 0: a parameter's readers"), "%s",
                err);
}
END_TEST

static bool has_source(Graph *g, OpKind op, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == op && strcmp(ir_attr_str(n, "name"), name) == 0) return true;
  return false;
}

START_TEST(stage_graphs) {
  Graph *g = compile_at(&ctx, chain, -1).g;
  StageSplit sp;
  check_split(g, 2, &sp);
  Graph *f = pass_stage_graph(g, &sp, 0, STAGE_FORWARD, 0);
  ck_assert(f && ir_verify(f));
  ck_assert_int_eq(f->n_outputs, 1);
  ck_assert_str_eq(f->output_names[0], "stage_out.0");
  ck_assert(has_source(f, OP_INPUT, "x") && has_source(f, OP_PARAM, "w1") && !has_source(f, OP_PARAM, "w4"));
  Graph *b0 = pass_stage_graph(g, &sp, 0, STAGE_BACKWARD, 0);
  ck_assert(b0 && ir_verify(b0));
  ck_assert(has_source(b0, OP_INPUT, "stage_dy.0"));
  ck_assert_str_eq(b0->output_names[0], "loss");
  ck_assert(b0->outputs[0]->type.rank == 0);
  Graph *b1 = pass_stage_graph(g, &sp, 1, STAGE_BACKWARD, 0);
  ck_assert(b1 && ir_verify(b1));
  ck_assert(has_source(b1, OP_PARAM, "stage_in.0") && has_source(b1, OP_PARAM, "w4") && !has_source(b1, OP_INPUT, "x"));
  Graph *o1 = pass_stage_graph(g, &sp, 1, STAGE_OPTIMIZER, 0);
  ck_assert(o1 && ir_verify(o1));
  ck_assert(has_source(o1, OP_INPUT, "grad.w4") && has_source(o1, OP_PARAM, "w4"));
  ck_assert(!has_source(o1, OP_PARAM, "stage_in.0"));
}
END_TEST

/* A batchnorm before a stage mark: stage 0's forward normalizes with the
 * batch's statistics, and with sync_bn = 2 all-reduces them (the mean,
 * then the variance by Chan's merge) over the pipelines, marking the
 * op with batch_stats 2 for its gradient; without, none. */
static const char normed[] =
    "graph normed {\n"
    "  %0 = input {name=\"x\"} : f32[4, 8]\n"
    "  %1 = param {name=\"w1\", init=\"uniform(0.3)\"} : f32[8, 16]\n"
    "  %2 = matmul %0, %1 : f32[4, 16]\n"
    "  %3 = param {name=\"bn.weight\", init=\"ones\"} : f32[16]\n"
    "  %4 = param {name=\"bn.bias\", init=\"zeros\"} : f32[16]\n"
    "  %5 = param {name=\"bn.running_mean\", init=\"zeros\"} : f32[16]\n"
    "  %6 = param {name=\"bn.running_var\", init=\"ones\"} : f32[16]\n"
    "  %7 = batchnorm %2, %3, %4, %5, %6 : f32[4, 16]\n"
    "  %8 = stage %7 : f32[4, 16]\n"
    "  %9 = relu %8 : f32[4, 16]\n"
    "  %10 = param {name=\"w2\", init=\"uniform(0.3)\"} : f32[16, 8]\n"
    "  %11 = matmul %9, %10 : f32[4, 8]\n"
    "  %12 = reduce_mean %11 {axes=[0, 1], keepdims=0} : f32[]\n"
    "  return %12 as \"loss\"\n"
    "}\n";

START_TEST(sync_bn_forward) {
  Graph *g = compile_at(&ctx, normed, -1).g;
  StageSplit sp;
  check_split(g, 2, &sp);
  for (int sync = 0; sync <= 2; sync += 2) {
    Graph *f = pass_stage_graph(g, &sp, 0, STAGE_FORWARD, sync);
    ck_assert(f && ir_verify(f));
    int reduces = 0, stats = 0;
    for (Node *n = f->first; n; n = n->next) {
      reduces += n->op == OP_ALLREDUCE_MEAN;
      if (n->op == OP_BATCHNORM) stats = (int)ir_attr_int(n, "batch_stats");
    }
    ck_assert_int_eq(reduces, sync ? 2 : 0);
    ck_assert_int_eq(stats, sync ? 2 : 1);
  }
}
END_TEST

/* Every stage graph of an inference split verifies; the last returns g's
 * outputs by name; the others return their cut. */
static void check_inference_graphs(Graph *g, const StageSplit *sp) {
  for (int s = 0; s < sp->n_stages; s++) {
    Graph *f = pass_stage_graph(g, sp, s, STAGE_FORWARD, 0);
    ck_assert(f && ir_verify(f));
    if (s < sp->n_stages - 1) {
      ck_assert_int_eq(f->n_outputs, sp->cut[s + 1].n);
      continue;
    }
    ck_assert_int_eq(f->n_outputs, g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++) {
      ck_assert_str_eq(f->output_names[i], g->output_names[i]);
      ck_assert(ir_type_eq(&f->outputs[i]->type, &g->outputs[i]->type));
    }
  }
}

START_TEST(inference_split) {
  StageSplit sp;
  char err[512];
  /* the tied weight: 3 stages now, w in the first and the last, counted in both */
  const char *tied =
      "graph tied {\n"
      "  %0 = input {name=\"x\"} : f32[8, 4]\n"
      "  %1 = param {name=\"w\", init=\"uniform(0.5)\"} : f32[4, 4]\n"
      "  %2 = matmul %0, %1 : f32[8, 4]\n"
      "  %3 = tanh %2 : f32[8, 4]\n"
      "  %4 = reduce_mean %3 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  %5 = reduce_mean %1 {axes=[0, 1], keepdims=0} : f32[]\n"
      "  %6 = add %4, %5 : f32[]\n"
      "  return %6 as \"y\"\n"
      "}\n";
  Graph *g = compile_at(&ctx, tied, -1).g;
  ck_assert(!pass_stage_split(g, 3, &sp, err, sizeof err));
  ck_assert_msg(pass_stage_split_inference(g, 3, &sp, err, sizeof err), "%s", err);
  ck_assert(sp.inference);
  ck_assert_int_eq(sp.stage[g->last->id], 2);
  double w = 64, sum = 0;
  for (int s = 0; s < 3; s++) sum += sp.param_bytes[s];
  ck_assert(sp.param_bytes[0] == w && sum == 2 * w);
  check_inference_graphs(g, &sp);
  /* an integer output computed first: it crosses every cut to the last
   * stage, beside the float output; an output the next stage reads too */
  const char *ints =
      "graph ints {\n"
      "  %0 = input {name=\"x\"} : f32[8, 4]\n"
      "  %1 = param {name=\"w\", init=\"uniform(0.5)\"} : f32[4, 4]\n"
      "  %2 = matmul %0, %1 : f32[8, 4]\n"
      "  %3 = argmax %2 {axis=1, keepdims=0} : i64[8]\n"
      "  %4 = tanh %2 : f32[8, 4]\n"
      "  %5 = matmul %4, %1 : f32[8, 4]\n"
      "  %6 = relu %5 : f32[8, 4]\n"
      "  return %6 as \"y\", %3 as \"cls\", %4 as \"h\", %0 as \"x_again\"\n"
      "}\n";
  g = compile_at(&ctx, ints, -1).g;
  ck_assert_msg(pass_stage_split_inference(g, 4, &sp, err, sizeof err), "%s", err);
  bool int_crosses = false;
  for (int k = 0; k < sp.cut[3].n; k++) int_crosses |= sp.cut[3].values[k]->type.dtype == TY_I64;
  ck_assert(int_crosses);
  check_inference_graphs(g, &sp);
  ck_assert(!pass_stage_split_inference(g, 6, &sp, err, sizeof err));
  ck_assert_str_eq(err, "the model has 5 operations: it cannot be cut into 6 stages");
  /* marks: an output the marked value is computed from stays before the
   * mark (its reader is there) and reaches the last stage through the cuts */
  const char *marks =
      "graph marks {\n"
      "  %0 = input {name=\"x\"} : f32[4, 8]\n"
      "  %1 = param {name=\"w1\", init=\"uniform(0.3)\"} : f32[8, 8]\n"
      "  %2 = matmul %0, %1 : f32[4, 8]\n"
      "  %3 = relu %2 : f32[4, 8]\n"
      "  %4 = stage %3 : f32[4, 8]\n"
      "  %5 = matmul %4, %1 : f32[4, 8]\n"
      "  return %5 as \"y\", %3 as \"h\"\n"
      "}\n";
  g = compile_at(&ctx, marks, -1).g;
  ck_assert_msg(pass_stage_split_inference(g, 2, &sp, err, sizeof err), "%s", err);
  ck_assert(sp.marked);
  for (Node *m = g->first; m; m = m->next)
    if (m->op == OP_RELU) ck_assert_int_eq(sp.stage[m->id], 0);
  ck_assert_int_eq(sp.cut[1].n, 2);
  check_inference_graphs(g, &sp);
}
END_TEST

static Suite *stages_suite(void) {
  Suite *s = suite_create("stages");
  TCase *t = tcase_create("split");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, chain_is_balanced_and_contiguous);
  tcase_add_test(t, split_is_deterministic);
  tcase_add_test(t, cut_where_few_bytes_cross);
  tcase_add_test(t, weights_stay_with_readers);
  tcase_add_test(t, refusals);
  tcase_add_test(t, stage_graphs);
  tcase_add_test(t, sync_bn_forward);
  tcase_add_test(t, stage_marks);
  tcase_add_test(t, inference_split);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(stages_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
