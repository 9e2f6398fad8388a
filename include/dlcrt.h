/* dlcrt: the runtime that runs a model compiled by dlcc, on a GPU
 * (backend "cuda") or on the CPU ("emu"), from a host C program or from
 * the code inside a model.so.  Takes a launch plan (struct RtPlan, built
 * by dlcc: in memory for JIT, as data inside model.so for AOT), returns
 * the model's outputs.
 *
 * Every function returns a DlrtStatus; on anything but DLRT_OK the
 * message is kept on the model (dlrt_error).  Nothing here exits or
 * aborts.
 *
 * Threads.  A model is used by one host thread at a time: calls on one
 * model from two threads at once must be serialized by the caller (a
 * mutex), and may come from a different thread each time.  Separate
 * models are independent: each has its own stream, staging, arguments
 * and graphs, so N threads each with its own dlrt_open of the same plan
 * or model.so run side by side (docs/runtime.md).
 *
 *     DlrtModel *m;
 *     if (dlrt_open_file("model.so", "auto", &m) != DLRT_OK) {
 *       fprintf(stderr, "%s\n", dlrt_error(m)); dlrt_close(m); return 1;
 *     }
 *     dlrt_set_input(m, 0, x, sizeof x);
 *     dlrt_run(m);
 *     dlrt_get_output(m, 0, y, sizeof y);
 *     dlrt_close(m); */
#ifndef DLCRT_H
#define DLCRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct RtPlan;
typedef struct DlrtModel DlrtModel;

typedef enum DlrtStatus {
  DLRT_OK = 0,
  DLRT_E_ARG,       /* bad argument: NULL, index or name unknown, size mismatch */
  DLRT_E_PLAN,      /* not a dlcc model, another version, or a corrupt plan: a checksum of a
                     * model.so's plan that does not match, a table or blob outside the
                     * library, an offset, size or launch outside its memory */
  DLRT_E_NO_DEVICE, /* the backend cannot be opened (no driver, no GPU) */
  DLRT_E_COMPILE,   /* the kernels could not be compiled or loaded */
  DLRT_E_DEVICE,    /* a device call failed (out of device memory, a launch) */
  DLRT_E_BROKEN,    /* the device is unusable (illegal address, assert): close the model */
  DLRT_E_STATE,     /* the model failed to open, or an input was never set */
  DLRT_E_IO,        /* a file could not be read (model.so, weights) */
  DLRT_E_NOMEM,     /* out of host memory */
  DLRT_E_INDEX,     /* an index in the data is out of range (gather, scatter, embedding): the
                     * message is the reference interpreter's, with the op's location */
  DLRT_E_CHECK      /* a check of the model failed at run time (an ONNX If took the branch
                     * that could not be compiled): the message is the reference
                     * interpreter's, naming the node, the branch and why */
} DlrtStatus;

/* Same order as dlcc's dtypes; BOOL is one byte, 0 or 1; U8 an unsigned byte. */
typedef enum DlrtDType {
  DLRT_F32, DLRT_F16, DLRT_BF16, DLRT_I8, DLRT_I32, DLRT_I64, DLRT_BOOL, DLRT_U8, DLRT_F64, DLRT_I16, DLRT_U16,
  DLRT_U32, DLRT_U64
} DlrtDType;

#define DLRT_MAX_RANK 8

typedef struct DlrtTensorInfo {
  const char *name; /* owned by the plan */
  DlrtDType dtype;
  int rank;
  int64_t dims[DLRT_MAX_RANK];
  size_t nbytes;
  /* An output whose length along this axis only a run tells (ONNX's
   * NonZero, Compress, Unique, NonMaxSuppression): dims[] and nbytes give its upper bound, and
   * dlrt_output_shape the last run's; -1 for every other tensor. */
  int run_time_axis;
} DlrtTensorInfo;

/* The function every dlcc model.so exports. */
#define DLRT_PLAN_SYMBOL "dlrt_model_plan"
typedef const struct RtPlan *(*DlrtPlanFn)(void);

/* Validates the plan, opens the backend ("auto": cuda when a GPU
 * answers, else emu; "cuda"; "emu"; NULL means "auto"), allocates the
 * device memory once, uploads the weights (plan's own, when it has
 * them), loads the kernels.  A model.so's plan is sealed: before
 * anything else every table, string and blob of it must lie inside the
 * loaded library and match its checksum, so a damaged file is refused
 * (DLRT_E_PLAN, naming the part) instead of crashing the process; then,
 * for every plan, every offset, size and launch is checked against the
 * memory it addresses and its kernel's recorded contract.  Loading a
 * model.so runs its code: this protects against a corrupt file, not a
 * hostile one.  *out is always set, even on failure, so
 * that dlrt_error(*out) gives the reason: close it either way (it is
 * NULL only when host memory ran out).  The plan must outlive the
 * model. */
DlrtStatus dlrt_open(const struct RtPlan *plan, const char *backend, DlrtModel **out);
/* dlopen-s a model.so and opens its plan; the library stays loaded
 * until dlrt_close. */
