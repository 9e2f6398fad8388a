/* The op table built from ops.def, types, attributes and the graph
 * container: creating, linking and rewiring nodes. */
#include "ir.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- op table ---- */

#define ATTR(name, kind, def) {name, kind, def},
#define UNPAREN(...) __VA_ARGS__
#define OP(id, name, lo, hi, nout, cls, rule, attrs) \
  static const AttrSpec attrs_##id[] = {UNPAREN attrs{NULL, AK_INT, NULL}};
#include "ops.def"
#undef OP

#define shape_declared NULL
#define OP(id, name, lo, hi, nout, cls, rule, attrs) \
  [OP_##id] = {name, lo, hi, nout, cls, shape_##rule, attrs_##id, (int)ARRAY_LEN(attrs_##id) - 1},
const OpInfo ir_ops[OP_COUNT] = {
#include "ops.def"
};
#undef OP
#undef shape_declared
#undef ATTR

const char *ir_op_origin(const Node *n) {
  bool xent = n->op == OP_XENT || n->op == OP_XENT_GRAD || n->op == OP_XENT_BOTH;
  return xent ? ir_ops[OP_GATHER_ELEMENTS].name : ir_ops[n->op].name;
}

OpKind ir_op_from_name(const char *name) {
  for (int i = 0; i < OP_COUNT; i++)
    if (strcmp(ir_ops[i].name, name) == 0) return (OpKind)i;
  return OP_COUNT;
}

int ir_op_results(OpKind op, int n_in) {
  if (op == OP_LOOP_BEGIN) return n_in > 1 ? n_in - 1 : 0;
  if (op == OP_LOOP_END) return n_in > 2 ? (n_in - 1) / 2 : 0;
  return ir_ops[op].n_out;
}

const AttrSpec *ir_op_attr_spec(OpKind op, const char *name) {
  const OpInfo *info = &ir_ops[op];
  for (int i = 0; i < info->n_attrs; i++)
    if (strcmp(info->attrs[i].name, name) == 0) return &info->attrs[i];
  return NULL;
}

bool ir_op_takes_ints(OpKind op) {
  ShapeFn s = ir_ops[op].shape;
  return s == shape_unary || s == shape_binary || s == shape_mod || s == shape_bits || s == shape_cast ||
         s == shape_bitcast;
}

bool ir_op_is_logic(OpKind op) {
  ShapeFn s = ir_ops[op].shape;
  return s == shape_compare || s == shape_float_test || s == shape_logical || s == shape_where;
}

static bool is_row_reduce(const Node *n) {
  return n->op == OP_REDUCE_SUM || n->op == OP_REDUCE_MEAN || n->op == OP_REDUCE_MAX || n->op == OP_REDUCE_MIN;
}

/* Which axes of its operand n reduces, as bits. */
static uint64_t reduced_axes(const Node *n) {
  const Attr *at = ir_attr(n, "axes");
  if (!at || at->kind != AK_INTS) return 0;
  int rank = n->in[0]->type.rank;
  uint64_t bits = 0;
  for (int i = 0; i < at->ints.n; i++) {
    int64_t d = at->ints.v[i] < 0 ? at->ints.v[i] + rank : at->ints.v[i];
    if (d >= 0 && d < 64) bits |= 1ull << d;
  }
  return bits;
}

bool ir_reduce_siblings(const Node *a, const Node *b) {
  if (!is_row_reduce(a) || !is_row_reduce(b) || a->n_in != 1 || b->n_in != 1 || a->n_out != 1 || b->n_out != 1)
    return false;
  if (!ir_type_eq(&a->in[0]->type, &b->in[0]->type) || !reduced_axes(a) || reduced_axes(a) != reduced_axes(b))
    return false;
  return ir_type_numel(&a->out[0].type) == ir_type_numel(&b->out[0].type) &&
         a->out[0].type.dtype == b->out[0].type.dtype;
}

/* ---- dtypes ---- */

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtype_info[TY_COUNT] = {
    [TY_F32] = {"f32", 4, true},  [TY_F16] = {"f16", 2, true}, [TY_BF16] = {"bf16", 2, true},
    [TY_I8] = {"i8", 1, false},   [TY_I32] = {"i32", 4, false}, [TY_I64] = {"i64", 8, false},
    [TY_BOOL] = {"bool", 1, false}, [TY_U8] = {"u8", 1, false}, [TY_F64] = {"f64", 8, true},
    [TY_I16] = {"i16", 2, false},   [TY_U16] = {"u16", 2, false}, [TY_U32] = {"u32", 4, false},
    [TY_U64] = {"u64", 8, false},
};

const char *ir_dtype_name(DType t) { return (unsigned)t < TY_COUNT ? dtype_info[t].name : "?"; }
int ir_dtype_size(DType t) { return (unsigned)t < TY_COUNT ? dtype_info[t].size : 0; }
bool ir_dtype_is_float(DType t) { return (unsigned)t < TY_COUNT && dtype_info[t].is_float; }

bool ir_dtype_from_name(const char *name, DType *out) {
  for (int i = 0; i < TY_COUNT; i++)
    if (strcmp(dtype_info[i].name, name) == 0) {
      *out = (DType)i;
      return true;
    }
  return false;
}

/* ---- types ---- */

int64_t ir_type_numel(const TensorType *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] != 0 && n > DL_MAX_ELEMS / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

void ir_type_strides(const TensorType *t, int64_t *st) {
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= t->dims[i];
  }
}

