#!/bin/sh
# Pipeline-parallel inference, `dlcc run --pipeline=S` under mpirun
# (docs/parallel.md): on 2 and 3 stages, emu and ref, 1 and 4
# micro-batches, cut by the cost model and at the model's stage() marks,
# every output .npy equal to a one-process run's (f32 1e-6), with
# --weights and with random weights and inputs; a model that carries an
# early output, a skip from its input, an integer output, a batchnorm
# and a weight two stages read (tests/pipeinf/multi.dl); an ONNX model
# with its own weights (tests/pipeinf/mlp3.onnx); the split rank
# 0 prints; 2 pipelines of 2 stages (data parallel over pipelines, one
# writer); int8, one process's bits; tensor parallel inside the stages
# (D x T x S); the refusals; a bad input on one rank ending every rank with
# its message.  Skips without mpirun or without MPI in dlcc.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"
p="${top_srcdir:-.}/tests/pipeinf"
. "${top_srcdir:-.}/tests/mpilib.sh"

# same ONE DIR WHAT: every .npy of ONE is in DIR, at f32 1e-6.
same() {
  n=0
  for f in "$1"/*.npy; do
    g="$2/${f##*/}"
    if [ ! -f "$g" ]; then fail "$3: no ${f##*/}"; return; fi
    npy_values "$f" >"$tmp/a.v"; npy_values "$g" >"$tmp/b.v"
    if ! paste "$tmp/a.v" "$tmp/b.v" | awk '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
        if (d > 1e-6 * m + 1e-6) bad++ } END { exit bad > 0 || NR == 0 }'; then
      fail "$3: ${f##*/} differs"; return
    fi
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] && ok || fail "$3: no outputs"
}

# A trained model's weights for --weights (the state_dict, not the checkpoint).
expect 0 "" "$dlcc" train "$t/mlp4.dl" --loss=cross_entropy --optimizer=adamw --lr=0.05 --data "$t/data" \
  --batch 22 --epochs 2 --backend=ref --save "$tmp/w.safetensors"

# Each model on one process, then on pipelines (BACKEND:MODEL:STAGES:MICRO)
# against it: both backends, 2 and 3 stages, 1 and 4 micro-batches.
for b in ref emu; do
  for m in mlp4 mlp4_staged multi; do
    case $m in multi) dl="$p/multi.dl" w="" ;; *) dl="$t/$m.dl" w="--weights $tmp/w.safetensors" ;; esac
    expect 0 "" "$dlcc" run "$dl" $w --input x="$p/x8.npy" --backend=$b --output-dir "$tmp/one-$b-$m"
  done
done
for c in ref:mlp4:2:1 ref:mlp4:3:4 ref:mlp4_staged:3:4 ref:multi:2:4 ref:multi:3:1 \
  emu:mlp4:2:4 emu:mlp4:3:1 emu:mlp4_staged:3:1 emu:multi:2:1 emu:multi:3:4; do
  b=${c%%:*} c=${c#*:}; m=${c%%:*} c=${c#*:}; s=${c%%:*} k=${c#*:}
  case $m in multi) dl="$p/multi.dl" w="" ;; *) dl="$t/$m.dl" w="--weights $tmp/w.safetensors" ;; esac
  expect 0 "" mpi "$s" "$dlcc" run "$dl" $w --input x="$p/x8.npy" --backend=$b --pipeline="$s" \
    --micro-batches="$k" --output-dir "$tmp/$b-$m-$s-$k"
  same "$tmp/one-$b-$m" "$tmp/$b-$m-$s-$k" "$m on $b, $s stages, $k micro-batches"
done
# The last run's split, as rank 0 prints it, and its outputs from the last rank.
grep -qx 'pipeline: 3 stages, 4 micro-batches of 2, GPipe forward; bubble (S-1)/(M+S-1) = 33.3%' "$tmp/out" &&
  [ "$(grep -c '^  stage [0-2] (rank [0-2]): ' "$tmp/out")" -eq 3 ] && [ "$(grep -c '^  cut ' "$tmp/out")" -eq 2 ] &&
  grep -q '^cls: i64\[8\] ' "$tmp/out" && ok || fail "the split and the outputs: $(cat "$tmp/out")"
# emb (64 bytes) is read in the first and the last stage: each holds a
# copy, counted in both (fc1 and fc2 are 1408 bytes, skip and fc4 1360).
grep -q '^  stage 0 (rank 0): .* of the cost, 1472 bytes of parameters: fc1, fc2$' "$tmp/out" &&
  grep -q '^  stage 2 (rank 2): .* of the cost, 1424 bytes of parameters: skip, fc4$' "$tmp/out" && ok ||
  fail "multi's split: $(cat "$tmp/out")"
# The marks cut where they are, whatever the cost says.
expect 0 "" mpi 3 "$dlcc" run "$t/mlp4_staged.dl" --input x="$p/x8.npy" --backend=ref --pipeline=3
grep -q "^pipeline: 3 stages at the model's stage() marks, 1 micro-batch of 8" "$tmp/out" &&
  grep -q '^  stage 1 (rank 1): 5 ops, .*: fc2, fc3$' "$tmp/out" && ok || fail "the marked split: $(cat "$tmp/out")"

