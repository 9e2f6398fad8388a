/* Shape rules: for each rule named in ops.def, the result types of a node
 * from its operand types and attributes, or false with a message for the
 * person who wrote the model.  The IR parser runs these on hand-written
 * text, so attributes are checked for presence and kind here rather than
 * trusted, and every sum or product of dims is checked for overflow. */
#include "ir.h"
#include "eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---- messages ---- */

__attribute__((format(printf, 3, 4))) static bool fail(char *err, size_t errlen, const char *fmt,
                                                        ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return false;
}

static const char *op_name(const Node *n) { return ir_ops[n->op].name; }

/* Returned by value so several can sit in one printf: a struct temporary
 * lives until the end of the full expression (C11 6.2.4p8). */
typedef struct TypeText {
  char s[IR_TYPE_STR_MAX];
} TypeText;

static TypeText ts(const TensorType *t) {
  TypeText r;
  ir_type_str(t, r.s, sizeof r.s);
  return r;
}

typedef struct IntsText {
  char s[160];
} IntsText;

static IntsText ints_text(const int64_t *v, int count) {
  IntsText r;
  size_t used = (size_t)snprintf(r.s, sizeof r.s, "[");
  for (int i = 0; i < count; i++) {
    if (used + 28 >= sizeof r.s) {
      snprintf(r.s + used, sizeof r.s - used, ", ...");
      used = strlen(r.s);
      break;
    }
    used += (size_t)snprintf(r.s + used, sizeof r.s - used, "%s%" PRId64, i ? ", " : "", v[i]);
  }
  snprintf(r.s + used, sizeof r.s - used, "]");
  return r;
}

/* ---- checked int64 arithmetic (any signs: a model's dims may make
 * an extent negative before a rule refuses it) ---- */

static bool add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }

static bool mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* ---- operands and attributes ---- */

/* Operand types come from declarations in hand-written IR too, so a rank
 * or dim that would break the arithmetic below is caught first. */
static bool operands_ok(const Node *n, char *err, size_t errlen) {
  for (int i = 0; i < n->n_in; i++) {
    const TensorType *t = &n->in[i]->type;
    if (t->rank < 0 || t->rank > DL_MAX_RANK || (unsigned)t->dtype >= TY_COUNT)
      return fail(err, errlen, "%s: operand %d has an invalid type (rank %d)", op_name(n), i + 1,
                  t->rank);
    for (int d = 0; d < t->rank; d++) {
      if (t->dims[d] < 0)
        return fail(err, errlen, "%s: operand %d has type %s: a dim is negative", op_name(n), i + 1,
                    ts(t).s);
      if (t->dims[d] > DL_MAX_ELEMS)
        return fail(err, errlen, "%s: operand %d has type %s, larger than %" PRId64 " elements",
                    op_name(n), i + 1, ts(t).s, DL_MAX_ELEMS);
    }
  }
  return true;
}

static const TensorType *in_type(const Node *n, int i) { return &n->in[i]->type; }

static const Attr *get_attr(const Node *n, const char *name, AttrKind kind, const char *kind_name,
                            char *err, size_t errlen) {
  const Attr *a = ir_attr(n, name);
  if (!a) {
    fail(err, errlen, "%s needs attribute '%s'", op_name(n), name);
    return NULL;
  }
  if (a->kind != kind) {
    fail(err, errlen, "%s: attribute '%s' must be %s", op_name(n), name, kind_name);
    return NULL;
  }
  return a;
}

static bool attr_int(const Node *n, const char *name, int64_t *v, char *err, size_t errlen) {
  const Attr *a = get_attr(n, name, AK_INT, "an integer", err, errlen);
  if (!a) return false;
  *v = a->i;
  return true;
}

static bool attr_flag(const Node *n, const char *name, bool *v, char *err, size_t errlen) {
  int64_t i;
  if (!attr_int(n, name, &i, err, errlen)) return false;
  if (i != 0 && i != 1)
    return fail(err, errlen, "%s: %s must be 0 or 1, got %" PRId64, op_name(n), name, i);
  *v = i == 1;
  return true;
}

/* An integer attribute that must be at least lo. */
static bool attr_int_min(const Node *n, const char *name, int64_t lo, int64_t *v, char *err,
                         size_t errlen) {
  if (!attr_int(n, name, v, err, errlen)) return false;
  if (*v < lo)
    return fail(err, errlen, "%s: %s must be >= %" PRId64 ", got %" PRId64, op_name(n), name, lo,
                *v);
  return true;
}

/* A list attribute; want < 0 accepts any length. */
static bool attr_ints(const Node *n, const char *name, int want, int *count, const int64_t **v,
                      char *err, size_t errlen) {
  const Attr *a = get_attr(n, name, AK_INTS, "a list of integers", err, errlen);
  if (!a) return false;
  if (want >= 0 && a->ints.n != want)
    return fail(err, errlen, "%s: %s must have %d value%s, got %s", op_name(n), name, want,
                want == 1 ? "" : "s", ints_text(a->ints.v, a->ints.n).s);
  *count = a->ints.n;
  *v = a->ints.v;
  return true;
}

/* A list of exactly `want` values, each >= lo. */
static bool attr_ints_min(const Node *n, const char *name, int want, int64_t lo,
                          const int64_t **v, char *err, size_t errlen) {
  int count;
  if (!attr_ints(n, name, want, &count, v, err, errlen)) return false;
  for (int i = 0; i < count; i++)
    if ((*v)[i] < lo)
      return fail(err, errlen, "%s: %s values must be >= %" PRId64 ", got %s", op_name(n), name,
                  lo, ints_text(*v, count).s);
  return true;
}

static bool attr_axis(const Node *n, const TensorType *t, int *axis, char *err, size_t errlen) {
  int64_t a;
  if (!attr_int(n, "axis", &a, err, errlen)) return false;
  if (a < 0 || a >= t->rank)
    return fail(err, errlen, "%s: axis %" PRId64 " is out of range for %s (rank %d)", op_name(n), a,
                ts(t).s, t->rank);
  *axis = (int)a;
  return true;
}

static bool need_float(const Node *n, const TensorType *t, char *err, size_t errlen) {
  if (!ir_dtype_is_float(t->dtype))
    return fail(err, errlen, "%s needs a floating-point input, got %s", op_name(n), ts(t).s);
  return true;
}

/* bool is a truth value, not a number: arithmetic on one needs a cast. */
static bool need_numbers(const Node *n, char *err, size_t errlen) {
  for (int i = 0; i < n->n_in; i++)
    if (in_type(n, i)->dtype == TY_BOOL)
      return fail(err, errlen, "%s: operand %d is %s, and bool is not a number (cast it first)",
                  op_name(n), i + 1, ts(in_type(n, i)).s);
  return true;
}

static bool same_dtype(const Node *n, const TensorType *a, const TensorType *b, char *err,
                       size_t errlen) {
  if (a->dtype != b->dtype)
    return fail(err, errlen, "%s: dtype mismatch %s vs %s", op_name(n), ir_dtype_name(a->dtype),
                ir_dtype_name(b->dtype));
  return true;
}

/* The result dtype of a product of operands in dt: int8 accumulates in
 * int32, everything else stays in its own type. */
static DType product_dtype(DType dt) { return dt == TY_I8 ? TY_I32 : dt; }

static bool need_rank(const Node *n, const TensorType *t, int rank, const char *layout, char *err,
                      size_t errlen) {
  if (t->rank != rank)
    return fail(err, errlen, "%s expects a %d-d input %s, got %s", op_name(n), rank, layout,
                ts(t).s);
  return true;
}

/* An operand that must have exactly type `want` (dims and dtype). */
static bool need_type(const Node *n, int idx, const char *what, const TensorType *want,
                      const char *why, char *err, size_t errlen) {
  const TensorType *t = in_type(n, idx);
  if (!ir_type_eq(t, want))
    return fail(err, errlen, "%s: %s must be %s%s, got %s", op_name(n), what, ts(want).s, why,
                ts(t).s);
  return true;
}

/* ---- elementwise ---- */

bool shape_unary(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  out[0] = *in_type(n, 0);
  return true;
}

bool shape_unary_float(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_float(n, in_type(n, 0), err, errlen)) return false;
  out[0] = *in_type(n, 0);
  return true;
}

bool shape_fp_round(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const Attr *f = get_attr(n, "format", AK_STR, "a string", err, errlen);
  if (!f) return false;
  if (!ir_narrow_find(f->s)) return fail(err, errlen, "fp_round: unknown format \"%s\"", f->s);
  if (in_type(n, 0)->dtype != TY_F32) return fail(err, errlen, "fp_round takes f32");
  out[0] = *in_type(n, 0);
  return true;
}

bool shape_cast(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const Attr *to = get_attr(n, "to", AK_DTYPE, "a dtype", err, errlen);
  if (!to) return false;
  if ((unsigned)to->dt >= TY_COUNT) return fail(err, errlen, "cast: invalid target dtype");
  out[0] = *in_type(n, 0);
  out[0].dtype = to->dt;
  return true;
}

/* x and either the scale attribute or a scale operand (f32) that
 * broadcasts into x without growing it. */
/* An optional zero_point attribute, which must fit the quantized dtype
 * (u8, else int8). */
static bool zero_point_ok(const Node *n, DType q, char *err, size_t errlen) {
  const Attr *z = ir_attr(n, "zero_point");
  if (!z) return true;
  if (z->kind != AK_INT) return fail(err, errlen, "%s: zero_point must be an integer", op_name(n));
  if (q == TY_U8 && (z->i < 0 || z->i > 255))
    return fail(err, errlen, "%s: zero_point %" PRId64 " is outside u8's [0, 255]", op_name(n), z->i);
  if (q != TY_U8 && (z->i < -128 || z->i > 127))
    return fail(err, errlen, "%s: zero_point %" PRId64 " is outside int8's [-128, 127]", op_name(n), z->i);
  return true;
}

/* The dtype quantize gives: i8, or u8 with to=u8. */
static bool quantized_dtype(const Node *n, DType *q, char *err, size_t errlen) {
  const Attr *to = ir_attr(n, "to");
  *q = TY_I8;
  if (!to) return true;
  if (to->kind != AK_DTYPE || (to->dt != TY_I8 && to->dt != TY_U8))
    return fail(err, errlen, "quantize: to must be i8 or u8, got %s",
                to->kind == AK_DTYPE ? ir_dtype_name(to->dt) : "no dtype");
  *q = to->dt;
  return true;
}

