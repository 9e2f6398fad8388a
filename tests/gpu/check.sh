#!/bin/bash
# The one GPU check, for the lent GPU machine (nvcc, gcc, make, python3;
# no flex, bison, autotools, Check or network; maybe no
# libcjson).  Takes a `make dist` tarball and, optionally, a folder of
# Debian packages for what the machine lacks; builds dlcc from the tarball
# and prints a table, one line per model:
#
#   bash tests/gpu/check.sh TARBALL [DEPS_DIR]
#
# What it runs (tests/gpu/README.md says how to prepare and read it), in
# this order, each part under its own timeout and all of it within a
# budget of GPU_CHECK_BUDGET seconds (default 450, for the device tool's
# 480): a part the budget no longer covers is reported as skipped.
#   1. the machine: GPU, driver, toolkit, compilers;
#   2. the build: configure --with-cuda, make -j16, tests/gpu/rt_check and
#      tests/gpu/layer_bench;
#   3. rt_check on cuda: cuBLASLt in f32/f16/bf16 with its bias and
#      activation epilogues, cuBLAS's int8 (i32 sums, exact), against the
#      CPU GEMM; kernel argument sizes, >48 KiB dynamic shared memory, the
#      tensor-core instructions (mma, ldmatrix, cp.async, and wgmma in
#      every swizzle mode) byte for byte against the emu, and (its own
#      process) a faulting kernel and the recovery after it;
#   4. every example on --backend=cuda against --backend=ref (same seed,
#      the image models at -D HW=64), with the warm latency of 20 more
#      runs (dlcc run --bench=20);
#   5. resnet18 (-D HW=64) and the transformer layer in f16, bf16 and
#      int8 (calibrated on 4 random samples) against the reference;
#   6. every distinct convolution and GEMM of ResNet-50 at batch 1 and 64
#      in f16, bf16, int8, f32 and TF32 (tests/gpu/layer_bench layers):
#      dlcc next to cuBLAS and cuDNN, GPU time by CUDA events, each table
#      printed as soon as it is measured; f16 also with --no-wgmma (the
#      mma.sync side) and the gain wgmma gives;
#   7. the whole ResNet-50 at batch 1 and 64 in each precision
#      (layer_bench model), next to PyTorch eager and
#      torch.compile(max-autotune) when import torch works
#      (tests/gpu/torch_bench.py, the compile capped by the budget);
#      then attention forward and backward (layer_bench attention: B=8,
#      H=12, S=2048 and 512, d=64 and 128, causal and not, f16 or
#      GPU_CHECK_ATTN_MODES) in TFLOP/s next to PyTorch's SDPA
#      (tests/gpu/torch_attn.py);
#   8. compute-sanitizer: memcheck on mlp, resnet18 (HW=64) and
#      rt_check's kernels, racecheck on lenet's shared-memory kernels;
#      memcheck and racecheck on resnet18 (HW=32) in f16, bf16 and int8;
#   9. an AOT model.so on cuda against the same .so on emu, and int8
#      calibration on cuda against the reference interpreter.
#  10. (after 3) the memory-bound kernels: layernorm, softmax, rms_norm and
#      a fused elementwise map in GB/s against the measured copy
#      bandwidth (tests/gpu/bw_bench, its own 60 s).
#  11. (after 4) the execution engine (docs/runtime.md): the warm wall time
#      of a run of ResNet-50 (batch 1, 64x64), the LSTM and the llama block
#      with CUDA graphs and with --no-graphs (the llama block also with
#      its side streams off, ResNet-50 also with --no-chain-launches, in
#      a graph and out), and the engine report (up to 15 s a run).
#  12. (after 11) training (docs/training.md): dlcc train's step losses on
#      cuda against ref (the MLP, LeNet, LSTM and GRU of tests/train), ResNet-18
#      training throughput (64x64, batch 64) in f32 and bf16 (and f32 with
#      --no-chain-launches: what chained launches change), PyTorch's own
#      training against dlcc's on cuda (tests/torch/train_parity.py), and PyTorch's
#      same step, eager and torch.compile (tests/gpu/train_bench.py).
# Nothing stops at the first failure; each command has a timeout.  The
# whole log goes to $OUT/check.log when OUT is set (the device tool brings
# $OUT back), else to $TMPDIR/dlcc-gpu/check.log; the table also to
# summary.txt beside it.  Exits 1 when anything failed.
set -u
tarball=${1:?usage: bash tests/gpu/check.sh TARBALL [DEPS_DIR]}
deps=${2:-}
case $tarball in /*) ;; *) tarball=$PWD/$tarball ;; esac
case $deps in /* | "") ;; *) deps=$PWD/$deps ;; esac
work=${TMPDIR:-/tmp}/dlcc-gpu
logdir=${OUT:-$work}
rm -rf "$work" && mkdir -p "$work" "$logdir" || exit 1
log=$logdir/check.log
summary=$logdir/summary.txt
: >"$summary"
status=0
started=$(date +%s)
budget=${GPU_CHECK_BUDGET:-450}

note() { printf '%s\n' "$*" | tee -a "$summary"; }
# GPU_CHECK_PARTS: the parts to run, by name, space-separated (default:
# all): rt_check bandwidth models precision layers model attention
# profile sanitizer calib engine train ncu aot.  The parts after the build are independent, except
# precision, which compares with the models part's f32 outputs.  So a
# session with little device time left can rerun what it changed:
#   GPU_CHECK_PARTS="rt_check layers train" GPU_CHECK_LAYER_MODES=f16 ...
part=
section() { part=$1; }
selected() {
  [ -z "${GPU_CHECK_PARTS:-}" ] && return 0
  case " $GPU_CHECK_PARTS " in *" $part "*) return 0 ;; esac
  return 1
}
# slot WANT: the seconds a part may take: WANT, or what the budget has
# left less 20 for the summary; 0 when that is under 20 or the part is
# not selected.
slot() {
  selected || { echo 0; return; }
  local left=$((budget - ($(date +%s) - started) - 20))
  if [ $left -lt 20 ]; then echo 0; elif [ $left -lt "$1" ]; then echo $left; else echo "$1"; fi
}
skipped() {
  if selected; then note "$1: skipped (the time budget, ${budget} s, is spent)"; else note "$1: skipped (not in GPU_CHECK_PARTS)"; fi
}
fail() { note "FAIL $*"; status=1; }
# run LIMIT NAME CMD...: CMD under timeout, output in $work/NAME.out (and
# in the log); its exit status.
run() {
  local limit=$1 name=$2
  shift 2
  echo "\$ $*" >"$work/$name.out"
  timeout "$limit" "$@" >>"$work/$name.out" 2>&1
  local rc=$?
  [ $rc = 124 ] && echo "(timed out after ${limit}s)" >>"$work/$name.out"
  sed "s/^/  [$name] /" "$work/$name.out"
  return $rc
}

# The memory-bound kernels (docs/kernels.md): tests/gpu/bw_bench prints
# the device-to-device copy bandwidth, then one line per kernel with its
# GB/s and its fraction of the copy (the target is 0.85), and its error
# against the reference interpreter at the smaller size.
bandwidth_section() {
  echo "== memory-bound kernels: GB/s against the copy bandwidth"
  if ! timeout 120 make -j16 tests/gpu/bw_bench >>"$logdir/make.log" 2>&1; then
    fail "bw_bench: make tests/gpu/bw_bench failed (see make.log)"
    return
  fi
  run 60 bw_bench ./tests/gpu/bw_bench
  local rc=$?
  sed -n '/cuMemcpyDtoD\|of copy\|^kernel /p' "$work/bw_bench.out" >>"$summary"
  if [ $rc = 0 ]; then
    note "bw_bench: $(grep -c 'of copy' "$work/bw_bench.out") kernels timed, every output ok"
  else
    fail "bw_bench: rc $rc: $(grep -m1 'FAIL\|DIFF\|timed out' "$work/bw_bench.out" | cut -c1-160)"
  fi
}

# The execution engine (docs/runtime.md): warm wall time per run (inputs
# in, the steps, outputs out, one synchronization) with the plan replayed
# as a CUDA graph and with every step launched (--no-graphs); what the
# graph saves is host overhead.  The kernels are in the cache from the
# models section (same -D), so each run is mostly the 200 timed runs.
engine_section() {
  echo "== execution engine: wall time per run, CUDA graphs on and off"
  section engine
  local spec m defs mode flags lim
  for spec in "resnet50 -D HW=64" "lstm" "llama_block"; do
    read -r m defs <<<"$spec"
    modes="graphs no-graphs"
    # the llama block's graph has independent steps on 2 streams; the
    # ResNet's convolutions chain (docs/kernels.md): with and without
    # chains, in a graph and out of one
    [ "$m" = llama_block ] && modes="graphs no-side-streams no-graphs"
    [ "$m" = resnet50 ] && modes="graphs no-graphs no-chains no-chains.no-graphs"
    for mode in $modes; do
      lim=$(slot 15)
      if [ "$lim" = 0 ]; then
        skipped "engine $m $mode"
        continue
      fi
      flags=
      case $mode in *no-graphs) flags=--no-graphs ;; esac
      case $mode in no-chains*) flags="$flags --no-chain-launches" ;; esac
      nobr=0
      [ $mode = no-side-streams ] && nobr=1
      # shellcheck disable=SC2086
      if DLCC_NO_SIDE_STREAMS=$nobr run "$lim" "engine.$m.$mode" ./dlcc run "examples/$m.dl" $defs --backend=cuda --bench=200 --verbose $flags; then
        note "engine $m $mode: $(grep -m1 'bench:' "$work/engine.$m.$mode.out" | sed 's/^dlcc: bench: //');" \
          "$(grep -m1 'engine:' "$work/engine.$m.$mode.out" | sed 's/^dlcc: engine: //')"
      else
        fail "engine $m $mode: $(grep -m1 'error\|timed out' "$work/engine.$m.$mode.out" | cut -c1-160)"
      fi
    done
  done
}

# Training (docs/training.md): a training step on cuda against ref, step
# by step (the tiny MLP, LeNet-8 and the LSTM of tests/train, f32 1e-5
# of the loss), then the throughput of dlcc train on ResNet-18 (64x64,
# batch 64, SGD with momentum) in f32 and bf16: the difference between a
# 3-epoch and a 1-epoch run over 512 samples, so compiling and the first
# step are not in it; then PyTorch's same step, eager and torch.compile
# (tests/gpu/train_bench.py), when torch imports.
train_section() {
  echo "== training: steps on cuda against ref, and samples/s"
  section train
  if ! selected; then
    skipped "training"
    return
  fi
  local m b lim prec args
  for m in tiny lenet8 seqsign seqsign_gru; do
    lim=$(slot 60)
    if [ "$lim" = 0 ]; then
      skipped "train $m"
      continue
    fi
    case $m in
      tiny) args="tests/train/tiny.dl --data tests/train/data --batch 8 --optimizer=adamw --lr=0.05" ;;
      seqsign_gru) args="tests/train/seqsign_gru.dl --data tests/train/seqsign --batch 4 --optimizer=adam --lr=0.01" ;;
      *) args="examples/train/$m.dl --data tests/train/$m --batch 4 --optimizer=adam --lr=0.01" ;;
    esac
    for b in ref cuda; do
      # shellcheck disable=SC2086
      run "$lim" "train.$m.$b" ./dlcc train $args --loss=cross_entropy --epochs 2 --shuffle=false \
        --backend=$b --log "$work/train.$m.$b.jsonl" || true
    done
    err=$(python3 - "$work/train.$m.ref.jsonl" "$work/train.$m.cuda.jsonl" <<'PY'
import json, sys
def losses(f):
    try:
        return [json.loads(l)["loss"] for l in open(f) if '"step"' in l]
    except Exception:
        return []
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if not a or len(a) != len(b): print("count %d/%d" % (len(a), len(b))); sys.exit()
print("%.2g" % max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)))
PY
)
    ok=$(python3 -c "import sys; e = sys.argv[1]; print('ok' if e.replace('.', '').replace('e-', '').isdigit() and float(e) <= 1e-5 else 'DIFF')" "$err")
    [ "$ok" = ok ] || status=1
    row "train $m: cuda step losses vs ref" "$ok" "$err" - -
  done
  if ! python3 "$src/tests/gpu/train_bench.py" --make-data "$work/train_r18" --n 512 --hw 64; then
    fail "train resnet18: no data (numpy?)"
    return
  fi
  # f32/apart: the f32 step with no chained launches (docs/kernels.md),
  # what the grid barriers between a batchnorm's kernels gain or lose
  for variant in f32 bf16 f32/apart; do
    prec=${variant%/*} extra= epochs=3
    [ "$variant" = f32/apart ] && extra=--no-chain-launches epochs=2
    lim=$(slot 120)
    if [ "$lim" = 0 ]; then
      skipped "train resnet18 $variant"
      continue
    fi
    args="examples/resnet18.dl -D N=64 -D HW=64 --data $work/train_r18 --batch=64 --loss=cross_entropy --optimizer=sgd --momentum=0.9 --lr=0.01 --shuffle=false --backend=cuda --precision=$prec $extra"
    prec=$(echo "$variant" | tr / .)
    # One 3-epoch run: its log's "seconds" (wall time at each step's end)
    # gives epochs 2 and 3 without the compile and the first epoch's
    # warm-up (comparing a 1-epoch with a 3-epoch process measured the
    # kernel cache instead: the second process found every cubin cached).
    # shellcheck disable=SC2086
    # --profile=25: then one more step, kernel by kernel (GPU time)
    if run "$lim" "train.r18.$prec" ./dlcc train $args --epochs=$epochs --log "$work/train.r18.$prec.jsonl" --profile=25; then
      sed -n '/^dlcc: profile:/,/^  all/p' "$work/train.r18.$prec.out" | sed "s/^/profile train resnet18 $prec: /" >>"$summary"
      note "train resnet18 $prec (64x64, batch 64): $(python3 - "$work/train.r18.$prec.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
first = [s for s in steps if s["epoch"] == 1]
later = [s for s in steps if s["epoch"] > 1]
if not first or not later or "seconds" not in later[-1]:
    print("n/a (no step times in the log)"); sys.exit()
d = later[-1]["seconds"] - first[-1]["seconds"]
print("%.1f samples/s (epochs 2 on: %d steps of 64 in %.3f s; epoch 1 with the warm-up %.3f s)"
      % (64 * len(later) / d, len(later), d, first[-1]["seconds"]) if d > 0 else "n/a (no time passed)")
PY
);" "losses: $(grep -h '^epoch' "$work/train.r18.$prec.out" | sed 's/ (mean.*//' | paste -sd';')"
    else
      fail "train resnet18 $prec: $(grep -h -m1 'error\|timed out' "$work/train.r18.$prec.out" 2>/dev/null | head -1 | cut -c1-160)"
    fi
  done
  # PyTorch's own training against dlcc train on cuda, the same models
  # exported to ONNX (tests/torch/train_parity.py: losses to 1e-5, the
  # state_dict after SGD to 1e-4; torch on the CPU, dlcc on the GPU)
  lim=$(slot 150)
  if [ "$lim" = 0 ]; then
    skipped "training parity with PyTorch"
  else
    timeout "$lim" python3 "$src/tests/torch/train_parity.py" --dlcc ./dlcc --backend cuda >"$work/parity.out" 2>&1
    case $? in
      0) note "train parity with PyTorch on cuda: $(tail -1 "$work/parity.out")" ;;
      77) note "training parity with PyTorch: skipped (no torch)" ;;
      *) fail "train parity with PyTorch on cuda: $(grep -v '^ok' "$work/parity.out" | grep -v -i warn | head -4 | tr '\n' ' ' | cut -c1-300)" ;;
    esac
  fi
  lim=$(slot 200)
  if [ "$lim" -lt 60 ]; then
    skipped "PyTorch training comparison"
  else
    timeout "$lim" python3 "$src/tests/gpu/train_bench.py" --torch --batch 64 --hw 64 --dtypes f32,bf16 \
      --compile-cap $((lim - 60)) 2>&1 | tee "$work/torch_train.out"
    grep '^torch-train' "$work/torch_train.out" >>"$summary"
  fi
}

