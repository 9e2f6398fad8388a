/* The IR verifier: takes a graph, checks the invariants every pass relies
 * on (list structure, operands defined before use, arities, attributes
 * against the schema, declared and inferred types, unique source names,
 * outputs), reports what is broken to the graph's diagnostics and returns
 * whether all held.  It stops checking nodes after the first broken one,
 * since what follows is usually its echo. */
#include "ir.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing over pointers (defined values) or strings (names). */
typedef struct PtrSet {
  const void **slots;
  size_t cap;
} PtrSet;

static uint64_t hash_ptr(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdu;
  return h ^ (h >> 33);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static void set_init(Arena *a, PtrSet *s, size_t n) {
  s->cap = 16;
  while (s->cap < n * 2) s->cap *= 2;
  s->slots = ARENA_ARRAY(a, const void *, s->cap);
}

/* Returns false when already present. */
static bool set_add_ptr(PtrSet *s, const void *p) {
  for (size_t i = hash_ptr(p) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->slots[i]) {
      s->slots[i] = p;
      return true;
    }
    if (s->slots[i] == p) return false;
  }
}

static bool set_has_ptr(const PtrSet *s, const void *p) {
  for (size_t i = hash_ptr(p) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->slots[i]) return false;
    if (s->slots[i] == p) return true;
  }
}

static bool set_add_str(PtrSet *s, const char *str) {
  for (size_t i = hash_str(str) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (!s->slots[i]) {
      s->slots[i] = str;
      return true;
    }
    if (strcmp(s->slots[i], str) == 0) return false;
  }
}

/* Only then is out[] as long as n_out says. */
static int n_results(const Node *n) {
  if ((unsigned)n->op >= OP_COUNT || !n->out || n->n_out != ir_op_results(n->op, n->n_in)) return 0;
  return n->n_out;
}

typedef struct Verifier {
  Graph *g;
  bool node_ok, ok;
} Verifier;

static void fail(Verifier *v, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(Verifier *v, const Node *n, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  SrcLoc none = {0};
  if (n) {
    const char *op = (unsigned)n->op < OP_COUNT ? ir_ops[n->op].name : "?";
    if (n_results(n) > 0)
      diag_error(v->g->ctx, n->loc, "verifier: %s %%%d: %s", op, n->out[0].id, buf);
    else
      diag_error(v->g->ctx, n->loc, "verifier: %s: %s", op, buf);
  } else {
    diag_error(v->g->ctx, none, "verifier: graph '%s': %s", v->g->name ? v->g->name : "", buf);
  }
  v->node_ok = v->ok = false;
}

static const char *kind_name(AttrKind k) {
  switch (k) {
    case AK_INT: return "int";
    case AK_FLOAT: return "float";
    case AK_INTS: return "int list";
    case AK_STR: return "string";
    case AK_DTYPE: return "dtype";
  }
  return "unknown kind";
}

static void check_attrs(Verifier *v, const Node *n) {
  const OpInfo *info = &ir_ops[n->op];
  int last_spec = -1;
  for (int i = 0; i < n->n_attrs; i++) {
    const Attr *a = &n->attrs[i];
    if (!a->name) {
      fail(v, n, "attribute %d has no name", i);
      continue;
    }
    const AttrSpec *s = ir_op_attr_spec(n->op, a->name);
    if (!s) {
      fail(v, n, "attribute '%s' is not in %s's schema", a->name, info->name);
      continue;
    }
    if (a->kind != s->kind) fail(v, n, "attribute '%s' is a %s, should be a %s", a->name,
                                 kind_name(a->kind), kind_name(s->kind));
    else if (a->kind == AK_STR && !a->s)
      fail(v, n, "attribute '%s' has no string", a->name);
    else if (a->kind == AK_INTS && (a->ints.n < 0 || (a->ints.n > 0 && !a->ints.v)))
      fail(v, n, "attribute '%s' has a broken list", a->name);
    else if (a->kind == AK_DTYPE && (unsigned)a->dt >= TY_COUNT)
      fail(v, n, "attribute '%s' has no valid dtype", a->name);
    int spec = (int)(s - info->attrs);
    if (spec == last_spec)
      fail(v, n, "attribute '%s' appears twice", a->name);
    else if (spec < last_spec)
      fail(v, n, "attribute '%s' is out of schema order", a->name);
    last_spec = spec;
  }
  for (int i = 0; i < info->n_attrs; i++) {
    const AttrSpec *s = &info->attrs[i];
    if (s->default_text && strcmp(s->default_text, "?") == 0) continue;
    if (!ir_attr(n, s->name)) fail(v, n, "missing attribute '%s'", s->name);
  }
}

static void check_declared(Verifier *v, const Node *n) {
  const TensorType *t = &n->out[0].type;
  char buf[IR_TYPE_STR_MAX];
  if ((unsigned)t->dtype >= TY_COUNT) {
    fail(v, n, "declared type has no valid dtype");
    return;
  }
  if (t->rank < 0 || t->rank > DL_MAX_RANK) {
    fail(v, n, "declared rank %d is outside 0..%d", t->rank, DL_MAX_RANK);
    return;
  }
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) {
      fail(v, n, "declared type %s has a negative dimension", ir_type_str(t, buf, sizeof buf));
      return;
    }
  if (ir_type_numel(t) < 0)
    fail(v, n, "declared type %s has more than %" PRId64 " elements", ir_type_str(t, buf, sizeof buf),
         DL_MAX_ELEMS);
}

