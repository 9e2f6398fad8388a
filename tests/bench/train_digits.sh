#!/bin/sh
# make bench, training's part (docs/training.md): examples/train_lenet.sh
# on emu (LeNet for 8x8 on scikit-learn's digits, 20 epochs; the LSTM on
# the sign of a sum, 10 epochs), then the trained LeNet quantized to int8
# (calibrated on the training images) against its f32 self on the 360
# validation digits.  Figures: the best and last validation accuracy, the
# epoch that first reaches 97%, top-1 agreement of int8 with f32.
# Needs /usr/bin/python3 with numpy and scikit-learn; says so and skips.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
dlcc=$top_builddir/dlcc
if ! /usr/bin/python3 -c 'import numpy, sklearn' 2>/dev/null; then
  echo "train digits: skipped (no /usr/bin/python3 with numpy and scikit-learn)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DLCC="$dlcc" sh "$top_srcdir/examples/train_lenet.sh" "$tmp" --backend=emu >"$tmp/log" 2>&1 || {
  cat "$tmp/log"
  exit 1
}
# accuracy figures of one task's section of the log
figures() {
  sed -n "/== $1/,/^saved/p" "$tmp/log" | sed -n 's/^epoch \([0-9]*\): val loss .*, val accuracy \([0-9.]*\)%$/\1 \2/p' |
    awk -v name="$2" '{ if ($2 > best) best = $2; last = $2; n = $1; if (!hit && $2 >= 97) hit = $1 }
      END { printf "%s: best val accuracy %.2f%%, last %.2f%% (epoch %d), first >= 97%%: %s\n", name, best, last, n,
            hit ? "epoch " hit : "never" }'
}
figures LeNet "train digits lenet8 (emu, adamw 1e-2 cosine, batch 32)"
figures LSTM "train seqsign lstm (emu, adam 1e-2, batch 64)"
/usr/bin/python3 - "$tmp" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
x = np.load(os.path.join(d, "digits_train", "x.npy"))
os.makedirs(os.path.join(d, "cal"))
for k in range(3):
    np.save(os.path.join(d, "cal", "%d.npy" % k), x[k * 360:(k + 1) * 360])
PY
for q in f32 int8; do
  flags=
  [ $q = int8 ] && flags="--quantize=int8 --calibrate=$tmp/cal"
  "$dlcc" run "$top_srcdir/examples/train/lenet8.dl" --weights "$tmp/lenet8.safetensors" --backend=emu \
    --input "x=$tmp/digits_val/x.npy" --output-dir "$tmp/$q" $flags >/dev/null || exit 1
done
/usr/bin/python3 - "$tmp" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
a = np.load(os.path.join(d, "f32", "logits.npy")).argmax(1)
b = np.load(os.path.join(d, "int8", "logits.npy")).argmax(1)
print("train digits lenet8 int8 vs f32 top-1 agreement: %.2f%% of %d (int8 accuracy %.2f%%)"
      % (100 * (a == b).mean(), len(a), 100 * (b == np.load(os.path.join(d, "digits_val", "target.npy"))).mean()))
PY
