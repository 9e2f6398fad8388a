#!/bin/sh
# Pipeline-parallel `dlcc train --pipeline=S` under mpirun
# (docs/parallel.md): a 4-layer MLP on 2 and 4 stages, GPipe and 1F1B,
# 1 and 4 micro-batches, equal to one process at the same global batch
# (f32 1e-5: every loss and every tensor of the checkpoint rank 0
# writes), both schedules the same bits, --resume, a run repeated the
# same bytes (on emu), the split rank 0 prints, stages the model marks,
# a last partial batch, a transformer layer, tensor parallel inside the stages (D x T x S), dropout, --deferred-bn, batchnorm (per micro-batch), --sync-bn over pipelines, an ONNX model, a stage without parameters, bf16 and f16 (--precision), the
# f16 loss scaler and --clip-grad-norm over every stage's gradients, 2 pipelines of 2 stages (data
# parallel over pipelines), the refusals, and a rank that fails or
# vanishes ending every rank with a message naming it.  Skips without mpirun or without MPI in dlcc.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"
. "${top_srcdir:-.}/tests/mpilib.sh"
# 16 of the 22 samples (--drop-last), global batch 8: 2 steps an epoch.
A="$t/mlp4.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8"

# against RUN WHAT: RUN's checkpoint and its 4 losses are one process's.
against() {
  close "$tmp/one.ckpt.safetensors" "$tmp/$1.ckpt.safetensors" "$2"
  losses "$tmp/$1.jsonl" >"$tmp/p.loss"
  [ "$(wc -l <"$tmp/p.loss")" -eq 4 ] && agree "$tmp/one.loss" "$tmp/p.loss" && ok ||
    fail "$2 losses: $(paste "$tmp/one.loss" "$tmp/p.loss")"
}

# same_as RUN ONE WHAT: RUN's losses and checkpoint are ONE's (f32 1e-5).
same_as() {
  losses "$tmp/$1.jsonl" >"$tmp/run.loss"
  losses "$tmp/$2.jsonl" >"$tmp/one.l"
  agree "$tmp/one.l" "$tmp/run.loss" && ok || fail "$3: losses $(paste "$tmp/one.l" "$tmp/run.loss")"
  close "$tmp/$2.ckpt.safetensors" "$tmp/$1.ckpt.safetensors" "$3"
}