static void check_inferred(Verifier *v, const Node *n) {
  /* Infer into a copy so the node keeps the types it has. */
  Node copy = *n;
  Value outs[8];
  if (n->n_out > (int)ARRAY_LEN(outs)) {
    fail(v, n, "%d results is more than the verifier handles", n->n_out);
    return;
  }
  memcpy(outs, n->out, sizeof(Value) * (size_t)n->n_out);
  copy.out = outs;
  char err[256] = "";
  if (!ir_infer(&copy, err, sizeof err)) {
    fail(v, n, "%s", err[0] ? err : "the operands do not fit this op");
    return;
  }
  for (int i = 0; i < n->n_out; i++)
    if (!ir_type_eq(&outs[i].type, &n->out[i].type)) {
      char has[IR_TYPE_STR_MAX], want[IR_TYPE_STR_MAX];
      fail(v, n, "result %d has type %s but its operands give %s", i,
           ir_type_str(&n->out[i].type, has, sizeof has), ir_type_str(&outs[i].type, want, sizeof want));
    }
}

static void check_node(Verifier *v, const Node *n, const PtrSet *defined, PtrSet *inputs,
                       PtrSet *params) {
  if ((unsigned)n->op >= OP_COUNT) {
    fail(v, n, "op number %d is not in ops.def", (int)n->op);
    return;
  }
  const OpInfo *info = &ir_ops[n->op];
  if (n->n_out != ir_op_results(n->op, n->n_in) || !n->out) {
    fail(v, n, "has %d results, %s gives %d", n->n_out, info->name, ir_op_results(n->op, n->n_in));
    return;
  }
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i].def != n || n->out[i].index != i)
      fail(v, n, "result %d does not point back at its node", i);
  if ((n->n_in > 0 && !n->in) || n->n_in < 0 || (n->n_attrs > 0 && !n->attrs) || n->n_attrs < 0) {
    fail(v, n, "has a broken operand or attribute array");
    return;
  }
  if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in)) {
    if (info->max_in < 0)
      fail(v, n, "takes at least %d operands, has %d", info->min_in, n->n_in);
    else if (info->min_in == info->max_in)
      fail(v, n, "takes %d operand%s, has %d", info->min_in, info->min_in == 1 ? "" : "s", n->n_in);
    else
      fail(v, n, "takes %d to %d operands, has %d", info->min_in, info->max_in, n->n_in);
  }
  for (int i = 0; i < n->n_in; i++) {
    const Value *in = n->in[i];
    if (!in)
      fail(v, n, "operand %d is null", i);
    else if (!set_has_ptr(defined, in))
      fail(v, n, "operand %d is not a result of an earlier node in this graph", i);
  }
  check_attrs(v, n);
  if (!v->node_ok) return;
  if (!info->shape) {
    check_declared(v, n);
    if (n->op == OP_INPUT || n->op == OP_PARAM) {
      const char *name = ir_attr_str(n, "name");
      bool is_input = n->op == OP_INPUT;
      if (!set_add_str(is_input ? inputs : params, name))
        fail(v, n, "%s name \"%s\" is used twice", is_input ? "input" : "param", name);
    }
  } else {
    check_inferred(v, n);
  }
}

