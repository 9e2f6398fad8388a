/* Reverse-mode autodiff (autodiff.h): takes a verified graph whose
 * output `loss` is its loss, returns it in place as the graph of a
 * training step's gradients.
 *
 * How a step is represented (docs/training.md has the whole design):
 *   - gradients are ordinary values.  The backward nodes are appended
 *     after the forward ones, built by the rules of ir/grad.c from the
 *     forward values they need, so fusion, the memory planner and codegen
 *     see one graph and keep each activation until its last backward use;
 *   - state (parameters, batchnorm's running statistics, the dlcc.step
 *     counter, later the optimizer's buffers) lives in params, and a step
 *     changes it through outputs marked `updates "NAME"`: within the step
 *     every read of NAME sees the old value, so the graph stays SSA, and
 *     whoever runs the step writes the outputs back (ir_apply_updates on
 *     the interpreter; on a plan, into WEIGHTS after the run);
 *   - training mode is a rewrite of the forward before differentiating
 *     (train_mode.c): batchnorm with batch statistics and running-
 *     statistic updates, recurrent layers unrolled over time, both
 *     written with ops whose rules then give their gradients; dropout
 *     arrives as its op from the frontend (LowerOptions.training).
 *
 * The walk: a gradient for every value the loss depends on and that
 * depends on a trainable param, summed with `add` where a value has
 * several uses; an op whose rule cannot pass it on stops it, which is an
 * error only when that leaves a parameter the loss depends on with no
 * gradient at all (or the op has no rule, where a gradient must flow:
 * then it would be silently wrong).  A later recompute option
 * (activation checkpointing) clones forward segments into the backward
 * region; nothing here needs to change for it. */
#include "passes/autodiff.h"

#include <string.h>

#include "ir/grad.h"
#include "passes/pass.h"

typedef struct AD {
  Graph *g;
  Ctx *c;
  /* By value id (forward values only). */
  Value **grad;
  const Node **dep;      /* a trainable param the value depends on, or NULL */
  bool *live;            /* the loss depends on the value */
  const Node **blocked;  /* where its gradient stopped (a node) ... */
  int *blocked_operand;  /* ... and which operand */
  bool failed;
} AD;

static const char *param_name(const Node *p) { return ir_attr_str(p, "name"); }

/* No gradient flows into operand i of op by definition (GradRule.stops). */
static bool stops(OpKind op, int i) { return i < 32 && (ir_grad_rules[op].stops >> i & 1u); }

/* ---- which params train ---- */

bool pass_freeze_params(Graph *g, const char *list) {
  Ctx *c = g->ctx;
  bool ok = true;
  const char **pats;
  for (int i = 0, n = pass_split_names(&c->arena, list, &pats); i < n; i++) {
    int matched = 0;
    for (Node *k = g->first; k; k = k->next)
      if (k->op == OP_PARAM && pass_name_matches(&pats[i], 1, ir_attr_str(k, "name"))) {
        ir_set_int(g, k, "frozen", 1);
        matched++;
      }
    if (!matched) {
      diag_error(c, (SrcLoc){0}, "freeze: '%s' matches no parameter of the model", pats[i]);
      ok = false;
    }
  }
  return ok;
}

/* Float params with a use where gradients flow: not the buffers that
 * only feed batchnorm's running statistics, nor the frozen.  By node id. */
bool *pass_trainable_params(Graph *g) {
  ir_number(g);
  bool *used = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++)
      if (!stops(n->op, i)) used[n->in[i]->def->id] = true;
  for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]->def->id] = true;
  bool *trainable = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next)
    trainable[n->id] = n->op == OP_PARAM && ir_dtype_is_float(n->out[0].type.dtype) && used[n->id] &&
                       !(ir_attr(n, "frozen") && ir_attr_int(n, "frozen"));
  return trainable;
}

/* ---- the backward walk ---- */

static void accumulate(AD *ad, const Value *v, Value *d, SrcLoc loc) {
  Value **slot = &ad->grad[v->id];
  *slot = *slot ? ir_grad_op2(ad->g, loc, OP_ADD, *slot, d) : d;
}

static void block(AD *ad, const Value *v, const Node *n, int operand) {
  if (ad->blocked[v->id]) return;
  ad->blocked[v->id] = n;
  ad->blocked_operand[v->id] = operand;
}

