/* ONNX RNN, GRU and LSTM: takes the node's weights and options, returns
 * the recurrence unrolled over the sequence into ordinary ops (gates
 * reordered to PyTorch's order, both directions, clip, activations). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- recurrent layers ---- */

/* Rows [g*H, (g+1)*H) of w (axis 0) in the order given: ONNX's gate order
 * to PyTorch's. */
static Val *reorder_gates(Imp *im, Val *w, int64_t H, int n_gates, const int *order) {
  Val *parts[4];
  for (int i = 0; i < n_gates; i++) parts[i] = ox_slice_axis(im, w, 0, order[i] * H, (order[i] + 1) * H, 1);
  return ox_concat(im, n_gates, parts, 0);
}

/* True when v is known to be all zeros: the state our fused recurrent
 * ops start from. */
static bool known_zero(const Val *v) {
  const Tensor *t = v->k ? v->k : v->hint;
  if (!t) return false;
  for (int64_t i = 0, c = ir_type_numel(&t->type); i < c; i++)
    if (ir_tensor_get(t, i) != 0) return false;
  return true;
}

/* The activation functions of ONNX's RNN, GRU and LSTM. */
typedef enum {
  ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKY_RELU, ACT_SCALED_TANH,
  ACT_HARD_SIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS, ACT_THRESHOLDED_RELU,
} ActKind;

typedef struct Act {
  ActKind kind;
  double alpha, beta;
} Act;

static const struct {
  const char *name;
  ActKind kind;
  int n_params; /* 1: alpha, 2: alpha and beta */
  double alpha, beta;
} act_table[] = {
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0},          {"Tanh", ACT_TANH, 0, 0, 0},
    {"Relu", ACT_RELU, 0, 0, 0},                {"Affine", ACT_AFFINE, 2, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0.01, 0},  {"ScaledTanh", ACT_SCALED_TANH, 2, 1.0, 1.0},
    {"HardSigmoid", ACT_HARD_SIGMOID, 2, 0.2, 0.5}, {"Elu", ACT_ELU, 1, 1.0, 0},
    {"Softsign", ACT_SOFTSIGN, 0, 0, 0},        {"Softplus", ACT_SOFTPLUS, 0, 0, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 1.0, 0},
};

static Val *apply_act(Imp *im, const Act *a, Val *x) {
  switch (a->kind) {
    case ACT_SIGMOID: return ox_op1(im, OP_SIGMOID, x);
    case ACT_TANH: return ox_op1(im, OP_TANH, x);
    case ACT_RELU: return ox_op1(im, OP_RELU, x);
    case ACT_AFFINE: return ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, x, a->alpha), a->beta);
    case ACT_LEAKY_RELU: return ox_op1f(im, OP_LEAKY_RELU, x, "alpha", a->alpha);
    case ACT_SCALED_TANH:
      return ox_op2s(im, OP_MUL, ox_op1(im, OP_TANH, ox_op2s(im, OP_MUL, x, a->beta)), a->alpha);
    case ACT_HARD_SIGMOID: return ox_hardsigmoid_of(im, x, a->alpha, a->beta);
    case ACT_ELU: return ox_op2(im, OP_ADD, ox_op1(im, OP_RELU, x), ox_neg_exp_side(im, x, a->alpha, 1.0));
    case ACT_SOFTSIGN: return ox_softsign_of(im, x);
    case ACT_SOFTPLUS: return ox_softplus_of(im, x);
    case ACT_THRESHOLDED_RELU:
      return x ? ox_where(im, ox_op2s(im, OP_GREATER, x, a->alpha), x, ox_scalar(im, 0, x->type.dtype))
               : NULL;
  }
  dl_unreachable(im->c);
}

/* The `activations` of a recurrent node (per direction per_dir of them,
 * the defaults where absent), with `activation_alpha`/`activation_beta`
 * taken in order by the functions that have such a parameter. */
