/* Megatron-style tensor parallelism (tensor_par.h): takes a forward graph
 * and T ranks, returns this rank's graph, the parameter parts it owns and
 * a report.  A region starts at linears whose weight is a parameter (or
 * a row slice of one, as multihead_attention's q, k, v projections of
 * in_proj_weight) and grows forward through the values it makes, each
 * split along one axis: elementwise ops, reshapes that keep the split
 * whole (a projection to heads and back), attention over split heads;
 * it ends at linears that read a split value as their input (row
 * parallel).  Any other reader, a model output, an uneven split or a
 * parameter also used outside the region keeps the region whole.  Then
 * the first linears compute their rows of W1 (after tp_copy, the
 * identity whose gradient is summed), the middle runs on its share, and
 * the last linears their columns of W2, summed over the ranks
 * (allreduce_sum) before W2's bias. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"
#include "passes/tensor_par.h"

/* A linear's weight or bias: rows [row0, row0 + rows) of param p. */
typedef struct Part {
  Node *param;
  Node *slice; /* the slice node it came through, or NULL */
  int64_t row0, rows;
} Part;

enum { ROLE_NONE, ROLE_SOURCE, ROLE_INNER, ROLE_SINK };

typedef struct Tp {
  Graph *g;
  int T, rank;
  int n_vals, n_nodes;
  int *use_start; /* per value id: its users use_node[use_start[v] .. use_start[v + 1]) */
  Node **use_node;
  bool *is_output;
  char *claimed; /* per node id: in a committed region */
  char *tried;   /* per node id: a source that failed */
  /* The region being grown. */
  int *axis; /* per value id: the split axis, -1 when not in the region */
  char *role;
  Node **members;
  int n_members;
  Value **work;
  int n_work;
  Node **pending;
  int n_pending;
  const char *why;
  TpResult *out;
  int cap_splits, cap_lines;
  /* claimed and tried by node, kept across the renumbering after each
   * rewrite (node ids index everything above). */
  Node **marked;
  char *marked_kind;
  int n_marked, cap_marked;
} Tp;

static Arena *arena(Tp *t) { return &t->g->ctx->arena; }

static void index_uses(Tp *t) {
  Graph *g = t->g;
  ir_number(g);
  t->n_nodes = g->n_nodes;
  t->n_vals = 0;
  for (Node *n = g->first; n; n = n->next) t->n_vals += n->n_out;
  int nv = t->n_vals;
  t->use_start = ARENA_ARRAY(arena(t), int, nv + 1);
  memset(t->use_start, 0, sizeof(int) * (size_t)(nv + 1));
  int total = 0;
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) t->use_start[n->in[i]->id + 1]++, total++;
  for (int v = 0; v < nv; v++) t->use_start[v + 1] += t->use_start[v];
  t->use_node = ARENA_ARRAY(arena(t), Node *, total + 1);
  int *fill = ARENA_ARRAY(arena(t), int, nv + 1);
  memcpy(fill, t->use_start, sizeof(int) * (size_t)(nv + 1));
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) t->use_node[fill[n->in[i]->id]++] = n;
  t->is_output = ARENA_ARRAY(arena(t), bool, nv + 1);
  memset(t->is_output, 0, (size_t)nv + 1);
  for (int i = 0; i < g->n_outputs; i++) t->is_output[g->outputs[i]->id] = true;
  t->claimed = ARENA_ARRAY(arena(t), char, t->n_nodes + 1);
  t->tried = ARENA_ARRAY(arena(t), char, t->n_nodes + 1);
  t->role = ARENA_ARRAY(arena(t), char, t->n_nodes + 1);
  memset(t->claimed, 0, (size_t)t->n_nodes + 1);
  memset(t->tried, 0, (size_t)t->n_nodes + 1);
  for (int i = 0; i < t->n_marked; i++) (t->marked_kind[i] ? t->claimed : t->tried)[t->marked[i]->id] = 1;
  t->axis = ARENA_ARRAY(arena(t), int, nv + 1);
  t->members = ARENA_ARRAY(arena(t), Node *, t->n_nodes + 1);
  t->pending = ARENA_ARRAY(arena(t), Node *, t->n_nodes + 1);
  t->work = ARENA_ARRAY(arena(t), Value *, nv + 1);
}

/* A weight [rows, in] or bias [rows]: a param, or a row slice of one
 * (steps 1, every other axis whole). */
