/* Run-time lengths (docs/ir.md): a nonzero's coordinates (an nms's
 * rows, a unique's values) are an upper bound's worth of which only its
 * count are real.  Plans keep static shapes, so the padding travels with
 * the data through the ops that treat the rows of that axis one by one
 * (elementwise ops, moves, gathers, products with it as M or N,
 * reductions over other axes), and each graph output it reaches gets
 * the count as its length, an extra output that the runtime and
 * ir_trim_outputs cut the output to.  A reduction over that axis (a
 * sum, a mean, max, argmax, topk, softmax, a product contracting it)
 * reads the padding set to its identity first.  An op that would still
 * mix padded rows into real ones (a normalization or concat along that
 * axis, a reshape merging it) is refused by name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/eval.h"
#include "ir/ir.h"

typedef struct Bound {
  int axis;   /* -1: the value has static length everywhere */
  Value *len; /* an i64 scalar: the count */
} Bound;

/* A length as an expression (shape arithmetic on counts), interned, so
 * that two values computing the same length, such as TopK's k =
 * min(count, 300) and the Shape of TopK's result, are one length. */
typedef enum { SYM_CONST, SYM_LEAF, SYM_ADD, SYM_SUB, SYM_MUL, SYM_DIV, SYM_MIN, SYM_MAX } SymKind;
typedef struct Sym {
  SymKind kind;
  int64_t k;          /* SYM_CONST's value; SYM_LEAF's element */
  const Value *leaf;  /* SYM_LEAF: a value the expression does not see into */
  int a, b;           /* the operands' syms */
  Value *rep;         /* an i64 scalar computing it, once one is known */
} Sym;

typedef struct Bounds {
  Graph *g;
  Bound *of; /* by Value.id */
  int n_values;
  Sym *syms;
  int n_syms, cap_syms;
  int *slots; /* a hash of syms: index + 1, 0 empty; cap_syms * 2 of them */
  long visits; /* sym_of's work, bounded (SYM_VISITS) */
  bool oom;
} Bounds;

static Bound bound_of(const Bounds *b, const Value *v) {
  if (v && v->id >= 0 && v->id < b->n_values) return b->of[v->id];
  return (Bound){-1, NULL};
}

static int norm_axis(int64_t a, int rank) { return (int)(a < 0 ? a + rank : a); }

static bool has_int(const Node *n, const char *name, int rank, int axis) {
  const Attr *a = ir_attr(n, name);
  if (!a || a->kind != AK_INTS) return false;
  for (int i = 0; i < a->ints.n; i++)
    if (norm_axis(a->ints.v[i], rank) == axis) return true;
  return false;
}

/* v is padded on its axis `at` by the count that pads `like`. */
static bool padded_like(const Bounds *b, const Value *v, int at, const Value *like) {
  Bound p = bound_of(b, v), q = bound_of(b, like);
  return p.axis == at && p.len == q.len;
}

/* Where axis a of operand i lands in n's result r, or -1 with *why
 * saying why the rows of that axis would not stay apart. */
static int follow(const Bounds *b, const Node *n, int i, int a, int r, const char **why) {
  const TensorType *x = &n->in[i]->type, *y = &n->out[r].type;
  int rx = x->rank, ry = y->rank;
  *why = "it combines the elements along that axis";
  switch (ir_ops[n->op].cls) {
    case K_ELEMWISE: {
      if (n->op == OP_BATCHNORM && (i > 0 || a == 1)) return -1;
      if (n->op == OP_CHECK) return -1;
      /* An operand without the length there but of the bound's size: its
       * rows cannot meet the real ones alone (and a count of 1 would
       * broadcast to all of them). */
      int to = a + ry - rx;
      for (int j = 0; j < n->n_in; j++) {
        const TensorType *o = &n->in[j]->type;
        int at = to - (ry - o->rank);
        if (j != i && at >= 0 && o->dims[at] > 1 && !padded_like(b, n->in[j], at, n->in[i])) {
          *why = "another operand has that axis at its full size";
          return -1;
        }
      }
      return to;
    }
    case K_REDUCE:
      if (i > 0) return -1;
      switch (n->op) {
        case OP_REDUCE_SUM:
        case OP_REDUCE_MEAN:
        case OP_REDUCE_MAX:
        case OP_REDUCE_MIN:
        case OP_REDUCE_PROD: {
          if (has_int(n, "axes", rx, a)) return -1;
          if (ir_attr_int(n, "keepdims")) return a;
          int before = 0;
          for (int d = 0; d < a; d++) before += has_int(n, "axes", rx, d);
          return a - before;
        }
        case OP_ARGMAX: {
          int axis = norm_axis(ir_attr_int(n, "axis"), rx);
          if (axis == a) return -1;
          return ir_attr_int(n, "keepdims") || a < axis ? a : a - 1;
        }
        case OP_SOFTMAX:
        case OP_LOG_SOFTMAX: return norm_axis(ir_attr_int(n, "axis"), rx) == a ? -1 : a;
        case OP_LAYERNORM:
        case OP_RMS_NORM: return a >= norm_axis(ir_attr_int(n, "axis"), rx) ? -1 : a;
        case OP_GROUP_NORM:
        case OP_GLOBAL_AVGPOOL: return a == 0 ? 0 : -1;
        default: return -1;
      }
    case K_MATMUL:
      if (n->op == OP_MATMUL) {
        *why = "a product with a 1-d operand drops an axis";
        if (n->in[0]->type.rank < 2 || n->in[1]->type.rank < 2) return -1;
        int logical = a;
        if (ir_matmul_trans(n, i) && a >= rx - 2) logical = a == rx - 1 ? rx - 2 : rx - 1;
        bool contracted = i == 0 ? logical == rx - 1 : logical == rx - 2;
        *why = "the matrix product sums over that axis";
        return contracted ? -1 : logical + ry - rx;
      }
      if (n->op == OP_LINEAR) {
        *why = "the product sums over that axis, or it is the weight's";
        return i == 0 && a < rx - 1 ? a : -1;
      }
      *why = "a convolution's rows may only be its batch";
      return i == 0 && a == 0 ? 0 : -1;
    case K_WINDOW: *why = "a window's rows may only be its batch"; return i == 0 && a == 0 ? 0 : -1;
    case K_MOVE:
      switch (n->op) {
        case OP_RESHAPE: {
          /* The axis must stay whole: the same product before it and
           * after it, so each padded row stays a block of its own. */
          int64_t before = 1, after = 1;
          for (int d = 0; d < a; d++) before *= x->dims[d];
          for (int d = a + 1; d < rx; d++) after *= x->dims[d];
          int64_t p = 1;
          for (int d = 0; d < ry; d++) {
            if (p == before && y->dims[d] == x->dims[a]) {
              int64_t q = 1;
              for (int e = d + 1; e < ry; e++) q *= y->dims[e];
              if (q == after) return d;
            }
            p *= y->dims[d];
          }
          *why = "the reshape merges or splits that axis";
          return -1;
        }
        case OP_TRANSPOSE: {
          const Attr *perm = ir_attr(n, "perm");
          for (int d = 0; d < perm->ints.n; d++)
            if (perm->ints.v[d] == a) return d;
          return -1;
        }
        case OP_EXPAND: return a + ry - rx;
        case OP_CONCAT:
          *why = "it concatenates along that axis";
          return norm_axis(ir_attr_int(n, "axis"), rx) == a ? -1 : a;
        case OP_SLICE: {
          const Attr *s = ir_attr(n, "starts"), *e = ir_attr(n, "ends"), *st = ir_attr(n, "steps");
          *why = "it slices that axis";
          if (a < s->ints.n && (s->ints.v[a] != 0 || e->ints.v[a] != x->dims[a] || st->ints.v[a] != 1)) return -1;
          return a;
        }
        case OP_PAD: {
          const Attr *p = ir_attr(n, "pads");
          *why = "it pads that axis";
          return p->ints.v[a] || p->ints.v[a + rx] ? -1 : a;
        }
        case OP_GATHER: {
          int axis = norm_axis(ir_attr_int(n, "axis"), n->in[0]->type.rank);
          if (i == 1) return axis + a;
          *why = "it gathers along that axis";
          if (a == axis) return -1;
          return a < axis ? a : a + n->in[1]->type.rank - 1;
        }
        case OP_GATHER_ELEMENTS:
          *why = "only its indices may have a run-time length, not on its axis";
          return i == 1 && a != norm_axis(ir_attr_int(n, "axis"), rx) ? a : -1;
        case OP_GATHER_ND:
          *why = "only its indices may have a run-time length, on an axis before the last";
          return i == 1 && ir_attr_int(n, "batch_dims") == 0 && a < rx - 1 ? a : -1;
        default: return -1;
      }
    case K_OPAQUE:
      if (n->op == OP_TOPK) {
        *why = "it sorts along that axis";
        return norm_axis(ir_attr_int(n, "axis"), rx) == a ? -1 : a;
      }
      if (n->op == OP_CAST || n->op == OP_TP_COPY || n->op == OP_STAGE) return a;
      if (n->op == OP_SCATTER_ELEMENTS && i == 0) return a; /* the data's rows stay where they are */
      *why = "it has no rule for a run-time length";
      return -1;
    case K_SOURCE: return -1;
  }
  return -1;
}

