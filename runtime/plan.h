/* The launch plan: everything the runtime needs to run a compiled model,
 * and nothing of the compiler.  codegen/ builds one in memory (JIT) or
 * writes it out as C initializers into model.so (AOT); runtime/ executes
 * it on a device (cuda, or emu on the CPU).  Plain data only, so the same
 * struct serves both: no pointers into compiler memory, strings and
 * arrays owned by whoever built the plan.
 *
 * Memory.  A model has four spaces, each one flat byte range on the
 * device: WEIGHTS (all parameters, loaded once), ARENA (every
 * intermediate and scratch buffer at offsets fixed by the compiler),
 * INPUT i and OUTPUT i (one buffer per model input/output).  WEIGHTS
 * ends with the derived region, [weights_bytes, weights_bytes +
 * derived_bytes): values computed from the weights alone (bn-fold's
 * folded weights, weight casts), written by the init steps once after
 * the weights change and only read by the steps of a run.  A buffer is
 * named by its space and byte offset (RtRef), so the plan is position
 * independent and an aliasing bug in the offsets shows up as wrong
 * numbers on every device.  STATUS (version 3) is where kernels that read
 * indices report one out of range (RT_STATUS_WORDS); the runtime zeroes
 * it and reads it after every run.  SYNC (version 11) holds the words
 * blocks of one launch count their arrivals on (split-K's tiles): zero
 * when the model opens, and every launch leaves the words it uses zero.
 *
 * Code and data.  The kernel source, the binaries, the kernel table and
 * its contracts (RtContract: what a kernel touches when launched so) are
 * the plan's code; the steps, their arguments, the tensors and the sizes
 * are its data, and rt_plan_validate checks every one of them against
 * the code's contracts and the spaces' sizes.
 *
 * Sealed plans (a model.so's) carry checksums of every part, which the
 * runtime verifies (and the memory every table and blob must lie in)
 * before it reads anything else. */
#ifndef DLCRT_PLAN_H
#define DLCRT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define RT_PLAN_MAGIC 0x444c4350u /* "DLCP" */
#define RT_PLAN_VERSION 16u
#define RT_MAX_RANK 8

typedef enum {
  RT_SPACE_WEIGHTS,
  RT_SPACE_ARENA,
  RT_SPACE_INPUT,
  RT_SPACE_OUTPUT,
  RT_SPACE_STATUS,
  RT_SPACE_SYNC,
} RtSpace;

/* One report of an index check in STATUS, per checked axis of a launch:
 * int64 words {position + 1 (0: none), the index as read, the axis, its
 * size}.  A kernel keeps the lowest position (the element in the
 * reference interpreter's order) that had a bad index on that axis. */
#define RT_STATUS_WORDS 4
/* The axis word of a check's report (the op `check`, version 9): the
 * run fails with the step's origin, which is the whole message. */
#define RT_STATUS_CHECK (-1)

typedef struct RtRef {
  uint32_t space; /* RtSpace */
  uint32_t index; /* which input/output for those spaces; 0 otherwise */
  uint64_t offset;
} RtRef;

/* Element types as the runtime and its files know them (the order of
 * the compiler's DType; BOOL is one byte, 0 or 1; U8 an unsigned byte). */
typedef enum {
  RT_DT_F32, RT_DT_F16, RT_DT_BF16, RT_DT_I8, RT_DT_I32, RT_DT_I64, RT_DT_BOOL, RT_DT_U8,
  RT_DT_F64, RT_DT_I16, RT_DT_U16, RT_DT_U32, RT_DT_U64, RT_DT_COUNT
} RtDTypeCode;

typedef struct RtTensorDesc {
  const char *name;
  uint32_t dtype; /* RtDTypeCode */
  uint32_t rank;
  int64_t dims[RT_MAX_RANK];
  uint64_t nbytes;
  /* weights: offset in WEIGHTS; inputs and outputs: their own space, or
   * an output (version 10) exactly one weight's bytes: a training step's
   * update written over its param in place, which the run's steps may
   * then write (and the run leaves on the device). */
  RtRef where;
  /* Version 15, outputs only: 1 + the output (an i64 scalar, after every
   * output that has no such mark and is none) holding the run-time
   * length of axis length_axis, which dims[] only bounds (a NonZero's
   * result, docs/runtime.md); 0: none. */
  uint32_t length_output;
  uint32_t length_axis;
} RtTensorDesc;

typedef enum { RT_ARG_PTR, RT_ARG_I32, RT_ARG_I64, RT_ARG_F32 } RtArgKind;

/* One kernel argument, in the kernel's parameter order: data, checked
 * against the launch's RtContract. */
