/* Training mode (autodiff.h): takes a verified inference graph, returns
 * it in place as the forward of a training step, written with ops that
 * have gradient rules, its state updates appended as outputs marked with
 * ir_set_output_update:
 *   - batchnorm normalizes with the batch's statistics and updates the
 *     running ones as PyTorch's training mode does;
 *   - an lstm or gru becomes one per layer, whose gradient rule
 *     (ir/grad.c) backpropagates through time with lstm_bptt or
 *     gru_bptt;
 *   - under unroll_rnn they are unrolled over time instead (one GEMM
 *     for every step's input projection, then per step the hidden
 *     projection and the gates), so their gradient is backpropagation
 *     through time built from the rules of linear, slice, sigmoid, tanh,
 *     mul and add;
 *   - attention stays one op, attention_lse (its rows' logsumexp a
 *     second result), its gradient attention_grad (ir/grad.c), except
 *     where its additive mask depends on a float param (a learned
 *     position bias): the mask's gradient is a whole Sq x Sk matrix per
 *     head, so that attention is written out as its two matmuls and a
 *     softmax, with its mask, causal cut, grouped K/V heads and
 *     PyTorch's zeros for a row with no key left;
 *   - the step counter dropout draws with, the param dlcc.step, advances
 *     by one.
 * Dropout itself arrives as its op from the frontend (LowerOptions). */
#include <math.h>
#include <string.h>

#include "ir/grad.h"
#include "passes/autodiff.h"
#include "passes/pass.h"

typedef struct Mode {
  Graph *g;
  int sync_bn; /* AutodiffOptions' */
  bool no_running; /* batch statistics only: the running ones left alone */
  bool unroll_rnn;
  int n_updates, cap_updates;
  Value **updates;
  const char **names;
  bool failed;
} Mode;

static void add_update(Mode *m, Value *v, const char *param) {
  if (m->n_updates == m->cap_updates) {
    int cap = m->cap_updates ? 2 * m->cap_updates : 8;
    Arena *a = &m->g->ctx->arena;
    m->updates = arena_realloc(a, m->updates, sizeof(Value *) * (size_t)m->cap_updates, sizeof(Value *) * (size_t)cap);
    m->names = arena_realloc(a, m->names, sizeof(char *) * (size_t)m->cap_updates, sizeof(char *) * (size_t)cap);
    m->cap_updates = cap;
  }
  m->updates[m->n_updates] = v;
  m->names[m->n_updates++] = param;
}

/* Moves the nodes from first to the end of g before `before`, which they
 * replace: its results' uses read `with` instead, and it goes. */
static void replace_node(Graph *g, Node *first, Node *before, Value *const *with) {
  for (Node *n = first, *next; n; n = next) {
    next = n->next;
    ir_remove(g, n);
    ir_insert_before(g, before, n);
  }
  for (int k = 0; k < before->n_out; k++) ir_replace_uses(g, &before->out[k], with[k]);
  ir_remove(g, before);
}

/* ---- batchnorm ---- */

/* mean = E[x] and var = E[(x - mean)^2] over every axis but 1, both in
 * one pass over x: with a shift s per channel (x's first element of the
 * channel, x[0, c, 0, ...]) and d = x - s,
 *   var = E[d^2] - E[d]^2,
 * and E[x], E[d], E[d^2] three sums of the same rows that fusion
 * computes in one kernel (ir_reduce_siblings; passes/remat.c gives each
 * reader its own d and s).  The shift is what makes it accurate: E[x^2] -
 * E[x]^2 unshifted cancels to nothing in f32 when the mean is large
 * against the spread (mean 1000, spread 1e-2: E[x^2] = 1e6 carries an
 * error of about 0.06, the variance is 1e-4), while d is of the order of
 * the spread whenever s is a value of the channel, and E[d]^2 is then of
 * the order of the variance (the cancellation costs the bits by which s
 * lies off the mean, counted in standard deviations).  The mean is
 * E[x] itself rather than s + E[d], so that s is read only inside the
 * sums' kernel.  Rounding can still leave var a hair below zero: it is
 * clamped at 0.  Then
 * y = batchnorm(x, weight, bias, mean, var) = (x - mean) / sqrt(var +
 * eps) * weight + bias, and
 * running = (1 - momentum) running + momentum batch, with the unbiased
 * variance var * m / (m - 1) for m values per channel.
 *
 * With sync_bn = K ranks, each holding m values per channel (the driver
 * splits every batch evenly), E is over the K * m values: each rank's
 * mean and variance as above, then the global mean is their mean over
 * the ranks (allreduce_mean) and the global variance Chan's merge, the
 * ranks' mean of var_k + (mean_k - mean)^2: exact for equal counts and
 * free of cancellation.  Two rounds where SyncBatchNorm needs one, both
 * over C values.  The backward's two per-channel means (of dy and of
 * dy xhat) are all-reduced the same way by batchnorm's rule
 * (batch_stats K). */
