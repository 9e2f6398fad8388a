/* Builders for the kernel IR (kernel.h): take a kernel and pieces, return
 * new nodes carved from the compilation arena.  Index arithmetic is folded
 * as it is built, so lowering can write the general formula (x * 1 + 0)
 * and still print readable code. */
#include "kernel.h"

#include <math.h>
#include <string.h>

#include "ir/eval.h"

static KExpr *new_expr(Kernel *k, KExprKind kind, DType dt) {
  KExpr *e = ARENA_NEW(&k->ctx->arena, KExpr);
  e->kind = kind;
  e->dtype = dt;
  return e;
}

static void note_size(Kernel *k, int64_t v) {
  if (v < 0) v = -v;
  if (v > k->largest) k->largest = v;
}

Kernel *cg_kernel_new(Ctx *c, const Node *n, const char *hint, const char *what) {
  Kernel *k = ARENA_NEW(&c->arena, Kernel);
  k->ctx = c;
  k->node = n;
  k->hint = hint;
  k->what = what;
  k->index = TY_I32;
  for (int i = 0; i < 3; i++) k->grid[i] = k->block[i] = 1;
  return k;
}

static KParam *add_param(Kernel *k) {
  if (k->n_params == k->cap_params) {
    int cap = k->cap_params ? 2 * k->cap_params : 8;
    k->params = arena_realloc(&k->ctx->arena, k->params, sizeof(KParam) * (size_t)k->cap_params,
                              sizeof(KParam) * (size_t)cap);
    k->cap_params = cap;
  }
  KParam *p = &k->params[k->n_params++];
  memset(p, 0, sizeof *p);
  return p;
}

bool cg_same_ref(RtRef a, RtRef b) {
  return a.space == b.space && a.index == b.index && a.offset == b.offset;
}

KBuf *cg_kglobal(Kernel *k, const char *name, DType dt, int64_t numel, RtRef ref) {
  for (int i = 0; i < k->n_params; i++) {
    KParam *p = &k->params[i];
    if (p->buf && p->buf->dtype == dt && cg_same_ref(p->arg.ref, ref)) {
      if (numel > p->buf->numel) p->buf->numel = numel;
      note_size(k, numel);
      return p->buf;
    }
  }
  KParam *p = add_param(k);
  p->buf = ARENA_NEW(&k->ctx->arena, KBuf);
  /* Names must be distinct C identifiers within the kernel; locals end in
   * a bare number, so "_N" cannot collide with them. */
  const char *unique = name;
  for (int n = 1;; n++) {
    bool taken = false;
    for (int i = 0; i < k->n_params - 1; i++) {
      const char *pn = k->params[i].buf ? k->params[i].buf->name : k->params[i].var->name;
      if (strcmp(pn, unique) == 0) taken = true;
    }
    if (!taken) break;
    unique = arena_printf(&k->ctx->arena, "%s_%d", name, n);
  }
  p->buf->name = unique;
  p->buf->dtype = dt;
  p->buf->space = KSP_GLOBAL;
  p->buf->numel = numel;
  p->arg.kind = RT_ARG_PTR;
  p->arg.ref = ref;
  note_size(k, numel);
  return p->buf;
}

KVar *cg_kparam(Kernel *k, const char *name, DType dt, int64_t ival, float fval) {
  KParam *p = add_param(k);
  p->var = ARENA_NEW(&k->ctx->arena, KVar);
  p->var->name = name;
  p->var->dtype = dt;
  /* The launch passes exactly the kernel parameter's size, so only the
   * three argument kinds the plan knows may appear here. */
  if (dt == TY_F32)
    p->arg.kind = RT_ARG_F32;
  else if (dt == TY_I32)
    p->arg.kind = RT_ARG_I32;
  else if (dt == TY_I64 || dt == KT_INDEX)
    p->arg.kind = RT_ARG_I64;
  else
    dl_internal(k->ctx, "kernel scalar '%s' of dtype %s has no launch argument kind", name,
                ir_dtype_name(dt));
  p->arg.i = p->lo = p->hi = ival;
  p->arg.f = fval;
  if (dt == KT_INDEX) note_size(k, ival);
  return p->var;
}

KVar *cg_kparam_range(Kernel *k, const char *name, DType dt, int64_t ival, int64_t lo, int64_t hi) {
  KVar *v = cg_kparam(k, name, dt, ival, 0);
  KParam *p = &k->params[k->n_params - 1];
  p->lo = lo, p->hi = hi;
  if (dt == KT_INDEX) note_size(k, lo), note_size(k, hi);
  return v;
}

static KBuf *add_local(Kernel *k, const char *stem, DType dt, int64_t numel, KSpace space) {
  if (k->n_locals == k->cap_locals) {
    int cap = k->cap_locals ? 2 * k->cap_locals : 4;
    k->locals = arena_realloc(&k->ctx->arena, k->locals, sizeof(KBuf *) * (size_t)k->cap_locals,
                              sizeof(KBuf *) * (size_t)cap);
    k->cap_locals = cap;
  }
  KBuf *b = ARENA_NEW(&k->ctx->arena, KBuf);
  b->name = arena_printf(&k->ctx->arena, "%s%d", stem, k->n_vars++);
  b->dtype = dt;
  b->space = space;
  b->numel = numel;
  k->locals[k->n_locals++] = b;
  note_size(k, numel);
  return b;
}

KBuf *cg_klocal(Kernel *k, const char *stem, DType dt, int64_t numel, KSpace space) {
  KBuf *b = add_local(k, stem, dt, numel, space);
  if (space == KSP_SHARED) k->shared_bytes += (uint32_t)(numel * ir_dtype_size(dt));
  return b;
}

