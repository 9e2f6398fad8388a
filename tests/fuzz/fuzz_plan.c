/* libFuzzer target for the plan reader: what libdlcrt does with a sealed
 * plan of unknown health (runtime/seal.c, runtime/plan.c, the executor
 * in runtime/model.c).  A plan with every kind of table and blob is laid
 * out in one heap block, as a model.so holds it (pointers into the block
 * where the loader would have relocated them); the input XORs bytes of
 * that block anywhere, pointers included.  Then:
 *   - the seal's walk, bounded by the block: ASan stops any read outside;
 *   - with the first input byte odd, the plan is sealed again as a
 *     crafter would, and rt_plan_validate must stand alone;
 *   - a plan that validates is opened and run on a fake device that
 *     checks, independently of the validator, that every launch keeps its
 *     contract and every pointer extent, GEMM operand and copy lies
 *     inside one of the device's allocations (abort() otherwise); its
 *     kernels write index reports, so the STATUS reader runs too.
 * There is no dlopen: a model.so's plan is C data, and this is that data.
 *
 * make check builds and runs it with the other targets (tests/fuzz.mk,
 * docs/fuzzing.md); tests/fuzz/run.sh BUILD_DIR SECONDS plan runs it
 * longer.  Or from the source tree alone (no configure needed):
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -fno-sanitize-recover=undefined -I. -Iinclude tests/fuzz/fuzz_plan.c \
 *     runtime/plan.c runtime/seal.c runtime/model.c runtime/device.c runtime/elf.c \
 *     runtime/safetensors.c runtime/npy.c runtime/fileio.c runtime/emu_gemm.c -lcjson -lm -o fuzz_plan
 *   ./fuzz_plan -max_total_time=60 -rss_limit_mb=2048 -timeout=10 corpus/ */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcrt.h"
#include "runtime/runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* device.c opens these by name; this target only uses its own device. */
RtDevice *rt_cuda_open(char *err, size_t errlen) {
  snprintf(err, errlen, "no cuda here");
  return NULL;
}
RtDevice *rt_emu_open(char *err, size_t errlen) {
  snprintf(err, errlen, "no emu here");
  return NULL;
}

/* ---- the plan, laid out in one block ---- */

enum { IMAGE = 8192 };

typedef struct Image {
  unsigned char *base;
  size_t used;
} Image;

static void *put(Image *im, const void *src, size_t n) {
  im->used = (im->used + 15) & ~(size_t)15;
  if (im->used + n > IMAGE) abort(); /* the template outgrew IMAGE */
  void *at = im->base + im->used;
  memcpy(at, src, n);
  im->used += n;
  return at;
}

static const char *put_str(Image *im, const char *s) { return put(im, s, strlen(s) + 1); }

static RtTensorDesc desc(Image *im, const char *name, uint32_t dtype, int64_t d0, int64_t d1, RtRef where) {
  RtTensorDesc t = {.name = put_str(im, name), .dtype = dtype, .rank = 2, .dims = {d0, d1}, .where = where};
  t.nbytes = (uint64_t)(d0 * d1 * rt_dtype_bytes(dtype));
  return t;
}

/* A table of descs, side by side as the plan's arrays are (their names
 * put first). */
static const RtTensorDesc *put_descs(Image *im, int n, const RtTensorDesc *t) {
  return put(im, t, sizeof *t * (size_t)n);
}

/* A gather into the arena (reports in STATUS), a ranged timestep kernel
 * into output 0, a GEMM and a copy into output 1; an init step filling
 * the derived region; the weights, source and a binary. */
