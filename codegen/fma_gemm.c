/* A GEMM-shaped problem on the CUDA cores: the CgTcGemm of tc_gemm.c
 * (operands and epilogue as callbacks) for the dtypes and options that
 * take no tensor cores: f32 without --tf32, or --no-tensor-cores.  Exact
 * f32 products summed in f32, in K order within a slice.
 *
 * int8 (KTC_S8, off the tensor cores) sums exactly in int32, four k at
 * a time with __dp4a.
 *
 * A block computes a 64x64 tile of C with 256 threads, 4x4 results a
 * thread; K passes through shared memory 16 at a time, each thread
 * loading 4 elements of each operand (one row of each: its row_begin
 * once, its element per k), consecutive threads along K where the
 * operand is K-contiguous, else down the rows.  When the tiles are fewer
 * than the SMs, K is cut into slices as the tensor cores' kernel cuts it,
 * and a tile's last slice to finish adds them all in slice order, then
 * runs the epilogue (cg_gemm_last_slice).
 *
 * It serves the convolutions off the tensor cores (conv_igemm.c: f32
 * without --tf32, and every dtype under --no-tensor-cores) and the
 * training ops whose products had one thread per result and a serial
 * loop over the batch: conv_weight_grad (lower_train.c), which on the
 * H200 left dlcc's ResNet-18 f32 training step at a third of PyTorch's
 * throughput. */
#include "codegen.h"
#include "kernel.h"
#include "kshort.h"

enum {
  TM = 64,
  TN = 64,
  TK = 16,
  RT = 4,
  THREADS = 256,
  PER_THREAD = TM * TK / THREADS, /* each operand's elements a thread loads per K tile */
  SLICE_MIN = 8,                  /* K tiles a slice sums at least */
  SPLIT_MAX = 16,
  /* K tiles below which no split pays for writing and adding its slices:
   * a data gradient's K (channels x taps, 288 in a small CNN) is not
   * split, a weight gradient's (batch x positions) is */
  SPLIT_MIN_K_TILES = 32,
};

/* setup_loader lays both operands' tiles out alike */
_Static_assert(TM == TN, "the A and B tiles have as many rows");


/* One operand's loads: the thread's row of the tile and its first k. */
typedef struct Loader {
  const CgTcOperand *op;
  KExpr *row, *k0; /* within the tile */
  KExpr *grow;     /* in the problem */
  KExpr *row_ok;   /* NULL: always */
  void *data;      /* row_begin's */
  KBuf *sm;        /* [TK][64], or int8's [TK/4][64][4] (tile_at) */
} Loader;

/* Where element (kk, row) of a TK x 64 tile lives: row after row, or
 * (packed, for int8) with four consecutive kk of one row in one 32-bit
 * word, so that __dp4a reads them at once. */
static KExpr *tile_at(Kernel *k, KExpr *kk, KExpr *row, bool packed) {
  if (!packed) return cg_kadd(k, cg_kmul(k, kk, ki(k, TM)), row);
  KExpr *word = cg_kadd(k, cg_kmul(k, kdiv(k, kk, 4), ki(k, TM)), row);
  return cg_kadd(k, cg_kmul(k, word, ki(k, 4)), kmod(k, kk, 4));
}

static void setup_loader(Kernel *k, KBlock *body, const CgTcGemm *g, Loader *L, const CgTcOperand *op, KExpr *tid,
                         KExpr *tile0, KExpr *z, const char *name, DType tile) {
  L->op = op;
  if (op->k_major) {
    L->row = ilet(k, body, "r", kdiv(k, tid, TK / PER_THREAD));
    L->k0 = ilet(k, body, "k0", cg_kmul(k, kmod(k, tid, TK / PER_THREAD), ki(k, PER_THREAD)));
  } else {
    L->row = ilet(k, body, "r", kmod(k, tid, TM));
    L->k0 = ilet(k, body, "k0", cg_kmul(k, kdiv(k, tid, TM), ki(k, PER_THREAD)));
  }
  L->grow = ilet(k, body, "g", cg_kadd(k, tile0, L->row));
  L->row_ok = op->rows % TM ? klt(k, L->grow, ki(k, op->rows)) : NULL;
  /* a row past the edge computes its lets too, and never loads */
  L->data = op->row_begin ? op->row_begin(g->ctx, k, body, z, L->grow) : NULL;
  L->sm = cg_klocal(k, name, tile, TK * TM, KSP_SHARED);
}

/* The thread's elements of K tile kt (global k from kbase) into shared
 * memory, zeros past an edge. */
