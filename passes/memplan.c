/* The memory planner: takes buffers with live ranges, sizes and
 * alignments (memplan.h), returns their offsets in one arena and how
 * that arena compares with the lower bound.
 *
 * It is dynamic storage allocation, NP-hard in general, so: a conflict
 * graph (buffers live at a common step) built by one sweep; greedy
 * placement in several orders, each buffer at the lowest (first-fit) or
 * tightest (best-fit) gap among its already placed neighbours; the best
 * of those; a skyline search for tight packings; a branch and bound;
 * then iterated greedy: move a buffer that touches the top
 * earlier in the winning order, re-place from there, keep the change
 * when the arena does not grow.  Where all that misses the bound, the
 * same again on a smaller problem whose buffers are merged where their
 * bytes can go together (coalescing, below).  The search is seeded and
 * bounded by work, not time, so a model always gets the same plan. */
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

/* ---- skyline search ---- */

/* Placements built along the time axis's skyline (the floor of every
 * section: the bytes below it are taken), always at its lowest run of
 * equal floor, at the run's left end L: a buffer whose life starts at L
 * and ends inside the run goes there, or the run is given up (wasted)
 * up to its lower neighbour.  A placement pushed down and left can be
 * built so (strip packing's bottom-left form, each piece's x fixed).
 *
 * A section's slack is the limit minus its floor and the bytes still to
 * come over it.  Placing a buffer keeps every slack; wasting spends it.
 * So under a tight limit a run with no slack must be tiled end to end by
 * the buffers inside it, and a choice that leaves a run untileable dies
 * at once: that finds the packings of problems whose optimum is their
 * bound (a rectangle of time x bytes cut into pieces, where the greedy
 * orders above leave 1.3-1.5x).  Depth first with limited discrepancy,
 * under limits rising from the bound, bounded by work. */
enum { SKY_CHILDREN = 4 };

typedef struct Sky {
  Solver *s;
  int n_sec;       /* sections [pts[k], pts[k+1]) */
  int64_t path_cap; /* levels the search's path holds */
  int *sl, *sh;    /* each buffer spans sections [sl, sh) */
  int *start_head; /* buffers by first section (CSR), longest life first */
  int *start_buf;
  bool *placed;
  uint64_t *floor; /* per section; UINT64_MAX once nothing is left over it */
  uint64_t *rem;   /* per section: extents of the unplaced buffers over it */
  uint64_t *tree;  /* min of floor over each node's sections */
  int leaves;
  int *reach;      /* per section boundary: == stamp when reachable */
  int stamp;
  uint64_t limit;
  uint64_t *off;
  /* undo log: a section, its floor and rem before (malloc'd and grown:
   * a path's wastes may log many sections) */
  int *u_sec;
  uint64_t *u_floor, *u_rem;
  int64_t n_undo, cap_undo;
  bool no_memory;
  int64_t stop;
} Sky;

typedef struct SkyLevel {
  int kids[SKY_CHILDREN]; /* buffers; -1: waste the run */
  int nk, c, disc;
  bool done;     /* kids[c] applied */
  int wasted_at; /* a waste's first section */
  int64_t mark;  /* undo log length before it */
} SkyLevel;

static void sky_set(Sky *k, int sec, uint64_t v) {
  k->floor[sec] = v;
  int i = sec + k->leaves;
  k->tree[i] = v;
  for (i /= 2; i >= 1; i /= 2) k->tree[i] = k->tree[2 * i] < k->tree[2 * i + 1] ? k->tree[2 * i] : k->tree[2 * i + 1];
}

/* The leftmost section of lowest floor. */
static int sky_lowest(const Sky *k) {
  int i = 1;
  while (i < k->leaves) i = k->tree[2 * i] <= k->tree[2 * i + 1] ? 2 * i : 2 * i + 1;
  return i - k->leaves;
}

