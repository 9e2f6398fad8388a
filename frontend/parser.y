/* The grammar of .dl files (docs/grammar.md): takes tokens from lexer.l
 * through a filter that turns newlines into statement terminators the way
 * Go does, builds the AST of ast.h into ps->prog, and reports syntax errors
 * as "file:line:col: error: unexpected X, expected Y", recovering at the
 * next statement or item so that one run finds several. */

%code requires {
#include "frontend/parse_internal.h"
}

%code provides {
int fe_lex_raw(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, void *scanner);
}

%code {
#include <inttypes.h>
#include <string.h>

#include "frontend/pytorch.h"

/* Locations are SrcLoc: a rule's location is that of its first symbol. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)        \
  do {                                     \
    if (N)                                 \
      (Cur) = YYRHSLOC(Rhs, 1);            \
    else                                   \
      (Cur) = YYRHSLOC(Rhs, 0);            \
  } while (0)

/* A fixed stack on the C stack: it never reallocates, so unwinding out of
 * the parser (allocation failure) leaks nothing, and overflowing it is
 * reported as "nesting too deep" (see yyerror). */
#define YYINITDEPTH 2000
#define YYMAXDEPTH 2000

static int yylex(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, Parser *ps);
static void yyerror(FE_YYLTYPE *loc, Parser *ps, const char *msg);

static Expr *lit(Parser *ps, ExprKind k, SrcLoc loc, Tok t);
static Scope *scope_add(Parser *ps, Scope *s, int kind, Tok t, Expr *e, SrcLoc loc);
static TypeExpr *new_type(Parser *ps, Tok name, SrcLoc loc, ExprList *dims);
static Item *new_item(Parser *ps, ItemKind k, Tok name, SrcLoc loc);
static ExprList *expr_list(Parser *ps, ExprList *l, Expr *e);
static void discard_brace(Parser *ps);
static void for_without_range(Parser *ps, const Expr *e);
static Stmt *param_stmt(Parser *ps, SrcLoc loc, Scope *name, TypeExpr *type, Expr *value);
#define C (ps->c)
}

%define api.prefix {fe_yy}
%define api.pure full
%define api.location.type {SrcLoc}
%define parse.error custom
%define parse.lac full
/* As deep as the main stack: LAC's stack then never moves to malloc'd
 * memory, which an allocation failure unwinding out of an action would
 * leak. */
%define parse.lac.es-capacity-initial {2000}
%locations
%parse-param {Parser *ps}
%lex-param {Parser *ps}
%expect 0

%union {
  Tok tok;
  Expr *expr;
  ExprList *exprs;
  Stmt *stmt;
  StmtList *stmts;
  NameList *names;
  Scope *scope;
  TypeExpr *type;
  Item *item;
  Param *param;
  ParamList *params;
  Result *result;
  ResultList *results;
}

%token <tok> TK_IDENT "identifier" TK_INT "number" TK_FLOAT "float" TK_STRING "string"
%token TK_LET "keyword 'let'" TK_BLOCK "keyword 'block'" TK_MODEL "keyword 'model'"
%token TK_RETURN "keyword 'return'" TK_IF "keyword 'if'" TK_ELSE "keyword 'else'"
%token TK_FOR "keyword 'for'" TK_IN "keyword 'in'" TK_PARAM "keyword 'param'"
%token TK_AS "keyword 'as'" TK_TRUE "keyword 'true'" TK_FALSE "keyword 'false'"
%token TK_AND "keyword 'and'" TK_OR "keyword 'or'" TK_NOT "keyword 'not'"
%token TK_POW "'**'" TK_FLOORDIV "'//'" TK_EQ "'=='" TK_NE "'!='" TK_LE "'<='" TK_GE "'>='"
%token TK_DOTDOT "'..'" TK_ELLIPSIS "'...'" TK_ARROW "'->'"
/* A '{' after a scope part, glued to it: denselayer{i}.  i is 1 when a space
 * came between them (an error, reported with a hint, not a stray body). */
%token <tok> TK_GLUE "'{'"
%token TERM "newline"
%token TK_NEWLINE "raw newline" /* only between scanner and filter */

%left TK_OR
%left TK_AND
%precedence TK_NOT
%nonassoc TK_EQ TK_NE '<' TK_LE '>' TK_GE
%left '+' '-'
%left '*' '/' TK_FLOORDIV '%' '@'
%precedence UMINUS
%right TK_POW
%left TK_AS

%type <expr> expr primary arg subscript opt_expr
%type <exprs> exprs call_args args list_items dims subscripts
%type <stmt> stmt if_stmt
%type <stmts> stmts body else_part
%type <names> names
%type <scope> scope
%type <type> type
%type <item> item
%type <param> bparam mparam
%type <params> bparams bparam_list mparams mparam_list
%type <result> result
%type <results> results result_list

