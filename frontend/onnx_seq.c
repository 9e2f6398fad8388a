/* ONNX sequences and optionals, resolved at import: takes the Sequence*,
 * SplitToSequence, ConcatFromSequence, SequenceMap and Optional* nodes,
 * returns lists of the importer's values (Val.kind VK_SEQ, VK_OPT), not
 * an IR type.  A static compiler can do this because every length and
 * position is known at import; one computed at run time is refused,
 * naming the node.  Graph inputs and outputs of these types flatten to
 * tensors ("x.0", "x.1", ... for a sequence "x"). */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* A sequence longer than this is refused (each element is a value of
 * the graph, and a graph input's elements are counted one by one). */
enum { MAX_SEQ = 4096 };

/* The ops that take a sequence or optional operand; any other refuses
 * one, naming it.  If and Loop carry them through their subgraphs. */
static const char *const container_ops[] = {
    "ConcatFromSequence", "Identity",      "If",            "Loop",           "Optional",
    "OptionalGetElement", "OptionalHasElement", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
    "SequenceErase",      "SequenceInsert", "SequenceLength", "SequenceMap",    "SplitToSequence",
};

bool ox_takes_containers(const char *op_type) {
  for (size_t i = 0; i < sizeof container_ops / sizeof *container_ops; i++)
    if (strcmp(container_ops[i], op_type) == 0) return true;
  return false;
}

const char *ox_kind_name(const Val *v) {
  return v->kind == VK_SEQ ? "a sequence" : v->kind == VK_OPT ? "an optional" : "a tensor";
}

static Val *new_container(Imp *im, ValKind kind, int n, DType dt) {
  Val *v = ARENA_NEW(&im->c->arena, Val);
  v->kind = kind;
  v->n_elems = n;
  v->elems = ARENA_ARRAY(&im->c->arena, Val *, n + 1);
  v->elem_dtype = dt;
  return v;
}

static Val *need_seq(Imp *im, const ONode *n, int i) {
  Val *v = ox_in_req(im, n, i);
  if (v && v->kind != VK_SEQ) {
    ox_bad(im, "input %d is %s, a sequence expected", i + 1, ox_kind_name(v));
    return NULL;
  }
  return v;
}

static Val *need_tensor(Imp *im, const ONode *n, int i) {
  Val *v = ox_in_req(im, n, i);
  if (v && v->kind != VK_TENSOR) {
    ox_bad(im, "input %d is %s, a tensor expected", i + 1, ox_kind_name(v));
    return NULL;
  }
  return v;
}

/* A position in a sequence of n values, known at import, counted from
 * the end when negative: in [-n, n-1], or [-n, n] for an insertion. */
static bool position(Imp *im, const Val *seq, Val *p, bool insert, int64_t *out) {
  int64_t n = seq->n_elems;
  int64_t x[64];
  int k;
  if (p->kind != VK_TENSOR) return ox_bad(im, "the position is %s, a tensor expected", ox_kind_name(p));
  if (!ox_const_ints(im, p, "a sequence position", &k, x)) return false;
  if (k != 1) return ox_bad(im, "the position holds %d values, one expected", k);
  int64_t hi = insert ? n : n - 1;
  if (n == 0 && !insert && seq->flat_input && seq->name)
    return ox_bad(im, "position %" PRId64 " of '%s', which is empty (a sequence graph input holds the elements "
                      "given: %s.0, %s.1, ...)",
                  x[0], seq->name, seq->name, seq->name);
  if (x[0] < -n || x[0] > hi)
    return ox_bad(im, "position %" PRId64 " is out of range for a sequence of %" PRId64 " (%" PRId64 " to %" PRId64 ")",
                  x[0], n, -n, hi);
  *out = x[0] < 0 ? x[0] + n : x[0];
  return true;
}

static bool same_dtype(Imp *im, const Val *seq, const Val *x, const char *what) {
  if (x->type.dtype == seq->elem_dtype) return true;
  return ox_bad(im, "%s is %s, the sequence holds %s", what, ir_dtype_name(x->type.dtype),
                ir_dtype_name(seq->elem_dtype));
}

bool ox_op_sequence_construct(Imp *im, ONode *n) {
  if (n->n_in < 1) return ox_bad(im, "SequenceConstruct needs at least one input");
  if (n->n_in > MAX_SEQ) return ox_bad(im, "%d inputs, more than the %d a sequence may hold", n->n_in, (int)MAX_SEQ);
  Val *s = new_container(im, VK_SEQ, n->n_in, TY_F32);
  for (int i = 0; i < n->n_in; i++) {
    if (!(s->elems[i] = need_tensor(im, n, i))) return false;
    if (i == 0) s->elem_dtype = s->elems[0]->type.dtype;
    else if (s->elems[i]->type.dtype != s->elem_dtype)
      return ox_bad(im, "input %d is %s, input 1 %s: a sequence's elements share one dtype", i + 1,
                    ir_dtype_name(s->elems[i]->type.dtype), ir_dtype_name(s->elem_dtype));
  }
  return (n->out[0] = s);
}

bool ox_op_sequence_empty(Imp *im, ONode *n) {
  int64_t t;
  DType dt;
  if (!ox_attr_int(im, "dtype", 1 /* FLOAT */, &t)) return false;
  if (t < INT32_MIN || t > INT32_MAX || !ox_dtype_from_onnx((int32_t)t, &dt))
    return ox_bad(im, "dtype %" PRId64 " is not supported (%s)", t, ox_dtypes_we_have);
  return (n->out[0] = new_container(im, VK_SEQ, 0, dt));
}

bool ox_op_sequence_at(Imp *im, ONode *n) {
  Val *s = need_seq(im, n, 0), *p = s ? ox_in_req(im, n, 1) : NULL;
  int64_t i;
  if (!p || !position(im, s, p, false, &i)) return false;
  return (n->out[0] = s->elems[i]);
}

bool ox_op_sequence_insert(Imp *im, ONode *n) {
  Val *s = need_seq(im, n, 0), *x = s ? need_tensor(im, n, 1) : NULL, *p = ox_in_opt(n, 2);
  int64_t at = s ? s->n_elems : 0;
  if (!x || (p && !position(im, s, p, true, &at)) || !same_dtype(im, s, x, "the tensor")) return false;
  if (s->n_elems >= MAX_SEQ) return ox_bad(im, "the sequence would hold more than %d values", (int)MAX_SEQ);
  Val *r = new_container(im, VK_SEQ, s->n_elems + 1, s->elem_dtype);
  for (int i = 0, j = 0; i <= s->n_elems; i++) r->elems[i] = i == at ? x : s->elems[j++];
  return (n->out[0] = r);
}

bool ox_op_sequence_erase(Imp *im, ONode *n) {
  Val *s = need_seq(im, n, 0), *p = ox_in_opt(n, 1);
  if (!s) return false;
  if (s->n_elems == 0)
    return ox_bad(im, "SequenceErase of an empty sequence%s",
                  s->flat_input ? " (a sequence graph input holds the elements given)" : "");
  int64_t at = s->n_elems - 1;
  if (p && !position(im, s, p, false, &at)) return false;
  Val *r = new_container(im, VK_SEQ, s->n_elems - 1, s->elem_dtype);
  for (int i = 0, j = 0; i < s->n_elems; i++)
    if (i != at) r->elems[j++] = s->elems[i];
  return (n->out[0] = r);
}

bool ox_op_sequence_length(Imp *im, ONode *n) {
  Val *s = need_seq(im, n, 0);
  return s && (n->out[0] = ox_scalar(im, (double)s->n_elems, TY_I64));
}

/* SplitToSequence: the input cut along axis into pieces of the constant
 * split's sizes (a scalar: pieces of that size, the last shorter; none:
 * pieces of 1, squeezed unless keepdims). */
bool ox_op_split_to_sequence(Imp *im, ONode *n) {
  Val *x = need_tensor(im, n, 0), *sp = ox_in_opt(n, 1);
  int64_t axis, keep;
  int ax;
  if (!x || !ox_attr_int(im, "axis", 0, &axis) || !ox_attr_int(im, "keepdims", 1, &keep) ||
      !ox_norm_axis(im, axis, x->type.rank, &ax))
    return false;
  int64_t len = x->type.dims[ax], sizes[MAX_SEQ];
  int count = 0;
  bool squeeze = false;
  if (!sp) {
    if (len > MAX_SEQ) return ox_bad(im, "the axis has %" PRId64 " values, more than %d pieces", len, (int)MAX_SEQ);
    for (int64_t i = 0; i < len; i++) sizes[count++] = 1;
    squeeze = keep == 0;
  } else {
    int64_t v[64];
    int k;
    if (sp->kind != VK_TENSOR) return ox_bad(im, "split is %s, a tensor expected", ox_kind_name(sp));
    const Tensor *t = ox_need_const(im, sp, "SplitToSequence's split");
    if (!t || !ox_const_ints(im, sp, "SplitToSequence's split", &k, v)) return false;
    if (t->type.rank == 0) {
      if (v[0] <= 0) return ox_bad(im, "split is %" PRId64 ", a positive size expected", v[0]);
      if (len / v[0] + (len % v[0] != 0) > MAX_SEQ) return ox_bad(im, "more than %d pieces", (int)MAX_SEQ);
      for (int64_t at = 0; at < len; at += v[0]) sizes[count++] = len - at < v[0] ? len - at : v[0];
    } else {
      int64_t sum = 0;
      for (int i = 0; i < k; i++) {
        if (v[i] < 0 || v[i] > len) /* also keeps the sum from overflowing */
          return ox_bad(im, "split[%d] is %" PRId64 ", outside 0 to the axis's %" PRId64, i, v[i], len);
        sum += v[i];
        sizes[count++] = v[i];
      }
      if (sum != len)
        return ox_bad(im, "the split sizes add up to %" PRId64 ", the axis has %" PRId64, sum, len);
    }
  }
  Val *s = new_container(im, VK_SEQ, count, x->type.dtype);
  int64_t at = 0;
  for (int i = 0; i < count; i++) {
    Val *piece = ox_slice_axis(im, x, ax, at, at + sizes[i], 1);
    at += sizes[i];
    if (piece && squeeze) {
      int64_t dims[DL_MAX_RANK];
      int r = 0;
      for (int d = 0; d < x->type.rank; d++)
        if (d != ax) dims[r++] = piece->type.dims[d];
      piece = ox_reshape(im, piece, r, dims);
    }
    if (!(s->elems[i] = piece)) return false;
  }
  return (n->out[0] = s);
}

/* ConcatFromSequence: Concat of the elements along axis, or with
 * new_axis=1 their stack along a new axis (in [-r-1, r]). */
bool ox_op_concat_from_sequence(Imp *im, ONode *n) {
  Val *s = need_seq(im, n, 0);
  int64_t axis, new_axis;
  if (!s || !ox_attr_int(im, "new_axis", 0, &new_axis)) return false;
  if (!ox_find_attr(im, "axis")) return ox_bad(im, "attribute 'axis' is missing");
  if (!ox_attr_int(im, "axis", 0, &axis)) return false;
  if (new_axis != 0 && new_axis != 1) return ox_bad(im, "new_axis is %" PRId64 ", 0 or 1 expected", new_axis);
  if (s->n_elems == 0) return ox_bad(im, "ConcatFromSequence of an empty sequence (its shape is unknown)");
  Val **parts = ARENA_ARRAY(&im->c->arena, Val *, s->n_elems);
  const TensorType *t0 = &s->elems[0]->type;
  int rank = t0->rank + (int)new_axis, ax;
  if (rank > DL_MAX_RANK) return ox_bad(im, "rank %d is more than the supported %d", rank, (int)DL_MAX_RANK);
  if (!ox_norm_axis(im, axis, rank, &ax)) return false;
  for (int i = 0; i < s->n_elems; i++) {
    Val *e = s->elems[i];
    if (e->type.rank != t0->rank)
      return ox_bad(im, "element %d has rank %d, element 0 rank %d", i, e->type.rank, t0->rank);
    if (new_axis) {
      int64_t dims[DL_MAX_RANK];
      for (int d = 0, k = 0; d < rank; d++) dims[d] = d == ax ? 1 : e->type.dims[k++];
      if (!(e = ox_reshape(im, e, rank, dims))) return false;
    }
    parts[i] = e;
  }
  return (n->out[0] = ox_concat(im, s->n_elems, parts, ax));
}

/* SequenceMap: the body once per element, the other inputs (sequences
 * of the same length, or tensors) bound element by element. */
bool ox_op_sequence_map(Imp *im, ONode *n) {
  const Onnx__AttributeProto *a = ox_find_attr(im, "body");
  if (!a || !a->g) return ox_bad(im, "attribute 'body' (a graph) is missing");
  const Onnx__GraphProto *body = a->g;
  Val *s0 = need_seq(im, n, 0);
  if (!s0) return false;
  int len = s0->n_elems;
  for (int i = 1; i < n->n_in; i++) {
    Val *v = ox_in_req(im, n, i);
    if (!v) return false;
    if (v->kind == VK_OPT) return ox_bad(im, "input %d is an optional: a sequence or tensor expected", i + 1);
    if (v->kind == VK_SEQ && v->n_elems != len)
      return ox_bad(im, "input %d holds %d values, input 1 %d: the sequences must be as long", i + 1, v->n_elems, len);
  }
  if ((int)body->n_output != n->n_out)
    return ox_bad(im, "the body has %zu outputs, the node %d", body->n_output, n->n_out);
  Arena *ar = &im->c->arena;
  Val **in = ARENA_ARRAY(ar, Val *, n->n_in + 1), **out = ARENA_ARRAY(ar, Val *, n->n_out + 1);
  for (int k = 0; k < n->n_out; k++) {
    DType dt = TY_F32;
    const Onnx__TypeProto *tp = body->output[k]->type;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
        !ox_dtype_from_onnx(tp->tensor_type->elem_type, &dt))
      dt = TY_F32;
    n->out[k] = new_container(im, VK_SEQ, len, dt);
  }
  for (int e = 0; e < len; e++) {
    for (int i = 0; i < n->n_in; i++) in[i] = n->in[i]->kind == VK_SEQ ? n->in[i]->elems[e] : n->in[i];
    if (!ox_import_subgraph(im, body, "the body", n->n_in, in, out)) return false;
    for (int k = 0; k < n->n_out; k++) {
      if (out[k]->kind != VK_TENSOR) return ox_bad(im, "the body's output %d is %s, a tensor expected", k + 1, ox_kind_name(out[k]));
      if (e == 0) n->out[k]->elem_dtype = out[k]->type.dtype;
      else if (out[k]->type.dtype != n->out[k]->elem_dtype)
        return ox_bad(im, "the body's output %d is %s for element %d, %s for element 0", k + 1,
                      ir_dtype_name(out[k]->type.dtype), e, ir_dtype_name(n->out[k]->elem_dtype));
      n->out[k]->elems[e] = out[k];
    }
  }
  return true;
}

