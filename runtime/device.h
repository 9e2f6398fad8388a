/* A device behind one interface: the plan executor (model.c) runs every
 * step through this table and does not know whether the kernels run on a
 * GPU (cuda.c: driver API loaded with dlopen, NVRTC, cuBLAS) or on the CPU
 * (emu.c: the same CUDA C compiled by the host compiler).
 *
 * Every function returns 0 on success or -1 with a message written into
 * the device's error buffer (rt_device_error); none exits or aborts.  An
 * error the device cannot recover from (on a GPU, 700 illegal address or
 * 710 device assert leave the context unusable) sets `broken`, after which
 * every call fails with that first message. */
#ifndef DLCRT_DEVICE_H
#define DLCRT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan.h"

typedef struct RtDevice RtDevice;
typedef struct RtModule RtModule; /* the plan's kernels, loaded */
typedef struct RtGraph RtGraph;   /* a captured run of steps, replayable */

/* A device address.  On emu it is a host pointer. */
typedef uint64_t RtDevPtr;

typedef struct RtDeviceOps {
  const char *name; /* "cuda" or "emu" */
  void (*destroy)(RtDevice *d);
  int (*alloc)(RtDevice *d, uint64_t nbytes, RtDevPtr *out);
  int (*free)(RtDevice *d, RtDevPtr p);
  int (*upload)(RtDevice *d, RtDevPtr dst, const void *src, uint64_t nbytes);
  int (*download)(RtDevice *d, void *dst, RtDevPtr src, uint64_t nbytes);
  int (*copy)(RtDevice *d, RtDevPtr dst, RtDevPtr src, uint64_t nbytes);
  int (*memset0)(RtDevice *d, RtDevPtr dst, uint64_t nbytes);
  /* Loads the plan's kernels: from a matching precompiled binary, else by
   * compiling plan->source (NVRTC with the disk cache on cuda; the host
   * compiler on emu). */
  int (*load)(RtDevice *d, const RtPlan *plan, RtModule **out);
  void (*unload)(RtDevice *d, RtModule *m);
  /* args[i] already resolved: pointers are device addresses. */
  int (*launch)(RtDevice *d, RtModule *m, const RtLaunch *l, const void *const *arg_values);
  /* c_in: where beta * C is read (0 when g->beta is 0); bias: the
   * epilogue's (0 when g->epilogue is NONE). */
  int (*gemm)(RtDevice *d, const RtGemm *g, RtDevPtr a, RtDevPtr b, RtDevPtr c, RtDevPtr c_in, RtDevPtr bias);
  int (*synchronize)(RtDevice *d);

  /* The rest may be NULL (a device of the tests): the executor then uses
   * malloc, the synchronous copies above, and launches every step.
   *
   * Host memory for staging copies: 0 and pinned (page-locked, so that
   * the async copies below overlap and run at full speed); 1 and pageable
   * memory with the reason pinning failed in why; -1 with nothing. */
  int (*host_alloc)(RtDevice *d, uint64_t nbytes, void **out, char *why, size_t whylen);
  void (*host_free)(RtDevice *d, void *p, bool pinned);
  /* Copies queued on the device's stream after everything before them;
   * the host memory must stay as it is until synchronize returns. */
  int (*upload_async)(RtDevice *d, RtDevPtr dst, const void *src, uint64_t nbytes);
  int (*download_async)(RtDevice *d, void *dst, RtDevPtr src, uint64_t nbytes);
  /* Between capture_begin and capture_end, launch, gemm, copy and
   * memset0 are recorded, not run; graph_launch runs the recording on
   * the stream (argument values as they were at capture).  capture_end
   * fails (and leaves the stream as before capture_begin) when the
   * capture went wrong. */
  int (*capture_begin)(RtDevice *d);
  int (*capture_end)(RtDevice *d, RtGraph **out);
  int (*graph_launch)(RtDevice *d, RtGraph *g);
  void (*graph_destroy)(RtDevice *d, RtGraph *g);
  /* NULL when the step can be captured, else why not (NULL op: all can). */
  const char *(*uncapturable)(RtDevice *d, const RtStep *s);
  /* Ordering with a stream of the caller's (a CUstream on cuda): the
   * device's stream waits for what was queued on it so far (wait_on), or
   * it waits for what the device's stream has queued so far (signal). */
  int (*wait_on)(RtDevice *d, void *stream);
  int (*signal)(RtDevice *d, void *stream);
  /* A second lane for copies that overlap the steps (dlrt_run_batches):
   * lane 0 is the device's stream, lane 1 a copy stream made at first
   * use.  lane_copy queues a host<->device copy on lane 1; the events
   * (RT_EVENTS of them, by number) order the lanes: mark records event e
   * on lane, wait_mark makes lane wait for it, sync_mark makes the host
   * wait for it. */
  int (*lane_copy)(RtDevice *d, bool up, void *host, RtDevPtr dev, uint64_t nbytes);
  int (*mark)(RtDevice *d, int e, int lane);
  int (*wait_mark)(RtDevice *d, int e, int lane);
  int (*sync_mark)(RtDevice *d, int e);
  /* Side streams, only between capture_begin and capture_end (the
   * executor's schedule: rt_stream_plan): stream 0 is the device's
   * stream, streams 1 .. RT_SIDE_STREAMS - 1 streams made at first use.
   * use_stream queues the launches, GEMMs, copies and memsets that
   * follow on stream b; stream_mark records event e (0 .. RT_STREAM_EVENTS
   * - 1, made at first use) on stream b, stream_wait makes stream b wait
   * for its last record.  The capture must end with every stream joined
   * to stream 0.  prepare_streams, outside a capture, makes what a
   * capture on `streams` streams with `events` events needs (streams,
   * events, a cuBLAS workspace per stream), since a capture may not
   * allocate. */
  int (*prepare_streams)(RtDevice *d, int streams, int events);
  int (*use_stream)(RtDevice *d, int b);
  int (*stream_mark)(RtDevice *d, int e, int b);
  int (*stream_wait)(RtDevice *d, int e, int b);
  /* The step clock (dlrt_profile): clock_mark records point i on the
   * device's stream, after what is queued before it; clock_read, once
   * the stream is synchronized, gives the n intervals between points
   * 0 .. n in microseconds (GPU time on cuda, host time on emu, which
   * runs each call before it returns). */
  int (*clock_mark)(RtDevice *d, uint32_t i);
  int (*clock_read)(RtDevice *d, uint32_t n, double *us);
} RtDeviceOps;

