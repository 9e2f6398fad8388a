/* Lowering of the recurrent layers: takes an lstm or gru node and
 * appends, per layer and direction, one GEMM for the input projection of
 * every timestep and then either one persistent kernel for all timesteps
 * (a cooperative launch whose blocks keep their slice of W_hh in shared
 * memory and meet at a grid barrier between timesteps) or, where its grid
 * would not fit the GPU at once, one fused step kernel per timestep (the
 * recurrent product and the gate update together) to the plan.  The
 * training step's backward walks through time (lstm_bptt, gru_bptt) are
 * lowered the same two ways, at the end of the file. */
#include "lower.h"

static const uint64_t F32_BYTES = 4;
/* The persistent kernel's grid barrier: two i32 words, padded so that
 * the states after them stay 16-byte aligned. */
static const uint64_t BAR_BYTES = 16;

/* A step kernel's block: the 32 lanes of a warp split the recurrent
 * product's sum over the hidden width; its warps are up to 8
 * consecutive hidden units; each warp takes up to 4 batch rows, so one
 * load of a W_hh element serves all of them. */
enum { RNN_LANES = 32, RNN_UNITS = 8, RNN_ROWS = 4 };

typedef struct Rnn {
  bool lstm, bf, bias;
  int64_t N, T, H, G, dirs;
} Rnn;

/* What one step of one layer and direction reads and writes. */
typedef struct RnnStep {
  RtRef xproj;        /* x W_ih^T of every timestep, [T*N or N*T rows, G*H] */
  RtRef hprev, hnext; /* h_{t-1} read, h_t written: the two halves of a ping-pong pair */
  RtRef hout, c, y;   /* h_n's and c_n's slices (c updated in place), y at this direction's columns */
  const Value *whh, *bih, *bhh;
} RnnStep;

static int64_t rnn_units(int64_t H) {
  int64_t w = 1;
  while (w < H && w < RNN_UNITS) w *= 2;
  return w;
}

/* The new h of one (batch row, hidden unit) from the gates' two halves
 * gi (input side, with b_ih) and gh (recurrent side, with b_hh), as
 * ir/eval.c: LSTM i, f, g, o updating c in place; GRU r, z, n with r
 * applied to n's recurrent half (PyTorch's, ONNX's linear_before_reset=1). */
static KExpr *rnn_gates(Kernel *k, KBlock *in, const Rnn *r, KExpr *const *gi, KExpr *const *gh, KBuf *cb,
                        KBuf *hp, KExpr *at, KExpr *hp_at) {
  if (r->lstm) {
    KVar *ig = cg_klet(k, in, "ig", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[0], gh[0])));
    KVar *fg = cg_klet(k, in, "fg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[1], gh[1])));
    KVar *gg = cg_klet(k, in, "gg", TY_F32, cg_kop1(k, OP_TANH, cg_kop2(k, OP_ADD, gi[2], gh[2])));
    KVar *og = cg_klet(k, in, "og", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[3], gh[3])));
    KExpr *cn = cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, cg_kv(k, fg), cg_kload(k, cb, at)),
                        cg_kop2(k, OP_MUL, cg_kv(k, ig), cg_kv(k, gg)));
    KVar *cv = cg_klet(k, in, "cn", TY_F32, cn);
    cg_kstore(k, in, cb, at, cg_kv(k, cv));
    return cg_kop2(k, OP_MUL, cg_kv(k, og), cg_kop1(k, OP_TANH, cg_kv(k, cv)));
  }
  KVar *rg = cg_klet(k, in, "rg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[0], gh[0])));
  KVar *zg = cg_klet(k, in, "zg", TY_F32, cg_kop1(k, OP_SIGMOID, cg_kop2(k, OP_ADD, gi[1], gh[1])));
  KVar *ng = cg_klet(k, in, "ng", TY_F32,
                     cg_kop1(k, OP_TANH, cg_kop2(k, OP_ADD, gi[2], cg_kop2(k, OP_MUL, cg_kv(k, rg), gh[2]))));
  KExpr *keep = cg_kop2(k, OP_MUL, cg_kv(k, zg), cg_kload(k, hp, hp_at));
  KExpr *upd = cg_kop2(k, OP_MUL, cg_kop2(k, OP_SUB, cg_kimm(k, 1, TY_F32), cg_kv(k, zg)), cg_kv(k, ng));
  return cg_kop2(k, OP_ADD, upd, keep);
}

/* The recurrent sums of one warp (unit j, batch rows bn[0 .. NB)):
 * acc[g][q] = sum over e of W_hh[g*H + j][e] * h_{t-1}[bn[q]][e], its
 * lanes splitting e, in f32, completed by a shuffle all-reduce that every
 * lane reaches.  The weights are read from w at (g * gstride + u) * H + e:
 * W_hh itself (gstride H, u the unit) or a block's copy in shared memory
 * (gstride the block's units, u its warp); h_{t-1} of row bn[q] starts
 * at bn[q] * H in h. */
typedef struct RnnDot {
  KBuf *h, *w;
  int64_t gstride;
  KVar *u;
  /* the backward walks' sums (dh = dp W_hh) read W_hh transposed, at (g *
   * gstride + e) * H + u, and a vector per gate: row bn[q] of h starts
   * at bn[q] * hrow, gate g's part g * hgate further.  0: the forward's
   * h (hrow H, one vector for every gate). */
  bool trans;
  int64_t hrow, hgate;
} RnnDot;

/* A serial loop in which lane tx takes e = tx, tx + 32, ... below H:
 * the block under e's guard. */
static KBlock *lane_walk(Kernel *k, KBlock *in, int64_t H, KVar *tx, KVar **e) {
  KVar *kk = cg_kvar(k, "kk", KT_INDEX);
  KStmt *lk = cg_kloop(k, in, kk, cg_kint(k, (H + RNN_LANES - 1) / RNN_LANES), KM_SERIAL);
  *e = cg_klet(k, &lk->body, "e", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, kk), cg_kint(k, RNN_LANES)), cg_kv(k, tx)));
  if (!(H % RNN_LANES)) return &lk->body;
  return &cg_kif(k, &lk->body, cg_kcmp(k, KC_LT, cg_kv(k, *e), cg_kint(k, H)))->body;
}

