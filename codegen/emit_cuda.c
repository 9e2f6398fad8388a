/* The CUDA C emitter: takes finished kernels (kernel.h), returns their
 * text.  It decides nothing: every loop, index and operation is already in
 * the kernel IR, and this file only spells it in standard CUDA C, which
 * the emu device also compiles with the host compiler (runtime/emu). */
#include <inttypes.h>
#include <limits.h>
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
    "/* bitcast: x's bytes as a T of the same size */\n"
    "template <class T, class F> __device__ __forceinline__ T dl_bitcast(F x) {\n"
    "  union { F f; T t; } u;\n"
    "  u.f = x;\n"
    "  return u.t;\n"
    "}\n"
    "/* unsigned: no sign to keep; / and % by 0 give 0 as above */\n"
    "__device__ __forceinline__ unsigned dl_max(unsigned a, unsigned b) { return a > b ? a : b; }\n"
    "__device__ __forceinline__ unsigned dl_min(unsigned a, unsigned b) { return a < b ? a : b; }\n"
    "__device__ __forceinline__ unsigned dl_add(unsigned a, unsigned b) { return a + b; }\n"
    "__device__ __forceinline__ unsigned dl_sub(unsigned a, unsigned b) { return a - b; }\n"
    "__device__ __forceinline__ unsigned dl_mul(unsigned a, unsigned b) { return a * b; }\n"
    "__device__ __forceinline__ unsigned dl_neg(unsigned a) { return 0u - a; }\n"
    "__device__ __forceinline__ unsigned dl_abs(unsigned a) { return a; }\n"
    "__device__ __forceinline__ unsigned dl_relu(unsigned a) { return a; }\n"
    "__device__ __forceinline__ unsigned dl_sign(unsigned a) { return a != 0u; }\n"
    "__device__ __forceinline__ unsigned dl_div(unsigned a, unsigned b) { return b ? a / b : 0u; }\n"
    "__device__ __forceinline__ unsigned dl_mod(unsigned a, unsigned b) { return b ? a % b : 0u; }\n"
    "__device__ __forceinline__ unsigned dl_fmod(unsigned a, unsigned b) { return b ? a % b : 0u; }\n"
    "__device__ __forceinline__ unsigned dl_pow(unsigned a, unsigned b) {\n"
    "  unsigned r = 1u;\n"
    "  for (; b; b >>= 1, a *= a)\n"
    "    if (b & 1u) r *= a;\n"
    "  return r;\n"
    "}\n"
    "typedef unsigned long long dl_u64;\n"
    "__device__ __forceinline__ dl_u64 dl_max(dl_u64 a, dl_u64 b) { return a > b ? a : b; }\n"
    "__device__ __forceinline__ dl_u64 dl_min(dl_u64 a, dl_u64 b) { return a < b ? a : b; }\n"
    "__device__ __forceinline__ dl_u64 dl_add(dl_u64 a, dl_u64 b) { return a + b; }\n"
    "__device__ __forceinline__ dl_u64 dl_sub(dl_u64 a, dl_u64 b) { return a - b; }\n"
    "__device__ __forceinline__ dl_u64 dl_mul(dl_u64 a, dl_u64 b) { return a * b; }\n"
    "__device__ __forceinline__ dl_u64 dl_neg(dl_u64 a) { return 0ull - a; }\n"
    "__device__ __forceinline__ dl_u64 dl_abs(dl_u64 a) { return a; }\n"
    "__device__ __forceinline__ dl_u64 dl_relu(dl_u64 a) { return a; }\n"
    "__device__ __forceinline__ dl_u64 dl_sign(dl_u64 a) { return a != 0ull; }\n"
    "__device__ __forceinline__ dl_u64 dl_div(dl_u64 a, dl_u64 b) { return b ? a / b : 0ull; }\n"
    "__device__ __forceinline__ dl_u64 dl_mod(dl_u64 a, dl_u64 b) { return b ? a % b : 0ull; }\n"
    "__device__ __forceinline__ dl_u64 dl_fmod(dl_u64 a, dl_u64 b) { return b ? a % b : 0ull; }\n"
    "__device__ __forceinline__ dl_u64 dl_pow(dl_u64 a, dl_u64 b) {\n"
    "  dl_u64 r = 1ull;\n"
    "  for (; b; b >>= 1, a *= a)\n"
    "    if (b & 1ull) r *= a;\n"
    "  return r;\n"
    "}\n"
    "__device__ __forceinline__ dl_u64 dl_clip(dl_u64 x, dl_u64 lo, dl_u64 hi) {\n"
    "  return x < lo ? lo : x > hi ? hi : x;\n"
    "}\n"
    "/* f64: the f32 helpers above in double */\n"
    "__device__ __forceinline__ double dl_relu(double x) { return x > 0.0 || x != x ? x : 0.0; }\n"
    "__device__ __forceinline__ bool dl_isnan(double x) { return x != x; }\n"
    "__device__ __forceinline__ bool dl_isinf(double x) { return fabs(x) == (double)dl_inf(); }\n"
    "__device__ __forceinline__ double dl_leaky_relu(double x, double a) { return x >= 0.0 ? x : x * a; }\n"
    "__device__ __forceinline__ double dl_clip(double x, double lo, double hi) {\n"
    "  return x != x ? x : x < lo ? lo : x > hi ? hi : x;\n"
    "}\n"
    "__device__ __forceinline__ double dl_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }\n"
    "__device__ __forceinline__ double dl_silu(double x) { return x / (1.0 + exp(-x)); }\n"
    "__device__ __forceinline__ double dl_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }\n"
    "__device__ __forceinline__ double dl_gelu_tanh(double x) {\n"
    "  double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);\n"
    "  return x / (1.0 + exp(-2.0 * u));\n"
    "}\n"
    "__device__ __forceinline__ double dl_hardsigmoid(double x) { return fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0); }\n"
    "__device__ __forceinline__ double dl_hardswish(double x) { return x * dl_hardsigmoid(x); }\n"
    "__device__ __forceinline__ double dl_max(double a, double b) {\n"
    "  return a != a || b != b ? a + b : a > b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ double dl_min(double a, double b) {\n"
    "  return a != a || b != b ? a + b : a < b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ double dl_sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x; }\n"
    "__device__ __forceinline__ double dl_mod(double a, double b) {\n"
    "  double r = fmod(a, b);\n"
    "  return r != 0.0 ? ((r < 0.0) != (b < 0.0) ? r + b : r) : copysign(0.0, b);\n"
    "}\n"
    "/* float -> the other integers, saturating as eval.c's casts; each also\n"
    " * from double, so that an f64 is never rounded to float first. */\n"
    "__device__ __forceinline__ signed char dl_f2i8(double x) {\n"
    "  return x != x ? 0 : x <= -128.0 ? -128 : x >= 127.0 ? 127 : (signed char)(int)x;\n"
    "}\n"
    "__device__ __forceinline__ int dl_f2i32(double x) {\n"
    "  return x != x ? 0 : x <= -2147483648.0 ? (-2147483647 - 1) : x >= 2147483647.0 ? 2147483647 : (int)x;\n"
    "}\n"
    "__device__ __forceinline__ long long dl_f2i64(double x) {\n"
    "  return x != x ? 0 : x <= -9223372036854775808.0 ? (-9223372036854775807LL - 1)\n"
    "         : x >= 9223372036854775808.0 ? 9223372036854775807LL : (long long)x;\n"
    "}\n"
    "__device__ __forceinline__ unsigned char dl_f2u8(double x) {\n"
    "  return fabs(x) < 2147483648.0 ? (unsigned char)(int)x : (unsigned char)0;\n"
    "}\n"
    "__device__ __forceinline__ short dl_f2i16(double x) {\n"
    "  return x != x ? 0 : x <= -32768.0 ? (short)-32768 : x >= 32767.0 ? (short)32767 : (short)(int)x;\n"
    "}\n"
    "__device__ __forceinline__ unsigned short dl_f2u16(double x) {\n"
    "  return !(x > 0.0) ? 0 : x >= 65535.0 ? (unsigned short)65535 : (unsigned short)(int)x;\n"
    "}\n"
    "__device__ __forceinline__ unsigned dl_f2u32(double x) {\n"
    "  return !(x > 0.0) ? 0u : x >= 4294967295.0 ? 4294967295u : (unsigned)x;\n"
    "}\n"
    "__device__ __forceinline__ dl_u64 dl_f2u64(double x) {\n"
    "  return !(x > 0.0) ? 0ull : x >= 18446744073709551616.0 ? 18446744073709551615ull : (dl_u64)x;\n"
    "}\n"
    "/* ir/narrow.c's rounding into a narrow float format: m mantissa bits,\n"
    " * emin the smallest normal exponent, past mx: mx when sat, else ovf;\n"
    " * uz: no negative zero; nan0: NaN becomes a zero (e2m1).  Into a\n"
    " * narrow int: truncated, 0 outside [lo, hi]. */\n"
    "__device__ __forceinline__ float dl_fp_round(float x, int m, int emin, float mx, bool sat, float ovf,\n"
    "                                             bool uz, bool nan0) {\n"
    "  if (x != x) return nan0 ? -copysignf(0.0f, x) : x;\n"
    "  float a = fabsf(x), r;\n"
    "  if (a == dl_inf()) {\n"
    "    r = sat ? mx : ovf;\n"
    "  } else {\n"
    "    int e;\n"
    "    frexpf(a, &e);\n"
    "    e = e - 1 < emin ? emin : e - 1;\n"
    "    float q = ldexpf(1.0f, e - m);\n"
    "    r = rintf(a / q) * q;\n"
    "    if (r > mx) r = sat ? mx : ovf;\n"
    "  }\n"
    "  return uz && r == 0.0f ? 0.0f : copysignf(r, x);\n"
    "}\n"
    "/* ir/narrow.c's e8m0: the exponent field of x's bits, raised by the\n"
    " * rounding (0 up, 1 down, 2 nearest; never past 0xFE when sat), as a\n"
    " * power of two; NaN and the infinities NaN. */\n"
    "__device__ __forceinline__ float dl_e8m0_round(float x, int mode, bool sat) {\n"
    "  unsigned b = __float_as_uint(x), e = b >> 23 & 0xFFu;\n"
    "  bool up = mode == 0 ? (b & 0x7FFFFFu) != 0u\n"
    "          : mode == 2 ? (b & 0x400000u) != 0u && ((b & 0x200000u) != 0u || (b & 0x1FFFFFu) != 0u || e > 0u)\n"
    "          : false;\n"
    "  if (e == 0xFFu) return __uint_as_float(0x7FC00000u);\n"
    "  if (up && sat && e == 0xFEu) up = false;\n"
    "  e += up ? 1u : 0u;\n"
    "  return e == 0xFFu ? __uint_as_float(0x7FC00000u) : __uint_as_float(e ? e << 23 : 0x400000u);\n"
    "}\n"
    "__device__ __forceinline__ float dl_int_round(float x, float lo, float hi) {\n"
    "  float t = truncf(x);\n"
    "  return t != t || t < lo || t > hi ? 0.0f : t + 0.0f;\n"
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
    "}\n"
    "/* Four bytes in one 32-bit word of a vector, the first lowest. */\n"
    "__device__ __forceinline__ unsigned dl_pack_b4(unsigned char a, unsigned char b, unsigned char c,\n"
    "                                               unsigned char d) {\n"
    "  return (unsigned)a | (unsigned)b << 8 | (unsigned)c << 16 | (unsigned)d << 24;\n"
    "}\n";

