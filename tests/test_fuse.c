/* Check suite for fusion: passes/fuse.c's groups on hand-written graphs,
 * their IR text ("#kN") and the verifier's rules for them, the fused
 * lowering (codegen/fuse_lower.c: one kernel per group, GEMM leaves,
 * the implicit-GEMM convolution, attention) compiled by NVRTC for sm_90
 * and run on emu against ir_eval (f32, 1e-5), the kernel-IR passes
 * (codegen/unroll.c) and the launch counts of the example models. */
#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "config.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "tests/testutil.h"
#include "passes/pass.h"
#include "runtime/device.h"
#include "tests/randgraph.h"

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* ---- parsing, fusing, compiling ---- */

typedef struct Job {
  const char *text;
  bool fuse, remat; /* remat: passes/remat.c before fusion */
  CgOptions opts;
  Graph *g;
  CgResult r;
  bool parsed, verified, ok;
} Job;

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  if (!j->g) return 0;
  j->parsed = true;
  if (!ir_verify(j->g)) return 0;
  if (j->fuse) {
    PassCtx pc = {.ctx = c};
    if (j->remat) pass_remat(j->g, &pc);
    pass_fuse(j->g, &pc);
    if (!ir_verify(j->g)) return 0;
  }
  j->verified = true;
  j->ok = cg_compile_opts(j->g, &j->opts, &j->r);
  return 0;
}

static Job compile_job(Job j) {
  int rc = ctx_guard(&ctx, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "compile failed:\n%s", diag_text(&ctx));
  return j;
}

static Job compile_with(const char *text, bool fuse, CgOptions opts) {
  return compile_job((Job){.text = text, .fuse = fuse, .opts = opts});
}

static Job fused(const char *text) { return compile_with(text, true, (CgOptions){0}); }

/* The group of the node defining the value printed as %id. */
static int group_of(Graph *g, int id) {
  ir_number(g);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_out; i++)
      if (n->out[i].id == id) return n->group;
  ck_abort_msg("no value %%%d", id);
  return -2;
}

static int count_steps(const RtPlan *p, RtStepKind kind) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == (uint32_t)kind;
  return n;
}

/* The plan on emu with random inputs in [lo, hi) against ir_eval, f32
 * within 1e-5 (testutil.h); skips quietly where the emu device cannot
 * start. */
static void check_numbers(Job *j, double lo, double hi) {
  test_emu_matches_eval(j->g, j->r.plan, 11, lo, hi, 1e-5);
}

/* text fused (after remat when asked), through NVRTC, on emu. */
static Job check_fused_with(const char *text, bool remat) {
  Job j = compile_job((Job){.text = text, .fuse = true, .remat = remat});
  test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, -2, 2);
  return j;
}

static Job check_fused(const char *text) { return check_fused_with(text, false); }

/* ---- which ops go together ---- */

START_TEST(elementwise_chain_is_one_kernel) {
  Job j = check_fused(
      "graph chain {\n"
      "  %x = input {name=\"x\"} : f32[4, 33]\n"
      "  %y = input {name=\"y\"} : f32[33]\n"
      "  %k = const {value=0.5} : f32[]\n"
      "  %0 = relu %x : f32[4, 33]\n"
      "  %1 = mul %0, %k : f32[4, 33]\n"
      "  %2 = add %1, %y : f32[4, 33]\n"
      "  %3 = tanh %2 : f32[4, 33]\n"
      "  return %3 as \"out\"\n"
      "}\n");
  int k = group_of(j.g, 3);
  ck_assert_int_ge(k, 0);
  ck_assert_int_eq(group_of(j.g, 4), k);
  ck_assert_int_eq(group_of(j.g, 5), k);
  ck_assert_int_eq(group_of(j.g, 6), k);
  ck_assert_int_eq(group_of(j.g, 0), -1); /* inputs and consts stay out */
  ck_assert_int_eq(group_of(j.g, 2), -1);
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  ck_assert_ptr_nonnull(strstr(j.r.source, "0.5f")); /* the const is an immediate */
}
END_TEST

START_TEST(shared_values_and_outputs_are_stored) {
  Job j = check_fused(
      "graph shared {\n"
      "  %x = input {name=\"x\"} : f32[64]\n"
      "  %0 = exp %x : f32[64]\n"
      "  %1 = neg %0 : f32[64]\n"
      "  %2 = sigmoid %0 : f32[64]\n"
      "  %3 = add %1, %2 : f32[64]\n"
      "  %4 = abs %3 : f32[64]\n"
      "  %5 = relu %4 : f32[64]\n"
      "  return %5 as \"out\", %4 as \"mid\"\n"
      "}\n");
  /* %0 has two users, both in the group: it joins them (no duplicate:
   * one let).  %4 is an output of %5's shape: a side output, stored by
   * the same kernel (check_fused compared both outputs). */
  int k = group_of(j.g, 6);
  ck_assert_int_ge(k, 0);
  for (int i = 1; i <= 5; i++) ck_assert_int_eq(group_of(j.g, i), k);
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  int exps = 0;
  for (const char *at = j.r.source; (at = strstr(at, "expf(x[")); at++) exps++;
  ck_assert_int_eq(exps, 1); /* one let, read by both users */
}
END_TEST

/* Side outputs: a value the forward and a later consumer both read
 * (an LSTM's gates, read again by its backward) is stored by the kernel
 * that computes it, beside the root, in a map and in a reduction's
 * epilogue; a use before the root keeps it out. */
START_TEST(side_outputs_are_stored_beside_the_root) {
  Job j = check_fused(
      "graph gates {\n"
      "  %x = input {name=\"x\"} : f32[6, 8]\n"
      "  %c = input {name=\"c\"} : f32[6, 2]\n"
      "  %0 = slice %x {starts=[0, 0], ends=[6, 2], steps=[1, 1]} : f32[6, 2]\n"
      "  %1 = sigmoid %0 : f32[6, 2]\n"
      "  %2 = slice %x {starts=[0, 2], ends=[6, 4], steps=[1, 1]} : f32[6, 2]\n"
      "  %3 = tanh %2 : f32[6, 2]\n"
      "  %4 = mul %1, %c : f32[6, 2]\n"
      "  %5 = add %4, %3 : f32[6, 2]\n"
      "  %6 = tanh %5 : f32[6, 2]\n"
      "  %7 = mul %6, %3 : f32[6, 2]\n"
      "  %8 = softmax %7 {axis=1} : f32[6, 2]\n"
      "  %9 = mul %8, %1 : f32[6, 2]\n"
      "  %10 = exp %9 : f32[6, 2]\n"
      "  %11 = sub %10, %1 : f32[6, 2]\n"
      "  %12 = add %11, %9 : f32[6, 2]\n"
      "  return %12 as \"y\", %5 as \"cell\"\n"
      "}\n");
  /* The output %5 roots a group that stores the gates %1 and %3 too
   * (the softmax's group reads them after %5); that group takes %6 and
   * %7 into its loads and %9 into its epilogue.  Two kernels. */
  int k = group_of(j.g, 7);
  for (int i = 2; i <= 7; i++) ck_assert_int_eq(group_of(j.g, i), k);
  int e = group_of(j.g, 14);
  ck_assert_int_ne(e, k);
  for (int i = 8; i <= 14; i++) ck_assert_int_eq(group_of(j.g, i), e);
  ck_assert_int_eq(j.r.plan->n_steps, 2);
  /* An epilogue value read after its root is stored at the anchor's store. */
  j = check_fused(
      "graph epi {\n"
      "  %x = input {name=\"x\"} : f32[5, 7]\n"
      "  %0 = softmax %x {axis=1} : f32[5, 7]\n"
      "  %1 = mul %0, %x : f32[5, 7]\n"
      "  %2 = exp %1 : f32[5, 7]\n"
      "  %3 = reduce_sum %1 {axes=[1], keepdims=1} : f32[5, 1]\n"
      "  return %2 as \"y\", %3 as \"s\"\n"
      "}\n");
  ck_assert_int_eq(group_of(j.g, 1), group_of(j.g, 3));
  ck_assert_int_eq(group_of(j.g, 2), group_of(j.g, 3));
  ck_assert_int_eq(j.r.plan->n_steps, 2);
  /* Read before the root: %0 stays out of %2's group. */
  j = check_fused(
      "graph before {\n"
      "  %x = input {name=\"x\"} : f32[64]\n"
      "  %0 = exp %x : f32[64]\n"
      "  %1 = reduce_sum %0 {axes=[0], keepdims=1} : f32[1]\n"
      "  %2 = add %0, %1 : f32[64]\n"
      "  %3 = mul %2, %0 : f32[64]\n"
      "  return %3 as \"y\"\n"
      "}\n");
  ck_assert_int_ne(group_of(j.g, 1), group_of(j.g, 4));
}
END_TEST

/* A pad is an index move: a slice's gradient (a pad) summed with the
 * others' is one kernel, the padded operand read only inside it; a pad
 * before a reduction is in its loads. */
START_TEST(pads_are_fused) {
  Job j = check_fused(
      "graph pads {\n"
      "  %x = input {name=\"x\"} : f32[3, 2]\n"
      "  %y = input {name=\"y\"} : f32[3, 2]\n"
      "  %0 = sigmoid %x : f32[3, 2]\n"
      "  %1 = pad %0 {pads=[0, 0, 0, 4]} : f32[3, 6]\n"
      "  %2 = mul %y, %x : f32[3, 2]\n"
      "  %3 = pad %2 {pads=[0, 2, 0, 2], value=0.5} : f32[3, 6]\n"
      "  %4 = pad %y {pads=[0, 4, 0, 0]} : f32[3, 6]\n"
      "  %5 = add %1, %3 : f32[3, 6]\n"
      "  %6 = add %5, %4 : f32[3, 6]\n"
      "  %7 = pad %6 {pads=[1, 0, 0, 1]} : f32[4, 7]\n"
      "  %8 = reduce_sum %7 {axes=[0]} : f32[7]\n"
      "  return %6 as \"sum\", %8 as \"cols\"\n"
      "}\n");
  int k = group_of(j.g, 8);
  for (int i = 2; i <= 8; i++) ck_assert_int_eq(group_of(j.g, i), k);
  ck_assert_int_eq(group_of(j.g, 9), group_of(j.g, 10));
  ck_assert_int_eq(j.r.plan->n_steps, 2);
}
END_TEST

/* Concats are index maps too: Llama's rotate_half (two slices of the
 * last axis, one negated, joined, times sin, plus x times cos) is one
 * kernel; three operands of different lengths along axis 0, one a graph
 * input read from memory, one kernel with what follows; an operand of
 * the concat used twice reads the same element. */