static RtPlan *build(Image *im) {
  RtPlan plan = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .weights_bytes = 512, .derived_bytes = 256,
                 .arena_bytes = 512, .status_bytes = 32, .sealed = RT_PLAN_SEALED};
  RtPlan *p = put(im, &plan, sizeof plan);
  p->model_name = put_str(im, "fuzz");
  p->source = put_str(im, "extern \"C\" __global__ void gather_1(const long long *i, const float *t, long long *r, "
                          "float *o, int n) {}\n");
  RtKernel k[2] = {{.name = put_str(im, "gather_1")}, {.name = put_str(im, "step_2"), .uses_barriers = 1}};
  p->kernels = put(im, k, sizeof k), p->n_kernels = 2;
  RtParam gp[5] = {{RT_ARG_PTR, RT_ACCESS_READ, 48, 0, 0},
                   {RT_ARG_PTR, RT_ACCESS_READ, 96, 0, 0},
                   {RT_ARG_PTR, RT_ACCESS_READ | RT_ACCESS_WRITE, 32, 0, 0},
                   {RT_ARG_PTR, RT_ACCESS_WRITE, 96, 0, 0},
                   {RT_ARG_I32, 0, 0, 24, 24}};
  RtParam sp[3] = {{RT_ARG_PTR, RT_ACCESS_READ, 96, 0, 0}, {RT_ARG_PTR, RT_ACCESS_WRITE, 96, 0, 0},
                   {RT_ARG_I64, 0, 0, 0, 5}};
  RtContract c[2] = {
      {.kernel = 0, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_params = 5, .params = put(im, gp, sizeof gp)},
      {.kernel = 1, .grid = {2, 1, 1}, .block = {64, 1, 1}, .n_params = 3, .params = put(im, sp, sizeof sp)}};
  p->contracts = put(im, c, sizeof c), p->n_contracts = 2;
  RtArg ga[5] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_INPUT, 0, 0}},
                 {.kind = RT_ARG_PTR, .ref = {RT_SPACE_WEIGHTS, 0, 0}},
                 {.kind = RT_ARG_PTR, .ref = {RT_SPACE_STATUS, 0, 0}},
                 {.kind = RT_ARG_PTR, .ref = {RT_SPACE_ARENA, 0, 0}},
                 {.kind = RT_ARG_I32, .i = 24}};
  RtArg sa[3] = {{.kind = RT_ARG_PTR, .ref = {RT_SPACE_ARENA, 0, 0}},
                 {.kind = RT_ARG_PTR, .ref = {RT_SPACE_OUTPUT, 0, 0}},
                 {.kind = RT_ARG_I64, .i = 3}};
  RtStep s[4] = {
      {.kind = RT_STEP_LAUNCH, .label = put_str(im, "gather %1"), .origin = put_str(im, "f.dl:1:2: gather"),
       .launch = {.kernel = 0, .contract = 0, .grid = {1, 1, 1}, .block = {32, 1, 1}, .n_args = 5,
                  .args = put(im, ga, sizeof ga)}},
      {.kind = RT_STEP_LAUNCH, .label = put_str(im, "step %2"),
       .launch = {.kernel = 1, .contract = 1, .grid = {2, 1, 1}, .block = {64, 1, 1}, .n_args = 3,
                  .args = put(im, sa, sizeof sa)}},
      {.kind = RT_STEP_GEMM, .label = put_str(im, "matmul %3"),
       .gemm = {.dtype = RT_DT_F32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1, .alpha = 1,
                .a = {RT_SPACE_ARENA, 0, 0}, .b = {RT_SPACE_WEIGHTS, 0, 256}, .c = {RT_SPACE_ARENA, 0, 256}}},
      {.kind = RT_STEP_COPY, .label = put_str(im, "copy %3"),
       .copy = {.dst = {RT_SPACE_OUTPUT, 1, 0}, .src = {RT_SPACE_ARENA, 0, 256}, .nbytes = 16}}};
  p->steps = put(im, s, sizeof s), p->n_steps = 4;
  RtStep init = {.kind = RT_STEP_COPY, .label = put_str(im, "fold %4"),
                 .copy = {.dst = {RT_SPACE_WEIGHTS, 0, 512}, .src = {RT_SPACE_WEIGHTS, 0, 256}, .nbytes = 16}};
  p->init_steps = put(im, &init, sizeof init), p->n_init_steps = 1;
  RtTensorDesc w[2] = {desc(im, "table", RT_DT_F32, 6, 4, (RtRef){RT_SPACE_WEIGHTS, 0, 0}),
                       desc(im, "w2", RT_DT_F32, 2, 2, (RtRef){RT_SPACE_WEIGHTS, 0, 256})};
  p->weights = put_descs(im, 2, w), p->n_weights = 2;
  RtTensorDesc in = desc(im, "idx", RT_DT_I64, 6, 1, (RtRef){RT_SPACE_INPUT, 0, 0});
  p->inputs = put_descs(im, 1, &in), p->n_inputs = 1;
  RtTensorDesc o[2] = {desc(im, "y", RT_DT_F32, 6, 4, (RtRef){RT_SPACE_OUTPUT, 0, 0}),
                       desc(im, "z", RT_DT_F32, 2, 2, (RtRef){RT_SPACE_OUTPUT, 1, 0})};
  p->outputs = put_descs(im, 2, o), p->n_outputs = 2;
  float wd[128];
  for (int i = 0; i < 128; i++) wd[i] = (float)(i % 5) - 2;
  p->weights_data = put(im, wd, sizeof wd);
  unsigned char cubin[64];
  memset(cubin, 0x5a, sizeof cubin);
  RtBinary bin = {.arch = put_str(im, "sm_90"), .data = put(im, cubin, sizeof cubin), .size = sizeof cubin};
  p->binaries = put(im, &bin, sizeof bin), p->n_binaries = 1;
  rt_plan_seal(p, p->seal);
  return p;
}