main() {
echo "== machine"
date
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
command -v nvcc >/dev/null && nvcc --version | tail -2
gcc --version | head -1
python3 --version || fail "python3 is missing"

# The toolkit: headers and the NVRTC/cuBLAS libraries configure wants.
cuda=
nvcc_root=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/bin/nvcc)")")
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda "$nvcc_root"; do
  if [ -n "$d" ] && [ -f "$d/include/cuda.h" ] && [ -f "$d/include/nvrtc.h" ] && [ -f "$d/include/cublas_v2.h" ]; then
    cuda=$d
    break
  fi
done
echo "CUDA toolkit: ${cuda:-none found}"
# compute-sanitizer lives in the toolkit, not always on PATH.
[ -n "$cuda" ] && PATH=$PATH:$cuda/bin:$cuda/compute-sanitizer
if [ -n "$cuda" ] && ! ls "$cuda"/lib64/libnvrtc.so "$cuda"/lib64/libcublas.so >/dev/null 2>&1; then
  # Only versioned libraries (a runtime-only install, or pip's wheels):
  # a folder of links that looks like a toolkit to configure.
  shim=$work/cuda
  mkdir -p "$shim/include" "$shim/lib64"
  site=$(python3 -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null)
  for inc in "$cuda/include" $(for s in $site; do ls -d "$s"/*/include 2>/dev/null; done); do
    for f in "$inc"/*; do [ -e "$shim/include/${f##*/}" ] || ln -s "$f" "$shim/include/"; done
  done
  for l in nvrtc nvrtc-builtins cublas cublasLt cudart; do
    f=$(ls "$cuda"/lib64/lib$l.so* "$cuda"/targets/*/lib/lib$l.so* $(for s in $site; do ls "$s"/*/lib/lib$l.so* 2>/dev/null; done) 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$shim/lib64/lib$l.so"
  done
  echo "CUDA toolkit: linked into $shim"
  cuda=$shim
