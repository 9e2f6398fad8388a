/* libdlcrt's internal interfaces between its files: plan validation and
 * the seal, the executor on an already opened device (tests pass a fake
 * one), NVRTC with its disk cache, SHA-256.  Public API: include/dlcrt.h. */
#ifndef DLCRT_RUNTIME_H
#define DLCRT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "plan.h"

struct DlrtModel;

/* 0 when the plan is safe to execute: magic and version, for a sealed
 * plan its memory and checksums (rt_plan_check_seal, on the PT_LOAD
 * segments of the object it lies in), every table present, every RtRef
 * inside its space, every launch keeping its contract (kernel, grid,
 * block, argument kinds, integer arguments in range, each pointer's
 * extent inside its space, writes only where the step may write), GEMM
 * and copy extents within their buffers, no step of a run writing
 * WEIGHTS, init steps writing WEIGHTS only in the derived region and
 * touching no INPUT or OUTPUT.  -1 and one message in err ("plan: step 3
 * (conv2d %12): gemm c: ...", "plan: init step 0 (...): ...") otherwise. */
int rt_plan_validate(const RtPlan *plan, char *err, size_t errlen);
/* Memory that may be read: [lo, hi). */
typedef struct RtRegion {
  uintptr_t lo, hi;
} RtRegion;
/* rt_plan_validate with a sealed plan's memory given (its seal checked
 * against regions) instead of found among the loaded objects. */
int rt_plan_validate_in(const RtPlan *plan, const RtRegion *regions, int n_regions, char *err, size_t errlen);

/* seal.c: XXH64. */
uint64_t rt_hash64(const void *data, size_t n, uint64_t seed);
/* The checksum of each part of a plan in trusted memory (the compiler's:
 * codegen/aot.c writes them into model.so as seal[]). */
void rt_plan_seal(const RtPlan *plan, uint64_t out[RT_SEAL_COUNT]);
/* rt_plan_seal of a plan of unknown health: 0 when every table, string
 * and blob lies inside regions (nothing outside is read); -1 and a
 * message naming the first one that does not. */
int rt_plan_seal_in(const RtPlan *plan, const RtRegion *regions, int n_regions, uint64_t out[RT_SEAL_COUNT],
                    char *err, size_t errlen);
/* rt_plan_seal_in, then every part against plan->seal; -1 and one
 * message naming the table or part otherwise. */
int rt_plan_check_seal(const RtPlan *plan, const RtRegion *regions, int n_regions, char *err, size_t errlen);
/* The PT_LOAD segments of the loaded object (library or program) that
 * holds addr: how many were written to out, 0 when no object holds it. */
int rt_loaded_regions(const void *addr, RtRegion *out, int max);
const char *rt_space_name(uint32_t space);

/* What a step of a validated plan may touch: nbytes at ref, written or
 * only read (a launch's pointer arguments as its contract bounds them, a
 * GEMM's A, B, C and bias, a copy's source and destination). */
typedef struct RtAccessRange {
  RtRef ref;
  uint64_t nbytes;
  bool write;
} RtAccessRange;
/* The ranges of step s into out: how many, or -1 when more than max or
 * for a branch step (it orders everything). */
int rt_step_access(const RtPlan *p, const RtStep *s, RtAccessRange *out, int max);

/* streams.c: steps [first, first + n) of a plan on up to max_lanes
 * streams (lane 0 the device's).  A step waits for the events of the
 * earlier steps it conflicts with (they touch a common byte, one of them
 * writing) that its lane has not already waited for, directly or through
 * another wait; it continues the lane of such a step when that step was
 * the last on its lane, else takes a free lane, so independent chains of
 * steps (the branches of an inception block, two layers' GEMMs) run side
 * by side inside a captured graph.  Steps all in one chain stay on lane
 * 0 with no event.  A cooperative launch (every block resident) and an
 * all-reduce wait for every lane and keep lane 0. */
typedef struct RtStreamStep {
  uint32_t lane;
  int32_t mark;        /* the event recorded on its lane after it, -1 for none */
  uint32_t wait_first; /* its waits: events waits[wait_first .. + n_waits) */
  uint32_t n_waits;
} RtStreamStep;
typedef struct RtStreamPlan {
  uint32_t first, n;
  RtStreamStep *step;
  int32_t *waits;
  uint32_t n_events; /* events numbered 0 .. n_events - 1, each recorded once */
  uint32_t lanes;    /* lanes used; 1: the steps form one chain */
  /* With lanes > 1: the fork, recorded on lane 0 before the first step
   * and waited for by each other lane before its first step; and the
   * events lane 0 waits for after the last, waits[join_first ..
   * + n_joins), so that every lane ends joined to lane 0. */
  int32_t fork;
  uint32_t join_first, n_joins;
} RtStreamPlan;
/* 0, or -1 when out of memory. */
int rt_stream_plan(const RtPlan *p, uint32_t first, uint32_t n, uint32_t max_lanes, RtStreamPlan *out);
void rt_stream_plan_free(RtStreamPlan *b);
int rt_dtype_bytes(uint32_t dtype); /* RtDTypeCode; 0 when unknown */