START_TEST(concats_are_fused) {
  Job j = check_fused(
      "graph rope {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 8]\n"
      "  %c = input {name=\"cos\"} : f32[8]\n"
      "  %s = input {name=\"sin\"} : f32[8]\n"
      "  %0 = slice %x {starts=[0, 0, 4], ends=[2, 3, 8], steps=[1, 1, 1]} : f32[2, 3, 4]\n"
      "  %1 = neg %0 : f32[2, 3, 4]\n"
      "  %2 = slice %x {starts=[0, 0, 0], ends=[2, 3, 4], steps=[1, 1, 1]} : f32[2, 3, 4]\n"
      "  %3 = concat %1, %2 {axis=2} : f32[2, 3, 8]\n"
      "  %4 = mul %3, %s : f32[2, 3, 8]\n"
      "  %5 = mul %x, %c : f32[2, 3, 8]\n"
      "  %6 = add %5, %4 : f32[2, 3, 8]\n"
      "  return %6 as \"y\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  for (int i = 4; i <= 9; i++) ck_assert_int_eq(group_of(j.g, i), group_of(j.g, 3));
  j = check_fused(
      "graph rows {\n"
      "  %x = input {name=\"x\"} : f32[1, 4]\n"
      "  %y = input {name=\"y\"} : f32[2, 4]\n"
      "  %z = input {name=\"z\"} : f32[3, 4]\n"
      "  %0 = relu %x : f32[1, 4]\n"
      "  %1 = sigmoid %z : f32[3, 4]\n"
      "  %2 = concat %0, %y, %1, %1 {axis=0} : f32[9, 4]\n"
      "  %3 = mul %2, %2 : f32[9, 4]\n"
      "  return %3 as \"sq\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
}
END_TEST

/* A conv_transpose is an anchor like a conv: a U-Net's upsampling, its
 * skip connection added and a relu, is one kernel (the gather per
 * output element in f32; docs/tensorcores.md for the tensor cores'). */
START_TEST(conv_transpose_takes_an_epilogue) {
  Job j = check_fused(
      "graph up {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 4, 5]\n"
      "  %s = input {name=\"skip\"} : f32[2, 2, 7, 9]\n"
      "  %w = param {name=\"w\"} : f32[3, 2, 3, 3]\n"
      "  %b = param {name=\"b\"} : f32[2]\n"
      "  %0 = conv_transpose2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1], output_pad=[0, 0], dilation=[1, 1], "
      "groups=1} : f32[2, 2, 7, 9]\n"
      "  %1 = add %0, %s : f32[2, 2, 7, 9]\n"
      "  %2 = relu %1 : f32[2, 2, 7, 9]\n"
      "  return %2 as \"y\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  ck_assert_int_eq(group_of(j.g, 4), group_of(j.g, 6));
}
END_TEST

/* i64 arithmetic (a loss moving its class indices) joins the tests and
 * selects around it (t is 0 or 1 in check_numbers: both sides taken). */
START_TEST(i64_arithmetic_is_fused) {
  Job j = check_fused(
      "graph idx {\n"
      "  %t = input {name=\"t\"} : i64[40]\n"
      "  %z = const {value=1} : i64[]\n"
      "  %c = const {value=10} : i64[]\n"
      "  %0 = less %t, %z : bool[40]\n"
      "  %1 = sub %t, %c : i64[40]\n"
      "  %2 = mul %1, %t : i64[40]\n"
      "  %3 = where %0, %2, %t : i64[40]\n"
      "  return %3 as \"safe\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
}
END_TEST

/* Maps of one shape (size-1 dims aside) with no path between them run
 * as one kernel, the earlier's result a side output of the later: a
 * batchnorm's new running statistics beside its inverse deviation.  A
 * map read before the later one's root stays apart. */
/* Kernels with no path between them share a launch (plan_build.c's
 * merge_launch, CgOptions.merge_launches, docs/kernels.md): row
 * reductions (blocks of 1 x 256 or wider, barriers) beside a map (256
 * threads), each on its own blocks, through NVRTC and on emu against
 * ir_eval; apart without the option; a kernel that reads another's
 * result keeps its own launch; split rows' reductions, each with its
 * counters of arrivals. */
static Job check_merged(const char *text) {
  Job j = compile_with(text, true, (CgOptions){.merge_launches = true});
  test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, -2, 2);
  return j;
}

static const char dep_text[] = "graph dep {\n"
                               "  %x = input {name=\"x\"} : f32[6, 300]\n"
                               "  %0 = exp %x : f32[6, 300]\n"
                               "  %1 = reduce_sum %0 {axes=[1]} : f32[6]\n"
                               "  return %0 as \"e\", %1 as \"s\"\n"
                               "}\n";

START_TEST(independent_kernels_share_a_launch) {
  static const char text[] = "graph hfuse {\n"
                             "  %x = input {name=\"x\"} : f32[6, 300]\n"
                             "  %y = input {name=\"y\"} : f32[1000]\n"
                             "  %0 = reduce_sum %x {axes=[1]} : f32[6]\n"
                             "  %1 = tanh %y : f32[1000]\n"
                             "  %2 = reduce_max %x {axes=[0]} : f32[300]\n"
                             "  return %0 as \"s\", %1 as \"t\", %2 as \"m\"\n"
                             "}\n";
  Job j = check_merged(text);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
  ck_assert_int_eq(j.r.plan->n_kernels, 1);
  ck_assert_ptr_nonnull(strstr(j.r.source, "dl_bx = blockIdx.x - "));
  ck_assert_ptr_nonnull(strstr(j.r.plan->steps[j.r.plan->n_init_steps].label, "tanh %"));
  Job a = fused(text);
  ck_assert_int_eq(count_steps(a.r.plan, RT_STEP_LAUNCH), 3);
  ck_assert_int_eq(a.r.plan->n_kernels, 3);
  /* exp's result is returned, so stored by a kernel of its own, and the
   * sum reads it: two launches, not side by side (dependent_kernels_chain
   * puts them in one) */
  Job d = compile_with(dep_text, true, (CgOptions){.merge_launches = true, .no_chain_launches = true});
  check_numbers(&d, -2, 2);
  ck_assert_int_eq(count_steps(d.r.plan, RT_STEP_LAUNCH), 2);
  /* two reductions of rows cut into parts: each part of the launch
   * counts the arrivals of its own rows' parts */
  Job p = check_merged("graph parts {\n"
                       "  %x = input {name=\"x\"} : f32[2, 70000]\n"
                       "  %y = input {name=\"y\"} : f32[3, 50000]\n"
                       "  %0 = reduce_sum %x {axes=[1]} : f32[2]\n"
                       "  %1 = reduce_max %y {axes=[1]} : f32[3]\n"
                       "  return %0 as \"s\", %1 as \"m\"\n"
                       "}\n");
  ck_assert_int_eq(count_steps(p.r.plan, RT_STEP_LAUNCH), 1);
  ck_assert_uint_eq(p.r.plan->sync_bytes, (2 + 3) * 4);
  ck_assert_ptr_nonnull(strstr(p.r.source, "dl_last_arrival(&p1_arrived["));
}
END_TEST

static int occurrences(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* The one launch of a plan and its kernel. */
static const RtKernel *only_launch(const RtPlan *p, const RtLaunch **l) {
  ck_assert_int_eq(count_steps(p, RT_STEP_LAUNCH), 1);
  *l = &p->steps[p->n_init_steps].launch;
  return &p->kernels[(*l)->kernel];
}

/* text chained (checked as check_merged does) and with its dependent
 * kernels apart: fewer launches, the same bits on emu, and the arena at
 * most a few small buffers larger (what the phases hand each other
 * lives through the whole launch, never a large buffer). */
static Job chained_and_apart(const char *text, uint64_t seed) {
  Job c = check_merged(text);
  Job apart = compile_with(text, true, (CgOptions){.merge_launches = true, .no_chain_launches = true});
  int chained = count_steps(c.r.plan, RT_STEP_LAUNCH), alone = count_steps(apart.r.plan, RT_STEP_LAUNCH);
  printf("%s: %d launches chained, %d apart; arena %" PRIu64 " bytes chained, %" PRIu64 " apart\n", c.g->name, chained,
         alone, c.r.plan->arena_bytes, apart.r.plan->arena_bytes);
  ck_assert_int_lt(chained, alone);
  ck_assert_uint_le(c.r.plan->arena_bytes, apart.r.plan->arena_bytes + 1024);
  test_emu_plans_equal(c.g, c.r.plan, apart.r.plan, seed, -2, 2);
  return c;
}

/* A kernel that reads what the launch before it wrote joins it after a
 * grid barrier (plan_build.c's chain_target, cg_kernel_chain,
 * docs/kernels.md): one cooperative launch whose blocks walk each
 * phase's blocks with a stride of the grid (RT_COOP_STRIDE; emu runs it
 * on 4 blocks, so every phase's walk takes several turns), through NVRTC
 * and on emu against ir_eval, and equal bit for bit to the launches
 * apart.  A phase of 256-thread blocks in a launch of 1024 runs four of
 * them side by side; a phase that writes over what an earlier one read
 * keeps the planner's in-place bytes; at most CG_CHAIN_MAX_PHASES
 * phases, then a new launch. */
START_TEST(dependent_kernels_chain) {
  Job d = check_merged(dep_text);
  const RtLaunch *l;
  const RtKernel *k = only_launch(d.r.plan, &l);
  ck_assert_uint_eq(k->cooperative, RT_COOP_STRIDE);
  ck_assert(k->uses_barriers);
  ck_assert_int_eq(occurrences(d.r.source, "dl_grid_sync("), 2); /* the prelude's and the chain's */
  ck_assert_ptr_nonnull(strstr(d.r.plan->steps[d.r.plan->n_init_steps].label, "reduce_sum %"));
  /* the barrier's words are SYNC's, with the rows' counters */
  ck_assert_uint_ge(d.r.plan->sync_bytes, CG_CHAIN_BAR_WORDS * 4);

  /* a batchnorm's shape: statistics over rows cut into parts (1024
   * threads, counters of arrivals), then the map that reads them (256
   * threads a block: four side by side), then a reduction of that */
  static const char bn[] = "graph bn {\n"
                           "  %x = input {name=\"x\"} : f32[3, 70000]\n"
                           "  %e = exp %x : f32[3, 70000]\n"
                           "  %0 = reduce_mean %e {axes=[1], keepdims=1} : f32[3, 1]\n"
                           "  %1 = sub %e, %0 : f32[3, 70000]\n"
                           "  %2 = reduce_max %1 {axes=[1]} : f32[3]\n"
                           "  return %1 as \"centered\", %2 as \"top\", %0 as \"mean\"\n"
                           "}\n";
  Job c = chained_and_apart(bn, 5);
  ck_assert_ptr_nonnull(strstr(c.r.source, "dl_vb += gridDim.x * 4u"));

  /* a map over its own input after the reduction that read it: in place
   * as apart (the exp's bytes, dead after it, take the division's) */
  static const char norm[] = "graph norm {\n"
                             "  %x = input {name=\"x\"} : f32[4, 3000]\n"
                             "  %e = exp %x : f32[4, 3000]\n"
                             "  %s = reduce_sum %e {axes=[1], keepdims=1} : f32[4, 1]\n"
                             "  %t = tanh %s : f32[4, 1]\n"
                             "  %d = mul %e, %t : f32[4, 3000]\n"
                             "  %r = reduce_min %d {axes=[0]} : f32[3000]\n"
                             "  return %r as \"r\", %t as \"t\"\n"
                             "}\n";
  chained_and_apart(norm, 7);

  /* GEMM tiles start a chain (f32, on the CUDA cores): a convolution
   * split along K at batch 1 (its partial sums and counters of arrivals
   * in its phase) and the mean of each channel of it (a batchnorm's
   * statistics) after the barrier; never a GEMM after one, so the
   * convolution before it is a launch of its own.  The arena no larger
   * than apart, although the split GEMM's partial sums live through the
   * chain (plan_build.c counts them as bytes a chain holds). */
  static const char convs[] = "graph convs {\n"
                              "  %x = input {name=\"x\"} : f32[1, 32, 7, 7]\n"
                              "  %w1 = input {name=\"w1\"} : f32[64, 32, 3, 3]\n"
                              "  %w2 = input {name=\"w2\"} : f32[32, 64, 3, 3]\n"
                              "  %0 = conv2d %x, %w1 {stride=[1, 1], pad=[1, 1, 1, 1], dilation=[1, 1], groups=1} "
                              ": f32[1, 64, 7, 7]\n"
                              "  %1 = relu %0 : f32[1, 64, 7, 7]\n"
                              "  %2 = conv2d %1, %w2 {stride=[1, 1], pad=[1, 1, 1, 1], dilation=[1, 1], groups=1} "
                              ": f32[1, 32, 7, 7]\n"
                              "  %3 = reduce_mean %2 {axes=[0, 2, 3], keepdims=1} : f32[1, 32, 1, 1]\n"
                              "  return %2 as \"y\", %3 as \"m\"\n"
                              "}\n";
  Job cv = compile_with(convs, true, (CgOptions){.merge_launches = true});
  Job cv_apart = compile_with(convs, true, (CgOptions){.merge_launches = true, .no_chain_launches = true});
  test_nvrtc(cv.r.source, "sm_90");
  /* inputs in [0, 1): sums of 288 and 576 positive terms, which an f32
   * sum in the split's order keeps within 1e-5 */
  test_emu_plans_equal(cv.g, cv.r.plan, cv_apart.r.plan, 9, 0, 1);
  ck_assert_uint_le(cv.r.plan->arena_bytes, cv_apart.r.plan->arena_bytes);
  ck_assert_int_eq(count_steps(cv.r.plan, RT_STEP_LAUNCH), 2);
  ck_assert_int_eq(count_steps(cv_apart.r.plan, RT_STEP_LAUNCH), 3);
  const char *second = cv.r.plan->steps[cv.r.plan->n_init_steps + 1].label;
  ck_assert_msg(strstr(second, "conv2d %") && strstr(second, "split-K") && strstr(second, "reduce_mean %"), "%s",
                second);

  /* seven dependent reductions: CG_CHAIN_MAX_PHASES phases, then a
   * launch of its own */
  static const char five[] = "graph seven {\n"
                             "  %x = input {name=\"x\"} : f32[64, 64]\n"
                             "  %0 = reduce_sum %x {axes=[1], keepdims=1} : f32[64, 1]\n"
                             "  %1 = reduce_sum %0 {axes=[0], keepdims=1} : f32[1, 1]\n"
                             "  %2 = sub %x, %1 : f32[64, 64]\n"
                             "  %3 = reduce_max %2 {axes=[0], keepdims=1} : f32[1, 64]\n"
                             "  %4 = sub %2, %3 : f32[64, 64]\n"
                             "  %5 = reduce_min %4 {axes=[1], keepdims=1} : f32[64, 1]\n"
                             "  %6 = sub %4, %5 : f32[64, 64]\n"
                             "  %7 = reduce_max %6 {axes=[0], keepdims=1} : f32[1, 64]\n"
                             "  %8 = sub %6, %7 : f32[64, 64]\n"
                             "  %9 = reduce_sum %8 {axes=[1], keepdims=1} : f32[64, 1]\n"
                             "  %10 = sub %8, %9 : f32[64, 64]\n"
                             "  %11 = reduce_min %10 {axes=[0]} : f32[64]\n"
                             "  return %11 as \"m\", %2 as \"c\"\n"
                             "}\n";
  Job f = check_merged(five);
  int kernels = 0;
  for (const char *at = strstr(f.r.source, "__global__"); at; kernels++) {
    const char *next = strstr(at + 1, "__global__");
    int syncs = 0;
    for (const char *q = strstr(at, "dl_grid_sync(dl_bar"); q && (!next || q < next); q = strstr(q + 1, "dl_grid_sync(dl_bar"))
      syncs++;
    ck_assert_int_le(syncs, CG_CHAIN_MAX_PHASES - 1);
    at = next;
  }
  printf("seven: %d launches, %d kernels\n", count_steps(f.r.plan, RT_STEP_LAUNCH), kernels);
  ck_assert_int_ge(count_steps(f.r.plan, RT_STEP_LAUNCH), 2);

  /* without the option, every dependent kernel its own launch */
  Job o = compile_with(dep_text, true, (CgOptions){.merge_launches = false});
  ck_assert_int_eq(count_steps(o.r.plan, RT_STEP_LAUNCH), 2);
}
END_TEST

/* A concat along its first axis (or after dims of 1) holds each operand
 * as one run of bytes: products computed by steps of their own write
 * there, and the concat copies nothing (plan_build.c's
 * place_concat_operands); along an inner axis it is a kernel.  On emu
 * against ir_eval. */
START_TEST(concat_operands_in_place) {
  Job j = check_fused("graph cat {\n"
                      "  %x = input {name=\"x\"} : f32[4, 8]\n"
                      "  %w1 = input {name=\"w1\"} : f32[8, 5]\n"
                      "  %w2 = input {name=\"w2\"} : f32[8, 5]\n"
                      "  %w3 = input {name=\"w3\"} : f32[8, 3]\n"
                      "  %a = matmul %x, %w1 : f32[4, 5]\n"
                      "  %b = matmul %x, %w2 : f32[4, 5]\n"
                      "  %rows = concat %a, %b {axis=0} : f32[8, 5]\n"
                      "  %s = matmul %x, %w3 : f32[4, 3]\n"
                      "  %t = matmul %x, %w2 : f32[4, 5]\n"
                      "  %cols = concat %s, %t {axis=1} : f32[4, 8]\n"
                      "  %c = reduce_sum %x {axes=[0], keepdims=1} : f32[1, 8]\n"
                      "  %e = exp %x : f32[4, 8]\n"
                      "  %one = concat %c, %e {axis=0} : f32[5, 8]\n"
                      "  return %rows as \"rows\", %cols as \"cols\", %one as \"one\"\n"
                      "}\n");
  const RtPlan *p = j.r.plan;
  int gemms_in_place = 0;
  for (uint32_t i = p->n_init_steps; i < p->n_steps; i++) {
    const RtStep *st = &p->steps[i];
    if (st->kind == RT_STEP_GEMM && st->gemm.c.space == RT_SPACE_OUTPUT && st->gemm.c.index == 0)
      ck_assert_uint_eq(st->gemm.c.offset, (uint64_t)(gemms_in_place++) * 4 * 5 * 4);
  }
  /* rows: both products in place; cols (an inner axis): a kernel; one:
   * the sum's and the exp's kernels write in place */
  ck_assert_int_eq(gemms_in_place, 2);
  int copies = 0;
  for (uint32_t i = p->n_init_steps; i < p->n_steps; i++)
    if (p->steps[i].kind == RT_STEP_LAUNCH) copies += occurrences(p->steps[i].label, "concat %");
  ck_assert_int_eq(copies, 1);
  j = check_fused("graph cat1 {\n"
                  "  %x = input {name=\"x\"} : f32[4, 6]\n"
                  "  %w1 = input {name=\"w1\"} : f32[6, 5]\n"
                  "  %w2 = input {name=\"w2\"} : f32[6, 5]\n"
                  "  %a = matmul %x, %w1 : f32[4, 5]\n"
                  "  %b = matmul %x, %w2 : f32[4, 5]\n"
                  "  %rows = concat %a, %b {axis=0} : f32[8, 5]\n"
                  "  return %rows as \"rows\"\n"
                  "}\n");
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 0);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_GEMM), 2);
  /* an operand that would start off 16 bytes is copied instead (vector
   * stores and tiles' stores assume aligned starts) */
  j = check_fused("graph cat2 {\n"
                  "  %x = input {name=\"x\"} : f32[4, 3]\n"
                  "  %c = reduce_sum %x {axes=[0], keepdims=1} : f32[1, 3]\n"
                  "  %e = exp %x : f32[4, 3]\n"
                  "  %one = concat %c, %e {axis=0} : f32[5, 3]\n"
                  "  return %one as \"one\"\n"
                  "}\n");
  ck_assert_ptr_nonnull(strstr(j.r.plan->steps[j.r.plan->n_steps - 1].label, "concat %"));
}
END_TEST

START_TEST(independent_maps_share_a_kernel) {
  Job j = check_fused(
      "graph stats {\n"
      "  %m = input {name=\"m\"} : f32[1, 6, 1, 1]\n"
      "  %v = input {name=\"v\"} : f32[1, 6, 1, 1]\n"
      "  %rm = input {name=\"rm\"} : f32[6]\n"
      "  %rv = input {name=\"rv\"} : f32[6]\n"
      "  %k = const {value=0.9} : f32[]\n"
      "  %0 = add %v, %k : f32[1, 6, 1, 1]\n"
      "  %1 = rsqrt %0 : f32[1, 6, 1, 1]\n"
      "  %2 = mul %rm, %k : f32[6]\n"
      "  %3 = reshape %m {shape=[6]} : f32[6]\n"
      "  %4 = add %2, %3 : f32[6]\n"
      "  %5 = mul %rv, %k : f32[6]\n"
      "  %6 = reshape %v {shape=[6]} : f32[6]\n"
      "  %7 = add %5, %6 : f32[6]\n"
      "  %8 = sigmoid %4 : f32[6]\n"
      "  %9 = mul %7, %8 : f32[6]\n"
      "  return %1 as \"rstd\", %4 as \"rm\", %7 as \"rv\", %9 as \"late\"\n"
      "}\n");
  /* %9's kernel takes %4 and %7 (outputs: side outputs) and joins %1's
   * map: one kernel. */
  int k = group_of(j.g, 14);
  ck_assert_int_ge(k, 0);
  ck_assert_int_eq(group_of(j.g, 6), k);
  ck_assert_int_eq(group_of(j.g, 9), k);
  ck_assert_int_eq(group_of(j.g, 12), k);
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  /* Its cost: the four inputs read, the root and three side outputs
   * written, 24 bytes each. */
  ck_assert_double_eq(j.r.step_costs[j.r.plan->n_init_steps].bytes, 8 * 24);
  /* %1 is read by the reduction %2 before %4, the later map's root:
   * no join. */
  j = check_fused(
      "graph apart {\n"
      "  %x = input {name=\"x\"} : f32[8]\n"
      "  %y = input {name=\"y\"} : f32[8]\n"
      "  %0 = exp %x : f32[8]\n"
      "  %1 = neg %0 : f32[8]\n"
      "  %2 = reduce_sum %1 {axes=[0], keepdims=1} : f32[1]\n"
      "  %3 = tanh %y : f32[8]\n"
      "  %4 = abs %3 : f32[8]\n"
      "  return %4 as \"a\", %2 as \"s\", %1 as \"n\"\n"
      "}\n");
  ck_assert_int_ge(group_of(j.g, 3), 0);
  ck_assert_int_ne(group_of(j.g, 3), group_of(j.g, 6));
  ck_assert_int_eq(j.r.plan->n_steps, 3);
}
END_TEST

/* A map over a reduction's rows that reads its results (a batchnorm's
 * variance and new running statistics from its sums) is their
 * kernel's epilogue, its values side outputs where read outside; a
 * param it updates is written in place (its kernel reads each element
 * only where it then stores it).  Not when a result is read by a kernel
 * that runs before the map. */
START_TEST(rows_map_takes_in_its_reductions) {
  static const char *const shapes[] = {"f32[6, 300]", "f32[4, 70000]"};
  for (int big = 0; big < 2; big++) {
    int rows = big ? 4 : 6;
    char text[2048];
    snprintf(text, sizeof text,
             "graph stats {\n"
             "  %%x = input {name=\"x\"} : %s\n"
             "  %%r = param {name=\"r\"} : f32[%d, 1]\n"
             "  %%0 = reduce_mean %%x {axes=[1]} : f32[%d]\n"
             "  %%1 = mul %%x, %%x : %s\n"
             "  %%2 = reduce_mean %%1 {axes=[1], keepdims=1} : f32[%d, 1]\n"
             "  %%3 = reshape %%0 {shape=[%d, 1]} : f32[%d, 1]\n"
             "  %%4 = mul %%3, %%3 : f32[%d, 1]\n"
             "  %%5 = sub %%2, %%4 : f32[%d, 1]\n"
             "  %%k = const {value=0.9} : f32[]\n"
             "  %%6 = mul %%r, %%k : f32[%d, 1]\n"
             "  %%7 = add %%6, %%5 : f32[%d, 1]\n"
             "  return %%5 as \"var\", %%0 as \"mean\", %%7 as \"r.new\" updates \"r\"\n"
             "}\n",
             shapes[big], rows, rows, shapes[big], rows, rows, rows, rows, rows, rows, rows);
    Job j = check_fused(text);
    int k = group_of(j.g, 2);
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(group_of(j.g, 4), k);
    ck_assert_int_eq(group_of(j.g, 7), k);
    ck_assert_int_eq(group_of(j.g, 10), k);
    ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
    ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_COPY), 0);
    ck_assert_uint_eq(j.r.plan->sync_bytes, big ? 4 * 4 : 0);
  }
  /* the sum is read by the map over x before the product of the rows */
  Job j = check_fused("graph early {\n"
                      "  %x = input {name=\"x\"} : f32[6, 300]\n"
                      "  %0 = reduce_sum %x {axes=[1]} : f32[6]\n"
                      "  %1 = reduce_max %x {axes=[1]} : f32[6]\n"
                      "  %2 = reshape %0 {shape=[6, 1]} : f32[6, 1]\n"
                      "  %3 = sub %x, %2 : f32[6, 300]\n"
                      "  %4 = mul %0, %1 : f32[6]\n"
                      "  return %3 as \"d\", %4 as \"p\"\n"
                      "}\n");
  ck_assert_int_ne(group_of(j.g, 1), group_of(j.g, 5));
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 3);
}
END_TEST