static const void *group_key(int group) { return (const void *)(uintptr_t)((unsigned)group + 1u); }

static int cmp_int(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  return (a > b) - (a < b);
}

/* At most IR_MAX_GROUP members a group, reported at its root. */
static void check_group_sizes(Verifier *v, int count) {
  Graph *g = v->g;
  int *ids = ARENA_ARRAY(&g->ctx->arena, int, count + 1), n = 0;
  for (Node *x = g->first; x; x = x->next)
    if (x->group >= 0) ids[n++] = x->group;
  qsort(ids, (size_t)n, sizeof *ids, cmp_int);
  for (int i = 0, j; i < n; i = j) {
    for (j = i; j < n && ids[j] == ids[i]; j++) {}
    if (j - i <= IR_MAX_GROUP) continue;
    const Node *root = g->last;
    while (root->group != ids[i]) root = root->prev;
    fail(v, root, "fusion group k%d has %d members, more than %d", ids[i], j - i, IR_MAX_GROUP);
  }
}

/* The node id of every member's group root (the last member in list
 * order), by node id; -1 outside groups. */
static int *group_roots(Graph *g, int count) {
  Arena *a = &g->ctx->arena;
  int *root = ARENA_ARRAY(a, int, count + 1);
  /* (group, root id) pairs sorted by group: a hand-written file may
   * number its groups with any int. */
  int *pairs = ARENA_ARRAY(a, int, 2 * count + 2), n = 0;
  PtrSet seen;
  set_init(a, &seen, (size_t)count);
  for (Node *x = g->last; x; x = x->prev)
    if (x->group >= 0 && set_add_ptr(&seen, group_key(x->group))) pairs[2 * n] = x->group, pairs[2 * n + 1] = x->id, n++;
  qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_int);
  for (Node *x = g->first; x; x = x->next) {
    root[x->id] = -1;
    if (x->group < 0) continue;
    const int *at = bsearch(&x->group, pairs, (size_t)n, 2 * sizeof *pairs, cmp_int);
    root[x->id] = at[1];
  }
  return root;
}

/* Whether a and b have the same dims once the 1s are dropped: the same
 * elements at the same linear index. */
static bool same_layout(const TensorType *a, const TensorType *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < b->rank && b->dims[j] == 1) j++;
    if (i == a->rank || j == b->rank) return i == a->rank && j == b->rank;
    if (a->dims[i++] != b->dims[j++]) return false;
  }
}

/* A member used outside its group (or a graph output) is a side output
 * its group's kernel stores beside the root (passes/fuse.c): elementwise,
 * or a reduction of the group's anchor's rows (the anchor itself or a
 * sibling), of the root's elements, and every outside use computed
 * after the root (user_at: where its user runs; -1 for a graph output). */
static bool side_output_ok(const Node *d, const Node *root, const Node *anchor, int user_at) {
  bool reduction = anchor && ir_reduce_siblings(d, anchor);
  if ((ir_ops[d->op].cls != K_ELEMWISE && !reduction) || d->n_out != 1) return false;
  return same_layout(&d->out[0].type, &root->out[0].type) && (user_at < 0 || user_at > root->id);
}

/* Each member's group anchor by node id (the last reduction, window,
 * convolution or pool gradient of its group in list order), or NULL. */
static const Node **group_anchors(Graph *g, int count, const int *root) {
  const Node **anchor = ARENA_ARRAY(&g->ctx->arena, const Node *, count + 1);
  for (Node *n = g->first; n; n = n->next) {
    OpClass cls = ir_ops[n->op].cls;
    bool pool_grad = n->op == OP_MAXPOOL_GRAD || n->op == OP_AVGPOOL_GRAD;
    if (n->group >= 0 && (cls == K_REDUCE || cls == K_WINDOW || n->op == OP_CONV2D || n->op == OP_CONV3D || pool_grad))
      anchor[root[n->id]] = n;
  }
  for (Node *n = g->first; n; n = n->next) anchor[n->id] = n->group >= 0 ? anchor[root[n->id]] : NULL;
  return anchor;
}

