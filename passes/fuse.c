/* Fusion: takes a verified graph, returns it with Node.group set so that
 * each group becomes one kernel in codegen (codegen/fuse_lower.c).  The
 * graph itself is not rewritten; `--print-after=fuse` shows the groups as
 * "#kN" after each member's types.
 *
 * A group has one root (its last node, the only one whose value is
 * stored) and at most one anchor: a reduction (softmax, layernorm,
 * rms_norm, group_norm, reduce_*, global_avgpool), a window (pooling), a
 * convolution or a pool's gradient (an epilogue only), the loop nest the
 * rest is fused into.
 *   - elementwise ops (broadcasting operands, batchnorm as a per-channel
 *     map, consts as immediates) and data movement (reshape, transpose,
 *     slice, expand: an index remapping) are evaluated at the element
 *     being computed;
 *   - producers of an anchor's input are evaluated inside its loads
 *     (prologue); elementwise consumers of the anchor with its shape are
 *     evaluated at its store (epilogue);
 *   - matmul and linear stay cuBLAS GEMMs that write their own buffer: in
 *     a group they are leaves read by the kernel, and linear's bias is
 *     added where the kernel reads it, so GEMM + bias + activation +
 *     residual add is one GEMM and one kernel;
 *   - int8 (passes/quantize.c): quantize and dequantize are elementwise
 *     members, an int8 conv2d (i8 operands, i32 result) an anchor and
 *     int8 linear/matmul leaves, so quantize + conv + dequantize + bias +
 *     relu + requantize is one kernel that stores i8.
 *
 * Side outputs: an elementwise member with the root's elements (its
 * dims, size-1 dims aside) may have uses outside the group (or be a
 * graph output) when every such use is computed after the root (by a
 * later node, or in a group whose root is later); the kernel stores it
 * too, at the element it stores the root's (an epilogue's at the
 * anchor's store, never a prologue's), so a value that both the
 * forward and a training step's backward read (an LSTM's gates, a
 * normalized activation) costs no launch of its own.  Such uses cannot
 * feed the group, so no path leaves it and comes back.
 *
 * Then maps of one shape with no path between them (a batchnorm's
 * inverse deviation and its two new running statistics) are joined
 * into the later one's kernel, the earlier's values its side outputs;
 * and reductions over the same rows with no path between them
 * (ir_reduce_siblings: a batchnorm's two gradient sums) into the later
 * one's, an accumulator each.  Last, a map over the rows that reads such
 * reductions' results takes them in as its anchor and siblings, the map
 * their epilogue (a batchnorm's variance and new running statistics
 * from its sums).
 *
 * What is never done: a value is never computed by two kernels (the
 * copies passes/remat.c makes for that are nodes of their own): a
 * member used outside is stored by its group's kernel, and a member
 * read by a GEMM or a prologue elsewhere is not taken in.  A function
 * of the weights alone (params and consts, never an input) is never
 * inside a group whose root is not one: codegen computes
 * those once after the weights are set (codegen/initgraph.c), and a
 * run's kernel loads the result instead of recomputing it.  Inside one kernel cheap work may repeat: an elementwise
 * member broadcast to a larger root is evaluated per element of the
 * root, and a prologue member once per load (three times per element in
 * softmax and layernorm, once per window tap in pooling and convolution).
 * That is elementwise arithmetic on values loaded anyway, never a GEMM,
 * a reduction or a window.
 *
 * Nodes of an If's branches (Node.guard, ir/guard.c) join only groups
 * of their own guard, so that a plan can skip a branch's kernels, and
 * each guard's condition is stored (a plan's branch reads it).
 *
 * Greedy, from the last node back: each node not yet in a group roots
 * one and absorbs producers in decreasing order, so every consumer of a
 * candidate has been decided when the candidate is. */
#include <assert.h>
#include <string.h>

#include "passes/pass.h"

enum { MAX_MEMBERS = 64 };
static_assert((int)MAX_MEMBERS <= (int)IR_MAX_GROUP, "the verifier accepts the groups fuse makes");

typedef enum { ROLE_EPI = 1, ROLE_PRO = 2 } Role;

typedef struct Fuser {
  Graph *g;
  Node **node_of;   /* by Node.id */
  int *use_start;   /* CSR over value ids: consumers' node ids */
  int *uses;
  bool *is_output;  /* by value id */
  int *mark;        /* by node id: the group being built when a member */
  int *role;        /* by node id: Role bits of a candidate's uses */
  int *heap, n_heap;
  bool *attention;  /* by node id: a matmul of an attention (its operands are fused) */
  bool *weight_only; /* by node id: computed from params and consts alone */
  int *root_pos;    /* by group: its root's node id, where its kernel runs */
} Fuser;

/* Where a node's value is computed: at its group's root, or itself. */
static int emitted_at(const Fuser *f, const Node *n) { return n->group >= 0 ? f->root_pos[n->group] : n->id; }

/* The float types the fused lowering computes in (f16 and bf16 values
 * are loaded, computed on in f32 and rounded where they are stored). */
static bool is_float_type(const TensorType *t) {
  return t->dtype == TY_F32 || t->dtype == TY_F16 || t->dtype == TY_BF16;
}

