/* Optimizers (optim.h, docs/training.md): takes the graph pass_autodiff
 * made (the model's outputs, NAME.grad per trainable param, the state
 * updates) and returns it as one whole training step: per trainable
 * param its new value and the new values of its optimizer state, each
 * an update output, computed by PyTorch's single-tensor rules
 * (torch.optim's foreach=False) from the f32 input dlcc.lr and the step
 * counter dlcc.optim.step. */
#include <string.h>

#include "ir/grad.h"
#include "pass.h"
#include "passes/optim.h"

OptimSpec optim_spec_default(OptimKind kind) {
  OptimSpec o = {.kind = kind};
  if (kind != OPTIM_SGD) o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8;
  if (kind == OPTIM_ADAMW) o.weight_decay = 0.01;
  return o;
}

static const char *const names[OPTIM_COUNT] = {"sgd", "adam", "adamw"};

bool optim_from_name(const char *name, OptimKind *out) {
  for (int k = 0; k < OPTIM_COUNT; k++)
    if (name && strcmp(name, names[k]) == 0) return *out = (OptimKind)k, true;
  return false;
}

const char *optim_name(OptimKind kind) { return kind >= 0 && kind < OPTIM_COUNT ? names[kind] : "?"; }

/* The step being built: where its nodes go and the scalars every
 * param's update shares. */
typedef struct Step {
  Graph *g;
  const OptimSpec *o;
  SrcLoc at;
  Value *lr;     /* dlcc.lr */
  Value *step1;  /* dlcc.optim.step + 1: this step's number, from 1 */
  Value *clip;   /* the gradients' scale (clip_grad_norm), or NULL */
  Value *decay;  /* AdamW's 1 - lr * weight_decay, or NULL */
  Value *bc2_sqrt, *step_size; /* Adam: sqrt(1 - beta2^t), lr / (1 - beta1^t) */
  Value *dampen; /* SGD with dampening: 1 - dampening, or 1 at the first step */
  /* The outputs the step gains: updates of params and of their state. */
  int n_new;
  Value **new_values;
  const char **new_names;
} Step;

static Value *num(Step *s, double v) { return ir_grad_scalar(s->g, s->at, v, TY_F32); }
static Value *op2(Step *s, OpKind op, Value *a, Value *b) { return ir_grad_op2(s->g, s->at, op, a, b); }
static Value *op1(Step *s, OpKind op, Value *a) { return ir_grad_op(s->g, s->at, op, 1, &a); }
/* a * x + b * y, the shape of every moving average here. */
static Value *blend(Step *s, double a, Value *x, double b, Value *y) {
  return op2(s, OP_ADD, op2(s, OP_MUL, x, num(s, a)), op2(s, OP_MUL, y, num(s, b)));
}

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

static Value *sum_of_squares(Step *s, Value *x) {
  Value *sq = op2(s, OP_MUL, x, x);
  if (x->type.rank == 0) return sq;
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < x->type.rank; d++) axes[d] = d;
  return ir_grad_sum(s->g, s->at, sq, x->type.rank, axes, false);
}

/* torch.optim.SGD's step for one param. */
static void sgd(Step *s, const char *name, Value *p, Value *grad) {
  const OptimSpec *o = s->o;
  if (o->weight_decay != 0) grad = op2(s, OP_ADD, grad, op2(s, OP_MUL, p, num(s, o->weight_decay)));
  if (o->momentum != 0) {
    const char *buf_name;
    Value *buf = state(s, name, "momentum_buffer", &p->type, &buf_name);
    /* The first step takes buf = grad, undampened, as PyTorch's clone. */
    Value *g_part = s->dampen ? op2(s, OP_MUL, grad, s->dampen) : grad;
    Value *nbuf = op2(s, OP_ADD, op2(s, OP_MUL, buf, num(s, o->momentum)), g_part);
    add_update(s, nbuf, buf_name);
    grad = o->nesterov ? op2(s, OP_ADD, grad, op2(s, OP_MUL, nbuf, num(s, o->momentum))) : nbuf;
  }
  add_update(s, op2(s, OP_SUB, p, op2(s, OP_MUL, grad, s->lr)), name);
}

/* torch.optim.Adam's and AdamW's step for one param. */
static void adam(Step *s, const char *name, Value *p, Value *grad) {
  const OptimSpec *o = s->o;
  if (o->kind == OPTIM_ADAM && o->weight_decay != 0)
    grad = op2(s, OP_ADD, grad, op2(s, OP_MUL, p, num(s, o->weight_decay)));
  if (s->decay) p = op2(s, OP_MUL, p, s->decay);
  const char *m_name, *v_name;
  Value *m = state(s, name, "exp_avg", &p->type, &m_name);
  Value *v = state(s, name, "exp_avg_sq", &p->type, &v_name);
  Value *nm = blend(s, o->beta1, m, 1 - o->beta1, grad);
  Value *nv = blend(s, o->beta2, v, 1 - o->beta2, op2(s, OP_MUL, grad, grad));
  Value *denom = op2(s, OP_ADD, op2(s, OP_DIV, op1(s, OP_SQRT, nv), s->bc2_sqrt), num(s, o->eps));
  Value *np = op2(s, OP_SUB, p, op2(s, OP_MUL, op2(s, OP_DIV, nm, denom), s->step_size));
  add_update(s, np, name);
  add_update(s, nm, m_name);
  add_update(s, nv, v_name);
}

