#!/bin/sh
# dlcc on .onnx files: --onnx-support, --emit=ir, dlcc run with the file's
# own weights, the messages for a non-ONNX file and an unsupported op, a
# random op.
# Models from libonnx-testdata; skips (77) without it.
set -u
dlcc="${top_builddir:-.}/dlcc"
data=${ONNX_NODE_DIR:-/usr/share/libonnx-testdata/data/node}
if [ ! -f "$data/test_relu/model.onnx" ]; then
  echo "SKIP: no ONNX node tests at $data (apt-get install libonnx-testdata)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$dlcc" --onnx-support >"$tmp/out" 2>&1 || fail "--onnx-support exited $?"
grep -q "^  Conv  *1-d and 2-d" "$tmp/out" || fail "--onnx-support does not list Conv"
grep -q "^  LSTM " "$tmp/out" || fail "--onnx-support does not list LSTM"

"$dlcc" "$data/test_relu/model.onnx" --emit=ir >"$tmp/out" 2>&1 || fail "--emit=ir exited $?"
grep -q '= relu %0 : f32\[3, 4, 5\]' "$tmp/out" || { fail "--emit=ir lacks the relu:"; cat "$tmp/out"; }
grep -q 'return %1 as "y"' "$tmp/out" || fail "--emit=ir does not keep the output's name"
# What --emit=ir prints reads back as IR.
cp "$tmp/out" "$tmp/relu.ir"
"$dlcc" "$tmp/relu.ir" >/dev/null 2>&1 || fail "the printed IR does not read back"

"$dlcc" run "$data/test_gemm_default_matrix_bias/model.onnx" --backend=ref >"$tmp/out" 2>&1 ||
  { fail "dlcc run on a Gemm exited $?"; cat "$tmp/out"; }
grep -q "^y: f32\[3, 4\]" "$tmp/out" || fail "dlcc run prints no y"

printf 'not protobuf at all\n' >"$tmp/text.onnx"
"$dlcc" "$tmp/text.onnx" >"$tmp/out" 2>&1 && fail "a text file imported"
grep -q "text.onnx: not an ONNX model" "$tmp/out" || { fail "no clear message for a text file:"; cat "$tmp/out"; }

# A Loop whose trip count is computed at run time (from float inputs).
"$dlcc" "$data/test_range_float_type_positive_delta_expanded/model.onnx" >"$tmp/out" 2>&1 && fail "a run-time Loop imported"
grep -q "node 8 (Loop): a trip count computed at run time is not supported" "$tmp/out" ||
  { fail "no clear message for a run-time Loop:"; cat "$tmp/out"; }

# The random ops draw dlcc's numbers: Bernoulli of ten 0.5s gives 0s and 1s
# (the .npy written by hand: a 118-byte header, then f64 0.5 ten times).
{
  printf '\223NUMPY\001\000\166\000'
  printf "%-117s\n" "{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }"
  for i in 1 2 3 4 5 6 7 8 9 10; do printf '\000\000\000\000\000\000\340\077'; done
} >"$tmp/p.npy"
"$dlcc" run "$data/test_bernoulli/model.onnx" --input x="$tmp/p.npy" --backend=ref >"$tmp/out" 2>&1 ||
  { fail "Bernoulli did not run:"; cat "$tmp/out"; }
grep -q '^y: f64\[10\]  min 0  max 1 ' "$tmp/out" || { fail "Bernoulli of 0.5 gave other than 0s and 1s:"; cat "$tmp/out"; }

# Boxes and scores stay f32 under --precision (an IoU in f16 would keep other boxes).
"$dlcc" run "$data/test_nonmaxsuppression_two_batches/model.onnx" --precision=f16 --backend=emu >"$tmp/out" 2>&1 ||
  { fail "NonMaxSuppression in f16:"; cat "$tmp/out"; }

[ "$fails" -eq 0 ] && echo "onnx cli: all passed"
exit $((fails > 0))
