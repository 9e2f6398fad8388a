/* The importer's builders: takes the importer's state and values, returns
 * new values.  Names live in a hash table; a value known at import is
 * host data, and each IR node whose operands are all known is evaluated at
 * once by the reference interpreter instead of entering the graph.  Also
 * node attributes and operands with their checks. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- the importer ---- */

static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* The innermost scope's entry of that name. */
Entry *ox_find_entry(Imp *im, const char *name) {
  if (!im->n_buckets) return NULL;
  Entry *found = NULL;
  for (Entry *e = im->buckets[hash_str(name) & (im->n_buckets - 1)]; e; e = e->next)
    if (strcmp(e->name, name) == 0 && (!found || e->scope > found->scope)) found = e;
  return found;
}

static void link_entry(Imp *im, Entry *e) {
  uint32_t b = hash_str(e->name) & (im->n_buckets - 1);
  e->next = im->buckets[b];
  im->buckets[b] = e;
}

/* Twice the buckets, relinked: chains stay short at every size. */
static void rehash(Imp *im) {
  uint32_t old = im->n_buckets;
  Entry **was = im->buckets;
  im->n_buckets = old ? old * 2 : 1024;
  im->buckets = ARENA_ARRAY(&im->c->arena, Entry *, im->n_buckets);
  for (uint32_t i = 0; i < old; i++)
    for (Entry *e = was[i], *next; e; e = next) {
      next = e->next;
      link_entry(im, e);
    }
}

Entry *ox_add_entry(Imp *im, const char *name, int producer) {
  if (im->n_entries >= im->n_buckets) rehash(im);
  Entry *e = ARENA_NEW(&im->c->arena, Entry);
  e->name = arena_strdup(&im->c->arena, name);
  e->producer = producer;
  e->scope = im->scope;
  link_entry(im, e); /* at the chain's head: it shadows an outer name */
  im->n_entries++;
  if (im->scope) {
    if (im->n_scoped == im->cap_scoped) {
      int cap = im->cap_scoped ? 2 * im->cap_scoped : 256;
      Entry **bigger = ARENA_ARRAY(&im->c->arena, Entry *, cap);
      if (im->n_scoped) memcpy(bigger, im->scoped, sizeof *bigger * (size_t)im->n_scoped);
      im->scoped = bigger, im->cap_scoped = cap;
    }
    im->scoped[im->n_scoped++] = e;
  }
  return e;
}

int ox_scope_begin(Imp *im) {
  im->scope++;
  return im->n_scoped;
}

void ox_scope_end(Imp *im, int mark) {
  while (im->n_scoped > mark) {
    Entry *e = im->scoped[--im->n_scoped];
    for (Entry **p = &im->buckets[hash_str(e->name) & (im->n_buckets - 1)]; *p; p = &(*p)->next)
      if (*p == e) {
        *p = e->next;
        im->n_entries--;
        break;
      }
  }
  im->scope--;
}

void ox_node_str(const Imp *im, char *buf, size_t len) {
  const Onnx__NodeProto *np = im->np;
  if (!np) {
    snprintf(buf, len, "%s", im->file);
    return;
  }
  const char *name = np->name && *np->name ? np->name : NULL;
  snprintf(buf, len, "%s: node %d%s%s%s (%s)", im->file, im->node_index, name ? " '" : "", name ? name : "",
           name ? "'" : "", np->op_type ? np->op_type : "?");
}