void ir_type_bcast_strides(const TensorType *in, const TensorType *out, int64_t *st) {
  int64_t own[DL_MAX_RANK];
  ir_type_strides(in, own);
  int off = out->rank - in->rank;
  for (int i = 0; i < out->rank; i++) {
    int j = i - off;
    st[i] = (j < 0 || in->dims[j] == 1) ? 0 : own[j];
  }
}

bool ir_broadcast_dims(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *rout) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int64_t da = i < ra ? a[ra - 1 - i] : 1;
    int64_t db = i < rb ? b[rb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[r - 1 - i] = da == 1 ? db : da;
  }
  *rout = r;
  return true;
}

bool ir_dims_eq(const TensorType *a, const TensorType *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool ir_type_eq(const TensorType *a, const TensorType *b) { return a->dtype == b->dtype && ir_dims_eq(a, b); }

char *ir_type_str(const TensorType *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "%s[", ir_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

TensorType ir_type_make(DType dt, int rank, const int64_t *dims) {
  TensorType t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}

/* ---- attributes ---- */

const Attr *ir_attr(const Node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

bool ir_matmul_trans(const Node *n, int i) {
  const Attr *a = ir_attr(n, i ? "trans_b" : "trans_a");
  return a && a->kind == AK_INT && a->i != 0;
}

bool ir_conv_nhwc(const Node *n) {
  bool conv = n->op == OP_CONV2D || n->op == OP_CONV3D || n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D;
  return conv && ir_nhwc(n);
}

bool ir_conv_depthwise(const Node *n) {
  if (n->op != OP_CONV2D && n->op != OP_CONV3D) return false;
  const TensorType *x = &n->in[0]->type, *y = &n->out[0].type;
  int cx = ir_nhwc(n) ? x->rank - 1 : 1;
  int64_t groups = ir_attr_int(n, "groups");
  return groups > 1 && groups == x->dims[cx] && y->dims[cx] % groups == 0;
}

void ir_int_range(DType dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case TY_I8: *lo = INT8_MIN, *hi = INT8_MAX; return;
    case TY_I16: *lo = INT16_MIN, *hi = INT16_MAX; return;
    case TY_I32: *lo = INT32_MIN, *hi = INT32_MAX; return;
    case TY_U8: *lo = 0, *hi = UINT8_MAX; return;
    case TY_U16: *lo = 0, *hi = UINT16_MAX; return;
    case TY_U32: *lo = 0, *hi = UINT32_MAX; return;
    case TY_U64: *lo = 0, *hi = -1; return;
    case TY_BOOL: *lo = 0, *hi = 1; return;
    default: *lo = INT64_MIN, *hi = INT64_MAX; return;
  }
}

bool ir_nhwc(const Node *n) {
  switch (n->op) {
    case OP_CONV2D:
    case OP_CONV3D:
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D:
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D:
    case OP_RESIZE:
    case OP_GROUP_NORM:
    case OP_GLOBAL_AVGPOOL: break;
    default: return false;
  }
  const Attr *a = ir_attr(n, "layout");
  return a && a->kind == AK_STR && strcmp(a->s, "nhwc") == 0;
}

TensorType ir_matmul_operand(const Node *n, int i) {
  TensorType t = n->in[i]->type;
  if (ir_matmul_trans(n, i) && t.rank >= 2) {
    int64_t d = t.dims[t.rank - 1];
    t.dims[t.rank - 1] = t.dims[t.rank - 2];
    t.dims[t.rank - 2] = d;
  }
  return t;
}

/* Getters are called after verification, so a miss is our bug: an
 * internal error under a guard; outside one (an API call that reads a
 * compiled graph) a zero of the kind asked for, since a library neither
 * prints nor aborts. */
static const Attr *must_attr(const Node *n, const char *name, AttrKind kind) {
  static const Attr zero[] = {{.kind = AK_INT}, {.kind = AK_FLOAT}, {.kind = AK_INTS}, {.kind = AK_STR, .s = ""},
                              {.kind = AK_DTYPE}};
  const Attr *a = ir_attr(n, name);
  if (!a || a->kind != kind) {
    Ctx *c = ctx_current();
    const char *what = a ? "wrongly typed" : "missing";
    if (c) dl_internal(c, "%s: %s attribute '%s'", ir_ops[n->op].name, what, name);
    for (size_t i = 0; i < ARRAY_LEN(zero); i++)
      if (zero[i].kind == kind) return &zero[i];
  }
  return a;
}

int64_t ir_attr_int(const Node *n, const char *name) { return must_attr(n, name, AK_INT)->i; }
double ir_attr_float(const Node *n, const char *name) { return must_attr(n, name, AK_FLOAT)->f; }
const char *ir_attr_str(const Node *n, const char *name) { return must_attr(n, name, AK_STR)->s; }
DType ir_attr_dtype(const Node *n, const char *name) { return must_attr(n, name, AK_DTYPE)->dt; }
const int64_t *ir_attr_ints(const Node *n, const char *name, int *count) {
  const Attr *a = must_attr(n, name, AK_INTS);
  if (count) *count = a->ints.n;
  return a->ints.v;
}

/* Keeps attrs in schema order so printing is canonical. */
static Attr *slot(Graph *g, Node *n, const char *name, AttrKind kind) {
  const OpInfo *info = &ir_ops[n->op];
  int spec = -1;
  for (int i = 0; i < info->n_attrs; i++)
    if (strcmp(info->attrs[i].name, name) == 0) spec = i;
  if (spec < 0 || info->attrs[spec].kind != kind)
    dl_internal(g->ctx, "%s has no %s attribute", info->name, name);
  for (int i = 0; i < n->n_attrs; i++)
    if (n->attrs[i].name == info->attrs[spec].name) return &n->attrs[i];
  Attr *attrs = ARENA_ARRAY(&g->ctx->arena, Attr, n->n_attrs + 1);
  int pos = 0;
  for (int i = 0; i < n->n_attrs; i++) {
    const AttrSpec *s = ir_op_attr_spec(n->op, n->attrs[i].name);
    if (s - info->attrs < spec) pos = i + 1;
  }
  if (n->n_attrs > 0) { /* n->attrs is NULL before the first: memcpy from NULL is UB */
    memcpy(attrs, n->attrs, sizeof(Attr) * (size_t)pos);
    memcpy(attrs + pos + 1, n->attrs + pos, sizeof(Attr) * (size_t)(n->n_attrs - pos));
  }
  n->attrs = attrs;
  n->n_attrs++;
  Attr *a = &attrs[pos];
  memset(a, 0, sizeof *a);
  a->name = info->attrs[spec].name;
  a->kind = kind;
  return a;
}

void ir_set_int(Graph *g, Node *n, const char *name, int64_t v) { slot(g, n, name, AK_INT)->i = v; }
void ir_set_float(Graph *g, Node *n, const char *name, double v) { slot(g, n, name, AK_FLOAT)->f = v; }
void ir_set_dtype(Graph *g, Node *n, const char *name, DType v) { slot(g, n, name, AK_DTYPE)->dt = v; }
void ir_set_str(Graph *g, Node *n, const char *name, const char *v) {
  slot(g, n, name, AK_STR)->s = arena_strdup(&g->ctx->arena, v);
}
void ir_set_ints(Graph *g, Node *n, const char *name, int count, const int64_t *v) {
  Attr *a = slot(g, n, name, AK_INTS);
  a->ints.n = count;
  a->ints.v = ARENA_ARRAY(&g->ctx->arena, int64_t, count > 0 ? count : 1);
  if (count > 0) memcpy(a->ints.v, v, sizeof(int64_t) * (size_t)count);
}

void ir_quant_range(const Node *n, int *lo, int *hi) {
  const Attr *to = ir_attr(n, "to");
  if (to && to->kind == AK_DTYPE && to->dt == TY_U8) {
    *lo = 0, *hi = 255;
    return;
  }
  *lo = ir_attr(n, "zero_point") ? -128 : -127;
  *hi = 127;
}

bool ir_fill_defaults(Graph *g, Node *n, char *err, size_t errlen) {
  const OpInfo *info = &ir_ops[n->op];
  for (int i = 0; i < info->n_attrs; i++) {
    const AttrSpec *s = &info->attrs[i];
    if (ir_attr(n, s->name)) continue;
    if (!s->default_text) {
      snprintf(err, errlen, "%s needs attribute '%s'", info->name, s->name);
      return false;
    }
    if (strcmp(s->default_text, "?") == 0) continue;
    Attr v;
    if (!ir_parse_attr_value(&g->ctx->arena, s->default_text, s->kind, &v))
      dl_internal(g->ctx, "bad default '%s' for %s.%s in ops.def", s->default_text, info->name,
                  s->name);
    Attr *a = slot(g, n, s->name, s->kind);
    v.name = a->name;
    *a = v;
  }
  return true;
}

static size_t skip_space(const char *s, size_t i) {
  while (s[i] == ' ' || s[i] == '\t') i++;
  return i;
}

static size_t parse_int64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || errno == ERANGE) return 0;
  if (*end == '.' || *end == 'e' || *end == 'E') return 0;
  *out = v;
  return (size_t)(end - s);
}

