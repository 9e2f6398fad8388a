/* The cost model beside the op table: takes a node (or the nodes one
 * kernel computes together) and returns its arithmetic operations and
 * the fewest bytes it must move, from types and attributes alone.
 * docs/cost.md says what counts; every op of ops.def has a row below. */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* How an op's FLOPs follow from its node.  RULE_LINEAR is
 * per_in * numel(x) + per_out * numel(result); the others have a
 * function of their own below. */
typedef enum {
  RULE_MISSING, /* zero: an op without a row, which a test catches */
  RULE_SOURCE,  /* input, param, const: nothing computed, nothing moved (a reader pays) */
  RULE_VIEW,    /* reshape: the same bytes under another shape */
  RULE_LINEAR,
  RULE_GELU,
  RULE_BATCHNORM,
  RULE_SOFTMAX, /* per_in per element, per_out per row */
  RULE_LAYERNORM, /* layernorm and group_norm */
  RULE_RMS_NORM,
  RULE_MATMUL,
  RULE_LINEAR_LAYER,
  RULE_CONV,
  RULE_CONV_TRANSPOSE,
  RULE_POOL, /* per_in per tap of each window, per_out per result */
  RULE_RESIZE,
  RULE_GRID_SAMPLE,
  RULE_SELECT, /* slice and gathers: read only the elements they pick */
  RULE_SCATTER,
  RULE_TOPK,
  RULE_RNN,
  RULE_ATTENTION,
  RULE_ATTENTION_GRAD,
  RULE_CONV_WEIGHT_GRAD,
  RULE_POOL_GRAD, /* per_in per tap of each window of dy, per_out per element of dy */
  RULE_RESIZE_GRAD,
  RULE_OPTIM, /* per element of the param, the operations of its kind's rule */
} CostRule;

typedef struct OpCost {
  CostRule rule;
  int per_in, per_out;
} OpCost;

/* Per element, each arithmetic operation, comparison, select or
 * function (exp, tanh, erf, ...) of the op's definition counts 1, on any
 * dtype; a conversion (cast) counts 0. */
