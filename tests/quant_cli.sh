#!/bin/sh
# int8 from the command line (docs/quantization.md): the quantization
# flags of dlcc and dlcc run and their errors, the calibration folder's
# errors, and with the quantize pass a whole flow on examples/mlp.dl:
# scales in the IR that each method picks, on the interpreter and on the
# compiled model (--calib-backend), dlcc run on ref and emu and the
# model.so giving the same output, --weights used for calibration.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
b=${top_builddir:-.}
s=${top_srcdir:-.}
dlcc="$b/dlcc"
mlp="$s/examples/mlp.dl"
export DLCC_CACHE_DIR="$tmp/cache"
[ -n "${DLCC_EMU_HEADER:-}" ] || DLCC_EMU_HEADER="$s/runtime/emu/dlcc_emu.h" && export DLCC_EMU_HEADER

# The largest |a - b| over two .npy files of f32.
max_diff() {
  npy_values "$1" >"$tmp/a.txt"
  npy_values "$2" >"$tmp/b.txt"
  paste "$tmp/a.txt" "$tmp/b.txt" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "%g", m }'
}
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

# ---- the flags, for dlcc and dlcc run alike ----
for cmd in "" run; do
  expect 1 "dlcc: error: --quantize=int8 needs --calibrate=DIR, a folder of sample inputs (.npy) to measure the activations' ranges on" \
    "$dlcc" $cmd "$mlp" --quantize=int8
  expect 1 "dlcc: error: --calibrate=$tmp is for --quantize=int8" "$dlcc" $cmd "$mlp" --calibrate="$tmp"
  expect 1 "dlcc: error: --calib-method=entropy is for --quantize=int8" \
    "$dlcc" $cmd "$mlp" --quantize=none --calib-method=entropy
  expect 1 "dlcc: error: --calib-samples=4 is for --quantize=int8" "$dlcc" $cmd "$mlp" --calib-samples=4
  expect 1 "dlcc: error: --quantize=int8 and --precision=f16 do not combine: choose one" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp" --precision=f16
  expect 1 "dlcc: error: --quantize=int8 and --precision=bf16 do not combine: choose one" \
    "$dlcc" $cmd "$mlp" --precision=bf16 --quantize=int8 --calibrate="$tmp"
  expect 1 "dlcc: error: --quantize expects int8 or none, got 'int4'" "$dlcc" $cmd "$mlp" --quantize=int4
  expect 1 "dlcc: error: --calib-method: unknown calibration method 'kl' (expected minmax, percentile, percentile=P or entropy)" \
    "$dlcc" $cmd "$mlp" --calib-method=kl
  expect 1 "dlcc: error: --calib-method: percentile=P needs P above 0 and at most 100, got '0'" \
    "$dlcc" $cmd "$mlp" --calib-method=percentile=0
  expect 1 "dlcc: error: --calib-samples expects a number of samples (1 or more), got '0'" \
    "$dlcc" $cmd "$mlp" --calib-samples=0
  expect 1 "dlcc: error: --calibrate needs a folder of sample inputs" "$dlcc" $cmd "$mlp" --calibrate=
  expect 1 "dlcc: error: --quantize takes its value after '=': --quantize=int8" "$dlcc" $cmd "$mlp" --quantize int8
  expect 1 "dlcc: error: --calib-backend: unknown calibration backend 'gpu' (expected auto, cuda, emu or ref)" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp" --calib-backend=gpu
  expect 1 "dlcc: error: --calib-backend=emu is for --quantize=int8" "$dlcc" $cmd "$mlp" --calib-backend=emu
  expect 1 "dlcc: error: --calib-backend takes its value after '=': --calib-backend=BACKEND" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp" --calib-backend emu
  # ---- the folder ----
  expect 1 "dlcc: error: calibration folder $tmp/none does not exist" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp/none"
  : >"$tmp/plain"
  expect 1 "dlcc: error: calibration folder $tmp/plain is not a folder" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp/plain"
  mkdir -p "$tmp/empty"
  expect 1 "dlcc: error: calibration folder $tmp/empty has no .npy files" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp/empty/"
  # The folder is checked before any backend starts.
  expect 1 "dlcc: error: calibration folder $tmp/none does not exist" \
    "$dlcc" $cmd "$mlp" --quantize=int8 --calibrate="$tmp/none" --calib-backend=emu
