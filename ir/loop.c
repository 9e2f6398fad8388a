/* Loops of the plan: a loop_begin, the nodes that read its carried
 * values (its body), and the loop_end that closes it (ops.def).  The
 * graph stays acyclic: the back edge is only in what loop_end means, so
 * every pass sees ordinary nodes.  What this file keeps true for the
 * stages after it: a loop's body lies in one piece between its
 * loop_begin and its loop_end (so a plan can jump back over it, and the
 * interpreter repeat it), and each body node's guard is its loop's frame
 * (so fusion never joins a body node to one outside, and a plan enters
 * the body only when the loop's enter holds).  A node that reads no
 * carried value is not in the body, wherever its importer put it: it is
 * computed once, before the loop. */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* a lies in b, or is b (-1: outside every loop, which all lie in). */
static bool loop_within(const IrLoops *L, int a, int b) {
  for (; a >= 0; a = L->outer[a])
    if (a == b) return true;
  return b < 0;
}

/* The innermost of x and y, which must nest; -2 when they do not. */
static int innermost(const IrLoops *L, int x, int y) {
  if (loop_within(L, x, y)) return x;
  if (loop_within(L, y, x)) return y;
  return -2;
}

/* The loop value v lies in: a loop_begin's results in its own loop
 * (begin_loop: by node id, a loop_begin's loop), others where their
 * node does. */
static int value_loop(const IrLoops *L, const int *begin_loop, const Value *v) {
  return v->def->op == OP_LOOP_BEGIN ? begin_loop[v->def->id] : L->of[v->def->id];
}

