/* Shorthands for index arithmetic in the kernel IR, for the generators
 * that build long index expressions (tc_gemm.c, attention.c): they take
 * a kernel and expressions and return expressions, nothing else. */
#ifndef DLCC_CODEGEN_KSHORT_H
#define DLCC_CODEGEN_KSHORT_H

#include "kernel.h"

static inline KExpr *ki(Kernel *k, int64_t v) { return cg_kint(k, v); }
static inline KExpr *kv(Kernel *k, KVar *v) { return cg_kv(k, v); }
static inline KExpr *kdiv(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_DIV, a, ki(k, d)); }
static inline KExpr *kmod(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_MOD, a, ki(k, d)); }
static inline KExpr *klt(Kernel *k, KExpr *a, KExpr *b) { return cg_kcmp(k, KC_LT, a, b); }
/* e itself when it is an immediate or a variable, else a let of it into in */
static inline KExpr *ilet(Kernel *k, KBlock *in, const char *stem, KExpr *e) {
  return e->kind == KE_INT || e->kind == KE_VAR ? e : kv(k, cg_klet(k, in, stem, KT_INDEX, e));
}

/* a / b rounded up (a >= 0, b > 0): tiles, blocks, chunks */
static inline int64_t cg_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* a * m + b */
static inline KExpr *kmad(Kernel *k, KExpr *a, int64_t m, KExpr *b) { return cg_kadd(k, cg_kmul(k, a, ki(k, m)), b); }
static inline KExpr *kf32(Kernel *k, double v) { return cg_kimm(k, v, TY_F32); }
/* A loop of n iterations over a fresh index (*var) in `in`: its body. */
static inline KBlock *kloop(Kernel *k, KBlock *in, const char *stem, KExpr *n, KMap map, KExpr **var) {
  KVar *v = cg_kvar(k, stem, KT_INDEX);
  *var = kv(k, v);
  return &cg_kloop(k, in, v, n, map)->body;
}

#endif
