/* Scanner and parser tests: takes .dl text (inline, and the examples),
 * checks the AST dump, node locations and the exact error messages, and
 * that random mutations and failing allocations never crash the parser. */
#include "check_quiet.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"

typedef struct Run {
  const char *name, *text;
  size_t len;
  Program *prog;
} Run;

static int run_parse(Ctx *c, void *data) {
  Run *r = data;
  const SrcFile *f = ctx_add_file(c, r->name, r->text, r->len);
  r->prog = fe_parse(c, f);
  return r->prog != NULL;
}

/* A parse and what it left: the dump (NULL after errors) and only the
 * "file:line:col: error: ..." lines of the diagnostics (no source lines). */
typedef struct Parsed {
  Ctx c;
  Program *prog;
  int rc;
  char *dump;
  char *errors;
} Parsed;

static void parse_bytes(Parsed *res, const char *text, size_t len) {
  memset(res, 0, sizeof *res);
  ctx_init(&res->c);
  Run r = {"t.dl", text, len, NULL};
  res->rc = ctx_guard(&res->c, run_parse, &r);
  res->prog = r.prog;
  if (r.prog) {
    size_t n;
    FILE *f = open_memstream(&res->dump, &n);
    fe_dump_ast(f, r.prog);
    fclose(f);
  }
  const char *d = diag_text(&res->c);
  res->errors = calloc(1, (d ? strlen(d) : 0) + 1);
  for (const char *line = d; line && *line;) {
    const char *eol = strchr(line, '\n');
    size_t n = eol ? (size_t)(eol - line + 1) : strlen(line);
    if (strncmp(line, "    ", 4) != 0) strncat(res->errors, line, n);
    line += n;
  }
}

static void parse(Parsed *res, const char *text) { parse_bytes(res, text, strlen(text)); }

static void done(Parsed *res) {
  free(res->dump);
  free(res->errors);
  ctx_free(&res->c);
}

/* Parses text that must be accepted and compares its dump. */
static void check_dump(const char *text, const char *want) {
  Parsed r;
  parse(&r, text);
  ck_assert_msg(r.prog != NULL, "rejected:\n%s\nerrors:\n%s", text, r.errors);
  ck_assert_str_eq(r.dump, want);
  done(&r);
}

/* Parses text that must be rejected and compares the error lines. */
static void check_errors(const char *text, const char *want) {
  Parsed r;
  parse(&r, text);
  ck_assert_msg(r.prog == NULL, "accepted:\n%s", text);
  ck_assert_int_eq(r.rc, 0);
  ck_assert_str_eq(r.errors, want);
  done(&r);
}

/* The dump of `let v = EXPR`, without the "let v = " and newline. */
static void check_expr(const char *expr, const char *want) {
  char src[512], full[512];
  snprintf(src, sizeof src, "let v = %s\n", expr);
  snprintf(full, sizeof full, "let v = %s\n", want);
  check_dump(src, full);
}

static const char *const big_example =
    "let N = 8  let T = 32\n"
    "block basic(x, cout, stride=1) {\n"
    "  y = relu(batchnorm(conv2d(x, cout, kernel=3, stride=stride, pad=1, bias=false) as conv1) as bn1)\n"
    "  s = x\n"
    "  if stride != 1 { s = batchnorm(conv2d(x, cout, kernel=1, stride=stride, bias=false) as downsample.0) as "
    "downsample.1 }\n"
    "  return relu(y + s)\n"
    "}\n"
    "model m(x: f32[N, 3, 224, 224], t: i64[N, T]) -> (logits: f32[N, 1000], f32[N]) {\n"
    "  for i in 1..4 { x = basic(x, 64) as layer1.{i} }\n"
    "  h, hn, cn = lstm(e, hidden=512, layers=2, batch_first=true) as lstm\n"
    "  s = matmul(q, transpose(k, perm=[0, 1, 3, 2])) * (1.0 / sqrt(D))\n"
    "  param w: f32[64, 64]\n"
    "  param b: f32[64] = 0\n"
    "  if a { } else if b { } else { }\n"
    "  return x, y\n"
    "}\n";

