/* ONNX's ops whose output size depends on data: takes NonZero, Compress
 * and Unique nodes and returns their values.  dlcc's plans have static
 * shapes.  When the data that decides the size is known at import (an
 * initializer, a Constant, what follows from them, or an integer or bool
 * graph input's value that the caller hands the importer,
 * OnnxOptions.known, which promises that value), NonZero and Unique of
 * it are constants and Compress gathers at the positions it selects.
 * Otherwise NonZero and Compress give an upper bound and a run-time
 * length (ir/bounds.c, docs/onnx.md); Unique needs its input known. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* v's value when import knows it, else an error naming what needs it. */
static const Tensor *sizing_value(Imp *im, Val *v, const char *what) {
  if (v->k) return v->k;
  if (v->hint && v->hint_flows) return v->hint;
  ox_bad(im,
         "%s computed at run time is not supported: the output's size depends on its values, and dlcc's plans "
         "have static shapes; it must be an initializer, a Constant, follow from them, or be an integer or bool "
         "input given at import",
         what);
  return NULL;
}

static Val *int64_known(Imp *im, int rank, const int64_t *dims) {
  TensorType t = ir_type_make(TY_I64, rank, dims);
  return ox_known_new(im, &t);
}

static bool known_at_import(const Val *v) { return v->k || (v->hint && v->hint_flows); }

/* NonZero of a value computed at run time: its columns up to the
 * input's size, of which the count are real (ops.def's nonzero). */
static Val *run_time_nonzero(Imp *im, Val *x) {
  if (ir_type_numel(&x->type) == 0) { /* no element, no coordinates */
    TensorType none = ir_type_make(TY_I64, 2, (const int64_t[]){x->type.rank, 0});
    return ox_known_new(im, &none);
  }
  Emit e;
  ox_begin(im, &e, OP_NONZERO, 1, &x);
  Val *out[2];
  if (!ox_finish(im, &e, out)) return NULL;
  out[0]->run_time_len = true;
  return out[0];
}

bool ox_op_nonzero(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  int r = x->type.rank;
  if (r == 0) return ox_bad(im, "a 0-d input is not supported");
  if (!known_at_import(x)) return (n->out[0] = run_time_nonzero(im, x));
  const Tensor *t = sizing_value(im, x, "the input");
  if (!t) return false;
  int64_t total = ir_type_numel(&x->type), count = 0;
  for (int64_t i = 0; i < total; i++) count += ir_tensor_get(t, i) != 0;
  Val *y = int64_known(im, 2, (const int64_t[]){r, count});
  int64_t *out = y->k->data, st[DL_MAX_RANK];
  ir_type_strides(&x->type, st);
  for (int64_t i = 0, j = 0; i < total; i++) {
    if (ir_tensor_get(t, i) == 0) continue;
    for (int d = 0; d < r; d++) out[d * count + j] = i / st[d] % x->type.dims[d];
    j++;
  }
  return (n->out[0] = y);
}

/* The slices of input along axis (the flattened input without one)
 * where condition is true; a condition shorter than the axis selects
 * from its first places only. */
