/* The random graph generator (randgraph.h): takes a seed, returns a graph.
 * It proposes random nodes and keeps those the shape rules accept, so
 * every graph verifies whatever the generator gets wrong about shapes. */
#include "tests/randgraph.h"

#include <stdio.h>
#include <string.h>

#include "tests/testutil.h"

typedef struct Gen {
  Graph *g;
  uint64_t rng;
  Value *pool[512];
  int n_pool;
  int n_inputs, n_params;
} Gen;

static uint64_t next(Gen *r) { return test_splitmix64(&r->rng); }

static int pick(Gen *r, int n) { return n > 0 ? (int)(next(r) % (uint64_t)n) : 0; }
static bool chance(Gen *r, int percent) { return pick(r, 100) < percent; }

static void add_pool(Gen *r, Value *v) {
  if (r->n_pool < (int)ARRAY_LEN(r->pool)) r->pool[r->n_pool++] = v;
}

/* A float value, recent ones more often. */
static Value *any(Gen *r) {
  for (int tries = 0; tries < 16; tries++) {
    int i = chance(r, 60) ? r->n_pool - 1 - pick(r, r->n_pool < 6 ? r->n_pool : 6) : pick(r, r->n_pool);
    Value *v = r->pool[i];
    if (v->type.dtype == TY_F32) return v;
  }
  return r->pool[0];
}

static Node *try_node(Gen *r, OpKind op, int n_in, Value **in, void (*attrs)(Gen *, Node *, void *),
                      void *data) {
  Node *n = ir_node_new(r->g, op, n_in, in, (SrcLoc){0});
  if (attrs) attrs(r, n, data);
  char err[256];
  if (!ir_fill_defaults(r->g, n, err, sizeof err) || !ir_infer(n, err, sizeof err)) return NULL;
  ir_append(r->g, n);
  for (int i = 0; i < n->n_out; i++) add_pool(r, &n->out[i]);
  return n;
}

