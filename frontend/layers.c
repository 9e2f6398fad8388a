/* The builtin functions of the language: takes a Call whose arguments are
 * bound to the builtin's parameters, checks their kinds and builds the
 * graph nodes (and, for layers, the parameters named as in PyTorch's
 * state_dict, with PyTorch's default init).  Returns the result value, or
 * a poison value after reporting. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/lower.h"
#include "ir/eval.h"
#include "ir/loss.h"

typedef struct TypeText {
  char s[IR_TYPE_STR_MAX];
} TypeText;

static TypeText ts(const TensorType *t) {
  TypeText r;
  ir_type_str(t, r.s, sizeof r.s);
  return r;
}

static Val poison(void) { return val_poison(); }

static const char *bound_init(Lower *l, const char *kind, double b) {
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, b);
    double back;
    if (sscanf(buf, "%lf", &back) == 1 && back == b) break;
  }
  return arena_printf(l->a, "%s(%s)", kind, buf);
}

static TensorType type1(DType dt, int64_t a) {
  return (TensorType){.dtype = dt, .rank = 1, .dims = {a}};
}
static TensorType type2(DType dt, int64_t a, int64_t b) {
  return (TensorType){.dtype = dt, .rank = 2, .dims = {a, b}};
}

static bool need_float(Lower *l, const Call *c, const Value *x) {
  if (ir_dtype_is_float(x->type.dtype)) return true;
  fe_error(l, c->loc, "%s expects a floating-point input, got %s", c->name, ts(&x->type).s);
  return false;
}

/* ---- small graph builders; each passes a NULL operand through ---- */

static Value *mk_linear(Lower *l, Value *x, Value *w, Value *b, SrcLoc loc) {
  if (!x || !w) return NULL;
  Value *in[3] = {x, w, b};
  return fe_emit(l, fe_node(l, OP_LINEAR, b ? 3 : 2, in, loc));
}

static Value *mk_ints_op(Lower *l, OpKind op, const char *attr, Value *x, int n, const int64_t *v,
                         SrcLoc loc) {
  if (!x) return NULL;
  Node *node = fe_node(l, op, 1, &x, loc);
  ir_set_ints(l->g, node, attr, n, v);
  return fe_emit(l, node);
}

static Value *mk_slice(Lower *l, Value *x, int axis, int64_t start, int64_t end, SrcLoc loc) {
  if (!x) return NULL;
  int r = x->type.rank;
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK], st[DL_MAX_RANK];
  for (int d = 0; d < r; d++) {
    s[d] = 0;
    e[d] = x->type.dims[d];
    st[d] = 1;
  }
  s[axis] = start;
  e[axis] = end;
  Node *n = fe_node(l, OP_SLICE, 1, &x, loc);
  ir_set_ints(l->g, n, "starts", r, s);
  ir_set_ints(l->g, n, "ends", r, e);
  ir_set_ints(l->g, n, "steps", r, st);
  return fe_emit(l, n);
}

static Value *mk_binary(Lower *l, OpKind op, Value *a, Value *b, SrcLoc loc) {
  if (!a || !b) return NULL;
  Value *in[2] = {a, b};
  return fe_emit(l, fe_node(l, op, 2, in, loc));
}

/* ---- layers ---- */

