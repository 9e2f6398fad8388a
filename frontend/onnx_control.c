/* ONNX control flow: takes If, Loop and Scan nodes and their subgraphs,
 * returns their results as ordinary ops.  An If whose condition is known
 * at import imports the branch taken; otherwise both branches are
 * imported and each output is a `where` of the condition (both are
 * computed every run); when one branch cannot be imported, the other
 * alone, each output through a `check` that the run chose it.  Loop and
 * Scan are unrolled: Loop to its bound when its end is decided at run
 * time, the steps past the end skipped by the plan (ox_op_loop). */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "frontend/onnx_internal.h"

enum { MAX_UNROLL = ONNX_MAX_UNROLL };

/* The node being imported stays the importer's current node afterwards. */
bool ox_import_subgraph(Imp *im, const Onnx__GraphProto *gp, const char *what, int n_in, Val **in,
                            Val **out) {
  const Onnx__NodeProto *np = im->np;
  int idx = im->node_index;
  bool *used = im->attr_used;
  SrcLoc loc = im->loc;
  if ((int)gp->n_input != n_in)
    return ox_bad(im, "%s has %zu inputs, %d expected", what, gp->n_input, n_in);
  if (gp->n_sparse_initializer) return ox_bad(im, "%s: sparse initializers are not supported", what);
  int mark = ox_scope_begin(im);
  bool ok = true;
  for (int i = 0; ok && i < n_in; i++) {
    const char *name = gp->input[i]->name;
    if (!name || !*name) ok = ox_bad(im, "%s: input %d has no name", what, i + 1);
    else ox_add_entry(im, name, -1)->val = in[i];
  }
  for (size_t i = 0; ok && i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    Tensor data;
    char err[512];
    if (!t->name || !*t->name) ok = ox_bad(im, "%s: initializer %zu has no name", what, i);
    else if (!ox_tensor_from_proto(t, im->dir, &data, err, sizeof err))
      ok = ox_bad(im, "%s: initializer '%s': %s", what, t->name, err);
    else ox_add_entry(im, t->name, -1)->val = ox_known(im, data);
  }
  ok = ok && ox_import_nodes(im, gp);
  im->np = np, im->node_index = idx, im->attr_used = used, im->loc = loc;
  for (size_t i = 0; ok && i < gp->n_output; i++) {
    const char *name = gp->output[i]->name;
    Entry *e = name && *name ? ox_find_entry(im, name) : NULL;
    if (!e || !e->val) ok = ox_bad(im, "%s: output '%s' is not computed", what, name ? name : "");
    else out[i] = e->val;
  }
  ox_scope_end(im, mark);
  return ok;
}

static const Onnx__GraphProto *graph_attr(Imp *im, const char *name) {
  const Onnx__AttributeProto *a = ox_find_attr(im, name);
  if (!a || !a->g) ox_bad(im, "attribute '%s' (a graph) is missing", name);
  return a ? a->g : NULL;
}

/* The one value of a known tensor (a constant, or a graph input whose
 * value is given at import), or false. */
static bool known_scalar(const Val *v, double *out) {
  const Tensor *t = v->k ? v->k : v->hint;
  if (!t || ir_type_numel(&t->type) != 1) return false;
  *out = ir_tensor_get(t, 0);
  return true;
}

/* Takes back what was reported since at (with errors errors before),
 * its first line kept in reason (without "dlcc: error: FILE: "): a
 * reason another way of importing serves in place of, or rewords. */
static void take_back(Imp *im, size_t at, int errors, char *reason, size_t len) {
  Diag *d = &im->c->diag;
  const char *text = d->text ? d->text + at : "", *lead = "dlcc: error: ";
  size_t file = strlen(im->file);
  if (strncmp(text, lead, strlen(lead)) == 0) text += strlen(lead);
  if (strncmp(text, im->file, file) == 0 && strncmp(text + file, ": ", 2) == 0) text += file + 2;
  snprintf(reason, len, "%.*s", (int)strcspn(text, "\n"), text);
  if (d->text) d->text[at] = '\0';
  d->len = at, d->errors = errors;
}

/* Imports a branch of an If decided at run time.  When it cannot be
 * imported (a shape or type that does not hold at the bound dims), false
 * with the importer's message in reason, taken back off the diagnostics:
 * the other branch may still serve.  What it built stays unused in the
 * graph, where dce removes it. */
static bool try_branch(Imp *im, const Onnx__GraphProto *gp, const char *what, Val **out, char *reason,
                       size_t len) {
  Diag *d = &im->c->diag;
  size_t at = d->len;
  int errors = d->errors;
  if (ox_import_subgraph(im, gp, what, 0, NULL, out)) return true;
  take_back(im, at, errors, reason, len);
  return false;
}

/* ok (one bool), or true where the node being imported does not run:
 * a check under a guard (an If's branch, a loop's step) must hold when
 * the guard does not, since a plan that cannot branch on it computes
 * the guarded nodes anyway, from whatever an untaken step left. */
static Val *unless_skipped(Imp *im, Val *ok) {
  for (const Guard *g = im->guard; ok && g; g = g->outer) {
    Val *c = ox_val_of(im, g->cond);
    ok = ox_op2(im, OP_LOGICAL_OR, ok, g->when ? ox_op1(im, OP_LOGICAL_NOT, c) : c);
  }
  return ok;
}

/* y through a check that ok (one bool) holds, failing the run with msg
 * when it does not; NULL after reporting. */