# One process, then each pipeline against it.  The ref backend keeps
# the 8 runs quick; emu below runs the generated kernels.
expect 0 "" "$dlcc" train $A --backend=ref --save "$tmp/one.safetensors" --log "$tmp/one.jsonl"
losses "$tmp/one.jsonl" >"$tmp/one.loss"
for c in 2:1:gpipe 2:4:gpipe 2:1:1f1b 2:4:1f1b 4:1:gpipe 4:4:gpipe 4:1:1f1b 4:4:1f1b; do
  s=${c%%:*} m=${c#*:}; m=${m%%:*} k=${c##*:}
  expect 0 "" mpi "$s" "$dlcc" train $A --backend=ref --pipeline="$s" --micro-batches="$m" --schedule="$k" \
    --save "$tmp/$s-$m-$k.safetensors" --log "$tmp/$s-$m-$k.jsonl"
  against "$s-$m-$k" "$s stages, $m micro-batches, $k"
done
# Rank 0 prints the split and the bubble; the last run's output.
grep -q '^pipeline: 4 stages, 4 micro-batches of 2, 1F1B; bubble (S-1)/(M+S-1) = 42.9%$' "$tmp/out" && ok ||
  fail "the split's header: $(cat "$tmp/out")"
[ "$(grep -c '^  stage [0-3] (rank [0-3]): ' "$tmp/out")" -eq 4 ] && [ "$(grep -c '^  cut ' "$tmp/out")" -eq 3 ] &&
  grep -q '^  stage 0 (rank 0): 1 op, .* of the cost, 320 bytes of parameters: fc1$' "$tmp/out" && ok ||
  fail "the split: $(cat "$tmp/out")"
# OneCycleLR's momentum (set on each stage's optimizer every step),
# class weights (the last stage's inputs) and --no-decay (each stage's
# optimizer its own params of the pattern) in a pipeline of 2 stages, one
# micro-batch (each micro-batch would take its own weighted mean, as
# PyTorch's accumulation loop does): one process's run.
W="$t/mlp4.dl --loss=cross_entropy --optimizer=sgd --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8 --backend=ref
  --schedule=onecycle --class-weights=1,2,0.5 --weight-decay=0.1 --no-decay=*.bias"
expect 0 "" "$dlcc" train $W --save "$tmp/w1.safetensors" --log "$tmp/w1.jsonl"
expect 0 "" mpi 2 "$dlcc" train $W --pipeline=2 --save "$tmp/w2.safetensors" --log "$tmp/w2.jsonl"
same_as w2 w1 "OneCycleLR and class weights in a pipeline"
# The backwards run in micro-batch order under both schedules: the same bits.
cmp -s "$tmp/4-4-gpipe.ckpt.safetensors" "$tmp/4-4-1f1b.ckpt.safetensors" && ok || fail "GPipe and 1F1B differ"
# The stages reading their micro-batches from the files (--stream-mb=0): the same bits.
expect 0 "" mpi 4 "$dlcc" train $A --backend=ref --pipeline=4 --micro-batches=4 --schedule=1f1b --stream-mb=0 \
  --save "$tmp/streamed.safetensors"
cmp -s "$tmp/4-4-1f1b.ckpt.safetensors" "$tmp/streamed.ckpt.safetensors" && ok || fail "streamed data: not the same bits"

# The last partial batch (22 samples, batch 8: 6 left): the same stages
# compiled again for it, in 3 micro-batches of 2 (1 in each of 2
# pipelines), equal to one process training on it too.
R="$t/mlp4.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --data $t/data --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $R --backend=ref --save "$tmp/rone.safetensors" --log "$tmp/rone.jsonl"
losses "$tmp/rone.jsonl" >"$tmp/rone.loss"
for c in 2:ref:"3 micro-batches of 2" 4:emu:"3 micro-batches of 1 in each pipeline"; do
  k=${c%%:*} b=${c#*:}; b=${b%%:*} line=${c##*:}
  expect 0 "" mpi "$k" "$dlcc" train $R --backend=$b --pipeline=2 --micro-batches=4 --save "$tmp/r$k.safetensors" \
    --log "$tmp/r$k.jsonl"
  grep -qx "pipeline: the last batch, 6 samples, as $line" "$tmp/out" && ok || fail "the last batch's line: $(cat "$tmp/out")"
  losses "$tmp/r$k.jsonl" >"$tmp/r.loss"
  [ "$(wc -l <"$tmp/r.loss")" -eq 6 ] && agree "$tmp/rone.loss" "$tmp/r.loss" && ok ||
    fail "a last partial batch on $k ranks: $(paste "$tmp/rone.loss" "$tmp/r.loss")"
  close "$tmp/rone.ckpt.safetensors" "$tmp/r$k.ckpt.safetensors" "a last partial batch on $k ranks"
done
expect_sub 1 "dlcc: error: the last batch of 6 samples does not divide among 4 pipelines: add --drop-last, or give a --batch that leaves a multiple of 4" \
  mpi 4 "$dlcc" train $R --batch 16 --backend=ref --pipeline=1

# A transformer encoder layer (tests/train/attn.dl: attention, layernorms,
# an MLP) on 2 and 3 stages on emu, the second cut inside the attention's
# heads, with its last partial batch: one process's at 1e-5.
T="$t/attn.dl --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --data $t/attn --epochs 2 --batch 4"
expect 0 "" "$dlcc" train $T --backend=ref --save "$tmp/tone.safetensors" --log "$tmp/tone.jsonl"
for c in 2:gpipe 3:1f1b; do
  s=${c%%:*} k=${c#*:}
  expect 0 "" mpi "$s" "$dlcc" train $T --backend=emu --pipeline="$s" --micro-batches=2 --schedule="$k" \
    --save "$tmp/t$s.safetensors" --log "$tmp/t$s.jsonl"
  same_as "t$s" tone "the transformer layer on $s stages"
done

# --resume: one epoch, then one more from the checkpoint, as the two at once.
expect 0 "" mpi 2 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=2 --epochs 1 --save "$tmp/half.safetensors"
expect 0 "" mpi 2 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=2 --epochs 1 \
  --resume "$tmp/half.ckpt.safetensors" --save "$tmp/resumed.safetensors"
close "$tmp/one.ckpt.safetensors" "$tmp/resumed.ckpt.safetensors" "--resume"

# emu: the stages' generated kernels, equal to one process, and twice the same bytes.
expect 0 "" "$dlcc" train $A --backend=emu --save "$tmp/eone.safetensors"
for n in 1 2; do
  expect 0 "" mpi 2 "$dlcc" train $A --backend=emu --pipeline=2 --micro-batches=4 --schedule=1f1b \
    --save "$tmp/emu$n.safetensors"
done
close "$tmp/eone.ckpt.safetensors" "$tmp/emu1.ckpt.safetensors" "emu, 2 stages"
cmp -s "$tmp/emu1.ckpt.safetensors" "$tmp/emu2.ckpt.safetensors" && ok || fail "twice: not the same bytes"

# bf16 and f16: each stage's plans compute in that type with f32 master
# weights, as one process does; the values at the cuts stay f32 between
# the stages (one process rounds them), so the pipeline agrees with one
# process at the type's precision, not bit for bit, and differs from
# f32.  f16 under the dynamic loss scale: the last stage's backward
# seeds with the scale (over M), every stage's optimizer unscales.
# SGD: Adam's update is about lr whatever the gradient, so a gradient
# near 0 whose sign the rounding flips moves a weight by 2 lr.
B="$t/mlp4.dl --loss=cross_entropy --optimizer=sgd --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8"
expect 0 "" "$dlcc" train $B --backend=ref --log "$tmp/onef.jsonl"
losses "$tmp/onef.jsonl" >"$tmp/onef.loss"
for p in bf16 f16; do
  expect 0 "" "$dlcc" train $B --backend=ref --precision=$p --save "$tmp/one$p.safetensors" --log "$tmp/one$p.jsonl"
  losses "$tmp/one$p.jsonl" >"$tmp/onep.loss"
  st_values "$tmp/one$p.ckpt.safetensors" >"$tmp/onep.v"
  for b in ref emu; do
    expect 0 "" mpi 2 "$dlcc" train $B --backend=$b --precision=$p --pipeline=2 --micro-batches=4 \
      --save "$tmp/$p-$b.safetensors" --log "$tmp/$p-$b.jsonl"
    losses "$tmp/$p-$b.jsonl" >"$tmp/p.loss"
    st_values "$tmp/$p-$b.ckpt.safetensors" >"$tmp/p.v"
    agree_at 1e-2 "$tmp/onep.loss" "$tmp/p.loss" && agree_at 1e-2 "$tmp/onep.v" "$tmp/p.v" && ok ||
      fail "$p on $b, 2 stages: $(paste "$tmp/onep.loss" "$tmp/p.loss")"
    ! agree "$tmp/onef.loss" "$tmp/p.loss" && ok || fail "$p on $b: the losses of f32"
  done
done
# Overflows that only the last stage's gradients hold (mlp4_offset.dl):
# every stage skips those steps, so the checkpoint's last three values,
# the loss scale, the step count and GradScaler's count of clean steps,
# are one process's exactly (one micro-batch: with M of them each f16
# sum is over B/M samples and may stay finite where the whole batch's
# overflows).
O="$t/mlp4_offset.dl --loss=cross_entropy --optimizer=sgd --lr=0.01 --data $t/data --epochs 3 --drop-last --batch 8 --precision=f16"
expect 0 "" "$dlcc" train $O --backend=ref --save "$tmp/oneo.safetensors" --log "$tmp/oneo.jsonl"
st_values "$tmp/oneo.ckpt.safetensors" | tail -3 >"$tmp/oneo.amp"
[ "$(head -1 "$tmp/oneo.amp")" != 65536 ] && ok || fail "mlp4_offset.dl: one process skipped no step"
for b in ref emu; do
  expect 0 "" mpi 2 "$dlcc" train $O --backend=$b --pipeline=2 --save "$tmp/o-$b.safetensors"
  st_values "$tmp/o-$b.ckpt.safetensors" | tail -3 >"$tmp/o.amp"
  cmp -s "$tmp/oneo.amp" "$tmp/o.amp" && ok || fail "f16 on $b: the scaler's state $(paste "$tmp/oneo.amp" "$tmp/o.amp")"
done

# --clip-grad-norm: the norm over every stage's gradients, as one process's (f32 1e-5).
expect 0 "" "$dlcc" train $A --backend=ref --clip-grad-norm=0.5 --save "$tmp/onec.safetensors" --log "$tmp/onec.jsonl"
losses "$tmp/onec.jsonl" >"$tmp/onec.loss"
! agree "$tmp/one.loss" "$tmp/onec.loss" && ok || fail "--clip-grad-norm=0.5 clipped nothing"
for c in 2:2 4:1; do
  s=${c%%:*} m=${c#*:}
  expect 0 "" mpi "$s" "$dlcc" train $A --backend=ref --clip-grad-norm=0.5 --pipeline="$s" --micro-batches="$m" \
    --save "$tmp/c.safetensors" --log "$tmp/c.jsonl"
  losses "$tmp/c.jsonl" >"$tmp/c.loss"
  agree "$tmp/onec.loss" "$tmp/c.loss" && ok || fail "--clip-grad-norm on $s stages: $(paste "$tmp/onec.loss" "$tmp/c.loss")"
  close "$tmp/onec.ckpt.safetensors" "$tmp/c.ckpt.safetensors" "--clip-grad-norm on $s stages"
done

# Tensor parallel inside the stages (D x T x S): each stage's linear
# pairs and attention heads split over T consecutive ranks, its
# optimizer stepping the whole parameters from the gathered gradients.
# mlp4 on 2 stages of 2 ranks (with its last partial batch, and with
# --clip-grad-norm), the transformer layer on 2 pipelines of 2 stages of
# 2 ranks: one process's at 1e-5.
expect 0 "" mpi 4 "$dlcc" train $R --backend=emu --pipeline=2 --tensor-parallel=2 --micro-batches=2 \
  --save "$tmp/x4.safetensors" --log "$tmp/x4.jsonl"
grep -qx "  stage 1: tensor parallel: split: fc3.weight by output rows, fc4.weight by input columns" "$tmp/out" &&
  grep -qx "  stage 0 (ranks 0-1): 3 ops, 47.5% of the cost, 1408 bytes of parameters: fc1, fc2" "$tmp/out" && ok ||
  fail "the split with tensor parallel: $(cat "$tmp/out")"
# Each rank holds its parts of the stage's shards and their Adam moments:
# stage 1, fc3's 8 rows and bias, fc4's 8 columns, fc4's bias whole, times
# 3, and the step count.
grep -qx "  stage 1: tensor parallel: rank 0 holds 1960 of the 3880 bytes of its parameters and optimizer state" \
  "$tmp/out" && ok || fail "what a rank holds: $(cat "$tmp/out")"
# --resume cuts each rank's parts of the checkpoint's weights and moments.
expect 0 "" mpi 4 "$dlcc" train $R --backend=emu --pipeline=2 --tensor-parallel=2 --epochs 1 --save "$tmp/xh1.safetensors"
expect 0 "" mpi 4 "$dlcc" train $R --backend=emu --pipeline=2 --tensor-parallel=2 --epochs 1 \
  --resume "$tmp/xh1.ckpt.safetensors" --save "$tmp/xh2.safetensors"
close "$tmp/rone.ckpt.safetensors" "$tmp/xh2.ckpt.safetensors" "2 stages of 2 ranks resumed"
same_as x4 rone "2 stages of 2 ranks"
expect 0 "" mpi 4 "$dlcc" train $A --backend=emu --clip-grad-norm=0.5 --pipeline=2 --tensor-parallel=2 \
  --micro-batches=2 --save "$tmp/xc.safetensors"
close "$tmp/onec.ckpt.safetensors" "$tmp/xc.ckpt.safetensors" "--clip-grad-norm on 2 stages of 2 ranks"
expect 0 "" mpi 8 "$dlcc" train $T --backend=emu --pipeline=2 --tensor-parallel=2 --micro-batches=2 \
  --save "$tmp/x8.safetensors" --log "$tmp/x8.jsonl"
grep -qx "  data parallel: 2 pipelines of 2 stages of 2 ranks, each 2 samples of every batch" "$tmp/out" &&
  grep -q "^  stage 0: tensor parallel: split: self_attn.in_proj_weight" "$tmp/out" && ok ||
  fail "2 x 2 x 2: $(cat "$tmp/out")"
same_as x8 tone "the transformer layer on 2 x 2 x 2 ranks"
# weights_first.ir (every weight transposed at the top, as exporters
# write them): each transpose is computed in its reader's stage, so the
# cut carries the activation alone; equal to one process.
W="$t/weights_first.ir --data $t/data --batch 8 --drop-last --loss=cross_entropy --optimizer=sgd --lr=0.1 --epochs 2 --backend=ref"
expect 0 "" "$dlcc" train $W --save "$tmp/wone.safetensors"
expect 0 "" mpi 2 "$dlcc" train $W --pipeline=2 --save "$tmp/wtwo.safetensors"
grep -qx "  cut 0|1: 1 tensor, 512 bytes: f32\[8, 16\]" "$tmp/out" && ok || fail "weights_first.ir's cut: $(cat "$tmp/out")"
close "$tmp/wone.ckpt.safetensors" "$tmp/wtwo.ckpt.safetensors" "weights_first.ir on 2 stages"
# decoder_export.ir's frozen tables (rope.cos, rope.sin, the causal
# mask, drawn by --seed=3) in stage 1 are the whole model's, not a draw
# of the stage's own (38% off before): equal to one process.
E="$t/decoder_export.ir --data $t/attn --batch 4 --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --epochs 2 --seed=3"
expect 0 "" "$dlcc" train $E --backend=emu --save "$tmp/eone.safetensors"
expect 0 "" mpi 2 "$dlcc" train $E --backend=emu --pipeline=2 --micro-batches=1 --save "$tmp/etwo.safetensors"
close "$tmp/eone.ckpt.safetensors" "$tmp/etwo.ckpt.safetensors" "decoder_export.ir's frozen tables on 2 stages"
# --freeze under a pipeline: the whole model's params are marked before
# the split, so a stage without the frozen one compiles, the frozen one
# keeps the whole model's value (its rank's part under tensor parallel)
# and is not gathered: 2 stages, and 2 stages of 2 ranks, equal one
# process (each stage once said "matches no parameter of the model").
F="$t/attn.dl --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --backend=emu --data $t/attn --epochs 1 --batch 4 --freeze=linear1.weight"
expect 0 "" "$dlcc" train $F --save "$tmp/fone.safetensors"
expect 0 "" mpi 2 "$dlcc" train $F --pipeline=2 --micro-batches=1 --save "$tmp/ftwo.safetensors"
close "$tmp/fone.ckpt.safetensors" "$tmp/ftwo.ckpt.safetensors" "--freeze on 2 stages"
expect 0 "" mpi 4 "$dlcc" train $F --pipeline=2 --tensor-parallel=2 --micro-batches=1 --save "$tmp/ffour.safetensors"
close "$tmp/fone.ckpt.safetensors" "$tmp/ffour.ckpt.safetensors" "--freeze on 2 stages of 2 ranks"
# part.ir: stage 1 starts with a split linear, so the gradient it sends
# back is an all-reduce's result read by nothing but the plan's output
# (which must wait for it: 2 stages of 2 ranks equal to one process).
mkdir -p "$tmp/xonly"; cp "$t/data/x.npy" "$tmp/xonly/"
P="$t/part.ir --data $tmp/xonly --batch 8 --drop-last --optimizer=sgd --lr=0.1 --epochs 2"
expect 0 "" "$dlcc" train $P --backend=ref --save "$tmp/pone.safetensors"
expect 0 "" mpi 4 "$dlcc" train $P --backend=emu --pipeline=2 --tensor-parallel=2 --save "$tmp/px.safetensors"
grep -qx "  stage 1: tensor parallel: split: w2 by output rows, w3 by input columns" "$tmp/out" && ok ||
  fail "part.ir's split: $(cat "$tmp/out")"
close "$tmp/pone.ckpt.safetensors" "$tmp/px.ckpt.safetensors" "part.ir on 2 stages of 2 ranks"

# A weight the loss reads again: the one cut leaves the last stage only
# an add, without parameters; three stages cannot be made.
mkdir -p "$tmp/xonly"; cp "$t/data/x.npy" "$tmp/xonly/"
T="$t/tied.ir --data $tmp/xonly --drop-last --batch 8 --backend=ref"
expect 0 "" "$dlcc" train $T --save "$tmp/t1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $T --pipeline=2 --save "$tmp/t2.safetensors"
close "$tmp/t1.ckpt.safetensors" "$tmp/t2.ckpt.safetensors" "a stage without parameters"
expect_sub 1 "dlcc: error: the model cannot be cut into 3 stages: each stage needs an operation, a parameter's readers must share a stage" \
  mpi 3 "$dlcc" train $T --pipeline=3

# Stages the model chooses with stage(): fc1 | fc2, fc3 | fc4, whatever
# the cost says; equal to one process; a count that disagrees refused.
S="$t/mlp4_staged.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8"
expect 0 "" mpi 3 "$dlcc" train $S --backend=ref --pipeline=3 --micro-batches=2 --save "$tmp/marked.safetensors"
close "$tmp/one.ckpt.safetensors" "$tmp/marked.ckpt.safetensors" "stage() marks"
grep -q "^pipeline: 3 stages at the model's stage() marks, 2 micro-batches" "$tmp/out" &&
  grep -q '^  stage 1 (rank 1): 5 ops, .*: fc2, fc3$' "$tmp/out" && ok || fail "the marked split: $(cat "$tmp/out")"
expect_sub 1 "dlcc: error: the model's stage() marks (the first at $t/mlp4_staged.dl:4:8) make 3 stages, but the pipeline has 2" \
  mpi 2 "$dlcc" train $S --backend=ref --pipeline=2

# Dropout in both stages: each micro-batch draws one process's masks
# for its samples, with one process's step count (the checkpoint's
# dlcc.step too).
D="$t/mlpdrop.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8 --backend=ref"
expect 0 "" "$dlcc" train $D --save "$tmp/drop1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $D --pipeline=2 --micro-batches=4 --schedule=1f1b --save "$tmp/drop2.safetensors"
close "$tmp/drop1.ckpt.safetensors" "$tmp/drop2.ckpt.safetensors" "dropout on 2 stages"

# Data parallel over pipelines: 4 ranks, 2 pipelines of 2 stages, each
# 4 samples of every batch in 2 micro-batches of 2; every loss and the
# checkpoint one process's, both schedules the same bits, twice the
# same bytes; dropout draws one process's masks for each pipeline's samples.
for k in gpipe 1f1b; do
  expect 0 "" mpi 4 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=2 --schedule=$k \
    --save "$tmp/dp-$k.safetensors" --log "$tmp/dp-$k.jsonl"
  against "dp-$k" "2 pipelines of 2 stages, $k"
done
grep -qx '  data parallel: 2 pipelines of 2 stages (world rank w is stage w % 2 of pipeline w / 2), each 4 samples of every batch' \
  "$tmp/out" && [ "$(grep -c '^epoch ' "$tmp/out")" -eq 2 ] && ok || fail "2 x 2: rank 0 alone prints: $(cat "$tmp/out")"
cmp -s "$tmp/dp-gpipe.ckpt.safetensors" "$tmp/dp-1f1b.ckpt.safetensors" && ok || fail "2 x 2: GPipe and 1F1B differ"
expect 0 "" mpi 4 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=2 --save "$tmp/dp-again.safetensors"
cmp -s "$tmp/dp-gpipe.ckpt.safetensors" "$tmp/dp-again.ckpt.safetensors" && ok || fail "2 x 2 twice: not the same bytes"
# --bucket-mb: the gradients averaged over the pipelines in buckets
# (0.001 MiB: fc1's two, then fc2's weight and bias apart; 100: one) are
# the same bits as one all-reduce each.
for mb in 0.001 100; do
  expect 0 "" mpi 4 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=2 --bucket-mb=$mb \
    --save "$tmp/dp-bucket.safetensors"
  cmp -s "$tmp/dp-gpipe.ckpt.safetensors" "$tmp/dp-bucket.ckpt.safetensors" && ok ||
    fail "2 x 2, --bucket-mb=$mb: not the same bytes as one all-reduce each"
  cp "$tmp/out" "$tmp/bucket-$mb.out"
done
grep -qx "  stage 0: gradients averaged over the 2 pipelines in 3 buckets of up to 0.001 MiB" "$tmp/bucket-0.001.out" &&
  grep -qx "  stage 0: gradients averaged over the 2 pipelines in 1 bucket of up to 100 MiB" "$tmp/bucket-100.out" &&
  ok || fail "--bucket-mb's buckets: $(cat "$tmp/bucket-0.001.out" "$tmp/bucket-100.out")"
expect 0 "" mpi 4 "$dlcc" train $D --pipeline=2 --micro-batches=2 --schedule=1f1b --save "$tmp/drop4.safetensors"
close "$tmp/drop1.ckpt.safetensors" "$tmp/drop4.ckpt.safetensors" "dropout on 2 pipelines of 2 stages"

# Batchnorm: each micro-batch normalizes over its own samples and
# updates the running statistics once (PyTorch's pipelines).  With one
# micro-batch that is one process, the batchnorm in the last stage (the
# cost's cut: only the backward plan runs it) or in the first (the
# marks': its forward plan normalizes too).  "twice" repeats each batch
# of 4, so 2 micro-batches of 4 see the same images: the weights are one
# process's at batch 4, and the running statistics take two updates by
# the same statistics, one of momentum 1 - 0.9^2 (cnnbn_m19.dl).
O="--loss=cross_entropy --optimizer=sgd --momentum=0.9 --lr=0.1 --shuffle=false --epochs 2"
expect 0 "" "$dlcc" train "$t/cnnbn.dl" $O --backend=ref --batch 4 --data "$t/cnnbn/half" --save "$tmp/bn1.safetensors"
expect 0 "" mpi 2 "$dlcc" train "$t/cnnbn.dl" $O --backend=ref --batch 4 --data "$t/cnnbn/half" --pipeline=2 \
  --save "$tmp/bnlast.safetensors"
grep -q '^  stage 1 (rank 1): .*: bn, fc$' "$tmp/out" && ok || fail "the batchnorm's stage: $(cat "$tmp/out")"
close "$tmp/bn1.ckpt.safetensors" "$tmp/bnlast.ckpt.safetensors" "batchnorm in the last stage, 1 micro-batch"
expect 0 "" mpi 2 "$dlcc" train "$t/cnnbn_staged.dl" $O --backend=emu --batch 4 --data "$t/cnnbn/half" --pipeline=2 \
  --save "$tmp/bnfirst.safetensors"
grep -q '^  stage 0 (rank 0): .*: conv, bn$' "$tmp/out" && ok || fail "the batchnorm's stage: $(cat "$tmp/out")"
close "$tmp/bn1.ckpt.safetensors" "$tmp/bnfirst.ckpt.safetensors" "batchnorm in the first stage, 1 micro-batch"
expect 0 "" "$dlcc" train "$t/cnnbn_m19.dl" $O --backend=ref --batch 4 --data "$t/cnnbn/half" --save "$tmp/m19.safetensors"
for c in cnnbn:ref cnnbn_staged:emu; do
  expect 0 "" mpi 2 "$dlcc" train "$t/${c%%:*}.dl" $O --backend="${c#*:}" --batch 8 --micro-batches=2 \
    --data "$t/cnnbn/twice" --pipeline=2 --save "$tmp/bn2.safetensors"
  close "$tmp/m19.ckpt.safetensors" "$tmp/bn2.ckpt.safetensors" "$c: batchnorm over 2 micro-batches"
done
st_values "$tmp/bn1.ckpt.safetensors" >"$tmp/a.v"; st_values "$tmp/bn2.ckpt.safetensors" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && fail "2 micro-batches' running statistics equal one update's" || ok
# --deferred-bn: the running statistics updated once a batch by all its
# micro-batches' values: on "twice" (each micro-batch normalizes as the
# whole batch of 8 would) one process at batch 8, running statistics
# (unbiased over the 8) included; refused without --pipeline.
expect 0 "" "$dlcc" train "$t/cnnbn.dl" $O --backend=ref --batch 8 --data "$t/cnnbn/twice" --save "$tmp/bn8.safetensors"
for c in cnnbn:ref cnnbn_staged:emu; do
  expect 0 "" mpi 2 "$dlcc" train "$t/${c%%:*}.dl" $O --backend="${c#*:}" --batch 8 --micro-batches=2 \
    --data "$t/cnnbn/twice" --pipeline=2 --deferred-bn --save "$tmp/bnd.safetensors"
  close "$tmp/bn8.ckpt.safetensors" "$tmp/bnd.ckpt.safetensors" "$c: --deferred-bn over 2 micro-batches"
done
expect 1 "dlcc: error: --deferred-bn is for micro-batches: give --micro-batches=M (or --pipeline=S) too" \
  "$dlcc" train "$t/cnnbn.dl" $O --batch 8 --data "$t/cnnbn/twice" --deferred-bn
# --sync-bn over 2 pipelines of 2 stages: each micro-batch's statistics
# over both pipelines' samples, in the forward and backward plans of the
# batchnorm's stage.  With 1 micro-batch that is the global batch of 4,
# one process at batch 4 (bn1), with the batchnorm in either stage;
# without --sync-bn each pipeline's 2 differ from it.  On "quad" every
# micro-batch has a batch of 8's statistics, so 2 micro-batches with
# --deferred-bn are one process at batch 8 (the unbiased running
# variance over the pipelines' values together, 8 samples a batch).
for c in cnnbn:ref cnnbn_staged:emu; do
  expect 0 "" mpi 4 "$dlcc" train "$t/${c%%:*}.dl" $O --backend="${c#*:}" --batch 4 --data "$t/cnnbn/half" \
    --pipeline=2 --sync-bn --save "$tmp/bnsync.safetensors"
  close "$tmp/bn1.ckpt.safetensors" "$tmp/bnsync.ckpt.safetensors" "$c: --sync-bn over 2 pipelines"
done
expect 0 "" mpi 4 "$dlcc" train "$t/cnnbn.dl" $O --backend=ref --batch 4 --data "$t/cnnbn/half" --pipeline=2 \
  --save "$tmp/bnnosync.safetensors"
st_values "$tmp/bn1.ckpt.safetensors" >"$tmp/a.v"; st_values "$tmp/bnnosync.ckpt.safetensors" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && fail "2 pipelines' own batchnorm statistics equal the global batch's" || ok
expect 0 "" "$dlcc" train "$t/cnnbn.dl" $O --backend=ref --batch 8 --data "$t/cnnbn/quad" --save "$tmp/quad1.safetensors"
expect 0 "" mpi 4 "$dlcc" train "$t/cnnbn_staged.dl" $O --backend=emu --batch 8 --micro-batches=2 --schedule=1f1b \
  --data "$t/cnnbn/quad" --pipeline=2 --sync-bn --deferred-bn --save "$tmp/quad4.safetensors"
close "$tmp/quad1.ckpt.safetensors" "$tmp/quad4.ckpt.safetensors" "--sync-bn --deferred-bn, 2 pipelines of 2 micro-batches"
expect 0 "" mpi 4 "$dlcc" train "$t/cnnbn_staged.dl" $O --backend=emu --batch 8 --micro-batches=2 --schedule=1f1b \
  --data "$t/cnnbn/quad" --pipeline=2 --deferred-bn --save "$tmp/quad4n.safetensors"
st_values "$tmp/quad1.ckpt.safetensors" >"$tmp/a.v"; st_values "$tmp/quad4n.ckpt.safetensors" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && fail "--deferred-bn without --sync-bn counts the pipelines' values together" || ok
# With tensor parallel inside the stages too (2 x 2 x 2): the plans' sums
# go over the tensor group, --sync-bn's means over the pipelines.
B="$t/tinybn_tp.dl --loss=cross_entropy --optimizer=sgd --lr=0.05 --data $t/data --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $B --backend=ref --save "$tmp/tbn1.safetensors"
expect 0 "" mpi 8 "$dlcc" train $B --backend=emu --tensor-parallel=2 --pipeline=2 --sync-bn --save "$tmp/tbn8.safetensors"
close "$tmp/tbn1.ckpt.safetensors" "$tmp/tbn8.ckpt.safetensors" "--sync-bn, 2 pipelines of 2 stages of 2 ranks"

# An ONNX model (when this dlcc reads ONNX): its initializers are the
# whole model's weights, which each stage takes its part of.
if "$dlcc" --onnx-support >/dev/null 2>&1; then
  X="${top_srcdir:-.}/tests/pipeinf/mlp3.onnx --loss=cross_entropy --optimizer=adamw --lr=0.05 --data $t/data --epochs 2 --drop-last --batch 8"
  expect 0 "" "$dlcc" train $X --backend=ref --save "$tmp/onnx1.safetensors"
  expect 0 "" mpi 2 "$dlcc" train $X --backend=emu --pipeline=2 --micro-batches=2 --save "$tmp/onnx2.safetensors"
  close "$tmp/onnx1.ckpt.safetensors" "$tmp/onnx2.ckpt.safetensors" "an ONNX model on 2 stages"
fi

# Refusals.
expect_sub 1 "dlcc: error: --pipeline=4 does not divide the 2 ranks of the launch (mpirun -np 4 for one pipeline, a multiple of 4 for data parallel over pipelines of 4)" \
  mpi 2 "$dlcc" train $A --backend=ref --pipeline=4
expect_sub 1 "dlcc: error: --batch=12 does not divide into 2 pipelines of 4 micro-batches: give a multiple of 8" \
  mpi 4 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=4 --batch 12
expect_sub 1 "dlcc: error: --pipeline=2 with --tensor-parallel=2 does not divide the 2 ranks of the launch (mpirun -np 4 for one pipeline, a multiple of 4 for data parallel over pipelines)" \
  mpi 2 "$dlcc" train $A --backend=ref --pipeline=2 --tensor-parallel=2
expect_sub 1 "dlcc: error: --batch=8 does not divide into 3 micro-batches: give a multiple of 3" \
  mpi 2 "$dlcc" train $A --backend=ref --pipeline=2 --micro-batches=3
expect_sub 1 "--precision=f16 under a pipeline needs parameters in the last stage, whose optimizer keeps the loss scale; stage 1 has none" \
  mpi 2 "$dlcc" train $T --pipeline=2 --precision=f16

# Bad data on rank 1 only: rank 0 stops with rank 1's message.
mkdir "$tmp/bad"; cp "$t/data/target.npy" "$tmp/bad/"; cp "$t/bad/x_f64.npy" "$tmp/bad/x.npy"
expect_sub 1 "dlcc: error: rank 0 stops: rank 1: $tmp/bad/x.npy: samples of f64 [4], but the model's input 'x' takes f32 [4] per sample" \
  mpi 1 "$dlcc" train $A --backend=ref --pipeline=2 --dist-timeout=30 : -np 1 "$dlcc" train $A --backend=ref \
  --pipeline=2 --data "$tmp/bad"
# The same on 2 x 2: rank 3 (pipeline 1's stage 1) ends the other three with its message.
expect_sub 1 "dlcc: error: rank 0 stops: rank 3: $tmp/bad/x.npy: samples of f64 [4]" \
  mpi 3 "$dlcc" train $A --backend=ref --pipeline=2 --dist-timeout=30 : -np 1 "$dlcc" train $A --backend=ref \
  --pipeline=2 --data "$tmp/bad"
# A stage that leaves early (1 epoch where rank 0 runs 2): rank 0 waits
# for the gradients of its next micro-batch, times out, says so, ends the job.
start=$(date +%s)
expect_sub 1 "dlcc: rank 0: receiving gradients from rank 1 timed out after 2 s waiting for the other ranks" \
  mpi 1 "$dlcc" train $A --backend=ref --pipeline=2 --dist-timeout=2 : -np 1 "$dlcc" train $A --backend=ref \
  --pipeline=2 --epochs 1
[ $(($(date +%s) - start)) -lt 60 ] && ok || fail "the timeout took $(($(date +%s) - start)) s"

finish pipeline_cli
