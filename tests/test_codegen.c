/* Check suite for codegen/: hand-written IR graphs covering every op go
 * through cg_compile; the CUDA source must compile with NVRTC for sm_90,
 * the plan must be well formed (aligned, in range, non-overlapping arena
 * buffers, labelled steps), and, when the emu device is linked in, the
 * plan run on emu must match ir_eval on random inputs (f32: 1e-5
 * relative). */
#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "config.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "tests/testutil.h"
#include "runtime/device.h"
#include "runtime/runtime.h"

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

/* ---- compiling a graph ---- */

typedef struct Job {
  const char *text;
  Graph *g;
  CgResult r;
  CgOptions opts;
  bool ok;
} Job;

static int compile_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  if (!j->g || !ir_verify(j->g)) return 0;
  j->ok = cg_compile_opts(j->g, &j->opts, &j->r);
  return 0;
}

/* Parses, verifies and compiles text (with opts); fails the test on any
 * error. */
static Job compile_text_opts(const char *text, CgOptions opts) {
  Job j = {.text = text, .opts = opts};
  int rc = ctx_guard(&ctx, compile_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "codegen failed:\n%s", diag_text(&ctx));
  return j;
}

static Job compile_text(const char *text) { return compile_text_opts(text, (CgOptions){0}); }

/* ---- NVRTC ---- */


/* ---- plan checks ---- */

static uint64_t space_size(const RtPlan *p, RtRef r) {
  switch (r.space) {
    case RT_SPACE_WEIGHTS: return p->weights_bytes;
    case RT_SPACE_ARENA: return p->arena_bytes;
    case RT_SPACE_INPUT: ck_assert_uint_lt(r.index, p->n_inputs); return p->inputs[r.index].nbytes;
    case RT_SPACE_OUTPUT:
      ck_assert_uint_lt(r.index, p->n_outputs);
      return p->outputs[r.index].nbytes;
    case RT_SPACE_STATUS: return p->status_bytes;
  }
  ck_abort_msg("bad space %u", r.space);
  return 0;
}

static void check_range(const RtPlan *p, RtRef r, uint64_t nbytes, const char *label) {
  uint64_t size = space_size(p, r);
  ck_assert_msg(r.offset + nbytes <= size, "%s: %" PRIu64 "+%" PRIu64 " past the space's %" PRIu64,
                label, r.offset, nbytes, size);
}

/* Elements a strided row-major operand touches: (batch-1)*stride + the
 * last row's start + its length. */
static uint64_t gemm_extent(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
  return (uint64_t)((batch - 1) * stride + (rows - 1) * ld + cols) * 4;
}

static void check_plan(const CgResult *r) {
  const RtPlan *p = r->plan;
  ck_assert_uint_eq(p->magic, RT_PLAN_MAGIC);
  ck_assert_uint_eq(p->version, RT_PLAN_VERSION);
  ck_assert_ptr_eq(p->source, r->source);
  char err[512];
  ck_assert_msg(rt_plan_validate(p, err, sizeof err) == 0, "%s", err);
  for (uint32_t i = 0; i < p->n_weights; i++) {
    const RtTensorDesc *w = &p->weights[i];
    ck_assert_uint_eq(w->where.space, RT_SPACE_WEIGHTS);
    ck_assert_uint_eq(w->where.offset % 256, 0);
    check_range(p, w->where, w->nbytes, w->name);
    if (i)
      ck_assert_uint_ge(w->where.offset, p->weights[i - 1].where.offset + p->weights[i - 1].nbytes);
  }
  for (uint32_t i = 0; i < p->n_inputs; i++)
    ck_assert_uint_eq(p->inputs[i].where.space, RT_SPACE_INPUT);
  for (uint32_t i = 0; i < p->n_outputs; i++) {
    ck_assert_uint_eq(p->outputs[i].where.space, RT_SPACE_OUTPUT);
    ck_assert_uint_eq(p->outputs[i].where.index, i);
  }
  /* The memory plan: buffers live at a common step never share bytes
   * (but for one written in place over the other at that step). */
  for (int i = 0; i < r->n_buffers; i++) {
    const CgBuffer *a = &r->buffers[i];
    ck_assert_uint_eq(a->ref.offset % 256, 0);
    check_range(p, a->ref, a->nbytes, a->what);
    for (int j = 0; j < i; j++) {
      const CgBuffer *b = &r->buffers[j];
      bool apart =
          a->ref.offset >= b->ref.offset + b->nbytes || b->ref.offset >= a->ref.offset + a->nbytes;
      bool never_both = a->upper <= b->lower || b->upper <= a->lower;
      bool in_place = (a->inplace_of == j && a->lower == b->upper - 1) ||
                      (b->inplace_of == i && b->lower == a->upper - 1);
      ck_assert_msg(apart || never_both || in_place || !a->nbytes || !b->nbytes,
                    "%s overlaps %s while both live", a->what, b->what);
    }
  }
  ck_assert_msg(cg_check_memory(r, err, sizeof err), "%s", err);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    char sig[256];
    snprintf(sig, sizeof sig, "extern \"C\" __global__ void %s(", p->kernels[i].name);
    ck_assert_msg(strstr(p->source, sig), "kernel %s not in the source", p->kernels[i].name);
    snprintf(sig, sizeof sig, "extern \"C\" void %s__emu(void **args)", p->kernels[i].name);
    ck_assert_msg(strstr(p->source, sig), "no emu launcher for %s", p->kernels[i].name);
  }
  for (uint32_t i = 0; i < p->n_steps; i++) {
    const RtStep *s = &p->steps[i];
    ck_assert_msg(s->label && strstr(s->label, " %"), "step %u has label '%s'", i, s->label);
    switch (s->kind) {
      case RT_STEP_LAUNCH:
        ck_assert_uint_lt(s->launch.kernel, p->n_kernels);
        ck_assert_uint_gt(s->launch.grid[0], 0);
        ck_assert_uint_gt(s->launch.block[0], 0);
        ck_assert_uint_le(s->launch.block[0] * s->launch.block[1] * s->launch.block[2], 1024);
        for (uint32_t a = 0; a < s->launch.n_args; a++)
          if (s->launch.args[a].kind == RT_ARG_PTR)
            check_range(p, s->launch.args[a].ref, 0, s->label);
        break;
      case RT_STEP_GEMM: {
        const RtGemm *g = &s->gemm;
        int64_t ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k;
        int64_t br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
        ck_assert_int_ge(g->lda, ac);
        ck_assert_int_ge(g->ldb, bc);
        ck_assert_int_ge(g->ldc, g->n);
        check_range(p, g->a, gemm_extent(g->batch, g->stride_a, ar, ac, g->lda), s->label);
        check_range(p, g->b, gemm_extent(g->batch, g->stride_b, br, bc, g->ldb), s->label);
        check_range(p, g->c, gemm_extent(g->batch, g->stride_c, g->m, g->n, g->ldc), s->label);
        break;
      }
      case RT_STEP_COPY:
        check_range(p, s->copy.src, s->copy.nbytes, s->label);
        check_range(p, s->copy.dst, s->copy.nbytes, s->label);
        break;
      default: ck_abort_msg("step %u: kind %u", i, s->kind);
    }
  }
}

/* ---- numbers: the plan on emu against ir_eval ---- */

static bool emu_available(char *why, size_t len) {
  RtDevice *d = rt_emu_open(why, len);
  if (!d) return false;
  rt_device_close(d);
  return true;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

/* Runs j's plan on emu with random inputs in [lo, hi) (integers in
 * [-3, 3)) and compares every output with ir_eval's. */
static void check_numbers(Job *j, double lo, double hi) {
  char why[512];
  if (!emu_available(why, sizeof why)) return; /* the numeric suite is not even registered then */
  Graph *g = j->g;
  const RtPlan *p = j->r.plan;
  char err[512];
  TensorMap params;
  ck_assert_msg(ir_init_params(g, 7, IR_INIT_RANDOM, &params, err, sizeof err), "%s", err);
  TensorMap inputs = {.n = (int)p->n_inputs};
  inputs.names = calloc(p->n_inputs + 1, sizeof(char *));
  inputs.tensors = calloc(p->n_inputs + 1, sizeof(Tensor));
  for (uint32_t i = 0; i < p->n_inputs; i++) {
    const RtTensorDesc *d = &p->inputs[i];
    TensorType t = ir_type_make((DType)d->dtype, (int)d->rank, d->dims);
    inputs.names[i] = d->name;
    ck_assert(ir_tensor_alloc(&inputs.tensors[i], &t));
    for (int64_t e = 0; e < ir_type_numel(&t); e++)
      ir_tensor_set(&inputs.tensors[i], e,
                    ir_dtype_is_float(t.dtype) ? uniform(lo, hi) : floor(uniform(-3, 3)));
  }
  Tensor *want = calloc((size_t)g->n_outputs + 1, sizeof(Tensor));
  ck_assert_msg(ir_eval(g, &inputs, &params, want, err, sizeof err), "ir_eval: %s", err);

  Tensor *outs = test_run_emu(p, &params, &inputs);
  for (uint32_t o = 0; o < p->n_outputs; o++) {
    const RtTensorDesc *d = &p->outputs[o];
    Tensor got = outs[o];
    TensorType t = got.type;
    double worst = 0;
    int64_t at = -1;
    for (int64_t e = 0; e < ir_type_numel(&t); e++) {
      double w = ir_tensor_get(&want[o], e), v = ir_tensor_get(&got, e);
      if (isnan(w) && isnan(v)) continue;
      if (!ir_dtype_is_float(t.dtype)) {
        ck_assert_msg(w == v, "output '%s'[%ld]: %g, eval says %g", d->name, (long)e, v, w);
        continue;
      }
      if (isinf(w) && w == v) continue;
      /* 1e-5 relative; near zero 1e-6 absolute (sums that cancel). */
      double rel = fabs(v - w) / (fabs(w) + 1e-1);
      if (!(rel <= worst)) worst = rel, at = e;
    }
    if (getenv("DLCC_TEST_VERBOSE"))
      fprintf(stderr, "%s: output '%s' worst error %.3g\n", j->g->name, d->name, worst);
    ck_assert_msg(worst <= 1e-5, "output '%s'[%ld]: %.9g, eval says %.9g (error %.3g)", d->name,
                  (long)at, at >= 0 ? ir_tensor_get(&got, at) : 0.0,
                  at >= 0 ? ir_tensor_get(&want[o], at) : 0.0, worst);
    ir_tensor_free(&got);
    ir_tensor_free(&want[o]);
  }
  free(outs);
  free(want);
  for (uint32_t i = 0; i < p->n_inputs; i++) ir_tensor_free(&inputs.tensors[i]);
  free(inputs.names);
  free(inputs.tensors);
  ir_tensor_map_free(&params);
}

/* Everything a graph must pass: NVRTC, the plan's shape, the numbers. */
static Job check_graph_range(const char *text, double lo, double hi) {
  Job j = compile_text(text);
  check_plan(&j.r);
  test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, lo, hi);
  return j;
}