KBuf *cg_kdynshared(Kernel *k, const char *stem, DType dt, int64_t numel, uint32_t offset) {
  if (offset % 16) dl_internal(k->ctx, "dynamic shared buffer %s at byte %u", stem, offset);
  KBuf *b = add_local(k, stem, dt, numel, KSP_SHARED);
  b->dynamic = true;
  b->offset = offset;
  uint64_t end = offset + (uint64_t)numel * (uint64_t)ir_dtype_size(dt);
  if (end > k->dynamic_shared_bytes) k->dynamic_shared_bytes = (uint32_t)end;
  return b;
}

KBuf *cg_kfrag(Kernel *k, const char *stem, int64_t numel) {
  return add_local(k, stem, TY_I32, numel, KSP_FRAGMENT);
}

KVar *cg_kvar(Kernel *k, const char *stem, DType dt) {
  KVar *v = ARENA_NEW(&k->ctx->arena, KVar);
  v->name = arena_printf(&k->ctx->arena, "%s%d", stem, k->n_vars++);
  v->dtype = dt;
  return v;
}

/* Read-only buffers, then written ones, then scalars: the order a reader
 * expects (inputs, outputs, sizes). */
static int param_rank(const KParam *p) {
  if (p->var) return 2;
  return p->buf->written ? 1 : 0;
}

void cg_kernel_finish(Kernel *k) {
  if (k->finished) return;
  k->finished = true;
  /* Twice the size, so that i + stride in a grid-stride loop stays in range. */
  k->index = k->largest >= ((int64_t)1 << 30) ? TY_I64 : TY_I32;
  KParam *sorted = ARENA_ARRAY(&k->ctx->arena, KParam, k->n_params > 0 ? k->n_params : 1);
  int m = 0;
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < k->n_params; i++)
      if (param_rank(&k->params[i]) == r) sorted[m++] = k->params[i];
  k->params = sorted;
  k->cap_params = k->n_params;
  for (int i = 0; i < k->n_params; i++) {
    KParam *p = &k->params[i];
    if (p->var && p->var->dtype == KT_INDEX)
      p->arg.kind = k->index == TY_I64 ? RT_ARG_I64 : RT_ARG_I32;
  }
}

/* An H200 (the largest GPU the project targets) has 132 SMs of 2048
 * resident threads: a wave is 132 * 2048 / threads_per_block blocks.
 * Four waves keep every SM busy to the end of a grid-stride loop while
 * each thread still walks several elements, which amortizes its index
 * arithmetic; more blocks only add scheduling. */
enum { GRID_SMS = 132, SM_THREADS = 2048, GRID_WAVES = 4 };
/* What a kernel may declare statically: its __shared__ arrays together. */
enum { STATIC_SHARED = 48 * 1024 };

int64_t cg_gpu_threads(void) { return (int64_t)GRID_SMS * SM_THREADS; }

int64_t cg_grid_cap(int64_t threads_per_block) {
  if (threads_per_block < 1) threads_per_block = 1;
  int64_t per_sm = SM_THREADS / threads_per_block;
  return (int64_t)GRID_SMS * (per_sm < 1 ? 1 : per_sm) * GRID_WAVES;
}

void cg_kernel_grid_1d(Kernel *k, int64_t total) {
  int64_t blocks = (total + 255) / 256, cap = cg_grid_cap(256);
  if (blocks < 1) blocks = 1;
  if (blocks > cap) blocks = cap;
  k->block[0] = total < 256 ? (uint32_t)(total < 1 ? 1 : (total + 31) / 32 * 32) : 256;
  k->grid[0] = (uint32_t)blocks;
}

/* ---- expressions ---- */

KExpr *cg_kint(Kernel *k, int64_t v) {
  KExpr *e = new_expr(k, KE_INT, KT_INDEX);
  e->i = v;
  note_size(k, v);
  return e;
}

/* As eval.c stores a double into an integer dtype: truncated toward
 * zero, saturated to the dtype, NaN -> 0; u8 wraps as onnxruntime's cast
 * (through int32, modulo 256). */
static int64_t saturate(double v, DType dt) {
  if (dt == TY_U8) return fabs(v) < 2147483648.0 ? (int64_t)((uint64_t)(int64_t)trunc(v) & 0xffu) : 0;
  double lo = dt == TY_I8 ? -128.0 : dt == TY_I32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = dt == TY_I8 ? 127.0 : dt == TY_I32 ? 2147483647.0 : 9223372036854775807.0;
  if (isnan(v)) return 0;
  v = trunc(v);
  if (v <= lo) return dt == TY_I8 ? INT8_MIN : dt == TY_I32 ? INT32_MIN : INT64_MIN;
  if (v >= hi) return dt == TY_I8 ? INT8_MAX : dt == TY_I32 ? INT32_MAX : INT64_MAX;
  return (int64_t)v;
}

KExpr *cg_kimm(Kernel *k, double v, DType dt) {
  if (!ir_dtype_is_float(dt)) {
    KExpr *e = new_expr(k, KE_INT, dt);
    e->i = dt == TY_BOOL ? v != 0 : saturate(v, dt); /* a bool is 1 for any nonzero, NaN too */
    return e;
  }
  KExpr *e = new_expr(k, KE_FLOAT, dt);
  e->f = v;
  return e;
}

KExpr *cg_kv(Kernel *k, KVar *v) {
  KExpr *e = new_expr(k, KE_VAR, v->dtype);
  e->var = v;
  return e;
}

static bool is_int_imm(const KExpr *e, int64_t v) { return e->kind == KE_INT && e->i == v; }