done
expect 1 "dlcc: error: --weights, --external-weights and --save-temps are for building a library (-o FILE.so); --weights also for checking a weights file (alone, or dlcc check-weights) and for calibration (--quantize=int8)" \
  "$dlcc" "$mlp" --weights=w.safetensors --emit=ir
"$dlcc" --help >"$tmp/out" 2>&1 || fail "dlcc --help exited $?"
grep -q "^  --calibrate=DIR " "$tmp/out" || fail "dlcc --help does not list --calibrate"
"$dlcc" run --help >"$tmp/out" 2>&1 || fail "dlcc run --help exited $?"
grep -q "^  --calib-method=M " "$tmp/out" || fail "dlcc run --help does not list --calib-method"
grep -q "^  --calib-backend=B " "$tmp/out" || fail "dlcc run --help does not list --calib-backend"

"$dlcc" --help | grep -q "^  quantize " && ok || fail "dlcc --help lists no quantize pass"

# ---- samples: dlcc run writes its random inputs back as outputs ----
mkdir -p "$tmp/calib"
printf 'model same(x: f32[8, 784]) -> f32[8, 784] {\n  return x\n}\n' >"$tmp/same.dl"
for k in 1 2 3 4 5; do
  "$dlcc" run "$tmp/same.dl" --backend=ref --seed=$k --output-dir="$tmp/gen" >/dev/null 2>&1 ||
    fail "writing sample $k"
  mv "$tmp/gen/output.npy" "$tmp/calib/$k.npy"
done

# A sample of another shape, from the command line.
mkdir -p "$tmp/bad"
printf 'model same2(x: f32[2, 784]) -> f32[2, 784] {\n  return x\n}\n' >"$tmp/same2.dl"
"$dlcc" run "$tmp/same2.dl" --backend=ref --output-dir="$tmp/gen" >/dev/null 2>&1
cp "$tmp/calib/1.npy" "$tmp/bad/1.npy"
mv "$tmp/gen/output.npy" "$tmp/bad/2.npy"
expect 1 "dlcc: error: $tmp/bad/2.npy: f32[2, 784] does not match input 'x' f32[8, 784]" \
  "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/bad"

# The scales in the IR: one quantize with a scale per product, each
# method its own.
scales() { "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/calib" --emit=ir "$@" 2>&1 |
  grep -o 'quantize %[0-9]* {scale=[^}]*}' | sed 's/.*scale=//; s/}//'; }
scales --calib-method=minmax >"$tmp/minmax"
scales --calib-method=entropy >"$tmp/entropy"
scales >"$tmp/default"
scales --calib-method=percentile=99.99 >"$tmp/p9999"
[ "$(wc -l <"$tmp/minmax")" -eq 3 ] || { fail "mlp.dl has 3 products; the IR quantizes:"; cat "$tmp/minmax"; }
cmp -s "$tmp/default" "$tmp/p9999" || fail "the default method is not percentile=99.99"
cmp -s "$tmp/minmax" "$tmp/entropy" && fail "minmax and entropy pick the same scales"
# The input x is U(-1, 1): its minmax scale is just under 1/127.
x_scale=$(head -n 1 "$tmp/minmax")
awk -v s="$x_scale" 'BEGIN { exit !(s > 0.99 / 127 && s <= 1.0 / 127) }' || fail "x's minmax scale is $x_scale"
# Fewer samples, another range for the hidden layers.
scales --calib-method=minmax --calib-samples=1 >"$tmp/one"
cmp -s "$tmp/one" "$tmp/minmax" && fail "--calib-samples=1 changes nothing"

# Calibrated on the compiled model (emu): the interpreter's scales, f32
# rounding apart, zero points the same.
alike() {
  [ "$(wc -l <"$1")" -eq "$(wc -l <"$2")" ] || return 1
  paste -d ' ' "$1" "$2" | awk '{ n = NF / 2; d = $1 - $(n + 1); if (d < 0) d = -d;
    m = $1 < 0 ? -$1 : $1; if (d > 1e-6 * m) bad = 1;
    for (i = 2; i <= n; i++) if ($i != $(n + i)) bad = 1 } END { exit bad }'
}
for m in minmax entropy percentile=99.9; do
  scales --calib-method=$m --calib-backend=ref >"$tmp/on_ref"
  scales --calib-method=$m --calib-backend=emu >"$tmp/on_emu"
  alike "$tmp/on_ref" "$tmp/on_emu" && ok ||
    { fail "--calib-method=$m: emu's scales are not ref's:"; paste "$tmp/on_ref" "$tmp/on_emu"; }
