/* CUDA's built-ins for the host compiler: the emu device compiles a plan's
 * CUDA C text with `c++ -x c++ -DDLCC_EMU -include dlcc_emu.h`, so the very
 * same kernels the GPU runs become a shared object the CPU can call.
 *
 * Two parts.  The C part (the ABI below) is also read by runtime/emu.c and
 * runtime/emu_gemm.c: the environment the scheduler fills before each
 * thread runs, and the bit-exact float <-> f16/bf16 conversions.  The C++
 * part gives kernels threadIdx and friends, __shared__, barriers, warp
 * shuffles, atomics, math, the half types, and the tensor-core
 * instructions (mma, ldmatrix, cp.async) from the PTX ISA.
 *
 * How CUDA maps here.  A block's threads run one after another on one OS
 * thread (as fibers when the kernel synchronizes), blocks one at a time.
 * So __shared__ is `thread_local`: every thread of the block (all fibers of
 * one OS thread) sees one copy, and two OS threads launching at once do not
 * share it.  Atomics are plain read-modify-writes: fibers only switch at
 * barriers.  Dynamic shared memory, `extern __shared__ T name[];`, is
 * defined by the runtime in a second translation unit (227 KiB, the most
 * a block can have).  A cooperative launch (a kernel with the grid
 * barrier dl_grid_sync) has every block's fibers alive at once; blocks
 * take turns between grid barriers, and the runtime saves and restores
 * this module's thread-local block (so each block's shared memory) as it
 * switches (dlcc_emu_tls_range). */
#ifndef DLCC_EMU_H
#define DLCC_EMU_H

#include <stdint.h>
#include <string.h>

/* ---- ABI with the runtime (plain C) ---------------------------------- */

/* Bumped whenever DlccEmuEnv or the exported entry points change: a
 * module compiled against another header is refused, not misread. */
#define DLCC_EMU_ABI 4

typedef struct DlccEmuDim3 {
  unsigned int x, y, z;
} DlccEmuDim3;

enum { DLCC_EMU_WARP_SHFL, DLCC_EMU_WARP_BALLOT, DLCC_EMU_WARP_ALL };

/* One warp-collective instruction (mma.sync, ldmatrix: .sync.aligned) at
 * one call site, as the header hands it to the runtime. */
typedef struct DlccEmuCollective {
  const char *name;  /* "dl_mma_f16" */
  unsigned int line; /* of the call, in the kernel source */
  /* Runs once, on the last lane to arrive, with every lane's operands and
   * result slots, by lane.  Returns -1, or the lane whose operands are
   * invalid with the reason in why. */
  int (*run)(const void *const in[32], void *const out[32], char *why, unsigned int len);
} DlccEmuCollective;

typedef struct DlccEmuEnv DlccEmuEnv;
struct DlccEmuEnv {
  DlccEmuDim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned int lane;       /* linear thread index % 32 */
  unsigned int warp_lanes; /* bit i: lane i of this thread's warp exists */
  void (*syncthreads)(DlccEmuEnv *e);
  void (*syncwarp)(DlccEmuEnv *e, unsigned int mask);
  /* Every lane of `mask` passes `value`.  SHFL: returns the value lane
   * `src` passed, or `value` itself when src < 0 or that lane took no
   * part.  BALLOT: bit i set when lane i passed nonzero.  ALL: 1 when
   * every taking part passed nonzero. */
  uint64_t (*warp_exchange)(DlccEmuEnv *e, unsigned int mask, uint64_t value, int src, int kind);
  /* __trap(), a failed assert: ends the launch with `what`; never returns. */
  void (*trap)(DlccEmuEnv *e, const char *what);
  /* All 32 lanes of the warp call it at the same op (name, line, run),
   * each with its operands and result slots; it returns once op->run has
   * filled every lane's.  A lane missing, exited or at another warp
   * operation ends the launch with an error instead. */
  void (*warp_collective)(DlccEmuEnv *e, const DlccEmuCollective *op, const void *in, void *out);
  /* cp.async: queues a copy of src_bytes from src to dst and zeros to
   * size; commit closes the thread's open group; wait completes, oldest
   * first, every committed group but the n most recent. */
  void (*cp_async)(DlccEmuEnv *e, void *dst, const void *src, unsigned int size, unsigned int src_bytes);
  void (*cp_async_commit)(DlccEmuEnv *e);
  void (*cp_async_wait)(DlccEmuEnv *e, unsigned int n);
  /* dl_grid_sync (ABI 3): returns once every thread of every block of the
   * cooperative launch has called it; shared memory stays the block's. */
  void (*grid_sync)(DlccEmuEnv *e);
  /* wgmma (ABI 4): fence marks the thread fenced; op queues run(arg)
   * (size bytes of arg copied) in the thread's open group, and fails
   * naming name and line when the thread has not fenced since its last
   * commit; commit closes the open group (an empty one too); wait runs,
   * oldest first, the ops of every committed group but the n most
   * recent, each in the calling thread. */
  void (*wg_fence)(DlccEmuEnv *e);
  void (*wg_op)(DlccEmuEnv *e, void (*run)(const void *arg), const void *arg, unsigned int size, const char *name,
                unsigned int line);
  void (*wg_commit)(DlccEmuEnv *e);
  void (*wg_wait)(DlccEmuEnv *e, unsigned int n);
  void *sched; /* the runtime's */
};

/* Round to nearest even, overflow to inf, NaN to CUDA's canonical 0x7fff:
 * the same bits cvt.rn.f16.f32 gives on the GPU. */
static inline uint16_t dlcc_emu_f32_to_f16(float f) {
  uint32_t x, ax, sign, r, rem;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fffu;
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 */
  if (ax < 0x38800000u) {                                   /* below 2^-14: subnormal */
    uint32_t m, shift, half;
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25 ties to 0 */
    m = (ax & 0x7fffffu) | 0x800000u;
    shift = 126u - (ax >> 23); /* 14..24 */
    r = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  r = (ax >> 13) - (112u << 10);
  rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

/* cvt.rna.tf32.f32: to 10 fraction bits, nearest with ties away from zero
 * (half an ulp added to the magnitude, then truncated), NaN stays NaN;
 * the bits, as a .b32.  dl_tf32 in kernels, emu_gemm.c's tf32 gemms. */
static inline uint32_t dlcc_emu_tf32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffffffu;
  return (u + 0x1000u) & 0xffffe000u;
}

static inline float dlcc_emu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  float f;
  if (e == 0x1fu) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -f : f;
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

static inline uint16_t dlcc_emu_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline float dlcc_emu_bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* double -> float rounding to odd: rounding that once more to f16 or bf16
 * (at most 22 bits) gives the correctly rounded result, which double ->
 * float -> half with two nearest-even roundings does not. */
static inline float dlcc_emu_f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    uint32_t u;
    double ad = d < 0 ? -d : d, af = f < 0 ? -(double)f : (double)f;
    memcpy(&u, &f, 4);
    if (!(u & 1u)) {
      u = ad > af ? u + 1u : u - 1u;
      memcpy(&f, &u, 4);
    }
  }
  return f;
}

/* A 64-bit integer as a double rounded to odd (exact below 2^53): the
 * same single rounding to f16 or bf16 as from the integer itself. */
static inline double dlcc_emu_u64_to_f64_odd(uint64_t m) {
  int s = 0;
  uint64_t top;
  while ((m >> s) >= ((uint64_t)1 << 53)) s++;
  top = m >> s;
  if (s && (m & (((uint64_t)1 << s) - 1u))) top |= 1u;
  return (double)top * (double)((uint64_t)1 << s); /* s <= 11: exact */
}

