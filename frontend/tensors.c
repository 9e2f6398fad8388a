/* Builtins that make tensors and index them, with PyTorch's names and
 * argument orders: zeros, ones, full (and their _like forms), arange,
 * eye, triu, tril, masked_fill, gather and index_select.  Takes a Call
 * bound as for layers.c's builtins, returns the value (a poison after
 * reporting).  Constructors are const splats or compositions of iota
 * (ops.def): they depend on no input, so codegen computes them once. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"

static Val poison(void) { return val_poison(); }

/* ---- small graph builders; each passes a NULL operand through ---- */

Value *fe_iota(Lower *l, const TensorType *t, int axis, double start, double step, SrcLoc loc) {
  Node *n = fe_node(l, OP_IOTA, 0, NULL, loc);
  ir_set_ints(l->g, n, "shape", t->rank, t->dims);
  ir_set_dtype(l->g, n, "dtype", t->dtype);
  ir_set_int(l->g, n, "axis", axis);
  ir_set_float(l->g, n, "start", start);
  ir_set_float(l->g, n, "step", step);
  return fe_emit(l, n);
}

static Value *mk_op(Lower *l, OpKind op, int n_in, Value **in, SrcLoc loc) {
  for (int i = 0; i < n_in; i++)
    if (!in[i]) return NULL;
  return fe_emit(l, fe_node(l, op, n_in, in, loc));
}

static Value *mk_cast(Lower *l, Value *x, DType to, SrcLoc loc) {
  if (!x || x->type.dtype == to) return x;
  Node *n = fe_node(l, OP_CAST, 1, &x, loc);
  ir_set_dtype(l->g, n, "to", to);
  return fe_emit(l, n);
}

/* ---- arguments ---- */

/* A dtype argument (f32, or "f32"); def when not given. */
static bool arg_dtype(Lower *l, const Call *c, int i, DType def, DType *out) {
  const Val *v = &c->args[i];
  *out = def;
  if (v->kind == V_NONE) return true;
  if (v->kind == V_DTYPE) {
    *out = v->dt;
    return true;
  }
  if (v->kind == V_STR && ir_dtype_from_name(v->s, out)) return true;
  fe_arg_error(l, c, i, "a dtype (f32, f16, bf16, i8, i32, i64, bool, u8)");
  return false;
}

/* A shape: positive ints given as one list or one by one (zeros(2, 3),
 * zeros([2, 3]), zeros(shape=[2, 3])), into t. */
static bool arg_shape(Lower *l, const Call *c, int i, TensorType *t) {
  const Val *items = c->rest;
  int n = c->n_rest;
  SrcLoc loc = n ? c->rest_locs[0] : c->loc;
  if (c->args[i].kind != V_NONE) {
    if (n) {
      fe_error(l, c->rest_locs[0], "%s: the shape is given twice (by position and as 'shape')", c->name);
      return false;
    }
    items = &c->args[i];
    n = 1;
    loc = c->locs[i];
  }
  if (n == 1 && items[0].kind == V_LIST) {
    n = items[0].list.n;
    items = items[0].list.v;
  }
  bool ok = n <= DL_MAX_RANK;
  for (int k = 0; ok && k < n; k++) ok = items[k].kind == V_INT && items[k].i >= 1;
  if (!ok) {
    fe_error(l, loc, "%s: the shape must be at most %d positive ints (zeros(2, 3) or zeros([2, 3]))", c->name,
             (int)DL_MAX_RANK);
    return false;
  }
  t->rank = n;
  for (int k = 0; k < n; k++) t->dims[k] = items[k].i;
  if (ir_type_numel(t) < 0) {
    char tb[IR_TYPE_STR_MAX];
    fe_error(l, loc, "%s: %s is too large", c->name, ir_type_str(t, tb, sizeof tb));
    return false;
  }
  return true;
}

/* A number of the dtype: ints only for an integer dtype, 0 or 1 for bool. */
static bool value_fits(Lower *l, const Call *c, int i, double v, DType dt) {
  if (dt == TY_BOOL ? (v == 0 || v == 1) : ir_dtype_is_float(dt) || v == floor(v)) return true;
  fe_arg_error(l, c, i, arena_printf(l->a, "a value of %s", ir_dtype_name(dt)));
  return false;
}

/* ---- constructors ---- */

/* zeros(*shape, dtype=f32), ones(...): const splats. */
static Val bi_zeros(Lower *l, const Call *c) {
  TensorType t = {.dtype = TY_F32};
  if (!arg_shape(l, c, 0, &t) || !arg_dtype(l, c, 1, TY_F32, &t.dtype)) return poison();
  return val_tensor(fe_fill(l, strcmp(c->name, "ones") == 0, &t, c->loc));
}

/* full(shape, value, dtype): the dtype follows the value as PyTorch's
 * does (an int gives i64, a float f32, a bool bool). */