enum { RT_EVENTS = 8, RT_SIDE_STREAMS = 4, RT_STREAM_EVENTS = 4096 };

struct RtDevice {
  const RtDeviceOps *ops;
  bool broken;
  char error[1024];
};

/* Opens a device: "cuda", "emu", or "auto" (cuda when a GPU answers,
 * else emu; *chosen says which).  NULL with a message in err when it
 * cannot (no driver, no GPU, no host compiler). */
RtDevice *rt_device_open(const char *kind, const char **chosen, char *err, size_t errlen);
RtDevice *rt_cuda_open(char *err, size_t errlen);
RtDevice *rt_emu_open(char *err, size_t errlen);
/* Host compiler runs this emu device has made (a test asserts the kernel
 * cache hit: 0 on a second load); 0 for any other device. */
unsigned rt_emu_compile_count(const RtDevice *d);
/* emu's cuBLAS: g on host pointers (emu_gemm.c); c_in NULL when beta
 * is 0 (c itself or apart from it otherwise); bias NULL when g has no
 * epilogue, written by a BGRAD one. */
int rt_emu_gemm(const RtGemm *g, const void *a, const void *b, void *c, const void *c_in, void *bias, char *err,
                size_t errlen);
void rt_device_close(RtDevice *d);
const char *rt_device_error(const RtDevice *d);
/* Records a formatted message (first error wins while broken). */
int rt_device_fail(RtDevice *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether the environment switch name is on: set, not empty, not "0"
 * (DLCC_NO_GRAPHS=1 and the like). */
bool rt_env_on(const char *name);

/* The emu contract with codegen: for every kernel NAME in the source,
 * codegen also emits, inside #ifdef DLCC_EMU,
 *     extern "C" void NAME__emu(void **args);
 * which unpacks args (the same void** array cuLaunchKernel takes) and
 * calls the kernel.  The emu device sets the CUDA built-ins (threadIdx,
 * blockIdx, blockDim, gridDim) before each call. */

#endif