/* clang-format on */

/* KS_GRID_SYNC's barrier, in the source only when a kernel is
 * cooperative. */
/* clang-format off */
static const char grid_sync[] =
    "#ifndef DLCC_EMU\n"
    "/* The grid-wide barrier of a cooperative launch (every block resident),\n"
    " * on bar[0] (arrivals) and bar[1] (generation), zero at the launch.  One\n"
    " * thread per block arrives for it after __syncthreads, so the block's\n"
    " * writes happen before its arrival; it reads the generation before it\n"
    " * adds itself (the fence orders the two), so the last arriver cannot\n"
    " * have moved it on unseen.  The last arriver puts the count back to 0\n"
    " * before it bumps the generation, so no block reaches the next barrier\n"
    " * before the reset, and bar is 0 again when the kernel ends.  The\n"
    " * fences on both sides of the atomic make it a release and an acquire\n"
    " * at GPU scope (PTX's fence.sc.gpu), so every write before the barrier\n"
    " * is visible to every read after it, in any block.  The emu device\n"
    " * defines dl_grid_sync as its scheduler's grid barrier instead of a spin. */\n"
    "__device__ __forceinline__ void dl_grid_sync(int *bar) {\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {\n"
    "    volatile int *gen = bar + 1;\n"
    "    int seen = *gen;\n"
    "    __threadfence();\n"
    "    if (atomicAdd(bar, 1) == (int)(gridDim.x * gridDim.y * gridDim.z) - 1) {\n"
    "      atomicExch(bar, 0);\n"
    "      __threadfence();\n"
    "      *gen = seen + 1;\n"
    "    } else {\n"
    "      while (*gen == seen) {\n"
    "      }\n"
    "    }\n"
    "    __threadfence();\n"
    "  }\n"
    "  __syncthreads();\n"
    "}\n"
    "#endif\n";
/* clang-format on */

const char *cg_grid_sync_prelude(void) { return grid_sync; }

/* KS_LAST_ARRIVAL's counter, as dl_grid_sync arrives: after the
 * block's barrier one thread fences (PTX's fences are cumulative, so the
 * block's stores the barrier ordered before it are released with it)
 * and adds the block's arrival; the last arriver resets the counter for
 * the next launch (no other block touches it again in this one) and
 * fences again, the acquire of every other block's stores, before the
 * block reads them.  The verdict goes to every thread through shared
 * memory. */
/* clang-format off */
static const char arrival[] =
    "__device__ __forceinline__ int dl_last_arrival(int *counter, int count, int *verdict) {\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {\n"
    "    __threadfence();\n"
    "    int last = atomicAdd(counter, 1) == count - 1;\n"
    "    if (last) atomicExch(counter, 0);\n"
    "    __threadfence();\n"
    "    *verdict = last;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  return *verdict;\n"
    "}\n";
/* clang-format on */

const char *cg_arrival_prelude(void) { return arrival; }

/* Two 16-bit lanes travel in each 32-bit word of a vector (KS_VSTORE). */
/* clang-format off */
static const char helpers_f16[] =
    "__device__ __forceinline__ unsigned dl_h_pack(__half a, __half b) {\n"
    "  return (unsigned)__half_as_ushort(a) | ((unsigned)__half_as_ushort(b) << 16);\n"
    "}\n";
static const char helpers_bf16[] =
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

/* A set of variables (open addressing on the pointer), malloc'd: the
 * emitter may not take from the arena while its stream is open.  An
 * allocation that fails leaves the set as it was, which only costs the
 * cheaper division below. */
