/* Rematerialization of weight-only values: takes a graph just before
 * fusion, gives every weight-only consumer of a cheap weight-only value
 * (an elementwise op or an index move over params and consts) its own
 * copy of it, so that fusion evaluates it inside each consumer's kernel
 * instead of storing it for all of them.
 *
 * Why: fusion never puts a value with several uses inside a group
 * (passes/fuse.c), so such a value is stored, and a weight-only one is
 * stored in the activation arena while the plan's init steps run
 * (codegen/initgraph.c).  int8 is where it costs: a bn-folded conv
 * weight W * s feeds both the reduce_max of its per-channel scale and
 * its quantize, so the whole f32 W * s was kept, 9.4 MB for ResNet-18's
 * largest conv, against 82 KB of activations.  Copied, each consumer
 * computes W * s as it loads it, and the arena holds activations alone.
 * Init steps run once per change of the weights, so computing an
 * elementwise op twice there is cheaper than any byte it would hold.
 *
 * A run's values are never copied: a run computes each value once.  CSE
 * would merge the copies again, so this runs after the cleanups, right
 * before fuse. */
#include "passes/pass.h"

/* Copies per value at most, and in all at most as many new nodes as the
 * graph had: a value used twice by a value used twice... would otherwise
 * double at every level. */
enum { MAX_COPIES = 8 };

static bool is_cheap(const Node *n) {
  if (n->n_out != 1) return false;
  if (ir_ops[n->op].cls == K_ELEMWISE) return true;
  return n->op == OP_RESHAPE || n->op == OP_TRANSPOSE || n->op == OP_SLICE || n->op == OP_EXPAND;
}

/* A consumer that evaluates the operand where it needs an element, as
 * fusion does for elementwise ops, index moves and a reduction's input;
 * a GEMM, a window or a convolution reads it from memory. */
static bool reads_inline(const Node *user, int operand) {
  OpClass cls = ir_ops[user->op].cls;
  if (cls == K_ELEMWISE) return true;
  if (cls == K_REDUCE) return operand == 0 && user->op != OP_ARGMAX;
  return user->op == OP_RESHAPE || user->op == OP_TRANSPOSE || user->op == OP_SLICE ||
         user->op == OP_EXPAND;
}

typedef struct Use {
  Node *user;
  int operand;
} Use;

/* The uses of p's value by nodes after it, up to cap; -1 when one is not
 * a weight-only inline reader. */
static int inline_uses(Node *p, const bool *weight_only, Use *uses, int cap) {
  int n = 0;
  for (Node *u = p->next; u; u = u->next) {
    for (int i = 0; i < u->n_in; i++) {
      if (u->in[i] != &p->out[0]) continue;
      /* Nodes made by this pass are after their original and weight-only. */
      bool weight = u->id < 0 || weight_only[u->id];
      if (!weight || !reads_inline(u, i) || n == cap) return -1;
      uses[n++] = (Use){u, i};
    }
  }
  return n;
}

bool pass_remat(Graph *g, PassCtx *pc) {
  bool *weight_only = pass_weight_only(g);
  int budget = g->n_nodes, copies = 0;
  bool *is_output = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (int i = 0; i < g->n_outputs; i++) is_output[g->outputs[i]->def->id] = true;
  /* Backwards, so that a copy's operands, met later, count the copy
   * among their uses. */
  for (Node *p = g->last; p; p = p->prev) {
    if (p->id < 0 || !weight_only[p->id] || ir_ops[p->op].cls == K_SOURCE || !is_cheap(p) ||
        is_output[p->id])
      continue;
    Use uses[MAX_COPIES];
    int n = inline_uses(p, weight_only, uses, MAX_COPIES);
    if (n < 2 || copies + n - 1 > budget) continue;
    for (int k = 1; k < n; k++) {
      Node *copy = pass_new_node(g, p->next, p->op, p->n_in, p->in, p, p->loc);
      copy->keep_f32 = p->keep_f32;
      copy->id = -1;
      uses[k].user->in[uses[k].operand] = &copy->out[0];
      copies++;
    }
  }
  if (copies) pass_stat(pc, "remat: weight-only values copied", copies);
  return copies > 0;
}
