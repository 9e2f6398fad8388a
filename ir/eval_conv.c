/* The reference interpreter's dense ops: takes a node and its operand
 * tensors, returns its result.  matmul and linear, convolutions and
 * transposed convolutions, resize, grid_sample, pooling, and the
 * recurrent layers (LSTM, GRU). */
#include "eval_impl.h"

/* ---- matrix products ---- */

/* One multiply-accumulate, exact for integers, in double for floats. */
typedef struct Acc {
  bool ints;
  double f;
  int64_t i;
} Acc;

static void acc_mac(Acc *a, const Tensor *x, int64_t ix, const Tensor *y, int64_t iy) {
  if (a->ints)
    a->i = wadd(a->i, wmul(get_i(x, ix), get_i(y, iy)));
  else
    a->f += ir_tensor_get(x, ix) * ir_tensor_get(y, iy);
}

static void acc_add(Acc *a, const Tensor *x, int64_t ix) {
  if (a->ints)
    a->i = wadd(a->i, get_i(x, ix));
  else
    a->f += ir_tensor_get(x, ix);
}

static void acc_store(const Acc *a, Tensor *out, int64_t i) {
  if (a->ints)
    set_i(out, i, a->i);
  else
    ir_tensor_set(out, i, a->f);
}

bool eval_matmul(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
  /* NumPy: a 1-D operand becomes a matrix for the product, and the added
   * dim is dropped from the result. */
  TensorType at = ir_matmul_operand(n, 0), bt = ir_matmul_operand(n, 1);
  bool ta = ir_matmul_trans(n, 0), tb = ir_matmul_trans(n, 1);
  if (at.rank < 1 || bt.rank < 1) return fail(e, "operands must have rank >= 1");
  if (at.rank == 1) {
    at.rank = 2;
    at.dims[1] = at.dims[0];
    at.dims[0] = 1;
  }
  if (bt.rank == 1) {
    bt.rank = 2;
    bt.dims[1] = 1;
  }
  int64_t m = at.dims[at.rank - 2], k = at.dims[at.rank - 1];
  int64_t k2 = bt.dims[bt.rank - 2], nn = bt.dims[bt.rank - 1];
  if (k != k2) return fail(e, "inner dims differ (%" PRId64 " vs %" PRId64 ")", k, k2);
  /* Batch: broadcast of the leading dims. */
  TensorType batch = {.dtype = out->type.dtype};
  TensorType ab = at, bb = bt;
  ab.rank -= 2;
  bb.rank -= 2;
  if (!ir_broadcast_dims(ab.dims, ab.rank, bb.dims, bb.rank, batch.dims, &batch.rank))
    return fail(e, "batch dims do not broadcast");
  int64_t nbatch = numel(&batch);
  if (nbatch * m * nn != numel(&out->type)) return fail(e, "result type does not fit the operands");
  int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&ab, &batch, sa);
  bcast_strides(&bb, &batch, sb);
  bool ints = is_int(a) && is_int(b) && is_int(out);
  for (int64_t bi = 0; bi < nbatch; bi++) {
    unravel(bi, &batch, idx);
    /* ab's strides count matrices; scale them to elements. */
    int64_t oa = dot_idx(idx, sa, batch.rank) * m * k, ob = dot_idx(idx, sb, batch.rank) * k * nn;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nn; j++) {
        Acc acc = {.ints = ints};
        for (int64_t p = 0; p < k; p++)
          acc_mac(&acc, a, oa + (ta ? p * m + i : i * k + p), b, ob + (tb ? j * k + p : p * nn + j));
        acc_store(&acc, out, (bi * m + i) * nn + j);
      }
  }
  return true;
}

bool eval_linear(Eval *e, const Tensor *x, const Tensor *w, const Tensor *b, Tensor *out) {
  if (x->type.rank < 1 || w->type.rank != 2) return fail(e, "needs x [..., in] and W [out, in]");
  int64_t in = x->type.dims[x->type.rank - 1], outf = w->type.dims[0];
  if (w->type.dims[1] != in) return fail(e, "W is not [out, %" PRId64 "]", in);
  if (b && numel(&b->type) != outf) return fail(e, "bias must have %" PRId64 " elements", outf);
  int64_t rows = in ? numel(&x->type) / in : numel(&out->type) / (outf ? outf : 1);
  if (rows * outf != numel(&out->type)) return fail(e, "result type does not fit the operands");
  bool ints = is_int(x) && is_int(w) && is_int(out);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < outf; o++) {
      Acc acc = {.ints = ints};
      for (int64_t p = 0; p < in; p++) acc_mac(&acc, x, r * in + p, w, o * in + p);
      if (b) acc_add(&acc, b, o);
      acc_store(&acc, out, r * outf + o);
    }
  return true;
}

/* ---- windows: convolutions and pooling over 2 or 3 spatial dims ---- */

enum { MAX_SPATIAL = 3 };

/* The geometry every window op shares: nsp spatial dims of the input
 * (in), the output (out) and the kernel (k), the stride, the pads before
 * (lo) and after (hi) and the dilation, and the element counts of an
 * input plane, an output plane and a kernel. */