/* Error recovery that throws away a '{' must also throw away its '}', or
 * that '}' closes the enclosing body and every later line is misread. */
%token <tok> '{'
%destructor { discard_brace(ps); } '{' TK_GLUE
%%

program:
    %empty
  | program item        { if ($2) fe_ast_push_item(C, ps->prog, $2); }
  | program TERM
  | program error
  ;

item:
    TK_LET TK_IDENT '=' expr {
      $$ = new_item(ps, IT_LET, $2, @2);
      $$->value = $4;
    }
  | TK_BLOCK TK_IDENT '(' bparams ')' body {
      $$ = new_item(ps, IT_BLOCK, $2, @2);
      $$->n_params = $4->n;
      $$->cap_params = $4->cap;
      $$->params = $4->v;
      $$->body = *$6;
    }
  | TK_MODEL TK_IDENT '(' mparams ')' TK_ARROW results body {
      $$ = new_item(ps, IT_MODEL, $2, @2);
      $$->n_params = $4->n;
      $$->cap_params = $4->cap;
      $$->params = $4->v;
      $$->n_results = $7->n;
      $$->cap_results = $7->cap;
      $$->results = $7->v;
      $$->body = *$8;
    }
    /* A broken header: skip to its body and parse that. */
  | TK_BLOCK error body  { $$ = NULL; }
  | TK_MODEL error body  { $$ = NULL; }
  ;

bparams:
    %empty              { $$ = ARENA_NEW(&C->arena, ParamList); }
  | bparam_list
  | bparam_list ','
  ;
bparam_list:
    bparam                  { $$ = ARENA_NEW(&C->arena, ParamList); fe_ast_push_param(C, $$, *$1); }
  | bparam_list ',' bparam  { $$ = $1; fe_ast_push_param(C, $$, *$3); }
  ;
bparam:
    TK_IDENT {
      $$ = ARENA_NEW(&C->arena, Param);
      $$->name = $1.text;
      $$->loc = @1;
    }
  | TK_IDENT '=' expr {
      $$ = ARENA_NEW(&C->arena, Param);
      $$->name = $1.text;
      $$->loc = @1;
      $$->default_val = $3;
    }
  ;

mparams:
    %empty              { $$ = ARENA_NEW(&C->arena, ParamList); }
  | mparam_list
  | mparam_list ','
  ;
mparam_list:
    mparam                  { $$ = ARENA_NEW(&C->arena, ParamList); fe_ast_push_param(C, $$, *$1); }
  | mparam_list ',' mparam  { $$ = $1; fe_ast_push_param(C, $$, *$3); }
  ;
mparam:
    TK_IDENT ':' type {
      $$ = ARENA_NEW(&C->arena, Param);
      $$->name = $1.text;
      $$->loc = @1;
      $$->type = $3;
    }
  ;

results:
    result                  { $$ = ARENA_NEW(&C->arena, ResultList); fe_ast_push_result(C, $$, *$1); }
  | '(' result_list ')'     { $$ = $2; }
  | '(' result_list ',' ')' { $$ = $2; }
  ;
result_list:
    result                  { $$ = ARENA_NEW(&C->arena, ResultList); fe_ast_push_result(C, $$, *$1); }
  | result_list ',' result  { $$ = $1; fe_ast_push_result(C, $$, *$3); }
  ;
result:
    type {
      $$ = ARENA_NEW(&C->arena, Result);
      $$->loc = @1;
      $$->type = $1;
    }
  | TK_IDENT ':' type {
      $$ = ARENA_NEW(&C->arena, Result);
      $$->name = $1.text;
      $$->loc = @1;
      $$->type = $3;
    }
  ;

type:
    TK_IDENT '[' ']'          { $$ = new_type(ps, $1, @1, NULL); }
  | TK_IDENT '[' dims ']'     { $$ = new_type(ps, $1, @1, $3); }
  | TK_IDENT '[' dims ',' ']' { $$ = new_type(ps, $1, @1, $3); }
  ;
dims:
    expr                    { $$ = expr_list(ps, NULL, $1); }
  | dims ',' expr           { $$ = expr_list(ps, $1, $3); }
  ;

body:
    '{' stmts '}'           { (void)$1; $$ = $2; }
    /* Resynchronise at the end of the body when its last statement broke. */
  | '{' stmts error '}'     { (void)$1; $$ = $2; }
  ;

stmts:
    %empty                  { $$ = ARENA_NEW(&C->arena, StmtList); }
  | stmts TERM
  | stmts stmt TERM         { $$ = $1; fe_ast_push_stmt(C, $$, $2); }
    /* Resynchronise at the next terminator. */
  | stmts error TERM
  ;

