/* Mixed precision: takes a verified f32 graph and the precision asked for
 * (PassOptions.precision: f16 or bf16), returns it rewritten so that
 * activations and weights flow in that type, with `cast` nodes where a
 * value changes type.  The first of the precision passes; int8
 * quantization is meant to sit beside it with the same shape: a mode per
 * op, conversions on operands, the signature restored at the outputs.
 *
 * Each op gets one of three modes:
 *   low     computes in the low type: every float operand is converted
 *           to it (elementwise math, matmul, linear, conv2d, pooling,
 *           reduce_max/min);
 *   f32     numerically sensitive, computes in f32 and returns f32:
 *           softmax, log_softmax, layernorm, batchnorm, reduce_sum,
 *           reduce_mean, global_avgpool (sums), exp, log, pow,
 *           reciprocal, rsqrt, isinf (range: f16 overflows at 65504), lstm
 *           and gru (state carried over time), embedding_grad (a sum in
 *           place in its result), optim_update (a training step's update
 *           of its f32 params and state), allreduce_mean (a sum over
 *           the ranks; the communicators take f32); also every node marked
 *           #f32 (the language's precision="f32");
 *   follow  data movement, casts and argmax keep the type of their
 *           operands (concat of mixed types takes the lowest); so do
 *           softmax_xent and its gradient, which compute in f32 from
 *           any float type (the gradient's dy stays f32).
 * Every matrix product runs in the low type, even where its operand comes
 * from a graph input or from an op no kernel can fuse a conversion into
 * (an lstm, a gather, a concat, a pad): cuBLAS reads its operands from
 * memory, so that conversion is a kernel of its own, one pass over the
 * operand, which costs less than an f32 GEMM without tensor cores.
 * Params and inputs stay f32 (the weights file and the signature do not
 * change); a use in the low type reads a cast of them, one per value and
 * type.  So does work over the weights alone (at -O2 the pass runs after
 * bn-fold, whose folded weights are such work): it runs once at load, in
 * f32, and is cast where it is used, rounded once.  Consts are remade in
 * the type they are used in.  A conversion asked of a reshape's result is
 * made on its operand instead (a reshape is free, and the cast then fuses
 * with whatever produced the operand).  Graph outputs are cast back to
 * their declared types.
 *
 * Accumulation: matrix products and convolutions accumulate in f32 in
 * every kernel and in cuBLAS; the f32 ops above receive their operands
 * converted up, so reductions sum in f32.  Casts are elementwise, so the
 * fuse pass puts them in the kernels next to them; a cast of a param is
 * work over the weights only (see --stats: precision: cast kernels). */
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"

typedef enum { MODE_NONE, MODE_LOW, MODE_F32, MODE_FOLLOW } Mode;

static bool is_float(DType t) { return t == TY_F32 || t == TY_F16 || t == TY_BF16; }

/* Values already converted: (value, dtype) -> the converted value. */
typedef struct Memo {
  const Value *from;
  DType to;
  Value *value;
} Memo;

typedef struct Prec {
  Graph *g;
  DType low;
  Memo *memo;
  size_t cap, used;
  int casts, consts, kept;
} Prec;

static size_t memo_hash(const Value *v, DType t, size_t cap) {
  uintptr_t h = (uintptr_t)v * 0x9e3779b97f4a7c15ull;
  return (size_t)((h >> 17) ^ (uintptr_t)t) & (cap - 1);
}

static Memo *memo_slot(Prec *p, const Value *v, DType t) {
  if (2 * (p->used + 1) > p->cap) {
    Memo *old = p->memo;
    size_t oc = p->cap;
    p->cap = oc ? 2 * oc : 64;
    p->memo = ARENA_ARRAY(&p->g->ctx->arena, Memo, p->cap);
    for (size_t i = 0; i < oc; i++)
      if (old[i].from) *memo_slot(p, old[i].from, old[i].to) = old[i];
  }
  size_t h = memo_hash(v, t, p->cap);
  while (p->memo[h].from && (p->memo[h].from != v || p->memo[h].to != t)) h = (h + 1) & (p->cap - 1);
  return &p->memo[h];
}

static Node *cast_node(Graph *g, Node *before, Value *x, DType to, SrcLoc loc) {
  Node *c = ir_node_new(g, OP_CAST, 1, &x, loc);
  ir_set_dtype(g, c, "to", to);
  char err[256];
  if (!ir_infer(c, err, sizeof err)) dl_internal(g->ctx, "precision: bad cast: %s", err);
  ir_insert_before(g, before, c);
  return c;
}

static bool converted(Prec *p, const Value *v, DType to) {
  return v->type.dtype == to || !is_float(v->type.dtype) || memo_slot(p, v, to)->from;
}

static void remember(Prec *p, const Value *v, DType to, Value *r) {
  Memo *m = memo_slot(p, v, to);
  if (!m->from) p->used++;
  *m = (Memo){v, to, r};
}

