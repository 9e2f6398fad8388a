/* libFuzzer target for the .dl language: takes any bytes as a source file
 * and runs the scanner, the parser and lowering.  Rejected input must
 * leave located errors; an accepted model must lower to a graph that
 * verifies and round-trips through the IR text. */
#include <stdlib.h>

#include "frontend/ast.h"
#include "tests/fuzz/fuzz.h"

static int run(Ctx *c, void *data) {
  FuzzText *in = data;
  Program *p = fe_parse(c, ctx_add_file(c, "fuzz.dl", in->text, in->len));
  if (!p) {
    fuzz_require_diag("fe_parse", c);
    return 1;
  }
  fe_dump_ast(fuzz_devnull(), p);
  /* Budgets a thousandth of the defaults: the limits themselves are
   * tested elsewhere, and at full size one loop takes seconds here. */
  LowerOptions opt = {.max_ops = 20000, .max_steps = 200000};
  Graph *g = fe_lower(c, p, &opt);
  if (!g) {
    fuzz_require_diag("fe_lower", c);
    return 1;
  }
  if (c->diag.errors) fuzz_fail("fe_lower returned a graph after errors:\n%s", diag_text(c));
  free(fuzz_check_graph(c, g, "fe_lower"));
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_run_text(data, size, run);
  return 0;
}