static void load_tile(Kernel *k, KBlock *blk, const CgTcGemm *g, Loader *L, KExpr *z, KExpr *kbase, KExpr *k_end) {
  KVar *e = cg_kvar(k, "e", KT_INDEX);
  KBlock *eb = &cg_kloop(k, blk, e, ki(k, PER_THREAD), KM_UNROLL)->body;
  KExpr *kl = ilet(k, eb, "kl", cg_kadd(k, L->k0, kv(k, e)));
  KExpr *kk = ilet(k, eb, "kk", cg_kadd(k, kbase, kl));
  DType dt = L->sm->dtype;
  KExpr *at = tile_at(k, kl, L->row, dt == TY_I8);
  cg_kstore(k, eb, L->sm, at, cg_kimm(k, 0, dt));
  KExpr *ok = cg_kand(k, L->row_ok, klt(k, kk, k_end));
  KBlock *in = &cg_kif(k, eb, ok)->body;
  cg_kstore(k, in, L->sm, at, cg_kcast(k, L->op->element(g->ctx, L->data, k, in, z, kk), dt));
}

void cg_fma_gemm(CgBuild *b, const CgTcGemm *g) {
  Ctx *c = cg_build_ctx(b);
  if (!g->a.element || !g->b.element) dl_internal(c, "fma gemm: an operand without element loads");
  bool s8 = g->tc == KTC_S8;
  DType tile = s8 ? TY_I8 : TY_F32, acc_t = s8 ? TY_I32 : TY_F32;
  int64_t mt = cg_cdiv(g->m, TM), nt = cg_cdiv(g->n, TN), kt_n = cg_cdiv(g->k, TK);
  int64_t split = 1;
  if (!cg_options(b)->no_split_k && kt_n >= SPLIT_MIN_K_TILES) {
    int64_t tiles = mt * nt * g->batch;
    split = cg_cdiv(CG_TC_TARGET_SMS, tiles);
    if (split > SPLIT_MAX) split = SPLIT_MAX;
    if (split > kt_n / SLICE_MIN) split = kt_n / SLICE_MIN;
    if (split < 1) split = 1;
  }
  int64_t per = cg_cdiv(kt_n, split);
  split = cg_cdiv(kt_n, per);
  const char *what = arena_printf(&c->arena, "%s, fma 64x64x16%s", g->what,
                                  split > 1 ? arena_printf(&c->arena, ", split-K %lld", (long long)split) : "");
  Kernel *k = cg_kernel_new(c, g->node, arena_printf(&c->arena, "%s_fma", g->hint), what);
  int64_t tz = g->batch * split;
  KVar *at[3], *t = cg_kvar(k, "t", KT_INDEX);
  KBlock *tiles = cg_ktiles(k, (const int64_t[3]){nt, mt, tz}, (const char *const[3]){"bn", "bm", "bz"}, at);
  KVar *bn = at[0], *bm = at[1], *bz = at[2];
  KBlock *body = &cg_kloop(k, tiles, t, ki(k, THREADS), KM_BLOCK_X)->body;
  KExpr *tid = kv(k, t);
  KExpr *z = tz == 1 ? ki(k, 0) : split > 1 ? ilet(k, body, "z", kdiv(k, kv(k, bz), split)) : kv(k, bz);
  KExpr *ks = split > 1 ? ilet(k, body, "ks", kmod(k, kv(k, bz), split)) : ki(k, 0);
  KExpr *m0 = ilet(k, body, "m0", cg_kmul(k, kv(k, bm), ki(k, TM)));
  KExpr *n0 = ilet(k, body, "n0", cg_kmul(k, kv(k, bn), ki(k, TN)));
  Loader la, lb;
  setup_loader(k, body, g, &la, &g->a, tid, m0, z, "As", tile);
  setup_loader(k, body, g, &lb, &g->b, tid, n0, z, "Bs", tile);
  KExpr *tx = ilet(k, body, "tx", kmod(k, tid, TN / RT)), *ty = ilet(k, body, "ty", kdiv(k, tid, TN / RT));
  KBuf *acc = cg_klocal(k, "acc", acc_t, RT * RT, KSP_REGISTER);
  KVar *zi = cg_kvar(k, "i", KT_INDEX);
  cg_kstore(k, &cg_kloop(k, body, zi, ki(k, RT * RT), KM_UNROLL)->body, acc, kv(k, zi), cg_kimm(k, 0, acc_t));
  /* slice ks sums K tiles [ks per, ks per + per), the last one's past K
   * zeros */
  KVar *j = cg_kvar(k, "kt", KT_INDEX);
  KBlock *lk = &cg_kloop(k, body, j, ki(k, per), KM_SERIAL)->body;
  KExpr *kbase = ilet(k, lk, "kb", cg_kmul(k, cg_kadd(k, cg_kmul(k, ks, ki(k, per)), kv(k, j)), ki(k, TK)));
  KExpr *k_end = ki(k, g->k);
  load_tile(k, lk, g, &la, z, kbase, k_end);
  load_tile(k, lk, g, &lb, z, kbase, k_end);
  cg_kbarrier(k, lk);
  KVar *kk = cg_kvar(k, "kk", KT_INDEX), *i = cg_kvar(k, "i", KT_INDEX), *jj = cg_kvar(k, "j", KT_INDEX);
  /* int8: four k at a time, one __dp4a each */
  KBlock *kb = &cg_kloop(k, lk, kk, ki(k, s8 ? TK / 4 : TK), KM_UNROLL)->body;
  KBlock *ib = &cg_kloop(k, kb, i, ki(k, RT), KM_UNROLL)->body;
  KExpr *a_at = cg_kadd(k, cg_kmul(k, kv(k, kk), ki(k, TM)), cg_kadd(k, cg_kmul(k, ty, ki(k, RT)), kv(k, i)));
  KVar *av = cg_klet(k, ib, "a", acc_t, s8 ? cg_kpack4(k, la.sm, cg_kmul(k, a_at, ki(k, 4))) : cg_kload(k, la.sm, a_at));
  KBlock *jb = &cg_kloop(k, ib, jj, ki(k, RT), KM_UNROLL)->body;
  KExpr *b_at = cg_kadd(k, cg_kmul(k, kv(k, kk), ki(k, TN)), cg_kadd(k, cg_kmul(k, tx, ki(k, RT)), kv(k, jj)));
  KExpr *slot = cg_kadd(k, cg_kmul(k, kv(k, i), ki(k, RT)), kv(k, jj));
  KExpr *sum = s8 ? cg_kdp4a(k, kv(k, av), cg_kpack4(k, lb.sm, cg_kmul(k, b_at, ki(k, 4))), cg_kload(k, acc, slot))
                  : cg_kop2(k, OP_ADD, cg_kload(k, acc, slot), cg_kop2(k, OP_MUL, kv(k, av), cg_kload(k, lb.sm, b_at)));
  cg_kstore(k, jb, acc, slot, sum);
  cg_kbarrier(k, lk);
  /* the results: each to store, or to this slice's partial sums, which
   * the tile's last slice then adds */
  KBuf *pb = NULL;
  if (split > 1) {
    int64_t numel = g->batch * split * g->m * g->n;
    pb = cg_kglobal(k, "part", acc_t, numel, cg_scratch(b, g->node, (uint64_t)numel * 4));
  }
  for (int pass = 0; pass < (pb ? 2 : 1); pass++) {
    KBlock *in = body;
    if (pass) in = cg_gemm_last_slice(b, k, body, g, mt, nt, z, kv(k, bm), kv(k, bn), split);
    KVar *i2 = cg_kvar(k, "i", KT_INDEX), *j2 = cg_kvar(k, "j", KT_INDEX);
    KBlock *sb = &cg_kloop(k, &cg_kloop(k, in, i2, ki(k, RT), KM_UNROLL)->body, j2, ki(k, RT), KM_UNROLL)->body;
    KExpr *m = ilet(k, sb, "m", cg_kadd(k, m0, cg_kadd(k, cg_kmul(k, ty, ki(k, RT)), kv(k, i2))));
    KExpr *n = ilet(k, sb, "n", cg_kadd(k, n0, cg_kadd(k, cg_kmul(k, tx, ki(k, RT)), kv(k, j2))));
    KExpr *ok = cg_kand(k, g->m % TM ? klt(k, m, ki(k, g->m)) : NULL, g->n % TN ? klt(k, n, ki(k, g->n)) : NULL);
    if (ok) sb = &cg_kif(k, sb, ok)->body;
    KExpr *v = cg_kload(k, acc, cg_kadd(k, cg_kmul(k, kv(k, i2), ki(k, RT)), kv(k, j2)));
    if (pass)
      g->store(g->ctx, k, sb, z, m, n, cg_gemm_slices_sum(k, sb, g, pb, split, z, m, n));
    else if (pb)
      cg_kstore(k, sb, pb, cg_gemm_slice_at(k, g, split, z, ks, m, n), v);
    else
      g->store(g->ctx, k, sb, z, m, n, v);
  }
  k->block[0] = THREADS;
  cg_launch(b, k);
}
