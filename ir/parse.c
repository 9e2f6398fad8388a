/* The IR text parser: takes a SrcFile holding the text format of
 * docs/ir.md, returns the graph it describes (every node's types checked
 * against its shape rule), or NULL after reporting every error it found at
 * the file's line and column.
 *
 * The format is line oriented, so the parser is too: each line is copied
 * into a NUL-terminated buffer and parsed on its own, and an error ends
 * that line only, which makes recovery trivial and keeps any lexing
 * routine from reading past the line. */
#include "ir.h"
#include "names.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ValEntry {
  const char *name; /* NULL: empty slot */
  Value *value;     /* NULL: the defining line had an error */
  int line;
} ValEntry;

/* Open addressing over names: values by %name, input and param names. */
typedef struct NameMap {
  ValEntry *slots;
  size_t cap, count;
} NameMap;

typedef struct Parser {
  Ctx *c;
  const SrcFile *file;
  Graph *g;
  const char *line; /* the current line, NUL-terminated */
  int lineno;
  size_t pos;
  bool failed; /* the current line reported an error */
  NameMap values, inputs, params;
  const SrcFile **loc_files; /* distinct names seen in location comments */
  int n_loc_files, cap_loc_files;
  NameMap loc_names; /* those names; an entry's line is its index in loc_files */
  bool seen_return, seen_close;
  int node_lines;
  int errors_before; /* the context's count when this parse began */
  int max_nodes;
  bool stop; /* a limit was reached: read no further */
  /* The guard frames read so far: one frame is one object (a node's
   * guard is compared by pointer). */
  const Guard **guards;
  int n_guards, cap_guards;
} Parser;

/* ---- names ---- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static ValEntry *map_find(NameMap *m, const char *name) {
  if (!m->cap) return NULL;
  for (size_t i = hash_str(name) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->slots[i].name) return NULL;
    if (strcmp(m->slots[i].name, name) == 0) return &m->slots[i];
  }
}

static void map_put(Arena *a, NameMap *m, const char *name, Value *v, int line) {
  if ((m->count + 1) * 2 > m->cap) {
    NameMap bigger = {.cap = m->cap ? m->cap * 2 : 64};
    bigger.slots = ARENA_ARRAY(a, ValEntry, bigger.cap);
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].name) map_put(a, &bigger, m->slots[i].name, m->slots[i].value, m->slots[i].line);
    *m = bigger;
  }
  size_t i = hash_str(name) & (m->cap - 1);
  while (m->slots[i].name) i = (i + 1) & (m->cap - 1);
  m->slots[i] = (ValEntry){name, v, line};
  m->count++;
}

/* ---- errors and lexing within a line ---- */

static SrcLoc loc_at(const Parser *p, size_t pos) {
  return (SrcLoc){p->file, p->lineno, (int)pos + 1};
}