/* v in dtype `to`, with nodes inserted before `before`.  A reshape
 * converts its operand and reshapes that; a chain of them (as long as
 * the graph, in a hostile file) is walked with a list, not recursion. */
static Value *convert(Prec *p, Value *v, DType to, Node *before) {
  Graph *g = p->g;
  Value **chain = NULL;
  int n = 0, cap = 0;
  Value *x = v;
  while (!converted(p, x, to) && x->def->op == OP_RESHAPE) {
    if (n == cap) {
      int bigger = cap ? 2 * cap : 16;
      chain = arena_realloc(&g->ctx->arena, chain, sizeof *chain * (size_t)cap, sizeof *chain * (size_t)bigger);
      cap = bigger;
    }
    chain[n++] = x;
    x = x->def->in[0];
  }
  Value *r;
  const Node *d = x->def;
  if (x->type.dtype == to || !is_float(x->type.dtype)) {
    r = x;
  } else if (memo_slot(p, x, to)->from) {
    r = memo_slot(p, x, to)->value;
  } else if (d->op == OP_CONST) {
    TensorType t = x->type;
    t.dtype = to;
    r = pass_new_const(g, before, ir_attr_float(d, "value"), &t, d->loc);
    p->consts++;
    remember(p, x, to, r);
  } else {
    r = &cast_node(g, before, x, to, d->loc)->out[0];
    p->casts++;
    remember(p, x, to, r);
  }
  while (n > 0) {
    Node *reshape = chain[--n]->def;
    r = &pass_new_node(g, before, OP_RESHAPE, 1, &r, reshape, reshape->loc)->out[0];
    remember(p, chain[n], to, r);
  }
  return r;
}

static Mode mode_of(const Node *n) {
  bool any_float = false;
  for (int i = 0; i < n->n_in; i++) any_float |= is_float(n->in[i]->type.dtype);
  if (!any_float) return MODE_NONE;
  if (n->keep_f32) return MODE_F32;
  switch (n->op) {
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM:
    case OP_BATCHNORM:
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_GLOBAL_AVGPOOL:
    case OP_EXP:
    case OP_LOG:
    case OP_POW:
    case OP_RECIPROCAL:
    case OP_RSQRT:
    case OP_ISINF: /* a finite f32 above 65504 is no inf */
    case OP_LSTM:
    case OP_GRU:
    case OP_LSTM_BPTT:
    case OP_GRU_BPTT:
    case OP_EMBEDDING_GRAD: /* sums in place in its result */
    case OP_OPTIM_UPDATE:
    case OP_ALLREDUCE_MEAN:
    case OP_ALLREDUCE_SUM:
    /* what they compare or count would change in f16: boxes' IoUs, values
     * that round together, values below f16's least */
    case OP_NMS:
    case OP_UNIQUE:
    case OP_NONZERO: return MODE_F32;
    case OP_FP_ROUND: /* e8m0's 2^-127 .. 2^127 need f32 */
      return strncmp(ir_attr_str(n, "format"), "e8m0", 4) == 0 ? MODE_F32 : MODE_LOW;
    case OP_CAST:
    case OP_ARGMAX:
    case OP_XENT: /* computes in f32 from any float type */
    case OP_XENT_GRAD:
    case OP_XENT_BOTH: return MODE_FOLLOW;
    default: break;
  }
  if (ir_ops[n->op].cls == K_MOVE) return MODE_FOLLOW;
  return MODE_LOW;
}

/* Operand i of n stays f32 in any mode (convert_node says why). */
static bool keeps_f32(const Node *n, int i) {
  switch (n->op) {
    case OP_GRID_SAMPLE: return i == 1;
    case OP_XENT_GRAD:
    case OP_XENT_BOTH: return i == 2;
    case OP_ATTENTION_GRAD: return i == 5;
    default: return false;
  }
}

/* Rewrites n's operands for its mode and infers its types again. */
static void convert_node(Prec *p, Node *n, Mode mode) {
  DType want = mode == MODE_LOW ? p->low : TY_F32;
  if (mode == MODE_FOLLOW) {
    want = TY_COUNT;
    for (int i = 0; i < n->n_in; i++) {
      DType t = n->in[i]->type.dtype;
      if (is_float(t) && (want == TY_COUNT || t != TY_F32)) want = t;
    }
    if (want == TY_COUNT) return;
  }
  /* Gather's indices and every other integer operand keep their type;
   * grid_sample's grid stays f32: in f16 a position on a 1000-pixel axis
   * would be off by up to half a pixel; so does softmax_xent_grad's dy,
   * the loss's f32 gradient, and attention_grad's lse (attention_lse
   * writes it in f32 whatever its dtype). */
  for (int i = 0; i < n->n_in; i++)
    if (is_float(n->in[i]->type.dtype))
      n->in[i] = convert(p, n->in[i], keeps_f32(n, i) ? TY_F32 : want, n);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(p->g->ctx, "precision: %s: %s", ir_ops[n->op].name, err);
  if (mode == MODE_F32) p->kept++;
}