static void rnn_dot(Kernel *k, KBlock *in, const Rnn *r, int64_t NB, KVar *const *bn, KVar *tx, const RnnDot *d,
                    KVar *acc[4][RNN_ROWS]) {
  int64_t H = r->H;
  for (int64_t g = 0; g < r->G; g++)
    for (int64_t q = 0; q < NB; q++) acc[g][q] = cg_klet(k, in, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *e;
  KBlock *dot = lane_walk(k, in, H, tx, &e);
  KVar *hv[RNN_ROWS];
  int64_t hrow = d->hrow ? d->hrow : H;
  for (int64_t g = 0; g < r->G; g++) {
    for (int64_t q = 0; q < NB && (g == 0 || d->hgate); q++) {
      KExpr *at = cg_kadd(k, cg_kmul(k, cg_kv(k, bn[q]), cg_kint(k, hrow)), cg_kv(k, e));
      hv[q] = cg_klet(k, dot, "hv", TY_F32, cg_kload(k, d->h, cg_kadd(k, at, cg_kint(k, g * d->hgate))));
    }
    KExpr *wat;
    if (d->trans) {
      KExpr *row = cg_kadd(k, cg_kint(k, g * d->gstride), cg_kv(k, e));
      wat = cg_kadd(k, cg_kmul(k, row, cg_kint(k, H)), cg_kv(k, d->u));
    } else {
      KExpr *row = cg_kadd(k, cg_kint(k, g * d->gstride), cg_kv(k, d->u));
      wat = cg_kadd(k, cg_kmul(k, row, cg_kint(k, H)), cg_kv(k, e));
    }
    KVar *wv = cg_klet(k, dot, "wv", TY_F32, cg_kcast(k, cg_kload(k, d->w, wat), TY_F32));
    for (int64_t q = 0; q < NB; q++)
      cg_kset(k, dot, acc[g][q],
              cg_kop2(k, OP_ADD, cg_kv(k, acc[g][q]), cg_kop2(k, OP_MUL, cg_kv(k, wv), cg_kv(k, hv[q]))));
  }
  for (int64_t g = 0; g < r->G; g++)
    for (int64_t q = 0; q < NB; q++) cg_kallreduce(k, in, acc[g][q], OP_ADD, KM_BLOCK_X);
}

/* The new h of batch row bi and unit j at timestep tv from the recurrent
 * sums gh (biases added here) and row's input projection in xp; LSTM's c
 * updated in cb.  h_{t-1} for the GRU at hp[hp_at]. */
static KVar *rnn_cell(CgBuild *b, Kernel *k, KBlock *one, const Rnn *r, const RnnStep *s, KBuf *xp, KBuf *cb,
                      KBuf *hp, KExpr *hp_at, KVar *row, KVar *j, KVar *const *acc, KVar *at) {
  int64_t GH = r->G * r->H;
  KExpr *gi[4], *gh[4];
  for (int64_t g = 0; g < r->G; g++) {
    KExpr *col = cg_kadd(k, cg_kint(k, g * r->H), cg_kv(k, j));
    gi[g] = cg_kload(k, xp, cg_kadd(k, cg_kmul(k, cg_kv(k, row), cg_kint(k, GH)), col));
    gh[g] = cg_kv(k, acc[g]);
    if (r->bias) {
      gi[g] = cg_kop2(k, OP_ADD, gi[g], load_of(b, k, s->bih, "b_ih", col));
      gh[g] = cg_kop2(k, OP_ADD, gh[g], load_of(b, k, s->bhh, "b_hh", col));
    }
  }
  return cg_klet(k, one, "hn", TY_F32, rnn_gates(k, one, r, gi, gh, cb, hp, cg_kv(k, at), hp_at));
}

/* The buffers every recurrent kernel binds: the input projection, h_n,
 * c (LSTM) and y, which starts at this direction's columns (the last row
 * ends H short of the sequence's end for every direction but the last). */
typedef struct RnnBufs {
  KBuf *xp, *ho, *cb, *yb;
} RnnBufs;

static RnnBufs rnn_bufs(Kernel *k, const Rnn *r, const RnnStep *s) {
  int64_t N = r->N, T = r->T, H = r->H;
  return (RnnBufs){.xp = cg_kglobal(k, "xproj", TY_F32, T * N * r->G * H, s->xproj),
                   .ho = cg_kglobal(k, "h_n", TY_F32, N * H, s->hout),
                   .cb = r->lstm ? cg_kglobal(k, "c", TY_F32, N * H, s->c) : NULL,
                   .yb = cg_kglobal(k, "y", TY_F32, T * N * r->dirs * H - (r->dirs - 1) * H, s->y)};
}

/* The row of xproj and y for batch row bi at timestep t. */
static KExpr *rnn_row(Kernel *k, const Rnn *r, KExpr *bi, KExpr *t) {
  return r->bf ? cg_kadd(k, cg_kmul(k, bi, cg_kint(k, r->T)), t) : cg_kadd(k, cg_kmul(k, t, cg_kint(k, r->N)), bi);
}

/* Batch row q of the warp's group from b0, clamped to the last (every
 * lane reaches the all-reduce, so a row past the end computes on the
 * last one's operands and stores nothing). */
static void rnn_rows(Kernel *k, KBlock *in, const Rnn *r, int64_t NB, KVar *b0, KVar **bn) {
  for (int64_t q = 0; q < NB; q++) {
    KExpr *bq = cg_kadd(k, cg_kv(k, b0), cg_kint(k, q));
    bn[q] = cg_klet(k, in, "bn", KT_INDEX, r->N % NB ? cg_kidx(k, KI_MIN, bq, cg_kint(k, r->N - 1)) : bq);
  }
}

/* Row q of the group from b0, when it exists: its block. */
static KBlock *rnn_row_if(Kernel *k, KBlock *upd, const Rnn *r, int64_t NB, KVar *b0, int64_t q) {
  if (!(r->N % NB)) return upd;
  return &cg_kif(k, upd, cg_kcmp(k, KC_LT, cg_kadd(k, cg_kv(k, b0), cg_kint(k, q)), cg_kint(k, r->N)))->body;
}

/* Timestep t of one layer and direction as one kernel: warp (unit j,
 * batch rows b0 ..) sums h_{t-1}[b] . W_hh[q*H + j] for every gate q
 * over its lanes (f32, then a shuffle all-reduce), and lane 0 applies
 * the gates.  h_{t-1} and h_t are different buffers, so no warp reads
 * a state another has already replaced; h_n gets h_t at every step and
 * holds the last one at the end.  t is a parameter so every timestep
 * shares the text. */
static void rnn_step(CgBuild *b, const Node *n, const Rnn *r, const char *what, int64_t t, const RnnStep *s) {
  int64_t N = r->N, T = r->T, H = r->H;
  int64_t W = rnn_units(H), NB = N < RNN_ROWS ? N : RNN_ROWS;
  int64_t units = (H + W - 1) / W, tiles = units * ((N + NB - 1) / NB);
  Kernel *k = new_kernel(b, n, "step", what);
  k->block[0] = RNN_LANES, k->block[1] = (uint32_t)W;
  int64_t cap = cg_grid_cap(RNN_LANES * W);
  k->grid[0] = (uint32_t)(tiles > cap ? cap : tiles);
  /* Every timestep's launch keeps one contract: the buffers hold all T. */
  KVar *tv = cg_kparam_range(k, "t", KT_INDEX, t, 0, T - 1);
  RnnBufs bb = rnn_bufs(k, r, s);
  KBuf *hp = cg_kglobal(k, "hprev", TY_F32, N * H, s->hprev);
  KBuf *hx = cg_kglobal(k, "hnext", TY_F32, N * H, s->hnext);
  KVar *tile = cg_kvar(k, "tile", KT_INDEX), *ty = cg_kvar(k, "ty", KT_INDEX), *tx = cg_kvar(k, "tx", KT_INDEX);
  KStmt *lt = cg_kloop(k, &k->body, tile, cg_kint(k, tiles), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lt->body, ty, cg_kint(k, W), KM_BLOCK_Y);
  KStmt *lx = cg_kloop(k, &ly->body, tx, cg_kint(k, RNN_LANES), KM_BLOCK_X);
  KBlock *in = &lx->body;
  KExpr *jx = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_MOD, cg_kv(k, tile), cg_kint(k, units)), cg_kint(k, W)),
                      cg_kv(k, ty));
  KVar *j = cg_klet(k, in, "j", KT_INDEX, jx);
  KExpr *jc = H % W ? cg_kidx(k, KI_MIN, cg_kv(k, j), cg_kint(k, H - 1)) : cg_kv(k, j);
  KVar *jr = cg_klet(k, in, "jc", KT_INDEX, jc);
  KVar *b0 = cg_klet(k, in, "b0", KT_INDEX,
                     cg_kmul(k, cg_kidx(k, KI_DIV, cg_kv(k, tile), cg_kint(k, units)), cg_kint(k, NB)));
  KVar *bn[RNN_ROWS], *acc[4][RNN_ROWS];
  rnn_rows(k, in, r, NB, b0, bn);
  RnnDot d = {.h = hp, .w = global_of(b, k, s->whh, "w_hh"), .gstride = H, .u = jr};
  rnn_dot(k, in, r, NB, bn, tx, &d, acc);
  KExpr *lead = cg_kcmp(k, KC_EQ, cg_kv(k, tx), cg_kint(k, 0));
  if (H % W) lead = cg_kand(k, lead, cg_kcmp(k, KC_LT, cg_kv(k, j), cg_kint(k, H)));
  KBlock *upd = &cg_kif(k, in, lead)->body;
  for (int64_t q = 0; q < NB; q++) {
    KBlock *one = rnn_row_if(k, upd, r, NB, b0, q);
    KExpr *bi = cg_kv(k, bn[q]);
    KVar *row = cg_klet(k, one, "row", KT_INDEX, rnn_row(k, r, bi, cg_kv(k, tv)));
    KVar *at = cg_klet(k, one, "at", KT_INDEX, cg_kadd(k, cg_kmul(k, bi, cg_kint(k, H)), cg_kv(k, j)));
    KVar *gh[4] = {acc[0][q], acc[1][q], acc[2][q], acc[3][q]};
    KVar *hn = rnn_cell(b, k, one, r, s, bb.xp, bb.cb, hp, cg_kv(k, at), row, j, gh, at);
    cg_kstore(k, one, hx, cg_kv(k, at), cg_kv(k, hn));
    cg_kstore(k, one, bb.ho, cg_kv(k, at), cg_kv(k, hn));
    cg_kstore(k, one, bb.yb, cg_kadd(k, cg_kmul(k, cg_kv(k, row), cg_kint(k, r->dirs * H)), cg_kv(k, j)),
              cg_kv(k, hn));
  }
  cg_launch(b, k);
}

