#!/bin/sh
# The one GPU check, for the lent GPU machine (nvcc and python3 there; no
# flex, bison, autotools, Check or network).  From the repository root:
#
#   tests/gpu/check.sh dlcc-X.Y.Z.tar.gz [DEPS_DIR]
#
# TARBALL is a `make dist` tarball built on a development machine;
# DEPS_DIR may hold Debian packages the GPU machine lacks (libcjson1,
# libcjson-dev: `apt-get download libcjson1 libcjson-dev`), unpacked into
# a private prefix.  It builds dlcc, then for every example runs the model
# on the cuda backend and on the reference interpreter from the same
# random weights and inputs, and prints one table line per model: the max
# relative error and the cuda latency.  Exits non-zero when any model
# fails or differs by more than its tolerance.
set -u
tarball=${1:?usage: tests/gpu/check.sh TARBALL [DEPS_DIR]}
deps=${2:-}
work=${TMPDIR:-/tmp}/dlcc-gpu
rm -rf "$work" && mkdir -p "$work" || exit 1
tar -C "$work" -xzf "$tarball" || exit 1
src=$(ls -d "$work"/dlcc-*/ | head -1)

lib=
if [ -n "$deps" ] && ls "$deps"/*.deb >/dev/null 2>&1; then
  mkdir -p "$work/prefix"
  for d in "$deps"/*.deb; do dpkg -x "$d" "$work/prefix"; done
  lib=$(dirname "$(find "$work/prefix" -name 'libcjson.so*' | head -1)")
fi
configure() {
  if [ -n "$lib" ]; then
    ./configure -q "CJSON_CFLAGS=-I$work/prefix/usr/include" "CJSON_LIBS=-L$lib -Wl,-rpath,$lib -lcjson"
  else
    ./configure -q
  fi
}
cd "$src" || exit 1
echo "== build"
if ! { configure >"$work/configure.log" 2>&1 && make -j16 >"$work/make.log" 2>&1; }; then
  tail -30 "$work/configure.log" "$work/make.log"
  exit 1
fi

echo "== models: cuda against the reference interpreter"
status=0
printf '%-14s %-8s %-12s %s\n' model result max_rel_err cuda_ms
for m in mlp lenet resnet18 lstm transformer; do
  ref="$work/out-$m-ref" gpu="$work/out-$m-cuda"
  if ! ./dlcc run "examples/$m.dl" --backend=ref --seed 1 --output-dir "$ref" >/dev/null 2>"$work/$m.ref.err"; then
    printf '%-14s %-8s %s\n' "$m" FAIL "ref: $(head -1 "$work/$m.ref.err")"; status=1; continue
  fi
  start=$(date +%s%N)
  if ! ./dlcc run "examples/$m.dl" --backend=cuda --seed 1 --output-dir "$gpu" >/dev/null 2>"$work/$m.cuda.err"; then
    printf '%-14s %-8s %s\n' "$m" FAIL "cuda: $(head -1 "$work/$m.cuda.err")"; status=1; continue
  fi
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  err=$(python3 - "$ref" "$gpu" <<'PY'
import sys, os, numpy as np
ref, gpu = sys.argv[1], sys.argv[2]
worst = 0.0
for f in sorted(os.listdir(ref)):
    a = np.load(os.path.join(ref, f)).astype(np.float64)
    b = np.load(os.path.join(gpu, f)).astype(np.float64)
    worst = max(worst, float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-3)))
print(f"{worst:.3g}")
PY
)
  ok=$(python3 -c "print('ok' if float('$err') <= 1e-5 else 'DIFF')")
  [ "$ok" = ok ] || status=1
  printf '%-14s %-8s %-12s %s\n' "$m" "$ok" "$err" "$ms (whole run, incl. compile)"
done
exit $status
