#!/bin/sh
# make bench, fusion's part: for every example, the plan's steps (kernel
# launches + cuBLAS GEMMs + copies) at -O0 and -O2, and the targets:
# ResNet-50 in at most 57 steps, ResNet-18 and the transformer layer in
# at most half their -O0 steps.  Figures first; a missed target is said
# on its line and makes the script fail.  Split-K is on, as by default:
# a split tile's slices are added by its last slice in the same launch.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
dlcc=$top_builddir/dlcc

# steps FILE -ON: "launches gemms copies ops"
steps() {
  "$dlcc" "$1" "$2" --emit=plan 2>/dev/null | awk '
    /^ +[0-9]+  launch / { l++ } /^ +[0-9]+  gemm / { g++ } /^ +[0-9]+  copy / { c++ }
    END { printf "%d %d %d\n", l, g, c }'
}

# ops FILE -ON: nodes other than input, param and const
ops() {
  "$dlcc" "$1" "$2" --emit=ir 2>/dev/null |
    awk '/^  %/ { sub(/^[^=]*= */, ""); split($0, w, /[ {]/); if (w[1] != "input" && w[1] != "param" && w[1] != "const") n++ }
         END { print n + 0 }'
}

status=0
echo "plan steps per example (launch + gemm + copy; -O2 groups from passes/fuse.c)"
printf '  %-16s %6s %6s  %-16s %-16s %7s  %s\n' example ops-O0 ops-O2 "-O0 l/g/c" "-O2 l/g/c" ratio target
for ex in "$top_srcdir"/examples/*.dl; do
  name=$(basename "$ex" .dl)
  set -- $(steps "$ex" -O0); l0=$1 g0=$2 c0=$3
  set -- $(steps "$ex" -O2); l2=$1 g2=$2 c2=$3
  o0=$(ops "$ex" -O0)
  o2=$(ops "$ex" -O2)
  s0=$((l0 + g0 + c0)) s2=$((l2 + g2 + c2))
  target=
  case $name in
    resnet50) if [ "$s2" -le 57 ]; then target="<= 57: met"; else target="<= 57: MISSED"; status=1; fi ;;
    resnet18|transformer)
      if [ $((2 * s2)) -le "$s0" ]; then target="2x fewer: met"; else target="2x fewer: MISSED"; status=1; fi ;;
  esac
  printf '  %-16s %6s %6s  %-16s %-16s %7s  %s\n' "$name" "$o0" "$o2" "$s0 ($l0/$g0/$c0)" "$s2 ($l2/$g2/$c2)" \
    "$(awk -v a="$s0" -v b="$s2" 'BEGIN { printf "%.2fx", b ? a / b : 0 }')" "$target"
done
exit $status
