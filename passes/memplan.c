/* The memory planner: takes buffers with live ranges, sizes and
 * alignments (memplan.h), returns their offsets in one arena and how
 * that arena compares with the lower bound.
 *
 * It is dynamic storage allocation, NP-hard in general, so: a conflict
 * graph (buffers live at a common step) built by one sweep; greedy
 * placement in several orders, each buffer at the lowest (first-fit) or
 * tightest (best-fit) gap among its already placed neighbours; the best
 * of those; then iterated greedy: move a buffer that touches the top
 * earlier in the winning order, re-place from there, keep the change
 * when the arena does not grow.  The search is seeded and bounded by
 * work, not time, so a model always gets the same plan. */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Seg {
  uint64_t start, end;
} Seg;

typedef struct Solver {
  Arena *a;
  int m;     /* buffers that need bytes */
  int *orig; /* solver index -> caller's index */
  int64_t *lo, *hi;
  uint64_t *ext, *al;
  int *adj_start, *adj; /* conflict graph, CSR */
  int max_deg;
  int64_t edges;
  uint64_t lb;
  uint64_t *peak; /* largest live total over each buffer's life */

  /* the current placement */
  int *order, *rank;
  uint64_t *off, *ptop; /* ptop[p]: top after placing positions 0..p */
  Seg *segs;
  int64_t work;

  /* undo log of the last re-placement */
  uint64_t *undo_off, *undo_ptop;
  int *undo_order;
} Solver;

/* Work units (neighbour visits) of the improvement phase: some tens of
 * milliseconds. */
#define DEFAULT_BUDGET ((int64_t)20000000)

static uint64_t align_up(uint64_t v, uint64_t a) { return a > 1 ? (v + a - 1) / a * a : v; }

/* ---- sorting ---- */

static void sort_segs(Seg *s, int n) {
  while (n > 24) {
    /* median of three, then Hoare partition; recurse on the smaller side */
    uint64_t x = s[0].start, y = s[n / 2].start, z = s[n - 1].start;
    uint64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int i = -1, j = n;
    for (;;) {
      do i++; while (s[i].start < p);
      do j--; while (s[j].start > p);
      if (i >= j) break;
      Seg t = s[i];
      s[i] = s[j];
      s[j] = t;
    }
    int left = j + 1;
    if (left < n - left) {
      sort_segs(s, left);
      s += left, n -= left;
    } else {
      sort_segs(s + left, n - left);
      n = left;
    }
  }
  for (int i = 1; i < n; i++) {
    Seg t = s[i];
    int j = i;
    while (j > 0 && s[j - 1].start > t.start) s[j] = s[j - 1], j--;
    s[j] = t;
  }
}

typedef struct Key {
  uint64_t k1, k2;
  int idx;
} Key;

