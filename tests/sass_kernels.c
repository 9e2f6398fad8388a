/* For tests/sass_check.sh: takes a model file, a precision (f32, f16,
 * bf16 or int8), an output folder and -D NAME=VALUE defines (and
 * --no-persistent-rnn, codegen's option); compiles the
 * model at -O2 as dlcc would, its kernels with NVRTC (the runtime's, with
 * its disk cache) for sm_90, or sm_90a when a kernel uses wgmma, and
 * writes DIR/model.cubin and DIR/kernels.txt:
 *   arch sm_90
 *   run NAME FLOPS                      the run's FLOPs (the cost model's)
 *   gemm DTYPE FLOPS LABEL              each cuBLAS step of a run
 *   kernel NAME FLOPS LAUNCHES THREADS DYN_SHARED TC MIN_BLOCKS ASYNC_A ASYNC_B
 * one kernel line per kernel of the plan: the run's FLOPs its launches
 * carry, its largest block and dynamic shared memory over every launch,
 * TC 1 when its text calls the tensor-core instructions (dl_mma_*,
 * wgmma), MIN_BLOCKS its __launch_bounds__ blocks per SM (1 without),
 * ASYNC_A and ASYNC_B its cp.async call sites into a tensor-core GEMM's
 * A and B stages (B: a convolution's im2col operand, by cp.async in
 * layout nhwc).
 * int8 with tests/modelbuild's fixed ranges.  Exits 1 with a message on
 * any error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/runtime.h"
#include "tests/modelbuild.h"

enum { MAX_DEFINES = 8 };

typedef struct Job {
  const char *dir;
  ModelBuild b;
} Job;

/* The text of kernel name: its __global__ line to the emu launcher. */
static const char *kernel_text(const char *src, const char *name, size_t *len) {
  char call[256];
  snprintf(call, sizeof call, " %s(", name);
  for (const char *p = strstr(src, "__global__"); p; p = strstr(p + 1, "__global__")) {
    const char *eol = strchr(p, '\n'), *at = strstr(p, call);
    if (!at || (eol && at > eol)) continue;
    const char *end = strstr(p, "#ifdef DLCC_EMU");
    *len = end ? (size_t)(end - p) : strlen(p);
    return p;
  }
  *len = 0;
  return NULL;
}

static int occurrences(const char *text, size_t len, const char *what) {
  size_t n = strlen(what);
  int count = 0;
  for (size_t i = 0; text && i + n <= len; i++) count += !memcmp(text + i, what, n);
  return count;
}

static bool has(const char *text, size_t len, const char *what) { return occurrences(text, len, what) > 0; }

/* __launch_bounds__(threads, blocks): blocks, else 1. */
static int min_blocks(const char *text, size_t len) {
  const char *lb = text ? strstr(text, "__launch_bounds__(") : NULL;
  int threads, blocks;
  if (!lb || (size_t)(lb - text) >= len || sscanf(lb, "__launch_bounds__(%d, %d)", &threads, &blocks) != 2)
    return 1;
  return blocks;
}

static const char *dtype_name(uint32_t dt) {
  static const char *const names[] = {"f32", "f16", "bf16", "i8"};
  return dt <= RT_DT_I8 ? names[dt] : "?";
}