KExpr *cg_kidx(Kernel *k, KIdxOp op, KExpr *a, KExpr *b) {
  if (a->kind == KE_INT && b->kind == KE_INT) {
    int64_t x = a->i, y = b->i;
    switch (op) {
      case KI_ADD: return cg_kint(k, x + y);
      case KI_SUB: return cg_kint(k, x - y);
      case KI_MUL: return cg_kint(k, x * y);
      case KI_DIV:
        if (y) return cg_kint(k, x / y);
        break;
      case KI_MOD:
        if (y) return cg_kint(k, x % y);
        break;
      case KI_MIN: return cg_kint(k, x < y ? x : y);
      case KI_MAX: return cg_kint(k, x > y ? x : y);
      case KI_XOR: return cg_kint(k, x ^ y);
    }
  }
  switch (op) {
    case KI_ADD:
      if (is_int_imm(a, 0)) return b;
      if (is_int_imm(b, 0)) return a;
      break;
    case KI_SUB:
      if (is_int_imm(b, 0)) return a;
      break;
    case KI_MUL:
      if (is_int_imm(a, 0) || is_int_imm(b, 0)) return cg_kint(k, 0);
      if (is_int_imm(a, 1)) return b;
      if (is_int_imm(b, 1)) return a;
      break;
    case KI_DIV:
      if (is_int_imm(b, 1)) return a;
      break;
    case KI_MOD:
      if (is_int_imm(b, 1)) return cg_kint(k, 0);
      break;
    case KI_XOR:
      if (is_int_imm(b, 0)) return a;
      break;
    case KI_MIN:
    case KI_MAX: break;
  }
  KExpr *e = new_expr(k, KE_IDX, a->dtype == KT_INDEX ? b->dtype : a->dtype);
  e->sub = op;
  e->a[0] = a;
  e->a[1] = b;
  return e;
}

KExpr *cg_kadd(Kernel *k, KExpr *a, KExpr *b) { return cg_kidx(k, KI_ADD, a, b); }
KExpr *cg_kmul(Kernel *k, KExpr *a, KExpr *b) { return cg_kidx(k, KI_MUL, a, b); }

KExpr *cg_kcmp(Kernel *k, KCmpOp op, KExpr *a, KExpr *b) {
  KExpr *e = new_expr(k, KE_CMP, TY_I32);
  e->sub = op;
  e->a[0] = a;
  e->a[1] = b;
  return e;
}

KExpr *cg_kand(Kernel *k, KExpr *a, KExpr *b) {
  if (!a) return b;
  if (!b) return a;
  KExpr *e = new_expr(k, KE_AND, TY_I32);
  e->a[0] = a;
  e->a[1] = b;
  return e;
}

KExpr *cg_kor(Kernel *k, KExpr *a, KExpr *b) {
  if (!a) return b;
  if (!b) return a;
  KExpr *e = new_expr(k, KE_OR, TY_I32);
  e->a[0] = a;
  e->a[1] = b;
  return e;
}

KExpr *cg_knot(Kernel *k, KExpr *a) {
  KExpr *e = new_expr(k, KE_NOT, TY_I32);
  e->a[0] = a;
  return e;
}

KExpr *cg_ksel(Kernel *k, KExpr *c, KExpr *a, KExpr *b) {
  KExpr *e = new_expr(k, KE_SELECT, a->dtype);
  e->a[0] = c;
  e->a[1] = a;
  e->a[2] = b;
  return e;
}

KExpr *cg_kload(Kernel *k, KBuf *b, KExpr *index) {
  KExpr *e = new_expr(k, KE_LOAD, b->dtype);
  b->read = true;
  e->buf = b;
  e->a[0] = index;
  return e;
}

KExpr *cg_kop1(Kernel *k, OpKind op, KExpr *a) {
  KExpr *e = new_expr(k, KE_OP, a->dtype);
  e->op = op;
  e->a[0] = a;
  return e;
}

KExpr *cg_kexp2(Kernel *k, KExpr *a) {
  KExpr *e = cg_kop1(k, OP_EXP, a);
  e->flag = true;
  return e;
}

KExpr *cg_kfmax(Kernel *k, KExpr *a, KExpr *b) {
  if (a->dtype != TY_F32 || b->dtype != TY_F32) dl_internal(k->ctx, "cg_kfmax of %s", ir_dtype_name(a->dtype));
  KExpr *e = cg_kop2(k, OP_MAXIMUM, a, b);
  e->flag = true;
  return e;
}

void cg_fp_round_attrs(KExpr *r, const Node *n) {
  r->i = ir_narrow_index(ir_narrow_find(ir_attr_str(n, "format")));
  r->flag = ir_attr_int(n, "saturate") != 0;
}

KExpr *cg_kop2(Kernel *k, OpKind op, KExpr *a, KExpr *b) {
  KExpr *e = new_expr(k, KE_OP, a->dtype);
  e->op = op;
  e->a[0] = a;
  e->a[1] = b;
  return e;
}

KExpr *cg_klogic(Kernel *k, const Node *n, KExpr *const *in) {
  if (!ir_op_is_logic(n->op)) dl_internal(k->ctx, "cg_klogic on %s", ir_ops[n->op].name);
  if (n->op == OP_WHERE) return cg_ksel(k, in[0], in[1], in[2]);
  KExpr *e = new_expr(k, KE_OP, TY_BOOL);
  e->op = n->op;
  for (int i = 0; i < n->n_in && i < 2; i++) e->a[i] = in[i];
  return e;
}

int64_t cg_zero_point(const Node *n) {
  const Attr *z = ir_attr(n, "zero_point");
  return z ? z->i : 0;
}

KExpr *cg_kquant(Kernel *k, const Node *n, KExpr *x, KExpr *scale) {
  /* eval.c reads the attribute as an f32: that float, printed exactly. */
  if (!scale) scale = cg_kimm(k, (double)(float)ir_attr_float(n, "scale"), TY_F32);
  if ((n->op != OP_QUANTIZE && n->op != OP_DEQUANTIZE) || scale->dtype != TY_F32)
    dl_internal(k->ctx, "cg_kquant: %s with a %s scale", ir_ops[n->op].name, ir_dtype_name(scale->dtype));
  KExpr *e = new_expr(k, KE_OP, n->out[0].type.dtype);
  e->op = n->op;
  e->a[0] = x;
  e->a[1] = scale;
  e->i = cg_zero_point(n);
  if (n->op == OP_QUANTIZE) {
    int lo, hi;
    ir_quant_range(n, &lo, &hi);
    e->f = lo, e->f2 = hi;
  }
  return e;
}

