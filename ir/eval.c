/* The reference interpreter: takes a graph and host tensors for its
 * inputs and params, returns its outputs.  Each op is a plain loop over
 * its definition (see eval.h for the numeric rules); nothing here is
 * clever, because everything else is checked against it.  A node of an
 * If's branch that the run does not take (Node.guard) is skipped, its
 * results zeros, as a plan skips its steps.  This file walks
 * the graph and dispatches on the op; the ops live in eval_elem.c,
 * eval_reduce.c, eval_conv.c, eval_data.c and train_ops.c. */
#include "eval_impl.h"

/* ---- sources ---- */

static bool eval_source(Eval *e, const Node *n, const TensorMapIndex *m, const char *what, Tensor *out) {
  const char *name = ir_attr_str(n, "name");
  const Tensor *t = ir_tensor_map_index_find(m, name);
  char want[IR_TYPE_STR_MAX], got[IR_TYPE_STR_MAX];
  ir_type_str(&n->out[0].type, want, sizeof want);
  if (!t) return fail(e, "no %s named '%s' (%s) was given", what, name, want);
  if (!ir_type_eq(&t->type, &n->out[0].type))
    return fail(e, "%s '%s' is %s, the graph expects %s", what, name,
                ir_type_str(&t->type, got, sizeof got), want);
  if (!t->data && ir_tensor_nbytes(&t->type)) return fail(e, "%s '%s' has no data", what, name);
  out->type = t->type;
  out->data = t->data;
  return true;
}

/* Runs one node: the results in out[] are allocated (except for sources,
 * which point at the caller's data). */
