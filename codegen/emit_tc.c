/* The tensor-core instructions as CUDA device functions: takes nothing,
 * returns the prelude text (cg_tc_prelude) that emit_cuda.c adds to a
 * plan's source when one of its kernels calls them.  Each function is one
 * PTX instruction in inline assembly, its operands the per-thread
 * registers exactly as the instruction takes them (PTX ISA, "Warp Level
 * Matrix Multiply-Accumulate Instructions", "Data Movement and Conversion
 * Instructions: cp.async").  The text sits under #ifndef DLCC_EMU: the emu
 * device defines the same functions in runtime/emu/dlcc_emu.h from the
 * PTX ISA's fragment tables, and docs/tensorcores.md lists them both. */
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

const char *cg_tc_prelude(void) { return tc_prelude; }