typedef struct Window {
  int nsp;
  int64_t in[MAX_SPATIAL], out[MAX_SPATIAL], k[MAX_SPATIAL];
  int64_t stride[MAX_SPATIAL], lo[MAX_SPATIAL], hi[MAX_SPATIAL], dil[MAX_SPATIAL];
  int64_t in_size, out_size, k_size;
} Window;

static int spatial_dims(OpKind op) {
  switch (op) {
    case OP_CONV3D:
    case OP_CONV_TRANSPOSE3D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D: return 3;
    default: return 2;
  }
}

/* The window of n over x into out; the kernel's dims from the weight w
 * (a convolution) or from the kernel attribute (w NULL: a pool). */
static bool window_of(Eval *e, const Node *n, const TensorType *x, const TensorType *w,
                      const TensorType *out, Window *win) {
  int nsp = spatial_dims(n->op), nk = nsp, ns, np, nd;
  const int64_t *kern = NULL;
  if (x->rank != 2 + nsp || out->rank != 2 + nsp || (w && w->rank != 2 + nsp))
    return fail(e, "needs rank-%d x%s", 2 + nsp, w ? " and W" : "");
  if (!w) kern = ir_attr_ints(n, "kernel", &nk);
  const int64_t *stride = ir_attr_ints(n, "stride", &ns), *pad = ir_attr_ints(n, "pad", &np);
  const int64_t *dil = ir_attr_ints(n, "dilation", &nd);
  if (nk != nsp || ns != nsp || np != 2 * nsp || nd != nsp)
    return fail(e, "kernel, stride and dilation need %d entries, pad %d", nsp, 2 * nsp);
  win->nsp = nsp;
  win->in_size = win->out_size = win->k_size = 1;
  int sx = ir_nhwc(n) ? 1 : 2; /* the first spatial axis */
  for (int d = 0; d < nsp; d++) {
    win->in[d] = x->dims[sx + d];
    win->out[d] = out->dims[sx + d];
    win->k[d] = w ? w->dims[sx + d] : kern[d];
    win->stride[d] = stride[d], win->dil[d] = dil[d];
    win->lo[d] = pad[d], win->hi[d] = pad[nsp + d];
    if (win->stride[d] < 1 || win->dil[d] < 1 || win->k[d] < 1)
      return fail(e, "kernel, stride and dilation must be >= 1");
    win->in_size *= win->in[d];
    win->out_size *= win->out[d];
    win->k_size *= win->k[d];
  }
  return true;
}

/* Output position o (linear over an output plane) as coordinates. */
static void window_out_coords(const Window *w, int64_t o, int64_t *oc) {
  for (int d = w->nsp - 1; d >= 0; d--) {
    oc[d] = o % w->out[d];
    o /= w->out[d];
  }
}

/* The next kernel tap in row-major order (the last dim fastest). */
static void window_next_tap(const Window *w, int64_t *kc) {
  for (int d = w->nsp - 1; d >= 0; d--) {
    if (++kc[d] < w->k[d]) return;
    kc[d] = 0;
  }
}

/* The input position that tap kc of output position oc reads: its index
 * in an input plane, or -1 in the padding.  *padded (when asked) says
 * whether it lies in the padded input at all: ceil_mode windows reach
 * past it. */
static int64_t window_tap(const Window *w, const int64_t *oc, const int64_t *kc, bool *padded) {
  int64_t at = 0;
  bool inside = true, in_pad = true;
  for (int d = 0; d < w->nsp; d++) {
    int64_t p = oc[d] * w->stride[d] - w->lo[d] + kc[d] * w->dil[d];
    if (p < -w->lo[d] || p >= w->in[d] + w->hi[d]) in_pad = false;
    if (p < 0 || p >= w->in[d]) inside = false;
    at = at * w->in[d] + p;
  }
  if (padded) *padded = in_pad;
  return inside ? at : -1;
}

/* Every tap of output position o's window, in window_next_tap's order:
 * its input plane index, or -1 in the padding.  Computed once per
 * position, not once per channel and tap. */
static void window_taps(const Window *w, int64_t o, int64_t *taps) {
  int64_t oc[MAX_SPATIAL], kc[MAX_SPATIAL] = {0, 0, 0};
  window_out_coords(w, o, oc);
  for (int64_t t = 0; t < w->k_size; t++, window_next_tap(w, kc)) taps[t] = window_tap(w, oc, kc, NULL);
}

/* conv2d and conv3d in layout "nhwc" (any groups): x [N,H,W,C], W
 * [Co,kH,kW,C/groups], out [N,OH,OW,Co].  The terms are added in the order of the nchw loop
 * below (channel, then taps), so a graph and its nhwc rewrite give the
 * same numbers, not merely close ones. */
