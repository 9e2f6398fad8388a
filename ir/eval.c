/* The reference interpreter: takes a graph and host tensors for its
 * inputs and params, returns its outputs.  Each op is a plain loop over
 * its definition (see eval.h for the numeric rules); nothing here is
 * clever, because everything else is checked against it. */
#include "eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- 16-bit floats ---- */

/* Rounds x to the nearest value with ebits of exponent and mbits of
 * mantissa (ties to even) and returns its bit pattern.  Scaling by a power
 * of two is exact, so the only rounding is the one done by hand here. */
static uint16_t narrow_float(double x, int ebits, int mbits) {
  uint16_t sign = signbit(x) ? (uint16_t)(1u << (ebits + mbits)) : 0;
  uint16_t expmask = (uint16_t)(((1u << ebits) - 1) << mbits);
  if (isnan(x)) return sign | expmask | (uint16_t)(1u << (mbits - 1));
  double a = fabs(x);
  if (isinf(a)) return sign | expmask;
  if (a == 0) return sign;
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, emax = bias;
  int e;
  frexp(a, &e);
  int E = e - 1; /* a in [2^E, 2^(E+1)) */
  if (E > emax) return sign | expmask;
  if (E < emin) E = emin; /* subnormal: the scale stays at emin */
  double scaled = ldexp(a, mbits - E);
  double fl = floor(scaled);
  double frac = scaled - fl;
  uint64_t q = (uint64_t)fl;
  if (frac > 0.5 || (frac == 0.5 && (q & 1))) q++;
  uint64_t one = (uint64_t)1 << mbits;
  if (q >= 2 * one) {
    q >>= 1;
    E++;
  }
  if (q < one) return sign | (uint16_t)q; /* subnormal (E == emin) */
  if (E > emax) return sign | expmask;
  return sign | (uint16_t)((uint64_t)(E + bias) << mbits) | (uint16_t)(q - one);
}

static double widen_float(uint16_t h, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  unsigned ex = (h >> mbits) & ((1u << ebits) - 1);
  unsigned man = h & ((1u << mbits) - 1);
  double s = (h >> (ebits + mbits)) & 1 ? -1.0 : 1.0;
  if (ex == (1u << ebits) - 1) return man ? copysign(NAN, s) : s * INFINITY;
  if (ex == 0) return s * ldexp((double)man, 1 - bias - mbits);
  return s * ldexp((double)(man + (1u << mbits)), (int)ex - bias - mbits);
}

uint16_t ir_f16_from_double(double x) { return narrow_float(x, 5, 10); }
double ir_f16_to_double(uint16_t h) { return widen_float(h, 5, 10); }
uint16_t ir_bf16_from_double(double x) { return narrow_float(x, 8, 7); }
double ir_bf16_to_double(uint16_t h) { return widen_float(h, 8, 7); }

/* ---- elements ---- */

/* An int64 as a double rounded to odd: exact up to 2^53, and otherwise
 * close enough that rounding it once more to a narrower float gives the
 * correctly rounded result (no double-rounding error). */
static double int_to_double(int64_t v) {
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  int s = 0;
  while ((m >> s) >= ((uint64_t)1 << 53)) s++;
  uint64_t top = m >> s;
  if (s && (m & (((uint64_t)1 << s) - 1))) top |= 1;
  double d = ldexp((double)top, s);
  return v < 0 ? -d : d;
}

/* A uint64 as a double rounded to odd, as int_to_double. */
static double u64_to_double(uint64_t m) {
  int s = 0;
  while ((m >> s) >= ((uint64_t)1 << 53)) s++;
  uint64_t top = m >> s;
  if (s && (m & (((uint64_t)1 << s) - 1))) top |= 1;
  return ldexp((double)top, s);
}

/* An integer dtype's range (u64's top as int64: -1, its bits). */
static void int_range(DType dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case TY_I8: *lo = INT8_MIN, *hi = INT8_MAX; return;
    case TY_I16: *lo = INT16_MIN, *hi = INT16_MAX; return;
    case TY_I32: *lo = INT32_MIN, *hi = INT32_MAX; return;
    case TY_U8: *lo = 0, *hi = UINT8_MAX; return;
    case TY_U16: *lo = 0, *hi = UINT16_MAX; return;
    case TY_U32: *lo = 0, *hi = UINT32_MAX; return;
    case TY_U64: *lo = 0, *hi = -1; return;
    case TY_BOOL: *lo = 0, *hi = 1; return;
    default: *lo = INT64_MIN, *hi = INT64_MAX; return;
  }
}

/* Float -> u64: truncate toward zero, saturate to [0, 2^64 - 1], NaN -> 0. */
static uint64_t sat_u64(double x) {
  double t = trunc(x);
  if (isnan(t) || t <= 0) return 0;
  if (t >= 18446744073709551616.0) return UINT64_MAX;
  return (uint64_t)t;
}

/* Float -> int: truncate toward zero, saturate, NaN -> 0. */
static int64_t sat_int(double x, DType dt) {
  if (isnan(x)) return 0;
  if (dt == TY_U64) return (int64_t)sat_u64(x);
  int64_t lo, hi;
  int_range(dt, &lo, &hi);
  double t = trunc(x);
  if (t <= (double)lo) return lo;
  if (t >= (double)hi) return hi; /* (double)INT64_MAX is 2^63 */
  return (int64_t)t;
}

/* Float -> u8 as onnxruntime's Cast does it (and NumPy's astype on x86):
 * truncated toward zero through int32, then modulo 256; NaN, the
 * infinities and |x| >= 2^31 give 0 (what that int32 step gives). */
static uint8_t wrap_u8(double x) {
  if (!(fabs(x) < 2147483648.0)) return 0;
  return (uint8_t)((uint64_t)(int64_t)trunc(x) & 0xffu);
}

static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

double ir_tensor_get(const Tensor *t, int64_t i) {
  switch (t->type.dtype) {
    case TY_F32: return ((const float *)t->data)[i];
    case TY_F16: return ir_f16_to_double(((const uint16_t *)t->data)[i]);
    case TY_BF16: return ir_bf16_to_double(((const uint16_t *)t->data)[i]);
    case TY_I8: return ((const int8_t *)t->data)[i];
    case TY_I32: return ((const int32_t *)t->data)[i];
    case TY_I64: return (double)((const int64_t *)t->data)[i];
    case TY_BOOL: return ((const uint8_t *)t->data)[i] != 0;
    case TY_U8: return ((const uint8_t *)t->data)[i];
    case TY_F64: return ((const double *)t->data)[i];
    case TY_I16: return ((const int16_t *)t->data)[i];
    case TY_U16: return ((const uint16_t *)t->data)[i];
    case TY_U32: return ((const uint32_t *)t->data)[i];
    case TY_U64: return u64_to_double(((const uint64_t *)t->data)[i]);
    case TY_COUNT: break;
  }
  return 0;
}

