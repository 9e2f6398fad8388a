#!/bin/sh
# `dlcc -o model.so` and `dlcc run model.so` from the command line: the
# library gives what `dlcc run model.dl --backend=ref` gives for the same
# seed (weights and random inputs, index inputs included), the header is
# written, external weights are found (recorded path, DLCC_WEIGHTS,
# --weights), and bad libraries and flags give one clear line.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
b=${top_builddir:-.}
s=${top_srcdir:-.}
dlcc="$b/dlcc"
export DLCC_CACHE_DIR="$tmp/cache"
[ -n "${DLCC_EMU_HEADER:-}" ] || DLCC_EMU_HEADER="$s/runtime/emu/dlcc_emu.h" && export DLCC_EMU_HEADER

# same_npy A B: equal length, values within 1e-5 relative.
same_npy() {
  npy_values "$1" >"$tmp/a"
  npy_values "$2" >"$tmp/b"
  awk 'NR == FNR { a[FNR] = $1 + 0; n = FNR; s = a[FNR] < 0 ? -a[FNR] : a[FNR]; if (s > big) big = s; next }
       { m = FNR; d = $1 - a[FNR]; if (d < 0) d = -d; s = a[FNR] < 0 ? -a[FNR] : a[FNR]
         if (s < 1e-3 * big) s = 1e-3 * big; if (d > 1e-5 * s) { print "value " FNR ": " a[FNR] " vs " $1; bad = 1 } }
       END { if (n != m || n == 0) { print n " values vs " m; exit 1 }; exit bad }' "$tmp/a" "$tmp/b"
}

printf 'model tiny(tokens: i64[2, 3], x: f32[2, 3, 4]) -> f32[2, 3, 4] {\n  e = embedding(tokens, 7, 4) as embed\n  return relu(linear(e + x, 4) as fc)\n}\n' >"$tmp/tiny.dl"

for m in "$s/examples/mlp.dl" "$tmp/tiny.dl"; do
  n=$(basename "$m" .dl)
  expect 0 "" "$dlcc" "$m" --seed=4 -o "$tmp/$n.so"
  [ -f "$tmp/$n.h" ] || fail "no $n.h"
  expect 0 "" "$dlcc" run "$tmp/$n.so" --backend=emu --seed=4 --output-dir "$tmp/$n.so.out"
  cp "$tmp/out" "$tmp/$n.so.txt"
  expect 0 "" "$dlcc" run "$m" --backend=ref --seed=4 --output-dir "$tmp/$n.ref"
  o=output; [ "$n" = mlp ] && o=probs
  same_npy "$tmp/$n.ref/$o.npy" "$tmp/$n.so.out/$o.npy" && ok || fail "$n.so differs from the reference"
  # The same summary line format as for a .dl.
  grep -q '^output: f32\[2, 3, 4\]  min\|^probs: f32\[8, 10\]  min' "$tmp/$n.so.txt" && ok ||
    fail "summary: $(cat "$tmp/$n.so.txt")"
done

# A relative path works (dlopen alone would search the library path).
(cd "$tmp" && "$dlcc" run mlp.so --backend=emu >/dev/null 2>&1) && ok || fail "dlcc run mlp.so (relative)"

# External weights: a small library, weights in mlp_ext.safetensors.
expect 0 "" "$dlcc" "$s/examples/mlp.dl" --seed=4 --external-weights -o "$tmp/mlp_ext.so"
[ -f "$tmp/mlp_ext.safetensors" ] && ok || fail "no mlp_ext.safetensors"
[ "$(wc -c <"$tmp/mlp_ext.so")" -lt 1000000 ] && ok || fail "mlp_ext.so holds the weights"
grep -q '#define MLP_EXT_EXTERNAL_WEIGHTS 1' "$tmp/mlp_ext.h" && ok || fail "mlp_ext.h"
expect 0 "" "$dlcc" run "$tmp/mlp_ext.so" --backend=emu --seed=4 --output-dir "$tmp/ext.out"
same_npy "$tmp/mlp.ref/probs.npy" "$tmp/ext.out/probs.npy" && ok || fail "external weights differ"
mv "$tmp/mlp_ext.safetensors" "$tmp/moved.safetensors"
"$dlcc" run "$tmp/mlp_ext.so" --backend=emu >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "^dlcc: error: .*mlp_ext.safetensors" "$tmp/err" && ok || fail "missing weights: $(cat "$tmp/err")"
expect 0 "" env DLCC_WEIGHTS="$tmp/moved.safetensors" "$dlcc" run "$tmp/mlp_ext.so" --backend=emu
expect 0 "" "$dlcc" run "$tmp/mlp_ext.so" --backend=emu --weights "$tmp/moved.safetensors"
# Built from a given file: recorded, not copied.
expect 0 "" "$dlcc" "$s/examples/mlp.dl" --weights "$tmp/moved.safetensors" --external-weights -o "$tmp/given.so"
[ ! -f "$tmp/given.safetensors" ] && ok || fail "--weights FILE --external-weights copied the file"
expect 0 "" "$dlcc" run "$tmp/given.so" --backend=emu --seed=4 --output-dir "$tmp/given.out"
same_npy "$tmp/mlp.ref/probs.npy" "$tmp/given.out/probs.npy" && ok || fail "given external weights differ"
# Embedded weights from a file give the same numbers as random ones drawn with the same seed.
expect 0 "" "$dlcc" "$s/examples/mlp.dl" --weights "$tmp/moved.safetensors" -o "$tmp/fromfile.so"
expect 0 "" "$dlcc" run "$tmp/fromfile.so" --backend=emu --seed=4 --output-dir "$tmp/fromfile.out"
same_npy "$tmp/mlp.ref/probs.npy" "$tmp/fromfile.out/probs.npy" && ok || fail "--weights into the library"

# Bad libraries and flags.
head -c 3000 "$tmp/mlp.so" >"$tmp/cut.so"
"$dlcc" run "$tmp/cut.so" --backend=emu >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "^dlcc: error: cannot load $tmp/cut.so: " "$tmp/err" && ok || fail "truncated: $(cat "$tmp/err")"
printf 'not an ELF file' >"$tmp/junk.so"
"$dlcc" run "$tmp/junk.so" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "^dlcc: error: cannot load $tmp/junk.so: " "$tmp/err" && ok || fail "junk: $(cat "$tmp/err")"
expect 1 "dlcc: error: $tmp/mlp.so: the reference interpreter needs the model's .dl or .ir; a .so runs on auto, cuda or emu" \
  "$dlcc" run "$tmp/mlp.so" --backend=ref
expect 1 "dlcc: error: -D and --model change how a model compiles; a .so is compiled already" \
  "$dlcc" run "$tmp/mlp.so" -D N=2
expect 1 "dlcc: error: -o $tmp/m.txt: name a shared library (FILE.so), or choose an --emit kind" \
  "$dlcc" "$s/examples/mlp.dl" -o "$tmp/m.txt"
expect 1 "dlcc: error: --arch: 'sm90' is not an architecture like sm_90" \
  "$dlcc" "$s/examples/mlp.dl" --arch=sm90 -o "$tmp/bad.so"
[ ! -f "$tmp/bad.so" ] && [ ! -f "$tmp/bad.h" ] && ok || fail "a failed build left files"
expect 1 "" env CC=false "$dlcc" "$s/examples/mlp.dl" --arch=none -o "$tmp/bad.so"
grep -q "the host C compiler failed building" "$tmp/err" && ok || fail "CC=false: $(cat "$tmp/err")"

finish
