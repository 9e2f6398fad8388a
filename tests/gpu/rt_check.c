/* libdlcrt on a device, without the compiler: takes a backend and a mode,
 * runs hand-built plans that check what the example models do not reach
 * (yet), prints one line per check and exits 1 when one fails:
 *   gemm   cuBLASLt in f32, f16 and bf16, every transpose, batch strides
 *          (0 broadcasts one operand), beta, sizes that pick tensor-core
 *          and split-K kernels, the bias, relu+bias and (f16, bf16)
 *          gelu+bias epilogues codegen uses; against rt_emu_gemm (double
 *          accumulation).  f32 must meet 1e-5, which TF32 would not.  int8
 *          (i8 x i8 -> i32, cuBLAS's CUBLAS_COMPUTE_32I) must match
 *          exactly.
 *   args   kernel arguments of 4 and 8 bytes mixed, and more than 48 KiB
 *          of dynamic shared memory (the opt-in).
 *   fault  (cuda only) a kernel that faults: the model must report a
 *          broken context, and a model opened after closing it must run.
 * Usage: rt_check [BACKEND [MODE]]: BACKEND auto (default), cuda or emu;
 * MODE all (default: gemm and args), gemm, args or fault.  On emu (make
 * check) it checks the harness itself. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcrt.h"
#include "runtime/emu/dlcc_emu.h"
#include "runtime/runtime.h"

static int failures;

static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%-4s ", ok ? "ok" : "FAIL");
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
  fflush(stdout);
  failures += !ok;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { /* [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1.0p-52 - 1.0;
}

static void store(uint32_t dt, void *p, size_t i, double v) {
  if (dt == RT_DT_F16) ((uint16_t *)p)[i] = dlcc_emu_f64_to_f16(v);
  else if (dt == RT_DT_BF16) ((uint16_t *)p)[i] = dlcc_emu_f64_to_bf16(v);
  else ((float *)p)[i] = (float)v;
}

static double load(uint32_t dt, const void *p, size_t i) {
  if (dt == RT_DT_F16) return dlcc_emu_f16_to_f32(((const uint16_t *)p)[i]);
  if (dt == RT_DT_BF16) return dlcc_emu_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

static RtTensorDesc flat(const char *name, uint32_t dt, size_t n, uint32_t space, uint32_t index) {
  RtTensorDesc t = {.name = name, .dtype = dt, .rank = 1, .dims = {(int64_t)n}, .where = {space, index, 0}};
  t.nbytes = n * (uint64_t)rt_dtype_bytes(dt);
  return t;
}

/* Opens plan on backend; the message on failure. */
static DlrtModel *open_plan(const RtPlan *plan, const char *backend, const char *what) {
  DlrtModel *m = NULL;
  if (dlrt_open(plan, backend, &m) != DLRT_OK) {
    report(false, "%s: %s", what, dlrt_error(m));
    dlrt_close(m);
    return NULL;
  }
  return m;
}

/* ---- kernels: argument sizes, dynamic shared memory ---- */

static const char *kernel_src =
    "extern \"C\" __global__ void args_mix(float *out, int a, long long b, float c, int d, long long e) {\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0) {\n"
    "    out[0] = (float)a;\n"
    "    out[1] = (float)(b >> 32);\n"
    "    out[2] = (float)(b & 0xffff);\n"
    "    out[3] = c;\n"
    "    out[4] = (float)d;\n"
    "    out[5] = (float)(e - 3000000000LL);\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void big_shared(float *out, int n) {\n"
    "  extern __shared__ float s[];\n"
    "  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;\n"
    "  __syncthreads();\n"
    "  float acc = 0.0f;\n"
    "  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += s[n - 1 - i];\n"
    "  out[threadIdx.x] = acc;\n"
    "}\n"
    "extern \"C\" __global__ void fault(float *out) { ((float *)16)[threadIdx.x] = out[0]; }\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void args_mix__emu(void **a) {\n"
    "  args_mix(*(float **)a[0], *(int *)a[1], *(long long *)a[2], *(float *)a[3], *(int *)a[4],\n"
    "           *(long long *)a[5]);\n"
    "}\n"
    "extern \"C\" void big_shared__emu(void **a) { big_shared(*(float **)a[0], *(int *)a[1]); }\n"
    "extern \"C\" void fault__emu(void **a) { (void)a; }\n"
    "#endif\n";