static bool is_anchor_op(OpKind op) {
  switch (op) {
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM:
    case OP_GLOBAL_AVGPOOL:
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D:
    case OP_CONV2D:
    case OP_CONV3D:
    /* a gather per output element, or the tensor cores' implicit GEMM:
     * either stores through the group's epilogue */
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D:
    /* training kernels with one thread per result element: an epilogue
     * at their store (a relu's gradient after a pool's) */
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD: return true;
    default: return false;
  }
}

/* Anchors whose kernels read their operands from memory (no prologue). */
static bool reads_memory_only(OpKind op) { return op == OP_MAXPOOL_GRAD || op == OP_AVGPOOL_GRAD; }

static bool is_leaf_op(OpKind op) { return op == OP_MATMUL || op == OP_LINEAR; }

/* A pad's operand is evaluated under its bounds test (only where it
 * falls inside), and a concat's operands each under the test of its
 * range, so the group holds no attention below either. */
static bool is_index_move(OpKind op) {
  return op == OP_RESHAPE || op == OP_TRANSPOSE || op == OP_SLICE || op == OP_EXPAND || op == OP_PAD ||
         op == OP_CONCAT;
}

static bool evaluated_under_test(OpKind op) { return op == OP_PAD || op == OP_CONCAT; }

bool pass_is_int_arith(const Node *n) {
  switch (n->op) {
    case OP_NEG:
    case OP_ABS:
    case OP_RELU:
    case OP_CLIP:
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_MAXIMUM:
    case OP_MINIMUM: break;
    default: return false;
  }
  DType dt = n->out[0].type.dtype;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->type.dtype != dt) return false;
  return dt == TY_I8 || dt == TY_U8 || dt == TY_I32 || dt == TY_I64;
}

/* The int8 members the fused lowering handles: quantize (float to i8 or
 * u8), dequantize and cast (i8, u8 or i32 to float), int8 products (i8
 * operands, an i32 result and bias), integer arithmetic and index moves
 * of i8 and u8. */
static bool int8_types_ok(const Node *n) {
  DType in0 = n->in[0]->type.dtype, out = n->out[0].type.dtype;
  if (pass_is_int_arith(n)) return true;
  switch (n->op) {
    case OP_QUANTIZE: return is_float_type(&n->in[0]->type);
    case OP_DEQUANTIZE: return in0 == TY_I8 || in0 == TY_U8 || in0 == TY_I32;
    /* The correction term's sum of int8 weights reads them as floats. */
    case OP_CAST: return (in0 == TY_I8 || in0 == TY_U8 || in0 == TY_I32) && is_float_type(&n->out[0].type);
    case OP_CONV2D:
    case OP_MATMUL:
    case OP_LINEAR:
      return in0 == TY_I8 && n->in[1]->type.dtype == TY_I8 && out == TY_I32 &&
             (n->n_in < 3 || n->in[2]->type.dtype == TY_I32);
    default: return is_index_move(n->op) && (in0 == TY_I8 || in0 == TY_U8) && out == in0;
  }
}

/* The bool members the fused lowering handles: the tests, logic and
 * where (ops.def) on any dtype, casts to and from bool, index moves of
 * bools. */
static bool bool_types_ok(const Node *n) {
  DType in0 = n->in[0]->type.dtype, out = n->out[0].type.dtype;
  if (ir_op_is_logic(n->op)) return true;
  switch (n->op) {
    case OP_CAST: return in0 == TY_BOOL || out == TY_BOOL;
    default: return is_index_move(n->op) && in0 == TY_BOOL;
  }
}

/* Floats throughout (or int8 or bools as above) and not empty: what the
 * fused lowering handles. */
static bool types_ok(const Node *n) {
  for (int i = 0; i < n->n_out; i++)
    if (ir_type_numel(&n->out[i].type) <= 0) return false;
  bool floats = true;
  for (int i = 0; i < n->n_in; i++)
    if (!is_float_type(&n->in[i]->type)) floats = false;
  for (int i = 0; i < n->n_out; i++)
    if (!is_float_type(&n->out[i].type)) floats = false;
  return floats || (n->n_in > 0 && n->n_out == 1 && (int8_types_ok(n) || bool_types_ok(n)));
}

/* Which operands of a member its kernel reads through the fused
 * evaluation (the others are read from memory by a GEMM, or are params
 * an anchor indexes itself). */
/* A channels-last conv (passes/nhwc.c) reads its image from memory: a
 * producer evaluated in its loads would make the im2col operand
 * register-staged, where a stored one arrives by cp.async.  So its
 * channel pad is stored, and an int8 conv's quantize goes to the
 * producer's kernel (a side output beside the f32 residual) instead of
 * being redone at every tap of the consumer's loads.  Except at a
 * region's entry: elementwise ops over the transpose to NHWC are
 * register-staged either way, and in the loads they cost no kernel of
 * their own (the nhwc pass's rule counts on that). */
static bool reads_region_entry(const Node *d) {
  for (int depth = 0; depth < 8; depth++) {
    if (d->op == OP_TRANSPOSE) return true;
    if (ir_ops[d->op].cls != K_ELEMWISE || d->n_in < 1) return false;
    d = d->in[0]->def;
  }
  return false;
}