static bool eval_conv_nhwc(Eval *e, const Node *n, const Window *win, const Tensor *x, const Tensor *w,
                           const Tensor *b, Tensor *out, int64_t groups) {
  int64_t N = x->type.dims[0], C = x->type.dims[x->type.rank - 1], Co = w->type.dims[0];
  int64_t Cg = C / groups, cog = Co / groups;
  bool ints = is_int(x) && is_int(w) && is_int(out);
  const Attr *zpa = ir_attr(n, "zero_point");
  int64_t zp = zpa ? zpa->i : 0;
  int64_t *taps = malloc(sizeof *taps * (size_t)win->k_size);
  if (!taps) return fail(e, "out of memory for %" PRId64 " window taps", win->k_size);
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t o = 0; o < win->out_size; o++) {
      window_taps(win, o, taps);
      for (int64_t co = 0; co < Co; co++) {
        Acc acc = {.ints = ints};
        int64_t c0 = co / cog * Cg; /* the group's first input channel */
        for (int64_t ci = 0; ci < Cg; ci++)
          for (int64_t t = 0; t < win->k_size; t++) {
            int64_t wi = (co * win->k_size + t) * Cg + ci, at = taps[t];
            if (at < 0) {
              if (zp) acc.i = wadd(acc.i, wmul(zp, get_i(w, wi)));
              continue;
            }
            acc_mac(&acc, x, (nb * win->in_size + at) * C + c0 + ci, w, wi);
          }
        if (b) acc_add(&acc, b, co);
        acc_store(&acc, out, (nb * win->out_size + o) * Co + co);
      }
    }
  free(taps);
  return true;
}

/* conv2d and conv3d: each output element sums its window over the
 * channels of its group, in the order (channel, then taps row-major). */
bool eval_conv(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
               Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, &w->type, &out->type, &win)) return false;
  int64_t groups = ir_attr_int(n, "groups");
  const TensorType *xt = &x->type, *wt = &w->type, *ot = &out->type;
  bool nhwc = ir_conv_nhwc(n);
  int cx = nhwc ? xt->rank - 1 : 1;
  int64_t N = xt->dims[0], C = xt->dims[cx], Co = wt->dims[0], Cg = wt->dims[cx];
  if (groups < 1 || C % groups || Co % groups || Cg != C / groups || ot->dims[0] != N || ot->dims[cx] != Co)
    return fail(e, "channels do not fit groups");
  if (nhwc) return eval_conv_nhwc(e, n, &win, x, w, b, out, groups);
  if (b && numel(&b->type) != Co) return fail(e, "bias must have %" PRId64 " elements", Co);
  int64_t cog = Co / groups;
  bool ints = is_int(x) && is_int(w) && is_int(out);
  const Attr *zpa = ir_attr(n, "zero_point");
  int64_t zp = zpa ? zpa->i : 0;
  int64_t *taps = malloc(sizeof *taps * (size_t)win.k_size);
  if (!taps) return fail(e, "out of memory for %" PRId64 " window taps", win.k_size);
  /* f32 (most of what tests evaluate): the same sums in the same order
   * as the generic path, without its per-element dtype switch. */
  bool f32 = x->type.dtype == TY_F32 && w->type.dtype == TY_F32 && !ints;
  const float *xf = x->data, *wf = w->data;
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t o = 0; o < win.out_size; o++) {
      window_taps(&win, o, taps);
      for (int64_t co = 0; co < Co; co++) {
        int64_t g = co / cog;
        Acc acc = {.ints = ints};
        for (int64_t ci = 0; ci < Cg; ci++) {
          int64_t xi = (nb * C + g * Cg + ci) * win.in_size, wi = (co * Cg + ci) * win.k_size;
          if (f32) {
            for (int64_t t = 0; t < win.k_size; t++)
              if (taps[t] >= 0) acc.f += (double)xf[xi + taps[t]] * (double)wf[wi + t];
            continue;
          }
          for (int64_t t = 0; t < win.k_size; t++) {
            if (taps[t] < 0) {
              /* int8 with a zero point: the padding reads it (a real 0). */
              if (zp) acc.i = wadd(acc.i, wmul(zp, get_i(w, wi + t)));
              continue;
            }
            acc_mac(&acc, x, xi + taps[t], w, wi + t);
          }
        }
        if (b) acc_add(&acc, b, co);
        acc_store(&acc, out, (nb * Co + co) * win.out_size + o);
      }
    }
  free(taps);
  return true;
}

/* The input position that tap kc reaches output position oc from
 * through a transposed window (o = i * stride - pad + k * dil, solved for
 * i), as an index in an input plane, or -1 when none does. */
static int64_t transposed_tap(const Window *w, const int64_t *oc, const int64_t *kc) {
  int64_t at = 0;
  for (int d = 0; d < w->nsp; d++) {
    int64_t t = oc[d] + w->lo[d] - kc[d] * w->dil[d];
    if (t < 0 || t % w->stride[d] || t / w->stride[d] >= w->in[d]) return -1;
    at = at * w->in[d] + t / w->stride[d];
  }
  return at;
}

/* Each output element gathers the inputs whose convolution window
 * covers it.  Channels last (layout "nhwc": x [N, spatial, C], W [Co,
 * taps, C/groups]) the same terms in the same order. */
