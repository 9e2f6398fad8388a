/* Channels last for tensor-core convolutions: takes a graph after
 * precision or quantize, returns it with chains of conv2d (and
 * conv_transpose2d/3d) that the tensor cores take (f16, bf16, int8, f32
 * under --tf32; groups 1; input channels a multiple of a 16-byte chunk) and the layout-agnostic ops
 * between them (elementwise ops whose other operands are the same shape,
 * a per-channel vector or a scalar) in layout "nhwc", with a transpose
 * where such a region meets anything else (depthwise convolutions
 * whose channels fill chunks join the regions too, with their own
 * channels-last kernel, so MobileNet's blocks are one region, and so do
 * 2-d max and average pools, resizes, group norms, inference batch
 * norms (as a scale and a shift), squeeze-and-excitation gates, and
 * concats of images, whose axis moves with the layout: a U-Net's skip
 * connection joins its decoder's convolutions to the encoder's
 * region).  A region's image reduced over its spatial dims (a global
 * pool, a mean over (2, 3)) leaves through the same reduction channels
 * last, not a transpose, and the model's own permutes between the
 * layouts (ConvNeXt's around each block's LayerNorm and MLP) are taken
 * away, each counting as a gain.  The weights become [Co, kH,
 * kW, C] through a transpose of the param, which codegen computes once
 * at load (an init step), and the user's inputs and outputs keep their
 * layout.
 *
 * conv3d and the 3-d pools likewise over 5-d values ([N, D, H, W, C]).
 * A region is the set of 4-d (or 5-d) values joined by those ops: a convolution
 * joins its input and its result, an agnostic op its result and its
 * full-shape operands.  A value of the region made outside it (an input,
 * a pool's result) enters through a transpose to NHWC; one used outside
 * (a pool, a reshape, the graph's output) leaves through one back.  The
 * rule for when it pays: a region is rewritten only when two or more of
 * its convolutions read another convolution's result (or an elementwise
 * function of one), and it has no more transposes than such
 * convolutions.  A convolution that reads an entry gains nothing (fusion
 * evaluates the transpose in its loads, which are then register-staged),
 * so a single convolution between NCHW ops is left alone.  Each
 * transpose reads and writes one activation; what a convolution gains
 * (its im2col operand by cp.async instead of register staging) is not
 * measured here (no GPU), so the rule is a conservative estimate. */
#include <string.h>

#include "passes/pass.h"

/* The moves between the layouts of a 4-d (2 spatial dims) or 5-d value. */
static const int64_t to_nhwc4[4] = {0, 2, 3, 1}, to_nchw4[4] = {0, 3, 1, 2};
static const int64_t to_nhwc5[5] = {0, 2, 3, 4, 1}, to_nchw5[5] = {0, 4, 1, 2, 3};
static const int64_t *to_nhwc(int rank) { return rank == 5 ? to_nhwc5 : to_nhwc4; }
static const int64_t *to_nchw(int rank) { return rank == 5 ? to_nchw5 : to_nchw4; }
/* An image of the op's rank: 4-d for the 2-d ops, 5-d for the 3-d ones. */
static bool image_rank_ok(const Node *n, int rank) {
  bool three = n->op == OP_CONV3D || n->op == OP_CONV_TRANSPOSE3D || n->op == OP_MAXPOOL3D || n->op == OP_AVGPOOL3D;
  return rank == (three ? 5 : 4);
}

typedef struct Nhwc {
  Graph *g;
  const PassOptions *o;
  bool *weights;     /* by node id: a function of the weights alone */
  int *parent;       /* union-find over value ids */
  Value **values;    /* by id */
  bool *inside;      /* by node id: a convolution or agnostic op of a region */
  int *convs, *edges; /* by root value id: convolutions that gain (fed inputs); transposes */
  int *cancels;      /* by root value id: the model's own layout transposes the region takes away */
  bool *convert;     /* by root value id */
  Value **as_nhwc;   /* by value id: its transpose in, or channel vector's reshape */
  Value **as_nchw;   /* by value id: its transpose out */
  int n_values;
} Nhwc;

static int find(Nhwc *S, int v) {
  while (S->parent[v] != v) v = S->parent[v] = S->parent[S->parent[v]];
  return v;
}

