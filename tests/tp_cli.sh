#!/bin/sh
# Tensor-parallel `dlcc train` and `dlcc run` under mpirun on emu
# (docs/parallel.md): T ranks equal one process (losses and every tensor
# of the checkpoints at f32 1e-5), the same bytes twice, each rank
# holding only its parts of the split parameters and their optimizer
# state (the figures rank 0 prints and the plans'), and the refusals.
# Skips without mpirun or without MPI in dlcc.
set -u
. "${top_srcdir:-.}/tests/clilib.sh"
dlcc="${top_builddir:-.}/dlcc"
t="${top_srcdir:-.}/tests/train"
. "${top_srcdir:-.}/tests/mpilib.sh"
A="$t/tiny.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/data --epochs 2"

# Tensor parallel (Megatron-style): the MLP's fc1 split by rows and fc2
# by columns over 2 and 4 ranks, each rank on the whole batch, equals
# one process (losses and every tensor of the checkpoint, gathered from
# the ranks that own each part), the same bytes twice; the validation
# runs on the gathered weights.
expect 0 "" "$dlcc" train $A --batch 8 --val "$t/val" --save "$tmp/tp1.safetensors" --log "$tmp/tp1.jsonl"
grep '^epoch' "$tmp/out" >"$tmp/tp1.out"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --val "$t/val" --tensor-parallel=2 --save "$tmp/tp2.safetensors" \
  --log "$tmp/tp2.jsonl"
grep -qx "tensor parallel: split: fc1.weight by output rows, fc2.weight by input columns" "$tmp/out" && ok ||
  fail "the split line: $(cat "$tmp/out")"
# Rank 0 holds half of fc1 and fc2 (weights, biases of fc1, and their
# Adam moments): 106 of the 202 floats; fc2's bias and the step count
# are whole on every rank.
grep -q "^tensor parallel: rank 0 holds 424 of the 808 bytes of parameters and optimizer state; its plan: " "$tmp/out" &&
  ok || fail "what rank 0 holds: $(cat "$tmp/out")"
grep '^epoch' "$tmp/out" | diff - "$tmp/tp1.out" >/dev/null && ok || fail "2-way tensor parallel: $(cat "$tmp/out")"
close "$tmp/tp1.ckpt.safetensors" "$tmp/tp2.ckpt.safetensors" "2-way tensor parallel against one process"
grep '"step"' "$tmp/tp1.jsonl" | losses /dev/stdin >"$tmp/a.v"; grep '"step"' "$tmp/tp2.jsonl" | losses /dev/stdin >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "2-way tensor parallel losses: $(paste "$tmp/a.v" "$tmp/b.v")"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --val "$t/val" --tensor-parallel=2 --save "$tmp/tp2b.safetensors"
cmp -s "$tmp/tp2.ckpt.safetensors" "$tmp/tp2b.ckpt.safetensors" && ok || fail "tensor parallel twice: not bit-identical"
# --resume: each rank cuts its parts of the whole checkpoint (weights
# and Adam's moments); one epoch and one more equal two.
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --tensor-parallel=2 --epochs 1 --save "$tmp/tpe1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $A --batch 8 --tensor-parallel=2 --epochs 1 --resume "$tmp/tpe1.ckpt.safetensors" \
  --save "$tmp/tpe2.safetensors"
close "$tmp/tp1.ckpt.safetensors" "$tmp/tpe2.ckpt.safetensors" "tensor parallel resumed against one process"
expect 0 "" mpi 4 "$dlcc" train $A --batch 8 --tensor-parallel=4 --save "$tmp/tp4.safetensors"
close "$tmp/tp1.ckpt.safetensors" "$tmp/tp4.ckpt.safetensors" "4-way tensor parallel against one process"
grep -q "^tensor parallel: rank 0 holds 232 of the 808 bytes" "$tmp/out" && ok || fail "4 ways: $(cat "$tmp/out")"
# 2 x 2: data parallel over 2 tensor groups of 2 consecutive ranks, each
# group on its half of every batch (4 samples, the last 3), the ranks
# of a tensor rank averaging their shards' gradients: one process at
# the global batch.
expect 0 "" mpi 4 "$dlcc" train $A --batch 8 --val "$t/val" --tensor-parallel=2 --save "$tmp/dt.safetensors" \
  --log "$tmp/dt.jsonl"
