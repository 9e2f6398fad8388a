/* Helpers every graph pass uses: takes a graph, gives deferred value
 * replacement (PassRewrite), use counts (PassUses) and builders for new
 * nodes and const splats.  Maps are open-addressed hash tables keyed by
 * pointer, in the graph's arena. */
#include <fnmatch.h>
#include <stdint.h>
#include <string.h>

#include "ir/eval.h"
#include "passes/pass.h"

typedef struct PtrMap {
  const void **keys;
  void **vals;
  size_t cap, len; /* cap a power of two */
} PtrMap;

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static void map_init(Arena *a, PtrMap *m, size_t want) {
  size_t cap = 16;
  while (cap < want * 2) cap *= 2;
  m->keys = ARENA_ARRAY(a, const void *, cap);
  m->vals = ARENA_ARRAY(a, void *, cap);
  m->cap = cap;
  m->len = 0;
}

static void **map_slot(Arena *a, PtrMap *m, const void *key, bool insert);

static void map_grow(Arena *a, PtrMap *m) {
  PtrMap old = *m;
  map_init(a, m, old.cap);
  for (size_t i = 0; i < old.cap; i++)
    if (old.keys[i]) *map_slot(a, m, old.keys[i], true) = old.vals[i];
}

/* The value slot of key; NULL when absent and not inserting. */
static void **map_slot(Arena *a, PtrMap *m, const void *key, bool insert) {
  size_t mask = m->cap - 1;
  for (size_t i = ptr_hash(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == key) return &m->vals[i];
    if (!m->keys[i]) {
      if (!insert) return NULL;
      if (2 * (m->len + 1) > m->cap) {
        map_grow(a, m);
        return map_slot(a, m, key, true);
      }
      m->keys[i] = key;
      m->len++;
      return &m->vals[i];
    }
  }
}

/* ---- deferred replacement ---- */

struct PassRewrite {
  Graph *g;
  PtrMap to;
};

PassRewrite *pass_rewrite_new(Graph *g) {
  PassRewrite *rw = ARENA_NEW(&g->ctx->arena, PassRewrite);
  rw->g = g;
  map_init(&g->ctx->arena, &rw->to, 64);
  return rw;
}

void pass_rewrite_replace(PassRewrite *rw, const Value *from, Value *to) {
  if (from == to) return;
  *map_slot(&rw->g->ctx->arena, &rw->to, from, true) = to;
}

Value *pass_rewrite_resolve(PassRewrite *rw, Value *v) {
  Value *end = v;
  for (void **s; (s = map_slot(NULL, &rw->to, end, false));) end = *s;
  /* Path compression keeps chains of replacements short. */
  while (v != end) {
    void **s = map_slot(NULL, &rw->to, v, false);
    Value *next = *s;
    *s = end;
    v = next;
  }
  return end;
}

void pass_rewrite_operands(PassRewrite *rw, Node *n) {
  if (rw->to.len == 0) return;
  for (int i = 0; i < n->n_in; i++) n->in[i] = pass_rewrite_resolve(rw, n->in[i]);
}

void pass_rewrite_finish(PassRewrite *rw) {
  Graph *g = rw->g;
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = pass_rewrite_resolve(rw, g->outputs[i]);
}

/* ---- use counts ---- */

struct PassUses {
  Graph *g;
  PtrMap count; /* Value* -> count stored in the pointer */
};

/* A param a training step updates changes on every run, as an input. */
static bool is_updated(const Graph *g, const Node *param) {
  const char *name = ir_attr_str(param, "name");
  for (int i = 0; i < g->n_outputs; i++) {
    const char *u = ir_output_update(g, i);
    if (u && strcmp(u, name) == 0) return true;
  }
  return false;
}

bool *pass_weight_only(Graph *g) {
  ir_number(g);
  bool *w = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next) {
    bool only = (n->op == OP_PARAM && !is_updated(g, n)) || n->op == OP_CONST || n->op == OP_IOTA;
    /* a loop runs in a run's steps, whatever it reads (init steps do not branch) */
    if (n->op != OP_INPUT && n->n_in > 0 && n->op != OP_LOOP_BEGIN && n->op != OP_LOOP_END) {
      only = true;
      for (int i = 0; i < n->n_in && only; i++) only = w[n->in[i]->def->id];
    }
    w[n->id] = only;
  }
  return w;
}

PassUses *pass_uses_new(Graph *g) {
  PassUses *u = ARENA_NEW(&g->ctx->arena, PassUses);
  u->g = g;
  map_init(&g->ctx->arena, &u->count, (size_t)g->n_nodes + 16);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) pass_uses_add(u, n->in[i], 1);
  for (int i = 0; i < g->n_outputs; i++) pass_uses_add(u, g->outputs[i], 1);
  return u;
}

int pass_uses(const PassUses *u, const Value *v) {
  void **s = map_slot(NULL, (PtrMap *)&u->count, v, false);
  return s ? (int)(intptr_t)*s : 0;
}

void pass_uses_add(PassUses *u, const Value *v, int delta) {
  void **s = map_slot(&u->g->ctx->arena, &u->count, v, true);
  *s = (void *)((intptr_t)*s + delta);
}

/* ---- builders ---- */

