/* The init graph: takes a numbered graph and its fusion groups, returns
 * which nodes compute functions of the weights alone (every operand,
 * transitively, a param or a const; never an input) and which of their
 * values a run reads.  plan_build.c lowers the first into the plan's
 * init steps, run once after the weights change, and gives the second
 * bytes in the derived region of WEIGHTS, which the memory planner never
 * shares with activations (docs/passes.md, "Weight-only subgraphs"). */
#include "kernel.h"
#include "passes/pass.h"

static bool is_source(const Node *n) { return n->op == OP_PARAM || n->op == OP_CONST; }

CgInit cg_split_init(Ctx *c, Graph *g, CgGroup *const *groups) {
  bool *weight_only = pass_weight_only(g);
  int n_nodes = 0, n_values = 0;
  for (Node *n = g->first; n; n = n->next) {
    n_nodes++;
    n_values += n->n_out;
  }
  CgInit in = {0};
  in.node = ARENA_ARRAY(&c->arena, bool, n_nodes + 1);
  in.need = ARENA_ARRAY(&c->arena, bool, n_values + 1);
  for (Node *n = g->first; n; n = n->next) in.node[n->id] = weight_only[n->id] && !is_source(n);
  /* A group is lowered whole at its root: into the init steps only when
   * the root is weight-only (then so is every member, whose uses are all
   * inside).  A weight-only member of a run's group stays in its kernel,
   * evaluated on every run: fusion keeps them apart (passes/fuse.c). */
  for (Node *n = g->first; n; n = n->next) {
    const CgGroup *grp = groups ? groups[n->id] : NULL;
    if (!grp) continue;
    for (int i = 0; i < grp->n; i++) in.node[grp->members[i]->id] = in.node[n->id];
  }
  for (Node *n = g->first; n; n = n->next) {
    if (in.node[n->id]) continue;
    for (int i = 0; i < n->n_in; i++)
      if (in.node[n->in[i]->def->id]) in.need[n->in[i]->id] = true;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (in.node[g->outputs[i]->def->id]) in.need[g->outputs[i]->id] = true;
  /* A reshape aliases its operand's bytes: what a run reads through it
   * must itself live in the derived region. */
  for (Node *n = g->last; n; n = n->prev) {
    if (!in.node[n->id]) continue;
    in.n_nodes++;
    if (n->op == OP_RESHAPE && in.need[n->out[0].id] && in.node[n->in[0]->def->id])
      in.need[n->in[0]->id] = true;
  }
  return in;
}