static int first_ge(const int64_t *pts, int n, int64_t v) {
  int l = 0, h = n;
  while (l < h) {
    int mid = (l + h) / 2;
    if (pts[mid] < v) l = mid + 1;
    else h = mid;
  }
  return l;
}

static void sky_init(Sky *k, Solver *s) {
  Arena *a = s->a;
  int m = s->m;
  int64_t *pts = ARENA_ARRAY(a, int64_t, 2 * m + 1);
  for (int i = 0; i < m; i++) pts[2 * i] = s->lo[i], pts[2 * i + 1] = s->hi[i];
  qsort(pts, (size_t)(2 * m), sizeof *pts, cmp_i64);
  int n = 0;
  for (int i = 0; i < 2 * m; i++)
    if (n == 0 || pts[n - 1] != pts[i]) pts[n++] = pts[i];
  memset(k, 0, sizeof *k);
  k->s = s;
  k->n_sec = n - 1;
  k->sl = ARENA_ARRAY(a, int, m + 1);
  k->sh = ARENA_ARRAY(a, int, m + 1);
  k->start_head = ARENA_ARRAY(a, int, n + 1);
  k->start_buf = ARENA_ARRAY(a, int, m + 1);
  for (int i = 0; i < m; i++) {
    k->sl[i] = first_ge(pts, n, s->lo[i]);
    k->sh[i] = first_ge(pts, n, s->hi[i]);
    k->start_head[k->sl[i] + 1]++;
  }
  for (int j = 0; j < n; j++) k->start_head[j + 1] += k->start_head[j];
  int *fill = ARENA_ARRAY(a, int, n + 1);
  memcpy(fill, k->start_head, sizeof(int) * (size_t)(n + 1));
  Key *keys = ARENA_ARRAY(a, Key, m + 1);
  for (int i = 0; i < m; i++) keys[i] = (Key){(uint64_t)(k->sh[i] - k->sl[i]), s->ext[i], i};
  qsort(keys, (size_t)m, sizeof *keys, cmp_key);
  for (int q = 0; q < m; q++) k->start_buf[fill[k->sl[keys[q].idx]]++] = keys[q].idx;
  k->leaves = 1;
  while (k->leaves < k->n_sec) k->leaves *= 2;
  k->placed = ARENA_ARRAY(a, bool, m + 1);
  k->floor = ARENA_ARRAY(a, uint64_t, n + 1);
  k->rem = ARENA_ARRAY(a, uint64_t, n + 1);
  k->tree = ARENA_ARRAY(a, uint64_t, 2 * k->leaves);
  k->reach = ARENA_ARRAY(a, int, n + 1);
  k->off = ARENA_ARRAY(a, uint64_t, m + 1);
}

static void sky_reset(Sky *k) {
  Solver *s = k->s;
  int n = k->n_sec;
  memset(k->placed, 0, sizeof(bool) * (size_t)s->m);
  memset(k->rem, 0, sizeof(uint64_t) * (size_t)n);
  for (int i = 0; i < s->m; i++)
    for (int j = k->sl[i]; j < k->sh[i]; j++) k->rem[j] += s->ext[i];
  for (int i = 0; i < 2 * k->leaves; i++) k->tree[i] = UINT64_MAX;
  for (int j = 0; j < n; j++) sky_set(k, j, k->rem[j] ? 0 : UINT64_MAX);
  k->n_undo = 0;
  s->work += s->m + n;
}

/* Logs section sec before a change; false (and the search stops) when
 * the log cannot grow. */