START_TEST(test_big_example) {
  check_dump(big_example,
             "let N = 8\n"
             "let T = 32\n"
             "block basic(x, cout, stride=1) {\n"
             "  y = relu((batchnorm((conv2d(x, cout, kernel=3, stride=stride, pad=1, bias=false) as conv1)) as "
             "bn1))\n"
             "  s = x\n"
             "  if (stride != 1) {\n"
             "    s = (batchnorm((conv2d(x, cout, kernel=1, stride=stride, bias=false) as downsample.0)) as "
             "downsample.1)\n"
             "  }\n"
             "  return relu((y + s))\n"
             "}\n"
             "model m(x: f32[N, 3, 224, 224], t: i64[N, T]) -> (logits: f32[N, 1000], f32[N]) {\n"
             "  for i in 1..4 {\n"
             "    x = (basic(x, 64) as layer1.{i})\n"
             "  }\n"
             "  h, hn, cn = (lstm(e, hidden=512, layers=2, batch_first=true) as lstm)\n"
             "  s = (matmul(q, transpose(k, perm=[0, 1, 3, 2])) * (1.0 / sqrt(D)))\n"
             "  param w: f32[64, 64]\n"
             "  param b: f32[64] = 0\n"
             "  if a {\n"
             "  } else if b {\n"
             "  }\n"
             "  return x, y\n"
             "}\n");
}
END_TEST

START_TEST(test_dump_reparses) {
  Parsed a, b;
  parse(&a, big_example);
  ck_assert_ptr_nonnull(a.prog);
  parse(&b, a.dump);
  ck_assert_ptr_nonnull(b.prog);
  ck_assert_str_eq(a.dump, b.dump);
  done(&a);
  done(&b);
}
END_TEST

START_TEST(test_examples) {
  const char *top = getenv("top_srcdir");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/examples", top ? top : ".");
  DIR *d = opendir(dir);
  if (!d) return; /* examples are written separately; none yet is fine */
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 3, ".dl") != 0) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    Parsed r;
    parse_bytes(&r, buf, len);
    ck_assert_msg(r.prog != NULL, "%s:\n%s", e->d_name, r.errors);
    done(&r);
  }
  closedir(d);
}
END_TEST

/* ---- Newlines, terminators and tokens. ---- */

START_TEST(test_one_line_body) {
  check_dump("block b(c) { if c { s = x }; return s }\n",
             "block b(c) {\n  if c {\n    s = x\n  }\n  return s\n}\n");
}
END_TEST

START_TEST(test_else_on_next_line) {
  check_dump("block b(c) {\n  if c {\n    s = 1\n  }\n\n  # a comment\n  else {\n    s = 2\n  }\n  return s\n}\n",
             "block b(c) {\n  if c {\n    s = 1\n  } else {\n    s = 2\n  }\n  return s\n}\n");
}
END_TEST

START_TEST(test_newlines_in_brackets) {
  check_dump("let v = f(a,\n  b,\n  [1,\n   2,\n  ],\n)\n", "let v = f(a, b, [1, 2])\n");
  check_dump("let v = a +\n  b\n", "let v = (a + b)\n");
}
END_TEST

START_TEST(test_semicolons_and_comments) {
  check_dump("let x = 1;;; let y = 2;  # done\n\n\n", "let x = 1\nlet y = 2\n");
  check_dump("block b(x) { y = x; z = y; return z }", "block b(x) {\n  y = x\n  z = y\n  return z\n}\n");
  check_dump("", "");
  check_dump("# only a comment", "");
}
END_TEST

START_TEST(test_no_final_newline) {
  check_dump("let a = 1", "let a = 1\n");
  check_dump("block b(x) {\n  return x\n}", "block b(x) {\n  return x\n}\n");
}
END_TEST

START_TEST(test_crlf) { check_dump("let a = 1\r\nlet b = 2\r\n", "let a = 1\nlet b = 2\n"); }
END_TEST

START_TEST(test_ranges_and_dotted_numbers) {
  check_dump("block b(x, n) {\n  for i in 1..n { x = f(x) as layer1.0.conv1 }\n  return x\n}\n",
             "block b(x, n) {\n  for i in 1..n {\n    x = (f(x) as layer1.0.conv1)\n  }\n  return x\n}\n");
  /* As in Go, a body's brace must be on the line of its header. */
  check_errors("block b(x) {\n  for i in 0..6\n  {\n  }\n  return x\n}\n",
               "t.dl:2:16: error: unexpected newline, expected '{'\n");
}
END_TEST

