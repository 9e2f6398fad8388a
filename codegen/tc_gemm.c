/* Tensor-core GEMM kernels: takes a GEMM-shaped problem (CgTcGemm:
 * C[z][m][n] = sum over k of A[z][m][k] B[z][n][k], operands read and
 * results stored through the caller's callbacks), returns nothing but
 * appends its kernel to the plan; when K is split, the last slice of a
 * tile to finish adds the slices in a fixed order (cg_gemm_last_slice).
 * Convolutions (conv_igemm.c) and the int8 GEMM kernel (lower_gemm.c)
 * are its callers.
 *
 * The kernel (docs/tensorcores.md).  A block computes a BM x BN tile of
 * C with WM x WN warps.  K passes through shared memory one stage at a
 * time, a stage being 64 bytes of every row of both operands (32
 * f16/bf16, 64 s8 or 16 tf32 elements: two mma k-steps of 32 bytes),
 * with up to 4 stages in flight.  An operand that is a plain aligned
 * global array with K contiguous arrives by cp.async, one commit group
 * per stage; any other (a fused prologue computed on load, an NCHW
 * im2col) is loaded by each thread into registers before the mma work
 * of a stage and stored to shared memory after it, so the loads' latency
 * hides behind the tensor cores either way.  ldmatrix feeds the mma
 * fragments; the accumulators then pass through shared memory, so that
 * the epilogue (bias, the fused group, requantization) runs once per
 * element with consecutive threads on consecutive columns.  On sm_90a
 * the main loop is wgmma's instead (main_loop, compute_wg): warpgroups
 * read the same stages by descriptors, chosen by the preprocessor in
 * the one kernel (KS_WG_IF), so every other GPU runs the mma.sync loop. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"
#include "kshort.h"

enum {
  ROW_BYTES = 64,  /* one stage of one row of an operand */
  CHUNK = 16,      /* what cp.async, a register-staged store and an ldmatrix row move */
  CHUNKS = ROW_BYTES / CHUNK,
  KSTEP = 32,      /* bytes of K one mma takes (k16 f16/bf16, k32 s8, k8 tf32) */
  CPAD = 8,        /* the accumulator tile's row padding, in elements */
  EPI_LANES = 8, /* the m-major epilogue's elements of C a thread stores at once */
  MAX_STAGES = 4,
  MAX_SLOTS = 8,   /* chunks a thread moves per operand and stage */
};

static int elem_bytes(KTcKind tc) {
  return tc == KTC_F16 || tc == KTC_BF16 ? 2 : tc == KTC_S8 ? 1 : 4;
}

static DType tile_dtype(KTcKind tc) {
  static const DType dt[] = {TY_F16, TY_BF16, TY_I8, TY_F32};
  return dt[tc];
}

bool cg_tc_kind(DType dt, bool tf32, KTcKind *tc) {
  switch (dt) {
    case TY_F16: *tc = KTC_F16; return true;
    case TY_BF16: *tc = KTC_BF16; return true;
    case TY_I8: *tc = KTC_S8; return true;
    case TY_F32: *tc = KTC_TF32; return tf32;
    default: return false;
  }
}

/* ---- choosing the tile ----
 * The shapes, largest first.  eff is the rate a warp's mma work runs at
 * against the 64x32 warp tile's: per k-step a warp of WTM x WTN issues
 * WTM/16 + WTN/16 ldmatrix.x4 for WTM*WTN/128 mma, so smaller warp tiles
 * spend more of the SM's shared-memory bandwidth per product.  These are
 * estimates, not measurements: there was no GPU to measure on. */
typedef struct Shape {
  int bm, bn, wm, wn;
  double eff;
} Shape;

static const Shape shapes[] = {
    {128, 256, 2, 4, 1.0},  /* warp 64x64, 256 threads */
    {128, 128, 2, 4, 1.0},  /* warp 64x32, 256 threads */
    {128, 64, 2, 2, 1.0},   /* warp 64x32, 128 threads */
    {64, 128, 2, 4, 0.85},  /* warp 32x32, 256 threads */
    {64, 64, 2, 2, 0.85},   /* warp 32x32, 128 threads */
    {128, 32, 4, 1, 0.85},  /* warp 32x32: few columns */
    {32, 128, 1, 4, 0.85},  /* warp 32x32: few rows */
    {128, 16, 4, 1, 0.6},   /* warp 32x16: a handful of columns (batch 1, late layers) */
};

static const int splits[] = {1, 2, 3, 4, 6, 8, 12, 16};

enum {
  MIN_SPLIT_STAGES = 4, /* K stages a slice keeps at the least */
  /* A byte written and read back costs about as long as this many
   * elements of C gain one k-step: an H200 SM moves ~20 bytes a cycle
   * from memory and does ~1024 f16 multiply-adds, 16 per element-step. */
  BYTE_COST = 4,
  /* The tile's last slice adds the slices alone, after the others: about
   * what the second launch that added them cost until plan version 11
   * (~2 us between launches, the time an SM takes for ~230k
   * element-steps); an estimate either way, kept so. */
  FIXUP_COST = 230000,
};

static int stages_for(int64_t kt) { return kt >= MAX_STAGES - 1 ? MAX_STAGES : kt < 1 ? 2 : (int)kt + 1; }


/* The busiest SM decides: blocks go round the SMs, and an SM's tensor
 * cores take its blocks' work (elements of C times k-steps, over the
 * warp tile's rate) one after another whether or not they are resident
 * together.  A split pays for writing and reading its slices and for
 * the launch of the kernel that adds them. */
CgTcTile cg_tc_choose(int64_t m, int64_t n, int64_t k, int64_t batch, KTcKind tc) {
  int64_t kt = cg_cdiv(k, ROW_BYTES / elem_bytes(tc));
  CgTcTile best = {0};
  double best_cost = INFINITY;
  for (size_t i = 0; i < ARRAY_LEN(shapes); i++) {
    const Shape *s = &shapes[i];
    int64_t tiles = cg_cdiv(m, s->bm) * cg_cdiv(n, s->bn) * batch;
    for (size_t j = 0; j < ARRAY_LEN(splits); j++) {
      int split = splits[j];
      int64_t kts = cg_cdiv(kt, split);
      if (split > 1 && (tiles >= CG_TC_TARGET_SMS || kts < MIN_SPLIT_STAGES)) continue;
      int64_t per_sm = cg_cdiv(tiles * split, CG_TC_TARGET_SMS);
      double cost = (double)per_sm * s->bm * s->bn * (double)kts * 2 / s->eff;
      if (split > 1) cost += (double)split * m * n * batch * 8 * BYTE_COST / CG_TC_TARGET_SMS + FIXUP_COST;
      if (cost < best_cost) {
        best_cost = cost;
        best = (CgTcTile){s->bm, s->bn, s->wm, s->wn, stages_for(kts), split};
      }
    }
  }
  return best;
}

