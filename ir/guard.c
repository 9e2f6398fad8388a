/* Guards: takes a graph whose nodes may carry the branch of an If they
 * were imported for (Node.guard), returns it with every guard narrow
 * enough to be safe to skip on: a node is skipped only when nothing that
 * runs reads its value, except the If's merge, a `where` on the same
 * condition that does not select it.  Passes move and merge nodes
 * without knowing guards (cse may merge a then-node into an else-node);
 * ir_guards_fix then widens the guards that no longer hold, so that a
 * plan computes at worst both branches, never a value it skipped. */
#include "ir/ir.h"

const Guard *ir_guard_new(Graph *g, Value *cond, bool when, const Guard *outer) {
  Guard *f = ARENA_NEW(&g->ctx->arena, Guard);
  *f = (Guard){cond, when, outer, outer ? outer->depth + 1 : 1, NULL};
  return f;
}

bool ir_guard_within(const Guard *a, const Guard *b) {
  for (const Guard *f = a; f; f = f->outer)
    if (f == b) return true;
  return b == NULL;
}

const Guard *ir_guard_common(const Guard *a, const Guard *b) {
  for (const Guard *f = a; f; f = f->outer)
    if (ir_guard_within(b, f)) return f;
  return NULL;
}

/* f's condition is a value of the graph (by_id holds its nodes), computed
 * before node n. */
static bool cond_before(const Guard *f, const Node *n, Node *const *by_id, int n_nodes) {
  const Node *d = f->cond ? f->cond->def : NULL;
  return d && d->id >= 0 && d->id < n_nodes && by_id[d->id] == d && d->id < n->id;
}

/* n's guard cut back to the frames whose conditions come before it. */
static const Guard *trimmed(const Node *n, Node *const *by_id, int n_nodes) {
  const Guard *keep = n->guard;
  for (const Guard *f = n->guard; f; f = f->outer)
    if (!cond_before(f, n, by_id, n_nodes)) keep = f->outer;
  return keep;
}

/* user may read d's value as operand i: it runs only where d is
 * computed, or it is the merge of d's branch. */
static bool reads_ok(const Node *d, const Node *user, int i) {
  if (ir_guard_within(user->guard, d->guard)) return true;
  /* a loop's keep and next values, read when its body is done */
  if (user->op == OP_LOOP_END && d->guard && d->guard->loop == user->in[0]->def) return true;
  const Guard *f = d->guard;
  return user->op == OP_WHERE && i > 0 && user->in[0] == f->cond && f->when == (i == 1) &&
         ir_guard_within(user->guard, f->outer);
}

void ir_guards_fix(Graph *g) {
  ir_loops_guard(g);
  bool any = false;
  for (Node *n = g->first; n && !any; n = n->next) any = n->guard != NULL;
  if (!any) return;
  ir_number(g);
  int count = g->last ? g->last->id + 1 : 0;
  Node **by_id = ARENA_ARRAY(&g->ctx->arena, Node *, count + 1);
  for (Node *n = g->first; n; n = n->next) by_id[n->id] = n;
  for (Node *n = g->first; n; n = n->next) n->guard = trimmed(n, by_id, count);
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i]->def->guard = NULL;
  /* From the last node back: every user of a node is final before it. */
  for (Node *n = g->last; n; n = n->prev) {
    for (int i = 0; i < n->n_in; i++) {
      Node *d = n->in[i]->def;
      if (!reads_ok(d, n, i)) d->guard = ir_guard_common(d->guard, n->guard);
    }
    /* A condition is needed wherever its frame is entered. */
    for (const Guard *f = n->guard; f; f = f->outer) {
      Node *d = f->cond->def;
      if (!ir_guard_within(f->outer, d->guard)) d->guard = ir_guard_common(d->guard, f->outer);
    }
  }
}
