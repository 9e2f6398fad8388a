/* ONNX's random ops and Dropout in training mode, drawn the way the
 * language's dropout draws (docs/training.md): Philox4x32-10 under the
 * i64 params dlcc.seed, dlcc.step and dlcc.first_sample, each draw a
 * stream of its own in graph order.  So a training step (`dlcc train`
 * on a training-mode export) draws anew each step, the ranks of a
 * data-parallel job draw what one process would, and ref, emu and cuda
 * draw the same bits.  Every other run draws with the params as they
 * are: the same numbers each run until something sets them.  The ops'
 * `seed` attribute is not used.
 *   - Dropout: the IR's dropout op; its mask where a dropout of ones
 *     keeps its element.
 *   - RandomUniform(Like): low + (high - low) u, u random_uniform's
 *     [0, 1) in steps of 2^-24.
 *   - RandomNormal(Like): mean + scale z, z = sqrt(-2 ln(1 - u1))
 *     cos(2 pi u2) (Box and Muller) from two draws.
 *   - Bernoulli: u < p, as the dtype asked.
 *   - Multinomial: per sample, the count of classes whose cumulative
 *     probability (the row's softmax, its running sums) is at most u
 *     times their total: the class u falls in.
 * What is computed from a draw stays in f32 under --precision. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* The operands and attributes of a draw of type t: the state params and
 * where its samples lie (ir_draw_batch, as the language's dropout). */
static bool draw_state(Imp *im, const TensorType *t, Val *in[3], int64_t *batch) {
  static const char *const names[3] = {"dlcc.seed", "dlcc.step", "dlcc.first_sample"};
  for (int i = 0; i < 3; i++) {
    Value *s = ox_state_param(im, i, names[i]);
    if (!s) return false;
    in[i] = ox_val_of(im, s);
  }
  *batch = ir_draw_batch(im->g, t);
  return true;
}

/* The nodes built after `from` kept in f32 (f64 stays f64): under
 * --precision the draw's 24 bits would be rounded to 8 or 11 before 1 -
 * u or u < p (bf16's u of 1 - 2^-9 and above becomes 1, and ln 0). */
static void keep_wide_since(Imp *im, Node *from) {
  for (Node *n = from ? from->next : im->g->first; n; n = n->next) n->keep_f32 = true;
}

/* u in [0, 1) of shape t's (f32). */
static Val *uniform(Imp *im, const TensorType *t) {
  Val *in[3];
  int64_t batch;
  if (!draw_state(im, t, in, &batch)) return NULL;
  Emit e;
  Node *d = ox_begin(im, &e, OP_RANDOM_UNIFORM, 3, in);
  ir_set_ints(im->g, d, "shape", t->rank, t->dims);
  ir_set_int(im->g, d, "stream", im->n_draws++);
  if (batch) ir_set_int(im->g, d, "batch", batch);
  return ox_emit1(im, &e);
}

bool ox_training_dropout(Imp *im, ONode *n, Val *x, double p) {
  if (!ox_need_float_in(im, x)) return false;
  Val *in[4] = {x};
  int64_t batch;
  if (!draw_state(im, &x->type, in + 1, &batch)) return false;
  int stream = im->n_draws++;
  for (int k = 0; k < 2; k++) {
    if (k == 1 && !(n->n_out > 1 && n->want[1])) break;
    if (k == 1 && !(in[0] = ox_expand(im, ox_scalar(im, 1, x->type.dtype), x->type.rank, x->type.dims)))
      return false;
    Emit e;
    Node *d = ox_begin(im, &e, OP_DROPOUT, 4, in);
    ir_set_float(im->g, d, "p", p);
    ir_set_int(im->g, d, "stream", stream);
    if (batch) ir_set_int(im->g, d, "batch", batch);
    Val *y = ox_emit1(im, &e);
    if (!y) return false;
    if (k == 0) n->out[0] = y;
    else if (!(n->out[1] = ox_op2(im, OP_GREATER, y, ox_scalar(im, 0, x->type.dtype)))) return false;
  }
  return n->out[0] != NULL;
}

/* The result's type: the `shape` attribute's, or the Like input's, and
 * `dtype` (its default the Like input's, else FLOAT), a float type. */
static bool draw_type(Imp *im, ONode *n, bool like, TensorType *t) {
  int64_t code;
  DType dt = TY_F32;
  if (like) {
    Val *x = ox_in_req(im, n, 0);
    if (!x) return false;
    *t = x->type;
    dt = x->type.dtype;
  } else {
    int rank;
    const int64_t *dims;
    if (!ox_attr_ints(im, "shape", &rank, &dims)) return false;
    if (rank > DL_MAX_RANK) return ox_bad(im, "shape has rank %d (at most %d)", rank, (int)DL_MAX_RANK);
    for (int i = 0; i < rank; i++)
      if (dims[i] < 0) return ox_bad(im, "shape has a dim of %lld", (long long)dims[i]);
    *t = ir_type_make(TY_F32, rank, dims);
    if (ir_type_numel(t) < 0) return ox_bad(im, "shape is larger than %lld elements", (long long)DL_MAX_ELEMS);
  }
  if (!ox_attr_int(im, "dtype", -1, &code)) return false;
  if (code >= 0 && !ox_dtype_from_onnx((int32_t)code, &dt))
    return ox_bad(im, "dtype %s is not supported (%s)", ox_onnx_type_name((int32_t)code), ox_dtypes_we_have);
  if (!ir_dtype_is_float(dt)) return ox_bad(im, "dtype %s is not a float type", ir_dtype_name(dt));
  t->dtype = dt;
  return true;
}