/* ---- the kernel ---- */

/* The chunks one thread moves for one operand each stage. */
typedef struct Side {
  const CgTcOperand *op;
  int64_t rows; /* of the tile: BM or BN */
  KBuf *sm;     /* the operand's stages, [stage][rows][64 bytes] */
  KBuf *gbuf;   /* cp.async's source, or NULL: staged in registers ... */
  /* gbuf whose chunks outside the operand read op->fill, not the zeros
   * cp.async fills with: each chunk one 16-byte load into the staging
   * registers instead (int8's padding at a nonzero zero point) */
  bool vec;
  KBuf *stage;  /* ... these, a chunk per slot */
  int n_slots;
  KExpr *row[MAX_SLOTS], *chunk[MAX_SLOTS], *grow[MAX_SLOTS];
  KExpr *soff[MAX_SLOTS]; /* the chunk's offset in a stage, swizzled */
  KExpr *slot_ok[MAX_SLOTS]; /* a chunk of the tile at all (NULL: always) */
  KExpr *row_ok[MAX_SLOTS];  /* a row of the operand (NULL: always) */
  void *data[MAX_SLOTS];
} Side;

typedef struct Gen {
  CgBuild *b;
  Kernel *k;
  const CgTcGemm *g;
  CgTcTile t;
  int es, epc, bk; /* element bytes; elements in a chunk and in a stage row */
  int threads, wtm, wtn, mi, ni;
  int64_t kt_n, kt_split;
  DType tile, acc_t;
  Side side[2];
  KExpr *tid, *lane, *z, *kt_end, *wrow0, *wcol0;
  KExpr *bm, *bn;  /* the tile's coordinates, of tm x tn a batch */
  int64_t tm, tn;
  /* ldmatrix: this lane's first row offset, chunk and swizzle, per side */
  KExpr *a_off[ROW_BYTES / KSTEP], *b_off[ROW_BYTES / KSTEP];
  KBuf *acc, *af, *bf;
  /* wgmma (wg_shape): warpgroups wgm x wgn, each wg_mb m64 blocks of
   * wg_n columns from (wg_row0, wg_col0) of the tile */
  bool wg;
  int wgm, wgn, wg_mb, wg_n;
  KExpr *wg_row0, *wg_col0;
} Gen;

/* Where a thread's accumulators lie in the tile: mi blocks of 16 rows
 * (mstep apart) from row0, ni blocks of 8 columns from col0, each the
 * m16n8 layout of mma's C, acc[(mi ni + nj) 4 + 2 h + e] at row g + 8 h,
 * column 2 t + e of its block.  wgmma's D is the same with a warp's 16
 * rows of each m64 block. */
typedef struct AccLayout {
  KExpr *row0, *col0;
  int mi, ni, mstep;
} AccLayout;

/* Whether the tile takes wgmma on sm_90a, and how: its threads as
 * warpgroups, wgm down M (each a whole number of 64-row m64 blocks) by
 * wgn across N (each an N of the dl_wgmma_* functions).  f16, bf16 and
 * s8: tf32 stays on mma.sync, whose fragments are rounded to tf32 after
 * ldmatrix, where wgmma would read the f32 bits from shared memory. */
static bool wg_shape(Gen *G) {
  int wgs = G->threads / 128;
  if (G->g->tc == KTC_TF32 || G->threads % 128 || G->t.bm < 64) return false;
  int m = wgs < G->t.bm / 64 ? wgs : G->t.bm / 64;
  if (wgs % m || (G->t.bm / m) % 64) return false;
  int n = wgs / m, cols = G->t.bn / n;
  if (G->t.bn % n || cols < 16 || cols > CG_WGMMA_MAX_N || (cols & (cols - 1))) return false;
  G->wgm = m, G->wgn = n, G->wg_mb = G->t.bm / m / 64, G->wg_n = cols;
  return true;
}


static KStmt *unrolled(Kernel *k, KBlock *in, const char *stem, int64_t n, KVar **var) {
  *var = cg_kvar(k, stem, KT_INDEX);
  return cg_kloop(k, in, *var, ki(k, n), KM_UNROLL);
}

/* What a row's logical chunks are XORed with in shared memory.  A stage
 * row is 64 bytes, four 16-byte chunks; logical chunk c of row r lives
 * at chunk c ^ (r / 2) % 4.  The 32 banks of 4 bytes make 8 groups of 16
 * bytes, and a warp's 16-byte accesses go in phases of 8 lanes, which
 * are conflict-free when they reach 8 distinct groups (4r + chunk) % 8:
 *  - ldmatrix: a phase is rows r0 .. r0 + 7 (r0 a multiple of 8) of one
 *    logical chunk.  Rows of one parity share 4r % 8, and among the four
 *    of a parity (r / 2) % 4 takes every value 0..3, so the chunk does:
 *    8 distinct groups.
 *  - cp.async or staged stores walking along rows (k_major): a phase is
 *    chunks 0..3 of two consecutive rows; the XOR only permutes a row's
 *    chunks and the rows differ in parity.
 *  - staged stores walking down a column: rows r0 .. r0 + 7 of one
 *    chunk, as ldmatrix. */
static KExpr *swizzle(Kernel *k, KExpr *row) { return kmod(k, kdiv(k, row, 2), CHUNKS); }

/* Element off of stage st of side s. */
static KExpr *stage_at(Gen *G, int s, KExpr *st, KExpr *off) {
  Kernel *k = G->k;
  return cg_kadd(k, cg_kmul(k, st, ki(k, G->side[s].rows * G->bk)), off);
}

/* Which chunks thread tid moves: consecutive threads along a row when
 * the operand is K-contiguous (coalesced), else down a column. */