bool ir_loops_find(Graph *g, IrLoops *out, char *err, size_t errlen) {
  Arena *a = &g->ctx->arena;
  ir_number(g);
  int n_nodes = g->last ? g->last->id + 1 : 0, n_loops = 0;
  for (Node *n = g->first; n; n = n->next) n_loops += n->op == OP_LOOP_BEGIN;
  *out = (IrLoops){.n = n_loops, .n_nodes = n_nodes};
  out->of = ARENA_ARRAY(a, int, n_nodes + 1);
  out->begin = ARENA_ARRAY(a, Node *, n_loops + 1);
  out->end = ARENA_ARRAY(a, Node *, n_loops + 1);
  out->outer = ARENA_ARRAY(a, int, n_loops + 1);
  int *loop_of_begin = ARENA_ARRAY(a, int, n_nodes + 1);
  if (!n_loops) {
    for (int i = 0; i < n_nodes; i++) out->of[i] = -1;
    return true;
  }
  int k = 0;
  for (Node *n = g->first; n; n = n->next) {
    loop_of_begin[n->id] = -1;
    /* the loop a value lies in: a loop_begin's results lie in its loop */
    int of = -1;
    for (int i = 0; i < n->n_in && n->op != OP_LOOP_END; i++) {
      of = innermost(out, of, value_loop(out, loop_of_begin, n->in[i]));
      if (of == -2) {
        snprintf(err, errlen, "%s %%%d reads the bodies of two loops, neither inside the other",
                 ir_ops[n->op].name, n->out[0].id);
        return false;
      }
    }
    if (n->op == OP_LOOP_END) {
      const Node *b = n->in[0]->def;
      int l = b->op == OP_LOOP_BEGIN ? loop_of_begin[b->id] : -1;
      bool whole = l >= 0 && b->n_out == n->n_out;
      for (int i = 0; whole && i < n->n_out; i++) whole = n->in[i] == &b->out[i];
      if (!whole) {
        snprintf(err, errlen, "loop_end %%%d: its first %d operands must be one loop_begin's results, in order",
                 n->out[0].id, n->n_out);
        return false;
      }
      if (out->end[l]) {
        snprintf(err, errlen, "loop_end %%%d closes the loop that loop_end %%%d closes", n->out[0].id,
                 out->end[l]->out[0].id);
        return false;
      }
      for (int i = n->n_out; i < n->n_in; i++) {
        if (!loop_within(out, l, value_loop(out, loop_of_begin, n->in[i]))) {
          snprintf(err, errlen, "loop_end %%%d: operand %d lies in a loop inside its own", n->out[0].id, i + 1);
          return false;
        }
      }
      out->end[l] = n;
      of = out->outer[l];
    }
    out->of[n->id] = of;
    if (n->op == OP_LOOP_BEGIN) {
      loop_of_begin[n->id] = k;
      out->begin[k] = n;
      out->outer[k++] = of;
    }
  }
  for (int l = 0; l < n_loops; l++)
    if (!out->end[l]) {
      snprintf(err, errlen, "loop_begin %%%d has no loop_end", out->begin[l]->out[0].id);
      return false;
    }
  for (Node *n = g->first; n; n = n->next) {
    int of = out->of[n->id];
    if (of >= 0 && n->id > out->end[of]->id) {
      snprintf(err, errlen, "%s %%%d reads a loop's carried values after its loop_end %%%d", ir_ops[n->op].name,
               n->out[0].id, out->end[of]->out[0].id);
      return false;
    }
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (out->of[g->outputs[i]->def->id] >= 0) {
      snprintf(err, errlen, "output '%s' is a value of a loop's body", g->output_names[i]);
      return false;
    }
  return true;
}

bool ir_has_loops(const Graph *g) {
  for (const Node *n = g->first; n; n = n->next)
    if (n->op == OP_LOOP_BEGIN) return true;
  return false;
}

/* Moves node n to just before `before`. */
static void move_before(Graph *g, Node *n, Node *before) {
  ir_remove(g, n);
  ir_insert_before(g, before, n);
}

bool ir_loops_order(Graph *g, IrLoops *out, char *err, size_t errlen) {
  if (!ir_loops_find(g, out, err, errlen)) return false;
  if (!out->n) return true;
  /* Inner loops first (their loop_ends come first): an outer loop's
   * gathering keeps the inner one's order. */
  for (Node *e = g->first; e; e = e->next) {
    if (e->op != OP_LOOP_END) continue;
    int l = 0;
    while (out->end[l] != e) l++;
    Node *b = out->begin[l], *last = e->prev, *next;
    for (Node *n = b->next; n != e; n = next) {
      next = n == last ? e : n->next; /* the nodes moved come again after last */
      if (loop_within(out, out->of[n->id], l)) move_before(g, n, e);
    }
  }
  ir_number(g);
  return ir_loops_find(g, out, err, errlen);
}

/* The frames that do not hold inside a loop's body: loop frames and
 * those whose condition the body computes.  n's guard cut back past
 * them. */
static const Guard *outside_loops(const IrLoops *L, const Guard *gd) {
  const Guard *keep = gd;
  for (const Guard *f = gd; f; f = f->outer) {
    /* a condition a pass removed keeps a stale id: dropping its frame
     * only computes more */
    int d = f->cond ? f->cond->def->id : -1;
    if (f->loop || d < 0 || d >= L->n_nodes || L->of[d] >= 0) keep = f->outer;
  }
  return keep;
}

void ir_loops_guard(Graph *g) {
  IrLoops L;
  char err[256];
  if (!ir_has_loops(g) || !ir_loops_order(g, &L, err, sizeof err)) return; /* the verifier says why */
  const Guard **frame = ARENA_ARRAY(&g->ctx->arena, const Guard *, L.n + 1);
  int next_loop = 0; /* loops are numbered in their loop_begins' order */
  for (Node *n = g->first; n; n = n->next) {
    int of = L.of[n->id];
    n->guard = of >= 0 ? frame[of] : outside_loops(&L, n->guard);
    if (n->op == OP_LOOP_BEGIN) {
      Guard *f = (Guard *)ir_guard_new(g, n->in[0], true, n->guard);
      f->loop = n;
      frame[next_loop++] = f;
    }
  }
}
