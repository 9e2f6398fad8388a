/* libFuzzer target for serialized ONNX TensorProtos (the backend tests'
 * input_0.pb, read by `dlcc run --input x=x.pb`): takes any bytes as the
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
  free(path);
  return 0;
}