START_TEST(test_literals) {
  check_expr("[0, 12, 1.5, 2.0, 1e3, 2.5E-2, true, false]", "[0, 12, 1.5, 2.0, 1e+03, 0.025, true, false]");
  check_expr("\"a \\\"q\\\" \\\\ \\n\"", "\"a \\\"q\\\" \\\\ \\n\"");
  check_expr("9223372036854775807", "9223372036854775807");
  check_expr("[]", "[]");
  check_expr("f()", "f()");
}
END_TEST

START_TEST(test_subscripts) {
  check_expr("x[0]", "x[0]");
  check_expr("x[:, 0:4, ::2, -1:]", "x[:, 0:4, ::2, (-1):]");
  check_expr("x[..., :h // 2][1:n + 1:k]", "x[..., :(h // 2)][1:(n + 1):k]");
  check_errors("let a = x[1:2:3:4]\n", "t.dl:1:16: error: unexpected ':', expected ',' or ']'\n");
}
END_TEST

START_TEST(test_string_value) {
  Parsed r;
  parse(&r, "let s = \"a\\\"b\\\\c\\nd\"\n");
  ck_assert_ptr_nonnull(r.prog);
  const Expr *e = r.prog->items[0]->value;
  ck_assert_int_eq(e->kind, EX_STRING);
  ck_assert_str_eq(e->s, "a\"b\\c\nd");
  done(&r);
}
END_TEST

START_TEST(test_items_and_params) {
  check_dump("model m() -> f32[] {\n  return 1\n}\n", "model m() -> f32[] {\n  return 1\n}\n");
  check_dump("model m(x: f32[N, 4],) -> y: f32[N] {\n  return x\n}\n",
             "model m(x: f32[N, 4]) -> (y: f32[N]) {\n  return x\n}\n");
  check_dump("model m(x: f32[N]) -> (f32[N], i64[N],) { return x, x }",
             "model m(x: f32[N]) -> (f32[N], i64[N]) {\n  return x, x\n}\n");
  check_dump("block b(x, k=3 * 2,) { let y = k\n param w: f32[k] = 0.5\n return x }",
             "block b(x, k=(3 * 2)) {\n  let y = k\n  param w: f32[k] = 0.5\n  return x\n}\n");
}
END_TEST

/* ---- Precedence. ---- */

START_TEST(test_precedence) {
  check_expr("-a ** 2 + b * c", "((-(a ** 2)) + (b * c))");
  check_expr("2 ** -1", "(2 ** (-1))");
  check_expr("a ** b ** c", "(a ** (b ** c))");
  check_expr("a - b - c", "((a - b) - c)");
  check_expr("a // b % c * d / e", "((((a // b) % c) * d) / e)");
  check_expr("a + b * c - d", "((a + (b * c)) - d)");
  check_expr("not a == b and c or d", "(((not (a == b)) and c) or d)");
  check_expr("a or b and not c", "(a or (b and (not c)))");
  check_expr("a + 1 <= b * 2", "((a + 1) <= (b * 2))");
  check_expr("a != b", "(a != b)");
  check_expr("a >= b", "(a >= b)");
  check_expr("a > -b", "(a > (-b))");
  check_expr("- - a", "(-(-a))");
  check_expr("(a + b) * c", "((a + b) * c)");
  check_expr("-f(x) as y + 1", "((-(f(x) as y)) + 1)");
  check_expr("x as a as b", "((x as a) as b)");
  check_expr("a + f(b) as c", "(a + (f(b) as c))");
  check_expr("f(a, k=b + 1, c)", "f(a, k=(b + 1), c)");
}
END_TEST

START_TEST(test_operator_codes) {
  Parsed r;
  parse(&r, "let v = a ** b // c == d\nlet w = not a\n");
  ck_assert_ptr_nonnull(r.prog);
  const Expr *e = r.prog->items[0]->value;
  ck_assert_int_eq(e->kind, EX_BINARY);
  ck_assert_int_eq(e->op, OPX_EQ);
  ck_assert_int_eq(e->lhs->op, OPX_FLOORDIV);
  ck_assert_int_eq(e->lhs->lhs->op, OPX_POW);
  const Expr *n = r.prog->items[1]->value;
  ck_assert_int_eq(n->kind, EX_UNARY);
  ck_assert_int_eq(n->op, '!');
  done(&r);
}
END_TEST

/* ---- Scopes. ---- */