enum { SHARED_FLOATS = 20000, THREADS = 256 }; /* 80000 bytes: above 48 KiB */

static const RtKernel kernels[] = {{.name = "args_mix"}, {.name = "big_shared", .uses_barriers = 1}, {.name = "fault"}};

/* ---- gemm ---- */

typedef struct Case {
  uint32_t dt, ta, tb;
  int64_t m, n, k, batch;
  int bcast; /* 1: stride_a 0, 2: stride_b 0 */
  float beta;
  uint32_t epilogue; /* RtEpilogue, its bias from input 3 */
} Case;

/* C (initial values from input 2, copied in) = epilogue(alpha op(A) op(B)
 * + beta C). */
static void gemm_case(const char *backend, const Case *c) {
  static const char *const names[] = {"f32", "f16", "bf16"};
  static const char *const epilogues[] = {"", " +bias", " relu(+bias)", " gelu(+bias)"};
  RtGemm g = {.dtype = c->dt, .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
              .batch = c->batch, .alpha = 1.0f, .beta = c->beta, .epilogue = c->epilogue};
  int64_t ra = c->ta ? c->k : c->m, rb = c->tb ? c->n : c->k;
  g.lda = (c->ta ? c->m : c->k) + 3;
  g.ldb = (c->tb ? c->k : c->n) + 1;
  g.ldc = c->n + 2;
  g.stride_a = c->bcast == 1 ? 0 : ra * g.lda + 5;
  g.stride_b = c->bcast == 2 ? 0 : rb * g.ldb;
  g.stride_c = c->m * g.ldc + 7;
  size_t na = (size_t)((c->batch - 1) * g.stride_a + ra * g.lda);
  size_t nb = (size_t)((c->batch - 1) * g.stride_b + rb * g.ldb);
  size_t nc = (size_t)((c->batch - 1) * g.stride_c + c->m * g.ldc);
  size_t es = (size_t)rt_dtype_bytes(c->dt);
  size_t nbias = (size_t)c->n;
  void *a = malloc(na * es), *b = malloc(nb * es), *c0 = malloc(nc * es), *want = malloc(nc * es),
       *got = malloc(nc * es), *bias = malloc(nbias * es);
  for (size_t i = 0; i < na; i++) store(c->dt, a, i, uniform());
  for (size_t i = 0; i < nb; i++) store(c->dt, b, i, uniform());
  for (size_t i = 0; i < nc; i++) store(c->dt, c0, i, uniform());
  for (size_t i = 0; i < nbias; i++) store(c->dt, bias, i, uniform());
  memcpy(want, c0, nc * es);
  char err[512];
  char what[200];
  snprintf(what, sizeof what, "gemm %s %s%s m=%lld n=%lld k=%lld batch=%lld%s beta=%g%s", names[c->dt],
           c->ta ? "T" : "N", c->tb ? "T" : "N", (long long)c->m, (long long)c->n, (long long)c->k,
           (long long)c->batch, c->bcast == 1 ? " (A broadcast)" : c->bcast == 2 ? " (B broadcast)" : "",
           (double)c->beta, epilogues[c->epilogue]);
  if (rt_emu_gemm(&g, a, b, want, c->epilogue ? bias : NULL, err, sizeof err)) {
    report(false, "%s: emu: %s", what, err);
    goto done;
  }
  RtTensorDesc in[4] = {flat("a", c->dt, na, RT_SPACE_INPUT, 0), flat("b", c->dt, nb, RT_SPACE_INPUT, 1),
                        flat("c0", c->dt, nc, RT_SPACE_INPUT, 2), flat("bias", c->dt, nbias, RT_SPACE_INPUT, 3)};
  RtTensorDesc out[1] = {flat("c", c->dt, nc, RT_SPACE_OUTPUT, 0)};
  g.a = (RtRef){RT_SPACE_INPUT, 0, 0};
  g.b = (RtRef){RT_SPACE_INPUT, 1, 0};
  g.c = (RtRef){RT_SPACE_OUTPUT, 0, 0};
  if (c->epilogue) g.bias = (RtRef){RT_SPACE_INPUT, 3, 0};
  RtStep steps[2] = {
      {.kind = RT_STEP_COPY, .label = "c = c0", .copy = {.dst = g.c, .src = {RT_SPACE_INPUT, 2, 0}, .nbytes = nc * es}},
      {.kind = RT_STEP_GEMM, .label = "gemm", .gemm = g}};
  /* The kernels ride along unused: emu wants source to load. */
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_steps = 2, .steps = steps, .n_inputs = 4, .inputs = in,
                 .n_outputs = 1, .outputs = out};
  DlrtModel *m = open_plan(&plan, backend, what);
  if (!m) goto done;
  if (dlrt_set_input(m, 0, a, na * es) || dlrt_set_input(m, 1, b, nb * es) || dlrt_set_input(m, 2, c0, nc * es) ||
      dlrt_set_input(m, 3, bias, nbias * es) || dlrt_run(m) || dlrt_get_output(m, 0, got, nc * es)) {
    report(false, "%s: %s", what, dlrt_error(m));
    dlrt_close(m);
    goto done;
  }
  dlrt_close(m);
  /* Error relative to the largest |C|, as tests/gpu/check.sh measures models. */
  double worst = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < nc; i++) scale = fmax(scale, fabs(load(c->dt, want, i)));
  for (size_t i = 0; i < nc; i++) {
    double e = fabs(load(c->dt, got, i) - load(c->dt, want, i));
    if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e, at = i;
  }
  double rel = worst / (scale > 0 ? scale : 1), tol = c->dt == RT_DT_F32 ? 1e-5 : c->dt == RT_DT_F16 ? 5e-3 : 2e-2;
  report(rel <= tol, "%s: max rel err %.3g (tolerance %.0e) at %zu", what, rel, tol, at);
