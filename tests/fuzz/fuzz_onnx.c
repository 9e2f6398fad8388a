/* libFuzzer target for ONNX import: takes any bytes as a serialized
 * ModelProto, imported as if it were a file in a directory holding
 * ext.bin (so external data resolves).  Rejected input must leave an
 * error; an accepted model must give a graph that verifies and
 * round-trips through the IR text, and exactly one tensor of the param's
 * type for every param. */
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx.h"
#include "tests/fuzz/fuzz.h"

static char *model_path;

static void check_params(Graph *g, const TensorMap *params) {
  int n_params = 0;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM) continue;
    n_params++;
    const char *name = ir_attr_str(n, "name");
    const Tensor *t = ir_tensor_map_find(params, name);
    if (!t) fuzz_fail("param '%s' has no tensor", name);
    if (!ir_type_eq(&t->type, &n->out[0].type) || !t->data)
      fuzz_fail("param '%s': its tensor is not of its type, or has no data", name);
  }
  for (int i = 0; i < params->n; i++)
    for (int k = 0; k < i; k++)
      if (strcmp(params->names[i], params->names[k]) == 0) fuzz_fail("two tensors named '%s'", params->names[i]);
  if (params->n != n_params) fuzz_fail("%d params in the graph, %d tensors", n_params, params->n);
}

static int run(Ctx *c, void *data) {
  FuzzText *in = data;
  /* Folding at import evaluates ops: keep what it may compute small.
   * A while loop unrolls to a bound, as under dlcc --loop-bound. */
  OnnxOwn own;
  OnnxOptions oo = {.max_fold_elems = 1 << 16, .own = &own, .loop_bound = 8};
  TensorMap params;
  Graph *g = fe_onnx_import_bytes(c, model_path, in->text, in->len, &oo, &params);
  if (!g) {
    if (params.n || own.values.n)
      fuzz_fail("a rejected model returned %d params, %d own values", params.n, own.values.n);
    fuzz_require_diag("fe_onnx_import_bytes", c);
    return 1;
  }
  check_params(g, &params);
  /* the model's own values: every param once (with or without data),
   * and the derived ones first */
  if (own.n_derived > own.values.n) fuzz_fail("%d derived of %d own values", own.n_derived, own.values.n);
  for (int i = 0; i < own.values.n; i++) {
    const Tensor *p = ir_tensor_map_find(&params, own.values.names[i]);
    if (i < own.n_derived && (!p || !own.values.tensors[i].data))
      fuzz_fail("derived value '%s' is not a param with data", own.values.names[i]);
    if (p && !ir_type_eq(&p->type, &own.values.tensors[i].type))
      fuzz_fail("own '%s' is not its param's type", own.values.names[i]);
  }
  ir_tensor_map_free(&own.values);
  ir_tensor_map_free(&params);
  free(fuzz_check_graph(c, g, "fe_onnx_import_bytes"));
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!model_path) model_path = fuzz_model_file("fuzz.onnx", "", 0);
  fuzz_run_text(data, size, run);
  return 0;
}
