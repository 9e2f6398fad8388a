/* Kernel-IR passes: take a kernel before it is finished, rewrite its loop
 * nest in place.  cg_unroll marks small constant loops (window taps, short
 * reductions, a thread's tile) for full unrolling, which the emitter
 * prints as `#pragma unroll`; cg_vectorize turns a contiguous elementwise
 * map into a loop over 16-byte vectors with a scalar tail, and every
 * loop over the lanes of a vector (KM_LANES) into 16-byte loads and
 * stores, lane-invariant work done once per vector. */
#include <string.h>

#include "kernel.h"

/* ---- unrolling ---- */

static void unroll_block(KBlock *b, int max_trip) {
  for (KStmt *s = b->first; s; s = s->next) {
    if (s->kind == KS_LOOP || s->kind == KS_REDUCE) {
      if (max_trip == 0) {
        if (s->map == KM_UNROLL || s->map == KM_LANES) s->map = KM_SERIAL;
      } else if (s->map == KM_LANES) {
        s->map = KM_UNROLL; /* lanes no vector access took */
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

/* A growable array of pointers in the arena. */
typedef struct Ptrs {
  void **p;
  int n, cap;
} Ptrs;

static void push(Kernel *k, Ptrs *a, void *x) {
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 16;
    a->p = arena_realloc(&k->ctx->arena, a->p, sizeof(void *) * (size_t)a->cap, sizeof(void *) * (size_t)cap);
    a->cap = cap;
  }
  a->p[a->n++] = x;
}

static int find(const Ptrs *a, const void *x) {
  for (int i = 0; i < a->n; i++)
    if (a->p[i] == x) return i;
  return -1;
}

/* One KM_LANES loop being rewritten.  Its body is first turned into
 * symbolic form (the lane still a variable v, index lets inlined and
 * simplified with what v < n allows), then instantiated lane by lane. */
typedef struct Lanes {
  Kernel *k;
  Ptrs let_var, let_val; /* every let of the kernel: what a var stands for */
  KVar *v;
  int n;
  Ptrs inl_var, inl_val;  /* index lets of the body that vary by lane: inlined */
  Ptrs lane_var, copies;  /* other lets that vary: a copy per lane (KVar *[n]) */
  Ptrs set_var;           /* assigned in the body: vary by lane */
  Ptrs written;           /* buffers stored in the body */
  Ptrs vl_buf, vl_at, vl_var; /* vector loads: buf[at .. at + n) */
  Ptrs vl_guard;              /* ... under this lane-free guard (NULL: always) */
  Ptrs once;              /* lane-invariant loads, as lets (KS_LET) of the rewritten body */
  KBlock *pre;            /* where those lets go, in the order they are found */
  int lane;               /* the lane being instantiated; -1: symbolic */
  /* Inside an arm of a select or the right of && / ||: a load there
   * happens only when its guard holds (a pad's read past the edge), so
   * it is neither hoisted nor widened into a vector (which would read
   * the bytes the guard keeps it from). */
  int guarded;
  /* At a lane (and in find_loads): the conjunction of the guards of the
   * arms the walk is in, each in the form that is the same for every
   * lane (invariant_form; NULL: none), or !path_ok where one of them
   * differs between lanes. */
  KExpr *path;
  bool path_ok;
  /* The lanes split_map made (map_lane its lane var): base + v runs over
   * [0, map_n) of the map's n = map_n elements, so a read at base + v of
   * a buffer of map_n or more elements is inside it whatever guards it. */
  KVar *map_lane, *map_base;
  int64_t map_n;
} Lanes;

/* Whether operand j of e is evaluated only under a condition. */
static bool conditional_operand(const KExpr *e, int j) {
  return (e->kind == KE_SELECT && j > 0) || ((e->kind == KE_AND || e->kind == KE_OR) && j == 1);
}

static void collect_lets(Kernel *k, Lanes *L, const KBlock *b) {
  for (const KStmt *s = b->first; s; s = s->next) {
    if (s->kind == KS_LET) push(k, &L->let_var, s->var), push(k, &L->let_val, s->value);
    collect_lets(k, L, &s->body);
    collect_lets(k, L, &s->orelse);
  }
}

/* e is a multiple of m for every value its variables take (lets seen
 * through). */
static bool is_multiple(const Lanes *L, const KExpr *e, int64_t m) {
  switch (e->kind) {
    case KE_INT: return e->i % m == 0;
    case KE_VAR: {
      int j = find(&L->let_var, e->var);
      return j >= 0 && is_multiple(L, L->let_val.p[j], m);
    }
    case KE_IDX:
      switch ((KIdxOp)e->sub) {
        case KI_ADD:
        case KI_SUB:
        case KI_MOD: return is_multiple(L, e->a[0], m) && is_multiple(L, e->a[1], m);
        case KI_MUL: return is_multiple(L, e->a[0], m) || is_multiple(L, e->a[1], m);
        default: return false;
      }
    default: return false;
  }
}

static bool expr_equal(const KExpr *a, const KExpr *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype || a->sub != b->sub || a->op != b->op ||
      a->i != b->i || a->f != b->f || a->f2 != b->f2 || a->flag != b->flag || a->var != b->var ||
      a->buf != b->buf)
    return false;
  for (int j = 0; j < 3; j++)
    if (!expr_equal(a->a[j], b->a[j])) return false;
  return true;
}

/* Whether e (symbolic) depends on the lane: v, a var that varies, a
 * buffer the body writes. */
static bool varies(const Lanes *L, const KExpr *e) {
  if (!e) return false;
  if (e->kind == KE_VAR && (e->var == L->v || find(&L->lane_var, e->var) >= 0 || find(&L->set_var, e->var) >= 0))
    return true;
  if ((e->kind == KE_LOAD || e->kind == KE_PACK4) && find(&L->written, e->buf) >= 0) return true;
  for (int j = 0; j < 3; j++)
    if (varies(L, e->a[j])) return true;
  return false;
}

/* e == *base + v with *base free of v (symbolic form). */
static bool split_lane(Lanes *L, KExpr *e, KExpr **base) {
  if (e->kind == KE_VAR && e->var == L->v) {
    *base = cg_kint(L->k, 0);
    return true;
  }
  if (e->kind != KE_IDX || (e->sub != KI_ADD && e->sub != KI_SUB)) return false;
  KExpr *x;
  if (e->sub == KI_SUB) { /* (x + v) - b: a pad's or a concat's shifted read */
    if (!split_lane(L, e->a[0], &x) || varies(L, e->a[1])) return false;
    *base = cg_kidx(L->k, KI_SUB, x, e->a[1]);
    return true;
  }
  if (split_lane(L, e->a[0], &x) && !varies(L, e->a[1])) {
    *base = cg_kadd(L->k, x, e->a[1]);
    return true;
  }
  if (split_lane(L, e->a[1], &x) && !varies(L, e->a[0])) {
    *base = cg_kadd(L->k, e->a[0], x);
    return true;
  }
  return false;
}

/* The bytes of one word of an n-lane access to b, or 0 when b cannot be
 * read or written that way: a global parameter whose ref is aligned to
 * the word. */
static int word_bytes(const Kernel *k, const KBuf *b, int n) {
  /* f64, i16 and the unsigned types wider than u8: no vector spelling */
  if ((b->space != KSP_GLOBAL && !(b->space == KSP_SHARED && b->dynamic)) || b->dtype == TY_F64 ||
      b->dtype >= TY_I16)
    return 0;
  int bytes = n * ir_dtype_size(b->dtype), word = bytes < 16 ? bytes : 16;
  if (word < 4) return 0;
  /* carved from the dynamic shared memory at a multiple of 16 bytes */
  if (b->space == KSP_SHARED) return word;
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf == b) return k->params[i].arg.ref.offset % (uint64_t)word == 0 ? word : 0;
  return 0;
}

/* At a symbolic index: the vector var that holds buf[index], when that
 * is a lane of an aligned vector access. */
static KVar *vector_at(Lanes *L, KBuf *b, KExpr *index, bool add) {
  KExpr *base;
  if (!split_lane(L, index, &base) || !is_multiple(L, base, L->n) || !word_bytes(L->k, b, L->n)) return NULL;
  /* One read whatever the lane serves a guarded use too; a guarded read
   * serves only uses under the same guard (elsewhere it may be zeros). */
  for (int j = 0; j < L->vl_buf.n; j++)
    if (L->vl_buf.p[j] == b && expr_equal(L->vl_at.p[j], base) &&
        (!L->vl_guard.p[j] || (L->path_ok && expr_equal(L->vl_guard.p[j], L->path))))
      return L->vl_var.p[j];
  if (!add || !L->path_ok) return NULL;
  push(L->k, &L->vl_buf, b);
  push(L->k, &L->vl_at, base);
  push(L->k, &L->vl_guard, L->path);
  KVar *var = cg_kvar(L->k, "v", b->dtype);
  push(L->k, &L->vl_var, var);
  return var;
}

/* c (symbolic) in a form without the lane that has c's value at every
 * lane, or NULL where that is not proved.  Besides what does not vary,
 * a comparison r + v < b (>=; r and b lane-invariant) is r < b at every
 * lane when b - r is a multiple of the lane count n: with D = b - r,
 * r + v < b means v < D, true for every v in [0, n) when D >= n and for
 * none when D <= 0, and a multiple of n is one or the other.  r + v <= b
 * (>) likewise when b + 1 - r is.  A pad's edge or a concat's boundary
 * at a multiple of n along the vectorized dim, or any guard on an outer
 * coordinate (which (b + v) / d simplified to b / d), passes. */
static KExpr *invariant_form(Lanes *L, KExpr *c) {
  Kernel *k = L->k;
  if (!varies(L, c)) return c;
  switch (c->kind) {
    case KE_AND:
    case KE_OR: {
      KExpr *a = invariant_form(L, c->a[0]), *b = a ? invariant_form(L, c->a[1]) : NULL;
      if (!b) return NULL;
      return c->kind == KE_AND ? cg_kand(k, a, b) : cg_kor(k, a, b);
    }
    case KE_NOT: {
      KExpr *a = invariant_form(L, c->a[0]);
      return a ? cg_knot(k, a) : NULL;
    }
    case KE_CMP: {
      static const KCmpOp flipped[] = {[KC_LT] = KC_GT, [KC_LE] = KC_GE, [KC_GT] = KC_LT,
                                       [KC_GE] = KC_LE, [KC_EQ] = KC_EQ, [KC_NE] = KC_NE};
      KCmpOp op = (KCmpOp)c->sub;
      KExpr *a = c->a[0], *b = c->a[1], *r;
      if (varies(L, b)) {
        if (varies(L, a)) return NULL;
        a = c->a[1], b = c->a[0], op = flipped[op];
      }
      if (a->dtype != KT_INDEX || b->dtype != KT_INDEX || op == KC_EQ || op == KC_NE || !split_lane(L, a, &r))
        return NULL;
      KExpr *edge = op == KC_LT || op == KC_GE ? b : cg_kadd(k, b, cg_kint(k, 1));
      if (!is_multiple(L, cg_kidx(k, KI_SUB, edge, r), L->n)) return NULL;
      return cg_kcmp(k, op, r, b);
    }
    default: return NULL;
  }
}

/* Adds to L's path the guard of operand j of e (a conditional one). */
static void enter_operand(Lanes *L, const KExpr *e, int j) {
  if (!L->path_ok) return;
  KExpr *g = invariant_form(L, e->a[0]);
  if (!g) {
    L->path_ok = false;
    return;
  }
  /* a select's second arm and the right of || run where the test fails */
  if ((e->kind == KE_SELECT && j == 2) || e->kind == KE_OR) g = cg_knot(L->k, g);
  L->path = cg_kand(L->k, L->path, g);
}

/* Symbolic (lane -1): v kept, inlined index lets substituted, x / d and
 * x % d simplified where x = b + v, b a multiple of n and d too (then
 * (b + v) / d == b / d and (b + v) % d == b % d + v).  Lane l: v, and
 * the lets that vary, replaced by lane l's; the vector loads by lanes. */
static KExpr *rebuild(Lanes *L, KExpr *e) {
  if (!e) return NULL;
  Kernel *k = L->k;
  switch (e->kind) {
    case KE_INT:
    case KE_FLOAT: return e;
    case KE_VAR: {
      if (e->var == L->v) return L->lane < 0 ? e : cg_kint(k, L->lane);
      if (L->lane < 0) {
        int j = find(&L->inl_var, e->var);
        return j >= 0 ? L->inl_val.p[j] : e;
      }
      int j = find(&L->lane_var, e->var);
      return j >= 0 ? cg_kv(k, ((KVar **)L->copies.p[j])[L->lane]) : e;
    }
    case KE_IDX: {
      KExpr *a = rebuild(L, e->a[0]), *b = rebuild(L, e->a[1]), *base;
      if (L->lane < 0 && (e->sub == KI_DIV || e->sub == KI_MOD) && b->kind == KE_INT && b->i > 0 &&
          b->i % L->n == 0 && split_lane(L, a, &base) && is_multiple(L, base, L->n))
        return e->sub == KI_DIV ? cg_kidx(k, KI_DIV, base, b)
                                : cg_kadd(k, cg_kidx(k, KI_MOD, base, b), cg_kv(k, L->v));
      return cg_kidx(k, (KIdxOp)e->sub, a, b);
    }
    case KE_LOAD:
      if (L->lane < 0 && !L->guarded && find(&L->written, e->buf) < 0) {
        /* A broadcast operand: loaded once for all lanes. */
        KExpr *index = rebuild(L, e->a[0]);
        if (!varies(L, index)) {
          for (int j = 0; j < L->once.n; j++) {
            const KStmt *h = L->once.p[j];
            if (h->value->buf == e->buf && expr_equal(h->value->a[0], index)) return cg_kv(k, h->var);
          }
          KVar *var = cg_klet(k, L->pre, "b", e->dtype, cg_kload(k, e->buf, index));
          push(k, &L->once, L->pre->last);
          return cg_kv(k, var);
        }
      }
      if (L->lane >= 0) {
        KVar *vec = vector_at(L, e->buf, e->a[0], false);
        if (vec) {
          KExpr *l = ARENA_NEW(&k->ctx->arena, KExpr);
          l->kind = KE_LANE;
          l->dtype = e->dtype;
          l->var = vec;
          l->i = L->lane;
          l->sub = L->n;
          return l;
        }
      }
      break;
    default: break;
  }
  KExpr *c = ARENA_NEW(&k->ctx->arena, KExpr);
  *c = *e;
  for (int j = 0; j < 3; j++) {
    bool cond = conditional_operand(e, j);
    KExpr *path = L->path;
    bool path_ok = L->path_ok;
    L->guarded += cond;
    if (cond && L->lane >= 0) enter_operand(L, e, j);
    c->a[j] = rebuild(L, e->a[j]);
    L->guarded -= cond;
    L->path = path, L->path_ok = path_ok;
  }
  return c;
}

/* The vector loads a symbolic expression makes: buffers the body does
 * not write, read at base + v, either wherever the lane or under guards
 * that are the same for every lane (then under their conjunction). */
static void find_loads(Lanes *L, KExpr *e) {
  if (!e) return;
  if (e->kind == KE_LOAD && find(&L->written, e->buf) < 0) {
    KExpr *path = L->path, *base;
    bool path_ok = L->path_ok;
    /* Read whatever the guards where every byte is inside the buffer
     * (dropout's kept elements, where's operands): the lanes use only
     * what their guards let them. */
    if (L->map_base && split_lane(L, e->a[0], &base) && base->kind == KE_VAR && base->var == L->map_base &&
        e->buf->numel >= L->map_n)
      L->path = NULL, L->path_ok = true;
    vector_at(L, e->buf, e->a[0], true);
    L->path = path, L->path_ok = path_ok;
  }
  for (int j = 0; j < 3; j++) {
    KExpr *path = L->path;
    bool path_ok = L->path_ok;
    if (conditional_operand(e, j)) enter_operand(L, e, j);
    find_loads(L, e->a[j]);
    L->path = path, L->path_ok = path_ok;
  }
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

/* A store of the body as a vector store: a global buffer written only
 * there, at base + v. */
static bool vector_store(Lanes *L, const KStmt *s, KExpr *sym_index, const KStmt *body) {
  KExpr *base;
  if (!split_lane(L, sym_index, &base) || !is_multiple(L, base, L->n) || !word_bytes(L->k, s->buf, L->n))
    return false;
  for (const KStmt *t = body; t; t = t->next)
    if (t != s && t->kind == KS_STORE && t->buf == s->buf) return false;
  return true;
}

/* Rewrites one KM_LANES loop in place; returns whether it made a vector
 * access.  A body of anything but lets, sets and stores is unrolled. */
static bool vectorize_lanes(Kernel *k, Lanes *kl, KStmt *loop) {
  loop->map = KM_UNROLL;
  const KStmt *body = loop->body.first;
  for (const KStmt *s = body; s; s = s->next)
    if (s->kind != KS_LET && s->kind != KS_SET && s->kind != KS_STORE) return false;
  KBlock out = {0};
  Lanes L = {.k = k, .let_var = kl->let_var, .let_val = kl->let_val, .v = loop->var,
             .n = (int)loop->extent->i, .pre = &out, .lane = -1, .path_ok = true};
  if (loop->var == kl->map_lane) L.map_lane = kl->map_lane, L.map_base = kl->map_base, L.map_n = kl->map_n;
  for (const KStmt *s = body; s; s = s->next) {
    if (s->kind == KS_SET) push(k, &L.set_var, s->var);
    if (s->kind == KS_STORE) push(k, &L.written, s->buf);
  }
  int n_st = 0;
  for (const KStmt *s = body; s; s = s->next) n_st++;
  KExpr **sym = ARENA_ARRAY(&k->ctx->arena, KExpr *, 2 * n_st + 1), **sym_index = sym + n_st;
  bool *hoist = ARENA_ARRAY(&k->ctx->arena, bool, n_st + 1), *vstore = ARENA_ARRAY(&k->ctx->arena, bool, n_st + 1);
  /* Lets and loads that do not vary by lane go first, in order. */
  int i = 0;
  bool any = false;
  for (const KStmt *s = body; s; s = s->next, i++) {
    sym[i] = rebuild(&L, s->value);
    if (s->kind == KS_STORE) {
      sym_index[i] = rebuild(&L, s->index);
      vstore[i] = vector_store(&L, s, sym_index[i], body);
      any = any || vstore[i];
    } else if (s->kind == KS_LET && varies(&L, sym[i])) {
      if (s->var->dtype == KT_INDEX) {
        push(k, &L.inl_var, s->var), push(k, &L.inl_val, sym[i]);
      } else {
        KVar **copies = ARENA_ARRAY(&k->ctx->arena, KVar *, L.n);
        for (int l = 0; l < L.n; l++) copies[l] = cg_kvar(k, "f", s->var->dtype);
        push(k, &L.lane_var, s->var), push(k, &L.copies, copies);
      }
    } else if (s->kind == KS_LET) {
      hoist[i] = true;
      KStmt *h = new_stmt(k, &out, KS_LET);
      h->var = s->var;
      h->value = sym[i];
    }
  }
  for (i = 0; i < n_st; i++) find_loads(&L, sym[i]);
  if (!any && L.vl_buf.n == 0) return false;
  for (int j = 0; j < L.vl_buf.n; j++) {
    KStmt *vl = new_stmt(k, &out, KS_VLOAD);
    vl->var = L.vl_var.p[j];
    vl->buf = L.vl_buf.p[j];
    vl->index = L.vl_at.p[j];
    vl->cond = L.vl_guard.p[j];
    vl->n_lanes = L.n;
  }
  KExpr ***lanes = ARENA_ARRAY(&k->ctx->arena, KExpr **, n_st + 1);
  for (int l = 0; l < L.n; l++) {
    L.lane = l;
    i = 0;
    for (const KStmt *s = body; s; s = s->next, i++) {
      if (hoist[i] || (s->kind == KS_LET && find(&L.inl_var, s->var) >= 0)) continue;
      KExpr *value = rebuild(&L, sym[i]);
      if (s->kind == KS_LET) {
        KStmt *c = new_stmt(k, &out, KS_LET);
        c->var = ((KVar **)L.copies.p[find(&L.lane_var, s->var)])[l];
        c->value = value;
      } else if (s->kind == KS_SET) {
        cg_kset(k, &out, s->var, value);
      } else if (vstore[i]) {
        if (!lanes[i]) lanes[i] = ARENA_ARRAY(&k->ctx->arena, KExpr *, L.n);
        lanes[i][l] = value;
      } else {
        cg_kstore(k, &out, s->buf, rebuild(&L, sym_index[i]), value);
      }
    }
  }
  L.lane = -1;
  i = 0;
  for (const KStmt *s = body; s; s = s->next, i++) {
    if (!vstore[i]) continue;
    KExpr *base;
    split_lane(&L, sym_index[i], &base);
    KStmt *w = new_stmt(k, &out, KS_VSTORE);
    w->buf = s->buf;
    w->index = base;
    w->lanes = lanes[i];
    w->n_lanes = L.n;
  }
  loop->body = out;
  return true;
}

/* Every KM_LANES loop of b, innermost first, replaced by what it became
 * (its statements in place of the loop when it made vector accesses). */
static bool vectorize_block(Kernel *k, Lanes *kl, KBlock *b) {
  bool any = false;
  KStmt *prev = NULL;
  for (KStmt *s = b->first; s; prev = s, s = s->next) {
    any |= vectorize_block(k, kl, &s->body);
    any |= vectorize_block(k, kl, &s->orelse);
    if (s->kind != KS_LOOP || s->map != KM_LANES) continue;
    if (s->extent->kind != KE_INT || s->extent->i < 2 || s->extent->i > 16)
      dl_internal(k->ctx, "a KM_LANES loop needs a constant extent of 2 to 16");
    if (!vectorize_lanes(k, kl, s) || !s->body.first) continue;
    /* The loop becomes its statements, run once. */
    KStmt *next = s->next;
    if (prev)
      prev->next = s->body.first;
    else
      b->first = s->body.first;
    s->body.last->next = next;
    if (b->last == s) b->last = s->body.last;
    s = s->body.last;
    any = true;
  }
  return any;
}

/* 16 bytes of the narrowest dtype the map's body reads or writes at its
 * index, or 0 when nothing there could be a vector access. */
static int map_lanes(const Kernel *k) {
  int lanes = 0;
  bool aligned = false;
  for (int i = 0; i < k->n_params; i++) {
    const KBuf *b = k->params[i].buf;
    if (!b || (!b->read && !b->written)) continue;
    int n = 16 / ir_dtype_size(b->dtype);
    if (n > lanes) lanes = n;
  }
  for (int i = 0; i < k->n_params; i++) {
    const KBuf *b = k->params[i].buf;
    if (b && word_bytes(k, b, lanes)) aligned = true;
  }
  return aligned ? lanes : 0;
}

/* for i in grid-stride [0, n): body  becomes
 *   for i4 in grid-stride [0, n / L): base = i4 * L; for v in lanes L: i = base + v; body
 *   for t in grid-stride [0, n % L): i = n / L * L + t; body */
static bool split_map(Kernel *k, Lanes *kl) {
  KStmt *loop = k->body.first;
  if (!loop || loop->next || loop->kind != KS_LOOP || loop->map != KM_GRID_STRIDE) return false;
  if (loop->extent->kind != KE_VAR || k->n_locals) return false;
  int64_t n = -1;
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].var == loop->extent->var && k->params[i].var->dtype == KT_INDEX) n = k->params[i].arg.i;
  for (KStmt *s = loop->body.first; s; s = s->next)
    if (s->kind != KS_LET && s->kind != KS_STORE) return false;
  int lanes = map_lanes(k);
  /* Below a few warps of vectors the tail and the wider accesses buy nothing. */
  if (lanes < 2 || n < lanes * 64) return false;
  KBlock old = loop->body;
  KExpr *nv = loop->extent, *nl = cg_kidx(k, KI_DIV, nv, cg_kint(k, lanes));
  KVar *iv = cg_kvar(k, "i", KT_INDEX), *lane = cg_kvar(k, "l", KT_INDEX), *i = loop->var;
  loop->var = iv;
  loop->extent = nl;
  loop->body = (KBlock){0};
  KVar *base = cg_klet(k, &loop->body, "base", KT_INDEX, cg_kmul(k, cg_kv(k, iv), cg_kint(k, lanes)));
  KStmt *inner = cg_kloop(k, &loop->body, lane, cg_kint(k, lanes), KM_LANES);
  KStmt *at = new_stmt(k, &inner->body, KS_LET);
  at->var = i;
  at->value = cg_kadd(k, cg_kv(k, base), cg_kv(k, lane));
  at->next = old.first;
  inner->body.last = old.last;
  /* The scalar tail: the original body at i = n / L * L + t. */
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *tail = new_stmt(k, &k->body, KS_LOOP);
  tail->var = t;
  tail->extent = cg_kidx(k, KI_SUB, nv, cg_kmul(k, nl, cg_kint(k, lanes)));
  tail->map = KM_GRID_STRIDE;
  KStmt *ti = new_stmt(k, &tail->body, KS_LET);
  ti->var = i;
  ti->value = cg_kadd(k, cg_kmul(k, nl, cg_kint(k, lanes)), cg_kv(k, t));
  ti->next = old.first;
  tail->body.last = old.last;
  cg_kernel_grid_1d(k, (n + lanes - 1) / lanes);
  kl->map_lane = lane, kl->map_base = base, kl->map_n = n;
  return true;
}

bool cg_vectorize(Kernel *k) {
  Lanes kl = {.k = k};
  split_map(k, &kl);
  collect_lets(k, &kl, &k->body);
  return vectorize_block(k, &kl, &k->body);
}