void ir_tensor_set(Tensor *t, int64_t i, double v) {
  switch (t->type.dtype) {
    case TY_F32: ((float *)t->data)[i] = (float)v; return;
    case TY_F16: ((uint16_t *)t->data)[i] = ir_f16_from_double(v); return;
    case TY_BF16: ((uint16_t *)t->data)[i] = ir_bf16_from_double(v); return;
    case TY_I8: ((int8_t *)t->data)[i] = (int8_t)sat_int(v, TY_I8); return;
    case TY_I32: ((int32_t *)t->data)[i] = (int32_t)sat_int(v, TY_I32); return;
    case TY_I64: ((int64_t *)t->data)[i] = sat_int(v, TY_I64); return;
    case TY_BOOL: ((uint8_t *)t->data)[i] = v != 0; return; /* NaN too, as a cast to bool */
    case TY_U8: ((uint8_t *)t->data)[i] = wrap_u8(v); return;
    case TY_F64: ((double *)t->data)[i] = v; return;
    case TY_I16: ((int16_t *)t->data)[i] = (int16_t)sat_int(v, TY_I16); return;
    case TY_U16: ((uint16_t *)t->data)[i] = (uint16_t)sat_int(v, TY_U16); return;
    case TY_U32: ((uint32_t *)t->data)[i] = (uint32_t)sat_int(v, TY_U32); return;
    case TY_U64: ((uint64_t *)t->data)[i] = sat_u64(v); return;
    case TY_COUNT: return;
  }
}

/* Integer view: exact for integer dtypes, a saturating cast for floats. */
static int64_t get_i(const Tensor *t, int64_t i) {
  switch (t->type.dtype) {
    case TY_I8: return ((const int8_t *)t->data)[i];
    case TY_I32: return ((const int32_t *)t->data)[i];
    case TY_I64: return ((const int64_t *)t->data)[i];
    case TY_U8: return ((const uint8_t *)t->data)[i];
    case TY_I16: return ((const int16_t *)t->data)[i];
    case TY_U16: return ((const uint16_t *)t->data)[i];
    case TY_U32: return ((const uint32_t *)t->data)[i];
    case TY_U64: return (int64_t)((const uint64_t *)t->data)[i]; /* its bits: see is_u64 */
    default: return sat_int(ir_tensor_get(t, i), TY_I64);
  }
}

/* Integers wrap to the result width; into a float they round once. */
static void set_i(Tensor *t, int64_t i, int64_t v) {
  switch (t->type.dtype) {
    case TY_I8: ((int8_t *)t->data)[i] = (int8_t)(uint8_t)((uint64_t)v & 0xff); return;
    case TY_I32: ((int32_t *)t->data)[i] = (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu); return;
    case TY_I64: ((int64_t *)t->data)[i] = v; return;
    case TY_U8: ((uint8_t *)t->data)[i] = (uint8_t)((uint64_t)v & 0xffu); return;
    case TY_F64: ((double *)t->data)[i] = (double)v; return; /* rounded once, to nearest */
    case TY_I16: ((int16_t *)t->data)[i] = (int16_t)(uint16_t)((uint64_t)v & 0xffffu); return;
    case TY_U16: ((uint16_t *)t->data)[i] = (uint16_t)((uint64_t)v & 0xffffu); return;
    case TY_U32: ((uint32_t *)t->data)[i] = (uint32_t)((uint64_t)v & 0xffffffffu); return;
    case TY_U64: ((uint64_t *)t->data)[i] = (uint64_t)v; return;
    default: ir_tensor_set(t, i, int_to_double(v)); return;
  }
}

/* u64 values travel through get_i/set_i as their bits in an int64: the
 * ops where that differs from the unsigned value (division, remainder,
 * order, conversion to a float) look at this. */
static bool is_u64(const Tensor *t) { return t->type.dtype == TY_U64; }

/* An int value v of x's dtype (get_i) into a float tensor out at i. */
static void set_int_as_float(Tensor *out, int64_t i, const Tensor *x, int64_t v) {
  if (!is_u64(x)) {
    set_i(out, i, v);
    return;
  }
  if (out->type.dtype == TY_F64)
    ((double *)out->data)[i] = (double)(uint64_t)v; /* rounded once, to nearest */
  else
    ir_tensor_set(out, i, u64_to_double((uint64_t)v));
}

/* a < b in x's dtype (get_i values). */
static bool int_less(const Tensor *x, int64_t a, int64_t b) {
  return is_u64(x) ? (uint64_t)a < (uint64_t)b : a < b;
}

static bool is_int(const Tensor *t) { return !ir_dtype_is_float(t->type.dtype); }

static int64_t numel(const TensorType *t) { return ir_type_numel(t); }

size_t ir_tensor_nbytes(const TensorType *type) {
  int64_t n = ir_type_numel(type);
  if (n < 0) return 0;
  return (size_t)n * (size_t)ir_dtype_size(type->dtype);
}

bool ir_tensor_alloc(Tensor *t, const TensorType *type) {
  t->type = *type;
  t->data = NULL;
  if (ir_type_numel(type) < 0 || (unsigned)type->dtype >= TY_COUNT) return false;
  size_t nb = ir_tensor_nbytes(type);
  t->data = calloc(nb ? nb : 1, 1);
  return t->data != NULL;
}

void ir_tensor_free(Tensor *t) {
  free(t->data);
  t->data = NULL;
}

const Tensor *ir_tensor_map_find(const TensorMap *m, const char *name) {
  if (!m) return NULL;
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->names[i], name) == 0) return &m->tensors[i];
  return NULL;
}

struct TensorMapEntry {
  const char *name;
  int pos;
};

static int entry_cmp(const void *a, const void *b) {
  const struct TensorMapEntry *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

bool ir_tensor_map_index(TensorMapIndex *ix, const TensorMap *m) {
  ix->map = m;
  ix->sorted = NULL;
  if (!m || m->n == 0) return true;
  ix->sorted = malloc(sizeof *ix->sorted * (size_t)m->n);
  if (!ix->sorted) return false;
  for (int i = 0; i < m->n; i++) ix->sorted[i] = (struct TensorMapEntry){m->names[i], i};
  qsort(ix->sorted, (size_t)m->n, sizeof *ix->sorted, entry_cmp);
  return true;
}

int ir_tensor_map_index_pos(const TensorMapIndex *ix, const char *name) {
  if (!ix->sorted) return -1;
  int lo = 0, hi = ix->map->n; /* the first entry not below name */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (strcmp(ix->sorted[mid].name, name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < ix->map->n && strcmp(ix->sorted[lo].name, name) == 0 ? ix->sorted[lo].pos : -1;
}

const Tensor *ir_tensor_map_index_find(const TensorMapIndex *ix, const char *name) {
  int pos = ir_tensor_map_index_pos(ix, name);
  return pos < 0 ? NULL : &ix->map->tensors[pos];
}

void ir_tensor_map_index_free(TensorMapIndex *ix) {
  free(ix->sorted);
  ix->sorted = NULL;
}

void ir_tensor_map_free(TensorMap *m) {
  for (int i = 0; i < m->n; i++) {
    free((char *)m->names[i]);
    ir_tensor_free(&m->tensors[i]);
  }
  free(m->names);
  free(m->tensors);
  m->n = 0;
  m->names = NULL;
  m->tensors = NULL;
}

/* ---- indexing ---- */

static void strides_of(const TensorType *t, int64_t *st) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->dims[i];
  }
}

static void unravel(int64_t lin, const TensorType *t, int64_t *idx) {
  for (int i = t->rank - 1; i >= 0; i--) {
    int64_t d = t->dims[i];
    idx[i] = d ? lin % d : 0;
    lin = d ? lin / d : 0;
  }
}

/* Strides of `in` read at `out`'s multi-index under NumPy broadcasting:
 * leading dims missing from `in`, and its size-1 dims, get stride 0. */
static void bcast_strides(const TensorType *in, const TensorType *out, int64_t *st) {
  int64_t own[DL_MAX_RANK];
  strides_of(in, own);
  int off = out->rank - in->rank;
  for (int i = 0; i < out->rank; i++) {
    int j = i - off;
    st[i] = (j < 0 || in->dims[j] == 1) ? 0 : own[j];
  }
}

static int64_t dot_idx(const int64_t *idx, const int64_t *st, int rank) {
  int64_t o = 0;
  for (int i = 0; i < rank; i++) o += idx[i] * st[i];
  return o;
}

static void copy_elem(Tensor *dst, int64_t di, const Tensor *src, int64_t si) {
  size_t es = (size_t)ir_dtype_size(src->type.dtype);
  memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* ---- the interpreter's state ---- */

typedef struct Eval {
  const Node *node; /* the node being evaluated, for messages */
  char *err;
  size_t errlen;
} Eval;

static bool fail(Eval *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Eval *e, const char *fmt, ...) {
  size_t used = 0;
  const Node *n = e->node;
  if (n && n->loc.file && n->loc.line > 0)
    used = (size_t)snprintf(e->err, e->errlen, "%s:%d:%d: ", n->loc.file->name, n->loc.line,
                            n->loc.col);
  else if (n && n->loc.file) /* a name, not a place (diag.h) */
    used = (size_t)snprintf(e->err, e->errlen, "%s: ", n->loc.file->name);
  if (n && used < e->errlen)
    used += (size_t)snprintf(e->err + used, e->errlen - used, "%s: ", ir_ops[n->op].name);
  if (used < e->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + used, e->errlen - used, fmt, ap);
    va_end(ap);
  }
  return false;
}

/* ---- elementwise ---- */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double hardsigmoid(double x) { return fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0); }