static Value *over_ranks(Mode *md, Value *stat) {
  return md->sync_bn > 0 ? ir_grad_op(md->g, stat->def->loc, OP_ALLREDUCE_MEAN, 1, &stat) : stat;
}

/* The batch's mean and biased variance of x over axes, kept as [1, C,
 * 1, ...] (see above). */
static void batch_moments(Mode *md, SrcLoc at, Value *x, int n_axes, const int64_t *axes, Value **mean, Value **var) {
  Graph *g = md->g;
  const TensorType *xt = &x->type;
  Node *first = ir_node_new(g, OP_SLICE, 1, &x, at);
  int64_t st[DL_MAX_RANK], en[DL_MAX_RANK], sp[DL_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) st[d] = 0, en[d] = d == 1 ? xt->dims[1] : 1, sp[d] = 1;
  ir_set_ints(g, first, "starts", xt->rank, st);
  ir_set_ints(g, first, "ends", xt->rank, en);
  ir_set_ints(g, first, "steps", xt->rank, sp);
  Value *s = ir_grad_node(g, first);
  Value *d = ir_grad_op2(g, at, OP_SUB, x, s);
  Value *ed = ir_grad_mean(g, at, d, n_axes, axes, true);
  Value *m2 = ir_grad_mean(g, at, ir_grad_op2(g, at, OP_MUL, d, d), n_axes, axes, true);
  *mean = ir_grad_mean(g, at, x, n_axes, axes, true);
  Value *v = ir_grad_op2(g, at, OP_SUB, m2, ir_grad_op2(g, at, OP_MUL, ed, ed));
  *var = ir_grad_op(g, at, OP_RELU, 1, &v);
  if (md->sync_bn <= 0) return;
  Value *local = *mean;
  *mean = over_ranks(md, local);
  Value *off = ir_grad_op2(g, at, OP_SUB, local, *mean);
  *var = over_ranks(md, ir_grad_op2(g, at, OP_ADD, *var, ir_grad_op2(g, at, OP_MUL, off, off)));
}

/* The update of running statistic run (a param) toward the batch's
 * stat: (1 - momentum) run + momentum unbias stat.  A batchnorm that
 * runs twice (a module called twice) moves its statistics twice, one
 * update after the other, as PyTorch's in-place updates do. */
static void move_running(Mode *md, SrcLoc at, Value *run, Value *stat, double momentum, double unbias) {
  Graph *g = md->g;
  DType dt = stat->type.dtype;
  const char *name = ir_attr_str(run->def, "name");
  for (int i = md->n_updates - 1; i >= 0; i--)
    if (strcmp(md->names[i], name) == 0) {
      run = md->updates[i];
      md->names[i] = md->names[--md->n_updates], md->updates[i] = md->updates[md->n_updates];
      break;
    }
  Value *old = ir_grad_op2(g, at, OP_MUL, run, ir_grad_scalar(g, at, 1 - momentum, dt));
  Value *now = ir_grad_op2(g, at, OP_MUL, stat, ir_grad_scalar(g, at, momentum * unbias, dt));
  add_update(md, ir_grad_op2(g, at, OP_ADD, old, now), name);
}

/* How each param is read, by node id (param_reads): as a batchnorm's
 * running mean, its running variance, or anything else. */
enum { READ_AS_MEAN = 1, READ_AS_VAR = 2, READ_OTHERWISE = 4 };

