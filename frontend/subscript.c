/* Python's subscripts on tensors, as PyTorch means them: x[:, 0:4],
 * x[..., :h], x[:, ::2], x[:, 0].  Takes the tensor and its evaluated
 * subscripts (lower.c), returns one slice node over every axis, followed
 * by a reshape when an int index drops an axis (a poison after
 * reporting).  Slice bounds clamp as PyTorch's do; an int index out of
 * range, a step below 1 and an empty result are errors at the subscript. */
#include <inttypes.h>
#include <stdio.h>

#include "frontend/lower.h"

/* "a:b:c" as written, absent parts left out, for messages. */
static const char *slice_text(const Subscript *s, char *buf, size_t len) {
  char part[3][24];
  for (int k = 0; k < 3; k++) {
    part[k][0] = '\0';
    if (s->has[k]) snprintf(part[k], sizeof part[k], "%" PRId64, s->v[k]);
  }
  snprintf(buf, len, "%s:%s%s%s", part[0], part[1], s->has[2] ? ":" : "", part[2]);
  return buf;
}

/* Sets [*start, *end) of one axis of size dim from subscript s; false
 * after reporting. */
static bool axis_range(Lower *l, const Subscript *s, int axis, int64_t dim, const char *type, int64_t *start,
                       int64_t *end, int64_t *step) {
  char buf[80];
  if (s->kind == SUB_INDEX) {
    int64_t k = s->v[0] < 0 ? s->v[0] + dim : s->v[0];
    if (k < 0 || k >= dim) {
      fe_error(l, s->loc, "index %" PRId64 " is out of range for axis %d (size %" PRId64 ") of %s", s->v[0], axis,
               dim, type);
      return false;
    }
    *start = k;
    *end = k + 1;
    *step = 1;
    return true;
  }
  *step = s->has[2] ? s->v[2] : 1;
  if (*step < 1) {
    fe_error(l, s->loc, "slice %s of axis %d of %s: the step must be positive (PyTorch refuses a negative or zero step too)",
             slice_text(s, buf, sizeof buf), axis, type);
    return false;
  }
  /* PyTorch's rules: negative bounds count from the end, then both clamp
   * to [0, dim]. */
  int64_t a = s->has[0] ? s->v[0] : 0, b = s->has[1] ? s->v[1] : dim;
  a = a < 0 ? a + dim : a;
  b = b < 0 ? b + dim : b;
  a = a < 0 ? 0 : a > dim ? dim : a;
  b = b < 0 ? 0 : b > dim ? dim : b;
  if (a >= b) {
    fe_error(l, s->loc,
             "slice %s of axis %d (size %" PRId64 ") of %s is empty: PyTorch clamps it to %" PRId64 ":%" PRId64
             ", an empty tensor, and dlcc has no empty tensors",
             slice_text(s, buf, sizeof buf), axis, dim, type, a, b < a ? a : b);
    return false;
  }
  *start = a;
  *end = b;
  return true;
}

Val fe_subscript(Lower *l, Value *x, int n, const Subscript *subs, SrcLoc loc) {
  const TensorType *t = &x->type;
  char type[IR_TYPE_STR_MAX];
  ir_type_str(t, type, sizeof type);
  int ellipsis = -1, n_axes = 0;
  for (int i = 0; i < n; i++) {
    if (subs[i].kind != SUB_ELLIPSIS) {
      n_axes++;
    } else if (ellipsis >= 0) {
      fe_error(l, subs[i].loc, "an index can have only one ellipsis ('...')");
      return val_poison();
    } else {
      ellipsis = i;
    }
  }
  int r = t->rank;
  if (n_axes > r) {
    fe_error(l, loc, "%d indices for %s, which has %d dims", n_axes, type, r);
    return val_poison();
  }
  int64_t ss[DL_MAX_RANK], es[DL_MAX_RANK], st[DL_MAX_RANK], shape[DL_MAX_RANK];
  bool drop[DL_MAX_RANK] = {false};
  for (int d = 0; d < r; d++) {
    ss[d] = 0;
    es[d] = t->dims[d];
    st[d] = 1;
  }
  /* Subscripts after the ellipsis take the last axes. */
  bool ok = true;
  for (int i = 0, axis = 0; i < n; i++) {
    if (subs[i].kind == SUB_ELLIPSIS) {
      axis = r - (n - 1 - i);
      continue;
    }
    ok &= axis_range(l, &subs[i], axis, t->dims[axis], type, &ss[axis], &es[axis], &st[axis]);
    drop[axis] = subs[i].kind == SUB_INDEX;
    axis++;
  }
  if (!ok) return val_poison();
  bool whole = true;
  int out_rank = 0;
  for (int d = 0; d < r; d++) {
    whole &= ss[d] == 0 && es[d] == t->dims[d] && st[d] == 1;
    if (!drop[d]) shape[out_rank++] = (es[d] - ss[d] + st[d] - 1) / st[d];
  }
  Value *y = x;
  if (!whole) {
    Node *s = fe_node(l, OP_SLICE, 1, &x, loc);
    if (!s) return val_poison();
    ir_set_ints(l->g, s, "starts", r, ss);
    ir_set_ints(l->g, s, "ends", r, es);
    ir_set_ints(l->g, s, "steps", r, st);
    y = fe_emit(l, s);
  }
  if (y && out_rank < r) {
    Node *rs = fe_node(l, OP_RESHAPE, 1, &y, loc);
    if (!rs) return val_poison();
    ir_set_ints(l->g, rs, "shape", out_rank, shape);
    y = fe_emit(l, rs);
  }
  return val_tensor(y);
}