static Val bi_full(Lower *l, const Call *c) {
  TensorType t = {.dtype = TY_F32};
  const Val *v = &c->args[1];
  if (!arg_shape(l, c, 0, &t)) return poison();
  if (!val_is_num(v) && v->kind != V_BOOL) {
    fe_arg_error(l, c, 1, "a number");
    return poison();
  }
  DType def = v->kind == V_INT ? TY_I64 : v->kind == V_BOOL ? TY_BOOL : TY_F32;
  double value = v->kind == V_BOOL ? v->b : val_num(v);
  if (!arg_dtype(l, c, 2, def, &t.dtype) || !value_fits(l, c, 1, value, t.dtype)) return poison();
  return val_tensor(fe_fill(l, value, &t, c->loc));
}

/* zeros_like(x, dtype=x's), ones_like, full_like(x, value, dtype=x's). */
static Val bi_like(Lower *l, const Call *c) {
  Value *x;
  bool full = strcmp(c->name, "full_like") == 0;
  if (!fe_arg_tensor(l, c, 0, &x)) return poison();
  TensorType t = x->type;
  double value = strcmp(c->name, "ones_like") == 0;
  if (full) {
    const Val *v = &c->args[1];
    if (!val_is_num(v) && v->kind != V_BOOL) {
      fe_arg_error(l, c, 1, "a number");
      return poison();
    }
    value = v->kind == V_BOOL ? v->b : val_num(v);
  }
  if (!arg_dtype(l, c, full ? 2 : 1, x->type.dtype, &t.dtype)) return poison();
  if (full && !value_fits(l, c, 1, value, t.dtype)) return poison();
  return val_tensor(fe_fill(l, value, &t, c->loc));
}

/* arange(end), arange(start, end, step=1): torch.arange's positions; i64
 * when every bound is an int, else f32; end is excluded. */
static Val bi_arange(Lower *l, const Call *c) {
  const Val *a[3] = {&c->args[0], &c->args[1], &c->args[2]};
  for (int i = 0; i < 3; i++)
    if (a[i]->kind != V_NONE && !val_is_num(a[i])) {
      fe_arg_error(l, c, i, "a number");
      return poison();
    }
  if (a[0]->kind == V_NONE && a[1]->kind == V_NONE) {
    fe_error(l, c->loc, "arange: missing argument 'end'");
    return poison();
  }
  /* One bound alone is the end. */
  bool end_only = a[1]->kind == V_NONE;
  double start = end_only ? 0 : a[0]->kind == V_NONE ? 0 : val_num(a[0]);
  double end = end_only ? val_num(a[0]) : val_num(a[1]);
  double step = a[2]->kind == V_NONE ? 1 : val_num(a[2]);
  bool ints = true;
  for (int i = 0; i < 3; i++) ints &= a[i]->kind != V_FLOAT;
  DType dt;
  if (!arg_dtype(l, c, 3, ints ? TY_I64 : TY_F32, &dt)) return poison();
  if (step == 0) {
    fe_error(l, c->locs[2], "arange: step must not be 0");
    return poison();
  }
  double count = ceil((end - start) / step);
  if (!(count >= 1)) {
    fe_error(l, c->loc, "arange: %g to %g by %g is empty (empty tensors are not supported)", start, end, step);
    return poison();
  }
  if (count > (double)DL_MAX_ELEMS) {
    fe_error(l, c->loc, "arange: %g to %g by %g is too long", start, end, step);
    return poison();
  }
  if (dt == TY_BOOL || (!ir_dtype_is_float(dt) && (start != floor(start) || step != floor(step)))) {
    fe_arg_error(l, c, 3, "a dtype that holds the range (a float type for fractional bounds)");
    return poison();
  }
  TensorType t = {.dtype = dt, .rank = 1, .dims = {(int64_t)count}};
  return val_tensor(fe_iota(l, &t, 0, start, step, c->loc));
}

/* Where col - row (shifted by k) compares with 0 as op says, over the
 * rows x cols of a matrix: a bool [rows, cols]. */
static Value *diagonal_mask(Lower *l, int64_t rows, int64_t cols, int64_t k, OpKind op, SrcLoc loc) {
  TensorType rt = {.dtype = TY_I64, .rank = 2, .dims = {rows, 1}}, ct = {.dtype = TY_I64, .rank = 2, .dims = {1, cols}};
  Value *in[2] = {fe_iota(l, &ct, 1, (double)-k, 1, loc), fe_iota(l, &rt, 0, 0, 1, loc)};
  return mk_op(l, op, 2, in, loc);
}

/* eye(n, m=n, dtype=f32): ones on the diagonal. */
static Val bi_eye(Lower *l, const Call *c) {
  int64_t n, m;
  DType dt;
  bool ok = fe_arg_pos_int(l, c, 0, 1, &n);
  ok &= fe_arg_pos_int(l, c, 1, 0, &m);
  ok &= arg_dtype(l, c, 2, TY_F32, &dt);
  if (!ok) return poison();
  if (c->args[1].kind == V_NONE) m = n;
  TensorType t = {.dtype = dt, .rank = 2, .dims = {n, m}};
  if (ir_type_numel(&t) < 0) {
    fe_error(l, c->loc, "eye: %" PRId64 " x %" PRId64 " is too large", n, m);
    return poison();
  }
  return val_tensor(mk_cast(l, diagonal_mask(l, n, m, 0, OP_EQUAL, c->loc), dt, c->loc));
}

