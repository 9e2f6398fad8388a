/* Gradient rules, one per op of ops.def (grad.c): what reverse-mode
 * autodiff (passes/autodiff.c) asks of an op.  A rule takes a forward
 * node and the gradients of its results and appends, at the end of the
 * graph, the nodes of the vector-Jacobian product for each operand that
 * needs one.  docs/training.md says which ops have rules and why. */
#ifndef DLCC_IR_GRAD_H
#define DLCC_IR_GRAD_H

#include "ir.h"

typedef struct GradCall {
  Graph *g;
  const Node *n;    /* the forward node; its location goes on every node built */
  Value *const *dy; /* per result: its gradient (its type), or NULL: none reaches it */
  const bool *need; /* per operand: build its gradient */
  Value **dx;       /* per operand: set to the gradient (the operand's type) */
} GradCall;

typedef struct GradRule {
  /* NULL: the op has no rule (yet); a gradient that must flow through it
   * is an error.  Otherwise sets dx[i] for every needed operand i. */
  void (*vjp)(GradCall *c);
  /* Operands no gradient flows into by definition (bit i: operand i):
   * batchnorm's running statistics.  Integer and bool operands never
   * carry gradients either. */
  unsigned stops;
  /* The derivative is zero wherever it exists (round, sign, the
   * comparisons): no gradient flows through the op at all. */
  bool zero;
  /* NULL, or for a node the rule does not cover (an attribute it lacks)
   * what to call it in the error: "gather_nd with batch_dims". */
  const char *(*lacks)(const Node *n);
} GradRule;

extern const GradRule ir_grad_rules[OP_COUNT];

/* Builders the rules share, public for the autodiff pass: each appends a
 * node at the end of g at loc, with its type inferred (an internal error
 * when the shape rule refuses: a rule's bug). */
Value *ir_grad_op(Graph *g, SrcLoc loc, OpKind op, int n_in, Value *const *in);
/* n (made with ir_node_new, attributes set) with defaults filled and
 * its type inferred, appended; its first result. */
Value *ir_grad_node(Graph *g, Node *n);
Value *ir_grad_op2(Graph *g, SrcLoc loc, OpKind op, Value *a, Value *b);
/* A splat const of v's dtype, rank 0. */
Value *ir_grad_scalar(Graph *g, SrcLoc loc, double v, DType dt);
Value *ir_grad_reshape(Graph *g, SrcLoc loc, Value *x, int rank, const int64_t *dims);
/* Sums over axes (ascending); keepdims as reduce_sum's. */
Value *ir_grad_sum(Graph *g, SrcLoc loc, Value *x, int n_axes, const int64_t *axes, bool keepdims);
Value *ir_grad_mean(Graph *g, SrcLoc loc, Value *x, int n_axes, const int64_t *axes, bool keepdims);

#endif