static bool sky_log(Sky *k, int sec) {
  if (k->n_undo == k->cap_undo) {
    int64_t cap = k->cap_undo ? 2 * k->cap_undo : 4096;
    int *u_sec = realloc(k->u_sec, sizeof(int) * (size_t)cap);
    if (u_sec) k->u_sec = u_sec;
    uint64_t *u_floor = u_sec ? realloc(k->u_floor, sizeof(uint64_t) * (size_t)cap) : NULL;
    if (u_floor) k->u_floor = u_floor;
    uint64_t *u_rem = u_floor ? realloc(k->u_rem, sizeof(uint64_t) * (size_t)cap) : NULL;
    if (u_rem) k->u_rem = u_rem;
    if (!u_rem) return !(k->no_memory = true);
    k->cap_undo = cap;
  }
  k->u_sec[k->n_undo] = sec;
  k->u_floor[k->n_undo] = k->floor[sec];
  k->u_rem[k->n_undo] = k->rem[sec];
  k->n_undo++;
  return true;
}

static void sky_undo(Sky *k, int64_t mark) {
  while (k->n_undo > mark) {
    k->n_undo--;
    int sec = k->u_sec[k->n_undo];
    k->rem[sec] = k->u_rem[k->n_undo];
    sky_set(k, sec, k->u_floor[k->n_undo]);
  }
}

/* The run [*L, *R) of the lowest floor; false when nothing is left. */
static bool sky_run_at(Sky *k, int *L, int *R) {
  int low = sky_lowest(k);
  uint64_t fl = k->floor[low];
  if (fl == UINT64_MAX) return false;
  int r = low + 1;
  while (r < k->n_sec && k->floor[r] == fl) r++;
  *L = low, *R = r;
  k->s->work += r - low;
  return true;
}

/* Where wasting the run [L, R) raises it: its lower neighbour's floor. */
static uint64_t sky_waste_to(const Sky *k, int L, int R) {
  uint64_t up = UINT64_MAX;
  if (L > 0 && k->floor[L - 1] < up) up = k->floor[L - 1];
  if (R < k->n_sec && k->floor[R] < up) up = k->floor[R];
  return up;
}

/* Whether the buffers left inside sections [L, R) can tile it end to
 * end; k->reach marks the boundaries from which they reach R. */
static bool sky_tileable(Sky *k, int L, int R) {
  k->stamp++;
  k->reach[R] = k->stamp;
  for (int j = R - 1; j >= L; j--) {
    for (int q = k->start_head[j]; q < k->start_head[j + 1]; q++) {
      int i = k->start_buf[q];
      k->s->work++;
      if (!k->placed[i] && k->sh[i] <= R && k->reach[k->sh[i]] == k->stamp) {
        k->reach[j] = k->stamp;
        break;
      }
    }
  }
  return k->reach[L] == k->stamp;
}

/* The least slack over sections [L, R). */
static uint64_t sky_slack(Sky *k, int L, int R) {
  uint64_t slack = UINT64_MAX;
  for (int j = L; j < R; j++) {
    uint64_t need = k->floor[j] + k->rem[j];
    uint64_t sl = need > k->limit ? 0 : k->limit - need;
    if (sl < slack) slack = sl;
  }
  k->s->work += R - L;
  return slack;
}

/* False when the run through section sec can no longer be completed: a
 * run between higher floors (it can never widen) with no slack must be
 * tiled by the buffers inside it. */
static bool sky_run_ok(Sky *k, int sec) {
  if (sec < 0 || sec >= k->n_sec) return true;
  uint64_t fl = k->floor[sec];
  if (fl == UINT64_MAX) return true;
  int L = sec, R = sec + 1;
  while (L > 0 && k->floor[L - 1] == fl) L--;
  while (R < k->n_sec && k->floor[R] == fl) R++;
  if ((L > 0 && k->floor[L - 1] < fl) || (R < k->n_sec && k->floor[R] < fl)) return true;
  return sky_slack(k, L, R) > 0 || sky_tileable(k, L, R);
}

/* Fills lv with the children of the current node; false when it has
 * none: dead, or *complete (every buffer placed, offsets in k->off). */
