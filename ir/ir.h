/* The graph IR: SSA values with tensor types, nodes drawn from ops.def,
 * attributes, and the builder, verifier, printer, parser and DOT writer
 * that every later stage uses.  All memory comes from the graph's Ctx
 * arena. */
#ifndef DLCC_IR_H
#define DLCC_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "diag.h"

enum {
  DL_MAX_RANK = 8,
  /* Nodes in one graph, from any importer (IR text, the language, ONNX):
   * far above any real model, and every pass is linear or close to it
   * in this count. */
  IR_MAX_NODES = 1000000,
  /* Members of one fusion group: codegen evaluates a group by recursion
   * over its members, so a hand-written group of a million would
   * overflow the stack.  The fuse pass makes groups of at most 64. */
  IR_MAX_GROUP = 256,
  /* Results of one node: a loop's carried values are the most. */
  IR_MAX_RESULTS = 64,
};
/* Largest tensor we accept, in elements: far above any real model, far
 * below where int64 byte counts could overflow. */
#define DL_MAX_ELEMS ((int64_t)1 << 40)

/* TY_BOOL is one byte holding 0 or 1: the result of comparisons and
 * logic, the condition of where.  TY_U8 is an unsigned byte (ONNX's
 * UINT8: quantized activations, images); it wraps like i8, and so do
 * i16, u16, u32 and u64 (ONNX's INT16, UINT16, UINT32, UINT64).  TY_F64
 * computes in double in the interpreter and in the kernels (gradient
 * checks by finite differences need its precision, docs/training.md). */
typedef enum {
  TY_F32, TY_F16, TY_BF16, TY_I8, TY_I32, TY_I64, TY_BOOL, TY_U8, TY_F64, TY_I16, TY_U16, TY_U32, TY_U64, TY_COUNT
} DType;

typedef struct TensorType {
  DType dtype;
  int rank;
  int64_t dims[DL_MAX_RANK];
} TensorType;

typedef enum { K_SOURCE, K_ELEMWISE, K_REDUCE, K_MATMUL, K_WINDOW, K_MOVE, K_OPAQUE } OpClass;

typedef enum {
#define OP(id, ...) OP_##id,
#include "ops.def"
#undef OP
  OP_COUNT
} OpKind;

typedef enum { AK_INT, AK_FLOAT, AK_INTS, AK_STR, AK_DTYPE } AttrKind;

typedef struct Attr {
  const char *name;
  AttrKind kind;
  union {
    int64_t i;
    double f;
    struct {
      int n;
      int64_t *v;
    } ints;
    const char *s;
    DType dt;
  };
} Attr;

typedef struct Node Node;
typedef struct Guard Guard;

typedef struct Value {
  TensorType type;
  Node *def;
  int index; /* which result of def */
  int id;    /* numbering scratch for printers and passes */
} Value;

struct Node {
  OpKind op;
  int n_in;
  Value **in;
  int n_out;
  Value *out;   /* n_out results */
  int n_attrs;
  Attr *attrs;  /* schema order; absent optional attributes not stored */
  SrcLoc loc;
  Node *prev, *next;
  int id;       /* scratch */
  /* Fusion group (passes/fuse.c): nodes with the same group >= 0 become
   * one kernel; -1 = none.  Printed as a trailing "#kN" (docs/ir.md). */
  int group;
  /* Per-op precision override (the language's precision="f32", printed
   * "#f32"): passes that lower precision (passes/precision.c, later
   * quantization) leave this node in f32. */
  bool keep_f32;
  /* When the node is needed at all (an ONNX If's branch, ir/guard.c);
   * NULL: always.  Not printed: the IR text computes both branches. */
  const Guard *guard;
  /* The `as` scope the language built it in ("layer1.0", "" at the
   * top); NULL when unknown (the IR text, ONNX).  A pass's node takes
   * the scope of the node it is inserted before.  Only --emit=dot
   * reads it. */
  const char *scope;
};

