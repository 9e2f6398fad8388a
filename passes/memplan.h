/* The memory planner's core, independent of the IR: takes buffers, each
 * live over a half-open range of steps [lower, upper) with a size and an
 * alignment, returns an offset for each in one arena so that buffers
 * live at the same step never share a byte, and the arena's size.  The
 * plan builder (codegen/plan_build.c) feeds it every activation buffer;
 * `dlcc memplan FILE.csv` feeds it problems from outside.
 *
 * A buffer occupies its extent: its size rounded up to its alignment,
 * at an offset that is a multiple of its alignment.  The lower bound is
 * the largest total of extents live at one step; no placement beats it.
 * A solve runs several greedy orders (by size, lifetime, size
 * x lifetime, start, peak pressure; first-fit and best-fit), keeps the
 * best, then improves it under a work budget: a skyline search (bottom-
 * left placements along the time axis, which finds tight packings),
 * a branch and bound over canonical placements (up to a few thousand
 * buffers), then a seeded local search on the greedy order.  Where
 * that misses the bound, it solves again with half the budget a smaller
 * problem (coalesced: a buffer that starts where one of the same extent
 * ends takes over its bytes, buffers live over the same steps stack) and
 * keeps the smaller plan.  Work, not time, bounds them all, so the same
 * problem always gets the same offsets. */
#ifndef DLCC_PASSES_MEMPLAN_H
#define DLCC_PASSES_MEMPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/arena.h"

typedef struct MemBuf {
  int64_t id;           /* the caller's name for it, for messages */
  int64_t lower, upper; /* live over steps [lower, upper); empty: never live */
  uint64_t size;        /* bytes; 0: needs none */
  uint64_t align;       /* 0 or 1: any offset */
  uint64_t offset;      /* the answer; 0 for empty or zero-size buffers */
} MemBuf;

typedef struct MemPlanOptions {
  uint64_t seed;    /* local search; 0: a fixed default */
  int64_t budget;   /* local search work (neighbour visits); 0: default, < 0: no search */
  double time_ms;   /* > 0: also stop the search after this long (then not reproducible) */
  bool greedy_only; /* only the by-size best-fit greedy: the baseline */
} MemPlanOptions;

typedef struct MemPlanResult {
  uint64_t arena;       /* max over buffers of offset + extent */
  uint64_t lower_bound; /* max over steps of the live extents' sum */
  uint64_t greedy;      /* arena of the best greedy order, before the search */
  const char *heuristic; /* which order won: "size/best-fit", "peak/first-fit+search" ... */
  int64_t iterations;   /* local search moves tried */
  int64_t edges;        /* pairs of buffers live at a common step */
} MemPlanResult;

/* Places bufs[0..n) (writes each offset).  Scratch comes from a and
 * stays there until the caller frees it. */
void pass_memplan_solve(Arena *a, MemBuf *bufs, int n, const MemPlanOptions *o,
                        MemPlanResult *r);

uint64_t pass_memplan_lower_bound(Arena *a, const MemBuf *bufs, int n);

/* Checks a placement: every offset a multiple of its alignment, and no
 * two buffers live at a common step share a byte of [offset, offset +
 * size), unless may_share(data, i, j) says that pair may (NULL: none
 * may).  False with the first bad pair in *bad_i, *bad_j (bad_j == -1:
 * bufs[bad_i] is misaligned). */
bool pass_memplan_check(Arena *a, const MemBuf *bufs, int n,
                        bool (*may_share)(void *data, int i, int j), void *data, int *bad_i,
                        int *bad_j);

#endif