/* ---- the persistent kernel ---- */

/* The modelled GPU (an H200, sm_90; runtime/emu.c checks cooperative
 * grids against the same) and what the persistent kernel may take of
 * it: its W_hh slice in shared memory, at most RNN_PERSIST_REGS
 * registers a thread (tests/sass_check.sh checks the real count). */
enum {
  GPU_SMS = 132,
  SM_THREADS = 2048,
  SM_REGS = 65536,
  SM_SHARED = 228 * 1024,
  RNN_SHARED_BUDGET = 200 * 1024,
  RNN_PERSIST_REGS = 64,
};

/* Whether a layer of hidden width H with G gates runs as one persistent
 * kernel: its ceil(H / W) blocks (W hidden units each, a warp per unit)
 * must be resident at once, at as many per SM as threads, registers
 * and the slice of W_hh in shared memory (G * W * H floats, at most
 * RNN_SHARED_BUDGET) allow. */
static bool rnn_persistent_fits(int64_t H, int64_t G) {
  int64_t W = rnn_units(H), threads = RNN_LANES * W, smem = (int64_t)F32_BYTES * G * W * H;
  if (smem > RNN_SHARED_BUDGET) return false;
  int64_t per = SM_THREADS / threads;
  if (SM_REGS / (RNN_PERSIST_REGS * threads) < per) per = SM_REGS / (RNN_PERSIST_REGS * threads);
  /* The block's static shared memory (the all-reduces') and the 1 KiB
   * the SM reserves per block: 2 KiB over the slice. */
  if (SM_SHARED / (smem + 2048) < per) per = SM_SHARED / (smem + 2048);
  return (H + W - 1) / W <= GPU_SMS * per;
}

/* What the persistent kernels (the forward's and the backward walk's)
 * open with: block blk owns hidden units [blk*W, blk*W + W), unit j
 * (clamped to jr) the warp ty, lanes tx; each thread copies into the
 * dynamic shared slice w_s, G rows of H at (g * W + ty) * H, the
 * elements it later reads itself, so no barrier is needed: row (g, unit)
 * of W_hh, or its column (W_hh[g*H + e][unit]) when `columns`; lead is
 * lane 0 of a warp whose unit exists. */
typedef struct PersistFrame {
  KBuf *ws;
  KVar *blk, *ty, *tx, *j, *jr;
  KBlock *in;
  KExpr *lead;
} PersistFrame;

static PersistFrame persist_frame(Kernel *k, KBuf *wg, int64_t blocks, int64_t W, int64_t H, int64_t G,
                                  bool columns) {
  PersistFrame f;
  f.ws = cg_kdynshared(k, "w_s", TY_F32, G * W * H, 0);
  f.blk = cg_kvar(k, "blk", KT_INDEX), f.ty = cg_kvar(k, "ty", KT_INDEX), f.tx = cg_kvar(k, "tx", KT_INDEX);
  KStmt *lb = cg_kloop(k, &k->body, f.blk, cg_kint(k, blocks), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lb->body, f.ty, cg_kint(k, W), KM_BLOCK_Y);
  KStmt *lx = cg_kloop(k, &ly->body, f.tx, cg_kint(k, RNN_LANES), KM_BLOCK_X);
  f.in = &lx->body;
  f.j = cg_klet(k, f.in, "j", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, f.blk), cg_kint(k, W)), cg_kv(k, f.ty)));
  KExpr *jc = H % W ? cg_kidx(k, KI_MIN, cg_kv(k, f.j), cg_kint(k, H - 1)) : cg_kv(k, f.j);
  f.jr = cg_klet(k, f.in, "jc", KT_INDEX, jc);
  KVar *e;
  KBlock *cp = lane_walk(k, f.in, H, f.tx, &e);
  for (int64_t g = 0; g < G; g++) {
    KExpr *row = cg_kadd(k, cg_kint(k, g * H), cg_kv(k, columns ? e : f.jr)), *col = cg_kv(k, columns ? f.jr : e);
    KExpr *from = cg_kadd(k, cg_kmul(k, row, cg_kint(k, H)), col);
    KExpr *to = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kint(k, g * W), cg_kv(k, f.ty)), cg_kint(k, H)), cg_kv(k, e));
    cg_kstore(k, cp, f.ws, to, cg_kcast(k, cg_kload(k, wg, from), TY_F32));
  }
  f.lead = cg_kcmp(k, KC_EQ, cg_kv(k, f.tx), cg_kint(k, 0));
  if (H % W) f.lead = cg_kand(k, f.lead, cg_kcmp(k, KC_LT, cg_kv(k, f.j), cg_kint(k, H)));
  return f;
}