/* 1 - b^t for the bias corrections, t = s->step1. */
static Value *correction(Step *s, double b) { return op2(s, OP_SUB, num(s, 1), op2(s, OP_POW, num(s, b), s->step1)); }

static bool check_spec(Ctx *c, const OptimSpec *o) {
  const char *bad = NULL;
  if (o->kind < 0 || o->kind >= OPTIM_COUNT) bad = "an unknown optimizer";
  else if (!(o->weight_decay >= 0)) bad = "weight_decay must be >= 0";
  else if (!(o->clip_grad_norm >= 0)) bad = "clip_grad_norm must be >= 0 (0: no clipping)";
  else if (o->kind == OPTIM_SGD && !(o->momentum >= 0)) bad = "momentum must be >= 0";
  else if (o->kind == OPTIM_SGD && o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    bad = "nesterov needs a momentum and zero dampening";
  else if (o->kind != OPTIM_SGD && !(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
    bad = "betas must be in [0, 1)";
  else if (o->kind != OPTIM_SGD && !(o->eps >= 0)) bad = "eps must be >= 0";
  if (bad) diag_error(c, (SrcLoc){0}, "%s: %s", optim_name(o->kind), bad);
  return !bad;
}

static Node *find_param(Graph *g, const char *name) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), name) == 0) return n;
  return NULL;
}

/* The shared scalars of this step, built once before any param's. */
static void shared(Step *s, Value *step, int n_grads, Value *const *grads) {
  const OptimSpec *o = s->o;
  Graph *g = s->g;
  TensorType scalar = {.dtype = TY_F32};
  s->lr = &ir_source(g, OP_INPUT, &scalar, OPTIM_LR_INPUT, s->at)->out[0];
  s->step1 = op2(s, OP_ADD, step, num(s, 1));
  if (o->clip_grad_norm > 0) {
    Value *total = NULL;
    for (int i = 0; i < n_grads; i++) {
      Value *sq = sum_of_squares(s, grads[i]);
      total = total ? op2(s, OP_ADD, total, sq) : sq;
    }
    Value *norm = op2(s, OP_ADD, op1(s, OP_SQRT, total), num(s, 1e-6));
    s->clip = op2(s, OP_MINIMUM, op2(s, OP_DIV, num(s, o->clip_grad_norm), norm), num(s, 1));
  }
  if (o->kind == OPTIM_SGD && o->momentum != 0 && o->dampening != 0)
    s->dampen = op2(s, OP_SUB, num(s, 1), op2(s, OP_MUL, num(s, o->dampening), op2(s, OP_MINIMUM, step, num(s, 1))));
  if (o->kind == OPTIM_ADAMW && o->weight_decay != 0)
    s->decay = op2(s, OP_SUB, num(s, 1), op2(s, OP_MUL, s->lr, num(s, o->weight_decay)));
  if (o->kind != OPTIM_SGD) {
    s->bc2_sqrt = op1(s, OP_SQRT, correction(s, o->beta2));
    s->step_size = op2(s, OP_DIV, s->lr, correction(s, o->beta1));
  }
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
    Node *p = find_param(g, arena_printf(&c->arena, "%.*s", (int)(len - 5), name));
    if (!p || !ir_type_eq(&p->out[0].type, &g->outputs[i]->type)) continue;
    is_grad[i] = true;
    params[n_grads] = p;
    grads[n_grads++] = g->outputs[i];
  }
  if (!n_grads) {
    diag_error(c, (SrcLoc){0}, "%s: the model has no trainable parameter that the loss depends on",
               optim_name(o->kind));
    return false;
  }
  if (find_param(g, OPTIM_STEP_PARAM)) {
    diag_error(c, find_param(g, OPTIM_STEP_PARAM)->loc, "the param '%s' is the optimizer's step counter",
               OPTIM_STEP_PARAM);
    return false;
  }

  Step s = {.g = g, .o = o, .at = params[0]->loc};
  int cap = 3 * n_grads + 1;
  s.new_values = ARENA_ARRAY(&c->arena, Value *, cap);
  s.new_names = ARENA_ARRAY(&c->arena, const char *, cap);
  TensorType scalar = {.dtype = TY_F32};
  Node *step = ir_source(g, OP_PARAM, &scalar, OPTIM_STEP_PARAM, s.at);
  ir_set_str(g, step, "init", "zeros");
  shared(&s, &step->out[0], n_grads, grads);
  for (int i = 0; i < n_grads; i++) {
    s.at = params[i]->loc;
    Value *grad = s.clip ? op2(&s, OP_MUL, grads[i], s.clip) : grads[i];
    (o->kind == OPTIM_SGD ? sgd : adam)(&s, ir_attr_str(params[i], "name"), &params[i]->out[0], grad);
  }
  add_update(&s, s.step1, OPTIM_STEP_PARAM);

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
