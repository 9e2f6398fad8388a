/* ONNX shape and data-movement ops (Reshape, Slice, Gather, Scatter,
 * Pad, Tile, ...), indexing by data, and the values known at import
 * (Constant, Shape, Range): takes one node's operands, returns its
 * results, folded where the operands are known. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- shapes and data movement ---- */

/* y, sized by the upper bounds of shape's k elements (giving y's axes
 * from axis0 on), with the run-time lengths of those marked dynamic. */
static Val *with_lengths(Imp *im, Val *y, Val *shape, const bool *dynamic, int k, int axis0) {
  for (int i = 0; i < k && y; i++)
    if (dynamic[i]) y = ox_with_length(im, y, axis0 + i, shape, i);
  return y;
}

bool ox_op_reshape(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *s = ox_in_req(im, n, 1);
  int64_t allowzero;
  int64_t shape[64];
  int k;
  bool dynamic[64];
  if (!x || !s || !ox_attr_int(im, "allowzero", 0, &allowzero)) return false;
  /* A target computed from a run-time length: its bounds, x's length
   * carried to the axis it lands on by ir/bounds.c. */
  if (!ox_bounded_ints(im, s, "the target shape", &k, shape, dynamic)) return false;
  if (k > DL_MAX_RANK) return ox_bad(im, "rank %d is not supported (at most %d)", k, (int)DL_MAX_RANK);
  int infer = -1;
  int64_t have = ir_type_numel(&x->type), prod = 1;
  for (int i = 0; i < k; i++) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= x->type.rank)
        return ox_bad(im, "shape entry %d is 0 but the input has rank %d", i, x->type.rank);
      shape[i] = x->type.dims[i];
      dynamic[i] = false; /* x's own dim, with x's own length */
    }
    if (shape[i] == -1) {
      if (infer >= 0) return ox_bad(im, "the shape has more than one -1");
      infer = i;
      continue;
    }
    if (shape[i] < 0) return ox_bad(im, "shape entry %" PRId64 " is invalid", shape[i]);
    if (shape[i] > DL_MAX_ELEMS || (shape[i] && prod > DL_MAX_ELEMS / shape[i]))
      return ox_bad(im, "the target shape is too large");
    prod *= shape[i];
  }
  bool any_dynamic = false;
  for (int i = 0; i < k; i++) any_dynamic |= dynamic[i];
  if (infer >= 0) {
    if (prod == 0) return ox_bad(im, "a -1 next to a 0 dim is ambiguous");
    if (have % prod != 0)
      return ox_bad(im, "cannot reshape %" PRId64 " elements with a -1 next to %" PRId64, have, prod);
    /* Of a value of static size, a -1 beside a length would be a size
     * computed at run time. */
    if (any_dynamic && !x->run_time_len)
      return ox_bad(im, "a target shape with a -1 and a length computed at run time is not supported for a value "
                        "of static size");
    shape[infer] = have / prod;
  }
  if (infer >= 0) dynamic[infer] = false; /* the rest's, carried by x */
  return (n->out[0] = with_lengths(im, ox_reshape(im, x, k, shape), s, dynamic, k, 0));
}

bool ox_op_flatten(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t axis;
  if (!x || !ox_attr_int(im, "axis", 1, &axis)) return false;
  int r = x->type.rank;
  if (axis < -r || axis > r) return ox_bad(im, "axis %" PRId64 " is out of range for rank %d", axis, r);
  if (axis < 0) axis += r;
  int64_t d[2] = {1, 1};
  for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
  return (n->out[0] = ox_reshape(im, x, 2, d));
}

/* Axes of Squeeze/Unsqueeze: an attribute before opset 13, an input after. */
static bool squeeze_axes(Imp *im, ONode *n, int *k, int64_t *axes, bool *given) {
  *given = false;
  *k = 0;
  if (im->opset < 13) {
    int na;
    const int64_t *a;
    if (!ox_attr_ints(im, "axes", &na, &a)) return false;
    if (na >= 0) {
      memcpy(axes, a, sizeof(int64_t) * (size_t)na);
      *k = na, *given = true;
    }
    return true;
  }
  if (!ox_in_opt(n, 1)) return true;
  *given = true;
  return ox_const_ints(im, n->in[1], "the axes", k, axes);
}

bool ox_op_squeeze(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int k;
  int64_t axes[64];
  bool given;
  if (!x || !squeeze_axes(im, n, &k, axes, &given)) return false;
  int r = x->type.rank;
  bool drop[DL_MAX_RANK] = {false};
  for (int i = 0; i < k; i++) {
    int a;
    if (!ox_norm_axis(im, axes[i], r, &a)) return false;
    if (x->type.dims[a] != 1)
      return ox_bad(im, "cannot squeeze axis %d of size %" PRId64, a, x->type.dims[a]);
    drop[a] = true;
  }
  int64_t d[DL_MAX_RANK];
  int m = 0;
  for (int i = 0; i < r; i++)
    if (!(given ? drop[i] : x->type.dims[i] == 1)) d[m++] = x->type.dims[i];
  return (n->out[0] = ox_reshape(im, x, m, d));
}

bool ox_op_unsqueeze(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int k;
  int64_t axes[64];
  bool given;
  if (!x || !squeeze_axes(im, n, &k, axes, &given)) return false;
  if (!given) return ox_bad(im, "the axes are missing");
  int r = x->type.rank + k;
  if (r > DL_MAX_RANK) return ox_bad(im, "rank %d is not supported (at most %d)", r, (int)DL_MAX_RANK);
  bool ins[DL_MAX_RANK] = {false};
  for (int i = 0; i < k; i++) {
    int a;
    if (!ox_norm_axis(im, axes[i], r, &a)) return false;
    if (ins[a]) return ox_bad(im, "axis %d is given twice", a);
    ins[a] = true;
  }
  int64_t d[DL_MAX_RANK];
  for (int i = 0, j = 0; i < r; i++) d[i] = ins[i] ? 1 : x->type.dims[j++];
  return (n->out[0] = ox_reshape(im, x, r, d));
}

