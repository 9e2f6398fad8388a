/* Losses (loss.h): takes a prediction and a target value of a graph and
 * appends the nodes of a PyTorch loss between them, built from existing
 * ops (log_softmax, gather_elements, where, reductions, arithmetic) so
 * that autodiff differentiates them by the rules of their parts, and
 * cross_entropy over [N, C, d...] logits and class indices from
 * softmax_xent, a row kernel with its own gradient op, over rows of
 * classes; returns the loss value.  The language's loss calls and passes/loss.c's
 * pass_append_loss (`dlcc --loss`) both build here. */
#include "ir/loss.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/grad.h"

/* PyTorch's functional names: what messages call a loss, and what the
 * language spells it. */
static const char *const torch_names[LOSS_COUNT] = {
    [LOSS_CROSS_ENTROPY] = "cross_entropy", [LOSS_NLL] = "nll_loss",
    [LOSS_MSE] = "mse_loss",                [LOSS_L1] = "l1_loss",
    [LOSS_SMOOTH_L1] = "smooth_l1_loss",    [LOSS_BCE_WITH_LOGITS] = "binary_cross_entropy_with_logits",
    [LOSS_HUBER] = "huber_loss",            [LOSS_BCE] = "binary_cross_entropy",
    [LOSS_KL_DIV] = "kl_div",
};
static const char *const short_names[LOSS_COUNT] = {
    [LOSS_CROSS_ENTROPY] = "cross_entropy", [LOSS_NLL] = "nll", [LOSS_MSE] = "mse",
    [LOSS_L1] = "l1", [LOSS_SMOOTH_L1] = "smooth_l1", [LOSS_BCE_WITH_LOGITS] = "bce_with_logits",
    [LOSS_HUBER] = "huber", [LOSS_BCE] = "bce", [LOSS_KL_DIV] = "kl_div",
};

LossSpec loss_spec_default(LossKind kind) {
  return (LossSpec){.kind = kind, .reduction = LOSS_MEAN, .ignore_index = -100, .label_smoothing = 0, .beta = 1,
                    .delta = 1};
}

bool loss_from_name(const char *name, LossKind *out) {
  for (int k = 0; k < LOSS_COUNT; k++)
    if (strcmp(name, short_names[k]) == 0 || strcmp(name, torch_names[k]) == 0) {
      *out = (LossKind)k;
      return true;
    }
  return false;
}

const char *loss_name(LossKind kind) { return kind >= 0 && kind < LOSS_COUNT ? short_names[kind] : "?"; }

DiagWords loss_names(void) { return diag_word_list(short_names, LOSS_COUNT); }

/* ---- building ---- */

typedef struct Build {
  Graph *g;
  SrcLoc at;
  DType dt; /* the prediction's: every constant and the loss have it */
} Build;

static Value *op1(Build *b, OpKind op, Value *x) { return ir_grad_op(b->g, b->at, op, 1, &x); }
static Value *op2(Build *b, OpKind op, Value *x, Value *y) { return ir_grad_op2(b->g, b->at, op, x, y); }
static Value *num(Build *b, double v, DType dt) { return ir_grad_scalar(b->g, b->at, v, dt); }
static Value *mulk(Build *b, Value *x, double v) { return op2(b, OP_MUL, x, num(b, v, x->type.dtype)); }

static Value *where(Build *b, Value *cond, Value *x, Value *y) {
  Value *in[3] = {cond, x, y};
  return ir_grad_op(b->g, b->at, OP_WHERE, 3, in);
}

/* Sum (or mean) over every axis: one element of rank 0. */
static Value *reduce_all(Build *b, Value *x, bool mean) {
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < x->type.rank; d++) axes[d] = d;
  if (x->type.rank == 0) return x;
  return mean ? ir_grad_mean(b->g, b->at, x, x->type.rank, axes, false)
              : ir_grad_sum(b->g, b->at, x, x->type.rank, axes, false);
}

static Value *reduce(Build *b, Value *per, LossReduction r) {
  if (r == LOSS_BATCHMEAN && per->type.rank > 0)
    return mulk(b, reduce_all(b, per, false), 1.0 / (double)per->type.dims[0]);
  return r == LOSS_NONE ? per : reduce_all(b, per, r == LOSS_MEAN);
}

static Value *sum_classes(Build *b, Value *x, int cls) {
  int64_t axis = cls;
  return ir_grad_sum(b->g, b->at, x, 1, &axis, false);
}

