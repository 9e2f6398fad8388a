/* Compiles a model for tests/sass_kernels and tests/gpu/layer_bench
 * (modelbuild.h says what it takes and returns). */
#include "tests/modelbuild.h"

#include <string.h>

#include "ir/ir.h"
#include "passes/pass.h"

enum { FIXED_RANGE = 4 };

static bool fixed_ranges(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  (void)ud, (void)g, (void)values;
  for (int i = 0; i < n; i++) amax[i] = FIXED_RANGE;
  return true;
}

static Graph *load(Ctx *c, const ModelBuild *b) {
  const SrcFile *f = b->path ? ctx_load_file(c, b->path) : ctx_add_file(c, "layer.ir", b->text, strlen(b->text));
  if (!f) return NULL;
  size_t n = strlen(f->name);
  if (n > 3 && !strcmp(f->name + n - 3, ".ir")) return ir_parse(c, f);
  Program *p = fe_parse(c, f);
  LowerOptions lo = {.n_defines = b->n_defines, .defines = b->defines};
  return p ? fe_lower(c, p, &lo) : NULL;
}

static int build_job(Ctx *c, void *data) {
  ModelBuild *b = data;
  Graph *g = load(c, b);
  if (!g || !ir_verify(g)) return 1;
  PassOptions po = {.opt_level = 2, .no_nhwc = b->no_nhwc};
  if (!strcmp(b->mode, "int8")) {
    po.quantize_int8 = true;
    po.calibrate = fixed_ranges;
  } else if (!ir_dtype_from_name(b->mode, &po.precision)) {
    diag_error(c, (SrcLoc){0}, "unknown mode '%s' (f32, f16, bf16 or int8)", b->mode);
    return 1;
  }
  return pass_run_pipeline(g, &po, NULL) && cg_compile_opts(g, &b->opts, &b->cg) ? 0 : 1;
}

bool test_build_model(Ctx *c, ModelBuild *b) { return ctx_guard(c, build_job, b) == 0; }
