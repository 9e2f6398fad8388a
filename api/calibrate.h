/* int8 calibration: measures the range of activations by running the
 * reference interpreter over a folder of sample inputs, for the quantize
 * pass (passes/pass.h's PassCalibrateFn).  Each requested value gets a
 * histogram of |x| over every sample, from which a method picks amax:
 * the largest |x| (minmax), a percentile of |x|, or TensorRT's entropy
 * threshold.  docs/quantization.md is the user's guide. */
#ifndef DLCC_API_CALIBRATE_H
#define DLCC_API_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/eval.h"

enum {
  CALIB_BINS = 2048,  /* histogram bins over [0, range) */
  CALIB_LEVELS = 128, /* int8 symmetric: the levels of one sign */
};
#define CALIB_DEFAULT_PERCENTILE 99.99

typedef enum { CALIB_MINMAX, CALIB_PERCENTILE, CALIB_ENTROPY } CalibMethodKind;

typedef struct CalibMethod {
  CalibMethodKind kind;
  double percentile; /* CALIB_PERCENTILE: in (0, 100] */
} CalibMethod;

/* The method when none is asked for. */
CalibMethod api_calib_default_method(void);
/* "minmax", "percentile" (99.99), "percentile=P" with 0 < P <= 100, or
 * "entropy".  False with the reason in err. */
bool api_calib_parse_method(const char *text, CalibMethod *out, char *err, size_t errlen);

/* A histogram of |x| whose range grows as larger values arrive: it starts
 * at the first nonzero tensor's largest |x| and doubles, merging pairs of
 * adjacent bins, until it holds the new largest.  So the range stays
 * under twice the largest |x|, at least half the bins are in use, and
 * one pass over the data suffices.  Zeros count, in bin 0. */
typedef struct CalibHist {
  double width;  /* of one bin; 0 until a nonzero |x| arrived */
  double max;    /* the largest |x| seen, exactly */
  int64_t total; /* values seen */
  int64_t counts[CALIB_BINS];
} CalibHist;

void api_calib_hist_init(CalibHist *h);
/* Adds every element of t.  Returns -1, or the index of the first NaN or
 * infinity in t, in which case nothing was added. */
int64_t api_calib_hist_add(CalibHist *h, const Tensor *t);
/* The range method m picks, in [0, h->max]; 0 for a histogram of zeros. */
double api_calib_hist_amax(const CalibHist *h, const CalibMethod *m);

/* Where the f32 model runs on the samples.  REF, the zero, is the
 * reference interpreter; the others compile a copy of the graph with the
 * requested values as outputs and run its kernels (calib_device.h): on
 * a GPU (CUDA), on the CPU emulator (EMU), or on a GPU when one answers
 * and else the interpreter (AUTO: on the CPU the interpreter is the
 * faster of the two for most models, docs/quantization.md). */
typedef enum { CALIB_ON_REF, CALIB_ON_AUTO, CALIB_ON_EMU, CALIB_ON_CUDA } CalibBackend;

/* "ref", "auto", "emu" or "cuda".  False with the reason in err. */
bool api_calib_parse_backend(const char *text, CalibBackend *out, char *err, size_t errlen);

struct PassOptions;

/* What a calibration reads: the folder of samples, and the weights to
 * evaluate the graph with. */
typedef struct ApiCalibration {
  const char *dir;
  CalibMethod method;
  const TensorMap *params;
  int max_samples; /* the first N samples by name; 0: all */
  CalibBackend backend;
  /* The pipeline the model compiles with: a device backend compiles its
   * copy at the same level (NULL: -O0).  Dumps and statistics are not
   * repeated for the copy. */
  const struct PassOptions *passes;
  /* Filled in by api_calibrate, for reports. */
  int n_samples;
  double seconds;
  const char *ran_on; /* "ref", "emu" or "cuda" */
} ApiCalibration;

/* A PassCalibrateFn; ud is an ApiCalibration.  For a model with one
 * input each .npy file in dir is a sample (or each in dir/<input name>
 * when dir has none); for several inputs each input reads the .npy files
 * of dir/<input name>, as many in each, matched in name order.  Every
 * sample must have exactly its input's dtype and shape and only finite
 * values.  Errors go to g->ctx's diagnostics. */
bool api_calibrate(void *ud, Graph *g, int n, const Value *const *values, double *amax);

/* A folder of samples laid out as for calibration, for other readers
 * (dlcc quant-report's test inputs): the same files, checks and
 * messages.  open reports problems to g->ctx and returns NULL; load
 * reads sample k (0 <= k < count) into inputs, valid until the next load
 * or release; the set itself lives in g->ctx's arena. */
typedef struct ApiSamples ApiSamples;
ApiSamples *api_samples_open(Graph *g, const char *dir);
int api_samples_count(const ApiSamples *s);
bool api_samples_load(ApiSamples *s, int k, TensorMap *inputs);
void api_samples_release(ApiSamples *s);

/* The weights a calibration evaluates with: the safetensors file at path
 * bound to g's params (api_check_weights), or with path NULL the random
 * values ir_init_params gives for seed, which are what dlcc run and
 * dlc_init_weights bind.  False with the problems reported to c. */
bool api_calib_params(Ctx *c, Graph *g, const char *path, const TensorMap *own, uint64_t seed, TensorMap *out);

#endif