bool eval_conv_transpose(Eval *e, const Node *n, const Tensor *x, const Tensor *w,
                         const Tensor *b, Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, &w->type, &out->type, &win)) return false;
  int64_t groups = ir_attr_int(n, "groups");
  const TensorType *xt = &x->type, *wt = &w->type, *ot = &out->type;
  bool nhwc = ir_nhwc(n);
  int cx = nhwc ? xt->rank - 1 : 1;
  int64_t N = xt->dims[0], C = xt->dims[cx], Co = ot->dims[cx], Cog = groups > 0 ? Co / groups : 0;
  bool fits = nhwc ? wt->dims[0] == Co && groups > 0 && wt->dims[cx] * groups == C
                   : wt->dims[0] == C && Co == wt->dims[1] * groups;
  if (groups < 1 || C % groups || Co % groups || !fits || ot->dims[0] != N)
    return fail(e, "channels do not fit groups");
  if (b && numel(&b->type) != Co) return fail(e, "bias must have %" PRId64 " elements", Co);
  int64_t cig = C / groups;
  bool ints = is_int(x) && is_int(w) && is_int(out);
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t co = 0; co < Co; co++) {
      int64_t g = co / Cog, cw = co % Cog;
      for (int64_t o = 0; o < win.out_size; o++) {
        int64_t oc[MAX_SPATIAL];
        window_out_coords(&win, o, oc);
        Acc acc = {.ints = ints};
        for (int64_t ci = g * cig; ci < (g + 1) * cig; ci++) {
          int64_t kc[MAX_SPATIAL] = {0, 0, 0};
          for (int64_t t = 0; t < win.k_size; t++, window_next_tap(&win, kc)) {
            int64_t at = transposed_tap(&win, oc, kc);
            if (at < 0) continue;
            if (nhwc)
              acc_mac(&acc, x, (nb * win.in_size + at) * C + ci, w, (co * win.k_size + t) * cig + ci - g * cig);
            else
              acc_mac(&acc, x, (nb * C + ci) * win.in_size + at, w, (ci * Cog + cw) * win.k_size + t);
          }
        }
        if (b) acc_add(&acc, b, co);
        acc_store(&acc, out, nhwc ? (nb * win.out_size + o) * Co + co : (nb * Co + co) * win.out_size + o);
      }
    }
  return true;
}

/* PyTorch's source coordinate for output position d of out along an axis
 * of in, as upsample_bilinear2d's area_pixel_compute_source_index. */
double ir_resize_src(int64_t d, int64_t in, int64_t out, bool align) {
  if (align) return out > 1 ? (double)d * (double)(in - 1) / (double)(out - 1) : 0;
  double s = ((double)d + 0.5) * (double)in / (double)out - 0.5;
  return s < 0 ? 0 : s;
}

bool eval_resize(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  const TensorType *xt = &x->type, *ot = &out->type;
  if (xt->rank != 4 || ot->rank != 4) return fail(e, "needs rank-4 x");
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0;
  bool align = ir_attr_int(n, "align_corners") != 0;
  /* NCHW, or layout "nhwc": the image's strides (channel, row, column) */
  bool nhwc = ir_nhwc(n);
  int sx = nhwc ? 1 : 2;
  int64_t N = xt->dims[0], C = xt->dims[nhwc ? 3 : 1], H = xt->dims[sx], W = xt->dims[sx + 1];
  int64_t OH = ot->dims[sx], OW = ot->dims[sx + 1];
  int64_t cs = nhwc ? 1 : H * W, hs = nhwc ? W * C : W, ws = nhwc ? C : 1;
  int64_t ocs = nhwc ? 1 : OH * OW, ohs = nhwc ? OW * C : OW, ows = nhwc ? C : 1;
  for (int64_t b = 0; b < N; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          const int64_t base = b * C * H * W + c * cs, o = b * C * OH * OW + c * ocs + oh * ohs + ow * ows;
          if (!linear) {
            /* A copy: integers through int64 so that i64 stays exact. */
            int64_t xi = base + (oh * H / OH) * hs + (ow * W / OW) * ws;
            if (is_int(x))
              set_i(out, o, get_i(x, xi));
            else
              ir_tensor_set(out, o, ir_tensor_get(x, xi));
            continue;
          }
          double sh = ir_resize_src(oh, H, OH, align), sw = ir_resize_src(ow, W, OW, align);
          int64_t h0 = (int64_t)sh, w0 = (int64_t)sw;
          if (h0 > H - 1) h0 = H - 1;
          if (w0 > W - 1) w0 = W - 1;
          int64_t h1 = h0 < H - 1 ? h0 + 1 : h0, w1 = w0 < W - 1 ? w0 + 1 : w0;
          double lh = sh - (double)h0, lw = sw - (double)w0;
          double v = (1 - lh) * ((1 - lw) * ir_tensor_get(x, base + h0 * hs + w0 * ws) +
                                 lw * ir_tensor_get(x, base + h0 * hs + w1 * ws)) +
                     lh * ((1 - lw) * ir_tensor_get(x, base + h1 * hs + w0 * ws) +
                           lw * ir_tensor_get(x, base + h1 * hs + w1 * ws));
          ir_tensor_set(out, o, v);
        }
  return true;
}

/* ---- grid_sample: onnxruntime's (PyTorch's), in f32 ---- */

typedef struct Sampler {
  const Tensor *x;
  int64_t plane, D, H, W; /* plane: the first element of x[n, c]; D 1 in 2-d */
  bool volume, align, border, reflection;
} Sampler;

/* v folded back into [lo, hi] by the nearer border, as often as needed. */
static float gs_reflect(float v, float lo, float hi) {
  float range = hi - lo;
  if (!(range > 0)) return lo; /* one pixel with align_corners */
  if (!(v < lo) && !(v > hi)) return v;
  float dx = v < lo ? lo - v : v - hi;
  float flips = floorf(dx / range), r = dx - flips * range;
  bool even = flips - 2 * floorf(flips / 2) == 0;
  return (v < lo) == even ? lo + r : hi - r;
}