KExpr *cg_kcast(Kernel *k, KExpr *a, DType to) {
  if (a->dtype == to) return a;
  KExpr *e = new_expr(k, KE_CAST, to);
  e->a[0] = a;
  return e;
}

KExpr *cg_kpack4(Kernel *k, KBuf *b, KExpr *index) {
  if (b->dtype != TY_I8) dl_internal(k->ctx, "cg_kpack4 on a %s buffer", ir_dtype_name(b->dtype));
  KExpr *e = new_expr(k, KE_PACK4, TY_I32);
  b->read = true;
  e->buf = b;
  e->a[0] = index;
  return e;
}

KExpr *cg_kdp4a(Kernel *k, KExpr *a, KExpr *b, KExpr *c) {
  KExpr *e = new_expr(k, KE_DP4A, TY_I32);
  e->a[0] = a;
  e->a[1] = b;
  e->a[2] = c;
  return e;
}

KExpr *cg_kshfl_xor(Kernel *k, KExpr *a, int lane_xor, int width) {
  if ((a->dtype != TY_F32 && a->dtype != TY_I32) || width < 2 || width > 32 || (width & (width - 1)) ||
      lane_xor < 1 || lane_xor >= width)
    dl_internal(k->ctx, "cg_kshfl_xor of a %s by %d within %d lanes", ir_dtype_name(a->dtype), lane_xor, width);
  KExpr *e = new_expr(k, KE_SHFL_XOR, a->dtype);
  e->a[0] = a;
  e->i = lane_xor;
  e->sub = width;
  k->uses_barriers = true; /* the emu runs warp shuffles as it runs barriers: on fibers */
  return e;
}

/* ---- statements ---- */

static KStmt *append(Kernel *k, KBlock *in, KStmtKind kind) {
  KStmt *s = ARENA_NEW(&k->ctx->arena, KStmt);
  s->kind = kind;
  if (in->last)
    in->last->next = s;
  else
    in->first = s;
  in->last = s;
  return s;
}

KStmt *cg_kloop(Kernel *k, KBlock *in, KVar *var, KExpr *extent, KMap map) {
  KStmt *s = append(k, in, KS_LOOP);
  s->var = var;
  s->extent = extent;
  s->map = map;
  return s;
}

KStmt *cg_kreduce(Kernel *k, KBlock *in, KVar *acc, KExpr *init, OpKind combine, KVar *rvar,
                  KExpr *extent) {
  KStmt *s = append(k, in, KS_REDUCE);
  s->var = acc;
  s->init = init;
  s->combine = combine;
  s->rvar = rvar;
  s->extent = extent;
  s->map = KM_SERIAL;
  return s;
}

KVar *cg_klet(Kernel *k, KBlock *in, const char *stem, DType dt, KExpr *value) {
  KStmt *s = append(k, in, KS_LET);
  s->var = cg_kvar(k, stem, dt);
  s->value = value;
  return s->var;
}

void cg_kset(Kernel *k, KBlock *in, KVar *var, KExpr *value) {
  KStmt *s = append(k, in, KS_SET);
  s->var = var;
  s->value = value;
}

void cg_kstore(Kernel *k, KBlock *in, KBuf *b, KExpr *index, KExpr *value) {
  KStmt *s = append(k, in, KS_STORE);
  b->written = true;
  s->buf = b;
  s->index = index;
  s->value = value;
}

KStmt *cg_kif(Kernel *k, KBlock *in, KExpr *cond) {
  KStmt *s = append(k, in, KS_IF);
  s->cond = cond;
  return s;
}

KBlock *cg_ktiles(Kernel *k, const int64_t n[3], const char *const stem[3], KVar *at[3]) {
  int64_t total = n[0] * n[1] * n[2];
  KVar *tile = cg_kvar(k, "tile", KT_INDEX);
  KBlock *body = &cg_kloop(k, &k->body, tile, cg_kint(k, total), KM_GRID_X)->body;
  int64_t inner = 1;
  for (int d = 0; d < 3; d++) {
    KExpr *c = cg_kidx(k, KI_DIV, cg_kv(k, tile), cg_kint(k, inner));
    if (d < 2) c = cg_kidx(k, KI_MOD, c, cg_kint(k, n[d]));
    at[d] = cg_klet(k, body, stem[d], KT_INDEX, n[d] == 1 ? cg_kint(k, 0) : c);
    inner *= n[d];
  }
  k->grid[0] = (uint32_t)(total < INT32_MAX ? total : INT32_MAX);
  k->grid[1] = k->grid[2] = 1;
  k->tiled = true;
  return body;
}

void cg_kbarrier(Kernel *k, KBlock *in) {
  append(k, in, KS_BARRIER);
  k->uses_barriers = true;
}

void cg_kgrid_sync(Kernel *k, KBlock *in, KBuf *bar) {
  append(k, in, KS_GRID_SYNC)->buf = bar;
  bar->read = bar->written = true;
  k->uses_barriers = k->cooperative = true;
}