bool ox_op_compress(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *c = ox_in_req(im, n, 1);
  if (!x || !c) return false;
  bool has_axis = false;
  for (size_t i = 0; i < im->np->n_attribute; i++) has_axis |= strcmp(im->np->attribute[i]->name, "axis") == 0;
  int64_t axis_attr;
  int axis = 0;
  if (!ox_attr_int(im, "axis", 0, &axis_attr)) return false;
  if (has_axis && !ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  if (!has_axis) {
    int64_t total = ir_type_numel(&x->type);
    x = ox_reshape(im, x, 1, &total);
    if (!x) return false;
  }
  int64_t len = ir_type_numel(&c->type), dim = x->type.dims[axis], count = 0;
  if (c->type.rank != 1) return ox_bad(im, "the condition must be 1-d, got rank %d", c->type.rank);
  if (len > dim)
    return ox_bad(im, "the condition has %" PRId64 " values, more than the %" PRId64 " of axis %d", len, dim, axis);
  if (!known_at_import(c)) {
    /* The positions the condition selects, of run-time length. */
    Val *idx = ox_reshape(im, run_time_nonzero(im, c), 1, &len);
    Val *y = idx ? ox_gather(im, x, idx, axis) : NULL;
    if (y) y->run_time_len = true;
    return (n->out[0] = y);
  }
  const Tensor *ct = sizing_value(im, c, "the condition");
  if (!ct) return false;
  for (int64_t i = 0; i < len; i++) count += ir_tensor_get(ct, i) != 0;
  Val *idx = int64_known(im, 1, &count);
  int64_t *at = idx->k->data;
  for (int64_t i = 0, j = 0; i < len; i++)
    if (ir_tensor_get(ct, i) != 0) at[j++] = i;
  return (n->out[0] = ox_gather(im, x, idx, axis));
}

/* Without an axis: the distinct values of the flattened input, sorted or
 * in the order they first occur, with the first place of each, each
 * element's place among them, and how often each occurs (ops.def's
 * unique).  Of a value known at import, constants cut to the count; of
 * one computed at run time, of run-time length (ir/bounds.c). */
bool ox_op_unique(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t sorted, axis_attr;
  if (!x || !ox_attr_int(im, "sorted", 1, &sorted) || !ox_attr_int(im, "axis", 0, &axis_attr)) return false;
  bool has_axis = false;
  for (size_t i = 0; i < im->np->n_attribute; i++) has_axis |= strcmp(im->np->attribute[i]->name, "axis") == 0;
  int axis = 0, r = x->type.rank;
  if (has_axis && !ox_norm_axis(im, axis_attr, r, &axis)) return false;
  int64_t total = ir_type_numel(&x->type);
  if (total == 0 && has_axis) return ox_bad(im, "Unique over an axis of an empty tensor is not supported");
  if (total == 0) { /* nothing to tell apart */
    TensorType none = ir_type_make(x->type.dtype, 1, &total), ids = ir_type_make(TY_I64, 1, &total);
    Val *outs[4] = {ox_known_new(im, &none), ox_known_new(im, &ids), ox_known_new(im, &ids), ox_known_new(im, &ids)};
    for (int i = 0; i < n->n_out && i < 4; i++) n->out[i] = outs[i];
    return true;
  }
  if (known_at_import(x) && (!x->k || ox_is_weight(im, x))) {
    /* Known at import (a weight's data, a promised input): a constant
     * of its values, which import folds. */
    Tensor copy;
    if (!ir_tensor_alloc(&copy, &x->type)) return ox_bad(im, "out of memory");
    memcpy(copy.data, (x->k ? x->k : x->hint)->data, ir_tensor_nbytes(&x->type));
    x = ox_known(im, copy);
  }
  /* Over an axis: its slices as the rows of a 2-d tensor, the axis moved
   * first (and back after). */
  int64_t perm[DL_MAX_RANK], back[DL_MAX_RANK];
  perm[0] = axis;
  for (int d = 0, j = 1; d < r; d++)
    if (d != axis) perm[j++] = d;
  for (int d = 0; d < r; d++) back[perm[d]] = d;
  Val *rows = has_axis ? ox_reshape(im, ox_transpose(im, x, perm), 2,
                                    (const int64_t[]){x->type.dims[axis], total / x->type.dims[axis]})
                       : ox_reshape(im, x, 1, &total);
  if (!rows) return false;
  Emit e;
  Node *node = ox_begin(im, &e, OP_UNIQUE, 1, &rows);
  ir_set_int(im->g, node, "sorted", sorted != 0);
  Val *out[5];
  if (!ox_finish(im, &e, out)) return false;
  bool known = out[4]->k != NULL;
  int64_t count = known ? *(const int64_t *)out[4]->k->data : 0;
  for (int i = 0; i < 4; i++) {
    if (i != 2 && known) out[i] = ox_slice_axis(im, out[i], 0, 0, count, 1);
    else if (i != 2) out[i]->run_time_len = true;
    if (!out[i]) return false;
  }
  if (has_axis) { /* the rows back into slices along axis */
    bool len = out[0]->run_time_len;
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < r; d++) dims[d] = d ? x->type.dims[perm[d]] : out[0]->type.dims[0];
    out[0] = ox_transpose(im, ox_reshape(im, out[0], r, dims), back);
    if (!out[0]) return false;
    out[0]->run_time_len = len;
  }
  for (int i = 0; i < n->n_out && i < 4; i++) n->out[i] = out[i];
  return true;
}

