/* libFuzzer target for everything that reads models: the .dl frontend
 * (scanner, parser, lowering), for inputs that start with "; dlcc IR" the
 * IR text parser, and for inputs that start like a serialized ONNX
 * ModelProto (byte 0x08: field 1, ir_version) the ONNX importer; whatever
 * is accepted must also pass the verifier and print.  Built by
 * tests/fuzz/build.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "frontend/onnx.h"
#include "ir/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Input {
  const char *text;
  size_t len;
} Input;

static int compile(Ctx *c, void *data) {
  Input *in = data;
  bool is_ir = in->len >= 9 && memcmp(in->text, "; dlcc IR", 9) == 0;
  const SrcFile *f = ctx_add_file(c, is_ir ? "fuzz.ir" : "fuzz.dl", in->text, in->len);
  bool is_onnx = in->len >= 1 && (unsigned char)in->text[0] == 0x08;
  Graph *g;
  if (is_onnx) {
    /* Folding at import evaluates ops: keep what it may compute small. */
    OnnxOptions oo = {.max_fold_elems = 1 << 16};
    TensorMap params;
    g = fe_onnx_import_bytes(c, "fuzz.onnx", in->text, in->len, &oo, &params);
    ir_tensor_map_free(&params);
  } else if (is_ir) {
    g = ir_parse(c, f);
  } else {
    Program *p = fe_parse(c, f);
    if (!p) return 1;
    /* Budgets a thousandth of the defaults: the limits themselves are
     * tested elsewhere, and at full size one loop takes seconds here. */
    LowerOptions opt = {.max_ops = 20000, .max_steps = 200000};
    g = fe_lower(c, p, &opt);
  }
  if (!g) return 1;
  /* Anything the frontends accept is a well-formed graph. */
  if (!ir_verify(g)) abort();
  FILE *devnull = fopen("/dev/null", "w");
  if (devnull) {
    ir_print(devnull, g);
    ir_print_dot(devnull, g);
    fclose(devnull);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The parsers take a length, but a copy without a terminator lets ASan
   * catch any read past the end. */
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  memcpy(text, data, size);
  Ctx c;
  ctx_init(&c);
  Input in = {text, size};
  if (ctx_guard(&c, compile, &in) < 0) {
    /* An internal error is a bug even on garbage input. */
    fputs(diag_text(&c), stderr);
    abort();
  }
  ctx_free(&c);
  free(text);
  return 0;
}