grep -qx "data parallel: 2 groups of 2 tensor-parallel ranks" "$tmp/out" &&
  grep '^epoch' "$tmp/out" | diff - "$tmp/tp1.out" >/dev/null && ok || fail "2 x 2: $(cat "$tmp/out")"
close "$tmp/tp1.ckpt.safetensors" "$tmp/dt.ckpt.safetensors" "2 x 2 against one process"
grep '"step"' "$tmp/dt.jsonl" | losses /dev/stdin >"$tmp/b.v"; grep '"step"' "$tmp/tp1.jsonl" | losses /dev/stdin >"$tmp/a.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "2 x 2 losses: $(paste "$tmp/a.v" "$tmp/b.v")"
# 2 x 2 with a batchnorm (whole on every rank of a tensor group) and
# --sync-bn: its statistics over the data group, so one process at the
# global batch; --bucket-mb joins the data group's gradient means, the
# same bits.
B="$t/tinybn_tp.dl --loss=cross_entropy --optimizer=sgd --lr=0.05 --backend=emu --data $t/data --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $B --save "$tmp/bn1.safetensors"
expect 0 "" mpi 4 "$dlcc" train $B --tensor-parallel=2 --sync-bn --save "$tmp/bnsync.safetensors"
grep -qx "tensor parallel: split: fc1.weight by output rows, fc2.weight by input columns" "$tmp/out" && ok ||
  fail "2 x 2 --sync-bn: the split line: $(cat "$tmp/out")"
close "$tmp/bn1.ckpt.safetensors" "$tmp/bnsync.ckpt.safetensors" "2 x 2 --sync-bn against one process"
expect 0 "" mpi 4 "$dlcc" train $B --tensor-parallel=2 --sync-bn --bucket-mb=0.0001 --save "$tmp/bnbucket.safetensors"
cmp -s "$tmp/bnsync.ckpt.safetensors" "$tmp/bnbucket.ckpt.safetensors" && ok ||
  fail "2 x 2 --bucket-mb: not the same bits"
# A transformer encoder layer: the q, k, v projections split by heads
# with the output projection by columns, then the MLP.  SGD: the key
# bias's gradient is zero but for rounding, which Adam's normalization
# would blow up into updates of the rounding's sign.
T="$t/attn.dl --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --backend=emu --data $t/attn --epochs 2 --batch 4"
expect 0 "" "$dlcc" train $T --save "$tmp/at1.safetensors" --log "$tmp/at1.jsonl"
expect 0 "" mpi 2 "$dlcc" train $T --tensor-parallel=2 --save "$tmp/at2.safetensors" --log "$tmp/at2.jsonl"
[ "$(grep -c '^tensor parallel: split: ' "$tmp/out")" -eq 2 ] && ok || fail "attention's split lines: $(cat "$tmp/out")"
close "$tmp/at1.ckpt.safetensors" "$tmp/at2.ckpt.safetensors" "attention, 2-way tensor parallel"
losses "$tmp/at1.jsonl" >"$tmp/a.v"; losses "$tmp/at2.jsonl" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "attention tensor parallel losses: $(paste "$tmp/a.v" "$tmp/b.v")"
# 2 heads do not split 4 ways: attention stays whole on every rank (and
# the line says why), the MLP splits, and the result is still one
# process's.
expect 0 "" mpi 4 "$dlcc" train $T --tensor-parallel=4 --save "$tmp/at4.safetensors"
grep -q "^tensor parallel: not split: self_attn.in_proj_weight\[0:8\]: a reshape to f32\[4, 4, 2, 4\] does not keep the split whole (heads not a multiple of 4)" "$tmp/out" &&
  grep -qx "tensor parallel: split: linear1.weight by output rows, linear2.weight by input columns" "$tmp/out" && ok ||
  fail "2 heads 4 ways: $(cat "$tmp/out")"
