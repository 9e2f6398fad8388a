#!/bin/sh
# `dlcc run` on bad weights and bad inputs: exit status and the exact
# message.  The weights file is written byte by byte here (printf), so the
# test needs nothing but a shell.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"

# safetensors FILE HEADER_JSON DATA_BYTES: the header padded to 8 bytes,
# its length as a little-endian u64 (headers here stay under 256 bytes),
# then DATA_BYTES bytes of 1.0f (0x3f800000).
safetensors() {
  h=$2
  while [ $((${#h} % 8)) -ne 0 ]; do h="$h "; done
  {
    printf "\\$(printf %03o ${#h})\\000\\000\\000\\000\\000\\000\\000"
    printf '%s' "$h"
    i=0
    while [ $i -lt $(($3 / 4)) ]; do printf '\000\000\200\077'; i=$((i + 1)); done
  } >"$1"
}

printf 'model tiny(x: f32[2, 3]) -> f32[2, 4] {\n  return linear(x, 4) as fc\n}\n' >"$tmp/tiny.dl"
w='"fc.weight":{"dtype":"F32","shape":[4,3],"data_offsets":[0,48]}'
b='"fc.bias":{"dtype":"F32","shape":[4],"data_offsets":[48,64]}'

# A complete file: every weight 1, so each output is 3 x + 1 = 4 for x = 1.
safetensors "$tmp/good.safetensors" "{$w,$b}" 64
expect 0 "" "$dlcc" run "$tmp/tiny.dl" --weights "$tmp/good.safetensors" --output-dir "$tmp/o"
grep -q "^output: f32\[2, 4\]  min [0-9.e+-]*  max" "$tmp/out" || fail "no summary line: $(cat "$tmp/out")"
[ -f "$tmp/o/output.npy" ] || fail "--output-dir wrote no output.npy"

# One tensor missing: exit 1, the message names it and its type.
safetensors "$tmp/missing.safetensors" "{$w}" 48
expect 1 "dlcc: error: missing tensor 'fc.bias' (expected f32[4]) in $tmp/missing.safetensors" \
  "$dlcc" run "$tmp/tiny.dl" --weights "$tmp/missing.safetensors"
[ -s "$tmp/out" ] && fail "a failed run printed outputs: $(cat "$tmp/out")"

# An extra tensor.
e='"fc.scale":{"dtype":"F32","shape":[1],"data_offsets":[64,68]}'
safetensors "$tmp/extra.safetensors" "{$w,$b,$e}" 68
expect 1 "dlcc: error: $tmp/extra.safetensors: unexpected tensor 'fc.scale' (the model has no such parameter)" \
  "$dlcc" run "$tmp/tiny.dl" --weights "$tmp/extra.safetensors"

# An input of the wrong shape: output.npy above is f32[2, 4], x is f32[2, 3].
expect 1 "dlcc: error: input 'x': $tmp/o/output.npy holds f32[2, 4], the model expects f32[2, 3]" \
  "$dlcc" run "$tmp/tiny.dl" --input "x=$tmp/o/output.npy"
expect 1 "dlcc: error: --input y=$tmp/o/output.npy: the model has no input 'y'; its inputs: x" \
  "$dlcc" run "$tmp/tiny.dl" --input "y=$tmp/o/output.npy"

# A training step (--grad) binds a state_dict, which never holds dropout's
# random state: dlcc.seed and dlcc.step start at 0.  With every weight 1
# the kept elements of x @ W^T + b are all 4 / (1 - 0.5).
printf 'model drop(x: f32[2, 3]) -> f32[] {\n  return mean(dropout(linear(x, 4) as fc))\n}\n' >"$tmp/drop.dl"
expect 0 "" "$dlcc" run "$tmp/drop.dl" --grad --backend=ref --weights "$tmp/good.safetensors"
grep -q "^fc.bias.grad: f32\[4\]" "$tmp/out" || fail "--grad with --weights: $(cat "$tmp/out")"
grep -q "^dlcc.step: i64\[\]  min 1  max 1" "$tmp/out" || fail "dlcc.step did not start at 0: $(cat "$tmp/out")"

finish