size_t ir_parse_attr_value(Arena *a, const char *text, AttrKind kind, Attr *out) {
  memset(out, 0, sizeof *out);
  out->kind = kind;
  size_t i = 0;
  switch (kind) {
    case AK_INT: return parse_int64(text, &out->i);
    case AK_FLOAT: {
      char *end;
      errno = 0;
      double v = strtod(text, &end);
      if (end == text || (errno == ERANGE && fabs(v) > 1)) return 0;
      /* strtod accepts hex and "nan"/"inf" spellings; keep to what we print. */
      if (!isdigit((unsigned char)text[0]) && text[0] != '-' && text[0] != '+' &&
          strncmp(text, "inf", 3) != 0 && strncmp(text, "nan", 3) != 0)
        return 0;
      out->f = v;
      return (size_t)(end - text);
    }
    case AK_DTYPE: {
      char name[8];
      while (isalnum((unsigned char)text[i]) && i < sizeof name - 1) {
        name[i] = text[i];
        i++;
      }
      name[i] = 0;
      if (isalnum((unsigned char)text[i])) return 0;
      return ir_dtype_from_name(name, &out->dt) ? i : 0;
    }
    case AK_STR: {
      if (text[0] != '"') return 0;
      size_t n = 0;
      for (i = 1; text[i] && text[i] != '"'; i++, n++) {
        if (text[i] == '\\' && text[i + 1]) i++;
        if (text[i] == '\n') return 0;
      }
      if (text[i] != '"') return 0;
      char *s = arena_alloc(a, n + 1);
      n = 0;
      for (size_t j = 1; j < i; j++) {
        if (text[j] == '\\') {
          j++;
          s[n++] = text[j] == 'n' ? '\n' : text[j];
        } else {
          s[n++] = text[j];
        }
      }
      out->s = s;
      return i + 1;
    }
    case AK_INTS: {
      if (text[0] != '[') return 0;
      i = skip_space(text, 1);
      int cap = 8, n = 0;
      int64_t *v = arena_alloc(a, sizeof(int64_t) * (size_t)cap);
      if (text[i] != ']') {
        for (;;) {
          int64_t x;
          size_t k = parse_int64(text + i, &x);
          if (!k) return 0;
          if (n == cap) {
            v = arena_realloc(a, v, sizeof(int64_t) * (size_t)cap, sizeof(int64_t) * (size_t)cap * 2);
            cap *= 2;
          }
          v[n++] = x;
          i = skip_space(text, i + k);
          if (text[i] == ']') break;
          if (text[i] != ',') return 0;
          i = skip_space(text, i + 1);
        }
      }
      out->ints.n = n;
      out->ints.v = v;
      return i + 1;
    }
  }
  return 0;
}

