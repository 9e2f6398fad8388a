/* The CUDA C emitter: takes finished kernels (kernel.h), returns their
 * text.  It decides nothing: every loop, index and operation is already in
 * the kernel IR, and this file only spells it in standard CUDA C, which
 * the emu device also compiles with the host compiler (runtime/emu). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/eval.h"
#include "ir/names.h"
#include "kernel.h"

/* Helpers every kernel may call.  Integer arithmetic goes through
 * unsigned so that it wraps as eval.c's does, with no undefined overflow;
 * float <-> int conversions saturate as the cast op says. */
/* clang-format off */
static const char helpers[] =
    "__device__ __forceinline__ float dl_inf(void) {\n"
    "  union { unsigned u; float f; } v;\n"
    "  v.u = 0x7f800000u;\n"
    "  return v.f;\n"
    "}\n"
    "__device__ __forceinline__ float dl_nan(void) {\n"
    "  union { unsigned u; float f; } v;\n"
    "  v.u = 0x7fc00000u;\n"
    "  return v.f;\n"
    "}\n"
    "__device__ __forceinline__ float dl_relu(float x) { return x > 0.0f || x != x ? x : 0.0f; }\n"
    "__device__ __forceinline__ bool dl_isnan(float x) { return x != x; }\n"
    "__device__ __forceinline__ bool dl_isinf(float x) { return fabsf(x) == dl_inf(); }\n"
    "__device__ __forceinline__ float dl_leaky_relu(float x, float a) { return x >= 0.0f ? x : x * a; }\n"
    "__device__ __forceinline__ float dl_clip(float x, float lo, float hi) {\n"
    "  return x != x ? x : x < lo ? lo : x > hi ? hi : x;\n"
    "}\n"
    "__device__ __forceinline__ float dl_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "__device__ __forceinline__ float dl_silu(float x) { return x / (1.0f + expf(-x)); }\n"
    "/* erfc, not 1 + erf: no cancellation for negative x. */\n"
    "__device__ __forceinline__ float dl_gelu(float x) {\n"
    "  return 0.5f * x * erfcf(-x * 0.70710678118654752f);\n"
    "}\n"
    "/* 0.5 x (1 + tanh u) written as x sigmoid(2u), for the same reason. */\n"
    "__device__ __forceinline__ float dl_gelu_tanh(float x) {\n"
    "  float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);\n"
    "  return x / (1.0f + expf(-2.0f * u));\n"
    "}\n"
    "__device__ __forceinline__ float dl_hardsigmoid(float x) {\n"
    "  return fminf(fmaxf((x + 3.0f) / 6.0f, 0.0f), 1.0f);\n"
    "}\n"
    "__device__ __forceinline__ float dl_hardswish(float x) { return x * dl_hardsigmoid(x); }\n"
    "__device__ __forceinline__ float dl_max(float a, float b) {\n"
    "  return a != a || b != b ? a + b : a > b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ float dl_min(float a, float b) {\n"
    "  return a != a || b != b ? a + b : a < b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ int dl_max(int a, int b) { return a > b ? a : b; }\n"
    "__device__ __forceinline__ int dl_min(int a, int b) { return a < b ? a : b; }\n"
    "__device__ __forceinline__ long long dl_max(long long a, long long b) { return a > b ? a : b; }\n"
    "__device__ __forceinline__ long long dl_min(long long a, long long b) { return a < b ? a : b; }\n"
    "__device__ __forceinline__ int dl_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }\n"
    "__device__ __forceinline__ int dl_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }\n"
    "__device__ __forceinline__ int dl_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }\n"
    "__device__ __forceinline__ int dl_neg(int a) { return (int)(0u - (unsigned)a); }\n"
    "__device__ __forceinline__ int dl_abs(int a) { return a < 0 ? dl_neg(a) : a; }\n"
    "__device__ __forceinline__ int dl_relu(int a) { return a > 0 ? a : 0; }\n"
    "__device__ __forceinline__ long long dl_add(long long a, long long b) {\n"
    "  return (long long)((unsigned long long)a + (unsigned long long)b);\n"
    "}\n"
    "__device__ __forceinline__ long long dl_sub(long long a, long long b) {\n"
    "  return (long long)((unsigned long long)a - (unsigned long long)b);\n"
    "}\n"
    "__device__ __forceinline__ long long dl_mul(long long a, long long b) {\n"
    "  return (long long)((unsigned long long)a * (unsigned long long)b);\n"
    "}\n"
    "__device__ __forceinline__ long long dl_neg(long long a) {\n"
    "  return (long long)(0ull - (unsigned long long)a);\n"
    "}\n"
    "__device__ __forceinline__ long long dl_abs(long long a) { return a < 0 ? dl_neg(a) : a; }\n"
    "__device__ __forceinline__ long long dl_relu(long long a) { return a > 0 ? a : 0; }\n"
    "__device__ __forceinline__ long long dl_clip(long long x, long long lo, long long hi) {\n"
    "  return x < lo ? lo : x > hi ? hi : x;\n"
    "}\n"
    "__device__ __forceinline__ float dl_sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x; }\n"
    "__device__ __forceinline__ int dl_sign(int a) { return a > 0 ? 1 : a < 0 ? -1 : 0; }\n"
    "__device__ __forceinline__ long long dl_sign(long long a) { return a > 0 ? 1 : a < 0 ? -1 : 0; }\n"
    "/* Python's %: fmod moved into b's sign, a zero taking b's sign. */\n"
    "__device__ __forceinline__ float dl_mod(float a, float b) {\n"
    "  float r = fmodf(a, b);\n"
    "  return r != 0.0f ? ((r < 0.0f) != (b < 0.0f) ? r + b : r) : copysignf(0.0f, b);\n"
    "}\n"
    "/* Integer / and % cannot report a zero divisor: they give 0 (eval.c\n"
    " * stops with an error); a divisor of -1 wraps instead of trapping. */\n"
    "__device__ __forceinline__ int dl_div(int a, int b) { return b == 0 ? 0 : b == -1 ? dl_neg(a) : a / b; }\n"
    "__device__ __forceinline__ long long dl_div(long long a, long long b) {\n"
    "  return b == 0 ? 0 : b == -1 ? dl_neg(a) : a / b;\n"
    "}\n"
    "__device__ __forceinline__ int dl_fmod(int a, int b) { return b == 0 || b == -1 ? 0 : a % b; }\n"
    "__device__ __forceinline__ long long dl_fmod(long long a, long long b) {\n"
    "  return b == 0 || b == -1 ? 0 : a % b;\n"
    "}\n"
    "__device__ __forceinline__ int dl_mod(int a, int b) {\n"
    "  int r = dl_fmod(a, b);\n"
    "  return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n"
    "}\n"
    "__device__ __forceinline__ long long dl_mod(long long a, long long b) {\n"
    "  long long r = dl_fmod(a, b);\n"
    "  return r != 0 && (r < 0) != (b < 0) ? r + b : r;\n"
    "}\n"
    "/* a ** b by squaring, wrapping as eval.c; b < 0 is 1 / a^-b (0 for a 0). */\n"
    "__device__ __forceinline__ int dl_pow(int a, int b) {\n"
    "  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;\n"
    "  unsigned r = 1u, x = (unsigned)a;\n"
    "  for (; b; b >>= 1, x *= x)\n"
    "    if (b & 1) r *= x;\n"
    "  return (int)r;\n"
    "}\n"
    "__device__ __forceinline__ long long dl_pow(long long a, long long b) {\n"
    "  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;\n"
    "  unsigned long long r = 1ull, x = (unsigned long long)a;\n"
    "  for (; b; b >>= 1, x *= x)\n"
    "    if (b & 1) r *= x;\n"
    "  return (long long)r;\n"
    "}\n"
    "__device__ __forceinline__ signed char dl_f2i8(float x) {\n"
    "  return x != x ? 0 : x <= -128.0f ? -128 : x >= 127.0f ? 127 : (signed char)(int)x;\n"
    "}\n"
    "__device__ __forceinline__ int dl_f2i32(float x) {\n"
    "  return x != x ? 0 : x <= -2147483648.0f ? (-2147483647 - 1)\n"
    "         : x >= 2147483648.0f ? 2147483647 : (int)x;\n"
    "}\n"
    "__device__ __forceinline__ long long dl_f2i64(float x) {\n"
    "  return x != x ? 0 : x <= -9223372036854775808.0f ? (-9223372036854775807LL - 1)\n"
    "         : x >= 9223372036854775808.0f ? 9223372036854775807LL : (long long)x;\n"
    "}\n"
    "/* As eval.c's cast to u8 (onnxruntime's): truncated through int32,\n"
    " * modulo 256; NaN and |x| >= 2^31 give 0. */\n"
    "__device__ __forceinline__ unsigned char dl_f2u8(float x) {\n"
    "  return fabsf(x) < 2147483648.0f ? (unsigned char)(int)x : (unsigned char)0;\n"
    "}\n"
    "/* int8, as eval.c: one f32 division (IEEE whatever the flags), rounded\n"
    " * half to even, plus the zero point zp, saturated to the codes [lo, hi]\n"
    " * (ir_quant_range); NaN -> zp.  And back with one f32 product that no\n"
    " * later add may contract into an fma. */\n"
    "__device__ __forceinline__ int dl_quantize(float x, float s, int zp, int lo, int hi) {\n"
    "  float q = rintf(__fdiv_rn(x, s));\n"
    "  float l = (float)(lo - zp), h = (float)(hi - zp);\n"
    "  return q != q ? zp : (int)(q < l ? l : q > h ? h : q) + zp;\n"
    "}\n"
    "__device__ __forceinline__ float dl_dequantize(int q, float s, int zp) {\n"
    "  return __fmul_rn((float)((long long)q - zp), s);\n"
    "}\n";
