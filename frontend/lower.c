/* Lowering: takes a parsed Program and the options (-D values, which
 * model), runs the program's compile-time part (lets, block calls, loops,
 * conditionals) and returns the graph of one model with every name, type
 * and shape checked, or NULL after reporting every error it found.  The
 * builtin functions and layers are in layers.c. */
#include "frontend/lower.h"
#include "frontend/pytorch.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- string maps ---- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static MapEntry *map_slot(StrMap *m, const char *key) {
  size_t mask = (size_t)m->cap - 1;
  for (size_t i = hash_str(key) & mask;; i = (i + 1) & mask)
    if (!m->e[i].key || strcmp(m->e[i].key, key) == 0) return &m->e[i];
}

MapEntry *fe_map(Lower *l, StrMap *m, const char *key, bool insert) {
  if (m->cap == 0) {
    if (!insert) return NULL;
    m->cap = 64;
    m->e = ARENA_ARRAY(l->a, MapEntry, m->cap);
  }
  MapEntry *e = map_slot(m, key);
  if (e->key || !insert) return e->key ? e : NULL;
  if ((m->len + 1) * 2 > m->cap) {
    MapEntry *old = m->e;
    int old_cap = m->cap;
    m->cap *= 2;
    m->e = ARENA_ARRAY(l->a, MapEntry, m->cap);
    for (int i = 0; i < old_cap; i++)
      if (old[i].key) *map_slot(m, old[i].key) = old[i];
    e = map_slot(m, key);
  }
  e->key = arena_strdup(l->a, key);
  m->len++;
  return e;
}

/* ---- errors ---- */

/* The error, an optional note of its own (note_msg), then the block calls
 * it happened in. */
static bool error_v(Lower *l, SrcLoc loc, SrcLoc note_loc, const char *note_msg, const char *fmt,
                    va_list ap) {
  char msg[1024], key[1200];
  vsnprintf(msg, sizeof msg, fmt, ap);
  snprintf(key, sizeof key, "%p:%d:%d:%s", (const void *)loc.file, loc.line, loc.col, msg);
  if (fe_map(l, &l->reported, key, false)) {
    /* The same mistake in every iteration of a long loop: after enough
     * repeats nothing new will be learned from going on. */
    if (++l->n_dup > 100) l->halt = true;
    return false;
  }
  fe_map(l, &l->reported, key, true);
  diag_error(l->c, loc, "%s", msg);
  if (note_msg) diag_note(l->c, note_loc, "%s", note_msg);
  /* An error inside a block says which call it came from, innermost
   * first: the same block is called from many places, often in loops. */
  enum { MAX_CHAIN = 8 };
  for (int i = l->depth - 1, shown = 0; i >= 0; i--, shown++) {
    if (shown == MAX_CHAIN) {
      diag_note(l->c, (SrcLoc){0}, "... and %d more enclosing block call%s", i + 1, i ? "s" : "");
      break;
    }
    diag_note(l->c, l->call_locs[i], "in block '%s', called from here", l->stack[i]->name);
  }
  return true;
}

bool fe_error(Lower *l, SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bool r = error_v(l, loc, (SrcLoc){0}, NULL, fmt, ap);
  va_end(ap);
  return r;
}

static bool error_noted(Lower *l, SrcLoc loc, SrcLoc note_loc, const char *note_msg,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool error_noted(Lower *l, SrcLoc loc, SrcLoc note_loc, const char *note_msg,
                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bool r = error_v(l, loc, note_loc, note_msg, fmt, ap);
  va_end(ap);
  return r;
}

/* ---- values ---- */

static const char *kind_name(ValKind k) {
  switch (k) {
    case V_POISON: return "an erroneous value";
    case V_NONE: return "nothing";
    case V_INT: return "an int";
    case V_FLOAT: return "a float";
    case V_BOOL: return "a bool";
    case V_STR: return "a string";
    case V_DTYPE: return "a dtype";
    case V_LIST: return "a list";
    case V_TUPLE: return "a tuple";
    case V_TENSOR: return "a tensor";
  }
  return "a value";
}

/* Shortest text that reads back as the same double. */
static void format_double(double v, char *buf, size_t len) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 < len) strcat(buf, ".0");
}

const char *fe_describe(const Val *v, char *buf, size_t len) {
  char tb[IR_TYPE_STR_MAX];
  switch (v->kind) {
    case V_INT: snprintf(buf, len, "%" PRId64, v->i); break;
    case V_FLOAT: format_double(v->f, buf, len); break;
    case V_BOOL: snprintf(buf, len, "%s", v->b ? "true" : "false"); break;
    case V_TUPLE: snprintf(buf, len, "a tuple of %d values", v->list.n); break;
    case V_LIST:
      snprintf(buf, len, "a list of %d value%s", v->list.n, v->list.n == 1 ? "" : "s");
      break;
    case V_DTYPE: snprintf(buf, len, "the dtype %s", ir_dtype_name(v->dt)); break;
    case V_TENSOR:
      snprintf(buf, len, "a tensor %s", ir_type_str(&v->t->type, tb, sizeof tb));
      break;
    default: snprintf(buf, len, "%s", kind_name(v->kind)); break;
  }
  return buf;
}

/* fe_describe into the arena: for messages on the evaluator's recursive
 * path, whose frames must not carry a buffer each. */
__attribute__((noinline)) static const char *show(Lower *l, const Val *v) {
  char buf[IR_TYPE_STR_MAX + 32];
  return arena_strdup(l->a, fe_describe(v, buf, sizeof buf));
}

static Val val_str(const char *s) { return (Val){.kind = V_STR, .s = s}; }

static Val val_list(Lower *l, ValKind kind, int n, const Val *items) {
  Val v = {.kind = kind};
  v.list.n = n;
  v.list.v = ARENA_ARRAY(l->a, Val, n > 0 ? n : 1);
  if (n > 0) memcpy(v.list.v, items, sizeof(Val) * (size_t)n);
  return v;
}

/* ---- building the graph ---- */

static bool budget_ok(Lower *l, SrcLoc loc) {
  int max_ops = l->opt->max_ops > 0 ? l->opt->max_ops : FE_MAX_NODES;
  if (l->g->n_nodes < max_ops) return true;
  if (!l->halt) fe_error(l, loc, "model too large: more than %d operations", max_ops);
  l->halt = true;
  return false;
}

Node *fe_node(Lower *l, OpKind op, int n_in, Value *const *in, SrcLoc loc) {
  Node *n = ir_node_new(l->g, op, n_in, in, loc);
  n->scope = l->prefix;
  return n;
}

Value *fe_emit(Lower *l, Node *n) {
  char err[512];
  if (!ir_fill_defaults(l->g, n, err, sizeof err) || !ir_infer(n, err, sizeof err)) {
    fe_error(l, n->loc, "%s", err);
    return NULL;
  }
  if (!budget_ok(l, n->loc)) return NULL;
  ir_append(l->g, n);
  return &n->out[0];
}

Value *fe_const(Lower *l, double v, DType dt, SrcLoc loc) {
  if (!budget_ok(l, loc)) return NULL;
  return &ir_const(l->g, v, dt, loc)->out[0];
}

Value *fe_fill(Lower *l, double v, const TensorType *t, SrcLoc loc) {
  if (!budget_ok(l, loc)) return NULL;
  Node *n = ir_const(l->g, v, t->dtype, loc);
  ir_declare(n, t);
  return &n->out[0];
}

Value *fe_unary(Lower *l, OpKind op, Value *x, SrcLoc loc) {
  if (!x) return NULL;
  return fe_emit(l, fe_node(l, op, 1, &x, loc));
}

char *fe_join(Lower *l, const char *prefix, const char *name) {
  if (!prefix || !*prefix) return arena_strdup(l->a, name);
  return arena_printf(l->a, "%s.%s", prefix, name);
}

Value *fe_param(Lower *l, const char *scope, const char *name, const TensorType *t,
                const char *init, SrcLoc loc) {
  const char *full = fe_join(l, scope, name);
  char tb[IR_TYPE_STR_MAX];
  MapEntry *e = fe_map(l, &l->params, full, false);
  if (e) {
    error_noted(l, loc, e->loc, arena_printf(l->a, "'%s' was first defined here", full),
                "parameter '%s' is defined twice", full);
    return NULL;
  }
  if (ir_type_numel(t) < 0) {
    fe_error(l, loc, "parameter '%s' of type %s is too large", full, ir_type_str(t, tb, sizeof tb));
    return NULL;
  }
  if (!budget_ok(l, loc)) return NULL;
  e = fe_map(l, &l->params, full, true);
  e->loc = loc;
  Node *n = ir_source(l->g, OP_PARAM, t, full, loc);
  if (init) ir_set_str(l->g, n, "init", init);
  return &n->out[0];
}

const char *fe_layer_scope(Lower *l, const Call *call, const char *kind) {
  if (call->scoped) return l->prefix;
  char *key = arena_printf(l->a, "%s\x01%s", l->prefix, kind);
  MapEntry *e = fe_map(l, &l->counters, key, true);
  return fe_join(l, l->prefix, arena_printf(l->a, "%s_%" PRId64, kind, e->n++));
}