KVar *cg_klast_arrival(Kernel *k, KBlock *in, KBuf *counter, KExpr *index, int64_t count) {
  if (counter->dtype != TY_I32 || count < 1 || count > INT32_MAX)
    dl_internal(k->ctx, "cg_klast_arrival on %s counting %lld", ir_dtype_name(counter->dtype), (long long)count);
  KStmt *s = append(k, in, KS_LAST_ARRIVAL);
  s->var = cg_kvar(k, "last", TY_I32);
  s->buf = counter;
  s->index = index;
  s->count = (int)count;
  s->src = cg_klocal(k, "verdict", TY_I32, 1, KSP_SHARED);
  counter->read = counter->written = true;
  k->uses_barriers = k->counts_arrivals = true;
  return s->var;
}

void cg_kchunk(Kernel *k, KBlock *in, KBuf *b, KExpr *index, KExpr *const *values, int count) {
  int n = count, bytes = count * ir_dtype_size(b->dtype);
  if (bytes != 8 && bytes != 16) dl_internal(k->ctx, "a chunk store of %d bytes", bytes);
  KStmt *s = append(k, in, KS_CHUNK);
  s->count = count;
  b->written = true;
  s->buf = b;
  s->index = index;
  s->chunk = ARENA_ARRAY(&k->ctx->arena, KExpr *, n);
  memcpy(s->chunk, values, sizeof(KExpr *) * (size_t)n);
}

KVar *cg_kvload(Kernel *k, KBlock *in, const char *stem, KBuf *b, KExpr *index, int n_lanes) {
  int bytes = n_lanes * ir_dtype_size(b->dtype);
  if (n_lanes < 2 || bytes > 16 || 16 % bytes) dl_internal(k->ctx, "a vector load of %d bytes", bytes);
  KStmt *s = append(k, in, KS_VLOAD);
  s->var = cg_kvar(k, stem, b->dtype);
  s->buf = b;
  s->index = index;
  s->n_lanes = n_lanes;
  b->read = true;
  return s->var;
}

KExpr *cg_klane(Kernel *k, KVar *vec, int n_lanes, int lane) {
  KExpr *e = new_expr(k, KE_LANE, vec->dtype);
  e->var = vec;
  e->i = lane;
  e->sub = n_lanes;
  return e;
}

/* ---- tensor-core statements ---- */

static KStmt *append_tc(Kernel *k, KBlock *in, KStmtKind kind, bool collective) {
  k->uses_tc = true;
  /* emu: a warp-collective call needs its lanes as fibers that meet */
  if (collective) k->uses_barriers = true;
  return append(k, in, kind);
}

static void expect_space(Kernel *k, const KBuf *b, KSpace space, const char *what) {
  if (b->space != space) dl_internal(k->ctx, "%s: %s is in the wrong memory space", what, b->name);
}

void cg_kmma(Kernel *k, KBlock *in, KTcKind tc, KBuf *acc, KExpr *acc_at, KBuf *a, KExpr *a_at, KBuf *b,
             KExpr *b_at) {
  DType want = tc == KTC_S8 ? TY_I32 : TY_F32;
  if (acc->space != KSP_REGISTER || acc->dtype != want)
    dl_internal(k->ctx, "mma: accumulator %s is not a %s register array", acc->name, ir_dtype_name(want));
  expect_space(k, a, KSP_FRAGMENT, "mma");
  expect_space(k, b, KSP_FRAGMENT, "mma");
  KStmt *s = append_tc(k, in, KS_MMA, true);
  acc->read = acc->written = a->read = b->read = true;
  s->tc = tc;
  s->buf = acc, s->index = acc_at;
  s->src = a, s->src_at = a_at;
  s->src2 = b, s->src2_at = b_at;
}

void cg_kldmatrix(Kernel *k, KBlock *in, KBuf *frag, KExpr *frag_at, int count, bool trans, KBuf *smem,
                  KExpr *row_at) {
  expect_space(k, frag, KSP_FRAGMENT, "ldmatrix");
  expect_space(k, smem, KSP_SHARED, "ldmatrix");
  if (count != 1 && count != 2 && count != 4) dl_internal(k->ctx, "ldmatrix of %d matrices", count);
  KStmt *s = append_tc(k, in, KS_LDMATRIX, true);
  frag->written = smem->read = true;
  s->buf = frag, s->index = frag_at;
  s->src = smem, s->src_at = row_at;
  s->count = count;
  s->trans = trans;
}

void cg_kcp_async(Kernel *k, KBlock *in, int bytes, KBuf *smem, KExpr *smem_at, KBuf *gmem, KExpr *gmem_at,
                  KExpr *src_bytes) {
  expect_space(k, smem, KSP_SHARED, "cp.async");
  expect_space(k, gmem, KSP_GLOBAL, "cp.async");
  if (bytes != 4 && bytes != 8 && bytes != 16) dl_internal(k->ctx, "cp.async of %d bytes", bytes);
  KStmt *s = append_tc(k, in, KS_CP_ASYNC, false);
  smem->written = gmem->read = true;
  s->count = bytes;
  s->buf = smem, s->index = smem_at;
  s->src = gmem, s->src_at = gmem_at;
  s->value = src_bytes;
}

void cg_kcp_commit(Kernel *k, KBlock *in) { append_tc(k, in, KS_CP_COMMIT, false); }

void cg_kcp_wait(Kernel *k, KBlock *in, int pending) { append_tc(k, in, KS_CP_WAIT, false)->count = pending; }

void cg_ktf32(Kernel *k, KBlock *in, KBuf *frag, KExpr *at) {
  expect_space(k, frag, KSP_FRAGMENT, "tf32");
  KStmt *s = append_tc(k, in, KS_TF32, false);
  frag->read = frag->written = true;
  s->buf = frag, s->index = at;
}

void cg_ktf32_each(Kernel *k, KBlock *in, KBuf *frag, int64_t n) {
  KVar *r = cg_kvar(k, "r", KT_INDEX);
  cg_ktf32(k, &cg_kloop(k, in, r, cg_kint(k, n), KM_UNROLL)->body, frag, cg_kv(k, r));
}

