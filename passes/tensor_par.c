/* Megatron-style tensor parallelism (tensor_par.h): takes a forward graph
 * and T ranks, returns this rank's graph, the parameter parts it owns and
 * a report.  A region starts at linears whose weight is a parameter (or
 * a row slice of one, as multihead_attention's q, k, v projections of
 * in_proj_weight) and grows forward through the values it makes, each
 * split along one axis: elementwise ops, reshapes that keep the split
 * whole (a projection to heads and back), transposes, gathers and
 * softmax along another axis, dropout (each rank drawing its block of
 * the whole tensor's mask), batched matmuls and attention over split
 * heads; it
 * ends at linears that read a split value as their input (row
 * parallel).  A whole operand of the middle (an attention mask, a
 * scale) is read as it is where it broadcasts along the split axis,
 * else its block; both after tp_copy, so that a gradient it gets is the
 * sum of the ranks' parts.  Any other reader, a model output, an uneven
 * split or a parameter also used outside the region keeps the region
 * whole.  Then the first linears compute their rows of W1 (after
 * tp_copy, the identity whose gradient is summed), the middle runs on
 * its share, and the last linears their columns of W2, summed over the
 * ranks (allreduce_sum) before W2's bias.
 *
 * A split axis may be G groups, each split alike: one projection to q,
 * k and v reshaped to [.., 3, E] (nn.MultiheadAttention's export) keeps
 * its split whole only with the source's rows in 3 groups, and [S, B, H
 * d] reshaped to [S, B H, d] makes B groups of the heads; try_source
 * retries a source in the groups a failing reshape asks for.
 *
 * A cross entropy reading a region's value as its logits is a sink
 * split by classes (xent_part), so an output layer splits by rows; its
 * logits, when also a model output, are gathered whole.  Tables read
 * only by lookups (embeddings) split by rows, each rank looking up the
 * ids in its rows, the lookups summed (split_lookups); a table that is
 * also a split output layer's weight (tied) follows that split.
 *
 * Exporters write a linear of a 3-d input as MatMul by the transposed
 * weight and Add of the bias: before the regions grow such products by
 * a parameter become linears, and with fuse_attention the attention
 * pass runs first, as autodiff would run it, so that ONNX models split
 * as the language's do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"
#include "passes/tensor_par.h"

/* A linear's weight or bias: rows [row0, row0 + rows) of param p, or
 * (cols) columns of a param stored [in, out] the linear reads
 * transposed (Hugging Face's Conv1D, GPT-2's). */
typedef struct Part {
  Node *param;
  Node *slice; /* the slice node it came through, or NULL */
  bool cols;
  int64_t row0, rows;
} Part;

enum { ROLE_NONE, ROLE_SOURCE, ROLE_INNER, ROLE_SINK };

typedef struct Tp {
  Graph *g;
  int T, rank;
  bool inference; /* TpOptions.inference */
  int n_vals, n_nodes;
  int *use_start; /* per value id: its users use_node[use_start[v] .. use_start[v + 1]) */
  Node **use_node;
  bool *is_output;
  char *claimed; /* per node id: in a committed region */
  char *tried;   /* per node id: a source that failed */
  /* The region being grown. */
  int *axis;   /* per value id: the split axis, -1 when not in the region */
  int *groups; /* per value id: G when the axis is G equal groups, each split */
  char *role;
  int *seen, stamp; /* per node id: pull's walk */
  Node **members;
  int n_members;
  Value **work;
  int n_work;
  Node **pending;
  int n_pending;
  const char *why;
  int want_groups; /* a reshape that would keep a source's split whole in groups */
  int n_gathered;  /* split values that are model outputs, gathered whole (gather_output) */
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
  t->seen = ARENA_ARRAY(arena(t), int, t->n_nodes + 1);
  memset(t->seen, 0, sizeof *t->seen * (size_t)(t->n_nodes + 1));
  t->stamp = 0;
  memset(t->claimed, 0, (size_t)t->n_nodes + 1);
  memset(t->tried, 0, (size_t)t->n_nodes + 1);
  for (int i = 0; i < t->n_marked; i++) (t->marked_kind[i] ? t->claimed : t->tried)[t->marked[i]->id] = 1;
  t->axis = ARENA_ARRAY(arena(t), int, nv + 1);
  t->groups = ARENA_ARRAY(arena(t), int, nv + 1);
  t->members = ARENA_ARRAY(arena(t), Node *, t->n_nodes + 1);
  t->pending = ARENA_ARRAY(arena(t), Node *, t->n_nodes + 1);
  t->work = ARENA_ARRAY(arena(t), Value *, nv + 1);
}

static bool swaps_2d(const Node *n) {
  int k;
  const int64_t *perm = n->op == OP_TRANSPOSE ? ir_attr_ints(n, "perm", &k) : NULL;
  return perm && k == 2 && perm[0] == 1 && perm[1] == 0;
}

/* A weight [rows, in] or bias [rows]: a param, a row slice of one
 * (steps 1, every other axis whole), or the transpose of a param. */