/* Descending k1, then k2, then ascending index: a total order. */
static int cmp_key(const void *pa, const void *pb) {
  const Key *a = pa, *b = pb;
  if (a->k1 != b->k1) return a->k1 > b->k1 ? -1 : 1;
  if (a->k2 != b->k2) return a->k2 > b->k2 ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

typedef struct ByLo {
  int64_t lo;
  int idx;
} ByLo;

static int cmp_lo(const void *pa, const void *pb) {
  const ByLo *a = pa, *b = pb;
  if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

static int cmp_i64(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return (a > b) - (a < b);
}

/* ---- the problem ---- */

/* Indices of the live buffers in order of lower. */
static int *by_lower(Arena *a, const int64_t *lo, int m) {
  ByLo *t = ARENA_ARRAY(a, ByLo, m + 1);
  for (int i = 0; i < m; i++) t[i] = (ByLo){lo[i], i};
  qsort(t, (size_t)m, sizeof *t, cmp_lo);
  int *r = ARENA_ARRAY(a, int, m + 1);
  for (int i = 0; i < m; i++) r[i] = t[i].idx;
  return r;
}

/* Every pair of buffers live at a common step, each pair once: a sweep
 * in order of lower that keeps the set of buffers still open. */
typedef struct Sweep {
  const int *sorted;
  const int64_t *lo, *hi;
  int m, p, q, cur;
  int *open;
  int n_open;
} Sweep;

static void sweep_start(Sweep *s, Arena *a, const int *sorted, const int64_t *lo, const int64_t *hi,
                        int m) {
  if (!s->open) s->open = ARENA_ARRAY(a, int, m + 1);
  s->sorted = sorted, s->lo = lo, s->hi = hi, s->m = m;
  s->p = -1, s->q = s->n_open = 0;
}

static bool sweep_next(Sweep *s, int *i, int *j) {
  for (;;) {
    if (s->p >= 0 && s->q < s->n_open) {
      *i = s->cur, *j = s->open[s->q++];
      return true;
    }
    if (s->p >= 0) s->open[s->n_open++] = s->cur;
    if (++s->p >= s->m) return false;
    s->cur = s->sorted[s->p];
    int k = 0;
    for (int q = 0; q < s->n_open; q++)
      if (s->hi[s->open[q]] > s->lo[s->cur]) s->open[k++] = s->open[q];
    s->n_open = k, s->q = 0;
  }
}

static void build_graph(Solver *s) {
  Arena *a = s->a;
  int m = s->m;
  int *sorted = by_lower(a, s->lo, m);
  Sweep sw = {0};
  int *deg = ARENA_ARRAY(a, int, m + 1);
  int64_t edges = 0;
  int i, j;
  sweep_start(&sw, a, sorted, s->lo, s->hi, m);
  while (sweep_next(&sw, &i, &j)) deg[i]++, deg[j]++, edges++;
  s->edges = edges;
  s->adj_start = ARENA_ARRAY(a, int, m + 1);
  s->adj = ARENA_ARRAY(a, int, 2 * edges + 1);
  for (int k = 0; k < m; k++) {
    s->adj_start[k + 1] = s->adj_start[k] + deg[k];
    if (deg[k] > s->max_deg) s->max_deg = deg[k];
    deg[k] = s->adj_start[k];
  }
  sweep_start(&sw, a, sorted, s->lo, s->hi, m);
  while (sweep_next(&sw, &i, &j)) s->adj[deg[i]++] = j, s->adj[deg[j]++] = i;
}

/* The live total at every distinct start (the only steps where it can
 * rise), its maximum (the lower bound), and for each buffer the largest
 * total over its life (a range maximum over a sparse table). */
static void build_profile(Solver *s) {
  Arena *a = s->a;
  int m = s->m;
  int64_t *t = ARENA_ARRAY(a, int64_t, m + 1);
  for (int i = 0; i < m; i++) t[i] = s->lo[i];
  qsort(t, (size_t)m, sizeof *t, cmp_i64);
  int k = 0;
  for (int i = 0; i < m; i++)
    if (k == 0 || t[k - 1] != t[i]) t[k++] = t[i];
  /* index of the first start >= v */
  int *first = ARENA_ARRAY(a, int, 2 * m + 1);
#define FIRST_GE(v, out)                          \
  do {                                            \
    int l_ = 0, h_ = k;                           \
    while (l_ < h_) {                             \
      int mid_ = (l_ + h_) / 2;                   \
      if (t[mid_] < (v)) l_ = mid_ + 1;           \
      else h_ = mid_;                             \
    }                                             \
    (out) = l_;                                   \
  } while (0)
  uint64_t *diff = ARENA_ARRAY(a, uint64_t, k + 1);
  uint64_t *sub = ARENA_ARRAY(a, uint64_t, k + 1);
  for (int i = 0; i < m; i++) {
    int l, h;
    FIRST_GE(s->lo[i], l);
    FIRST_GE(s->hi[i], h);
    first[2 * i] = l, first[2 * i + 1] = h;
    diff[l] += s->ext[i];
    sub[h] += s->ext[i];
  }
#undef FIRST_GE
  int levels = 1;
  while ((1 << levels) <= k) levels++;
  uint64_t **tab = ARENA_ARRAY(a, uint64_t *, levels);
  tab[0] = ARENA_ARRAY(a, uint64_t, k + 1);
  uint64_t live = 0;
  s->lb = 0;
  for (int i = 0; i < k; i++) {
    live = live + diff[i] - sub[i];
    tab[0][i] = live;
    if (live > s->lb) s->lb = live;
  }
  for (int l = 1; l < levels; l++) {
    tab[l] = ARENA_ARRAY(a, uint64_t, k + 1);
    for (int i = 0; i + (1 << l) <= k; i++) {
      uint64_t x = tab[l - 1][i], y = tab[l - 1][i + (1 << (l - 1))];
      tab[l][i] = x > y ? x : y;
    }
  }
  s->peak = ARENA_ARRAY(a, uint64_t, m + 1);
  for (int i = 0; i < m; i++) {
    int l = first[2 * i], h = first[2 * i + 1]; /* starts in [l, h): h > l */
    int lev = 0;
    while ((2 << lev) <= h - l) lev++;
    uint64_t x = tab[lev][l], y = tab[lev][h - (1 << lev)];
    s->peak[i] = x > y ? x : y;
  }
}

static void solver_init(Solver *s, Arena *a, const MemBuf *bufs, int n) {
  memset(s, 0, sizeof *s);
  s->a = a;
  int m = 0;
  for (int i = 0; i < n; i++) m += bufs[i].size > 0 && bufs[i].lower < bufs[i].upper;
  s->m = m;
  s->orig = ARENA_ARRAY(a, int, m + 1);
  s->lo = ARENA_ARRAY(a, int64_t, m + 1);
  s->hi = ARENA_ARRAY(a, int64_t, m + 1);
  s->ext = ARENA_ARRAY(a, uint64_t, m + 1);
  s->al = ARENA_ARRAY(a, uint64_t, m + 1);
  int k = 0;
  for (int i = 0; i < n; i++) {
    const MemBuf *b = &bufs[i];
    if (b->size == 0 || b->lower >= b->upper) continue;
    s->orig[k] = i;
    s->lo[k] = b->lower;
    s->hi[k] = b->upper;
    s->al[k] = b->align > 1 ? b->align : 1;
    s->ext[k] = align_up(b->size, s->al[k]);
    k++;
  }
  if (m == 0) return;
  build_profile(s);
}

static void solver_alloc_work(Solver *s) {
  Arena *a = s->a;
  int m = s->m;
  s->order = ARENA_ARRAY(a, int, m + 1);
  s->rank = ARENA_ARRAY(a, int, m + 1);
  s->off = ARENA_ARRAY(a, uint64_t, m + 1);
  s->ptop = ARENA_ARRAY(a, uint64_t, m + 1);
  s->segs = ARENA_ARRAY(a, Seg, s->max_deg + 1);
  s->undo_off = ARENA_ARRAY(a, uint64_t, m + 1);
  s->undo_ptop = ARENA_ARRAY(a, uint64_t, m + 1);
  s->undo_order = ARENA_ARRAY(a, int, m + 1);
}

/* ---- greedy placement ---- */

/* Places order[from..m) after the positions before it, each in a gap
 * among its placed neighbours.  Stops as soon as the top passes limit
 * (the caller then undoes it); returns the top, and in *end the first
 * position not placed.  Old offsets go to the undo log. */
static uint64_t place_from(Solver *s, int from, bool best_fit, uint64_t limit, int *end) {
  uint64_t top = from ? s->ptop[from - 1] : 0;
  int p = from;
  for (; p < s->m; p++) {
    int b = s->order[p];
    int n = 0;
    for (int e = s->adj_start[b]; e < s->adj_start[b + 1]; e++) {
      int j = s->adj[e];
      if (s->rank[j] < p) s->segs[n++] = (Seg){s->off[j], s->off[j] + s->ext[j]};
    }
    s->work += s->adj_start[b + 1] - s->adj_start[b] + 1;
    sort_segs(s->segs, n);
    uint64_t need = s->ext[b], al = s->al[b], cur = 0, at = UINT64_MAX, best_gap = UINT64_MAX;
    for (int i = 0; i < n; i++) {
      const Seg *g = &s->segs[i];
      uint64_t o = align_up(cur, al);
      if (g->start > o && g->start - o >= need) {
        uint64_t gap = g->start - cur;
        if (!best_fit) {
          at = o;
          break;
        }
        if (gap < best_gap) best_gap = gap, at = o;
      }
      if (g->end > cur) cur = g->end;
    }
    if (at == UINT64_MAX) at = align_up(cur, al);
    s->undo_off[p] = s->off[b];
    s->undo_ptop[p] = s->ptop[p];
    s->off[b] = at;
    if (at + need > top) top = at + need;
    s->ptop[p] = top;
    if (top > limit) {
      p++;
      break;
    }
  }
  *end = p;
  return top;
}

static void undo_from(Solver *s, int from, int end) {
  for (int p = from; p < end; p++) {
    s->off[s->order[p]] = s->undo_off[p];
    s->ptop[p] = s->undo_ptop[p];
  }
}

/* ---- orders ---- */

typedef enum { ORD_SIZE, ORD_LIFETIME, ORD_AREA, ORD_START, ORD_PEAK, ORD_COUNT } OrderKind;

static const char *const order_names[ORD_COUNT] = {"size", "lifetime", "area", "start", "peak"};

static uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static void make_order(Solver *s, OrderKind kind, Key *keys, int *order) {
  int m = s->m;
  int64_t min_lo = s->lo[0];
  for (int i = 1; i < m; i++)
    if (s->lo[i] < min_lo) min_lo = s->lo[i];
  for (int i = 0; i < m; i++) {
    uint64_t len = (uint64_t)(s->hi[i] - s->lo[i]), ext = s->ext[i];
    Key *k = &keys[i];
    k->idx = i;
    switch (kind) {
      case ORD_SIZE: k->k1 = ext, k->k2 = len; break;
      case ORD_LIFETIME: k->k1 = len, k->k2 = ext; break;
      case ORD_AREA: k->k1 = sat_mul(ext, len), k->k2 = ext; break;
      case ORD_START: k->k1 = UINT64_MAX - (uint64_t)(s->lo[i] - min_lo), k->k2 = ext; break;
      case ORD_PEAK: k->k1 = s->peak[i], k->k2 = ext; break;
      case ORD_COUNT: break;
    }
  }
  qsort(keys, (size_t)m, sizeof *keys, cmp_key);
  for (int i = 0; i < m; i++) order[i] = keys[i].idx;
}

static void set_order(Solver *s, const int *order) {
  memcpy(s->order, order, sizeof(int) * (size_t)s->m);
  for (int p = 0; p < s->m; p++) s->rank[s->order[p]] = p;
}

/* ---- local search ---- */

typedef struct Rng {
  uint64_t x;
} Rng;

static uint64_t rng_next(Rng *r) {
  r->x ^= r->x << 13, r->x ^= r->x >> 7, r->x ^= r->x << 17;
  return r->x * 0x2545f4914f6cdd1dull;
}

static int rng_below(Rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Iterated greedy from the current order.  A move takes a buffer that
 * touches the top and either moves it to a random earlier position or
 * swaps it with an earlier neighbour; everything from the first changed
 * position is placed again, and the move stays when the top did not
 * rise.  Returns the best top; its offsets in best_off. */
static uint64_t search(Solver *s, bool best_fit, uint64_t top, const MemPlanOptions *o,
                       int64_t budget, uint64_t *best_off, int64_t *iterations) {
  Rng rng = {o->seed ? o->seed : 0x9e3779b97f4a7c15ull};
  int64_t stop = s->work + budget;
  double deadline = o->time_ms > 0 ? now_ms() + o->time_ms : 0;
  int m = s->m;
  int *crit = ARENA_ARRAY(s->a, int, m + 1);
  uint64_t best = top;
  memcpy(best_off, s->off, sizeof(uint64_t) * (size_t)m);
  int64_t it = 0;
  while (s->work < stop && top > s->lb) {
    if (deadline && (it & 63) == 0 && now_ms() > deadline) break;
    it++;
    int nc = 0;
    for (int i = 0; i < m; i++)
      if (s->off[i] + s->ext[i] == top && s->rank[i] > 0) crit[nc++] = i;
    s->work += m / 8 + 1;
    if (nc == 0) break;
    int c = crit[rng_below(&rng, nc)], pc = s->rank[c], q;
    if (rng_next(&rng) & 1) {
      q = rng_below(&rng, pc);
    } else {
      /* an earlier neighbour, found by reservoir sampling */
      int seen = 0;
      q = -1;
      for (int e = s->adj_start[c]; e < s->adj_start[c + 1]; e++) {
        int j = s->adj[e];
        if (s->rank[j] < pc && rng_below(&rng, ++seen) == 0) q = s->rank[j];
      }
      if (q < 0) q = rng_below(&rng, pc);
    }
    bool swap = !(rng_next(&rng) & 3);
    memcpy(s->undo_order + q, s->order + q, sizeof(int) * (size_t)(pc - q + 1));
    if (swap) {
      s->order[pc] = s->order[q];
      s->order[q] = c;
      s->rank[s->order[pc]] = pc;
      s->rank[c] = q;
    } else {
      memmove(s->order + q + 1, s->order + q, sizeof(int) * (size_t)(pc - q));
      s->order[q] = c;
      for (int p = q; p <= pc; p++) s->rank[s->order[p]] = p;
    }
    int end;
    uint64_t t = place_from(s, q, best_fit, top, &end);
    if (t <= top) {
      top = t;
      if (t < best) {
        best = t;
        memcpy(best_off, s->off, sizeof(uint64_t) * (size_t)m);
      }
    } else {
      undo_from(s, q, end);
      memcpy(s->order + q, s->undo_order + q, sizeof(int) * (size_t)(pc - q + 1));
      for (int p = q; p <= pc; p++) s->rank[s->order[p]] = p;
    }
  }
  *iterations = it;
  return best;
}

/* ---- branch and bound over canonical placements ---- */

/* Any placement can be pushed down until every buffer rests on a
 * neighbour below it (or on 0); listed by offset, each buffer then sits
 * on the highest of its neighbours listed before it.  So the search is
 * over orders only: each step puts one more buffer on the floor of the
 * time sections it spans, offsets never decreasing along the order.  A
 * node dies when some section's floor plus the bytes still to come in
 * it passes the limit.  Limited discrepancy: first the best-looking
 * child everywhere, then paths that deviate once, twice, ... */
enum { BB_MAX_CHILDREN = 6, BB_MAX_BUFFERS = 3000 };

typedef struct BB {
  Solver *s;
  int *sl, *sh; /* each buffer spans sections [sl, sh) */
  uint64_t *floor, *rem;
  bool *placed;
  uint64_t *off;
  uint64_t limit; /* looking for a top <= limit */
  uint64_t best;
  uint64_t *best_off;
  uint64_t *saved; /* floors overwritten on the current path */
  int64_t n_saved;
  /* the offset each unplaced buffer would get now: the highest floor
   * under it, raised only by placing a neighbour */
  uint64_t *at;
  uint64_t *saved_at;
  int64_t n_saved_at;
  int64_t work, stop;
  bool found;
} BB;

typedef struct Child {
  int b;
  uint64_t off;
  int64_t len;
} Child;

static bool child_before(const Child *x, const Child *y, const Solver *s) {
  if (x->off != y->off) return x->off < y->off;
  if (x->len != y->len) return x->len > y->len;
  if (s->ext[x->b] != s->ext[y->b]) return s->ext[x->b] > s->ext[y->b];
  return x->b < y->b;
}

/* One node of the search on the path from the root: its children, the
 * one being explored, and what placing it overwrote.  The path is as
 * long as there are buffers, thousands: it lives in an array, not on the
 * C stack. */
typedef struct BBLevel {
  Child kids[BB_MAX_CHILDREN];
  int nk, c, disc;
  bool placed; /* kids[c] is placed */
  int64_t mark, mark_at;
} BBLevel;

/* Enters the node at depth: records a complete placement, or fills L
 * with the children worth exploring.  False when there are none. */
static bool bb_enter(BB *t, BBLevel *L, int depth, uint64_t last, int disc) {
  Solver *s = t->s;
  if (t->work > t->stop || t->best <= s->lb) return false;
  if (depth == s->m) {
    uint64_t top = 0;
    for (int i = 0; i < s->m; i++)
      if (t->off[i] + s->ext[i] > top) top = t->off[i] + s->ext[i];
    if (top < t->best) {
      t->best = top, t->limit = top - 1, t->found = true;
      memcpy(t->best_off, t->off, sizeof(uint64_t) * (size_t)s->m);
    }
    return false;
  }
  int want = disc + 1 < BB_MAX_CHILDREN ? disc + 1 : BB_MAX_CHILDREN, nk = 0;
  t->work += s->m;
  for (int i = 0; i < s->m; i++) {
    if (t->placed[i]) continue;
    uint64_t o = t->at[i];
    if (o + s->ext[i] > t->limit) return false; /* it can only go higher */
    if (o < last) continue;
    Child c = {i, o, s->hi[i] - s->lo[i]};
    int at = nk < want ? nk++ : want;
    while (at > 0 && child_before(&c, &L->kids[at - 1], s)) {
      if (at < want) L->kids[at] = L->kids[at - 1];
      at--;
    }
    if (at < want) L->kids[at] = c;
  }
  L->nk = nk;
  L->c = 0;
  L->disc = disc;
  L->placed = false;
  return true;
}

/* Places L's child c; false when some section can no longer stay under
 * the limit (the child is placed all the same, to be undone). */
static bool bb_place(BB *t, BBLevel *L) {
  Solver *s = t->s;
  int b = L->kids[L->c].b;
  uint64_t o = L->kids[L->c].off, end = o + s->ext[b];
  L->mark = t->n_saved;
  bool ok = true;
  for (int k = t->sl[b]; k < t->sh[b]; k++) {
    t->saved[t->n_saved++] = t->floor[k];
    t->floor[k] = end;
    t->rem[k] -= s->ext[b];
    if (end + t->rem[k] > t->limit) ok = false;
  }
  t->placed[b] = true;
  t->off[b] = o;
  L->mark_at = t->n_saved_at;
  for (int e = s->adj_start[b]; e < s->adj_start[b + 1]; e++) {
    int j = s->adj[e];
    t->saved_at[t->n_saved_at++] = t->at[j];
    if (t->at[j] < end) t->at[j] = end;
  }
  t->work += s->adj_start[b + 1] - s->adj_start[b] + t->sh[b] - t->sl[b];
  L->placed = true;
  return ok;
}

static void bb_unplace(BB *t, BBLevel *L) {
  Solver *s = t->s;
  int b = L->kids[L->c].b;
  for (int e = s->adj_start[b]; e < s->adj_start[b + 1]; e++)
    t->at[s->adj[e]] = t->saved_at[L->mark_at + (e - s->adj_start[b])];
  t->n_saved_at = L->mark_at;
  t->placed[b] = false;
  for (int k = t->sl[b]; k < t->sh[b]; k++) {
    t->floor[k] = t->saved[L->mark + (k - t->sl[b])];
    t->rem[k] += s->ext[b];
  }
  t->n_saved = L->mark;
  L->placed = false;
}

/* Depth first from the root with discrepancy budget disc: at each node
 * child c costs c of it. */
static void bb_descend(BB *t, BBLevel *path, int disc) {
  if (!bb_enter(t, &path[0], 0, 0, disc)) return;
  int d = 0;
  while (d >= 0) {
    BBLevel *L = &path[d];
    if (L->placed) {
      bb_unplace(t, L);
      L->c++;
    }
    if (L->c >= L->nk || L->c > L->disc) {
      d--;
      continue;
    }
    if (bb_place(t, L) && bb_enter(t, &path[d + 1], d + 1, L->kids[L->c].off, L->disc - L->c)) d++;
  }
}

/* Looks for a top below best within budget work; true with the offsets
 * in best_off when it finds one. */
static bool bb_search(Solver *s, uint64_t *best, uint64_t *best_off, int64_t budget) {
  Arena *a = s->a;
  int m = s->m;
  int64_t *pts = ARENA_ARRAY(a, int64_t, 2 * m + 1);
  for (int i = 0; i < m; i++) pts[2 * i] = s->lo[i], pts[2 * i + 1] = s->hi[i];
  qsort(pts, (size_t)(2 * m), sizeof *pts, cmp_i64);
  int k = 0;
  for (int i = 0; i < 2 * m; i++)
    if (k == 0 || pts[k - 1] != pts[i]) pts[k++] = pts[i];
  BB t = {.s = s, .limit = *best - 1, .best = *best, .best_off = best_off};
  t.sl = ARENA_ARRAY(a, int, m + 1);
  t.sh = ARENA_ARRAY(a, int, m + 1);
  t.floor = ARENA_ARRAY(a, uint64_t, k + 1);
  t.rem = ARENA_ARRAY(a, uint64_t, k + 1);
  t.placed = ARENA_ARRAY(a, bool, m + 1);
  t.off = ARENA_ARRAY(a, uint64_t, m + 1);
  int64_t span = 0;
  for (int i = 0; i < m; i++) {
    int l = 0, h = k;
    while (l < h) {
      int mid = (l + h) / 2;
      if (pts[mid] < s->lo[i]) l = mid + 1;
      else h = mid;
    }
    t.sl[i] = l;
    while (pts[l] < s->hi[i]) t.rem[l++] += s->ext[i];
    t.sh[i] = l;
    span += t.sh[i] - t.sl[i];
  }
  t.saved = ARENA_ARRAY(a, uint64_t, span + 1);
  t.at = ARENA_ARRAY(a, uint64_t, m + 1);
  t.saved_at = ARENA_ARRAY(a, uint64_t, 2 * s->edges + 1);
  t.stop = budget;
  BBLevel *path = ARENA_ARRAY(a, BBLevel, m + 1);
  for (int disc = 0; disc < m && t.work < t.stop && t.best > s->lb; disc++) bb_descend(&t, path, disc);
  s->work += t.work;
  *best = t.best;
  return t.found;
}

/* ---- the interface ---- */

uint64_t pass_memplan_lower_bound(Arena *a, const MemBuf *bufs, int n) {
  Solver s;
  solver_init(&s, a, bufs, n);
  return s.lb;
}

void pass_memplan_solve(Arena *a, MemBuf *bufs, int n, const MemPlanOptions *opt,
                        MemPlanResult *r) {
  MemPlanOptions none = {0};
  const MemPlanOptions *o = opt ? opt : &none;
  memset(r, 0, sizeof *r);
  for (int i = 0; i < n; i++) bufs[i].offset = 0;
  Solver s;
  solver_init(&s, a, bufs, n);
  r->heuristic = "none";
  if (s.m == 0) return;
  build_graph(&s);
  solver_alloc_work(&s);
  r->lower_bound = s.lb;
  r->edges = s.edges;

  int m = s.m;
  Key *keys = ARENA_ARRAY(a, Key, m + 1);
  int *order = ARENA_ARRAY(a, int, m + 1), *best_order = ARENA_ARRAY(a, int, m + 1);
  uint64_t *best_off = ARENA_ARRAY(a, uint64_t, m + 1);
  uint64_t best = UINT64_MAX;
  int best_kind = 0;
  bool best_fit = true;
  int64_t budget = o->budget > 0 ? o->budget : DEFAULT_BUDGET;
  /* the portfolio stops early too when one greedy pass alone is that much work */
  for (int kind = 0; kind < ORD_COUNT && best > s.lb && (kind == 0 || s.work < budget); kind++) {
    make_order(&s, (OrderKind)kind, keys, order);
    for (int fit = 1; fit >= 0 && best > s.lb; fit--) {
      set_order(&s, order);
      int end;
      uint64_t top = place_from(&s, 0, fit, UINT64_MAX, &end);
      if (top < best) {
        best = top, best_kind = kind, best_fit = fit;
        memcpy(best_order, order, sizeof(int) * (size_t)m);
        memcpy(best_off, s.off, sizeof(uint64_t) * (size_t)m);
      }
      if (o->greedy_only) break;
    }
    if (o->greedy_only) break;
  }
  r->greedy = best;
  r->heuristic = arena_printf(a, "%s/%s", order_names[best_kind], best_fit ? "best-fit" : "first-fit");
  if (!o->greedy_only && o->budget >= 0 && best > s.lb) {
    uint64_t *off2 = ARENA_ARRAY(a, uint64_t, m + 1);
    const char *how = "";
    if (m <= BB_MAX_BUFFERS && bb_search(&s, &best, off2, budget / 2)) {
      memcpy(best_off, off2, sizeof(uint64_t) * (size_t)m);
      how = "+bb";
    }
    if (best > s.lb) {
      set_order(&s, best_order);
      int end;
      uint64_t top = place_from(&s, 0, best_fit, UINT64_MAX, &end);
      uint64_t t = search(&s, best_fit, top, o, budget - budget / 2, off2, &r->iterations);
      if (t < best) {
        best = t;
        memcpy(best_off, off2, sizeof(uint64_t) * (size_t)m);
        how = "+search";
      }
    }
    r->heuristic = arena_printf(a, "%s%s", r->heuristic, how);
  }
  r->arena = best;
  for (int i = 0; i < m; i++) bufs[s.orig[i]].offset = best_off[i];
}

bool pass_memplan_check(Arena *a, const MemBuf *bufs, int n,
                        bool (*may_share)(void *data, int i, int j), void *data, int *bad_i,
                        int *bad_j) {
  int m = 0;
  int *idx = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < n; i++) {
    const MemBuf *b = &bufs[i];
    if (b->size == 0 || b->lower >= b->upper) continue;
    if (b->align > 1 && b->offset % b->align) {
      *bad_i = i, *bad_j = -1;
      return false;
    }
    idx[m++] = i;
  }
  int64_t *lo = ARENA_ARRAY(a, int64_t, m + 1), *hi = ARENA_ARRAY(a, int64_t, m + 1);
  for (int k = 0; k < m; k++) lo[k] = bufs[idx[k]].lower, hi[k] = bufs[idx[k]].upper;
  int *sorted = by_lower(a, lo, m);
  Sweep sw = {0};
  int i, j;
  sweep_start(&sw, a, sorted, lo, hi, m);
  while (sweep_next(&sw, &i, &j)) {
    const MemBuf *x = &bufs[idx[i]], *y = &bufs[idx[j]];
    if (x->offset < y->offset + y->size && y->offset < x->offset + x->size &&
        !(may_share && may_share(data, idx[j], idx[i]))) {
      *bad_i = idx[j], *bad_j = idx[i];
      return false;
    }
  }
  return true;
}