Node *pass_new_node(Graph *g, Node *before, OpKind op, int n_in, Value *const *in,
                    const Node *like, SrcLoc loc) {
  Node *n = ir_node_new(g, op, n_in, in, loc);
  if (like) n->scope = like->scope; /* it stands for like */
  if (like && like->n_attrs) {
    n->n_attrs = like->n_attrs;
    n->attrs = ARENA_ARRAY(&g->ctx->arena, Attr, like->n_attrs);
    memcpy(n->attrs, like->attrs, sizeof(Attr) * (size_t)like->n_attrs);
  }
  char err[256];
  if (!ir_fill_defaults(g, n, err, sizeof err) || !ir_infer(n, err, sizeof err))
    dl_internal(g->ctx, "a pass built a bad %s: %s", ir_ops[op].name, err);
  /* Needed where the node it comes before is (ir_guards_fix widens it
   * if something outside that branch reads it). */
  n->guard = before ? before->guard : NULL;
  ir_insert_before(g, before, n);
  return n;
}

Node *pass_find_param(Graph *g, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  return NULL;
}

int pass_split_names(Arena *a, const char *list, const char ***items) {
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  *items = ARENA_ARRAY(a, const char *, n);
  int k = 0;
  for (const char *p = list; *p;) {
    size_t len = 0;
    while (p[len] && p[len] != ',') len += p[len] == '\\' && p[len + 1] ? 2 : 1; /* a backslash keeps what follows */
    (*items)[k++] = arena_strndup(a, p, len);
    p += len + (p[len] == ',');
  }
  return k;
}

const char *pass_name_pattern(Arena *a, const char *name) {
  size_t n = strlen(name);
  char *out = arena_alloc(a, 2 * n + 1), *q = out;
  for (const char *p = name; *p; p++) {
    if (strchr("\\*?[,", *p)) *q++ = '\\';
    *q++ = *p;
  }
  *q = 0;
  return out;
}

bool pass_name_matches(const char *const *patterns, int n, const char *name) {
  for (int k = 0; k < n; k++)
    if (fnmatch(patterns[k], name, 0) == 0) return true;
  return false;
}

Value *pass_new_const(Graph *g, Node *before, double value, const TensorType *t, SrcLoc loc) {
  Node *n = ir_node_new(g, OP_CONST, 0, NULL, loc);
  ir_set_float(g, n, "value", value);
  ir_declare(n, t);
  ir_insert_before(g, before, n);
  return &n->out[0];
}

bool pass_is_const(const Value *v, double *value) {
  if (v->def->op != OP_CONST) return false;
  /* What the interpreter stores: the attribute rounded to the dtype. */
  uint64_t buf = 0;
  Tensor t = {.type = {.dtype = v->type.dtype, .rank = 0}, .data = &buf};
  ir_tensor_set(&t, 0, ir_attr_float(v->def, "value"));
  *value = ir_tensor_get(&t, 0);
  return true;
}

/* ---- constant subgraphs ---- */

enum { CONST_MAX_NODES = 64 };

typedef struct ConstCopy {
  Graph *t;
  int64_t max_elems;
  int n;
  const Node *from[CONST_MAX_NODES];
  Node *to[CONST_MAX_NODES];
} ConstCopy;

/* v's definition copied into cc->t (each node once), or NULL when it
 * reads an input or a param, or an op that is not plain arithmetic on
 * its operands (a reduction's order, dropout's randomness). */
static Value *copy_const(ConstCopy *cc, const Value *v) {
  const Node *n = v->def;
  for (int i = 0; i < cc->n; i++)
    if (cc->from[i] == n) return &cc->to[i]->out[v - n->out];
  OpClass cls = ir_ops[n->op].cls;
  bool source = n->op == OP_CONST || n->op == OP_IOTA;
  if (cc->n == CONST_MAX_NODES || (!source && cls != K_ELEMWISE && cls != K_MOVE)) return NULL;
  for (int i = 0; i < n->n_out; i++)
    if (ir_type_numel(&n->out[i].type) < 0 || ir_type_numel(&n->out[i].type) > cc->max_elems) return NULL;
  Value **in = ARENA_ARRAY(&cc->t->ctx->arena, Value *, n->n_in > 0 ? n->n_in : 1);
  for (int i = 0; i < n->n_in; i++)
    if (!(in[i] = copy_const(cc, n->in[i]))) return NULL;
  Node *c = ir_node_new(cc->t, n->op, n->n_in, in, n->loc);
  c->n_attrs = n->n_attrs;
  c->attrs = n->attrs; /* read only, as long as the copy lives */
  char err[256];
  if (ir_ops[n->op].shape) {
    if (!ir_infer(c, err, sizeof err)) return NULL;
  } else {
    ir_declare(c, &n->out[0].type);
  }
  ir_append(cc->t, c);
  cc->from[cc->n] = n;
  cc->to[cc->n++] = c;
  return &c->out[v - n->out];
}

bool pass_eval_const(Graph *g, const Value *v, int64_t max_elems, Tensor *out) {
  ConstCopy cc = {.t = ir_graph_new(g->ctx, "const"), .max_elems = max_elems};
  Value *c = copy_const(&cc, v);
  if (!c) return false;
  const char *name = "v";
  ir_set_outputs(cc.t, 1, &c, &name);
  char err[256];
  return ir_eval(cc.t, NULL, NULL, out, err, sizeof err);
}
