/* The reference interpreter's data movement: takes a node and its
 * operand tensors, returns its result.  transpose, expand, concat,
 * slice, pad, the gathers and scatters, topk. */
#include <stdlib.h>
#include <string.h>

#include "eval_impl.h"

/* ---- data movement ---- */

bool eval_transpose(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int np;
  const int64_t *perm = ir_attr_ints(n, "perm", &np);
  const TensorType *ot = &out->type;
  if (np != x->type.rank || np != ot->rank) return fail(e, "perm does not match the rank");
  int64_t xst[DL_MAX_RANK], st[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(&x->type, xst);
  for (int i = 0; i < np; i++) {
    if (perm[i] < 0 || perm[i] >= np) return fail(e, "perm entry out of range");
    st[i] = xst[perm[i]];
  }
  int64_t count = numel(ot);
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    copy_elem(out, i, x, dot_idx(idx, st, np));
  }
  return true;
}

bool eval_expand(Eval *e, const Tensor *x, Tensor *out) {
  int64_t st[DL_MAX_RANK], idx[DL_MAX_RANK];
  const TensorType *ot = &out->type;
  if (x->type.rank > ot->rank) return fail(e, "result rank below the operand's");
  bcast_strides(&x->type, ot, st);
  int64_t count = numel(ot);
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    copy_elem(out, i, x, dot_idx(idx, st, ot->rank));
  }
  return true;
}

