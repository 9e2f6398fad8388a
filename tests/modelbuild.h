/* Compiling a model as dlcc would, in one numeric mode, for the programs
 * that measure compiled models (tests/sass_kernels, tests/gpu/layer_bench):
 * takes a model file (.dl, or .ir) or IR text, a mode (f32, f16, bf16 or
 * int8) and -D defines; returns the codegen result, or false after
 * reporting to the Ctx.  int8 is calibrated with one fixed range for
 * every activation: the ranges are immediates in the kernels and change
 * neither their shape nor their speed, and a real calibration of
 * ResNet-50 at batch 64 would take the interpreter most of an hour. */
#ifndef DLCC_TESTS_MODELBUILD_H
#define DLCC_TESTS_MODELBUILD_H

#include <stdbool.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"

typedef struct ModelBuild {
  const char *path; /* a file, or NULL: text is IR */
  const char *text;
  const char *mode;
  int n_defines;
  const Define *defines;
  CgOptions opts; /* codegen's (zero: the defaults) */
  bool no_nhwc;   /* --no-nhwc */
  CgResult cg;    /* out */
} ModelBuild;

bool test_build_model(Ctx *c, ModelBuild *b);

#endif
