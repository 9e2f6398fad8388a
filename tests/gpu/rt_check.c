/* libdlcrt on a device, without the compiler: takes a backend and a mode,
 * runs hand-built plans that check what the example models do not reach
 * (yet), prints one line per check and exits 1 when one fails:
 *   gemm   cuBLASLt in f32, f16 and bf16, every transpose, batch strides
 *          (0 broadcasts one operand), beta, sizes that pick tensor-core
 *          and split-K kernels, the bias, relu+bias and (f16, bf16)
 *          gelu+bias epilogues codegen uses, and the bias-gradient one
 *          (bgrad); against rt_emu_gemm (double accumulation).  f32 must
 *          meet 1e-5, which TF32 would not.  int8
 *          (i8 x i8 -> i32, cuBLAS's CUBLAS_COMPUTE_32I) must match
 *          exactly.
 *   args   kernel arguments of 4 and 8 bytes mixed, and more than 48 KiB
 *          of dynamic shared memory (the opt-in).
 *   tc     the tensor-core instructions (tests/mma_kernels.h: mma in f16,
 *          bf16, s8, tf32, cvt.rna.tf32, ldmatrix, cp.async, and the
 *          attention softmax's cvt.rn.{f16,bf16}x2 packs and shfl.xor) on inputs
 *          whose sums are exact: every output byte must equal the emu's,
 *          whose fragment tables come from the PTX ISA.
 *   fault  (cuda only) a kernel that faults: the model must report a
 *          broken context, and a model opened after closing it must run.
 * Usage: rt_check [BACKEND [MODE]]: BACKEND auto (default), cuda or emu;
 * MODE all (default: gemm, args and tc), gemm, args, tc or fault.  On emu
 * (make check) it checks the harness itself. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "dlcrt.h"
#include "runtime/emu/dlcc_emu.h"
#include "runtime/runtime.h"
#include "tests/mma_kernels.h"

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

/* What each kernel touches, as codegen would record it: args_mix's
 * scalars are only stored, so any value is safe; fault's wild write is
 * not its pointer's, which no plan check can see. */
static const RtParam mix_params[] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = 24},
                                     {.kind = RT_ARG_I32, .lo = INT32_MIN, .hi = INT32_MAX},
                                     {.kind = RT_ARG_I64, .lo = INT64_MIN, .hi = INT64_MAX},
                                     {.kind = RT_ARG_F32},
                                     {.kind = RT_ARG_I32, .lo = INT32_MIN, .hi = INT32_MAX},
                                     {.kind = RT_ARG_I64, .lo = INT64_MIN, .hi = INT64_MAX}};
static const RtParam shared_params[] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = THREADS * 4},
                                        {.kind = RT_ARG_I32, .lo = SHARED_FLOATS, .hi = SHARED_FLOATS}};
static const RtParam fault_params[] = {{.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = 4}};
static const RtContract contracts[] = {
    {.kernel = 0, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_params = 6, .params = mix_params},
    {.kernel = 1, .grid = {1, 1, 1}, .block = {THREADS, 1, 1}, .dynamic_shared_bytes = SHARED_FLOATS * 4,
     .n_params = 2, .params = shared_params},
    {.kernel = 2, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_params = 1, .params = fault_params}};

/* ---- gemm ---- */

typedef struct Case {
  uint32_t dt, ta, tb;
  int64_t m, n, k, batch;
  int bcast; /* 1: stride_a 0, 2: stride_b 0 */
  float beta;
  uint32_t epilogue; /* RtEpilogue, its bias from input 3 */
  int64_t stride_bias; /* 0: one bias for every batch */
  int apart; /* C_in is input 4, not C: a residual beside D */
} Case;

/* C (initial values from input 2, copied in) = epilogue(alpha op(A) op(B)
 * + beta C_in), C_in C itself or (apart) input 4. */