/* ---- a device that checks what the validator promised ---- */

typedef struct Alloc {
  unsigned char *p;
  uint64_t n;
} Alloc;

static struct {
  Alloc a[16];
  int n;
  uint64_t total;
  const RtPlan *plan;
  uint8_t report; /* from the input: what the kernels report */
} dev;

/* [p, p + n) inside one allocation: memchr reads it all, under ASan. */
static void inside(RtDevPtr p, uint64_t n) {
  for (int i = 0; i < dev.n; i++) {
    uintptr_t lo = (uintptr_t)dev.a[i].p;
    if (p >= lo && p <= lo + dev.a[i].n && n <= lo + dev.a[i].n - p) {
      if (n) (void)!memchr((void *)(uintptr_t)p, 0x100, n);
      return;
    }
  }
  if (n) abort(); /* the validator let a step reach outside the model's memory */
}

struct RtModule {
  int unused;
};

static void f_destroy(RtDevice *d) { free(d); }
static int f_alloc(RtDevice *d, uint64_t n, RtDevPtr *out) {
  if (dev.n == 16 || n > (1 << 20) || dev.total + n > (4 << 20)) return rt_device_fail(d, "fake: out of memory");
  unsigned char *p = malloc(n ? n : 1);
  if (!p) return rt_device_fail(d, "fake: out of memory");
  dev.a[dev.n++] = (Alloc){p, n};
  dev.total += n;
  *out = (RtDevPtr)(uintptr_t)p;
  return 0;
}
static int f_free(RtDevice *d, RtDevPtr p) {
  (void)d;
  for (int i = 0; i < dev.n; i++)
    if ((uintptr_t)dev.a[i].p == p) {
      free(dev.a[i].p);
      dev.a[i] = dev.a[--dev.n];
      return 0;
    }
  abort(); /* freed what it never allocated */
}
static int f_upload(RtDevice *d, RtDevPtr dst, const void *src, uint64_t n) {
  (void)d;
  inside(dst, n);
  memcpy((void *)(uintptr_t)dst, src, n);
  return 0;
}
static int f_download(RtDevice *d, void *dst, RtDevPtr src, uint64_t n) {
  (void)d;
  inside(src, n);
  memcpy(dst, (void *)(uintptr_t)src, n);
  return 0;
}
static int f_copy(RtDevice *d, RtDevPtr dst, RtDevPtr src, uint64_t n) {
  (void)d;
  inside(dst, n), inside(src, n);
  memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return 0;
}
static int f_memset0(RtDevice *d, RtDevPtr dst, uint64_t n) {
  (void)d;
  inside(dst, n);
  memset((void *)(uintptr_t)dst, 0, n);
  return 0;
}
static int f_load(RtDevice *d, const RtPlan *p, RtModule **out) {
  (void)d;
  dev.plan = p;
  *out = calloc(1, sizeof **out);
  return *out ? 0 : -1;
}
static void f_unload(RtDevice *d, RtModule *m) {
  (void)d;
  free(m);
}
/* A kernel touches all it may, and reports a bad index when told to. */
static int f_launch(RtDevice *d, RtModule *m, const RtLaunch *l, const void *const *args) {
  (void)d, (void)m;
  const RtContract *c = &dev.plan->contracts[l->contract];
  if (c->kernel != l->kernel || memcmp(c->grid, l->grid, sizeof c->grid) ||
      memcmp(c->block, l->block, sizeof c->block) || c->n_params != l->n_args)
    abort();
  for (uint32_t j = 0; j < c->n_params; j++) {
    const RtParam *q = &c->params[j];
    if (q->kind != l->args[j].kind) abort();
    if (q->kind == RT_ARG_PTR) {
      RtDevPtr p = *(const RtDevPtr *)args[j];
      inside(p, q->nbytes);
      if (l->args[j].ref.space == RT_SPACE_STATUS && dev.report && q->nbytes >= 32) {
        int64_t words[RT_STATUS_WORDS] = {dev.report, -(int64_t)dev.report, 0, 6};
        memcpy((void *)(uintptr_t)p, words, sizeof words);
      }
    } else if (q->kind == RT_ARG_I32 || q->kind == RT_ARG_I64) {
      int64_t v = q->kind == RT_ARG_I32 ? *(const int32_t *)args[j] : *(const int64_t *)args[j];
      if (v < q->lo || v > q->hi) abort();
    }
  }
  return 0;
}
static int f_gemm(RtDevice *d, const RtGemm *g, RtDevPtr a, RtDevPtr b, RtDevPtr c, RtDevPtr c_in, RtDevPtr bias) {
  /* Small enough to compute: on the allocations themselves, under ASan. */
  if (g->m * g->n > 1 << 16 || g->k > 1 << 10 || g->batch > 64) return 0;
  char err[256];
  if (rt_emu_gemm(g, (const void *)(uintptr_t)a, (const void *)(uintptr_t)b, (void *)(uintptr_t)c,
                  (const void *)(uintptr_t)c_in, (void *)(uintptr_t)bias, err, sizeof err))
    return rt_device_fail(d, "%s", err);
  return 0;
}
static int f_sync(RtDevice *d) { return d->broken ? -1 : 0; }