typedef struct VarSet {
  const KVar **slot;
  size_t cap, n;
} VarSet;

static size_t var_hash(const KVar *v, size_t cap) { return ((uintptr_t)v >> 4) * 0x9e3779b97f4a7c15ull & (cap - 1); }

static bool var_in(const VarSet *s, const KVar *v) {
  if (!s->cap) return false;
  for (size_t i = var_hash(v, s->cap);; i = (i + 1) & (s->cap - 1)) {
    if (!s->slot[i]) return false;
    if (s->slot[i] == v) return true;
  }
}

static void var_add(VarSet *s, const KVar *v) {
  if (var_in(s, v)) return;
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    const KVar **slot = calloc(cap, sizeof *slot);
    if (!slot) return;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->slot[i]) continue;
      size_t j = var_hash(s->slot[i], cap);
      while (slot[j]) j = (j + 1) & (cap - 1);
      slot[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = slot, s->cap = cap;
  }
  size_t i = var_hash(v, s->cap);
  while (s->slot[i]) i = (i + 1) & (s->cap - 1);
  s->slot[i] = v;
  s->n++;
}

typedef struct Out {
  FILE *f;
  const Kernel *k;
  int depth;
  /* Index variables known to be >= 0 wherever they are read (loop
   * variables, parameters whose range starts at 0, lets of such values
   * that nothing sets again), so that dividing one by a positive
   * constant may be unsigned: a shift or a mask for a power of 2, where
   * C's signed division spends instructions on a sign it does not have
   * (the tensor-core kernels' lane arithmetic, which ptxas recomputes
   * inside the main loop). */
  VarSet nonneg, reassigned;
  /* How the body names its thread and block indices and sizes: CUDA's
   * built-ins, or in a merged kernel's part (cg_kernel_merge) its own
   * (dl_tx, a constant blockDim) computed from them. */
  const char *tid[3], *bdim[3], *bid_x, *gdim_x;
  char bdim_buf[3][16], gdim_buf[16];
} Out;

static void builtin_names(Out *o) {
  static const char *const tid[] = {"threadIdx.x", "threadIdx.y", "threadIdx.z"};
  static const char *const bdim[] = {"blockDim.x", "blockDim.y", "blockDim.z"};
  for (int i = 0; i < 3; i++) o->tid[i] = tid[i], o->bdim[i] = bdim[i];
  o->bid_x = "blockIdx.x";
  o->gdim_x = "gridDim.x";
}

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
    case TY_F64: return "double";
    case TY_I16: return "short";
    case TY_U16: return "unsigned short";
    case TY_U32: return "unsigned";
    case TY_U64: return "unsigned long long";
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

/* v as a literal of dt: a double one, all its digits, for f64. */
static void print_num(Out *o, double v, DType dt) {
  if (dt != TY_F64 || isnan(v) || isinf(v)) {
    print_float(o, v);
    return;
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%.17g", v);
  if (!strpbrk(buf, ".e")) strcat(buf, ".0");
  fprintf(o->f, v < 0 ? "(%s)" : "%s", buf);
}

/* C's float math function for e's dtype: expf for f32, exp for f64. */
static const char *math_fn(const KExpr *e, const char *f32_name) {
  static const char *const names[][2] = {
      {"fabsf", "fabs"}, {"tanhf", "tanh"}, {"expf", "exp"}, {"exp2f", "exp2"},   {"logf", "log"},     {"sqrtf", "sqrt"},
      {"erff", "erf"},   {"sinf", "sin"},   {"cosf", "cos"},   {"rintf", "rint"},   {"floorf", "floor"},
      {"ceilf", "ceil"}, {"tanf", "tan"},   {"asinf", "asin"}, {"acosf", "acos"},   {"atanf", "atan"},
      {"sinhf", "sinh"}, {"coshf", "cosh"}, {"asinhf", "asinh"}, {"acoshf", "acosh"}, {"atanhf", "atanh"},
      {"powf", "pow"},   {"fmodf", "fmod"},
  };
  if (e->dtype != TY_F64) return f32_name;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(names[i][0], f32_name) == 0) return names[i][1];
  return f32_name;
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

/* A comparison as the 1/0 mask of e's dtype (and a bit op in it): a
 * typed int keeps integer overloads unambiguous, a float keeps float
 * arithmetic. */
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
    case OP_BIT_AND: cmp_int(o, e, "&"); return;
    case OP_BIT_OR: cmp_int(o, e, "|"); return;
    case OP_BIT_XOR: cmp_int(o, e, "^"); return;
    case OP_BIT_NOT: fprintf(o->f, "((%s)~", ctype(o->k, e->dtype)), expr(o, a), fputc(')', o->f); return;
    case OP_SHL:
    case OP_SHR: {
      /* eval.c's: a shift out of [0, width) is the sign fill (C leaves it
       * undefined); shl through unsigned, shr arithmetic on a signed a */
      int bits = ir_dtype_size(e->dtype) * 8;
      bool sgn = e->dtype == TY_I8 || e->dtype == TY_I16 || e->dtype == TY_I32 || e->dtype == TY_I64;
      fprintf(o->f, "((%s)(", ctype(o->k, e->dtype));
      if (sgn) fputc('(', o->f), expr(o, b), fputs(" < 0) || ", o->f);
      fputc('(', o->f), expr(o, b), fprintf(o->f, " >= %d) ? ", bits);
      if (e->op == OP_SHR && sgn)
        fputc('(', o->f), expr(o, a), fputs(" < 0 ? -1 : 0)", o->f);
      else
        fputc('0', o->f);
      fputs(" : ", o->f);
      if (e->op == OP_SHR && sgn)
        fprintf(o->f, "(%s)", bits == 64 ? "long long" : "int");
      else
        fprintf(o->f, "(%s)", bits == 64 ? "unsigned long long" : "unsigned");
      expr(o, a);
      fputs(e->op == OP_SHL ? " << " : " >> ", o->f), expr(o, b), fputs("))", o->f);
      return;
    }
    case OP_CLIP: {
      /* The integers inside [min, max], as eval.c. */
      double lo = ceil(e->f), hi = floor(e->f2);
      long long l = lo <= -9.2e18 ? INT64_MIN : lo >= 9.2e18 ? INT64_MAX : (long long)lo;
      long long h = hi <= -9.2e18 ? INT64_MIN : hi >= 9.2e18 ? INT64_MAX : (long long)hi;
      if (e->dtype == TY_U64) { /* its range from 0 to 2^64 - 1 */
        const double top = 18446744073709551616.0;
        unsigned long long ul = lo <= 0 ? 0 : lo >= top ? ULLONG_MAX : (unsigned long long)lo;
        unsigned long long uh = hi <= 0 ? 0 : hi >= top ? ULLONG_MAX : (unsigned long long)hi;
        fputs("dl_clip((dl_u64)", o->f);
        expr(o, a);
        fprintf(o->f, ", %lluULL, %lluULL)", ul, uh);
        return;
      }
      fprintf(o->f, "dl_clip((long long)");
      expr(o, a);
      fprintf(o->f, ", %lldLL, %lldLL)", l, h);
      return;
    }
    default: dl_internal(o->k->ctx, "integer %s reached the CUDA emitter", ir_ops[e->op].name);
  }
}

/* The format's constants spelled out (ir/narrow.c's table); e->i is its
 * index, e->flag saturate. */
