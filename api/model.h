/* The JIT API's model (include/dlcc.h's dlc_model), shared by api/dlcc.c
 * and the training API (api/train.c), which compiles a model with its
 * loss into a training step and reads and writes the same state. */
#ifndef DLCC_API_MODEL_H
#define DLCC_API_MODEL_H

#include <stdbool.h>

#include "codegen/codegen.h"
#include "dlcc.h"
#include "passes/tensor_par.h"
#include "dlcrt.h"
#include "frontend/onnx.h"
#include "ir/eval.h"
#include "passes/loss.h"

struct dlc_model {
  Ctx ctx;
  Graph *g;
  int n_inputs;
  Node **inputs; /* input nodes in graph order */
  TensorMap params;
  bool have_params;
  /* An ONNX model's own values a weights file need not give (frontend/onnx.h) */
  OnnxOwn own;
  Tensor *input_data; /* n_inputs; data NULL until set */
  Tensor *outputs;    /* g->n_outputs; valid after a run */
  bool have_outputs;
  char *error; /* malloc'd; the last failing call's message */
  bool error_lost; /* the last call failed, and memory ran out for its message */
  /* Backends other than "ref" run the generated code through libdlcrt. */
  bool use_runtime;
  CgResult cg;
  DlrtModel *rt;
  TpResult tp; /* dlc_options.tensor_parallel's splits and notes */
  /* dlc_set_comm's communicator on the ref backend (the runtime holds
   * it on the others), and its all-reduces so far in this run */
  dlc_comm_fn ref_comm;
  void *ref_comm_ctx;
  int ref_buckets;
};

/* The loss dlcc train appends (api/train.c) to the model's output
 * `output` against a new input API_TARGET_INPUT, right after lowering
 * and before autodiff (dlc_options.grad) and the optimizer. */
typedef struct ApiTrainSpec {
  bool has_loss; /* false: the model's output 0 is already its loss */
  LossSpec loss;
  int output;
  bool has_target_type; /* else the loss's default target */
  TensorType target_type;
} ApiTrainSpec;

#define API_TARGET_INPUT "target"

/* Keeps the message of a failed call on m (dlc_error); returns st. */
dlc_status api_fail(dlc_model *m, dlc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* out describes a tensor of type t called name (name is not copied). */
void api_tensor_info(dlc_tensor_info *out, const char *name, const TensorType *t);
/* dlc_compile_file with spec's loss appended after lowering. */
dlc_status api_compile_train(const char *path, const dlc_options *opt, const ApiTrainSpec *spec,
                             dlc_model **out);
/* The same for text in memory (.ir when name ends so), name in messages. */
/* The loss weights o gives (class_weight, pos_weight) into m's inputs
 * LOSS_WEIGHT_INPUT and LOSS_POS_WEIGHT_INPUT, each where m has it (a
 * training step, or a pipeline's last stage): set once, every run reads
 * them. */
dlc_status api_set_loss_weights(dlc_model *m, const dlc_train_options *o);
dlc_status api_compile_train_text(const char *name, const char *text, const dlc_options *opt,
                                  const ApiTrainSpec *spec, dlc_model **out);

#endif
