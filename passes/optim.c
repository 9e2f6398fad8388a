/* Optimizers (optim.h, docs/training.md): takes the graph pass_autodiff
 * made (the model's outputs, NAME.grad per trainable param, the state
 * updates) and returns it as one whole training step: per trainable
 * param its new value and the new values of its optimizer state, each
 * an update output, computed by PyTorch's single-tensor rules
 * (torch.optim's foreach=False) from the f32 input dlcc.lr and the step
 * counter dlcc.optim.step. */
#include <string.h>

#include "ir/eval.h"
#include "ir/grad.h"
#include "pass.h"
#include "passes/autodiff.h"
#include "passes/optim.h"

OptimSpec optim_spec_default(OptimKind kind) {
  OptimSpec o = {.kind = kind, .beta1 = 0.9, .beta2 = 0.999, .alpha = 0.99, .rho = 0.9, .momentum_decay = 4e-3};
  if (kind != OPTIM_SGD) o.eps = kind == OPTIM_ADAGRAD ? 1e-10 : kind == OPTIM_ADADELTA ? 1e-6 : 1e-8;
  if (kind == OPTIM_ADAMW) o.weight_decay = 0.01;
  return o;
}

double optim_default_lr(OptimKind kind) {
  switch (kind) {
    case OPTIM_RMSPROP:
    case OPTIM_ADAGRAD: return 1e-2;
    case OPTIM_ADAMAX:
    case OPTIM_NADAM: return 2e-3;
    case OPTIM_ADADELTA: return 1;
    default: return 1e-3;
  }
}

static const char *const kind_names[OPTIM_COUNT] = {"sgd",     "adam",     "adamw", "rmsprop", "adagrad",
                                                    "adamax",  "adadelta", "radam", "nadam"};

DiagWords optim_names(void) { return diag_word_list(kind_names, OPTIM_COUNT); }

/* Whether kind has Adam's betas. */
static bool has_betas(OptimKind kind) {
  return kind == OPTIM_ADAM || kind == OPTIM_ADAMW || kind == OPTIM_ADAMAX || kind == OPTIM_RADAM ||
         kind == OPTIM_NADAM;
}

bool optim_from_name(const char *name, OptimKind *out) {
  for (int k = 0; k < OPTIM_COUNT; k++)
    if (name && strcmp(name, kind_names[k]) == 0) return *out = (OptimKind)k, true;
  return false;
}

const char *optim_name(OptimKind kind) { return kind >= 0 && kind < OPTIM_COUNT ? kind_names[kind] : "?"; }

/* The step being built: where its nodes go and the scalars every
 * param's update shares. */
typedef struct Step {
  Graph *g;
  const OptimSpec *o;
  SrcLoc at;
  Value *lr;    /* dlcc.lr */
  Value *momentum; /* dlcc.momentum (OptimSpec.momentum_input); else NULL */
  Value *step1; /* dlcc.optim.step + 1: this step's number, from 1 */
  Value *scale; /* the gradients' scale: clip_grad_norm's, or 1; times 1 / the loss scale */
  Value *mu_product; /* NAdam's through this step (OPTIM_MU_PRODUCT_PARAM's update); else NULL */
  Value *found_inf; /* loss scaling: bool, a gradient holds inf or NaN; else NULL */
  bool *parted;     /* by gradient: this tensor-parallel rank holds a part of it (OptimSpec.tp_parts) */
  bool *no_decay;   /* by gradient: its param takes no weight decay (OptimSpec.no_decay) */
  /* The outputs the step gains: updates of params and of their state. */
  int n_new;
  Value **new_values;
  const char **new_names;
} Step;

static Value *num(Step *s, double v) { return ir_grad_scalar(s->g, s->at, v, TY_F32); }
static Value *op2(Step *s, OpKind op, Value *a, Value *b) { return ir_grad_op2(s->g, s->at, op, a, b); }
static Value *op1(Step *s, OpKind op, Value *a) { return ir_grad_op(s->g, s->at, op, 1, &a); }

