/* What the node lowerings (lower_kernels.c, lower_gemm.c, lower_window.c,
 * lower_move.c) share: operand loads, dtype checks, the map kernel (one
 * thread per element), row helpers, and the lowerings the dispatch in
 * lower_kernels.c calls.  Takes nothing, returns nothing: the helpers
 * are static inline so that each file keeps them to itself. */
#ifndef DLCC_LOWER_H
#define DLCC_LOWER_H

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"

static inline int64_t numel(const TensorType *t) { return ir_type_numel(t); }

static inline uint64_t nbytes(const TensorType *t) {
  return (uint64_t)numel(t) * (uint64_t)ir_dtype_size(t->dtype);
}

static inline void strides_of(const TensorType *t, int64_t *st) { ir_type_strides(t, st); }

static inline void bcast_strides(const TensorType *in, const TensorType *out, int64_t *st) {
  ir_type_bcast_strides(in, out, st);
}

static inline bool unsupported(CgBuild *b, const Node *n, DType dt) {
  diag_error(cg_build_ctx(b), n->loc, "codegen does not support %s on %s yet", ir_ops[n->op].name,
             ir_dtype_name(dt));
  return false;
}

/* Every operand and result a float (f32, f16, bf16: halves are loaded,
 * computed on in f32 and rounded when stored), or (ints_ok) an integer
 * dtype or bool. */
static inline bool check_dtypes(CgBuild *b, const Node *n, bool ints_ok) {
  for (int i = 0; i < n->n_in + n->n_out; i++) {
    DType dt = i < n->n_in ? n->in[i]->type.dtype : n->out[i - n->n_in].type.dtype;
    bool ok = ir_dtype_is_float(dt) ||
              (ints_ok && (dt == TY_I8 || dt == TY_U8 || dt == TY_I32 || dt == TY_I64 || dt == TY_BOOL ||
                           dt == TY_I16 || dt == TY_U16 || dt == TY_U32 || dt == TY_U64));
    if (!ok) return unsupported(b, n, dt);
  }
  return true;
}

static inline Kernel *new_kernel(CgBuild *b, const Node *n, const char *suffix, const char *what) {
  Ctx *c = cg_build_ctx(b);
  const CgGroup *grp = cg_group(b);
  const char *hint = grp && grp->anchor == n && grp->n > 1 ? cg_group_hint(c, grp) : ir_ops[n->op].name;
  if (suffix) hint = arena_printf(&c->arena, "%s_%s", hint, suffix);
  if (grp && grp->anchor == n && !what) what = arena_printf(&c->arena, "#k%d", grp->id);
  return cg_kernel_new(c, n, hint, what);
}

static inline KBuf *global_of(CgBuild *b, Kernel *k, const Value *v, const char *name) {
  return cg_kglobal(k, name, v->type.dtype, numel(&v->type), cg_ref(b, v));
}

/* v[index], v's value when it is a folded const, or its expression
 * when the fusion group being lowered computes it (lets into blk; pure
 * when blk is NULL). */
static inline KExpr *load_in(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name,
                      KExpr *index) {
  return cg_operand_load(b, k, blk, v, name, index);
}

static inline KExpr *load_of(CgBuild *b, Kernel *k, const Value *v, const char *name, KExpr *index) {
  return load_in(b, k, NULL, v, name, index);
}

/* The same as an f32 value: what arithmetic inside an op (sums,
 * normalizations, windows) works on, whatever v is stored in. */
static inline KExpr *load_f32(CgBuild *b, Kernel *k, KBlock *blk, const Value *v, const char *name,
                       KExpr *index) {
  return cg_kcast(k, load_in(b, k, blk, v, name, index), TY_F32);
}

/* ---- map kernels: one thread per element of an iteration space ---- */

/* The element's coordinates are decoded from the linear index only when
 * asked for, into locals at the top of the loop body. */
typedef struct Map {
  Kernel *k;
  KStmt *loop;
  KBlock pro, main;
  KExpr *i;
  TensorType t;
  int64_t st[DL_MAX_RANK];
  KExpr *coord[DL_MAX_RANK];
} Map;

static inline void map_begin(Map *m, Kernel *k, const TensorType *space) {
  memset(m, 0, sizeof *m);
  m->k = k;
  m->t = *space;
  strides_of(space, m->st);
  int64_t total = numel(space);
  KVar *n = cg_kparam(k, "n", KT_INDEX, total, 0);
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  m->loop = cg_kloop(k, &k->body, i, cg_kv(k, n), KM_GRID_STRIDE);
  m->i = cg_kv(k, i);
  cg_kernel_grid_1d(k, total);
}

static inline void map_end(Map *m) {
  KBlock *body = &m->loop->body;
  *body = m->pro;
  if (m->main.first) {
    if (body->last)
      body->last->next = m->main.first;
    else
      body->first = m->main.first;
    body->last = m->main.last;
  }
}