void cg_kpack(Kernel *k, KBlock *in, KTcKind tc, KBuf *frag, KExpr *at, KExpr *lo, KExpr *hi) {
  expect_space(k, frag, KSP_FRAGMENT, "pack");
  bool one = tc == KTC_TF32; /* a tf32 operand fills its register alone */
  if ((tc != KTC_F16 && tc != KTC_BF16 && !one) || lo->dtype != TY_F32 || (one ? hi != NULL : hi->dtype != TY_F32))
    dl_internal(k->ctx, "pack of %s and %s to kind %d", ir_dtype_name(lo->dtype), hi ? ir_dtype_name(hi->dtype) : "none",
                (int)tc);
  KStmt *s = append_tc(k, in, KS_PACK, false);
  frag->written = true;
  s->tc = tc;
  s->buf = frag, s->index = at;
  s->chunk = ARENA_ARRAY(&k->ctx->arena, KExpr *, 2);
  s->chunk[0] = lo, s->chunk[1] = hi;
  s->count = one ? 1 : 2;
}

KStmt *cg_kwg_if(Kernel *k, KBlock *in) {
  k->uses_wgmma = true;
  return append(k, in, KS_WG_IF);
}

void cg_kwg_mma(Kernel *k, KBlock *in, KTcKind tc, int n, KBuf *acc, KExpr *acc_at, KBuf *a, KExpr *a_at, KBuf *b,
                KExpr *b_at, KExpr *scale_d) {
  DType want = tc == KTC_S8 ? TY_I32 : TY_F32;
  if (acc->space != KSP_REGISTER || acc->dtype != want)
    dl_internal(k->ctx, "wgmma: accumulator %s is not a %s register array", acc->name, ir_dtype_name(want));
  expect_space(k, a, KSP_SHARED, "wgmma");
  expect_space(k, b, KSP_SHARED, "wgmma");
  if (tc == KTC_TF32 || n < 16 || n > CG_WGMMA_MAX_N || (n & (n - 1)))
    dl_internal(k->ctx, "wgmma of kind %d, n %d", (int)tc, n);
  KStmt *s = append_tc(k, in, KS_WG_MMA, true);
  acc->read = acc->written = a->read = b->read = true;
  s->tc = tc, s->count = n;
  s->buf = acc, s->index = acc_at;
  s->src = a, s->src_at = a_at;
  s->src2 = b, s->src2_at = b_at;
  s->value = scale_d;
}

void cg_kwg_fence(Kernel *k, KBlock *in) { append_tc(k, in, KS_WG_FENCE, true); }

void cg_kwg_commit(Kernel *k, KBlock *in) { append_tc(k, in, KS_WG_COMMIT, true); }

void cg_kwg_wait(Kernel *k, KBlock *in, int pending) { append_tc(k, in, KS_WG_WAIT, true)->count = pending; }

void cg_kwg_acc_each(Kernel *k, KBlock *in, KBuf *acc, int64_t n) {
  KVar *r = cg_kvar(k, "r", KT_INDEX);
  KStmt *s = append_tc(k, &cg_kloop(k, in, r, cg_kint(k, n), KM_UNROLL)->body, KS_WG_ACC, false);
  acc->read = acc->written = true;
  s->buf = acc, s->index = cg_kv(k, r);
}

void cg_kproxy_fence(Kernel *k, KBlock *in) { append_tc(k, in, KS_PROXY_FENCE, false); }

void cg_kallreduce(Kernel *k, KBlock *in, KVar *var, OpKind combine, KMap across) {
  uint32_t x = k->block[0], y = k->block[1];
  bool ok = (var->dtype == TY_F32 || var->dtype == TY_I32 || var->dtype == TY_I64 || var->dtype == TY_F64 ||
             var->dtype == TY_U64) &&
            (combine == OP_ADD || combine == OP_MUL || combine == OP_MAXIMUM || combine == OP_MINIMUM) &&
            (across == KM_BLOCK_X ? x >= 1 && x <= 1024 && (x & (x - 1)) == 0 && (x <= 32 || x % 32 == 0)
                                  : across == KM_BLOCK_Y) &&
            x * y <= 1024 && x * y % 32 == 0;
  if (!ok)
    dl_internal(k->ctx, "cg_kallreduce of %s by %s across %d in a %ux%u block", ir_dtype_name(var->dtype),
                ir_ops[combine].name, (int)across, x, y);
  KStmt *s = append(k, in, KS_ALLREDUCE);
  s->var = var;
  s->combine = combine;
  s->map = across;
  /* One slot per warp (x) or per thread (y) of the block. */
  int64_t slots = across == KM_BLOCK_X ? (x > 32 ? x / 32 * y : 0) : (y > 1 ? (int64_t)x * y : 0);
  if (slots) s->buf = cg_klocal(k, "red", var->dtype, slots, KSP_SHARED);
  k->uses_barriers = true; /* the emu runs warp shuffles as it runs barriers: on fibers */
}

/* ---- horizontal fusion: independent kernels in one launch ---- */

static bool has_grid_sync(const KBlock *blk) {
  for (const KStmt *s = blk->first; s; s = s->next)
    if (s->kind == KS_GRID_SYNC || has_grid_sync(&s->body) || has_grid_sync(&s->orelse)) return true;
  return false;
}

static uint32_t threads_of(const Kernel *k) { return k->block[0] * k->block[1] * k->block[2]; }

/* A part with fewer threads than the launch leaves the rest idle, so it
 * must not wait for them at a barrier nor split a warp's shuffles. */
static bool fits_in(const Kernel *p, uint32_t threads) {
  return threads_of(p) == threads || (!p->uses_barriers && threads_of(p) % 32 == 0);
}