Val fe_tensor_binary(Lower *l, OpKind op, Val a, Val b, SrcLoc loc) {
  if (a.kind == V_POISON || b.kind == V_POISON) return val_poison();
  const Val *v[2] = {&a, &b};
  const Value *t = a.kind == V_TENSOR ? a.t : b.t;
  char ba[IR_TYPE_STR_MAX + 16], bb[IR_TYPE_STR_MAX + 16];
  Value *in[2];
  for (int i = 0; i < 2; i++) {
    if (v[i]->kind == V_TENSOR) {
      in[i] = v[i]->t;
      continue;
    }
    if (!val_is_num(v[i])) {
      fe_error(l, loc, "%s: cannot combine %s with %s", ir_ops[op].name,
               fe_describe(&a, ba, sizeof ba), fe_describe(&b, bb, sizeof bb));
      return val_poison();
    }
    if (v[i]->kind == V_FLOAT && !ir_dtype_is_float(t->type.dtype)) {
      Val tv = val_tensor((Value *)t);
      fe_error(l, loc, "%s: cannot combine %s with the float %s", ir_ops[op].name,
               fe_describe(&tv, ba, sizeof ba), fe_describe(v[i], bb, sizeof bb));
      return val_poison();
    }
    in[i] = fe_const(l, val_num(v[i]), t->type.dtype, loc);
    if (!in[i]) return val_poison();
  }
  return val_tensor(fe_emit(l, fe_node(l, op, 2, in, loc)));
}

/* ---- arguments of builtins ---- */

void fe_arg_error(Lower *l, const Call *c, int i, const char *what) {
  char buf[IR_TYPE_STR_MAX + 32];
  const Val *v = &c->args[i];
  const char *desc = v->kind == V_STR ? "a string" : fe_describe(v, buf, sizeof buf);
  fe_error(l, c->locs[i], "%s: '%s' must be %s, got %s", c->name, c->pnames[i], what, desc);
}

bool fe_arg_tensor(Lower *l, const Call *c, int i, Value **out) {
  *out = NULL;
  if (c->args[i].kind == V_NONE) return true;
  if (c->args[i].kind == V_TENSOR) {
    *out = c->args[i].t;
    return true;
  }
  fe_arg_error(l, c, i, "a tensor");
  return false;
}

bool fe_arg_int(Lower *l, const Call *c, int i, int64_t def, int64_t *out) {
  *out = def;
  if (c->args[i].kind == V_NONE) return true;
  if (c->args[i].kind == V_INT) {
    *out = c->args[i].i;
    return true;
  }
  fe_arg_error(l, c, i, "an int");
  return false;
}

bool fe_arg_pos_int(Lower *l, const Call *c, int i, int64_t def, int64_t *out) {
  *out = def;
  if (c->args[i].kind == V_NONE) return true;
  if (c->args[i].kind == V_INT && c->args[i].i >= 1) {
    *out = c->args[i].i;
    return true;
  }
  fe_arg_error(l, c, i, "a positive int");
  return false;
}

bool fe_arg_float(Lower *l, const Call *c, int i, double def, double *out) {
  *out = def;
  if (c->args[i].kind == V_NONE) return true;
  if (val_is_num(&c->args[i])) {
    *out = val_num(&c->args[i]);
    return true;
  }
  fe_arg_error(l, c, i, "a number");
  return false;
}

bool fe_arg_bool(Lower *l, const Call *c, int i, bool def, bool *out) {
  *out = def;
  if (c->args[i].kind == V_NONE) return true;
  if (c->args[i].kind == V_BOOL) {
    *out = c->args[i].b;
    return true;
  }
  fe_arg_error(l, c, i, "true or false");
  return false;
}

bool fe_arg_str(Lower *l, const Call *c, int i, const char *def, const char **out) {
  *out = def;
  if (c->args[i].kind == V_NONE) return true;
  if (c->args[i].kind == V_STR) {
    *out = c->args[i].s;
    return true;
  }
  fe_arg_error(l, c, i, "a string");
  return false;
}

bool fe_arg_ints(Lower *l, const Call *c, int i, int max, const char *what, int *n, int64_t *out) {
  const Val *v = &c->args[i];
  *n = 0;
  if (v->kind == V_NONE) return true;
  if (v->kind == V_INT) {
    *n = 1;
    out[0] = v->i;
    return true;
  }
  bool ok = v->kind == V_LIST && v->list.n >= 1 && v->list.n <= max;
  for (int k = 0; ok && k < v->list.n; k++) ok = v->list.v[k].kind == V_INT;
  if (!ok) {
    fe_arg_error(l, c, i, what);
    return false;
  }
  *n = v->list.n;
  for (int k = 0; k < v->list.n; k++) out[k] = v->list.v[k].i;
  return true;
}

bool fe_axis(Lower *l, const Call *c, int i, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank) {
    fe_error(l, c->locs[i], "%s: axis %" PRId64 " is out of range for a tensor of rank %d", c->name,
             axis, rank);
    return false;
  }
  *out = (int)(axis < 0 ? axis + rank : axis);
  return true;
}

/* ---- environments ---- */

typedef struct Binding {
  const char *name;
  Val v;
} Binding;

struct Frame {
  Binding *v;
  int n, cap;
  bool returned;
  Val ret;
  const Stmt *ret_stmt;
};

static Frame *frame_new(Lower *l) { return ARENA_NEW(l->a, Frame); }

static Binding *frame_find(Frame *f, const char *name) {
  for (int i = f->n - 1; i >= 0; i--)
    if (strcmp(f->v[i].name, name) == 0) return &f->v[i];
  return NULL;
}

static void frame_set(Lower *l, Frame *f, const char *name, Val v) {
  Binding *b = frame_find(f, name);
  if (b) {
    b->v = v;
    return;
  }
  if (f->n == f->cap) {
    int cap = f->cap ? f->cap * 2 : 8;
    f->v =
        arena_realloc(l->a, f->v, sizeof(Binding) * (size_t)f->cap, sizeof(Binding) * (size_t)cap);
    f->cap = cap;
  }
  f->v[f->n++] = (Binding){name, v};
}

static Binding *lookup(Lower *l, Frame *f, const char *name) {
  Binding *b = frame_find(f, name);
  if (!b && f != l->globals) b = frame_find(l->globals, name);
  return b;
}

/* ---- expressions ---- */

static Val eval(Lower *l, Frame *f, const Expr *e);
static void exec_stmts(Lower *l, Frame *f, const StmtList *body);

static bool is_comparison(int op) {
  return op == '<' || op == '>' || op == OPX_EQ || op == OPX_NE || op == OPX_LE || op == OPX_GE;
}

static void suggest_names(Lower *l, Frame *f, const char *name, char *hint, size_t len) {
  int n = f->n + (f != l->globals ? l->globals->n : 0), k = 0;
  const char **cand = ARENA_ARRAY(l->a, const char *, n > 0 ? n : 1);
  for (int i = 0; i < f->n; i++) cand[k++] = f->v[i].name;
  if (f != l->globals)
    for (int i = 0; i < l->globals->n; i++) cand[k++] = l->globals->v[i].name;
  const char *s = diag_suggest(name, cand, k);
  hint[0] = 0;
  if (s) snprintf(hint, len, "; did you mean '%s'?", s);
}

__attribute__((noinline)) static Val eval_name(Lower *l, Frame *f, const Expr *e) {
  Binding *b = lookup(l, f, e->s);
  if (b) return b->v;
  DType dt;
  if (ir_dtype_from_name(e->s, &dt) && dt != TY_F64) return (Val){.kind = V_DTYPE, .dt = dt};
  const PtSpelling *torch = l->in_type ? NULL : fe_torch_find(PT_NAME, e->s, NULL, NULL, 0);
  if (torch && torch->alias) {
    if (ir_dtype_from_name(torch->dlcc, &dt)) return (Val){.kind = V_DTYPE, .dt = dt};
    return val_bool(strcmp(torch->dlcc, "true") == 0);
  }
  if (torch) {
    char note[256];
    fe_error(l, e->loc, "unknown name '%s'%s", e->s, fe_torch_note(torch, note, sizeof note));
    return val_poison();
  }
  if (l->in_type && l->type_input) {
    fe_error(l, e->loc, "unknown dimension '%s': define it with 'let %s = ...' or -D %s=..., or give the "
             "input '%s' (its shape binds %s)", e->s, e->s, e->s, l->type_input, e->s);
  } else if (l->in_type) {
    fe_error(l, e->loc, "unknown dimension '%s': define it with 'let %s = ...' or -D %s=...", e->s,
             e->s, e->s);
  } else if (fe_map(l, &l->blocks, e->s, false)) {
    fe_error(l, e->loc, "'%s' is a block: call it as %s(...)", e->s, e->s);
  } else if (fe_builtin(e->s)) {
    fe_error(l, e->loc, "'%s' is a function: call it as %s(...)", e->s, e->s);
  } else {
    char hint[160];
    suggest_names(l, f, e->s, hint, sizeof hint);
    fe_error(l, e->loc, "unknown name '%s'%s", e->s, hint);
  }
  return val_poison();
}

/* Python's truth for scalars; false with *ok unset after an error. */
__attribute__((noinline)) static bool truth(Lower *l, const Val *v, SrcLoc loc, const char *what, bool *ok) {
  *ok = true;
  switch (v->kind) {
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_POISON: *ok = false; return false;
    case V_TENSOR:
      fe_error(l, loc, "%s must be known at compile time, got %s", what,
               show(l, v));
      break;
    default:
      fe_error(l, loc, "%s must be a bool, got %s", what, show(l, v));
      break;
  }
  *ok = false;
  return false;
}

static Val overflow(Lower *l, SrcLoc loc, int64_t a, int op, int64_t b) {
  fe_error(l, loc, "integer overflow: %" PRId64 " %s %" PRId64, a, fe_op_text(op), b);
  return val_poison();
}

