/* The GPU side of tests/gpu/layer_bench: libcuda's events and memory,
 * cuBLAS and cuDNN, all opened with dlopen (from the loader's path, the
 * toolkit dlcc was configured with, or LAYER_BENCH_LIBS, a colon-separated
 * list of folders), so that neither is ever a dependency of dlcc.  Takes
 * work to time and layer shapes; returns microseconds of GPU time, median
 * of five timings of back-to-back calls between CUDA events on the legacy
 * default stream (which waits for the blocking streams the runtime
 * uses, and they for it), or a negative number with the reason. */
#ifndef DLCC_TESTS_GPU_VENDOR_H
#define DLCC_TESTS_GPU_VENDOR_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { BT_F16, BT_BF16, BT_I8, BT_F32, BT_TF32, BT_COUNT } BenchType;

typedef struct ConvShape {
  int n, c, h, w;    /* input, NCHW */
  int k, r, s;       /* output channels, kernel height and width */
  int stride, pad, dilation;
  int oh, ow;        /* output size */
} ConvShape;

typedef struct Gpu Gpu;

/* Whether libcuda.so.1 loads, without initializing it (a process may
 * fork after); its message when not. */
bool gpu_driver_loads(char *err, size_t errlen);
/* The driver (required), cuBLAS and cuDNN (each optional: gpu_lib_error
 * says why one is missing).  NULL with a message without a driver. */
Gpu *gpu_open(char *err, size_t errlen);
void gpu_close(Gpu *g);
/* "" when the library opened, else why not ("cublas", "cudnn"). */
const char *gpu_lib_error(const Gpu *g, const char *lib);

/* fn enqueues one piece of work and returns 0, or -1 with a message in
 * err. */
typedef int (*GpuWork)(void *ud, char *err, size_t errlen);
double gpu_time_us(Gpu *g, GpuWork fn, void *ud, char *err, size_t errlen);

/* C (m x n) = A^T B with A k x m and B k x n, column-major (a layer's
 * weights times its im2col columns): cuBLAS's GEMM in t. */
double gpu_cublas_us(Gpu *g, BenchType t, int m, int n, int k, char *err, size_t errlen);
/* cudnnConvolutionForward in t with the fastest algorithm
 * cudnnFindConvolutionForwardAlgorithm finds; for f32/f16/bf16 the faster
 * of NCHW and NHWC, int8 in NHWC (its only layout) with f32 output. */
double gpu_cudnn_us(Gpu *g, BenchType t, const ConvShape *s, char *err, size_t errlen);

/* Resolves every cuBLAS and cuDNN function the benchmark calls, without
 * a GPU: for make check, so that a misspelt name fails here and not in
 * the GPU machine's few minutes.  0, or -1 with the missing ones. */
int gpu_check_symbols(char *err, size_t errlen);

#endif