static const RtDeviceOps ops = {.name = "fuzz", .destroy = f_destroy, .alloc = f_alloc, .free = f_free,
                                .upload = f_upload, .download = f_download, .copy = f_copy, .memset0 = f_memset0,
                                .load = f_load, .unload = f_unload, .launch = f_launch, .gemm = f_gemm,
                                .synchronize = f_sync};

static void run(RtPlan *p) {
  /* Validated over the block: from here its memory is known good. */
  p->sealed = 0;
  RtDevice *d = calloc(1, sizeof *d);
  if (!d) return;
  d->ops = &ops;
  DlrtModel *m = NULL;
  if (rt_model_open_device(p, d, &m) == DLRT_OK) {
    for (uint32_t i = 0; i < p->n_inputs; i++) {
      uint64_t n = p->inputs[i].nbytes;
      void *x = calloc(n ? n : 1, 1);
      if (x && n <= (1 << 20)) dlrt_set_input(m, (int)i, x, n);
      free(x);
    }
    dlrt_run(m);
    dlrt_run(m);
  }
  dlrt_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  Image im = {.base = malloc(IMAGE)};
  if (!im.base) return 0;
  memset(im.base, 0, IMAGE);
  RtPlan *p = build(&im);
  /* Bytes 1, 2: a position in the block; byte 3: what to XOR there. */
  for (size_t at = 1; at + 3 <= size; at += 3) {
    size_t pos = ((size_t)data[at] | (size_t)data[at + 1] << 8) % im.used;
    im.base[pos] ^= data[at + 2];
  }
  dev.report = data[0] >> 1;
  RtRegion block = {(uintptr_t)im.base, (uintptr_t)im.base + im.used};
  char err[1024];
  if (data[0] & 1) {
    uint64_t seal[RT_SEAL_COUNT];
    if (rt_plan_seal_in(p, &block, 1, seal, err, sizeof err) == 0) memcpy(p->seal, seal, sizeof seal);
  }
  if (rt_plan_validate_in(p, &block, 1, err, sizeof err) == 0) run(p);
  free(im.base);
  return 0;
}