static bool part_of(const Value *v, int rank, Part *p) {
  *p = (Part){0};
  Node *d = v->def;
  if (v->type.rank != rank) return false;
  if (rank == 2 && swaps_2d(d) && d->in[0]->def->op == OP_PARAM) {
    *p = (Part){.param = d->in[0]->def, .cols = true, .rows = v->type.dims[0]};
    return true;
  }
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
  if (!p->slice && p->rows == p->param->out[0].type.dims[p->cols]) return param_name(p->param);
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

/* Whether a cross entropy reads v as its logits (directly or through
 * reshapes and transposes: [N, S, C] transposed to [N, C, S] for the
 * loss, made rows [N S, C]): an output layer's logits, which the loss
 * reads split by classes and the model's output gathers whole
 * (rewrite). */
static bool feeds_xent(Tp *t, const Value *v, int depth) {
  for (int k = t->use_start[v->id]; k < t->use_start[v->id + 1]; k++) {
    const Node *u = t->use_node[k];
    if ((u->op == OP_XENT && u->in[0] == v) ||
        ((u->op == OP_RESHAPE || u->op == OP_TRANSPOSE) && depth < 4 && feeds_xent(t, &u->out[0], depth + 1)))
      return true;
  }
  return false;
}

/* Inference, and the region's first source widens its input (more
 * output rows than input columns: a language model's head, [V, E]):
 * its results may leave the region as the model's outputs, gathered
 * whole, so that each rank holds 1/T of the layer. */
static bool wide_head(Tp *t) {
  if (!t->inference || !t->n_members) return false;
  const Node *s = t->members[0];
  return s->op == OP_LINEAR && s->in[1]->type.dims[0] > s->in[1]->type.dims[1];
}

static bool mark(Tp *t, Value *v, int axis, int groups) {
  if (t->is_output[v->id] && (groups != 1 || !(feeds_xent(t, v, 0) || wide_head(t))))
    return fail(t, "a split value is an output of the model");
  t->n_gathered += t->is_output[v->id];
  t->axis[v->id] = axis;
  t->groups[v->id] = groups;
  t->work[t->n_work++] = v;
  return true;
}

static void add_member(Tp *t, Node *n, int role) {
  t->role[n->id] = (char)role;
  t->members[t->n_members++] = n;
}

/* groups > 1: the output rows are that many equal parts (q, k and v of
 * one in_proj_weight), each split over the ranks. */
static bool add_source(Tp *t, Node *lin, int groups) {
  Part w, b;
  const char *name = linear_name(t, lin);
  if (t->claimed[lin->id]) return fail(t, arena_printf(arena(t), "%s is split in another region", name));
  if (!part_of(lin->in[1], 2, &w))
    return fail(t, arena_printf(arena(t), "the weight of %s is not a parameter", name));
  if (lin->n_in > 2 && !part_of(lin->in[2], 1, &b))
    return fail(t, arena_printf(arena(t), "the bias of %s is not a parameter", name));
  if (w.rows % ((int64_t)groups * t->T))
    return fail(t, arena_printf(arena(t), "%s has %lld output rows, not a multiple of %lld", name,
                                (long long)w.rows, (long long)groups * t->T));
  if (lin->out[0].type.dtype != TY_F32)
    return fail(t, arena_printf(arena(t), "%s is %s (the all-reduces are f32)", name,
                                ir_dtype_name(lin->out[0].type.dtype)));
  add_member(t, lin, ROLE_SOURCE);
  return mark(t, &lin->out[0], lin->out[0].type.rank - 1, groups);
}

/* The axis of reshape n's result that carries the split of its input,
 * split along axis a in g groups, with its groups in *groups; or -1.
 * Reshapes keep the element order: the input is P outer runs (the axes
 * before a, times g) of E x I elements (a group's extent E, the inner
 * axes I), each rank holding a contiguous E/T x I of each run.  So does
 * the result along axis b when the axes before b and G' groups of b make
 * P runs, b's group extent E' times the inner axes make E x I, and T
 * divides E': a projection to heads and back ([B, S, H d] and [B, S, H,
 * d]), and also [S, B, H d] to [S, B H, d] (B groups) and back to [B, H,
 * S, d], as nn.MultiheadAttention's export writes them. */
static int reshape_axis(Tp *t, const Node *n, int a, int g, int *groups) {
  const TensorType *in = &n->in[0]->type, *out = &n->out[0].type;
  int64_t P = g, E = in->dims[a] / g, I = 1, Q = 1;
  for (int k = 0; k < a; k++) P *= in->dims[k];
  for (int k = a + 1; k < in->rank; k++) I *= in->dims[k];
  for (int b = 0; b < out->rank && Q <= P; Q *= out->dims[b++]) {
    if (Q == 0 || P % Q || out->dims[b] % (P / Q)) continue;
    int64_t G = P / Q, E2 = out->dims[b] / G, I2 = 1;
    for (int k = b + 1; k < out->rank; k++) I2 *= out->dims[k];
    if (E2 * I2 != E * I || E2 % t->T || G > INT32_MAX) continue;
    *groups = (int)G;
    return b;
  }
  return -1;
}

/* For a reshape that fails a plain split of a source's result (g = 1):
 * the groups the source's rows would need for it to pass (3 when a [..,
 * 3 E] projection is reshaped to [.., 3, E]), or 0. */
static int groups_wanted(Tp *t, const Node *n, int a) {
  const TensorType *in = &n->in[0]->type, *out = &n->out[0].type;
  int64_t P = 1, Q = 1;
  for (int k = 0; k < a; k++) P *= in->dims[k];
  for (int b = 0; b < out->rank; Q *= out->dims[b++]) {
    if (P == 0 || Q % P || Q / P < 2 || Q / P > 64 || in->dims[a] % (Q / P)) continue;
    int groups;
    if (reshape_axis(t, n, a, (int)(Q / P), &groups) >= 0) return (int)(Q / P);
  }
  return 0;
}

static bool is_unary_elementwise(const Node *n) {
  return ir_ops[n->op].cls == K_ELEMWISE && n->op != OP_BATCHNORM && n->n_in == 1 && n->n_out == 1;
}

/* A sink: linear n reads split value v (axis a) as its input. */
static bool add_sink(Tp *t, Node *n, const Value *v, int a) {
  const char *name = linear_name(t, n);
  Part w;
  if (n->in[0] != v || a != v->type.rank - 1 || t->groups[v->id] != 1)
    return fail(t, arena_printf(arena(t), "%s reads a split value other than as its input's last axis", name));
  if (!part_of(n->in[1], 2, &w) || w.slice)
    return fail(t, arena_printf(arena(t), "the weight of %s is not a whole parameter", name));
  if (t->claimed[n->id]) return fail(t, arena_printf(arena(t), "%s is split in another region", name));
  add_member(t, n, ROLE_SINK);
  return true;
}

/* A sink: the cross entropy n reads logits v split along their classes
 * (a vocabulary-parallel loss: each rank's share of the classes, the
 * row statistics summed over the ranks, xent_part). */
static bool add_xent_sink(Tp *t, Node *n, const Value *v, int a) {
  if (n->in[0] != v || a != 1 || t->groups[v->id] != 1 || v->type.rank != 2)
    return fail(t, "softmax_xent reads a split value other than as its logits' classes");
  add_member(t, n, ROLE_SINK);
  return true;
}

/* The heads axis of attention's q, k, v and result. */
static int heads_axis(const Node *n) {
  const char *layout = ir_attr_str(n, "layout");
  return layout && strcmp(layout, "bshd") == 0 ? 2 : 1;
}

enum { WHOLE_AS_IS, WHOLE_BLOCK };

/* How whole operand w of member n meets the split along axis a of n's
 * result, the operands aligned at their last axes as broadcasting
 * aligns them (attention's mask at the scores' [B, H, Sq, Sk]):
 * WHOLE_AS_IS where it broadcasts along a (one value, 1 there, or no
 * such axis), WHOLE_BLOCK where it has the whole extent there (each
 * rank reads its block, along *axis), else -1. */
static int whole_use(const Node *n, const Value *w, int a, int groups, int *axis) {
  const TensorType *o = &n->out[0].type, *t = &w->type;
  if (n->op == OP_GATHER && w == n->in[1]) return WHOLE_AS_IS; /* the indices */
  if (n->op == OP_CONCAT) return -1;
  int rank = o->rank;
  int64_t full = o->dims[a];
  if (n->op == OP_ATTENTION) rank = 4, a = 1;
  int b = a - (rank - t->rank);
  *axis = b;
  if (ir_type_numel(t) == 1 || b < 0 || t->dims[b] == 1) return WHOLE_AS_IS;
  return t->dims[b] == full && groups == 1 ? WHOLE_BLOCK : -1;
}

/* Whether split input w (axis a) fits member n's result split along a:
 * an elementwise op's of its type, a matmul's with a batch axis split. */
static bool split_input_fits(Tp *t, const Node *n, const Value *w, int a) {
  const TensorType *o = &n->out[0].type;
  if (n->op == OP_ATTENTION) return true;
  if (n->op == OP_CONCAT) {
    /* along another axis (RoPE's halves of each head) */
    int64_t axis = ir_attr_int(n, "axis");
    for (int k = 0; k < o->rank; k++)
      if (k != axis && w->type.dims[k] != o->dims[k]) return fail(t, "concat broadcasts a split value");
    return axis != a || fail(t, "concat along the split axis");
  }
  if (n->op != OP_MATMUL) {
    if (ir_dims_eq(&w->type, o)) return true; /* where's bool condition too */
    return fail(t, arena_printf(arena(t), "%s broadcasts a split value", ir_ops[n->op].name));
  }
  if (w->type.rank != o->rank || a >= o->rank - 2 || w->type.dims[a] != o->dims[a])
    return fail(t, "a matmul reads a value split along one of the two axes it multiplies");
  return true;
}

/* Every input of multi-input node n known: its result's split, or
 * false.  A whole input counts as known when it is one value, or with
 * whole_ok (nothing in the region can make it split any more). */
static bool resolve(Tp *t, Node *n, bool *ready, bool whole_ok) {
  *ready = true;
  int a = -1, g = 1;
  for (int i = 0; i < n->n_in; i++) {
    Value *w = n->in[i];
    if (t->axis[w->id] >= 0) {
      if (a >= 0 && (t->axis[w->id] != a || t->groups[w->id] != g))
        return fail(t, arena_printf(arena(t), "%s combines values split along different axes", ir_ops[n->op].name));
      a = t->axis[w->id], g = t->groups[w->id];
    } else if (n->op == OP_ATTENTION ? i < 3 : !whole_ok && ir_type_numel(&w->type) != 1) {
      *ready = false;
    }
  }
  if (!*ready) return true;
  if (n->op == OP_ATTENTION && (a != heads_axis(n) || g != 1))
    return fail(t, arena_printf(arena(t), "attention over %lld heads, not a multiple of %d",
                                (long long)n->in[0]->type.dims[heads_axis(n)], t->T));
  for (int i = 0; i < n->n_in; i++) {
    Value *w = n->in[i];
    int axis;
    if (t->axis[w->id] >= 0 ? !split_input_fits(t, n, w, a) : whole_use(n, w, a, g, &axis) < 0)
      return fail(t, t->why ? t->why
                            : arena_printf(arena(t), "%s reads a whole operand whose extent along the split axis "
                                           "is neither 1 nor the split one's", ir_ops[n->op].name));
  }
  add_member(t, n, ROLE_INNER);
  return mark(t, &n->out[0], a, g);
}

/* The axis of a member's result that carries the split of its one split
 * input (axis a, g groups; *groups gets the result's), or -1 with t->why
 * set. */
static int passes_split(Tp *t, const Node *u, int a, int g, int *groups) {
  *groups = g;
  if (is_unary_elementwise(u) || u->op == OP_DROPOUT) return a;
  if (u->op == OP_TRANSPOSE) {
    int k;
    const int64_t *perm = ir_attr_ints(u, "perm", &k);
    for (int j = 0; j < k; j++)
      if (perm[j] == a) return j;
  }
  if (u->op == OP_SOFTMAX || u->op == OP_LOG_SOFTMAX) {
    int64_t axis = ir_attr_int(u, "axis");
    if (axis < 0) axis += u->out[0].type.rank;
    if (axis != a) return a;
    fail(t, arena_printf(arena(t), "%s along the split axis", ir_ops[u->op].name));
    return -1;
  }
  if (u->op == OP_GATHER) {
    /* picking along another axis (q, k or v out of a [3, ...] stack) */
    int64_t axis = ir_attr_int(u, "axis");
    if (axis < 0) axis += u->in[0]->type.rank;
    if (axis != a) return axis > a ? a : a - 1 + u->in[1]->type.rank;
    fail(t, "gather along the split axis");
    return -1;
  }
  if (u->op == OP_EXPAND) {
    int b = a + u->out[0].type.rank - u->in[0]->type.rank;
    if (u->in[0]->type.dims[a] == u->out[0].type.dims[b]) return b;
    fail(t, "expand along the split axis");
    return -1;
  }
  if (u->op == OP_SLICE) {
    const int64_t *s = ir_attr_ints(u, "starts", NULL), *e = ir_attr_ints(u, "ends", NULL);
    const int64_t *step = ir_attr_ints(u, "steps", NULL);
    int64_t dim = u->in[0]->type.dims[a], len = e[a] - s[a];
    if (s[a] == 0 && e[a] == dim && step[a] == 1) return a; /* along other axes */
    /* One group of the split axis (q, k or v of a projection cut in
     * three); a plain split asks its source for the groups. */
    bool a_group = step[a] == 1 && len > 0 && dim % len == 0 && s[a] % len == 0 && len % t->T == 0;
    if (a_group && dim / len == g) return *groups = 1, a;
    if (a_group && g == 1 && dim / len <= 64) t->want_groups = (int)(dim / len);
    fail(t, "a slice of the split axis");
    return -1;
  }
  if (u->op == OP_RESHAPE) {
    int b = reshape_axis(t, u, a, g, groups);
    if (b < 0) {
      if (g == 1) t->want_groups = groups_wanted(t, u, a);
      fail(t, arena_printf(arena(t), "a reshape to %s does not keep the split whole (heads not a multiple of %d)",
                           ir_type_str(&u->out[0].type, ARENA_ARRAY(arena(t), char, 96), 96), t->T));
    }
    return b;
  }
  fail(t, arena_printf(arena(t), "%s reads a split value", ir_ops[u->op].name));
  return -1;
}

/* Whether node d passes a split from operand i to its result (as
 * passes_split and resolve let it): the data operand of a movement or
 * unary op, any non-scalar operand of an elementwise op or a concat. */
static bool carries(const Node *d, int i) {
  if (d->n_out != 1) return false;
  if (d->op == OP_RESHAPE || d->op == OP_TRANSPOSE || d->op == OP_DROPOUT || d->op == OP_SOFTMAX ||
      d->op == OP_LOG_SOFTMAX || d->op == OP_GATHER || d->op == OP_SLICE || d->op == OP_EXPAND ||
      is_unary_elementwise(d))
    return i == 0;
  return (d->op == OP_CONCAT || (ir_ops[d->op].cls == K_ELEMWISE && d->op != OP_BATCHNORM)) &&
         ir_type_numel(&d->in[i]->type) != 1;
}

/* A source that makes d's value through nodes that carry a split (RoPE's
 * sum of two products of k, its halves' concat): added to the region. */
static bool pull_from(Tp *t, Node *d) {
  if (t->seen[d->id] == t->stamp) return false;
  t->seen[d->id] = t->stamp;
  if (d->op == OP_LINEAR) {
    if (t->role[d->id] != ROLE_NONE) return false;
    keep_mark(t, d, 0);
    return add_source(t, d, 1);
  }
  for (int i = 0; i < d->n_in; i++)
    if (carries(d, i) && pull_from(t, d->in[i]->def)) return true;
  return false;
}

static bool pull(Tp *t, Value *w) {
  t->stamp++;
  return pull_from(t, w->def);
}

static bool visit_use(Tp *t, Value *v, Node *u) {
  if (t->role[u->id] != ROLE_NONE) return true;
  int a = t->axis[v->id];
  if (u->op == OP_LINEAR) return add_sink(t, u, v, a);
  if (u->op == OP_XENT) return add_xent_sink(t, u, v, a);
  if ((ir_ops[u->op].cls == K_ELEMWISE && u->op != OP_BATCHNORM && u->n_out == 1 && !is_unary_elementwise(u)) ||
      u->op == OP_ATTENTION || u->op == OP_MATMUL || u->op == OP_CONCAT) {
    for (int i = 0; i < t->n_pending; i++)
      if (t->pending[i] == u) return true;
    t->pending[t->n_pending++] = u;
    return true;
  }
  if (u->op == OP_GATHER && v != u->in[0]) return fail(t, "gather's indices are split");
  int g, b = passes_split(t, u, a, t->groups[v->id], &g);
  if (b < 0) return false;
  add_member(t, u, ROLE_INNER);
  return mark(t, &u->out[0], b, g);
}

/* The first pending node, by graph order, or -1. */
static int first_pending(const Tp *t) {
  int at = -1;
  for (int i = 0; i < t->n_pending; i++)
    if (at < 0 || t->pending[i]->id < t->pending[at]->id) at = i;
  return at;
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
      if (!resolve(t, u, &ready, false)) return false;
      if (ready) {
        t->pending[i--] = t->pending[--t->n_pending];
        progress = true;
        continue;
      }
      for (int k = 0; k < u->n_in && !progress; k++)
        if (t->axis[u->in[k]->id] < 0 && ir_type_numel(&u->in[k]->type) != 1 && pull(t, u->in[k])) progress = true;
      if (t->why) return false;
    }
    if (t->n_work || progress) continue;
    /* Nothing more splits on its own: the first pending node reads its
     * other operands whole.  Those come before it in the graph, so no
     * pending node can make them split later. */
    int at = first_pending(t);
    bool ready = false;
    if (at < 0 || !resolve(t, t->pending[at], &ready, true) || !ready) break;
    t->pending[at] = t->pending[--t->n_pending];
  }
  if (t->why) return false;
  if (t->n_pending)
    return fail(t, arena_printf(arena(t), "%s combines a split value with a whole one", ir_ops[t->pending[0]->op].name));
  return true;
}

