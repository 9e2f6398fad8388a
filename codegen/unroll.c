/* Kernel-IR passes: take a kernel before it is finished, rewrite its loop
 * nest in place.  cg_unroll marks small constant loops (window taps, short
 * reductions, a thread's tile) for full unrolling, which the emitter
 * prints as `#pragma unroll`; cg_vectorize turns a contiguous elementwise
 * map into 16-byte float4 loads and stores (8-byte uint2 of four f16 or
 * bf16) with a scalar tail. */
#include <string.h>

#include "kernel.h"

/* ---- unrolling ---- */

static void unroll_block(KBlock *b, int max_trip) {
  for (KStmt *s = b->first; s; s = s->next) {
    if (s->kind == KS_LOOP || s->kind == KS_REDUCE) {
      if (max_trip == 0) {
        if (s->map == KM_UNROLL) s->map = KM_SERIAL;
      } else if (s->map == KM_SERIAL && s->extent->kind == KE_INT && s->extent->i >= 1 &&
                 s->extent->i <= max_trip) {
        s->map = KM_UNROLL;
      }
    }
    unroll_block(&s->body, max_trip);
    unroll_block(&s->orelse, max_trip);
  }
}

void cg_unroll(Kernel *k, int max_trip) { unroll_block(&k->body, max_trip); }

/* ---- vectorization ---- */

enum { LANES = 4, MAX_VEC = 16 };

typedef struct Vec {
  Kernel *k;
  KVar *i;                /* the map's index */
  KBuf *bufs[MAX_VEC];    /* buffers read at exactly i */
  KVar *vars[MAX_VEC];    /* their float4 */
  int n_bufs;
  KVar *from[64], *to[64]; /* lets renamed for the lane being cloned */
  int n_ren;
  KVar *lane_i;
  int lane;
} Vec;

static bool is_i(const Vec *v, const KExpr *e) { return e->kind == KE_VAR && e->var == v->i; }

static const KParam *param_of_buf(const Kernel *k, const KBuf *b) {
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf == b) return &k->params[i];
  return NULL;
}

/* Four lanes: a float4 (16 bytes) of f32, or a uint2 (8 bytes) of f16 or
 * bf16, which the emitter unpacks lane by lane; the arithmetic stays in
 * f32 either way (these maps are bound by memory, not by math). */
static bool aligned(const Kernel *k, const KBuf *b) {
  const KParam *p = param_of_buf(k, b);
  if (!p || b->space != KSP_GLOBAL) return false;
  if (b->dtype == TY_F32) return p->arg.ref.offset % 16 == 0;
  if (b->dtype == TY_F16 || b->dtype == TY_BF16) return p->arg.ref.offset % 8 == 0;
  return false;
}

/* Every load in e is of a global buffer; those at exactly i must be
 * vectorizable and are collected. */
static bool scan(Vec *v, const KExpr *e) {
  if (!e) return true;
  if (e->kind == KE_LANE) return false;
  if (e->kind == KE_LOAD) {
    if (e->buf->space != KSP_GLOBAL) return false;
    if (is_i(v, e->a[0])) {
      if (!aligned(v->k, e->buf)) return false;
      int j = 0;
      while (j < v->n_bufs && v->bufs[j] != e->buf) j++;
      if (j == v->n_bufs) {
        if (v->n_bufs == MAX_VEC) return false;
        v->bufs[v->n_bufs++] = e->buf;
      }
      return true;
    }
  }
  for (int j = 0; j < 3; j++)
    if (!scan(v, e->a[j])) return false;
  return true;
}

static KExpr *clone(Vec *v, const KExpr *e) {
  if (!e) return NULL;
  if (e->kind == KE_VAR) {
    if (e->var == v->i) return cg_kv(v->k, v->lane_i);
    for (int j = 0; j < v->n_ren; j++)
      if (v->from[j] == e->var) return cg_kv(v->k, v->to[j]);
    return (KExpr *)e;
  }
  if (e->kind == KE_LOAD && is_i(v, e->a[0]))
    for (int j = 0; j < v->n_bufs; j++)
      if (v->bufs[j] == e->buf) {
        KExpr *l = ARENA_NEW(&v->k->ctx->arena, KExpr);
        l->kind = KE_LANE;
        l->dtype = e->dtype;
        l->var = v->vars[j];
        l->i = v->lane;
        return l;
      }
  if (e->kind == KE_INT || e->kind == KE_FLOAT) return (KExpr *)e;
  KExpr *c = ARENA_NEW(&v->k->ctx->arena, KExpr);
  *c = *e;
  for (int j = 0; j < 3; j++) c->a[j] = clone(v, e->a[j]);
  return c;
}