/* clang-format on */

/* Four 16-bit lanes travel as one 8-byte uint2 (vectorized maps). */
/* clang-format off */
static const char helpers_f16[] =
    "__device__ __forceinline__ __half dl_h_lane(uint2 v, int l) {\n"
    "  unsigned w = l < 2 ? v.x : v.y;\n"
    "  return __ushort_as_half((unsigned short)(l & 1 ? w >> 16 : w & 0xffffu));\n"
    "}\n"
    "__device__ __forceinline__ unsigned dl_h_pack(__half a, __half b) {\n"
    "  return (unsigned)__half_as_ushort(a) | ((unsigned)__half_as_ushort(b) << 16);\n"
    "}\n";
static const char helpers_bf16[] =
    "__device__ __forceinline__ __nv_bfloat16 dl_b_lane(uint2 v, int l) {\n"
    "  unsigned w = l < 2 ? v.x : v.y;\n"
    "  return __ushort_as_bfloat16((unsigned short)(l & 1 ? w >> 16 : w & 0xffffu));\n"
    "}\n"
    "__device__ __forceinline__ unsigned dl_b_pack(__nv_bfloat16 a, __nv_bfloat16 b) {\n"
    "  return (unsigned)__bfloat16_as_ushort(a) | ((unsigned)__bfloat16_as_ushort(b) << 16);\n"
    "}\n";