fi

echo "== build"
tar -C "$work" -xzf "$tarball" || { fail "cannot unpack $tarball"; exit 1; }
src=$(ls -d "$work"/dlcc-*/ | head -1)
cjson=()
if [ -n "$deps" ] && ls "$deps"/*.deb >/dev/null 2>&1; then
  mkdir -p "$work/prefix"
  for d in "$deps"/*.deb; do dpkg -x "$d" "$work/prefix"; done
  lib=$(dirname "$(find "$work/prefix" -name 'libcjson.so*' | head -1)")
  cjson=("CJSON_CFLAGS=-I$work/prefix/usr/include" "CJSON_LIBS=-L$lib -Wl,-rpath,$lib -lcjson")
  echo "libcjson from $deps: $lib"
fi
cd "$src" || exit 1
export DLCC_CACHE_DIR=$work/kernel-cache
if ! run 300 configure ./configure -q ${cuda:+--with-cuda="$cuda"} "${cjson[@]}"; then
  fail "configure (see check.log; libcjson missing? pass a DEPS_DIR)"
  exit 1
fi
if ! timeout 600 make -j16 >"$logdir/make.log" 2>&1 ||
  ! timeout 300 make -j16 tests/gpu/rt_check tests/gpu/layer_bench >>"$logdir/make.log" 2>&1; then
  tail -40 "$logdir/make.log"
  fail "make (see make.log)"
  exit 1
fi
echo "built in $(($(date +%s) - started)) s"
grep -q "define HAVE_CUDA 1" config.h || fail "configure found no CUDA toolkit: the cuda backend is missing"

echo "== rt_check: cuBLASLt and cuBLAS, kernel arguments, dynamic shared memory, tensor cores, a fault"
section rt_check
if ! selected; then
  skipped "rt_check"
elif run 300 rt_check ./tests/gpu/rt_check cuda all; then
  note "rt_check cuda: $(grep -c '^ok' "$work/rt_check.out") checks ok"
else
  fail "rt_check cuda: $(grep -c '^FAIL' "$work/rt_check.out") failed: $(grep -m1 '^FAIL' "$work/rt_check.out" | cut -c1-200)"
fi
if ! selected; then
  :
elif run 120 rt_fault ./tests/gpu/rt_check cuda fault; then
  note "rt_check fault: $(grep -c '^ok' "$work/rt_fault.out") checks ok"
else
  fail "rt_check fault: $(grep -m1 '^FAIL' "$work/rt_fault.out" | cut -c1-200)"
fi

section bandwidth
if selected; then bandwidth_section; else skipped "bandwidth"; fi

echo "== models: cuda against the reference interpreter"
# compare REF_DIR CUDA_DIR: the worst over outputs of max|a - b| / max|a|
# (plain Python, so it needs no numpy): a number, "shape" or "nan".
compare() {
  python3 - "$1" "$2" <<'PY'
import ast, math, os, struct, sys
def npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    n = struct.unpack("<H" if data[6] == 1 else "<I", data[8:10] if data[6] == 1 else data[8:12])[0]
    start = 10 if data[6] == 1 else 12
    h = ast.literal_eval(data[start:start + n].decode("latin1"))
    code = h["descr"].lstrip("<|=")
    fmt = {"f4": "f", "f8": "d", "f2": "e", "i1": "b", "u1": "B", "b1": "?", "i4": "i", "i8": "q"}[code]
    body = data[start + n:]
    count = len(body) // struct.calcsize(fmt)
    return tuple(h["shape"]), struct.unpack("<%d%s" % (count, fmt), body)
ref, gpu = sys.argv[1], sys.argv[2]
worst = 0.0
for f in sorted(os.listdir(ref)):
    (sa, a), (sb, b) = npy(os.path.join(ref, f)), npy(os.path.join(gpu, f))
    if sa != sb:
        print("shape"); sys.exit()
    if any(math.isnan(y) and not math.isnan(x) for x, y in zip(a, b)):
        print("nan"); sys.exit()
    scale = max((abs(x) for x in a), default=0.0) or 1e-30
    worst = max(worst, max((abs(x - y) for x, y in zip(a, b)), default=0.0) / scale)
print("%.3g" % worst)
PY
}
# verdict ERR: ok up to 1e-5 (f32), else DIFF.
verdict() {
  python3 -c "import sys; e = sys.argv[1]; print('ok' if e not in ('shape', 'nan', '') and float(e) <= 1e-5 else 'DIFF')" "$1"
}
table=$work/table
printf '%-22s %-6s %-11s %-22s %s\n' model result max_rel_err "cuda warm ms mean/min" "cuda cold s" >"$table"
row() { printf '%-22s %-6s %-11s %-22s %s\n' "$@" >>"$table"; }
seed=1
section models
for spec in "mlp" "lenet" "lstm" "transformer" "resnet18 -D HW=64" "mobilenetv2 -D HW=64" "resnet50 -D HW=64" "unet -D HW=64"; do
  read -r m defs <<<"$spec"
  name=$m${defs:+-${defs##*=}}
  if [ "$(slot 60)" = 0 ]; then
    skipped "model $name"
    continue
  fi
  # shellcheck disable=SC2086
  if ! run 120 "$name.ref" ./dlcc run "examples/$m.dl" $defs --backend=ref --seed $seed --output-dir "$work/$name.ref"; then
    row "$name" FAIL - - "ref: $(tail -1 "$work/$name.ref.out" | cut -c1-80)"
    status=1
    continue
  fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  if ! run 120 "$name.cuda" ./dlcc run "examples/$m.dl" $defs --backend=cuda --seed $seed --bench=20 \
      --output-dir "$work/$name.cuda"; then
    row "$name" FAIL - - "cuda: $(grep -m1 'error' "$work/$name.cuda.out" | sed 's/^dlcc: error: //' | cut -c1-160)"
    status=1
    continue
  fi
  cold=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  warm=$(sed -n 's/.*bench: .* mean \([0-9.]*\) ms, min \([0-9.]*\) ms.*/\1\/\2/p' "$work/$name.cuda.out")
  err=$(compare "$work/$name.ref" "$work/$name.cuda")
  ok=$(verdict "$err")
  [ "$ok" = ok ] || status=1
  row "$name" "$ok" "$err" "${warm:--}" "$cold"