typedef struct Graph {
  Ctx *ctx;
  const char *name;
  Node *first, *last; /* topological order */
  int n_nodes;
  int n_outputs;
  Value **outputs;
  const char **output_names;
  /* NULL, or per output: the name of the param whose value it becomes
   * after a training step (NULL: a plain output); docs/training.md. */
  const char **output_updates;
  /* NULL, or per output: the output holding the run-time length of its
   * axis output_length_axis[i] (an i64 scalar, after every output that
   * is not a length), or -1.  The output's type gives the upper bound
   * (docs/ir.md, "Run-time lengths"; ir/bounds.c). */
  int *output_length;
  int *output_length_axis;
  /* ir_bounds has run (its rewrites are not its to repeat): printed as
   * `graph NAME bounded {` when no output's length mark says so. */
  bool bounded;
} Graph;

/* ---- the op table ---- */

typedef bool (*ShapeFn)(const Node *n, TensorType *out, char *err, size_t errlen);

typedef struct AttrSpec {
  const char *name;
  AttrKind kind;
  const char *default_text; /* NULL: required; "?": optional */
} AttrSpec;

typedef struct OpInfo {
  const char *name;
  int min_in, max_in; /* max_in -1: variadic */
  int n_out;
  OpClass cls;
  ShapeFn shape; /* NULL for declared types */
  const AttrSpec *attrs;
  int n_attrs;
} OpInfo;

extern const OpInfo ir_ops[OP_COUNT];
/* The op name n's run-time errors carry: its own, but gather_elements
 * for softmax_xent and its gradients, whose index check was a
 * gather_elements' until they replaced it (ir/loss.c). */
const char *ir_op_origin(const Node *n);

#define OP(id, name, lo, hi, nout, cls, rule, attrs) \
  bool shape_##rule(const Node *n, TensorType *out, char *err, size_t errlen);
#include "ops.def"
#undef OP

/* Returns OP_COUNT when unknown. */
OpKind ir_op_from_name(const char *name);
/* How many results a node of op with n_in operands gives: the table's
 * count, or for loop_begin n_in - 1 and for loop_end (n_in - 1) / 2. */
int ir_op_results(OpKind op, int n_in);
const AttrSpec *ir_op_attr_spec(OpKind op, const char *name);
/* What an op's shape rule (ops.def's rule column) lets in, for the stages
 * that would otherwise keep lists of ops.  takes_ints: an elementwise op
 * on integer dtypes as well as floats (the rules unary, binary, mod,
 * bits, cast and bitcast).  is_logic: a test (equal .. greater_equal,
 * isnan, isinf) or logical op, any operand dtype and a bool result, or
 * where. */
bool ir_op_takes_ints(OpKind op);
bool ir_op_is_logic(OpKind op);
/* a and b are reduce_sum, reduce_mean, reduce_max or reduce_min of
 * operands of one type over the same axes, with results of one layout
 * (keepdims aside): one kernel can compute both, a row's accumulators
 * side by side (passes/fuse.c's sibling reductions). */
bool ir_reduce_siblings(const Node *a, const Node *b);

/* ---- dtypes and types ---- */

const char *ir_dtype_name(DType t);
bool ir_dtype_from_name(const char *name, DType *out);
int ir_dtype_size(DType t);
bool ir_dtype_is_float(DType t);
/* Product of the dims, or -1 when it exceeds DL_MAX_ELEMS. */
int64_t ir_type_numel(const TensorType *t);
/* Row-major element strides of t into st[t->rank]. */
void ir_type_strides(const TensorType *t, int64_t *st);
/* The strides of `in` read at `out`'s multi-index under NumPy
 * broadcasting: leading dims missing from `in`, and its size-1 dims, get
 * stride 0.  st has out->rank entries. */
void ir_type_bcast_strides(const TensorType *in, const TensorType *out, int64_t *st);
/* NumPy broadcasting of two dim lists, right-aligned, into out[*rout];
 * false when a pair differs and neither is 1. */
