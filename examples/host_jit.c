/* JIT from a host program: compiles a model with the compiler API
 * (include/dlcc.h), gives it random weights (seed 0, as `dlcc run` and
 * `dlcc -o model.so` draw them), fills every input with a fixed pattern,
 * runs it and prints every output value.
 *
 *     host_jit [MODEL.dl [BACKEND [INPUT_DIR]]]
 *
 * MODEL.dl defaults to examples/mlp.dl, BACKEND to auto (cuda when a GPU
 * answers, else emu; also emu, cuda, ref).  With INPUT_DIR it also writes
 * each f32 input it used as INPUT_DIR/NAME.npy, for `dlcc run --input`.
 * Output: for each output a line "output NAME COUNT", then one value a
 * line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlcc.h"

/* The pattern examples/host_aot.c uses too: exact in float. */
static float pattern(int64_t k) { return (float)((k * 7919) % 2001) / 1000.0f - 1.0f; }

/* A NumPy .npy (version 1.0) of f32 data. */
static int write_npy(const char *path, const dlc_tensor_info *t, const float *data) {
  char header[256];
  int n = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < t->rank; i++) n += snprintf(header + n, sizeof header - n, "%" PRId64 ", ", t->dims[i]);
  n += snprintf(header + n, sizeof header - n, "), }");
  while ((10 + n + 1) % 64) header[n++] = ' ';
  header[n++] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  unsigned char lead[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
  fwrite(lead, 1, sizeof lead, f);
  fwrite(header, 1, (size_t)n, f);
  fwrite(data, 1, t->nbytes, f);
  return fclose(f);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/mlp.dl";
  dlc_options opt = {.backend = argc > 2 ? argv[2] : "auto"};
  const char *input_dir = argc > 3 ? argv[3] : NULL;

  dlc_model *m;
  if (dlc_compile_file(path, &opt, &m) != DLC_OK || dlc_init_weights(m, 0) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    dlc_free(m);
    return 1;
  }
  fprintf(stderr, "host_jit: %s on %s\n", path, dlc_backend(m));

  for (int i = 0; i < dlc_num_inputs(m); i++) {
    dlc_tensor_info t;
    dlc_input_info(m, i, &t);
    size_t n = t.nbytes / dlc_dtype_size(t.dtype);
    void *data = malloc(t.nbytes ? t.nbytes : 1);
    if (!data) return 1;
    for (size_t k = 0; k < n; k++) {
      if (t.dtype == DLC_F32) ((float *)data)[k] = pattern((int64_t)k);
      else if (t.dtype == DLC_I64) ((int64_t *)data)[k] = (int64_t)k % (t.index_bound ? t.index_bound : 10);
      else if (t.dtype == DLC_I32) ((int32_t *)data)[k] = (int32_t)((int64_t)k % (t.index_bound ? t.index_bound : 10));
      else memset(data, 0, t.nbytes);
    }
    if (input_dir && t.dtype == DLC_F32) {
      char file[4096];
      snprintf(file, sizeof file, "%s/%s.npy", input_dir, t.name);
      if (write_npy(file, &t, data)) {
        perror(file);
        return 1;
      }
    }
    dlc_status s = dlc_set_input(m, t.name, data, t.nbytes);
    free(data);
    if (s != DLC_OK) {
      fputs(dlc_error(m), stderr);
      dlc_free(m);
      return 1;
    }
  }

  if (dlc_run(m) != DLC_OK) {
    fputs(dlc_error(m), stderr);
    dlc_free(m);
    return 1;
  }
  for (int i = 0; i < dlc_num_outputs(m); i++) {
    dlc_tensor_info t;
    const void *data;
    size_t nbytes;
    dlc_output_info(m, i, &t);
    dlc_get_output(m, i, &data, &nbytes);
    if (t.dtype != DLC_F32) {
      printf("output %s 0 (%s: not printed)\n", t.name, dlc_dtype_name(t.dtype));
      continue;
    }
    size_t n = nbytes / sizeof(float);
    printf("output %s %zu\n", t.name, n);
    for (size_t k = 0; k < n; k++) printf("%.9g\n", ((const float *)data)[k]);
  }
  dlc_free(m);
  return 0;
}