static inline double dlcc_emu_i64_to_f64_odd(int64_t v) {
  double d = dlcc_emu_u64_to_f64_odd(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
  return v < 0 ? -d : d;
}

static inline uint16_t dlcc_emu_f64_to_f16(double d) {
  return dlcc_emu_f32_to_f16(dlcc_emu_f64_to_f32_odd(d));
}

static inline uint16_t dlcc_emu_f64_to_bf16(double d) {
  return dlcc_emu_f32_to_bf16(dlcc_emu_f64_to_f32_odd(d));
}

#ifdef __cplusplus
/* ---- the CUDA dialect (C++ only) -------------------------------------- */

#include <float.h>
#include <limits.h>
#include <link.h> /* dl_iterate_phdr: where shared memory lies (tensor-core checks) */
#include <math.h> /* C++'s: float overloads of exp, sqrt... in the global namespace */
#include <stdarg.h>
#include <stdio.h>

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __shared__ thread_local

static thread_local DlccEmuEnv *__dlcc_env;

extern "C" __attribute__((visibility("default"), used, weak)) unsigned dlcc_emu_abi(void) {
  return DLCC_EMU_ABI;
}
extern "C" __attribute__((visibility("default"), used, weak)) void dlcc_emu_set_env(DlccEmuEnv *e) {
  __dlcc_env = e;
}

/* ---- built-in variables and vector types ---- */

typedef DlccEmuDim3 uint3;
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define threadIdx (__dlcc_env->thread_idx)
#define blockIdx (__dlcc_env->block_idx)
#define blockDim (__dlcc_env->block_dim)
#define gridDim (__dlcc_env->grid_dim)
constexpr int warpSize = 32;

#define DLCC_EMU_VEC2(T, N, A) \
  struct __attribute__((aligned(A))) N { T x, y; }; \
  static inline N make_##N(T x, T y) { return N{x, y}; }
#define DLCC_EMU_VEC3(T, N) \
  struct N { T x, y, z; }; \
  static inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define DLCC_EMU_VEC4(T, N, A) \
  struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
  static inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
DLCC_EMU_VEC2(float, float2, 8)
DLCC_EMU_VEC3(float, float3)
DLCC_EMU_VEC4(float, float4, 16)
DLCC_EMU_VEC2(double, double2, 16)
DLCC_EMU_VEC2(int, int2, 8)
DLCC_EMU_VEC3(int, int3)
DLCC_EMU_VEC4(int, int4, 16)
DLCC_EMU_VEC2(unsigned int, uint2, 8)
DLCC_EMU_VEC4(unsigned int, uint4, 16)
DLCC_EMU_VEC2(short, short2, 4)
DLCC_EMU_VEC2(unsigned short, ushort2, 4)
DLCC_EMU_VEC4(signed char, char4, 4)
DLCC_EMU_VEC4(unsigned char, uchar4, 4)
DLCC_EMU_VEC2(long long, longlong2, 16)
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

/* ---- synchronization ---- */

static inline void __syncthreads(void) { __dlcc_env->syncthreads(__dlcc_env); }
static inline void __syncwarp(unsigned int mask = 0xffffffffu) { __dlcc_env->syncwarp(__dlcc_env, mask); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}
static inline void __threadfence_system(void) {}
static inline unsigned int __activemask(void) { return __dlcc_env->warp_lanes; }
static inline void __trap(void) { __dlcc_env->trap(__dlcc_env, "__trap() called"); }
#define DLCC_EMU_STR2(x) #x
#define DLCC_EMU_STR(x) DLCC_EMU_STR2(x)
#undef assert
#define assert(e) \
  ((e) ? (void)0 : __dlcc_env->trap(__dlcc_env, __FILE__ ":" DLCC_EMU_STR(__LINE__) ": assertion failed: " #e))

template <class T> static inline T __dlcc_warp(unsigned int mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  u = __dlcc_env->warp_exchange(__dlcc_env, mask, u, src, DLCC_EMU_WARP_SHFL);
  T r;
  memcpy(&r, &u, sizeof r);
  return r;
}

/* Lane arithmetic as the CUDA programming guide gives it for width < 32. */
template <class T> static inline T __shfl_sync(unsigned int mask, T var, int srcLane, int width = warpSize) {
  int lane = (int)__dlcc_env->lane;
  return __dlcc_warp(mask, var, (lane & ~(width - 1)) + (srcLane & (width - 1)));
}
template <class T> static inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  int lane = (int)__dlcc_env->lane;
  int src = (unsigned int)(lane & (width - 1)) < delta ? -1 : lane - (int)delta;
  return __dlcc_warp(mask, var, src);
}
template <class T> static inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  int lane = (int)__dlcc_env->lane;
  int src = (unsigned int)(lane & (width - 1)) + delta >= (unsigned int)width ? -1 : lane + (int)delta;
  return __dlcc_warp(mask, var, src);
}
template <class T> static inline T __shfl_xor_sync(unsigned int mask, T var, int laneMask, int width = warpSize) {
  int lane = (int)__dlcc_env->lane;
  int src = lane ^ laneMask;
  if (src >= (lane & ~(width - 1)) + width) src = -1;
  return __dlcc_warp(mask, var, src);
}
static inline unsigned int __ballot_sync(unsigned int mask, int pred) {
  return (unsigned int)__dlcc_env->warp_exchange(__dlcc_env, mask, pred != 0, -1, DLCC_EMU_WARP_BALLOT);
}
static inline int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned int mask, int pred) {
  return (int)__dlcc_env->warp_exchange(__dlcc_env, mask, pred != 0, -1, DLCC_EMU_WARP_ALL);
}

/* ---- atomics: fibers never switch inside one, so plain RMW is atomic ---- */

#define DLCC_EMU_ATOMIC(NAME, T, EXPR) \
  static inline T NAME(T *p, T v) { \
    T old = *p; \
    *p = (EXPR); \
    return old; \
  }
DLCC_EMU_ATOMIC(atomicAdd, int, old + v)
DLCC_EMU_ATOMIC(atomicAdd, unsigned int, old + v)
DLCC_EMU_ATOMIC(atomicAdd, unsigned long long, old + v)
DLCC_EMU_ATOMIC(atomicAdd, float, old + v)
DLCC_EMU_ATOMIC(atomicAdd, double, old + v)
DLCC_EMU_ATOMIC(atomicSub, int, old - v)
DLCC_EMU_ATOMIC(atomicSub, unsigned int, old - v)
DLCC_EMU_ATOMIC(atomicExch, int, v)
DLCC_EMU_ATOMIC(atomicExch, unsigned int, v)
DLCC_EMU_ATOMIC(atomicExch, unsigned long long, v)
DLCC_EMU_ATOMIC(atomicExch, float, v)
DLCC_EMU_ATOMIC(atomicMax, int, old > v ? old : v)
DLCC_EMU_ATOMIC(atomicMax, unsigned int, old > v ? old : v)
DLCC_EMU_ATOMIC(atomicMax, long long, old > v ? old : v)
DLCC_EMU_ATOMIC(atomicMax, unsigned long long, old > v ? old : v)
DLCC_EMU_ATOMIC(atomicMin, int, old < v ? old : v)
DLCC_EMU_ATOMIC(atomicMin, unsigned int, old < v ? old : v)
DLCC_EMU_ATOMIC(atomicMin, long long, old < v ? old : v)
DLCC_EMU_ATOMIC(atomicMin, unsigned long long, old < v ? old : v)
DLCC_EMU_ATOMIC(atomicAnd, int, old & v)
DLCC_EMU_ATOMIC(atomicAnd, unsigned int, old & v)
DLCC_EMU_ATOMIC(atomicOr, int, old | v)
DLCC_EMU_ATOMIC(atomicOr, unsigned int, old | v)
DLCC_EMU_ATOMIC(atomicXor, int, old ^ v)
DLCC_EMU_ATOMIC(atomicXor, unsigned int, old ^ v)
DLCC_EMU_ATOMIC(atomicInc, unsigned int, old >= v ? 0u : old + 1u)
DLCC_EMU_ATOMIC(atomicDec, unsigned int, (old == 0u || old > v) ? v : old - 1u)
#define DLCC_EMU_ATOMIC_CAS(T) \
  static inline T atomicCAS(T *p, T compare, T val) { \
    T old = *p; \
    if (old == compare) *p = val; \
    return old; \
  }