static bool operand_fusible(const Fuser *f, const Node *m, int i) {
  if (m->op == OP_LINEAR) return i == 2;
  if (m->op == OP_MATMUL) return f->attention[m->id];
  /* (a depthwise one has a kernel of its own that stages its input tile
   * itself, codegen/conv_depthwise.c: a producer in its loads costs no
   * cp.async) */
  if (i == 0 && ir_conv_nhwc(m) && !ir_conv_depthwise(m))
    return reads_region_entry(m->in[0]->def);
  if (m->op == OP_CONV2D || m->op == OP_CONV3D || m->op == OP_CONV_TRANSPOSE2D || m->op == OP_CONV_TRANSPOSE3D)
    return true;
  if (reads_memory_only(m->op)) return false;
  if (is_anchor_op(m->op)) return i == 0;
  return true;
}

static void heap_push(Fuser *f, int id) {
  int i = f->n_heap++;
  f->heap[i] = id;
  while (i > 0 && f->heap[(i - 1) / 2] < f->heap[i]) {
    int p = (i - 1) / 2, t = f->heap[p];
    f->heap[p] = f->heap[i];
    f->heap[i] = t;
    i = p;
  }
}

static int heap_pop(Fuser *f) {
  int top = f->heap[0];
  f->heap[0] = f->heap[--f->n_heap];
  for (int i = 0;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < f->n_heap && f->heap[l] > f->heap[m]) m = l;
    if (r < f->n_heap && f->heap[r] > f->heap[m]) m = r;
    if (m == i) break;
    int t = f->heap[m];
    f->heap[m] = f->heap[i];
    f->heap[i] = t;
    i = m;
  }
  return top;
}

enum { MAX_SIDE = 8 };

/* The same elements at the same linear index: dims equal once the 1s
 * are dropped ([1, C, 1, 1] and [C]), so a side output is stored at the
 * root's index. */
static bool same_layout(const TensorType *a, const TensorType *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < b->rank && b->dims[j] == 1) j++;
    if (i == a->rank || j == b->rank) return i == a->rank && j == b->rank;
    if (a->dims[i++] != b->dims[j++]) return false;
  }
}

/* Every use of n's results is a member of group gid that evaluates it in
 * the kernel (not a GEMM reading memory), none is an output. */
static bool uses_inside(const Fuser *f, const Node *n, int gid) {
  for (int r = 0; r < n->n_out; r++) {
    const Value *val = &n->out[r];
    int v = val->id;
    if (f->is_output[v]) return false;
    for (int u = f->use_start[v]; u < f->use_start[v + 1]; u++) {
      const Node *user = f->node_of[f->uses[u]];
      if (f->mark[user->id] != gid) return false;
      for (int i = 0; i < user->n_in; i++)
        if (user->in[i] == val && !operand_fusible(f, user, i)) return false;
    }
  }
  return true;
}

/* n may join group gid (rooted at root) as a side output: elementwise
 * with the root's elements, reached from the root's side of an anchor, and
 * every use that the group does not evaluate comes after the root. */
static bool side_output_ok(const Fuser *f, const Node *n, const Node *root, int gid, int role) {
  if (ir_ops[n->op].cls != K_ELEMWISE || n->n_out != 1 || (role & ROLE_PRO) || f->weight_only[root->id] ||
      !same_layout(&n->out[0].type, &root->out[0].type))
    return false;
  const Value *val = &n->out[0];
  for (int u = f->use_start[val->id]; u < f->use_start[val->id + 1]; u++) {
    const Node *user = f->node_of[f->uses[u]];
    if (f->mark[user->id] != gid) {
      if (emitted_at(f, user) <= root->id) return false;
      continue;
    }
    for (int i = 0; i < user->n_in; i++)
      if (user->in[i] == val && !operand_fusible(f, user, i)) return false;
  }
  return true;
}

static void push_operands(Fuser *f, const Node *m, int gid, int role) {
  for (int i = 0; i < m->n_in; i++) {
    if (!operand_fusible(f, m, i)) continue;
    const Node *d = m->in[i]->def;
    if (d->group >= 0 || f->mark[d->id] == gid) continue;
    int r = is_anchor_op(m->op) ? ROLE_PRO : role;
    if (!f->role[d->id]) heap_push(f, d->id);
    f->role[d->id] |= r;
  }
}

static bool single_use(const Fuser *f, const Value *v) {
  return !f->is_output[v->id] && f->use_start[v->id + 1] - f->use_start[v->id] == 1;
}

/* p, an elementwise producer of some anchor's input, sits on a chain of
 * single-use elementwise ops of its shape over another anchor: then it
 * is better that anchor's epilogue (computed once per element) than this
 * one's prologue (computed once per load). */
static bool better_as_epilogue(const Fuser *f, const Node *p, int depth) {
  if (depth > 16) return false;
  for (int i = 0; i < p->n_in; i++) {
    const Node *d = p->in[i]->def;
    if (d->group >= 0 || d->n_out != 1 || !single_use(f, &d->out[0]) || !types_ok(d) ||
        !ir_dims_eq(&d->out[0].type, &p->out[0].type))
      continue;
    if (is_anchor_op(d->op)) return true;
    if (ir_ops[d->op].cls == K_ELEMWISE && better_as_epilogue(f, d, depth + 1)) return true;
  }
  return false;
}

