/* The stage split of pipeline parallel training (stages.h says the
 * contract): takes a forward graph with its loss and a stage count,
 * returns the split and each stage's forward, backward and optimizer
 * graphs, built from copies of the original nodes so that every stage
 * computes exactly what one process computes for its part. */
#include "passes/stages.h"

#include "passes/autodiff.h"
#include "passes/pass.h"

#include "ir/eval.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

static bool is_source(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_CONST; }

/* Node i's per-node cost for balancing: the FLOPs and the bytes it must
 * move, added, since either may bound its time. */
static double node_cost(const Node *n) {
  IrCost c = ir_cost(n);
  return c.flops + c.bytes;
}

/* What a cut before computing node p (1..n-1) would carry and whether it
 * may be made, from each value's definition and last reader. */
typedef struct CutInfo {
  double *bytes;  /* [n + 1] */
  bool *allowed;  /* [n + 1] */
  double *prefix; /* [n + 1]: cost of the first p computing nodes */
} CutInfo;

/* By Value.id: the index of the last computing node that reads it, -1
 * for none. */
static int *last_readers(Graph *g, Node **order, int n, int n_values, bool inference) {
  int *last = ARENA_ARRAY(&g->ctx->arena, int, n_values + 1);
  for (int v = 0; v <= n_values; v++) last[v] = -1;
  for (int j = 0; j < n; j++)
    for (int k = 0; k < order[j]->n_in; k++) last[order[j]->in[k]->id] = j;
  /* An inference output is read past the last node: it reaches the last
   * stage, which returns it. */
  for (int i = 0; inference && i < g->n_outputs; i++) last[g->outputs[i]->id] = n;
  return last;
}

static void cut_info(Graph *g, Node **order, int n, const int *last, int loss_at, bool inference, CutInfo *ci) {
  Arena *a = &g->ctx->arena;
  double *d_bytes = ARENA_ARRAY(a, double, n + 2);
  int *d_bad = ARENA_ARRAY(a, int, n + 2);
  int n_ids = g->n_nodes + 1;
  int *first_reader = ARENA_ARRAY(a, int, n_ids);
  for (int k = 0; k < n_ids; k++) first_reader[k] = -1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < order[i]->n_in; k++) {
      Node *def = order[i]->in[k]->def;
      if (def->op == OP_PARAM && first_reader[def->id] < 0) first_reader[def->id] = i;
    }
  /* A float param read before and after p pins p (it is trained in one
   * stage; an integer one, such as dropout's step counter, is state each
   * stage may hold a copy of); so does a value crossing p that is not
   * floating point.  Inference sends no gradient back: neither pins. */
  for (Node *m = g->first; m && !inference; m = m->next)
    if (m->op == OP_PARAM && ir_dtype_is_float(m->out[0].type.dtype) && first_reader[m->id] >= 0 &&
        first_reader[m->id] < last[m->out[0].id])
      d_bad[first_reader[m->id] + 1]++, d_bad[last[m->out[0].id] + 1]--;
  for (int i = 0; i < n; i++)
    for (int r = 0; r < order[i]->n_out; r++) {
      const Value *v = &order[i]->out[r];
      int end = last[v->id];
      if (end <= i) continue;
      /* v crosses every cut p with i < p <= end */
      double b = (double)ir_tensor_nbytes(&v->type);
      d_bytes[i + 1] += b, d_bytes[end + 1] -= b;
      if (!inference && !ir_dtype_is_float(v->type.dtype)) d_bad[i + 1]++, d_bad[end + 1]--;
    }
  ci->bytes = ARENA_ARRAY(a, double, n + 1);
  ci->allowed = ARENA_ARRAY(a, bool, n + 1);
  ci->prefix = ARENA_ARRAY(a, double, n + 1);
  double bytes = 0;
  int bad = 0;
  for (int p = 1; p <= n; p++) {
    bytes += d_bytes[p], bad += d_bad[p];
    ci->bytes[p] = bytes;
    ci->allowed[p] = bad == 0 && p <= loss_at;
    ci->prefix[p] = ci->prefix[p - 1] + node_cost(order[p - 1]);
  }
}

/* The cuts: minimise the largest stage's cost, then the bytes crossing
 * within 10% of it.  best[k][i]: the first i nodes in k stages.  False
 * when no allowed cuts give n_stages non-empty stages. */
