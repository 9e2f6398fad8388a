/* `dlcc --loss=NAME` (loss.c, docs/training.md): a model's output made
 * the loss of a training step, against a target input of its own.  The
 * losses themselves are built by ir/loss.h. */
#ifndef DLCC_PASSES_LOSS_H
#define DLCC_PASSES_LOSS_H

#include <stdbool.h>

#include "ir/ir.h"
#include "ir/loss.h"

/* For `dlcc train --loss`: adds an input named target_name (of type
 * *target_type, or loss_default_target's when NULL) and the loss of the
 * model's output `output` against it; the graph's outputs become the
 * loss (output 0, named "loss") followed by the model's own outputs.
 * False after reporting errors to g->ctx. */
bool pass_append_loss(Graph *g, const LossSpec *s, int output, const char *target_name,
                      const TensorType *target_type);

#endif