/* q: the quantized side's dtype, for the zero point's range. */
static bool quant_operands(const Node *n, DType q, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!zero_point_ok(n, q, err, errlen)) return false;
  const Attr *a = ir_attr(n, "scale");
  if (n->n_in == 1) {
    if (!a) return fail(err, errlen, "%s needs a scale: the scale attribute or a scale operand", op_name(n));
    if (a->kind != AK_FLOAT) return fail(err, errlen, "%s: scale must be a number", op_name(n));
    float s = (float)a->f;
    if (!(s > 0) || isinf(s))
      return fail(err, errlen, "%s: scale must be a positive finite f32, got %g", op_name(n), a->f);
    return true;
  }
  if (a) return fail(err, errlen, "%s: give the scale as the attribute or as an operand, not both", op_name(n));
  const TensorType *x = in_type(n, 0), *s = in_type(n, 1);
  if (s->dtype != TY_F32)
    return fail(err, errlen, "%s: the scale operand must be f32, got %s", op_name(n), ts(s).s);
  int64_t dims[DL_MAX_RANK];
  int rank;
  if (!ir_broadcast_dims(x->dims, x->rank, s->dims, s->rank, dims, &rank) || rank != x->rank ||
      memcmp(dims, x->dims, sizeof(int64_t) * (size_t)rank) != 0)
    return fail(err, errlen, "%s: scale %s does not broadcast into %s", op_name(n), ts(s).s, ts(x).s);
  return true;
}

bool shape_quantize(const Node *n, TensorType *out, char *err, size_t errlen) {
  DType q;
  if (!quantized_dtype(n, &q, err, errlen)) return false;
  if (!quant_operands(n, q, err, errlen)) return false;
  if (!need_float(n, in_type(n, 0), err, errlen)) return false;
  out[0] = *in_type(n, 0);
  out[0].dtype = q;
  return true;
}

bool shape_dequantize(const Node *n, TensorType *out, char *err, size_t errlen) {
  const TensorType *q = in_type(n, 0); /* the arity is the verifier's */
  if (!quant_operands(n, q->dtype, err, errlen)) return false;
  if (q->dtype != TY_I8 && q->dtype != TY_U8 && q->dtype != TY_I32)
    return fail(err, errlen, "dequantize expects i8, u8 or i32, got %s", ts(q).s);
  out[0] = *q;
  out[0].dtype = TY_F32;
  return true;
}

bool shape_binary(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *a = in_type(n, 0), *b = in_type(n, 1);
  if (!same_dtype(n, a, b, err, errlen)) return false;
  out[0].dtype = a->dtype;
  if (!ir_broadcast_dims(a->dims, a->rank, b->dims, b->rank, out[0].dims, &out[0].rank))
    return fail(err, errlen, "%s: cannot broadcast %s with %s", op_name(n), ts(a).s, ts(b).s);
  return true;
}

bool shape_bits(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *a = in_type(n, 0);
  DType dt = a->dtype;
  if (ir_dtype_is_float(dt) || dt == TY_BOOL) return fail(err, errlen, "%s needs integers, got %s", op_name(n), ts(a).s);
  if (n->n_in == 1) {
    out[0] = *a;
    return true;
  }
  return shape_binary(n, out, err, errlen);
}

bool shape_bitcast(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const Attr *to = get_attr(n, "to", AK_DTYPE, "a dtype", err, errlen);
  if (!to) return false;
  const TensorType *x = in_type(n, 0);
  if ((unsigned)to->dt >= TY_COUNT) return fail(err, errlen, "bitcast: invalid target dtype");
  if (ir_dtype_size(to->dt) != ir_dtype_size(x->dtype))
    return fail(err, errlen, "bitcast: %s and %s differ in size", ir_dtype_name(x->dtype), ir_dtype_name(to->dt));
  if (to->dt == TY_BOOL && x->dtype != TY_BOOL)
    return fail(err, errlen, "bitcast: into bool only from bool (a bool is 0 or 1)");
  out[0] = *x;
  out[0].dtype = to->dt;
  return true;
}

bool shape_mod(const Node *n, TensorType *out, char *err, size_t errlen) {
  bool fmod_flag;
  if (!attr_flag(n, "fmod", &fmod_flag, err, errlen)) return false;
  return shape_binary(n, out, err, errlen);
}

/* ---- bool results: comparisons, tests, logic, where ---- */

bool shape_compare(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *a = in_type(n, 0), *b = in_type(n, 1);
  if (!same_dtype(n, a, b, err, errlen)) return false;
  if (a->dtype == TY_BOOL && n->op != OP_EQUAL && n->op != OP_NOT_EQUAL)
    return fail(err, errlen, "%s: bool operands have no order (equal and not_equal take them)",
                op_name(n));
  out[0].dtype = TY_BOOL;
  if (!ir_broadcast_dims(a->dims, a->rank, b->dims, b->rank, out[0].dims, &out[0].rank))
    return fail(err, errlen, "%s: cannot broadcast %s with %s", op_name(n), ts(a).s, ts(b).s);
  return true;
}

bool shape_float_test(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_float(n, in_type(n, 0), err, errlen)) return false;
  out[0] = *in_type(n, 0);
  out[0].dtype = TY_BOOL;
  return true;
}

static bool need_bool(const Node *n, int i, const char *what, char *err, size_t errlen) {
  const TensorType *t = in_type(n, i);
  if (t->dtype != TY_BOOL)
    return fail(err, errlen, "%s: %s must be bool, got %s (a comparison such as greater gives one)",
                op_name(n), what, ts(t).s);
  return true;
}

bool shape_logical(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  for (int i = 0; i < n->n_in; i++) {
    char what[24];
    snprintf(what, sizeof what, n->n_in == 1 ? "the operand" : "operand %d", i + 1);
    if (!need_bool(n, i, what, err, errlen)) return false;
  }
  const TensorType *a = in_type(n, 0);
  out[0] = *a;
  if (n->n_in == 2) {
    const TensorType *b = in_type(n, 1);
    if (!ir_broadcast_dims(a->dims, a->rank, b->dims, b->rank, out[0].dims, &out[0].rank))
      return fail(err, errlen, "%s: cannot broadcast %s with %s", op_name(n), ts(a).s, ts(b).s);
  }
  return true;
}

bool shape_where(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_bool(n, 0, "the condition (operand 1)", err, errlen)) return false;
  const TensorType *c = in_type(n, 0), *a = in_type(n, 1), *b = in_type(n, 2);
  if (!same_dtype(n, a, b, err, errlen)) return false;
  int64_t ab[DL_MAX_RANK];
  int rab;
  if (!ir_broadcast_dims(a->dims, a->rank, b->dims, b->rank, ab, &rab) ||
      !ir_broadcast_dims(c->dims, c->rank, ab, rab, out[0].dims, &out[0].rank))
    return fail(err, errlen, "%s: cannot broadcast %s, %s and %s together", op_name(n), ts(c).s, ts(a).s,
                ts(b).s);
  out[0].dtype = a->dtype;
  return true;
}

bool shape_check(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_bool(n, 1, "the condition (operand 2)", err, errlen)) return false;
  if (ir_type_numel(in_type(n, 1)) != 1)
    return fail(err, errlen, "%s: the condition must hold one value, not %s", op_name(n), ts(in_type(n, 1)).s);
  out[0] = *in_type(n, 0);
  return true;
}

/* ---- loops ---- */

static bool need_one_bool(const Node *n, int i, const char *what, char *err, size_t errlen) {
  const TensorType *t = in_type(n, i);
  if (t->dtype != TY_BOOL || ir_type_numel(t) != 1)
    return fail(err, errlen, "%s: %s must be one bool, not %s", op_name(n), what, ts(t).s);
  return true;
}

bool shape_loop_begin(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_one_bool(n, 0, "enter (operand 1)", err, errlen)) return false;
  for (int i = 1; i < n->n_in; i++) out[i - 1] = *in_type(n, i);
  return true;
}

bool shape_loop_end(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  int k = n->n_out;
  if (n->n_in != 2 * k + 1)
    return fail(err, errlen, "%s: takes the carried values, keep and as many next values: an odd count, not %d",
                op_name(n), n->n_in);
  if (!need_one_bool(n, k, "keep", err, errlen)) return false;
  for (int i = 0; i < k; i++) {
    if (!ir_type_eq(in_type(n, i), in_type(n, k + 1 + i)))
      return fail(err, errlen, "%s: carried value %d is %s, its next %s", op_name(n), i + 1, ts(in_type(n, i)).s,
                  ts(in_type(n, k + 1 + i)).s);
    out[i] = *in_type(n, i);
  }
  return true;
}

/* ---- reductions and normalizations ---- */

bool shape_reduce(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int count;
  const int64_t *axes;
  bool keep;
  if (!attr_ints(n, "axes", -1, &count, &axes, err, errlen)) return false;
  if (!attr_flag(n, "keepdims", &keep, err, errlen)) return false;
  if (count == 0) return fail(err, errlen, "%s: axes must not be empty", op_name(n));
  bool reduced[DL_MAX_RANK] = {false};
  for (int i = 0; i < count; i++) {
    if (axes[i] < 0 || axes[i] >= x->rank)
      return fail(err, errlen, "%s: axis %" PRId64 " is out of range for %s (rank %d)", op_name(n),
                  axes[i], ts(x).s, x->rank);
    if (i > 0 && axes[i] <= axes[i - 1])
      return fail(err, errlen, "%s: axes must be strictly ascending, got %s", op_name(n),
                  ints_text(axes, count).s);
    reduced[axes[i]] = true;
  }
  out[0].dtype = x->dtype;
  out[0].rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!reduced[d])
      out[0].dims[out[0].rank++] = x->dims[d];
    else if (keep)
      out[0].dims[out[0].rank++] = 1;
  }
  return true;
}

bool shape_argmax(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int axis;
  bool keep;
  if (!attr_axis(n, x, &axis, err, errlen)) return false;
  if (!attr_flag(n, "keepdims", &keep, err, errlen)) return false;
  out[0].dtype = TY_I64;
  out[0].rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (d != axis)
      out[0].dims[out[0].rank++] = x->dims[d];
    else if (keep)
      out[0].dims[out[0].rank++] = 1;
  }
  return true;
}

bool shape_softmax(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int axis;
  if (!need_float(n, x, err, errlen)) return false;
  if (!attr_axis(n, x, &axis, err, errlen)) return false;
  out[0] = *x;
  return true;
}

/* A negative eps can make the variance plus eps zero or negative: inf and
 * nan on every element, with nothing to say why. */
static bool eps_ok(const Node *n, char *err, size_t errlen) {
  double eps = ir_attr_float(n, "eps");
  if (eps >= 0 && eps <= 1e30) return true;
  return fail(err, errlen, "%s: eps must be a finite number >= 0, got %g", ir_ops[n->op].name, eps);
}

bool shape_layernorm(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!eps_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int axis;
  if (!need_float(n, x, err, errlen)) return false;
  if (!attr_axis(n, x, &axis, err, errlen)) return false;
  TensorType want = ir_type_make(x->dtype, x->rank - axis, x->dims + axis);
  char why[64];
  snprintf(why, sizeof why, " (the dims of x from axis %d)", axis);
  static const char *const names[] = {"x", "weight", "bias"};
  for (int i = 1; i < n->n_in; i++)
    if (!need_type(n, i, names[i], &want, why, err, errlen)) return false;
  out[0] = *x;
  return true;
}

/* A conv's, pool's, resize's or group_norm's layout attribute: absent or "nchw"
 * (PyTorch's), or "nhwc" (channels last, the nhwc pass's). */
