/* The command-line words the dlcc subcommands share: takes argv (and a
 * position in it), returns a flag's value, a checked number, or the
 * model-building words of dlcc run and dlcc train (-D, -O, --recompute,
 * the model file) stored into the API's options; prints why a word is
 * malformed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "frontend/onnx.h"

const char *driver_eq_value(const char *arg, const char *flag) {
  size_t n = strlen(flag);
  return strncmp(arg, flag, n) == 0 && arg[n] == '=' ? arg + n + 1 : NULL;
}

const char *driver_flag_value(int argc, char **argv, int *i, const char *flag) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] == 0 && *i + 1 < argc) return argv[++*i];
  return NULL;
}

bool driver_int_value(const char *option, const char *text, long lo, long hi, const char *expects, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (*end || end == text || errno || v < lo || v > hi) {
    fprintf(stderr, "dlcc: error: %s expects %s, got '%s'\n", option, expects, text);
    return false;
  }
  *out = (int)v;
  return true;
}

bool driver_real_value(const char *flag, const char *v, double lo, double hi, const char *expects, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (*end || end == v || errno || !(x >= lo && x <= hi)) {
    fprintf(stderr, "dlcc: error: %s expects %s, got '%s'\n", flag, expects, v);
    return false;
  }
  *out = x;
  return true;
}

bool driver_loop_bound(const char *text, int *out) {
  return driver_int_value("--loop-bound", text, 1, ONNX_MAX_UNROLL, "a number of steps from 1 to 1024", out);
}

int driver_model_word(int argc, char **argv, int *i, const char *cmd, DriverModelWords *m) {
  const char *a = argv[*i];
  if (strncmp(a, "-D", 2) == 0) {
    Define d;
    int taken = 0;
    if (!driver_take_define(argc, argv, i, &d, &taken, m->api->n_defines < DRIVER_MAX_DEFINES)) return 1;
    m->defines[m->api->n_defines++] = (dlc_define){d.name, d.value};
  } else if (a[0] == '-' && a[1] == 'O' && a[2] && !a[3]) {
    if (a[2] < '0' || a[2] > '2') {
      fprintf(stderr, "dlcc: error: unknown optimization level '%s' (expected -O0, -O1 or -O2)\n", a);
      return 1;
    }
    m->api->opt_level = a[2] == '0' ? DLC_O0 : a[2] - '0';
  } else if (strcmp(a, "--recompute") == 0 || strncmp(a, "--recompute=", 12) == 0) {
    m->api->recompute = a[11] ? a + 12 : "";
  } else if (strcmp(a, "--no-split-k") == 0) {
    m->api->no_split_k = 1;
  } else if (strcmp(a, "--no-merge-launches") == 0) {
    m->api->no_merge_launches = 1;
  } else if (strcmp(a, "--no-chain-launches") == 0) {
    m->api->no_chain_launches = 1;
  } else if (strcmp(a, "--unroll-rnn") == 0) {
    m->api->unroll_rnn = 1;
  } else if (strcmp(a, "--tf32") == 0) {
    m->api->tf32 = 1;
  } else if (strncmp(a, "--loop-bound=", 13) == 0) {
    if (!driver_loop_bound(a + 13, &m->api->loop_bound)) return 1;
  } else if (a[0] == '-') {
    fprintf(stderr, "dlcc: error: unknown option '%s' for %s (see dlcc %s --help)\n", a, cmd, cmd);
    return 1;
  } else if (*m->model_path) {
    fprintf(stderr, "dlcc: error: more than one model ('%s' and '%s')\n", *m->model_path, a);
    return 1;
  } else {
    *m->model_path = a;
  }
  return 0;
}