done

echo "== precision: f16, bf16 and int8 against the reference"
# npy PATH D0 D1 ...: a float32 .npy of uniform [-1, 1) draws (plain
# Python: the machine may lack numpy), a calibration sample.
npy() {
  python3 - "$@" <<'PY'
import random, struct, sys
path, dims = sys.argv[1], [int(d) for d in sys.argv[2:]]
n = 1
for d in dims: n *= d
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % d for d in dims)
header += " " * (63 - (len(header) + 10) % 64) + "\n"
rng = random.Random(len(path))
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % n, *(rng.uniform(-1, 1) for _ in range(n))))
PY
}
ptable=$work/ptable
printf '%-14s %-6s %-8s %-11s %s\n' model mode result max_rel_err "cuda warm ms mean/min" >"$ptable"
# The image models at -D HW=64 (the reference interpreter is slow); their
# f32 references are the models table's.  The U-Net's conv_transposes run
# channels last on the tensor cores only here.
section precision
for spec in "resnet18 resnet18-64 1 3 64 64" "transformer transformer 2 16 512" "unet unet-64 1 3 64 64"; do
  read -r m base dims <<<"$spec"
  defs=()
  [ "$m" = resnet18 ] || [ "$m" = unet ] && defs=(-D HW=64)
  mkdir -p "$work/calib-$m"
  # shellcheck disable=SC2086
  for i in 0 1 2 3; do npy "$work/calib-$m/$i.npy" $dims; done
  for mode in f16 bf16 int8; do
    if [ "$(slot 60)" = 0 ]; then
      skipped "precision $m $mode"
      continue
    fi
    flags=("${defs[@]}")
    case $mode in
      f16 | bf16) flags+=(--precision=$mode) ;;
      int8) flags+=(--quantize=int8 "--calibrate=$work/calib-$m") ;;
    esac
    name=$m.$mode
    # int8 against the reference interpreter on the same int8 graph; the
    # half types against the f32 reference (their own rounding included).
    ref=$work/$base.ref
    [ $mode = int8 ] && ref=$work/$name.ref
    [ -d "$ref" ] || run 300 "$name.refrun" ./dlcc run "examples/$m.dl" "${flags[@]}" --backend=ref --seed $seed \
        --output-dir "$ref" >/dev/null
    if ! run 300 "$name" ./dlcc run "examples/$m.dl" "${flags[@]}" --backend=cuda --seed $seed --bench=20 \
        --output-dir "$work/$name.cuda"; then
      printf '%-14s %-6s %-8s %-11s %s\n' "$m" $mode FAIL - "$(grep -m1 error "$work/$name.out" | cut -c1-120)" >>"$ptable"
      status=1
      continue
    fi
    warm=$(sed -n 's/.*bench: .* mean \([0-9.]*\) ms, min \([0-9.]*\) ms.*/\1\/\2/p' "$work/$name.out")
    err=$(compare "$ref" "$work/$name.cuda")
    limit=2e-2
    [ $mode = f16 ] && limit=1e-2
    ok=$(python3 -c "import sys; e = sys.argv[1]; print('ok' if e not in ('shape', 'nan', '') and float(e) <= $limit else 'DIFF')" "$err")
    [ "$ok" = ok ] || status=1
    printf '%-14s %-6s %-8s %-11s %s\n' "$m" $mode "$ok" "$err" "${warm:--}" >>"$ptable"
  done
