/* Check suite for libdlcrt without a GPU: plan validation messages, the
 * missing driver, NVRTC and its disk cache, and the executor on a fake
 * device defined here (host memory, kernels as C functions), which also
 * shows that model.c needs nothing of a real device. */
#include "config.h"

#include "check_quiet.h"
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlcrt.h"
#include "runtime/runtime.h"
#include "runtime/tensorio.h"

static char err[2048];

/* ---- a small valid plan: h = 2*x + bias (a launch), out = h @ w (a
 * gemm), copy = h (a copy) ---- */

static const RtKernel kernels[] = {{.name = "add_bias"}};
static const RtArg args[] = {
    {.kind = RT_ARG_PTR, .ref = {RT_SPACE_INPUT, 0, 0}},
    {.kind = RT_ARG_PTR, .ref = {RT_SPACE_WEIGHTS, 0, 32}},
    {.kind = RT_ARG_PTR, .ref = {RT_SPACE_ARENA, 0, 16}},
    {.kind = RT_ARG_I32, .i = 6},
    {.kind = RT_ARG_I32, .i = 3},
    {.kind = RT_ARG_F32, .f = 2.0f},
};
/* What add_bias may touch: x and h whole, the bias's 3 floats; n = 6. */
static const RtParam add_bias_params[] = {
    {.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = 24},
    {.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = 12},
    {.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = 24},
    {.kind = RT_ARG_I32, .lo = 6, .hi = 6},
    {.kind = RT_ARG_I32, .lo = 3, .hi = 3},
    {.kind = RT_ARG_F32},
};
static RtContract contracts[1];
static const RtTensorDesc weights[] = {
    {.name = "w", .dtype = RT_DT_F32, .rank = 2, .dims = {3, 2}, .nbytes = 24, .where = {RT_SPACE_WEIGHTS, 0, 0}},
    {.name = "bias", .dtype = RT_DT_F32, .rank = 1, .dims = {3}, .nbytes = 12, .where = {RT_SPACE_WEIGHTS, 0, 32}},
};
static const RtTensorDesc inputs[] = {
    {.name = "x", .dtype = RT_DT_F32, .rank = 2, .dims = {2, 3}, .nbytes = 24, .where = {RT_SPACE_INPUT, 0, 0}},
};
static const RtTensorDesc outputs[] = {
    {.name = "y", .dtype = RT_DT_F32, .rank = 2, .dims = {2, 2}, .nbytes = 16, .where = {RT_SPACE_OUTPUT, 0, 0}},
    {.name = "h", .dtype = RT_DT_F32, .rank = 2, .dims = {2, 3}, .nbytes = 24, .where = {RT_SPACE_OUTPUT, 1, 0}},
};
static const float weights_blob[12] = {1, 0, 0, 1, 1, 1, 0, 0, 0.5f, 1, 1.5f, 0};

/* The CUDA C of add_bias, with the launcher codegen emits for emu. */
static const char *add_bias_src =
    "extern \"C\" __global__ void add_bias(const float *x, const float *b, float *h, int n, int cols,\n"
    "                                      float s) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) h[i] = s * x[i] + b[i % cols];\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void add_bias__emu(void **a) {\n"
    "  add_bias(*(const float **)a[0], *(const float **)a[1], *(float **)a[2], *(int *)a[3], *(int *)a[4],\n"
    "           *(float *)a[5]);\n"
    "}\n"
    "#endif\n";

static RtStep steps[3];
static RtPlan plan;

static void make_plan(void) {
  memset(steps, 0, sizeof steps);
  contracts[0] =
      (RtContract){.kernel = 0, .grid = {2, 1, 1}, .block = {4, 1, 1}, .n_params = 6, .params = add_bias_params};
  steps[0] = (RtStep){.kind = RT_STEP_LAUNCH,
                      .label = "add %1",
                      .launch = {.kernel = 0, .grid = {2, 1, 1}, .block = {4, 1, 1}, .n_args = 6, .args = args}};
  steps[1] = (RtStep){.kind = RT_STEP_GEMM,
                      .label = "matmul %2",
                      .gemm = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 3, .lda = 3, .ldb = 2, .ldc = 2,
                               .batch = 1, .alpha = 1, .beta = 0,
                               .a = {RT_SPACE_ARENA, 0, 16}, .b = {RT_SPACE_WEIGHTS, 0, 0},
                               .c = {RT_SPACE_OUTPUT, 0, 0}}};
  steps[2] = (RtStep){.kind = RT_STEP_COPY,
                      .label = "copy %1",
                      .copy = {.dst = {RT_SPACE_OUTPUT, 1, 0}, .src = {RT_SPACE_ARENA, 0, 16}, .nbytes = 24}};
  plan = (RtPlan){.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "t",
                  .source = "extern \"C\" __global__ void add_bias() {}\n",
                  .n_kernels = 1, .kernels = kernels, .n_contracts = 1, .contracts = contracts,
                  .n_steps = 3, .steps = steps,
                  .arena_bytes = 64, .weights_bytes = 48, .n_weights = 2, .weights = weights,
                  .n_inputs = 1, .inputs = inputs, .n_outputs = 2, .outputs = outputs,
                  .weights_data = weights_blob};
}

static void setup(void) {
  make_plan();
  err[0] = 0;
}

/* ---- the fake device ---- */

static struct {
  int live_allocs;
  uint64_t limit;     /* fail an alloc above this many bytes in total */
  uint64_t allocated;
  int fail_launch_at; /* launch number that fails (and breaks the device), or -1 */
  int launches;
  int destroyed;
} fake;

static uint32_t fake_tid, fake_bid, fake_bdim;

static void add_bias(void **a) {
  const float *x = *(float **)a[0], *b = *(float **)a[1];
  float *h = *(float **)a[2];
  int n = *(int32_t *)a[3], cols = *(int32_t *)a[4];
  float scale = *(float *)a[5];
  int i = (int)(fake_bid * fake_bdim + fake_tid);
  if (i < n) h[i] = scale * x[i] + b[i % cols];
}

static const struct {
  const char *name;
  void (*fn)(void **);
} fake_kernels[] = {{"add_bias", add_bias}};

struct RtModule {
  void (*fns[8])(void **);
};