/* clang-format on */

const char *cg_cuda_prelude(Ctx *c, bool needs_fp16, bool needs_bf16, bool needs_tc) {
  return arena_printf(&c->arena,
                      "// Generated by dlcc.  One extern \"C\" kernel per step of the plan; each\n"
                      "// names the graph op it computes.  Standard CUDA C: the emu device\n"
                      "// compiles the same text with the host compiler (DLCC_EMU defined).\n"
                      "#ifndef DLCC_EMU\n%s%s#endif\n\n%s%s%s%s",
                      needs_fp16 ? "#include <cuda_fp16.h>\n" : "",
                      needs_bf16 ? "#include <cuda_bf16.h>\n" : "", helpers,
                      needs_fp16 ? helpers_f16 : "", needs_bf16 ? helpers_bf16 : "",
                      needs_tc ? cg_tc_prelude() : "");
}

typedef struct Out {
  FILE *f;
  const Kernel *k;
  int depth;
} Out;

static const char *ctype(const Kernel *k, DType dt) {
  switch (dt) {
    case TY_F32: return "float";
    case TY_F16: return "__half";
    case TY_BF16: return "__nv_bfloat16";
    case TY_I8: return "signed char";
    case TY_I32: return "int";
    case TY_I64: return "long long";
    case TY_BOOL: return "bool";
    case TY_U8: return "unsigned char";
    case TY_F64: return "double"; /* never reached: cg_compile refuses f64 */
    case TY_COUNT: return k->index == TY_I64 ? "long long" : "int"; /* KT_INDEX */
  }
  return "int";
}

static bool is_wide(const Kernel *k, DType dt) {
  return dt == TY_I64 || (dt == KT_INDEX && k->index == TY_I64);
}

static void indent(Out *o) {
  for (int i = 0; i < o->depth; i++) fputs("  ", o->f);
}

