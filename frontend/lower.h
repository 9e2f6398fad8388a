/* Internal to the frontend: the compile-time values, the lowering state and
 * the helpers that lower.c (the language: names, blocks, control flow) and
 * layers.c (the builtin functions and layers) share. */
#ifndef DLCC_LOWER_H
#define DLCC_LOWER_H

#include "frontend/ast.h"
#include "frontend/dims.h"
#include "ir/ir.h"

enum {
  FE_MAX_DEPTH = 100, /* nested block calls */
  /* Expressions, statements and block calls in evaluation at once: each
   * is a C frame of the recursive evaluator, and together they must fit
   * a thread's stack (1 MB is common for small-stack threads). */
  FE_MAX_LEVELS = 500,
  FE_MAX_NODES = IR_MAX_NODES, /* IR nodes per model */
  FE_MAX_ARGS = 16,       /* parameters of one builtin */
};
/* Statements and loop iterations per model: loops that build nothing must
 * still end. */
#define FE_MAX_STEPS 20000000L

typedef enum {
  V_POISON, /* the result of an error: silences errors that follow from it */
  V_NONE,   /* an argument that was not given */
  V_INT,
  V_FLOAT,
  V_BOOL,
  V_STR,
  V_DTYPE,
  V_LIST,
  V_TUPLE, /* several results of a block, lstm or gru */
  V_TENSOR,
} ValKind;

typedef struct Val Val;
struct Val {
  ValKind kind;
  union {
    int64_t i;
    double f;
    bool b;
    const char *s;
    DType dt;
    Value *t;
    struct {
      int n;
      Val *v;
    } list;
  };
};

static inline Val val_poison(void) { return (Val){.kind = V_POISON}; }
static inline Val val_int(int64_t i) { return (Val){.kind = V_INT, .i = i}; }
static inline Val val_float(double f) { return (Val){.kind = V_FLOAT, .f = f}; }
static inline Val val_bool(bool b) { return (Val){.kind = V_BOOL, .b = b}; }
static inline Val val_tensor(Value *t) {
  return t ? (Val){.kind = V_TENSOR, .t = t} : val_poison();
}
static inline bool val_is_num(const Val *v) { return v->kind == V_INT || v->kind == V_FLOAT; }
static inline double val_num(const Val *v) { return v->kind == V_INT ? (double)v->i : v->f; }

/* A string-keyed hash table: parameter names, auto-name counters. */
typedef struct MapEntry {
  const char *key;
  int64_t n;
  SrcLoc loc;
} MapEntry;

typedef struct StrMap {
  int cap, len;
  MapEntry *e;
} StrMap;

typedef struct Frame Frame;

typedef struct Lower {
  Ctx *c;
  Arena *a;
  Graph *g;
  const Program *p;
  const LowerOptions *opt;
  const char *prefix; /* parameter-name scope, "" at the top */
  StrMap params;      /* parameter name -> where it was created */
  StrMap counters;    /* "<prefix>\x01<layer>" -> next automatic index */
  StrMap blocks;      /* block name -> index into p->items */
  StrMap reported;    /* one-time messages already given */
  const Item **stack; /* blocks being called, outermost first */
  SrcLoc *call_locs;  /* where each of them was called */
  int depth;
  int levels; /* expressions, statements and calls being evaluated */
  long steps;
  long n_dup;   /* errors suppressed as repeats */
  bool halt;    /* a budget ran out: stop evaluating */
  bool in_type; /* evaluating the dims of a type */
  const char *type_input; /* ... of this model input's type, or NULL */
  Frame *globals;
  DimBinder dims;   /* free names of the inputs' types, from the given shapes */
  StrMap free_dims; /* the names it bound */
} Lower;

/* A call to a builtin, its arguments bound to the builtin's parameters. */
typedef struct Call {
  const char *name;
  SrcLoc loc;
  bool scoped; /* called with `as`: layers use the prefix as their name */
  int n;       /* parameters */
  const char *pnames[FE_MAX_ARGS];
  Val args[FE_MAX_ARGS]; /* V_NONE: not given */
  SrcLoc locs[FE_MAX_ARGS];
  int n_rest; /* variadic builtins: the positional arguments */
  Val *rest;
  SrcLoc *rest_locs;
} Call;

typedef Val (*BuiltinFn)(Lower *l, const Call *call);

