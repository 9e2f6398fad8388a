/* The ops of training (ops.def's last rows): takes their nodes, returns
 * what they mean to the reference interpreter (eval.c calls
 * ir_eval_train_op; their shape rules are shape.c's), plus Philox4x32-10,
 * the counter-based generator dropout's mask comes from, and the end of
 * an interpreted training step (ir_apply_updates). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

/* ---- Philox4x32-10 (Salmon, Moraes, Dror and Shaw, SC'11) ---- */

void ir_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint32_t)p1;
    c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint32_t)p0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint32_t ir_dropout_bits(uint64_t seed, uint64_t offset, uint64_t i, uint32_t stream) {
  uint64_t blk = i >> 2;
  uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), stream, (uint32_t)offset};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
  ir_philox4x32_10(ctr, key, w);
  return w[i & 3] >> 8;
}

uint32_t ir_dropout_threshold(double p) {
  double t = nearbyint(p * 16777216.0);
  return t <= 0 ? 0 : t >= 16777216.0 ? 16777216u : (uint32_t)t;
}

double ir_dropout_scale(double p, DType dt) {
  if (p >= 1) return 0;
  double s = 1.0 / (1.0 - p);
  return dt == TY_F64 ? s : (double)(float)s;
}

/* ---- the reference interpreter's side ---- */

/* A window's geometry over nsp spatial dims, from a pool's or a
 * convolution's attributes and the input's and result's types. */
typedef struct Geo {
  int nsp;
  int64_t in[3], out[3], k[3], stride[3], lo[3], hi[3], dil[3];
  int64_t in_size, out_size, k_size;
} Geo;

static Geo geo_of(const Node *n, const TensorType *x, const TensorType *y, const int64_t *kern) {
  Geo g = {.nsp = x->rank - 2, .in_size = 1, .out_size = 1, .k_size = 1};
  int c;
  const int64_t *stride = ir_attr_ints(n, "stride", &c), *pad = ir_attr_ints(n, "pad", &c);
  const int64_t *dil = ir_attr_ints(n, "dilation", &c);
  for (int d = 0; d < g.nsp; d++) {
    g.in[d] = x->dims[2 + d], g.out[d] = y->dims[2 + d], g.k[d] = kern[d];
    g.stride[d] = stride[d], g.lo[d] = pad[d], g.hi[d] = pad[g.nsp + d], g.dil[d] = dil[d];
    g.in_size *= g.in[d], g.out_size *= g.out[d], g.k_size *= g.k[d];
  }
  return g;
}

/* Where tap t (row-major over the kernel) of output position o (linear
 * over a plane) reads: an index into an input plane, or -1 outside it.
 * *in_pad says whether it lies inside the padded input. */
static int64_t geo_tap(const Geo *g, int64_t o, int64_t t, bool *in_pad) {
  int64_t at = 0, os = g->out_size, ks = g->k_size;
  bool inside = true, pad = true;
  for (int d = 0; d < g->nsp; d++) {
    os /= g->out[d], ks /= g->k[d];
    int64_t p = (o / os) % g->out[d] * g->stride[d] - g->lo[d] + (t / ks) % g->k[d] * g->dil[d];
    inside &= p >= 0 && p < g->in[d];
    pad &= p >= -g->lo[d] && p < g->in[d] + g->hi[d];
    at = at * g->in[d] + p;
  }
  if (in_pad) *in_pad = pad;
  return inside ? at : -1;
}

static bool eval_conv_weight_grad(const Node *n, const Tensor *x, const Tensor *dy, Tensor *out) {
  int nk;
  Geo g = geo_of(n, &x->type, &dy->type, ir_attr_ints(n, "kernel", &nk));
  int64_t N = x->type.dims[0], C = x->type.dims[1], Co = out->type.dims[0], Cg = out->type.dims[1];
  int64_t cog = Co / ir_attr_int(n, "groups");
  for (int64_t co = 0; co < Co; co++)
    for (int64_t ci = 0; ci < Cg; ci++)
      for (int64_t t = 0; t < g.k_size; t++) {
        double s = 0;
        int64_t xc = co / cog * Cg + ci;
        for (int64_t b = 0; b < N; b++)
          for (int64_t o = 0; o < g.out_size; o++) {
            int64_t at = geo_tap(&g, o, t, NULL);
            if (at >= 0)
              s += ir_tensor_get(dy, (b * Co + co) * g.out_size + o) *
                   ir_tensor_get(x, (b * C + xc) * g.in_size + at);
          }
        ir_tensor_set(out, (co * Cg + ci) * g.k_size + t, s);
      }
  return true;
}