static Val *checked(Imp *im, Val *y, Val *ok, const char *msg) {
  Emit e;
  Node *nd = ox_begin(im, &e, OP_CHECK, 2, (Val *[]){y, ok});
  ir_set_str(im->g, nd, "message", msg);
  Val *out = ox_emit1(im, &e);
  if (out) out->held = y->held; /* a check keeps the values narrow */
  return out;
}

Val *ox_check_at_run_time(Imp *im, Val *y, Val *ok, const char *msg) {
  ok = unless_skipped(im, ok);
  return ok ? checked(im, y, ok, msg) : NULL;
}

/* The outputs of the one branch that imported, each through a check
 * that the condition (one bool) chose it: a run that takes the other branch fails
 * with a message naming the node, that branch and why it was not
 * compiled. */
static bool checked_branch(Imp *im, ONode *n, Val *cond, bool then_ok, Val **outs, const char *reason) {
  char where[512];
  ox_node_str(im, where, sizeof where);
  const char *msg = arena_printf(&im->c->arena, "%s: the %s branch was chosen at run time but could not be compiled: %s",
                                 where, then_ok ? "else" : "then", reason);
  for (int i = 0; i < n->n_out; i++)
    if (outs[i]->kind != VK_TENSOR)
      return ox_bad(im, "output %d is %s and the %s branch cannot be compiled (%s): a sequence or optional is not "
                        "checked at run time",
                    i + 1, ox_kind_name(outs[i]), then_ok ? "else" : "then", reason);
  Val *ok = unless_skipped(im, then_ok ? cond : ox_op1(im, OP_LOGICAL_NOT, cond));
  for (int i = 0; ok && i < n->n_out; i++)
    if (!(n->out[i] = checked(im, outs[i], ok, msg))) return false;
  return ok != NULL;
}

/* Two branches' values agree in kind, length and element types. */
static bool same_shape(const Val *a, const Val *b) {
  if (a->kind != b->kind) return false;
  if (a->kind == VK_TENSOR) return ir_type_eq(&a->type, &b->type);
  if (a->n_elems != b->n_elems) return false;
  for (int i = 0; i < a->n_elems; i++)
    if (!same_shape(a->elems[i], b->elems[i])) return false;
  return true;
}

/* A sequence or optional chosen at run time: element by element, when
 * both branches' agree in length and types (the lengths are known at
 * import, the values need not be). */
static Val *select_container(Imp *im, Val *c, int out, Val *t, Val *e) {
  if (!same_shape(t, e)) {
    ox_bad(im,
           "output %d is %s of %d values in then_branch and %s of %d in else_branch (or their types differ): with "
           "a condition computed at run time a sequence or optional must have one length and type",
           out + 1, ox_kind_name(t), t->kind == VK_TENSOR ? 1 : t->n_elems, ox_kind_name(e),
           e->kind == VK_TENSOR ? 1 : e->n_elems);
    return NULL;
  }
  Val *r = ARENA_NEW(&im->c->arena, Val);
  *r = *t;
  r->name = NULL;
  r->flat_input = false;
  r->elems = ARENA_ARRAY(&im->c->arena, Val *, t->n_elems + 1);
  for (int i = 0; i < t->n_elems; i++) {
    r->elems[i] = t->elems[i]->kind == VK_TENSOR ? ox_where(im, c, t->elems[i], e->elems[i])
                                                 : select_container(im, c, out, t->elems[i], e->elems[i]);
    if (!r->elems[i]) return NULL;
  }
  return r;
}

/* One branch's output empty along an axis where the other's has rows
 * (torchvision's `if boxes.numel() == 0: return torch.empty(0)`): the
 * other's, with a run-time length of 0 when the condition picks the
 * empty one (ir/bounds.c); NULL when the two differ otherwise. */
static Val *empty_or_other(Imp *im, Val *c, Val *t, Val *e) {
  if (t->type.rank != e->type.rank || t->type.dtype != e->type.dtype) return NULL;
  int axis = -1;
  for (int d = 0; d < t->type.rank; d++)
    if (t->type.dims[d] != e->type.dims[d]) {
      if (axis >= 0) return NULL;
      axis = d;
    }
  if (axis < 0 || (t->type.dims[axis] != 0 && e->type.dims[axis] != 0)) return NULL;
  bool then_empty = t->type.dims[axis] == 0;
  Val *full = then_empty ? e : t;
  Val *shape = full->run_time_len ? ox_run_time_shape(im, full) : ox_ints_val(im, full->type.rank, full->type.dims);
  Val *rows = shape ? ox_gather(im, shape, ox_scalar(im, axis, TY_I64), 0) : NULL;
  Val *none = ox_scalar(im, 0, TY_I64);
  Val *len = rows ? (then_empty ? ox_where(im, c, none, rows) : ox_where(im, c, rows, none)) : NULL;
  return len ? ox_with_length(im, full, axis, len, 0) : NULL;
}