/* Class indices t [N, d...] into x [N, C, d...] (or [] into [C]), the
 * class axis cls: -x[i, t_i] where t_i is not ignore_index, else 0; in
 * *valid the bool mask of the positions that count.  The index is read
 * by gather_elements, whose check reports one out of range at run time;
 * an ignored one reads class 0 instead, and a negative one (which
 * gather_elements would count from the end, and PyTorch refuses) is
 * moved below -C so that the check reports it, as t - C. */
static Value *pick(Build *b, Value *x, Value *t, int cls, int64_t ignore, Value **valid) {
  DType it = t->type.dtype;
  int64_t C = x->type.dims[cls];
  Value *zero = num(b, 0, it);
  *valid = op2(b, OP_NOT_EQUAL, t, num(b, (double)ignore, it));
  Value *neg = op2(b, OP_LESS, t, zero);
  Value *idx = where(b, *valid, where(b, neg, op2(b, OP_SUB, t, num(b, (double)C, it)), t), zero);
  TensorType kt = x->type;
  kt.dims[cls] = 1;
  idx = ir_grad_reshape(b->g, b->at, idx, kt.rank, kt.dims);
  Value *in[2] = {x, idx};
  Node *n = ir_node_new(b->g, OP_GATHER_ELEMENTS, 2, in, b->at);
  ir_set_int(b->g, n, "axis", cls);
  Value *got = ir_grad_reshape(b->g, b->at, ir_grad_node(b->g, n), t->type.rank, t->type.dims);
  return where(b, *valid, op1(b, OP_NEG, got), num(b, 0, b->dt));
}

static Value *class_loss(Build *b, const LossSpec *s, Value *x, Value *t) {
  int cls = x->type.rank >= 2 ? 1 : 0;
  int64_t C = x->type.dims[cls];
  double eps = s->kind == LOSS_CROSS_ENTROPY ? s->label_smoothing : 0;
  Value *lsm = x;
  /* Class indices into [N, C, d...] logits of f32 or f64 (the op's
   * result type): softmax_xent over rows. */
  bool fused = s->kind == LOSS_CROSS_ENTROPY && !ir_dtype_is_float(t->type.dtype) && x->type.rank >= 2 &&
               (b->dt == TY_F32 || b->dt == TY_F64) && !s->weight;
  /* The class weights broadcast along the class axis: [C, 1...]. */
  Value *w_cls = NULL;
  if (s->weight) {
    int64_t wd[DL_MAX_RANK];
    for (int d = 0; d < x->type.rank - cls; d++) wd[d] = d ? 1 : C;
    w_cls = ir_grad_reshape(b->g, b->at, s->weight, x->type.rank - cls, wd);
  }
  if (s->kind == LOSS_CROSS_ENTROPY && !fused) {
    Node *n = ir_node_new(b->g, OP_LOG_SOFTMAX, 1, &x, b->at);
    ir_set_int(b->g, n, "axis", cls);
    lsm = ir_grad_node(b->g, n);
  }
  if (ir_dtype_is_float(t->type.dtype)) {
    /* Probabilities: -sum_c t_c lsm_c per position, the targets mixed
     * with the uniform distribution first; the mean is over positions. */
    if (eps > 0) t = op2(b, OP_ADD, mulk(b, t, 1 - eps), num(b, eps / (double)C, b->dt));
    Value *terms = op2(b, OP_MUL, lsm, t);
    if (w_cls) terms = op2(b, OP_MUL, terms, w_cls);
    Value *per = op1(b, OP_NEG, sum_classes(b, terms, cls));
    return reduce(b, per, s->reduction);
  }
  Value *valid, *per;
  if (fused) {
    /* One row kernel for the loss and one for its gradient (ops.def's
     * softmax_xent), instead of log_softmax, the pick and their
     * gradients. */
    Value *rows = x, *cls_of = t;
    if (x->type.rank > 2) {
      /* [N, C, d...] (a sequence model's logits transposed for the loss,
       * as PyTorch wants them): the classes moved last, the positions
       * made rows.  A model that transposed [N, S, C] gets it back, the
       * two transposes cancelling in simplify. */
      int64_t perm[DL_MAX_RANK], rc[2] = {ir_type_numel(&x->type) / C, C}, m = rc[0];
      int r = x->type.rank, k = 0;
      perm[k++] = 0;
      for (int d = 2; d < r; d++) perm[k++] = d;
      perm[k++] = 1;
      Node *tr = ir_node_new(b->g, OP_TRANSPOSE, 1, &x, b->at);
      ir_set_ints(b->g, tr, "perm", r, perm);
      rows = ir_grad_reshape(b->g, b->at, ir_grad_node(b->g, tr), 2, rc);
      cls_of = ir_grad_reshape(b->g, b->at, t, 1, &m);
    }
    Node *n = ir_node_new(b->g, OP_XENT, 2, (Value *[]){rows, cls_of}, b->at);
    ir_set_int(b->g, n, "ignore_index", s->ignore_index);
    ir_set_float(b->g, n, "smoothing", eps);
    per = ir_grad_node(b->g, n);
    if (x->type.rank > 2) per = ir_grad_reshape(b->g, b->at, per, t->type.rank, t->type.dims);
    valid = op2(b, OP_NOT_EQUAL, t, num(b, (double)s->ignore_index, t->type.dtype));
  } else {
    per = pick(b, lsm, t, cls, s->ignore_index, &valid);
  }
  /* With class weights each position's nll is scaled by its class's
   * weight (0 where ignored), which the mean sums in place of the count. */
  Value *w_pos = NULL;
  if (s->weight) {
    Value *zero = num(b, 0, t->type.dtype);
    Value *in[2] = {s->weight, where(b, valid, t, zero)};
    Node *n = ir_node_new(b->g, OP_GATHER, 2, in, b->at);
    ir_set_int(b->g, n, "axis", 0);
    w_pos = where(b, valid, ir_grad_node(b->g, n), num(b, 0, b->dt));
    per = op2(b, OP_MUL, per, w_pos);
  }
  if (eps > 0 && !fused) {
    /* PyTorch's (1 - eps) nll + eps / C * (-sum_c w_c lsm_c), ignored
     * positions 0 in both, one divisor for both under mean. */
    Value *terms = w_cls ? op2(b, OP_MUL, lsm, w_cls) : lsm;
    Value *smooth = where(b, valid, op1(b, OP_NEG, sum_classes(b, terms, cls)), num(b, 0, b->dt));
    per = op2(b, OP_ADD, mulk(b, per, 1 - eps), mulk(b, smooth, eps / (double)C));
  }
  if (s->reduction != LOSS_MEAN) return reduce(b, per, s->reduction);
  if (w_pos) return op2(b, OP_DIV, reduce_all(b, per, false), reduce_all(b, w_pos, false));
  /* The mean over the positions that count; none: 0 times 1 / 0, NaN,
   * as PyTorch gives.  The sum times 1 / count rather than over count
   * (at most an ulp apart): the gradient's dy is that 1 / count, so the
   * count is read only by it and one kernel computes both. */
  Node *cast = ir_node_new(b->g, OP_CAST, 1, &valid, b->at);
  ir_set_dtype(b->g, cast, "to", b->dt);
  Value *count = reduce_all(b, ir_grad_node(b->g, cast), false);
  return op2(b, OP_MUL, reduce_all(b, per, false), op2(b, OP_DIV, num(b, 1, count->type.dtype), count));
}

