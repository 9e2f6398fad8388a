#!/bin/sh
# Whole models through ONNX (tests/onnx/models.py): a ResNet-18-like CNN,
# stacked LSTMs and a GRU, a transformer encoder layer, each run by
# onnxruntime and by `dlcc run` on ref and emu.  Needs a python3 with onnx,
# onnxruntime and numpy: $ONNX_PYTHON, else python3 or /usr/bin/python3;
# skips (77) without one.
src="${top_srcdir:-.}"
build="${top_builddir:-.}"
for py in ${ONNX_PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
    exec "$py" "$src/tests/onnx/models.py" --dlcc "$build/dlcc"
  fi
done
echo "SKIP: no python3 with onnx, onnxruntime and numpy (pip install onnxruntime; or set ONNX_PYTHON)"
exit 77