/* Every timestep of one layer and direction as one cooperative kernel.
 * Block u owns hidden units [u*W, u*W + W), a warp each: it copies their
 * G rows of W_hh into shared memory once (each thread the elements it
 * later reads itself, so no barrier is needed), zeroes its c, then per
 * timestep computes its units' h_t for every batch row (as the step
 * kernel: lanes split the sum, lane 0 applies the gates) into one half
 * of the pair from the other, and meets every other block at the grid
 * barrier before the next timestep reads h_t.  bar (two zeroed words)
 * sits before the pair. */
static void rnn_persistent(CgBuild *b, const Node *n, const Rnn *r, const char *what, int64_t dir, RtRef bar,
                           RtRef pair, const RnnStep *s) {
  int64_t N = r->N, T = r->T, H = r->H, G = r->G;
  int64_t W = rnn_units(H), NB = N < RNN_ROWS ? N : RNN_ROWS, blocks = (H + W - 1) / W;
  Kernel *k = new_kernel(b, n, "persist", what);
  k->block[0] = RNN_LANES, k->block[1] = (uint32_t)W;
  k->grid[0] = (uint32_t)blocks;
  RnnBufs bb = rnn_bufs(k, r, s);
  KBuf *hb = cg_kglobal(k, "h", TY_F32, 2 * N * H, pair);
  KBuf *bw = cg_kglobal(k, "bar", TY_I32, 2, bar);
  /* The slice: row (g, unit) of W_hh at (g * W + ty) * H. */
  PersistFrame f = persist_frame(k, global_of(b, k, s->whh, "w_hh"), blocks, W, H, G, false);
  KBuf *ws = f.ws;
  KVar *ty = f.ty, *tx = f.tx, *j = f.j;
  KBlock *in = f.in;
  KExpr *lead = f.lead;
  if (bb.cb) {
    KVar *zb = cg_kvar(k, "zb", KT_INDEX);
    KStmt *lz = cg_kloop(k, &cg_kif(k, in, lead)->body, zb, cg_kint(k, N), KM_SERIAL);
    cg_kstore(k, &lz->body, bb.cb, cg_kadd(k, cg_kmul(k, cg_kv(k, zb), cg_kint(k, H)), cg_kv(k, j)),
              cg_kimm(k, 0, TY_F32));
  }
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  KStmt *li = cg_kloop(k, in, i, cg_kint(k, T), KM_SERIAL);
  KBlock *step = &li->body;
  KVar *tv = cg_klet(k, step, "t", KT_INDEX, dir ? cg_kidx(k, KI_SUB, cg_kint(k, T - 1), cg_kv(k, i)) : cg_kv(k, i));
  /* h_{t-1} in rows [half * N, half * N + N) of the pair, h_t in the others. */
  KVar *half = cg_klet(k, step, "half", KT_INDEX, cg_kidx(k, KI_MOD, cg_kv(k, i), cg_kint(k, 2)));
  KVar *hprev = cg_klet(k, step, "hprev", KT_INDEX, cg_kmul(k, cg_kv(k, half), cg_kint(k, N * H)));
  KVar *hnext = cg_klet(k, step, "hnext", KT_INDEX, cg_kidx(k, KI_SUB, cg_kint(k, N * H), cg_kv(k, hprev)));
  KVar *grp = cg_kvar(k, "grp", KT_INDEX);
  KStmt *lg = cg_kloop(k, step, grp, cg_kint(k, (N + NB - 1) / NB), KM_SERIAL);
  KBlock *gb = &lg->body;
  KVar *b0 = cg_klet(k, gb, "b0", KT_INDEX, cg_kmul(k, cg_kv(k, grp), cg_kint(k, NB)));
  KVar *bn[RNN_ROWS], *acc[4][RNN_ROWS];
  rnn_rows(k, gb, r, NB, b0, bn);
  RnnDot d = {.h = hb, .w = ws, .gstride = W, .u = ty};
  KVar *bh[RNN_ROWS];
  for (int64_t q = 0; q < NB; q++)
    bh[q] = cg_klet(k, gb, "bh", KT_INDEX, cg_kadd(k, cg_kv(k, bn[q]), cg_kmul(k, cg_kv(k, half), cg_kint(k, N))));
  rnn_dot(k, gb, r, NB, bh, tx, &d, acc);
  KBlock *upd = &cg_kif(k, gb, cg_kcmp(k, KC_EQ, cg_kv(k, tx), cg_kint(k, 0)))->body;
  if (H % W) upd = &cg_kif(k, upd, cg_kcmp(k, KC_LT, cg_kv(k, j), cg_kint(k, H)))->body;
  for (int64_t q = 0; q < NB; q++) {
    KBlock *one = rnn_row_if(k, upd, r, NB, b0, q);
    KExpr *bi = cg_kv(k, bn[q]);
    KVar *row = cg_klet(k, one, "row", KT_INDEX, rnn_row(k, r, bi, cg_kv(k, tv)));
    KVar *at = cg_klet(k, one, "at", KT_INDEX, cg_kadd(k, cg_kmul(k, bi, cg_kint(k, H)), cg_kv(k, j)));
    KVar *gh[4] = {acc[0][q], acc[1][q], acc[2][q], acc[3][q]};
    KVar *hn = rnn_cell(b, k, one, r, s, bb.xp, bb.cb, hb, cg_kadd(k, cg_kv(k, hprev), cg_kv(k, at)), row, j, gh, at);
    cg_kstore(k, one, hb, cg_kadd(k, cg_kv(k, hnext), cg_kv(k, at)), cg_kv(k, hn));
    cg_kstore(k, one, bb.yb, cg_kadd(k, cg_kmul(k, cg_kv(k, row), cg_kint(k, r->dirs * H)), cg_kv(k, j)),
              cg_kv(k, hn));
    KBlock *last = &cg_kif(k, one, cg_kcmp(k, KC_EQ, cg_kv(k, i), cg_kint(k, T - 1)))->body;
    cg_kstore(k, last, bb.ho, cg_kv(k, at), cg_kv(k, hn));
  }
  cg_kgrid_sync(k, step, bw);
  cg_launch(b, k);
}

/* Per layer and direction: one GEMM projects every timestep's input
 * (x @ W_ih^T), then one step kernel per timestep.  h_t alternates
 * between the two halves of a scratch pair (the first half holds h_0 = 0);
 * c lives in the c_n result itself.  Every layer's sequence has the
 * caller's layout. */