/* A one-element operand of NonMaxSuppression as a scalar of dtype dt,
 * or def when absent. */
static Val *nms_scalar(Imp *im, Val *v, const char *what, DType dt, double def) {
  if (!v) return ox_scalar(im, def, dt);
  if (ir_type_numel(&v->type) != 1) {
    char buf[IR_TYPE_STR_MAX];
    ox_bad(im, "%s must hold one value, got %s", what, ir_type_str(&v->type, buf, sizeof buf));
    return NULL;
  }
  return ox_cast(im, ox_reshape(im, v, 0, NULL), dt);
}

/* NonMaxSuppression (ops.def's nms): the rows a run selects, of
 * run-time length (ir/bounds.c).  max_output_boxes_per_class known at
 * import bounds the rows per class (absent: 0, nothing selected, as
 * ONNX's default); computed at run time, every box may be.  Without a
 * score_threshold every score counts. */
bool ox_op_nms(Imp *im, ONode *n) {
  Val *boxes = ox_in_req(im, n, 0), *scores = ox_in_req(im, n, 1);
  int64_t centers;
  if (!boxes || !scores || !ox_attr_int(im, "center_point_box", 0, &centers)) return false;
  if (centers != 0 && centers != 1) return ox_bad(im, "center_point_box must be 0 or 1, got %" PRId64, centers);
  const TensorType *bt = &boxes->type, *st = &scores->type;
  if (bt->rank != 3 || bt->dims[2] != 4 || st->rank != 3 || st->dims[0] != bt->dims[0] || st->dims[2] != bt->dims[1]) {
    char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
    return ox_bad(im, "boxes must be [B, N, 4] and scores [B, C, N], got %s and %s", ir_type_str(bt, a, sizeof a),
                  ir_type_str(st, b, sizeof b));
  }
  if (!ir_dtype_is_float(bt->dtype) || !ir_dtype_is_float(st->dtype))
    return ox_bad(im, "boxes and scores must be floats");
  int64_t N = bt->dims[1], bound = N;
  Val *most_in = ox_in_opt(n, 2);
  if (!most_in) {
    bound = 0;
  } else if (most_in->k && ir_type_numel(&most_in->type) == 1) {
    double v = ir_tensor_get(most_in->k, 0);
    bound = v < 0 ? 0 : v > (double)N ? N : (int64_t)v;
  }
  if (bound == 0 || st->dims[1] == 0 || bt->dims[0] == 0) { /* nothing can be selected */
    TensorType none = ir_type_make(TY_I64, 2, (const int64_t[]){0, 3});
    return (n->out[0] = ox_known_new(im, &none));
  }
  Val *in[5] = {ox_cast(im, boxes, TY_F32), ox_cast(im, scores, TY_F32),
                nms_scalar(im, most_in, "max_output_boxes_per_class", TY_I64, 0),
                nms_scalar(im, ox_in_opt(n, 3), "iou_threshold", TY_F32, 0),
                nms_scalar(im, ox_in_opt(n, 4), "score_threshold", TY_F32, 0)};
  for (int i = 0; i < 5; i++)
    if (!in[i]) return false;
  Emit e;
  Node *node = ox_begin(im, &e, OP_NMS, 5, in);
  ir_set_int(im->g, node, "bound", bound);
  ir_set_int(im->g, node, "center_point_box", centers);
  ir_set_int(im->g, node, "use_floor", ox_in_opt(n, 4) != NULL);
  Val *out[2];
  if (!ox_finish(im, &e, out)) return false;
  if (out[0]->k && out[1]->k) /* every operand known: the rows selected, a constant */
    return (n->out[0] = ox_slice_axis(im, out[0], 0, 0, *(const int64_t *)out[1]->k->data, 1));
  out[0]->run_time_len = true;
  return (n->out[0] = out[0]);
}
