/* libFuzzer target for serialized ONNX TensorProtos (the backend tests'
 * input_0.pb, read by `dlcc run --input x=x.pb`) and the SequenceProto
 * and OptionalProto files read beside them (fe_onnx_read_value, a
 * hand-written wire reader): takes any bytes as the
 * file, written beside ext.bin so external data resolves.  Rejected
 * input must leave a message; an accepted tensor must have a name, data
 * (possibly empty) and a type dlcc can hold. */
#include <stdlib.h>

#include "frontend/onnx.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *path = fuzz_model_file("tensor.pb", data, size);
  Tensor t;
  char *name = NULL;
  char err[1024] = "";
  if (!fe_onnx_read_tensor(path, &t, &name, err, sizeof err)) {
    fuzz_require_message("fe_onnx_read_tensor", err);
    if (t.data || name) fuzz_fail("a rejected tensor left data or a name");
  } else {
    if (!name || !t.data) fuzz_fail("an accepted tensor has no name or no data");
    /* empty tensors (a dim of 0) are ONNX's and accepted */
    if (t.type.rank < 0 || t.type.rank > DL_MAX_RANK || ir_type_numel(&t.type) < 0)
      fuzz_fail("an accepted tensor has a bad shape (rank %d)", t.type.rank);
    ir_tensor_free(&t);
    free(name);
  }
  /* the same bytes as a sequence or optional (the tensor first) */
  Tensor ts[8];
  char *names[8];
  int n = -1;
  bool one;
  err[0] = 0;
  if (!fe_onnx_read_value(path, 8, &n, ts, names, &one, err, sizeof err)) {
    fuzz_require_message("fe_onnx_read_value", err);
    if (n != 0) fuzz_fail("a rejected value counted %d tensors", n);
  } else {
    if (n < 0 || n > 8) fuzz_fail("an accepted value has %d tensors", n);
    for (int i = 0; i < n; i++) {
      if (!names[i] || (!ts[i].data && ir_type_numel(&ts[i].type) > 0)) fuzz_fail("element %d has no name or data", i);
      ir_tensor_free(&ts[i]);
      free(names[i]);
    }
  }
  free(path);
  return 0;
}