stmt:
    names '=' expr {
      $$ = fe_ast_stmt(C, ST_ASSIGN, @1);
      $$->names = *$1;
      $$->value = $3;
    }
  | TK_RETURN exprs {
      $$ = fe_ast_stmt(C, ST_RETURN, @1);
      $$->values = *$2;
    }
  | if_stmt
  | TK_FOR TK_IDENT TK_IN expr TK_DOTDOT expr body {
      $$ = fe_ast_stmt(C, ST_FOR, @1);
      fe_ast_push_name(C, &$$->names, $2.text, @2);
      $$->lo = $4;
      $$->hi = $6;
      $$->body = *$7;
    }
    /* Python's for i in range(n): report, with the range to write. */
  | TK_FOR TK_IDENT TK_IN expr body {
      $$ = fe_ast_stmt(C, ST_FOR, @1);
      fe_ast_push_name(C, &$$->names, $2.text, @2);
      $$->lo = $$->hi = $4;
      $$->body = *$5;
      for_without_range(ps, $4);
    }
  | TK_PARAM scope ':' type {
      $$ = param_stmt(ps, @1, $2, $4, NULL);
    }
  | TK_PARAM scope ':' type '=' expr {
      $$ = param_stmt(ps, @1, $2, $4, $6);
    }
  | TK_LET TK_IDENT '=' expr {
      $$ = fe_ast_stmt(C, ST_LET, @1);
      fe_ast_push_name(C, &$$->names, $2.text, @2);
      $$->value = $4;
    }
  ;

if_stmt:
    TK_IF expr body else_part {
      $$ = fe_ast_stmt(C, ST_IF, @1);
      $$->cond = $2;
      $$->body = *$3;
      $$->orelse = *$4;
    }
  ;
else_part:
    %empty                  { $$ = ARENA_NEW(&C->arena, StmtList); }
  | TK_ELSE body            { $$ = $2; }
  | TK_ELSE if_stmt         { $$ = ARENA_NEW(&C->arena, StmtList); fe_ast_push_stmt(C, $$, $2); }
  ;

names:
    TK_IDENT                { $$ = ARENA_NEW(&C->arena, NameList); fe_ast_push_name(C, $$, $1.text, @1); }
  | names ',' TK_IDENT      { $$ = $1; fe_ast_push_name(C, $$, $3.text, @3); }
  ;

exprs:
    expr                    { $$ = expr_list(ps, NULL, $1); }
  | exprs ',' expr          { $$ = expr_list(ps, $1, $3); }
  ;

expr:
    primary
  | expr TK_OR expr         { $$ = fe_ast_binary(C, OPX_OR, @2, $1, $3); }
  | expr TK_AND expr        { $$ = fe_ast_binary(C, OPX_AND, @2, $1, $3); }
  | TK_NOT expr             { $$ = fe_ast_unary(C, '!', @1, $2); }
  | expr TK_EQ expr         { $$ = fe_ast_binary(C, OPX_EQ, @2, $1, $3); }
  | expr TK_NE expr         { $$ = fe_ast_binary(C, OPX_NE, @2, $1, $3); }
  | expr '<' expr           { $$ = fe_ast_binary(C, '<', @2, $1, $3); }
  | expr TK_LE expr         { $$ = fe_ast_binary(C, OPX_LE, @2, $1, $3); }
  | expr '>' expr           { $$ = fe_ast_binary(C, '>', @2, $1, $3); }
  | expr TK_GE expr         { $$ = fe_ast_binary(C, OPX_GE, @2, $1, $3); }
  | expr '+' expr           { $$ = fe_ast_binary(C, '+', @2, $1, $3); }
  | expr '-' expr           { $$ = fe_ast_binary(C, '-', @2, $1, $3); }
  | expr '*' expr           { $$ = fe_ast_binary(C, '*', @2, $1, $3); }
  | expr '/' expr           { $$ = fe_ast_binary(C, '/', @2, $1, $3); }
  | expr TK_FLOORDIV expr   { $$ = fe_ast_binary(C, OPX_FLOORDIV, @2, $1, $3); }
  | expr '%' expr           { $$ = fe_ast_binary(C, '%', @2, $1, $3); }
  | expr '@' expr           { $$ = fe_ast_binary(C, '@', @2, $1, $3); }
  | '-' expr %prec UMINUS   { $$ = fe_ast_unary(C, '-', @1, $2); }
  | expr TK_POW expr        { $$ = fe_ast_binary(C, OPX_POW, @2, $1, $3); }
  | expr TK_AS scope {
      $$ = fe_ast_expr(C, EX_AS, $3->parts[0].loc);
      $$->lhs = $1;
      $$->scope = *$3;
      fe_ast_nest(C, $$);
    }
  ;