START_TEST(test_scope_parts) {
  Parsed r;
  parse(&r, "let v = x as layers.{i + 1}.conv.0.1\n");
  ck_assert_ptr_nonnull(r.prog);
  const Expr *e = r.prog->items[0]->value;
  ck_assert_int_eq(e->kind, EX_AS);
  ck_assert_int_eq(e->scope.n, 5);
  const ScopePart *p = e->scope.parts;
  ck_assert_str_eq(p[0].text, "layers");
  ck_assert_int_eq(p[0].loc.col, 14);
  ck_assert_ptr_null(p[1].text);
  ck_assert_ptr_nonnull(p[1].expr);
  ck_assert_int_eq(p[1].expr->kind, EX_BINARY);
  ck_assert_int_eq(p[1].loc.col, 21);
  ck_assert_str_eq(p[2].text, "conv");
  ck_assert_int_eq(p[2].loc.col, 29);
  /* "0.1" scanned as a float and split in two. */
  ck_assert_str_eq(p[3].text, "0");
  ck_assert_int_eq(p[3].loc.col, 34);
  ck_assert_str_eq(p[4].text, "1");
  ck_assert_int_eq(p[4].loc.col, 36);
  ck_assert_int_eq(e->loc.col, 14); /* as: the first scope part */
  done(&r);
}
END_TEST

START_TEST(test_scope_forms) {
  check_expr("x as {i}", "(x as {i})");
  check_expr("x as 0", "(x as 0)");
  check_expr("x as 12.34.56", "(x as 12.34.56)");
  check_expr("x as a.007", "(x as a.007)");
  check_expr("x as downsample.{i}.{j * 2}", "(x as downsample.{i}.{(j * 2)})");
  /* Newlines inside an interpolation are ignored. */
  check_expr("x as {\ni\n}", "(x as {i})");
}
END_TEST

START_TEST(test_scope_in_body) {
  check_dump("block b(x) {\n  for i in 0..2 { x = f(x) as {i} }\n  return x as layers.{0}\n}\n",
             "block b(x) {\n  for i in 0..2 {\n    x = (f(x) as {i})\n  }\n  return (x as layers.{0})\n}\n");
}
END_TEST

START_TEST(test_scope_bad_float) {
  check_errors("let v = x as a.1e5\n", "t.dl:1:16: error: '1e5' cannot be part of a scope (use names, integers and {expr})\n");
  check_errors("let v = x as 1.5e2\n", "t.dl:1:14: error: '1.5e2' cannot be part of a scope (use names, integers and {expr})\n");
}
END_TEST

/* ---- Locations. ---- */

START_TEST(test_locations) {
  Parsed r;
  parse(&r,
        "let N = 8\n"
        "block b(x, k=2) {\n"
        "\ty = f(x, kernel=k) + g(x) * 2\n"
        "  return -y\n"
        "}\n");
  ck_assert_ptr_nonnull(r.prog);
  const Item *let = r.prog->items[0], *blk = r.prog->items[1];
  ck_assert_int_eq(let->loc.line, 1);
  ck_assert_int_eq(let->loc.col, 5);
  ck_assert_str_eq(let->loc.file->name, "t.dl");
  ck_assert_int_eq(let->value->loc.col, 9);
  ck_assert_int_eq(blk->loc.line, 2);
  ck_assert_int_eq(blk->loc.col, 7);
  ck_assert_int_eq(blk->n_params, 2);
  ck_assert_int_eq(blk->params[1].loc.col, 12);
  ck_assert_int_eq(blk->params[1].default_val->loc.col, 14);
  const Stmt *s = blk->body.v[0];
  ck_assert_int_eq(s->kind, ST_ASSIGN);
  ck_assert_int_eq(s->loc.line, 3);
  ck_assert_int_eq(s->loc.col, 2); /* a tab is one column */
  ck_assert_int_eq(s->names.locs[0].col, 2);
  const Expr *add = s->value;
  ck_assert_int_eq(add->kind, EX_BINARY);
  ck_assert_int_eq(add->loc.col, 21); /* the operator */
  const Expr *call = add->lhs;
  ck_assert_int_eq(call->kind, EX_CALL);
  ck_assert_int_eq(call->loc.col, 6); /* the callee */
  ck_assert_int_eq(call->items.n, 2);
  ck_assert_int_eq(call->items.v[0]->kind, EX_ARG);
  ck_assert_ptr_null(call->items.v[0]->s);
  ck_assert_int_eq(call->items.v[0]->loc.col, 8); /* positional: the value */
  ck_assert_str_eq(call->items.v[1]->s, "kernel");
  ck_assert_int_eq(call->items.v[1]->loc.col, 11); /* keyword: the keyword */
  ck_assert_int_eq(add->rhs->loc.col, 28);          /* '*' */
  const Stmt *ret = blk->body.v[1];
  ck_assert_int_eq(ret->kind, ST_RETURN);
  ck_assert_int_eq(ret->loc.line, 4);
  ck_assert_int_eq(ret->loc.col, 3);
  ck_assert_int_eq(ret->values.v[0]->kind, EX_UNARY);
  ck_assert_int_eq(ret->values.v[0]->loc.col, 10);
  done(&r);
}
END_TEST

