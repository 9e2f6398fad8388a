/* The syntax tree's builders, the parse entry point and the dump.
 * fe_parse takes a SrcFile and returns its Program (NULL after reporting
 * errors); fe_dump_ast prints a Program as canonical source text.
 *
 * Dump format (deterministic, for tests): one item or statement a line,
 * bodies indented by two spaces, every unary, binary and `as` expression
 * in parentheses: `((-(a ** 2)) + (b * c))`, `(conv2d(x, 64, kernel=3) as
 * layer1.{i}.conv1)`.  Integers print in decimal, floats with %.17g (and a
 * ".0" when that looks like an integer), strings with their escapes,
 * `not` as (not x), `else if` for an else body that is exactly one if.
 * The dump parses back to the same tree. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "frontend/parse_internal.h"

Expr *fe_ast_expr(Ctx *c, ExprKind kind, SrcLoc loc) {
  Expr *e = ARENA_NEW(&c->arena, Expr);
  e->kind = kind;
  e->loc = loc;
  e->depth = 1;
  return e;
}

static int deeper(int d, const Expr *e) { return e && e->depth > d ? e->depth : d; }

Expr *fe_ast_nest(Ctx *c, Expr *e) {
  int d = deeper(deeper(deeper(0, e->lhs), e->rhs), e->step);
  for (int i = 0; i < e->items.n; i++) d = deeper(d, e->items.v[i]);
  for (int i = 0; i < e->scope.n; i++) d = deeper(d, e->scope.parts[i].expr);
  e->depth = d + 1;
  /* Only where it crosses: the levels above it are already too deep. */
  if (d == FE_MAX_EXPR_DEPTH)
    diag_error(c, e->loc,
               "expression nests deeper than %d (each operator of a chain like a + b + c is a level: "
               "split it over several statements)",
               FE_MAX_EXPR_DEPTH);
  return e;
}

Expr *fe_ast_binary(Ctx *c, int op, SrcLoc loc, Expr *lhs, Expr *rhs) {
  Expr *e = fe_ast_expr(c, EX_BINARY, loc);
  e->op = op;
  e->lhs = lhs;
  e->rhs = rhs;
  return fe_ast_nest(c, e);
}

Expr *fe_ast_slice(Ctx *c, SrcLoc loc, Expr *start, Expr *stop, Expr *step) {
  Expr *e = fe_ast_expr(c, EX_SLICE, loc);
  e->lhs = start;
  e->rhs = stop;
  e->step = step;
  return fe_ast_nest(c, e);
}

Expr *fe_ast_unary(Ctx *c, int op, SrcLoc loc, Expr *lhs) {
  Expr *e = fe_ast_expr(c, EX_UNARY, loc);
  e->op = op;
  e->lhs = lhs;
  return fe_ast_nest(c, e);
}

Stmt *fe_ast_stmt(Ctx *c, StmtKind kind, SrcLoc loc) {
  Stmt *s = ARENA_NEW(&c->arena, Stmt);
  s->kind = kind;
  s->loc = loc;
  return s;
}

/* Doubles an arena array of elem-byte entries when it is full. */
static void *grow(Ctx *c, void *v, int n, int *cap, size_t elem) {
  if (n < *cap) return v;
  int ncap = *cap ? *cap * 2 : 4;
  v = arena_realloc(&c->arena, v, elem * (size_t)*cap, elem * (size_t)ncap);
  *cap = ncap;
  return v;
}

void fe_ast_push_expr(Ctx *c, ExprList *l, Expr *e) {
  l->v = grow(c, l->v, l->n, &l->cap, sizeof *l->v);
  l->v[l->n++] = e;
}

void fe_ast_push_stmt(Ctx *c, StmtList *l, Stmt *s) {
  l->v = grow(c, l->v, l->n, &l->cap, sizeof *l->v);
  l->v[l->n++] = s;
}

void fe_ast_push_name(Ctx *c, NameList *l, const char *name, SrcLoc loc) {
  int cap = l->cap;
  l->v = grow(c, l->v, l->n, &cap, sizeof *l->v);
  l->locs = grow(c, l->locs, l->n, &l->cap, sizeof *l->locs);
  l->v[l->n] = name;
  l->locs[l->n++] = loc;
}

void fe_ast_push_part(Ctx *c, Scope *s, const char *text, Expr *e, SrcLoc loc) {
  s->parts = grow(c, s->parts, s->n, &s->cap, sizeof *s->parts);
  s->parts[s->n++] = (ScopePart){.text = text, .expr = e, .loc = loc};
}

void fe_ast_push_param(Ctx *c, ParamList *l, Param p) {
  l->v = grow(c, l->v, l->n, &l->cap, sizeof *l->v);
  l->v[l->n++] = p;
}

void fe_ast_push_result(Ctx *c, ResultList *l, Result r) {
  l->v = grow(c, l->v, l->n, &l->cap, sizeof *l->v);
  l->v[l->n++] = r;
}

