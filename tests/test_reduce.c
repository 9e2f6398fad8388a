/* Check suite for the reductions and normalizations across threads
 * (codegen/lower_rows.c, KS_ALLREDUCE) and for the vectorized
 * memory-bound maps (codegen/unroll.c): every kernel on emu against
 * ir_eval in f32 (1e-5), f16 (1e-2) and bf16 (2e-2), at row lengths of 1,
 * 31, 32, 33, 1000 and 4097, many short rows, one long row, reductions
 * over middle and several axes, integer argmax with ties and NaN, group
 * norm; fused prologues and epilogues still one kernel; the text of the
 * kernels (shuffles, 16-byte accesses, broadcast operands once per
 * vector); NVRTC compiles every graph for sm_90.  The language's
 * rms_norm and group_norm builtins are in test_lower.c's style here too. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "frontend/ast.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/testutil.h"

/* A graph compiled: its text, whether passes/fuse.c ran on it. */
typedef struct Job {
  Graph *g;
  CgResult r;
  const char *text;
  bool fuse, ok;
} Job;

static Ctx ctx;
static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  j->g = ir_parse(c, ctx_add_file(c, "test.ir", j->text, strlen(j->text)));
  if (!j->g || !ir_verify(j->g)) return 0;
  if (j->fuse) {
    PassCtx pc = {.ctx = c};
    pass_fuse(j->g, &pc);
    if (!ir_verify(j->g)) return 0;
  }
  j->ok = cg_compile(j->g, &j->r);
  return 0;
}

/* text (printf: %1$s is the dtype) compiled, unfused or fused. */
static Job compile_text(const char *text, DType dt, bool fuse) {
  char *s = arena_printf(&ctx.arena, text, ir_dtype_name(dt));
  Job j = {.text = s, .fuse = fuse};
  int rc = ctx_guard(&ctx, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "compile failed:\n%s\n%s", s, diag_text(&ctx));
  return j;
}

static double tolerance(DType dt) { return dt == TY_F32 ? 1e-5 : dt == TY_F16 ? 1e-2 : 2e-2; }

static const DType dtypes[] = {TY_F32, TY_F16, TY_BF16};

/* Compiled (NVRTC for sm_90 too) and run on emu against the interpreter. */
static Job check(const char *text, DType dt, bool fuse, double lo, double hi) {
  Job j = compile_text(text, dt, fuse);
  test_nvrtc(j.r.source, "sm_90");
  test_emu_matches_eval(j.g, j.r.plan, 17, lo, hi, tolerance(dt));
  return j;
}

static int launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_LAUNCH;
  return n;
}

static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *at = text; (at = strstr(at, what)); at++) n++;
  return n;
}

/* ---- row lengths ---- */

/* 37 rows (never a whole number of blocks) of each length, one kernel
 * per op: a thread per row (1), a warp (31, 32, 33), a block (1000), a
 * block of 1024 with 4097 not a multiple of anything. */
static const char lengths_text[] =
    "graph lengths {\n"
    "  %%a = input {name=\"a\"} : %1$s[37, 1]\n"
    "  %%b = input {name=\"b\"} : %1$s[37, 31]\n"
    "  %%c = input {name=\"c\"} : %1$s[37, 32]\n"
    "  %%d = input {name=\"d\"} : %1$s[37, 33]\n"
    "  %%e = input {name=\"e\"} : %1$s[5, 1000]\n"
    "  %%f = input {name=\"f\"} : %1$s[3, 4097]\n"
    "  %%w = param {name=\"w\"} : %1$s[1000]\n"
    "  %%v = param {name=\"v\"} : %1$s[1000]\n"
    "  %%u = param {name=\"u\"} : %1$s[4097]\n"
    "  %%0 = layernorm %%a {axis=1} : %1$s[37, 1]\n"
    "  %%1 = softmax %%b {axis=1} : %1$s[37, 31]\n"
    "  %%2 = layernorm %%c {axis=1} : %1$s[37, 32]\n"
    "  %%3 = log_softmax %%d {axis=1} : %1$s[37, 33]\n"
    "  %%4 = layernorm %%e, %%w, %%v {axis=1} : %1$s[5, 1000]\n"
    "  %%5 = rms_norm %%f, %%u {axis=1, eps=1e-06} : %1$s[3, 4097]\n"
    "  %%6 = reduce_sum %%b {axes=[1]} : %1$s[37]\n"
    "  %%7 = reduce_max %%d {axes=[1], keepdims=1} : %1$s[37, 1]\n"
    "  %%8 = reduce_mean %%f {axes=[1]} : %1$s[3]\n"
    "  %%9 = softmax %%e {axis=1} : %1$s[5, 1000]\n"
    "  %%10 = rms_norm %%c {axis=1} : %1$s[37, 32]\n"
    "  %%11 = softmax %%f {axis=1} : %1$s[3, 4097]\n"
    "  %%12 = reduce_min %%a {axes=[1]} : %1$s[37]\n"
    "  return %%0 as \"ln1\", %%1 as \"sm31\", %%2 as \"ln32\", %%3 as \"lsm33\", %%4 as \"ln1000\", "
    "%%5 as \"rms4097\", %%6 as \"sum31\", %%7 as \"max33\", %%8 as \"mean4097\", %%9 as \"sm1000\", "
    "%%10 as \"rms32\", %%11 as \"sm4097\", %%12 as \"min1\"\n"
    "}\n";