START_TEST(test_stmt_fields) {
  Parsed r;
  parse(&r,
        "model m(x: f32[N, 3]) -> (a: f32[N], f32[N]) {\n"
        "  param w: f32[3] = 1\n"
        "  for i in 0..n { }\n"
        "  if c { } else if d { y = 1 } else { y = 2 }\n"
        "  h, c2 = lstm(x)\n"
        "  return x, y\n"
        "}\n");
  ck_assert_ptr_nonnull(r.prog);
  const Item *m = r.prog->items[0];
  ck_assert_int_eq(m->kind, IT_MODEL);
  ck_assert_str_eq(m->params[0].type->dtype, "f32");
  ck_assert_int_eq(m->params[0].type->dims.n, 2);
  ck_assert_int_eq(m->params[0].type->dtype_loc.col, 12);
  ck_assert_int_eq(m->n_results, 2);
  ck_assert_str_eq(m->results[0].name, "a");
  ck_assert_ptr_null(m->results[1].name);
  ck_assert_int_eq(m->results[1].loc.col, 38);
  const Stmt *const *v = (const Stmt *const *)m->body.v;
  ck_assert_int_eq(m->body.n, 5);
  ck_assert_int_eq(v[0]->kind, ST_PARAM);
  ck_assert_str_eq(v[0]->names.v[0], "w");
  ck_assert_int_eq(v[0]->names.locs[0].col, 9);
  ck_assert_int_eq(v[0]->type->dims.n, 1);
  ck_assert_int_eq(v[0]->value->i, 1);
  ck_assert_int_eq(v[1]->kind, ST_FOR);
  ck_assert_str_eq(v[1]->names.v[0], "i");
  ck_assert_int_eq(v[1]->lo->i, 0);
  ck_assert_str_eq(v[1]->hi->s, "n");
  ck_assert_int_eq(v[2]->kind, ST_IF);
  ck_assert_int_eq(v[2]->orelse.n, 1);
  const Stmt *elif = v[2]->orelse.v[0];
  ck_assert_int_eq(elif->kind, ST_IF);
  ck_assert_str_eq(elif->cond->s, "d");
  ck_assert_int_eq(elif->body.n, 1);
  ck_assert_int_eq(elif->orelse.n, 1);
  ck_assert_int_eq(elif->orelse.v[0]->kind, ST_ASSIGN);
  ck_assert_int_eq(v[3]->names.n, 2);
  ck_assert_str_eq(v[3]->names.v[1], "c2");
  ck_assert_int_eq(v[3]->names.locs[1].col, 6);
  ck_assert_int_eq(v[4]->values.n, 2);
  done(&r);
}
END_TEST

/* ---- Errors. ---- */

START_TEST(test_error_unexpected) {
  check_errors("let x = (1 + )\n", "t.dl:1:14: error: unexpected ')', expected an expression\n");
  check_errors("let = 3\n", "t.dl:1:5: error: unexpected '=', expected identifier\n");
  check_errors("x = 1\n", "t.dl:1:1: error: unexpected identifier 'x', expected 'let', 'block' or 'model'\n");
  check_errors("let x = 1 2\n", "t.dl:1:11: error: unexpected number 2, expected newline\n");
  check_errors("block b(x) {\n  return\n}\n", "t.dl:2:9: error: unexpected newline, expected an expression\n");
  check_errors("block b(x) {\n  if x { y = 1 } z = 2\n}\n",
               "t.dl:2:18: error: unexpected identifier 'z', expected keyword 'else' or newline\n");
  check_errors("block b() { for i in 1 { } }\n",
               "t.dl:1:22: error: a loop runs over a range lo..hi (for i in 0..n runs i from 0 up to n - 1)\n");
  check_errors("block b() { for i in 1 + { } }\n", "t.dl:1:26: error: unexpected '{', expected an expression\n");
  check_errors("let x = a < b < c\n",
               "t.dl:1:15: error: unexpected '<': comparisons do not chain (write a < b and b < c)\n");
  check_errors("let x = 1 as as\n", "t.dl:1:14: error: unexpected keyword 'as', expected identifier, number, float or '{'\n");
  check_errors("block b(x) { y = x; ; }\nlet q = ;\n", "t.dl:2:9: error: unexpected ';', expected an expression\n");
}
END_TEST