bool eval_concat(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *out) {
  const TensorType *ot = &out->type;
  int axis = norm_axis(ir_attr_int(n, "axis"), ot->rank);
  if (axis < 0 || axis >= ot->rank) return fail(e, "axis out of range");
  int64_t ost[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(ot, ost);
  int64_t offset = 0;
  for (int k = 0; k < n_in; k++) {
    const TensorType *t = &in[k]->type;
    if (t->rank != ot->rank) return fail(e, "operand %d has another rank", k);
    int64_t count = numel(t);
    for (int64_t i = 0; i < count; i++) {
      unravel(i, t, idx);
      idx[axis] += offset;
      copy_elem(out, dot_idx(idx, ost, ot->rank), in[k], i);
    }
    offset += t->dims[axis];
  }
  if (offset != ot->dims[axis]) return fail(e, "result type does not fit the operands");
  return true;
}

bool eval_slice(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int ns, ne, nst;
  const int64_t *starts = ir_attr_ints(n, "starts", &ns);
  const int64_t *ends = ir_attr_ints(n, "ends", &ne);
  const int64_t *steps = ir_attr_ints(n, "steps", &nst);
  const TensorType *ot = &out->type;
  int r = x->type.rank;
  if (ns != r || ne != r || nst != r || ot->rank != r) return fail(e, "needs one entry per dim");
  for (int i = 0; i < r; i++)
    if (steps[i] < 1 || starts[i] < 0 ||
        (ot->dims[i] > 0 && starts[i] + (ot->dims[i] - 1) * steps[i] >= x->type.dims[i]))
      return fail(e, "dim %d: slice out of range", i);
  (void)ends;
  int64_t xst[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(&x->type, xst);
  int64_t count = numel(ot);
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    int64_t src = 0;
    for (int d = 0; d < r; d++) src += (starts[d] + idx[d] * steps[d]) * xst[d];
    copy_elem(out, i, x, src);
  }
  return true;
}

bool eval_pad(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int np;
  const int64_t *pads = ir_attr_ints(n, "pads", &np);
  const TensorType *ot = &out->type;
  int r = x->type.rank;
  if (np != 2 * r || ot->rank != r) return fail(e, "pads needs 2 entries per dim");
  Tensor fill;
  TensorType one = {.dtype = ot->dtype, .rank = 0};
  if (!ir_tensor_alloc(&fill, &one)) return fail(e, "out of memory");
  ir_tensor_set(&fill, 0, ir_attr_float(n, "value"));
  int64_t xst[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(&x->type, xst);
  int64_t count = numel(ot);
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    int64_t src = 0;
    bool inside = true;
    for (int d = 0; d < r; d++) {
      int64_t s = idx[d] - pads[d];
      if (s < 0 || s >= x->type.dims[d]) inside = false;
      src += s * xst[d];
    }
    if (inside)
      copy_elem(out, i, x, src);
    else
      copy_elem(out, i, &fill, 0);
  }
  ir_tensor_free(&fill);
  return true;
}

bool eval_gather(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
  const TensorType *dt = &data->type, *it = &ind->type, *ot = &out->type;
  int axis = norm_axis(ir_attr_int(n, "axis"), dt->rank);
  if (axis < 0 || axis >= dt->rank) return fail(e, "axis out of range");
  if (!is_int(ind)) return fail(e, "indices must be integers");
  if (ot->rank != dt->rank - 1 + it->rank) return fail(e, "result type does not fit the operands");
  int64_t dst[DL_MAX_RANK], ist[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(dt, dst);
  strides_of(it, ist);
  int64_t dim = dt->dims[axis], count = numel(ot);
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    int64_t ii = 0;
    for (int d = 0; d < it->rank; d++) ii += idx[axis + d] * ist[d];
    int64_t v = get_i(ind, ii), at = v < 0 ? v + dim : v;
    if (at < 0 || at >= dim)
      return fail(e, "index %" PRId64 " is out of range for axis %d of size %" PRId64, v, axis, dim);
    int64_t src = at * dst[axis];
    for (int d = 0; d < axis; d++) src += idx[d] * dst[d];
    for (int d = axis + 1; d < dt->rank; d++) src += idx[d - 1 + it->rank] * dst[d];
    copy_elem(out, i, data, src);
  }
  return true;
}

/* ---- indexing by data ---- */

/* Index v into an axis of size dim, negative from the end. */
static bool index_at(Eval *e, int64_t v, int64_t dim, int axis, int64_t *at) {
  *at = v < 0 ? v + dim : v;
  if (*at < 0 || *at >= dim)
    return fail(e, "index %" PRId64 " is out of range for axis %d of size %" PRId64, v, axis, dim);
  return true;
}

bool eval_gather_elements(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
  const TensorType *dt = &data->type, *it = &ind->type;
  int axis = norm_axis(ir_attr_int(n, "axis"), dt->rank);
  if (axis < 0 || axis >= dt->rank || it->rank != dt->rank || !is_int(ind))
    return fail(e, "indices %s do not fit data", ir_dtype_name(it->dtype));
  int64_t dst[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(dt, dst);
  for (int64_t i = 0, count = numel(it); i < count; i++) {
    unravel(i, it, idx);
    if (!index_at(e, get_i(ind, i), dt->dims[axis], axis, &idx[axis])) return false;
    copy_elem(out, i, data, dot_idx(idx, dst, dt->rank));
  }
  return true;
}

bool eval_gather_nd(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
  const TensorType *dt = &data->type, *it = &ind->type, *ot = &out->type;
  int b = (int)ir_attr_int(n, "batch_dims"), rows = it->rank - 1;
  int q = rows >= 0 ? (int)it->dims[rows] : 0;
  if (!is_int(ind) || rows < b || b + q > dt->rank) return fail(e, "indices do not fit data");
  /* out's coordinates: the index row's (batch dims first), then the
   * slice of data after the indexed dims. */
  TensorType row_t = *it;
  row_t.rank = rows;
  int64_t dst[DL_MAX_RANK], rst[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(dt, dst);
  strides_of(&row_t, rst);
  for (int64_t i = 0, count = numel(ot); i < count; i++) {
    unravel(i, ot, idx);
    int64_t row = dot_idx(idx, rst, rows) * q, src = 0;
    for (int d = 0; d < b; d++) src += idx[d] * dst[d];
    for (int j = 0; j < q; j++) {
      int64_t at;
      if (!index_at(e, get_i(ind, row + j), dt->dims[b + j], b + j, &at)) return false;
      src += at * dst[b + j];
    }
    for (int d = b + q; d < dt->rank; d++) src += idx[rows + d - b - q] * dst[d];
    copy_elem(out, i, data, src);
  }
  return true;
}

typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } Reduction;

static Reduction reduction_of(const Node *n) {
  const char *r = ir_attr_str(n, "reduction");
  return strcmp(r, "add") == 0   ? RED_ADD
         : strcmp(r, "mul") == 0 ? RED_MUL
         : strcmp(r, "max") == 0 ? RED_MAX
         : strcmp(r, "min") == 0 ? RED_MIN
                                 : RED_NONE;
}

/* out[o] combined with upd[u]: each combination rounded to out's dtype,
 * as a kernel applying the updates one by one computes it. */
static void scatter_one(Reduction red, Tensor *out, int64_t o, const Tensor *upd, int64_t u) {
  if (red == RED_NONE) {
    copy_elem(out, o, upd, u);
    return;
  }
  static const OpKind ops[] = {[RED_ADD] = OP_ADD, [RED_MUL] = OP_MUL, [RED_MAX] = OP_MAXIMUM,
                               [RED_MIN] = OP_MINIMUM};
  if (is_int(out)) {
    int64_t a = get_i(out, o), b = get_i(upd, u);
    int64_t r = red == RED_ADD   ? wadd(a, b)
                : red == RED_MUL ? wmul(a, b)
                : red == RED_MAX ? (a > b ? a : b)
                                 : (a < b ? a : b);
    set_i(out, o, r);
    return;
  }
  ir_tensor_set(out, o, binary_f(ops[red], ir_tensor_get(out, o), ir_tensor_get(upd, u)));
}

bool eval_scatter_elements(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *data = in[0], *ind = in[1], *upd = in[2];
  const TensorType *dt = &data->type, *it = &ind->type;
  int axis = norm_axis(ir_attr_int(n, "axis"), dt->rank);
  if (axis < 0 || axis >= dt->rank || it->rank != dt->rank || !is_int(ind) || numel(&upd->type) != numel(it))
    return fail(e, "indices and updates do not fit data");
  memcpy(out->data, data->data, ir_tensor_nbytes(dt));
  Reduction red = reduction_of(n);
  int64_t dst[DL_MAX_RANK], idx[DL_MAX_RANK];
  strides_of(dt, dst);
  for (int64_t i = 0, count = numel(it); i < count; i++) {
    unravel(i, it, idx);
    if (!index_at(e, get_i(ind, i), dt->dims[axis], axis, &idx[axis])) return false;
    scatter_one(red, out, dot_idx(idx, dst, dt->rank), upd, i);
  }
  return true;
}

bool eval_scatter_nd(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *data = in[0], *ind = in[1], *upd = in[2];
  const TensorType *dt = &data->type, *it = &ind->type;
  int q = it->rank ? (int)it->dims[it->rank - 1] : 0;
  if (!is_int(ind) || q < 1 || q > dt->rank) return fail(e, "indices do not fit data");
  int64_t dst[DL_MAX_RANK], slice = 1;
  strides_of(dt, dst);
  for (int d = q; d < dt->rank; d++) slice *= dt->dims[d];
  int64_t rows = numel(it) / q;
  if (numel(&upd->type) != rows * slice) return fail(e, "updates do not fit the indices");
  memcpy(out->data, data->data, ir_tensor_nbytes(dt));
  Reduction red = reduction_of(n);
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = 0;
    for (int j = 0; j < q; j++) {
      int64_t at;
      if (!index_at(e, get_i(ind, r * q + j), dt->dims[j], j, &at)) return false;
      base += at * dst[j];
    }
    for (int64_t s = 0; s < slice; s++) scatter_one(red, out, base + s, upd, r * slice + s);
  }
  return true;
}

/* x[i] against x[j] as numbers (-1, 0, 1), NaN above every number. */
static int compare_elems(const Tensor *x, int64_t i, int64_t j) {
  if (is_int(x)) {
    int64_t a = get_i(x, i), b = get_i(x, j);
    return (a > b) - (a < b);
  }
  double a = ir_tensor_get(x, i), b = ir_tensor_get(x, j);
  if (isnan(a) || isnan(b)) return (isnan(a) != 0) - (isnan(b) != 0);
  return (a > b) - (a < b);
}

/* Columns past the count stay 0 (ops.def): the output is allocated
 * zeroed, and the kernel writes them so. */
void eval_nonzero(const Tensor *x, Tensor *outs) {
  const TensorType *t = &x->type;
  int64_t total = ir_type_numel(t), cols = outs[0].type.dims[1], count = 0, st[DL_MAX_RANK];
  ir_type_strides(t, st);
  int64_t *coords = outs[0].data;
  for (int64_t i = 0; i < total; i++) {
    if (ir_tensor_get(x, i) == 0) continue;
    for (int d = 0; d < t->rank; d++) coords[d * cols + count] = i / st[d] % t->dims[d];
    count++;
  }
  *(int64_t *)outs[1].data = count;
}

/* Python's max and min, as the ONNX reference takes them (NaN aside,
 * fmaxf's and fminf's values); the kernel makes the same selects. */
static float py_max(float a, float b) { return b > a ? b : a; }
static float py_min(float a, float b) { return b < a ? b : a; }

/* Whether box a (the candidate) is dropped by box b (kept), in f32 in
 * the ONNX reference's order of operations, which the kernel repeats:
 * corners [y1, x1, y2, x2] in either order, or [x, y, w, h] centers. */
static bool nms_suppresses(const float *a, const float *b, bool centers, float iou_threshold) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (centers) {
    ax0 = a[0] - a[2] / 2, ax1 = a[0] + a[2] / 2, ay0 = a[1] - a[3] / 2, ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2, bx1 = b[0] + b[2] / 2, by0 = b[1] - b[3] / 2, by1 = b[1] + b[3] / 2;
  } else {
    ax0 = a[1] >= a[3] ? a[3] : a[1], ax1 = a[1] >= a[3] ? a[1] : a[3];
    ay0 = a[0] >= a[2] ? a[2] : a[0], ay1 = a[0] >= a[2] ? a[0] : a[2];
    bx0 = b[1] >= b[3] ? b[3] : b[1], bx1 = b[1] >= b[3] ? b[1] : b[3];
    by0 = b[0] >= b[2] ? b[2] : b[0], by1 = b[0] >= b[2] ? b[0] : b[2];
  }
  float ix0 = py_max(ax0, bx0), ix1 = py_min(ax1, bx1), iy0 = py_max(ay0, by0), iy1 = py_min(ay1, by1);
  if (!(ix1 > ix0) || !(iy1 > iy0)) return false;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  float uni = area_a + area_b - inter;
  if (!(inter > 0) || !(area_a > 0) || !(area_b > 0) || !(uni > 0)) return false;
  return inter / uni > iou_threshold;
}