static int write_report(const Job *j, const char *arch) {
  const RtPlan *p = j->b.cg.plan;
  char path[4096];
  snprintf(path, sizeof path, "%s/kernels.txt", j->dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  const IrCost *run = j->b.cg.step_costs ? j->b.cg.step_costs + p->n_init_steps : NULL;
  double total = 0;
  for (uint32_t s = 0; run && s < p->n_steps; s++) total += run[s].flops;
  fprintf(f, "arch %s\nrun %s %.0f\n", arch, p->model_name, total);
  for (uint32_t s = 0; s < p->n_steps; s++)
    if (p->steps[s].kind == RT_STEP_GEMM)
      fprintf(f, "gemm %s %.0f %s\n", dtype_name(p->steps[s].gemm.dtype), run ? run[s].flops : 0, p->steps[s].label);
  for (uint32_t k = 0; k < p->n_kernels; k++) {
    double flops = 0;
    uint64_t threads = 0, launches = 0;
    uint32_t dyn = 0;
    for (uint32_t s = 0; s < p->n_init_steps + p->n_steps; s++) {
      bool init = s < p->n_init_steps;
      const RtStep *st = init ? &p->init_steps[s] : &p->steps[s - p->n_init_steps];
      if (st->kind != RT_STEP_LAUNCH || st->launch.kernel != k) continue;
      const RtLaunch *l = &st->launch;
      uint64_t t = (uint64_t)l->block[0] * l->block[1] * l->block[2];
      threads = t > threads ? t : threads;
      dyn = l->dynamic_shared_bytes > dyn ? l->dynamic_shared_bytes : dyn;
      launches++;
      if (!init && run) flops += run[s - p->n_init_steps].flops;
    }
    size_t len;
    const char *text = kernel_text(p->source, p->kernels[k].name, &len);
    bool tc = text && (has(text, len, "dl_mma_") || has(text, len, "wgmma"));
    fprintf(f, "kernel %s %.0f %llu %llu %u %d %d %d %d\n", p->kernels[k].name, flops, (unsigned long long)launches,
            (unsigned long long)threads, dyn, tc, min_blocks(text, len), occurrences(text, len, "dl_cp_async16(&As"),
            occurrences(text, len, "dl_cp_async16(&Bs"));
  }
  return fclose(f) ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: sass_kernels MODEL f32|f16|bf16|int8 DIR [-D NAME=VALUE]... [--no-persistent-rnn] [--tf32]\n");
    return 2;
  }
  Define defines[MAX_DEFINES];
  Job j = {.dir = argv[3], .b = {.path = argv[1], .mode = argv[2], .defines = defines}};
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "--no-persistent-rnn")) {
      j.b.opts.no_persistent_rnn = true;
      continue;
    }
    if (!strcmp(argv[i], "--tf32")) {
      j.b.opts.tf32 = true;
      continue;
    }
    if (!strcmp(argv[i], "--no-nhwc")) {
      j.b.no_nhwc = true;
      continue;
    }
    const char *d = !strcmp(argv[i], "-D") && i + 1 < argc ? argv[++i] : argv[i];
    const char *eq = strchr(d, '=');
    if (!eq || j.b.n_defines == MAX_DEFINES) {
      fprintf(stderr, "sass_kernels: bad define '%s'\n", d);
      return 2;
    }
    defines[j.b.n_defines++] = (Define){strndup(d, (size_t)(eq - d)), strtoll(eq + 1, NULL, 10)};
  }
  Ctx c;
  ctx_init(&c);
  if (!test_build_model(&c, &j.b)) {
    fprintf(stderr, "sass_kernels: %s %s:\n%s", j.b.path, j.b.mode, diag_text(&c));
    return 1;
  }
  const char *arch = strstr(j.b.cg.source, "wgmma") ? "sm_90a" : "sm_90";
  void *bin = NULL;
  size_t size = 0;
  char err[4096], path[4096];
  if (rt_nvrtc_compile(j.b.cg.plan, arch, &bin, &size, err, sizeof err)) {
    fprintf(stderr, "sass_kernels: %s %s: %s\n", j.b.path, j.b.mode, err);
    return 1;
  }
  snprintf(path, sizeof path, "%s/model.cubin", j.dir);
  FILE *f = fopen(path, "wb");
  int rc = !f || fwrite(bin, 1, size, f) != size;
  if (f) rc |= fclose(f) != 0;
  free(bin);
  if (rc) {
    perror(path);
    return 1;
  }
  rc = write_report(&j, arch);
  for (int i = 0; i < j.b.n_defines; i++) free((void *)defines[i].name);
  ctx_free(&c);
  return rc;
}
