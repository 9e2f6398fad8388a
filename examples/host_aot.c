/* Ahead of time from a host program: runs the model.so that
 *
 *     dlcc examples/mlp.dl -o mlp.so
 *
 * built, through the header it wrote beside it (mlp.h: the entry points,
 * every input's and output's name, dtype and shape), linked directly:
 *
 *     cc host_aot.c -I. mlp.so $(pkg-config --cflags --libs dlcrt) \
 *        -Wl,-rpath,'$ORIGIN' -o host_aot
 *
 * No compiler at run time: libdlcrt loads the plan, the weights and the
 * kernels from mlp.so.  Prints the outputs as examples/host_jit.c does,
 * for the same input pattern, so that the two can be compared.
 *
 *     host_aot [BACKEND]          (auto, cuda or emu; default auto) */
#include <stdio.h>

#include "mlp.h"

static float pattern(int64_t k) { return (float)((k * 7919) % 2001) / 1000.0f - 1.0f; }

int main(int argc, char **argv) {
  static float x[MLP_INPUT0_NUMEL], y[MLP_OUTPUT0_NUMEL];
  for (int64_t k = 0; k < MLP_INPUT0_NUMEL; k++) x[k] = pattern(k);

  DlrtModel *m;
  if (mlp_open(argc > 1 ? argv[1] : "auto", &m) != DLRT_OK) {
    fprintf(stderr, "host_aot: %s\n", dlrt_error(m));
    dlrt_close(m);
    return 1;
  }
  fprintf(stderr, "host_aot: model %s on %s\n", MLP_MODEL_NAME, dlrt_backend(m));
  if (mlp_run(m, x, y) != DLRT_OK) {
    fprintf(stderr, "host_aot: %s\n", dlrt_error(m));
    dlrt_close(m);
    return 1;
  }
  printf("output %s %d\n", MLP_OUTPUT0_NAME, MLP_OUTPUT0_NUMEL);
  for (int k = 0; k < MLP_OUTPUT0_NUMEL; k++) printf("%.9g\n", y[k]);
  dlrt_close(m);
  return 0;
}