static void add_update(Step *s, Value *v, const char *param) {
  s->new_values[s->n_new] = v;
  s->new_names[s->n_new++] = param;
}

/* The zero-initialized state param "dlcc.optim.NAME.KEY" shaped as t. */
static Value *state(Step *s, const char *param, const char *key, const TensorType *t, const char **name) {
  *name = arena_printf(&s->g->ctx->arena, "dlcc.optim.%s.%s", param, key);
  Node *n = ir_source(s->g, OP_PARAM, t, *name, s->at);
  ir_set_str(s->g, n, "init", "zeros");
  return &n->out[0];
}

/* The sum of every element of v, a scalar. */
static Value *sum_all(Step *s, Value *v) {
  if (v->type.rank == 0) return v;
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < v->type.rank; d++) axes[d] = d;
  return ir_grad_sum(s->g, s->at, v, v->type.rank, axes, false);
}

static Value *sum_of_squares(Step *s, Value *x) { return sum_all(s, op2(s, OP_MUL, x, x)); }

/* One param's step: an optim_update node (ops.def has its rule, which
 * is torch.optim's for the kind), its results the updates. */
static void update(Step *s, const char *name, Value *p, Value *grad, bool no_decay) {
  const OptimSpec *o = s->o;
  const char *keys[IR_OPTIM_MAX_STATES];
  bool adam = o->kind == OPTIM_ADAM || o->kind == OPTIM_ADAMW;
  int n_states = ir_optim_states(optim_name(o->kind), o->momentum, adam && o->amsgrad,
                                 o->kind == OPTIM_RMSPROP && o->centered, keys);
  Value *in[7 + IR_OPTIM_MAX_STATES] = {p, grad, s->lr, s->step1, s->scale};
  int first = 5;
  if (s->momentum) in[first++] = s->momentum;
  if (s->mu_product) in[first++] = s->mu_product;
  const char *names[IR_OPTIM_MAX_STATES];
  for (int k = 0; k < n_states; k++) {
    in[first + k] = state(s, name, keys[k], &p->type, &names[k]);
    if (o->kind == OPTIM_ADAGRAD && o->initial_accumulator_value != 0)
      ir_set_str(s->g, in[first + k]->def, "init",
                 arena_printf(&s->g->ctx->arena, "fill(%.17g)", o->initial_accumulator_value));
  }
  Node *n = ir_node_new(s->g, OP_OPTIM_UPDATE, first + n_states, in, s->at);
  if (s->momentum) ir_set_int(s->g, n, "momentum_input", 1);
  ir_set_str(s->g, n, "kind", optim_name(o->kind));
  bool sgd = o->kind == OPTIM_SGD, rms = o->kind == OPTIM_RMSPROP;
  ir_set_float(s->g, n, "momentum", sgd || rms ? o->momentum : 0);
  ir_set_float(s->g, n, "dampening", sgd ? o->dampening : 0);
  ir_set_int(s->g, n, "nesterov", sgd && o->nesterov);
  ir_set_float(s->g, n, "weight_decay", no_decay ? 0 : o->weight_decay);
  if (s->found_inf) ir_set_int(s->g, n, "skip_nonfinite", 1);
  if (o->maximize) ir_set_int(s->g, n, "maximize", 1);
  if (o->clip_grad_value > 0) ir_set_float(s->g, n, "clip_value", o->clip_grad_value);
  if (!sgd) ir_set_float(s->g, n, "eps", o->eps);
  if (has_betas(o->kind)) {
    ir_set_float(s->g, n, "beta1", o->beta1);
    ir_set_float(s->g, n, "beta2", o->beta2);
    if (o->amsgrad) ir_set_int(s->g, n, "amsgrad", 1);
  }
  if (o->kind == OPTIM_ADADELTA) ir_set_float(s->g, n, "rho", o->rho);
  if (o->kind == OPTIM_NADAM) ir_set_float(s->g, n, "momentum_decay", o->momentum_decay);
  if (o->decoupled_weight_decay) ir_set_int(s->g, n, "decoupled", 1);
  if (rms) {
    ir_set_float(s->g, n, "alpha", o->alpha);
    if (o->centered) ir_set_int(s->g, n, "centered", 1);
  }
  if (o->kind == OPTIM_ADAGRAD) ir_set_float(s->g, n, "lr_decay", o->lr_decay);
  ir_grad_node(s->g, n);
  add_update(s, &n->out[0], name);
  for (int k = 0; k < n_states; k++) add_update(s, &n->out[1 + k], names[k]);
}