static void setup_side(Gen *G, KBlock *body, int s, KExpr *tile0) {
  Kernel *k = G->k;
  Side *S = &G->side[s];
  int64_t chunks = S->rows * CHUNKS, T = G->threads;
  S->n_slots = (int)cg_cdiv(chunks, T);
  if (S->n_slots > MAX_SLOTS) dl_internal(k->ctx, "tensor-core tile: %d chunks a thread", S->n_slots);
  for (int l = 0; l < S->n_slots; l++) {
    KExpr *idx = ilet(k, body, "e", cg_kadd(k, G->tid, ki(k, l * T)));
    S->slot_ok[l] = (l + 1) * T > chunks ? klt(k, idx, ki(k, chunks)) : NULL;
    S->row[l] = ilet(k, body, "r", S->op->k_major ? kdiv(k, idx, CHUNKS) : kmod(k, idx, S->rows));
    /* Along a row, every slot of a thread is the same chunk (T is a
     * multiple of CHUNKS): one expression, so that the per-stage K
     * arithmetic of its chunks (a conv's tap and channel) is one too
     * (the compiler cannot see (t + l T) % 4 == t % 4 for itself). */
    if (S->op->k_major && l > 0 && T % CHUNKS == 0)
      S->chunk[l] = S->chunk[0];
    else
      S->chunk[l] = ilet(k, body, "c", S->op->k_major ? kmod(k, idx, CHUNKS) : kdiv(k, idx, S->rows));
    S->grow[l] = ilet(k, body, "g", cg_kadd(k, tile0, S->row[l]));
    KExpr *phys = cg_kidx(k, KI_XOR, S->chunk[l], swizzle(k, S->row[l]));
    S->soff[l] = ilet(k, body, "so", cg_kadd(k, cg_kmul(k, S->row[l], ki(k, G->bk)), cg_kmul(k, phys, ki(k, G->epc))));
    S->row_ok[l] = S->op->rows % S->rows ? klt(k, S->grow[l], ki(k, S->op->rows)) : NULL;
    S->data[l] = !S->gbuf && S->op->row_begin ? S->op->row_begin(G->g->ctx, k, body, G->z, S->grow[l]) : NULL;
  }
}

/* Whether K tile kt's chunk from kk on exists: kt is one of this
 * block's, and kk is inside K (only the last tile may be partial). */
static KExpr *k_ok(Gen *G, KExpr *kt, KExpr *kk) {
  Kernel *k = G->k;
  KExpr *ok = klt(k, kt, G->kt_end);
  if (G->g->k % G->bk) ok = cg_kand(k, ok, klt(k, kk, ki(k, G->g->k)));
  return ok;
}

static KExpr *chunk_k(Gen *G, KExpr *kt, KExpr *chunk) {
  Kernel *k = G->k;
  return cg_kadd(k, cg_kmul(k, kt, ki(k, G->bk)), cg_kmul(k, chunk, ki(k, G->epc)));
}

/* Slot l's chunk of K tile kt in gbuf: its index, and in *ok whether it
 * exists (NULL: always), lets into at. */
static KExpr *chunk_src(Gen *G, KBlock *at, const Side *S, int l, KExpr *kt, KExpr **ok) {
  Kernel *k = G->k;
  KExpr *kk = ilet(k, at, "kk", chunk_k(G, kt, S->chunk[l]));
  KExpr *inner = NULL;
  KExpr *idx = S->op->chunk_at(G->g->ctx, k, at, G->z, S->grow[l], kk, &inner);
  *ok = cg_kand(k, cg_kand(k, S->row_ok[l], k_ok(G, kt, kk)), inner);
  return idx;
}

/* cp.async of side s's chunks of K tile kt into stage st; a chunk past
 * an edge is 16 zero bytes. */
static void issue_async(Gen *G, KBlock *blk, int s, KExpr *kt, KExpr *st) {
  Kernel *k = G->k;
  Side *S = &G->side[s];
  for (int l = 0; l < S->n_slots; l++) {
    KBlock *at = S->slot_ok[l] ? &cg_kif(k, blk, S->slot_ok[l])->body : blk;
    KExpr *exists, *idx = chunk_src(G, at, S, l, kt, &exists);
    KExpr *ok = kv(k, cg_klet(k, at, "ok", TY_I32, exists));
    cg_kcp_async(k, at, CHUNK, S->sm, stage_at(G, s, st, S->soff[l]), S->gbuf,
                 cg_ksel(k, ok, idx, ki(k, 0)), cg_ksel(k, ok, ki(k, CHUNK), ki(k, 0)));
  }
}

/* The register-staged side s's elements of K tile kt into its staging
 * registers (zero past an edge), a chunk of them per slot. */
static void fetch(Gen *G, KBlock *blk, int s, KExpr *kt) {
  Kernel *k = G->k;
  Side *S = &G->side[s];
  for (int l = 0; l < S->n_slots; l++) {
    KExpr *kk0 = ilet(k, blk, "kk", chunk_k(G, kt, S->chunk[l]));
    KExpr *ok = cg_kand(k, cg_kand(k, S->slot_ok[l], S->row_ok[l]), klt(k, kt, G->kt_end));
    KVar *e;
    KBlock *eb = &unrolled(k, blk, "el", G->epc, &e)->body;
    KExpr *kk = ilet(k, eb, "kk", cg_kadd(k, kk0, kv(k, e)));
    KExpr *slot = cg_kadd(k, ki(k, l * G->epc), kv(k, e));
    cg_kstore(k, eb, S->stage, slot, cg_kimm(k, 0, G->tile));
    if (G->g->k % G->bk) ok = cg_kand(k, ok, klt(k, kk, ki(k, G->g->k)));
    KBlock *at = &cg_kif(k, eb, ok)->body;
    KExpr *x = S->op->element(G->g->ctx, S->data[l], k, at, G->z, kk);
    cg_kstore(k, at, S->stage, slot, cg_kcast(k, x, G->tile));
  }
}

static void put(Gen *G, KBlock *blk, int s, KExpr *st) {
  Kernel *k = G->k;
  Side *S = &G->side[s];
  for (int l = 0; l < S->n_slots; l++) {
    KBlock *at = S->slot_ok[l] ? &cg_kif(k, blk, S->slot_ok[l])->body : blk;
    KExpr *vals[16];
    for (int e = 0; e < G->epc; e++) vals[e] = cg_kload(k, S->stage, ki(k, l * G->epc + e));
    cg_kchunk(k, at, S->sm, stage_at(G, s, st, S->soff[l]), vals, G->epc);
  }
}