static void join(Nhwc *S, const Value *a, const Value *b) {
  int x = find(S, a->id), y = find(S, b->id);
  if (x != y) S->parent[x] = y;
}

/* The channels of a convolution's operands channels last: C, or C
 * padded with zeros to whole 16-byte chunks (an RGB stem: 3 -> 8 in
 * f16) where that at most triples the products, in a float dtype (an
 * int8 pad would have to hold the zero point); 0 when neither. */
static int64_t padded_channels(DType dt, int64_t C) {
  int64_t q = 16 / ir_dtype_size(dt), up = (C + q - 1) / q * q;
  if (up == C) return C;
  return dt != TY_I8 && up <= 3 * C ? up : 0;
}

static bool is_conv_transpose(const Node *n) { return n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D; }
static bool is_conv(const Node *n) { return n->op == OP_CONV2D || n->op == OP_CONV3D || is_conv_transpose(n); }

/* A convolution the tensor cores take with whole 16-byte chunks of
 * channels (codegen's cp.async of the im2col operand), padded ones too.
 * The first H200 run had ResNet-50's NCHW stem (C = 3, register-staged)
 * at 32 TFLOP/s, 11% of the whole model's time.  A grouped one (not
 * depthwise: ResNeXt's, RegNet's) when each group's channels fill whole
 * chunks, unpadded, and a group's product fills an mma (16 output
 * channels and 16 of K at the least, codegen's cg_conv_on_tc): its
 * chunks are then a group's channels of one tap.  A conv_transpose (a
 * U-Net's or a GAN's decoder, groups 1) likewise: its W [C, Co, taps]
 * becomes [Co, taps, C], and each stride phase's taps read whole chunks
 * of a pixel's channels (codegen/conv_igemm.c). */
static bool conv_eligible(const Nhwc *S, const Node *n) {
  if (!is_conv(n) || ir_conv_nhwc(n)) return false;
  const TensorType *x = &n->in[0]->type, *w = &n->in[1]->type;
  DType dt = x->dtype;
  if (!image_rank_ok(n, x->rank) || w->dtype != dt || n->guard) return false;
  bool ok = dt == TY_F16 || dt == TY_BF16 || (dt == TY_I8 && n->out[0].type.dtype == TY_I32) ||
            (dt == TY_F32 && S->o->tf32);
  int64_t groups = ir_attr_int(n, "groups");
  if (groups == 1) return ok && padded_channels(dt, x->dims[1]) != 0;
  if (is_conv_transpose(n)) return false;
  int64_t cg = x->dims[1] / groups, cog = w->dims[0] / groups, taps = 1;
  for (int d = 2; d < w->rank; d++) taps *= w->dims[d];
  return ok && groups != x->dims[1] && cg % (16 / ir_dtype_size(dt)) == 0 && cog >= 16 && cg * taps >= 16;
}

/* A depthwise convolution (groups = C, one output channel each, or a
 * multiplier's k each: Cout = k C) whose channels fill whole 16-byte
 * chunks, in a dtype the regions take: its channels-last kernel
 * (codegen/conv_depthwise.c) reads a chunk of channels a tap (with a
 * multiplier, a channel a thread: still no transpose in and out), so it
 * joins a region instead of cutting it (MobileNet's blocks).  It does
 * not count as a convolution that gains: its kernel is bandwidth-bound
 * in either layout. */
static bool depthwise_eligible(const Nhwc *S, const Node *n) {
  if (n->op != OP_CONV2D || ir_conv_nhwc(n) || n->guard) return false;
  const TensorType *x = &n->in[0]->type, *w = &n->in[1]->type;
  if (x->rank != 4 || w->rank != 4 || w->dtype != x->dtype) return false;
  int64_t C = x->dims[1];
  /* (a multiplier of 16 or more stays NCHW, where its groups go to the
   * tensor cores, docs/tensorcores.md's depthwise section) */
  if (ir_attr_int(n, "groups") != C || C < 2 || w->dims[0] % C || w->dims[0] / C >= 16 || w->dims[1] != 1)
    return false;
  DType dt = x->dtype;
  bool ok = dt == TY_F16 || dt == TY_BF16 || (dt == TY_I8 && n->out[0].type.dtype == TY_I32) ||
            (dt == TY_F32 && S->o->tf32);
  return ok && C % (16 / ir_dtype_size(dt)) == 0;
}

