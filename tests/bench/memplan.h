/* Generators of allocation problems for the memory planner's tests and
 * benchmark: take a count and a seed, return MemBufs in an arena (the
 * same seed, the same problem).  Sizes and lifetimes are heavy-tailed,
 * where greedy by size alone lands well above the lower bound. */
#ifndef DLCC_TESTS_BENCH_MEMPLAN_H
#define DLCC_TESTS_BENCH_MEMPLAN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/arena.h"
#include "passes/memplan.h"

typedef enum {
  GEN_RANDOM,    /* random starts, Pareto lifetimes, Pareto sizes */
  GEN_PAIRS,     /* a path: each buffer overlaps only the one before and after */
  GEN_STAIRS,    /* sliding windows with sizes rising then falling */
  GEN_DNN,       /* one output per step, read 1-3 steps later, sometimes much later (skips) */
  GEN_SAWTOOTH,  /* large short buffers over small staggered long ones */
  GEN_PERFECT,   /* a rectangle of time x bytes cut at random into n: optimum == bound */
  GEN_COUNT
} GenKind;

static const char *const gen_names[GEN_COUNT] = {"random", "pairs", "stairs", "dnn", "sawtooth", "perfect"};

typedef struct GenRng {
  uint64_t x;
} GenRng;

static inline uint64_t gen_next(GenRng *r) {
  r->x ^= r->x << 13, r->x ^= r->x >> 7, r->x ^= r->x << 17;
  return r->x * 0x2545f4914f6cdd1dull;
}

/* uniform in (0, 1] */
static inline double gen_u(GenRng *r) { return ((double)(gen_next(r) >> 11) + 1) / 9007199254740992.0; }

/* Pareto with scale xm and shape alpha, capped. */
static inline double gen_pareto(GenRng *r, double xm, double alpha, double cap) {
  double v = xm * pow(gen_u(r), -1.0 / alpha);
  return v > cap ? cap : v;
}

/* GEN_PERFECT: guillotine cuts of [0, T) x [0, H) until there are n
 * pieces, always cutting the piece with the largest area (ties: the
 * first), across time or bytes at random where both are possible.  The
 * pieces tile the rectangle, so the live total is H at every step: the
 * lower bound is reached exactly by the placement that cut them. */
static inline void gen_perfect(GenRng *r, MemBuf *b, int n) {
  int64_t T = 4 * (int64_t)n, H = 1 << 20;
  b[0] = (MemBuf){.id = 0, .lower = 0, .upper = T, .size = (uint64_t)H, .align = 1};
  for (int k = 1; k < n; k++) {
    int best = -1;
    double area = -1;
    for (int i = 0; i < k; i++) {
      double a = (double)(b[i].upper - b[i].lower) * (double)b[i].size;
      bool can = b[i].upper - b[i].lower > 1 || b[i].size > 1;
      if (can && a > area) area = a, best = i;
    }
    if (best < 0) break;
    MemBuf *x = &b[best], y = *x;
    int64_t len = x->upper - x->lower;
    bool in_time = x->size < 2 || (len > 1 && (gen_next(r) & 1));
    /* cut between 20% and 80% so pieces stay varied but not slivers */
    double f = 0.2 + 0.6 * gen_u(r);
    if (in_time) {
      int64_t cut = x->lower + 1 + (int64_t)(f * (double)(len - 1));
      if (cut >= x->upper) cut = x->upper - 1;
      x->upper = cut, y.lower = cut;
    } else {
      uint64_t cut = 1 + (uint64_t)(f * (double)(x->size - 1));
      if (cut >= x->size) cut = x->size - 1;
      y.size = x->size - cut, x->size = cut;
      y.offset = x->offset + cut;
    }
    y.id = k;
    b[k] = y;
  }
}

/* live: about how many buffers are live at once (GEN_RANDOM). */
static inline MemBuf *gen_problem(Arena *a, GenKind kind, int n, int live, uint64_t seed) {
  GenRng r = {seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull};
  MemBuf *b = ARENA_ARRAY(a, MemBuf, n + 1);
  if (kind == GEN_PERFECT) {
    gen_perfect(&r, b, n);
    return b;
  }
  for (int i = 0; i < n; i++) {
    MemBuf *x = &b[i];
    x->id = i;
    x->align = 1;
    switch (kind) {
      case GEN_RANDOM: {
        /* mean lifetime of the capped Pareto(2, 1.3) is about 7 */
        int64_t steps = (int64_t)n * 7 / (live > 0 ? live : 32) + 1;
        x->lower = (int64_t)(gen_next(&r) % (uint64_t)steps);
        x->upper = x->lower + 1 + (int64_t)gen_pareto(&r, 2, 1.3, (double)steps / 4);
        x->size = (uint64_t)gen_pareto(&r, 64, 1.1, 1 << 22);
        break;
      }
      case GEN_PAIRS:
        x->lower = i;
        x->upper = i + 2;
        x->size = (uint64_t)gen_pareto(&r, 64, 1.0, 1 << 22);
        break;
      case GEN_STAIRS: {
        int w = 8;
        x->lower = i;
        x->upper = i + w;
        int k = i % (2 * w);
        x->size = (uint64_t)(64 * (1 + (k < w ? k : 2 * w - k)) + gen_next(&r) % 64);
        break;
      }
      case GEN_DNN: {
        x->lower = i;
        int64_t use = 1 + (int64_t)(gen_next(&r) % 3);
        if (gen_next(&r) % 8 == 0) use += (int64_t)gen_pareto(&r, 4, 1.2, 200);
        x->upper = i + 1 + use;
        /* stages shrink spatially and grow in channels: sizes swing by 16x */
        double phase = sin((double)i / 37.0) * 2.0;
        x->size = (uint64_t)(4096.0 * pow(2.0, phase) * (0.5 + gen_u(&r)));
        break;
      }
      case GEN_SAWTOOTH:
        if (i % 3 == 0) {
          x->lower = i / 3;
          x->upper = i / 3 + 2;
          x->size = (uint64_t)gen_pareto(&r, 4096, 1.5, 1 << 20);
        } else {
          x->lower = i / 3;
          x->upper = i / 3 + 3 + (int64_t)(gen_next(&r) % 12);
          x->size = (uint64_t)gen_pareto(&r, 256, 1.5, 1 << 16);
        }
        break;
      case GEN_PERFECT:
      case GEN_COUNT: break;
    }
    if (x->size == 0) x->size = 1;
  }
  return b;
}

#endif