static bool rnn_acts(Imp *im, int per_dir, int dirs, const ActKind *defaults, Act *out, bool *custom) {
  const Onnx__AttributeProto *names = ox_find_attr(im, "activations");
  const Onnx__AttributeProto *alphas = ox_find_attr(im, "activation_alpha");
  const Onnx__AttributeProto *betas = ox_find_attr(im, "activation_beta");
  size_t n = names ? names->n_strings : 0, ka = 0, kb = 0;
  *custom = names || alphas || betas;
  if (names && n != (size_t)per_dir && n != (size_t)(per_dir * dirs))
    return ox_bad(im, "%zu activations for %d directions (expected %d per direction)", n, dirs, per_dir);
  for (int i = 0; i < per_dir * dirs; i++) {
    Act *a = &out[i];
    int at = -1;
    if (!names) {
      for (size_t t = 0; t < ARRAY_LEN(act_table); t++)
        if (act_table[t].kind == defaults[i % per_dir]) at = (int)t;
    } else {
      const ProtobufCBinaryData *sn = &names->strings[(size_t)i % n];
      for (size_t t = 0; t < ARRAY_LEN(act_table); t++)
        if (sn->len == strlen(act_table[t].name) &&
            strncasecmp((const char *)sn->data, act_table[t].name, sn->len) == 0)
          at = (int)t;
      if (at < 0)
        return ox_bad(
            im,
            "activation '%.*s' is not supported (Sigmoid, Tanh, Relu, Affine, LeakyRelu, ScaledTanh, "
            "HardSigmoid, Elu, Softsign, Softplus and ThresholdedRelu are)",
            (int)sn->len, (const char *)sn->data);
    }
    a->kind = act_table[at].kind;
    a->alpha = act_table[at].alpha;
    a->beta = act_table[at].beta;
    if (act_table[at].n_params >= 1 && alphas && ka < alphas->n_floats) a->alpha = alphas->floats[ka++];
    if (act_table[at].n_params >= 2 && betas && kb < betas->n_floats) a->beta = betas->floats[kb++];
  }
  return true;
}

enum {
  RNN_PLAIN, RNN_GRU, RNN_LSTM,
  /* Steps (time x directions) an unrolled recurrent node may have. */
  RNN_UNROLL_MAX = 1024,
};

/* A recurrent node as ONNX gives it, for unrolling. */
typedef struct Rnn {
  int kind, G, dirs;
  bool reverse; /* direction "reverse" (bidirectional: direction 1 is) */
  int64_t T, N, I, H;
  Val *x;                  /* [T, N, I] */
  Val *W, *R, *B, *P;      /* ONNX's, gates in ONNX's order */
  Val *h0, *c0;            /* [dirs, N, H] or NULL */
  const Tensor *lens;      /* sequence_lens, or NULL for all T */
  Act act[6];              /* per direction: f, g[, h] */
  int acts_per_dir;
  double clip;             /* 0: none */
  bool linear_before_reset, input_forget;
} Rnn;

static Val *rnn_clip(Imp *im, const Rnn *r, Val *x) {
  if (!x || r->clip <= 0) return x;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &x);
  ir_set_float(im->g, c, "min", -r->clip);
  ir_set_float(im->g, c, "max", r->clip);
  return ox_emit1(im, &e);
}

static Val *gate(Imp *im, const Rnn *r, Val *v, int g) {
  return ox_slice_axis(im, v, v ? v->type.rank - 1 : 0, g * r->H, (g + 1) * r->H, 1);
}

/* x @ w^T (+ b): w [M, K] */
static Val *linear_of(Imp *im, Val *x, Val *w, Val *b) {
  if (!x || !w) return NULL;
  Val *in[3] = {x, w, b};
  Emit e;
  ox_begin(im, &e, OP_LINEAR, b ? 3 : 2, in);
  return ox_emit1(im, &e);
}