static bool sky_enter(Sky *k, SkyLevel *lv, int disc, bool *complete) {
  Solver *s = k->s;
  *complete = false;
  int L, R;
  if (!sky_run_at(k, &L, &R)) return *complete = true, false;
  if (s->work > k->stop || k->no_memory) return false;
  uint64_t fl = k->floor[L], up = sky_waste_to(k, L, R);
  uint64_t slack = sky_slack(k, L, R);
  bool can_waste = up != UINT64_MAX && up - fl <= slack;
  /* with no slack in the run it must be tiled at this floor: only
   * children that leave the rest tileable (k->reach) */
  bool must_tile = slack == 0;
  if (must_tile && !sky_tileable(k, L, R)) return false;
  int want = disc + 1 < SKY_CHILDREN ? disc + 1 : SKY_CHILDREN, nk = 0;
  for (int q = k->start_head[L]; q < k->start_head[L + 1] && nk < want; q++) {
    int i = k->start_buf[q];
    s->work++;
    if (k->placed[i] || k->sh[i] > R || (must_tile && k->reach[k->sh[i]] != k->stamp)) continue;
    if (align_up(fl, s->al[i]) + k->rem[L] > k->limit) continue;
    lv->kids[nk++] = i;
  }
  if (can_waste && nk < want) lv->kids[nk++] = -1;
  lv->nk = nk, lv->c = 0, lv->disc = disc, lv->done = false;
  return nk > 0;
}

/* Applies lv's child c: its buffer at the run's floor, or the waste.
 * False when that leaves a run that cannot be completed. */
static bool sky_apply(Sky *k, SkyLevel *lv) {
  Solver *s = k->s;
  int L, R;
  sky_run_at(k, &L, &R);
  lv->mark = k->n_undo;
  lv->done = true;
  int b = lv->kids[lv->c];
  if (b < 0) {
    uint64_t up = sky_waste_to(k, L, R);
    for (int j = L; j < R; j++) {
      if (!sky_log(k, j)) return false;
      sky_set(k, j, up);
    }
    return sky_run_ok(k, L);
  }
  uint64_t at = align_up(k->floor[L], s->al[b]), end = at + s->ext[b];
  k->off[b] = at;
  k->placed[b] = true;
  for (int j = k->sl[b]; j < k->sh[b]; j++) {
    if (!sky_log(k, j)) return false;
    k->rem[j] -= s->ext[b];
    sky_set(k, j, k->rem[j] ? end : UINT64_MAX);
  }
  s->work += 4 * (k->sh[b] - k->sl[b]);
  return sky_run_ok(k, k->sl[b] - 1) && sky_run_ok(k, k->sl[b]) && sky_run_ok(k, k->sh[b]);
}

static void sky_unapply(Sky *k, SkyLevel *lv) {
  int b = lv->kids[lv->c];
  if (b >= 0) k->placed[b] = false;
  sky_undo(k, lv->mark);
  lv->done = false;
}

/* Depth first under k->limit with discrepancy budget disc (child c
 * costs c of it); true with the placement in k->off when one completes. */
static bool sky_descend(Sky *k, SkyLevel *path, int disc) {
  sky_reset(k);
  bool complete;
  if (!sky_enter(k, &path[0], disc, &complete)) return complete;
  int d = 0;
  while (d >= 0) {
    SkyLevel *lv = &path[d];
    if (lv->done) {
      sky_unapply(k, lv);
      lv->c++;
    }
    if (lv->c >= lv->nk || lv->c > lv->disc) {
      d--;
      continue;
    }
    if (!sky_apply(k, lv)) continue;
    if (d + 1 >= k->path_cap) continue; /* not reached (sky_search's bound); never past the path */
    if (sky_enter(k, &path[d + 1], lv->disc - lv->c, &complete)) d++;
    else if (complete) return true;
  }
  return false;
}

/* Looks for a top below *best within budget work, under limits rising
 * from the bound; true with the offsets in best_off when it finds one. */