# Data parallel over pipelines: 4 ranks, 2 pipelines of 2 stages, each
# 4 samples in 2 micro-batches; world rank 1 (pipeline 0's last stage)
# gathers the other's rows and writes every output.
expect 0 "" mpi 4 "$dlcc" run "$p/multi.dl" --input x="$p/x8.npy" --backend=emu --pipeline=2 --micro-batches=2 \
  --output-dir "$tmp/dp"
same "$tmp/one-emu-multi" "$tmp/dp" "2 pipelines of 2 stages"
grep -qx '  data parallel: 2 pipelines of 2 stages (world rank w is stage w % 2 of pipeline w / 2), each 4 samples of every batch' \
  "$tmp/out" && [ "$(grep -c '^logits: ' "$tmp/out")" -eq 1 ] && ok || fail "2 x 2: one writer: $(cat "$tmp/out")"

# --bench=3: after the batch, 3 more back to back; rank 0 prints the
# rate and each rank's time in its plan; the outputs stay one process's.
expect 0 "" mpi 2 "$dlcc" run "$p/multi.dl" --input x="$p/x8.npy" --backend=emu --pipeline=2 --micro-batches=2 \
  --bench=3 --output-dir "$tmp/bench"
same "$tmp/one-emu-multi" "$tmp/bench" "--bench's run"
grep -q '^dlcc: bench: 3 batches through 2 stages of 2 micro-batches on emu: [0-9.]* ms a batch$' "$tmp/err" &&
  [ "$(grep -c '^dlcc: bench: rank [01] (stage [01]): its plan ran [0-9.]* ms a batch, [0-9]*% of the time$' "$tmp/err")" -eq 2 ] &&
  ok || fail "--pipeline --bench: $(cat "$tmp/err")"

# --pipeline=1 on 2 ranks: data-parallel inference, 2 whole copies.
expect 0 "" mpi 2 "$dlcc" run "$p/multi.dl" --input x="$p/x8.npy" --backend=emu --pipeline=1 --output-dir "$tmp/dp1"
same "$tmp/one-emu-multi" "$tmp/dp1" "2 pipelines of 1 stage"

# Random weights and inputs: each stage draws what one process draws.
expect 0 "" "$dlcc" run "$t/mlp4.dl" -D N=6 --seed=3 --backend=emu --output-dir "$tmp/rand1"
expect 0 "" mpi 2 "$dlcc" run "$t/mlp4.dl" -D N=6 --seed=3 --backend=emu --pipeline=2 --output-dir "$tmp/rand2"
same "$tmp/rand1" "$tmp/rand2" "random weights and inputs"