static void fake_destroy(RtDevice *d) {
  fake.destroyed++;
  free(d);
}
static int fake_alloc(RtDevice *d, uint64_t n, RtDevPtr *out) {
  if (fake.allocated + n > fake.limit)
    return rt_device_fail(d, "fake: out of memory allocating %llu bytes", (unsigned long long)n);
  void *p = malloc(n);
  if (!p) return rt_device_fail(d, "fake: malloc");
  fake.allocated += n;
  fake.live_allocs++;
  *out = (RtDevPtr)(uintptr_t)p;
  return 0;
}
static int fake_free(RtDevice *d, RtDevPtr p) {
  fake.live_allocs--;
  free((void *)(uintptr_t)p);
  return 0;
}
static int fake_upload(RtDevice *d, RtDevPtr dst, const void *src, uint64_t n) {
  memcpy((void *)(uintptr_t)dst, src, n);
  return 0;
}
static int fake_download(RtDevice *d, void *dst, RtDevPtr src, uint64_t n) {
  memcpy(dst, (void *)(uintptr_t)src, n);
  return 0;
}
static int fake_copy(RtDevice *d, RtDevPtr dst, RtDevPtr src, uint64_t n) {
  memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return 0;
}
static int fake_memset0(RtDevice *d, RtDevPtr dst, uint64_t n) {
  memset((void *)(uintptr_t)dst, 0, n);
  return 0;
}
static int fake_load(RtDevice *d, const RtPlan *p, RtModule **out) {
  RtModule *m = calloc(1, sizeof *m);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    for (size_t j = 0; j < sizeof fake_kernels / sizeof fake_kernels[0]; j++)
      if (!strcmp(fake_kernels[j].name, p->kernels[i].name)) m->fns[i] = fake_kernels[j].fn;
    if (!m->fns[i]) {
      free(m);
      return rt_device_fail(d, "fake: no kernel '%s'", p->kernels[i].name);
    }
  }
  *out = m;
  return 0;
}
static void fake_unload(RtDevice *d, RtModule *m) { free(m); }
static int fake_launch(RtDevice *d, RtModule *m, const RtLaunch *l, const void *const *a) {
  if (d->broken) return -1;
  if (fake.launches++ == fake.fail_launch_at) {
    rt_device_fail(d, "fake: illegal address");
    d->broken = true;
    return -1;
  }
  fake_bdim = l->block[0];
  for (fake_bid = 0; fake_bid < l->grid[0]; fake_bid++)
    for (fake_tid = 0; fake_tid < l->block[0]; fake_tid++) m->fns[l->kernel]((void **)a);
  return 0;
}
/* Row-major, f32, no batch or transposes: all the test plans use. */
static int fake_gemm(RtDevice *d, const RtGemm *g, RtDevPtr pa, RtDevPtr pb, RtDevPtr pc, RtDevPtr pcin,
                     RtDevPtr bias) {
  if (d->broken || bias || pcin) return -1;
  const float *a = (const float *)(uintptr_t)pa, *b = (const float *)(uintptr_t)pb;
  float *c = (float *)(uintptr_t)pc;
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      float s = 0;
      for (int64_t k = 0; k < g->k; k++) s += a[i * g->lda + k] * b[k * g->ldb + j];
      c[i * g->ldc + j] = g->alpha * s + g->beta * c[i * g->ldc + j];
    }
  return 0;
}
static int fake_sync(RtDevice *d) { return d->broken ? -1 : 0; }

static const RtDeviceOps fake_ops = {
    .name = "fake", .destroy = fake_destroy, .alloc = fake_alloc, .free = fake_free,
    .upload = fake_upload, .download = fake_download, .copy = fake_copy, .memset0 = fake_memset0,
    .load = fake_load, .unload = fake_unload, .launch = fake_launch, .gemm = fake_gemm,
    .synchronize = fake_sync};

static RtDevice *fake_open(uint64_t limit) {
  memset(&fake, 0, sizeof fake);
  fake.limit = limit;
  fake.fail_launch_at = -1;
  RtDevice *d = calloc(1, sizeof *d);
  d->ops = &fake_ops;
  return d;
}

/* ---- SHA-256 ---- */

static void sha_hex(const char *s, char out[65]) {
  uint8_t h[32];
  rt_sha256(s, strlen(s), h);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

START_TEST(sha256_vectors) {
  char h[65];
  sha_hex("", h);
  ck_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha_hex("abc", h);
  ck_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", h);
  ck_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

/* ---- plan validation ---- */

START_TEST(plan_valid) {
  ck_assert_msg(rt_plan_validate(&plan, err, sizeof err) == 0, "%s", err);
}
END_TEST

START_TEST(plan_bad_magic) {
  plan.magic = 0x7f454c46;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: bad magic 0x7f454c46 (expected 0x444c4350 \"DLCP\"): not a dlcc model");
}
END_TEST

START_TEST(plan_wrong_version) {
  plan.version = 1; /* before init steps: its plan struct is shorter */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: version 1, this runtime reads version 16: rebuild the model with this dlcc");
}
END_TEST

START_TEST(plan_ref_out_of_range) {
  steps[2].copy.src.offset = 48; /* 48 + 24 > 64 */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 2 (copy %1): copy src: offset 48 + 24 bytes is outside ARENA (64 bytes)");
}
END_TEST

START_TEST(plan_ref_bad_output_index) {
  steps[2].copy.dst.index = 5;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 2 (copy %1): copy dst: OUTPUT 5 does not exist (the model has 2)");
}
END_TEST

START_TEST(plan_bad_kernel_index) {
  steps[0].launch.kernel = 3;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 0 (add %1): kernel index 3 out of range (the plan has 1 kernels)");
}
END_TEST

START_TEST(plan_bad_cooperative_flag) {
  RtKernel k = {.name = "add_bias", .cooperative = 3, .uses_barriers = 1};
  plan.kernels = &k;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: kernel 0 (add_bias): cooperative is 3 (0, or 1 or 2 for a kernel with barriers)");
  /* A grid barrier needs the block barriers' scheduling too. */
  k.cooperative = RT_COOP_EXACT, k.uses_barriers = 0;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: kernel 0 (add_bias): cooperative is 1 (0, or 1 or 2 for a kernel with barriers)");
  k.uses_barriers = 1;
  ck_assert_msg(rt_plan_validate(&plan, err, sizeof err) == 0, "%s", err);
  k.cooperative = RT_COOP_STRIDE;
  ck_assert_msg(rt_plan_validate(&plan, err, sizeof err) == 0, "%s", err);
}
END_TEST

START_TEST(plan_bad_arg_kind) {
  RtArg bad[6];
  memcpy(bad, args, sizeof bad);
  bad[4].kind = 9;
  steps[0].launch.args = bad;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 0 (add %1): argument 4: unknown kind 9");
}
END_TEST

START_TEST(plan_gemm_past_buffer) {
  steps[1].gemm.k = 4; /* A 2x4 with lda 3 is refused first */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: lda 3 < 4 columns of A");
  steps[1].gemm.k = 3;
  steps[1].gemm.m = 3; /* C 3x2 does not fit OUTPUT 0 */
  steps[1].gemm.a.offset = 0;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm c: offset 0 + 24 bytes is outside OUTPUT 0 (16 bytes)");
  /* Inside its space but between two floats (the fuzzer's find: the CPU
   * GEMM stored at a misaligned address). */
  steps[1].gemm.m = 2;
  steps[1].gemm.a.offset = 2;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: an operand's offset is not a multiple of its element's 4 bytes");
}
END_TEST

/* An epilogue's bias: n values inside their space, an epilogue the
 * runtime knows, none on an int8 product. */
START_TEST(plan_gemm_epilogue) {
  steps[1].gemm.epilogue = RT_EPILOGUE_RELU_BIAS;
  steps[1].gemm.bias = (RtRef){RT_SPACE_WEIGHTS, 0, 40};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  steps[1].gemm.bias.offset = 41; /* 41 + 2 floats > 48 */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm bias: offset 41 + 8 bytes is outside WEIGHTS (48 bytes)");
  /* one bias per batch: batch 1's (stride 3) would end at 32 + 20 */
  steps[1].gemm.bias.offset = 32;
  steps[1].gemm.batch = 2;
  steps[1].gemm.c = (RtRef){RT_SPACE_ARENA, 0, 0};
  steps[1].gemm.stride_c = 4;
  steps[1].gemm.stride_bias = 2;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  steps[1].gemm.stride_bias = 3;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm bias: offset 32 + 20 bytes is outside WEIGHTS (48 bytes)");
  steps[1].gemm.stride_bias = -1;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: stride_bias = -1 out of range");
  steps[1].gemm.batch = 1;
  steps[1].gemm.stride_bias = 2;
  steps[1].gemm.epilogue = RT_EPILOGUE_NONE;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: stride_bias 2 without an epilogue's bias");
  steps[1].gemm.stride_bias = 0;
  steps[1].gemm.epilogue = RT_EPILOGUE_COUNT;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: epilogue 5 is unknown");
  steps[1].gemm.epilogue = RT_EPILOGUE_BIAS;
  steps[1].gemm.tf32 = 1; /* an f32 gemm's --tf32 */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  steps[1].gemm.tf32 = 2;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: tf32 2 on a gemm of dtype 0 (tf32 is for f32)");
  steps[1].gemm.tf32 = 0;
  steps[1].gemm.dtype = RT_DT_I8;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: an i8 gemm takes no epilogue");
  steps[1].gemm.epilogue = RT_EPILOGUE_NONE;
  steps[1].gemm.stride_bias = 0;
  steps[1].gemm.bias = (RtRef){0};
  for (int t = 0; t < 3; t++) { /* NN, TN, TT: what cuBLAS refused on the H200 */
    steps[1].gemm.trans_a = (uint32_t)(t >= 1), steps[1].gemm.trans_b = (uint32_t)(t == 2);
    ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
    ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: an i8 gemm takes A untransposed and B transposed (B stored "
                          "[n][k]; cuBLAS's TN form)");
  }
}
END_TEST

/* BGRAD writes m sums of op(A)'s rows: a writable place of m values
 * apart from A, B and C, in a GEMM of batch 1, alpha 1 and beta 0. */
START_TEST(plan_gemm_bias_grad) {
  RtGemm *g = &steps[1].gemm;
  g->trans_a = 1, g->lda = 2; /* A 3 x 2 at arena+16 */
  g->epilogue = RT_EPILOGUE_BGRAD;
  g->bias = (RtRef){RT_SPACE_ARENA, 0, 48};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  g->bias.offset = 57; /* 57 + 2 floats > 64 */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm bias: offset 57 + 8 bytes is outside ARENA (64 bytes)");
  g->bias.offset = 36; /* A's last float */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: the bgrad epilogue's bias overlaps A, B or C");
  g->bias = (RtRef){RT_SPACE_OUTPUT, 1, 0}; /* C is OUTPUT 0 */
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  g->bias = (RtRef){RT_SPACE_WEIGHTS, 0, 40};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "gemm bias") != NULL, "%s", err);
  g->bias = (RtRef){RT_SPACE_ARENA, 0, 48};
  g->alpha = 2;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: a bgrad epilogue takes batch 1, alpha 1 and beta 0");
  g->alpha = 1, g->beta = 1;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: a bgrad epilogue takes batch 1, alpha 1 and beta 0");
}
END_TEST