/* Rows [lo, hi) of direction d of a [dirs, rows, cols] weight, as 2-d. */
static Val *dir_rows(Imp *im, Val *w, int d, int64_t lo, int64_t hi) {
  if (!w) return NULL;
  int64_t dims[2] = {hi - lo, w->type.dims[2]};
  return ox_reshape(im, ox_slice_axis(im, ox_slice_axis(im, w, 0, d, d + 1, 1), 1, lo, hi, 1), 2, dims);
}

/* Elements [lo, hi) of direction d of a [dirs, len] bias. */
static Val *dir_vec(Imp *im, Val *b, int d, int64_t lo, int64_t hi) {
  if (!b) return NULL;
  int64_t dim = hi - lo;
  return ox_reshape(im, ox_slice_axis(im, ox_slice_axis(im, b, 0, d, d + 1, 1), 1, lo, hi, 1), 1, &dim);
}

/* State s of direction d, [N, H]: the given one or zeros. */
static Val *dir_state(Imp *im, const Rnn *r, Val *s, int d) {
  int64_t dims[2] = {r->N, r->H};
  if (s) return ox_reshape(im, ox_slice_axis(im, s, 0, d, d + 1, 1), 2, dims);
  TensorType t = ir_type_make(r->x->type.dtype, 2, dims);
  return ox_known_new(im, &t);
}

/* One direction, step by step.  ys[t] gets the output at time t (zeros
 * past a sequence's length), *h and *c the last states. */