static const OpCost op_cost[] = {
    [OP_INPUT] = {RULE_SOURCE, 0, 0},
    [OP_PARAM] = {RULE_SOURCE, 0, 0},
    [OP_CONST] = {RULE_SOURCE, 0, 0},
    [OP_NEG] = {RULE_LINEAR, 0, 1},
    [OP_ABS] = {RULE_LINEAR, 0, 1},
    [OP_RELU] = {RULE_LINEAR, 0, 1},         /* max(x, 0) */
    [OP_LEAKY_RELU] = {RULE_LINEAR, 0, 2},   /* a * x, select */
    [OP_CLIP] = {RULE_LINEAR, 0, 2},         /* max, min */
    [OP_SIGMOID] = {RULE_LINEAR, 0, 4},      /* 1 / (1 + exp(-x)) */
    [OP_TANH] = {RULE_LINEAR, 0, 1},
    [OP_GELU] = {RULE_GELU, 0, 0},
    [OP_SILU] = {RULE_LINEAR, 0, 5},         /* x * sigmoid(x) */
    [OP_HARDSIGMOID] = {RULE_LINEAR, 0, 4},  /* min(max(x / 6 + 0.5, 0), 1) */
    [OP_HARDSWISH] = {RULE_LINEAR, 0, 5},    /* x * hardsigmoid(x) */
    [OP_EXP] = {RULE_LINEAR, 0, 1},
    [OP_LOG] = {RULE_LINEAR, 0, 1},
    [OP_SQRT] = {RULE_LINEAR, 0, 1},
    [OP_RSQRT] = {RULE_LINEAR, 0, 1},
    [OP_ERF] = {RULE_LINEAR, 0, 1},
    [OP_RECIPROCAL] = {RULE_LINEAR, 0, 1},
    [OP_SIN] = {RULE_LINEAR, 0, 1},
    [OP_COS] = {RULE_LINEAR, 0, 1},
    [OP_ROUND] = {RULE_LINEAR, 0, 1},
    [OP_FLOOR] = {RULE_LINEAR, 0, 1},
    [OP_CEIL] = {RULE_LINEAR, 0, 1},
    [OP_FP_ROUND] = {RULE_LINEAR, 0, 8}, /* frexp, a scale, rint, the range */
    [OP_SIGN] = {RULE_LINEAR, 0, 1},
    [OP_TAN] = {RULE_LINEAR, 0, 1},
    [OP_ASIN] = {RULE_LINEAR, 0, 1},
    [OP_ACOS] = {RULE_LINEAR, 0, 1},
    [OP_ATAN] = {RULE_LINEAR, 0, 1},
    [OP_SINH] = {RULE_LINEAR, 0, 1},
    [OP_COSH] = {RULE_LINEAR, 0, 1},
    [OP_ASINH] = {RULE_LINEAR, 0, 1},
    [OP_ACOSH] = {RULE_LINEAR, 0, 1},
    [OP_ATANH] = {RULE_LINEAR, 0, 1},
    [OP_CAST] = {RULE_LINEAR, 0, 0},
    [OP_QUANTIZE] = {RULE_LINEAR, 0, 5},     /* x / scale, round, + zero point, max, min */
    [OP_DEQUANTIZE] = {RULE_LINEAR, 0, 2},   /* (q - zero point) * scale */
    [OP_ADD] = {RULE_LINEAR, 0, 1},
    [OP_SUB] = {RULE_LINEAR, 0, 1},
    [OP_MUL] = {RULE_LINEAR, 0, 1},
    [OP_DIV] = {RULE_LINEAR, 0, 1},
    [OP_POW] = {RULE_LINEAR, 0, 1},
    [OP_MAXIMUM] = {RULE_LINEAR, 0, 1},
    [OP_MINIMUM] = {RULE_LINEAR, 0, 1},
    [OP_MOD] = {RULE_LINEAR, 0, 1},
    [OP_EQ] = {RULE_LINEAR, 0, 1},
    [OP_NE] = {RULE_LINEAR, 0, 1},
    [OP_LT] = {RULE_LINEAR, 0, 1},
    [OP_LE] = {RULE_LINEAR, 0, 1},
    [OP_GT] = {RULE_LINEAR, 0, 1},
    [OP_GE] = {RULE_LINEAR, 0, 1},
    [OP_BIT_AND] = {RULE_LINEAR, 0, 1},
    [OP_BIT_OR] = {RULE_LINEAR, 0, 1},
    [OP_BIT_XOR] = {RULE_LINEAR, 0, 1},
    [OP_BIT_NOT] = {RULE_LINEAR, 0, 1},
    [OP_SHL] = {RULE_LINEAR, 0, 2}, /* the width test, the shift */
    [OP_SHR] = {RULE_LINEAR, 0, 2},
    [OP_BITCAST] = {RULE_LINEAR, 0, 0},
    [OP_EQUAL] = {RULE_LINEAR, 0, 1},
    [OP_NOT_EQUAL] = {RULE_LINEAR, 0, 1},
    [OP_LESS] = {RULE_LINEAR, 0, 1},
    [OP_LESS_EQUAL] = {RULE_LINEAR, 0, 1},
    [OP_GREATER] = {RULE_LINEAR, 0, 1},
    [OP_GREATER_EQUAL] = {RULE_LINEAR, 0, 1},
    [OP_ISNAN] = {RULE_LINEAR, 0, 1},
    [OP_ISINF] = {RULE_LINEAR, 0, 1},
    [OP_LOGICAL_NOT] = {RULE_LINEAR, 0, 1},
    [OP_LOGICAL_AND] = {RULE_LINEAR, 0, 1},
    [OP_LOGICAL_OR] = {RULE_LINEAR, 0, 1},
    [OP_LOGICAL_XOR] = {RULE_LINEAR, 0, 1},
    [OP_WHERE] = {RULE_LINEAR, 0, 1},
    [OP_CHECK] = {RULE_LINEAR, 0, 0},
    [OP_LOOP_BEGIN] = {RULE_LINEAR, 0, 0}, /* copies; a step's body costs its own */
    [OP_LOOP_END] = {RULE_LINEAR, 0, 0},
    /* A reduction combines each input element into its accumulator once;
     * a mean then divides each result. */
    [OP_REDUCE_SUM] = {RULE_LINEAR, 1, 0},
    [OP_REDUCE_MEAN] = {RULE_LINEAR, 1, 1},
    [OP_REDUCE_MAX] = {RULE_LINEAR, 1, 0},
    [OP_REDUCE_MIN] = {RULE_LINEAR, 1, 0},
    [OP_REDUCE_PROD] = {RULE_LINEAR, 1, 0},
    [OP_ARGMAX] = {RULE_LINEAR, 1, 0},
    /* max, x - max, exp, sum, then / sum per element; log_softmax: the
     * same four, a log per row, and x - max - log per element */
    [OP_SOFTMAX] = {RULE_SOFTMAX, 5, 0},
    [OP_LOG_SOFTMAX] = {RULE_SOFTMAX, 5, 1},
    [OP_LAYERNORM] = {RULE_LAYERNORM, 0, 0},
    [OP_RMS_NORM] = {RULE_RMS_NORM, 0, 0},
    [OP_GROUP_NORM] = {RULE_LAYERNORM, 0, 0},
    [OP_GLOBAL_AVGPOOL] = {RULE_LINEAR, 1, 1},
    [OP_BATCHNORM] = {RULE_BATCHNORM, 0, 0},
    [OP_MATMUL] = {RULE_MATMUL, 0, 0},
    [OP_LINEAR] = {RULE_LINEAR_LAYER, 0, 0},
    [OP_CONV2D] = {RULE_CONV, 0, 0},
    [OP_CONV_TRANSPOSE2D] = {RULE_CONV_TRANSPOSE, 0, 0},
    [OP_CONV3D] = {RULE_CONV, 0, 0},
    [OP_CONV_TRANSPOSE3D] = {RULE_CONV_TRANSPOSE, 0, 0},
    [OP_MAXPOOL2D] = {RULE_POOL, 1, 0},      /* a comparison per tap */
    [OP_AVGPOOL2D] = {RULE_POOL, 1, 1},      /* an add per tap, a division */
    [OP_MAXPOOL3D] = {RULE_POOL, 1, 0},
    [OP_AVGPOOL3D] = {RULE_POOL, 1, 1},
    [OP_ATTENTION] = {RULE_ATTENTION, 0, 0},
    [OP_RESIZE] = {RULE_RESIZE, 0, 0},
    [OP_GRID_SAMPLE] = {RULE_GRID_SAMPLE, 0, 0},
    [OP_RESHAPE] = {RULE_VIEW, 0, 0},
    [OP_TRANSPOSE] = {RULE_LINEAR, 0, 0},
    [OP_EXPAND] = {RULE_LINEAR, 0, 0},
    [OP_CONCAT] = {RULE_LINEAR, 0, 0},
    [OP_SLICE] = {RULE_SELECT, 0, 0},
    [OP_PAD] = {RULE_LINEAR, 0, 0},
    [OP_GATHER] = {RULE_SELECT, 0, 0},
    [OP_GATHER_ELEMENTS] = {RULE_SELECT, 0, 0},
    [OP_GATHER_ND] = {RULE_SELECT, 0, 0},
    [OP_SCATTER_ELEMENTS] = {RULE_SCATTER, 0, 0},
    [OP_SCATTER_ND] = {RULE_SCATTER, 0, 0},
    [OP_TOPK] = {RULE_TOPK, 0, 0},
    [OP_IOTA] = {RULE_LINEAR, 0, 2},         /* start + step * coordinate */
    [OP_NONZERO] = {RULE_LINEAR, 1, 0}, /* a comparison per element of x */
    [OP_SHAPE_OF] = {RULE_LINEAR, 0, 0},    /* replaced at import (ir/bounds.c) */
    [OP_WITH_LENGTH] = {RULE_LINEAR, 0, 0},
    [OP_UNIQUE] = {RULE_LINEAR, 4, 0}, /* a key, a sort's comparisons (log n of them, not counted) */
    [OP_NMS] = {RULE_LINEAR, 20, 0},    /* a pass over the scores and an IoU per box, per box kept (about) */
    [OP_LSTM] = {RULE_RNN, 0, 0},
    [OP_GRU] = {RULE_RNN, 0, 0},
    /* the cell's backward per gate element; the recurrent product (2H
     * per element of dp) is not counted */
    [OP_LSTM_BPTT] = {RULE_LINEAR, 0, 20},
    [OP_GRU_BPTT] = {RULE_LINEAR, 0, 12}, /* likewise per element of dpx (dph's n part one more multiply) */
    [OP_ATTENTION_LSE] = {RULE_ATTENTION, 0, 0},
    [OP_ATTENTION_GRAD] = {RULE_ATTENTION_GRAD, 0, 0},
    [OP_CONV_WEIGHT_GRAD] = {RULE_CONV_WEIGHT_GRAD, 0, 0},
    [OP_MAXPOOL_GRAD] = {RULE_POOL_GRAD, 1, 1}, /* a comparison per tap finds the argmax; an add */
    [OP_AVGPOOL_GRAD] = {RULE_POOL_GRAD, 1, 1}, /* an add per tap, a division per window */
    [OP_EMBEDDING_GRAD] = {RULE_LINEAR, 1, 0},  /* each row of dy added once */
    /* max, x - max, exp and two sums per element of x; the row's log
     * and loss per result */
    [OP_XENT] = {RULE_LINEAR, 5, 6},
    /* max, x - max, exp and sum per element of x, then exp, / sum, the
     * one-hot's subtraction and * dy per element of the result */
    [OP_XENT_GRAD] = {RULE_LINEAR, 4, 4},
    /* both: the forward's per element of x and its row's loss, the
     * gradient's per element of the result (x's shape) counted there */
    [OP_XENT_BOTH] = {RULE_LINEAR, 9, 6},
    /* Philox4x32-10 per element (10 rounds of 2 multiplies, 4 xors and
     * the key's 2 adds), the comparison, the select and the scale */
    [OP_DROPOUT] = {RULE_LINEAR, 0, 83},
    [OP_RANDOM_UNIFORM] = {RULE_LINEAR, 0, 82}, /* dropout's Philox draw and a scale */
    [OP_RESIZE_GRAD] = {RULE_RESIZE_GRAD, 0, 0},
    [OP_OPTIM_UPDATE] = {RULE_OPTIM, 0, 0},
    [OP_ALLREDUCE_MEAN] = {RULE_LINEAR, 0, 0}, /* the communicator's, not the device's */
    [OP_TP_COPY] = {RULE_LINEAR, 0, 0},
    [OP_STAGE] = {RULE_LINEAR, 0, 0},
    [OP_ALLREDUCE_SUM] = {RULE_LINEAR, 0, 0},
};
static_assert(ARRAY_LEN(op_cost) == OP_COUNT, "every op of ops.def has a row in op_cost");