/* beta * C_in: C itself, or C's shape in bytes of their own (a
 * residual), in range; no C_in without a beta. */
START_TEST(plan_gemm_c_in) {
  RtGemm *g = &steps[1].gemm; /* C: 2 x 2 floats at out0+0 */
  g->beta = 1;
  g->c_in = (RtRef){RT_SPACE_ARENA, 0, 48};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  g->c_in.offset = 52;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm c_in: offset 52 + 16 bytes is outside ARENA (64 bytes)");
  g->c_in = g->c;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), 0);
  g->c = (RtRef){RT_SPACE_ARENA, 0, 48};
  g->c_in.space = RT_SPACE_ARENA, g->c_in.offset = 44;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: c_in overlaps C without being C");
  g->beta = 0;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm: c_in without a beta to read it");
}
END_TEST

START_TEST(plan_gemm_writes_weights) {
  steps[1].gemm.c = (RtRef){RT_SPACE_WEIGHTS, 0, 0};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 1 (matmul %2): gemm c: writes into WEIGHTS, which the model only reads");
}
END_TEST

START_TEST(plan_desc_size_mismatch) {
  RtTensorDesc in = inputs[0];
  in.nbytes = 20;
  plan.inputs = &in;
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: input 0 'x': nbytes 20 but dtype and shape make 24");
}
END_TEST

START_TEST(plan_copy_overlap) {
  steps[2].copy = (RtCopy){.dst = {RT_SPACE_ARENA, 0, 0}, .src = {RT_SPACE_ARENA, 0, 16}, .nbytes = 24};
  ck_assert_int_eq(rt_plan_validate(&plan, err, sizeof err), -1);
  ck_assert_str_eq(err, "plan: step 2 (copy %1): copy: source and destination overlap");
}
END_TEST

/* ---- devices ---- */

START_TEST(cuda_without_driver) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  RtDevice *d = rt_cuda_open(err, sizeof err);
  if (lib) {
    /* A driver is present: it opens, or says in its own words why not. */
    dlclose(lib);
    if (d)
      rt_device_close(d);
    else
      ck_assert_msg(!strncmp(err, "cuda: ", 6), "%s", err);
    return;
  }
  ck_assert_ptr_null(d);
  const char *want = "cuda: cannot load libcuda.so.1 (no NVIDIA driver on this machine): ";
  ck_assert_msg(!strncmp(err, want, strlen(want)), "%s", err);
  ck_assert_msg(strstr(err, "libcuda.so.1") != NULL, "%s", err);
}
END_TEST

START_TEST(device_unknown_backend) {
  const char *chosen = "x";
  ck_assert_ptr_null(rt_device_open("tpu", &chosen, err, sizeof err));
  ck_assert_ptr_null(chosen);
  ck_assert_str_eq(err, "unknown backend 'tpu' (expected auto, cuda or emu)");
}
END_TEST

START_TEST(open_refuses_foreign_plan) {
  plan.version = RT_PLAN_VERSION + 1;
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "emu", &m), DLRT_E_PLAN);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(dlrt_error(m), "plan: version 17, this runtime reads version 16: rebuild the model with this dlcc");
  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_backend(m), "");
  dlrt_close(m);
}
END_TEST

START_TEST(open_cuda_without_driver) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    dlclose(lib);
    return; /* covered on the GPU machine by tests/gpu/check.sh */
  }
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_NO_DEVICE);
  ck_assert_msg(strstr(dlrt_error(m), "cannot load libcuda.so.1") != NULL, "%s", dlrt_error(m));
  dlrt_close(m);
}
END_TEST

START_TEST(open_file_not_a_model) {
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open_file("/nonexistent/model.so", "emu", &m), DLRT_E_IO);
  ck_assert_msg(!strncmp(dlrt_error(m), "cannot load /nonexistent/model.so: ", 35), "%s", dlrt_error(m));
  dlrt_close(m);
  /* libm is a shared object but no model */
  ck_assert_int_eq(dlrt_open_file("libm.so.6", "emu", &m), DLRT_E_PLAN);
  ck_assert_str_eq(dlrt_error(m), "libm.so.6 is not a dlcc model (it has no dlrt_model_plan function)");
  dlrt_close(m);
}
END_TEST

/* ---- the executor on the fake device ---- */

static const float x_in[6] = {1, 2, 3, 4, 5, 6};