START_TEST(test_error_missing_paren) {
  check_errors("block b(x) {\n  y = f(x\n}\n", "t.dl:3:1: error: unexpected '}', expected ')' or ','\n");
  check_errors("block b(x) {\n  y = f(x\n  z = 2\n}\n",
               "t.dl:3:3: error: unexpected identifier 'z', expected ')' or ','\n");
  check_errors("let x = f(1", "t.dl:1:12: error: unexpected end of file, expected ')' or ','\n");
  check_errors("let x = [a b]\n", "t.dl:1:12: error: unexpected identifier 'b', expected ',' or ']'\n");
  check_errors("model m(x: f32[N]) -> f32[N] {\n  y = x\n",
               "t.dl:2:8: error: unexpected end of file, expected a statement or '}'\n");
}
END_TEST

START_TEST(test_error_unterminated_string) {
  check_errors("let s = \"abc\nlet y = 2\n",
               "t.dl:1:9: error: unterminated string (a string ends with '\"' on the same line)\n");
  check_errors("let s = \"abc\\", "t.dl:1:9: error: unterminated string (a string ends with '\"' on the same line)\n");
  check_errors("let s = \"a\\qb\"\n", "t.dl:1:11: error: unknown escape '\\q' in string (only \\\", \\\\ and \\n)\n");
}
END_TEST

START_TEST(test_error_bad_character) {
  check_errors("let a = 1 $ 2\n",
               "t.dl:1:11: error: unexpected character '$'\n"
               "t.dl:1:13: error: unexpected number 2, expected newline\n");
  check_errors("let a = 1\nlet b = 2 \x01\n", "t.dl:2:11: error: unexpected character '\\x01'\n");
  check_errors("let a = b\xc3\xa9\n", "t.dl:1:10: error: unexpected character '\\xC3\\xA9'\n");
}
END_TEST

START_TEST(test_error_nul_byte) {
  Parsed r;
  parse_bytes(&r, "let a = 1\nlet b\0 = 2\n", 21);
  ck_assert_ptr_null(r.prog);
  ck_assert_str_eq(r.errors, "t.dl:2:6: error: not a text file (NUL byte)\n");
  ck_assert_int_eq(r.c.diag.errors, 1);
  done(&r);
  /* A data file given as the model is named for what it is, without its
   * bytes echoed as a source line. */
  parse_bytes(&r, "\x93NUMPY\x01\x00v\x00{'descr': '<f4'", 26);
  ck_assert_str_eq(r.errors, "dlcc: error: t.dl is a NumPy array (.npy), not a model: give it to "
                             "'dlcc run' as --input NAME=FILE\n");
  done(&r);
  parse_bytes(&r, "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{}}    ", 24);
  ck_assert_str_eq(r.errors, "dlcc: error: t.dl is a safetensors file, not a model: give it as "
                             "--weights FILE\n");
  done(&r);
  parse_bytes(&r, "PK\x03\x04\x00\x00", 6);
  ck_assert_ptr_nonnull(strstr(r.errors, "t.dl is a PyTorch checkpoint (zip or pickle), not a model"));
  done(&r);
}
END_TEST

START_TEST(test_error_integer_too_large) {
  check_errors("let a = 9223372036854775808\n",
               "t.dl:1:9: error: integer 9223372036854775808 is too large (the largest is 9223372036854775807)\n");
  check_errors("let a = 1e999\n", "t.dl:1:9: error: number 1e999 is too large\n");
}
END_TEST

START_TEST(test_error_nesting_too_deep) {
  size_t n = 20000;
  char *s = malloc(2 * n + 32);
  strcpy(s, "let x = ");
  memset(s + 8, '(', n);
  strcpy(s + 8 + n, "1\n");
  check_errors(s, "t.dl:1:209: error: nesting too deep (more than 200 brackets)\n");
  /* Nesting with no brackets overflows bison's own stack. */
  memset(s + 8, '-', n);
  check_errors(s, "t.dl:1:2003: error: nesting too deep (the parser's stack is full)\n");
  free(s);
  /* Deep but within the limits. */
  char ok[1024] = "let x = ";
  memset(ok + 8, '[', 150);
  memset(ok + 158, ']', 150);
  strcpy(ok + 308, "\n");
  Parsed r;
  parse(&r, ok);
  ck_assert_ptr_nonnull(r.prog);
  done(&r);
}
END_TEST

