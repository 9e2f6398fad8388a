#!/bin/sh
# make bench, int8's part: top-1 agreement of the int8 MLP and LeNet with
# their f32 selves on 4096 N(0, 1) inputs (random weights, seed 42,
# calibrated on 256 other inputs), and for the MLP with some layers kept
# in f32 (precision="f32").  Figures only: this is where the distance to
# issue 6's 99% is measured (docs/quantization.md, "Accuracy"), 16 times
# the 256 rows the test suite uses, so one flip is 0.024%, not 0.4%.
# Needs numpy for the sample folders; says so and skips without it.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
dlcc=$top_builddir/dlcc
py=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "int8 accuracy: skipped (no python3 with numpy to write the sample folders)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# samples DIR COUNT SEED D0 D1 ...: COUNT .npy files of N(0, 1) f32 draws.
samples() {
  "$py" - "$@" <<'PY'
import os, sys
import numpy as np
d, count, seed, dims = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(x) for x in sys.argv[4:]]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(seed)
for k in range(count):
    np.save(os.path.join(d, "%03d.npy" % k), rng.standard_normal(dims).astype(np.float32))
PY
}

samples "$tmp/mlp.cal" 8 1 32 784
samples "$tmp/mlp.test" 128 2 32 784
samples "$tmp/lenet.cal" 8 3 32 1 28 28
samples "$tmp/lenet.test" 128 4 32 1 28 28

# keep FILE LAYER...: FILE with those layers' linear made precision="f32".
keep() {
  f=$1
  shift
  cp "$f" "$tmp/k.dl"
  for layer in "$@"; do
    sed "s/\(linear([a-z]*, [0-9]*\)) as $layer/\1, precision=\"f32\") as $layer/" "$tmp/k.dl" >"$tmp/k2.dl"
    mv "$tmp/k2.dl" "$tmp/k.dl"
  done
  echo "$tmp/k.dl"
}

# report NAME FILE SAMPLES: one line from dlcc quant-report's output table.
report() {
  "$dlcc" quant-report "$2" -D N=32 --calibrate="$tmp/$3.cal" --test="$tmp/$3.test" --seed=42 >"$tmp/out" 2>&1 ||
    { echo "  $1: quant-report failed: $(tail -1 "$tmp/out")"; return; }
  layers=$(grep -c '^linear\|^conv2d' "$tmp/out")
  awk -v name="$1" -v layers="$layers" '/^output / && $2 ~ /^[0-9]/ { printf "  %-24s %2d int8 products, output rel rms err %s, top-1 %s %s %s %s %s\n", name, layers, $5, $6, $7, $8, $9, $10 }' "$tmp/out"
}

echo "int8 top-1 agreement with f32 on 4096 N(0, 1) inputs (weights seed 42; issue 6 aims at 99%)"
mlp=$top_srcdir/examples/mlp.dl
report "mlp" "$mlp" mlp
report "mlp, fc1 in f32" "$(keep "$mlp" fc1)" mlp
report "mlp, fc3 in f32" "$(keep "$mlp" fc3)" mlp
report "mlp, fc1 and fc3 in f32" "$(keep "$mlp" fc1 fc3)" mlp
report "lenet" "$top_srcdir/examples/lenet.dl" lenet
