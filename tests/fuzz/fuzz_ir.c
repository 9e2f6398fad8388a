/* libFuzzer target for the IR text format: takes any bytes as a .ir
 * file.  Rejected input (by the parser or the verifier) must leave
 * errors; an accepted graph must print, parse back and print the same. */
#include <stdlib.h>

#include "tests/fuzz/fuzz.h"

static int run(Ctx *c, void *data) {
  FuzzText *in = data;
  Graph *g = ir_parse(c, ctx_add_file(c, "fuzz.ir", in->text, in->len));
  if (!g) {
    fuzz_require_diag("ir_parse", c);
    return 1;
  }
  /* The parser checks syntax and names; types are the verifier's. */
  if (!ir_verify(g)) {
    fuzz_require_diag("ir_verify", c);
    return 1;
  }
  free(fuzz_check_graph(c, g, "ir_parse"));
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_run_text(data, size, run);
  return 0;
}