static double unary_f(const Node *n, double x) {
  switch (n->op) {
    case OP_NEG: return -x;
    case OP_ABS: return fabs(x);
    case OP_RELU: return x > 0 ? x : (isnan(x) ? x : 0.0);
    case OP_LEAKY_RELU: return x >= 0 ? x : x * ir_attr_float(n, "alpha");
    case OP_CLIP: {
      if (isnan(x)) return x;
      double lo = ir_attr_float(n, "min"), hi = ir_attr_float(n, "max");
      return x < lo ? lo : x > hi ? hi : x;
    }
    case OP_SIGMOID: return sigmoid(x);
    case OP_TANH: return tanh(x);
    case OP_GELU:
      if (strcmp(ir_attr_str(n, "approximate"), "tanh") == 0)
        return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case OP_SILU: return x * sigmoid(x);
    case OP_HARDSIGMOID: return hardsigmoid(x);
    case OP_HARDSWISH: return x * hardsigmoid(x);
    case OP_EXP: return exp(x);
    case OP_LOG: return log(x);
    case OP_SQRT: return sqrt(x);
    case OP_RSQRT: return 1.0 / sqrt(x);
    case OP_ERF: return erf(x);
    case OP_RECIPROCAL: return 1.0 / x;
    case OP_SIN: return sin(x);
    case OP_COS: return cos(x);
    case OP_ROUND: return nearbyint(x); /* the default rounding mode: half to even */
    case OP_FLOOR: return floor(x);
    case OP_CEIL: return ceil(x);
    case OP_FP_ROUND: return ir_narrow_round(ir_narrow_find(ir_attr_str(n, "format")), x, ir_attr_int(n, "saturate"));
    case OP_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case OP_TAN: return tan(x);
    case OP_ASIN: return asin(x);
    case OP_ACOS: return acos(x);
    case OP_ATAN: return atan(x);
    case OP_SINH: return sinh(x);
    case OP_COSH: return cosh(x);
    case OP_ASINH: return asinh(x);
    case OP_ACOSH: return acosh(x);
    case OP_ATANH: return atanh(x);
    default: return x; /* OP_CAST */
  }
}

static bool eval_unary(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int64_t count = numel(&out->type);
  bool ints = is_int(x) && is_int(out);
  if (n->op == OP_CAST) {
    for (int64_t i = 0; i < count; i++) {
      if (is_int(x) && !is_int(out))
        set_int_as_float(out, i, x, get_i(x, i));
      else if (is_int(x))
        set_i(out, i, get_i(x, i));
      else
        ir_tensor_set(out, i, ir_tensor_get(x, i)); /* f32 -> f16 etc. round once */
    }
    return true;
  }
  if (ints && (n->op == OP_NEG || n->op == OP_ABS || n->op == OP_RELU || n->op == OP_CLIP ||
               n->op == OP_SIGN)) {
    /* Clip keeps the integers inside [min, max]. */
    double lo = 0, hi = 0;
    if (n->op == OP_CLIP) lo = ceil(ir_attr_float(n, "min")), hi = floor(ir_attr_float(n, "max"));
    bool u = is_u64(x);
    for (int64_t i = 0; i < count; i++) {
      int64_t v = get_i(x, i), r = v;
      bool neg = !u && v < 0;
      if (n->op == OP_NEG) r = wsub(0, v);
      if (n->op == OP_ABS) r = neg ? wsub(0, v) : v;
      if (n->op == OP_RELU) r = neg ? 0 : v;
      if (n->op == OP_SIGN) r = neg ? -1 : v != 0;
      if (n->op == OP_CLIP) {
        double dv = u ? (double)(uint64_t)v : (double)v;
        if (dv < lo) r = sat_int(lo, x->type.dtype);
        if (dv > hi) r = sat_int(hi, x->type.dtype);
      }
      set_i(out, i, r);
    }
    return true;
  }
  for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, unary_f(n, ir_tensor_get(x, i)));
  return true;
}

/* The scale of element i of the result: the attribute, or the scale
 * operand broadcast into the result's shape (st: its strides there). */
static float quant_scale(const Node *n, const Tensor *scale, const int64_t *st, const TensorType *t,
                         int64_t i) {
  if (!scale) return (float)ir_attr_float(n, "scale");
  int64_t idx[DL_MAX_RANK];
  unravel(i, t, idx);
  return ((const float *)scale->data)[dot_idx(idx, st, t->rank)];
}

/* In f32 throughout, as the kernels compute it: one rounding for the
 * division, then to nearest even, so that both agree bit for bit.  The
 * code is saturated to [lo, hi] (ir_quant_range). */
static int quantize_one(float x, float s, int zp, int lo, int hi) {
  float q = x / s;
  if (isnan(q)) return zp;
  /* Clamped before the zero point is added, so no float is ever
   * converted out of int's range. */
  q = nearbyintf(q);
  float l = (float)(lo - zp), h = (float)(hi - zp);
  return (int)(q < l ? l : q > h ? h : q) + zp;
}

static int zero_point(const Node *n) {
  const Attr *z = ir_attr(n, "zero_point");
  return z ? (int)z->i : 0;
}

static bool eval_quant(const Node *n, const Tensor *x, const Tensor *scale, Tensor *out) {
  int64_t count = numel(&out->type), st[DL_MAX_RANK] = {0};
  if (scale) bcast_strides(&scale->type, &out->type, st);
  int zp = zero_point(n), lo = 0, hi = 0;
  if (n->op == OP_QUANTIZE) ir_quant_range(n, &lo, &hi);
  for (int64_t i = 0; i < count; i++) {
    float s = quant_scale(n, scale, st, &out->type, i);
    if (n->op == OP_QUANTIZE)
      set_i(out, i, quantize_one((float)ir_tensor_get(x, i), s, zp, lo, hi));
    else
      ((float *)out->data)[i] = (float)(get_i(x, i) - zp) * s;
  }
  return true;
}

static double binary_f(OpKind op, double a, double b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return pow(a, b);
    case OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case OP_EQ: return a == b;
    case OP_NE: return a != b;
    case OP_LT: return a < b;
    case OP_LE: return a <= b;
    case OP_GT: return a > b;
    case OP_GE: return a >= b;
    default: return 0;
  }
}