static bool eval_node(Eval *e, const Node *n, Tensor *const *in, Tensor *out,
                      const TensorMapIndex *inputs, const TensorMapIndex *params) {
  switch (n->op) {
    case OP_INPUT: return eval_source(e, n, inputs, "input", out);
    case OP_PARAM: return eval_source(e, n, params, "param", out);
    case OP_CONST: {
      int64_t count = numel(&out->type);
      for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, ir_attr_float(n, "value"));
      return true;
    }
    case OP_IOTA: {
      /* start + step * the coordinate along axis, rounded once. */
      const TensorType *t = &out->type;
      int axis = (int)ir_attr_int(n, "axis");
      int64_t inner = 1;
      for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
      int64_t len = t->rank ? t->dims[axis] : 1, count = numel(t);
      double start = ir_attr_float(n, "start"), step = ir_attr_float(n, "step");
      for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, start + step * (double)(i / inner % len));
      return true;
    }
    case OP_NEG:
    case OP_ABS:
    case OP_RELU:
    case OP_LEAKY_RELU:
    case OP_CLIP:
    case OP_SIGMOID:
    case OP_TANH:
    case OP_GELU:
    case OP_SILU:
    case OP_HARDSIGMOID:
    case OP_HARDSWISH:
    case OP_EXP:
    case OP_LOG:
    case OP_SQRT:
    case OP_RSQRT:
    case OP_ERF:
    case OP_RECIPROCAL:
    case OP_SIN:
    case OP_COS:
    case OP_ROUND:
    case OP_FLOOR:
    case OP_CEIL:
    case OP_FP_ROUND:
    case OP_SIGN:
    case OP_TAN:
    case OP_ASIN:
    case OP_ACOS:
    case OP_ATAN:
    case OP_SINH:
    case OP_COSH:
    case OP_ASINH:
    case OP_ACOSH:
    case OP_ATANH:
    case OP_CAST: return eval_unary(e, n, in[0], out);
    case OP_ALLREDUCE_MEAN: /* one process: the mean over one rank */
    case OP_ALLREDUCE_SUM:
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      if (!e->comm) return true;
      if (out->type.dtype != TY_F32) return fail(e, "%s over ranks supports f32 only", ir_ops[n->op].name);
      {
        char why[256] = "";
        if (!e->comm->reduce(e->comm->ctx, out->data, ir_type_numel(&out->type), n->op == OP_ALLREDUCE_SUM, why,
                             sizeof why))
          return fail(e, "%s", why);
      }
      return true;
    case OP_TP_COPY:
    case OP_STAGE:
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_QUANTIZE:
    case OP_DEQUANTIZE: return eval_quant(n, in[0], n->n_in > 1 ? in[1] : NULL, out);
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_POW:
    case OP_MAXIMUM:
    case OP_MINIMUM:
    case OP_MOD:
    case OP_EQ:
    case OP_NE:
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
    case OP_BIT_AND:
    case OP_BIT_OR:
    case OP_BIT_XOR:
    case OP_SHL:
    case OP_SHR: return eval_binary(e, n, in[0], in[1], out);
    case OP_BITCAST: /* same size: the bytes as they are */
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_BIT_NOT:
      for (int64_t i = 0, count = numel(&out->type); i < count; i++) set_i(out, i, ~get_i(in[0], i));
      return true;
    case OP_EQUAL:
    case OP_NOT_EQUAL:
    case OP_LESS:
    case OP_LESS_EQUAL:
    case OP_GREATER:
    case OP_GREATER_EQUAL:
    case OP_LOGICAL_AND:
    case OP_LOGICAL_OR:
    case OP_LOGICAL_XOR: return eval_bool_binary(n, in[0], in[1], out);
    case OP_ISNAN:
    case OP_ISINF:
    case OP_LOGICAL_NOT: return eval_bool_unary(n, in[0], out);
    case OP_WHERE: return eval_where(in[0], in[1], in[2], out);
    case OP_LOOP_BEGIN: /* the carried values' first step; eval_graph runs the body */
      for (int i = 0; i < n->n_out; i++) memcpy(out[i].data, in[i + 1]->data, ir_tensor_nbytes(&out[i].type));
      return true;
    case OP_LOOP_END: break; /* eval_graph's */
    case OP_CHECK: /* the message is whole: no location or op name before it */
      if (get_i(in[1], 0) == 0) {
        snprintf(e->err, e->errlen, "%s", ir_attr_str(n, "message"));
        return false;
      }
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_REDUCE_SUM:
    case OP_REDUCE_MEAN:
    case OP_REDUCE_MAX:
    case OP_REDUCE_MIN:
    case OP_REDUCE_PROD: return eval_reduce(e, n, in[0], out);
    case OP_ARGMAX: return eval_argmax(e, n, in[0], out);
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: return eval_softmax(e, n, in[0], out);
    case OP_LAYERNORM:
    case OP_RMS_NORM:
    case OP_GROUP_NORM:
      return eval_norm(e, n, in[0], n->n_in > 1 ? in[1] : NULL, n->n_in > 2 ? in[2] : NULL, out);
    case OP_GLOBAL_AVGPOOL: return eval_global_avgpool(e, n, in[0], out);
    case OP_ATTENTION:
    case OP_ATTENTION_LSE: return eval_attention(n, in, out) || fail(e, "out of memory");
    case OP_ATTENTION_GRAD: return eval_attention_grad(n, in, out) || fail(e, "out of memory");
    case OP_BATCHNORM: return eval_batchnorm(e, n, in, out);
    case OP_MATMUL: return eval_matmul(e, n, in[0], in[1], out);
    case OP_LINEAR: return eval_linear(e, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_CONV2D:
    case OP_CONV3D: return eval_conv(e, n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_RESIZE: return eval_resize(e, n, in[0], out);
    case OP_GRID_SAMPLE: return eval_grid_sample(n, in[0], in[1], out);
    case OP_CONV_TRANSPOSE2D:
    case OP_CONV_TRANSPOSE3D:
      return eval_conv_transpose(e, n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out);
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_MAXPOOL3D:
    case OP_AVGPOOL3D: return eval_pool(e, n, in[0], out);
    case OP_RESHAPE:
      if (ir_tensor_nbytes(&in[0]->type) != ir_tensor_nbytes(&out->type))
        return fail(e, "element counts differ");
      memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type));
      return true;
    case OP_TRANSPOSE: return eval_transpose(e, n, in[0], out);
    case OP_EXPAND: return eval_expand(e, in[0], out);
    case OP_CONCAT: return eval_concat(e, n, n->n_in, in, out);
    case OP_SLICE: return eval_slice(e, n, in[0], out);
    case OP_PAD: return eval_pad(e, n, in[0], out);
    case OP_GATHER: return eval_gather(e, n, in[0], in[1], out);
    case OP_GATHER_ELEMENTS: return eval_gather_elements(e, n, in[0], in[1], out);
    case OP_GATHER_ND: return eval_gather_nd(e, n, in[0], in[1], out);
    case OP_SCATTER_ELEMENTS: return eval_scatter_elements(e, n, in, out);
    case OP_SCATTER_ND: return eval_scatter_nd(e, n, in, out);
    case OP_TOPK: return eval_topk(e, n, in[0], out);
    case OP_NONZERO: eval_nonzero(in[0], out); return true;
    case OP_SHAPE_OF: /* ir/bounds.c replaces it; the static dims else */
      for (int d = 0; d < in[0]->type.rank; d++) ((int64_t *)out->data)[d] = in[0]->type.dims[d];
      return true;
    case OP_WITH_LENGTH: memcpy(out->data, in[0]->data, ir_tensor_nbytes(&out->type)); return true;
    case OP_NMS: eval_nms(n, in, out); return true;
    case OP_UNIQUE: return eval_unique(e, n, in[0], out);
    case OP_LSTM:
    case OP_GRU: return eval_rnn(e, n, n->n_in, in, out);
    case OP_LSTM_BPTT: return eval_lstm_bptt(e, n, in, out);
    case OP_GRU_BPTT: return eval_gru_bptt(e, n, in, out);
    case OP_CONV_WEIGHT_GRAD:
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD:
    case OP_EMBEDDING_GRAD:
    case OP_XENT:
    case OP_XENT_GRAD:
    case OP_XENT_BOTH:
    case OP_DROPOUT:
    case OP_RANDOM_UNIFORM:
    case OP_RESIZE_GRAD:
    case OP_OPTIM_UPDATE: {
      char msg[256];
      return ir_eval_train_op(n, in, out, msg, sizeof msg) || fail(e, "%s", msg);
    }
    case OP_COUNT: break;
  }
  return fail(e, "unknown op %d", (int)n->op);
}