static TensorType random_type(Gen *r, int rank) {
  TensorType t = {.dtype = TY_F32, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = 1 + pick(r, 5);
  return t;
}

/* A shape b broadcasts against a: a's trailing dims, some set to 1. */
static TensorType broadcast_partner(Gen *r, const TensorType *a) {
  TensorType t = *a;
  int drop = pick(r, a->rank + 1);
  t.rank = a->rank - drop;
  for (int i = 0; i < t.rank; i++) {
    t.dims[i] = a->dims[i + drop];
    if (chance(r, 30)) t.dims[i] = 1;
  }
  return t;
}

static Value *new_param(Gen *r, const TensorType *t) {
  char name[32];
  snprintf(name, sizeof name, "p%d", r->n_params++);
  return &ir_source(r->g, OP_PARAM, t, name, (SrcLoc){0})->out[0];
}

static const double const_values[] = {0, 1, -1, 2, 0.5, 3, -0.25, 1.5};

static Value *new_const(Gen *r, const TensorType *t) {
  Node *n = ir_const(r->g, const_values[pick(r, (int)ARRAY_LEN(const_values))], t->dtype, (SrcLoc){0});
  n->out[0].type = *t;
  return &n->out[0];
}

/* A second operand for a binary op over a. */
static Value *partner(Gen *r, Value *a) {
  int k = pick(r, 10);
  if (k < 3) {
    TensorType s = {.dtype = a->type.dtype, .rank = 0};
    if (chance(r, 30)) s = broadcast_partner(r, &a->type);
    return new_const(r, &s);
  }
  if (k < 5) {
    TensorType t = broadcast_partner(r, &a->type);
    return new_param(r, &t);
  }
  /* An existing value of a's type or one that broadcasts with it. */
  for (int tries = 0; tries < 8; tries++) {
    Value *b = any(r);
    if (b != a && b->type.dtype == a->type.dtype) return b;
  }
  return a;
}

/* ---- attributes ---- */

static void set_axes(Gen *r, Node *n, void *data) {
  int rank = n->in[0]->type.rank;
  int64_t axes[DL_MAX_RANK];
  int count = 0;
  for (int i = 0; i < rank; i++)
    if (chance(r, 50)) axes[count++] = i;
  if (count == 0 && rank > 0) axes[count++] = pick(r, rank);
  ir_set_ints(r->g, n, "axes", count, axes);
  ir_set_int(r->g, n, "keepdims", chance(r, 50));
}

static void set_axis(Gen *r, Node *n, void *data) {
  int rank = n->in[0]->type.rank;
  ir_set_int(r->g, n, "axis", rank ? pick(r, rank) : 0);
}

static void set_perm(Gen *r, Node *n, void *data) {
  const int64_t *want = data;
  int rank = n->in[0]->type.rank;
  int64_t perm[DL_MAX_RANK];
  if (want) {
    memcpy(perm, want, sizeof(int64_t) * (size_t)rank);
  } else {
    for (int i = 0; i < rank; i++) perm[i] = i;
    for (int i = rank - 1; i > 0; i--) {
      int j = pick(r, i + 1);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  }
  ir_set_ints(r->g, n, "perm", rank, perm);
}

static void set_shape(Gen *r, Node *n, void *data) {
  const TensorType *t = data;
  ir_set_ints(r->g, n, "shape", t->rank, t->dims);
}

static void set_slice(Gen *r, Node *n, void *data) {
  const TensorType *x = &n->in[0]->type;
  int64_t s[DL_MAX_RANK], e[DL_MAX_RANK], st[DL_MAX_RANK];
  bool full = chance(r, 30);
  for (int i = 0; i < x->rank; i++) {
    s[i] = full ? 0 : pick(r, (int)x->dims[i]);
    e[i] = full ? x->dims[i] : s[i] + 1 + pick(r, (int)(x->dims[i] - s[i]));
    st[i] = full ? 1 : 1 + pick(r, 2);
  }
  ir_set_ints(r->g, n, "starts", x->rank, s);
  ir_set_ints(r->g, n, "ends", x->rank, e);
  ir_set_ints(r->g, n, "steps", x->rank, st);
}

static void set_clip(Gen *r, Node *n, void *data) {
  ir_set_float(r->g, n, "min", -1);
  ir_set_float(r->g, n, "max", 1 + pick(r, 3));
}

static void set_cast(Gen *r, Node *n, void *data) { ir_set_dtype(r->g, n, "to", *(const DType *)data); }

static void set_conv(Gen *r, Node *n, void *data) {
  int64_t pad = pick(r, 2), p[4] = {pad, pad, pad, pad};
  ir_set_ints(r->g, n, "pad", 4, p);
}

/* A reshape target: adjacent dims merged, a dim split, or flattened. */
static TensorType reshape_target(Gen *r, const TensorType *x) {
  TensorType t = *x;
  int k = pick(r, 3);
  if (k == 0 && x->rank >= 2) {
    int i = pick(r, x->rank - 1);
    t.dims[i] = x->dims[i] * x->dims[i + 1];
    memmove(&t.dims[i + 1], &x->dims[i + 2], sizeof(int64_t) * (size_t)(x->rank - i - 2));
    t.rank--;
  } else if (k == 1 && x->rank < 5) {
    int i = pick(r, x->rank > 0 ? x->rank : 1);
    int64_t d = x->rank ? x->dims[i] : 1, f = d % 2 == 0 ? 2 : 1;
    memmove(&t.dims[i + 1], &x->dims[i], sizeof(int64_t) * (size_t)(x->rank - i));
    t.dims[i] = f;
    t.dims[i + 1] = d / f;
    t.rank = x->rank ? x->rank + 1 : 2;
    if (!x->rank) t.dims[0] = t.dims[1] = 1;
  } else {
    t.rank = 1;
    t.dims[0] = ir_type_numel(x);
  }
  return t;
}

/* ---- one step ---- */

static const OpKind bounded_unary[] = {OP_NEG, OP_ABS, OP_RELU, OP_SIGMOID, OP_TANH, OP_SIN,
                                       OP_COS, OP_ERF, OP_SILU, OP_GELU, OP_HARDSIGMOID,
                                       OP_HARDSWISH, OP_LEAKY_RELU};
static const OpKind binaries[] = {OP_ADD, OP_SUB, OP_MUL, OP_MAXIMUM, OP_MINIMUM};
static const OpKind reductions[] = {OP_REDUCE_SUM, OP_REDUCE_MEAN, OP_REDUCE_MAX, OP_REDUCE_MIN};

static void step(Gen *r) {
  Value *x = any(r);
  Value *in[5] = {x};
  switch (pick(r, 20)) {
    case 0:
    case 1:
    case 2: {
      in[1] = partner(r, x);
      try_node(r, binaries[pick(r, (int)ARRAY_LEN(binaries))], 2, in, NULL, NULL);
      break;
    }
    case 3:
    case 4: try_node(r, bounded_unary[pick(r, (int)ARRAY_LEN(bounded_unary))], 1, in, NULL, NULL); break;
    case 5: try_node(r, reductions[pick(r, (int)ARRAY_LEN(reductions))], 1, in, set_axes, NULL); break;
    case 6: try_node(r, chance(r, 50) ? OP_SOFTMAX : OP_LOG_SOFTMAX, 1, in, set_axis, NULL); break;
    case 7: {
      TensorType t = reshape_target(r, &x->type);
      Node *n = try_node(r, OP_RESHAPE, 1, in, set_shape, &t);
      if (n && chance(r, 40)) { /* and back: reshape of reshape */
        in[0] = &n->out[0];
        try_node(r, OP_RESHAPE, 1, in, set_shape, &x->type);
      }
      break;
    }
    case 8: {
      Node *n = try_node(r, OP_TRANSPOSE, 1, in, set_perm, NULL);
      if (n && chance(r, 50)) { /* a pair: the inverse, or any */
        int count;
        const int64_t *p = ir_attr_ints(n, "perm", &count);
        int64_t inv[DL_MAX_RANK];
        for (int i = 0; i < count; i++) inv[p[i]] = i;
        in[0] = &n->out[0];
        try_node(r, OP_TRANSPOSE, 1, in, set_perm, chance(r, 50) ? inv : NULL);
      }
      break;
    }
    case 9: {
      TensorType t = x->type;
      for (int i = 0; i < t.rank; i++)
        if (t.dims[i] == 1) t.dims[i] = 1 + pick(r, 3);
      if (t.rank < 4 && chance(r, 30)) {
        memmove(&t.dims[1], &t.dims[0], sizeof(int64_t) * (size_t)t.rank);
        t.dims[0] = 2;
        t.rank++;
      }
      try_node(r, OP_EXPAND, 1, in, set_shape, &t);
      break;
    }
    case 10: try_node(r, OP_SLICE, 1, in, set_slice, NULL); break;
    case 11: {
      in[1] = chance(r, 50) ? x : any(r);
      try_node(r, OP_CONCAT, 2, in, set_axis, NULL);
      break;
    }
    case 12: { /* a scale/shift chain, or an identity */
      for (int k = 1 + pick(r, 3); k > 0; k--) {
        TensorType s = {.dtype = TY_F32, .rank = 0};
        in[1] = new_const(r, &s);
        Node *n = try_node(r, chance(r, 50) ? OP_MUL : chance(r, 50) ? OP_ADD : OP_SUB, 2, in, NULL, NULL);
        if (!n) break;
        in[0] = &n->out[0];
      }
      break;
    }
    case 13: { /* through f16 and back, or to f32 itself */
      DType to = chance(r, 50) ? TY_F16 : TY_F32;
      Node *n = try_node(r, OP_CAST, 1, in, set_cast, &to);
      if (n && to == TY_F16) {
        in[0] = &n->out[0];
        DType back = TY_F32;
        try_node(r, OP_CAST, 1, in, set_cast, &back);
      }
      break;
    }
    case 14: { /* a duplicate of the last real node: cse fodder */
      Node *last = r->g->last;
      while (last && ir_ops[last->op].cls == K_SOURCE) last = last->prev;
      if (!last || last->n_in > 5) break;
      Node *n = ir_node_new(r->g, last->op, last->n_in, last->in, (SrcLoc){0});
      n->n_attrs = last->n_attrs;
      n->attrs = last->attrs;
      char err[256];
      if (ir_infer(n, err, sizeof err)) {
        ir_append(r->g, n);
        add_pool(r, &n->out[0]);
      }
      break;
    }
    case 15: { /* const-only arithmetic: fold fodder */
      TensorType s = {.dtype = TY_F32, .rank = chance(r, 50) ? 0 : 1, .dims = {3}};
      in[0] = new_const(r, &s);
      in[1] = new_const(r, &s);
      Node *n = try_node(r, binaries[pick(r, (int)ARRAY_LEN(binaries))], 2, in, NULL, NULL);
      if (n) {
        in[0] = x;
        in[1] = &n->out[0];
        try_node(r, OP_ADD, 2, in, NULL, NULL);
      }
      break;
    }
    case 16: { /* linear, maybe then batchnorm when rank 2 */
      if (x->type.rank < 1) break;
      int64_t k = x->type.dims[x->type.rank - 1], out = 1 + pick(r, 6);
      TensorType w = {.dtype = TY_F32, .rank = 2, .dims = {out, k}};
      TensorType b = {.dtype = TY_F32, .rank = 1, .dims = {out}};
      in[1] = new_param(r, &w);
      in[2] = new_param(r, &b);
      Node *n = try_node(r, OP_LINEAR, chance(r, 50) ? 3 : 2, in, NULL, NULL);
      if (n && x->type.rank == 2 && chance(r, 60)) {
        in[0] = &n->out[0];
        for (int i = 1; i < 5; i++) in[i] = new_param(r, &b);
        try_node(r, OP_BATCHNORM, 5, in, NULL, NULL);
      }
      break;
    }
    case 17: { /* conv2d over a rank-4 value, then batchnorm */
      if (x->type.rank != 4) break;
      int64_t cout = 1 + pick(r, 4), kh = 1 + pick(r, 3);
      TensorType w = {.dtype = TY_F32, .rank = 4, .dims = {cout, x->type.dims[1], kh, kh}};
      TensorType c = {.dtype = TY_F32, .rank = 1, .dims = {cout}};
      in[1] = new_param(r, &w);
      in[2] = new_param(r, &c);
      Node *n = try_node(r, OP_CONV2D, chance(r, 50) ? 3 : 2, in, set_conv, NULL);
      if (n && chance(r, 70)) {
        in[0] = &n->out[0];
        for (int i = 1; i < 5; i++) in[i] = new_param(r, &c);
        try_node(r, OP_BATCHNORM, 5, in, NULL, NULL);
      }
      break;
    }
    case 18: try_node(r, OP_CLIP, 1, in, set_clip, NULL); break;
    default: { /* x*1, x+0, x-0: simplify fodder */
      TensorType s = {.dtype = TY_F32, .rank = 0};
      Node *c = ir_const(r->g, chance(r, 50) ? 1 : 0, TY_F32, (SrcLoc){0});
      c->out[0].type = s;
      in[1] = &c->out[0];
      double v = ir_attr_float(c, "value");
      try_node(r, v == 1 ? OP_MUL : chance(r, 50) ? OP_ADD : OP_SUB, 2, in, NULL, NULL);
      break;
    }
  }
}

Graph *rg_build(Ctx *c, uint64_t seed, int n_ops) {
  Gen *r = ARENA_NEW(&c->arena, Gen);
  r->rng = seed * 0x2545f4914f6cdd1dull + 1;
  char name[32];
  snprintf(name, sizeof name, "rand%llu", (unsigned long long)seed);
  r->g = ir_graph_new(c, name);
  int inputs = 1 + pick(r, 3);
  for (int i = 0; i < inputs; i++) {
    TensorType t = random_type(r, i == 0 && chance(r, 50) ? 4 : 1 + pick(r, 4));
    char in_name[16];
    snprintf(in_name, sizeof in_name, "x%d", i);
    add_pool(r, &ir_source(r->g, OP_INPUT, &t, in_name, (SrcLoc){0})->out[0]);
  }
  for (int made = 0, tries = 0; made < n_ops && tries < 20 * n_ops; tries++) {
    int before = r->g->n_nodes;
    step(r);
    if (r->g->n_nodes > before) made++;
  }
  /* Outputs: the last value and a few others, as f32. */
  int n_out = 1 + pick(r, 3);
  Value *outs[4];
  const char *names[4] = {"y0", "y1", "y2", "y3"};
  for (int i = 0; i < n_out; i++) {
    Value *v = i == 0 ? r->pool[r->n_pool - 1] : r->pool[pick(r, r->n_pool)];
    if (v->type.dtype != TY_F32) {
      Value *in[1] = {v};
      DType to = TY_F32;
      Node *n = try_node(r, OP_CAST, 1, in, set_cast, &to);
      v = &n->out[0];
    }
    outs[i] = v;
  }
  ir_set_outputs(r->g, n_out, outs, names);
  return r->g;
}