/* Python's float %: fmod, moved into b's sign (a zero takes b's sign). */
static double float_mod(double a, double b, bool c_fmod) {
  double r = fmod(a, b);
  if (c_fmod) return r;
  if (r != 0) return (r < 0) != (b < 0) ? r + b : r;
  return copysign(0.0, b);
}

/* The integer remainder, b != 0: a's sign (C's %) or b's (Python's). */
static int64_t int_mod(int64_t a, int64_t b, bool c_fmod) {
  int64_t r = b == -1 ? 0 : a % b; /* INT64_MIN % -1 overflows in C */
  if (!c_fmod && r != 0 && (r < 0) != (b < 0)) r += b;
  return r;
}

/* Integer a ** b: exact modulo 2^64 for b >= 0; b < 0 is 1 / a^-b. */
static bool ipow(int64_t a, int64_t b, int64_t *r) {
  if (b < 0) {
    if (a == 0) return false;
    *r = a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    return true;
  }
  int64_t acc = 1;
  while (b) {
    if (b & 1) acc = wmul(acc, a);
    a = wmul(a, a);
    b >>= 1;
  }
  *r = acc;
  return true;
}

static bool eval_binary(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  int64_t count = numel(ot);
  bool ints = is_int(a) && is_int(b) && is_int(out);
  bool c_fmod = n->op == OP_MOD && ir_attr_int(n, "fmod");
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    int64_t ia = dot_idx(idx, sa, ot->rank), ib = dot_idx(idx, sb, ot->rank);
    if (!ints) {
      double x = ir_tensor_get(a, ia), y = ir_tensor_get(b, ib);
      ir_tensor_set(out, i, n->op == OP_MOD ? float_mod(x, y, c_fmod) : binary_f(n->op, x, y));
      continue;
    }
    int64_t x = get_i(a, ia), y = get_i(b, ib), r = 0;
    if (is_u64(out)) {
      uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
      bool by_zero = (n->op == OP_DIV || n->op == OP_MOD) && uy == 0;
      if (by_zero) return fail(e, "integer division by zero");
      if (n->op == OP_DIV) r = (int64_t)(ux / uy);
      else if (n->op == OP_MOD) r = (int64_t)(ux % uy);
      else if (n->op == OP_MAXIMUM) r = ux > uy ? x : y;
      else if (n->op == OP_MINIMUM) r = ux < uy ? x : y;
      else if (n->op == OP_LT || n->op == OP_LE || n->op == OP_GT || n->op == OP_GE)
        r = n->op == OP_LT ? ux < uy : n->op == OP_LE ? ux <= uy : n->op == OP_GT ? ux > uy : ux >= uy;
      else if (n->op == OP_POW && (int64_t)uy < 0)
        return fail(e, "u64 exponent %" PRIu64 " is not supported", uy);
      else if ((n->op == OP_SHL || n->op == OP_SHR) && uy >= 64)
        r = 0;
      else
        goto signed_op;
      set_i(out, i, r);
      continue;
    }
  signed_op:
    switch (n->op) {
      case OP_BIT_AND: r = x & y; break;
      case OP_BIT_OR: r = x | y; break;
      case OP_BIT_XOR: r = x ^ y; break;
      case OP_SHL:
      case OP_SHR: { /* x: the value of a signed a, the bits of an unsigned one */
        int64_t bits = ir_dtype_size(out->type.dtype) * 8;
        bool sgn = out->type.dtype == TY_I8 || out->type.dtype == TY_I16 || out->type.dtype == TY_I32 ||
                   out->type.dtype == TY_I64;
        uint64_t ux = (uint64_t)x;
        if (!sgn && bits < 64) ux &= ((uint64_t)1 << bits) - 1;
        if (y < 0 || y >= bits)
          r = n->op == OP_SHR && sgn && x < 0 ? -1 : 0;
        else if (n->op == OP_SHL)
          r = (int64_t)(ux << y); /* set_i wraps it to the width */
        else
          r = sgn ? (x < 0 ? ~(~x >> y) : x >> y) : (int64_t)(ux >> y);
        break;
      }
      case OP_ADD: r = wadd(x, y); break;
      case OP_SUB: r = wsub(x, y); break;
      case OP_MUL: r = wmul(x, y); break;
      case OP_DIV:
        if (y == 0) return fail(e, "integer division by zero");
        r = (y == -1) ? wsub(0, x) : x / y; /* INT64_MIN / -1 wraps */
        break;
      case OP_POW:
        if (!ipow(x, y, &r)) return fail(e, "integer division by zero (0 to a negative power)");
        break;
      case OP_MOD:
        if (y == 0) return fail(e, "integer division by zero (a remainder of division by 0)");
        r = int_mod(x, y, c_fmod);
        break;
      case OP_MAXIMUM: r = x > y ? x : y; break;
      case OP_MINIMUM: r = x < y ? x : y; break;
      case OP_EQ: r = x == y; break;
      case OP_NE: r = x != y; break;
      case OP_LT: r = x < y; break;
      case OP_LE: r = x <= y; break;
      case OP_GT: r = x > y; break;
      case OP_GE: r = x >= y; break;
      default: break;
    }
    set_i(out, i, r);
  }
  return true;
}

/* ---- bool results ---- */

/* In double for floats (exact for every float dtype), in int64 for the
 * integers and bools: IEEE's rules, so a NaN is unequal to everything. */
static bool compare(OpKind op, const Tensor *a, int64_t ia, const Tensor *b, int64_t ib) {
  if (!is_int(a)) {
    double x = ir_tensor_get(a, ia), y = ir_tensor_get(b, ib);
    switch (op) {
      case OP_EQUAL: return x == y;
      case OP_NOT_EQUAL: return x != y;
      case OP_LESS: return x < y;
      case OP_LESS_EQUAL: return x <= y;
      case OP_GREATER: return x > y;
      default: return x >= y;
    }
  }
  int64_t x = get_i(a, ia), y = get_i(b, ib);
  switch (op) {
    case OP_EQUAL: return x == y;
    case OP_NOT_EQUAL: return x != y;
    case OP_LESS: return int_less(a, x, y);
    case OP_LESS_EQUAL: return !int_less(a, y, x);
    case OP_GREATER: return int_less(a, y, x);
    default: return !int_less(a, x, y);
  }
}

static bool logic(OpKind op, bool x, bool y) {
  switch (op) {
    case OP_LOGICAL_AND: return x && y;
    case OP_LOGICAL_OR: return x || y;
    default: return x != y; /* OP_LOGICAL_XOR */
  }
}

/* The comparisons and binary logic, operands broadcast into out. */
static bool eval_bool_binary(const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  bool logical = n->op == OP_LOGICAL_AND || n->op == OP_LOGICAL_OR || n->op == OP_LOGICAL_XOR;
  uint8_t *r = out->data;
  for (int64_t i = 0, count = numel(ot); i < count; i++) {
    unravel(i, ot, idx);
    int64_t ia = dot_idx(idx, sa, ot->rank), ib = dot_idx(idx, sb, ot->rank);
    r[i] = logical ? logic(n->op, get_i(a, ia) != 0, get_i(b, ib) != 0) : compare(n->op, a, ia, b, ib);
  }
  return true;
}