typedef struct RtArg {
  uint32_t kind; /* RtArgKind */
  RtRef ref;     /* RT_ARG_PTR: device address of ref */
  int64_t i;     /* RT_ARG_I32 / RT_ARG_I64 */
  float f;       /* RT_ARG_F32 */
} RtArg;

typedef enum { RT_ACCESS_READ = 1, RT_ACCESS_WRITE = 2 } RtAccess;

/* What a kernel may do with one parameter under one contract. */
typedef struct RtParam {
  uint32_t kind;   /* RtArgKind: what the launch must pass */
  uint32_t access; /* RT_ARG_PTR: RtAccess bits */
  uint64_t nbytes; /* RT_ARG_PTR: the bytes from the argument's address the kernel may touch */
  int64_t lo, hi;  /* RT_ARG_I32/I64: the values nbytes holds for (a size: one value) */
} RtParam;

/* A kernel's launch contract, recorded by codegen from the kernel IR:
 * launched with this grid, block and dynamic shared memory and with
 * integer arguments in [lo, hi], the kernel touches at most nbytes from
 * each pointer argument, and writes only through those with
 * RT_ACCESS_WRITE.  A kernel text serves several contracts (a map over
 * 100 and one over 1000 elements). */
typedef struct RtContract {
  uint32_t kernel; /* index into RtPlan.kernels */
  uint32_t grid[3], block[3];
  uint32_t dynamic_shared_bytes;
  uint32_t n_params;
  const RtParam *params;
} RtContract;

typedef struct RtLaunch {
  uint32_t kernel;   /* index into RtPlan.kernels */
  uint32_t contract; /* index into RtPlan.contracts: grid, block and args must keep it */
  uint32_t grid[3], block[3];
  uint32_t dynamic_shared_bytes;
  uint32_t n_args;
  const RtArg *args;
} RtLaunch;

/* What a float GEMM does to each element before C is stored (cuBLASLt's
 * epilogues of the same names): BIAS adds bias[j], RELU_BIAS then takes
 * max(x, 0), GELU_BIAS then PyTorch's gelu(x, approximate="tanh").
 * BGRAD (version 8) leaves C alone and writes bias instead: bias[i] = the
 * sum over p of op(A)[i][p], m values (a linear's bias gradient beside
 * its weight gradient dy^T x, with A = dy; cuBLASLt's BGRADB, its B being
 * our A), summed in f32 and rounded once into dtype; only with batch 1,
 * alpha 1 and beta 0, the bias apart from A, B and C. */
typedef enum {
  RT_EPILOGUE_NONE, RT_EPILOGUE_BIAS, RT_EPILOGUE_RELU_BIAS, RT_EPILOGUE_GELU_BIAS, RT_EPILOGUE_BGRAD,
  RT_EPILOGUE_COUNT
} RtEpilogue;

/* Row-major, strided-batched GEMM:
 *   for b in [0, batch):
 *     C_b[m x n] = epilogue(alpha * op(A_b) @ op(B_b) + beta * Cin_b)
 * op(A) is A (stored m x k, leading dimension lda) or, with trans_a, the
 * transpose of A stored k x m.  Likewise B (k x n, or n x k with
 * trans_b).  X_b starts at X + b * stride_x elements.  Inputs in dtype,
 * accumulation in f32 (TF32 off), the epilogue on the f32 sum, C rounded
 * once into dtype.  Cin is c_in (version 9), laid out as C (ldc,
 * stride_c): C itself (a sum accumulated in place) or bytes apart from
 * it (a residual added on the way: cuBLASLt's C beside its D); read
 * only when beta is not 0, and all zero when beta is 0.  cuBLASLt adds
 * beta * C before the epilogue's bias and activation, so residual +
 * act(A @ B + bias) is one GEMM only without an act.  The epilogue's bias is n contiguous values of dtype,
 * bias_b[j] added to column j of every row of batch b, where bias_b
 * starts at bias + b * stride_bias elements (version 7; 0: one bias for
 * every batch, the only value a GEMM without an epilogue may have).  The cuda
 * device turns this into the column-major cuBLASLt call; emu runs it on
 * the CPU.
 *
 * dtype I8 is the int8 product: A and B i8, C i32, the sums exact in
 * int32 (wrapping past 2^31), alpha 1, beta 0 and no epilogue.  cuBLAS
 * runs it only with lda, ldb (and batch strides) multiples of 4 and A, B
 * 4-byte aligned; codegen gives any other shape a kernel of its own. */
