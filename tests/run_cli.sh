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

# One tensor missing: exit 1, the message names it and its type, at the
# line that declares the parameter.
safetensors "$tmp/missing.safetensors" "{$w}" 48
expect 1 "$tmp/tiny.dl:2:10: error: missing tensor 'fc.bias' (expected f32[4]) in $tmp/missing.safetensors" \
  "$dlcc" run "$tmp/tiny.dl" --weights "$tmp/missing.safetensors"
[ -s "$tmp/out" ] && fail "a failed run printed outputs: $(cat "$tmp/out")"

# dlcc check-weights (or --weights alone): the file against the model,
# nothing run, every problem at once, each at its parameter.
expect 0 "" "$dlcc" check-weights "$tmp/tiny.dl" --weights "$tmp/good.safetensors"
grep -qx "$tmp/tiny.dl: $tmp/good.safetensors fits model tiny: 2 tensors, 16 weights" "$tmp/out" ||
  fail "check-weights: $(cat "$tmp/out")"
expect 0 "" "$dlcc" "$tmp/tiny.dl" --weights="$tmp/good.safetensors"
typo='"fc.bais":{"dtype":"F32","shape":[4],"data_offsets":[48,64]}'
wide='"fc.weight":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}'
safetensors "$tmp/bad.safetensors" "{$wide,$typo}" 64
"$dlcc" check-weights "$tmp/tiny.dl" --weights "$tmp/bad.safetensors" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "check-weights of a bad file did not exit 1"
cat >"$tmp/want" <<EOF
$tmp/tiny.dl:2:10: error: tensor 'fc.weight' is [4, 2] in $tmp/bad.safetensors, the model expects [4, 3]
      return linear(x, 4) as fc
             ^
$tmp/tiny.dl:2:10: error: missing tensor 'fc.bias' (expected f32[4]) in $tmp/bad.safetensors
      return linear(x, 4) as fc
             ^
dlcc: error: $tmp/bad.safetensors: unexpected tensor 'fc.bais' (the model has no such parameter; did you mean 'fc.bias'?)
EOF
cmp -s "$tmp/want" "$tmp/err" && ok || { fail "check-weights report:"; diff "$tmp/want" "$tmp/err"; }
expect 1 "dlcc: error: check-weights takes a model and --weights=FILE (no -o, --emit or --quantize)" \
  "$dlcc" check-weights "$tmp/tiny.dl"
# A free batch, which no input binds in a check: taken as 1, with a note;
# the weights do not depend on it.
printf 'model free(x: f32[N, 3]) -> f32[N, 4] {\n  return linear(x, 4) as fc\n}\n' >"$tmp/free.dl"
expect 0 "$tmp/free.dl:1:19: note: nothing binds dimension 'N' of input 'x': taken as 1 (-D N=... sets it)" \
  "$dlcc" check-weights "$tmp/free.dl" --weights "$tmp/good.safetensors"
grep -qx "$tmp/free.dl: $tmp/good.safetensors fits model free: 2 tensors, 16 weights" "$tmp/out" ||
  fail "check-weights with a free batch: $(cat "$tmp/out")"
expect 0 "" "$dlcc" check-weights "$tmp/free.dl" --weights "$tmp/good.safetensors" -D N=5
[ -s "$tmp/err" ] && fail "check-weights with -D N=5 said: $(cat "$tmp/err")"

# An extra tensor.
e='"fc.scale":{"dtype":"F32","shape":[1],"data_offsets":[64,68]}'
safetensors "$tmp/extra.safetensors" "{$w,$b,$e}" 68
expect 1 "dlcc: error: $tmp/extra.safetensors: unexpected tensor 'fc.scale' (the model has no such parameter)" \
  "$dlcc" run "$tmp/tiny.dl" --weights "$tmp/extra.safetensors"