/* Fusion groups (Node.group): every member but the last in list order
 * (the root) is used only inside its group and is no graph output, or
 * is a side output (above), so the group computes its root and values
 * of its shape; sources and recurrent layers stay
 * outside; at most one reduction, window or convolution (the loop nest
 * the rest is fused around; matmul and linear are GEMMs that write their
 * own bytes, the group's kernel reads them), but for reductions that are
 * siblings of the group's anchor, its last (ir_reduce_siblings: the same
 * rows, so one kernel's accumulators; an epilogue over the rows may read
 * them all).  A path that leaves a group and
 * comes back would need a non-root member used outside, so groups are
 * convex and emitting each at its root keeps the graph's order. */
static void check_groups(Verifier *v, int count) {
  Graph *g = v->g;
  Arena *a = &g->ctx->arena;
  bool *is_root = ARENA_ARRAY(a, bool, count + 1);
  PtrSet seen, anchored;
  set_init(a, &seen, (size_t)count);
  set_init(a, &anchored, (size_t)count);
  bool any = false;
  for (Node *n = g->last; n && !any; n = n->prev) any = n->group >= 0;
  if (!any) {
    for (Node *n = g->first; n; n = n->next)
      if (n->group != -1) fail(v, n, "fusion group %d is not -1 or a group number", n->group);
    return;
  }
  int *root = group_roots(g, count);
  const Node **node_of = ARENA_ARRAY(a, const Node *, count + 1);
  for (Node *n = g->first; n; n = n->next) node_of[n->id] = n;
  const Node **anchors = group_anchors(g, count, root);
  for (Node *n = g->last; n; n = n->prev) {
    if (n->group < 0) {
      if (n->group != -1) fail(v, n, "fusion group %d is not -1 or a group number", n->group);
      continue;
    }
    OpClass cls = ir_ops[n->op].cls;
    /* A pool's gradient is a kernel with one thread per result element:
     * an anchor with an epilogue. */
    bool pool_grad = n->op == OP_MAXPOOL_GRAD || n->op == OP_AVGPOOL_GRAD;
    if (cls == K_SOURCE || (cls == K_OPAQUE && !pool_grad))
      fail(v, n, "a %s cannot be in a fusion group", ir_ops[n->op].name);
    bool anchor = cls == K_REDUCE || cls == K_WINDOW || n->op == OP_CONV2D || n->op == OP_CONV3D || pool_grad;
    bool sibling = anchors[n->id] && anchors[n->id] != n && ir_reduce_siblings(n, anchors[n->id]);
    if (anchor && !sibling && !set_add_ptr(&anchored, group_key(n->group)))
      fail(v, n, "fusion group k%d holds two reductions, windows or convolutions", n->group);
    is_root[n->id] = set_add_ptr(&seen, group_key(n->group));
  }
  check_group_sizes(v, count);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      const Node *d = n->in[i]->def;
      /* n runs at its group's root */
      int at = root[n->id] >= 0 ? root[n->id] : n->id;
      if (d->group >= 0 && !is_root[d->id] && d->group != n->group &&
          !side_output_ok(d, node_of[root[d->id]], anchors[d->id], at))
        fail(v, n, "operand %d is inside fusion group k%d, not its root (nor an elementwise side output of "
                   "its shape used after it)", i, d->group);
    }
  for (int i = 0; i < g->n_outputs; i++) {
    const Node *d = g->outputs[i]->def;
    if (d->group >= 0 && !is_root[d->id] && !side_output_ok(d, node_of[root[d->id]], anchors[d->id], -1))
      fail(v, d, "graph output \"%s\" is inside fusion group k%d, not its root (nor an elementwise side "
                 "output of its shape)", g->output_names[i], d->group);
  }
}

/* An output of run-time length (docs/ir.md): its length is an i64
 * scalar output after every output that is not a length, the axis is
 * one of its own, and a length has no length of its own. */
