/* Rematerialization: takes a graph just before fusion, gives every
 * consumer that evaluates a cheap value inline (an elementwise op or an
 * index move, read by an elementwise op, an index move or a reduction's
 * input) its own copy of it, so that fusion evaluates it inside each
 * consumer's kernel instead of storing it for all of them:
 *   - a weight-only value, for its weight-only consumers;
 *   - a run's value, when the copies keep no more bytes alive than the
 *     value took (worth_copying, below).
 *
 * Why: fusion never puts a value with several uses inside a group
 * (passes/fuse.c), so such a value is stored.  A weight-only one is
 * stored in the activation arena while the plan's init steps run
 * (codegen/initgraph.c).  int8 is where it costs: a bn-folded conv
 * weight W * s feeds both the reduce_max of its per-channel scale and
 * its quantize, so the whole f32 W * s was kept, 9.4 MB for ResNet-18's
 * largest conv, against 82 KB of activations.  Copied, each consumer
 * computes W * s as it loads it, and the arena holds activations alone.
 * Init steps run once per change of the weights, so computing an
 * elementwise op twice there is cheaper than any byte it would hold.
 * A run's stored value costs a kernel that writes it and reads that read
 * it back: a training batchnorm's xhat between its two backward
 * kernels, the shifted x that both batch statistics sum.
 *
 * CSE would merge the copies again, so this runs after the cleanups,
 * right before fuse. */
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

/* Every original node's readers, found once: scanning the rest of the
 * graph for each node was quadratic (a 50,000-node chain took minutes).
 * A reader's place in the graph is its order key; the copies this pass
 * inserts right after their original p take p's place plus a fraction,
 * so the readers come back in graph order, and the first one found
 * keeps the original as before. */
typedef struct UseLink {
  Use use;
  double order;
  struct UseLink *next;
} UseLink;

typedef struct Readers {
  UseLink **of; /* by node id */
  double *order;
} Readers;

static void add_reader(Arena *a, Readers *r, Node *user, int operand, double order) {
  const Node *d = user->in[operand]->def;
  if (d->id < 0) return;
  UseLink *l = ARENA_NEW(a, UseLink);
  *l = (UseLink){{user, operand}, order, r->of[d->id]};
  r->of[d->id] = l;
}

/* The uses of p's value, up to cap, in graph order; -1 when one is not
 * an inline reader, or (for a weight-only p) not weight-only itself. */
static int inline_uses(const Readers *r, Node *p, const bool *weight_only, Use *uses, int cap) {
  int n = 0;
  double order[MAX_COPIES];
  bool weight = weight_only[p->id];
  for (const UseLink *l = r->of[p->id]; l; l = l->next) {
    Node *u = l->use.user;
    int i = l->use.operand;
    if (u->in[i] != &p->out[0]) continue;
    /* Nodes made by this pass are after their original, and a copy is
     * weight-only when its original is. */
    if ((weight && u->id >= 0 && !weight_only[u->id]) || !reads_inline(u, i) || n == cap) return -1;
    int k = n++;
    for (; k > 0 && order[k - 1] > l->order; k--) uses[k] = uses[k - 1], order[k] = order[k - 1];
    uses[k] = l->use, order[k] = l->order;
  }
  return n;
}

static int64_t bytes_of(const Value *v) { return ir_type_numel(&v->type) * ir_dtype_size(v->type.dtype); }

/* A run's value p, read inline by all its uses, may be computed by each
 * of them instead of stored when that holds no more bytes: the operands
 * a copy keeps alive past their own last use (last[], by node id: the
 * last position a value is read at, copies' reads counted at their
 * readers'; one read where p's last reader is, or later, is alive
 * anyway) are together at most p's own bytes, and an eighth more for
 * the per-channel vectors that come beside an activation.  So a
 * batchnorm's xhat = (x - mean) * rstd, read by the backward's sum of
 * dy xhat and by dx, is recomputed from x in both instead of written
 * between them, x living where xhat did; and x - shift, read by both
 * batch statistics, is evaluated by each of the sums that one kernel
 * computes side by side. */