/* A 2-d max or average pool: channels last it reads a thread's channel
 * next to its neighbours' (codegen/lower_window.c), so it may join a
 * region as the convolutions do (VGG's, U-Net's and Inception's pools
 * between convolutions), passing on whether its input was fed.  So may
 * a resize (a U-Net's or a YOLO neck's upsampling, nearest or
 * bilinear). */
static bool pool_eligible(const Node *n) {
  bool pool = n->op == OP_MAXPOOL2D || n->op == OP_AVGPOOL2D || n->op == OP_MAXPOOL3D || n->op == OP_AVGPOOL3D;
  return (pool || n->op == OP_RESIZE) && !ir_nhwc(n) && !n->guard && image_rank_ok(n, n->in[0]->type.rank);
}

/* A concat of images (4-d or 5-d, along any axis): channels last it
 * is the same concat along the axis's new place, so it joins a region,
 * every operand an image of it. */
static bool concat_eligible(const Node *n) {
  int R = n->out[0].type.rank;
  return n->op == OP_CONCAT && !n->guard && (R == 4 || R == 5);
}

/* An inference batch norm (its weight, bias and statistics [C] vectors
 * of the weights alone, in x's dtype; not a training step's, whose
 * statistics are the batch's): channels last it becomes x * s + t with
 * s = w / sqrt(var + eps) and t = b - mean s over the weights (init
 * steps), two agnostic ops, so that DenseNet's and pre-activation
 * ResNets' batch norm before a convolution (after a concat or an add,
 * where bn-fold cannot take it) no longer ends a region. */
static bool bn_eligible(const Nhwc *S, const Node *n) {
  if (n->op != OP_BATCHNORM || n->n_in != 5 || n->guard) return false;
  const TensorType *x = &n->in[0]->type;
  if ((x->rank != 4 && x->rank != 5) || !ir_dtype_is_float(x->dtype)) return false;
  for (int i = 1; i < 5; i++) {
    const TensorType *t = &n->in[i]->type;
    if (t->rank != 1 || t->dims[0] != x->dims[1] || t->dtype != x->dtype || !S->weights[n->in[i]->def->id])
      return false;
  }
  return true;
}

/* A group_norm of an image: channels last each group's pixels and
 * channels are its row (codegen/lower_rows.c), its weight and bias
 * still one per channel, so it joins a region (Stable Diffusion's
 * UNet, detection heads: group norm, SiLU, convolution). */
static bool gn_eligible(const Node *n) {
  if (n->op != OP_GROUP_NORM || ir_nhwc(n) || n->guard) return false;
  int R = n->in[0]->type.rank;
  return R == 4 || R == 5;
}

/* A reduction of an image over its spatial dims: global_avgpool, or a
 * mean, sum, max or min over axes {2, 3} ({2, 3, 4} in 5-d) that drops
 * them: ResNet's and EfficientNet's head, the x.mean((2, 3)) of others.
 * Channels last it is the same reduction over the middle axes (the pool
 * in layout "nhwc"), whose kernel reads consecutive channels in
 * consecutive threads (codegen/lower_rows.c's column mode, as coalesced
 * as NCHW's rows), so a region's last image leaves through it with no
 * transpose: its result, [N, C] or [N, C, 1, 1], is the same either
 * way. */
static bool spatial_reduce(const Node *n) {
  if (n->n_in != 1) return false;
  int R = n->in[0]->type.rank;
  if (n->guard || (R != 4 && R != 5) || !ir_dtype_is_float(n->in[0]->type.dtype)) return false;
  if (n->op == OP_GLOBAL_AVGPOOL) return R == 4 && !ir_nhwc(n);
  if ((n->op != OP_REDUCE_MEAN && n->op != OP_REDUCE_SUM && n->op != OP_REDUCE_MAX && n->op != OP_REDUCE_MIN) ||
      ir_attr_int(n, "keepdims"))
    return false;
  int cnt;
  const int64_t *axes = ir_attr_ints(n, "axes", &cnt);
  bool spatial = cnt == R - 2;
  for (int i = 0; i < cnt && spatial; i++) spatial = axes[i] == i + 2;
  return spatial;
}