/* v inside [0, len - 1]; a NaN stays one (and reads 0). */
static float gs_clamp(float v, int64_t len) {
  return v < 0 ? 0 : v > (float)len - 1 ? (float)len - 1 : v;
}

/* The borders beyond which a coordinate of an axis of len pixels is
 * padded. */
static void gs_borders(const Sampler *s, int64_t len, float *lo, float *hi) {
  *lo = s->align ? 0 : -0.5f;
  *hi = s->align ? (float)len - 1 : (float)len - 0.5f;
}

/* A whole-number tap coordinate through padding_mode; *inside false where
 * zeros padding (or a NaN) reads 0. */
static float gs_index(const Sampler *s, float i, int64_t len, bool *inside) {
  float lo, hi;
  gs_borders(s, len, &lo, &hi);
  if (s->border) i = gs_clamp(i, len);
  if (s->reflection) i = truncf(gs_reflect(i, lo, hi));
  *inside = i >= 0 && i < (float)len;
  return i;
}

static float gs_pixel(const Sampler *s, float depth, float row, float col) {
  bool in_d = true, in_r, in_c;
  if (s->volume) depth = gs_index(s, depth, s->D, &in_d);
  row = gs_index(s, row, s->H, &in_r);
  col = gs_index(s, col, s->W, &in_c);
  if (!in_d || !in_r || !in_c) return 0;
  return (float)ir_tensor_get(s->x, s->plane + ((int64_t)depth * s->H + (int64_t)row) * s->W + (int64_t)col);
}

/* The point a normalized grid coordinate g names along an axis of len
 * pixels.  Only the taps read through padding_mode, not the point itself
 * (onnxruntime's; PyTorch's bicubic too). */
static float gs_source(const Sampler *s, float g, int64_t len, bool nearest) {
  float v = s->align ? (g + 1) / 2 * ((float)len - 1) : ((g + 1) * (float)len - 1) / 2;
  return nearest ? nearbyintf(v) : v;
}

/* Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2
 * for a point t in [0, 1) past tap 0. */
static void gs_cubic(float t, float *c) {
  const float A = -0.75f;
  float t1 = t + 1, u = 1 - t, u1 = 2 - t;
  c[0] = ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
  c[3] = ((A * u1 - 5 * A) * u1 + 8 * A) * u1 - 4 * A;
}

/* gz: a volume's depth coordinate (ignored when 2-d). */
static float gs_sample(const Sampler *s, const char *mode, float gx, float gy, float gz) {
  bool nearest = strcmp(mode, "nearest") == 0, volume = s->volume;
  float x = gs_source(s, gx, s->W, nearest), y = gs_source(s, gy, s->H, nearest);
  float z = volume ? gs_source(s, gz, s->D, nearest) : 0;
  if (nearest) return gs_pixel(s, truncf(z), truncf(y), truncf(x));
  float x0 = floorf(x), y0 = floorf(y), z0 = floorf(z), wx[4], wy[4], wz[2] = {1 - (z - z0), z - z0};
  int taps = 2, first = 0;
  if (strcmp(mode, "bicubic") == 0) {
    taps = 4, first = -1;
    gs_cubic(x - x0, wx);
    gs_cubic(y - y0, wy);
  } else {
    wx[0] = 1 - (x - x0), wx[1] = x - x0;
    wy[0] = 1 - (y - y0), wy[1] = y - y0;
  }
  /* Along each row first, then down the rows, then across the depth
   * taps, as the reference. */
  float v = 0;
  for (int d = 0; d < (volume ? 2 : 1); d++) {
    float plane = 0;
    for (int i = 0; i < taps; i++) {
      float row = 0;
      for (int j = 0; j < taps; j++)
        row += wx[j] * gs_pixel(s, z0 + (float)d, y0 + (float)(first + i), x0 + (float)(first + j));
      plane += wy[i] * row;
    }
    v += volume ? wz[d] * plane : plane;
  }
  return v;
}

bool eval_grid_sample(const Node *n, const Tensor *x, const Tensor *grid, Tensor *out) {
  const char *mode = ir_attr_str(n, "mode"), *pad = ir_attr_str(n, "padding_mode");
  /* [N, C, H, W] or a volume [N, C, D, H, W] (grid [..., 3]: x, y, z) */
  int sp = x->type.rank - 2;
  Sampler s = {.x = x,
               .volume = sp == 3,
               .D = sp == 3 ? x->type.dims[2] : 1,
               .H = x->type.dims[sp == 3 ? 3 : 2],
               .W = x->type.dims[sp == 3 ? 4 : 3],
               .align = ir_attr_int(n, "align_corners") != 0,
               .border = strcmp(pad, "border") == 0,
               .reflection = strcmp(pad, "reflection") == 0};
  int64_t N = x->type.dims[0], C = x->type.dims[1];
  int64_t points = 1;
  for (int d = 2; d < out->type.rank; d++) points *= out->type.dims[d];
  for (int64_t b = 0; b < N; b++)
    for (int64_t c = 0; c < C; c++) {
      s.plane = (b * C + c) * s.D * s.H * s.W;
      for (int64_t p = 0; p < points; p++) {
        int64_t g = (b * points + p) * sp;
        float gx = (float)ir_tensor_get(grid, g), gy = (float)ir_tensor_get(grid, g + 1);
        float gz = sp == 3 ? (float)ir_tensor_get(grid, g + 2) : 0;
        ir_tensor_set(out, (b * C + c) * points + p, gs_sample(&s, mode, gx, gy, gz));
      }
    }
  return true;
}

