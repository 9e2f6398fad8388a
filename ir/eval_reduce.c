/* The reference interpreter's reductions and normalizations: takes a
 * node and its operand tensors, returns its result.  reduce_*, argmax,
 * softmax, layer/rms/group norm, attention, global average pooling and
 * batchnorm, each accumulated in double. */
#include "eval_impl.h"

/* ---- reductions ---- */

bool eval_reduce(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int n_axes;
  const int64_t *axes = ir_attr_ints(n, "axes", &n_axes);
  const TensorType *xt = &x->type;
  bool reduced[DL_MAX_RANK] = {false};
  int64_t group = 1;
  for (int k = 0; k < n_axes; k++) {
    int a = norm_axis(axes[k], xt->rank);
    if (a < 0 || a >= xt->rank) return fail(e, "axis %" PRId64 " out of range", axes[k]);
    if (!reduced[a]) group *= xt->dims[a];
    reduced[a] = true;
  }
  /* Strides into the output indexed by x's dims: 0 on reduced dims. */
  int64_t ost[DL_MAX_RANK], st[DL_MAX_RANK], idx[DL_MAX_RANK];
  TensorType kept = *xt;
  for (int i = 0; i < xt->rank; i++)
    if (reduced[i]) kept.dims[i] = 1;
  strides_of(&kept, st);
  for (int i = 0; i < xt->rank; i++) ost[i] = reduced[i] ? 0 : st[i];
  int64_t on = numel(&out->type), xn = numel(xt);
  bool ints = is_int(x) && is_int(out);
  bool is_max = n->op == OP_REDUCE_MAX, is_min = n->op == OP_REDUCE_MIN, is_prod = n->op == OP_REDUCE_PROD;
  if (n->op == OP_REDUCE_MEAN && ints && group == 0 && on > 0)
    return fail(e, "integer division by zero (mean of no elements)");
  double *accf = calloc((size_t)(on ? on : 1), sizeof(double));
  int64_t *acci = calloc((size_t)(on ? on : 1), sizeof(int64_t));
  bool *seen = calloc((size_t)(on ? on : 1), sizeof(bool));
  if (!accf || !acci || !seen) {
    free(accf), free(acci), free(seen);
    return fail(e, "out of memory");
  }
  for (int64_t i = 0; i < xn; i++) {
    unravel(i, xt, idx);
    int64_t o = dot_idx(idx, ost, xt->rank);
    if (ints) {
      int64_t v = get_i(x, i);
      if (is_max)
        acci[o] = !seen[o] || int_less(x, acci[o], v) ? v : acci[o];
      else if (is_min)
        acci[o] = !seen[o] || int_less(x, v, acci[o]) ? v : acci[o];
      else if (is_prod)
        acci[o] = seen[o] ? wmul(acci[o], v) : v;
      else
        acci[o] = wadd(acci[o], v);
    } else {
      double v = ir_tensor_get(x, i);
      if (is_prod)
        accf[o] = seen[o] ? accf[o] * v : v;
      else if (!is_max && !is_min)
        accf[o] += v;
      else if (!seen[o])
        accf[o] = v;
      else if (isnan(accf[o]))
        ; /* NaN sticks */
      else if (isnan(v) || (is_max ? v > accf[o] : v < accf[o]))
        accf[o] = v;
    }
    seen[o] = true;
  }
  /* Over no elements: max is -inf (the dtype's least integer), min +inf
   * (its greatest), as ONNX's ReduceMax/ReduceMin of an empty set. */
  int64_t ilo, ihi;
  ir_int_range(out->type.dtype, &ilo, &ihi);
  for (int64_t o = 0; o < on && (is_max || is_min); o++)
    if (!seen[o]) acci[o] = is_max ? ilo : ihi, accf[o] = is_max ? -INFINITY : INFINITY;
  for (int64_t o = 0; o < on; o++) {
    if (ints) {
      int64_t v = is_prod && !seen[o] ? 1 : acci[o]; /* the empty product */
      if (n->op == OP_REDUCE_MEAN) v = is_u64(x) ? (int64_t)((uint64_t)v / (uint64_t)group) : v / group;
      set_i(out, o, v);
    } else {
      double v = is_prod && !seen[o] ? 1 : accf[o];
      if (n->op == OP_REDUCE_MEAN) v = v / (double)group;
      ir_tensor_set(out, o, v);
    }
  }
  free(accf), free(acci), free(seen);
  return true;
}