bool ox_op_optional(Imp *im, ONode *n) {
  Val *x = ox_in_opt(n, 0);
  const Onnx__AttributeProto *type = ox_find_attr(im, "type"); /* marks it read: the input's type says it */
  if (!x && !type) return ox_bad(im, "an Optional without an input needs the attribute 'type'");
  if (x && x->kind == VK_OPT) return ox_bad(im, "input 1 is an optional: optionals do not nest here");
  Val *o = new_container(im, VK_OPT, x ? 1 : 0, x ? x->type.dtype : TY_F32);
  if (x) o->elems[0] = x;
  return (n->out[0] = o);
}

bool ox_op_optional_has_element(Imp *im, ONode *n) {
  Val *x = ox_in_opt(n, 0);
  bool has = x && (x->kind != VK_OPT || x->n_elems > 0);
  return (n->out[0] = ox_scalar(im, has, TY_BOOL));
}

bool ox_op_optional_get_element(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  if (x->kind != VK_OPT) return (n->out[0] = x);
  if (x->n_elems == 0) return ox_bad(im, "the optional is empty at import: OptionalGetElement has nothing to give");
  return (n->out[0] = x->elems[0]);
}

/* ---- graph inputs and outputs ---- */

static bool given(Imp *im, const char *name) {
  return fe_dims_shape(&im->dims, name) || (im->opt && im->opt->known && ir_tensor_map_find(im->opt->known, name));
}