static void print_float(Out *o, double v) {
  if (isnan(v)) {
    fputs("dl_nan()", o->f);
    return;
  }
  if (isinf(v)) {
    fputs(v < 0 ? "(-dl_inf())" : "dl_inf()", o->f);
    return;
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", v);
  if (!strpbrk(buf, ".e")) strcat(buf, ".0");
  fprintf(o->f, v < 0 ? "(%sf)" : "%sf", buf);
}

static void expr(Out *o, const KExpr *e);
static void cast(Out *o, const KExpr *e);

/* f16 and bf16 values are storage: every operation reads them as float
 * and a result of their type is rounded once, to nearest even
 * (__float2half_rn), as eval.c rounds each op's result. */
static bool is_half(DType dt) { return dt == TY_F16 || dt == TY_BF16; }

static double round_to(double v, DType dt) {
  if (dt == TY_F16) return ir_f16_to_double(ir_f16_from_double(v));
  if (dt == TY_BF16) return ir_bf16_to_double(ir_bf16_from_double(v));
  return v;
}

/* e as a float: half values converted, immediates of a half type
 * rounded to it first. */
static void fexpr(Out *o, const KExpr *e) {
  if (!is_half(e->dtype)) {
    expr(o, e);
    return;
  }
  if (e->kind == KE_FLOAT) {
    print_float(o, round_to(e->f, e->dtype));
    return;
  }
  fputs(e->dtype == TY_F16 ? "__half2float(" : "__bfloat162float(", o->f);
  expr(o, e);
  fputc(')', o->f);
}

/* e converted to dt where one of them is a half type (the others
 * convert implicitly, as C does). */
static void expr_as(Out *o, const KExpr *e, DType dt) {
  if (e->dtype == dt || (!is_half(dt) && !is_half(e->dtype))) {
    expr(o, e);
    return;
  }
  KExpr c = {.kind = KE_CAST, .dtype = dt, .a = {(KExpr *)e}};
  cast(o, &c);
}

static void call1(Out *o, const char *fn, const KExpr *a) {
  fprintf(o->f, "%s(", fn);
  expr(o, a);
  fputc(')', o->f);
}

static void call2(Out *o, const char *fn, const KExpr *a, const KExpr *b) {
  fprintf(o->f, "%s(", fn);
  expr(o, a);
  fputs(", ", o->f);
  expr(o, b);
  fputc(')', o->f);
}

static void infix(Out *o, const char *op, const KExpr *a, const KExpr *b) {
  fputc('(', o->f);
  expr(o, a);
  fprintf(o->f, " %s ", op);
  expr(o, b);
  fputc(')', o->f);
}

static void fcall1(Out *o, const char *fn, const KExpr *a) {
  fprintf(o->f, "%s(", fn);
  fexpr(o, a);
  fputc(')', o->f);
}

static void fcall2(Out *o, const char *fn, const KExpr *a, const KExpr *b) {
  fprintf(o->f, "%s(", fn);
  fexpr(o, a);
  fputs(", ", o->f);
  fexpr(o, b);
  fputc(')', o->f);
}

static void finfix(Out *o, const char *op, const KExpr *a, const KExpr *b) {
  fputc('(', o->f);
  fexpr(o, a);
  fprintf(o->f, " %s ", op);
  fexpr(o, b);
  fputc(')', o->f);
}

/* A comparison as the 1/0 mask of e's dtype: a typed int keeps integer
 * overloads unambiguous, a float keeps float arithmetic. */
static void cmp_int(Out *o, const KExpr *e, const char *op) {
  fprintf(o->f, "((%s)", ctype(o->k, e->dtype));
  infix(o, op, e->a[0], e->a[1]);
  fputc(')', o->f);
}

static void cmp_float(Out *o, const KExpr *e, const char *op) {
  fputc('(', o->f);
  finfix(o, op, e->a[0], e->a[1]);
  fputs(" ? 1.0f : 0.0f)", o->f);
}

/* x's float value (halves widened exactly) by the f32 scale; a
 * quantize's code range is e->f .. e->f2. */
static void op_quant(Out *o, const KExpr *e) {
  bool q = e->op == OP_QUANTIZE;
  if (q)
    fprintf(o->f, "((%s)dl_quantize(", ctype(o->k, e->dtype)), fexpr(o, e->a[0]);
  else
    fputs("dl_dequantize(", o->f), expr(o, e->a[0]);
  fputs(", ", o->f);
  expr(o, e->a[1]);
  if (q)
    fprintf(o->f, ", %d, %d, %d))", (int)e->i, (int)e->f, (int)e->f2);
  else
    fprintf(o->f, ", %d)", (int)e->i);
}

static void op_int(Out *o, const KExpr *e) {
  const KExpr *a = e->a[0], *b = e->a[1];
  switch (e->op) {
    case OP_NEG: call1(o, "dl_neg", a); return;
    case OP_ABS: call1(o, "dl_abs", a); return;
    case OP_RELU: call1(o, "dl_relu", a); return;
    case OP_ADD: call2(o, "dl_add", a, b); return;
    case OP_SUB: call2(o, "dl_sub", a, b); return;
    case OP_MUL: call2(o, "dl_mul", a, b); return;
    case OP_DIV: call2(o, "dl_div", a, b); return;
    case OP_MOD: call2(o, e->flag ? "dl_fmod" : "dl_mod", a, b); return;
    case OP_POW: call2(o, "dl_pow", a, b); return;
    case OP_SIGN: call1(o, "dl_sign", a); return;
    case OP_MAXIMUM: call2(o, "dl_max", a, b); return;
    case OP_MINIMUM: call2(o, "dl_min", a, b); return;
    case OP_EQ: cmp_int(o, e, "=="); return;
    case OP_NE: cmp_int(o, e, "!="); return;
    case OP_LT: cmp_int(o, e, "<"); return;
    case OP_LE: cmp_int(o, e, "<="); return;
    case OP_GT: cmp_int(o, e, ">"); return;
    case OP_GE: cmp_int(o, e, ">="); return;
    case OP_CLIP: {
      /* The integers inside [min, max], as eval.c. */
      double lo = ceil(e->f), hi = floor(e->f2);
      long long l = lo <= -9.2e18 ? INT64_MIN : lo >= 9.2e18 ? INT64_MAX : (long long)lo;
      long long h = hi <= -9.2e18 ? INT64_MIN : hi >= 9.2e18 ? INT64_MAX : (long long)hi;
      fprintf(o->f, "dl_clip((long long)");
      expr(o, a);
      fprintf(o->f, ", %lldLL, %lldLL)", l, h);
      return;
    }
    default: dl_internal(o->k->ctx, "integer %s reached the CUDA emitter", ir_ops[e->op].name);
  }
}

static void op_float(Out *o, const KExpr *e) {
  const KExpr *a = e->a[0], *b = e->a[1];
  switch (e->op) {
    case OP_NEG: fputs("(-", o->f), fexpr(o, a), fputc(')', o->f); return;
    case OP_ABS: fcall1(o, "fabsf", a); return;
    case OP_RELU: fcall1(o, "dl_relu", a); return;
    case OP_LEAKY_RELU:
      fputs("dl_leaky_relu(", o->f), fexpr(o, a), fputs(", ", o->f), print_float(o, e->f);
      fputc(')', o->f);
      return;
    case OP_CLIP:
      fputs("dl_clip(", o->f), fexpr(o, a), fputs(", ", o->f), print_float(o, e->f);
      fputs(", ", o->f), print_float(o, e->f2), fputc(')', o->f);
      return;
    case OP_SIGMOID: fcall1(o, "dl_sigmoid", a); return;
    case OP_TANH: fcall1(o, "tanhf", a); return;
    case OP_GELU: fcall1(o, e->flag ? "dl_gelu_tanh" : "dl_gelu", a); return;
    case OP_SILU: fcall1(o, "dl_silu", a); return;
    case OP_HARDSIGMOID: fcall1(o, "dl_hardsigmoid", a); return;
    case OP_HARDSWISH: fcall1(o, "dl_hardswish", a); return;
    case OP_EXP: fcall1(o, "expf", a); return;
    case OP_LOG: fcall1(o, "logf", a); return;
    case OP_SQRT: fcall1(o, "sqrtf", a); return;
    case OP_RSQRT: fputs("(1.0f / sqrtf(", o->f), fexpr(o, a), fputs("))", o->f); return;
    case OP_ERF: fcall1(o, "erff", a); return;
    case OP_RECIPROCAL: fputs("(1.0f / ", o->f), fexpr(o, a), fputc(')', o->f); return;
    case OP_SIN: fcall1(o, "sinf", a); return;
    case OP_COS: fcall1(o, "cosf", a); return;
    case OP_ROUND: fcall1(o, "rintf", a); return; /* half to even in the default mode */
    case OP_FLOOR: fcall1(o, "floorf", a); return;
    case OP_CEIL: fcall1(o, "ceilf", a); return;
    case OP_SIGN: fcall1(o, "dl_sign", a); return;
    case OP_TAN: fcall1(o, "tanf", a); return;
    case OP_ASIN: fcall1(o, "asinf", a); return;
    case OP_ACOS: fcall1(o, "acosf", a); return;
    case OP_ATAN: fcall1(o, "atanf", a); return;
    case OP_SINH: fcall1(o, "sinhf", a); return;
    case OP_COSH: fcall1(o, "coshf", a); return;
    case OP_ASINH: fcall1(o, "asinhf", a); return;
    case OP_ACOSH: fcall1(o, "acoshf", a); return;
    case OP_ATANH: fcall1(o, "atanhf", a); return;
    case OP_ADD: finfix(o, "+", a, b); return;
    case OP_SUB: finfix(o, "-", a, b); return;
    case OP_MUL: finfix(o, "*", a, b); return;
    case OP_DIV: finfix(o, "/", a, b); return;
    case OP_POW: fcall2(o, "powf", a, b); return;
    case OP_MOD: fcall2(o, e->flag ? "fmodf" : "dl_mod", a, b); return;
    case OP_MAXIMUM: fcall2(o, "dl_max", a, b); return;
    case OP_MINIMUM: fcall2(o, "dl_min", a, b); return;
    case OP_EQ: cmp_float(o, e, "=="); return;
    case OP_NE: cmp_float(o, e, "!="); return;
    case OP_LT: cmp_float(o, e, "<"); return;
    case OP_LE: cmp_float(o, e, "<="); return;
    case OP_GT: cmp_float(o, e, ">"); return;
    case OP_GE: cmp_float(o, e, ">="); return;
    default: dl_internal(o->k->ctx, "%s is not a scalar op", ir_ops[e->op].name);
  }
}

/* The tests and logic, as C++ bools; halves compare as floats, which is
 * exact. */
static void op_logic(Out *o, const KExpr *e) {
  const KExpr *a = e->a[0], *b = e->a[1];
  switch (e->op) {
    case OP_EQUAL: finfix(o, "==", a, b); return;
    case OP_NOT_EQUAL: finfix(o, "!=", a, b); return;
    case OP_LESS: finfix(o, "<", a, b); return;
    case OP_LESS_EQUAL: finfix(o, "<=", a, b); return;
    case OP_GREATER: finfix(o, ">", a, b); return;
    case OP_GREATER_EQUAL: finfix(o, ">=", a, b); return;
    case OP_ISNAN: fcall1(o, "dl_isnan", a); return;
    case OP_ISINF: fcall1(o, "dl_isinf", a); return;
    case OP_LOGICAL_NOT: fputs("(!", o->f), expr(o, a), fputc(')', o->f); return;
    case OP_LOGICAL_AND: infix(o, "&&", a, b); return;
    case OP_LOGICAL_OR: infix(o, "||", a, b); return;
    case OP_LOGICAL_XOR: infix(o, "!=", a, b); return;
    default: dl_internal(o->k->ctx, "%s is not a logic op", ir_ops[e->op].name);
  }
}

static void cast(Out *o, const KExpr *e) {
  DType from = e->a[0]->dtype, to = e->dtype;
  const Kernel *k = o->k;
  if (to == TY_BOOL) { /* nonzero, NaN too, is true */
    fputc('(', o->f);
    fexpr(o, e->a[0]);
    fputs(" != 0)", o->f);
    return;
  }
  if (ir_dtype_is_float(from) && from != KT_INDEX && !ir_dtype_is_float(to)) {
    DType t = to == KT_INDEX ? k->index : to;
    fcall1(o, t == TY_I8 ? "dl_f2i8" : t == TY_U8 ? "dl_f2u8" : t == TY_I32 ? "dl_f2i32" : "dl_f2i64", e->a[0]);
    return;
  }
  if (is_half(to)) {
    /* An i32 or i64 goes straight to the half type, rounded once: through
     * float it would round twice (2^24 + 2^16 + 1 is a bf16 tie in float,
     * and ties to 2^24, where it lies above the tie). */
    DType f = from == KT_INDEX ? k->index : from;
    if (f == TY_I32 || f == TY_I64) {
      bool h = to == TY_F16;
      fputs(f == TY_I32 ? (h ? "__int2half_rn(" : "__int2bfloat16_rn(")
                        : (h ? "__ll2half_rn((long long)" : "__ll2bfloat16_rn((long long)"),
            o->f);
      expr(o, e->a[0]);
      fputc(')', o->f);
      return;
    }
    fputs(to == TY_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(", o->f);
    if (!ir_dtype_is_float(from)) fputs("(float)", o->f);
    fexpr(o, e->a[0]);
    fputc(')', o->f);
    return;
  }
  if (is_half(from) && to == TY_F32) {
    fexpr(o, e->a[0]);
    return;
  }
  fprintf(o->f, "(%s)", ctype(k, to));
  fexpr(o, e->a[0]);
}

static void expr(Out *o, const KExpr *e) {
  static const char *const idx_ops[] = {"+", "-", "*", "/", "%"};
  static const char *const cmp_ops[] = {"<", "<=", ">", ">=", "==", "!="};
  switch (e->kind) {
    case KE_INT:
      if (is_wide(o->k, e->dtype) || e->i > INT32_MAX || e->i < INT32_MIN)
        fprintf(o->f, e->i < 0 ? "(%" PRId64 "LL)" : "%" PRId64 "LL", e->i);
      else
        fprintf(o->f, e->i < 0 ? "(%" PRId64 ")" : "%" PRId64, e->i);
      return;
    case KE_FLOAT:
      if (is_half(e->dtype)) {
        uint16_t bits = e->dtype == TY_F16 ? ir_f16_from_double(e->f) : ir_bf16_from_double(e->f);
        fprintf(o->f, "%s((unsigned short)0x%04x)",
                e->dtype == TY_F16 ? "__ushort_as_half" : "__ushort_as_bfloat16", bits);
      } else {
        print_float(o, e->f);
      }
      return;
    case KE_VAR: fputs(e->var->name, o->f); return;
    case KE_IDX:
      if (e->sub == KI_MIN || e->sub == KI_MAX)
        call2(o, e->sub == KI_MIN ? "dl_min" : "dl_max", e->a[0], e->a[1]);
      else
        infix(o, idx_ops[e->sub], e->a[0], e->a[1]);
      return;
    case KE_CMP:
      if (is_half(e->a[0]->dtype) || is_half(e->a[1]->dtype))
        finfix(o, cmp_ops[e->sub], e->a[0], e->a[1]);
      else
        infix(o, cmp_ops[e->sub], e->a[0], e->a[1]);
      return;
    case KE_AND: infix(o, "&&", e->a[0], e->a[1]); return;
    case KE_OR: infix(o, "||", e->a[0], e->a[1]); return;
    case KE_NOT: fputs("!", o->f), expr(o, e->a[0]); return;
    case KE_SELECT:
      fputc('(', o->f);
      expr(o, e->a[0]);
      fputs(" ? ", o->f);
      expr_as(o, e->a[1], e->dtype);
      fputs(" : ", o->f);
      expr_as(o, e->a[2], e->dtype);
      fputc(')', o->f);
      return;
    case KE_LOAD:
      fprintf(o->f, "%s[", e->buf->name);
      expr(o, e->a[0]);
      fputc(']', o->f);
      return;
    case KE_OP:
      if (e->op == OP_DROPOUT) { /* its draw: lower_train.c's dl_dropout_bits */
        fputs("dl_dropout_bits(", o->f), expr(o, e->a[0]), fputs(", ", o->f), expr(o, e->a[1]);
        fputs(", ", o->f), expr(o, e->a[2]), fprintf(o->f, ", %uu)", (unsigned)e->i);
      } else if (e->op == OP_QUANTIZE || e->op == OP_DEQUANTIZE) {
        op_quant(o, e);
      } else if (cg_is_logic_op(e->op)) {
        op_logic(o, e);
      } else if (is_half(e->dtype)) {
        fputs(e->dtype == TY_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(", o->f);
        op_float(o, e);
        fputc(')', o->f);
      } else if (ir_dtype_is_float(e->dtype)) {
        op_float(o, e);
      } else {
        op_int(o, e);
      }
      return;
    case KE_CAST: cast(o, e); return;
    case KE_PACK4:
      fprintf(o->f, "(*(const int *)&%s[", e->buf->name);
      expr(o, e->a[0]);
      fputs("])", o->f);
      return;
    case KE_DP4A:
      fputs("__dp4a(", o->f);
      expr(o, e->a[0]);
      fputs(", ", o->f);
      expr(o, e->a[1]);
      fputs(", ", o->f);
      expr(o, e->a[2]);
      fputc(')', o->f);
      return;
    case KE_LANE:
      if (is_half(e->dtype))
        fprintf(o->f, "%s(%s, %d)", e->dtype == TY_F16 ? "dl_h_lane" : "dl_b_lane", e->var->name, (int)(e->i & 3));
      else
        fprintf(o->f, "%s.%c", e->var->name, "xyzw"[e->i & 3]);
      return;
  }
}

static void block(Out *o, const KBlock *b);

static void loop_head(Out *o, const KVar *v, const KExpr *extent, KMap map) {
  const Kernel *k = o->k;
  const char *it = ctype(k, v->dtype);
  static const char *const axis[] = {"x", "y", "z"};
  switch (map) {
    case KM_UNROLL:
      indent(o);
      fputs("#pragma unroll\n", o->f);
      /* fall through */
    case KM_SERIAL:
      indent(o);
      fprintf(o->f, "for (%s %s = 0; %s < ", it, v->name, v->name);
      expr(o, extent);
      fprintf(o->f, "; %s++) {\n", v->name);
      return;
    case KM_GRID_STRIDE:
      indent(o);
      fprintf(o->f, "for (%s %s = (%s)blockIdx.x * blockDim.x + threadIdx.x; %s < ", it, v->name,
              it, v->name);
      expr(o, extent);
      fprintf(o->f, "; %s += (%s)blockDim.x * gridDim.x) {\n", v->name, it);
      return;
    case KM_GRID_X:
    case KM_GRID_Y:
    case KM_GRID_Z:
    case KM_BLOCK_X:
    case KM_BLOCK_Y:
    case KM_BLOCK_Z: {
      bool grid = map <= KM_GRID_Z;
      int ax = grid ? (int)(map - KM_GRID_X) : (int)(map - KM_BLOCK_X);
      indent(o);
      fprintf(o->f, "for (%s %s = %s.%s; %s < ", it, v->name, grid ? "blockIdx" : "threadIdx",
              axis[ax], v->name);
      expr(o, extent);
      fprintf(o->f, "; %s += %s.%s) {\n", v->name, grid ? "gridDim" : "blockDim", axis[ax]);
      return;
    }
    case KM_VEC2:
    case KM_VEC4:
    case KM_VEC8: dl_internal(k->ctx, "vectorized loops are not emitted yet");
  }
}

static void stmt(Out *o, const KStmt *s) {
  const Kernel *k = o->k;
  switch (s->kind) {
    case KS_LOOP:
      loop_head(o, s->var, s->extent, s->map);
      o->depth++;
      block(o, &s->body);
      o->depth--;
      indent(o);
      fputs("}\n", o->f);
      return;
    case KS_REDUCE: {
      indent(o);
      fprintf(o->f, "%s %s = ", ctype(k, s->var->dtype), s->var->name);
      expr_as(o, s->init, s->var->dtype);
      fputs(";\n", o->f);
      loop_head(o, s->rvar, s->extent, s->map);
      o->depth++;
      block(o, &s->body);
      KExpr acc = {.kind = KE_VAR, .dtype = s->var->dtype, .var = s->var};
      KExpr comb = {.kind = KE_OP, .dtype = s->var->dtype, .op = s->combine, .a = {&acc, s->value}};
      indent(o);
      fprintf(o->f, "%s = ", s->var->name);
      expr_as(o, &comb, s->var->dtype);
      fputs(";\n", o->f);
      o->depth--;
      indent(o);
      fputs("}\n", o->f);
      return;
    }
    case KS_LET:
      indent(o);
      fprintf(o->f, "%s %s = ", ctype(k, s->var->dtype), s->var->name);
      expr_as(o, s->value, s->var->dtype);
      fputs(";\n", o->f);
      return;
    case KS_SET:
      indent(o);
      fprintf(o->f, "%s = ", s->var->name);
      expr_as(o, s->value, s->var->dtype);
      fputs(";\n", o->f);
      return;
    case KS_STORE:
      indent(o);
      fprintf(o->f, "%s[", s->buf->name);
      expr(o, s->index);
      fputs("] = ", o->f);
      expr_as(o, s->value, s->buf->dtype);
      fputs(";\n", o->f);
      return;
    case KS_IF:
      indent(o);
      fputs("if (", o->f);
      expr(o, s->cond);
      fputs(") {\n", o->f);
      o->depth++;
      block(o, &s->body);
      o->depth--;
      indent(o);
      if (s->orelse.first) {
        fputs("} else {\n", o->f);
        o->depth++;
        block(o, &s->orelse);
        o->depth--;
        indent(o);
      }
      fputs("}\n", o->f);
      return;
    case KS_BARRIER:
      indent(o);
      fputs("__syncthreads();\n", o->f);
      return;
    case KS_VLOAD:
      indent(o);
      if (is_half(s->var->dtype))
        fprintf(o->f, "uint2 %s = *(const uint2 *)&%s[", s->var->name, s->buf->name);
      else
        fprintf(o->f, "%s4 %s = *(const %s4 *)&%s[", ctype(k, s->var->dtype), s->var->name,
                ctype(k, s->var->dtype), s->buf->name);
      expr(o, s->index);
      fputs("];\n", o->f);
      return;
    case KS_VSTORE:
      indent(o);
      if (is_half(s->buf->dtype)) {
        const char *pack = s->buf->dtype == TY_F16 ? "dl_h_pack" : "dl_b_pack";
        fprintf(o->f, "*(uint2 *)&%s[", s->buf->name);
        expr(o, s->index);
        fputs("] = make_uint2(", o->f);
        for (int i = 0; i < 4; i += 2) {
          fprintf(o->f, "%s%s(", i ? ", " : "", pack);
          expr_as(o, s->lanes[i], s->buf->dtype);
          fputs(", ", o->f);
          expr_as(o, s->lanes[i + 1], s->buf->dtype);
          fputc(')', o->f);
        }
        fputs(");\n", o->f);
        return;
      }
      fprintf(o->f, "*(%s4 *)&%s[", ctype(k, s->buf->dtype), s->buf->name);
      expr(o, s->index);
      fprintf(o->f, "] = make_%s4(", ctype(k, s->buf->dtype));
      for (int i = 0; i < 4; i++) {
        if (i) fputs(", ", o->f);
        expr_as(o, s->lanes[i], s->buf->dtype);
      }
      fputs(");\n", o->f);
      return;
  }
}

static void block(Out *o, const KBlock *b) {
  for (const KStmt *s = b->first; s; s = s->next) stmt(o, s);
}

static void param_type(Out *o, const KParam *p) {
  if (p->var)
    fprintf(o->f, "%s", ctype(o->k, p->var->dtype));
  else
    fprintf(o->f, "%s%s *", p->buf->written ? "" : "const ", ctype(o->k, p->buf->dtype));
}

char *cg_emit_kernel(Ctx *c, const Kernel *k, const char *name, bool with_comment) {
  if (!k->finished) dl_internal(c, "kernel %s emitted before it was finished", k->hint);
  /* Nothing may come from the arena while the stream is open: an
   * allocation failure would unwind past it. */
  const char *label = with_comment && k->node ? cg_label(c, k->node, k->what) : NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) ctx_out_of_memory(c);
  Out o = {.f = f, .k = k, .depth = 1};
  if (label) {
    const Node *n = k->node;
    fputs("// ", f);
    ir_put_comment_text(f, label);
    if (n->loc.file) {
      fputs("  (", f);
      ir_put_comment_text(f, n->loc.file->name); /* a path, or whatever an IR file's comment said */
      fprintf(f, ":%d:%d)", n->loc.line, n->loc.col);
    }
    fputc('\n', f);
  }
  fprintf(f, "extern \"C\" __global__ void %s(", name);
  for (int i = 0; i < k->n_params; i++) {
    const KParam *p = &k->params[i];
    if (i) fputs(", ", f);
    param_type(&o, p);
    fprintf(f, p->var || p->may_alias ? " %s" : "__restrict__ %s", p->var ? p->var->name : p->buf->name);
  }
  fputs(") {\n", f);
  for (int i = 0; i < k->n_locals; i++) {
    const KBuf *b = k->locals[i];
    /* i8 tiles are read four bytes at a time (KE_PACK4) */
    const char *space = b->space != KSP_SHARED ? ""
                        : b->dtype == TY_I8  ? "__shared__ __align__(16) "
                                             : "__shared__ ";
    fprintf(f, "  %s%s %s[%" PRId64 "];\n", space, ctype(k, b->dtype), b->name, b->numel);
  }
  block(&o, &k->body);
  fputs("}\n", f);
  fprintf(f, "#ifdef DLCC_EMU\nextern \"C\" void %s__emu(void **args) {\n  %s(", name, name);
  for (int i = 0; i < k->n_params; i++) {
    const KParam *p = &k->params[i];
    if (i) fputs(", ", f);
    if (p->var)
      fprintf(f, "*(%s *)args[%d]", ctype(k, p->var->dtype), i);
    else
      fprintf(f, "*(%s **)args[%d]", ctype(k, p->buf->dtype), i);
  }
  fputs(");\n}\n#endif\n", f);
  /* A write that ran out of memory leaves the stream in error: the text
   * would be cut short. */
  /* glibc's fclose can lose the buffer on a failed final realloc and
   * still return 0: no text is out of memory too. */
  bool cut = ferror(f);
  if (fclose(f) != 0 || cut || !text) {
    free(text);
    ctx_out_of_memory(c);
  }
  ctx_hold(c, text);
  char *r = arena_strndup(&c->arena, text, len);
  ctx_release(c, text);
  free(text);
  return r;
}