static bool async_side(const Side *S) { return S->gbuf && !S->vec; }
static bool any_async(const Gen *G) { return async_side(&G->side[0]) || async_side(&G->side[1]); }

/* The vector-staged side s's chunks of K tile kt into its staging
 * registers: a 16-byte load where the chunk exists, op->fill elsewhere. */
static void fetch_chunks(Gen *G, KBlock *blk, int s, KExpr *kt) {
  Kernel *k = G->k;
  Side *S = &G->side[s];
  for (int l = 0; l < S->n_slots; l++) {
    for (int e = 0; e < G->epc; e++) cg_kstore(k, blk, S->stage, ki(k, l * G->epc + e), cg_kimm(k, S->op->fill, G->tile));
    KBlock *at = S->slot_ok[l] ? &cg_kif(k, blk, S->slot_ok[l])->body : blk;
    KExpr *ok, *idx = chunk_src(G, at, S, l, kt, &ok);
    KBlock *in = ok ? &cg_kif(k, at, ok)->body : at;
    KVar *v = cg_kvload(k, in, "xv", S->gbuf, idx, G->epc);
    for (int e = 0; e < G->epc; e++) cg_kstore(k, in, S->stage, ki(k, l * G->epc + e), cg_klane(k, v, G->epc, e));
  }
}

/* The element of a stage this lane names to ldmatrix at each k-step,
 * for the first 16 rows of its warp's A (B) tile: a warp's rows start at
 * a multiple of 16 and mi, nj step by 16, so the swizzle (row / 2) % 4
 * is the lane's part of the row's alone, and the other rows are these
 * plus constants.  Set once, so that a stage's ldmatrix addresses are
 * these registers plus immediates. */
static void lane_rows(Gen *G, KBlock *body) {
  Kernel *k = G->k;
  KExpr *ar = kmod(k, G->lane, 16), *br = cg_kadd(k, cg_kmul(k, kdiv(k, G->lane, 16), ki(k, 8)), kmod(k, G->lane, 8));
  KExpr *a_row = cg_kmul(k, cg_kadd(k, G->wrow0, ar), ki(k, G->bk));
  KExpr *b_row = cg_kmul(k, cg_kadd(k, G->wcol0, br), ki(k, G->bk));
  KExpr *a_chunk = kdiv(k, G->lane, 16), *b_chunk = kmod(k, kdiv(k, G->lane, 8), 2);
  KExpr *ac = cg_kidx(k, KI_XOR, a_chunk, swizzle(k, ar)), *bc = cg_kidx(k, KI_XOR, b_chunk, swizzle(k, br));
  G->a_off[0] = ilet(k, body, "ao", cg_kadd(k, a_row, cg_kmul(k, ac, ki(k, G->epc))));
  G->b_off[0] = ilet(k, body, "bo", cg_kadd(k, b_row, cg_kmul(k, bc, ki(k, G->epc))));
  /* k-step ks reads logical chunk 2 ks + c (c the lane's 0 or 1), whose
   * swizzled place is the first step's with bit 1 flipped: one XOR of
   * the offset, as a row is 4 chunks and starts at a multiple of them */
  _Static_assert(ROW_BYTES / KSTEP == 2 && KSTEP / CHUNK == 2, "two k-steps of two chunks a stage row");
  G->a_off[1] = ilet(k, body, "ao", cg_kidx(k, KI_XOR, G->a_off[0], ki(k, 2 * G->epc)));
  G->b_off[1] = ilet(k, body, "bo", cg_kidx(k, KI_XOR, G->b_off[0], ki(k, 2 * G->epc)));
}

/* The mma work on stage st: per k-step, the warp's A fragments (16 rows
 * each: ldmatrix.x4 of rows lane % 16 at chunk lane / 16 of the step's
 * two) and B fragments (two blocks of 8 columns per ldmatrix.x4: matrix
 * lane / 8 is block lane / 16, chunk lane / 8 % 2), then every product.
 * The lane's rows and their swizzle are set once (lane_rows). */
static void compute(Gen *G, KBlock *blk, KExpr *st) {
  Kernel *k = G->k;
  for (int ks = 0; ks < ROW_BYTES / KSTEP; ks++) {
    KVar *mi, *nj, *mi2, *ni2;
    KBlock *la = &unrolled(k, blk, "mi", G->mi, &mi)->body;
    cg_kldmatrix(k, la, G->af, cg_kmul(k, kv(k, mi), ki(k, 4)), 4, false, G->side[0].sm,
                 stage_at(G, 0, st, cg_kadd(k, G->a_off[ks], cg_kmul(k, kv(k, mi), ki(k, 16 * G->bk)))));
    KBlock *lb = &unrolled(k, blk, "nj", G->ni / 2, &nj)->body;
    cg_kldmatrix(k, lb, G->bf, cg_kmul(k, kv(k, nj), ki(k, 4)), 4, false, G->side[1].sm,
                 stage_at(G, 1, st, cg_kadd(k, G->b_off[ks], cg_kmul(k, kv(k, nj), ki(k, 16 * G->bk)))));
    if (G->g->tc == KTC_TF32) {
      cg_ktf32_each(k, blk, G->af, G->mi * 4);
      cg_ktf32_each(k, blk, G->bf, G->ni * 2);
    }
    KBlock *pm = &unrolled(k, blk, "mi", G->mi, &mi2)->body;
    KBlock *pn = &unrolled(k, pm, "ni", G->ni, &ni2)->body;
    KExpr *slot = cg_kmul(k, cg_kadd(k, cg_kmul(k, kv(k, mi2), ki(k, G->ni)), kv(k, ni2)), ki(k, 4));
    cg_kmma(k, pn, G->g->tc, G->acc, slot, G->af, cg_kmul(k, kv(k, mi2), ki(k, 4)), G->bf,
            cg_kmul(k, kv(k, ni2), ki(k, 2)));
  }
}