static bool unroll_dir(Imp *im, const Rnn *r, int d, Val **ys, Val **h_out, Val **c_out) {
  const Act *act = &r->act[d * r->acts_per_dir];
  int64_t G = r->G, H = r->H, N = r->N, T = r->T;
  bool backward = r->reverse || d == 1;
  Val *Rb = r->B ? dir_vec(im, r->B, d, G * H, 2 * G * H) : NULL;
  int64_t x2[2] = {T * N, r->I};
  /* The inputs' share of every step at once: one GEMM. */
  Val *xw = linear_of(im, ox_reshape(im, r->x, 2, x2), dir_rows(im, r->W, d, 0, G * H),
                      r->B ? dir_vec(im, r->B, d, 0, G * H) : NULL);
  /* GRU without linear_before_reset: the h gate's R multiplies r * h. */
  bool split_r = r->kind == RNN_GRU && !r->linear_before_reset;
  Val *Rd = dir_rows(im, r->R, d, 0, split_r ? 2 * H : G * H);
  Val *Rbd = split_r ? (Rb ? ox_slice_axis(im, Rb, 0, 0, 2 * H, 1) : NULL) : Rb;
  Val *Rn = split_r ? dir_rows(im, r->R, d, 2 * H, 3 * H) : NULL;
  Val *Rbn = split_r && Rb ? ox_slice_axis(im, Rb, 0, 2 * H, 3 * H, 1) : NULL;
  Val *Pi = NULL, *Po = NULL, *Pf = NULL;
  if (r->P) {
    Pi = dir_vec(im, r->P, d, 0, H), Po = dir_vec(im, r->P, d, H, 2 * H),
    Pf = dir_vec(im, r->P, d, 2 * H, 3 * H);
  }
  Val *h = dir_state(im, r, r->h0, d), *c = r->kind == RNN_LSTM ? dir_state(im, r, r->c0, d) : NULL;
  for (int64_t s = 0; s < T; s++) {
    int64_t t = backward ? T - 1 - s : s;
    Val *xt = ox_slice_axis(im, xw, 0, t * N, (t + 1) * N, 1);
    Val *hr = linear_of(im, h, Rd, Rbd);
    Val *h_new = NULL, *c_new = NULL;
    if (r->kind == RNN_PLAIN) {
      h_new = apply_act(im, &act[0], rnn_clip(im, r, ox_op2(im, OP_ADD, xt, hr)));
    } else if (r->kind == RNN_GRU) { /* ONNX's gates: z, r, h */
      Val *z =
          apply_act(im, &act[0], rnn_clip(im, r, ox_op2(im, OP_ADD, gate(im, r, xt, 0), gate(im, r, hr, 0))));
      Val *rg =
          apply_act(im, &act[0], rnn_clip(im, r, ox_op2(im, OP_ADD, gate(im, r, xt, 1), gate(im, r, hr, 1))));
      Val *hn = split_r ? linear_of(im, ox_op2(im, OP_MUL, rg, h), Rn, Rbn)
                        : ox_op2(im, OP_MUL, rg, gate(im, r, hr, 2));
      Val *nn = apply_act(im, &act[1], rnn_clip(im, r, ox_op2(im, OP_ADD, gate(im, r, xt, 2), hn)));
      h_new = ox_op2(im, OP_ADD, nn, ox_op2(im, OP_MUL, z, ox_op2(im, OP_SUB, h, nn)));
    } else { /* ONNX's gates: i, o, f, c */
      Val *pre = ox_op2(im, OP_ADD, xt, hr);
      Val *ip = gate(im, r, pre, 0), *fp = gate(im, r, pre, 2);
      if (Pi) ip = ox_op2(im, OP_ADD, ip, ox_op2(im, OP_MUL, Pi, c));
      if (Pf) fp = ox_op2(im, OP_ADD, fp, ox_op2(im, OP_MUL, Pf, c));
      Val *ig = apply_act(im, &act[0], rnn_clip(im, r, ip));
      Val *fg = r->input_forget ? ox_op2(im, OP_SUB, ox_scalar(im, 1.0, ig ? ig->type.dtype : TY_F32), ig)
                                : apply_act(im, &act[0], rnn_clip(im, r, fp));
      Val *cg = apply_act(im, &act[1], rnn_clip(im, r, gate(im, r, pre, 3)));
      c_new = ox_op2(im, OP_ADD, ox_op2(im, OP_MUL, fg, c), ox_op2(im, OP_MUL, ig, cg));
      Val *op = gate(im, r, pre, 1);
      if (Po) op = ox_op2(im, OP_ADD, op, ox_op2(im, OP_MUL, Po, c_new));
      Val *og = apply_act(im, &act[0], rnn_clip(im, r, op));
      h_new = ox_op2(im, OP_MUL, og, apply_act(im, &act[2], c_new));
    }
    if (!h_new) return false;
    bool all_live = true;
    if (r->lens)
      for (int64_t b = 0; b < N; b++) all_live &= t < ir_tensor_get_int(r->lens, b);
    if (all_live) {
      ys[t] = h = h_new;
      if (c_new) c = c_new;
      continue;
    }
    /* Past a sequence's end its state stays and its output is 0: a
     * backward pass thus starts at each sequence's own last element. */
    int64_t md[2] = {N, 1};
    TensorType mt = ir_type_make(h_new->type.dtype, 2, md);
    Val *m = ox_known_new(im, &mt);
    for (int64_t b = 0; b < N; b++) ir_tensor_set(m->k, b, t < ir_tensor_get_int(r->lens, b));
    ys[t] = ox_op2(im, OP_MUL, m, h_new);
    h = ox_op2(im, OP_ADD, h, ox_op2(im, OP_MUL, m, ox_op2(im, OP_SUB, h_new, h)));
    if (c_new) c = ox_op2(im, OP_ADD, c, ox_op2(im, OP_MUL, m, ox_op2(im, OP_SUB, c_new, c)));
  }
  *h_out = h;
  *c_out = c;
  return h != NULL;
}

/* What the fused lstm/gru ops do not do, step by step: RNN, GRU with
 * linear_before_reset=0, peepholes, clip, other activations, initial
 * states, sequence lengths, input_forget. */