static unsigned char *param_reads(Graph *g) {
  ir_number(g);
  unsigned char *reads = ARENA_ARRAY(&g->ctx->arena, unsigned char, g->n_nodes + 1);
  for (Node *k = g->first; k; k = k->next)
    for (int j = 0; j < k->n_in; j++) {
      if (!k->in[j] || k->in[j]->def->op != OP_PARAM) continue;
      bool bn = k->op == OP_BATCHNORM;
      reads[k->in[j]->def->id] |= bn && j == 3 ? READ_AS_MEAN : bn && j == 4 ? READ_AS_VAR : READ_OTHERWISE;
    }
  return reads;
}

/* Whether batchnorm n's running statistic i (3: the mean, 4: the
 * variance) is a param of its own: read by batchnorms as that only.
 * An exporter that merges equal initializers (the dynamo exporter's
 * optimizer, on a fresh model's zeros and ones) gives one param for a
 * running mean and a bias: it cannot be updated as both. */
static bool running_apart(Mode *md, const unsigned char *reads, Node *n, int i) {
  Value *run = n->in[i];
  const TensorType *xt = &n->in[0]->type;
  if (xt->rank < 2 || xt->dims[1] <= 0 || ir_type_numel(xt) / xt->dims[1] < 2) return true; /* batchnorm() says why */
  const char *which = i == 3 ? "mean" : "variance", *why = NULL;
  if (run->def->op != OP_PARAM)
    why = "is computed by the model, not a param";
  else if (reads[run->def->id] & ~(i == 3 ? READ_AS_MEAN : READ_AS_VAR))
    why = "is also read as another operand (an exporter merged equal initializers: the dynamo exporter's "
          "optimizer does; export with dynamo=False or optimize=False)";
  if (!why) return true;
  diag_error(md->g->ctx, n->loc, "batchnorm in training mode updates its running %s%s%s%s, which %s", which,
             run->def->op == OP_PARAM ? " '" : "", run->def->op == OP_PARAM ? ir_attr_str(run->def, "name") : "",
             run->def->op == OP_PARAM ? "'" : "", why);
  md->failed = true;
  return false;
}

static void batchnorm(Mode *md, Node *n) {
  Graph *g = md->g;
  SrcLoc at = n->loc;
  Value *x = n->in[0];
  const TensorType *xt = &x->type;
  int64_t axes[DL_MAX_RANK], C = xt->dims[1], m = C > 0 ? ir_type_numel(xt) / C : 0;
  int n_axes = 0;
  for (int d = 0; d < xt->rank; d++)
    if (d != 1) axes[n_axes++] = d;
  if (m < 2) {
    char b[IR_TYPE_STR_MAX];
    diag_error(g->ctx, at, "batchnorm in training mode needs more than one value per channel; input %s has %s",
               ir_type_str(xt, b, sizeof b), m ? "one" : "none");
    md->failed = true;
    return;
  }
  const Attr *mom = ir_attr(n, "momentum");
  double eps = ir_attr_float(n, "eps"), momentum = mom ? mom->f : 0.1;
  Node *first = g->last;
  Value *mean, *var;
  batch_moments(md, at, x, n_axes, axes, &mean, &var);
  /* The normalization is the batchnorm op itself over the batch's
   * statistics (batch_stats): one map that fuses with what follows, and
   * a closed-form backward whose only sums are the weight's and the
   * bias's gradients (ir/grad.c). */
  Value *stat[2] = {ir_grad_reshape(g, at, mean, 1, &C), ir_grad_reshape(g, at, var, 1, &C)};
  Value *in[5] = {x, n->in[1], n->in[2], stat[0], stat[1]};
  Node *bn = ir_node_new(g, OP_BATCHNORM, 5, in, at);
  ir_set_float(g, bn, "eps", eps);
  ir_set_int(g, bn, "batch_stats", md->sync_bn > 0 ? md->sync_bn : 1);
  Value *y = ir_grad_node(g, bn);
  if (md->no_running) {
    for (Node *k = first->next; k; k = k->next) k->keep_f32 = true;
    replace_node(g, first->next, n, &y);
    return;
  }
  double count = (double)m * (md->sync_bn > 0 ? md->sync_bn : 1);
  double unbias[2] = {1, count / (count - 1)};
  for (int i = 0; i < 2; i++) move_running(md, at, n->in[3 + i], stat[i], momentum, unbias[i]);
  /* The written-out form computes in f32 under --precision, as the op
   * does and as autocast runs batch_norm: (x - mean)^2 in f16 would lose
   * the small deviations, and the running statistics are f32 params. */
  for (Node *k = first->next; k; k = k->next) k->keep_f32 = true;
  replace_node(g, first->next, n, &y);
}