static Val int_arith(Lower *l, int op, int64_t a, int64_t b, SrcLoc loc) {
  int64_t r;
  switch (op) {
    case '+':
      if (__builtin_add_overflow(a, b, &r)) return overflow(l, loc, a, op, b);
      return val_int(r);
    case '-':
      if (__builtin_sub_overflow(a, b, &r)) return overflow(l, loc, a, op, b);
      return val_int(r);
    case '*':
      if (__builtin_mul_overflow(a, b, &r)) return overflow(l, loc, a, op, b);
      return val_int(r);
    case '/':
      if (b == 0) break;
      return val_float((double)a / (double)b);
    case OPX_FLOORDIV:
      if (b == 0) break;
      if (a == INT64_MIN && b == -1) return overflow(l, loc, a, op, b);
      r = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) r--;
      return val_int(r);
    case '%':
      if (b == 0) break;
      if (b == -1) return val_int(0);
      r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return val_int(r);
    case OPX_POW: {
      if (b < 0) {
        if (a == 0) {
          fe_error(l, loc, "0 cannot be raised to a negative power");
          return val_poison();
        }
        return val_float(pow((double)a, (double)b));
      }
      int64_t base = a, acc = 1, e = b;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow(l, loc, a, op, b);
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow(l, loc, a, op, b);
      }
      return val_int(acc);
    }
  }
  fe_error(l, loc, "division by zero");
  return val_poison();
}

static Val float_arith(Lower *l, int op, double a, double b, SrcLoc loc) {
  switch (op) {
    case '+': return val_float(a + b);
    case '-': return val_float(a - b);
    case '*': return val_float(a * b);
    case '/':
      if (b == 0) break;
      return val_float(a / b);
    case OPX_FLOORDIV:
      if (b == 0) break;
      return val_float(floor(a / b));
    case '%': {
      if (b == 0) break;
      double r = fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return val_float(r);
    }
    case OPX_POW:
      if (a == 0 && b < 0) {
        fe_error(l, loc, "0 cannot be raised to a negative power");
        return val_poison();
      }
      if (a < 0 && b != floor(b)) {
        fe_error(l, loc, "a negative number cannot be raised to a fractional power");
        return val_poison();
      }
      return val_float(pow(a, b));
  }
  fe_error(l, loc, "division by zero");
  return val_poison();
}

static Val compare(Lower *l, int op, const Val *a, const Val *b, SrcLoc loc) {
  int cmp;
  bool ordered = op != OPX_EQ && op != OPX_NE;
  if (val_is_num(a) && val_is_num(b)) {
    if (a->kind == V_INT && b->kind == V_INT)
      cmp = (a->i > b->i) - (a->i < b->i);
    else {
      double x = val_num(a), y = val_num(b);
      cmp = (x > y) - (x < y);
    }
  } else if (a->kind == V_STR && b->kind == V_STR) {
    cmp = strcmp(a->s, b->s);
  } else if (!ordered && a->kind == b->kind && (a->kind == V_BOOL || a->kind == V_DTYPE)) {
    cmp = a->kind == V_BOOL ? (a->b != b->b) : (a->dt != b->dt);
  } else {
    fe_error(l, loc, "cannot compare %s and %s with '%s'", kind_name(a->kind), kind_name(b->kind),
             fe_op_text(op));
    return val_poison();
  }
  switch (op) {
    case '<': return val_bool(cmp < 0);
    case '>': return val_bool(cmp > 0);
    case OPX_LE: return val_bool(cmp <= 0);
    case OPX_GE: return val_bool(cmp >= 0);
    case OPX_EQ: return val_bool(cmp == 0);
    default: return val_bool(cmp != 0);
  }
}

static OpKind tensor_op(int op) {
  switch (op) {
    case '+': return OP_ADD;
    case '-': return OP_SUB;
    case '*': return OP_MUL;
    case '/': return OP_DIV;
    case '%': return OP_MOD; /* fmod=0: the divisor's sign, as % on numbers */
    case '@': return OP_MATMUL;
    case OPX_POW: return OP_POW;
    case '<': return OP_LT;
    case '>': return OP_GT;
    case OPX_LE: return OP_LE;
    case OPX_GE: return OP_GE;
    case OPX_EQ: return OP_EQ;
    case OPX_NE: return OP_NE;
  }
  return OP_COUNT;
}

static Val apply_binary(Lower *l, const Expr *e, Val a, Val b);

static Val eval_binary(Lower *l, Frame *f, const Expr *e) {
  int op = e->op;
  if (op == OPX_AND || op == OPX_OR) {
    bool ok;
    Val a = eval(l, f, e->lhs);
    bool ta = truth(l, &a, e->lhs->loc,
                    op == OPX_AND ? "the operand of 'and'" : "the operand of 'or'", &ok);
    if (!ok) return val_poison();
    if (ta == (op == OPX_OR)) return val_bool(ta);
    Val b = eval(l, f, e->rhs);
    bool tb = truth(l, &b, e->rhs->loc,
                    op == OPX_AND ? "the operand of 'and'" : "the operand of 'or'", &ok);
    return ok ? val_bool(tb) : val_poison();
  }
  Val a = eval(l, f, e->lhs), b = eval(l, f, e->rhs);
  if (a.kind == V_POISON || b.kind == V_POISON) return val_poison();
  return apply_binary(l, e, a, b);
}

/* Out of line, so that its message buffers are no part of the frame the
 * evaluator's recursion repeats at every level. */
__attribute__((noinline)) static Val apply_binary(Lower *l, const Expr *e, Val a, Val b) {
  int op = e->op;
  char ba[IR_TYPE_STR_MAX + 32], bb[IR_TYPE_STR_MAX + 32];
  if (op == '@' && (a.kind != V_TENSOR || b.kind != V_TENSOR)) {
    fe_error(l, e->loc, "'@' is a matrix product of two tensors, got %s and %s", fe_describe(&a, ba, sizeof ba),
             fe_describe(&b, bb, sizeof bb));
    return val_poison();
  }
  if (a.kind == V_TENSOR || b.kind == V_TENSOR) {
    OpKind k = tensor_op(op);
    if (k == OP_COUNT) {
      fe_error(l, e->loc, "operator '%s' is not supported on tensors", fe_op_text(op));
      return val_poison();
    }
    if ((a.kind != V_TENSOR && !val_is_num(&a)) || (b.kind != V_TENSOR && !val_is_num(&b))) {
      fe_error(l, e->loc, "cannot apply '%s' to %s and %s", fe_op_text(op),
               fe_describe(&a, ba, sizeof ba), fe_describe(&b, bb, sizeof bb));
      return val_poison();
    }
    /* A mask in bools' dtype is a bool: == and != of bool tensors. */
    bool bools = (a.kind == V_TENSOR && a.t->type.dtype == TY_BOOL) ||
                 (b.kind == V_TENSOR && b.t->type.dtype == TY_BOOL);
    if (bools && (k == OP_EQ || k == OP_NE)) k = k == OP_EQ ? OP_EQUAL : OP_NOT_EQUAL;
    return fe_tensor_binary(l, k, a, b, e->loc);
  }
  if (is_comparison(op)) return compare(l, op, &a, &b, e->loc);
  if (op == '+' && a.kind == V_STR && b.kind == V_STR)
    return val_str(arena_printf(l->a, "%s%s", a.s, b.s));
  if (op == '+' && a.kind == V_LIST && b.kind == V_LIST) {
    Val r = val_list(l, V_LIST, a.list.n + b.list.n, a.list.v);
    if (b.list.n) memcpy(r.list.v + a.list.n, b.list.v, sizeof(Val) * (size_t)b.list.n);
    return r;
  }
  if (!val_is_num(&a) || !val_is_num(&b)) {
    fe_error(l, e->loc, "cannot apply '%s' to %s and %s", fe_op_text(op), kind_name(a.kind),
             kind_name(b.kind));
    return val_poison();
  }
  if (a.kind == V_INT && b.kind == V_INT) return int_arith(l, op, a.i, b.i, e->loc);
  return float_arith(l, op, val_num(&a), val_num(&b), e->loc);
}

static Val eval_unary(Lower *l, Frame *f, const Expr *e) {
  Val v = eval(l, f, e->lhs);
  if (v.kind == V_POISON) return v;
  if (e->op == '!') {
    bool ok;
    bool t = truth(l, &v, e->lhs->loc, "the operand of 'not'", &ok);
    return ok ? val_bool(!t) : val_poison();
  }
  switch (v.kind) {
    case V_INT:
      if (v.i == INT64_MIN) {
        fe_error(l, e->loc, "integer overflow: -(%" PRId64 ")", v.i);
        return val_poison();
      }
      return val_int(-v.i);
    case V_FLOAT: return val_float(-v.f);
    case V_TENSOR: return val_tensor(fe_unary(l, OP_NEG, v.t, e->loc));
    default:
      fe_error(l, e->loc, "cannot negate %s", show(l, &v));
      return val_poison();
  }
}