done:
  free(a), free(b), free(c0), free(want), free(got), free(bias);
}

/* int8: i8 A and B, i32 C, exact.  Leading dimensions and batch strides
 * are multiples of 4 and the operands 4-byte aligned, as codegen gives
 * cuBLAS's int8 path (it lowers other shapes to its own kernel). */
static void gemm_i8_case(const char *backend, uint32_t ta, uint32_t tb, int64_t m, int64_t n, int64_t k,
                         int64_t batch) {
  RtGemm g = {.dtype = RT_DT_I8, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .batch = batch,
              .alpha = 1.0f, .beta = 0.0f};
  int64_t ra = ta ? k : m, rb = tb ? n : k;
  g.lda = ((ta ? m : k) + 3) / 4 * 4 + 4;
  g.ldb = ((tb ? k : n) + 3) / 4 * 4;
  g.ldc = n + 1;
  g.stride_a = ra * g.lda;
  g.stride_b = rb * g.ldb + 8;
  g.stride_c = m * g.ldc;
  size_t na = (size_t)((batch - 1) * g.stride_a + ra * g.lda), nb = (size_t)((batch - 1) * g.stride_b + rb * g.ldb);
  size_t nc = (size_t)((batch - 1) * g.stride_c + m * g.ldc);
  int8_t *a = malloc(na), *b = malloc(nb);
  int32_t *want = calloc(nc, 4), *got = calloc(nc, 4);
  for (size_t i = 0; i < na; i++) a[i] = (int8_t)lround(uniform() * 127);
  for (size_t i = 0; i < nb; i++) b[i] = (int8_t)lround(uniform() * 127);
  char err[512], what[160];
  snprintf(what, sizeof what, "gemm i8->i32 %s%s m=%lld n=%lld k=%lld batch=%lld", ta ? "T" : "N", tb ? "T" : "N",
           (long long)m, (long long)n, (long long)k, (long long)batch);
  if (rt_emu_gemm(&g, a, b, want, NULL, err, sizeof err)) {
    report(false, "%s: emu: %s", what, err);
    goto done;
  }
  RtTensorDesc in[2] = {flat("a", RT_DT_I8, na, RT_SPACE_INPUT, 0), flat("b", RT_DT_I8, nb, RT_SPACE_INPUT, 1)};
  RtTensorDesc out[1] = {flat("c", RT_DT_I32, nc, RT_SPACE_OUTPUT, 0)};
  g.a = (RtRef){RT_SPACE_INPUT, 0, 0};
  g.b = (RtRef){RT_SPACE_INPUT, 1, 0};
  g.c = (RtRef){RT_SPACE_OUTPUT, 0, 0};
  RtStep steps[1] = {{.kind = RT_STEP_GEMM, .label = "gemm i8", .gemm = g}};
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_steps = 1, .steps = steps, .n_inputs = 2, .inputs = in,
                 .n_outputs = 1, .outputs = out};
  DlrtModel *mod = open_plan(&plan, backend, what);
  if (!mod) goto done;
  /* C's padding (ldc > n) is never written: compare the matrix only. */
  if (dlrt_set_input(mod, 0, a, na) || dlrt_set_input(mod, 1, b, nb) || dlrt_run(mod) ||
      dlrt_get_output(mod, 0, got, nc * 4)) {
    report(false, "%s: %s", what, dlrt_error(mod));
    dlrt_close(mod);
    goto done;
  }
  dlrt_close(mod);
  int64_t wrong = 0, first = -1;
  for (int64_t bi = 0; bi < batch; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t at = bi * g.stride_c + i * g.ldc + j;
        if (got[at] != want[at]) wrong++, first = first < 0 ? at : first;
      }
  report(wrong == 0, "%s: %lld elements differ (first at %lld)", what, (long long)wrong, (long long)first);