static bool part_of(const Value *v, int rank, Part *p) {
  *p = (Part){0};
  Node *d = v->def;
  if (v->type.rank != rank) return false;
  if (d->op == OP_PARAM) {
    *p = (Part){.param = d, .row0 = 0, .rows = v->type.dims[0]};
    return true;
  }
  if (d->op != OP_SLICE || d->in[0]->def->op != OP_PARAM) return false;
  int ns, ne, nt;
  const int64_t *s = ir_attr_ints(d, "starts", &ns), *e = ir_attr_ints(d, "ends", &ne);
  const int64_t *st = ir_attr_ints(d, "steps", &nt);
  const TensorType *full = &d->in[0]->type;
  if (!s || !e || ns != rank || ne != rank || (st && nt != rank)) return false;
  for (int k = 0; k < rank; k++) {
    if (st && st[k] != 1) return false;
    if (k && (s[k] != 0 || e[k] != full->dims[k])) return false;
  }
  if (s[0] < 0 || e[0] > full->dims[0] || e[0] - s[0] != v->type.dims[0]) return false;
  *p = (Part){.param = d->in[0]->def, .slice = d, .row0 = s[0], .rows = v->type.dims[0]};
  return true;
}

static const char *param_name(const Node *p) { return ir_attr_str(p, "name"); }

/* "fc1.weight", or "self_attn.in_proj_weight[0:8]" for a part. */
static const char *part_name(Tp *t, const Part *p) {
  if (!p->slice) return param_name(p->param);
  return arena_printf(arena(t), "%s[%lld:%lld]", param_name(p->param), (long long)p->row0,
                      (long long)(p->row0 + p->rows));
}

static const char *linear_name(Tp *t, const Node *lin) {
  Part p;
  return part_of(lin->in[1], 2, &p) ? part_name(t, &p) : arena_printf(arena(t), "linear %%%d", lin->out[0].id);
}

/* kind 1: made by a rewrite (claimed); 0: a source that was tried. */
static void keep_mark(Tp *t, Node *n, int kind) {
  if (t->n_marked == t->cap_marked) {
    t->cap_marked = t->cap_marked ? 2 * t->cap_marked : 16;
    Node **m = ARENA_ARRAY(arena(t), Node *, t->cap_marked);
    char *k = ARENA_ARRAY(arena(t), char, t->cap_marked);
    if (t->n_marked) memcpy(m, t->marked, sizeof *m * (size_t)t->n_marked), memcpy(k, t->marked_kind, (size_t)t->n_marked);
    t->marked = m, t->marked_kind = k;
  }
  t->marked[t->n_marked] = n;
  t->marked_kind[t->n_marked++] = (char)kind;
  (kind ? t->claimed : t->tried)[n->id] = 1;
}

static bool fail(Tp *t, const char *why) {
  if (!t->why) t->why = why;
  return false;
}

static bool mark(Tp *t, Value *v, int axis) {
  if (t->is_output[v->id])
    return fail(t, "a split value is an output of the model");
  t->axis[v->id] = axis;
  t->work[t->n_work++] = v;
  return true;
}

static void add_member(Tp *t, Node *n, int role) {
  t->role[n->id] = (char)role;
  t->members[t->n_members++] = n;
}

static bool add_source(Tp *t, Node *lin) {
  Part w, b;
  const char *name = linear_name(t, lin);
  if (t->claimed[lin->id]) return fail(t, arena_printf(arena(t), "%s is split in another region", name));
  if (!part_of(lin->in[1], 2, &w))
    return fail(t, arena_printf(arena(t), "the weight of %s is not a parameter", name));
  if (lin->n_in > 2 && !part_of(lin->in[2], 1, &b))
    return fail(t, arena_printf(arena(t), "the bias of %s is not a parameter", name));
  if (w.rows % t->T)
    return fail(t, arena_printf(arena(t), "%s has %lld output rows, not a multiple of %d", name,
                                (long long)w.rows, t->T));
  if (lin->out[0].type.dtype != TY_F32)
    return fail(t, arena_printf(arena(t), "%s is %s (the all-reduces are f32)", name,
                                ir_dtype_name(lin->out[0].type.dtype)));
  add_member(t, lin, ROLE_SOURCE);
  return mark(t, &lin->out[0], lin->out[0].type.rank - 1);
}