bool ir_broadcast_dims(const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *rout);
bool ir_type_eq(const TensorType *a, const TensorType *b);
/* The same rank and dims, whatever the dtypes. */
bool ir_dims_eq(const TensorType *a, const TensorType *b);
/* "f32[8, 784]" into buf; returns buf. */
char *ir_type_str(const TensorType *t, char *buf, size_t len);
enum { IR_TYPE_STR_MAX = 8 + DL_MAX_RANK * 22 };
TensorType ir_type_make(DType dt, int rank, const int64_t *dims);

/* ---- attributes ---- */

const Attr *ir_attr(const Node *n, const char *name);
/* Typed getters: an internal error when the attribute is missing or of
 * another kind (the verifier guarantees they are present). */
int64_t ir_attr_int(const Node *n, const char *name);
double ir_attr_float(const Node *n, const char *name);
const int64_t *ir_attr_ints(const Node *n, const char *name, int *count);
const char *ir_attr_str(const Node *n, const char *name);
DType ir_attr_dtype(const Node *n, const char *name);

/* matmul's operand i (0 or 1) as the product reads it: its type with the
 * last two axes swapped under trans_a / trans_b. */
bool ir_matmul_trans(const Node *n, int i);
TensorType ir_matmul_operand(const Node *n, int i);
/* A conv2d, conv3d or conv_transpose in layout "nhwc" (channels last:
 * x [N,H,W,C], W [Co,kH,kW,C/groups]; 3-d: x [N,D,H,W,C]). */
bool ir_conv_nhwc(const Node *n);
/* The same for a conv or a max or average pool, 2-d or 3-d, a resize or
 * a group_norm. */
bool ir_nhwc(const Node *n);
/* An integer dtype's range (u64's top as int64: -1, its bits; the
 * other dtypes i64's). */
void ir_int_range(DType dt, int64_t *lo, int64_t *hi);
/* A conv2d or conv3d whose groups are its input channels, each giving
 * the same number of output channels (1, or a depth multiplier's k), in
 * either layout. */
bool ir_conv_depthwise(const Node *n);

void ir_set_int(Graph *g, Node *n, const char *name, int64_t v);
void ir_set_float(Graph *g, Node *n, const char *name, double v);
void ir_set_ints(Graph *g, Node *n, const char *name, int count, const int64_t *v);
void ir_set_str(Graph *g, Node *n, const char *name, const char *v);
void ir_set_dtype(Graph *g, Node *n, const char *name, DType v);
/* Adds every missing non-optional attribute from the schema's default.
 * Returns false (message in err) when a required one is missing. */
bool ir_fill_defaults(Graph *g, Node *n, char *err, size_t errlen);

/* The codes a quantize node gives (docs/ir.md): [0, 255] with to=u8;
 * else [-128, 127] with a zero_point attribute (even 0) and [-127, 127]
 * without one, so that a symmetric quantize maps -x to -q. */
void ir_quant_range(const Node *n, int *lo, int *hi);

/* Parses one attribute value in IR text syntax ("[1, 2]", "1e-05",
 * "\"tanh\"", "f16").  Returns the number of characters consumed, or 0 on
 * a syntax error or a value of the wrong kind. */
size_t ir_parse_attr_value(Arena *a, const char *text, AttrKind kind, Attr *out);
/* Writes an attribute value in the same syntax. */
void ir_print_attr_value(FILE *f, const Attr *a);

/* ---- graphs and nodes ---- */

Graph *ir_graph_new(Ctx *c, const char *name);
/* A detached node with n_in operands (copied) and the op's result count;
 * result types are unset until ir_infer or ir_declare. */
Node *ir_node_new(Graph *g, OpKind op, int n_in, Value *const *in, SrcLoc loc);
/* Runs the op's shape rule to set the result types.  False with a message
 * when the operands or attributes do not fit the op. */
