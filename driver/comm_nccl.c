/* Takes the ranks of a data-parallel job and gives NCCL all-reduces over
 * device buffers (comm_nccl.h).  The communicator is nonblocking
 * (ncclConfig_t.blocking = 0) and every call is polled against the job's
 * deadline: NCCL's own calls would wait forever for a peer that died,
 * and ncclCommAbort is what frees a communicator stuck on one. */
#include "config.h"

#include "driver/comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
/* nccl.h declares a few functions with () rather than (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

struct NcclComm {
  ncclComm_t comm;
  cudaStream_t stream;
  Dist *d;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void nccl_pick_device(void) {
  if (getenv("CUDA_VISIBLE_DEVICES")) return;
  const char *v[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    if (getenv(v[i])) {
      setenv("CUDA_VISIBLE_DEVICES", getenv(v[i]), 1);
      return;
    }
}

/* Waits for NCCL's asynchronous state to leave ncclInProgress (and, with
 * a stream, for the stream's work to end) before the deadline. */
static int settle(NcclComm *c, bool stream, const char *what, char *err, size_t errlen) {
  double end = now_s() + c->d->timeout;
  struct timespec nap = {0, 100000};
  for (;;) {
    ncclResult_t state;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      snprintf(err, errlen, "rank %d: %s: NCCL says %s (%s)", c->d->rank, what,
               ncclGetErrorString(r != ncclSuccess ? r : state), ncclGetLastError(c->comm));
      ncclCommAbort(c->comm);
      c->comm = NULL;
      return 1;
    }
    if (state == ncclSuccess) {
      cudaError_t q = stream ? cudaStreamQuery(c->stream) : cudaSuccess;
      if (q == cudaSuccess) return 0;
      if (q != cudaErrorNotReady) {
        snprintf(err, errlen, "rank %d: %s: CUDA says %s", c->d->rank, what, cudaGetErrorString(q));
        return 1;
      }
    }
    if (now_s() > end) {
      snprintf(err, errlen, "rank %d: %s timed out after %g s waiting for the other ranks", c->d->rank, what,
               c->d->timeout);
      ncclCommAbort(c->comm);
      c->comm = NULL;
      return 1;
    }
    nanosleep(&nap, NULL);
  }
}

NcclComm *nccl_comm_new(Dist *d, char *err, size_t errlen) {
  NcclComm *c = calloc(1, sizeof *c);
  if (!c) return snprintf(err, errlen, "out of memory"), NULL;
  c->d = d;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r = d->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
  /* Every rank takes part in the broadcast, so a failure on rank 0 is
   * every rank's (dist_check carries the message). */
  if (dist_check(d, r == ncclSuccess, r == ncclSuccess ? NULL : ncclGetErrorString(r)) != DIST_OK ||
      dist_bcast(d, &id, sizeof id) != DIST_OK) {
    snprintf(err, errlen, "%s", d->err);
    free(c);
    return NULL;
  }
  cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    snprintf(err, errlen, "rank %d: cudaStreamCreate: %s", d->rank, cudaGetErrorString(ce));
    free(c);
    return NULL;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclCommInitRankConfig(&c->comm, d->size, id, d->rank, &config);
  if ((r != ncclSuccess && r != ncclInProgress) ||
      (r == ncclInProgress && settle(c, false, "ncclCommInitRank", err, errlen))) {
    if (r != ncclInProgress) snprintf(err, errlen, "rank %d: ncclCommInitRank: %s", d->rank, ncclGetErrorString(r));
    nccl_comm_free(c);
    return NULL;
  }
  return c;
}

int nccl_comm_start(NcclComm *c, uint64_t buf, uint64_t count, bool sum, char *err, size_t errlen) {
  if (!c->comm) return snprintf(err, errlen, "rank %d: the NCCL communicator was aborted", c->d->rank), 1;
  void *p = (void *)(uintptr_t)buf;
  ncclResult_t r = ncclAllReduce(p, p, (size_t)count, ncclFloat32, sum ? ncclSum : ncclAvg, c->comm, c->stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "rank %d: ncclAllReduce: %s (%s)", c->d->rank, ncclGetErrorString(r),
             ncclGetLastError(c->comm));
    return 1;
  }
  return 0;
}

int nccl_comm_wait(NcclComm *c, char *err, size_t errlen) {
  if (!c->comm) return snprintf(err, errlen, "rank %d: the NCCL communicator was aborted", c->d->rank), 1;
  return settle(c, true, "an all-reduce (NCCL)", err, errlen);
}

void nccl_comm_free(NcclComm *c) {
  if (!c) return;
  if (c->comm) ncclCommDestroy(c->comm);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c);
}
