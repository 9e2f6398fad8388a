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
 *   - an inverted-dropout mask drawn by hand, cast(u < c) / c with u a
 *     random_uniform and c one constant (torchvision's StochasticDepth
 *     and timm's DropPath: `bernoulli_(c).div_(c)`, exported as
 *     RandomUniformLike, Less, Cast and Div), is its expectation, 1, as
 *     those modules skip it in eval().
 * A model already in inference form (the language lowered without
 * --grad, an eval-mode export) is left as it is.  Other random draws
 * stay, with a warning: eval() keeps torch.rand random, and the file
 * does not say which other draw a module skips in eval(). */
#include <string.h>

#include "ir/diag.h"
#include "passes/autodiff.h"
#include "passes/pass.h"

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
  Node *param = a ? pass_find_param(g, a->s) : NULL;
  Value *p = param ? &param->out[0] : NULL;
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

/* The only reader of v, or NULL (none, several, or a graph output). */
static Node *sole_reader(Graph *g, const Value *v) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return NULL;
  Node *found = NULL;
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] == v) {
        if (found) return NULL;
        found = n;
      }
  return found;
}

/* u's inverted-dropout mask, cast(u < c) / c, replaced by ones: whether
 * u's one reader chain was that (c a probability: u < c holds with
 * probability c, so the mask's expectation is 1). */
static bool mask_to_expectation(Graph *g, Node *u) {
  Node *less = sole_reader(g, &u->out[0]);
  double c, d;
  if (!less || less->op != OP_LESS || less->in[0] != &u->out[0] || !pass_is_const(less->in[1], &c) || !(c > 0 && c <= 1))
    return false;
  Node *cast = sole_reader(g, &less->out[0]);
  if (!cast || cast->op != OP_CAST) return false;
  Node *div = sole_reader(g, &cast->out[0]);
  if (!div || div->op != OP_DIV || div->in[0] != &cast->out[0] || !pass_is_const(div->in[1], &d) ||
      (float)c != (float)d)
    return false;
  ir_replace_uses(g, &div->out[0], pass_new_const(g, div, 1, &div->out[0].type, div->loc));
  return true;
}

bool pass_eval_mode(Graph *g) {
  bool ok = true;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    if (n->op == OP_DROPOUT) {
      ir_replace_uses(g, &n->out[0], n->in[0]);
      ir_remove(g, n);
    } else if (n->op == OP_RANDOM_UNIFORM && !mask_to_expectation(g, n)) {
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