/* Whether n is a transpose of an image by perm (to_nhwc or to_nchw of
 * its rank): the model's own move between the layouts (ConvNeXt's
 * permutes around each block's LayerNorm and MLP). */
static bool layout_move(const Node *n, const int64_t *(*perm_of)(int)) {
  if (n->op != OP_TRANSPOSE || n->guard) return false;
  int R = n->in[0]->type.rank, cnt;
  if (R != 4 && R != 5) return false;
  const int64_t *perm = ir_attr_ints(n, "perm", &cnt);
  return cnt == R && memcmp(perm, perm_of(R), sizeof(int64_t) * (size_t)R) == 0;
}

/* Where axis a of an NCHW (NCDHW) value of rank R is channels last. */
static int64_t nhwc_axis(int64_t a, int R) {
  if (a < 0) a += R;
  for (int j = 0; j < R; j++)
    if (to_nhwc(R)[j] == a) return j;
  return a;
}

/* A node of a region whose operand 0 is its image (a convolution or a
 * pool: the result's spatial dims differ from the operand's). */
static bool windowed(const Node *n) {
  return is_conv(n) || n->op == OP_MAXPOOL2D || n->op == OP_AVGPOOL2D || n->op == OP_MAXPOOL3D ||
         n->op == OP_AVGPOOL3D || n->op == OP_RESIZE;
}

/* Operand kinds of an agnostic op of an R-d result: 0 the full shape, 1
 * a per-channel vector ([C, 1, 1], [1, C, 1, 1] in 4-d), 2 a scalar
 * (every dim 1), 3 a per-sample channel vector ([N, C, 1, 1]: a
 * squeeze-and-excitation gate, MobileNetV3's and EfficientNet's), -1
 * none. */
static int operand_kind(const Value *v, const TensorType *out) {
  const TensorType *t = &v->type;
  int R = out->rank;
  if (ir_type_eq(t, out) || (t->rank == R && memcmp(t->dims, out->dims, sizeof(int64_t) * (size_t)R) == 0)) return 0;
  if (t->rank > R) return -1;
  bool scalar = true, channel = true, gate = t->rank == R;
  for (int i = 0; i < t->rank; i++) {
    int axis = R - t->rank + i;
    scalar = scalar && t->dims[i] == 1;
    channel = channel && t->dims[i] == (axis == 1 ? out->dims[1] : 1);
    gate = gate && t->dims[i] == (axis <= 1 ? out->dims[axis] : 1);
  }
  return scalar ? 2 : channel && t->rank >= R - 1 ? 1 : gate ? 3 : -1;
}

static bool agnostic(const Node *n) {
  if (ir_ops[n->op].cls != K_ELEMWISE || n->op == OP_BATCHNORM || n->n_out != 1 || n->guard) return false;
  const TensorType *out = &n->out[0].type;
  if (out->rank != 4 && out->rank != 5) return false;
  bool full = false;
  for (int i = 0; i < n->n_in; i++) {
    int kind = operand_kind(n->in[i], out);
    /* a [1, C, 1, 1] or [N, C, 1, 1] another agnostic op makes may be
     * channels last itself (a region of its own, a gate's): rewriting
     * takes it as it is then (converted), else reshapes it */
    if (kind < 0) return false;
    full = full || kind == 0;
  }
  return full;
}

static Node *new_move(Nhwc *S, OpKind op, Value *v, Node *before, int rank, const int64_t *dims) {
  Node *t = ir_node_new(S->g, op, 1, &v, before->loc);
  t->scope = before->scope;
  ir_set_ints(S->g, t, op == OP_TRANSPOSE ? "perm" : "shape", rank, dims);
  char err[256];
  if (!ir_infer(t, err, sizeof err)) dl_internal(S->g->ctx, "nhwc: %s", err);
  ir_insert_before(S->g, before, t);
  t->id = t->out[0].id = -1; /* past the tables: neither inside nor an exit */
  return t;
}

/* Whether v, read by a region, is the model's own move to NCHW of a
 * value made outside every region: the region reads that value instead. */
static bool cancels_entry(const Nhwc *S, const Value *v) {
  const Node *t = v->def;
  return layout_move(t, to_nchw) && t->id >= 0 && !S->inside[t->in[0]->def->id];
}