/* dlrt_open on a device the caller opened.  The model takes ownership of
 * dev (closed by dlrt_close, or here on failure).  Same status and
 * *out contract as dlrt_open. */
int rt_model_open_device(const RtPlan *plan, RtDevice *dev, struct DlrtModel **out);

/* How many times the model's init steps (RtPlan.init_steps: the derived
 * weights) have run: once before the first dlrt_run and once before the
 * first run after each change of the weights, never per run.  For tests. */
uint64_t rt_model_init_runs(const struct DlrtModel *m);

/* A run's steps handed to the device without waiting for them, no init
 * steps and no index reports: for benchmarks that time runs back to back
 * with CUDA events (tests/gpu/layer_bench.c).  stream: a CUstream the
 * steps are ordered after and before (events, as dlrt_run_async), where
 * the benchmark records its events (CU_STREAM_LEGACY, (void *)0x1, for
 * the legacy default stream: the model's own stream is non-blocking and
 * does not wait for it); NULL for none.  dlrt_run must have run once
 * since the weights were set. */
int rt_model_enqueue(struct DlrtModel *m, void *stream);

/* SHA-256 (FIPS 180-4). */
void rt_sha256(const void *data, size_t n, uint8_t out[32]);

/* Compiles plan->source with NVRTC for arch ("sm_90": a cubin;
 * "compute_90": PTX, NUL included).  Looks in the in-process memo, then
 * the disk cache (DLCC_CACHE_DIR, else $XDG_CACHE_HOME/dlcc, else
 * ~/.cache/dlcc; DLCC_CACHE_DIR=off disables it), then compiles and
 * stores.  *bin is malloc'd, the caller frees it.  On a compile error the
 * message names the kernel around the first error line, then NVRTC's log. */
int rt_nvrtc_compile(const RtPlan *plan, const char *arch, void **bin, size_t *size, char *err,
                     size_t errlen);
/* The same for one code part of the plan (RtKernel.part: its kernels
 * and the prelude, DL_PART defined), or the whole source when part < 0
 * or the plan has one part. */
int rt_nvrtc_compile_part(const RtPlan *plan, const char *arch, int part, void **bin, size_t *size, char *err,
                          size_t errlen);

/* One compile of rt_nvrtc_run_jobs: arch and part in, the rest out
 * (rc 0 with bin malloc'd, else -1 with err). */
typedef struct RtNvrtcJob {
  const char *arch;
  int part;
  void *bin;
  size_t size;
  int rc;
  char err[8192];
} RtNvrtcJob;
/* Runs the jobs on as many threads as there are CPUs (NVRTC compiles
 * separate programs concurrently): a plan's code parts, and an AOT
 * build's archs, side by side. */
void rt_nvrtc_run_jobs(const RtPlan *plan, RtNvrtcJob *jobs, int n);

typedef struct RtNvrtcStats {
  uint64_t compiles;      /* nvrtcCompileProgram calls */
  uint64_t memo_hits;     /* served from this process's memo */
  uint64_t cache_hits;    /* served from the disk cache */
  uint64_t cache_writes;  /* entries written */
  uint64_t cache_corrupt; /* entries refused (and recompiled) */
} RtNvrtcStats;
void rt_nvrtc_stats(RtNvrtcStats *out);
/* Forgets the memo and zeroes the counters: a test's "new process". */
void rt_nvrtc_reset(void);
/* The last note the cache wrote to stderr (a refused entry, a cache that
 * cannot be written), or "". */
const char *rt_nvrtc_last_note(void);
/* The NVRTC options used for arch, for messages and tests ("--gpu-
 * architecture=sm_90 -I/usr/local/cuda/include ..."), in buf. */
void rt_nvrtc_options_text(const char *arch, char *buf, size_t len);
/* What to ask NVRTC for on a GPU of compute capability cc (90 for 9.0):
 * "sm_NN" (a cubin; "sm_90a" on 9.0, for wgmma) when this NVRTC knows
 * the arch, else "compute_NN"
 * (PTX for the driver to JIT) for the newest arch it knows below cc.
 * 0, or -1 with a message when it knows none at or below cc. */
int rt_nvrtc_target(int cc, char *arch, size_t len, char *err, size_t errlen);

/* One RtGemm (row-major) as the column-major cuBLAS call that computes
 * it: cuBLAS's A is the plan's b and its B the plan's a (cuda.c says
 * why).  trans_*: 1 for CUBLAS_OP_T.  Pure, so that a test checks it
 * against rt_emu_gemm on the CPU. */
typedef struct RtBlasGemm {
  int trans_a, trans_b;
  int m, n, k;
  int lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int batch;
} RtBlasGemm;
/* 0, or -1 with a message when a size does not fit cuBLAS's int. */
int rt_gemm_to_blas(const RtGemm *g, RtBlasGemm *out, char *err, size_t errlen);

/* 0 when path may be dlopen-ed safely: a 64-bit ELF file whose tables
 * and segments lie inside it (a truncated one would SIGBUS when touched),
 * or a file dlopen rejects by itself.  -1 and why in err otherwise. */
int rt_elf_check(const char *path, char *err, size_t errlen);

#endif
