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

# A Loop whose trip count is computed at run time (from float inputs):
# refused without a bound, naming the flag; under --loop-bound it runs
# Range(1, 5, 2) (2 steps), and Range(1, 100, 2) (50 steps) fails the check.
range_model="$data/test_range_float_type_positive_delta_expanded/model.onnx"
"$dlcc" "$range_model" >"$tmp/out" 2>&1 && fail "a run-time Loop imported"
grep -q "node 8 (Loop): the trip count is computed at run time and has no bound at import: .* --loop-bound=N" \
  "$tmp/out" || { fail "no clear message for a run-time Loop:"; cat "$tmp/out"; }
f32_npy() { # FILE BYTES: an f32 scalar
  { printf '\223NUMPY\001\000\166\000'
    printf "%-117s\n" "{'descr': '<f4', 'fortran_order': False, 'shape': (), }"
    printf "$2"; } >"$1"
}
f32_npy "$tmp/start.npy" '\000\000\200\077'
f32_npy "$tmp/limit.npy" '\000\000\240\100'
f32_npy "$tmp/far.npy" '\000\000\310\102'
f32_npy "$tmp/delta.npy" '\000\000\000\100'
for backend in ref emu; do
  "$dlcc" run "$range_model" --loop-bound=8 --backend=$backend --input start="$tmp/start.npy" \
    --input limit="$tmp/limit.npy" --input delta="$tmp/delta.npy" --output-dir="$tmp" >"$tmp/out" 2>&1 ||
    { fail "Range(1, 5, 2) under --loop-bound=8 on $backend:"; cat "$tmp/out"; }
  grep -q '^output: f32\[2\]  min 1  max 3 ' "$tmp/out" || { fail "Range(1, 5, 2) on $backend:"; cat "$tmp/out"; }
  "$dlcc" run "$range_model" --loop-bound=8 --backend=$backend --input start="$tmp/start.npy" \
    --input limit="$tmp/far.npy" --input delta="$tmp/delta.npy" >"$tmp/out" 2>&1 &&
    fail "Range(1, 100, 2) ran past --loop-bound=8 on $backend"
  grep -q "node 8 (Loop): the loop runs more than 8 steps, the bound it was compiled with (--loop-bound)" \
    "$tmp/out" || { fail "no clear message past the bound on $backend:"; cat "$tmp/out"; }
done
"$dlcc" run "$range_model" --loop-bound=1025 >"$tmp/out" 2>&1 && fail "--loop-bound=1025 taken"
grep -q "error: --loop-bound expects a number of steps from 1 to 1024" "$tmp/out" ||
  { fail "no clear message for --loop-bound=1025:"; cat "$tmp/out"; }

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
