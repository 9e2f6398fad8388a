/* The memory-bound kernels' speed on a GPU: takes nothing, compiles
 * layernorm, softmax, rms_norm and a fused elementwise map (gelu(x * s +
 * r)) at 8x512x768 and 8x2048x4096 in f32, f16 and bf16, runs each
 * kernel with CUDA events around many launches, and prints a table of
 * GB/s (the cost model's minimum bytes: inputs read once, the output
 * written once) against the device-to-device copy bandwidth measured by
 * cuMemcpyDtoD in the same run.  The smaller shape's outputs are checked
 * against ir_eval (f32 1e-5, f16 1e-2, bf16 2e-2 relative to |y| + 0.1).
 * Buffers rotate through enough copies that no launch finds its data in
 * the L2 cache.  tests/gpu/check.sh runs it; exit 77 without a GPU, 1
 * when a kernel fails or is wrong. */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "runtime/emu/dlcc_emu.h"
#include "runtime/runtime.h"

#ifndef HAVE_CUDA
int main(void) {
  puts("bw_bench: built without the CUDA toolkit");
  return 77;
}
#else
#include <cuda.h>

#define CUDA_FNS(X)                                                                                \
  X(cuInit)                                                                                        \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxSynchronize)                                                                              \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleGetFunction)                                                                           \
  X(cuLaunchKernel)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyDtoD)                                                                                  \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)                                                                            \
  X(cuGetErrorString)

#define STR_(x) #x
#define STR(x) STR_(x)

static struct {
#define FIELD(fn) __typeof__(fn) *fn;
  CUDA_FNS(FIELD)
#undef FIELD
} cu;

static int failed;

/* A driver call that must succeed: false (and a message) when not. */
static bool ok(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return true;
  const char *s = "?";
  if (cu.cuGetErrorString) cu.cuGetErrorString(r, &s);
  printf("FAIL %s: %s (%d)\n", what, s, (int)r);
  failed = 1;
  return false;
}

static bool load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("bw_bench: cannot load libcuda.so.1 (%s): no GPU here\n", dlerror());
    return false;
  }
#define LOAD(fn)                                                                                   \
  if (!(cu.fn = (__typeof__(fn) *)dlsym(lib, STR(fn)))) {                                          \
    printf("bw_bench: libcuda.so.1 lacks %s\n", STR(fn));                                          \
    return false;                                                                                  \
  }
  CUDA_FNS(LOAD)
#undef LOAD
  return true;
}

/* ---- the device-to-device copy ---- */

enum { COPY_BYTES = 1 << 30, COPY_RUNS = 20, RUNS = 50, L2_BYTES = 60 << 20 };

/* GB/s of cuMemcpyDtoD, counting each byte read and written. */
static double copy_gbs(CUevent t0, CUevent t1) {
  CUdeviceptr a, b;
  if (!ok(cu.cuMemAlloc(&a, COPY_BYTES), "cuMemAlloc") || !ok(cu.cuMemAlloc(&b, COPY_BYTES), "cuMemAlloc"))
    return 0;
  ok(cu.cuMemcpyDtoD(b, a, COPY_BYTES), "cuMemcpyDtoD");
  ok(cu.cuEventRecord(t0, NULL), "cuEventRecord");
  for (int i = 0; i < COPY_RUNS; i++) ok(cu.cuMemcpyDtoD(i & 1 ? a : b, i & 1 ? b : a, COPY_BYTES), "cuMemcpyDtoD");
  ok(cu.cuEventRecord(t1, NULL), "cuEventRecord");
  ok(cu.cuEventSynchronize(t1), "cuEventSynchronize");
  float ms = 0;
  ok(cu.cuEventElapsedTime(&ms, t0, t1), "cuEventElapsedTime");
  cu.cuMemFree(a);
  cu.cuMemFree(b);
  return ms > 0 ? 2.0 * COPY_BYTES * COPY_RUNS / (ms * 1e-3) / 1e9 : 0;
}

/* ---- one kernel ---- */

typedef struct Bench {
  const char *op;
  DType dt;
  int64_t rows, len; /* 8*512 x 768 or 8*2048 x 4096 */
} Bench;

typedef struct Compiled {
  Ctx c;
  const char *text;
  Graph *g;
  CgResult r;
} Compiled;

