/* int8 post-training quantization: takes a verified f32 graph and the
 * ranges a calibrator measured (PassOptions.calibrate), returns it with
 * its matrix products in int8.  The second precision pass; like the first
 * (precision.c) it leaves the signature and everything numerically
 * sensitive alone and changes only what flows into the products.
 *
 * Each conv2d, linear and matmul with one operand that is a function of
 * the weights alone (the weight) and one that is not (the activation)
 * becomes
 *
 *   xq  = quantize(x) {scale = s_x}          s_x = amax(x) / 127, per tensor
 *   ws  = reduce_max(abs(w)) / 127           per output channel
 *   wq  = quantize(w, ws)
 *   acc = product(xq, wq)                    i8 x i8 -> i32, exact
 *   y   = dequantize(acc, s_x * ws) + bias   f32 again
 *
 * Weights are symmetric (zero point 0).  An activation the graph proves
 * bounded below by lo > -amax (a relu's, a sigmoid's, a gelu's, a max
 * pool of those, ...) would waste most of the sign's codes that way, so
 * [lo, amax] is spread over all 256 codes with a zero point zp (-128 for
 * a relu's): up to half the rounding error.  The product then carries
 * zp * sum(wq) per output channel, which is subtracted again in f32
 * together with the bias:
 *
 *   y = dequantize(acc, s_x * ws) + (bias - zp * s_x * ws * sum(wq))
 *
 * where the second term is weight-only, so the epilogue is one multiply
 * and one add either way.  A convolution's padding must then stand for a
 * real 0, i.e. read the zero point: conv2d's zero_point attribute.
 * Lower bounds come from the graph, never from calibration data, so an
 * input that calibration happened to see only positive does not clip
 * the negatives it meets later.  The weight side is
 * a subgraph over the params, so codegen computes ws and wq in the init
 * steps, once per change of the weights: the per-channel scales follow
 * whatever weights are loaded later, while s_x is fixed by calibration
 * and written into the IR (and so into model.so) as the attribute.
 *
 * No quantize/dequantize pairs are inserted around other ops and so none
 * have to be folded again: the activation stays f32 everywhere except on
 * its way into a product.  int8 still flows between the products in
 * memory, because fusion (fuse.c) puts each product, its dequantize, bias,
 * activation and the next product's quantize into one kernel whose store
 * is the i8 tensor: requantization in the epilogue.  Where an f32 value
 * has other uses (a residual connection) it is stored as f32 and the next
 * product quantizes it as it loads.
 *
 * conv3d and the conv-transposes take the same rewrite with a symmetric
 * activation (zero point 0, whatever its lower bound): they have no
 * zero_point attribute, so their padding and a conv-transpose's holes
 * read 0, which then stands for a real 0.  A conv-transpose's output
 * channel is its weight's axis 1 within each group ([Cin, Cout/G, k..]
 * viewed as [G, Cin/G, Cout/G, k..] for the scales).
 *
 * Left in f32: products marked #f32 (precision="f32"), products of two
 * activations (attention's scores; ranges of both sides would compound)
 * or of two weights (computed once at load anyway), and products whose
 * operands are not f32. */
#include <math.h>
#include <string.h>

#include "passes/pass.h"

typedef struct Quant {
  Graph *g;
  bool *weight;          /* by node id: a function of params and consts alone */
  const Value **wanted;  /* the activations to calibrate, each once */
  double *amax;          /* their ranges, same order */
  int n_wanted;
  Node **xq;             /* by wanted index: its quantize node, made once */
  Node **xq_sym;         /* ... the symmetric one (symmetric_only's products) */
} Quant;

static bool is_conv(const Node *n) {
  return n->op == OP_CONV2D || n->op == OP_CONV3D || n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D;
}

static bool is_product(const Node *n) { return is_conv(n) || n->op == OP_LINEAR || n->op == OP_MATMUL; }

/* No zero_point attribute: the activation's zero point must be 0. */
static bool symmetric_only(const Node *n) { return is_conv(n) && n->op != OP_CONV2D; }

static bool is_transpose(const Node *n) { return n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D; }