/* Each class of each batch in turn (ops.def): the candidates in order
 * of score by selection (the next is the best of those after the last),
 * each checked against the boxes its class kept so far. */
void eval_nms(const Node *n, Tensor *const *in, Tensor *outs) {
  const TensorType *bt = &in[1]->type;
  int64_t B = bt->dims[0], C = bt->dims[1], N = bt->dims[2], bound = ir_attr_int(n, "bound");
  bool centers = ir_attr_int(n, "center_point_box") != 0, use_floor = ir_attr_int(n, "use_floor") != 0;
  const float *boxes = in[0]->data, *scores = in[1]->data;
  int64_t most = *(const int64_t *)in[2]->data;
  float iou = *(const float *)in[3]->data, floor_score = *(const float *)in[4]->data;
  most = most < 0 ? 0 : most > bound ? bound : most;
  int64_t *rows = outs[0].data, count = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      const float *s = scores + (b * C + c) * N;
      int64_t kept = 0, prev = -1;
      for (int64_t step = 0; step < N && kept < most; step++) {
        int64_t best = -1;
        for (int64_t t = 0; t < N; t++) {
          if (use_floor && !(s[t] > floor_score)) continue;
          bool after = prev < 0 || s[t] < s[prev] || (s[t] == s[prev] && t > prev);
          bool better = best < 0 || s[t] > s[best];
          if (after && better) best = t;
        }
        if (best < 0) break;
        prev = best;
        bool keep = true;
        for (int64_t k = count - kept; k < count && keep; k++)
          keep = !nms_suppresses(boxes + (b * N + best) * 4, boxes + (b * N + rows[3 * k + 2]) * 4, centers, iou);
        if (!keep) continue;
        rows[3 * count] = b, rows[3 * count + 1] = c, rows[3 * count + 2] = best;
        count++, kept++;
      }
    }
  *(int64_t *)outs[1].data = count;
}