/* Whether every reader of value v is a linear of the region in role
 * `role` that reads it as its weight or bias, directly or (at depth 0)
 * through a slice or a transpose. */
static bool readers_ok(Tp *t, const Value *v, int role, int depth) {
  for (int k = t->use_start[v->id]; k < t->use_start[v->id + 1]; k++) {
    const Node *u = t->use_node[k];
    if ((u->op == OP_SLICE || u->op == OP_TRANSPOSE) && depth == 0) {
      if (!readers_ok(t, &u->out[0], role, 1)) return false;
    } else if (u->op != OP_LINEAR || t->role[u->id] != role || u->in[0] == v) {
      return false;
    }
  }
  return true;
}

/* Whether u looks up rows of v (a gather along v's axis 0). */
static bool is_lookup(const Node *u, const Value *v) {
  int64_t axis = u->op == OP_GATHER ? ir_attr_int(u, "axis") : -1;
  return u->op == OP_GATHER && u->in[0] == v && u->in[1] != v && (axis == 0 || axis == -v->type.rank);
}

/* An output layer tied to its embedding: param p is read whole as the
 * weight of the region's sources (not in groups) and otherwise only by
 * lookups, which split_lookups then splits by the same rows. */
static bool tied_lookups(Tp *t, const Node *p) {
  const Value *v = &p->out[0];
  bool lookups = false;
  for (int k = t->use_start[v->id]; k < t->use_start[v->id + 1]; k++) {
    const Node *u = t->use_node[k];
    if (is_lookup(u, v))
      lookups = true;
    else if (u->op != OP_LINEAR || t->role[u->id] != ROLE_SOURCE || u->in[1] != v || u->in[0] == v ||
             t->groups[u->out[0].id] != 1)
      return false;
  }
  return lookups;
}