bool ox_op_transpose(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int np;
  const int64_t *p;
  if (!x || !ox_attr_ints(im, "perm", &np, &p)) return false;
  int r = x->type.rank;
  int64_t perm[DL_MAX_RANK];
  if (np >= 0 && np != r) return ox_bad(im, "perm has %d entries for rank %d", np, r);
  for (int i = 0; i < r; i++) perm[i] = np >= 0 ? p[i] : r - 1 - i;
  if (r == 0) return (n->out[0] = x);
  Emit e;
  Node *t = ox_begin(im, &e, OP_TRANSPOSE, 1, &x);
  ir_set_ints(im->g, t, "perm", r, perm);
  return (n->out[0] = ox_emit1(im, &e));
}

bool ox_op_concat(Imp *im, ONode *n) {
  int64_t axis_attr;
  if (n->n_in < 1) return ox_bad(im, "needs at least one input");
  if (!ox_attr_int(im, "axis", INT64_MIN, &axis_attr)) return false;
  if (axis_attr == INT64_MIN) return ox_bad(im, "attribute 'axis' is missing");
  for (int i = 0; i < n->n_in; i++)
    if (!ox_in_req(im, n, i)) return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, n->in[0]->type.rank, &axis)) return false;
  return (n->out[0] = ox_concat(im, n->n_in, n->in, axis));
}

bool ox_op_split(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t axis_attr, num;
  if (!x || !ox_attr_int(im, "axis", 0, &axis_attr) || !ox_attr_int(im, "num_outputs", 0, &num)) return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  int64_t sizes[64];
  int k = -1;
  if (im->opset < 13) {
    const int64_t *s;
    if (!ox_attr_ints(im, "split", &k, &s)) return false;
    if (k > 0) memcpy(sizes, s, sizeof(int64_t) * (size_t)k);
  } else if (ox_in_opt(n, 1)) {
    if (!ox_const_ints(im, n->in[1], "the split sizes", &k, sizes)) return false;
  }
  int64_t dim = x->type.dims[axis];
  if (k < 0) {
    k = n->n_out;
    if (k < 1 || k > 64) return ox_bad(im, "cannot split into %d outputs", k);
    int64_t part = (dim + k - 1) / k;
    if (im->opset < 18 && dim % k != 0)
      return ox_bad(im, "dim %" PRId64 " does not split into %d equal parts", dim, k);
    for (int i = 0; i < k; i++) sizes[i] = i < k - 1 ? part : dim - part * (k - 1);
  }
  if (k != n->n_out) return ox_bad(im, "%d split sizes for %d outputs", k, n->n_out);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0) return ox_bad(im, "split size %" PRId64 " is negative", sizes[i]);
    if (at + sizes[i] > dim) return ox_bad(im, "the split sizes exceed dim %" PRId64, dim);
    if (n->want[i] && !(n->out[i] = ox_slice_axis(im, x, axis, at, at + sizes[i], 1))) return false;
    at += sizes[i];
  }
  if (at != dim) return ox_bad(im, "the split sizes add up to %" PRId64 ", not %" PRId64, at, dim);
  return true;
}

bool ox_op_slice(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  int64_t starts[64], ends[64], axes[64], steps[64];
  bool end_dynamic[64] = {false}, from_back[64] = {false};
  int ks, ke, ka = -1, kt = -1;
  Val *ve = NULL;
  if (im->opset < 10) {
    const int64_t *s, *e, *a;
    if (!ox_attr_ints(im, "starts", &ks, &s) || !ox_attr_ints(im, "ends", &ke, &e) ||
        !ox_attr_ints(im, "axes", &ka, &a))
      return false;
    if (ks < 0 || ke < 0) return ox_bad(im, "attributes 'starts' and 'ends' are required");
    memcpy(starts, s, sizeof(int64_t) * (size_t)ks);
    memcpy(ends, e, sizeof(int64_t) * (size_t)ke);
    if (ka > 0) memcpy(axes, a, sizeof(int64_t) * (size_t)ka);
  } else {
    ve = ox_in_req(im, n, 2);
    Val *vs = ox_in_req(im, n, 1);
    if (!vs || !ve || !ox_const_ints(im, vs, "the starts", &ks, starts) ||
        !ox_bounded_ints(im, ve, "the ends", &ke, ends, end_dynamic))
      return false;
    if (ox_in_opt(n, 3) && !ox_const_ints(im, n->in[3], "the axes", &ka, axes)) return false;
    if (ox_in_opt(n, 4) && !ox_const_ints(im, n->in[4], "the steps", &kt, steps)) return false;
  }
  int r = x->type.rank;
  if (ke != ks || (ka >= 0 && ka != ks) || (kt >= 0 && kt != ks))
    return ox_bad(im, "starts, ends, axes and steps differ in length");
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK], st[DL_MAX_RANK];
  bool seen[DL_MAX_RANK] = {false};
  for (int d = 0; d < r; d++) s[d] = 0, e[d] = x->type.dims[d], st[d] = 1;
  for (int i = 0; i < ks; i++) {
    int a;
    if (!ox_norm_axis(im, ka >= 0 ? axes[i] : i, r, &a)) return false;
    if (seen[a]) return ox_bad(im, "axis %d is sliced twice", a);
    seen[a] = true;
    int64_t dim = x->type.dims[a], step = kt >= 0 ? steps[i] : 1;
    if (step == 0) return ox_bad(im, "a step of 0 is invalid");
    int64_t b = starts[i], en = ends[i];
    if (b < 0) b += dim;
    if (en < 0) en += dim;
    int64_t hi = step > 0 ? dim : dim - 1, en_lo = step > 0 ? 0 : -1;
    b = b < 0 ? 0 : b > hi ? hi : b;
    en = en < en_lo ? en_lo : en > hi ? hi : en;
    s[a] = b, e[a] = en, st[a] = step;
    if ((step > 0 && b >= en) || (step < 0 && b <= en)) s[a] = e[a] = 0, st[a] = 1; /* empty */
    /* An end computed from a run-time length (torchvision's split of
     * the scores per image): the rows to its bound, min(end, x's rows)
     * of them real. */
    if (end_dynamic[i] && (b != 0 || step != 1 || ends[i] < 0))
      return ox_bad(im, "an end computed from a run-time length needs a start of 0, a step of 1 and an end that "
                        "is not counted from the back");
    /* x[:-k] of a value of run-time length: k back from its real end,
     * not from the bound (ir/bounds.c refuses other slices of that axis). */
    from_back[i] = x->run_time_len && !end_dynamic[i] && ends[i] < 0 && b == 0 && step == 1;
  }
  /* Negative steps: a gather of the chosen indices. */
  Val *y = x;
  bool any_pos = false;
  for (int d = 0; d < r; d++) {
    if (st[d] > 0) {
      any_pos |= s[d] != 0 || e[d] != x->type.dims[d] || st[d] != 1;
      continue;
    }
    int64_t count = (s[d] - e[d] - 1) / -st[d] + 1;
    int64_t dim = count;
    if (count > im->fold_max)
      return ox_bad(im, "a negative-step slice of %" PRId64 " elements is not supported", count);
    TensorType it = ir_type_make(TY_I64, 1, &dim);
    Val *idx = ox_known_new(im, &it);
    for (int64_t i = 0; i < count; i++) ((int64_t *)idx->k->data)[i] = s[d] + i * st[d];
    y = ox_gather(im, y, idx, d);
    s[d] = 0, e[d] = count, st[d] = 1;
  }
  if (any_pos && y) {
    Emit em;
    Node *sl = ox_begin(im, &em, OP_SLICE, 1, &y);
    ir_set_ints(im->g, sl, "starts", r, s);
    ir_set_ints(im->g, sl, "ends", r, e);
    ir_set_ints(im->g, sl, "steps", r, st);
    y = ox_emit1(im, &em);
  }
  for (int i = 0; i < ks && y; i++) {
    if (!end_dynamic[i] && !from_back[i]) continue;
    int a;
    ox_norm_axis(im, ka >= 0 ? axes[i] : i, r, &a);
    Val *rows = x->run_time_len ? ox_gather(im, ox_run_time_shape(im, x), ox_scalar(im, a, TY_I64), 0)
                                : ox_scalar(im, (double)x->type.dims[a], TY_I64);
    Val *end = from_back[i] ? ox_op2s(im, OP_ADD, rows, (double)ends[i])
                            : ox_cast(im, ox_gather(im, ox_reshape(im, ve, 1, (int64_t[]){ke}),
                                                    ox_scalar(im, i, TY_I64), 0), TY_I64);
    Val *len = ox_op2(im, OP_MINIMUM, ox_op2s(im, OP_MAXIMUM, end, 0), rows);
    y = len ? ox_with_length(im, y, a, len, 0) : NULL;
  }
  return (n->out[0] = y);
}

