/* ONNX Resize, Upsample and GridSample: takes the node's operands and
 * attributes, returns gathers and weighted sums by tables computed at
 * import (Resize), or the IR's grid_sample. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- Resize and Upsample: separable, by tables known at import ----
 *
 * Shapes are static, so where every output element reads from along an
 * axis is known here: each resized axis becomes a gather of source
 * indices and, where an output blends several of them, a weighted sum of
 * its k taps (the gather seen as [.., out, k, ..], times the weights,
 * reduce_sum over k).  The tables follow ONNX's formulas in double
 * precision, as its reference computes them, so every
 * mode, coordinate transformation, nearest_mode, cubic_coeff_a,
 * exclude_outside and antialias is the same few ops. */

typedef enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC } ResizeMode;

typedef struct Resize {
  ResizeMode mode;
  const char *coord;   /* coordinate_transformation_mode */
  const char *nearest; /* nearest_mode; NULL: Resize-10's and Upsample's rule */
  double cubic_a, extrapolation;
  bool exclude_outside, antialias;
} Resize;

/* One axis: its lengths, the scale ONNX's formulas divide by as num /
 * den (the given one over 1, or a size over its input length, so that
 * dividing by it rounds once), the resized length as those formulas see
 * it (scale * in: a fraction when the scale gives one, as in ONNX's
 * reference) and tf_crop_and_resize's region of interest. */
typedef struct ResizeAxis {
  int64_t in, out;
  double num, den, scale, len, roi_lo, roi_hi;
} ResizeAxis;

/* Output o of an axis reads idx[o * k + t] with weight w[o * k + t]
 * (t < k), or is the extrapolation value where outside[o]. */
typedef struct ResizeTable {
  int k;
  int64_t *idx;
  double *w;
  bool *outside;
  bool any_outside;
} ResizeTable;

static const char *const resize_coords[] = {
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize"};
static const char *const resize_nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                                   "ceil"};

static bool one_of(const char *s, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return true;
  return false;
}

/* Where output coordinate o lands in the input; *outside when
 * tf_crop_and_resize puts it beyond the input's ends. */
static double resize_source(const Resize *r, const ResizeAxis *a, int64_t o, bool *outside) {
  double x = (double)o, in = (double)a->in, len = a->len;
  double centre = (x + 0.5) * a->den / a->num; /* (x + 0.5) / scale */
  const char *m = r->coord;
  *outside = false;
  if (strcmp(m, "asymmetric") == 0) return x * a->den / a->num;
  if (strcmp(m, "align_corners") == 0) return len == 1 ? 0 : x * (in - 1) / (len - 1);
  /* length_resized > 1 as ONNX's text and onnxruntime say (the reference
   * takes -0.5 for one output, the same pixels but for cubic). */
  if (strcmp(m, "pytorch_half_pixel") == 0) return a->out > 1 ? centre - 0.5 : 0;
  if (strcmp(m, "tf_half_pixel_for_nn") == 0) return centre;
  if (strcmp(m, "half_pixel_symmetric") == 0) return in / 2 * (1 - (double)a->out / len) + centre - 0.5;
  if (strcmp(m, "tf_crop_and_resize") == 0) {
    double span = a->roi_hi - a->roi_lo;
    double src = a->roi_lo * (in - 1) + (len == 1 ? span * (in - 1) / 2 : x * span * (in - 1) / (len - 1));
    *outside = src < 0 || src > in - 1;
    return src;
  }
  return centre - 0.5; /* half_pixel */
}

/* The source nearest_mode picks for x: rounding with ties as the mode
 * says, or floor / ceil.  Resize-10 and Upsample have no nearest_mode;
 * onnxruntime floors upscaling axes and takes the ceiling downscaling. */
static int64_t resize_nearest(const Resize *r, const ResizeAxis *a, double x) {
  const char *m = r->nearest ? r->nearest : a->scale < 1 ? "ceil" : "floor";
  double f = floor(x);
  if (strcmp(m, "floor") == 0) return (int64_t)f;
  if (strcmp(m, "ceil") == 0) return (int64_t)ceil(x);
  if (x - f == 0.5) return (int64_t)(strcmp(m, "round_prefer_ceil") == 0 ? f + 1 : f);
  return (int64_t)(x - f < 0.5 ? f : f + 1);
}

/* The interpolation kernel at distance t in input pixels: a tent, or
 * Keys' cubic convolution with a = cubic_coeff_a. */
static double resize_weight(const Resize *r, double t) {
  t = fabs(t);
  if (r->mode == RZ_LINEAR) return t < 1 ? 1 - t : 0;
  double A = r->cubic_a;
  if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
  if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
  return 0;
}

/* How wide the kernel is when antialias stretches it to 1 / scale. */
static double resize_stretch(const Resize *r, const ResizeAxis *a) {
  return r->antialias && a->scale < 1 ? a->scale : 1;
}

