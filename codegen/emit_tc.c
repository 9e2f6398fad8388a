/* The tensor-core instructions as CUDA device functions: takes nothing,
 * returns the prelude text (cg_tc_prelude) that emit_cuda.c adds to a
 * plan's source when one of its kernels calls them.  Each function is one
 * PTX instruction in inline assembly, its operands the per-thread
 * registers exactly as the instruction takes them (PTX ISA, "Warp Level
 * Matrix Multiply-Accumulate Instructions", "Data Movement and Conversion
 * Instructions: cp.async").  The text sits under #ifndef DLCC_EMU: the emu
 * device defines the same functions in runtime/emu/dlcc_emu.h from the
 * PTX ISA's fragment tables, and docs/tensorcores.md lists them both. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel.h"

/* Why each constraint and clobber:
 * - f32 accumulators are "f" registers, s32 ones and every packed f16x2,
 *   bf16x2, s8x4 and tf32 operand is a 32-bit "r" register.  d and c are
 *   separate operands, so d may be c (the usual accumulate-in-place).
 * - Shared-memory operands are 32-bit .shared addresses from
 *   __cvta_generic_to_shared, global ones 64-bit .global addresses from
 *   __cvta_generic_to_global, as the instructions' state spaces say.
 * - ldmatrix and cp.async read or write memory the compiler cannot see in
 *   the operands, and cp.async.wait_group is what makes cp.async's writes
 *   visible: all carry a "memory" clobber so no load or store of shared
 *   memory moves across them.
 * - Everything is asm volatile: a warp-collective instruction must not be
 *   removed or merged because one thread's result looks unused. */