close "$tmp/at1.ckpt.safetensors" "$tmp/at4.ckpt.safetensors" "attention whole, MLP 4-way"
# An embedding of 64 rows (tokens.dl, some ids negative, read from the
# end), larger than the MLP's weights: split by rows, each rank looking up
# the ids in its rows, the lookups summed; with the MLP, on 2 and 4
# ranks and 2 x 2, one process (Adam).  Rank 0 of 2 holds half the
# table and its moments.
K="$t/tokens.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/tokens --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $K --save "$tmp/k1.safetensors" --log "$tmp/k1.jsonl"
for k in 2 4; do
  expect 0 "" mpi $k "$dlcc" train $K --tensor-parallel=$k --save "$tmp/k$k.safetensors" --log "$tmp/k$k.jsonl"
  grep -qx "tensor parallel: split: wte.weight by rows, each rank looking up the ids in its rows" "$tmp/out" && ok ||
    fail "the embedding's split line, $k ranks: $(cat "$tmp/out")"
  close "$tmp/k1.ckpt.safetensors" "$tmp/k$k.ckpt.safetensors" "an embedding split $k ways"
  grep '"step"' "$tmp/k1.jsonl" | losses /dev/stdin >"$tmp/a.v"; grep '"step"' "$tmp/k$k.jsonl" | losses /dev/stdin >"$tmp/b.v"
  agree "$tmp/a.v" "$tmp/b.v" && ok || fail "an embedding split $k ways, losses: $(paste "$tmp/a.v" "$tmp/b.v")"
done
grep -q "^tensor parallel: rank 0 holds 2152 of the 8488 bytes" "$tmp/out" && ok || fail "embedding, 4 ways: $(cat "$tmp/out")"
expect 0 "" mpi 4 "$dlcc" train $K --tensor-parallel=2 --save "$tmp/kd.safetensors"
close "$tmp/k1.ckpt.safetensors" "$tmp/kd.ckpt.safetensors" "an embedding split 2 ways, 2 x 2"
# Composed with a pipeline: the embedding's stage splits it, the MLP's
# stage the MLP.
expect 0 "" mpi 4 "$dlcc" train $K --pipeline=2 --micro-batches=2 --tensor-parallel=2 --save "$tmp/kp.safetensors"
grep -qx "  stage 0: tensor parallel: split: wte.weight by rows, each rank looking up the ids in its rows" "$tmp/out" &&
  ok || fail "the embedding's stage: $(cat "$tmp/out")"
close "$tmp/k1.ckpt.safetensors" "$tmp/kp.ckpt.safetensors" "an embedding split 2 ways in a pipeline of 2 stages"
# An output layer tied to the embedding (tied_lm.ir): the table splits
# by rows for the lookups and for the logits, whose cross entropy runs
# on each rank's classes (one sample's class ignored, -100); with label
# smoothing too.  2 and 4 ranks equal one process, each rank holding
# 1/T of the table.
M="$t/tied_lm.ir --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/lm --epochs 2 --batch 8"
for s in 0 0.1; do
  expect 0 "" "$dlcc" train $M --label-smoothing=$s --save "$tmp/m1.safetensors"
  for k in 2 4; do
    [ "$s" = 0.1 ] && [ $k = 4 ] && continue
    expect 0 "" mpi $k "$dlcc" train $M --label-smoothing=$s --tensor-parallel=$k --save "$tmp/m$k.safetensors"
    grep -qx "tensor parallel: split: wte by output rows, the cross entropy by classes" "$tmp/out" &&
      grep -qx "tensor parallel: split: wte by rows, each rank looking up the ids in its rows" "$tmp/out" && ok ||
      fail "the tied output layer's split lines: $(cat "$tmp/out")"
    close "$tmp/m1.ckpt.safetensors" "$tmp/m$k.ckpt.safetensors" "a tied output layer split $k ways, smoothing $s"
  done
done
grep -q "^tensor parallel: rank 0 holds 4708 of the 9412 bytes" "$tmp/out" && ok || fail "tied, 2 ways: $(cat "$tmp/out")"
# A sequence model (seq_lm.dl): logits [N, 64, 4] transposed for the
# loss, as PyTorch's cross_entropy wants them; the loss takes them back
# as rows [N 4, 64], split by classes on 2 ranks: one process.
Q="$t/seq_lm.dl --loss=cross_entropy --optimizer=adamw --lr=0.05 --backend=emu --data $t/seq_lm --epochs 2 --batch 8"
expect 0 "" "$dlcc" train $Q --save "$tmp/q1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $Q --tensor-parallel=2 --save "$tmp/q2.safetensors"
grep -qx "tensor parallel: split: head.weight by output rows, the cross entropy by classes" "$tmp/out" && ok ||
  fail "the sequence model's split lines: $(cat "$tmp/out")"