static KStmt *new_stmt(Kernel *k, KBlock *in, KStmtKind kind) {
  KStmt *s = ARENA_NEW(&k->ctx->arena, KStmt);
  s->kind = kind;
  if (in->last)
    in->last->next = s;
  else
    in->first = s;
  in->last = s;
  return s;
}

bool cg_vectorize(Kernel *k) {
  KStmt *loop = k->body.first;
  if (!loop || loop->next || loop->kind != KS_LOOP || loop->map != KM_GRID_STRIDE) return false;
  if (loop->extent->kind != KE_VAR || k->n_locals) return false;
  int64_t n = -1;
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].var == loop->extent->var && k->params[i].var->dtype == KT_INDEX) n = k->params[i].arg.i;
  /* Below a few warps of vectors the tail and the wider loads buy nothing. */
  if (n < LANES * 64) return false;
  Vec v = {.k = k, .i = loop->var};
  int n_stores = 0, n_lets = 0;
  for (KStmt *s = loop->body.first; s; s = s->next) {
    if (s->kind == KS_LET) {
      if (!scan(&v, s->value)) return false;
      n_lets++;
    } else if (s->kind == KS_STORE) {
      if (!is_i(&v, s->index) || !aligned(k, s->buf) || !scan(&v, s->value)) return false;
      n_stores++;
    } else {
      return false;
    }
  }
  if (n_stores == 0 || n_stores > 8 || n_lets > (int)ARRAY_LEN(v.from)) return false;

  KBlock old = loop->body;
  KExpr *nv = loop->extent;
  KExpr *n4 = cg_kidx(k, KI_DIV, nv, cg_kint(k, LANES));
  /* The vector loop. */
  KVar *i4 = cg_kvar(k, "i", KT_INDEX);
  loop->var = i4;
  loop->extent = n4;
  loop->body = (KBlock){0};
  KExpr *base = cg_kmul(k, cg_kv(k, i4), cg_kint(k, LANES));
  for (int j = 0; j < v.n_bufs; j++) {
    KStmt *s = new_stmt(k, &loop->body, KS_VLOAD);
    s->var = v.vars[j] = cg_kvar(k, "v", v.bufs[j]->dtype);
    s->buf = v.bufs[j];
    s->index = base;
  }
  KExpr *vals[8][LANES];
  for (int l = 0; l < LANES; l++) {
    v.lane = l;
    v.n_ren = 0;
    v.lane_i = cg_klet(k, &loop->body, "i", KT_INDEX, cg_kadd(k, base, cg_kint(k, l)));
    int st = 0;
    for (KStmt *s = old.first; s; s = s->next) {
      if (s->kind == KS_LET) {
        KVar *to = cg_klet(k, &loop->body, "f", s->var->dtype, clone(&v, s->value));
        v.from[v.n_ren] = s->var;
        v.to[v.n_ren++] = to;
      } else if (st < 8) {
        vals[st++][l] = clone(&v, s->value);
      } else {
        return false; /* unreachable in practice: checked below before rewriting */
      }
    }
  }
  int st = 0;
  for (KStmt *s = old.first; s; s = s->next) {
    if (s->kind != KS_STORE) continue;
    KStmt *w = new_stmt(k, &loop->body, KS_VSTORE);
    w->buf = s->buf;
    w->index = base;
    for (int l = 0; l < LANES; l++) w->lanes[l] = vals[st][l];
    st++;
  }
  /* The scalar tail: the original body at i = n/4*4 + t. */
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *tail = new_stmt(k, &k->body, KS_LOOP);
  tail->var = t;
  tail->extent = cg_kidx(k, KI_SUB, nv, cg_kmul(k, n4, cg_kint(k, LANES)));
  tail->map = KM_GRID_STRIDE;
  KStmt *at = new_stmt(k, &tail->body, KS_LET);
  at->var = v.i;
  at->value = cg_kadd(k, cg_kmul(k, n4, cg_kint(k, LANES)), cg_kv(k, t));
  at->next = old.first;
  tail->body.last = old.last;
  cg_kernel_grid_1d(k, (n + LANES - 1) / LANES);
  return true;
}