primary:
    TK_INT                  { $$ = lit(ps, EX_INT, @1, $1); }
  | TK_FLOAT                { $$ = lit(ps, EX_FLOAT, @1, $1); }
  | TK_STRING               { $$ = lit(ps, EX_STRING, @1, $1); }
  | TK_TRUE                 { $$ = fe_ast_expr(C, EX_BOOL, @1); $$->b = true; }
  | TK_FALSE                { $$ = fe_ast_expr(C, EX_BOOL, @1); $$->b = false; }
  | TK_IDENT                { $$ = lit(ps, EX_NAME, @1, $1); }
  | TK_IDENT '(' call_args ')' {
      $$ = lit(ps, EX_CALL, @1, $1);
      $$->items = *$3;
      fe_ast_nest(C, $$);
    }
  | '[' list_items ']'      { $$ = fe_ast_expr(C, EX_LIST, @1); $$->items = *$2; fe_ast_nest(C, $$); }
  | '(' expr ')'            { $$ = $2; }
  | primary '[' subscripts ']' {
      $$ = fe_ast_expr(C, EX_INDEX, @2);
      $$->lhs = $1;
      $$->items = *$3;
      fe_ast_nest(C, $$);
    }
  ;

/* Python's subscripts: x[i], x[a:b], x[::2], x[..., :h], x[:, 0]. */
subscripts:
    subscript               { $$ = expr_list(ps, NULL, $1); }
  | subscripts ',' subscript { $$ = expr_list(ps, $1, $3); }
  ;
subscript:
    expr
  | TK_ELLIPSIS             { $$ = fe_ast_expr(C, EX_ELLIPSIS, @1); }
  | opt_expr ':' opt_expr   { $$ = fe_ast_slice(C, $1 ? $1->loc : @2, $1, $3, NULL); }
  | opt_expr ':' opt_expr ':' opt_expr { $$ = fe_ast_slice(C, $1 ? $1->loc : @2, $1, $3, $5); }
  ;
opt_expr:
    %empty                  { $$ = NULL; }
  | expr
  ;

call_args:
    %empty                  { $$ = ARENA_NEW(&C->arena, ExprList); }
  | args
  | args ','
  ;
args:
    arg                     { $$ = expr_list(ps, NULL, $1); }
  | args ',' arg            { $$ = expr_list(ps, $1, $3); }
  ;
arg:
    expr                    { $$ = fe_ast_expr(C, EX_ARG, $1->loc); $$->lhs = $1; fe_ast_nest(C, $$); }
  | TK_IDENT '=' expr       { $$ = fe_ast_expr(C, EX_ARG, @1); $$->s = $1.text; $$->lhs = $3; fe_ast_nest(C, $$); }
  ;

list_items:
    %empty                  { $$ = ARENA_NEW(&C->arena, ExprList); }
  | exprs
  | exprs ','
  ;

scope:
    TK_IDENT                { $$ = scope_add(ps, NULL, TK_IDENT, $1, NULL, @1); }
  | TK_INT                  { $$ = scope_add(ps, NULL, TK_INT, $1, NULL, @1); }
  | TK_FLOAT                { $$ = scope_add(ps, NULL, TK_FLOAT, $1, NULL, @1); }
  | '{' expr '}'            { (void)$1; $$ = scope_add(ps, NULL, '{', (Tok){0}, $2, @1); }
  | scope '.' TK_IDENT      { $$ = scope_add(ps, $1, TK_IDENT, $3, NULL, @3); }
  | scope '.' TK_INT        { $$ = scope_add(ps, $1, TK_INT, $3, NULL, @3); }
  | scope '.' TK_FLOAT      { $$ = scope_add(ps, $1, TK_FLOAT, $3, NULL, @3); }
  | scope '.' '{' expr '}'  { (void)$3; $$ = scope_add(ps, $1, '{', (Tok){0}, $4, @3); }
  | scope TK_GLUE expr '}'  {
      if ($2.i)
        diag_error(C, @2, "no space may come before '{' in a scope: write name{expr} (one part, "
                          "as in denselayer{i}) or name.{expr} (two parts)");
      $$ = scope_add(ps, $1, TK_GLUE, (Tok){0}, $3, @2);
    }
  ;

%%

#undef C

static Expr *lit(Parser *ps, ExprKind k, SrcLoc loc, Tok t) {
  Expr *e = fe_ast_expr(ps->c, k, loc);
  e->i = t.i;
  e->f = t.f;
  e->s = t.text;
  return e;
}

static ExprList *expr_list(Parser *ps, ExprList *l, Expr *e) {
  if (!l) l = ARENA_NEW(&ps->c->arena, ExprList);
  fe_ast_push_expr(ps->c, l, e);
  return l;
}

static TypeExpr *new_type(Parser *ps, Tok name, SrcLoc loc, ExprList *dims) {
  TypeExpr *t = ARENA_NEW(&ps->c->arena, TypeExpr);
  t->dtype = name.text;
  t->loc = t->dtype_loc = loc;
  if (dims) t->dims = *dims;
  return t;
}