/* Whether operand i of n, padded on axis a, can be read with its
 * padding set to *fill instead of refused: a reduction over that axis
 * (its identity; a mean becomes a sum over the count, *mean), argmax,
 * topk and softmax over it, a product contracting it (0).  *keeps: the result
 * still has that axis (softmax's), else it loses it. */
static bool maskable(const Node *n, int i, int a, double *fill, bool *mean, bool *keeps) {
  const TensorType *x = &n->in[i]->type;
  DType dt = x->dtype;
  bool floats = ir_dtype_is_float(dt);
  int64_t lo, hi;
  ir_int_range(dt, &lo, &hi);
  double least = floats ? -INFINITY : (double)lo, most = floats ? INFINITY : (double)hi;
  *mean = *keeps = false;
  switch (n->op) {
    case OP_REDUCE_SUM: *fill = 0; return i == 0 && has_int(n, "axes", x->rank, a);
    case OP_REDUCE_MEAN: *fill = 0, *mean = true; return i == 0 && floats && has_int(n, "axes", x->rank, a);
    case OP_REDUCE_PROD: *fill = 1; return i == 0 && has_int(n, "axes", x->rank, a);
    case OP_REDUCE_MAX: *fill = least; return i == 0 && has_int(n, "axes", x->rank, a);
    case OP_REDUCE_MIN: *fill = most; return i == 0 && has_int(n, "axes", x->rank, a);
    case OP_ARGMAX: *fill = least; return i == 0 && norm_axis(ir_attr_int(n, "axis"), x->rank) == a;
    case OP_TOPK: /* k of the real rows (ONNX needs k <= the count) */
      *fill = ir_attr_int(n, "largest") ? least : most;
      return i == 0 && norm_axis(ir_attr_int(n, "axis"), x->rank) == a;
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
      *fill = -INFINITY, *keeps = true;
      return i == 0 && norm_axis(ir_attr_int(n, "axis"), x->rank) == a;
    case OP_MATMUL: {
      if (n->in[0]->type.rank < 2 || n->in[1]->type.rank < 2) return false;
      int logical = a;
      if (ir_matmul_trans(n, i) && a >= x->rank - 2) logical = a == x->rank - 1 ? x->rank - 2 : x->rank - 1;
      *fill = 0;
      return logical == (i == 0 ? x->rank - 1 : x->rank - 2);
    }
    case OP_LINEAR: *fill = 0; return i == 0 && a == x->rank - 1;
    default: return false;
  }
}

/* ---- lengths as expressions ---- */

static uint64_t sym_hash(const Sym *s) {
  uint64_t h = (uint64_t)s->kind * 0x9e3779b97f4a7c15u;
  h ^= (uint64_t)s->k + 0x632be59bd9b4e019u + (h << 6) + (h >> 2);
  h ^= (uint64_t)(uintptr_t)s->leaf + (h << 6) + (h >> 2);
  h ^= (uint64_t)(uint32_t)s->a * 0xff51afd7ed558ccdu + (uint64_t)(uint32_t)s->b + (h << 6) + (h >> 2);
  return h ^ (h >> 29);
}

static bool same_sym(const Sym *s, const Sym *t) {
  return s->kind == t->kind && s->k == t->k && s->leaf == t->leaf && s->a == t->a && s->b == t->b;
}

/* Room for one more sym (the table and its hash doubled when full);
 * false when memory ran out. */
static bool sym_room(Bounds *b) {
  if (b->n_syms < b->cap_syms) return true;
  int cap = b->cap_syms ? 2 * b->cap_syms : 64;
  Sym *grown = realloc(b->syms, sizeof *grown * (size_t)cap);
  if (grown) b->syms = grown;
  int *slots = calloc((size_t)cap * 2, sizeof *slots);
  if (!grown || !slots) {
    free(slots);
    b->oom = true;
    return false;
  }
  free(b->slots);
  b->slots = slots, b->cap_syms = cap;
  for (int i = 0; i < b->n_syms; i++) {
    size_t at = sym_hash(&b->syms[i]) & (size_t)(2 * cap - 1);
    while (slots[at]) at = (at + 1) & (size_t)(2 * cap - 1);
    slots[at] = i + 1;
  }
  return true;
}

/* The index of the sym equal to want (folded when its operands are
 * constants, commutative operands in one order), added if new.  Out of
 * memory: 0, with b->oom set (the table always has a first sym). */