bool eval_pool(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, NULL, &out->type, &win)) return false;
  bool is_max = n->op == OP_MAXPOOL2D || n->op == OP_MAXPOOL3D;
  bool include_pad = !is_max && ir_attr_int(n, "count_include_pad");
  /* A plane (image nb, channel ch) at x[xb + at * step], out[ob + o * step]. */
  bool nhwc = ir_nhwc(n);
  int64_t N = x->type.dims[0], C = x->type.dims[nhwc ? x->type.rank - 1 : 1], step = nhwc ? C : 1;
  bool ints = is_int(x);
  for (int64_t c = 0; c < N * C; c++) {
    int64_t nb = c / C, ch = c % C;
    int64_t xb = nhwc ? nb * win.in_size * C + ch : c * win.in_size;
    int64_t ob = nhwc ? nb * win.out_size * C + ch : c * win.out_size;
    for (int64_t o = 0; o < win.out_size; o++) {
      int64_t oc[MAX_SPATIAL], kc[MAX_SPATIAL] = {0, 0, 0};
      window_out_coords(&win, o, oc);
      double mf = -INFINITY, sf = 0;
      int64_t mi = INT64_MIN, si = 0;
      int64_t real = 0, padded = 0;
      for (int64_t t = 0; t < win.k_size; t++, window_next_tap(&win, kc)) {
        /* Positions past the padded border (ceil_mode) are not in the
         * window at all. */
        bool in_pad;
        int64_t at = window_tap(&win, oc, kc, &in_pad);
        padded += in_pad;
        if (at < 0) continue;
        int64_t i = xb + at * step;
        real++;
        if (ints) {
          int64_t v = get_i(x, i);
          mi = v > mi ? v : mi;
          si = wadd(si, v);
        } else {
          double v = ir_tensor_get(x, i);
          mf = (isnan(v) || v > mf) && !isnan(mf) ? v : mf;
          sf += v;
        }
      }
      int64_t at = ob + o * step;
      int64_t div = include_pad ? padded : real;
      if (is_max) {
        if (ints)
          set_i(out, at, mi);
        else
          ir_tensor_set(out, at, mf);
      } else if (ints) {
        set_i(out, at, div ? si / div : 0);
      } else {
        ir_tensor_set(out, at, div ? sf / (double)div : 0.0);
      }
    }
  }
  return true;
}

/* ---- recurrent layers ---- */

/* acc[r] += sum_c W[r, c] * v[c] for a row-major W [rows, cols]. */
static void gemv_add(double *acc, const Tensor *w, int64_t rows, int64_t cols, const double *v) {
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += ir_tensor_get(w, r * cols + c) * v[c];
    acc[r] += s;
  }
}

/* PyTorch nn.LSTM / nn.GRU.  Each layer reads the previous one's output
 * sequence, kept in double; only the results are rounded. */
