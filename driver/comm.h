/* The communicator a plan's all-reduce steps call (comm.c, dlcc.h's
 * dlc_comm_fn), shared by `dlcc train` and `dlcc run`: takes the ranks
 * (dist.h) and gives, on emu, their rank-order sums and means, on cuda
 * NCCL's, its communicator made at the first call.  Sums (tensor
 * parallel) go over the tensor group, means (data parallel) over the
 * data group: the same ranks unless a job combines the two. */
#ifndef DLCC_DRIVER_COMM_H
#define DLCC_DRIVER_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "driver/dist.h"

typedef struct DistComm {
  Dist *sum, *mean;
  struct NcclComm *nccl_sum, *nccl_mean;
} DistComm;

int dist_comm(void *ctx, const char *device, uint64_t buf, uint64_t count, int bucket, int op, char *err,
              size_t errlen);
void dist_comm_free(DistComm *c);

#endif