/* Reductions of one input shape over the same axes with no path between
 * them (a batchnorm's two gradient sums) share one kernel, an
 * accumulator each per row: with and without split rows, sums, maxima
 * and means, keepdims or not. */
START_TEST(sibling_reductions_share_a_kernel) {
  static const char *const shapes[] = {"f32[3, 5, 4, 7]", "f32[16, 4, 64, 64]"};
  for (int big = 0; big < 2; big++) {
    const char *t = shapes[big];
    char text[2048];
    snprintf(text, sizeof text,
             "graph siblings {\n"
             "  %%x = input {name=\"x\"} : %s\n"
             "  %%y = input {name=\"y\"} : %s\n"
             "  %%0 = mul %%x, %%y : %s\n"
             "  %%1 = reduce_sum %%0 {axes=[0, 2, 3], keepdims=0} : f32[%d]\n"
             "  %%2 = reduce_max %%y {axes=[0, 2, 3], keepdims=1} : f32[1, %d, 1, 1]\n"
             "  %%3 = neg %%x : %s\n"
             "  %%4 = reduce_mean %%3 {axes=[0, 2, 3], keepdims=0} : f32[%d]\n"
             "  %%5 = reshape %%2 {shape=[%d]} : f32[%d]\n"
             "  %%6 = add %%1, %%5 : f32[%d]\n"
             "  return %%6 as \"a\", %%4 as \"m\", %%1 as \"s\"\n"
             "}\n",
             t, t, t, big ? 4 : 5, big ? 4 : 5, t, big ? 4 : 5, big ? 4 : 5, big ? 4 : 5, big ? 4 : 5);
    Job j = check_fused(text);
    int k = group_of(j.g, 3);
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(group_of(j.g, 4), k);
    ck_assert_int_eq(group_of(j.g, 6), k);
    ck_assert_int_eq(group_of(j.g, 8), k);
    /* one reduction kernel (its rows split in parts when big), the add
     * of two of the results its epilogue */
    ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
    /* a counter for each of the 4 rows (of 65,536: a block each) */
    ck_assert_uint_eq(j.r.plan->sync_bytes, big ? 4 * 4 : 0);
  }
  /* One reduction reads the other's result: no join. */
  Job j = check_fused(
      "graph chained {\n"
      "  %x = input {name=\"x\"} : f32[4, 6]\n"
      "  %0 = reduce_sum %x {axes=[1], keepdims=1} : f32[4, 1]\n"
      "  %1 = sub %x, %0 : f32[4, 6]\n"
      "  %2 = reduce_max %1 {axes=[1], keepdims=1} : f32[4, 1]\n"
      "  return %2 as \"o\", %0 as \"s\"\n"
      "}\n");
  ck_assert_int_ne(group_of(j.g, 1), group_of(j.g, 3));
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 2);
  /* The earlier sum's operand (a GEMM's result) is dead after the
   * second GEMM, which runs before the third (the later sum's leaf):
   * joining would hold it until the later sum, so they stay apart;
   * returned as well, it is kept anyway and they join. */
  for (int kept = 0; kept < 2; kept++) {
    char text[1024];
    snprintf(text, sizeof text,
             "graph held {\n"
             "  %%a = input {name=\"a\"} : f32[4, 6]\n"
             "  %%w = input {name=\"w\"} : f32[6, 6]\n"
             "  %%0 = matmul %%a, %%w : f32[4, 6]\n"
             "  %%1 = reduce_sum %%0 {axes=[0], keepdims=0} : f32[6]\n"
             "  %%2 = matmul %%0, %%w : f32[4, 6]\n"
             "  %%3 = matmul %%2, %%w : f32[4, 6]\n"
             "  %%4 = reduce_sum %%3 {axes=[0], keepdims=0} : f32[6]\n"
             "  return %%4 as \"o\", %%1 as \"s\"%s\n"
             "}\n",
             kept ? ", %0 as \"p\"" : "");
    j = check_fused(text);
    ck_assert_int_eq(group_of(j.g, 3) >= 0 && group_of(j.g, 3) == group_of(j.g, 6), kept);
    ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), kept ? 1 : 2);
  }
}
END_TEST

