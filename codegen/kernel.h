/* The kernel IR: what codegen lowers a graph node (later, a fused group)
 * to before any text exists.  A kernel is a small loop nest over
 * buffers: loops with a trip count and a mapping onto the GPU, loads and
 * stores with index expressions, scalar arithmetic drawn from the op
 * table, reductions and barriers.  Passes rewrite these nests (fusion,
 * unrolling, vectorization); emit_cuda.c only prints them.
 *
 * Also, at the end: the small interface through which lowering
 * (lower_kernels.c and lower.h's files) asks the plan builder (plan_build.c) for buffers and
 * appends steps.  Everything here is internal to codegen/. */
#ifndef DLCC_CODEGEN_KERNEL_H
#define DLCC_CODEGEN_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/plan.h"

/* The kernel's index type as a dtype: int, or long long when some size in
 * the kernel needs it.  Decided by cg_kernel_finish, printed by the
 * emitter; builders just say "an index". */
#define KT_INDEX TY_COUNT

typedef enum {
  KSP_GLOBAL,   /* a kernel parameter: device memory */
  KSP_SHARED,   /* __shared__ array of numel elements */
  KSP_REGISTER, /* per-thread array of numel elements */
  /* per-thread array of numel 32-bit registers holding matrix fragments
   * as the tensor-core instructions take them (raw bits, `unsigned`);
   * only the KS_MMA/KS_LDMATRIX/KS_TF32/KS_PACK statements touch them */
  KSP_FRAGMENT,
} KSpace;

/* How a loop's iterations are spread over the GPU. */
typedef enum {
  KM_SERIAL,      /* one thread runs them all, in order */
  KM_UNROLL,      /* serial, fully unrolled (constant trip count) */
  KM_GRID_STRIDE, /* every thread of a 1-D grid, grid-stride loop */
  KM_GRID_X,      /* iteration = blockIdx.x (guarded by the trip count) */
  KM_GRID_Y,
  KM_GRID_Z,
  KM_BLOCK_X, /* iteration = threadIdx.x (guarded) */
  KM_BLOCK_Y,
  KM_BLOCK_Z,
  /* Innermost, a constant 2 .. 16 iterations over consecutive elements
   * (the lanes of a vector): cg_vectorize turns the loads and stores at
   * base + lane into 16-byte accesses where it proves them aligned and
   * unrolls the rest. */
  KM_LANES,
} KMap;

typedef struct KBuf {
  const char *name;
  DType dtype;
  KSpace space;
  int64_t numel;
  bool read, written;
  /* KSP_SHARED carved from the launch's dynamic shared memory at this
   * byte offset (cg_kdynshared), so buffers may overlap on purpose and
   * the total may pass the 48 KiB a kernel may declare statically. */
  bool dynamic;
  uint32_t offset;
  /* An output that may be given this input's bytes (a training step's
   * update written over its param): every thread reads the input only at
   * the element it then stores here, before that store.  Said by the
   * lowering that knows it; NULL: none. */
  const struct KBuf *overwrites;
} KBuf;

/* A scalar: loop variable, local register, or scalar kernel parameter. */
typedef struct KVar {
  const char *name;
  DType dtype; /* KT_INDEX for loop variables and sizes */
} KVar;

typedef enum {
  KE_INT,    /* integer immediate i (index or integer dtype) */
  KE_FLOAT,  /* immediate f in dtype (inf and nan allowed) */
  KE_VAR,    /* var */
  KE_IDX,    /* index arithmetic: a[0] sub a[1], C semantics on the index type */
  KE_CMP,    /* a[0] sub a[1], a bool (dtype TY_I32) */
  KE_AND,    /* a[0] && a[1] */
  KE_OR,     /* a[0] || a[1] */
  KE_NOT,    /* !a[0] */
  KE_SELECT, /* a[0] ? a[1] : a[2]; only the chosen arm is evaluated (a guarded load is safe) */
  KE_LOAD,   /* buf[a[0]] */
  KE_OP,     /* an elementwise op of the table on a[0] (and a[1]: quantize's scale too), as eval.c */
  KE_CAST,   /* a[0] converted to dtype with the cast op's rules */
  KE_LANE,   /* lane i (0 .. sub-1) of the sub-lane vector var (a KS_VLOAD's) */
  KE_PACK4,  /* the four i8 of buf[a[0] .. a[0]+3] as one int (a[0] a multiple of 4) */
  KE_DP4A,   /* a[2] + the four products of a[0]'s and a[1]'s signed bytes (CUDA's __dp4a) */
  /* a[0] (32 bits) as lane (this lane ^ i) of this lane's group of sub
   * consecutive lanes computed it (__shfl_xor_sync, i < sub); all 32
   * lanes of the warp evaluate it together, so never in a select's arm
   * nor under a condition that splits a warp */
  KE_SHFL_XOR,
} KExprKind;

/* KI_XOR on non-negative indices only (shared-memory swizzles). */
typedef enum { KI_ADD, KI_SUB, KI_MUL, KI_DIV, KI_MOD, KI_MIN, KI_MAX, KI_XOR } KIdxOp;
typedef enum { KC_LT, KC_LE, KC_GT, KC_GE, KC_EQ, KC_NE } KCmpOp;

typedef struct KExpr KExpr;
struct KExpr {
  KExprKind kind;
  DType dtype;
  int sub;   /* KIdxOp or KCmpOp */
  OpKind op; /* KE_OP */
  int64_t i; /* KE_INT; KE_OP quantize/dequantize: the zero point */
  double f;  /* KE_FLOAT; KE_OP: leaky_relu alpha, clip min, quantize's lowest code */
  double f2; /* KE_OP: clip max, quantize's highest code */
  bool flag; /* KE_OP: gelu with the tanh approximation; mod with fmod=1 (C's sign); exp in base 2;
              * a float maximum that ignores a NaN operand (fmaxf) */
  KVar *var;
  KBuf *buf;
  KExpr *a[3];
};

