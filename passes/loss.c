/* pass_append_loss (loss.h): takes a model's graph and one of its
 * outputs, adds a target input and the loss between them (ir/loss.c),
 * and makes the loss output 0 of the graph. */
#include "passes/loss.h"

#include <string.h>

/* diag_error, then false */
#define fail(g, loc, ...) (diag_error((g)->ctx, (loc), __VA_ARGS__), false)

/* An input of type t called name, placed after *last (the first node
 * when NULL), which becomes it. */
static Value *new_input(Graph *g, Node **last, const char *name, const TensorType *t, SrcLoc at) {
  Node *in = ir_node_new(g, OP_INPUT, 0, NULL, at);
  ir_set_str(g, in, "name", name);
  ir_declare(in, t);
  if (*last && (*last)->next) ir_insert_before(g, (*last)->next, in);
  else if (!*last && g->first) ir_insert_before(g, g->first, in);
  else ir_append(g, in);
  *last = in;
  return &in->out[0];
}

bool pass_append_loss(Graph *g, const LossSpec *s, int output, const char *target_name,
                      const TensorType *target_type) {
  if (s->kind < 0 || s->kind >= LOSS_COUNT) return fail(g, (SrcLoc){0}, "unknown loss %d", (int)s->kind);
  const char *label = arena_printf(&g->ctx->arena, "loss %s", loss_name(s->kind));
  SrcLoc at = {ctx_add_file(g->ctx, label, NULL, 0), 0, 0};
  if (output < 0 || output >= g->n_outputs)
    return fail(g, at, "the loss reads output %d, but the model has %d output%s", output, g->n_outputs,
                g->n_outputs == 1 ? "" : "s");
  Node *last_input = NULL;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
    if (strcmp(ir_attr_str(n, "name"), target_name) == 0)
      return fail(g, at, "the model already has %s named '%s' (the loss's target)",
                  n->op == OP_INPUT ? "an input" : "a parameter", target_name);
    if (n->op == OP_INPUT) last_input = n;
  }
  for (int i = 0; i < g->n_outputs; i++) {
    if (g->output_names && g->output_names[i] && strcmp(g->output_names[i], "loss") == 0)
      return fail(g, at, "the model already has an output named 'loss'");
    if (ir_output_length(g, i, NULL) >= 0)
      return fail(g, at, "output '%s' has a length known only at run time (a NonZero's, Compress's, "
                  "NonMaxSuppression's or Unique's rows): training such a model is not supported", g->output_names[i]);
  }
  Value *pred = g->outputs[output];
  TensorType tt = target_type ? *target_type : loss_default_target(s->kind, &pred->type);
  /* The target (and the weights' inputs) go after the model's own
   * inputs, so that their order, the order callers pass them in, stays. */
  LossSpec spec = *s;
  Value *target = new_input(g, &last_input, target_name, &tt, at);
  if (s->weight_input > 0)
    spec.weight = new_input(g, &last_input, LOSS_WEIGHT_INPUT,
                            &(TensorType){.dtype = pred->type.dtype, .rank = 1, .dims = {s->weight_input}}, at);
  if (s->pos_weight_input > 0)
    spec.pos_weight = new_input(g, &last_input, LOSS_POS_WEIGHT_INPUT,
                                &(TensorType){.dtype = pred->type.dtype, .rank = 1, .dims = {s->pos_weight_input}}, at);
  Value *loss = loss_build(g, &spec, pred, target, at);
  if (!loss) return false;
  int n = g->n_outputs + 1;
  Value **vals = arena_alloc(&g->ctx->arena, sizeof(Value *) * (size_t)n);
  const char **names = arena_alloc(&g->ctx->arena, sizeof(char *) * (size_t)n);
  const char **updates = arena_alloc(&g->ctx->arena, sizeof(char *) * (size_t)n);
  vals[0] = loss;
  names[0] = "loss";
  updates[0] = NULL;
  for (int i = 0; i < g->n_outputs; i++) {
    vals[i + 1] = g->outputs[i];
    names[i + 1] = g->output_names ? g->output_names[i] : NULL;
    updates[i + 1] = ir_output_update(g, i);
  }
  ir_set_outputs(g, n, vals, names);
  for (int i = 1; i < n; i++)
    if (updates[i]) ir_set_output_update(g, i, updates[i]);
  return true;
}