/* A place of x and its value as an order-preserving key, sorted by key
 * and then place (or, for unique's groups, by first place). */
typedef struct Place {
  uint64_t key;
  int64_t i;
} Place;

static int by_key(const void *a, const void *b) {
  const Place *p = a, *q = b;
  return p->key < q->key ? -1 : p->key > q->key ? 1 : (p->i > q->i) - (p->i < q->i);
}

/* Element i of t as a key ordered as the values are and equal exactly
 * when they are: integers exact (no rounding through a double above
 * 2^53), -0.0 as 0.0, every NaN one key above +inf (NumPy's unique
 * merges NaN values; eval_unique keeps rows with one apart). */
static uint64_t value_key(const Tensor *t, int64_t i) {
  const void *at = (const char *)t->data + (size_t)i * (size_t)ir_dtype_size(t->type.dtype);
  const uint64_t sign = 1ull << 63;
  switch (t->type.dtype) {
    case TY_I8: return (uint64_t)(int64_t)*(const int8_t *)at ^ sign;
    case TY_I16: return (uint64_t)(int64_t)*(const int16_t *)at ^ sign;
    case TY_I32: return (uint64_t)(int64_t)*(const int32_t *)at ^ sign;
    case TY_I64: {
      int64_t v;
      memcpy(&v, at, sizeof v);
      return (uint64_t)v ^ sign;
    }
    case TY_U8:
    case TY_BOOL: return *(const uint8_t *)at;
    case TY_U16: return *(const uint16_t *)at;
    case TY_U32: return *(const uint32_t *)at;
    case TY_U64: {
      uint64_t v;
      memcpy(&v, at, sizeof v);
      return v;
    }
    default: break;
  }
  double d = ir_tensor_get(t, i);
  if (d != d) return UINT64_MAX;
  if (d == 0) d = 0; /* -0.0 */
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  return bits & sign ? ~bits : bits | sign;
}