typedef enum {
  KS_LOOP,    /* for var in [0, extent) mapped by map: body */
  KS_REDUCE,  /* var = init; for rvar in [0, extent): body; var = combine(var, value) */
  KS_LET,     /* declares var = value */
  KS_SET,     /* var = value */
  KS_STORE,   /* buf[index] = value */
  KS_IF,      /* if (cond) body else orelse */
  KS_BARRIER, /* __syncthreads() */
  /* Every thread of every block of the grid arrives before any goes on,
   * and what any wrote before it is visible to all after it
   * (dl_grid_sync on buf, two zeroed i32 words: arrivals, generation);
   * the kernel becomes cooperative (cg_kgrid_sync). */
  KS_GRID_SYNC,
  /* Every thread of the block reaches it together, after its global
   * stores; declares the i32 var = 1 in every thread of the block that
   * arrives count-th at the counter buf[index] (a SYNC word), which it
   * then puts back to 0, and 0 in the others.  What every block stored
   * before it arrived is visible to the last one after it (fences at
   * GPU scope), so the last block may combine the others' results:
   * split-K's slices, added in a fixed order (tc_gemm.c).  The counter
   * verdict passes through src, one shared i32 (dl_last_arrival). */
  KS_LAST_ARRIVAL,
  /* declares the n_lanes vector var = buf[index .. index+n_lanes) (aligned
   * to its size, at most 16); with cond, read only where cond holds and
   * zeros elsewhere (a guarded operand whose guard is the same for every
   * lane: cg_vectorize) */
  KS_VLOAD,
  KS_VSTORE,  /* buf[index .. index+n_lanes) = lanes[0 .. n_lanes) (the same alignment) */
  /* var = combine(var over the iterations of the enclosing loop mapped to
   * threadIdx.x (map KM_BLOCK_X: warp shuffles, then across warps through
   * the shared buf) or threadIdx.y (KM_BLOCK_Y: through buf)); every
   * thread of the block reaches it together and gets the same value,
   * combined in a fixed order (cg_kallreduce). */
  KS_ALLREDUCE,
  KS_CHUNK,   /* buf[index .. index+count) = chunk[0 .. count): one 8- or 16-byte store (so aligned) */
  /* The tensor-core statements (docs/tensorcores.md).  The warp-collective
   * ones (KS_MMA, KS_LDMATRIX) must be reached by all 32 lanes of a warp
   * together.  Fragments are KSP_FRAGMENT buffers, accumulators f32 or
   * i32 registers, each statement's operands `count` consecutive
   * registers from its index. */
  KS_MMA,       /* buf[index..+4] = src[src_at..+4] x src2[src2_at..+2] + buf[index..+4] (mma.sync by tc) */
  KS_LDMATRIX,  /* buf[index..+count] = ldmatrix .x<count> (.trans) of the 8x8 b16 matrices whose
                   rows this lane's address src[src_at] is one of (shared memory) */
  KS_CP_ASYNC,  /* count bytes (4, 8, 16) from src[src_at] to shared buf[index], of which only
                   value bytes are read and the rest zero-filled; done at the KS_CP_WAIT that
                   retires its group */
  KS_CP_COMMIT, /* closes this thread's group of KS_CP_ASYNC */
  KS_CP_WAIT,   /* until at most count of this thread's committed groups are still pending */
  KS_TF32,      /* fragment buf[index] = its f32 bits rounded to tf32 (cvt.rna) */
  /* fragment buf[index] = chunk[0] in its low 16 bits, chunk[1] in its
   * high ones, two f32 values each rounded to nearest even to f16 (tc
   * KTC_F16) or bf16 (KTC_BF16): cvt.rn.{f16,bf16}x2.f32.  Two m16n8
   * accumulators side by side, packed so, are an m16k16 A fragment.
   * For KTC_TF32 (count 1): chunk[0] alone, rounded to tf32 (cvt.rna). */
  KS_PACK,
  /* wgmma (sm_90a; docs/tensorcores.md).  KS_WG_IF: body where wgmma
   * exists (DL_WGMMA: sm_90a and the emu), orelse elsewhere, chosen by
   * the preprocessor, so one kernel runs on every GPU.  The rest are
   * warpgroup-collective (all 128 threads of each warpgroup together):
   * KS_WG_MMA: buf[index .. + count/2] (count = N) += the 64 x N x 32-byte
   * product of src[src_at ..] (A, 64 rows) and src2[src2_at ..] (B, N
   * rows), both K-major in rows of 64 bytes, 64-byte swizzled (rows 64
   * bytes apart, logical 16-byte chunk c of row r at c ^ (r / 2) % 4, the
   * rows' base 512-byte aligned); value: scale-d (0 ignores buf's old
   * values), NULL for 1.  Done at the KS_WG_WAIT that retires its group. */
  KS_WG_IF,
  KS_WG_MMA,
  KS_WG_FENCE,  /* wgmma.fence: before a group's first KS_WG_MMA */
  KS_WG_COMMIT, /* closes the warpgroup's group of KS_WG_MMA */
  KS_WG_WAIT,   /* until at most count committed groups are pending */
  KS_WG_ACC,    /* buf[index] changed here (after a wait), for the compiler */
  KS_PROXY_FENCE, /* this thread's shared-memory writes visible to wgmma (fence.proxy.async) */
} KStmtKind;

/* Which mma.sync a KS_MMA is: operand types, shape and accumulator. */
typedef enum {
  KTC_F16,  /* m16n8k16, f16 x f16 + f32 */
  KTC_BF16, /* m16n8k16, bf16 x bf16 + f32 */
  KTC_S8,   /* m16n8k32, s8 x s8 + s32 (wrapping) */
  KTC_TF32, /* m16n8k8, tf32 x tf32 + f32 */
} KTcKind;

typedef struct KStmt KStmt;
typedef struct KBlock {
  KStmt *first, *last;
} KBlock;

struct KStmt {
  KStmtKind kind;
  KStmt *next;
  KVar *var;
  KVar *rvar;
  KExpr *extent;
  KMap map;
  OpKind combine; /* KS_REDUCE: OP_ADD, OP_MUL, OP_MAXIMUM or OP_MINIMUM */
  KExpr *init;
  KExpr *value;
  KExpr *cond;
  KBuf *buf;
  KExpr *index;
  KBlock body, orelse;
  KExpr **lanes; /* KS_VSTORE */
  int n_lanes;   /* KS_VLOAD, KS_VSTORE */
  KExpr **chunk;   /* KS_CHUNK */
  /* the tensor-core statements' operands (above) */
  KBuf *src, *src2;
  KExpr *src_at, *src2_at;
  int count;
  KTcKind tc;
  bool trans;
};