# An ONNX model brings its own weights: each stage binds its
# initializers (when this dlcc reads ONNX).
if "$dlcc" --onnx-support >/dev/null 2>&1; then
  expect 0 "" "$dlcc" run "$p/mlp3.onnx" --input x="$p/x8.npy" --backend=ref --output-dir "$tmp/onnx1"
  for c in emu:2:4 ref:3:1; do
    b=${c%%:*} c=${c#*:}; s=${c%%:*} k=${c#*:}
    expect 0 "" mpi "$s" "$dlcc" run "$p/mlp3.onnx" --input x="$p/x8.npy" --backend=$b --pipeline="$s" \
      --micro-batches="$k" --output-dir "$tmp/onnx-$b-$s"
    same "$tmp/onnx1" "$tmp/onnx-$b-$s" "ONNX on $b, $s stages, $k micro-batches"
  done
fi

# int8 (--quantize=int8): every rank calibrates the whole model as one
# process does and quantizes the micro-batch's graph with its ranges
# before the cut, so each stage's products are one process's: its bits,
# with --weights on emu and on ref, and an ONNX model's own weights.
mkdir -p "$tmp/calib" "$tmp/ocalib"; cp "$t/data/x.npy" "$tmp/calib/"; cp "$p/x8.npy" "$tmp/ocalib/"
Q="$t/mlp4.dl --input x=$t/data/x.npy --weights $tmp/w.safetensors --quantize=int8 --calibrate=$tmp/calib --calib-method=minmax --calib-samples=1"
O="$p/mlp3.onnx --input x=$p/x8.npy --quantize=int8 --calibrate=$tmp/ocalib"
for c in "emu:Q" "ref:Q" "emu:O"; do
  b=${c%%:*} m=${c#*:}
  eval "args=\$$m"
  [ "$m" = O ] && ! "$dlcc" --onnx-support >/dev/null 2>&1 && continue
  mkdir -p "$tmp/i8one-$b-$m" "$tmp/i8two-$b-$m"
  expect 0 "" "$dlcc" run $args --backend=$b --output-dir "$tmp/i8one-$b-$m"
  expect 0 "" mpi 2 "$dlcc" run $args --backend=$b --pipeline=2 --micro-batches=2 --output-dir "$tmp/i8two-$b-$m"
  y=$(ls "$tmp/i8one-$b-$m")
  cmp -s "$tmp/i8one-$b-$m/$y" "$tmp/i8two-$b-$m/$y" && ok || fail "int8 on 2 stages ($b, $m): not one process's bits"
done

# Tensor parallel inside the stages: the transformer layer (random
# weights, one process's draw) on 2 stages of 2 ranks, and on 2
# pipelines of them with 2 micro-batches each; the attention heads split
# in stage 0, the MLP in stage 1; the outputs one process's.
A="$t/attn.dl --input x=$t/attn/x.npy --backend=emu"
expect 0 "" "$dlcc" run $A --output-dir "$tmp/aone"
for c in 4:1 8:2; do
  k=${c%%:*} m=${c#*:}
  expect 0 "" mpi $k "$dlcc" run $A --pipeline=2 --tensor-parallel=2 --micro-batches=$m --output-dir "$tmp/a$k"
  grep -q "^  stage 0: tensor parallel: split: self_attn.in_proj_weight" "$tmp/out" &&
    grep -qx "  stage 1: tensor parallel: split: linear1.weight by output rows, linear2.weight by input columns" "$tmp/out" &&
    grep -q "^  stage 1 (ranks 2-3): " "$tmp/out" && ok || fail "$k ranks: the split: $(cat "$tmp/out")"
  [ "$(grep -c '^y: f32\[12, 4, 8\]' "$tmp/out")" -eq 1 ] && ok || fail "$k ranks: one writer: $(cat "$tmp/out")"
  same "$tmp/aone" "$tmp/a$k" "the transformer layer on $k ranks"
done

# Refusals.
expect_sub 1 "dlcc: error: --micro-batches=4 does not divide input 'x' ($t/data/x.npy): its axis 0, the batch, is 22; give a batch that is a multiple of 4" \
  mpi 2 "$dlcc" run "$t/mlp4.dl" --input x="$t/data/x.npy" --backend=ref --pipeline=2 --micro-batches=4
expect_sub 1 "dlcc: error: --pipeline=2 does not divide the 3 ranks of the launch (mpirun -np 2 for one pipeline, a multiple of 2 for data parallel over pipelines of 2)" \
  mpi 3 "$dlcc" run "$t/mlp4.dl" --input x="$p/x8.npy" --backend=ref --pipeline=2
expect_sub 1 "dlcc: error: input 'x' ($p/x8.npy): its axis 0, the batch, is 8, which does not divide into 3 pipelines of 1 micro-batch: give a batch that is a multiple of 3" \
  mpi 6 "$dlcc" run "$t/mlp4.dl" --input x="$p/x8.npy" --backend=ref --pipeline=2
expect_sub 1 "dlcc: error: the model's stage() marks (the first at $t/mlp4_staged.dl:4:8) make 3 stages, but the pipeline has 2" \
  mpi 2 "$dlcc" run "$t/mlp4_staged.dl" --input x="$p/x8.npy" --backend=ref --pipeline=2
expect_sub 1 "dlcc: error: output 'loss' is f32[] for the whole batch and f32[] for a micro-batch: only outputs whose axis 0 is the batch can be gathered from micro-batches (give --micro-batches=1, one pipeline)" \
  mpi 2 "$dlcc" run "$t/tied.ir" --backend=ref --pipeline=2 --micro-batches=2
expect 1 "dlcc: error: --micro-batches is for pipeline parallel: give --pipeline=S too" \
  "$dlcc" run "$t/mlp4.dl" --input x="$p/x8.npy" --micro-batches=2
expect_sub 1 "dlcc: error: --pipeline=2 with --tensor-parallel=2 does not divide the 2 ranks of the launch (mpirun -np 4 for one pipeline, a multiple of 4 for data parallel over pipelines)" \
  mpi 2 "$dlcc" run "$t/mlp4.dl" --input x="$p/x8.npy" --backend=emu --pipeline=2 --tensor-parallel=2
# The whole file is checked against the whole model, as one process does.
expect_sub 1 "dlcc: error: $tmp/w.ckpt.safetensors: unexpected tensor 'dlcc.optim.step' (the model has no such parameter)" \
  mpi 2 "$dlcc" run "$t/mlp4.dl" --weights "$tmp/w.ckpt.safetensors" --input x="$p/x8.npy" --backend=ref --pipeline=2

# A bad input on rank 1 only: rank 0 stops with rank 1's message.
expect_sub 1 "dlcc: error: rank 0 stops: rank 1: input 'x': $t/bad/x_f64.npy holds f64 data, the model expects f32[22, 4]" \
  mpi 1 "$dlcc" run "$t/mlp4.dl" --input x="$p/x8.npy" --backend=ref --pipeline=2 --dist-timeout=30 : \
  -np 1 "$dlcc" run "$t/mlp4.dl" --input x="$t/bad/x_f64.npy" --backend=ref --pipeline=2 --dist-timeout=30

finish pipeline_run
