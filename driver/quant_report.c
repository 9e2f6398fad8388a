/* dlcc quant-report: how far the int8 model is from the f32 one.  The
 * compile flow of dlcc.c runs the pipeline with --quantize=int8 and
 * api_quant_copy_calibrate (which keeps the f32 graph the quantize pass
 * receives); this runs both graphs over the test samples
 * (api/quantreport.c) and prints the tables. */
#include <stdlib.h>
#include <string.h>

#include "api/quantreport.h"
#include "driver/driver.h"

bool driver_quant_report(FILE *out, DriverReport *r, Graph *q, const TensorMap *params) {
  Ctx *c = q->ctx;
  const QuantSummary *s = &r->summary;
  Graph *f32 = r->copy.f32;
  if (!f32) {
    diag_error(c, (SrcLoc){0}, "quant-report: the model has no product to quantize "
                               "(conv2d, linear or matmul with a weight operand)");
    return false;
  }
  const char *dir = r->test_dir ? r->test_dir : r->calibration->dir;
  ApiSamples *samples = api_samples_open(f32, dir);
  if (!samples) return false;
  int n = api_samples_count(samples);
  if (r->max_samples > 0 && n > r->max_samples) n = r->max_samples;
  QuantReport rep;
  api_quant_report_init(&rep, q, s);
  bool ok = true;
  for (int k = 0; k < n && ok; k++) {
    TensorMap inputs;
    char err[4096];
    ok = api_samples_load(samples, k, &inputs);
    if (ok && !(ok = api_quant_report_add(&rep, f32, q, &inputs, params, err, sizeof err)))
      diag_error(c, (SrcLoc){0}, "quant-report: sample %d of %s: %s", k + 1, dir, err);
  }
  api_samples_release(samples);
  if (ok) {
    fprintf(out, "int8 against f32 on %d sample%s from %s (reference interpreter); calibrated on %d from %s\n\n",
            n, n == 1 ? "" : "s", dir, r->calibration->n_samples, r->calibration->dir);
    api_quant_report_print(out, &rep);
  }
  api_quant_report_free(&rep);
  return ok;
}