static bool sky_search(Solver *s, uint64_t *best, uint64_t *best_off, int64_t budget) {
  Sky k;
  sky_init(&k, s);
  /* the path: a placement per buffer, and a waste per run it merges.
   * The runs start as one and each placement adds at most two (it
   * raises the start of a run, and may close sections inside it), so
   * the wastes number at most n_sec + 2 m; and sky_enter fills the
   * level after the deepest. */
  k.path_cap = 3 * (int64_t)s->m + k.n_sec + 3;
  SkyLevel *path = ARENA_ARRAY(s->a, SkyLevel, k.path_cap);
  static const double steps[] = {1.0, 1.01, 1.03, 1.06, 1.10, 1.15, 1.25};
  int n_steps = (int)(sizeof steps / sizeof steps[0]);
  int64_t end = s->work + budget;
  bool found = false;
  for (int t = 0; t < n_steps && !found && s->work < end && *best > s->lb; t++) {
    uint64_t limit = (uint64_t)((double)s->lb * steps[t]);
    k.limit = limit >= *best ? *best - 1 : limit < s->lb ? s->lb : limit;
    /* each limit gets an equal share of what is left */
    k.stop = s->work + (end - s->work) / (n_steps - t);
    /* more discrepancies than levels add nothing */
    for (int disc = 0; disc <= s->m + k.n_sec && s->work < k.stop && !k.no_memory && !found; disc++) {
      if (!sky_descend(&k, path, disc)) continue;
      uint64_t top = 0;
      for (int i = 0; i < s->m; i++)
        if (k.off[i] + s->ext[i] > top) top = k.off[i] + s->ext[i];
      if (top < *best) {
        *best = top;
        memcpy(best_off, k.off, sizeof(uint64_t) * (size_t)s->m);
        found = true;
      }
      break;
    }
  }
  free(k.u_sec);
  free(k.u_floor);
  free(k.u_rem);
  return found;
}

/* ---- coalescing ---- */

/* Buffers live over the same steps can be stacked into one, and a
 * buffer that starts as one of the same extent ends can take over its
 * bytes; either way the merged buffer's placement gives its members
 * theirs, and the live total at every step (so the bound) is unchanged.
 * Repeated to a fixpoint this undoes a cutting of a rectangle of time x
 * bytes into pieces, the problems whose bound is their optimum and
 * where the searches above stay 1.2-1.5x off; on other problems it is a
 * restriction, so the solver keeps whichever plan is smaller.  Nodes
 * 0..n) are the caller's buffers, later ones the merges; a node's
 * members sit at rel bytes above it. */
typedef struct Coal {
  int n_node;
  int64_t *lo, *hi;
  uint64_t *ext, *al, *rel;
  int *parent;
  int *roots; /* the merged problem: nodes without a parent */
  int n_root;
} Coal;

typedef struct CoalKey {
  int64_t t1, t2;
  uint64_t ext;
  int node;
} CoalKey;

static int cmp_coal(const void *pa, const void *pb) {
  const CoalKey *a = pa, *b = pb;
  if (a->t1 != b->t1) return a->t1 < b->t1 ? -1 : 1;
  if (a->t2 != b->t2) return a->t2 < b->t2 ? -1 : 1;
  if (a->ext != b->ext) return a->ext < b->ext ? -1 : 1;
  return (a->node > b->node) - (a->node < b->node);
}

static int coal_new(Coal *c, int64_t lo, int64_t hi, uint64_t ext, uint64_t al) {
  int k = c->n_node++;
  c->lo[k] = lo, c->hi[k] = hi, c->ext[k] = ext, c->al[k] = al, c->parent[k] = -1;
  return k;
}

static void coal_adopt(Coal *c, int parent, int child, uint64_t rel) {
  c->parent[child] = parent, c->rel[child] = rel;
}