/* A parameter split in the region's `role` (its sources' rows, its
 * sinks' columns) is read by nothing else: any other reader, after a
 * step, would see the other ranks' parts stale (a tied weight; an
 * exporter's one tensor of zeros for a split layer's bias and its
 * sink's).  Inference updates nothing: each rank reads its part. */
static bool param_used_inside(Tp *t, const Node *p, int role) {
  return t->inference || readers_ok(t, &p->out[0], role, 0) || (role == ROLE_SOURCE && tied_lookups(t, p));
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

/* Part p's group k of groups, as a part of rows of its own. */
static Part group_part(const Part *p, int groups, int k) {
  Part g = *p;
  g.rows = p->rows / groups;
  g.row0 = p->row0 + k * g.rows;
  return g;
}

/* The parameters' checks and records; the region's line. */
static bool record(Tp *t) {
  const char *cols = "", *rows = "", *xent = "";
  int n_before = t->out->n_splits;
  for (int i = 0; i < t->n_members; i++) {
    Node *n = t->members[i];
    if (t->role[n->id] == ROLE_INNER) continue;
    if (n->op == OP_XENT) {
      xent = ", the cross entropy by classes";
      continue;
    }
    Part w, b = {0};
    part_of(n->in[1], 2, &w);
    bool src = t->role[n->id] == ROLE_SOURCE;
    if (src && n->n_in > 2) part_of(n->in[2], 1, &b);
    int role = src ? ROLE_SOURCE : ROLE_SINK;
    if (!param_used_inside(t, w.param, role) || (b.param && !param_used_inside(t, b.param, role))) {
      t->out->n_splits = n_before;
      return fail(t, arena_printf(arena(t), "%s is also read outside the region",
                                  param_name(param_used_inside(t, w.param, role) ? b.param : w.param)));
    }
    /* a source of G groups splits each group's rows */
    int groups = src ? t->groups[n->out[0].id] : 1;
    bool ok = true;
    const char **list = src ? &cols : &rows;
    for (int k = 0; k < groups && ok; k++) {
      Part wk = group_part(&w, groups, k), bk = b.param ? group_part(&b, groups, k) : b;
      ok = src ? add_split(t, w.param, w.cols, wk.row0, wk.rows) &&
                     (!b.param || add_split(t, b.param, 0, bk.row0, bk.rows))
               : add_split(t, w.param, !w.cols, 0, n->in[1]->type.dims[1]);
      *list = arena_printf(arena(t), "%s%s%s", *list, **list ? ", " : "", part_name(t, groups > 1 ? &wk : &w));
    }
    if (!ok) {
      t->out->n_splits = n_before;
      return false;
    }
  }
  add_line(t, arena_printf(arena(t), "split: %s by output rows%s%s%s%s%s", cols, *rows ? ", " : "", rows,
                           *rows ? " by input columns" : "", xent,
                           t->n_gathered && !*xent ? ", its outputs gathered" : ""));
  return true;
}

/* A slice of v from s to e (steps of 1 where steps is NULL), inserted
 * before `before`. */
static Node *slice_node(Graph *g, Node *before, Value *v, const int64_t *s, const int64_t *e, const int64_t *steps) {
  int64_t one[DL_MAX_RANK];
  for (int k = 0; k < v->type.rank; k++) one[k] = 1;
  Node *n = ir_node_new(g, OP_SLICE, 1, &v, before->loc);
  n->scope = before->scope;
  ir_set_ints(g, n, "starts", v->type.rank, s);
  ir_set_ints(g, n, "ends", v->type.rank, e);
  ir_set_ints(g, n, "steps", v->type.rank, steps ? steps : one);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "tensor parallel slice: %s", err);
  ir_insert_before(g, before, n);
  return n;
}