/* A parameter: a global buffer or a scalar, with what it is bound to in
 * the plan (arg.ref for buffers, arg.i / arg.f for scalars). */
typedef struct KParam {
  KBuf *buf;
  KVar *var;
  RtArg arg;
  /* The memory planner may give this buffer the bytes of another of the
   * kernel's buffers (in-place reuse), so it must not be __restrict__. */
  bool may_alias;
  /* A scalar: the values for which the kernel stays inside its buffers'
   * numel (the plan's RtParam.lo, hi); a size has just its own value. */
  int64_t lo, hi;
} KParam;

typedef struct Kernel {
  Ctx *ctx;
  const char *hint; /* name stem: "relu", "conv2d_im2col" */
  const Node *node; /* the graph node it computes (the comment) */
  const char *what; /* which part of node, or NULL for all of it */
  DType index;      /* TY_I32 or TY_I64 once finished */
  int n_params, cap_params;
  KParam *params;
  int n_locals, cap_locals;
  KBuf **locals;   /* shared and register arrays, declared at the top */
  int n_vars;      /* for fresh names */
  int64_t largest; /* largest size seen by the builders (picks index) */
  KBlock body;
  uint32_t grid[3], block[3];
  bool uses_barriers;
  bool cooperative; /* has a KS_GRID_SYNC: launched cooperatively (RtKernel.cooperative) */
  bool grid_stride; /* cooperative on any grid: a chain (RT_COOP_STRIDE) */
  bool counts_arrivals; /* has a KS_LAST_ARRIVAL: the plan's prelude has dl_last_arrival */
  bool uses_tc; /* calls the tensor-core functions (their prelude) */
  bool uses_wgmma; /* has KS_WG_IF: its dynamic shared memory 1024-byte aligned */
  uint32_t shared_bytes;
  uint32_t dynamic_shared_bytes;
  bool finished;
  /* A merged kernel (cg_kernel_merge): the finished kernels it runs side
   * by side, part i on its own range of blockIdx.x, each with the thread
   * and block indices it was built for.  Its params and locals are the
   * parts' (renamed apart), its body empty. */
  struct Kernel **parts;
  int n_parts;
  /* A chained kernel (cg_kernel_chain): its parts run in phases, phase
   * after phase with a grid barrier (on phase_bar) between them, so a
   * part may read what an earlier phase wrote.  Part i runs in phase
   * part_phase[i] (nondecreasing); within a phase each block walks the
   * phase's blocks with a stride of the grid, so the launch runs on as
   * many blocks as are resident (RtKernel.cooperative RT_COOP_STRIDE).
   * n_phases is 0 for any other kernel. */
  int *part_phase;
  int n_phases;
  KBuf *phase_bar;
  /* Built from tiles of a GEMM (cg_ktiles). */
  bool tiled;
} Kernel;

/* ---- builders (kernel.c) ---- */

Kernel *cg_kernel_new(Ctx *c, const Node *n, const char *hint, const char *what);
/* A global buffer parameter bound to ref.  Asking twice for the same ref
 * and dtype gives the same buffer (read/written accumulate). */
KBuf *cg_kglobal(Kernel *k, const char *name, DType dt, int64_t numel, RtRef ref);
/* A scalar parameter; dtype KT_INDEX (an index), TY_I32, TY_I64 or TY_F32.
 * An integer one is a size: the buffers' numel hold for ival alone. */
KVar *cg_kparam(Kernel *k, const char *name, DType dt, int64_t ival, float fval);
/* An integer parameter (a timestep) for which every value in [lo, hi]
 * keeps the kernel inside its buffers, so launches that differ in it
 * share one contract. */
KVar *cg_kparam_range(Kernel *k, const char *name, DType dt, int64_t ival, int64_t lo, int64_t hi);
/* A __shared__ (KSP_SHARED) or per-thread (KSP_REGISTER) array. */
KBuf *cg_klocal(Kernel *k, const char *stem, DType dt, int64_t numel, KSpace space);
/* numel elements of the launch's dynamic shared memory from byte offset
 * (a multiple of 16); the launch gets as many bytes as the furthest one
 * reaches. */
KBuf *cg_kdynshared(Kernel *k, const char *stem, DType dt, int64_t numel, uint32_t offset);
/* A fragment of numel 32-bit registers (KSP_FRAGMENT). */
KBuf *cg_kfrag(Kernel *k, const char *stem, int64_t numel);
/* A fresh local: name is a stem ("acc" -> "acc3" when taken). */
KVar *cg_kvar(Kernel *k, const char *stem, DType dt);
/* Picks the index type and orders the parameters (read-only buffers,
 * written buffers, scalars).  Idempotent. */
void cg_kernel_finish(Kernel *k);
/* One launch for two finished kernels with no dependence between them
 * (horizontal fusion; the caller checks that): b's blocks after a's
 * (a may itself be a merge).  NULL when they cannot share a launch:
 * grids of more than one dimension, a grid sync, index types that
 * differ, too much static shared memory, or a smaller block that is not
 * whole warps without barriers (its spare threads idle). */
Kernel *cg_kernel_merge(Kernel *a, Kernel *b);
/* Whether cg_kernel_merge(a, b) will merge them, b not yet finished. */
bool cg_kernel_can_merge(const Kernel *a, const Kernel *b);
/* One launch for two finished kernels where b may depend on a: a's
 * parts, a grid barrier, then b (vertical fusion of kernels that do
 * not fuse otherwise: a reduction's parts and the map that reads the
 * whole result, a convolution and the next).  a may be a merge or a chain already.  bar is the
 * barrier's SYNC words (CG_CHAIN_BAR_WORDS, zero before the launch and
 * after it).  NULL when cg_kernel_can_chain says no.  At most
 * CG_CHAIN_MAX_PHASES phases: one kernel holds every phase's code, so
 * each runs with the registers the hungriest needs, and NVRTC compiles
 * the whole of it for any one text that differs. */