static int intern(Bounds *b, Sym want) {
  if (want.kind != SYM_CONST && want.kind != SYM_LEAF) {
    int64_t p = b->syms[want.a].k, q = b->syms[want.b].k, r = 0;
    bool folds = b->syms[want.a].kind == SYM_CONST && b->syms[want.b].kind == SYM_CONST;
    switch (want.kind) {
      case SYM_ADD: folds = folds && !__builtin_add_overflow(p, q, &r); break;
      case SYM_SUB: folds = folds && !__builtin_sub_overflow(p, q, &r); break;
      case SYM_MUL: folds = folds && !__builtin_mul_overflow(p, q, &r); break;
      case SYM_MIN: r = p < q ? p : q; break;
      case SYM_MAX: r = p > q ? p : q; break;
      case SYM_DIV: /* of numbers >= 0, where C's and the IR's rounding agree */
        folds = folds && p >= 0 && q > 0;
        r = folds ? p / q : 0;
        break;
      default: folds = false; break;
    }
    if (folds) {
      want = (Sym){.kind = SYM_CONST, .k = r};
    } else if (want.kind != SYM_SUB && want.kind != SYM_DIV && want.a > want.b) {
      int t = want.a; /* commutative: one order */
      want.a = want.b, want.b = t;
    }
  }
  if (!sym_room(b)) return 0;
  size_t mask = (size_t)(2 * b->cap_syms - 1), at = sym_hash(&want) & mask;
  for (; b->slots[at]; at = (at + 1) & mask)
    if (same_sym(&b->syms[b->slots[at] - 1], &want)) return b->slots[at] - 1;
  want.rep = NULL;
  b->syms[b->n_syms] = want;
  b->slots[at] = b->n_syms + 1;
  return b->n_syms++;
}

static int leaf(Bounds *b, const Value *v, int64_t e) { return intern(b, (Sym){.kind = SYM_LEAF, .k = e, .leaf = v}); }

/* Deeper shape arithmetic is a length of its own, and so is every value
 * once the walk has done SYM_VISITS steps (a model cannot make it long:
 * a leaf is only ever equal to itself, so giving up merges nothing). */
#define SYM_DEPTH 24
#define SYM_VISITS 1000000L

/* Element e of v (a small integer value) as an expression of the counts
 * it is computed from: through reshapes, integer casts, concats, slices
 * and gathers of 1-d values, elementwise + - * / min max and their
 * reductions; any other value is a leaf of its own. */
static int sym_of(Bounds *b, const Value *v, int64_t e, int depth) {
  const Node *d = v->def;
  int64_t n = ir_type_numel(&v->type);
  if (!d || depth > SYM_DEPTH || e < 0 || e >= n || ir_dtype_is_float(v->type.dtype) || b->oom ||
      ++b->visits > SYM_VISITS)
    return leaf(b, v, e);
  const Value *x = d->n_in > 0 ? d->in[0] : NULL;
  int64_t nx = x ? ir_type_numel(&x->type) : 0;
  switch (d->op) {
    case OP_CONST: {
      double k = ir_attr_float(d, "value");
      if (!(fabs(k) < 0x1p62)) break;
      return intern(b, (Sym){.kind = SYM_CONST, .k = (int64_t)k});
    }
    case OP_CAST: /* to i32 or i64 of an integer: the same number, a count's */
      if (ir_dtype_is_float(x->type.dtype) || (v->type.dtype != TY_I64 && v->type.dtype != TY_I32)) break;
      return sym_of(b, x, e, depth + 1);
    case OP_RESHAPE: return sym_of(b, x, e, depth + 1);
    case OP_EXPAND:
      if (nx == 1) return sym_of(b, x, 0, depth + 1);
      if (nx == n) return sym_of(b, x, e, depth + 1);
      break;
    case OP_CONCAT:
      if (v->type.rank != 1) break;
      for (int i = 0; i < d->n_in; i++) {
        int64_t m = d->in[i]->type.dims[0];
        if (e < m) return sym_of(b, d->in[i], e, depth + 1);
        e -= m;
      }
      break;
    case OP_SLICE:
      if (v->type.rank != 1) break;
      return sym_of(b, x, ir_attr(d, "starts")->ints.v[0] + e * ir_attr(d, "steps")->ints.v[0], depth + 1);
    case OP_GATHER: {
      if (x->type.rank != 1) break;
      int at = sym_of(b, d->in[1], e, depth + 1);
      if (b->syms[at].kind != SYM_CONST) break;
      int64_t i = b->syms[at].k;
      return sym_of(b, x, i < 0 ? i + nx : i, depth + 1);
    }
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_MINIMUM:
    case OP_MAXIMUM: {
      int64_t na = ir_type_numel(&d->in[0]->type), nb = ir_type_numel(&d->in[1]->type);
      if ((na != 1 && na != n) || (nb != 1 && nb != n)) break;
      SymKind k = d->op == OP_ADD   ? SYM_ADD
                  : d->op == OP_SUB ? SYM_SUB
                  : d->op == OP_MUL ? SYM_MUL
                  : d->op == OP_DIV ? SYM_DIV
                  : d->op == OP_MINIMUM ? SYM_MIN
                                        : SYM_MAX;
      int p = sym_of(b, d->in[0], na == 1 ? 0 : e, depth + 1), q = sym_of(b, d->in[1], nb == 1 ? 0 : e, depth + 1);
      return intern(b, (Sym){.kind = k, .a = p, .b = q});
    }
    case OP_EQUAL: { /* of two constants (a where on a shape's -1) */
      int64_t na = ir_type_numel(&d->in[0]->type), nb = ir_type_numel(&d->in[1]->type);
      if ((na != 1 && na != n) || (nb != 1 && nb != n)) break;
      int p = sym_of(b, d->in[0], na == 1 ? 0 : e, depth + 1); /* indices: the table may move */
      int q = sym_of(b, d->in[1], nb == 1 ? 0 : e, depth + 1);
      if (b->syms[p].kind == SYM_CONST && b->syms[q].kind == SYM_CONST)
        return intern(b, (Sym){.kind = SYM_CONST, .k = b->syms[p].k == b->syms[q].k});
      break;
    }
    case OP_WHERE: {
      int64_t nc = ir_type_numel(&x->type);
      if (nc != 1 && nc != n) break;
      int c = sym_of(b, x, nc == 1 ? 0 : e, depth + 1);
      if (b->syms[c].kind != SYM_CONST) break;
      const Value *pick = d->in[b->syms[c].k ? 1 : 2];
      int64_t np = ir_type_numel(&pick->type);
      if (np != 1 && np != n) break;
      return sym_of(b, pick, np == 1 ? 0 : e, depth + 1);
    }
    case OP_REDUCE_MIN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_SUM:
    case OP_REDUCE_PROD: {
      if (n != 1 || nx < 1 || nx > 1024) break;
      SymKind k = d->op == OP_REDUCE_MIN   ? SYM_MIN
                  : d->op == OP_REDUCE_MAX ? SYM_MAX
                  : d->op == OP_REDUCE_SUM ? SYM_ADD
                                           : SYM_MUL;
      int acc = sym_of(b, x, 0, depth + 1);
      for (int64_t i = 1; i < nx; i++) acc = intern(b, (Sym){.kind = k, .a = acc, .b = sym_of(b, x, i, depth + 1)});
      return acc;
    }
    default: break;
  }
  return leaf(b, v, e);
}