static bool can_root(const Node *n) {
  if (n->n_out != 1 || !types_ok(n)) return false;
  OpClass cls = ir_ops[n->op].cls;
  if (cls == K_ELEMWISE || is_anchor_op(n->op) || is_leaf_op(n->op)) return true;
  /* A reshape of a computed value is free (it aliases the bytes), so a
   * group never ends in one.  Nor in a concat: it would take producers
   * of a smaller shape away from the groups they root, where the values
   * the backward keeps are side outputs (an LSTM step's h joined into
   * the sequence); a concat joins the group of what reads it. */
  return is_index_move(n->op) && n->op != OP_RESHAPE && n->op != OP_CONCAT;
}

/* Attention: matmul(softmax(f(matmul(Q, K))), V) over the last axis, f a
 * chain of elementwise ops (a scale, a mask), every link used once and
 * the batch dims equal.  The group's kernel computes each output element
 * with a max pass and a sum pass over the scores, so the scores and the
 * probabilities are never stored.  Returns the nodes from the softmax
 * down to the first matmul (chain[0] = softmax), then the cast after the
 * softmax if there is one, or 0. */
static int attention_chain(const Fuser *f, const Node *m2, Node **chain, int cap) {
  if (m2->op != OP_MATMUL || m2->out[0].type.rank < 2) return 0;
  /* The kernel sums the scores in f32: int8 products stay GEMMs. */
  if (!is_float_type(&m2->out[0].type)) return 0;
  const Node *sm = m2->in[0]->def;
  /* Mixed precision puts a cast between the f32 softmax and the f16
   * product: it comes along as the chain's last node. */
  const Node *cast = NULL;
  if (sm->op == OP_CAST && sm->group < 0 && single_use(f, &sm->out[0]) && types_ok(sm)) {
    cast = sm;
    sm = sm->in[0]->def;
  }
  if (sm->op != OP_SOFTMAX || sm->group >= 0 || !types_ok(sm)) return 0;
  int rank = sm->out[0].type.rank;
  if (ir_attr_int(sm, "axis") != rank - 1 && ir_attr_int(sm, "axis") != -1) return 0;
  int n = 0;
  const Node *at = sm;
  for (;;) {
    const Value *v = &at->out[0];
    int id = v->id;
    if (f->is_output[id] || f->use_start[id + 1] - f->use_start[id] != 1) return 0;
    if (n == cap) return 0;
    chain[n++] = (Node *)at;
    if (at != sm && at->op == OP_MATMUL) break;
    /* Down the one operand that is computed (not a const, param or input). */
    const Node *next = NULL;
    for (int i = 0; i < at->n_in; i++) {
      const Node *d = at->in[i]->def;
      if (ir_ops[d->op].cls == K_SOURCE) continue;
      if (next) return 0;
      next = d;
    }
    if (!next || next->group >= 0 || !types_ok(next)) return 0;
    if (next->op != OP_MATMUL && (ir_ops[next->op].cls != K_ELEMWISE || next->op == OP_BATCHNORM))
      return 0;
    if (next->op != OP_MATMUL && !ir_dims_eq(&next->out[0].type, &sm->out[0].type)) return 0;
    at = next;
  }
  const Node *m1 = chain[n - 1];
  if (!is_float_type(&m1->out[0].type)) return 0;
  /* The kernel reads Q, K and V in their own layouts. */
  for (int i = 0; i < 2; i++)
    if (ir_matmul_trans(m1, i) || ir_matmul_trans(m2, i)) return 0;
  const TensorType *q = &m1->in[0]->type, *k = &m1->in[1]->type, *vv = &m2->in[1]->type;
  const TensorType *s = &m1->out[0].type, *o = &m2->out[0].type;
  if (q->rank != rank || k->rank != rank || vv->rank != rank || s->rank != rank) return 0;
  for (int d = 0; d < rank - 2; d++)
    if (q->dims[d] != o->dims[d] || k->dims[d] != o->dims[d] || vv->dims[d] != o->dims[d]) return 0;
  if (cast) {
    if (n == cap) return 0;
    chain[n++] = (Node *)cast;
  }
  return n;
}

static void push_value(Fuser *f, const Value *v, int gid) {
  const Node *d = v->def;
  if (d->group >= 0 || f->mark[d->id] == gid) return;
  if (!f->role[d->id]) heap_push(f, d->id);
  f->role[d->id] |= ROLE_EPI;
}

/* When p is the second matmul of an attention, takes the chain into the
 * group and returns the softmax (the group's anchor); else NULL. */
static Node *absorb_attention(Fuser *f, Node *p, int gid, Node **members, int *n) {
  Node *chain[16];
  int len = attention_chain(f, p, chain, (int)ARRAY_LEN(chain));
  if (!len || *n + len > MAX_MEMBERS) return NULL;
  for (int i = 0; i < len; i++)
    if (f->weight_only[chain[i]->id] != f->weight_only[p->id] || chain[i]->guard != p->guard) return NULL;
  for (int i = 0; i < len; i++) {
    members[(*n)++] = chain[i];
    f->mark[chain[i]->id] = gid;
  }
  const Node *m1 = chain[len - 1]->op == OP_CAST ? chain[len - 2] : chain[len - 1];
  f->attention[p->id] = f->attention[m1->id] = true;
  /* Q, K, V and the chain's other operands are read by the kernel. */
  for (int i = 0; i < len; i++)
    for (int j = 0; j < chain[i]->n_in; j++) push_value(f, chain[i]->in[j], gid);
  push_value(f, p->in[1], gid);
  return chain[0];
}