bool ox_op_gather(Imp *im, ONode *n) {
  Val *data = ox_in_req(im, n, 0), *idx = ox_in_req(im, n, 1);
  int64_t axis_attr;
  if (!data || !idx || !ox_attr_int(im, "axis", 0, &axis_attr)) return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, data->type.rank, &axis)) return false;
  if (idx->k) {
    int64_t dim = data->type.dims[axis], count = ir_type_numel(&idx->type);
    for (int64_t i = 0; i < count; i++) {
      double v = ir_tensor_get(idx->k, i);
      if (v < (double)-dim || v >= (double)dim)
        return ox_bad(im, "index %.0f is out of range for axis %d of size %" PRId64, v, axis, dim);
    }
  }
  return (n->out[0] = ox_gather(im, data, idx, axis));
}

/* ---- indexing by data, top-k, one-hot ---- */

/* Indices known at import must be in range: the kernels would clamp or
 * skip them where eval.c stops.  Index i of idx goes into data's dim
 * dims[i % q] (q 1: every index into dims[0]). */
static bool known_indices_ok(Imp *im, const Val *idx, const int64_t *dims, int q, int first_axis) {
  if (!idx->k) return true;
  for (int64_t i = 0, count = ir_type_numel(&idx->type); i < count; i++) {
    double v = ir_tensor_get(idx->k, i), dim = (double)dims[i % q];
    if (v < -dim || v >= dim)
      return ox_bad(im, "index %.0f is out of range for axis %d of size %.0f", v, first_axis + (int)(i % q),
                    dim);
  }
  return true;
}

bool ox_op_gather_elements(Imp *im, ONode *n) {
  Val *data = ox_in_req(im, n, 0), *idx = ox_in_req(im, n, 1);
  int64_t axis_attr;
  int axis;
  if (!data || !idx || !ox_attr_int(im, "axis", 0, &axis_attr) ||
      !ox_norm_axis(im, axis_attr, data->type.rank, &axis))
    return false;
  if (!known_indices_ok(im, idx, data->type.dims + axis, 1, axis)) return false;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GATHER_ELEMENTS, 2, (Val *[]){data, idx});
  ir_set_int(im->g, g, "axis", axis);
  return (n->out[0] = ox_emit1(im, &e));
}

static bool is_int(DType t) { return !ir_dtype_is_float(t) && t != TY_BOOL; }

/* A [B] vector of lengths or positions placed along axis of a rank-r
 * i64 tensor (1 in the other dims). */
static Val *along_axis(Imp *im, Val *v, int r, int axis) {
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == axis ? v->type.dims[0] : 1;
  return ox_reshape(im, ox_cast(im, v, TY_I64), r, dims);
}

/* ReverseSequence: each batch entry b's first sequence_lens[b] steps
 * along time_axis reversed, the rest as they were: an element gather
 * along time of t' = len - 1 - t where t < len, else t.  A length past
 * the time axis reads out of range, which the gather reports at run
 * time (ONNX leaves it undefined). */
bool ox_op_reverse_sequence(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *lens = ox_in_req(im, n, 1);
  int64_t ba, ta;
  if (!x || !lens || !ox_attr_int(im, "batch_axis", 1, &ba) || !ox_attr_int(im, "time_axis", 0, &ta)) return false;
  int r = x->type.rank;
  if (r < 2) return ox_bad(im, "the input must have rank 2 or more, not %d", r);
  if ((ba != 0 && ba != 1) || (ta != 0 && ta != 1) || ba == ta)
    return ox_bad(im, "batch_axis %" PRId64 " and time_axis %" PRId64 " must be 0 and 1, one each", ba, ta);
  if (!is_int(lens->type.dtype) || lens->type.rank != 1 || lens->type.dims[0] != x->type.dims[ba])
    return ox_bad(im, "sequence_lens must be an integer vector of the batch's %" PRId64 " lengths",
                  x->type.dims[ba]);
  Val *len = along_axis(im, lens, r, (int)ba), *t = ox_iota_along(im, r, (int)ta, x->type.dims[ta]);
  Val *rev = ox_op2(im, OP_SUB, ox_op2s(im, OP_SUB, len, 1), t);
  /* an index per element, as the element gather wants */
  Val *idx = ox_expand(im, ox_where(im, ox_op2(im, OP_LESS, t, len), rev, t), x->type.rank, x->type.dims);
  if (!idx) return false;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GATHER_ELEMENTS, 2, (Val *[]){x, idx});
  ir_set_int(im->g, g, "axis", ta);
  return (n->out[0] = ox_emit1(im, &e));
}