enum { CG_CHAIN_BAR_WORDS = 4, CG_CHAIN_MAX_PHASES = 6 };
Kernel *cg_kernel_chain(Kernel *a, Kernel *b, RtRef bar);
/* Whether cg_kernel_chain(a, b) will chain them, b not yet finished:
 * no tensor cores, dynamic shared memory or grid barrier of their own
 * (maps, reductions, and GEMM tiles on the CUDA cores in a's first
 * phase only: b is never one), static shared memory that leaves a full
 * SM's threads resident, 1-d grids, one index type, at most
 * CG_CHAIN_MAX_PHASES phases, and blocks a launch can share: a part
 * with barriers has the launch's threads exactly, one without whole
 * warps of it. */
bool cg_kernel_can_chain(const Kernel *a, const Kernel *b);
/* How many blocks of phase's parts each block of chain m runs side by
 * side: launch threads / the phase's largest part when no part of it has
 * barriers and that divides, else 1. */
uint32_t cg_phase_groups(const Kernel *m, int phase);
/* 1-D launch for total threads: block 256, grid capped (grid-stride loops
 * cover the rest) at cg_grid_cap blocks. */
void cg_kernel_grid_1d(Kernel *k, int64_t total);
/* The most blocks of threads_per_block a grid-stride launch needs: a
 * whole number of waves that fill every SM of the largest GPU we target
 * (docs/kernels.md). */
int64_t cg_grid_cap(int64_t threads_per_block);
/* The threads that GPU holds at once (132 SMs x 2048). */
int64_t cg_gpu_threads(void);

KExpr *cg_kint(Kernel *k, int64_t v);
KExpr *cg_kimm(Kernel *k, double v, DType dt); /* a value immediate (KE_INT for integer dtypes) */
KExpr *cg_kv(Kernel *k, KVar *v);
/* Index arithmetic, folded where both sides are immediates and
 * simplified for 0 and 1. */
KExpr *cg_kidx(Kernel *k, KIdxOp op, KExpr *a, KExpr *b);
KExpr *cg_kadd(Kernel *k, KExpr *a, KExpr *b);
KExpr *cg_kmul(Kernel *k, KExpr *a, KExpr *b);
KExpr *cg_kcmp(Kernel *k, KCmpOp op, KExpr *a, KExpr *b);
KExpr *cg_kand(Kernel *k, KExpr *a, KExpr *b); /* NULL a: just b */
KExpr *cg_kor(Kernel *k, KExpr *a, KExpr *b);
KExpr *cg_knot(Kernel *k, KExpr *a);
KExpr *cg_ksel(Kernel *k, KExpr *c, KExpr *a, KExpr *b);
KExpr *cg_kload(Kernel *k, KBuf *b, KExpr *index);
KExpr *cg_kop1(Kernel *k, OpKind op, KExpr *a);
/* 2^a (OP_EXP with flag: exp2f, one MUFU.EX2 where expf reduces its
 * range around one first): the attention's online softmax, its scores
 * in base-2 units. */
KExpr *cg_kexp2(Kernel *k, KExpr *a);
/* The larger of two f32 values, a NaN operand ignored (fmaxf, one
 * FMNMX where the IR's maximum propagates NaN in five): only where a
 * NaN reaches the result another way (the attention's row max, whose
 * NaN score makes its P NaN). */
KExpr *cg_kfmax(Kernel *k, KExpr *a, KExpr *b);
/* An fp_round node's format (index into ir/narrow.c's table) and saturate. */
void cg_fp_round_attrs(KExpr *r, const Node *n);
KExpr *cg_kop2(Kernel *k, OpKind op, KExpr *a, KExpr *b);
KExpr *cg_kcast(Kernel *k, KExpr *a, DType to);
/* n's element (ir_op_is_logic(n->op)) from its operands' elements
 * in[0 .. n_in): a bool for the tests and logic, a select for where. */
KExpr *cg_klogic(Kernel *k, const Node *n, KExpr *const *in);
/* Four packed int8 (an i8 buffer, index a multiple of 4) and their dot
 * product with another four, added to c: exact in int32 (wrapping). */
KExpr *cg_kpack4(Kernel *k, KBuf *b, KExpr *index);
KExpr *cg_kdp4a(Kernel *k, KExpr *a, KExpr *b, KExpr *c);
/* a (f32 or i32) from lane (lane ^ lane_xor) of this lane's group of
 * width lanes (a power of two up to 32, lane_xor below it): KE_SHFL_XOR.
 * Put it in a let reached by the whole warp. */
KExpr *cg_kshfl_xor(Kernel *k, KExpr *a, int lane_xor, int width);
/* n's quantize (an i8 result) or dequantize (f32) of x by the f32 scale
 * (NULL: n's scale attribute) and n's zero point, as eval.c computes them
 * (emit_cuda.c's dl_quantize and dl_dequantize). */
KExpr *cg_kquant(Kernel *k, const Node *n, KExpr *x, KExpr *scale);
/* n's zero_point attribute (quantize, dequantize, an int8 conv2d's
 * padding), 0 when absent. */
int64_t cg_zero_point(const Node *n);

KStmt *cg_kloop(Kernel *k, KBlock *in, KVar *var, KExpr *extent, KMap map); /* fill ->body */
KStmt *cg_kreduce(Kernel *k, KBlock *in, KVar *acc, KExpr *init, OpKind combine, KVar *rvar,
                  KExpr *extent); /* fill ->body, then set ->value */
KVar *cg_klet(Kernel *k, KBlock *in, const char *stem, DType dt, KExpr *value);
/* Blocks over a space of n[0] x n[1] x n[2] tiles (a GEMM's columns,
 * rows, batch and K slices) in the grid's x alone, n[0] fastest, so that
 * the kernel may share a launch (cg_kernel_merge takes 1-d grids): the
 * tile loop's body, each tile's coordinates lets there (at[d], named
 * stem[d]); sets k->grid. */
KBlock *cg_ktiles(Kernel *k, const int64_t n[3], const char *const stem[3], KVar *at[3]);
void cg_kset(Kernel *k, KBlock *in, KVar *var, KExpr *value);
void cg_kstore(Kernel *k, KBlock *in, KBuf *b, KExpr *index, KExpr *value);
KStmt *cg_kif(Kernel *k, KBlock *in, KExpr *cond); /* fill ->body (and ->orelse) */
void cg_kbarrier(Kernel *k, KBlock *in);
/* A grid-wide barrier on bar (a global i32 buffer of at least 2 elements,
 * zero before the launch and zero again after it); every thread of the
 * launch must reach it together, as __syncthreads. */