/* The pools' gradients scatter each window's share into a double per
 * element of x, window after window: the order in which the kernel's
 * gather adds them for one element. */
static bool eval_pool_grad(const Node *n, const Tensor *dy, const Tensor *x, Tensor *out) {
  int nk;
  Geo g = geo_of(n, &out->type, &dy->type, ir_attr_ints(n, "kernel", &nk));
  int64_t planes = out->type.dims[0] * out->type.dims[1], total = ir_type_numel(&out->type);
  double *acc = calloc((size_t)total + 1, sizeof *acc);
  if (!acc) return false;
  bool avg = n->op == OP_AVGPOOL_GRAD;
  bool include_pad = avg && ir_attr_int(n, "count_include_pad");
  for (int64_t c = 0; c < planes; c++)
    for (int64_t o = 0; o < g.out_size; o++) {
      double m = -INFINITY;
      int64_t arg = -1, real = 0, padded = 0;
      for (int64_t t = 0; t < g.k_size; t++) {
        bool in_pad;
        int64_t at = geo_tap(&g, o, t, &in_pad);
        padded += in_pad;
        if (at < 0) continue;
        real++;
        if (avg) continue;
        double v = ir_tensor_get(x, c * g.in_size + at);
        if (arg < 0 || ((isnan(v) || v > m) && !isnan(m))) m = v, arg = at;
      }
      double d = ir_tensor_get(dy, c * g.out_size + o);
      if (!avg) {
        if (arg >= 0) acc[c * g.in_size + arg] += d;
        continue;
      }
      int64_t div = include_pad ? padded : real;
      for (int64_t t = 0; t < g.k_size && div; t++) {
        int64_t at = geo_tap(&g, o, t, NULL);
        if (at >= 0) acc[c * g.in_size + at] += d / (double)div;
      }
    }
  for (int64_t i = 0; i < total; i++) ir_tensor_set(out, i, acc[i]);
  free(acc);
  return true;
}

static bool eval_embedding_grad(const Tensor *dy, const Tensor *ids, Tensor *out, char *err, size_t errlen) {
  int64_t num = out->type.dims[0], rows = ir_type_numel(&ids->type);
  int64_t width = rows ? ir_type_numel(&dy->type) / rows : 0, total = ir_type_numel(&out->type);
  double *acc = calloc((size_t)total + 1, sizeof *acc);
  if (!acc) snprintf(err, errlen, "out of memory");
  for (int64_t r = 0; acc && r < rows; r++) {
    int64_t id = ir_tensor_get_int(ids, r), at = id < 0 ? id + num : id;
    if (at < 0 || at >= num) {
      snprintf(err, errlen, "index %" PRId64 " is out of range for axis 0 of size %" PRId64, id, num);
      free(acc);
      acc = NULL;
      break;
    }
    for (int64_t j = 0; j < width; j++) acc[at * width + j] += ir_tensor_get(dy, r * width + j);
  }
  for (int64_t i = 0; acc && i < total; i++) ir_tensor_set(out, i, acc[i]);
  free(acc);
  return acc != NULL;
}

/* softmax_xent's rows into loss, its gradient's into dx (either NULL),
 * row by row in double. */