/* The dotted name of an `as` scope, or NULL after an error. */
__attribute__((noinline)) static const char *eval_scope(Lower *l, Frame *f, const Scope *s) {
  char *out = "";
  bool ok = true;
  for (int i = 0; i < s->n; i++) {
    const ScopePart *p = &s->parts[i];
    const char *text = p->text;
    if (!text) {
      Val v = eval(l, f, p->expr);
      if (v.kind == V_INT) {
        text = arena_printf(l->a, "%" PRId64, v.i);
      } else if (v.kind == V_STR && v.s[0]) {
        text = v.s;
      } else {
        if (v.kind != V_POISON)
          fe_error(l, p->loc, "a scope part must be an int or a non-empty string, got %s",
                   v.kind == V_STR ? "an empty string" : show(l, &v));
        ok = false;
        continue;
      }
    }
    out = i ? arena_printf(l->a, p->glue ? "%s%s" : "%s.%s", out, text) : arena_strdup(l->a, text);
  }
  return ok ? out : NULL;
}

typedef struct Args {
  int n_pos, n_kw;
  Val *pos, *kw;
  SrcLoc *pos_locs, *kw_locs;
  const char **kw_names;
  bool poison;
} Args;

static void eval_args(Lower *l, Frame *f, const Expr *e, Args *a) {
  int n = e->items.n;
  memset(a, 0, sizeof *a);
  a->pos = ARENA_ARRAY(l->a, Val, n + 1);
  a->kw = ARENA_ARRAY(l->a, Val, n + 1);
  a->pos_locs = ARENA_ARRAY(l->a, SrcLoc, n + 1);
  a->kw_locs = ARENA_ARRAY(l->a, SrcLoc, n + 1);
  a->kw_names = ARENA_ARRAY(l->a, const char *, n + 1);
  for (int i = 0; i < n; i++) {
    const Expr *arg = e->items.v[i];
    const Expr *val = arg->kind == EX_ARG ? arg->lhs : arg;
    const char *kw = arg->kind == EX_ARG ? arg->s : NULL;
    Val v = eval(l, f, val);
    if (v.kind == V_POISON) a->poison = true;
    if (kw) {
      for (int k = 0; k < a->n_kw; k++)
        if (strcmp(a->kw_names[k], kw) == 0) {
          fe_error(l, arg->loc, "%s: argument '%s' given twice", e->s, kw);
          a->poison = true;
        }
      a->kw_names[a->n_kw] = kw;
      a->kw_locs[a->n_kw] = arg->loc;
      a->kw[a->n_kw++] = v;
    } else {
      if (a->n_kw > 0) {
        fe_error(l, arg->loc, "%s: positional argument after a keyword argument", e->s);
        a->poison = true;
      }
      a->pos_locs[a->n_pos] = val->loc;
      a->pos[a->n_pos++] = v;
    }
  }
}

static const char *suggest_among(const char *name, const char *const *cand, int n, char *hint,
                                 size_t len) {
  const char *s = diag_suggest(name, cand, n);
  hint[0] = 0;
  if (s) snprintf(hint, len, "; did you mean '%s'?", s);
  return hint;
}

__attribute__((noinline)) static Val call_builtin(Lower *l, const Builtin *b, const Expr *e, const char *scope, Args *a) {
  Call call;
  memset(&call, 0, sizeof call);
  call.name = b->name;
  call.loc = e->loc;
  char spec[256];
  snprintf(spec, sizeof spec, "%s", b->params);
  int required = -1;
  for (char *p = spec; *p;) {
    if (*p == '|' || *p == ',') {
      if (*p == '|') required = call.n;
      p++;
      continue;
    }
    size_t len = strcspn(p, ",|");
    char sep = p[len];
    p[len] = 0;
    if (call.n < FE_MAX_ARGS) call.pnames[call.n++] = p;
    p += len;
    if (sep == '|') required = call.n;
    if (sep) p++;
  }
  if (required < 0) required = call.n;
  for (int i = 0; i < call.n; i++) {
    call.locs[i] = e->loc;
    call.args[i].kind = V_NONE;
  }
  bool ok = true;
  if (b->variadic) {
    call.n_rest = a->n_pos;
    call.rest = a->pos;
    call.rest_locs = a->pos_locs;
  } else if (a->n_pos > call.n) {
    fe_error(l, a->pos_locs[call.n], "%s takes %s%d argument%s, got %d", b->name,
             required < call.n ? "at most " : "", call.n, call.n == 1 ? "" : "s", a->n_pos);
    ok = false;
  } else {
    for (int i = 0; i < a->n_pos; i++) {
      call.args[i] = a->pos[i];
      call.locs[i] = a->pos_locs[i];
    }
  }
  for (int k = 0; k < a->n_kw; k++) {
    int j = -1;
    for (int i = 0; i < call.n; i++)
      if (strcmp(call.pnames[i], a->kw_names[k]) == 0) j = i;
    const PtSpelling *torch = NULL;
    if (j < 0) torch = fe_torch_find(PT_ARG, a->kw_names[k], b->name, call.pnames, call.n);
    if (torch && torch->alias)
      for (int i = 0; i < call.n; i++)
        if (strcmp(call.pnames[i], torch->dlcc) == 0) j = i;
    if (j < 0 && torch) {
      char note[256];
      if (torch->dlcc)
        fe_error(l, a->kw_locs[k], "%s has no argument '%s'; did you mean '%s'?%s", b->name, a->kw_names[k],
                 torch->dlcc, fe_torch_note(torch, note, sizeof note));
      else
        fe_error(l, a->kw_locs[k], "%s has no argument '%s'%s", b->name, a->kw_names[k],
                 fe_torch_note(torch, note, sizeof note));
      ok = false;
    } else if (j < 0) {
      char hint[160];
      fe_error(l, a->kw_locs[k], "%s has no argument '%s'%s", b->name, a->kw_names[k],
               suggest_among(a->kw_names[k], call.pnames, call.n, hint, sizeof hint));
      ok = false;
    } else if (call.args[j].kind != V_NONE) {
      fe_error(l, a->kw_locs[k], "%s: argument '%s' given twice", b->name, a->kw_names[k]);
      ok = false;
    } else {
      call.args[j] = a->kw[k];
      call.locs[j] = a->kw_locs[k];
    }
  }
  if (!ok || a->poison) return val_poison();
  for (int i = 0; i < required; i++)
    if (call.args[i].kind == V_NONE) {
      fe_error(l, e->loc, "%s: missing argument '%s'", b->name, call.pnames[i]);
      return val_poison();
    }
  const char *saved = l->prefix;
  if (scope) {
    l->prefix = scope;
    call.scoped = true;
  }
  Val r = b->fn(l, &call);
  l->prefix = saved;
  return r;
}

__attribute__((noinline)) static void no_such_param(Lower *l, const Item *b, const char *name, SrcLoc loc) {
  const char **cand = ARENA_ARRAY(l->a, const char *, b->n_params + 1);
  for (int i = 0; i < b->n_params; i++) cand[i] = b->params[i].name;
  char hint[160];
  fe_error(l, loc, "block '%s' has no parameter '%s'%s", b->name, name,
           suggest_among(name, cand, b->n_params, hint, sizeof hint));
}

static Val call_block(Lower *l, int idx, const Expr *e, const char *scope, Args *a) {
  const Item *b = l->p->items[idx];
  for (int i = 0; i < l->depth; i++)
    if (l->stack[i] == b) return val_poison(); /* a cycle: reported before lowering */
  if (l->depth >= FE_MAX_DEPTH) {
    fe_error(l, e->loc, "block calls nested more than %d deep", FE_MAX_DEPTH);
    return val_poison();
  }
  Frame *nf = frame_new(l);
  bool ok = true;
  bool *given = ARENA_ARRAY(l->a, bool, b->n_params + 1);
  if (a->n_pos > b->n_params) {
    fe_error(l, a->pos_locs[b->n_params], "block '%s' takes %d argument%s, got %d", b->name,
             b->n_params, b->n_params == 1 ? "" : "s", a->n_pos);
    ok = false;
  }
  for (int i = 0; i < a->n_pos && i < b->n_params; i++) {
    frame_set(l, nf, b->params[i].name, a->pos[i]);
    given[i] = true;
  }
  for (int k = 0; k < a->n_kw; k++) {
    int j = -1;
    for (int i = 0; i < b->n_params; i++)
      if (strcmp(b->params[i].name, a->kw_names[k]) == 0) j = i;
    if (j < 0) {
      no_such_param(l, b, a->kw_names[k], a->kw_locs[k]);
      ok = false;
    } else if (given[j]) {
      fe_error(l, a->kw_locs[k], "block '%s': argument '%s' given twice", b->name, a->kw_names[k]);
      ok = false;
    } else {
      frame_set(l, nf, b->params[j].name, a->kw[k]);
      given[j] = true;
    }
  }
  /* Before entering the block, so the error is not also "in" it. */
  for (int i = 0; ok && i < b->n_params; i++) {
    if (given[i] || b->params[i].default_val) continue;
    fe_error(l, e->loc, "block '%s': missing argument '%s'", b->name, b->params[i].name);
    ok = false;
  }
  if (!ok || a->poison) return val_poison();
  const char *saved = l->prefix;
  if (scope) l->prefix = scope;
  l->call_locs[l->depth] = e->loc;
  l->stack[l->depth++] = b;
  /* Defaults are evaluated in the callee, so one may use the parameters
   * before it: block f(x, c, hidden=c * 4). */
  for (int i = 0; ok && i < b->n_params; i++) {
    if (given[i]) continue;
    frame_set(l, nf, b->params[i].name, eval(l, nf, b->params[i].default_val));
  }
  if (ok) exec_stmts(l, nf, &b->body);
  l->depth--;
  l->prefix = saved;
  if (!ok) return val_poison();
  if (!nf->returned) {
    if (!l->halt && !diag_should_stop(l->c))
      fe_error(l, b->loc, "block '%s' ends without 'return'", b->name);
    return val_poison();
  }
  return nf->ret;
}