START_TEST(exec_two_steps) {
  DlrtModel *m = NULL;
  ck_assert_int_eq(rt_model_open_device(&plan, fake_open(1 << 20), &m), DLRT_OK);
  ck_assert_str_eq(dlrt_backend(m), "fake");
  ck_assert_int_eq(fake.live_allocs, 5); /* weights, arena, 1 input, 2 outputs */
  DlrtTensorInfo ti;
  ck_assert_int_eq(dlrt_input_info(m, 0, &ti), DLRT_OK);
  ck_assert_str_eq(ti.name, "x");
  ck_assert_int_eq(ti.rank, 2);
  ck_assert_int_eq(ti.dims[1], 3);
  ck_assert_int_eq(ti.nbytes, 24);
  ck_assert_int_eq(dlrt_output_info(m, 2, &ti), DLRT_E_ARG);
  ck_assert_int_eq(dlrt_find_output(m, "h"), 1);

  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_error(m), "run: input 'x' was never set");
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, 20), DLRT_E_ARG);
  ck_assert_str_eq(dlrt_error(m), "set_input 'x': 20 bytes given, it is 24 bytes");
  ck_assert_int_eq(dlrt_set_input_by_name(m, "x", x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);

  float y[4], h[6];
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output_by_name(m, "h", h, sizeof h), DLRT_OK);
  const float want_h[6] = {2.5f, 5, 7.5f, 8.5f, 11, 13.5f};
  const float want_y[4] = {10, 12.5f, 22, 24.5f};
  for (int i = 0; i < 6; i++) ck_assert_float_eq(h[i], want_h[i]);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], want_y[i]);

  /* New weights, same plan. */
  float w2[12];
  memcpy(w2, weights_blob, sizeof w2);
  w2[0] = 2;
  ck_assert_int_eq(dlrt_set_weights(m, w2, sizeof w2), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  ck_assert_float_eq(y[0], 12.5f);
  ck_assert_float_eq(y[2], 30.5f);
  dlrt_close(m);
  ck_assert_int_eq(fake.live_allocs, 0);
  ck_assert_int_eq(fake.destroyed, 1);
}
END_TEST

START_TEST(exec_out_of_memory) {
  DlrtModel *m = NULL;
  /* The weights (48) fit, the arena (64) does not. */
  ck_assert_int_eq(rt_model_open_device(&plan, fake_open(100), &m), DLRT_E_DEVICE);
  ck_assert_str_eq(dlrt_error(m),
                   "open: allocating the activation arena (64 bytes): fake: out of memory allocating 64 bytes");
  ck_assert_int_eq(fake.live_allocs, 0);
  ck_assert_int_eq(fake.destroyed, 1);
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_E_STATE);
  dlrt_close(m);
}
END_TEST

START_TEST(exec_broken_device) {
  DlrtModel *m = NULL;
  ck_assert_int_eq(rt_model_open_device(&plan, fake_open(1 << 20), &m), DLRT_OK);
  fake.fail_launch_at = 0;
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_BROKEN);
  ck_assert_str_eq(dlrt_error(m), "run: step 0 (add %1): fake: illegal address");
  float y[4];
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_E_BROKEN);
  ck_assert_str_eq(dlrt_error(m), "fake: illegal address");
  dlrt_close(m);
  ck_assert_int_eq(fake.live_allocs, 0);
}
END_TEST