__attribute__((format(printf, 2, 3))) bool ox_bad(Imp *im, const char *fmt, ...) {
  char msg[1024], where[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ox_node_str(im, where, sizeof where);
  diag_error(im->c, (SrcLoc){0}, "%s: %s", where, msg);
  return false;
}

_Noreturn void ox_oom(Imp *im, const char *what) {
  ox_bad(im, "out of memory for %s", what);
  if (!im->unwind) dl_internal(im->c, "out of memory outside the import's guard");
  longjmp(*im->unwind, 1);
}

static void *grow(Imp *im, void *p, int *cap, size_t elem) {
  int n = *cap ? *cap * 2 : 64;
  void *q = realloc(p, (size_t)n * elem);
  if (!q) ox_oom(im, "the importer's tables");
  *cap = n;
  return q;
}

/* Takes ownership of the data of ts[0..n) into out[0..n).  Every one is
 * owned (freed with the import) or freed before an allocation failure
 * unwinds: none leaks. */
static void own_all(Imp *im, int n, Tensor *ts, Tensor **out) {
  bool ok = true;
  if (im->n_owned + n > im->cap_owned) {
    int cap = im->cap_owned ? im->cap_owned : 64;
    while (cap < im->n_owned + n) cap *= 2;
    Tensor **q = realloc(im->owned, (size_t)cap * sizeof *q);
    if (q)
      im->owned = q, im->cap_owned = cap;
    else
      ok = false;
  }
  for (int i = 0; i < n; i++) {
    out[i] = ok ? malloc(sizeof **out) : NULL;
    if (out[i]) {
      *out[i] = ts[i];
      im->owned[im->n_owned++] = out[i];
    } else {
      ir_tensor_free(&ts[i]);
      ok = false;
    }
  }
  if (!ok) ox_oom(im, "the importer's tables");
}

static Val *new_val(Imp *im, const TensorType *t) {
  Val *v = ARENA_NEW(&im->c->arena, Val);
  v->type = *t;
  return v;
}

static Val *known_val(Imp *im, Tensor *k) {
  Val *v = new_val(im, &k->type);
  v->k = k;
  return v;
}

Val *ox_known(Imp *im, Tensor t) {
  Tensor *k;
  own_all(im, 1, &t, &k);
  return known_val(im, k);
}

/* A fresh known tensor of type t for the caller to fill. */
Val *ox_known_new(Imp *im, const TensorType *t) {
  Tensor d;
  if (!ir_tensor_alloc(&d, t)) {
    char ts[IR_TYPE_STR_MAX], what[IR_TYPE_STR_MAX + 64];
    snprintf(what, sizeof what, "a tensor of %s (%zu bytes)", ir_type_str(t, ts, sizeof ts),
             ir_tensor_nbytes(t));
    ox_oom(im, what);
  }
  return ox_known(im, d);
}

bool ox_is_empty(const Val *v) { return v && ir_type_numel(&v->type) == 0; }

Val *ox_scalar(Imp *im, double x, DType dt) {
  TensorType t = {.dtype = dt, .rank = 0};
  Val *v = ox_known_new(im, &t);
  ir_tensor_set(v->k, 0, x);
  return v;
}

Val *ox_ints_val(Imp *im, int n, const int64_t *x) {
  int64_t dim = n;
  TensorType t = ir_type_make(TY_I64, 1, &dim);
  Val *v = ox_known_new(im, &t);
  if (n > 0) memcpy(v->k->data, x, sizeof(int64_t) * (size_t)n);
  return v;
}

static bool is_splat(const Tensor *t, double *value) {
  int64_t n = ir_type_numel(&t->type);
  *value = 0;
  if (n == 0) return true; /* an empty const: no data */
  double first = ir_tensor_get(t, 0);
  if (isnan(first) || (!ir_dtype_is_float(t->type.dtype) && fabs(first) > 9007199254740992.0))
    return false;
  for (int64_t i = 1; i < n; i++)
    if (ir_tensor_get(t, i) != first) return false;
  *value = first;
  return true;
}

static bool same_element(double a, double b) { return a == b && signbit(a) == signbit(b); }

/* A known [.., R, C] tensor holding one value where j - i <= k and
 * another where j - i > k, the same under every leading index (a causal
 * mask folded at import: Trilu of ones, a slice of GPT-2's tril buffer,
 * Llama's finfo.min above the diagonal): built in the graph as
 * where(j - k > i, above, below) from two iotas, so that the attention
 * pass sees what it is (docs/attention.md) and no weight holds it.
 * NULL for any other tensor. */
static Value *triangle(Imp *im, const Val *v) {
  const Tensor *t = v->k;
  int r = t->type.rank;
  if (r < 2) return NULL;
  int64_t R = t->type.dims[r - 2], C = t->type.dims[r - 1], n = ir_type_numel(&t->type);
  /* A row or a column has no mask to see; an empty tensor (a leading dim
   * of 0) has no elements to read. */
  if (R < 2 || C < 2 || n < R * C) return NULL;
  double below = ir_tensor_get(t, (R - 1) * C), above = ir_tensor_get(t, C - 1);
  if (isnan(below) || isnan(above) || same_element(below, above)) return NULL;
  int64_t k = INT64_MIN, first_above = INT64_MAX; /* the last j - i below, the first above */
  for (int64_t e = 0; e < n; e++) {
    double x = ir_tensor_get(t, e);
    int64_t d = e % C - e / C % R;
    if (same_element(x, below)) k = d > k ? d : k;
    else if (same_element(x, above)) first_above = d < first_above ? d : first_above;
    else return NULL;
  }
  if (k >= first_above) return NULL;
  Emit e;
  Val *iota[2];
  for (int axis = 0; axis < 2; axis++) {
    int64_t dims[2] = {axis ? 1 : R, axis ? C : 1};
    Node *it = ox_begin(im, &e, OP_IOTA, 0, NULL);
    ir_set_ints(im->g, it, "shape", 2, dims);
    ir_set_dtype(im->g, it, "dtype", TY_I64);
    ir_set_int(im->g, it, "axis", axis);
    ir_set_float(im->g, it, "start", axis ? (double)-k : 0);
    ir_set_float(im->g, it, "step", 1);
    iota[axis] = ox_emit1(im, &e);
  }
  DType dt = t->type.dtype;
  Val *y = ox_where(im, ox_op2(im, OP_GREATER, iota[1], iota[0]), ox_scalar(im, above, dt), ox_scalar(im, below, dt));
  bool leading_ones = true;
  for (int i = 0; i < r - 2; i++) leading_ones &= t->type.dims[i] == 1;
  y = leading_ones ? ox_reshape(im, y, r, t->type.dims) : ox_expand(im, y, r, t->type.dims);
  return y ? ox_use(im, y) : NULL;
}

/* Whether v is an initializer: a weight, which a weights file may
 * replace, so its data stays a param whatever it holds. */
bool ox_is_initializer(Imp *im, const Val *v) {
  const Entry *e = v->name ? ox_find_entry(im, v->name) : NULL;
  return e && e->val == v && e->producer < 0;
}

/* Whether name is a module's parameter path as PyTorch's state_dict
 * spells it ("fc.bias", "layers.0.norm.weight"): identifiers and indices
 * joined by dots. */
bool ox_module_path(const char *name) {
  bool dot = false, start = true;
  for (const char *p = name; *p; p++) {
    if (*p == '.') {
      if (start) return false;
      dot = start = true;
    } else if (isalnum((unsigned char)*p) || *p == '_') {
      start = false;
    } else {
      return false;
    }
  }
  return dot && !start;
}

/* Whether t holds a value no trained weight does: an infinity, a NaN,
 * or one of 1e30 or more (finfo.min): a mask's fill. */
static bool holds_mask_fill(const Tensor *t) {
  int64_t n = ir_type_numel(&t->type);
  for (int64_t i = 0; i < n; i++) {
    double x = ir_tensor_get(t, i);
    if (!isfinite(x) || fabs(x) >= 1e30) return true;
  }
  return false;
}

bool ox_is_weight(Imp *im, const Val *v) {
  if (!ox_is_initializer(im, v) || !ir_dtype_is_float(v->type.dtype)) return false;
  /* An initializer of one value is a constant an exporter kept (the
   * dynamo exporter's scale of attention's q and k, "val_70"; an epsilon)
   * unless a module's path names it (a Linear(n, 1)'s "head.bias"); one
   * that holds a mask's fill is a mask (Llama's finfo.min that Trilu
   * makes causal), which the attention pass must see as one. */
  if (ir_type_numel(&v->type) == 1 && !ox_module_path(v->name)) return false;
  return !v->k || !holds_mask_fill(v->k);
}

/* The value in the graph, made on first use: a known value becomes a
 * splat const or a triangle computed from iotas (unless a weight: it
 * stays a param that a weights file may replace and training changes,
 * whatever it holds now, as a batchnorm's weight of ones), or a param
 * holding its data. */
Value *ox_use(Imp *im, Val *v) {
  if (v->v) return v->v;
  if (!v->k) dl_internal(im->c, "ONNX value without a definition");
  double splat;
  bool weight = ox_is_weight(im, v);
  if (!weight && (v->v = triangle(im, v))) return v->v;
  if (!weight && is_splat(v->k, &splat)) {
    Node *n = ir_node_new(im->g, OP_CONST, 0, NULL, im->loc);
    ir_set_float(im->g, n, "value", splat);
    ir_declare(n, &v->type);
    ir_append(im->g, n);
    return v->v = &n->out[0];
  }
  const char *name = v->name;
  if (!name) {
    const char *base = im->np && im->np->n_output && im->np->output[0] && *im->np->output[0]
                           ? im->np->output[0]
                           : "const";
    name = arena_printf(&im->c->arena, "%s.%d", base, im->n_temps++);
  }
  /* Param names are one namespace: a temporary may not take an ONNX name. */
  while (ox_find_entry(im, name) && ox_find_entry(im, name)->val != v)
    name = arena_printf(&im->c->arena, "%s.%d", name, im->n_temps++);
  if (!v->name) ox_add_entry(im, name, -1)->val = v;
  Node *n = ir_source(im->g, OP_PARAM, &v->type, name, im->loc);
  /* Only a weight trains: PyTorch has no gradient for a buffer or a
   * constant of the forward either (a mask's fill, an index table). */
  if (!weight) ir_set_int(im->g, n, "frozen", 1);
  if (!ox_is_initializer(im, v)) ir_set_int(im->g, n, "derived", 1);
  if (im->n_params == im->cap_params)
    im->params = grow(im, im->params, &im->cap_params, sizeof *im->params);
  im->params[im->n_params++] = v;
  v->name = name;
  return v->v = &n->out[0];
}

/* A state param is frozen (no gradient) and derived (no state_dict key:
 * api/train.c writes it to the checkpoint under its dlcc. name). */
Value *ox_state_param(Imp *im, int slot, const char *name) {
  if (im->rng_state[slot]) return im->rng_state[slot];
  if (ox_find_entry(im, name)) {
    ox_bad(im, "the model has a value named '%s', the name of dlcc's dropout state", name);
    return NULL;
  }
  TensorType t = {.dtype = TY_I64, .rank = 0};
  Val *v = ox_known_new(im, &t);
  v->name = name;
  Node *n = ir_source(im->g, OP_PARAM, &t, name, im->loc);
  ir_set_int(im->g, n, "frozen", 1);
  ir_set_int(im->g, n, "derived", 1);
  if (im->n_params == im->cap_params)
    im->params = grow(im, im->params, &im->cap_params, sizeof *im->params);
  im->params[im->n_params++] = v;
  return im->rng_state[slot] = v->v = &n->out[0];
}

Val *ox_val_of(Imp *im, Value *x) {
  Val *v = new_val(im, &x->type);
  v->v = x;
  return v;
}

/* ---- building nodes, folded when every operand is known ---- */

static void copy_attrs(Graph *g, Node *to, const Node *from) {
  for (int a = 0; a < from->n_attrs; a++) {
    const Attr *at = &from->attrs[a];
    switch (at->kind) {
      case AK_INT: ir_set_int(g, to, at->name, at->i); break;
      case AK_FLOAT: ir_set_float(g, to, at->name, at->f); break;
      case AK_INTS: ir_set_ints(g, to, at->name, at->ints.n, at->ints.v); break;
      case AK_STR: ir_set_str(g, to, at->name, at->s); break;
      case AK_DTYPE: ir_set_dtype(g, to, at->name, at->dt); break;
    }
  }
}

/* n, the last node of fold (whose params are its operands in order),
 * evaluated on in's known values (or hints): its results, owned. */
typedef enum { FOLD_KNOWN, FOLD_UPPER, FOLD_PROBE } FoldOf;

static const Tensor *fold_value(const Val *v, FoldOf of) {
  if (v->k) return v->k;
  return of == FOLD_UPPER ? v->upper : of == FOLD_PROBE ? v->probe : v->hint;
}

static bool eval_folded_of(Imp *im, Graph *fold, Node *n, Val *const *in, FoldOf of, Tensor **ks, char *err,
                           size_t len) {
  Value *outs[8];
  const char *names[8];
  const char **pnames = ARENA_ARRAY(&im->c->arena, const char *, n->n_in > 0 ? n->n_in : 1);
  Tensor *pt = ARENA_ARRAY(&im->c->arena, Tensor, n->n_in > 0 ? n->n_in : 1);
  if (n->n_out > 8) dl_internal(im->c, "too many results to fold");
  for (int i = 0; i < n->n_out; i++) outs[i] = &n->out[i], names[i] = "r";
  ir_set_outputs(fold, n->n_out, outs, names);
  for (int i = 0; i < n->n_in; i++) {
    pnames[i] = ir_attr_str(n->in[i]->def, "name");
    pt[i] = *fold_value(in[i], of);
  }
  TensorMap pm = {n->n_in, pnames, pt};
  Tensor res[8];
  if (!ir_eval(fold, NULL, &pm, res, err, len)) return false;
  own_all(im, n->n_out, res, ks);
  return true;
}

static bool eval_folded(Imp *im, Graph *fold, Node *n, Val *const *in, Tensor **ks, char *err, size_t len) {
  return eval_folded_of(im, fold, n, in, FOLD_KNOWN, ks, err, len);
}

/* Hints are the values OnnxOptions.known gives graph inputs (the node
 * tests pass a Reshape's shape or a window's size as inputs).  A small
 * run-time node whose operands all have values at import, the hinted
 * ones integer inputs or computed from those, gets its results' values
 * as hints too, so that a shape computed from a given size (an expanded
 * test's Range limit, Pad's pads) is as known as the size itself.  A
 * float input's data does not flow: a value computed from it (a
 * quantization scale from ReduceMax(x)) is the data's, not a shape's,
 * and stays a run-time value.  The node stays in the graph; a failure
 * to evaluate it only leaves the hints out. */
#define HINT_MAX_ELEMS 4096
static void propagate_hints(Imp *im, const Emit *e, Val **out) {
  const Node *n = e->n;
  bool any_hint = false, any_upper = false;
  for (int i = 0; i < e->n_in; i++) {
    const Val *v = e->in[i];
    if (v->k) continue;
    if (ir_type_numel(&v->type) > HINT_MAX_ELEMS) return;
    any_hint |= v->hint && v->hint_flows;
    any_upper |= v->upper != NULL;
    if (!(v->hint && v->hint_flows) && !v->upper) return;
  }
  for (int i = 0; i < n->n_out; i++)
    if (ir_type_numel(&n->out[i].type) > HINT_MAX_ELEMS) return;
  if ((!any_hint && !any_upper) || (any_hint && any_upper) || n->n_out > 8) return;
  Graph *fold = ir_graph_new(im->c, "hint");
  Value **ops = ARENA_ARRAY(&im->c->arena, Value *, e->n_in > 0 ? e->n_in : 1);
  for (int i = 0; i < e->n_in; i++)
    ops[i] = &ir_source(fold, OP_PARAM, &e->in[i]->type, arena_printf(&im->c->arena, "k%d", i), im->loc)->out[0];
  Node *copy = ir_node_new(fold, n->op, e->n_in, ops, im->loc);
  copy_attrs(fold, copy, n);
  char err[256];
  Tensor *ks[8];
  if (!ir_infer(copy, err, sizeof err)) return;
  ir_append(fold, copy);
  if (any_upper) {
    /* Upper bounds: the node at the lengths' bounds and at 0. */
    Tensor *lo[8];
    if (!eval_folded_of(im, fold, copy, e->in, FOLD_UPPER, ks, err, sizeof err) ||
        !eval_folded_of(im, fold, copy, e->in, FOLD_PROBE, lo, err, sizeof err))
      return;
    for (int i = 0; i < n->n_out; i++) out[i]->upper = ks[i], out[i]->probe = lo[i];
    return;
  }
  if (!eval_folded(im, fold, copy, e->in, ks, err, sizeof err)) return;
  for (int i = 0; i < n->n_out; i++) out[i]->hint = ks[i], out[i]->hint_flows = true;
}

static Node *begin_in(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in, bool may_fold) {
  bool all_known = may_fold && n_in > 0;
  int64_t total = 0;
  for (int i = 0; i < n_in; i++) {
    /* A weight (a float initializer, ox_is_weight): what is computed from it stays in
     * the graph (the init steps compute it once a load), so that the
     * weight keeps its name for a weights file, training's gradient and
     * the checkpoint PyTorch loads (a Linear's weight transposed for its
     * MatMul would otherwise become a new weight of another name). */
    if (!in[i]->k || ox_is_weight(im, in[i])) all_known = false;
    else total += ir_type_numel(&in[i]->type);
  }
  e->fold = all_known && total <= im->fold_max ? ir_graph_new(im->c, "fold") : NULL;
  e->n_in = n_in;
  e->in = ARENA_ARRAY(&im->c->arena, Val *, n_in > 0 ? n_in : 1);
  Value **ops = ARENA_ARRAY(&im->c->arena, Value *, n_in > 0 ? n_in : 1);
  for (int i = 0; i < n_in; i++) {
    e->in[i] = in[i];
    if (e->fold) {
      const char *name = arena_printf(&im->c->arena, "k%d", i);
      ops[i] = &ir_source(e->fold, OP_PARAM, &in[i]->type, name, im->loc)->out[0];
    } else {
      ops[i] = ox_use(im, in[i]);
    }
  }
  e->n = ir_node_new(e->fold ? e->fold : im->g, op, n_in, ops, im->loc);
  return e->n;
}

Node *ox_begin(Imp *im, Emit *e, OpKind op, int n_in, Val *const *in) {
  return begin_in(im, e, op, n_in, in, true);
}

/* Results into out[0..n_out). */
bool ox_finish(Imp *im, Emit *e, Val **out) {
  char err[1024];
  Node *n = e->n;
  if (!ir_fill_defaults(im->g, n, err, sizeof err) || !ir_infer(n, err, sizeof err))
    return ox_bad(im, "%s", err);
  bool all_empty = true;
  for (int i = 0; i < n->n_out; i++) all_empty &= ir_type_numel(&n->out[i].type) == 0;
  if (!e->fold && all_empty) {
    /* Nothing to compute: known results without data, whatever the operands. */
    for (int i = 0; i < n->n_out; i++) out[i] = ox_known_new(im, &n->out[i].type);
    return true;
  }
  if (!e->fold) {
    if (im->g->n_nodes >= im->max_nodes)
      return ox_bad(im, "model too large: more than %d operations in the imported graph", im->max_nodes);
    n->guard = im->guard;
    ir_append(im->g, n);
    for (int i = 0; i < n->n_out; i++) out[i] = ox_val_of(im, &n->out[i]);
    propagate_hints(im, e, out);
    return true;
  }
  for (int i = 0; i < n->n_out; i++)
    if (ir_type_numel(&n->out[i].type) > im->fold_max) {
      /* Too large to fold after all: rebuild it in the graph. */
      Emit e2;
      begin_in(im, &e2, n->op, e->n_in, e->in, false);
      copy_attrs(im->g, e2.n, n);
      return ox_finish(im, &e2, out);
    }
  ir_append(e->fold, n);
  Tensor *ks[8];
  if (!eval_folded(im, e->fold, n, e->in, ks, err, sizeof err))
    return ox_bad(im, "evaluating %s on constant operands: %s", ir_ops[n->op].name, err);
  for (int i = 0; i < n->n_out; i++) out[i] = known_val(im, ks[i]);
  return true;
}

Val *ox_emit1(Imp *im, Emit *e) {
  Val *out[8];
  return ox_finish(im, e, out) ? out[0] : NULL;
}

Val *ox_op1(Imp *im, OpKind op, Val *x) {
  if (!x) return NULL;
  Emit e;
  ox_begin(im, &e, op, 1, &x);
  return ox_emit1(im, &e);
}

Val *ox_op2(Imp *im, OpKind op, Val *a, Val *b) {
  if (!a || !b) return NULL;
  Val *in[2] = {a, b};
  Emit e;
  ox_begin(im, &e, op, 2, in);
  return ox_emit1(im, &e);
}

Val *ox_op2s(Imp *im, OpKind op, Val *a, double s) {
  return a ? ox_op2(im, op, a, ox_scalar(im, s, a->type.dtype)) : NULL;
}

Val *ox_op1f(Imp *im, OpKind op, Val *x, const char *attr, double v) {
  if (!x) return NULL;
  Emit e;
  Node *n = ox_begin(im, &e, op, 1, &x);
  ir_set_float(im->g, n, attr, v);
  return ox_emit1(im, &e);
}

bool ox_same_dims(const TensorType *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return false;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return false;
  return true;
}

/* x as dims by op (reshape or expand, both with a "shape"), x itself
 * when it has them. */
static Val *to_shape(Imp *im, OpKind op, Val *x, int rank, const int64_t *dims) {
  if (!x) return NULL;
  if (ox_same_dims(&x->type, rank, dims)) return x;
  Emit e;
  Node *n = ox_begin(im, &e, op, 1, &x);
  ir_set_ints(im->g, n, "shape", rank, dims);
  return ox_emit1(im, &e);
}

Val *ox_reshape(Imp *im, Val *x, int rank, const int64_t *dims) { return to_shape(im, OP_RESHAPE, x, rank, dims); }

Val *ox_expand(Imp *im, Val *x, int rank, const int64_t *dims) { return to_shape(im, OP_EXPAND, x, rank, dims); }

Val *ox_transpose(Imp *im, Val *x, const int64_t *perm) {
  if (!x) return NULL;
  bool identity = true;
  for (int i = 0; i < x->type.rank; i++) identity &= perm[i] == i;
  if (identity) return x;
  Emit e;
  Node *n = ox_begin(im, &e, OP_TRANSPOSE, 1, &x);
  ir_set_ints(im->g, n, "perm", x->type.rank, perm);
  return ox_emit1(im, &e);
}

Val *ox_cast(Imp *im, Val *x, DType dt) {
  if (!x || x->type.dtype == dt) return x;
  Emit e;
  Node *n = ox_begin(im, &e, OP_CAST, 1, &x);
  ir_set_dtype(im->g, n, "to", dt);
  return ox_emit1(im, &e);
}

/* f16 and bf16 widened to f32 (other dtypes as they are): an ONNX op
 * that dlcc writes as several ops computes in f32 and is narrowed once
 * at the end (ox_narrow), as the op itself rounds once; each IR op
 * rounding in the half type would lose the difference of exp(x) - 1. */
Val *ox_widen(Imp *im, Val *x) {
  if (!x || (x->type.dtype != TY_F16 && x->type.dtype != TY_BF16)) return x;
  return ox_cast(im, x, TY_F32);
}

Val *ox_narrow(Imp *im, Val *y, DType dt) { return ox_cast(im, y, dt); }

/* x[start:end:step] along one axis (0 <= start < end <= dim, step >= 1). */
Val *ox_slice_axis(Imp *im, Val *x, int axis, int64_t start, int64_t end, int64_t step) {
  if (!x) return NULL;
  int r = x->type.rank;
  if (start == 0 && end == x->type.dims[axis] && step == 1) return x;
  int64_t s[DL_MAX_RANK], en[DL_MAX_RANK], st[DL_MAX_RANK];
  for (int d = 0; d < r; d++) s[d] = 0, en[d] = x->type.dims[d], st[d] = 1;
  s[axis] = start, en[axis] = end, st[axis] = step;
  Emit e;
  Node *n = ox_begin(im, &e, OP_SLICE, 1, &x);
  ir_set_ints(im->g, n, "starts", r, s);
  ir_set_ints(im->g, n, "ends", r, en);
  ir_set_ints(im->g, n, "steps", r, st);
  return ox_emit1(im, &e);
}

Val *ox_concat(Imp *im, int n_in, Val **in, int axis) {
  for (int i = 0; i < n_in; i++)
    if (!in[i]) return NULL;
  if (n_in == 1) return in[0];
  Emit e;
  Node *n = ox_begin(im, &e, OP_CONCAT, n_in, in);
  ir_set_int(im->g, n, "axis", axis);
  return ox_emit1(im, &e);
}

Val *ox_reduce(Imp *im, OpKind op, Val *x, int n_axes, const int64_t *axes, bool keep) {
  if (!x) return NULL;
  Emit e;
  Node *n = ox_begin(im, &e, op, 1, &x);
  ir_set_ints(im->g, n, "axes", n_axes, axes);
  ir_set_int(im->g, n, "keepdims", keep);
  return ox_emit1(im, &e);
}

Val *ox_argmax(Imp *im, Val *x, int axis, bool keep) {
  if (!x) return NULL;
  Emit e;
  Node *n = ox_begin(im, &e, OP_ARGMAX, 1, &x);
  ir_set_int(im->g, n, "axis", axis);
  ir_set_int(im->g, n, "keepdims", keep);
  return ox_cast(im, ox_emit1(im, &e), TY_I64);
}

Val *ox_gather(Imp *im, Val *data, Val *idx, int axis) {
  if (!data || !idx) return NULL;
  Val *in[2] = {data, idx};
  Emit e;
  Node *n = ox_begin(im, &e, OP_GATHER, 2, in);
  ir_set_int(im->g, n, "axis", axis);
  return ox_emit1(im, &e);
}

/* x reversed along axis: a gather of dim-1 .. 0. */
Val *ox_reverse_axis(Imp *im, Val *x, int axis) {
  if (!x) return NULL;
  int64_t T = x->type.dims[axis];
  if (T > im->fold_max) {
    ox_bad(im, "reversing an axis of %" PRId64 " elements is not supported", T);
    return NULL;
  }
  TensorType it = ir_type_make(TY_I64, 1, &T);
  Val *idx = ox_known_new(im, &it);
  for (int64_t i = 0; i < T; i++) ((int64_t *)idx->k->data)[i] = T - 1 - i;
  return ox_gather(im, x, idx, axis);
}

/* 0, 1, .., len-1 along axis of a rank-r i64 tensor (1 in the other dims). */
Val *ox_iota_along(Imp *im, int r, int axis, int64_t len) {
  /* A length from a model's attribute or initializer must not become a
   * table of any size. */
  if (len > im->fold_max)
    return ox_bad(im, "an index of %" PRId64 " positions is more than dlcc builds at import (%" PRId64 ")", len,
                  im->fold_max),
           NULL;
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == axis ? len : 1;
  TensorType t = ir_type_make(TY_I64, r, dims);
  Val *v = ox_known_new(im, &t);
  for (int64_t i = 0; i < len; i++) ((int64_t *)v->k->data)[i] = i;
  return v;
}

/* ---- attributes ---- */

const Onnx__AttributeProto *ox_find_attr(Imp *im, const char *name) {
  const Onnx__NodeProto *np = im->np;
  for (size_t i = 0; i < np->n_attribute; i++)
    if (np->attribute[i]->name && strcmp(np->attribute[i]->name, name) == 0) {
      im->attr_used[i] = true;
      return np->attribute[i];
    }
  return NULL;
}

static bool attr_kind(Imp *im, const Onnx__AttributeProto *a, Onnx__AttributeProto__AttributeType want,
                      const char *what) {
  /* Old exporters leave type unset; then the filled field decides. */
  if (a->has_type && a->type != want)
    return ox_bad(im, "attribute '%s' must be %s", a->name, what);
  return true;
}

bool ox_attr_int(Imp *im, const char *name, int64_t def, int64_t *out) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an integer")) return false;
  *out = a->i;
  return true;
}