/* The value that stands for the length v computes, the same for every
 * value computing that length (the first seen). */
static Value *canonical_length(Bounds *b, Value *v) {
  int s = sym_of(b, v, 0, 0);
  if (b->oom) return v;
  if (!b->syms[s].rep) b->syms[s].rep = v;
  return b->syms[s].rep;
}

/* The ops whose results have run-time lengths. */
static bool sizes_by_data(OpKind op) { return op == OP_NONZERO || op == OP_NMS || op == OP_UNIQUE; }

/* The ops that make the pass run. */
static bool needs_pass(OpKind op) { return sizes_by_data(op) || op == OP_SHAPE_OF || op == OP_WITH_LENGTH; }

static bool refuse(Bounds *b, const Node *n, int i, int a, const char *why) {
  diag_error(b->g->ctx, n->loc,
             "%s: operand %d has a length known only at run time on axis %d (a NonZero's, Compress's, "
             "NonMaxSuppression's or Unique's result), which is not supported here: %s",
             ir_ops[n->op].name, i, a, why);
  return false;
}

/* A constant of one value, of dtype dt and shape [dims...] (a scalar
 * for rank 0), not yet in the graph: place_new puts it there. */
static Node *splat(Graph *g, double value, DType dt, int rank, const int64_t *dims, SrcLoc loc) {
  Node *c = ir_node_new(g, OP_CONST, 0, NULL, loc);
  ir_set_float(g, c, "value", value);
  TensorType t = {.dtype = dt, .rank = rank};
  for (int d = 0; d < rank; d++) t.dims[d] = dims[d];
  ir_declare(c, &t);
  return c;
}

/* The nodes made[0 .. n) (constants declared, the rest with operands
 * set) completed and inserted in order before `before` (NULL: at the
 * end), each under like's guard and outside the walk's bounds. */
static void place_new(Graph *g, const Node *like, Node **made, int n, Node *before) {
  char err[256];
  for (int k = 0; k < n; k++) {
    if (made[k]->op != OP_CONST && (!ir_fill_defaults(g, made[k], err, sizeof err) || !ir_infer(made[k], err, sizeof err)))
      dl_internal(g->ctx, "bounds: a bad %s: %s", ir_ops[made[k]->op].name, err);
    made[k]->guard = like->guard;
    made[k]->out[0].id = -1; /* not the walk's: no bound */
    if (before)
      ir_insert_before(g, before, made[k]);
    else
      ir_append(g, made[k]);
  }
}

/* Operand i of n with its padded rows set to fill (iota < count, a
 * where): a gather's indices (0: whatever the model did to the padding
 * could be out of range and fail the run), or what a reduction over the
 * padded axis reads (its identity, so that only the real rows count). */
static void mask_operand(Bounds *b, Node *n, int i, Bound bd, double fill) {
  Graph *g = b->g;
  Value *v = n->in[i];
  SrcLoc loc = n->loc;
  /* Masked already (a printed graph parsed again): nothing to add. */
  const Node *w = v->def;
  if (w && w->op == OP_WHERE && w->in[0]->def->op == OP_LESS && w->in[0]->def->in[1] == bd.len &&
      w->in[0]->def->in[0]->def->op == OP_IOTA)
    return;
  Node *iota = ir_node_new(g, OP_IOTA, 0, NULL, loc);
  ir_set_ints(g, iota, "shape", v->type.rank, v->type.dims);
  ir_set_dtype(g, iota, "dtype", TY_I64);
  ir_set_int(g, iota, "axis", bd.axis);
  Node *lt = ir_node_new(g, OP_LESS, 2, (Value *[]){&iota->out[0], bd.len}, loc);
  Node *pad = splat(g, fill, v->type.dtype, 0, NULL, loc);
  Node *pick = ir_node_new(g, OP_WHERE, 3, (Value *[]){&lt->out[0], v, &pad->out[0]}, loc);
  place_new(g, n, (Node *[]){iota, lt, pad, pick}, 4, n);
  n->in[i] = &pick->out[0];
}

/* A mean over the padded axis: the sum of the real rows (the padding
 * masked to 0) over the count times the other axes' extent, so that no
 * row of padding counts. */
static void mean_over_count(Bounds *b, Node *n, Bound bd) {
  Graph *g = b->g;
  SrcLoc loc = n->loc;
  const TensorType *x = &n->in[0]->type;
  double others = 1;
  for (int d = 0; d < x->rank; d++)
    if (d != bd.axis && has_int(n, "axes", x->rank, d)) others *= (double)x->dims[d];
  n->op = OP_REDUCE_SUM;
  DType dt = n->out[0].type.dtype;
  Node *count = ir_node_new(g, OP_CAST, 1, &bd.len, loc);
  ir_set_dtype(g, count, "to", dt);
  Node *scale = splat(g, others, dt, 0, NULL, loc);
  Node *times = ir_node_new(g, OP_MUL, 2, (Value *[]){&count->out[0], &scale->out[0]}, loc);
  Node *div = ir_node_new(g, OP_DIV, 2, (Value *[]){&n->out[0], &times->out[0]}, loc);
  place_new(g, n, (Node *[]){count, scale, times, div}, 4, n->next);
  ir_replace_uses(g, &n->out[0], &div->out[0]);
  div->in[0] = &n->out[0];
}

/* shape_of x: a concat of x's static dims and, on its axis of run-time
 * length, the count. */
static void replace_shape_of(Bounds *b, Node *n) {
  Graph *g = b->g;
  const Value *x = n->in[0];
  Bound bd = bound_of(b, x);
  int r = x->type.rank, k = 0;
  Node *made[DL_MAX_RANK + 1];
  Value *pieces[DL_MAX_RANK];
  for (int d = 0; d < r; d++) {
    Node *p;
    if (d == bd.axis) {
      p = ir_node_new(g, OP_RESHAPE, 1, &bd.len, n->loc);
      ir_set_ints(g, p, "shape", 1, (const int64_t[]){1});
    } else {
      p = splat(g, (double)x->type.dims[d], TY_I64, 1, (const int64_t[]){1}, n->loc);
    }
    made[k++] = p;
    pieces[d] = &p->out[0];
  }
  Node *shape;
  if (r == 0) {
    shape = splat(g, 0, TY_I64, 1, (const int64_t[]){0}, n->loc);
  } else {
    shape = ir_node_new(g, OP_CONCAT, r, pieces, n->loc);
    ir_set_int(g, shape, "axis", 0);
  }
  made[k++] = shape;
  place_new(g, n, made, k, n);
  ir_replace_uses(g, &n->out[0], &shape->out[0]);
  ir_remove(g, n);
}

/* with_length x, len {axis}: x with the length len (as an expression of
 * counts, the one any other value of that length has) on axis, and a
 * check at run time that len is in [0, the axis' size]: the size came
 * from shape arithmetic at the lengths' bounds, which bounds len when
 * that arithmetic grows with them, as a shape's does.  Without a count
 * in len (it is the axis' size) it is x itself. */