static bool eval_xent(const Node *n, const Tensor *x, const Tensor *t, const Tensor *dy, Tensor *loss, Tensor *dx,
                      char *err, size_t errlen) {
  int64_t N = x->type.dims[0], C = x->type.dims[1], ignore = ir_attr_int(n, "ignore_index");
  double eps = ir_attr_float(n, "smoothing");
  for (int64_t i = 0; i < N; i++) {
    int64_t ti = ir_tensor_get_int(t, i);
    bool skip = ti == ignore;
    if (!skip && (ti < 0 || ti >= C)) {
      snprintf(err, errlen, "index %" PRId64 " is out of range for axis 1 of size %" PRId64, ti < 0 ? ti - C : ti,
               C);
      return false;
    }
    double mx = -INFINITY, sum = 0, dev = 0;
    for (int64_t c = 0; c < C; c++) mx = fmax(mx, ir_tensor_get(x, i * C + c));
    for (int64_t c = 0; c < C; c++) {
      double d = ir_tensor_get(x, i * C + c) - mx;
      sum += exp(d);
      dev += d;
    }
    double ls = log(sum);
    if (loss) {
      double nll = skip ? 0 : mx - ir_tensor_get(x, i * C + ti) + ls;
      ir_tensor_set(loss, i, skip ? 0 : eps > 0 ? (1 - eps) * nll + eps * (ls - dev / (double)C) : nll);
    }
    double g = skip || !dx ? 0 : ir_tensor_get(dy, ir_type_numel(&dy->type) == 1 ? 0 : i);
    for (int64_t c = 0; dx && c < C; c++) {
      double p = exp(ir_tensor_get(x, i * C + c) - mx) / sum - (eps > 0 ? eps / (double)C : 0) - (c == ti ? 1 - eps : 0);
      ir_tensor_set(dx, i * C + c, skip ? 0 : g * p);
    }
  }
  return true;
}

/* Where x's elements are in the global batch's counter space: first
 * (x's first sample in the global batch) times the elements of a sample. */
int64_t ir_dropout_base(const TensorType *x, int64_t batch, int64_t first) {
  int64_t count = ir_type_numel(x);
  if (batch > 0 && count % batch == 0) return first * (count / batch);
  return x->rank == 0 || x->dims[0] == 0 ? first * count : first * (count / x->dims[0]);
}

DrawPart ir_draw_part(const Node *n, const TensorType *x) {
  int64_t count = ir_type_numel(x);
  DrawPart p = {.block = count > 0 ? count : 1, .whole = *x};
  int k;
  const int64_t *part = ir_attr(n, "part") ? ir_attr_ints(n, "part", &k) : NULL;
  if (!part || k < 3) return p; /* shape_dropout checked the rest */
  /* the block of one group (of part[3], each split alike) */
  int64_t inner = 1, d = x->dims[part[0]] / (k > 3 ? part[3] : 1);
  for (int a = (int)part[0] + 1; a < x->rank; a++) inner *= x->dims[a];
  p.block = d * inner > 0 ? d * inner : 1;
  p.skip = (part[1] - 1) * d * inner;
  p.at = part[2] * d * inner;
  p.whole.dims[part[0]] = d * part[1];
  return p;
}

int64_t ir_draw_batch(const Graph *g, const TensorType *x) {
  for (const Node *m = g->first; m; m = m->next)
    if (m->op == OP_INPUT) {
      const TensorType *t = &m->out[0].type;
      return t->rank > 0 && t->dims[0] > 0 && ir_type_numel(x) % t->dims[0] == 0 ? t->dims[0] : 0;
    }
  return 0;
}

static void eval_dropout(const Node *n, const Tensor *x, const Tensor *seed, const Tensor *offset,
                         const Tensor *first, Tensor *out) {
  double p = ir_attr_float(n, "p");
  uint32_t thr = ir_dropout_threshold(p), stream = (uint32_t)ir_attr_int(n, "stream");
  double scale = ir_dropout_scale(p, x->type.dtype);
  uint64_t s = (uint64_t)*(const int64_t *)seed->data, off = (uint64_t)*(const int64_t *)offset->data;
  DrawPart part = ir_draw_part(n, &x->type);
  uint64_t base = first ? (uint64_t)ir_dropout_base(&part.whole, ir_attr_int(n, "batch"), *(const int64_t *)first->data)
                        : 0;
  base += (uint64_t)part.at;
  for (int64_t i = 0, count = ir_type_numel(&x->type); i < count; i++) {
    uint64_t j = base + (uint64_t)i + (uint64_t)(i / part.block * part.skip);
    bool keep = ir_dropout_bits(s, off, j, stream) >= thr;
    ir_tensor_set(out, i, keep ? ir_tensor_get(x, i) * scale : 0.0);
  }
}