static bool is_weight(const Quant *q, const Value *v) { return q->weight[v->def->id]; }

/* Which operand of product n is the weight, or -1 when n stays f32. */
static int weight_operand(const Quant *q, const Node *n) {
  if (!is_product(n)) return -1;
  if (ir_conv_nhwc(n)) return -1; /* per-channel scales and padding are written for NCHW */
  if (n->keep_f32) return -1;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->type.dtype != TY_F32) return -1;
  bool w0 = is_weight(q, n->in[0]), w1 = is_weight(q, n->in[1]);
  if (w0 == w1) return -1;
  if (n->op != OP_MATMUL) return w1 ? 1 : -1; /* convolutions and linear: the weight is operand 1 */
  /* A 1-d matmul operand loses its dim in the result, and with it the
   * place a per-channel scale would broadcast to. */
  if (n->in[0]->type.rank < 2 || n->in[1]->type.rank < 2) return -1;
  /* A transposed operand would move the channel axis under its scale. */
  if (ir_matmul_trans(n, 0) || ir_matmul_trans(n, 1)) return -1;
  return w1 ? 1 : 0;
}

/* A lower bound on every value of v (NaN aside) that the ops making it
 * prove, or -INFINITY.  The minima of gelu, silu and hardswish are those
 * of the functions, rounded down. */
static double lower_bound(const Value *v, int depth, int *work) {
  const Node *d = v->def;
  /* The work too: a chain of add(x, x) doubles the paths at each link. */
  if (depth > 32 || --*work < 0) return -INFINITY;
  switch (d->op) {
    case OP_RELU:
    case OP_SIGMOID:
    case OP_HARDSIGMOID:
    case OP_SOFTMAX:
    case OP_EXP:
    case OP_ABS:
    case OP_SQRT: return 0;
    case OP_GELU: return -0.1701;
    case OP_SILU: return -0.2785;
    case OP_HARDSWISH: return -0.375;
    case OP_TANH: return -1;
    case OP_CONST: return ir_attr_float(d, "value");
    case OP_CLIP: return fmax(ir_attr_float(d, "min"), lower_bound(d->in[0], depth + 1, work));
    case OP_MAXIMUM: return fmax(lower_bound(d->in[0], depth + 1, work), lower_bound(d->in[1], depth + 1, work));
    case OP_ADD: return lower_bound(d->in[0], depth + 1, work) + lower_bound(d->in[1], depth + 1, work);
    case OP_MUL:
    case OP_DIV:
      /* Only the product and quotient of two non-negatives are easy. */
      return lower_bound(d->in[0], depth + 1, work) >= 0 && lower_bound(d->in[1], depth + 1, work) >= 0 ? 0 : -INFINITY;
    case OP_MINIMUM:
    case OP_CONCAT: {
      double lo = INFINITY;
      for (int i = 0; i < d->n_in; i++) lo = fmin(lo, lower_bound(d->in[i], depth + 1, work));
      return lo;
    }
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_GLOBAL_AVGPOOL:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_REDUCE_MEAN:
    case OP_RESHAPE:
    case OP_TRANSPOSE:
    case OP_EXPAND:
    case OP_SLICE:
    case OP_RESIZE: return lower_bound(d->in[0], depth + 1, work);
    default: return -INFINITY;
  }
}

/* The activation's scale and zero point for range [lo, amax]: symmetric
 * unless the bound is closer to 0 than the range is wide, else the 256
 * codes spread over [lo, amax] with lo at -128 (up to rounding). */
static float activation_scale(double amax, double lo, int *zero_point) {
  *zero_point = 0;
  double s = amax / 127.0;
  if (lo > -amax && lo <= 0) {
    s = (amax - lo) / 255.0;
    *zero_point = -128 + (int)lround(-lo / s);
  }
  float f = (float)s;
  /* A range of 0 (calibration never saw anything else) quantizes every
   * value it saw exactly with any scale; 1 keeps the arithmetic finite. */
  if (!(f > 0) || isinf(f)) {
    *zero_point = 0;
    return 1.0f;
  }
  return f;
}