/* clang-format off */
static const char tc_prelude[] =
    "// DL_WGMMA: where kernels take their wgmma side (KS_WG_IF): sm_90a, and the emu unless\n"
    "// built with -DDLCC_EMU_NO_WGMMA (the mma.sync side, as every other GPU runs it).\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || (defined(DLCC_EMU) && !defined(DLCC_EMU_NO_WGMMA))\n"
    "#define DL_WGMMA 1\n"
    "#endif\n"
    "#ifndef DLCC_EMU\n"
    "// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: D = A*B + C, A 16x16 row-major\n"
    "// (4 regs of 2 halves), B 16x8 column-major (2 regs), C and D 16x8 (4 f32 each).\n"
    "__device__ __forceinline__ void dl_mma_f16(float d[4], const unsigned a[4], const unsigned b[2],\n"
    "                                           const float c[4]) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \"\n"
    "               \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\\n\"\n"
    "               : \"=f\"(d[0]), \"=f\"(d[1]), \"=f\"(d[2]), \"=f\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]),\n"
    "                 \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3]));\n"
    "}\n"
    "// The same with bf16 A and B.\n"
    "__device__ __forceinline__ void dl_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2],\n"
    "                                            const float c[4]) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \"\n"
    "               \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\\n\"\n"
    "               : \"=f\"(d[0]), \"=f\"(d[1]), \"=f\"(d[2]), \"=f\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]),\n"
    "                 \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3]));\n"
    "}\n"
    "// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (wrapping: no .satfinite): A 16x32\n"
    "// (4 regs of 4 bytes), B 32x8 (2 regs), C and D 16x8 s32.\n"
    "__device__ __forceinline__ void dl_mma_s8(int d[4], const unsigned a[4], const unsigned b[2],\n"
    "                                          const int c[4]) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 \"\n"
    "               \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\\n\"\n"
    "               : \"=r\"(d[0]), \"=r\"(d[1]), \"=r\"(d[2]), \"=r\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]),\n"
    "                 \"r\"(c[0]), \"r\"(c[1]), \"r\"(c[2]), \"r\"(c[3]));\n"
    "}\n"
    "// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: A 16x8 (4 regs), B 8x8 (2 regs).\n"
    "__device__ __forceinline__ void dl_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2],\n"
    "                                            const float c[4]) {\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"\n"
    "               \"{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\\n\"\n"
    "               : \"=f\"(d[0]), \"=f\"(d[1]), \"=f\"(d[2]), \"=f\"(d[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]),\n"
    "                 \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3]));\n"
    "}\n"
    "// cvt.rna.tf32.f32: x rounded to tf32 (nearest, ties away), as the bits of a .b32.\n"
    "__device__ __forceinline__ unsigned dl_tf32(float x) {\n"
    "  unsigned r;\n"
    "  asm(\"cvt.rna.tf32.f32 %0, %1;\\n\" : \"=r\"(r) : \"f\"(x));\n"
    "  return r;\n"
    "}\n"
    "// cvt.rn.f16x2.f32 d, hi, lo: lo to the low half of d, hi to the high one, each\n"
    "// rounded to nearest even (sm_80+); the A fragment of an mma from two accumulators.\n"
    "__device__ __forceinline__ unsigned dl_pack_f16x2(float lo, float hi) {\n"
    "  unsigned r;\n"
    "  asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\\n\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
    "  return r;\n"
    "}\n"
    "__device__ __forceinline__ unsigned dl_pack_bf16x2(float lo, float hi) {\n"
    "  unsigned r;\n"
    "  asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\\n\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
    "  return r;\n"
    "}\n"
    "__device__ __forceinline__ unsigned dl_smem_addr(const void *p) {\n"
    "  return (unsigned)__cvta_generic_to_shared(p);\n"
    "}\n"
    "// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: lane L passes the address of\n"
    "// row L % 8 of matrix L / 8 (16 bytes, 16-byte aligned, in shared memory).\n"
    "__device__ __forceinline__ void dl_ldmatrix_x1(unsigned r[1], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\\n\"\n"
    "               : \"=r\"(r[0]) : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_ldmatrix_x2(unsigned r[2], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_ldmatrix_x4(unsigned r[4], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
    "               : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_ldmatrix_x1_trans(unsigned r[1], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\\n\"\n"
    "               : \"=r\"(r[0]) : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_ldmatrix_x2_trans(unsigned r[2], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_ldmatrix_x4_trans(unsigned r[4], const void *smem_row) {\n"
    "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
    "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
    "               : \"r\"(dl_smem_addr(smem_row)) : \"memory\");\n"
    "}\n"
    "// cp.async.{cg,ca}.shared.global [smem], [gmem], size, src_bytes: copies src_bytes\n"
    "// (0..size) and zero-fills the rest; completes at the cp.async.wait_group that retires\n"
    "// its group.  16 bytes bypass L1 (.cg), 8 and 4 may only use .ca.\n"
    "__device__ __forceinline__ void dl_cp_async16(void *smem, const void *gmem, unsigned src_bytes) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\"\n"
    "               :: \"r\"(dl_smem_addr(smem)), \"l\"(__cvta_generic_to_global(gmem)), \"r\"(src_bytes)\n"
    "               : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_cp_async8(void *smem, const void *gmem, unsigned src_bytes) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8, %2;\\n\"\n"
    "               :: \"r\"(dl_smem_addr(smem)), \"l\"(__cvta_generic_to_global(gmem)), \"r\"(src_bytes)\n"
    "               : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_cp_async4(void *smem, const void *gmem, unsigned src_bytes) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4, %2;\\n\"\n"
    "               :: \"r\"(dl_smem_addr(smem)), \"l\"(__cvta_generic_to_global(gmem)), \"r\"(src_bytes)\n"
    "               : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_cp_async_commit(void) {\n"
    "  asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
    "}\n"
    "// Waits until at most N of this thread's committed groups are pending.\n"
    "template <int N> __device__ __forceinline__ void dl_cp_async_wait(void) {\n"
    "  asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "}\n"
    "#endif\n";
/* clang-format on */

/* wgmma (sm_90a only, so under __CUDA_ARCH_FEAT_SM90_ALL, which NVRTC
 * defines for sm_90a and nothing else: the same source compiles for
 * sm_80 and sm_90 without them).  PTX ISA, "Asynchronous Warpgroup Level
 * Matrix Multiply-Accumulate Instructions"; the emu's versions and the
 * layouts are in runtime/emu/dlcc_emu.h, docs/tensorcores.md lists both.
 * - The accumulators are "+f" ("+r" for s32) operands of the one asm:
 *   wgmma writes them when its group retires, so a kernel passes each
 *   through dl_wgmma_fence_operand after dl_wgmma_wait, which tells the
 *   compiler the register changed there (no read moves above the wait).
 * - scale-d is a predicate set from `accumulate` inside the asm: 0 makes
 *   D = A*B, ignoring the registers' old values.
 * - Every asm is volatile with a "memory" clobber: wgmma reads shared
 *   memory the operands do not name. */
