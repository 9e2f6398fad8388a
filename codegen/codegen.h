/* Code generation: takes a verified graph, returns the CUDA C source of its
 * kernels and the launch plan (runtime/plan.h) that runs them: weights
 * layout, arena offsets, kernel launches, GEMM calls and copies.  Both
 * live in the graph's Ctx arena. */
#ifndef DLCC_CODEGEN_H
#define DLCC_CODEGEN_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h"
#include "runtime/plan.h"

/* One range of the arena the plan uses: a value ("%12") or scratch
 * ("scratch conv2d %3"), at the offset the memory planner gave it. */
typedef struct CgBuffer {
  const char *what;
  RtRef ref;
  uint64_t nbytes;
  /* live over steps [lower, upper), numbered the plan's init steps first,
   * then a run's steps; empty: no step uses it */
  int lower, upper;
  int inplace_of;   /* the buffer whose bytes it takes over at step lower, or -1 */
} CgBuffer;

typedef struct CgResult {
  const char *source; /* == plan->source */
  RtPlan *plan;
  int n_buffers;
  const CgBuffer *buffers; /* every arena allocation, in order */
  /* The memory plan, for --stats: plan->arena_bytes against the sum of
   * every buffer a step uses (no reuse) and the most bytes live at one
   * step (no plan does better); sizes rounded up to the 256-byte
   * alignment. */
  uint64_t naive_bytes, lower_bound;
  const char *memplan; /* the heuristic that won ("size/best-fit") */
  int n_inplace;       /* outputs written over an input that died there */
  /* Per step, the plan's init steps first: FLOPs and minimum bytes
   * (docs/cost.md). */
  const IrCost *step_costs;
  /* Per step, init steps first: the node it was made for (a member of
   * the fusion group it computes, when it computes one). */
  const Node *const *step_nodes;
} CgResult;

/* Lowers g (already verified).  False after reporting errors to g->ctx's
 * diag (a dtype codegen does not handle yet, ...).  Internal errors unwind
 * through the context's guard. */
bool cg_compile(Graph *g, CgResult *out);

/* The kernel-IR passes' switches; a zeroed struct is the default. */
typedef struct CgOptions {
  int unroll;        /* --unroll=N: largest constant trip count unrolled (0: 8) */
  bool no_unroll;    /* --no-unroll: no loop is unrolled, not even by a schedule */
  bool no_vectorize; /* --no-vectorize: scalar loads and stores only */
  /* --tf32: f32 convolutions, attention and (cuBLAS's, RtGemm.tf32)
   * matrix products on tensor cores, their operands rounded to tf32
   * (docs/tensorcores.md and docs/attention.md give the error); off,
   * they stay exact */
  bool tf32;
  /* --no-tensor-cores: every convolution on the FMA kernel */
  bool no_tensor_cores;
  /* --no-wgmma: the tensor-core GEMM kernels without their wgmma side,
   * mma.sync on sm_90a too (docs/tensorcores.md) */
  bool no_wgmma;
  /* --no-gemm-batch: each linear its own GEMM, even beside others of
   * the same input (codegen/gemm_batch.c) */
  bool no_gemm_batch;
  /* --no-split-keys: attention's key tiles in one block per query block
   * even where few blocks fill the GPU (codegen/attention.c) */
  bool no_split_keys;
  /* --no-split-k: a convolution's tile sums all of K in one block, even
   * where its tiles are fewer than the SMs (tc_gemm.c, conv_igemm.c) */
  bool no_split_k;
  /* --no-persistent-rnn: every recurrent layer one step kernel per
   * timestep, even where one persistent kernel would fit (docs/kernels.md) */
  bool no_persistent_rnn;
  /* --no-update-in-place: a training step's update outputs computed apart
   * and copied over their params after the step (docs/training.md) */
  bool no_update_in_place;
  /* Independent kernels share launches (horizontal fusion, plan_build.c's
   * merge_target): dlcc and dlc_compile at -O1 and -O2 unless
   * --no-merge-launches; off by default here, so that a plan built
   * directly is a launch per kernel */
  bool merge_launches;
  /* With merge_launches, a kernel that reads what the launch before it
   * wrote may still join it, after a grid barrier (vertical fusion,
   * plan_build.c's chain_target) unless --no-chain-launches */
  bool no_chain_launches;
  /* Kernel text a code part holds at least (RtPlan.n_code_parts; 0:
   * 48 KiB): tests make it small to split small plans. */
  uint32_t code_part_bytes;
} CgOptions;