static double resize_taps(const Resize *r, const ResizeAxis *a) {
  if (r->mode == RZ_NEAREST) return 1;
  double half = r->mode == RZ_LINEAR ? 1 : 2, s = resize_stretch(r, a);
  return s < 1 ? 2 - 2 * (floor(-half / s) + 1) : 2 * half;
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* Row o of the table: ONNX takes the k taps nearest to x, the left ones
 * first, so that x lies in (0, 1] past tap k/2 - 1; out-of-range taps read
 * the edge (or, with exclude_outside, weigh nothing, the rest scaled back
 * to a sum of 1, as antialias does always). */
static void resize_row(const Resize *r, const ResizeAxis *a, double x, int k, int64_t *idx, double *w) {
  if (r->mode == RZ_NEAREST) {
    idx[0] = clamp_index(resize_nearest(r, a, x), a->in);
    w[0] = 1;
    return;
  }
  double base = floor(x), frac = x - base, s = resize_stretch(r, a), sum = 0;
  if (frac == 0) base -= 1, frac = 1;
  for (int t = 0; t < k; t++) {
    int offset = 1 - k / 2 + t;
    int64_t at = (int64_t)base + offset;
    w[t] = resize_weight(r, s * ((double)offset - frac));
    if (r->exclude_outside && (at < 0 || at >= a->in)) w[t] = 0;
    idx[t] = clamp_index(at, a->in);
    sum += w[t];
  }
  if ((r->antialias || r->exclude_outside) && sum != 0)
    for (int t = 0; t < k; t++) w[t] /= sum;
}

/* Taps that weigh nothing are dropped where that leaves one of weight 1
 * in every row: the axis is then a plain gather. */
static void resize_compact(ResizeTable *t, int64_t out) {
  int k = t->k;
  int64_t *one = malloc(sizeof *one * (size_t)out);
  if (!one) return;
  for (int64_t o = 0; o < out; o++) {
    int found = -1;
    for (int j = 0; j < k; j++) {
      double w = t->w[o * k + j];
      if (w == 0) continue;
      if (w != 1 || found >= 0) {
        free(one);
        return;
      }
      found = j;
    }
    if (found < 0) {
      free(one);
      return;
    }
    one[o] = t->idx[o * k + found];
  }
  for (int64_t o = 0; o < out; o++) t->idx[o] = one[o], t->w[o] = 1;
  t->k = 1;
  free(one);
}

static bool resize_table(Imp *im, const Resize *r, const ResizeAxis *a, ResizeTable *t) {
  double taps = resize_taps(r, a);
  if (taps * (double)a->out > (double)im->fold_max)
    return ox_bad(im, "a table of %" PRId64 " x %.0f taps is larger than dlcc takes", a->out, taps);
  t->k = (int)taps;
  size_t n = (size_t)a->out * (size_t)t->k;
  t->idx = malloc(sizeof *t->idx * n);
  t->w = malloc(sizeof *t->w * n);
  t->outside = malloc(sizeof *t->outside * (size_t)a->out);
  t->any_outside = false;
  if (!t->idx || !t->w || !t->outside) return ox_bad(im, "out of memory for a resize table");
  for (int64_t o = 0; o < a->out; o++) {
    double x = resize_source(r, a, o, &t->outside[o]);
    if (!(fabs(x) < 1e15)) x = 0; /* a wild roi: outside anyway, and no overflow */
    t->any_outside |= t->outside[o];
    resize_row(r, a, x, t->k, t->idx + o * t->k, t->w + o * t->k);
  }
  if (t->k > 1) resize_compact(t, a->out);
  return true;
}

static void resize_table_free(ResizeTable *t) {
  free(t->idx);
  free(t->w);
  free(t->outside);
}

static bool resize_is_identity(const ResizeTable *t, const ResizeAxis *a) {
  if (t->k != 1 || a->out != a->in || t->any_outside) return false;
  for (int64_t o = 0; o < a->out; o++)
    if (t->idx[o] != o) return false;
  return true;
}

/* Axis d of y through table t: a gather of its sources; for k > 1 the
 * gather seen as [before, out, k, after], times the weights [1, out, k,
 * 1], summed over k; then the extrapolation value where outside. */
static Val *resize_apply(Imp *im, Val *y, int d, const ResizeTable *t, int64_t out, double extrapolation) {
  int r = y->type.rank;
  int64_t before = 1, after = 1, n = out * t->k;
  for (int i = 0; i < r; i++) {
    if (i < d) before *= y->type.dims[i];
    if (i > d) after *= y->type.dims[i];
  }
  TensorType it = ir_type_make(TY_I64, 1, &n);
  Val *idx = ox_known_new(im, &it);
  memcpy(idx->k->data, t->idx, sizeof *t->idx * (size_t)n);
  Val *g = ox_gather(im, y, idx, d);
  if (g && t->k > 1) {
    int64_t view[4] = {before, out, t->k, after}, wd[4] = {1, out, t->k, 1}, sum_axis = 2;
    TensorType wt = ir_type_make(y->type.dtype, 4, wd);
    Val *w = ox_known_new(im, &wt);
    for (int64_t i = 0; i < n; i++) ir_tensor_set(w->k, i, t->w[i]);
    int64_t dims[DL_MAX_RANK];
    memcpy(dims, y->type.dims, sizeof dims);
    dims[d] = out;
    Val *blend =
        ox_reduce(im, OP_REDUCE_SUM, ox_op2(im, OP_MUL, ox_reshape(im, g, 4, view), w), 1, &sum_axis, false);
    g = ox_reshape(im, blend, r, dims);
  }
  if (g && t->any_outside) {
    int64_t md[DL_MAX_RANK];
    for (int i = 0; i < r; i++) md[i] = i == d ? out : 1;
    TensorType mt = ir_type_make(TY_BOOL, r, md);
    Val *mask = ox_known_new(im, &mt);
    for (int64_t o = 0; o < out; o++) ir_tensor_set(mask->k, o, t->outside[o]);
    g = ox_where(im, mask, ox_scalar(im, extrapolation, y->type.dtype), g);
  }
  return g;
}

/* A Val the importer may treat as not given: absent, or empty. */
static Val *given(Val *v) { return v && !ox_is_empty(v) ? v : NULL; }

static bool resize_attrs(Imp *im, bool v10, Resize *r) {
  const char *mode, *nearest;
  int64_t exclude, antialias;
  if (!ox_attr_str(im, "mode", "nearest", &mode) ||
      !ox_attr_str(im, "coordinate_transformation_mode", v10 ? "asymmetric" : "half_pixel", &r->coord) ||
      !ox_attr_str(im, "nearest_mode", NULL, &nearest) ||
      !ox_attr_float(im, "cubic_coeff_a", -0.75, &r->cubic_a) ||
      !ox_attr_int(im, "exclude_outside", 0, &exclude) ||
      !ox_attr_float(im, "extrapolation_value", 0, &r->extrapolation) ||
      !ox_attr_int(im, "antialias", 0, &antialias))
    return false;
  if (strcmp(mode, "nearest") == 0)
    r->mode = RZ_NEAREST;
  else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0) /* Upsample-1's name */
    r->mode = RZ_LINEAR;
  else if (strcmp(mode, "cubic") == 0)
    r->mode = RZ_CUBIC;
  else
    return ox_bad(im, "mode='%s' is not one of ONNX's (nearest, linear, cubic)", mode);
  if (!one_of(r->coord, resize_coords, ARRAY_LEN(resize_coords)))
    return ox_bad(im,
                  "coordinate_transformation_mode='%s' is not one of ONNX's (half_pixel, "
                  "half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
                  "tf_half_pixel_for_nn, tf_crop_and_resize)",
                  r->coord);
  if (nearest && !one_of(nearest, resize_nearest_modes, ARRAY_LEN(resize_nearest_modes)))
    return ox_bad(im,
                  "nearest_mode='%s' is not one of ONNX's (round_prefer_floor, round_prefer_ceil, "
                  "floor, ceil)",
                  nearest);
  r->nearest = nearest ? nearest : v10 ? NULL : "round_prefer_floor";
  r->exclude_outside = exclude != 0;
  /* Nearest has no kernel to widen: antialias changes nothing there. */
  r->antialias = antialias != 0 && r->mode != RZ_NEAREST;
  return true;
}