START_TEST(exec_weights_from_safetensors) {
  plan.weights_data = NULL;
  DlrtModel *m = NULL;
  ck_assert_int_eq(rt_model_open_device(&plan, fake_open(1 << 20), &m), DLRT_OK);
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_STATE);
  ck_assert_str_eq(dlrt_error(m), "run: the weights were never loaded (dlrt_set_weights, dlrt_load_weights)");

  char path[] = "/tmp/dlcc-rt-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char *names[2] = {"bias", "w"};
  RtTensor ts[2] = {{.dtype = RT_F32, .rank = 1, .dims = {3}, .data = (void *)(weights_blob + 8), .nbytes = 12},
                    {.dtype = RT_F32, .rank = 2, .dims = {3, 2}, .data = (void *)weights_blob, .nbytes = 24}};
  RtTensorSet set = {.n = 2, .names = names, .tensors = ts};
  ck_assert_msg(rt_safetensors_write(path, &set, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(dlrt_load_weights(m, path), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  float y[4];
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  ck_assert_float_eq(y[3], 24.5f);

  ts[1].dims[0] = 2, ts[1].dims[1] = 3; /* same bytes, wrong shape */
  ck_assert_msg(rt_safetensors_write(path, &set, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(dlrt_load_weights(m, path), DLRT_E_ARG);
  char want[256];
  snprintf(want, sizeof want, "%s: tensor 'w' is f32[2,3], the model needs f32[3,2]", path);
  ck_assert_str_eq(dlrt_error(m), want);
  unlink(path);
  dlrt_close(m);
}
END_TEST

/* The same plan on the real emulator: the executor is device-neutral. */
START_TEST(exec_on_emu) {
  char dir[] = "/tmp/dlcc-emu-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("DLCC_CACHE_DIR", dir, 1);
  const char *top = getenv("top_srcdir");
  char header[4096];
  if (top && !getenv("DLCC_EMU_HEADER")) {
    snprintf(header, sizeof header, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", header, 1);
  }
  plan.source = add_bias_src;
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "emu", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_str_eq(dlrt_backend(m), "emu");
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  float y[4], h[6];
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output(m, 1, h, sizeof h), DLRT_OK);
  const float want_h[6] = {2.5f, 5, 7.5f, 8.5f, 11, 13.5f};
  const float want_y[4] = {10, 12.5f, 22, 24.5f};
  for (int i = 0; i < 6; i++) ck_assert_float_eq(h[i], want_h[i]);
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], want_y[i]);
  dlrt_close(m);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- the row-major -> column-major cuBLAS conversion, on the CPU ---- */

/* C = alpha op(A) op(B) + beta C as BLAS defines it: column-major,
 * element (i, j) of X at X[i + j * ldx]. */
static void blas_gemm_ref(const RtBlasGemm *x, float alpha, const float *a, const float *b, float beta, float *c) {
  for (int bi = 0; bi < x->batch; bi++) {
    const float *ab = a + bi * x->stride_a, *bb = b + bi * x->stride_b;
    float *cb = c + bi * x->stride_c;
    for (int j = 0; j < x->n; j++)
      for (int i = 0; i < x->m; i++) {
        double sum = 0;
        for (int l = 0; l < x->k; l++)
          sum += (double)(x->trans_a ? ab[l + (size_t)i * x->lda] : ab[i + (size_t)l * x->lda]) *
                 (x->trans_b ? bb[j + (size_t)l * x->ldb] : bb[l + (size_t)j * x->ldb]);
        double v = alpha * sum;
        if (beta != 0) v += beta * cb[i + (size_t)j * x->ldc];
        cb[i + (size_t)j * x->ldc] = (float)v;
      }
  }
}

static uint64_t lcg_state;
static int lcg(int n) {
  lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((lcg_state >> 33) % (uint64_t)n);
}

static float *random_floats(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)(lcg(7) - 3);
  return p;
}

/* Small integers, so both sides are exact and must agree bit for bit,
 * padding included (neither may write it). */
START_TEST(gemm_to_blas_matches_emu) {
  lcg_state = 12345;
  for (int iter = 0; iter < 400; iter++) {
    RtGemm g = {.dtype = RT_DT_F32, .trans_a = (uint32_t)lcg(2), .trans_b = (uint32_t)lcg(2)};
    g.m = 1 + lcg(7), g.n = 1 + lcg(7), g.k = lcg(8), g.batch = 1 + lcg(3);
    g.lda = (g.trans_a ? g.m : g.k) + lcg(3);
    g.ldb = (g.trans_b ? g.k : g.n) + lcg(3);
    g.ldc = g.n + lcg(3);
    if (g.lda < 1) g.lda = 1;
    if (g.ldb < 1) g.ldb = 1;
    int64_t rows_a = g.trans_a ? g.k : g.m, rows_b = g.trans_b ? g.n : g.k;
    /* A stride of 0 broadcasts one operand over the batch, as cuBLAS allows. */
    g.stride_a = lcg(3) == 0 ? 0 : rows_a * g.lda + lcg(3);
    g.stride_b = lcg(3) == 0 ? 0 : rows_b * g.ldb + lcg(3);
    g.stride_c = g.m * g.ldc + lcg(3);
    g.alpha = lcg(2) ? 1.0f : 2.0f;
    g.beta = lcg(2) ? 0.0f : 0.5f;
    size_t na = (size_t)((g.batch - 1) * g.stride_a + rows_a * g.lda);
    size_t nb = (size_t)((g.batch - 1) * g.stride_b + rows_b * g.ldb);
    size_t nc = (size_t)((g.batch - 1) * g.stride_c + g.m * g.ldc);
    float *a = random_floats(na), *b = random_floats(nb), *c_emu = random_floats(nc);
    float *c_blas = malloc(nc * sizeof *c_blas);
    memcpy(c_blas, c_emu, nc * sizeof *c_blas);
    RtBlasGemm x;
    ck_assert_msg(rt_gemm_to_blas(&g, &x, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(rt_emu_gemm(&g, a, b, c_emu, g.beta != 0.0f ? c_emu : NULL, NULL, err, sizeof err) == 0, "%s", err);
    blas_gemm_ref(&x, g.alpha, b, a, g.beta, c_blas); /* cuBLAS's A is the plan's b */
    for (size_t i = 0; i < nc; i++)
      ck_assert_msg(c_emu[i] == c_blas[i],
                    "iter %d: m %lld n %lld k %lld trans %u%u ld %lld,%lld,%lld batch %lld strides %lld,%lld,%lld: "
                    "C[%zu] emu %g, cuBLAS call %g",
                    iter, (long long)g.m, (long long)g.n, (long long)g.k, g.trans_a, g.trans_b, (long long)g.lda,
                    (long long)g.ldb, (long long)g.ldc, (long long)g.batch, (long long)g.stride_a,
                    (long long)g.stride_b, (long long)g.stride_c, i, c_emu[i], c_blas[i]);
    free(a), free(b), free(c_emu), free(c_blas);
  }
}
END_TEST

START_TEST(gemm_to_blas_swaps_operands) {
  /* The worked example in runtime/cuda.c, plus transposes and strides. */
  RtGemm g = {.dtype = RT_DT_F32, .trans_a = 1, .m = 2, .n = 4, .k = 3, .lda = 2, .ldb = 4, .ldc = 5,
              .batch = 6, .stride_a = 0, .stride_b = 12, .stride_c = 10};
  RtBlasGemm x;
  ck_assert_int_eq(rt_gemm_to_blas(&g, &x, err, sizeof err), 0);
  ck_assert_int_eq(x.trans_a, 0);
  ck_assert_int_eq(x.trans_b, 1);
  ck_assert_int_eq(x.m, 4);
  ck_assert_int_eq(x.n, 2);
  ck_assert_int_eq(x.k, 3);
  ck_assert_int_eq(x.lda, 4);
  ck_assert_int_eq(x.ldb, 2);
  ck_assert_int_eq(x.ldc, 5);
  ck_assert_int_eq(x.stride_a, 12);
  ck_assert_int_eq(x.stride_b, 0);
  ck_assert_int_eq(x.stride_c, 10);
  ck_assert_int_eq(x.batch, 6);
  g.m = (int64_t)1 << 31;
  ck_assert_int_eq(rt_gemm_to_blas(&g, &x, err, sizeof err), -1);
  ck_assert_str_eq(err, "cublas: gemm 2147483648x4x3 (batch 6, ld 2,4,5) exceeds cuBLAS's int range");
}
END_TEST

#ifdef HAVE_CUDA
/* ---- NVRTC and the kernel cache ---- */

static const char *good_src =
    "extern \"C\" __global__ void scale(float *x, float s, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] *= s;\n"
    "}\n";
static const RtKernel good_kernels[] = {{.name = "scale"}};

static char cache_dir[64];

static void cache_setup(void) {
  setup();
  snprintf(cache_dir, sizeof cache_dir, "/tmp/dlcc-cache-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(cache_dir));
  setenv("DLCC_CACHE_DIR", cache_dir, 1);
  rt_nvrtc_reset();
  plan.source = good_src;
  plan.kernels = good_kernels;
}

static void cache_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* The one entry in the cache folder. */
static void entry_path(char *out, size_t len) {
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ls %s/*.cubin", cache_dir);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(fgets(out, (int)len, p));
  pclose(p);
  out[strcspn(out, "\n")] = 0;
}

START_TEST(nvrtc_cubin_sm90) {
  void *bin;
  size_t size;
  ck_assert_msg(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_gt(size, 64);
  ck_assert_int_eq(memcmp(bin, "\x7f" "ELF", 4), 0);
  free(bin);
}
END_TEST

START_TEST(nvrtc_cache_hit_and_corruption) {
  void *first, *bin;
  size_t first_size, size;
  RtNvrtcStats st;
  ck_assert_msg(rt_nvrtc_compile(&plan, "sm_90", &first, &first_size, err, sizeof err) == 0, "%s", err);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_hits, 0);
  ck_assert_int_eq(st.cache_writes, 1);

  /* Same process: the memo. */
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), 0);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.memo_hits, 1);
  free(bin);

  /* "New process": the disk, no NVRTC call, the same bytes. */
  rt_nvrtc_reset();
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), 0);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 0);
  ck_assert_int_eq(st.cache_hits, 1);
  ck_assert_uint_eq(size, first_size);
  ck_assert_int_eq(memcmp(bin, first, size), 0);
  free(bin);

  /* One flipped payload byte: refused, recompiled, rewritten. */
  char path[256];
  entry_path(path, sizeof path);
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 200, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 200, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
  rt_nvrtc_reset();
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), 0);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.cache_corrupt, 1);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_hits, 0);
  ck_assert_int_eq(memcmp(bin, first, size), 0);
  ck_assert_msg(strstr(rt_nvrtc_last_note(), "is corrupt (payload hash mismatch); recompiling"), "%s",
                rt_nvrtc_last_note());
  free(bin);

  /* Truncated: refused too; the rewritten entry then hits again. */
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(truncate(path, sb.st_size / 2), 0);
  rt_nvrtc_reset();
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), 0);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.cache_corrupt, 1);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_msg(strstr(rt_nvrtc_last_note(), "(truncated or extended payload)"), "%s", rt_nvrtc_last_note());
  free(bin);
  rt_nvrtc_reset();
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), 0);
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.cache_hits, 1);
  ck_assert_int_eq(st.compiles, 0);
  free(bin);
  free(first);
}
END_TEST