/* Grows a group from root; returns its size (members get group gid). */
static int grow(Fuser *f, Node *root, int gid) {
  Node *members[MAX_MEMBERS];
  int n = 0, n_side = 0;
  members[n++] = root;
  f->mark[root->id] = gid;
  Node *anchor = is_anchor_op(root->op) ? root : NULL;
  bool padded = evaluated_under_test(root->op), joins = root->op == OP_CONCAT;
  f->n_heap = 0;
  push_operands(f, root, gid, ROLE_EPI);
  if (!anchor) anchor = absorb_attention(f, root, gid, members, &n);
  while (f->n_heap > 0) {
    Node *p = f->node_of[heap_pop(f)];
    int role = f->role[p->id];
    f->role[p->id] = 0;
    if (n == MAX_MEMBERS || p->group >= 0 || f->mark[p->id] == gid) continue;
    if (p->n_out != 1 || !types_ok(p) || p->guard != root->guard) continue;
    if (f->weight_only[p->id] && !f->weight_only[root->id]) continue;
    bool side = !uses_inside(f, p, gid);
    if (side && (n_side == MAX_SIDE || !side_output_ok(f, p, root, gid, role))) continue;
    OpClass cls = ir_ops[p->op].cls;
    /* A GEMM leaf is emitted where its group is lowered: under a concat
     * (a bucket of gradients joined for one all-reduce) that would hold
     * every GEMM back to the last one's place, so there they stay GEMMs
     * of their own, read from memory. */
    bool take = cls == K_ELEMWISE || is_index_move(p->op) || (is_leaf_op(p->op) && !joins);
    if (take && (role & ROLE_PRO) && cls == K_ELEMWISE && better_as_epilogue(f, p, 0)) take = false;
    if (!take && is_anchor_op(p->op) && !anchor && role == ROLE_EPI &&
        ir_dims_eq(&p->out[0].type, &root->out[0].type)) {
      /* The epilogue runs at the anchor's store, element for element:
       * only elementwise members of its shape may lie between. */
      take = true;
      for (int i = 0; i < n && take; i++)
        take = ir_ops[members[i]->op].cls == K_ELEMWISE &&
               ir_dims_eq(&members[i]->out[0].type, &p->out[0].type);
      if (take) anchor = p;
    }
    if (!take) continue;
    n_side += side;
    members[n++] = p;
    f->mark[p->id] = gid;
    push_operands(f, p, gid, role);
    padded = padded || evaluated_under_test(p->op);
    joins = joins || p->op == OP_CONCAT;
    if (!anchor && !padded) anchor = absorb_attention(f, p, gid, members, &n);
  }
  /* Clear the roles of candidates left in the heap. */
  while (f->n_heap > 0) f->role[heap_pop(f)] = 0;
  /* A convolution alone is still its own kernel (an implicit GEMM
   * instead of im2col + GEMM), so it keeps a group of one. */
  bool keep = n > 1 || root->op == OP_CONV2D || root->op == OP_CONV3D;
  for (int i = 0; i < n; i++) {
    if (keep)
      members[i]->group = gid;
    else
      f->mark[members[i]->id] = -1;
  }
  return keep ? n : 0;
}

/* ---- horizontal: independent maps of one shape in one kernel ---- */

enum { WINDOW = 64 }; /* earlier maps a map looks back at */

/* A kernel that maps over its root's elements: a group with no anchor
 * and no GEMM leaf (a GEMM with its epilogue costs no launch of its
 * own), or an elementwise node alone.  Returns its member count, or 0. */
static int map_size(const Fuser *f, const Node *root, int *const *members, const int *count) {
  if (root->group < 0)
    return ir_ops[root->op].cls == K_ELEMWISE && can_root(root) && !f->is_output[root->out[0].id] ? 1 : 0;
  int gid = root->group;
  for (int i = 0; i < count[gid]; i++) {
    const Node *m = f->node_of[members[gid][i]];
    if (is_anchor_op(m->op) || is_leaf_op(m->op)) return 0;
  }
  return count[gid];
}

/* The i-th of the size_of members of the group rooted at r (r alone:
 * one, itself). */
static const Node *member(const Fuser *f, const Node *r, int *const *members, int i) {
  return r->group < 0 ? r : f->node_of[members[r->group][i]];
}

static int size_of(const Node *r, const int *count) { return r->group < 0 ? 1 : count[r->group]; }

/* The side outputs the group rooted at r has already: members used
 * outside it, the root aside. */
static int sides_of(const Fuser *f, const Node *r, int *const *members, const int *count) {
  int sides = 0;
  for (int k = 0; k < size_of(r, count) - 1; k++)
    sides += !uses_inside(f, member(f, r, members, k), r->group);
  return sides;
}

/* B (rooted at rb) may be computed in A's kernel (rooted at ra, later):
 * its root is elementwise of ra's shape, and each of its values read
 * outside B is read after ra, or inside A by its kernel.  Counts B's
 * stored values into *sides. */