static Job check_graph(const char *text) { return check_graph_range(text, -2, 2); }

static int count_steps(const RtPlan *p, RtStepKind kind) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == (uint32_t)kind;
  return n;
}

/* ---- graphs: every op of ops.def ---- */

START_TEST(unary_ops) {
  check_graph(
      "graph unary {\n"
      "  %x = input {name=\"x\"} : f32[3, 37]\n"
      "  %0 = neg %x : f32[3, 37]\n"
      "  %1 = abs %x : f32[3, 37]\n"
      "  %2 = relu %x : f32[3, 37]\n"
      "  %3 = leaky_relu %x {alpha=0.2} : f32[3, 37]\n"
      "  %4 = clip %x {min=-0.5, max=0.75} : f32[3, 37]\n"
      "  %5 = sigmoid %x : f32[3, 37]\n"
      "  %6 = tanh %x : f32[3, 37]\n"
      "  %7 = gelu %x : f32[3, 37]\n"
      "  %8 = gelu %x {approximate=\"tanh\"} : f32[3, 37]\n"
      "  %9 = silu %x : f32[3, 37]\n"
      "  %10 = hardsigmoid %x : f32[3, 37]\n"
      "  %11 = hardswish %x : f32[3, 37]\n"
      "  %12 = exp %x : f32[3, 37]\n"
      "  %13 = erf %x : f32[3, 37]\n"
      "  %14 = sin %x : f32[3, 37]\n"
      "  %15 = cos %x : f32[3, 37]\n"
      "  return %0 as \"neg\", %1 as \"abs\", %2 as \"relu\", %3 as \"leaky\", %4 as \"clip\", %5 "
      "as \"sigmoid\", %6 as \"tanh\", %7 as \"gelu\", %8 as \"gelu_tanh\", %9 as \"silu\", %10 as "
      "\"hardsigmoid\", %11 as \"hardswish\", %12 as \"exp\", %13 as \"erf\", %14 as \"sin\", %15 "
      "as \"cos\"\n"
      "}\n");
}
END_TEST

START_TEST(unary_ops_positive) {
  check_graph_range(
      "graph positive {\n"
      "  %x = input {name=\"x\"} : f32[2, 50]\n"
      "  %0 = log %x : f32[2, 50]\n"
      "  %1 = sqrt %x : f32[2, 50]\n"
      "  %2 = rsqrt %x : f32[2, 50]\n"
      "  %3 = reciprocal %x : f32[2, 50]\n"
      "  %y = input {name=\"y\"} : f32[2, 50]\n"
      "  %4 = pow %x, %y : f32[2, 50]\n"
      "  return %0 as \"log\", %1 as \"sqrt\", %2 as \"rsqrt\", %3 as \"reciprocal\", %4 as "
      "\"pow\"\n"
      "}\n",
      0.1, 3);
}
END_TEST

START_TEST(binary_broadcast) {
  Job j = check_graph(
      "graph binary {\n"
      "  %a = input {name=\"a\"} : f32[2, 3, 4]\n"
      "  %b = input {name=\"b\"} : f32[3, 1]\n"
      "  %c = input {name=\"c\"} : f32[4]\n"
      "  %k = const {value=2.5} : f32[]\n"
      "  %0 = add %a, %b : f32[2, 3, 4]\n"
      "  %1 = sub %c, %a : f32[2, 3, 4]\n"
      "  %2 = mul %b, %c : f32[3, 4]\n"
      "  %3 = div %a, %b : f32[2, 3, 4]\n"
      "  %4 = maximum %a, %c : f32[2, 3, 4]\n"
      "  %5 = minimum %b, %a : f32[2, 3, 4]\n"
      "  %6 = mul %a, %k : f32[2, 3, 4]\n"
      "  return %0 as \"add\", %1 as \"sub\", %2 as \"mul\", %3 as \"div\", %4 as \"max\", %5 as "
      "\"min\", %6 as \"scaled\"\n"
      "}\n");
  /* The const is an immediate: no buffer, no fill kernel. */
  ck_assert_ptr_nonnull(strstr(j.r.source, "2.5f"));
  ck_assert_int_eq(count_steps(j.r.plan, RT_STEP_LAUNCH), 7);
}
END_TEST

START_TEST(integer_elementwise_and_cast) {
  check_graph(
      "graph ints {\n"
      "  %a = input {name=\"a\"} : i32[4, 5]\n"
      "  %b = input {name=\"b\"} : i32[5]\n"
      "  %c = input {name=\"c\"} : i64[4, 5]\n"
      "  %x = input {name=\"x\"} : f32[4, 5]\n"
      "  %q = input {name=\"q\"} : i8[4, 5]\n"
      "  %0 = add %a, %b : i32[4, 5]\n"
      "  %1 = mul %a, %b : i32[4, 5]\n"
      "  %2 = sub %c, %c : i64[4, 5]\n"
      "  %3 = maximum %a, %b : i32[4, 5]\n"
      "  %4 = neg %c : i64[4, 5]\n"
      "  %5 = abs %a : i32[4, 5]\n"
      "  %6 = relu %c : i64[4, 5]\n"
      "  %7 = clip %a {min=-1.5, max=1.5} : i32[4, 5]\n"
      "  %8 = cast %x {to=i32} : i32[4, 5]\n"
      "  %9 = cast %a {to=f32} : f32[4, 5]\n"
      "  %10 = cast %c {to=f32} : f32[4, 5]\n"
      "  %11 = cast %x {to=i64} : i64[4, 5]\n"
      "  %12 = cast %q {to=f32} : f32[4, 5]\n"
      "  %13 = cast %x {to=i8} : i8[4, 5]\n"
      "  %14 = minimum %q, %q : i8[4, 5]\n"
      "  return %0 as \"add\", %1 as \"mul\", %2 as \"sub\", %3 as \"max\", %4 as \"neg\", %5 as "
      "\"abs\", %6 as \"relu\", %7 as \"clip\", %8 as \"f2i\", %9 as \"i2f\", %10 as \"l2f\", %11 "
      "as \"f2l\", %12 as \"b2f\", %13 as \"f2b\", %14 as \"bmin\"\n"
      "}\n");
}
END_TEST

START_TEST(reductions) {
  check_graph(
      "graph reduce {\n"
      "  %x = input {name=\"x\"} : f32[3, 4, 5]\n"
      "  %0 = reduce_sum %x {axes=[1]} : f32[3, 5]\n"
      "  %1 = reduce_mean %x {axes=[0, 2], keepdims=1} : f32[1, 4, 1]\n"
      "  %2 = reduce_max %x {axes=[2]} : f32[3, 4]\n"
      "  %3 = reduce_min %x {axes=[0, 1, 2]} : f32[]\n"
      "  %4 = argmax %x {axis=1} : i64[3, 5]\n"
      "  %5 = argmax %x {axis=2, keepdims=1} : i64[3, 4, 1]\n"
      "  %6 = reduce_sum %x {axes=[0, 1]} : f32[5]\n"
      "  return %0 as \"sum\", %1 as \"mean\", %2 as \"max\", %3 as \"min\", %4 as \"argmax1\", %5 "
      "as \"argmax2\", %6 as \"sum01\"\n"
      "}\n");
}
END_TEST

START_TEST(normalizations) {
  check_graph(
      "graph norms {\n"
      "  %x = input {name=\"x\"} : f32[2, 6, 5]\n"
      "  %w = param {name=\"ln.weight\"} : f32[6, 5]\n"
      "  %b = param {name=\"ln.bias\"} : f32[6, 5]\n"
      "  %0 = softmax %x {axis=1} : f32[2, 6, 5]\n"
      "  %1 = log_softmax %x {axis=2} : f32[2, 6, 5]\n"
      "  %2 = layernorm %x, %w, %b {axis=1} : f32[2, 6, 5]\n"
      "  %3 = layernorm %x {axis=2, eps=0.001} : f32[2, 6, 5]\n"
      "  %i = input {name=\"img\"} : f32[2, 3, 4, 5]\n"
      "  %4 = global_avgpool %i : f32[2, 3, 1, 1]\n"
      "  %bw = param {name=\"bn.weight\", init=\"ones\"} : f32[3]\n"
      "  %bb = param {name=\"bn.bias\", init=\"zeros\"} : f32[3]\n"
      "  %bm = param {name=\"bn.running_mean\", init=\"zeros\"} : f32[3]\n"
      "  %bv = param {name=\"bn.running_var\", init=\"ones\"} : f32[3]\n"
      "  %5 = batchnorm %i, %bw, %bb, %bm, %bv : f32[2, 3, 4, 5]\n"
      "  return %0 as \"softmax\", %1 as \"log_softmax\", %2 as \"ln\", %3 as \"ln_plain\", %4 as "
      "\"gap\", %5 as \"bn\"\n"
      "}\n");
}
END_TEST

/* Row lengths of real models: f32 accumulation must still meet 1e-5. */
START_TEST(long_rows_in_f32) {
  check_graph(
      "graph long_rows {\n"
      "  %x = input {name=\"x\"} : f32[3, 4096]\n"
      "  %0 = reduce_sum %x {axes=[1]} : f32[3]\n"
      "  %1 = reduce_mean %x {axes=[1]} : f32[3]\n"
      "  %2 = softmax %x {axis=1} : f32[3, 4096]\n"
      "  %3 = layernorm %x {axis=1} : f32[3, 4096]\n"
      "  %i = input {name=\"img\"} : f32[1, 4, 56, 56]\n"
      "  %4 = global_avgpool %i : f32[1, 4, 1, 1]\n"
      "  %w = param {name=\"fc.weight\"} : f32[8, 4096]\n"
      "  %5 = linear %x, %w : f32[3, 8]\n"
      "  return %0 as \"sum\", %1 as \"mean\", %2 as \"softmax\", %3 as \"ln\", %4 as \"gap\", %5 "
      "as \"fc\"\n"
      "}\n");
}
END_TEST

