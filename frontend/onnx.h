/* ONNX import: takes an ONNX ModelProto (a .onnx file, read with
 * protobuf-c) and returns a checked graph whose initializers are params,
 * together with those params' data, so a model carries its own weights.
 * Built only when configure found libprotobuf-c (HAVE_ONNX); otherwise
 * every entry point reports that ONNX support is missing. */
#ifndef DLCC_FRONTEND_ONNX_H
#define DLCC_FRONTEND_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "frontend/ast.h"
#include "frontend/dims.h"
#include "ir/eval.h"
#include "ir/ir.h"

/* An ONNX model's own values that a weights file need not give, by name
 * (OnnxOptions.own), in this order:
 *   - [0, n_derived): the derived params' (a Constant, a value folded at
 *     import: the param attribute `derived`), which PyTorch's state_dict
 *     has no key for;
 *   - the other params that are no weight (an integer initializer such
 *     as an index table, a mask's fill): constants, frozen;
 *   - the initializers named as state_dict keys that no param holds (a
 *     buffer folded away, as maxvit's relative_position_index);
 *   - then, without data, every weight's name and type (a weight the
 *     compiled graph may no longer read).
 * A weights file binds without the values, must agree with a buffer's
 * and may hold a weight the graph dropped (a training-mode export's
 * running statistics); a random draw keeps the values; a saved
 * state_dict leaves the derived params out and writes the buffers back
 * (api/weights.c, api/train.c). */
typedef struct OnnxOwn {
  TensorMap values;
  int n_derived;
} OnnxOwn;

/* Most steps a Loop or Scan is unrolled to (each step is a copy of its
 * body in the graph), and so the largest OnnxOptions.loop_bound. */
enum { ONNX_MAX_UNROLL = 1024 };

typedef struct OnnxOptions {
  /* -D NAME=VALUE binds a symbolic dim (dim_param) by its name, -D
   * INPUT:AXIS=VALUE any free dim of a graph input (frontend/dims.h). */
  int n_defines;
  const Define *defines;
  /* The shapes of the inputs the caller will give: they bind the free
   * dims -D leaves (symbolic, -1, "?" or unset). */
  int n_input_shapes;
  const InputShape *input_shapes;
  /* Values of graph inputs, consulted only where an op needs a
   * compile-time operand (Reshape's shape, Slice's starts, ...): the ONNX
   * backend tests pass such operands as inputs.  The input stays an
   * input.  May be NULL. */
  const TensorMap *known;
  /* Largest tensor, in elements, computed at import (folding, Range,
   * ConstantOfShape); 0: 1 << 26.  The fuzzer sets it low. */
  int64_t max_fold_elems;
  /* Most nodes the imported graph may have (unrolled loops and recurrent
   * layers multiply an ONNX node); 0: IR_MAX_NODES.  Tests set it low. */
  int max_nodes;
  /* Steps to unroll a Loop whose end is decided at run time and that
   * has no bound at import (no trip count, a run-time count whose bound
   * is unknown, or one past what dlcc unrolls): dlcc's --loop-bound.  A
   * run that would take more steps fails its check.  0: such a loop is
   * refused, naming the flag. */
  int loop_bound;
  /* Where the import puts the model's own values, copied (NULL: not
   * wanted; free own->values with ir_tensor_map_free). */
  OnnxOwn *own;
} OnnxOptions;

/* True when this build can read ONNX files. */
bool fe_onnx_enabled(void);

/* Imports path.  On success returns the graph (verified) and fills params
 * with one entry per param of the graph (free with ir_tensor_map_free).
 * External data files are resolved against path's directory.  NULL after
 * reporting errors to c's diag; params is then empty. */
Graph *fe_onnx_import(Ctx *c, const char *path, const OnnxOptions *opt, TensorMap *params);
/* The same for a model in memory; name is used in messages and for the
 * directory of external data. */
Graph *fe_onnx_import_bytes(Ctx *c, const char *name, const void *data, size_t len,
                            const OnnxOptions *opt, TensorMap *params);

/* Reads a serialized TensorProto (the backend tests' input_0.pb) into out
 * (malloc'd data: ir_tensor_free) and, when name is not NULL, its name
 * into *name (malloc'd, "" when unnamed).  False with a message in err. */
bool fe_onnx_read_tensor(const char *path, Tensor *out, char **name, char *err, size_t errlen);

/* Reads a serialized TensorProto, SequenceProto or OptionalProto (the
 * backend tests' data) as up to max tensors: a tensor is itself; a
 * sequence "s" of n tensors is n tensors named "s.0" ... "s.<n-1>" (the
 * graph inputs a sequence input flattens to); an optional is its value's
 * tensors, or none when empty.  *one_tensor: the message held exactly
 * one tensor directly, which is a one-element sequence or an optional
 * tensor (whose input is named "s"): the files do not say which.  The
 * names are malloc'd.  False with a message in err. */
bool fe_onnx_read_value(const char *path, int max, int *n, Tensor *out, char **names, bool *one_tensor, char *err,
                        size_t errlen);

/* `dlcc --onnx-support`: the ONNX ops that import, with their limits. */
void fe_onnx_print_support(FILE *f);

#endif