/* The wgmma work on stage st, one group: each k-step of the stage (32
 * bytes along K, the start of the rows' descriptors 32 bytes on), each of
 * the warpgroup's m64 blocks against its wg_n columns.  The stage layout
 * is already wgmma's 64-byte swizzle (swizzle() above), its rows' base a
 * multiple of 512 bytes (the stage sizes, 1024-aligned dynamic shared
 * memory). */
static void compute_wg(Gen *G, KBlock *blk, KExpr *st) {
  Kernel *k = G->k;
  cg_kwg_fence(k, blk);
  for (int ks = 0; ks < ROW_BYTES / KSTEP; ks++) {
    KExpr *kel = ki(k, ks * KSTEP / G->es);
    KExpr *b_at = stage_at(G, 1, st, cg_kadd(k, cg_kmul(k, G->wg_col0, ki(k, G->bk)), kel));
    for (int mb = 0; mb < G->wg_mb; mb++) {
      KExpr *row = cg_kadd(k, G->wg_row0, ki(k, 64 * mb));
      KExpr *a_at = stage_at(G, 0, st, cg_kadd(k, cg_kmul(k, row, ki(k, G->bk)), kel));
      cg_kwg_mma(k, blk, G->g->tc, G->wg_n, G->acc, ki(k, mb * G->wg_n / 2), G->side[0].sm, a_at, G->side[1].sm, b_at,
                 NULL);
    }
  }
  cg_kwg_commit(k, blk);
}

static AccLayout mma_layout(const Gen *G) { return (AccLayout){G->wrow0, G->wcol0, G->mi, G->ni, 16}; }

static AccLayout wg_layout(const Gen *G) {
  Kernel *k = G->k;
  KExpr *w = kmod(k, kdiv(k, G->tid, 32), 4);
  return (AccLayout){cg_kadd(k, G->wg_row0, cg_kmul(k, w, ki(k, 16))), G->wg_col0, G->wg_mb, G->wg_n / 8, 64};
}

/* The accumulators into the tile cs (f32 or i32, a row cst elements):
 * [BM][cst] in pairs (8-byte stores), or transposed [BN][cst] element by
 * element. */
static void acc_to_tile(Gen *G, KBlock *blk, AccLayout L, KBuf *cs, int64_t cst, bool transposed) {
  Kernel *k = G->k;
  KVar *mi, *ni, *h;
  KBlock *bm_ = &unrolled(k, blk, "mi", L.mi, &mi)->body;
  KBlock *bn_ = &unrolled(k, bm_, "ni", L.ni, &ni)->body;
  KBlock *bh = &unrolled(k, bn_, "h", 2, &h)->body;
  KExpr *gid = kdiv(k, G->lane, 4), *tig = kmod(k, G->lane, 4);
  KExpr *row = cg_kadd(k, L.row0, cg_kadd(k, cg_kmul(k, kv(k, mi), ki(k, L.mstep)), cg_kadd(k, gid, cg_kmul(k, kv(k, h), ki(k, 8)))));
  KExpr *col = cg_kadd(k, L.col0, cg_kadd(k, cg_kmul(k, kv(k, ni), ki(k, 8)), cg_kmul(k, tig, ki(k, 2))));
  KExpr *slot = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, kv(k, mi), ki(k, L.ni)), kv(k, ni)), ki(k, 4)),
                        cg_kmul(k, kv(k, h), ki(k, 2)));
  if (!transposed) {
    KExpr *pair[2] = {cg_kload(k, G->acc, slot), cg_kload(k, G->acc, cg_kadd(k, slot, ki(k, 1)))};
    cg_kchunk(k, bh, cs, cg_kadd(k, cg_kmul(k, row, ki(k, cst)), col), pair, 2);
    return;
  }
  KVar *e;
  KBlock *be = &unrolled(k, bh, "e", 2, &e)->body;
  cg_kstore(k, be, cs, cg_kadd(k, cg_kmul(k, cg_kadd(k, col, kv(k, e)), ki(k, cst)), row),
            cg_kload(k, G->acc, cg_kadd(k, slot, kv(k, e))));
}

/* acc_to_tile by the layout the GPU ran: wgmma's where it did. */
static void acc_out(Gen *G, KBlock *blk, KBuf *cs, int64_t cst, bool transposed) {
  if (!G->wg) {
    acc_to_tile(G, blk, mma_layout(G), cs, cst, transposed);
    return;
  }
  KStmt *wi = cg_kwg_if(G->k, blk);
  acc_to_tile(G, &wi->body, wg_layout(G), cs, cst, transposed);
  acc_to_tile(G, &wi->orelse, mma_layout(G), cs, cst, transposed);
}

/* The m-major epilogue where C's m comes in whole runs of EPI_LANES
 * (nhwc's channels, a multiple of 8): the tile goes to shared memory
 * transposed, [BN][BM + TPAD], and each thread takes EPI_LANES
 * consecutive m of one n, in a KM_LANES loop that cg_vectorize turns into
 * 16-byte loads of the tile and 16-byte stores of C (and of whatever the
 * fused epilogue reads at C's index: a residual, per-channel scales).
 * The first H200 run had the element-wise walk at 1.3 TB/s on the 1x1
 * convolutions of ResNet-50's first stage, whose time is their stores.
 * The column stride BM + CPAD keeps a run 16-byte aligned; the fragment
 * stores then meet 2-way bank conflicts (banks 16 tig + gid), a quarter
 * warp's 16-byte reads 2-way as well. */