static void eval_random_uniform(const Node *n, const Tensor *seed, const Tensor *offset, const Tensor *first,
                                Tensor *out) {
  uint32_t stream = (uint32_t)ir_attr_int(n, "stream");
  uint64_t s = (uint64_t)*(const int64_t *)seed->data, off = (uint64_t)*(const int64_t *)offset->data;
  uint64_t base =
      first ? (uint64_t)ir_dropout_base(&out->type, ir_attr_int(n, "batch"), *(const int64_t *)first->data) : 0;
  for (int64_t i = 0, count = ir_type_numel(&out->type); i < count; i++)
    ir_tensor_set(out, i, ldexp((double)ir_dropout_bits(s, off, base + (uint64_t)i, stream), -24));
}

/* Along one axis, output d of out reads input lo with weight 1 - f and
 * hi with f (nearest: lo alone), as eval.c's resize. */
static void resize_taps(bool linear, bool align, int64_t d, int64_t in, int64_t out, int64_t *lo, int64_t *hi,
                        double *f) {
  if (!linear) {
    *lo = *hi = d * in / out, *f = 0;
    return;
  }
  double s = ir_resize_src(d, in, out, align);
  *lo = (int64_t)s < in - 1 ? (int64_t)s : in - 1;
  *hi = *lo < in - 1 ? *lo + 1 : *lo;
  *f = s - (double)*lo;
}

/* dy's elements in order, each scattering its share to the (up to) 2x2
 * inputs its resize read: per element of x, the order the kernel sums. */
static bool eval_resize_grad(const Node *n, const Tensor *dy, Tensor *out) {
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0, align = ir_attr_int(n, "align_corners") != 0;
  int64_t planes = dy->type.dims[0] * dy->type.dims[1], OH = dy->type.dims[2], OW = dy->type.dims[3];
  int64_t H = out->type.dims[2], W = out->type.dims[3], total = ir_type_numel(&out->type);
  double *acc = calloc((size_t)total + 1, sizeof *acc);
  if (!acc) return false;
  for (int64_t c = 0; c < planes; c++)
    for (int64_t oh = 0; oh < OH; oh++) {
      int64_t h[2];
      double fh;
      resize_taps(linear, align, oh, H, OH, &h[0], &h[1], &fh);
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t w[2];
        double fw, d = ir_tensor_get(dy, (c * OH + oh) * OW + ow);
        resize_taps(linear, align, ow, W, OW, &w[0], &w[1], &fw);
        for (int r = 0; r < (linear ? 2 : 1); r++)
          for (int q = 0; q < (linear ? 2 : 1); q++)
            acc[(c * H + h[r]) * W + w[q]] += (r ? fh : 1 - fh) * (q ? fw : 1 - fw) * d;
      }
    }
  for (int64_t i = 0; i < total; i++) ir_tensor_set(out, i, acc[i]);
  free(acc);
  return true;
}

int ir_optim_states(const char *kind, double momentum, bool amsgrad, bool centered,
                    const char *keys[IR_OPTIM_MAX_STATES]) {
  int n = 0;
  if (!kind) return -1;
  if (strcmp(kind, "sgd") == 0) {
    if (momentum != 0) keys[n++] = "momentum_buffer";
  } else if (strcmp(kind, "adam") == 0 || strcmp(kind, "adamw") == 0) {
    keys[n++] = "exp_avg";
    keys[n++] = "exp_avg_sq";
    if (amsgrad) keys[n++] = "max_exp_avg_sq";
  } else if (strcmp(kind, "rmsprop") == 0) {
    keys[n++] = "square_avg";
    if (momentum > 0) keys[n++] = "momentum_buffer";
    if (centered) keys[n++] = "grad_avg";
  } else if (strcmp(kind, "adagrad") == 0) {
    keys[n++] = "sum";
  } else if (strcmp(kind, "adamax") == 0) {
    keys[n++] = "exp_avg";
    keys[n++] = "exp_inf";
  } else if (strcmp(kind, "adadelta") == 0) {
    keys[n++] = "square_avg";
    keys[n++] = "acc_delta";
  } else if (strcmp(kind, "radam") == 0 || strcmp(kind, "nadam") == 0) {
    keys[n++] = "exp_avg";
    keys[n++] = "exp_avg_sq";
  } else {
    return -1;
  }
  return n;
}