static bool unroll_rnn(Imp *im, ONode *n, const Rnn *r, bool layout1) {
  if (r->T * r->dirs > RNN_UNROLL_MAX)
    return ox_bad(im, "unrolled, this is %" PRId64 " steps, more than dlcc unrolls (%d)", r->T * r->dirs,
                  (int)RNN_UNROLL_MAX);
  int64_t T = r->T, N = r->N, H = r->H;
  Val **ys = ARENA_ARRAY(&im->c->arena, Val *, (size_t)(T * r->dirs));
  Val *hs[2], *cs[2];
  for (int d = 0; d < r->dirs; d++)
    if (!unroll_dir(im, r, d, ys + d * T, &hs[d], &cs[d])) return false;
  int64_t one[4] = {1, 1, N, H}, st[3] = {1, N, H};
  if (n->want[0]) {
    /* ONNX's Y: [T, dirs, N, H], or [N, T, dirs, H] with layout 1. */
    Val **steps = ARENA_ARRAY(&im->c->arena, Val *, (size_t)T);
    for (int64_t t = 0; t < T; t++) {
      Val *per_dir[2];
      for (int d = 0; d < r->dirs; d++) per_dir[d] = ox_reshape(im, ys[d * T + t], 4, one);
      steps[t] = ox_concat(im, r->dirs, per_dir, 1);
    }
    Val *y = ox_concat(im, (int)T, steps, 0);
    static const int64_t to_layout1[4] = {2, 0, 1, 3};
    if (!(n->out[0] = layout1 ? ox_transpose(im, y, to_layout1) : y)) return false;
  }
  static const int64_t swap01[3] = {1, 0, 2};
  Val **last[2] = {hs, cs};
  for (int k = 0; k < 2 && 1 + k < n->n_out; k++) {
    if (!n->want[1 + k]) continue;
    Val *per_dir[2];
    for (int d = 0; d < r->dirs; d++) per_dir[d] = ox_reshape(im, last[k][d], 3, st);
    Val *v = ox_concat(im, r->dirs, per_dir, 0);
    if (!(n->out[1 + k] = layout1 ? ox_transpose(im, v, swap01) : v)) return false;
  }
  return true;
}