bool ir_cost_has_rule(OpKind op) { return op < OP_COUNT && op_cost[op].rule != RULE_MISSING; }

static double numel(const TensorType *t) {
  double n = 1;
  for (int i = 0; i < t->rank; i++) n *= (double)t->dims[i];
  return n;
}

static double bytes_of(const Value *v) { return numel(&v->type) * ir_dtype_size(v->type.dtype); }

static double product(const int64_t *v, int count) {
  double p = 1;
  for (int i = 0; i < count; i++) p *= (double)v[i];
  return p;
}

/* The rows a normalization computes statistics of: the leading dims
 * before axis (group_norm: N times groups). */
static double norm_rows(const Node *n) {
  const TensorType *x = &n->in[0]->type;
  if (n->op == OP_GROUP_NORM) return x->rank > 0 ? (double)x->dims[0] * (double)ir_attr_int(n, "groups") : 0;
  int axis = (int)ir_attr_int(n, "axis");
  if (axis < 0) axis += x->rank;
  return product(x->dims, axis);
}

/* Multiply-adds per result of a convolution: one per weight of a
 * filter, W [Cout, Cin/groups, k...] (transposed: per input element,
 * W [Cin, Cout/groups, k...]). */
static double filter_size(const Value *w) {
  return w->type.rank ? numel(&w->type) / (double)w->type.dims[0] : 0;
}