DLCC_EMU_ATOMIC_CAS(int)
DLCC_EMU_ATOMIC_CAS(unsigned int)
DLCC_EMU_ATOMIC_CAS(unsigned long long)
DLCC_EMU_ATOMIC_CAS(unsigned short)

template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- math ---- */

#define DLCC_EMU_MINMAX(T) \
  static inline T min(T a, T b) { return a < b ? a : b; } \
  static inline T max(T a, T b) { return a > b ? a : b; }
DLCC_EMU_MINMAX(int)
DLCC_EMU_MINMAX(unsigned int)
DLCC_EMU_MINMAX(long)
DLCC_EMU_MINMAX(unsigned long)
DLCC_EMU_MINMAX(long long)
DLCC_EMU_MINMAX(unsigned long long)
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
/* glibc declares these very names for its own use: macros, not functions. */
#define __expf(x) expf(x)
#define __exp10f(x) powf(10.0f, (x))
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __powf(x, y) powf((x), (y))
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __tanhf(x) tanhf(x)
#define __sincosf(x, s, c) (*(s) = sinf(x), *(c) = cosf(x), (void)0)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; } /* NaN -> 0 */
static inline int __float2int_rn(float x) { return (int)rintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
static inline float __uint_as_float(unsigned int x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int x; memcpy(&x, &f, 4); return x; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline long long __double_as_longlong(double d) { long long x; memcpy(&x, &d, 8); return x; }
/* c + the four products of a's and b's signed bytes, wrapping in 32 bits as the GPU does. */
static inline int __dp4a(int a, int b, int c) {
  unsigned int s = (unsigned int)c;
  for (int i = 0; i < 32; i += 8) s += (unsigned int)((int)(signed char)(a >> i) * (int)(signed char)(b >> i));
  return (int)s;
}
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }

/* ---- __half and __nv_bfloat16: storage types, arithmetic through float
 * (exact: float has more than twice their precision), operators and
 * intrinsics named as in cuda_fp16.h / cuda_bf16.h. ---- */

typedef struct __half_raw { unsigned short x; } __half_raw;
typedef struct __nv_bfloat16_raw { unsigned short x; } __nv_bfloat16_raw;

#define DLCC_EMU_HALF_TYPE(H, RAW, TO_BITS, FROM_BITS, D_TO_BITS) \
  struct H { \
    unsigned short __x; \
    H() = default; \
    constexpr H(const RAW &r) : __x(r.x) {} \
    H(float f) : __x(TO_BITS(f)) {} \
    H(double d) : __x(D_TO_BITS(d)) {} \
    H(int i) : __x(D_TO_BITS((double)i)) {} \
    H(unsigned int i) : __x(D_TO_BITS((double)i)) {} \
    H(long i) : __x(D_TO_BITS(dlcc_emu_i64_to_f64_odd(i))) {} \
    H(unsigned long i) : __x(D_TO_BITS(dlcc_emu_u64_to_f64_odd(i))) {} \
    H(long long i) : __x(D_TO_BITS(dlcc_emu_i64_to_f64_odd(i))) {} \
    H(unsigned long long i) : __x(D_TO_BITS(dlcc_emu_u64_to_f64_odd(i))) {} \
    H(short i) : __x(TO_BITS((float)i)) {} \
    H(unsigned short i) : __x(TO_BITS((float)i)) {} \
    operator float() const { return FROM_BITS(__x); } \
    operator RAW() const { return RAW{__x}; } \
    H &operator+=(const H &o) { return *this = H(float(*this) + float(o)); } \
    H &operator-=(const H &o) { return *this = H(float(*this) - float(o)); } \
    H &operator*=(const H &o) { return *this = H(float(*this) * float(o)); } \
    H &operator/=(const H &o) { return *this = H(float(*this) / float(o)); } \
    H &operator++() { return *this += H(1.0f); } \
    H &operator--() { return *this -= H(1.0f); } \
    H operator++(int) { H t = *this; ++*this; return t; } \
    H operator--(int) { H t = *this; --*this; return t; } \
  }; \
  static inline H operator+(const H &a, const H &b) { return H(float(a) + float(b)); } \
  static inline H operator-(const H &a, const H &b) { return H(float(a) - float(b)); } \
  static inline H operator*(const H &a, const H &b) { return H(float(a) * float(b)); } \
  static inline H operator/(const H &a, const H &b) { return H(float(a) / float(b)); } \
  static inline H operator-(const H &a) { H r; r.__x = a.__x ^ 0x8000u; return r; } \
  static inline H operator+(const H &a) { return a; } \
  static inline bool operator==(const H &a, const H &b) { return float(a) == float(b); } \
  static inline bool operator!=(const H &a, const H &b) { return float(a) != float(b); } \
  static inline bool operator<(const H &a, const H &b) { return float(a) < float(b); } \
  static inline bool operator<=(const H &a, const H &b) { return float(a) <= float(b); } \
  static inline bool operator>(const H &a, const H &b) { return float(a) > float(b); } \
  static inline bool operator>=(const H &a, const H &b) { return float(a) >= float(b); } \
  static inline H __hadd(H a, H b) { return a + b; } \
  static inline H __hsub(H a, H b) { return a - b; } \
  static inline H __hmul(H a, H b) { return a * b; } \
  static inline H __hdiv(H a, H b) { return a / b; } \
  static inline H __hfma(H a, H b, H c) { return H(fma((double)float(a), (double)float(b), (double)float(c))); } \
  static inline H __hneg(H a) { return -a; } \
  static inline H __habs(H a) { H r; r.__x = a.__x & 0x7fffu; return r; } \
  static inline H __hmax(H a, H b) { return H(fmaxf(float(a), float(b))); } \
  static inline H __hmin(H a, H b) { return H(fminf(float(a), float(b))); } \
  static inline H __hmax_nan(H a, H b) { return isnan(float(a)) || isnan(float(b)) ? H(NAN) : __hmax(a, b); } \
  static inline H __hmin_nan(H a, H b) { return isnan(float(a)) || isnan(float(b)) ? H(NAN) : __hmin(a, b); } \
  static inline bool __heq(H a, H b) { return a == b; } \
  static inline bool __hne(H a, H b) { return a != b; } \
  static inline bool __hlt(H a, H b) { return a < b; } \
  static inline bool __hle(H a, H b) { return a <= b; } \
  static inline bool __hgt(H a, H b) { return a > b; } \
  static inline bool __hge(H a, H b) { return a >= b; } \
  static inline bool __hisnan(H a) { return isnan(float(a)); } \
  static inline int __hisinf(H a) { float f = float(a); return isinf(f) ? (f < 0 ? -1 : 1) : 0; } \
  static inline H hexp(H a) { return H(expf(float(a))); } \
  static inline H hexp2(H a) { return H(exp2f(float(a))); } \
  static inline H hlog(H a) { return H(logf(float(a))); } \
  static inline H hlog2(H a) { return H(log2f(float(a))); } \
  static inline H hsqrt(H a) { return H(sqrtf(float(a))); } \
  static inline H hrsqrt(H a) { return H(1.0f / sqrtf(float(a))); } \
  static inline H hrcp(H a) { return H(1.0f / float(a)); } \
  static inline H hsin(H a) { return H(sinf(float(a))); } \
  static inline H hcos(H a) { return H(cosf(float(a))); } \
  static inline H htanh(H a) { return H(tanhf(float(a))); } \
  static inline H hfloor(H a) { return H(floorf(float(a))); } \
  static inline H hceil(H a) { return H(ceilf(float(a))); } \
  static inline H htrunc(H a) { return H(truncf(float(a))); } \
  static inline H hrint(H a) { return H(rintf(float(a))); } \
  static inline H atomicAdd(H *p, H v) { H old = *p; *p = old + v; return old; }

DLCC_EMU_HALF_TYPE(__half, __half_raw, dlcc_emu_f32_to_f16, dlcc_emu_f16_to_f32, dlcc_emu_f64_to_f16)
DLCC_EMU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, dlcc_emu_f32_to_bf16, dlcc_emu_bf16_to_f32,
                   dlcc_emu_f64_to_bf16)