static int wanted_index(const Quant *q, const Value *v) {
  for (int i = 0; i < q->n_wanted; i++)
    if (q->wanted[i] == v) return i;
  return -1;
}

/* ---- builders ---- */

static Value *add_node(Graph *g, Node *before, OpKind op, int n_in, Value *const *in, SrcLoc loc) {
  return &pass_new_node(g, before, op, n_in, in, NULL, loc)->out[0];
}

static Value *splat(Graph *g, Node *before, double value, SrcLoc loc) {
  TensorType t = ir_type_make(TY_F32, 0, NULL);
  return pass_new_const(g, before, value, &t, loc);
}

/* A node whose attributes must be set before its types can be inferred. */
static Value *finish(Graph *g, Node *before, Node *n) {
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "quantize: %s: %s", ir_ops[n->op].name, err);
  ir_insert_before(g, before, n);
  return &n->out[0];
}

static Value *reshape(Graph *g, Node *before, Value *v, int rank, const int64_t *dims, SrcLoc loc) {
  TensorType t = ir_type_make(v->type.dtype, rank, dims);
  if (ir_type_eq(&t, &v->type)) return v;
  Node *n = ir_node_new(g, OP_RESHAPE, 1, &v, loc);
  ir_set_ints(g, n, "shape", rank, dims);
  return finish(g, before, n);
}

static Value *quantize_by(Graph *g, Node *before, Value *x, double scale, int zero_point,
                          Value *scales, SrcLoc loc) {
  Value *in[2] = {x, scales};
  Node *n = ir_node_new(g, OP_QUANTIZE, scales ? 2 : 1, in, loc);
  if (!scales) ir_set_float(g, n, "scale", scale);
  if (zero_point) ir_set_int(g, n, "zero_point", zero_point);
  return finish(g, before, n);
}

/* ---- the weight side ---- */

/* The axes of weight w that product n sums over; what is left is its
 * output channel (and a matmul's batch). */
static int contraction_axes(const Node *n, int wi, const Value *w, int64_t *axes) {
  int rank = w->type.rank, k = 0;
  if (is_conv(n) || n->op == OP_LINEAR) {
    for (int d = 1; d < rank; d++) axes[k++] = d; /* channel: dim 0 */
  } else {
    axes[k++] = wi == 1 ? rank - 2 : rank - 1; /* x @ W: W's rows; W @ x: its columns */
  }
  return k;
}

static Value *reduce(Graph *g, Node *before, OpKind op, Value *x, int n_axes, const int64_t *axes,
                     SrcLoc loc) {
  Node *r = ir_node_new(g, op, 1, &x, loc);
  ir_set_ints(g, r, "axes", n_axes, axes);
  ir_set_int(g, r, "keepdims", 1);
  return finish(g, before, r);
}

/* Per-channel scales of weight w as product n uses it: the largest |w|
 * of each output channel over 127, shaped to broadcast into w.  A channel
 * of zeros gets scale 0: its quantize divides 0 by 0, which quantize
 * defines as the zero point 0, and its dequantize multiplies by 0. */
static Value *weight_scales(Graph *g, Node *before, const Node *n, int n_axes, const int64_t *axes,
                            Value *w) {
  Value *a = add_node(g, before, OP_ABS, 1, &w, n->loc);
  Value *m = reduce(g, before, OP_REDUCE_MAX, a, n_axes, axes, n->loc);
  Value *d[2] = {m, splat(g, before, 127.0, n->loc)};
  return add_node(g, before, OP_DIV, 2, d, n->loc);
}

/* Per-channel values (scales, a bias) shaped for product n's result:
 * [Co, 1, 1] against NCHW (one 1 more for a volume), [out] against [...,
 * out], and as they are for a matmul (a [1, N] or [M, 1] broadcasts into
 * [..., M, N]). */
static Value *result_scales(Graph *g, Node *before, const Node *n, Value *ws) {
  int64_t dims[DL_MAX_RANK] = {ir_type_numel(&ws->type), 1, 1, 1};
  if (is_conv(n)) return reshape(g, before, ws, n->out[0].type.rank - 1, dims, n->loc);
  if (n->op == OP_LINEAR) return reshape(g, before, ws, 1, dims, n->loc);
  return ws;
}