bool eval_rnn(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *outs) {
  bool lstm = n->op == OP_LSTM;
  int64_t H = ir_attr_int(n, "hidden"), layers = ir_attr_int(n, "layers");
  int dirs = ir_attr_int(n, "bidirectional") ? 2 : 1;
  bool bf = ir_attr_int(n, "batch_first") != 0, bias = ir_attr_int(n, "bias") != 0;
  int64_t G = lstm ? 4 : 3; /* gates */
  const Tensor *x = in[0];
  if (x->type.rank != 3) return fail(e, "x must be rank 3");
  int per = bias ? 4 : 2;
  if (layers < 1 || H < 1 || n_in != 1 + layers * dirs * per)
    return fail(e, "expected %" PRId64 " operands, got %d", 1 + layers * dirs * per, n_in);
  int64_t N = bf ? x->type.dims[0] : x->type.dims[1], T = bf ? x->type.dims[1] : x->type.dims[0];
  int64_t I = x->type.dims[2];
  /* seq[t][b][f]: the current layer's input sequence. */
  int64_t feat = I;
  size_t maxfeat = (size_t)(I > dirs * H ? I : dirs * H);
  double *seq = calloc((size_t)(T * N) * maxfeat + 1, sizeof(double));
  double *next = calloc((size_t)(T * N * dirs * H) + 1, sizeof(double));
  double *h = calloc((size_t)H, sizeof(double)), *c = calloc((size_t)H, sizeof(double));
  double *gi = calloc((size_t)(G * H), sizeof(double)), *gh = calloc((size_t)(G * H), sizeof(double));
  double *xv = calloc(maxfeat, sizeof(double));
  bool ok = seq && next && h && c && gi && gh && xv;
  if (!ok) fail(e, "out of memory");
  for (int64_t t = 0; ok && t < T; t++)
    for (int64_t b = 0; b < N; b++)
      for (int64_t f = 0; f < I; f++)
        seq[(t * N + b) * feat + f] = ir_tensor_get(x, (bf ? b * T + t : t * N + b) * I + f);
  for (int64_t l = 0; ok && l < layers; l++) {
    for (int d = 0; ok && d < dirs; d++) {
      Tensor *const *wt = in + 1 + (l * dirs + d) * per;
      const Tensor *wih = wt[0], *whh = wt[1], *bih = bias ? wt[2] : NULL, *bhh = bias ? wt[3] : NULL;
      if (numel(&wih->type) != G * H * feat || numel(&whh->type) != G * H * H ||
          (bias && (numel(&bih->type) != G * H || numel(&bhh->type) != G * H))) {
        ok = fail(e, "layer %" PRId64 " direction %d: weights have the wrong size", l, d);
        break;
      }
      for (int64_t b = 0; b < N; b++) {
        memset(h, 0, sizeof(double) * (size_t)H);
        memset(c, 0, sizeof(double) * (size_t)H);
        for (int64_t s = 0; s < T; s++) {
          int64_t t = d == 0 ? s : T - 1 - s;
          for (int64_t f = 0; f < feat; f++) xv[f] = seq[(t * N + b) * feat + f];
          for (int64_t r = 0; r < G * H; r++) {
            gi[r] = bias ? ir_tensor_get(bih, r) : 0;
            gh[r] = bias ? ir_tensor_get(bhh, r) : 0;
          }
          gemv_add(gi, wih, G * H, feat, xv);
          gemv_add(gh, whh, G * H, H, h);
          for (int64_t j = 0; j < H; j++) {
            if (lstm) {
              double ig = sigmoid(gi[j] + gh[j]);
              double fg = sigmoid(gi[H + j] + gh[H + j]);
              double gg = tanh(gi[2 * H + j] + gh[2 * H + j]);
              double og = sigmoid(gi[3 * H + j] + gh[3 * H + j]);
              c[j] = fg * c[j] + ig * gg;
              gi[j] = og * tanh(c[j]); /* new h, kept aside until all j are done */
            } else {
              double r = sigmoid(gi[j] + gh[j]);
              double z = sigmoid(gi[H + j] + gh[H + j]);
              double nn = tanh(gi[2 * H + j] + r * gh[2 * H + j]);
              gi[j] = (1 - z) * nn + z * h[j];
            }
          }
          for (int64_t j = 0; j < H; j++) {
            h[j] = gi[j];
            next[(t * N + b) * dirs * H + d * H + j] = h[j];
          }
        }
        for (int64_t j = 0; j < H; j++) {
          int64_t o = ((l * dirs + d) * N + b) * H + j;
          ir_tensor_set(&outs[1], o, h[j]);
          if (lstm) ir_tensor_set(&outs[2], o, c[j]);
        }
      }
    }
    feat = dirs * H;
    if (ok) memcpy(seq, next, sizeof(double) * (size_t)(T * N * feat));
  }
  for (int64_t t = 0; ok && t < T; t++)
    for (int64_t b = 0; b < N; b++)
      for (int64_t f = 0; f < feat; f++)
        ir_tensor_set(&outs[0], (bf ? b * T + t : t * N + b) * feat + f, seq[(t * N + b) * feat + f]);
  free(seq), free(next), free(h), free(c), free(gi), free(gh), free(xv);
  return ok;
}

/* lstm_bptt (ops.def), in double: c rescanned from p, then the steps
 * walked backward with dh and dc per batch row. */