bool lower_rnn(CgBuild *b, const Node *n) {
  /* f32 only: the precision pass keeps recurrent layers in f32. */
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->type.dtype != TY_F32) return unsupported(b, n, n->in[i]->type.dtype);
  Arena *ar = &cg_build_ctx(b)->arena;
  Rnn r = {.lstm = n->op == OP_LSTM,
           .bf = ir_attr_int(n, "batch_first") != 0,
           .bias = ir_attr_int(n, "bias") != 0,
           .H = ir_attr_int(n, "hidden"),
           .dirs = ir_attr_int(n, "bidirectional") ? 2 : 1};
  r.G = r.lstm ? 4 : 3;
  int64_t layers = ir_attr_int(n, "layers");
  const Value *x = n->in[0];
  r.N = r.bf ? x->type.dims[0] : x->type.dims[1];
  r.T = r.bf ? x->type.dims[1] : x->type.dims[0];
  int64_t N = r.N, T = r.T, H = r.H, GH = r.G * r.H, rows = T * N;
  int per = r.bias ? 4 : 2;
  RtRef hn = cg_ref(b, &n->out[1]), cn = r.lstm ? cg_ref(b, &n->out[2]) : hn;
  RtRef in = cg_ref(b, x), yfinal = cg_ref(b, &n->out[0]);
  int64_t feat = x->type.dims[2];
  uint64_t state_bytes = (uint64_t)(N * H) * F32_BYTES;
  /* One kernel for all timesteps where its grid fits the GPU at once
   * (rnn_persistent_fits) unless --no-persistent-rnn; else one per step. */
  bool persistent = !cg_options(b)->no_persistent_rnn && rnn_persistent_fits(H, r.G) && T * N > 0 && H > 0;
  for (int64_t l = 0; l < layers; l++) {
    RtRef seq =
        l == layers - 1 ? yfinal : cg_scratch(b, n, (uint64_t)(rows * r.dirs * H) * F32_BYTES);
    for (int64_t d = 0; d < r.dirs; d++) {
      const Value *const *wt = (const Value *const *)n->in + 1 + (l * r.dirs + d) * per;
      const char *ld = arena_printf(ar, "l%" PRId64 " d%" PRId64, l, d);
      RtRef h = cg_ref_at(hn, (uint64_t)(l * r.dirs + d) * state_bytes);
      RtRef c = cg_ref_at(cn, (uint64_t)(l * r.dirs + d) * state_bytes);
      if (r.lstm && !persistent) cg_fill(b, n, arena_printf(ar, "%s c0", ld), c, TY_F32, N * H, 0.0);
      if (rows == 0 || H == 0) {
        if (r.lstm && persistent) cg_fill(b, n, arena_printf(ar, "%s c0", ld), c, TY_F32, N * H, 0.0);
        cg_fill(b, n, arena_printf(ar, "%s h0", ld), h, TY_F32, N * H, 0.0);
        continue;
      }
      /* The persistent kernel's barrier words, then the pair of states
       * (the first h_0 = 0): one fill zeroes both. */
      uint64_t lead = persistent ? BAR_BYTES : 0;
      RtRef bar = cg_scratch(b, n, lead + 2 * state_bytes), pair = cg_ref_at(bar, lead);
      cg_fill(b, n, arena_printf(ar, "%s h0", ld), bar, TY_F32, (int64_t)(lead / F32_BYTES) + N * H, 0.0);
      RtRef xproj = cg_scratch(b, n, (uint64_t)(rows * GH) * F32_BYTES);
      RtGemm g = gemm_of(TY_F32, rows, GH, feat);
      g.trans_b = 1, g.ldb = feat;
      g.a = in, g.b = cg_ref(b, wt[0]), g.c = xproj;
      emit_gemm(b, n, arena_printf(ar, "%s input", ld), &g);
      RnnStep s = {.xproj = xproj,
                   .hout = h,
                   .c = c,
                   .y = cg_ref_at(seq, (uint64_t)(d * H) * F32_BYTES),
                   .whh = wt[1],
                   .bih = r.bias ? wt[2] : NULL,
                   .bhh = r.bias ? wt[3] : NULL};
      if (persistent) {
        rnn_persistent(b, n, &r, ld, d, bar, pair, &s);
        continue;
      }
      for (int64_t i = 0; i < T; i++) {
        int64_t t = d == 0 ? i : T - 1 - i;
        s.hprev = cg_ref_at(pair, (uint64_t)(i % 2) * state_bytes);
        s.hnext = cg_ref_at(pair, (uint64_t)((i + 1) % 2) * state_bytes);
        rnn_step(b, n, &r, arena_printf(ar, "%s t%" PRId64, ld, t), t, &s);
      }
    }
    in = seq;
    feat = r.dirs * H;
  }
  return true;
}

/* ---- lstm_bptt and gru_bptt: the backward walk of one layer and direction ---- */

/* What every walk kernel binds: the op's operands (px, ph, w_hh, dy,
 * dh_n, then dc_n or hprev, read through load_f32), the lstm's c of
 * every step [T, N, H] (scratch), the carried term [N, H] (scratch: the
 * lstm's dc, the gru's dh z, the path from h_t to h_{t-1} that skips
 * W_hh), and the results (dp, or dpx and dph). */
typedef struct Bptt {
  const Node *n;
  Rnn r; /* one direction, time first */
  bool rev;
  RtRef c, carry;
} Bptt;

static KExpr *bp_load(CgBuild *b, Kernel *k, const Bptt *bp, int i, const char *name, KExpr *at) {
  return load_f32(b, k, NULL, bp->n->in[i], name, at);
}

/* p = px + ph at index v */
static KExpr *bp_gate(CgBuild *b, Kernel *k, const Bptt *bp, KVar *v, int64_t off) {
  KExpr *x = bp_load(b, k, bp, 0, "px", cg_kadd(k, cg_kv(k, v), cg_kint(k, off)));
  return cg_kop2(k, OP_ADD, x, bp_load(b, k, bp, 1, "ph", cg_kadd(k, cg_kv(k, v), cg_kint(k, off))));
}

/* Element j of step t's row bi, rows width apart (rnn_row's order, as
 * the forward's y). */
static KExpr *bp_at(Kernel *k, const Bptt *bp, KVar *t, KVar *bi, int64_t width, KVar *j) {
  KExpr *row = rnn_row(k, &bp->r, cg_kv(k, bi), cg_kv(k, t));
  return cg_kadd(k, cg_kmul(k, row, cg_kint(k, width)), cg_kv(k, j));
}

/* The lstm's c of (row bi, unit j) at every step, scanned from p in the
 * forward's order, and dc set to dc_n: one thread per (bi, j), which
 * alone reads them back (the persistent kernel needs no barrier for
 * them). */