START_TEST(matmul_batching) {
  Job j = check_graph(
      "graph mm {\n"
      "  %a = input {name=\"a\"} : f32[2, 3, 4]\n"
      "  %w = param {name=\"w\"} : f32[4, 5]\n"
      "  %bb = input {name=\"bb\"} : f32[2, 4, 5]\n"
      "  %m = input {name=\"m\"} : f32[3, 4]\n"
      "  %v = input {name=\"v\"} : f32[4]\n"
      "  %p = input {name=\"p\"} : f32[2, 1, 3, 4]\n"
      "  %q = input {name=\"q\"} : f32[3, 4, 5]\n"
      "  %0 = matmul %a, %w : f32[2, 3, 5]\n"
      "  %1 = matmul %a, %bb : f32[2, 3, 5]\n"
      "  %2 = matmul %m, %bb : f32[2, 3, 5]\n"
      "  %3 = matmul %v, %w : f32[5]\n"
      "  %4 = matmul %m, %v : f32[3]\n"
      "  %5 = matmul %p, %q : f32[2, 3, 3, 5]\n"
      "  return %0 as \"folded\", %1 as \"batched\", %2 as \"bcast_a\", %3 as \"vec_mat\", %4 as "
      "\"mat_vec\", %5 as \"per_batch\"\n"
      "}\n");
  const RtPlan *p = j.r.plan;
  /* folded, batched, bcast_a, vec_mat, mat_vec: one GEMM each; per_batch: 6. */
  ck_assert_int_eq(count_steps(p, RT_STEP_GEMM), 5 + 6);
  ck_assert_int_eq(p->steps[0].gemm.m, 6);
  ck_assert_int_eq(p->steps[0].gemm.batch, 1);
  ck_assert_int_eq(p->steps[2].gemm.stride_a, 0);
  ck_assert_int_eq(p->steps[2].gemm.batch, 2);
}
END_TEST

START_TEST(linear_with_and_without_bias) {
  Job j = check_graph(
      "graph lin {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 8]\n"
      "  %w = param {name=\"fc.weight\"} : f32[5, 8]\n"
      "  %b = param {name=\"fc.bias\"} : f32[5]\n"
      "  %0 = linear %x, %w, %b : f32[2, 3, 5]\n"
      "  %1 = linear %x, %w : f32[2, 3, 5]\n"
      "  return %0 as \"y\", %1 as \"nobias\"\n"
      "}\n");
  /* Two GEMMs: the first adds the bias (cuBLASLt's epilogue), no kernel. */
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(p->n_steps, 2);
  ck_assert_int_eq(p->steps[0].kind, RT_STEP_GEMM);
  ck_assert_int_eq(p->steps[0].gemm.trans_b, 1);
  ck_assert_int_eq(p->steps[0].gemm.m, 6);
  ck_assert_uint_eq(p->steps[0].gemm.epilogue, RT_EPILOGUE_BIAS);
  ck_assert_uint_eq(p->steps[0].gemm.bias.space, RT_SPACE_WEIGHTS);
  ck_assert_uint_eq(p->steps[1].gemm.epilogue, RT_EPILOGUE_NONE);
}
END_TEST

START_TEST(conv2d_im2col) {
  check_graph(
      "graph conv {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 7, 7]\n"
      "  %w = param {name=\"c1.weight\"} : f32[4, 3, 3, 3]\n"
      "  %b = param {name=\"c1.bias\"} : f32[4]\n"
      "  %0 = conv2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1]} : f32[2, 4, 4, 4]\n"
      "  %1 = conv2d %x, %w {dilation=[2, 2], pad=[2, 1, 0, 1]} : f32[2, 4, 5, 5]\n"
      "  %w1 = param {name=\"c2.weight\"} : f32[5, 3, 1, 1]\n"
      "  %2 = conv2d %x, %w1 : f32[2, 5, 7, 7]\n"
      "  return %0 as \"strided\", %1 as \"dilated\", %2 as \"pointwise\"\n"
      "}\n");
}
END_TEST

START_TEST(conv2d_grouped) {
  check_graph(
      "graph gconv {\n"
      "  %x = input {name=\"x\"} : f32[2, 4, 6, 6]\n"
      "  %w = param {name=\"g.weight\"} : f32[6, 2, 3, 3]\n"
      "  %b = param {name=\"g.bias\"} : f32[6]\n"
      "  %0 = conv2d %x, %w, %b {pad=[1, 1, 1, 1], groups=2} : f32[2, 6, 6, 6]\n"
      "  %d = param {name=\"dw.weight\"} : f32[4, 1, 3, 3]\n"
      "  %1 = conv2d %x, %d {stride=[2, 2], groups=4} : f32[2, 4, 2, 2]\n"
      "  return %0 as \"grouped\", %1 as \"depthwise\"\n"
      "}\n");
}
END_TEST

START_TEST(conv_transpose2d_direct) {
  check_graph(
      "graph deconv {\n"
      "  %x = input {name=\"x\"} : f32[2, 4, 3, 3]\n"
      "  %w = param {name=\"up.weight\"} : f32[4, 3, 3, 3]\n"
      "  %b = param {name=\"up.bias\"} : f32[3]\n"
      "  %0 = conv_transpose2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1], output_pad=[1, 1]} : "
      "f32[2, 3, 6, 6]\n"
      "  %g = param {name=\"g.weight\"} : f32[4, 2, 2, 2]\n"
      "  %1 = conv_transpose2d %x, %g {stride=[2, 2], dilation=[1, 2], groups=2} : f32[2, 4, 6, 7]\n"
      "  %2 = conv_transpose2d %x, %w {pad=[0, 1, 2, 0]} : f32[2, 3, 3, 4]\n"
      "  return %0 as \"strided\", %1 as \"grouped\", %2 as \"cropped\"\n"
      "}\n");
}
END_TEST

START_TEST(comparisons) {
  check_graph(
      "graph cmp {\n"
      "  %x = input {name=\"x\"} : f32[3, 37]\n"
      "  %y = input {name=\"y\"} : f32[37]\n"
      "  %0 = lt %x, %y : f32[3, 37]\n"
      "  %1 = le %x, %x : f32[3, 37]\n"
      "  %2 = gt %x, %y : f32[3, 37]\n"
      "  %3 = ge %y, %x : f32[3, 37]\n"
      "  %4 = eq %x, %x : f32[3, 37]\n"
      "  %5 = ne %x, %y : f32[3, 37]\n"
      "  %6 = mul %0, %x : f32[3, 37]\n"
      "  %h = cast %x {to=f16} : f16[3, 37]\n"
      "  %7 = gt %h, %h : f16[3, 37]\n"
      "  %i = cast %x {to=i32} : i32[3, 37]\n"
      "  %z = const {value=0} : i32[]\n"
      "  %8 = ne %i, %z : i32[3, 37]\n"
      "  return %6 as \"lt\", %1 as \"le\", %2 as \"gt\", %3 as \"ge\", %4 as \"eq\", %5 as "
      "\"ne\", %7 as \"gt16\", %8 as \"ne32\"\n"
      "}\n");
}
END_TEST

START_TEST(resize_modes) {
  check_graph(
      "graph resize {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 5, 4]\n"
      "  %0 = resize %x {size=[10, 12]} : f32[2, 3, 10, 12]\n"
      "  %1 = resize %x {size=[7, 9], mode=\"bilinear\"} : f32[2, 3, 7, 9]\n"
      "  %2 = resize %x {size=[3, 8], mode=\"bilinear\", align_corners=1} : f32[2, 3, 3, 8]\n"
      "  %3 = resize %x {size=[1, 1], mode=\"bilinear\", align_corners=1} : f32[2, 3, 1, 1]\n"
      "  return %0 as \"nearest\", %1 as \"half_pixel\", %2 as \"corners\", %3 as \"one\"\n"
      "}\n");
}
END_TEST

START_TEST(pooling) {
  check_graph(
      "graph pool {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 7, 7]\n"
      "  %0 = maxpool2d %x {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1], ceil_mode=1} : f32[2, "
      "3, 4, 4]\n"
      "  %1 = avgpool2d %x {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1], ceil_mode=1} : f32[2, "
      "3, 4, 4]\n"
      "  %2 = avgpool2d %x {kernel=[2, 2], stride=[2, 2], pad=[1, 1, 1, 1], count_include_pad=0} : "
      "f32[2, 3, 4, 4]\n"
      "  %3 = maxpool2d %x {kernel=[2, 2], stride=[1, 1], dilation=[2, 2]} : f32[2, 3, 5, 5]\n"
      "  %4 = avgpool2d %x {kernel=[2, 2], stride=[2, 2], ceil_mode=1, count_include_pad=1} : "
      "f32[2, 3, 4, 4]\n"
      "  return %0 as \"max\", %1 as \"avg_pad\", %2 as \"avg_nopad\", %3 as \"max_dil\", %4 as "
      "\"avg_ceil\"\n"
      "}\n");
}
END_TEST

START_TEST(data_movement) {
  check_graph(
      "graph moves {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 4]\n"
      "  %y = input {name=\"y\"} : f32[2, 1, 4]\n"
      "  %0 = transpose %x {perm=[2, 0, 1]} : f32[4, 2, 3]\n"
      "  %1 = expand %y {shape=[3, 2, 5, 4]} : f32[3, 2, 5, 4]\n"
      "  %2 = concat %x, %y, %x {axis=1} : f32[2, 7, 4]\n"
      "  %3 = slice %x {starts=[1, 0, 1], ends=[2, 3, 4], steps=[1, 2, 2]} : f32[1, 2, 2]\n"
      "  %4 = pad %x {pads=[0, 1, 2, 1, 0, 1], value=-1.5} : f32[3, 4, 7]\n"
      "  %q = input {name=\"q\"} : i8[2, 3]\n"
      "  %6 = pad %q {pads=[1, 0, 0, 2], value=300} : i8[3, 5]\n"
      "  %5 = concat %y, %y {axis=2} : f32[2, 1, 8]\n"
      "  return %0 as \"transpose\", %1 as \"expand\", %2 as \"concat\", %3 as \"slice\", %4 as "
      "\"pad\", %5 as \"concat_last\", %6 as \"pad_i8\"\n"
      "}\n");
}
END_TEST

START_TEST(gather_clamps_and_wraps) {
  check_graph(
      "graph gather {\n"
      "  %e = param {name=\"embed.weight\"} : f32[6, 4]\n"
      "  %i = input {name=\"tokens\"} : i64[2, 3]\n"
      "  %0 = gather %e, %i : f32[2, 3, 4]\n"
      "  %x = input {name=\"x\"} : f32[2, 5, 3]\n"
      "  %j = input {name=\"j\"} : i32[4]\n"
      "  %1 = gather %x, %j {axis=1} : f32[2, 4, 3]\n"
      "  return %0 as \"embedded\", %1 as \"picked\"\n"
      "}\n");
}
END_TEST