static void epilogue_lanes(Gen *G, KBlock *body, KExpr *m0, KExpr *n0) {
  Kernel *k = G->k;
  const CgTcGemm *g = G->g;
  int64_t cst = G->t.bm + CPAD;
  KBuf *cs = cg_kdynshared(k, "Cs", G->acc_t, G->t.bn * cst, 0);
  if (any_async(G)) cg_kcp_wait(k, body, 0);
  cg_kbarrier(k, body);
  acc_out(G, body, cs, cst, true);
  cg_kbarrier(k, body);
  KVar *l = cg_kvar(k, "l", KT_INDEX);
  KStmt *loop = cg_kloop(k, body, l, ki(k, G->t.bm * G->t.bn / (G->threads * EPI_LANES)), KM_SERIAL);
  KBlock *lb = &loop->body;
  KExpr *e0 = ilet(k, lb, "e", cg_kmul(k, cg_kadd(k, cg_kmul(k, kv(k, l), ki(k, G->threads)), G->tid), ki(k, EPI_LANES)));
  KExpr *r0 = ilet(k, lb, "r", kmod(k, e0, G->t.bm)), *c = ilet(k, lb, "c", kdiv(k, e0, G->t.bm));
  KExpr *mb = ilet(k, lb, "mb", cg_kadd(k, m0, r0)), *n = ilet(k, lb, "n", cg_kadd(k, n0, c));
  /* m is a multiple of the lanes, so a run is all in or all out */
  KExpr *ok = cg_kand(k, g->m % G->t.bm ? klt(k, mb, ki(k, g->m)) : NULL, g->n % G->t.bn ? klt(k, n, ki(k, g->n)) : NULL);
  if (ok) lb = &cg_kif(k, lb, ok)->body;
  KVar *v = cg_kvar(k, "v", KT_INDEX);
  KBlock *vb = &cg_kloop(k, lb, v, ki(k, EPI_LANES), KM_LANES)->body;
  KExpr *m = ilet(k, vb, "m", cg_kadd(k, mb, kv(k, v)));
  KExpr *y = kv(k, cg_klet(k, vb, "y", G->acc_t,
                           cg_kload(k, cs, cg_kadd(k, cg_kmul(k, c, ki(k, cst)), cg_kadd(k, r0, kv(k, v))))));
  g->store(g->ctx, k, vb, G->z, m, n, y);
  /* the next tile's loads reuse these bytes */
  cg_kbarrier(k, body);
}

/* Element e of the tile per thread, a row of the tile at a time:
 * consecutive threads on consecutive n (NCHW's pixels), or on
 * consecutive m where C's columns are contiguous in memory (nhwc's
 * channels).  Returns the block that runs for the elements inside C,
 * with their coordinates in the tile (*r, *c) and in C (*m, *n). */
static KBlock *walk_tile(Gen *G, KBlock *body, KExpr *m0, KExpr *n0, KExpr **r, KExpr **c, KExpr **m, KExpr **n) {
  Kernel *k = G->k;
  const CgTcGemm *g = G->g;
  KVar *l = cg_kvar(k, "l", KT_INDEX);
  KBlock *lb = &cg_kloop(k, body, l, ki(k, G->t.bm * G->t.bn / G->threads), KM_SERIAL)->body;
  KExpr *e = ilet(k, lb, "e", cg_kadd(k, cg_kmul(k, kv(k, l), ki(k, G->threads)), G->tid));
  if (g->store_m_major)
    *r = ilet(k, lb, "r", kmod(k, e, G->t.bm)), *c = ilet(k, lb, "c", kdiv(k, e, G->t.bm));
  else
    *r = ilet(k, lb, "r", kdiv(k, e, G->t.bn)), *c = ilet(k, lb, "c", kmod(k, e, G->t.bn));
  *m = ilet(k, lb, "m", cg_kadd(k, m0, *r)), *n = ilet(k, lb, "n", cg_kadd(k, n0, *c));
  KExpr *ok = cg_kand(k, g->m % G->t.bm ? klt(k, *m, ki(k, g->m)) : NULL, g->n % G->t.bn ? klt(k, *n, ki(k, g->n)) : NULL);
  return ok ? &cg_kif(k, lb, ok)->body : lb;
}

/* The accumulators to shared memory ([BM][BN + CPAD]: float2 stores of a
 * half-warp reach 16 distinct bank pairs), then element by element to
 * store, or to this slice's partial sums, which the tile's last slice
 * then adds (the shared reads of an m-major walk stride by a row: 4-way
 * conflicts). */
static void epilogue(Gen *G, KBlock *body, KExpr *m0, KExpr *n0, KExpr *ks, KBuf *part) {
  Kernel *k = G->k;
  const CgTcGemm *g = G->g;
  if (!part && g->store_m_major && g->m % EPI_LANES == 0 &&
      (G->t.bm * G->t.bn) % (G->threads * EPI_LANES) == 0) {
    epilogue_lanes(G, body, m0, n0);
    return;
  }
  int64_t cst = G->t.bn + CPAD;
  KBuf *cs = cg_kdynshared(k, "Cs", G->acc_t, G->t.bm * cst, 0);
  if (any_async(G)) cg_kcp_wait(k, body, 0);
  cg_kbarrier(k, body);
  acc_out(G, body, cs, cst, false);
  cg_kbarrier(k, body);
  KExpr *r, *c, *m, *n;
  KBlock *lb = walk_tile(G, body, m0, n0, &r, &c, &m, &n);
  KExpr *v = kv(k, cg_klet(k, lb, "y", G->acc_t, cg_kload(k, cs, cg_kadd(k, cg_kmul(k, r, ki(k, cst)), c))));
  if (part)
    cg_kstore(k, lb, part, cg_gemm_slice_at(k, g, G->t.split, G->z, ks, m, n), v);
  else
    g->store(g->ctx, k, lb, G->z, m, n, v);
  /* the next tile's loads reuse these bytes */
  cg_kbarrier(k, body);
  if (!part) return;
  KBlock *fix = cg_gemm_last_slice(G->b, k, body, g, G->tm, G->tn, G->z, G->bm, G->bn, G->t.split);
  lb = walk_tile(G, fix, m0, n0, &r, &c, &m, &n);
  g->store(g->ctx, k, lb, G->z, m, n, cg_gemm_slices_sum(k, lb, g, part, G->t.split, G->z, m, n));
}

const char *cg_tc_name(KTcKind tc) {
  static const char *const names[] = {"f16", "bf16", "s8", "tf32"};
  return names[tc];
}

KExpr *cg_gemm_slice_at(Kernel *k, const CgTcGemm *g, int64_t split, KExpr *z, KExpr *ks, KExpr *m, KExpr *n) {
  KExpr *slice = cg_kadd(k, cg_kmul(k, z, ki(k, split)), ks);
  return cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, slice, ki(k, g->m)), m), ki(k, g->n)), n);
}

KBlock *cg_gemm_last_slice(CgBuild *b, Kernel *k, KBlock *body, const CgTcGemm *g, int64_t tm, int64_t tn,
                           KExpr *z, KExpr *bm, KExpr *bn, int64_t split) {
  int64_t tiles = tm * tn * g->batch;
  KExpr *tile = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, z, ki(k, tm)), bm), ki(k, tn)), bn);
  KBuf *count = cg_kglobal(k, "count", TY_I32, tiles, cg_sync_words(b, tiles));
  KVar *last = cg_klast_arrival(k, body, count, tile, split);
  return &cg_kif(k, body, cg_kcmp(k, KC_NE, kv(k, last), cg_kint(k, 0)))->body;
}