done:
  free(a), free(b), free(want), free(got);
}

static void gemm_checks(const char *backend, bool big) {
  for (uint32_t t = 0; t < 4; t++) {
    gemm_i8_case(backend, t & 1, t >> 1, 5, 7, 3, 1);
    gemm_i8_case(backend, t & 1, t >> 1, 33, 17, 40, 3);
  }
  if (big) {
    gemm_i8_case(backend, 0, 0, 64, 12544, 148, 1); /* a conv's GEMM */
    gemm_i8_case(backend, 0, 1, 8, 512, 784, 1);    /* a linear layer */
    gemm_i8_case(backend, 0, 1, 64, 64, 65536, 1);  /* long sums: int32 stays exact */
  }
  for (uint32_t dt = RT_DT_F32; dt <= RT_DT_BF16; dt++) {
    for (uint32_t t = 0; t < 4; t++) {
      Case c = {dt, t & 1, t >> 1, 5, 7, 3, 1, 0, 0.0f, 0};
      gemm_case(backend, &c);
      c = (Case){dt, t & 1, t >> 1, 33, 17, 40, 3, 1 + (int)(t & 1), 0.5f, 0};
      gemm_case(backend, &c);
    }
    /* The epilogues codegen asks for (a linear layer: B transposed, no
     * batch; gelu in f16 and bf16 only), and one batched with beta. */
    for (uint32_t e = RT_EPILOGUE_BIAS; e < RT_EPILOGUE_COUNT; e++) {
      if (e == RT_EPILOGUE_GELU_BIAS && dt == RT_DT_F32) continue;
      Case c = {dt, 0, 1, 33, 17, 40, 1, 0, 0.0f, e};
      gemm_case(backend, &c);
      c = (Case){dt, 0, 0, 9, 24, 16, 3, 1, 0.5f, e};
      gemm_case(backend, &c);
      if (big) {
        c = (Case){dt, 0, 1, 128, 2048, 512, 1, 0, 0.0f, e};
        gemm_case(backend, &c);
      }
    }
    if (!big) continue;
    /* Shapes the models use (a conv as a GEMM, attention, a linear
     * layer), and big ones where cuBLAS picks tensor-core and split-K
     * kernels; k = 4096 makes TF32 visible (about 1e-3). */
    Case shapes[] = {{dt, 0, 0, 64, 12544, 147, 1, 0, 0.0f, 0},  {dt, 0, 0, 16, 16, 64, 16, 0, 0.0f, 0},
                     {dt, 0, 1, 8, 512, 784, 1, 0, 0.0f, 0},     {dt, 0, 1, 128, 2048, 512, 1, 0, 1.0f, 0},
                     {dt, 0, 0, 256, 256, 4096, 1, 0, 0.0f, 0},  {dt, 1, 1, 768, 768, 768, 2, 2, 0.0f, 0},
                     {dt, 0, 1, 64, 64, 65536, 1, 0, 0.0f, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) gemm_case(backend, &shapes[i]);
  }
}

static void kernel_checks(const char *backend) {
  RtArg mix[6] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, 0, 0}},
                  {.kind = RT_ARG_I32, .i = -7},
                  {.kind = RT_ARG_I64, .i = ((int64_t)5 << 32) | 1234},
                  {.kind = RT_ARG_F32, .f = 2.5f},
                  {.kind = RT_ARG_I32, .i = 123456},
                  {.kind = RT_ARG_I64, .i = 3000000042LL}};
  RtArg sh[2] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, 1, 0}}, {.kind = RT_ARG_I32, .i = SHARED_FLOATS}};
  RtStep steps[2] = {
      {.kind = RT_STEP_LAUNCH, .label = "args_mix",
       .launch = {.kernel = 0, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_args = 6, .args = mix}},
      {.kind = RT_STEP_LAUNCH, .label = "big_shared",
       .launch = {.kernel = 1, .grid = {1, 1, 1}, .block = {THREADS, 1, 1},
                  .dynamic_shared_bytes = SHARED_FLOATS * 4, .n_args = 2, .args = sh}}};
  RtTensorDesc out[2] = {flat("mix", RT_DT_F32, 6, RT_SPACE_OUTPUT, 0),
                         flat("shared", RT_DT_F32, THREADS, RT_SPACE_OUTPUT, 1)};
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_steps = 2, .steps = steps, .n_outputs = 2, .outputs = out};
  DlrtModel *m = open_plan(&plan, backend, "kernels");
  if (!m) return;
  float got[6], sums[THREADS];
  if (dlrt_run(m) || dlrt_get_output(m, 0, got, sizeof got) || dlrt_get_output(m, 1, sums, sizeof sums)) {
    report(false, "kernels: %s", dlrt_error(m));
    dlrt_close(m);
    return;
  }
  dlrt_close(m);
  const float want[6] = {-7, 5, 1234, 2.5f, 123456, 42};
  bool ok = true;
  for (int i = 0; i < 6; i++) ok &= got[i] == want[i];
  report(ok, "kernel arguments int, long long, float mixed: got %g %g %g %g %g %g, want -7 5 1234 2.5 123456 42",
         got[0], got[1], got[2], got[3], got[4], got[5]);
  ok = true;
  int bad = -1;
  for (int t = 0; t < THREADS && ok; t++) {
    double w = 0;
    for (int i = t; i < SHARED_FLOATS; i += THREADS) w += SHARED_FLOATS - 1 - i;
    if (sums[t] != (float)w) ok = false, bad = t;
  }
  report(ok, "%d bytes of dynamic shared memory (opt-in above 48 KiB)%s", SHARED_FLOATS * 4,
         ok ? "" : ": wrong sum");
  if (bad >= 0) printf("     thread %d\n", bad);
}

