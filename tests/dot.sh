#!/bin/sh
# --emit=dot: the exact picture of a small model (weights inside the op
# that uses them, a cluster per `as` scope, --dot-depth), after fusion a
# node per kernel with each run step's launch and bytes, and every
# example rendered by Graphviz under a generous timeout (the rendering
# is skipped without Graphviz's dot).
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
src="${top_srcdir:-.}"
net="$src/tests/dot/net.dl"

# same WANT FILE: FILE is WANT, else the difference.
same() {
  if cmp -s "$1" "$2"; then ok; else fail "$2 differs from $1:"; diff "$1" "$2"; fi
}

expect 0 "" "$dlcc" "$net" -O0 --emit=dot -o "$tmp/o0.dot"
same "$src/tests/dot/net.O0.dot" "$tmp/o0.dot"
expect 0 "" "$dlcc" "$net" -O0 --emit=dot --dot-depth=0 -o "$tmp/d0.dot"
same "$src/tests/dot/net.depth0.dot" "$tmp/d0.dot"
# The launch's grid and block are the codegen's choice: not pinned here.
expect 0 "" "$dlcc" "$net" --emit=dot --dot-depth=1 -o "$tmp/k.dot"
sed 's/launch [0-9x]* of [0-9x]*:/launch G of B:/g' "$tmp/k.dot" >"$tmp/k2.dot"
same "$src/tests/dot/net.kernels.dot" "$tmp/k2.dot"
expect 1 "dlcc: error: --dot-depth expects a depth from 0 to 1000, got '-1'" "$dlcc" "$net" --emit=dot --dot-depth=-1
expect 1 "dlcc: error: --dot-depth expects a depth from 0 to 1000, got 'two'" "$dlcc" "$net" --emit=dot --dot-depth=two

# After fusion every step of a run is a line of some node: as many as the
# plan has (init steps are counted in their consumers' "init:" lines).
for m in resnet18 transformer lstm; do
  "$dlcc" "$src/examples/$m.dl" --emit=plan >"$tmp/plan" 2>"$tmp/err" || fail "$m: --emit=plan: $(cat "$tmp/err")"
  "$dlcc" "$src/examples/$m.dl" --emit=dot >"$tmp/$m.dot" 2>"$tmp/err" || fail "$m: --emit=dot: $(cat "$tmp/err")"
  steps=$(grep -cE '^ +[0-9]+  (launch|gemm|copy) ' "$tmp/plan")
  # a node with many steps shows three and "+N more steps"
  lines=$(grep -o '\\n\(launch\|gemm\|copy\|+[0-9]* more steps\)' "$tmp/$m.dot" |
    awk '/more steps/ { n += substr($0, 4) + 0; next } { n++ } END { print n + 0 }')
  [ "$steps" -gt 0 ] && [ "$steps" -eq "$lines" ] && ok || fail "$m: $steps steps in the plan, $lines in the DOT"
  grep -q 'fillcolor=gray90' "$tmp/$m.dot" && fail "$m: a param drawn as a node of its own"
done

# Every example renders, in each view, well under the timeout.
if command -v dot >/dev/null 2>&1; then
  for f in "$src"/examples/*.dl; do
    for view in "" -O0 --dot-depth=1; do
      if ! "$dlcc" "$f" $view --emit=dot -o "$tmp/e.dot" 2>"$tmp/err"; then
        fail "$f $view: $(cat "$tmp/err")"
        continue
      fi
      timeout 60 dot -Tsvg "$tmp/e.dot" -o "$tmp/e.svg" && [ -s "$tmp/e.svg" ] && ok ||
        fail "$f $view: Graphviz did not render the DOT within 60 s"
    done
  done
else
  echo "no Graphviz dot: rendering not tested"
fi
finish dot.sh