START_TEST(row_lengths) {
  Job j = check(lengths_text, dtypes[_i], false, -2, 2);
  ck_assert_int_eq(launches(j.r.plan), 13);
}
END_TEST

/* 3000 rows of 3 (many rows a warp), and single rows long enough that
 * a thread keeps none of its elements between passes (70000) or keeps
 * twenty (20000); reductions of a few long rows, cut into parts that
 * the last part of each row to arrive combines, in the same launch (a
 * row of 70000, 40 columns of 6000). */
START_TEST(short_rows_and_one_long_row) {
  Job j = check("graph rows {\n"
        "  %%x = input {name=\"x\"} : %1$s[3000, 3]\n"
        "  %%y = input {name=\"y\"} : %1$s[1, 70000]\n"
        "  %%z = input {name=\"z\"} : %1$s[1, 20000]\n"
        "  %%0 = softmax %%x {axis=1} : %1$s[3000, 3]\n"
        "  %%1 = reduce_mean %%x {axes=[1]} : %1$s[3000]\n"
        "  %%2 = layernorm %%y {axis=1} : %1$s[1, 70000]\n"
        "  %%3 = softmax %%y {axis=1} : %1$s[1, 70000]\n"
        "  %%4 = reduce_sum %%y {axes=[0, 1]} : %1$s[]\n"
        "  %%5 = layernorm %%z {axis=1} : %1$s[1, 20000]\n"
        "  %%c = input {name=\"c\"} : %1$s[6000, 40]\n"
        "  %%6 = reduce_mean %%c {axes=[0]} : %1$s[40]\n"
        "  %%7 = reduce_max %%y {axes=[1], keepdims=1} : %1$s[1, 1]\n"
        "  return %%0 as \"sm\", %%1 as \"mean\", %%2 as \"ln\", %%3 as \"smy\", %%4 as \"sum\", "
        "%%5 as \"lnz\", %%6 as \"cols\", %%7 as \"max\"\n"
        "}\n",
        dtypes[_i], false, -2, 2);
  /* the three split reductions count their parts' arrivals: a word
   * per tile of rows (the row of 70000 twice, and 40 columns in two
   * tiles of 32) */
  ck_assert_int_eq(launches(j.r.plan), 8);
  ck_assert_uint_eq(j.r.plan->sync_bytes, 4 * 4);
  ck_assert_int_eq(count(j.r.source, "dl_last_arrival(&"), 3);
}
END_TEST

/* ---- reductions over middle and several axes ---- */