int ir_optim_node_states(const Node *n, const char *keys[IR_OPTIM_MAX_STATES]) {
  const Attr *kind = ir_attr(n, "kind"), *mom = ir_attr(n, "momentum"), *ams = ir_attr(n, "amsgrad"),
             *cen = ir_attr(n, "centered");
  if (!kind || kind->kind != AK_STR) return -1;
  return ir_optim_states(kind->s, mom && mom->kind == AK_FLOAT ? mom->f : 0, ams && ams->kind == AK_INT && ams->i,
                         cen && cen->kind == AK_INT && cen->i, keys);
}

int ir_optim_mu_product_operand(const Node *n) {
  const Attr *a = ir_attr(n, "momentum_input"), *kind = ir_attr(n, "kind");
  bool nadam = kind && kind->kind == AK_STR && strcmp(kind->s, "nadam") == 0;
  return nadam ? 5 + (a && a->kind == AK_INT && a->i != 0) : -1;
}

int ir_optim_first_state(const Node *n) {
  const Attr *a = ir_attr(n, "momentum_input");
  int mu = ir_optim_mu_product_operand(n);
  return mu >= 0 ? mu + 1 : 5 + (a && a->kind == AK_INT && a->i != 0);
}

/* -expm1(y) by Kahan's (e^y - 1) y / log(e^y). */
static float one_minus_exp(float y) {
  float u = expf(y), um1 = u - 1;
  if (u == 1) return -y;
  if (um1 == -1) return 1; /* e^y below f32's half ulp of 1 */
  return -(um1 * y / logf(u));
}

float ir_bias_correction(double beta, float t) { return beta == 0 ? 1 : one_minus_exp(t * (float)log(beta)); }

float ir_bias_correction_f(float beta, float t) { return one_minus_exp(t * logf(beta)); }

/* torch.lerp(a, b, w) in f32, as PyTorch's CPU kernel computes it. */
static float lerp(float a, float b, float w) { return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1 - w); }

/* torch.maximum: NaN from either. */
static float nan_max(float a, float b) { return isnan(a) || isnan(b) ? a + b : a > b ? a : b; }

void ir_optim_scalars(const Node *n, float lr, float t, double beta1, float mu_product, IrOptimScalars *s) {
  const char *kind = ir_attr_str(n, "kind");
  double beta2 = ir_attr_float(n, "beta2"), md = ir_attr_float(n, "momentum_decay");
  double td = t, bc1 = 1 - pow(beta1, td), bc2 = 1 - pow(beta2, td);
  *s = (IrOptimScalars){.bc1 = (float)bc1, .bc2 = (float)bc2, .sqrt_bc2 = (float)sqrt(bc2), .rect = 1};
  if (strcmp(kind, "adamax") == 0) s->c1 = (float)(-(double)lr / bc1);
  if (strcmp(kind, "radam") == 0) {
    double rho_inf = 2 / (1 - beta2) - 1, rho_t = rho_inf - 2 * td * pow(beta2, td) / bc2;
    s->rectify = rho_t > 5;
    if (s->rectify)
      s->rect = (float)sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
  }
  if (strcmp(kind, "nadam") == 0) {
    double mu = beta1 * (1 - 0.5 * pow(0.96, td * md)), mu_next = beta1 * (1 - 0.5 * pow(0.96, (td + 1) * md));
    s->c1 = (float)(-(double)lr * (1 - mu) / (1 - (double)mu_product));
    s->c2 = (float)(-(double)lr * mu_next / (1 - (double)mu_product * mu_next));
  }
}

/* optim_update (ops.def) in f32, each operation of PyTorch's in its
 * order, rounded (PyTorch's CPU kernels fuse some multiply-adds and
 * divide some scalars by reciprocal, so the two agree to an ulp or so
 * an operation, not bit for bit); codegen/lower_train.c computes the
 * same operations. */