/* A batchnorm in training form already (an ONNX export of PyTorch's
 * BatchNorm in train(): batch_stats, its mean and biased variance
 * computed before it) whose running statistics the export dropped: the
 * updates PyTorch makes in place, as above, of the params it names. */
static void running_of_batch_stats(Mode *md, Node *n) {
  Graph *g = md->g;
  SrcLoc at = n->loc;
  const TensorType *xt = &n->in[0]->type;
  int64_t C = xt->dims[1], m = C > 0 ? ir_type_numel(xt) / C : 0;
  const Attr *mom = ir_attr(n, "momentum");
  double momentum = mom ? mom->f : 0.1, unbias[2] = {1, m > 1 ? (double)m / (double)(m - 1) : 1};
  static const char *const which[2] = {"running_mean", "running_var"};
  for (int i = 0; i < 2; i++) {
    const Attr *name = ir_attr(n, which[i]);
    Value *stat = n->in[3 + i];
    if (!name || stat->type.rank != 1 || stat->type.dims[0] != C) continue;
    Node *run = pass_find_param(g, name->s);
    if (run && !ir_type_eq(&run->out[0].type, &stat->type)) continue;
    if (!run) run = ir_source(g, OP_PARAM, &stat->type, name->s, at); /* appended, as the updates are */
    move_running(md, at, &run->out[0], stat, momentum, unbias[i]);
  }
}

/* ---- recurrent layers, unrolled ---- */

typedef struct Rnn {
  Graph *g;
  SrcLoc at;
} Rnn;

/* x[lo:hi] along axis. */
static Value *cut(Rnn *r, Value *x, int axis, int64_t lo, int64_t hi) {
  Node *n = ir_node_new(r->g, OP_SLICE, 1, &x, r->at);
  int64_t st[DL_MAX_RANK], en[DL_MAX_RANK], sp[DL_MAX_RANK];
  for (int d = 0; d < x->type.rank; d++) st[d] = 0, en[d] = x->type.dims[d], sp[d] = 1;
  st[axis] = lo, en[axis] = hi;
  ir_set_ints(r->g, n, "starts", x->type.rank, st);
  ir_set_ints(r->g, n, "ends", x->type.rank, en);
  ir_set_ints(r->g, n, "steps", x->type.rank, sp);
  return ir_grad_node(r->g, n);
}

static Value *join(Rnn *r, int count, Value *const *parts, int axis) {
  if (count == 1) return parts[0];
  Node *n = ir_node_new(r->g, OP_CONCAT, count, parts, r->at);
  ir_set_int(r->g, n, "axis", axis);
  return ir_grad_node(r->g, n);
}

static Value *with_ints(Rnn *r, OpKind op, Value *x, const char *attr, int count, const int64_t *v) {
  Node *n = ir_node_new(r->g, op, 1, &x, r->at);
  ir_set_ints(r->g, n, attr, count, v);
  return ir_grad_node(r->g, n);
}

/* [a, b, c] -> [b, a, c]: batch-first to time-first and back. */
static Value *swap01(Rnn *r, Value *x) { return with_ints(r, OP_TRANSPOSE, x, "perm", 3, (int64_t[]){1, 0, 2}); }

static Value *affine(Rnn *r, Value *x, Value *w, Value *b) {
  Value *in[3] = {x, w, b};
  return ir_grad_op(r->g, r->at, OP_LINEAR, b ? 3 : 2, in);
}

static Value *f1(Rnn *r, OpKind op, Value *x) { return ir_grad_op(r->g, r->at, op, 1, &x); }
static Value *f2(Rnn *r, OpKind op, Value *a, Value *b) { return ir_grad_op2(r->g, r->at, op, a, b); }