/* The axis of reshape n's result that carries the split of its input
 * (split along axis a), or -1: the outer extent must stay apart and the
 * split axis land whole on one axis of a multiple of T. */
static int reshape_axis(Tp *t, const Node *n, int a) {
  const TensorType *in = &n->in[0]->type, *out = &n->out[0].type;
  int64_t outer = 1, o = 1;
  for (int k = 0; k < a; k++) outer *= in->dims[k];
  for (int b = 0; b < out->rank; o *= out->dims[b++]) {
    if (o != outer || out->dims[b] == 1) continue;
    int64_t rest_in = 1, rest_out = 1;
    for (int k = a; k < in->rank; k++) rest_in *= in->dims[k];
    for (int k = b; k < out->rank; k++) rest_out *= out->dims[k];
    if (rest_in != rest_out || out->dims[b] % t->T) return -1;
    /* The split's blocks are contiguous runs of in's [a..] extent / T. */
    return b;
  }
  return -1;
}

static bool is_unary_elementwise(const Node *n) {
  return ir_ops[n->op].cls == K_ELEMWISE && n->op != OP_BATCHNORM && n->n_in == 1 && n->n_out == 1;
}

/* A sink: linear n reads split value v (axis a) as its input. */
static bool add_sink(Tp *t, Node *n, const Value *v, int a) {
  const char *name = linear_name(t, n);
  Part w;
  if (n->in[0] != v || a != v->type.rank - 1)
    return fail(t, arena_printf(arena(t), "%s reads a split value other than as its input's last axis", name));
  if (!part_of(n->in[1], 2, &w) || w.slice)
    return fail(t, arena_printf(arena(t), "the weight of %s is not a whole parameter", name));
  if (t->claimed[n->id]) return fail(t, arena_printf(arena(t), "%s is split in another region", name));
  add_member(t, n, ROLE_SINK);
  return true;
}

/* The heads axis of attention's q, k, v and result. */
static int heads_axis(const Node *n) {
  const char *layout = ir_attr_str(n, "layout");
  return layout && strcmp(layout, "bshd") == 0 ? 2 : 1;
}

/* Every input of multi-input node n known: its result's split, or false. */
static bool resolve(Tp *t, Node *n, bool *ready) {
  *ready = true;
  int a = -1;
  for (int i = 0; i < n->n_in; i++) {
    Value *w = n->in[i];
    if (t->axis[w->id] >= 0) {
      if (a >= 0 && t->axis[w->id] != a)
        return fail(t, arena_printf(arena(t), "%s combines values split along different axes", ir_ops[n->op].name));
      a = t->axis[w->id];
    } else if (!(n->op != OP_ATTENTION && ir_type_numel(&w->type) == 1)) {
      *ready = false;
    }
  }
  if (!*ready) return true;
  if (n->op == OP_ATTENTION && n->n_in != 3) return fail(t, "attention with a mask");
  if (n->op == OP_ATTENTION && a != heads_axis(n))
    return fail(t, arena_printf(arena(t), "attention over %lld heads, not a multiple of %d",
                                (long long)n->in[0]->type.dims[heads_axis(n)], t->T));
  if (n->op != OP_ATTENTION)
    for (int i = 0; i < n->n_in; i++)
      if (t->axis[n->in[i]->id] >= 0 && !ir_type_eq(&n->in[i]->type, &n->out[0].type))
        return fail(t, arena_printf(arena(t), "%s broadcasts a split value", ir_ops[n->op].name));
  add_member(t, n, ROLE_INNER);
  return mark(t, &n->out[0], a);
}

/* A source that makes w through single-input ops: added to the region. */
static bool pull(Tp *t, Value *w) {
  Node *d = w->def;
  while (d->n_in == 1 && (is_unary_elementwise(d) || d->op == OP_RESHAPE)) d = d->in[0]->def;
  if (d->op != OP_LINEAR || t->role[d->id] != ROLE_NONE) return false;
  keep_mark(t, d, 0);
  return add_source(t, d);
}