START_TEST(nvrtc_syntax_error_names_kernel) {
  static const RtKernel two[] = {{.name = "scale"}, {.name = "broken_add"}};
  char src[1024];
  snprintf(src, sizeof src, "%s\nextern \"C\" __global__ void broken_add(float *x) {\n  x[0] = 1 +;\n}\n",
           good_src);
  plan.source = src;
  plan.kernels = two;
  plan.n_kernels = 2;
  void *bin = NULL;
  size_t size;
  ck_assert_int_eq(rt_nvrtc_compile(&plan, "sm_90", &bin, &size, err, sizeof err), -1);
  ck_assert_ptr_null(bin);
  ck_assert_msg(!strncmp(err, "nvrtc: compiling model 't' for sm_90 failed in kernel 'broken_add' (t.cu line 7): ",
                         82),
                "%s", err);
  ck_assert_msg(strstr(err, "t.cu(7): error") != NULL, "the log is missing: %s", err);
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 1);
  ck_assert_int_eq(st.cache_writes, 0);
}
END_TEST

/* ---- cuda.c over tests/fake_cuda.c (a libcuda.so.1 on host memory) ---- */


static bool have_real_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) dlclose(lib);
  return lib != NULL;
}

/* The fake's own counters, through the handle cuda.c also holds. */
static void *fake_lib(void) {
  void *lib = dlopen(getenv("DLCC_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(lib);
  return lib;
}

static void fake_cuda_setup(void) {
  const char *b = getenv("top_builddir");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/.libs/libfakecuda.so", b ? b : ".");
  ck_assert_msg(access(path, R_OK) == 0, "%s is missing", path);
  cache_setup();
  setenv("DLCC_LIBCUDA", path, 1);
  unsetenv("FAKECUDA_MEM_LIMIT");
  unsetenv("FAKECUDA_SYNC_ERROR");
  unsetenv("FAKECUDA_STATIC_SHARED");
  unsetenv("FAKECUDA_MAX_THREADS");
  unsetenv("FAKECUDA_NUM_REGS");
  unsetenv("FAKECUDA_BLOCKS_PER_SM");
  plan.source = add_bias_src;
  plan.kernels = kernels;
  /* cuBLAS needs a real driver: the gemm becomes a copy of the input. */
  steps[1] = (RtStep){.kind = RT_STEP_COPY,
                      .label = "copy x",
                      .copy = {.dst = {RT_SPACE_OUTPUT, 1, 0}, .src = {RT_SPACE_INPUT, 0, 0}, .nbytes = 24}};
  plan.n_steps = 2;
}

START_TEST(cuda_fake_driver_runs_plan) {
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "auto", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_str_eq(dlrt_backend(m), "cuda");
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 1); /* the fake has no cubin: NVRTC for sm_90 */
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  float h[6];
  ck_assert_int_eq(dlrt_get_output(m, 1, h, sizeof h), DLRT_OK);
  for (int i = 0; i < 6; i++) ck_assert_float_eq(h[i], x_in[i]);
  void *lib = dlopen(getenv("DLCC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(lib);
  int (*launches)(void) = (int (*)(void))dlsym(lib, "fakecuda_launches");
  ck_assert_ptr_nonnull(launches);
  ck_assert_int_eq(launches(), 1);
  dlclose(lib);
  dlrt_close(m);
}
END_TEST

START_TEST(cuda_fake_out_of_memory) {
  setenv("FAKECUDA_MEM_LIMIT", "100", 1);
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_DEVICE);
  ck_assert_str_eq(dlrt_error(m), "open: allocating the activation arena (64 bytes): cuda: cuMemAlloc(64 bytes): "
                                  "CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  dlrt_close(m);
}
END_TEST

START_TEST(cuda_fake_sticky_error) {
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  setenv("FAKECUDA_SYNC_ERROR", "700", 1);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_BROKEN);
  const char *why = "cuda: cuStreamSynchronize (a kernel or copy failed): CUDA_ERROR_ILLEGAL_ADDRESS (an illegal "
                    "memory access was encountered); the GPU context is unusable now, close the model (the fault "
                    "may lie in an earlier step: CUDA_LAUNCH_BLOCKING=1 names it)";
  char want[512];
  snprintf(want, sizeof want, "run: %s", why);
  ck_assert_str_eq(dlrt_error(m), want);
  unsetenv("FAKECUDA_SYNC_ERROR");
  float h[6];
  ck_assert_int_eq(dlrt_get_output(m, 1, h, sizeof h), DLRT_E_BROKEN);
  ck_assert_str_eq(dlrt_error(m), why);
  /* Closing the last broken model resets the primary context, so that
   * the next model in this process starts on a sound one; not while
   * another model still has memory in it. */
  void *lib = fake_lib();
  int (*resets)(void) = (int (*)(void))dlsym(lib, "fakecuda_resets");
  ck_assert_ptr_nonnull(resets);
  int before = resets();
  DlrtModel *other = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &other) == DLRT_OK, "%s", dlrt_error(other));
  dlrt_close(m);
  ck_assert_int_eq(resets(), before);
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  setenv("FAKECUDA_SYNC_ERROR", "700", 1);
  ck_assert_int_eq(dlrt_run(m), DLRT_E_BROKEN);
  unsetenv("FAKECUDA_SYNC_ERROR");
  dlrt_close(other);
  dlrt_close(m);
  ck_assert_int_eq(resets(), before + 1);
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  ck_assert_int_eq(resets(), before + 1);
  dlclose(lib);
}
END_TEST

/* A cooperative kernel: cuLaunchCooperativeKernel, after the load
 * checked that its grid fits the GPU at the occupancy the driver gives. */
START_TEST(cuda_fake_cooperative_launch) {
  static const RtKernel coop[] = {{.name = "add_bias", .uses_barriers = 1, .cooperative = 1}};
  plan.kernels = coop;
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  void *lib = fake_lib();
  int (*calls)(const char *) = (int (*)(const char *))dlsym(lib, "fakecuda_calls");
  ck_assert_ptr_nonnull(calls);
  ck_assert_int_eq(calls("cuOccupancyMaxActiveBlocksPerMultiprocessor"), 1);
  ck_assert_int_eq(calls("cuLaunchCooperativeKernel"), 1);
  ck_assert_int_eq(calls("cuLaunchKernel"), 0);
  dlrt_close(m);
  /* A GPU that holds none of its blocks at once refuses the model. */
  setenv("FAKECUDA_BLOCKS_PER_SM", "0", 1);
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  unsetenv("FAKECUDA_BLOCKS_PER_SM");
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: step 0 launches cooperative kernel "
                                  "'add_bias' on 2 blocks of 4 threads, but this GPU holds 0 at once (132 SMs x 0); "
                                  "dlcc --no-persistent-rnn builds recurrent layers without cooperative kernels");
  dlrt_close(m);
  dlclose(lib);
}
END_TEST

/* A chain (RT_COOP_STRIDE) walks its launch's blocks, so it launches on
 * as many as the GPU holds at once, at most the plan's: 132 SMs x 2
 * where the plan asks for 1000, the plan's 2 where it asks for those; a
 * GPU that holds none refuses it, naming --no-chain-launches. */