static bool layout_of(const Node *n, bool *nhwc, char *err, size_t errlen) {
  const Attr *layout = ir_attr(n, "layout");
  *nhwc = layout && layout->kind == AK_STR && strcmp(layout->s, "nhwc") == 0;
  if (layout && (layout->kind != AK_STR || (!*nhwc && strcmp(layout->s, "nchw") != 0)))
    return fail(err, errlen, "%s: layout must be \"nchw\" or \"nhwc\"", op_name(n));
  return true;
}

bool shape_group_norm(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!eps_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  bool nhwc;
  if (!layout_of(n, &nhwc, err, errlen)) return false;
  if (x->rank < 2)
    return fail(err, errlen, "group_norm expects an input %s of rank >= 2, got %s", nhwc ? "[N, ..., C]" : "[N, C, ...]",
                ts(x).s);
  if (!need_float(n, x, err, errlen)) return false;
  int cx = nhwc ? x->rank - 1 : 1;
  int64_t groups = ir_attr_int(n, "groups");
  if (groups < 1 || x->dims[cx] % groups)
    return fail(err, errlen, "group_norm: groups must be >= 1 and divide the %" PRId64 " channels, got %" PRId64,
                x->dims[cx], groups);
  TensorType want = ir_type_make(x->dtype, 1, &x->dims[cx]);
  static const char *const names[] = {"x", "weight", "bias"};
  for (int i = 1; i < n->n_in; i++)
    if (!need_type(n, i, names[i], &want, " (one value per channel)", err, errlen)) return false;
  out[0] = *x;
  return true;
}

/* q [B, Hq, Sq, d], k and v [B, Hkv, Sk, d] (layout "bshd": S before H),
 * Hkv dividing Hq, and a mask (bool or q's dtype) that broadcasts to
 * [B, Hq, Sq, Sk]. */
/* q, k, v of an attention or attention_grad node, and its mask at
 * operand mask_at when it has one. */
static bool attention_operands(const Node *n, int mask_at, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const char *layout = ir_attr_str(n, "layout");
  bool bshd = strcmp(layout, "bshd") == 0;
  if (!bshd && strcmp(layout, "bhsd") != 0)
    return fail(err, errlen, "attention: layout must be \"bhsd\" or \"bshd\", got \"%s\"", layout);
  int hx = bshd ? 2 : 1, sx = bshd ? 1 : 2;
  const TensorType *q = in_type(n, 0), *k = in_type(n, 1);
  if (!need_rank(n, q, 4, bshd ? "q [B, Sq, H, d]" : "q [B, H, Sq, d]", err, errlen)) return false;
  if (!need_float(n, q, err, errlen)) return false;
  if (k->rank != 4 || k->dtype != q->dtype || k->dims[0] != q->dims[0] || k->dims[3] != q->dims[3])
    return fail(err, errlen, "attention: k must be [%" PRId64 ", %s, %" PRId64 "] of %s's dtype, got %s", q->dims[0],
                bshd ? "Sk, Hkv" : "Hkv, Sk", q->dims[3], ts(q).s, ts(k).s);
  if (k->dims[hx] < 1 || q->dims[hx] % k->dims[hx])
    return fail(err, errlen, "attention: the %" PRId64 " key/value heads must divide the %" PRId64 " query heads",
                k->dims[hx], q->dims[hx]);
  if (!need_type(n, 2, "v", k, " (k's type)", err, errlen)) return false;
  if (n->n_in > mask_at) {
    const TensorType *m = in_type(n, mask_at);
    int64_t full[4] = {q->dims[0], q->dims[hx], q->dims[sx], k->dims[sx]}, dims[DL_MAX_RANK];
    int rank;
    if (m->dtype != TY_BOOL && m->dtype != q->dtype)
      return fail(err, errlen, "attention: the mask must be bool or %s's dtype, got %s", ts(q).s, ts(m).s);
    if (m->rank > 4 || !ir_broadcast_dims(full, 4, m->dims, m->rank, dims, &rank) || memcmp(dims, full, sizeof full))
      return fail(err, errlen, "attention: the mask %s does not broadcast to [%" PRId64 ", %" PRId64 ", %" PRId64
                  ", %" PRId64 "]", ts(m).s, full[0], full[1], full[2], full[3]);
  }
  return true;
}

bool shape_attention(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!attention_operands(n, 3, err, errlen)) return false;
  out[0] = *in_type(n, 0);
  return true;
}

/* Each query row's lse: f32 [B, H, Sq] in either layout. */
static TensorType lse_type(const Node *n) {
  const TensorType *q = in_type(n, 0);
  bool bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0;
  return ir_type_make(TY_F32, 3, (int64_t[]){q->dims[0], q->dims[bshd ? 2 : 1], q->dims[bshd ? 1 : 2]});
}

bool shape_attention_lse(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!attention_operands(n, 3, err, errlen)) return false;
  out[0] = *in_type(n, 0);
  out[1] = lse_type(n);
  return true;
}

/* q, k, v, out, dy, lse [, mask] -> q's, k's and v's types; out and dy
 * are the attention's result type (q's), lse attention_lse's. */
bool shape_attention_grad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!attention_operands(n, 6, err, errlen)) return false;
  const TensorType *q = in_type(n, 0);
  TensorType lt = lse_type(n);
  if (!need_type(n, 3, "out", q, " (q's type)", err, errlen) || !need_type(n, 4, "dy", q, " (q's type)", err, errlen) ||
      !need_type(n, 5, "lse", &lt, " (attention_lse's)", err, errlen))
    return false;
  out[0] = *q, out[1] = *in_type(n, 1), out[2] = *in_type(n, 2);
  return true;
}

bool shape_global_pool(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  bool nhwc;
  if (!layout_of(n, &nhwc, err, errlen)) return false;
  if (!need_rank(n, x, 4, nhwc ? "[N, H, W, C]" : "[N, C, H, W]", err, errlen)) return false;
  if (!need_float(n, x, err, errlen)) return false;
  out[0] = *x;
  out[0].dims[1] = x->dims[nhwc ? 3 : 1];
  out[0].dims[2] = out[0].dims[3] = 1;
  return true;
}

bool shape_batchnorm(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!eps_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  if (x->rank < 2)
    return fail(err, errlen, "batchnorm expects an input [N, C, ...] of rank >= 2, got %s",
                ts(x).s);
  if (!need_float(n, x, err, errlen)) return false;
  TensorType want = ir_type_make(x->dtype, 1, &x->dims[1]);
  char why[IR_TYPE_STR_MAX + 32];
  snprintf(why, sizeof why, " (one value per channel of %s)", ts(x).s);
  static const char *const names[] = {"x", "weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i < n->n_in && i < 5; i++)
    if (!need_type(n, i, names[i], &want, why, err, errlen)) return false;
  out[0] = *x;
  return true;
}

/* ---- matrix products ---- */

bool shape_matmul(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  TensorType ta = ir_matmul_operand(n, 0), tb = ir_matmul_operand(n, 1);
  const TensorType *a = &ta, *b = &tb;
  if (a->rank < 1 || b->rank < 1)
    return fail(err, errlen, "matmul needs operands of rank >= 1, got %s @ %s", ts(a).s, ts(b).s);
  for (int i = 0; i < 2; i++)
    if (ir_matmul_trans(n, i) && n->in[i]->type.rank < 2)
      return fail(err, errlen, "matmul: %s needs an operand of rank >= 2, got %s", i ? "trans_b" : "trans_a",
                  ts(i ? b : a).s);
  if (!same_dtype(n, a, b, err, errlen)) return false;
  /* A 1-d lhs acts as [1, K] and a 1-d rhs as [K, 1]; the 1 is dropped. */
  int64_t ka = a->dims[a->rank - 1];
  int64_t kb = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
  if (ka != kb)
    return fail(err, errlen, "matmul: inner dimensions differ: %s @ %s (%" PRId64 " vs %" PRId64 ")",
                ts(a).s, ts(b).s, ka, kb);
  int ba = a->rank >= 2 ? a->rank - 2 : 0, bb = b->rank >= 2 ? b->rank - 2 : 0;
  TensorType *r = &out[0];
  r->dtype = product_dtype(a->dtype);
  if (!ir_broadcast_dims(a->dims, ba, b->dims, bb, r->dims, &r->rank))
    return fail(err, errlen, "matmul: cannot broadcast the batch dims of %s with %s", ts(a).s,
                ts(b).s);
  if (a->rank >= 2) r->dims[r->rank++] = a->dims[a->rank - 2];
  if (b->rank >= 2) r->dims[r->rank++] = b->dims[b->rank - 1];
  return true;
}

bool shape_linear(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0), *w = in_type(n, 1);
  if (x->rank < 1) return fail(err, errlen, "linear expects an input [..., in], got %s", ts(x).s);
  if (w->rank != 2)
    return fail(err, errlen, "linear expects a 2-d weight [out, in], got %s", ts(w).s);
  if (!same_dtype(n, x, w, err, errlen)) return false;
  if (x->dims[x->rank - 1] != w->dims[1])
    return fail(err, errlen,
                "linear: input %s has %" PRId64 " features but weight %s expects %" PRId64,
                ts(x).s, x->dims[x->rank - 1], ts(w).s, w->dims[1]);
  DType acc = product_dtype(x->dtype);
  if (n->n_in > 2) {
    TensorType want = ir_type_make(acc, 1, &w->dims[0]);
    if (!need_type(n, 2, "bias", &want, " (one value per output feature)", err, errlen))
      return false;
  }
  out[0] = *x;
  out[0].dtype = acc;
  out[0].dims[x->rank - 1] = w->dims[0];
  return true;
}

/* Output length of a window sliding over `len` with pads lo/hi, or -1 when
 * the padded input is shorter than the dilated window (or absurdly long). */
static int64_t window_out(int64_t len, int64_t lo, int64_t hi, int64_t k, int64_t stride,
                          int64_t dilation, bool ceil_mode) {
  int64_t padded, span;
  if (!add_ok(len, lo, &padded) || !add_ok(padded, hi, &padded)) return -1;
  if (!mul_ok(dilation, k - 1, &span) || !add_ok(span, 1, &span)) return -1;
  if (padded < span) return -1;
  int64_t room = padded - span;
  int64_t o = room / stride + (ceil_mode && room % stride != 0) + 1;
  /* PyTorch: the last window must start inside the input or left pad. */
  int64_t last;
  if (ceil_mode && (!mul_ok(o - 1, stride, &last) || last >= len + lo)) o--;
  return o;
}

/* The 2-d ops and their 3-d twins share one rule each: nsp spatial dims,
 * stride and dilation with nsp entries, pad with 2 * nsp (all the starts,
 * then all the ends). */
static const char *side_name(int nsp, int i) {
  static const char *const names[] = {"depth", "height", "width"};
  return names[3 - nsp + i];
}