static bool visit_use(Tp *t, Value *v, Node *u) {
  if (t->role[u->id] != ROLE_NONE) return true;
  int a = t->axis[v->id];
  if (u->op == OP_LINEAR) return add_sink(t, u, v, a);
  if (is_unary_elementwise(u)) {
    add_member(t, u, ROLE_INNER);
    return mark(t, &u->out[0], a);
  }
  if (u->op == OP_RESHAPE) {
    int b = reshape_axis(t, u, a);
    if (b < 0)
      return fail(t, arena_printf(arena(t), "a reshape to %s does not keep the split whole (heads not a multiple of %d)",
                                  ir_type_str(&u->out[0].type, ARENA_ARRAY(arena(t), char, 96), 96), t->T));
    add_member(t, u, ROLE_INNER);
    return mark(t, &u->out[0], b);
  }
  if ((ir_ops[u->op].cls == K_ELEMWISE && u->op != OP_BATCHNORM && u->n_out == 1) || u->op == OP_ATTENTION) {
    for (int i = 0; i < t->n_pending; i++)
      if (t->pending[i] == u) return true;
    t->pending[t->n_pending++] = u;
    return true;
  }
  return fail(t, arena_printf(arena(t), "%s reads a split value%s", ir_ops[u->op].name,
                              u->op == OP_DROPOUT ? " (its random mask is drawn over the whole tensor)" : ""));
}

static bool grow(Tp *t) {
  for (;;) {
    while (t->n_work) {
      Value *v = t->work[--t->n_work];
      for (int k = t->use_start[v->id]; k < t->use_start[v->id + 1]; k++)
        if (!visit_use(t, v, t->use_node[k])) return false;
    }
    bool progress = false;
    for (int i = 0; i < t->n_pending; i++) {
      Node *u = t->pending[i];
      bool ready;
      if (!resolve(t, u, &ready)) return false;
      if (ready) {
        t->pending[i--] = t->pending[--t->n_pending];
        progress = true;
        continue;
      }
      for (int k = 0; k < u->n_in && !progress; k++)
        if (t->axis[u->in[k]->id] < 0 && ir_type_numel(&u->in[k]->type) != 1 && pull(t, u->in[k])) progress = true;
      if (t->why) return false;
    }
    if (!t->n_work && !progress) break;
  }
  if (t->n_pending)
    return fail(t, arena_printf(arena(t), "%s combines a split value with a whole one", ir_ops[t->pending[0]->op].name));
  return true;
}

/* Every use of a split parameter is a linear of the region (directly or
 * through a slice): a reader outside would see the other ranks' stale parts. */
static bool param_used_inside(Tp *t, const Node *p) {
  const Value *v = &p->out[0];
  for (int k = t->use_start[v->id]; k < t->use_start[v->id + 1]; k++) {
    const Node *u = t->use_node[k];
    if (u->op == OP_SLICE) {
      for (int j = t->use_start[u->out[0].id]; j < t->use_start[u->out[0].id + 1]; j++)
        if (t->use_node[j]->op != OP_LINEAR || t->role[t->use_node[j]->id] == ROLE_NONE ||
            t->role[t->use_node[j]->id] == ROLE_INNER)
          return false;
    } else if (u->op != OP_LINEAR || t->role[u->id] == ROLE_NONE) {
      return false;
    }
  }
  return true;
}

static void add_line(Tp *t, const char *line) {
  TpResult *o = t->out;
  if (o->n_lines == t->cap_lines) {
    t->cap_lines = t->cap_lines ? 2 * t->cap_lines : 8;
    const char **l = ARENA_ARRAY(arena(t), const char *, t->cap_lines);
    if (o->n_lines) memcpy(l, o->lines, sizeof *l * (size_t)o->n_lines);
    o->lines = l;
  }
  o->lines[o->n_lines++] = line;
}

static bool add_split(Tp *t, const Node *p, int axis, int64_t start, int64_t len) {
  TpResult *o = t->out;
  const char *name = param_name(p);
  for (int i = 0; i < o->n_splits; i++) {
    TpSplit *s = &o->splits[i];
    if (strcmp(s->param, name)) continue;
    if (s->axis == axis && s->start == start && s->len == len) return true;
    if (s->axis != axis || (start < s->start + s->len && s->start < start + len))
      return fail(t, arena_printf(arena(t), "its parameter %s is split another way elsewhere", name));
  }
  if (o->n_splits == t->cap_splits) {
    t->cap_splits = t->cap_splits ? 2 * t->cap_splits : 8;
    TpSplit *s = ARENA_ARRAY(arena(t), TpSplit, t->cap_splits);
    if (o->n_splits) memcpy(s, o->splits, sizeof *s * (size_t)o->n_splits);
    o->splits = s;
  }
  o->splits[o->n_splits++] = (TpSplit){.param = name, .axis = axis, .start = start, .len = len};
  return true;
}