/* Which axes the scales, sizes and roi name (opset 18's axes). */
static bool resize_axis_list(Imp *im, int rank, int *k, int *axes) {
  int n;
  const int64_t *v;
  if (!ox_attr_ints(im, "axes", &n, &v)) return false;
  if (n < 0) {
    for (int i = 0; i < rank; i++) axes[i] = i;
    *k = rank;
    return true;
  }
  bool seen[DL_MAX_RANK] = {false};
  if (n > rank) return ox_bad(im, "'axes' names %d axes of a rank-%d input", n, rank);
  for (int i = 0; i < n; i++) {
    if (!ox_norm_axis(im, v[i], rank, &axes[i])) return false;
    if (seen[axes[i]]) return ox_bad(im, "axis %" PRId64 " is named twice in 'axes'", v[i]);
    seen[axes[i]] = true;
  }
  *k = n;
  return true;
}

static bool resize_by_scales(Imp *im, const double *scale, int k, const int *axes, ResizeAxis *ax) {
  for (int i = 0; i < k; i++) {
    ResizeAxis *a = &ax[axes[i]];
    double s = scale[i], len = s * (double)a->in;
    if (!(s > 0) || !isfinite(s))
      return ox_bad(im, "scale %g on dim %d is not a positive number", s, axes[i]);
    if (!(len < (double)DL_MAX_ELEMS))
      return ox_bad(im, "scale %g on dim %d gives too large an output", s, axes[i]);
    a->num = s, a->den = 1, a->scale = s, a->len = len, a->out = (int64_t)floor(len);
    if (a->out < 1)
      return ox_bad(im, "scale %g on dim %d of %" PRId64 " gives an empty output (dlcc has no empty tensors)",
                    s, axes[i], a->in);
  }
  return true;
}

/* Sizes, stretched or (keep_aspect_ratio_policy) scaled alike on all the
 * axes by the smallest or largest ratio, rounded half up. */
