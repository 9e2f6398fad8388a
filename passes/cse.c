/* Common subexpression elimination: takes a graph, merges every node into
 * an earlier one with the same op, operands, attributes and result types
 * (consts with the same value and type included; inputs and params are
 * distinct by name).  One forward walk with a hash table: linear. */
#include <string.h>

#include "passes/pass.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static uint64_t attr_hash(const Attr *a) {
  uint64_t h = (uint64_t)a->kind;
  for (const char *p = a->name; *p; p++) h = mix(h, (uint64_t)(unsigned char)*p);
  switch (a->kind) {
    case AK_INT: return mix(h, (uint64_t)a->i);
    case AK_FLOAT: return mix(h, double_bits(a->f));
    case AK_DTYPE: return mix(h, (uint64_t)a->dt);
    case AK_STR:
      for (const char *p = a->s; *p; p++) h = mix(h, (uint64_t)(unsigned char)*p);
      return h;
    case AK_INTS:
      for (int i = 0; i < a->ints.n; i++) h = mix(h, (uint64_t)a->ints.v[i]);
      return mix(h, (uint64_t)a->ints.n);
  }
  return h;
}

static bool attr_eq(const Attr *a, const Attr *b) {
  if (a->kind != b->kind || strcmp(a->name, b->name) != 0) return false;
  switch (a->kind) {
    case AK_INT: return a->i == b->i;
    case AK_FLOAT: return double_bits(a->f) == double_bits(b->f); /* NaN merges, -0 and 0 do not */
    case AK_DTYPE: return a->dt == b->dt;
    case AK_STR: return strcmp(a->s, b->s) == 0;
    case AK_INTS:
      return a->ints.n == b->ints.n &&
             (a->ints.n == 0 || memcmp(a->ints.v, b->ints.v, sizeof(int64_t) * (size_t)a->ints.n) == 0);
  }
  return false;
}

static uint64_t node_hash(const Node *n) {
  uint64_t h = mix((uint64_t)n->op, (uint64_t)n->n_in);
  for (int i = 0; i < n->n_in; i++) h = mix(h, (uint64_t)(uintptr_t)n->in[i]);
  for (int i = 0; i < n->n_attrs; i++) h = mix(h, attr_hash(&n->attrs[i]));
  for (int i = 0; i < n->n_out; i++) {
    const TensorType *t = &n->out[i].type;
    h = mix(h, (uint64_t)t->dtype * 16 + (uint64_t)t->rank);
    for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->dims[d]);
  }
  return h;
}

static bool node_eq(const Node *a, const Node *b) {
  if (a->op != b->op || a->n_in != b->n_in || a->n_attrs != b->n_attrs || a->n_out != b->n_out)
    return false;
  for (int i = 0; i < a->n_in; i++)
    if (a->in[i] != b->in[i]) return false;
  for (int i = 0; i < a->n_attrs; i++)
    if (!attr_eq(&a->attrs[i], &b->attrs[i])) return false;
  for (int i = 0; i < a->n_out; i++)
    if (!ir_type_eq(&a->out[i].type, &b->out[i].type)) return false;
  return true;
}

bool pass_cse(Graph *g, PassCtx *pc) {
  Arena *a = &g->ctx->arena;
  size_t cap = 64;
  while (cap < (size_t)g->n_nodes * 2) cap *= 2;
  Node **table = ARENA_ARRAY(a, Node *, cap);
  uint64_t *hashes = ARENA_ARRAY(a, uint64_t, cap);
  PassRewrite *rw = pass_rewrite_new(g);
  int merged = 0;
  for (Node *n = g->first, *next; n; n = next) {
    next = n->next;
    pass_rewrite_operands(rw, n);
    if (n->op == OP_INPUT || n->op == OP_PARAM) continue;
    uint64_t h = node_hash(n);
    size_t i = (size_t)h & (cap - 1);
    while (table[i] && !(hashes[i] == h && node_eq(table[i], n))) i = (i + 1) & (cap - 1);
    if (!table[i]) {
      /* n_nodes only shrinks during the walk, so the table cannot fill. */
      table[i] = n;
      hashes[i] = h;
      continue;
    }
    for (int k = 0; k < n->n_out; k++) pass_rewrite_replace(rw, &n->out[k], &table[i]->out[k]);
    ir_remove(g, n);
    merged++;
  }
  pass_rewrite_finish(rw);
  if (merged) pass_stat(pc, "cse: nodes merged", merged);
  return merged > 0;
}
