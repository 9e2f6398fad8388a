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
 * ("scratch conv2d %3").  For checks and for a memory planner. */
typedef struct CgBuffer {
  const char *what;
  RtRef ref;
  uint64_t nbytes;
} CgBuffer;

typedef struct CgResult {
  const char *source; /* == plan->source */
  RtPlan *plan;
  int n_buffers;
  const CgBuffer *buffers; /* every arena allocation, in order */
} CgResult;

/* Lowers g (already verified).  False after reporting errors to g->ctx's
 * diag (a dtype codegen does not handle yet, ...).  Internal errors unwind
 * through the context's guard. */
bool cg_compile(Graph *g, CgResult *out);

/* The plan as text, for --emit=plan: spaces, tensors, kernels, steps. */
void cg_print_plan(FILE *f, const RtPlan *p);

/* Where a ref points, as the plan text writes it: "arena+256", "in0+0". */
void cg_print_ref(FILE *f, RtRef r);

#endif