START_TEST(test_two_errors) {
  check_errors("block b(x) {\n  y = = 2\n  z = )\n  return z\n}\n",
               "t.dl:2:7: error: unexpected '=', expected an expression\n"
               "t.dl:3:7: error: unexpected ')', expected an expression\n");
  check_errors("let a = (1\nblock b(x y) {\n  let k = 1\n  a = k\n}\nlet z = = 1\n",
               "t.dl:2:1: error: unexpected keyword 'block', expected ')'\n"
               "t.dl:2:11: error: unexpected identifier 'y', expected ')' or ','\n"
               "t.dl:6:9: error: unexpected '=', expected an expression\n");
  check_errors("block b(x y) {\n  return x\n}\nmodel m(x: f32[N]) -> f32[N] {\n  return x +\n}\n",
               "t.dl:1:11: error: unexpected identifier 'y', expected ')' or ','\n"
               "t.dl:6:1: error: unexpected '}', expected an expression\n");
  /* Misspelt keywords are named. */
  check_errors("modle m(x: f32[2]) -> f32[2] {\n  return x\n}\n",
               "t.dl:1:1: error: unexpected identifier 'modle', expected 'let', 'block' or 'model' "
               "(did you mean the keyword 'model'?)\n");
  check_errors("block b(x) {\n  retrun relu(x)\n}\n",
               "t.dl:2:10: error: unexpected identifier 'relu', expected '=' or ',' (did you mean the "
               "keyword 'return'?)\n");
  /* A '{' thrown away by the recovery takes its '}' with it: no bogus
   * "expected 'let', 'block' or 'model'" for the lines after it. */
  check_errors("model m(x: f32[2]) -> f32[2] {\n  if true { x = relu(x) } els { x = x }\n  y = (x\n"
               "  return y\n}\nblock b(x) { for i in 0..2 { x = f(x)) }\n return x }\n"
               "model q(x: f32[2]) -> f32[2] {\n  for i in 0..2 { x = relu(x) as a {i} }\n  return x\n}\n",
               "t.dl:2:27: error: unexpected identifier 'els', expected keyword 'else' or newline\n"
               "t.dl:4:3: error: unexpected keyword 'return', expected ')'\n"
               "t.dl:6:38: error: unexpected ')', expected newline\n"
               "t.dl:9:36: error: no space may come before '{' in a scope: write name{expr} (one "
               "part, as in denselayer{i}) or name.{expr} (two parts)\n");
}
END_TEST

START_TEST(test_recovers_in_nested_body) {
  check_errors("block b(x) {\n  if x {\n    y = (1 +\n  }\n  z = ]\n  return x\n}\n",
               "t.dl:4:3: error: unexpected '}', expected an expression\n"
               "t.dl:5:7: error: unexpected ']', expected an expression\n");
}
END_TEST

START_TEST(test_error_limit) {
  char src[4096] = "block b(x) {\n";
  for (int i = 0; i < 30; i++) strcat(src, "  y = )\n");
  strcat(src, "}\n");
  Parsed r;
  parse(&r, src);
  ck_assert_ptr_null(r.prog);
  ck_assert_int_eq(r.rc, 0);
  ck_assert_int_ge(r.c.diag.errors, 20);
  ck_assert_ptr_nonnull(strstr(r.errors, "t.dl:21:7: error: unexpected ')'"));
  ck_assert_ptr_null(strstr(r.errors, "t.dl:22:7"));
  done(&r);
}
END_TEST

START_TEST(test_error_shows_source_line) {
  Parsed r;
  parse(&r, "let x = (1 + )\n");
  ck_assert_str_eq(diag_text(&r.c), "t.dl:1:14: error: unexpected ')', expected an expression\n"
                                    "    let x = (1 + )\n"
                                    "                 ^\n");
  done(&r);
}
END_TEST

/* ---- Robustness. ---- */

static unsigned long long rng_state;
static unsigned rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)(rng_state >> 33);
}