START_TEST(cuda_fake_chain_launch) {
  static const RtKernel chain[] = {{.name = "add_bias", .uses_barriers = 1, .cooperative = RT_COOP_STRIDE}};
  plan.kernels = chain;
  void *lib = fake_lib();
  unsigned (*grid_x)(void) = (unsigned (*)(void))dlsym(lib, "fakecuda_coop_grid_x");
  ck_assert_ptr_nonnull(grid_x);
  setenv("FAKECUDA_BLOCKS_PER_SM", "2", 1);
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  ck_assert_uint_eq(grid_x(), 2);
  dlrt_close(m);
  contracts[0].grid[0] = steps[0].launch.grid[0] = 1000;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_set_input(m, 0, x_in, sizeof x_in), DLRT_OK);
  ck_assert_int_eq(dlrt_run(m), DLRT_OK);
  ck_assert_uint_eq(grid_x(), 264);
  dlrt_close(m);
  setenv("FAKECUDA_BLOCKS_PER_SM", "0", 1);
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  unsetenv("FAKECUDA_BLOCKS_PER_SM");
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: step 0 launches cooperative kernel "
                                  "'add_bias' on blocks of 4 threads, of which this GPU cannot hold even one per SM; "
                                  "dlcc --no-chain-launches builds it as separate launches");
  dlrt_close(m);
  contracts[0].grid[0] = steps[0].launch.grid[0] = 2;
  dlclose(lib);
}
END_TEST

/* A plan in two code parts (RtPlan.n_code_parts): each part's NVRTC
 * compile holds its own kernels alone (DL_PART picks them), the device
 * loads a module per part and finds each kernel in its part's, from
 * NVRTC or from the plan's binaries of each part; a kernel in the wrong
 * part is not found, and a part past the plan's is refused at open. */
START_TEST(cuda_fake_code_parts) {
  static const char two[] = "#if !defined(DL_PART) || DL_PART == 0\n"
                            "extern \"C\" __global__ void add_bias() {}\n"
                            "#endif\n"
                            "#if !defined(DL_PART) || DL_PART == 1\n"
                            "extern \"C\" __global__ void other_part() {}\n"
                            "#endif\n";
  RtKernel parts[2] = {{.name = "add_bias", .part = 0}, {.name = "other_part", .part = 1}};
  plan.source = two;
  plan.kernels = parts;
  plan.n_kernels = 2;
  plan.n_code_parts = 2;
  void *bin[2];
  size_t size[2];
  for (int q = 0; q < 2; q++) {
    ck_assert_msg(rt_nvrtc_compile_part(&plan, "sm_90", q, &bin[q], &size[q], err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(memmem(bin[q], size[q], parts[q].name, strlen(parts[q].name) + 1));
    ck_assert_ptr_null(memmem(bin[q], size[q], parts[1 - q].name, strlen(parts[1 - q].name) + 1));
  }
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  /* the binaries of both parts: no NVRTC at all */
  RtBinary bins[2] = {{.arch = "sm_90", .part = 1, .data = bin[1], .size = size[1]},
                      {.arch = "sm_90", .part = 0, .data = bin[0], .size = size[0]}};
  plan.binaries = bins;
  plan.n_binaries = 2;
  plan.source = NULL;
  rt_nvrtc_reset();
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles + st.memo_hits + st.cache_hits, 0);
  dlrt_close(m);
  parts[0].part = 1;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: cuModuleGetFunction('add_bias'): "
                                  "CUDA_ERROR_NOT_FOUND (named symbol not found)");
  dlrt_close(m);
  parts[0].part = 2;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_PLAN);
  ck_assert_str_eq(dlrt_error(m), "plan: kernel 0 (add_bias) is in code part 2 of 2");
  dlrt_close(m);
  free(bin[0]), free(bin[1]);
}
END_TEST

START_TEST(cuda_fake_missing_kernel) {
  static const RtKernel other[] = {{.name = "not_in_source"}};
  plan.kernels = other;
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: cuModuleGetFunction('not_in_source'): "
                                  "CUDA_ERROR_NOT_FOUND (named symbol not found)");
  dlrt_close(m);
}
END_TEST

/* Float products open cuBLASLt, int8 ones cuBLAS; without a GPU each
 * says so. */
START_TEST(cuda_fake_cublas_without_gpu) {
  if (have_real_driver()) return; /* cuBLAS would find the real one */
  make_plan();
  plan.source = add_bias_src;
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cublasLt: cublasLtCreate: "
                                  "CUBLAS_STATUS_NOT_INITIALIZED (the library was not initialized)");
  dlrt_close(m);
  steps[1].gemm.dtype = RT_DT_I8;
  steps[1].gemm.lda = steps[1].gemm.ldb = steps[1].gemm.k = 4; /* cuBLAS's int8 rules */
  steps[1].gemm.trans_b = 1;
  steps[1].gemm.a.offset = 0;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_msg(strstr(dlrt_error(m), "open: loading the kernels of 't': cublas: cublasCreate: CUBLAS_STATUS_"),
                "%s", dlrt_error(m));
  dlrt_close(m);
}
END_TEST


START_TEST(cuda_fake_dynamic_shared_opt_in) {
  void *lib = fake_lib();
  int (*opt_in)(void) = (int (*)(void))dlsym(lib, "fakecuda_max_dynamic_shared");
  ck_assert_ptr_nonnull(opt_in);
  contracts[0].dynamic_shared_bytes = steps[0].launch.dynamic_shared_bytes = 40 * 1024;
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(opt_in(), -1); /* 40 KiB alone is under the 48 KiB default */
  dlrt_close(m);
  /* With 16 KiB of static shared memory the sum passes 48 KiB. */
  setenv("FAKECUDA_STATIC_SHARED", "16384", 1);
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(opt_in(), 40 * 1024);
  dlrt_close(m);
  contracts[0].dynamic_shared_bytes = steps[0].launch.dynamic_shared_bytes = 300 * 1024;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: kernel 'add_bias' needs 307200 bytes of "
                                  "dynamic and 16384 of static shared memory; a block on this GPU may have 232448");
  dlrt_close(m);
  unsetenv("FAKECUDA_STATIC_SHARED");
  dlclose(lib);
}
END_TEST

START_TEST(cuda_fake_grid_limit) {
  contracts[0].grid[1] = steps[0].launch.grid[1] = 70000;
  DlrtModel *m = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: step 0 launches 'add_bias' with grid "
                                  "2x70000x1, block 4x1x1: gridDim.y exceeds this GPU's 65535");
  dlrt_close(m);
  /* A kernel whose registers allow fewer threads than the block has. */
  contracts[0].grid[1] = steps[0].launch.grid[1] = 1;
  setenv("FAKECUDA_MAX_THREADS", "2", 1);
  setenv("FAKECUDA_NUM_REGS", "255", 1);
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: step 0 launches 'add_bias' with 4 threads "
                                  "a block; compiled with 255 registers a thread, it may have 2");
  dlrt_close(m);
  unsetenv("FAKECUDA_MAX_THREADS");
  unsetenv("FAKECUDA_NUM_REGS");
}
END_TEST