bool ox_op_if(Imp *im, ONode *n) {
  Val *cond = ox_in_req(im, n, 0);
  const Onnx__GraphProto *gt = graph_attr(im, "then_branch"), *ge = graph_attr(im, "else_branch");
  if (!cond || !gt || !ge) return false;
  if (cond->kind != VK_TENSOR) return ox_bad(im, "the condition is %s, a tensor expected", ox_kind_name(cond));
  if (ir_type_numel(&cond->type) != 1) return ox_bad(im, "the condition must hold one value");
  if ((int)gt->n_output != n->n_out || (int)ge->n_output != n->n_out)
    return ox_bad(im, "the branches give %zu and %zu outputs, the node %d", gt->n_output, ge->n_output, n->n_out);
  Val **t = ARENA_ARRAY(&im->c->arena, Val *, n->n_out + 1), **e = ARENA_ARRAY(&im->c->arena, Val *, n->n_out + 1);
  if (cond->k) { /* a constant condition: the branch taken, alone */
    bool yes = ir_tensor_get(cond->k, 0) != 0;
    return ox_import_subgraph(im, yes ? gt : ge, yes ? "then_branch" : "else_branch", 0, NULL, n->out);
  }
  /* Each branch's nodes carry its guard, so that a plan skips the
   * branch the run does not take (ir/guard.c); the merge below is a
   * `where` on the same condition. */
  Val *c = ox_reshape(im, ox_cast(im, cond, TY_BOOL), 0, NULL);
  if (!c) return false;
  const Guard *outer = im->guard;
  char why_t[1024], why_e[1024];
  im->guard = ir_guard_new(im->g, ox_use(im, c), true, outer);
  bool t_ok = try_branch(im, gt, "then_branch", t, why_t, sizeof why_t);
  im->guard = ir_guard_new(im->g, ox_use(im, c), false, outer);
  bool e_ok = try_branch(im, ge, "else_branch", e, why_e, sizeof why_e);
  im->guard = outer;
  if (!t_ok && !e_ok)
    return ox_bad(im, "neither branch can be compiled: then_branch: %s; else_branch: %s", why_t, why_e);
  if (!t_ok || !e_ok) return checked_branch(im, n, c, t_ok, t_ok ? t : e, t_ok ? why_e : why_t);
  /* Branches of different shapes under a condition computed from a
   * given size (a hint that flows, onnx_build.c): the one it takes, as a
   * shape computed from that size would be. */
  bool same = true;
  for (int i = 0; i < n->n_out; i++) same &= same_shape(t[i], e[i]);
  if (!same && cond->hint && cond->hint_flows) {
    Val **taken = ir_tensor_get(cond->hint, 0) != 0 ? t : e;
    for (int i = 0; i < n->n_out; i++) n->out[i] = taken[i];
    return true;
  }
  for (int i = 0; i < n->n_out; i++) {
    if (t[i]->kind != VK_TENSOR || e[i]->kind != VK_TENSOR) {
      if (!(n->out[i] = select_container(im, c, i, t[i], e[i]))) return false;
      continue;
    }
    if (!ir_type_eq(&t[i]->type, &e[i]->type) && t[i]->held == e[i]->held &&
        (n->out[i] = empty_or_other(im, c, t[i], e[i])))
      continue;
    if (!ir_type_eq(&t[i]->type, &e[i]->type)) {
      char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX], fix[400] = "";
      /* A graph input as the condition (optimum's merged decoders'
       * use_cache_branch): a -D gives it its value at import. */
      const char *cname = im->np->input[0];
      const Entry *ce = cname && *cname ? ox_find_entry(im, cname) : NULL;
      if (ce && ce->producer < 0 && ce->scope == 0 && !ce->val->k)
        snprintf(fix, sizeof fix, "; -D %.100s=1 or -D %.100s=0 compiles the model for one value of input '%.60s'",
                 cname, cname, cname);
      return ox_bad(im,
                    "output %d is %s in then_branch and %s in else_branch: with a condition computed at run "
                    "time both are computed and one is selected, which needs one type (a branch in the plan is "
                    "not supported)%s",
                    i + 1, ir_type_str(&t[i]->type, a, sizeof a), ir_type_str(&e[i]->type, b, sizeof b), fix);
    }
    if (t[i]->held != e[i]->held)
      return ox_bad(im, "output %d is %s in one branch and not in the other", i + 1,
                    ox_onnx_type_name(t[i]->held ? t[i]->held : e[i]->held));
    n->out[i] = ox_where(im, c, t[i], e[i]);
    if (n->out[i]) n->out[i]->held = t[i]->held; /* a select keeps the values narrow */
  }
  return true;
}

/* x with a dim of 1 inserted at axis. */
static Val *unsqueeze_at(Imp *im, Val *x, int axis) {
  int64_t d[DL_MAX_RANK];
  if (!x || x->type.rank + 1 > DL_MAX_RANK) return NULL;
  for (int i = 0, j = 0; i <= x->type.rank; i++) d[i] = i == axis ? 1 : x->type.dims[j++];
  return ox_reshape(im, x, x->type.rank + 1, d);
}

/* The step results parts[0..n) stacked along a new axis. */
static Val *stack(Imp *im, int n, Val **parts, int axis) {
  for (int i = 0; i < n; i++)
    if (!(parts[i] = unsqueeze_at(im, parts[i], axis))) return NULL;
  return ox_concat(im, n, parts, axis);
}

/* A scan output with no steps: an empty tensor of the body output's
 * declared type, with the new axis first. */
static Val *empty_scan(Imp *im, const Onnx__ValueInfoProto *vi) {
  const Onnx__TypeProto *tp = vi->type;
  DType dt;
  const Onnx__TypeProto__Tensor *tt = tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? tp->tensor_type : NULL;
  if (!tt || !tt->shape || !ox_dtype_from_onnx(tt->elem_type, &dt) || tt->shape->n_dim + 1 > DL_MAX_RANK) {
    ox_bad(im, "the loop runs no step and the body's output '%s' has no static type", vi->name ? vi->name : "");
    return NULL;
  }
  TensorType t = {.dtype = dt, .rank = (int)tt->shape->n_dim + 1};
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || d->dim_value < 0) {
      ox_bad(im, "the loop runs no step and the body's output '%s' has no static type", vi->name);
      return NULL;
    }
    t.dims[i + 1] = d->dim_value;
  }
  return ox_known_new(im, &t);
}

/* Output i of a loop unrolled to the user's bound (--loop-bound),
 * through a check that the loop took no step past it (ended, one
 * bool); NULL after reporting. */