/* v for an inside node: itself when made inside (already NHWC), else
 * its transpose in, made once before its first such use. */
static Value *nhwc_of(Nhwc *S, Value *v, Node *before, int kind) {
  if (kind == 2) return v;
  if (kind == 0 && v->def->id >= 0 && S->inside[v->def->id]) return v;
  /* the model's own move to NCHW of a channels-last value: that value */
  if (kind == 0 && cancels_entry(S, v)) return v->def->in[0];
  if (!S->as_nhwc[v->id]) {
    int R = v->type.rank;
    if (kind == 0) {
      S->as_nhwc[v->id] = &new_move(S, OP_TRANSPOSE, v, before, R, to_nhwc(R))->out[0];
    } else {
      /* a channel vector broadcasts along NHWC's last axis as [C] or,
       * of the image's rank, [1, 1, 1, C]; a gate [N, C, 1, 1] as
       * [N, 1, 1, C] (a reshape: only its size-1 dims move) */
      bool full_rank = R == before->out[0].type.rank;
      int64_t c = v->type.dims[full_rank ? 1 : 0];
      int64_t dims[5] = {1, 1, 1, 1, 1};
      dims[R - 1] = c;
      if (full_rank) dims[0] = v->type.dims[0];
      S->as_nhwc[v->id] = &new_move(S, OP_RESHAPE, v, before, full_rank ? R : 1, full_rank ? dims : &c)->out[0];
    }
  }
  return S->as_nhwc[v->id];
}

/* op of in, a node of its own before `at` (past the tables: neither
 * inside nor an exit). */
static Value *op_before(Nhwc *S, Node *at, OpKind op, int n_in, Value **in) {
  Node *t = ir_node_new(S->g, op, n_in, in, at->loc);
  t->scope = at->scope;
  char err[256];
  if (!ir_infer(t, err, sizeof err)) dl_internal(S->g->ctx, "nhwc: %s", err);
  ir_insert_before(S->g, at, t);
  t->id = t->out[0].id = -1;
  return &t->out[0];
}

/* Batch norm n (bn_eligible) in place as x * s + t over its channels
 * last x: s and t computed from its [C] vectors before it, n itself the
 * add (so that it keeps its place in the tables). */
static void bn_as_scale_shift(Nhwc *S, Node *n, Value *x) {
  Graph *g = S->g;
  Value *w = n->in[1], *b = n->in[2], *mean = n->in[3], *var = n->in[4];
  Node *eps = ir_const(g, ir_attr_float(n, "eps"), var->type.dtype, n->loc);
  ir_remove(g, eps);
  ir_insert_before(g, n, eps);
  eps->id = eps->out[0].id = -1;
  Value *sum = op_before(S, n, OP_ADD, 2, (Value *[]){var, &eps->out[0]});
  Value *sd = op_before(S, n, OP_SQRT, 1, &sum);
  Value *s = op_before(S, n, OP_DIV, 2, (Value *[]){w, sd});
  Value *t = op_before(S, n, OP_SUB, 2, (Value *[]){b, op_before(S, n, OP_MUL, 2, (Value *[]){mean, s})});
  Value *xs = op_before(S, n, OP_MUL, 2, (Value *[]){x, s});
  n->op = OP_ADD;
  n->n_attrs = 0, n->attrs = NULL;
  n->n_in = 2;
  n->in = ARENA_ARRAY(&g->ctx->arena, Value *, 2);
  n->in[0] = xs, n->in[1] = t;
}

/* v (channels last) with zeros after its C channels up to c: a node of
 * its own, which fusion never takes into the convolution's loads
 * (passes/fuse.c), so the convolution reads whole chunks by cp.async. */
static Value *pad_channels(Nhwc *S, Value *v, Node *before, int64_t c) {
  int R = v->type.rank;
  int64_t pads[10] = {0};
  pads[2 * R - 1] = c - v->type.dims[R - 1];
  Node *t = ir_node_new(S->g, OP_PAD, 1, &v, before->loc);
  t->scope = before->scope;
  ir_set_ints(S->g, t, "pads", 2 * R, pads);
  ir_set_float(S->g, t, "value", 0.0);
  char err[256];
  if (!ir_infer(t, err, sizeof err)) dl_internal(S->g->ctx, "nhwc: %s", err);
  ir_insert_before(S->g, before, t);
  t->id = t->out[0].id = -1;
  return &t->out[0];
}

