#!/bin/sh
# make bench, data parallel's part (docs/parallel.md): LeNet for 8x8
# images (examples/train/lenet8.dl) on 96 random images, global batch 24,
# 3 epochs on emu under mpirun with 1, 2 and 4 ranks.  Figures: the
# wall time, and rank 0's gradient all-reduce time with the share of it
# hidden behind the rest of the backward (the all-reduces start as each
# gradient completes; the step waits only before the optimizer).  The
# ranks share this machine's cores, so the times say how the overlap
# works, not how a cluster scales.  Needs mpirun and /usr/bin/python3
# with numpy; says so and skips.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
dlcc=$top_builddir/dlcc
if ! command -v mpirun >/dev/null 2>&1 || ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "dist overlap: skipped (needs mpirun and /usr/bin/python3 with numpy)"
  exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import sys
import numpy as np
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", r.uniform(0, 1, (96, 1, 8, 8)).astype(np.float32))
np.save(sys.argv[1] + "/target.npy", r.integers(0, 10, 96).astype(np.int64))
PY
for k in 1 2 4; do
  start=$(date +%s.%N)
  mpirun --oversubscribe -np $k "$dlcc" train "$top_srcdir/examples/train/lenet8.dl" --data "$tmp" --batch 24 \
    --loss=cross_entropy --optimizer=sgd --momentum=0.9 --lr=0.05 --epochs 3 --backend=emu >"$tmp/log" 2>&1 || {
    cat "$tmp/log"
    exit 1
  }
  end=$(date +%s.%N)
  line=$(sed -n 's/^data parallel: [0-9]* ranks; //p' "$tmp/log")
  [ -n "$line" ] || line="no all-reduce (one rank)"
  awk -v k=$k -v s="$start" -v e="$end" -v l="$line" 'BEGIN {
    printf "dist overlap lenet8 (emu, batch 24, 12 steps): %d rank(s), %.2f s wall; %s\n", k, e - s, l }'
done