# An input of the wrong shape: output.npy above is f32[2, 4], x is f32[2, 3].
# The .dl says where; the IR text (no source to point at) says what.
expect 1 "$tmp/tiny.dl:1:22: error: dim 1 of input 'x' is 3, but the input given has 4" \
  "$dlcc" run "$tmp/tiny.dl" --input "x=$tmp/o/output.npy"
"$dlcc" "$tmp/tiny.dl" --emit=ir -o "$tmp/tiny.ir" || fail "--emit=ir failed"
expect 1 "dlcc: error: input 'x': $tmp/o/output.npy holds f32[2, 4], the model expects f32[2, 3]" \
  "$dlcc" run "$tmp/tiny.ir" --input "x=$tmp/o/output.npy"

# A batch left free takes the input's: N is 2 from output.npy's [2, 4].
printf 'model free(x: f32[N, 4]) -> y: f32[N, 2] {\n  return linear(x, 2) as fc\n}\n' >"$tmp/free.dl"
expect 0 "" "$dlcc" run "$tmp/free.dl" --input "x=$tmp/o/output.npy" --backend=ref
grep -q "^y: f32\[2, 2\]  min" "$tmp/out" || fail "free N: $(cat "$tmp/out")"
expect 1 "$tmp/free.dl:1:19: error: unknown dimension 'N': define it with 'let N = ...' or -D N=..., or give the input 'x' (its shape binds N)" \
  "$dlcc" run "$tmp/free.dl"
expect 1 "dlcc: error: --input y=$tmp/o/output.npy: the model has no input 'y'; its inputs: x" \
  "$dlcc" run "$tmp/tiny.dl" --input "y=$tmp/o/output.npy"

# A training step (--grad) binds a state_dict, which never holds dropout's
# random state: dlcc.seed and dlcc.step start at 0.  With every weight 1
# the kept elements of x @ W^T + b are all 4 / (1 - 0.5).
printf 'model drop(x: f32[2, 3]) -> f32[] {\n  return mean(dropout(linear(x, 4) as fc))\n}\n' >"$tmp/drop.dl"
expect 0 "" "$dlcc" run "$tmp/drop.dl" --grad --backend=ref --weights "$tmp/good.safetensors"
grep -q "^fc.bias.grad: f32\[4\]" "$tmp/out" || fail "--grad with --weights: $(cat "$tmp/out")"
grep -q "^dlcc.step: i64\[\]  min 1  max 1" "$tmp/out" || fail "dlcc.step did not start at 0: $(cat "$tmp/out")"

# --profile: every step timed once, the slowest first, with the cost
# report's FLOPs (linear 3 -> 4 over 2 rows: 48 FLOP, and the bias adds).
"$dlcc" run "$tmp/tiny.dl" --backend=emu --weights "$tmp/good.safetensors" --profile=5 >"$tmp/out" 2>"$tmp/err" ||
  fail "--profile: $(cat "$tmp/err")"
grep -q '^dlcc: profile: [0-9]* steps on emu, [0-9.]* us in all (host time), the [0-9]* slowest:$' "$tmp/err" ||
  fail "--profile: no header: $(cat "$tmp/err")"
grep -q '^ *0 *[0-9.]* *100.0% *0.000 .* linear %' "$tmp/err" || fail "--profile: no row for step 0: $(cat "$tmp/err")"
cp "$tmp/out" "$tmp/profiled"
"$dlcc" run "$tmp/tiny.dl" --backend=emu --weights "$tmp/good.safetensors" >"$tmp/out" 2>"$tmp/err"
cmp -s "$tmp/out" "$tmp/profiled" || fail "--profile changed the output: $(cat "$tmp/profiled") against $(cat "$tmp/out")"
expect 1 "dlcc: error: --profile expects a number of steps to show (1 or more), got '0'" \
  "$dlcc" run "$tmp/tiny.dl" --profile=0
expect 1 "dlcc: error: profile: the reference interpreter runs no steps" \
  "$dlcc" run "$tmp/tiny.dl" --backend=ref --weights "$tmp/good.safetensors" --profile

finish
