/* libFuzzer target for NumPy .npy files (`dlcc run --input`, calibration
 * folders): takes any bytes as the file.  Rejected input must leave a
 * message and no data; an accepted array must hold exactly its shape's
 * bytes and, written back by rt_npy_write, read back equal. */
#include <string.h>

#include "runtime/tensorio.h"
#include "tests/fuzz/fuzz.h"

static FuzzFile in_file, out_file;

static void check_tensor(const RtTensor *t) {
  int64_t n = rt_numel(t);
  if (t->rank < 0 || t->rank > RT_MAX_RANK || n < 0 || !t->data ||
      t->nbytes != (size_t)n * (size_t)rt_dtype_size(t->dtype))
    fuzz_fail("an accepted array is inconsistent: rank %d, %zu bytes of %s", t->rank, t->nbytes,
              rt_dtype_name(t->dtype));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_file.path[0]) {
    fuzz_file_open(&in_file, "in.npy");
    fuzz_file_open(&out_file, "out.npy");
  }
  fuzz_file_set(&in_file, data, size);
  RtTensor t, back;
  char err[1024] = "";
  if (rt_npy_read(in_file.path, &t, err, sizeof err) < 0) {
    fuzz_require_message("rt_npy_read", err);
    if (t.data) fuzz_fail("a rejected array left data");
    return 0;
  }
  check_tensor(&t);
  if (rt_npy_write(out_file.path, &t, err, sizeof err) < 0) fuzz_fail("rt_npy_write: %s", err);
  if (rt_npy_read(out_file.path, &back, err, sizeof err) < 0) fuzz_fail("reading back what rt_npy_write wrote: %s", err);
  check_tensor(&back);
  if (back.dtype != t.dtype || back.rank != t.rank || memcmp(back.dims, t.dims, sizeof t.dims[0] * (size_t)t.rank) ||
      back.nbytes != t.nbytes || (t.nbytes && memcmp(back.data, t.data, t.nbytes)))
    fuzz_fail("an array written and read back differs from the one read");
  rt_tensor_free(&t);
  rt_tensor_free(&back);
  return 0;
}