static bool resize_by_sizes(Imp *im, const int64_t *size, int k, const int *axes, const char *policy,
                            ResizeAxis *ax) {
  bool stretch = strcmp(policy, "stretch") == 0, larger = strcmp(policy, "not_smaller") == 0;
  if (!stretch && !larger && strcmp(policy, "not_larger") != 0)
    return ox_bad(im, "keep_aspect_ratio_policy='%s' is not one of ONNX's (stretch, not_larger, not_smaller)",
                  policy);
  int pick = 0;
  for (int i = 0; i < k; i++) {
    if (size[i] < 1 || size[i] > DL_MAX_ELEMS)
      return ox_bad(im, "size %" PRId64 " on dim %d is not supported (dlcc has no empty tensors)", size[i],
                    axes[i]);
    /* size[i] / in[i] against size[pick] / in[pick], exactly */
    double here = (double)size[i] * (double)ax[axes[pick]].in;
    double there = (double)size[pick] * (double)ax[axes[i]].in;
    if (larger ? here > there : here < there) pick = i;
  }
  for (int i = 0; i < k; i++) {
    ResizeAxis *a = &ax[axes[i]];
    int by = stretch ? i : pick;
    a->num = (double)size[by], a->den = (double)ax[axes[by]].in, a->scale = a->num / a->den;
    if (stretch) {
      a->out = size[i], a->len = (double)size[i];
      continue;
    }
    a->len = a->num * (double)a->in / a->den;
    if (!(a->len < (double)DL_MAX_ELEMS))
      return ox_bad(im, "keep_aspect_ratio_policy gives dim %d too large an output", axes[i]);
    a->out = (int64_t)(a->len + 0.5);
    if (a->out < 1) return ox_bad(im, "keep_aspect_ratio_policy gives dim %d an empty output", axes[i]);
  }
  return true;
}

/* Each axis's lengths, scale and roi from the scales or the sizes (an
 * attribute for Upsample-7, input 1 for Upsample-9 and Resize-10, inputs
 * 2 and 3 from Resize-11 on; an empty one counts as not given). */
static bool resize_geometry(Imp *im, ONode *n, bool upsample, bool v10, const Resize *r, ResizeAxis *ax) {
  const Val *x = n->in[0];
  int rank = x->type.rank, k = 0, axes[DL_MAX_RANK];
  const char *policy;
  if (!resize_axis_list(im, rank, &k, axes) ||
      !ox_attr_str(im, "keep_aspect_ratio_policy", "stretch", &policy))
    return false;
  for (int d = 0; d < rank; d++)
    ax[d] = (ResizeAxis){x->type.dims[d], x->type.dims[d], 1, 1, 1, (double)x->type.dims[d], 0, 1};
  Val *roi = v10 ? NULL : given(ox_in_opt(n, 1)), *sv = given(ox_in_opt(n, v10 ? 1 : 2));
  Val *zv = v10 ? NULL : given(ox_in_opt(n, 3));
  double scale[DL_MAX_RANK];
  if (sv && zv) return ox_bad(im, "both scales and sizes are given (ONNX allows one)");
  if (sv) {
    const Tensor *t = ox_need_const(im, sv, "the scales");
    if (!t) return false;
    if (ir_type_numel(&t->type) != k) return ox_bad(im, "the scales need %d values, one per axis", k);
    for (int i = 0; i < k; i++) scale[i] = ir_tensor_get(t, i);
  } else if (upsample && ox_in_opt(n, 1) == NULL) {
    const Onnx__AttributeProto *a = ox_find_attr(im, "scales");
    if (!a || (int)a->n_floats != k) return ox_bad(im, "the scales need %d values, one per axis", k);
    for (int i = 0; i < k; i++) scale[i] = a->floats[i];
  } else if (zv) {
    int64_t size[64];
    int got;
    if (!ox_const_ints(im, zv, "the sizes", &got, size)) return false;
    if (got != k) return ox_bad(im, "the sizes need %d values, one per axis", k);
    if (!resize_by_sizes(im, size, k, axes, policy, ax)) return false;
  } else {
    return ox_bad(im, "neither scales nor sizes are given");
  }
  if (!zv && !resize_by_scales(im, scale, k, axes, ax)) return false;
  if (roi && strcmp(r->coord, "tf_crop_and_resize") == 0) {
    const Tensor *t = ox_need_const(im, roi, "the roi");
    if (!t) return false;
    if (ir_type_numel(&t->type) != 2 * k)
      return ox_bad(im, "the roi needs %d values, starts then ends", 2 * k);
    for (int i = 0; i < k; i++) {
      ax[axes[i]].roi_lo = ir_tensor_get(t, i);
      ax[axes[i]].roi_hi = ir_tensor_get(t, k + i);
    }
  }
  return true;
}

/* Linear and cubic blend in f32 for integer inputs, then saturate and
 * truncate back (onnxruntime truncates). */
static Val *resize_to_dtype(Imp *im, Val *y, DType dt) {
  if (!y || y->type.dtype == dt) return y;
  double lo = dt == TY_U8 ? 0 : dt == TY_I8 ? -128 : dt == TY_I32 ? -2147483648.0 : -9.2e18;
  double hi = dt == TY_U8 ? 255 : dt == TY_I8 ? 127 : dt == TY_I32 ? 2147483647.0 : 9.2e18;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &y);
  ir_set_float(im->g, c, "min", lo);
  ir_set_float(im->g, c, "max", hi);
  return ox_cast(im, ox_emit1(im, &e), dt);
}