/* logical_not, isnan, isinf: one operand of out's shape. */
static bool eval_bool_unary(const Node *n, const Tensor *x, Tensor *out) {
  uint8_t *r = out->data;
  for (int64_t i = 0, count = numel(&out->type); i < count; i++) {
    double v = ir_tensor_get(x, i);
    r[i] = n->op == OP_LOGICAL_NOT ? v == 0 : n->op == OP_ISNAN ? isnan(v) != 0 : isinf(v) != 0;
  }
  return true;
}

/* Each element copied from a or b as cond says, all three broadcast. */
static bool eval_where(const Tensor *cond, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sc[DL_MAX_RANK], sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&cond->type, ot, sc);
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  for (int64_t i = 0, count = numel(ot); i < count; i++) {
    unravel(i, ot, idx);
    bool pick_a = ((const uint8_t *)cond->data)[dot_idx(idx, sc, ot->rank)] != 0;
    if (pick_a)
      copy_elem(out, i, a, dot_idx(idx, sa, ot->rank));
    else
      copy_elem(out, i, b, dot_idx(idx, sb, ot->rank));
  }
  return true;
}

/* ---- reductions ---- */

static bool eval_reduce(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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
  int_range(out->type.dtype, &ilo, &ihi);
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

/* Splits x's dims around axis: outer * len * inner. */
static void split_axis(const TensorType *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= t->dims[i];
  *len = t->dims[axis];
  for (int i = axis + 1; i < t->rank; i++) *inner *= t->dims[i];
}

static bool eval_argmax(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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

static bool eval_softmax(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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
static bool eval_norm(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
                      Tensor *out) {
  int64_t outer = 1, len = 1, per_weight = 1, groups = 1;
  if (n->op == OP_GROUP_NORM) {
    groups = ir_attr_int(n, "groups");
    if (x->type.rank < 2 || groups < 1 || x->type.dims[1] % groups)
      return fail(e, "groups must divide the channels of an input [N, C, ...]");
    for (int i = 2; i < x->type.rank; i++) per_weight *= x->type.dims[i];
    outer = x->type.dims[0] * groups;
    len = numel(&x->type) / (outer ? outer : 1);
  } else {
    int axis = norm_axis(ir_attr_int(n, "axis"), x->type.rank);
    if (axis < 0 || axis > x->type.rank) return fail(e, "axis out of range");
    for (int i = 0; i < axis; i++) outer *= x->type.dims[i];
    for (int i = axis; i < x->type.rank; i++) len *= x->type.dims[i];
  }
  int64_t weights = n->op == OP_GROUP_NORM ? x->type.dims[1] : len;
  if ((w && numel(&w->type) != weights) || (b && numel(&b->type) != weights))
    return fail(e, "weight and bias must have %" PRId64 " elements", weights);
  double eps = ir_attr_float(n, "eps");
  bool rms = n->op == OP_RMS_NORM;
  for (int64_t o = 0; o < outer; o++) {
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t k = 0; k < len; k++) mean += ir_tensor_get(x, o * len + k);
      mean /= (double)len;
    }
    for (int64_t k = 0; k < len; k++) {
      double d = ir_tensor_get(x, o * len + k) - mean;
      var += d * d;
    }
    var /= (double)len;
    double inv = 1.0 / sqrt(var + eps);
    for (int64_t k = 0; k < len; k++) {
      int64_t at = n->op == OP_GROUP_NORM ? o % groups * (len / per_weight) + k / per_weight : k;
      double y = (ir_tensor_get(x, o * len + k) - mean) * inv;
      if (w) y *= ir_tensor_get(w, at);
      if (b) y += ir_tensor_get(b, at);
      ir_tensor_set(out, o * len + k, y);
    }
  }
  return true;
}

/* softmax(q k^T * scale + mask) v for each batch, head and query row,
 * in double; a row with no key left gives zeros. */
static bool eval_attention(const Node *n, Tensor *const *in, Tensor *out) {
  const Tensor *q = in[0], *k = in[1], *v = in[2], *mask = n->n_in > 3 ? in[3] : NULL;
  bool bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0;
  int hx = bshd ? 2 : 1, sx = bshd ? 1 : 2;
  const int64_t *qd = q->type.dims;
  int64_t B = qd[0], H = qd[hx], Sq = qd[sx], d = qd[3], Hkv = k->type.dims[hx], Sk = k->type.dims[sx];
  double scale = ir_attr(n, "scale") ? ir_attr_float(n, "scale") : 1 / sqrt((double)d);
  bool causal = ir_attr_int(n, "causal") != 0;
  /* rows (b, h, s) of q/out and of k/v as element offsets */
#define ROW(b, h, s, heads, len) (bshd ? (((b) * (len) + (s)) * (heads) + (h)) * d : (((b) * (heads) + (h)) * (len) + (s)) * d)
  /* the mask's strides over [B, H, Sq, Sk], 0 where it broadcasts */
  int64_t ms[4] = {0, 0, 0, 0};
  if (mask) {
    const TensorType *mt = &mask->type;
    int64_t st = 1;
    for (int i = mt->rank - 1; i >= 0; st *= mt->dims[i], i--) ms[4 - mt->rank + i] = mt->dims[i] == 1 ? 0 : st;
  }
  double *s = malloc(sizeof *s * (size_t)(Sk ? Sk : 1));
  if (!s) return false;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / Hkv);
      for (int64_t i = 0; i < Sq; i++) {
        int64_t qi = ROW(b, h, i, H, Sq);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Sk; j++) {
          int64_t kj = ROW(b, kh, j, Hkv, Sk);
          double dot = 0;
          for (int64_t c = 0; c < d; c++) dot += ir_tensor_get(q, qi + c) * ir_tensor_get(k, kj + c);
          s[j] = dot * scale;
          if (mask) {
            double m = ir_tensor_get(mask, b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]);
            s[j] = mask->type.dtype == TY_BOOL ? (m != 0 ? s[j] : -INFINITY) : s[j] + m;
          }
          if (causal && j > i) s[j] = -INFINITY;
          if (s[j] > mx) mx = s[j];
        }
        for (int64_t j = 0; j < Sk; j++) {
          s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t c = 0; c < d; c++) {
          double o = 0;
          for (int64_t j = 0; j < Sk; j++) o += s[j] * ir_tensor_get(v, ROW(b, kh, j, Hkv, Sk) + c);
          ir_tensor_set(out, qi + c, sum > 0 ? o / sum : 0);
        }
      }
    }
#undef ROW
  free(s);
  return true;
}

static bool eval_global_avgpool(Eval *e, const Tensor *x, Tensor *out) {
  const TensorType *t = &x->type;
  if (t->rank < 2) return fail(e, "needs [N, C, ...]");
  int64_t outer = t->dims[0] * t->dims[1], len = 1;
  for (int i = 2; i < t->rank; i++) len *= t->dims[i];
  for (int64_t o = 0; o < outer; o++) {
    double s = 0;
    for (int64_t k = 0; k < len; k++) s += ir_tensor_get(x, o * len + k);
    ir_tensor_set(out, o, s / (double)len);
  }
  return true;
}