static inline KExpr *map_coord(Map *m, int d) {
  Kernel *k = m->k;
  if (m->t.dims[d] == 1) return cg_kint(k, 0);
  if (!m->coord[d]) {
    KExpr *e = cg_kidx(k, KI_DIV, m->i, cg_kint(k, m->st[d]));
    /* The outermost coordinate needs no modulo: i < numel. */
    bool outer = true;
    for (int j = 0; j < d; j++)
      if (m->t.dims[j] != 1) outer = false;
    if (!outer) e = cg_kidx(k, KI_MOD, e, cg_kint(k, m->t.dims[d]));
    m->coord[d] = cg_kv(k, cg_klet(k, &m->pro, "c", KT_INDEX, e));
  }
  return m->coord[d];
}

/* sum over d of coord(d) * st[d]: the linear index itself when st is
 * the space's own layout. */
static inline KExpr *map_index(Map *m, const int64_t *st) {
  Kernel *k = m->k;
  bool own = true;
  for (int d = 0; d < m->t.rank; d++)
    if (m->t.dims[d] != 1 && st[d] != m->st[d]) own = false;
  if (own) return m->i;
  KExpr *e = cg_kint(k, 0);
  for (int d = 0; d < m->t.rank; d++)
    if (st[d] && m->t.dims[d] != 1)
      e = cg_kadd(k, e, cg_kmul(k, map_coord(m, d), cg_kint(k, st[d])));
  return e;
}

static inline KExpr *map_operand(CgBuild *b, Map *m, const Value *v, const char *name, const int64_t *st) {
  double c;
  if (cg_const_of(b, v, &c)) return cg_kimm(m->k, c, v->type.dtype);
  if (numel(&v->type) == 1) return cg_kload(m->k, global_of(b, m->k, v, name), cg_kint(m->k, 0));
  return cg_kload(m->k, global_of(b, m->k, v, name), map_index(m, st));
}

static inline void map_store(CgBuild *b, Map *m, const Value *out, KExpr *value) {
  if (cg_fused_store(b, m->k, &m->main, out, m->i, value)) return;
  KBuf *o = global_of(b, m->k, out, "out");
  cg_kstore(m->k, &m->main, o, m->i, cg_kcast(m->k, value, out->type.dtype));
}

static inline TensorType flat(DType dt, int64_t count) { return ir_type_make(dt, 1, &count); }

/* ---- rows (topk): one thread per output row, a serial loop ---- */

static inline void split_axis(const TensorType *t, int axis, int64_t *outer, int64_t *len,
                       int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= t->dims[i];
  *len = t->dims[axis];
  for (int i = axis + 1; i < t->rank; i++) *inner *= t->dims[i];
}

/* A row of len elements spaced by inner, for the thread's output row o:
 * returns the base index (o / inner) * len * inner + o % inner. */
static inline KVar *row_base(Kernel *k, KBlock *in, KExpr *o, int64_t len, int64_t inner) {
  KExpr *base = cg_kmul(k, cg_kidx(k, KI_DIV, o, cg_kint(k, inner)), cg_kint(k, len * inner));
  base = cg_kadd(k, base, cg_kidx(k, KI_MOD, o, cg_kint(k, inner)));
  return cg_klet(k, in, "base", KT_INDEX, base);
}

static inline KExpr *row_at(Kernel *k, KVar *base, KExpr *kk, int64_t inner) {
  return cg_kadd(k, cg_kv(k, base), cg_kmul(k, kk, cg_kint(k, inner)));
}

/* ---- the lowerings (each file's header comment says which) ---- */

/* lower_gemm.c */
bool product_dtypes(CgBuild *b, const Node *n);
RtGemm gemm_of(DType dt, int64_t m, int64_t nn, int64_t k);
void emit_gemm(CgBuild *b, const Node *n, const char *what, const RtGemm *g);
void bias_add(CgBuild *b, const Node *n, RtRef out, int64_t total, int64_t inner,
              int64_t channels, const Value *bias);
bool lower_matmul(CgBuild *b, const Node *n);
bool lower_linear(CgBuild *b, const Node *n);
/* lower_rnn.c */
bool lower_rnn(CgBuild *b, const Node *n);
bool lower_bptt(CgBuild *b, const Node *n);
/* lower_window.c */
bool lower_conv(CgBuild *b, const Node *n);
bool lower_conv_transpose(CgBuild *b, const Node *n);
bool lower_resize(CgBuild *b, const Node *n);
bool lower_grid_sample(CgBuild *b, const Node *n);
bool lower_pool(CgBuild *b, const Node *n);
/* lower_move.c */
bool lower_reshape(CgBuild *b, const Node *n);
bool lower_transpose_expand_slice(CgBuild *b, const Node *n);
bool lower_pad(CgBuild *b, const Node *n);
bool lower_concat(CgBuild *b, const Node *n);
bool lower_gather(CgBuild *b, const Node *n);
bool lower_gather_elements(CgBuild *b, const Node *n);
bool lower_gather_nd(CgBuild *b, const Node *n);
bool lower_scatter_elements(CgBuild *b, const Node *n);
bool lower_scatter_nd(CgBuild *b, const Node *n);
bool lower_topk(CgBuild *b, const Node *n);
bool lower_nonzero(CgBuild *b, const Node *n);
bool lower_nms(CgBuild *b, const Node *n);
bool lower_unique(CgBuild *b, const Node *n);

#endif