static const char *image_layout(int nsp) { return nsp == 3 ? "[N, C, D, H, W]" : "[N, C, H, W]"; }
static const char *kernel_dims(int nsp) { return nsp == 3 ? "kD, kH, kW" : "kH, kW"; }


static bool conv_shape(const Node *n, int nsp, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const char *name = op_name(n);
  const TensorType *x = in_type(n, 0), *w = in_type(n, 1);
  /* channels last: the channel axis of x, W and the result is the last,
   * the spatial axes 1 .. nsp */
  bool nhwc;
  if (!layout_of(n, &nhwc, err, errlen)) return false;
  if (!need_rank(n, x, 2 + nsp, nhwc ? "[N, H, W, C]" : image_layout(nsp), err, errlen)) return false;
  if (w->rank != 2 + nsp)
    return fail(err, errlen, "%s expects a %d-d weight %s, got %s", name, 2 + nsp,
                nhwc ? "[Cout, kH, kW, C]" : nsp == 3 ? "[Cout, C/groups, kD, kH, kW]" : "[Cout, C/groups, kH, kW]",
                ts(w).s);
  if (!same_dtype(n, x, w, err, errlen)) return false;
  const int64_t *stride, *pad, *dil;
  int64_t groups;
  if (!attr_ints_min(n, "stride", nsp, 1, &stride, err, errlen)) return false;
  if (!attr_ints_min(n, "pad", 2 * nsp, 0, &pad, err, errlen)) return false;
  if (!attr_ints_min(n, "dilation", nsp, 1, &dil, err, errlen)) return false;
  if (!attr_int_min(n, "groups", 1, &groups, err, errlen)) return false;
  int cx = nhwc ? 1 + nsp : 1, sx = nhwc ? 1 : 2; /* channel and first spatial axis */
  int64_t c = x->dims[cx], cout = w->dims[0];
  if (c % groups != 0 || cout % groups != 0)
    return fail(err, errlen,
                "%s: groups=%" PRId64 " must divide the input channels (%" PRId64
                ") and the output channels (%" PRId64 ")",
                name, groups, c, cout);
  if (w->dims[cx] != c / groups)
    return fail(err, errlen,
                "%s: weight %s expects %" PRId64 " input channels per group, but input %s "
                "has %" PRId64 " with groups=%" PRId64,
                name, ts(w).s, w->dims[cx], ts(x).s, c / groups, groups);
  if (!zero_point_ok(n, TY_I8, err, errlen)) return false;
  if (ir_attr(n, "zero_point") && x->dtype != TY_I8)
    return fail(err, errlen, "%s: zero_point is for int8 operands, not %s", name, ir_dtype_name(x->dtype));
  DType acc = product_dtype(x->dtype);
  if (n->n_in > 2) {
    TensorType want = ir_type_make(acc, 1, &cout);
    if (!need_type(n, 2, "bias", &want, " (one value per output channel)", err, errlen))
      return false;
  }
  out[0] = *x;
  out[0].dtype = acc;
  out[0].dims[cx] = cout;
  for (int i = 0; i < nsp; i++) {
    int64_t o = window_out(x->dims[sx + i], pad[i], pad[nsp + i], w->dims[sx + i], stride[i], dil[i],
                           false);
    if (o < 1)
      return fail(err, errlen,
                  "%s: kernel %s %" PRId64 " (dilation %" PRId64 ") does not fit the input "
                  "%s %" PRId64 " with padding %" PRId64 "+%" PRId64
                  ": the output would be empty (empty tensors are not supported)",
                  name, side_name(nsp, i), w->dims[sx + i], dil[i], side_name(nsp, i), x->dims[sx + i],
                  pad[i], pad[nsp + i]);
    out[0].dims[sx + i] = o;
  }
  return true;
}

bool shape_conv2d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return conv_shape(n, 2, out, err, errlen);
}

bool shape_conv3d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return conv_shape(n, 3, out, err, errlen);
}

/* out = (in - 1) * stride - pad_lo - pad_hi + dilation * (k - 1) + output_pad + 1,
 * as PyTorch's ConvTranspose2d; output_pad must stay below stride or
 * dilation so that it only re-adds rows a strided conv2d would drop. */
static bool conv_transpose_shape(const Node *n, int nsp, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const char *name = op_name(n);
  const TensorType *x = in_type(n, 0), *w = in_type(n, 1);
  /* channels last: x's and the result's channels last, W [Cout, taps,
   * Cin/groups] (as conv2d's nhwc weight) */
  bool nhwc = ir_nhwc(n);
  int sx = nhwc ? 1 : 2, cx = nhwc ? 1 + nsp : 1;
  if (!need_rank(n, x, 2 + nsp, nhwc ? (nsp == 3 ? "[N, D, H, W, C]" : "[N, H, W, C]") : image_layout(nsp), err, errlen)) return false;
  if (w->rank != 2 + nsp)
    return fail(err, errlen, nhwc ? "%s expects a %d-d weight [Cout, %s, Cin/groups], got %s"
                                  : "%s expects a %d-d weight [Cin, Cout/groups, %s], got %s",
                name, 2 + nsp, kernel_dims(nsp), ts(w).s);
  if (!same_dtype(n, x, w, err, errlen)) return false;
  for (int i = 0; i < nsp; i++)
    if (w->dims[sx + i] < 1)
      return fail(err, errlen, "%s: weight %s has an empty kernel (empty tensors are not supported)", name, ts(w).s);
  const int64_t *stride, *pad, *opad, *dil;
  int64_t groups;
  if (!attr_ints_min(n, "stride", nsp, 1, &stride, err, errlen)) return false;
  if (!attr_ints_min(n, "pad", 2 * nsp, 0, &pad, err, errlen)) return false;
  if (!attr_ints_min(n, "output_pad", nsp, 0, &opad, err, errlen)) return false;
  if (!attr_ints_min(n, "dilation", nsp, 1, &dil, err, errlen)) return false;
  if (!attr_int_min(n, "groups", 1, &groups, err, errlen)) return false;
  int64_t c = x->dims[cx], cout;
  if (nhwc) {
    cout = w->dims[0];
    if (c % groups != 0 || cout % groups != 0 || w->dims[1 + nsp] != c / groups)
      return fail(err, errlen,
                  "%s: weight %s does not fit %" PRId64 " input channels in %" PRId64 " group%s (channels last)",
                  name, ts(w).s, c, groups, groups == 1 ? "" : "s");
  } else {
    if (w->dims[0] != c)
      return fail(err, errlen,
                  "%s: weight %s expects %" PRId64 " input channels, but input %s has %" PRId64,
                  name, ts(w).s, w->dims[0], ts(x).s, c);
    if (c % groups != 0 || !mul_ok(w->dims[1], groups, &cout))
      return fail(err, errlen, "%s: groups=%" PRId64 " must divide the input channels (%" PRId64 ")",
                  name, groups, c);
  }
  DType acc = product_dtype(x->dtype);
  if (n->n_in > 2) {
    TensorType want = ir_type_make(acc, 1, &cout);
    if (!need_type(n, 2, "bias", &want, " (one value per output channel)", err, errlen))
      return false;
  }
  out[0] = *x;
  out[0].dtype = acc;
  out[0].dims[cx] = cout;
  for (int i = 0; i < nsp; i++) {
    const char *side = side_name(nsp, i);
    if (opad[i] >= stride[i] && opad[i] >= dil[i])
      return fail(err, errlen,
                  "%s: output_pad %s %" PRId64 " must be smaller than the stride (%" PRId64
                  ") or the dilation (%" PRId64 ")",
                  name, side, opad[i], stride[i], dil[i]);
    int64_t full, span;
    if (!mul_ok(x->dims[sx + i] - 1, stride[i], &full) ||
        !mul_ok(dil[i], w->dims[sx + i] - 1, &span) || !add_ok(full, span, &full) ||
        !add_ok(full, opad[i] + 1, &full))
      return fail(err, errlen, "%s: the output %s overflows", name, side);
    int64_t o = full - pad[i] - pad[nsp + i];
    if (o < 1)
      return fail(err, errlen,
                  "%s: padding %s %" PRId64 "+%" PRId64 " leaves no output of the "
                  "full %s %" PRId64 " (empty tensors are not supported)",
                  name, side, pad[i], pad[nsp + i], side, full);
    out[0].dims[sx + i] = o;
  }
  return true;
}

bool shape_conv_transpose2d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return conv_transpose_shape(n, 2, out, err, errlen);
}

bool shape_conv_transpose3d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return conv_transpose_shape(n, 3, out, err, errlen);
}

bool shape_resize(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  bool nhwc = false;
  if (n->op == OP_RESIZE && !layout_of(n, &nhwc, err, errlen)) return false;
  if (!need_rank(n, x, 4, nhwc ? "[N, H, W, C]" : "[N, C, H, W]", err, errlen)) return false;
  const int64_t *size;
  bool align;
  if (!attr_ints_min(n, "size", 2, 1, &size, err, errlen)) return false;
  if (!attr_flag(n, "align_corners", &align, err, errlen)) return false;
  const Attr *mode = get_attr(n, "mode", AK_STR, "a string", err, errlen);
  if (!mode) return false;
  bool linear = strcmp(mode->s, "bilinear") == 0;
  if (!linear && strcmp(mode->s, "nearest") != 0)
    return fail(err, errlen, "%s: mode must be \"nearest\" or \"bilinear\", got \"%s\"",
                op_name(n), mode->s);
  if (!linear && align)
    return fail(err, errlen, "%s: align_corners applies only to mode \"bilinear\"", op_name(n));
  /* resize_grad (the same rule: size is its result's) sums gradients. */
  if ((linear || n->op == OP_RESIZE_GRAD) && !need_float(n, x, err, errlen)) return false;
  out[0] = *x;
  out[0].dims[nhwc ? 1 : 2] = size[0];
  out[0].dims[nhwc ? 2 : 3] = size[1];
  int64_t count = ir_type_numel(&out[0]);
  if (count < 0 || count > DL_MAX_ELEMS)
    return fail(err, errlen, "%s: the output %s is too large", op_name(n), ts(&out[0]).s);
  return true;
}

/* One of the names a string attribute may take. */
static bool attr_choice(const Node *n, const char *name, const char *const *choices, int count,
                        char *err, size_t errlen) {
  const Attr *a = get_attr(n, name, AK_STR, "a string", err, errlen);
  if (!a) return false;
  for (int i = 0; i < count; i++)
    if (strcmp(a->s, choices[i]) == 0) return true;
  return fail(err, errlen, "%s: %s must be \"%s\", \"%s\" or \"%s\", got \"%s\"", op_name(n), name,
              choices[0], choices[1], choices[2], a->s);
}