/* ---- the graph ---- */

typedef struct Slot {
  const Value *v;
  Tensor t;
  bool ready, owned;
  int last_use; /* index of the last node reading it; -1: none */
  bool is_output;
} Slot;

/* The slot of f's condition when the graph computes it, else NULL. */
static Slot *cond_slot(Slot *slots, int nvals, const Guard *f) {
  const Value *c = f->cond;
  return c && c->id >= 0 && c->id < nvals && slots[c->id].v == c ? &slots[c->id] : NULL;
}

/* False when a condition of n's guard, computed already, says its
 * branch is not taken: n is skipped (its results stay zeros, which only
 * the If's `where` reads and does not select), as a plan skips its
 * steps. */
static bool guard_holds(Slot *slots, int nvals, const Node *n) {
  for (const Guard *f = n->guard; f; f = f->outer) {
    if (f->loop) continue; /* eval_graph enters loops */
    const Slot *s = cond_slot(slots, nvals, f);
    if (s && s->ready && s->t.data && (((const unsigned char *)s->t.data)[0] != 0) != f->when) return false;
  }
  return true;
}

static void slot_release(Slot *s) {
  if (s->owned) ir_tensor_free(&s->t);
  s->t.data = NULL;
  s->owned = false;
}

/* Checks what the op functions rely on: operand count, attributes of the
 * right kinds, and result types equal to the shape rule's. */