bool ir_infer(const Node *n, char *err, size_t errlen);
void ir_declare(Node *n, const TensorType *t); /* for sources */
void ir_append(Graph *g, Node *n);
void ir_insert_before(Graph *g, Node *before, Node *n);
void ir_remove(Graph *g, Node *n);
/* Rewrites every use of `from` (operands and graph outputs) to `to`. */
void ir_replace_uses(Graph *g, const Value *from, Value *to);
void ir_set_outputs(Graph *g, int n, Value *const *values, const char *const *names);
/* Output i as the next value of the param named `param` (NULL: a plain
 * output again); ir_set_outputs clears every mark. */
void ir_set_output_update(Graph *g, int i, const char *param);
/* The param output i updates, or NULL. */
const char *ir_output_update(const Graph *g, int i);
/* Output i's axis has the run-time length that output length_output
 * holds; ir_set_outputs clears every mark. */
void ir_set_output_length(Graph *g, int i, int axis, int length_output);
/* The output holding the run-time length of output i (its axis in
 * *axis), or -1. */
int ir_output_length(const Graph *g, int i, int *axis);
/* Output i holds another output's length. */
bool ir_output_is_length(const Graph *g, int i);
/* The outputs a user sees: those before the first length. */
int ir_visible_outputs(const Graph *g);

/* Builder: new node, attributes already set by the caller through the
 * returned node is awkward for one-liners, so these take them up front. */
Node *ir_source(Graph *g, OpKind op, const TensorType *t, const char *name, SrcLoc loc);
Node *ir_const(Graph *g, double value, DType dt, SrcLoc loc);

/* Numbers every value in order (Value.id) and every node (Node.id). */
void ir_number(Graph *g);

/* A branch of an If decided at run time: the nodes it guards are needed
 * only when cond (one bool) is `when` and every outer guard holds; a
 * plan skips their steps otherwise (RT_STEP_BRANCH).  Frames are shared
 * and never change: a node's guard is a chain, compared by pointer. */
struct Guard {
  Value *cond;
  bool when;
  const Guard *outer; /* NULL: the model's top level */
  int depth;          /* 1 at the top level */
  /* A loop's frame (ir/loop.c): its loop_begin, whose enter is cond;
   * the plan runs the frame's steps again while the loop's keep holds.
   * NULL: an If's. */
  const Node *loop;
};
const Guard *ir_guard_new(Graph *g, Value *cond, bool when, const Guard *outer);
/* True when chain a lies inside chain b (b is a or one of a's outers). */
bool ir_guard_within(const Guard *a, const Guard *b);
/* The innermost frame both a and b lie within (NULL: the top level). */
const Guard *ir_guard_common(const Guard *a, const Guard *b);
/* Widens guards until each holds what uses it: every user is guarded
 * within the node's guard, except a `where` on a branch's condition
 * reading the branch's value on that branch's side (the If's merge); a
 * graph output, or a value a guard's condition is, is needed always; a
 * condition must be computed earlier in the graph.  Run after anything
 * that moves or merges nodes (the importer's end, fusion's start), it
 * only ever drops guards, so a plan computes at worst both branches. */
void ir_guards_fix(Graph *g);

/* Loops (ir/loop.c, ops.def's loop_begin and loop_end).  of: by node id
 * (ir_number), the innermost loop whose body holds the node, -1 for
 * none (a loop_begin and its loop_end lie outside their own loop);
 * begin, end, outer: by loop, in the order of the loop_begins. */
typedef struct IrLoops {
  int n;
  int n_nodes; /* of's length */
  Node **begin, **end;
  int *outer; /* the loop holding the loop's loop_begin, or -1 */
  int *of;
} IrLoops;
bool ir_has_loops(const Graph *g);
/* Finds g's loops; false with a message when they are not well formed:
 * a node reads two loops' bodies neither inside the other, a loop_end's
 * first operands are not one loop_begin's results in order, a loop has
 * no loop_end or two, a body's value is read after its loop_end or is a
 * graph output. */