static void bptt_scan(CgBuild *b, Kernel *k, KBlock *in, const Bptt *bp, KBuf *cb, KBuf *dcb, KVar *bi, KVar *j) {
  int64_t T = bp->r.T, H = bp->r.H;
  KVar *at = cg_klet(k, in, "at", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, bi), cg_kint(k, H)), cg_kv(k, j)));
  cg_kstore(k, in, dcb, cg_kv(k, at), bp_load(b, k, bp, 5, "dc_n", cg_kv(k, at)));
  KVar *cs = cg_klet(k, in, "cs", TY_F32, cg_kimm(k, 0, TY_F32));
  KVar *s = cg_kvar(k, "s", KT_INDEX);
  KBlock *ls = &cg_kloop(k, in, s, cg_kint(k, T), KM_SERIAL)->body;
  KVar *t = cg_klet(k, ls, "t", KT_INDEX, bp->rev ? cg_kidx(k, KI_SUB, cg_kint(k, T - 1), cg_kv(k, s)) : cg_kv(k, s));
  KVar *pr = cg_klet(k, ls, "pr", KT_INDEX, bp_at(k, bp, t, bi, 4 * H, j));
  KExpr *ig = cg_kop1(k, OP_SIGMOID, bp_gate(b, k, bp, pr, 0));
  KExpr *fg = cg_kop1(k, OP_SIGMOID, bp_gate(b, k, bp, pr, H));
  KExpr *gg = cg_kop1(k, OP_TANH, bp_gate(b, k, bp, pr, 2 * H));
  cg_kset(k, ls, cs, cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, fg, cg_kv(k, cs)), cg_kop2(k, OP_MUL, ig, gg)));
  cg_kstore(k, ls, cb, bp_at(k, bp, t, bi, H, j), cg_kv(k, cs));
}

/* The kernel's view of the walk's buffers. */
typedef struct BpBufs {
  KBuf *c, *carry, *dp, *dph; /* c: the lstm's; dph: the gru's (dp is then dpx) */
} BpBufs;

static BpBufs bp_bufs(CgBuild *b, Kernel *k, const Bptt *bp) {
  int64_t T = bp->r.T, N = bp->r.N, H = bp->r.H;
  BpBufs bb = {.carry = cg_kglobal(k, bp->r.lstm ? "dc" : "dhz", TY_F32, N * H, bp->carry),
               .dp = global_of(b, k, &bp->n->out[0], bp->r.lstm ? "dp" : "dpx")};
  if (bp->r.lstm) bb.c = cg_kglobal(k, "c", TY_F32, T * N * H, bp->c);
  else bb.dph = global_of(b, k, &bp->n->out[1], "dph");
  return bb;
}

#define V(x) cg_kv(k, x)
#define MUL(a, c) cg_kop2(k, OP_MUL, a, c)
#define ONE_MINUS(x) cg_kop2(k, OP_SUB, cg_kimm(k, 1, TY_F32), x)

/* Step i of the walk (timestep t) for row bi and unit j, as ir/eval's:
 * dh = dy[t] + (dh_n at the first step, else rec = dp[t'] W_hh), the
 * gates' gradients into dp[t], dc carried on. */
static void lstm_cell(CgBuild *b, Kernel *k, KBlock *in, const Bptt *bp, const BpBufs *bb, KVar *i, KVar *t, KVar *bi,
                      KVar *j, KExpr *rec) {
  int64_t T = bp->r.T, H = bp->r.H;
  KVar *at = cg_klet(k, in, "at", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, bi), cg_kint(k, H)), cg_kv(k, j)));
  KVar *pr = cg_klet(k, in, "pr", KT_INDEX, bp_at(k, bp, t, bi, 4 * H, j));
  KVar *gate[4];
  for (int g = 0; g < 4; g++) {
    gate[g] = cg_klet(k, in, "gt", TY_F32, cg_kop1(k, g == 2 ? OP_TANH : OP_SIGMOID, bp_gate(b, k, bp, pr, g * H)));
  }
  KVar *ct = cg_klet(k, in, "ct", TY_F32, cg_kop1(k, OP_TANH, cg_kload(k, bb->c, bp_at(k, bp, t, bi, H, j))));
  /* c_{t-1}: the step before in the forward's order, 0 at its first */
  KExpr *tp = bp->rev ? cg_kidx(k, KI_MIN, cg_kadd(k, cg_kv(k, t), cg_kint(k, 1)), cg_kint(k, T - 1))
                      : cg_kidx(k, KI_MAX, cg_kidx(k, KI_SUB, cg_kv(k, t), cg_kint(k, 1)), cg_kint(k, 0));
  KVar *tpv = cg_klet(k, in, "tp", KT_INDEX, tp);
  KExpr *first_fwd = cg_kcmp(k, KC_EQ, cg_kv(k, i), cg_kint(k, T - 1));
  KVar *cp = cg_klet(k, in, "cp", TY_F32,
                     cg_ksel(k, first_fwd, cg_kimm(k, 0, TY_F32), cg_kload(k, bb->c, bp_at(k, bp, tpv, bi, H, j))));
  KExpr *carried = cg_ksel(k, cg_kcmp(k, KC_EQ, cg_kv(k, i), cg_kint(k, 0)), bp_load(b, k, bp, 4, "dh_n", cg_kv(k, at)), rec);
  KVar *dh = cg_klet(k, in, "dh", TY_F32, cg_kop2(k, OP_ADD, bp_load(b, k, bp, 3, "dy", bp_at(k, bp, t, bi, H, j)), carried));
  KExpr *dtanh = ONE_MINUS(MUL(V(ct), V(ct)));
  KVar *d = cg_klet(k, in, "d", TY_F32, cg_kop2(k, OP_ADD, cg_kload(k, bb->carry, V(at)), MUL(MUL(V(dh), V(gate[3])), dtanh)));
  KExpr *dsig[4] = {MUL(V(gate[0]), ONE_MINUS(V(gate[0]))), MUL(V(gate[1]), ONE_MINUS(V(gate[1]))),
                    ONE_MINUS(MUL(V(gate[2]), V(gate[2]))), MUL(V(gate[3]), ONE_MINUS(V(gate[3])))};
  KExpr *dg[4] = {MUL(MUL(V(d), V(gate[2])), dsig[0]), MUL(MUL(V(d), V(cp)), dsig[1]),
                  MUL(MUL(V(d), V(gate[0])), dsig[2]), MUL(MUL(V(dh), V(ct)), dsig[3])};
  for (int g = 0; g < 4; g++) cg_kstore(k, in, bb->dp, cg_kadd(k, V(pr), cg_kint(k, g * H)), dg[g]);
  cg_kstore(k, in, bb->carry, V(at), MUL(V(d), V(gate[1])));
}

/* The gru's step, as ir/eval's: dh = dy[t] + (dh_n at the first step,
 * else dh_{t'} z_{t'} + rec = dph[t'] W_hh); r, z and n recomputed from
 * px and ph; dpx and dph differ in n's part, where ph was multiplied
 * by r. */