static const char wgmma_head[] =
    "#ifndef DLCC_EMU\n"
    "// A wgmma matrix descriptor (PTX ISA, \"Matrix Descriptor Format\"): the start address,\n"
    "// leading and stride dimension byte offsets, each (x & 0x3FFFF) >> 4, base offset 0, and\n"
    "// the swizzle mode of swizzle_bytes (128: 1, 64: 2, 32: 3, else 0: none).\n"
    "__device__ __forceinline__ unsigned long long dl_wgmma_desc(unsigned smem_addr, unsigned lbo, unsigned sbo,\n"
    "                                                            unsigned swizzle_bytes) {\n"
    "  unsigned long long mode = swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 3 : 0;\n"
    "  return (unsigned long long)((smem_addr & 0x3ffffu) >> 4) | (unsigned long long)((lbo & 0x3ffffu) >> 4) << 16 |\n"
    "         (unsigned long long)((sbo & 0x3ffffu) >> 4) << 32 | mode << 62;\n"
    "}\n"
    "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
    "__device__ __forceinline__ void dl_wgmma_fence(void) { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
    "__device__ __forceinline__ void dl_wgmma_commit(void) {\n"
    "  asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
    "}\n"
    "// Waits until at most N of the warpgroup's committed groups are pending.\n"
    "template <int N> __device__ __forceinline__ void dl_wgmma_wait(void) {\n"
    "  asm volatile(\"wgmma.wait_group.sync.aligned %0;\\n\" :: \"n\"(N) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void dl_wgmma_fence_operand(float &r) { asm volatile(\"\" : \"+f\"(r) :: \"memory\"); }\n"
    "__device__ __forceinline__ void dl_wgmma_fence_operand(int &r) { asm volatile(\"\" : \"+r\"(r) :: \"memory\"); }\n"
    "// Makes this thread's ordinary shared-memory writes (stores, cp.async) visible to wgmma's\n"
    "// reads, which go through the async proxy.\n"
    "__device__ __forceinline__ void dl_fence_proxy_async(void) {\n"
    "  asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n"
    "}\n";

/* dl_wgmma_<ty>_n<N>(d, desc_a, desc_b, accumulate): one
 * wgmma.mma_async.sync.aligned.m64n<N>k<K> with A and B K-major from
 * shared memory, d the thread's N / 2 accumulators; imm the immediates
 * after scale-d (the integer form takes none, tf32 no imm-trans). */
static void put_wgmma(FILE *f, const char *ty, const char *ptx, int n, bool is_int, const char *imm) {
  int regs = n / 2;
  fprintf(f,
          "__device__ __forceinline__ void dl_wgmma_%s_n%d(%s d[%d], unsigned long long desc_a,\n"
          "                                                unsigned long long desc_b, int accumulate) {\n"
          "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"\n"
          "               \"%s {",
          ty, n, is_int ? "int" : "float", regs, regs + 2, ptx);
  for (int i = 0; i < regs; i++) fprintf(f, "%s%%%d", i ? "," : "", i);
  fprintf(f, "}, %%%d, %%%d, p%s;\\n}\\n\"\n               : ", regs, regs + 1, imm);
  for (int i = 0; i < regs; i++) fprintf(f, "%s\"+%s\"(d[%d])", i ? ", " : "", is_int ? "r" : "f", i);
  fputs("\n               : \"l\"(desc_a), \"l\"(desc_b), \"r\"(accumulate) : \"memory\");\n}\n", f);
}

/* The whole text, built once; the mma.sync part alone if memory for it
 * ran out (then a kernel calling wgmma fails in NVRTC, naming it). */
static const char *tc_text = tc_prelude;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

static void build_tc_text(void) {
  static const struct {
    const char *ty, *fmt, *imm;
    bool is_int;
  } kinds[] = {{"f16", "wgmma.mma_async.sync.aligned.m64n%dk16.f32.f16.f16", ", 1, 1, 0, 0", false},
               {"bf16", "wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16", ", 1, 1, 0, 0", false},
               {"tf32", "wgmma.mma_async.sync.aligned.m64n%dk8.f32.tf32.tf32", ", 1, 1", false},
               {"s8", "wgmma.mma_async.sync.aligned.m64n%dk32.s32.s8.s8", "", true}};
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return;
  fputs(tc_prelude, f);
  fputs(wgmma_head, f);
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (int n = 16; n <= CG_WGMMA_MAX_N; n *= 2) {
      char ptx[96];
      snprintf(ptx, sizeof ptx, kinds[k].fmt, n);
      put_wgmma(f, kinds[k].ty, ptx, n, kinds[k].is_int, kinds[k].imm);
    }
  fputs("#endif\n#endif\n", f);
  if (fclose(f) == 0 && text)
    tc_text = text; /* kept for the process, as the static text it extends */
  else
    free(text);
}

const char *cg_tc_prelude(void) {
  pthread_once(&tc_once, build_tc_text);
  return tc_text;
}
