/* Eval mode (autodiff.h): a model exported in training mode, run as
 * PyTorch's eval() runs it.  An ONNX export made with
 * torch.onnx.TrainingMode.TRAINING, which `dlcc train` needs, computes
 * batchnorm from the batch's statistics and drops elements at random;
 * the same file validated or deployed after training must do neither:
 *   - dropout is the identity;
 *   - a batchnorm with batch_stats that names its running statistics
 *     (running_mean, running_var: the params a training step moves,
 *     frontend/onnx_ops.c) normalizes by those params instead, as an
 *     inference batchnorm, and the batch's statistics go with dce.
 * A model already in inference form (the language lowered without
 * --grad, an eval-mode export) is left as it is.  Other random draws
 * (ONNX's RandomUniformLike, ...) stay, with a warning: eval() keeps
 * torch.rand random, and the file does not say which draw a module
 * skips in eval() (torchvision's StochasticDepth). */
#include <string.h>

#include "ir/diag.h"
#include "passes/autodiff.h"

static Value *param_named(Graph *g, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return &n->out[0];
  return NULL;
}

/* Removes the attributes that make bn a training-mode batchnorm. */
static void drop_training_attrs(Node *bn) {
  static const char *const names[] = {"batch_stats", "momentum", "running_mean", "running_var"};
  int kept = 0;
  for (int a = 0; a < bn->n_attrs; a++) {
    bool drop = false;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) drop |= strcmp(bn->attrs[a].name, names[k]) == 0;
    if (!drop) bn->attrs[kept++] = bn->attrs[a];
  }
  bn->n_attrs = kept;
}

/* bn's running statistic `which` (running_mean or running_var) as the
 * operand it reads, or NULL after reporting why there is none. */
static Value *running(Graph *g, Node *bn, const char *which, const Value *now) {
  const Attr *a = ir_attr(bn, which);
  Value *p = a ? param_named(g, a->s) : NULL;
  if (!a) {
    diag_error(g->ctx, bn->loc,
               "eval mode: this batchnorm uses the batch's statistics and has no %s param to use instead "
               "(the model computes its running statistics as outputs)",
               which);
    return NULL;
  }
  if (!p || !ir_type_eq(&p->type, &now->type)) {
    diag_error(g->ctx, bn->loc, "eval mode: the batchnorm's %s '%s' is not a param of its statistics' type", which,
               a->s);
    return NULL;
  }
  return p;
}

bool pass_eval_mode(Graph *g) {
  bool ok = true;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    if (n->op == OP_DROPOUT) {
      ir_replace_uses(g, &n->out[0], n->in[0]);
      ir_remove(g, n);
    } else if (n->op == OP_RANDOM_UNIFORM) {
      diag_warning(g->ctx, n->loc,
                   "eval mode: this random draw stays random, as torch.rand does in eval(); a module that skips "
                   "it in eval() (StochasticDepth) is not told apart in a training-mode export");
    } else if (n->op == OP_BATCHNORM && ir_attr(n, "batch_stats")) {
      Value *mean = running(g, n, "running_mean", n->in[3]);
      Value *var = running(g, n, "running_var", n->in[4]);
      if (!mean || !var) {
        ok = false;
        continue;
      }
      n->in[3] = mean;
      n->in[4] = var;
      drop_training_attrs(n);
    }
  }
  return ok;
}