bool ox_attr_float(Imp *im, const char *name, double def, double *out) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float")) return false;
  *out = a->f;
  return true;
}

/* *out NULL when absent. */
bool ox_attr_str(Imp *im, const char *name, const char *def, const char **out) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *out = def;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string")) return false;
  *out = arena_strndup(&im->c->arena, (const char *)a->s.data, a->s.len);
  return true;
}

/* *n = -1 when absent. */
bool ox_attr_ints(Imp *im, const char *name, int *n, const int64_t **v) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  *n = -1;
  *v = NULL;
  if (!a) return true;
  if (!attr_kind(im, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of integers")) return false;
  if (a->n_ints > 64)
    return ox_bad(im, "attribute '%s' has %zu values, more than dlcc takes", name, a->n_ints);
  /* An empty list has no array (protobuf-c's NULL): callers copy *v. */
  static const int64_t no_ints[1];
  *n = (int)a->n_ints;
  *v = a->n_ints ? a->ints : no_ints;
  return true;
}

/* A flag attribute that dlcc supports only at one value. */
bool ox_attr_only(Imp *im, const char *name, int64_t def, int64_t allowed) {
  int64_t v;
  if (!ox_attr_int(im, name, def, &v)) return false;
  if (v != allowed)
    return ox_bad(im, "attribute %s=%" PRId64 " is not supported (only %" PRId64 ")", name, v, allowed);
  return true;
}

/* ---- operands ---- */

Val *ox_in_opt(const ONode *n, int i) { return i < n->n_in ? n->in[i] : NULL; }

Val *ox_in_req(Imp *im, const ONode *n, int i) {
  Val *v = ox_in_opt(n, i);
  if (!v) ox_bad(im, "input %d is missing", i + 1);
  return v;
}

const Tensor *ox_need_const(Imp *im, Val *v, const char *what) {
  if (v->k) return v->k;
  if (v->hint) return v->hint;
  ox_bad(im,
         "%s computed at run time is not supported: it determines a shape or the ops built, so it must "
         "be an initializer, a Constant or follow from static shapes",
         what);
  return NULL;
}

/* Up to 64 integers from a known 0-d or 1-d integer tensor. */
bool ox_const_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out) {
  const Tensor *t = ox_need_const(im, v, what);
  if (!t) return false;
  if (ir_dtype_is_float(t->type.dtype) || t->type.rank > 1)
    return ox_bad(im, "%s must be a 0-d or 1-d integer tensor", what);
  int64_t count = ir_type_numel(&t->type);
  if (count > 64) return ox_bad(im, "%s has %" PRId64 " values, more than dlcc takes", what, count);
  /* read exactly (through a double, an i64 rounds, and converting one
   * past INT64_MAX back is undefined); a u64 past it is refused */
  for (int64_t i = 0; i < count; i++) {
    if (t->type.dtype == TY_U64 && ((const uint64_t *)t->data)[i] > (uint64_t)INT64_MAX)
      return ox_bad(im, "%s holds %" PRIu64 ", more than an int64 takes", what, ((const uint64_t *)t->data)[i]);
    out[i] = ir_tensor_get_int(t, i);
  }
  *n = (int)count;
  return true;
}