static Item *new_item(Parser *ps, ItemKind k, Tok name, SrcLoc loc) {
  Item *it = ARENA_NEW(&ps->c->arena, Item);
  it->kind = k;
  it->name = name.text;
  it->loc = loc;
  return it;
}

/* A float token in a scope is two integer parts the scanner could not
 * tell apart from a number: "conv.0.1" scans as conv . 0.1. */
static Scope *scope_add(Parser *ps, Scope *s, int kind, Tok t, Expr *e, SrcLoc loc) {
  if (!s) s = ARENA_NEW(&ps->c->arena, Scope);
  if (kind == '{' || kind == TK_GLUE) {
    fe_ast_push_part(ps->c, s, NULL, e, loc);
    s->parts[s->n - 1].glue = kind == TK_GLUE;
  } else if (kind == TK_FLOAT) {
    size_t a = strspn(t.text, "0123456789");
    size_t b = t.text[a] == '.' ? strspn(t.text + a + 1, "0123456789") : 0;
    if (a > 0 && b > 0 && t.text[a + 1 + b] == 0) {
      fe_ast_push_part(ps->c, s, arena_strndup(&ps->c->arena, t.text, a), NULL, loc);
      SrcLoc second = {loc.file, loc.line, loc.col + (int)a + 1};
      fe_ast_push_part(ps->c, s, arena_strdup(&ps->c->arena, t.text + a + 1), NULL, second);
    } else {
      diag_error(ps->c, loc, "'%s' cannot be part of a scope (use names, integers and {expr})", t.text);
      fe_ast_push_part(ps->c, s, t.text, NULL, loc);
    }
  } else {
    fe_ast_push_part(ps->c, s, t.text, NULL, loc);
  }
  return s;
}

/* param NAME: type [= value]: NAME is scoped as `as` is (w{i},
 * layers.{i}.weight) and binds its last name part (w, weight). */
static Stmt *param_stmt(Parser *ps, SrcLoc loc, Scope *name, TypeExpr *type, Expr *value) {
  Stmt *s = fe_ast_stmt(ps->c, ST_PARAM, loc);
  s->scope = *name;
  s->type = type;
  s->value = value;
  const ScopePart *bind = NULL;
  for (int i = 0; i < name->n; i++)
    if (name->parts[i].text && !name->parts[i].glue && (name->parts[i].text[0] < '0' || name->parts[i].text[0] > '9'))
      bind = &name->parts[i];
  if (bind)
    fe_ast_push_name(ps->c, &s->names, bind->text, bind->loc);
  else
    diag_error(ps->c, name->parts[0].loc, "a param's name needs a part that is a name, which it binds (w{i} binds w, "
                                          "layers.{i}.weight binds weight)");
  return s;
}

/* for i in x { ... }: a loop runs over lo..hi.  Python's range(n),
 * range(a, b) get the exact range to write. */
static void for_without_range(Parser *ps, const Expr *e) {
  const char *how = "for i in 0..n runs i from 0 up to n - 1";
  if (e->kind == EX_CALL && strcmp(e->s, "range") == 0 && e->items.n >= 1 && e->items.n <= 2) {
    const Expr *a = e->items.v[0]->lhs, *b = e->items.n == 2 ? e->items.v[1]->lhs : NULL;
    if (a->kind == EX_INT && (!b || b->kind == EX_INT))
      how = arena_printf(&ps->c->arena, "write %" PRId64 "..%" PRId64 " for range(%s%" PRId64 "): a..b runs up to b - 1",
                         b ? a->i : 0, b ? b->i : a->i, b ? arena_printf(&ps->c->arena, "%" PRId64 ", ", a->i) : "",
                         b ? b->i : a->i);
    else if (b || a->kind == EX_NAME)
      how = b ? "write a..b for range(a, b): a..b runs up to b - 1" : "write 0..n for range(n): a..b runs up to b - 1";
  }
  diag_error(ps->c, e->loc, "a loop runs over a range lo..hi (%s)", how);
}

/* ---- The token filter between scanner and grammar. ---- */

static bool can_end(int t) {
  switch (t) {
  case TK_IDENT: case TK_INT: case TK_FLOAT: case TK_STRING: case TK_TRUE: case TK_FALSE:
  case ')': case ']': case '}': case TK_RETURN:
    return true;
  default:
    return false;
  }
}

static int next_raw(Parser *ps, FE_YYSTYPE *lval, FE_YYLTYPE *lloc) {
  if (ps->has_pending) {
    ps->has_pending = false;
    lval->tok = ps->pending_val;
    *lloc = ps->pending_loc;
    return ps->pending_kind;
  }
  if (ps->at_eof) {
    *lloc = ps->pending_loc;
    return 0;
  }
  lval->tok = (Tok){0};
  int t = fe_lex_raw(lval, lloc, ps->scanner);
  if (t == 0) {
    ps->at_eof = true;
    ps->pending_loc = *lloc;
  }
  return t;
}