static Val bi_linear(Lower *l, const Call *c) {
  Value *x;
  int64_t out;
  bool bias;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_pos_int(l, c, 1, 1, &out);
  ok &= fe_arg_bool(l, c, 2, true, &bias);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 1) {
    fe_error(l, c->loc, "linear expects an input [..., in], got %s", ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  int64_t in = t->dims[t->rank - 1];
  const char *scope = fe_layer_scope(l, c, "linear");
  const char *init = bound_init(l, "uniform", 1 / sqrt((double)in));
  TensorType wt = type2(t->dtype, out, in), bt = type1(t->dtype, out);
  Value *w = fe_param(l, scope, "weight", &wt, init, c->loc);
  Value *b = w && bias ? fe_param(l, scope, "bias", &bt, init, c->loc) : NULL;
  if (!w || (bias && !b)) return poison();
  return val_tensor(mk_linear(l, x, w, b, c->loc));
}

/* conv2d, conv3d and their transposes: nsp spatial dims (2 or 3). */
static const char *image_layout(int nsp) { return nsp == 3 ? "[N, C, D, H, W]" : "[N, C, H, W]"; }

/* An int or a list of nsp ints, each >= lo, into v[nsp]. */
static bool arg_tuple(Lower *l, const Call *c, int i, int nsp, int64_t def, int64_t lo, int64_t *v) {
  int64_t raw[3];
  int n;
  const char *what = lo >= 1 ? (nsp == 3 ? "a positive int or a list of 3 positive ints"
                                         : "a positive int or a list of 2 positive ints")
                             : (nsp == 3 ? "a non-negative int or a list of 3 non-negative ints"
                                         : "a non-negative int or a list of 2 non-negative ints");
  if (!fe_arg_ints(l, c, i, nsp, what, &n, raw)) return false;
  bool ok = n <= 1 || n == nsp;
  for (int k = 0; k < nsp; k++) v[k] = n == 0 ? def : n == 1 ? raw[0] : raw[k];
  for (int k = 0; k < nsp; k++) ok = ok && (n == 0 || v[k] >= lo);
  if (!ok) fe_arg_error(l, c, i, what);
  return ok;
}

static bool arg_pair(Lower *l, const Call *c, int i, int64_t def, int64_t lo, int64_t v[2]) {
  return arg_tuple(l, c, i, 2, def, lo, v);
}

/* pad: an int, one per spatial dim ([h, w]) or the starts then the ends
 * ([top, left, bottom, right]), into the ops' 2 * nsp entries. */
static bool arg_pads(Lower *l, const Call *c, int i, int nsp, int64_t *pads) {
  const char *what = nsp == 3 ? "a non-negative int or a list of 3 or 6 of them"
                              : "a non-negative int or a list of 2 or 4 of them";
  int64_t raw[6];
  int n;
  if (!fe_arg_ints(l, c, i, 2 * nsp, what, &n, raw)) return false;
  bool ok = n <= 1 || n == nsp || n == 2 * nsp;
  for (int k = 0; k < 2 * nsp; k++)
    pads[k] = n == 0 ? 0 : n == 1 ? raw[0] : n == nsp ? raw[k % nsp] : raw[k];
  for (int k = 0; k < 2 * nsp; k++) ok = ok && pads[k] >= 0;
  if (!ok) fe_arg_error(l, c, i, what);
  return ok;
}

/* The input of a convolution layer: nsp spatial dims, floats. */
static bool conv_input(Lower *l, const Call *c, const char *name, int nsp, const Value *x) {
  if (x->type.rank != 2 + nsp) {
    fe_error(l, c->loc, "%s expects a %d-d input %s, got %s", name, 2 + nsp, image_layout(nsp),
             ts(&x->type).s);
    return false;
  }
  return need_float(l, c, x);
}

/* The weight (PyTorch's layout: [a, b, k...]) and bias [out] of a
 * convolution layer, with PyTorch's init for fan_in b * prod(k). */
static bool conv_params(Lower *l, const Call *c, const char *name, const Value *x, int nsp,
                        int64_t a, int64_t bdim, const int64_t *kernel, int64_t out, bool bias,
                        Value **w, Value **b) {
  const char *scope = fe_layer_scope(l, c, name);
  double fan_in = (double)bdim;
  for (int k = 0; k < nsp; k++) fan_in *= (double)kernel[k];
  const char *init = bound_init(l, "uniform", 1 / sqrt(fan_in));
  TensorType wt = {.dtype = x->type.dtype, .rank = 2 + nsp, .dims = {a, bdim}};
  for (int k = 0; k < nsp; k++) wt.dims[2 + k] = kernel[k];
  TensorType bt = type1(x->type.dtype, out);
  *w = fe_param(l, scope, "weight", &wt, init, c->loc);
  *b = *w && bias ? fe_param(l, scope, "bias", &bt, init, c->loc) : NULL;
  return *w && (!bias || *b);
}

/* PyTorch's ConvTranspose2d/3d: weight [Cin, out/groups, k...]; the
 * fan-in PyTorch's init uses is weight.size(1) * prod(k). */
static Val conv_transpose_layer(Lower *l, const Call *c, int nsp) {
  const char *name = nsp == 3 ? "conv_transpose3d" : "conv_transpose2d";
  Value *x;
  int64_t out, groups, kernel[3], stride[3], opad[3], dil[3], pads[6];
  bool bias;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_pos_int(l, c, 1, 1, &out);
  ok &= arg_tuple(l, c, 2, nsp, 1, 1, kernel);
  ok &= arg_tuple(l, c, 3, nsp, 1, 1, stride);
  ok &= arg_pads(l, c, 4, nsp, pads);
  ok &= arg_tuple(l, c, 5, nsp, 0, 0, opad);
  ok &= arg_tuple(l, c, 6, nsp, 1, 1, dil);
  ok &= fe_arg_pos_int(l, c, 7, 1, &groups);
  ok &= fe_arg_bool(l, c, 8, true, &bias);
  if (!ok || !conv_input(l, c, name, nsp, x)) return poison();
  int64_t cin = x->type.dims[1];
  if (cin % groups != 0 || out % groups != 0) {
    fe_error(l, c->locs[7],
             "%s: groups=%" PRId64 " must divide the input channels (%" PRId64
             ") and the output channels (%" PRId64 ")",
             name, groups, cin, out);
    return poison();
  }
  for (int k = 0; k < nsp; k++)
    if (opad[k] >= stride[k] && opad[k] >= dil[k]) {
      fe_error(l, c->locs[5],
               "%s: output_pad %" PRId64 " must be smaller than the stride (%" PRId64
               ") or the dilation (%" PRId64 ")",
               name, opad[k], stride[k], dil[k]);
      return poison();
    }
  Value *w, *b;
  if (!conv_params(l, c, name, x, nsp, cin, out / groups, kernel, out, bias, &w, &b)) return poison();
  Value *in[3] = {x, w, b};
  Node *n = fe_node(l, nsp == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, bias ? 3 : 2, in, c->loc);
  ir_set_ints(l->g, n, "stride", nsp, stride);
  ir_set_ints(l->g, n, "pad", 2 * nsp, pads);
  ir_set_ints(l->g, n, "output_pad", nsp, opad);
  ir_set_ints(l->g, n, "dilation", nsp, dil);
  ir_set_int(l->g, n, "groups", groups);
  return val_tensor(fe_emit(l, n));
}

static Val bi_conv_transpose2d(Lower *l, const Call *c) { return conv_transpose_layer(l, c, 2); }
static Val bi_conv_transpose3d(Lower *l, const Call *c) { return conv_transpose_layer(l, c, 3); }

/* PyTorch's Conv2d/3d: weight [out, C/groups, k...]. */
static Val conv_layer(Lower *l, const Call *c, int nsp) {
  const char *name = nsp == 3 ? "conv3d" : "conv2d";
  Value *x;
  int64_t out, groups, kernel[3], stride[3], dil[3], pads[6] = {0, 0, 0, 0, 0, 0};
  bool bias, same = false;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_pos_int(l, c, 1, 1, &out);
  ok &= arg_tuple(l, c, 2, nsp, 1, 1, kernel);
  ok &= arg_tuple(l, c, 3, nsp, 1, 1, stride);
  if (c->args[4].kind == V_STR) {
    same = strcmp(c->args[4].s, "same") == 0;
    if (!same)
      fe_arg_error(l, c, 4, nsp == 3 ? "an int, a list of 3 or 6 ints, or \"same\""
                                     : "an int, a list of 2 or 4 ints, or \"same\"");
    ok &= same;
  } else {
    ok &= arg_pads(l, c, 4, nsp, pads);
  }
  ok &= arg_tuple(l, c, 5, nsp, 1, 1, dil);
  ok &= fe_arg_pos_int(l, c, 6, 1, &groups);
  ok &= fe_arg_bool(l, c, 7, true, &bias);
  if (!ok || !conv_input(l, c, name, nsp, x)) return poison();
  int64_t cin = x->type.dims[1];
  if (cin % groups != 0 || out % groups != 0) {
    fe_error(l, c->locs[6],
             "%s: groups=%" PRId64 " must divide the input channels (%" PRId64
             ") and the output channels (%" PRId64 ")",
             name, groups, cin, out);
    return poison();
  }
  if (same) {
    for (int k = 0; k < nsp; k++)
      if (stride[k] != 1) {
        fe_error(l, c->locs[4], "%s: pad=\"same\" needs stride 1", name);
        return poison();
      }
    /* As PyTorch: any odd unit of padding goes to the end (bottom/right). */
    for (int k = 0; k < nsp; k++) {
      int64_t total = dil[k] * (kernel[k] - 1);
      pads[k] = total / 2;
      pads[k + nsp] = total - total / 2;
    }
  }
  Value *w, *b;
  if (!conv_params(l, c, name, x, nsp, out, cin / groups, kernel, out, bias, &w, &b)) return poison();
  Value *in[3] = {x, w, b};
  Node *n = fe_node(l, nsp == 3 ? OP_CONV3D : OP_CONV2D, bias ? 3 : 2, in, c->loc);
  ir_set_ints(l->g, n, "stride", nsp, stride);
  ir_set_ints(l->g, n, "pad", 2 * nsp, pads);
  ir_set_ints(l->g, n, "dilation", nsp, dil);
  ir_set_int(l->g, n, "groups", groups);
  return val_tensor(fe_emit(l, n));
}

static Val bi_conv2d(Lower *l, const Call *c) { return conv_layer(l, c, 2); }
static Val bi_conv3d(Lower *l, const Call *c) { return conv_layer(l, c, 3); }

static Val bi_batchnorm(Lower *l, const Call *c) {
  Value *x;
  double eps;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 1e-5, &eps);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 2) {
    fe_error(l, c->loc, "batchnorm expects an input [N, C, ...], got %s", ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  const char *scope = fe_layer_scope(l, c, "batchnorm");
  TensorType pt = type1(t->dtype, t->dims[1]);
  static const char *const names[] = {"weight", "bias", "running_mean", "running_var"};
  static const char *const inits[] = {"ones", "zeros", "zeros", "ones"};
  Value *in[5] = {x};
  for (int i = 0; i < 4; i++)
    if (!(in[i + 1] = fe_param(l, scope, names[i], &pt, inits[i], c->loc))) return poison();
  Node *n = fe_node(l, OP_BATCHNORM, 5, in, c->loc);
  ir_set_float(l->g, n, "eps", eps);
  /* Training's (docs/training.md); inference graphs stay as they were. */
  double momentum;
  if (c->args[2].kind != V_NONE) {
    if (!fe_arg_float(l, c, 2, 0.1, &momentum)) return poison();
    if (!(momentum >= 0 && momentum <= 1)) {
      fe_arg_error(l, c, 2, "a momentum between 0 and 1");
      return poison();
    }
    ir_set_float(l->g, n, "momentum", momentum);
  }
  return val_tensor(fe_emit(l, n));
}

static Val bi_layernorm(Lower *l, const Call *c) {
  Value *x;
  double eps;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 1e-5, &eps);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 1) {
    fe_error(l, c->loc, "layernorm expects an input [..., D], got %s", ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  const char *scope = fe_layer_scope(l, c, "layernorm");
  TensorType pt = type1(t->dtype, t->dims[t->rank - 1]);
  Value *in[3] = {x, fe_param(l, scope, "weight", &pt, "ones", c->loc),
                  fe_param(l, scope, "bias", &pt, "zeros", c->loc)};
  if (!in[1] || !in[2]) return poison();
  Node *n = fe_node(l, OP_LAYERNORM, 3, in, c->loc);
  ir_set_int(l->g, n, "axis", t->rank - 1);
  ir_set_float(l->g, n, "eps", eps);
  return val_tensor(fe_emit(l, n));
}

/* PyTorch's nn.RMSNorm over the last dim: eps defaults, as there, to
 * the input dtype's machine epsilon (f32's: these graphs are f32). */
static Val bi_rms_norm(Lower *l, const Call *c) {
  Value *x;
  double eps;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 0x1p-23, &eps);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 1) {
    fe_error(l, c->loc, "rms_norm expects an input [..., D], got %s", ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  const char *scope = fe_layer_scope(l, c, "rms_norm");
  TensorType pt = type1(t->dtype, t->dims[t->rank - 1]);
  Value *in[2] = {x, fe_param(l, scope, "weight", &pt, "ones", c->loc)};
  if (!in[1]) return poison();
  Node *n = fe_node(l, OP_RMS_NORM, 2, in, c->loc);
  ir_set_int(l->g, n, "axis", t->rank - 1);
  ir_set_float(l->g, n, "eps", eps);
  return val_tensor(fe_emit(l, n));
}

/* PyTorch's nn.GroupNorm(groups, C): weight and bias per channel. */
static Val bi_group_norm(Lower *l, const Call *c) {
  Value *x;
  int64_t groups;
  double eps;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_pos_int(l, c, 1, 1, &groups);
  ok &= fe_arg_float(l, c, 2, 1e-5, &eps);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 2) {
    fe_error(l, c->loc, "group_norm expects an input [N, C, ...], got %s", ts(t).s);
    return poison();
  }
  if (t->dims[1] % groups) {
    fe_error(l, c->loc, "group_norm: %" PRId64 " groups do not divide the %" PRId64 " channels of %s",
             groups, t->dims[1], ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  const char *scope = fe_layer_scope(l, c, "group_norm");
  TensorType pt = type1(t->dtype, t->dims[1]);
  Value *in[3] = {x, fe_param(l, scope, "weight", &pt, "ones", c->loc),
                  fe_param(l, scope, "bias", &pt, "zeros", c->loc)};
  if (!in[1] || !in[2]) return poison();
  Node *n = fe_node(l, OP_GROUP_NORM, 3, in, c->loc);
  ir_set_int(l->g, n, "groups", groups);
  ir_set_float(l->g, n, "eps", eps);
  return val_tensor(fe_emit(l, n));
}

static Val bi_embedding(Lower *l, const Call *c) {
  Value *idx;
  int64_t num, dim;
  bool ok = fe_arg_tensor(l, c, 0, &idx);
  ok &= fe_arg_pos_int(l, c, 1, 1, &num);
  ok &= fe_arg_pos_int(l, c, 2, 1, &dim);
  if (!ok) return poison();
  if (idx->type.dtype != TY_I32 && idx->type.dtype != TY_I64) {
    fe_arg_error(l, c, 0, "an i32 or i64 tensor");
    return poison();
  }
  const char *scope = fe_layer_scope(l, c, "embedding");
  TensorType wt = type2(TY_F32, num, dim);
  Value *w = fe_param(l, scope, "weight", &wt, "normal(1)", c->loc);
  if (!w) return poison();
  Value *in[2] = {w, idx};
  Node *n = fe_node(l, OP_GATHER, 2, in, c->loc);
  ir_set_int(l->g, n, "axis", 0);
  return val_tensor(fe_emit(l, n));
}

/* lstm and gru: x, hidden | layers, bias, batch_first, bidirectional */
static Val recurrent(Lower *l, const Call *c, OpKind op, int gates, const char *kind) {
  Value *x;
  int64_t hidden, layers;
  bool bias, batch_first, bidir;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_pos_int(l, c, 1, 1, &hidden);
  ok &= fe_arg_pos_int(l, c, 2, 1, &layers);
  ok &= fe_arg_bool(l, c, 3, true, &bias);
  ok &= fe_arg_bool(l, c, 4, true, &batch_first);
  ok &= fe_arg_bool(l, c, 5, false, &bidir);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank != 3) {
    fe_error(l, c->loc, "%s expects a 3-d input %s, got %s", kind,
             batch_first ? "[N, T, I] (batch_first=true)" : "[T, N, I] (batch_first=false)",
             ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  if (layers > 10000 || hidden > DL_MAX_ELEMS) {
    fe_error(l, c->loc, "%s: %s=%" PRId64 " is too large", kind,
             layers > 10000 ? "layers" : "hidden", layers > 10000 ? layers : hidden);
    return poison();
  }
  int dirs = bidir ? 2 : 1, per = bias ? 4 : 2;
  int n_in = 1 + (int)layers * dirs * per, k = 0;
  Value **in = ARENA_ARRAY(l->a, Value *, n_in);
  in[k++] = x;
  const char *scope = fe_layer_scope(l, c, kind);
  const char *init = bound_init(l, "uniform", 1 / sqrt((double)hidden));
  int64_t gh = gates * hidden;
  for (int64_t layer = 0; layer < layers; layer++)
    for (int d = 0; d < dirs; d++) {
      const char *sfx = d ? "_reverse" : "";
      int64_t inl = layer == 0 ? t->dims[2] : hidden * dirs;
      TensorType wih = type2(t->dtype, gh, inl), whh = type2(t->dtype, gh, hidden),
                 b = type1(t->dtype, gh);
      char name[64];
      snprintf(name, sizeof name, "weight_ih_l%" PRId64 "%s", layer, sfx);
      in[k++] = fe_param(l, scope, name, &wih, init, c->loc);
      snprintf(name, sizeof name, "weight_hh_l%" PRId64 "%s", layer, sfx);
      in[k++] = fe_param(l, scope, name, &whh, init, c->loc);
      if (bias) {
        snprintf(name, sizeof name, "bias_ih_l%" PRId64 "%s", layer, sfx);
        in[k++] = fe_param(l, scope, name, &b, init, c->loc);
        snprintf(name, sizeof name, "bias_hh_l%" PRId64 "%s", layer, sfx);
        in[k++] = fe_param(l, scope, name, &b, init, c->loc);
      }
      for (int i = k - per; i < k; i++)
        if (!in[i]) return poison();
    }
  Node *n = fe_node(l, op, n_in, in, c->loc);
  ir_set_int(l->g, n, "hidden", hidden);
  ir_set_int(l->g, n, "layers", layers);
  ir_set_int(l->g, n, "bidirectional", bidir);
  ir_set_int(l->g, n, "batch_first", batch_first);
  ir_set_int(l->g, n, "bias", bias);
  if (!fe_emit(l, n)) return poison();
  Val r = {.kind = V_TUPLE};
  r.list.n = n->n_out;
  r.list.v = ARENA_ARRAY(l->a, Val, n->n_out);
  for (int i = 0; i < n->n_out; i++) r.list.v[i] = val_tensor(&n->out[i]);
  return r;
}

static Val bi_lstm(Lower *l, const Call *c) { return recurrent(l, c, OP_LSTM, 4, "lstm"); }
static Val bi_gru(Lower *l, const Call *c) { return recurrent(l, c, OP_GRU, 3, "gru"); }

/* The core of an attention over heads in the projections' own layout:
 * q [N, S, h, dh], k and v [N, S', kv_heads, dh] (a reshape of [N, S,
 * E], no transpose) -> [N, S, h, dh], one attention op in layout "bshd"
 * (codegen/attention.c).  mask, when given, broadcasts to [N, h, S, S']
 * in the op's convention: bool true where a query may attend, or added
 * to the scores. */
static Value *attention_core(Lower *l, Value *qh, Value *kh, Value *vh, Value *mask, bool causal, SrcLoc loc) {
  if (!qh || !kh || !vh) return NULL;
  Value *in[4] = {qh, kh, vh, mask};
  Node *n = fe_node(l, OP_ATTENTION, mask ? 4 : 3, in, loc);
  ir_set_int(l->g, n, "causal", causal);
  ir_set_str(l->g, n, "layout", "bshd");
  return fe_emit(l, n);
}

/* [N, S, heads * dh] -> [N, S, heads, dh]. */
static Value *heads_of(Lower *l, Value *x, int64_t heads, SrcLoc loc) {
  if (!x) return NULL;
  const int64_t *d = x->type.dims;
  int64_t shape[4] = {d[0], d[1], heads, d[2] / heads};
  return mk_ints_op(l, OP_RESHAPE, "shape", x, 4, shape, loc);
}

/* A mask as PyTorch's MultiheadAttention takes it: a bool one is true
 * where a query may NOT attend, a float one is added to the scores.  It
 * may come in any of the forms (the dims given); each is reshaped to
 * broadcast into [N, h, S, S'] and turned into the attention op's
 * convention (a bool: true where a query may attend).  NULL with *ok
 * false after reporting a wrong one. */
typedef struct MaskForm {
  int rank;
  int64_t given[3], as[4];
} MaskForm;

static Value *mha_mask(Lower *l, const Call *c, int arg, Value *mask, DType dt, int n_forms, const MaskForm *forms,
                       const char *what, bool *ok) {
  if (!mask) return NULL;
  const TensorType *mt = &mask->type;
  const MaskForm *form = NULL;
  for (int f = 0; f < n_forms && !form; f++) {
    bool same = mt->rank == forms[f].rank;
    for (int d = 0; same && d < mt->rank; d++) same = mt->dims[d] == forms[f].given[d];
    if (same) form = &forms[f];
  }
  if (!form || (mt->dtype != TY_BOOL && mt->dtype != dt)) {
    fe_arg_error(l, c, arg, what);
    *ok = false;
    return NULL;
  }
  bool keep = mt->dtype == TY_BOOL;
  mask = mk_ints_op(l, OP_RESHAPE, "shape", mask, 4, form->as, c->locs[arg]);
  return keep && mask ? fe_unary(l, OP_LOGICAL_NOT, mask, c->locs[arg]) : mask;
}

/* Two masks in the op's convention as one: bool ones and'ed, float ones
 * added, a bool one beside a float one as where(keep, 0, -inf). */
static Value *join_masks(Lower *l, Value *a, Value *b, DType dt, SrcLoc loc) {
  if (!a || !b) return a ? a : b;
  if (a->type.dtype == TY_BOOL && b->type.dtype == TY_BOOL) return mk_binary(l, OP_LOGICAL_AND, a, b, loc);
  Value *m[2] = {a, b};
  for (int i = 0; i < 2; i++)
    if (m[i]->type.dtype == TY_BOOL) {
      Value *in[3] = {m[i], fe_const(l, 0, dt, loc), fe_const(l, -INFINITY, dt, loc)};
      m[i] = in[1] && in[2] ? fe_emit(l, fe_node(l, OP_WHERE, 3, in, loc)) : NULL;
    }
  return m[0] && m[1] ? mk_binary(l, OP_ADD, m[0], m[1], loc) : NULL;
}

static Val bi_mha(Lower *l, const Call *c) {
  Value *q, *k, *v, *attn_mask, *pad_mask;
  int64_t heads, kv_heads;
  bool bias, causal;
  bool ok = fe_arg_tensor(l, c, 0, &q);
  ok &= fe_arg_tensor(l, c, 1, &k);
  ok &= fe_arg_tensor(l, c, 2, &v);
  ok &= fe_arg_pos_int(l, c, 3, 1, &heads);
  ok &= fe_arg_bool(l, c, 4, true, &bias);
  ok &= fe_arg_tensor(l, c, 5, &attn_mask);
  ok &= fe_arg_tensor(l, c, 6, &pad_mask);
  ok &= fe_arg_bool(l, c, 7, false, &causal);
  ok &= ok && fe_arg_pos_int(l, c, 8, heads, &kv_heads);
  if (!ok) return poison();
  Value *qkv[3] = {q, k, v};
  for (int i = 0; i < 3; i++)
    if (qkv[i]->type.rank != 3) {
      fe_error(l, c->locs[i],
               "multihead_attention expects %s of shape [N, S, E] (batch first), got %s",
               c->pnames[i], ts(&qkv[i]->type).s);
      return poison();
    }
  if (!need_float(l, c, q)) return poison();
  const int64_t *qd = q->type.dims, *kd = k->type.dims, *vd = v->type.dims;
  int64_t e = qd[2];
  if (kd[2] != e || vd[2] != e || kd[0] != qd[0] || vd[0] != qd[0] || kd[1] != vd[1]) {
    fe_error(l, c->loc,
             "multihead_attention: k %s and v %s must be [%" PRId64 ", S, %" PRId64
             "] to match q %s",
             ts(&k->type).s, ts(&v->type).s, qd[0], e, ts(&q->type).s);
    return poison();
  }
  if (e % heads != 0) {
    fe_error(l, c->locs[3],
             "multihead_attention: the embedding size %" PRId64
             " is not divisible by heads=%" PRId64,
             e, heads);
    return poison();
  }
  if (heads % kv_heads != 0) {
    fe_error(l, c->locs[8], "multihead_attention: kv_heads=%" PRId64 " does not divide heads=%" PRId64, kv_heads,
             heads);
    return poison();
  }
  DType dt = q->type.dtype;
  SrcLoc loc = c->loc;
  const char *scope = fe_layer_scope(l, c, "multihead_attention");
  /* The packed projection's rows: q's e, then k's and v's ekv each
   * (grouped-query attention: fewer key/value heads, e / heads wide). */
  int64_t ekv = e / heads * kv_heads, at[4] = {0, e, e + ekv, e + 2 * ekv};
  /* PyTorch: xavier_uniform_ for the packed projection, zero biases. */
  TensorType wt = type2(dt, at[3], e), bt = type1(dt, at[3]), ot = type2(dt, e, e),
             obt = type1(dt, e);
  Value *w = fe_param(l, scope, "in_proj_weight", &wt,
                      bound_init(l, "uniform", sqrt(6.0 / (double)(e + at[3]))), loc);
  Value *b = bias ? fe_param(l, scope, "in_proj_bias", &bt, "zeros", loc) : NULL;
  Value *wo = fe_param(l, scope, "out_proj.weight", &ot,
                       bound_init(l, "uniform", 1 / sqrt((double)e)), loc);
  Value *bo = bias ? fe_param(l, scope, "out_proj.bias", &obt, "zeros", loc) : NULL;
  if (!w || !wo || (bias && (!b || !bo))) return poison();
  /* Three products with the weight's slices (computed once, at load),
   * self-attention too: each result is the attention's operand as it
   * is, where slicing one packed product would copy all three. */
  Value *part[3];
  for (int i = 0; i < 3; i++) {
    Value *wi = mk_slice(l, w, 0, at[i], at[i + 1], loc);
    Value *bi = b ? mk_slice(l, b, 0, at[i], at[i + 1], loc) : NULL;
    if (b && !bi) return poison();
    part[i] = mk_linear(l, qkv[i], wi, bi, loc);
  }
  /* PyTorch's masks: attn_mask [S, S'] or [N * heads, S, S'],
   * key_padding_mask [N, S'], as the op's one mask; is_causal is its
   * causal attribute (top-left, as scaled_dot_product_attention's). */
  int64_t N = qd[0], S = qd[1], T = kd[1];
  const MaskForm attn_forms[2] = {{2, {S, T}, {1, 1, S, T}}, {3, {N * heads, S, T}, {N, heads, S, T}}};
  bool masks_ok = true;
  Value *am = mha_mask(l, c, 5, attn_mask, dt, 2, attn_forms,
                       arena_printf(l->a, "a bool or %s tensor [%" PRId64 ", %" PRId64 "] or [%" PRId64 ", %" PRId64
                                    ", %" PRId64 "] (PyTorch's [S, S'] or [N * heads, S, S'])",
                                    ir_dtype_name(dt), S, T, N * heads, S, T),
                       &masks_ok);
  const MaskForm pad_form = {2, {N, T}, {N, 1, 1, T}};
  Value *pm = mha_mask(l, c, 6, pad_mask, dt, 1, &pad_form,
                       arena_printf(l->a, "a bool or %s tensor [%" PRId64 ", %" PRId64 "] ([N, S'])", ir_dtype_name(dt), N, T),
                       &masks_ok);
  if (!masks_ok) return poison();
  Value *o = attention_core(l, heads_of(l, part[0], heads, loc), heads_of(l, part[1], kv_heads, loc),
                            heads_of(l, part[2], kv_heads, loc), join_masks(l, am, pm, dt, loc), causal, loc);
  int64_t shape[3] = {qd[0], qd[1], e};
  o = mk_ints_op(l, OP_RESHAPE, "shape", o, 3, shape, loc);
  return val_tensor(mk_linear(l, o, wo, bo, loc));
}

/* The training state dropout draws with: made by the first dropout,
 * shared by the rest. */
static Value *rng_state(Lower *l, const char *name, SrcLoc loc) {
  for (Node *n = l->g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return &n->out[0];
  TensorType t = {.dtype = TY_I64, .rank = 0};
  return fe_param(l, NULL, name, &t, "zeros", loc);
}

/* The identity in inference; when lowering for training, the dropout op
 * with its own stream of the step's random numbers (docs/training.md). */
static Val bi_dropout(Lower *l, const Call *c) {
  Value *x;
  double p;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 0.5, &p);
  if (ok && (p < 0 || p > 1)) {
    fe_arg_error(l, c, 1, "a probability between 0 and 1");
    ok = false;
  }
  if (!ok) return poison();
  if (!l->opt->training) return val_tensor(x);
  if (!need_float(l, c, x)) return poison();
  Value *in[4] = {x, rng_state(l, "dlcc.seed", c->loc), rng_state(l, "dlcc.step", c->loc),
                  rng_state(l, "dlcc.first_sample", c->loc)};
  if (!in[1] || !in[2] || !in[3]) return poison();
  Node *n = fe_node(l, OP_DROPOUT, 4, in, c->loc);
  ir_set_float(l->g, n, "p", p);
  /* The samples x comes from, the first input's axis 0 (the batch the
   * trainer splits): a flattened [N*T, D] still counts T*D a sample. */
  int64_t batch = ir_draw_batch(l->g, &x->type);
  if (batch) ir_set_int(l->g, n, "batch", batch);
  ir_set_int(l->g, n, "stream", fe_map(l, &l->counters, "\x01dropout", true)->n++);
  return val_tensor(fe_emit(l, n));
}

/* stage(x): where the model ends a pipeline stage (docs/parallel.md).
 * Only a pipeline splits a model (training, or inference asking for the
 * marks), so anything else takes x itself. */
static Val bi_stage(Lower *l, const Call *c) {
  Value *x;
  if (!fe_arg_tensor(l, c, 0, &x) || !need_float(l, c, x)) return poison();
  if (!l->opt->training && !l->opt->stages) return val_tensor(x);
  return val_tensor(fe_unary(l, OP_STAGE, x, c->loc));
}

/* ---- losses (passes/loss.c builds them) ---- */

static int param_index(const Call *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->pnames[i], name) == 0) return i;
  return -1;
}

/* cross_entropy(input, target, ...) and the others, PyTorch's
 * functional losses with their defaults; errors at the call. */
static Val bi_loss(Lower *l, const Call *c) {
  LossKind kind;
  if (!loss_from_name(c->name, &kind)) dl_internal(l->c, "builtin '%s' is no loss", c->name);
  LossSpec s = loss_spec_default(kind);
  Value *x, *t;
  const char *red = "mean";
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_tensor(l, c, 1, &t);
  int i = param_index(c, "reduction");
  ok &= fe_arg_str(l, c, i, "mean", &red);
  bool batchmean = kind == LOSS_KL_DIV && strcmp(red, "batchmean") == 0;
  if (ok && strcmp(red, "mean") != 0 && strcmp(red, "sum") != 0 && strcmp(red, "none") != 0 && !batchmean) {
    fe_error(l, c->locs[i], "%s: 'reduction' must be \"mean\", \"sum\"%s or \"none\", got \"%s\"", c->name,
             kind == LOSS_KL_DIV ? ", \"batchmean\"" : "", red);
    ok = false;
  }
  s.reduction = batchmean ? LOSS_BATCHMEAN : red[0] == 'm' ? LOSS_MEAN : red[0] == 's' ? LOSS_SUM : LOSS_NONE;
  if ((i = param_index(c, "ignore_index")) >= 0) ok &= fe_arg_int(l, c, i, -100, &s.ignore_index);
  if ((i = param_index(c, "label_smoothing")) >= 0) {
    bool got = fe_arg_float(l, c, i, 0, &s.label_smoothing);
    if (got && !(s.label_smoothing >= 0 && s.label_smoothing <= 1)) {
      fe_arg_error(l, c, i, "between 0 and 1");
      got = false;
    }
    ok &= got;
  }
  if ((i = param_index(c, "beta")) >= 0) ok &= fe_arg_float(l, c, i, 1, &s.beta);
  if ((i = param_index(c, "delta")) >= 0) ok &= fe_arg_float(l, c, i, 1, &s.delta);
  if ((i = param_index(c, "weight")) >= 0) ok &= fe_arg_tensor(l, c, i, &s.weight);
  if ((i = param_index(c, "pos_weight")) >= 0) ok &= fe_arg_tensor(l, c, i, &s.pos_weight);
  if ((i = param_index(c, "log_target")) >= 0) ok &= fe_arg_bool(l, c, i, false, &s.log_target);
  if (!ok) return poison();
  /* loss_build reports to the context itself, without the notes of the
   * block calls fe_error adds. */
  Value *v = loss_build(l->g, &s, x, t, c->loc);
  return v ? val_tensor(v) : poison();
}

/* ---- elementwise ---- */

static Val bi_unary(Lower *l, const Call *c) {
  Value *x;
  if (!fe_arg_tensor(l, c, 0, &x)) return poison();
  OpKind op = ir_op_from_name(c->name);
  if (op == OP_COUNT) dl_internal(l->c, "builtin '%s' has no op", c->name);
  return val_tensor(fe_unary(l, op, x, c->loc));
}

static Val clip(Lower *l, const Call *c, Value *x, double lo, double hi) {
  Node *n = fe_node(l, OP_CLIP, 1, &x, c->loc);
  ir_set_float(l->g, n, "min", lo);
  ir_set_float(l->g, n, "max", hi);
  return val_tensor(fe_emit(l, n));
}

static Val bi_relu6(Lower *l, const Call *c) {
  Value *x;
  if (!fe_arg_tensor(l, c, 0, &x)) return poison();
  return clip(l, c, x, 0, 6);
}

static Val bi_clip(Lower *l, const Call *c) {
  Value *x;
  double lo, hi;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 0, &lo);
  ok &= fe_arg_float(l, c, 2, 0, &hi);
  if (!ok) return poison();
  if (lo > hi) {
    fe_error(l, c->loc, "clip: min %g is greater than max %g", lo, hi);
    return poison();
  }
  return clip(l, c, x, lo, hi);
}

