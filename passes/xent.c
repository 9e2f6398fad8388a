/* xent-join: takes a training step's graph and returns it with each
 * softmax_xent and the softmax_xent_grad over the same logits, targets
 * and options replaced by one softmax_xent_both at the forward's place,
 * so that one row kernel computes the loss rows and the gradient rows
 * from one read of the logits.  Only where the gradient's dy does not
 * depend on the forward's result (a mean's 1 / count, a sum's 1: what
 * cross_entropy's gradient is unless its value feeds its own gradient);
 * the nodes computing dy that come after the forward move up before it,
 * in their order, which keeps every definition before its uses since
 * none of them reads the forward. */
#include <string.h>

#include "passes/pass.h"

static bool same_options(const Node *a, const Node *b) {
  return ir_attr_int(a, "ignore_index") == ir_attr_int(b, "ignore_index") &&
         ir_attr_float(a, "smoothing") == ir_attr_float(b, "smoothing");
}

/* Marks in up (by node id) the nodes after position `from` (pos by node
 * id) that v depends on; false when v depends on stop (at `from`). */
static bool mark_ancestors(Graph *g, const Value *v, const Node *stop, const int *pos, int from, bool *up) {
  const Node **stack = ARENA_ARRAY(&g->ctx->arena, const Node *, g->n_nodes + 1);
  int n = 0;
  if (v->def == stop) return false;
  if (pos[v->def->id] > from) up[v->def->id] = true, stack[n++] = v->def;
  while (n > 0) {
    const Node *d = stack[--n];
    for (int i = 0; i < d->n_in; i++) {
      const Node *p = d->in[i]->def;
      if (p == stop) return false;
      if (pos[p->id] > from && !up[p->id]) up[p->id] = true, stack[n++] = p;
    }
  }
  return true;
}

static bool join(Graph *g, Node *fwd, Node *grad) {
  ir_number(g);
  int *pos = ARENA_ARRAY(&g->ctx->arena, int, g->n_nodes + 1);
  int k = 0;
  for (Node *n = g->first; n; n = n->next) pos[n->id] = k++;
  bool *up = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  memset(up, 0, sizeof(bool) * (size_t)(g->n_nodes + 1));
  if (!mark_ancestors(g, grad->in[2], fwd, pos, pos[fwd->id], up)) return false;
  for (Node *n = fwd->next, *next; n && n != grad; n = next) {
    next = n->next;
    if (!up[n->id]) continue;
    ir_remove(g, n);
    ir_insert_before(g, fwd, n);
  }
  Node *both = pass_new_node(g, fwd, OP_XENT_BOTH, 3, grad->in, fwd, fwd->loc);
  ir_replace_uses(g, &fwd->out[0], &both->out[0]);
  ir_replace_uses(g, &grad->out[0], &both->out[1]);
  ir_remove(g, fwd);
  ir_remove(g, grad);
  return true;
}

bool pass_xent_join(Graph *g, PassCtx *pc) {
  int joined = 0;
  for (Node *grad = g->first, *next; grad; grad = next) {
    next = grad->next;
    if (grad->op != OP_XENT_GRAD) continue;
    Node *fwd = g->first;
    while (fwd && !(fwd->op == OP_XENT && fwd->in[0] == grad->in[0] && fwd->in[1] == grad->in[1] &&
                    same_options(fwd, grad)))
      fwd = fwd->next;
    if (fwd) joined += join(g, fwd, grad);
  }
  if (joined) pass_stat(pc, "xent-join: softmax_xent with its gradient", joined);
  return joined > 0;
}