static Val *checked_end(Imp *im, int i, Val *y, Val *ended, int64_t bound) {
  if (!y) return NULL;
  if (y->kind != VK_TENSOR) {
    ox_bad(im, "output %d is %s: a loop bounded by --loop-bound checks its outputs at run time, and a sequence or "
               "optional is not checked", i + 1, ox_kind_name(y));
    return NULL;
  }
  char where[512];
  ox_node_str(im, where, sizeof where);
  return checked(im, y, ended,
                 arena_printf(&im->c->arena,
                              "%s: the loop runs more than %" PRId64 " step%s, the bound it was compiled with "
                              "(--loop-bound)",
                              where, bound, bound == 1 ? "" : "s"));
}

/* A Loop's trip count of run-time value vm: *run_m, as i64, with its
 * bound at import in *trips (one that grows with the lengths,
 * ox_bounded_ints), checked at run time; or, without one, the user's
 * in *end_at (the loop's outputs are checked instead, checked_end). */
static bool run_time_trips(Imp *im, Val *vm, int64_t user_bound, bool plan_ok, double *trips, Val **run_m,
                           int64_t *end_at) {
  Diag *d = &im->c->diag;
  size_t at = d->len;
  int errors = d->errors, count;
  int64_t bound;
  bool dynamic;
  bool bounded = vm->upper && !ir_dtype_is_float(vm->type.dtype) &&
                 ox_bounded_ints(im, vm, "the trip count", &count, &bound, &dynamic);
  char why[512] = "", where[512];
  if (!bounded && d->errors > errors) take_back(im, at, errors, why, sizeof why);
  /* The reason, like the message, names this node: where is "FILE: node
   * ... (Loop)", the reason starts without FILE. */
  ox_node_str(im, where, sizeof where);
  const char *own = where + strlen(im->file) + 2;
  size_t w = strlen(own);
  const char *reason = strncmp(why, own, w) == 0 && strncmp(why + w, ": ", 2) == 0 ? why + w + 2 : why;
  if (!bounded && !user_bound && !plan_ok)
    return ox_bad(im, "the trip count is computed at run time and has no bound at import%s%s%s: a loop with scan "
                      "outputs is unrolled, so give it one with --loop-bound=N (at most %d steps; a run that needs "
                      "more fails)",
                  *reason ? " (" : "", reason, *reason ? ")" : "", (int)MAX_UNROLL);
  if (!(*run_m = ox_reshape(im, ox_cast(im, vm, TY_I64), 0, NULL))) return false;
  if (!bounded && !user_bound) return true; /* a loop of the plan (plan_loop) */
  if (!bounded) return *end_at = user_bound, true;
  *trips = (double)bound;
  Val *fits = ox_op2(im, OP_LESS_EQUAL, *run_m, ox_scalar(im, (double)bound, TY_I64));
  return fits && (*run_m = ox_check_at_run_time(im, *run_m, fits,
                                                arena_printf(&im->c->arena, "%s: the trip count is above its bound, "
                                                                            "%" PRId64 ", at run time", where, bound)));
}

/* A loop_begin or loop_end of in[0..n_in) into out: built as it is,
 * never folded and with no hints, since a carried value is not its
 * init (ox_finish would take it for one). */
static bool loop_node(Imp *im, OpKind op, int n_in, Val **in, Val **out) {
  Value **ops = ARENA_ARRAY(&im->c->arena, Value *, n_in);
  for (int i = 0; i < n_in; i++)
    if (!in[i] || !(ops[i] = ox_use(im, in[i]))) return false;
  if (im->g->n_nodes >= im->max_nodes)
    return ox_bad(im, "model too large: more than %d operations in the imported graph", im->max_nodes);
  Node *nd = ir_node_new(im->g, op, n_in, ops, im->loc);
  char err[512];
  if (!ir_infer(nd, err, sizeof err)) return ox_bad(im, "%s", err);
  nd->guard = im->guard;
  ir_append(im->g, nd);
  for (int i = 0; i < nd->n_out; i++) out[i] = ox_val_of(im, &nd->out[i]);
  return true;
}

/* The rest of a Loop whose end is decided at run time with no bound,
 * from step `step` on (the steps before it unrolled, state[2..] the
 * carried values after them), as a loop of the plan (ir/loop.c): the
 * body imported once, run while its condition holds and its step is
 * below the trip count run_m (NULL: none).  enter: whether step `step`
 * runs.  The step number is carried too; the body's condition input is
 * true whenever the body runs. */