/* Shortest text that reads back as the same double. */
static void print_double(FILE *f, double v) {
  char buf[40];
  if (isnan(v)) {
    fputs("nan", f);
    return;
  }
  if (isinf(v)) {
    fputs(v < 0 ? "-inf" : "inf", f);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  fputs(buf, f);
}

void ir_print_attr_value(FILE *f, const Attr *a) {
  switch (a->kind) {
    case AK_INT: fprintf(f, "%" PRId64, a->i); break;
    case AK_FLOAT: print_double(f, a->f); break;
    case AK_DTYPE: fputs(ir_dtype_name(a->dt), f); break;
    case AK_STR:
      fputc('"', f);
      for (const char *p = a->s; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', f);
        if (*p == '\n') {
          fputs("\\n", f);
          continue;
        }
        fputc(*p, f);
      }
      fputc('"', f);
      break;
    case AK_INTS:
      fputc('[', f);
      for (int i = 0; i < a->ints.n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", a->ints.v[i]);
      fputc(']', f);
      break;
  }
}

/* ---- graphs ---- */

Graph *ir_graph_new(Ctx *c, const char *name) {
  Graph *g = ARENA_NEW(&c->arena, Graph);
  g->ctx = c;
  g->name = arena_strdup(&c->arena, name);
  return g;
}

Node *ir_node_new(Graph *g, OpKind op, int n_in, Value *const *in, SrcLoc loc) {
  Arena *a = &g->ctx->arena;
  Node *n = ARENA_NEW(a, Node);
  n->op = op;
  n->loc = loc;
  n->group = -1;
  n->n_in = n_in;
  n->in = ARENA_ARRAY(a, Value *, n_in > 0 ? n_in : 1);
  for (int i = 0; i < n_in; i++) n->in[i] = in[i];
  n->n_out = ir_op_results(op, n_in);
  n->out = ARENA_ARRAY(a, Value, n->n_out > 0 ? n->n_out : 1);
  for (int i = 0; i < n->n_out; i++) {
    n->out[i].def = n;
    n->out[i].index = i;
  }
  return n;
}

bool ir_infer(const Node *n, char *err, size_t errlen) {
  const OpInfo *info = &ir_ops[n->op];
  if (!info->shape) return true;
  if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in)) {
    if (info->max_in < 0)
      snprintf(err, errlen, "%s takes at least %d operands, got %d", info->name, info->min_in, n->n_in);
    else if (info->min_in == info->max_in)
      snprintf(err, errlen, "%s takes %d operand%s, got %d", info->name, info->min_in,
               info->min_in == 1 ? "" : "s", n->n_in);
    else
      snprintf(err, errlen, "%s takes %d to %d operands, got %d", info->name, info->min_in,
               info->max_in, n->n_in);
    return false;
  }
  TensorType out[IR_MAX_RESULTS];
  memset(out, 0, sizeof out);
  if (n->n_out > IR_MAX_RESULTS) {
    snprintf(err, errlen, "%s gives %d results, more than %d", info->name, n->n_out, IR_MAX_RESULTS);
    return false;
  }
  if (!info->shape(n, out, err, errlen)) return false;
  for (int i = 0; i < n->n_out; i++) {
    if (ir_type_numel(&out[i]) < 0) {
      char buf[IR_TYPE_STR_MAX];
      snprintf(err, errlen, "%s result %s is larger than %" PRId64 " elements", info->name,
               ir_type_str(&out[i], buf, sizeof buf), DL_MAX_ELEMS);
      return false;
    }
    n->out[i].type = out[i];
  }
  return true;
}

