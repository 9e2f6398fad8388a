#!/bin/sh
# PyTorch's own training against `dlcc train` on the ONNX export of the
# same models (tests/torch/train_parity.py: a CNN with batchnorm, a
# transformer encoder layer, an LSTM, MobileNet's pieces, Embedding +
# GRU + LayerNorm; SGD and AdamW; losses and the saved state_dict), on
# ref and emu.  Needs a python3 with torch: $TORCH_PYTHON, else python3
# or /usr/bin/python3; skips (77) without one.
src="${top_srcdir:-.}"
build="${top_builddir:-.}"
for py in ${TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import torch, numpy' 2>/dev/null; then
    "$py" "$src/tests/torch/train_parity.py" --dlcc "$build/dlcc" --backend ref || exit 1
    exec "$py" "$src/tests/torch/train_parity.py" --dlcc "$build/dlcc" --backend emu
  fi
done
echo "SKIP: no python3 with torch (pip install torch; or set TORCH_PYTHON)"
exit 77