START_TEST(reshape_aliases_and_copies) {
  Job j = check_graph(
      "graph reshape {\n"
      "  %x = input {name=\"x\"} : f32[2, 6]\n"
      "  %0 = relu %x : f32[2, 6]\n"
      "  %1 = reshape %0 {shape=[3, 4]} : f32[3, 4]\n"
      "  %2 = neg %1 : f32[3, 4]\n"
      "  %3 = reshape %2 {shape=[12]} : f32[12]\n"
      "  %4 = reshape %x {shape=[12]} : f32[12]\n"
      "  return %3 as \"flat\", %4 as \"x_flat\"\n"
      "}\n");
  const RtPlan *p = j.r.plan;
  /* relu, neg straight into output 0 (a reshape has its operand's
   * bytes), then the copy of the input into output 1; %1 reads relu's
   * bytes. */
  ck_assert_int_eq(p->n_steps, 3);
  ck_assert_int_eq(p->steps[1].launch.args[1].ref.space, RT_SPACE_OUTPUT);
  ck_assert_int_eq(p->steps[1].launch.args[1].ref.index, 0);
  ck_assert_int_eq(p->steps[2].kind, RT_STEP_COPY);
  ck_assert_int_eq(p->steps[2].copy.src.space, RT_SPACE_INPUT);
  ck_assert_uint_eq(p->steps[0].launch.args[1].ref.offset, p->steps[1].launch.args[0].ref.offset);
}
END_TEST

START_TEST(recurrent_lstm) {
  check_graph_range(
      "graph lstm {\n"
      "  %x = input {name=\"x\"} : f32[2, 3, 5]\n"
      "  %a0 = param {name=\"l.weight_ih_l0\"} : f32[16, 5]\n"
      "  %b0 = param {name=\"l.weight_hh_l0\"} : f32[16, 4]\n"
      "  %c0 = param {name=\"l.bias_ih_l0\"} : f32[16]\n"
      "  %d0 = param {name=\"l.bias_hh_l0\"} : f32[16]\n"
      "  %a1 = param {name=\"l.weight_ih_l0_reverse\"} : f32[16, 5]\n"
      "  %b1 = param {name=\"l.weight_hh_l0_reverse\"} : f32[16, 4]\n"
      "  %c1 = param {name=\"l.bias_ih_l0_reverse\"} : f32[16]\n"
      "  %d1 = param {name=\"l.bias_hh_l0_reverse\"} : f32[16]\n"
      "  %a2 = param {name=\"l.weight_ih_l1\"} : f32[16, 8]\n"
      "  %b2 = param {name=\"l.weight_hh_l1\"} : f32[16, 4]\n"
      "  %c2 = param {name=\"l.bias_ih_l1\"} : f32[16]\n"
      "  %d2 = param {name=\"l.bias_hh_l1\"} : f32[16]\n"
      "  %a3 = param {name=\"l.weight_ih_l1_reverse\"} : f32[16, 8]\n"
      "  %b3 = param {name=\"l.weight_hh_l1_reverse\"} : f32[16, 4]\n"
      "  %c3 = param {name=\"l.bias_ih_l1_reverse\"} : f32[16]\n"
      "  %d3 = param {name=\"l.bias_hh_l1_reverse\"} : f32[16]\n"
      "  %y, %h, %c = lstm %x, %a0, %b0, %c0, %d0, %a1, %b1, %c1, %d1, %a2, %b2, %c2, %d2, %a3, "
      "%b3, %c3, %d3"
      " {hidden=4, layers=2, bidirectional=1} : f32[2, 3, 8], f32[4, 2, 4], f32[4, 2, 4]\n"
      "  return %y as \"y\", %h as \"h\", %c as \"c\"\n"
      "}\n",
      -1, 1);
}
END_TEST

START_TEST(recurrent_gru) {
  Job j = check_graph_range(
      "graph gru {\n"
      "  %x = input {name=\"x\"} : f32[4, 2, 3]\n"
      "  %a = param {name=\"g.weight_ih_l0\"} : f32[15, 3]\n"
      "  %b = param {name=\"g.weight_hh_l0\"} : f32[15, 5]\n"
      "  %y, %h = gru %x, %a, %b {hidden=5, batch_first=0, bias=0} : f32[4, 2, 5], f32[1, 2, 5]\n"
      "  return %y as \"y\", %h as \"h\"\n"
      "}\n",
      -1, 1);
  /* One persistent kernel for all timesteps. */
  int cells = 0;
  for (uint32_t i = 0; i < j.r.plan->n_kernels; i++)
    cells += strstr(j.r.plan->kernels[i].name, "persist") != NULL && j.r.plan->kernels[i].cooperative;
  ck_assert_int_eq(cells, 1);
}
END_TEST

/* One recurrent layer stack per row: the step kernel's edges (a hidden
 * width past a multiple of the block's 8 units and the warp's 32 lanes,
 * batch rows past a multiple of the warp's 4, one timestep, many) in
 * both layouts, directions, with and without biases. */
static const struct RnnCase {
  bool lstm, bidir, bf, bias;
  int layers;
  int64_t T, N, H, I;
} rnn_cases[] = {
    {true, false, true, true, 1, 1, 5, 37, 6},   {false, true, false, true, 2, 7, 5, 20, 4},
    {true, true, true, false, 2, 7, 2, 8, 3},    {false, false, true, true, 1, 64, 2, 16, 5},
    {true, true, false, true, 1, 64, 1, 17, 4},  {false, true, false, false, 1, 1, 4, 3, 2},
    {true, false, true, true, 2, 32, 3, 12, 7},  {true, false, false, true, 1, 256, 2, 8, 3},
};

static char *rnn_text(const struct RnnCase *rc) {
  int64_t dirs = rc->bidir ? 2 : 1, G = rc->lstm ? 4 : 3, GH = G * rc->H;
  size_t cap = 8192, len = 0;
  char *t = malloc(cap), args[2048] = "";
  len += (size_t)snprintf(t + len, cap - len, "graph rnn {\n  %%x = input {name=\"x\"} : f32[%" PRId64 ", %" PRId64 ", %" PRId64 "]\n",
                          rc->bf ? rc->N : rc->T, rc->bf ? rc->T : rc->N, rc->I);
  static const char *const kinds[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  for (int l = 0; l < rc->layers; l++)
    for (int d = 0; d < dirs; d++)
      for (int w = 0; w < (rc->bias ? 4 : 2); w++) {
        int64_t in = l ? dirs * rc->H : rc->I;
        char dims[64];
        if (w < 2)
          snprintf(dims, sizeof dims, "%" PRId64 ", %" PRId64, GH, w ? rc->H : in);
        else
          snprintf(dims, sizeof dims, "%" PRId64, GH);
        len += (size_t)snprintf(t + len, cap - len, "  %%w%d_%d_%d = param {name=\"r.%s_l%d%s\"} : f32[%s]\n", l, d,
                                w, kinds[w], l, d ? "_reverse" : "", dims);
        size_t a = strlen(args);
        snprintf(args + a, sizeof args - a, ", %%w%d_%d_%d", l, d, w);
      }
  int64_t states = rc->layers * dirs;
  char st[96];
  snprintf(st, sizeof st, "f32[%" PRId64 ", %" PRId64 ", %" PRId64 "]", states, rc->N, rc->H);
  len += (size_t)snprintf(t + len, cap - len,
                          "  %%y, %%h%s = %s %%x%s {hidden=%" PRId64 ", layers=%d, bidirectional=%d, batch_first=%d, "
                          "bias=%d} : f32[%" PRId64 ", %" PRId64 ", %" PRId64 "], %s%s%s\n",
                          rc->lstm ? ", %c" : "", rc->lstm ? "lstm" : "gru", args, rc->H, rc->layers, rc->bidir,
                          rc->bf, rc->bias, rc->bf ? rc->N : rc->T, rc->bf ? rc->T : rc->N, dirs * rc->H, st,
                          rc->lstm ? ", " : "", rc->lstm ? st : "");
  snprintf(t + len, cap - len, "  return %%y as \"y\", %%h as \"h\"%s\n}\n", rc->lstm ? ", %c as \"c\"" : "");
  return t;
}

/* Against ir_eval on emu, each case twice (_i even: the default, one
 * persistent kernel per layer and direction; odd: --no-persistent-rnn).
 * Persistent, per layer and direction the plan is the fill of the grid
 * barrier's words and h_0, the input projection and the kernel; else
 * the two state fills (one for a GRU), the input projection and one step
 * kernel per timestep, all timesteps sharing its text. */
START_TEST(recurrent_step_kernel) {
  const struct RnnCase *rc = &rnn_cases[_i / 2];
  bool persistent = _i % 2 == 0;
  char *text = rnn_text(rc);
  Job j = compile_text_opts(text, (CgOptions){.no_persistent_rnn = !persistent});
  check_plan(&j.r);
  if (_i < 2) test_nvrtc(j.r.source, "sm_90");
  check_numbers(&j, -1, 1);
  const RtPlan *p = j.r.plan;
  int64_t per = persistent ? 3 : (rc->lstm ? 2 : 1) + 1 + rc->T, dirs = rc->bidir ? 2 : 1;
  ck_assert_int_eq(p->n_steps, rc->layers * dirs * per);
  ck_assert_int_eq(count_steps(p, RT_STEP_GEMM), rc->layers * dirs);
  int steps = 0, persist = 0;
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    steps += strstr(p->kernels[i].name, "_step_") != NULL;
    persist += strstr(p->kernels[i].name, "_persist_") != NULL;
    ck_assert_int_eq(p->kernels[i].cooperative, strstr(p->kernels[i].name, "_persist_") != NULL);
  }
  ck_assert_int_eq(steps, !persistent);
  /* One text for every layer and direction but where they differ in
   * shape (a second layer's input width does not reach the kernel) or
   * direction. */
  ck_assert_int_eq(persist, persistent ? dirs : 0);
  free(text);
}
END_TEST

START_TEST(outputs_that_live_elsewhere) {
  Job j = check_graph(
      "graph outs {\n"
      "  %x = input {name=\"x\"} : f32[3]\n"
      "  %w = param {name=\"w\"} : f32[3]\n"
      "  %k = const {value=4} : f32[2]\n"
      "  %0 = add %x, %w : f32[3]\n"
      "  return %x as \"x_again\", %w as \"w_again\", %k as \"four\", %0 as \"sum\", %0 as "
      "\"sum_again\"\n"
      "}\n");
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(p->n_outputs, 5);
  ck_assert_int_eq(count_steps(p, RT_STEP_COPY), 3);
}
END_TEST