bool shape_grid_sample(const Node *n, TensorType *out, char *err, size_t errlen) {
  static const char *const modes[] = {"bilinear", "nearest", "bicubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0), *grid = in_type(n, 1);
  bool align;
  if (x->rank != 5 && !need_rank(n, x, 4, "[N, C, H, W] (or a volume [N, C, D, H, W])", err, errlen))
    return false;
  if (!need_float(n, x, err, errlen) || !need_float(n, grid, err, errlen) ||
      !attr_choice(n, "mode", modes, 3, err, errlen) || !attr_choice(n, "padding_mode", pads, 3, err, errlen) ||
      !attr_flag(n, "align_corners", &align, err, errlen))
    return false;
  int sp = x->rank - 2;
  if (sp == 3 && strcmp(ir_attr_str(n, "mode"), "bicubic") == 0)
    return fail(err, errlen, "grid_sample: bicubic is for 2-d inputs, x is %s", ts(x).s);
  if (grid->rank != x->rank || grid->dims[0] != x->dims[0] || grid->dims[grid->rank - 1] != sp)
    return fail(err, errlen, "grid_sample: grid must be [N, %s, %d] with x's N = %" PRId64 ", got %s",
                sp == 3 ? "Do, Ho, Wo" : "Ho, Wo", sp, x->dims[0], ts(grid).s);
  out[0] = *x;
  for (int d = 0; d < sp; d++) out[0].dims[2 + d] = grid->dims[1 + d];
  int64_t count = ir_type_numel(&out[0]);
  if (count < 0 || count > DL_MAX_ELEMS)
    return fail(err, errlen, "grid_sample: the output %s is too large", ts(&out[0]).s);
  return true;
}

static bool pool_shape(const Node *n, int nsp, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  bool nhwc;
  if (!layout_of(n, &nhwc, err, errlen)) return false;
  if (!need_rank(n, x, 2 + nsp, nhwc ? "[N, H, W, C]" : image_layout(nsp), err, errlen)) return false;
  int sx = nhwc ? 1 : 2; /* the first spatial axis */
  const int64_t *kernel, *stride, *pad, *dil;
  bool ceil_mode, include_pad;
  if (!attr_ints_min(n, "kernel", nsp, 1, &kernel, err, errlen)) return false;
  if (!attr_ints_min(n, "stride", nsp, 1, &stride, err, errlen)) return false;
  if (!attr_ints_min(n, "pad", 2 * nsp, 0, &pad, err, errlen)) return false;
  if (!attr_ints_min(n, "dilation", nsp, 1, &dil, err, errlen)) return false;
  if (!attr_flag(n, "ceil_mode", &ceil_mode, err, errlen)) return false;
  if ((n->op == OP_AVGPOOL2D || n->op == OP_AVGPOOL3D) &&
      !attr_flag(n, "count_include_pad", &include_pad, err, errlen))
    return false;
  out[0] = *x;
  for (int i = 0; i < nsp; i++) {
    const char *side = side_name(nsp, i);
    /* PyTorch's rule: a window never lies entirely in the padding. */
    if (pad[i] > kernel[i] / 2 || pad[nsp + i] > kernel[i] / 2)
      return fail(err, errlen,
                  "%s: padding %s %" PRId64 "+%" PRId64 " is more than half the kernel %s %" PRId64,
                  op_name(n), side, pad[i], pad[nsp + i], side, kernel[i]);
    int64_t o = window_out(x->dims[sx + i], pad[i], pad[nsp + i], kernel[i], stride[i], dil[i],
                           ceil_mode);
    if (o < 1)
      return fail(err, errlen,
                  "%s: kernel %s %" PRId64 " (dilation %" PRId64 ") does not fit the input "
                  "%s %" PRId64 " with padding %" PRId64 "+%" PRId64
                  ": the output would be empty (empty tensors are not supported)",
                  op_name(n), side, kernel[i], dil[i], side, x->dims[sx + i], pad[i], pad[nsp + i]);
    out[0].dims[sx + i] = o;
  }
  return true;
}

bool shape_pool2d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return pool_shape(n, 2, out, err, errlen);
}

bool shape_pool3d(const Node *n, TensorType *out, char *err, size_t errlen) {
  return pool_shape(n, 3, out, err, errlen);
}

/* ---- data movement ---- */

bool shape_reshape(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int count;
  const int64_t *shape;
  if (!attr_ints(n, "shape", -1, &count, &shape, err, errlen)) return false;
  if (count > DL_MAX_RANK)
    return fail(err, errlen, "reshape: shape %s has rank %d, more than the supported %d",
                ints_text(shape, count).s, count, (int)DL_MAX_RANK);
  int64_t numel = 1;
  bool too_big = false;
  for (int i = 0; i < count; i++) {
    if (shape[i] < 0)
      return fail(err, errlen, "reshape: shape %s has a negative dim", ints_text(shape, count).s);
    if (!too_big && (!mul_ok(numel, shape[i], &numel) || numel > DL_MAX_ELEMS)) too_big = true;
  }
  int64_t have = ir_type_numel(x);
  if (have < 0)
    return fail(err, errlen, "reshape: input %s is larger than %" PRId64 " elements", ts(x).s,
                DL_MAX_ELEMS);
  if (too_big)
    return fail(err, errlen,
                "reshape: cannot reshape %s (%" PRId64 " elements) to %s (more than %" PRId64
                " elements)",
                ts(x).s, have, ints_text(shape, count).s, DL_MAX_ELEMS);
  if (numel != have)
    return fail(err, errlen,
                "reshape: cannot reshape %s (%" PRId64 " elements) to %s (%" PRId64 " elements)",
                ts(x).s, have, ints_text(shape, count).s, numel);
  out[0] = ir_type_make(x->dtype, count, shape);
  return true;
}

bool shape_transpose(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int count;
  const int64_t *perm;
  if (!attr_ints(n, "perm", -1, &count, &perm, err, errlen)) return false;
  bool seen[DL_MAX_RANK] = {false};
  bool ok = count == x->rank;
  for (int i = 0; ok && i < count; i++) {
    ok = perm[i] >= 0 && perm[i] < x->rank && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) {
    if (x->rank == 0)
      return fail(err, errlen, "transpose: perm %s must be [] for %s", ints_text(perm, count).s,
                  ts(x).s);
    return fail(err, errlen, "transpose: perm %s is not a permutation of 0..%d for %s",
                ints_text(perm, count).s, x->rank - 1, ts(x).s);
  }
  out[0].dtype = x->dtype;
  out[0].rank = x->rank;
  for (int i = 0; i < count; i++) out[0].dims[i] = x->dims[perm[i]];
  return true;
}

bool shape_expand(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int count;
  const int64_t *shape;
  if (!attr_ints(n, "shape", -1, &count, &shape, err, errlen)) return false;
  if (count > DL_MAX_RANK)
    return fail(err, errlen, "expand: shape %s has rank %d, more than the supported %d",
                ints_text(shape, count).s, count, (int)DL_MAX_RANK);
  for (int i = 0; i < count; i++)
    if (shape[i] < 0)
      return fail(err, errlen, "expand: shape %s has a negative dim", ints_text(shape, count).s);
  bool ok = count >= x->rank;
  for (int i = 0; ok && i < x->rank; i++) {
    int64_t d = x->dims[x->rank - 1 - i];
    ok = d == 1 || d == shape[count - 1 - i];
  }
  if (!ok)
    return fail(err, errlen, "expand: cannot expand %s to %s", ts(x).s, ints_text(shape, count).s);
  out[0] = ir_type_make(x->dtype, count, shape);
  return true;
}

bool shape_concat(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *first = in_type(n, 0);
  int axis;
  if (!attr_axis(n, first, &axis, err, errlen)) return false;
  out[0] = *first;
  for (int i = 1; i < n->n_in; i++) {
    const TensorType *t = in_type(n, i);
    if (t->dtype != first->dtype)
      return fail(err, errlen, "concat: dtype mismatch %s vs %s (operand %d)",
                  ir_dtype_name(first->dtype), ir_dtype_name(t->dtype), i + 1);
    if (t->rank != first->rank)
      return fail(err, errlen, "concat: operand %d %s has rank %d, operand 1 %s has rank %d", i + 1,
                  ts(t).s, t->rank, ts(first).s, first->rank);
    for (int d = 0; d < t->rank; d++)
      if (d != axis && t->dims[d] != first->dims[d])
        return fail(err, errlen,
                    "concat: operand %d %s differs from operand 1 %s in dim %d (only axis %d may "
                    "differ)",
                    i + 1, ts(t).s, ts(first).s, d, axis);
    if (!add_ok(out[0].dims[axis], t->dims[axis], &out[0].dims[axis]))
      return fail(err, errlen, "concat: the result is too large along axis %d", axis);
  }
  return true;
}

bool shape_slice(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  const int64_t *starts, *ends, *steps;
  int count;
  if (!attr_ints(n, "starts", x->rank, &count, &starts, err, errlen)) return false;
  if (!attr_ints(n, "ends", x->rank, &count, &ends, err, errlen)) return false;
  if (!attr_ints(n, "steps", x->rank, &count, &steps, err, errlen)) return false;
  out[0] = *x;
  for (int d = 0; d < x->rank; d++) {
    int64_t s = starts[d], e = ends[d], dim = x->dims[d];
    if (steps[d] < 1)
      return fail(err, errlen, "slice: step %" PRId64 " in dim %d must be >= 1", steps[d], d);
    if (s < 0 || e > dim || s > e)
      return fail(err, errlen,
                  "slice: range %" PRId64 ":%" PRId64 " is outside dim %d of %s (need 0 <= start "
                  "<= end <= %" PRId64 ")",
                  s, e, d, ts(x).s, dim);
    out[0].dims[d] = s == e ? 0 : (e - s - 1) / steps[d] + 1;
  }
  return true;
}

bool shape_pad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  const int64_t *pads;
  if (!attr_ints_min(n, "pads", 2 * x->rank, 0, &pads, err, errlen)) return false;
  out[0] = *x;
  for (int d = 0; d < x->rank; d++)
    if (!add_ok(x->dims[d], pads[d], &out[0].dims[d]) ||
        !add_ok(out[0].dims[d], pads[x->rank + d], &out[0].dims[d]))
      return fail(err, errlen, "pad: dim %d of %s padded by %" PRId64 "+%" PRId64 " is too large",
                  d, ts(x).s, pads[d], pads[x->rank + d]);
  return true;
}

bool shape_gather(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *data = in_type(n, 0), *idx = in_type(n, 1);
  if (data->rank < 1)
    return fail(err, errlen, "gather needs data of rank >= 1, got %s", ts(data).s);
  if (idx->dtype != TY_I32 && idx->dtype != TY_I64)
    return fail(err, errlen, "gather needs i32 or i64 indices, got %s", ts(idx).s);
  int axis;
  if (!attr_axis(n, data, &axis, err, errlen)) return false;
  int rank = data->rank - 1 + idx->rank;
  if (rank > DL_MAX_RANK)
    return fail(err, errlen, "gather: data %s with indices %s gives rank %d, more than the supported %d",
                ts(data).s, ts(idx).s, rank, (int)DL_MAX_RANK);
  TensorType *r = &out[0];
  r->dtype = data->dtype;
  r->rank = 0;
  for (int d = 0; d < axis; d++) r->dims[r->rank++] = data->dims[d];
  for (int d = 0; d < idx->rank; d++) r->dims[r->rank++] = idx->dims[d];
  for (int d = axis + 1; d < data->rank; d++) r->dims[r->rank++] = data->dims[d];
  return true;
}