static void fp_round(Out *o, const KExpr *e) {
  const IrNarrow *f = ir_narrow_at((int)e->i);
  if (!f) dl_internal(o->k->ctx, "fp_round of format %d", (int)e->i);
  if (f->kind == IR_NARROW_E8M0) {
    fputs("dl_e8m0_round(", o->f), fexpr(o, e->a[0]);
    fprintf(o->f, ", %d, %s)", f->m, e->flag ? "true" : "false");
    return;
  }
  if (f->kind == IR_NARROW_INT) {
    fputs("dl_int_round(", o->f), fexpr(o, e->a[0]);
    fprintf(o->f, ", %d.0f, %d.0f)", f->emin, (int)f->max);
    return;
  }
  bool sat = e->flag || f->bits == 4;
  fputs("dl_fp_round(", o->f), fexpr(o, e->a[0]);
  fprintf(o->f, ", %d, %d, ", f->m, f->emin), print_float(o, f->max);
  fprintf(o->f, ", %s, ", sat ? "true" : "false"), print_float(o, f->ovf);
  fprintf(o->f, ", %s, %s)", f->uz ? "true" : "false", f->bits == 4 ? "true" : "false");
}

static void op_float(Out *o, const KExpr *e) {
  const KExpr *a = e->a[0], *b = e->a[1];
  switch (e->op) {
    case OP_NEG: fputs("(-", o->f), fexpr(o, a), fputc(')', o->f); return;
    case OP_ABS: fcall1(o, math_fn(e, "fabsf"), a); return;
    case OP_RELU: fcall1(o, "dl_relu", a); return;
    case OP_LEAKY_RELU:
      fputs("dl_leaky_relu(", o->f), fexpr(o, a), fputs(", ", o->f), print_num(o, e->f, e->dtype);
      fputc(')', o->f);
      return;
    case OP_CLIP:
      fputs("dl_clip(", o->f), fexpr(o, a), fputs(", ", o->f), print_num(o, e->f, e->dtype);
      fputs(", ", o->f), print_num(o, e->f2, e->dtype), fputc(')', o->f);
      return;
    case OP_SIGMOID: fcall1(o, "dl_sigmoid", a); return;
    case OP_TANH: fcall1(o, math_fn(e, "tanhf"), a); return;
    case OP_GELU: fcall1(o, e->flag ? "dl_gelu_tanh" : "dl_gelu", a); return;
    case OP_SILU: fcall1(o, "dl_silu", a); return;
    case OP_HARDSIGMOID: fcall1(o, "dl_hardsigmoid", a); return;
    case OP_HARDSWISH: fcall1(o, "dl_hardswish", a); return;
    case OP_EXP: fcall1(o, math_fn(e, e->flag ? "exp2f" : "expf"), a); return;
    case OP_LOG: fcall1(o, math_fn(e, "logf"), a); return;
    case OP_SQRT: fcall1(o, math_fn(e, "sqrtf"), a); return;
    case OP_RSQRT: fprintf(o->f, "(1.0f / %s(", math_fn(e, "sqrtf")), fexpr(o, a), fputs("))", o->f); return;
    case OP_ERF: fcall1(o, math_fn(e, "erff"), a); return;
    case OP_RECIPROCAL: fputs("(1.0f / ", o->f), fexpr(o, a), fputc(')', o->f); return;
    case OP_SIN: fcall1(o, math_fn(e, "sinf"), a); return;
    case OP_COS: fcall1(o, math_fn(e, "cosf"), a); return;
    case OP_ROUND: fcall1(o, math_fn(e, "rintf"), a); return; /* half to even in the default mode */
    case OP_FLOOR: fcall1(o, math_fn(e, "floorf"), a); return;
    case OP_CEIL: fcall1(o, math_fn(e, "ceilf"), a); return;
    case OP_FP_ROUND: fp_round(o, e); return;
    case OP_SIGN: fcall1(o, "dl_sign", a); return;
    case OP_TAN: fcall1(o, math_fn(e, "tanf"), a); return;
    case OP_ASIN: fcall1(o, math_fn(e, "asinf"), a); return;
    case OP_ACOS: fcall1(o, math_fn(e, "acosf"), a); return;
    case OP_ATAN: fcall1(o, math_fn(e, "atanf"), a); return;
    case OP_SINH: fcall1(o, math_fn(e, "sinhf"), a); return;
    case OP_COSH: fcall1(o, math_fn(e, "coshf"), a); return;
    case OP_ASINH: fcall1(o, math_fn(e, "asinhf"), a); return;
    case OP_ACOSH: fcall1(o, math_fn(e, "acoshf"), a); return;
    case OP_ATANH: fcall1(o, math_fn(e, "atanhf"), a); return;
    case OP_ADD: finfix(o, "+", a, b); return;
    case OP_SUB: finfix(o, "-", a, b); return;
    case OP_MUL: finfix(o, "*", a, b); return;
    case OP_DIV: finfix(o, "/", a, b); return;
    case OP_POW: fcall2(o, math_fn(e, "powf"), a, b); return;
    case OP_MOD: fcall2(o, e->flag ? math_fn(e, "fmodf") : "dl_mod", a, b); return;
    case OP_MAXIMUM: fcall2(o, e->flag ? "fmaxf" : "dl_max", a, b); return;
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
    fcall1(o,
           t == TY_I8    ? "dl_f2i8"
           : t == TY_U8  ? "dl_f2u8"
           : t == TY_I32 ? "dl_f2i32"
           : t == TY_I16 ? "dl_f2i16"
           : t == TY_U16 ? "dl_f2u16"
           : t == TY_U32 ? "dl_f2u32"
           : t == TY_U64 ? "dl_f2u64"
                         : "dl_f2i64",
           e->a[0]);
    return;
  }
  if (is_half(to)) {
    /* An i32 or i64 goes straight to the half type, rounded once: through
     * float it would round twice (2^24 + 2^16 + 1 is a bf16 tie in float,
     * and ties to 2^24, where it lies above the tie). */
    DType f = from == KT_INDEX ? k->index : from;
    bool h = to == TY_F16;
    if (f == TY_I32 || f == TY_I64 || f == TY_I16 || f == TY_U16 || f == TY_U32 || f == TY_U64) {
      bool narrow = f == TY_I32 || f == TY_I16 || f == TY_U16; /* exact in int */
      fputs(narrow         ? (h ? "__int2half_rn((int)" : "__int2bfloat16_rn((int)")
            : f == TY_U64 ? (h ? "__ull2half_rn(" : "__ull2bfloat16_rn(")
                          : (h ? "__ll2half_rn((long long)" : "__ll2bfloat16_rn((long long)"),
            o->f);
      expr(o, e->a[0]);
      fputc(')', o->f);
      return;
    }
    if (f == TY_F64) { /* straight from double: through float it would round twice */
      fputs(h ? "__double2half(" : "__double2bfloat16(", o->f);
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

/* A vector access of n lanes of dt (KS_VLOAD, KS_VSTORE, KE_LANE) is
 * `words` words of `word` bytes (16 at most), each of a CUDA vector
 * type; lanes of 1 or 2 bytes are packed into its 32-bit components. */
typedef struct VecShape {
  int word, words, per_word;
  const char *type;
} VecShape;

static VecShape vec_shape(DType dt, int n) {
  int size = ir_dtype_size(dt), bytes = n * size;
  VecShape v = {.word = bytes < 16 ? bytes : 16};
  v.words = bytes / v.word;
  v.per_word = v.word / size;
  switch (dt) {
    case TY_F32: v.type = v.word == 16 ? "float4" : v.word == 8 ? "float2" : "float"; break;
    case TY_I32: v.type = v.word == 16 ? "int4" : v.word == 8 ? "int2" : "int"; break;
    case TY_I64: v.type = v.word == 16 ? "longlong2" : "long long"; break;
    default: v.type = v.word == 16 ? "uint4" : v.word == 8 ? "uint2" : "unsigned"; break;
  }
  return v;
}

/* Component c of a word (nothing when the word is one scalar). */
static const char *component(const VecShape *v, int c, int comp_bytes) {
  static const char *const xyzw[] = {".x", ".y", ".z", ".w"};
  return v->word == comp_bytes ? "" : xyzw[c & 3];
}

static void word_name(Out *o, const char *var, const VecShape *v, int w) {
  if (v->words == 1)
    fputs(var, o->f);
  else
    fprintf(o->f, "%s_%d", var, w);
}

static void lane(Out *o, const char *var, DType dt, int n, int l) {
  VecShape v = vec_shape(dt, n);
  int w = l / v.per_word, m = l % v.per_word, size = ir_dtype_size(dt);
  if (size >= 4) {
    word_name(o, var, &v, w);
    fputs(component(&v, m, size), o->f);
    return;
  }
  /* 1 or 2 bytes: the lane's bits of its 32-bit component */
  int per32 = 4 / size, shift = (m % per32) * 8 * size;
  const char *wrap = dt == TY_F16 ? "__ushort_as_half((unsigned short)("
                     : dt == TY_BF16 ? "__ushort_as_bfloat16((unsigned short)("
                     : dt == TY_I8   ? "((signed char)("
                     : dt == TY_U8   ? "((unsigned char)("
                                     : "(((unsigned char)(";
  fputs(wrap, o->f);
  word_name(o, var, &v, w);
  fputs(component(&v, m / per32, 4), o->f);
  if (shift) fprintf(o->f, " >> %d", shift);
  fputs(dt == TY_BOOL ? ")) != 0)" : "))", o->f);
}

/* Whether index expression e is >= 0 (as C evaluates it, given that no
 * index arithmetic overflows: the kernel's index type is chosen so). */
static bool nonneg(const Out *o, const KExpr *e) {
  switch (e->kind) {
    case KE_INT: return e->i >= 0;
    case KE_VAR: return var_in(&o->nonneg, e->var);
    case KE_IDX:
      switch (e->sub) {
        case KI_SUB: return false;
        case KI_MAX: return nonneg(o, e->a[0]) || nonneg(o, e->a[1]);
        default: return nonneg(o, e->a[0]) && nonneg(o, e->a[1]);
      }
    case KE_SELECT: return nonneg(o, e->a[1]) && nonneg(o, e->a[2]);
    default: return false;
  }
}

/* e / c or e % c of a non-negative index e and a constant c > 0 as
 * unsigned arithmetic; false, having printed nothing, otherwise. */
static bool unsigned_divide(Out *o, const KExpr *e) {
  const KExpr *d = e->a[1];
  if ((e->sub != KI_DIV && e->sub != KI_MOD) || e->dtype != KT_INDEX || d->kind != KE_INT || d->i <= 0 ||
      !nonneg(o, e->a[0]))
    return false;
  bool wide = is_wide(o->k, KT_INDEX);
  if ((d->i & (d->i - 1)) == 0) {
    int shift = 0;
    while ((INT64_C(1) << shift) < d->i) shift++;
    fputc('(', o->f);
    expr(o, e->a[0]);
    if (e->sub == KI_DIV)
      fprintf(o->f, " >> %d)", shift);
    else
      fprintf(o->f, " & %" PRId64 "%s)", d->i - 1, wide ? "LL" : "");
    return true;
  }
  fprintf(o->f, wide ? "((long long)((unsigned long long)" : "((int)((unsigned)");
  expr(o, e->a[0]);
  fprintf(o->f, " %c %" PRId64 "%s))", e->sub == KI_DIV ? '/' : '%', d->i, wide ? "ULL" : "U");
  return true;
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
        print_num(o, e->f, e->dtype);
      }
      return;
    case KE_VAR: fputs(e->var->name, o->f); return;
    case KE_IDX:
      if (unsigned_divide(o, e)) return;
      if (e->sub == KI_XOR)
        infix(o, "^", e->a[0], e->a[1]);
      else if (e->sub == KI_MIN || e->sub == KI_MAX)
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
      if (e->op == OP_BITCAST) {
        fprintf(o->f, "dl_bitcast<%s, %s>(", ctype(o->k, e->dtype), ctype(o->k, e->a[0]->dtype));
        expr(o, e->a[0]);
        fputc(')', o->f);
      } else if (e->op == OP_DROPOUT) { /* its draw: lower_train.c's dl_dropout_bits */
        fputs("dl_dropout_bits(", o->f), expr(o, e->a[0]), fputs(", ", o->f), expr(o, e->a[1]);
        fputs(", ", o->f), expr(o, e->a[2]), fprintf(o->f, ", %uu)", (unsigned)e->i);
      } else if (e->op == OP_QUANTIZE || e->op == OP_DEQUANTIZE) {
        op_quant(o, e);
      } else if (ir_op_is_logic(e->op)) {
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
    case KE_LANE: lane(o, e->var->name, e->dtype, e->sub, (int)e->i); return;
    case KE_SHFL_XOR:
      fputs("__shfl_xor_sync(0xffffffffu, ", o->f);
      expr_as(o, e->a[0], e->dtype);
      fprintf(o->f, ", %d, %d)", (int)e->i, e->sub);
      return;
  }
}

static void block(Out *o, const KBlock *b);
static void scoped_block(Out *o, const KBlock *b);
static void chunk_store(Out *o, const KStmt *s);
static void tc_stmt(Out *o, const KStmt *s);

static void loop_head(Out *o, const KVar *v, const KExpr *extent, KMap map) {
  const Kernel *k = o->k;
  /* every mapping counts up from 0 or from a thread or block index */
  if (!var_in(&o->reassigned, v)) var_add(&o->nonneg, v);
  const char *it = ctype(k, v->dtype);
  switch (map) {
    case KM_UNROLL:
    case KM_LANES: /* cg_unroll makes these KM_UNROLL or KM_SERIAL */
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
      fprintf(o->f, "for (%s %s = (%s)%s * %s + %s; %s < ", it, v->name, it, o->bid_x, o->bdim[0], o->tid[0],
              v->name);
      expr(o, extent);
      fprintf(o->f, "; %s += (%s)%s * %s) {\n", v->name, it, o->bdim[0], o->gdim_x);
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
      static const char *const bid[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
      static const char *const gdim[] = {"gridDim.x", "gridDim.y", "gridDim.z"};
      fprintf(o->f, "for (%s %s = %s; %s < ", it, v->name,
              grid ? (ax ? bid[ax] : o->bid_x) : o->tid[ax], v->name);
      expr(o, extent);
      fprintf(o->f, "; %s += %s) {\n", v->name, grid ? (ax ? gdim[ax] : o->gdim_x) : o->bdim[ax]);
      return;
    }
  }
}

/* Each word of the vector from its lanes: a make_ of its type, or the
 * 1- and 2-byte lanes packed into 32-bit components. */
static void vstore(Out *o, const KStmt *s) {
  DType dt = s->buf->dtype;
  VecShape v = vec_shape(dt, s->n_lanes);
  int size = ir_dtype_size(dt), comps = size >= 4 ? v.per_word : v.word / 4, per_comp = v.per_word / comps;
  const char *pack = dt == TY_F16 ? "dl_h_pack" : dt == TY_BF16 ? "dl_b_pack" : "dl_pack_b4";
  for (int w = 0; w < v.words; w++) {
    indent(o);
    fprintf(o->f, "*(%s *)&%s[", v.type, s->buf->name);
    expr(o, s->index);
    if (w) fprintf(o->f, " + %d", w * v.per_word);
    fputs("] = ", o->f);
    if (comps > 1) fprintf(o->f, "make_%s(", v.type);
    for (int c = 0; c < comps; c++) {
      if (c) fputs(", ", o->f);
      if (per_comp > 1) fprintf(o->f, "%s(", pack);
      for (int l = 0; l < per_comp; l++) {
        if (l) fputs(", ", o->f);
        expr_as(o, s->lanes[w * v.per_word + c * per_comp + l], dt);
      }
      if (per_comp > 1) fputc(')', o->f);
    }
    fputs(comps > 1 ? ");\n" : ";\n", o->f);
  }
}

/* A line: `T dl_t = <from>; acc = combine(acc, dl_t);`, dl_t a local
 * of its own braces. */
static void combine_from(Out *o, const KStmt *s, const char *from) {
  KVar t = {.name = "dl_t", .dtype = s->var->dtype};
  KExpr acc = {.kind = KE_VAR, .dtype = s->var->dtype, .var = s->var};
  KExpr other = {.kind = KE_VAR, .dtype = s->var->dtype, .var = &t};
  KExpr comb = {.kind = KE_OP, .dtype = s->var->dtype, .op = s->combine, .a = {&acc, &other}};
  indent(o);
  fprintf(o->f, "%s dl_t = %s;\n", ctype(o->k, s->var->dtype), from);
  indent(o);
  fprintf(o->f, "%s = ", s->var->name);
  expr(o, &comb);
  fputs(";\n", o->f);
}

/* No #pragma unroll: --no-unroll holds here too, and nvcc unrolls
 * these short constant loops by itself. */
static void open_loop(Out *o, const char *head) {
  indent(o);
  fprintf(o->f, "%s {\n", head);
  o->depth++;
}

static void close_brace(Out *o) {
  o->depth--;
  indent(o);
  fputs("}\n", o->f);
}

/* Across x: a butterfly of shuffles within each warp leaves every lane
 * with the same value (each step combines the same two operands in
 * either lane, and the combines are commutative); wider rows then meet
 * in shared memory, one slot per warp, which every thread combines in
 * slot order.  Across y: one slot per thread, combined in y order.  The
 * leading barrier keeps the slots from being overwritten while the
 * previous reduction still reads them. */
static void allreduce(Out *o, const KStmt *s) {
  const Kernel *k = o->k;
  const char *acc = s->var->name;
  unsigned x = k->block[0], y = k->block[1];
  char line[160], slot[96], first[64], at[96];
  indent(o);
  fputs("{\n", o->f);
  o->depth++;
  if (s->map == KM_BLOCK_X && x > 1) {
    snprintf(line, sizeof line, "for (int dl_o = %u; dl_o > 0; dl_o >>= 1)", (x < 32 ? x : 32) / 2);
    open_loop(o, line);
    snprintf(line, sizeof line, "__shfl_xor_sync(0xffffffffu, %s, dl_o)", acc);
    combine_from(o, s, line);
    close_brace(o);
  }
  if (s->buf) {
    unsigned slots = s->map == KM_BLOCK_X ? x / 32 : y;
    if (s->map == KM_BLOCK_X && y > 1) {
      snprintf(slot, sizeof slot, "%s * %u + (%s >> 5)", o->tid[1], slots, o->tid[0]);
      snprintf(first, sizeof first, "%s * %u", o->tid[1], slots);
      snprintf(at, sizeof at, "%s * %u + dl_w", o->tid[1], slots);
    } else if (s->map == KM_BLOCK_X) {
      snprintf(slot, sizeof slot, "%s >> 5", o->tid[0]);
      snprintf(first, sizeof first, "0");
      snprintf(at, sizeof at, "dl_w");
    } else {
      snprintf(slot, sizeof slot, "%s * %u + %s", o->tid[1], x, o->tid[0]);
      snprintf(first, sizeof first, "%s", o->tid[0]);
      snprintf(at, sizeof at, "dl_w * %u + %s", x, o->tid[0]);
    }
    indent(o);
    fputs("__syncthreads();\n", o->f);
    indent(o);
    if (s->map == KM_BLOCK_X) fprintf(o->f, "if ((%s & 31u) == 0) ", o->tid[0]);
    fprintf(o->f, "%s[%s] = %s;\n", s->buf->name, slot, acc);
    indent(o);
    fputs("__syncthreads();\n", o->f);
    indent(o);
    fprintf(o->f, "%s = %s[%s];\n", acc, s->buf->name, first);
    snprintf(line, sizeof line, "for (int dl_w = 1; dl_w < %u; dl_w++)", slots);
    open_loop(o, line);
    snprintf(line, sizeof line, "%s[%s]", s->buf->name, at);
    combine_from(o, s, line);
    close_brace(o);
  }
  close_brace(o);
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
      if (s->var->dtype == KT_INDEX && !var_in(&o->reassigned, s->var) && nonneg(o, s->value))
        var_add(&o->nonneg, s->var);
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
    case KS_GRID_SYNC:
      indent(o);
      fprintf(o->f, "dl_grid_sync(%s);\n", s->buf->name);
      return;
    case KS_LAST_ARRIVAL:
      indent(o);
      fprintf(o->f, "const int %s = dl_last_arrival(&%s[", s->var->name, s->buf->name);
      expr(o, s->index);
      fprintf(o->f, "], %d, %s);\n", s->count, s->src->name);
      return;
    case KS_VLOAD: {
      /* Guarded: zeros, then the words read only where the guard holds. */
      VecShape v = vec_shape(s->var->dtype, s->n_lanes);
      for (int w = 0; w < v.words && s->cond; w++) {
        indent(o);
        fprintf(o->f, "%s ", v.type);
        word_name(o, s->var->name, &v, w);
        fputs(" = {};\n", o->f);
      }
      if (s->cond) {
        indent(o);
        fputs("if (", o->f);
        expr(o, s->cond);
        fputs(") {\n", o->f);
        o->depth++;
      }
      for (int w = 0; w < v.words; w++) {
        indent(o);
        if (!s->cond) fprintf(o->f, "%s ", v.type);
        word_name(o, s->var->name, &v, w);
        fprintf(o->f, " = *(const %s *)&%s[", v.type, s->buf->name);
        expr(o, s->index);
        if (w) fprintf(o->f, " + %d", w * v.per_word);
        fputs("];\n", o->f);
      }
      if (s->cond) {
        o->depth--;
        indent(o);
        fputs("}\n", o->f);
      }
      return;
    }
    case KS_VSTORE: vstore(o, s); return;
    case KS_ALLREDUCE: allreduce(o, s); return;
    case KS_CHUNK: chunk_store(o, s); return;
    case KS_MMA:
    case KS_LDMATRIX:
    case KS_CP_ASYNC:
    case KS_CP_COMMIT:
    case KS_CP_WAIT:
    case KS_TF32:
    case KS_PACK:
    case KS_WG_MMA:
    case KS_WG_FENCE:
    case KS_WG_COMMIT:
    case KS_WG_WAIT:
    case KS_WG_ACC:
    case KS_PROXY_FENCE: tc_stmt(o, s); return;
    case KS_WG_IF:
      /* the preprocessor's choice; each side its own scope */
      fputs("#ifdef DL_WGMMA\n", o->f);
      scoped_block(o, &s->body);
      fputs("#else\n", o->f);
      scoped_block(o, &s->orelse);
      fputs("#endif\n", o->f);
      return;
  }
}

/* { b } on lines of their own */
static void scoped_block(Out *o, const KBlock *b) {
  indent(o);
  fputs("{\n", o->f);
  o->depth++;
  block(o, b);
  o->depth--;
  indent(o);
  fputs("}\n", o->f);
}

static void block(Out *o, const KBlock *b) {
  for (const KStmt *s = b->first; s; s = s->next) stmt(o, s);
}

/* &buf[at] */
static void address(Out *o, const KBuf *b, const KExpr *at) {
  fprintf(o->f, "&%s[", b->name);
  expr(o, at);
  fputc(']', o->f);
}

/* 8 or 16 bytes of lanes in one store: float2/4 and int2/4 as they are,
 * halves and bytes packed into the words of a uint2/4, the first lowest. */
static void chunk_store(Out *o, const KStmt *s) {
  DType dt = s->buf->dtype;
  int words = s->count * ir_dtype_size(dt) / 4, per_word = s->count / words;
  const char *vec = dt == TY_F32 ? "float" : dt == TY_I32 ? "int" : "uint";
  indent(o);
  fprintf(o->f, "*(%s%d *)", vec, words);
  address(o, s->buf, s->index);
  fprintf(o->f, " = make_%s%d(", vec, words);
  for (int w = 0; w < words; w++) {
    if (w) fputs(", ", o->f);
    if (per_word == 1) {
      expr_as(o, s->chunk[w], dt);
    } else if (per_word == 2) {
      fputs(dt == TY_F16 ? "dl_h_pack(" : "dl_b_pack(", o->f);
      expr_as(o, s->chunk[2 * w], dt);
      fputs(", ", o->f);
      expr_as(o, s->chunk[2 * w + 1], dt);
      fputc(')', o->f);
    } else {
      fputc('(', o->f);
      for (int b = 0; b < 4; b++) {
        fputs(b ? " | (unsigned)(unsigned char)" : "(unsigned)(unsigned char)", o->f);
        expr_as(o, s->chunk[4 * w + b], dt);
        if (b) fprintf(o->f, " << %d", 8 * b);
      }
      fputc(')', o->f);
    }
  }
  fputs(");\n", o->f);
}

static void tc_stmt(Out *o, const KStmt *s) {
  static const char *const mma[] = {"dl_mma_f16", "dl_mma_bf16", "dl_mma_s8", "dl_mma_tf32"};
  indent(o);
  switch (s->kind) {
    case KS_MMA:
      fprintf(o->f, "%s(", mma[s->tc]);
      address(o, s->buf, s->index);
      fputs(", ", o->f);
      address(o, s->src, s->src_at);
      fputs(", ", o->f);
      address(o, s->src2, s->src2_at);
      fputs(", ", o->f);
      address(o, s->buf, s->index);
      fputs(");\n", o->f);
      return;
    case KS_LDMATRIX:
      fprintf(o->f, "dl_ldmatrix_x%d%s(", s->count, s->trans ? "_trans" : "");
      address(o, s->buf, s->index);
      fputs(", ", o->f);
      address(o, s->src, s->src_at);
      fputs(");\n", o->f);
      return;
    case KS_CP_ASYNC:
      fprintf(o->f, "dl_cp_async%d(", s->count);
      address(o, s->buf, s->index);
      fputs(", ", o->f);
      address(o, s->src, s->src_at);
      fputs(", (unsigned)", o->f);
      expr(o, s->value);
      fputs(");\n", o->f);
      return;
    case KS_CP_COMMIT: fputs("dl_cp_async_commit();\n", o->f); return;
    case KS_CP_WAIT: fprintf(o->f, "dl_cp_async_wait<%d>();\n", s->count); return;
    case KS_TF32:
      fprintf(o->f, "%s[", s->buf->name);
      expr(o, s->index);
      fprintf(o->f, "] = dl_tf32(__uint_as_float(%s[", s->buf->name);
      expr(o, s->index);
      fputs("]));\n", o->f);
      return;
    case KS_PACK:
      fprintf(o->f, "%s[", s->buf->name);
      expr(o, s->index);
      fprintf(o->f, "] = %s(", s->tc == KTC_TF32 ? "dl_tf32" : s->tc == KTC_F16 ? "dl_pack_f16x2" : "dl_pack_bf16x2");
      expr_as(o, s->chunk[0], TY_F32);
      if (s->count == 2) {
        fputs(", ", o->f);
        expr_as(o, s->chunk[1], TY_F32);
      }
      fputs(");\n", o->f);
      return;
    case KS_WG_MMA:
      /* the operands' descriptors: 64-byte swizzle, the next 8 rows 512
       * bytes on (LBO unused for K-major swizzled: 16) */
      fprintf(o->f, "dl_wgmma_%s_n%d(", s->tc == KTC_S8 ? "s8" : s->tc == KTC_BF16 ? "bf16" : "f16", s->count);
      address(o, s->buf, s->index);
      fputs(", dl_wgmma_desc(dl_smem_addr(", o->f);
      address(o, s->src, s->src_at);
      fputs("), 16, 512, 64), dl_wgmma_desc(dl_smem_addr(", o->f);
      address(o, s->src2, s->src2_at);
      fputs("), 16, 512, 64), ", o->f);
      if (s->value)
        expr_as(o, s->value, TY_I32);
      else
        fputc('1', o->f);
      fputs(");\n", o->f);
      return;
    case KS_WG_FENCE: fputs("dl_wgmma_fence();\n", o->f); return;
    case KS_WG_COMMIT: fputs("dl_wgmma_commit();\n", o->f); return;
    case KS_WG_WAIT: fprintf(o->f, "dl_wgmma_wait<%d>();\n", s->count); return;
    case KS_WG_ACC:
      fprintf(o->f, "dl_wgmma_fence_operand(%s[", s->buf->name);
      expr(o, s->index);
      fputs("]);\n", o->f);
      return;
    case KS_PROXY_FENCE: fputs("dl_fence_proxy_async();\n", o->f); return;
    default: dl_internal(o->k->ctx, "statement %d is not a tensor-core statement", (int)s->kind);
  }
}

static void param_type(Out *o, const KParam *p) {
  if (p->var)
    fprintf(o->f, "%s", ctype(o->k, p->var->dtype));
  else
    fprintf(o->f, "%s%s *", p->buf->written ? "" : "const ", ctype(o->k, p->buf->dtype));
}

/* One part of a merged or chained kernel, as a launch of its own would
 * run it: its thread index from lin (the launch's linear one, or a
 * group's in a chain's phase; warps are runs of linear indices, so its
 * warps are whole warps of the launch), its block index bx; the
 * threads past its size idle (cg_kernel_merge and cg_kernel_chain allow
 * that only without barriers, in whole warps). */
static void emit_part(Out *o, const Kernel *p, const char *lin, uint32_t lin_threads, const char *bx) {
  const uint32_t *pb = p->block;
  bool idle = pb[0] * pb[1] * pb[2] != lin_threads;
  if (idle) {
    indent(o);
    fprintf(o->f, "if (%s < %uu) {\n", lin, pb[0] * pb[1] * pb[2]);
    o->depth++;
  }
  indent(o);
  fprintf(o->f, "const unsigned dl_tx = %s %% %uu, dl_ty = %s / %uu %% %uu, dl_tz = %s / %uu, dl_bx = %s;\n", lin,
          pb[0], lin, pb[0], pb[1], lin, pb[0] * pb[1], bx);
  /* unused in most parts */
  indent(o);
  fputs("(void)dl_tx, (void)dl_ty, (void)dl_tz, (void)dl_bx;\n", o->f);
  Out po = *o;
  po.k = p;
  static const char *const tid[] = {"dl_tx", "dl_ty", "dl_tz"};
  for (int a = 0; a < 3; a++) {
    snprintf(po.bdim_buf[a], sizeof po.bdim_buf[a], "%uu", pb[a]);
    po.tid[a] = tid[a];
  }
  snprintf(po.gdim_buf, sizeof po.gdim_buf, "%uu", p->grid[0]);
  for (int a = 0; a < 3; a++) po.bdim[a] = po.bdim_buf[a];
  po.gdim_x = po.gdim_buf;
  po.bid_x = "dl_bx";
  block(&po, &p->body);
  o->nonneg = po.nonneg; /* the set may have grown (moved) */
  if (idle) {
    o->depth--;
    indent(o);
    fputs("}\n", o->f);
  }
}

/* Parts first .. end of m on consecutive ranges of the block index vb,
 * each seeing its own from 0. */
static void emit_parts_by_block(Out *o, int first, int end, const char *vb, const char *lin, uint32_t lin_threads) {
  const Kernel *m = o->k;
  uint64_t at = 0;
  for (int i = first; i < end; i++) {
    const Kernel *p = m->parts[i];
    indent(o);
    fprintf(o->f, "%sif (%s < %" PRIu64 "u) {\n", i > first ? "else " : "", vb, at + p->grid[0]);
    o->depth++;
    char bx[48];
    snprintf(bx, sizeof bx, "%s - %" PRIu64 "u", vb, at);
    emit_part(o, p, lin, lin_threads, bx);
    o->depth--;
    indent(o);
    fputs("}\n", o->f);
    at += p->grid[0];
  }
}

/* A merged kernel's parts, each on its range of blocks
 * (cg_kernel_merge). */
static void merged_parts(Out *o) {
  const Kernel *m = o->k;
  const uint32_t *mb = m->block;
  indent(o);
  fprintf(o->f, "const unsigned dl_lin = threadIdx.x + %uu * (threadIdx.y + %uu * threadIdx.z);\n", mb[0], mb[1]);
  emit_parts_by_block(o, 0, m->n_parts, "blockIdx.x", "dl_lin", mb[0] * mb[1] * mb[2]);
}

/* A chained kernel's phases (cg_kernel_chain), a grid barrier between
 * two.  In each, the launch's blocks walk the phase's blocks with a
 * stride of the grid, in groups of threads where the phase's blocks are
 * a fraction of the launch's (cg_phase_groups).  A phase with barriers
 * ends each block it walks at one more, so that no thread starts on the
 * next block's shared memory while another still reads this one's. */
static void chained_phases(Out *o) {
  const Kernel *m = o->k;
  const uint32_t *mb = m->block;
  uint32_t threads = mb[0] * mb[1] * mb[2];
  indent(o);
  fprintf(o->f, "const unsigned dl_lin = threadIdx.x + %uu * (threadIdx.y + %uu * threadIdx.z);\n", mb[0], mb[1]);
  for (int ph = 0, first = 0; ph < m->n_phases; ph++) {
    int end = first;
    uint64_t blocks = 0;
    bool barriers = false;
    while (end < m->n_parts && m->part_phase[end] == ph) {
      blocks += m->parts[end]->grid[0];
      barriers |= m->parts[end]->uses_barriers;
      end++;
    }
    uint32_t groups = cg_phase_groups(m, ph), size = threads / groups;
    if (ph) {
      indent(o);
      fprintf(o->f, "dl_grid_sync(%s);\n", m->phase_bar->name);
    }
    indent(o);
    fputs("{\n", o->f);
    o->depth++;
    indent(o);
    if (groups > 1) {
      fprintf(o->f, "const unsigned dl_gl = dl_lin %% %uu;\n", size);
      indent(o);
      fprintf(o->f,
              "for (unsigned dl_vb = blockIdx.x * %uu + dl_lin / %uu; dl_vb < %" PRIu64
              "u; dl_vb += gridDim.x * %uu) {\n",
              groups, size, blocks, groups);
    } else {
      fprintf(o->f, "for (unsigned dl_vb = blockIdx.x; dl_vb < %" PRIu64 "u; dl_vb += gridDim.x) {\n", blocks);
    }
    o->depth++;
    emit_parts_by_block(o, first, end, "dl_vb", groups > 1 ? "dl_gl" : "dl_lin", size);
    if (barriers) {
      indent(o);
      fputs("__syncthreads();\n", o->f);
    }
    o->depth--;
    indent(o);
    fputs("}\n", o->f);
    o->depth--;
    indent(o);
    fputs("}\n", o->f);
    first = end;
  }
}

/* The variables a statement of blk assigns after their declaration. */
static void find_reassigned(VarSet *set, const KBlock *blk) {
  for (const KStmt *s = blk->first; s; s = s->next) {
    if (s->kind == KS_SET || s->kind == KS_ALLREDUCE) var_add(set, s->var);
    find_reassigned(set, &s->body);
    find_reassigned(set, &s->orelse);
  }
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
  builtin_names(&o);
  find_reassigned(&o.reassigned, &k->body);
  for (int i = 0; i < k->n_parts; i++) find_reassigned(&o.reassigned, &k->parts[i]->body);
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].var && k->params[i].var->dtype == KT_INDEX && k->params[i].lo >= 0)
      var_add(&o.nonneg, k->params[i].var);
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
  /* wgmma's swizzled operands need their 512-byte patterns where the
   * hardware's address bits put them (docs/tensorcores.md) */
  if (k->dynamic_shared_bytes)
    fprintf(f, "  extern __shared__ __align__(%d) unsigned char dl_smem[];\n", k->uses_wgmma ? 1024 : 16);
  /* and a fault, not wrong numbers, should a toolchain not honour it */
  if (k->dynamic_shared_bytes && k->uses_wgmma)
    fputs("#ifdef DL_WGMMA\n  if (dl_smem_addr(dl_smem) % 1024) __trap();\n#endif\n", f);
  for (int i = 0; i < k->n_locals; i++) {
    const KBuf *b = k->locals[i];
    if (b->dynamic) {
      fprintf(f, "  %s *%s = (%s *)(dl_smem + %u);\n", ctype(k, b->dtype), b->name, ctype(k, b->dtype), b->offset);
      continue;
    }
    /* i8 tiles are read four bytes at a time (KE_PACK4), 16-bit ones
     * (the depthwise kernel's weights) in 16-byte vectors */
    const char *space = b->space != KSP_SHARED                                ? ""
                        : b->dtype == TY_I8 || ir_dtype_size(b->dtype) == 2 ? "__shared__ __align__(16) "
                                                                             : "__shared__ ";
    const char *type = b->space == KSP_FRAGMENT ? "unsigned" : ctype(k, b->dtype);
    fprintf(f, "  %s%s %s[%" PRId64 "];\n", space, type, b->name, b->numel);
  }
  if (k->n_phases)
    chained_phases(&o);
  else if (k->n_parts)
    merged_parts(&o);
  else
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
  free(o.nonneg.slot);
  free(o.reassigned.slot);
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