bool pass_precision(Graph *g, PassCtx *pc) {
  DType low = pc && pc->options ? pc->options->precision : TY_F32;
  if (low != TY_F16 && low != TY_BF16) return false;
  Prec p = {.g = g, .low = low};
  DType *declared = ARENA_ARRAY(&g->ctx->arena, DType, g->n_outputs + 1);
  for (int i = 0; i < g->n_outputs; i++) declared[i] = g->outputs[i]->type.dtype;
  /* Only the nodes there now: those inserted are conversions, already
   * in their final types. */
  Node *last = g->last;
  bool *weight = pass_weight_only(g);
  for (Node *n = g->first, *next; n; n = next) {
    next = n == last ? NULL : n->next;
    /* Work over the weights alone (bn-fold's W' and b') runs once at
     * load: it stays in f32, and its users convert the result, rounded
     * once. */
    if (ir_ops[n->op].cls == K_SOURCE || weight[n->id]) continue;
    Mode mode = mode_of(n);
    if (mode != MODE_NONE) convert_node(&p, n, mode);
  }
  for (int i = 0; i < g->n_outputs; i++) {
    Value *v = g->outputs[i];
    if (v->type.dtype == declared[i] || !is_float(declared[i])) continue;
    /* Appended: after every use of v. */
    g->outputs[i] = convert(&p, v, declared[i], NULL);
  }
  if (pc) {
    pass_stat(pc, "precision: casts inserted", p.casts);
    pass_stat(pc, "precision: consts retyped", p.consts);
    pass_stat(pc, "precision: ops kept in f32", p.kept);
  }
  return p.casts + p.consts > 0;
}

/* ---- what --stats reports after fusion ---- */

/* A node that only converts or aliases: a cast, a reshape. */
static bool converts_only(const Node *n) { return n->op == OP_CAST || n->op == OP_RESHAPE; }

static int cmp_int(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  return (a > b) - (a < b);
}

/* Marks, by node id (numbered), each cast that a matrix product reads,
 * directly or through reshapes. */
static bool *product_operands(Graph *g) {
  bool *read = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_MATMUL && n->op != OP_LINEAR) continue;
    for (int i = 0; i < 2; i++) {
      const Node *d = n->in[i]->def;
      while (d->op == OP_RESHAPE) d = d->in[0]->def;
      if (d->op == OP_CAST) read[d->id] = true;
    }
  }
  return read;
}

void pass_count_cast_kernels(Graph *g, CastKernels *out) {
  *out = (CastKernels){0};
  bool *weight_only = pass_weight_only(g); /* numbers the nodes */
  bool *for_product = product_operands(g);
  Arena *a = &g->ctx->arena;
  /* Group numbers are any int a hand-written file gives: index them by
   * their rank among those present, not by their value. */
  int *ids = ARENA_ARRAY(a, int, g->n_nodes + 1), n_ids = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->group >= 0) ids[n_ids++] = n->group;
  qsort(ids, (size_t)n_ids, sizeof *ids, cmp_int);
  int n_groups = 0;
  for (int i = 0; i < n_ids; i++)
    if (i == 0 || ids[i] != ids[i - 1]) ids[n_groups++] = ids[i];
  /* Per group: whether some member does more than convert.  A matmul
   * or linear leaf is its own GEMM; linear's bias is added by the
   * group's kernel, which is work. */
  bool *works = ARENA_ARRAY(a, bool, n_groups + 1);
  bool *has_cast = ARENA_ARRAY(a, bool, n_groups + 1);
  bool *weights = ARENA_ARRAY(a, bool, n_groups + 1);
  for (int i = 0; i < n_groups; i++) weights[i] = true;
  for (Node *n = g->first; n; n = n->next) {
    if (n->group < 0) {
      if (n->op != OP_CAST) continue;
      if (weight_only[n->in[0]->def->id])
        out->over_weights++;
      else if (for_product[n->id])
        out->for_products++;
      else
        out->standalone++;
      continue;
    }
    int k = (int)((int *)bsearch(&n->group, ids, (size_t)n_groups, sizeof *ids, cmp_int) - ids);
    if (n->op == OP_CAST) {
      has_cast[k] = true;
      weights[k] = weights[k] && weight_only[n->in[0]->def->id];
    } else if ((n->op == OP_MATMUL || (n->op == OP_LINEAR && n->n_in < 3))) {
      weights[k] = false;
    } else if (!converts_only(n)) {
      works[k] = true;
    }
  }
  for (int k = 0; k < n_groups; k++)
    if (has_cast[k] && !works[k]) {
      if (weights[k])
        out->over_weights++;
      else
        out->standalone++;
    }
}
