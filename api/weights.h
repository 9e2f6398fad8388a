/* Weights for a graph's params from a safetensors file (PyTorch
 * state_dict names and layouts).  Used by the JIT API and `dlcc run
 * --weights`. */
#ifndef DLCC_API_WEIGHTS_H
#define DLCC_API_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/eval.h"

/* Reads path and binds one tensor to every param name of g: out gets
 * them in graph order (free with ir_tensor_map_free).  Every tensor must
 * match its param's dtype and shape exactly, every param must be present
 * and no other tensor may be, except PyTorch's
 * "<scope>.num_batches_tracked" where "<scope>.running_mean" is a param.
 * own (may be NULL) holds an ONNX model's own values (OnnxOptions.own):
 * a derived param the file lacks takes own's, and a tensor of the file
 * that own names but no param does must equal own's.
 * Returns false with the problems in err, one a line, at most 20. */
bool api_bind_weights(Graph *g, const char *path, const TensorMap *own, TensorMap *out, char *err, size_t errlen);

/* The same, reading and binding only the params `want` accepts (a
 * pipeline stage's); the rest of the file is checked as above from its
 * header, so a rank holds only its stage's tensors. */
typedef struct ApiWeightFilter {
  bool (*want)(void *ctx, const char *name);
  void *ctx;
} ApiWeightFilter;
bool api_bind_some_weights(Graph *g, const char *path, const TensorMap *own, const ApiWeightFilter *only,
                           TensorMap *out, char *err, size_t errlen);

/* The same, each problem an error in c at the location that declared
 * the parameter (a tensor the model lacks, or the file itself, has
 * none); at most 20 and a note with the count of the rest. */
bool api_check_weights(Ctx *c, Graph *g, const char *path, const TensorMap *own, TensorMap *out);

#endif