START_TEST(const_operand_of_gemm_is_materialized) {
  Job j = check_graph(
      "graph cmm {\n"
      "  %x = input {name=\"x\"} : f32[3, 4]\n"
      "  %k = const {value=0.25} : f32[4, 2]\n"
      "  %0 = matmul %x, %k : f32[3, 2]\n"
      "  return %0 as \"y\"\n"
      "}\n");
  ck_assert_int_eq(j.r.plan->steps[0].kind, RT_STEP_LAUNCH); /* the fill */
  ck_assert_int_eq(j.r.plan->steps[1].kind, RT_STEP_GEMM);
}
END_TEST

START_TEST(identical_kernels_are_shared) {
  Job j = check_graph(
      "graph dedupe {\n"
      "  %x = input {name=\"x\"} : f32[4, 8]\n"
      "  %0 = relu %x : f32[4, 8]\n"
      "  %1 = relu %0 : f32[4, 8]\n"
      "  %y = input {name=\"y\"} : f32[100]\n"
      "  %2 = relu %y : f32[100]\n"
      "  %3 = sigmoid %2 : f32[100]\n"
      "  return %1 as \"a\", %3 as \"b\"\n"
      "}\n");
  const RtPlan *p = j.r.plan;
  ck_assert_int_eq(p->n_steps, 4);
  ck_assert_int_eq(p->n_kernels, 2);
  ck_assert_uint_eq(p->steps[0].launch.kernel, p->steps[2].launch.kernel);
  ck_assert_str_eq(p->steps[1].label, "relu %2");
}
END_TEST

START_TEST(kernel_text_is_readable) {
  Job j = compile_text(
      "graph readable {\n"
      "  %x = input {name=\"x\"} : f32[4, 8]   ; model.dl:3:9\n"
      "  %0 = relu %x : f32[4, 8]               ; model.dl:4:7\n"
      "  return %0 as \"y\"\n"
      "}\n");
  const char *s = j.r.source;
  ck_assert_ptr_nonnull(strstr(s, "// relu %1  (model.dl:4:7)"));
  ck_assert_ptr_nonnull(strstr(s,
                               "extern \"C\" __global__ void relu_1(const float *__restrict__ x, "
                               "float *__restrict__ out, int n) {"));
  ck_assert_ptr_nonnull(
      strstr(s,
             "extern \"C\" void relu_1__emu(void **args) {\n"
             "  relu_1(*(float **)args[0], *(float **)args[1], *(int *)args[2]);"));
  ck_assert_ptr_null(strstr(s, "cuda_fp16.h"));
  ck_assert_int_eq(j.r.plan->steps[0].launch.args[2].kind, RT_ARG_I32);
  ck_assert_int_eq(j.r.plan->steps[0].launch.args[2].i, 32);
}
END_TEST

/* Past 2^30 elements the index math is 64-bit, and so is n. */
START_TEST(huge_tensors_index_in_64_bits) {
  Job j = compile_text(
      "graph huge {\n"
      "  %x = input {name=\"x\"} : f32[3, 1073741824]\n"
      "  %b = input {name=\"b\"} : f32[1073741824]\n"
      "  %0 = add %x, %b : f32[3, 1073741824]\n"
      "  return %0 as \"y\"\n"
      "}\n");
  check_plan(&j.r);
  test_nvrtc(j.r.source, "sm_90");
  ck_assert_ptr_nonnull(strstr(j.r.source, "long long n) {"));
  /* the coordinate of a non-negative index: a 64-bit mask */
  ck_assert_ptr_nonnull(strstr(j.r.source, "& 1073741823LL)"));
  ck_assert_int_eq(j.r.plan->steps[0].launch.args[3].kind, RT_ARG_I64);
  ck_assert_int_eq(j.r.plan->steps[0].launch.args[3].i, 3 * (int64_t)1073741824);
}
END_TEST

/* A plan of one launch of kern (in source), for the kernels these tests
 * build by hand. */
static RtPlan one_launch(const char *source, const RtKernel *kern, const RtContract *contract, const RtStep *step,
                         int n_in, const RtTensorDesc *ins, const RtTensorDesc *out) {
  return (RtPlan){.magic = RT_PLAN_MAGIC,
                  .version = RT_PLAN_VERSION,
                  .model_name = kern->name,
                  .source = source,
                  .n_kernels = 1,
                  .kernels = kern,
                  .n_contracts = 1,
                  .contracts = contract,
                  .n_steps = 1,
                  .steps = step,
                  .n_inputs = (uint32_t)n_in,
                  .inputs = ins,
                  .n_outputs = 1,
                  .outputs = out};
}

/* The IR beyond what today's lowering uses: a block stages x in shared
 * memory, synchronizes, thread 0 sums it through an unrolled register
 * array.  Printed, compiled by NVRTC, run on emu (fibers at the barrier). */
