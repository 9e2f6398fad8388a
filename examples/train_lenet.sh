#!/bin/sh
# Trains two examples with dlcc train (docs/training.md):
#   1. LeNet for 8x8 images (examples/train/lenet8.dl) on scikit-learn's
#      handwritten digits: 1,797 8x8 images, pixels scaled to [0, 1],
#      1,437 to train and 360 to validate (a fixed shuffle, seed 0);
#   2. an LSTM (examples/train/seqsign.dl) on a synthetic task: is the sum of
#      16 random values positive (4,096 sequences to train, 1,024 to
#      validate).
# Each prints its loss per epoch and the validation accuracy, and saves
# its weights (a PyTorch state_dict) to OUT/NAME.safetensors.
#
#     examples/train_lenet.sh [OUT] [dlcc train options...]
#     examples/train_lenet.sh /tmp/t --backend=emu --epochs=20
#
# Needs /usr/bin/python3 with numpy and scikit-learn (Debian's
# python3-numpy and python3-sklearn) to write the .npy files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dlcc=${DLCC:-$here/../dlcc}
out=${1:-train_out}
[ $# -gt 0 ] && shift
mkdir -p "$out"

/usr/bin/python3 - "$out" <<'EOF'
import os, sys
import numpy as np
from sklearn.datasets import load_digits

out = sys.argv[1]
def save(d, **arrays):
    os.makedirs(os.path.join(out, d), exist_ok=True)
    for k, v in arrays.items():
        np.save(os.path.join(out, d, k + ".npy"), v)

digits = load_digits()
x = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
y = digits.target.astype(np.int64)
order = np.random.default_rng(0).permutation(len(y))
train, val = order[:1437], order[1437:]
save("digits_train", x=x[train], target=y[train])
save("digits_val", x=x[val], target=y[val])

rng = np.random.default_rng(1)
for d, n in (("seq_train", 4096), ("seq_val", 1024)):
    s = rng.uniform(-1, 1, (n, 16, 1)).astype(np.float32)
    save(d, x=s, target=(s.sum(axis=(1, 2)) > 0).astype(np.int64))
EOF

echo "== LeNet (8x8) on the digits"
"$dlcc" train "$here/train/lenet8.dl" --data "$out/digits_train" --val "$out/digits_val" \
  --loss=cross_entropy --optimizer=adamw --lr=1e-2 --schedule=cosine --batch=32 --epochs=20 \
  --save "$out/lenet8.safetensors" "$@"
echo "== LSTM on the sign of a sum"
"$dlcc" train "$here/train/seqsign.dl" --data "$out/seq_train" --val "$out/seq_val" \
  --loss=cross_entropy --optimizer=adam --lr=1e-2 --batch=64 --epochs=10 \
  --save "$out/seqsign.safetensors" "$@"