static bool eval_batchnorm(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
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

static bool eval_matmul(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
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
  batch.rank = ab.rank > bb.rank ? ab.rank : bb.rank;
  for (int i = 0; i < batch.rank; i++) {
    int ia = i - (batch.rank - ab.rank), ib = i - (batch.rank - bb.rank);
    int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return fail(e, "batch dims do not broadcast");
    batch.dims[i] = da == 1 ? db : da;
  }
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

static bool eval_linear(Eval *e, const Tensor *x, const Tensor *w, const Tensor *b, Tensor *out) {
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
  for (int d = 0; d < nsp; d++) {
    win->in[d] = x->dims[2 + d];
    win->out[d] = out->dims[2 + d];
    win->k[d] = w ? w->dims[2 + d] : kern[d];
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

/* conv2d and conv3d: each output element sums its window over the
 * channels of its group, in the order (channel, then taps row-major). */
static bool eval_conv(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
                      Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, &w->type, &out->type, &win)) return false;
  int64_t groups = ir_attr_int(n, "groups");
  const TensorType *xt = &x->type, *wt = &w->type, *ot = &out->type;
  int64_t N = xt->dims[0], C = xt->dims[1], Co = wt->dims[0], Cg = wt->dims[1];
  if (groups < 1 || C % groups || Co % groups || Cg != C / groups || ot->dims[0] != N ||
      ot->dims[1] != Co)
    return fail(e, "channels do not fit groups");
  if (b && numel(&b->type) != Co) return fail(e, "bias must have %" PRId64 " elements", Co);
  int64_t cog = Co / groups;
  bool ints = is_int(x) && is_int(w) && is_int(out);
  /* int8 with a zero point: the padding reads it (a real 0). */
  const Attr *zpa = ir_attr(n, "zero_point");
  int64_t zp = zpa ? zpa->i : 0;
  for (int64_t nb = 0; nb < N; nb++)
    for (int64_t co = 0; co < Co; co++) {
      int64_t g = co / cog;
      for (int64_t o = 0; o < win.out_size; o++) {
        int64_t oc[MAX_SPATIAL];
        window_out_coords(&win, o, oc);
        Acc acc = {.ints = ints};
        for (int64_t ci = 0; ci < Cg; ci++) {
          int64_t kc[MAX_SPATIAL] = {0, 0, 0};
          for (int64_t t = 0; t < win.k_size; t++, window_next_tap(&win, kc)) {
            int64_t wi = (co * Cg + ci) * win.k_size + t, at = window_tap(&win, oc, kc, NULL);
            if (at < 0) {
              if (zp) acc.i = wadd(acc.i, wmul(zp, get_i(w, wi)));
              continue;
            }
            acc_mac(&acc, x, (nb * C + g * Cg + ci) * win.in_size + at, w, wi);
          }
        }
        if (b) acc_add(&acc, b, co);
        acc_store(&acc, out, (nb * Co + co) * win.out_size + o);
      }
    }
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
 * covers it. */
static bool eval_conv_transpose(Eval *e, const Node *n, const Tensor *x, const Tensor *w,
                                const Tensor *b, Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, &w->type, &out->type, &win)) return false;
  int64_t groups = ir_attr_int(n, "groups");
  const TensorType *xt = &x->type, *wt = &w->type, *ot = &out->type;
  int64_t N = xt->dims[0], C = xt->dims[1], Cog = wt->dims[1], Co = ot->dims[1];
  if (groups < 1 || C % groups || wt->dims[0] != C || Co != Cog * groups || ot->dims[0] != N)
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
            if (at >= 0)
              acc_mac(&acc, x, (nb * C + ci) * win.in_size + at, w, (ci * Cog + cw) * win.k_size + t);
          }
        }
        if (b) acc_add(&acc, b, co);
        acc_store(&acc, out, (nb * Co + co) * win.out_size + o);
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

