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

/* A place of the flattened input and its value as an order-preserving
 * key, sorted by key and then place (or, for Unique's groups, by first
 * place). */
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
 * merges NaNs). */
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

/* Without an axis: the distinct values of the flattened input, sorted or
 * in the order they first occur, with the first place of each, each
 * element's place among them, and how often each occurs. */
bool ox_op_unique(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t sorted;
  if (!x || !ox_attr_int(im, "sorted", 1, &sorted)) return false;
  for (size_t i = 0; i < im->np->n_attribute; i++)
    if (strcmp(im->np->attribute[i]->name, "axis") == 0) return ox_bad(im, "the axis attribute is not supported");
  const Tensor *t = sizing_value(im, x, "the input");
  if (!t) return false;
  int64_t total = ir_type_numel(&x->type), distinct = 0;
  Val *inverse = int64_known(im, 1, &total);
  Arena *a = &im->c->arena;
  Place *p = ARENA_ARRAY(a, Place, total + 1), *g = ARENA_ARRAY(a, Place, total + 1);
  int64_t *count = ARENA_ARRAY(a, int64_t, total + 1), *rank = ARENA_ARRAY(a, int64_t, total + 1);
  for (int64_t i = 0; i < total; i++) p[i] = (Place){value_key(t, i), i};
  qsort(p, (size_t)total, sizeof *p, by_key);
  /* g[k]: the k-th distinct value's first place (as its key), its group
   * in sorted order */
  int64_t *group = ((int64_t *)inverse->k->data);
  for (int64_t i = 0; i < total; i++) {
    if (i == 0 || p[i].key != p[i - 1].key) g[distinct] = (Place){(uint64_t)p[i].i, distinct}, distinct++;
    count[distinct - 1]++;
    group[p[i].i] = distinct - 1;
  }
  if (!sorted) qsort(g, (size_t)distinct, sizeof *g, by_key);
  for (int64_t k = 0; k < distinct; k++) rank[g[k].i] = k;
  for (int64_t i = 0; i < total; i++) group[i] = rank[group[i]];
  TensorType yt = ir_type_make(x->type.dtype, 1, &distinct);
  Val *y = ox_known_new(im, &yt), *first = int64_known(im, 1, &distinct), *counts = int64_known(im, 1, &distinct);
  size_t es = (size_t)ir_dtype_size(x->type.dtype);
  for (int64_t k = 0; k < distinct; k++) {
    int64_t at = (int64_t)g[k].key;
    memcpy((char *)y->k->data + (size_t)k * es, (const char *)t->data + (size_t)at * es, es);
    ((int64_t *)first->k->data)[k] = at;
    ((int64_t *)counts->k->data)[k] = count[g[k].i];
  }
  Val *outs[4] = {y, first, inverse, counts};
  for (int i = 0; i < n->n_out && i < 4; i++) n->out[i] = outs[i];
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
                nms_scalar(im, ox_in_opt(n, 4), "score_threshold", TY_F32, -INFINITY)};
  for (int i = 0; i < 5; i++)
    if (!in[i]) return false;
  Emit e;
  Node *node = ox_begin(im, &e, OP_NMS, 5, in);
  ir_set_int(im->g, node, "bound", bound);
  ir_set_int(im->g, node, "center_point_box", centers);
  Val *out[2];
  if (!ox_finish(im, &e, out)) return false;
  if (out[0]->k && out[1]->k) /* every operand known: the rows selected, a constant */
    return (n->out[0] = ox_slice_axis(im, out[0], 0, 0, *(const int64_t *)out[1]->k->data, 1));
  out[0]->run_time_len = true;
  return (n->out[0] = out[0]);
}
