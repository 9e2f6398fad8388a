/* The memory planner's benchmark on generated problems (tests/bench/
 * memplan.h): takes nothing (or a count and a seed), prints for each kind
 * of problem and size the lower bound, greedy by size alone, our solver,
 * their ratios to the bound, and the time each took. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/arena.h"
#include "passes/memplan.h"
#include "tests/bench/memplan.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void run(GenKind kind, int n, int live, int seeds) {
  double base_sum = 0, ours_sum = 0, worst = 0, t_greedy = 0, t_solve = 0;
  int64_t iters = 0;
  for (int seed = 1; seed <= seeds; seed++) {
    Arena a;
    arena_init(&a);
    MemBuf *b = gen_problem(&a, kind, n, live, (uint64_t)seed);
    MemPlanResult base, ours;
    double t0 = now_ms();
    pass_memplan_solve(&a, b, n, &(MemPlanOptions){.greedy_only = true}, &base);
    double t1 = now_ms();
    pass_memplan_solve(&a, b, n, NULL, &ours);
    double t2 = now_ms();
    t_greedy += t1 - t0, t_solve += t2 - t1;
    double rb = (double)base.arena / (double)ours.lower_bound;
    double ro = (double)ours.arena / (double)ours.lower_bound;
    base_sum += rb, ours_sum += ro, iters += ours.iterations;
    if (ro > worst) worst = ro;
    arena_free(&a);
  }
  printf("  %-9s n=%-7d  greedy-by-size %.3f  ours %.3f (worst %.3f)  %8.1f ms greedy  %8.1f ms solve  %lld moves\n",
         gen_names[kind], n, base_sum / seeds, ours_sum / seeds, worst, t_greedy / seeds,
         t_solve / seeds, (long long)(iters / seeds));
}

int main(int argc, char **argv) {
  int seeds = argc > 1 ? atoi(argv[1]) : 5;
  printf("memory planner on generated problems (arena / lower bound, mean of %d seeds)\n", seeds);
  static const int sizes[] = {100, 1000, 10000};
  for (int k = 0; k < GEN_COUNT; k++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) run((GenKind)k, sizes[s], 32, seeds);
  run(GEN_RANDOM, 100000, 32, 1);
  run(GEN_DNN, 100000, 32, 1);
  return 0;
}