static bool seed_length(Bounds *b, Node *n) {
  Graph *g = b->g;
  Value *x = n->in[0], *len = n->in[1];
  int axis = (int)ir_attr_int(n, "axis");
  int64_t dim = x->type.dims[axis];
  Bound bx = bound_of(b, x);
  Value *rep = canonical_length(b, len);
  if (b->oom) {
    diag_error(g->ctx, n->loc, "out of memory");
    return false;
  }
  int si = sym_of(b, len, 0, 0);
  const Sym *sy = &b->syms[si];
  if ((sy->kind == SYM_CONST && sy->k == dim) || (bx.axis == axis && bx.len == rep)) {
    ir_replace_uses(g, &n->out[0], x);
    ir_remove(g, n);
    return true;
  }
  if (sy->kind == SYM_CONST && (sy->k < 0 || sy->k > dim)) {
    diag_error(g->ctx, n->loc, "with_length: a length of %lld for axis %d of size %lld", (long long)sy->k, axis,
               (long long)dim);
    return false;
  }
  /* On x's own axis of run-time length, the new length (at most x's:
   * an If's empty branch) replaces it. */
  if (bx.axis >= 0 && bx.axis != axis) return refuse(b, n, 0, bx.axis, "the result would have two run-time lengths");
  Node *lim = splat(g, (double)dim, TY_I64, 0, NULL, n->loc);
  Node *zero = splat(g, 0, TY_I64, 0, NULL, n->loc);
  Node *below = ir_node_new(g, OP_LESS_EQUAL, 2, (Value *[]){len, &lim->out[0]}, n->loc);
  Node *above = ir_node_new(g, OP_LESS_EQUAL, 2, (Value *[]){&zero->out[0], len}, n->loc);
  Node *fits = ir_node_new(g, OP_LOGICAL_AND, 2, (Value *[]){&below->out[0], &above->out[0]}, n->loc);
  Node *within = NULL, *ok = fits;
  if (bx.axis == axis) { /* at most x's own length */
    within = ir_node_new(g, OP_LESS_EQUAL, 2, (Value *[]){len, bx.len}, n->loc);
    ok = ir_node_new(g, OP_LOGICAL_AND, 2, (Value *[]){&fits->out[0], &within->out[0]}, n->loc);
  }
  Node *check = ir_node_new(g, OP_CHECK, 2, (Value *[]){x, &ok->out[0]}, n->loc);
  ir_set_str(g, check, "message",
             arena_printf(&g->ctx->arena,
                          "%s: a run-time length of axis %d is outside 0..%lld, the bound that its shape "
                          "arithmetic gave with the lengths at their bounds (or past the length it replaces)",
                          n->loc.file ? n->loc.file->name : "the model", axis, (long long)dim));
  if (within)
    place_new(g, n, (Node *[]){lim, zero, below, above, fits, within, ok, check}, 8, n);
  else
    place_new(g, n, (Node *[]){lim, zero, below, above, fits, check}, 6, n);
  check->out[0].id = n->out[0].id; /* n's bound */
  b->of[check->out[0].id] = (Bound){axis, rep};
  ir_replace_uses(g, &n->out[0], &check->out[0]);
  ir_remove(g, n);
  return true;
}

/* A slice of the first e rows of the axis of run-time length: the rows
 * stay, min(count, e) of them real. */
static bool slices_head(const Node *n, int a) {
  const Attr *s = ir_attr(n, "starts"), *st = ir_attr(n, "steps");
  return n->op == OP_SLICE && a < s->ints.n && s->ints.v[a] == 0 && st->ints.v[a] == 1;
}

static void slice_head(Bounds *b, Node *n, Bound bd) {
  Graph *g = b->g;
  int64_t end = ir_attr(n, "ends")->ints.v[bd.axis];
  Value *len = bd.len;
  if (end < n->in[0]->type.dims[bd.axis]) {
    Node *e = splat(g, (double)end, TY_I64, 0, NULL, n->loc);
    Node *m = ir_node_new(g, OP_MINIMUM, 2, (Value *[]){bd.len, &e->out[0]}, n->loc);
    place_new(g, n, (Node *[]){e, m}, 2, n);
    len = canonical_length(b, &m->out[0]);
  }
  b->of[n->out[0].id] = (Bound){bd.axis, len};
}

/* A node of op over in (attributes set by the caller), for splice. */
static Node *mk(Graph *g, Node **made, int *k, OpKind op, int n_in, Value *const *in, SrcLoc loc) {
  Node *x = ir_node_new(g, op, n_in, in, loc);
  made[(*k)++] = x;
  return x;
}

static Node *mk_i64(Graph *g, Node **made, int *k, int64_t v, int rank, const int64_t *dims, SrcLoc loc) {
  return made[(*k)++] = splat(g, (double)v, TY_I64, rank, dims, loc);
}

/* ends[i] = counts[0] + ... + counts[i], for counts i64[k]. */
static Value *running_sum(Graph *g, Node **made, int *m, Value *counts, int64_t k, SrcLoc loc) {
  Node *row = mk(g, made, m, OP_IOTA, 0, NULL, loc), *col = mk(g, made, m, OP_IOTA, 0, NULL, loc);
  for (int a = 0; a < 2; a++) {
    Node *io = a ? col : row;
    ir_set_ints(g, io, "shape", 2, (const int64_t[]){k, k});
    ir_set_dtype(g, io, "dtype", TY_I64);
    ir_set_int(g, io, "axis", a);
  }
  Node *upto = mk(g, made, m, OP_LESS_EQUAL, 2, (Value *[]){&row->out[0], &col->out[0]}, loc);
  Node *ones = mk(g, made, m, OP_CAST, 1, (Value *[]){&upto->out[0]}, loc);
  ir_set_dtype(g, ones, "to", TY_I64);
  Node *tall = mk(g, made, m, OP_RESHAPE, 1, &counts, loc);
  ir_set_ints(g, tall, "shape", 2, (const int64_t[]){k, 1});
  Node *terms = mk(g, made, m, OP_MUL, 2, (Value *[]){&ones->out[0], &tall->out[0]}, loc);
  Node *sum = mk(g, made, m, OP_REDUCE_SUM, 1, (Value *[]){&terms->out[0]}, loc);
  ir_set_ints(g, sum, "axes", 1, (const int64_t[]){0});
  return &sum->out[0];
}

/* A concat along the operands' axis of run-time length: their real rows
 * one after the other, then the padding, as a gather of the plain
 * concat at src[p] = p - start[i] + static_start[i] for the operand i
 * whose real rows hold place p (i = how many operands end at or before
 * p); the count is the counts' sum.  torchvision's detectors gather each
 * class's boxes so. */