void fe_ast_push_item(Ctx *c, Program *p, Item *it) {
  p->items = grow(c, p->items, p->n_items, &p->cap_items, sizeof *p->items);
  p->items[p->n_items++] = it;
}

static SrcLoc loc_of_offset(const SrcFile *f, size_t off) {
  SrcLoc loc = {f, 1, 1};
  for (size_t i = 0; i < off; i++) {
    if (f->text[i] == '\n') {
      loc.line++;
      loc.col = 1;
    } else {
      loc.col++;
    }
  }
  return loc;
}

Program *fe_parse(Ctx *c, const SrcFile *file) {
  const char *text = file->text ? file->text : "";
  size_t len = file->text ? file->len : 0;
  const char *nul = memchr(text, 0, len);
  /* The files a user has beside a model, given in its place. */
  const char *what = NULL;
  if (len >= 6 && memcmp(text, "\x93NUMPY", 6) == 0)
    what = "a NumPy array (.npy), not a model: give it to 'dlcc run' as --input NAME=FILE";
  else if (len >= 10 && memcmp(text + 8, "{\"", 2) == 0)
    what = "a safetensors file, not a model: give it as --weights FILE";
  else if (len >= 4 && (memcmp(text, "PK\x03\x04", 4) == 0 || (unsigned char)text[0] == 0x80))
    what = "a PyTorch checkpoint (zip or pickle), not a model: write the network in a .dl file "
           "and save its state_dict with safetensors";
  if (nul && what) {
    diag_error(c, (SrcLoc){0}, "%s is %s", file->name, what);
    return NULL;
  }
  if (nul) {
    diag_error(c, loc_of_offset(file, (size_t)(nul - text)), "not a text file (NUL byte)");
    return NULL;
  }
  /* flex scans in place and wants two NULs at the end. */
  char *buf = arena_alloc(&c->arena, len + 2);
  memcpy(buf, text, len);
  Parser ps = {.c = c, .file = file, .line = 1, .col = 1, .last_nl_col = 1};
  ps.prog = ARENA_NEW(&c->arena, Program);
  ps.prog->file = file;
  int errors = c->diag.errors;
  fe_lex_open(&ps, buf, len + 2);
  int rc = fe_run_parser(&ps);
  fe_lex_close(&ps);
  if (rc != 0 || ps.stop || c->diag.errors != errors) return NULL;
  return ps.prog;
}

/* ---- The dump. ---- */

static void dump_expr(FILE *f, const Expr *e);

const char *fe_op_text(int op) {
  switch (op) {
  case '!': return "not";
  case OPX_POW: return "**";
  case OPX_FLOORDIV: return "//";
  case OPX_EQ: return "==";
  case OPX_NE: return "!=";
  case OPX_LE: return "<=";
  case OPX_GE: return ">=";
  case OPX_AND: return "and";
  case OPX_OR: return "or";
  case '+': return "+";
  case '-': return "-";
  case '*': return "*";
  case '/': return "/";
  case '%': return "%";
  case '@': return "@";
  case '<': return "<";
  case '>': return ">";
  default: return "?";
  }
}

static void dump_list(FILE *f, const ExprList *l) {
  for (int i = 0; i < l->n; i++) {
    if (i) fputs(", ", f);
    dump_expr(f, l->v[i]);
  }
}

static void dump_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void dump_float(FILE *f, double v) {
  char buf[40];
  /* The shortest text that reads back as the same double. */
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
  fputs(buf, f);
  if (!strpbrk(buf, ".eEn")) fputs(".0", f);
}

static void dump_scope(FILE *f, const Scope *s) {
  for (int i = 0; i < s->n; i++) {
    if (i && !s->parts[i].glue) fputc('.', f);
    if (s->parts[i].expr) {
      fputc('{', f);
      dump_expr(f, s->parts[i].expr);
      fputc('}', f);
    } else {
      fputs(s->parts[i].text ? s->parts[i].text : "?", f);
    }
  }
}

static void dump_expr(FILE *f, const Expr *e) {
  if (!e) {
    fputs("<null>", f);
    return;
  }
  switch (e->kind) {
  case EX_INT: fprintf(f, "%" PRId64, e->i); break;
  case EX_FLOAT: dump_float(f, e->f); break;
  case EX_BOOL: fputs(e->b ? "true" : "false", f); break;
  case EX_STRING: dump_string(f, e->s ? e->s : ""); break;
  case EX_NAME: fputs(e->s, f); break;
  case EX_LIST:
    fputc('[', f);
    dump_list(f, &e->items);
    fputc(']', f);
    break;
  case EX_UNARY:
    fputs(e->op == '!' ? "(not " : "(-", f);
    dump_expr(f, e->lhs);
    fputc(')', f);
    break;
  case EX_BINARY:
    fputc('(', f);
    dump_expr(f, e->lhs);
    fprintf(f, " %s ", fe_op_text(e->op));
    dump_expr(f, e->rhs);
    fputc(')', f);
    break;
  case EX_CALL:
    fprintf(f, "%s(", e->s);
    dump_list(f, &e->items);
    fputc(')', f);
    break;
  case EX_ARG:
    if (e->s) fprintf(f, "%s=", e->s);
    dump_expr(f, e->lhs);
    break;
  case EX_INDEX:
    dump_expr(f, e->lhs);
    fputc('[', f);
    dump_list(f, &e->items);
    fputc(']', f);
    break;
  case EX_SLICE:
    if (e->lhs) dump_expr(f, e->lhs);
    fputc(':', f);
    if (e->rhs) dump_expr(f, e->rhs);
    if (e->step) {
      fputc(':', f);
      dump_expr(f, e->step);
    }
    break;
  case EX_ELLIPSIS: fputs("...", f); break;
  case EX_AS:
    fputc('(', f);
    dump_expr(f, e->lhs);
    fputs(" as ", f);
    dump_scope(f, &e->scope);
    fputc(')', f);
    break;
  }
}