static bool choose_cuts(Arena *a, int n, int s_count, const CutInfo *ci, int *cuts) {
  size_t w = (size_t)n + 1;
  double *best = ARENA_ARRAY(a, double, w * (size_t)(s_count + 1));
  double *bytes = ARENA_ARRAY(a, double, w * (size_t)(s_count + 1));
  int *from = ARENA_ARRAY(a, int, w * (size_t)(s_count + 1));
#define AT(t, k, i) t[(size_t)(k) * w + (size_t)(i)]
  for (int k = 1; k <= s_count; k++)
    for (int i = 0; i <= n; i++) {
      AT(best, k, i) = DBL_MAX;
      if (k == 1) {
        if (i > 0) AT(best, k, i) = ci->prefix[i];
        continue;
      }
      for (int j = k - 1; j < i; j++) {
        if (!ci->allowed[j] || AT(best, k - 1, j) == DBL_MAX) continue;
        double c = ci->prefix[i] - ci->prefix[j];
        double m = c > AT(best, k - 1, j) ? c : AT(best, k - 1, j);
        if (m < AT(best, k, i)) AT(best, k, i) = m;
      }
    }
  if (AT(best, s_count, n) == DBL_MAX) return false;
  double limit = AT(best, s_count, n) * 1.1 + 1e-9;
  for (int k = 1; k <= s_count; k++)
    for (int i = 0; i <= n; i++) {
      AT(bytes, k, i) = DBL_MAX;
      AT(from, k, i) = -1;
      if (k == 1) {
        if (i > 0 && ci->prefix[i] <= limit) AT(bytes, k, i) = 0;
        continue;
      }
      for (int j = k - 1; j < i; j++) {
        if (!ci->allowed[j] || AT(bytes, k - 1, j) == DBL_MAX || ci->prefix[i] - ci->prefix[j] > limit) continue;
        double b = AT(bytes, k - 1, j) + ci->bytes[j];
        if (b < AT(bytes, k, i)) AT(bytes, k, i) = b, AT(from, k, i) = j;
      }
    }
  cuts[0] = 0;
  cuts[s_count] = n;
  for (int k = s_count, i = n; k > 1; k--) i = cuts[k - 1] = AT(from, k, i);
#undef AT
  return true;
}

/* "file:line:col" of a node, for messages that go out as plain text. */
static const char *where(Arena *a, const Node *n) {
  const SrcLoc *l = &n->loc;
  if (!l->file) return "the model";
  if (l->line <= 0) return arena_printf(a, "%s", l->file->name);
  return arena_printf(a, "%s:%d:%d", l->file->name, l->line, l->col);
}

/* The stages the model's stage() marks ask for: level[id] of every
 * computing node, and the graph's list put in stage order (a stable sort
 * by level, sources first, still topological since no operand is in a
 * later stage than its reader).  A node is at least in its operands'
 * stage, one later past a mark, and, so that no value crosses a cut it
 * need not, as late as its readers allow (the loss in the last stage).
 * Returns the number of stages, 0 without marks, -1 after writing err. */