static bool may_join(const Fuser *f, const Node *rb, const Node *ra, int *const *members, const int *count,
                     int *sides) {
  if (ir_ops[rb->op].cls != K_ELEMWISE || !same_layout(&rb->out[0].type, &ra->out[0].type) ||
      f->weight_only[rb->id] || f->weight_only[ra->id] || rb->guard != ra->guard)
    return false;
  *sides = 0;
  for (int i = 0; i < size_of(rb, count); i++) {
    const Node *m = member(f, rb, members, i);
    const Value *val = &m->out[0];
    bool outside = f->is_output[val->id];
    for (int u = f->use_start[val->id]; u < f->use_start[val->id + 1]; u++) {
      const Node *user = f->node_of[f->uses[u]];
      if (rb->group >= 0 && user->group == rb->group) continue;
      outside = true;
      if (emitted_at(f, user) > ra->id) continue;
      if (ra->group < 0 || user->group != ra->group) return false;
      for (int j = 0; j < user->n_in; j++)
        if (user->in[j] == val && !operand_fusible(f, user, j)) return false;
    }
    *sides += outside;
  }
  return true;
}

enum { MAX_SIBLINGS = 4 }; /* reductions a kernel computes side by side */

/* A reduction rooting its group with no epilogue (or standing alone),
 * with the reductions already joined to it: its member count, or 0. */
static int reduce_size(const Fuser *f, const Node *root, int *const *members, const int *count, int *reductions) {
  if (!ir_reduce_siblings(root, root) || !can_root(root) || f->weight_only[root->id]) return 0;
  if (root->group < 0) return *reductions = 1, 1;
  *reductions = 0;
  for (int i = 0; i < count[root->group]; i++) *reductions += is_anchor_op(f->node_of[members[root->group][i]]->op);
  return count[root->group];
}

/* Whether v's bytes are kept until the node at position `at` anyway: an
 * input, param or const, a graph output, or read there or later. */
static bool live_at(const Fuser *f, const Value *v, int at) {
  OpClass cls = ir_ops[v->def->op].cls;
  if (cls == K_SOURCE || f->is_output[v->id]) return true;
  for (int u = f->use_start[v->id]; u < f->use_start[v->id + 1]; u++)
    if (emitted_at(f, f->node_of[f->uses[u]]) >= at) return true;
  return false;
}

/* B (rooted at the reduction rb) may be computed in A's kernel (rooted
 * at ra, later): the same rows (ir_reduce_siblings), B's result read
 * only after ra, the rest of B only inside B (its loads), and what B
 * reads from memory kept until ra anyway, so that a launch saved never
 * costs a buffer held longer (the peak the memory planner reaches). */
static bool may_join_reduction(const Fuser *f, const Node *rb, const Node *ra, int *const *members,
                               const int *count) {
  if (!ir_reduce_siblings(rb, ra) || rb->guard != ra->guard) return false;
  for (int i = 0; i < size_of(rb, count); i++) {
    const Node *m = member(f, rb, members, i);
    const Value *val = &m->out[0];
    if (m != rb && f->is_output[val->id]) return false;
    for (int u = f->use_start[val->id]; u < f->use_start[val->id + 1]; u++) {
      const Node *user = f->node_of[f->uses[u]];
      if (m != rb ? rb->group < 0 || user->group != rb->group : emitted_at(f, user) <= ra->id) return false;
    }
    for (int k = 0; k < m->n_in; k++) {
      const Node *d = m->in[k]->def;
      if ((rb->group < 0 || d->group != rb->group) && !live_at(f, m->in[k], ra->id)) return false;
    }
  }
  return true;
}

/* B's members join A's group (created when A stands alone), B's first
 * so that A's root stays last.  Returns the new provisional count. */
static int merge_groups(Fuser *f, Node *ra, Node *rb, int bsize, int **members, int *count, int provisional,
                        int *n_fused) {
  Arena *a = &f->g->ctx->arena;
  if (ra->group < 0) {
    ra->group = f->mark[ra->id] = provisional;
    f->root_pos[provisional] = ra->id;
    members[provisional] = ARENA_ARRAY(a, int, MAX_MEMBERS + 1);
    members[provisional][0] = ra->id;
    count[provisional++] = 1;
    *n_fused += 1;
  }
  int gid = ra->group;
  int *into = ARENA_ARRAY(a, int, MAX_MEMBERS + 1);
  int n = 0;
  for (int k = 0; k < bsize; k++) into[n++] = rb->group < 0 ? rb->id : members[rb->group][k];
  for (int k = 0; k < count[gid]; k++) into[n++] = members[gid][k];
  *n_fused += rb->group < 0 ? 1 : 0;
  if (rb->group >= 0) count[rb->group] = 0;
  for (int k = 0; k < bsize; k++) f->node_of[into[k]]->group = f->mark[into[k]] = gid;
  members[gid] = into;
  count[gid] = n;
  return provisional;
}

/* The root of the group of node m, or m when it stands alone. */
static Node *root_of(const Fuser *f, const Node *m, int *const *members, const int *count) {
  return m->group < 0 ? f->node_of[m->id] : f->node_of[members[m->group][count[m->group] - 1]];
}