static Value *pointwise(Build *b, const LossSpec *s, Value *x, Value *y) {
  Value *d = op2(b, OP_SUB, x, y), *per = NULL;
  switch (s->kind) {
    case LOSS_MSE: per = op2(b, OP_MUL, d, d); break;
    case LOSS_L1: per = op1(b, OP_ABS, d); break;
    case LOSS_SMOOTH_L1: {
      Value *ad = op1(b, OP_ABS, d);
      if (s->beta == 0) { /* PyTorch's special case: l1 */
        per = ad;
        break;
      }
      Value *small = op2(b, OP_LESS, ad, num(b, s->beta, b->dt));
      per = where(b, small, mulk(b, op2(b, OP_MUL, d, d), 0.5 / s->beta),
                  op2(b, OP_SUB, ad, num(b, 0.5 * s->beta, b->dt)));
      break;
    }
    case LOSS_BCE_WITH_LOGITS: {
      /* max(x, 0) - x y + log(1 + exp(-|x|)): no exp overflows.  maximum
       * splits a tie's gradient in half, so at x = 0 the gradient is
       * sigmoid(0) - y, as PyTorch's.  The IR has no log1p: in f32 the
       * last term is lost where exp(-|x|) < 6e-8 (|x| > 16.6), an
       * absolute error below 6e-8.  With pos_weight p, PyTorch's
       * (1 - y) x + (1 + (p - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)). */
      Value *e = op1(b, OP_EXP, op1(b, OP_NEG, op1(b, OP_ABS, x)));
      Value *soft = op1(b, OP_LOG, op2(b, OP_ADD, e, num(b, 1, b->dt)));
      if (s->pos_weight) {
        Value *one = num(b, 1, b->dt), *zero = num(b, 0, b->dt);
        Value *lw = op2(b, OP_ADD, op2(b, OP_MUL, op2(b, OP_SUB, s->pos_weight, one), y), one);
        Value *neg_part = op2(b, OP_ADD, soft, op2(b, OP_MAXIMUM, op1(b, OP_NEG, x), zero));
        per = op2(b, OP_ADD, op2(b, OP_MUL, op2(b, OP_SUB, one, y), x), op2(b, OP_MUL, lw, neg_part));
        break;
      }
      Value *lin = op2(b, OP_SUB, op2(b, OP_MAXIMUM, x, num(b, 0, b->dt)), op2(b, OP_MUL, x, y));
      per = op2(b, OP_ADD, lin, soft);
      break;
    }
    case LOSS_HUBER: {
      /* 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) */
      Value *ad = op1(b, OP_ABS, d);
      Value *small = op2(b, OP_LESS, ad, num(b, s->delta, b->dt));
      per = where(b, small, mulk(b, op2(b, OP_MUL, d, d), 0.5),
                  mulk(b, op2(b, OP_SUB, ad, num(b, 0.5 * s->delta, b->dt)), s->delta));
      break;
    }
    case LOSS_BCE: {
      /* -(y log x + (1 - y) log(1 - x)), each log at least -100 as
       * PyTorch clamps them, so x of 0 or 1 gives a finite loss (and no
       * gradient through the clamped term). */
      Value *one = num(b, 1, b->dt), *floor = num(b, -100, b->dt);
      Value *lx = op2(b, OP_MAXIMUM, op1(b, OP_LOG, x), floor);
      Value *l1x = op2(b, OP_MAXIMUM, op1(b, OP_LOG, op2(b, OP_SUB, one, x)), floor);
      per = op1(b, OP_NEG, op2(b, OP_ADD, op2(b, OP_MUL, y, lx), op2(b, OP_MUL, op2(b, OP_SUB, one, y), l1x)));
      break;
    }
    case LOSS_KL_DIV: {
      /* PyTorch's pointwise terms: exp(y) (y - x) with log_target, else
       * xlogy(y, y) - y x, where a target of 0 adds 0 (its log read at 1). */
      if (s->log_target) {
        per = op2(b, OP_MUL, op1(b, OP_EXP, y), op2(b, OP_SUB, y, x));
        break;
      }
      Value *zero = num(b, 0, b->dt), *one = num(b, 1, b->dt);
      Value *ly = op1(b, OP_LOG, where(b, op2(b, OP_GREATER, y, zero), y, one));
      per = op2(b, OP_MUL, y, op2(b, OP_SUB, ly, x));
      break;
    }
    default: break;
  }
  return reduce(b, per, s->reduction);
}