static int marked_stages(Graph *g, int n_stages, bool inference, int *level, char *err, size_t errlen) {
  Arena *a = &g->ctx->arena;
  const Node *first_mark = NULL;
  int n_nodes = 0, n_levels = 1;
  for (Node *m = g->first; m; m = m->next, n_nodes++) {
    level[m->id] = 0;
    if (is_source(m)) continue;
    for (int i = 0; i < m->n_in; i++) {
      const Node *d = m->in[i]->def;
      if (is_source(d)) continue;
      int l = level[d->id] + (d->op == OP_STAGE);
      if (l > level[m->id]) level[m->id] = l;
    }
    if (m->op == OP_STAGE) {
      if (!first_mark) first_mark = m;
      if (level[m->id] + 2 > n_levels) n_levels = level[m->id] + 2;
    }
  }
  if (!first_mark) return 0;
  if (n_levels != n_stages) {
    snprintf(err, errlen, "the model's stage() marks (the first at %s) make %d stages, but the pipeline has %d",
             where(a, first_mark), n_levels, n_stages);
    return -1;
  }
  Node **list = ARENA_ARRAY(a, Node *, n_nodes);
  int k = 0;
  for (Node *m = g->first; m; m = m->next) list[k++] = m;
  int *earliest_reader = ARENA_ARRAY(a, int, g->n_nodes + 1);
  for (int i = 0; i < n_nodes; i++) earliest_reader[list[i]->id] = n_levels;
  const Node *loss = g->outputs[0]->def;
  /* Inference returns every output from the last stage: each counts as
   * read there. */
  for (int i = 0; inference && i < g->n_outputs; i++) earliest_reader[g->outputs[i]->def->id] = n_levels - 1;
  for (int i = n_nodes - 1; i >= 0; i--) {
    Node *m = list[i];
    if (is_source(m)) continue;
    bool is_loss = m == loss && !inference;
    bool read = earliest_reader[m->id] < n_levels || is_loss;
    if (m->op != OP_STAGE && read) level[m->id] = is_loss ? n_levels - 1 : earliest_reader[m->id];
    for (int j = 0; j < m->n_in; j++)
      if (level[m->id] < earliest_reader[m->in[j]->def->id]) earliest_reader[m->in[j]->def->id] = level[m->id];
  }
  int *count = ARENA_ARRAY(a, int, n_levels);
  for (int i = 0; i < n_nodes; i++)
    if (!is_source(list[i])) count[level[list[i]->id]]++;
  for (int s = 0; s < n_levels; s++)
    if (!count[s]) {
      snprintf(err, errlen, "stage %d of the model's stage() marks (the first at %s) has no operations", s,
               where(a, first_mark));
      return -1;
    }
  int *sorted_level = ARENA_ARRAY(a, int, n_nodes);
  k = 0;
  g->first = g->last = NULL;
  for (int pass = -1; pass < n_levels; pass++)
    for (int i = 0; i < n_nodes; i++) {
      Node *m = list[i];
      if (is_source(m) ? pass != -1 : level[m->id] != pass) continue;
      sorted_level[k++] = level[m->id];
      m->prev = g->last, m->next = NULL;
      if (g->last) g->last->next = m;
      else g->first = m;
      g->last = m;
    }
  ir_number(g);
  for (Node *m = g->first; m; m = m->next) level[m->id] = sorted_level[m->id];
  return n_levels;
}

/* The first node after m that reads it, or NULL. */
static Node *first_reader(Node *m) {
  for (Node *r = m->next; r; r = r->next)
    for (int k = 0; k < r->n_in; k++)
      if (r->in[k]->def == m) return r;
  return NULL;
}

/* Weight-only nodes (of params and consts alone: an export's transposed
 * weights, all at the top of its graph) moved to just before their first
 * reader, so that each is computed in its reader's stage (split forbids
 * a cut between them) rather than sent there every micro-batch as if it
 * were an activation. */
static void sink_weight_only(Graph *g) {
  bool *weight = pass_weight_only(g);
  for (Node *m = g->last, *prev; m; m = prev) {
    prev = m->prev;
    if (is_source(m) || !weight[m->id]) continue;
    Node *reader = first_reader(m);
    if (!reader || reader == m->next) continue;
    ir_remove(g, m);
    ir_insert_before(g, reader, m);
  }
}

