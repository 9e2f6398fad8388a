/* Shared by lexer.l, parser.y and ast.c (nothing else includes it): the
 * parser state threaded through scanner, token filter and grammar, the
 * token value, and the AST builders the grammar actions call. */
#ifndef DLCC_PARSE_INTERNAL_H
#define DLCC_PARSE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/ast.h"

/* The value of one token.  text: an identifier's name, a string's decoded
 * contents, a number's literal spelling (scopes keep "007" as written). */
typedef struct Tok {
  const char *text;
  int64_t i;
  double f;
} Tok;

typedef struct ParamList {
  int n, cap;
  Param *v;
} ParamList;

typedef struct ResultList {
  int n, cap;
  Result *v;
} ResultList;

/* Brackets the token filter tracks.  The cap keeps every later recursion
 * over the tree (lowering, dumping) shallow; bison's own stack is capped in
 * parser.y for the nestings that need no bracket (- - - x, x ** x ** ...). */
enum { FE_MAX_NEST = 200 };
/* Depth of one expression's tree, counted as it is built: a chain of
 * binary operators (1+1+...+1) nests one level per operator with no
 * bracket at all.  Lowering evaluates the tree recursively. */
enum { FE_MAX_EXPR_DEPTH = 200 };
typedef enum { BR_PAREN, BR_BRACKET, BR_BODY, BR_INTERP } Bracket;

/* What an inserted or translated TERM stands for, to name it in messages. */
typedef enum { TERM_NEWLINE, TERM_SEMICOLON, TERM_BEFORE_BRACE, TERM_BEFORE_EOF } TermWhy;

typedef struct Parser {
  Ctx *c;
  const SrcFile *file;
  void *scanner; /* yyscan_t */
  Program *prog;
  /* Scanner position of the next byte, and the column of the last
   * newline seen (an end-of-file error points there, at a visible line). */
  int line, col, last_nl_col;

  /* Token filter (parser.y). */
  int last; /* kind of the last token handed to bison, 0 at start */
  int prev; /* and of the one before it */
  int depth;
  unsigned char nest[FE_MAX_NEST];
  bool has_pending, at_eof;
  int pending_kind;
  Tok pending_val;
  SrcLoc pending_loc;
  /* Inside an `as` scope at nesting depth scope_depth, and where the last
   * token started: a '{' right after a name part (denselayer{i}) glues. */
  bool in_scope;
  int scope_depth;
  SrcLoc last_loc;
  Tok prev_val; /* the value of the token before the lookahead */
  /* The lookahead bison holds, for yyreport_syntax_error. */
  Tok la_val;
  TermWhy la_term;
  /* Set when parsing must end now (nesting too deep, diag limit): the
   * filter then returns end of file and no further error is reported. */
  bool stop;
} Parser;

/* lexer.l: attaches a scanner to buf (size bytes, the last two NUL) and
 * releases it. */
void fe_lex_open(Parser *ps, char *buf, size_t size);
void fe_lex_close(Parser *ps);

/* parser.y: runs bison over the open scanner, filling ps->prog.  Returns
 * yyparse's result (0 when the grammar accepted the input). */
int fe_run_parser(Parser *ps);

/* ast.c: node constructors and list appends (all memory from c's arena). */
Expr *fe_ast_expr(Ctx *c, ExprKind kind, SrcLoc loc);
Expr *fe_ast_binary(Ctx *c, int op, SrcLoc loc, Expr *lhs, Expr *rhs);
/* start:stop:step, any of them NULL. */
Expr *fe_ast_slice(Ctx *c, SrcLoc loc, Expr *start, Expr *stop, Expr *step);
Expr *fe_ast_unary(Ctx *c, int op, SrcLoc loc, Expr *lhs);
/* Sets e->depth from its operands (set them first) and reports, once per
 * tree, where it grows deeper than FE_MAX_EXPR_DEPTH.  Returns e. */
Expr *fe_ast_nest(Ctx *c, Expr *e);
Stmt *fe_ast_stmt(Ctx *c, StmtKind kind, SrcLoc loc);
void fe_ast_push_expr(Ctx *c, ExprList *l, Expr *e);
void fe_ast_push_stmt(Ctx *c, StmtList *l, Stmt *s);
void fe_ast_push_name(Ctx *c, NameList *l, const char *name, SrcLoc loc);
void fe_ast_push_part(Ctx *c, Scope *s, const char *text, Expr *e, SrcLoc loc);
void fe_ast_push_param(Ctx *c, ParamList *l, Param p);
void fe_ast_push_result(Ctx *c, ResultList *l, Result r);
void fe_ast_push_item(Ctx *c, Program *p, Item *it);

#endif