/* precision="f32", accepted by every layer, op and block call (unless a
 * block declares a parameter of that name): takes it out of a's keyword
 * arguments.  Returns false after reporting a bad value. */
static bool take_precision(Lower *l, const Expr *e, Args *a, bool *keep) {
  for (int k = 0; k < a->n_kw; k++) {
    if (strcmp(a->kw_names[k], "precision") != 0) continue;
    Val v = a->kw[k];
    bool ok = v.kind == V_POISON || (v.kind == V_STR && strcmp(v.s, "f32") == 0);
    if (!ok) {
      fe_error(l, a->kw_locs[k], "%s: precision must be \"f32\" (keeps the call in f32 under "
               "--precision=f16 or bf16), got %s", e->s, show(l, &v));
    }
    *keep = v.kind == V_STR;
    for (int j = k + 1; j < a->n_kw; j++) {
      a->kw_names[j - 1] = a->kw_names[j];
      a->kw_locs[j - 1] = a->kw_locs[j];
      a->kw[j - 1] = a->kw[j];
    }
    a->n_kw--;
    return ok;
  }
  return true;
}

static bool block_has_param(const Lower *l, int idx, const char *name) {
  const Item *b = l->p->items[idx];
  for (int i = 0; i < b->n_params; i++)
    if (strcmp(b->params[i].name, name) == 0) return true;
  return false;
}

static Val call_pinned(Lower *l, Frame *f, const Expr *e, const char *scope, Args *a);

__attribute__((noinline)) static Val unknown_function(Lower *l, Frame *f, const Expr *e) {
  if (lookup(l, f, e->s)) {
    fe_error(l, e->loc, "'%s' is a variable, not a function", e->s);
    return val_poison();
  }
  const PtSpelling *torch = fe_torch_find(PT_FUNC, e->s, NULL, NULL, 0);
  if (torch) {
    char note[256], also[160] = "";
    if (torch->dlcc) snprintf(also, sizeof also, "; did you mean '%s'?", torch->dlcc);
    fe_error(l, e->loc, "unknown function '%s'%s%s", e->s, also, fe_torch_note(torch, note, sizeof note));
    return val_poison();
  }
  int nb = fe_builtin_names(NULL, 0);
  const char **cand = ARENA_ARRAY(l->a, const char *, nb + l->blocks.len + 1);
  int n = fe_builtin_names(cand, nb);
  for (int i = 0; i < l->blocks.cap; i++)
    if (l->blocks.e[i].key) cand[n++] = l->blocks.e[i].key;
  char hint[160];
  fe_error(l, e->loc, "unknown function '%s'%s", e->s, suggest_among(e->s, cand, n, hint, sizeof hint));
  return val_poison();
}

/* A builtin by its name, or by PyTorch's where that is an alias (cat). */
static const Builtin *find_builtin(const char *name) {
  const Builtin *b = fe_builtin(name);
  const PtSpelling *torch = b ? NULL : fe_torch_find(PT_FUNC, name, NULL, NULL, 0);
  return torch && torch->alias ? fe_builtin(torch->dlcc) : b;
}

static Val eval_call(Lower *l, Frame *f, const Expr *e, const char *scope) {
  Args a;
  eval_args(l, f, e, &a);
  MapEntry *be = fe_map(l, &l->blocks, e->s, false);
  if (!be || !block_has_param(l, (int)be->n, "precision")) {
    bool keep = false;
    if (!take_precision(l, e, &a, &keep)) a.poison = true;
    if (keep) return call_pinned(l, f, e, scope, &a);
  }
  if (be) return call_block(l, (int)be->n, e, scope, &a);
  if (fe_is_scalar_fn(e->s)) {
    bool nums = a.n_kw == 0 && a.n_pos >= 1;
    for (int i = 0; nums && i < a.n_pos; i++) nums = val_is_num(&a.pos[i]);
    if (nums || !fe_builtin(e->s)) {
      if (a.poison) return val_poison();
      return fe_scalar_call(l, e->s, a.n_pos, a.pos, a.pos_locs, e->loc);
    }
  }
  const Builtin *b = find_builtin(e->s);
  if (!b) return unknown_function(l, f, e);
  return call_builtin(l, b, e, scope, &a);
}

/* The call with every node it adds marked #f32 (Node.keep_f32). */
static Val call_pinned(Lower *l, Frame *f, const Expr *e, const char *scope, Args *a) {
  Node *before = l->g->last;
  MapEntry *be = fe_map(l, &l->blocks, e->s, false);
  Val r;
  const Builtin *b = be ? NULL : find_builtin(e->s);
  if (be)
    r = call_block(l, (int)be->n, e, scope, a);
  else if (b)
    r = call_builtin(l, b, e, scope, a);
  else {
    fe_error(l, e->loc, "%s: precision applies to layers, ops and blocks", e->s);
    return val_poison();
  }
  for (Node *n = before ? before->next : l->g->first; n; n = n->next)
    if (ir_ops[n->op].cls != K_SOURCE) n->keep_f32 = true;
  return r;
}

/* An int that a subscript needs: an index or a slice bound. */
static bool subscript_int(Lower *l, Frame *f, const Expr *e, const char *what, int64_t *out) {
  Val v = eval(l, f, e);
  if (v.kind == V_POISON) return false;
  if (v.kind == V_INT) {
    *out = v.i;
    return true;
  }
  char buf[IR_TYPE_STR_MAX + 32];
  fe_error(l, e->loc, "%s must be an int, got %s%s", what, fe_describe(&v, buf, sizeof buf),
           v.kind == V_TENSOR ? " (index by a tensor with index_select(x, axis, indices) or gather)" : "");
  return false;
}

/* x[...] of a tensor: the subscripts evaluated, then tensors.c's rules. */
static Val eval_tensor_index(Lower *l, Frame *f, const Expr *e, Value *x) {
  int n = e->items.n;
  Subscript *subs = ARENA_ARRAY(l->a, Subscript, n);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    const Expr *s = e->items.v[i];
    subs[i].loc = s->loc;
    if (s->kind == EX_ELLIPSIS) {
      subs[i].kind = SUB_ELLIPSIS;
    } else if (s->kind == EX_SLICE) {
      const Expr *part[3] = {s->lhs, s->rhs, s->step};
      static const char *const what[3] = {"a slice's start", "a slice's end", "a slice's step"};
      subs[i].kind = SUB_SLICE;
      for (int k = 0; k < 3; k++) {
        subs[i].has[k] = part[k] != NULL;
        if (part[k]) ok &= subscript_int(l, f, part[k], what[k], &subs[i].v[k]);
      }
    } else {
      subs[i].kind = SUB_INDEX;
      ok &= subscript_int(l, f, s, "an index", &subs[i].v[0]);
    }
  }
  if (!ok) return val_poison();
  return fe_subscript(l, x, n, subs, e->loc);
}

/* list[i], tuple[i], string[i]: Python's rules, negative i from the end;
 * tensors take Python's slices too (fe_subscript). */
__attribute__((noinline)) static Val eval_index(Lower *l, Frame *f, const Expr *e) {
  Val a = eval(l, f, e->lhs);
  if (a.kind == V_POISON) return val_poison();
  if (a.kind == V_TENSOR) return eval_tensor_index(l, f, e, a.t);
  int64_t n;
  if (a.kind == V_LIST || a.kind == V_TUPLE) {
    n = a.list.n;
  } else if (a.kind == V_STR) {
    n = (int64_t)strlen(a.s);
  } else {
    fe_error(l, e->loc, "cannot index %s", show(l, &a));
    return val_poison();
  }
  const Expr *ie = e->items.v[0];
  if (e->items.n != 1 || ie->kind == EX_SLICE || ie->kind == EX_ELLIPSIS) {
    fe_error(l, ie->loc, "a %s takes one int index (slices and several indices apply to tensors)",
             a.kind == V_STR ? "string" : a.kind == V_LIST ? "list" : "tuple");
    return val_poison();
  }
  Val i = eval(l, f, ie);
  if (i.kind == V_POISON) return val_poison();
  if (i.kind != V_INT) {
    fe_error(l, ie->loc, "an index must be an int, got %s", show(l, &i));
    return val_poison();
  }
  int64_t k = i.i < 0 ? i.i + n : i.i;
  if (k < 0 || k >= n) {
    fe_error(l, ie->loc, "index %" PRId64 " is out of range for a %s of length %" PRId64, i.i,
             a.kind == V_STR ? "string" : a.kind == V_LIST ? "list" : "tuple", n);
    return val_poison();
  }
  if (a.kind == V_STR) return val_str(arena_strndup(l->a, a.s + k, 1));
  return a.list.v[k];
}

/* Counts a level of the evaluator's recursion; false after reporting
 * that there are too many (and halting: nothing deeper is evaluated). */
static bool enter(Lower *l, SrcLoc loc) {
  if (l->levels < FE_MAX_LEVELS) {
    l->levels++;
    return true;
  }
  if (!l->halt)
    fe_error(l, loc, "nesting too deep: expressions, statements and block calls nest more than %d levels here",
             FE_MAX_LEVELS);
  l->halt = true;
  return false;
}

static Val eval_expr(Lower *l, Frame *f, const Expr *e);

static Val eval(Lower *l, Frame *f, const Expr *e) {
  if (l->halt || !enter(l, e->loc)) return val_poison();
  Val v = eval_expr(l, f, e);
  l->levels--;
  return v;
}