DlrtStatus dlrt_open_file(const char *so_path, const char *backend, DlrtModel **out);
void dlrt_close(DlrtModel *m);

/* The message of the last failed call; "" when none.  Also for NULL. */
const char *dlrt_error(const DlrtModel *m);
const char *dlrt_status_name(DlrtStatus s); /* "DLRT_E_PLAN" */
const char *dlrt_backend(const DlrtModel *m); /* "cuda" or "emu"; "" before open succeeded */

/* The whole weights blob (the plan's weights_bytes), or one weight by
 * name, or every weight from a safetensors file or a torch.save one of a
 * state_dict (names, dtypes and
 * shapes must match the plan's).  What the model computes from the
 * weights alone (folded batch norms, ...) is computed again at the next
 * dlrt_run, once. */
DlrtStatus dlrt_set_weights(DlrtModel *m, const void *data, size_t nbytes);
DlrtStatus dlrt_set_weight(DlrtModel *m, const char *name, const void *data, size_t nbytes);
DlrtStatus dlrt_load_weights(DlrtModel *m, const char *safetensors_path);
/* Copies one weight (nbytes: exactly its size) from the device: what a
 * training step's updates (docs/training.md) left there after the last
 * run, or what was set.  DLRT_E_STATE when it was never set. */
DlrtStatus dlrt_get_weight(DlrtModel *m, const char *name, void *data, size_t nbytes);

int dlrt_num_inputs(const DlrtModel *m);
/* The outputs a caller reads: the lengths of outputs of run-time
 * length come after them (indices dlrt_num_outputs and up, named
 * "NAME:length"), readable but not counted here. */
int dlrt_num_outputs(const DlrtModel *m);
/* Index of the input/output with this name, or -1. */
int dlrt_find_input(const DlrtModel *m, const char *name);
int dlrt_find_output(const DlrtModel *m, const char *name);
DlrtStatus dlrt_input_info(const DlrtModel *m, int index, DlrtTensorInfo *out);
DlrtStatus dlrt_output_info(const DlrtModel *m, int index, DlrtTensorInfo *out);
/* The output's shape in the last run: dlrt_output_info's, with the
 * run-time length in place of the bound on its run_time_axis (and
 * nbytes to match).  Before any run that length reads as 0. */
DlrtStatus dlrt_output_shape(DlrtModel *m, int index, DlrtTensorInfo *out);

/* Copies nbytes (exactly the input's size) into the model's host
 * staging (pinned on cuda); the next run copies it to the device, and it
 * stays there for every later run until set again. */
DlrtStatus dlrt_set_input(DlrtModel *m, int index, const void *data, size_t nbytes);
DlrtStatus dlrt_set_input_by_name(DlrtModel *m, const char *name, const void *data, size_t nbytes);
/* Runs every step and waits for the device; first the plan's init steps
 * when the weights changed since they last ran (and at the first run).
 * An index out of range in the data (a gather's, an embedding's, a
 * scatter's) fails the run with DLRT_E_INDEX and the reference
 * interpreter's message ("model.dl:4:7: gather: index 50 is out of range
 * for axis 0 of size 10"); the kernels never read or write out of bounds
 * meanwhile, and the next run starts clean. */
DlrtStatus dlrt_run(DlrtModel *m);
/* Copies output index (nbytes: exactly its size; for an output of
 * run-time length, exactly dlrt_output_shape's nbytes, the rows of that
 * length packed) from the last run.  An
 * output that updates a weight (a training step's param, moment or
 * running statistic) stays on the device through the run: this copies
 * it from there when asked (synchronously), so for an update written in
 * place over its weight, a dlrt_set_weight since the run shows. */
DlrtStatus dlrt_get_output(DlrtModel *m, int index, void *data, size_t nbytes);
DlrtStatus dlrt_get_output_by_name(DlrtModel *m, const char *name, void *data, size_t nbytes);

/* ---- the execution engine (docs/runtime.md) ----
 * dlrt_set_input copies into host staging (pinned on cuda) allocated at
 * open; dlrt_run queues the inputs set since the last run (async), the
 * steps, and the outputs (async, into staging) on the model's stream,
 * waits once, and dlrt_get_output copies from staging.  From the second
 * run on, the steps replay as CUDA graphs captured once (emu records and
 * replays the same calls). */

/* Queues a run as dlrt_run does, without waiting.  stream: a CUstream of
 * the caller's (cast to void *) that the run waits for and that waits
 * for the run (events, no host wait), or NULL.  Until dlrt_wait returns,
 * every other call on the model fails with DLRT_E_STATE, and bound
 * inputs and outputs must not be touched except through stream order.
 * emu runs at the call and takes only NULL. */
DlrtStatus dlrt_run_async(DlrtModel *m, void *stream);
/* Waits for the run dlrt_run_async queued; its errors (an index out of
 * range, a fault) are reported here.  DLRT_OK when none is in flight. */