static bool plan_loop(Imp *im, ONode *n, const Onnx__GraphProto *body, int64_t step, Val **state, int n_carried,
                      Val *enter, Val *run_m) {
  Arena *a = &im->c->arena;
  int k = 1 + n_carried;
  if (2 + n_carried > IR_MAX_RESULTS)
    return ox_bad(im, "the loop carries %d values, more than the %d a loop decided at run time may", n_carried,
                  IR_MAX_RESULTS - 2);
  for (int i = 0; i < n_carried; i++)
    if (state[2 + i]->kind != VK_TENSOR)
      return ox_bad(im, "loop-carried value %d is %s: a loop whose end is decided at run time with no bound carries "
                        "tensors only (--loop-bound=N unrolls it instead)", i + 1, ox_kind_name(state[2 + i]));
  Val **in = ARENA_ARRAY(a, Val *, k + 1), **carry = ARENA_ARRAY(a, Val *, k);
  in[0] = ox_reshape(im, ox_cast(im, enter, TY_BOOL), 0, NULL);
  in[1] = ox_scalar(im, (double)step, TY_I64);
  for (int i = 0; i < n_carried; i++) in[2 + i] = state[2 + i];
  if (!loop_node(im, OP_LOOP_BEGIN, k + 1, in, carry)) return false;
  Val **body_in = ARENA_ARRAY(a, Val *, k + 1), **outs = ARENA_ARRAY(a, Val *, body->n_output + 1);
  body_in[0] = carry[0];
  body_in[1] = ox_scalar(im, 1, TY_BOOL);
  for (int i = 0; i < n_carried; i++) {
    carry[1 + i]->held = state[2 + i]->held;
    body_in[2 + i] = carry[1 + i];
  }
  if (!ox_import_subgraph(im, body, "the body", 2 + n_carried, body_in, outs)) return false;
  if (outs[0]->kind != VK_TENSOR || ir_type_numel(&outs[0]->type) != 1)
    return ox_bad(im, "the body's condition must be one value");
  Val *next_step = ox_op2s(im, OP_ADD, carry[0], 1);
  Val *keep = ox_reshape(im, ox_cast(im, outs[0], TY_BOOL), 0, NULL);
  if (run_m && keep && next_step) keep = ox_op2(im, OP_LOGICAL_AND, keep, ox_op2(im, OP_LESS, next_step, run_m));
  Val **end_in = ARENA_ARRAY(a, Val *, 2 * k + 1), **res = ARENA_ARRAY(a, Val *, k);
  for (int i = 0; i < k; i++) end_in[i] = carry[i];
  end_in[k] = keep;
  end_in[k + 1] = next_step;
  for (int i = 0; i < n_carried; i++) {
    Val *next = outs[1 + i], *was = state[2 + i];
    if (next->kind != VK_TENSOR || !ir_type_eq(&next->type, &was->type) || next->held != was->held) {
      char t1[IR_TYPE_STR_MAX], t2[IR_TYPE_STR_MAX];
      return ox_bad(im,
                    "loop-carried value %d is %s before a step and %s after it: a loop whose end is decided at run "
                    "time keeps one type",
                    i + 1, ir_type_str(&was->type, t1, sizeof t1),
                    next->kind == VK_TENSOR ? ir_type_str(&next->type, t2, sizeof t2) : ox_kind_name(next));
    }
    end_in[k + 2 + i] = next;
  }
  if (!loop_node(im, OP_LOOP_END, 2 * k + 1, end_in, res)) return false;
  for (int i = 0; i < n_carried; i++) {
    res[1 + i]->held = state[2 + i]->held;
    n->out[i] = res[1 + i];
  }
  return true;
}

/* step < the trip count of run time m, one bool. */
static Val *step_below(Imp *im, int64_t step, Val *m) {
  return ox_op2(im, OP_LESS, ox_scalar(im, (double)step, TY_I64), m);
}

/* Loop, unrolled.  While whether a step runs is known at import (a trip
 * count and conditions that fold), each step is a copy of the body.
 * Once it is decided at run time (a condition the body computes, a
 * trip count of run-time value), the loop is unrolled to its bound
 * (the trip count, or the bound a count of run-time length carries),
 * each further step guarded by `active`, one bool: the steps before ran
 * and this one may.  A loop with no such bound is unrolled to the
 * user's (OnnxOptions.loop_bound), its outputs checked at run time that
 * it took no further step.  A plan skips a step that does not run (its nodes
 * carry the guard, ir/guard.c), each loop-carried value is a `where` of
 * active between the step's and the one before, and a scan output
 * stacks every step, zeros where one did not run, its length the steps
 * that ran (ox_with_length: a value of run-time length). */