static bool need_indices(const Node *n, const TensorType *idx, char *err, size_t errlen) {
  if (idx->dtype != TY_I32 && idx->dtype != TY_I64)
    return fail(err, errlen, "%s needs i32 or i64 indices, got %s", op_name(n), ts(idx).s);
  return true;
}

/* gather_elements' and scatter_elements' indices: data's rank, no larger
 * than data in the dims other than axis. */
static bool element_indices(const Node *n, const TensorType *data, const TensorType *idx, int *axis,
                            char *err, size_t errlen) {
  if (!need_indices(n, idx, err, errlen)) return false;
  if (data->rank < 1)
    return fail(err, errlen, "%s needs data of rank >= 1, got %s", op_name(n), ts(data).s);
  if (!attr_axis(n, data, axis, err, errlen)) return false;
  if (idx->rank != data->rank)
    return fail(err, errlen, "%s: indices %s must have the rank of data %s", op_name(n), ts(idx).s,
                ts(data).s);
  for (int d = 0; d < data->rank; d++)
    if (d != *axis && idx->dims[d] > data->dims[d])
      return fail(err, errlen, "%s: indices %s are larger than data %s in dim %d (only axis %d may be)",
                  op_name(n), ts(idx).s, ts(data).s, d, *axis);
  return true;
}

bool shape_gather_elements(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *data = in_type(n, 0), *idx = in_type(n, 1);
  int axis;
  if (!element_indices(n, data, idx, &axis, err, errlen)) return false;
  out[0] = *idx;
  out[0].dtype = data->dtype;
  return true;
}

/* The reduction of a scatter: how an update meets what is there. */
static bool scatter_reduction(const Node *n, const TensorType *data, char *err, size_t errlen) {
  const Attr *r = get_attr(n, "reduction", AK_STR, "a string", err, errlen);
  if (!r) return false;
  static const char *const known[] = {"none", "add", "mul", "max", "min"};
  bool ok = false;
  for (size_t i = 0; i < ARRAY_LEN(known); i++) ok |= strcmp(r->s, known[i]) == 0;
  if (!ok)
    return fail(err, errlen,
                "%s: reduction must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got \"%s\"",
                op_name(n), r->s);
  if (strcmp(r->s, "none") != 0 && data->dtype == TY_BOOL)
    return fail(err, errlen, "%s: reduction \"%s\" needs numbers, got %s", op_name(n), r->s, ts(data).s);
  return true;
}

bool shape_scatter_elements(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *data = in_type(n, 0), *idx = in_type(n, 1), *upd = in_type(n, 2);
  int axis;
  if (!element_indices(n, data, idx, &axis, err, errlen)) return false;
  if (!scatter_reduction(n, data, err, errlen)) return false;
  TensorType want = *idx;
  want.dtype = data->dtype;
  if (!need_type(n, 2, "updates", &want, " (the indices' shape, data's dtype)", err, errlen)) return false;
  (void)upd;
  out[0] = *data;
  return true;
}

/* gather_nd's and scatter_nd's indices [..., q]: q of data's dims after
 * batch batch dims, every index row a point there. */
static bool nd_indices(const Node *n, const TensorType *data, const TensorType *idx, int batch, int *q,
                       char *err, size_t errlen) {
  if (!need_indices(n, idx, err, errlen)) return false;
  if (idx->rank < 1)
    return fail(err, errlen, "%s needs indices of rank >= 1, got %s", op_name(n), ts(idx).s);
  if (batch >= idx->rank || batch >= data->rank)
    return fail(err, errlen, "%s: batch_dims %d must be below the ranks of data %s and indices %s",
                op_name(n), batch, ts(data).s, ts(idx).s);
  for (int d = 0; d < batch; d++)
    if (idx->dims[d] != data->dims[d])
      return fail(err, errlen, "%s: dim %d (a batch dim) of indices %s and data %s differ", op_name(n),
                  d, ts(idx).s, ts(data).s);
  int64_t last = idx->dims[idx->rank - 1];
  if (last < 1 || last > data->rank - batch)
    return fail(err, errlen, "%s: index rows of %" PRId64 " values do not fit data %s after %d batch dims",
                op_name(n), last, ts(data).s, batch);
  *q = (int)last;
  return true;
}

bool shape_gather_nd(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *data = in_type(n, 0), *idx = in_type(n, 1);
  int64_t batch;
  int q;
  if (!attr_int_min(n, "batch_dims", 0, &batch, err, errlen)) return false;
  if (batch > DL_MAX_RANK) batch = DL_MAX_RANK;
  if (!nd_indices(n, data, idx, (int)batch, &q, err, errlen)) return false;
  TensorType *r = &out[0];
  r->dtype = data->dtype;
  r->rank = 0;
  for (int d = 0; d < idx->rank - 1; d++) r->dims[r->rank++] = idx->dims[d];
  if (r->rank + data->rank - (int)batch - q > DL_MAX_RANK)
    return fail(err, errlen, "gather_nd: data %s with indices %s gives a rank above the supported %d",
                ts(data).s, ts(idx).s, (int)DL_MAX_RANK);
  for (int d = (int)batch + q; d < data->rank; d++) r->dims[r->rank++] = data->dims[d];
  return true;
}

bool shape_scatter_nd(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *data = in_type(n, 0), *idx = in_type(n, 1);
  int q;
  if (!nd_indices(n, data, idx, 0, &q, err, errlen)) return false;
  if (!scatter_reduction(n, data, err, errlen)) return false;
  TensorType want = {.dtype = data->dtype};
  for (int d = 0; d < idx->rank - 1; d++) want.dims[want.rank++] = idx->dims[d];
  if (want.rank + data->rank - q > DL_MAX_RANK)
    return fail(err, errlen, "scatter_nd: updates for data %s and indices %s would have a rank above %d",
                ts(data).s, ts(idx).s, (int)DL_MAX_RANK);
  for (int d = q; d < data->rank; d++) want.dims[want.rank++] = data->dims[d];
  if (!need_type(n, 2, "updates", &want, " (indices.shape[:-1] + data.shape[q:])", err, errlen)) return false;
  out[0] = *data;
  return true;
}

bool shape_topk(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_numbers(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  int axis;
  int64_t k;
  bool largest;
  if (!attr_axis(n, x, &axis, err, errlen)) return false;
  if (!attr_int_min(n, "k", 1, &k, err, errlen)) return false;
  if (!attr_flag(n, "largest", &largest, err, errlen)) return false;
  if (k > x->dims[axis])
    return fail(err, errlen, "topk: k=%" PRId64 " is more than the %" PRId64 " elements of axis %d of %s", k,
                x->dims[axis], axis, ts(x).s);
  out[0] = *x;
  out[0].dims[axis] = k;
  out[1] = out[0];
  out[1].dtype = TY_I64;
  return true;
}

bool shape_nonzero(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  if (x->rank < 1) return fail(err, errlen, "nonzero: a 0-d operand has no coordinates");
  out[0] = (TensorType){.dtype = TY_I64, .rank = 2, .dims = {x->rank, ir_type_numel(x)}};
  out[1] = (TensorType){.dtype = TY_I64, .rank = 0};
  return true;
}

bool shape_shape_of(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  out[0] = (TensorType){.dtype = TY_I64, .rank = 1, .dims = {in_type(n, 0)->rank}};
  return true;
}

bool shape_with_length(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0), *len = in_type(n, 1);
  int64_t axis = ir_attr_int(n, "axis");
  if (axis < 0 || axis >= x->rank)
    return fail(err, errlen, "with_length: axis %" PRId64 " is outside %s", axis, ts(x).s);
  if (len->rank != 0 || len->dtype != TY_I64)
    return fail(err, errlen, "with_length: the length must be i64[], got %s", ts(len).s);
  out[0] = *x;
  return true;
}

bool shape_nms(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *boxes = in_type(n, 0), *scores = in_type(n, 1);
  if (boxes->rank != 3 || boxes->dims[2] != 4 || boxes->dtype != TY_F32)
    return fail(err, errlen, "nms: boxes must be f32[B, N, 4], got %s", ts(boxes).s);
  if (scores->rank != 3 || scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1] ||
      scores->dtype != TY_F32)
    return fail(err, errlen, "nms: scores must be f32[B, C, N] for boxes %s, got %s", ts(boxes).s, ts(scores).s);
  static const DType scalar[3] = {TY_I64, TY_F32, TY_F32};
  for (int i = 0; i < 3; i++)
    if (in_type(n, 2 + i)->rank != 0 || in_type(n, 2 + i)->dtype != scalar[i])
      return fail(err, errlen, "nms: operand %d must be %s[], got %s", 2 + i, ir_dtype_name(scalar[i]),
                  ts(in_type(n, 2 + i)).s);
  int64_t bound, centers;
  bool use_floor;
  if (!attr_int_min(n, "bound", 0, &bound, err, errlen) || !attr_int_min(n, "center_point_box", 0, &centers, err, errlen) ||
      !attr_flag(n, "use_floor", &use_floor, err, errlen))
    return false;
  if (bound > boxes->dims[1] || centers > 1)
    return fail(err, errlen, "nms: bound %lld must be at most the %lld boxes, center_point_box 0 or 1",
                (long long)bound, (long long)boxes->dims[1]);
  out[0] = (TensorType){.dtype = TY_I64, .rank = 2, .dims = {boxes->dims[0] * scores->dims[1] * bound, 3}};
  out[1] = (TensorType){.dtype = TY_I64, .rank = 0};
  return true;
}

bool shape_unique(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  if (x->rank != 1 && x->rank != 2)
    return fail(err, errlen, "unique: the operand must be 1-d (values) or 2-d (rows), got %s", ts(x).s);
  bool sorted;
  if (!attr_flag(n, "sorted", &sorted, err, errlen)) return false;
  out[0] = *x;
  for (int i = 1; i < 4; i++) out[i] = (TensorType){.dtype = TY_I64, .rank = 1, .dims = {x->dims[0]}};
  out[4] = (TensorType){.dtype = TY_I64, .rank = 0};
  return true;
}

/* No operands: the type comes from the attributes (ops.def, iota). */
/* *out, of dtype dt and a source op's `shape` attribute (count dims,
 * each at least min_dim), or false with why. */
static bool type_of_shape(const char *op, int count, const int64_t *shape, int64_t min_dim, DType dt,
                          TensorType *out, char *err, size_t errlen) {
  if (count > DL_MAX_RANK)
    return fail(err, errlen, "%s: shape %s has rank %d, more than the supported %d", op, ints_text(shape, count).s,
                count, (int)DL_MAX_RANK);
  *out = (TensorType){.dtype = dt, .rank = count};
  for (int i = 0; i < count; i++) {
    if (shape[i] < min_dim)
      return fail(err, errlen, "%s: shape %s has a dim < %" PRId64, op, ints_text(shape, count).s, min_dim);
    out->dims[i] = shape[i];
  }
  if (ir_type_numel(out) < 0)
    return fail(err, errlen, "%s: shape %s is larger than %" PRId64 " elements", op, ints_text(shape, count).s,
                DL_MAX_ELEMS);
  return true;
}