/* The weight operand's name for reports: the first param it is made of. */
static const char *weight_name(const Value *w) {
  for (int depth = 0; depth < 64; depth++) {
    const Node *d = w->def;
    if (d->op == OP_PARAM) return ir_attr_str(d, "name");
    if (d->n_in == 0) return NULL;
    w = d->in[0];
    for (int i = 0; i < d->n_in; i++)
      if (d->in[i]->def->op == OP_PARAM) w = d->in[i];
  }
  return NULL;
}

/* ---- one product ---- */

static Value *quantize_product(Quant *q, Node *n, int wi, const Value *orig_x, QuantLayer *rec) {
  Graph *g = q->g;
  SrcLoc loc = n->loc;
  int xi = 1 - wi, k = wanted_index(q, orig_x);
  double amax = q->amax[k];
  int zp;
  int work = 4096;
  bool sym = symmetric_only(n);
  float sx = activation_scale(amax, sym ? -INFINITY : lower_bound(orig_x, 0, &work), &zp);
  Node **xq = sym ? &q->xq_sym[k] : &q->xq[k];
  if (!*xq) *xq = quantize_by(g, n, n->in[xi], sx, zp, NULL, loc)->def;

  /* A conv-transpose's weight viewed as [G, Cin/G, Cout/G, k..] for its
   * scales, then quantized back in its own shape. */
  Value *w = n->in[wi], *wv = w;
  int64_t axes[DL_MAX_RANK];
  int n_axes;
  if (is_transpose(n)) {
    int r = w->type.rank;
    int64_t G = ir_attr_int(n, "groups"), dims[DL_MAX_RANK] = {G, w->type.dims[0] / G};
    for (int d = 1; d < r; d++) dims[d + 1] = w->type.dims[d];
    wv = reshape(g, n, w, r + 1, dims, loc);
    n_axes = 0;
    axes[n_axes++] = 1;
    for (int d = 3; d <= r; d++) axes[n_axes++] = d;
  } else {
    n_axes = contraction_axes(n, wi, w, axes);
  }
  Value *ws = weight_scales(g, n, n, n_axes, axes, wv);
  Value *wq = quantize_by(g, n, wv, 0, 0, ws, loc);
  if (wv != w) wq = reshape(g, n, wq, w->type.rank, w->type.dims, loc);

  Value *in[2];
  in[xi] = &(*xq)->out[0];
  in[wi] = wq;
  Node *p = pass_new_node(g, n, n->op, 2, in, n, loc);
  if (zp && n->op == OP_CONV2D) { /* zp is 0 for every other convolution */
    ir_set_int(g, p, "zero_point", zp);
    char err[256];
    if (!ir_infer(p, err, sizeof err)) dl_internal(g->ctx, "quantize: conv2d: %s", err);
  }

  Value *m[2] = {ws, splat(g, n, sx, loc)};
  Value *scales = add_node(g, n, OP_MUL, 2, m, loc); /* shaped like ws */
  Value *dq[2] = {&p->out[0], result_scales(g, n, n, scales)};
  Value *y = add_node(g, n, OP_DEQUANTIZE, 2, dq, loc);
  /* What is added after the dequantize, shaped like ws: the zero point's
   * share of the product, -zp * s_x * ws * sum(wq), and the bias. */
  Value *shift = NULL;
  if (zp) {
    Node *cast = ir_node_new(g, OP_CAST, 1, &wq, loc);
    ir_set_dtype(g, cast, "to", TY_F32);
    Value *sum = reduce(g, n, OP_REDUCE_SUM, finish(g, n, cast), n_axes, axes, loc);
    Value *f[2] = {scales, splat(g, n, -(double)zp, loc)};
    Value *c[2] = {add_node(g, n, OP_MUL, 2, f, loc), sum};
    shift = result_scales(g, n, n, add_node(g, n, OP_MUL, 2, c, loc));
  }
  if (n->n_in > 2) {
    Value *b = n->in[2];
    if (is_conv(n)) b = result_scales(g, n, n, b);
    Value *sb[2] = {shift, b};
    shift = shift ? add_node(g, n, OP_ADD, 2, sb, loc) : b;
  }
  if (shift) {
    Value *ys[2] = {y, shift};
    y = add_node(g, n, OP_ADD, 2, ys, loc);
  }
  const char *wname = weight_name(w);
  *rec = (QuantLayer){
      .label = arena_printf(&g->ctx->arena, "%s %%%d%s%s", ir_ops[n->op].name, n->out[0].id,
                            wname ? " " : "", wname ? wname : ""),
      .loc = loc,
      .orig_value_id = n->out[0].id,
      .result = y,
      .amax = amax,
      .scale = sx,
      .zero_point = zp,
  };
  return y;
}