bool ox_op_resize(Imp *im, ONode *n) {
  bool upsample = strcmp(im->np->op_type, "Upsample") == 0, v10 = upsample || im->opset < 11;
  Val *x = ox_in_req(im, n, 0);
  Resize r;
  ResizeAxis ax[DL_MAX_RANK];
  if (!x || !resize_attrs(im, v10, &r) || !resize_geometry(im, n, upsample, v10, &r, ax)) return false;
  DType dt = x->type.dtype;
  bool blend = r.mode != RZ_NEAREST;
  if (blend && dt == TY_BOOL) return ox_bad(im, "mode linear and cubic take no bool tensor (nearest does)");
  Val *y = blend && !ir_dtype_is_float(dt) ? ox_cast(im, x, TY_F32) : x;
  for (int d = 0; d < x->type.rank && y; d++) {
    ResizeTable t = {0};
    bool ok = resize_table(im, &r, &ax[d], &t);
    if (ok && !resize_is_identity(&t, &ax[d])) y = resize_apply(im, y, d, &t, ax[d].out, r.extrapolation);
    resize_table_free(&t);
    if (!ok) return false;
  }
  return (n->out[0] = resize_to_dtype(im, y, dt));
}

/* GridSample (opset 16; opset 20's names linear and cubic for 4-d) onto
 * grid_sample. */
bool ox_op_grid_sample(Imp *im, ONode *n) {
  Val *in[2] = {ox_in_req(im, n, 0), ox_in_req(im, n, 1)};
  const char *mode, *pad;
  int64_t align;
  if (!in[0] || !in[1] || !ox_attr_str(im, "mode", im->opset >= 20 ? "linear" : "bilinear", &mode) ||
      !ox_attr_str(im, "padding_mode", "zeros", &pad) || !ox_attr_int(im, "align_corners", 0, &align))
    return false;
  if (strcmp(mode, "linear") == 0) mode = "bilinear";
  if (strcmp(mode, "cubic") == 0) mode = "bicubic";
  if (in[0]->type.rank != 4 && in[0]->type.rank != 5)
    return ox_bad(im, "a %d-d input is not supported ([N, C, H, W] and [N, C, D, H, W] are)", in[0]->type.rank);
  if (in[0]->type.rank == 5 && strcmp(mode, "bicubic") == 0)
    return ox_bad(im, "mode cubic is not supported for a volume (ONNX defines it for 2-d)");
  if (!ox_need_float_in(im, in[0]) || !ox_need_float_in(im, in[1])) return false;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GRID_SAMPLE, 2, in);
  ir_set_str(im->g, g, "mode", mode);
  ir_set_str(im->g, g, "padding_mode", pad);
  ir_set_int(im->g, g, "align_corners", align);
  return (n->out[0] = ox_emit1(im, &e));
}

/* RoiAlign (opsets 10 and 16): for each roi [x1, y1, x2, y2] (times
 * spatial_scale, less half a pixel under half_pixel) of image
 * batch_indices[r], a PH x PW grid of bins, each the average (or the
 * largest weighted corner, as ONNX's reference and onnxruntime take it)
 * of G x G bilinear samples at the bin's sub-cell centres, a sample
 * outside [-1, size] counting 0.  Written as ops: the samples'
 * coordinates from the rois (elementwise), the four corners' rows of
 * X laid out [N H W, C] gathered, weighted and reduced.  G is
 * sampling_ratio, which must be given (0 asks for a grid per roi from
 * its size, a shape only the data decides). */