static void error_at(Parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void error_at(Parser *p, size_t pos, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  diag_error(p->c, loc_at(p, pos), "%s", buf);
  p->failed = true;
}

static bool is_name_char(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '.'; }

static void skip_ws(Parser *p) {
  while (p->line[p->pos] == ' ' || p->line[p->pos] == '\t' || p->line[p->pos] == '\r') p->pos++;
}

/* At the end of the statement: nothing but a comment follows. */
static bool at_end(Parser *p) {
  skip_ws(p);
  return p->line[p->pos] == 0 || p->line[p->pos] == ';';
}

/* A short description of what stands at pos, for "found ..." */
static const char *found(Parser *p) {
  const char *s = p->line + p->pos;
  if (*s == 0 || *s == ';') return "end of line";
  if ((unsigned char)*s < 32 || (unsigned char)*s >= 127)
    return arena_printf(&p->c->arena, "byte 0x%02x", (unsigned char)*s);
  size_t n = 0;
  if (*s == '%') n++;
  while (is_name_char(s[n]) && n < 24) n++;
  if (n == 0 || (n == 1 && *s == '%')) n = 1;
  return arena_printf(&p->c->arena, "'%.*s'", (int)n, s);
}

static bool expect(Parser *p, char ch, const char *what) {
  skip_ws(p);
  if (p->line[p->pos] == ch) {
    p->pos++;
    return true;
  }
  error_at(p, p->pos, "expected %s, found %s", what, found(p));
  return false;
}

/* [A-Za-z_][A-Za-z0-9_]*, or NULL without consuming anything. */
static const char *ident(Parser *p) {
  skip_ws(p);
  const char *s = p->line + p->pos;
  if (!(isalpha((unsigned char)*s) || *s == '_')) return NULL;
  size_t n = 1;
  while (isalnum((unsigned char)s[n]) || s[n] == '_') n++;
  p->pos += n;
  return arena_strndup(&p->c->arena, s, n);
}

static bool keyword(Parser *p, const char *word) {
  skip_ws(p);
  size_t n = strlen(word);
  const char *s = p->line + p->pos;
  if (strncmp(s, word, n) != 0 || isalnum((unsigned char)s[n]) || s[n] == '_') return false;
  p->pos += n;
  return true;
}

/* A "%name"; returns the name without the '%' or NULL after an error. */
static const char *value_name(Parser *p, size_t *at) {
  skip_ws(p);
  *at = p->pos;
  const char *s = p->line + p->pos;
  if (*s != '%') {
    error_at(p, p->pos, "expected a value such as %%0, found %s", found(p));
    return NULL;
  }
  size_t n = 1;
  while (is_name_char(s[n])) n++;
  if (n == 1) {
    error_at(p, p->pos, "expected a value name after '%%'");
    return NULL;
  }
  p->pos += n;
  return arena_strndup(&p->c->arena, s + 1, n - 1);
}

static const char *string_lit(Parser *p, const char *what) {
  skip_ws(p);
  Attr a;
  size_t n = ir_parse_attr_value(&p->c->arena, p->line + p->pos, AK_STR, &a);
  if (!n) {
    if (p->line[p->pos] == '"')
      error_at(p, p->pos, "unterminated string");
    else
      error_at(p, p->pos, "expected %s in double quotes, found %s", what, found(p));
    return NULL;
  }
  p->pos += n;
  return a.s;
}

/* ---- types ---- */

/* A small non-negative integer (an axis). */
static bool int_lit(Parser *p, int64_t *out, const char *what) {
  const char *s = p->line + p->pos;
  if (!isdigit((unsigned char)*s)) {
    error_at(p, p->pos, "expected %s, found %s", what, found(p));
    return false;
  }
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno == ERANGE || v >= DL_MAX_RANK) {
    error_at(p, p->pos, "%s '%.*s' is out of range", what, (int)(end - s), s);
    return false;
  }
  p->pos += (size_t)(end - s);
  *out = v;
  return true;
}

static bool parse_type(Parser *p, TensorType *t) {
  skip_ws(p);
  size_t start = p->pos;
  const char *dt = ident(p);
  if (!dt) {
    error_at(p, p->pos, "expected a type such as f32[8, 784], found %s", found(p));
    return false;
  }
  memset(t, 0, sizeof *t);
  if (!ir_dtype_from_name(dt, &t->dtype)) {
    error_at(p, start, "unknown dtype '%s' (f32, f16, bf16, i8, i32, i64, bool, u8, f64)", dt);
    return false;
  }
  if (p->line[p->pos] != '[') {
    error_at(p, p->pos, "expected '[' after the dtype, found %s", found(p));
    return false;
  }
  p->pos++;
  skip_ws(p);
  if (p->line[p->pos] == ']') {
    p->pos++;
    return true;
  }
  for (;;) {
    skip_ws(p);
    const char *s = p->line + p->pos;
    if (!isdigit((unsigned char)*s) && *s != '-') {
      error_at(p, p->pos, "expected a dimension, found %s", found(p));
      return false;
    }
    char *end;
    errno = 0;
    long long d = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE || d > DL_MAX_ELEMS) {
      error_at(p, p->pos, "dimension '%.*s' is too large", (int)(end > s ? end - s : 1), s);
      return false;
    }
    if (d < 0) {
      error_at(p, p->pos, "dimension %lld is negative", d);
      return false;
    }
    if (t->rank == DL_MAX_RANK) {
      error_at(p, start, "a type has at most %d dimensions", DL_MAX_RANK);
      return false;
    }
    t->dims[t->rank++] = d;
    p->pos += (size_t)(end - s);
    skip_ws(p);
    if (p->line[p->pos] == ']') {
      p->pos++;
      break;
    }
    if (!expect(p, ',', "',' or ']' in the type")) return false;
  }
  if (ir_type_numel(t) < 0) {
    error_at(p, start, "type has more than %" PRId64 " elements", DL_MAX_ELEMS);
    return false;
  }
  return true;
}