static void gemm_case(const char *backend, const Case *c) {
  static const char *const names[] = {"f32", "f16", "bf16"};
  static const char *const epilogues[] = {"", " +bias", " relu(+bias)", " gelu(+bias)", " bgrad"};
  RtGemm g = {.dtype = c->dt, .trans_a = c->ta, .trans_b = c->tb, .m = c->m, .n = c->n, .k = c->k,
              .batch = c->batch, .alpha = 1.0f, .beta = c->beta, .epilogue = c->epilogue,
              .stride_bias = c->stride_bias};
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
  bool bgrad = c->epilogue == RT_EPILOGUE_BGRAD; /* bias: m sums of op(A)'s rows, output 1 */
  size_t nbias = bgrad ? (size_t)c->m : (size_t)((c->batch - 1) * c->stride_bias + c->n);
  void *a = malloc(na * es), *b = malloc(nb * es), *c0 = malloc(nc * es), *want = malloc(nc * es),
       *got = malloc(nc * es), *bias = malloc(nbias * es), *got_bias = malloc(nbias * es), *cin = malloc(nc * es);
  for (size_t i = 0; i < na; i++) store(c->dt, a, i, uniform());
  for (size_t i = 0; i < nb; i++) store(c->dt, b, i, uniform());
  for (size_t i = 0; i < nc; i++) store(c->dt, c0, i, uniform());
  for (size_t i = 0; i < nbias; i++) store(c->dt, bias, i, uniform());
  for (size_t i = 0; i < nc; i++) store(c->dt, cin, i, uniform());
  memcpy(want, c0, nc * es);
  char err[512];
  char what[200];
  snprintf(what, sizeof what, "gemm %s %s%s m=%lld n=%lld k=%lld batch=%lld%s beta=%g%s stride_bias=%lld",
           names[c->dt], c->ta ? "T" : "N", c->tb ? "T" : "N", (long long)c->m, (long long)c->n, (long long)c->k,
           (long long)c->batch, c->bcast == 1 ? " (A broadcast)" : c->bcast == 2 ? " (B broadcast)" : "",
           (double)c->beta, epilogues[c->epilogue], (long long)c->stride_bias);
  if (c->apart) snprintf(what + strlen(what), sizeof what - strlen(what), " + C apart");
  if (rt_emu_gemm(&g, a, b, want, c->beta == 0.0f ? NULL : c->apart ? cin : want, c->epilogue ? bias : NULL, err,
                  sizeof err)) {
    report(false, "%s: emu: %s", what, err);
    goto done;
  }
  RtTensorDesc in[5] = {flat("a", c->dt, na, RT_SPACE_INPUT, 0), flat("b", c->dt, nb, RT_SPACE_INPUT, 1),
                        flat("c0", c->dt, nc, RT_SPACE_INPUT, 2), flat("bias", c->dt, nbias, RT_SPACE_INPUT, 3),
                        flat("cin", c->dt, nc, RT_SPACE_INPUT, 4)};
  RtTensorDesc out[2] = {flat("c", c->dt, nc, RT_SPACE_OUTPUT, 0), flat("bias", c->dt, nbias, RT_SPACE_OUTPUT, 1)};
  g.a = (RtRef){RT_SPACE_INPUT, 0, 0};
  g.b = (RtRef){RT_SPACE_INPUT, 1, 0};
  g.c = (RtRef){RT_SPACE_OUTPUT, 0, 0};
  if (c->beta != 0.0f) g.c_in = c->apart ? (RtRef){RT_SPACE_INPUT, 4, 0} : g.c;
  if (c->epilogue) g.bias = (RtRef){bgrad ? RT_SPACE_OUTPUT : RT_SPACE_INPUT, bgrad ? 1 : 3, 0};
  RtStep steps[2] = {
      {.kind = RT_STEP_COPY, .label = "c = c0", .copy = {.dst = g.c, .src = {RT_SPACE_INPUT, 2, 0}, .nbytes = nc * es}},
      {.kind = RT_STEP_GEMM, .label = "gemm", .gemm = g}};
  /* The kernels ride along unused: emu wants source to load. */
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_contracts = 3, .contracts = contracts,
                 .n_steps = 2, .steps = steps, .n_inputs = 5, .inputs = in,
                 .n_outputs = bgrad ? 2 : 1, .outputs = out};
  DlrtModel *m = open_plan(&plan, backend, what);
  if (!m) goto done;
  if (dlrt_set_input(m, 0, a, na * es) || dlrt_set_input(m, 1, b, nb * es) || dlrt_set_input(m, 2, c0, nc * es) ||
      dlrt_set_input(m, 3, bias, nbias * es) || dlrt_set_input(m, 4, cin, nc * es) || dlrt_run(m) || dlrt_get_output(m, 0, got, nc * es) ||
      (bgrad && dlrt_get_output(m, 1, got_bias, nbias * es))) {
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
  /* bgrad's sums, relative to the largest: past C's nc at the report */
  double bias_scale = 0;
  for (size_t i = 0; bgrad && i < nbias; i++) bias_scale = fmax(bias_scale, fabs(load(c->dt, bias, i)));
  for (size_t i = 0; bgrad && i < nbias; i++) {
    double e = fabs(load(c->dt, got_bias, i) - load(c->dt, bias, i)) * (scale > 0 ? scale : 1) /
               (bias_scale > 0 ? bias_scale : 1);
    if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e, at = nc + i;
  }
  double rel = worst / (scale > 0 ? scale : 1), tol = c->dt == RT_DT_F32 ? 1e-5 : c->dt == RT_DT_F16 ? 5e-3 : 2e-2;
  report(rel <= tol, "%s: max rel err %.3g (tolerance %.0e) at %zu", what, rel, tol, at);
done:
  free(a), free(b), free(c0), free(want), free(got), free(bias), free(got_bias), free(cin);
}