void ir_declare(Node *n, const TensorType *t) { n->out[0].type = *t; }

void ir_append(Graph *g, Node *n) {
  n->prev = g->last;
  n->next = NULL;
  if (g->last)
    g->last->next = n;
  else
    g->first = n;
  g->last = n;
  g->n_nodes++;
}

void ir_insert_before(Graph *g, Node *before, Node *n) {
  if (!before) {
    ir_append(g, n);
    return;
  }
  if (!n->scope) n->scope = before->scope;
  n->next = before;
  n->prev = before->prev;
  if (before->prev)
    before->prev->next = n;
  else
    g->first = n;
  before->prev = n;
  g->n_nodes++;
}

void ir_remove(Graph *g, Node *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    g->first = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    g->last = n->prev;
  n->prev = n->next = NULL;
  g->n_nodes--;
}

void ir_replace_uses(Graph *g, const Value *from, Value *to) {
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] == from) n->in[i] = to;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == from) g->outputs[i] = to;
}

void ir_set_outputs(Graph *g, int n, Value *const *values, const char *const *names) {
  Arena *a = &g->ctx->arena;
  g->n_outputs = n;
  g->outputs = ARENA_ARRAY(a, Value *, n > 0 ? n : 1);
  g->output_names = ARENA_ARRAY(a, const char *, n > 0 ? n : 1);
  for (int i = 0; i < n; i++) {
    g->outputs[i] = values[i];
    g->output_names[i] = arena_strdup(a, names[i]);
  }
  g->output_updates = NULL;
  g->output_length = g->output_length_axis = NULL;
}

