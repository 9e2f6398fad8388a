/* The JIT API's model (include/dlcc.h's dlc_model), shared by api/dlcc.c
 * and the training API (api/train.c), which compiles a model into a
 * training step and keeps its state in the same place. */
#ifndef DLCC_API_MODEL_H
#define DLCC_API_MODEL_H

#include <stdbool.h>

#include "codegen/codegen.h"
#include "dlcc.h"
#include "dlcrt.h"
#include "ir/eval.h"
#include "passes/loss.h"
#include "passes/optim.h"

struct dlc_model {
  Ctx ctx;
  Graph *g;
  int n_inputs;
  Node **inputs; /* input nodes in graph order */
  TensorMap params;
  bool have_params;
  Tensor *input_data; /* n_inputs; data NULL until set */
  Tensor *outputs;    /* g->n_outputs; valid after a run */
  bool have_outputs;
  char *error; /* malloc'd; the last failing call's message */
  bool error_lost; /* the last call failed, and memory ran out for its message */
  /* Backends other than "ref" run the generated code through libdlcrt. */
  bool use_runtime;
  CgResult cg;
  DlrtModel *rt;
};

/* What turns a model into a training step (api/train.c): the loss
 * appended to the model's output `output` against a new input "target",
 * then (unless eval) autodiff and the optimizer.  eval keeps the forward
 * in inference mode and the loss alone (with its own reduction). */
typedef struct ApiTrainSpec {
  bool has_loss; /* false: the model's output 0 is already its loss */
  LossSpec loss;
  int output;
  bool eval;
  OptimSpec optim;
} ApiTrainSpec;

#define API_TARGET_INPUT "target"

/* dlc_compile_file with the training rewrite of spec after lowering. */
dlc_status api_compile_train(const char *path, const dlc_options *opt, const ApiTrainSpec *spec,
                             dlc_model **out);
/* The message of a failed call kept on m; returns st. */
dlc_status api_fail(dlc_model *m, dlc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