/* A map over a reduction's rows (rooted at ra) that reads the results of
 * the reductions of one group (rooted at the reduction rb, earlier: rb
 * and its siblings): that root, or NULL.  Each member of the map is
 * elementwise or a reshape with as many elements as rb has rows, so an
 * operand a reduction gives is read at the element being computed (no
 * broadcast can reorder equal counts): a batchnorm's variance and new
 * running statistics from its sums. */
static Node *rows_map_source(const Fuser *f, const Node *ra, int *const *members, const int *count) {
  Node *rb = NULL;
  for (int i = 0; i < size_of(ra, count); i++) {
    const Node *m = member(f, ra, members, i);
    if (ir_ops[m->op].cls != K_ELEMWISE && m->op != OP_RESHAPE) return NULL;
    for (int j = 0; j < m->n_in; j++) {
      const Node *d = m->in[j]->def;
      if (d == ra || (ra->group >= 0 && d->group == ra->group) || !ir_reduce_siblings(d, d)) continue;
      Node *r = root_of(f, d, members, count);
      if (rb && r != rb) return NULL;
      rb = r;
    }
  }
  if (!rb || !ir_reduce_siblings(rb, rb) || rb->id > ra->id) return NULL;
  int64_t rows = ir_type_numel(&rb->out[0].type);
  for (int i = 0; i < size_of(ra, count); i++)
    if (ir_type_numel(&member(f, ra, members, i)->out[0].type) != rows) return NULL;
  return rb;
}

/* The reductions of rb's group may move into the map ra's kernel as its
 * anchor and siblings (the map their epilogue): the map reads nothing
 * else of the group (its loads' members stay the group's), every other
 * use of the reductions' results runs after ra, and what the group
 * reads from memory is kept until ra anyway (as in may_join_reduction:
 * a launch saved never holds a buffer longer).  Counts the results
 * stored beside the root. */
static bool may_take_reductions(const Fuser *f, const Node *rb, const Node *ra, int *const *members,
                                const int *count, int *stored) {
  if (rb->guard != ra->guard || f->weight_only[ra->id] || f->weight_only[rb->id]) return false;
  for (int i = 0; i < size_of(ra, count); i++) {
    const Node *m = member(f, ra, members, i);
    for (int j = 0; j < m->n_in; j++) {
      const Node *d = m->in[j]->def;
      if (rb->group >= 0 && d->group == rb->group && !ir_reduce_siblings(d, d)) return false;
    }
  }
  *stored = 0;
  for (int i = 0; i < size_of(rb, count); i++) {
    const Node *m = member(f, rb, members, i);
    if (ir_reduce_siblings(m, m)) {
      const Value *val = &m->out[0];
      bool outside = f->is_output[val->id];
      for (int u = f->use_start[val->id]; u < f->use_start[val->id + 1]; u++) {
        const Node *user = f->node_of[f->uses[u]];
        if (user == ra || (ra->group >= 0 && user->group == ra->group)) continue;
        if (emitted_at(f, user) <= ra->id) return false;
        outside = true;
      }
      *stored += outside;
    }
    for (int k = 0; k < m->n_in; k++) {
      const Node *d = m->in[k]->def;
      if ((rb->group < 0 || d->group != rb->group) && !live_at(f, m->in[k], ra->id)) return false;
    }
  }
  return true;
}

/* Maps of a reduction's rows take in the reductions they read (above):
 * the reductions' kernel evaluates the map where it stores, and the map
 * costs no launch of its own.  Returns the new provisional count. */
static int join_rows_maps(Fuser *f, int **members, int *count, int provisional, int *n_fused) {
  for (Node *ra = f->g->first; ra; ra = ra->next) {
    if (root_of(f, ra, members, count) != ra) continue;
    int size = map_size(f, ra, members, count), reductions, stored;
    Node *rb = size ? rows_map_source(f, ra, members, count) : NULL;
    int bsize = rb ? reduce_size(f, rb, members, count, &reductions) : 0;
    if (!bsize || size + bsize > MAX_MEMBERS || !may_take_reductions(f, rb, ra, members, count, &stored))
      continue;
    if (sides_of(f, ra, members, count) + stored > MAX_SIDE) continue;
    provisional = merge_groups(f, ra, rb, bsize, members, count, provisional, n_fused);
  }
  return provisional;
}

/* Maps of one shape with no path between them share one kernel, rooted
 * at the later: the earlier's stored values become side outputs (a
 * batchnorm's new running statistics and its inverse deviation, all
 * per channel).  So do reductions over the same rows (sibling
 * reductions: a batchnorm's two gradient sums, a loss's sum and
 * count), each row's accumulators side by side.  Returns the new group
 * count. */