static Val bi_leaky_relu(Lower *l, const Call *c) {
  Value *x;
  double alpha;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_float(l, c, 1, 0.01, &alpha);
  if (!ok) return poison();
  Node *n = fe_node(l, OP_LEAKY_RELU, 1, &x, c->loc);
  ir_set_float(l->g, n, "alpha", alpha);
  return val_tensor(fe_emit(l, n));
}

static Val bi_gelu(Lower *l, const Call *c) {
  Value *x;
  const char *approx;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_str(l, c, 1, "none", &approx);
  if (ok && strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0) {
    fe_error(l, c->locs[1], "gelu: 'approximate' must be \"none\" or \"tanh\", got \"%s\"", approx);
    ok = false;
  }
  if (!ok) return poison();
  Node *n = fe_node(l, OP_GELU, 1, &x, c->loc);
  ir_set_str(l->g, n, "approximate", approx);
  return val_tensor(fe_emit(l, n));
}

/* F.interpolate on NCHW: an integer scale (or [h, w]) or an explicit
 * size; with an integer scale PyTorch's coordinates equal those of the
 * size it gives, so the IR op only carries the size. */
static Val bi_upsample(Lower *l, const Call *c) {
  Value *x;
  int64_t scale[2], raw[2];
  const char *mode;
  bool align;
  int nsize;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= arg_pair(l, c, 1, 2, 1, scale);
  ok &= fe_arg_str(l, c, 2, "nearest", &mode);
  ok &= fe_arg_bool(l, c, 3, false, &align);
  ok &= fe_arg_ints(l, c, 4, 2, "a list of 2 positive ints", &nsize, raw);
  if (!ok) return poison();
  if (strcmp(mode, "nearest") != 0 && strcmp(mode, "bilinear") != 0) {
    fe_error(l, c->locs[2], "upsample: mode must be \"nearest\" or \"bilinear\", got \"%s\"",
             mode);
    return poison();
  }
  if (align && strcmp(mode, "bilinear") != 0) {
    fe_error(l, c->locs[3], "upsample: align_corners needs mode=\"bilinear\"");
    return poison();
  }
  if (nsize != 0 && (nsize != 2 || raw[0] < 1 || raw[1] < 1)) {
    fe_arg_error(l, c, 4, "a list of 2 positive ints");
    return poison();
  }
  const TensorType *t = &x->type;
  if (t->rank != 4) {
    fe_error(l, c->loc, "upsample expects a 4-d input [N, C, H, W], got %s", ts(t).s);
    return poison();
  }
  if (!need_float(l, c, x)) return poison();
  int64_t size[2];
  for (int k = 0; k < 2; k++) {
    size[k] = nsize ? raw[k] : t->dims[2 + k] * scale[k];
    if (size[k] > DL_MAX_ELEMS) {
      fe_error(l, c->loc, "upsample: the output of %s is too large", ts(t).s);
      return poison();
    }
  }
  Node *n = fe_node(l, OP_RESIZE, 1, &x, c->loc);
  ir_set_ints(l->g, n, "size", 2, size);
  ir_set_str(l->g, n, "mode", mode);
  ir_set_int(l->g, n, "align_corners", align);
  return val_tensor(fe_emit(l, n));
}