/* Whether one of parts[0..n)'s names is name. */
static bool name_taken(Kernel *const *parts, int n, const char *name) {
  for (int i = 0; i < n; i++) {
    const Kernel *p = parts[i];
    for (int j = 0; j < p->n_params; j++) {
      const KParam *q = &p->params[j];
      if ((q->var && strcmp(q->var->name, name) == 0) || (q->buf && strcmp(q->buf->name, name) == 0)) return true;
    }
    for (int j = 0; j < p->n_locals; j++)
      if (strcmp(p->locals[j]->name, name) == 0) return true;
  }
  return false;
}

/* Part i's names apart from parts[0..i)'s: each prefixed "pI_", and
 * more underscores while the first part (which keeps its own names) has
 * one already. */
static void rename_part(Kernel *p, int i, Kernel *const *parts) {
  Arena *a = &p->ctx->arena;
  const char *prefix = arena_printf(a, "p%d_", i);
  for (bool clash = true; clash;) {
    clash = false;
    for (int j = 0; j < p->n_params && !clash; j++) {
      const KParam *q = &p->params[j];
      clash = (q->var && name_taken(parts, i, arena_printf(a, "%s%s", prefix, q->var->name))) ||
              (q->buf && name_taken(parts, i, arena_printf(a, "%s%s", prefix, q->buf->name)));
    }
    for (int j = 0; j < p->n_locals && !clash; j++)
      clash = name_taken(parts, i, arena_printf(a, "%s%s", prefix, p->locals[j]->name));
    if (clash) prefix = arena_printf(a, "%s_", prefix);
  }
  for (int j = 0; j < p->n_params; j++) {
    KParam *q = &p->params[j];
    if (q->var) q->var->name = arena_printf(a, "%s%s", prefix, q->var->name);
    if (q->buf) q->buf->name = arena_printf(a, "%s%s", prefix, q->buf->name);
  }
  for (int j = 0; j < p->n_locals; j++) p->locals[j]->name = arena_printf(a, "%s%s", prefix, p->locals[j]->name);
}

static DType index_of(const Kernel *k) {
  return k->finished ? k->index : k->largest >= ((int64_t)1 << 30) ? TY_I64 : TY_I32;
}

bool cg_kernel_can_merge(const Kernel *a, const Kernel *b) {
  if (!a->finished || b->n_parts) return false;
  const Kernel *const *pa = a->n_parts ? (const Kernel *const *)a->parts : &a;
  int na = a->n_parts ? a->n_parts : 1;
  uint32_t threads = threads_of(a), tb = threads_of(b);
  for (int i = 0; i < na; i++)
    if (pa[i]->grid[1] != 1 || pa[i]->grid[2] != 1) return false;
  if (b->grid[1] != 1 || b->grid[2] != 1 || b->cooperative || a->cooperative || has_grid_sync(&b->body) ||
      index_of(b) != a->index || (uint64_t)a->grid[0] + b->grid[0] > INT32_MAX)
    return false;
  if ((uint64_t)a->shared_bytes + b->shared_bytes > STATIC_SHARED) return false;
  uint32_t most = tb > threads ? tb : threads;
  for (int i = 0; i < na; i++)
    if (!fits_in(pa[i], most)) return false;
  return fits_in(b, most);
}

/* A joined kernel's name: its parts' ops in order, or the first of a
 * long chain and "__more" (a detector's 90 classes fused would give
 * names of kilobytes, past what the runtime and tools take). */
#define JOINED_NAME_MAX 96
static const char *joined_hint(Ctx *c, const char *a, const char *b) {
  size_t la = strlen(a);
  if (la + strlen(b) + 2 <= JOINED_NAME_MAX) return arena_printf(&c->arena, "%s__%s", a, b);
  if (la >= 6 && strcmp(a + la - 6, "__more") == 0) return a;
  return arena_printf(&c->arena, "%.*s__more", (int)(la < JOINED_NAME_MAX - 8 ? la : JOINED_NAME_MAX - 8), a);
}

/* A new kernel of a's parts and then b, named and labelled after both
 * (b renamed apart): the merge's and the chain's common start. */
static Kernel *join_parts(Kernel *a, Kernel *b) {
  Kernel *const *pa = a->n_parts ? a->parts : &a;
  int na = a->n_parts ? a->n_parts : 1;
  Ctx *c = a->ctx;
  Kernel *m = cg_kernel_new(c, a->node, joined_hint(c, a->hint, b->hint), a->what);
  m->parts = ARENA_ARRAY(&c->arena, Kernel *, na + 1);
  for (int i = 0; i < na; i++) m->parts[i] = pa[i];
  m->parts[na] = b;
  m->n_parts = na + 1;
  rename_part(b, na, m->parts);
  for (int i = 0; i < m->n_parts; i++) {
    Kernel *p = m->parts[i];
    for (int j = 0; j < p->n_params; j++) *add_param(m) = p->params[j];
    m->n_locals += p->n_locals;
    m->uses_barriers |= p->uses_barriers;
    m->uses_tc |= p->uses_tc;
    m->counts_arrivals |= p->counts_arrivals;
    if (p->dynamic_shared_bytes > m->dynamic_shared_bytes) m->dynamic_shared_bytes = p->dynamic_shared_bytes;
    if (p->largest > m->largest) m->largest = p->largest;
  }
  m->locals = ARENA_ARRAY(&c->arena, KBuf *, m->n_locals + 1);
  m->cap_locals = m->n_locals;
  for (int i = 0, n = 0; i < m->n_parts; i++)
    for (int j = 0; j < m->parts[i]->n_locals; j++) m->locals[n++] = m->parts[i]->locals[j];
  m->shared_bytes = a->shared_bytes + b->shared_bytes;
  m->index = a->index;
  return m;
}