static void coal_keys(const Coal *c, CoalKey *ends, CoalKey *starts) {
  int n = c->n_root;
  for (int i = 0; i < n; i++) {
    int x = c->roots[i];
    ends[i] = (CoalKey){c->hi[x], 0, c->ext[x], x};
    starts[i] = (CoalKey){c->lo[x], 0, c->ext[x], x};
  }
  qsort(ends, (size_t)n, sizeof *ends, cmp_coal);
  qsort(starts, (size_t)n, sizeof *starts, cmp_coal);
}

/* Stacks roots with equal steps whose extents keep each other's
 * alignment.  Targeted (sums given): only a subset, of a run of at most
 * COAL_SUBSET roots, whose extents add up to those of some run's subset
 * ending where it starts or starting where it ends: the bytes one hands
 * to the other, which the join then merges; else every run whole.
 * Returns the merges. */
/* A run of k roots gives 2^k - 1 sums, at most 11 a root for k <= 6. */
enum { COAL_SUBSET = 6, COAL_SUMS = 11 };

typedef struct CoalSum {
  int64_t t;
  uint64_t sum;
} CoalSum;

static int cmp_sum(const void *pa, const void *pb) {
  const CoalSum *a = pa, *b = pb;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return (a->sum > b->sum) - (a->sum < b->sum);
}

static bool coal_has_sum(const CoalSum *k, int64_t n, int64_t t, uint64_t sum) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (k[mid].t < t || (k[mid].t == t && k[mid].sum < sum)) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && k[lo].t == t && k[lo].sum == sum;
}

static uint64_t coal_subset_sum(const Coal *c, const CoalKey *k, uint32_t mask) {
  uint64_t sum = 0;
  for (int q = 0; mask; q++, mask >>= 1)
    if (mask & 1) sum += c->ext[k[q].node];
  return sum;
}

/* The runs of roots with equal steps in k (sorted); false when some
 * extent could overflow a sum or break another's alignment. */
static bool coal_run_ok(const Coal *c, const CoalKey *k, int cnt, uint64_t *al) {
  *al = 1;
  for (int q = 0; q < cnt; q++)
    if (c->al[k[q].node] > *al) *al = c->al[k[q].node];
  for (int q = 0; q < cnt; q++)
    if (c->ext[k[q].node] % *al || c->ext[k[q].node] > UINT64_MAX / 64 / (uint64_t)cnt) return false;
  return true;
}

/* ends and starts (NULL: untargeted) hold COAL_SUMS entries a root. */
static int coal_stack(Coal *c, CoalKey *k, CoalSum *ends, CoalSum *starts) {
  bool targeted = ends != NULL;
  int n = c->n_root, merges = 0;
  for (int i = 0; i < n; i++) {
    int x = c->roots[i];
    k[i] = (CoalKey){c->lo[x], c->hi[x], 0, x};
  }
  qsort(k, (size_t)n, sizeof *k, cmp_coal);
  int64_t n_sum = 0;
  if (targeted) {
    for (int i = 0, j; i < n; i = j) {
      for (j = i; j < n && k[j].t1 == k[i].t1 && k[j].t2 == k[i].t2; j++) {}
      uint64_t al;
      if (j - i > COAL_SUBSET || !coal_run_ok(c, k + i, j - i, &al)) continue;
      for (uint32_t mask = 1; mask < 1u << (j - i); mask++, n_sum++) {
        uint64_t sum = coal_subset_sum(c, k + i, mask);
        ends[n_sum] = (CoalSum){k[i].t2, sum};
        starts[n_sum] = (CoalSum){k[i].t1, sum};
      }
    }
    qsort(ends, (size_t)n_sum, sizeof *ends, cmp_sum);
    qsort(starts, (size_t)n_sum, sizeof *starts, cmp_sum);
  }
  for (int i = 0, j; i < n; i = j) {
    for (j = i; j < n && k[j].t1 == k[i].t1 && k[j].t2 == k[i].t2; j++) {}
    int cnt = j - i;
    uint64_t al;
    if (cnt < 2 || (targeted && cnt > COAL_SUBSET) || !coal_run_ok(c, k + i, cnt, &al)) continue;
    uint32_t pick = 0; /* untargeted: every root of the run */
    if (targeted) {
      for (uint32_t mask = 3; mask < 1u << cnt && !pick; mask++) {
        if (!(mask & (mask - 1))) continue;
        uint64_t sum = coal_subset_sum(c, k + i, mask);
        if (coal_has_sum(ends, n_sum, k[i].t1, sum) || coal_has_sum(starts, n_sum, k[i].t2, sum)) pick = mask;
      }
      if (!pick) continue;
    }
    int p = coal_new(c, k[i].t1, k[i].t2, 0, al);
    for (int q = 0; q < cnt; q++)
      if (!targeted || (pick >> q & 1)) coal_adopt(c, p, k[i + q].node, c->ext[p]), c->ext[p] += c->ext[k[i + q].node];
    merges++;
  }
  return merges;
}