/* F.grid_sample: x [N, C, H, W] read at grid [N, Ho, Wo, 2] (the shape
 * rule checks the shapes). */
static Val bi_grid_sample(Lower *l, const Call *c) {
  static const char *const modes[] = {"bilinear", "nearest", "bicubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  Value *in[2];
  const char *mode, *pad;
  bool align;
  bool ok = fe_arg_tensor(l, c, 0, &in[0]);
  ok &= fe_arg_tensor(l, c, 1, &in[1]);
  ok &= fe_arg_str(l, c, 2, "bilinear", &mode);
  ok &= fe_arg_str(l, c, 3, "zeros", &pad);
  ok &= fe_arg_bool(l, c, 4, false, &align);
  if (!ok) return poison();
  bool mode_ok = false, pad_ok = false;
  for (int i = 0; i < 3; i++) mode_ok |= strcmp(mode, modes[i]) == 0, pad_ok |= strcmp(pad, pads[i]) == 0;
  if (!mode_ok)
    fe_error(l, c->locs[2], "grid_sample: mode must be \"bilinear\", \"nearest\" or \"bicubic\", got \"%s\"",
             mode);
  if (!pad_ok)
    fe_error(l, c->locs[3],
             "grid_sample: padding_mode must be \"zeros\", \"border\" or \"reflection\", got \"%s\"", pad);
  if (!mode_ok || !pad_ok) return poison();
  Node *n = fe_node(l, OP_GRID_SAMPLE, 2, in, c->loc);
  ir_set_str(l->g, n, "mode", mode);
  ir_set_str(l->g, n, "padding_mode", pad);
  ir_set_int(l->g, n, "align_corners", align);
  return val_tensor(fe_emit(l, n));
}

/* maximum, minimum, pow, the comparisons and the binary logic: tensors
 * or numbers, at least one tensor. */
static Val bi_binary(Lower *l, const Call *c) {
  for (int i = 0; i < 2; i++)
    if (c->args[i].kind != V_TENSOR && !val_is_num(&c->args[i])) {
      fe_arg_error(l, c, i, "a tensor or a number");
      return poison();
    }
  if (c->args[0].kind != V_TENSOR && c->args[1].kind != V_TENSOR) {
    fe_error(l, c->loc, "%s: at least one of 'a' and 'b' must be a tensor", c->name);
    return poison();
  }
  return fe_tensor_binary(l, ir_op_from_name(c->name), c->args[0], c->args[1], c->loc);
}

/* mod(a, b, fmod=false): the remainder with the divisor's sign, Python's
 * % (which a % b on tensors is too), or with fmod=true the dividend's,
 * C's. */
static Val bi_mod(Lower *l, const Call *c) {
  bool c_fmod;
  if (!fe_arg_bool(l, c, 2, false, &c_fmod)) return poison();
  Val r = bi_binary(l, c);
  if (c_fmod && r.kind == V_TENSOR) ir_set_int(l->g, r.t->def, "fmod", 1);
  return r;
}

/* where(cond, a, b): cond a bool tensor, a and b tensors or numbers (at
 * least one a tensor, whose dtype a number takes). */
static Val bi_where(Lower *l, const Call *c) {
  const Val *cond = &c->args[0];
  if (cond->kind != V_TENSOR || cond->t->type.dtype != TY_BOOL) {
    fe_arg_error(l, c, 0, "a bool tensor (greater(x, 0) gives one; x > 0 gives a mask in x's dtype)");
    return poison();
  }
  for (int i = 1; i < 3; i++)
    if (c->args[i].kind != V_TENSOR && !val_is_num(&c->args[i])) {
      fe_arg_error(l, c, i, "a tensor or a number");
      return poison();
    }
  const Value *t = c->args[1].kind == V_TENSOR ? c->args[1].t : c->args[2].kind == V_TENSOR ? c->args[2].t : NULL;
  if (!t) {
    fe_error(l, c->loc, "where: at least one of 'a' and 'b' must be a tensor");
    return poison();
  }
  Value *in[3] = {cond->t};
  for (int i = 1; i < 3; i++) {
    const Val *v = &c->args[i];
    if (v->kind == V_TENSOR) {
      in[i] = v->t;
      continue;
    }
    if (v->kind == V_FLOAT && !ir_dtype_is_float(t->type.dtype)) {
      fe_arg_error(l, c, i, arena_printf(l->a, "a tensor or an integer (the other is %s)", ts(&t->type).s));
      return poison();
    }
    if (!(in[i] = fe_const(l, val_num(v), t->type.dtype, c->locs[i]))) return poison();
  }
  return val_tensor(fe_emit(l, fe_node(l, OP_WHERE, 3, in, c->loc)));
}

/* gather_elements(x, indices, axis=0): torch.gather, x read at indices
 * along axis and at the element's own coordinates elsewhere. */
static Val bi_gather_elements(Lower *l, const Call *c) {
  Value *x, *idx;
  int64_t axis;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_tensor(l, c, 1, &idx);
  ok &= fe_arg_int(l, c, 2, 0, &axis);
  if (!ok || !fe_axis(l, c, 2, axis, x->type.rank, &a)) return poison();
  Value *in[2] = {x, idx};
  Node *n = fe_node(l, OP_GATHER_ELEMENTS, 2, in, c->loc);
  ir_set_int(l->g, n, "axis", a);
  return val_tensor(fe_emit(l, n));
}

/* ---- reductions ---- */

static Val bi_softmax(Lower *l, const Call *c) {
  Value *x;
  int64_t axis;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, -1, &axis);
  if (!ok || !fe_axis(l, c, 1, axis, x->type.rank, &a)) return poison();
  Node *n =
      fe_node(l, strcmp(c->name, "softmax") == 0 ? OP_SOFTMAX : OP_LOG_SOFTMAX, 1, &x, c->loc);
  ir_set_int(l->g, n, "axis", a);
  return val_tensor(fe_emit(l, n));
}