static double rnn_flops(const Node *n) {
  bool lstm = n->op == OP_LSTM, bf = ir_attr_int(n, "batch_first") != 0;
  double H = (double)ir_attr_int(n, "hidden"), layers = (double)ir_attr_int(n, "layers");
  double dirs = ir_attr_int(n, "bidirectional") ? 2 : 1, G = lstm ? 4 : 3;
  const TensorType *x = &n->in[0]->type;
  if (x->rank != 3) return 0;
  double N = (double)x->dims[bf ? 0 : 1], T = (double)x->dims[bf ? 1 : 0], I = (double)x->dims[2];
  /* per hidden unit and timestep, after the two projections: the gates'
   * input + hidden sums, then LSTM: 3 sigmoids (4 each), tanh, c = f*c +
   * i*g, h = o*tanh(c); GRU: 2 sigmoids, n = tanh(x_n + r*h_n), h =
   * (1-z)*n + z*h */
  double gates = lstm ? 4 + 12 + 1 + 3 + 2 : 2 + 8 + 3 + 4;
  double bias = ir_attr_int(n, "bias") ? 2 * G * H : 0, total = 0;
  for (double l = 0; l < layers; l++) {
    double in = l == 0 ? I : dirs * H;
    total += dirs * T * N * (2 * G * H * (in + H) + bias + gates * H);
  }
  return total;
}

