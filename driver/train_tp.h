/* The weights of a tensor-parallel `dlcc train` (train_tp.c): each rank
 * keeps whole tensors but updates only its parts of the split ones
 * (dlc_tensor_split_info), so before a checkpoint or a validation every
 * rank takes each part from its owner. */
#ifndef DLCC_DRIVER_TRAIN_TP_H
#define DLCC_DRIVER_TRAIN_TP_H

#include <stdbool.h>
#include <stddef.h>

#include "dlcc.h"
#include "driver/dist.h"

/* Every rank calls it: t's parameters and state whole on every rank.
 * False with a message in err (a failed collective's, or a replicated
 * element that differs between ranks). */
bool train_tp_gather(Dist *d, dlc_train *t, char *err, size_t errlen);

#endif