/* ---- the pass ---- */

static void mark_weights(Quant *q) {
  Graph *g = q->g;
  q->weight = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next) {
    bool w = n->op == OP_PARAM || n->op == OP_CONST;
    if (n->op != OP_INPUT && n->n_in > 0) {
      w = true;
      for (int i = 0; i < n->n_in && w; i++) w = q->weight[n->in[i]->def->id];
    }
    q->weight[n->id] = w;
  }
}

bool pass_quantize(Graph *g, PassCtx *pc) {
  const PassOptions *o = pc ? pc->options : NULL;
  if (!o || !o->quantize_int8) return false;
  Ctx *c = g->ctx;
  if (!o->calibrate) {
    diag_error(c, (SrcLoc){0}, "int8 quantization needs calibration data (--calibrate=DIR)");
    return false;
  }
  Quant q = {.g = g};
  ir_number(g);
  mark_weights(&q);
  int products = 0, kept = 0;
  for (Node *n = g->first; n; n = n->next)
    if (is_product(n)) {
      if (weight_operand(&q, n) >= 0)
        products++;
      else if (!q.weight[n->id])
        kept++;
    }
  if (o->quant_summary) *o->quant_summary = (QuantSummary){.n_kept_f32 = kept};
  if (pc) pass_stat(pc, "quantize: products kept in f32", kept);
  if (!products) return false;

  q.wanted = ARENA_ARRAY(&c->arena, const Value *, products);
  for (Node *n = g->first; n; n = n->next) {
    int wi = weight_operand(&q, n);
    if (wi >= 0 && wanted_index(&q, n->in[1 - wi]) < 0) q.wanted[q.n_wanted++] = n->in[1 - wi];
  }
  q.amax = ARENA_ARRAY(&c->arena, double, q.n_wanted);
  q.xq = ARENA_ARRAY(&c->arena, Node *, q.n_wanted);
  q.xq_sym = ARENA_ARRAY(&c->arena, Node *, q.n_wanted);
  int errors = c->diag.errors;
  if (!o->calibrate(o->calibrate_ud, g, q.n_wanted, q.wanted, q.amax)) {
    if (c->diag.errors == errors) diag_error(c, (SrcLoc){0}, "calibration failed");
    return false;
  }
  for (int i = 0; i < q.n_wanted; i++)
    if (!(q.amax[i] >= 0) || isinf(q.amax[i]))
      dl_internal(c, "quantize: the calibrator gave range %g", q.amax[i]);

  QuantLayer *layers = ARENA_ARRAY(&c->arena, QuantLayer, products);
  int done = 0;
  PassRewrite *rw = pass_rewrite_new(g);
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    /* The ranges belong to the values the calibrator saw: look the
     * activation up before resolving it to its rewritten stand-in. */
    int wi = weight_operand(&q, n);
    const Value *orig_x = wi >= 0 ? n->in[1 - wi] : NULL;
    pass_rewrite_operands(rw, n);
    if (wi < 0) continue;
    Value *y = quantize_product(&q, n, wi, orig_x, &layers[done++]);
    pass_rewrite_replace(rw, &n->out[0], y);
    ir_remove(g, n);
  }
  pass_rewrite_finish(rw);
  if (o->quant_summary) {
    o->quant_summary->n_layers = done;
    o->quant_summary->layers = layers;
  }
  if (pc) pass_stat(pc, "quantize: products in int8", done);
  return true;
}