static bool split(Graph *g, int n_stages, bool inference, const StageSplit *like, StageSplit *out, char *err,
                  size_t errlen) {
  memset(out, 0, sizeof *out);
  Arena *a = &g->ctx->arena;
  sink_weight_only(g);
  ir_number(g);
  int n = 0;
  for (Node *m = g->first; m; m = m->next) n += !is_source(m);
  if (n_stages < 1 || g->n_outputs < 1) {
    snprintf(err, errlen, "a pipeline needs at least one stage and %s", inference ? "an output" : "a loss");
    return false;
  }
  if (n < n_stages) {
    snprintf(err, errlen, "the model has %d operation%s: it cannot be cut into %d stages", n, n == 1 ? "" : "s",
             n_stages);
    return false;
  }
  int *level = ARENA_ARRAY(a, int, g->n_nodes + 1);
  /* marks cut where they stand at any batch size */
  int marked = marked_stages(g, n_stages, inference, level, err, errlen);
  if (marked < 0) return false;
  if (like && like->cuts[n_stages] != n) {
    snprintf(err, errlen, "the model has %d operations at this batch size, %d at the other: the stages cannot be the same",
             n, like->cuts[n_stages]);
    return false;
  }
  Node **order = ARENA_ARRAY(a, Node *, n);
  int *pos = ARENA_ARRAY(a, int, g->n_nodes + 1); /* by id: index among the computing nodes */
  int k = 0;
  for (Node *m = g->first; m; m = m->next)
    if (!is_source(m)) pos[m->id] = k, order[k++] = m;
  /* The loss must come from the last stage: no cut after its node. */
  const Node *loss = g->outputs[0]->def;
  int n_values = 0;
  for (Node *m = g->first; m; m = m->next) n_values += m->n_out;
  int *last = last_readers(g, order, n, n_values, inference);
  CutInfo ci;
  cut_info(g, order, n, last, inference ? n : is_source(loss) ? 0 : pos[loss->id], inference, &ci);
  /* Chosen cuts keep a weight-only node with the reader it sits before,
   * where any cuts do (a weight also read in an earlier stage cannot
   * follow its reader: then it crosses). */
  CutInfo kept = ci;
  kept.allowed = ARENA_ARRAY(a, bool, n + 1);
  memcpy(kept.allowed, ci.allowed, sizeof *kept.allowed * (size_t)(n + 1));
  bool *weight = pass_weight_only(g);
  for (int i = 0; i + 1 < n; i++)
    if (weight[order[i]->id]) kept.allowed[i + 1] = false;
  const char *rules = inference ? "each stage needs an operation"
                                : "each stage needs an operation, a parameter's readers must share a stage, only "
                                  "floating-point values may cross a cut, and the last stage computes the loss";
  int *cuts = ARENA_ARRAY(a, int, n_stages + 1);
  if (like && !marked) {
    memcpy(cuts, like->cuts, sizeof *cuts * (size_t)(n_stages + 1));
    for (int s = 1; s < n_stages; s++)
      if (!ci.allowed[cuts[s]]) {
        snprintf(err, errlen, "the cut before stage %d is not allowed at this batch size: %s", s, rules);
        return false;
      }
  } else if (marked) {
    for (int i = n - 1; i >= 0; i--) cuts[level[order[i]->id]] = i;
    cuts[n_stages] = n;
    for (int s = 1; s < n_stages; s++)
      if (!ci.allowed[cuts[s]]) {
        const Node *mark = NULL;
        for (int i = cuts[s - 1]; i < cuts[s]; i++)
          if (order[i]->op == OP_STAGE) mark = order[i];
        snprintf(err, errlen,
                 "the stage() mark at %s cannot end stage %d: a parameter's readers must share a stage, only "
                 "floating-point values may cross a cut, and the last stage computes the loss",
                 mark ? where(a, mark) : "?", s - 1);
        return false;
      }
  } else if (!choose_cuts(a, n, n_stages, &kept, cuts) && !choose_cuts(a, n, n_stages, &ci, cuts)) {
    snprintf(err, errlen, "the model cannot be cut into %d stages: %s", n_stages, rules);
    return false;
  }
  out->n_stages = n_stages;
  out->marked = marked > 0;
  out->cuts = cuts;
  out->inference = inference;
  out->stage = ARENA_ARRAY(a, int, g->n_nodes + 1);
  out->first = ARENA_ARRAY(a, int, n_stages);
  out->last = ARENA_ARRAY(a, int, n_stages);
  out->n_nodes = ARENA_ARRAY(a, int, n_stages);
  out->cost = ARENA_ARRAY(a, double, n_stages);
  out->param_bytes = ARENA_ARRAY(a, double, n_stages);
  out->cut = ARENA_ARRAY(a, StageCut, n_stages);
  out->total = ci.prefix[n];
  for (Node *m = g->first; m; m = m->next) out->stage[m->id] = -1;
  for (int s = 0; s < n_stages; s++) {
    out->first[s] = order[cuts[s]]->id;
    out->last[s] = order[cuts[s + 1] - 1]->id;
    out->n_nodes[s] = cuts[s + 1] - cuts[s];
    out->cost[s] = ci.prefix[cuts[s + 1]] - ci.prefix[cuts[s]];
    for (int i = cuts[s]; i < cuts[s + 1]; i++) out->stage[order[i]->id] = s;
  }
  /* Each param's bytes to the stage of its first reader (they share one;
   * under inference, to every stage that reads it: each holds a copy). */
  int *counted = ARENA_ARRAY(a, int, g->n_nodes + 1); /* by id: 1 + the last stage counted in */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < order[i]->n_in; j++) {
      const Node *p = order[i]->in[j]->def;
      int s = out->stage[order[i]->id];
      if (p->op == OP_PARAM && (!counted[p->id] || (inference && counted[p->id] != s + 1)))
        counted[p->id] = s + 1, out->param_bytes[s] += (double)ir_tensor_nbytes(&p->out[0].type);
    }
  /* The values crossing cut s: defined before it, read at or after it. */
  for (int s = 1; s < n_stages; s++) {
    StageCut *c = &out->cut[s];
    c->values = ARENA_ARRAY(a, Value *, 1);
    int cap = 1;
    for (int i = 0; i < cuts[s]; i++)
      for (int r = 0; r < order[i]->n_out; r++) {
        Value *v = &order[i]->out[r];
        if (last[v->id] < cuts[s]) continue;
        if (c->n == cap) {
          c->values = arena_realloc(a, c->values, sizeof *c->values * (size_t)cap, sizeof *c->values * (size_t)cap * 2);
          cap *= 2;
        }
        c->values[c->n++] = v;
        c->bytes += (double)ir_tensor_nbytes(&v->type);
      }
  }
  return true;
}