static Val eval_expr(Lower *l, Frame *f, const Expr *e) {
  switch (e->kind) {
    case EX_INT: return val_int(e->i);
    case EX_FLOAT: return val_float(e->f);
    case EX_BOOL: return val_bool(e->b);
    case EX_STRING: return val_str(e->s);
    case EX_NAME: return eval_name(l, f, e);
    case EX_LIST: {
      Val *items = ARENA_ARRAY(l->a, Val, e->items.n + 1);
      bool poison = false;
      for (int i = 0; i < e->items.n; i++) {
        items[i] = eval(l, f, e->items.v[i]);
        poison |= items[i].kind == V_POISON;
      }
      return poison ? val_poison() : val_list(l, V_LIST, e->items.n, items);
    }
    case EX_UNARY: return eval_unary(l, f, e);
    case EX_BINARY: return eval_binary(l, f, e);
    case EX_CALL: return eval_call(l, f, e, NULL);
    case EX_AS: {
      const char *s = eval_scope(l, f, &e->scope);
      if (!s) return eval(l, f, e->lhs);
      const char *full = fe_join(l, l->prefix, s);
      if (e->lhs->kind == EX_CALL) return eval_call(l, f, e->lhs, full);
      const char *saved = l->prefix;
      l->prefix = full;
      Val v = eval(l, f, e->lhs);
      l->prefix = saved;
      return v;
    }
    case EX_ARG: return eval(l, f, e->lhs);
    case EX_INDEX: return eval_index(l, f, e);
    case EX_SLICE:
    case EX_ELLIPSIS: break; /* only inside EX_INDEX */
  }
  dl_unreachable(l->c);
}

/* ---- types ---- */

static bool eval_type(Lower *l, Frame *f, const TypeExpr *te, TensorType *out) {
  bool ok = true;
  memset(out, 0, sizeof *out);
  const PtSpelling *torch = fe_torch_find(PT_NAME, te->dtype, NULL, NULL, 0);
  bool aliased = torch && torch->alias && ir_dtype_from_name(torch->dlcc, &out->dtype);
  if (!aliased && (!ir_dtype_from_name(te->dtype, &out->dtype) || out->dtype == TY_F64)) { /* f64: the IR's only */
    fe_error(l, te->dtype_loc, "unknown dtype '%s'; expected one of f32, f16, bf16, i8, i32, i64, bool, u8",
             te->dtype);
    ok = false;
  }
  if (te->dims.n > DL_MAX_RANK) {
    fe_error(l, te->loc, "a tensor type has at most %d dims, got %d", DL_MAX_RANK, te->dims.n);
    return false;
  }
  bool saved = l->in_type;
  l->in_type = true;
  out->rank = te->dims.n;
  for (int i = 0; i < te->dims.n; i++) {
    const Expr *d = te->dims.v[i];
    Val v = eval(l, f, d);
    if (v.kind == V_INT && v.i >= 1) {
      out->dims[i] = v.i;
    } else {
      if (v.kind != V_POISON)
        fe_error(l, d->loc, "a dimension must be a positive int, got %s",
                 v.kind == V_STR ? "a string" : show(l, &v));
      ok = false;
    }
  }
  l->in_type = saved;
  if (ok && ir_type_numel(out) < 0) {
    char tb[IR_TYPE_STR_MAX];
    fe_error(l, te->loc, "%s is too large (more than %" PRId64 " elements)",
             ir_type_str(out, tb, sizeof tb), DL_MAX_ELEMS);
    ok = false;
  }
  return ok;
}

/* ---- model inputs: free names bound by the given shapes ---- */

/* How the name that a dim is got its value, for a message: "let N at
 * m.dl:1:5" or "-D N=8"; NULL for a name bound otherwise. */
static const char *dim_origin(Lower *l, const char *name) {
  for (int d = l->opt->n_defines - 1; d >= 0; d--)
    if (strcmp(l->opt->defines[d].name, name) == 0)
      return arena_printf(l->a, "-D %s=%" PRId64, name, l->opt->defines[d].value);
  for (int i = 0; i < l->p->n_items; i++) {
    const Item *it = l->p->items[i];
    if (it->kind == IT_LET && strcmp(it->name, name) == 0)
      return arena_printf(l->a, "'let %s' at %s:%d:%d", name, it->loc.file ? it->loc.file->name : "?",
                          it->loc.line, it->loc.col);
  }
  return NULL;
}

/* A model input's type.  A dim written as a name that nothing defines is
 * free: -D INPUT:AXIS, or the shape the caller gives (frontend/dims.c)
 * binds it, and the name keeps that value for the rest of the model.  A
 * dim the given shape contradicts is an error that says which -D would
 * make them agree. */
static bool eval_input_type(Lower *l, Frame *f, const Param *pr, TensorType *out) {
  const TypeExpr *te = pr->type;
  const InputShape *given = fe_dims_shape(&l->dims, pr->name);
  int rank = te->dims.n;
  bool ok = true;
  if (given && given->rank != rank && rank <= DL_MAX_RANK) {
    fe_error(l, te->loc, "input '%s' is given with %d dim%s, but the model declares %d", pr->name, given->rank,
             given->rank == 1 ? "" : "s", rank);
    given = NULL;
    ok = false;
  }
  for (int i = 0; i < rank && rank <= DL_MAX_RANK; i++) {
    const Expr *d = te->dims.v[i];
    DType dt;
    if (d->kind != EX_NAME) continue;
    /* Bound by an earlier input: the binder checks that this one agrees. */
    bool bound = fe_map(l, &l->free_dims, d->s, false) != NULL;
    if (!bound && (lookup(l, f, d->s) || ir_dtype_from_name(d->s, &dt))) continue;
    int64_t v;
    char err[768];
    if (fe_dims_bind(&l->dims, pr->name, rank, i, d->s, &v, err, sizeof err)) {
      if (v < 1) {
        fe_error(l, d->loc, "dim %d of input '%s' is %s = %" PRId64 ", but a dimension must be positive", i,
                 pr->name, d->s, v);
        frame_set(l, l->globals, d->s, val_poison());
        ok = false;
        continue;
      }
      frame_set(l, l->globals, d->s, val_int(v));
      fe_map(l, &l->free_dims, d->s, true);
    } else if (given) {
      fe_error(l, d->loc, "%s", err);
      frame_set(l, l->globals, d->s, val_poison());
      ok = false;
    } else if (l->opt && l->opt->free_dims_default > 0) {
      v = l->opt->free_dims_default;
      diag_note(l->c, d->loc, "nothing binds dimension '%s' of input '%s': taken as %" PRId64 " (-D %s=... sets it)",
                d->s, pr->name, v, d->s);
      frame_set(l, l->globals, d->s, val_int(v));
      fe_map(l, &l->free_dims, d->s, true);
    }
    /* Else nothing binds it: eval_type says so, once. */
  }
  l->type_input = pr->name;
  ok &= eval_type(l, f, te, out);
  l->type_input = NULL;
  for (int i = 0; i < rank && rank <= DL_MAX_RANK; i++) {
    const Expr *d = te->dims.v[i];
    if (d->kind == EX_NAME && !lookup(l, f, d->s)) {
      DType dt;
      if (!ir_dtype_from_name(d->s, &dt)) frame_set(l, l->globals, d->s, val_poison());
    }
  }
  if (!ok || !given) return ok;
  for (int i = 0; i < rank; i++) {
    if (out->dims[i] == given->dims[i]) continue;
    const Expr *d = te->dims.v[i];
    const char *origin = d->kind == EX_NAME ? dim_origin(l, d->s) : NULL;
    if (origin)
      fe_error(l, d->loc, "dim %d of input '%s' is %s = %" PRId64 " (by %s), but the input given has %" PRId64
               ": -D %s=%" PRId64 " would make them agree", i, pr->name, d->s, out->dims[i], origin,
               given->dims[i], d->s, given->dims[i]);
    else
      fe_error(l, d->loc, "dim %d of input '%s' is %" PRId64 ", but the input given has %" PRId64, i, pr->name,
               out->dims[i], given->dims[i]);
    ok = false;
  }
  return ok;
}

/* ---- statements ---- */

static bool step(Lower *l, SrcLoc loc) {
  long max_steps = l->opt->max_steps > 0 ? l->opt->max_steps : FE_MAX_STEPS;
  if (++l->steps <= max_steps) return true;
  if (!l->halt)
    fe_error(l, loc, "model too large: compile-time evaluation takes more than %ld steps",
             max_steps);
  l->halt = true;
  return false;
}

/* After a condition or loop bound failed, the names its body would have
 * assigned still exist, so that using them later is no second error. */
static void poison_assigned(Lower *l, Frame *f, const StmtList *body) {
  for (int i = 0; i < body->n; i++) {
    const Stmt *s = body->v[i];
    for (int k = 0; k < s->names.n; k++)
      if (!frame_find(f, s->names.v[k])) frame_set(l, f, s->names.v[k], val_poison());
    poison_assigned(l, f, &s->body);
    poison_assigned(l, f, &s->orelse);
  }
}

static void exec_assign(Lower *l, Frame *f, const Stmt *s) {
  Val v = eval(l, f, s->value);
  int n = s->names.n;
  if (n == 1) {
    frame_set(l, f, s->names.v[0], v);
    return;
  }
  if (v.kind != V_POISON && !((v.kind == V_TUPLE || v.kind == V_LIST) && v.list.n == n)) {
    fe_error(l, s->loc, "cannot unpack %s into %d names", show(l, &v), n);
    v = val_poison();
  }
  for (int k = 0; k < n; k++) frame_set(l, f, s->names.v[k], v.kind == V_POISON ? v : v.list.v[k]);
}