#define DLCC_EMU_HALF2_TYPE(H2, H) \
  struct __attribute__((aligned(4))) H2 { \
    H x, y; \
    H2() = default; \
    constexpr H2(H a, H b) : x(a), y(b) {} \
  }; \
  static inline H2 operator+(const H2 &a, const H2 &b) { return H2(a.x + b.x, a.y + b.y); } \
  static inline H2 operator-(const H2 &a, const H2 &b) { return H2(a.x - b.x, a.y - b.y); } \
  static inline H2 operator*(const H2 &a, const H2 &b) { return H2(a.x * b.x, a.y * b.y); } \
  static inline H2 operator/(const H2 &a, const H2 &b) { return H2(a.x / b.x, a.y / b.y); } \
  static inline H2 operator-(const H2 &a) { return H2(-a.x, -a.y); } \
  static inline H2 __hadd2(H2 a, H2 b) { return a + b; } \
  static inline H2 __hsub2(H2 a, H2 b) { return a - b; } \
  static inline H2 __hmul2(H2 a, H2 b) { return a * b; } \
  static inline H2 __h2div(H2 a, H2 b) { return a / b; } \
  static inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
  static inline H2 __hneg2(H2 a) { return -a; } \
  static inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); } \
  static inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); } \
  static inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); } \
  static inline H2 h2exp(H2 a) { return H2(hexp(a.x), hexp(a.y)); } \
  static inline H2 h2sqrt(H2 a) { return H2(hsqrt(a.x), hsqrt(a.y)); }

DLCC_EMU_HALF2_TYPE(__half2, __half)
DLCC_EMU_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16)

typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double d) { return __half(d); }
static inline float __half2float(__half h) { return float(h); }
static inline __half __int2half_rn(int i) { return __half(i); }
static inline __half __uint2half_rn(unsigned int i) { return __half(i); }
static inline __half __ll2half_rn(long long i) { return __half(i); }
static inline __half __ull2half_rn(unsigned long long i) { return __half(dlcc_emu_u64_to_f64_odd(i)); }
static inline int __half2int_rn(__half h) { return (int)rintf(float(h)); }
static inline int __half2int_rz(__half h) { return (int)float(h); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short x) { return __half(__half_raw{x}); }
static inline __half __short_as_half(short x) { return __half(__half_raw{(unsigned short)x}); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __float22half2_rn(float2 v) { return __half2(__half(v.x), __half(v.y)); }
static inline float2 __half22float2(__half2 h) { return make_float2(float(h.x), float(h.y)); }
static inline float __low2float(__half2 h) { return float(h.x); }
static inline float __high2float(__half2 h) { return float(h.y); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
static inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
static inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16(i); }
static inline __nv_bfloat16 __ll2bfloat16_rn(long long i) { return __nv_bfloat16(i); }
static inline __nv_bfloat16 __ull2bfloat16_rn(unsigned long long i) {
  return __nv_bfloat16(dlcc_emu_u64_to_f64_odd(i));
}
static inline int __bfloat162int_rz(__nv_bfloat16 h) { return (int)float(h); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16(__nv_bfloat16_raw{x}); }
static inline __nv_bfloat16 __short_as_bfloat16(short x) {
  return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)x});
}
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__nv_bfloat16(f), __nv_bfloat16(f)); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b));
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) {
  return __nv_bfloat162(__nv_bfloat16(v.x), __nv_bfloat16(v.y));
}
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(float(h.x), float(h.y)); }
static inline float __low2float(__nv_bfloat162 h) { return float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return float(h.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }

/* ---- tensor-core instructions, from the PTX ISA ----
 *
 * The functions codegen/emit_tc.c defines as inline PTX for the GPU,
 * written here from the PTX ISA's own tables and descriptions, not from
 * the code generator, so that a kernel that packs a fragment wrongly gets
 * a wrong answer here as it would on the GPU (docs/tensorcores.md).
 * mma and ldmatrix are warp-collective: each lane hands its registers to
 * the runtime's warp_collective, whose last lane to arrive computes every
 * lane's result at once.  Every check the GPU would fail on (or silently
 * get wrong) is an error naming the call's line. */

/* __shared__ is thread_local, so shared memory is this module's
 * thread-local block; dl_iterate_phdr says where it lies in this thread. */
static thread_local uintptr_t __dlcc_smem_lo, __dlcc_smem_hi;

static int __dlcc_find_tls(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uintptr_t self = (uintptr_t)&__dlcc_find_tls, tls = 0;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && self >= lo && self - lo < ph->p_memsz) mine = true;
    if (ph->p_type == PT_TLS) tls = ph->p_memsz;
  }
  if (!mine) return 0;
  uintptr_t *range = (uintptr_t *)data;
  range[0] = (uintptr_t)info->dlpi_tls_data;
  range[1] = range[0] + tls;
  return 1;
}

/* Whether [p, p + n) is shared memory. */
static inline bool __dlcc_in_smem(const void *p, size_t n) {
  if (!__dlcc_smem_hi) {
    uintptr_t range[2] = {0, 0};
    dl_iterate_phdr(__dlcc_find_tls, range);
    __dlcc_smem_lo = range[0], __dlcc_smem_hi = range[1];
  }
  uintptr_t a = (uintptr_t)p;
  return a >= __dlcc_smem_lo && a <= __dlcc_smem_hi && __dlcc_smem_hi - a >= n;
}

/* The whole thread-local block of this module in the calling thread:
 * every __shared__ variable, static and dynamic, lies in it. */
extern "C" __attribute__((visibility("default"), used, weak)) void dlcc_emu_tls_range(uintptr_t *lo, uintptr_t *hi) {
  __dlcc_in_smem(nullptr, 0);
  *lo = __dlcc_smem_lo, *hi = __dlcc_smem_hi;
}

/* The grid barrier: the scheduler's, not codegen's spin on a counter
 * (fibers switch only when told), so bar is not touched. */
static inline void dl_grid_sync(int *bar) {
  (void)bar;
  __dlcc_env->grid_sync(__dlcc_env);
}

