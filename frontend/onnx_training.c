/* ONNX's training preview domain (ai.onnx.preview.training, version 1):
 * Adagrad, Adam and Momentum, the optimizers' update rules as the ONNX
 * reference's apply_* functions give them, for R (the learning rate, a
 * float scalar), T (the step count, an integer scalar) and N tensors X,
 * their gradients G and their states; elementwise IR ops, computed in
 * f32 (f64 for f64) and rounded once to X's type.  Takes one node's
 * operands, returns its results. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* R and T as scalars of X's computing type, and the count N of the
 * groups of `per` tensors after them (X, G, then per - 2 states), each
 * of one shape and float dtype per group; outputs (per - 1) * N. */
static bool update_inputs(Imp *im, ONode *n, int per, const char *names, int *count, Val **r, Val **t) {
  if (n->n_in < 2 + per || (n->n_in - 2) % per)
    return ox_bad(im, "expects R, T and groups of %s, got %d inputs", names, n->n_in);
  *count = (n->n_in - 2) / per;
  if (n->n_out != (per - 1) * *count)
    return ox_bad(im, "has %d inputs after R and T, so %d outputs; it has %d", n->n_in - 2, (per - 1) * *count,
                  n->n_out);
  Val *rv = ox_in_req(im, n, 0), *tv = ox_in_req(im, n, 1);
  if (!rv || !tv) return false;
  if (ir_type_numel(&rv->type) != 1 || !ir_dtype_is_float(rv->type.dtype))
    return ox_bad(im, "R (the learning rate) must be one float");
  if (ir_type_numel(&tv->type) != 1 || ir_dtype_is_float(tv->type.dtype) || tv->type.dtype == TY_BOOL)
    return ox_bad(im, "T (the step count) must be one integer");
  for (int k = 0; k < *count; k++) {
    Val *x = ox_in_req(im, n, 2 + k);
    if (!x || !ox_need_float_in(im, x)) return false;
    for (int j = 1; j < per; j++) {
      Val *o = ox_in_req(im, n, 2 + j * *count + k);
      if (!o) return false;
      if (o->type.dtype != x->type.dtype || !ox_same_dims(&o->type, x->type.rank, x->type.dims))
        return ox_bad(im, "input %d must have X_%d's dtype and shape", 2 + j * *count + k, k + 1);
    }
  }
  DType wide = ox_widen(im, ox_in_req(im, n, 2))->type.dtype;
  *r = ox_reshape(im, ox_cast(im, rv, wide), 0, NULL);
  *t = ox_reshape(im, ox_cast(im, tv, wide), 0, NULL);
  return true;
}

/* Input j of group k (0: X, 1: G, 2 and on: its states), widened. */
static Val *member(Imp *im, ONode *n, int count, int j, int k) { return ox_widen(im, ox_in_req(im, n, 2 + j * count + k)); }

/* norm_coefficient * x + g */
static Val *regularized(Imp *im, Val *x, Val *g, double norm) {
  return norm != 0 ? ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, x, norm), g) : g;
}

/* Adagrad: r' = r / (1 + t * decay_factor); g' = norm_coefficient * x
 * + g; h' = h + g'^2; x' = x - r' * g' / (sqrt(h') + epsilon). */
bool ox_op_adagrad(Imp *im, ONode *n) {
  int count;
  Val *r, *t;
  double decay, eps, norm;
  if (!ox_attr_float(im, "decay_factor", 0, &decay) || !ox_attr_float(im, "epsilon", 0, &eps) ||
      !ox_attr_float(im, "norm_coefficient", 0, &norm) || !update_inputs(im, n, 3, "X, G, H", &count, &r, &t))
    return false;
  Val *rate = ox_op2(im, OP_DIV, r, ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, t, decay), 1));
  for (int k = 0; k < count; k++) {
    DType dt = ox_in_req(im, n, 2 + k)->type.dtype;
    Val *x = member(im, n, count, 0, k), *g = regularized(im, x, member(im, n, count, 1, k), norm);
    Val *h = ox_op2(im, OP_ADD, member(im, n, count, 2, k), ox_op2(im, OP_MUL, g, g));
    Val *den = ox_op2s(im, OP_ADD, ox_op1(im, OP_SQRT, h), eps);
    Val *x_new = ox_op2(im, OP_SUB, x, ox_op2(im, OP_DIV, ox_op2(im, OP_MUL, rate, g), den));
    if (!(n->out[k] = ox_narrow(im, x_new, dt)) || !(n->out[count + k] = ox_narrow(im, h, dt))) return false;
  }
  return true;
}