bool ox_op_roi_align(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rois = ox_in_req(im, n, 1), *bi = ox_in_req(im, n, 2);
  const char *ctm, *mode;
  int64_t PH, PW, G;
  double scale;
  if (!x || !rois || !bi || !ox_need_float_in(im, x) || !ox_need_float_in(im, rois) ||
      !ox_attr_str(im, "coordinate_transformation_mode", im->opset >= 16 ? "half_pixel" : "output_half_pixel", &ctm) ||
      !ox_attr_str(im, "mode", "avg", &mode) || !ox_attr_int(im, "output_height", 1, &PH) ||
      !ox_attr_int(im, "output_width", 1, &PW) || !ox_attr_int(im, "sampling_ratio", 0, &G) ||
      !ox_attr_float(im, "spatial_scale", 1.0, &scale))
    return false;
  bool half = strcmp(ctm, "half_pixel") == 0, avg = strcmp(mode, "avg") == 0;
  if (!half && strcmp(ctm, "output_half_pixel") != 0)
    return ox_bad(im, "coordinate_transformation_mode '%s' is not supported (half_pixel, output_half_pixel)", ctm);
  if (!avg && strcmp(mode, "max") != 0) return ox_bad(im, "mode '%s' is not supported (avg, max)", mode);
  if (G <= 0 || G > 64)
    return ox_bad(im, "sampling_ratio %" PRId64 " is not supported (1 to 64: with 0 each roi's grid follows its size)", G);
  if (PH < 1 || PW < 1 || PH > 4096 || PW > 4096)
    return ox_bad(im, "output size %" PRId64 "x%" PRId64 " is not supported", PH, PW);
  char ts[IR_TYPE_STR_MAX];
  const TensorType *xt = &x->type;
  if (xt->rank != 4) return ox_bad(im, "X %s must be [N, C, H, W]", ir_type_str(xt, ts, sizeof ts));
  int64_t N = xt->dims[0], C = xt->dims[1], H = xt->dims[2], W = xt->dims[3];
  if (rois->type.rank != 2 || rois->type.dims[1] != 4)
    return ox_bad(im, "rois %s must be [num_rois, 4]", ir_type_str(&rois->type, ts, sizeof ts));
  int64_t R = rois->type.dims[0];
  if (bi->type.rank != 1 || bi->type.dims[0] != R || ir_dtype_is_float(bi->type.dtype))
    return ox_bad(im, "batch_indices %s must be [%" PRId64 "] integers", ir_type_str(&bi->type, ts, sizeof ts), R);
  int64_t r5[5] = {R, 1, 1, 1, 1};
  Val *corner[4];
  Val *rf = ox_cast(im, rois, TY_F32);
  for (int i = 0; i < 4; i++) {
    Val *c = ox_op2s(im, OP_MUL, ox_reshape(im, ox_slice_axis(im, rf, 1, i, i + 1, 1), 5, r5), scale);
    corner[i] = half ? ox_op2s(im, OP_SUB, c, 0.5) : c;
  }
  /* each sample's (bin + (i + 0.5) / G) along y [1, PH, 1, G, 1] and x [1, 1, PW, 1, G] */
  TensorType yt = ir_type_make(TY_F32, 5, (int64_t[]){1, PH, 1, G, 1});
  TensorType xt5 = ir_type_make(TY_F32, 5, (int64_t[]){1, 1, PW, 1, G});
  Val *ys = ox_known_new(im, &yt), *xs = ox_known_new(im, &xt5);
  for (int64_t p = 0; p < PH; p++)
    for (int64_t i = 0; i < G; i++) ir_tensor_set(ys->k, p * G + i, (double)p + ((double)i + 0.5) / (double)G);
  for (int64_t p = 0; p < PW; p++)
    for (int64_t i = 0; i < G; i++) ir_tensor_set(xs->k, p * G + i, (double)p + ((double)i + 0.5) / (double)G);
  Val *lo[2], *hi[2], *frac[2], *valid = NULL;
  for (int a = 0; a < 2; a++) { /* a 0: y (corners 1, 3), a 1: x (corners 0, 2) */
    Val *start = corner[1 - a], *len = ox_op2(im, OP_SUB, corner[3 - a], start);
    int64_t size = a ? W : H, bins = a ? PW : PH;
    if (!half) len = ox_op2(im, OP_MAXIMUM, len, ox_scalar(im, 1, TY_F32));
    Val *p = ox_op2(im, OP_ADD, start, ox_op2(im, OP_MUL, ox_op2s(im, OP_DIV, len, (double)bins), a ? xs : ys));
    Val *in = ox_op2(im, OP_LOGICAL_AND, ox_op2(im, OP_GREATER_EQUAL, p, ox_scalar(im, -1, TY_F32)),
                     ox_op2(im, OP_LESS_EQUAL, p, ox_scalar(im, (double)size, TY_F32)));
    valid = valid ? ox_op2(im, OP_LOGICAL_AND, valid, in) : in;
    p = ox_op2(im, OP_MAXIMUM, p, ox_scalar(im, 0, TY_F32));
    Val *fl = ox_op1(im, OP_FLOOR, p), *last = ox_scalar(im, (double)(size - 1), TY_F32);
    Val *edge = ox_op2(im, OP_GREATER_EQUAL, fl, last);
    lo[a] = ox_cast(im, ox_op2(im, OP_MINIMUM, fl, last), TY_I64);
    hi[a] = ox_cast(im, ox_op2(im, OP_MINIMUM, ox_op2s(im, OP_ADD, fl, 1), last), TY_I64);
    frac[a] = ox_where(im, edge, ox_scalar(im, 0, TY_F32), ox_op2(im, OP_SUB, p, fl));
  }
  /* the corners' rows of X as [N H W, C], and their weights */
  Val *base = ox_op2s(im, OP_MUL, ox_reshape(im, ox_cast(im, bi, TY_I64), 5, r5), (double)(H * W));
  Val *table = ox_reshape(im, ox_transpose(im, ox_widen(im, x), (const int64_t[]){0, 2, 3, 1}), 2,
                          (int64_t[]){N * H * W, C});
  Val *ly = frac[0], *lx = frac[1];
  Val *hy = ox_op2(im, OP_SUB, ox_scalar(im, 1, TY_F32), ly), *hx = ox_op2(im, OP_SUB, ox_scalar(im, 1, TY_F32), lx);
  Val *wts[4] = {ox_op2(im, OP_MUL, hy, hx), ox_op2(im, OP_MUL, hy, lx), ox_op2(im, OP_MUL, ly, hx),
                 ox_op2(im, OP_MUL, ly, lx)};
  Val *rows[2] = {lo[0], hi[0]}, *cols[2] = {lo[1], hi[1]};
  int64_t w6[6] = {R, PH, PW, G, G, 1};
  Val *acc = NULL;
  for (int k = 0; k < 4; k++) {
    Val *pos = ox_op2(im, OP_ADD, base, ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, rows[k / 2], (double)W), cols[k % 2]));
    pos = ox_expand(im, pos, 5, (int64_t[]){R, PH, PW, G, G});
    Val *wk = ox_where(im, valid, wts[k], ox_scalar(im, 0, TY_F32));
    wk = ox_reshape(im, ox_expand(im, wk, 5, (int64_t[]){R, PH, PW, G, G}), 6, w6);
    Val *term = ox_op2(im, OP_MUL, ox_gather(im, table, pos, 0), wk);
    acc = !acc ? term : ox_op2(im, avg ? OP_ADD : OP_MAXIMUM, acc, term);
  }
  const int64_t samples[2] = {3, 4};
  Val *y = ox_reduce(im, avg ? OP_REDUCE_SUM : OP_REDUCE_MAX, acc, 2, samples, false);
  if (avg) y = ox_op2s(im, OP_DIV, y, (double)(G * G));
  y = ox_transpose(im, y, (const int64_t[]){0, 3, 1, 2});
  return (n->out[0] = ox_narrow(im, y, xt->dtype));
}