static bool converted(Nhwc *S, const Node *n) { return n->id >= 0 && S->inside[n->id] && S->convert[find(S, n->out[0].id)]; }

/* Reduction n (spatial_reduce) of x, a converted region's image, in
 * place over x channels last: its result stays as it was. */
static void reduce_channels_last(Nhwc *S, Node *n, Value *x) {
  n->in[0] = x;
  if (n->op == OP_GLOBAL_AVGPOOL) {
    ir_set_str(S->g, n, "layout", "nhwc");
    return;
  }
  static const int64_t axes[3] = {1, 2, 3};
  ir_set_ints(S->g, n, "axes", x->type.rank - 2, axes);
}

/* v for an outside use: its transpose back when an inside node of a
 * converted region made it, made once right after it. */
static Value *nchw_of(Nhwc *S, Value *v) {
  if (v->id < 0 || v->id >= S->n_values || !converted(S, v->def)) return v;
  if (!S->as_nchw[v->id]) {
    Node *after = v->def->next;
    Node *t = ir_node_new(S->g, OP_TRANSPOSE, 1, &v, v->def->loc);
    t->scope = v->def->scope;
    ir_set_ints(S->g, t, "perm", v->type.rank, to_nchw(v->type.rank));
    char err[256];
    if (!ir_infer(t, err, sizeof err)) dl_internal(S->g->ctx, "nhwc: %s", err);
    if (after)
      ir_insert_before(S->g, after, t);
    else
      ir_append(S->g, t);
    t->id = t->out[0].id = -1;
    S->as_nchw[v->id] = &t->out[0];
  }
  return S->as_nchw[v->id];
}