static bool check_node(Eval *e, const Node *n) {
  const OpInfo *info = &ir_ops[n->op];
  if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in))
    return fail(e, "wrong number of operands (%d)", n->n_in);
  for (int i = 0; i < info->n_attrs; i++) {
    const AttrSpec *s = &info->attrs[i];
    const Attr *a = ir_attr(n, s->name);
    bool optional = s->default_text && strcmp(s->default_text, "?") == 0;
    if ((!a && !optional) || (a && a->kind != s->kind))
      return fail(e, "attribute '%s' is %s", s->name, a ? "of the wrong kind" : "missing");
  }
  for (int i = 0; i < n->n_out; i++) {
    const TensorType *t = &n->out[i].type;
    if ((unsigned)t->dtype >= TY_COUNT || t->rank < 0 || t->rank > DL_MAX_RANK ||
        ir_type_numel(t) < 0)
      return fail(e, "result %d has an invalid type", i);
  }
  if (!info->shape) return true;
  TensorType want[IR_MAX_RESULTS];
  char msg[256];
  memset(want, 0, sizeof want);
  if (!info->shape(n, want, msg, sizeof msg)) return fail(e, "%s", msg);
  for (int i = 0; i < n->n_out; i++)
    if (!ir_type_eq(&want[i], &n->out[i].type)) {
      char a[IR_TYPE_STR_MAX], b[IR_TYPE_STR_MAX];
      return fail(e, "result %d is %s, its shape rule says %s", i,
                  ir_type_str(&n->out[i].type, a, sizeof a), ir_type_str(&want[i], b, sizeof b));
    }
  return true;
}

bool ir_eval(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
             char *err, size_t errlen) {
  return ir_eval_observe(g, inputs, params, outputs, NULL, NULL, err, errlen);
}

static bool eval_graph(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                       IrEvalObserver observe, void *ud, const IrEvalComm *comm, char *err, size_t errlen);

bool ir_eval_observe(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                     IrEvalObserver observe, void *ud, char *err, size_t errlen) {
  return eval_graph(g, inputs, params, outputs, observe, ud, NULL, err, errlen);
}

bool ir_eval_comm(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                  const IrEvalComm *comm, char *err, size_t errlen) {
  return eval_graph(g, inputs, params, outputs, NULL, NULL, comm, err, errlen);
}