/* Gate k of G (columns k*H .. (k+1)*H of [N, G*H]). */
static Value *gate(Rnn *r, Value *v, int k, int64_t H) { return cut(r, v, 1, k * H, (k + 1) * H); }

static Value *zeros(Rnn *r, DType dt, int64_t N, int64_t H) {
  Node *n = ir_node_new(r->g, OP_CONST, 0, NULL, r->at);
  ir_set_float(r->g, n, "value", 0);
  TensorType t = ir_type_make(dt, 2, (int64_t[]){N, H});
  ir_declare(n, &t);
  ir_append(r->g, n);
  return &n->out[0];
}

/* One step of eval.c's cells: h (and c) from this step's input
 * projection xi and the hidden one hh, both [N, G*H] with their biases. */
static void cell(Rnn *r, bool lstm, Value *xi, Value *hh, int64_t H, Value **h, Value **c) {
  if (lstm) {
    Value *gates = f2(r, OP_ADD, xi, hh);
    Value *i = f1(r, OP_SIGMOID, gate(r, gates, 0, H)), *f = f1(r, OP_SIGMOID, gate(r, gates, 1, H));
    Value *g = f1(r, OP_TANH, gate(r, gates, 2, H)), *o = f1(r, OP_SIGMOID, gate(r, gates, 3, H));
    *c = f2(r, OP_ADD, f2(r, OP_MUL, f, *c), f2(r, OP_MUL, i, g));
    *h = f2(r, OP_MUL, o, f1(r, OP_TANH, *c));
    return;
  }
  Value *rg = f1(r, OP_SIGMOID, f2(r, OP_ADD, gate(r, xi, 0, H), gate(r, hh, 0, H)));
  Value *z = f1(r, OP_SIGMOID, f2(r, OP_ADD, gate(r, xi, 1, H), gate(r, hh, 1, H)));
  Value *n = f1(r, OP_TANH, f2(r, OP_ADD, gate(r, xi, 2, H), f2(r, OP_MUL, rg, gate(r, hh, 2, H))));
  *h = f2(r, OP_ADD, n, f2(r, OP_MUL, z, f2(r, OP_SUB, *h, n))); /* (1 - z) n + z h */
}

static void recurrent(Mode *md, Node *n) {
  Graph *g = md->g;
  Rnn r = {g, n->loc};
  bool lstm = n->op == OP_LSTM, bf = ir_attr_int(n, "batch_first") != 0, bias = ir_attr_int(n, "bias") != 0;
  int64_t H = ir_attr_int(n, "hidden"), layers = ir_attr_int(n, "layers"), G = lstm ? 4 : 3;
  int dirs = ir_attr_int(n, "bidirectional") ? 2 : 1, per = bias ? 4 : 2;
  DType dt = n->in[0]->type.dtype;
  Node *first = g->last;
  Value *seq = bf ? swap01(&r, n->in[0]) : n->in[0]; /* [T, N, features] */
  int64_t T = seq->type.dims[0], N = seq->type.dims[1];
  Arena *a = &g->ctx->arena;
  Value **hs = ARENA_ARRAY(a, Value *, T), **last_h = ARENA_ARRAY(a, Value *, layers * dirs);
  Value **last_c = ARENA_ARRAY(a, Value *, layers * dirs);
  for (int64_t l = 0; l < layers; l++) {
    Value *out[2];
    for (int d = 0; d < dirs; d++) {
      Value *const *w = n->in + 1 + (l * dirs + d) * per;
      /* An LSTM adds both biases to every gate: b_ih + b_hh once, in
       * every step's input projection, so the steps' GEMMs have none and
       * both gradients are one reduction over all steps, not one per
       * step.  (A GRU's b_hn is multiplied by r: it stays per step.) */
      Value *b_in = bias ? (lstm ? f2(&r, OP_ADD, w[2], w[3]) : w[2]) : NULL;
      Value *b_hid = bias && !lstm ? w[3] : NULL;
      Value *xi_all = affine(&r, seq, w[0], b_in); /* every step's input projection */
      Value *h = zeros(&r, dt, N, H), *c = lstm ? zeros(&r, dt, N, H) : NULL;
      for (int64_t s = 0; s < T; s++) {
        int64_t t = d == 0 ? s : T - 1 - s;
        Value *xi = ir_grad_reshape(g, r.at, cut(&r, xi_all, 0, t, t + 1), 2, (int64_t[]){N, G * H});
        cell(&r, lstm, xi, affine(&r, h, w[1], b_hid), H, &h, &c);
        hs[t] = ir_grad_reshape(g, r.at, h, 3, (int64_t[]){1, N, H});
      }
      out[d] = join(&r, (int)T, hs, 0);
      last_h[l * dirs + d] = ir_grad_reshape(g, r.at, h, 3, (int64_t[]){1, N, H});
      if (lstm) last_c[l * dirs + d] = ir_grad_reshape(g, r.at, c, 3, (int64_t[]){1, N, H});
    }
    seq = join(&r, dirs, out, 2);
  }
  Value *with[3] = {bf ? swap01(&r, seq) : seq, join(&r, (int)(layers * dirs), last_h, 0),
                    lstm ? join(&r, (int)(layers * dirs), last_c, 0) : NULL};
  replace_node(g, first->next, n, with);
}