/* ---- attributes ---- */

static const char *kind_text(AttrKind k) {
  switch (k) {
    case AK_INT: return "an integer";
    case AK_FLOAT: return "a number";
    case AK_INTS: return "a list of integers such as [1, 2]";
    case AK_STR: return "a string in double quotes";
    case AK_DTYPE: return "a dtype (f32, f16, bf16, i8, i32, i64, bool, u8, f64)";
  }
  return "a value";
}

static void set_attr(Graph *g, Node *n, const AttrSpec *s, const Attr *v) {
  switch (s->kind) {
    case AK_INT: ir_set_int(g, n, s->name, v->i); break;
    case AK_FLOAT: ir_set_float(g, n, s->name, v->f); break;
    case AK_INTS: ir_set_ints(g, n, s->name, v->ints.n, v->ints.v); break;
    case AK_STR: ir_set_str(g, n, s->name, v->s); break;
    case AK_DTYPE: ir_set_dtype(g, n, s->name, v->dt); break;
  }
}

static const char *attr_suggestion(OpKind op, const char *name, Arena *a) {
  const OpInfo *info = &ir_ops[op];
  const char **names = ARENA_ARRAY(a, const char *, info->n_attrs + 1);
  for (int i = 0; i < info->n_attrs; i++) names[i] = info->attrs[i].name;
  const char *best = diag_suggest(name, names, info->n_attrs);
  return best ? arena_printf(a, "; did you mean '%s'?", best) : "";
}

/* After the '{'. */
static bool parse_attrs(Parser *p, Node *n) {
  const char *op = ir_ops[n->op].name;
  skip_ws(p);
  if (p->line[p->pos] == '}') {
    p->pos++;
    return true;
  }
  for (;;) {
    skip_ws(p);
    size_t at = p->pos;
    const char *name = ident(p);
    if (!name) {
      error_at(p, p->pos, "expected an attribute name, found %s", found(p));
      return false;
    }
    const AttrSpec *s = ir_op_attr_spec(n->op, name);
    if (!s) {
      if (ir_ops[n->op].n_attrs == 0)
        error_at(p, at, "%s takes no attributes", op);
      else
        error_at(p, at, "unknown attribute '%s' for %s%s", name, op,
                 attr_suggestion(n->op, name, &p->c->arena));
      return false;
    }
    if (ir_attr(n, s->name)) {
      error_at(p, at, "attribute '%s' is given twice", name);
      return false;
    }
    if (!expect(p, '=', "'=' after the attribute name")) return false;
    skip_ws(p);
    Attr v;
    size_t used = ir_parse_attr_value(&p->c->arena, p->line + p->pos, s->kind, &v);
    if (!used) {
      error_at(p, p->pos, "attribute '%s' of %s needs %s, found %s", name, op, kind_text(s->kind),
               found(p));
      return false;
    }
    size_t vpos = p->pos;
    p->pos += used;
    char next = p->line[p->pos];
    if (next != ' ' && next != '\t' && next != ',' && next != '}' && next != '\r' && next != 0) {
      error_at(p, vpos, "attribute '%s' of %s needs %s, found '%.*s'", name, op, kind_text(s->kind),
               (int)(used + 1), p->line + vpos);
      return false;
    }
    set_attr(p->g, n, s, &v);
    skip_ws(p);
    if (p->line[p->pos] == '}') {
      p->pos++;
      return true;
    }
    if (!expect(p, ',', "',' or '}' after the attribute")) return false;
  }
}

/* ---- location comments ---- */

/* Hashed: a file may give every line a location in a file of its own. */
static const SrcFile *loc_file(Parser *p, const char *name) {
  const ValEntry *e = map_find(&p->loc_names, name);
  if (e) return p->loc_files[e->line];
  if (p->n_loc_files == p->cap_loc_files) {
    int cap = p->cap_loc_files ? p->cap_loc_files * 2 : 4;
    p->loc_files = arena_realloc(&p->c->arena, p->loc_files, sizeof *p->loc_files * (size_t)p->cap_loc_files,
                                 sizeof *p->loc_files * (size_t)cap);
    p->cap_loc_files = cap;
  }
  const SrcFile *f = ctx_add_file(p->c, name, NULL, 0);
  map_put(&p->c->arena, &p->loc_names, f->name, NULL, p->n_loc_files);
  p->loc_files[p->n_loc_files++] = f;
  return f;
}