done
# auto: the interpreter without a GPU; --stats says where it ran.
no_gpu="env DLCC_LIBCUDA=/nonexistent/libcuda.so.1"
stats_backend() { "$@" --stats 2>&1 >/dev/null | awk '$2 == "calibrate:" && $3 == "backend" { print $1 }'; }
[ "$(stats_backend $no_gpu "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/calib")" = ref ] && ok ||
  fail "--calib-backend=auto does not calibrate on ref without a GPU"
[ "$(stats_backend "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/calib" --calib-backend=emu)" = emu ] && ok ||
  fail "--calib-backend=emu does not calibrate on emu"
expect_sub 1 "dlcc: error: calibration cannot run on cuda: cannot load /nonexistent/libcuda.so.1 (no NVIDIA driver on this machine)" \
  $no_gpu "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/calib" --calib-backend=cuda
# A sample of the wrong shape: the same message on emu.
expect 1 "dlcc: error: $tmp/bad/2.npy: f32[2, 784] does not match input 'x' f32[8, 784]" \
  "$dlcc" "$mlp" --quantize=int8 --calibrate="$tmp/bad" --calib-backend=emu
# An activation that is not finite: its source line, on either backend.
printf 'model logs(x: f32[8, 784]) -> f32[8, 10] {\n  return linear(log(x), 10) as fc\n}\n' >"$tmp/logs.dl"
for b in ref emu; do
  expect_sub 1 "calibration needs finite activations" \
    "$dlcc" "$tmp/logs.dl" --quantize=int8 --calibrate="$tmp/calib" --calib-backend=$b
  cp "$tmp/err" "$tmp/logs_$b.err"
done
grep -q "^$tmp/logs.dl:2:.*: error: calibration on $tmp/calib/1.npy: %[0-9]* (log) computes NaN at element" "$tmp/logs_ref.err" &&
  ok || { fail "log of a negative sample is not named by its source line:"; cat "$tmp/logs_ref.err"; }
cmp -s "$tmp/logs_ref.err" "$tmp/logs_emu.err" && ok ||
  { fail "a NaN activation is reported otherwise on emu:"; cat "$tmp/logs_ref.err" "$tmp/logs_emu.err"; }

# dlcc run on ref and emu, and the model.so, agree exactly.
q="--quantize=int8 --calibrate=$tmp/calib"
"$dlcc" run "$mlp" $q --backend=ref --output-dir="$tmp/ref" >/dev/null 2>&1 || fail "dlcc run --quantize on ref"
"$dlcc" run "$mlp" $q --backend=emu --output-dir="$tmp/emu" >/dev/null 2>&1 || fail "dlcc run --quantize on emu"
"$dlcc" "$mlp" $q -o "$tmp/mq.so" --arch=none >"$tmp/err" 2>&1 || { fail "dlcc -o mq.so --quantize"; cat "$tmp/err"; }
"$dlcc" run "$tmp/mq.so" --backend=emu --output-dir="$tmp/so" >/dev/null 2>&1 || fail "dlcc run mq.so"
cmp -s "$tmp/emu/probs.npy" "$tmp/so/probs.npy" || fail "dlcc run and the model.so differ on the int8 mlp"
# The kernels against the interpreter: f32 rounding apart (softmax
# outputs near 0.1).
d=$(max_diff "$tmp/ref/probs.npy" "$tmp/emu/probs.npy")
below "$d" 1e-6 || fail "ref and emu differ by $d on the int8 mlp"
# int8 against f32: close, not equal.
"$dlcc" run "$mlp" --backend=ref --output-dir="$tmp/f32" >/dev/null 2>&1
d=$(max_diff "$tmp/ref/probs.npy" "$tmp/f32/probs.npy")
below "$d" 2e-3 || fail "int8 and f32 differ by $d on the mlp"
below "$d" 0 && fail "int8 gives exactly the f32 output"
expect 1 "dlcc: error: $tmp/mq.so is compiled already: quantize it when you build it (dlcc MODEL --quantize=int8 --calibrate=DIR -o $tmp/mq.so)" \
  "$dlcc" run "$tmp/mq.so" $q