/* Rows a and b of keys (m each) in order, then by place. */
static int row_order(const uint64_t *keys, int64_t m, int64_t a, int64_t b) {
  for (int64_t c = 0; c < m; c++) {
    uint64_t x = keys[a * m + c], y = keys[b * m + c];
    if (x != y) return x < y ? -1 : 1;
  }
  return (a > b) - (a < b);
}

/* A stable merge sort of row places by row_order (qsort has no context). */
static void sort_rows(const uint64_t *keys, int64_t m, int64_t *at, int64_t *tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  sort_rows(keys, m, at, tmp, h);
  sort_rows(keys, m, at + h, tmp, n - h);
  int64_t i = 0, j = h, o = 0;
  while (i < h && j < n) tmp[o++] = row_order(keys, m, at[j], at[i]) < 0 ? at[j++] : at[i++];
  while (i < h) tmp[o++] = at[i++];
  while (j < n) tmp[o++] = at[j++];
  memcpy(at, tmp, sizeof *at * (size_t)n);
}

/* By sorting rows by their elements' keys (the kernel, in one thread,
 * selects instead): groups of equal rows in sorted order, then,
 * unsorted, by first place.  A 1-d x is rows of one, its NaNs one value;
 * a row of a 2-d x with a NaN equals no other (NumPy's unique(axis=...)
 * compares rows element by element, and NaN != NaN), and the stable sort
 * keeps such rows of equal keys in their order. */