/* The regions: members, then their convolutions and boundary transposes. */
static void find_regions(Nhwc *S) {
  Graph *g = S->g;
  /* A pool joins only over a convolution's result (through agnostic ops
   * and pools): ResNet's stem max pool stays outside, so the region is
   * entered after it, at a quarter of the bytes. */
  bool *from_conv = ARENA_ARRAY(&g->ctx->arena, bool, S->n_values);
  for (Node *n = g->first; n; n = n->next) {
    for (int i = 0; i < n->n_out; i++) S->values[n->out[i].id] = &n->out[i];
    if (conv_eligible(S, n) || depthwise_eligible(S, n) || (pool_eligible(n) && from_conv[n->in[0]->id])) {
      S->inside[n->id] = true;
      join(S, n->in[0], &n->out[0]);
      from_conv[n->out[0].id] = true;
    } else if (agnostic(n) || concat_eligible(n) || bn_eligible(S, n) || gn_eligible(n)) {
      S->inside[n->id] = true;
      for (int i = 0; i < n->n_in; i++)
        if (n->op == OP_CONCAT || operand_kind(n->in[i], &n->out[0].type) == 0) {
          join(S, n->in[i], &n->out[0]);
          from_conv[n->out[0].id] = from_conv[n->out[0].id] || from_conv[n->in[i]->id];
        }
    }
  }
  /* entries: a value made outside that an inside node reads in full;
   * exits: a value made inside that an outside node or the graph's
   * output reads */
  Arena *a = &g->ctx->arena;
  bool *entry = ARENA_ARRAY(a, bool, S->n_values), *exit_ = ARENA_ARRAY(a, bool, S->n_values);
  bool *cancel_in = ARENA_ARRAY(a, bool, S->n_values), *cancel_out = ARENA_ARRAY(a, bool, S->n_values);
  /* fed: a convolution's result, or an agnostic op's over one (its
   * epilogue, or stored); a convolution gains when its input is fed.
   * Over an entry's transpose alone (a clip of a depthwise conv's
   * result) fusion evaluates the transpose in the convolution's loads,
   * which are then register-staged anyway. */
  bool *fed = ARENA_ARRAY(a, bool, S->n_values);
  for (Node *n = g->first; n; n = n->next) {
    if (S->inside[n->id] && is_conv(n)) {
      fed[n->out[0].id] = true;
      /* a depthwise conv gains nothing (depthwise_eligible) */
      if (fed[n->in[0]->id] && !ir_conv_depthwise(n)) S->convs[find(S, n->out[0].id)]++;
    } else if (S->inside[n->id]) {
      for (int i = 0; i < n->n_in; i++) fed[n->out[0].id] = fed[n->out[0].id] || fed[n->in[i]->id];
    }
    for (int i = 0; i < n->n_in; i++) {
      Value *v = n->in[i];
      bool made_inside = S->inside[v->def->id];
      bool image = windowed(n) ? i == 0 : n->op == OP_CONCAT || operand_kind(v, &n->out[0].type) == 0;
      if (S->inside[n->id] && !made_inside && image) {
        if (cancels_entry(S, v))
          cancel_in[v->id] = true;
        else
          entry[v->id] = true;
      }
      /* a spatial reduction reads the region's image as it is, the
       * model's own move to NHWC is the region's layout already */
      if (!S->inside[n->id] && made_inside && layout_move(n, to_nhwc)) cancel_out[v->id] = true;
      else if (!S->inside[n->id] && made_inside && !spatial_reduce(n)) exit_[v->id] = true;
    }
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (S->inside[g->outputs[i]->def->id]) exit_[g->outputs[i]->id] = true;
  for (int v = 0; v < S->n_values; v++) {
    S->edges[find(S, v)] += entry[v] + exit_[v];
    S->cancels[find(S, v)] += cancel_in[v] + cancel_out[v];
  }
  /* A transpose of the model's own that the region takes away gains as
   * a convolution reading cp.async does. */
  for (int v = 0; v < S->n_values; v++) {
    int gains = S->convs[v] + S->cancels[v];
    S->convert[v] = find(S, v) == v && gains >= 2 && S->edges[v] <= gains;
  }
}

bool pass_nhwc(Graph *g, PassCtx *pc) {
  const PassOptions *o = pc->options;
  if (!o || o->no_nhwc || o->no_tensor_cores) return false;
  ir_number(g);
  int n_values = 0, n_nodes = g->n_nodes;
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_out; i++)
      if (n->out[i].id >= n_values) n_values = n->out[i].id + 1;
  int max_node = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->id >= max_node) max_node = n->id + 1;
  Arena *a = &g->ctx->arena;
  Nhwc S = {.g = g, .o = o, .n_values = n_values, .weights = pass_weight_only(g)};
  S.parent = ARENA_ARRAY(a, int, n_values);
  for (int v = 0; v < n_values; v++) S.parent[v] = v;
  S.values = ARENA_ARRAY(a, Value *, n_values);
  S.inside = ARENA_ARRAY(a, bool, max_node);
  S.convs = ARENA_ARRAY(a, int, n_values);
  S.edges = ARENA_ARRAY(a, int, n_values);
  S.cancels = ARENA_ARRAY(a, int, n_values);
  S.convert = ARENA_ARRAY(a, bool, n_values);
  S.as_nhwc = ARENA_ARRAY(a, Value *, n_values);
  S.as_nchw = ARENA_ARRAY(a, Value *, n_values);
  find_regions(&S);
  bool any = false;
  for (int v = 0; v < n_values; v++) any = any || S.convert[v];
  if (!any) return false;
  /* the nodes as they were: the moves made below are not revisited */
  Node **order = ARENA_ARRAY(a, Node *, n_nodes);
  int count = 0;
  for (Node *n = g->first; n && count < n_nodes; n = n->next) order[count++] = n;
  for (int j = 0; j < count; j++) {
    Node *n = order[j];
    if (converted(&S, n)) {
      if (is_conv(n)) {
        bool tr = is_conv_transpose(n);
        pass_stat(pc, tr ? "nhwc: conv_transposes channels last" : "nhwc: convolutions channels last", 1);
        /* W is still [Co, C / groups, ...] ([C, Co, ...] transposed); x
         * may be channels last already.  Grouped ones never pad (their
         * groups' channels fill whole chunks: conv_eligible,
         * depthwise_eligible). */
        int64_t c = tr ? n->in[1]->type.dims[0] : n->in[1]->type.dims[1] * ir_attr_int(n, "groups");
        int64_t cp = padded_channels(n->in[0]->type.dtype, c);
        n->in[0] = nhwc_of(&S, n->in[0], n, 0);
        Value *w = n->in[1];
        /* W [Co, C, kH, kW] -> [Co, kH, kW, C], a transpose's [C, Co,
         * kH, kW] likewise: over the weights alone */
        static const int64_t from_cin4[4] = {1, 2, 3, 0}, from_cin5[5] = {1, 2, 3, 4, 0};
        int R = w->type.rank;
        const int64_t *perm = !tr ? to_nhwc(R) : R == 5 ? from_cin5 : from_cin4;
        n->in[1] = &new_move(&S, OP_TRANSPOSE, w, n, R, perm)->out[0];
        if (cp != c) {
          pass_stat(pc, "nhwc: convolutions' channels padded to 16-byte chunks", 1);
          n->in[0] = pad_channels(&S, n->in[0], n, cp);
          n->in[1] = pad_channels(&S, n->in[1], n, cp);
        }
        ir_set_str(g, n, "layout", "nhwc");
      } else if (windowed(n)) {
        pass_stat(pc, n->op == OP_RESIZE ? "nhwc: resizes channels last" : "nhwc: pools channels last", 1);
        n->in[0] = nhwc_of(&S, n->in[0], n, 0);
        ir_set_str(g, n, "layout", "nhwc");
      } else if (n->op == OP_GROUP_NORM) {
        pass_stat(pc, "nhwc: group norms channels last", 1);
        n->in[0] = nhwc_of(&S, n->in[0], n, 0);
        ir_set_str(g, n, "layout", "nhwc");
      } else if (n->op == OP_BATCHNORM) {
        pass_stat(pc, "nhwc: batch norms channels last (a scale and a shift)", 1);
        bn_as_scale_shift(&S, n, nhwc_of(&S, n->in[0], n, 0));
      } else if (n->op == OP_CONCAT) {
        pass_stat(pc, "nhwc: concats channels last", 1);
        for (int i = 0; i < n->n_in; i++) n->in[i] = nhwc_of(&S, n->in[i], n, 0);
        ir_set_int(g, n, "axis", nhwc_axis(ir_attr_int(n, "axis"), n->out[0].type.rank));
      } else {
        for (int i = 0; i < n->n_in; i++) {
          /* what an inside node made is NHWC already; the rest keep
           * their types, and n's result is still the NCHW one */
          int kind = converted(&S, n->in[i]->def) ? 0 : operand_kind(n->in[i], &n->out[0].type);
          n->in[i] = nhwc_of(&S, n->in[i], n, kind);
        }
      }
      char err[256];
      if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "nhwc: %s", err);
    }
  }
  for (int j = 0; j < count; j++) {
    Node *n = order[j];
    if (converted(&S, n)) continue;
    if (layout_move(n, to_nhwc) && converted(&S, n->in[0]->def)) {
      /* the value is channels last already: the move is a no-op */
      pass_stat(pc, "nhwc: the model's own layout transposes taken away", 1);
      n->op = OP_RESHAPE;
      n->n_attrs = 0, n->attrs = NULL;
      ir_set_ints(g, n, "shape", n->out[0].type.rank, n->out[0].type.dims);
      continue;
    }
    if (spatial_reduce(n) && converted(&S, n->in[0]->def)) {
      pass_stat(pc, "nhwc: regions left through a spatial reduction, not a transpose", 1);
      reduce_channels_last(&S, n, n->in[0]);
      char err[256];
      if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "nhwc: %s", err);
      continue;
    }
    for (int i = 0; i < n->n_in; i++) n->in[i] = nchw_of(&S, n->in[i]);
  }
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = nchw_of(&S, g->outputs[i]);
  /* the model's own moves to NCHW that the regions read through are
   * left without readers */
  pass_dce(g, pc);
  /* quant-report compares each product's result with the f32 graph's */
  QuantSummary *qs = o->quant_summary;
  for (int i = 0; qs && i < qs->n_layers; i++) {
    const Value *r = qs->layers[i].result;
    if (r->id >= 0 && r->id < n_values && S.values[r->id] == r && converted(&S, r->def))
      qs->layers[i].channels_last = true;
  }
  return true;
}
