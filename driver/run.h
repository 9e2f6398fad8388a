/* `dlcc run`'s options and the pieces of run.c that pipeline-parallel
 * inference (run_pipe.c) shares: reading and checking inputs, drawing
 * random ones, printing and writing outputs. */
#ifndef DLCC_DRIVER_RUN_H
#define DLCC_DRIVER_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/dist.h"
#include "driver/driver.h"
#include "dlcc.h"
#include "ir/eval.h"
#include "ir/names.h"
#include "runtime/tensorio.h"

typedef struct InputArg {
  const char *name, *path;
  RtTensor data; /* read before the model compiles: its shape binds free dims */
  bool read;
} InputArg;

typedef struct RunOptions {
  const char *model_path;
  const char *weights;
  bool init_random; /* --init=random: also over an .onnx file's own weights */
  const char *output_dir;
  const char *backend;
  uint64_t seed;
  int bench; /* --bench=N: time N more runs */
  bool verbose; /* --verbose: how the runtime ran it */
  int profile;  /* --profile[=N]: time each step once, print the N slowest (0: off) */
  int tp;       /* --tensor-parallel=T: this process is one of T ranks */
  int pipeline; /* --pipeline=S: this process holds one of S stages (run_pipe.c) */
  int micro;    /* --micro-batches=M, 0 when not given */
  int dist_timeout; /* --dist-timeout=S, 0 when not given */
  Dist *dist;   /* with tp > 1: the ranks; rank 0 prints and writes */
  int n_inputs;
  InputArg inputs[64];
  dlc_input_shape input_shapes[64];
  DriverQuant quant;
  dlc_options api;
  dlc_define defines[DRIVER_MAX_DEFINES];
} RunOptions;

/* Reads every --input file (their shapes go to o->api.input_shapes);
 * false after a message. */
bool run_read_inputs(RunOptions *o);
/* An --input file against the type the model expects: false with the
 * message (the file's type and the model's, NumPy's fix) in err. */
bool run_input_matches(const InputArg *in, const dlc_tensor_info *info, char *err, size_t errlen);
/* Input `info` drawn at random from seed as a one-process run draws it
 * (floats U(-1, 1), indices below index_bound); false after a message. */
bool run_random_input(const dlc_tensor_info *info, uint64_t seed, Tensor *t);
/* One output's line: name, type, min, max, mean, first values. */
void run_print_summary(const dlc_tensor_info *info, const void *data);
/* --profile's table on stderr: the top slowest of the n steps (a
 * dlc_profile's), their share, TFLOP/s and GB/s, then the sum. */
void run_print_profile(const char *backend, dlc_step_time *steps, int n, int top);

/* --output-dir: the folder, opened once, and each output's file in it. */
typedef struct OutputDir {
  const char *path;
  int fd;
  SafeName *files;
} OutputDir;

/* name_of(model, i): output i's name, for the n outputs.  False after a
 * message. */
bool run_output_dir_open(OutputDir *d, const char *path, int n, const char *(*name_of)(void *, int), void *model);
bool run_write_output(const OutputDir *d, int i, const dlc_tensor_info *info, const void *data, size_t nbytes);
void run_output_dir_close(OutputDir *d);

/* --pipeline=S (run_pipe.c): this process as stage w % S of pipeline
 * w / S in an mpirun of D * S ranks; returns the exit status. */
int run_pipeline(RunOptions *o);
/* The same in a launch already joined (dist_init), which it ends:
 * `dlcc run --tensor-parallel=T` on D·T ranks runs as D pipelines of one
 * stage of T ranks. */
int run_pipeline_in(RunOptions *o, Dist *launch);

#endif