static void exec_for(Lower *l, Frame *f, const Stmt *s) {
  Val lo = eval(l, f, s->lo), hi = eval(l, f, s->hi);
  bool ok = lo.kind == V_INT && hi.kind == V_INT;
  if (lo.kind != V_INT && lo.kind != V_POISON)
    fe_error(l, s->lo->loc, "a loop bound must be an int, got %s", show(l, &lo));
  if (hi.kind != V_INT && hi.kind != V_POISON)
    fe_error(l, s->hi->loc, "a loop bound must be an int, got %s", show(l, &hi));
  if (!ok) {
    frame_set(l, f, s->names.v[0], val_poison());
    poison_assigned(l, f, &s->body);
    return;
  }
  for (int64_t i = lo.i; i < hi.i; i++) {
    if (!step(l, s->loc)) return;
    frame_set(l, f, s->names.v[0], val_int(i));
    exec_stmts(l, f, &s->body);
    if (f->returned || l->halt || diag_should_stop(l->c)) return;
  }
}

__attribute__((noinline)) static void exec_param(Lower *l, Frame *f, const Stmt *s) {
  TensorType t;
  if (!s->names.n) return; /* no name to bind: reported by the parser */
  const char *name = s->names.v[0];
  const char *full = eval_scope(l, f, &s->scope);
  bool ok = full != NULL;
  ok &= eval_type(l, f, s->type, &t);
  const char *init = NULL;
  if (s->value) {
    Val v = eval(l, f, s->value);
    char buf[IR_TYPE_STR_MAX + 32];
    if (val_is_num(&v)) {
      format_double(val_num(&v), buf, sizeof buf);
      init = arena_printf(l->a, "fill(%s)", buf);
    } else {
      if (v.kind != V_POISON)
        fe_error(l, s->value->loc, "the initial value of param '%s' must be a number, got %s", name,
                 show(l, &v));
      ok = false;
    }
  }
  Value *p = ok ? fe_param(l, l->prefix, full, &t, init, s->loc) : NULL;
  frame_set(l, f, name, val_tensor(p));
}

static void exec_one(Lower *l, Frame *f, const Stmt *s);

static void exec_stmt(Lower *l, Frame *f, const Stmt *s) {
  if (!step(l, s->loc) || !enter(l, s->loc)) return;
  exec_one(l, f, s);
  l->levels--;
}

static void exec_one(Lower *l, Frame *f, const Stmt *s) {
  switch (s->kind) {
    case ST_ASSIGN: exec_assign(l, f, s); return;
    case ST_LET: {
      Val v = eval(l, f, s->value);
      if (v.kind == V_TENSOR || v.kind == V_TUPLE) {
        fe_error(l, s->value->loc, "'let %s' needs a compile-time value, got %s", s->names.v[0],
                 show(l, &v));
        v = val_poison();
      }
      frame_set(l, f, s->names.v[0], v);
      return;
    }
    case ST_RETURN: {
      int n = s->values.n;
      Val *vs = ARENA_ARRAY(l->a, Val, n + 1);
      for (int i = 0; i < n; i++) vs[i] = eval(l, f, s->values.v[i]);
      f->ret = n == 1 ? vs[0] : val_list(l, V_TUPLE, n, vs);
      f->returned = true;
      f->ret_stmt = s;
      return;
    }
    case ST_IF: {
      bool ok;
      Val c = eval(l, f, s->cond);
      bool t = truth(l, &c, s->cond->loc, "condition", &ok);
      if (!ok) {
        poison_assigned(l, f, &s->body);
        poison_assigned(l, f, &s->orelse);
        return;
      }
      exec_stmts(l, f, t ? &s->body : &s->orelse);
      return;
    }
    case ST_FOR: exec_for(l, f, s); return;
    case ST_PARAM: exec_param(l, f, s); return;
  }
}

static void exec_stmts(Lower *l, Frame *f, const StmtList *body) {
  for (int i = 0; i < body->n; i++) {
    if (f->returned || l->halt || diag_should_stop(l->c)) return;
    exec_stmt(l, f, body->v[i]);
  }
}

/* ---- whole-program checks ---- */

typedef void (*ExprFn)(const Expr *e, void *data);

static void walk_expr(const Expr *e, ExprFn fn, void *data) {
  if (!e) return;
  fn(e, data);
  walk_expr(e->lhs, fn, data);
  walk_expr(e->rhs, fn, data);
  for (int i = 0; i < e->items.n; i++) walk_expr(e->items.v[i], fn, data);
  if (e->kind == EX_AS)
    for (int i = 0; i < e->scope.n; i++) walk_expr(e->scope.parts[i].expr, fn, data);
}

static void walk_type(const TypeExpr *t, ExprFn fn, void *data) {
  if (!t) return;
  for (int i = 0; i < t->dims.n; i++) walk_expr(t->dims.v[i], fn, data);
}

static void walk_stmts(const StmtList *body, ExprFn fn, void *data) {
  for (int i = 0; i < body->n; i++) {
    const Stmt *s = body->v[i];
    walk_expr(s->value, fn, data);
    for (int k = 0; k < s->values.n; k++) walk_expr(s->values.v[k], fn, data);
    walk_expr(s->cond, fn, data);
    walk_expr(s->lo, fn, data);
    walk_expr(s->hi, fn, data);
    walk_type(s->type, fn, data);
    for (int k = 0; k < s->scope.n; k++) walk_expr(s->scope.parts[k].expr, fn, data);
    walk_stmts(&s->body, fn, data);
    walk_stmts(&s->orelse, fn, data);
  }
}

static void walk_item(const Item *it, ExprFn fn, void *data) {
  walk_expr(it->value, fn, data);
  for (int i = 0; i < it->n_params; i++) {
    walk_type(it->params[i].type, fn, data);
    walk_expr(it->params[i].default_val, fn, data);
  }
  for (int i = 0; i < it->n_results; i++) walk_type(it->results[i].type, fn, data);
  walk_stmts(&it->body, fn, data);
}

/* The blocks each block calls, with where: the edges of the call graph. */
typedef struct CallEdge {
  int to;
  const Expr *at;
} CallEdge;

typedef struct Callees {
  Lower *l;
  int n, cap;
  CallEdge *v;
} Callees;

static void collect_call(const Expr *e, void *data) {
  Callees *c = data;
  MapEntry *b = e->kind == EX_CALL ? fe_map(c->l, &c->l->blocks, e->s, false) : NULL;
  if (!b) return;
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 8;
    c->v = arena_realloc(c->l->a, c->v, sizeof(CallEdge) * (size_t)c->cap, sizeof(CallEdge) * (size_t)cap);
    c->cap = cap;
  }
  c->v[c->n++] = (CallEdge){(int)b->n, e};
}

/* "a -> b -> a"; a long cycle shows its first and last blocks (the
 * message would be cut anyway, and joining names one at a time is
 * quadratic). */
static void report_cycle(Lower *l, const int *path, int n_path, const CallEdge *e) {
  const Item *const *items = (const Item *const *)l->p->items;
  int j = e->to, k = n_path - 1;
  while (k > 0 && path[k] != j) k--;
  char text[768]; /* at most 9 names of at most 64 bytes, and the arrows */
  size_t len = (size_t)snprintf(text, sizeof text, "%.64s", items[j]->name);
  for (int i = k + 1; i <= n_path; i++) {
    if (i == k + 6 && n_path - i > 3) {
      len += (size_t)snprintf(text + len, sizeof text - len, " -> ...");
      i = n_path - 2;
    }
    const char *name = i < n_path ? items[path[i]]->name : items[j]->name;
    len += (size_t)snprintf(text + len, sizeof text - len, " -> %.64s", name);
  }
  fe_error(l, e->at->loc, "block '%s' calls itself: %s", items[j]->name, text);
}

/* Depth first over the call graph with a stack of our own: a chain of
 * ten thousand blocks, each calling the next, is no cycle and no reason
 * to overflow the C stack.  True when it reported a cycle. */
static bool find_cycles(Lower *l) {
  const Program *p = l->p;
  int n = p->n_items;
  Callees *calls = ARENA_ARRAY(l->a, Callees, n + 1);
  for (int i = 0; i < n; i++) {
    calls[i].l = l;
    if (p->items[i]->kind == IT_BLOCK) walk_item(p->items[i], collect_call, &calls[i]);
  }
  bool found = false;
  char *state = ARENA_ARRAY(l->a, char, n + 1); /* 0 unvisited, 1 on the path, 2 done */
  int *path = ARENA_ARRAY(l->a, int, n + 1), *next = ARENA_ARRAY(l->a, int, n + 1);
  for (int root = 0; root < n; root++) {
    if (p->items[root]->kind != IT_BLOCK || state[root]) continue;
    int n_path = 0;
    state[root] = 1;
    path[n_path++] = root;
    while (n_path) {
      int b = path[n_path - 1];
      if (next[b] == calls[b].n) {
        state[b] = 2;
        n_path--;
        continue;
      }
      const CallEdge *e = &calls[b].v[next[b]++];
      if (state[e->to] == 0) {
        state[e->to] = 1;
        path[n_path++] = e->to;
      } else if (state[e->to] == 1) {
        report_cycle(l, path, n_path, e);
        found = true;
      }
    }
  }
  return found;
}