/* An lstm or gru as one per layer, the form its gradient rule takes
 * (layer l's y is layer l + 1's x, h_n and c_n the layers' joined). */
static void rnn_layers(Mode *md, Node *n) {
  Graph *g = md->g;
  Rnn r = {g, n->loc};
  bool lstm = n->op == OP_LSTM;
  bool bias = ir_attr_int(n, "bias") != 0;
  int64_t layers = ir_attr_int(n, "layers");
  int dirs = ir_attr_int(n, "bidirectional") ? 2 : 1, per = (bias ? 4 : 2) * dirs;
  if (layers == 1) return;
  Node *first = g->last;
  Value *seq = n->in[0];
  Arena *a = &g->ctx->arena;
  Value **hn = ARENA_ARRAY(a, Value *, layers), **cn = ARENA_ARRAY(a, Value *, layers);
  Value **in = ARENA_ARRAY(a, Value *, 1 + per);
  for (int64_t l = 0; l < layers; l++) {
    in[0] = seq;
    memcpy(in + 1, n->in + 1 + l * per, sizeof(Value *) * (size_t)per);
    Node *one = ir_node_new(g, n->op, 1 + per, in, r.at);
    ir_set_int(g, one, "hidden", ir_attr_int(n, "hidden"));
    ir_set_int(g, one, "bidirectional", dirs == 2);
    ir_set_int(g, one, "batch_first", ir_attr_int(n, "batch_first"));
    ir_set_int(g, one, "bias", bias);
    seq = ir_grad_node(g, one);
    hn[l] = &one->out[1], cn[l] = lstm ? &one->out[2] : NULL;
  }
  Value *with[3] = {seq, join(&r, (int)layers, hn, 0), lstm ? join(&r, (int)layers, cn, 0) : NULL};
  replace_node(g, first->next, n, with);
}

/* ---- attention, written out ---- */

static Value *swap12(Rnn *r, Value *x) { return with_ints(r, OP_TRANSPOSE, x, "perm", 4, (int64_t[]){0, 2, 1, 3}); }

/* K or V [B, Hkv, S, d] with each head repeated for the G query heads
 * that share it: [B, Hkv * G, S, d]. */
static Value *repeat_heads(Rnn *r, Value *x, int64_t G) {
  if (G == 1) return x;
  const int64_t *d = x->type.dims;
  int64_t B = d[0], H = d[1], S = d[2], D = d[3];
  Value *y = ir_grad_reshape(r->g, r->at, x, 5, (int64_t[]){B, H, 1, S, D});
  y = with_ints(r, OP_EXPAND, y, "shape", 5, (int64_t[]){B, H, G, S, D});
  return ir_grad_reshape(r->g, r->at, y, 4, (int64_t[]){B, H * G, S, D});
}

static Value *cast_to(Rnn *r, Value *x, DType dt) {
  Node *n = ir_node_new(r->g, OP_CAST, 1, &x, r->at);
  ir_set_dtype(r->g, n, "to", dt);
  return ir_grad_node(r->g, n);
}