# --weights calibrates: a file of the seed-5 weights gives what --seed=5
# gives, on the same input, and the same scales in the IR.
"$dlcc" "$mlp" -o "$tmp/w.so" --external-weights --seed=5 --arch=none >/dev/null 2>&1 || fail "writing weights"
x="--input x=$tmp/calib/1.npy"
"$dlcc" run "$mlp" $q $x --weights="$tmp/w.safetensors" --backend=ref --output-dir="$tmp/wf" >/dev/null 2>&1 ||
  fail "dlcc run --quantize --weights"
"$dlcc" run "$mlp" $q $x --seed=5 --backend=ref --output-dir="$tmp/ws" >/dev/null 2>&1 || fail "dlcc run --seed=5"
"$dlcc" run "$mlp" $q $x --backend=ref --output-dir="$tmp/w0" >/dev/null 2>&1 || fail "dlcc run --seed=0"
cmp -s "$tmp/wf/probs.npy" "$tmp/ws/probs.npy" || fail "--weights (the seed-5 values) and --seed=5 differ"
cmp -s "$tmp/wf/probs.npy" "$tmp/w0/probs.npy" && fail "--weights gives what seed 0 gives"
scales --weights="$tmp/w.safetensors" >"$tmp/wfile"
scales --seed=5 >"$tmp/wseed"
cmp -s "$tmp/wfile" "$tmp/wseed" || fail "dlcc --weights and --seed=5 calibrate differently"
cmp -s "$tmp/wfile" "$tmp/default" && fail "dlcc --weights calibrates with seed 0's weights"
expect 1 "" "$dlcc" "$mlp" $q --weights="$tmp/none.safetensors"
grep -q "none.safetensors" "$tmp/err" || { fail "a missing --weights file is not named:"; cat "$tmp/err"; }

# ---- dlcc quant-report ----
# Calibrated on samples 1-3, measured on 4-5: three int8 products, the
# output a classifier (top-1 over its 10 classes, 16 rows).
mkdir -p "$tmp/cal3" "$tmp/test2"
cp "$tmp/calib/1.npy" "$tmp/calib/2.npy" "$tmp/calib/3.npy" "$tmp/cal3/"
cp "$tmp/calib/4.npy" "$tmp/calib/5.npy" "$tmp/test2/"
expect 0 "" "$dlcc" quant-report "$mlp" --calibrate="$tmp/cal3" --test="$tmp/test2"
grep -q "^int8 against f32 on 2 samples from $tmp/test2 (reference interpreter); calibrated on 3 from $tmp/cal3$" "$tmp/out" &&
  ok || { fail "quant-report: no summary line:"; cat "$tmp/out"; }
[ "$(grep -c '^linear %[0-9]* fc[123].weight ' "$tmp/out")" = 3 ] && ok ||
  { fail "quant-report: not one line per int8 product:"; cat "$tmp/out"; }
grep -qE '^probs .* [0-9.]+% \([0-9]+ of 16\)$' "$tmp/out" && ok ||
  { fail "quant-report: no top-1 agreement over 16 rows:"; cat "$tmp/out"; }
expect 0 "" "$dlcc" quant-report "$mlp" --calibrate="$tmp/cal3" --test-samples=1
grep -q "^int8 against f32 on 1 sample from $tmp/cal3 " "$tmp/out" && ok ||
  { fail "quant-report: --test-samples=1 without --test:"; cat "$tmp/out"; }
expect 1 "dlcc: error: --quantize=int8 needs --calibrate=DIR, a folder of sample inputs (.npy) to measure the activations' ranges on" \
  "$dlcc" quant-report "$mlp"
expect 1 "dlcc: error: calibration folder $tmp/nowhere does not exist" \
  "$dlcc" quant-report "$mlp" --calibrate="$tmp/cal3" --test="$tmp/nowhere"
expect 1 "dlcc: error: $tmp/bad/2.npy: f32[2, 784] does not match input 'x' f32[8, 784]" \
  "$dlcc" quant-report "$mlp" --calibrate="$tmp/cal3" --test="$tmp/bad"

finish "quant cli"