static double flops_of(const Node *n) {
  const OpCost *c = &op_cost[n->op];
  const TensorType *out = &n->out[0].type;
  const TensorType *x = n->n_in ? &n->in[0]->type : out;
  double nx = numel(x), no = numel(out);
  switch (c->rule) {
    case RULE_MISSING:
    case RULE_SOURCE:
    case RULE_VIEW:
    case RULE_SELECT: return 0;
    case RULE_LINEAR: return c->per_in * nx + c->per_out * no;
    case RULE_GELU:
      /* 0.5 * x * (1 + erf(x / sqrt 2)); the tanh form adds the cubic */
      return (strcmp(ir_attr_str(n, "approximate"), "tanh") == 0 ? 9 : 5) * no;
    case RULE_BATCHNORM:
      /* (x - mean) / sqrt(var + eps) * weight + bias per element, the
       * add and the sqrt per channel */
      return 4 * no + 2 * numel(&n->in[1]->type);
    case RULE_SOFTMAX: {
      double len = (double)x->dims[ir_attr_int(n, "axis")];
      return c->per_in * nx + c->per_out * (len ? nx / len : 0);
    }
    case RULE_LAYERNORM: {
      /* mean (sum, divide), x - mean, the variance (square, sum, divide),
       * + eps and rsqrt per row, times rsqrt; then weight and bias */
      double rows = norm_rows(n);
      return 5 * nx + 4 * rows + (n->n_in - 1) * nx;
    }
    case RULE_RMS_NORM:
      /* square and sum; divide, + eps and rsqrt per row; times rsqrt; then weight */
      return 3 * nx + 3 * norm_rows(n) + (n->n_in - 1) * nx;
    case RULE_MATMUL: {
      TensorType a = ir_matmul_operand(n, 0);
      return 2 * no * (double)a.dims[a.rank - 1];
    }
    case RULE_LINEAR_LAYER: return 2 * no * (double)x->dims[x->rank - 1] + (n->n_in > 2 ? no : 0);
    case RULE_CONV: return 2 * no * filter_size(n->in[1]) + (n->n_in > 2 ? no : 0);
    case RULE_CONV_TRANSPOSE: {
      /* each input value meets Cout/groups x taps weights, in either layout */
      double cin = x->rank ? (double)x->dims[ir_nhwc(n) ? x->rank - 1 : 1] : 1;
      return 2 * nx * (cin > 0 ? numel(&n->in[1]->type) / cin : 0) + (n->n_in > 2 ? no : 0);
    }
    case RULE_POOL: {
      int count;
      const int64_t *k = ir_attr_ints(n, "kernel", &count);
      return c->per_in * no * product(k, count) + c->per_out * no;
    }
    case RULE_RESIZE:
      /* bilinear: a multiply-add for each of the 2x2 neighbours */
      return strcmp(ir_attr_str(n, "mode"), "bilinear") == 0 ? 8 * no : 0;
    case RULE_GRID_SAMPLE: {
      /* the taps' multiply-adds (bilinear 2x2, 2x2x2 in a volume,
       * bicubic 4x4; nearest copies one), and each coordinate
       * unnormalized per grid point */
      const char *mode = ir_attr_str(n, "mode");
      bool volume = n->in[0]->type.rank == 5;
      double taps = strcmp(mode, "bilinear") == 0 ? (volume ? 8 : 4) : strcmp(mode, "bicubic") == 0 ? 16 : 0;
      return 2 * taps * no + 2 * numel(&n->in[1]->type);
    }
    case RULE_SCATTER:
      return strcmp(ir_attr_str(n, "reduction"), "none") == 0 ? 0 : numel(&n->in[2]->type);
    case RULE_TOPK: {
      /* every element of a row against a heap of the k kept */
      double k = (double)ir_attr_int(n, "k");
      return nx * ceil(log2(k + 1));
    }
    case RULE_RNN: return rnn_flops(n);
    case RULE_ATTENTION: {
      /* the two products' multiply-adds, q k^T and p v: the softmax's
       * few operations per score are left out, as FlashAttention counts */
      const TensorType *k = &n->in[1]->type;
      return 4 * nx * (double)k->dims[strcmp(ir_attr_str(n, "layout"), "bshd") == 0 ? 1 : 2];
    }
    case RULE_ATTENTION_GRAD: {
      /* the products the kernels compute, each Sq x Sk x d multiply-adds
       * per query head: q k^T and dy v^T twice (P and dP in each of the
       * two kernels), dS k, dS^T q and P^T dy; FlashAttention-2 counts 5
       * (its dq by atomics from the dk/dv kernel shares P and dP) */
      const TensorType *k = &n->in[1]->type;
      return 14 * nx * (double)k->dims[strcmp(ir_attr_str(n, "layout"), "bshd") == 0 ? 1 : 2];
    }
    case RULE_CONV_WEIGHT_GRAD: {
      /* a multiply-add per weight, batch row and output position */
      const TensorType *dy = &n->in[1]->type;
      return dy->rank > 1 && dy->dims[1] ? 2 * no * numel(dy) / (double)dy->dims[1] : 0;
    }
    case RULE_OPTIM: {
      /* sgd: the scale, the decay's 2, momentum's 4 (and nesterov's 2),
       * the step's 2; adam: the scale, the decay's 2, the moments' 7
       * (amsgrad's max 1 more), the denominator's 3, the step's 3 (the
       * scalar bias corrections per element too, as the kernel computes
       * them); rmsprop: the scale, the decay's 2, the square's 4 (the
       * centered mean's 5), the denominator's 2, the step's 3 (with
       * momentum 4); adagrad: the scale, the decay's 2, the sum's 2, the
       * denominator's 2, the decayed rate's 4, the step's 3 */
      const char *kind = ir_attr_str(n, "kind");
      double clip = 2 * (ir_attr_float(n, "clip_value") > 0); /* clip_value's min and max */
      if (strcmp(kind, "sgd") == 0) return (11 + clip) * nx;
      if (strcmp(kind, "rmsprop") == 0)
        return (12 + clip + 5 * (ir_attr_int(n, "centered") != 0) + (ir_attr_float(n, "momentum") > 0)) * nx;
      if (strcmp(kind, "adagrad") == 0) return (14 + clip) * nx;
      /* adamax: the moment's lerp 3, the max's 3, the step's 3; adadelta:
       * the averages' 8, the two roots and their adds 4, the ratio's 2, the
       * step's 2; radam and nadam: the moments' 8, the denominator's 3, the
       * step's 4 (nadam's two steps 6); each with the scale, the decay's 2
       * and about 20 scalar double operations a thread for the per-step
       * factors (pow's counted as 8) */
      if (strcmp(kind, "adamax") == 0) return (12 + 20 + clip) * nx;
      if (strcmp(kind, "adadelta") == 0) return (19 + clip) * nx;
      if (strcmp(kind, "radam") == 0 || strcmp(kind, "nadam") == 0) return (18 + 20 + clip) * nx;
      return (21 + clip + (ir_attr_int(n, "amsgrad") != 0)) * nx;
    }
    case RULE_RESIZE_GRAD:
      /* per element of dy: bilinear's 2x2 weights times dy and the adds,
       * nearest's add */
      return strcmp(ir_attr_str(n, "mode"), "bilinear") == 0 ? 8 * nx : nx;
    case RULE_POOL_GRAD: {
      int count;
      const int64_t *k = ir_attr_ints(n, "kernel", &count);
      return (c->per_in * product(k, count) + c->per_out) * nx;
    }
  }
  return 0;
}