/* v [a, b] as [b, a], inserted before `before`. */
static Value *transposed_2d(Graph *g, Node *before, Value *v) {
  static const int64_t swap[2] = {1, 0};
  Node *n = ir_node_new(g, OP_TRANSPOSE, 1, &v, before->loc);
  n->scope = before->scope;
  ir_set_ints(g, n, "perm", 2, swap);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "tensor parallel transpose: %s", err);
  ir_insert_before(g, before, n);
  return &n->out[0];
}

/* [start, start + len) of part p along the linear's axis (0: the
 * weight's rows, its outputs; 1: its columns, its inputs), as the linear
 * reads it (transposed back for a cols part), inserted before `before`. */
static Value *slice_of(Tp *t, Node *before, const Part *p, int axis, int64_t start, int64_t len) {
  const TensorType *full = &p->param->out[0].type;
  int rows = p->cols, at = p->cols ? 1 - axis : axis; /* the param's axes */
  int64_t s[2] = {0, 0}, e[2] = {full->dims[0], full->rank > 1 ? full->dims[1] : 0};
  s[rows] = p->row0, e[rows] = p->row0 + p->rows;
  s[at] = start + (at == rows ? p->row0 : 0);
  e[at] = s[at] + len;
  Node *n = slice_node(t->g, before, &p->param->out[0], s, e, NULL);
  return p->cols ? transposed_2d(t->g, before, &n->out[0]) : &n->out[0];
}

/* This rank's reshape or expand n of in: its result's split axis b
 * 1/T of n's. */