/* A fault breaks the context; closing the model resets it, so the next
 * model runs.  A GEMM step first, so that cuBLASLt (cudart) holds the
 * primary context too. */
static void fault_check(const char *backend) {
  RtArg fa[1] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, 0, 0}}};
  RtGemm g = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1, .alpha = 1,
              .a = {RT_SPACE_OUTPUT, 0, 0}, .b = {RT_SPACE_OUTPUT, 0, 0}, .c = {RT_SPACE_OUTPUT, 1, 0}};
  RtStep steps[2] = {{.kind = RT_STEP_GEMM, .label = "gemm", .gemm = g},
                     {.kind = RT_STEP_LAUNCH, .label = "fault",
                      .launch = {.kernel = 2, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_args = 1, .args = fa}}};
  RtTensorDesc out[2] = {flat("x", RT_DT_F32, 4, RT_SPACE_OUTPUT, 0), flat("y", RT_DT_F32, 4, RT_SPACE_OUTPUT, 1)};
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "fault", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_steps = 2, .steps = steps, .n_outputs = 2, .outputs = out};
  DlrtModel *m = open_plan(&plan, backend, "fault");
  if (!m) return;
  DlrtStatus s = dlrt_run(m);
  report(s == DLRT_E_BROKEN && strstr(dlrt_error(m), "unusable"), "a faulting kernel: %s: %s", dlrt_status_name(s),
         dlrt_error(m));
  float y[4];
  s = dlrt_get_output(m, 1, y, sizeof y);
  report(s == DLRT_E_BROKEN, "the broken model refuses further calls: %s", dlrt_status_name(s));
  dlrt_close(m);
  steps[1].launch.kernel = 0; /* args_mix writes into x: a harmless kernel */
  RtArg mix[6] = {fa[0], {.kind = RT_ARG_I32}, {.kind = RT_ARG_I64}, {.kind = RT_ARG_F32}, {.kind = RT_ARG_I32},
                  {.kind = RT_ARG_I64}};
  steps[1].launch.args = mix;
  steps[1].launch.n_args = 6;
  m = open_plan(&plan, backend, "a model after the fault");
  if (!m) return;
  s = dlrt_run(m);
  report(s == DLRT_OK, "a model opened after closing the broken one runs: %s %s", dlrt_status_name(s), dlrt_error(m));
  dlrt_close(m);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "auto";
  const char *mode = argc > 2 ? argv[2] : "all";
  bool all = !strcmp(mode, "all");
  if (!all && strcmp(mode, "gemm") && strcmp(mode, "args") && strcmp(mode, "fault")) {
    fprintf(stderr, "usage: rt_check [auto|cuda|emu [all|gemm|args|fault]]\n");
    return 2;
  }
  /* The backend auto picks, for the size of the GEMM cases. */
  DlrtModel *probe = NULL;
  RtPlan empty = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check",
                  .source = kernel_src, .n_kernels = 3, .kernels = kernels};
  if (dlrt_open(&empty, backend, &probe) != DLRT_OK) {
    printf("FAIL backend %s: %s\n", backend, dlrt_error(probe));
    dlrt_close(probe);
    return 1;
  }
  bool cuda = !strcmp(dlrt_backend(probe), "cuda");
  printf("backend %s\n", dlrt_backend(probe));
  dlrt_close(probe);
  if (all || !strcmp(mode, "gemm")) gemm_checks(backend, cuda);
  if (all || !strcmp(mode, "args")) kernel_checks(backend);
  if (!strcmp(mode, "fault")) {
    if (cuda) fault_check(backend);
    else printf("skip fault: needs the cuda backend\n");
  }
  printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