static bool concat_real_rows(Bounds *b, Node *n, int axis) {
  Graph *g = b->g;
  SrcLoc loc = n->loc;
  int k = n->n_in, m = 0;
  int64_t total = n->out[0].type.dims[axis];
  /* The places are found by a [total, k] comparison. */
  if (total > ((int64_t)1 << 28) / k)
    return refuse(b, n, 0, axis, "it concatenates too many rows of too many operands along that axis");
  Node **made = ARENA_ARRAY(&g->ctx->arena, Node *, 6 * k + 40);
  Value **counts = ARENA_ARRAY(&g->ctx->arena, Value *, k), **starts = ARENA_ARRAY(&g->ctx->arena, Value *, k);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    Bound bd = bound_of(b, n->in[i]);
    int64_t dim = n->in[i]->type.dims[axis];
    if (bd.axis >= 0 && bd.axis != axis) return refuse(b, n, i, bd.axis, "another operand's length is on the axis it concatenates");
    if (bd.axis == axis) {
      Node *r = mk(g, made, &m, OP_RESHAPE, 1, &bd.len, loc);
      ir_set_ints(g, r, "shape", 1, (const int64_t[]){1});
      counts[i] = &r->out[0];
    } else {
      counts[i] = &mk_i64(g, made, &m, dim, 1, (const int64_t[]){1}, loc)->out[0];
    }
    starts[i] = &mk_i64(g, made, &m, at, 1, (const int64_t[]){1}, loc)->out[0];
    at += dim;
  }
  Node *cvec = mk(g, made, &m, OP_CONCAT, k, counts, loc), *svec = mk(g, made, &m, OP_CONCAT, k, starts, loc);
  ir_set_int(g, cvec, "axis", 0);
  ir_set_int(g, svec, "axis", 0);
  Value *ends = running_sum(g, made, &m, &cvec->out[0], k, loc);
  Node *wide = mk(g, made, &m, OP_RESHAPE, 1, &ends, loc);
  ir_set_ints(g, wide, "shape", 2, (const int64_t[]){1, k});
  Node *place = mk(g, made, &m, OP_IOTA, 0, NULL, loc);
  ir_set_ints(g, place, "shape", 2, (const int64_t[]){total, 1});
  ir_set_dtype(g, place, "dtype", TY_I64);
  ir_set_int(g, place, "axis", 0);
  Node *done = mk(g, made, &m, OP_LESS_EQUAL, 2, (Value *[]){&wide->out[0], &place->out[0]}, loc);
  Node *done_i = mk(g, made, &m, OP_CAST, 1, (Value *[]){&done->out[0]}, loc);
  ir_set_dtype(g, done_i, "to", TY_I64);
  Node *which = mk(g, made, &m, OP_REDUCE_SUM, 1, (Value *[]){&done_i->out[0]}, loc);
  ir_set_ints(g, which, "axes", 1, (const int64_t[]){1});
  Node *last = mk_i64(g, made, &m, k - 1, 0, NULL, loc);
  Node *op_i = mk(g, made, &m, OP_MINIMUM, 2, (Value *[]){&which->out[0], &last->out[0]}, loc);
  Node *start = mk(g, made, &m, OP_SUB, 2, (Value *[]){ends, &cvec->out[0]}, loc);
  Node *start_p = mk(g, made, &m, OP_GATHER, 2, (Value *[]){&start->out[0], &op_i->out[0]}, loc);
  Node *static_p = mk(g, made, &m, OP_GATHER, 2, (Value *[]){&svec->out[0], &op_i->out[0]}, loc);
  Node *flat = mk(g, made, &m, OP_RESHAPE, 1, (Value *[]){&place->out[0]}, loc);
  ir_set_ints(g, flat, "shape", 1, &total);
  Node *off = mk(g, made, &m, OP_SUB, 2, (Value *[]){&flat->out[0], &start_p->out[0]}, loc);
  Node *src = mk(g, made, &m, OP_ADD, 2, (Value *[]){&off->out[0], &static_p->out[0]}, loc);
  Node *top = mk_i64(g, made, &m, total - 1, 0, NULL, loc);
  Node *src_in = mk(g, made, &m, OP_MINIMUM, 2, (Value *[]){&src->out[0], &top->out[0]}, loc);
  Node *rows = mk(g, made, &m, OP_GATHER, 2, (Value *[]){&n->out[0], &src_in->out[0]}, loc);
  ir_set_int(g, rows, "axis", axis);
  Node *sum = mk(g, made, &m, OP_REDUCE_SUM, 1, (Value *[]){&cvec->out[0]}, loc);
  ir_set_ints(g, sum, "axes", 1, (const int64_t[]){0});
  place_new(g, n, made, m, n->next);
  ir_replace_uses(g, &n->out[0], &rows->out[0]);
  rows->in[0] = &n->out[0];
  rows->out[0].id = n->out[0].id; /* the bound is the gather's, not the plain concat's */
  n->out[0].id = -1;
  b->of[rows->out[0].id] = (Bound){axis, canonical_length(b, &sum->out[0])};
  return true;
}

/* A reshape that merges the axis of run-time length with the axes after
 * it (torchvision's scores.reshape(-1)), with nothing but 1s before it:
 * the real elements stay first, len times the merged axes' extent of
 * them.  The output axis they land on, or -1. */
static int merges_tail(const Node *n, int a, int64_t *times) {
  const TensorType *x = &n->in[0]->type, *y = &n->out[0].type;
  if (n->op != OP_RESHAPE) return -1;
  for (int d = 0; d < a; d++)
    if (x->dims[d] != 1) return -1;
  int lead = 0; /* y's leading 1s */
  while (lead < y->rank && y->dims[lead] == 1) lead++;
  if (lead == y->rank) return -1;
  int64_t extent = 1;
  for (int k = a + 1; k <= x->rank; k++) {
    if (x->dims[a] * extent == y->dims[lead]) {
      /* the axes after: the same dims */
      if (y->rank - lead - 1 != x->rank - k) return -1;
      for (int j = 0; j < x->rank - k; j++)
        if (y->dims[lead + 1 + j] != x->dims[k + j]) return -1;
      *times = extent;
      return extent > 1 ? lead : -1;
    }
    if (k < x->rank) extent *= x->dims[k];
  }
  return -1;
}

static void merge_tail(Bounds *b, Node *n, Bound bd, int to, int64_t times) {
  Graph *g = b->g;
  Node *k = splat(g, (double)times, TY_I64, 0, NULL, n->loc);
  Node *m = ir_node_new(g, OP_MUL, 2, (Value *[]){bd.len, &k->out[0]}, n->loc);
  place_new(g, n, (Node *[]){k, m}, 2, n);
  b->of[n->out[0].id] = (Bound){to, canonical_length(b, &m->out[0])};
}

/* Indices idx with a negative one counted back from end (a count, or a
 * static size as a constant when end is NULL, dim), the node built
 * before n: an index into an axis of run-time length counts from its
 * real end, not the bound's. */
static Value *wrap_at(Bounds *b, Node *n, Value *idx, Value *end_len) {
  Graph *g = b->g;
  SrcLoc loc = n->loc;
  DType dt = idx->type.dtype;
  Node *zero = splat(g, 0, dt, 0, NULL, loc);
  Node *end = ir_node_new(g, OP_CAST, 1, &end_len, loc);
  ir_set_dtype(g, end, "to", dt);
  Node *neg = ir_node_new(g, OP_LESS, 2, (Value *[]){idx, &zero->out[0]}, loc);
  Node *wrapped = ir_node_new(g, OP_ADD, 2, (Value *[]){idx, &end->out[0]}, loc);
  Node *from_end = ir_node_new(g, OP_WHERE, 3, (Value *[]){&neg->out[0], &wrapped->out[0], idx}, loc);
  place_new(g, n, (Node *[]){zero, end, neg, wrapped, from_end}, 5, n);
  return &from_end->out[0];
}