typedef struct RtGemm {
  uint32_t dtype; /* RtDTypeCode: F32, F16, BF16, or I8 (C in I32) */
  uint32_t trans_a, trans_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t batch, stride_a, stride_b, stride_c;
  float alpha, beta;
  RtRef a, b, c;
  /* Version 4. */
  uint32_t epilogue; /* RtEpilogue */
  RtRef bias;        /* epilogue != NONE: n values of dtype per batch (BGRAD: m, written) */
  /* Version 7: batch b's bias starts stride_bias elements after batch
   * b - 1's (several linears of one input in one GEMM). */
  int64_t stride_bias;
  /* Version 9: where beta * C is read from (above). */
  RtRef c_in;
  /* Version 14: nonzero for an f32 gemm whose products may run on the
   * tensor cores with the operands as tf32 (--tf32: cuBLAS's
   * CUBLAS_COMPUTE_32F_FAST_TF32; emu rounds them by cvt.rna's rule). */
  uint32_t tf32;
} RtGemm;

/* What an all-reduce makes of the ranks' values (version 8). */
typedef enum { RT_REDUCE_MEAN, RT_REDUCE_SUM, RT_REDUCE_COUNT } RtReduce;

typedef struct RtCopy {
  RtRef dst, src;
  uint64_t nbytes;
  uint32_t reduce; /* RT_STEP_ALLREDUCE: RtReduce; 0 in a copy */
} RtCopy;

/* RT_STEP_ALLREDUCE (version 6): copy's bytes (f32) from src to dst, then
 * the start of dst's replacement by its mean over the ranks of a
 * data-parallel job (or, version 8, by their sum over the ranks of a
 * tensor-parallel job: copy.reduce), through the communicator the host set
 * (dlrt_set_comm); without one, a copy.  One of 0 bytes waits for every
 * all-reduce started before it: codegen puts it before the first step
 * that reads a result, so the all-reduces overlap the steps between. */
typedef enum { RT_STEP_LAUNCH, RT_STEP_GEMM, RT_STEP_COPY, RT_STEP_ALLREDUCE, RT_STEP_BRANCH, RT_STEP_REPEAT } RtStepKind;

/* RT_STEP_BRANCH (version 9): an ONNX If decided at run time.  The byte
 * at cond is a bool (0 or 1) that earlier steps computed; when it is not
 * `when`, the next `skip` steps are skipped, a branch's steps that the run
 * does not take.  Branches nest: the skipped steps may hold branches
 * whose own steps end inside them.  Only in a run's steps (not init
 * steps, not the updates); the runtime reads the byte on the host (a
 * synchronous 1-byte copy on cuda), so a plan with branches runs
 * uncaptured.  Whatever a skipped step would have written keeps stale
 * bytes, which only a `where` on the same condition reads (and does not
 * select). */
/* RT_STEP_REPEAT (version 16): the end of a loop of the plan (the ops
 * loop_begin and loop_end, docs/ir.md).  When the byte at cond is
 * `when`, the run goes back `skip` steps, to the loop's first, and runs
 * its steps again; else on.  The loop's steps are a branch's, entered
 * when the loop's enter holds, so the same rules hold (the host reads
 * the byte; a plan with loops runs uncaptured). */
typedef struct RtBranch {
  RtRef cond;
  uint32_t when; /* 0 or 1 */
  uint32_t skip;
} RtBranch;

typedef struct RtStep {
  uint32_t kind;     /* RtStepKind */
  const char *label; /* what it computes, for --emit=plan and profiles ("conv2d %12") */
  /* The op as the reference interpreter names it in errors ("model.dl:4:7:
   * gather", or "gather" without a location); NULL when unknown. */
  const char *origin;
  RtLaunch launch;
  RtGemm gemm;
  RtCopy copy;
  RtBranch branch; /* version 9; RT_STEP_REPEAT's too */
} RtStep;

typedef struct RtKernel {
  const char *name; /* extern "C" __global__ name in source */
  /* The emu device runs a block's threads one after another when the
   * kernel never synchronizes; only kernels with barriers or warp
   * shuffles need the fiber scheduler. */
  uint32_t uses_barriers;
  uint32_t static_shared_bytes;
  /* RtCoop: whether the kernel has a grid-wide barrier (dl_grid_sync),
   * which needs every block of a launch resident at once: the cuda
   * device launches it with cuLaunchCooperativeKernel, and emu runs all
   * its blocks together.  Such a kernel also has uses_barriers. */
  uint32_t cooperative;
  /* Version 13: which of the plan's code parts (RtPlan.n_code_parts)
   * holds it: NVRTC compiles the parts side by side, each to a module
   * of its own. */
  uint32_t part;
} RtKernel;

/* At most this many code parts: a plan's NVRTC work splits over as many
 * threads. */