/* Adam: g' = norm_coefficient * x + g; v' = alpha v + (1 - alpha) g';
 * h' = beta h + (1 - beta) g'^2; r' = r sqrt(1 - beta^t) / (1 -
 * alpha^t) when t > 0, else r; x' = (1 - norm_coefficient_post) (x -
 * r' v' / (sqrt(h') + epsilon)). */
bool ox_op_adam(Imp *im, ONode *n) {
  int count;
  Val *r, *t;
  double alpha, beta, eps, norm, post;
  if (!ox_attr_float(im, "alpha", 0.9, &alpha) || !ox_attr_float(im, "beta", 0.999, &beta) ||
      !ox_attr_float(im, "epsilon", 0, &eps) || !ox_attr_float(im, "norm_coefficient", 0, &norm) ||
      !ox_attr_float(im, "norm_coefficient_post", 0, &post) ||
      !update_inputs(im, n, 4, "X, G, V, H", &count, &r, &t))
    return false;
  DType wide = r->type.dtype;
  Val *corr1 = ox_op2(im, OP_SUB, ox_scalar(im, 1, wide), ox_op2(im, OP_POW, ox_scalar(im, beta, wide), t));
  Val *corr2 = ox_op2(im, OP_SUB, ox_scalar(im, 1, wide), ox_op2(im, OP_POW, ox_scalar(im, alpha, wide), t));
  Val *biased = ox_op2(im, OP_DIV, ox_op2(im, OP_MUL, r, ox_op1(im, OP_SQRT, corr1)), corr2);
  Val *rate = ox_where(im, ox_op2(im, OP_GREATER, t, ox_scalar(im, 0, wide)), biased, r);
  for (int k = 0; k < count; k++) {
    DType dt = ox_in_req(im, n, 2 + k)->type.dtype;
    Val *x = member(im, n, count, 0, k), *g = regularized(im, x, member(im, n, count, 1, k), norm);
    Val *v = ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, member(im, n, count, 2, k), alpha), ox_op2s(im, OP_MUL, g, 1 - alpha));
    Val *h = ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, member(im, n, count, 3, k), beta),
                    ox_op2s(im, OP_MUL, ox_op2(im, OP_MUL, g, g), 1 - beta));
    Val *den = ox_op2s(im, OP_ADD, ox_op1(im, OP_SQRT, h), eps);
    Val *x_new = ox_op2(im, OP_SUB, x, ox_op2(im, OP_MUL, rate, ox_op2(im, OP_DIV, v, den)));
    if (post != 0) x_new = ox_op2s(im, OP_MUL, x_new, 1 - post);
    if (!(n->out[k] = ox_narrow(im, x_new, dt)) || !(n->out[count + k] = ox_narrow(im, v, dt)) ||
        !(n->out[2 * count + k] = ox_narrow(im, h, dt)))
      return false;
  }
  return true;
}

/* Momentum: g' = norm_coefficient * x + g; v' = alpha v + beta' g'
 * (beta' = beta when t > 0, else 1); x' = x - r v' ("standard") or
 * x - r (g' + alpha v') ("nesterov"). */
bool ox_op_momentum(Imp *im, ONode *n) {
  int count;
  Val *r, *t;
  double alpha, beta, norm;
  const char *mode;
  if (!ox_attr_float(im, "alpha", 0, &alpha) || !ox_attr_float(im, "beta", 0, &beta) ||
      !ox_attr_float(im, "norm_coefficient", 0, &norm) || !ox_attr_str(im, "mode", "standard", &mode) ||
      !update_inputs(im, n, 3, "X, G, V", &count, &r, &t))
    return false;
  bool nesterov = strcmp(mode, "nesterov") == 0;
  if (!nesterov && strcmp(mode, "standard") != 0)
    return ox_bad(im, "mode '%s' is not one of standard and nesterov", mode);
  DType wide = r->type.dtype;
  Val *b = ox_where(im, ox_op2(im, OP_GREATER, t, ox_scalar(im, 0, wide)), ox_scalar(im, beta, wide),
                    ox_scalar(im, 1, wide));
  for (int k = 0; k < count; k++) {
    DType dt = ox_in_req(im, n, 2 + k)->type.dtype;
    Val *x = member(im, n, count, 0, k), *g = regularized(im, x, member(im, n, count, 1, k), norm);
    Val *v = ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, member(im, n, count, 2, k), alpha), ox_op2(im, OP_MUL, b, g));
    Val *step = nesterov ? ox_op2(im, OP_ADD, g, ox_op2s(im, OP_MUL, v, alpha)) : v;
    Val *x_new = ox_op2(im, OP_SUB, x, ox_op2(im, OP_MUL, r, step));
    if (!(n->out[k] = ox_narrow(im, x_new, dt)) || !(n->out[count + k] = ox_narrow(im, v, dt))) return false;
  }
  return true;
}
