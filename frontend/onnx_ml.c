/* ONNX's ML domain (ai.onnx.ml), the ops that are tensor arithmetic:
 * Binarizer and ArrayFeatureExtractor, as the ONNX reference gives
 * them.  Takes one node's operands, returns its results. */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* x > threshold as 1 or 0 in x's dtype. */
bool ox_op_binarizer(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  double threshold;
  if (!x || !ox_attr_float(im, "threshold", 0, &threshold)) return false;
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "X must be numbers, got bool");
  Val *above = ox_op2(im, OP_GREATER, x, ox_scalar(im, threshold, x->type.dtype));
  return (n->out[0] = ox_cast(im, above, x->type.dtype));
}

/* X[..., Y] with Y's indices flattened (K of them): [..., K], or [1, K]
 * for a 1-d X.  The gather checks each index against X's last axis. */
bool ox_op_array_feature_extractor(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *y = ox_in_req(im, n, 1);
  if (!x || !y) return false;
  if (x->type.rank < 1) return ox_bad(im, "X must have at least one axis");
  if (ir_dtype_is_float(y->type.dtype) || y->type.dtype == TY_BOOL) return ox_bad(im, "Y must be integer indices");
  int64_t k = ir_type_numel(&y->type);
  Val *idx = ox_reshape(im, y, 1, &k);
  Val *g = ox_gather(im, x, idx, x->type.rank - 1);
  if (!g) return false;
  if (x->type.rank > 1) return (n->out[0] = g);
  int64_t dims[2] = {1, k};
  return (n->out[0] = ox_reshape(im, g, 2, dims));
}