void cg_kgrid_sync(Kernel *k, KBlock *in, KBuf *bar);
/* KS_LAST_ARRIVAL: whether this block is the count-th to arrive at
 * counter[index] (a global i32 buffer in SYNC); every thread of the
 * block must reach it together, as __syncthreads. */
KVar *cg_klast_arrival(Kernel *k, KBlock *in, KBuf *counter, KExpr *index, int64_t count);
/* One store of count values of b's dtype, 8 or 16 bytes in all, at
 * b[index] (aligned to its size). */
void cg_kchunk(Kernel *k, KBlock *in, KBuf *b, KExpr *index, KExpr *const *values, int count);

/* A KS_VLOAD of n_lanes consecutive elements of b from index (8 or 16
 * bytes in all, or 4; the caller proves index aligned to that size), and
 * lane i of it. */
KVar *cg_kvload(Kernel *k, KBlock *in, const char *stem, KBuf *b, KExpr *index, int n_lanes);
KExpr *cg_klane(Kernel *k, KVar *vec, int n_lanes, int lane);

/* The tensor-core statements (KS_MMA ...). */
void cg_kmma(Kernel *k, KBlock *in, KTcKind tc, KBuf *acc, KExpr *acc_at, KBuf *a, KExpr *a_at, KBuf *b,
             KExpr *b_at);
void cg_kldmatrix(Kernel *k, KBlock *in, KBuf *frag, KExpr *frag_at, int count, bool trans, KBuf *smem,
                  KExpr *row_at);
void cg_kcp_async(Kernel *k, KBlock *in, int bytes, KBuf *smem, KExpr *smem_at, KBuf *gmem, KExpr *gmem_at,
                  KExpr *src_bytes);
void cg_kcp_commit(Kernel *k, KBlock *in);
void cg_kcp_wait(Kernel *k, KBlock *in, int pending);
void cg_ktf32(Kernel *k, KBlock *in, KBuf *frag, KExpr *at);
/* frag[0 .. n) rounded to tf32 (an unrolled loop of KS_TF32): what
 * ldmatrix moved as f32 bits, as the mma takes it. */
void cg_ktf32_each(Kernel *k, KBlock *in, KBuf *frag, int64_t n);
/* Fragment frag[at] = lo and hi (f32) as f16x2 (tc KTC_F16) or bf16x2
 * (KTC_BF16), lo in the low half; for KTC_TF32, lo rounded to tf32
 * (cvt.rna) and hi NULL: KS_PACK. */
void cg_kpack(Kernel *k, KBlock *in, KTcKind tc, KBuf *frag, KExpr *at, KExpr *lo, KExpr *hi);
/* The wgmma statements (KS_WG_IF ...).  cg_kwg_if's statement has body
 * (wgmma) and orelse (every other GPU) to fill.  tc: KTC_F16, KTC_BF16 or
 * KTC_S8; n 16 .. CG_WGMMA_MAX_N, a power of two. */
KStmt *cg_kwg_if(Kernel *k, KBlock *in);
void cg_kwg_mma(Kernel *k, KBlock *in, KTcKind tc, int n, KBuf *acc, KExpr *acc_at, KBuf *a, KExpr *a_at, KBuf *b,
                KExpr *b_at, KExpr *scale_d);
void cg_kwg_fence(Kernel *k, KBlock *in);
void cg_kwg_commit(Kernel *k, KBlock *in);
void cg_kwg_wait(Kernel *k, KBlock *in, int pending);
/* acc[0 .. n) changed here (an unrolled loop of KS_WG_ACC). */
void cg_kwg_acc_each(Kernel *k, KBlock *in, KBuf *acc, int64_t n);
void cg_kproxy_fence(Kernel *k, KBlock *in);
/* var = combine (OP_ADD, OP_MUL, OP_MAXIMUM, OP_MINIMUM) of var over the
 * iterations of the enclosing loop mapped to across (KM_BLOCK_X or
 * KM_BLOCK_Y), whose extent must equal the launch's block[0] (a power of
 * two up to 1024) or block[1]: set the launch shape first.  var is f32,
 * i32 or i64. */
void cg_kallreduce(Kernel *k, KBlock *in, KVar *var, OpKind combine, KMap across);

/* ---- kernel-IR passes (unroll.c) ---- */

/* Loops with a constant trip count of at most max_trip become KM_UNROLL;
 * max_trip 0 turns every KM_UNROLL back into KM_SERIAL (--no-unroll). */
void cg_unroll(Kernel *k, int max_trip);
/* A contiguous elementwise map (one grid-stride loop of lets and stores
 * at its index) becomes a loop over vectors of 16 bytes of its narrowest
 * dtype (a KM_LANES loop) plus a scalar tail; then every KM_LANES loop
 * of the kernel gets 16-byte loads and stores where they are provably
 * aligned (refs are checked), its lane-invariant lets (a broadcast
 * operand, a coordinate) computed once per vector, and is unrolled.
 * Returns whether any access became a vector one. */
bool cg_vectorize(Kernel *k);

/* ---- CUDA text (emit_cuda.c) ---- */

/* The shared prelude: includes and device helper functions; with
 * needs_tc also the tensor-core instructions (mma, ldmatrix, cp.async:
 * emit_tc.c, docs/tensorcores.md). */
const char *cg_cuda_prelude(Ctx *c, bool needs_fp16, bool needs_bf16, bool needs_tc);
/* dl_grid_sync, KS_GRID_SYNC's barrier, under #ifndef DLCC_EMU (the emu
 * header defines its own): for a plan with a cooperative kernel. */
const char *cg_grid_sync_prelude(void);
/* dl_last_arrival, KS_LAST_ARRIVAL's counter, for a plan with a kernel
 * that counts arrivals (the same text on the emu: its atomics and
 * fences are the header's). */
const char *cg_arrival_prelude(void);
/* The tensor-core instructions' CUDA text (emit_tc.c), under #ifndef
 * DLCC_EMU: the emu header defines the same functions.  wgmma's
 * (dl_wgmma_{f16,bf16,tf32,s8}_n{16,32,...,CG_WGMMA_MAX_N}) sit under
 * __CUDA_ARCH_FEAT_SM90_ALL as well: sm_90a alone has them. */
