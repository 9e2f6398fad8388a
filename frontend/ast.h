/* The syntax tree of a .dl file, produced by parser.y and consumed by
 * lower.c.  Every node carries the location of the token that names it.
 * Lists are arena arrays with a count. */
#ifndef DLCC_AST_H
#define DLCC_AST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/diag.h"

typedef struct Expr Expr;
typedef struct Stmt Stmt;

typedef struct ExprList {
  int n, cap;
  Expr **v;
} ExprList;

typedef struct StmtList {
  int n, cap;
  Stmt **v;
} StmtList;

typedef enum {
  EX_INT,    /* i */
  EX_FLOAT,  /* f */
  EX_BOOL,   /* b */
  EX_STRING, /* s */
  EX_NAME,   /* s: a variable, constant, dtype name or block name */
  EX_LIST,   /* items: [a, b, c] */
  EX_UNARY,  /* op ('-', '!' for not), lhs */
  EX_BINARY, /* op ('+', '-', '*', '/', '%', '<', '>' or an OPX_*), lhs, rhs */
  EX_CALL,   /* s: callee; args (each an EX_ARG) */
  EX_ARG,    /* s: keyword or NULL for positional; lhs: the value */
  EX_AS,     /* lhs: the expression; scope: the name scope for its layers */
  EX_INDEX,  /* lhs[items]: an element of a list, tuple or string; a part of a tensor */
  EX_SLICE,  /* a subscript lhs:rhs:step, each may be NULL (x[:, 1:]) */
  EX_ELLIPSIS, /* a subscript ... (x[..., :h]) */
} ExprKind;

/* Binary operators beyond single characters. */
enum {
  OPX_POW = 256, /* ** */
  OPX_FLOORDIV,  /* // */
  OPX_EQ,        /* == */
  OPX_NE,        /* != */
  OPX_LE,        /* <= */
  OPX_GE,        /* >= */
  OPX_AND,       /* and */
  OPX_OR,        /* or */
};

/* One dotted part of a scope: a literal name ("conv1", "0") or an
 * interpolated expression ({i}). */
typedef struct ScopePart {
  const char *text; /* NULL when expr is set */
  Expr *expr;
  SrcLoc loc;
  bool glue; /* joined to the part before it without a '.': denselayer{i} */
} ScopePart;

typedef struct Scope {
  int n, cap;
  ScopePart *parts;
} Scope;

struct Expr {
  ExprKind kind;
  SrcLoc loc;
  int depth; /* 1 for a leaf, else 1 + its deepest operand's */
  int op;
  int64_t i;
  double f;
  bool b;
  const char *s;
  Expr *lhs, *rhs;
  Expr *step;     /* EX_SLICE */
  ExprList items; /* EX_LIST items, EX_CALL args, EX_INDEX subscripts */
  Scope scope;    /* EX_AS */
};

/* dtype[dim, dim, ...]: dims are compile-time expressions. */
typedef struct TypeExpr {
  const char *dtype;
  SrcLoc loc, dtype_loc;
  ExprList dims;
} TypeExpr;

typedef enum {
  ST_ASSIGN, /* names = value (several names destructure several results) */
  ST_RETURN, /* values */
  ST_IF,     /* cond, body, orelse (orelse may hold a single ST_IF for "else if") */
  ST_FOR,    /* names[0] in lo..hi (hi exclusive), body */
  ST_PARAM,  /* param scope: type [= value], binding names[0] (the scope's last name) */
  ST_LET,    /* let names[0] = value */
} StmtKind;

typedef struct NameList {
  int n, cap;
  const char **v;
  SrcLoc *locs;
} NameList;

struct Stmt {
  StmtKind kind;
  SrcLoc loc;
  NameList names;
  Expr *value;     /* ST_ASSIGN, ST_PARAM (init, may be NULL), ST_LET */
  ExprList values; /* ST_RETURN */
  Expr *cond, *lo, *hi;
  StmtList body, orelse;
  TypeExpr *type; /* ST_PARAM */
  Scope scope;    /* ST_PARAM: its name, as written (w, w{i}, layers.{i}.weight) */
};

typedef enum { IT_LET, IT_BLOCK, IT_MODEL } ItemKind;

/* A block or model parameter.  Model parameters are typed inputs; block
 * parameters are untyped and may have a default value. */
typedef struct Param {
  const char *name;
  SrcLoc loc;
  TypeExpr *type;    /* models */
  Expr *default_val; /* blocks, may be NULL */
} Param;

/* A model result: an optional name and a type. */
typedef struct Result {
  const char *name; /* NULL: named "output" or "output<i>" */
  SrcLoc loc;
  TypeExpr *type;
} Result;

typedef struct Item {
  ItemKind kind;
  const char *name;
  SrcLoc loc;
  Expr *value; /* IT_LET */
  int n_params, cap_params;
  Param *params;
  int n_results, cap_results;
  Result *results;
  StmtList body;
} Item;

typedef struct Program {
  const SrcFile *file;
  int n_items, cap_items;
  Item **items;
} Program;

/* Parses a whole file.  Returns NULL when any syntax error was reported
 * (all of them are in ctx's diag). */
Program *fe_parse(Ctx *c, const SrcFile *file);

/* An operator as it is written in the source ("**", "and", "not", "+"). */
const char *fe_op_text(int op);

/* Prints the tree back as source-like text (for parser tests). */
void fe_dump_ast(FILE *f, const Program *p);

typedef struct Define {
  const char *name;
  int64_t value;
} Define;

struct InputShape;

typedef struct LowerOptions {
  const char *model; /* which model to lower; NULL: the file's only (or last) model */
  int n_defines;
  const Define *defines; /* -D NAME=VALUE: overrides let, binds free shape names;
                          * -D INPUT:AXIS=VALUE one dim of a model input */
  /* The shapes of the inputs the caller will give (frontend/dims.h): a
   * free name in an input's type takes its value from them, and a dim
   * they contradict is an error that names the -D that fixes it. */
  int n_input_shapes;
  const struct InputShape *input_shapes;
  /* > 0: a free name in an input's type that nothing binds takes this
   * value, with a note saying so (dlcc check-weights: the weights of most
   * models do not depend on the batch, which it has no inputs to bind). */
  int64_t free_dims_default;
  /* Budgets that keep any input from hanging or exhausting memory; 0
   * takes the defaults (FE_MAX_NODES operations, FE_MAX_STEPS statements
   * and loop iterations).  The fuzzer sets them low. */
  int max_ops;
  long max_steps;
  /* Lower for training (docs/training.md): dropout becomes its op,
   * drawing from the params dlcc.seed and dlcc.step; otherwise it is the
   * identity, as in inference. */
  bool training;
  /* Keep stage(x) as the IR's stage node for a pipeline to cut at
   * (dlcc run --pipeline); training keeps it anyway. */
  bool stages;
} LowerOptions;

/* Evaluates the program's compile-time structure (lets, blocks, loops,
 * conditionals) and builds the graph of one model, checking shapes and
 * dtypes.  Returns NULL after reporting errors. */
struct Graph;
struct Graph *fe_lower(Ctx *c, const Program *p, const LowerOptions *opt);

#endif