START_TEST(middle_and_several_axes) {
  check("graph axes {\n"
        "  %%x = input {name=\"x\"} : %1$s[4, 37, 50]\n"
        "  %%y = input {name=\"y\"} : %1$s[6, 5, 7]\n"
        "  %%z = input {name=\"z\"} : %1$s[3, 4, 5, 6]\n"
        "  %%t = input {name=\"t\"} : %1$s[300, 3]\n"
        "  %%i = input {name=\"i\"} : %1$s[2, 10, 7, 5]\n"
        "  %%0 = reduce_sum %%x {axes=[1]} : %1$s[4, 50]\n"
        "  %%1 = reduce_mean %%y {axes=[0, 2], keepdims=1} : %1$s[1, 5, 1]\n"
        "  %%2 = reduce_max %%z {axes=[1, 3]} : %1$s[3, 5]\n"
        "  %%3 = reduce_min %%t {axes=[0]} : %1$s[3]\n"
        "  %%4 = softmax %%i {axis=1} : %1$s[2, 10, 7, 5]\n"
        "  %%5 = log_softmax %%x {axis=1} : %1$s[4, 37, 50]\n"
        "  %%6 = reduce_mean %%i {axes=[2, 3]} : %1$s[2, 10]\n"
        "  %%7 = global_avgpool %%i : %1$s[2, 10, 1, 1]\n"
        "  %%8 = argmax %%x {axis=1} : i64[4, 50]\n"
        "  %%9 = argmax %%z {axis=3, keepdims=1} : i64[3, 4, 5, 1]\n"
        "  %%10 = reduce_sum %%z {axes=[0, 1, 2, 3]} : %1$s[]\n"
        "  return %%0 as \"s1\", %%1 as \"m02\", %%2 as \"mx13\", %%3 as \"mn0\", %%4 as \"sm1\", "
        "%%5 as \"lsm1\", %%6 as \"gap\", %%7 as \"gapop\", %%8 as \"am1\", %%9 as \"am3\", %%10 as \"all\"\n"
        "}\n",
        dtypes[_i], false, -2, 2);
}
END_TEST

/* Products near 1, so that 1000 of them stay finite. */
START_TEST(products) {
  check("graph prod {\n"
        "  %%x = input {name=\"x\"} : %1$s[7, 1000]\n"
        "  %%y = input {name=\"y\"} : %1$s[40, 9]\n"
        "  %%0 = reduce_prod %%x {axes=[1]} : %1$s[7]\n"
        "  %%1 = reduce_prod %%y {axes=[0]} : %1$s[9]\n"
        "  return %%0 as \"p\", %%1 as \"q\"\n"
        "}\n",
        dtypes[_i], false, 0.999, 1.001);
}
END_TEST

/* Integer reductions accumulate in i64 and wrap as eval.c's: sums of
 * i32 that overflow it, a row of one, rows of 33, two long rows split
 * over blocks (their parts combined in order), max and min of an empty
 * axis (the dtype's least and greatest), a product, an integer mean
 * (truncated), and u8's sum kept in u8 (mod 256).  u64's max is refused
 * by name. */
START_TEST(integers) {
  Job j = compile_text("graph ints {\n"
                       "  %%x = input {name=\"x\"} : i32[37, 33]\n"
                       "  %%y = input {name=\"y\"} : i64[2, 70000]\n"
                       "  %%z = input {name=\"z\"} : i32[5, 0]\n"
                       "  %%w = input {name=\"w\"} : i64[37, 1]\n"
                       "  %%u = input {name=\"u\"} : u8[6, 40]\n"
                       "  %%0 = reduce_sum %%x {axes=[1]} : i32[37]\n"
                       "  %%1 = reduce_max %%x {axes=[1]} : i32[37]\n"
                       "  %%2 = reduce_sum %%y {axes=[1]} : i64[2]\n"
                       "  %%3 = reduce_min %%y {axes=[1]} : i64[2]\n"
                       "  %%4 = reduce_max %%z {axes=[1]} : i32[5]\n"
                       "  %%5 = reduce_min %%z {axes=[1]} : i32[5]\n"
                       "  %%6 = reduce_prod %%w {axes=[0]} : i64[1]\n"
                       "  %%7 = reduce_mean %%x {axes=[0]} : i32[33]\n"
                       "  %%8 = reduce_sum %%u {axes=[1]} : u8[6]\n"
                       "  return %%0 as \"s\", %%1 as \"mx\", %%2 as \"ls\", %%3 as \"lm\", %%4 as \"emx\", "
                       "%%5 as \"emn\", %%6 as \"p\", %%7 as \"mean\", %%8 as \"us\"\n"
                       "}\n",
                       TY_F32, false);
  test_nvrtc(j.r.source, "sm_90");
  test_emu_matches_eval(j.g, j.r.plan, 9, -2e9, 2e9, 0);
  j = compile_text("graph ints {\n"
                   "  %%w = input {name=\"w\"} : i64[37, 3]\n"
                   "  %%0 = reduce_prod %%w {axes=[1]} : i64[37]\n"
                   "  return %%0 as \"p\"\n"
                   "}\n",
                   TY_F32, false);
  test_emu_matches_eval(j.g, j.r.plan, 9, -50, 50, 0);
  Job bad = {.text = "graph u {\n"
                     "  %x = input {name=\"x\"} : u64[4, 5]\n"
                     "  %0 = reduce_max %x {axes=[1]} : u64[4]\n"
                     "  return %0 as \"m\"\n"
                     "}\n"};
  ck_assert_int_eq(ctx_guard(&ctx, run_job, &bad), 0);
  ck_assert(!bad.ok);
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "codegen does not support reduce_max on u64 yet"));
}
END_TEST