/* A given value fits the declared tensor type: its dtype, and its rank
 * and fixed dims where declared. */
static bool fits(const Onnx__TypeProto *tp, const TensorType *t) {
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  DType dt;
  if (!ox_dtype_from_onnx(tt->elem_type, &dt) || dt != t->dtype) return false;
  if (!tt->shape) return true;
  if ((int)tt->shape->n_dim != t->rank) return false;
  for (int i = 0; i < t->rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0 &&
        d->dim_value != t->dims[i])
      return false;
  }
  return true;
}

static Val *tensor_input(Imp *im, const char *onnx_name, const char *name, const Onnx__TypeProto *tp) {
  bool renamed = strcmp(name, onnx_name) != 0; /* an optional tensor keeps its name */
  bool clash = renamed && ox_find_entry(im, name) != NULL;
  const Onnx__GraphProto *gp = im->m->graph;
  for (size_t i = 0; !clash && renamed && i < gp->n_input; i++)
    clash = gp->input[i]->name && strcmp(gp->input[i]->name, name) == 0;
  if (clash) {
    ox_bad(im, "graph input '%s' flattens to '%s', which the model also names", onnx_name, name);
    return NULL;
  }
  TensorType t;
  volatile int32_t held = 0; /* volatile: ox_bad may longjmp */
  const Tensor *hint = im->opt && im->opt->known ? ir_tensor_map_find(im->opt->known, name) : NULL;
  if (hint && !fe_dims_shape(&im->dims, name) && fits(tp, &hint->type)) {
    /* a value given at import binds the element's free dims */
    t = hint->type;
  } else if (!ox_tensor_input_type(im, name, tp, false, &t, &held)) {
    return NULL;
  }
  Val *v = ox_val_of(im, &ir_source(im->g, OP_INPUT, &t, name, im->loc)->out[0]);
  v->name = name;
  v->held = held;
  if (hint && ir_type_eq(&hint->type, &t)) {
    v->hint = hint;
    v->hint_flows = !ir_dtype_is_float(t.dtype);
  }
  return v;
}