bool eval_argmax(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  if (axis < 0 || axis >= x->type.rank) return fail(e, "axis out of range");
  int64_t outer, len, inner;
  split_axis(&x->type, axis, &outer, &len, &inner);
  if (len == 0 && outer * inner > 0) return fail(e, "argmax over an empty axis");
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = 0;
      for (int64_t k = 1; k < len; k++) {
        int64_t ib = (o * len + best) * inner + in, ik = (o * len + k) * inner + in;
        if (is_int(x)) {
          if (int_less(x, get_i(x, ib), get_i(x, ik))) best = k;
        } else {
          double vb = ir_tensor_get(x, ib), vk = ir_tensor_get(x, ik);
          if (!isnan(vb) && (isnan(vk) || vk > vb)) best = k;
        }
      }
      set_i(out, o * inner + in, best);
    }
  return true;
}

bool eval_softmax(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
  if (axis < 0 || axis >= x->type.rank) return fail(e, "axis out of range");
  int64_t outer, len, inner;
  split_axis(&x->type, axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < len; k++) mx = fmax(mx, ir_tensor_get(x, (o * len + k) * inner + in));
      for (int64_t k = 0; k < len; k++) sum += exp(ir_tensor_get(x, (o * len + k) * inner + in) - mx);
      for (int64_t k = 0; k < len; k++) {
        int64_t i = (o * len + k) * inner + in;
        double v = ir_tensor_get(x, i) - mx;
        ir_tensor_set(out, i, n->op == OP_SOFTMAX ? exp(v) / sum : v - log(sum));
      }
    }
  return true;
}

/* layernorm, rms_norm and group_norm: each row (the dims from axis on;
 * group_norm: one group of channels of one sample) normalized by its
 * mean and biased variance (rms_norm: by its mean square alone), then
 * times the weight and plus the bias of its element (group_norm: of its
 * channel). */
bool eval_norm(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
               Tensor *out) {
  int64_t outer = 1, len = 1, per_weight = 1, groups = 1;
  /* group_norm in layout "nhwc": element k of group o is the one NCHW
   * would have there (channel k / per_weight of the group, pixel k %
   * per_weight), so the sums run in the same order */
  bool nhwc = n->op == OP_GROUP_NORM && ir_nhwc(n);
  int cx = nhwc ? x->type.rank - 1 : 1;
  if (n->op == OP_GROUP_NORM) {
    groups = ir_attr_int(n, "groups");
    if (x->type.rank < 2 || groups < 1 || x->type.dims[cx] % groups)
      return fail(e, "groups must divide the channels of an input [N, C, ...]");
    for (int i = 1; i < x->type.rank; i++)
      if (i != cx) per_weight *= x->type.dims[i];
    outer = x->type.dims[0] * groups;
    len = numel(&x->type) / (outer ? outer : 1);
  } else {
    int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
    if (axis < 0 || axis > x->type.rank) return fail(e, "axis out of range");
    for (int i = 0; i < axis; i++) outer *= x->type.dims[i];
    for (int i = axis; i < x->type.rank; i++) len *= x->type.dims[i];
  }
  int64_t weights = n->op == OP_GROUP_NORM ? x->type.dims[cx] : len;
  int64_t cg = groups ? weights / groups : 0; /* a group's channels */
#define AT(o, k)                                                                                              \
  (nhwc ? ((o) / groups * per_weight + (k) % per_weight) * weights + (o) % groups * cg + (k) / per_weight \
        : (o) * len + (k))
  if ((w && numel(&w->type) != weights) || (b && numel(&b->type) != weights))
    return fail(e, "weight and bias must have %" PRId64 " elements", weights);
  double eps = ir_attr_float(n, "eps");
  bool rms = n->op == OP_RMS_NORM;
  for (int64_t o = 0; o < outer; o++) {
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t k = 0; k < len; k++) mean += ir_tensor_get(x, AT(o, k));
      mean /= (double)len;
    }
    for (int64_t k = 0; k < len; k++) {
      double d = ir_tensor_get(x, AT(o, k)) - mean;
      var += d * d;
    }
    var /= (double)len;
    double inv = 1.0 / sqrt(var + eps);
    for (int64_t k = 0; k < len; k++) {
      int64_t at = n->op == OP_GROUP_NORM ? o % groups * (len / per_weight) + k / per_weight : k;
      double y = (ir_tensor_get(x, AT(o, k)) - mean) * inv;
      if (w) y *= ir_tensor_get(w, at);
      if (b) y += ir_tensor_get(b, at);
      ir_tensor_set(out, AT(o, k), y);
    }
  }
#undef AT
  return true;
}

/* An attention node's shape and attributes as the evaluators read them. */
typedef struct AttnDims {
  bool bshd, causal;
  int64_t B, H, Sq, d, Hkv, Sk;
  double scale;
  int64_t ms[4]; /* the mask's strides over [B, H, Sq, Sk], 0 where it broadcasts */
} AttnDims;