static bool eval_graph(Graph *g, const TensorMap *inputs, const TensorMap *params, Tensor *outputs,
                       IrEvalObserver observe, void *ud, const IrEvalComm *comm, char *err, size_t errlen) {
  Eval e = {.err = err, .errlen = errlen, .comm = comm};
  if (errlen) err[0] = 0;
  for (int i = 0; i < g->n_outputs; i++) outputs[i] = (Tensor){0};
  /* Loops: each body in one piece before its loop_end, which sends the
   * walk back to the body's first node while keep holds. */
  IrLoops loops = {0}; /* found only where there are some: training steps evaluate many times */
  if (ir_has_loops(g) && !ir_loops_order(g, &loops, err, errlen)) return false;
  if (!loops.n) ir_number(g);
  int nvals = 0, nnodes = 0;
  for (Node *n = g->first; n; n = n->next) nvals += n->n_out, nnodes++;
  Slot *slots = calloc((size_t)nvals + 1, sizeof(Slot));
  Node **at = calloc((size_t)nnodes + 1, sizeof *at);
  int *loop_index = calloc((size_t)nnodes + 1, sizeof *loop_index); /* a loop_begin's or loop_end's loop */
  bool *entered = calloc((size_t)loops.n + 1, sizeof *entered);
  TensorMapIndex in_ix, param_ix;
  bool indexed = ir_tensor_map_index(&in_ix, inputs);
  if (indexed && !ir_tensor_map_index(&param_ix, params)) {
    ir_tensor_map_index_free(&in_ix);
    indexed = false;
  }
  if (!slots || !at || !loop_index || !entered || !indexed) {
    free(slots), free(at), free(loop_index), free(entered);
    if (indexed) ir_tensor_map_index_free(&in_ix), ir_tensor_map_index_free(&param_ix);
    return fail(&e, "out of memory");
  }
  for (Node *n = g->first; n; n = n->next) {
    at[n->id] = n;
    for (int i = 0; i < n->n_out; i++) {
      slots[n->out[i].id].v = &n->out[i];
      slots[n->out[i].id].last_use = -1;
    }
  }
  for (int l = 0; l < loops.n; l++) loop_index[loops.begin[l]->id] = loop_index[loops.end[l]->id] = l;
  bool ok = true;
  /* Last uses, so intermediates die as soon as they can: a value read
   * in a loop's body that the body does not compute lives to the end
   * of the loop (every step reads it). */
  for (Node *n = g->first; n && ok; n = n->next)
    for (int i = 0; i < n->n_in; i++) {
      const Value *v = n->in[i];
      if (!v || v->id < 0 || v->id >= nvals || slots[v->id].v != v) {
        e.node = n;
        ok = fail(&e, "operand %d is not defined in the graph", i);
        break;
      }
      int last = n->id, d = v->def->id;
      for (int l = loops.n ? loops.of[n->id] : -1; l >= 0; l = loops.outer[l]) {
        bool inside = false;
        for (int m = loops.of[d]; m >= 0 && !inside; m = loops.outer[m]) inside = m == l;
        if (!inside) last = loops.end[l]->id;
      }
      if (slots[v->id].last_use < last) slots[v->id].last_use = last;
    }
  for (Node *n = g->first; n && ok; n = n->next)
    for (const Guard *f = n->guard; f; f = f->outer) {
      Slot *s = cond_slot(slots, nvals, f);
      if (s && s->last_use < n->id) s->last_use = n->id;
    }
  for (int i = 0; i < g->n_outputs && ok; i++) {
    const Value *v = g->outputs[i];
    if (!v || v->id < 0 || v->id >= nvals || slots[v->id].v != v)
      ok = fail(&e, "output '%s' is not defined in the graph", g->output_names[i]);
    else
      slots[v->id].is_output = true;
  }
  Tensor *in[64], **inp = in;
  for (int k = 0; k < nnodes && ok; k++) {
    Node *n = at[k];
    e.node = n;
    if (n->op == OP_LOOP_END) {
      /* The body's step is done: its next values become the carried
       * ones; another step while keep holds, else the results. */
      int l = loop_index[k];
      Node *b = loops.begin[l];
      bool again = false;
      if (entered[l]) {
        for (int i = 0; i < n->n_in && ok; i++)
          if (!slots[n->in[i]->id].ready) ok = fail(&e, "operand %d is used before it is computed", i);
        again = ok && get_i(&slots[n->in[n->n_out]->id].t, 0) != 0;
        /* all at once: a next may be another carried value (a swap) */
        Tensor *next = ok ? calloc((size_t)n->n_out, sizeof *next) : NULL;
        if (ok && !next) ok = fail(&e, "out of memory");
        for (int i = 0; ok && i < n->n_out; i++)
          if (!ir_tensor_alloc(&next[i], &b->out[i].type))
            ok = fail(&e, "out of memory");
          else
            memcpy(next[i].data, slots[n->in[n->n_out + 1 + i]->id].t.data, ir_tensor_nbytes(&b->out[i].type));
        for (int i = 0; ok && i < n->n_out; i++)
          memcpy(slots[b->out[i].id].t.data, next[i].data, ir_tensor_nbytes(&b->out[i].type));
        for (int i = 0; next && i < n->n_out; i++) ir_tensor_free(&next[i]);
        free(next);
      }
      if (!ok) break;
      if (again) {
        k = b->id; /* the body's first node next */
        continue;
      }
      for (int i = 0; i < n->n_out && ok; i++) {
        Slot *s = &slots[n->out[i].id];
        slot_release(s);
        if (!ir_tensor_alloc(&s->t, &n->out[i].type)) {
          ok = fail(&e, "out of memory");
          break;
        }
        memcpy(s->t.data, slots[b->out[i].id].t.data, ir_tensor_nbytes(&n->out[i].type));
        s->ready = s->owned = true;
        if (observe) observe(ud, &n->out[i], &s->t);
      }
      for (int i = 0; i < n->n_in && ok; i++) {
        Slot *s = &slots[n->in[i]->id];
        if (s->last_use == k && !s->is_output) slot_release(s);
      }
      continue;
    }
    if (n->n_in > (int)ARRAY_LEN(in)) {
      inp = malloc(sizeof(Tensor *) * (size_t)n->n_in);
      if (!inp) {
        ok = fail(&e, "out of memory");
        break;
      }
    }
    for (int i = 0; i < n->n_in && ok; i++) {
      Slot *s = &slots[n->in[i]->id];
      if (!s->ready) ok = fail(&e, "operand %d is used before it is computed", i);
      inp[i] = &s->t;
    }
    if (ok) ok = check_node(&e, n);
    if (ok && n->n_out > IR_MAX_RESULTS) ok = fail(&e, "too many results");
    Tensor out[IR_MAX_RESULTS];
    int made = 0;
    bool source = n->op == OP_INPUT || n->op == OP_PARAM;
    for (; ok && !source && made < n->n_out; made++)
      if (!ir_tensor_alloc(&out[made], &n->out[made].type)) {
        char b[IR_TYPE_STR_MAX];
        ok = fail(&e, "out of memory for %s", ir_type_str(&n->out[made].type, b, sizeof b));
      }
    if (ok && (source || guard_holds(slots, nvals, n))) ok = eval_node(&e, n, inp, out, &in_ix, &param_ix);
    if (ok && n->op == OP_LOOP_BEGIN) {
      int l = loop_index[k];
      entered[l] = get_i(inp[0], 0) != 0;
      if (!entered[l]) k = loops.end[l]->id - 1; /* straight to the loop_end */
    }
    if (inp != in) free(inp);
    inp = in;
    if (!ok) {
      for (int i = 0; i < made; i++) ir_tensor_free(&out[i]);
      break;
    }
    for (int i = 0; i < n->n_out; i++) {
      Slot *s = &slots[n->out[i].id];
      slot_release(s); /* a loop's body's, from the step before */
      s->t = out[i];
      s->ready = true;
      s->owned = !source;
      if (observe) observe(ud, &n->out[i], &s->t);
      if (s->last_use < 0 && !s->is_output) slot_release(s);
    }
    for (int i = 0; i < n->n_in; i++) {
      Slot *s = &slots[n->in[i]->id];
      if (s->last_use == n->id && !s->is_output) slot_release(s);
    }
  }
  e.node = NULL;
  for (int i = 0; i < g->n_outputs && ok; i++) {
    Slot *s = &slots[g->outputs[i]->id];
    if (!s->ready) {
      ok = fail(&e, "output '%s' was never computed", g->output_names[i]);
      break;
    }
    if (!ir_tensor_alloc(&outputs[i], &s->t.type)) {
      ok = fail(&e, "out of memory");
      break;
    }
    memcpy(outputs[i].data, s->t.data, ir_tensor_nbytes(&s->t.type));
  }
  if (!ok)
    for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&outputs[i]);
  for (int i = 0; i < nvals; i++) slot_release(&slots[i]);
  free(slots), free(at), free(loop_index), free(entered);
  ir_tensor_map_index_free(&in_ix);
  ir_tensor_map_index_free(&param_ix);
  return ok;
}