close "$tmp/q1.ckpt.safetensors" "$tmp/q2.ckpt.safetensors" "a sequence model's output layer split 2 ways"
# Its inference: the output layer widens its input, so it splits with
# no loss after it, its logits gathered whole: one process's outputs.
mkdir "$tmp/q1r" "$tmp/q2r"
QR="$t/seq_lm.dl --backend=emu --weights $tmp/q1.safetensors --input x=$t/seq_lm/x.npy"
expect 0 "" "$dlcc" run $QR --output-dir "$tmp/q1r"
expect 0 "" mpi 2 "$dlcc" run $QR --tensor-parallel=2 --output-dir "$tmp/q2r"
grep -qx "dlcc: tensor parallel: split: head.weight by output rows, its outputs gathered" "$tmp/err" && ok ||
  fail "the output layer's inference split: $(cat "$tmp/err")"
npy_values "$tmp/q1r/logits.npy" >"$tmp/a.v"; npy_values "$tmp/q2r/logits.npy" >"$tmp/b.v"
[ "$(wc -l <"$tmp/a.v")" -eq 6144 ] && agree "$tmp/a.v" "$tmp/b.v" && ok || fail "run with the output layer split 2 ways"
mkdir "$tmp/k1r" "$tmp/k2r"
KR="$t/tokens.dl --backend=emu --weights $tmp/k1.safetensors --input x=$t/tokens/x.npy"
expect 0 "" "$dlcc" run $KR --output-dir "$tmp/k1r"
expect 0 "" mpi 2 "$dlcc" run $KR --tensor-parallel=2 --output-dir "$tmp/k2r"
npy_values "$tmp/k1r/logits.npy" >"$tmp/a.v"; npy_values "$tmp/k2r/logits.npy" >"$tmp/b.v"
[ "$(wc -l <"$tmp/a.v")" -eq 72 ] && agree "$tmp/a.v" "$tmp/b.v" && ok || fail "run with an embedding split 2 ways"
# as_one IR SPLITS WHAT: tests/train/IR trained (SGD with momentum, 2
# epochs of tests/train/attn) on 2 tensor-parallel ranks equals one
# process (checkpoint and losses), and rank 0 prints SPLITS split lines.
as_one() {
  s="$t/$1 --loss=mse --optimizer=sgd --momentum=0.9 --lr=0.05 --backend=emu --data $t/attn --epochs 2 --batch 4"
  expect 0 "" "$dlcc" train $s --save "$tmp/one.safetensors" --log "$tmp/one.jsonl"
  expect 0 "" mpi 2 "$dlcc" train $s --tensor-parallel=2 --save "$tmp/two.safetensors" --log "$tmp/two.jsonl"
  [ "$(grep -c '^tensor parallel: split: ' "$tmp/out")" -eq "$2" ] && ok || fail "$3's split lines: $(cat "$tmp/out")"
  close "$tmp/one.ckpt.safetensors" "$tmp/two.ckpt.safetensors" "$3, 2-way tensor parallel"
  losses "$tmp/one.jsonl" >"$tmp/a.v"; losses "$tmp/two.jsonl" >"$tmp/b.v"
  agree "$tmp/a.v" "$tmp/b.v" && ok || fail "$3's losses: $(paste "$tmp/a.v" "$tmp/b.v")"
}
# As an exporter writes a layer (exported.ir: matmuls by transposed
# weights, the scores' matmul, a learned position bias, softmax and
# dropout of the probabilities, dropout in the MLP): the heads and the
# MLP split, each rank draws its block of each mask (a rank drawing the
# whole tensor's first block instead would leave the checkpoint up to
# 84% off).
as_one exported.ir 2 "the exported layer with dropout"
grep -qx "tensor parallel: split: q.weight, k.weight, v.weight by output rows, o.weight by input columns" "$tmp/out" &&
  ok || fail "the exported layer's split lines: $(cat "$tmp/out")"
# nn.MultiheadAttention as exported (mha_export.ir: one in_proj_weight
# product gathered into q, k and v through [S, B H, d] reshapes, dropout
# on the projection): q's, k's and v's rows split by heads, each rank
# drawing its blocks of the mask.
as_one mha_export.ir 1 "nn.MultiheadAttention's export"
grep -qx "tensor parallel: split: in_proj_weight\[0:8\], in_proj_weight\[8:16\], in_proj_weight\[16:24\] by output rows, out_proj.weight by input columns" "$tmp/out" &&
  ok || fail "the exported attention's split line: $(cat "$tmp/out")"