/* The parameters' checks and records; the region's line. */
static bool record(Tp *t) {
  const char *cols = "", *rows = "";
  int n_before = t->out->n_splits;
  for (int i = 0; i < t->n_members; i++) {
    Node *n = t->members[i];
    if (t->role[n->id] == ROLE_INNER) continue;
    Part w, b = {0};
    part_of(n->in[1], 2, &w);
    bool src = t->role[n->id] == ROLE_SOURCE;
    if (src && n->n_in > 2) part_of(n->in[2], 1, &b);
    if (!param_used_inside(t, w.param) || (b.param && !param_used_inside(t, b.param))) {
      t->out->n_splits = n_before;
      return fail(t, arena_printf(arena(t), "%s is also read outside the region",
                                  param_name(param_used_inside(t, w.param) ? b.param : w.param)));
    }
    bool ok = src ? add_split(t, w.param, 0, w.row0, w.rows) && (!b.param || add_split(t, b.param, 0, b.row0, b.rows))
                  : add_split(t, w.param, 1, 0, n->in[1]->type.dims[1]);
    if (!ok) {
      t->out->n_splits = n_before;
      return false;
    }
    const char **list = src ? &cols : &rows;
    *list = arena_printf(arena(t), "%s%s%s", *list, **list ? ", " : "", part_name(t, &w));
  }
  add_line(t, arena_printf(arena(t), "split: %s by output rows, %s by input columns", cols, rows));
  return true;
}

static Value *slice_of(Tp *t, Node *before, const Part *p, int axis, int64_t start, int64_t len) {
  const TensorType *full = &p->param->out[0].type;
  int64_t s[2] = {0, 0}, e[2] = {full->dims[0], full->rank > 1 ? full->dims[1] : 0}, one[2] = {1, 1};
  s[0] = p->row0, e[0] = p->row0 + p->rows;
  s[axis] = start + (axis == 0 ? p->row0 : 0);
  e[axis] = s[axis] + len;
  Node *n = ir_node_new(t->g, OP_SLICE, 1, &(Value *){&p->param->out[0]}, before->loc);
  n->scope = before->scope;
  ir_set_ints(t->g, n, "starts", full->rank, s);
  ir_set_ints(t->g, n, "ends", full->rank, e);
  ir_set_ints(t->g, n, "steps", full->rank, one);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel slice: %s", err);
  ir_insert_before(t->g, before, n);
  return &n->out[0];
}