/* A plan's own cubin for this arch is loaded as is: no NVRTC. */
START_TEST(cuda_fake_prefers_plan_cubin) {
  void *cubin, *ptx;
  size_t cubin_size, ptx_size;
  ck_assert_msg(rt_nvrtc_compile(&plan, "sm_90", &cubin, &cubin_size, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(rt_nvrtc_compile(&plan, "compute_90", &ptx, &ptx_size, err, sizeof err) == 0, "%s", err);
  RtBinary bins[2] = {{.arch = "compute_90", .data = ptx, .size = ptx_size},
                      {.arch = "sm_90", .data = cubin, .size = cubin_size}};
  plan.binaries = bins;
  plan.n_binaries = 2;
  plan.source = NULL;
  rt_nvrtc_reset();
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles + st.memo_hits + st.cache_hits, 0);
  dlrt_close(m);
  /* PTX alone (the driver JITs it) does as well. */
  plan.binaries = bins;
  plan.n_binaries = 1;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  /* An arch-specific cubin of this arch serves. */
  bins[0].arch = "sm_90a";
  bins[0].data = cubin;
  bins[0].size = cubin_size;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  dlrt_close(m);
  /* PTX for a newer GPU, or arch-specific PTX of an older one, or a cubin
   * of another arch, is no use on 9.0. */
  bins[0].arch = "compute_100";
  bins[0].data = ptx;
  bins[0].size = ptx_size;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  dlrt_close(m);
  bins[0].arch = "compute_89a";
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  dlrt_close(m);
  bins[0].arch = "sm_89";
  bins[0].data = cubin;
  bins[0].size = cubin_size;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  ck_assert_str_eq(dlrt_error(m), "open: loading the kernels of 't': cuda: the model has no code for this GPU "
                                  "(sm_90): no sm_90 cubin, no PTX at or below compute_90, no source to compile");
  dlrt_close(m);
  free(cubin);
  free(ptx);
}
END_TEST

/* A cubin the driver refuses: NVRTC when there is source, else the
 * driver's words and its JIT log. */
START_TEST(cuda_fake_bad_cubin) {
  static const char junk[] = "not a cubin";
  RtBinary bins[1] = {{.arch = "sm_90", .data = junk, .size = sizeof junk}};
  plan.binaries = bins;
  plan.n_binaries = 1;
  DlrtModel *m = NULL;
  ck_assert_msg(dlrt_open(&plan, "cuda", &m) == DLRT_OK, "%s", dlrt_error(m));
  RtNvrtcStats st;
  rt_nvrtc_stats(&st);
  ck_assert_int_eq(st.compiles, 1);
  dlrt_close(m);
  plan.source = NULL;
  ck_assert_int_eq(dlrt_open(&plan, "cuda", &m), DLRT_E_COMPILE);
  const char *e = dlrt_error(m);
  ck_assert_msg(!strncmp(e, "open: loading the kernels of 't': cuda: cuModuleLoadDataEx(sm_90 cubin; driver for "
                            "CUDA 13.0, NVRTC ", 100), "%s", e);
  ck_assert_msg(strstr(e, "): fake: the image is neither ELF nor PTX: CUDA_ERROR_INVALID_IMAGE (device kernel image "
                          "is invalid)"), "%s", e);
  dlrt_close(m);
}
END_TEST

START_TEST(nvrtc_target_arch) {
  char arch[16];
  ck_assert_msg(rt_nvrtc_target(90, arch, sizeof arch, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(arch, "sm_90a"); /* the arch-specific target: wgmma */
  setenv("DLCC_NO_WGMMA", "1", 1);
  ck_assert_msg(rt_nvrtc_target(90, arch, sizeof arch, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(arch, "sm_90");
  unsetenv("DLCC_NO_WGMMA");
  ck_assert_msg(rt_nvrtc_target(80, arch, sizeof arch, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(arch, "sm_80");
  /* A GPU this NVRTC does not know: PTX of the newest arch below it. */
  ck_assert_msg(rt_nvrtc_target(91, arch, sizeof arch, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(arch, "compute_90");
  ck_assert_int_eq(rt_nvrtc_target(10, arch, sizeof arch, err, sizeof err), -1);
  ck_assert_msg(!strncmp(err, "nvrtc: this NVRTC targets compute capability ", 45), "%s", err);
  ck_assert_msg(strstr(err, "and newer; the GPU is 1.0"), "%s", err);
}
END_TEST
#endif

static Suite *runtime_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("plan");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, sha256_vectors);
  tcase_add_test(tc, plan_valid);
  tcase_add_test(tc, plan_bad_magic);
  tcase_add_test(tc, plan_wrong_version);
  tcase_add_test(tc, plan_ref_out_of_range);
  tcase_add_test(tc, plan_ref_bad_output_index);
  tcase_add_test(tc, plan_bad_kernel_index);
  tcase_add_test(tc, plan_bad_cooperative_flag);
  tcase_add_test(tc, plan_bad_arg_kind);
  tcase_add_test(tc, plan_gemm_past_buffer);
  tcase_add_test(tc, plan_gemm_epilogue);
  tcase_add_test(tc, plan_gemm_bias_grad);
  tcase_add_test(tc, plan_gemm_c_in);
  tcase_add_test(tc, plan_gemm_writes_weights);
  tcase_add_test(tc, plan_desc_size_mismatch);
  tcase_add_test(tc, plan_copy_overlap);
  suite_add_tcase(s, tc);

  tc = tcase_create("device");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, cuda_without_driver);
  tcase_add_test(tc, device_unknown_backend);
  tcase_add_test(tc, open_refuses_foreign_plan);
  tcase_add_test(tc, open_cuda_without_driver);
  tcase_add_test(tc, open_file_not_a_model);
  suite_add_tcase(s, tc);

  tc = tcase_create("executor");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, exec_two_steps);
  tcase_add_test(tc, exec_out_of_memory);
  tcase_add_test(tc, exec_broken_device);
  tcase_add_test(tc, exec_weights_from_safetensors);
  tcase_add_test(tc, exec_on_emu);
  tcase_add_test(tc, gemm_to_blas_matches_emu);
  tcase_add_test(tc, gemm_to_blas_swaps_operands);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);

#ifdef HAVE_CUDA
  tc = tcase_create("nvrtc");
  tcase_add_checked_fixture(tc, cache_setup, cache_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, nvrtc_cubin_sm90);
  tcase_add_test(tc, nvrtc_cache_hit_and_corruption);
  tcase_add_test(tc, nvrtc_syntax_error_names_kernel);
  tcase_add_test(tc, nvrtc_target_arch);
  suite_add_tcase(s, tc);

  tc = tcase_create("fake_driver");
  tcase_add_checked_fixture(tc, fake_cuda_setup, cache_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cuda_fake_driver_runs_plan);
  tcase_add_test(tc, cuda_fake_out_of_memory);
  tcase_add_test(tc, cuda_fake_sticky_error);
  tcase_add_test(tc, cuda_fake_missing_kernel);
  tcase_add_test(tc, cuda_fake_code_parts);
  tcase_add_test(tc, cuda_fake_cooperative_launch);
  tcase_add_test(tc, cuda_fake_cublas_without_gpu);
  tcase_add_test(tc, cuda_fake_dynamic_shared_opt_in);
  tcase_add_test(tc, cuda_fake_grid_limit);
  tcase_add_test(tc, cuda_fake_chain_launch);
  tcase_add_test(tc, cuda_fake_prefers_plan_cubin);
  tcase_add_test(tc, cuda_fake_bad_cubin);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(runtime_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