/* TensorScatter (opset 24): past_cache with update written along axis
 * at write_indices[b] (0 without them) onwards, modulo the axis in
 * mode circular: a scatter of update at those positions.  A linear
 * write past the axis is an index out of range at run time. */
bool ox_op_tensor_scatter(Imp *im, ONode *n) {
  Val *past = ox_in_req(im, n, 0), *upd = ox_in_req(im, n, 1), *w = ox_in_opt(n, 2);
  int64_t axis_attr;
  const char *mode;
  int axis;
  if (!past || !upd || !ox_attr_int(im, "axis", -2, &axis_attr) || !ox_attr_str(im, "mode", "linear", &mode))
    return false;
  int r = past->type.rank;
  if (!ox_norm_axis(im, axis_attr, r, &axis)) return false;
  if (axis == 0) return ox_bad(im, "axis 0 is the batch; the sequence axis must be another");
  bool circular = strcmp(mode, "circular") == 0;
  if (!circular && strcmp(mode, "linear") != 0)
    return ox_bad(im, "mode '%s' is not supported (linear or circular)", mode);
  if (upd->type.rank != r || upd->type.dtype != past->type.dtype)
    return ox_bad(im, "update must have past_cache's rank and dtype");
  for (int d = 0; d < r; d++)
    if (d != axis && upd->type.dims[d] != past->type.dims[d])
      return ox_bad(im, "update's dim %d is %" PRId64 ", past_cache's %" PRId64, d, upd->type.dims[d],
                    past->type.dims[d]);
  if (upd->type.dims[axis] > past->type.dims[axis])
    return ox_bad(im, "update's %" PRId64 " steps do not fit the cache's %" PRId64, upd->type.dims[axis],
                  past->type.dims[axis]);
  Val *idx = ox_iota_along(im, r, axis, upd->type.dims[axis]);
  if (w) {
    if (!is_int(w->type.dtype) || w->type.rank != 1 || w->type.dims[0] != past->type.dims[0])
      return ox_bad(im, "write_indices must be an integer vector of the batch's %" PRId64 " positions",
                    past->type.dims[0]);
    idx = ox_op2(im, OP_ADD, idx, along_axis(im, w, r, 0));
  }
  if (circular) idx = ox_op2(im, OP_MOD, idx, ox_scalar(im, (double)past->type.dims[axis], TY_I64));
  idx = ox_expand(im, idx, upd->type.rank, upd->type.dims);
  if (!idx) return false;
  Emit e;
  Node *sc = ox_begin(im, &e, OP_SCATTER_ELEMENTS, 3, (Val *[]){past, idx, upd});
  ir_set_int(im->g, sc, "axis", axis);
  ir_set_str(im->g, sc, "reduction", "none");
  return (n->out[0] = ox_emit1(im, &e));
}

bool ox_op_gather_nd(Imp *im, ONode *n) {
  Val *data = ox_in_req(im, n, 0), *idx = ox_in_req(im, n, 1);
  int64_t batch;
  if (!data || !idx || !ox_attr_int(im, "batch_dims", 0, &batch)) return false;
  if (batch < 0 || batch >= data->type.rank || idx->type.rank < 1)
    return ox_bad(im, "batch_dims %" PRId64 " does not fit data of rank %d", batch, data->type.rank);
  int q = (int)idx->type.dims[idx->type.rank - 1];
  if (q > data->type.rank - batch)
    return ox_bad(im, "index rows of %d values are longer than data's dims", q);
  if (!known_indices_ok(im, idx, data->type.dims + batch, q, (int)batch)) return false;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GATHER_ND, 2, (Val *[]){data, idx});
  ir_set_int(im->g, g, "batch_dims", batch);
  return (n->out[0] = ox_emit1(im, &e));
}

/* reduction: "none" before opset 16; add and mul from 16, max and min
 * from 18. */
static bool scatter_reduction(Imp *im, const char **out) {
  if (!ox_attr_str(im, "reduction", "none", out)) return false;
  static const char *const known[] = {"none", "add", "mul", "max", "min"};
  for (size_t i = 0; i < ARRAY_LEN(known); i++)
    if (strcmp(*out, known[i]) == 0) return true;
  return ox_bad(im, "reduction='%s' is not supported (none, add, mul, max, min)", *out);
}

/* ScatterElements, and Scatter (opset 9-10) which is the same without
 * a reduction. */
bool ox_op_scatter_elements(Imp *im, ONode *n) {
  Val *data = ox_in_req(im, n, 0), *idx = ox_in_req(im, n, 1), *upd = ox_in_req(im, n, 2);
  int64_t axis_attr;
  int axis;
  const char *red = "none";
  if (!data || !idx || !upd || !ox_attr_int(im, "axis", 0, &axis_attr) ||
      !ox_norm_axis(im, axis_attr, data->type.rank, &axis))
    return false;
  if (strcmp(im->np->op_type, "Scatter") != 0 && !scatter_reduction(im, &red)) return false;
  if (!known_indices_ok(im, idx, data->type.dims + axis, 1, axis)) return false;
  Emit e;
  Node *sc = ox_begin(im, &e, OP_SCATTER_ELEMENTS, 3, (Val *[]){data, idx, upd});
  ir_set_int(im->g, sc, "axis", axis);
  ir_set_str(im->g, sc, "reduction", red);
  return (n->out[0] = ox_emit1(im, &e));
}