bool ox_op_loop(Imp *im, ONode *n) {
  const Onnx__GraphProto *body = graph_attr(im, "body");
  if (!body) return false;
  int n_carried = n->n_in - 2;
  int n_scan = (int)body->n_output - 1 - n_carried;
  if (n_carried < 0 || n_scan < 0 || n->n_out != n_carried + n_scan)
    return ox_bad(im, "the body's %zu outputs do not match %d loop-carried values and %d outputs", body->n_output,
                  n_carried, n->n_out);
  Val *vm = ox_in_opt(n, 0), *vc = ox_in_opt(n, 1);
  if ((vm && vm->kind != VK_TENSOR) || (vc && vc->kind != VK_TENSOR))
    return ox_bad(im, "the trip count and the condition must be tensors");
  if (!vm && !vc) return ox_bad(im, "a loop with neither a trip count nor a condition never ends");
  if ((vm && ir_type_numel(&vm->type) != 1) || (vc && ir_type_numel(&vc->type) != 1))
    return ox_bad(im, "the trip count and the condition must hold one value each");
  double trips = 9e18, c = 1;
  int64_t user_bound = im->opt ? im->opt->loop_bound : 0;
  if (user_bound < 0 || user_bound > MAX_UNROLL)
    return ox_bad(im, "the loop bound %" PRId64 " is out of range (1 to %d steps, or 0 for none)", user_bound,
                  (int)MAX_UNROLL);
  int64_t end_at = 0; /* > 0: the user's bound ends the unrolling there */
  Val *run_m = NULL;
  /* A loop with no bound runs in the plan (plan_loop), unless it stacks
   * scan outputs (their length would have none) or the user bounded it. */
  bool plan_ok = n_scan == 0 && !user_bound;
  if (vm && !known_scalar(vm, &trips) && !run_time_trips(im, vm, user_bound, plan_ok, &trips, &run_m, &end_at))
    return false;
  /* active: known (c) until the loop's course is decided at run time */
  Val *active = NULL;
  if (vc && !known_scalar(vc, &c) && !(active = ox_reshape(im, ox_cast(im, vc, TY_BOOL), 0, NULL))) return false;
  Arena *a = &im->c->arena;
  Val **state = ARENA_ARRAY(a, Val *, n_carried + 2), **outs = ARENA_ARRAY(a, Val *, body->n_output + 1);
  Val ***scans = ARENA_ARRAY(a, Val **, n_scan + 1);
  Val **ran = ARENA_ARRAY(a, Val *, MAX_UNROLL + 1); /* a guarded step's active; NULL: it ran */
  for (int i = 0; i < n_carried; i++)
    if (!(state[2 + i] = ox_in_req(im, n, 2 + i))) return false;
  for (int k = 0; k < n_scan; k++) scans[k] = ARENA_ARRAY(a, Val *, MAX_UNROLL + 1);
  const Guard *outer = im->guard;
  bool guarded = false;
  int64_t step = 0;
  for (; step < trips && (!end_at || step < end_at) && (active || c != 0); step++) {
    Val *on = active;
    if (run_m && !(on = ox_op2(im, OP_LOGICAL_AND, on ? on : ox_scalar(im, 1, TY_BOOL), step_below(im, step, run_m))))
      return false;
    if (on && !guarded && !end_at && (!vm || trips > MAX_UNROLL)) {
      if (plan_ok) {
        /* a known trip count past 2^62 (TorchScript's INT64_MAX for a
         * while loop) is never reached: none */
        Val *m = run_m;
        if (vm && !m && trips < 0x1p62 && !(m = ox_scalar(im, trips, TY_I64))) return false;
        return plan_loop(im, n, body, step, state, n_carried, on, m);
      }
      if (!user_bound && !vm)
        return ox_bad(im, "the loop's end is decided at run time and it has no trip count: a loop with scan outputs "
                          "is unrolled, so give it a bound with --loop-bound=N (at most %d steps; a run that needs "
                          "more fails)",
                      (int)MAX_UNROLL);
      if (!user_bound)
        return ox_bad(im,
                      "the loop's end is decided at run time and its trip count (%" PRId64 ") is more than the %d "
                      "steps dlcc unrolls: give it a bound with --loop-bound=N (a run that needs more fails)",
                      run_m ? (int64_t)trips : ir_tensor_get_int(vm->k ? vm->k : vm->hint, 0), (int)MAX_UNROLL);
      if (step > user_bound)
        return ox_bad(im, "the loop takes %" PRId64 " steps before its end is decided at run time, more than "
                          "--loop-bound=%" PRId64, step, user_bound);
      end_at = user_bound;
      if (step == end_at) break; /* the check below: it ends here */
    }
    if (step == MAX_UNROLL)
      return ox_bad(im, "the loop runs more than %d steps, more than dlcc unrolls", (int)MAX_UNROLL);
    if (on && !(on = ox_reshape(im, on, 0, NULL))) return false;
    guarded |= on != NULL;
    ran[step] = on;
    state[0] = ox_scalar(im, (double)step, TY_I64);
    state[1] = ox_scalar(im, 1, TY_BOOL);
    if (on) im->guard = ir_guard_new(im->g, ox_use(im, on), true, outer);
    bool ok = ox_import_subgraph(im, body, "the body", 2 + n_carried, state, outs);
    /* the body's word on the next step, inside the step's guard: only
     * the merge below reads it from outside */
    Val *go = NULL;
    if (ok && (outs[0]->kind != VK_TENSOR || ir_type_numel(&outs[0]->type) != 1))
      ok = ox_bad(im, "the body's condition must be one value");
    else if (ok && !(go = ox_reshape(im, ox_cast(im, outs[0], TY_BOOL), 0, NULL)))
      ok = false;
    im->guard = outer;
    if (!ok) return false;
    for (int i = 0; i < n_carried; i++) {
      Val *next = outs[1 + i], *was = state[2 + i];
      if (!on) {
        state[2 + i] = next;
        continue;
      }
      if (next->kind != VK_TENSOR || was->kind != VK_TENSOR) {
        state[2 + i] = select_container(im, on, i, next, was);
      } else if (!ir_type_eq(&next->type, &was->type) || next->held != was->held) {
        char t1[IR_TYPE_STR_MAX], t2[IR_TYPE_STR_MAX];
        return ox_bad(im,
                      "loop-carried value %d is %s before step %" PRId64 " and %s after it: a loop whose end is "
                      "decided at run time keeps one type",
                      i + 1, ir_type_str(&was->type, t1, sizeof t1), step, ir_type_str(&next->type, t2, sizeof t2));
      } else if ((state[2 + i] = ox_where(im, on, next, was))) {
        state[2 + i]->held = was->held; /* a select keeps the values narrow */
      }
      if (!state[2 + i]) return false;
    }
    for (int k = 0; k < n_scan; k++) {
      Val *y = outs[1 + n_carried + k];
      if (y->kind != VK_TENSOR) return ox_bad(im, "scan output %d is %s: only tensors are stacked", k + 1, ox_kind_name(y));
      if (on) {
        int32_t held = y->held;
        if (!(y = ox_where(im, on, y, ox_scalar(im, 0, y->type.dtype)))) return false;
        y->held = held;
      }
      scans[k][step] = y;
    }
    /* the next step's: this one ran and its body says go on */
    if (on && !(active = ox_where(im, on, go, ox_scalar(im, 0, TY_BOOL)))) return false;
    if (!on) active = known_scalar(go, &c) ? NULL : go;
  }
  Val *ended = NULL; /* under the user's bound: the loop took no step past it */
  if (end_at && step == end_at && step < trips && (active || c != 0)) {
    Val *more = active ? active : ox_scalar(im, 1, TY_BOOL);
    if (run_m) more = ox_op2(im, OP_LOGICAL_AND, more, step_below(im, step, run_m));
    if (!more || !(ended = unless_skipped(im, ox_op1(im, OP_LOGICAL_NOT, more)))) return false;
  }
  for (int i = 0; i < n_carried; i++)
    if (!(n->out[i] = ended ? checked_end(im, i, state[2 + i], ended, end_at) : state[2 + i])) return false;
  /* the steps that ran: those before the first guarded one, and the
   * guarded ones whose active held */
  Val *count = NULL;
  int64_t fixed = 0;
  for (int64_t s = 0; guarded && s < step; s++) {
    if (!ran[s]) {
      fixed++;
      continue;
    }
    Val *one = ox_cast(im, ran[s], TY_I64);
    count = count ? ox_op2(im, OP_ADD, count, one) : one;
  }
  if (count && fixed) count = ox_op2s(im, OP_ADD, count, (double)fixed);
  /* Under the user's bound the scan outputs' length passes the check
   * too: a model that reads only their shape must not get the bound's. */
  if (ended && n_scan && !(count = checked_end(im, n_carried, count ? count : ox_scalar(im, (double)step, TY_I64), ended,
                                               end_at)))
    return false;
  for (int k = 0; k < n_scan; k++) {
    Val *y = step ? stack(im, (int)step, scans[k], 0) : empty_scan(im, body->output[1 + n_carried + k]);
    if (y && ended) y = checked_end(im, n_carried + k, y, ended, end_at);
    if (y && count) y = ox_with_length(im, y, 0, count, 0);
    if (!(n->out[n_carried + k] = y)) return false;
  }
  return true;
}