enum { CG_WGMMA_MAX_N = 256 };
const char *cg_tc_prelude(void);
/* One kernel as CUDA C: its comment (when with_comment), the extern "C"
 * __global__ function named name, and its emu launcher. */
char *cg_emit_kernel(Ctx *c, const Kernel *k, const char *name, bool with_comment);

/* ---- what lowering asks of the plan builder (plan_build.c) ---- */

typedef struct CgBuild CgBuild;

Ctx *cg_build_ctx(CgBuild *b);
/* The graph being compiled, numbered (Node.id). */
const Graph *cg_build_graph(CgBuild *b);
/* The bytes holding v; a folded const gets a buffer and a fill now. */
RtRef cg_ref(CgBuild *b, const Value *v);
/* True when v is a splat const that kernels take as an immediate. */
bool cg_const_of(CgBuild *b, const Value *v, double *value);
/* True when v already has bytes (an output, an input, a computed value). */
bool cg_has_ref(CgBuild *b, const Value *v);
/* Makes v live in r's bytes (a reshape that needs no copy). */
void cg_alias(CgBuild *b, const Value *v, RtRef r);
/* A fresh scratch range in the arena. */
RtRef cg_scratch(CgBuild *b, const Node *n, uint64_t nbytes);
/* n_reports fresh index reports in STATUS (RT_STATUS_WORDS int64 each),
 * for one launch's index checks. */
RtRef cg_status(CgBuild *b, int n_reports);
/* n_words fresh i32 counters in SYNC, zero before each launch that is
 * handed them, which must leave them zero (cg_klast_arrival does). */
RtRef cg_sync_words(CgBuild *b, int64_t n_words);
RtRef cg_ref_at(RtRef r, uint64_t byte_offset);
bool cg_same_ref(RtRef a, RtRef b);
/* Appends a launch of k (finished here; identical text shares one kernel). */
void cg_launch(CgBuild *b, Kernel *k);
void cg_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g);
/* When the last step (all-reduces aside) is the GEMM dW = dy^T x and
 * reduce_sum n sums that dy over its rows (a linear's bias gradient, nothing fused into it):
 * that GEMM's BGRAD epilogue computes n instead, and nothing is emitted;
 * false, and nothing changed, otherwise. */
bool cg_gemm_bias_grad(CgBuild *b, const Node *n);
void cg_copy(CgBuild *b, const Node *n, const char *what, RtRef dst, RtRef src, uint64_t nbytes);
/* allreduce_mean: src's f32 bytes to dst, then their mean over the ranks. */
void cg_allreduce(CgBuild *b, const Node *n, RtRef dst, RtRef src, uint64_t nbytes);
/* "relu %12", or "conv2d %3 im2col" with what. */
const char *cg_label(Ctx *c, const Node *n, const char *what);

/* ---- fusion groups (fuse_lower.c) ---- */

/* The nodes of one Node.group: the root (last, stored), the anchor (the
 * one reduction, window or convolution, or NULL), every member in graph
 * order, and the side outputs: members used outside the group or graph
 * outputs, elementwise of the root's shape, stored where the root is. */
enum { CG_MAX_SIBLINGS = 4 };

typedef struct CgGroup {
  int id;
  const Node *root, *anchor;
  int n, n_side;
  const Node **members, **side;
  /* An attention, matmul(softmax(f(matmul(Q, K))), V): its two matmuls,
   * computed inside the kernel (the anchor is the softmax); else NULL. */
  const Node *attention, *scores;
  /* Reductions over the anchor's rows (ir_reduce_siblings), computed
   * beside it: stored by its lowering when the anchor is the root, else
   * read by the epilogue (a map over the rows) and side outputs. */
  const Node *siblings[CG_MAX_SIBLINGS];
  int n_siblings;
} CgGroup;

/* By node id: the group a node is the root of, or NULL. */
CgGroup **cg_find_groups(Ctx *c, Graph *g);
/* The group being lowered, or NULL (plan_build.c). */
const CgGroup *cg_group(CgBuild *b);
void cg_set_group(CgBuild *b, const CgGroup *grp);
/* Appends the group's GEMMs and its one kernel; false after reporting. */
bool cg_lower_group(CgBuild *b, const CgGroup *grp);
/* Whether v is computed inside the group being lowered (by the loads
 * that read it: cg_fused_load) rather than stored. */
bool cg_is_fused(CgBuild *b, const Value *v);
/* v[index] when v is computed inside the group being lowered (its
 * expression, lets into blk, or a pure expression when blk is NULL);
 * NULL when v is stored. */
KExpr *cg_fused_load(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, KExpr *index);
/* v[index] as an operand: computed (cg_fused_load), a splat const's
 * immediate, or loaded from v's bytes as a buffer called name. */
KExpr *cg_operand_load(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index);
/* The same read only where cond holds, fill elsewhere (a convolution's
 * padding: 0, or int8's zero point), as a let set inside an if, so that
 * a fused operand's lets stay under the guard. */
KExpr *cg_operand_load_or(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index,
                          KExpr *cond, double fill);
/* When out is the anchor of the group being lowered and members follow
 * it: stores the root's element (and the side outputs') at index
 * computed from value (the anchor's element) and returns true; else
 * false and nothing happens. */
bool cg_fused_store(CgBuild *b, Kernel *k, KBlock *blk, const Value *out, KExpr *index,
                    KExpr *value);
/* The same for a row reduction anchor with its siblings (red[0] the
 * anchor, values their results at row index), whose epilogue may read
 * any of them. */
bool cg_fused_store_rows(CgBuild *b, Kernel *k, KBlock *blk, const Node *const *red, KExpr *const *values, int n,
                         KExpr *index);
/* "conv2d_batchnorm_relu" for kernel names. */
const char *cg_group_hint(Ctx *c, const CgGroup *grp);
/* A group that is linear(x, W, b) then relu or gelu(tanh) as one GEMM
 * step with cuBLASLt's epilogue (lower_gemm.c); false, having done
 * nothing, for any other group. */