bool eval_lstm_bptt(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *p = in[0], *ph = in[1], *w = in[2], *dy = in[3], *dhn = in[4], *dcn = in[5];
  bool rev = ir_attr_int(n, "reverse") != 0, bf = ir_attr_int(n, "batch_first") != 0;
  int64_t T = p->type.dims[bf ? 1 : 0], N = p->type.dims[bf ? 0 : 1], H = p->type.dims[2] / 4;
  double *c = calloc((size_t)(T * N * H) + 1, sizeof(double)), *dh = calloc((size_t)(N * H) + 1, sizeof(double));
  double *dc = calloc((size_t)(N * H) + 1, sizeof(double)), *dp = calloc((size_t)(T * N * 4 * H) + 1, sizeof(double));
  if (!c || !dh || !dc || !dp) {
    free(c), free(dh), free(dc), free(dp);
    return fail(e, "out of memory");
  }
/* the row of step t and batch row b in p, ph, dy and dp */
#define ROW(t, b) (bf ? (b) * T + (t) : (t) * N + (b))
#define P(t, b, r) (ir_tensor_get(p, ROW(t, b) * 4 * H + (r)) + ir_tensor_get(ph, ROW(t, b) * 4 * H + (r)))
  for (int64_t s = 0; s < T; s++) {
    int64_t t = rev ? T - 1 - s : s, tp = rev ? t + 1 : t - 1;
    for (int64_t b = 0; b < N; b++)
      for (int64_t j = 0; j < H; j++) {
        double prev = s ? c[(tp * N + b) * H + j] : 0;
        c[(t * N + b) * H + j] = sigmoid(P(t, b, H + j)) * prev + sigmoid(P(t, b, j)) * tanh(P(t, b, 2 * H + j));
      }
  }
  for (int64_t i = 0; i < N * H; i++) dh[i] = ir_tensor_get(dhn, i), dc[i] = ir_tensor_get(dcn, i);
  for (int64_t s = T - 1; s >= 0; s--) {
    int64_t t = rev ? T - 1 - s : s, tp = rev ? t + 1 : t - 1;
    for (int64_t b = 0; b < N; b++)
      for (int64_t j = 0; j < H; j++) {
        int64_t at = b * H + j;
        double ig = sigmoid(P(t, b, j)), fg = sigmoid(P(t, b, H + j));
        double gg = tanh(P(t, b, 2 * H + j)), og = sigmoid(P(t, b, 3 * H + j));
        double ct = tanh(c[(t * N + b) * H + j]), prev = s ? c[(tp * N + b) * H + j] : 0;
        double h = dh[at] + ir_tensor_get(dy, ROW(t, b) * H + j);
        double d = dc[at] + h * og * (1 - ct * ct);
        double *row = dp + ROW(t, b) * 4 * H;
        row[j] = d * gg * ig * (1 - ig);
        row[H + j] = d * prev * fg * (1 - fg);
        row[2 * H + j] = d * ig * (1 - gg * gg);
        row[3 * H + j] = h * ct * og * (1 - og);
        dc[at] = d * fg;
      }
    /* dh_{t-1} = dp_t W_hh */
    for (int64_t b = 0; b < N; b++)
      for (int64_t j = 0; j < H; j++) {
        double sum = 0;
        for (int64_t r = 0; r < 4 * H; r++) sum += dp[ROW(t, b) * 4 * H + r] * ir_tensor_get(w, r * H + j);
        dh[b * H + j] = sum;
      }
  }
#undef P
#undef ROW
  for (int64_t i = 0; i < T * N * 4 * H; i++) ir_tensor_set(out, i, dp[i]);
  free(c), free(dh), free(dc), free(dp);
  return true;
}

/* gru_bptt (ops.def), in double: the steps walked backward with the
 * carried dh per batch row, h_{t-1} read from hprev. */
bool eval_gru_bptt(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *px = in[0], *ph = in[1], *w = in[2], *dy = in[3], *dhn = in[4], *hprev = in[5];
  bool rev = ir_attr_int(n, "reverse") != 0, bf = ir_attr_int(n, "batch_first") != 0;
  int64_t T = px->type.dims[bf ? 1 : 0], N = px->type.dims[bf ? 0 : 1], H = px->type.dims[2] / 3;
  double *dh = calloc((size_t)(N * H) + 1, sizeof(double)), *dpx = calloc((size_t)(T * N * 3 * H) + 1, sizeof(double));
  double *dph = calloc((size_t)(T * N * 3 * H) + 1, sizeof(double));
  if (!dh || !dpx || !dph) {
    free(dh), free(dpx), free(dph);
    return fail(e, "out of memory");
  }
#define ROW(t, b) (bf ? (b) * T + (t) : (t) * N + (b))
#define X(t, b, r) ir_tensor_get(px, ROW(t, b) * 3 * H + (r))
#define HH(t, b, r) ir_tensor_get(ph, ROW(t, b) * 3 * H + (r))
  for (int64_t i = 0; i < N * H; i++) dh[i] = ir_tensor_get(dhn, i);
  for (int64_t s = T - 1; s >= 0; s--) {
    int64_t t = rev ? T - 1 - s : s;
    for (int64_t b = 0; b < N; b++)
      for (int64_t j = 0; j < H; j++) {
        double rg = sigmoid(X(t, b, j) + HH(t, b, j)), zg = sigmoid(X(t, b, H + j) + HH(t, b, H + j));
        double hn = HH(t, b, 2 * H + j), ng = tanh(X(t, b, 2 * H + j) + rg * hn);
        double h = dh[b * H + j] + ir_tensor_get(dy, ROW(t, b) * H + j);
        double dn = h * (1 - zg) * (1 - ng * ng);
        double dr = dn * hn * rg * (1 - rg);
        double dz = h * (ir_tensor_get(hprev, ROW(t, b) * H + j) - ng) * zg * (1 - zg);
        double *xr = dpx + ROW(t, b) * 3 * H, *hr = dph + ROW(t, b) * 3 * H;
        xr[j] = hr[j] = dr;
        xr[H + j] = hr[H + j] = dz;
        xr[2 * H + j] = dn;
        hr[2 * H + j] = dn * rg;
        dh[b * H + j] = h * zg; /* the path through h_t = ... + z h_{t-1} */
      }
    /* dh_{t-1} += dph_t W_hh */
    for (int64_t b = 0; b < N; b++)
      for (int64_t j = 0; j < H; j++) {
        double sum = 0;
        for (int64_t r = 0; r < 3 * H; r++) sum += dph[ROW(t, b) * 3 * H + r] * ir_tensor_get(w, r * H + j);
        dh[b * H + j] += sum;
      }
  }
#undef X
#undef HH
#undef ROW
  for (int64_t i = 0; i < T * N * 3 * H; i++) ir_tensor_set(&out[0], i, dpx[i]), ir_tensor_set(&out[1], i, dph[i]);
  free(dh), free(dpx), free(dph);
  return true;
}