static bool is_tensor_type(const Onnx__TypeProto *tp) {
  return tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type;
}

/* A sequence of tensors given as name.0, name.1, ...: as many as the
 * caller gives. */
static Val *seq_input(Imp *im, const char *name, const Onnx__TypeProto *tp) {
  const Onnx__TypeProto *et = tp->sequence_type ? tp->sequence_type->elem_type : NULL;
  if (!is_tensor_type(et)) {
    ox_bad(im, "graph input '%s' is a sequence of %s: only a sequence of tensors flattens to inputs", name,
           et && et->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE   ? "sequences"
           : et && et->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? "optionals"
           : et && et->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE      ? "maps"
                                                                           : "no declared element type");
    return NULL;
  }
  DType dt;
  if (!ox_dtype_from_onnx(et->tensor_type->elem_type, &dt)) {
    ox_bad(im, "graph input '%s' is a sequence of %s, which is not supported (%s)", name,
           ox_onnx_type_name(et->tensor_type->elem_type), ox_dtypes_we_have);
    return NULL;
  }
  int count = 0;
  while (count <= MAX_SEQ && given(im, arena_printf(&im->c->arena, "%s.%d", name, count))) count++;
  if (count > MAX_SEQ) {
    ox_bad(im, "graph input '%s' is given more than %d elements", name, (int)MAX_SEQ);
    return NULL;
  }
  Val *s = new_container(im, VK_SEQ, count, dt);
  s->flat_input = true;
  s->name = arena_strdup(&im->c->arena, name);
  for (int i = 0; i < count; i++)
    if (!(s->elems[i] = tensor_input(im, name, arena_printf(&im->c->arena, "%s.%d", name, i), et))) return NULL;
  return s;
}