static Val bi_reduce(Lower *l, const Call *c) {
  static const struct {
    const char *name;
    OpKind op;
  } ops[] = {{"sum", OP_REDUCE_SUM},
             {"mean", OP_REDUCE_MEAN},
             {"max", OP_REDUCE_MAX},
             {"min", OP_REDUCE_MIN}};
  OpKind op = OP_REDUCE_SUM;
  for (size_t i = 0; i < ARRAY_LEN(ops); i++)
    if (strcmp(ops[i].name, c->name) == 0) op = ops[i].op;
  Value *x;
  int64_t raw[DL_MAX_RANK];
  int n;
  bool keep;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_ints(l, c, 1, DL_MAX_RANK, "an int or a list of ints", &n, raw);
  ok &= fe_arg_bool(l, c, 2, false, &keep);
  if (!ok) return poison();
  int rank = x->type.rank;
  bool on[DL_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if (!fe_axis(l, c, 1, raw[i], rank, &a)) return poison();
    if (on[a]) {
      fe_error(l, c->locs[1], "%s: axis %d is given twice", c->name, a);
      return poison();
    }
    on[a] = true;
  }
  int64_t axes[DL_MAX_RANK];
  int count = 0;
  for (int d = 0; d < rank; d++)
    if (n == 0 || on[d]) axes[count++] = d;
  if (count == 0) return val_tensor(x); /* a scalar: nothing to reduce */
  Node *node = fe_node(l, op, 1, &x, c->loc);
  ir_set_ints(l->g, node, "axes", count, axes);
  ir_set_int(l->g, node, "keepdims", keep);
  return val_tensor(fe_emit(l, node));
}

