#!/bin/sh
# Compile time, for `make bench`: each stage of building every example
# into a model.so (kernel cache warm: built once first), then how compile
# time grows with graph size (10x the ops should cost at most ~12x), and
# each stage's time per op for deep MLPs of 5,000 to 40,000 ops (flat
# within 1.5x when every stage is linear).
# Figures only; nothing here fails on a slow machine.
set -u
src="${top_srcdir:-.}"
build="${top_builddir:-.}"
dlcc="$build/dlcc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DLCC_CACHE_DIR="$tmp/cache"

echo "compile to model.so, kernel cache warm (seconds; dlcc --time-stages)"
printf '  %-12s %8s %8s %8s %8s %8s %8s\n' example frontend passes codegen nvrtc cc total
for e in mlp lenet resnet18 resnet50 mobilenetv2 lstm transformer; do
  "$dlcc" "$src/examples/$e.dl" -o "$tmp/$e.so" >/dev/null 2>&1 || { echo "  $e: build failed"; continue; }
  "$dlcc" "$src/examples/$e.dl" -o "$tmp/$e.so" --time-stages 2>"$tmp/t" >/dev/null
  awk -v e="$e" '
    /^  parse|^  lower|^  verify/ { fe += $NF }
    /^  passes/ { ps = $NF }
    /^  codegen/ { cg = $NF }
    /nvrtc/ { nv = $NF }
    /aot: cc/ { cc = $NF }
    /^  total/ { tot = $NF }
    END { printf "  %-12s %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f\n", e, fe, ps, cg, nv, cc, tot }' "$tmp/t"
done

echo "growth with graph size (dlcc --emit=plan: frontend, passes, codegen, memory plan)"
cat >"$tmp/deep.dl" <<'DL'
let D = 10
block unit(x) {
  h = relu(linear(x, 64) as fc)
  return layernorm(x + h * 0.5) as norm
}
model deep(x: f32[4, 64]) -> f32[4, 64] {
  for i in 0..D { x = unit(x) as layers.{i} }
  return x
}
DL
prev=
for d in 30 300 3000; do
  start=$(date +%s%N)
  "$dlcc" "$tmp/deep.dl" -D D=$d --emit=plan -o /dev/null || { echo "  D=$d failed"; continue; }
  ns=$(( $(date +%s%N) - start ))
  ops=$("$dlcc" "$tmp/deep.dl" -D D=$d -O0 | sed -n 's/.*: \([0-9]*\) ops.*/\1/p')
  if [ -n "$prev" ]; then
    ratio=$(awk -v a="$ns" -v b="$prev" 'BEGIN { printf "%.1fx", a / b }')
  else
    ratio=-
  fi
  printf '  %6s ops  %8.3f s  (%s the previous, for 10x the ops)\n' "$ops" "$(awk -v n="$ns" 'BEGIN { print n / 1e9 }')" "$ratio"
  prev=$ns
done

cat >"$tmp/mlp.dl" <<'DL'
let D = 10
model deep(x: f32[4, 64]) -> y: f32[4, 64] {
  for i in 0..D { x = relu(linear(x, 64) as fc.{i}) }
  return x
}
DL
# Each layer a width of its own: a kernel of its own for every sin.
cat >"$tmp/wide.dl" <<'DL'
let D = 10
model deep(x: f32[4, 64]) -> y: f32[4, 64] {
  for i in 0..D { x = sin(linear(x, 64 + i) as fc.{i}) }
  return linear(x, 64) as head
}
DL
for m in mlp wide; do
  if [ $m = mlp ]; then
    echo "deep MLP (linear, relu; 64 wide): microseconds per op of each stage, the best of 3 (dlcc --emit=plan --time-stages)"
  else
    echo "deep MLP (linear, sin; layer i 64 + i wide, a kernel each): microseconds per op, the best of 3"
  fi
  printf '  %6s %8s %8s %8s %8s %8s %8s\n' ops lower verify passes codegen total "total s"
  for ops in 5000 10000 20000 40000; do
    for run in 1 2 3; do
      "$dlcc" "$tmp/$m.dl" -D D=$((ops / 2)) --emit=plan -o /dev/null --time-stages 2>"$tmp/t$run" ||
        { echo "  $ops ops: failed"; continue 2; }
    done
    cat "$tmp/t1" "$tmp/t2" "$tmp/t3" | awk -v ops="$ops" '
      function keep(k, v) { if (!(k in best) || v < best[k]) best[k] = v }
      /^  (lower|verify|passes|codegen|total) / { keep($1, $NF) }
      END {
        printf "  %6d", ops
        n = split("lower verify passes codegen total", k, " ")
        for (i = 1; i <= n; i++) printf " %8.2f", best[k[i]] / ops * 1e6
        printf " %8.3f\n", best["total"]
      }'
  done
done