typedef struct Builtin {
  const char *name;
  BuiltinFn fn;
  /* Parameter names, comma-separated; those after '|' are optional. */
  const char *params;
  bool variadic; /* positional arguments go to Call.rest */
} Builtin;

/* layers.c: every builtin (tensors.c's too) */
const Builtin *fe_builtin(const char *name);
int fe_builtin_names(const char **out, int max);
/* sqrt(2), max(3, 4), int(2.5): a number when every argument is one. */
bool fe_is_scalar_fn(const char *name);
Val fe_scalar_call(Lower *l, const char *name, int n, const Val *args, const SrcLoc *locs,
                   SrcLoc loc);

/* tensors.c: the constructors and indexing builtins */
const Builtin *fe_tensor_builtin(const char *name);
int fe_tensor_builtin_names(const char **out, int max);
/* start + step * the coordinate along axis, of every element of type t. */
Value *fe_iota(Lower *l, const TensorType *t, int axis, double start, double step, SrcLoc loc);

/* One subscript of x[...]: an int index (drops the axis), a slice
 * start:stop:step (each part may be absent) or an ellipsis. */
typedef enum { SUB_INDEX, SUB_SLICE, SUB_ELLIPSIS } SubKind;
typedef struct Subscript {
  SubKind kind;
  bool has[3];    /* SUB_SLICE: start, stop, step given */
  int64_t v[3];   /* SUB_INDEX: v[0]; SUB_SLICE: start, stop, step */
  SrcLoc loc;
} Subscript;

/* tensors.c: x[subs] as PyTorch means it: one slice and, when an int
 * index drops an axis, a reshape. */
Val fe_subscript(Lower *l, Value *x, int n, const Subscript *subs, SrcLoc loc);

/* lower.c: errors.  Reports once per location and message (a loop repeats
 * the same mistake); returns whether it was reported. */
bool fe_error(Lower *l, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* lower.c: values */
const char *fe_describe(const Val *v, char *buf, size_t len);

/* lower.c: building the graph.  Each returns NULL after reporting. */
Node *fe_node(Lower *l, OpKind op, int n_in, Value *const *in, SrcLoc loc);
Value *fe_emit(Lower *l, Node *n);
Value *fe_const(Lower *l, double v, DType dt, SrcLoc loc);
/* A const splat of type t. */
Value *fe_fill(Lower *l, double v, const TensorType *t, SrcLoc loc);
Value *fe_param(Lower *l, const char *scope, const char *name, const TensorType *t,
                const char *init, SrcLoc loc);
Value *fe_unary(Lower *l, OpKind op, Value *x, SrcLoc loc);
/* a (op) b where at least one is a tensor and the other may be a number. */
Val fe_tensor_binary(Lower *l, OpKind op, Val a, Val b, SrcLoc loc);
/* The name scope of one layer call: the `as` prefix, or "<kind>_<k>". */
const char *fe_layer_scope(Lower *l, const Call *call, const char *kind);
char *fe_join(Lower *l, const char *prefix, const char *name);
MapEntry *fe_map(Lower *l, StrMap *m, const char *key, bool insert);

/* lower.c: reading arguments.  Each returns false after reporting; an
 * absent argument takes the default. */
bool fe_arg_tensor(Lower *l, const Call *c, int i, Value **out);
bool fe_arg_int(Lower *l, const Call *c, int i, int64_t def, int64_t *out);
bool fe_arg_pos_int(Lower *l, const Call *c, int i, int64_t def, int64_t *out);
bool fe_arg_float(Lower *l, const Call *c, int i, double def, double *out);
bool fe_arg_bool(Lower *l, const Call *c, int i, bool def, bool *out);
bool fe_arg_str(Lower *l, const Call *c, int i, const char *def, const char **out);
/* An int or a list of up to max ints; *n receives the count (1 for an int). */
bool fe_arg_ints(Lower *l, const Call *c, int i, int max, const char *what, int *n, int64_t *out);
/* Reports "<fn>: '<param>' must be <what>, got <description>". */
void fe_arg_error(Lower *l, const Call *c, int i, const char *what);
/* Normalizes an axis for a tensor of `rank` dims; reports when out of range. */
bool fe_axis(Lower *l, const Call *c, int i, int64_t axis, int rank, int *out);

#endif