static Val bi_argmax(Lower *l, const Call *c) {
  Value *x;
  int64_t axis;
  bool keep;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 0, &axis);
  ok &= fe_arg_bool(l, c, 2, false, &keep);
  if (!ok || !fe_axis(l, c, 1, axis, x->type.rank, &a)) return poison();
  Node *n = fe_node(l, OP_ARGMAX, 1, &x, c->loc);
  ir_set_int(l->g, n, "axis", a);
  ir_set_int(l->g, n, "keepdims", keep);
  return val_tensor(fe_emit(l, n));
}

/* ---- matrix products and data movement ---- */

static Val bi_matmul(Lower *l, const Call *c) {
  Value *a, *b;
  bool ok = fe_arg_tensor(l, c, 0, &a);
  ok &= fe_arg_tensor(l, c, 1, &b);
  return ok ? val_tensor(mk_binary(l, OP_MATMUL, a, b, c->loc)) : poison();
}

static Val bi_transpose(Lower *l, const Call *c) {
  Value *x;
  int64_t perm[DL_MAX_RANK];
  int n;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_ints(l, c, 1, DL_MAX_RANK, "a list of ints", &n, perm);
  if (!ok) return poison();
  int rank = x->type.rank;
  if (n == 0) {
    if (rank < 2) {
      fe_error(l, c->loc, "transpose: %s has no last two dims to swap; give perm", ts(&x->type).s);
      return poison();
    }
    for (int d = 0; d < rank; d++) perm[d] = d;
    perm[rank - 1] = rank - 2;
    perm[rank - 2] = rank - 1;
    n = rank;
  } else {
    for (int i = 0; i < n; i++)
      if (perm[i] < 0) perm[i] += rank;
  }
  return val_tensor(mk_ints_op(l, OP_TRANSPOSE, "perm", x, n, perm, c->loc));
}

static const char *ints_text(Lower *l, const int64_t *v, int n) {
  char *s = "[";
  for (int i = 0; i < n; i++) s = arena_printf(l->a, "%s%s%" PRId64, s, i ? ", " : "", v[i]);
  return arena_printf(l->a, "%s]", s);
}

static Val bi_reshape(Lower *l, const Call *c) {
  Value *x;
  int64_t shape[DL_MAX_RANK];
  int n;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_ints(l, c, 1, DL_MAX_RANK, "a list of ints", &n, shape);
  if (!ok) return poison();
  int infer = -1;
  int64_t known = 1, have = ir_type_numel(&x->type);
  for (int i = 0; i < n; i++) {
    if (shape[i] == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (shape[i] < 1) {
      fe_error(l, c->locs[1], "reshape: the dims of %s must be positive, with at most one -1",
               ints_text(l, shape, n));
      return poison();
    }
    if (known <= have) known = known > have / shape[i] + 1 ? have + 1 : known * shape[i];
  }
  if (infer >= 0) {
    if (known > have || have % known != 0) {
      fe_error(l, c->loc, "reshape: cannot reshape %s (%" PRId64 " elements) to %s", ts(&x->type).s,
               have, ints_text(l, shape, n));
      return poison();
    }
    shape[infer] = have / known;
  }
  return val_tensor(mk_ints_op(l, OP_RESHAPE, "shape", x, n, shape, c->loc));
}

static Val bi_flatten(Lower *l, const Call *c) {
  Value *x;
  int64_t start, end;
  int s, e;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 1, &start);
  ok &= fe_arg_int(l, c, 2, -1, &end);
  if (!ok) return poison();
  int rank = x->type.rank;
  if (!fe_axis(l, c, 1, start, rank, &s) || !fe_axis(l, c, 2, end, rank, &e)) return poison();
  if (s > e) {
    fe_error(l, c->loc, "flatten: start %d comes after end %d for %s", s, e, ts(&x->type).s);
    return poison();
  }
  if (s == e) return val_tensor(x);
  int64_t shape[DL_MAX_RANK];
  int n = 0;
  for (int d = 0; d < s; d++) shape[n++] = x->type.dims[d];
  shape[n] = 1;
  for (int d = s; d <= e; d++) shape[n] *= x->type.dims[d];
  n++;
  for (int d = e + 1; d < rank; d++) shape[n++] = x->type.dims[d];
  return val_tensor(mk_ints_op(l, OP_RESHAPE, "shape", x, n, shape, c->loc));
}

static Val bi_concat(Lower *l, const Call *c) {
  int n = c->n_rest;
  const Val *items = c->rest;
  if (n == 1 && items[0].kind == V_LIST) {
    n = items[0].list.n;
    items = items[0].list.v;
  }
  if (n == 0) {
    fe_error(l, c->loc, "concat needs at least one tensor");
    return poison();
  }
  Value **in = ARENA_ARRAY(l->a, Value *, n);
  char buf[IR_TYPE_STR_MAX + 32];
  for (int i = 0; i < n; i++) {
    if (items[i].kind != V_TENSOR) {
      SrcLoc loc = c->n_rest == n ? c->rest_locs[i] : c->loc;
      fe_error(l, loc, "concat: operand %d must be a tensor, got %s", i + 1,
               items[i].kind == V_STR ? "a string" : fe_describe(&items[i], buf, sizeof buf));
      return poison();
    }
    in[i] = items[i].t;
  }
  int64_t axis;
  int a;
  if (!fe_arg_int(l, c, 0, 0, &axis) || !fe_axis(l, c, 0, axis, in[0]->type.rank, &a))
    return poison();
  if (n == 1) return val_tensor(in[0]);
  Node *node = fe_node(l, OP_CONCAT, n, in, c->loc);
  ir_set_int(l->g, node, "axis", a);
  return val_tensor(fe_emit(l, node));
}