static bool eval_resize(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  const TensorType *xt = &x->type, *ot = &out->type;
  if (xt->rank != 4 || ot->rank != 4) return fail(e, "needs rank-4 x");
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0;
  bool align = ir_attr_int(n, "align_corners") != 0;
  int64_t NC = xt->dims[0] * xt->dims[1], H = xt->dims[2], W = xt->dims[3];
  int64_t OH = ot->dims[2], OW = ot->dims[3];
  for (int64_t c = 0; c < NC; c++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const int64_t base = c * H * W, o = (c * OH + oh) * OW + ow;
        if (!linear) {
          /* A copy: integers through int64 so that i64 stays exact. */
          int64_t xi = base + (oh * H / OH) * W + ow * W / OW;
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
        double v = (1 - lh) * ((1 - lw) * ir_tensor_get(x, base + h0 * W + w0) +
                               lw * ir_tensor_get(x, base + h0 * W + w1)) +
                   lh * ((1 - lw) * ir_tensor_get(x, base + h1 * W + w0) +
                         lw * ir_tensor_get(x, base + h1 * W + w1));
        ir_tensor_set(out, o, v);
      }
  return true;
}

/* ---- grid_sample: onnxruntime's (PyTorch's), in f32 ---- */

typedef struct Sampler {
  const Tensor *x;
  int64_t plane, H, W; /* plane: the first element of x[n, c] */
  bool align, border, reflection;
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

static float gs_pixel(const Sampler *s, float row, float col) {
  bool in_r, in_c;
  row = gs_index(s, row, s->H, &in_r);
  col = gs_index(s, col, s->W, &in_c);
  if (!in_r || !in_c) return 0;
  return (float)ir_tensor_get(s->x, s->plane + (int64_t)row * s->W + (int64_t)col);
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

static float gs_sample(const Sampler *s, const char *mode, float gx, float gy) {
  bool nearest = strcmp(mode, "nearest") == 0;
  float x = gs_source(s, gx, s->W, nearest), y = gs_source(s, gy, s->H, nearest);
  if (nearest) return gs_pixel(s, truncf(y), truncf(x));
  float x0 = floorf(x), y0 = floorf(y), wx[4], wy[4];
  int taps = 2, first = 0;
  if (strcmp(mode, "bicubic") == 0) {
    taps = 4, first = -1;
    gs_cubic(x - x0, wx);
    gs_cubic(y - y0, wy);
  } else {
    wx[0] = 1 - (x - x0), wx[1] = x - x0;
    wy[0] = 1 - (y - y0), wy[1] = y - y0;
  }
  /* Along each row first, then down the rows, as the reference. */
  float v = 0;
  for (int i = 0; i < taps; i++) {
    float row = 0;
    for (int j = 0; j < taps; j++)
      row += wx[j] * gs_pixel(s, y0 + (float)(first + i), x0 + (float)(first + j));
    v += wy[i] * row;
  }
  return v;
}

static bool eval_grid_sample(const Node *n, const Tensor *x, const Tensor *grid, Tensor *out) {
  const char *mode = ir_attr_str(n, "mode"), *pad = ir_attr_str(n, "padding_mode");
  Sampler s = {.x = x,
               .H = x->type.dims[2],
               .W = x->type.dims[3],
               .align = ir_attr_int(n, "align_corners") != 0,
               .border = strcmp(pad, "border") == 0,
               .reflection = strcmp(pad, "reflection") == 0};
  int64_t N = x->type.dims[0], C = x->type.dims[1];
  int64_t points = out->type.dims[2] * out->type.dims[3];
  for (int64_t b = 0; b < N; b++)
    for (int64_t c = 0; c < C; c++) {
      s.plane = (b * C + c) * s.H * s.W;
      for (int64_t p = 0; p < points; p++) {
        int64_t g = (b * points + p) * 2;
        float gx = (float)ir_tensor_get(grid, g), gy = (float)ir_tensor_get(grid, g + 1);
        ir_tensor_set(out, (b * C + c) * points + p, gs_sample(&s, mode, gx, gy));
      }
    }
  return true;
}

static bool eval_pool(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  Window win;
  if (!window_of(e, n, &x->type, NULL, &out->type, &win)) return false;
  bool is_max = n->op == OP_MAXPOOL2D || n->op == OP_MAXPOOL3D;
  bool include_pad = !is_max && ir_attr_int(n, "count_include_pad");
  int64_t NC = x->type.dims[0] * x->type.dims[1];
  bool ints = is_int(x);
  for (int64_t c = 0; c < NC; c++)
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
        int64_t i = c * win.in_size + at;
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
      int64_t at = c * win.out_size + o;
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
  return true;
}

/* ---- data movement ---- */

static bool eval_transpose(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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

static bool eval_expand(Eval *e, const Tensor *x, Tensor *out) {
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

static bool eval_concat(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *out) {
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

static bool eval_slice(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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

static bool eval_pad(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
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

static bool eval_gather(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
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

static bool eval_gather_elements(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
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

static bool eval_gather_nd(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out) {
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

static bool eval_scatter_elements(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
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

static bool eval_scatter_nd(Eval *e, const Node *n, Tensor *const *in, Tensor *out) {
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

/* The k first of each row in topk's order, by selection: the j-th is the
 * first of the elements that come after the (j-1)-th, so nothing needs
 * sorting or marking (the kernel does the same). */
static bool eval_topk(Eval *e, const Node *n, const Tensor *x, Tensor *outs) {
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
static bool eval_rnn(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *outs) {
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

/* ---- sources ---- */

static bool eval_source(Eval *e, const Node *n, const TensorMapIndex *m, const char *what, Tensor *out) {
  const char *name = ir_attr_str(n, "name");
  const Tensor *t = ir_tensor_map_index_find(m, name);
  char want[IR_TYPE_STR_MAX], got[IR_TYPE_STR_MAX];
  ir_type_str(&n->out[0].type, want, sizeof want);
  if (!t) return fail(e, "no %s named '%s' (%s) was given", what, name, want);
  if (!ir_type_eq(&t->type, &n->out[0].type))
    return fail(e, "%s '%s' is %s, the graph expects %s", what, name,
                ir_type_str(&t->type, got, sizeof got), want);
  if (!t->data && ir_tensor_nbytes(&t->type)) return fail(e, "%s '%s' has no data", what, name);
  out->type = t->type;
  out->data = t->data;
  return true;
}

/* Runs one node: the results in out[] are allocated (except for sources,
 * which point at the caller's data). */
static bool eval_node(Eval *e, const Node *n, Tensor *const *in, Tensor *out,
                      const TensorMapIndex *inputs, const TensorMapIndex *params) {
  switch (n->op) {
    case OP_INPUT: return eval_source(e, n, inputs, "input", out);
    case OP_PARAM: return eval_source(e, n, params, "param", out);
    case OP_CONST: {
      int64_t count = numel(&out->type);
      for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, ir_attr_float(n, "value"));
      return true;
    }
    case OP_IOTA: {
      /* start + step * the coordinate along axis, rounded once. */
      const TensorType *t = &out->type;
      int axis = (int)ir_attr_int(n, "axis");
      int64_t inner = 1;
      for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
      int64_t len = t->rank ? t->dims[axis] : 1, count = numel(t);
      double start = ir_attr_float(n, "start"), step = ir_attr_float(n, "step");
      for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, start + step * (double)(i / inner % len));
      return true;
    }
    case OP_NEG:
    case OP_ABS:
    case OP_RELU:
    case OP_LEAKY_RELU:
    case OP_CLIP:
    case OP_SIGMOID:
    case OP_TANH:
    case OP_GELU:
    case OP_SILU:
    case OP_HARDSIGMOID:
    case OP_HARDSWISH:
    case OP_EXP:
    case OP_LOG:
    case OP_SQRT:
    case OP_RSQRT:
    case OP_ERF:
    case OP_RECIPROCAL:
    case OP_SIN:
    case OP_COS:
    case OP_ROUND:
    case OP_FLOOR:
    case OP_CEIL:
    case OP_FP_ROUND:
    case OP_SIGN:
    case OP_TAN:
    case OP_ASIN:
    case OP_ACOS:
    case OP_ATAN:
    case OP_SINH:
    case OP_COSH:
    case OP_ASINH:
    case OP_ACOSH:
    case OP_ATANH:
    case OP_CAST: return eval_unary(e, n, in[0], out);
    case OP_ALLREDUCE_MEAN: /* one process: the mean over one rank */
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_QUANTIZE:
    case OP_DEQUANTIZE: return eval_quant(n, in[0], n->n_in > 1 ? in[1] : NULL, out);
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_POW:
    case OP_MAXIMUM:
    case OP_MINIMUM:
    case OP_MOD:
    case OP_EQ:
    case OP_NE:
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
    case OP_BIT_AND:
    case OP_BIT_OR:
    case OP_BIT_XOR:
    case OP_SHL:
    case OP_SHR: return eval_binary(e, n, in[0], in[1], out);
    case OP_BITCAST: /* same size: the bytes as they are */
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_BIT_NOT:
      for (int64_t i = 0, count = numel(&out->type); i < count; i++) set_i(out, i, ~get_i(in[0], i));
      return true;
    case OP_EQUAL:
    case OP_NOT_EQUAL:
    case OP_LESS:
    case OP_LESS_EQUAL:
    case OP_GREATER:
    case OP_GREATER_EQUAL:
    case OP_LOGICAL_AND:
    case OP_LOGICAL_OR:
    case OP_LOGICAL_XOR: return eval_bool_binary(n, in[0], in[1], out);
    case OP_ISNAN:
    case OP_ISINF:
    case OP_LOGICAL_NOT: return eval_bool_unary(n, in[0], out);
    case OP_WHERE: return eval_where(in[0], in[1], in[2], out);
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_REDUCE_PROD: return eval_reduce(e, n, in[0], out);
    case OP_ARGMAX: return eval_argmax(e, n, in[0], out);
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: return eval_softmax(e, n, in[0], out);
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM:
      return eval_norm(e, n, in[0], n->n_in > 1 ? in[1] : NULL, n->n_in > 2 ? in[2] : NULL, out);
    case OP_GLOBAL_AVGPOOL: return eval_global_avgpool(e, in[0], out);
    case OP_ATTENTION: return eval_attention(n, in, out) || fail(e, "out of memory");
    case OP_BATCHNORM: return eval_batchnorm(e, n, in, out);
    case OP_MATMUL: return eval_matmul(e, n, in[0], in[1], out);
    case OP_LINEAR: return eval_linear(e, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_CONV2D:
    case OP_CONV3D: return eval_conv(e, n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_RESIZE: return eval_resize(e, n, in[0], out);
    case OP_GRID_SAMPLE: return eval_grid_sample(n, in[0], in[1], out);
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D:
      return eval_conv_transpose(e, n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D: return eval_pool(e, n, in[0], out);
    case OP_RESHAPE:
      if (ir_tensor_nbytes(&in[0]->type) != ir_tensor_nbytes(&out->type))
        return fail(e, "element counts differ");
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_TRANSPOSE: return eval_transpose(e, n, in[0], out);
    case OP_EXPAND: return eval_expand(e, in[0], out);
    case OP_CONCAT: return eval_concat(e, n, n->n_in, in, out);
    case OP_SLICE: return eval_slice(e, n, in[0], out);
    case OP_PAD: return eval_pad(e, n, in[0], out);
    case OP_GATHER: return eval_gather(e, n, in[0], in[1], out);
    case OP_GATHER_ELEMENTS: return eval_gather_elements(e, n, in[0], in[1], out);
    case OP_GATHER_ND: return eval_gather_nd(e, n, in[0], in[1], out);
    case OP_SCATTER_ELEMENTS: return eval_scatter_elements(e, n, in, out);
    case OP_SCATTER_ND: return eval_scatter_nd(e, n, in, out);
    case OP_TOPK: return eval_topk(e, n, in[0], out);
    case OP_LSTM:
    case OP_GRU: return eval_rnn(e, n, n->n_in, in, out);
    case OP_CONV_WEIGHT_GRAD:
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD:
    case OP_EMBEDDING_GRAD:
    case OP_DROPOUT:
    case OP_RESIZE_GRAD:
    case OP_OPTIM_UPDATE: {
      char msg[256];
      return ir_eval_train_op(n, in, out, msg, sizeof msg) || fail(e, "%s", msg);
    }
    case OP_COUNT: break;
  }
  return fail(e, "unknown op %d", (int)n->op);
}

/* ---- the graph ---- */

typedef struct Slot {
  const Value *v;
  Tensor t;
  bool ready, owned;
  int last_use; /* index of the last node reading it; -1: none */
  bool is_output;
} Slot;

static void slot_release(Slot *s) {
  if (s->owned) ir_tensor_free(&s->t);
  s->t.data = NULL;
  s->owned = false;
}

/* Checks what the op functions rely on: operand count, attributes of the
 * right kinds, and result types equal to the shape rule's. */
static bool check_node(Eval *e, const Node *n) {
  const OpInfo *info = &ir_ops[n->op];
  if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in))
    return fail(e, "wrong number of operands (%d)", n->n_in);
  for (int i = 0; i < info->n_attrs; i++) {
    const AttrSpec *s = &info->attrs[i];
    const Attr *a = ir_attr(n, s->name);
    bool optional = s->default_text && strcmp(s->default_text, "?") == 0;
    if ((!a && !optional) || (a && a->kind != s->kind))
      return fail(e, "attribute '%s' is %s", s->name, a ? "of the wrong kind" : "missing");
  }
  for (int i = 0; i < n->n_out; i++) {
    const TensorType *t = &n->out[i].type;
    if ((unsigned)t->dtype >= TY_COUNT || t->rank < 0 || t->rank > DL_MAX_RANK ||
        ir_type_numel(t) < 0)
      return fail(e, "result %d has an invalid type", i);
  }
  if (!info->shape) return true;
  TensorType want[8];
  char msg[256];
  memset(want, 0, sizeof want);
  if (!info->shape(n, want, msg, sizeof msg)) return fail(e, "%s", msg);
  for (int i = 0; i < n->n_out; i++)
    if (!ir_type_eq(&want[i], &n->out[i].type)) {
      char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
      return fail(e, "result %d is %s, its shape rule says %s", i,
                  ir_type_str(&n->out[i].type, a, sizeof a), ir_type_str(&want[i], b, sizeof b));
    }
  return true;
}

bool ir_eval(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
             char *err, size_t errlen) {
  return ir_eval_observe(g, inputs, params, outputs, NULL, NULL, err, errlen);
}

bool ir_eval_observe(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                     IrEvalObserver observe, void *ud, char *err, size_t errlen) {
  Eval e = {.err = err, .errlen = errlen};
  if (errlen) err[0] = 0;
  for (int i = 0; i < g->n_outputs; i++) outputs[i] = (Tensor){0};
  ir_number(g);
  int nvals = 0, nnodes = 0;
  for (Node *n = g->first; n; n = n->next) nvals += n->n_out, nnodes++;
  Slot *slots = calloc((size_t)nvals + 1, sizeof(Slot));
  TensorMapIndex in_ix, param_ix;
  bool indexed = ir_tensor_map_index(&in_ix, inputs);
  if (indexed && !ir_tensor_map_index(&param_ix, params)) {
    ir_tensor_map_index_free(&in_ix);
    indexed = false;
  }
  if (!slots || !indexed) {
    free(slots);
    if (indexed) ir_tensor_map_index_free(&in_ix), ir_tensor_map_index_free(&param_ix);
    return fail(&e, "out of memory");
  }
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_out; i++) {
      slots[n->out[i].id].v = &n->out[i];
      slots[n->out[i].id].last_use = -1;
    }
  bool ok = true;
  /* Last uses, so intermediates die as soon as they can. */
  int k = 0;
  for (Node *n = g->first; n && ok; n = n->next, k++)
    for (int i = 0; i < n->n_in; i++) {
      const Value *v = n->in[i];
      if (!v || v->id < 0 || v->id >= nvals || slots[v->id].v != v) {
        e.node = n;
        ok = fail(&e, "operand %d is not defined in the graph", i);
        break;
      }
      slots[v->id].last_use = k;
    }
  for (int i = 0; i < g->n_outputs && ok; i++) {
    const Value *v = g->outputs[i];
    if (!v || v->id < 0 || v->id >= nvals || slots[v->id].v != v)
      ok = fail(&e, "output '%s' is not defined in the graph", g->output_names[i]);
    else
      slots[v->id].is_output = true;
  }
  k = 0;
  Tensor *in[64], **inp = in;
  for (Node *n = g->first; n && ok; n = n->next, k++) {
    e.node = n;
    if (n->n_in > (int)ARRAY_LEN(in)) {
      inp = malloc(sizeof(Tensor *) * (size_t)n->n_in);
      if (!inp) {
        ok = fail(&e, "out of memory");
        break;
      }
    }
    for (int i = 0; i < n->n_in && ok; i++) {
      Slot *s = &slots[n->in[i]->id];
      if (!s->ready) ok = fail(&e, "operand %d is used before it is computed", i);
      inp[i] = &s->t;
    }
    if (ok) ok = check_node(&e, n);
    if (ok && n->n_out > 8) ok = fail(&e, "too many results");
    Tensor out[8];
    int made = 0;
    bool source = n->op == OP_INPUT || n->op == OP_PARAM;
    for (; ok && !source && made < n->n_out; made++)
      if (!ir_tensor_alloc(&out[made], &n->out[made].type)) {
        char b[IR_TYPE_STR_MAX];
        ok = fail(&e, "out of memory for %s", ir_type_str(&n->out[made].type, b, sizeof b));
      }
    if (ok) ok = eval_node(&e, n, inp, out, &in_ix, &param_ix);
    if (inp != in) free(inp);
    inp = in;
    if (!ok) {
      for (int i = 0; i < made; i++) ir_tensor_free(&out[i]);
      break;
    }
    for (int i = 0; i < n->n_out; i++) {
      Slot *s = &slots[n->out[i].id];
      s->t = out[i];
      s->ready = true;
      s->owned = !source;
      if (observe) observe(ud, &n->out[i], &s->t);
      if (s->last_use < 0 && !s->is_output) slot_release(s);
    }
    for (int i = 0; i < n->n_in; i++) {
      Slot *s = &slots[n->in[i]->id];
      if (s->last_use == k && !s->is_output) slot_release(s);
    }
  }
  e.node = NULL;
  for (int i = 0; i < g->n_outputs && ok; i++) {
    Slot *s = &slots[g->outputs[i]->id];
    if (!s->ready) {
      ok = fail(&e, "output '%s' was never computed", g->output_names[i]);
      break;
    }
    if (!ir_tensor_alloc(&outputs[i], &s->t.type)) {
      ok = fail(&e, "out of memory");
      break;
    }
    memcpy(outputs[i].data, s->t.data, ir_tensor_nbytes(&s->t.type));
  }
  if (!ok)
    for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&outputs[i]);
  for (int i = 0; i < nvals; i++) slot_release(&slots[i]);
  free(slots);
  ir_tensor_map_index_free(&in_ix);
  ir_tensor_map_index_free(&param_ix);
  return ok;
}