static AttnDims attn_dims(const Node *n, const Tensor *q, const Tensor *k, const Tensor *mask) {
  AttnDims a = {.bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0, .causal = ir_attr_int(n, "causal") != 0};
  int hx = a.bshd ? 2 : 1, sx = a.bshd ? 1 : 2;
  const int64_t *qd = q->type.dims;
  a.B = qd[0], a.H = qd[hx], a.Sq = qd[sx], a.d = qd[3], a.Hkv = k->type.dims[hx], a.Sk = k->type.dims[sx];
  a.scale = ir_attr(n, "scale") ? ir_attr_float(n, "scale") : 1 / sqrt((double)a.d);
  if (mask) {
    const TensorType *mt = &mask->type;
    int64_t st = 1;
    for (int i = mt->rank - 1; i >= 0; st *= mt->dims[i], i--) a.ms[4 - mt->rank + i] = mt->dims[i] == 1 ? 0 : st;
  }
  return a;
}

/* Row s of head h of batch row b of q or k (heads and len its own) as an
 * element offset. */
static int64_t attn_row(const AttnDims *a, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t len) {
  return a->bshd ? ((b * len + s) * heads + h) * a->d : ((b * heads + h) * len + s) * a->d;
}

/* p[0 .. Sk) = query row i's scores q k^T * scale + mask for head h of
 * batch row b, -inf where a bool mask or causality leaves a key out;
 * returns their max (NaN when one is NaN). */
static double attn_scores(const AttnDims *a, const Tensor *q, const Tensor *k, const Tensor *mask, int64_t b,
                          int64_t h, int64_t i, double *p) {
  int64_t kh = h / (a->H / a->Hkv), qi = attn_row(a, b, h, i, a->H, a->Sq);
  double mx = -INFINITY;
  for (int64_t j = 0; j < a->Sk; j++) {
    int64_t kj = attn_row(a, b, kh, j, a->Hkv, a->Sk);
    double dot = 0;
    for (int64_t c = 0; c < a->d; c++) dot += ir_tensor_get(q, qi + c) * ir_tensor_get(k, kj + c);
    p[j] = dot * a->scale;
    if (mask) {
      double m = ir_tensor_get(mask, b * a->ms[0] + h * a->ms[1] + i * a->ms[2] + j * a->ms[3]);
      p[j] = mask->type.dtype == TY_BOOL ? (m != 0 ? p[j] : -INFINITY) : p[j] + m;
    }
    if (a->causal && j > i) p[j] = -INFINITY;
    if (p[j] > mx || isnan(p[j])) mx = p[j]; /* a NaN score makes the row NaN */
  }
  return mx;
}

/* p[0 .. Sk) = the row's softmax of its scores: all zeros for a row with
 * no key left (PyTorch's _safe_softmax), NaNs where a score is NaN.
 * Returns the row's logsumexp, +inf for a row with no key left. */
static double attn_probs(const AttnDims *a, const Tensor *q, const Tensor *k, const Tensor *mask, int64_t b,
                         int64_t h, int64_t i, double *p) {
  double mx = attn_scores(a, q, k, mask, b, h, i, p), sum = 0;
  for (int64_t j = 0; j < a->Sk; j++) {
    p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
    sum += p[j];
  }
  for (int64_t j = 0; j < a->Sk; j++) p[j] = sum == 0 ? 0 : p[j] / sum;
  return sum == 0 ? INFINITY : mx + log(sum);
}

/* softmax(q k^T * scale + mask) v for each batch, head and query row,
 * in double; a row with no key left gives zeros.  attention_lse's second
 * result: each row's logsumexp. */
bool eval_attention(const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *q = in[0], *k = in[1], *v = in[2], *mask = n->n_in > 3 ? in[3] : NULL;
  AttnDims a = attn_dims(n, q, k, mask);
  double *p = malloc(sizeof *p * (size_t)(a.Sk ? a.Sk : 1));
  if (!p) return false;
  for (int64_t b = 0; b < a.B; b++)
    for (int64_t h = 0; h < a.H; h++)
      for (int64_t i = 0; i < a.Sq; i++) {
        double lse = attn_probs(&a, q, k, mask, b, h, i, p);
        if (n->n_out > 1) ir_tensor_set(&out[1], (b * a.H + h) * a.Sq + i, lse);
        int64_t qi = attn_row(&a, b, h, i, a.H, a.Sq), kh = h / (a.H / a.Hkv);
        for (int64_t c = 0; c < a.d; c++) {
          double o = 0;
          for (int64_t j = 0; j < a.Sk; j++) o += p[j] * ir_tensor_get(v, attn_row(&a, b, kh, j, a.Hkv, a.Sk) + c);
          ir_tensor_set(out, qi + c, o);
        }
      }
  free(p);
  return true;
}

/* attention_grad (ops.def) in double: per query row, P = exp(S - lse)
 * from the given lse, D = rowsum(dy * out), dS = P * (dy v^T - D); dq =
 * scale dS k, and dk += scale dS^T q, dv += P^T dy over the heads and
 * rows in order. */
