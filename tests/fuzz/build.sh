#!/bin/sh
# Builds the libFuzzer target with clang and runs it.
#   tests/fuzz/build.sh BUILD_DIR [SECONDS]
# BUILD_DIR is a configured build (for config.h and the generated
# parser.c/lexer.c).  The corpus starts from the examples and the error
# files; crashes land in fuzz-out/.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: build.sh BUILD_DIR [SECONDS]}" && pwd)
seconds=${2:-60}
out=${FUZZ_OUT:-$PWD/fuzz-out}
mkdir -p "$out/corpus" "$out/crashes"
cp "$src"/examples/*.dl "$src"/tests/errors/*.dl "$out/corpus/" 2>/dev/null || true
cp "$src"/tests/golden/*.ir "$out/corpus/" 2>/dev/null || true
# ONNX: the importer is built when configure found protobuf-c; seed it with
# some of the backend tests' models.
onnx_src= onnx_lib=
if grep -q 'define HAVE_ONNX 1' "$build/config.h"; then
  pbc="$build/frontend/onnx.pb-c.c"
  [ -f "$pbc" ] || pbc="$src/frontend/onnx.pb-c.c"
  onnx_src="$pbc" onnx_lib=-lprotobuf-c
  for f in /usr/share/libonnx-testdata/data/node/test_*/model.onnx; do
    [ -f "$f" ] || continue
    case $f in */test_conv*|*/test_lstm*|*/test_gemm*|*/test_reshape*|*/test_slice*|*/test_gather_*) \
      cp "$f" "$out/corpus/onnx-$(basename "$(dirname "$f")").onnx" ;; esac
  done
fi
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" -I"$src/include" -I"$build" -I"$build/frontend" \
  "$src"/tests/fuzz/fuzz_frontend.c "$src"/frontend/ast.c "$src"/frontend/lower.c "$src"/frontend/layers.c \
  "$build"/frontend/parser.c "$build"/frontend/lexer.c \
  "$src"/ir/arena.c "$src"/ir/diag.c "$src"/ir/ir.c "$src"/ir/shape.c "$src"/ir/verify.c \
  "$src"/ir/print.c "$src"/ir/parse.c "$src"/ir/dot.c \
  "$src"/frontend/onnx.c "$src"/ir/eval.c $onnx_src -lm $onnx_lib -o "$out/fuzz_frontend"
cd "$out"
./fuzz_frontend -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix=crashes/ -print_final_stats=1 corpus
