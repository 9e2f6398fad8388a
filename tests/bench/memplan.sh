#!/bin/sh
# make bench, the memory planner's part: for every example, the arena the
# planner gives at -O0 and -O2 against no reuse (naive) and against the
# lower bound (the most bytes live at one step); then the solver alone on
# generated hard problems and on the sample problems of tests/memplan.
# Figures, not pass/fail: a benchmark, not a test.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
dlcc=$top_builddir/dlcc

echo "memory plans of the examples (bytes; ratios to the lower bound and naive/arena)"
printf '  %-16s %-3s %11s %11s %11s %11s %11s %9s  %s\n' example opt naive arena bound arena/bound naive/arena in-place heuristic
for ex in "$top_srcdir"/examples/*.dl; do
  name=$(basename "$ex")
  for O in 0 2; do
    "$dlcc" "$ex" -O$O --emit=plan --stats -o /dev/null 2>&1 | awk -v name="$name" -v opt="-O$O" '
      / plan: arena bytes/ { arena = $1 }
      / memplan: naive bytes/ { naive = $1 }
      / memplan: lower bound bytes/ { bound = $1 }
      / memplan: outputs written in place/ { inplace = $1 }
      / memplan: heuristic/ { heur = $NF }
      END {
        if (bound == "") { printf "  %-16s %-3s (no plan)\n", name, opt; exit }
        printf "  %-16s %-3s %11d %11d %11d %11.3f %11.2f %9d  %s\n", name, opt, naive, arena, bound,
               bound ? arena / bound : 1, arena ? naive / arena : 1, inplace, heur
      }'
  done
done
echo
"$top_builddir"/tests/bench/memplan_bench 3
echo
for f in "$top_srcdir"/tests/memplan/*.csv; do
  echo "dlcc memplan $(basename "$f"):"
  "$dlcc" memplan "$f" --summary | sed 's/^/  /'
  echo "  greedy by size alone:"
  "$dlcc" memplan "$f" --summary --greedy | sed -n 1p | sed 's/^/  /'
done
