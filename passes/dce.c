/* Dead code elimination: takes a graph, removes every node none of whose
 * results is used by a live node or a graph output, params included.
 * Inputs stay even when unused: they are the model's signature.  One
 * backward walk: uses follow definitions, so when the walk reaches a node
 * every use it will ever lose is already gone. */
#include "passes/pass.h"

int pass_remove_dead(Graph *g, bool keep_params, int *params) {
  PassUses *uses = pass_uses_new(g);
  int removed = 0;
  if (params) *params = 0;
  for (Node *n = g->last, *prev; n; n = prev) {
    prev = n->prev;
    if (n->op == OP_INPUT || (keep_params && n->op == OP_PARAM)) continue;
    bool live = false;
    for (int i = 0; i < n->n_out && !live; i++) live = pass_uses(uses, &n->out[i]) > 0;
    if (live) continue;
    for (int i = 0; i < n->n_in; i++) pass_uses_add(uses, n->in[i], -1);
    if (params) *params += n->op == OP_PARAM;
    ir_remove(g, n);
    removed++;
  }
  return removed;
}

bool pass_dce(Graph *g, PassCtx *pc) {
  int params;
  int removed = pass_remove_dead(g, false, &params);
  if (removed) pass_stat(pc, "dce: nodes removed", removed);
  if (params) pass_stat(pc, "dce: params removed", params);
  return removed > 0;
}