/* A sum of products (a weight used at every step of a recurrent layer
 * gets one per step): the first GEMM writes the sum, the others add to
 * it (beta 1), and no kernel runs. */
START_TEST(product_sums_accumulate_in_the_gemm) {
  Job j = check_fused(
      "graph sum {\n"
      "  %a = input {name=\"a\"} : f32[4, 5]\n"
      "  %b = input {name=\"b\"} : f32[4, 6]\n"
      "  %c = input {name=\"c\"} : f32[4, 5]\n"
      "  %d = input {name=\"d\"} : f32[4, 6]\n"
      "  %4 = matmul %a, %b {trans_a=1} : f32[5, 6]\n"
      "  %9 = matmul %c, %d {trans_a=1} : f32[5, 6]\n"
      "  %10 = add %4, %9 : f32[5, 6]\n"
      "  %11 = matmul %a, %d {trans_a=1} : f32[5, 6]\n"
      "  %12 = add %11, %10 : f32[5, 6]\n"
      "  return %12 as \"dw\"\n"
      "}\n");
  int gemms = 0, accumulating = 0;
  for (uint32_t i = 0; i < j.r.plan->n_steps; i++) {
    const RtStep *st = &j.r.plan->steps[i];
    ck_assert_int_ne(st->kind, RT_STEP_LAUNCH);
    if (st->kind != RT_STEP_GEMM) continue;
    gemms++;
    accumulating += st->gemm.beta == 1.0f;
  }
  ck_assert_int_eq(gemms, 3);
  ck_assert_int_eq(accumulating, 2);
}
END_TEST

/* A pool's gradient (one thread per element of its result) runs the
 * relu's gradient after it at its store: one kernel each. */
START_TEST(pool_gradients_take_an_epilogue) {
  Job j = check_fused(
      "graph back {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 6, 6]\n"
      "  %dy = input {name=\"dy\"} : f32[2, 3, 3, 3]\n"
      "  %z = const {value=0} : f32[]\n"
      "  %0 = maxpool_grad %dy, %x {kernel=[2, 2], stride=[2, 2], pad=[0, 0, 0, 0], dilation=[1, 1], ceil_mode=0} : f32[2, 3, 6, 6]\n"
      "  %1 = greater %x, %z : bool[2, 3, 6, 6]\n"
      "  %2 = cast %1 {to=f32} : f32[2, 3, 6, 6]\n"
      "  %3 = mul %0, %2 : f32[2, 3, 6, 6]\n"
      "  %4 = avgpool_grad %dy {size=[6, 6], kernel=[2, 2], stride=[2, 2], pad=[0, 0, 0, 0], dilation=[1, 1]} : f32[2, 3, 6, 6]\n"
      "  %5 = add %4, %x : f32[2, 3, 6, 6]\n"
      "  return %3 as \"max\", %5 as \"avg\"\n"
      "}\n");
  ck_assert_int_eq(group_of(j.g, 3), group_of(j.g, 6));
  ck_assert_int_eq(group_of(j.g, 7), group_of(j.g, 8));
  ck_assert_int_eq(j.r.plan->n_steps, 2);
}
END_TEST

START_TEST(value_used_by_two_groups_is_not_duplicated) {
  Job j = check_fused(
      "graph fanout {\n"
      "  %x = input {name=\"x\"} : f32[8, 16]\n"
      "  %w = param {name=\"w\"} : f32[16, 16]\n"
      "  %0 = exp %x : f32[8, 16]\n"
      "  %1 = matmul %0, %w : f32[8, 16]\n"
      "  %2 = relu %0 : f32[8, 16]\n"
      "  %3 = add %1, %2 : f32[8, 16]\n"
      "  return %3 as \"out\"\n"
      "}\n");
  /* %0 feeds a GEMM, which reads memory: it is stored, computed once. */
  ck_assert_int_eq(group_of(j.g, 2), -1);
  ck_assert_int_eq(group_of(j.g, 3), group_of(j.g, 5));
  ck_assert_int_eq(group_of(j.g, 4), group_of(j.g, 5));
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_GEMM), 1);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 2);
}
END_TEST

/* remat (passes/remat.c) copies a run's cheap value into each reader
 * that evaluates it inline when that holds no more bytes: a training
 * batchnorm's xhat = (x - mean) * rstd, read by the sum of dy xhat and
 * by dx, is computed in both kernels from x (which it replaces in the
 * arena) and no kernel stores it.  Not when a copy would keep two
 * dying operands instead of one value (a - b), nor when what stays is a
 * slice of a larger value (an LSTM's gate, stored beside its forward
 * kernel as before). */
START_TEST(cheap_values_are_recomputed_by_their_readers) {
  static const char xhat[] =
      "graph bn_back {\n"
      "  %x = input {name=\"x\"} : f32[4, 3, 5, 6]\n"
      "  %dy = input {name=\"dy\"} : f32[4, 3, 5, 6]\n"
      "  %m = input {name=\"mean\"} : f32[3, 1, 1]\n"
      "  %r = input {name=\"rstd\"} : f32[3, 1, 1]\n"
      "  %0 = sub %x, %m : f32[4, 3, 5, 6]\n"
      "  %1 = mul %0, %r : f32[4, 3, 5, 6]\n"
      "  %2 = mul %dy, %1 : f32[4, 3, 5, 6]\n"
      "  %3 = reduce_sum %2 {axes=[0, 2, 3], keepdims=0} : f32[3]\n"
      "  %4 = reshape %3 {shape=[3, 1, 1]} : f32[3, 1, 1]\n"
      "  %5 = mul %1, %4 : f32[4, 3, 5, 6]\n"
      "  %6 = sub %dy, %5 : f32[4, 3, 5, 6]\n"
      "  return %6 as \"dx\", %3 as \"dw\"\n"
      "}\n";
  for (int remat = 0; remat < 2; remat++) {
    Job j = check_fused_with(xhat, remat);
    /* xhat stored by a kernel of its own, or computed by both */
    ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), remat ? 2 : 3);
    int xhats = 0;
    for (Node *n = j.g->first; n; n = n->next)
      xhats += n->op == OP_MUL && n->in[1]->def->op == OP_INPUT && strcmp(ir_attr_str(n->in[1]->def, "name"), "rstd") == 0;
    ck_assert_int_eq(xhats, remat ? 2 : 1);
  }
  static const char *const kept[] = {
      "graph two_dying {\n"
      "  %a = input {name=\"a\"} : f32[64, 64]\n"
      "  %b = input {name=\"b\"} : f32[64, 64]\n"
      "  %0 = exp %a : f32[64, 64]\n"
      "  %1 = exp %b : f32[64, 64]\n"
      "  %2 = sub %0, %1 : f32[64, 64]\n"
      "  %3 = reduce_sum %2 {axes=[1], keepdims=1} : f32[64, 1]\n"
      "  %4 = mul %2, %3 : f32[64, 64]\n"
      "  return %4 as \"o\"\n"
      "}\n",
      "graph gate {\n"
      "  %a = input {name=\"a\"} : f32[8, 256]\n"
      "  %0 = exp %a : f32[8, 256]\n"
      "  %1 = slice %0 {starts=[0, 64], ends=[8, 128], steps=[1, 1]} : f32[8, 64]\n"
      "  %2 = sigmoid %1 : f32[8, 64]\n"
      "  %3 = reduce_sum %2 {axes=[1], keepdims=1} : f32[8, 1]\n"
      "  %4 = mul %2, %3 : f32[8, 64]\n"
      "  return %4 as \"o\"\n"
      "}\n",
  };
  for (int k = 0; k < 2; k++) {
    Job j = check_fused_with(kept[k], true);
    int n = 0;
    for (Node *m = j.g->first; m; m = m->next) n += m->op == (k ? OP_SIGMOID : OP_SUB);
    ck_assert_int_eq(n, 1);
  }
}
END_TEST

