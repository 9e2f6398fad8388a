/* The weights of a tensor-parallel `dlcc train` (train_tp.c): each rank
 * holds only its parts of the sharded parameters (and their optimizer
 * state), and whole tensors of the rest, updating only its parts of
 * those split but not sharded (dlc_tensor_split_info); before a
 * checkpoint or a validation rank 0 gathers each part from its owner
 * into the whole step it writes or validates from. */
#ifndef DLCC_DRIVER_TRAIN_TP_H
#define DLCC_DRIVER_TRAIN_TP_H

#include <stdbool.h>
#include <stddef.h>

#include "dlcc.h"
#include "driver/dist.h"

/* Every rank calls it: t's parameters and state, whole, into rank 0's
 * whole (NULL on the other ranks).  False with a message in err (a
 * failed collective's, or a replicated element that differs between
 * ranks). */
bool train_tp_gather(Dist *d, dlc_train *t, dlc_train *whole, char *err, size_t errlen);
/* Whether m holds only this rank's parts of weight name (split along
 * *axis, when axis is not NULL). */
bool train_tp_sharded(dlc_model *m, const char *name, int *axis);
/* Rank 0 (whole set) prints what its step holds against the whole. */
void train_tp_report(dlc_train *t, dlc_train *whole);

#endif