static void check_length(Verifier *v, Graph *g, int i) {
  int axis, j = ir_output_length(g, i, &axis);
  if (j < 0) return;
  if (j >= g->n_outputs || j == i) {
    fail(v, NULL, "output %d's length is output %d, which does not exist", i, j);
    return;
  }
  const TensorType *t = &g->outputs[j]->type;
  if (t->dtype != TY_I64 || t->rank != 0) fail(v, NULL, "output %d's length, output %d, is not an i64 scalar", i, j);
  if (axis < 0 || axis >= g->outputs[i]->type.rank)
    fail(v, NULL, "output %d has a run-time length on axis %d of its rank %d", i, axis, g->outputs[i]->type.rank);
  if (ir_output_is_length(g, i)) fail(v, NULL, "output %d is a length and has a length", i);
  if (j < ir_visible_outputs(g))
    fail(v, NULL, "output %d, a length, comes before output %d, which is not one", j, ir_visible_outputs(g) - 1);
}

/* An output that updates a param (docs/training.md): the param exists,
 * the output has its type, and no other output updates it. */
static void check_update(Verifier *v, Graph *g, int i) {
  const char *name = ir_output_update(g, i);
  if (!name) return;
  for (int j = 0; j < i; j++)
    if (ir_output_update(g, j) && strcmp(ir_output_update(g, j), name) == 0) {
      fail(v, NULL, "outputs %d and %d both update param \"%s\"", j, i, name);
      return;
    }
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) {
      char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
      if (!ir_type_eq(&n->out[0].type, &g->outputs[i]->type))
        fail(v, NULL, "output %d is %s but updates param \"%s\" of type %s", i,
             ir_type_str(&g->outputs[i]->type, a, sizeof a), name, ir_type_str(&n->out[0].type, b, sizeof b));
      return;
    }
  fail(v, NULL, "output %d updates param \"%s\", which the graph does not have", i, name);
}

bool ir_verify(Graph *g) {
  Verifier v = {.g = g, .ok = true};
  Arena *a = &g->ctx->arena;
  /* Count along the list, bounded so a cycle cannot hang us. */
  size_t n_values = 0;
  int count = 0;
  Node *prev = NULL;
  for (Node *n = g->first; n; n = n->next) {
    if (count > g->n_nodes) {
      fail(&v, NULL, "the node list is longer than n_nodes (%d) or has a cycle", g->n_nodes);
      return false;
    }
    n->id = count;
    for (int i = 0; i < n_results(n); i++) n->out[i].id = (int)n_values + i;
    if (n->prev != prev) fail(&v, n, "prev link does not point at the node before it");
    n_values += (size_t)n_results(n);
    prev = n;
    count++;
  }
  if (count != g->n_nodes) fail(&v, NULL, "n_nodes is %d but the list has %d nodes", g->n_nodes, count);
  if (g->last != prev) fail(&v, NULL, "last does not point at the final node");
  if (!v.ok) return false;

  PtrSet defined, inputs, params;
  set_init(a, &defined, n_values);
  set_init(a, &inputs, (size_t)count);
  set_init(a, &params, (size_t)count);
  bool stopped = false;
  for (Node *n = g->first; n; n = n->next) {
    v.node_ok = true;
    if (!stopped) {
      check_node(&v, n, &defined, &inputs, &params);
      stopped = !v.node_ok;
    }
    for (int i = 0; i < n_results(n); i++) set_add_ptr(&defined, &n->out[i]);
  }
  v.node_ok = true;
  if (g->n_outputs < 1) fail(&v, NULL, "has no outputs");
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->output_names ? g->output_names[i] : NULL;
    if (!name) fail(&v, NULL, "output %d has no name", i);
    if (!g->outputs || !g->outputs[i])
      fail(&v, NULL, "output %d is null", i);
    else if (!set_has_ptr(&defined, g->outputs[i]))
      fail(&v, NULL, "output %d (\"%s\") is not a value of this graph", i, name ? name : "");
    for (int j = 0; name && j < i; j++)
      if (g->output_names[j] && strcmp(g->output_names[j], name) == 0) {
        fail(&v, NULL, "output name \"%s\" is used twice", name);
        break;
      }
  }
  for (int i = 0; i < g->n_outputs && v.ok; i++) check_update(&v, g, i);
  for (int i = 0; i < g->n_outputs && v.ok; i++) check_length(&v, g, i);
  if (v.ok) check_groups(&v, count);
  if (v.ok && ir_has_loops(g)) {
    IrLoops loops;
    char err[256];
    if (!ir_loops_find(g, &loops, err, sizeof err)) fail(&v, NULL, "%s", err);
  }
  return v.ok;
}