/* x [rows, len] (and r the same, s [len] and the params) through op. */
static const char *graph_text(Arena *a, const Bench *b) {
  const char *t = ir_dtype_name(b->dt);
  if (strcmp(b->op, "fused") == 0)
    return arena_printf(a,
                 "graph fused {\n  %%x = input {name=\"x\"} : %1$s[%2$ld, %3$ld]\n"
                 "  %%r = input {name=\"r\"} : %1$s[%2$ld, %3$ld]\n  %%s = input {name=\"s\"} : %1$s[%3$ld]\n"
                 "  %%0 = mul %%x, %%s : %1$s[%2$ld, %3$ld]\n  %%1 = add %%0, %%r : %1$s[%2$ld, %3$ld]\n"
                 "  %%2 = gelu %%1 : %1$s[%2$ld, %3$ld]\n  return %%2 as \"y\"\n}\n",
                 t, (long)b->rows, (long)b->len);
  return arena_printf(a,
                 "graph %4$s {\n  %%x = input {name=\"x\"} : %1$s[%2$ld, %3$ld]\n"
                 "  %%w = param {name=\"w\"} : %1$s[%3$ld]\n  %%b = param {name=\"b\"} : %1$s[%3$ld]\n"
                 "  %%0 = %4$s %5$s {axis=1} : %1$s[%2$ld, %3$ld]\n  return %%0 as \"y\"\n}\n",
                 t, (long)b->rows, (long)b->len, b->op,
                 strcmp(b->op, "layernorm") == 0 ? "%x, %w, %b" : strcmp(b->op, "rms_norm") == 0 ? "%x, %w" : "%x");
}

static int compile_job(Ctx *c, void *data) {
  Compiled *k = data;
  k->g = ir_parse(c, ctx_add_file(c, "bench.ir", k->text, strlen(k->text)));
  if (!k->g || !ir_verify(k->g)) return 1;
  PassCtx pc = {.ctx = c};
  pass_fuse(k->g, &pc);
  return cg_compile(k->g, &k->r) ? 0 : 1;
}

/* Random bytes of t's elements: U(-2, 2) in its dtype. */
static void fill(void *p, DType dt, int64_t count, uint64_t *state) {
  for (int64_t i = 0; i < count; i++) {
    *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
    float v = (float)((double)(*state >> 11) * 0x1.0p-53 * 4.0 - 2.0);
    if (dt == TY_F32)
      ((float *)p)[i] = v;
    else
      ((uint16_t *)p)[i] = dt == TY_F16 ? dlcc_emu_f32_to_f16(v) : dlcc_emu_f32_to_bf16(v);
  }
}

typedef struct Args {
  CUdeviceptr base[4][8]; /* by RtSpace and index: weights, arena, inputs, outputs */
  void *slot[32];
  union {
    CUdeviceptr p;
    int32_t i;
    long long l;
    float f;
  } val[32];
} Args;

static void bind(Args *a, const RtLaunch *l) {
  for (uint32_t i = 0; i < l->n_args && i < 32; i++) {
    const RtArg *g = &l->args[i];
    if (g->kind == RT_ARG_PTR) a->val[i].p = a->base[g->ref.space][g->ref.index] + g->ref.offset;
    if (g->kind == RT_ARG_I32) a->val[i].i = (int32_t)g->i;
    if (g->kind == RT_ARG_I64) a->val[i].l = g->i;
    if (g->kind == RT_ARG_F32) a->val[i].f = g->f;
    a->slot[i] = &a->val[i];
  }
}

/* The output against ir_eval on the inputs it ran on: the largest
 * |y - want| / (|want| + 0.1). */
static double check_output(Compiled *k, const Tensor *inputs, const TensorMap *params, const void *got) {
  const RtPlan *p = k->r.plan;
  const char *names[4];
  for (uint32_t i = 0; i < p->n_inputs; i++) names[i] = p->inputs[i].name;
  TensorMap in = {.n = (int)p->n_inputs, .names = names, .tensors = (Tensor *)inputs};
  Tensor want;
  char err[256];
  if (!ir_eval(k->g, &in, params, &want, err, sizeof err)) {
    printf("FAIL ir_eval: %s\n", err);
    failed = 1;
    return INFINITY;
  }
  Tensor y = {want.type, (void *)got};
  double worst = 0;
  for (int64_t e = 0; e < ir_type_numel(&want.type); e++) {
    double w = ir_tensor_get(&want, e), v = ir_tensor_get(&y, e), d = fabs(v - w) / (fabs(w) + 0.1);
    if (!(d <= worst)) worst = d;
  }
  ir_tensor_free(&want);
  return worst;
}