START_TEST(shared_memory_and_barriers) {
  enum { N = 256 };
  Kernel *k = cg_kernel_new(&ctx, NULL, "block_sum", NULL);
  RtRef in = {.space = RT_SPACE_INPUT}, out = {.space = RT_SPACE_OUTPUT};
  KBuf *x = cg_kglobal(k, "x", TY_F32, N, in), *y = cg_kglobal(k, "y", TY_F32, 1, out);
  KBuf *sh = cg_klocal(k, "sh", TY_F32, N, KSP_SHARED);
  KBuf *part = cg_klocal(k, "part", TY_F32, 4, KSP_REGISTER);
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *stage = cg_kloop(k, &k->body, t, cg_kint(k, N), KM_BLOCK_X);
  cg_kstore(k, &stage->body, sh, cg_kv(k, t), cg_kload(k, x, cg_kv(k, t)));
  cg_kbarrier(k, &k->body);
  KVar *t0 = cg_kvar(k, "t", KT_INDEX); /* thread 0 alone: t < 1 */
  KStmt *first = cg_kloop(k, &k->body, t0, cg_kint(k, 1), KM_BLOCK_X);
  KVar *q = cg_kvar(k, "q", KT_INDEX), *r = cg_kvar(k, "r", KT_INDEX),
       *acc = cg_kvar(k, "acc", TY_F32);
  KStmt *quarters = cg_kloop(k, &first->body, q, cg_kint(k, 4), KM_UNROLL);
  KStmt *red =
      cg_kreduce(k, &quarters->body, acc, cg_kimm(k, 0, TY_F32), OP_ADD, r, cg_kint(k, N / 4));
  red->value = cg_kload(k, sh, cg_kadd(k, cg_kmul(k, cg_kv(k, q), cg_kint(k, N / 4)), cg_kv(k, r)));
  cg_kstore(k, &quarters->body, part, cg_kv(k, q), cg_kv(k, acc));
  KExpr *sum = cg_kop2(
      k, OP_ADD,
      cg_kop2(k, OP_ADD, cg_kload(k, part, cg_kint(k, 0)), cg_kload(k, part, cg_kint(k, 1))),
      cg_kop2(k, OP_ADD, cg_kload(k, part, cg_kint(k, 2)), cg_kload(k, part, cg_kint(k, 3))));
  cg_kstore(k, &first->body, y, cg_kint(k, 0), sum);
  cg_kernel_finish(k);
  ck_assert(k->uses_barriers);
  ck_assert_uint_eq(k->shared_bytes, N * 4);
  const char *text = cg_emit_kernel(&ctx, k, "block_sum", true);
  ck_assert_ptr_nonnull(strstr(text, "  __shared__ float sh0[256];\n  float part1[4];\n"));
  ck_assert_ptr_nonnull(strstr(text, "for (int t2 = threadIdx.x; t2 < 256; t2 += blockDim.x) {"));
  ck_assert_ptr_nonnull(strstr(text, "  __syncthreads();\n"));
  ck_assert_ptr_nonnull(strstr(text, "#pragma unroll\n"));
  ck_assert_ptr_nonnull(strstr(text, "for (int t3 = threadIdx.x; t3 < 1; t3 += blockDim.x) {"));
  const char *source =
      arena_printf(&ctx.arena, "%s\n%s", cg_cuda_prelude(&ctx, false, false, false), text);
  test_nvrtc(source, "sm_90");

  char why[512];
  if (!emu_available(why, sizeof why)) return;
  RtArg args[2] = {{.kind = RT_ARG_PTR, .ref = in}, {.kind = RT_ARG_PTR, .ref = out}};
  RtKernel kern = {.name = "block_sum", .uses_barriers = 1, .static_shared_bytes = N * 4};
  RtStep step = {.kind = RT_STEP_LAUNCH,
                 .label = "block_sum %0",
                 .launch = {.grid = {1, 1, 1}, .block = {64, 1, 1}, .n_args = 2, .args = args}};
  RtParam params[2] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = N * 4},
                       {.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = 4}};
  RtContract contract = {.grid = {1, 1, 1}, .block = {64, 1, 1}, .n_params = 2, .params = params};
  RtTensorDesc ind = {.name = "x", .rank = 1, .dims = {N}, .nbytes = N * 4, .where = in};
  RtTensorDesc outd = {.name = "y", .rank = 0, .nbytes = 4, .where = out};
  RtPlan plan = one_launch(source, &kern, &contract, &step, 1, &ind, &outd);
  float xs[N], got = 0, want = 0;
  for (int i = 0; i < N; i++) xs[i] = (float)(i % 7) - 3.0f, want += xs[i];
  DlrtModel *m;
  ck_assert_msg(dlrt_open(&plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_set_input(m, 0, xs, sizeof xs) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_get_output(m, 0, &got, sizeof got) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_float_eq(got, want);
  dlrt_close(m);
}
END_TEST

/* The tensor-core statements (docs/tensorcores.md) on their own: one
 * warp copies a 16x16 f16 A and an 8x16 B (a row per column) into
 * dynamic shared memory by cp.async, loads fragments by ldmatrix, runs
 * one mma and stores D as float2 chunks.  Printed, compiled by NVRTC,
 * and run on emu against a plain product (small integers: exact). */
/* Division of an index by a positive constant is unsigned (a shift and
 * a mask for a power of 2) only where the index is provably >= 0: a
 * loop variable, a let of sums and products of such, not a difference,
 * not a variable set again later. */
START_TEST(nonneg_index_division) {
  Kernel *k = cg_kernel_new(&ctx, NULL, "div", NULL);
  KBuf *o = cg_kglobal(k, "o", TY_I32, 64, (RtRef){.space = RT_SPACE_OUTPUT});
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KBlock *w = &cg_kloop(k, &k->body, t, cg_kint(k, 64), KM_BLOCK_X)->body;
  KExpr *tv = cg_kv(k, t);
  KVar *a = cg_klet(k, w, "a", KT_INDEX, cg_kadd(k, cg_kmul(k, tv, cg_kint(k, 3)), cg_kint(k, 1)));
  KVar *d = cg_klet(k, w, "d", KT_INDEX, cg_kidx(k, KI_SUB, tv, cg_kint(k, 3)));
  KVar *s = cg_klet(k, w, "s", KT_INDEX, tv);
  cg_kset(k, w, s, cg_kv(k, d));
  KExpr *sum = cg_kadd(k, cg_kidx(k, KI_DIV, cg_kv(k, a), cg_kint(k, 8)), cg_kidx(k, KI_MOD, cg_kv(k, a), cg_kint(k, 6)));
  sum = cg_kadd(k, sum, cg_kidx(k, KI_DIV, cg_kv(k, d), cg_kint(k, 8)));
  sum = cg_kadd(k, sum, cg_kidx(k, KI_MOD, cg_kv(k, s), cg_kint(k, 4)));
  cg_kstore(k, w, o, tv, cg_kcast(k, sum, TY_I32));
  k->block[0] = 64;
  cg_kernel_finish(k);
  const char *text = cg_emit_kernel(&ctx, k, "div", false);
  char want[64];
  snprintf(want, sizeof want, "(%s >> 3)", a->name);
  ck_assert_msg(strstr(text, want), "no %s in\n%s", want, text);
  snprintf(want, sizeof want, "((int)((unsigned)%s %% 6U))", a->name);
  ck_assert_msg(strstr(text, want), "no %s in\n%s", want, text);
  snprintf(want, sizeof want, "(%s / 8)", d->name);
  ck_assert_msg(strstr(text, want), "no %s in\n%s", want, text);
  snprintf(want, sizeof want, "(%s %% 4)", s->name);
  ck_assert_msg(strstr(text, want), "no %s in\n%s", want, text);
  test_nvrtc(text, "sm_90");
}
END_TEST

/* Kernels merged into one launch keep their names apart: the second
 * part's get "p1_", and more underscores where the first part has a
 * name of that form already (its "p1_out" against the second's "out"). */
START_TEST(merged_parts_keep_names_apart) {
  Kernel *parts[2];
  for (int i = 0; i < 2; i++) {
    Kernel *k = parts[i] = cg_kernel_new(&ctx, NULL, i ? "second" : "first", NULL);
    KBuf *o = cg_kglobal(k, i ? "out" : "p1_out", TY_F32, 64, (RtRef){.space = RT_SPACE_OUTPUT, .index = (uint32_t)i});
    KVar *t = cg_kvar(k, "t", KT_INDEX);
    KBlock *w = &cg_kloop(k, &k->body, t, cg_kint(k, 64), KM_BLOCK_X)->body;
    cg_kstore(k, w, o, cg_kv(k, t), cg_kimm(k, (double)i, TY_F32));
    k->block[0] = 64;
    cg_kernel_finish(k);
  }
  Kernel *m = cg_kernel_merge(parts[0], parts[1]);
  ck_assert_ptr_nonnull(m);
  const char *text = cg_emit_kernel(&ctx, m, "merged", false);
  ck_assert_msg(strstr(text, "float *__restrict__ p1_out") && strstr(text, "float *__restrict__ p1__out"), "%s", text);
  test_nvrtc(text, "sm_90");
}
END_TEST

START_TEST(tensor_core_statements) {
  Kernel *k = cg_kernel_new(&ctx, NULL, "mma16x8", NULL);
  RtRef ra = {.space = RT_SPACE_INPUT, .index = 0}, rb = {.space = RT_SPACE_INPUT, .index = 1};
  RtRef rd = {.space = RT_SPACE_OUTPUT};
  KBuf *a = cg_kglobal(k, "a", TY_F16, 256, ra), *b = cg_kglobal(k, "b", TY_F16, 128, rb);
  KBuf *d = cg_kglobal(k, "d", TY_F32, 128, rd);
  KBuf *as = cg_kdynshared(k, "As", TY_F16, 256, 0), *bs = cg_kdynshared(k, "Bs", TY_F16, 128, 512);
  KBuf *acc = cg_klocal(k, "acc", TY_F32, 4, KSP_REGISTER);
  KBuf *af = cg_kfrag(k, "af", 4), *bf = cg_kfrag(k, "bf", 2);
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KBlock *w = &cg_kloop(k, &k->body, t, cg_kint(k, 32), KM_BLOCK_X)->body;
  KExpr *tv = cg_kv(k, t), *sixteen = cg_kint(k, 16), *eight = cg_kint(k, 8);
  /* chunk t of A and of B: row t / 2, elements (t % 2) * 8 .. + 7 */
  KExpr *at = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_DIV, tv, cg_kint(k, 2)), sixteen),
                      cg_kmul(k, cg_kidx(k, KI_MOD, tv, cg_kint(k, 2)), eight));
  cg_kcp_async(k, w, 16, as, at, a, at, cg_kint(k, 16));
  KStmt *half = cg_kif(k, w, cg_kcmp(k, KC_LT, tv, sixteen));
  cg_kcp_async(k, &half->body, 16, bs, at, b, at, cg_kint(k, 16));
  cg_kcp_commit(k, w);
  cg_kcp_wait(k, w, 0);
  cg_kbarrier(k, w);
  KVar *z = cg_kvar(k, "z", KT_INDEX);
  cg_kstore(k, &cg_kloop(k, w, z, cg_kint(k, 4), KM_UNROLL)->body, acc, cg_kv(k, z), cg_kimm(k, 0, TY_F32));
  cg_kldmatrix(k, w, af, cg_kint(k, 0), 4, false, as,
               cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_MOD, tv, sixteen), sixteen),
                       cg_kmul(k, cg_kidx(k, KI_DIV, tv, sixteen), eight)));
  KExpr *brow = cg_kidx(k, KI_MOD, tv, eight), *bchunk = cg_kidx(k, KI_MOD, cg_kidx(k, KI_DIV, tv, eight), cg_kint(k, 2));
  cg_kldmatrix(k, w, bf, cg_kint(k, 0), 2, false, bs, cg_kadd(k, cg_kmul(k, brow, sixteen), cg_kmul(k, bchunk, eight)));
  cg_kmma(k, w, KTC_F16, acc, cg_kint(k, 0), af, cg_kint(k, 0), bf, cg_kint(k, 0));
  /* D rows t / 4 and t / 4 + 8, columns 2 (t % 4) and the next */
  KExpr *d0 = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_DIV, tv, cg_kint(k, 4)), eight),
                      cg_kmul(k, cg_kidx(k, KI_MOD, tv, cg_kint(k, 4)), cg_kint(k, 2)));
  for (int h = 0; h < 2; h++) {
    KExpr *pair[2] = {cg_kload(k, acc, cg_kint(k, 2 * h)), cg_kload(k, acc, cg_kint(k, 2 * h + 1))};
    cg_kchunk(k, w, d, cg_kadd(k, d0, cg_kint(k, 64 * h)), pair, 2);
  }
  k->block[0] = 32;
  cg_kernel_finish(k);
  ck_assert(k->uses_tc && k->uses_barriers);
  ck_assert_uint_eq(k->dynamic_shared_bytes, 768);
  const char *text = cg_emit_kernel(&ctx, k, "mma16x8", true);
  ck_assert_ptr_nonnull(strstr(text, "  extern __shared__ __align__(16) unsigned char dl_smem[];\n"
                                     "  __half *As0 = (__half *)(dl_smem + 0);\n"
                                     "  __half *Bs1 = (__half *)(dl_smem + 512);\n"
                                     "  float acc2[4];\n  unsigned af3[4];\n  unsigned bf4[2];\n"));
  /* a thread index divided by a power of 2 shifts and masks */
  ck_assert_ptr_nonnull(strstr(text, "dl_cp_async16(&As0[(((t5 >> 1) * 16) + ((t5 & 1) * 8))], "
                                     "&a[(((t5 >> 1) * 16) + ((t5 & 1) * 8))], (unsigned)16);"));
  ck_assert_ptr_nonnull(strstr(text, "dl_cp_async_commit();\n"));
  ck_assert_ptr_nonnull(strstr(text, "dl_cp_async_wait<0>();\n"));
  ck_assert_ptr_nonnull(strstr(text, "dl_ldmatrix_x4(&af3[0], &As0["));
  ck_assert_ptr_nonnull(strstr(text, "dl_ldmatrix_x2(&bf4[0], &Bs1["));
  ck_assert_ptr_nonnull(strstr(text, "dl_mma_f16(&acc2[0], &af3[0], &bf4[0], &acc2[0]);"));
  ck_assert_ptr_nonnull(strstr(text, "*(float2 *)&d[(("));
  ck_assert_ptr_nonnull(strstr(text, "= make_float2(acc2[2], acc2[3]);"));
  const char *source = arena_printf(&ctx.arena, "%s\n%s", cg_cuda_prelude(&ctx, true, false, true), text);
  test_nvrtc(source, "sm_90");
  /* tf32 rounding of a fragment, and a swizzle's XOR, as printed */
  Kernel *k2 = cg_kernel_new(&ctx, NULL, "tf32", NULL);
  KBuf *f2 = cg_kfrag(k2, "f", 1), *s2 = cg_kdynshared(k2, "s", TY_F32, 8, 0);
  cg_ktf32(k2, &k2->body, f2, cg_kint(k2, 0));
  cg_kstore(k2, &k2->body, s2, cg_kidx(k2, KI_XOR, cg_kint(k2, 5), cg_kidx(k2, KI_MOD, cg_kint(k2, 7), cg_kint(k2, 4))),
            cg_kimm(k2, 1, TY_F32));
  KVar *x2 = cg_kvar(k2, "x", KT_INDEX);
  cg_kstore(k2, &k2->body, s2, cg_kidx(k2, KI_XOR, cg_kv(k2, x2), cg_kint(k2, 3)), cg_kimm(k2, 2, TY_F32));
  cg_kernel_finish(k2);
  const char *t2 = cg_emit_kernel(&ctx, k2, "tf32", false);
  ck_assert_ptr_nonnull(strstr(t2, "  f0[0] = dl_tf32(__uint_as_float(f0[0]));\n"));
  ck_assert_ptr_nonnull(strstr(t2, "  s1[6] = 1.0f;\n")); /* 5 ^ 3, folded */
  ck_assert_ptr_nonnull(strstr(t2, "  s1[(x2 ^ 3)] = 2.0f;\n"));

  char why[512];
  if (!emu_available(why, sizeof why)) return;
  RtArg args[3] = {{.kind = RT_ARG_PTR, .ref = ra}, {.kind = RT_ARG_PTR, .ref = rb}, {.kind = RT_ARG_PTR, .ref = rd}};
  RtKernel kern = {.name = "mma16x8", .uses_barriers = 1};
  RtStep step = {.kind = RT_STEP_LAUNCH,
                 .label = "mma16x8 %0",
                 .launch = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 768, .n_args = 3,
                            .args = args}};
  RtParam params[3] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = 512},
                       {.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = 256},
                       {.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = 512}};
  RtContract contract = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 768, .n_params = 3,
                         .params = params};
  RtTensorDesc ins[2] = {{.name = "a", .dtype = RT_DT_F16, .rank = 2, .dims = {16, 16}, .nbytes = 512, .where = ra},
                         {.name = "b", .dtype = RT_DT_F16, .rank = 2, .dims = {8, 16}, .nbytes = 256, .where = rb}};
  RtTensorDesc outd = {.name = "d", .rank = 2, .dims = {16, 8}, .nbytes = 512, .where = rd};
  RtPlan plan = one_launch(source, &kern, &contract, &step, 2, ins, &outd);
  uint16_t ah[256], bh[128];
  float av[256], bv[128], got[128];
  for (int i = 0; i < 256; i++) av[i] = (float)((i * 7) % 9 - 4), ah[i] = ir_f16_from_double(av[i]);
  for (int i = 0; i < 128; i++) bv[i] = (float)((i * 5) % 7 - 3), bh[i] = ir_f16_from_double(bv[i]);
  DlrtModel *m;
  ck_assert_msg(dlrt_open(&plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_set_input(m, 0, ah, sizeof ah) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_set_input(m, 1, bh, sizeof bh) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_get_output(m, 0, got, sizeof got) == DLRT_OK, "%s", dlrt_error(m));
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 8; j++) {
      float want = 0;
      for (int q = 0; q < 16; q++) want += av[i * 16 + q] * bv[j * 16 + q];
      ck_assert_msg(got[i * 8 + j] == want, "D[%d][%d] = %g, want %g", i, j, got[i * 8 + j], want);
    }
  dlrt_close(m);
}
END_TEST