static void eval_optim_update(const Node *n, Tensor *const *in, Tensor *out) {
  const float *p = in[0]->data, *g = in[1]->data;
  float lr = *(const float *)in[2]->data, t = *(const float *)in[3]->data, scale = *(const float *)in[4]->data;
  const char *kind = ir_attr_str(n, "kind"), *keys[IR_OPTIM_MAX_STATES];
  int n_states = ir_optim_node_states(n, keys);
  const float *st[IR_OPTIM_MAX_STATES] = {0};
  float *so[IR_OPTIM_MAX_STATES] = {0};
  int first = ir_optim_first_state(n);
  for (int k = 0; k < n_states; k++) st[k] = in[first + k]->data, so[k] = out[1 + k].data;
  float wd = (float)ir_attr_float(n, "weight_decay"), mom = (float)ir_attr_float(n, "momentum");
  float damp = (float)(1 - ir_attr_float(n, "dampening"));
  double beta1 = ir_attr_float(n, "beta1"), beta2 = ir_attr_float(n, "beta2"), alpha = ir_attr_float(n, "alpha");
  float b1 = (float)beta1, b2 = (float)beta2, one_b1 = (float)(1 - beta1), one_b2 = (float)(1 - beta2);
  float bc1 = ir_bias_correction(beta1, t);
  bool adamax = strcmp(kind, "adamax") == 0, adadelta = strcmp(kind, "adadelta") == 0;
  bool radam = strcmp(kind, "radam") == 0, nadam = strcmp(kind, "nadam") == 0;
  bool momentum_in = ir_attr_int(n, "momentum_input") != 0;
  int mu = ir_optim_mu_product_operand(n);
  IrOptimScalars sc;
  ir_optim_scalars(n, lr, t, momentum_in ? (double)*(const float *)in[5]->data : beta1,
                   mu >= 0 ? *(const float *)in[mu]->data : 1, &sc);
  if (momentum_in) { /* this step's momentum or beta1 */
    mom = b1 = *(const float *)in[5]->data;
    one_b1 = 1 - b1;
    bc1 = ir_bias_correction_f(b1, t);
  }
  float al = (float)alpha, one_al = (float)(1 - alpha);
  float eps = (float)ir_attr_float(n, "eps");
  bool nesterov = ir_attr_int(n, "nesterov"), maximize = ir_attr_int(n, "maximize");
  bool amsgrad = ir_attr_int(n, "amsgrad"), centered = ir_attr_int(n, "centered");
  bool sgd = strcmp(kind, "sgd") == 0, adamw = strcmp(kind, "adamw") == 0, rmsprop = strcmp(kind, "rmsprop") == 0;
  bool adagrad = strcmp(kind, "adagrad") == 0;
  bool has_buffer = rmsprop && ir_attr_float(n, "momentum") > 0; /* rmsprop's momentum_buffer */
  bool decoupled = adamw || ir_attr_int(n, "decoupled");
  float rho = (float)ir_attr_float(n, "rho"), one_rho = (float)(1 - ir_attr_float(n, "rho"));
  float decoupled_decay = (float)(1 - (double)lr * ir_attr_float(n, "weight_decay"));
  float decay = 1 - lr * wd, step_size = lr / bc1;
  float bc2_sqrt = sqrtf(ir_bias_correction(beta2, t));
  float clr = lr / (1 + (t - 1) * (float)ir_attr_float(n, "lr_decay"));
  float *np = out[0].data, clipv = (float)ir_attr_float(n, "clip_value");
  int64_t count = ir_type_numel(&in[0]->type);
  if (ir_attr_int(n, "skip_nonfinite") && !isfinite(scale)) {
    /* GradScaler's skipped step: the param and its state as they were. */
    memcpy(np, p, (size_t)count * sizeof *np);
    for (int k = 0; k < n_states; k++) memcpy(so[k], st[k], (size_t)count * sizeof *so[k]);
    return;
  }
  for (int64_t i = 0; i < count; i++) {
    float pi = p[i], gi = g[i] * scale;
    if (clipv > 0) gi = gi < -clipv ? -clipv : gi > clipv ? clipv : gi; /* torch.clamp: NaN stays */
    if (maximize) gi = -gi;
    if (wd != 0 && !decoupled) gi = gi + wd * pi;
    if (wd != 0 && decoupled && !adamw) pi = pi * decoupled_decay;
    if (adamax) {
      float m = lerp(st[0][i], gi, one_b1), u = nan_max(st[1][i] * b2, fabsf(gi) + eps);
      so[0][i] = m;
      so[1][i] = u;
      np[i] = pi + sc.c1 * (m / u);
    } else if (adadelta) {
      float s = st[0][i] * rho + one_rho * gi * gi;
      float delta = sqrtf(st[1][i] + eps) / sqrtf(s + eps) * gi;
      so[0][i] = s;
      so[1][i] = st[1][i] * rho + one_rho * delta * delta;
      np[i] = pi + -lr * delta;
    } else if (radam || nadam) {
      float m = lerp(st[0][i], gi, one_b1), v = st[1][i] * b2 + one_b2 * gi * gi;
      so[0][i] = m;
      so[1][i] = v;
      if (nadam) {
        float denom = sqrtf(v / sc.bc2) + eps;
        np[i] = pi + sc.c1 * (gi / denom);
        np[i] = np[i] + sc.c2 * (m / denom);
      } else {
        float step = m / sc.bc1 * lr;
        if (sc.rectify) step = step * (sc.sqrt_bc2 / (sqrtf(v) + eps)) * sc.rect;
        np[i] = pi - step;
      }
    } else if (sgd) {
      if (n_states) {
        float b = t <= 1 ? gi : st[0][i] * mom + gi * damp;
        so[0][i] = b;
        gi = nesterov ? gi + b * mom : b;
      }
      np[i] = pi - gi * lr;
    } else if (rmsprop) {
      float s = st[0][i] * al + gi * gi * one_al, d;
      so[0][i] = s;
      if (centered) {
        float a = st[n_states - 1][i] * al + gi * one_al;
        so[n_states - 1][i] = a;
        d = sqrtf(s - a * a) + eps;
      } else {
        d = sqrtf(s) + eps;
      }
      if (has_buffer) {
        float b = st[1][i] * mom + gi / d;
        so[1][i] = b;
        np[i] = pi - b * lr;
      } else {
        np[i] = pi - gi / d * lr;
      }
    } else if (adagrad) {
      float s = st[0][i] + gi * gi;
      so[0][i] = s;
      np[i] = pi - gi / (sqrtf(s) + eps) * clr;
    } else {
      if (wd != 0 && adamw) pi = pi * decay;
      float m = st[0][i] * b1 + gi * one_b1;
      float v = st[1][i] * b2 + gi * gi * one_b2;
      so[0][i] = m;
      so[1][i] = v;
      if (amsgrad) {
        so[2][i] = v = nan_max(st[2][i], v);
      }
      np[i] = pi - m / (sqrtf(v) / bc2_sqrt + eps) * step_size;
    }
  }
}

