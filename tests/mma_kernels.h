/* The tensor-core test kernels, shared by tests/test_mma.c (emu against a
 * plain GEMM, errors, NVRTC) and tests/gpu/rt_check.c (the GPU against
 * the emu): CUDA text to follow cg_tc_prelude(), its kernels, and their
 * RtKernel table. */
#ifndef DLCC_TESTS_MMA_KERNELS_H
#define DLCC_TESTS_MMA_KERNELS_H

#include "runtime/plan.h"

/* The kernels, after the prelude.  Matrices are row-major; halves travel
 * as their bits (unsigned short).  "@name" comments mark lines that
 * errors must name. */
/* clang-format off */
static const char MMA_KERNELS[] =
    "#define PACK2(lo, hi) ((unsigned)(lo) | (unsigned)(hi) << 16)\n"
    /* m16n8k16: A 16xK, B Kx8, C and D 16x8, fragments as \"Matrix Fragments
     * for mma.m16n8k16 with floating point type\" says.  wrong: 1 swaps
     * rows g and g + 8 of A, 2 the two halves of each A register, 3 reads
     * B's fragment transposed. */
    "extern \"C\" __global__ void mma16816(int bf16, const unsigned short *A, const unsigned short *B,\n"
    "                                      const float *C, float *D, int K, int wrong) {\n"
    "  int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;\n"
    "  float acc[4];\n"
    "  for (int i = 0; i < 4; i++) acc[i] = C[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];\n"
    "  for (int k0 = 0; k0 < K; k0 += 16) {\n"
    "    unsigned a[4], b[2];\n"
    "    for (int r = 0; r < 4; r++) {\n"
    "      int i = 2 * r;\n"
    "      int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = k0 + (i < 4 ? t * 2 : t * 2 + 8);\n"
    "      if (wrong == 1) row ^= 8;\n"
    "      a[r] = wrong == 2 ? PACK2(A[row * K + col + 1], A[row * K + col])\n"
    "                        : PACK2(A[row * K + col], A[row * K + col + 1]);\n"
    "    }\n"
    "    for (int r = 0; r < 2; r++) {\n"
    "      int k = k0 + (r == 0 ? t * 2 : t * 2 + 8), n = wrong == 3 ? t : g;\n"
    "      b[r] = PACK2(B[k * 8 + n], B[(k + 1) * 8 + n]);\n"
    "    }\n"
    "    if (bf16) dl_mma_bf16(acc, a, b, acc);\n"
    "    else dl_mma_f16(acc, a, b, acc);\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) D[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = acc[i];\n"
    "}\n"
    /* m16n8k32 s8: \"Matrix Fragments for mma.m16n8k32\". */
    "extern \"C\" __global__ void mma16832(const signed char *A, const signed char *B, const int *C, int *D, int K) {\n"
    "  int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;\n"
    "  int acc[4];\n"
    "  for (int i = 0; i < 4; i++) acc[i] = C[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];\n"
    "  for (int k0 = 0; k0 < K; k0 += 32) {\n"
    "    unsigned a[4], b[2];\n"
    "    for (int r = 0; r < 4; r++) {\n"
    "      int i = 4 * r;\n"
    "      int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8, col = k0 + (i < 8 ? t * 4 : t * 4 + 16);\n"
    "      a[r] = 0;\n"
    "      for (int j = 0; j < 4; j++) a[r] |= (unsigned)(unsigned char)A[row * K + col + j] << (8 * j);\n"
    "    }\n"
    "    for (int r = 0; r < 2; r++) {\n"
    "      int k = k0 + (r == 0 ? t * 4 : t * 4 + 16);\n"
    "      b[r] = 0;\n"
    "      for (int j = 0; j < 4; j++) b[r] |= (unsigned)(unsigned char)B[(k + j) * 8 + g] << (8 * j);\n"
    "    }\n"
    "    dl_mma_s8(acc, a, b, acc);\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) D[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = acc[i];\n"
    "}\n"
    /* m16n8k8 tf32: \"Matrix Fragments for mma.m16n8k8\", A and B rounded by dl_tf32. */
    "extern \"C\" __global__ void mma1688(const float *A, const float *B, const float *C, float *D, int K) {\n"
    "  int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;\n"
    "  float acc[4];\n"
    "  for (int i = 0; i < 4; i++) acc[i] = C[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];\n"
    "  for (int k0 = 0; k0 < K; k0 += 8) {\n"
    "    unsigned a[4] = {dl_tf32(A[g * K + k0 + t]), dl_tf32(A[(g + 8) * K + k0 + t]),\n"
    "                     dl_tf32(A[g * K + k0 + t + 4]), dl_tf32(A[(g + 8) * K + k0 + t + 4])};\n"
    "    unsigned b[2] = {dl_tf32(B[(k0 + t) * 8 + g]), dl_tf32(B[(k0 + t + 4) * 8 + g])};\n"
    "    dl_mma_tf32(acc, a, b, acc);\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) D[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = acc[i];\n"
    "}\n"
    "extern \"C\" __global__ void tf32_bits(const float *x, unsigned *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = dl_tf32(x[i]);\n"
    "}\n"
    /* D (16x16) = A * B + C over K (a multiple of 16) through shared memory:
     * two warps, warp w computing columns 8w..8w+7.  Tile rows are 32 bytes;
     * stage s covers k in [16 s, 16 s + 16), double-buffered, filled by
     * dl_cp_async16 with only k < kvalid read (the rest zero-filled).  A is
     * 16 x K (a_km 0: ldmatrix.x4) or stored K x 16 (a_km 1: .x4.trans); B is
     * K x 16 (b_kn 1: .x2.trans) or stored 16 x K (b_kn 0: .x2). */
    "__device__ void pipe_issue(unsigned short *tile, const unsigned short *M, int ld, int k_rows, int s, int c,\n"
    "                           int kvalid) {\n"
    "  int r = c / 2, h = (c % 2) * 8, k = k_rows ? 16 * s + r : 16 * s + h;\n"
    "  const unsigned short *src = k_rows ? M + (size_t)k * ld + h : M + (size_t)r * ld + k;\n"
    "  int valid = k_rows ? (k < kvalid ? 8 : 0) : min(max(kvalid - k, 0), 8);\n"
    "  dl_cp_async16(&tile[r * 16 + h], src, (unsigned)valid * 2u);\n"
    "}\n"
    "extern \"C\" __global__ void mma_pipe(const unsigned short *A, const unsigned short *B, const float *C, float *D,\n"
    "                                      int K, int kvalid, int lda, int ldb, int a_km, int b_kn) {\n"
    "  __shared__ __align__(16) unsigned short As[2][256], Bs[2][256];\n"
    "  int tid = threadIdx.x, lane = tid % 32, w = tid / 32, g = lane >> 2, t = lane % 4, S = K / 16;\n"
    "  float acc[4];\n"
    "  for (int i = 0; i < 4; i++) acc[i] = C[(i < 2 ? g : g + 8) * 16 + 8 * w + t * 2 + (i & 1)];\n"
    "  if (w == 0) pipe_issue(As[0], A, lda, a_km, 0, lane, kvalid);\n"
    "  else pipe_issue(Bs[0], B, ldb, b_kn, 0, lane, kvalid);\n"
    "  dl_cp_async_commit();\n"
    "  for (int s = 0; s < S; s++) {\n"
    "    if (s + 1 < S) {\n"
    "      if (w == 0) pipe_issue(As[(s + 1) % 2], A, lda, a_km, s + 1, lane, kvalid);\n"
    "      else pipe_issue(Bs[(s + 1) % 2], B, ldb, b_kn, s + 1, lane, kvalid);\n"
    "    }\n"
    "    dl_cp_async_commit();\n"
    "    dl_cp_async_wait<1>();\n"
    "    __syncthreads();\n"
    "    const unsigned short *as = As[s % 2], *bs = Bs[s % 2];\n"
    "    unsigned a[4], b[2];\n"
    "    int j = lane / 8, r = lane % 8;\n"
    "    if (a_km) dl_ldmatrix_x4_trans(a, &as[(8 * (j >> 1) + r) * 16 + 8 * (j & 1)]);\n"
    "    else dl_ldmatrix_x4(a, &as[(8 * (j & 1) + r) * 16 + 8 * (j >> 1)]);\n"
    /* Lanes 16-31 pass a valid address the instruction does not use. */
    "    if (b_kn) dl_ldmatrix_x2_trans(b, lane < 16 ? &bs[(8 * j + r) * 16 + 8 * w] : &as[16 * r]);\n"
    "    else dl_ldmatrix_x2(b, lane < 16 ? &bs[(8 * w + r) * 16 + 8 * j] : &as[16 * r]);\n"
    "    dl_mma_f16(acc, a, b, acc);\n"
    "    __syncthreads();\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) D[(i < 2 ? g : g + 8) * 16 + 8 * w + t * 2 + (i & 1)] = acc[i];\n"
    "}\n"
    /* One 8x8 matrix through ldmatrix.x1 and .x1.trans. */
    "extern \"C\" __global__ void ldsm_x1(const unsigned short *M, unsigned *out) {\n"
    "  __shared__ __align__(16) unsigned short s[64];\n"
    "  int lane = threadIdx.x;\n"
    "  s[lane] = M[lane], s[lane + 32] = M[lane + 32];\n"
    "  __syncthreads();\n"
    "  unsigned r[1], rt[1];\n"
    "  dl_ldmatrix_x1(r, &s[8 * (lane % 8)]);\n"
    "  dl_ldmatrix_x1_trans(rt, &s[8 * (lane % 8)]);\n"
    "  out[lane] = r[0], out[lane + 32] = rt[0];\n"
    "}\n"
    /* cp.async groups: what a thread sees of its own copies before and
     * after each wait.  out[32 * step + t].  A copy whose group no wait
     * has covered yet may or may not have landed (the H200 had landed
     * the newest committed group at wait_group 1, the emu lands a group
     * at its wait): there the kernel stores only whether the word is the
     * old or the new one, 1 either way, never a torn or foreign value;
     * raw (test_mma, on the emu alone) stores the word itself. */
    "extern \"C\" __global__ void cp_groups(const unsigned *src, unsigned *out, int raw) {\n"
    "  __shared__ __align__(16) unsigned s[3][32];\n"
    "  int t = threadIdx.x;\n"
    "#define OLD_OR_NEW(v, i) (raw ? (v) : (unsigned)((v) == 0xdeadbeefu || (v) == src[i]))\n"
    "  s[0][t] = s[1][t] = s[2][t] = 0xdeadbeefu;\n"
    "  dl_cp_async_commit();\n" /* an empty group, trivially complete */
    "  dl_cp_async_wait<0>();\n"
    "  __syncthreads();\n"
    "  dl_cp_async4(&s[0][t], &src[t], 4);\n"
    "  dl_cp_async_commit();\n"
    "  dl_cp_async4(&s[1][t], &src[32 + t], 4);\n"
    "  dl_cp_async_commit();\n"
    "  dl_cp_async4(&s[2][t], &src[64 + t], 4);\n"
    "  out[t] = OLD_OR_NEW(s[0][t], t);\n"
    "  __syncthreads();\n"
    "  out[32 + t] = OLD_OR_NEW(s[0][t], t);\n"
    "  dl_cp_async_wait<1>();\n"
    "  out[64 + t] = s[0][t], out[96 + t] = OLD_OR_NEW(s[1][t], 32 + t);\n"
    "  dl_cp_async_wait<0>();\n"
    "  out[128 + t] = s[1][t], out[160 + t] = OLD_OR_NEW(s[2][t], 64 + t);\n"
    "  dl_cp_async_commit();\n"
    "  dl_cp_async_wait<0>();\n"
    "  out[192 + t] = s[2][t];\n"
    "#undef OLD_OR_NEW\n"
    "}\n"
    /* Every size and src_bytes: 16 (.cg), 8 and 4 (.ca), zero-filled past
     * src_bytes.  No barrier: the emu runs it without fibers. */
    "extern \"C\" __global__ void cp_sizes(const unsigned char *src, unsigned char *out) {\n"
    "  __shared__ __align__(16) unsigned char s16[512], s8[256], s4[128];\n"
    "  int t = threadIdx.x;\n"
    "  for (int i = 0; i < 16; i++) s16[16 * t + i] = 0xab;\n"
    "  for (int i = 0; i < 8; i++) s8[8 * t + i] = 0xab;\n"
    "  for (int i = 0; i < 4; i++) s4[4 * t + i] = 0xab;\n"
    "  dl_cp_async16(&s16[16 * t], &src[16 * t], t % 17);\n"
    "  dl_cp_async8(&s8[8 * t], &src[512 + 8 * t], t % 9);\n"
    "  dl_cp_async4(&s4[4 * t], &src[768 + 4 * t], t % 5);\n"
    "  dl_cp_async_commit();\n"
    "  dl_cp_async_wait<0>();\n"
    "  for (int i = 0; i < 16; i++) out[16 * t + i] = s16[16 * t + i];\n"
    "  for (int i = 0; i < 8; i++) out[512 + 8 * t + i] = s8[8 * t + i];\n"
    "  for (int i = 0; i < 4; i++) out[768 + 4 * t + i] = s4[4 * t + i];\n"
    "}\n"
    /* Offsets in static and dynamic shared memory (128 bytes of it). */
    "extern \"C\" __global__ void smem_addr(unsigned *out) {\n"
    "  __shared__ unsigned s[32];\n"
    "  extern __shared__ unsigned dyn[];\n"
    "  out[threadIdx.x] = dl_smem_addr(&s[threadIdx.x]) - dl_smem_addr(&s[0]);\n"
    "  out[32 + threadIdx.x] = dl_smem_addr(&dyn[threadIdx.x]) - dl_smem_addr(&dyn[0]);\n"
    "}\n"
    /* The attention kernel's register softmax: cvt.rn.{f16,bf16}x2 packs
     * of pairs of x (out[0, n/2) and [n/2, n)), and a quad's max by two
     * shfl.xor (out[n, 3n/2), as bits; zeros made +0 first, because
     * fmaxf may pick either sign of zero). */
    "extern \"C\" __global__ void pack_shfl(const float *x, unsigned *out, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  out[i] = dl_pack_f16x2(x[2 * i], x[2 * i + 1]);\n"
    "  out[n / 2 + i] = dl_pack_bf16x2(x[2 * i], x[2 * i + 1]);\n"
    "  float v = x[i] == 0.0f ? 0.0f : x[i];\n"
    "  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));\n"
    "  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));\n"
    "  out[n + i] = __float_as_uint(v);\n"
    "}\n"
    /* What must fail. */
    "extern \"C\" __global__ void diverge(const unsigned *in, float *out, int how) {\n"
    "  int lane = threadIdx.x % 32;\n"
    "  unsigned a[4] = {in[0], in[1], in[2], in[3]}, b[2] = {in[4], in[5]};\n"
    "  float d[4], c[4] = {0, 0, 0, 0};\n"
    "  if (how == 0) {\n"
    "    if (lane < 16) dl_mma_f16(d, a, b, c); // @half\n"
    "  } else if (how == 1) {\n"
    "    if (lane < 16) dl_mma_f16(d, a, b, c); // @site1\n"
    "    else dl_mma_f16(d, a, b, c); // @site2\n"
    "  } else if (how == 2) {\n"
    "    if (lane < 16) dl_mma_f16(d, a, b, c); // @beside_shfl\n"
    "    else d[0] = __shfl_sync(0xffffffffu, c[0], 0);\n"
    "  } else if (how == 3) {\n"
    "    dl_mma_bf16(d, a, b, c); // @whole\n"
    "  } else {\n"
    "    if (lane >= 16) dl_mma_f16(d, a, b, c); // @upper\n"
    "  }\n"
    "  out[threadIdx.x] = d[0];\n"
    "}\n"
    "extern \"C\" __global__ void bad_addr(const unsigned short *gmem, int how) {\n"
    "  __shared__ __align__(16) unsigned short s[2][64];\n"
    "  int lane = threadIdx.x % 32;\n"
    "  unsigned r[4];\n"
    "  if (how == 0) dl_ldmatrix_x4(r, &s[0][8 * (lane % 8)] + (lane == 9)); // @ldsm_align\n"
    "  if (how == 1) dl_ldmatrix_x2_trans(r, lane == 3 ? gmem : &s[0][8 * (lane % 8)]); // @ldsm_global\n"
    "  if (how == 2) dl_cp_async8(&s[0][4 * lane] + 2, gmem + 4 * lane, 8); // @cp_align\n"
    "  if (how == 3) dl_cp_async16((void *)(gmem + 8 * lane), gmem, 16); // @cp_global\n"
    "  if (how == 4) dl_cp_async4(&s[1][2 * lane], gmem + 2 * lane, 5); // @cp_size\n"
    "  if (how == 5) dl_cp_async16(&s[0][0], &s[1][0], 16); // @cp_from_shared\n"
    "  if (how == 6) r[0] = dl_smem_addr(gmem); // @smem_addr\n"
    "}\n"
    /* wgmma (sm_90a): D (64 x N) = A (64 x K) B (N x K)^T + C, one
     * warpgroup, A and B K-major in shared memory as PTX's "Shared Memory
     * Matrix Layout" places them: kind 0 f16, 1 bf16, 2 tf32, 3 s8;
     * kbytes of K per row (a multiple of 32: one instruction each); swz
     * 0 (core matrices: the next 16 bytes of K 128 bytes on, the next 8
     * rows after all of K's), 32, 64 or 128 (K in blocks of swz bytes,
     * each rows x swz, the 16-byte chunks of row r XORed with (r % 8)
     * swz / 128).  depth 2 keeps one group in flight (wait_group 1);
     * zero_first makes the first instruction ignore C (scale-d 0).
     * wrong: 1 stores D before the last wait, 2 overwrites A with zeros
     * (after a barrier) while the last group may still read it.  Elsewhere than sm_90a it
     * traps. */
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(DLCC_EMU)\n"
    "#define WG_MMA(N) \\\n"
    "  __device__ __forceinline__ void wg_mma(float (&acc)[N / 2], int kind, unsigned long long da, \\\n"
    "                                         unsigned long long db, int accumulate) { \\\n"
    "    if (kind == 0) dl_wgmma_f16_n##N(acc, da, db, accumulate); \\\n"
    "    else if (kind == 1) dl_wgmma_bf16_n##N(acc, da, db, accumulate); \\\n"
    "    else dl_wgmma_tf32_n##N(acc, da, db, accumulate); \\\n"
    "  } \\\n"
    "  __device__ __forceinline__ void wg_mma(int (&acc)[N / 2], int kind, unsigned long long da, \\\n"
    "                                         unsigned long long db, int accumulate) { \\\n"
    "    dl_wgmma_s8_n##N(acc, da, db, accumulate); \\\n"
    "  }\n"
    "WG_MMA(16) WG_MMA(32) WG_MMA(64) WG_MMA(128) WG_MMA(256)\n"
    "#undef WG_MMA\n"
    "__device__ int wg_place(int r, int kb, int rows, int kbytes, int swz) {\n"
    "  if (!swz) return (r / 8) * (kbytes / 16 * 128) + (kb / 16) * 128 + (r % 8) * 16 + kb % 16;\n"
    "  int c = kb % swz / 16, cs = c ^ ((r % 8) * swz / 128) % (swz / 16);\n"
    "  return kb / swz * rows * swz + r * swz + cs * 16 + kb % 16;\n"
    "}\n"
    "__device__ unsigned long long wg_desc(const unsigned char *tile, int rows, int kbytes, int swz, int kb) {\n"
    "  unsigned base = dl_smem_addr(tile);\n"
    "  if (!swz) return dl_wgmma_desc(base + kb / 16 * 128, 128, kbytes / 16 * 128, 0);\n"
    "  return dl_wgmma_desc(base + kb / swz * rows * swz + kb % swz, 16, 8 * swz, swz);\n"
    "}\n"
    "template <typename T, int N>\n"
    "__device__ void wg_gemm(int kind, const unsigned char *A, const unsigned char *B, const T *C, T *D, int kbytes,\n"
    "                        int swz, int depth, int zero_first, int wrong, unsigned char *as, unsigned char *bs) {\n"
    "  int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane >> 2, t = lane % 4;\n"
    "  for (int i = tid; i < 64 * kbytes; i += 128) as[wg_place(i / kbytes, i % kbytes, 64, kbytes, swz)] = A[i];\n"
    "  for (int i = tid; i < N * kbytes; i += 128) bs[wg_place(i / kbytes, i % kbytes, N, kbytes, swz)] = B[i];\n"
    "  dl_fence_proxy_async();\n"
    "  __syncthreads();\n"
    "  T acc[N / 2];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < N / 2; i++) acc[i] = C[(16 * w + g + 8 * ((i % 4) / 2)) * N + 8 * (i / 4) + 2 * t + i % 2];\n"
    "  for (int kb = 0; kb < kbytes; kb += 32) {\n"
    "    dl_wgmma_fence();\n"
    "    wg_mma(acc, kind, wg_desc(as, 64, kbytes, swz, kb), wg_desc(bs, N, kbytes, swz, kb), kb > 0 || !zero_first); // @wg_mma\n"
    "    dl_wgmma_commit();\n"
    "    if (depth == 1) dl_wgmma_wait<0>();\n"
    "    else dl_wgmma_wait<1>();\n"
    "  }\n"
    "  if (wrong == 2) {\n"
    "    __syncthreads();\n"
    "    for (int i = tid; i < 64 * kbytes; i += 128) as[i] = 0;\n"
    "  }\n"
    "  if (wrong != 1) dl_wgmma_wait<0>();\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < N / 2; i++) {\n"
    "    dl_wgmma_fence_operand(acc[i]);\n"
    "    D[(16 * w + g + 8 * ((i % 4) / 2)) * N + 8 * (i / 4) + 2 * t + i % 2] = acc[i];\n"
    "  }\n"
    "  if (wrong == 1) dl_wgmma_wait<0>();\n"
    "}\n"
    "template <typename T>\n"
    "__device__ void wg_gemm_n(int kind, const unsigned char *A, const unsigned char *B, const T *C, T *D, int N,\n"
    "                          int kbytes, int swz, int depth, int zero_first, int wrong, unsigned char *as,\n"
    "                          unsigned char *bs) {\n"
    "  switch (N) {\n"
    "  case 16: wg_gemm<T, 16>(kind, A, B, C, D, kbytes, swz, depth, zero_first, wrong, as, bs); break;\n"
    "  case 32: wg_gemm<T, 32>(kind, A, B, C, D, kbytes, swz, depth, zero_first, wrong, as, bs); break;\n"
    "  case 64: wg_gemm<T, 64>(kind, A, B, C, D, kbytes, swz, depth, zero_first, wrong, as, bs); break;\n"
    "  case 128: wg_gemm<T, 128>(kind, A, B, C, D, kbytes, swz, depth, zero_first, wrong, as, bs); break;\n"
    "  default: wg_gemm<T, 256>(kind, A, B, C, D, kbytes, swz, depth, zero_first, wrong, as, bs); break;\n"
    "  }\n"
    "}\n"
    "#endif\n"
    "extern \"C\" __global__ void wgmma_gemm(int kind, const unsigned char *A, const unsigned char *B, const void *C,\n"
    "                                        void *D, int N, int kbytes, int swz, int depth, int zero_first, int wrong) {\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(DLCC_EMU)\n"
    "  __shared__ __align__(16) unsigned char smem[1024 + (64 + 256) * 128];\n"
    "  unsigned char *as = smem + (1024 - dl_smem_addr(smem) % 1024) % 1024, *bs = as + 64 * kbytes;\n"
    "  if (kind == 3)\n"
    "    wg_gemm_n<int>(kind, A, B, (const int *)C, (int *)D, N, kbytes, swz, depth, zero_first, wrong, as, bs);\n"
    "  else\n"
    "    wg_gemm_n<float>(kind, A, B, (const float *)C, (float *)D, N, kbytes, swz, depth, zero_first, wrong, as, bs);\n"
    "#else\n"
    "  __trap();\n"
    "#endif\n"
    "}\n"
    /* Which side of KS_WG_IF this build of the kernels takes: 1 wgmma's. */
    "extern \"C\" __global__ void wg_side(int *out) {\n"
    "#ifdef DL_WGMMA\n"
    "  *out = 1;\n"
    "#else\n"
    "  *out = 0;\n"
    "#endif\n"
    "}\n"
    /* What must fail, on the emu: how 0 a group without a fence, 1 a lane
     * with other descriptors, 2 a swizzled operand started 48 bytes into
     * its pattern, 3 an exit before the wait, 4 (with 96 threads) a
     * partial warpgroup, 5 a descriptor past shared memory (16 MiB on:
     * the emu's descriptors reach it, the GPU's would wrap), 6 half a
     * warp at the instruction. */
    "extern \"C\" __global__ void wgmma_bad(int how) {\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(DLCC_EMU)\n"
    "  __shared__ __align__(16) unsigned char smem[2048];\n"
    "  unsigned base = dl_smem_addr(smem), tile = base + (1024 - base % 1024) % 1024;\n"
    "  unsigned long long d = dl_wgmma_desc(tile, 16, 512, 64);\n"
    "  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};\n"
    "  int lane = threadIdx.x % 32;\n"
    "  if (how != 0) dl_wgmma_fence(); // @wg_fence\n"
    "  if (how == 0 || how == 3 || how == 4) dl_wgmma_f16_n16(acc, d, d, 0); // @wg_plain\n"
    "  if (how == 1) dl_wgmma_f16_n16(acc, lane == 5 ? d + 2 : d, d, 0); // @wg_lane\n"
    "  if (how == 2) dl_wgmma_f16_n16(acc, dl_wgmma_desc(tile + 48, 16, 512, 64), d, 0); // @wg_align\n"
    "  if (how == 5) dl_wgmma_f16_n16(acc, dl_wgmma_desc(0xfffff0u, 16, 512, 0), d, 0); // @wg_far\n"
    "  if (how == 6 && lane < 16) dl_wgmma_f16_n16(acc, d, d, 0); // @wg_half\n"
    "  if (how == 3) return;\n"
    "  dl_wgmma_commit();\n"
    "  dl_wgmma_wait<0>();\n"
    "#else\n"
    "  __trap();\n"
    "#endif\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void mma16816__emu(void **a) {\n"
    "  mma16816(*(int *)a[0], *(const unsigned short **)a[1], *(const unsigned short **)a[2], *(const float **)a[3],\n"
    "           *(float **)a[4], *(int *)a[5], *(int *)a[6]);\n"
    "}\n"
    "extern \"C\" void mma16832__emu(void **a) {\n"
    "  mma16832(*(const signed char **)a[0], *(const signed char **)a[1], *(const int **)a[2], *(int **)a[3],\n"
    "           *(int *)a[4]);\n"
    "}\n"
    "extern \"C\" void mma1688__emu(void **a) {\n"
    "  mma1688(*(const float **)a[0], *(const float **)a[1], *(const float **)a[2], *(float **)a[3], *(int *)a[4]);\n"
    "}\n"
    "extern \"C\" void tf32_bits__emu(void **a) { tf32_bits(*(const float **)a[0], *(unsigned **)a[1], *(int *)a[2]); }\n"
    "extern \"C\" void mma_pipe__emu(void **a) {\n"
    "  mma_pipe(*(const unsigned short **)a[0], *(const unsigned short **)a[1], *(const float **)a[2],\n"
    "           *(float **)a[3], *(int *)a[4], *(int *)a[5], *(int *)a[6], *(int *)a[7], *(int *)a[8], *(int *)a[9]);\n"
    "}\n"
    "extern \"C\" void ldsm_x1__emu(void **a) { ldsm_x1(*(const unsigned short **)a[0], *(unsigned **)a[1]); }\n"
    "extern \"C\" void cp_groups__emu(void **a) { cp_groups(*(const unsigned **)a[0], *(unsigned **)a[1], *(int *)a[2]); }\n"
    "extern \"C\" void cp_sizes__emu(void **a) { cp_sizes(*(const unsigned char **)a[0], *(unsigned char **)a[1]); }\n"
    "extern \"C\" void smem_addr__emu(void **a) { smem_addr(*(unsigned **)a[0]); }\n"
    "extern \"C\" void diverge__emu(void **a) { diverge(*(const unsigned **)a[0], *(float **)a[1], *(int *)a[2]); }\n"
    "extern \"C\" void pack_shfl__emu(void **a) { pack_shfl(*(const float **)a[0], *(unsigned **)a[1], *(int *)a[2]); }\n"
    "extern \"C\" void bad_addr__emu(void **a) { bad_addr(*(const unsigned short **)a[0], *(int *)a[1]); }\n"
    "extern \"C\" void wgmma_gemm__emu(void **a) {\n"
    "  wgmma_gemm(*(int *)a[0], *(const unsigned char **)a[1], *(const unsigned char **)a[2], *(const void **)a[3],\n"
    "             *(void **)a[4], *(int *)a[5], *(int *)a[6], *(int *)a[7], *(int *)a[8], *(int *)a[9], *(int *)a[10]);\n"
    "}\n"
    "extern \"C\" void wgmma_bad__emu(void **a) { wgmma_bad(*(int *)a[0]); }\n"
    "extern \"C\" void wg_side__emu(void **a) { wg_side(*(int **)a[0]); }\n"
    "#endif\n";
