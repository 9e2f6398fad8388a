/* int8 calibration on the compiled model: takes the f32 graph the
 * quantize pass received and the values whose ranges it needs, compiles
 * a copy of it whose outputs are exactly those values (so fusion must
 * store each one) through the model's own pipeline and codegen, opens it
 * on a GPU (cuda) or the CPU emulator (emu), and runs it sample by
 * sample.  api_calibrate feeds what comes back into the same histograms
 * the reference interpreter's observer fills, so methods, folder checks
 * and messages do not depend on where the model ran. */
#ifndef DLCC_API_CALIB_DEVICE_H
#define DLCC_API_CALIB_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "api/calibrate.h"

typedef struct CalibDevice CalibDevice;

/* Opens cal->backend (EMU, CUDA, or AUTO: CUDA when a GPU answers) for
 * values[0..n) of g, with cal->params bound as the weights.  True with
 * *out set; true with *out NULL when AUTO found no GPU (nothing is
 * reported: the caller runs the interpreter); false after reporting to
 * g->ctx why the device or the copy could not be made. */
bool api_calib_device_open(Graph *g, int n, const Value *const *values, const ApiCalibration *cal,
                           CalibDevice **out);
/* "cuda" or "emu". */
const char *api_calib_device_name(const CalibDevice *d);
/* Runs one sample.  False with the runtime's message in err. */
bool api_calib_device_run(CalibDevice *d, const TensorMap *inputs, char *err, size_t errlen);
/* After a run: the distinct values asked for, in graph order (as the
 * interpreter computes them); result j is the value in g and its data,
 * valid until the next run. */
int api_calib_device_count(const CalibDevice *d);
const Value *api_calib_device_result(const CalibDevice *d, int j, Tensor *data);
void api_calib_device_close(CalibDevice *d);

#endif