/* One scan, unrolled: vals holds the n_state initial states then the
 * n_scan_in inputs (each scanned along axis[j], backwards where dir[j]);
 * on return vals' first n_state are the final states and ys[k][t] the
 * k-th scan output of step t (stored backwards where odir[k]), T the
 * steps.  ONNX's Scan of opset 9 on, and each batch element of opset 8's. */
static bool scan_unrolled(Imp *im, const Onnx__GraphProto *body, int n_state, int n_scan_in, Val **vals,
                          const int *axis, const int64_t *dir, int n_scan_out, const int64_t *odir, Val ***ys,
                          int64_t *steps) {
  Arena *a = &im->c->arena;
  int n_in = n_state + n_scan_in;
  Val **xs = ARENA_ARRAY(a, Val *, n_scan_in + 1), **outs = ARENA_ARRAY(a, Val *, n_state + n_scan_out + 1);
  int64_t T = -1;
  for (int j = 0; j < n_scan_in; j++) {
    xs[j] = vals[n_state + j];
    int64_t len = xs[j]->type.dims[axis[j]];
    if (T >= 0 && len != T) return ox_bad(im, "the scan inputs have lengths %" PRId64 " and %" PRId64, T, len);
    T = len;
  }
  if (T > MAX_UNROLL) return ox_bad(im, "the scan runs %" PRId64 " steps, more than dlcc unrolls (%d)", T, (int)MAX_UNROLL);
  for (int k = 0; k < n_scan_out; k++) ys[k] = ARENA_ARRAY(a, Val *, T + 1);
  for (int64_t t = 0; t < T; t++) {
    for (int j = 0; j < n_scan_in; j++) {
      int64_t at = dir && dir[j] ? T - 1 - t : t, d[DL_MAX_RANK];
      Val *sl = ox_slice_axis(im, xs[j], axis[j], at, at + 1, 1);
      if (!sl) return false;
      for (int i = 0, m = 0; i < sl->type.rank; i++)
        if (i != axis[j]) d[m++] = sl->type.dims[i];
      vals[n_state + j] = ox_reshape(im, sl, sl->type.rank - 1, d);
    }
    if (!ox_import_subgraph(im, body, "the body", n_in, vals, outs)) return false;
    for (int i = 0; i < n_state; i++) vals[i] = outs[i];
    for (int k = 0; k < n_scan_out; k++) {
      if (outs[n_state + k]->kind != VK_TENSOR)
        return ox_bad(im, "scan output %d is %s: only tensors are stacked", k + 1, ox_kind_name(outs[n_state + k]));
      ys[k][odir && odir[k] ? T - 1 - t : t] = outs[n_state + k];
    }
  }
  if (n_scan_out && T == 0) return ox_bad(im, "a scan of no steps is not supported");
  *steps = T;
  return true;
}

/* Scan of opset 8: a batch axis first on every state and scan input
 * (the sequence axis second), the body run per batch element; unrolled
 * per element and stacked again.  sequence_lens, when given, must be
 * known and every length the whole sequence. */