# GPT-2's layout with Llama's rotary embedding (decoder_export.ir:
# weights stored [in, out], c_attn cut into q, k and v by slices,
# rotate_half's slices and concat): split by the weights' columns and
# rows.
as_one decoder_export.ir 2 "the exported decoder"
# Each rank's plan holds its parts: less weight memory and arena than
# one process's (attention's projections and the MLP at 1/2; each
# weight's 256-byte alignment and the layernorms stay).
plan_mem() {
  "$dlcc" "$t/attn.dl" -D N=4 --loss=mse --grad --optimizer=adamw --tensor-parallel=$1 --emit=plan 2>/dev/null | sed -n 2p
}
# (the arena's bytes move with fusion; only that it shrinks is checked)
a1=$(plan_mem 1) a2=$(plan_mem 2:1)
arena() { echo "$1" | sed 's/.*arena \([0-9]*\) bytes.*/\1/'; }
[ "${a1%%,*}" = "weights 12544 bytes" ] && [ "${a2%%,*}" = "weights 10240 bytes" ] &&
  [ "$(arena "$a2")" -lt "$(arena "$a1")" ] && ok || fail "the plans' memory: $a1; $a2"
# The plan: the two regions' forward sums and the second's input
# gradient (the first's input is the model's: no gradient).
n=$("$dlcc" "$t/attn.dl" -D N=4 --loss=mse --grad --optimizer=sgd --tensor-parallel=2:1 --emit=plan 2>"$tmp/err" |
    grep -c '^ *[0-9]*  allreduce_sum ')
[ "$n" -eq 3 ] && grep -c "^dlcc: tensor parallel: split: " "$tmp/err" | grep -qx 2 && ok ||
  fail "the tensor-parallel plan: $n sums; $(cat "$tmp/err")"
# Inference: dlcc run on 2 and 4 ranks, each cutting its parts from the
# trained weights, gives one process's outputs (rank 0 writes them).
R="$t/attn.dl --backend=emu --weights $tmp/at1.safetensors --input x=$t/attn/x.npy"
mkdir "$tmp/r1" "$tmp/r2" "$tmp/r4"
expect 0 "" "$dlcc" run $R --output-dir "$tmp/r1"
for k in 2 4; do
  expect 0 "" mpi $k "$dlcc" run $R --tensor-parallel=$k --output-dir "$tmp/r$k"
  [ "$(grep -c '^y: f32\[12, 4, 8\]' "$tmp/out")" -eq 1 ] && ok || fail "run, $k ranks: rank 0 alone prints: $(cat "$tmp/out")"
  npy_values "$tmp/r1/y.npy" >"$tmp/a.v"; npy_values "$tmp/r$k/y.npy" >"$tmp/b.v"
  [ "$(wc -l <"$tmp/a.v")" -eq 384 ] && agree "$tmp/a.v" "$tmp/b.v" && ok || fail "run on $k ranks against one process"
  [ "$(grep -c '^dlcc: tensor parallel: split: ' "$tmp/err")" -eq $((4 / k)) ] && ok || fail "run's split lines: $(cat "$tmp/err")"