bool shape_iota(const Node *n, TensorType *out, char *err, size_t errlen) {
  int count;
  const int64_t *shape;
  if (!attr_ints(n, "shape", -1, &count, &shape, err, errlen)) return false;
  const Attr *dt = get_attr(n, "dtype", AK_DTYPE, "a dtype", err, errlen);
  if (!dt) return false;
  if ((unsigned)dt->dt >= TY_COUNT || dt->dt == TY_BOOL)
    return fail(err, errlen, "iota: dtype must be a number type, got %s", ir_dtype_name(dt->dt));
  if (!type_of_shape("iota", count, shape, 1, dt->dt, out, err, errlen)) return false;
  int64_t axis;
  if (!attr_int(n, "axis", &axis, err, errlen)) return false;
  if (axis < 0 || axis >= (count ? count : 1))
    return fail(err, errlen, "iota: axis %" PRId64 " is out of range for shape %s", axis, ints_text(shape, count).s);
  const Attr *start = get_attr(n, "start", AK_FLOAT, "a number", err, errlen);
  const Attr *step = start ? get_attr(n, "step", AK_FLOAT, "a number", err, errlen) : NULL;
  if (!step) return false;
  if (!isfinite(start->f) || !isfinite(step->f)) return fail(err, errlen, "iota: start and step must be finite");
  if (!ir_dtype_is_float(dt->dt) && (start->f != floor(start->f) || step->f != floor(step->f)))
    return fail(err, errlen, "iota: an integer dtype needs an integral start and step");
  return true;
}

/* ---- recurrent layers ---- */

/* x, then for each layer and direction w_ih [G*H, I_l], w_hh [G*H, H] and
 * with bias b_ih, b_hh [G*H]; names as in PyTorch's state_dict. */
static bool shape_recurrent(const Node *n, int gates, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0);
  if (!need_float(n, x, err, errlen)) return false;
  int64_t hidden, layers;
  bool bidir, batch_first, bias;
  if (!attr_int_min(n, "hidden", 1, &hidden, err, errlen)) return false;
  if (!attr_int_min(n, "layers", 1, &layers, err, errlen)) return false;
  if (!attr_flag(n, "bidirectional", &bidir, err, errlen)) return false;
  if (!attr_flag(n, "batch_first", &batch_first, err, errlen)) return false;
  if (!attr_flag(n, "bias", &bias, err, errlen)) return false;
  if (!need_rank(n, x, 3, batch_first ? "[N, T, I] (batch_first=1)" : "[T, N, I] (batch_first=0)",
                 err, errlen))
    return false;
  int dirs = bidir ? 2 : 1, per = bias ? 4 : 2;
  if (layers > DL_MAX_ELEMS)
    return fail(err, errlen, "%s: layers=%" PRId64 " is too large", op_name(n), layers);
  int64_t params = layers * dirs * per;
  if (1 + params != n->n_in)
    return fail(err, errlen,
                "%s with layers=%" PRId64 ", bidirectional=%d, bias=%d takes %" PRId64
                " operands (x and %" PRId64 " parameters), got %d",
                op_name(n), layers, bidir, bias, 1 + params, params, n->n_in);
  int64_t gh, hd;
  if (!mul_ok(gates, hidden, &gh) || gh > DL_MAX_ELEMS || !mul_ok(hidden, dirs, &hd))
    return fail(err, errlen, "%s: hidden=%" PRId64 " is too large", op_name(n), hidden);
  int64_t batch = x->dims[batch_first ? 0 : 1], steps = x->dims[batch_first ? 1 : 0];
  int k = 1;
  for (int64_t l = 0; l < layers; l++) {
    for (int d = 0; d < dirs; d++) {
      char name[64];
      const char *suffix = d ? "_reverse" : "";
      int64_t w_ih[2] = {gh, l == 0 ? x->dims[2] : hd}, w_hh[2] = {gh, hidden};
      TensorType want = ir_type_make(x->dtype, 2, w_ih);
      snprintf(name, sizeof name, "weight_ih_l%" PRId64 "%s (operand %d)", l, suffix, k + 1);
      if (!need_type(n, k++, name, &want, "", err, errlen)) return false;
      want = ir_type_make(x->dtype, 2, w_hh);
      snprintf(name, sizeof name, "weight_hh_l%" PRId64 "%s (operand %d)", l, suffix, k + 1);
      if (!need_type(n, k++, name, &want, "", err, errlen)) return false;
      if (!bias) continue;
      want = ir_type_make(x->dtype, 1, &gh);
      snprintf(name, sizeof name, "bias_ih_l%" PRId64 "%s (operand %d)", l, suffix, k + 1);
      if (!need_type(n, k++, name, &want, "", err, errlen)) return false;
      snprintf(name, sizeof name, "bias_hh_l%" PRId64 "%s (operand %d)", l, suffix, k + 1);
      if (!need_type(n, k++, name, &want, "", err, errlen)) return false;
    }
  }
  int64_t y[3] = {batch_first ? batch : steps, batch_first ? steps : batch, hd};
  int64_t h[3] = {layers * dirs, batch, hidden};
  out[0] = ir_type_make(x->dtype, 3, y);
  out[1] = ir_type_make(x->dtype, 3, h);
  if (gates == 4) out[2] = out[1];
  return true;
}

bool shape_lstm(const Node *n, TensorType *out, char *err, size_t errlen) {
  return shape_recurrent(n, 4, out, err, errlen);
}

bool shape_gru(const Node *n, TensorType *out, char *err, size_t errlen) {
  return shape_recurrent(n, 3, out, err, errlen);
}

/* The backward walks of one recurrent layer and direction, G gates:
 * px, ph [T, N, GH], w_hh [GH, H], dy [T, N, H], dh_n [N, H], then the
 * lstm's dc_n [N, H] or the gru's hprev [T, N, H] -> the gradients of
 * p (lstm) or of px and ph (gru), p's type (T and N swapped with
 * batch_first). */
static bool shape_bptt(const Node *n, int64_t G, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *p = &n->in[0]->type, *w = &n->in[2]->type, *dy = &n->in[3]->type;
  if (!need_float(n, p, err, errlen)) return false;
  for (int i = 1; i < 6; i++)
    if (!same_dtype(n, p, in_type(n, i), err, errlen)) return false;
  if (p->rank != 3 || p->dims[2] % G)
    return fail(err, errlen, "%s expects px [T, N, %" PRId64 "H], got %s", op_name(n), G, ts(p).s);
  int64_t N = p->dims[ir_attr_int(n, "batch_first") ? 0 : 1], H = p->dims[2] / G;
  TensorType wt = ir_type_make(p->dtype, 2, (int64_t[]){G * H, H});
  TensorType yt = ir_type_make(p->dtype, 3, (int64_t[]){p->dims[0], p->dims[1], H});
  TensorType st = ir_type_make(p->dtype, 2, (int64_t[]){N, H});
  if (!ir_type_eq(in_type(n, 1), p))
    return fail(err, errlen, "%s: ph must be %s, got %s", op_name(n), ts(p).s, ts(in_type(n, 1)).s);
  if (!ir_type_eq(w, &wt)) return fail(err, errlen, "%s: w_hh must be %s, got %s", op_name(n), ts(&wt).s, ts(w).s);
  if (!ir_type_eq(dy, &yt)) return fail(err, errlen, "%s: dy must be %s, got %s", op_name(n), ts(&yt).s, ts(dy).s);
  bool lstm = G == 4;
  const char *names[2] = {"dh_n", lstm ? "dc_n" : "hprev"};
  const TensorType *want[2] = {&st, lstm ? &st : &yt};
  for (int i = 0; i < 2; i++)
    if (!ir_type_eq(in_type(n, 4 + i), want[i]))
      return fail(err, errlen, "%s: %s must be %s, got %s", op_name(n), names[i], ts(want[i]).s,
                  ts(in_type(n, 4 + i)).s);
  out[0] = *p;
  if (!lstm) out[1] = *p;
  return true;
}

bool shape_lstm_bptt(const Node *n, TensorType *out, char *err, size_t errlen) {
  return shape_bptt(n, 4, out, err, errlen);
}

bool shape_gru_bptt(const Node *n, TensorType *out, char *err, size_t errlen) {
  return shape_bptt(n, 3, out, err, errlen);
}

/* ---- training (ir/train_ops.c has their meaning) ---- */

/* A gradient op is checked against the forward op it belongs to by
 * running that op's own rule on a stand-in node with n's attributes and
 * the given operands, so the two cannot disagree: its result must be
 * `want` (the gradient operand). */
static bool forward_gives(const Node *n, OpKind fwd, int n_in, Value *in, const TensorType *want,
                          const char *what, char *err, size_t errlen) {
  Value *ops[2] = {&in[0], n_in > 1 ? &in[1] : NULL};
  Node f = {.op = fwd, .n_in = n_in, .in = ops, .n_attrs = n->n_attrs, .attrs = n->attrs};
  TensorType got[1];
  char msg[256];
  if (!ir_ops[fwd].shape(&f, got, msg, sizeof msg))
    return fail(err, errlen, "%s: as the forward op: %s", op_name(n), msg);
  if (!ir_type_eq(&got[0], want))
    return fail(err, errlen, "%s: %s must be %s (the %s's result), got %s", op_name(n), what, ts(&got[0]).s,
                ir_ops[fwd].name, ts(want).s);
  return true;
}

static bool image_rank(const Node *n, const TensorType *t, char *err, size_t errlen) {
  if (t->rank != 4 && t->rank != 5)
    return fail(err, errlen, "%s expects a 4-d [N, C, H, W] or 5-d [N, C, D, H, W] input, got %s",
                op_name(n), ts(t).s);
  return true;
}

bool shape_conv_weight_grad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = &n->in[0]->type, *dy = &n->in[1]->type;
  if (!image_rank(n, x, err, errlen) || !need_float(n, in_type(n, 0), err, errlen) ||
      !same_dtype(n, in_type(n, 0), in_type(n, 1), err, errlen))
    return false;
  int nsp = x->rank - 2, nk;
  const Attr *kernel = ir_attr(n, "kernel"), *groups = ir_attr(n, "groups");
  if (!kernel || kernel->kind != AK_INTS || (nk = kernel->ints.n) != nsp)
    return fail(err, errlen, "%s: kernel must list %d sizes", op_name(n), nsp);
  if (!groups || groups->kind != AK_INT || groups->i < 1 || x->dims[1] % groups->i)
    return fail(err, errlen, "%s: groups must divide the input channels (%" PRId64 ")", op_name(n),
                x->dims[1]);
  int64_t dims[DL_MAX_RANK] = {dy->rank > 1 ? dy->dims[1] : 0, x->dims[1] / groups->i};
  for (int d = 0; d < nsp; d++) {
    if (kernel->ints.v[d] < 1) return fail(err, errlen, "%s: kernel sizes must be >= 1", op_name(n));
    dims[2 + d] = kernel->ints.v[d];
  }
  Value ops[2] = {{.type = *x}, {.type = ir_type_make(x->dtype, x->rank, dims)}};
  if (!forward_gives(n, nsp == 3 ? OP_CONV3D : OP_CONV2D, 2, ops, dy, "dy", err, errlen))
    return false;
  out[0] = ops[1].type;
  return true;
}