/* int8: i8 A and B, i32 C, exact.  Leading dimensions and batch strides
 * are multiples of 4, the operands 4-byte aligned and B transposed, as
 * codegen gives cuBLAS's int8 path (it lowers other shapes to its own
 * kernel); the plan refuses the other transposes (runtime/plan.c). */
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
  if (rt_emu_gemm(&g, a, b, want, NULL, NULL, err, sizeof err)) {
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
                 .n_kernels = 3, .kernels = kernels, .n_contracts = 3, .contracts = contracts,
                 .n_steps = 1, .steps = steps, .n_inputs = 2, .inputs = in,
                 .n_outputs = 1, .outputs = out};
  if (ta || !tb) {
    DlrtModel *refused = NULL;
    DlrtStatus s = dlrt_open(&plan, backend, &refused);
    report(s != DLRT_OK && strstr(dlrt_error(refused), "an i8 gemm takes A untransposed and B transposed"),
           "%s: refused by the plan's rule: %s", what, s == DLRT_OK ? "opened" : dlrt_error(refused));
    dlrt_close(refused);
    goto done;
  }
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
    gemm_i8_case(backend, 0, 1, 64, 12544, 148, 1); /* a conv's GEMM shape */
    gemm_i8_case(backend, 0, 1, 8, 512, 784, 1);    /* a linear layer */
    gemm_i8_case(backend, 0, 1, 64, 64, 65536, 1);  /* long sums: int32 stays exact */
  }
  for (uint32_t dt = RT_DT_F32; dt <= RT_DT_BF16; dt++) {
    for (uint32_t t = 0; t < 4; t++) {
      Case c = {dt, t & 1, t >> 1, 5, 7, 3, 1, 0, 0.0f, 0, 0, 0};
      gemm_case(backend, &c);
      c = (Case){dt, t & 1, t >> 1, 33, 17, 40, 3, 1 + (int)(t & 1), 0.5f, 0, 0, 0};
      gemm_case(backend, &c);
    }
    /* The epilogues codegen asks for (a linear layer: B transposed, no
     * batch; gelu in f16 and bf16 only), and one batched with beta. */
    /* A linear's weight and bias gradients, dy^T x and dy's column sums
     * (A = dy transposed, batch 1, beta 0), as codegen asks for them. */
    Case bg = {dt, 1, 0, 10, 512, 8, 1, 0, 0.0f, RT_EPILOGUE_BGRAD, 0, 0};
    gemm_case(backend, &bg);
    bg = (Case){dt, 1, 0, 120, 400, 64, 1, 0, 0.0f, RT_EPILOGUE_BGRAD, 0, 0};
    gemm_case(backend, &bg);
    for (uint32_t e = RT_EPILOGUE_BIAS; e < RT_EPILOGUE_BGRAD; e++) {
      if (e == RT_EPILOGUE_GELU_BIAS && dt == RT_DT_F32) continue;
      Case c = {dt, 0, 1, 33, 17, 40, 1, 0, 0.0f, e, 0, 0};
      gemm_case(backend, &c);
      c = (Case){dt, 0, 0, 9, 24, 16, 3, 1, 0.5f, e, 0, 0};
      gemm_case(backend, &c);
      /* A residual added by the GEMM (codegen's residual + linear) */
      if (e == RT_EPILOGUE_BIAS) {
        c = (Case){dt, 0, 1, 33, 17, 40, 1, 0, 1.0f, e, 0, 1};
        gemm_case(backend, &c);
        c = (Case){dt, 0, 0, 9, 24, 16, 3, 1, 1.0f, RT_EPILOGUE_NONE, 0, 1};
        gemm_case(backend, &c);
      }
      /* Linears of one input as one GEMM (codegen/gemm_batch.c): A
       * shared, one bias per batch (cuBLASLt's BIAS_BATCH_STRIDE), at
       * the stride codegen pads to 256 bytes and at an odd one. */
      c = (Case){dt, 0, 1, 32, 64, 48, 3, 1, 0.0f, e, dt == RT_DT_F32 ? 64 : 128, 0};
      gemm_case(backend, &c);
      c = (Case){dt, 0, 1, 20, 24, 40, 4, 1, 0.0f, e, 27, 0};
      gemm_case(backend, &c);
      if (big) {
        c = (Case){dt, 0, 1, 128, 2048, 512, 1, 0, 0.0f, e, 0, 0};
        gemm_case(backend, &c);
      }
    }
    if (!big) continue;
    /* Shapes the models use (a conv as a GEMM, attention, a linear
     * layer), and big ones where cuBLAS picks tensor-core and split-K
     * kernels; k = 4096 makes TF32 visible (about 1e-3). */
    Case shapes[] = {{dt, 0, 0, 64, 12544, 147, 1, 0, 0.0f, 0, 0, 0},  {dt, 0, 0, 16, 16, 64, 16, 0, 0.0f, 0, 0, 0},
                     {dt, 0, 1, 8, 512, 784, 1, 0, 0.0f, 0, 0, 0},     {dt, 0, 1, 128, 2048, 512, 1, 0, 1.0f, 0, 0, 0},
                     {dt, 0, 1, 128, 512, 2048, 1, 0, 1.0f, RT_EPILOGUE_BIAS, 0, 1},
                     {dt, 0, 0, 256, 256, 4096, 1, 0, 0.0f, 0, 0, 0},  {dt, 1, 1, 768, 768, 768, 2, 2, 0.0f, 0, 0, 0},
                     {dt, 0, 1, 64, 64, 65536, 1, 0, 0.0f, 0, 0, 0}};
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
       .launch = {.kernel = 1, .contract = 1, .grid = {1, 1, 1}, .block = {THREADS, 1, 1},
                  .dynamic_shared_bytes = SHARED_FLOATS * 4, .n_args = 2, .args = sh}}};
  RtTensorDesc out[2] = {flat("mix", RT_DT_F32, 6, RT_SPACE_OUTPUT, 0),
                         flat("shared", RT_DT_F32, THREADS, RT_SPACE_OUTPUT, 1)};
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_contracts = 3, .contracts = contracts,
                 .n_steps = 2, .steps = steps, .n_outputs = 2, .outputs = out};
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