/* triu(x, diagonal=0) keeps col - row >= diagonal of the last two dims,
 * tril(x, diagonal=0) col - row <= diagonal; the rest is 0 (false). */
static Val bi_triangle(Lower *l, const Call *c) {
  Value *x;
  int64_t k;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 0, &k);
  if (!ok) return poison();
  const TensorType *t = &x->type;
  if (t->rank < 2) {
    char tb[IR_TYPE_STR_MAX];
    fe_error(l, c->loc, "%s expects a matrix or a batch of them [..., rows, cols], got %s", c->name,
             ir_type_str(t, tb, sizeof tb));
    return poison();
  }
  bool upper = strcmp(c->name, "triu") == 0;
  Value *in[3] = {diagonal_mask(l, t->dims[t->rank - 2], t->dims[t->rank - 1], k,
                                upper ? OP_GREATER_EQUAL : OP_LESS_EQUAL, c->loc),
                  x, fe_const(l, 0, t->dtype, c->loc)};
  return val_tensor(mk_op(l, OP_WHERE, 3, in, c->loc));
}

/* masked_fill(x, mask, value): value where the bool mask is true. */
static Val bi_masked_fill(Lower *l, const Call *c) {
  Value *x, *mask;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_tensor(l, c, 1, &mask);
  if (!ok) return poison();
  if (mask->type.dtype != TY_BOOL) {
    fe_arg_error(l, c, 1, "a bool tensor (greater(x, 0) gives one; x > 0 gives a mask in x's dtype)");
    return poison();
  }
  const Val *v = &c->args[2];
  Value *fill = NULL;
  if (v->kind == V_TENSOR) {
    fill = v->t;
  } else if (val_is_num(v) || v->kind == V_BOOL) {
    double value = v->kind == V_BOOL ? v->b : val_num(v);
    if (!value_fits(l, c, 2, value, x->type.dtype)) return poison();
    fill = fe_const(l, value, x->type.dtype, c->locs[2]);
  } else {
    fe_arg_error(l, c, 2, "a number or a tensor");
    return poison();
  }
  Value *in[3] = {mask, fill, x};
  return val_tensor(mk_op(l, OP_WHERE, 3, in, c->loc));
}

/* ---- indexing ---- */

/* gather(x, axis, indices): torch.gather, gather_elements in PyTorch's
 * order; index_select(x, axis, indices): the slices of x along axis that
 * indices name (ops.def gather: any shape of indices). */
static Val bi_gather(Lower *l, const Call *c) {
  Value *x, *idx;
  int64_t axis;
  int a;
  bool ok = fe_arg_tensor(l, c, 0, &x);
  ok &= fe_arg_int(l, c, 1, 0, &axis);
  ok &= fe_arg_tensor(l, c, 2, &idx);
  if (!ok || !fe_axis(l, c, 1, axis, x->type.rank, &a)) return poison();
  if (idx->type.dtype != TY_I32 && idx->type.dtype != TY_I64) {
    fe_arg_error(l, c, 2, "an i32 or i64 tensor");
    return poison();
  }
  Value *in[2] = {x, idx};
  Node *n = fe_node(l, strcmp(c->name, "gather") == 0 ? OP_GATHER_ELEMENTS : OP_GATHER, 2, in, c->loc);
  ir_set_int(l->g, n, "axis", a);
  return val_tensor(fe_emit(l, n));
}

static const Builtin tensor_builtins[] = {
    {"zeros", bi_zeros, "|shape,dtype", true},
    {"ones", bi_zeros, "|shape,dtype", true},
    {"full", bi_full, "shape,value|dtype", false},
    {"zeros_like", bi_like, "x|dtype", false},
    {"ones_like", bi_like, "x|dtype", false},
    {"full_like", bi_like, "x,value|dtype", false},
    {"arange", bi_arange, "|start,end,step,dtype", false},
    {"eye", bi_eye, "n|m,dtype", false},
    {"triu", bi_triangle, "x|diagonal", false},
    {"tril", bi_triangle, "x|diagonal", false},
    {"masked_fill", bi_masked_fill, "x,mask,value", false},
    {"gather", bi_gather, "x,axis,indices", false},
    {"index_select", bi_gather, "x,axis,indices", false},
};

const Builtin *fe_tensor_builtin(const char *name) {
  for (size_t i = 0; i < ARRAY_LEN(tensor_builtins); i++)
    if (strcmp(tensor_builtins[i].name, name) == 0) return &tensor_builtins[i];
  return NULL;
}

int fe_tensor_builtin_names(const char **out, int max) {
  int n = 0;
  for (size_t i = 0; i < ARRAY_LEN(tensor_builtins); i++)
    if (out && n < max) out[n++] = tensor_builtins[i].name;
  return out ? n : (int)ARRAY_LEN(tensor_builtins);
}