/* Whole numbers 0 .. 3 in rows of 50: ties everywhere, the first wins. */
START_TEST(argmax_ties) {
  Job j = compile_text("graph am {\n"
                       "  %%x = input {name=\"x\"} : %1$s[64, 50]\n"
                       "  %%y = input {name=\"y\"} : %1$s[5, 300, 2]\n"
                       "  %%0 = argmax %%x {axis=1} : i64[64]\n"
                       "  %%1 = argmax %%y {axis=1} : i64[5, 2]\n"
                       "  return %%0 as \"a\", %%1 as \"b\"\n"
                       "}\n",
                       TY_I32, false);
  test_nvrtc(j.r.source, "sm_90");
  test_emu_matches_eval(j.g, j.r.plan, 3, 0, 4, 0);
}
END_TEST

/* NaN is the largest value (the first NaN wins), and max keeps it. */
START_TEST(nan_in_rows) {
  Job j = compile_text("graph nan {\n"
                       "  %%x = input {name=\"x\"} : %1$s[4, 100]\n"
                       "  %%l = log %%x : %1$s[4, 100]\n"
                       "  %%0 = argmax %%l {axis=1} : i64[4]\n"
                       "  %%1 = reduce_max %%l {axes=[1]} : %1$s[4]\n"
                       "  %%2 = reduce_min %%l {axes=[1]} : %1$s[4]\n"
                       "  return %%0 as \"a\", %%1 as \"mx\", %%2 as \"mn\"\n"
                       "}\n",
                       TY_F32, false);
  /* log of U(-0.05, 1): a NaN in most rows, somewhere */
  test_emu_matches_eval(j.g, j.r.plan, 5, -0.05, 1, 1e-5);
}
END_TEST

START_TEST(group_norm) {
  check("graph gn {\n"
        "  %%x = input {name=\"x\"} : %1$s[2, 6, 5, 7]\n"
        "  %%y = input {name=\"y\"} : %1$s[3, 8, 33]\n"
        "  %%w = param {name=\"w\"} : %1$s[6]\n"
        "  %%b = param {name=\"b\"} : %1$s[6]\n"
        "  %%v = param {name=\"v\"} : %1$s[8]\n"
        "  %%0 = group_norm %%x, %%w, %%b {groups=3} : %1$s[2, 6, 5, 7]\n"
        "  %%1 = group_norm %%y, %%v {groups=2, eps=0.001} : %1$s[3, 8, 33]\n"
        "  %%2 = group_norm %%y {groups=8} : %1$s[3, 8, 33]\n"
        "  return %%0 as \"g\", %%1 as \"h\", %%2 as \"k\"\n"
        "}\n",
        dtypes[_i], false, -2, 2);
}
END_TEST

/* ---- fused groups keep their members ---- */

/* Each anchor with members before and after it: one kernel a group
 * (layernorm(x + r) then gelu: the add in its loads, gelu in its
 * stores). */