/* ---- tensor cores: the GPU against the emu ---- */

/* tests/mma_kernels.h's kernels on inputs whose every sum is exact (small
 * multiples of 1/8), so that any accumulation order gives the same bits:
 * the backend's outputs must equal the emu's byte for byte.  That is the
 * emu's fragment tables (written from the PTX ISA) against the hardware. */
enum { TC_PIPE_K = 48, TC_PIPE_KVALID = 44, TC_LONG = 56, TC_SHORT = 24, TC_X = 4096 };

typedef struct TcData {
  uint16_t a16[16 * 32], b16[32 * 8], abf[16 * 32], bbf[32 * 8];
  int8_t a8[16 * 64], b8[64 * 8];
  int32_t c8[128];
  float c32[128], af[16 * 16], bf[16 * 8], x[TC_X], c16[256];
  uint16_t amk[16 * TC_LONG], akm[TC_PIPE_K * TC_SHORT], bkn[TC_PIPE_K * TC_SHORT], bnk[16 * TC_LONG], m64[64];
  uint32_t groups[96];
  uint8_t bytes[896];
  /* wgmma: A (64 rows) and B (256 rows) of 128 bytes for each kind, C */
  uint8_t wa[4][64 * 128], wb[4][256 * 128];
  float wc[64 * 256];
  int32_t wci[64 * 256];
} TcData;

/* The wgmma cases (tests/mma_kernels.h's wgmma_gemm): kind (0 f16, 1
 * bf16, 2 tf32, 3 s8), N, bytes of K, swizzle, groups in flight,
 * scale-d 0 first. */
static const int tc_wgmma[][6] = {
    {0, 64, 64, 64, 2, 0}, {1, 128, 128, 128, 1, 0}, {2, 32, 64, 32, 2, 1},
    {3, 256, 128, 0, 2, 0}, {0, 16, 128, 0, 1, 1},   {1, 256, 64, 64, 2, 0},
};
enum { TC_WGMMA = sizeof tc_wgmma / sizeof *tc_wgmma };

static double eighths(void) { return floor(uniform() * 16.5) / 8.0; } /* -2.125 .. 2 in steps of 1/8 */
static uint64_t bits64(void) {
  uniform();
  return rng;
}