static Node *reshaped(Tp *t, Node *n, Value *in, int b) {
  int64_t shape[DL_MAX_RANK];
  const TensorType *o = &n->out[0].type;
  for (int k = 0; k < o->rank; k++) shape[k] = o->dims[k];
  shape[b] /= t->T;
  Node *r = ir_node_new(t->g, n->op, 1, &in, n->loc);
  r->scope = n->scope;
  ir_set_ints(t->g, r, "shape", o->rank, shape);
  char err[256];
  if (!ir_infer(r, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel %s: %s", ir_ops[n->op].name, err);
  ir_insert_before(t->g, n, r);
  return r;
}

/* This rank's slice n of in (split along a in g groups): the whole split
 * axis, or its block of the one group n picks. */
static Node *sliced(Tp *t, Node *n, Value *in, int a, int g) {
  int count;
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK];
  const int64_t *starts = ir_attr_ints(n, "starts", &count);
  memcpy(s, starts, sizeof *s * (size_t)count);
  memcpy(e, ir_attr_ints(n, "ends", NULL), sizeof *e * (size_t)count);
  int64_t dim = n->in[0]->type.dims[a], group = dim / g;
  if (s[a] == 0 && e[a] == dim) {
    e[a] = dim / t->T;
  } else {
    s[a] = s[a] / group * (group / t->T);
    e[a] = s[a] + group / t->T;
  }
  return slice_node(t->g, n, in, s, e, ir_attr_ints(n, "steps", NULL));
}

/* This rank's rows of part p of groups: its block of each group's rows,
 * one after another (concatenated when there are several). */
static Value *rows_of(Tp *t, Node *n, const Part *p, int groups) {
  Value *parts[64];
  for (int k = 0; k < groups; k++) {
    Part q = group_part(p, groups, k);
    int64_t share = q.rows / t->T;
    parts[k] = slice_of(t, n, &q, 0, t->rank * share, share);
  }
  if (groups == 1) return parts[0];
  Node *c = ir_node_new(t->g, OP_CONCAT, groups, parts, n->loc);
  c->scope = n->scope;
  ir_set_int(t->g, c, "axis", 0);
  char err[256];
  if (!ir_infer(c, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel rows: %s", err);
  ir_insert_before(t->g, n, c);
  return &c->out[0];
}

/* This rank's block of v along axis, inserted before n. */
static Value *block_of(Tp *t, Node *n, Value *v, int axis) {
  const TensorType *ty = &v->type;
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK], share = ty->dims[axis] / t->T;
  for (int k = 0; k < ty->rank; k++) s[k] = 0, e[k] = ty->dims[k];
  s[axis] = t->rank * share, e[axis] = s[axis] + share;
  return &slice_node(t->g, n, v, s, e, NULL)->out[0];
}

/* Operand k of inner member n, a whole value, as this rank reads it:
 * after tp_copy when a gradient may flow into it (each rank's gradient
 * of it is a part, tp_copy's sums them), and its block where n needs
 * one (whole_use).  map keeps one tp_copy per value. */
static Value *whole_operand(Tp *t, Node *n, int k, Value **map) {
  Value *w = n->in[k], *v = w;
  if (w->def->op != OP_CONST && ir_dtype_is_float(w->type.dtype)) {
    if (!map[w->id]) map[w->id] = &pass_new_node(t->g, n, OP_TP_COPY, 1, &w, NULL, n->loc)->out[0];
    v = map[w->id];
  }
  int axis, out = n->out[0].id;
  return whole_use(n, w, t->axis[out], t->groups[out], &axis) == WHOLE_BLOCK ? block_of(t, n, v, axis) : v;
}

/* A scalar const of dtype dt, inserted before n. */
static Value *scalar(Tp *t, Node *n, double v, DType dt) {
  TensorType ty = {.dtype = dt, .rank = 0};
  return pass_new_const(t->g, n, v, &ty, n->loc);
}

static Value *op2(Tp *t, Node *n, OpKind op, Value *a, Value *b) {
  return &pass_new_node(t->g, n, op, 2, (Value *[]){a, b}, NULL, n->loc)->out[0];
}

static Value *select3(Tp *t, Node *n, Value *c, Value *a, Value *b) {
  return &pass_new_node(t->g, n, OP_WHERE, 3, (Value *[]){c, a, b}, NULL, n->loc)->out[0];
}

/* Node n (its attrs set), types inferred, inserted before `before`. */
static Value *placed(Tp *t, Node *before, Node *n) {
  n->scope = before->scope;
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(t->g->ctx, "tensor parallel %s: %s", ir_ops[n->op].name, err);
  ir_insert_before(t->g, before, n);
  return &n->out[0];
}

/* A reduction of x [N, K] over its axis 1, kept: [N, 1]. */
static Value *row_reduce(Tp *t, Node *before, OpKind op, Value *x) {
  Node *n = ir_node_new(t->g, op, 1, &x, before->loc);
  ir_set_ints(t->g, n, "axes", 1, (const int64_t[]){1});
  ir_set_int(t->g, n, "keepdims", 1);
  return placed(t, before, n);
}

static Value *op1(Tp *t, Node *n, OpKind op, Value *a) {
  return &pass_new_node(t->g, n, op, 1, &a, NULL, n->loc)->out[0];
}

/* log(sum(exp(x))) of each row of x [N, K], from its largest: [N, 1]. */
static Value *row_logsumexp(Tp *t, Node *n, Value *x) {
  Value *m = row_reduce(t, n, OP_REDUCE_MAX, x);
  Value *s = row_reduce(t, n, OP_REDUCE_SUM, op1(t, n, OP_EXP, op2(t, n, OP_SUB, x, m)));
  return op2(t, n, OP_ADD, m, op1(t, n, OP_LOG, s));
}

static Value *reshaped_to(Tp *t, Node *before, Value *v, int rank, const int64_t *dims) {
  Node *n = ir_node_new(t->g, OP_RESHAPE, 1, &v, before->loc);
  ir_set_ints(t->g, n, "shape", rank, dims);
  return placed(t, before, n);
}

/* v, this rank's block along axis of a tensor T times as long there,
 * placed among zeros for the other ranks' blocks: the parts to concat
 * (up to 3, their count returned), which summed over the ranks give
 * the whole tensor. */
static int among_zeros(Tp *t, Node *n, Value *v, int axis, Value **parts) {
  int np = 0;
  TensorType zt = v->type;
  int64_t len = v->type.dims[axis];
  if (t->rank > 0) zt.dims[axis] = t->rank * len, parts[np++] = pass_new_const(t->g, n, 0, &zt, n->loc);
  parts[np++] = v;
  if (t->rank < t->T - 1)
    zt.dims[axis] = (t->T - 1 - t->rank) * len, parts[np++] = pass_new_const(t->g, n, 0, &zt, n->loc);
  return np;
}

/* Cross entropy n (softmax_xent) on this rank's classes x [N, C/T] of
 * logits [N, C]: its rows' log-sum-exp, its logit of each row's class
 * when the class is one of its own, and (with label smoothing) its sum
 * of the row, placed in a row [N, T + 2] that is zero elsewhere and
 * summed over the ranks in one all-reduce; then each row's whole
 * log-sum-exp from the T parts, and PyTorch's loss from those.  The
 * all-reduce's gradient is the identity, so each rank's part of the
 * logits' gradient is its classes' softmax less the one-hot.  A class
 * out of range goes to the rank's pick as it came, which reports it. */
static Node *xent_part(Tp *t, Node *n, Value *x) {
  Graph *g = t->g;
  Value *cls = n->in[1];
  DType it = cls->type.dtype;
  int64_t N = x->type.dims[0], Cr = x->type.dims[1], C = Cr * t->T, start = t->rank * Cr;
  int64_t ignore = ir_attr_int(n, "ignore_index");
  double eps = ir_attr_float(n, "smoothing");
  Value *zero = scalar(t, n, 0, it);
  Value *local = op2(t, n, OP_SUB, cls, scalar(t, n, (double)start, it));
  Value *mine = op2(t, n, OP_LOGICAL_AND, op2(t, n, OP_GREATER_EQUAL, local, zero),
                    op2(t, n, OP_LESS, local, scalar(t, n, (double)Cr, it)));
  Value *ignored = op2(t, n, OP_EQUAL, cls, scalar(t, n, (double)ignore, it));
  Value *valid = op2(t, n, OP_LOGICAL_OR, ignored,
                     op2(t, n, OP_LOGICAL_AND, op2(t, n, OP_GREATER_EQUAL, cls, zero),
                         op2(t, n, OP_LESS, cls, scalar(t, n, (double)C, it))));
  Value *at = select3(t, n, valid, select3(t, n, mine, local, zero), cls);
  Value *pick_at = reshaped_to(t, n, at, 2, (int64_t[]){N, 1});
  Node *pick = ir_node_new(g, OP_GATHER_ELEMENTS, 2, (Value *[]){x, pick_at}, n->loc);
  ir_set_int(g, pick, "axis", 1);
  Value *picked = select3(t, n, reshaped_to(t, n, mine, 2, (int64_t[]){N, 1}), placed(t, n, pick),
                          scalar(t, n, 0, x->type.dtype));
  /* [0 .. 0, lse, 0 .. 0 | picked | sum] */
  Value *parts[5];
  int np = among_zeros(t, n, row_logsumexp(t, n, x), 1, parts);
  parts[np++] = picked;
  if (eps > 0) parts[np++] = row_reduce(t, n, OP_REDUCE_SUM, x);
  Node *row = ir_node_new(g, OP_CONCAT, np, parts, n->loc);
  ir_set_int(g, row, "axis", 1);
  Value *sum = &pass_new_node(g, n, OP_ALLREDUCE_SUM, 1, (Value *[]){placed(t, n, row)}, NULL, n->loc)->out[0];
  Value *col[3];
  for (int k = 0; k < 2 + (eps > 0); k++) {
    int64_t s0[2] = {0, k ? t->T + k - 1 : 0}, e0[2] = {N, k ? t->T + k : t->T};
    col[k] = &slice_node(g, n, sum, s0, e0, NULL)->out[0];
  }
  Value *loss = op2(t, n, OP_SUB, row_logsumexp(t, n, col[0]),
                    eps > 0 ? op2(t, n, OP_MUL, col[1], scalar(t, n, 1 - eps, x->type.dtype)) : col[1]);
  if (eps > 0) loss = op2(t, n, OP_SUB, loss, op2(t, n, OP_MUL, col[2], scalar(t, n, eps / (double)C, x->type.dtype)));
  loss = reshaped_to(t, n, loss, 1, (int64_t[]){N});
  return pass_new_node(g, n, OP_WHERE, 3, (Value *[]){ignored, scalar(t, n, 0, x->type.dtype), loss}, NULL, n->loc);
}

/* Model output n's result, this rank's block v along axis, whole: the
 * ranks' blocks, each placed among zeros, summed.  (T times an
 * all-gather's traffic; only an output layer's logits come here.) */
static void gather_output(Tp *t, Node *n, Value *v, int axis) {
  Graph *g = t->g;
  Value *parts[3];
  int np = among_zeros(t, n, v, axis, parts);
  Node *c = ir_node_new(g, OP_CONCAT, np, parts, n->loc);
  ir_set_int(g, c, "axis", axis);
  Node *sum = pass_new_node(g, n, OP_ALLREDUCE_SUM, 1, (Value *[]){placed(t, n, c)}, NULL, n->loc);
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == &n->out[0]) g->outputs[i] = &sum->out[0];
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
    Value *in[8];
    if (n->n_in > 8) dl_internal(g->ctx, "tensor parallel: %s of %d operands", ir_ops[n->op].name, n->n_in);
    for (int k = 0; k < n->n_in; k++) in[k] = map[n->in[k]->id] ? map[n->in[k]->id] : n->in[k];
    Node *m;
    switch (t->role[n->id]) {
      case ROLE_SOURCE: {
        Part w, b;
        part_of(n->in[1], 2, &w);
        Value *x = n->in[0];
        if (!map[x->id]) map[x->id] = &pass_new_node(g, n, OP_TP_COPY, 1, &x, NULL, n->loc)->out[0];
        in[0] = map[x->id];
        int groups = t->groups[n->out[0].id];
        in[1] = rows_of(t, n, &w, groups);
        if (n->n_in > 2 && part_of(n->in[2], 1, &b)) in[2] = rows_of(t, n, &b, groups);
        m = pass_new_node(g, n, OP_LINEAR, n->n_in, in, n, n->loc);
        keep_mark(t, m, 1);
        break;
      }
      case ROLE_SINK: {
        if (n->op == OP_XENT) {
          m = xent_part(t, n, in[0]);
          ir_replace_uses(g, &n->out[0], &m->out[0]);
          break;
        }
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
        for (int k = 0; k < n->n_in; k++)
          if (t->axis[n->in[k]->id] < 0) in[k] = whole_operand(t, n, k, map);
        if (n->op == OP_RESHAPE || n->op == OP_EXPAND)
          m = reshaped(t, n, in[0], t->axis[n->out[0].id]);
        else if (n->op == OP_SLICE)
          m = sliced(t, n, in[0], t->axis[n->in[0]->id], t->groups[n->in[0]->id]);
        else
          m = pass_new_node(g, n, n->op, n->n_in, in, n, n->loc);
        if (n->op == OP_DROPOUT) {
          /* the mask of this rank's blocks of the whole tensor */
          int64_t part[4] = {t->axis[n->in[0]->id], t->T, t->rank, t->groups[n->in[0]->id]};
          ir_set_ints(g, m, "part", part[3] > 1 ? 4 : 3, part);
          char err[256];
          if (!ir_infer(m, err, sizeof err)) dl_internal(g->ctx, "tensor parallel dropout: %s", err);
        }
        break;
    }
    map[n->out[0].id] = &m->out[0];
    if (t->role[n->id] != ROLE_SINK && t->is_output[n->out[0].id])
      gather_output(t, n, &m->out[0], t->axis[n->out[0].id]);
  }
  /* The old region, then the slices only it read. */
  for (int i = t->n_members - 1; i >= 0; i--) {
    Node *n = t->members[i];
    OpKind wop = t->role[n->id] != ROLE_INNER && n->op == OP_LINEAR ? n->in[1]->def->op : OP_PARAM;
    Node *w = wop == OP_SLICE || wop == OP_TRANSPOSE ? n->in[1]->def : NULL;
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
 * (true), or a "not split" line.  When a reshape would keep the split
 * whole with the source's rows in groups (one projection to q, k and v
 * reshaped to [.., 3, E]), once more with those groups. */
static bool try_source(Tp *t, Node *s) {
  keep_mark(t, s, 0);
  const char *name = linear_name(t, s), *why = NULL;
  int marks = t->n_marked;
  for (int groups = 1;;) {
    t->n_members = t->n_work = t->n_pending = t->n_gathered = 0;
    t->why = NULL;
    t->want_groups = 0;
    for (int v = 0; v < t->n_vals; v++) t->axis[v] = -1;
    memset(t->role, 0, (size_t)t->n_nodes + 1);
    bool ok = add_source(t, s, groups) && grow(t);
    int sinks = 0;
    for (int i = 0; ok && i < t->n_members; i++) sinks += t->role[t->members[i]->id] == ROLE_SINK;
    /* a head's gathered outputs end a region as a sink would */
    if (ok && !sinks && !(t->n_gathered && wide_head(t)))
      ok = fail(t, "no linear reads its result (an unpaired linear)");
    if (ok && record(t)) {
      rewrite(t);
      t->out->n_regions++;
      return true;
    }
    /* the first try's reason stands when the second fails too, and the
     * sources the second pulled in get their own tries */
    if (groups > 1) {
      for (int i = marks; i < t->n_marked; i++) (t->marked_kind[i] ? t->claimed : t->tried)[t->marked[i]->id] = 0;
      t->n_marked = marks;
      break;
    }
    why = t->why ? t->why : "unsupported";
    if (t->want_groups < 2) break;
    groups = t->want_groups;
    marks = t->n_marked;
  }
  add_line(t, arena_printf(arena(t), "not split: %s: %s", name, why));
  return false;
}

/* ---- lookups of a table split by rows ---- */

/* Lookup u, gather(W, ids) along W's rows, on this rank: its rows of W
 * [start, start + L), ids moved to them (negative ones from the end, as
 * gather reads them), the rows of other ranks read as zeros, and the
 * ranks' results summed.  An id out of W's range goes to the local
 * gather as it came, which reports it. */
static void rewrite_lookup(Tp *t, Node *u, Node *p) {
  Graph *g = t->g;
  Value *ids = u->in[1];
  DType it = ids->type.dtype;
  int64_t V = p->out[0].type.dims[0], L = V / t->T, start = t->rank * L;
  Value *zero = scalar(t, u, 0, it);
  Value *from_end = op2(t, u, OP_ADD, ids, scalar(t, u, (double)(V - start), it));
  Value *from_start = op2(t, u, OP_SUB, ids, scalar(t, u, (double)start, it));
  Value *loc = select3(t, u, op2(t, u, OP_LESS, ids, zero), from_end, from_start);
  Value *mine = op2(t, u, OP_LOGICAL_AND, op2(t, u, OP_GREATER_EQUAL, loc, zero),
                    op2(t, u, OP_LESS, loc, scalar(t, u, (double)L, it)));
  Value *valid = op2(t, u, OP_LOGICAL_AND, op2(t, u, OP_GREATER_EQUAL, ids, scalar(t, u, (double)-V, it)),
                     op2(t, u, OP_LESS, ids, scalar(t, u, (double)V, it)));
  Value *at = select3(t, u, valid, select3(t, u, mine, loc, zero), ids);
  const TensorType *w = &p->out[0].type;
  Node *local = pass_new_node(g, u, OP_GATHER, 2, (Value *[]){block_of(t, u, &p->out[0], 0), at}, u, u->loc);
  Value *keep = mine;
  if (w->rank > 1) {
    int64_t shape[DL_MAX_RANK];
    int r = 0;
    for (int k = 0; k < ids->type.rank; k++) shape[r++] = ids->type.dims[k];
    for (int k = 1; k < w->rank; k++) shape[r++] = 1;
    keep = reshaped_to(t, u, mine, r, shape);
  }
  Value *part = select3(t, u, keep, &local->out[0], scalar(t, u, 0, w->dtype));
  Node *sum = pass_new_node(g, u, OP_ALLREDUCE_SUM, 1, &part, NULL, u->loc);
  ir_replace_uses(g, &u->out[0], &sum->out[0]);
  ir_remove(g, u);
}

/* Tables read only by lookups along their rows (embeddings) split by
 * rows, Megatron's vocabulary-parallel embedding: each rank holds V/T
 * rows and their gradient and optimizer state, and each lookup costs an
 * all-reduce of its result, as a split layer's output does.  So a table
 * splits when it is no smaller than the largest linear weight
 * (largest_weight, before the regions split any): then it saves a
 * layer's memory for a layer's all-reduce.  Position and token-type
 * tables (a few hundred rows) stay whole; vocabularies split. */
static void split_lookups(Tp *t, int64_t largest_weight) {
  index_uses(t);
  for (Node *p = t->g->first, *next; p; p = next) {
    next = p->next;
    if (p->op != OP_PARAM) continue;
    const TensorType *w = &p->out[0].type;
    Value *v = &p->out[0];
    int first = t->use_start[v->id], end = t->use_start[v->id + 1];
    const char *name = param_name(p), *why = NULL;
    /* tied: a region's sources read its rows, split as lookups split */
    bool tied = false;
    for (int i = 0; i < t->out->n_splits; i++) {
      const TpSplit *sp = &t->out->splits[i];
      if (strcmp(sp->param, name)) continue;
      tied = sp->axis == 0 && sp->start == 0 && sp->len == w->dims[0];
      if (!tied) break;
    }
    int n_lookups = 0;
    bool all = first < end && !t->is_output[v->id];
    for (int k = first; k < end && all; k++) {
      const Node *u = t->use_node[k];
      all = is_lookup(u, v) || (tied && u->op == OP_SLICE);
      n_lookups += all && u->op == OP_GATHER;
    }
    if (!all || !n_lookups || w->rank < 1) continue;
    if (tied) {
      /* the region's split stands: the lookups must follow it */
    } else if (w->dtype != TY_F32)
      why = arena_printf(arena(t), "it is %s (the all-reduces are f32)", ir_dtype_name(w->dtype));
    else if (w->dims[0] % t->T)
      why = arena_printf(arena(t), "its %lld rows are not a multiple of %d", (long long)w->dims[0], t->T);
    else if (ir_type_numel(w) < largest_weight)
      why = arena_printf(arena(t),
                         "its %lld elements are fewer than the largest linear weight's %lld (its lookups' "
                         "all-reduce would cost a layer's for less than a layer's memory)",
                         (long long)ir_type_numel(w), (long long)largest_weight);
    if (why) {
      add_line(t, arena_printf(arena(t), "not split: %s: %s", name, why));
      continue;
    }
    add_split(t, p, 0, 0, w->dims[0]);
    for (int k = end - 1; k >= first; k--)
      if (t->use_node[k]->op == OP_GATHER) rewrite_lookup(t, t->use_node[k], p);
    add_line(t, arena_printf(arena(t), "split: %s by rows, each rank looking up the ids in its rows", name));
    t->out->n_regions++;
  }
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

/* Exporters' linears of inputs of rank 3 and more: x @ W^T by a
 * parameter W [N, K] (or a row slice of one; a transpose of it, or
 * trans_b), then + b by one b [N]: linear(x, W, b) in their place.  And
 * x @ W by a parameter W [K, N] (Hugging Face's Conv1D): linear(x,
 * W^T, b), the transpose read as a part of W's columns. */
static void products_as_linears(Graph *g) {
  PassUses *uses = pass_uses_new(g);
  for (Node *m = g->first, *next; m; m = next) {
    next = m->next;
    if (m->op != OP_MATMUL || ir_matmul_trans(m, 0) || m->in[0]->type.rank < 2 || m->out[0].type.dtype != TY_F32)
      continue;
    Node *tr = ir_matmul_trans(m, 1) ? NULL : m->in[1]->def;
    bool stored_kn = tr && tr->op == OP_PARAM; /* Hugging Face's Conv1D: W [K, N] */
    if (tr && !swaps_2d(tr) && !stored_kn) continue;
    Value *w = tr && !stored_kn ? tr->in[0] : m->in[1], *b = NULL;
    Part pw, pb;
    if (stored_kn) {
      if (w->type.rank != 2 || w->type.dtype != TY_F32) continue;
      w = transposed_2d(g, m, w);
      tr = NULL;
    }
    if (!part_of(w, 2, &pw) || w->type.dtype != TY_F32) continue;
    Node *at = m, *add = NULL;
    for (Node *u = m->next; u && pass_uses(uses, &m->out[0]) == 1 && !add; u = u->next)
      if (u->op == OP_ADD && (u->in[0] == &m->out[0] || u->in[1] == &m->out[0])) add = u;
    if (add) {
      b = add->in[add->in[0] == &m->out[0] ? 1 : 0];
      if (part_of(b, 1, &pb) && b->type.dtype == TY_F32 && b->type.dims[0] == w->type.dims[0] &&
          ir_type_eq(&add->out[0].type, &m->out[0].type))
        at = add;
      else
        b = NULL;
    }
    Value *in[3] = {m->in[0], w, b};
    Node *lin = pass_new_node(g, at, OP_LINEAR, b ? 3 : 2, in, NULL, m->loc);
    lin->scope = m->scope;
    ir_replace_uses(g, &at->out[0], &lin->out[0]);
    if (at != m) ir_remove(g, at);
    if (next == at) next = lin->next;
    ir_remove(g, m);
    if (tr) {
      pass_uses_add(uses, &tr->out[0], -1);
      if (pass_uses(uses, &tr->out[0]) == 0) {
        if (next == tr) next = next->next;
        ir_remove(g, tr);
      }
    }
  }
}

bool pass_tensor_parallel(Graph *g, const TpOptions *o, TpResult *out) {
  memset(out, 0, sizeof *out);
  out->ranks = o->ranks, out->rank = o->rank;
  if (o->ranks <= 1) return true;
  products_as_linears(g);
  /* the chains the attention pass replaced, which a region must not see
   * (params stay: their names are the model's) */
  if (o->fuse_attention && pass_attention(g, NULL)) pass_remove_dead(g, true, NULL);
  Tp t = {.g = g, .T = o->ranks, .rank = o->rank, .inference = o->inference, .out = out};
  int64_t largest_weight = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_LINEAR && ir_type_numel(&n->in[1]->type) > largest_weight)
      largest_weight = ir_type_numel(&n->in[1]->type);
  /* After each rewrite the graph is indexed again from the start: the
   * rewrite made values the index does not know. */
  bool again = true;
  while (again) {
    again = false;
    index_uses(&t);
    for (Node *s = g->first; s && !again; s = s->next)
      if (s->op == OP_LINEAR && !t.claimed[s->id] && !t.tried[s->id]) again = try_source(&t, s);
  }
  split_lookups(&t, largest_weight);
  for (Node *p = g->first; p; p = p->next)
    if (p->op == OP_PARAM) shard_param(&t, p);
  ir_number(g);
  return true;
}
