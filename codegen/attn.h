/* What the attention kernels share (codegen/attention.c, which has them,
 * and codegen/attention_grad.c): tiles of rows loaded into shared
 * memory, and the two mma.sync products of FlashAttention on m16n8k16
 * fragments, or m16n8k8 tf32 ones on f32 tiles (docs/tensorcores.md's
 * layouts; docs/attention.md). */
#ifndef DLCC_CODEGEN_ATTN_H
#define DLCC_CODEGEN_ATTN_H

#include "kernel.h"

/* How a kernel's tiles sit in shared memory: rows of dp columns (d
 * of them real, the rest zero) ld elements apart, in dt; loaded by
 * `threads` threads (thread tid), epc elements a 16-byte chunk. */
typedef struct AttnTiles {
  Kernel *k;
  DType dt;
  int64_t d, dp, ld, threads;
  int epc;
  KExpr *tid;
} AttnTiles;

/* Rows [row0, row0 + rows) of one head of q, k or v (its row 0 at
 * element base of src, rows rstride apart, S of them) into shared dst
 * from element dst0, dp columns a row (those past d, and rows past S,
 * zero): by cp.async when rows are whole chunks (commit and wait are
 * the caller's), else element by element. */
void cg_attn_load(const AttnTiles *t, KBlock *blk, KBuf *src, KExpr *base, int64_t rstride, KExpr *row0,
                  int64_t rows, int64_t S, KBuf *dst, KExpr *dst0);
/* Whether cg_attn_load moves t's rows by cp.async. */
static inline bool cg_attn_async(const AttnTiles *t) { return t->d % t->epc == 0; }

/* acc = A B^T on the tensor cores, for one warp: A its 16 rows from
 * element a0 of shared a (rows lda apart), B nb * 8 rows from element
 * b0 of shared b (ldb apart), both kdim (a multiple of 16) columns,
 * the product's dimension contiguous (kdim a multiple of 8 for
 * KTC_TF32).  acc holds nb m16n8 f32
 * accumulators, block j (columns 8j ..) at acc[4j ..]: lane (g, t)
 * has rows g (elements 0, 1) and g + 8 (2, 3), columns 2t and 2t + 1.
 * nb is even. */
void cg_attn_mma_abt(Kernel *k, KBlock *blk, KTcKind kind, KExpr *lane, KBuf *acc, int64_t nb, KBuf *a, KExpr *a0,
                     int64_t lda, KBuf *b, KExpr *b0, int64_t ldb, int64_t kdim);
/* acc += P B for one warp: P the 16 x kdim product cg_attn_mma_abt
 * left in the accumulators pacc (kdim / 8 blocks), rounded to kind; B
 * kdim rows of ncols (a multiple of 16) from element b0 of shared b
 * (rows ldb apart); acc ncols / 8 accumulators as above. */
void cg_attn_mma_pb(Kernel *k, KBlock *blk, KTcKind kind, KExpr *lane, KBuf *acc, int64_t ncols, KBuf *pacc,
                    int64_t kdim, KBuf *b, KExpr *b0, int64_t ldb);
/* How a score is made from a dot product: scale and an additive mask
 * times unit (log2 e on the tensor cores, whose scores are in base-2
 * units; else 1), a bool mask, causality.  mask NULL: none; ms its
 * strides over [B, H, Sq, Sk] (0 where it broadcasts). */
typedef struct AttnScore {
  KBuf *mask;
  int64_t ms[4];
  int64_t Sq, Sk;
  double scale, unit;
  bool causal;
} AttnScore;

/* The mask's strides over [B, H, Sq, Sk] for a mask of type t. */
void cg_attn_mask_strides(const TensorType *t, int64_t ms[4]);
/* The score of query qi of head h of batch row bz and key from their
 * dot product x, -inf where a bool mask, causality or `keep` (the
 * caller's bounds; NULL: none) leaves the key out: a let in blk. */
KExpr *cg_attn_score(Kernel *k, KBlock *blk, const AttnScore *sc, KExpr *x, KExpr *bz, KExpr *h, KExpr *qi,
                     KExpr *key, KExpr *keep);
/* x (f32) combined by op over the four lanes of its quad (the lanes
 * holding one row of an m16n8 accumulator): two shuffles. */
KExpr *cg_attn_quad(Kernel *k, KBlock *blk, KExpr *x, OpKind op);

#endif