static void tc_fill(TcData *d) {
  for (int i = 0; i < 16 * 32; i++) d->a16[i] = dlcc_emu_f64_to_f16(eighths()), d->abf[i] = dlcc_emu_f64_to_bf16(eighths());
  for (int i = 0; i < 32 * 8; i++) d->b16[i] = dlcc_emu_f64_to_f16(eighths()), d->bbf[i] = dlcc_emu_f64_to_bf16(eighths());
  for (int i = 0; i < 16 * 64; i++) d->a8[i] = (int8_t)bits64();
  for (int i = 0; i < 64 * 8; i++) d->b8[i] = (int8_t)bits64();
  for (int i = 0; i < 128; i++) d->c8[i] = (int32_t)(bits64() >> 20), d->c32[i] = (float)eighths();
  for (int i = 0; i < 16 * 16; i++) d->af[i] = (float)eighths();
  for (int i = 0; i < 16 * 8; i++) d->bf[i] = (float)eighths();
  for (int i = 0; i < 256; i++) d->c16[i] = (float)eighths();
  /* cvt.rna.tf32.f32 on every kind of float but NaN (whose bits PTX leaves open) */
  for (int i = 0; i < TC_X; i++) {
    uint32_t u = (uint32_t)(bits64() >> 32);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) u = 0x3f801000u; /* a tie */
    memcpy(&d->x[i], &u, 4);
  }
  /* The pipeline's A and B in both orientations, NaN past k = 44. */
  for (int i = 0; i < 16 * TC_LONG; i++) d->amk[i] = d->bnk[i] = 0x7e00;
  for (int i = 0; i < TC_PIPE_K * TC_SHORT; i++) d->akm[i] = d->bkn[i] = 0x7e00;
  for (int m = 0; m < 16; m++)
    for (int k = 0; k < TC_PIPE_KVALID; k++) {
      d->amk[m * TC_LONG + k] = d->akm[k * TC_SHORT + m] = dlcc_emu_f64_to_f16(eighths());
      d->bnk[m * TC_LONG + k] = d->bkn[k * TC_SHORT + m] = dlcc_emu_f64_to_f16(eighths());
    }
  for (int i = 0; i < 64; i++) d->m64[i] = (uint16_t)(bits64() >> 24);
  for (int i = 0; i < 96; i++) d->groups[i] = (uint32_t)(bits64() >> 7);
  for (int i = 0; i < 896; i++) d->bytes[i] = (uint8_t)(bits64() >> 40 | 1);
  /* tf32 eighths with low bits below the cut, under half of its last
   * place, so truncation and rounding read the same value */
  for (int i = 0; i < 64 * 128 + 256 * 128; i++) {
    uint8_t *a = i < 64 * 128 ? &d->wa[0][i] : &d->wb[0][i - 64 * 128];
    size_t stride = i < 64 * 128 ? sizeof d->wa[0] : sizeof d->wb[0];
    a[3 * stride] = (uint8_t)((int)(bits64() % 17) - 8);
    if (i % 2 == 0) {
      uint16_t h = dlcc_emu_f64_to_f16(eighths()), b = dlcc_emu_f64_to_bf16(eighths());
      memcpy(a, &h, 2), memcpy(a + stride, &b, 2);
    }
    if (i % 4 == 0) {
      float f = (float)eighths();
      uint32_t u;
      memcpy(&u, &f, 4);
      u |= (uint32_t)(bits64() >> 52) & 0xfffu;
      memcpy(a + 2 * stride, &u, 4);
    }
  }
  for (int i = 0; i < 64 * 256; i++) d->wc[i] = (float)eighths(), d->wci[i] = (int32_t)(bits64() >> 44) - 500000;
}

#define TC_IN(i) {.kind = RT_ARG_PTR, .ref = {RT_SPACE_INPUT, i, 0}}
#define TC_OUT(i) {.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, i, 0}}
#define TC_I32(v) {.kind = RT_ARG_I32, .i = v}
#define TC_STEP(what, k, threads, blocks, list) \
  {.kind = RT_STEP_LAUNCH, .label = what, \
   .launch = {.kernel = k, .grid = {blocks, 1, 1}, .block = {threads, 1, 1}, \
              .n_args = sizeof list / sizeof *list, .args = list}}

enum { TC_OUTPUTS = 13 + TC_WGMMA };