bool ir_loops_find(Graph *g, IrLoops *out, char *err, size_t errlen);
/* ir_loops_find, after putting each loop's body in one piece just
 * before its loop_end (the nodes between that are not the body's move
 * before it, in their order). */
bool ir_loops_order(Graph *g, IrLoops *out, char *err, size_t errlen);
/* ir_loops_order, then every body node's guard its loop's frame (If
 * frames inside a body are dropped: both branches computed), and every
 * other node's guard cut back to the frames outside the loops.  Called
 * by ir_guards_fix. */
void ir_loops_guard(Graph *g);

/* Checks structure, operand order, arities, attributes and that every
 * result type equals what the shape rule infers.  Reports to g->ctx's
 * diag and returns false on the first broken node's errors. */
bool ir_verify(Graph *g);

/* Text format (docs/ir.md): printed and parsed back to identical text. */
void ir_print(FILE *f, Graph *g);
/* ir_print's text as one malloc'd string, or NULL out of memory. */
char *ir_print_text(Graph *g);
Graph *ir_parse(Ctx *c, const SrcFile *file); /* NULL after reporting errors */
/* ir_parse with a limit below IR_MAX_NODES, for tests and fuzzers. */
Graph *ir_parse_max(Ctx *c, const SrcFile *file, int max_nodes);
/* A copy of g in g's context through the text format, so the k-th value
 * of g is the k-th of the copy; `name` is the file name its locations
 * get.  NULL after reporting errors (none for a verified g) or when out
 * of memory. */
Graph *ir_copy(Graph *g, const char *name);

/* For an integer value read as indices (gather, gather_elements,
 * gather_nd, scatter_elements, scatter_nd, through reshapes, transposes,
 * expands, slices and casts): the smallest extent any of those reads
 * it against, so [0, bound) is valid everywhere; 0 when none does.
 * Moves are followed 8 deep and 64 in all. */
int64_t ir_index_bound(const Graph *g, const Value *v);
/* Carries each nonzero's count through the ops after it to the graph's
 * outputs (ir/bounds.c, docs/ir.md "Run-time lengths"): every output
 * it reaches gets its length output, and the indices a gather reads
 * from it are masked to 0 past the count.  An op that would mix the
 * padding into real rows is a located error.  Importers call it last. */
bool ir_bounds(Graph *g);
/* ---- cost (cost.c, docs/cost.md) ---- */

/* The least work computing some nodes takes: arithmetic operations (a
 * multiply-add counts 2, any dtype) and bytes moved (each operand read
 * once, each result written once, at their dtypes).  Doubles: exact for
 * integers below 2^53, and no product of dims overflows. */
typedef struct IrCost {
  double flops, bytes;
} IrCost;

IrCost ir_cost(const Node *n);
/* Nodes one kernel computes, in graph order: FLOPs summed; bytes are
 * what the set reads from outside plus the last node's results, so the
 * values passed between them move nothing. */
IrCost ir_cost_fused(const Node *const *nodes, int count);
/* Whether op has a row in the cost table (a test walks ops.def). */
bool ir_cost_has_rule(OpKind op);

/* --emit=dot (docs/ir.md): weights folded into the node that uses them,
 * a cluster per scope, optionally a node per fusion group. */
typedef struct IrDotOptions {
  int depth;    /* scopes nested deeper than this are one node each; -1: none */
  bool kernels; /* one node per fusion group (Node.group), not per op */
  /* By node id (ir_number's): lines the node that draws it shows (a
   * kernel's launch and bytes); NULL, or NULL entries: none. */
  const char *const *notes;
} IrDotOptions;
void ir_print_dot(FILE *f, Graph *g); /* depth -1, one node per op */
void ir_print_dot_opts(FILE *f, Graph *g, const IrDotOptions *o);

#endif