bool eval_attention_grad(const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *q = in[0], *k = in[1], *v = in[2], *o = in[3], *dy = in[4], *lse = in[5];
  const Tensor *mask = n->n_in > 6 ? in[6] : NULL;
  AttnDims a = attn_dims(n, q, k, mask);
  /* dk and dv summed in double, then rounded once to their dtype */
  int64_t kn = numel(&k->type);
  double *p = malloc(sizeof *p * ((size_t)(a.Sk ? a.Sk : 1) * 2 + (size_t)kn * 2));
  if (!p) return false;
  double *ds = p + (a.Sk ? a.Sk : 1), *dk = ds + (a.Sk ? a.Sk : 1), *dv = dk + kn;
  memset(dk, 0, sizeof *dk * (size_t)kn * 2);
  for (int64_t b = 0; b < a.B; b++)
    for (int64_t h = 0; h < a.H; h++)
      for (int64_t i = 0; i < a.Sq; i++) {
        attn_scores(&a, q, k, mask, b, h, i, p);
        double l = ir_tensor_get(lse, (b * a.H + h) * a.Sq + i);
        for (int64_t j = 0; j < a.Sk; j++) p[j] = exp(p[j] - l); /* 0 where l is +inf or p[j] -inf */
        int64_t qi = attn_row(&a, b, h, i, a.H, a.Sq), kh = h / (a.H / a.Hkv);
        double D = 0;
        for (int64_t c = 0; c < a.d; c++) D += ir_tensor_get(dy, qi + c) * ir_tensor_get(o, qi + c);
        for (int64_t j = 0; j < a.Sk; j++) {
          int64_t kj = attn_row(&a, b, kh, j, a.Hkv, a.Sk);
          double dp = 0;
          for (int64_t c = 0; c < a.d; c++) dp += ir_tensor_get(dy, qi + c) * ir_tensor_get(v, kj + c);
          ds[j] = p[j] * (dp - D);
          for (int64_t c = 0; c < a.d; c++) {
            dk[kj + c] += a.scale * ds[j] * ir_tensor_get(q, qi + c);
            dv[kj + c] += p[j] * ir_tensor_get(dy, qi + c);
          }
        }
        for (int64_t c = 0; c < a.d; c++) {
          double g = 0;
          for (int64_t j = 0; j < a.Sk; j++) g += ds[j] * ir_tensor_get(k, attn_row(&a, b, kh, j, a.Hkv, a.Sk) + c);
          ir_tensor_set(&out[0], qi + c, a.scale * g);
        }
      }
  for (int64_t e = 0; e < kn; e++) ir_tensor_set(&out[1], e, dk[e]), ir_tensor_set(&out[2], e, dv[e]);
  free(p);
  return true;
}

/* Channels last (layout "nhwc") the pixels of channel c are C apart;
 * each sums in the same order either way. */
bool eval_global_avgpool(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  const TensorType *t = &x->type;
  if (t->rank < 2) return fail(e, "needs [N, C, ...]");
  bool nhwc = ir_nhwc(n);
  int64_t C = t->dims[nhwc ? t->rank - 1 : 1], len = 1;
  for (int i = 1; i < t->rank; i++) len *= t->dims[i];
  len /= C;
  for (int64_t o = 0; o < t->dims[0] * C; o++) {
    int64_t img = o / C, c = o % C, at = nhwc ? img * len * C + c : o * len, step = nhwc ? C : 1;
    double s = 0;
    for (int64_t k = 0; k < len; k++) s += ir_tensor_get(x, at + k * step);
    ir_tensor_set(out, o, s / (double)len);
  }
  return true;
}

bool eval_batchnorm(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *x = in[0], *w = in[1], *b = in[2], *mean = in[3], *var = in[4];
  const TensorType *t = &x->type;
  if (t->rank < 2) return fail(e, "needs [N, C, ...]");
  int64_t c = t->dims[1];
  for (int k = 1; k < 5; k++)
    if (numel(&in[k]->type) != c) return fail(e, "operand %d must have %" PRId64 " elements", k, c);
  double eps = ir_attr_float(n, "eps");
  int64_t inner = 1;
  for (int i = 2; i < t->rank; i++) inner *= t->dims[i];
  int64_t count = numel(t);
  for (int64_t i = 0; i < count; i++) {
    int64_t ch = (i / inner) % c;
    double y = (ir_tensor_get(x, i) - ir_tensor_get(mean, ch)) /
               sqrt(ir_tensor_get(var, ch) + eps);
    ir_tensor_set(out, i, y * ir_tensor_get(w, ch) + ir_tensor_get(b, ch));
  }
  return true;
}