/* The two pieces FlashAttention-2's softmax needs (docs/attention.md):
 * a shuffle within a quad of lanes and the pack of f32 registers into an
 * f16x2 or bf16x2 fragment register.  One warp builds the two m16n8
 * accumulators of a 16x16 tile in registers, value 1 + i 2^-(m+1) at
 * element i (m: the dtype's fraction bits, so every odd i is a tie that
 * nearest-even rounds down or up by its neighbour's parity), packs them
 * as the A fragment of an mma as FlashAttention-2 does (a0 a1 <- c0 c1
 * of the first block, a2 a3 <- its c2 c3, a4 .. a7 the same of the
 * second), B built by packs too (column n: 1 at row n, 2 at row n + 8),
 * so D[r][n] = A[r][n] + 2 A[r][n + 8] exactly.  Then each lane's max
 * over its quad by two shuffles (xor 1, 2 within 4 lanes).  Printed,
 * compiled by NVRTC, and run on emu against the host's rounding. */
static void shuffle_and_pack_in(KTcKind tc) {
  bool bf = tc == KTC_BF16;
  int frac = bf ? 7 : 10;
  Kernel *k = cg_kernel_new(&ctx, NULL, "pack", NULL);
  RtRef rd = {.space = RT_SPACE_OUTPUT};
  KBuf *d = cg_kglobal(k, "d", TY_F32, 288, rd);
  KBuf *c = cg_klocal(k, "c", TY_F32, 8, KSP_REGISTER), *acc = cg_klocal(k, "acc", TY_F32, 4, KSP_REGISTER);
  KBuf *af = cg_kfrag(k, "af", 4), *bfr = cg_kfrag(k, "bf", 2);
  KVar *t = cg_kvar(k, "t", KT_INDEX), *e = cg_kvar(k, "e", KT_INDEX);
  KBlock *w = &cg_kloop(k, &k->body, t, cg_kint(k, 32), KM_BLOCK_X)->body;
  KExpr *tv = cg_kv(k, t), *ev = cg_kv(k, e);
  KExpr *g = cg_kidx(k, KI_DIV, tv, cg_kint(k, 4)), *tq = cg_kidx(k, KI_MOD, tv, cg_kint(k, 4));
  /* c[4 nb + e]: row g + 8 (e / 2), column 8 nb + 2 tq + e % 2 */
  KBlock *eb = &cg_kloop(k, w, e, cg_kint(k, 8), KM_UNROLL)->body;
  KExpr *row = cg_kadd(k, g, cg_kmul(k, cg_kidx(k, KI_DIV, cg_kidx(k, KI_MOD, ev, cg_kint(k, 4)), cg_kint(k, 2)), cg_kint(k, 8)));
  KExpr *col = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_DIV, ev, cg_kint(k, 4)), cg_kint(k, 8)),
                       cg_kadd(k, cg_kmul(k, tq, cg_kint(k, 2)), cg_kidx(k, KI_MOD, ev, cg_kint(k, 2))));
  KExpr *i = cg_kcast(k, cg_kadd(k, cg_kmul(k, row, cg_kint(k, 16)), col), TY_F32);
  cg_kstore(k, eb, c, ev, cg_kop2(k, OP_ADD, cg_kimm(k, 1, TY_F32), cg_kop2(k, OP_MUL, i, cg_kimm(k, ldexp(1, -(frac + 1)), TY_F32))));
  for (int r = 0; r < 4; r++)
    cg_kpack(k, w, tc, af, cg_kint(k, r), cg_kload(k, c, cg_kint(k, 2 * r)), cg_kload(k, c, cg_kint(k, 2 * r + 1)));
  /* B[kk][n], n = g: kk = 2 tq (+ 1) in b[0], 2 tq + 8 (+ 1) in b[1] */
  for (int r = 0; r < 2; r++) {
    KExpr *v[2];
    for (int h = 0; h < 2; h++) {
      KExpr *kk = cg_kadd(k, cg_kmul(k, tq, cg_kint(k, 2)), cg_kint(k, 8 * r + h));
      v[h] = cg_ksel(k, cg_kcmp(k, KC_EQ, kk, g), cg_kimm(k, 1, TY_F32),
                     cg_ksel(k, cg_kcmp(k, KC_EQ, kk, cg_kadd(k, g, cg_kint(k, 8))), cg_kimm(k, 2, TY_F32),
                             cg_kimm(k, 0, TY_F32)));
    }
    cg_kpack(k, w, tc, bfr, cg_kint(k, r), v[0], v[1]);
  }
  for (int z = 0; z < 4; z++) cg_kstore(k, w, acc, cg_kint(k, z), cg_kimm(k, 0, TY_F32));
  cg_kmma(k, w, tc, acc, cg_kint(k, 0), af, cg_kint(k, 0), bfr, cg_kint(k, 0));
  for (int z = 0; z < 4; z++) {
    KExpr *at = cg_kadd(k, cg_kmul(k, cg_kadd(k, g, cg_kint(k, 8 * (z / 2))), cg_kint(k, 8)),
                        cg_kadd(k, cg_kmul(k, tq, cg_kint(k, 2)), cg_kint(k, z % 2)));
    cg_kstore(k, w, d, at, cg_kload(k, acc, cg_kint(k, z)));
  }
  /* quad max of (t * 37) % 11 */
  KExpr *x = cg_kv(k, cg_klet(k, w, "x", TY_F32, cg_kcast(k, cg_kidx(k, KI_MOD, cg_kmul(k, tv, cg_kint(k, 37)), cg_kint(k, 11)), TY_F32)));
  for (int sh = 1; sh <= 2; sh *= 2) {
    KExpr *o = cg_kv(k, cg_klet(k, w, "o", TY_F32, cg_kshfl_xor(k, x, sh, 4)));
    x = cg_kv(k, cg_klet(k, w, "x", TY_F32, cg_kop2(k, OP_MAXIMUM, x, o)));
  }
  cg_kstore(k, w, d, cg_kadd(k, tv, cg_kint(k, 128)), x);
  /* and the A fragment's bits themselves (a swap of the halves in both
   * A and B would leave D as it is) */
  for (int r = 0; r < 4; r++) {
    KExpr *bits = cg_kop1(k, OP_BITCAST, cg_kload(k, af, cg_kint(k, r)));
    bits->dtype = TY_F32;
    cg_kstore(k, w, d, cg_kadd(k, cg_kmul(k, tv, cg_kint(k, 4)), cg_kint(k, 160 + r)), bits);
  }
  k->block[0] = 32;
  cg_kernel_finish(k);
  ck_assert(k->uses_tc && k->uses_barriers);
  const char *text = cg_emit_kernel(&ctx, k, "pack", true);
  ck_assert_ptr_nonnull(strstr(text, bf ? "af2[0] = dl_pack_bf16x2(c0[0], c0[1]);\n" : "af2[0] = dl_pack_f16x2(c0[0], c0[1]);\n"));
  ck_assert_ptr_nonnull(strstr(text, "= __shfl_xor_sync(0xffffffffu, x"));
  ck_assert_ptr_nonnull(strstr(text, ", 2, 4);\n"));
  const char *source = arena_printf(&ctx.arena, "%s\n%s", cg_cuda_prelude(&ctx, !bf, bf, true), text);
  test_nvrtc(source, "sm_90");

  char why[512];
  if (!emu_available(why, sizeof why)) return;
  RtArg args[1] = {{.kind = RT_ARG_PTR, .ref = rd}};
  RtKernel kern = {.name = "pack", .uses_barriers = 1};
  RtStep step = {.kind = RT_STEP_LAUNCH,
                 .label = "pack %0",
                 .launch = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .n_args = 1, .args = args}};
  RtParam params[1] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = 1152}};
  RtContract contract = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .n_params = 1, .params = params};
  RtTensorDesc outd = {.name = "d", .rank = 1, .dims = {288}, .nbytes = 1152, .where = rd};
  RtPlan plan = one_launch(source, &kern, &contract, &step, 0, NULL, &outd);
  float got[288];
  DlrtModel *m;
  ck_assert_msg(dlrt_open(&plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_msg(dlrt_get_output(m, 0, got, sizeof got) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) {
      double a[2];
      for (int h = 0; h < 2; h++) {
        double v = 1 + (r * 16 + n + 8 * h) * ldexp(1, -(frac + 1));
        a[h] = bf ? ir_bf16_to_double(ir_bf16_from_double(v)) : ir_f16_to_double(ir_f16_from_double(v));
      }
      float want = (float)(a[0] + 2 * a[1]);
      ck_assert_msg(got[r * 8 + n] == want, "%s D[%d][%d] = %.9g, want %.9g", bf ? "bf16" : "f16", r, n,
                    got[r * 8 + n], want);
    }
  for (int l = 0; l < 32; l++) {
    int want = 0;
    for (int q = l & ~3; q < (l & ~3) + 4; q++) want = (q * 37) % 11 > want ? (q * 37) % 11 : want;
    ck_assert_msg(got[128 + l] == (float)want, "lane %d: quad max %g, want %d", l, got[128 + l], want);
    /* register r: c[2r] low, c[2r + 1] high; c[e] at row l / 4 + 8 (e % 4 / 2), column 8 (e / 4) + 2 (l % 4) + e % 2 */
    for (int r = 0; r < 4; r++) {
      uint32_t want_bits = 0, bits;
      for (int h = 0; h < 2; h++) {
        int el = 2 * r + h, at = (l / 4 + 8 * (el % 4 / 2)) * 16 + 8 * (el / 4) + 2 * (l % 4) + el % 2;
        double v = 1 + at * ldexp(1, -(frac + 1));
        want_bits |= (uint32_t)(bf ? ir_bf16_from_double(v) : ir_f16_from_double(v)) << (16 * h);
      }
      memcpy(&bits, &got[160 + 4 * l + r], 4);
      ck_assert_msg(bits == want_bits, "lane %d a[%d] = 0x%08x, want 0x%08x", l, r, bits, want_bits);
    }
  }
}

START_TEST(shuffle_and_pack) {
  shuffle_and_pack_in(KTC_F16);
  shuffle_and_pack_in(KTC_BF16);
}
END_TEST

/* A plan's kernels dealt into code parts (CgOptions.code_part_bytes
 * small here: 48 KiB by default): each kernel's text guarded by its part
 * in the source, so that NVRTC compiles each part alone (its kernels in
 * its cubin, no other's) and the whole text all of them; the emu runs
 * the whole text as before. */
START_TEST(code_parts) {
  Job j = compile_text_opts("graph parts {\n"
                            "  %x = input {name=\"x\"} : f32[4, 64]\n"
                            "  %0 = exp %x : f32[4, 64]\n"
                            "  %1 = reduce_sum %0 {axes=[1]} : f32[4]\n"
                            "  %2 = tanh %1 : f32[4]\n"
                            "  %3 = reduce_max %x {axes=[0]} : f32[64]\n"
                            "  return %2 as \"t\", %3 as \"m\"\n"
                            "}\n",
                            (CgOptions){.code_part_bytes = 1});
  const RtPlan *p = j.r.plan;
  ck_assert_uint_ge(p->n_kernels, 3);
  ck_assert_uint_eq(p->n_code_parts, p->n_kernels);
  bool used[RT_MAX_CODE_PARTS] = {0};
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    ck_assert_uint_lt(p->kernels[i].part, p->n_code_parts);
    ck_assert(!used[p->kernels[i].part]);
    used[p->kernels[i].part] = true;
    /* the guard before the kernel's definition names its part */
    char def[256];
    snprintf(def, sizeof def, "__global__ void %s(", p->kernels[i].name);
    const char *at = strstr(p->source, def), *guard = NULL;
    ck_assert_ptr_nonnull(at);
    for (const char *g = strstr(p->source, "#if !defined(DL_PART) || DL_PART == "); g && g < at;
         g = strstr(g + 1, "#if !defined(DL_PART) || DL_PART == "))
      guard = g;
    ck_assert_ptr_nonnull(guard);
    ck_assert_uint_eq(strtoul(guard + strlen("#if !defined(DL_PART) || DL_PART == "), NULL, 10), p->kernels[i].part);
  }
  test_nvrtc(p->source, "sm_90");
#ifdef HAVE_CUDA
  for (uint32_t q = 0; q < p->n_code_parts; q++) {
    void *bin;
    size_t size;
    char err[4096];
    ck_assert_msg(rt_nvrtc_compile_part(p, "sm_90", (int)q, &bin, &size, err, sizeof err) == 0, "%s", err);
    for (uint32_t i = 0; i < p->n_kernels; i++) {
      const char *name = p->kernels[i].name;
      bool in = memmem(bin, size, name, strlen(name) + 1) != NULL;
      ck_assert_msg(in == (p->kernels[i].part == q), "kernel %s (part %" PRIu32 ") %s part %" PRIu32 "'s cubin",
                    name, p->kernels[i].part, in ? "in" : "not in", q);
    }
    free(bin);
  }
#endif
  check_numbers(&j, -2, 2);
}
END_TEST