#define RT_MAX_CODE_PARTS 16u

typedef enum {
  RT_COOP_NONE = 0,
  /* Version 8: the launch's grid exactly, checked at load to fit the
   * device (a persistent recurrent kernel: a block per slice of W_hh). */
  RT_COOP_EXACT = 1,
  /* Version 12: any grid of at most the launch's blocks does the same
   * work (its blocks walk the launch's with a stride of the grid: a
   * chain of kernels, docs/kernels.md), so the device launches as many
   * as it holds at once. */
  RT_COOP_STRIDE = 2,
} RtCoop;

/* Precompiled device code for one architecture (AOT). */
typedef struct RtBinary {
  const char *arch; /* "sm_90", or "compute_90" for PTX */
  uint32_t part;    /* the code part it holds (RtKernel.part) */
  const void *data;
  uint64_t size;
} RtBinary;

/* The parts a seal checksums, each on its own so that a corrupt model
 * says which part is damaged. */
typedef enum {
  RT_SEAL_HEADER,  /* RtPlan's own fields and the model name */
  RT_SEAL_TENSORS, /* weights, inputs, outputs */
  RT_SEAL_KERNELS, /* kernels and contracts */
  RT_SEAL_STEPS,   /* init steps and steps, with their arguments */
  RT_SEAL_SOURCE,
  RT_SEAL_WEIGHTS, /* weights_data */
  RT_SEAL_BINARIES,
  RT_SEAL_COUNT
} RtSealPart;

#define RT_PLAN_SEALED 0x5345414cu /* "SEAL" */

typedef struct RtPlan {
  uint32_t magic;   /* RT_PLAN_MAGIC */
  uint32_t version; /* RT_PLAN_VERSION: a model.so from another version is refused */
  const char *model_name;
  const char *source; /* CUDA C of every kernel, NUL-terminated */
  /* 1 to RT_MAX_CODE_PARTS (0 reads as 1): with more than one, each
   * kernel's text in source sits inside `#if !defined(DL_PART) ||
   * DL_PART == part`, so that defining DL_PART compiles one part, and
   * the whole text (emu, the SASS tests) all of them. */
  uint32_t n_code_parts;
  uint32_t n_kernels;
  const RtKernel *kernels;
  uint32_t n_binaries;
  const RtBinary *binaries; /* may be empty: compile source with NVRTC */
  uint32_t n_steps;
  const RtStep *steps;
  uint64_t arena_bytes;
  uint64_t weights_bytes;
  uint32_t n_weights;
  const RtTensorDesc *weights;
  uint32_t n_inputs;
  const RtTensorDesc *inputs;
  uint32_t n_outputs;
  const RtTensorDesc *outputs;
  /* weights_bytes of data, laid out as weights[] says (embedded in a
   * model.so, or the JIT's blob); NULL: the host supplies them after
   * open (dlrt_set_weights, dlrt_load_weights). */
  const void *weights_data;
  /* Version 2: the init steps compute the derived region from the
   * weights.  The runtime runs them before the first run and again
   * before the next run after any weight is set, never on every run.
   * They may write only the derived region and ARENA (scratch: nothing
   * in the arena lives from init to a run), and never touch INPUT or
   * OUTPUT; the steps of a run may not write WEIGHTS, except its update
   * steps (version 5, below). */
  uint32_t n_init_steps;
  const RtStep *init_steps;
  uint64_t derived_bytes; /* WEIGHTS holds weights_bytes + derived_bytes */
  /* Version 3: every launch keeps a contract; STATUS for index checks;
   * the seal. */
  uint32_t n_contracts;
  const RtContract *contracts;
  uint64_t status_bytes;
  /* Version 5: a training step's updates.  The last n_update_steps of
   * steps are copies of an OUTPUT (whole) over exactly one weight's
   * bytes, each weight at most once: the only writes a run makes to
   * WEIGHTS, after every step that reads them.  A run that has them
   * leaves the derived region stale, so the init steps run again before
   * the next run. */
  uint32_t n_update_steps;
  /* Version 11: bytes of SYNC (a multiple of 4: i32 words).  A kernel
   * argument there is written by its launch and left zero by it. */
  uint64_t sync_bytes;
  /* RT_PLAN_SEALED: seal[] holds a checksum of each part (RtSealPart),
   * which dlrt_open verifies after checking that every table, string and
   * blob lies inside the object the plan was loaded from; 0: a plan built
   * in this process (the JIT), trusted as memory.  Any other value is a
   * corrupt plan. */
  uint32_t sealed;
  uint64_t seal[RT_SEAL_COUNT];
} RtPlan;

#endif
