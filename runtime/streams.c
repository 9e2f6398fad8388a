/* Side streams (runtime.h says the contract): takes a stretch of a
 * plan's steps, returns the lane each runs on and the events that order
 * the lanes, so that a captured graph runs independent steps side by
 * side.
 *
 * Two steps conflict when they touch a common byte and one of them
 * writes it (the memory planner reuses arena bytes in step order, so a
 * write after a read of reused bytes is a conflict like any other).  The
 * conflicts are found with a list of the byte ranges touched so far, each
 * with its last step: a write that covers a range drops it, since
 * anything later that touches those bytes meets the covering write,
 * which is itself ordered after the dropped one; the list stays about as
 * long as the number of live buffers.
 *
 * Each lane keeps a vector clock: for every lane, the last of its steps
 * this lane is known to run after.  A conflict with a step its lane
 * already follows costs nothing; the others cost one event each (only
 * the latest per lane: a lane runs in order). */
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

enum { MAX_LANES = 8, MAX_RANGES = 64 };

typedef struct Touch {
  RtRef ref;
  uint64_t end; /* ref.offset + bytes */
  uint32_t step;
  bool write;
} Touch;

typedef struct Touches {
  Touch *t;
  uint32_t n, cap;
} Touches;

static bool same_space(RtRef a, RtRef b) { return a.space == b.space && a.index == b.index; }

static bool add_touch(Touches *ts, Touch t) {
  if (t.write) { /* a covering write replaces what it covers */
    uint32_t k = 0;
    for (uint32_t i = 0; i < ts->n; i++) {
      const Touch *o = &ts->t[i];
      bool covered = same_space(o->ref, t.ref) && o->ref.offset >= t.ref.offset && o->end <= t.end;
      if (!covered) ts->t[k++] = *o;
    }
    ts->n = k;
  }
  if (ts->n == ts->cap) {
    uint32_t cap = ts->cap ? 2 * ts->cap : 64;
    Touch *grown = realloc(ts->t, sizeof *grown * cap);
    if (!grown) return false;
    ts->t = grown, ts->cap = cap;
  }
  ts->t[ts->n++] = t;
  return true;
}

/* A step that waits for every lane and runs on lane 0: one whose ranges
 * are unknown, a cooperative launch (it needs every block resident, so
 * nothing may run beside it), an all-reduce (the host's communicator). */
static bool is_barrier(const RtPlan *p, const RtStep *s, int n_ranges) {
  if (n_ranges < 0 || s->kind == RT_STEP_ALLREDUCE) return true;
  return s->kind == RT_STEP_LAUNCH && p->kernels[s->launch.kernel].cooperative;
}

typedef struct Planner {
  uint32_t lanes;
  int64_t tail[MAX_LANES];           /* the last step on each lane, -1 none */
  int64_t known[MAX_LANES][MAX_LANES]; /* known[L][K]: lane L runs after lane K's steps up to this */
  int64_t *clock;                    /* [n][MAX_LANES]: known[lane] as each step was placed */
  bool *dep;                         /* [n]: the current step's conflicts */
} Planner;

/* Lane L waits for step i (on lane K): an event after i, unless L
 * already follows it. */
static bool wait_for(Planner *pl, RtStreamPlan *b, uint32_t L, uint32_t i, uint32_t *n_waits, uint32_t *cap) {
  uint32_t K = b->step[i].lane;
  if (K == L || pl->known[L][K] >= (int64_t)i) return true;
  if (b->step[i].mark < 0) b->step[i].mark = (int32_t)b->n_events++;
  if (*n_waits == *cap) {
    uint32_t c = *cap ? 2 * *cap : 64;
    int32_t *grown = realloc(b->waits, sizeof *grown * c);
    if (!grown) return false;
    b->waits = grown, *cap = c;
  }
  b->waits[(*n_waits)++] = b->step[i].mark;
  for (uint32_t k = 0; k < pl->lanes; k++)
    if (pl->clock[i * MAX_LANES + k] > pl->known[L][k]) pl->known[L][k] = pl->clock[i * MAX_LANES + k];
  pl->known[L][K] = i;
  return true;
}

/* The lane for a step with conflicts dep[]: the lane of its latest
 * conflict that is still its lane's last step, else an unused lane, else
 * the lane idle longest. */