START_TEST(fused_groups_of_each_anchor) {
  Job j = check("graph anchors {\n"
                "  %%y = input {name=\"y\"} : %1$s[6, 256]\n"
                "  %%r = input {name=\"r\"} : %1$s[6, 256]\n"
                "  %%lw = param {name=\"ln.weight\"} : %1$s[256]\n"
                "  %%lb = param {name=\"ln.bias\"} : %1$s[256]\n"
                "  %%10 = add %%y, %%r : %1$s[6, 256]\n"
                "  %%11 = layernorm %%10, %%lw, %%lb {axis=1} : %1$s[6, 256]\n"
                "  %%12 = gelu %%11 : %1$s[6, 256]\n"
                "  %%x = input {name=\"x\"} : %1$s[4, 8, 64]\n"
                "  %%m = input {name=\"m\"} : %1$s[64]\n"
                "  %%g = input {name=\"g\"} : %1$s[2, 6, 9, 9]\n"
                "  %%w = param {name=\"w\"} : %1$s[64]\n"
                "  %%k = const {value=0.125} : %1$s[]\n"
                "  %%0 = mul %%x, %%k : %1$s[4, 8, 64]\n"
                "  %%1 = add %%0, %%m : %1$s[4, 8, 64]\n"
                "  %%2 = softmax %%1 {axis=2} : %1$s[4, 8, 64]\n"
                "  %%3 = rms_norm %%x, %%w {axis=2} : %1$s[4, 8, 64]\n"
                "  %%4 = mul %%3, %%x : %1$s[4, 8, 64]\n"
                "  %%5 = group_norm %%g {groups=3} : %1$s[2, 6, 9, 9]\n"
                "  %%6 = silu %%5 : %1$s[2, 6, 9, 9]\n"
                "  %%7 = exp %%x : %1$s[4, 8, 64]\n"
                "  %%8 = reduce_sum %%7 {axes=[1]} : %1$s[4, 64]\n"
                "  %%9 = log %%8 : %1$s[4, 64]\n"
                "  return %%12 as \"ln\", %%2 as \"sm\", %%4 as \"rms\", %%6 as \"gn\", %%9 as \"lse\"\n"
                "}\n",
                dtypes[_i], true, -2, 2);
  ck_assert_int_eq(launches(j.r.plan), 5);
  ck_assert_int_eq(count(j.r.source, "__shfl_xor_sync") * count(j.r.source, "dl_gelu(") > 0, 1);
}
END_TEST

/* ---- the kernels' text ---- */

START_TEST(layernorm_text) {
  static const char text[] = "graph ln {\n"
                             "  %%x = input {name=\"x\"} : %1$s[64, 768]\n"
                             "  %%w = param {name=\"w\"} : %1$s[768]\n"
                             "  %%b = param {name=\"b\"} : %1$s[768]\n"
                             "  %%0 = layernorm %%x, %%w, %%b {axis=1} : %1$s[64, 768]\n"
                             "  return %%0 as \"y\"\n"
                             "}\n";
  Job j = compile_text(text, TY_F32, false);
  const char *src = j.r.source;
  ck_assert_ptr_nonnull(strstr(src, "__shfl_xor_sync(0xffffffffu, "));
  ck_assert_ptr_nonnull(strstr(src, "float4 v"));
  ck_assert_ptr_nonnull(strstr(src, "*(float4 *)&out["));
  /* 768 floats: 64 lanes of three float4 each, four rows a block */
  const RtLaunch *l = &j.r.plan->steps[0].launch;
  ck_assert_uint_eq(l->block[0], 64);
  ck_assert_uint_eq(l->block[1], 4);
  ck_assert_uint_eq(l->grid[0], 16);
  Job h = compile_text(text, TY_F16, false);
  ck_assert_ptr_nonnull(strstr(h.r.source, "uint4 v"));
  ck_assert_ptr_nonnull(strstr(h.r.source, "*(uint4 *)&out["));
  ck_assert_ptr_nonnull(strstr(h.r.source, "__shfl_xor_sync"));
}
END_TEST

/* f16 x [8, 16, 1024] plus a per-channel [16, 1] and a per-column [1024]:
 * 16-byte accesses, the channel's value loaded once per vector. */
START_TEST(elementwise_text) {
  Job j = check("graph ew {\n"
                "  %%x = input {name=\"x\"} : %1$s[8, 16, 1024]\n"
                "  %%c = input {name=\"c\"} : %1$s[16, 1]\n"
                "  %%s = input {name=\"s\"} : %1$s[1024]\n"
                "  %%0 = add %%x, %%c : %1$s[8, 16, 1024]\n"
                "  %%1 = mul %%0, %%s : %1$s[8, 16, 1024]\n"
                "  %%2 = relu %%1 : %1$s[8, 16, 1024]\n"
                "  return %%2 as \"out\"\n"
                "}\n",
                TY_F16, true, -2, 2);
  const char *src = j.r.source;
  ck_assert_int_eq(count(src, "uint4 v"), 2); /* x and s */
  ck_assert_int_eq(count(src, "*(uint4 *)&out["), 1);
  /* the channel: one load in the vector loop, one in the scalar tail */
  ck_assert_int_eq(count(src, "x_1["), 2);
  ck_assert_int_eq(count(src, "__shfl"), 0);
}
END_TEST