static void __dlcc_tc_trap(unsigned int line, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void __dlcc_tc_trap(unsigned int line, const char *name, const char *fmt, ...) {
  char what[400], rest[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rest, sizeof rest, fmt, ap);
  va_end(ap);
  snprintf(what, sizeof what, "%s at line %u: %s", name, line, rest);
  __dlcc_env->trap(__dlcc_env, what);
  __builtin_unreachable();
}

/* __cvta_generic_to_shared: the offset in the shared window. */
static inline unsigned int dl_smem_addr(const void *p, unsigned int line = __builtin_LINE()) {
  if (!__dlcc_in_smem(p, 0)) __dlcc_tc_trap(line, "dl_smem_addr", "%p is not shared memory", p);
  return (unsigned int)((uintptr_t)p - __dlcc_smem_lo);
}

static inline unsigned int dl_tf32(float x) { return dlcc_emu_tf32_bits(x); }

/* cvt.rn.f16x2.f32 d, a, b and cvt.rn.bf16x2.f32: "For .f16x2 and .bf16x2
 * instruction type, two inputs a and b of .f32 type are converted into
 * .f16 or .bf16 type and the converted values are packed in the
 * destination register d, such that the value converted from input a is
 * stored in the upper half of d and the value converted from input b is
 * stored in the lower half of d"; .rn rounds to nearest even.  Here lo is
 * b, hi is a (codegen/emit_tc.c passes them so). */
static inline unsigned int dl_pack_f16x2(float lo, float hi) {
  return (unsigned int)dlcc_emu_f32_to_f16(lo) | (unsigned int)dlcc_emu_f32_to_f16(hi) << 16;
}
static inline unsigned int dl_pack_bf16x2(float lo, float hi) {
  return (unsigned int)dlcc_emu_f32_to_bf16(lo) | (unsigned int)dlcc_emu_f32_to_bf16(hi) << 16;
}

/* ---- mma.sync.aligned ----
 * Fragments, PTX ISA section "Matrix multiply-accumulate operation using
 * mma instruction", with groupID = %laneid >> 2, threadID_in_group =
 * %laneid % 4 (g and t below).  A register holds its elements "low to
 * high": element i of a packed register is bits [w*(i%n), w*(i%n)+w).
 *
 * "Matrix Fragments for mma.m16n8k16 with floating point type" (.f16 and
 * .bf16; A 16x16: a0..a7 in four .f16x2 registers, B 16x8: b0..b3 in two):
 *   A: row = g            for ai where 0 <= i < 2 || 4 <= i < 6
 *            g + 8        otherwise
 *      col = t * 2 + (i & 0x1)      for ai where i < 4
 *            t * 2 + (i & 0x1) + 8  for ai where i >= 4
 *   B: row = t * 2 + (i & 0x1)      for bi where i < 2
 *            t * 2 + (i & 0x1) + 8  for bi where i >= 2
 *      col = g
 * "Matrix Fragments for mma.m16n8k32" (.s8; A 16x32: a0..a15 in four .b32
 * registers, B 32x8: b0..b7 in two):
 *   A: row = g            for ai where 0 <= i < 4 || 8 <= i < 12
 *            g + 8        otherwise
 *      col = t * 4 + (i & 0x3)       for ai where i < 8
 *            t * 4 + (i & 0x3) + 16  for ai where i >= 8
 *   B: row = t * 4 + (i & 0x3)       for bi where i < 4
 *            t * 4 + (i & 0x3) + 16  for bi where i >= 4
 *      col = g
 * "Matrix Fragments for mma.m16n8k8" (.tf32; A 16x8: a0..a3, B 8x8: b0, b1,
 * one per .b32 register):
 *   A: row = g for a0 and a2, g + 8 for a1 and a3
 *      col = t for a0 and a1, t + 4 for a2 and a3
 *   B: row = t for b0, t + 4 for b1
 *      col = g
 * Accumulators C and D (all three shapes; c0..c3, one per register):
 *   row = g for ci where i < 2, g + 8 for ci where i >= 2
 *   col = t * 2 + (i & 0x1) */
enum { DLCC_EMU_MMA_F16, DLCC_EMU_MMA_BF16, DLCC_EMU_MMA_S8, DLCC_EMU_MMA_TF32 };

static inline void __dlcc_frag_a(int kind, unsigned int lane, int i, int *row, int *col) {
  int g = (int)(lane >> 2), t = (int)(lane % 4);
  if (kind == DLCC_EMU_MMA_S8) {
    *row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;
    *col = i < 8 ? t * 4 + (i & 0x3) : t * 4 + (i & 0x3) + 16;
  } else if (kind == DLCC_EMU_MMA_TF32) {
    *row = (i == 0 || i == 2) ? g : g + 8;
    *col = i < 2 ? t : t + 4;
  } else {
    *row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    *col = i < 4 ? t * 2 + (i & 0x1) : t * 2 + (i & 0x1) + 8;
  }
}

static inline void __dlcc_frag_b(int kind, unsigned int lane, int i, int *row, int *col) {
  int g = (int)(lane >> 2), t = (int)(lane % 4);
  if (kind == DLCC_EMU_MMA_S8)
    *row = i < 4 ? t * 4 + (i & 0x3) : t * 4 + (i & 0x3) + 16;
  else if (kind == DLCC_EMU_MMA_TF32)
    *row = i == 0 ? t : t + 4;
  else
    *row = i < 2 ? t * 2 + (i & 0x1) : t * 2 + (i & 0x1) + 8;
  *col = g;
}

static inline void __dlcc_frag_c(unsigned int lane, int i, int *row, int *col) {
  int g = (int)(lane >> 2), t = (int)(lane % 4);
  *row = i < 2 ? g : g + 8;
  *col = t * 2 + (i & 0x1);
}

/* Element i of registers holding elements of `bits` bits, low to high. */
static inline uint32_t __dlcc_elem(const uint32_t *regs, int i, int bits) {
  int per = 32 / bits;
  uint32_t r = regs[i / per] >> (bits * (i % per));
  return bits == 32 ? r : r & ((1u << bits) - 1u);
}

/* One multiplicand element as f32, exactly: f16, bf16, or tf32, of whose
 * .b32 the instruction uses the top 19 bits (sign, exponent, 10 fraction
 * bits), as cvt.rna.tf32.f32 leaves them. */
static inline float __dlcc_mma_value(int kind, uint32_t bits) {
  if (kind == DLCC_EMU_MMA_F16) return dlcc_emu_f16_to_f32((uint16_t)bits);
  if (kind == DLCC_EMU_MMA_BF16) return dlcc_emu_bf16_to_f32((uint16_t)bits);
  uint32_t u = bits & 0xffffe000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* What one lane brings to an mma: its A and B registers and C as bits. */
typedef struct DlccEmuMmaIn {
  uint32_t a[4], b[2], c[4];
} DlccEmuMmaIn;

/* D = A*B + C over the warp's fragments.  The ISA leaves the order and
 * rounding of the sum open ("accumulation ... with at least single
 * precision"); this takes k in ascending order from C, each exact
 * product (of two 11-bit or 8-bit significands, or an s8 pair) added with
 * one f32 rounding (fmaf), or in wrapping s32 (no .satfinite). */
template <int KIND> static int __dlcc_mma_run(const void *const in[32], void *const out[32], char *why, unsigned int len) {
  (void)why, (void)len;
  enum { K = KIND == DLCC_EMU_MMA_S8 ? 32 : KIND == DLCC_EMU_MMA_TF32 ? 8 : 16 };
  const int bits = KIND == DLCC_EMU_MMA_S8 ? 8 : KIND == DLCC_EMU_MMA_TF32 ? 32 : 16;
  const int n_a = 16 * K / 32, n_b = K * 8 / 32;
  float fa[16][K], fb[K][8], fd[16][8];
  int32_t ia[16][K], ib[K][8];
  uint32_t c[16][8], d[16][8];
  int row, col;
  for (unsigned int lane = 0; lane < 32; lane++) {
    const DlccEmuMmaIn *p = (const DlccEmuMmaIn *)in[lane];
    for (int i = 0; i < n_a; i++) {
      __dlcc_frag_a(KIND, lane, i, &row, &col);
      uint32_t e = __dlcc_elem(p->a, i, bits);
      if (KIND == DLCC_EMU_MMA_S8) ia[row][col] = (int8_t)e;
      else fa[row][col] = __dlcc_mma_value(KIND, e);
    }
    for (int i = 0; i < n_b; i++) {
      __dlcc_frag_b(KIND, lane, i, &row, &col);
      uint32_t e = __dlcc_elem(p->b, i, bits);
      if (KIND == DLCC_EMU_MMA_S8) ib[row][col] = (int8_t)e;
      else fb[row][col] = __dlcc_mma_value(KIND, e);
    }
    for (int i = 0; i < 4; i++) {
      __dlcc_frag_c(lane, i, &row, &col);
      c[row][col] = p->c[i];
    }
  }
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 8; n++) {
      if (KIND == DLCC_EMU_MMA_S8) {
        uint32_t acc = c[m][n];
        for (int k = 0; k < K; k++) acc += (uint32_t)(ia[m][k] * ib[k][n]);
        d[m][n] = acc;
      } else {
        float acc;
        memcpy(&acc, &c[m][n], 4);
        for (int k = 0; k < K; k++) acc = fmaf(fa[m][k], fb[k][n], acc);
        fd[m][n] = acc;
        memcpy(&d[m][n], &fd[m][n], 4);
      }
    }
  for (unsigned int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      __dlcc_frag_c(lane, i, &row, &col);
      ((uint32_t *)out[lane])[i] = d[row][col];
    }
  return -1;
}

/* The operands are copied first: d may be c. */
static inline void __dlcc_mma(const char *name, unsigned int line,
                              int (*run)(const void *const *, void *const *, char *, unsigned int), void *d,
                              const unsigned int a[4], const unsigned int b[2], const void *c) {
  const DlccEmuCollective op = {name, line, run};
  DlccEmuMmaIn in;
  uint32_t out[4];
  memcpy(in.a, a, sizeof in.a);
  memcpy(in.b, b, sizeof in.b);
  memcpy(in.c, c, sizeof in.c);
  __dlcc_env->warp_collective(__dlcc_env, &op, &in, out);
  memcpy(d, out, sizeof out);
}

static inline void dl_mma_f16(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                              unsigned int line = __builtin_LINE()) {
  __dlcc_mma("dl_mma_f16", line, __dlcc_mma_run<DLCC_EMU_MMA_F16>, d, a, b, c);
}
static inline void dl_mma_bf16(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                               unsigned int line = __builtin_LINE()) {
  __dlcc_mma("dl_mma_bf16", line, __dlcc_mma_run<DLCC_EMU_MMA_BF16>, d, a, b, c);
}
static inline void dl_mma_s8(int d[4], const unsigned int a[4], const unsigned int b[2], const int c[4],
                             unsigned int line = __builtin_LINE()) {
  __dlcc_mma("dl_mma_s8", line, __dlcc_mma_run<DLCC_EMU_MMA_S8>, d, a, b, c);
}
static inline void dl_mma_tf32(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                               unsigned int line = __builtin_LINE()) {
  __dlcc_mma("dl_mma_tf32", line, __dlcc_mma_run<DLCC_EMU_MMA_TF32>, d, a, b, c);
}

/* ---- ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 ----
 * PTX ISA, "Warp-level matrix load instruction: ldmatrix": "Each address
 * corresponds to the start of a matrix row.  Addresses addr0--addr7
 * correspond to the rows of the first matrix, addresses addr8--addr15 to
 * the rows of the second matrix, and so on" (threads 0-7 give addr0-7,
 * 8-15 addr8-15, ...).  "When reading 8x8 matrices, a group of four
 * consecutive threads loads 16 bytes.  The matrix addresses must be
 * naturally aligned accordingly."  "Each thread in a warp loads fragments
 * of a row, with thread 0 receiving the first fragment in its register r,
 * and so on.  A group of four threads loads an entire row of the matrix"
 * (its figure: lane L holds row L >> 2, columns 2 (L % 4) and 2 (L % 4) + 1,
 * low to high); "when .num = .x2, the elements of the second matrix are
 * loaded in the next destination register".  ".trans indicates that the
 * matrix is loaded in column-major format": lane L holds column L >> 2,
 * rows 2 (L % 4) and 2 (L % 4) + 1. */
template <int NUM, bool TRANS>
static int __dlcc_ldmatrix_run(const void *const in[32], void *const out[32], char *why, unsigned int len) {
  uint16_t m[NUM][8][8];
  for (unsigned int lane = 0; lane < 8 * NUM; lane++) {
    const void *p = *(const void *const *)in[lane];
    if ((uintptr_t)p % 16) {
      snprintf(why, len, "row address %p is not 16-byte aligned (a misaligned address on the GPU)", p);
      return (int)lane;
    }
    if (!__dlcc_in_smem(p, 16)) {
      snprintf(why, len, "row address %p is not shared memory", p);
      return (int)lane;
    }
    memcpy(m[lane / 8][lane % 8], p, 16);
  }
  for (unsigned int lane = 0; lane < 32; lane++) {
    unsigned int a = lane >> 2, b = 2 * (lane % 4);
    for (int j = 0; j < NUM; j++) {
      uint32_t lo = TRANS ? m[j][b][a] : m[j][a][b], hi = TRANS ? m[j][b + 1][a] : m[j][a][b + 1];
      ((uint32_t *)out[lane])[j] = lo | hi << 16;
    }
  }
  return -1;
}

template <int NUM, bool TRANS>
static inline void __dlcc_ldmatrix(const char *name, unsigned int line, unsigned int *r, const void *smem_row) {
  const DlccEmuCollective op = {name, line, __dlcc_ldmatrix_run<NUM, TRANS>};
  uint32_t out[NUM];
  __dlcc_env->warp_collective(__dlcc_env, &op, &smem_row, out);
  memcpy(r, out, sizeof out);
}

static inline void dl_ldmatrix_x1(unsigned int r[1], const void *smem_row, unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<1, false>("dl_ldmatrix_x1", line, r, smem_row);
}
static inline void dl_ldmatrix_x2(unsigned int r[2], const void *smem_row, unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<2, false>("dl_ldmatrix_x2", line, r, smem_row);
}
static inline void dl_ldmatrix_x4(unsigned int r[4], const void *smem_row, unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<4, false>("dl_ldmatrix_x4", line, r, smem_row);
}
static inline void dl_ldmatrix_x1_trans(unsigned int r[1], const void *smem_row,
                                        unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<1, true>("dl_ldmatrix_x1_trans", line, r, smem_row);
}
static inline void dl_ldmatrix_x2_trans(unsigned int r[2], const void *smem_row,
                                        unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<2, true>("dl_ldmatrix_x2_trans", line, r, smem_row);
}
static inline void dl_ldmatrix_x4_trans(unsigned int r[4], const void *smem_row,
                                        unsigned int line = __builtin_LINE()) {
  __dlcc_ldmatrix<4, true>("dl_ldmatrix_x4_trans", line, r, smem_row);
}

/* ---- cp.async ----
 * PTX ISA, "Data Movement and Conversion Instructions: cp.async": copies
 * cp-size bytes (4, 8, 16) from global [src] to shared [dst]; "src-size
 * represents the size of the data in bytes to be copied from src to dst
 * ... remaining bytes in destination dst are filled with zeros";
 * alignment as "Addresses as Operands" (naturally aligned).  The writes
 * "are visible to the thread that initiated the asynchronous copy
 * operation only after the cp.async-group completes": the runtime queues
 * the copy and performs it at the dl_cp_async_wait that retires its
 * group (cp.async.commit_group, cp.async.wait_group), not before, and
 * never at __syncthreads. */
static inline void __dlcc_cp_async(const char *name, unsigned int line, unsigned int size, void *smem,
                                   const void *gmem, unsigned int src_bytes) {
  if (src_bytes > size) __dlcc_tc_trap(line, name, "src_bytes %u is more than the %u bytes it copies", src_bytes, size);
  if ((uintptr_t)smem % size || (uintptr_t)gmem % size)
    __dlcc_tc_trap(line, name, "shared %p or global %p is not %u-byte aligned (a misaligned address on the GPU)", smem,
                   gmem, size);
  if (!__dlcc_in_smem(smem, size)) __dlcc_tc_trap(line, name, "destination %p is not shared memory", smem);
  if (src_bytes && __dlcc_in_smem(gmem, 1))
    __dlcc_tc_trap(line, name, "source %p is shared memory, not global", gmem);
  __dlcc_env->cp_async(__dlcc_env, smem, gmem, size, src_bytes);
}

static inline void dl_cp_async16(void *smem, const void *gmem, unsigned int src_bytes,
                                 unsigned int line = __builtin_LINE()) {
  __dlcc_cp_async("dl_cp_async16", line, 16, smem, gmem, src_bytes);
}
static inline void dl_cp_async8(void *smem, const void *gmem, unsigned int src_bytes,
                                unsigned int line = __builtin_LINE()) {
  __dlcc_cp_async("dl_cp_async8", line, 8, smem, gmem, src_bytes);
}
static inline void dl_cp_async4(void *smem, const void *gmem, unsigned int src_bytes,
                                unsigned int line = __builtin_LINE()) {
  __dlcc_cp_async("dl_cp_async4", line, 4, smem, gmem, src_bytes);
}
/* "cp.async.commit_group": it "creates a new cp.async-group per thread and
 * batches all prior cp.async instructions initiated by the executing
 * thread but not committed to any cp.async-group into the new
 * cp.async-group.  If there are no uncommitted cp.async instructions then
 * cp.async.commit_group results in an empty cp.async-group."
 * "cp.async.wait_group / cp.async.wait_all": it "will cause executing
 * thread to wait till only N or fewer of the most recent cp.async-groups
 * are pending and all the prior cp.async-groups committed by the executing
 * threads are complete"; "an empty cp.async-group is considered to be
 * trivially complete". */
static inline void dl_cp_async_commit(void) { __dlcc_env->cp_async_commit(__dlcc_env); }
template <int N> static inline void dl_cp_async_wait(void) {
  static_assert(N >= 0, "cp.async.wait_group takes a count of groups, 0 or more");
  __dlcc_env->cp_async_wait(__dlcc_env, (unsigned int)N);
}

/* ---- wgmma (sm_90a) ----
 * PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
 * Instructions".  What dlcc uses: A and B both in shared memory through
 * matrix descriptors, both K-major (imm-trans-a/b 0, imm-scale 1), D in
 * registers: .f16 and .bf16 (m64nNk16, f32 D), .tf32 (m64nNk8, f32 D),
 * .s8 (m64nNk32, s32 D, wrapping).  One instruction reads 32 bytes of K
 * of each of A's 64 rows and B's N rows.
 *
 * "Matrix Descriptor Format": bits 0-13 the start address, 16-29 the
 * leading dimension byte offset (LBO), 32-45 the stride dimension byte
 * offset (SBO), each encoded as (x & 0x3FFFF) >> 4; 49-51 the base
 * offset; 62-63 the swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3
 * 32-byte.  "The value of base offset is 0 when the repeating pattern of
 * the specified swizzling mode starts" at a 1024-, 512- or 256-byte
 * boundary (8 rows of S bytes).
 *
 * "Shared Memory Matrix Layout", K-major, row r (of A's M or B's N), byte
 * kb (0..31) of the instruction's K:
 *   none ("8x1" atoms of 16-byte elements): core matrices of 8 rows of 16
 *     bytes, 16 bytes apart; the next 8 rows at SBO, the next 16 bytes of
 *     K at LBO:  start + (r / 8) SBO + (r % 8) 16 + (kb / 16) LBO + kb % 16
 *   S-byte swizzle ("8x2", "8x4", "8x8" atoms): rows S bytes apart, the
 *     next 8 rows at SBO, LBO "not used" for K-major:
 *     a = start + (r / 8) SBO + (r % 8) S + kb, its 16-byte chunk XORed
 *     with its 128-byte line in the pattern, a ^ ((a >> 7) % (S / 16)) << 4
 *     (bits 4.. with bits 7..; 1, 2 or 3 of them).
 * The emu reads the XOR off the address, so it asks what makes that
 * reading certain: base offset 0, start at most S - 32 bytes into its
 * pattern (a tile aligned to 8 S plus K's offset in the row) and SBO a
 * multiple of 8 S.
 *
 * The accumulators ("Register fragment layout for accumulator matrix D",
 * m64nN): warp w of the warpgroup holds rows 16 w .. 16 w + 15, each 8
 * columns as mma's m16n8 C: d[i], i < N / 2, is row 16 w + g + 8 ((i % 4) /
 * 2), column 8 (i / 4) + 2 t + i % 2 (g = lane >> 2, t = lane % 4).
 *
 * wgmma.mma_async is asynchronous: it "is performed by the warpgroup
 * asynchronously" and its registers and shared memory may not be touched
 * before "wgmma.wait_group" retires its group ("wgmma.commit_group"
 * batches the uncommitted ones).  So here each thread's operation waits
 * in the runtime's queue and computes that thread's accumulators at the
 * wait, from shared memory as it is then: a kernel that reads the
 * accumulators early or overwrites a tile still in use gets wrong
 * numbers, as it may on the GPU.  fence.proxy.async (shared memory
 * written by ordinary stores or cp.async, read by wgmma) cannot be
 * checked here; docs/tensorcores.md says where kernels need it. */
enum { DLCC_EMU_WG_F16, DLCC_EMU_WG_BF16, DLCC_EMU_WG_TF32, DLCC_EMU_WG_S8 };
enum { DLCC_EMU_WGMMA_MAX_N = 256 }; /* codegen's CG_WGMMA_MAX_N */

typedef struct __DlccWgOp {
  unsigned long long da, db;
  void *d;
  const char *name;
  unsigned int line, wg_thread;
  int kind, n, accumulate;
} __DlccWgOp;

/* As the GPU's, except that here shared memory is the module's whole
 * thread-local block, every kernel's __shared__ and the dynamic buffer,
 * whose offsets may pass the 256 KiB the 14-bit start field reaches: the
 * emu keeps the start's bits 18.. in bits 52-61, which the GPU's leave 0. */
static inline unsigned long long dl_wgmma_desc(unsigned int smem_addr, unsigned int lbo, unsigned int sbo,
                                               unsigned int swizzle_bytes) {
  unsigned long long mode = swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 3 : 0;
  return (unsigned long long)((smem_addr & 0x3ffffu) >> 4) | (unsigned long long)((lbo & 0x3ffffu) >> 4) << 16 |
         (unsigned long long)((sbo & 0x3ffffu) >> 4) << 32 | (unsigned long long)(smem_addr >> 18 & 0x3ffu) << 52 |
         mode << 62;
}

static inline unsigned int __dlcc_wg_start(unsigned long long desc) {
  return (unsigned int)((desc & 0x3fff) | (desc >> 52 & 0x3ff) << 14) << 4;
}

/* The S of a descriptor's swizzle mode, 0 for none. */
static inline unsigned int __dlcc_wg_swizzle(unsigned long long desc) {
  static const unsigned int bytes[4] = {0, 128, 64, 32};
  return bytes[desc >> 62];
}

/* What the hardware would read wrongly, or the emu could not read as it
 * does: an error naming the call. */
static inline void __dlcc_wg_check_desc(const char *name, unsigned int line, const char *which,
                                        unsigned long long desc) {
  unsigned int start = __dlcc_wg_start(desc), sbo = (unsigned int)(desc >> 32 & 0x3fff) << 4;
  unsigned int S = __dlcc_wg_swizzle(desc);
  if (!S) return;
  if (desc >> 49 & 7)
    __dlcc_tc_trap(line, name, "%s's descriptor has base offset %u: the emu models 0 (a pattern-aligned tile)", which,
                   (unsigned int)(desc >> 49 & 7));
  if (start % (8 * S) + 32 > S)
    __dlcc_tc_trap(line, name,
                   "%s starts %u bytes into its %u-byte swizzle pattern: with base offset 0 a %u-byte swizzled operand "
                   "starts at a multiple of %u bytes plus at most %u bytes along K",
                   which, start % (8 * S), 8 * S, S, 8 * S, S - 32);
  if (sbo % (8 * S))
    __dlcc_tc_trap(line, name, "%s's stride byte offset %u is no multiple of its %u-byte swizzle pattern", which, sbo,
                   8 * S);
}

/* Byte kb of K in row r of the operand desc describes. */
static inline const unsigned char *__dlcc_wg_elem(const __DlccWgOp *op, const char *which, unsigned long long desc,
                                                  unsigned int r, unsigned int kb, unsigned int size) {
  unsigned int start = __dlcc_wg_start(desc), lbo = (unsigned int)(desc >> 16 & 0x3fff) << 4,
               sbo = (unsigned int)(desc >> 32 & 0x3fff) << 4, S = __dlcc_wg_swizzle(desc), a;
  if (!S) {
    a = start + r / 8 * sbo + r % 8 * 16 + kb / 16 * lbo + kb % 16;
  } else {
    a = start + r / 8 * sbo + r % 8 * S + kb;
    a ^= (a >> 7) % (S / 16) << 4;
  }
  const unsigned char *p = (const unsigned char *)(__dlcc_smem_lo + a);
  if (!__dlcc_in_smem(p, size))
    __dlcc_tc_trap(op->line, op->name, "%s's row %u, byte %u of K is at shared offset %u, past shared memory", which,
                   r, kb, a);
  return p;
}

static inline float __dlcc_wg_value(int kind, const unsigned char *p) {
  uint16_t h;
  uint32_t u;
  float f;
  switch (kind) {
  case DLCC_EMU_WG_F16: memcpy(&h, p, 2); return dlcc_emu_f16_to_f32(h);
  case DLCC_EMU_WG_BF16: memcpy(&h, p, 2); return dlcc_emu_bf16_to_f32(h);
  default: /* tf32: the top 19 bits of the .b32, as mma's */
    memcpy(&u, p, 4);
    u &= 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
  }
}

/* The calling thread's accumulators, at its wait.  The sum's order is
 * the ISA's to choose; this takes k ascending from D (or 0), each exact
 * product added with one f32 rounding, or in wrapping s32.  A thread's
 * N/2 accumulators lie in 2 rows of A and N/4 columns (rows of B), read
 * once each. */
static void __dlcc_wgmma_run(const void *arg) {
  const __DlccWgOp *op = (const __DlccWgOp *)arg;
  unsigned int w = op->wg_thread / 32, lane = op->wg_thread % 32, g = lane >> 2, t = lane % 4;
  unsigned int size = op->kind == DLCC_EMU_WG_S8 ? 1 : op->kind == DLCC_EMU_WG_TF32 ? 4 : 2, K = 32 / size;
  union {
    float f;
    int32_t i;
  } a[2][32], b[DLCC_EMU_WGMMA_MAX_N / 4][32]; /* rows of A, columns; k */
  for (unsigned int h = 0; h < 2; h++)
    for (unsigned int k = 0; k < K; k++) {
      const unsigned char *p = __dlcc_wg_elem(op, "A", op->da, 16 * w + g + 8 * h, k * size, size);
      if (op->kind == DLCC_EMU_WG_S8) a[h][k].i = (int8_t)*p;
      else a[h][k].f = __dlcc_wg_value(op->kind, p);
    }
  for (unsigned int c = 0; c < (unsigned int)op->n / 4; c++) /* column 8 (c / 2) + 2 t + c % 2 */
    for (unsigned int k = 0; k < K; k++) {
      const unsigned char *p = __dlcc_wg_elem(op, "B", op->db, 8 * (c / 2) + 2 * t + c % 2, k * size, size);
      if (op->kind == DLCC_EMU_WG_S8) b[c][k].i = (int8_t)*p;
      else b[c][k].f = __dlcc_wg_value(op->kind, p);
    }
  for (int i = 0; i < op->n / 2; i++) {
    unsigned int h = (unsigned int)(i % 4) / 2, c = 2 * (unsigned int)(i / 4) + i % 2;
    if (op->kind == DLCC_EMU_WG_S8) {
      int32_t *d = (int32_t *)op->d;
      uint32_t acc = op->accumulate ? (uint32_t)d[i] : 0;
      for (unsigned int k = 0; k < K; k++) acc += (uint32_t)(a[h][k].i * b[c][k].i);
      memcpy(&d[i], &acc, 4);
    } else {
      float *d = (float *)op->d, acc = op->accumulate ? d[i] : 0.0f;
      for (unsigned int k = 0; k < K; k++) acc = fmaf(a[h][k].f, b[c][k].f, acc);
      d[i] = acc;
    }
  }
}

/* What a lane brings to a warpgroup instruction, to check that its warp
 * agrees (.sync.aligned: the same descriptors and scale-d everywhere). */
typedef struct __DlccWgUniform {
  unsigned long long da, db;
  int accumulate;
} __DlccWgUniform;

static int __dlcc_wg_uniform_run(const void *const in[32], void *const out[32], char *why, unsigned int len) {
  (void)out;
  const __DlccWgUniform *l0 = (const __DlccWgUniform *)in[0];
  for (unsigned int lane = 1; lane < 32; lane++) {
    const __DlccWgUniform *l = (const __DlccWgUniform *)in[lane];
    if (l->da != l0->da || l->db != l0->db || (l->accumulate != 0) != (l0->accumulate != 0)) {
      snprintf(why, len, "its descriptors or scale-d (%#llx, %#llx, %d) differ from lane 0's (%#llx, %#llx, %d)",
               l->da, l->db, l->accumulate, l0->da, l0->db, l0->accumulate);
      return (int)lane;
    }
  }
  return -1;
}

/* A warpgroup is 4 whole warps: the block's threads a multiple of 128. */
static inline void __dlcc_wg_collective(const char *name, unsigned int line, const __DlccWgUniform *u) {
  unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
  if (threads % 128)
    __dlcc_tc_trap(line, name, "needs whole warpgroups (128 threads), but the block has %u threads", threads);
  const DlccEmuCollective op = {name, line, __dlcc_wg_uniform_run};
  __dlcc_env->warp_collective(__dlcc_env, &op, u, nullptr);
}

static inline void __dlcc_wgmma(const char *name, unsigned int line, int kind, int n, void *d, unsigned long long da,
                                unsigned long long db, int accumulate) {
  const __DlccWgUniform u = {da, db, accumulate};
  __dlcc_wg_collective(name, line, &u);
  __dlcc_wg_check_desc(name, line, "A", da);
  __dlcc_wg_check_desc(name, line, "B", db);
  unsigned int linear = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const __DlccWgOp op = {da, db, d, name, line, linear % 128, kind, n, accumulate};
  __dlcc_env->wg_op(__dlcc_env, __dlcc_wgmma_run, &op, sizeof op, name, line);
}

static inline void dl_wgmma_fence(unsigned int line = __builtin_LINE()) {
  const __DlccWgUniform u = {0, 0, 0};
  __dlcc_wg_collective("dl_wgmma_fence", line, &u);
  __dlcc_env->wg_fence(__dlcc_env);
}
static inline void dl_wgmma_commit(unsigned int line = __builtin_LINE()) {
  const __DlccWgUniform u = {0, 0, 0};
  __dlcc_wg_collective("dl_wgmma_commit", line, &u);
  __dlcc_env->wg_commit(__dlcc_env);
}
template <int N> static inline void dl_wgmma_wait(unsigned int line = __builtin_LINE()) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0 to 7");
  const __DlccWgUniform u = {0, 0, 0};
  __dlcc_wg_collective("dl_wgmma_wait", line, &u);
  __dlcc_env->wg_wait(__dlcc_env, (unsigned int)N);
}
/* Orders the compiler's use of an accumulator register against the
 * asynchronous instruction on the GPU; nothing to do here. */