START_TEST(plan_text) {
  Job j = compile_text(
      "graph printed {\n"
      "  %x = input {name=\"x\"} : f32[2, 4]\n"
      "  %w = param {name=\"fc.weight\"} : f32[3, 4]\n"
      "  %b = param {name=\"fc.bias\"} : f32[3]\n"
      "  %0 = linear %x, %w, %b : f32[2, 3]\n"
      "  %1 = relu %0 : f32[2, 3]\n"
      "  return %1 as \"y\"\n"
      "}\n");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cg_print_plan(f, j.r.plan);
  fclose(f);
  ck_assert_str_eq(
      text,
      "plan \"printed\" version 16\n"
      "weights 512 bytes, arena 256 bytes\n"
      "  input 0 \"x\" f32[2, 4] 32 bytes at in0+0\n"
      "  output 0 \"y\" f32[2, 3] 24 bytes at out0+0\n"
      "  weight 0 \"fc.weight\" f32[3, 4] 48 bytes at weights+0\n"
      "  weight 1 \"fc.bias\" f32[3] 12 bytes at weights+256\n"
      "  kernel 0 relu_4\n"
      "steps 2\n"
      "    0  gemm f32 m=2 n=3 k=4 trans=NT ld=4,4,3 a=in0+0 b=weights+0 c=arena+0 epilogue=bias "
      "bias=weights+256  ; linear %3\n"
      "    1  launch relu_4 grid=1,1,1 block=32,1,1 (arena+0, out0+0, i32 6)  ; relu %4\n");
  free(text);
}
END_TEST

START_TEST(unsupported_dtype_is_reported) {
  Job j = {.text =
               "graph half {\n"
               "  %x = input {name=\"x\"} : f16[2, 3, 4]\n"
               "  %wi = param {name=\"rnn.weight_ih_l0\"} : f16[6, 4]\n"
               "  %wh = param {name=\"rnn.weight_hh_l0\"} : f16[6, 2]\n"
               "  %y, %h = gru %x, %wi, %wh {hidden=2, bias=0} : f16[2, 3, 2], f16[1, 2, 2]\n"
               "  return %y as \"y\"\n"
               "}\n"};
  ck_assert_int_eq(ctx_guard(&ctx, compile_job, &j), 0);
  ck_assert(!j.ok);
  ck_assert_ptr_nonnull(strstr(diag_text(&ctx), "codegen does not support gru on f16 yet"));
}
END_TEST

static Suite *codegen_suite(void) {
  Suite *s = suite_create("codegen");
  TCase *tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, unary_ops);
  tcase_add_test(tc, unary_ops_positive);
  tcase_add_test(tc, binary_broadcast);
  tcase_add_test(tc, integer_elementwise_and_cast);
  tcase_add_test(tc, reductions);
  tcase_add_test(tc, normalizations);
  tcase_add_test(tc, long_rows_in_f32);
  tcase_add_test(tc, matmul_batching);
  tcase_add_test(tc, linear_with_and_without_bias);
  tcase_add_test(tc, conv2d_im2col);
  tcase_add_test(tc, conv2d_grouped);
  tcase_add_test(tc, conv_transpose2d_direct);
  tcase_add_test(tc, resize_modes);
  tcase_add_test(tc, comparisons);
  tcase_add_test(tc, pooling);
  tcase_add_test(tc, data_movement);
  tcase_add_test(tc, gather_clamps_and_wraps);
  tcase_add_test(tc, reshape_aliases_and_copies);
  tcase_add_test(tc, recurrent_lstm);
  tcase_add_test(tc, recurrent_gru);
  tcase_add_loop_test(tc, recurrent_step_kernel, 0, 2 * (int)(sizeof rnn_cases / sizeof rnn_cases[0]));
  tcase_add_test(tc, outputs_that_live_elsewhere);
  tcase_add_test(tc, const_operand_of_gemm_is_materialized);
  tcase_add_test(tc, identical_kernels_are_shared);
  suite_add_tcase(s, tc);
  TCase *tt = tcase_create("text");
  tcase_add_checked_fixture(tt, setup, teardown);
  /* NVRTC compiles here, seconds each on a loaded machine (Check's
   * default is 4 s) */
  tcase_set_timeout(tt, 120);
  tcase_add_test(tt, kernel_text_is_readable);
  tcase_add_test(tt, huge_tensors_index_in_64_bits);
  tcase_add_test(tt, shared_memory_and_barriers);
  tcase_add_test(tt, tensor_core_statements);
  tcase_add_test(tt, nonneg_index_division);
  tcase_add_test(tt, merged_parts_keep_names_apart);
  tcase_add_test(tt, shuffle_and_pack);
  tcase_add_test(tt, plan_text);
  tcase_add_test(tt, code_parts);
  tcase_add_test(tt, unsupported_dtype_is_reported);
  suite_add_tcase(s, tt);
  return s;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  /* The emu device's kernel cache goes to a scratch directory, and it
   * finds its header in the source tree. */
  char cache[] = "/tmp/dlcc-test-codegen-XXXXXX";
  bool own_cache = !getenv("DLCC_CACHE_DIR") && mkdtemp(cache);
  if (own_cache) setenv("DLCC_CACHE_DIR", cache, 1);
  const char *top = getenv("top_srcdir");
  char header[4096];
  if (top && !getenv("DLCC_EMU_HEADER")) {
    snprintf(header, sizeof header, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", header, 1);
  }
  char why[512];
  if (!emu_available(why, sizeof why))
    fprintf(stderr, "note: no numeric checks against ir_eval, the emu device is missing: %s\n",
            why);
  SRunner *sr = srunner_create(codegen_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (own_cache) nftw(cache, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed ? 1 : 0;
}
