/* The NCCL communicator of a data-parallel job on the cuda backend
 * (comm_nccl.c): takes the ranks (dist.h), one GPU per rank, and gives
 * an all-reduce mean over device buffers, polled against the same
 * deadline as MPI's collectives.  Built only where configure found NCCL. */
#ifndef DLCC_DRIVER_COMM_NCCL_H
#define DLCC_DRIVER_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/dist.h"

typedef struct NcclComm NcclComm;

/* One GPU per local rank: before any CUDA call, CUDA_VISIBLE_DEVICES is
 * narrowed to the local rank's GPU (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID) unless the launcher set it. */
void nccl_pick_device(void);
/* The communicator over d's ranks, its unique id broadcast from rank 0;
 * NULL with a message in err. */
NcclComm *nccl_comm_new(Dist *d, char *err, size_t errlen);
/* Starts replacing buf (count f32 on the device) by its mean over the
 * ranks (with sum: their sum), on the communicator's stream; nccl_comm_wait ends every started
 * one.  Nonzero with a message naming the rank when NCCL fails or the
 * deadline passes (the communicator is then aborted, so no peer waits on
 * it). */
int nccl_comm_start(NcclComm *c, uint64_t buf, uint64_t count, bool sum, char *err, size_t errlen);
int nccl_comm_wait(NcclComm *c, char *err, size_t errlen);
void nccl_comm_free(NcclComm *c);

#endif