DlrtStatus dlrt_wait(DlrtModel *m);
/* Device-resident I/O: input (output) index is read from (written to)
 * device memory the caller owns, a CUdeviceptr (on emu a host pointer)
 * of at least the tensor's nbytes, with no copy at all; 0 unbinds (an
 * unbound input must be set again).  Changing a binding recaptures the
 * graphs at the next run: keep buffers fixed to keep runs cheap.  The
 * memory must outlive its binding.  dlrt_get_output of a bound output
 * reads the device memory (a synchronous copy).  A bound output may not
 * share a byte with another bound input or output (DLRT_E_ARG; inputs
 * may share). */
DlrtStatus dlrt_bind_input(DlrtModel *m, int index, uint64_t device_ptr);
DlrtStatus dlrt_bind_output(DlrtModel *m, int index, uint64_t device_ptr);
/* A stream of batches with copies overlapped: feed fills batch `batch`'s
 * inputs (inputs[i]: host memory of input i's nbytes, pinned on cuda)
 * and returns 0, or 1 when there is no such batch (the stream ends
 * there), or -1 to stop with an error; drain gets batch `batch`'s
 * outputs (valid during the call, batches in order) and returns 0, or
 * -1 to stop.  While batch i computes, batch i+1's inputs go up and batch
 * i-1's outputs come down on a second stream (double-buffered, ordered
 * by events); feed(i+1) and drain(i-1) run on the host meanwhile.  An
 * index out of range is reported after the last batch.  *n_batches: how
 * many were drained (NULL allowed).  Inputs and outputs bound to device
 * memory are refused; on a device without a second stream (emu has one
 * that runs at once) it runs the batches one after another. */
typedef int (*DlrtFeedFn)(void *user, long batch, void *const *inputs);
typedef int (*DlrtDrainFn)(void *user, long batch, const void *const *outputs);
DlrtStatus dlrt_run_batches(DlrtModel *m, DlrtFeedFn feed, DlrtDrainFn drain, void *user, long *n_batches);
/* CUDA graphs on (the default, unless DLCC_NO_GRAPHS=1 was set at open)
 * or off (every step launched by itself: for debugging). */
DlrtStatus dlrt_set_graphs(DlrtModel *m, int on);
/* The communicator of a data-parallel job (docs/parallel.md).  Each
 * all-reduce step of a training step's plan copies its gradient to its
 * own bytes, waits for the device, and calls fn with them: count f32
 * values at buf (a host pointer on emu, a device pointer on cuda, named
 * by device, "emu" or "cuda"), bucket the step's number among the
 * all-reduces, op DLRT_COMM_MEAN or DLRT_COMM_SUM.  fn starts replacing
 * them by their mean over the ranks (a data-parallel gradient) or their
 * sum (a tensor-parallel region's end or its input's gradient) and may
 * return before it is done; the plan's wait step calls fn with
 * bucket DLRT_COMM_WAIT (buf 0, count 0, op 0), which returns when every
 * started one is done, before any step reads a result.  Between the
 * steps in between, fn gets DLRT_COMM_PROGRESS, to drive transports
 * that progress only when called (MPI).  fn returns 0, or nonzero with
 * a message in err, which fails the run (DLRT_E_DEVICE).  Steps with
 * all-reduces run outside CUDA graphs.  NULL fn: a world of one, the
 * step a copy. */
#define DLRT_COMM_WAIT (-1)
#define DLRT_COMM_PROGRESS (-2)
#define DLRT_COMM_MEAN 0
#define DLRT_COMM_SUM 1
typedef int (*DlrtCommFn)(void *ctx, const char *device, uint64_t buf, uint64_t count, int bucket, int op,
                          char *err, size_t errlen);
DlrtStatus dlrt_set_comm(DlrtModel *m, DlrtCommFn fn, void *ctx);
/* One line on how the model runs: "graphs on: 1 graph over 56 steps,
 * every step captured; staging pinned", or why not ("graphs off
 * (DLCC_NO_GRAPHS=1)", a step that runs outside the graphs and why,
 * staging in pageable memory and why).  Owned by the model. */
const char *dlrt_engine_report(DlrtModel *m);

/* Where a run's time goes: one run, like dlrt_run but with every step
 * launched by itself on one stream (no graph), timed step by step: on
 * cuda GPU time between events around each step (a step's launch gaps
 * show in its neighbours' sums only as idle time: add them up to compare
 * with a graph's run), on emu the host's.  step_us[i] gets step i's
 * microseconds (0 for a step a branch skipped); n must be
 * dlrt_num_steps.  Outputs are as after dlrt_run. */
int dlrt_num_steps(const DlrtModel *m);
/* Step i's label as --emit=plan prints it ("" when none), owned by the model. */
const char *dlrt_step_label(const DlrtModel *m, int i);
DlrtStatus dlrt_profile(DlrtModel *m, double *step_us, int n);

#ifdef __cplusplus
}
#endif

#endif