/* Joins a root ending at some step to one of the same extent starting
 * there (pairs in order of node, each root in one pair a round). */
static int coal_chain(Coal *c, CoalKey *ends, CoalKey *starts) {
  int n = c->n_root, merges = 0;
  coal_keys(c, ends, starts);
  for (int i = 0, j = 0; i < n && j < n;) {
    CoalKey *e = &ends[i], *s = &starts[j];
    if (e->t1 != s->t1 || e->ext != s->ext) {
      if (e->t1 < s->t1 || (e->t1 == s->t1 && e->ext < s->ext)) i++;
      else j++;
      continue;
    }
    int x = e->node, y = s->node;
    /* a root merged already this round has a parent now */
    if (c->parent[x] >= 0) { i++; continue; }
    if (c->parent[y] >= 0 || x == y) { j++; continue; }
    uint64_t al = c->al[x] > c->al[y] ? c->al[x] : c->al[y];
    int p = coal_new(c, c->lo[x], c->hi[y], e->ext, al);
    coal_adopt(c, p, x, 0);
    coal_adopt(c, p, y, 0);
    merges++, i++, j++;
  }
  return merges;
}

/* The roots after a merge step: the old ones still without a parent,
 * then the nodes it made (from first on). */
static void coal_roots(Coal *c, int first) {
  int n = 0;
  for (int i = 0; i < c->n_root; i++)
    if (c->parent[c->roots[i]] < 0) c->roots[n++] = c->roots[i];
  for (int x = first; x < c->n_node; x++) c->roots[n++] = x;
  c->n_root = n;
}

/* Merges to a fixpoint (or COAL_WORK roots a buffer); false when
 * nothing merged. */
enum { COAL_WORK = 40 };

static bool coalesce(Arena *a, const MemBuf *bufs, int n, Coal *c) {
  memset(c, 0, sizeof *c);
  int cap = 2 * n + 1;
  c->lo = ARENA_ARRAY(a, int64_t, cap);
  c->hi = ARENA_ARRAY(a, int64_t, cap);
  c->ext = ARENA_ARRAY(a, uint64_t, cap);
  c->al = ARENA_ARRAY(a, uint64_t, cap);
  c->rel = ARENA_ARRAY(a, uint64_t, cap);
  c->parent = ARENA_ARRAY(a, int, cap);
  c->roots = ARENA_ARRAY(a, int, cap);
  CoalKey *k1 = ARENA_ARRAY(a, CoalKey, n + 1), *k2 = ARENA_ARRAY(a, CoalKey, n + 1);
  CoalKey *k3 = ARENA_ARRAY(a, CoalKey, n + 1);
  CoalSum *ends = ARENA_ARRAY(a, CoalSum, COAL_SUMS * (int64_t)n + 1);
  CoalSum *starts = ARENA_ARRAY(a, CoalSum, COAL_SUMS * (int64_t)n + 1);
  for (int i = 0; i < n; i++) {
    const MemBuf *b = &bufs[i];
    uint64_t al = b->align > 1 ? b->align : 1;
    coal_new(c, b->lower, b->upper, b->size && b->lower < b->upper ? align_up(b->size, al) : 0, al);
    if (c->ext[i]) c->roots[c->n_root++] = i;
  }
  /* joins first: two buffers of one extent meeting at a step rarely do
   * by chance, while equal steps often do */
  int total = 0;
  /* a round sorts the roots; a problem built to merge one pair a round
   * would make that quadratic, so the rounds share a budget (problems
   * cut from a rectangle use 3-5 times the buffers) */
  int64_t work = 0;
  for (; work <= COAL_WORK * (int64_t)n; work += c->n_root) {
    int first = c->n_node;
    int merges = coal_chain(c, k1, k2);
    coal_roots(c, first);
    if (!merges) {
      first = c->n_node;
      merges = coal_stack(c, k3, ends, starts);
      coal_roots(c, first);
    }
    if (!merges) {
      first = c->n_node;
      merges = coal_stack(c, k3, NULL, NULL);
      coal_roots(c, first);
    }
    total += merges;
    if (!merges) break;
  }
  return total > 0;
}

