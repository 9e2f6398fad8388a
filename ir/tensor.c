/* Host tensors: takes a type or a map of named tensors, returns storage,
 * elements read and written by the rounding rules of eval.h, lookups by
 * name, and the exact 16-bit float conversions. */
#include "eval_impl.h"

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

int64_t ir_tensor_get_int(const Tensor *t, int64_t i) {
  /* get_i, but for a u64, which it passes as its bits: saturated here */
  if (t->type.dtype == TY_U64) {
    uint64_t v = ((const uint64_t *)t->data)[i];
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
  }
  return get_i(t, i);
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