static int join_maps(Fuser *f, int provisional, int *n_fused) {
  Graph *g = f->g;
  Arena *a = &g->ctx->arena;
  int n_nodes = 0;
  for (Node *n = g->first; n; n = n->next) n_nodes++;
  /* Members by group, filled in list order; room for groups made here. */
  int cap = provisional + n_nodes + 1;
  int *count = ARENA_ARRAY(a, int, cap), **members = ARENA_ARRAY(a, int *, cap);
  for (Node *n = g->first; n; n = n->next)
    if (n->group >= 0) count[n->group]++;
  for (int i = 0; i < provisional; i++) members[i] = ARENA_ARRAY(a, int, count[i] + 1), count[i] = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->group >= 0) members[n->group][count[n->group]++] = n->id;
  /* The maps' and the reductions' roots in list order. */
  Node **roots = ARENA_ARRAY(a, Node *, n_nodes + 1);
  int n_roots = 0, unused;
  for (Node *n = g->first; n; n = n->next) {
    bool is_root = n->group < 0 || members[n->group][count[n->group] - 1] == n->id;
    if (is_root && (map_size(f, n, members, count) || reduce_size(f, n, members, count, &unused))) roots[n_roots++] = n;
  }
  bool *gone = ARENA_ARRAY(a, bool, n_roots + 1);
  for (int i = n_roots - 1; i > 0; i--) {
    if (gone[i]) continue;
    Node *ra = roots[i];
    int reductions = 0, size = map_size(f, ra, members, count), sides = ra->group < 0 ? 0 : MAX_SIDE;
    bool reduce = size == 0;
    if (reduce) size = reduce_size(f, ra, members, count, &reductions);
    if (ra->group >= 0 && !reduce) sides = sides_of(f, ra, members, count);
    for (int j = i - 1; j >= 0 && j >= i - WINDOW; j--) {
      Node *rb = roots[j];
      int bs = 0, bred = 0;
      int bsize = reduce ? reduce_size(f, rb, members, count, &bred) : map_size(f, rb, members, count);
      if (gone[j] || !bsize || size + bsize > MAX_MEMBERS) continue;
      if (reduce ? reductions + bred > MAX_SIBLINGS || !may_join_reduction(f, rb, ra, members, count)
                 : !may_join(f, rb, ra, members, count, &bs) || sides + bs > MAX_SIDE)
        continue;
      provisional = merge_groups(f, ra, rb, bsize, members, count, provisional, n_fused);
      size += bsize;
      sides += bs;
      reductions += bred;
      gone[j] = true;
    }
  }
  return join_rows_maps(f, members, count, provisional, n_fused);
}

bool pass_fuse(Graph *g, PassCtx *pc) {
  Arena *a = &g->ctx->arena;
  ir_guards_fix(g); /* the passes before may have merged across branches */
  ir_number(g);
  int n_nodes = 0, n_values = 0;
  for (Node *n = g->first; n; n = n->next) {
    n_nodes++;
    n_values += n->n_out;
  }
  Fuser f = {.g = g};
  f.node_of = ARENA_ARRAY(a, Node *, n_nodes + 1);
  f.use_start = ARENA_ARRAY(a, int, n_values + 2);
  f.is_output = ARENA_ARRAY(a, bool, n_values + 1);
  f.mark = ARENA_ARRAY(a, int, n_nodes + 1);
  f.role = ARENA_ARRAY(a, int, n_nodes + 1);
  f.heap = ARENA_ARRAY(a, int, n_nodes * 4 + 8);
  f.attention = ARENA_ARRAY(a, bool, n_nodes + 1);
  f.weight_only = pass_weight_only(g);
  f.root_pos = ARENA_ARRAY(a, int, 2 * n_nodes + 2);
  int *old = ARENA_ARRAY(a, int, n_nodes + 1);
  int n_uses = 0;
  for (Node *n = g->first; n; n = n->next) {
    f.node_of[n->id] = n;
    old[n->id] = n->group;
    n->group = -1;
    f.mark[n->id] = -1;
    for (int i = 0; i < n->n_in; i++) f.use_start[n->in[i]->id + 1]++;
    n_uses += n->n_in;
  }
  for (int v = 0; v < n_values; v++) f.use_start[v + 1] += f.use_start[v];
  f.uses = ARENA_ARRAY(a, int, n_uses + 1);
  int *fill = ARENA_ARRAY(a, int, n_values + 1);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      int v = n->in[i]->id;
      f.uses[f.use_start[v] + fill[v]++] = n->id;
    }
  for (int i = 0; i < g->n_outputs; i++) f.is_output[g->outputs[i]->id] = true;
  /* A plan's branch reads its condition from memory. */
  for (Node *n = g->first; n; n = n->next)
    for (const Guard *gd = n->guard; gd; gd = gd->outer) f.is_output[gd->cond->id] = true;

  /* Build with provisional ids counting down, then number groups in the
   * order of their roots. */
  int provisional = 0, fused = 0;
  for (Node *n = g->last; n; n = n->prev)
    if (n->group < 0 && can_root(n)) {
      int size = grow(&f, n, provisional);
      if (size) {
        f.root_pos[provisional++] = n->id;
        fused += size;
      }
    }
  provisional = join_maps(&f, provisional, &fused);
  int *final = ARENA_ARRAY(a, int, provisional + 1);
  int next = 0;
  for (int i = 0; i < provisional; i++) final[i] = -1;
  /* Roots come last in their group, so walking backwards meets each root
   * first; ids then count from the front. */
  for (Node *n = g->last; n; n = n->prev)
    if (n->group >= 0 && final[n->group] < 0) final[n->group] = next++;
  /* (join_maps emptied the groups it joined.) */
  bool changed = false;
  for (Node *n = g->first; n; n = n->next) {
    if (n->group >= 0) n->group = next - 1 - final[n->group];
    if (n->group != old[n->id]) changed = true;
  }
  if (pc) {
    pass_stat(pc, "fusion groups", next);
    pass_stat(pc, "fused ops", fused);
  }
  return changed;
}