/* ---- the interface ---- */

uint64_t pass_memplan_lower_bound(Arena *a, const MemBuf *bufs, int n) {
  Solver s;
  solver_init(&s, a, bufs, n);
  return s.lb;
}

static void solve_direct(Arena *a, MemBuf *bufs, int n, const MemPlanOptions *o, MemPlanResult *r) {
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
    if (sky_search(&s, &best, off2, budget / 4)) {
      memcpy(best_off, off2, sizeof(uint64_t) * (size_t)m);
      how = "+skyline";
    }
    if (best > s.lb && m <= BB_MAX_BUFFERS && bb_search(&s, &best, off2, budget / 2)) {
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

/* The problem as given first, with the whole budget; where that misses
 * the bound, the merged problem with half of it, kept where smaller.
 * Not the other way round: a merged buffer hands its bytes on to the
 * next of its extent, so steps that could run side by side (separate
 * streams) would wait on each other where the plain plan reaches the
 * bound anyway (every example's). */
void pass_memplan_solve(Arena *a, MemBuf *bufs, int n, const MemPlanOptions *opt,
                        MemPlanResult *r) {
  MemPlanOptions none = {0};
  const MemPlanOptions *o = opt ? opt : &none;
  solve_direct(a, bufs, n, o, r);
  Coal c;
  if (o->greedy_only || o->budget < 0 || r->arena <= r->lower_bound || !coalesce(a, bufs, n, &c)) return;
  MemBuf *mb = ARENA_ARRAY(a, MemBuf, c.n_root + 1);
  for (int i = 0; i < c.n_root; i++) {
    int x = c.roots[i];
    mb[i] = (MemBuf){.id = x, .lower = c.lo[x], .upper = c.hi[x], .size = c.ext[x], .align = c.al[x]};
  }
  MemPlanOptions mo = *o;
  mo.budget = (o->budget > 0 ? o->budget : DEFAULT_BUDGET) / 2;
  MemPlanResult rc;
  solve_direct(a, mb, c.n_root, &mo, &rc);
  if (rc.arena >= r->arena) return;
  uint64_t *off = ARENA_ARRAY(a, uint64_t, c.n_node + 1);
  for (int i = 0; i < c.n_root; i++) off[c.roots[i]] = mb[i].offset;
  for (int x = c.n_node - 1; x >= 0; x--)
    if (c.parent[x] >= 0) off[x] = off[c.parent[x]] + c.rel[x];
  for (int i = 0; i < n; i++) bufs[i].offset = c.ext[i] ? off[i] : 0;
  r->arena = rc.arena;
  r->iterations += rc.iterations;
  r->heuristic = arena_printf(a, "coalesced %d->%d, %s", n, c.n_root, rc.heuristic);
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