/* The bytes of operand i that n reads: all of them, but for a slice or
 * gather, which reads one element of data per element it writes. */
static double read_bytes(const Node *n, int i) {
  double all = bytes_of(n->in[i]);
  if (op_cost[n->op].rule == RULE_SELECT && i == 0) {
    double picked = numel(&n->out[0].type) * ir_dtype_size(n->in[0]->type.dtype);
    return picked < all ? picked : all;
  }
  return all;
}

/* The value whose bytes v is: reshapes are views of their operand. */
static const Value *storage(const Value *v) {
  while (v->def->op == OP_RESHAPE) v = v->def->in[0];
  return v;
}

static int cmp_addr(uintptr_t x, uintptr_t y) { return (x > y) - (x < y); }

static int cmp_node(const void *a, const void *b) {
  return cmp_addr((uintptr_t) * (const Node *const *)a, (uintptr_t) * (const Node *const *)b);
}

typedef struct Read {
  const Value *v;
  double bytes;
} Read;

static int cmp_read(const void *a, const void *b) {
  return cmp_addr((uintptr_t)((const Read *)a)->v, (uintptr_t)((const Read *)b)->v);
}

enum { SMALL = 64 };

IrCost ir_cost_fused(const Node *const *nodes, int count) {
  IrCost c = {0, 0};
  if (count <= 0) return c;
  size_t n_ops = 0;
  for (int i = 0; i < count; i++) n_ops += (size_t)nodes[i]->n_in;
  /* Sorted members and the reads from outside, sorted by value, so that
   * a group of thousands of nodes costs n log n. */
  const Node *small_set[SMALL], **set = small_set;
  Read small_reads[3 * SMALL], *reads = small_reads;
  if (count > SMALL) set = malloc(sizeof *set * (size_t)count);
  if (n_ops > 3 * SMALL) reads = malloc(sizeof *reads * n_ops);
  if (!set || !reads) {
    c.flops = c.bytes = NAN;
  } else {
    memcpy(set, nodes, sizeof *set * (size_t)count);
    qsort(set, (size_t)count, sizeof *set, cmp_node);
    size_t n_reads = 0;
    for (int i = 0; i < count; i++) {
      const Node *n = nodes[i];
      c.flops += flops_of(n);
      if (op_cost[n->op].rule == RULE_VIEW) continue;
      for (int j = 0; j < n->n_in; j++) {
        const Value *v = storage(n->in[j]);
        /* Values made inside move nothing; a splat const is an immediate. */
        if (v->def->op == OP_CONST || bsearch(&v->def, set, (size_t)count, sizeof *set, cmp_node))
          continue;
        reads[n_reads++] = (Read){v, read_bytes(n, j)};
      }
    }
    qsort(reads, n_reads, sizeof *reads, cmp_read);
    /* Two readers of the whole value still read it once; two slices of
     * it read their parts. */
    for (size_t r = 0; r < n_reads;) {
      double sum = 0, all = bytes_of(reads[r].v);
      size_t q = r;
      for (; q < n_reads && reads[q].v == reads[r].v; q++) sum += reads[q].bytes;
      c.bytes += sum < all ? sum : all;
      r = q;
    }
    const Node *last = nodes[count - 1];
    CostRule rule = op_cost[last->op].rule;
    if (rule != RULE_SOURCE && rule != RULE_VIEW)
      for (int o = 0; o < last->n_out; o++) c.bytes += bytes_of(&last->out[o]);
  }
  if (set != small_set) free(set);
  if (reads != small_reads) free(reads);
  return c;
}

IrCost ir_cost(const Node *n) { return ir_cost_fused(&n, 1); }