/* A scatter_elements along the axis of run-time length of its indices
 * and updates (torchvision's `result[idx_in_level] = roi_align(...)`):
 * the data gets one more row on that axis, where the padded rows'
 * updates land (their indices set to it), cut off after. */
static void scatter_past_the_end(Bounds *b, Node *n, Bound bd) {
  Graph *g = b->g;
  SrcLoc loc = n->loc;
  Value *data = n->in[0];
  int r = data->type.rank, axis = bd.axis;
  int64_t dim = data->type.dims[axis], pads[2 * DL_MAX_RANK] = {0}, starts[DL_MAX_RANK] = {0},
          ends[DL_MAX_RANK], steps[DL_MAX_RANK];
  pads[r + axis] = 1;
  for (int d = 0; d < r; d++) ends[d] = data->type.dims[d], steps[d] = 1;
  Node *more = ir_node_new(g, OP_PAD, 1, &data, loc);
  ir_set_ints(g, more, "pads", 2 * r, pads);
  /* A negative index counts from the data's end (its count, when the
   * data has one on that axis), which is one row further now: read it
   * against the old end first. */
  Bound bdata = bound_of(b, data);
  Value *end = bdata.axis == axis ? bdata.len : NULL;
  if (!end) {
    Node *k = splat(g, (double)dim, TY_I64, 0, NULL, loc);
    place_new(g, n, (Node *[]){k}, 1, n);
    end = &k->out[0];
  }
  place_new(g, n, (Node *[]){more}, 1, n);
  n->in[0] = &more->out[0];
  n->in[1] = wrap_at(b, n, n->in[1], end);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "bounds: a scatter one row longer: %s", err);
  mask_operand(b, n, 1, bd, (double)dim);
  Node *cut = ir_node_new(g, OP_SLICE, 1, (Value *[]){&n->out[0]}, loc);
  ir_set_ints(g, cut, "starts", r, starts);
  ir_set_ints(g, cut, "ends", r, ends);
  ir_set_ints(g, cut, "steps", r, steps);
  place_new(g, n, (Node *[]){cut}, 1, n->next);
  ir_replace_uses(g, &n->out[0], &cut->out[0]);
  cut->in[0] = &n->out[0];
  cut->out[0].id = n->out[0].id; /* the data's bound, if it has one, is the cut's */
  n->out[0].id = -1;
}

/* Each output of run-time length gets the output holding its count
 * (shared by outputs of one count), named after the first. */
static void add_lengths(Bounds *b) {
  Graph *g = b->g;
  Arena *ar = &g->ctx->arena;
  int n = g->n_outputs, total = n;
  Value **vals = ARENA_ARRAY(ar, Value *, 2 * n + 1);
  const char **names = ARENA_ARRAY(ar, const char *, 2 * n + 1);
  int *len_of = ARENA_ARRAY(ar, int, n + 1), *axis_of = ARENA_ARRAY(ar, int, n + 1);
  for (int i = 0; i < n; i++) {
    vals[i] = g->outputs[i];
    names[i] = g->output_names[i];
  }
  for (int i = 0; i < n; i++) {
    len_of[i] = axis_of[i] = -1;
    Bound bd = bound_of(b, g->outputs[i]);
    if (bd.axis < 0) continue;
    int j = n;
    while (j < total && vals[j] != bd.len) j++;
    if (j == total) {
      vals[total] = bd.len;
      const char *name = arena_printf(ar, "%s:length", g->output_names[i]);
      for (int k = 2;; k++) {
        bool taken = false;
        for (int o = 0; o < total && !taken; o++) taken = strcmp(names[o], name) == 0;
        if (!taken) break;
        name = arena_printf(ar, "%s:length%d", g->output_names[i], k);
      }
      names[total++] = name;
    }
    len_of[i] = j;
    axis_of[i] = bd.axis;
  }
  if (total == n) return;
  const char **updates = ARENA_ARRAY(ar, const char *, n + 1);
  for (int i = 0; i < n; i++) updates[i] = ir_output_update(g, i);
  ir_set_outputs(g, total, vals, names);
  for (int i = 0; i < n; i++) {
    if (len_of[i] >= 0) ir_set_output_length(g, i, axis_of[i], len_of[i]);
    if (updates[i]) ir_set_output_update(g, i, updates[i]);
  }
}

