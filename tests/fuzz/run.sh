#!/bin/sh
# Runs dlcc's libFuzzer targets (docs/fuzzing.md), each for a time:
#   tests/fuzz/run.sh BUILD_DIR [SECONDS [TARGET...]]
# BUILD_DIR is a configured build; `make fuzz` there builds the targets
# first (FUZZ_NO_BUILD=1 skips that).  SECONDS per target (default 60);
# TARGETs default to every one the build has (dl, ir, compile, npy,
# safetensors, plan, onnx, onnx_tensor).  Each starts from its seeds
# (tests/fuzz/corpus/NAME and the examples, error files and golden IR
# that suit it) and adds what it finds to BUILD_DIR/tests/fuzz/run/NAME/
# corpus, which later runs continue from.  A crash, leak, timeout, UBSan
# report or broken check leaves its input in BUILD_DIR/tests/fuzz/
# artifacts/ and fails the run; rerun one input with
#   BUILD_DIR/tests/fuzz/fuzz_NAME FILE
# Environment: FUZZ_TIMEOUT (seconds one input may take, default 10),
# FUZZ_RSS_MB (default 2048), FUZZ_ARGS (more libFuzzer flags, e.g.
# -jobs=2 -workers=2).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS [TARGET...]]}" && pwd)
seconds=${2:-60}
[ $# -ge 2 ] && shift 2 || shift $#
make=${MAKE:-make}
if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  $make -C "$build" -s fuzz
fi
targets=${*:-$($make -C "$build" -s fuzz-list)}
fuzz="$build/tests/fuzz"
artifacts="$fuzz/artifacts"
mkdir -p "$artifacts"
# Leaks fail a run as crashes do; UBSan stops at the first report.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
export ASAN_OPTIONS UBSAN_OPTIONS

# Seeds that live elsewhere in the tree, copied so that only the files
# that suit a target are read (an in-tree build leaves binaries in
# examples/).
seed() {
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$work/seeds/"; done
  return 0
}

failed=
for t in $targets; do
  prog="$fuzz/fuzz_$t"
  work="$fuzz/run/$t"
  if [ ! -x "$prog" ]; then
    echo "fuzz_$t: not built ($prog)"
    failed="$failed $t"
    continue
  fi
  rm -rf "$work/seeds" "$work/tmp"
  mkdir -p "$work/corpus" "$work/seeds" "$work/tmp"
  dict=$t max_len=8192
  case $t in
    dl) seed "$src"/examples/*.dl "$src"/tests/errors/*.dl ;;
    ir) seed "$src"/tests/golden/*.ir "$src"/tests/golden/ir/*.ir "$src"/tests/golden/passes/*.ir
        max_len=65536 ;;
    compile) dict=dl ;;
    onnx) max_len=65536 ;;
    onnx_tensor) dict=onnx max_len=4096 ;;
    npy|plan) max_len=4096 ;;
  esac
  set -- -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -max_len="$max_len" -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-"
  [ -f "$src/tests/fuzz/dict/$dict.dict" ] && set -- "$@" -dict="$src/tests/fuzz/dict/$dict.dict"
  # New inputs go to the first folder; the seeds are only read.
  set -- "$@" ${FUZZ_ARGS:-} "$work/corpus" "$work/seeds"
  [ -d "$src/tests/fuzz/corpus/$t" ] && set -- "$@" "$src/tests/fuzz/corpus/$t"
  # The ONNX targets' scratch folder (fuzz.c): inside the build tree, as a
  # crash leaves it behind.
  if TMPDIR="$work/tmp" "$prog" "$@" >"$work/log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/log" | tail -n 1)
    echo "fuzz_$t: ${seconds}s, ${runs:-?} inputs, $cov, corpus $(ls "$work/corpus" | wc -l) new"
  else
    echo "fuzz_$t: FAILED; the end of $work/log:"
    tail -n 60 "$work/log"
    unit=$(sed -n 's/.*Test unit written to //p' "$work/log" | tail -n 1)
    [ -n "$unit" ] && echo "fuzz_$t: reproduce with: $prog $unit"
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz: failed:$failed"
  exit 1
fi