/* A map of 2^23 floats: four waves of 132 SMs' blocks, no more. */
START_TEST(grids_fill_the_sms) {
  Job j = compile_text("graph big {\n"
                       "  %%x = input {name=\"x\"} : %1$s[8388608]\n"
                       "  %%0 = relu %%x : %1$s[8388608]\n"
                       "  return %%0 as \"out\"\n"
                       "}\n",
                       TY_F32, false);
  ck_assert_uint_eq(j.r.plan->steps[0].launch.grid[0], 132 * 8 * 4);
  ck_assert_int_eq(cg_grid_cap(1024), 132 * 2 * 4);
}
END_TEST

/* ---- the language's builtins ---- */

static const Node *param_named(Graph *g, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  ck_abort_msg("no param '%s'", name);
  return NULL;
}

/* PyTorch's names and shapes (nn.RMSNorm: weight [D]; nn.GroupNorm:
 * weight and bias [C]) and defaults (eps: f32's epsilon, 1e-5). */
START_TEST(language_builtins) {
  TestSource s = {.text = "model m(x: f32[2, 6, 5, 5], t: f32[3, 40]) -> (a: f32[2, 6, 5, 5], b: f32[3, 40]) {\n"
                      "  a = silu(group_norm(x, 3) as gn)\n"
                      "  b = rms_norm(t) as norm\n"
                      "  return a, rms_norm(b, eps=0.01) as out\n"
                      "}\n"};
  ctx_guard(&ctx, test_lower_source, &s);
  ck_assert_msg(s.g && ir_verify(s.g), "%s", diag_text(&ctx));
  const TensorType *w = &param_named(s.g, "norm.weight")->out[0].type;
  ck_assert(w->rank == 1 && w->dims[0] == 40);
  ck_assert_int_eq(param_named(s.g, "gn.weight")->out[0].type.dims[0], 6);
  ck_assert_int_eq(param_named(s.g, "gn.bias")->out[0].type.dims[0], 6);
  param_named(s.g, "out.weight");
  int rms = 0, gn = 0;
  for (Node *n = s.g->first; n; n = n->next) {
    if (n->op == OP_RMS_NORM) ck_assert_double_eq(ir_attr_float(n, "eps"), rms++ ? 0.01 : 0x1p-23);
    if (n->op == OP_GROUP_NORM) {
      gn++;
      ck_assert_int_eq(ir_attr_int(n, "groups"), 3);
      ck_assert_double_eq(ir_attr_float(n, "eps"), 1e-5);
    }
  }
  ck_assert_int_eq(rms, 2);
  ck_assert_int_eq(gn, 1);
  PassCtx pc = {.ctx = &ctx};
  pass_fuse(s.g, &pc);
  Job j = {.g = s.g};
  ck_assert_msg(cg_compile(s.g, &j.r), "%s", diag_text(&ctx));
  test_emu_matches_eval(s.g, j.r.plan, 9, -2, 2, 1e-5);
}
END_TEST

static Suite *reduce_suite(void) {
  Suite *s = suite_create("reduce");
  TCase *t = tcase_create("rows");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 300);
  tcase_add_loop_test(t, row_lengths, 0, 3);
  tcase_add_loop_test(t, short_rows_and_one_long_row, 0, 3);
  tcase_add_loop_test(t, middle_and_several_axes, 0, 3);
  tcase_add_loop_test(t, products, 0, 3);
  tcase_add_test(t, integers);
  tcase_add_test(t, argmax_ties);
  tcase_add_test(t, nan_in_rows);
  tcase_add_loop_test(t, group_norm, 0, 3);
  tcase_add_loop_test(t, fused_groups_of_each_anchor, 0, 3);
  suite_add_tcase(s, t);
  TCase *x = tcase_create("text");
  tcase_add_checked_fixture(x, setup, teardown);
  tcase_set_timeout(x, 120);
  tcase_add_test(x, layernorm_text);
  tcase_add_test(x, elementwise_text);
  tcase_add_test(x, grids_fill_the_sms);
  tcase_add_test(x, language_builtins);
  suite_add_tcase(s, x);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(reduce_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
