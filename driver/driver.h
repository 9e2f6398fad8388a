/* Pieces the dlcc command's subcommands share. */
#ifndef DLCC_DRIVER_H
#define DLCC_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "api/calibrate.h"
#include "api/quantreport.h"
#include "codegen/codegen.h"
#include "dlcc.h"
#include "frontend/ast.h"
#include "passes/loss.h"
#include "passes/pass.h"

/* "NAME=INTEGER" -> d (d->name malloc'd). */
bool driver_parse_define(const char *text, Define *d);
/* argv[*i] is -D: its NAME=INTEGER (joined, -DN=4, or the next word,
 * where *i then moves) as defs[*n], *n counting it, at most cap; false
 * after printing why not. */
bool driver_take_define(int argc, char **argv, int *i, Define *defs, int *n, int cap);

/* Words of a command line (args.c).  "--flag=value": the value, or NULL
 * when arg is another flag. */
const char *driver_eq_value(const char *arg, const char *flag);
/* "--flag=value" or "--flag value" at argv[*i] (*i then moves past the
 * value): the value, or NULL when argv[*i] is another flag. */
const char *driver_flag_value(int argc, char **argv, int *i, const char *flag);
/* The number text of option when it lies in [lo, hi]; else false after
 * printing "OPTION expects EXPECTS, got 'TEXT'". */
bool driver_int_value(const char *option, const char *text, long lo, long hi, const char *expects, int *out);
/* --loop-bound's value (1 to ONNX_MAX_UNROLL steps) into *out; false
 * after printing why. */
bool driver_loop_bound(const char *text, int *out);
bool driver_real_value(const char *option, const char *text, double lo, double hi, const char *expects,
                       double *out);
/* What dlcc run and dlcc train store the words below into. */
enum { DRIVER_MAX_DEFINES = 64 };
typedef struct DriverModelWords {
  const char **model_path;
  dlc_options *api;
  dlc_define *defines; /* DRIVER_MAX_DEFINES of them; api->defines is set by the caller */
} DriverModelWords;
/* The last words dlcc run and dlcc train take, after their own flags:
 * -D NAME=VALUE, -O0/-O1/-O2, --recompute[=LIST], the model file; any
 * other option is unknown for cmd.  0 when taken, 1 after printing an
 * error. */
int driver_model_word(int argc, char **argv, int *i, const char *cmd, DriverModelWords *m);
/* -O0/-O1/-O2, --passes=..., --print-after=..., ... into po: 1 when arg
 * is one of them, 0 when not, -1 after printing an error. */
int driver_pass_option(const char *arg, PassOptions *po);
/* The kernel-IR passes' switches (--unroll=N, --no-unroll,
 * --no-vectorize) for cg_compile_opts. */
CgOptions driver_cg_options(const PassOptions *po);
/* The int8 flags dlcc and dlcc run share (docs/quantization.md). */
typedef struct DriverQuant {
  bool int8;              /* --quantize=int8 (--quantize=none: false) */
  const char *calibrate;  /* --calibrate=DIR */
  const char *method;     /* --calib-method=M as given; parsed into `parsed` */
  CalibMethod parsed;
  int max_samples;        /* --calib-samples=N; 0: all */
  const char *backend;    /* --calib-backend=B as given; parsed into `on` */
  CalibBackend on;
  const char *first_calib_flag; /* the first of --calibrate, --calib-*, for messages */
} DriverQuant;
/* --quantize=, --calibrate=, --calib-method=, --calib-samples=,
 * --calib-backend= into q:
 * 1 when arg is one of them, 0 when not, -1 after printing an error. */
int driver_quant_option(const char *arg, DriverQuant *q);
/* The flags together: int8 needs a folder, the folder needs int8, and
 * int8 does not combine with --precision=f16/bf16.  False after printing
 * why. */
bool driver_quant_check(const DriverQuant *q, DType precision);
/* The --help lines for those flags. */
extern const char driver_quant_usage[];
/* dlcc quant-report (quant_report.c): the pipeline runs with
 * api_quant_copy_calibrate around api_calibrate (copy), then
 * driver_quant_report runs the f32 copy and the int8 graph over the test
 * folder (the calibration folder when NULL) and prints the tables. */
typedef struct DriverReport {
  ApiCalibration *calibration;
  const char *test_dir;
  int max_samples; /* the first N test samples; 0: all */
  QuantCopyCalibrator copy;
  QuantSummary summary;
} DriverReport;
bool driver_quant_report(FILE *out, DriverReport *r, Graph *q, const TensorMap *params);

/* The loss flags (loss_flags.c): --loss=NAME, --loss-output=K,
 * --ignore-index=N, --label-smoothing=E, --smooth-l1-beta=B. */
typedef struct DriverLoss {
  const char *name; /* --loss as given; NULL: no loss */
  LossKind kind;
  int output;
  bool has_ignore, has_smoothing, has_beta, has_delta, reduction_sum, batchmean, log_target;
  int64_t ignore_index;
  double label_smoothing, beta, delta;
  /* --class-weights, --pos-weight: their values (loss_flags.c keeps
   * them to the process's end) and counts; NULL: not given */
  float *class_weight, *pos_weight;
  int64_t class_weight_count, pos_weight_count;
  const char *first_flag; /* the first flag other than --loss, for messages */
} DriverLoss;
/* 1 when arg is one of them (stored in d), 0 when not, -1 after printing
 * an error. */
int driver_loss_option(const char *arg, DriverLoss *d);
/* The spec the flags ask for (when d->name is set); false after printing
 * why they do not combine (a flag without --loss, or for another loss). */
bool driver_loss_check(const DriverLoss *d, LossSpec *out);
extern const char driver_loss_usage[];

/* `dlcc run ARGS`: argv holds what follows "run". */
int driver_run(int argc, char **argv);
/* `dlcc memplan FILE.csv [options]` (memplan.c): argv holds what follows
 * "memplan"; the answer to out, errors to err. */
int driver_memplan(int argc, char **argv);
int driver_memplan_to(int argc, char **argv, FILE *out, FILE *err);

/* `dlcc train MODEL --data DIR ...` (train.c): argv holds what follows
 * "train". */
int driver_train(int argc, char **argv);
/* `dlcc train MODEL --plan-parallel ...` (plan_parallel.c): the
 * scale-out estimate of every split, nothing run; argv as for
 * driver_train. */
int driver_plan_parallel(int argc, char **argv);
/* Whether path names an ONNX model (".onnx" after a name). */
bool driver_is_onnx(const char *path);

#endif
