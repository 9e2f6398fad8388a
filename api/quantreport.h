/* How far an int8 graph is from the f32 one it was made from (dlcc
 * quant-report, and the tests): takes the graph the quantize pass
 * received (a copy: the same Value ids), the quantized graph, the pass's
 * QuantSummary and batches of inputs; gives, per quantized product, the
 * error of its result against the f32 value it stands for, and per
 * output the largest error and, for classifiers, top-1 agreement.  Both
 * graphs run on the reference interpreter, whose int8 semantics the
 * generated kernels match bit for bit (tests/test_int8). */
#ifndef DLCC_API_QUANTREPORT_H
#define DLCC_API_QUANTREPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/eval.h"
#include "passes/pass.h"

typedef struct QuantErr {
  double ref_sq, err_sq; /* sums of f32^2 and (int8 - f32)^2 */
  double max_err, max_ref; /* largest |int8 - f32| and |f32| */
  int64_t count;
} QuantErr;

typedef struct QuantOutputErr {
  const char *name;
  QuantErr err;
  /* Rank >= 2 float outputs: rows (all but the last axis) whose argmax
   * over the last axis agrees. */
  bool classifier;
  int64_t rows, agree;
} QuantOutputErr;

typedef struct QuantReport {
  const QuantSummary *summary;
  QuantErr *layers; /* summary->n_layers */
  int n_outputs;
  QuantOutputErr *outputs;
  int batches;
} QuantReport;

/* ref: the f32 graph as the quantize pass received it (a copy with the
 * same value ids); q: the quantized graph; the summary the pass filled. */
void api_quant_report_init(QuantReport *r, const Graph *q, const QuantSummary *s);
/* Runs both graphs on one batch of inputs and adds what they differ by.
 * False with the interpreter's message in err. */
bool api_quant_report_add(QuantReport *r, Graph *ref, Graph *q, const TensorMap *inputs,
                          const TensorMap *params, char *err, size_t errlen);
/* The two tables: per layer, then per output. */
void api_quant_report_print(FILE *f, const QuantReport *r);
void api_quant_report_free(QuantReport *r);

/* A calibrator for reports: keeps a copy of the f32 graph the quantize
 * pass receives (through the text format, so the copy's Value ids are the
 * ones QuantLayer.orig_value_id names), then asks the wrapped one.  ud is
 * this struct; f32 is NULL until the pass ran (a model without products
 * to quantize never calls it). */
typedef struct QuantCopyCalibrator {
  PassCalibrateFn inner;
  void *inner_ud;
  Graph *f32;
} QuantCopyCalibrator;
bool api_quant_copy_calibrate(void *ud, Graph *g, int n, const Value *const *values, double *amax);

/* RMS error relative to the RMS of the f32 values (0 for all-zero f32). */
double api_quant_rel_rms(const QuantErr *e);

#endif
