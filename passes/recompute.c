/* Activation checkpointing (--recompute, docs/training.md): takes a
 * training step's graph just before fusion and PassOptions.recompute (""
 * for the automatic choice, or a comma-separated list of `as` scopes),
 * returns it with the chosen forward segments cloned into the backward:
 * every backward read of a value computed in a segment reads a clone,
 * made just before the first backward node that needs it, and the clone
 * reads the segment's inputs (its checkpoints, values from outside it)
 * and its own clones.  The originals are then read by the forward only
 * and die at its end, so the memory planner holds each segment's
 * inside values twice briefly rather than across the whole step.
 *
 * The forward is what the loss (output 0) depends on; the backward is
 * every node after the last of those.  A segment is the forward nodes of
 * one scope: a named SCOPE takes the nodes built in it and in the scopes
 * under it (SCOPE.*); the automatic choice takes each scope's first two
 * dotted parts ("layer1.0", a residual block of resnet18; "self_attn" of
 * a transformer layer), leaving nodes outside every scope alone; in a
 * graph whose forward has no scope at all (an ONNX import), it cuts the
 * forward into runs of about sqrt(n) consecutive nodes (Chen et al.'s
 * sqrt(n) checkpointing: the runs' inputs stay, their insides are
 * computed twice).  The
 * clones compute exactly what the originals did (the same ops and
 * attributes, dropout with its seed and offset), so the step's numbers
 * do not change.  Runs after the cleanups, since CSE would merge each
 * clone back into its original. */
#include <string.h>

#include "passes/pass.h"

typedef struct Recompute {
  Graph *g;
  const char *spec;
  int n_ids;
  const char **segment; /* by node id (original nodes): its segment, or NULL */
  Node **clone;         /* by node id: its clone once made */
  int cloned;
} Recompute;

/* Whether scope s lies in the scope named by item[0..len). */
static bool under(const char *s, const char *item, size_t len) {
  return strncmp(s, item, len) == 0 && (s[len] == 0 || s[len] == '.');
}

static const char *segment_of(Recompute *r, const Node *n) {
  const char *s = n->scope;
  if (!s || !*s || ir_ops[n->op].cls == K_SOURCE) return NULL;
  Arena *a = &r->g->ctx->arena;
  if (!*r->spec) {
    const char *dot = strchr(s, '.');
    if (dot) dot = strchr(dot + 1, '.');
    return dot ? arena_printf(a, "%.*s", (int)(dot - s), s) : s;
  }
  for (const char *item = r->spec; *item;) {
    size_t len = strcspn(item, ",");
    if (len && under(s, item, len)) return arena_printf(a, "%.*s", (int)len, item);
    item += len + (item[len] == ',');
  }
  return NULL;
}

static bool same_segment(const Recompute *r, const Node *a, const Node *b) {
  const char *x = a->id < r->n_ids ? r->segment[a->id] : NULL, *y = b->id < r->n_ids ? r->segment[b->id] : NULL;
  return x && y && strcmp(x, y) == 0;
}

/* n's clone, made before `before` after the clones of the operands it
 * takes from its own segment.  Depth is bounded by the segment's size. */
static Node *clone_of(Recompute *r, Node *n, Node *before) {
  if (r->clone[n->id]) return r->clone[n->id];
  Value **in = ARENA_ARRAY(&r->g->ctx->arena, Value *, n->n_in + 1);
  for (int i = 0; i < n->n_in; i++) {
    Value *v = n->in[i];
    in[i] = same_segment(r, v->def, n) ? &clone_of(r, v->def, before)->out[v->index] : v;
  }
  Node *c = pass_new_node(r->g, before, n->op, n->n_in, in, n, n->loc);
  c->keep_f32 = n->keep_f32;
  c->scope = n->scope;
  c->id = r->n_ids; /* past every original: never a segment's */
  r->cloned++;
  return r->clone[n->id] = c;
}

bool pass_recompute(Graph *g, PassCtx *pc) {
  const char *spec = pc && pc->options ? pc->options->recompute : NULL;
  if (!spec || g->n_outputs == 0) return false;
  ir_number(g);
  Arena *a = &g->ctx->arena;
  Recompute r = {.g = g, .spec = spec, .n_ids = g->n_nodes};
  for (Node *n = g->first; n; n = n->next) r.n_ids = n->id + 1 > r.n_ids ? n->id + 1 : r.n_ids;
  bool *forward = ARENA_ARRAY(a, bool, r.n_ids + 1);
  r.segment = ARENA_ARRAY(a, const char *, r.n_ids + 1);
  r.clone = ARENA_ARRAY(a, Node *, r.n_ids + 1);
  forward[g->outputs[0]->def->id] = true;
  Node *boundary = NULL;
  for (Node *n = g->last; n; n = n->prev) {
    if (!forward[n->id]) continue;
    if (!boundary) boundary = n;
    for (int i = 0; i < n->n_in; i++) forward[n->in[i]->def->id] = true;
  }
  if (!boundary || !boundary->next) return false;
  /* Work over the weights alone (bn-fold's W') runs at load, not in the
   * step: it is no activation, and a clone would run it every step. */
  bool *weight = pass_weight_only(g);
  int eligible = 0, scoped = 0;
  for (Node *n = g->first; n != boundary->next; n = n->next)
    if (forward[n->id] && !weight[n->id] && ir_ops[n->op].cls != K_SOURCE) {
      eligible++;
      scoped += n->scope && *n->scope;
    }
  if (!*spec && !scoped) {
    int run = 1;
    while (run * run < eligible) run++;
    /* Any grouping computes the same values, so a name that happens to
     * equal a scope elsewhere would cost memory, never correctness. */
    int k = 0;
    for (Node *n = g->first; n != boundary->next; n = n->next)
      if (forward[n->id] && !weight[n->id] && ir_ops[n->op].cls != K_SOURCE)
        r.segment[n->id] = arena_printf(a, "\001run %d", k++ / run);
  } else {
    for (Node *n = g->first; n != boundary->next; n = n->next)
      if (forward[n->id] && !weight[n->id]) r.segment[n->id] = segment_of(&r, n);
  }
  Node *last = g->last;
  for (Node *u = boundary->next; u; u = u == last ? NULL : u->next)
    for (int i = 0; i < u->n_in; i++) {
      Node *d = u->in[i]->def;
      if (d->id < r.n_ids && r.segment[d->id]) u->in[i] = &clone_of(&r, d, u)->out[u->in[i]->index];
    }
  if (pc) pass_stat(pc, "recompute: forward nodes cloned into the backward", r.cloned);
  return r.cloned > 0;
}