/* Runs every case on backend; the outputs, concatenated, in out. */
static bool tc_run(const char *backend, const TcData *d, const char *source, uint8_t *out, const RtTensorDesc *outs) {
  const RtTensorDesc in[] = {
      flat("a16", RT_DT_F16, 16 * 32, RT_SPACE_INPUT, 0),   flat("b16", RT_DT_F16, 32 * 8, RT_SPACE_INPUT, 1),
      flat("abf", RT_DT_BF16, 16 * 32, RT_SPACE_INPUT, 2),  flat("bbf", RT_DT_BF16, 32 * 8, RT_SPACE_INPUT, 3),
      flat("c32", RT_DT_F32, 128, RT_SPACE_INPUT, 4),       flat("a8", RT_DT_I8, 16 * 64, RT_SPACE_INPUT, 5),
      flat("b8", RT_DT_I8, 64 * 8, RT_SPACE_INPUT, 6),      flat("c8", RT_DT_I32, 128, RT_SPACE_INPUT, 7),
      flat("af", RT_DT_F32, 16 * 16, RT_SPACE_INPUT, 8),    flat("bf", RT_DT_F32, 16 * 8, RT_SPACE_INPUT, 9),
      flat("x", RT_DT_F32, TC_X, RT_SPACE_INPUT, 10),       flat("c16", RT_DT_F32, 256, RT_SPACE_INPUT, 11),
      flat("amk", RT_DT_F16, 16 * TC_LONG, RT_SPACE_INPUT, 12),
      flat("akm", RT_DT_F16, TC_PIPE_K * TC_SHORT, RT_SPACE_INPUT, 13),
      flat("bkn", RT_DT_F16, TC_PIPE_K * TC_SHORT, RT_SPACE_INPUT, 14),
      flat("bnk", RT_DT_F16, 16 * TC_LONG, RT_SPACE_INPUT, 15), flat("m64", RT_DT_F16, 64, RT_SPACE_INPUT, 16),
      flat("groups", RT_DT_I32, 96, RT_SPACE_INPUT, 17),    flat("bytes", RT_DT_U8, 896, RT_SPACE_INPUT, 18),
      flat("wa", RT_DT_U8, sizeof d->wa, RT_SPACE_INPUT, 19),  flat("wb", RT_DT_U8, sizeof d->wb, RT_SPACE_INPUT, 20),
      flat("wc", RT_DT_F32, 64 * 256, RT_SPACE_INPUT, 21),     flat("wci", RT_DT_I32, 64 * 256, RT_SPACE_INPUT, 22)};
  const void *host[] = {d->a16, d->b16, d->abf, d->bbf, d->c32, d->a8,  d->b8,  d->c8,     d->af,    d->bf,    d->x, d->c16,
                        d->amk, d->akm, d->bkn, d->bnk, d->m64, d->groups, d->bytes, d->wa, d->wb, d->wc, d->wci};
  RtArg f16[] = {TC_I32(0), TC_IN(0), TC_IN(1), TC_IN(4), TC_OUT(0), TC_I32(32), TC_I32(0)};
  RtArg bf16[] = {TC_I32(1), TC_IN(2), TC_IN(3), TC_IN(4), TC_OUT(1), TC_I32(32), TC_I32(0)};
  RtArg s8[] = {TC_IN(5), TC_IN(6), TC_IN(7), TC_OUT(2), TC_I32(64)};
  RtArg tf32[] = {TC_IN(8), TC_IN(9), TC_IN(4), TC_OUT(3), TC_I32(16)};
  RtArg cvt[] = {TC_IN(10), TC_OUT(4), TC_I32(TC_X)};
  RtArg pipe[4][10];
  for (int v = 0; v < 4; v++) {
    int a_km = v >> 1, b_kn = v & 1;
    RtArg p[10] = {TC_IN(a_km ? 13 : 12), TC_IN(b_kn ? 14 : 15), TC_IN(11), TC_OUT(5 + v), TC_I32(TC_PIPE_K),
                   TC_I32(TC_PIPE_KVALID), TC_I32(a_km ? TC_SHORT : TC_LONG), TC_I32(b_kn ? TC_SHORT : TC_LONG),
                   TC_I32(a_km), TC_I32(b_kn)};
    memcpy(pipe[v], p, sizeof p);
  }
  RtArg x1[] = {TC_IN(16), TC_OUT(9)};
  RtArg grp[] = {TC_IN(17), TC_OUT(10), TC_I32(0)};
  RtArg sz[] = {TC_IN(18), TC_OUT(11)};
  RtArg pk[] = {TC_IN(10), TC_OUT(12), TC_I32(TC_X)};
  /* wgmma: kind's A and B at its offset in wa and wb */
  RtArg wg[TC_WGMMA][11];
  for (int c = 0; c < TC_WGMMA; c++) {
    const int *w = tc_wgmma[c];
    RtArg a = TC_IN(19), b = TC_IN(20);
    a.ref.offset = (uint64_t)w[0] * sizeof d->wa[0], b.ref.offset = (uint64_t)w[0] * sizeof d->wb[0];
    RtArg p[11] = {TC_I32(w[0]), a, b, TC_IN(w[0] == 3 ? 22 : 21), TC_OUT(13 + c), TC_I32(w[1]),
                   TC_I32(w[2]), TC_I32(w[3]), TC_I32(w[4]), TC_I32(w[5]), TC_I32(0)};
    memcpy(wg[c], p, sizeof p);
  }
  RtStep steps[] = {TC_STEP("mma16816 f16", MK_16816, 32, 1, f16),   TC_STEP("mma16816 bf16", MK_16816, 32, 1, bf16),
                    TC_STEP("mma16832", MK_16832, 32, 1, s8),        TC_STEP("mma1688", MK_1688, 32, 1, tf32),
                    TC_STEP("tf32_bits", MK_TF32, 128, TC_X / 128, cvt), TC_STEP("pipe", MK_PIPE, 64, 1, pipe[0]),
                    TC_STEP("pipe", MK_PIPE, 64, 1, pipe[1]),        TC_STEP("pipe", MK_PIPE, 64, 1, pipe[2]),
                    TC_STEP("pipe", MK_PIPE, 64, 1, pipe[3]),        TC_STEP("ldsm_x1", MK_LDSM_X1, 32, 1, x1),
                    TC_STEP("cp_groups", MK_CP_GROUPS, 32, 1, grp),  TC_STEP("cp_sizes", MK_CP_SIZES, 32, 1, sz),
                    TC_STEP("pack_shfl", MK_PACK_SHFL, 128, TC_X / 2 / 128, pk),
                    TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[0]), TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[1]),
                    TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[2]), TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[3]),
                    TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[4]), TC_STEP("wgmma", MK_WGMMA, 128, 1, wg[5])};
  /* One contract per step, read off its arguments: each pointer may touch
   * its whole tensor (inputs read, outputs written), each size is itself. */
  enum { TC_STEPS = sizeof steps / sizeof *steps, TC_MAX_ARGS = 11 };
  RtContract tc_contracts[TC_STEPS];
  RtParam params[TC_STEPS][TC_MAX_ARGS];
  for (uint32_t s = 0; s < TC_STEPS; s++) {
    RtLaunch *l = &steps[s].launch;
    for (uint32_t a = 0; a < l->n_args; a++) {
      const RtArg *arg = &l->args[a];
      RtParam *q = &params[s][a];
      *q = (RtParam){.kind = arg->kind, .lo = arg->i, .hi = arg->i};
      if (arg->kind == RT_ARG_PTR) {
        bool written = arg->ref.space == RT_SPACE_OUTPUT;
        q->access = written ? RT_ACCESS_WRITE : RT_ACCESS_READ;
        q->nbytes = (written ? outs : in)[arg->ref.index].nbytes - arg->ref.offset;
      }
    }
    tc_contracts[s] = (RtContract){.kernel = l->kernel, .n_params = l->n_args, .params = params[s]};
    memcpy(tc_contracts[s].grid, l->grid, sizeof l->grid);
    memcpy(tc_contracts[s].block, l->block, sizeof l->block);
    l->contract = s;
  }
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "rt_check_tc", .source = source,
                 .n_kernels = MK_COUNT, .kernels = mma_kernels, .n_contracts = TC_STEPS, .contracts = tc_contracts,
                 .n_steps = TC_STEPS, .steps = steps, .n_inputs = sizeof in / sizeof *in, .inputs = in,
                 .n_outputs = TC_OUTPUTS, .outputs = outs};
  char what[64];
  snprintf(what, sizeof what, "tensor cores on %s", backend);
  DlrtModel *m = open_plan(&plan, backend, what);
  if (!m) return false;
  bool ok = true;
  for (uint32_t i = 0; i < plan.n_inputs && ok; i++) ok = dlrt_set_input(m, (int)i, host[i], in[i].nbytes) == DLRT_OK;
  ok = ok && dlrt_run(m) == DLRT_OK;
  for (int o = 0; o < TC_OUTPUTS && ok; o++) {
    ok = dlrt_get_output(m, o, out, outs[o].nbytes) == DLRT_OK;
    out += outs[o].nbytes;
  }
  if (!ok) report(false, "%s: %s", what, dlrt_error(m));
  dlrt_close(m);
  return ok;
}