/* DeformConv (opset 19), 2-d: each tap (i, j) of output (oh, ow) reads
 * X bilinearly at (oh s - pad + i d + offset_y, ow s - pad + j d +
 * offset_x), its offsets per offset group, corners outside the image
 * reading 0 (GridSample with align_corners and zero padding, as the
 * reference has it), times the mask when given; then the convolution is
 * the GEMM of the weights with those columns, per group, and the bias.
 * Written as ops: the sample positions elementwise, X laid out [N og H
 * W, C / og] and its four corners' rows gathered. */
bool ox_op_deform_conv(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *off = ox_in_req(im, n, 2), *b = ox_in_opt(n, 3);
  Val *mask = ox_in_opt(n, 4);
  int64_t group, og;
  int nk, ns, np, nd;
  const int64_t *ks, *st, *pads, *dil;
  if (!x || !w || !off || !ox_attr_int(im, "group", 1, &group) || !ox_attr_int(im, "offset_group", 1, &og) ||
      !ox_attr_ints(im, "kernel_shape", &nk, &ks) || !ox_attr_ints(im, "strides", &ns, &st) ||
      !ox_attr_ints(im, "pads", &np, &pads) || !ox_attr_ints(im, "dilations", &nd, &dil) ||
      !ox_need_float_in(im, x) || !ox_need_float_in(im, off))
    return false;
  char xs[IR_TYPE_STR_MAX], ws[IR_TYPE_STR_MAX], os[IR_TYPE_STR_MAX];
  const TensorType *xt = &x->type, *wt = &w->type, *ot = &off->type;
  if (xt->rank != 4 || wt->rank != 4 || ot->rank != 4)
    return ox_bad(im, "a %d-d DeformConv is not supported (2-d: X [N, C, H, W])", xt->rank - 2);
  int64_t N = xt->dims[0], C = xt->dims[1], H = xt->dims[2], W = xt->dims[3];
  int64_t Co = wt->dims[0], KH = wt->dims[2], KW = wt->dims[3], OH = ot->dims[2], OW = ot->dims[3];
  if ((nk >= 0 && (nk != 2 || ks[0] != KH || ks[1] != KW)) || (ns >= 0 && ns != 2) || (np >= 0 && np != 4) ||
      (nd >= 0 && nd != 2))
    return ox_bad(im, "kernel_shape, strides, pads and dilations must fit a 2-d convolution of W %s",
                  ir_type_str(wt, ws, sizeof ws));
  int64_t sh = ns > 0 ? st[0] : 1, sw = ns > 0 ? st[1] : 1, dh = nd > 0 ? dil[0] : 1, dw = nd > 0 ? dil[1] : 1;
  int64_t pt = np > 0 ? pads[0] : 0, pl = np > 0 ? pads[1] : 0, pb = np > 0 ? pads[2] : 0, pr = np > 0 ? pads[3] : 0;
  if (group < 1 || og < 1 || C % group || Co % group || wt->dims[1] * group != C || C % og || sh < 1 || sw < 1 ||
      dh < 1 || dw < 1 || ot->dims[0] != N || ot->dims[1] != og * KH * KW * 2 ||
      OH != (H + pt + pb - (KH - 1) * dh - 1) / sh + 1 || OW != (W + pl + pr - (KW - 1) * dw - 1) / sw + 1)
    return ox_bad(im, "X %s, W %s and offset %s do not make a DeformConv of group %" PRId64 " and offset_group %" PRId64,
                  ir_type_str(xt, xs, sizeof xs), ir_type_str(wt, ws, sizeof ws), ir_type_str(ot, os, sizeof os),
                  group, og);
  int64_t md[4] = {N, og * KH * KW, OH, OW};
  if (mask && !ox_same_dims(&mask->type, 4, md))
    return ox_bad(im, "mask %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]",
                  ir_type_str(&mask->type, os, sizeof os), N, og * KH * KW, OH, OW);
  if (b && (b->type.rank != 1 || b->type.dims[0] != Co))
    return ox_bad(im, "B %s must be [%" PRId64 "]", ir_type_str(&b->type, os, sizeof os), Co);
  int64_t s6[6] = {N, og, KH, KW, OH, OW};
  /* positions [N, og, KH, KW, OH, OW]: the tap's place plus its offset */
  Val *o7 = ox_reshape(im, ox_widen(im, off), 7, (int64_t[]){N, og, KH, KW, 2, OH, OW});
  TensorType ht = ir_type_make(TY_F32, 6, (int64_t[]){1, 1, KH, 1, OH, 1});
  TensorType wtt = ir_type_make(TY_F32, 6, (int64_t[]){1, 1, 1, KW, 1, OW});
  Val *hb = ox_known_new(im, &ht), *wb = ox_known_new(im, &wtt);
  for (int64_t i = 0; i < KH; i++)
    for (int64_t o = 0; o < OH; o++) ir_tensor_set(hb->k, i * OH + o, (double)(o * sh - pt + i * dh));
  for (int64_t j = 0; j < KW; j++)
    for (int64_t o = 0; o < OW; o++) ir_tensor_set(wb->k, j * OW + o, (double)(o * sw - pl + j * dw));
  Val *pos[2];
  for (int a = 0; a < 2; a++)
    pos[a] = ox_op2(im, OP_ADD, ox_reshape(im, ox_slice_axis(im, o7, 4, a, a + 1, 1), 6, s6), a ? wb : hb);
  /* the four corners: index into X as [N og H W, C / og], weight 0 outside */
  int64_t cog = C / og;
  Val *table = ox_reshape(im, ox_transpose(im, ox_reshape(im, ox_widen(im, x), 4, (int64_t[]){N, og, cog, H * W}),
                                           (const int64_t[]){0, 1, 3, 2}),
                          2, (int64_t[]){N * og * H * W, cog});
  TensorType bt = ir_type_make(TY_I64, 6, (int64_t[]){N, og, 1, 1, 1, 1});
  Val *base = ox_known_new(im, &bt);
  for (int64_t i = 0; i < N * og; i++) ir_tensor_set(base->k, i, (double)(i * H * W));
  Val *fl[2], *fr[2];
  for (int a = 0; a < 2; a++) {
    fl[a] = ox_op1(im, OP_FLOOR, pos[a]);
    fr[a] = ox_op2(im, OP_SUB, pos[a], fl[a]);
  }
  Val *acc = NULL;
  for (int k = 0; k < 4; k++) {
    Val *cw = NULL, *inside = NULL, *idx = base;
    for (int a = 0; a < 2; a++) {
      int step = a ? k % 2 : k / 2;
      int64_t size = a ? W : H;
      Val *c = step ? ox_op2s(im, OP_ADD, fl[a], 1) : fl[a];
      Val *f = step ? fr[a] : ox_op2(im, OP_SUB, ox_scalar(im, 1, TY_F32), fr[a]);
      cw = cw ? ox_op2(im, OP_MUL, cw, f) : f;
      Val *in = ox_op2(im, OP_LOGICAL_AND, ox_op2(im, OP_GREATER_EQUAL, c, ox_scalar(im, 0, TY_F32)),
                       ox_op2(im, OP_LESS_EQUAL, c, ox_scalar(im, (double)(size - 1), TY_F32)));
      inside = inside ? ox_op2(im, OP_LOGICAL_AND, inside, in) : in;
      Val *ci = ox_cast(im, ox_op2(im, OP_MINIMUM, ox_op2(im, OP_MAXIMUM, c, ox_scalar(im, 0, TY_F32)),
                                    ox_scalar(im, (double)(size - 1), TY_F32)),
                        TY_I64);
      idx = ox_op2(im, OP_ADD, idx, a ? ci : ox_op2s(im, OP_MUL, ci, (double)W));
    }
    cw = ox_where(im, inside, cw, ox_scalar(im, 0, TY_F32));
    Val *v = ox_gather(im, table, ox_expand(im, idx, 6, s6), 0); /* [N, og, KH, KW, OH, OW, cog] */
    Val *term = ox_op2(im, OP_MUL, v, ox_reshape(im, ox_expand(im, cw, 6, s6), 7,
                                                 (int64_t[]){N, og, KH, KW, OH, OW, 1}));
    acc = acc ? ox_op2(im, OP_ADD, acc, term) : term;
  }
  if (mask)
    acc = ox_op2(im, OP_MUL, acc, ox_reshape(im, ox_widen(im, mask), 7, (int64_t[]){N, og, KH, KW, OH, OW, 1}));
  /* columns [N, group, C / group KH KW, OH OW], then the weights' GEMM */
  Val *cols = ox_transpose(im, acc, (const int64_t[]){0, 1, 6, 2, 3, 4, 5});
  int64_t cg = C / group, K = cg * KH * KW;
  cols = ox_reshape(im, cols, 4, (int64_t[]){N, group, K, OH * OW});
  Val *wm = ox_reshape(im, ox_widen(im, w), 4, (int64_t[]){1, group, Co / group, K});
  Val *y = ox_reshape(im, ox_op2(im, OP_MATMUL, wm, cols), 4, (int64_t[]){N, Co, OH, OW});
  if (b) y = ox_op2(im, OP_ADD, y, ox_reshape(im, ox_widen(im, b), 3, (int64_t[]){Co, 1, 1}));
  return (n->out[0] = ox_narrow(im, y, xt->dtype));
}