Kernel *cg_kernel_merge(Kernel *a, Kernel *b) {
  if (!b->finished || !cg_kernel_can_merge(a, b)) return NULL;
  uint32_t threads = threads_of(a), tb = threads_of(b);
  const uint32_t *block = tb > threads ? b->block : a->block;
  Kernel *m = join_parts(a, b);
  m->grid[0] = a->grid[0] + b->grid[0];
  memcpy(m->block, block, sizeof m->block);
  m->finished = true;
  return m;
}

/* ---- vertical fusion: dependent kernels in one launch ---- */

/* Static shared memory a chain may hold: as much as lets the threads of
 * a full SM (SM_THREADS) stay resident on the shared memory of the
 * smallest SM dlcc targets (sm_80's 164 KiB, less the driver's
 * reserve), so that its memory-bound phases keep their occupancy; and
 * at most what a kernel may declare statically. */
enum { CHAIN_SM_SHARED = 160 * 1024 };

static uint64_t chain_shared(uint32_t threads) {
  uint64_t per_sm = SM_THREADS / (threads ? threads : 1), cap = CHAIN_SM_SHARED / (per_sm ? per_sm : 1);
  return cap < STATIC_SHARED ? cap : STATIC_SHARED;
}

/* What a phase may be: no tensor cores, dynamic shared memory or grid
 * barrier of its own (a chain's phases share the launch's). */
static bool chainable(const Kernel *p) {
  return !p->uses_tc && !p->cooperative && !p->dynamic_shared_bytes && !p->n_phases &&
         p->grid[1] == 1 && p->grid[2] == 1 && !has_grid_sync(&p->body);
}

bool cg_kernel_can_chain(const Kernel *a, const Kernel *b) {
  /* A GEMM's tiles only start a chain: after a barrier they would make
   * each chain of convolutions a kernel of its own, which NVRTC compiles
   * anew where the convolutions apart share one (ResNet-50's inference:
   * 1.7x the compile time for 30 launches instead of 53). */
  if (!a->finished || b->n_parts || !chainable(b) || b->tiled || index_of(b) != a->index ||
      (a->n_phases ? a->n_phases : 1) >= CG_CHAIN_MAX_PHASES)
    return false;
  const Kernel *const *pa = a->n_parts ? (const Kernel *const *)a->parts : &a;
  int na = a->n_parts ? a->n_parts : 1;
  uint32_t most = threads_of(b);
  for (int i = 0; i < na; i++) {
    if (!chainable(pa[i])) return false;
    if (threads_of(pa[i]) > most) most = threads_of(pa[i]);
  }
  for (int i = 0; i < na; i++)
    if (!fits_in(pa[i], most)) return false;
  return fits_in(b, most) && (uint64_t)a->shared_bytes + b->shared_bytes <= chain_shared(most);
}

uint32_t cg_phase_groups(const Kernel *m, int phase) {
  uint32_t threads = threads_of(m), most = 0;
  for (int i = 0; i < m->n_parts; i++) {
    const Kernel *p = m->parts[i];
    if (m->part_phase[i] != phase) continue;
    if (p->uses_barriers) return 1;
    if (threads_of(p) > most) most = threads_of(p);
  }
  return most && threads % most == 0 ? threads / most : 1;
}

Kernel *cg_kernel_chain(Kernel *a, Kernel *b, RtRef bar) {
  if (!b->finished || !cg_kernel_can_chain(a, b)) return NULL;
  int na = a->n_parts ? a->n_parts : 1, phases = a->n_phases ? a->n_phases : 1;
  Kernel *m = join_parts(a, b);
  Ctx *c = m->ctx;
  m->part_phase = ARENA_ARRAY(&c->arena, int, na + 1);
  for (int i = 0; i < na; i++) m->part_phase[i] = a->part_phase ? a->part_phase[i] : 0;
  m->part_phase[na] = phases;
  m->n_phases = phases + 1;
  uint32_t most = 0;
  for (int i = 0; i < m->n_parts; i++)
    if (threads_of(m->parts[i]) > most) {
      most = threads_of(m->parts[i]);
      memcpy(m->block, m->parts[i]->block, sizeof m->block);
    }
  m->phase_bar = NULL;
  if (a->phase_bar) {
    for (int i = 0; i < a->n_params; i++)
      if (a->params[i].buf == a->phase_bar) {
        *add_param(m) = a->params[i];
        m->phase_bar = a->phase_bar;
      }
  }
  if (!m->phase_bar) {
    KParam *p = add_param(m);
    KBuf *bb = m->phase_bar = ARENA_NEW(&c->arena, KBuf);
    bb->name = "dl_bar";
    bb->dtype = TY_I32;
    bb->space = KSP_GLOBAL;
    bb->numel = CG_CHAIN_BAR_WORDS;
    bb->read = bb->written = true;
    p->buf = bb;
    p->arg.kind = RT_ARG_PTR;
    p->arg.ref = bar;
    p->may_alias = true;
  }
  /* The grid: the most blocks any phase walks at once, at most what the
   * modelled GPU holds of them (the device may hold fewer: RT_COOP_STRIDE). */
  uint64_t grid = 1;
  for (int ph = 0; ph < m->n_phases; ph++) {
    uint64_t blocks = 0;
    for (int i = 0; i < m->n_parts; i++)
      if (m->part_phase[i] == ph) blocks += m->parts[i]->grid[0];
    uint32_t g = cg_phase_groups(m, ph);
    blocks = (blocks + g - 1) / g;
    if (blocks > grid) grid = blocks;
  }
  uint64_t per_sm = SM_THREADS / most, cap = (uint64_t)GRID_SMS * (per_sm < 1 ? 1 : per_sm > 32 ? 32 : per_sm);
  m->grid[0] = (uint32_t)(grid < cap ? grid : cap);
  m->grid[1] = m->grid[2] = 1;
  m->uses_barriers = m->cooperative = m->grid_stride = true;
  m->finished = true;
  return m;
}