bool ox_container_input(Imp *im, const Onnx__ValueInfoProto *vi) {
  const char *name = vi->name;
  const Onnx__TypeProto *tp = vi->type;
  Val *v;
  if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
    v = seq_input(im, name, tp);
  } else {
    const Onnx__TypeProto *et = tp->optional_type ? tp->optional_type->elem_type : NULL;
    if (is_tensor_type(et)) {
      bool present = given(im, name);
      v = new_container(im, VK_OPT, present, TY_F32);
      if (present && !(v->elems[0] = tensor_input(im, name, name, et))) return false;
    } else if (et && et->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
      bool present = given(im, arena_printf(&im->c->arena, "%s.0", name));
      v = new_container(im, VK_OPT, present, TY_F32);
      if (present && !(v->elems[0] = seq_input(im, name, et))) return false;
    } else {
      return ox_bad(im, "graph input '%s' is an optional of neither a tensor nor a sequence: it does not flatten "
                        "to inputs",
                    name);
    }
  }
  if (!v) return false;
  Entry *e = ox_add_entry(im, name, -1);
  e->val = v;
  v->name = e->name;
  return true;
}

bool ox_flatten_output(Imp *im, Val *v, const char *name, int *n, Val ***vals, const char ***names) {
  Arena *a = &im->c->arena;
  Val *s = v;
  *n = 0;
  if (v->kind == VK_OPT) {
    if (v->n_elems == 0) return true;
    s = v->elems[0];
    if (s->kind == VK_TENSOR) {
      *vals = ARENA_ARRAY(a, Val *, 1), *names = ARENA_ARRAY(a, const char *, 1);
      (*vals)[0] = s, (*names)[0] = name, *n = 1;
      return true;
    }
  }
  if (s->kind != VK_SEQ) return ox_bad(im, "graph output '%s' is %s of %s: it does not flatten", name, ox_kind_name(v), ox_kind_name(s));
  *vals = ARENA_ARRAY(a, Val *, s->n_elems + 1), *names = ARENA_ARRAY(a, const char *, s->n_elems + 1);
  for (int i = 0; i < s->n_elems; i++) {
    if (s->elems[i]->kind != VK_TENSOR)
      return ox_bad(im, "graph output '%s' holds %s: only tensors flatten to outputs", name, ox_kind_name(s->elems[i]));
    (*vals)[i] = s->elems[i];
    (*names)[i] = arena_printf(a, "%s.%d", name, i);
  }
  *n = s->n_elems;
  return true;
}