static void unread(Parser *ps, int t, const FE_YYSTYPE *lval, const FE_YYLTYPE *lloc) {
  ps->has_pending = true;
  ps->pending_kind = t;
  ps->pending_val = lval->tok;
  ps->pending_loc = *lloc;
}

static int emit(Parser *ps, int t, const FE_YYSTYPE *lval, TermWhy why) {
  ps->prev = ps->last;
  ps->last = t;
  ps->prev_val = ps->la_val;
  ps->la_val = lval->tok;
  ps->la_term = why;
  if (t == TK_AS || t == TK_PARAM) {
    ps->in_scope = true;
    ps->scope_depth = ps->depth;
  } else if (ps->in_scope && ps->depth <= ps->scope_depth && t != TK_IDENT && t != TK_INT &&
             t != TK_FLOAT && t != '.' && t != '}') {
    ps->in_scope = false;
  }
  return t;
}

/* A bracket whose '{' the grammar discarded while recovering from an error:
 * the filter then swallows its '}'. */
enum { BR_DISCARDED = 0x80 };

static int top(const Parser *ps) {
  return ps->depth ? ps->nest[ps->depth - 1] & ~BR_DISCARDED : BR_BODY;
}

static void discard_brace(Parser *ps) {
  for (int i = ps->depth - 1; i >= 0; i--) {
    int b = ps->nest[i] & ~BR_DISCARDED;
    if ((b == BR_BODY || b == BR_INTERP) && !(ps->nest[i] & BR_DISCARDED)) {
      ps->nest[i] |= BR_DISCARDED;
      return;
    }
  }
}

static bool push(Parser *ps, Bracket b, SrcLoc loc) {
  if (ps->depth == FE_MAX_NEST) {
    diag_error(ps->c, loc, "nesting too deep (more than %d brackets)", FE_MAX_NEST);
    ps->stop = true;
    return false;
  }
  ps->nest[ps->depth++] = (unsigned char)b;
  return true;
}

static int yylex(FE_YYSTYPE *lval, FE_YYLTYPE *lloc, Parser *ps) {
  for (;;) {
    if (ps->stop || diag_should_stop(ps->c)) {
      ps->stop = true;
      return emit(ps, 0, lval, TERM_NEWLINE);
    }
    int t = next_raw(ps, lval, lloc);
    switch (t) {
    case TK_NEWLINE: {
      if (top(ps) != BR_BODY || !can_end(ps->last)) continue;
      /* "}\n else {" continues the if. */
      SrcLoc at = *lloc;
      int u;
      do u = next_raw(ps, lval, lloc);
      while (u == TK_NEWLINE);
      unread(ps, u, lval, lloc);
      if (u == TK_ELSE) continue;
      *lloc = at;
      lval->tok = (Tok){0};
      return emit(ps, TERM, lval, TERM_NEWLINE);
    }
    case ';':
      return emit(ps, TERM, lval, TERM_SEMICOLON);
    case '(':
      if (!push(ps, BR_PAREN, *lloc)) continue;
      break;
    case '[':
      if (!push(ps, BR_BRACKET, *lloc)) continue;
      break;
    case '{': {
      /* In a scope, a '{' after a part glues to it; with a space between
       * them it is still taken as one (and reported), since as a body it
       * would unbalance every brace after it. */
      bool glue = ps->in_scope && ps->depth == ps->scope_depth &&
                  (ps->last == TK_IDENT || ps->last == TK_INT || ps->last == '}');
      int end = ps->last_loc.col + (ps->last == '}' ? 1 : ps->la_val.text ? (int)strlen(ps->la_val.text) : 0);
      bool spaced = lloc->line != ps->last_loc.line || lloc->col != end;
      if (!push(ps, ps->last == TK_AS || ps->last == TK_PARAM || ps->last == '.' || glue ? BR_INTERP : BR_BODY, *lloc))
        continue;
      if (glue) {
        ps->last_loc = *lloc;
        lval->tok = (Tok){.i = spaced};
        return emit(ps, TK_GLUE, lval, TERM_NEWLINE);
      }
      break;
    }
    case ')':
      if (top(ps) == BR_PAREN && ps->depth) ps->depth--;
      break;
    case ']':
      if (top(ps) == BR_BRACKET && ps->depth) ps->depth--;
      break;
    case '}':
      if (!ps->depth) break; /* stray: the grammar reports it */
      if (top(ps) == BR_PAREN || top(ps) == BR_BRACKET) {
        /* An unclosed bracket inside a body: the brace is the stronger
         * signal.  Close everything up to it; the grammar reports the
         * missing ')' or ']'. */
        while (ps->depth && (top(ps) == BR_PAREN || top(ps) == BR_BRACKET)) ps->depth--;
        if (ps->depth && (ps->nest[--ps->depth] & BR_DISCARDED)) continue;
        break;
      }
      if (top(ps) == BR_BODY && can_end(ps->last)) {
        unread(ps, t, lval, lloc);
        lval->tok = (Tok){0};
        return emit(ps, TERM, lval, TERM_BEFORE_BRACE);
      }
      if (ps->nest[--ps->depth] & BR_DISCARDED) continue;
      break;
    case 0:
      if (top(ps) == BR_BODY && can_end(ps->last)) {
        unread(ps, t, lval, lloc);
        lval->tok = (Tok){0};
        return emit(ps, TERM, lval, TERM_BEFORE_EOF);
      }
      break;
    default:
      break;
    }
    ps->last_loc = *lloc;
    return emit(ps, t, lval, TERM_NEWLINE);
  }
}