/* cg_compile with options (NULL: the defaults). */
bool cg_compile_opts(Graph *g, const CgOptions *o, CgResult *out);

/* The memory plan's checker: no two buffers live at a common step share
 * a byte (but for one written in place over the other at that step),
 * every buffer inside the arena, and every arena ref of a step inside a
 * buffer live at that step, and none live from an init step into a
 * run's steps (init runs once per weight change, a run many times).
 * False with the first fault in err.
 * cg_compile runs it on every plan. */
bool cg_check_memory(const CgResult *r, char *err, size_t len);

/* The plan as text, for --emit=plan: spaces, tensors, kernels, steps;
 * with costs (CgResult.step_costs, or NULL), each step's FLOPs and
 * minimum bytes at the end of its line. */
void cg_print_plan(FILE *f, const RtPlan *p);
void cg_print_plan_costs(FILE *f, const RtPlan *p, const IrCost *costs);

/* For --stats: the run's and the init steps' FLOPs and minimum bytes,
 * the run's arithmetic intensity, and its top steps by FLOPs. */
void cg_print_cost_stats(FILE *f, const CgResult *r, int top);
/* "2.1 GFLOP 12.3 MB" */
void cg_print_cost(FILE *f, IrCost c);
/* For --emit=dot after fusion (IrDotOptions.notes): by node id, what the
 * steps made for it do ("launch 4x16x1 of 256: 103.4 MFLOP 2.9 MB", init
 * steps marked "init"). */
const char **cg_dot_notes(Graph *g, const CgResult *r);

/* Where a ref points, as the plan text writes it: "arena+256", "in0+0". */
void cg_print_ref(FILE *f, RtRef r);

/* ---- ahead of time (aot.c, docs/aot.md) ---- */

struct TensorMap;

/* Besides DLRT_PLAN_SYMBOL, every model.so exports
 *   const char *dlrt_model_weights_path(void): an --external-weights
 *     model's safetensors file (the path recorded at build time, or
 *     $DLCC_WEIGHTS); NULL when the weights are embedded;
 *   int64_t dlrt_model_index_bound(int input): for an integer input used
 *     as gather indices, the exclusive bound of valid values; else 0. */
#define CG_AOT_WEIGHTS_PATH_SYMBOL "dlrt_model_weights_path"
#define CG_AOT_INDEX_BOUND_SYMBOL "dlrt_model_index_bound"

typedef struct CgAotOptions {
  const char *output;      /* the shared object: "model.so" */
  const char *header;      /* NULL: output with ".so" replaced by ".h" */
  const char *source_name; /* for the generated comments: "examples/mlp.dl" */
  /* Every weight by name (api_bind_weights, ir_init_params).  With
   * external_weights they are only read to write NAME.safetensors beside
   * model.so when weights_path is NULL. */
  const struct TensorMap *params;
  bool external_weights;   /* the plan carries no weights; the host loads them at open */
  const char *weights_path; /* external_weights: the safetensors file model.so records */
  int n_archs;             /* a cubin and PTX each: "sm_80", "sm_90" */
  const char *const *archs;
  bool keep_temps;         /* keep the generated C and blobs; a note says where */
} CgAotOptions;

/* Writes o->output (linked against libdlcrt by $CC, else cc) and its
 * header.  False after reporting to g->ctx's diag; then nothing is left
 * behind.  libdlcrt and plan.h are found through $DLCC_LIBDIR and
 * $DLCC_INCLUDEDIR, else beside the running binary (a build tree), else
 * where they were installed. */
bool cg_aot_build(Graph *g, const CgResult *cg, const CgAotOptions *o);

#endif