static inline void dl_wgmma_fence_operand(float &r) { (void)r; }
static inline void dl_wgmma_fence_operand(int &r) { (void)r; }
static inline void dl_fence_proxy_async(void) {}

#define DLCC_EMU_WGMMA(NAME, KIND, N, T) \
  static inline void NAME(T d[N / 2], unsigned long long desc_a, unsigned long long desc_b, int accumulate, \
                          unsigned int line = __builtin_LINE()) { \
    __dlcc_wgmma(#NAME, line, KIND, N, d, desc_a, desc_b, accumulate); \
  }
#define DLCC_EMU_WGMMA_NS(TY, KIND, T) \
  DLCC_EMU_WGMMA(dl_wgmma_##TY##_n16, KIND, 16, T) \
  DLCC_EMU_WGMMA(dl_wgmma_##TY##_n32, KIND, 32, T) \
  DLCC_EMU_WGMMA(dl_wgmma_##TY##_n64, KIND, 64, T) \
  DLCC_EMU_WGMMA(dl_wgmma_##TY##_n128, KIND, 128, T) \
  DLCC_EMU_WGMMA(dl_wgmma_##TY##_n256, KIND, 256, T)
DLCC_EMU_WGMMA_NS(f16, DLCC_EMU_WG_F16, float)
DLCC_EMU_WGMMA_NS(bf16, DLCC_EMU_WG_BF16, float)
DLCC_EMU_WGMMA_NS(tf32, DLCC_EMU_WG_TF32, float)
DLCC_EMU_WGMMA_NS(s8, DLCC_EMU_WG_S8, int)
#undef DLCC_EMU_WGMMA_NS
#undef DLCC_EMU_WGMMA

#endif /* __cplusplus */
#endif