bool eval_unique(Eval *e, const Node *n, const Tensor *x, Tensor *outs) {
  int64_t rows = x->type.dims[0], m = x->type.rank == 2 ? x->type.dims[1] : 1, distinct = 0;
  uint64_t *keys = malloc(sizeof *keys * (size_t)(rows * m + 1));
  int64_t *at = malloc(sizeof *at * (size_t)(rows + 1)), *tmp = malloc(sizeof *tmp * (size_t)(rows + 1));
  Place *g = malloc(sizeof *g * (size_t)(rows + 1));
  int64_t *rank = malloc(sizeof *rank * (size_t)(rows + 1));
  if (!keys || !at || !tmp || !g || !rank) {
    free(keys), free(at), free(tmp), free(g), free(rank);
    return fail(e, "out of memory");
  }
  int64_t *first = outs[1].data, *group = outs[2].data, *counts = outs[3].data;
  for (int64_t i = 0; i < rows * m; i++) keys[i] = value_key(x, i);
  for (int64_t i = 0; i < rows; i++) at[i] = i;
  sort_rows(keys, m, at, tmp, rows);
  /* g[k]: the k-th distinct row's first place (as its key) and its
   * group in sorted order */
  bool rows_apart = x->type.rank == 2 && ir_dtype_is_float(x->type.dtype);
  for (int64_t i = 0; i < rows; i++) {
    bool fresh = i == 0 || memcmp(keys + at[i] * m, keys + at[i - 1] * m, sizeof *keys * (size_t)m) != 0;
    for (int64_t c = 0; rows_apart && !fresh && c < m; c++) fresh = keys[at[i] * m + c] == UINT64_MAX;
    if (fresh) g[distinct] = (Place){(uint64_t)at[i], distinct}, distinct++;
    counts[distinct - 1]++;
    group[at[i]] = distinct - 1;
  }
  if (!ir_attr_int(n, "sorted")) qsort(g, (size_t)distinct, sizeof *g, by_key);
  for (int64_t k = 0; k < distinct; k++) rank[g[k].i] = k;
  for (int64_t i = 0; i < rows; i++) group[i] = rank[group[i]];
  /* counts by sorted group, into the order of g */
  for (int64_t k = 0; k < distinct; k++) rank[k] = counts[g[k].i];
  size_t row_bytes = (size_t)ir_dtype_size(x->type.dtype) * (size_t)m;
  for (int64_t k = 0; k < distinct; k++) {
    int64_t from = (int64_t)g[k].key;
    memcpy((char *)outs[0].data + (size_t)k * row_bytes, (const char *)x->data + (size_t)from * row_bytes, row_bytes);
    first[k] = from;
    counts[k] = rank[k];
  }
  for (int64_t k = distinct; k < rows; k++) counts[k] = 0;
  *(int64_t *)outs[4].data = distinct;
  free(keys), free(at), free(tmp), free(g), free(rank);
  return true;
}

/* The k first of each row in topk's order, by selection: the j-th is the
 * first of the elements that come after the (j-1)-th, so nothing needs
 * sorting or marking (the kernel does the same). */
bool eval_topk(Eval *e, const Node *n, const Tensor *x, Tensor *outs) {
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  int64_t k = ir_attr_int(n, "k");
  bool largest = ir_attr_int(n, "largest") != 0;
  if (axis < 0 || axis >= x->type.rank || k < 1 || k > x->type.dims[axis])
    return fail(e, "k does not fit axis");
  int64_t outer, len, inner;
  split_axis(&x->type, axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in, prev = -1;
      for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t t = 0; t < len; t++) {
          /* t comes before u: a larger (smaller) value, or an equal one
           * at a lower index. */
          bool after_prev = prev < 0;
          if (!after_prev) {
            int c = compare_elems(x, base + prev * inner, base + t * inner);
            after_prev = (largest ? c > 0 : c < 0) || (c == 0 && prev < t);
          }
          if (!after_prev) continue;
          if (best >= 0) {
            int c = compare_elems(x, base + t * inner, base + best * inner);
            if (!((largest ? c > 0 : c < 0) || (c == 0 && t < best))) continue;
          }
          best = t;
        }
        int64_t dst = (o * k + j) * inner + in;
        copy_elem(&outs[0], dst, x, base + best * inner);
        set_i(&outs[1], dst, best);
        prev = best;
      }
    }
  return true;
}