/* a + b x, without the identities (so that the default RandomUniform
 * is the draw itself, which pass_eval_mode's patterns read). */
static Val *affine(Imp *im, Val *x, double b, double a) {
  if (b != 1) x = ox_op2s(im, OP_MUL, x, b);
  return a != 0 ? ox_op2s(im, OP_ADD, x, a) : x;
}

/* low + (high - low) u, or mean + scale z, in f32 (f64 for f64: the
 * draw's 24 bits widened), then t's dtype. */
bool ox_op_random(Imp *im, ONode *n) {
  bool like = strstr(im->np->op_type, "Like") != NULL, normal = strstr(im->np->op_type, "Normal") != NULL;
  TensorType t;
  double a, b;
  double seed;
  if (!draw_type(im, n, like, &t) || !ox_attr_float(im, "seed", 0, &seed) ||
      !ox_attr_float(im, normal ? "mean" : "low", 0, &a) || !ox_attr_float(im, normal ? "scale" : "high", 1, &b))
    return false;
  DType work = t.dtype == TY_F64 ? TY_F64 : TY_F32;
  Node *from = im->g->last;
  Val *u = uniform(im, &t);
  if (!u) return false;
  u = ox_cast(im, u, work);
  Val *y;
  if (normal) {
    Val *u2 = uniform(im, &t);
    if (!u2) return false;
    Val *r = ox_op1(im, OP_SQRT, ox_op2s(im, OP_MUL, ox_op1(im, OP_LOG, ox_op2(im, OP_SUB, ox_scalar(im, 1, work), u)), -2));
    Val *c = ox_op1(im, OP_COS, ox_op2s(im, OP_MUL, ox_cast(im, u2, work), 2 * M_PI));
    y = affine(im, ox_op2(im, OP_MUL, r, c), b, a);
  } else {
    y = affine(im, u, b - a, a);
  }
  keep_wide_since(im, from);
  return (n->out[0] = ox_cast(im, y, t.dtype)) != NULL;
}

/* u < p: 1 with probability p, in dtype (default p's). */
bool ox_op_bernoulli(Imp *im, ONode *n) {
  Val *p = ox_in_req(im, n, 0);
  int64_t code;
  double seed;
  if (!p || !ox_need_float_in(im, p) || !ox_attr_int(im, "dtype", -1, &code) || !ox_attr_float(im, "seed", 0, &seed))
    return false;
  DType dt = p->type.dtype;
  if (code >= 0 && !ox_dtype_from_onnx((int32_t)code, &dt))
    return ox_bad(im, "dtype %s is not supported (%s)", ox_onnx_type_name((int32_t)code), ox_dtypes_we_have);
  DType work = p->type.dtype == TY_F64 ? TY_F64 : TY_F32;
  Node *from = im->g->last;
  Val *u = uniform(im, &p->type);
  if (!u) return false;
  Val *y = ox_op2(im, OP_LESS, ox_cast(im, u, work), ox_cast(im, p, work));
  keep_wide_since(im, from);
  return (n->out[0] = ox_cast(im, y, dt)) != NULL;
}

/* input [batch, classes] of unnormalized log-probabilities -> [batch,
 * sample_size] class indices (dtype int32 or int64).  u is scaled by the
 * last cumulative sum rather than trusting it to be 1, so that a class of
 * probability 0 at the end is never drawn. */
bool ox_op_multinomial(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t code, samples;
  double seed;
  if (!x || !ox_need_float_in(im, x) || !ox_attr_int(im, "dtype", 6 /* INT32 */, &code) ||
      !ox_attr_int(im, "sample_size", 1, &samples) || !ox_attr_float(im, "seed", 0, &seed))
    return false;
  DType dt;
  if (!ox_dtype_from_onnx((int32_t)code, &dt) || (dt != TY_I32 && dt != TY_I64))
    return ox_bad(im, "dtype %s: the indices are int32 or int64", ox_onnx_type_name((int32_t)code));
  if (x->type.rank != 2) return ox_bad(im, "the input must be [batch, classes], got rank %d", x->type.rank);
  int64_t B = x->type.dims[0], C = x->type.dims[1];
  if (samples < 1 || C < 1) return ox_bad(im, "sample_size %lld of %lld classes", (long long)samples, (long long)C);
  Node *from = im->g->last;
  DType work = x->type.dtype == TY_F64 ? TY_F64 : TY_F32;
  Val *w = ox_cast(im, x, work);
  if (!w) return false;
  Emit e;
  ir_set_int(im->g, ox_begin(im, &e, OP_SOFTMAX, 1, &w), "axis", 1);
  Val *cdf = ox_cumulative(im, ox_emit1(im, &e), 1, false, false, false);
  TensorType ut = ir_type_make(TY_F32, 2, (const int64_t[]){B, samples});
  Val *u = uniform(im, &ut);
  if (!cdf || !u) return false;
  Val *total = ox_slice_axis(im, cdf, 1, C - 1, C, 1);
  u = ox_reshape(im, ox_op2(im, OP_MUL, ox_cast(im, u, work), total), 3, (const int64_t[]){B, samples, 1});
  cdf = ox_reshape(im, cdf, 3, (const int64_t[]){B, 1, C});
  Val *below = ox_cast(im, ox_op2(im, OP_LESS_EQUAL, cdf, u), TY_I64);
  Val *idx = ox_reduce(im, OP_REDUCE_SUM, below, 1, (const int64_t[]){2}, false);
  /* u times the total rounded up to it: the last class */
  idx = ox_op2(im, OP_MINIMUM, idx, ox_scalar(im, (double)(C - 1), TY_I64));
  keep_wide_since(im, from);
  return (n->out[0] = ox_cast(im, idx, dt)) != NULL;
}