static uint32_t choose_lane(const Planner *pl, const RtStreamPlan *b, uint32_t j) {
  for (int64_t i = (int64_t)j - 1; i >= 0; i--)
    if (pl->dep[i] && pl->tail[b->step[i].lane] == i) return b->step[i].lane;
  uint32_t best = 0;
  for (uint32_t L = 0; L < pl->lanes; L++) {
    if (pl->tail[L] < 0) return L;
    if (pl->tail[L] < pl->tail[best]) best = L;
  }
  return best;
}

int rt_stream_plan(const RtPlan *p, uint32_t first, uint32_t n, uint32_t max_lanes, RtStreamPlan *out) {
  memset(out, 0, sizeof *out);
  out->first = first, out->n = n, out->lanes = 1;
  if (!n) return 0;
  Planner pl = {.lanes = max_lanes < 1 ? 1 : max_lanes > MAX_LANES ? MAX_LANES : max_lanes};
  out->step = calloc(n, sizeof *out->step);
  pl.clock = malloc(sizeof *pl.clock * n * MAX_LANES);
  pl.dep = malloc(n);
  Touches ts = {0};
  bool ok = out->step && pl.clock && pl.dep;
  for (uint32_t L = 0; L < MAX_LANES; L++) {
    pl.tail[L] = -1;
    for (uint32_t K = 0; K < MAX_LANES; K++) pl.known[L][K] = -1;
  }
  uint32_t n_waits = 0, cap = 0;
  int64_t last_barrier = -1; /* everything after it waits for it */
  RtAccessRange r[MAX_RANGES];
  for (uint32_t j = 0; ok && j < n; j++) {
    const RtStep *s = &p->steps[first + j];
    int nr = rt_step_access(p, s, r, MAX_RANGES);
    bool barrier = is_barrier(p, s, nr);
    memset(pl.dep, 0, j);
    for (uint32_t t = 0; t < ts.n; t++)
      for (int k = 0; k < nr && !barrier; k++) {
        const Touch *o = &ts.t[t];
        if ((o->write || r[k].write) && same_space(o->ref, r[k].ref) && o->ref.offset < r[k].ref.offset + r[k].nbytes &&
            r[k].ref.offset < o->end)
          pl.dep[o->step] = true;
      }
    if (barrier)
      for (uint32_t L = 0; L < pl.lanes; L++)
        if (pl.tail[L] >= 0) pl.dep[pl.tail[L]] = true;
    if (last_barrier >= 0) pl.dep[last_barrier] = true;
    uint32_t L = barrier ? 0 : choose_lane(&pl, out, j);
    RtStreamStep *bs = &out->step[j];
    bs->lane = L, bs->mark = -1, bs->wait_first = n_waits;
    /* the latest conflict first: a lane's earlier steps come with it */
    for (int64_t i = (int64_t)j - 1; ok && i >= 0; i--)
      if (pl.dep[i]) ok = wait_for(&pl, out, L, (uint32_t)i, &n_waits, &cap);
    bs->n_waits = n_waits - bs->wait_first;
    pl.known[L][L] = j;
    pl.tail[L] = j;
    memcpy(&pl.clock[(size_t)j * MAX_LANES], pl.known[L], sizeof pl.known[L]);
    if (L + 1 > out->lanes) out->lanes = L + 1;
    if (barrier) { /* it follows everything: what came before is tracked through it */
      ts.n = 0;
      last_barrier = j;
      continue;
    }
    for (int k = 0; ok && k < nr; k++)
      ok = add_touch(&ts, (Touch){r[k].ref, r[k].ref.offset + r[k].nbytes, j, r[k].write});
  }
  /* The lanes join lane 0 at the end (a capture ends on its origin
   * stream), and leave it at the start: a lane's first step waits for
   * the fork, an event recorded on lane 0 before the first step. */
  out->join_first = n_waits;
  for (uint32_t L = 1; ok && L < out->lanes; L++)
    if (pl.tail[L] >= 0) ok = wait_for(&pl, out, 0, (uint32_t)pl.tail[L], &n_waits, &cap);
  out->n_joins = n_waits - out->join_first;
  out->fork = out->lanes > 1 ? (int32_t)out->n_events++ : -1;
  free(ts.t);
  free(pl.clock);
  free(pl.dep);
  if (!ok) {
    rt_stream_plan_free(out);
    return -1;
  }
  return 0;
}

void rt_stream_plan_free(RtStreamPlan *b) {
  free(b->step);
  free(b->waits);
  memset(b, 0, sizeof *b);
}
