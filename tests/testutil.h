/* Helpers several Check suites share. */
#ifndef DLCC_TESTUTIL_H
#define DLCC_TESTUTIL_H

#include "ir/eval.h"
#include "runtime/plan.h"

/* Runs plan p once on the emu device: weights from params by the plan's
 * weight names, inputs by the plan's input names.  Returns the outputs in
 * plan order (malloc'd; free each with ir_tensor_free, then the array).
 * Any failure fails the calling test. */
Tensor *test_run_emu(const RtPlan *p, const TensorMap *params, const TensorMap *inputs);

/* Compiles CUDA source with NVRTC for arch ("sm_90"): fails the calling
 * test with NVRTC's log when it does not compile to a non-empty cubin.
 * Nothing when configure found no NVRTC. */
void test_nvrtc(const char *source, const char *arch);

#endif
