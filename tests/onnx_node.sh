#!/bin/sh
# The ONNX backend node tests (tests/test_onnx_node): those of the newest
# onnx that a python3 here has, when it is newer than Debian's 1.12
# (generated once per onnx version into the build tree,
# tests/onnx-node-latest/, by tests/onnx/node_tests.py: about 15 s; with
# the package's light models), else
# libonnx-testdata's; then libonnx-testdata's pytorch-converted and
# pytorch-operator folders.  $ONNX_NODE_DIR, when set, picks the folders
# instead; $ONNX_PYTHON a python3 first.
src="${top_srcdir:-.}"
build="${top_builddir:-.}"
deb=/usr/share/libonnx-testdata/data
if [ -z "${ONNX_NODE_DIR:-}" ]; then
  node="$deb/node"
  for py in ${ONNX_PYTHON:-} python3 /usr/bin/python3; do
    v=$("$py" -c 'import onnx, sys
from onnx.backend.test.cmd_tools import generate_data
v = onnx.__version__
sys.exit(0 if tuple(int(p) for p in v.split(".")[:2]) > (1, 12) else 1)' 2>/dev/null &&
        "$py" -c 'import onnx; print(onnx.__version__)') || continue
    out="$build/tests/onnx-node-latest"
    if [ "$(cat "$out/VERSION" 2>/dev/null)" != "$v" ]; then
      "$py" "$src/tests/onnx/node_tests.py" "$out" || { echo "generating the onnx $v node tests failed"; exit 99; }
    fi
    node="$out/node"
    [ -d "$out/light" ] && node="$node:$out/light"
    break
  done
  ONNX_NODE_DIR="$node:$deb/pytorch-converted:$deb/pytorch-operator"
  export ONNX_NODE_DIR
fi
exec "$build/tests/test_onnx_node" "$@"