START_TEST(gemm_epilogue_is_one_kernel) {
  Job j = check_fused(
      "graph epilogue {\n"
      "  %x = input {name=\"x\"} : f32[6, 40]\n"
      "  %r = input {name=\"r\"} : f32[6, 24]\n"
      "  %w = param {name=\"fc.weight\"} : f32[24, 40]\n"
      "  %b = param {name=\"fc.bias\"} : f32[24]\n"
      "  %0 = linear %x, %w, %b : f32[6, 24]\n"
      "  %1 = relu %0 : f32[6, 24]\n"
      "  %2 = add %1, %r : f32[6, 24]\n"
      "  return %2 as \"out\"\n"
      "}\n");
  /* GEMM, then bias + relu + add in one kernel: no bias kernel. */
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_GEMM), 1);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
  /* Unfused: the GEMM adds the bias (cuBLASLt's epilogue), then relu and
   * add are a kernel each. */
  Job o0 = compile_with(j.text, false, (CgOptions){0});
  ck_assert_int_eq(count_steps(o0.r.plan, RT_STEP_LAUNCH), 2);
  ck_assert_uint_eq(o0.r.plan->steps[0].gemm.epilogue, RT_EPILOGUE_BIAS);
}
END_TEST

/* A group of linear with its bias and then relu is one GEMM step whose
 * cuBLASLt epilogue adds the bias and applies relu, writing the group's
 * result: no kernel.  gelu stays in a kernel in f32 (test_precision has
 * the half types, where cuBLASLt applies it too), and so does a group
 * with more than the activation after the product. */
START_TEST(linear_relu_is_one_gemm) {
  Job j = check_fused("graph lr {\n"
                      "  %x = input {name=\"x\"} : f32[6, 40]\n"
                      "  %w = param {name=\"fc.weight\"} : f32[24, 40]\n"
                      "  %b = param {name=\"fc.bias\"} : f32[24]\n"
                      "  %0 = linear %x, %w, %b : f32[6, 24]\n"
                      "  %1 = relu %0 : f32[6, 24]\n"
                      "  %w2 = param {name=\"fc2.weight\"} : f32[8, 24]\n"
                      "  %b2 = param {name=\"fc2.bias\"} : f32[8]\n"
                      "  %2 = linear %1, %w2, %b2 : f32[6, 8]\n"
                      "  %3 = gelu %2 {approximate=\"tanh\"} : f32[6, 8]\n"
                      "  return %1 as \"h\", %3 as \"y\"\n"
                      "}\n");
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(p->n_steps, 3);
  ck_assert_int_eq(p->steps[0].kind, RT_STEP_GEMM);
  ck_assert_uint_eq(p->steps[0].gemm.epilogue, RT_EPILOGUE_RELU_BIAS);
  ck_assert_uint_eq(p->steps[0].gemm.c.space, RT_SPACE_OUTPUT); /* straight into h */
  ck_assert_uint_eq(p->steps[0].gemm.bias.space, RT_SPACE_WEIGHTS);
  ck_assert_str_eq(p->steps[0].label, "relu %4 #k0");
  ck_assert_uint_eq(p->steps[1].gemm.epilogue, RT_EPILOGUE_NONE);
  ck_assert_int_eq(p->steps[2].kind, RT_STEP_LAUNCH);
}
END_TEST

/* A matmul plus a bias along its last axis (GPT-2's Conv1D, ONNX's
 * MatMul + Add) is one GEMM step with cuBLASLt's bias epilogue, and with
 * relu after it the relu+bias one, batched matmuls included (the bias
 * shared by every batch); a bias that varies along the rows stays in a
 * kernel. */
START_TEST(matmul_bias_is_one_gemm) {
  Job j = check_fused("graph mb {\n"
                      "  %x = input {name=\"x\"} : f32[3, 6, 40]\n"
                      "  %w = param {name=\"c.weight\"} : f32[40, 24]\n"
                      "  %b = param {name=\"c.bias\"} : f32[24]\n"
                      "  %0 = matmul %x, %w : f32[3, 6, 24]\n"
                      "  %1 = add %b, %0 : f32[3, 6, 24]\n"
                      "  %v = param {name=\"d.weight\"} : f32[3, 24, 8]\n"
                      "  %c = param {name=\"d.bias\"} : f32[1, 1, 8]\n"
                      "  %2 = matmul %1, %v : f32[3, 6, 8]\n"
                      "  %3 = add %2, %c : f32[3, 6, 8]\n"
                      "  %4 = relu %3 : f32[3, 6, 8]\n"
                      "  %r = param {name=\"r.bias\"} : f32[6, 1]\n"
                      "  %5 = matmul %4, %4 {trans_b=1} : f32[3, 6, 6]\n"
                      "  %6 = add %5, %r : f32[3, 6, 6]\n"
                      "  return %6 as \"y\"\n"
                      "}\n");
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(p->n_steps, 4);
  ck_assert_uint_eq(p->steps[0].gemm.epilogue, RT_EPILOGUE_BIAS);
  ck_assert_int_eq(p->steps[0].gemm.m, 18); /* the batch folded into the rows */
  ck_assert_uint_eq(p->steps[1].gemm.epilogue, RT_EPILOGUE_RELU_BIAS);
  ck_assert_int_eq(p->steps[1].gemm.batch, 3);
  ck_assert_int_eq(p->steps[1].gemm.stride_bias, 0);
  ck_assert_uint_eq(p->steps[2].gemm.epilogue, RT_EPILOGUE_NONE);
  ck_assert_int_eq(p->steps[3].kind, RT_STEP_LAUNCH);
}
END_TEST

/* residual + (product [+ bias]) is one GEMM that reads the residual as
 * cuBLASLt's C beside the D it writes (beta 1, c_in): a linear with and
 * without its bias, a matmul plus a bias (ONNX's MatMul, Add, Add), a
 * matmul whose batches broadcast (a GEMM per batch, each C its own
 * slice), and f64 (our kernel, C_in a buffer of its own).  Not one when
 * an activation lies between (cuBLASLt adds C before it), the residual
 * broadcasts, or the residual is computed in the group. */
START_TEST(residual_add_is_the_gemms_c) {
  Job j = check_fused("graph res {\n"
                      "  %x = input {name=\"x\"} : f32[6, 40]\n"
                      "  %r = input {name=\"r\"} : f32[6, 24]\n"
                      "  %w = param {name=\"fc.weight\"} : f32[24, 40]\n"
                      "  %b = param {name=\"fc.bias\"} : f32[24]\n"
                      "  %0 = linear %x, %w, %b : f32[6, 24]\n"
                      "  %1 = add %r, %0 : f32[6, 24]\n"
                      "  %w2 = param {name=\"fc2.weight\"} : f32[24, 24]\n"
                      "  %2 = linear %1, %w2 : f32[6, 24]\n"
                      "  %3 = add %2, %1 : f32[6, 24]\n"
                      "  %y = input {name=\"y\"} : f32[2, 3, 6, 24]\n"
                      "  %v = param {name=\"m.weight\"} : f32[3, 24, 24]\n"
                      "  %c = param {name=\"m.bias\"} : f32[24]\n"
                      "  %4 = matmul %y, %v : f32[2, 3, 6, 24]\n"
                      "  %5 = add %4, %c : f32[2, 3, 6, 24]\n"
                      "  %6 = add %y, %5 : f32[2, 3, 6, 24]\n"
                      "  %7 = matmul %6, %v : f32[2, 3, 6, 24]\n"
                      "  %8 = add %7, %3 : f32[2, 3, 6, 24]\n"
                      "  return %3 as \"a\", %6 as \"b\", %8 as \"c\"\n"
                      "}\n");
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(count_steps(p, RT_STEP_LAUNCH), 1); /* %8: %3 broadcasts */
  ck_assert_int_eq(p->steps[0].kind, RT_STEP_GEMM);
  ck_assert(p->steps[0].gemm.beta == 1.0f);
  ck_assert_uint_eq(p->steps[0].gemm.epilogue, RT_EPILOGUE_BIAS);
  ck_assert_uint_eq(p->steps[0].gemm.c_in.space, RT_SPACE_INPUT);
  ck_assert_uint_eq(p->steps[0].gemm.c_in.index, 1);
  ck_assert_str_eq(p->steps[0].label, "add %5 #k0");
  ck_assert(p->steps[1].gemm.beta == 1.0f);
  ck_assert_uint_eq(p->steps[1].gemm.epilogue, RT_EPILOGUE_NONE);
  /* %1, written by the first */
  ck_assert_uint_eq(p->steps[1].gemm.c_in.space, p->steps[0].gemm.c.space);
  ck_assert_uint_eq(p->steps[1].gemm.c_in.offset, p->steps[0].gemm.c.offset);
  /* %6: one GEMM per batch of 2 x 3, each reading its slice of y */
  for (int i = 0; i < 6; i++) {
    const RtGemm *g = &p->steps[2 + i].gemm;
    ck_assert(g->beta == 1.0f);
    ck_assert_uint_eq(g->epilogue, RT_EPILOGUE_BIAS);
    ck_assert_uint_eq(g->c_in.space, RT_SPACE_INPUT);
    ck_assert_uint_eq(g->c_in.offset, (uint64_t)i * 6 * 24 * 4);
  }
  for (uint32_t i = 8; i < p->n_steps; i++)
    if (p->steps[i].kind == RT_STEP_GEMM) ck_assert(p->steps[i].gemm.beta == 0.0f);

  /* An activation between, a residual computed in the group */
  Job k = check_fused("graph nores {\n"
                      "  %x = input {name=\"x\"} : f32[6, 40]\n"
                      "  %r = input {name=\"r\"} : f32[6, 24]\n"
                      "  %w = param {name=\"fc.weight\"} : f32[24, 40]\n"
                      "  %0 = linear %x, %w : f32[6, 24]\n"
                      "  %1 = relu %0 : f32[6, 24]\n"
                      "  %2 = add %1, %r : f32[6, 24]\n"
                      "  %3 = linear %x, %w : f32[6, 24]\n"
                      "  %4 = exp %r : f32[6, 24]\n"
                      "  %5 = add %3, %4 : f32[6, 24]\n"
                      "  return %2 as \"a\", %5 as \"b\"\n"
                      "}\n");
  for (uint32_t i = 0; i < k.r.plan->n_steps; i++)
    if (k.r.plan->steps[i].kind == RT_STEP_GEMM) ck_assert(k.r.plan->steps[i].gemm.beta == 0.0f);
  ck_assert_int_eq(count_steps(k.r.plan, RT_STEP_LAUNCH), 2);

  /* f64 (a group written by hand: fusion leaves f64 alone): our GEMM
   * kernel loads C_in */
  Job d = compile_with("graph res64 {\n"
                       "  %x = input {name=\"x\"} : f64[6, 40]\n"
                       "  %r = input {name=\"r\"} : f64[6, 24]\n"
                       "  %w = param {name=\"fc.weight\"} : f64[24, 40]\n"
                       "  %0 = linear %x, %w : f64[6, 24] #k0\n"
                       "  %1 = add %0, %r : f64[6, 24] #k0\n"
                       "  return %1 as \"a\"\n"
                       "}\n",
                       false, (CgOptions){0});
  check_numbers(&d, -2, 2);
  ck_assert_int_eq(d.r.plan->n_steps, 1);
  /* An f64 matmul plus a bias is our GEMM kernel and the group's: no
   * cuBLASLt epilogue (it was an internal error) */
  Job e = compile_with("graph mb64 {\n"
                       "  %x = input {name=\"x\"} : f64[6, 40]\n"
                       "  %w = param {name=\"w\"} : f64[40, 24]\n"
                       "  %b = param {name=\"b\"} : f64[24]\n"
                       "  %0 = matmul %x, %w : f64[6, 24] #k0\n"
                       "  %1 = add %0, %b : f64[6, 24] #k0\n"
                       "  return %1 as \"a\"\n"
                       "}\n",
                       false, (CgOptions){0});
  check_numbers(&e, -2, 2);
  ck_assert_ptr_nonnull(strstr(d.r.source, "c_in"));
}
END_TEST