static void bench(const Bench *b, int arch_cc, CUevent t0, CUevent t1, double copy) {
  Compiled *k = calloc(1, sizeof *k);
  ctx_init(&k->c);
  k->text = graph_text(&k->c.arena, b);
  char label[64];
  snprintf(label, sizeof label, "%-9s %-4s %ldx%ld", b->op, ir_dtype_name(b->dt), (long)b->rows, (long)b->len);
  const RtPlan *p = NULL;
  int launches = 0;
  if (ctx_guard(&k->c, compile_job, k) == 0 && k->g) {
    p = k->r.plan;
    for (uint32_t s = 0; s < p->n_steps; s++) launches += p->steps[s].kind == RT_STEP_LAUNCH;
  }
  if (!p || launches != 1 || p->n_steps != 1 || p->n_init_steps != 0) {
    printf("FAIL %s: not one kernel: %s\n", label, p ? "" : diag_text(&k->c));
    failed = 1;
    goto done;
  }
  char arch[32], err[512];
  void *bin = NULL;
  size_t size = 0;
  CUmodule mod;
  CUfunction fn;
  if (rt_nvrtc_target(arch_cc, arch, sizeof arch, err, sizeof err) != 0 ||
      rt_nvrtc_compile(p, arch, &bin, &size, err, sizeof err) != 0) {
    printf("FAIL %s: NVRTC: %s\n", label, err);
    failed = 1;
    goto done;
  }
  if (!ok(cu.cuModuleLoadData(&mod, bin), "cuModuleLoadData") ||
      !ok(cu.cuModuleGetFunction(&fn, mod, p->kernels[0].name), "cuModuleGetFunction"))
    goto done;
  /* Inputs, params (the weights space) and outputs, in sets enough to
   * pass 4x the L2 cache. */
  uint64_t set_bytes = p->weights_bytes + p->arena_bytes;
  for (uint32_t i = 0; i < p->n_inputs; i++) set_bytes += p->inputs[i].nbytes;
  for (uint32_t i = 0; i < p->n_outputs; i++) set_bytes += p->outputs[i].nbytes;
  int sets = (int)(4 * (uint64_t)L2_BYTES / set_bytes + 1);
  if (sets > 16) sets = 16;
  Args *args = calloc((size_t)sets, sizeof *args);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  Tensor host_in[4];
  memset(host_in, 0, sizeof host_in);
  TensorMap params = {0};
  ir_init_params(k->g, 3, IR_INIT_RANDOM, &params, err, sizeof err);
  unsigned char *weights = calloc(p->weights_bytes + 1, 1);
  for (uint32_t w = 0; w < p->n_weights; w++) {
    const Tensor *t = ir_tensor_map_find(&params, p->weights[w].name);
    if (t) memcpy(weights + p->weights[w].where.offset, t->data, p->weights[w].nbytes);
  }
  for (uint32_t i = 0; i < p->n_inputs && i < 4; i++) {
    TensorType t = ir_type_make((DType)p->inputs[i].dtype, (int)p->inputs[i].rank, p->inputs[i].dims);
    ir_tensor_alloc(&host_in[i], &t);
    fill(host_in[i].data, t.dtype, ir_type_numel(&t), &state);
  }
  bool good = true;
  for (int s = 0; s < sets && good; s++) {
    uint64_t weights_space = p->weights_bytes + p->derived_bytes + 256;
    good = ok(cu.cuMemAlloc(&args[s].base[RT_SPACE_WEIGHTS][0], weights_space), "cuMemAlloc") &&
           ok(cu.cuMemAlloc(&args[s].base[RT_SPACE_ARENA][0], p->arena_bytes + 256), "cuMemAlloc") &&
           ok(cu.cuMemcpyHtoD(args[s].base[RT_SPACE_WEIGHTS][0], weights, p->weights_bytes), "cuMemcpyHtoD");
    for (uint32_t i = 0; i < p->n_inputs && good; i++)
      good = ok(cu.cuMemAlloc(&args[s].base[RT_SPACE_INPUT][i], p->inputs[i].nbytes), "cuMemAlloc") &&
             ok(cu.cuMemcpyHtoD(args[s].base[RT_SPACE_INPUT][i], host_in[i].data, p->inputs[i].nbytes),
                "cuMemcpyHtoD");
    for (uint32_t i = 0; i < p->n_outputs && good; i++)
      good = ok(cu.cuMemAlloc(&args[s].base[RT_SPACE_OUTPUT][i], p->outputs[i].nbytes), "cuMemAlloc");
    if (good) bind(&args[s], &p->steps[0].launch);
  }
  const RtLaunch *l = &p->steps[0].launch;
#define LAUNCH(a)                                                                                  \
  ok(cu.cuLaunchKernel(fn, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], \
                       l->dynamic_shared_bytes, NULL, (a)->slot, NULL),                            \
     "cuLaunchKernel")
  for (int s = 0; s < sets && good; s++) good = LAUNCH(&args[s]);
  float ms = 0;
  if (good) {
    ok(cu.cuEventRecord(t0, NULL), "cuEventRecord");
    for (int i = 0; i < RUNS && good; i++) good = LAUNCH(&args[i % sets]);
    ok(cu.cuEventRecord(t1, NULL), "cuEventRecord");
    good = good && ok(cu.cuEventSynchronize(t1), "cuEventSynchronize") &&
           ok(cu.cuEventElapsedTime(&ms, t0, t1), "cuEventElapsedTime");
  }