bool ox_op_scatter_nd(Imp *im, ONode *n) {
  Val *data = ox_in_req(im, n, 0), *idx = ox_in_req(im, n, 1), *upd = ox_in_req(im, n, 2);
  const char *red;
  if (!data || !idx || !upd || !scatter_reduction(im, &red)) return false;
  if (idx->type.rank < 1) return ox_bad(im, "the indices must have rank >= 1");
  int q = (int)idx->type.dims[idx->type.rank - 1];
  if (q > data->type.rank)
    return ox_bad(im, "index rows of %d values are longer than data's %d dims", q, data->type.rank);
  if (!known_indices_ok(im, idx, data->type.dims, q, 0)) return false;
  Emit e;
  Node *sc = ox_begin(im, &e, OP_SCATTER_ND, 3, (Val *[]){data, idx, upd});
  ir_set_str(im->g, sc, "reduction", red);
  return (n->out[0] = ox_emit1(im, &e));
}

/* k an attribute before opset 10, a constant input after.  sorted=0
 * leaves the order to the implementation: dlcc's is sorted anyway. */
bool ox_op_topk(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *kv = NULL;
  int64_t axis_attr, largest, sorted, k = 0;
  bool k_dynamic = false;
  if (!x || !ox_attr_int(im, "axis", -1, &axis_attr) || !ox_attr_int(im, "largest", 1, &largest) ||
      !ox_attr_int(im, "sorted", 1, &sorted))
    return false;
  if (im->opset < 10) {
    if (!ox_attr_int(im, "k", 0, &k)) return false;
  } else {
    kv = ox_in_req(im, n, 1);
    int nk;
    int64_t ks[64];
    bool dyn[64];
    if (!kv || !ox_bounded_ints(im, kv, "TopK's K", &nk, ks, dyn)) return false;
    if (nk != 1) return ox_bad(im, "TopK's K must hold one value, not %d", nk);
    k = ks[0], k_dynamic = dyn[0];
  }
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  if (k < 0 || k > x->type.dims[axis])
    return ox_bad(im, "K=%" PRId64 " is outside 0..%" PRId64 ", the axis' length", k, x->type.dims[axis]);
  Emit e;
  Node *t = ox_begin(im, &e, OP_TOPK, 1, &x);
  ir_set_int(im->g, t, "k", k);
  ir_set_int(im->g, t, "axis", axis);
  ir_set_int(im->g, t, "largest", largest != 0);
  Val *out[8];
  if (!ox_finish(im, &e, out)) return false;
  /* K computed from a run-time length (min(n, 300), torchvision's
   * detectors): the bound's worth, K of them real. */
  n->out[0] = k_dynamic ? ox_with_length(im, out[0], axis, kv, 0) : out[0];
  if (n->n_out > 1) n->out[1] = k_dynamic ? ox_with_length(im, out[1], axis, kv, 0) : out[1];
  return n->out[0] && (n->n_out < 2 || n->out[1]);
}

/* indices (any number type, truncated), depth and values [off, on]:
 * equal(unsqueezed indices counted from the end, iota) picks on or off;
 * an index outside [-depth, depth) matches nothing. */
bool ox_op_one_hot(Imp *im, ONode *n) {
  Val *idx = ox_in_req(im, n, 0), *vd = ox_in_req(im, n, 1), *vals = ox_in_req(im, n, 2);
  int64_t axis_attr;
  double depth_d;
  if (!idx || !vd || !vals || !ox_attr_int(im, "axis", -1, &axis_attr) ||
      !ox_const_scalar(im, vd, "OneHot's depth", &depth_d))
    return false;
  int r = idx->type.rank;
  if (r + 1 > DL_MAX_RANK)
    return ox_bad(im, "the result would have rank %d (at most %d)", r + 1, (int)DL_MAX_RANK);
  if (axis_attr < -(r + 1) || axis_attr > r)
    return ox_bad(im, "axis %" PRId64 " is out of range for rank %d", axis_attr, r + 1);
  int axis = (int)(axis_attr < 0 ? axis_attr + r + 1 : axis_attr);
  int64_t depth = (int64_t)depth_d;
  if (depth < 1 || depth > im->fold_max) return ox_bad(im, "depth %.0f is not supported", depth_d);
  if (ir_type_numel(&vals->type) != 2) return ox_bad(im, "values must hold 2 elements [off, on]");
  int64_t dims[DL_MAX_RANK];
  for (int d = 0, j = 0; d <= r; d++) dims[d] = d == axis ? 1 : idx->type.dims[j++];
  Val *i64 = ox_cast(im, idx, TY_I64);
  Val *wrapped = ox_where(im, ox_op2s(im, OP_LESS, i64, 0), ox_op2s(im, OP_ADD, i64, (double)depth), i64);
  Val *hot =
      ox_op2(im, OP_EQUAL, ox_reshape(im, wrapped, r + 1, dims), ox_iota_along(im, r + 1, axis, depth));
  Val *flat2 = ox_reshape(im, vals, 1, (int64_t[]){2});
  Val *off = ox_reshape(im, ox_slice_axis(im, flat2, 0, 0, 1, 1), 0, NULL);
  Val *on = ox_reshape(im, ox_slice_axis(im, flat2, 0, 1, 2, 1), 0, NULL);
  return (n->out[0] = ox_where(im, hot, on, off));
}

/* Ones where column - row == k: a constant of the input's shape. */
bool ox_op_eye_like(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t code, k;
  if (!x || !ox_attr_int(im, "dtype", -1, &code) || !ox_attr_int(im, "k", 0, &k)) return false;
  if (x->type.rank != 2) return ox_bad(im, "the input must be 2-d, got rank %d", x->type.rank);
  DType dt = x->type.dtype;
  if (code >= 0 && !ox_dtype_from_onnx((int32_t)code, &dt))
    return ox_bad(im, "dtype %s is not supported (%s)", ox_onnx_type_name((int32_t)code), ox_dtypes_we_have);
  TensorType t = x->type;
  t.dtype = dt;
  Val *y = ox_known_new(im, &t);
  for (int64_t i = 0; i < t.dims[0]; i++)
    for (int64_t j = 0; j < t.dims[1]; j++) ir_tensor_set(y->k, i * t.dims[1] + j, j - i == k);
  return (n->out[0] = y);
}