KExpr *cg_gemm_slices_sum(Kernel *k, KBlock *in, const CgTcGemm *g, KBuf *part, int64_t split, KExpr *z, KExpr *m,
                          KExpr *n) {
  KVar *acc = cg_kvar(k, "acc", part->dtype), *s = cg_kvar(k, "s", KT_INDEX);
  KStmt *red = cg_kreduce(k, in, acc, cg_kimm(k, 0, part->dtype), OP_ADD, s, ki(k, split));
  red->value = cg_kload(k, part, cg_gemm_slice_at(k, g, split, z, kv(k, s), m, n));
  return kv(k, acc);
}

/* Iteration j loads K tile j into stage j % stages and, from j = d on,
 * computes tile j - d, in stage (j - d) % stages: the first iterations
 * are the prologue, with the same loads.  The iterations go stages at a
 * time, unrolled, so that both stages are constants of the code: every
 * shared-memory address of a stage (ldmatrix's, cp.async's) is a
 * register plus an immediate.
 *
 * mma.sync: d = stages - 1, so the loads run stages - 1 tiles ahead and
 * the stage computed is the one loaded next, after the next barrier.
 *
 * wgmma (wg): d = stages - 2 (stages >= 3), so that one group stays in
 * flight across the next barrier: the stage iteration j loads was read
 * by the group of iteration j - 2, retired (wait_group 1) before j's
 * barrier, while j - 1's still runs.  Each thread's shared-memory
 * writes (cp.async, the staged stores) reach wgmma's async proxy by its
 * fence before that barrier.  The last groups are retired after the
 * loop. */
static void main_loop(Gen *G, KBlock *body, KExpr *kt0, bool wg) {
  Kernel *k = G->k;
  int stages = G->t.stages, d = wg ? stages - 2 : stages - 1;
  if (d < 1) dl_internal(k->ctx, "tensor-core main loop of %d stages", stages);
  int64_t iters = G->kt_split + d;
  /* the zeros become opaque values before the loop: otherwise the
   * compiler writes them into the first wgmma's registers after its
   * fence, and ptxas then inserts fences of its own (C7519) */
  if (wg) cg_kwg_acc_each(k, body, G->acc, G->t.bm * G->t.bn / G->threads);
  KVar *q = cg_kvar(k, "q", KT_INDEX), *u;
  KBlock *qb = &cg_kloop(k, body, q, ki(k, cg_cdiv(iters, stages)), KM_SERIAL)->body;
  KBlock *lb = &unrolled(k, qb, "u", stages, &u)->body;
  KExpr *j = ilet(k, lb, "j", cg_kadd(k, cg_kmul(k, kv(k, q), ki(k, stages)), kv(k, u)));
  if (iters % stages) lb = &cg_kif(k, lb, klt(k, j, ki(k, iters)))->body;
  if (wg) cg_kwg_wait(k, lb, 1);
  /* tile j - d complete: of the tiles committed, up to j - 1, d - 1 may pend */
  if (any_async(G)) cg_kcp_wait(k, lb, d - 1);
  if (wg) cg_kproxy_fence(k, lb);
  cg_kbarrier(k, lb);
  KExpr *nk = ilet(k, lb, "nk", cg_kadd(k, kt0, j)), *stw = kv(k, u);
  for (int s = 0; s < 2; s++)
    if (async_side(&G->side[s])) issue_async(G, lb, s, nk, stw);
  if (any_async(G)) cg_kcp_commit(k, lb);
  for (int s = 0; s < 2; s++)
    if (G->side[s].vec)
      fetch_chunks(G, lb, s, nk);
    else if (!G->side[s].gbuf)
      fetch(G, lb, s, nk);
  KBlock *cb = &cg_kif(k, lb, cg_kcmp(k, KC_GE, j, ki(k, d)))->body;
  KExpr *stc = kmod(k, cg_kadd(k, kv(k, u), ki(k, stages - d)), stages);
  if (wg)
    compute_wg(G, cb, stc);
  else
    compute(G, cb, stc);
  for (int s = 0; s < 2; s++)
    if (!async_side(&G->side[s])) put(G, lb, s, stw);
  if (wg) {
    cg_kwg_wait(k, body, 0);
    cg_kwg_acc_each(k, body, G->acc, G->t.bm * G->t.bn / G->threads);
  }
}