bool pass_stage_split(Graph *g, int n_stages, StageSplit *out, char *err, size_t errlen) {
  return split(g, n_stages, false, NULL, out, err, errlen);
}

bool pass_stage_split_like(Graph *g, const StageSplit *like, StageSplit *out, char *err, size_t errlen) {
  return split(g, like->n_stages, like->inference, like, out, err, errlen);
}

bool pass_stage_split_inference(Graph *g, int n_stages, StageSplit *out, char *err, size_t errlen) {
  /* The last stage's outputs would lose their length marks, and a
   * micro-batch's rows their own count. */
  for (int i = 0; i < g->n_outputs; i++)
    if (ir_output_length(g, i, NULL) >= 0) {
      snprintf(err, errlen, "output '%s' has a length known only at run time (a NonZero's, Compress's, "
               "NonMaxSuppression's or Unique's rows): a pipeline of stages does not run such a model",
               g->output_names[i]);
      return false;
    }
  return split(g, n_stages, true, NULL, out, err, errlen);
}

/* ---- the stage graphs ---- */

typedef struct Builder {
  Graph *from, *to;
  Value **map; /* by Value.id of `from`: its value in `to` */
} Builder;

static Value *copy_node(Builder *b, Node *n) {
  Value *in[n->n_in > 0 ? n->n_in : 1];
  for (int i = 0; i < n->n_in; i++) {
    Value *v = n->in[i];
    if (!b->map[v->id]) copy_node(b, v->def); /* a source, first read here */
    in[i] = b->map[v->id];
  }
  Node *c = ir_node_new(b->to, n->op, n->n_in, in, n->loc);
  c->n_attrs = n->n_attrs;
  c->attrs = n->attrs;
  c->keep_f32 = n->keep_f32;
  c->scope = n->scope;
  for (int i = 0; i < n->n_out; i++) {
    c->out[i].type = n->out[i].type;
    b->map[n->out[i].id] = &c->out[i];
  }
  ir_append(b->to, c);
  return &c->out[0];
}

static Value *binary(Graph *g, OpKind op, Value *x, Value *y) {
  Node *n = ir_node_new(g, op, 2, (Value *[]){x, y}, x->def->loc);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) return diag_error(g->ctx, n->loc, "%s", err), NULL;
  ir_append(g, n);
  return &n->out[0];
}

/* sum(x * y) over every axis, a scalar. */
static Value *dot_all(Graph *g, Value *x, Value *y) {
  Value *p = binary(g, OP_MUL, x, y);
  if (!p || p->type.rank == 0) return p;
  Node *n = ir_node_new(g, OP_REDUCE_SUM, 1, &p, x->def->loc);
  int64_t axes[DL_MAX_RANK];
  for (int i = 0; i < p->type.rank; i++) axes[i] = i;
  ir_set_ints(g, n, "axes", p->type.rank, axes);
  ir_set_int(g, n, "keepdims", 0);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) return diag_error(g->ctx, n->loc, "%s", err), NULL;
  ir_append(g, n);
  return &n->out[0];
}

static Value *add_to(Graph *g, Value *sum, Value *v) { return !sum || !v ? v : binary(g, OP_ADD, sum, v); }