/* Broadcast of two shapes, right-aligned (Expand's rule). */
static bool broadcast_dims(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *r) {
  *r = ra > rb ? ra : rb;
  for (int i = 0; i < *r; i++) {
    int64_t da = i < ra ? a[ra - 1 - i] : 1, db = i < rb ? b[rb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[*r - 1 - i] = da == 1 ? db : da;
  }
  return true;
}

bool ox_op_expand(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *s = ox_in_req(im, n, 1);
  int64_t shape[64], out[DL_MAX_RANK];
  bool dynamic[64];
  int k, r;
  if (!x || !s || !ox_bounded_ints(im, s, "the shape", &k, shape, dynamic)) return false;
  if (k > DL_MAX_RANK) return ox_bad(im, "rank %d is not supported (at most %d)", k, (int)DL_MAX_RANK);
  for (int i = 0; i < k; i++)
    if (shape[i] < 1)
      return ox_bad(im, "shape entry %" PRId64 " is not supported (dims must be >= 1)", shape[i]);
  if (!broadcast_dims(x->type.dims, x->type.rank, shape, k, out, &r))
    return ox_bad(im, "the input does not broadcast to the shape");
  /* A length the shape gives an axis that x broadcasts along; where x
   * has that axis, its own length stays (ir/bounds.c). */
  for (int i = 0; i < k; i++) {
    int at = x->type.rank - k + i;
    dynamic[i] &= at < 0 || x->type.dims[at] == 1;
  }
  return (n->out[0] = with_lengths(im, ox_expand(im, x, r, out), s, dynamic, k, r - k));
}

bool ox_op_tile(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *rv = ox_in_req(im, n, 1);
  int64_t reps[64];
  int k;
  if (!x || !rv || !ox_const_ints(im, rv, "the repeats", &k, reps)) return false;
  int r = x->type.rank;
  if (k != r) return ox_bad(im, "%d repeats for rank %d", k, r);
  Val *y = x;
  for (int a = 0; a < r && y; a++) {
    if (reps[a] < 0) return ox_bad(im, "repeat %" PRId64 " is negative", reps[a]);
    if (reps[a] == 1) continue;
    if (r + 1 > DL_MAX_RANK) return ox_bad(im, "rank %d is too large to tile", r);
    /* [.., d, ..] -> [.., 1, d, ..] -> expand [.., reps, d, ..] -> [.., reps*d, ..] */
    int64_t d1[DL_MAX_RANK], d2[DL_MAX_RANK], d3[DL_MAX_RANK];
    for (int i = 0, j = 0; i < r + 1; i++) {
      d1[i] = i == a ? 1 : y->type.dims[j];
      d2[i] = i == a ? reps[a] : y->type.dims[j];
      if (i != a) j++;
    }
    for (int i = 0; i < r; i++) d3[i] = i == a ? reps[a] * y->type.dims[a] : y->type.dims[i];
    y = ox_reshape(im, ox_expand(im, ox_reshape(im, y, r + 1, d1), r + 1, d2), r, d3);
  }
  return (n->out[0] = y);
}

/* Where element i of an axis of n padded by mode reads from, for i in
 * [-lo, n + hi): reflect mirrors about the first and last element (as
 * often as the pads need), edge repeats them, wrap goes around. */
static int64_t pad_source(const char *mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (strcmp(mode, "edge") == 0) return i < 0 ? 0 : n - 1;
  if (strcmp(mode, "wrap") == 0) return ((i % n) + n) % n;
  if (n == 1) return 0;
  int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

/* The non-constant pads: one gather per padded axis, of indices known at
 * import. */
static Val *pad_by_gather(Imp *im, Val *x, const char *mode, const int64_t *full) {
  int r = x->type.rank;
  Val *y = x;
  for (int d = 0; d < r && y; d++) {
    int64_t lo = full[d], hi = full[r + d], n = y->type.dims[d], count = n + lo + hi;
    if (!lo && !hi) continue;
    if (count > im->fold_max) {
      ox_bad(im, "a %s pad to %" PRId64 " elements is not supported", mode, count);
      return NULL;
    }
    TensorType it = ir_type_make(TY_I64, 1, &count);
    Val *idx = ox_known_new(im, &it);
    for (int64_t i = 0; i < count; i++) ((int64_t *)idx->k->data)[i] = pad_source(mode, i - lo, n);
    y = ox_gather(im, y, idx, d);
  }
  return y;
}

static Val *pad_constant(Imp *im, Val *x, const int64_t *full, double value) {
  if (!x) return NULL;
  Emit e;
  Node *p = ox_begin(im, &e, OP_PAD, 1, &x);
  ir_set_ints(im->g, p, "pads", 2 * x->type.rank, full);
  ir_set_float(im->g, p, "value", value);
  return ox_emit1(im, &e);
}

bool ox_op_pad(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  const char *mode;
  if (!x || !ox_attr_str(im, "mode", "constant", &mode)) return false;
  bool constant = strcmp(mode, "constant") == 0;
  if (!constant && strcmp(mode, "reflect") != 0 && strcmp(mode, "edge") != 0 &&
      (strcmp(mode, "wrap") != 0 || im->opset < 19))
    return ox_bad(im, "mode='%s' is not supported (constant, reflect, edge%s are)", mode,
                  im->opset >= 19 ? " and wrap" : "");
  int r = x->type.rank, k;
  int64_t pads[64], axes[64];
  double value = 0;
  Val *run_value = NULL; /* the constant value, computed at run time */
  int ka = -1;
  if (im->opset < 11) {
    const int64_t *p;
    if (!ox_attr_ints(im, "pads", &k, &p) || !ox_attr_float(im, "value", 0.0, &value)) return false;
    if (k < 0) return ox_bad(im, "attribute 'pads' is missing");
    memcpy(pads, p, sizeof(int64_t) * (size_t)k);
  } else {
    Val *pv = ox_in_req(im, n, 1);
    if (!pv || !ox_const_ints(im, pv, "the pads", &k, pads)) return false;
    Val *cv = ox_in_opt(n, 2);
    if (cv && !cv->k && !cv->hint) {
      if (ir_type_numel(&cv->type) != 1) return ox_bad(im, "the constant value must hold one value");
      run_value = ox_cast(im, ox_reshape(im, cv, 0, NULL), x->type.dtype);
    } else if (cv && !ox_const_scalar(im, cv, "the constant value", &value)) {
      return false;
    }
    if (ox_in_opt(n, 3) && !ox_const_ints(im, n->in[3], "the axes", &ka, axes)) return false;
  }
  int na = ka >= 0 ? ka : r;
  if (k != 2 * na) return ox_bad(im, "%d pads for %d axes", k, na);
  int64_t full[2 * DL_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a;
    if (!ox_norm_axis(im, ka >= 0 ? axes[i] : i, r, &a)) return false;
    full[a] = pads[i];
    full[r + a] = pads[na + i];
  }
  /* Negative pads crop. */
  Val *y = x;
  bool any = false;
  for (int d = 0; d < r && y; d++) {
    int64_t lo = full[d] < 0 ? -full[d] : 0, hi = full[r + d] < 0 ? -full[r + d] : 0;
    if (lo + hi >= y->type.dims[d]) return ox_bad(im, "the pads crop axis %d to nothing", d);
    if (lo || hi) y = ox_slice_axis(im, y, d, lo, y->type.dims[d] - hi, 1);
    if (full[d] < 0) full[d] = 0;
    if (full[r + d] < 0) full[r + d] = 0;
    any |= full[d] || full[r + d];
  }
  if (!y || !any) return (n->out[0] = y);
  if (!constant) return (n->out[0] = pad_by_gather(im, y, mode, full));
  Val *padded = pad_constant(im, y, full, value);
  if (run_value && padded) {
    /* Where the padding is (a known mask: true inside), the value. */
    TensorType bt = y->type;
    bt.dtype = TY_BOOL;
    Val *inside = ox_known_new(im, &bt);
    memset(inside->k->data, 1, ir_tensor_nbytes(&bt));
    padded = ox_where(im, pad_constant(im, inside, full, 0), padded, run_value);
  }
  return (n->out[0] = padded);
}

bool ox_op_depth_space(Imp *im, ONode *n) {
  bool to_space = strcmp(im->np->op_type, "DepthToSpace") == 0;
  Val *x = ox_in_req(im, n, 0);
  int64_t b;
  const char *mode = "DCR";
  if (!x || !ox_attr_int(im, "blocksize", 0, &b)) return false;
  /* SpaceToDepth has a mode from opset 25 on, DepthToSpace from 11 */
  if (!ox_attr_str(im, "mode", "DCR", &mode)) return false;
  bool dcr = strcmp(mode, "DCR") == 0;
  if (!dcr && strcmp(mode, "CRD") != 0) return ox_bad(im, "mode='%s' is not supported", mode);
  if (x->type.rank != 4) return ox_bad(im, "needs a 4-d input [N, C, H, W]");
  if (b < 1) return ox_bad(im, "blocksize must be >= 1");
  int64_t N = x->type.dims[0], C = x->type.dims[1], H = x->type.dims[2], W = x->type.dims[3];
  if (to_space) {
    if (C % (b * b)) return ox_bad(im, "channels %" PRId64 " are not a multiple of blocksize^2", C);
    int64_t c = C / (b * b);
    int64_t d6[6] = {N, b, b, c, H, W}, c6[6] = {N, c, b, b, H, W};
    static const int64_t pd[6] = {0, 3, 4, 1, 5, 2}, pc[6] = {0, 1, 4, 2, 5, 3};
    int64_t out[4] = {N, c, H * b, W * b};
    return (n->out[0] =
                ox_reshape(im, ox_transpose(im, ox_reshape(im, x, 6, dcr ? d6 : c6), dcr ? pd : pc), 4, out));
  }
  if (H % b || W % b) return ox_bad(im, "H and W must be multiples of the blocksize");
  /* [N, C, H/b, b, W/b, b]: DCR's channel (bh b + bw) C + c, CRD's
   * c b^2 + bh b + bw */
  int64_t d6[6] = {N, C, H / b, b, W / b, b}, out[4] = {N, C * b * b, H / b, W / b};
  static const int64_t pd[6] = {0, 3, 5, 1, 2, 4}, pc[6] = {0, 1, 3, 5, 2, 4};
  return (n->out[0] = ox_reshape(im, ox_transpose(im, ox_reshape(im, x, 6, d6), dcr ? pd : pc), 4, out));
}

/* ---- values known at import ---- */

bool ox_op_constant(Imp *im, ONode *n) {
  const Onnx__NodeProto *np = im->np;
  if (np->n_attribute != 1) return ox_bad(im, "needs exactly one value attribute");
  const Onnx__AttributeProto *a = np->attribute[0];
  im->attr_used[0] = true;
  const char *name = a->name ? a->name : "";
  if (strcmp(name, "value") == 0 && a->t) {
    Tensor t;
    char err[512];
    if (!ox_tensor_from_proto(a->t, im->dir, &t, err, sizeof err)) return ox_bad(im, "value: %s", err);
    return (n->out[0] = ox_known(im, t));
  }
  if (strcmp(name, "value_float") == 0) return (n->out[0] = ox_scalar(im, a->f, TY_F32));
  if (strcmp(name, "value_int") == 0) return (n->out[0] = ox_reshape(im, ox_ints_val(im, 1, &a->i), 0, NULL));
  if (strcmp(name, "value_ints") == 0) {
    if (a->n_ints > 1 << 20) return ox_bad(im, "value_ints: %zu values are too many", a->n_ints);
    return (n->out[0] = ox_ints_val(im, (int)a->n_ints, a->ints));
  }
  if (strcmp(name, "value_floats") == 0) {
    if (a->n_floats > 1 << 20) return ox_bad(im, "value_floats: %zu values are too many", a->n_floats);
    int64_t dim = (int64_t)a->n_floats;
    TensorType t = ir_type_make(TY_F32, 1, &dim);
    Val *v = ox_known_new(im, &t);
    if (a->n_floats) memcpy(v->k->data, a->floats, sizeof(float) * a->n_floats);
    return (n->out[0] = v);
  }
  return ox_bad(im, "a Constant given by '%s' is not supported", name);
}

bool ox_op_constant_of_shape(Imp *im, ONode *n) {
  Val *s = ox_in_req(im, n, 0);
  int64_t shape[64];
  bool dynamic[64];
  int k;
  if (!s || !ox_bounded_ints(im, s, "the shape", &k, shape, dynamic)) return false;
  if (k > DL_MAX_RANK) return ox_bad(im, "rank %d is not supported", k);
  double value = 0;
  DType dt = TY_F32;
  const Onnx__AttributeProto *a = ox_find_attr(im, "value");
  if (a) {
    Tensor t;
    char err[512];
    if (!a->t) return ox_bad(im, "attribute 'value' must be a tensor");
    if (!ox_tensor_from_proto(a->t, im->dir, &t, err, sizeof err)) return ox_bad(im, "value: %s", err);
    if (ir_type_numel(&t.type) != 1) {
      ir_tensor_free(&t);
      return ox_bad(im, "value must hold one element");
    }
    value = ir_tensor_get(&t, 0);
    dt = t.type.dtype;
    ir_tensor_free(&t);
  }
  for (int i = 0; i < k; i++)
    if (shape[i] < 0) return ox_bad(im, "shape entry %" PRId64 " is negative", shape[i]);
  TensorType t = ir_type_make(dt, k, shape);
  if (ir_type_numel(&t) < 0) return ox_bad(im, "the shape is too large");
  /* Past what import computes (a weight the "light" test models fill
   * this way: VGG-19's fc6 is 25088 x 4096), the value broadcast at run
   * time. */
  if (ir_type_numel(&t) > im->fold_max)
    return (n->out[0] = with_lengths(im, ox_expand(im, ox_scalar(im, value, dt), k, shape), s, dynamic, k, 0)) != NULL;
  Val *v = ox_known_new(im, &t);
  for (int64_t i = 0, c = ir_type_numel(&t); i < c; i++) ir_tensor_set(v->k, i, value);
  return (n->out[0] = with_lengths(im, v, s, dynamic, k, 0));
}

/* The shape of a value of run-time length (docs/onnx.md): computed at
 * run time (ir/bounds.c puts the count in), with upper bounds, its
 * static dims, and a probe of 0 for every dim, since which axis has the
 * length is known only to ir/bounds.c. */
Val *ox_run_time_shape(Imp *im, Val *x) {
  Emit e;
  ox_begin(im, &e, OP_SHAPE_OF, 1, &x);
  Val *out[1];
  if (!ox_finish(im, &e, out)) return NULL;
  int r = x->type.rank;
  Val *up = ox_ints_val(im, r, x->type.dims), *lo = ox_ints_val(im, r, (const int64_t[DL_MAX_RANK]){0});
  out[0]->upper = up->k, out[0]->probe = lo->k;
  return out[0];
}

bool ox_op_shape(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t start, end;
  if (!x || !ox_attr_int(im, "start", 0, &start) || !ox_attr_int(im, "end", INT64_MAX, &end)) return false;
  int r = x->type.rank;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  if (x->run_time_len && end > start) {
    Val *all = ox_run_time_shape(im, x);
    return (n->out[0] = all && (start > 0 || end < r) ? ox_slice_axis(im, all, 0, start, end, 1) : all);
  }
  return (n->out[0] = ox_ints_val(im, end > start ? (int)(end - start) : 0, x->type.dims + start));
}

bool ox_op_size(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  if (x->run_time_len) {
    Val *shape = ox_run_time_shape(im, x);
    return (n->out[0] = shape ? ox_reduce(im, OP_REDUCE_PROD, shape, 1, (const int64_t[]){0}, false) : NULL);
  }
  int64_t count = ir_type_numel(&x->type);
  return (n->out[0] = ox_reshape(im, ox_ints_val(im, 1, &count), 0, NULL));
}

/* Range to a limit computed from a run-time length (an integer one, by a
 * positive delta): the values to the limit's bound, of which
 * max(0, ceil((limit - start) / delta)) are real. */
static bool range_to_bound(Imp *im, ONode *n, Val *vs, Val *vl, Val *vd) {
  double s, d;
  int one;
  int64_t limits[64];
  bool dynamic[64];
  if (!ox_const_scalar(im, vs, "start", &s) || !ox_const_scalar(im, vd, "delta", &d) ||
      !ox_bounded_ints(im, vl, "limit", &one, limits, dynamic))
    return false;
  if (one != 1) return ox_bad(im, "the limit must hold one value, not %d", one);
  int64_t l = limits[0];
  if (ir_dtype_is_float(vs->type.dtype) || d <= 0)
    return ox_bad(im, "a limit computed from a run-time length needs an integer range with a positive delta");
  double count = ceil(((double)l - s) / d);
  if (count > (double)im->fold_max) return ox_bad(im, "the range is too long");
  int64_t c = count >= 1 ? (int64_t)count : 0;
  TensorType t = ir_type_make(vs->type.dtype, 1, &c);
  Val *v = ox_known_new(im, &t);
  for (int64_t i = 0; i < c; i++) ir_tensor_set(v->k, i, s + (double)i * d);
  Val *span = ox_op2s(im, OP_ADD, ox_op2s(im, OP_SUB, vl, s), d - 1);
  Val *len = ox_op2s(im, OP_MAXIMUM, ox_op2(im, OP_DIV, span, vd), 0);
  return (n->out[0] = len ? ox_with_length(im, v, 0, len, 0) : NULL);
}

bool ox_op_range(Imp *im, ONode *n) {
  Val *vs = ox_in_req(im, n, 0), *vl = ox_in_req(im, n, 1), *vd = ox_in_req(im, n, 2);
  double s, l, d;
  if (!vs || !vl || !vd) return false;
  if (vl->upper && !vl->k && !vl->hint) return range_to_bound(im, n, vs, vl, vd);
  if (!ox_const_scalar(im, vs, "start", &s) || !ox_const_scalar(im, vl, "limit", &l) ||
      !ox_const_scalar(im, vd, "delta", &d))
    return false;
  if (d == 0) return ox_bad(im, "delta is 0");
  double count = ceil((l - s) / d);
  if (count > (double)im->fold_max) return ox_bad(im, "the range is too long");
  int64_t c = count >= 1 ? (int64_t)count : 0; /* empty when the limit is not ahead (or NaN) */
  TensorType t = ir_type_make(vs->type.dtype, 1, &c);
  Val *v = ox_known_new(im, &t);
  for (int64_t i = 0; i < c; i++) ir_tensor_set(v->k, i, s + (double)i * d);
  return (n->out[0] = v);
}