int fe_run_parser(Parser *ps) { return yyparse(ps); }

/* ---- Syntax error messages. ---- */

static void yyerror(FE_YYLTYPE *loc, Parser *ps, const char *msg) {
  if (ps->stop) return;
  if (strstr(msg, "exhausted")) {
    diag_error(ps->c, *loc, "nesting too deep (the parser's stack is full)");
    ps->stop = true;
  } else {
    diag_error(ps->c, *loc, "%s", msg);
  }
}

/* Character tokens have no YYSYMBOL_ name of their own. */
#define CH(c) ((yysymbol_kind_t)YYTRANSLATE(c))

static bool is_operator(yysymbol_kind_t k) {
  static const int ops[] = {TK_OR, TK_AND, TK_EQ, TK_NE, TK_LE, TK_GE, TK_POW, TK_FLOORDIV,
                            TK_AS, '+', '-', '*', '/', '%', '@', '<', '>'};
  for (size_t i = 0; i < ARRAY_LEN(ops); i++)
    if (CH(ops[i]) == k) return true;
  return false;
}

static bool is_comparison(yysymbol_kind_t k) {
  return k == CH(TK_EQ) || k == CH(TK_NE) || k == CH('<') || k == CH(TK_LE) || k == CH('>') || k == CH(TK_GE);
}

static const int expr_start[] = {TK_IDENT, TK_INT, TK_FLOAT, TK_STRING, TK_TRUE,
                                 TK_FALSE, TK_NOT, '-',      '(',       '['};
static const int stmt_start[] = {TK_IDENT, TK_RETURN, TK_IF, TK_FOR, TK_PARAM, TK_LET};
static const int item_start[] = {TK_LET, TK_BLOCK, TK_MODEL};

static bool has_all(const bool *set, const int *group, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!set[CH(group[i])]) return false;
  return true;
}

static void clear_all(bool *set, const int *group, size_t n) {
  for (size_t i = 0; i < n; i++) set[CH(group[i])] = false;
}

/* The lookahead as the user wrote it: identifier 'foo', number 12, ... */
static const char *describe_lookahead(Parser *ps, yysymbol_kind_t k, char *buf, size_t len) {
  const Tok *t = &ps->la_val;
  switch (k) {
  case YYSYMBOL_TK_IDENT:
    snprintf(buf, len, "identifier '%.40s'", t->text ? t->text : "");
    return buf;
  case YYSYMBOL_TK_INT:
  case YYSYMBOL_TK_FLOAT:
    snprintf(buf, len, "number %.40s", t->text ? t->text : "");
    return buf;
  case YYSYMBOL_TK_STRING:
    return "string";
  case YYSYMBOL_TERM:
    switch (ps->la_term) {
    case TERM_SEMICOLON: return "';'";
    case TERM_BEFORE_BRACE: return "'}'";
    case TERM_BEFORE_EOF: return "end of file";
    default: return "newline";
    }
  case YYSYMBOL_YYEOF:
    return "end of file";
  default:
    return yysymbol_name(k);
  }
}

/* Says what was found and, when the list is short enough to help, what
 * could have come instead.  Operators that could continue an expression
 * are left out: after "f(x" the useful news is "')' or ','". */