static void gru_cell(CgBuild *b, Kernel *k, KBlock *in, const Bptt *bp, const BpBufs *bb, KVar *i, KVar *t, KVar *bi,
                     KVar *j, KExpr *rec) {
  int64_t H = bp->r.H;
  KVar *at = cg_klet(k, in, "at", KT_INDEX, cg_kadd(k, cg_kmul(k, cg_kv(k, bi), cg_kint(k, H)), cg_kv(k, j)));
  KVar *pr = cg_klet(k, in, "pr", KT_INDEX, bp_at(k, bp, t, bi, 3 * H, j));
  KVar *hr = cg_klet(k, in, "hr", KT_INDEX, bp_at(k, bp, t, bi, H, j));
  KVar *rg = cg_klet(k, in, "rg", TY_F32, cg_kop1(k, OP_SIGMOID, bp_gate(b, k, bp, pr, 0)));
  KVar *zg = cg_klet(k, in, "zg", TY_F32, cg_kop1(k, OP_SIGMOID, bp_gate(b, k, bp, pr, H)));
  KVar *hn = cg_klet(k, in, "hn", TY_F32, bp_load(b, k, bp, 1, "ph", cg_kadd(k, V(pr), cg_kint(k, 2 * H))));
  KExpr *xn = bp_load(b, k, bp, 0, "px", cg_kadd(k, V(pr), cg_kint(k, 2 * H)));
  KVar *ng = cg_klet(k, in, "ng", TY_F32, cg_kop1(k, OP_TANH, cg_kop2(k, OP_ADD, xn, MUL(V(rg), V(hn)))));
  KExpr *later = cg_kop2(k, OP_ADD, cg_kload(k, bb->carry, V(at)), rec);
  KExpr *carried = cg_ksel(k, cg_kcmp(k, KC_EQ, V(i), cg_kint(k, 0)), bp_load(b, k, bp, 4, "dh_n", V(at)), later);
  KVar *dh = cg_klet(k, in, "dh", TY_F32, cg_kop2(k, OP_ADD, bp_load(b, k, bp, 3, "dy", V(hr)), carried));
  KVar *dn = cg_klet(k, in, "dn", TY_F32, MUL(MUL(V(dh), ONE_MINUS(V(zg))), ONE_MINUS(MUL(V(ng), V(ng)))));
  KVar *dr = cg_klet(k, in, "dr", TY_F32, MUL(MUL(V(dn), V(hn)), MUL(V(rg), ONE_MINUS(V(rg)))));
  KExpr *hp = bp_load(b, k, bp, 5, "hprev", V(hr));
  KVar *dz = cg_klet(k, in, "dz", TY_F32,
                     MUL(MUL(V(dh), cg_kop2(k, OP_SUB, hp, V(ng))), MUL(V(zg), ONE_MINUS(V(zg)))));
  KVar *gates[2] = {dr, dz};
  for (int g = 0; g < 2; g++) {
    cg_kstore(k, in, bb->dp, cg_kadd(k, V(pr), cg_kint(k, g * H)), V(gates[g]));
    cg_kstore(k, in, bb->dph, cg_kadd(k, V(pr), cg_kint(k, g * H)), V(gates[g]));
  }
  cg_kstore(k, in, bb->dp, cg_kadd(k, V(pr), cg_kint(k, 2 * H)), V(dn));
  cg_kstore(k, in, bb->dph, cg_kadd(k, V(pr), cg_kint(k, 2 * H)), MUL(V(dn), V(rg)));
  cg_kstore(k, in, bb->carry, V(at), MUL(V(dh), V(zg)));
}
#undef V
#undef MUL
#undef ONE_MINUS

/* One group of batch rows from b0 at walk step i: the warp's unit j sums
 * dp[t'] W_hh (the gru's dph) over its lanes for each row (the step
 * walked before, t' = t + 1, or t - 1 when reverse; at the first step a
 * row not yet written, which the cell's select drops), then lane 0
 * applies the cell. */
static void bptt_group(CgBuild *b, Kernel *k, KBlock *in, const Bptt *bp, const BpBufs *bb, KVar *b0, KVar *tx,
                       KVar *j, KVar *i, KVar *t, const RnnDot *dot) {
  const Rnn *r = &bp->r;
  int64_t N = r->N, T = r->T, H = r->H, NB = N < RNN_ROWS ? N : RNN_ROWS;
  KExpr *tn = bp->rev ? cg_kidx(k, KI_MOD, cg_kadd(k, cg_kv(k, t), cg_kint(k, T - 1)), cg_kint(k, T))
                      : cg_kidx(k, KI_MOD, cg_kadd(k, cg_kv(k, t), cg_kint(k, 1)), cg_kint(k, T));
  KVar *tnv = cg_klet(k, in, "tn", KT_INDEX, tn);
  KVar *bn[RNN_ROWS] = {0}, *rows[RNN_ROWS] = {0}, *acc[4][RNN_ROWS];
  rnn_rows(k, in, r, NB, b0, bn);
  for (int64_t q = 0; q < NB; q++)
    rows[q] = cg_klet(k, in, "rn", KT_INDEX, rnn_row(k, r, cg_kv(k, bn[q]), cg_kv(k, tnv)));
  rnn_dot(k, in, r, NB, rows, tx, dot, acc);
  KExpr *lead = cg_kcmp(k, KC_EQ, cg_kv(k, tx), cg_kint(k, 0));
  if (H % rnn_units(H)) lead = cg_kand(k, lead, cg_kcmp(k, KC_LT, cg_kv(k, j), cg_kint(k, H)));
  KBlock *upd = &cg_kif(k, in, lead)->body;
  for (int64_t q = 0; q < NB; q++) {
    KBlock *one = rnn_row_if(k, upd, r, NB, b0, q);
    KExpr *rec = cg_kv(k, acc[0][q]);
    for (int64_t g = 1; g < r->G; g++) rec = cg_kop2(k, OP_ADD, rec, cg_kv(k, acc[g][q]));
    (r->lstm ? lstm_cell : gru_cell)(b, k, one, bp, bb, i, t, bn[q], j, rec);
  }
}

/* The walk's timestep of step i (from the last when forward). */
static KVar *bptt_t(Kernel *k, KBlock *in, const Bptt *bp, KVar *i) {
  KExpr *t = bp->rev ? cg_kv(k, i) : cg_kidx(k, KI_SUB, cg_kint(k, bp->r.T - 1), cg_kv(k, i));
  return cg_klet(k, in, "t", KT_INDEX, t);
}

/* What the recurrent sums read: the previous step's dp (the gru's dph),
 * G gates of H per row. */
static RnnDot bp_dot(const Bptt *bp, const BpBufs *bb, KBuf *w, int64_t gstride, KVar *u) {
  return (RnnDot){.h = bp->r.lstm ? bb->dp : bb->dph, .w = w, .gstride = gstride, .u = u, .trans = true,
                  .hrow = bp->r.G * bp->r.H, .hgate = bp->r.H};
}

/* The whole walk as one cooperative kernel, as rnn_persistent: block u
 * owns units [u*W, u*W + W), a warp each, with their columns of W_hh
 * (G rows of W) in shared memory; the lstm's lead lanes scan c, then per
 * step every warp sums dp[t'] W_hh for its unit, lane 0 writes dp[t],
 * and the grid meets at the barrier before dp[t] is read. */
