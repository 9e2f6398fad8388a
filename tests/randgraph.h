/* Random valid graphs for differential tests of the passes: a seed and a
 * size in, a verified graph out (the same graph for the same seed). */
#ifndef DLCC_TESTS_RANDGRAPH_H
#define DLCC_TESTS_RANDGRAPH_H

#include <stdint.h>

#include "ir/ir.h"

/* About n_ops ops drawn from the op table over a few inputs, params and
 * consts: elementwise with broadcasting, reductions, reshapes,
 * transposes, slices, concats, casts, linear, conv2d + batchnorm, and the
 * patterns passes look for (x*1, transpose pairs, duplicates, const-only
 * expressions, scale/shift chains).  Values stay finite for inputs in
 * [-2, 2] and params from ir_init_params. */
Graph *rg_build(Ctx *c, uint64_t seed, int n_ops);

#endif
