/* libFuzzer target for everything after the readers: takes one flags
 * byte and then a .dl model (or IR text, when it starts with "; dlcc
 * IR"); an accepted graph goes through the pass pipeline and codegen to a
 * launch plan (no NVRTC: too slow per input).  The flags byte v picks the
 * pipeline: v mod 3 the -O level; v/3 mod 4 f32, f16, bf16 or int8 (a
 * fixed calibration, no evaluation); v/12 odd --no-unroll, v/24 odd
 * --no-vectorize, so the printable characters cover every pipeline.  The
 * pipeline must not fail on a verified graph and must leave one that
 * verifies and round-trips; codegen may refuse with a message, and a plan
 * it gives must pass the runtime's plan validation. */
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "passes/pass.h"
#include "runtime/runtime.h"
#include "tests/fuzz/fuzz.h"

/* Ranges a calibrator might choose, without running the graph. */
static bool calibrate(void *ud, Graph *g, int n, const Value *const *values, double *amax) {
  for (int i = 0; i < n; i++) amax[i] = 0.5 + (double)(i % 4);
  return true;
}

static Graph *read_graph(Ctx *c, const FuzzText *in) {
  bool is_ir = in->len >= 9 && memcmp(in->text, "; dlcc IR", 9) == 0;
  const SrcFile *f = ctx_add_file(c, is_ir ? "fuzz.ir" : "fuzz.dl", in->text, in->len);
  if (is_ir) {
    Graph *g = ir_parse(c, f);
    return g && ir_verify(g) ? g : NULL;
  }
  Program *p = fe_parse(c, f);
  /* Smaller than fuzz_dl's budgets: every op goes on through codegen. */
  LowerOptions lo = {.max_ops = 2000, .max_steps = 50000};
  return p ? fe_lower(c, p, &lo) : NULL;
}

static int run(Ctx *c, void *data) {
  FuzzText *in = data;
  if (in->len == 0) return 1;
  unsigned flags = (unsigned char)in->text[0];
  FuzzText rest = {in->text + 1, in->len - 1};
  Graph *g = read_graph(c, &rest);
  if (!g) {
    fuzz_require_diag("reading the graph", c);
    return 1;
  }
  static const DType precisions[] = {TY_F32, TY_F16, TY_BF16, TY_F32};
  unsigned mode = flags / 3 % 4;
  PassOptions po = {
      .opt_level = (int)(flags % 3),
      .verify_each = true,
      .precision = precisions[mode],
      .quantize_int8 = mode == 3,
      .calibrate = calibrate,
      .no_unroll = flags / 12 % 2,
      .no_vectorize = flags / 24 % 2,
  };
  if (!pass_run_pipeline(g, &po, NULL)) fuzz_fail("the pass pipeline failed on a verified graph:\n%s", diag_text(c));
  free(fuzz_check_graph(c, g, "the pass pipeline"));
  CgOptions co = {.no_unroll = po.no_unroll, .no_vectorize = po.no_vectorize};
  CgResult cg;
  if (!cg_compile_opts(g, &co, &cg)) {
    fuzz_require_diag("cg_compile", c);
    return 1;
  }
  char err[1024] = "";
  if (!cg.plan || !cg.source) fuzz_fail("cg_compile succeeded without a plan or source");
  if (rt_plan_validate(cg.plan, err, sizeof err) != 0) fuzz_fail("codegen's plan fails validation: %s", err);
  cg_print_plan(fuzz_devnull(), cg.plan);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_run_text(data, size, run);
  return 0;
}