static Graph *optimizer_graph(Builder *b, const StageSplit *sp, int s) {
  Graph *g = b->to;
  Value *loss = NULL;
  bool *seen = ARENA_ARRAY(&g->ctx->arena, bool, b->from->n_nodes + 1);
  /* Not batchnorm's running statistics: the backward plan keeps them. */
  bool *trains = pass_trainable_params(b->from);
  for (Node *n = b->from->first; n; n = n->next) {
    if (sp->stage[n->id] != s) continue;
    for (int i = 0; i < n->n_in; i++) {
      Node *p = n->in[i]->def;
      if (p->op != OP_PARAM || seen[p->id] || !trains[p->id]) continue;
      seen[p->id] = true;
      Value *w = copy_node(b, p);
      const char *name = arena_printf(&g->ctx->arena, "grad.%s", ir_attr_str(p, "name"));
      Value *grad = &ir_source(g, OP_INPUT, &p->out[0].type, name, p->loc)->out[0];
      if (!(loss = add_to(g, loss, dot_all(g, w, grad)))) return NULL;
    }
  }
  if (!loss) return diag_error(g->ctx, (SrcLoc){0}, "stage %d has no parameters to train", s), NULL;
  ir_set_outputs(g, 1, &loss, (const char *[]){"loss"});
  return g;
}

Graph *pass_stage_graph(Graph *from, const StageSplit *sp, int s, StageKind kind, int sync_bn) {
  ir_number(from);
  int n_values = 0;
  for (Node *n = from->first; n; n = n->next) n_values += n->n_out;
  Graph *g = ir_graph_new(from->ctx, arena_printf(&from->ctx->arena, "%s_stage%d", from->name, s));
  Builder b = {from, g, ARENA_ARRAY(&from->ctx->arena, Value *, n_values + 1)};
  if (kind == STAGE_OPTIMIZER) return optimizer_graph(&b, sp, s);
  const StageCut *in = s > 0 ? &sp->cut[s] : NULL;
  bool last = s == sp->n_stages - 1;
  for (int k = 0; in && k < in->n; k++) {
    const char *name = arena_printf(&g->ctx->arena, "stage_in.%d", k);
    Value *v = in->values[k];
    Node *src = ir_source(g, kind == STAGE_FORWARD ? OP_INPUT : OP_PARAM, &v->type, name, v->def->loc);
    if (kind != STAGE_FORWARD) ir_set_str(g, src, "init", "zeros"); /* set per micro-batch */
    b.map[v->id] = &src->out[0];
  }
  for (Node *n = from->first; n; n = n->next)
    if (sp->stage[n->id] == s) copy_node(&b, n);
  if (last && sp->inference) {
    Value **outs = ARENA_ARRAY(&g->ctx->arena, Value *, from->n_outputs);
    for (int i = 0; i < from->n_outputs; i++) {
      Value *v = from->outputs[i];
      if (!b.map[v->id]) copy_node(&b, v->def); /* an output that is an input or a param */
      outs[i] = b.map[v->id];
    }
    ir_set_outputs(g, from->n_outputs, outs, from->output_names);
    return g;
  }
  if (last) {
    Value *loss = b.map[from->outputs[0]->id];
    ir_set_outputs(g, 1, &loss, (const char *[]){"loss"});
    return g;
  }
  const StageCut *o = &sp->cut[s + 1];
  Value **outs = ARENA_ARRAY(&g->ctx->arena, Value *, o->n);
  const char **names = ARENA_ARRAY(&g->ctx->arena, const char *, o->n);
  Value *loss = NULL;
  for (int k = 0; k < o->n; k++) {
    outs[k] = b.map[o->values[k]->id];
    names[k] = arena_printf(&g->ctx->arena, "stage_out.%d", k);
    if (kind == STAGE_BACKWARD) {
      const char *dy = arena_printf(&g->ctx->arena, "stage_dy.%d", k);
      Value *d = &ir_source(g, OP_INPUT, &outs[k]->type, dy, outs[k]->def->loc)->out[0];
      if (!(loss = add_to(g, loss, dot_all(g, outs[k], d)))) return NULL;
    }
  }
  if (kind == STAGE_BACKWARD) {
    ir_set_outputs(g, 1, &loss, (const char *[]){"loss"});
    return g;
  }
  ir_set_outputs(g, o->n, outs, names);
  /* Training-mode batchnorm in a training forward: the backward
   * recomputes it and alone updates the running statistics, once a
   * micro-batch. */
  if (!sp->inference && !pass_train_batchnorm(g, sync_bn)) return NULL;
  return g;
}