static Value *iota2(Rnn *r, int64_t rows, int64_t cols, int axis) {
  Node *n = ir_node_new(r->g, OP_IOTA, 0, NULL, r->at);
  ir_set_ints(r->g, n, "shape", 2, (int64_t[]){rows, cols});
  ir_set_dtype(r->g, n, "dtype", TY_I64);
  ir_set_int(r->g, n, "axis", axis);
  return ir_grad_node(r->g, n);
}

/* The scores s where keep is true, else -inf (a key left out). */
static Value *keep_only(Rnn *r, Value *keep, Value *s) {
  Value *ninf = ir_grad_scalar(r->g, r->at, -INFINITY, s->type.dtype);
  return ir_grad_op(r->g, r->at, OP_WHERE, 3, (Value *[]){keep, s, ninf});
}

/* eval.c's attention in ops with gradient rules:
 * softmax(q k^T * scale + mask) v per head, in the layout "bhsd". */
static void attention(Mode *md, Node *n) {
  Graph *g = md->g;
  Rnn r = {g, n->loc};
  Node *first = g->last;
  bool bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0;
  Value *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->n_in > 3 ? n->in[3] : NULL;
  if (bshd) q = swap12(&r, q), k = swap12(&r, k), v = swap12(&r, v);
  DType dt = q->type.dtype;
  int64_t Sq = q->type.dims[2], Sk = k->type.dims[2], d = q->type.dims[3];
  int64_t G = q->type.dims[1] / (k->type.dims[1] ? k->type.dims[1] : 1);
  k = repeat_heads(&r, k, G), v = repeat_heads(&r, v, G);
  double scale = ir_attr(n, "scale") ? ir_attr_float(n, "scale") : 1 / sqrt((double)d);
  Node *mm = ir_node_new(g, OP_MATMUL, 2, (Value *[]){q, k}, r.at);
  ir_set_int(g, mm, "trans_b", 1);
  Value *s = f2(&r, OP_MUL, ir_grad_node(g, mm), ir_grad_scalar(g, r.at, scale, dt));
  if (mask && mask->type.dtype == TY_BOOL)
    s = keep_only(&r, mask, s);
  else if (mask)
    s = f2(&r, OP_ADD, s, mask->type.dtype == dt ? mask : cast_to(&r, mask, dt));
  if (ir_attr_int(n, "causal")) {
    Value *keep = f2(&r, OP_LESS_EQUAL, iota2(&r, Sq, Sk, 1), iota2(&r, Sq, Sk, 0)); /* key j <= query i */
    s = keep_only(&r, keep, s);
  }
  Value *dead = NULL; /* rows with no key left: PyTorch gives zeros, softmax NaNs */
  if (mask) {
    int64_t last = 3;
    Node *mx = ir_node_new(g, OP_REDUCE_MAX, 1, &s, r.at);
    ir_set_ints(g, mx, "axes", 1, &last);
    ir_set_int(g, mx, "keepdims", 1);
    dead = f2(&r, OP_EQUAL, ir_grad_node(g, mx), ir_grad_scalar(g, r.at, -INFINITY, dt));
    s = ir_grad_op(g, r.at, OP_WHERE, 3, (Value *[]){dead, ir_grad_scalar(g, r.at, 0, dt), s});
  }
  Node *sm = ir_node_new(g, OP_SOFTMAX, 1, &s, r.at);
  ir_set_int(g, sm, "axis", 3);
  Value *p = ir_grad_node(g, sm);
  if (dead) p = ir_grad_op(g, r.at, OP_WHERE, 3, (Value *[]){dead, ir_grad_scalar(g, r.at, 0, dt), p});
  Value *o = ir_grad_op2(g, r.at, OP_MATMUL, p, v);
  if (bshd) o = swap12(&r, o);
  replace_node(g, first->next, n, &o);
}

/* A fused attention that stays fused: attention_lse, whose rows'
 * logsumexp its gradient reads (ir/grad.c), so that the backward needs
 * no pass over the keys to find them again. */