typedef struct NameUse {
  const char *name;
  bool found;
} NameUse;

static void find_name(const Expr *e, void *data) {
  NameUse *u = data;
  if (e->kind == EX_NAME && strcmp(e->s, u->name) == 0) u->found = true;
}

/* ---- models ---- */

static void lower_model(Lower *l, const Item *m) {
  Frame *f = frame_new(l);
  char ta[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX];
  for (int i = 0; i < m->n_params; i++) {
    const Param *pr = &m->params[i];
    TensorType t;
    Value *v = NULL;
    if (frame_find(f, pr->name))
      fe_error(l, pr->loc, "model input '%s' is declared twice", pr->name);
    else if (pr->type && eval_input_type(l, f, pr, &t))
      v = &ir_source(l->g, OP_INPUT, &t, pr->name, pr->loc)->out[0];
    else if (!pr->type)
      fe_error(l, pr->loc, "model input '%s' needs a type, like %s: f32[N, 784]", pr->name,
               pr->name);
    frame_set(l, f, pr->name, val_tensor(v));
  }
  TensorType *want = ARENA_ARRAY(l->a, TensorType, m->n_results + 1);
  bool *want_ok = ARENA_ARRAY(l->a, bool, m->n_results + 1);
  for (int i = 0; i < m->n_results; i++)
    want_ok[i] = eval_type(l, l->globals, m->results[i].type, &want[i]);
  exec_stmts(l, f, &m->body);
  if (l->halt || diag_should_stop(l->c)) return;
  if (!f->returned) {
    fe_error(l, m->loc, "model '%s' ends without 'return'", m->name);
    return;
  }
  const Stmt *rs = f->ret_stmt;
  int n = f->ret.kind == V_TUPLE ? f->ret.list.n : 1;
  const Val *vals = f->ret.kind == V_TUPLE ? f->ret.list.v : &f->ret;
  if (f->ret.kind == V_POISON) return;
  if (n != m->n_results) {
    fe_error(l, rs->loc, "model returns %d value%s, but its signature declares %d", n,
             n == 1 ? "" : "s", m->n_results);
    return;
  }
  Value **outs = ARENA_ARRAY(l->a, Value *, n + 1);
  const char **names = ARENA_ARRAY(l->a, const char *, n + 1);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    SrcLoc loc = rs->values.n == n ? rs->values.v[i]->loc : rs->loc;
    if (vals[i].kind == V_POISON) {
      ok = false;
      continue;
    }
    if (vals[i].kind != V_TENSOR) {
      fe_error(l, loc, "a model returns tensors, got %s", fe_describe(&vals[i], ta, sizeof ta));
      ok = false;
      continue;
    }
    outs[i] = vals[i].t;
    if (want_ok[i] && !ir_type_eq(&outs[i]->type, &want[i]))
      fe_error(l, loc, "model returns %s, but its signature says %s",
               ir_type_str(&outs[i]->type, ta, sizeof ta), ir_type_str(&want[i], tb, sizeof tb));
    const char *rn = m->results[i].name;
    names[i] = rn ? rn : n == 1 ? "output" : arena_printf(l->a, "output%d", i);
  }
  /* Outputs are found by name (dlc_get_output, --output-dir NAME.npy). */
  for (int i = 0; ok && i < n; i++)
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) {
        fe_error(l, m->results[i].loc, "model result '%s' is named twice%s", names[i],
                 m->results[i].name && m->results[j].name ? "" : " (unnamed results are output0, output1, ...)");
        ok = false;
        break;
      }
  if (ok) ir_set_outputs(l->g, n, outs, names);
}

static void eval_globals(Lower *l) {
  const Program *p = l->p;
  const LowerOptions *opt = l->opt;
  Frame *g = l->globals;
  bool *used = ARENA_ARRAY(l->a, bool, opt->n_defines + 1);
  /* A -D that no let defines binds a name that the types use freely. */
  for (int d = 0; d < opt->n_defines; d++) {
    if (strchr(opt->defines[d].name, ':')) {
      used[d] = true; /* INPUT:AXIS: the binder says whether it bound a dim */
      continue;
    }
    bool is_let = false;
    for (int i = 0; i < p->n_items; i++)
      if (p->items[i]->kind == IT_LET && strcmp(p->items[i]->name, opt->defines[d].name) == 0)
        is_let = true;
    used[d] = is_let;
    if (!is_let) {
      NameUse u = {opt->defines[d].name, false};
      for (int i = 0; i < p->n_items && !u.found; i++) walk_item(p->items[i], find_name, &u);
      used[d] = u.found;
      frame_set(l, g, opt->defines[d].name, val_int(opt->defines[d].value));
    }
  }
  for (int d = 0; d < opt->n_defines; d++)
    if (!used[d])
      diag_warning(l->c, (SrcLoc){0}, "-D %s=%" PRId64 " matches no 'let' and no name in %s",
                   opt->defines[d].name, opt->defines[d].value,
                   p->file ? p->file->name : "the program");
  StrMap seen = {0};
  for (int i = 0; i < p->n_items; i++) {
    const Item *it = p->items[i];
    if (it->kind != IT_LET) continue;
    MapEntry *e = fe_map(l, &seen, it->name, false);
    if (e) {
      if (fe_error(l, it->loc, "'let %s' is defined twice", it->name))
        diag_note(l->c, e->loc, "first defined here");
      continue;
    }
    fe_map(l, &seen, it->name, true)->loc = it->loc;
    const Define *def = NULL;
    for (int d = 0; d < opt->n_defines; d++)
      if (strcmp(opt->defines[d].name, it->name) == 0) def = &opt->defines[d];
    Val v;
    if (def) {
      v = val_int(def->value);
    } else {
      v = eval(l, g, it->value);
      if (v.kind == V_TENSOR || v.kind == V_TUPLE) {
        char buf[IR_TYPE_STR_MAX + 32];
        fe_error(l, it->value->loc, "'let %s' needs a compile-time value, got %s", it->name,
                 fe_describe(&v, buf, sizeof buf));
        v = val_poison();
      }
    }
    frame_set(l, g, it->name, v);
  }
}

static const Item *pick_model(Lower *l) {
  const Program *p = l->p;
  const Item *last = NULL, *chosen = NULL;
  char *list = "";
  for (int i = 0; i < p->n_items; i++) {
    const Item *it = p->items[i];
    if (it->kind != IT_MODEL) continue;
    for (int j = 0; j < i; j++)
      if (p->items[j]->kind == IT_MODEL && strcmp(p->items[j]->name, it->name) == 0) {
        if (fe_error(l, it->loc, "model '%s' is defined twice", it->name))
          diag_note(l->c, p->items[j]->loc, "first defined here");
      }
    list = *list ? arena_printf(l->a, "%s, %s", list, it->name) : arena_strdup(l->a, it->name);
    last = it;
    if (l->opt->model && strcmp(it->name, l->opt->model) == 0) chosen = it;
  }
  const char *file = p->file ? p->file->name : "the program";
  if (!last) {
    fe_error(l, (SrcLoc){0}, "%s defines no model", file);
    return NULL;
  }
  if (!l->opt->model) return last;
  if (!chosen)
    fe_error(l, (SrcLoc){0}, "no model named '%s' in %s; available: %s", l->opt->model, file, list);
  return chosen;
}

Graph *fe_lower(Ctx *c, const Program *p, const LowerOptions *opt) {
  static const LowerOptions no_options;
  if (!opt) opt = &no_options;
  int errors0 = c->diag.errors;
  Lower *l = ARENA_NEW(&c->arena, Lower);
  l->c = c;
  l->a = &c->arena;
  l->p = p;
  l->opt = opt;
  l->prefix = "";
  l->globals = frame_new(l);
  l->stack = ARENA_ARRAY(l->a, const Item *, FE_MAX_DEPTH);
  l->call_locs = ARENA_ARRAY(l->a, SrcLoc, FE_MAX_DEPTH);
  for (int i = 0; i < p->n_items; i++) {
    const Item *it = p->items[i];
    if (it->kind != IT_BLOCK) continue;
    MapEntry *e = fe_map(l, &l->blocks, it->name, false);
    if (e) {
      if (fe_error(l, it->loc, "block '%s' is defined twice", it->name))
        diag_note(c, p->items[e->n]->loc, "first defined here");
      continue;
    }
    e = fe_map(l, &l->blocks, it->name, true);
    e->n = i;
    e->loc = it->loc;
  }
  /* Lowering a cycle would only add "nested too deep" to it. */
  if (find_cycles(l)) return NULL;
  const Item *m = pick_model(l);
  if (!m) return NULL;
  l->g = ir_graph_new(c, m->name);
  bool *define_used = ARENA_ARRAY(l->a, bool, opt->n_defines + 1);
  fe_dims_init(&l->dims, l->a, opt->n_defines, opt->defines, define_used, opt->n_input_shapes,
               opt->input_shapes);
  eval_globals(l);
  lower_model(l, m);
  for (int d = 0; d < opt->n_defines; d++)
    if (strchr(opt->defines[d].name, ':') && !define_used[d] && c->diag.errors == errors0)
      diag_warning(c, (SrcLoc){0}, "-D %s=%" PRId64 ": model '%s' has no free dim there (a dim written as a name "
                   "that no 'let' or -D defines)", opt->defines[d].name, opt->defines[d].value, m->name);
  return c->diag.errors > errors0 ? NULL : l->g;
}