static void bptt_persistent(CgBuild *b, const Bptt *bp, RtRef bar) {
  const Rnn *r = &bp->r;
  int64_t N = r->N, T = r->T, H = r->H, G = r->G;
  int64_t W = rnn_units(H), NB = N < RNN_ROWS ? N : RNN_ROWS, blocks = (H + W - 1) / W;
  Kernel *k = new_kernel(b, bp->n, "persist", NULL);
  k->block[0] = RNN_LANES, k->block[1] = (uint32_t)W;
  k->grid[0] = (uint32_t)blocks;
  BpBufs bb = bp_bufs(b, k, bp);
  KBuf *bw = cg_kglobal(k, "bar", TY_I32, 2, bar);
  /* The slice: W_hh[g*H + e][unit] at (g * W + ty) * H + e, copied by
   * the thread that reads it. */
  PersistFrame f = persist_frame(k, global_of(b, k, bp->n->in[2], "w_hh"), blocks, W, H, G, true);
  KVar *ty = f.ty, *tx = f.tx, *j = f.j;
  KBlock *in = f.in;
  if (r->lstm) {
    KVar *zb = cg_kvar(k, "zb", KT_INDEX);
    KStmt *lz = cg_kloop(k, &cg_kif(k, in, f.lead)->body, zb, cg_kint(k, N), KM_SERIAL);
    bptt_scan(b, k, &lz->body, bp, bb.c, bb.carry, zb, j);
  }
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  KBlock *step = &cg_kloop(k, in, i, cg_kint(k, T), KM_SERIAL)->body;
  KVar *t = bptt_t(k, step, bp, i);
  KVar *grp = cg_kvar(k, "grp", KT_INDEX);
  KBlock *gb = &cg_kloop(k, step, grp, cg_kint(k, (N + NB - 1) / NB), KM_SERIAL)->body;
  KVar *b0 = cg_klet(k, gb, "b0", KT_INDEX, cg_kmul(k, cg_kv(k, grp), cg_kint(k, NB)));
  RnnDot d = bp_dot(bp, &bb, f.ws, W, ty);
  d.trans = false; /* the slice holds W_hh's columns as rows */
  bptt_group(b, k, gb, bp, &bb, b0, tx, j, i, t, &d);
  cg_kgrid_sync(k, step, bw);
  cg_launch(b, k);
}

/* Where the grid does not fit: the lstm's scan of c as one kernel (a
 * thread per row and unit), then one kernel per walk step, as
 * rnn_step's tiles with W_hh read from global memory. */
static void bptt_steps(CgBuild *b, const Bptt *bp) {
  const Rnn *r = &bp->r;
  int64_t N = r->N, T = r->T, H = r->H;
  Arena *ar = &cg_build_ctx(b)->arena;
  if (r->lstm) {
    Kernel *k = new_kernel(b, bp->n, "scan", NULL);
    KVar *v = cg_kvar(k, "v", KT_INDEX);
    KBlock *in = &cg_kloop(k, &k->body, v, cg_kint(k, N * H), KM_GRID_STRIDE)->body;
    cg_kernel_grid_1d(k, N * H);
    BpBufs bb = bp_bufs(b, k, bp);
    KVar *bi = cg_klet(k, in, "bi", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, v), cg_kint(k, H)));
    KVar *j = cg_klet(k, in, "j", KT_INDEX, cg_kidx(k, KI_MOD, cg_kv(k, v), cg_kint(k, H)));
    bptt_scan(b, k, in, bp, bb.c, bb.carry, bi, j);
    cg_launch(b, k);
  }
  int64_t W = rnn_units(H), NB = N < RNN_ROWS ? N : RNN_ROWS;
  int64_t units = (H + W - 1) / W, tiles = units * ((N + NB - 1) / NB);
  for (int64_t s = 0; s < T; s++) {
    Kernel *k = new_kernel(b, bp->n, "step", arena_printf(ar, "i%" PRId64, s));
    k->block[0] = RNN_LANES, k->block[1] = (uint32_t)W;
    int64_t cap = cg_grid_cap(RNN_LANES * W);
    k->grid[0] = (uint32_t)(tiles > cap ? cap : tiles);
    KVar *i = cg_kparam_range(k, "i", KT_INDEX, s, 0, T - 1);
    BpBufs bb = bp_bufs(b, k, bp);
    KVar *tile = cg_kvar(k, "tile", KT_INDEX), *ty = cg_kvar(k, "ty", KT_INDEX), *tx = cg_kvar(k, "tx", KT_INDEX);
    KStmt *lt = cg_kloop(k, &k->body, tile, cg_kint(k, tiles), KM_GRID_X);
    KStmt *ly = cg_kloop(k, &lt->body, ty, cg_kint(k, W), KM_BLOCK_Y);
    KStmt *lx = cg_kloop(k, &ly->body, tx, cg_kint(k, RNN_LANES), KM_BLOCK_X);
    KBlock *in = &lx->body;
    KExpr *jx = cg_kadd(k, cg_kmul(k, cg_kidx(k, KI_MOD, cg_kv(k, tile), cg_kint(k, units)), cg_kint(k, W)),
                        cg_kv(k, ty));
    KVar *j = cg_klet(k, in, "j", KT_INDEX, jx);
    KExpr *jc = H % W ? cg_kidx(k, KI_MIN, cg_kv(k, j), cg_kint(k, H - 1)) : cg_kv(k, j);
    KVar *jr = cg_klet(k, in, "jc", KT_INDEX, jc);
    KVar *b0 = cg_klet(k, in, "b0", KT_INDEX,
                       cg_kmul(k, cg_kidx(k, KI_DIV, cg_kv(k, tile), cg_kint(k, units)), cg_kint(k, NB)));
    KVar *t = bptt_t(k, in, bp, i);
    RnnDot d = bp_dot(bp, &bb, global_of(b, k, bp->n->in[2], "w_hh"), H, jr);
    bptt_group(b, k, in, bp, &bb, b0, tx, j, i, t, &d);
    cg_launch(b, k);
  }
}

/* lstm_bptt and gru_bptt (ops.def): one persistent kernel where its
 * grid fits (the forward's rule, the same shared slice of W_hh), else
 * (the lstm's scan and) a kernel per step. */
bool lower_bptt(CgBuild *b, const Node *n) {
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i]->type.dtype != TY_F32) return unsupported(b, n, n->in[i]->type.dtype);
  const int64_t *pd = n->out[0].type.dims;
  bool lstm = n->op == OP_LSTM_BPTT, bf = ir_attr_int(n, "batch_first") != 0;
  int64_t G = lstm ? 4 : 3;
  Bptt bp = {.n = n, .rev = ir_attr_int(n, "reverse") != 0};
  bp.r = (Rnn){.lstm = lstm, .bf = bf, .T = pd[bf ? 1 : 0], .N = pd[bf ? 0 : 1], .H = pd[2] / G, .G = G, .dirs = 1};
  int64_t T = bp.r.T, N = bp.r.N, H = bp.r.H;
  if (T * N * H == 0) return true; /* the results are empty */
  uint64_t carry_bytes = (uint64_t)(N * H) * F32_BYTES;
  bool persistent = !cg_options(b)->no_persistent_rnn && rnn_persistent_fits(H, G);
  uint64_t lead = persistent ? BAR_BYTES : 0, c_bytes = lstm ? (uint64_t)(T * N * H) * F32_BYTES : 0;
  RtRef bar = cg_scratch(b, n, lead + carry_bytes + c_bytes);
  bp.carry = cg_ref_at(bar, lead), bp.c = cg_ref_at(bar, lead + carry_bytes);
  if (!persistent) {
    bptt_steps(b, &bp);
    return true;
  }
  cg_fill(b, n, "bar", bar, TY_I32, (int64_t)(BAR_BYTES / 4), 0.0);
  bptt_persistent(b, &bp, bar);
  return true;
}