#undef LAUNCH
  double bytes = k->r.step_costs[0].bytes, per = ms / RUNS;
  char check[32] = "-";
  if (good && b->rows * b->len <= 8 * 512 * 768) {
    void *out = malloc(p->outputs[0].nbytes);
    good = ok(cu.cuMemcpyDtoH(out, args[0].base[RT_SPACE_OUTPUT][0], p->outputs[0].nbytes), "cuMemcpyDtoH");
    double worst = good ? check_output(k, host_in, &params, out) : INFINITY;
    double limit = b->dt == TY_F32 ? 1e-5 : b->dt == TY_F16 ? 1e-2 : 2e-2;
    snprintf(check, sizeof check, "%.2g %s", worst, worst <= limit ? "ok" : "DIFF");
    if (!(worst <= limit)) failed = 1;
    free(out);
  }
  if (good) {
    double gbs = bytes / (per * 1e-3) / 1e9;
    printf("%-30s grid=%u block=%ux%u  %9.4f ms  %7.0f GB/s  %5.2f of copy  %s\n", label, l->grid[0], l->block[0],
           l->block[1], per, gbs, copy > 0 ? gbs / copy : 0, check);
  }
  for (int s = 0; s < sets; s++)
    for (int sp = 0; sp < 4; sp++)
      for (int i = 0; i < 8; i++)
        if (args[s].base[sp][i]) cu.cuMemFree(args[s].base[sp][i]);
  for (int i = 0; i < 4; i++) ir_tensor_free(&host_in[i]);
  ir_tensor_map_free(&params);
  free(weights);
  free(args);
  free(bin);
done:
  ctx_free(&k->c);
  free(k);
}

int main(void) {
  if (!load_driver()) return 77;
  CUdevice dev;
  CUcontext ctx;
  int major = 0, minor = 0, sms = 0;
  char name[128] = "?";
  if (!ok(cu.cuInit(0), "cuInit") || !ok(cu.cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  cu.cuDeviceGetName(name, sizeof name, dev);
  cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  CUevent t0, t1;
  if (!ok(cu.cuEventCreate(&t0, CU_EVENT_DEFAULT), "cuEventCreate") || !ok(cu.cuEventCreate(&t1, CU_EVENT_DEFAULT), "cuEventCreate"))
    return 1;
  double copy = copy_gbs(t0, t1);
  printf("%s, sm_%d%d, %d SMs; cuMemcpyDtoD of 1 GiB: %.0f GB/s (bytes read + written)\n", name, major, minor, sms, copy);
  printf("%-30s %-22s %12s  %12s  %13s  %s\n", "kernel", "launch", "time", "bandwidth", "fraction", "max err vs ir_eval");
  static const char *const ops[] = {"layernorm", "softmax", "rms_norm", "fused"};
  static const DType dts[] = {TY_F32, TY_F16, TY_BF16};
  static const int64_t shapes[][2] = {{8 * 512, 768}, {8 * 2048, 4096}};
  for (int s = 0; s < 2; s++)
    for (int o = 0; o < 4; o++)
      for (int d = 0; d < 3; d++) {
        Bench b = {ops[o], dts[d], shapes[s][0], shapes[s][1]};
        bench(&b, major * 10 + minor, t0, t1, copy);
      }
  printf("GB/s: the cost model's minimum bytes (inputs once, output once) per launch, %d launches rotating "
         "through copies of the buffers larger than L2 together\n",
         RUNS);
  return failed;
}
#endif