static Node *reshaped(Tp *t, Node *n, Value *in, int b) {
  int64_t shape[DL_MAX_RANK];
  const TensorType *o = &n->out[0].type;
  for (int k = 0; k < o->rank; k++) shape[k] = o->dims[k];
  shape[b] /= t->T;
  Node *r = ir_node_new(t->g, OP_RESHAPE, 1, &in, n->loc);
  r->scope = n->scope;
  ir_set_ints(t->g, r, "shape", o->rank, shape);
  char err[256];
  if (!ir_infer(r, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel reshape: %s", err);
  ir_insert_before(t->g, n, r);
  return r;
}

static int by_id(const void *a, const void *b) {
  return (*(Node *const *)a)->id - (*(Node *const *)b)->id;
}

/* This rank's nodes in place of the region's. */
static void rewrite(Tp *t) {
  Graph *g = t->g;
  Value **map = ARENA_ARRAY(arena(t), Value *, t->n_vals + 1);
  memset(map, 0, sizeof *map * (size_t)(t->n_vals + 1));
  qsort(t->members, (size_t)t->n_members, sizeof *t->members, by_id);
  for (int i = 0; i < t->n_members; i++) {
    Node *n = t->members[i];
    Value *in[3];
    for (int k = 0; k < n->n_in && k < 3; k++) in[k] = map[n->in[k]->id] ? map[n->in[k]->id] : n->in[k];
    Node *m;
    switch (t->role[n->id]) {
      case ROLE_SOURCE: {
        Part w, b;
        part_of(n->in[1], 2, &w);
        int64_t share = w.rows / t->T;
        Value *x = n->in[0];
        if (!map[x->id]) map[x->id] = &pass_new_node(g, n, OP_TP_COPY, 1, &x, NULL, n->loc)->out[0];
        in[0] = map[x->id];
        in[1] = slice_of(t, n, &w, 0, t->rank * share, share);
        if (n->n_in > 2 && part_of(n->in[2], 1, &b)) in[2] = slice_of(t, n, &b, 0, t->rank * share, share);
        m = pass_new_node(g, n, OP_LINEAR, n->n_in, in, n, n->loc);
        keep_mark(t, m, 1);
        break;
      }
      case ROLE_SINK: {
        Part w;
        part_of(n->in[1], 2, &w);
        int64_t share = n->in[1]->type.dims[1] / t->T;
        in[1] = slice_of(t, n, &w, 1, t->rank * share, share);
        m = pass_new_node(g, n, OP_LINEAR, 2, in, n, n->loc);
        keep_mark(t, m, 1);
        m = pass_new_node(g, n, OP_ALLREDUCE_SUM, 1, &m->out, NULL, n->loc);
        if (n->n_in > 2) {
          Value *sum[2] = {&m->out[0], n->in[2]};
          m = pass_new_node(g, n, OP_ADD, 2, sum, NULL, n->loc);
        }
        ir_replace_uses(g, &n->out[0], &m->out[0]);
        break;
      }
      default:
        m = n->op == OP_RESHAPE ? reshaped(t, n, in[0], t->axis[n->out[0].id])
                                : pass_new_node(g, n, n->op, n->n_in, in, n, n->loc);
        break;
    }
    map[n->out[0].id] = &m->out[0];
  }
  /* The old region, then the slices only it read. */
  for (int i = t->n_members - 1; i >= 0; i--) {
    Node *n = t->members[i];
    Node *w = t->role[n->id] != ROLE_INNER && n->in[1]->def->op == OP_SLICE ? n->in[1]->def : NULL;
    Node *b = t->role[n->id] == ROLE_SOURCE && n->n_in > 2 && n->in[2]->def->op == OP_SLICE ? n->in[2]->def : NULL;
    ir_remove(g, n);
    for (Node *s = w; s; s = s == w ? b : NULL) {
      bool used = false;
      for (Node *u = g->first; u && !used; u = u->next)
        for (int k = 0; k < u->n_in; k++) used |= u->in[k] == &s->out[0];
      if (!used && s->prev) ir_remove(g, s);
    }
  }
}

/* One region from source s: grown, checked, recorded and rewritten
 * (true), or a "not split" line. */
static bool try_source(Tp *t, Node *s) {
  t->n_members = t->n_work = t->n_pending = 0;
  t->why = NULL;
  for (int v = 0; v < t->n_vals; v++) t->axis[v] = -1;
  memset(t->role, 0, (size_t)t->n_nodes + 1);
  keep_mark(t, s, 0);
  const char *name = linear_name(t, s);
  bool ok = add_source(t, s) && grow(t);
  int sinks = 0;
  for (int i = 0; ok && i < t->n_members; i++) sinks += t->role[t->members[i]->id] == ROLE_SINK;
  if (ok && !sinks) ok = fail(t, "no linear reads its result (an unpaired linear)");
  if (ok && record(t)) {
    rewrite(t);
    t->out->n_regions++;
    return true;
  }
  add_line(t, arena_printf(arena(t), "not split: %s: %s", name, t->why ? t->why : "unsupported"));
  return false;
}

/* Where rank's part of split s starts in the sharded param: after its
 * parts of the splits of the same param that start before s. */
static int64_t local_start(const TpResult *tp, const TpSplit *s) {
  int64_t at = 0;
  for (int i = 0; i < tp->n_splits; i++)
    if (strcmp(tp->splits[i].param, s->param) == 0 && tp->splits[i].start < s->start)
      at += tp->splits[i].len / tp->ranks;
  return at;
}

bool tp_is_sharded(const TpResult *tp, const char *name, int *axis) {
  for (int i = 0; tp && name && i < tp->n_splits; i++)
    if (tp->splits[i].sharded && strcmp(tp->splits[i].param, name) == 0) return *axis = tp->splits[i].axis, true;
  return false;
}

bool tp_copy_part(const TpResult *tp, const char *name, int rank, int dims, const int64_t *whole_dims, size_t es,
                  void *whole, void *part, bool to_whole) {
  int axis;
  if (!tp_is_sharded(tp, name, &axis) || axis >= dims || rank < 0 || rank >= tp->ranks) return false;
  int64_t outer = 1, inner = 1, D = whole_dims[axis], L = D / tp->ranks;
  for (int k = 0; k < axis; k++) outer *= whole_dims[k];
  for (int k = axis + 1; k < dims; k++) inner *= whole_dims[k];
  for (int i = 0; i < tp->n_splits; i++) {
    const TpSplit *s = &tp->splits[i];
    if (strcmp(s->param, name)) continue;
    int64_t share = s->len / tp->ranks, at = local_start(tp, s);
    size_t n = (size_t)(share * inner) * es;
    for (int64_t o = 0; o < outer; o++) {
      char *w = (char *)whole + (size_t)((o * D + s->start + rank * share) * inner) * es;
      char *p = (char *)part + (size_t)((o * L + at) * inner) * es;
      memcpy(to_whole ? w : p, to_whole ? p : w, n);
    }
  }
  return true;
}

/* Param p (this rank's graph read it only through the slices of its
 * parts) holds only its parts, when its splits tile the axis and no
 * other param node shares its name. */
static void shard_param(Tp *t, Node *p) {
  TpResult *o = t->out;
  const char *name = param_name(p);
  TensorType *ty = &p->out[0].type;
  int axis = -1;
  int64_t covered = 0;
  for (int i = 0; i < o->n_splits; i++)
    if (strcmp(o->splits[i].param, name) == 0) axis = o->splits[i].axis, covered += o->splits[i].len;
  if (axis < 0 || covered != ty->dims[axis]) return;
  for (Node *n = t->g->first; n; n = n->next) {
    if (n != p && n->op == OP_PARAM && strcmp(param_name(n), name) == 0) return;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == &p->out[0] && n->op != OP_SLICE) return;
  }
  ty->dims[axis] /= t->T;
  for (int i = 0; i < o->n_splits; i++)
    if (strcmp(o->splits[i].param, name) == 0) o->splits[i].sharded = true;
  for (Node *n = t->g->first, *next; n; n = next) {
    next = n->next;
    if (n->op != OP_SLICE || n->in[0] != &p->out[0]) continue;
    int ns;
    int64_t s[DL_MAX_RANK], e[DL_MAX_RANK];
    memcpy(s, ir_attr_ints(n, "starts", &ns), sizeof *s * (size_t)ty->rank);
    memcpy(e, ir_attr_ints(n, "ends", &ns), sizeof *e * (size_t)ty->rank);
    for (int i = 0; i < o->n_splits; i++) {
      const TpSplit *sp = &o->splits[i];
      int64_t share = sp->len / t->T;
      if (strcmp(sp->param, name) == 0 && sp->start + t->rank * share == s[axis])
        s[axis] = local_start(o, sp), e[axis] = s[axis] + share;
    }
    ir_set_ints(t->g, n, "starts", ty->rank, s);
    ir_set_ints(t->g, n, "ends", ty->rank, e);
    char err[256];
    if (!ir_infer(n, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel shard: %s", err);
    if (ir_type_eq(&n->out[0].type, ty)) {
      ir_replace_uses(t->g, &n->out[0], &p->out[0]);
      ir_remove(t->g, n);
    }
  }
}

const char **tp_split_names(Graph *g, const TpResult *tp) {
  const char **names = ARENA_ARRAY(&g->ctx->arena, const char *, tp->n_splits + 1);
  for (int i = 0; i < tp->n_splits; i++) names[i] = tp->splits[i].param;
  return names;
}

bool pass_tensor_parallel(Graph *g, int ranks, int rank, TpResult *out) {
  memset(out, 0, sizeof *out);
  out->ranks = ranks, out->rank = rank;
  if (ranks <= 1) return true;
  Tp t = {.g = g, .T = ranks, .rank = rank, .out = out};
  /* After each rewrite the graph is indexed again from the start: the
   * rewrite made values the index does not know. */
  bool again = true;
  while (again) {
    again = false;
    index_uses(&t);
    for (Node *s = g->first; s && !again; s = s->next)
      if (s->op == OP_LINEAR && !t.claimed[s->id] && !t.tried[s->id]) again = try_source(&t, s);
  }
  for (Node *p = g->first; p; p = p->next)
    if (p->op == OP_PARAM) shard_param(&t, p);
  ir_number(g);
  return true;
}