static void keep_lse(Mode *md, Node *n) {
  Graph *g = md->g;
  Node *first = g->last;
  Node *f = ir_node_new(g, OP_ATTENTION_LSE, n->n_in, n->in, n->loc);
  ir_set_int(g, f, "causal", ir_attr_int(n, "causal"));
  if (ir_attr(n, "scale")) ir_set_float(g, f, "scale", ir_attr_float(n, "scale"));
  ir_set_str(g, f, "layout", ir_attr_str(n, "layout"));
  f->keep_f32 = n->keep_f32;
  Value *o = ir_grad_node(g, f);
  replace_node(g, first->next, n, &o);
}

/* By node id: whether its results depend on a float param (one that
 * may train; those that do not only cost the fused kernel). */
static bool *on_params(Graph *g) {
  ir_number(g);
  bool *dep = ARENA_ARRAY(&g->ctx->arena, bool, g->n_nodes + 1);
  for (Node *n = g->first; n; n = n->next) {
    bool any = n->op == OP_PARAM && ir_dtype_is_float(n->out[0].type.dtype);
    for (int i = 0; i < n->n_in && !any; i++) any = n->in[i] && dep[n->in[i]->def->id];
    dep[n->id] = any;
  }
  return dep;
}

/* ---- the graph ---- */

bool pass_train_mode(Graph *g, const AutodiffOptions *o) {
  Mode md = {.g = g, .sync_bn = o->sync_bn, .unroll_rnn = o->unroll_rnn};
  bool *learned = NULL; /* by node id, once an attention has a float mask */
  for (Node *n = g->first; n && !learned; n = n->next)
    if (n->op == OP_ATTENTION && n->n_in > 3 && n->in[3]->type.dtype != TY_BOOL) learned = on_params(g);
  const unsigned char *reads = o->inference ? NULL : param_reads(g);
  for (Node *n = g->first; n && !o->inference; n = n->next)
    if (n->op == OP_BATCHNORM && !ir_attr(n, "batch_stats"))
      running_apart(&md, reads, n, 3), running_apart(&md, reads, n, 4);
  if (md.failed) return false;
  Node *last = g->last;
  for (Node *n = g->first, *next; n; n = next) {
    next = n == last ? NULL : n->next;
    if (n->op == OP_BATCHNORM && !o->inference) {
      if (!ir_attr(n, "batch_stats"))
        batchnorm(&md, n);
      else
        running_of_batch_stats(&md, n);
    }
    if (n->op == OP_LSTM || n->op == OP_GRU) {
      if (md.unroll_rnn) recurrent(&md, n);
      else rnn_layers(&md, n);
    }
    if (n->op == OP_ATTENTION) {
      if (learned && n->n_in > 3 && learned[n->in[3]->def->id]) attention(&md, n);
      else keep_lse(&md, n);
    }
    if (n->op == OP_PARAM && strcmp(ir_attr_str(n, "name"), "dlcc.step") == 0 && n->out[0].type.dtype == TY_I64) {
      Value *one = ir_grad_scalar(g, n->loc, 1, TY_I64);
      add_update(&md, ir_grad_op2(g, n->loc, OP_ADD, &n->out[0], one), "dlcc.step");
    }
  }
  if (md.failed) return false;
  if (!md.n_updates) return true;
  int n = g->n_outputs, total = n + md.n_updates;
  Value **outs = ARENA_ARRAY(&g->ctx->arena, Value *, total);
  const char **names = ARENA_ARRAY(&g->ctx->arena, const char *, total);
  const char **marks = ARENA_ARRAY(&g->ctx->arena, const char *, total);
  for (int i = 0; i < n; i++) outs[i] = g->outputs[i], names[i] = g->output_names[i], marks[i] = ir_output_update(g, i);
  for (int i = 0; i < md.n_updates; i++) outs[n + i] = md.updates[i], names[n + i] = marks[n + i] = md.names[i];
  ir_set_outputs(g, total, outs, names);
  for (int i = 0; i < total; i++)
    if (marks[i]) ir_set_output_update(g, i, marks[i]);
  return true;
}

bool pass_train_batchnorm(Graph *g, int sync_bn) {
  Mode md = {.g = g, .no_running = true, .sync_bn = sync_bn};
  Node *last = g->last;
  for (Node *n = g->first, *next; n; n = next) {
    next = n == last ? NULL : n->next;
    if (n->op == OP_BATCHNORM && !ir_attr(n, "batch_stats")) batchnorm(&md, n);
  }
  return !md.failed;
}