done
# On the ref backend, its sums through MPI on host memory: the same.
mkdir "$tmp/rr2"
expect 0 "" mpi 2 "$dlcc" run ${R%--backend=emu*}--backend=ref ${R#*--backend=emu} --tensor-parallel=2 --output-dir "$tmp/rr2"
npy_values "$tmp/rr2/y.npy" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "run on 2 ranks on ref against one process"
# 4 ranks of --tensor-parallel=2: 2 groups of 2 ranks, each on half of
# the batch (data parallel over the groups, as pipelines of one stage),
# rank 0 writing the whole batch's outputs; 3 ranks do not divide.
mkdir "$tmp/rd4"
expect 0 "" mpi 4 "$dlcc" run $R --tensor-parallel=2 --output-dir "$tmp/rd4"
grep -q "^  data parallel: 2 pipelines of 1 stage of 2 ranks, each 6 samples of every batch" "$tmp/out" && ok ||
  fail "run on 2 x 2 ranks: $(cat "$tmp/out")"
npy_values "$tmp/rd4/y.npy" >"$tmp/b.v"
agree "$tmp/a.v" "$tmp/b.v" && ok || fail "run on 2 groups of 2 ranks against one process"
expect_sub 1 "dlcc: error: --tensor-parallel=2 does not divide the 3 ranks of the launch (mpirun -np 2, or a multiple of 2 for data parallel over groups of 2)" \
  mpi 3 "$dlcc" run $R --tensor-parallel=2
expect 0 "" "$dlcc" train ${A%--backend=emu*}--backend=ref ${A#*--backend=emu} --batch 8 --save "$tmp/tpref1.safetensors"
expect 0 "" mpi 2 "$dlcc" train ${A%--backend=emu*}--backend=ref ${A#*--backend=emu} --batch 8 --tensor-parallel=2 \
  --save "$tmp/tpref2.safetensors"
close "$tmp/tpref1.ckpt.safetensors" "$tmp/tpref2.ckpt.safetensors" "tensor parallel on 2 ranks on ref"
expect_sub 1 "dlcc: error: --tensor-parallel=2 needs 2 ranks, and this launch has 1 (mpirun -np 2)" \
  "$dlcc" run $R --tensor-parallel=2
expect_sub 1 "dlcc: error: --tensor-parallel does not combine with --bench" "$dlcc" run $R --tensor-parallel=2 --bench=1
expect_sub 1 "dlcc: error: --tensor-parallel=4 does not divide the 2 ranks of the launch (mpirun -np 4 for tensor parallel alone, a multiple of 4 for data parallel over groups of 4)" \
  mpi 2 "$dlcc" train $A --batch 8 --tensor-parallel=4
expect_sub 1 "dlcc: error: --tensor-parallel expects a whole number >= 1, got '0'" \
  "$dlcc" train $A --batch 8 --tensor-parallel=0

# --clip-grad-norm: the norm's terms of the split gradients summed over
# the tensor group, the whole ones' counted once: one process's (1e-5),
# which clipping changed.
expect 0 "" "$dlcc" train $A --batch 8 --clip-grad-norm=0.3 --save "$tmp/c1.safetensors" --log "$tmp/c1.jsonl"
grep '"step"' "$tmp/c1.jsonl" | losses /dev/stdin >"$tmp/c1.v"
grep '"step"' "$tmp/tp1.jsonl" | losses /dev/stdin >"$tmp/a.v"
! agree "$tmp/a.v" "$tmp/c1.v" && ok || fail "--clip-grad-norm=0.3 clipped nothing"
for k in 2 4; do
  expect 0 "" mpi $k "$dlcc" train $A --batch 8 --clip-grad-norm=0.3 --tensor-parallel=$k --save "$tmp/c$k.safetensors" \
    --log "$tmp/c$k.jsonl"
  grep '"step"' "$tmp/c$k.jsonl" | losses /dev/stdin >"$tmp/b.v"
  agree "$tmp/c1.v" "$tmp/b.v" && ok || fail "--clip-grad-norm on $k ranks: $(paste "$tmp/c1.v" "$tmp/b.v")"
  close "$tmp/c1.ckpt.safetensors" "$tmp/c$k.ckpt.safetensors" "--clip-grad-norm on $k ranks"
done
# f16 with the loss scaler: its overflow check over the tensor group
# too.  The values at f16's precision (SGD); mlp4_offset.dl's overflows
# skip the same steps, so the scaler's state (the checkpoint's last
# three values: the scale, the step count, the count of clean steps)
# is one process's exactly.
H="$t/tiny.dl --loss=cross_entropy --optimizer=sgd --lr=0.05 --backend=emu --data $t/data --epochs 2 --batch 8 --precision=f16"
expect 0 "" "$dlcc" train $H --save "$tmp/h1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $H --tensor-parallel=2 --save "$tmp/h2.safetensors"
st_values "$tmp/h1.ckpt.safetensors" >"$tmp/a.v"; st_values "$tmp/h2.ckpt.safetensors" >"$tmp/b.v"
agree_at 1e-2 "$tmp/a.v" "$tmp/b.v" && ok || fail "f16 on 2 ranks against one process"
O="$t/mlp4_offset.dl --loss=cross_entropy --optimizer=sgd --lr=0.01 --backend=emu --data $t/data --epochs 3 --drop-last --batch 8 --precision=f16"
expect 0 "" "$dlcc" train $O --save "$tmp/o1.safetensors"
expect 0 "" mpi 2 "$dlcc" train $O --tensor-parallel=2 --save "$tmp/o2.safetensors"
st_values "$tmp/o1.ckpt.safetensors" | tail -3 >"$tmp/a.v"; st_values "$tmp/o2.ckpt.safetensors" | tail -3 >"$tmp/b.v"
[ "$(head -1 "$tmp/a.v")" != 65536 ] && cmp -s "$tmp/a.v" "$tmp/b.v" && ok ||
  fail "f16 overflows on 2 ranks: the scaler's state $(paste "$tmp/a.v" "$tmp/b.v")"

finish tp_cli