bool ox_bounded_ints(Imp *im, Val *v, const char *what, int *n, int64_t *out, bool *dynamic) {
  if (v->k || v->hint || !v->upper) {
    if (!ox_const_ints(im, v, what, n, out)) return false;
    for (int i = 0; i < *n; i++) dynamic[i] = false;
    return true;
  }
  if (ir_dtype_is_float(v->type.dtype) || v->type.rank > 1)
    return ox_bad(im, "%s must be a 0-d or 1-d integer tensor", what);
  int64_t count = ir_type_numel(&v->type);
  if (count > 64) return ox_bad(im, "%s has %" PRId64 " values, more than dlcc takes", what, count);
  for (int64_t i = 0; i < count; i++) {
    out[i] = ir_tensor_get_int(v->upper, i);
    int64_t lo = ir_tensor_get_int(v->probe, i);
    /* Every element may depend on a length (two evaluations that agree,
     * as n % 300 at a bound of 300 and at 0, prove nothing): ir/bounds.c
     * drops the marks whose lengths are constants, the axis' size. */
    dynamic[i] = true;
    /* The bound must grow with the lengths: a size that shrinks as one
     * grows (300 - n) has no bound here. */
    if (lo > out[i])
      return ox_bad(im,
                    "%s computed at run time from a run-time length is not supported: its element %" PRId64
                    " shrinks as the length grows, so the length's bound does not bound it",
                    what, i);
  }
  *n = (int)count;
  return true;
}