static void tc_checks(const char *backend) {
  static TcData d;
  tc_fill(&d);
  const char *prelude = cg_tc_prelude();
  size_t len = strlen(prelude) + strlen(MMA_KERNELS) + 2;
  char *source = malloc(len);
  snprintf(source, len, "%s\n%s", prelude, MMA_KERNELS);
  const RtTensorDesc outs[TC_OUTPUTS] = {
      flat("mma f16", RT_DT_F32, 128, RT_SPACE_OUTPUT, 0),       flat("mma bf16", RT_DT_F32, 128, RT_SPACE_OUTPUT, 1),
      flat("mma s8", RT_DT_I32, 128, RT_SPACE_OUTPUT, 2),        flat("mma tf32", RT_DT_F32, 128, RT_SPACE_OUTPUT, 3),
      flat("cvt.rna.tf32", RT_DT_I32, TC_X, RT_SPACE_OUTPUT, 4),
      flat("cp.async + ldmatrix.x4 + .x2 (A m-major, B n-major)", RT_DT_F32, 256, RT_SPACE_OUTPUT, 5),
      flat("cp.async + ldmatrix.x4 + .x2.trans (A m-major, B k-major)", RT_DT_F32, 256, RT_SPACE_OUTPUT, 6),
      flat("cp.async + ldmatrix.x4.trans + .x2 (A k-major, B n-major)", RT_DT_F32, 256, RT_SPACE_OUTPUT, 7),
      flat("cp.async + ldmatrix.x4.trans + .x2.trans (A k-major, B k-major)", RT_DT_F32, 256, RT_SPACE_OUTPUT, 8),
      flat("ldmatrix.x1, .x1.trans", RT_DT_I32, 64, RT_SPACE_OUTPUT, 9),
      flat("cp.async groups", RT_DT_I32, 224, RT_SPACE_OUTPUT, 10), flat("cp.async sizes", RT_DT_U8, 896, RT_SPACE_OUTPUT, 11),
      flat("cvt.rn.f16x2, cvt.rn.bf16x2, shfl.xor quad max", RT_DT_I32, TC_X / 2 * 3, RT_SPACE_OUTPUT, 12),
      flat("wgmma f16 m64n64, 64-byte swizzle, 2 groups in flight", RT_DT_F32, 64 * 64, RT_SPACE_OUTPUT, 13),
      flat("wgmma bf16 m64n128, 128-byte swizzle", RT_DT_F32, 64 * 128, RT_SPACE_OUTPUT, 14),
      flat("wgmma tf32 m64n32, 32-byte swizzle, scale-d 0 first", RT_DT_F32, 64 * 32, RT_SPACE_OUTPUT, 15),
      flat("wgmma s8 m64n256, no swizzle (core matrices)", RT_DT_I32, 64 * 256, RT_SPACE_OUTPUT, 16),
      flat("wgmma f16 m64n16, no swizzle, scale-d 0 first", RT_DT_F32, 64 * 16, RT_SPACE_OUTPUT, 17),
      flat("wgmma bf16 m64n256, 64-byte swizzle", RT_DT_F32, 64 * 256, RT_SPACE_OUTPUT, 18)};
  size_t total = 0;
  for (int o = 0; o < TC_OUTPUTS; o++) total += outs[o].nbytes;
  uint8_t *got = malloc(total), *want = malloc(total);
  if (source && got && want && tc_run(backend, &d, source, got, outs) && tc_run("emu", &d, source, want, outs)) {
    size_t at = 0;
    for (int o = 0; o < TC_OUTPUTS; o++) {
      size_t n = outs[o].nbytes, i = 0;
      while (i < n && got[at + i] == want[at + i]) i++;
      report(i == n, "tensor cores, %s: %s %s the emu", outs[o].name, backend, i == n ? "equals" : "differs from");
      if (i < n) printf("     first difference at byte %zu of %zu\n", i, n);
      at += n;
    }
  }
  free(source), free(got), free(want);
}