/* ---- checks ---- */

static bool fail(Graph *g, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(Graph *g, SrcLoc loc, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(g->ctx, loc, "%s", msg);
  return false;
}

static bool is_index_type(DType t) { return t == TY_I64 || t == TY_I32; }

/* The indices' shape for pred: pred's without its class axis. */
static TensorType index_type(const TensorType *pred, DType dt) {
  TensorType t = {.dtype = dt, .rank = pred->rank - 1};
  int cls = pred->rank >= 2 ? 1 : 0;
  for (int d = 0, k = 0; d < pred->rank; d++)
    if (d != cls) t.dims[k++] = pred->dims[d];
  return t;
}

TensorType loss_default_target(LossKind kind, const TensorType *pred) {
  if ((kind == LOSS_CROSS_ENTROPY || kind == LOSS_NLL) && pred->rank >= 1) return index_type(pred, TY_I64);
  return *pred;
}

static bool check(Graph *g, const LossSpec *s, const Value *pred, const Value *target, SrcLoc loc) {
  const char *name = torch_names[s->kind];
  bool classes = s->kind == LOSS_CROSS_ENTROPY || s->kind == LOSS_NLL;
  const char *what = s->kind == LOSS_CROSS_ENTROPY ? "logits" : s->kind == LOSS_NLL ? "log-probabilities" : "input";
  char pb[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX], eb[IR_TYPE_STR_MAX];
  const TensorType *pt = &pred->type, *tt = &target->type;
  ir_type_str(pt, pb, sizeof pb);
  ir_type_str(tt, tb, sizeof tb);
  if (!ir_dtype_is_float(pt->dtype)) return fail(g, loc, "%s: %s must be floating point, got %s", name, what, pb);
  if (s->reduction != LOSS_MEAN && s->reduction != LOSS_SUM && s->reduction != LOSS_NONE &&
      s->reduction != LOSS_BATCHMEAN)
    return fail(g, loc, "%s: unknown reduction %d", name, (int)s->reduction);
  if (s->reduction == LOSS_BATCHMEAN && s->kind != LOSS_KL_DIV)
    return fail(g, loc, "%s: reduction \"batchmean\" is kl_div's", name);
  if (s->log_target && s->kind != LOSS_KL_DIV) return fail(g, loc, "%s: log_target is kl_div's", name);
  if (s->kind == LOSS_CROSS_ENTROPY && !(s->label_smoothing >= 0 && s->label_smoothing <= 1))
    return fail(g, loc, "%s: label_smoothing must be between 0 and 1, got %g", name, s->label_smoothing);
  if (s->kind == LOSS_SMOOTH_L1 && !(s->beta >= 0 && isfinite(s->beta)))
    return fail(g, loc, "%s: beta must be 0 or more, got %g", name, s->beta);
  if (s->kind == LOSS_HUBER && !(s->delta > 0 && isfinite(s->delta)))
    return fail(g, loc, "%s: delta must be more than 0, got %g", name, s->delta);
  if (s->weight && !classes) return fail(g, loc, "%s: a class weight is for cross_entropy and nll_loss", name);
  if (s->pos_weight && s->kind != LOSS_BCE_WITH_LOGITS)
    return fail(g, loc, "%s: pos_weight is for binary_cross_entropy_with_logits", name);
  if (s->pos_weight) {
    const TensorType *wt = &s->pos_weight->type;
    bool fits = wt->dtype == pt->dtype && wt->rank <= pt->rank;
    for (int d = 1; fits && d <= wt->rank; d++)
      fits = wt->dims[wt->rank - d] == 1 || wt->dims[wt->rank - d] == pt->dims[pt->rank - d];
    if (!fits)
      return fail(g, loc, "%s: pos_weight %s does not broadcast against input %s", name,
                  ir_type_str(wt, eb, sizeof eb), pb);
  }
  if (!classes) {
    if (ir_type_eq(pt, tt)) return true;
    return fail(g, loc, "%s: target %s does not fit input %s: it must have the same shape and dtype", name, tb, pb);
  }
  if (s->weight) {
    const TensorType *wt = &s->weight->type;
    int64_t C = pt->dims[pt->rank >= 2 ? 1 : 0];
    if (wt->dtype != pt->dtype || wt->rank != 1 || wt->dims[0] != C) {
      TensorType want = {.dtype = pt->dtype, .rank = 1, .dims = {C}};
      char wb[IR_TYPE_STR_MAX];
      return fail(g, loc, "%s: weight %s does not fit %s %s: expected one per class, %s", name,
                  ir_type_str(wt, eb, sizeof eb), what, pb, ir_type_str(&want, wb, sizeof wb));
    }
  }
  if (pt->rank < 1) return fail(g, loc, "%s: %s must be [C] or [N, C, ...], got %s", name, what, pb);
  TensorType want = index_type(pt, is_index_type(tt->dtype) ? tt->dtype : TY_I64);
  ir_type_str(&want, eb, sizeof eb);
  if (is_index_type(tt->dtype) && ir_type_eq(&want, tt)) return true;
  if (s->kind == LOSS_CROSS_ENTROPY && ir_type_eq(pt, tt)) return true;
  if (s->kind == LOSS_NLL)
    return fail(g, loc, "%s: target %s does not fit %s %s: expected class indices %s", name, tb, what, pb, eb);
  return fail(g, loc, "%s: target %s does not fit %s %s: expected class indices %s or probabilities %s", name, tb,
              what, pb, eb, pb);
}

Value *loss_build(Graph *g, const LossSpec *s, Value *pred, Value *target, SrcLoc loc) {
  if (s->kind < 0 || s->kind >= LOSS_COUNT) {
    fail(g, loc, "unknown loss %d", (int)s->kind);
    return NULL;
  }
  if (!check(g, s, pred, target, loc)) return NULL;
  Build b = {g, loc, pred->type.dtype};
  if (s->kind == LOSS_CROSS_ENTROPY || s->kind == LOSS_NLL) return class_loss(&b, s, pred, target);
  return pointwise(&b, s, pred, target);
}
