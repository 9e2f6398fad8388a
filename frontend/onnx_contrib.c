/* onnxruntime's contrib ops that its transformer optimizer writes into
 * models (onnxruntime.transformers.optimizer, Hugging Face Optimum's
 * ORTOptimizer): the fused activations and the skip-connection layer
 * norms of the com.microsoft domain, and SimplifiedLayerNormalization,
 * which onnxruntime registers in the ONNX domain.  Each is the ops it
 * fuses, which dlcc's own fusion puts back together.  Takes one node's
 * operands, returns its results. */
#include "config.h"

#include <string.h>

#include "frontend/onnx_internal.h"

static Val *gelu(Imp *im, Val *x, const char *approximate) {
  if (!x) return NULL;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GELU, 1, &x);
  ir_set_str(im->g, g, "approximate", approximate);
  return ox_emit1(im, &e);
}

/* x plus an optional bias input i (a vector along the last axis). */
static Val *plus_bias(Imp *im, ONode *n, Val *x, int i) {
  Val *b = ox_in_opt(n, i);
  return b && x ? ox_op2(im, OP_ADD, x, b) : x;
}

/* Gelu (erf), BiasGelu (erf, of A + B) and FastGelu (tanh, of X plus its
 * optional bias). */
bool ox_op_ms_gelu(Imp *im, ONode *n) {
  const char *op = im->np->op_type;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x)) return false;
  if (strcmp(op, "BiasGelu") == 0 && !ox_in_req(im, n, 1)) return false;
  bool fast = strcmp(op, "FastGelu") == 0;
  return (n->out[0] = gelu(im, plus_bias(im, n, x, 1), fast ? "tanh" : "none")) != NULL;
}

/* QuickGelu: x sigmoid(alpha x), alpha 1.702 by default (CLIP's). */
bool ox_op_quick_gelu(Imp *im, ONode *n) {
  double alpha;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x) || !ox_attr_float(im, "alpha", 1.702, &alpha)) return false;
  return (n->out[0] = ox_op2(im, OP_MUL, x, ox_op1(im, OP_SIGMOID, ox_op2s(im, OP_MUL, x, alpha)))) != NULL;
}

/* One layernorm (or rms_norm) over the last axis of x, eps, with the
 * given scale and shift (either may be NULL). */
static Val *last_axis_norm(Imp *im, Val *x, bool rms, double eps, Val *scale, Val *shift) {
  int axis = x->type.rank - 1;
  Val *in[3] = {x, scale, shift};
  int k = 1;
  bool fits = scale && ox_same_dims(&scale->type, 1, x->type.dims + axis) && scale->type.dtype == x->type.dtype &&
              (!shift || (ox_same_dims(&shift->type, 1, x->type.dims + axis) && shift->type.dtype == x->type.dtype));
  if (fits) k = rms ? 2 : shift ? 3 : 2;
  Emit e;
  Node *nd = ox_begin(im, &e, rms ? OP_RMS_NORM : OP_LAYERNORM, k, in);
  ir_set_int(im->g, nd, "axis", axis);
  ir_set_float(im->g, nd, "eps", eps);
  Val *y = ox_emit1(im, &e);
  if (!fits && scale) y = ox_op2(im, OP_MUL, y, scale);
  if ((!fits || rms) && shift) y = ox_op2(im, OP_ADD, y, shift);
  return y;
}

/* SkipLayerNormalization: layernorm over the last axis of input + skip
 * (+ bias) times gamma (+ beta); its fourth output that sum.
 * SkipSimplifiedLayerNormalization: the same with an RMS norm and no
 * beta.  The mean and inverse deviation outputs (for training) are
 * refused where a node reads them. */
bool ox_op_skip_layer_norm(Imp *im, ONode *n) {
  bool rms = strcmp(im->np->op_type, "SkipSimplifiedLayerNormalization") == 0;
  double eps;
  Val *x = ox_in_req(im, n, 0), *skip = ox_in_req(im, n, 1), *gamma = ox_in_req(im, n, 2);
  if (!x || !skip || !gamma || !ox_need_float_in(im, x) || !ox_attr_float(im, "epsilon", 1e-12, &eps)) return false;
  if (x->type.rank < 1) return ox_bad(im, "input must have at least one axis");
  for (int i = 1; i < 3; i++)
    if ((n->n_out > i && n->want[i])) return ox_bad(im, "output %d (the %s) is not supported", i + 1, i == 1 ? "mean" : "inverse deviation");
  Val *beta = rms ? NULL : ox_in_opt(n, 3);
  Val *sum = plus_bias(im, n, ox_op2(im, OP_ADD, x, skip), rms ? 3 : 4);
  if (!sum) return false;
  n->out[0] = last_axis_norm(im, sum, rms, eps, gamma, beta);
  if (n->n_out > 3) n->out[3] = sum;
  return n->out[0] != NULL;
}

/* SimplifiedLayerNormalization (onnxruntime's, in the ONNX domain): an
 * RMS norm over the axes from axis, times scale; its inverse deviation
 * output is refused where read. */
bool ox_op_simplified_layer_norm(Imp *im, ONode *n) {
  int64_t axis_attr, stash;
  double eps;
  Val *x = ox_in_req(im, n, 0), *scale = ox_in_req(im, n, 1);
  if (!x || !scale || !ox_need_float_in(im, x) || !ox_attr_int(im, "axis", -1, &axis_attr) ||
      !ox_attr_float(im, "epsilon", 1e-5, &eps) || !ox_attr_int(im, "stash_type", 1, &stash))
    return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  if (n->n_out > 1 && n->want[1]) return ox_bad(im, "output 2 (the inverse deviation) is not supported");
  Val *in[2] = {x, scale};
  bool exact = ox_same_dims(&scale->type, x->type.rank - axis, x->type.dims + axis) && scale->type.dtype == x->type.dtype;
  Emit e;
  Node *r = ox_begin(im, &e, OP_RMS_NORM, exact ? 2 : 1, in);
  ir_set_int(im->g, r, "axis", axis);
  ir_set_float(im->g, r, "eps", eps);
  Val *y = ox_emit1(im, &e);
  return (n->out[0] = exact || !y ? y : ox_op2(im, OP_MUL, y, scale)) != NULL;
}
