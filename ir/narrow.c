/* The narrow number formats ONNX has and dlcc holds in a wider dtype
 * (float8 in its four kinds and float4 e2m1 in f16, int4/uint4/int2/uint2
 * in i8/u8): takes a format's name, a value or a code, returns the value
 * rounded into the format (the fp_round op, eval.c) or decoded from its
 * bits (ONNX tensors, frontend/onnx_tensor.c).  Every value of these
 * formats is exact in its holding dtype, so only a conversion into one
 * rounds. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/eval.h"

/* m: mantissa bits; emin: the smallest normal exponent; max: the largest
 * finite value; ovf: what a value past max becomes without saturation;
 * uz: no negative zero and one NaN (0x80); bits: the code's width. */
static const IrNarrow formats[] = {
    {"e4m3fn", IR_NARROW_FLOAT, 8, 3, -6, 448.0, NAN, false},
    {"e4m3fnuz", IR_NARROW_FLOAT, 8, 3, -7, 240.0, NAN, true},
    {"e5m2", IR_NARROW_FLOAT, 8, 2, -14, 57344.0, INFINITY, false},
    {"e5m2fnuz", IR_NARROW_FLOAT, 8, 2, -15, 57344.0, NAN, true},
    {"e2m1", IR_NARROW_FLOAT, 4, 1, 0, 6.0, 6.0, false},
    {"i4", IR_NARROW_INT, 4, 0, -8, 7, 0, false},
    {"u4", IR_NARROW_INT, 4, 0, 0, 15, 0, false},
    {"i2", IR_NARROW_INT, 2, 0, -2, 1, 0, false},
    {"u2", IR_NARROW_INT, 2, 0, 0, 3, 0, false},
    {"e8m0", IR_NARROW_E8M0, 8, 0, -127, 0x1p127, NAN, true},
    {"e8m0_down", IR_NARROW_E8M0, 8, 1, -127, 0x1p127, NAN, true},
    {"e8m0_nearest", IR_NARROW_E8M0, 8, 2, -127, 0x1p127, NAN, true},
};

/* x's f32 bits into an e8m0 code: the exponent field, raised by the
 * rounding (never past 0xFE when saturating), NaN and infinities 0xFF;
 * the sign is dropped (onnx's numpy_helper.to_float8e8m0). */
static unsigned e8m0_code(const IrNarrow *f, float x, bool saturate) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  unsigned e = bits >> 23 & 0xFFu;
  if (e == 0xFFu) return 0xFFu;
  bool up = false;
  if (f->m == 0) {
    up = (bits & 0x7FFFFFu) != 0;
  } else if (f->m == 2) {
    bool g = bits & 0x400000u, r = bits & 0x200000u, s = bits & 0x1FFFFFu, lsb = e > 0;
    up = g && (r || s || lsb);
  }
  if (up && saturate && e == 0xFEu) up = false;
  return e + up;
}

const IrNarrow *ir_narrow_find(const char *name) {
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
    if (strcmp(formats[i].name, name) == 0) return &formats[i];
  return NULL;
}

int ir_narrow_index(const IrNarrow *f) { return (int)(f - formats); }
const IrNarrow *ir_narrow_at(int i) {
  return i >= 0 && i < (int)(sizeof formats / sizeof formats[0]) ? &formats[i] : NULL;
}

/* Floats: to nearest even at the format's step for x's binade (the
 * subnormal step below emin); past max, max when saturating, else ovf
 * (e2m1 always saturates; its NaN, which the format lacks, becomes a
 * zero of the sign opposite to the NaN's, as ml_dtypes converts it for
 * ONNX's reference data).  Integers
 * (int4 and the like): truncated toward zero; out of range, NaN and the
 * infinities give 0 (ONNX leaves them undefined). */
double ir_narrow_round(const IrNarrow *f, double x, bool saturate) {
  if (f->kind == IR_NARROW_E8M0) return ir_narrow_decode(f, e8m0_code(f, (float)x, saturate));
  if (f->kind == IR_NARROW_INT) {
    double t = trunc(x);
    return isnan(t) || t < f->emin || t > f->max ? 0.0 : t + 0.0;
  }
  if (isnan(x)) return f->bits == 4 ? -copysign(0.0, x) : x;
  double a = fabs(x), r;
  if (isinf(a)) {
    r = saturate || f->bits == 4 ? f->max : f->ovf;
  } else {
    int e;
    frexp(a, &e);
    e = e - 1 < f->emin ? f->emin : e - 1;
    double q = ldexp(1.0, e - f->m);
    r = nearbyint(a / q) * q;
    if (r > f->max) r = saturate || f->bits == 4 ? f->max : f->ovf;
  }
  if (f->uz && r == 0) return 0.0;
  return copysign(r, x);
}

double ir_narrow_decode(const IrNarrow *f, unsigned code) {
  if (f->kind == IR_NARROW_E8M0) return (code & 0xFFu) == 0xFFu ? NAN : ldexp(1.0, (int)(code & 0xFFu) - 127);
  unsigned sign = code >> (f->bits - 1) & 1, mag = code & ((1u << (f->bits - 1)) - 1);
  if (f->kind == IR_NARROW_INT) {
    double v = code & ((1u << f->bits) - 1);
    return f->emin < 0 && sign ? v - (double)(1u << f->bits) : v;
  }
  if (f->uz && code == 0x80) return NAN;
  int ebits = f->bits - 1 - f->m;
  unsigned e = mag >> f->m, m = mag & ((1u << f->m) - 1);
  bool top = e == (1u << ebits) - 1;
  if (f->bits == 8 && !f->uz && top && (isinf(f->ovf) ? true : m == (1u << f->m) - 1))
    return isinf(f->ovf) && m == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
  double v = e == 0 ? ldexp((double)m, f->emin - f->m) : ldexp(1.0 + ldexp((double)m, -f->m), (int)e + f->emin - 1);
  return sign ? -v : v;
}