static void dump_type(FILE *f, const TypeExpr *t) {
  fprintf(f, "%s[", t->dtype);
  dump_list(f, &t->dims);
  fputc(']', f);
}

static void indent(FILE *f, int depth) {
  for (int i = 0; i < depth; i++) fputs("  ", f);
}

static void dump_body(FILE *f, const StmtList *body, int depth);

static void dump_if(FILE *f, const Stmt *s, int depth) {
  fputs("if ", f);
  dump_expr(f, s->cond);
  fputs(" {\n", f);
  dump_body(f, &s->body, depth + 1);
  indent(f, depth);
  fputc('}', f);
  if (s->orelse.n == 1 && s->orelse.v[0]->kind == ST_IF) {
    fputs(" else ", f);
    dump_if(f, s->orelse.v[0], depth);
  } else if (s->orelse.n) {
    fputs(" else {\n", f);
    dump_body(f, &s->orelse, depth + 1);
    indent(f, depth);
    fputc('}', f);
  }
}

static void dump_stmt(FILE *f, const Stmt *s, int depth) {
  indent(f, depth);
  switch (s->kind) {
  case ST_ASSIGN:
    for (int i = 0; i < s->names.n; i++) fprintf(f, "%s%s", i ? ", " : "", s->names.v[i]);
    fputs(" = ", f);
    dump_expr(f, s->value);
    break;
  case ST_RETURN:
    fputs("return ", f);
    dump_list(f, &s->values);
    break;
  case ST_IF:
    dump_if(f, s, depth);
    break;
  case ST_FOR:
    fprintf(f, "for %s in ", s->names.v[0]);
    dump_expr(f, s->lo);
    fputs("..", f);
    dump_expr(f, s->hi);
    fputs(" {\n", f);
    dump_body(f, &s->body, depth + 1);
    indent(f, depth);
    fputc('}', f);
    break;
  case ST_PARAM:
    fputs("param ", f);
    dump_scope(f, &s->scope);
    fputs(": ", f);
    dump_type(f, s->type);
    if (s->value) {
      fputs(" = ", f);
      dump_expr(f, s->value);
    }
    break;
  case ST_LET:
    fprintf(f, "let %s = ", s->names.v[0]);
    dump_expr(f, s->value);
    break;
  }
  fputc('\n', f);
}

static void dump_body(FILE *f, const StmtList *body, int depth) {
  for (int i = 0; i < body->n; i++) dump_stmt(f, body->v[i], depth);
}

void fe_dump_ast(FILE *f, const Program *p) {
  for (int i = 0; i < p->n_items; i++) {
    const Item *it = p->items[i];
    switch (it->kind) {
    case IT_LET:
      fprintf(f, "let %s = ", it->name);
      dump_expr(f, it->value);
      fputc('\n', f);
      continue;
    case IT_BLOCK:
      fprintf(f, "block %s(", it->name);
      for (int j = 0; j < it->n_params; j++) {
        fprintf(f, "%s%s", j ? ", " : "", it->params[j].name);
        if (it->params[j].default_val) {
          fputc('=', f);
          dump_expr(f, it->params[j].default_val);
        }
      }
      fputs(") {\n", f);
      break;
    case IT_MODEL: {
      fprintf(f, "model %s(", it->name);
      for (int j = 0; j < it->n_params; j++) {
        fprintf(f, "%s%s: ", j ? ", " : "", it->params[j].name);
        dump_type(f, it->params[j].type);
      }
      fputs(") -> ", f);
      bool parens = it->n_results != 1 || it->results[0].name;
      if (parens) fputc('(', f);
      for (int j = 0; j < it->n_results; j++) {
        if (j) fputs(", ", f);
        if (it->results[j].name) fprintf(f, "%s: ", it->results[j].name);
        dump_type(f, it->results[j].type);
      }
      if (parens) fputc(')', f);
      fputs(" {\n", f);
      break;
    }
    }
    dump_body(f, &it->body, 1);
    fputs("}\n", f);
  }
}