static Val bi_slice(Lower *l, const Call *c) {
  Value *x;
  int64_t axis, start, end, step;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 0, &axis);
  ok &= fe_arg_int(l, c, 2, 0, &start);
  ok &= fe_arg_int(l, c, 3, INT64_MAX, &end);
  ok &= fe_arg_pos_int(l, c, 4, 1, &step);
  if (!ok || !fe_axis(l, c, 1, axis, x->type.rank, &a)) return poison();
  int64_t dim = x->type.dims[a];
  /* Python's rules: negative counts from the end, out of range clamps. */
  int64_t s = start < 0 ? start + dim : start, e = end < 0 ? end + dim : end;
  s = s < 0 ? 0 : s > dim ? dim : s;
  e = e < 0 ? 0 : e > dim ? dim : e;
  if (s >= e) {
    fe_error(l, c->loc, "slice: %" PRId64 ":%" PRId64 " of axis %d of %s is empty", start,
             end == INT64_MAX ? dim : end, a, ts(&x->type).s);
    return poison();
  }
  int r = x->type.rank;
  int64_t ss[DL_MAX_RANK], es[DL_MAX_RANK], st[DL_MAX_RANK];
  for (int d = 0; d < r; d++) {
    ss[d] = 0;
    es[d] = x->type.dims[d];
    st[d] = 1;
  }
  ss[a] = s;
  es[a] = e;
  st[a] = step;
  Node *n = fe_node(l, OP_SLICE, 1, &x, c->loc);
  ir_set_ints(l->g, n, "starts", r, ss);
  ir_set_ints(l->g, n, "ends", r, es);
  ir_set_ints(l->g, n, "steps", r, st);
  return val_tensor(fe_emit(l, n));
}

static Val bi_pad(Lower *l, const Call *c) {
  Value *x;
  int64_t raw[2 * DL_MAX_RANK];
  int n;
  double value;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_ints(l, c, 1, 2 * DL_MAX_RANK, "a list of non-negative ints", &n, raw);
  ok &= fe_arg_float(l, c, 2, 0, &value);
  if (!ok) return poison();
  int r = x->type.rank;
  if (n % 2 != 0 || n > 2 * r) {
    fe_error(l, c->locs[1],
             "pad: 'pads' needs pairs (before, after) for at most %d dims of %s, got %d values", r,
             ts(&x->type).s, n);
    return poison();
  }
  int64_t pads[2 * DL_MAX_RANK] = {0};
  /* PyTorch's F.pad order: the last dim first. */
  for (int i = 0; i < n / 2; i++) {
    if (raw[2 * i] < 0 || raw[2 * i + 1] < 0) {
      fe_arg_error(l, c, 1, "a list of non-negative ints");
      return poison();
    }
    pads[r - 1 - i] = raw[2 * i];
    pads[r + r - 1 - i] = raw[2 * i + 1];
  }
  Node *node = fe_node(l, OP_PAD, 1, &x, c->loc);
  ir_set_ints(l->g, node, "pads", 2 * r, pads);
  ir_set_float(l->g, node, "value", value);
  return val_tensor(fe_emit(l, node));
}

static Val bi_cast(Lower *l, const Call *c) {
  Value *x;
  if (!fe_arg_tensor(l, c, 0, &x)) return poison();
  DType dt;
  const Val *d = &c->args[1];
  if (d->kind == V_DTYPE) {
    dt = d->dt;
  } else if (d->kind == V_STR && ir_dtype_from_name(d->s, &dt) && dt != TY_F64) {
  } else {
    fe_arg_error(l, c, 1, "a dtype (f32, f16, bf16, i8, i32, i64, bool, u8)");
    return poison();
  }
  if (dt == x->type.dtype) return val_tensor(x);
  Node *n = fe_node(l, OP_CAST, 1, &x, c->loc);
  ir_set_dtype(l->g, n, "to", dt);
  return val_tensor(fe_emit(l, n));
}

static Val pool(Lower *l, const Call *c, OpKind op, int nsp, int dil_arg, int ceil_arg, int incl_arg) {
  Value *x;
  int64_t kernel[3], stride[3], pads[6], dil[3] = {1, 1, 1};
  bool ceil_mode, incl = true;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= arg_tuple(l, c, 1, nsp, 1, 1, kernel);
  ok &= arg_tuple(l, c, 2, nsp, 0, 1, stride);
  ok &= arg_pads(l, c, 3, nsp, pads);
  if (dil_arg >= 0) ok &= arg_tuple(l, c, dil_arg, nsp, 1, 1, dil);
  ok &= fe_arg_bool(l, c, ceil_arg, false, &ceil_mode);
  if (incl_arg >= 0) ok &= fe_arg_bool(l, c, incl_arg, true, &incl);
  if (!ok) return poison();
  if (c->args[2].kind == V_NONE)
    for (int k = 0; k < nsp; k++) stride[k] = kernel[k];
  if (x->type.rank != 2 + nsp) {
    fe_error(l, c->loc, "%s expects a %d-d input %s, got %s", c->name, 2 + nsp, image_layout(nsp),
             ts(&x->type).s);
    return poison();
  }
  Node *n = fe_node(l, op, 1, &x, c->loc);
  ir_set_ints(l->g, n, "kernel", nsp, kernel);
  ir_set_ints(l->g, n, "stride", nsp, stride);
  ir_set_ints(l->g, n, "pad", 2 * nsp, pads);
  ir_set_ints(l->g, n, "dilation", nsp, dil);
  ir_set_int(l->g, n, "ceil_mode", ceil_mode);
  if (op == OP_AVGPOOL2D || op == OP_AVGPOOL3D) ir_set_int(l->g, n, "count_include_pad", incl);
  return val_tensor(fe_emit(l, n));
}

static Val bi_maxpool(Lower *l, const Call *c) { return pool(l, c, OP_MAXPOOL2D, 2, 4, 5, -1); }
static Val bi_avgpool(Lower *l, const Call *c) { return pool(l, c, OP_AVGPOOL2D, 2, -1, 4, 5); }
static Val bi_maxpool3d(Lower *l, const Call *c) { return pool(l, c, OP_MAXPOOL3D, 3, 4, 5, -1); }
static Val bi_avgpool3d(Lower *l, const Call *c) { return pool(l, c, OP_AVGPOOL3D, 3, -1, 4, 5); }

/* [N, C, H, W] -> [N, C, 1, 1]; over a volume, the mean of the three
 * spatial dims, kept as ones. */
static Val bi_global_avgpool(Lower *l, const Call *c) {
  Value *x;
  if (!fe_arg_tensor(l, c, 0, &x)) return poison();
  if (x->type.rank == 5) {
    Node *n = fe_node(l, OP_REDUCE_MEAN, 1, &x, c->loc);
    ir_set_ints(l->g, n, "axes", 3, (int64_t[]){2, 3, 4});
    ir_set_int(l->g, n, "keepdims", 1);
    return val_tensor(fe_emit(l, n));
  }
  if (x->type.rank != 4) {
    fe_error(l, c->loc, "global_avgpool expects a 4-d input [N, C, H, W] or a 5-d input [N, C, D, H, W], got %s",
             ts(&x->type).s);
    return poison();
  }
  return val_tensor(fe_unary(l, OP_GLOBAL_AVGPOOL, x, c->loc));
}

static Val bi_expand(Lower *l, const Call *c) {
  Value *x;
  int64_t shape[DL_MAX_RANK];
  int n;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_ints(l, c, 1, DL_MAX_RANK, "a list of ints", &n, shape);
  if (!ok) return poison();
  int r = x->type.rank;
  /* -1 keeps the dim, as torch.expand; dims align at the right. */
  for (int i = 0; i < n; i++) {
    int d = i - (n - r);
    if (shape[i] == -1 && d >= 0) shape[i] = x->type.dims[d];
  }
  return val_tensor(mk_ints_op(l, OP_EXPAND, "shape", x, n, shape, c->loc));
}

/* ---- compile-time queries ---- */

static Val bi_dim(Lower *l, const Call *c) {
  Value *x;
  int64_t axis;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 0, &axis);
  if (!ok || !fe_axis(l, c, 1, axis, x->type.rank, &a)) return poison();
  return val_int(x->type.dims[a]);
}

static Val bi_len(Lower *l, const Call *c) {
  const Val *v = &c->args[0];
  if (v->kind == V_LIST || v->kind == V_TUPLE) return val_int(v->list.n);
  if (v->kind == V_STR) return val_int((int64_t)strlen(v->s));
  fe_arg_error(l, c, 0, "a list or a string");
  return poison();
}