void ir_set_output_update(Graph *g, int i, const char *param) {
  Arena *a = &g->ctx->arena;
  if (!g->output_updates) g->output_updates = ARENA_ARRAY(a, const char *, g->n_outputs > 0 ? g->n_outputs : 1);
  g->output_updates[i] = param ? arena_strdup(a, param) : NULL;
}

const char *ir_output_update(const Graph *g, int i) {
  return g->output_updates && i >= 0 && i < g->n_outputs ? g->output_updates[i] : NULL;
}

void ir_set_output_length(Graph *g, int i, int axis, int length_output) {
  Arena *a = &g->ctx->arena;
  if (!g->output_length) {
    int n = g->n_outputs > 0 ? g->n_outputs : 1;
    g->output_length = ARENA_ARRAY(a, int, n);
    g->output_length_axis = ARENA_ARRAY(a, int, n);
    for (int j = 0; j < n; j++) g->output_length[j] = g->output_length_axis[j] = -1;
  }
  g->output_length[i] = length_output;
  g->output_length_axis[i] = length_output >= 0 ? axis : -1;
}

int ir_output_length(const Graph *g, int i, int *axis) {
  int at = g->output_length && i >= 0 && i < g->n_outputs ? g->output_length[i] : -1;
  if (axis) *axis = at >= 0 ? g->output_length_axis[i] : -1;
  return at;
}

bool ir_output_is_length(const Graph *g, int i) {
  for (int j = 0; g->output_length && j < g->n_outputs; j++)
    if (g->output_length[j] == i) return true;
  return false;
}

int ir_visible_outputs(const Graph *g) {
  int n = g->n_outputs;
  while (n > 0 && ir_output_is_length(g, n - 1)) n--;
  return n;
}

Node *ir_source(Graph *g, OpKind op, const TensorType *t, const char *name, SrcLoc loc) {
  Node *n = ir_node_new(g, op, 0, NULL, loc);
  ir_set_str(g, n, "name", name);
  ir_declare(n, t);
  ir_append(g, n);
  return n;
}

Node *ir_const(Graph *g, double value, DType dt, SrcLoc loc) {
  Node *n = ir_node_new(g, OP_CONST, 0, NULL, loc);
  ir_set_float(g, n, "value", value);
  TensorType t = {.dtype = dt, .rank = 0};
  ir_declare(n, &t);
  ir_append(g, n);
  return n;
}

void ir_number(Graph *g) {
  int v = 0, k = 0;
  for (Node *n = g->first; n; n = n->next) {
    n->id = k++;
    for (int i = 0; i < n->n_out; i++) n->out[i].id = v++;
  }
}