START_TEST(test_random_mutations) {
  static const char alphabet[] = "(){}[],.;:=+-*/<>\"#\n\t \\{}asif01_x";
  size_t base = strlen(big_example);
  char *buf = malloc(base + 64);
  rng_state = 12345;
  int rejected = 0;
  for (int iter = 0; iter < 4000; iter++) {
    memcpy(buf, big_example, base);
    size_t len = base;
    int edits = 1 + (int)(rnd() % 4);
    for (int k = 0; k < edits; k++) {
      size_t at = len ? rnd() % len : 0;
      switch (rnd() % 4) {
      case 0: buf[at] = (char)(rnd() % 256); break;
      case 1: buf[at] = alphabet[rnd() % (sizeof alphabet - 1)]; break;
      case 2:
        if (len > 1) {
          memmove(buf + at, buf + at + 1, len - at - 1);
          len--;
        }
        break;
      default:
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = alphabet[rnd() % (sizeof alphabet - 1)];
        len++;
        break;
      }
    }
    if (rnd() % 8 == 0) len = rnd() % (len + 1);
    Parsed r;
    parse_bytes(&r, buf, len);
    ck_assert_msg(r.rc != -1, "internal error on mutation %d:\n%s", iter, diag_text(&r.c));
    /* Rejected exactly when something was reported. */
    ck_assert_int_eq(r.prog == NULL, r.c.diag.errors > 0);
    rejected += r.prog == NULL;
    done(&r);
  }
  free(buf);
  ck_assert_int_gt(rejected, 1000);
}
END_TEST

START_TEST(test_allocation_failure) {
  /* Every allocation in turn fails: the parse must unwind cleanly. */
  bool succeeded = false;
  for (long k = 1; k < 5000 && !succeeded; k++) {
    Ctx c;
    ctx_init(&c);
    c.arena.fail_after = k;
    Run r = {"t.dl", big_example, strlen(big_example), NULL};
    int rc = ctx_guard(&c, run_parse, &r);
    ck_assert(rc == -1 || rc == 1);
    if (rc == -1) ck_assert_ptr_nonnull(strstr(diag_text(&c), "out of memory"));
    succeeded = rc == 1;
    ctx_free(&c);
  }
  ck_assert(succeeded);
}
END_TEST

static Suite *parse_suite(void) {
  Suite *s = suite_create("parse");
  TCase *t = tcase_create("ast");
  tcase_add_test(t, test_big_example);
  tcase_add_test(t, test_dump_reparses);
  tcase_add_test(t, test_examples);
  tcase_add_test(t, test_one_line_body);
  tcase_add_test(t, test_else_on_next_line);
  tcase_add_test(t, test_newlines_in_brackets);
  tcase_add_test(t, test_semicolons_and_comments);
  tcase_add_test(t, test_no_final_newline);
  tcase_add_test(t, test_crlf);
  tcase_add_test(t, test_ranges_and_dotted_numbers);
  tcase_add_test(t, test_subscripts);
  tcase_add_test(t, test_literals);
  tcase_add_test(t, test_string_value);
  tcase_add_test(t, test_items_and_params);
  tcase_add_test(t, test_precedence);
  tcase_add_test(t, test_operator_codes);
  tcase_add_test(t, test_scope_parts);
  tcase_add_test(t, test_scope_forms);
  tcase_add_test(t, test_scope_in_body);
  tcase_add_test(t, test_scope_bad_float);
  tcase_add_test(t, test_locations);
  tcase_add_test(t, test_stmt_fields);
  suite_add_tcase(s, t);
  TCase *e = tcase_create("errors");
  tcase_add_test(e, test_error_unexpected);
  tcase_add_test(e, test_error_missing_paren);
  tcase_add_test(e, test_error_unterminated_string);
  tcase_add_test(e, test_error_bad_character);
  tcase_add_test(e, test_error_nul_byte);
  tcase_add_test(e, test_error_integer_too_large);
  tcase_add_test(e, test_error_nesting_too_deep);
  tcase_add_test(e, test_two_errors);
  tcase_add_test(e, test_recovers_in_nested_body);
  tcase_add_test(e, test_error_limit);
  tcase_add_test(e, test_error_shows_source_line);
  suite_add_tcase(s, e);
  TCase *f = tcase_create("robust");
  tcase_set_timeout(f, 60);
  tcase_add_test(f, test_random_mutations);
  tcase_add_test(f, test_allocation_failure);
  suite_add_tcase(s, f);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(parse_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