/* Digits [lo, hi) as a positive int, or -1. */
static int parse_small_uint(const char *s, size_t lo, size_t hi) {
  if (lo >= hi || hi - lo > 9) return -1;
  int v = 0;
  for (size_t i = lo; i < hi; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/* "; FILE:LINE:COL" at pos; anything else is an ordinary comment and
 * leaves *loc alone. */
static void parse_loc_comment(Parser *p, SrcLoc *loc) {
  const char *s = p->line + p->pos;
  if (*s != ';') return;
  size_t b = 1;
  while (s[b] == ' ' || s[b] == '\t') b++;
  size_t e = strlen(s);
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) e--;
  size_t c2 = e;
  while (c2 > b && s[c2 - 1] != ':') c2--;
  if (c2 <= b) return;
  size_t c1 = c2 - 1;
  while (c1 > b && s[c1 - 1] != ':') c1--;
  if (c1 <= b + 1) return;
  int col = parse_small_uint(s, c2, e), line = parse_small_uint(s, c1, c2 - 1);
  if (line < 0 || col < 0) return;
  /* The printer escapes the name (ir_put_comment_text); a hand-written
   * one that is no such escape stays as written. */
  char *name = arena_alloc(&p->c->arena, c1 - b);
  if (!ir_unescape_comment_text(s + b, c1 - 1 - b, name)) memcpy(name, s + b, c1 - 1 - b);
  *loc = (SrcLoc){loc_file(p, name), line, col};
}

/* ---- statements ---- */

/* For "did you mean": the names in a plain array, as diag_suggest takes. */
static const char *const op_names[] = {
#define OP(id, name, ...) name,
#include "ops.def"
#undef OP
};
_Static_assert(ARRAY_LEN(op_names) == OP_COUNT, "op_names follows ops.def");

typedef struct NameAt {
  const char *name;
  size_t pos;
} NameAt;

static void push_name(Arena *a, NameAt **v, int *n, int *cap, const char *name, size_t pos) {
  if (*n == *cap) {
    int bigger = *cap ? *cap * 2 : 8;
    *v = arena_realloc(a, *v, sizeof **v * (size_t)*cap, sizeof **v * (size_t)bigger);
    *cap = bigger;
  }
  (*v)[(*n)++] = (NameAt){name, pos};
}

static bool check_unique_name(Parser *p, NameMap *m, const Node *n, const char *what, size_t pos) {
  const Attr *a = ir_attr(n, "name");
  if (!a) return true;
  const ValEntry *e = map_find(m, a->s);
  if (e) {
    error_at(p, pos, "%s name \"%s\" is already used on line %d", what, a->s, e->line);
    return false;
  }
  map_put(&p->c->arena, m, a->s, NULL, p->lineno);
  return true;
}

/* One "if [!]%c" of a node's guard, inside the frames before it: c one
 * bool defined above. */
static bool parse_guard_frame(Parser *p, Node *n) {
  skip_ws(p);
  bool when = p->line[p->pos] != '!';
  if (!when) p->pos++;
  size_t at;
  const char *name = value_name(p, &at);
  if (!name) return false;
  const ValEntry *e = map_find(&p->values, name);
  if (!e || !e->value) {
    if (!e) error_at(p, at, "%%%s is not defined", name);
    return false;
  }
  Value *cond = e->value;
  if (cond->type.dtype != TY_BOOL || ir_type_numel(&cond->type) != 1) {
    char t[IR_TYPE_STR_MAX];
    error_at(p, at, "a guard's condition must be one bool, and %%%s is %s", name,
             ir_type_str(&cond->type, t, sizeof t));
    return false;
  }
  for (int i = 0; i < p->n_guards; i++) {
    const Guard *f = p->guards[i];
    if (f->cond == cond && f->when == when && f->outer == n->guard) {
      n->guard = f;
      return true;
    }
  }
  if (p->n_guards == p->cap_guards) {
    int bigger = p->cap_guards ? 2 * p->cap_guards : 8;
    p->guards = arena_realloc(&p->c->arena, p->guards, sizeof *p->guards * (size_t)p->cap_guards,
                              sizeof *p->guards * (size_t)bigger);
    p->cap_guards = bigger;
  }
  n->guard = p->guards[p->n_guards++] = ir_guard_new(p->g, cond, when, n->guard);
  return true;
}

/* "%a, %b = op %x, %y {attrs} : t1, t2 ; loc" */
static void parse_node(Parser *p) {
  Arena *a = &p->c->arena;
  NameAt *results = NULL;
  int n_res = 0, cap_res = 0;
  for (;;) {
    size_t at;
    const char *name = value_name(p, &at);
    if (!name) goto fail;
    const ValEntry *e = map_find(&p->values, name);
    if (e) {
      error_at(p, at, "%%%s is already defined on line %d", name, e->line);
      goto fail;
    }
    for (int i = 0; i < n_res; i++)
      if (strcmp(results[i].name, name) == 0) {
        error_at(p, at, "%%%s is named twice", name);
        goto fail;
      }
    push_name(a, &results, &n_res, &cap_res, name, at);
    skip_ws(p);
    if (p->line[p->pos] == '=') break;
    if (!expect(p, ',', "',' or '=' after the result")) goto fail;
  }
  p->pos++;

  skip_ws(p);
  size_t op_at = p->pos;
  const char *op_name = ident(p);
  if (!op_name) {
    error_at(p, p->pos, "expected an op name, found %s", found(p));
    goto fail;
  }
  OpKind op = ir_op_from_name(op_name);
  if (op == OP_COUNT) {
    const char *best = diag_suggest(op_name, op_names, OP_COUNT);
    if (best)
      error_at(p, op_at, "unknown op '%s'; did you mean '%s'?", op_name, best);
    else
      error_at(p, op_at, "unknown op '%s'", op_name);
    goto fail;
  }
  const OpInfo *info = &ir_ops[op];
  if (info->n_out >= 0 && n_res != info->n_out) {
    error_at(p, results[0].pos, "%s gives %d result%s, but %d %s named", info->name, info->n_out,
             info->n_out == 1 ? "" : "s", n_res, n_res == 1 ? "is" : "are");
    goto fail;
  }

  Value **ins = NULL;
  int n_in = 0, cap_in = 0;
  bool poisoned = false;
  skip_ws(p);
  if (p->line[p->pos] == '%') {
    for (;;) {
      size_t at;
      const char *name = value_name(p, &at);
      if (!name) goto fail;
      const ValEntry *e = map_find(&p->values, name);
      if (!e) {
        error_at(p, at, "%%%s is not defined", name);
        goto fail;
      }
      if (!e->value) poisoned = true;
      if (n_in == cap_in) {
        int bigger = cap_in ? cap_in * 2 : 8;
        ins = arena_realloc(a, ins, sizeof *ins * (size_t)cap_in, sizeof *ins * (size_t)bigger);
        cap_in = bigger;
      }
      ins[n_in++] = e->value;
      skip_ws(p);
      if (p->line[p->pos] != ',') break;
      p->pos++;
    }
  }
  Node *n = ir_node_new(p->g, op, n_in, ins, (SrcLoc){0});
  if (n_res != n->n_out) { /* a loop's: one result per carried value */
    error_at(p, results[0].pos, "%s of %d operands gives %d result%s, but %d %s named", info->name, n_in, n->n_out,
             n->n_out == 1 ? "" : "s", n_res, n_res == 1 ? "is" : "are");
    goto fail;
  }
  skip_ws(p);
  if (p->line[p->pos] == '{') {
    p->pos++;
    if (!parse_attrs(p, n)) goto fail;
  }

  if (!expect(p, ':', "':' and the result types")) goto fail;
  TensorType types[IR_MAX_RESULTS];
  size_t type_at[IR_MAX_RESULTS];
  int n_types = 0;
  for (;;) {
    skip_ws(p);
    TensorType t;
    size_t at = p->pos;
    if (!parse_type(p, &t)) goto fail;
    if (n_types < (int)ARRAY_LEN(types)) {
      types[n_types] = t;
      type_at[n_types] = at;
    }
    n_types++;
    skip_ws(p);
    if (p->line[p->pos] != ',') break;
    p->pos++;
  }
  skip_ws(p);
  /* "#f32": the per-op precision override. */
  if (strncmp(p->line + p->pos, "#f32", 4) == 0 && !is_name_char(p->line[p->pos + 4])) {
    n->keep_f32 = true;
    p->pos += 4;
    skip_ws(p);
  }
  if (p->line[p->pos] == '#') {
    /* "#kN": the node's fusion group. */
    size_t at = p->pos++;
    int digits = 0;
    long long g = 0;
    if (p->line[p->pos] == 'k')
      for (p->pos++; isdigit((unsigned char)p->line[p->pos]) && digits < 10; p->pos++, digits++)
        g = g * 10 + (p->line[p->pos] - '0');
    if (digits == 0 || g > INT32_MAX || isdigit((unsigned char)p->line[p->pos]) ||
        is_name_char(p->line[p->pos])) {
      error_at(p, at, "expected a fusion group '#kN' after the types");
      goto fail;
    }
    n->group = (int)g;
    skip_ws(p);
  }
  while (strncmp(p->line + p->pos, "if", 2) == 0 && !is_name_char(p->line[p->pos + 2])) {
    p->pos += 2;
    if (!parse_guard_frame(p, n)) goto fail;
    skip_ws(p);
  }
  if (!at_end(p)) {
    error_at(p, p->pos, "expected ',' or the end of the line after the type, found %s", found(p));
    goto fail;
  }
  parse_loc_comment(p, &n->loc);

  if (n_types != n->n_out) {
    error_at(p, type_at[0], "%s gives %d result%s, but %d type%s written", info->name, n->n_out,
             n->n_out == 1 ? "" : "s", n_types, n_types == 1 ? " is" : "s are");
    goto fail;
  }
  char err[256] = "";
  if (!ir_fill_defaults(p->g, n, err, sizeof err)) {
    error_at(p, op_at, "%s", err);
    goto fail;
  }
  if (!info->shape) {
    if (n_in != 0) {
      error_at(p, op_at, "%s takes no operands", info->name);
      goto fail;
    }
    ir_declare(n, &types[0]); /* a dim of 0 is an empty tensor; a negative one is refused when read */
    if (op == OP_INPUT && !check_unique_name(p, &p->inputs, n, "input", op_at)) goto fail;
    if (op == OP_PARAM && !check_unique_name(p, &p->params, n, "param", op_at)) goto fail;
  } else {
    if (poisoned) goto fail; /* an operand's line already had an error */
    err[0] = 0;
    if (!ir_infer(n, err, sizeof err)) {
      error_at(p, op_at, "%s", err[0] ? err : "the operands do not fit this op");
      goto fail;
    }
    for (int i = 0; i < n_types; i++)
      if (!ir_type_eq(&types[i], &n->out[i].type)) {
        char want[IR_TYPE_STR_MAX], got[IR_TYPE_STR_MAX];
        error_at(p, type_at[i], "declared %s but %s of these operands gives %s",
                 ir_type_str(&types[i], want, sizeof want), info->name,
                 ir_type_str(&n->out[i].type, got, sizeof got));
        goto fail;
      }
  }
  ir_append(p->g, n);
  for (int i = 0; i < n_res; i++) map_put(a, &p->values, results[i].name, &n->out[i], p->lineno);
  return;

fail:
  /* Later uses of these names stay quiet: their error is this one. */
  p->failed = true;
  for (int i = 0; i < n_res; i++)
    if (!map_find(&p->values, results[i].name)) map_put(a, &p->values, results[i].name, NULL, p->lineno);
}

/* "return %v as "name" [updates "param"] [length AXIS "output"], ..." */
static void parse_return(Parser *p, size_t at) {
  if (p->seen_return) {
    error_at(p, at, "second 'return' in the graph");
    return;
  }
  p->seen_return = true;
  Arena *a = &p->c->arena;
  Value **vals = NULL;
  const char **names = NULL, **updates = NULL, **len_names = NULL;
  int64_t *len_axes = NULL;
  size_t *len_at = NULL;
  int n = 0, cap = 0;
  bool poisoned = false;
  if (at_end(p)) {
    error_at(p, p->pos, "'return' needs at least one value");
    return;
  }
  for (;;) {
    size_t vat;
    const char *name = value_name(p, &vat);
    if (!name) return;
    const ValEntry *e = map_find(&p->values, name);
    if (!e) {
      error_at(p, vat, "%%%s is not defined", name);
      return;
    }
    if (!e->value) poisoned = true;
    if (!keyword(p, "as")) {
      error_at(p, p->pos, "expected 'as' and the output's name, found %s", found(p));
      return;
    }
    skip_ws(p);
    size_t oat = p->pos;
    const char *out = string_lit(p, "the output's name");
    if (!out) return;
    for (int i = 0; i < n; i++)
      if (strcmp(names[i], out) == 0) {
        error_at(p, oat, "output name \"%s\" is used twice", out);
        return;
      }
    if (n == cap) {
      int bigger = cap ? cap * 2 : 4;
      vals = arena_realloc(a, vals, sizeof *vals * (size_t)cap, sizeof *vals * (size_t)bigger);
      names = arena_realloc(a, names, sizeof *names * (size_t)cap, sizeof *names * (size_t)bigger);
      updates = arena_realloc(a, updates, sizeof *updates * (size_t)cap, sizeof *updates * (size_t)bigger);
      len_names = arena_realloc(a, len_names, sizeof *len_names * (size_t)cap, sizeof *len_names * (size_t)bigger);
      len_axes = arena_realloc(a, len_axes, sizeof *len_axes * (size_t)cap, sizeof *len_axes * (size_t)bigger);
      len_at = arena_realloc(a, len_at, sizeof *len_at * (size_t)cap, sizeof *len_at * (size_t)bigger);
      cap = bigger;
    }
    vals[n] = e->value;
    updates[n] = NULL;
    if (keyword(p, "updates")) {
      skip_ws(p);
      if (!(updates[n] = string_lit(p, "the name of the param it updates"))) return;
    }
    len_names[n] = NULL;
    if (keyword(p, "length")) {
      skip_ws(p);
      if (!int_lit(p, &len_axes[n], "the axis of run-time length")) return;
      skip_ws(p);
      len_at[n] = p->pos;
      if (!(len_names[n] = string_lit(p, "the name of the output holding the length"))) return;
    }
    names[n++] = out;
    skip_ws(p);
    if (p->line[p->pos] != ',') break;
    p->pos++;
  }
  if (!at_end(p)) {
    error_at(p, p->pos, "expected ',' or the end of the line, found %s", found(p));
    return;
  }
  if (poisoned) return;
  ir_set_outputs(p->g, n, vals, names);
  for (int i = 0; i < n; i++)
    if (updates[i]) ir_set_output_update(p->g, i, updates[i]);
  for (int i = 0; i < n; i++) {
    if (!len_names[i]) continue;
    int j = 0;
    while (j < n && strcmp(names[j], len_names[i]) != 0) j++;
    if (j == n) {
      error_at(p, len_at[i], "no output is named \"%s\"", len_names[i]);
      return;
    }
    ir_set_output_length(p->g, i, (int)len_axes[i], j);
  }
}

static void parse_header(Parser *p) {
  size_t at = p->pos;
  const char *name = NULL;
  bool bounded = false;
  if (!keyword(p, "graph")) {
    error_at(p, at, "expected 'graph NAME {', found %s", found(p));
  } else {
    skip_ws(p);
    if (p->line[p->pos] == '"')
      name = string_lit(p, "the graph name");
    else if (!(name = ident(p)))
      error_at(p, p->pos, "expected the graph's name, found %s", found(p));
    skip_ws(p);
    bounded = name && keyword(p, "bounded");
    if (name && expect(p, '{', "'{' after the graph name") && !at_end(p))
      error_at(p, p->pos, "expected the end of the line after '{', found %s", found(p));
  }
  p->g = ir_graph_new(p->c, name ? name : "graph");
  p->g->bounded = bounded;
}

static void parse_body_line(Parser *p) {
  skip_ws(p);
  size_t at = p->pos;
  char ch = p->line[p->pos];
  if (ch == '}') {
    p->pos++;
    p->seen_close = true;
    if (!at_end(p)) error_at(p, p->pos, "text after the graph's closing '}'");
    if (p->node_lines == 0 && p->c->diag.errors == p->errors_before)
      error_at(p, at, "graph '%s' has no nodes", p->g->name);
    else if (!p->seen_return)
      error_at(p, at, "graph '%s' has no 'return'", p->g->name);
  } else if (ch == '%') {
    if (p->node_lines == p->max_nodes) {
      error_at(p, at, "graph too large: more than %d operations", p->max_nodes);
      p->stop = true;
    } else if (p->seen_return) {
      error_at(p, at, "node after 'return'");
    } else {
      parse_node(p);
    }
    p->node_lines++;
  } else if (keyword(p, "return")) {
    parse_return(p, at);
  } else {
    error_at(p, at, "expected a node ('%%0 = op ...'), 'return' or '}', found %s", found(p));
  }
}

Graph *ir_parse(Ctx *c, const SrcFile *file) { return ir_parse_max(c, file, IR_MAX_NODES); }

Graph *ir_parse_max(Ctx *c, const SrcFile *file, int max_nodes) {
  Parser p = {.c = c, .file = file, .max_nodes = max_nodes};
  if (!file || !file->text) {
    diag_error(c, ((SrcLoc){file, 0, 0}), "no IR text to parse");
    return NULL;
  }
  int errors_before = c->diag.errors;
  p.errors_before = errors_before;
  const char *text = file->text, *end = file->text + file->len;
  bool have_header = false;
  /* End-of-text errors point after the last line with something on it. */
  int last_line = 1;
  size_t last_len = 0;
  for (const char *s = text; s < end && !diag_should_stop(c) && !p.stop;) {
    const char *eol = memchr(s, '\n', (size_t)(end - s));
    if (!eol) eol = end;
    size_t n = (size_t)(eol - s);
    p.lineno++;
    p.pos = 0;
    p.failed = false;
    const char *nul = memchr(s, 0, n);
    p.line = arena_strndup(&c->arena, s, n);
    size_t nul_at = nul ? (size_t)(nul - s) : 0;
    s = eol + 1;
    if (nul) {
      error_at(&p, nul_at, "NUL byte in IR text");
      continue;
    }
    if (p.line[strspn(p.line, " \t\r")] != 0) {
      last_line = p.lineno;
      last_len = n;
    }
    if (at_end(&p)) continue; /* blank or comment */
    if (p.seen_close) {
      error_at(&p, p.pos, "text after the graph's closing '}'");
      continue;
    }
    if (!have_header) {
      have_header = true;
      parse_header(&p);
      /* Without a header a line that starts like a node most likely is
       * one: read it as such rather than lose its errors. */
      if (!p.failed || p.line[strspn(p.line, " \t")] != '%') continue;
      p.pos = 0;
      p.failed = false;
    }
    parse_body_line(&p);
  }
  if (diag_should_stop(c) || p.stop) return NULL;
  SrcLoc eof = {file, last_line, (int)last_len + 1};
  if (!have_header) {
    diag_error(c, eof, "empty IR text: expected 'graph NAME {'");
    return NULL;
  }
  if (!p.seen_close) diag_error(c, eof, "missing '}' at the end of graph '%s'", p.g->name);
  if (c->diag.errors != errors_before) return NULL;
  /* Text without length marks (written by hand) gets them as an importer
   * gives them; printed text has them already. */
  bool sized = false;
  for (Node *n = p.g->first; n && !sized; n = n->next)
    sized = n->op == OP_NONZERO || n->op == OP_NMS || n->op == OP_UNIQUE || n->op == OP_SHAPE_OF ||
            n->op == OP_WITH_LENGTH;
  if (sized && !p.g->output_length && !p.g->bounded && (!ir_verify(p.g) || !ir_bounds(p.g))) return NULL;
  return p.g;
}

Graph *ir_copy(Graph *g, const char *name) {
  char *text = ir_print_text(g);
  /* Into the arena before parsing: the file must outlive the messages
   * that show its lines, and nothing malloc'd may be held when an
   * allocation failure unwinds out of ir_parse. */
  if (!text) return NULL;
  size_t len = strlen(text);
  ctx_hold(g->ctx, text);
  char *kept = arena_strndup(&g->ctx->arena, text, len);
  ctx_release(g->ctx, text);
  free(text);
  return ir_parse(g->ctx, ctx_add_file(g->ctx, name, kept, len));
}