Val *ox_with_length(Imp *im, Val *x, int axis, Val *len, int64_t elem) {
  Val *at = ox_scalar(im, (double)elem, TY_I64);
  Val *flat = ox_reshape(im, len, 1, (int64_t[]){ir_type_numel(&len->type)});
  Val *n = flat ? ox_cast(im, ox_reshape(im, ox_gather(im, flat, at, 0), 0, NULL), TY_I64) : NULL;
  if (!n || !x) return NULL;
  Emit e;
  Node *w = begin_in(im, &e, OP_WITH_LENGTH, 2, (Val *[]){x, n}, false);
  ir_set_int(im->g, w, "axis", axis);
  Val *out[1];
  if (!ox_finish(im, &e, out)) return NULL;
  out[0]->run_time_len = true;
  /* Its values past the length are padding, not bounds: what is
   * computed from them (a sum of ones) is no shape's bound. */
  out[0]->upper = out[0]->probe = NULL;
  return out[0];
}

bool ox_const_scalar(Imp *im, Val *v, const char *what, double *out) {
  const Tensor *t = ox_need_const(im, v, what);
  if (!t) return false;
  if (ir_type_numel(&t->type) != 1) return ox_bad(im, "%s must hold one value", what);
  *out = ir_tensor_get(t, 0);
  return true;
}

bool ox_norm_axis(Imp *im, int64_t a, int rank, int *out) {
  *out = 0;
  if (a < -rank || a >= rank)
    return ox_bad(im, "axis %" PRId64 " is out of range for rank %d", a, rank);
  *out = (int)(a < 0 ? a + rank : a);
  return true;
}

/* Axes normalized, sorted, without duplicates. */
bool ox_norm_axes(Imp *im, int n, const int64_t *in, int rank, int *n_out, int64_t *out) {
  bool seen[DL_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    int a;
    if (!ox_norm_axis(im, in[i], rank, &a)) return false;
    seen[a] = true;
  }
  *n_out = 0;
  for (int d = 0; d < rank; d++)
    if (seen[d]) out[(*n_out)++] = d;
  return true;
}

bool ox_need_float_in(Imp *im, Val *x) {
  if (!ir_dtype_is_float(x->type.dtype))
    return ox_bad(im, "input of dtype %s is not supported (a float type is needed)",
                  ir_dtype_name(x->type.dtype));
  return true;
}