static void backward_node(AD *ad, Node *n) {
  const GradRule *rule = &ir_grad_rules[n->op];
  Value *dy[8] = {NULL};
  bool any = false;
  for (int k = 0; k < n->n_out && k < 8; k++) any |= (dy[k] = ad->grad[n->out[k].id]) != NULL;
  if (!any) {
    /* Not on the gradient's path: a stop further down the graph stops
     * whatever reaches the loss only through here too. */
    for (int k = 0; k < n->n_out; k++)
      if (ad->live[n->out[k].id] && ad->blocked[n->out[k].id])
        for (int i = 0; i < n->n_in; i++)
          block(ad, n->in[i], ad->blocked[n->out[k].id], ad->blocked_operand[n->out[k].id]);
    return;
  }
  bool *need = ARENA_ARRAY(&ad->c->arena, bool, n->n_in + 1), needed = false;
  for (int i = 0; i < n->n_in; i++) {
    const Value *v = n->in[i];
    if (!ad->dep[v->id]) continue;
    need[i] = ir_dtype_is_float(v->type.dtype) && !rule->zero && !stops(n->op, i);
    if (!need[i]) block(ad, v, n, i);
    needed |= need[i];
  }
  if (!needed) return;
  const char *lacks = rule->vjp && rule->lacks ? rule->lacks(n) : NULL;
  if (!rule->vjp || lacks) {
    for (int i = 0; i < n->n_in; i++)
      if (need[i]) {
        diag_error(ad->c, n->loc,
                   "%s has no gradient rule yet, and its operand %d depends on the trainable parameter "
                   "'%s'",
                   lacks ? lacks : ir_ops[n->op].name, i + 1, param_name(ad->dep[n->in[i]->id]));
        break;
      }
    ad->failed = true;
    return;
  }
  Value **dx = ARENA_ARRAY(&ad->c->arena, Value *, n->n_in + 1);
  GradCall call = {.g = ad->g, .n = n, .dy = dy, .need = need, .dx = dx};
  Node *before = ad->g->last;
  rule->vjp(&call);
  /* A node kept in f32 (#f32, training batchnorm's pieces) has its
   * backward in f32 too, as autocast runs an op's backward in the type
   * its forward ran in. */
  if (n->keep_f32)
    for (Node *x = before ? before->next : ad->g->first; x; x = x->next) x->keep_f32 = true;
  for (int i = 0; i < n->n_in; i++)
    if (need[i] && dx[i]) accumulate(ad, n->in[i], dx[i], n->loc);
}