/* A fault breaks the context: the model says so and refuses further
 * calls; closing it resets the context, after which the next model runs
 * or, where the driver keeps the process broken (CUDA's documented rule
 * for sticky errors), is refused with that reason.  A GEMM step first,
 * so that cuBLASLt (cudart) holds the primary context too. */
static void fault_check(const char *backend) {
  RtArg fa[1] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, 0, 0}}};
  RtGemm g = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1, .alpha = 1,
              .a = {RT_SPACE_OUTPUT, 0, 0}, .b = {RT_SPACE_OUTPUT, 0, 0}, .c = {RT_SPACE_OUTPUT, 1, 0}};
  RtStep steps[2] = {{.kind = RT_STEP_GEMM, .label = "gemm", .gemm = g},
                     {.kind = RT_STEP_LAUNCH, .label = "fault",
                      .launch = {.kernel = 2, .contract = 2, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_args = 1,
                                 .args = fa}}};
  /* x has room for what args_mix writes below. */
  RtTensorDesc out[2] = {flat("x", RT_DT_F32, 6, RT_SPACE_OUTPUT, 0), flat("y", RT_DT_F32, 4, RT_SPACE_OUTPUT, 1)};
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "fault", .source = kernel_src,
                 .n_kernels = 3, .kernels = kernels, .n_contracts = 3, .contracts = contracts,
                 .n_steps = 2, .steps = steps, .n_outputs = 2, .outputs = out};
  DlrtModel *m = open_plan(&plan, backend, "fault");
  if (!m) return;
  DlrtStatus s = dlrt_run(m);
  report(s == DLRT_E_BROKEN && strstr(dlrt_error(m), "unusable"), "a faulting kernel: %s: %s", dlrt_status_name(s),
         dlrt_error(m));
  float y[4];
  s = dlrt_get_output(m, 1, y, sizeof y);
  report(s == DLRT_E_BROKEN, "the broken model refuses further calls: %s", dlrt_status_name(s));
  dlrt_close(m);
  steps[1].launch.kernel = steps[1].launch.contract = 0; /* args_mix writes into x: a harmless kernel */
  RtArg mix[6] = {fa[0], {.kind = RT_ARG_I32}, {.kind = RT_ARG_I64}, {.kind = RT_ARG_F32}, {.kind = RT_ARG_I32},
                  {.kind = RT_ARG_I64}};
  steps[1].launch.args = mix;
  steps[1].launch.n_args = 6;
  /* CUDA documents a sticky error as needing a new process, and the
   * H200's driver (580) kept answering ILLEGAL_ADDRESS after the reset:
   * there the next open must say so, naming the cause. */
  m = NULL;
  s = dlrt_open(&plan, backend, &m);
  if (s != DLRT_OK) {
    report(strstr(dlrt_error(m), "only in a new process") != NULL,
           "a model after the fault: refused, the process cannot recover (CUDA's rule): %s", dlrt_error(m));
    dlrt_close(m);
    return;
  }
  s = dlrt_run(m);
  report(s == DLRT_OK, "a model opened after closing the broken one runs: %s %s", dlrt_status_name(s), dlrt_error(m));
  dlrt_close(m);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "auto";
  const char *mode = argc > 2 ? argv[2] : "all";
  bool all = !strcmp(mode, "all");
  if (!all && strcmp(mode, "gemm") && strcmp(mode, "args") && strcmp(mode, "tc") && strcmp(mode, "fault")) {
    fprintf(stderr, "usage: rt_check [auto|cuda|emu [all|gemm|args|tc|fault]]\n");
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
  if (all || !strcmp(mode, "tc")) tc_checks(backend);
  if (!strcmp(mode, "fault")) {
    if (cuda) fault_check(backend);
    else printf("skip fault: needs the cuda backend\n");
  }
  printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