START_TEST(reduction_prologue_and_epilogue) {
  Job j = check_fused(
      "graph reduce {\n"
      "  %x = input {name=\"x\"} : f32[3, 8, 10]\n"
      "  %m = input {name=\"m\"} : f32[10]\n"
      "  %k = const {value=0.25} : f32[]\n"
      "  %0 = mul %x, %k : f32[3, 8, 10]\n"
      "  %1 = add %0, %m : f32[3, 8, 10]\n"
      "  %2 = softmax %1 {axis=2} : f32[3, 8, 10]\n"
      "  %3 = sqrt %2 : f32[3, 8, 10]\n"
      "  %4 = reduce_mean %3 {axes=[1]} : f32[3, 10]\n"
      "  %5 = exp %4 : f32[3, 10]\n"
      "  %6 = layernorm %x {axis=2} : f32[3, 8, 10]\n"
      "  %7 = relu %6 : f32[3, 8, 10]\n"
      "  return %5 as \"mean\", %7 as \"ln\"\n"
      "}\n");
  /* softmax takes the scale and the mask in its loads and sqrt at its
   * store (sqrt could also be the mean's prologue; an epilogue runs once
   * per element, a prologue once per load); the mean takes exp at its
   * store; layernorm takes relu at its store. */
  int s = group_of(j.g, 5), m = group_of(j.g, 7);
  ck_assert_int_ge(s, 0);
  ck_assert_int_ge(m, 0);
  ck_assert_int_ne(s, m);
  ck_assert_int_eq(group_of(j.g, 3), s);
  ck_assert_int_eq(group_of(j.g, 4), s);
  ck_assert_int_eq(group_of(j.g, 6), s);
  ck_assert_int_eq(group_of(j.g, 8), m);
  ck_assert_int_eq(group_of(j.g, 9), group_of(j.g, 10));
  ck_assert_int_eq(j.r.plan->n_steps, 3);
}
END_TEST

START_TEST(pooling_takes_its_producers) {
  Job j = check_fused(
      "graph pool {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 9, 9]\n"
      "  %g = param {name=\"bn.weight\"} : f32[3]\n"
      "  %b = param {name=\"bn.bias\"} : f32[3]\n"
      "  %mu = param {name=\"bn.running_mean\"} : f32[3]\n"
      "  %v = param {name=\"bn.running_var\", init=\"ones\"} : f32[3]\n"
      "  %0 = batchnorm %x, %g, %b, %mu, %v : f32[2, 3, 9, 9]\n"
      "  %1 = relu %0 : f32[2, 3, 9, 9]\n"
      "  %2 = maxpool2d %1 {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]} : f32[2, 3, 5, 5]\n"
      "  %3 = global_avgpool %2 : f32[2, 3, 1, 1]\n"
      "  return %3 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(group_of(j.g, 5), group_of(j.g, 7));
  ck_assert_int_eq(group_of(j.g, 6), group_of(j.g, 7));
  ck_assert_int_eq(j.r.plan->n_steps, 2);
}
END_TEST

START_TEST(conv_is_one_implicit_gemm_kernel) {
  /* conv + bias + bn + residual add + relu, with padding, stride and
   * sizes that are not multiples of the 64x64x16 tiles. */
  Job j = check_fused(
      "graph conv {\n"
      "  %x = input {name=\"x\"} : f32[2, 5, 11, 9]\n"
      "  %s = input {name=\"s\"} : f32[2, 7, 6, 5]\n"
      "  %w = param {name=\"conv.weight\"} : f32[7, 5, 3, 3]\n"
      "  %cb = param {name=\"conv.bias\"} : f32[7]\n"
      "  %g = param {name=\"bn.weight\"} : f32[7]\n"
      "  %b = param {name=\"bn.bias\"} : f32[7]\n"
      "  %mu = param {name=\"bn.running_mean\"} : f32[7]\n"
      "  %v = param {name=\"bn.running_var\", init=\"ones\"} : f32[7]\n"
      "  %0 = conv2d %x, %w, %cb {stride=[2, 2], pad=[1, 1, 1, 1]} : f32[2, 7, 6, 5]\n"
      "  %1 = batchnorm %0, %g, %b, %mu, %v : f32[2, 7, 6, 5]\n"
      "  %2 = add %1, %s : f32[2, 7, 6, 5]\n"
      "  %3 = relu %2 : f32[2, 7, 6, 5]\n"
      "  %w2 = param {name=\"conv2.weight\"} : f32[3, 7, 3, 3]\n"
      "  %4 = conv2d %3, %w2 {dilation=[2, 2]} : f32[2, 3, 2, 1]\n"
      "  return %3 as \"block\", %4 as \"lone\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 2);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_GEMM), 0);
  ck_assert_ptr_nonnull(strstr(j.r.source, "__shared__ float As"));
  ck_assert_ptr_nonnull(strstr(j.r.source, "__syncthreads()"));
}
END_TEST

START_TEST(conv_takes_folded_weights) {
  /* bn-fold's shape: the conv's weight and bias are small graphs over
   * params; they are evaluated in the conv's loads, not by kernels. */
  Job j = check_fused(
      "graph folded {\n"
      "  %x = input {name=\"x\"} : f32[1, 4, 8, 8]\n"
      "  %w = param {name=\"w\"} : f32[70, 4, 1, 1]\n"
      "  %g = param {name=\"g\"} : f32[70]\n"
      "  %e = const {value=1e-05} : f32[]\n"
      "  %a = abs %g : f32[70]\n"
      "  %0 = add %a, %e : f32[70]\n"
      "  %1 = rsqrt %0 : f32[70]\n"
      "  %2 = reshape %1 {shape=[70, 1, 1, 1]} : f32[70, 1, 1, 1]\n"
      "  %3 = mul %w, %2 : f32[70, 4, 1, 1]\n"
      "  %4 = mul %g, %1 : f32[70]\n"
      "  %5 = conv2d %x, %3, %4 : f32[1, 70, 8, 8]\n"
      "  %6 = relu %5 : f32[1, 70, 8, 8]\n"
      "  return %6 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
}
END_TEST

START_TEST(depthwise_conv_epilogue) {
  Job j = check_fused(
      "graph dw {\n"
      "  %x = input {name=\"x\"} : f32[1, 6, 7, 7]\n"
      "  %w = param {name=\"w\"} : f32[6, 1, 3, 3]\n"
      "  %0 = conv2d %x, %w {pad=[1, 1, 1, 1], groups=6} : f32[1, 6, 7, 7]\n"
      "  %1 = clip %0 {min=0, max=6} : f32[1, 6, 7, 7]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
}
END_TEST

START_TEST(moves_are_index_maps) {
  Job j = check_fused(
      "graph moves {\n"
      "  %x = input {name=\"x\"} : f32[2, 6, 4]\n"
      "  %y = input {name=\"y\"} : f32[4, 3]\n"
      "  %0 = slice %x {starts=[0, 1, 0], ends=[2, 6, 4], steps=[1, 2, 1]} : f32[2, 3, 4]\n"
      "  %1 = transpose %0 {perm=[0, 2, 1]} : f32[2, 4, 3]\n"
      "  %2 = expand %y {shape=[2, 4, 3]} : f32[2, 4, 3]\n"
      "  %3 = mul %1, %2 : f32[2, 4, 3]\n"
      "  %4 = reshape %3 {shape=[8, 3]} : f32[8, 3]\n"
      "  %5 = transpose %4 {perm=[1, 0]} : f32[3, 8]\n"
      "  return %5 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->n_steps, 1);
}
END_TEST

START_TEST(attention_is_one_kernel) {
  /* q, k, v out of one projection, as nn.MultiheadAttention: the GEMM,
   * then one kernel from its output (and bias) to the heads merged back. */
  Job j = check_fused(
      "graph attn {\n"
      "  %x = input {name=\"x\"} : f32[2, 5, 8]\n"
      "  %w = param {name=\"in.weight\"} : f32[24, 8]\n"
      "  %b = param {name=\"in.bias\"} : f32[24]\n"
      "  %mask = input {name=\"mask\"} : f32[5, 5]\n"
      "  %0 = linear %x, %w, %b : f32[2, 5, 24]\n"
      "  %1 = slice %0 {starts=[0, 0, 0], ends=[2, 5, 8], steps=[1, 1, 1]} : f32[2, 5, 8]\n"
      "  %2 = slice %0 {starts=[0, 0, 8], ends=[2, 5, 16], steps=[1, 1, 1]} : f32[2, 5, 8]\n"
      "  %3 = slice %0 {starts=[0, 0, 16], ends=[2, 5, 24], steps=[1, 1, 1]} : f32[2, 5, 8]\n"
      "  %4 = reshape %1 {shape=[2, 5, 2, 4]} : f32[2, 5, 2, 4]\n"
      "  %5 = transpose %4 {perm=[0, 2, 1, 3]} : f32[2, 2, 5, 4]\n"
      "  %6 = reshape %2 {shape=[2, 5, 2, 4]} : f32[2, 5, 2, 4]\n"
      "  %7 = transpose %6 {perm=[0, 2, 3, 1]} : f32[2, 2, 4, 5]\n"
      "  %8 = reshape %3 {shape=[2, 5, 2, 4]} : f32[2, 5, 2, 4]\n"
      "  %9 = transpose %8 {perm=[0, 2, 1, 3]} : f32[2, 2, 5, 4]\n"
      "  %10 = matmul %5, %7 : f32[2, 2, 5, 5]\n"
      "  %k = const {value=0.5} : f32[]\n"
      "  %11 = mul %10, %k : f32[2, 2, 5, 5]\n"
      "  %12 = add %11, %mask : f32[2, 2, 5, 5]\n"
      "  %13 = softmax %12 {axis=3} : f32[2, 2, 5, 5]\n"
      "  %14 = matmul %13, %9 : f32[2, 2, 5, 4]\n"
      "  %15 = transpose %14 {perm=[0, 2, 1, 3]} : f32[2, 5, 2, 4]\n"
      "  %16 = reshape %15 {shape=[2, 5, 8]} : f32[2, 5, 8]\n"
      "  return %16 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_GEMM), 1);
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
}
END_TEST

/* ---- the IR text and the verifier ---- */

static const char group_text[] =
    "; dlcc IR\n"
    "graph g {\n"
    "  %0 = input {name=\"x\"} : f32[4]\n"
    "  %1 = relu %0 : f32[4] #k0\n"
    "  %2 = neg %1 : f32[4] #k0\n"
    "  %3 = exp %2 : f32[4] #k12\n"
    "  return %3 as \"out\"\n"
    "}\n";

START_TEST(groups_round_trip_in_the_text) {
  const SrcFile *f = ctx_add_file(&ctx, "g.ir", group_text, strlen(group_text));
  Graph *g = ir_parse(&ctx, f);
  ck_assert_msg(g != NULL, "%s", diag_text(&ctx));
  ck_assert(ir_verify(g));
  ck_assert_int_eq(g->first->group, -1);
  ck_assert_int_eq(g->first->next->group, 0);
  ck_assert_int_eq(g->last->group, 12);
  char *text = test_print_ir(g);
  ck_assert_str_eq(text, group_text);
  free(text);
}
END_TEST

START_TEST(print_after_fuse_shows_groups) {
  Job j = fused(
      "graph p {\n"
      "  %x = input {name=\"x\"} : f32[4]\n"
      "  %0 = relu %x : f32[4]\n"
      "  %1 = exp %0 : f32[4]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  char *text = test_print_ir(j.g);
  ck_assert_ptr_nonnull(strstr(text, "%1 = relu %0 : f32[4] #k0\n"));
  ck_assert_ptr_nonnull(strstr(text, "%2 = exp %1 : f32[4] #k0\n"));
  /* Fusing again changes nothing. */
  PassCtx pc = {.ctx = &ctx};
  ck_assert(!pass_fuse(j.g, &pc));
  free(text);
}
END_TEST

static void expect_error(const char *text, const char *msg) {
  Job j = {.text = text};
  ctx_guard(&ctx, run_job, &j);
  ck_assert_msg(!j.verified, "accepted:\n%s", text);
  ck_assert_msg(strstr(diag_text(&ctx), msg), "expected '%s' in:\n%s", msg, diag_text(&ctx));
}

START_TEST(bad_group_syntax) {
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4]\n  %0 = relu %x : f32[4] #3\n  return %0 as \"o\"\n}\n",
               "expected a fusion group '#kN'");
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4]\n  %0 = relu %x : f32[4] #kx\n  return %0 as \"o\"\n}\n",
               "expected a fusion group '#kN'");
}
END_TEST

START_TEST(verifier_checks_groups) {
  /* A member used outside its group before its root (a path that
   * leaves and comes back), and one of another shape than the root. */
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4]\n  %0 = relu %x : f32[4] #k1\n"
               "  %2 = exp %0 : f32[4]\n  %1 = add %0, %2 : f32[4] #k1\n  return %1 as \"o\"\n}\n",
               "operand 0 is inside fusion group k1, not its root (nor an elementwise side output");
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4, 1]\n  %0 = relu %x : f32[4, 1] #k1\n"
               "  %1 = expand %0 {shape=[4, 3]} : f32[4, 3] #k1\n  %2 = exp %0 : f32[4, 1]\n"
               "  return %1 as \"o\", %2 as \"p\"\n}\n",
               "operand 0 is inside fusion group k1, not its root");
  /* A graph output inside, of another shape. */
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4, 1]\n  %0 = relu %x : f32[4, 1] #k1\n"
               "  %1 = expand %0 {shape=[4, 3]} : f32[4, 3] #k1\n  return %1 as \"o\", %0 as \"p\"\n}\n",
               "graph output \"p\" is inside fusion group k1");
  /* Two anchors. */
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4, 4]\n  %0 = softmax %x {axis=1} : f32[4, 4] #k0\n"
               "  %1 = softmax %0 {axis=1} : f32[4, 4] #k0\n  return %1 as \"o\"\n}\n",
               "holds two reductions");
  /* Two reductions over different rows are no siblings. */
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4, 4]\n"
               "  %0 = reduce_sum %x {axes=[0], keepdims=0} : f32[4] #k0\n"
               "  %1 = reduce_max %x {axes=[1], keepdims=0} : f32[4] #k0\n  return %1 as \"o\", %0 as \"s\"\n}\n",
               "holds two reductions");
  /* A source. */
  expect_error("graph g {\n  %x = input {name=\"x\"} : f32[4] #k0\n  %0 = relu %x : f32[4] #k0\n"
               "  return %0 as \"o\"\n}\n",
               "a input cannot be in a fusion group");
}
END_TEST