bool shape_maxpool_grad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *dy = &n->in[0]->type, *x = &n->in[1]->type;
  if (!image_rank(n, x, err, errlen) || !need_float(n, in_type(n, 0), err, errlen) ||
      !same_dtype(n, in_type(n, 0), in_type(n, 1), err, errlen))
    return false;
  Value ops[1] = {{.type = *x}};
  if (!forward_gives(n, x->rank == 5 ? OP_MAXPOOL3D : OP_MAXPOOL2D, 1, ops, dy, "dy", err, errlen))
    return false;
  out[0] = *x;
  return true;
}

bool shape_avgpool_grad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *dy = &n->in[0]->type;
  if (!image_rank(n, dy, err, errlen) || !need_float(n, in_type(n, 0), err, errlen)) return false;
  const Attr *size = ir_attr(n, "size");
  int nsp = dy->rank - 2;
  if (!size || size->kind != AK_INTS || size->ints.n != nsp)
    return fail(err, errlen, "%s: size must list the input's %d spatial sizes", op_name(n), nsp);
  TensorType x = *dy;
  for (int d = 0; d < nsp; d++) {
    if (size->ints.v[d] < 1 || size->ints.v[d] > DL_MAX_ELEMS)
      return fail(err, errlen, "%s: size values must be >= 1", op_name(n));
    x.dims[2 + d] = size->ints.v[d];
  }
  if (ir_type_numel(&x) < 0) return fail(err, errlen, "%s: the result is too large", op_name(n));
  Value ops[1] = {{.type = x}};
  if (!forward_gives(n, nsp == 3 ? OP_AVGPOOL3D : OP_AVGPOOL2D, 1, ops, dy, "dy", err, errlen))
    return false;
  out[0] = x;
  return true;
}

bool shape_embedding_grad(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *dy = &n->in[0]->type, *ids = &n->in[1]->type;
  if (!need_float(n, in_type(n, 0), err, errlen)) return false;
  if (ids->dtype != TY_I32 && ids->dtype != TY_I64)
    return fail(err, errlen, "%s: ids must be i32 or i64, got %s", op_name(n), ts(ids).s);
  bool prefix = dy->rank >= ids->rank && dy->rank - ids->rank < DL_MAX_RANK;
  for (int d = 0; prefix && d < ids->rank; d++) prefix = dy->dims[d] == ids->dims[d];
  if (!prefix)
    return fail(err, errlen, "%s: dy %s must start with the ids' shape %s", op_name(n), ts(dy).s, ts(ids).s);
  const Attr *num = ir_attr(n, "num");
  if (!num || num->kind != AK_INT || num->i < 1 || num->i > DL_MAX_ELEMS)
    return fail(err, errlen, "%s: num (the rows of the result) must be >= 1", op_name(n));
  out[0] = *dy;
  out[0].rank = dy->rank - ids->rank + 1;
  out[0].dims[0] = num->i;
  for (int d = ids->rank; d < dy->rank; d++) out[0].dims[d - ids->rank + 1] = dy->dims[d];
  if (ir_type_numel(&out[0]) < 0) return fail(err, errlen, "%s: the result is too large", op_name(n));
  return true;
}

/* softmax_xent, its gradient and both: x [N, C], t [N] of class
 * indices, and for the gradient dy [N] or one value for every row. */
bool shape_xent(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const TensorType *x = in_type(n, 0), *t = in_type(n, 1);
  if (!need_float(n, x, err, errlen)) return false;
  if (x->rank != 2) return fail(err, errlen, "%s: x must be [N, C], got %s", op_name(n), ts(x).s);
  if (t->dtype != TY_I32 && t->dtype != TY_I64)
    return fail(err, errlen, "%s: t must be i32 or i64, got %s", op_name(n), ts(t).s);
  if (t->rank != 1 || t->dims[0] != x->dims[0])
    return fail(err, errlen, "%s: t %s must be [N] for x %s", op_name(n), ts(t).s, ts(x).s);
  if (n->op != OP_XENT) {
    const TensorType *dy = in_type(n, 2);
    if (!need_float(n, dy, err, errlen)) return false;
    if (ir_type_numel(dy) != 1 && (dy->rank != 1 || dy->dims[0] != x->dims[0]))
      return fail(err, errlen, "%s: dy %s must be [N] or one value for x %s", op_name(n), ts(dy).s, ts(x).s);
  }
  TensorType rows = *t;
  rows.dtype = x->dtype == TY_F64 ? TY_F64 : TY_F32;
  out[0] = n->op == OP_XENT_GRAD ? *x : rows;
  if (n->op == OP_XENT_BOTH) out[1] = *x;
  return true;
}

bool shape_dropout(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  if (!need_float(n, in_type(n, 0), err, errlen)) return false;
  static const char *const what[] = {"", "seed", "offset", "first sample"};
  for (int i = 1; i < n->n_in; i++) {
    const TensorType *k = &n->in[i]->type;
    if (k->dtype != TY_I64 || ir_type_numel(k) != 1)
      return fail(err, errlen, "dropout: the %s must be one i64, got %s", what[i], ts(k).s);
  }
  const Attr *p = ir_attr(n, "p"), *stream = ir_attr(n, "stream");
  if (!p || p->kind != AK_FLOAT || !(p->f >= 0 && p->f <= 1))
    return fail(err, errlen, "dropout: p must be a probability from 0 to 1");
  if (!stream || stream->kind != AK_INT || stream->i < 0 || stream->i > UINT32_MAX)
    return fail(err, errlen, "dropout: stream must be from 0 to 2^32 - 1");
  const Attr *batch = ir_attr(n, "batch");
  if (!batch || batch->kind != AK_INT || batch->i < 0)
    return fail(err, errlen, "dropout: batch must be 0 (x's axis 0) or the samples x is computed from");
  if (ir_attr(n, "part")) {
    int k;
    const int64_t *part;
    const TensorType *x = in_type(n, 0);
    if (!attr_ints(n, "part", -1, &k, &part, err, errlen)) return false;
    int64_t groups = k == 4 ? part[3] : 1;
    if ((k != 3 && k != 4) || part[0] < 0 || part[0] >= x->rank || part[1] < 1 || part[1] > 1 << 16 || part[2] < 0 ||
        part[2] >= part[1] || groups < 1 || x->dims[part[0]] % groups)
      return fail(err, errlen, "dropout: part must be [axis of x, parts from 1 to 65536, index below parts] and "
                  "optionally groups dividing the axis, got %s", ints_text(part, k).s);
    if (ir_type_numel(x) > (INT64_C(1) << 46) / part[1])
      return fail(err, errlen, "dropout: the whole tensor of %lld parts of %s is too large", (long long)part[1],
                  ts(x).s);
  }
  out[0] = n->in[0]->type;
  return true;
}

bool shape_random_uniform(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  static const char *const what[] = {"seed", "offset", "first sample"};
  for (int i = 0; i < n->n_in; i++) {
    const TensorType *k = &n->in[i]->type;
    if (k->dtype != TY_I64 || ir_type_numel(k) != 1)
      return fail(err, errlen, "random_uniform: the %s must be one i64, got %s", what[i], ts(k).s);
  }
  int count;
  const int64_t *shape;
  if (!attr_ints(n, "shape", -1, &count, &shape, err, errlen)) return false;
  if (!type_of_shape("random_uniform", count, shape, 0, TY_F32, out, err, errlen)) return false;
  const Attr *stream = ir_attr(n, "stream"), *batch = ir_attr(n, "batch");
  if (!stream || stream->kind != AK_INT || stream->i < 0 || stream->i > UINT32_MAX)
    return fail(err, errlen, "random_uniform: stream must be from 0 to 2^32 - 1");
  if (!batch || batch->kind != AK_INT || batch->i < 0)
    return fail(err, errlen, "random_uniform: batch must be 0 (axis 0) or the samples it is drawn for");
  return true;
}

/* optim_update: the param's type, each state's, and f32[] for a state
 * its kind lacks. */
bool shape_optim_update(const Node *n, TensorType *out, char *err, size_t errlen) {
  if (!operands_ok(n, err, errlen)) return false;
  const Attr *kind = get_attr(n, "kind", AK_STR, "a string", err, errlen);
  if (!kind) return false;
  const char *keys[IR_OPTIM_MAX_STATES];
  int states = ir_optim_node_states(n, keys);
  if (states < 0)
    return fail(err, errlen,
                "optim_update: kind must be \"sgd\", \"adam\", \"adamw\", \"rmsprop\", \"adagrad\", \"adamax\", "
                "\"adadelta\", \"radam\" or \"nadam\", got \"%s\"",
                kind->s);
  bool nadam = strcmp(kind->s, "nadam") == 0, momentum_in = ir_attr_int(n, "momentum_input") != 0;
  if (ir_attr_int(n, "decoupled") && !nadam && strcmp(kind->s, "radam") != 0)
    return fail(err, errlen, "optim_update: decoupled is radam's and nadam's (%s: adamw is adam's)", kind->s);
  if (momentum_in && (strcmp(kind->s, "adagrad") == 0 || strcmp(kind->s, "adadelta") == 0))
    return fail(err, errlen, "optim_update: %s has neither a momentum nor a beta1 to take as momentum_input", kind->s);
  int first = ir_optim_first_state(n);
  if (n->n_in != first + states) {
    char names[128] = "";
    for (int k = 0; k < states; k++) snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", keys[k]);
    return fail(err, errlen, "optim_update: %s takes %d operands (p, g, lr, t, scale%s%s%s), got %d", kind->s,
                first + states, momentum_in ? ", momentum" : "", nadam ? ", mu_product" : "", names, n->n_in);
  }
  const TensorType *p = in_type(n, 0);
  if (p->dtype != TY_F32) return fail(err, errlen, "optim_update: the param must be f32, got %s", ts(p).s);
  for (int i = 1; i < n->n_in; i++) {
    const TensorType *t = in_type(n, i);
    bool scalar = i >= 2 && i < first;
    if (scalar ? t->dtype != TY_F32 || t->rank != 0 : !ir_type_eq(t, p))
      return fail(err, errlen, "optim_update: operand %d must be %s, got %s", i + 1,
                  scalar ? "f32[]" : ts(p).s, ts(t).s);
  }
  TensorType none = {.dtype = TY_F32};
  out[0] = *p;
  for (int k = 0; k < IR_OPTIM_MAX_STATES; k++) out[1 + k] = k < states ? *p : none;
  return true;
}