bool ox_op_rnn(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  int kind = strcmp(t, "LSTM") == 0 ? RNN_LSTM : strcmp(t, "GRU") == 0 ? RNN_GRU : RNN_PLAIN;
  bool lstm = kind == RNN_LSTM;
  int G = lstm ? 4 : kind == RNN_GRU ? 3 : 1;
  Val *x = ox_in_req(im, n, 0), *W = ox_in_req(im, n, 1), *R = ox_in_req(im, n, 2), *B = ox_in_opt(n, 3);
  Val *seq = ox_in_opt(n, 4), *h0 = ox_in_opt(n, 5), *c0 = lstm ? ox_in_opt(n, 6) : NULL,
      *P = lstm ? ox_in_opt(n, 7) : NULL;
  if (!x || !W || !R) return false;
  const char *direction;
  int64_t hidden, layout, lbr = 0, input_forget = 0;
  double clip;
  if (!ox_attr_str(im, "direction", "forward", &direction) || !ox_attr_int(im, "hidden_size", 0, &hidden) ||
      !ox_attr_int(im, "layout", 0, &layout) || !ox_attr_float(im, "clip", 0, &clip))
    return false;
  if (lstm && !ox_attr_int(im, "input_forget", 0, &input_forget)) return false;
  if (kind == RNN_GRU && !ox_attr_int(im, "linear_before_reset", 0, &lbr)) return false;
  bool bidir = strcmp(direction, "bidirectional") == 0, reverse = strcmp(direction, "reverse") == 0;
  if (!bidir && !reverse && strcmp(direction, "forward") != 0)
    return ox_bad(im, "direction='%s' is not supported", direction);
  if (layout != 0 && layout != 1) return ox_bad(im, "layout=%" PRId64 " is invalid", layout);
  int dirs = bidir ? 2 : 1;
  static const ActKind plain_acts[1] = {ACT_TANH}, gru_acts[2] = {ACT_SIGMOID, ACT_TANH},
                       lstm_acts[3] = {ACT_SIGMOID, ACT_TANH, ACT_TANH};
  Rnn r = {.kind = kind, .G = G, .dirs = dirs, .reverse = reverse, .W = W, .R = R, .B = B, .P = P,
           .acts_per_dir = lstm ? 3 : kind == RNN_GRU ? 2 : 1, .clip = clip,
           .linear_before_reset = lbr != 0, .input_forget = input_forget != 0};
  bool custom_acts;
  if (!rnn_acts(im, r.acts_per_dir, dirs, lstm ? lstm_acts : kind == RNN_GRU ? gru_acts : plain_acts, r.act,
                &custom_acts))
    return false;
  if (x->type.rank != 3 || W->type.rank != 3 || R->type.rank != 3)
    return ox_bad(im, "X, W and R must be 3-d (X %d-d, W %d-d, R %d-d)", x->type.rank, W->type.rank, R->type.rank);
  int64_t H = R->type.dims[2];
  if (hidden && hidden != H)
    return ox_bad(im, "hidden_size %" PRId64 " differs from R's %" PRId64, hidden, H);
  if (W->type.dims[0] != dirs || R->type.dims[0] != dirs || W->type.dims[1] != G * H ||
      R->type.dims[1] != G * H)
    return ox_bad(im, "W and R must be [%d, %" PRId64 ", ...] for %s with hidden size %" PRId64, dirs, G * H,
                  direction, H);
  if (B && (B->type.rank != 2 || B->type.dims[0] != dirs || B->type.dims[1] != 2 * G * H))
    return ox_bad(im, "B must be [%d, %" PRId64 "]", dirs, 2 * G * H);
  if (P && (P->type.rank != 2 || P->type.dims[0] != dirs || P->type.dims[1] != 3 * H))
    return ox_bad(im, "P must be [%d, %" PRId64 "]", dirs, 3 * H);
  int time_axis = layout ? 1 : 0;
  int64_t T = x->type.dims[time_axis], N = x->type.dims[layout ? 0 : 1];
  /* Initial states: ONNX's [dirs, N, H], or [N, dirs, H] with layout 1. */
  static const int64_t swap01[3] = {1, 0, 2};
  Val *states[2] = {h0, c0};
  for (int i = 0; i < 2; i++) {
    Val *v = states[i];
    if (!v) continue;
    int64_t want[3] = {layout ? N : dirs, layout ? dirs : N, H};
    if (!ox_same_dims(&v->type, 3, want))
      return ox_bad(im, "%s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "]", i ? "initial_c" : "initial_h",
                    want[0], want[1], want[2]);
  }
  bool all_full = true;
  if (seq) {
    r.lens = seq->k ? seq->k : seq->hint;
    if (!r.lens) return ox_bad(im, "sequence_lens from a runtime value is not supported");
    if (ir_type_numel(&r.lens->type) != N)
      return ox_bad(im, "sequence_lens must have %" PRId64 " entries", N);
    for (int64_t i = 0; i < N; i++) {
      int64_t len = ir_tensor_get_int(r.lens, i);
      if (len < 1 || len > T)
        return ox_bad(im, "sequence_lens entry %" PRId64 " is %" PRId64 ", not in [1, %" PRId64 "]", i, len,
                      T);
      all_full &= len == T;
    }
    if (all_full) r.lens = NULL;
  }
  bool fused = kind != RNN_PLAIN && (kind != RNN_GRU || lbr) && !P && clip == 0 && !custom_acts &&
               !input_forget && all_full && (!h0 || known_zero(h0)) && (!c0 || known_zero(c0));
  if (!fused) {
    r.x = layout ? ox_transpose(im, x, swap01) : x;
    r.h0 = h0 && layout ? ox_transpose(im, h0, swap01) : h0;
    r.c0 = c0 && layout ? ox_transpose(im, c0, swap01) : c0;
    r.T = T, r.N = N, r.I = x->type.dims[2], r.H = H;
    return r.x && unroll_rnn(im, n, &r, layout == 1);
  }
  /* ONNX gate order i, o, f, c -> PyTorch i, f, g, o; GRU z, r, h -> r, z, n. */
  static const int lstm_order[4] = {0, 2, 3, 1}, gru_order[3] = {1, 0, 2};
  const int *order = lstm ? lstm_order : gru_order;
  Val *ops[1 + 8];
  int k = 0;
  ops[k++] = reverse ? ox_reverse_axis(im, x, time_axis) : x;
  for (int d = 0; d < dirs; d++) {
    Val *w = ox_slice_axis(im, W, 0, d, d + 1, 1), *rr = ox_slice_axis(im, R, 0, d, d + 1, 1);
    int64_t wd[2] = {G * H, W->type.dims[2]}, rd[2] = {G * H, H};
    ops[k++] = reorder_gates(im, ox_reshape(im, w, 2, wd), H, G, order);
    ops[k++] = reorder_gates(im, ox_reshape(im, rr, 2, rd), H, G, order);
    if (B) {
      int64_t bd[1] = {2 * G * H};
      Val *b = ox_reshape(im, ox_slice_axis(im, B, 0, d, d + 1, 1), 1, bd);
      ops[k++] = reorder_gates(im, ox_slice_axis(im, b, 0, 0, G * H, 1), H, G, order);
      ops[k++] = reorder_gates(im, ox_slice_axis(im, b, 0, G * H, 2 * G * H, 1), H, G, order);
    }
  }
  /* A half model's layer (model.half() exported) runs in f32 between
   * casts, rounded once at its results, as --precision keeps recurrent
   * layers: codegen's recurrent kernels compute in f32 only.  W, R and B
   * are weights: their casts run once, at load. */
  DType dt = x->type.dtype;
  bool half = dt == TY_F16 || dt == TY_BF16;
  for (int i = 0; i < k; i++)
    if (!ops[i] || (half && !(ops[i] = ox_cast(im, ops[i], TY_F32)))) return false;
  Emit e;
  Node *rn = ox_begin(im, &e, lstm ? OP_LSTM : OP_GRU, k, ops);
  ir_set_int(im->g, rn, "hidden", H);
  ir_set_int(im->g, rn, "layers", 1);
  ir_set_int(im->g, rn, "bidirectional", bidir);
  ir_set_int(im->g, rn, "batch_first", layout == 1);
  ir_set_int(im->g, rn, "bias", B != NULL);
  Val *res[3];
  if (!ox_finish(im, &e, res)) return false;
  for (int i = 0; half && i < (lstm ? 3 : 2); i++)
    if (!(res[i] = ox_cast(im, res[i], dt))) return false;
  Val *y = res[0];
  if (reverse) y = ox_reverse_axis(im, y, time_axis);
  /* Ours: y [T, N, dirs*H] (or [N, T, dirs*H]); ONNX: [T, dirs, N, H] (or [N, T, dirs, H]). */
  if (n->want[0]) {
    if (layout) {
      int64_t d4[4] = {N, T, dirs, H};
      n->out[0] = ox_reshape(im, y, 4, d4);
    } else {
      int64_t d4[4] = {T, N, dirs, H};
      static const int64_t p[4] = {0, 2, 1, 3};
      n->out[0] = ox_transpose(im, ox_reshape(im, y, 4, d4), p);
    }
    if (!n->out[0]) return false;
  }
  for (int i = 1; i < (lstm ? 3 : 2) && i < n->n_out; i++)
    if (n->want[i] && !(n->out[i] = layout ? ox_transpose(im, res[i], swap01) : res[i])) return false;
  return true;
}