bool ir_eval_train_op(const Node *n, Tensor *const *in, Tensor *out, char *err, size_t errlen) {
  switch (n->op) {
    case OP_CONV_WEIGHT_GRAD: return eval_conv_weight_grad(n, in[0], in[1], out);
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD:
      if (eval_pool_grad(n, in[0], n->op == OP_MAXPOOL_GRAD ? in[1] : NULL, out)) return true;
      snprintf(err, errlen, "out of memory");
      return false;
    case OP_EMBEDDING_GRAD: return eval_embedding_grad(in[0], in[1], out, err, errlen);
    case OP_XENT: return eval_xent(n, in[0], in[1], NULL, out, NULL, err, errlen);
    case OP_XENT_GRAD: return eval_xent(n, in[0], in[1], in[2], NULL, out, err, errlen);
    case OP_XENT_BOTH: return eval_xent(n, in[0], in[1], in[2], &out[0], &out[1], err, errlen);
    case OP_DROPOUT: eval_dropout(n, in[0], in[1], in[2], n->n_in > 3 ? in[3] : NULL, out); return true;
    case OP_RANDOM_UNIFORM: eval_random_uniform(n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out); return true;
    case OP_RESIZE_GRAD:
      if (eval_resize_grad(n, in[0], out)) return true;
      snprintf(err, errlen, "out of memory");
      return false;
    case OP_OPTIM_UPDATE: eval_optim_update(n, in, out); return true;
    default: snprintf(err, errlen, "not a training op"); return false;
  }
}

bool ir_apply_updates(const Graph *g, const Tensor *outputs, TensorMap *params, char *err,
                      size_t errlen) {
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = ir_output_update(g, i);
    if (!name) continue;
    Tensor *t = (Tensor *)ir_tensor_map_find(params, name);
    if (!t || !ir_type_eq(&t->type, &outputs[i].type)) {
      snprintf(err, errlen, "output '%s' updates param '%s', which the parameters %s", g->output_names[i], name,
               t ? "hold with another type" : "do not have");
      return false;
    }
    memcpy(t->data, outputs[i].data, ir_tensor_nbytes(&t->type));
  }
  return true;
}