static const Builtin builtins[] = {
    {"linear", bi_linear, "x,out|bias", false},
    {"conv2d", bi_conv2d, "x,out,kernel|stride,pad,dilation,groups,bias", false},
    {"conv_transpose2d", bi_conv_transpose2d,
     "x,out,kernel|stride,pad,output_pad,dilation,groups,bias", false},
    {"conv3d", bi_conv3d, "x,out,kernel|stride,pad,dilation,groups,bias", false},
    {"conv_transpose3d", bi_conv_transpose3d,
     "x,out,kernel|stride,pad,output_pad,dilation,groups,bias", false},
    {"batchnorm", bi_batchnorm, "x|eps,momentum", false},
    {"layernorm", bi_layernorm, "x|eps", false},
    {"rms_norm", bi_rms_norm, "x|eps", false},
    {"group_norm", bi_group_norm, "x,groups|eps", false},
    {"embedding", bi_embedding, "indices,num,dim", false},
    {"lstm", bi_lstm, "x,hidden|layers,bias,batch_first,bidirectional", false},
    {"gru", bi_gru, "x,hidden|layers,bias,batch_first,bidirectional", false},
    {"multihead_attention", bi_mha, "q,k,v,heads|bias,attn_mask,key_padding_mask,is_causal,kv_heads", false},
    {"dropout", bi_dropout, "x|p", false},
    {"stage", bi_stage, "x", false},
    {"cross_entropy", bi_loss, "input,target|ignore_index,label_smoothing,reduction,weight", false},
    {"nll_loss", bi_loss, "input,target|ignore_index,reduction,weight", false},
    {"mse_loss", bi_loss, "input,target|reduction", false},
    {"l1_loss", bi_loss, "input,target|reduction", false},
    {"smooth_l1_loss", bi_loss, "input,target|reduction,beta", false},
    {"huber_loss", bi_loss, "input,target|reduction,delta", false},
    {"binary_cross_entropy_with_logits", bi_loss, "input,target|reduction,pos_weight", false},
    {"binary_cross_entropy", bi_loss, "input,target|reduction", false},
    {"kl_div", bi_loss, "input,target|reduction,log_target", false},
    {"upsample", bi_upsample, "x|scale,mode,align_corners,size", false},
    {"grid_sample", bi_grid_sample, "x,grid|mode,padding_mode,align_corners", false},
    {"relu", bi_unary, "x", false},
    {"sigmoid", bi_unary, "x", false},
    {"tanh", bi_unary, "x", false},
    {"silu", bi_unary, "x", false},
    {"hardswish", bi_unary, "x", false},
    {"hardsigmoid", bi_unary, "x", false},
    {"exp", bi_unary, "x", false},
    {"log", bi_unary, "x", false},
    {"sqrt", bi_unary, "x", false},
    {"rsqrt", bi_unary, "x", false},
    {"erf", bi_unary, "x", false},
    {"abs", bi_unary, "x", false},
    {"sin", bi_unary, "x", false},
    {"cos", bi_unary, "x", false},
    {"reciprocal", bi_unary, "x", false},
    {"round", bi_unary, "x", false},
    {"floor", bi_unary, "x", false},
    {"ceil", bi_unary, "x", false},
    {"sign", bi_unary, "x", false},
    {"tan", bi_unary, "x", false},
    {"asin", bi_unary, "x", false},
    {"acos", bi_unary, "x", false},
    {"atan", bi_unary, "x", false},
    {"sinh", bi_unary, "x", false},
    {"cosh", bi_unary, "x", false},
    {"asinh", bi_unary, "x", false},
    {"acosh", bi_unary, "x", false},
    {"atanh", bi_unary, "x", false},
    {"relu6", bi_relu6, "x", false},
    {"leaky_relu", bi_leaky_relu, "x|alpha", false},
    {"gelu", bi_gelu, "x|approximate", false},
    {"clip", bi_clip, "x,min,max", false},
    {"maximum", bi_binary, "a,b", false},
    {"minimum", bi_binary, "a,b", false},
    {"pow", bi_binary, "a,b", false},
    {"mod", bi_mod, "a,b|fmod", false},
    {"equal", bi_binary, "a,b", false},
    {"not_equal", bi_binary, "a,b", false},
    {"less", bi_binary, "a,b", false},
    {"less_equal", bi_binary, "a,b", false},
    {"greater", bi_binary, "a,b", false},
    {"greater_equal", bi_binary, "a,b", false},
    {"isnan", bi_unary, "x", false},
    {"isinf", bi_unary, "x", false},
    {"logical_not", bi_unary, "x", false},
    {"logical_and", bi_binary, "a,b", false},
    {"logical_or", bi_binary, "a,b", false},
    {"logical_xor", bi_binary, "a,b", false},
    {"where", bi_where, "cond,a,b", false},
    {"softmax", bi_softmax, "x|axis", false},
    {"log_softmax", bi_softmax, "x|axis", false},
    {"sum", bi_reduce, "x|axis,keepdims", false},
    {"mean", bi_reduce, "x|axis,keepdims", false},
    {"max", bi_reduce, "x|axis,keepdims", false},
    {"min", bi_reduce, "x|axis,keepdims", false},
    {"argmax", bi_argmax, "x,axis|keepdims", false},
    {"matmul", bi_matmul, "a,b", false},
    {"transpose", bi_transpose, "x|perm", false},
    {"reshape", bi_reshape, "x,shape", false},
    {"flatten", bi_flatten, "x|start,end", false},
    {"concat", bi_concat, "|axis", true},
    {"slice", bi_slice, "x,axis,start|end,step", false},
    {"pad", bi_pad, "x,pads|value", false},
    {"cast", bi_cast, "x,dtype", false},
    {"maxpool2d", bi_maxpool, "x,kernel|stride,pad,dilation,ceil_mode", false},
    {"avgpool2d", bi_avgpool, "x,kernel|stride,pad,ceil_mode,count_include_pad", false},
    {"maxpool3d", bi_maxpool3d, "x,kernel|stride,pad,dilation,ceil_mode", false},
    {"avgpool3d", bi_avgpool3d, "x,kernel|stride,pad,ceil_mode,count_include_pad", false},
    {"global_avgpool", bi_global_avgpool, "x", false},
    {"expand", bi_expand, "x,shape", false},
    {"gather_elements", bi_gather_elements, "x,indices|axis", false},
    {"dim", bi_dim, "x,axis", false},
    {"len", bi_len, "x", false},
};

const Builtin *fe_builtin(const char *name) {
  for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
    if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
  return fe_tensor_builtin(name);
}

static const char *const scalar_only[] = {"int", "float"};

int fe_builtin_names(const char **out, int max) {
  int n = 0;
  for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
    if (n < max) out[n++] = builtins[i].name;
  for (size_t i = 0; i < ARRAY_LEN(scalar_only); i++)
    if (n < max) out[n++] = scalar_only[i];
  if (!out) return (int)(ARRAY_LEN(builtins) + ARRAY_LEN(scalar_only)) + fe_tensor_builtin_names(NULL, 0);
  return n + fe_tensor_builtin_names(out + n, max - n);
}

/* ---- scalar functions ---- */

bool fe_is_scalar_fn(const char *name) {
  static const char *const names[] = {"sqrt", "exp", "log", "abs", "min", "max", "int", "float"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}

Val fe_scalar_call(Lower *l, const char *name, int n, const Val *args, const SrcLoc *locs,
                   SrcLoc loc) {
  char buf[IR_TYPE_STR_MAX + 32];
  bool minmax = strcmp(name, "min") == 0 || strcmp(name, "max") == 0;
  if (minmax ? n < 1 : n != 1) {
    fe_error(l, loc, "%s takes %s, got %d", name, minmax ? "at least 1 argument" : "1 argument", n);
    return val_poison();
  }
  /* Python's float("inf"), float("-inf"), float("nan"): what a mask needs. */
  if (strcmp(name, "float") == 0 && n == 1 && args[0].kind == V_STR) {
    char *end;
    double v = strtod(args[0].s, &end);
    if (*args[0].s && !*end && !isspace((unsigned char)args[0].s[0])) return val_float(v);
    fe_error(l, locs[0], "float: \"%s\" is not a number (\"inf\", \"-inf\" and \"nan\" are)", args[0].s);
    return val_poison();
  }
  for (int i = 0; i < n; i++) {
    bool fits = val_is_num(&args[i]) || (!minmax && args[i].kind == V_BOOL &&
                                         (strcmp(name, "int") == 0 || strcmp(name, "float") == 0));
    if (!fits) {
      fe_error(l, locs[i], "%s expects a number here, got %s", name,
               args[i].kind == V_STR ? "a string" : fe_describe(&args[i], buf, sizeof buf));
      return val_poison();
    }
  }
  const Val *a = &args[0];
  double x = a->kind == V_BOOL ? (double)a->b : val_num(a);
  if (minmax) {
    bool want_max = name[1] == 'a';
    const Val *best = &args[0];
    for (int i = 1; i < n; i++) {
      double v = val_num(&args[i]), b = val_num(best);
      bool better = args[i].kind == V_INT && best->kind == V_INT
                        ? (want_max ? args[i].i > best->i : args[i].i < best->i)
                        : (want_max ? v > b : v < b);
      if (better) best = &args[i];
    }
    return *best;
  }
  if (strcmp(name, "int") == 0) {
    if (a->kind == V_INT) return *a;
    if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0)) {
      fe_error(l, locs[0], "int: %s does not fit in an int", fe_describe(a, buf, sizeof buf));
      return val_poison();
    }
    return val_int((int64_t)x);
  }
  if (strcmp(name, "float") == 0) return val_float(x);
  if (strcmp(name, "abs") == 0) {
    if (a->kind == V_INT) {
      if (a->i == INT64_MIN) {
        fe_error(l, locs[0], "integer overflow: abs(%" PRId64 ")", a->i);
        return val_poison();
      }
      return val_int(a->i < 0 ? -a->i : a->i);
    }
    return val_float(fabs(x));
  }
  if (strcmp(name, "sqrt") == 0) {
    if (x < 0) {
      fe_error(l, locs[0], "sqrt of the negative number %s", fe_describe(a, buf, sizeof buf));
      return val_poison();
    }
    return val_float(sqrt(x));
  }
  if (strcmp(name, "log") == 0) {
    if (x <= 0) {
      fe_error(l, locs[0], "log of the non-positive number %s", fe_describe(a, buf, sizeof buf));
      return val_poison();
    }
    return val_float(log(x));
  }
  return val_float(exp(x));
}