bool cg_lower_gemm_epilogue(CgBuild *b, const CgGroup *grp);
/* A convolution as one tiled implicit-GEMM kernel (conv_igemm.c): groups
 * 1, or grouped where cg_conv_on_tc says the tensor cores take it; a
 * conv_transpose where it says so or in layout nhwc (then on the CUDA
 * cores where the tensor cores do not take it). */
bool cg_lower_conv_igemm(CgBuild *b, const Node *n);
bool cg_conv_on_tc(CgBuild *b, const Node *n);
/* A float conv_transpose off the tensor cores as that GEMM on the CUDA
 * cores (fma_gemm.c); false, having done nothing, where it does not
 * apply (int8, tiny groups). */
bool cg_lower_conv_transpose_fma(CgBuild *b, const Node *n);
/* A depthwise conv2d (groups == input channels) as one kernel that
 * stages input tiles in shared memory (conv_depthwise.c); false, having
 * done nothing, when the node is no such conv or its tile would not fit. */
bool cg_lower_conv_depthwise(CgBuild *b, const Node *n);
/* The same for layout "nhwc" (x [N, H, W, C], W [Co, kH, kW, 1]); false
 * only for a grid past 2^31 blocks. */
bool cg_lower_conv_depthwise_nhwc(CgBuild *b, const Node *n);

/* ---- tensor-core GEMMs (tc_gemm.c, docs/tensorcores.md) ---- */

/* One operand of a tensor-core GEMM, seen as rows of K elements (A: M
 * rows, B: N rows; z is the batch index, e.g. a convolution's group).
 * The callbacks add to the kernel k and return expressions. */
typedef struct CgTcOperand {
  int64_t rows;
  /* consecutive k are adjacent in memory: threads walk along a row */
  bool k_major;
  /* The operand is a plain global array whose chunks of 16 bytes along K
   * are contiguous and 16-byte aligned when K is a multiple of a chunk:
   * its buffer, else NULL (then nothing may have been added to k). */
  KBuf *(*async_buf)(void *ctx, Kernel *k);
  /* With async_buf: the index in it of element (row, kk), kk a multiple
   * of a chunk; *ok (or NULL) whether that chunk exists (else fill). */
  KExpr *(*chunk_at)(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok);
  /* Otherwise element by element: what a row needs once (may be NULL),
   * then element (row, kk) of the tile's dtype, statements into blk. */
  void *(*row_begin)(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row);
  KExpr *(*element)(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk);
  /* What a chunk that chunk_at says does not exist reads (int8's padding
   * at the zero point); cp.async fills zeros, so with another value the
   * chunks come through registers, a 16-byte load each. */
  double fill;
} CgTcOperand;

/* C[z][m][n] = sum over k < K of A[z][m][k] * B[z][n][k], for z < batch,
 * in f32 (s32 for int8), each element handed to store. */
typedef struct CgTcGemm {
  const Node *node;
  const char *hint, *what; /* the kernel's name stem and plan label */
  KTcKind tc;
  int64_t m, n, k, batch;
  CgTcOperand a, b;
  void *ctx; /* the callbacks' */
  /* the epilogue's threads walk along m (C[n][m] contiguous: nhwc) */
  bool store_m_major;
  /* element (m, n) of batch z: acc is its sum (f32, or i32 for KTC_S8) */
  void (*store)(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *m, KExpr *n, KExpr *acc);
} CgTcGemm;

/* The tile a problem gets (docs/tensorcores.md's table and heuristic). */
typedef struct CgTcTile {
  int bm, bn;   /* the block's tile of C */
  int wm, wn;   /* warps along M and N */
  int stages;   /* K stages in flight */
  int split;    /* slices of K, added by the tile's last (1: none) */
} CgTcTile;

/* The SMs the tile choice fills: an H200's. */
enum { CG_TC_TARGET_SMS = 132 };

CgTcTile cg_tc_choose(int64_t m, int64_t n, int64_t k, int64_t batch, KTcKind tc);
/* The tensor-core instruction for operands of dtype dt (f32 only with
 * tf32); false when there is none. */
bool cg_tc_kind(DType dt, bool tf32, KTcKind *tc);
/* The operand type's name: "f16", "bf16", "s8" or "tf32". */
const char *cg_tc_name(KTcKind tc);
/* Appends g's kernel(s). */
void cg_tc_gemm(CgBuild *b, const CgTcGemm *g);
/* The same on the CUDA cores (fma_gemm.c): every operand by its element
 * callbacks (async_buf and chunk_at unused), in f32, or exactly in
 * int32 for KTC_S8. */
void cg_fma_gemm(CgBuild *b, const CgTcGemm *g);
/* Split-K inside one kernel.  Slice ks of batch z keeps its partial
 * sum of C[z][m][n] at part[cg_gemm_slice_at(...)] (part[z][ks][m][n]);
 * after storing them, every thread of the block reaches
 * cg_gemm_last_slice, which counts the slices of tile (z, bm, bn) (of
 * tm x tn a batch) on a fresh counter per tile in SYNC and returns the
 * block that only the tile's last slice to arrive runs; there
 * cg_gemm_slices_sum adds the slices in slice order (the same sums on
 * every run, whichever came last). */
KExpr *cg_gemm_slice_at(Kernel *k, const CgTcGemm *g, int64_t split, KExpr *z, KExpr *ks, KExpr *m, KExpr *n);
KBlock *cg_gemm_last_slice(CgBuild *b, Kernel *k, KBlock *body, const CgTcGemm *g, int64_t tm, int64_t tn,
                           KExpr *z, KExpr *bm, KExpr *bn, int64_t split);
KExpr *cg_gemm_slices_sum(Kernel *k, KBlock *in, const CgTcGemm *g, KBuf *part, int64_t split, KExpr *z, KExpr *m,
                          KExpr *n);

/* ---- cost (plan_cost.c, docs/cost.md) ---- */

/* What a launch's kernel touches, read from its loop nest: the bytes of
 * each global buffer it loads or stores (no more than the buffer, no more
 * than the accesses its loops make), the arithmetic it executes (only
 * to share a node's FLOPs among its launches), and whether it reads
 * anything at all (a fill does not). */
typedef struct CgStepNote {
  double bytes, ops;
  bool reads;
} CgStepNote;

CgStepNote cg_note_kernel(const Kernel *k);

/* What lower_nodes lowered at once: a node or a fusion group, into the
 * steps [first, end). */