START_TEST(hand_written_group_codegen_cannot_lower) {
  Job j = {.text = "graph g {\n  %x = input {name=\"x\"} : f32[4]\n  %i = input {name=\"i\"} : i64[2]\n"
                   "  %0 = relu %x : f32[4] #k0\n"
                   "  %1 = gather %0, %i {axis=0} : f32[2] #k0\n  return %1 as \"o\"\n}\n"};
  ctx_guard(&ctx, run_job, &j);
  ck_assert(j.verified);
  ck_assert(!j.ok);
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "codegen cannot lower gather in fusion group k0"));
}
END_TEST

START_TEST(hand_written_sibling_reductions_are_lowered) {
  Job j = compile_with("graph g {\n  %x = input {name=\"x\"} : f32[4, 6]\n"
                       "  %0 = reduce_sum %x {axes=[1], keepdims=0} : f32[4] #k0\n"
                       "  %1 = reduce_min %x {axes=[1], keepdims=1} : f32[4, 1] #k0\n"
                       "  return %1 as \"o\", %0 as \"s\"\n}\n",
                       false, (CgOptions){0});
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 1);
  check_numbers(&j, -2, 2);
}
END_TEST

START_TEST(hand_written_groups_are_lowered) {
  /* Groups from the text, not from the pass. */
  Job j = compile_with("graph g {\n  %x = input {name=\"x\"} : f32[5, 7]\n"
                       "  %0 = sigmoid %x : f32[5, 7] #k4\n  %1 = mul %0, %x : f32[5, 7] #k4\n"
                       "  %2 = reduce_sum %1 {axes=[1]} : f32[5] #k4\n  return %2 as \"o\"\n}\n",
                       false, (CgOptions){0});
  ck_assert_int_eq(j.r.plan->n_steps, 1);
  test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, -2, 2);
}
END_TEST

/* ---- kernel-IR passes ---- */

static const char pool_text[] =
    "graph pool {\n"
    "  %x = input {name=\"x\"} : f32[1, 2, 8, 8]\n"
    "  %0 = avgpool2d %x {kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1]} : f32[1, 2, 8, 8]\n"
    "  return %0 as \"out\"\n"
    "}\n";

START_TEST(small_loops_are_unrolled) {
  Job j = compile_with(pool_text, false, (CgOptions){0});
  ck_assert_ptr_nonnull(strstr(j.r.source, "#pragma unroll\n"));
  test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, -2, 2);
  Job off = compile_with(pool_text, false, (CgOptions){.no_unroll = true});
  ck_assert_ptr_null(strstr(off.r.source, "#pragma unroll"));
  /* --unroll=2 leaves the 3-tap loops alone. */
  Job two = compile_with(pool_text, false, (CgOptions){.unroll = 2});
  ck_assert_ptr_null(strstr(two.r.source, "#pragma unroll"));
  check_numbers(&off, -2, 2);
}
END_TEST

static const char vec_text[] =
    "graph vec {\n"
    "  %x = input {name=\"x\"} : f32[3, 343]\n"
    "  %y = input {name=\"y\"} : f32[343]\n"
    "  %0 = mul %x, %y : f32[3, 343]\n"
    "  %1 = exp %0 : f32[3, 343]\n"
    "  %2 = sub %1, %x : f32[3, 343]\n"
    "  return %2 as \"out\"\n"
    "}\n";

START_TEST(contiguous_maps_are_vectorized) {
  /* 1029 elements: 257 float4 and a tail of one. */
  Job j = check_fused(vec_text);
  ck_assert_ptr_nonnull(strstr(j.r.source, "float4 v"));
  ck_assert_ptr_nonnull(strstr(j.r.source, "make_float4("));
  ck_assert_ptr_nonnull(strstr(j.r.source, "(n - ((n >> 2) * 4))"));
  Job off = compile_with(vec_text, true, (CgOptions){.no_vectorize = true});
  ck_assert_ptr_null(strstr(off.r.source, "float4"));
  check_numbers(&off, -2, 2);
}
END_TEST

/* How many float4 reads of buf src makes, each asserted to be a guarded
 * one: assigned (not declared) on the line right after an `if (...) {`
 * of its own, the vector zeros where the guard fails. */
static int guarded_float4_reads(const char *src, const char *buf) {
  char pat[64];
  snprintf(pat, sizeof pat, " = *(const float4 *)&%s[", buf);
  int n = 0;
  for (const char *p = strstr(src, pat); p; p = strstr(p + 1, pat), n++) {
    const char *line = p;
    while (line > src && line[-1] != '\n') line--;
    const char *q = line;
    while (*q == ' ') q++;
    ck_assert_msg(strncmp(q, "float4 ", 7) != 0, "%s read as a float4 outside a guard", buf);
    ck_assert_msg(line - src >= 2 && line[-2] == '{', "%s's float4 read not right under a guard", buf);
    const char *prev = line - 1;
    while (prev > src && prev[-1] != '\n') prev--;
    while (*prev == ' ') prev++;
    ck_assert_msg(strncmp(prev, "if (", 4) == 0, "%s's float4 read not right under an if", buf);
  }
  return n;
}

/* A pad's read of x happens only inside the rows x covers (a select's
 * arm).  Here the guard is a row's, the same for the 4 lanes of a
 * vector (344 columns, a multiple of 4): x is read as a float4 under it,
 * zeros elsewhere, never at a row before x's first (an unguarded float4
 * there read 2 rows before the buffer: a training step of the
 * transformer example crashed on emu when a fresh heap put nothing
 * there).  343 columns, or a pad of 3 columns: the guard differs between
 * the lanes of a vector, and x is read lane by lane under it. */