bool ir_bounds(Graph *g) {
  bool any = false;
  for (Node *n = g->first; n && !any; n = n->next) any = needs_pass(n->op);
  if (!any || g->bounded) return true;
  g->bounded = true;
  ir_number(g);
  Bounds b = {.g = g};
  size_t n_operands = 0; /* at most one mask each */
  for (Node *n = g->first; n; n = n->next) b.n_values += n->n_out, n_operands += (size_t)n->n_in;
  b.of = calloc((size_t)b.n_values + 1, sizeof *b.of);
  typedef struct Mask {
    Node *n;
    int i;
    Bound bd;
    double fill;
    bool mean;
  } Mask;
  Mask *masks = calloc(n_operands + 1, sizeof *masks);
  if (!b.of || !masks || !sym_room(&b)) {
    free(b.of);
    free(masks);
    free(b.syms);
    free(b.slots);
    diag_error(g->ctx, (SrcLoc){0}, "out of memory");
    return false;
  }
  for (int v = 0; v < b.n_values; v++) b.of[v].axis = -1;
  intern(&b, (Sym){.kind = SYM_CONST}); /* index 0, what intern gives when memory runs out */
  int n_masks = 0;
  bool ok = true;
  for (Node *n = g->first, *next; n && ok; n = next) {
    next = n->next;
    if (n->op == OP_SHAPE_OF) {
      replace_shape_of(&b, n);
      continue;
    }
    if (n->op == OP_WITH_LENGTH) {
      ok = seed_length(&b, n);
      continue;
    }
    Bound head = n->op == OP_SLICE || n->op == OP_RESHAPE ? bound_of(&b, n->in[0]) : (Bound){-1, NULL};
    if (head.axis >= 0 && n->op == OP_SLICE && slices_head(n, head.axis)) {
      slice_head(&b, n, head);
      continue;
    }
    int64_t times;
    int merged = head.axis >= 0 ? merges_tail(n, head.axis, &times) : -1;
    if (merged >= 0) {
      merge_tail(&b, n, head, merged, times);
      continue;
    }
    if (n->op == OP_CONCAT) {
      int axis = norm_axis(ir_attr_int(n, "axis"), n->out[0].type.rank);
      bool along = false;
      for (int i = 0; i < n->n_in; i++) along |= bound_of(&b, n->in[i]).axis == axis;
      if (along) {
        ok = concat_real_rows(&b, n, axis);
        continue;
      }
    }
    Value *len = NULL, *wrap = NULL;
    Bound scatter = {-1, NULL};
    int out_axis[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    for (int i = 0; i < n->n_in && ok; i++) {
      Bound bd = bound_of(&b, n->in[i]);
      if (bd.axis < 0) continue;
      /* Rows picked by index from the axis of run-time length: the
       * indices say which (the model's own, from its real rows). */
      if (n->op == OP_GATHER && i == 0 && bd.axis == norm_axis(ir_attr_int(n, "axis"), n->in[0]->type.rank)) {
        wrap = bd.len; /* after the indices' own length is read */
        continue;
      }
      if (n->op == OP_NMS && (i == 0 || i == 1)) {
        /* Boxes of run-time length: their scores' padding is -inf, below
         * any score floor, so no padded box is kept.  (Without a floor,
         * ONNX keeps a real box scored -inf too; here it is dropped.) */
        Bound sc = bound_of(&b, n->in[1]), bx = bound_of(&b, n->in[0]);
        if (sc.axis != 2 || bx.axis != 1 || sc.len != bx.len) {
          ok = refuse(&b, n, i, bd.axis, "the boxes and their scores must have the one run-time length, on the boxes' axis");
          break;
        }
        if (i == 1) {
          masks[n_masks++] = (Mask){n, i, bd, -INFINITY, false};
          if (!ir_attr_int(n, "use_floor")) {
            Node *floor = splat(g, -INFINITY, TY_F32, 0, NULL, n->loc);
            place_new(g, n, (Node *[]){floor}, 1, n);
            n->in[4] = &floor->out[0];
            ir_set_int(g, n, "use_floor", 1);
          }
        }
        continue;
      }
      if (n->op == OP_SCATTER_ELEMENTS && i > 0) {
        Bound ix = bound_of(&b, n->in[1]), up = bound_of(&b, n->in[2]);
        if (ix.axis != norm_axis(ir_attr_int(n, "axis"), n->in[0]->type.rank) || up.axis != ix.axis ||
            up.len != ix.len) {
          ok = refuse(&b, n, i, bd.axis, "its indices and updates must have the one run-time length, on the scatter's axis");
          break;
        }
        if (i == 1) scatter = ix;
        continue;
      }
      if (n->op == OP_NONZERO) { /* of the real rows: the padding reads as 0 */
        masks[n_masks++] = (Mask){n, i, bd, 0, false};
        continue;
      }
      if (sizes_by_data(n->op)) {
        ok = refuse(&b, n, i, bd.axis, "its own result would have two run-time lengths");
        break;
      }
      if (len && len != bd.len) {
        ok = refuse(&b, n, i, bd.axis, "another operand's length is another count");
        break;
      }
      len = bd.len;
      double fill;
      bool mean, keeps;
      if (maskable(n, i, bd.axis, &fill, &mean, &keeps)) {
        masks[n_masks++] = (Mask){n, i, bd, fill, mean};
        for (int r = 0; r < n->n_out && r < 8; r++)
          if (keeps) out_axis[r] = bd.axis;
        continue;
      }
      for (int r = 0; r < n->n_out && r < 8 && ok; r++) {
        const char *why;
        int to = follow(&b, n, i, bd.axis, r, &why);
        if (to >= 0 && (to >= n->out[r].type.rank || n->out[r].type.dims[to] != n->in[i]->type.dims[bd.axis])) {
          to = -1;
          why = "the result's axis is not that one's length";
        }
        if (to < 0 || (out_axis[r] >= 0 && out_axis[r] != to)) {
          ok = refuse(&b, n, i, bd.axis, to < 0 ? why : "two operands' lengths land on different axes");
          break;
        }
        out_axis[r] = to;
      }
      bool indices = (n->op == OP_GATHER || n->op == OP_GATHER_ELEMENTS || n->op == OP_GATHER_ND) && i == 1;
      if (ok && indices) masks[n_masks++] = (Mask){n, i, bd, 0, false};
    }
    if (!ok) break;
    if (n->op == OP_NONZERO || n->op == OP_NMS) {
      Value *count = &n->out[1];
      /* PyTorch exports each x[mask] with a NonZero of its own: those of
       * one mask have one count. */
      for (const Node *m = g->first; n->op == OP_NONZERO && m != n; m = m->next)
        if (m->op == OP_NONZERO && m->in[0] == n->in[0] && m->guard == n->guard) {
          count = &((Node *)m)->out[1];
          break;
        }
      b.of[n->out[0].id] = (Bound){n->op == OP_NONZERO ? 1 : 0, canonical_length(&b, count)};
      continue;
    }
    if (n->op == OP_UNIQUE) { /* values, first places and counts; the inverse is whole */
      Value *count = canonical_length(&b, &n->out[4]);
      for (int r = 0; r < 4; r++)
        if (r != 2) b.of[n->out[r].id] = (Bound){0, count};
      continue;
    }
    for (int r = 0; len && r < n->n_out && r < 8; r++) b.of[n->out[r].id] = (Bound){out_axis[r], len};
    if (scatter.axis >= 0) scatter_past_the_end(&b, n, scatter);
    if (wrap) n->in[1] = wrap_at(&b, n, n->in[1], wrap);
  }
  if (ok) {
    for (int k = 0; k < n_masks; k++) {
      mask_operand(&b, masks[k].n, masks[k].i, masks[k].bd, masks[k].fill);
      if (masks[k].mean) mean_over_count(&b, masks[k].n, masks[k].bd);
    }
    add_lengths(&b);
  }
  if (ok && b.oom) ok = (diag_error(g->ctx, (SrcLoc){0}, "out of memory"), false);
  free(b.of);
  free(b.syms);
  free(b.slots);
  free(masks);
  return ok;
}

bool ir_trim_outputs(const Graph *g, Tensor *outputs, char *err, size_t errlen) {
  for (int i = 0; i < g->n_outputs; i++) {
    int axis, j = ir_output_length(g, i, &axis);
    if (j < 0) continue;
    const TensorType *t = &outputs[i].type;
    int64_t len = *(const int64_t *)outputs[j].data;
    if (len < 0 || len > t->dims[axis]) {
      snprintf(err, errlen, "output '%s': its run-time length %lld is outside [0, %lld]", g->output_names[i],
               (long long)len, (long long)t->dims[axis]);
      return false;
    }
    TensorType cut = *t;
    cut.dims[axis] = len;
    Tensor small;
    if (!ir_tensor_alloc(&small, &cut)) {
      snprintf(err, errlen, "out of memory");
      return false;
    }
    int64_t outer = 1, inner = ir_dtype_size(t->dtype);
    for (int d = 0; d < axis; d++) outer *= t->dims[d];
    for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
    for (int64_t o = 0; o < outer; o++)
      memcpy((char *)small.data + o * len * inner, (const char *)outputs[i].data + o * t->dims[axis] * inner,
             (size_t)(len * inner));
    ir_tensor_free(&outputs[i]);
    outputs[i] = small;
  }
  return true;
}