typedef struct CgUnit {
  const Node *node;
  const CgGroup *group;
  int first, end;
  /* FLOPs of its products that another unit's batched GEMM computed;
   * negative: of other units' products that its batched GEMM computed */
  double flops_elsewhere;
} CgUnit;

/* Each step's cost, init steps first: a unit lowered to one launch or
 * one GEMM costs what its nodes do (ir_cost_fused); in a unit of several
 * steps, GEMMs, copies and fills cost their own formulas, and the
 * unit's other FLOPs go to its other launches, which move what their
 * kernels touch. */
IrCost *cg_plan_costs(Ctx *c, const RtStep *steps, const CgStepNote *notes, int n_steps,
                      const CgUnit *units, int n_units);

/* ---- the init graph (initgraph.c) ---- */

/* What is a function of the weights alone (docs/passes.md). */
typedef struct CgInit {
  bool *node; /* by node id: lowered into the init steps */
  bool *need; /* by value id: computed by the init steps and read by a run */
  int n_nodes; /* how many nodes are init */
} CgInit;

/* Splits g (numbered here) given its groups (cg_find_groups). */
CgInit cg_split_init(Ctx *c, Graph *g, CgGroup *const *groups);

/* Linears of one input as one strided-batched GEMM (gemm_batch.c). */
typedef struct CgGemmBatch {
  int n;               /* members, in graph order */
  const Node **lin;    /* the linears */
  const Value **c;     /* what each one's GEMM writes: its value, or its group's under an activation epilogue */
  uint32_t epilogue;   /* RtEpilogue, the same for all */
  /* In elements, each a multiple of 256 bytes: member i's weight, bias
   * and result start i strides after member 0's; 0 when every member
   * reads one weight (bias), which then stays where it is. */
  int64_t stride_b, stride_bias, stride_c;
  RtRef w, bias; /* the weights (biases) side by side, in the derived region (nonzero strides) */
  bool emitted;  /* its GEMM is in the plan */
} CgGemmBatch;

/* By node id: the batch a linear is a member of, or NULL. */
CgGemmBatch **cg_find_gemm_batches(Ctx *c, const Graph *g, CgGroup *const *groups, const CgInit *init);
/* The batch n is a member of, or NULL (plan_build.c). */
CgGemmBatch *cg_gemm_batch_of(CgBuild *b, const Node *n);
/* The unit being lowered has a product of that many FLOPs that its
 * batch's GEMM, in another unit, computed (negative: its batched GEMM
 * computed that many of other units'). */
void cg_note_elsewhere(CgBuild *b, double flops);
/* The epilogue cuBLASLt applies for a group that is a linear and its
 * activation (relu, or gelu's tanh form in f16/bf16), a matmul plus a
 * bias along its last axis, or that and an activation: *product the
 * linear or matmul, *bias its bias; RT_EPILOGUE_NONE when grp is no
 * such group (lower_gemm.c). */
uint32_t cg_gemm_epilogue_of(const CgGroup *grp, const Node **product, const Value **bias);
/* A group that is residual + (a linear, a matmul, or a matmul plus a
 * bias along its last axis), with no activation between, the residual
 * stored and of the root's type: one GEMM that reads the residual as C
 * (beta 1) beside the D it writes (lower_gemm.c); false, having done
 * nothing, for any other group. */
bool cg_lower_gemm_residual(CgBuild *b, const CgGroup *grp);

/* The options of this compilation (codegen.h). */
const struct CgOptions *cg_options(CgBuild *b);

/* lower_kernels.c: appends n's steps; false after reporting an error. */
bool cg_lower_node(CgBuild *b, const Node *n);
/* A loop_begin (its enter in memory, each init copied to its carried
 * value) or a loop_end (each carried value copied to its result); the
 * steps between are plan_build.c's (close_loop). */
bool cg_lower_loop(CgBuild *b, const Node *n);
/* matmul n's GEMMs writing rc, adding beta times what rc holds (0 or 1):
 * a sum of products accumulated in place (lower_gemm.c, for fuse_lower.c). */
bool cg_lower_matmul_into(CgBuild *b, const Node *n, RtRef rc, float beta);
/* lower_train.c: the same for the training ops (conv_weight_grad ..
 * dropout), and the device function dropout's kernels call, which the
 * plan's source carries when a kernel does. */
bool cg_lower_train(CgBuild *b, const Node *n);
/* An index read from data (raw) as i64, counted from the end of its axis
 * of size dim when negative; one still outside [0, dim) is reported in a
 * fresh STATUS report of k, with pos the element's place in eval.c's
 * order (lower_move.c).  The caller keeps the result in range. */
KExpr *cg_index_reported(CgBuild *b, Kernel *k, KBlock *blk, KExpr *pos, KExpr *raw, int axis, int64_t dim);
const char *cg_cuda_philox(void);
/* What the node lowerings share (lower_kernels.c): a kernel named for n
 * (or its fusion group), the dtype check (floats, or with ints_ok any
 * integer or bool too; false after reporting), v[index] (or its fused
 * expression, or its folded value) with lets into blk, and the store of
 * out's element (or the group's epilogue from there). */
Kernel *cg_node_kernel(CgBuild *b, const Node *n, const char *suffix, const char *what);
bool cg_check_dtypes(CgBuild *b, const Node *n, bool ints_ok);
KExpr *cg_load_in(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name, KExpr *index);
void cg_store_at(CgBuild *b, Kernel *k, KBlock *blk, const Value *out, KExpr *index, KExpr *value);
/* lower_rows.c: the reductions and normalizations (reduce ops, argmax,
 * softmax, log_softmax, layernorm, rms_norm, group_norm,
 * global_avgpool), one kernel each. */
bool cg_lower_rows(CgBuild *b, const Node *n);
/* attention.c: the attention op as one FlashAttention-style kernel. */
bool cg_lower_attention(CgBuild *b, const Node *n);
/* attention_grad.c: its gradient as two kernels (dq; dk and dv). */
bool cg_lower_attention_grad(CgBuild *b, const Node *n);
/* A kernel that fills count elements of dtype at ref with value. */
void cg_fill(CgBuild *b, const Node *n, const char *what, RtRef ref, DType dt, int64_t count,
             double value);

#endif