static bool check_spec(Ctx *c, const OptimSpec *o) {
  const char *bad = NULL;
  bool adam = o->kind == OPTIM_ADAM || o->kind == OPTIM_ADAMW;
  if (o->kind < 0 || o->kind >= OPTIM_COUNT) bad = "an unknown optimizer";
  else if (!(o->weight_decay >= 0)) bad = "weight_decay must be >= 0";
  else if (!(o->clip_grad_norm >= 0)) bad = "clip_grad_norm must be >= 0 (0: no clipping)";
  else if (!(o->clip_grad_value >= 0)) bad = "clip_grad_value must be >= 0 (0: no clipping)";
  else if (o->clip_grad_value > 0 && o->clip_grad_norm > 0)
    bad = "clip_grad_value and clip_grad_norm both clip: choose one";
  else if ((o->kind == OPTIM_SGD || o->kind == OPTIM_RMSPROP) && !(o->momentum >= 0)) bad = "momentum must be >= 0";
  else if (o->kind == OPTIM_SGD && o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    bad = "nesterov needs a momentum and zero dampening";
  else if (has_betas(o->kind) && !(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
    bad = "betas must be in [0, 1)";
  else if (o->kind == OPTIM_ADADELTA && !(o->rho >= 0 && o->rho <= 1)) bad = "rho must be in [0, 1]";
  else if (o->kind == OPTIM_NADAM && !(o->momentum_decay >= 0)) bad = "momentum_decay must be >= 0";
  else if (o->kind != OPTIM_SGD && !(o->eps >= 0)) bad = "eps must be >= 0";
  else if (o->kind == OPTIM_RMSPROP && !(o->alpha >= 0)) bad = "alpha must be >= 0";
  else if (o->kind == OPTIM_ADAGRAD && !(o->lr_decay >= 0)) bad = "lr_decay must be >= 0";
  else if (o->kind == OPTIM_ADAGRAD && !(o->initial_accumulator_value >= 0))
    bad = "initial_accumulator_value must be >= 0";
  /* options of another kind would be dropped without a word */
  else if (o->amsgrad && !adam) bad = "amsgrad is Adam's and AdamW's";
  else if (o->centered && o->kind != OPTIM_RMSPROP) bad = "centered is RMSprop's";
  else if (o->decoupled_weight_decay && o->kind != OPTIM_RADAM && o->kind != OPTIM_NADAM)
    bad = "decoupled_weight_decay is RAdam's and NAdam's (AdamW is Adam's)";
  else if ((o->lr_decay != 0 || o->initial_accumulator_value != 0) && o->kind != OPTIM_ADAGRAD)
    bad = "lr_decay and initial_accumulator_value are Adagrad's";
  else if (o->kind != OPTIM_SGD && o->kind != OPTIM_RMSPROP && o->momentum != 0)
    bad = "momentum is SGD's and RMSprop's";
  else if (o->kind != OPTIM_SGD && (o->dampening != 0 || o->nesterov)) bad = "dampening and nesterov are SGD's";
  else if (o->momentum_input && !has_betas(o->kind) &&
           !((o->kind == OPTIM_SGD || o->kind == OPTIM_RMSPROP) && o->momentum > 0))
    bad = "a momentum set each step needs a momentum (SGD, RMSprop) or beta1 (Adam, AdamW, Adamax, RAdam, NAdam)";
  if (bad) diag_error(c, (SrcLoc){0}, "%s: %s", optim_name(o->kind), bad);
  return !bad;
}

/* The loss scale: autodiff's param, or (OptimSpec.scaled_elsewhere) one
 * of the same name and start. */
static Node *amp_scale(Graph *g, SrcLoc at) {
  Node *p = pass_find_param(g, AMP_SCALE_PARAM);
  if (p) return p;
  TensorType scalar = {.dtype = TY_F32};
  p = ir_source(g, OP_PARAM, &scalar, AMP_SCALE_PARAM, at);
  ir_set_str(g, p, "init", AMP_INIT_SCALE);
  return p;
}

/* grad's mean over the ranks, placed right after the node that computes
 * grad: the plan keeps graph order, so each all-reduce is issued as soon
 * as its gradient is complete.  Gradients come out of the backward in
 * reverse order of the forward, so bucket 0 is the last layer's, as in
 * PyTorch's DDP. */
static Value *all_reduce(Graph *g, Value *grad, int bucket) {
  Node *n = ir_node_new(g, OP_ALLREDUCE_MEAN, 1, &grad, grad->def->loc);
  ir_set_int(g, n, "bucket", bucket);
  char err[256];
  if (!ir_infer(n, err, sizeof err)) dl_internal(g->ctx, "allreduce_mean: %s", err);
  if (grad->def->next) ir_insert_before(g, grad->def->next, n);
  else ir_append(g, n);
  return &n->out[0];
}

/* x[lo:hi] of a 1-d x. */
static Value *part(Graph *g, SrcLoc at, Value *x, int64_t lo, int64_t hi) {
  Node *n = ir_node_new(g, OP_SLICE, 1, &x, at);
  ir_set_ints(g, n, "starts", 1, &lo);
  ir_set_ints(g, n, "ends", 1, &hi);
  ir_set_ints(g, n, "steps", 1, (int64_t[]){1});
  return ir_grad_node(g, n);
}

/* grads[first..first+count) (by order's indices) in one all-reduce: each
 * flattened, joined, their mean over the ranks taken once, right after
 * the last of them completes (last), then each gradient read back from
 * its part.  Each element's mean is the same sum in the same order as
 * alone, so the bits do not change. */
static void all_reduce_joined(Graph *g, Value **grads, const int *order, int count, Node *last, int bucket) {
  Node *mark = g->last;
  SrcLoc at = last->loc;
  Value **flat = ARENA_ARRAY(&g->ctx->arena, Value *, count);
  for (int k = 0; k < count; k++) {
    int64_t numel = ir_type_numel(&grads[order[k]]->type);
    flat[k] = ir_grad_reshape(g, at, grads[order[k]], 1, &numel);
  }
  Node *cat = ir_node_new(g, OP_CONCAT, count, flat, at);
  ir_set_int(g, cat, "axis", 0);
  Value *joined = ir_grad_node(g, cat);
  Node *ar = ir_node_new(g, OP_ALLREDUCE_MEAN, 1, &joined, at);
  ir_set_int(g, ar, "bucket", bucket);
  Value *mean = ir_grad_node(g, ar);
  int64_t at_elem = 0;
  for (int k = 0; k < count; k++) {
    const TensorType *t = &grads[order[k]]->type;
    int64_t numel = ir_type_numel(t);
    grads[order[k]] = ir_grad_reshape(g, at, part(g, at, mean, at_elem, at_elem + numel), t->rank, t->dims);
    at_elem += numel;
  }
  if (last == mark) return;
  Node *before = last->next;
  for (Node *n = mark->next, *next; n; n = next) {
    next = n->next;
    ir_remove(g, n);
    ir_insert_before(g, before, n);
  }
}

/* Every gradient's mean over the ranks, in buckets of about
 * bucket_bytes (PyTorch DDP's bucket_cap_mb) filled in the order the
 * backward completes the gradients; 0 (or a gradient as large alone):
 * an all-reduce per gradient.  Fewer, larger all-reduces save each
 * call's latency; each starts only when its last gradient is done. */
static void all_reduce_buckets(Graph *g, int n_grads, Value **grads, int64_t bucket_bytes) {
  int *order = ARENA_ARRAY(&g->ctx->arena, int, n_grads), n = 0;
  Node **defs = ARENA_ARRAY(&g->ctx->arena, Node *, n_grads);
  for (int i = 0; i < n_grads; i++) defs[i] = grads[i]->def;
  for (Node *x = g->first; x && n < n_grads; x = x->next)
    for (int i = 0; i < n_grads; i++)
      if (defs[i] == x) order[n++] = i;
  int bucket = 0;
  for (int first = 0; first < n;) {
    int64_t bytes = 0;
    int end = first;
    DType dt = grads[order[first]]->type.dtype;
    while (end < n && grads[order[end]]->type.dtype == dt && (end == first || bytes < bucket_bytes))
      bytes += ir_type_numel(&grads[order[end]]->type) * ir_dtype_size(dt), end++;
    if (end - first == 1) grads[order[first]] = all_reduce(g, grads[order[first]], bucket++);
    else all_reduce_joined(g, grads, order + first, end - first, defs[order[end - 1]], bucket++);
    first = end;
  }
}

/* Zero when every element of every gradient is finite, else NaN. */
static Value *nonfinite_of(Step *s, Value *grad) {
  return sum_all(s, op2(s, OP_MUL, grad, num(s, 0))); /* inf * 0 and NaN * 0: NaN */
}

/* Σ f(grad) over every gradient of the model.  Under tensor parallelism
 * (OptimSpec.tp_parts) a gradient this rank holds a part of (the rest
 * being other ranks', or zeros) is summed over the tensor group with
 * one allreduce_sum of those terms; the others are every rank's whole
 * and the same, counted once. */
static Value *model_sum(Step *s, int n_grads, Value *const *grads, Value *(*f)(Step *, Value *)) {
  Value *whole = NULL, *parts = NULL;
  for (int i = 0; i < n_grads; i++) {
    Value *v = f(s, grads[i]);
    Value **into = s->parted[i] ? &parts : &whole;
    *into = *into ? op2(s, OP_ADD, *into, v) : v;
  }
  if (parts) parts = ir_grad_op(s->g, s->at, OP_ALLREDUCE_SUM, 1, &parts);
  return whole && parts ? op2(s, OP_ADD, whole, parts) : whole ? whole : parts;
}

/* The shared scalars of this step, built once before any param's.
 * Under loss scaling the gradients are the loss scale S times the
 * true ones: 1 / S (exact, S a power of 2) joins the scale the update
 * multiplies them by, so unscaling costs no pass over them, and the
 * clip's norm is that of the scaled gradients over S, which is exactly
 * the norm of the unscaled ones for the same reason. */
static void shared(Step *s, Value *step, int n_grads, Value *const *grads) {
  const OptimSpec *o = s->o;
  TensorType scalar = {.dtype = TY_F32};
  s->lr = &ir_source(s->g, OP_INPUT, &scalar, OPTIM_LR_INPUT, s->at)->out[0];
  if (o->momentum_input) s->momentum = &ir_source(s->g, OP_INPUT, &scalar, OPTIM_MOMENTUM_INPUT, s->at)->out[0];
  s->step1 = op2(s, OP_ADD, step, num(s, 1));
  s->scale = num(s, 1);
  Value *inv = NULL, *z = NULL;
  if (o->loss_scaling) {
    inv = op2(s, OP_DIV, num(s, 1), &amp_scale(s->g, s->at)->out[0]);
    z = o->grad_stats_input ? &ir_source(s->g, OP_INPUT, &scalar, OPTIM_NONFINITE_INPUT, s->at)->out[0]
                            : model_sum(s, n_grads, grads, nonfinite_of);
    s->found_inf = op1(s, OP_ISNAN, z);
  }
  if (o->clip_grad_norm > 0) {
    Value *total = o->grad_stats_input ? &ir_source(s->g, OP_INPUT, &scalar, OPTIM_SUMSQ_INPUT, s->at)->out[0]
                                       : model_sum(s, n_grads, grads, sum_of_squares);
    Value *norm = op1(s, OP_SQRT, total);
    if (inv) norm = op2(s, OP_MUL, norm, inv);
    norm = op2(s, OP_ADD, norm, num(s, 1e-6));
    s->scale = op2(s, OP_MINIMUM, op2(s, OP_DIV, num(s, o->clip_grad_norm), norm), num(s, 1));
  }
  /* The update skips its step when its scale is not finite
   * (optim_update's skip_nonfinite): z makes it NaN. */
  if (inv) s->scale = op2(s, OP_ADD, op2(s, OP_MUL, s->scale, inv), z);
}

static Value *cast(Step *s, Value *x, DType to) {
  Node *n = ir_node_new(s->g, OP_CAST, 1, &x, s->at);
  ir_set_dtype(s->g, n, "to", to);
  return ir_grad_node(s->g, n);
}

/* NAdam's product of momentums through this step: PyTorch's f32 state
 * times mu_t = beta1 (1 - 0.96^(t momentum_decay) / 2), mu_t computed
 * in double as its Python floats are (simplify may reassociate it in
 * double, which the rounding to f32 does not see), then rounded to f32
 * as the tensor op rounds it; beta1 is this step's (dlcc.momentum) when
 * a schedule sets it; a skipped step (loss scaling) keeps it. */
static void nadam_mu_product(Step *s) {
  const OptimSpec *o = s->o;
  TensorType scalar = {.dtype = TY_F32};
  Node *mp = ir_source(s->g, OP_PARAM, &scalar, OPTIM_MU_PRODUCT_PARAM, s->at);
  ir_set_str(s->g, mp, "init", "fill(1)");
  Value *t = cast(s, s->step1, TY_F64);
  Value *decayed = op2(s, OP_POW, ir_grad_scalar(s->g, s->at, 0.96, TY_F64),
                       op2(s, OP_MUL, t, ir_grad_scalar(s->g, s->at, o->momentum_decay, TY_F64)));
  Value *beta1 = s->momentum ? cast(s, s->momentum, TY_F64) : ir_grad_scalar(s->g, s->at, o->beta1, TY_F64);
  Value *mu = op2(s, OP_MUL, beta1,
                  op2(s, OP_SUB, ir_grad_scalar(s->g, s->at, 1, TY_F64),
                      op2(s, OP_MUL, ir_grad_scalar(s->g, s->at, 0.5, TY_F64), decayed)));
  s->mu_product = op2(s, OP_MUL, &mp->out[0], cast(s, mu, TY_F32));
  Value *kept = s->mu_product;
  if (s->found_inf) {
    Value *in[3] = {s->found_inf, &mp->out[0], s->mu_product};
    kept = ir_grad_op(s->g, s->at, OP_WHERE, 3, in);
  }
  add_update(s, kept, OPTIM_MU_PRODUCT_PARAM);
}

/* GradScaler.update: the new loss scale and count of clean steps. */
static void update_scale(Step *s) {
  Graph *g = s->g;
  TensorType scalar = {.dtype = TY_F32};
  Value *scale = &amp_scale(g, s->at)->out[0];
  Node *tracker = ir_source(g, OP_PARAM, &scalar, AMP_GROWTH_PARAM, s->at);
  ir_set_str(g, tracker, "init", "zeros");
  Value *clean = op2(s, OP_ADD, &tracker->out[0], num(s, 1));
  Value *grow = op2(s, OP_GREATER_EQUAL, clean, num(s, AMP_GROWTH_INTERVAL));
  Value *grown = op2(s, OP_MUL, scale, num(s, 2));
  /* torch._amp_update_scale_ grows only to a finite scale */
  Value *in[3] = {op1(s, OP_ISINF, grown), scale, grown};
  grown = ir_grad_op(g, s->at, OP_WHERE, 3, in);
  Value *kept[3] = {grow, grown, scale};
  Value *halved[3] = {s->found_inf, op2(s, OP_MUL, scale, num(s, 0.5)), ir_grad_op(g, s->at, OP_WHERE, 3, kept)};
  add_update(s, ir_grad_op(g, s->at, OP_WHERE, 3, halved), AMP_SCALE_PARAM);
  Value *restart[3] = {op2(s, OP_LOGICAL_OR, s->found_inf, grow), num(s, 0), clean};
  add_update(s, ir_grad_op(g, s->at, OP_WHERE, 3, restart), AMP_GROWTH_PARAM);
}

/* By param: whether a pattern of list (OptimSpec.no_decay) names it;
 * NULL after reporting a pattern that names none. */
static bool *match_no_decay(Ctx *c, const char *list, Node *const *params, int n) {
  bool *hit = ARENA_ARRAY(&c->arena, bool, n + 1), ok = true;
  const char **pats;
  for (int k = 0, n_pats = pass_split_names(&c->arena, list ? list : "", &pats); k < n_pats; k++) {
    int matched = 0;
    for (int i = 0; i < n; i++)
      if (pass_name_matches(&pats[k], 1, ir_attr_str(params[i], "name"))) hit[i] = true, matched++;
    if (!matched && *pats[k]) {
      diag_error(c, (SrcLoc){0}, "no_decay: '%s' matches no trainable parameter of the model", pats[k]);
      ok = false;
    }
  }
  return ok ? hit : NULL;
}

/* A place in the model's file for a message about the whole model: the
 * first output computed there (a loss pass's nodes name the loss, not a
 * place in the file). */
static SrcLoc model_loc(const Graph *g) {
  for (int i = 0; i < g->n_outputs; i++) {
    SrcLoc at = g->outputs[i]->def->loc;
    if (at.file && at.line > 0) return at;
  }
  return (SrcLoc){0};
}

bool pass_append_optimizer(Graph *g, const OptimSpec *o) {
  Ctx *c = g->ctx;
  if (!check_spec(c, o)) return false;
  int n = g->n_outputs, n_grads = 0;
  Node **params = ARENA_ARRAY(&c->arena, Node *, n + 1);
  Value **grads = ARENA_ARRAY(&c->arena, Value *, n + 1);
  bool *is_grad = ARENA_ARRAY(&c->arena, bool, n + 1);
  for (int i = 0; i < n; i++) {
    const char *name = g->output_names[i];
    size_t len = strlen(name);
    if (ir_output_update(g, i) || len <= 5 || strcmp(name + len - 5, ".grad") != 0) continue;
    Node *p = pass_find_param(g, arena_printf(&c->arena, "%.*s", (int)(len - 5), name));
    if (!p || !ir_type_eq(&p->out[0].type, &g->outputs[i]->type)) continue;
    is_grad[i] = true;
    params[n_grads] = p;
    grads[n_grads++] = g->outputs[i];
  }
  if (!n_grads) {
    diag_error(c, model_loc(g), "%s: the model has no trainable parameter that the loss depends on",
               optim_name(o->kind));
    return false;
  }
  if (pass_find_param(g, OPTIM_STEP_PARAM)) {
    diag_error(c, pass_find_param(g, OPTIM_STEP_PARAM)->loc, "the param '%s' is the optimizer's step counter",
               OPTIM_STEP_PARAM);
    return false;
  }
  if (pass_find_param(g, OPTIM_MU_PRODUCT_PARAM)) {
    diag_error(c, pass_find_param(g, OPTIM_MU_PRODUCT_PARAM)->loc, "the param '%s' is NAdam's state",
               OPTIM_MU_PRODUCT_PARAM);
    return false;
  }

  if (o->data_parallel) all_reduce_buckets(g, n_grads, grads, o->bucket_bytes);

  Step s = {.g = g, .o = o, .at = params[0]->loc};
  int cap = (1 + IR_OPTIM_MAX_STATES) * n_grads + 4;
  s.new_values = ARENA_ARRAY(&c->arena, Value *, cap);
  s.new_names = ARENA_ARRAY(&c->arena, const char *, cap);
  TensorType scalar = {.dtype = TY_F32};
  Node *step = ir_source(g, OP_PARAM, &scalar, OPTIM_STEP_PARAM, s.at);
  ir_set_str(g, step, "init", "zeros");
  if (o->loss_scaling && !o->scaled_elsewhere && !pass_find_param(g, AMP_SCALE_PARAM)) {
    diag_error(c, (SrcLoc){0}, "loss scaling: the gradients were not scaled (no param '%s')", AMP_SCALE_PARAM);
    return false;
  }
  if (o->loss_scaling) amp_scale(g, s.at);
  Node *scalars_from = g->last;
  s.parted = ARENA_ARRAY(&c->arena, bool, n_grads + 1);
  for (int i = 0; i < n_grads; i++)
    for (int k = 0; k < o->n_tp_parts; k++)
      s.parted[i] |= strcmp(ir_attr_str(params[i], "name"), o->tp_parts[k]) == 0;
  if (!(s.no_decay = match_no_decay(c, o->no_decay, params, n_grads))) return false;
  shared(&s, &step->out[0], n_grads, grads);
  Value *next_step = s.step1;
  if (s.found_inf) {
    Value *in[3] = {s.found_inf, &step->out[0], s.step1};
    next_step = ir_grad_op(g, s.at, OP_WHERE, 3, in);
    update_scale(&s);
  }
  if (o->kind == OPTIM_NADAM) nadam_mu_product(&s);
  /* The step's scalars (clip norm, unscaling, the loss scale's update)
   * stay f32 under --precision: 65536 is inf in f16. */
  for (Node *x = scalars_from->next; x; x = x->next) x->keep_f32 = true;
  for (int i = 0; i < n_grads; i++) {
    s.at = params[i]->loc;
    update(&s, ir_attr_str(params[i], "name"), &params[i]->out[0], grads[i], s.no_decay[i]);
  }
  add_update(&s, next_step, OPTIM_STEP_PARAM);

  /* The model's outputs, the gradients when kept, the state updates
   * autodiff made, then the optimizer's. */
  int total = n + s.n_new, k = 0;
  Value **outs = ARENA_ARRAY(&c->arena, Value *, total);
  const char **out_names = ARENA_ARRAY(&c->arena, const char *, total);
  const char **marks = ARENA_ARRAY(&c->arena, const char *, total);
  for (int i = 0; i < n; i++)
    if (!ir_output_update(g, i) && (!is_grad[i] || o->keep_grads))
      outs[k] = g->outputs[i], out_names[k++] = g->output_names[i];
  for (int i = 0; i < n; i++)
    if (ir_output_update(g, i))
      marks[k] = ir_output_update(g, i), outs[k] = g->outputs[i], out_names[k++] = g->output_names[i];
  for (int i = 0; i < s.n_new; i++) marks[k] = out_names[k] = s.new_names[i], outs[k++] = s.new_values[i];
  ir_set_outputs(g, k, outs, out_names);
  for (int i = 0; i < k; i++)
    if (marks[i]) ir_set_output_update(g, i, marks[i]);
  PassCtx pc = {.ctx = c};
  pass_dce(g, &pc);
  return true;
}
