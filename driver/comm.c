/* The plan's communicator (comm.h): routes each all-reduce step of a
 * rank's plan to its group, on emu and ref through dist.c's collectives, on cuda
 * through NCCL (comm_nccl.c), and each wait and progress call to both
 * groups. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dlcrt.h"
#include "driver/comm.h"
#ifdef HAVE_NCCL
#include "driver/comm_nccl.h"
#endif

static int dist_failed(const Dist *d, char *err, size_t errlen) {
  snprintf(err, errlen, "%s", d->err);
  return 1;
}

#ifdef HAVE_NCCL
static int nccl_call(DistComm *c, uint64_t buf, uint64_t count, int bucket, int op, char *err, size_t errlen) {
  bool sum = op == DLRT_COMM_SUM;
  if (bucket == DLRT_COMM_PROGRESS) return 0; /* NCCL's kernels move by themselves */
  if (bucket == DLRT_COMM_WAIT) {
    if (c->nccl_sum && nccl_comm_wait(c->nccl_sum, err, errlen)) return 1;
    return c->nccl_mean && c->nccl_mean != c->nccl_sum ? nccl_comm_wait(c->nccl_mean, err, errlen) : 0;
  }
  NcclComm **nc = sum ? &c->nccl_sum : &c->nccl_mean;
  Dist *d = sum ? c->sum : c->mean;
  /* One group for both: one communicator. */
  if (!*nc && c->sum == c->mean) *nc = sum ? c->nccl_mean : c->nccl_sum;
  if (!*nc && !(*nc = nccl_comm_new(d, err, errlen))) return 1;
  return nccl_comm_start(*nc, buf, count, sum, err, errlen);
}
#endif

int dist_comm(void *ctx, const char *device, uint64_t buf, uint64_t count, int bucket, int op, char *err,
              size_t errlen) {
  DistComm *c = ctx;
  /* emu's and ref's buffers are host memory: dist.c's MPI collectives */
  if (strcmp(device, "emu") != 0 && strcmp(device, "ref") != 0) {
#ifdef HAVE_NCCL
    return nccl_call(c, buf, count, bucket, op, err, errlen);
#else
    snprintf(err, errlen, "parallel runs on %s need NCCL, and this dlcc was built without it (configure looks "
                          "in the CUDA toolkit for nccl.h and libnccl.so): use --backend=emu or ref", device);
    return 1;
#endif
  }
  bool two = c->sum != c->mean;
  if (bucket == DLRT_COMM_WAIT) {
    if (dist_wait(c->sum) != DIST_OK) return dist_failed(c->sum, err, errlen);
    return two && dist_wait(c->mean) != DIST_OK ? dist_failed(c->mean, err, errlen) : 0;
  }
  if (bucket == DLRT_COMM_PROGRESS) {
    if (dist_progress(c->sum) != DIST_OK) return dist_failed(c->sum, err, errlen);
    return two && dist_progress(c->mean) != DIST_OK ? dist_failed(c->mean, err, errlen) : 0;
  }
  Dist *d = op == DLRT_COMM_SUM ? c->sum : c->mean;
  return dist_start(d, (float *)(uintptr_t)buf, count, op == DLRT_COMM_SUM) == DIST_OK ? 0
                                                                                      : dist_failed(d, err, errlen);
}

void dist_comm_free(DistComm *c) {
#ifdef HAVE_NCCL
  if (c->nccl_mean != c->nccl_sum) nccl_comm_free(c->nccl_mean);
  nccl_comm_free(c->nccl_sum);
#endif
  c->nccl_sum = c->nccl_mean = NULL;
}