START_TEST(guarded_loads_stay_guarded) {
  Job j = check_fused(
      "graph pad {\n"
      "  %x = input {name=\"x\"} : f32[4, 344]\n"
      "  %0 = pad %x {pads=[2, 0, 2, 0]} : f32[8, 344]\n"
      "  %1 = exp %0 : f32[8, 344]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_ptr_nonnull(strstr(j.r.source, "make_float4("));
  ck_assert_int_eq(guarded_float4_reads(j.r.source, "x"), 1);
  static const char *const odd[] = {
      "graph pad {\n"
      "  %x = input {name=\"x\"} : f32[4, 343]\n"
      "  %0 = pad %x {pads=[2, 0, 2, 0]} : f32[8, 343]\n"
      "  %1 = exp %0 : f32[8, 343]\n"
      "  return %1 as \"out\"\n"
      "}\n",
      "graph pad {\n"
      "  %x = input {name=\"x\"} : f32[8, 341]\n"
      "  %0 = pad %x {pads=[0, 3, 0, 0]} : f32[8, 344]\n"
      "  %1 = exp %0 : f32[8, 344]\n"
      "  return %1 as \"out\"\n"
      "}\n"};
  for (int i = 0; i < 2; i++) {
    Job o = check_fused(odd[i]);
    ck_assert_ptr_nonnull(strstr(o.r.source, "make_float4("));
    ck_assert_int_eq(guarded_float4_reads(o.r.source, "x"), 0);
    ck_assert_msg(strstr(o.r.source, "? x["), "x not read under its guard");
  }
}
END_TEST

/* where's operands at the map's own element: each lane's mask picks
 * one, a guard that differs between lanes, but every element of the
 * vector is inside the operand (base + v < n, the operand n elements):
 * they are read as float4s whatever the mask, the mask as a uint4.  A
 * broadcast operand ([1024] into [4, 1024]) is not n elements long and
 * is read lane by lane under the mask. */
START_TEST(in_bounds_guarded_loads_read_vectors) {
  Job w = check_fused(
      "graph w {\n"
      "  %m = input {name=\"m\"} : bool[1024]\n"
      "  %x = input {name=\"x\"} : f32[1024]\n"
      "  %y = input {name=\"y\"} : f32[1024]\n"
      "  %0 = where %m, %x, %y : f32[1024]\n"
      "  %1 = exp %0 : f32[1024]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_ptr_nonnull(strstr(w.r.source, "*(const uint4 *)&x["));
  ck_assert_ptr_nonnull(strstr(w.r.source, " = *(const float4 *)&x_1["));
  ck_assert_ptr_nonnull(strstr(w.r.source, " = *(const float4 *)&x_2["));
  Job b = check_fused(
      "graph w {\n"
      "  %m = input {name=\"m\"} : bool[4, 1024]\n"
      "  %x = input {name=\"x\"} : f32[4, 1024]\n"
      "  %y = input {name=\"y\"} : f32[1024]\n"
      "  %0 = where %m, %x, %y : f32[4, 1024]\n"
      "  %1 = exp %0 : f32[4, 1024]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_ptr_nonnull(strstr(b.r.source, " = *(const float4 *)&x_1["));
  ck_assert_ptr_null(strstr(b.r.source, "float4 *)&x_2["));
  ck_assert_msg(strstr(b.r.source, ": x_2["), "the broadcast operand not read under the mask");
}
END_TEST

/* Guards on the vectorized dim itself are the same for a vector's lanes
 * where the edge falls at a multiple of 4: a pad of 4 columns, concats
 * at columns 16 (fused) and 8 and 20 (a concat kernel of its own: nested
 * selects, the later operands under the negated tests).  Each operand
 * is read as float4s under its guard.  At columns 17 and 5 they are not,
 * and the operands are read lane by lane. */
START_TEST(lane_invariant_guards_read_vectors) {
  Job p = check_fused(
      "graph pad {\n"
      "  %x = input {name=\"x\"} : f32[8, 340]\n"
      "  %0 = pad %x {pads=[0, 4, 0, 0]} : f32[8, 344]\n"
      "  %1 = exp %0 : f32[8, 344]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_int_eq(guarded_float4_reads(p.r.source, "x"), 1);
  Job c = check_fused(
      "graph cat {\n"
      "  %x = input {name=\"x\"} : f32[8, 16]\n"
      "  %y = input {name=\"y\"} : f32[8, 24]\n"
      "  %0 = concat %x, %y {axis=1} : f32[8, 40]\n"
      "  %1 = exp %0 : f32[8, 40]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  /* the group's loads are all named x: x_1 is the first operand */
  ck_assert_int_eq(guarded_float4_reads(c.r.source, "x"), 1);
  ck_assert_int_eq(guarded_float4_reads(c.r.source, "x_1"), 1);
  static const char *const cat3 =
      "graph cat {\n"
      "  %a = input {name=\"a\"} : f32[8, 8]\n"
      "  %b = input {name=\"b\"} : f32[8, 12]\n"
      "  %c = input {name=\"c\"} : f32[8, 20]\n"
      "  %0 = concat %a, %b, %c {axis=1} : f32[8, 40]\n"
      "  return %0 as \"out\"\n"
      "}\n";
  Job s = compile_with(cat3, false, (CgOptions){0});
  test_nvrtc(s.r.source, "sm_90");
  check_numbers(&s, -2, 2);
  ck_assert_int_eq(guarded_float4_reads(s.r.source, "x0") + guarded_float4_reads(s.r.source, "x1") +
                       guarded_float4_reads(s.r.source, "x2"),
                   3);
  Job odd = check_fused(
      "graph cat {\n"
      "  %x = input {name=\"x\"} : f32[8, 17]\n"
      "  %y = input {name=\"y\"} : f32[8, 23]\n"
      "  %0 = concat %x, %y {axis=1} : f32[8, 40]\n"
      "  %1 = exp %0 : f32[8, 40]\n"
      "  return %1 as \"out\"\n"
      "}\n");
  ck_assert_ptr_nonnull(strstr(odd.r.source, "make_float4("));
  ck_assert_int_eq(guarded_float4_reads(odd.r.source, "x") + guarded_float4_reads(odd.r.source, "x_1"), 0);
  ck_assert_msg(strstr(odd.r.source, "? x_1[") && strstr(odd.r.source, ": x["), "operands not read under their guards");
  Job odd3 = compile_with(
      "graph cat {\n"
      "  %a = input {name=\"a\"} : f32[8, 5]\n"
      "  %b = input {name=\"b\"} : f32[8, 15]\n"
      "  %c = input {name=\"c\"} : f32[8, 20]\n"
      "  %0 = concat %a, %b, %c {axis=1} : f32[8, 40]\n"
      "  return %0 as \"out\"\n"
      "}\n",
      false, (CgOptions){0});
  check_numbers(&odd3, -2, 2);
  ck_assert_int_eq(guarded_float4_reads(odd3.r.source, "x0") + guarded_float4_reads(odd3.r.source, "x1"), 0);
}
END_TEST

START_TEST(small_maps_stay_scalar) {
  Job j = fused("graph s {\n  %x = input {name=\"x\"} : f32[16]\n  %0 = relu %x : f32[16]\n"
                "  %1 = neg %0 : f32[16]\n  return %1 as \"o\"\n}\n");
  ck_assert_ptr_null(strstr(j.r.source, "float4"));
}
END_TEST

/* ---- random graphs: -O2 (with fuse) through codegen on emu ---- */

typedef struct RandJob {
  uint64_t seed;
  Job j;
  int groups;
} RandJob;

static int rand_job(Ctx *c, void *data) {
  RandJob *rj = data;
  Graph *g = rg_build(c, rj->seed, 30);
  if (!ir_verify(g)) return 1;
  PassOptions po = {.opt_level = 2, .verify_each = true};
  if (!pass_run_pipeline(g, &po, NULL)) return 1;
  for (Node *n = g->first; n; n = n->next) rj->groups += n->group >= 0;
  rj->j.g = g;
  /* with merged launches: every part's kernel through NVRTC and emu too */
  rj->j.ok = cg_compile_opts(g, &(CgOptions){.merge_launches = true}, &rj->j.r);
  return 0;
}

/* Every kernel through NVRTC and the plan on emu against ir_eval of the
 * same optimized graph: what fusion and its lowering must not change.
 * FUSE_RANDGRAPH_ITERS=N for another count. */
START_TEST(random_graphs_fused_on_emu) {
  const char *iters = getenv("FUSE_RANDGRAPH_ITERS");
  int n = iters ? atoi(iters) : 24, fused_nodes = 0, compiled = 0;
  for (int i = 0; i < n; i++) {
    Ctx c;
    ctx_init(&c);
    RandJob rj = {.seed = 1000 + (uint64_t)i};
    int rc = ctx_guard(&c, rand_job, &rj);
    ck_assert_msg(rc == 0, "seed %" PRIu64 ": %s", rj.seed, diag_text(&c));
    /* A graph with an op codegen refuses (an integer cast it lacks) is
     * skipped; anything else must compile. */
    if (rj.j.ok) {
      compiled++;
      fused_nodes += rj.groups;
      test_nvrtc(rj.j.r.source, "sm_90");
      check_numbers(&rj.j, -2, 2);
    } else {
      ck_assert_msg(strstr(diag_text(&c), "does not support"), "seed %" PRIu64 ": %s", rj.seed,
                    diag_text(&c));
    }
    ctx_free(&c);
  }
  if (getenv("DLCC_TEST_VERBOSE"))
    fprintf(stderr, "random graphs: %d of %d compiled, %d nodes in fusion groups\n", compiled, n,
            fused_nodes);
  ck_assert_int_ge(compiled, n / 2);
  ck_assert_int_gt(fused_nodes, n);
}
END_TEST

/* ---- the examples: launches at -O0 and -O2 ---- */

typedef struct ModelJob {
  const char *path;
  int level;
  int steps;
} ModelJob;

static int model_job(Ctx *c, void *data) {
  ModelJob *j = data;
  const SrcFile *f = ctx_load_file(c, j->path);
  if (!f) return 1;
  Program *p = fe_parse(c, f);
  if (!p) return 1;
  LowerOptions lo = {0};
  Graph *g = fe_lower(c, p, &lo);
  if (!g || !ir_verify(g)) return 1;
  PassOptions po = {.opt_level = j->level, .verify_each = true};
  if (!pass_run_pipeline(g, &po, NULL)) return 1;
  CgResult r;
  /* split-K adds no launch: a tile's last slice adds the slices */
  if (!cg_compile_opts(g, &(CgOptions){0}, &r)) return 1;
  j->steps = (int)r.plan->n_steps;
  return 0;
}

static int model_steps(const char *name, int level) {
  const char *top = getenv("top_srcdir");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/%s", top ? top : ".", name);
  Ctx c;
  ctx_init(&c);
  ModelJob j = {.path = path, .level = level};
  int rc = ctx_guard(&c, model_job, &j);
  ck_assert_msg(rc == 0, "%s at -O%d: %s", name, level, diag_text(&c));
  ctx_free(&c);
  return j.steps;
}

START_TEST(launch_targets) {
  int r50 = model_steps("resnet50.dl", 2);
  ck_assert_msg(r50 <= 57, "resnet50: %d steps at -O2", r50);
  int r18_0 = model_steps("resnet18.dl", 0), r18 = model_steps("resnet18.dl", 2);
  ck_assert_msg(2 * r18 <= r18_0, "resnet18: %d steps at -O2, %d at -O0", r18, r18_0);
  /* The attention is one op at every level (codegen/attention.c), so
   * -O0 no longer has the unfused scores to lose: the target is the
   * count, the three projections as one batched GEMM
   * (codegen/gemm_batch.c), the attention, the output projection, the
   * two feed-forward GEMMs and two layernorms with their residual adds. */
  int t0 = model_steps("transformer.dl", 0), t2 = model_steps("transformer.dl", 2);
  ck_assert_msg(t2 <= 7 && t2 < t0, "transformer: %d steps at -O2, %d at -O0", t2, t0);
  /* rotate_half's slices, negation and concat in the kernel that uses
   * them, for q and for k */
  int llama = model_steps("llama_block.dl", 2);
  ck_assert_msg(llama <= 15, "llama_block: %d steps at -O2", llama);
}
END_TEST

static Suite *fuse_suite(void) {
  Suite *s = suite_create("fuse");
  TCase *t = tcase_create("groups");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 120);
  tcase_add_test(t, elementwise_chain_is_one_kernel);
  tcase_add_test(t, shared_values_and_outputs_are_stored);
  tcase_add_test(t, value_used_by_two_groups_is_not_duplicated);
  tcase_add_test(t, cheap_values_are_recomputed_by_their_readers);
  tcase_add_test(t, side_outputs_are_stored_beside_the_root);
  tcase_add_test(t, pads_are_fused);
  tcase_add_test(t, concats_are_fused);
  tcase_add_test(t, conv_transpose_takes_an_epilogue);
  tcase_add_test(t, residual_add_is_the_gemms_c);
  tcase_add_test(t, i64_arithmetic_is_fused);
  tcase_add_test(t, independent_maps_share_a_kernel);
  tcase_add_test(t, independent_kernels_share_a_launch);
  tcase_add_test(t, dependent_kernels_chain);
  tcase_add_test(t, concat_operands_in_place);
  tcase_add_test(t, sibling_reductions_share_a_kernel);
  tcase_add_test(t, rows_map_takes_in_its_reductions);
  tcase_add_test(t, product_sums_accumulate_in_the_gemm);
  tcase_add_test(t, pool_gradients_take_an_epilogue);
  tcase_add_test(t, gemm_epilogue_is_one_kernel);
  tcase_add_test(t, linear_relu_is_one_gemm);
  tcase_add_test(t, matmul_bias_is_one_gemm);
  tcase_add_test(t, reduction_prologue_and_epilogue);
  tcase_add_test(t, pooling_takes_its_producers);
  tcase_add_test(t, conv_is_one_implicit_gemm_kernel);
  tcase_add_test(t, conv_takes_folded_weights);
  tcase_add_test(t, depthwise_conv_epilogue);
  tcase_add_test(t, moves_are_index_maps);
  tcase_add_test(t, attention_is_one_kernel);
  tcase_add_test(t, groups_round_trip_in_the_text);
  tcase_add_test(t, print_after_fuse_shows_groups);
  tcase_add_test(t, bad_group_syntax);
  tcase_add_test(t, verifier_checks_groups);
  tcase_add_test(t, hand_written_group_codegen_cannot_lower);
  tcase_add_test(t, hand_written_groups_are_lowered);
  tcase_add_test(t, hand_written_sibling_reductions_are_lowered);
  tcase_add_test(t, small_loops_are_unrolled);
  tcase_add_test(t, contiguous_maps_are_vectorized);
  tcase_add_test(t, small_maps_stay_scalar);
  tcase_add_test(t, guarded_loads_stay_guarded);
  tcase_add_test(t, lane_invariant_guards_read_vectors);
  tcase_add_test(t, in_bounds_guarded_loads_read_vectors);
  tcase_add_test(t, launch_targets);
  tcase_add_test(t, random_graphs_fused_on_emu);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(fuse_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