static bool check_loss(AD *ad, int loss) {
  Graph *g = ad->g;
  if (loss < 0 || loss >= g->n_outputs) {
    diag_error(ad->c, (SrcLoc){0}, "the loss is output %d, but the graph has %d output%s", loss,
               g->n_outputs, g->n_outputs == 1 ? "" : "s");
    return false;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (ir_output_length(g, i, NULL) >= 0) {
      diag_error(ad->c, g->outputs[i]->def->loc,
                 "output '%s' has a length known only at run time (a NonZero's, Compress's, NonMaxSuppression's or Unique's "
                 "rows): training such a model is not supported", g->output_names[i]);
      return false;
    }
  const Value *v = g->outputs[loss];
  char b[IR_TYPE_STR_MAX];
  if (!ir_dtype_is_float(v->type.dtype) || ir_type_numel(&v->type) != 1) {
    diag_error(ad->c, v->def->loc,
               "the loss must be one float value to differentiate, but output '%s' is %s (reduce it, "
               "e.g. with a mean)",
               g->output_names[loss], ir_type_str(&v->type, b, sizeof b));
    return false;
  }
  return true;
}

static void number_and_allocate(AD *ad) {
  Graph *g = ad->g;
  ir_number(g);
  int nv = 0;
  for (Node *n = g->first; n; n = n->next) nv += n->n_out;
  Arena *a = &ad->c->arena;
  ad->grad = ARENA_ARRAY(a, Value *, nv + 1);
  ad->dep = ARENA_ARRAY(a, const Node *, nv + 1);
  ad->live = ARENA_ARRAY(a, bool, nv + 1);
  ad->blocked = ARENA_ARRAY(a, const Node *, nv + 1);
  ad->blocked_operand = ARENA_ARRAY(a, int, nv + 1);
}

static int uses_of(const Graph *g, const Value *v) {
  int count = 0;
  for (const Node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->n_in; i++) count += n->in[i] == v;
  return count;
}

/* A gradient that is a keepdims reduction reshaped to its param's shape
 * (a per-channel weight's [1, C, 1, 1] to [C]) becomes the reduction
 * without the kept axes: reshaping into a graph output is a copy. */
static Value *without_reshape(Graph *g, Value *v) {
  const Node *r = v->def, *s = r->op == OP_RESHAPE ? r->in[0]->def : NULL;
  if (!s || (s->op != OP_REDUCE_SUM && s->op != OP_REDUCE_MEAN) || !ir_attr_int(s, "keepdims") ||
      uses_of(g, r->in[0]) != 1)
    return v;
  int n_axes;
  const int64_t *axes = ir_attr_ints(s, "axes", &n_axes);
  const TensorType *x = &s->in[0]->type;
  bool reduced[DL_MAX_RANK] = {false};
  for (int i = 0; i < n_axes; i++) reduced[axes[i] < 0 ? axes[i] + x->rank : axes[i]] = true;
  TensorType t = *x;
  t.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (!reduced[d]) t.dims[t.rank++] = x->dims[d];
  t.dtype = v->type.dtype;
  if (!ir_type_eq(&t, &v->type)) return v;
  return (s->op == OP_REDUCE_SUM ? ir_grad_sum : ir_grad_mean)(g, s->loc, s->in[0], n_axes, axes, false);
}

bool pass_autodiff(Graph *g, const AutodiffOptions *o) {
  static const AutodiffOptions defaults;
  if (!o) o = &defaults;
  AD ad = {.g = g, .c = g->ctx};
  if (!check_loss(&ad, o->loss)) return false;
  bool *trainable_by_id = pass_trainable_params(g);
  int n_params = 0;
  for (Node *n = g->first; n; n = n->next) n_params += trainable_by_id[n->id];
  Node **params = ARENA_ARRAY(&ad.c->arena, Node *, n_params + 1);
  n_params = 0;
  for (Node *n = g->first; n; n = n->next)
    if (trainable_by_id[n->id]) params[n_params++] = n;
  if (o->fuse_attention) pass_attention(g, NULL);
  if (!pass_train_mode(g, o)) return false;

  number_and_allocate(&ad);
  Value *loss = g->outputs[o->loss];
  for (int i = 0; i < n_params; i++) ad.dep[params[i]->out[0].id] = params[i];
  for (Node *n = g->first; n; n = n->next) {
    const Node *d = NULL;
    for (int i = 0; i < n->n_in && !d; i++) d = ad.dep[n->in[i]->id];
    for (int k = 0; k < n->n_out && n->op != OP_PARAM; k++) ad.dep[n->out[k].id] = d;
  }
  ad.live[loss->id] = true;
  for (Node *n = g->last; n; n = n->prev) {
    bool live = false;
    for (int k = 0; k < n->n_out; k++) live |= ad.live[n->out[k].id];
    for (int i = 0; live && i < n->n_in; i++) ad.live[n->in[i]->id] = true;
  }

  Node *last_forward = g->last;
  if (o->loss_scale && loss->type.dtype == TY_F32) {
    TensorType scalar = {.dtype = TY_F32};
    Node *scale = ir_source(g, OP_PARAM, &scalar, AMP_SCALE_PARAM, loss->def->loc);
    ir_set_str(g, scale, "init", AMP_INIT_SCALE);
    Value *s = &scale->out[0];
    ad.grad[loss->id] = ir_grad_reshape(g, loss->def->loc, s, loss->type.rank, loss->type.dims);
  } else {
    Node *seed = ir_node_new(g, OP_CONST, 0, NULL, loss->def->loc);
    ir_set_float(g, seed, "value", 1);
    ir_declare(seed, &loss->type);
    ir_append(g, seed);
    ad.grad[loss->id] = &seed->out[0];
  }
  for (Node *n = last_forward; n; n = n->prev) backward_node(&ad, n);
  if (ad.failed) return false;
  /* The scaled seed (65536) is inf in f16: the backward's one-element
   * values next to the loss stay f32 under --precision, as the loss's
   * do under PyTorch's autocast, so the scale reaches f16 only divided
   * over a batch. */
  for (Node *n = o->loss_scale ? last_forward->next : NULL; n; n = n->next) {
    bool scalar = n->n_out > 0;
    for (int k = 0; k < n->n_out; k++) scalar &= ir_type_numel(&n->out[k].type) == 1;
    n->keep_f32 |= scalar;
  }

  /* The step's own outputs, the gradients, then the state updates. */
  int n_out = g->n_outputs, total = n_out + n_params, k = 0;
  Value **outs = ARENA_ARRAY(&ad.c->arena, Value *, total);
  const char **names = ARENA_ARRAY(&ad.c->arena, const char *, total);
  const char **marks = ARENA_ARRAY(&ad.c->arena, const char *, total);
  for (int i = 0; i < n_out; i++)
    if (!ir_output_update(g, i)) outs[k] = g->outputs[i], names[k++] = g->output_names[i];
  for (int i = 0; i < n_params; i++) {
    const Value *p = &params[i]->out[0];
    if (!ad.live[p->id]) continue; /* PyTorch's None: the loss does not depend on it */
    if (!ad.grad[p->id]) {
      const Node *b = ad.blocked[p->id];
      diag_error(ad.c, b ? b->loc : params[i]->loc,
                 "the parameter '%s' reaches the loss only through %s's operand %d, which has no "
                 "gradient: it would never train",
                 param_name(params[i]), b ? ir_ops[b->op].name : "an op", b ? ad.blocked_operand[p->id] + 1 : 0);
      ad.failed = true;
      continue;
    }
    outs[k] = without_reshape(g, ad.grad[p->id]);
    names[k++] = arena_printf(&ad.c->arena, "%s.grad", param_name(params[i]));
  }
  if (ad.failed) return false;
  for (int i = 0; i < n_out; i++)
    if (ir_output_update(g, i)) marks[k] = ir_output_update(g, i), outs[k] = g->outputs[i], names[k++] = g->output_names[i];
  ir_set_outputs(g, k, outs, names);
  for (int i = 0; i < k; i++)
    if (marks[i]) ir_set_output_update(g, i, marks[i]);
  PassCtx pc = {.ctx = ad.c};
  pass_dce(g, &pc);
  return true;
}