static bool scan_batched(Imp *im, ONode *n, const Onnx__GraphProto *body, int64_t n_scan_in) {
  int nd;
  const int64_t *dirs;
  if (!ox_attr_ints(im, "directions", &nd, &dirs)) return false;
  int n_state = n->n_in - 1 - (int)n_scan_in, n_scan_out = n->n_out - n_state;
  if (n_scan_in < 1 || n_state < 0 || n_scan_out < 0 || (int)body->n_output != n->n_out ||
      (nd >= 0 && nd != n_scan_in))
    return ox_bad(im, "num_scan_inputs %" PRId64 " and directions do not fit %d inputs and a body of %zu outputs",
                  n_scan_in, n->n_in, body->n_output);
  Arena *a = &im->c->arena;
  Val **in = ARENA_ARRAY(a, Val *, n->n_in + 1);
  for (int i = 1; i < n->n_in; i++)
    if (!(in[i] = ox_in_req(im, n, i))) return false;
  int64_t B = -1;
  for (int i = 1; i < n->n_in; i++) {
    int need = i > n_state ? 2 : 1;
    if (in[i]->type.rank < need || (B >= 0 && in[i]->type.dims[0] != B))
      return ox_bad(im, "input %d must have the batch axis first (and a scan input the sequence second)", i);
    B = in[i]->type.dims[0];
  }
  Val *lens = ox_in_opt(n, 0);
  if (lens) {
    int64_t T = in[n_state + 1]->type.dims[1], l[64];
    int nl;
    if (B > 64 || !ox_const_ints(im, lens, "sequence_lens", &nl, l)) return false;
    for (int b = 0; b < nl; b++)
      if (l[b] != T) return ox_bad(im, "sequence_lens[%d] is %" PRId64 ": only whole sequences (%" PRId64 ") are supported", b, l[b], T);
  }
  if (B < 1 || B > MAX_UNROLL) return ox_bad(im, "a batch of %" PRId64 " is not supported (1 to %d)", B, (int)MAX_UNROLL);
  int *axis = ARENA_ARRAY(a, int, n_scan_in + 1);
  for (int j = 0; j < n_scan_in; j++) axis[j] = 0; /* the sequence axis, once the batch's is gone */
  Val **vals = ARENA_ARRAY(a, Val *, n->n_in + 1), ***per = ARENA_ARRAY(a, Val **, n->n_out + 1);
  for (int o = 0; o < n->n_out; o++) per[o] = ARENA_ARRAY(a, Val *, B + 1);
  Val ***ys = ARENA_ARRAY(a, Val **, n_scan_out + 1);
  for (int64_t b = 0; b < B; b++) {
    for (int i = 1; i < n->n_in; i++) {
      Val *sl = ox_slice_axis(im, in[i], 0, b, b + 1, 1);
      if (!sl) return false;
      vals[i - 1] = ox_reshape(im, sl, sl->type.rank - 1, sl->type.dims + 1);
    }
    int64_t T;
    if (!scan_unrolled(im, body, n_state, (int)n_scan_in, vals, axis, nd >= 0 ? dirs : NULL, n_scan_out, NULL, ys, &T))
      return false;
    for (int i = 0; i < n_state; i++) per[i][b] = vals[i];
    for (int k = 0; k < n_scan_out; k++)
      if (!(per[n_state + k][b] = stack(im, (int)T, ys[k], 0))) return false;
  }
  for (int o = 0; o < n->n_out; o++)
    if (!(n->out[o] = stack(im, (int)B, per[o], 0))) return false;
  return true;
}

/* Scan (opset 9 on): unrolled over the scan axis, whose length is static;
 * opset 8's batched form per batch element. */
bool ox_op_scan(Imp *im, ONode *n) {
  const Onnx__GraphProto *body = graph_attr(im, "body");
  int64_t n_scan_in;
  if (!body || !ox_attr_int(im, "num_scan_inputs", -1, &n_scan_in)) return false;
  if (im->opset < 9) return scan_batched(im, n, body, n_scan_in);
  int nia, nid, noa, nod;
  const int64_t *in_axes, *in_dirs, *out_axes, *out_dirs;
  if (!ox_attr_ints(im, "scan_input_axes", &nia, &in_axes) || !ox_attr_ints(im, "scan_input_directions", &nid, &in_dirs) ||
      !ox_attr_ints(im, "scan_output_axes", &noa, &out_axes) ||
      !ox_attr_ints(im, "scan_output_directions", &nod, &out_dirs))
    return false;
  int n_state = n->n_in - (int)n_scan_in, n_scan_out = n->n_out - n_state;
  if (n_scan_in < 1 || n_state < 0 || n_scan_out < 0 || (int)body->n_output != n->n_out)
    return ox_bad(im, "num_scan_inputs %" PRId64 " does not fit %d inputs and a body of %zu outputs", n_scan_in,
                  n->n_in, body->n_output);
  if ((nia >= 0 && nia != n_scan_in) || (nid >= 0 && nid != n_scan_in) || (noa >= 0 && noa != n_scan_out) ||
      (nod >= 0 && nod != n_scan_out))
    return ox_bad(im, "the scan axes and directions need one entry per scan input and output");
  Arena *a = &im->c->arena;
  Val **vals = ARENA_ARRAY(a, Val *, n->n_in + 1);
  int *axis = ARENA_ARRAY(a, int, n_scan_in + 1);
  for (int i = 0; i < n->n_in; i++)
    if (!(vals[i] = ox_in_req(im, n, i))) return false;
  for (int j = 0; j < n_scan_in; j++)
    if (!ox_norm_axis(im, nia >= 0 ? in_axes[j] : 0, vals[n_state + j]->type.rank, &axis[j])) return false;
  Val ***ys = ARENA_ARRAY(a, Val **, n_scan_out + 1);
  int64_t T;
  if (!scan_unrolled(im, body, n_state, (int)n_scan_in, vals, axis, nid >= 0 ? in_dirs : NULL, n_scan_out,
                     nod >= 0 ? out_dirs : NULL, ys, &T))
    return false;
  for (int i = 0; i < n_state; i++) n->out[i] = vals[i];
  for (int k = 0; k < n_scan_out; k++) {
    int r = ys[k][0]->type.rank + 1, ax;
    if (!ox_norm_axis(im, noa >= 0 ? out_axes[k] : 0, r, &ax) || !(n->out[n_state + k] = stack(im, (int)T, ys[k], ax)))
      return false;
  }
  return true;
}