/* d's value is kept until position `at` anyway. */
static bool alive(const Node *d, const bool *is_output, const int *last, int at) {
  return ir_ops[d->op].cls == K_SOURCE || is_output[d->id] || last[d->id] >= at;
}

static bool reads_alive(const Node *n, const bool *is_output, const int *last, int at) {
  for (int i = 0; i < n->n_in; i++)
    if (!alive(n->in[i]->def, is_output, last, at)) return false;
  return true;
}

static bool worth_copying(const Node *p, const bool *is_output, const int *last) {
  if (!ir_dtype_is_float(p->out[0].type.dtype)) return false;
  int64_t kept = 0, room = bytes_of(&p->out[0]);
  for (int i = 0; i < p->n_in; i++) {
    const Node *d = p->in[i]->def;
    if (alive(d, is_output, last, last[p->id])) continue;
    /* An index move that stays would be a kernel of its own: fusion
     * stores a value with several readers, and only an elementwise one
     * as another kernel's side output (a reshape aliases its bytes).  So
     * it must be copied in turn when it is met, which it is when what it
     * reads is alive anyway (x's slice in x - s). */
    if (ir_ops[d->op].cls == K_MOVE && d->op != OP_RESHAPE) {
      if (!reads_alive(d, is_output, last, last[p->id])) return false;
      continue;
    }
    kept += bytes_of(p->in[i]);
  }
  return kept <= room + room / 8;
}

bool pass_remat(Graph *g, PassCtx *pc) {
  bool *weight_only = pass_weight_only(g);
  int budget = g->n_nodes, copies = 0, run_copies = 0;
  Arena *a = &g->ctx->arena;
  bool *is_output = ARENA_ARRAY(a, bool, g->n_nodes + 1);
  int *last = ARENA_ARRAY(a, int, g->n_nodes + 1);
  for (int i = 0; i < g->n_outputs; i++) is_output[g->outputs[i]->def->id] = true;
  Readers readers = {ARENA_ARRAY(a, UseLink *, g->n_nodes + 1), ARENA_ARRAY(a, double, g->n_nodes + 1)};
  int place = 0;
  for (Node *n = g->first; n; n = n->next) {
    for (int i = 0; i < n->n_in; i++) last[n->in[i]->def->id] = n->id;
    place++;
  }
  for (Node *n = g->last; n; n = n->prev) {
    place--;
    if (n->id >= 0) readers.order[n->id] = place;
    for (int i = n->n_in - 1; i >= 0; i--) add_reader(a, &readers, n, i, place);
  }
  /* Backwards, so that a copy's operands, met later, count the copy
   * among their uses (and its reader's position as theirs). */
  for (Node *p = g->last; p; p = p->prev) {
    if (p->id < 0 || ir_ops[p->op].cls == K_SOURCE || !is_cheap(p) || is_output[p->id]) continue;
    Use uses[MAX_COPIES];
    int n = inline_uses(&readers, p, weight_only, uses, MAX_COPIES);
    if (n < 2 || copies + n - 1 > budget) continue;
    bool weight = weight_only[p->id];
    if (!weight && !worth_copying(p, is_output, last)) continue;
    for (int k = 1; k < n; k++) {
      Node *copy = pass_new_node(g, p->next, p->op, p->n_in, p->in, p, p->loc);
      copy->keep_f32 = p->keep_f32;
      copy->id = -1;
      uses[k].user->in[uses[k].operand] = &copy->out[0];
      /* Inserted after p ahead of the copies before it: c_{n-1} .. c_1. */
      for (int i = p->n_in - 1; i >= 0; i--)
        add_reader(a, &readers, copy, i, readers.order[p->id] + (double)(n - k) / (MAX_COPIES + 1));
      copies++;
      run_copies += !weight;
    }
    for (int i = 0; i < p->n_in; i++) {
      int d = p->in[i]->def->id;
      if (last[d] < last[p->id]) last[d] = last[p->id];
    }
  }
  if (copies - run_copies) pass_stat(pc, "remat: weight-only values copied", copies - run_copies);
  if (run_copies) pass_stat(pc, "remat: run values copied into their readers", run_copies);
  return copies > 0;
}