/* clang-format on */

enum {
  MK_16816,
  MK_16832,
  MK_1688,
  MK_TF32,
  MK_PIPE,
  MK_LDSM_X1,
  MK_CP_GROUPS,
  MK_CP_SIZES,
  MK_SMEM_ADDR,
  MK_PACK_SHFL,
  MK_DIVERGE,
  MK_BAD_ADDR,
  MK_WGMMA,
  MK_WGMMA_BAD,
  MK_WG_SIDE,
  MK_COUNT
};

static const RtKernel mma_kernels[MK_COUNT] = {
    {"mma16816", 1, 0, 0, 0},  {"mma16832", 1, 0, 0, 0}, {"mma1688", 1, 0, 0, 0},  {"tf32_bits", 0, 0, 0, 0},
    {"mma_pipe", 1, 0, 0, 0},  {"ldsm_x1", 1, 0, 0, 0},  {"cp_groups", 1, 0, 0, 0}, {"cp_sizes", 0, 0, 0, 0},
    {"smem_addr", 0, 0, 0, 0}, {"pack_shfl", 1, 0, 0, 0}, {"diverge", 1, 0, 0, 0},  {"bad_addr", 1, 0, 0, 0},
    {"wgmma_gemm", 1, 0, 0, 0}, {"wgmma_bad", 1, 0, 0, 0}, {"wg_side", 0, 0, 0, 0},
};

#endif