void cg_tc_gemm(CgBuild *b, const CgTcGemm *g) {
  Ctx *c = cg_build_ctx(b);
  Gen G0 = {.b = b, .g = g}, *G = &G0;
  G->t = cg_tc_choose(g->m, g->n, g->k, g->batch, g->tc);
  if (cg_options(b)->no_split_k && G->t.split > 1) {
    /* the same tile, its stages as for the whole of K */
    G->t.split = 1;
    G->t.stages = stages_for(cg_cdiv(g->k, ROW_BYTES / elem_bytes(g->tc)));
  }
  G->es = elem_bytes(g->tc);
  G->epc = CHUNK / G->es;
  G->bk = ROW_BYTES / G->es;
  G->tile = tile_dtype(g->tc);
  G->acc_t = g->tc == KTC_S8 ? TY_I32 : TY_F32;
  G->threads = G->t.wm * G->t.wn * 32;
  G->wtm = G->t.bm / G->t.wm, G->wtn = G->t.bn / G->t.wn;
  G->mi = G->wtm / 16, G->ni = G->wtn / 8;
  G->kt_n = cg_cdiv(g->k, G->bk);
  G->kt_split = cg_cdiv(G->kt_n, G->t.split);
  /* wgmma keeps a group in flight past a barrier: a stage more than the
   * loads need (main_loop) */
  G->wg = !cg_options(b)->no_wgmma && wg_shape(G);
  if (G->wg && G->t.stages < 3) G->t.stages = 3;
  const char *what = arena_printf(&c->arena, "%s, tensor cores %s %dx%dx%d, %d stages%s", g->what, cg_tc_name(g->tc),
                                  G->t.bm, G->t.bn, G->bk, G->t.stages,
                                  G->t.split > 1 ? arena_printf(&c->arena, ", split-K %d", G->t.split) : "");
  Kernel *k = G->k = cg_kernel_new(c, g->node, arena_printf(&c->arena, "%s_tc", g->hint), what);
  int stages = G->t.stages;
  for (int s = 0; s < 2; s++) {
    Side *S = &G->side[s];
    S->op = s ? &g->b : &g->a;
    S->rows = s ? G->t.bn : G->t.bm;
    S->gbuf = g->k % G->epc == 0 && S->op->async_buf ? S->op->async_buf(g->ctx, k) : NULL;
    S->vec = S->gbuf && S->op->fill != 0;
  }
  for (int s = 0; s < 2; s++) {
    Side *S = &G->side[s];
    S->n_slots = (int)cg_cdiv(S->rows * CHUNKS, G->threads);
    if (!async_side(S)) S->stage = cg_klocal(k, s ? "sb" : "sa", G->tile, (int64_t)S->n_slots * G->epc, KSP_REGISTER);
  }
  uint32_t a_bytes = (uint32_t)(stages * G->t.bm * ROW_BYTES);
  G->side[0].sm = cg_kdynshared(k, "As", G->tile, (int64_t)stages * G->t.bm * G->bk, 0);
  G->side[1].sm = cg_kdynshared(k, "Bs", G->tile, (int64_t)stages * G->t.bn * G->bk, a_bytes);
  G->acc = cg_klocal(k, "acc", G->acc_t, G->mi * G->ni * 4, KSP_REGISTER);
  G->af = cg_kfrag(k, "af", G->mi * 4);
  G->bf = cg_kfrag(k, "bf", G->ni * 2);
  int64_t tm = cg_cdiv(g->m, G->t.bm), tn = cg_cdiv(g->n, G->t.bn), tz = g->batch * G->t.split;
  /* A grid of three dimensions (cg_ktiles' one would let the GEMM share
   * a launch, but ptxas then recomputes the tile's coordinates inside
   * the main loop, where blockIdx costs an S2R: up to 2.4 instructions
   * more per mma in ResNet-50's SASS) */
  KVar *bn = cg_kvar(k, "bn", KT_INDEX), *bm = cg_kvar(k, "bm", KT_INDEX), *bz = cg_kvar(k, "bz", KT_INDEX);
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lx = cg_kloop(k, &k->body, bn, ki(k, tn), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lx->body, bm, ki(k, tm), KM_GRID_Y);
  KStmt *lz = cg_kloop(k, &ly->body, bz, ki(k, tz), KM_GRID_Z);
  KStmt *lt = cg_kloop(k, &lz->body, t, ki(k, G->threads), KM_BLOCK_X);
  KBlock *body = &lt->body;
  G->tid = kv(k, t);
  G->bm = kv(k, bm), G->bn = kv(k, bn), G->tm = tm, G->tn = tn;
  G->z = tz == 1 ? ki(k, 0) : G->t.split > 1 ? ilet(k, body, "z", kdiv(k, kv(k, bz), G->t.split)) : kv(k, bz);
  KExpr *ks = G->t.split > 1 ? ilet(k, body, "ks", kmod(k, kv(k, bz), G->t.split)) : ki(k, 0);
  KExpr *kt0 = ilet(k, body, "kt0", cg_kmul(k, ks, ki(k, G->kt_split)));
  G->kt_end = G->t.split > 1 ? ilet(k, body, "kt1", cg_kidx(k, KI_MIN, cg_kadd(k, kt0, ki(k, G->kt_split)), ki(k, G->kt_n)))
                             : ki(k, G->kt_n);
  G->lane = ilet(k, body, "lane", kmod(k, G->tid, 32));
  KExpr *warp = ilet(k, body, "warp", kdiv(k, G->tid, 32));
  G->wrow0 = ilet(k, body, "wr", cg_kmul(k, kdiv(k, warp, G->t.wn), ki(k, G->wtm)));
  G->wcol0 = ilet(k, body, "wc", cg_kmul(k, kmod(k, warp, G->t.wn), ki(k, G->wtn)));
  if (G->wg) {
    k->what = arena_printf(&c->arena, "%s, wgmma %dx%d on sm_90a", what, G->wg_mb * 64, G->wg_n);
    KExpr *wgi = ilet(k, body, "wgi", kdiv(k, G->tid, 128));
    G->wg_row0 = ilet(k, body, "wgr", cg_kmul(k, kdiv(k, wgi, G->wgn), ki(k, G->t.bm / G->wgm)));
    G->wg_col0 = ilet(k, body, "wgc", cg_kmul(k, kmod(k, wgi, G->wgn), ki(k, G->wg_n)));
  }
  KExpr *m0 = ilet(k, body, "m0", cg_kmul(k, kv(k, bm), ki(k, G->t.bm)));
  KExpr *n0 = ilet(k, body, "n0", cg_kmul(k, kv(k, bn), ki(k, G->t.bn)));
  KVar *z;
  KBlock *zb = &unrolled(k, body, "z", G->mi * G->ni * 4, &z)->body;
  cg_kstore(k, zb, G->acc, kv(k, z), cg_kimm(k, 0, G->acc_t));
  setup_side(G, body, 0, m0);
  setup_side(G, body, 1, n0);
  lane_rows(G, body);

  if (G->wg) {
    KStmt *wi = cg_kwg_if(k, body);
    main_loop(G, &wi->body, kt0, true);
    main_loop(G, &wi->orelse, kt0, false);
  } else {
    main_loop(G, body, kt0, false);
  }

  RtRef part = {0};
  KBuf *pb = NULL;
  if (G->t.split > 1) {
    int64_t numel = g->batch * G->t.split * g->m * g->n;
    part = cg_scratch(b, g->node, (uint64_t)numel * 4);
    pb = cg_kglobal(k, "part", G->acc_t, numel, part);
  }
  epilogue(G, body, m0, n0, ks, pb);
  k->grid[0] = (uint32_t)(tn < INT32_MAX ? tn : INT32_MAX);
  k->grid[1] = (uint32_t)(tm < 65535 ? tm : 65535);
  k->grid[2] = (uint32_t)(tz < 65535 ? tz : 65535);
  k->block[0] = (uint32_t)G->threads;
  cg_launch(b, k);
}
