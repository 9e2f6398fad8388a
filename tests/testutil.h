/* Helpers several Check suites share. */
#ifndef DLCC_TESTUTIL_H
#define DLCC_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend/ast.h"
#include "ir/eval.h"
#include "runtime/plan.h"

/* splitmix64: the tests' own random numbers, independent of ir/init.c,
 * the same on every machine.  Advances *state. */
static inline uint64_t test_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Runs plan p once on the emu device: weights from params by the plan's
 * weight names, inputs by the plan's input names.  Returns the outputs in
 * plan order (malloc'd; free each with ir_tensor_free, then the array).
 * Any failure fails the calling test. */
Tensor *test_run_emu(const RtPlan *p, const TensorMap *params, const TensorMap *inputs);
/* The same, but the run may fail: its DlrtStatus, its message in err
 * ("" on success), the outputs in *out on success (else NULL). */
int test_run_emu_status(const RtPlan *p, const TensorMap *params, const TensorMap *inputs, Tensor **out, char *err,
                        size_t errlen);

/* Compiles CUDA source with NVRTC for arch ("sm_90"): fails the calling
 * test with NVRTC's log when it does not compile to a non-empty cubin.
 * Nothing when configure found no NVRTC. */
void test_nvrtc(const char *source, const char *arch);

/* examples/<file> (under $top_srcdir) parsed, lowered with the given -D
 * values and verified, in c; for a job under c's guard.  NULL after
 * reporting why to c. */
Graph *test_lower_example(Ctx *c, const char *file, int n_defines, const Define *defines);

/* A .dl text (as "t.dl") parsed and lowered with default options into
 * g: a ctx_guard job (data a TestSource); g stays NULL after reporting
 * why to c. */
typedef struct TestSource {
  const char *text;
  Graph *g;
} TestSource;
int test_lower_source(Ctx *c, void *data);

/* g's IR text (ir_print), malloc'd. */
char *test_print_ir(Graph *g);

/* g's plan p on emu against ir_eval(g) on the same random data: params
 * by ir_init_params(seed), float inputs U(lo, hi), integer inputs whole
 * numbers in [0, hi) (or below g's index bound).  Every output element
 * within tol * (|want| + 0.1); NaN matches NaN, an infinity itself.
 * False (nothing checked) when the emu device cannot start here; any
 * mismatch fails the calling test. */
bool test_emu_matches_eval(Graph *g, const RtPlan *p, uint64_t seed, double lo, double hi, double tol);
/* The same, each output within tol of its largest magnitude or of 1,
 * whichever is larger (as test_rel_error, an infinity matching itself):
 * for sums whose terms cancel (gradients; attention's dq with one key
 * is 0 exactly, its rounding error not). */
bool test_emu_near_eval(Graph *g, const RtPlan *p, uint64_t seed, double lo, double hi, double tol);
/* Two plans of g on the same data as test_emu_matches_eval (tol 1e-5):
 * each output of other equal to p's bit for bit. */
bool test_emu_plans_equal(Graph *g, const RtPlan *p, const RtPlan *other, uint64_t seed, double lo, double hi);

/* The largest |got - want| over want's largest finite magnitude (at
 * least 1e-30): NaN in got counts as the worst, an infinity as 0 where
 * both are the same one and the worst where not. */
double test_rel_error(const Tensor *got, const Tensor *want);

#endif