static int yyreport_syntax_error(const yypcontext_t *yyctx, Parser *ps) {
  if (ps->stop) return 0;
  char buf[96];
  yysymbol_kind_t la = yypcontext_token(yyctx);
  const char *found = describe_lookahead(ps, la, buf, sizeof buf);
  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(yyctx, exp, YYNTOKENS);
  bool set[YYNTOKENS] = {false};
  for (int i = 0; i < n; i++) set[exp[i]] = true;
  set[YYSYMBOL_TK_GLUE] = false; /* a '{' after a scope part: never the likely fix */

  const char *names[YYNTOKENS + 3];
  int m = 0;
  bool want_expr = has_all(set, expr_start, ARRAY_LEN(expr_start));
  bool want_stmt = has_all(set, stmt_start, ARRAY_LEN(stmt_start));
  bool want_item = has_all(set, item_start, ARRAY_LEN(item_start));
  if (want_expr) clear_all(set, expr_start, ARRAY_LEN(expr_start));
  if (want_stmt) clear_all(set, stmt_start, ARRAY_LEN(stmt_start));
  if (want_item) clear_all(set, item_start, ARRAY_LEN(item_start));
  /* After a complete item, "newline" is the likelier fix than another item. */
  if (want_item && set[YYSYMBOL_TERM] && can_end(ps->prev)) want_item = false;
  if (want_stmt || want_item) set[YYSYMBOL_TERM] = false;
  /* f(x y): a keyword argument is possible but hardly what was meant. */
  if (set[CH(')')] || set[CH(']')]) set[CH('=')] = false;
  if (!want_expr) set[CH('(')] = false; /* '(' that would make a call */
  bool others = false;
  for (int k = 0; k < YYNTOKENS; k++)
    if (set[k] && !is_operator((yysymbol_kind_t)k) && k != YYSYMBOL_YYEOF) others = true;
  /* '[' after an expression would index it: name it only where it is all
   * that can come (the dims of a type, f32[...]). */
  if (set[CH('[')]) {
    bool alone = !want_expr && !want_stmt && !want_item;
    for (int k = 0; alone && k < YYNTOKENS; k++)
      if (set[k] && k != CH('[') && !is_operator((yysymbol_kind_t)k) && k != YYSYMBOL_YYEOF) alone = false;
    if (!alone) set[CH('[')] = false;
  }
  if (others || want_expr || want_stmt || want_item) set[YYSYMBOL_YYEOF] = false;

  if (want_expr) names[m++] = "an expression";
  if (want_stmt) names[m++] = "a statement";
  if (want_item) names[m++] = "'let', 'block' or 'model'";
  for (int k = 0; k < YYNTOKENS; k++)
    if (set[k] && !is_operator((yysymbol_kind_t)k)) names[m++] = yysymbol_name((yysymbol_kind_t)k);

  SrcLoc loc = *yypcontext_location(yyctx);
  if (!want_expr && is_comparison(la)) {
    diag_error(ps->c, loc, "unexpected %s: comparisons do not chain (write a < b and b < c)", found);
    return 0;
  }
  if (m == 0 || m > 4) {
    diag_error(ps->c, loc, "unexpected %s", found);
    return 0;
  }
  char list[512] = "";
  for (int i = 0; i < m; i++) {
    if (i > 0) strcat(list, i == m - 1 ? " or " : ", ");
    strncat(list, names[i], sizeof list - strlen(list) - 8);
  }
  /* A misspelt keyword: "modle m(...)" at the top, "retrun x" in a body;
   * Python's: "def f(x):" (frontend/pytorch.c). */
  static const char *const items[] = {"let", "block", "model"};
  static const char *const stmts[] = {"return", "param", "let", "for", "if", "else"};
  const char *kw = NULL, *word = NULL;
  if (want_item && la == YYSYMBOL_TK_IDENT && ps->la_val.text) {
    word = ps->la_val.text;
    kw = diag_suggest(word, items, (int)ARRAY_LEN(items));
  } else if (set[CH('=')] && ps->prev == TK_IDENT && ps->prev_val.text) {
    word = ps->prev_val.text;
    kw = diag_suggest(word, stmts, (int)ARRAY_LEN(stmts));
  }
  const PtSpelling *torch = word ? fe_torch_find(PT_KEYWORD, word, NULL, NULL, 0) : NULL;
  if (torch && torch->dlcc) {
    diag_error(ps->c, loc, "unexpected %s, expected %s (did you mean the keyword '%s'?%s%s)", found, list,
               torch->dlcc, torch->note ? " " : "", torch->note ? torch->note : "");
    return 0;
  }
  if (torch) {
    char note[256];
    diag_error(ps->c, loc, "unexpected %s, expected %s%s", found, list, fe_torch_note(torch, note, sizeof note));
    return 0;
  }
  if (kw) {
    diag_error(ps->c, loc, "unexpected %s, expected %s (did you mean the keyword '%s'?)", found, list, kw);
    return 0;
  }
  /* torch.relu(x), x.view(...), x.shape: no modules, no methods. */
  if (la == CH('.') && ps->prev == TK_IDENT && ps->prev_val.text) {
    static const char *const modules[] = {"torch", "F", "nn", "np", "math", "self"};
    bool module = false;
    for (size_t i = 0; i < ARRAY_LEN(modules); i++) module |= strcmp(ps->prev_val.text, modules[i]) == 0;
    diag_error(ps->c, loc, "unexpected %s, expected %s (%s)", found, list,
               module ? "dlcc's functions have no module prefix: relu(x), not torch.relu(x)"
                      : "dlcc has no methods: reshape(x, shape) for x.view(shape), dim(x, 0) for x.shape[0]");
    return 0;
  }
  diag_error(ps->c, loc, "unexpected %s, expected %s", found, list);
  return 0;
}