done

echo "== ResNet-50 layer by layer: dlcc next to cuBLAS and cuDNN (GPU time)"
# cuDNN and cuBLAS by dlopen: the toolkit's, else PyTorch's wheels'.
site=$(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null)
LAYER_BENCH_LIBS=$(for s in $site; do ls -d "$s"/*/lib 2>/dev/null; done | paste -sd:)
export LAYER_BENCH_LIBS
section layers
lim=$(slot 210)
if [ "$lim" = 0 ]; then
  skipped "layer benchmark"
else
  timeout "$lim" ./tests/gpu/layer_bench layers examples/resnet50.dl --batches="${GPU_CHECK_LAYER_BATCHES:-1,64}" \
    --modes="${GPU_CHECK_LAYER_MODES:-f16,bf16,int8,f32,tf32}" --jobs=16 2>&1 | tee "$work/layers.out"
  rc=${PIPESTATUS[0]}
  grep -E '^(==|dlcc|target)' "$work/layers.out" >>"$summary"
  case $rc in
    0) note "layer benchmark: done" ;;
    124) fail "layer benchmark: timed out after ${lim} s (the tables above are what it measured)" ;;
    *) fail "layer benchmark: rc $rc: $(grep -m1 'FAIL' "$work/layers.out" | cut -c1-200)" ;;
  esac
fi

echo "== ResNet-50 whole: dlcc next to PyTorch (GPU time)"
section model
lim=$(slot 150)
if [ "$lim" = 0 ]; then
  skipped "whole-model benchmark"
else
  timeout "$lim" ./tests/gpu/layer_bench model examples/resnet50.dl --batches=1,64 --modes=f16,bf16,int8,f32 \
    --jobs=8 2>&1 | tee "$work/model.out"
  rc=${PIPESTATUS[0]}
  grep '^model' "$work/model.out" >>"$summary"
  case $rc in
    0) ;;
    124) fail "whole-model benchmark: timed out after ${lim} s" ;;
    *) fail "whole-model benchmark: rc $rc: $(grep -m1 'FAIL' "$work/model.out" | cut -c1-200)" ;;
  esac
  lim=$(slot 240)
  if [ "$lim" -lt 60 ]; then
    skipped "PyTorch comparison"
  else
    # Eager first (all in one process), then torch.compile with what is left.
    timeout "$lim" python3 "$src/tests/gpu/torch_bench.py" --dlcc "$work/model.out" --batches 1,64 \
      --dtypes f16,bf16,f32 --compile f16 --eager-cap 60 --compile-cap $((lim - 70)) 2>&1 | tee "$work/torch.out"
    grep -v '^torch [0-9]' "$work/torch.out" >>"$summary"
  fi
fi

echo "== attention: forward and backward, dlcc next to PyTorch's SDPA (GPU time)"
section attention
lim=$(slot 110)
if [ "$lim" = 0 ]; then
  skipped "attention benchmark"
else
  timeout "$lim" ./tests/gpu/layer_bench attention --batches=8 --heads=12 --seqs=2048,512 --dims=64,128 \
    --modes="${GPU_CHECK_ATTN_MODES:-f16}" 2>&1 | tee "$work/attention.out"
  rc=${PIPESTATUS[0]}
  grep '^attention' "$work/attention.out" >>"$summary"
  case $rc in
    0) ;;
    124) fail "attention benchmark: timed out after ${lim} s (the lines above are what it measured)" ;;
    *) fail "attention benchmark: rc $rc: $(grep -m1 'FAILED' "$work/attention.out" | cut -c1-200)" ;;
  esac
  lim=$(slot 60)
  if [ "$lim" -lt 20 ]; then
    skipped "PyTorch's SDPA comparison"
  else
    timeout "$lim" python3 "$src/tests/gpu/torch_attn.py" --dlcc "$work/attention.out" 2>&1 |
      tee "$work/torch_attn.out"
    grep -E '^(attention|target|torch)' "$work/torch_attn.out" | sed 's/^attention/torch attention/' >>"$summary"
  fi
fi

echo "== where ResNet-50's time goes: dlcc run --profile (GPU time per step)"
# Every step launched by itself and timed by events; the slowest 25 with
# their TFLOP/s and GB/s against the cost report.  What to speed up next.
# f32 at batch 1 shows the FMA kernel's split-K (docs/ir.md).
section profile
for spec in "f16 64" "int8 64" "f32 1"; do
  read -r mode batch <<<"$spec"
  lim=$(slot 60)
  if [ "$lim" = 0 ]; then
    skipped "profile resnet50 $mode N=$batch"
    continue
  fi
  flags=(--precision=$mode)
  if [ $mode = int8 ]; then
    # a calibration sample has the compiled batch (38 MB of floats at 64)
    mkdir -p "$work/calib-r50-$batch"
    [ -f "$work/calib-r50-$batch/0.npy" ] || npy "$work/calib-r50-$batch/0.npy" "$batch" 3 224 224
    flags=(--quantize=int8 "--calibrate=$work/calib-r50-$batch")
  fi
  if run "$lim" "profile.$mode" ./dlcc run examples/resnet50.dl -D N=$batch "${flags[@]}" --backend=cuda --profile=25; then
    sed -n '/^dlcc: profile:/,/^  all/p' "$work/profile.$mode.out" | sed "s/^/profile resnet50 N=$batch $mode: /" >>"$summary"
  else
    fail "profile resnet50 $mode N=$batch: $(grep -m1 'error\|timed out' "$work/profile.$mode.out" | cut -c1-160)"
  fi
done

echo "== compute-sanitizer"
section sanitizer
# sanitize TOOL NAME CMD...: ok, FAIL (hazards found), or n/a (the tool
# cannot run here: gVisor machines refuse it).
sanitize() {
  local tool=$1 name=$2
  shift 2
  if ! command -v compute-sanitizer >/dev/null; then
    note "$tool $name: n/a (no compute-sanitizer)"
    return
  fi
  if [ "$(slot 60)" = 0 ]; then
    skipped "$tool $name"
    return
  fi
  run "$(slot 300)" "$tool.$name" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@"
  local rc=$? summ
  summ=$(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$work/$tool.$name.out")
  if [ $rc = 0 ] && [ -n "$summ" ]; then
    note "$tool $name: ok ($summ)"
  elif grep -q 'Device not supported\|Unable to find injection library\|Target application terminated before first instrumented' "$work/$tool.$name.out"; then
    note "$tool $name: n/a (compute-sanitizer cannot run on this machine)"
  else
    fail "$tool $name: rc $rc: ${summ:-$(grep -m1 -i 'error' "$work/$tool.$name.out" | cut -c1-160)}"
  fi
}
# Out-of-bounds and misaligned accesses: a plain model, one with the
# shared-memory implicit-GEMM convolutions and 2-D grids, rt_check's own
# kernels (mixed arguments, 80000 bytes of dynamic shared memory).
sanitize memcheck mlp ./dlcc run examples/mlp.dl --backend=cuda --seed $seed
sanitize memcheck resnet18-64 ./dlcc run examples/resnet18.dl -D HW=64 --backend=cuda --seed $seed
sanitize memcheck rt_check ./tests/gpu/rt_check cuda args
# Shared-memory races (a missing __syncthreads) in the tiled convolutions.
sanitize racecheck lenet ./dlcc run examples/lenet.dl --backend=cuda --seed $seed
# One model per low precision, both tools: its kernels load and store
# half types, and int8 quantizes in its loads and stores.
mkdir -p "$work/calib-r18-32"
npy "$work/calib-r18-32/0.npy" 1 3 32 32
for mode in f16 bf16 int8; do
  flags=(--precision=$mode)
  [ $mode = int8 ] && flags=(--quantize=int8 "--calibrate=$work/calib-r18-32")
  for tool in memcheck racecheck; do
    sanitize $tool "resnet18-32-$mode" ./dlcc run examples/resnet18.dl -D HW=32 "${flags[@]}" --backend=cuda --seed $seed
  done
done

echo "== int8 calibration: on cuda against the reference interpreter"
# The same folder and weights; every activation scale in the IR must agree
# to f32 rounding: 1e-5 relative (cuda sums in another order; emu against
# ref measured 7e-7 on ResNet-18 at 32); the ms per sample are printed.
section calib
for b in ref cuda; do
  if [ "$(slot 60)" = 0 ]; then
    skipped "int8 calibration on $b"
    continue
  fi
  run "$(slot 300)" "calib.$b" ./dlcc examples/resnet18.dl -D HW=64 --quantize=int8 "--calibrate=$work/calib-resnet18" \
    --calib-backend=$b --emit=ir --stats -o "$work/calib.$b.ir"
done
if selected; then
  cerr=$(python3 - "$work/calib.ref.ir" "$work/calib.cuda.ir" <<'PY'
import re, sys
try:
    a, b = ([float(x) for x in re.findall(r"scale=([0-9.eE+-]+)", open(p).read())] for p in sys.argv[1:])
except OSError:
    print("missing"); sys.exit()
if len(a) != len(b) or not a: print("count %d/%d" % (len(a), len(b))); sys.exit()
print("%.2g" % max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)))
PY
  )
  cok=$(python3 -c "import sys; e = sys.argv[1]; print('ok' if e.replace('.', '').replace('e-', '').isdigit() and float(e) <= 1e-5 else 'DIFF')" "$cerr")
  [ "$cok" = ok ] || status=1
  per=$(grep -h 'calibrate: ms per sample' "$work/calib.ref.out" "$work/calib.cuda.out" 2>/dev/null | awk '{print $1}' | paste -sd/)
  row "int8 calib cuda vs ref" "$cok" "$cerr" "${per:--} ms/sample ref/cuda" -
fi

engine_section
train_section

echo "== ncu: why the tensor-core convolutions run where they do"
# Nsight Compute on the first ResNet-50 f16 convolutions at batch 64
# (every step launched by itself): speed of light, occupancy, warp
# stalls.  --clock-control none leaves the card's clocks alone.  The
# device notes say ncu reads the counters on the Firecracker machines
# (driver 580.159.04, as the first run had) and not on gVisor.
section ncu
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
lim=$(slot 120)
if [ "$lim" = 0 ]; then
  skipped "ncu"
elif [ -z "$ncu_bin" ]; then
  note "ncu: n/a (no ncu on this machine)"
elif run "$lim" ncu "$ncu_bin" --clock-control none -k regex:igemm_tc --launch-count 6 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    ./dlcc run examples/resnet50.dl -D N=64 --precision=f16 --backend=cuda --no-graphs; then
  grep -E 'igemm_tc|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued|Block Limit' \
    "$work/ncu.out" | sed 's/^/ncu: /' >>"$summary"
else
  note "ncu: rc $?: $(grep -m1 -i 'error' "$work/ncu.out" | cut -c1-160)"
fi

echo "== AOT: a model.so on cuda against the same .so on emu"
section aot
if [ "$(slot 60)" = 0 ]; then
  skipped "AOT"
elif run "$(slot 300)" aot.build ./dlcc examples/mlp.dl -o "$work/mlp.so"; then
  if run 120 aot.cuda ./dlcc run "$work/mlp.so" --backend=cuda --seed $seed --output-dir "$work/aot.cuda" &&
     run 300 aot.emu ./dlcc run "$work/mlp.so" --backend=emu --seed $seed --output-dir "$work/aot.emu"; then
    err=$(compare "$work/aot.emu" "$work/aot.cuda")
    ok=$(verdict "$err")
    [ "$ok" = ok ] || status=1
    row "mlp.so (AOT, vs emu)" "$ok" "$err" - -
  else
    row "mlp.so (AOT)" FAIL - - "$(grep -h -m1 error "$work/aot.cuda.out" "$work/aot.emu.out" 2>/dev/null | head -1 | cut -c1-120)"
    status=1
  fi
else
  row "mlp.so (AOT)" n/a - - "dlcc -o failed: $(tail -1 "$work/aot.build.out" | cut -c1-100)"
fi

echo "== kernel cache"
note "kernel cache: $(ls "$DLCC_CACHE_DIR" 2>/dev/null | grep -c .) entries in $DLCC_CACHE_DIR"

echo
echo "== summary ($(($(date +%s) - started)) s)"
cat "$table" | tee -a "$summary"
echo
cat "$ptable" | tee -a "$summary"
echo "layer and whole-model figures: above, and in summary.txt"
echo "max_rel_err: max |cuda - ref| / max |ref| over each output (f32: ok at 1e-5);"
echo "warm: mean/min of 20 dlc_run calls after the first (inputs in, every step, outputs out);"
echo "cold: the whole first dlcc run process (compile, NVRTC or the kernel cache, load, 21 runs)."
echo "precision table: f16/bf16 against the f32 reference (limits 1e-2/2e-2), int8 against the"
echo "reference interpreter on the same int8 graph (2e-2: an ulp in f32 can move one rounding step)."
[ $status = 0 ] && note "ALL OK" || note "SOME CHECKS FAILED"
exit $status
}

# Everything on the terminal and in the log; the pipe ends only when tee
# has written it all, so $OUT holds the whole log when the script returns.
main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
