/* What the convolution suites (test_tcgemm, test_depthwise) share: a
 * conv2d/3d or conv_transpose2d/3d graph as IR text from a Conv, random
 * inputs, and a run on emu against ir_eval. */
#ifndef DLCC_TESTS_CONVCHECK_H
#define DLCC_TESTS_CONVCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "tests/irjob.h"

typedef struct Conv {
  const char *what;
  const char *dt; /* the operands' type: f16, bf16, i8, f32 */
  int nsp;
  int64_t n, c, co, groups, in[3], k[3], stride[3], pad[6], dil[3];
  bool bias;
  const char *pro; /* an elementwise op on x inside the group, or NULL */
  bool w_cast;     /* w an f32 input cast inside the group: computed on load */
  bool relu;       /* a relu after the conv */
  int zero_point;  /* int8 */
  bool relu6;      /* clip [0, 6] after the conv (after bn) */
  bool bn;         /* a batchnorm of inputs after the conv */
  bool residual;   /* + an input of the output's shape, last */
  bool transpose;  /* conv_transpose: w [c, co/groups, k...] */
  int64_t opad[3]; /* conv_transpose's output_pad */
} Conv;

int64_t conv_out_dim(const Conv *p, int d);
/* The graph "conv" (malloc'd text): inputs x, w (b, bn's g, beta, mu,
 * var, r), output y. */
char *conv_text(const Conv *p);
/* emu against ir_eval on inputs U(-1, 1) (i8 and i32: integers in
 * [-100, 100], batchnorm's variance in [0.5, 1.5]) from seed: the largest
 * error over the output's scale; for integers 0 when every byte agrees,
 * else 1. */
double conv_run_against_eval(Job *j, uint64_t seed);
/* Whether every atomic of src is a counter's (the arrival prelude's):
 * nothing is added by atomics, so sums keep a fixed order. */
bool conv_no_atomic_sums(const char *src);
/* The first step whose label has s, or NULL. */
const char *conv_step_with(const RtPlan *p, const char *s);
/* Four units in the last place of the output's scale for f16 and bf16
 * (each side rounds its sum to the type once), else 0. */
double conv_tolerance(const char *dt);

#endif
